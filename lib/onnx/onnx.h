/*
 * onnx.h: the ONNX importer (onnx-ml.proto compiled with protoc-c).
 */
#ifndef DISTIR_ONNX_H
#define DISTIR_ONNX_H

#include "ir/ir.h"

/*
 * Imports an ONNX ModelProto from untrusted bytes (depth and size checked
 * before unpacking). Unsupported ops become dist.opaque ops unless strict.
 * On success the caller frees *out.
 */
int onnx_import(const uint8_t *data, size_t len, int strict, ir_module **out, di_error *err);

#endif
