/*
 * onnx_ex.h: the ONNX importer's extended API (onnx.h holds the basic
 * entry point): import options (how to size dimensions the model leaves
 * symbolic, strictness, the device) and decoding of a serialized
 * TensorProto into an executor tensor (the ONNX backend tests store their
 * inputs and expected outputs that way).
 */
#ifndef DISTIR_ONNX_EX_H
#define DISTIR_ONNX_EX_H

#include "exec/exec.h"
#include "ir/ir.h"

typedef struct onnx_options {
    int strict;           /* unsupported ops are errors instead of dist.opaque ops */
    int64_t default_dim;  /* size of a dimension with no value (default 1) */
    uint32_t ndim;        /* named sizes for symbolic dimensions (dim_param) */
    const char *const *dim_names;
    const int64_t *dim_values;
    int32_t device;       /* the device every value lives on (default 0) */
    uint32_t nconst;      /* graph inputs to treat as constants with these values */
    const char *const *const_names;
    const ex_tensor *const_values;
} onnx_options;

/* Defaults: not strict, unknown dimensions 1, device 0. */
void onnx_options_default(onnx_options *o);

/* onnx_import with options; o may be NULL for the defaults. */
int onnx_import_opts(const uint8_t *data, size_t len, const onnx_options *o, ir_module **out,
                     di_error *err);

/*
 * Decodes a serialized onnx.TensorProto (depth and size checked) into t,
 * whose dtype follows the tensor's data type. If name is not NULL it
 * receives the tensor's name (a copy the caller frees with di_free).
 */
int onnx_tensor_decode(const uint8_t *data, size_t len, ex_tensor *t, char **name,
                       di_error *err);

#endif
