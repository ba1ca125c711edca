/*
 * fuzz_onnx.c: libFuzzer target for the ONNX importer. Arbitrary bytes go
 * through onnx_import (size and depth checks, unpack, the graph walk with
 * constant folding) both leniently and strictly; a module that imports must
 * verify. The seed corpus (fuzz/corpus/fuzz_onnx) holds small models from
 * libonnx-testdata. Built with clang -fsanitize=fuzzer by `make fuzz`, and
 * with a replay main in every other build.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "ir/ir.h"
#include "onnx/onnx.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    for (int strict = 0; strict < 2; strict++) {
        ir_module *m = NULL;
        di_error err;
        di_error_clear(&err);
        if (onnx_import(data, size, strict, &m, &err) == 0) {
            /* What the importer builds is a valid module. */
            if (ir_verify(m, &err) != 0)
                abort();
            ir_module_free(m);
        } else if (m != NULL) {
            abort(); /* a failed import leaves nothing behind */
        }
    }
    return 0;
}
