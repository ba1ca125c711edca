/*
 * search.c: one strategy search shared by the daemon's workers (search.h).
 *
 * Threads: srv_search_prepare (then srv_search_lookup, and srv_search_plan
 * when the search is not stored) runs on one worker before any other job of
 * the search starts; afterwards the space, the config and the input are
 * immutable and read by every worker. Each srv_search_work call owns
 * parts[part], planners[part] and its own search_evaluator; the only shared
 * mutable state is the plan (its cursor, seed slots and rounds: lib/search/plan.c),
 * the counters (atomics) and the best point (best_lock). The
 * loop thread reads those for progress events and touches the parts only
 * after every work job has been handed back through the inbox (which orders
 * the memory).
 */
#include "search.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <uv.h>

#include "base/pb.h"
#include "cache.h"
#include "distir.pb-c.h"
#include "reply.h"
#include "search/search.h"

/* A line of the candidate log (SearchLogEntry), until a progress event sends it. */
typedef struct log_line {
    search_point p;      /* the candidate and its figures (refinement: unused) */
    double time_bound_s; /* its bounds */
    uint64_t memory_bound;
    double eval_s;
    unsigned worker; /* the part */
    int refinement;  /* a part's refinement: refined points in eval_s seconds */
    uint32_t refined;
} log_line;

/* Lines a progress event carries at most (a message stays far below gRPC's 4 MiB). */
#define LOG_PER_EVENT 4096u

struct srv_search {
    grpc_slice bytes;
    request_limits limits;
    di_hash scope; /* the tenant's key scope (srv_search_set_scope), if scoped */
    int scoped;
    uint64_t max_candidates;
    int64_t test_delay_ms;
    uint64_t t0_ns;

    /* Immutable once prepared. */
    int prepared;
    request_input *input;
    search_config cfg;
    search_space space;
    uint64_t total; /* candidates of the shard */

    /* Shared by the workers. */
    int planned;                 /* plan and planners are initialized */
    search_plan plan;            /* branch and bound: the order, the seed, what is pruned */
    search_planner *planners;    /* per part */
    atomic_uint_fast64_t done;   /* candidates evaluated */
    atomic_uint_fast64_t count[SEARCH_NSTATUS];
    atomic_int cancel;
    pthread_mutex_t best_lock;
    int have_best;
    search_point best;

    unsigned nparts;
    search_result *parts;

    /*
     * Simulations kept between searches (cache_evals_*): the memo, loaded by
     * srv_search_load_evals before the workers start and only read by them;
     * per part, a journal of what it simulated, stored by srv_search_store_evals.
     */
    search_memo memo;
    search_memo *journals;
    uint32_t *flushed; /* per part: its journal's entries stored so far */
    uint64_t *flushed_ns; /* per part: when they were (uv_hrtime; the search's start at first) */
    int flush_failed;     /* the last store between slices failed */

    /* A stored result found by srv_search_lookup (NULL on a miss). */
    Distir__V1__SearchResult *stored;

    /* Per part: a cancelled candidate's module, for srv_search_take_garbage. */
    ir_module **garbage;
    int test_cancel_in_simulation; /* srv_search_test_cancel_in_simulation */

    /* SearchRequest.log_candidates: the lines not sent yet, oldest first. */
    int log;
    pthread_mutex_t log_lock;
    log_line *logv;
    size_t nlog, clog, logsent; /* logv[logsent .. nlog) are pending */
};

srv_search *
srv_search_new(grpc_slice bytes, const request_limits *lim, uint64_t max_candidates,
               unsigned nparts, int64_t test_delay_ms)
{
    srv_search *s = di_xcalloc(1, sizeof *s);
    s->bytes = bytes;
    s->limits = *lim;
    s->max_candidates = max_candidates;
    s->test_delay_ms = test_delay_ms;
    s->t0_ns = uv_hrtime();
    s->nparts = nparts > 0 ? nparts : 1;
    atomic_init(&s->done, 0);
    for (int i = 0; i < SEARCH_NSTATUS; i++)
        atomic_init(&s->count[i], 0);
    atomic_init(&s->cancel, 0);
    pthread_mutex_init(&s->best_lock, NULL);
    pthread_mutex_init(&s->log_lock, NULL);
    s->parts = di_xcalloc(s->nparts, sizeof *s->parts);
    search_memo_init(&s->memo);
    s->journals = di_xcalloc(s->nparts, sizeof *s->journals);
    s->flushed = di_xcalloc(s->nparts, sizeof *s->flushed);
    s->flushed_ns = di_xcalloc(s->nparts, sizeof *s->flushed_ns);
    s->garbage = di_xcalloc(s->nparts, sizeof *s->garbage);
    for (unsigned i = 0; i < s->nparts; i++)
        s->flushed_ns[i] = s->t0_ns;
    for (unsigned i = 0; i < s->nparts; i++)
        search_memo_init(&s->journals[i]);
    return s;
}

void
srv_search_free(srv_search *s)
{
    if (s == NULL)
        return;
    if (s->planned) {
        for (unsigned i = 0; i < s->nparts; i++)
            search_planner_fini(&s->planners[i]);
        search_plan_fini(&s->plan);
    }
    di_free(s->planners);
    if (s->prepared) {
        for (unsigned i = 0; i < s->nparts; i++)
            search_result_fini(&s->parts[i]);
        search_space_fini(&s->space);
    }
    if (s->stored != NULL)
        protobuf_c_message_free_unpacked(&s->stored->base, NULL);
    search_memo_fini(&s->memo);
    for (unsigned i = 0; i < s->nparts; i++)
        search_memo_fini(&s->journals[i]);
    di_free(s->journals);
    di_free(s->flushed);
    di_free(s->flushed_ns);
    for (unsigned i = 0; i < s->nparts; i++)
        ir_module_free(s->garbage[i]);
    di_free(s->garbage);
    request_input_unref(s->input);
    grpc_slice_unref(s->bytes);
    pthread_mutex_destroy(&s->best_lock);
    pthread_mutex_destroy(&s->log_lock);
    di_free(s->logv);
    di_free(s->parts);
    di_free(s);
}

/* Adds each value of a proto list to the config's list `name`, validated as the CLI's are. */
static int
config_list(search_config *cfg, const char *name, size_t n, const uint32_t *v, di_error *err)
{
    if (n > SEARCH_MAX_SET)
        return di_error_set(err, DI_EINVAL, "constraints: %s lists %zu values, at most %u", name, n,
                            SEARCH_MAX_SET);
    for (size_t i = 0; i < n; i++) {
        char text[16];
        int rc;
        snprintf(text, sizeof text, "%u", v[i]);
        if ((rc = search_config_set(cfg, name, text, err)) != 0) {
            di_error_prefix(err, "constraints");
            return rc;
        }
    }
    return 0;
}

static int
config_mask(uint32_t *dst, uint32_t mask, uint32_t valid, const char *name, di_error *err)
{
    if (mask & ~valid)
        return di_error_set(err, DI_EINVAL, "constraints: %s mask 0x%x has bits outside 0x%x", name,
                            mask, valid);
    *dst = mask;
    return 0;
}

static int
config_from_proto(const Distir__V1__SearchRequest *req, search_config *cfg, di_error *err)
{
    const Distir__V1__SearchConstraints *c = req->constraints;
    int rc = 0;
    search_config_init(cfg);
    cfg->devices = req->devices;
    if ((unsigned)req->objective >= SEARCH_NOBJECTIVE)
        return di_error_set(err, DI_EINVAL, "objective %d is not a SearchObjective",
                            (int)req->objective);
    /* The proto's values are search_objective's. */
    cfg->objective = (search_objective)req->objective;
    if (req->n_device_counts > SEARCH_MAX_SET)
        return di_error_set(err, DI_EINVAL, "more than %u device counts", SEARCH_MAX_SET);
    for (size_t i = 0; i < req->n_device_counts; i++) {
        uint32_t d = req->device_counts[i], k;
        if (d < 1 || d > HW_MAX_DEVICES)
            return di_error_set(err, DI_EINVAL, "device count %u is not in 1..%u", d,
                                HW_MAX_DEVICES);
        for (k = 0; k < cfg->ndevice_counts && cfg->device_counts[k] != d; k++)
            ;
        if (k == cfg->ndevice_counts)
            cfg->device_counts[cfg->ndevice_counts++] = d;
    }
    if (cfg->ndevice_counts == 1) { /* one count is `devices` */
        cfg->devices = cfg->device_counts[0];
        cfg->ndevice_counts = 0;
        cfg->device_counts[0] = 0;
    }
    {
        const double v[3] = {req->target_step_s, req->price_per_device_hour, req->train_tokens};
        for (int i = 0; i < 3; i++)
            if (!(v[i] >= 0 && v[i] < 1e30))
                return di_error_set(err, DI_EINVAL,
                                    "target_step_s, price_per_device_hour and train_tokens must "
                                    "be non-negative numbers");
        cfg->tf32 = req->tf32;
        cfg->fuse = req->fuse;
        cfg->no_grad_accum_fusion = req->no_grad_accum_fusion;
        cfg->target_step_s = v[0];
        cfg->price_per_device_hour = v[1];
        cfg->train_tokens = v[2];
    }
    if (req->top_k > SEARCH_MAX_TOP)
        return di_error_set(err, DI_EINVAL, "top_k %u is above %u", req->top_k, SEARCH_MAX_TOP);
    if (req->top_k > 0)
        cfg->top_k = req->top_k;
    cfg->shard_index = req->shard_index;
    cfg->shard_count = req->shard_count > 0 ? req->shard_count : 1;
    if (cfg->shard_index >= cfg->shard_count)
        return di_error_set(err, DI_EINVAL, "shard %u/%u: the index must be below the count",
                            cfg->shard_index, cfg->shard_count);
    if (c == NULL)
        return 0;
    if ((rc = config_list(cfg, "dp", c->n_dp, c->dp, err)) != 0 ||
        (rc = config_list(cfg, "tp", c->n_tp, c->tp, err)) != 0 ||
        (rc = config_list(cfg, "pp", c->n_pp, c->pp, err)) != 0 ||
        (rc = config_list(cfg, "cp", c->n_cp, c->cp, err)) != 0 ||
        (rc = config_list(cfg, "microbatches", c->n_microbatches, c->microbatches, err)) != 0 ||
        (rc = config_list(cfg, "virtual-stages", c->n_virtual_stages, c->virtual_stages, err)) !=
            0 ||
        (rc = config_list(cfg, "recompute-layers", c->n_recompute_layers, c->recompute_layers,
                          err)) != 0)
        return rc;
    if ((rc = config_mask(&cfg->schedules, c->schedules,
                          1u << DISTIR__V1__SCHEDULE__SCHEDULE_GPIPE |
                              1u << DISTIR__V1__SCHEDULE__SCHEDULE_1F1B |
                              1u << DISTIR__V1__SCHEDULE__SCHEDULE_INTERLEAVED,
                          "schedules", err)) != 0 ||
        (rc = config_mask(&cfg->recomputes, c->recomputes, 0xf, "recomputes", err)) != 0 ||
        (rc = config_mask(&cfg->zeros, c->zero, 0xf, "zero", err)) != 0 ||
        (rc = config_mask(&cfg->sequence_parallel, c->sequence_parallel, 0x3, "sequence_parallel",
                          err)) != 0 ||
        (rc = config_mask(&cfg->overlap, c->overlap_grad_reduce, 0x3, "overlap_grad_reduce",
                          err)) != 0 ||
        (rc = config_mask(&cfg->orders, c->orders, 0x3, "orders", err)) != 0)
        return rc;
    cfg->nested = c->nested;
    if (c->memory_headroom != 0) {
        if (!(c->memory_headroom > 0 && c->memory_headroom <= 1))
            return di_error_set(err, DI_EINVAL, "constraints: memory_headroom %g is not in (0, 1]",
                                c->memory_headroom);
        cfg->memory_headroom = c->memory_headroom;
    }
    if (c->pareto_within != 0) {
        if (!(c->pareto_within >= 1 && c->pareto_within < 1e30))
            return di_error_set(err, DI_EINVAL,
                                "constraints: pareto_within %g is not a ratio >= 1 (0: no limit)",
                                c->pareto_within);
        cfg->pareto_within = c->pareto_within;
    }
    cfg->no_compose = c->full_simulation;
    cfg->refine_pareto = c->refine_pareto;
    cfg->no_time_bound = c->no_time_bound;
    return 0;
}

int
srv_search_prepare(srv_search *s, di_error *err)
{
    ProtobufCMessage *msg = NULL;
    const Distir__V1__SearchRequest *req;
    int rc;
    /* The request and module wrappers add two levels above the module's own. */
    rc = pb_unpack_checked(&distir__v1__search_request__descriptor, GRPC_SLICE_START_PTR(s->bytes),
                           GRPC_SLICE_LENGTH(s->bytes), (int)s->limits.ir.max_depth + 2, &msg, err);
    if (rc != 0) {
        if (err != NULL && err->code == 0)
            err->code = rc;
        di_error_prefix(err, "request");
        return rc;
    }
    req = (const void *)msg;
    s->log = req->log_candidates;
    rc = config_from_proto(req, &s->cfg, err);
    if (rc == 0)
        rc = request_decode_input(req->module, req->model, req->hardware, &s->limits, NULL,
                                  &s->input, err);
    protobuf_c_message_free_unpacked(msg, NULL);
    if (rc != 0)
        return rc;
    /* The candidates and the key only: a stored search needs no more (srv_search_plan). */
    rc = search_space_init_keyed(&s->space, s->input->module, s->input->hw, &s->cfg, err);
    if (rc != 0) {
        di_error_prefix(err, "search");
        return rc;
    }
    s->prepared = 1;
    for (unsigned i = 0; i < s->nparts; i++)
        search_result_init(&s->parts[i], &s->space);
    s->total = search_space_shard_size(&s->space);
    if (s->total > s->max_candidates)
        return di_error_set(err, DI_ETOOBIG,
                            "the search space has %llu candidates to evaluate, the limit is "
                            "%llu (--max-search-candidates): constrain it (--tp, --fix, ...) or "
                            "shard it",
                            (unsigned long long)s->total, (unsigned long long)s->max_candidates);
    return 0;
}

void
srv_search_plan(srv_search *s)
{
    if (!s->prepared || s->planned)
        return;
    search_space_analyse(&s->space);
    search_plan_init(&s->plan, &s->space);
    s->planners = di_xcalloc(s->nparts, sizeof *s->planners);
    for (unsigned i = 0; i < s->nparts; i++)
        search_planner_init(&s->planners[i], &s->plan);
    s->planned = 1;
}

/* Testing only: waits test_delay_ms, polling the cancel flag every millisecond. */
static void
test_delay(srv_search *s)
{
    for (int64_t i = 0; i < s->test_delay_ms && !atomic_load(&s->cancel); i++) {
        struct timespec ts = {0, 1000000L};
        nanosleep(&ts, NULL);
    }
}

/* Whether a is better than b by the search's objective, ties by enumeration index. */
static int
point_better(const search_result *r, const search_point *a, const search_point *b)
{
    return search_point_compare(r, a, b) < 0;
}

/* Appends a line to the candidate log (any worker). */
static void
log_add(srv_search *s, const log_line *l)
{
    pthread_mutex_lock(&s->log_lock);
    if (s->logsent == s->nlog) /* everything sent: start over */
        s->nlog = s->logsent = 0;
    DI_GROW(&s->logv, &s->clog, s->nlog + 1);
    s->logv[s->nlog++] = *l;
    pthread_mutex_unlock(&s->log_lock);
}

/* An evaluated candidate's line, as distir search --log-candidates writes it in process. */
static void
log_point(srv_search *s, unsigned part, const search_point *p, double seconds)
{
    log_line l;
    if (p->status != SEARCH_OK && p->status != SEARCH_OOM && p->status != SEARCH_FAILED)
        return;
    memset(&l, 0, sizeof l);
    l.p = *p;
    l.time_bound_s = search_time_bound_schedule(&s->space, &p->cand);
    l.memory_bound = search_memory_bound(&s->space, &p->cand);
    l.eval_s = seconds;
    l.worker = part;
    log_add(s, &l);
}

int
srv_search_work(srv_search *s, unsigned part, uint64_t slice_ns, struct sim_workspace *ws)
{
    search_evaluator ev;
    search_result *r = &s->parts[part];
    struct timespec ts;
    uint64_t t0;
    int more = 0;
    if (!s->planned)
        return 0; /* never planned: a stored search, or a failed prepare */
    clock_gettime(CLOCK_MONOTONIC, &ts);
    t0 = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    search_evaluator_init_ws(&ev, &s->space, ws);
    ev.cancel = &s->cancel; /* a cancel reaches into the candidate's simulation */
    if (s->test_cancel_in_simulation)
        ev.test_flag_after_transform = &s->cancel;
    ev.memo = &s->memo;
    ev.journal = &s->journals[part];
    while (!atomic_load(&s->cancel)) {
        uint64_t now;
        search_point p;
        uint64_t t_eval;
        int k;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        now = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
        if (slice_ns > 0 && now - t0 >= slice_ns) {
            more = 1; /* the rest in a later slice (a later call may find nothing left) */
            break;
        }
        if (s->test_delay_ms > 0)
            test_delay(s);
        t_eval = s->log ? uv_hrtime() : 0;
        k = search_plan_next(&s->planners[part], &ev, &p);
        if (k == SEARCH_PLAN_POINT && s->log)
            log_point(s, part, &p, (double)(uv_hrtime() - t_eval) / 1e9);
        if (k == SEARCH_PLAN_END)
            break;
        if (k == SEARCH_PLAN_WAIT) { /* another worker is finishing the seed */
            struct timespec ms = {0, 1000000};
            nanosleep(&ms, NULL);
            continue;
        }
        if (k != SEARCH_PLAN_POINT)
            continue;
        search_result_add(r, &p);
        atomic_fetch_add(&s->count[p.status < SEARCH_NSTATUS ? p.status : SEARCH_FAILED], 1);
        atomic_fetch_add(&s->done, 1);
        if (p.status == SEARCH_OK) {
            pthread_mutex_lock(&s->best_lock);
            if (!s->have_best || point_better(r, &p, &s->best)) {
                s->best = p;
                s->have_best = 1;
            }
            pthread_mutex_unlock(&s->best_lock);
        }
    }
    /*
     * No more candidates for this part (it is not called again): its composed
     * best that may be in the whole answer are re-simulated in full before the
     * merge (not sliced; points already re-simulated are skipped).
     */
    if (!more && !atomic_load(&s->cancel)) {
        uint64_t t_refine = s->log ? uv_hrtime() : 0;
        uint32_t n = search_planner_refine(&s->planners[part], &ev, r);
        if (s->log) {
            log_line l;
            memset(&l, 0, sizeof l);
            l.refinement = 1;
            l.refined = n;
            l.eval_s = (double)(uv_hrtime() - t_refine) / 1e9;
            l.worker = part;
            log_add(s, &l);
        }
    }
    /* A cancelled candidate's module: freed once the caller has answered. */
    ir_module_free(s->garbage[part]);
    s->garbage[part] = search_evaluator_take_garbage(&ev);
    search_evaluator_fini(&ev);
    return more;
}

void
srv_search_test_cancel_in_simulation(srv_search *s)
{
    s->test_cancel_in_simulation = 1;
}

ir_module *
srv_search_take_garbage(srv_search *s, unsigned part)
{
    ir_module *g = part < s->nparts ? s->garbage[part] : NULL;
    if (g != NULL)
        s->garbage[part] = NULL;
    return g;
}

void
srv_search_cancel(srv_search *s)
{
    atomic_store(&s->cancel, 1);
}

int
srv_search_cancelled(srv_search *s)
{
    return atomic_load(&s->cancel);
}

uint64_t
srv_search_total(const srv_search *s)
{
    return s->total;
}

uint64_t
srv_search_done(srv_search *s)
{
    return atomic_load(&s->done);
}

/* ---------------------------------------------------------------- stored searches */

void
srv_search_set_scope(srv_search *s, const di_hash *scope)
{
    s->scope = *scope;
    s->scoped = 1;
}

void
srv_search_store_key(const srv_search *s, di_hash *key)
{
    static const char domain[] = "distir.search.store.v1";
    di_sha256 h;
    di_sha256_init(&h);
    di_sha256_update(&h, domain, sizeof domain); /* with its NUL */
    if (s->scoped) /* each tenant's searches under its own keys */
        di_sha256_update(&h, s->scope.b, sizeof s->scope.b);
    di_sha256_update(&h, s->space.key.b, sizeof s->space.key.b);
    di_sha256_u64(&h, s->cfg.shard_index);
    di_sha256_u64(&h, s->cfg.shard_count);
    di_sha256_final(&h, key);
}

/* Whether a decoded stored result is a whole result of this search. */
static int
stored_matches(const srv_search *s, const Distir__V1__SearchResult *r)
{
    char key[65];
    uint64_t sum = 0;
    di_hash_hex(&s->space.key, key);
    if (r->search_key == NULL || strcmp(r->search_key, key) != 0 || r->json == NULL ||
        r->json[0] == '\0' || r->enumerated != s->total || r->n_counts != SEARCH_NSTATUS ||
        r->space_candidates != s->space.ncandidate)
        return 0;
    for (int i = 0; i < SEARCH_NSTATUS; i++) {
        if (r->counts[i] == NULL || r->counts[i]->status == NULL ||
            strcmp(r->counts[i]->status, search_status_name(i)) != 0)
            return 0;
        sum += r->counts[i]->count;
    }
    if (sum != r->enumerated)
        return 0;
    /* The JSON is what clients read: it must parse, as this search's result. */
    search_result parsed;
    if (search_result_from_json(r->json, strlen(r->json), &parsed, NULL) != 0)
        return 0;
    int same = memcmp(parsed.key.b, s->space.key.b, sizeof parsed.key.b) == 0 &&
               parsed.enumerated == r->enumerated;
    search_result_fini(&parsed);
    return same;
}

int
srv_search_lookup(srv_search *s, struct cache *c)
{
    di_hash key;
    const uint8_t *data;
    size_t len;
    ProtobufCMessage *msg;
    if (s->stored != NULL)
        return 1;
    if (!s->prepared || c == NULL)
        return 0;
    srv_search_store_key(s, &key);
    if (cache_search_get(c, &key, &data, &len, NULL) != 0)
        return 0;
    msg = protobuf_c_message_unpack(&distir__v1__search_result__descriptor, NULL, len, data);
    if (msg == NULL)
        return 0;
    if (!stored_matches(s, (Distir__V1__SearchResult *)msg)) {
        protobuf_c_message_free_unpacked(msg, NULL);
        return 0;
    }
    s->stored = (Distir__V1__SearchResult *)msg;
    /* The counters as if every candidate had been evaluated, for the progress event. */
    for (int i = 0; i < SEARCH_NSTATUS; i++)
        atomic_store(&s->count[i], s->stored->counts[i]->count);
    atomic_store(&s->done, s->total);
    return 1;
}

int
srv_search_hit(const srv_search *s)
{
    return s->stored != NULL;
}

/* ---------------------------------------------------------------- simulations kept */

/* The key of the search's stored simulations: its space's eval_key, in the tenant's scope. */
static void
evals_key(const srv_search *s, di_hash *key)
{
    static const char domain[] = "distir.search.evals.v1";
    di_sha256 h;
    di_sha256_init(&h);
    di_sha256_update(&h, domain, sizeof domain); /* with its NUL */
    if (s->scoped)
        di_sha256_update(&h, s->scope.b, sizeof s->scope.b);
    di_sha256_update(&h, s->space.eval_key.b, sizeof s->space.eval_key.b);
    di_sha256_final(&h, key);
}

static int
add_row(void *ctx, const uint8_t *data, size_t len)
{
    return search_memo_unpack_all(data, len, ctx, NULL);
}

uint32_t
srv_search_load_evals(srv_search *s, struct cache *c)
{
    di_hash key;
    uint32_t rows = 0;
    if (!s->planned || c == NULL)
        return 0;
    evals_key(s, &key);
    /* A read error leaves the memo as far as it got: those candidates are simulated. */
    (void)cache_evals_each(c, &key, add_row, &s->memo, &rows, NULL);
    return s->memo.n;
}

/*
 * Stores, as one row, the entries of the parts' journals [first, last) not
 * stored yet and not loaded from the cache, and marks them stored.
 */
static int
store_parts(srv_search *s, unsigned first, unsigned last, struct cache *c, uint32_t *stored,
            di_error *err)
{
    search_memo all;
    uint8_t *data;
    size_t len;
    di_hash key;
    int rc = 0;
    *stored = 0;
    if (!s->planned || c == NULL)
        return 0;
    search_memo_init(&all);
    for (unsigned i = first; i < last; i++)
        for (uint32_t j = s->flushed[i]; j < s->journals[i].n; j++)
            if (search_memo_find(&s->memo, &s->journals[i].v[j].cand,
                                 s->journals[i].v[j].composed) == NULL)
                search_memo_add(&all, &s->journals[i].v[j]);
    if (all.n > 0) {
        search_memo_pack_all(&all, &data, &len);
        evals_key(s, &key);
        rc = cache_evals_put(c, &key, data, len, err);
        if (rc == 0)
            *stored = all.n;
        di_free(data);
    }
    search_memo_fini(&all);
    if (rc == 0) /* else kept for the next try (the store at the end) */
        for (unsigned i = first; i < last; i++)
            s->flushed[i] = s->journals[i].n;
    return rc;
}

int
srv_search_store_evals(srv_search *s, struct cache *c, uint32_t *stored, di_error *err)
{
    return store_parts(s, 0, s->nparts, c, stored, err);
}

int
srv_search_flush_evals(srv_search *s, unsigned part, uint32_t min_new, uint64_t every_ns,
                       struct cache *c, uint32_t *stored, di_error *err)
{
    uint32_t fresh;
    uint64_t now = uv_hrtime();
    *stored = 0;
    if (part >= s->nparts)
        return 0;
    fresh = s->journals[part].n - s->flushed[part];
    /* After a failed store (a full disk), only every every_ns: not at every slice. */
    if (fresh == 0 ||
        ((fresh < min_new || s->flush_failed) && now - s->flushed_ns[part] < every_ns))
        return 0;
    s->flushed_ns[part] = now;
    int rc = store_parts(s, part, part + 1, c, stored, err);
    s->flush_failed = rc != 0;
    return rc;
}

/* ---------------------------------------------------------------- events */

/* Fills *pp (and *spec, which the caller frees with strategy_proto_fini) from p. */
static void
point_to_proto(const search_point *p, Distir__V1__SearchPoint *pp, Distir__V1__Strategy *spec,
               char *text, size_t size)
{
    strategy st;
    distir__v1__search_point__init(pp);
    distir__v1__strategy__init(spec);
    search_candidate_strategy(&p->cand, &st);
    strategy_to_proto(&st, spec);
    strategy_fini(&st);
    search_candidate_format(&p->cand, text, size);
    pp->index = p->cand.index;
    pp->strategy = text;
    pp->spec = spec;
    search_figures f = search_point_reported(p);
    pp->status = (char *)search_status_name(f.status);
    pp->step_time_s = f.step_time_s;
    pp->peak_memory_bytes = f.peak_memory_bytes;
    pp->tokens_per_s = f.tokens_per_s;
    pp->mfu = f.mfu;
    pp->composed = p->composed;
    pp->estimate = p->composed && !p->refined;
    pp->estimate_step_time_s = p->step_time_s;
    pp->estimate_peak_memory_bytes = p->peak_memory_bytes;
}

/* counts[i] for every status into n entries (storage from the caller). */
static void
counts_to_proto(const uint64_t *count, Distir__V1__SearchCount *store,
                Distir__V1__SearchCount **ptrs)
{
    for (int i = 0; i < SEARCH_NSTATUS; i++) {
        distir__v1__search_count__init(&store[i]);
        store[i].status = (char *)search_status_name(i);
        store[i].count = count[i];
        ptrs[i] = &store[i];
    }
}

static double
elapsed_s(const srv_search *s)
{
    return (double)(uv_hrtime() - s->t0_ns) / 1e9;
}

/* Encodes n points (storage from the heap, freed by points_free). */
typedef struct proto_points {
    uint32_t n;
    Distir__V1__SearchPoint *pts, **ptrs;
    Distir__V1__Strategy *specs;
    char (*texts)[256];
} proto_points;

static void
points_init(proto_points *pp, const search_point *pts, uint32_t n)
{
    pp->n = n;
    pp->pts = di_xcalloc(n ? n : 1, sizeof *pp->pts);
    pp->ptrs = di_xcalloc(n ? n : 1, sizeof *pp->ptrs);
    pp->specs = di_xcalloc(n ? n : 1, sizeof *pp->specs);
    pp->texts = di_xcalloc(n ? n : 1, sizeof *pp->texts);
    for (uint32_t i = 0; i < n; i++) {
        point_to_proto(&pts[i], &pp->pts[i], &pp->specs[i], pp->texts[i], sizeof pp->texts[i]);
        pp->ptrs[i] = &pp->pts[i];
    }
}

static void
points_fini(proto_points *pp)
{
    for (uint32_t i = 0; i < pp->n; i++)
        strategy_proto_fini(&pp->specs[i]);
    di_free(pp->pts);
    di_free(pp->ptrs);
    di_free(pp->specs);
    di_free(pp->texts);
}

/* The log's lines for one event, taken from the pending ones (at most LOG_PER_EVENT). */
typedef struct proto_log {
    size_t n;
    Distir__V1__SearchLogEntry *v, **ptrs;
    char (*texts)[256];
} proto_log;

static void
log_take(srv_search *s, proto_log *pl)
{
    size_t n;
    memset(pl, 0, sizeof *pl);
    pthread_mutex_lock(&s->log_lock);
    n = s->nlog - s->logsent;
    if (n > LOG_PER_EVENT)
        n = LOG_PER_EVENT;
    if (n > 0) {
        pl->v = di_xcalloc(n, sizeof *pl->v);
        pl->ptrs = di_xcalloc(n, sizeof *pl->ptrs);
        pl->texts = di_xcalloc(n, sizeof *pl->texts);
    }
    for (size_t i = 0; i < n; i++) {
        const log_line *l = &s->logv[s->logsent + i];
        Distir__V1__SearchLogEntry *e = &pl->v[i];
        distir__v1__search_log_entry__init(e);
        e->worker = l->worker;
        e->eval_s = l->eval_s;
        if (l->refinement) {
            e->refinement = 1;
            e->refined = l->refined;
        } else {
            search_candidate_format(&l->p.cand, pl->texts[i], sizeof pl->texts[i]);
            e->index = l->p.cand.index;
            e->strategy = pl->texts[i];
            e->status = (char *)search_status_name(l->p.status);
            e->step_time_s = l->p.step_time_s;
            e->peak_memory_bytes = l->p.peak_memory_bytes;
            e->composed = l->p.composed != 0;
            e->unsteady = l->p.unsteady != 0;
            e->time_bound_s = l->time_bound_s;
            e->memory_bound_bytes = l->memory_bound;
        }
        pl->ptrs[i] = e;
    }
    s->logsent += n;
    pl->n = n;
    pthread_mutex_unlock(&s->log_lock);
}

static void
log_free(proto_log *pl)
{
    di_free(pl->v);
    di_free(pl->ptrs);
    di_free(pl->texts);
}

int
srv_search_log_pending(srv_search *s)
{
    int pending;
    pthread_mutex_lock(&s->log_lock);
    pending = s->nlog > s->logsent;
    pthread_mutex_unlock(&s->log_lock);
    return pending;
}

grpc_byte_buffer *
srv_search_progress(srv_search *s)
{
    Distir__V1__SearchEvent ev = DISTIR__V1__SEARCH_EVENT__INIT;
    Distir__V1__SearchProgress pr = DISTIR__V1__SEARCH_PROGRESS__INIT;
    Distir__V1__SearchCount store[SEARCH_NSTATUS], *ptrs[SEARCH_NSTATUS];
    Distir__V1__SearchPoint best;
    Distir__V1__Strategy spec;
    uint64_t count[SEARCH_NSTATUS];
    search_point p;
    const search_point *settled;
    uint32_t nsettled;
    proto_points top;
    proto_log log;
    int have, have_top = 0;
    char text[256];
    grpc_byte_buffer *bb;
    /* done is the sum of the counts read, so that an event is consistent in itself. */
    pr.done = 0;
    for (int i = 0; i < SEARCH_NSTATUS; i++) {
        count[i] = atomic_load(&s->count[i]);
        pr.done += count[i];
    }
    counts_to_proto(count, store, ptrs);
    pr.total = s->total;
    pr.n_counts = SEARCH_NSTATUS;
    pr.counts = ptrs;
    pr.elapsed_s = elapsed_s(s);
    pthread_mutex_lock(&s->best_lock);
    have = s->have_best;
    p = s->best;
    pthread_mutex_unlock(&s->best_lock);
    if (have) {
        point_to_proto(&p, &best, &spec, text, sizeof text);
        pr.best = &best;
    }
    /* The top K once the plan has settled it (the plan is made before the first event). */
    if (s->planned && search_plan_settled_top(&s->plan, &settled, &nsettled)) {
        points_init(&top, settled, nsettled);
        pr.n_settled_top = top.n;
        pr.settled_top = top.ptrs;
        have_top = 1;
    }
    log_take(s, &log);
    pr.n_log = log.n;
    pr.log = log.ptrs;
    ev.event_case = DISTIR__V1__SEARCH_EVENT__EVENT_PROGRESS;
    ev.progress = &pr;
    bb = srv_reply_pack(&ev.base);
    if (have)
        strategy_proto_fini(&spec);
    if (have_top)
        points_fini(&top);
    log_free(&log);
    return bb;
}


/* The stored result, marked cached, with this call's elapsed_s. */
static void
stored_result(srv_search *s, grpc_byte_buffer **out)
{
    Distir__V1__SearchEvent ev = DISTIR__V1__SEARCH_EVENT__INIT;
    s->stored->cached = 1;
    s->stored->elapsed_s = elapsed_s(s);
    ev.event_case = DISTIR__V1__SEARCH_EVENT__EVENT_RESULT;
    ev.result = s->stored;
    *out = srv_reply_pack(&ev.base);
}

int
srv_search_result(srv_search *s, grpc_byte_buffer **out, uint8_t **stored, size_t *nstored,
                  di_error *err)
{
    Distir__V1__SearchEvent ev = DISTIR__V1__SEARCH_EVENT__INIT;
    Distir__V1__SearchResult res = DISTIR__V1__SEARCH_RESULT__INIT;
    Distir__V1__SearchCount store[SEARCH_NSTATUS], *ptrs[SEARCH_NSTATUS];
    search_result total;
    proto_points top, pareto;
    search_point *ordered;
    char key[65], *json;
    int rc = 0;
    *out = NULL;
    if (stored != NULL) {
        *stored = NULL;
        *nstored = 0;
    }
    if (s->stored != NULL) {
        stored_result(s, out);
        return 0;
    }
    /* Merge into an empty result: the parts are disjoint, so the merge is the whole. */
    search_result_init(&total, &s->space);
    for (unsigned i = 0; i < s->nparts && rc == 0; i++)
        rc = search_result_merge(&total, &s->parts[i], err);
    if (rc != 0) {
        search_result_fini(&total);
        return rc;
    }
    json = search_result_to_json(&total);
    di_hash_hex(&total.key, key);
    counts_to_proto(total.count, store, ptrs);
    ordered = di_xmalloc((total.ntop ? total.ntop : 1) * sizeof *ordered);
    search_result_reported_top(&total, ordered);
    points_init(&top, ordered, total.ntop);
    di_free(ordered);
    points_init(&pareto, total.pareto, total.npareto);
    res.search_key = key;
    res.objective = total.objective == SEARCH_MAX_THROUGHPUT
                        ? DISTIR__V1__SEARCH_OBJECTIVE__SEARCH_MAX_THROUGHPUT
                        : DISTIR__V1__SEARCH_OBJECTIVE__SEARCH_MIN_TIME;
    res.top_k = total.top_k;
    res.devices = total.devices;
    res.enumerated = total.enumerated;
    res.n_counts = SEARCH_NSTATUS;
    res.counts = ptrs;
    res.n_top = top.n;
    res.top = top.ptrs;
    res.n_pareto = pareto.n;
    res.pareto = pareto.ptrs;
    res.space_candidates = s->space.ncandidate;
    res.cache_hits = total.cache_hits;
    res.elapsed_s = elapsed_s(s);
    res.json = json;
    ev.event_case = DISTIR__V1__SEARCH_EVENT__EVENT_RESULT;
    ev.result = &res;
    *out = srv_reply_pack(&ev.base);
    if (stored != NULL) {
        *nstored = distir__v1__search_result__get_packed_size(&res);
        *stored = di_xmalloc(*nstored ? *nstored : 1);
        distir__v1__search_result__pack(&res, *stored);
    }
    points_fini(&top);
    points_fini(&pareto);
    di_free(json);
    search_result_fini(&total);
    return 0;
}
