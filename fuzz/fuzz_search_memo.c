/*
 * fuzz_search_memo.c: libFuzzer target for the packed figures the daemon
 * keeps between searches (search_memo_unpack_all: rows of its search_evals
 * table, read back after a restart, possibly from a damaged file that
 * passed its checksum by chance or was written by another build). Any input
 * must either fail with a code and a message or give a memo whose entries
 * are valid (degrees at least 1, options in range, status ok or
 * out_of_memory, figures finite and not negative), each findable, and that
 * pack back to exactly the input bytes when none was a duplicate. The seed
 * corpus in fuzz/corpus/fuzz_search_memo runs with the tests (fuzz/replay.c).
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "search/search.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_search_memo: %s\n", what);
        abort();
    }
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    search_memo m;
    di_error err;
    search_memo_init(&m);
    di_error_clear(&err);
    int rc = search_memo_unpack_all(data, size, &m, &err);
    if (rc != 0) {
        check(rc == DI_EINVAL && err.msg[0] != '\0', "an error without a code or message");
        check(m.n <= size / SEARCH_MEMO_BYTES, "more entries than whole records");
    } else {
        check(size % SEARCH_MEMO_BYTES == 0, "a partial record accepted");
        check(m.n <= size / SEARCH_MEMO_BYTES, "more entries than records");
    }
    for (uint32_t i = 0; i < m.n; i++) {
        const search_memo_entry *e = &m.v[i];
        check(e->cand.dp && e->cand.tp && e->cand.pp && e->cand.microbatches, "a zero degree");
        check(e->f.status == SEARCH_OK || e->f.status == SEARCH_OOM, "a status not simulated");
        check(isfinite(e->f.step_time_s) && e->f.step_time_s >= 0, "a bad step time");
        check(search_memo_find(&m, &e->cand, e->composed) == e, "an entry not found");
        check(e->unsteady <= e->composed, "a failed composition check on a full simulation");
    }
    if (rc == 0 && m.n == size / SEARCH_MEMO_BYTES) {
        uint8_t *out;
        size_t len;
        search_memo_pack_all(&m, &out, &len);
        check(len == size && (size == 0 || memcmp(out, data, size) == 0),
              "pack after unpack changed the bytes");
        di_free(out);
    }
    search_memo_fini(&m);
    return 0;
}
