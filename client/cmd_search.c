/*
 * cmd_search.c: `distir search FILE [--hw PRESET|FILE] [--devices N[,N...]]
 * [--objective time|throughput|devices|cost] [--target-step S] [--price P]
 * [--train-tokens T] [--top K] [--json] [--shard i/n] [--headroom F]
 * [--pareto-within R] [--compose 0|1] [--refine top|all] [--time-bound 0|1] [--jobs N]
 * [--math tf32|ieee] [--tp 1,2,4 ...]
 * [--fix pp=2 ...] [--log-candidates FILE]
 * [--server ADDR [--timeout-ms N]]` and `distir search --merge A.json B.json ...`.
 *
 * Without --server the search runs in-process on --jobs threads (default:
 * the online CPUs) that share one search_plan (branch and bound: a seed,
 * then the other candidates, lib/search/plan.c), each with its own
 * evaluator and result, merged at the end: the result is the same
 * whatever the thread count (lib/search); with --server ADDR the daemon
 * runs it on its workers (the Search RPC) and streams progress events and
 * the result, which prints the same tables and the same JSON, byte for byte. Either way a progress
 * line goes to standard error when it is a terminal.
 * --shard i/n evaluates every n-th candidate from i, so that n processes
 * cover the space once; --merge combines their --json outputs into the
 * unsharded answer.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "ir/pb.h"
#include "rpc.h"
#include "search/search.h"
#include "sim/hw.h"

static const char usage[] =
    "search (FILE | --model NAME [model options]) [--hw PRESET|FILE.json] [--devices N[,N...]]\n"
    "              [--objective time|throughput|devices|cost] [--target-step S]\n"
    "              [--price P] [--train-tokens T]\n"
    "              [--top K] [--json] [--shard i/n] [--headroom F] [--pareto-within R]\n"
    "              [--compose 0|1] [--refine top|all] [--time-bound 0|1] [--jobs N]\n"
    "              [--math tf32|ieee] [--kernels fused|eager] [--grad-accum-fusion on|off]\n"
    "              [--dp L] [--tp L] [--pp L] [--cp L] [--microbatches L] [--virtual-stages L]\n"
    "              [--schedule gpipe,1f1b,interleaved[:V]]\n"
    "              [--recompute none,selective,full[,selective-op]] [--recompute-layers L]\n"
    "              [--zero L] [--sequence-parallel 0,1] [--overlap-grad-reduce 0,1]\n"
    "              [--order tp-dp-pp,tp-pp-dp] [--nested]\n"
    "              [--fix NAME=VALUE ...] [--log-candidates FILE]\n"
    "              [--server ADDR [--timeout-ms N]]\n"
    "       distir search --merge A.json B.json ... [--json]\n"
    "\n"
    "Enumerates the strategies that use N devices (default: every device of the\n"
    "hardware; a list: each count), simulates each with the real transforms and\n"
    "simulator, and prints the top K by the objective and the Pareto set over (step\n"
    "time, peak memory). Objectives: the step time, tokens/s per device, the fewest\n"
    "devices reaching --target-step S seconds per step, or the least device time\n"
    "per step (cost; within --target-step when given). --price P (per device-hour)\n"
    "and --train-tokens T add the cost and the time to train for T tokens.\n"
    "Candidates with many microbatches are composed from two shorter simulations,\n"
    "checked by a third (--compose 0: every one in full), within 1% of a full\n"
    "simulation's step and 0.5% of its peak; the top K is re-simulated in full\n"
    "before it is reported (--refine all: the Pareto set too; ~ marks an estimate).\n"
    "Candidates whose lower bounds on step time and memory cannot enter the answer\n"
    "are pruned unsimulated (--time-bound 0: none). --pareto-within R keeps only\n"
    "Pareto points at most R times slower than the fastest (and prunes the rest).\n"
    "L is a comma-separated list of allowed values; --fix pp=8 allows one value.\n"
    "The search runs in this process on --jobs threads (default: every CPU; the\n"
    "result does not depend on it), or with --server on distird's workers.\n"
    "--log-candidates FILE writes a JSON line per candidate evaluated (in process\n"
    "or on the daemon): its figures, its lower bounds and how long it took\n"
    "(bench/search_anatomy.py); a search the daemon answers from its stored\n"
    "searches evaluates nothing and logs nothing.";

/* The list-valued constraints: "--tp 1,2" is search_config_set(cfg, "tp", "1,2"). */
static const char *const list_options[] = {
    "dp",        "tp",        "pp",       "microbatches",      "virtual-stages",      "schedule",
    "recompute", "zero",      "headroom", "sequence-parallel", "overlap-grad-reduce", "devices",
    "top",       "objective", "shard",    "compose",           "target-step",         "price",
    "train-tokens", "math", "cp", "time-bound", "kernels", "pareto-within", "refine",
    "grad-accum-fusion", "order", "recompute-layers",
};

static int
print_result(const search_result *r, int json)
{
    char *s = json ? search_result_to_json(r) : search_result_to_table(r);
    fputs(s, stdout);
    if (json)
        fputc('\n', stdout);
    di_free(s);
    return CLI_OK;
}

static int
merge(int nfile, char **files, int json)
{
    search_result total;
    di_error err;
    int rc = CLI_OK;
    memset(&total, 0, sizeof total);
    for (int i = 0; i < nfile && rc == CLI_OK; i++) {
        uint8_t *data = NULL;
        size_t len = 0;
        search_result part;
        if (di_read_file(files[i], 1u << 30, &data, &len, &err) != 0) {
            cli_error("cannot read '%s': %s", files[i], err.msg);
            return CLI_FAIL;
        }
        if (search_result_from_json((const char *)data, len, &part, &err) != 0) {
            cli_error("'%s' is not a search result: %s", files[i], err.msg);
            rc = CLI_FAIL;
        } else if (i == 0) {
            total = part;
        } else {
            if (search_result_merge(&total, &part, &err) != 0) {
                cli_error("cannot merge '%s': %s", files[i], err.msg);
                rc = CLI_FAIL;
            }
            search_result_fini(&part);
        }
        di_free(data);
    }
    if (rc == CLI_OK)
        print_result(&total, json);
    search_result_fini(&total);
    return rc;
}

static double
seconds_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* One progress line on a terminal's standard error, redrawn in place. */
static void
progress(uint64_t done, uint64_t total, uint64_t fit)
{
    fprintf(stderr, "\rsearch: %llu/%llu candidates, %llu fit", (unsigned long long)done,
            (unsigned long long)total, (unsigned long long)fit);
    fflush(stderr);
}

/*
 * On a terminal, once: the top K is settled before the search ends (the
 * Pareto set's rounds go on), with the best point; the progress line is
 * redrawn under it.
 */
static void
settled(double elapsed_s, uint32_t k, const char *best, double step_s, int composed)
{
    fprintf(stderr,
            "\r\033[Ksearch: the top %u is settled after %.1f s, best %s at %.4g s per step%s; "
            "the Pareto set continues (--pareto-within 1 stops here)\n",
            k, elapsed_s, best, step_s, composed ? " (composed estimate)" : "");
    fflush(stderr);
}

/* The online CPUs, 1 to 64. */
static unsigned
default_jobs(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 64 ? 64 : (unsigned)n;
}

/* The in-process search's threads: a shared plan, a result per thread. */
typedef struct local_search {
    const search_space *sp;
    search_plan plan;
    atomic_uint_fast64_t done, fit;
    FILE *log; /* --log-candidates, or NULL */
} local_search;

typedef struct local_part {
    local_search *ls;
    search_result r;
    unsigned worker;
} local_part;

/*
 * One candidate's line of the log (the daemon's SearchLogEntry carries the
 * same fields; its strings are escaped as JSON, whoever sent them), written
 * with one call so that two workers' lines do not interleave.
 */
static void
log_line(FILE *f, uint64_t index, const char *strat, const char *status, double step,
         uint64_t peak, int composed, int unsteady, double time_bound, uint64_t memory_bound,
         double seconds, unsigned worker)
{
    di_buf b;
    di_buf_init(&b);
    di_buf_printf(&b, "{\"index\":%llu,\"strategy\":", (unsigned long long)index);
    di_buf_json_str(&b, strat != NULL ? strat : "");
    di_buf_puts(&b, ",\"status\":");
    di_buf_json_str(&b, status != NULL ? status : "");
    di_buf_printf(&b,
                  ",\"step_time_s\":%.17g,\"peak_memory_bytes\":%llu,\"composed\":%s,%s"
                  "\"time_bound_s\":%.17g,\"memory_bound_bytes\":%llu,\"eval_s\":%.6f,"
                  "\"worker\":%u}\n",
                  step, (unsigned long long)peak, composed ? "true" : "false",
                  unsteady ? "\"unsteady\":true," : "", time_bound,
                  (unsigned long long)memory_bound, seconds, worker);
    fwrite(b.data, 1, b.len, f);
    di_buf_fini(&b);
}

/* A worker's line for the re-simulation of its composed points. */
static void
log_refined(FILE *f, uint32_t n, double seconds, unsigned worker)
{
    fprintf(f, "{\"refined\":%u,\"refine_s\":%.6f,\"worker\":%u}\n", n, seconds, worker);
}

/*
 * --log-candidates: one JSON line per candidate the search evaluated (not
 * those pruned unevaluated), in the order the workers finish them: its
 * figures (the composed estimate when composed), the lower bounds branch and
 * bound used (search_time_bound_schedule, search_memory_bound: 0 where there is none)
 * and the seconds its evaluation took on its worker; then a line per worker
 * for the re-simulation of its composed points (search_planner_refine). The
 * figures and bounds are the search's own, whatever the thread count; the
 * order and the seconds are not. One write per line (log_line): stdio locks
 * the stream, so lines of two workers do not interleave.
 */
static void
log_point(const local_search *ls, unsigned worker, const search_point *p, double seconds)
{
    char strat[256];
    search_candidate_format(&p->cand, strat, sizeof strat);
    log_line(ls->log, p->cand.index, strat, search_status_name(p->status), p->step_time_s,
             p->peak_memory_bytes, p->composed, p->unsteady,
             search_time_bound_schedule(ls->sp, &p->cand), search_memory_bound(ls->sp, &p->cand),
             seconds, worker);
}

static void *
local_worker(void *arg)
{
    local_part *part = arg;
    local_search *ls = part->ls;
    search_evaluator ev;
    search_planner w;
    int k;
    search_evaluator_init(&ev, ls->sp);
    search_planner_init(&w, &ls->plan);
    for (;;) {
        search_point p;
        double t0 = ls->log ? seconds_now() : 0;
        k = search_plan_next(&w, &ev, &p);
        if (k == SEARCH_PLAN_POINT && ls->log &&
            (p.status == SEARCH_OK || p.status == SEARCH_OOM || p.status == SEARCH_FAILED))
            log_point(ls, part->worker, &p, seconds_now() - t0);
        if (k == SEARCH_PLAN_END)
            break;
        if (k == SEARCH_PLAN_WAIT) { /* another thread is finishing the seed */
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
            continue;
        }
        if (k != SEARCH_PLAN_POINT)
            continue;
        if (p.status == SEARCH_OK)
            atomic_fetch_add(&ls->fit, 1);
        search_result_add(&part->r, &p);
        atomic_fetch_add(&ls->done, 1);
    }
    /* This part's composed best that may be in the answer, re-simulated in full before the merge. */
    {
        double t0 = ls->log ? seconds_now() : 0;
        uint32_t n = search_planner_refine(&w, &ev, &part->r);
        if (ls->log)
            log_refined(ls->log, n, seconds_now() - t0, part->worker);
    }
    search_planner_fini(&w);
    search_evaluator_fini(&ev);
    return NULL;
}

/*
 * Runs sp's shard on `jobs` threads into *r (initialized here). Returns 0,
 * or -1 when a thread cannot start (then nothing is left to free).
 */
static int
local_run(const search_space *sp, unsigned jobs, int tty, FILE *log, search_result *r)
{
    local_search ls;
    local_part *parts = calloc(jobs, sizeof *parts);
    pthread_t *tids = calloc(jobs, sizeof *tids);
    uint64_t total = search_space_shard_size(sp);
    unsigned started = 0;
    int shown = 0, rc = 0;
    di_error err;
    if (parts == NULL || tids == NULL)
        abort();
    ls.sp = sp;
    ls.log = log;
    search_plan_init(&ls.plan, sp);
    atomic_init(&ls.done, 0);
    atomic_init(&ls.fit, 0);
    for (unsigned i = 0; i < jobs; i++) {
        parts[i].ls = &ls;
        parts[i].worker = i;
        search_result_init(&parts[i].r, sp);
    }
    for (; started < jobs; started++)
        if (pthread_create(&tids[started], NULL, local_worker, &parts[started]) != 0)
            break;
    if (started == 0) {
        rc = -1;
    } else {
        double t0 = seconds_now();
        int told = 0;
        while (tty && atomic_load(&ls.done) < total) {
            struct timespec ts = {0, 250000000};
            const search_point *top;
            uint32_t ntop;
            nanosleep(&ts, NULL);
            if (!told && search_plan_settled_top(&ls.plan, &top, &ntop) && ntop > 0) {
                char name[256];
                search_candidate_format(&top[0].cand, name, sizeof name);
                settled(seconds_now() - t0, ntop, name, top[0].step_time_s, top[0].composed);
                told = 1;
            }
            progress(atomic_load(&ls.done), total, atomic_load(&ls.fit));
            shown = 1;
        }
        for (unsigned i = 0; i < started; i++)
            pthread_join(tids[i], NULL);
    }
    if (shown)
        fputs("\r\033[K", stderr);
    /* Merge into an empty result: the parts are disjoint, so the merge is the whole. */
    search_result_init(r, sp);
    for (unsigned i = 0; i < jobs; i++) {
        if (rc == 0 && search_result_merge(r, &parts[i].r, &err) != 0)
            abort(); /* parts of one space always merge */
        search_result_fini(&parts[i].r);
    }
    if (rc != 0)
        search_result_fini(r);
    search_plan_fini(&ls.plan);
    free(parts);
    free(tids);
    return rc;
}

/* The module to search: FILE, or --model NAME built here. */
static int
load(const char *file, const cli_model_ref *mr, ir_module **m)
{
    if (mr->name != NULL)
        return cli_model_ref_build(mr, m);
    return cli_load_module(file, m) != 0 ? CLI_FAIL : CLI_OK;
}

static int
search(const char *file, const cli_model_ref *mr, const char *hwname, const search_config *cfg,
       int json, unsigned jobs, const char *logfile)
{
    hw_model *hw = NULL;
    ir_module *m = NULL;
    search_space sp;
    search_result r;
    double t0;
    int tty = isatty(STDERR_FILENO), rc;
    FILE *log = NULL;
    di_error err;

    if (file == NULL)
        file = mr->name; /* for messages */
    if (hw_load(hwname, &hw, &err) != 0) {
        cli_error("%s", err.msg);
        return CLI_FAIL;
    }
    if ((rc = load(file, mr, &m)) != CLI_OK) {
        hw_free(hw);
        return rc;
    }
    if (ir_verify(m, &err) != 0) {
        cli_error("'%s' is not a valid module: %s", file, err.msg);
        goto fail;
    }
    if (search_space_init(&sp, m, hw, cfg, &err) != 0) {
        cli_error("cannot search '%s': %s", file, err.msg);
        goto fail;
    }
    if (logfile != NULL && (log = fopen(logfile, "w")) == NULL) {
        cli_error("cannot write '%s': %s", logfile, strerror(errno));
        search_space_fini(&sp);
        goto fail;
    }
    t0 = seconds_now();
    if (local_run(&sp, jobs, tty, log, &r) != 0) {
        cli_error("cannot start a search thread");
        if (log)
            fclose(log);
        search_space_fini(&sp);
        goto fail;
    }
    /* A log that could not be written in full is an error, not a shorter file. */
    if (log != NULL && (ferror(log) | fclose(log)) != 0) {
        cli_error("cannot write '%s': %s", logfile, strerror(errno));
        search_result_fini(&r);
        search_space_fini(&sp);
        goto fail;
    }
    if (!json)
        printf("space: %llu candidates on %s%u devices of %s (batch %lld, %u layers)\n",
               (unsigned long long)sp.ncandidate, sp.cfg.ndevice_counts ? "up to " : "",
               sp.devices, hw->name, (long long)sp.batch, sp.layers);
    if (!json && cfg->shard_count > 1)
        printf("shard %u/%u: %llu candidates\n", cfg->shard_index, cfg->shard_count,
               (unsigned long long)r.enumerated);
    print_result(&r, json);
    if (!json)
        printf("searched in %.2f s\n", seconds_now() - t0);
    search_result_fini(&r);
    search_space_fini(&sp);
    ir_module_free(m);
    hw_free(hw);
    return CLI_OK;
fail:
    ir_module_free(m);
    hw_free(hw);
    return CLI_FAIL;
}

/* ---------------------------------------------------------------- --server */

typedef struct remote_state {
    int tty;
    int shown; /* a progress line is on the terminal */
    int told;  /* the settled top K was shown */
    int have_result;
    search_result result;
    uint64_t space_candidates;
    double elapsed_s;
    int cached; /* the daemon answered from its stored searches */
    uint64_t cache_hits; /* candidates whose figures the daemon kept from earlier searches */
    FILE *log;           /* --log-candidates: the daemon's SearchProgress.log lines */
    di_error err;
} remote_state;

static int
remote_event(void *ctx, const Distir__V1__SearchEvent *ev)
{
    remote_state *st = ctx;
    if (ev->event_case == DISTIR__V1__SEARCH_EVENT__EVENT_PROGRESS && ev->progress != NULL) {
        const Distir__V1__SearchProgress *p = ev->progress;
        uint64_t ok = 0;
        for (size_t i = 0; st->log != NULL && i < p->n_log; i++) {
            const Distir__V1__SearchLogEntry *e = p->log[i];
            if (e->refinement)
                log_refined(st->log, e->refined, e->eval_s, e->worker);
            else
                log_line(st->log, e->index, e->strategy, e->status, e->step_time_s,
                         e->peak_memory_bytes, e->composed, e->unsteady, e->time_bound_s,
                         e->memory_bound_bytes, e->eval_s, e->worker);
        }
        for (size_t i = 0; i < p->n_counts; i++)
            if (strcmp(p->counts[i]->status, search_status_name(SEARCH_OK)) == 0)
                ok = p->counts[i]->count;
        if (st->tty && !st->told && p->n_settled_top > 0) {
            settled(p->elapsed_s, (uint32_t)p->n_settled_top, p->settled_top[0]->strategy,
                    p->settled_top[0]->step_time_s, p->settled_top[0]->composed);
            st->told = 1;
        }
        if (st->tty) {
            fprintf(stderr, "\rsearch: %llu/%llu candidates, %llu fit", (unsigned long long)p->done,
                    (unsigned long long)p->total, (unsigned long long)ok);
            if (p->best != NULL)
                fprintf(stderr, ", best %.3f ms", p->best->step_time_s * 1e3);
            fflush(stderr);
            st->shown = 1;
        }
    } else if (ev->event_case == DISTIR__V1__SEARCH_EVENT__EVENT_RESULT && ev->result != NULL) {
        const Distir__V1__SearchResult *r = ev->result;
        if (st->have_result) {
            di_error_set(&st->err, DI_EDECODE, "the server sent two results");
            return 1;
        }
        if (search_result_from_json(r->json, strlen(r->json), &st->result, &st->err) != 0) {
            di_error_prefix(&st->err, "bad result");
            return 1;
        }
        st->have_result = 1;
        st->space_candidates = r->space_candidates;
        st->elapsed_s = r->elapsed_s;
        st->cached = r->cached;
        st->cache_hits = r->cache_hits;
    }
    return 0;
}

/* Copies the config into the request's constraints (the lists point into cfg). */
static void
request_from_config(const search_config *cfg, Distir__V1__SearchRequest *req,
                    Distir__V1__SearchConstraints *c)
{
    req->devices = cfg->devices;
    /* The proto's values are search_objective's. */
    req->objective = (Distir__V1__SearchObjective)cfg->objective;
    req->n_device_counts = cfg->ndevice_counts;
    req->device_counts = (uint32_t *)cfg->device_counts;
    req->target_step_s = cfg->target_step_s;
    req->price_per_device_hour = cfg->price_per_device_hour;
    req->train_tokens = cfg->train_tokens;
    req->tf32 = cfg->tf32 != 0;
    req->fuse = cfg->fuse != 0;
    req->no_grad_accum_fusion = cfg->no_grad_accum_fusion != 0;
    req->top_k = cfg->top_k;
    req->shard_index = cfg->shard_index;
    req->shard_count = cfg->shard_count;
    c->n_dp = cfg->ndp, c->dp = (uint32_t *)cfg->dp;
    c->n_tp = cfg->ntp, c->tp = (uint32_t *)cfg->tp;
    c->n_pp = cfg->npp, c->pp = (uint32_t *)cfg->pp;
    c->n_cp = cfg->ncp, c->cp = (uint32_t *)cfg->cp;
    c->n_microbatches = cfg->nmicrobatches, c->microbatches = (uint32_t *)cfg->microbatches;
    c->n_virtual_stages = cfg->nvirtual, c->virtual_stages = (uint32_t *)cfg->virtual_stages;
    c->n_recompute_layers = cfg->nrecompute_layers;
    c->recompute_layers = (uint32_t *)cfg->recompute_layers;
    c->schedules = cfg->schedules;
    c->recomputes = cfg->recomputes;
    c->zero = cfg->zeros;
    c->sequence_parallel = cfg->sequence_parallel;
    c->overlap_grad_reduce = cfg->overlap;
    c->orders = cfg->orders;
    c->nested = cfg->nested != 0;
    c->memory_headroom = cfg->memory_headroom;
    c->full_simulation = cfg->no_compose != 0;
    c->refine_pareto = cfg->refine_pareto != 0;
    c->no_time_bound = cfg->no_time_bound != 0;
    c->pareto_within = cfg->pareto_within;
    req->constraints = c;
}

static int
search_remote(const char *server, const char *file, const cli_model_ref *mr, const char *hwname,
              const search_config *cfg, int json, int timeout_ms, const char *logfile)
{
    Distir__V1__SearchRequest req = DISTIR__V1__SEARCH_REQUEST__INIT;
    Distir__V1__SearchConstraints cons = DISTIR__V1__SEARCH_CONSTRAINTS__INIT;
    Distir__V1__HardwareRef ref = DISTIR__V1__HARDWARE_REF__INIT;
    Distir__V1__Hardware hwp;
    hw_model *hw = NULL;
    ir_module *m = NULL;
    remote_state st;
    di_error err;
    int rc, own_hw = 0;

    if (hw_load(hwname, &hw, &err) != 0) {
        cli_error("%s", err.msg);
        return CLI_FAIL;
    }
    Distir__V1__ModelSpec ms;
    if (mr->name != NULL) {
        /* A built-in model goes by name: the daemon generates the same module. */
        cli_model_ref_proto(mr, &ms);
        req.model = &ms;
    } else {
        if (cli_load_module(file, &m) != 0) {
            hw_free(hw);
            return CLI_FAIL;
        }
        req.module = ir_to_proto(m);
    }
    if (hw->ntable == 0 && hw->nop_time == 0 && !strstr(hwname, ".json")) {
        ref.spec_case = DISTIR__V1__HARDWARE_REF__SPEC_PRESET;
        ref.preset = (char *)hwname;
    } else {
        hw_to_proto(hw, &hwp);
        own_hw = 1;
        ref.spec_case = DISTIR__V1__HARDWARE_REF__SPEC_HARDWARE;
        ref.hardware = &hwp;
    }
    req.hardware = &ref;
    request_from_config(cfg, &req, &cons);
    memset(&st, 0, sizeof st);
    st.tty = isatty(STDERR_FILENO);
    di_error_clear(&st.err);
    if (logfile != NULL) {
        if ((st.log = fopen(logfile, "w")) == NULL) {
            cli_error("cannot write '%s': %s", logfile, strerror(errno));
            ir_proto_free(req.module);
            if (req.model != NULL)
                cli_model_ref_proto_fini(&ms);
            if (own_hw)
                hw_proto_fini(&hwp);
            ir_module_free(m);
            hw_free(hw);
            return CLI_FAIL;
        }
        req.log_candidates = 1;
    }
    rc = rpc_search(server, &req, timeout_ms, remote_event, &st, &err);
    /* A log that could not be written in full is an error, not a shorter file. */
    if (st.log != NULL && (ferror(st.log) | fclose(st.log)) != 0 && rc == 0)
        rc = di_error_set(&err, DI_EIO, "cannot write '%s': %s", logfile, strerror(errno));
    ir_proto_free(req.module);
    if (req.model != NULL)
        cli_model_ref_proto_fini(&ms);
    if (own_hw)
        hw_proto_fini(&hwp);
    if (st.shown)
        fputs("\r\033[K", stderr);
    if (rc == 0 && !st.have_result)
        rc = di_error_set(&err, DI_EDECODE, "the stream ended without a result");
    if (rc != 0) {
        cli_error("search on '%s' failed: %s", server, st.err.code != 0 ? st.err.msg : err.msg);
        if (st.have_result)
            search_result_fini(&st.result);
        ir_module_free(m);
        hw_free(hw);
        return CLI_FAIL;
    }
    if (!json)
        printf("space: %llu candidates on %s%u devices of %s (searched by %s%s)\n",
               (unsigned long long)st.space_candidates,
               st.result.ndevice_counts ? "up to " : "", st.result.devices, hw->name, server,
               st.cached ? ", cache hit" : "");
    if (!json && cfg->shard_count > 1)
        printf("shard %u/%u: %llu candidates\n", cfg->shard_index, cfg->shard_count,
               (unsigned long long)st.result.enumerated);
    print_result(&st.result, json);
    if (!json && st.cache_hits)
        printf("searched in %.2f s (%llu candidates' figures kept from earlier searches)\n",
               st.elapsed_s, (unsigned long long)st.cache_hits);
    else if (!json)
        printf("searched in %.2f s\n", st.elapsed_s);
    search_result_fini(&st.result);
    ir_module_free(m);
    hw_free(hw);
    return CLI_OK;
}

int
cmd_search(int argc, char **argv)
{
    const char *file = NULL, *hwname = "a100-dgx", *server = NULL, *logfile = NULL, *v;
    cli_model_ref mr = {NULL, 0, {NULL}};
    search_config cfg;
    di_error err;
    int json = 0, nmerge = 0, merging = 0, timeout_ms = 0, kernels = 0;
    unsigned jobs = 0;
    char **merge_files = NULL;
    int rc;

    search_config_init(&cfg);
    merge_files = calloc((size_t)argc + 1, sizeof *merge_files);
    if (merge_files == NULL)
        abort();
    for (int i = 1; i < argc; i++) {
        int r = 0, matched = 0;
        if (cli_is_help(argv[i])) {
            free(merge_files);
            return cli_help(usage);
        }
        if (cli_flag(argv[i], "--json")) {
            json = 1;
            continue;
        }
        if (cli_flag(argv[i], "--merge")) {
            merging = 1;
            continue;
        }
        if (cli_flag(argv[i], "--nested")) {
            cfg.nested = 1;
            continue;
        }
        if ((r = cli_opt(argc, argv, &i, "--hw", &v)) != 0) {
            if (r < 0)
                goto usage;
            hwname = v;
            continue;
        }
        if ((r = cli_opt(argc, argv, &i, "--server", &v)) != 0) {
            if (r < 0)
                goto usage;
            server = v;
            continue;
        }
        if ((r = cli_opt(argc, argv, &i, "--log-candidates", &v)) != 0) {
            if (r < 0)
                goto usage;
            logfile = v;
            continue;
        }
        if ((r = cli_opt(argc, argv, &i, "--timeout-ms", &v)) != 0) {
            long t;
            if (r < 0 || !cli_long_in(v, 0, 86400000L, &t)) {
                cli_error("bad --timeout-ms '%s'", r < 0 ? "" : v);
                goto usage;
            }
            timeout_ms = (int)t;
            continue;
        }
        if ((r = cli_opt(argc, argv, &i, "--jobs", &v)) != 0) {
            long t;
            if (r < 0 || !cli_long_in(v, 1, 256, &t)) {
                cli_error("bad --jobs '%s' (1 to 256 threads)", r < 0 ? "" : v);
                goto usage;
            }
            jobs = (unsigned)t;
            continue;
        }
        if ((r = cli_opt(argc, argv, &i, "--model", &v)) != 0) {
            if (r < 0)
                goto usage;
            mr.name = v;
            continue;
        }
        if ((r = cli_model_opt(argc, argv, &i, &mr)) != 0) {
            if (r < 0)
                goto usage;
            continue;
        }
        if ((r = cli_opt(argc, argv, &i, "--fix", &v)) != 0) {
            if (r < 0)
                goto usage;
            if (search_config_fix(&cfg, v, &err) != 0) {
                cli_error("bad --fix '%s': %s", v, err.msg);
                goto usage;
            }
            continue;
        }
        for (size_t k = 0; k < sizeof list_options / sizeof list_options[0] && !matched; k++) {
            char flag[64];
            snprintf(flag, sizeof flag, "--%s", list_options[k]);
            if ((r = cli_opt(argc, argv, &i, flag, &v)) == 0)
                continue;
            matched = 1;
            if (r < 0)
                goto usage;
            kernels |= strcmp(list_options[k], "kernels") == 0;
            if (search_config_set(&cfg, list_options[k], v, &err) != 0) {
                cli_error("bad %s: %s", flag, err.msg);
                goto usage;
            }
        }
        if (matched)
            continue;
        if (argv[i][0] == '-' && argv[i][1] != '\0') {
            cli_error("unknown option '%s'", argv[i]);
            goto usage;
        }
        if (merging)
            merge_files[nmerge++] = argv[i];
        else if (file == NULL)
            file = argv[i];
        else
            goto usage;
    }
    if (mr.argc > 0 && mr.name == NULL) {
        cli_error("'%s' is a model option: it needs --model NAME", mr.argv[0]);
        goto usage;
    }
    if (logfile != NULL && merging) {
        cli_error("--log-candidates is for a search (not --merge)");
        goto usage;
    }
    if (merging) {
        if (file != NULL || mr.name != NULL || nmerge == 0)
            goto usage;
        rc = merge(nmerge, merge_files, json);
    } else if ((file == NULL) == (mr.name == NULL)) {
        if (file != NULL)
            cli_error("give a FILE or --model NAME, not both");
        goto usage;
    } else {
        hw_model *hw = NULL;
        if (mr.name != NULL && hw_load(hwname, &hw, &err) == 0) {
            cli_warn_model_defaults(&mr, hw, kernels);
            hw_free(hw);
        }
        if (server != NULL)
            rc = search_remote(server, file, &mr, hwname, &cfg, json, timeout_ms, logfile);
        else
            rc = search(file, &mr, hwname, &cfg, json, jobs ? jobs : default_jobs(), logfile);
    }
    free(merge_files);
    return rc;
usage:
    free(merge_files);
    return cli_usage(usage);
}
