/*
 * compare.h: a candidate's simulation result against a baseline's, as CI
 * asks it: did the step time or the peak memory regress beyond what is
 * allowed, by how much, and where does the difference come from.
 *
 * A metric regresses when it grows by more than its allowance, the larger
 * of its relative limit times the baseline value and its absolute limit
 * (both 0 by default: any growth; the simulator is deterministic, so an
 * unchanged model compares exactly equal). Growth equal to the allowance
 * passes. The explanation compares the device that sets each figure: for
 * time the busiest device of each result (compute, exposed communication,
 * idle: pipeline bubbles and waiting), for memory the device at the peak
 * (bytes by class).
 */
#ifndef DISTIR_SIM_COMPARE_H
#define DISTIR_SIM_COMPARE_H

#include "sim/sim.h"

typedef struct sim_compare_limits {
    double time_rel;    /* allowed step-time growth, fraction of the baseline (0.02: 2%) */
    double time_abs_s;  /* allowed step-time growth, seconds */
    double memory_rel;  /* allowed peak-memory growth, fraction */
    uint64_t memory_abs; /* allowed peak-memory growth, bytes */
} sim_compare_limits;

enum { SIM_CMP_TIME, SIM_CMP_MEMORY, SIM_CMP_NMETRIC };

typedef struct sim_compare_metric {
    const char *name;  /* "step_time_s", "peak_memory_bytes" */
    double base, cand; /* seconds or bytes */
    double delta;      /* cand - base */
    double rel;        /* delta / base (0 when base is 0 and delta is 0) */
    double allowed;    /* the allowance, same unit */
    int regressed;
} sim_compare_metric;

/*
 * A setting the two results were simulated with that differs (sim_settings;
 * only where both recorded it): "simulator" (version), "hardware" (its figures:
 * shown by name, with a hash prefix when the names agree), "strategy",
 * "kernels" (fused, eager), "math" (tf32, ieee), "overlap" (on, off: --no-overlap),
 * "strict" (on, off). Then the difference may be theirs, not the module's.
 */
#define SIM_CMP_MAX_DIFF 7
typedef struct sim_compare_diff {
    const char *setting;
    char base[160], cand[160]; /* as shown, truncated with "..." */
} sim_compare_diff;

typedef struct sim_compare {
    sim_compare_metric m[SIM_CMP_NMETRIC];
    sim_compare_diff diff[SIM_CMP_MAX_DIFF];
    uint32_t ndiff;
    int regressed; /* any metric */
    /* Where the step-time difference comes from (busiest device of each): */
    double d_compute_s, d_exposed_comm_s, d_idle_s, d_flops;
    /* Where the memory difference comes from (peak device of each), bytes by class: */
    int64_t d_by_class[SIM_NMEMCLASS];
} sim_compare;

/* Parses "2%", "0.02", "150ms", "1.5s", "512MiB", "2GB" style limits (relative or absolute). */
int sim_compare_parse_limit(const char *text, int memory, double *rel, double *abs_value,
                            di_error *err);
void sim_compare_results(const sim_result *base, const sim_result *cand,
                         const sim_compare_limits *lim, sim_compare *out);
/*
 * One line per metric, the verdict and the explanation, and a warning line
 * when settings differ (the CLI's text form).
 */
void sim_compare_text(const sim_compare *c, di_buf *out);
/* The settings that differ, one line without its end (for a warning). */
void sim_compare_settings_text(const sim_compare *c, di_buf *out);
/*
 * A JSON object: metrics with deltas, limits and verdicts, the explanation,
 * and "settings_differ" (a list, empty when none differs).
 */
void sim_compare_json(const sim_compare *c, di_buf *out);

#endif
