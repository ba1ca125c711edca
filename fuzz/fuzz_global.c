/*
 * fuzz_global.c: libFuzzer target for the global view on hostile modules:
 * the bytes are IR text (a module with meshes, dist.annotate_sharding,
 * dist.redistribute, func.call), or, when they start with "P:", a
 * placement list for ir_placement_parse. A module that parses and verifies
 * must either propagate (xform_shard) into a module that verifies and lower
 * (xform_lower_global) into one that verifies, or fail with a code and a
 * message; placement text must parse to at most IR_MAX_RANK valid entries
 * that format back and parse to the same list. The seed corpus in
 * fuzz/corpus/fuzz_global runs with the tests (fuzz/replay.c).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"
#include "xform/xform.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
placements(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1), buf[256];
    int64_t p[IR_MAX_RANK], q[IR_MAX_RANK];
    uint32_t n, n2;
    memcpy(s, data, size);
    s[size] = '\0';
    if (ir_placement_parse(s, p, IR_MAX_RANK, &n) == 0) {
        if (n > IR_MAX_RANK)
            abort();
        for (uint32_t i = 0; i < n; i++)
            if (p[i] < IR_PLACE_PMAX)
                abort();
        ir_placement_format(p, n, buf, sizeof buf);
        if (ir_placement_parse(buf, q, IR_MAX_RANK, &n2) != 0 || n2 != n ||
            memcmp(p, q, n * sizeof *p) != 0)
            abort();
    }
    free(s);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ir_module *m = NULL, *g = NULL, *l = NULL;
    di_error err;
    if (size >= 2 && data[0] == 'P' && data[1] == ':') {
        placements(data + 2, size - 2);
        return 0;
    }
    if (size > 1 << 16)
        return 0;
    di_error_clear(&err);
    if (ir_parse((const char *)data, size, &m, &err) != 0)
        return 0;
    if (m->nop > 256 || ir_verify(m, &err) != 0) {
        ir_module_free(m);
        return 0;
    }
    if (xform_shard(m, &g, &err) == 0) {
        if (g == NULL || ir_verify(g, &err) != 0)
            abort();
        if (xform_lower_global(g, &l, &err) == 0) {
            if (l == NULL || ir_verify(l, &err) != 0)
                abort();
        } else if (l != NULL || err.code == 0 || err.msg[0] == '\0') {
            abort();
        }
    } else if (g != NULL || err.code == 0 || err.msg[0] == '\0') {
        abort();
    }
    ir_module_free(l);
    ir_module_free(g);
    ir_module_free(m);
    return 0;
}
