/*
 * onnx.h: the ONNX importer (onnx-ml.proto compiled with protoc-c).
 */
#ifndef DISTIR_ONNX_H
#define DISTIR_ONNX_H

#include "ir/ir.h"

/*
 * The newest opset of the default domain the importer reads (ONNX 1.19's):
 * ops whose meaning changed up to it are read as each opset defines them
 * (docs/onnx.md).
 */
#define ONNX_OPSET_MAX 24

/*
 * Imports an ONNX ModelProto from untrusted bytes (depth and size checked
 * before unpacking). Unsupported ops become dist.opaque ops unless strict.
 * On success the caller frees *out.
 */
int onnx_import(const uint8_t *data, size_t len, int strict, ir_module **out, di_error *err);

#endif
