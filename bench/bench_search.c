/*
 * bench_search.c: the strategy search (lib/search) against its speed
 * targets, printed as "target: ... measured: ..." lines. Every candidate
 * that survives pruning is transformed and simulated, in full or composed
 * from two shorter simulations (docs/search.md), one after another on one
 * core; the gpt3-175b target is not met, and the figures say by how much.
 *
 * 1. dist-ir's default MLP grid: models (layers, hidden) = (16, 8192),
 *    (64, 16384), (96, 32768); world sizes 1, 2, 4; batch 2^0..2^15; every
 *    power-of-two (dp, tp, pp) with dp tp pp = world; microbatches 1 when
 *    pp = 1, else 2, 4, ..., 128 with batch / dp / microbatches >= 1:
 *    1,263 configurations. Each (model, batch, world) is two searches on
 *    distir-classic (the original DistIR's hardware model): pp = 1 with one
 *    microbatch, and pp in {2, 4} with microbatches 2..128 and the 1F1B
 *    schedule; degrees restricted to {1, 2, 4}, every option off. What
 *    differs from dist-ir's grid: our MLP layers have a bias, and the
 *    search prunes what cannot fit (memory_bound) or cannot be transformed
 *    (indivisible) instead of simulating it; each status is counted. Every
 *    configuration of the smallest model is evaluated; of the two larger
 *    ones every one up to a time budget, the rest projected from the mean
 *    time per configuration of that model (said so when it happens).
 * 2. gpt3-175b (bf16, Adam, global batch 1,536) on a100-dgx:128 (1,024
 *    GPUs): the size of the space, the time to build the plan (branch and
 *    bound) and to evaluate its seed, then, for the other candidates, what
 *    the search does before it simulates: the time bound's pruning
 *    (search_plan_prunes), xform_validate of each base strategy, then of
 *    each variant of a valid base, then the memory bound; the candidates
 *    left and how many of them are composed, the measured
 *    time of search_eval (composed or full) and of a full simulation on a
 *    sample of 20 of them spread over the space, the composed estimates'
 *    errors against the full simulations, and the projected total.
 * 3. Cache-warm repeat: the daemon stores completed searches (docs/daemon.md);
 *    bench/search_full.sh runs the whole gpt3-175b search on distird (about
 *    5 minutes on 2 cores, so only with DISTIR_BENCH_LONG=1) and measures
 *    the cold search and its repeat; nothing is measured here.
 * 4. Cancellation within 10 ms: the largest gpt3-175b candidate evaluated
 *    with a cancel set during its transform and during its simulation; the
 *    time from the cancel to the evaluation's return (bench_cancel).
 *
 * By default every 16th base of the gpt3-175b space is validated (with its
 * variants) and the whole projected from it, as the whole space's validation
 * takes over a minute; `bench_search full` validates them all, `bench_search
 * quick` every 32nd and skips the two larger MLP models and 4;
 * `bench_search cancel` runs 4 alone.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <string.h>
#include <threads.h>
#include <time.h>

#include "ir/ir.h"
#include "models/models.h"
#include "search/search.h"
#include "sim/hw.h"
#include "sim/sim.h"
#include "xform/xform.h"

/* Seconds one larger MLP model's grid may take before the rest of it is projected. */
#define MLP_BUDGET_S 8.0
/* gpt3-175b: validate every GPT_STRIDE-th base (of consecutive candidates) and project. */
#define GPT_STRIDE 16
/* Simulated gpt3-175b candidates timed. */
#define GPT_SAMPLE 20

static double
now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void
die(const char *what, const di_error *err)
{
    fprintf(stderr, "bench_search: %s: %s\n", what, err->msg);
    exit(1);
}

static hw_model *
preset(const char *name)
{
    hw_model *hw = NULL;
    di_error err;
    if (hw_preset(name, &hw, &err) != 0)
        die(name, &err);
    return hw;
}

static void
set(search_config *cfg, const char *name, const char *value)
{
    di_error err;
    if (search_config_set(cfg, name, value, &err) != 0)
        die(name, &err);
}

/* ---- 1. dist-ir's default MLP grid ---- */

typedef struct grid_totals {
    uint64_t enumerated, count[SEARCH_NSTATUS];
    double seconds;
    /* Candidates the memory bound pruned, simulated anyway (as dist-ir would) for timing. */
    uint32_t nbound_sampled;
    double bound_seconds;
} grid_totals;

/* Every BOUND_STRIDE-th memory-bound candidate is transformed and simulated in full. */
#define BOUND_STRIDE 96

/* xform_apply and sim_run on c, as search_eval would without the memory bound. */
static double
simulate_anyway(const search_space *sp, const search_candidate *c)
{
    double t0 = now();
    strategy s;
    ir_module *dm = NULL;
    sim_result *r = NULL;
    sim_options o;
    di_error err;
    search_candidate_strategy(c, &s);
    sim_options_default(&o);
    if (xform_apply(sp->module, &s, sp->hw, &dm, &err) != 0 ||
        sim_run(dm, sp->hw, &o, &r, NULL, NULL, &err) != 0)
        die("simulating a memory-bound candidate", &err);
    sim_result_free(r);
    ir_module_free(dm);
    strategy_fini(&s);
    return now() - t0;
}

/* Evaluates every candidate of one search; adds to *t. */
static void
grid_search(const ir_module *m, const hw_model *hw, uint32_t world, int pipeline, grid_totals *t)
{
    search_config cfg;
    search_space sp;
    search_evaluator ev;
    char n[16];
    di_error err;
    search_config_init(&cfg);
    snprintf(n, sizeof n, "%u", world);
    set(&cfg, "devices", n);
    set(&cfg, "dp", "1,2,4");
    set(&cfg, "tp", "1,2,4");
    if (pipeline) {
        set(&cfg, "pp", "2,4");
        set(&cfg, "microbatches", "2,4,8,16,32,64,128");
        set(&cfg, "schedule", "1f1b");
    } else {
        set(&cfg, "pp", "1");
        set(&cfg, "microbatches", "1");
    }
    set(&cfg, "recompute", "none");
    set(&cfg, "zero", "0");
    set(&cfg, "sequence-parallel", "0");
    set(&cfg, "overlap-grad-reduce", "0");
    if (search_space_init(&sp, m, hw, &cfg, &err) != 0)
        die("search_space_init", &err);
    search_evaluator_init(&ev, &sp);
    for (uint64_t k = 0; k < search_space_shard_size(&sp); k++) {
        search_point p;
        const search_candidate *c = search_space_at(&sp, k);
        int st = search_eval(&ev, c, &p);
        t->count[st]++;
        t->enumerated++;
        if (st == SEARCH_MEMORY_BOUND && t->count[st] % BOUND_STRIDE == 1) {
            double sec = simulate_anyway(&sp, c);
            t->bound_seconds += sec;
            t->seconds -= sec; /* not part of the search's time */
            t->nbound_sampled++;
        }
    }
    search_evaluator_fini(&ev);
    search_space_fini(&sp);
}

static void
bench_mlp_grid(int quick)
{
    static const struct {
        uint32_t layers;
        int64_t hidden;
    } models[] = {{16, 8192}, {64, 16384}, {96, 32768}};
    static const uint32_t worlds[] = {1, 2, 4};
    hw_model *hw = preset("distir-classic");
    grid_totals all;
    double projected = 0;
    uint64_t configs = 0, projected_configs = 0;
    memset(&all, 0, sizeof all);
    printf("1. dist-ir's default MLP grid on distir-classic (1,263 configurations)\n");
    for (uint32_t i = 0; i < sizeof models / sizeof models[0]; i++) {
        grid_totals t;
        uint32_t done = 0, total = 16 * 3;
        double t0 = now();
        memset(&t, 0, sizeof t);
        if (quick && i > 0)
            break;
        for (uint32_t b = 0; b < 16; b++) {
            for (uint32_t w = 0; w < 3; w++) {
                models_mlp c;
                ir_module *m = NULL;
                di_error err;
                if (i > 0 && now() - t0 > MLP_BUDGET_S)
                    goto model_done;
                models_mlp_init(&c);
                c.layers = models[i].layers;
                c.hidden = models[i].hidden;
                c.batch = (int64_t)1 << b;
                if (models_mlp_build(&c, &m, &err) != 0)
                    die("models_mlp_build", &err);
                grid_search(m, hw, worlds[w], 0, &t);
                grid_search(m, hw, worlds[w], 1, &t);
                ir_module_free(m);
                done++;
            }
        }
    model_done:
        t.seconds += now() - t0;
        printf("   (%u, %u): %llu configurations in %.2f s:", models[i].layers,
               (unsigned)models[i].hidden, (unsigned long long)t.enumerated, t.seconds);
        for (int s = 0; s < SEARCH_NSTATUS; s++)
            if (t.count[s])
                printf(" %s %llu", search_status_name(s), (unsigned long long)t.count[s]);
        if (done < total) {
            /* 421 configurations per model; the rest at this model's mean time so far. */
            double per = t.seconds / (double)t.enumerated;
            printf("; stopped after %u of %u (batch, world) pairs, the other %llu projected at "
                   "%.1f ms each",
                   done, total, (unsigned long long)(421 - t.enumerated), per * 1e3);
            projected += per * (double)(421 - t.enumerated);
            projected_configs += 421 - t.enumerated;
        }
        printf("\n");
        if (t.nbound_sampled)
            printf("   (%u, %u): the %llu memory-bound candidates simulated anyway would take "
                   "%.2f s each (mean of %u)\n",
                   models[i].layers, (unsigned)models[i].hidden,
                   (unsigned long long)t.count[SEARCH_MEMORY_BOUND],
                   t.bound_seconds / t.nbound_sampled, t.nbound_sampled);
        all.enumerated += t.enumerated;
        all.seconds += t.seconds;
        all.bound_seconds += t.nbound_sampled
                                 ? t.bound_seconds / t.nbound_sampled * t.count[SEARCH_MEMORY_BOUND]
                                 : 0;
        for (int s = 0; s < SEARCH_NSTATUS; s++)
            all.count[s] += t.count[s];
        configs += t.enumerated;
    }
    printf("   configurations enumerated: %llu (dist-ir's 1,263, and per model 4 with dp above "
           "the batch that dist-ir leaves out, pruned here as indivisible); simulated in full: "
           "%llu; pruned: %llu (memory_bound %llu, indivisible %llu)\n",
           (unsigned long long)configs,
           (unsigned long long)(all.count[SEARCH_OK] + all.count[SEARCH_OOM]),
           (unsigned long long)(all.count[SEARCH_MEMORY_BOUND] + all.count[SEARCH_INDIVISIBLE] +
                                all.count[SEARCH_UNSUPPORTED]),
           (unsigned long long)all.count[SEARCH_MEMORY_BOUND],
           (unsigned long long)all.count[SEARCH_INDIVISIBLE]);
    if (quick)
        printf("target: dist-ir's MLP grid (1,263 configurations) under 2 s on 2 cores; "
               "measured: %.2f s for the first model's %llu configurations on 1 core "
               "(quick: the larger models skipped)\n",
               all.seconds, (unsigned long long)configs);
    else
        printf("target: dist-ir's MLP grid (1,263 configurations) under 2 s on 2 cores; "
               "measured: %.2f s on 1 core for the whole grid%s (dist-ir: 19 min), of which "
               "the memory bound prunes %llu; simulating those too, as dist-ir does: %.0f s "
               "projected\n",
               all.seconds + projected, projected_configs ? " (partly projected, see above)" : "",
               (unsigned long long)all.count[SEARCH_MEMORY_BOUND],
               all.seconds + projected + all.bound_seconds);
    hw_free(hw);
}

/* ---- 2. gpt3-175b on 1,024 A100s ---- */

/* Whether a and b differ only in the options (as search_eval's base memo). */
static int
same_base(const search_candidate *a, const search_candidate *b)
{
    return a->dp == b->dp && a->tp == b->tp && a->pp == b->pp &&
           a->microbatches == b->microbatches && a->schedule == b->schedule &&
           a->virtual_stages == b->virtual_stages;
}

/* gpt3-175b as the search benchmarks take it: bf16, Adam, global batch 1,536. */
static ir_module *
gpt3_175b(void)
{
    models_gpt g;
    ir_module *m = NULL;
    di_error err;
    models_gpt_init(&g);
    if (models_gpt_preset("gpt3-175b", &g, &err) != 0)
        die("gpt3-175b", &err);
    g.batch = 1536;
    g.dtype = IR_BF16;
    g.train.optimizer = XFORM_OPTIM_ADAM;
    if (models_gpt_build(&g, &m, &err) != 0)
        die("models_gpt_build", &err);
    return m;
}

static void
bench_gpt3(uint64_t base_step)
{
    ir_module *m = NULL;
    hw_model *hw = preset("a100-dgx:128");
    search_config cfg;
    search_space sp;
    search_evaluator ev;
    uint8_t *left; /* per candidate: survives validation and the memory bound */
    uint8_t *seed; /* per candidate: in the plan's seed */
    uint64_t nbase = 0, nbase_valid = 0, nleft = 0, nbound = 0, ntime = 0;
    uint64_t validated = 0;
    double t0, t_space, t_plan, t_seed, t_valid, t_sample = 0, t_full = 0, best = 0, worst_t = 0,
                                                 worst_m = 0;
    search_plan plan;
    search_planner planner;
    search_evaluator seed_ev;
    uint32_t nsample = 0, ncomposed = 0;
    uint64_t ncomposable = 0;
    char best_name[256] = "";
    di_error err;

    printf("2. gpt3-175b (bf16, Adam, batch 1,536) on a100-dgx:128 (1,024 GPUs)\n");
    m = gpt3_175b();
    search_config_init(&cfg);
    t0 = now();
    if (search_space_init(&sp, m, hw, &cfg, &err) != 0)
        die("search_space_init", &err);
    t_space = now() - t0;
    printf("   space: %llu candidates, built in %.3f s\n", (unsigned long long)sp.ncandidate,
           t_space);

    /* Branch and bound: the plan, its seed evaluated (search_plan_next on its positions). */
    seed = calloc(sp.ncandidate ? sp.ncandidate : 1, 1);
    if (seed == NULL)
        abort();
    t0 = now();
    search_plan_init(&plan, &sp);
    t_plan = now() - t0;
    search_evaluator_init(&seed_ev, &sp);
    search_planner_init(&planner, &plan);
    t0 = now();
    while (!search_plan_seeded(&plan)) {
        search_point p;
        int k;
        memset(&p, 0, sizeof p);
        k = search_plan_next(&planner, &seed_ev, &p);
        if (k == SEARCH_PLAN_END || !plan.is_seed[p.cand.index])
            break; /* the seed was complete: the shard's first candidate, not counted */
        seed[p.cand.index] = 1;
        if (p.status == SEARCH_OK && (best == 0 || p.step_time_s < best)) {
            best = p.step_time_s;
            search_candidate_format(&p.cand, best_name, sizeof best_name);
        }
    }
    t_seed = now() - t0;
    search_evaluator_fini(&seed_ev);
    printf("   plan: built in %.3f s; its seed of %u candidates in %u rounds evaluated in %.2f s "
           "on 1 core, the best of them %.3f s per step (%s)\n",
           t_plan, (unsigned)atomic_load(&plan.nseed), plan.rounds, t_seed, best,
           best_name[0] ? best_name : "none fits");

    /*
     * Validation as search_eval does it before simulating: the base strategy (options off)
     * once per run of candidates that share it, each variant of a valid base, the memory bound.
     */
    left = calloc(sp.ncandidate ? sp.ncandidate : 1, 1);
    if (left == NULL)
        abort();
    t0 = now();
    for (uint64_t i = 0; i < sp.ncandidate;) {
        const search_candidate *c = &sp.candidates[i];
        search_candidate base = *c;
        strategy s;
        uint64_t end = i;
        int rc;
        while (end < sp.ncandidate && same_base(&sp.candidates[end], c))
            end++;
        nbase++;
        if ((nbase - 1) % base_step != 0) {
            i = end;
            continue;
        }
        validated += end - i;
        base.recompute = base.zero = base.sequence_parallel = base.overlap = 0;
        rc = -1; /* the base is validated when a candidate of it is not pruned first */
        for (; i < end; i++) {
            c = &sp.candidates[i];
            if (seed[i])
                continue;
            if (search_plan_prunes(&planner, c)) { /* before any validation, as the plan does */
                ntime++;
                continue;
            }
            if (rc == -1) {
                search_candidate_strategy(&base, &s);
                rc = xform_validate(m, &s, hw, &err) == 0 ? 0 : 1;
                strategy_fini(&s);
                nbase_valid += rc == 0;
            }
            if (rc != 0)
                continue;
            if (c->recompute || c->zero || c->sequence_parallel || c->overlap) {
                search_candidate_strategy(c, &s);
                int vrc = xform_validate(m, &s, hw, &err);
                strategy_fini(&s);
                if (vrc != 0)
                    continue;
            }
            if ((double)search_memory_bound(&sp, c) > sp.cfg.memory_headroom * sp.max_capacity) {
                nbound++;
                continue;
            }
            left[i] = 1;
            nleft++;
        }
    }
    t_valid = now() - t0;
    printf("   pruning: %llu bases, 1 in %llu looked at (%llu, with their variants); %llu "
           "candidates pruned by the time bound before any validation, %llu bases validated "
           "valid; %llu candidates left, %llu more pruned by the memory bound; %.2f s on 1 "
           "core\n",
           (unsigned long long)nbase, (unsigned long long)base_step,
           (unsigned long long)(nbase + base_step - 1) / base_step, (unsigned long long)ntime,
           (unsigned long long)nbase_valid, (unsigned long long)nleft, (unsigned long long)nbound,
           t_valid);

    for (uint64_t i = 0; i < sp.ncandidate; i++) {
        uint32_t m1, m2;
        if (left[i] && search_compose_counts(&sp, &sp.candidates[i], &m1, &m2))
            ncomposable++;
    }
    /*
     * search_eval (validation, transform, composed or full simulation) on GPT_SAMPLE spread
     * candidates, and search_eval_full on the same ones: the time of each and the agreement.
     */
    search_evaluator_init(&ev, &sp);
    for (uint64_t i = 0, seen = 0; i < sp.ncandidate && nsample < GPT_SAMPLE; i++) {
        search_point p, q;
        if (!left[i])
            continue;
        if (seen++ % (nleft / GPT_SAMPLE + 1) != 0)
            continue;
        t0 = now();
        search_eval(&ev, &sp.candidates[i], &p);
        t_sample += now() - t0;
        t0 = now();
        search_eval_full(&ev, &sp.candidates[i], &q);
        t_full += now() - t0;
        nsample++;
        if (p.composed && q.step_time_s > 0 && q.peak_memory_bytes > 0) {
            double et = fabs(p.step_time_s - q.step_time_s) / q.step_time_s;
            double em = fabs((double)p.peak_memory_bytes - (double)q.peak_memory_bytes) /
                        (double)q.peak_memory_bytes;
            ncomposed++;
            worst_t = et > worst_t ? et : worst_t;
            worst_m = em > worst_m ? em : worst_m;
        }
        if (p.status == SEARCH_OK && (best == 0 || p.step_time_s < best)) {
            best = p.step_time_s;
            search_candidate_format(&p.cand, best_name, sizeof best_name);
        }
    }
    search_evaluator_fini(&ev);
    if (nsample > 0) {
        double per = t_sample / nsample;
        /* With a stride over the bases, what was validated stands for 1 / base_step. */
        double nleft_all = (double)nleft * (double)base_step;
        double total =
            t_space + t_plan + t_seed + t_valid * (double)base_step + per * nleft_all;
        printf("   %llu of the candidates left (%.0f%%) have enough microbatches to be composed\n",
               (unsigned long long)ncomposable, nleft ? 100.0 * (double)ncomposable / nleft : 0);
        printf("   sample: %u candidates, %u of them composed; search_eval %.3f s each on "
               "average, a full simulation %.3f s; ",
               nsample, ncomposed, per, t_full / nsample);
        if (ncomposed > 0)
            printf("composed against full: worst step time error %.3f%%, worst peak memory "
                   "error %.3f%% (targets 1%%, 0.5%%); ",
                   worst_t * 100, worst_m * 100);
        printf("the best point seen (seed or sample) %.3f s per step (%s)\n", best,
               best_name[0] ? best_name : "none fits");
        printf("target: the full space of gpt3-175b batch 1,536 on a100-dgx:128 under 10 s "
               "on 2 cores (cold cache); measured: space %.2f s + plan and seed %.2f s + "
               "pruning %.2f s + %.0f candidates x %.3f s = %.0f s on 1 core (%.1f h)%s\n",
               t_space, t_plan + t_seed, t_valid * (double)base_step, nleft_all, per, total,
               total / 3600,
               base_step > 1 ? ", pruning and candidates projected from a stride" : "");
    }
    search_planner_fini(&planner);
    search_plan_fini(&plan);
    free(seed);
    free(left);
    search_space_fini(&sp);
    ir_module_free(m);
    hw_free(hw);
}

/* Sets the flag after the delay (bench_cancel). */
typedef struct canceller {
    atomic_int *flag;
    double delay, at;
} canceller;

static int
cancel_later(void *arg)
{
    canceller *k = arg;
    struct timespec ts = {(time_t)k->delay, (long)((k->delay - (double)(time_t)k->delay) * 1e9)};
    thrd_sleep(&ts, NULL);
    k->at = now();
    atomic_store(k->flag, 1);
    return 0;
}

/*
 * Issue "Search": cancellation stops the workers within 10 ms. The largest
 * candidate of gpt3-175b on 1,024 GPUs (dp 1, tp 32, pp 32, 1,536
 * microbatches, 1F1B, full recomputation, sp: its transform takes about 0.3 s
 * and its simulation several seconds), evaluated in full with a cancel set
 * during the transform, early in the simulation and late in it; printed: the
 * time from the cancel to the evaluation's return.
 */
static void
bench_cancel(void)
{
    static const double delays[] = {0.05, 1.0, 3.0};
    ir_module *m = NULL;
    hw_model *hw = preset("a100-dgx:128");
    search_config cfg;
    search_space sp;
    search_evaluator ev;
    const search_candidate *c = NULL;
    atomic_int flag;
    double worst = 0;
    di_error err;
    printf("4. cancellation inside a candidate\n");
    m = gpt3_175b();
    search_config_init(&cfg);
    if (search_space_init(&sp, m, hw, &cfg, &err) != 0)
        die("search_space_init", &err);
    for (uint64_t k = 0; k < sp.ncandidate && c == NULL; k++) {
        const search_candidate *x = &sp.candidates[k];
        if (x->dp == 1 && x->tp == 32 && x->pp == 32 && x->microbatches == 1536 &&
            x->schedule == STRATEGY_SCHEDULE_1F1B && x->recompute == STRATEGY_RECOMPUTE_FULL &&
            x->zero == 0 && x->sequence_parallel && !x->overlap)
            c = x;
    }
    if (c == NULL) {
        printf("   skipped: the candidate is not in the space\n");
    } else {
        search_evaluator_init(&ev, &sp);
        for (size_t i = 0; i < sizeof delays / sizeof delays[0]; i++) {
            canceller k = {&flag, delays[i], 0};
            search_point p;
            thrd_t t;
            double end;
            atomic_init(&flag, 0);
            ev.cancel = &flag;
            if (thrd_create(&t, cancel_later, &k) != thrd_success) {
                fprintf(stderr, "bench_search: thrd_create failed\n");
                exit(1);
            }
            search_eval_full(&ev, c, &p);
            end = now();
            thrd_join(t, NULL);
            printf("   cancel %.2f s into the evaluation: returned after %.1f ms (%s)\n",
                   delays[i], (end - k.at) * 1e3, search_status_name(p.status));
            if (end - k.at > worst)
                worst = end - k.at;
        }
        ev.cancel = NULL;
        search_evaluator_fini(&ev);
        printf("target: cancellation within 10 ms; measured: %.1f ms at worst on the largest "
               "candidate (one run per moment)\n",
               worst * 1e3);
    }
    search_space_fini(&sp);
    ir_module_free(m);
    hw_free(hw);
}

int
main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    int quick = strcmp(mode, "quick") == 0;
    /*
     * The allocator settings of distird and distir (server/main.c), which run the
     * searches this projects: without them each candidate's module faults its
     * memory in afresh (on gpt3-175b, 0.09 s of a candidate's 0.15 s transform and
     * simulation against 0.03 s with them).
     */
    di_heap_keep();
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (strcmp(mode, "cancel") == 0) { /* that measurement alone */
        bench_cancel();
        return 0;
    }
    bench_mlp_grid(quick);
    bench_gpt3(strcmp(mode, "full") == 0 ? 1 : quick ? 32 : GPT_STRIDE);
    printf("3. cache-warm repeat of the gpt3-175b search\n");
    printf("target: under 100 ms; measured: not here (bench/search_full.sh with "
           "DISTIR_BENCH_LONG=1 runs the whole search on distird, then its repeat)\n");
    if (!quick)
        bench_cancel();
    return 0;
}
