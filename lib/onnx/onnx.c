/*
 * onnx.c: the ONNX importer. Not written yet: every call reports that.
 */
#include "onnx/onnx.h"

int
onnx_import(const uint8_t *data, size_t len, int strict, ir_module **out, di_error *err)
{
    (void)data;
    (void)len;
    (void)strict;
    *out = NULL;
    return di_error_set(err, DI_EUNSUPPORTED, "ONNX import is not available yet");
}
