/*
 * validate.c: runs files, their rows as models and strategies, and error
 * statistics (validate.h).
 */
#include "validate/validate.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    COL_PARAMS,
    COL_GPUS,
    COL_GBATCH,
    COL_MBATCH,
    COL_HIDDEN,
    COL_HEADS,
    COL_LAYERS,
    COL_SEQ,
    COL_TP,
    COL_DP,
    COL_PP,
    COL_TIME,
    NCOL
};

/* Header names (vTrain's), lowercase; the parameters column is optional. */
static const char *const col_names[NCOL] = {
    "parameters (billion)",
    "# gpus",
    "global batch",
    "micro batch",
    "hidden size",
    "attention heads",
    "# layers",
    "sequence length",
    "tensor parallelism",
    "data parallelism",
    "pipeline parallelism",
    "iteration time (ms)",
};

#define MAX_FIELDS 64
#define MAX_FIELD 128

/*
 * Splits one line (no quotes: the runs files have none) into trimmed,
 * lowercased fields. Returns the field count, or -1 when a line has too
 * many fields or a field is too long.
 */
static int
split_line(const char *p, const char *end, char fields[][MAX_FIELD], int lower)
{
    int nf = 0;
    for (;;) {
        const char *q = p;
        size_t k = 0;
        while (q < end && *q != ',')
            q++;
        while (p < q && (*p == ' ' || *p == '\t'))
            p++;
        const char *e = q;
        while (e > p && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r'))
            e--;
        if (nf == MAX_FIELDS || (size_t)(e - p) >= MAX_FIELD)
            return -1;
        for (; p < e; p++)
            fields[nf][k++] = lower && *p >= 'A' && *p <= 'Z' ? (char)(*p - 'A' + 'a') : *p;
        fields[nf++][k] = '\0';
        if (q == end)
            return nf;
        p = q + 1;
    }
}

static int
parse_num(const char *s, double *out)
{
    char *end;
    errno = 0;
    *out = strtod(s, &end);
    return errno == 0 && end != s && *end == '\0' && isfinite(*out);
}

/* A positive integer field that fits 32 bits. */
static int
parse_count(const char *s, uint32_t *out)
{
    double v;
    if (!parse_num(s, &v) || v < 1 || v > 4294967295.0 || v != floor(v))
        return 0;
    *out = (uint32_t)v;
    return 1;
}

int
validate_parse_csv(const char *text, size_t len, uint32_t max_rows, validate_row **rows,
                   uint32_t *n, di_error *err)
{
    char(*fields)[MAX_FIELD] = di_xmalloc(MAX_FIELDS * sizeof *fields);
    int col[NCOL], nf, ncols = 0, rc = 0;
    const char *p = text, *end = text + len;
    uint32_t line = 0, cap = 0;
    validate_row *out = NULL;

    *rows = NULL;
    *n = 0;
    for (int c = 0; c < NCOL; c++)
        col[c] = -1;
    /* The header: the first non-empty line. */
    while (p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        const char *le = eol ? eol : end;
        line++;
        if (le > p && !(le - p == 1 && *p == '\r')) {
            if ((nf = split_line(p, le, fields, 1)) < 0) {
                rc = di_error_set(err, DI_EDECODE, "line %u: too many or too long fields", line);
                goto fail;
            }
            for (int f = 0; f < nf; f++)
                for (int c = 0; c < NCOL; c++)
                    if (strcmp(fields[f], col_names[c]) == 0)
                        col[c] = f;
            ncols = nf;
            p = eol ? eol + 1 : end;
            break;
        }
        p = eol ? eol + 1 : end;
    }
    for (int c = COL_GPUS; c < NCOL; c++)
        if (col[c] < 0) {
            rc = di_error_set(err, DI_EDECODE, "the header has no column '%s'", col_names[c]);
            goto fail;
        }
    while (p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        const char *le = eol ? eol : end;
        validate_row *r;
        double t;
        line++;
        if (le == p || (le - p == 1 && *p == '\r')) {
            p = eol ? eol + 1 : end;
            continue;
        }
        if (*n == max_rows) {
            rc = di_error_set(err, DI_ETOOBIG, "more than %u rows", max_rows);
            goto fail;
        }
        DI_GROW(&out, &cap, *n + 1);
        r = &out[(*n)++];
        memset(r, 0, sizeof *r);
        r->line = line;
        r->predicted_ms = -1;
        nf = split_line(p, le, fields, 0);
        p = eol ? eol + 1 : end;
        if (nf != ncols) {
            snprintf(r->error, sizeof r->error, "%d fields where the header has %d", nf, ncols);
            continue;
        }
        uint32_t *counts[NCOL] = {NULL,       &r->gpus,  &r->global_batch, &r->micro_batch,
                                  &r->hidden, &r->heads, &r->layers,       &r->seq,
                                  &r->tp,     &r->dp,    &r->pp,           NULL};
        for (int c = COL_GPUS; c < COL_TIME && r->error[0] == '\0'; c++)
            if (!parse_count(fields[col[c]], counts[c]))
                snprintf(r->error, sizeof r->error, "'%s' is not a positive integer: '%s'",
                         col_names[c], fields[col[c]]);
        if (r->error[0] == '\0' && (!parse_num(fields[col[COL_TIME]], &t) || t <= 0))
            snprintf(r->error, sizeof r->error, "'%s' is not a positive time: '%s'",
                     col_names[COL_TIME], fields[col[COL_TIME]]);
        r->measured_ms = r->error[0] == '\0' ? t : 0;
        if (r->error[0] == '\0' && col[COL_PARAMS] >= 0 &&
            (!parse_num(fields[col[COL_PARAMS]], &r->params_b) || r->params_b < 0))
            snprintf(r->error, sizeof r->error, "'%s' is not a number: '%s'", col_names[COL_PARAMS],
                     fields[col[COL_PARAMS]]);
    }
    di_free(fields);
    *rows = out;
    return 0;
fail:
    di_free(fields);
    di_free(out);
    *n = 0;
    return rc;
}

void
validate_setup_default(validate_setup *v)
{
    v->vocab = 50257;
    v->dtype = IR_F16;
    v->optimizer = XFORM_OPTIM_ADAM;
    v->recompute = STRATEGY_RECOMPUTE_FULL;
    v->dropout = 0.1;
    v->fuse = 1;
}

int
validate_row_setup(validate_row *row, const validate_setup *v, models_gpt *g, strategy *s)
{
    uint64_t per_step;
    strategy_init(s);
    if (row->error[0] != '\0')
        return DI_EINVAL;
    if ((uint64_t)row->tp * row->dp * row->pp != row->gpus) {
        snprintf(row->error, sizeof row->error, "tp %u x dp %u x pp %u is not the %u GPUs", row->tp,
                 row->dp, row->pp, row->gpus);
        return DI_EINVAL;
    }
    per_step = (uint64_t)row->dp * row->micro_batch;
    if (row->global_batch % per_step != 0) {
        snprintf(row->error, sizeof row->error,
                 "global batch %u is not a multiple of dp %u x micro batch %u", row->global_batch,
                 row->dp, row->micro_batch);
        return DI_EINVAL;
    }
    if (row->hidden % row->heads != 0 || row->heads % row->tp != 0) {
        snprintf(row->error, sizeof row->error,
                 "%u heads do not split hidden %u or tensor parallelism %u", row->heads,
                 row->hidden, row->tp);
        return DI_EINVAL;
    }
    models_gpt_init(g);
    g->layers = row->layers;
    g->hidden = row->hidden;
    g->heads = row->heads;
    g->seq = row->seq;
    {
        /* Megatron-LM pads the vocabulary to a multiple of 128 x tp (make-vocab-size-divisible-by). */
        uint64_t q = 128 * (uint64_t)row->tp;
        g->vocab = (int64_t)(((uint64_t)v->vocab + q - 1) / q * q);
    }
    g->batch = row->global_batch;
    g->dtype = v->dtype;
    g->dropout = v->dropout;
    g->final_ln_params = 1; /* Megatron-LM's final layer norm has its scale and bias */
    g->train.optimizer = v->optimizer;
    s->dp = row->dp;
    s->tp = row->tp;
    s->pp = row->pp;
    s->microbatches = (uint32_t)(row->global_batch / per_step);
    if (row->pp > 1) {
        s->schedule = STRATEGY_SCHEDULE_1F1B; /* with pp 1: gradient accumulation */
        /*
         * Megatron-LM gives every pipeline stage layers / pp transformer layers
         * (and refuses other counts), the embedding joining the first and the
         * head and the loss the last; xform_apply would balance the stages by
         * their cost instead, moving layers off the head's stage.
         */
        if (row->pp > STRATEGY_MAX_DEGREE) {
            snprintf(row->error, sizeof row->error, "pipeline parallelism %u is above %u",
                     row->pp, STRATEGY_MAX_DEGREE);
            return DI_EINVAL;
        }
        if (row->layers % row->pp != 0) {
            snprintf(row->error, sizeof row->error,
                     "%u layers do not split into %u pipeline stages", row->layers, row->pp);
            return DI_EINVAL;
        }
        s->stages = di_xcalloc(row->pp, sizeof *s->stages);
        s->nstages = row->pp;
        for (uint32_t k = 0; k < row->pp; k++) {
            s->stages[k].dp = row->dp;
            s->stages[k].tp = row->tp;
            s->stages[k].layers = row->layers / row->pp;
        }
        s->dp = s->tp = 1;
    }
    s->recompute = (uint8_t)v->recompute;
    return 0;
}

void
validate_size_label(const validate_row *row, const validate_setup *v, char *out, size_t n)
{
    double b = row->params_b;
    if (b <= 0) {
        /* Megatron-LM's count (models_gpt_parameters), in doubles: any row's sizes fit. */
        double l = row->layers, h = row->hidden;
        b = (12 * l * h * h + 13 * l * h + ((double)v->vocab + row->seq) * h + 2 * h) / 1e9;
    }
    snprintf(out, n, b >= 10 ? "%.0fB" : b >= 1 ? "%.1fB" : "%.2fB", b);
}

static int
cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Ranks of v[0..n) (1-based, ties share their mean rank) into rank. */
static void
ranks(const double *v, uint32_t n, double *rank)
{
    for (uint32_t i = 0; i < n; i++) {
        uint32_t below = 0, equal = 0;
        for (uint32_t j = 0; j < n; j++) {
            below += v[j] < v[i];
            equal += v[j] == v[i];
        }
        rank[i] = below + (equal + 1) / 2.0;
    }
}

void
validate_stats_of(const validate_row *rows, const uint32_t *idx, uint32_t n, validate_stats *out)
{
    double *ape = di_xmalloc((n ? n : 1) * sizeof *ape);
    double *pred = di_xmalloc((n ? n : 1) * sizeof *pred);
    double *meas = di_xmalloc((n ? n : 1) * sizeof *meas);
    uint32_t m = 0;
    memset(out, 0, sizeof *out);
    for (uint32_t i = 0; i < n; i++) {
        const validate_row *r = &rows[idx[i]];
        double e;
        if (r->predicted_ms < 0 || r->error[0] != '\0')
            continue;
        e = 100.0 * (r->predicted_ms - r->measured_ms) / r->measured_ms;
        out->bias += e;
        ape[m] = fabs(e);
        pred[m] = r->predicted_ms;
        meas[m] = r->measured_ms;
        out->mape += ape[m];
        if (ape[m] > out->max)
            out->max = ape[m];
        m++;
    }
    out->rows = m;
    out->spearman = NAN;
    if (m > 0) {
        out->mape /= m;
        out->bias /= m;
        qsort(ape, m, sizeof *ape, cmp_double);
        out->median = m % 2 ? ape[m / 2] : (ape[m / 2 - 1] + ape[m / 2]) / 2;
    }
    if (m >= 3) {
        double *rp = di_xmalloc(m * sizeof *rp), *rm = di_xmalloc(m * sizeof *rm);
        double mp = 0, mm = 0, sxy = 0, sxx = 0, syy = 0;
        ranks(pred, m, rp);
        ranks(meas, m, rm);
        for (uint32_t i = 0; i < m; i++) {
            mp += rp[i];
            mm += rm[i];
        }
        mp /= m;
        mm /= m;
        for (uint32_t i = 0; i < m; i++) {
            sxy += (rp[i] - mp) * (rm[i] - mm);
            sxx += (rp[i] - mp) * (rp[i] - mp);
            syy += (rm[i] - mm) * (rm[i] - mm);
        }
        if (sxx > 0 && syy > 0)
            out->spearman = sxy / sqrt(sxx * syy);
        di_free(rp);
        di_free(rm);
    }
    di_free(ape);
    di_free(pred);
    di_free(meas);
}
