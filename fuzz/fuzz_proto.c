/*
 * fuzz_proto.c: libFuzzer target for the protobuf form of a module. Any input
 * must decode or fail cleanly (ir_decode with the default limits). A module
 * that decodes must encode, decode again, and encode to the same bytes as the
 * first time; otherwise the target aborts. Built with a replay main in every
 * build (fuzz/replay.c), so the seed corpus in fuzz/corpus/fuzz_proto runs
 * with the tests.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"
#include "ir/pb.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ir_module *m = NULL, *m2 = NULL;
    uint8_t *a = NULL, *b = NULL;
    size_t alen = 0, blen = 0;
    di_error err;

    di_error_clear(&err);
    if (ir_decode(data, size, NULL, &m, &err) != 0) {
        /* A failure must leave nothing behind and say why. */
        if (m != NULL || err.code == 0 || err.msg[0] == '\0')
            abort();
        return 0;
    }
    if (ir_encode(m, &a, &alen) != 0)
        abort();
    if (ir_decode(a, alen, NULL, &m2, &err) != 0) {
        fprintf(stderr, "fuzz_proto: re-decoding an encoding failed: %s\n", err.msg);
        abort();
    }
    if (ir_encode(m2, &b, &blen) != 0)
        abort();
    if (alen != blen || memcmp(a, b, alen) != 0) {
        fprintf(stderr, "fuzz_proto: the second encoding differs from the first\n");
        abort();
    }
    di_free(a);
    di_free(b);
    ir_module_free(m);
    ir_module_free(m2);
    return 0;
}
