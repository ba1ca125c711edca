/*
 * fuzz_runs.c: libFuzzer target for the runs-file parser of `distir
 * validate` (lib/validate): any bytes either parse into rows in file order,
 * each complete (positive counts, a positive finite time) or carrying the
 * reason it is not, with every complete row then turned into a model and a
 * strategy or refused with a reason; or the whole file fails with a code and
 * a message and nothing allocated. Statistics over the rows are finite. The
 * seed corpus in fuzz/corpus/fuzz_runs runs with the tests (fuzz/replay.c).
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "validate/validate.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    validate_row *rows = NULL;
    validate_setup v;
    uint32_t n = 0, *idx;
    validate_stats st;
    di_error err;
    di_error_clear(&err);
    int rc = validate_parse_csv((const char *)data, size, 1000, &rows, &n, &err);
    if (rc != 0) {
        if (rows != NULL || n != 0 || err.code != rc || err.msg[0] == '\0')
            abort();
        return 0;
    }
    validate_setup_default(&v);
    idx = malloc((n ? n : 1) * sizeof *idx);
    if (idx == NULL)
        abort();
    for (uint32_t i = 0; i < n; i++) {
        validate_row *r = &rows[i];
        models_gpt g;
        strategy s;
        char label[16];
        idx[i] = i;
        if (i > 0 && r->line <= rows[i - 1].line)
            abort();
        if (r->error[0] == '\0' &&
            (r->gpus == 0 || r->tp == 0 || r->dp == 0 || r->pp == 0 || r->micro_batch == 0 ||
             !(r->measured_ms > 0) || !isfinite(r->measured_ms)))
            abort();
        int ok = validate_row_setup(r, &v, &g, &s) == 0;
        if (ok == (r->error[0] != '\0'))
            abort();
        if (ok) {
            /* Pipelined rows come as per-stage degrees (Megatron-LM's layout). */
            uint64_t gpus = s.nstages ? 0 : (uint64_t)s.dp * s.tp * s.pp;
            for (uint32_t k = 0; k < s.nstages; k++)
                gpus += (uint64_t)s.stages[k].dp * s.stages[k].tp;
            if (gpus != r->gpus || (s.nstages && s.nstages != r->pp))
                abort();
        }
        strategy_fini(&s);
        validate_size_label(r, &v, label, sizeof label);
        /* A prediction equal to the measurement: every error statistic is 0. */
        if (ok)
            r->predicted_ms = r->measured_ms;
    }
    validate_stats_of(rows, idx, n, &st);
    if (st.mape != 0 || st.max != 0 || st.median != 0 || st.bias != 0)
        abort();
    free(idx);
    di_free(rows);
    return 0;
}
