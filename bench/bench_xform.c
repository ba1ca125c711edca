/*
 * bench_xform.c: strategy transform speed.
 *
 * 1. Microseconds per produced op of xform_apply for a few GPT-3 strategies
 *    (target: under 1 us; the original DistIR transform costs 40-50 us).
 * 2. gpt3-175b (bf16, batch 512) with dp 8, tp 8, pp 16, 64 microbatches,
 *    1F1B: transformed and simulated on 128 a100-dgx nodes (target: under
 *    100 ms on one core for both together). The distributed module holds a
 *    function per stage, direction and variant (first, middle, last
 *    microbatch), which the 2048 chunks (16 stages x 64 microbatches x 2)
 *    call, and an element-wise send for every activation crossing a stage,
 *    so its size grows with microbatches only by a call and a few sends per
 *    chunk; the figure shows where the time goes. `bench_xform quick` runs
 *    the 175b case with 8 microbatches.
 * 3. llama3-405b on 16,384 H100s (below).
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ir/ir.h"
#include "models/models.h"
#include "sim/hw.h"
#include "sim/sim.h"
#include "xform/xform.h"

static double
now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static ir_module *
gpt(const char *preset, int64_t batch)
{
    models_gpt c;
    ir_module *m = NULL;
    di_error err;
    models_gpt_init(&c);
    if (models_gpt_preset(preset, &c, &err) != 0) {
        fprintf(stderr, "%s\n", err.msg);
        exit(1);
    }
    c.batch = batch;
    c.dtype = IR_BF16;
    if (models_gpt_build(&c, &m, &err) != 0) {
        fprintf(stderr, "%s\n", err.msg);
        exit(1);
    }
    return m;
}

/* Transforms m under s (best of three); returns the module of the last run. */
static ir_module *
transform(const ir_module *m, const strategy *s, double *sec)
{
    ir_module *out = NULL;
    di_error err;
    *sec = 1e30;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = now(), t;
        ir_module_free(out);
        if (xform_apply(m, s, NULL, &out, &err) != 0) {
            fprintf(stderr, "xform_apply: %s\n", err.msg);
            exit(1);
        }
        t = now() - t0;
        if (t < *sec)
            *sec = t;
    }
    return out;
}

static void
per_op(const char *preset, int64_t batch, uint32_t dp, uint32_t tp, uint32_t pp, uint32_t m,
       strategy_recompute rec, uint32_t zero, strategy_stage *st)
{
    ir_module *src = gpt(preset, batch), *out;
    strategy s;
    char buf[256];
    double sec;
    xform_strategy_init(&s);
    s.dp = dp;
    s.tp = tp;
    s.pp = pp;
    s.microbatches = m;
    s.recompute = rec;
    s.zero = zero;
    if (st) { /* nested: pp groups with their own degrees */
        s.dp = s.tp = 1;
        s.nstages = pp;
        s.stages = st;
    }
    out = transform(src, &s, &sec);
    strategy_format(&s, buf, sizeof buf);
    printf("%-10s %9u ops %7.1f ms %6.3f us/op  %s\n", preset, out->nop - 1, sec * 1e3,
           sec * 1e6 / (out->nop - 1), buf);
    ir_module_free(out);
    ir_module_free(src);
}

/*
 * 3. llama3-405b (bf16, Adam, fused attention) on 16,384 H100s
 *    (h100-dgx:2048), 1F1B, full recomputation, 16 microbatches, pp 16 (126
 *    layers: stages balanced by cost): tp 8, dp 128, 2,048 sequences of
 *    8,192 tokens; and tp 8, cp 16, dp 8, 128 sequences of 131,072 tokens.
 *    Model build, transform and simulation as `distir simulate --model` does
 *    them (target: under 1 s; best of 3, and the MFU it predicts).
 */
static int
llama405b_run(int quick, uint32_t dp, uint32_t cp, int64_t seq, int64_t batch)
{
    models_llama c;
    ir_module *m = NULL, *out = NULL;
    hw_model *hw = NULL;
    sim_options o;
    strategy s;
    di_error err;
    double best = 1e30, mfu = 0, step = 0;
    printf("== llama3-405b on h100-dgx:2048: tp 8, pp 16, dp %u, cp %u, seq %lld, 16 "
           "microbatches, full recomputation, fused attention: build + transform + simulate "
           "(target < 1 s)\n",
           dp, cp, (long long)seq);
    if (hw_preset("h100-dgx:2048", &hw, &err) != 0) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    sim_options_default(&o);
    xform_strategy_init(&s);
    s.tp = 8;
    s.pp = 16;
    s.dp = dp;
    s.cp = cp;
    s.microbatches = 16;
    s.schedule = STRATEGY_SCHEDULE_1F1B;
    s.recompute = STRATEGY_RECOMPUTE_FULL;
    for (int rep = 0; rep < (quick ? 1 : 3); rep++) {
        double t0 = now(), t;
        sim_result *r = NULL;
        models_llama_init(&c);
        if (models_llama_preset("llama3-405b", &c, &err) != 0) {
            fprintf(stderr, "%s\n", err.msg);
            return 1;
        }
        c.seq = seq;
        c.batch = batch;
        c.fused_attention = 1;
        c.dtype = IR_BF16;
        c.train.optimizer = XFORM_OPTIM_ADAM;
        if (models_llama_build(&c, &m, &err) != 0 || xform_apply(m, &s, hw, &out, &err) != 0 ||
            sim_run(out, hw, &o, &r, NULL, NULL, &err) != 0) {
            fprintf(stderr, "llama3-405b: %s\n", err.msg);
            return 1;
        }
        {
            sim_model_stats st;
            sim_model_stats_of(m, &st);
            sim_result_set_model(r, &st);
        }
        t = now() - t0;
        if (t < best)
            best = t;
        step = r->step_time_s;
        mfu = r->mfu;
        sim_result_free(r);
        ir_module_free(out);
        ir_module_free(m);
        out = m = NULL;
    }
    printf("build + transform + simulate %.3f s (best of %d); predicted step %.3f s, MFU %.2f%%\n",
           best, quick ? 1 : 3, step, 100 * mfu);
    printf("target: under 1 s: %s\n", best < 1 ? "met" : "not met");
    hw_free(hw);
    return 0;
}

static int
llama405b(int quick)
{
    int rc = llama405b_run(quick, 128, 1, 8192, 2048);
    return rc != 0 ? rc : llama405b_run(quick, 8, 16, 131072, 128);
}

int
main(int argc, char **argv)
{
    int quick = argc > 1 && strcmp(argv[1], "quick") == 0;
    uint32_t mb = quick ? 8 : 64;
    ir_module *src, *out;
    strategy s;
    hw_model *hw = NULL;
    sim_result *r = NULL;
    sim_options o;
    di_error err;
    double tx, t0, tsim, twarm;
    sim_workspace *ws;

    /* The allocator settings of distird (server/main.c), where transforms run back to back. */
    di_heap_keep();
    printf("== xform_apply: microseconds per produced op (target < 1 us; best of 3, allocator "
           "as in distird)\n");
    static strategy_stage nest[4] = {{8, 2, 0}, {4, 4, 0}, {4, 4, 0}, {2, 8, 0}};
    per_op("gpt3-1.3b", 64, 2, 2, 2, 8, STRATEGY_RECOMPUTE_NONE, 0, NULL);
    per_op("gpt3-13b", 64, 4, 4, 4, 16, STRATEGY_RECOMPUTE_SELECTIVE, 1, NULL);
    per_op("gpt3-13b", 128, 0, 0, 4, 16, STRATEGY_RECOMPUTE_SELECTIVE, 1, nest);
    per_op("gpt3-175b", 512, 8, 8, 16, mb, STRATEGY_RECOMPUTE_NONE, 0, NULL);

    printf("== gpt3-175b dp 8, tp 8, pp 16, %u microbatches, 1F1B: transform + simulate "
           "(target < 100 ms)\n",
           mb);
    src = gpt("gpt3-175b", 512);
    xform_strategy_init(&s);
    s.dp = 8;
    s.tp = 8;
    s.pp = 16;
    s.microbatches = mb;
    s.schedule = STRATEGY_SCHEDULE_1F1B;
    out = transform(src, &s, &tx);
    if (hw_preset("a100-dgx:128", &hw, &err) != 0) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    sim_options_default(&o);
    /*
     * Cold: every run maps, faults and frees its own tables (a one-shot CLI
     * run; best of 3, as bench_sim). Warm: a workspace kept between
     * simulations, as each daemon worker keeps one (its first run fills it).
     */
    tsim = twarm = 1e30;
    ws = sim_workspace_new();
    for (int rep = 0; rep < 7; rep++) {
        sim_result *rw;
        double t;
        t0 = now();
        if (sim_run_ws(rep < 3 ? NULL : ws, out, hw, &o, &rw, NULL, NULL, &err) != 0) {
            fprintf(stderr, "sim_run: %s\n", err.msg);
            return 1;
        }
        t = now() - t0;
        if (rep < 3 && t < tsim)
            tsim = t;
        if (rep > 3 && t < twarm)
            twarm = t;
        if (r == NULL)
            r = rw;
        else
            sim_result_free(rw);
    }
    sim_workspace_free(ws);
    printf("transform %.1f ms (%u ops, %.3f us/op); simulate cold %.1f ms, warm %.1f ms; "
           "total cold %.1f ms, warm %.1f ms\n",
           tx * 1e3, out->nop - 1, tx * 1e6 / (out->nop - 1), tsim * 1e3, twarm * 1e3,
           (tx + tsim) * 1e3, (tx + twarm) * 1e3);
    printf("predicted step %.3f s, bubble %.1f%%, peak memory %.1f GiB\n", r->step_time_s,
           100 * r->bubble_fraction, (double)r->peak_memory_bytes / (1024.0 * 1024 * 1024));
    sim_result_free(r);
    hw_free(hw);
    ir_module_free(out);
    ir_module_free(src);
    return llama405b(quick);
}
