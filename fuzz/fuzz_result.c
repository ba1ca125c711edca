/*
 * fuzz_result.c: libFuzzer target for a simulation result in protobuf
 * (distir.v1.SimResult: what the daemon sends, caches and reads back, and
 * what the CLI decodes). Any input must decode or fail cleanly with a
 * message. A result that decodes must encode, decode again and give the
 * same JSON as the first decoding (timelines shared between devices
 * included); otherwise the target aborts. The seed corpus in
 * fuzz/corpus/fuzz_result runs with the tests (fuzz/replay.c).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/sim.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    sim_result *r = NULL, *r2 = NULL;
    uint8_t *a = NULL;
    size_t alen = 0;
    char *j1, *j2;
    di_error err;

    di_error_clear(&err);
    if (sim_result_unpack(data, size, &r, &err) != 0) {
        /* A failure must leave nothing behind and say why. */
        if (r != NULL || err.code == 0 || err.msg[0] == '\0')
            abort();
        return 0;
    }
    j1 = sim_result_to_json(r);
    if (sim_result_pack(r, &a, &alen) != 0)
        abort();
    if (sim_result_unpack(a, alen, &r2, &err) != 0) {
        fprintf(stderr, "fuzz_result: re-decoding an encoding failed: %s\n", err.msg);
        abort();
    }
    j2 = sim_result_to_json(r2);
    if (strcmp(j1, j2) != 0) {
        fprintf(stderr, "fuzz_result: the JSON changed through an encoding\n");
        abort();
    }
    di_free(j1);
    di_free(j2);
    di_free(a);
    sim_result_free(r);
    sim_result_free(r2);
    return 0;
}
