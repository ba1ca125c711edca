/*
 * validate.h: predictions against measured training runs (docs/validation.md).
 *
 * A runs file is a CSV with a header naming its columns, as vTrain's
 * ground_truth_single.csv and ground_truth_multi.csv are: GPUs, global
 * batch, micro batch, hidden size, attention heads, layers, sequence
 * length, tensor, data and pipeline parallelism, measured iteration time in
 * ms, and optionally the parameters in billions. Each row becomes a GPT
 * model and a Megatron-LM strategy (validate_row_setup); the caller
 * simulates it and records the prediction; validate_stats summarises the
 * errors (MAPE, median, max, Spearman's rank correlation) per model size and
 * over all rows. Rows that cannot be expressed keep their reason: they are
 * listed, never dropped silently.
 */
#ifndef DISTIR_VALIDATE_H
#define DISTIR_VALIDATE_H

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"
#include "models/models.h"
#include "strategy/strategy.h"

typedef struct validate_row {
    uint32_t line;        /* 1-based line in the file */
    double params_b;      /* the file's figure, or 0 when it has none */
    uint32_t gpus;
    uint32_t global_batch, micro_batch;
    uint32_t hidden, heads, layers, seq;
    uint32_t tp, dp, pp;
    double measured_ms;
    double predicted_ms;  /* set by the caller; < 0: not simulated */
    double peak_gib;      /* set by the caller: the predicted peak memory of the busiest GPU */
    char error[160];      /* why the row is not simulated, or "" */
} validate_row;

/*
 * Parses a runs file. On success *rows (di_free) holds *n rows, in file
 * order, each either complete or with its error set. Fails (DI_EDECODE)
 * only when the header lacks a required column or the text is not a CSV
 * of at most max_rows rows.
 */
int validate_parse_csv(const char *text, size_t len, uint32_t max_rows, validate_row **rows,
                       uint32_t *n, di_error *err);

/* How runs were trained: what the files do not say. */
typedef struct validate_setup {
    int64_t vocab;          /* 50,257 (GPT-2's, vTrain's) */
    ir_dtype dtype;         /* f16 */
    xform_optim optimizer;  /* Adam */
    int recompute;          /* STRATEGY_RECOMPUTE_FULL (activation checkpointing) */
    double dropout;         /* 0.1 */
    int fuse;               /* 1: Megatron-LM's fused kernels (sim_options.fuse) */
    int no_grad_accum_fusion; /* 0: and its gradient accumulation fusion (sim_options') */
} validate_setup;

void validate_setup_default(validate_setup *v);

/*
 * The model and strategy of a row (the strategy initialized here; the
 * caller finalizes it), or DI_EINVAL with the reason in row->error (degrees
 * that do not multiply to the GPUs, a batch that does not divide, ...).
 */
int validate_row_setup(validate_row *row, const validate_setup *v, models_gpt *g, strategy *s);

/* The model-size label of a row: "3.6B" from the file, else from the formula. */
void validate_size_label(const validate_row *row, const validate_setup *v, char *out, size_t n);

typedef struct validate_stats {
    uint32_t rows;       /* rows with a prediction */
    double mape;         /* mean absolute percentage error, in % */
    double median;       /* median absolute percentage error, in % */
    double max;          /* largest, in % */
    double spearman;     /* rank correlation of predicted and measured; NaN under 3 rows */
    double bias;         /* mean signed error, in % (positive: predictions too slow) */
} validate_stats;

/* Statistics over the rows whose index idx[0..n) has a prediction. */
void validate_stats_of(const validate_row *rows, const uint32_t *idx, uint32_t n,
                       validate_stats *out);

#endif
