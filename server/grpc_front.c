/*
 * grpc_front.c: distird's calls and methods, as state machines driven by
 * srv_events on the loop thread (daemon.h has the thread model).
 *
 * A call context (srv_call) is created when a request for a call is posted,
 * and counts its references: the posted request, the RECV_CLOSE_ON_SERVER
 * batch, a send batch in flight, each job it waits on, a decode job. It is
 * freed, and its grpc_call unreffed, when the count reaches zero, so a tag
 * never outlives its memory (GRPC_NOTES.md 7.7).
 *
 * Replies go out one send batch at a time: a queue of encoded messages, the
 * status last; unary methods send initial metadata, message and status in
 * one batch. SimulateBatch keeps a window of candidates in progress and
 * starts more only as sends complete, so flow control pushes back all the
 * way to the workers.
 *
 * Search runs one search shared by every worker (server/search.h): a
 * prepare job, then one work job per worker on the search's shared plan,
 * progress events from a loop timer, the merged result when all are back
 * (then stored in the cache); a search found stored by its prepare job gets
 * one progress event and the stored result instead.
 *
 * Simulations are deduplicated by cache key: the in-flight table maps a key
 * to the running job, and later identical requests wait on it. A job whose
 * waiters have all gone (cancelled, deadline) gets its cancel flag set and
 * the simulator stops.
 */
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <threads.h>
#include <time.h>

#include "base/pb.h"
#include "baseline.h"
#include "daemon.h"
#include "distir.pb-c.h"
#include "grpc/health/v1/health.pb-c.h"
#include "log.h"
#include "reply.h"
#include "search.h"
#include "sim/compare.h"
#include "sim/sim.h"
#include "status.h"

const char *const srv_method_paths[SRV_NREGISTERED] = {
    "/distir.v1.CostModel/Simulate",  "/distir.v1.CostModel/SimulateBatch",
    "/distir.v1.CostModel/GetResult", "/distir.v1.CostModel/ServerInfo",
    "/grpc.health.v1.Health/Check",   "/distir.v1.CostModel/Search",
    "/distir.v1.CostModel/SetBaseline", "/distir.v1.CostModel/Compare",
    "/distir.v1.CostModel/History",
};

const char *const srv_method_names[SRV_NMETHOD] = {
    "Simulate", "SimulateBatch", "GetResult", "ServerInfo", "HealthCheck", "Search",
    "SetBaseline", "Compare", "History", "unknown",
};

/*
 * A search's work job evaluates candidates for at most this long, then goes
 * back to the end of the pool's queue: concurrent searches (and simulations)
 * share the workers round-robin instead of first come, first served.
 */
#define SEARCH_SLICE_NS (20u * 1000000u)
/*
 * A search's simulations are stored between its slices every 256 entries of a
 * part, or every 10 s when it has any (srv_search_flush_evals): a daemon killed
 * during a long search loses at most that much of its work.
 */
#define SEARCH_EVALS_FLUSH 256u
#define SEARCH_EVALS_FLUSH_NS (10ull * 1000000000ull)

/* Requests kept posted per method, so that calls never wait for a request. */
#define REQUESTS_PER_METHOD 8

typedef struct srv_reply srv_reply;
struct srv_reply {
    srv_reply *next;
    grpc_byte_buffer *bb;
};

/* A call (or batch candidate) waiting for a job. */
typedef struct srv_waiter srv_waiter;
struct srv_waiter {
    srv_waiter *next;      /* in job->waiters */
    srv_waiter *call_next; /* in call->waits */
    srv_call *call;
    srv_job *job;
    uint32_t index; /* candidate index */
    int detached;   /* the call went away */
};

enum { JOB_SIMULATE, JOB_DECODE, JOB_SEARCH_PREPARE, JOB_SEARCH_WORK };

struct srv_job {
    pool_job pj;
    srv_event ev;
    srv_daemon *d;
    int kind;
    atomic_int cancel; /* set by the loop, polled by the worker */
    int64_t test_delay_ms;

    /* JOB_SIMULATE: immutable inputs. */
    request_input *input;
    strategy strategy;
    request_simopts opts;
    di_hash key;
    char key_hex[65];
    /* JOB_SIMULATE: loop-thread state. */
    srv_job *hnext; /* in-flight table chain */
    int in_table;
    srv_waiter *waiters;
    unsigned nlive; /* waiters not detached */

    /* JOB_SEARCH_*: the call's search, and the part of the result this job fills. */
    srv_search *search;
    unsigned part;
    int more; /* JOB_SEARCH_WORK: stopped at the end of its slice with candidates left */

    /* JOB_DECODE and JOB_SEARCH_* */
    srv_call *call;
    srv_identity who; /* JOB_DECODE: the caller's, to scope the key it looks up */
    int digest_only;  /* JOB_DECODE: compute the request digest only (memo), then decode */
    di_hash digest;
    int tenant_slot;  /* JOB_SIMULATE: index in d->tenant_load counted against, or -1 */
    int req_kind;
    grpc_slice bytes;
    request_limits limits;
    request req;
    int hit; /* the worker found the result in the cache */

    /* Results, written by the worker before the hand-off. */
    int rc;
    di_error err;
    uint8_t *result; /* packed SimResult (di_free) */
    size_t result_len;
    double step_time_s;
    uint64_t peak_memory_bytes;
    double run_s; /* seconds on the worker */
};

struct srv_call {
    srv_daemon *d;
    int method;
    grpc_call *call;
    gpr_timespec deadline;
    grpc_metadata_array md;
    grpc_call_details details; /* unregistered methods */
    grpc_byte_buffer *payload;
    srv_event ev_new, ev_close, ev_send;
    int refs;
    int recv_cancelled; /* RECV_CLOSE_ON_SERVER's output */
    unsigned accepted : 1;
    unsigned dead : 1; /* cancelled, expired or failed: send nothing more */
    unsigned md_sent : 1;
    unsigned sending : 1;
    unsigned status_pending : 1;
    unsigned status_sent : 1;
    grpc_status_code status;
    char *status_msg;
    grpc_byte_buffer *inflight;
    srv_reply *rq_head, *rq_tail;
    uint32_t nrq;
    srv_waiter *waits;
    srv_job *decode;
    request req;
    di_hash digest; /* SHA-256 of the request bytes (memo), if has_digest */
    int has_digest;
    uint32_t next, npending, ndone;
    /* Search: the search, its jobs not yet back, the progress timer. */
    srv_search *search;
    unsigned search_jobs;
    struct search_timer *timer;
    uint64_t t0_ns;
    srv_call *live_next, *live_prev;
    srv_identity who; /* set by call_dispatch (auth.c) */
};

static void call_pump(srv_call *c);
static void method_search(srv_call *c);
static void call_advance(srv_call *c);
static void flight_remove(srv_daemon *d, srv_job *job);
static int tenant_slot(srv_daemon *d, const char *tenant);
static void memo_digest(const srv_identity *who, const uint8_t *data, size_t len, di_hash *out);
static int memo_answer(srv_call *c);

static uint64_t
now_ns(void)
{
    return uv_hrtime();
}

/* ---------------------------------------------------------------- call lifetime */

static srv_call *
call_new(srv_daemon *d, int method)
{
    srv_call *c = di_xcalloc(1, sizeof *c);
    c->d = d;
    c->method = method;
    c->refs = 1; /* the posted request */
    c->ev_new.kind = SRV_EV_CALL_NEW;
    c->ev_close.kind = SRV_EV_CALL_CLOSE;
    c->ev_send.kind = SRV_EV_CALL_SEND;
    grpc_metadata_array_init(&c->md);
    if (method == SRV_M_UNKNOWN)
        grpc_call_details_init(&c->details);
    return c;
}

static void
call_free(srv_call *c)
{
    srv_daemon *d = c->d;
    if (c->call != NULL)
        grpc_call_unref(c->call);
    grpc_metadata_array_destroy(&c->md);
    if (c->method == SRV_M_UNKNOWN)
        grpc_call_details_destroy(&c->details);
    if (c->payload != NULL)
        grpc_byte_buffer_destroy(c->payload);
    if (c->inflight != NULL)
        grpc_byte_buffer_destroy(c->inflight);
    while (c->rq_head != NULL) {
        srv_reply *r = c->rq_head;
        c->rq_head = r->next;
        grpc_byte_buffer_destroy(r->bb);
        di_free(r);
    }
    request_fini(&c->req);
    di_free(c->status_msg);
    if (c->accepted) {
        if (c->live_prev != NULL)
            c->live_prev->live_next = c->live_next;
        else
            d->calls = c->live_next;
        if (c->live_next != NULL)
            c->live_next->live_prev = c->live_prev;
        d->live_calls--;
    }
    di_free(c);
    srv_daemon_check_drained(d);
}

static void
call_unref(srv_call *c)
{
    if (--c->refs == 0)
        call_free(c);
}

static void
post_request(srv_daemon *d, int method)
{
    srv_call *c = call_new(d, method);
    grpc_call_error e;
    if (method == SRV_M_UNKNOWN)
        e = grpc_server_request_call(d->server, &c->call, &c->details, &c->md, d->cq, d->cq,
                                     &c->ev_new);
    else
        e = grpc_server_request_registered_call(d->server, d->registered[method], &c->call,
                                                &c->deadline, &c->md, &c->payload, d->cq, d->cq,
                                                &c->ev_new);
    if (e != GRPC_CALL_OK) {
        srv_log(SRV_LOG_ERROR, "request_call_failed", "method=%s error=%s",
                srv_method_names[method], grpc_call_error_to_string(e));
        call_free(c);
        return;
    }
    d->posted_requests++;
}

/* ---------------------------------------------------------------- sending */

static void
call_enqueue(srv_call *c, grpc_byte_buffer *bb)
{
    if (c->dead) {
        grpc_byte_buffer_destroy(bb);
        return;
    }
    srv_reply *r = di_xmalloc(sizeof *r);
    r->next = NULL;
    r->bb = bb;
    if (c->rq_tail != NULL)
        c->rq_tail->next = r;
    else
        c->rq_head = r;
    c->rq_tail = r;
    c->nrq++;
}

/* Sets the status to send once the queued messages are out. The first status wins. */
static void
call_finish(srv_call *c, grpc_status_code status, const char *msg)
{
    if (c->status_pending || c->status_sent)
        return;
    c->status = status;
    c->status_msg = di_strdup(msg != NULL ? msg : "");
    if (c->status_msg == NULL)
        di_oom();
    c->status_pending = 1;
}

static void
call_fail(srv_call *c, int code, const char *msg)
{
    call_finish(c, srv_status_from_code(code), msg);
}

/* The call is gone: stop its work, drop its replies, send nothing more. */
static void
call_kill(srv_call *c, const char *why)
{
    srv_daemon *d = c->d;
    if (c->dead)
        return;
    c->dead = 1;
    if (!c->status_sent) {
        d->m.calls_cancelled++;
        srv_log(SRV_LOG_INFO, "call_cancelled", "method=%s reason=%s after_ms=%.1f",
                srv_method_names[c->method], why, (double)(now_ns() - c->t0_ns) / 1e6);
    }
    for (srv_waiter *w = c->waits; w != NULL; w = w->call_next) {
        if (w->detached)
            continue;
        w->detached = 1;
        srv_job *job = w->job;
        if (--job->nlive == 0) {
            atomic_store(&job->cancel, 1);
            /* Unlink it so that a new identical request starts afresh. */
            if (job->in_table)
                flight_remove(d, job);
        }
    }
    if (c->decode != NULL)
        atomic_store(&c->decode->cancel, 1);
    if (c->search != NULL)
        srv_search_cancel(c->search);
    while (c->rq_head != NULL) {
        srv_reply *r = c->rq_head;
        c->rq_head = r->next;
        grpc_byte_buffer_destroy(r->bb);
        di_free(r);
    }
    c->rq_tail = NULL;
    c->nrq = 0;
}

static void
call_pump(srv_call *c)
{
    srv_daemon *d = c->d;
    grpc_op ops[3];
    size_t n = 0;
    grpc_byte_buffer *bb = NULL;
    grpc_slice details;
    int with_status = 0;
    if (c->dead || c->sending || c->status_sent)
        return;
    if (c->rq_head == NULL && !c->status_pending)
        return;
    memset(ops, 0, sizeof ops);
    if (!c->md_sent) {
        ops[n].op = GRPC_OP_SEND_INITIAL_METADATA;
        ops[n].data.send_initial_metadata.count = 0;
        n++;
    }
    if (c->rq_head != NULL) {
        srv_reply *r = c->rq_head;
        c->rq_head = r->next;
        if (c->rq_head == NULL)
            c->rq_tail = NULL;
        c->nrq--;
        bb = r->bb;
        di_free(r);
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n].data.send_message.send_message = bb;
        n++;
    }
    if (c->rq_head == NULL && c->status_pending) {
        details = grpc_slice_from_copied_string(c->status_msg);
        ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
        ops[n].data.send_status_from_server.status = c->status;
        ops[n].data.send_status_from_server.status_details = &details;
        ops[n].data.send_status_from_server.trailing_metadata_count = 0;
        n++;
        with_status = 1;
    }
    grpc_call_error e = grpc_call_start_batch(c->call, ops, n, &c->ev_send, NULL);
    if (with_status)
        grpc_slice_unref(details);
    if (e != GRPC_CALL_OK) {
        srv_log(SRV_LOG_ERROR, "start_batch_failed", "method=%s error=%s",
                srv_method_names[c->method], grpc_call_error_to_string(e));
        if (bb != NULL)
            grpc_byte_buffer_destroy(bb);
        call_kill(c, "send_failed");
        return;
    }
    c->md_sent = 1;
    c->sending = 1;
    c->inflight = bb;
    c->refs++;
    if (bb != NULL && (c->method == SRV_M_BATCH || c->method == SRV_M_SEARCH))
        d->m.stream_messages++;
    if (with_status) {
        double s = (double)(now_ns() - c->t0_ns) / 1e9;
        c->status_pending = 0;
        c->status_sent = 1;
        d->m.responses[c->method][(unsigned)c->status < SRV_NSTATUS ? c->status : 2]++;
        d->m.latency_sum_s[c->method] += s;
        if (c->status != GRPC_STATUS_OK) {
            char q[1200];
            srv_log(SRV_LOG_INFO, "call_failed", "method=%s status=%s ms=%.3f message=%s",
                    srv_method_names[c->method], srv_status_name(c->status), s * 1e3,
                    srv_log_quote(c->status_msg, q, sizeof q));
        } else if (srv_log_enabled(SRV_LOG_DEBUG)) {
            srv_log(SRV_LOG_DEBUG, "call_done", "method=%s status=OK ms=%.3f",
                    srv_method_names[c->method], s * 1e3);
        }
    }
}

/* ---------------------------------------------------------------- jobs */

static void
job_free(srv_job *job)
{
    request_input_unref(job->input);
    strategy_fini(&job->strategy);
    di_free(job->result);
    di_free(job);
}

static void
sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Worker: the testing delay, polling the cancel flag every millisecond. */
static int
job_test_delay(srv_job *job)
{
    for (int64_t i = 0; i < job->test_delay_ms; i++) {
        if (atomic_load(&job->cancel))
            return DI_ECANCELLED;
        sleep_ms(1);
    }
    return 0;
}

/*
 * Each worker thread keeps one simulation workspace (sim.h): repeated
 * simulations reuse its tables instead of mapping and zeroing new ones.
 * After a job it keeps at most WS_KEEP_BYTES; it is freed with the thread.
 * A search's slices keep them whole (srv_worker_idle trims them once the
 * worker has been idle for SRV_WORKER_IDLE_MS): its candidates are alike, and a
 * candidate of a large model outlasts a slice, so trimming after each slice
 * mapped and zeroed the tables again for every candidate (gpt3-175b on
 * 1,024 GPUs: a fifth of a 20 s profile of the search in page faults).
 */
#define WS_KEEP_BYTES ((size_t)256 << 20)
static tss_t ws_key;
static once_flag ws_once = ONCE_FLAG_INIT;
static int ws_ok;

static void
ws_destroy(void *p)
{
    sim_workspace_free(p);
}

static void
ws_init(void)
{
    ws_ok = tss_create(&ws_key, ws_destroy) == thrd_success;
}

static sim_workspace *
worker_workspace(void)
{
    sim_workspace *ws;
    call_once(&ws_once, ws_init);
    if (!ws_ok)
        return NULL; /* simulate with fresh tables */
    ws = tss_get(ws_key);
    if (ws == NULL) {
        ws = sim_workspace_new();
        if (tss_set(ws_key, ws) != thrd_success) {
            sim_workspace_free(ws);
            return NULL;
        }
    }
    return ws;
}

/* Trims the worker thread's workspace, if it has one, to WS_KEEP_BYTES. */
static void
trim_workspace(void)
{
    sim_workspace *ws;
    call_once(&ws_once, ws_init);
    if (ws_ok && (ws = tss_get(ws_key)) != NULL)
        sim_workspace_trim(ws, WS_KEEP_BYTES);
}

/*
 * What a job leaves for after its answer (srv_worker_after, on the same
 * worker): the module of a cancelled transform or simulation, whose free
 * takes milliseconds on the largest modules and would delay the answer to a
 * cancel, and whether the workspace is to be trimmed.
 */
static _Thread_local ir_module *after_module;
static _Thread_local int after_trim;

static void
job_run_simulate(srv_job *job)
{
    const ir_module *mod;
    ir_module *owned = NULL;
    sim_options opt;
    sim_result *res = NULL;
    sim_workspace *ws;
    int rc;
    if (atomic_load(&job->cancel)) {
        job->rc = di_error_set(&job->err, DI_ECANCELLED, "cancelled before it started");
        return;
    }
    {
        /* The transform polls the job's flag between pipeline chunks (di_cancel_watch). */
        const atomic_int *watched = di_cancel_watch(&job->cancel);
        rc = request_apply_strategy(job->input->module, &job->strategy, job->input->hw, &mod,
                                    &owned, &job->err);
        di_cancel_watch(watched);
    }
    if (rc != 0) {
        job->rc = rc;
        return;
    }
    /* A cancel after the transform's last poll: look again once it is done. */
    if (atomic_load(&job->cancel) || job_test_delay(job) != 0) {
        after_module = owned;
        job->rc = di_error_set(&job->err, DI_ECANCELLED, "cancelled");
        return;
    }
    sim_options_default(&opt);
    opt.no_overlap = job->opts.no_overlap;
    opt.tf32 = job->opts.tf32;
    opt.fuse = job->opts.fuse;
    opt.no_grad_accum_fusion = job->opts.no_grad_accum_fusion;
    opt.want_timeline = job->opts.want_timeline;
    opt.timeline_max_points = job->opts.timeline_max_points;
    opt.cancel = &job->cancel;
    ws = worker_workspace();
    rc = sim_run_ws(ws, mod, job->input->hw, &opt, &res, NULL, NULL, &job->err);
    after_trim = 1;
    if (rc == DI_ECANCELLED)
        after_module = owned;
    else
        ir_module_free(owned);
    if (rc != 0) {
        if (job->err.code == 0)
            di_error_set(&job->err, rc, "%s", di_strerror(rc));
        job->rc = rc;
        return;
    }
    if (atomic_load(&job->cancel)) { /* finished, but nobody waits: nothing is stored */
        sim_result_free(res);
        job->rc = di_error_set(&job->err, DI_ECANCELLED, "cancelled");
        return;
    }
    sim_result_set_model(res, &job->input->stats);
    {
        char text[1024];
        strategy_format(&job->strategy, text, sizeof text);
        sim_result_set_inputs(res, text, &job->input->hw_hash);
    }
    job->step_time_s = res->step_time_s;
    job->peak_memory_bytes = res->peak_memory_bytes;
    rc = sim_result_pack(res, &job->result, &job->result_len);
    sim_result_free(res);
    if (rc != 0) {
        job->rc = di_error_set(&job->err, rc, "cannot encode the result");
        return;
    }
    job->rc = 0;
}

static void
job_run_decode(srv_job *job, pool_worker *w)
{
    if (atomic_load(&job->cancel)) {
        job->rc = di_error_set(&job->err, DI_ECANCELLED, "cancelled before it started");
        return;
    }
    if (job->digest_only) {
        memo_digest(&job->who, GRPC_SLICE_START_PTR(job->bytes), GRPC_SLICE_LENGTH(job->bytes),
                    &job->digest);
        return;
    }
    job->rc = request_decode(job->req_kind, GRPC_SLICE_START_PTR(job->bytes),
                             GRPC_SLICE_LENGTH(job->bytes), &job->limits, NULL, &job->req,
                             &job->err);
    /* A unary request found in the cache through this worker's own connection. */
    if (job->rc == 0 && job->req_kind == REQUEST_SIMULATE && job->req.cands[0].rc == 0 &&
        w->local != NULL) {
        const uint8_t *data;
        size_t len;
        request_input *in = job->req.input;
        di_hash shown;
        request_cache_key(&in->module_hash, &in->hw_hash, &job->req.cands[0].strategy,
                          &job->req.opts, SIM_VERSION, &shown);
        srv_scope_key(&job->who, &shown, &job->key);
        int rc = cache_get(w->local, &job->key, &data, &len, NULL);
        if (rc == DI_ECORRUPT) { /* simulated again; the writer replaces the row */
            char hex[65];
            di_hash_hex(&job->key, hex);
            srv_log_limited(SRV_LOG_ERROR, "cache_corrupt_row", 10.0, "key=%s action=recompute",
                            hex);
        }
        if (rc == 0) {
            job->result = di_xmalloc(len ? len : 1);
            memcpy(job->result, data, len);
            job->result_len = len;
            job->hit = 1;
            di_hash_hex(&shown, job->key_hex); /* clients see the unscoped key */
        }
    }
}

static void
job_run(pool_job *pj, pool_worker *w)
{
    srv_job *job = (srv_job *)pj;
    uint64_t t0 = now_ns();
    di_error_clear(&job->err);
    if (job->kind == JOB_DECODE)
        job_run_decode(job, w);
    else if (job->kind == JOB_SEARCH_PREPARE) {
        job->rc = srv_search_prepare(job->search, &job->err);
        /* A stored search found through this worker's own connection; else its plan. */
        if (job->rc == 0 && !srv_search_lookup(job->search, w->local)) {
            srv_search_plan(job->search);
            srv_search_load_evals(job->search, w->local);
        }
    } else if (job->kind == JOB_SEARCH_WORK) {
        sim_workspace *ws = worker_workspace();
        job->more = srv_search_work(job->search, job->part, SEARCH_SLICE_NS, ws);
        after_module = srv_search_take_garbage(job->search, job->part);
    } else {
        job_run_simulate(job);
    }
    job->run_s = (double)(now_ns() - t0) / 1e9;
}

static void
job_done(pool_job *pj)
{
    srv_job *job = (srv_job *)pj;
    srv_inbox_push(job->d, &job->ev);
}

static srv_job *
job_new(srv_daemon *d, int kind)
{
    srv_job *job = di_xcalloc(1, sizeof *job);
    job->pj.run = job_run;
    job->pj.done = job_done;
    job->ev.kind = SRV_EV_JOB;
    job->d = d;
    job->kind = kind;
    atomic_init(&job->cancel, 0);
    job->test_delay_ms = d->cfg->test_delay_ms;
    job->tenant_slot = -1;
    return job;
}

static void
job_submit(srv_daemon *d, srv_job *job)
{
    d->jobs_outstanding++;
    if (job->kind == JOB_SIMULATE)
        d->m.jobs_started++;
    pool_submit(d->pool, &job->pj);
}

/* ---------------------------------------------------------------- in-flight table */

static uint32_t
flight_bucket(const srv_daemon *d, const di_hash *key)
{
    uint32_t h = (uint32_t)key->b[0] | (uint32_t)key->b[1] << 8 | (uint32_t)key->b[2] << 16 |
                 (uint32_t)key->b[3] << 24;
    return h & (d->nflight_bucket - 1);
}

static srv_job *
flight_find(srv_daemon *d, const di_hash *key)
{
    for (srv_job *j = d->flights[flight_bucket(d, key)]; j != NULL; j = j->hnext)
        if (memcmp(j->key.b, key->b, 32) == 0)
            return j;
    return NULL;
}

static void
flight_insert(srv_daemon *d, srv_job *job)
{
    if (d->nflight + 1 > d->nflight_bucket) {
        uint32_t nb = d->nflight_bucket * 2;
        srv_job **nt = di_xcalloc(nb, sizeof *nt);
        uint32_t ob = d->nflight_bucket;
        srv_job **old = d->flights;
        d->flights = nt;
        d->nflight_bucket = nb;
        for (uint32_t i = 0; i < ob; i++) {
            for (srv_job *j = old[i], *next; j != NULL; j = next) {
                next = j->hnext;
                uint32_t b = flight_bucket(d, &j->key);
                j->hnext = nt[b];
                nt[b] = j;
            }
        }
        di_free(old);
    }
    uint32_t b = flight_bucket(d, &job->key);
    job->hnext = d->flights[b];
    d->flights[b] = job;
    job->in_table = 1;
    d->nflight++;
}

static void
flight_remove(srv_daemon *d, srv_job *job)
{
    srv_job **pp = &d->flights[flight_bucket(d, &job->key)];
    while (*pp != NULL && *pp != job)
        pp = &(*pp)->hnext;
    if (*pp == job) {
        *pp = job->hnext;
        d->nflight--;
    }
    job->in_table = 0;
}

void
srv_front_cancel_jobs(srv_daemon *d)
{
    for (uint32_t i = 0; i < d->nflight_bucket; i++)
        for (srv_job *j = d->flights[i]; j != NULL; j = j->hnext)
            atomic_store(&j->cancel, 1);
    for (srv_call *c = d->calls; c != NULL; c = c->live_next) {
        if (c->decode != NULL)
            atomic_store(&c->decode->cancel, 1);
        if (c->search != NULL)
            srv_search_cancel(c->search);
    }
}

/* ---------------------------------------------------------------- candidates */

static int
call_is_unary(const srv_call *c)
{
    return c->method != SRV_M_BATCH;
}

static void
deliver_result(srv_call *c, uint32_t index, const uint8_t *result, size_t len, int cache_status,
               const char *key_hex)
{
    c->ndone++;
    call_enqueue(c, srv_reply_simulate(result, len, cache_status, key_hex, index, NULL, 0));
}

static void
deliver_error(srv_call *c, uint32_t index, int code, const char *msg, const char *key_hex)
{
    c->ndone++;
    if (call_is_unary(c)) {
        call_fail(c, code, msg);
        return;
    }
    call_enqueue(c, srv_reply_simulate(NULL, 0, DISTIR__V1__CACHE_STATUS__CACHE_NONE, key_hex,
                                       index, msg, (int)srv_status_from_code(code)));
}

static void
waiter_add(srv_job *job, srv_call *c, uint32_t index)
{
    srv_waiter *w = di_xcalloc(1, sizeof *w);
    w->call = c;
    w->job = job;
    w->index = index;
    w->next = job->waiters;
    job->waiters = w;
    w->call_next = c->waits;
    c->waits = w;
    job->nlive++;
    c->npending++;
    c->refs++;
}

/* ---------------------------------------------------------------- request memo */

#define MEMO_ENTRIES 16384
#define MEMO_DOMAIN "distir.request.v1"
#define MEMO_REPLY_MAX (256u << 10)   /* bytes: larger replies are read from SQLite */
#define MEMO_REPLY_TOTAL (64u << 20)  /* bytes kept in memo replies in all */

static void
memo_digest(const srv_identity *who, const uint8_t *data, size_t len, di_hash *out)
{
    di_sha256 h;
    di_sha256_init(&h);
    di_sha256_update(&h, MEMO_DOMAIN, sizeof MEMO_DOMAIN);
    if (who->scoped) /* the same bytes from another tenant are another entry */
        di_sha256_update(&h, who->scope.b, sizeof who->scope.b);
    di_sha256_update(&h, data, len);
    di_sha256_final(&h, out);
}

static struct srv_memo_entry *
memo_slot(srv_daemon *d, const di_hash *digest)
{
    uint32_t i = (uint32_t)digest->b[0] | (uint32_t)digest->b[1] << 8 |
                 (uint32_t)digest->b[2] << 16 | (uint32_t)digest->b[3] << 24;
    return &d->memo[i & (d->nmemo - 1)];
}

static struct srv_memo_entry *
memo_find(srv_daemon *d, const di_hash *digest)
{
    struct srv_memo_entry *e = memo_slot(d, digest);
    return e->valid && memcmp(e->digest.b, digest->b, 32) == 0 ? e : NULL;
}

static void
memo_drop_reply(srv_daemon *d, struct srv_memo_entry *e)
{
    if (e->has_reply) {
        d->memo_bytes -= GRPC_SLICE_LENGTH(e->reply);
        grpc_slice_unref(e->reply);
        e->has_reply = 0;
    }
}

static void
memo_insert(srv_daemon *d, const di_hash *digest, const di_hash *key, const di_hash *shown)
{
    struct srv_memo_entry *e = memo_slot(d, digest);
    if (e->valid && memcmp(e->digest.b, digest->b, 32) == 0)
        return;
    memo_drop_reply(d, e);
    e->digest = *digest;
    e->key = *key;
    e->shown = *shown;
    e->valid = 1;
}

/* Keeps a reply in the entry, within the size limits; takes over the reference. */
static void
memo_keep_reply(srv_daemon *d, struct srv_memo_entry *e, grpc_slice reply)
{
    size_t n = GRPC_SLICE_LENGTH(reply);
    if (n > MEMO_REPLY_MAX || d->memo_bytes + n > MEMO_REPLY_TOTAL) {
        grpc_slice_unref(reply);
        return;
    }
    memo_drop_reply(d, e);
    e->reply = reply;
    e->has_reply = 1;
    d->memo_bytes += n;
}

void
srv_front_fini(srv_daemon *d)
{
    for (uint32_t i = 0; i < d->nmemo; i++)
        memo_drop_reply(d, &d->memo[i]);
    di_free(d->memo);
    d->memo = NULL;
    di_free(d->flights);
    d->flights = NULL;
    di_free(d->tenant_load);
    d->tenant_load = NULL;
    d->ntenant_load = 0;
}

static void
start_candidate(srv_call *c, uint32_t i)
{
    srv_daemon *d = c->d;
    request_candidate *cand = &c->req.cands[i];
    request_input *in = c->req.input;
    di_hash key;
    char hex[65];
    const uint8_t *data;
    size_t len;
    di_error err;
    if (cand->rc != 0) {
        deliver_error(c, i, cand->rc, cand->error, NULL);
        return;
    }
    di_hash shown;
    request_cache_key(&in->module_hash, &in->hw_hash, &cand->strategy, &c->req.opts, SIM_VERSION,
                      &shown);
    di_hash_hex(&shown, hex); /* clients see the unscoped key; it is stored under key */
    srv_scope_key(&c->who, &shown, &key);
    if (c->has_digest)
        memo_insert(d, &c->digest, &key, &shown);
    di_error_clear(&err);
    int rc = cache_get(d->cache, &key, &data, &len, &err);
    if (rc == 0) {
        d->m.cache_hits++;
        cache_note_hit(d->cache, &key);
        deliver_result(c, i, data, len, DISTIR__V1__CACHE_STATUS__CACHE_HIT, hex);
        return;
    }
    if (rc == DI_ECORRUPT) {
        d->m.cache_corrupt++;
        srv_log_limited(SRV_LOG_ERROR, "cache_corrupt_row", 10.0, "key=%s action=recompute", hex);
    } else if (rc != DI_ENOTFOUND) {
        srv_log_limited(SRV_LOG_WARN, "cache_lookup_failed", 10.0, "key=%s error=\"%s\"", hex,
                        err.msg);
    }
    d->m.cache_misses++;
    srv_job *job = flight_find(d, &key);
    if (job != NULL) {
        d->m.coalesced++;
    } else {
        unsigned queued = pool_queued(d->pool);
        if (queued >= (unsigned)d->cfg->max_queue) {
            char msg[160];
            snprintf(msg, sizeof msg,
                     "simulation queue is full (%u jobs waiting, --max-queue %lld)", queued,
                     (long long)d->cfg->max_queue);
            deliver_error(c, i, DI_ETOOBIG, msg, hex);
            return;
        }
        int slot = -1;
        if (d->cfg->tenant_max_jobs > 0 && c->who.authenticated) {
            slot = tenant_slot(d, c->who.tenant);
            if (d->tenant_load[slot].jobs >= (uint64_t)d->cfg->tenant_max_jobs) {
                char msg[200];
                snprintf(msg, sizeof msg,
                         "tenant %s has %llu simulations queued or running (--tenant-max-jobs "
                         "%lld)",
                         c->who.tenant, (unsigned long long)d->tenant_load[slot].jobs,
                         (long long)d->cfg->tenant_max_jobs);
                deliver_error(c, i, DI_ETOOBIG, msg, hex);
                return;
            }
            d->tenant_load[slot].jobs++;
        }
        job = job_new(d, JOB_SIMULATE);
        job->tenant_slot = slot;
        job->input = in;
        request_input_ref(in);
        strategy_copy(&job->strategy, &cand->strategy);
        job->opts = c->req.opts;
        job->key = key;
        memcpy(job->key_hex, hex, sizeof hex);
        flight_insert(d, job);
        job_submit(d, job);
    }
    waiter_add(job, c, i);
}

/* Starts candidates within the window, finishes when all are done, sends. */
static void
call_advance(srv_call *c)
{
    if (!c->dead && (c->method == SRV_M_SIMULATE || c->method == SRV_M_BATCH) &&
        c->req.input != NULL) {
        uint32_t window = call_is_unary(c) ? 1 : 2 * c->d->nworkers + 2;
        while (!c->dead && !c->status_pending && c->next < c->req.ncand && c->npending < window &&
               c->nrq < window)
            start_candidate(c, c->next++);
        if (c->ndone == c->req.ncand)
            call_finish(c, GRPC_STATUS_OK, NULL);
    }
    call_pump(c);
}

/* The slot of tenant's job count in d->tenant_load (added at 0 when new). */
static int
tenant_slot(srv_daemon *d, const char *tenant)
{
    for (uint32_t i = 0; i < d->ntenant_load; i++)
        if (strcmp(d->tenant_load[i].name, tenant) == 0)
            return (int)i;
    d->tenant_load = di_xrealloc(d->tenant_load, (d->ntenant_load + 1) * sizeof *d->tenant_load);
    memset(&d->tenant_load[d->ntenant_load], 0, sizeof *d->tenant_load);
    snprintf(d->tenant_load[d->ntenant_load].name, sizeof d->tenant_load[0].name, "%s", tenant);
    return (int)d->ntenant_load++;
}

static void
job_finished_simulate(srv_daemon *d, srv_job *job)
{
    if (job->in_table)
        flight_remove(d, job);
    if (job->tenant_slot >= 0)
        d->tenant_load[job->tenant_slot].jobs--;
    d->m.job_seconds_sum += job->run_s;
    if (job->rc == 0) {
        di_error err;
        d->m.jobs_done++;
        di_error_clear(&err);
        if (cache_put(d->cache, &job->key, job->result, job->result_len, SIM_VERSION,
                      job->step_time_s, job->peak_memory_bytes, &err) != 0)
            srv_log_limited(SRV_LOG_ERROR, "cache_store_failed", 10.0, "key=%s error=\"%s\"",
                            job->key_hex, err.msg);
        if (srv_log_enabled(SRV_LOG_DEBUG))
            srv_log(SRV_LOG_DEBUG, "job_done", "key=%s run_ms=%.3f step_time_s=%.9g", job->key_hex,
                    job->run_s * 1e3, job->step_time_s);
    } else if (job->rc == DI_ECANCELLED) {
        d->m.jobs_cancelled++;
        srv_log(SRV_LOG_INFO, "job_cancelled", "key=%s run_ms=%.3f", job->key_hex,
                job->run_s * 1e3);
    } else {
        char q[1200];
        d->m.jobs_failed++;
        srv_log(SRV_LOG_INFO, "job_failed", "key=%s code=%s message=%s", job->key_hex,
                di_errname(job->rc), srv_log_quote(job->err.msg, q, sizeof q));
    }
    while (job->waiters != NULL) {
        srv_waiter *w = job->waiters;
        srv_call *c = w->call;
        job->waiters = w->next;
        for (srv_waiter **pp = &c->waits; *pp != NULL; pp = &(*pp)->call_next) {
            if (*pp == w) {
                *pp = w->call_next;
                break;
            }
        }
        c->npending--;
        if (!w->detached && !c->dead) {
            if (job->rc == 0)
                deliver_result(c, w->index, job->result, job->result_len,
                               DISTIR__V1__CACHE_STATUS__CACHE_MISS, job->key_hex);
            else
                deliver_error(c, w->index, job->rc, job->err.msg, job->key_hex);
            call_advance(c);
        }
        di_free(w);
        call_unref(c);
    }
    job_free(job);
}

/* ---------------------------------------------------------------- methods */

static void
begin_candidates(srv_call *c)
{
    c->next = c->npending = c->ndone = 0;
    call_advance(c);
}

static void
job_finished_decode(srv_daemon *d, srv_job *job)
{
    srv_call *c = job->call;
    if (job->digest_only && job->rc == 0 && !c->dead) {
        /* Phase one done: answer from the memo, or decode after all (same job). */
        c->digest = job->digest;
        c->has_digest = 1;
        if (!memo_answer(c)) {
            job->digest_only = 0;
            job_submit(d, job);
            return;
        }
        c->decode = NULL; /* answered without decoding */
        grpc_slice_unref(job->bytes);
        call_unref(c);
        di_free(job);
        return;
    }
    c->decode = NULL;
    grpc_slice_unref(job->bytes);
    if (c->dead) {
        request_fini(&job->req);
    } else if (job->rc != 0) {
        call_fail(c, job->rc, job->err.msg);
        call_pump(c);
    } else {
        c->req = job->req;
        if (job->hit) {
            d->m.cache_hits++;
            cache_note_hit(d->cache, &job->key);
            c->next = 1;
            deliver_result(c, 0, job->result, job->result_len, DISTIR__V1__CACHE_STATUS__CACHE_HIT,
                           job->key_hex);
            call_advance(c);
        } else {
            begin_candidates(c);
        }
    }
    call_unref(c);
    di_free(job->result);
    di_free(job);
}

/*
 * A Simulate whose request digest (c->digest) the memo knows and whose result
 * is stored: answers it (HIT) and returns 1; else 0 and nothing is sent.
 */
static int
memo_answer(srv_call *c)
{
    srv_daemon *d = c->d;
    struct srv_memo_entry *e = memo_find(d, &c->digest);
    const uint8_t *data;
    size_t len;
    if (e != NULL && !e->has_reply && cache_get(d->cache, &e->key, &data, &len, NULL) == 0) {
        char hex[65];
        di_hash_hex(&e->shown, hex);
        memo_keep_reply(d, e,
                        srv_reply_simulate_slice(data, len, DISTIR__V1__CACHE_STATUS__CACHE_HIT,
                                                 hex, 0, NULL, 0));
        if (!e->has_reply) { /* too big to keep: send it from the database row */
            d->m.cache_hits++;
            d->m.memo_hits++;
            cache_note_hit(d->cache, &e->key);
            call_enqueue(c, srv_reply_simulate(data, len, DISTIR__V1__CACHE_STATUS__CACHE_HIT,
                                               hex, 0, NULL, 0));
            call_finish(c, GRPC_STATUS_OK, NULL);
            call_pump(c);
            return 1;
        }
    }
    if (e != NULL && e->has_reply) {
        d->m.cache_hits++;
        d->m.memo_hits++;
        cache_note_hit(d->cache, &e->key);
        call_enqueue(c, srv_reply_from_slice(e->reply));
        call_finish(c, GRPC_STATUS_OK, NULL);
        call_pump(c);
        return 1;
    }
    return 0;
}

static void
method_simulate(srv_call *c)
{
    srv_daemon *d = c->d;
    grpc_slice s;
    di_error err;
    int kind = c->method == SRV_M_BATCH ? REQUEST_BATCH : REQUEST_SIMULATE;
    if (srv_buffer_read(c->payload, &s) != 0) {
        call_finish(c, GRPC_STATUS_INVALID_ARGUMENT, "request: cannot read the message");
        call_pump(c);
        return;
    }
    grpc_byte_buffer_destroy(c->payload);
    c->payload = NULL;
    if (c->method == SRV_M_BATCH && pool_queued(d->pool) >= (unsigned)d->cfg->max_queue) {
        grpc_slice_unref(s);
        call_fail(c, DI_ETOOBIG, "simulation queue is full (--max-queue)");
        call_pump(c);
        return;
    }
    if (c->method == SRV_M_SIMULATE &&
        GRPC_SLICE_LENGTH(s) <= (size_t)d->cfg->inline_decode_kb * 1024) {
        /* Seen these exact bytes before? Then the key is known: try the cache first. */
        memo_digest(&c->who, GRPC_SLICE_START_PTR(s), GRPC_SLICE_LENGTH(s), &c->digest);
        c->has_digest = 1;
        if (memo_answer(c)) {
            grpc_slice_unref(s);
            return;
        }
    }
    if (GRPC_SLICE_LENGTH(s) > (size_t)d->cfg->inline_decode_kb * 1024) {
        if (pool_queued(d->pool) >= (unsigned)d->cfg->max_queue) {
            grpc_slice_unref(s);
            call_fail(c, DI_ETOOBIG, "simulation queue is full (--max-queue)");
            call_pump(c);
            return;
        }
        srv_job *job = job_new(d, JOB_DECODE);
        job->call = c;
        job->who = c->who;
        /* A large Simulate: its digest first (on the worker), so that a repeat is a memo hit. */
        job->digest_only = c->method == SRV_M_SIMULATE;
        job->req_kind = kind;
        job->bytes = s;
        job->limits = d->limits;
        c->decode = job;
        c->refs++;
        job_submit(d, job);
        return;
    }
    di_error_clear(&err);
    int rc = request_decode(kind, GRPC_SLICE_START_PTR(s), GRPC_SLICE_LENGTH(s), &d->limits,
                            d->hwcache, &c->req, &err);
    grpc_slice_unref(s);
    if (rc != 0) {
        call_fail(c, rc, err.msg);
        call_pump(c);
        return;
    }
    begin_candidates(c);
}

/* Unpacks a small control message (GetResult, ServerInfo, Health) with the depth check. */
static ProtobufCMessage *
unpack_small(srv_call *c, const ProtobufCMessageDescriptor *desc)
{
    grpc_slice s;
    ProtobufCMessage *msg = NULL;
    di_error err;
    if (srv_buffer_read(c->payload, &s) != 0) {
        call_finish(c, GRPC_STATUS_INVALID_ARGUMENT, "request: cannot read the message");
        return NULL;
    }
    di_error_clear(&err);
    int rc = pb_unpack_checked(desc, GRPC_SLICE_START_PTR(s), GRPC_SLICE_LENGTH(s), 8, &msg, &err);
    grpc_slice_unref(s);
    if (rc != 0) {
        di_error_prefix(&err, "request");
        call_fail(c, rc, err.msg);
        return NULL;
    }
    return msg;
}

static void
method_get_result(srv_call *c)
{
    srv_daemon *d = c->d;
    Distir__V1__GetResultRequest *req =
        (void *)unpack_small(c, &distir__v1__get_result_request__descriptor);
    di_hash key, shown;
    const uint8_t *data;
    size_t len;
    di_error err;
    char msg[200];
    if (req == NULL)
        goto out;
    if (di_hash_from_hex(req->cache_key, &shown) != 0) {
        call_finish(c, GRPC_STATUS_INVALID_ARGUMENT, "cache_key: expected 64 hexadecimal digits");
        goto out;
    }
    srv_scope_key(&c->who, &shown, &key); /* a tenant reads its own results only */
    di_error_clear(&err);
    int rc = cache_get(d->cache, &key, &data, &len, &err);
    if (rc == DI_ENOTFOUND) {
        snprintf(msg, sizeof msg, "no cached result for key %.64s", req->cache_key);
        call_finish(c, GRPC_STATUS_NOT_FOUND, msg);
    } else if (rc == DI_ECORRUPT) {
        d->m.cache_corrupt++;
        srv_log_limited(SRV_LOG_ERROR, "cache_corrupt_row", 10.0, "key=%.64s action=dropped",
                        req->cache_key);
        call_fail(c, DI_ECORRUPT, err.msg);
    } else if (rc != 0) {
        call_fail(c, DI_EINTERNAL, err.msg);
    } else {
        char hex[65];
        di_hash_hex(&shown, hex);
        call_enqueue(
            c, srv_reply_simulate(data, len, DISTIR__V1__CACHE_STATUS__CACHE_HIT, hex, 0, NULL, 0));
        call_finish(c, GRPC_STATUS_OK, NULL);
    }
out:
    if (req != NULL)
        protobuf_c_message_free_unpacked(&req->base, NULL);
    call_pump(c);
}

/* ---------------------------------------------------------------- CI baselines */

static const char *
project_of(const char *p)
{
    return p != NULL && p[0] != '\0' ? p : "default";
}

static void
entry_to_proto(const baseline_entry *e, Distir__V1__BaselineEntry *p, char hex[65])
{
    distir__v1__baseline_entry__init(p);
    di_hash_hex(&e->cache_key, hex);
    p->label = (char *)e->label;
    p->created = e->created;
    p->cache_key = hex;
    p->step_time_s = e->step_time_s;
    p->peak_memory_bytes = e->peak_memory_bytes;
}

/*
 * The stored result of the 64-hex-digit key a client gives (scoped to its
 * tenant), copied: 0, or the call is finished with NOT_FOUND or another error.
 */
static int
stored_result(srv_call *c, const char *what, const char *hex, di_hash *shown, uint8_t **data,
              size_t *len)
{
    srv_daemon *d = c->d;
    di_hash key;
    const uint8_t *p;
    di_error err;
    char msg[200];
    if (hex == NULL || di_hash_from_hex(hex, shown) != 0) {
        snprintf(msg, sizeof msg, "%s: expected 64 hexadecimal digits", what);
        call_finish(c, GRPC_STATUS_INVALID_ARGUMENT, msg);
        return -1;
    }
    srv_scope_key(&c->who, shown, &key);
    di_error_clear(&err);
    int rc = cache_get(d->cache, &key, &p, len, &err);
    if (rc == DI_ENOTFOUND) {
        snprintf(msg, sizeof msg, "%s: no stored result for key %.64s (Simulate it first)", what,
                 hex);
        call_finish(c, GRPC_STATUS_NOT_FOUND, msg);
        return -1;
    }
    if (rc != 0) {
        call_fail(c, rc, err.msg);
        return -1;
    }
    *data = di_xmalloc(*len ? *len : 1);
    memcpy(*data, p, *len);
    return 0;
}

static void
method_set_baseline(srv_call *c)
{
    srv_daemon *d = c->d;
    Distir__V1__SetBaselineRequest *req =
        (void *)unpack_small(c, &distir__v1__set_baseline_request__descriptor);
    uint8_t *data = NULL;
    size_t len = 0;
    di_hash shown;
    di_error err;
    sim_result *res = NULL;
    baseline_entry added;
    size_t nhist = 0;
    if (req == NULL)
        goto out;
    di_error_clear(&err);
    const char *project = project_of(req->project);
    if (baseline_check_name("project", project, &err) != 0 ||
        baseline_check_name("name", req->name, &err) != 0 ||
        (req->label[0] != '\0' && baseline_check_name("label", req->label, &err) != 0)) {
        call_fail(c, DI_EINVAL, err.msg);
        goto out;
    }
    if (stored_result(c, "cache_key", req->cache_key, &shown, &data, &len) != 0)
        goto out;
    if (sim_result_unpack(data, len, &res, &err) != 0 ||
        baseline_add(d->cache, c->who.tenant, project, req->name, req->label, &shown, data, len,
                     res->step_time_s, res->peak_memory_bytes, &added, &nhist, &err) != 0) {
        call_fail(c, err.code ? err.code : DI_EINTERNAL, err.msg);
        goto out;
    }
    {
        Distir__V1__BaselineReply r = DISTIR__V1__BASELINE_REPLY__INIT;
        Distir__V1__BaselineEntry e;
        char hex[65];
        entry_to_proto(&added, &e, hex);
        r.entry = &e;
        r.history_length = (uint32_t)nhist;
        call_enqueue(c, srv_reply_pack(&r.base));
        call_finish(c, GRPC_STATUS_OK, NULL);
    }
    srv_log(SRV_LOG_INFO, "baseline_set", "project=%s name=%s label=%s history=%zu", project,
            req->name, req->label, nhist);
out:
    sim_result_free(res);
    di_free(data);
    if (req != NULL)
        protobuf_c_message_free_unpacked(&req->base, NULL);
    call_pump(c);
}

static void
method_compare(srv_call *c)
{
    srv_daemon *d = c->d;
    Distir__V1__CompareRequest *req =
        (void *)unpack_small(c, &distir__v1__compare_request__descriptor);
    uint8_t *base = NULL, *cand = NULL;
    size_t nbase = 0, ncand = 0;
    di_hash shown;
    di_error err;
    sim_result *rb = NULL, *rc_ = NULL;
    baseline_entry be;
    int have_baseline = 0;
    Distir__V1__SimResult *pb = NULL, *pc = NULL;
    di_buf json, text;
    di_buf_init(&json);
    di_buf_init(&text);
    memset(&be, 0, sizeof be);
    if (req == NULL)
        goto out;
    di_error_clear(&err);
    if (req->base_cache_key[0] != '\0') {
        if (stored_result(c, "base_cache_key", req->base_cache_key, &shown, &base, &nbase) != 0)
            goto out;
    } else {
        const char *project = project_of(req->project);
        int rc = baseline_check_name("baseline", req->baseline, &err);
        if (rc == 0)
            rc = baseline_latest(d->cache, c->who.tenant, project, req->baseline, &be, &err);
        if (rc != 0) {
            call_fail(c, rc, err.msg);
            goto out;
        }
        have_baseline = 1;
        base = be.result;
        nbase = be.result_len;
        be.result = NULL;
    }
    if (stored_result(c, "cache_key", req->cache_key, &shown, &cand, &ncand) != 0)
        goto out;
    if (sim_result_unpack(base, nbase, &rb, &err) != 0 ||
        sim_result_unpack(cand, ncand, &rc_, &err) != 0) {
        call_fail(c, DI_EINTERNAL, err.msg);
        goto out;
    }
    {
        sim_compare_limits lim;
        sim_compare cmp;
        memset(&lim, 0, sizeof lim);
        if (req->limits != NULL) {
            lim.time_rel = req->limits->time_rel;
            lim.time_abs_s = req->limits->time_abs_s;
            lim.memory_rel = req->limits->memory_rel;
            lim.memory_abs = req->limits->memory_abs_bytes;
        }
        if (!(lim.time_rel >= 0 && lim.time_abs_s >= 0 && lim.memory_rel >= 0)) {
            call_finish(c, GRPC_STATUS_INVALID_ARGUMENT, "limits: expected non-negative values");
            goto out;
        }
        sim_compare_results(rb, rc_, &lim, &cmp);
        sim_compare_json(&cmp, &json);
        sim_compare_text(&cmp, &text);
        di_buf_put(&json, "", 1);
        di_buf_put(&text, "", 1);
        pb = distir__v1__sim_result__unpack(NULL, nbase, base);
        pc = distir__v1__sim_result__unpack(NULL, ncand, cand);
        Distir__V1__CompareReply r = DISTIR__V1__COMPARE_REPLY__INIT;
        Distir__V1__BaselineEntry e;
        char hex[65];
        r.regressed = cmp.regressed;
        r.json = json.data;
        r.text = text.data;
        r.baseline_result = pb;
        r.candidate_result = pc;
        if (have_baseline) {
            entry_to_proto(&be, &e, hex);
            r.baseline = &e;
        }
        call_enqueue(c, srv_reply_pack(&r.base));
        call_finish(c, GRPC_STATUS_OK, NULL);
    }
out:
    if (pb != NULL)
        protobuf_c_message_free_unpacked(&pb->base, NULL);
    if (pc != NULL)
        protobuf_c_message_free_unpacked(&pc->base, NULL);
    di_buf_fini(&json);
    di_buf_fini(&text);
    sim_result_free(rb);
    sim_result_free(rc_);
    di_free(base);
    di_free(cand);
    if (req != NULL)
        protobuf_c_message_free_unpacked(&req->base, NULL);
    call_pump(c);
}

static void
method_history(srv_call *c)
{
    srv_daemon *d = c->d;
    Distir__V1__HistoryRequest *req =
        (void *)unpack_small(c, &distir__v1__history_request__descriptor);
    baseline_entry *hist = NULL;
    size_t n = 0;
    di_error err;
    if (req == NULL)
        goto out;
    di_error_clear(&err);
    const char *project = project_of(req->project);
    if (baseline_check_name("name", req->name, &err) != 0 ||
        baseline_history(d->cache, c->who.tenant, project, req->name, &hist, &n, &err) != 0) {
        call_fail(c, err.code, err.msg);
        goto out;
    }
    if (n == 0) {
        char msg[300];
        snprintf(msg, sizeof msg, "no baseline '%s' in project '%s'", req->name, project);
        call_finish(c, GRPC_STATUS_NOT_FOUND, msg);
        goto out;
    }
    {
        Distir__V1__HistoryReply r = DISTIR__V1__HISTORY_REPLY__INIT;
        Distir__V1__BaselineEntry *es = di_xcalloc(n, sizeof *es), **ep = di_xcalloc(n, sizeof *ep);
        char(*hex)[65] = di_xcalloc(n, sizeof *hex);
        for (size_t i = 0; i < n; i++) {
            entry_to_proto(&hist[i], &es[i], hex[i]);
            ep[i] = &es[i];
        }
        r.n_entries = n;
        r.entries = ep;
        call_enqueue(c, srv_reply_pack(&r.base));
        call_finish(c, GRPC_STATUS_OK, NULL);
        di_free(es);
        di_free(ep);
        di_free(hex);
    }
out:
    di_free(hist);
    if (req != NULL)
        protobuf_c_message_free_unpacked(&req->base, NULL);
    call_pump(c);
}

static void
method_server_info(srv_call *c)
{
    srv_daemon *d = c->d;
    Distir__V1__ServerInfoReply r = DISTIR__V1__SERVER_INFO_REPLY__INIT;
    uint64_t requests = 0;
    /* The request is empty, but a body that is not a message is refused like any other. */
    ProtobufCMessage *req = unpack_small(c, &distir__v1__server_info_request__descriptor);
    if (req == NULL) {
        call_pump(c);
        return;
    }
    protobuf_c_message_free_unpacked(req, NULL);
    for (int i = 0; i < SRV_NMETHOD; i++)
        requests += d->m.requests[i];
    r.version = (char *)DISTIR_VERSION;
    r.simulator_version = (char *)SIM_VERSION;
    r.uptime_s = (double)(now_ns() - d->start_ns) / 1e9;
    r.workers = d->nworkers;
    r.queue_depth = pool_queued(d->pool);
    r.cache_entries = cache_count(d->cache);
    r.cache_hits = d->m.cache_hits;
    r.cache_misses = d->m.cache_misses;
    r.cache_hit_rate = d->m.cache_hits + d->m.cache_misses
                           ? (double)d->m.cache_hits / (double)(d->m.cache_hits + d->m.cache_misses)
                           : 0.0;
    r.requests = requests;
    r.database = c->who.admin ? d->cfg->db : (char *)""; /* no paths for other tenants */
    call_enqueue(c, srv_reply_pack(&r.base));
    call_finish(c, GRPC_STATUS_OK, NULL);
    call_pump(c);
}

static void
method_health(srv_call *c)
{
    srv_daemon *d = c->d;
    Grpc__Health__V1__HealthCheckRequest *req =
        (void *)unpack_small(c, &grpc__health__v1__health_check_request__descriptor);
    if (req != NULL) {
        const char *svc = req->service ? req->service : "";
        if (svc[0] == '\0' || strcmp(svc, "distir.v1.CostModel") == 0) {
            Grpc__Health__V1__HealthCheckResponse r = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
            r.status = d->serving && !d->accept_dead
                           ? GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING
                           : GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING;
            call_enqueue(c, srv_reply_pack(&r.base));
            call_finish(c, GRPC_STATUS_OK, NULL);
        } else {
            char msg[300];
            snprintf(msg, sizeof msg, "unknown service '%.200s'", svc);
            call_finish(c, GRPC_STATUS_NOT_FOUND, msg);
        }
        protobuf_c_message_free_unpacked(&req->base, NULL);
    }
    call_pump(c);
}

static void
method_unknown(srv_call *c)
{
    char *m = grpc_slice_to_c_string(c->details.method);
    char msg[300];
    snprintf(msg, sizeof msg, "method '%.250s' is not implemented", m);
    gpr_free(m);
    call_finish(c, GRPC_STATUS_UNIMPLEMENTED, msg);
    call_pump(c);
}

static void
call_dispatch(srv_call *c)
{
    /* Health checks answer anyone (probes carry no token); every other call is authenticated. */
    if (c->method != SRV_M_HEALTH && srv_auth_call(c->d, &c->md, &c->who) != 0) {
        call_finish(c, GRPC_STATUS_UNAUTHENTICATED,
                    "missing or unknown bearer token (metadata \"authorization: Bearer TOKEN\")");
        call_pump(c);
        return;
    }
    if (c->method != SRV_M_UNKNOWN && c->payload == NULL) {
        call_finish(c, GRPC_STATUS_INVALID_ARGUMENT, "request has no message");
        call_pump(c);
        return;
    }
    switch (c->method) {
    case SRV_M_SIMULATE:
    case SRV_M_BATCH:
        method_simulate(c);
        break;
    case SRV_M_GET_RESULT:
        method_get_result(c);
        break;
    case SRV_M_SERVER_INFO:
        method_server_info(c);
        break;
    case SRV_M_HEALTH:
        method_health(c);
        break;
    case SRV_M_SEARCH:
        method_search(c);
        break;
    case SRV_M_SET_BASELINE:
        method_set_baseline(c);
        break;
    case SRV_M_COMPARE:
        method_compare(c);
        break;
    case SRV_M_HISTORY:
        method_history(c);
        break;
    default:
        method_unknown(c);
        break;
    }
}

/* ---------------------------------------------------------------- Search */

/*
 * A Search call (server/search.h): one prepare job decodes the request and
 * builds the space, then one work job per worker shares the search through
 * its plan. A uv timer sends progress events while they run (skipping a
 * tick while the previous message is still being sent: backpressure); when
 * the last job is back, the merged result goes out, then OK. A cancelled
 * call (client, deadline, lost connection) sets the search's cancel flag,
 * which the workers check between candidates and a candidate's transform
 * and simulation poll.
 */
#define SEARCH_PROGRESS_MS 125 /* the RPC promises an event at least every 250 ms */

typedef struct search_timer {
    uv_timer_t timer;
    srv_call *call; /* holds a reference until the handle is closed */
} search_timer;

static void
search_timer_closed(uv_handle_t *h)
{
    search_timer *t = h->data;
    srv_call *c = t->call;
    di_free(t);
    call_unref(c);
}

static void
search_send_progress(srv_call *c)
{
    if (c->dead || c->search == NULL || c->sending || c->nrq > 0 || c->status_pending ||
        c->status_sent)
        return;
    call_enqueue(c, srv_search_progress(c->search));
    call_pump(c);
}

static void
search_tick(uv_timer_t *h)
{
    search_timer *t = h->data;
    search_send_progress(t->call);
}

static void
search_timer_start(srv_call *c)
{
    search_timer *t = di_xcalloc(1, sizeof *t);
    t->call = c;
    uv_timer_init(c->d->loop, &t->timer);
    t->timer.data = t;
    c->refs++;
    c->timer = t;
    uv_timer_start(&t->timer, search_tick, SEARCH_PROGRESS_MS, SEARCH_PROGRESS_MS);
}

static void
search_timer_stop(srv_call *c)
{
    if (c->timer == NULL)
        return;
    uv_timer_stop(&c->timer->timer);
    uv_close((uv_handle_t *)&c->timer->timer, search_timer_closed);
    c->timer = NULL;
}

static void
search_submit(srv_call *c, int kind, unsigned part)
{
    srv_job *job = job_new(c->d, kind);
    job->call = c;
    job->search = c->search;
    job->part = part;
    c->refs++;
    c->search_jobs++;
    job_submit(c->d, job);
}

/* Every job of the search is back: the result (unless the call failed or died), then OK. */
static void
search_end(srv_call *c)
{
    srv_daemon *d = c->d;
    search_timer_stop(c);
    srv_log(SRV_LOG_INFO, "search_end", "done=%llu total=%llu cancelled=%d cached=%d ms=%.1f",
            (unsigned long long)srv_search_done(c->search),
            (unsigned long long)srv_search_total(c->search), srv_search_cancelled(c->search),
            srv_search_hit(c->search), (double)(now_ns() - c->t0_ns) / 1e6);
    {
        /* What it simulated, for later searches: also when cancelled or its client is gone. */
        uint32_t kept = 0;
        di_error err;
        di_error_clear(&err);
        if (srv_search_store_evals(c->search, d->cache, &kept, &err) != 0)
            srv_log(SRV_LOG_ERROR, "search_evals_store_failed", "error=\"%s\"", err.msg);
        else if (kept > 0)
            srv_log(SRV_LOG_INFO, "search_evals_stored", "entries=%u", kept);
    }
    /* The candidate log's last lines (SearchRequest.log_candidates) go before the result. */
    if (!c->dead && !c->status_pending && !c->status_sent && !srv_search_cancelled(c->search))
        while (srv_search_log_pending(c->search))
            call_enqueue(c, srv_search_progress(c->search));
    if (!c->dead && !c->status_pending && !c->status_sent) {
        grpc_byte_buffer *bb;
        uint8_t *stored;
        size_t nstored;
        di_error err;
        di_error_clear(&err);
        if (srv_search_cancelled(c->search)) {
            call_fail(c, DI_ECANCELLED, "search cancelled (the daemon is shutting down)");
        } else if (srv_search_result(c->search, &bb, &stored, &nstored, &err) != 0) {
            call_fail(c, DI_EINTERNAL, err.msg);
        } else {
            d->m.searches_done++;
            /* A completed search (not a hit) is stored, as simulation results are. */
            if (stored != NULL) {
                di_hash key;
                char hex[65];
                srv_search_store_key(c->search, &key);
                if (cache_search_put(d->cache, &key, stored, nstored, &err) != 0) {
                    di_hash_hex(&key, hex);
                    srv_log(SRV_LOG_ERROR, "search_store_failed", "key=%s error=\"%s\"", hex,
                            err.msg);
                }
                di_free(stored);
            }
            call_enqueue(c, bb);
            call_finish(c, GRPC_STATUS_OK, NULL);
        }
    }
    srv_search_free(c->search);
    c->search = NULL;
    call_pump(c);
}

static void
job_finished_search(srv_daemon *d, srv_job *job)
{
    srv_call *c = job->call;
    d->m.job_seconds_sum += job->run_s;
    if (job->kind == JOB_SEARCH_WORK && job->more && !c->dead &&
        !srv_search_cancelled(c->search)) {
        /* Its slice is over: back in the queue behind other calls' work (fairness). */
        uint32_t kept = 0;
        di_error err;
        di_error_clear(&err);
        /* What it simulated so far, stored now and then: a kill keeps most of the work. */
        if (srv_search_flush_evals(c->search, job->part, SEARCH_EVALS_FLUSH,
                                   SEARCH_EVALS_FLUSH_NS, d->cache, &kept, &err) != 0)
            srv_log_limited(SRV_LOG_ERROR, "search_evals_store_failed", 10.0, "error=\"%s\"",
                            err.msg);
        else if (kept > 0)
            srv_log(SRV_LOG_INFO, "search_evals_stored", "entries=%u part=%u", kept,
                    job->part);
        job->more = 0;
        job_submit(d, job);
        return;
    }
    c->search_jobs--;
    if (job->kind == JOB_SEARCH_PREPARE) {
        if (job->rc != 0) {
            if (!c->dead)
                call_fail(c, job->rc, job->err.msg);
        } else if (!c->dead && !srv_search_cancelled(c->search) && srv_search_hit(c->search)) {
            /* A stored search: one progress event, then (search_end) the stored result. */
            di_hash key;
            char hex[65];
            srv_search_store_key(c->search, &key);
            di_hash_hex(&key, hex);
            d->m.search_cache_hits++;
            cache_search_note_hit(d->cache, &key);
            srv_log(SRV_LOG_INFO, "search_cache_hit", "key=%s candidates=%llu", hex,
                    (unsigned long long)srv_search_total(c->search));
            search_send_progress(c);
        } else if (!c->dead && !srv_search_cancelled(c->search)) {
            srv_log(SRV_LOG_INFO, "search_started", "candidates=%llu workers=%u",
                    (unsigned long long)srv_search_total(c->search), d->nworkers);
            search_send_progress(c);
            search_timer_start(c);
            for (unsigned i = 0; i < d->nworkers; i++)
                search_submit(c, JOB_SEARCH_WORK, i);
        }
    }
    if (c->search_jobs == 0) {
        if (!srv_search_hit(c->search))
            d->m.search_candidates += srv_search_done(c->search);
        search_end(c);
    }
    call_unref(c);
    di_free(job);
}

static void
method_search(srv_call *c)
{
    srv_daemon *d = c->d;
    grpc_slice s;
    if (srv_buffer_read(c->payload, &s) != 0) {
        call_finish(c, GRPC_STATUS_INVALID_ARGUMENT, "request: cannot read the message");
        call_pump(c);
        return;
    }
    grpc_byte_buffer_destroy(c->payload);
    c->payload = NULL;
    if (pool_queued(d->pool) >= (unsigned)d->cfg->max_queue) {
        grpc_slice_unref(s);
        call_fail(c, DI_ETOOBIG, "simulation queue is full (--max-queue)");
        call_pump(c);
        return;
    }
    c->search = srv_search_new(s, &d->limits, (uint64_t)d->cfg->max_search_candidates, d->nworkers,
                               d->cfg->test_delay_ms);
    if (c->who.scoped)
        srv_search_set_scope(c->search, &c->who.scope);
    search_submit(c, JOB_SEARCH_PREPARE, 0);
}

/* ---------------------------------------------------------------- events */

static void
on_call_new(srv_daemon *d, srv_call *c, int ok)
{
    grpc_op op;
    d->posted_requests--;
    if (!ok) {
        /* The server is shutting down: the request was never matched. */
        call_unref(c);
        return;
    }
    c->accepted = 1;
    c->t0_ns = now_ns();
    c->live_next = d->calls;
    if (d->calls != NULL)
        d->calls->live_prev = c;
    d->calls = c;
    d->live_calls++;
    d->m.requests[c->method]++;
    /* Keep a request posted until the listeners close (calls are still served while health
     * says NOT_SERVING during --health-delay-ms). */
    if (!d->shutdown_called)
        post_request(d, c->method);
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    op.data.recv_close_on_server.cancelled = &c->recv_cancelled;
    grpc_call_error e = grpc_call_start_batch(c->call, &op, 1, &c->ev_close, NULL);
    if (e != GRPC_CALL_OK) {
        srv_log(SRV_LOG_ERROR, "start_batch_failed", "method=%s op=recv_close error=%s",
                srv_method_names[c->method], grpc_call_error_to_string(e));
        call_kill(c, "recv_close_failed");
    } else {
        c->refs++;
    }
    if (!c->dead)
        call_dispatch(c);
    call_unref(c);
}

static int
deadline_passed(const srv_call *c)
{
    gpr_timespec dl = c->method == SRV_M_UNKNOWN ? c->details.deadline : c->deadline;
    if (dl.clock_type == GPR_TIMESPAN)
        return 0;
    return gpr_time_cmp(gpr_now(dl.clock_type), dl) >= 0;
}

void
srv_front_event(srv_daemon *d, srv_event *ev)
{
    switch (ev->kind) {
    case SRV_EV_CALL_NEW: {
        srv_call *c = (srv_call *)((char *)ev - offsetof(srv_call, ev_new));
        on_call_new(d, c, ev->ok);
        break;
    }
    case SRV_EV_CALL_CLOSE: {
        srv_call *c = (srv_call *)((char *)ev - offsetof(srv_call, ev_close));
        if (c->recv_cancelled || !ev->ok)
            call_kill(c, deadline_passed(c) ? "deadline" : "cancelled");
        call_unref(c);
        break;
    }
    case SRV_EV_CALL_SEND: {
        srv_call *c = (srv_call *)((char *)ev - offsetof(srv_call, ev_send));
        c->sending = 0;
        if (c->inflight != NULL) {
            grpc_byte_buffer_destroy(c->inflight);
            c->inflight = NULL;
        }
        if (!ev->ok)
            call_kill(c, "send_failed");
        else
            call_advance(c);
        call_unref(c);
        break;
    }
    case SRV_EV_JOB: {
        srv_job *job = (srv_job *)((char *)ev - offsetof(srv_job, ev));
        d->jobs_outstanding--;
        if (job->kind == JOB_DECODE)
            job_finished_decode(d, job);
        else if (job->kind == JOB_SEARCH_PREPARE || job->kind == JOB_SEARCH_WORK)
            job_finished_search(d, job);
        else
            job_finished_simulate(d, job);
        srv_daemon_check_drained(d);
        break;
    }
    default:
        break;
    }
}

/* ---------------------------------------------------------------- workers */

int
srv_worker_init(pool_worker *w, void *ctx, di_error *err)
{
    srv_daemon *d = ctx;
    cache *c;
    int rc = cache_open(d->cfg->db, CACHE_READONLY, &c, err);
    if (rc != 0)
        return rc;
    w->local = c;
    return 0;
}

void
srv_worker_idle(pool_worker *w, void *ctx)
{
    (void)w;
    (void)ctx;
    trim_workspace();
}

void
srv_worker_after(pool_worker *w, void *ctx)
{
    (void)w;
    (void)ctx;
    ir_module_free(after_module);
    after_module = NULL;
    if (after_trim) {
        after_trim = 0;
        trim_workspace();
    }
}

void
srv_worker_fini(pool_worker *w, void *ctx)
{
    (void)ctx;
    cache_close(w->local);
    w->local = NULL;
}

/* ---------------------------------------------------------------- start */

int
srv_front_start(srv_daemon *d, di_error *err)
{
    grpc_arg args[4];
    grpc_channel_args cargs;
    memset(args, 0, sizeof args);
    args[0].type = GRPC_ARG_INTEGER;
    args[0].key = (char *)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
    args[0].value.integer = (int)(d->cfg->max_message_mb * 1024 * 1024 > INT32_MAX
                                      ? INT32_MAX
                                      : d->cfg->max_message_mb * 1024 * 1024);
    args[1].type = GRPC_ARG_INTEGER;
    args[1].key = (char *)GRPC_ARG_MAX_SEND_MESSAGE_LENGTH;
    args[1].value.integer = -1;
    args[2].type = GRPC_ARG_INTEGER;
    args[2].key = (char *)GRPC_ARG_ALLOW_REUSEPORT;
    args[2].value.integer = 0;
    args[3].type = GRPC_ARG_INTEGER;
    args[3].key = (char *)GRPC_ARG_MAX_CONNECTION_IDLE_MS;
    args[3].value.integer = (int)(d->cfg->max_idle_s * 1000);
    cargs.num_args = 4;
    cargs.args = args;
    d->nmemo = MEMO_ENTRIES;
    d->memo = di_xcalloc(d->nmemo, sizeof *d->memo);
    d->nflight_bucket = 64;
    d->flights = di_xcalloc(d->nflight_bucket, sizeof *d->flights);
    d->server = grpc_server_create(&cargs, NULL);
    d->cq = grpc_completion_queue_create_for_next(NULL);
    grpc_server_register_completion_queue(d->server, d->cq, NULL);
    for (int m = 0; m < SRV_NREGISTERED; m++) {
        d->registered[m] = grpc_server_register_method(
            d->server, srv_method_paths[m], NULL, GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER, 0);
        if (d->registered[m] == NULL)
            return di_error_set(err, DI_EINTERNAL, "cannot register %s", srv_method_paths[m]);
    }
    if (d->cfg->tls_cert[0] != '\0') {
        /*
         * TLS: gRPC core's own port (grpc_server_add_channel_from_fd takes
         * plaintext only), which a failed accept4 stops: health then turns
         * NOT_SERVING (daemon.c).
         */
        grpc_server_credentials *creds;
        int rc = srv_tls_new(d->cfg, &d->tls, &creds, err);
        if (rc != 0)
            return rc;
        d->port = grpc_server_add_http2_port(d->server, d->cfg->listen, creds);
        grpc_server_credentials_release(creds);
        if (d->port == 0)
            return di_error_set(err, DI_EIO, "cannot listen on '%s'", d->cfg->listen);
        if (strncmp(d->cfg->listen, "unix:", 5) == 0) {
            snprintf(d->listen_addr, sizeof d->listen_addr, "%s", d->cfg->listen);
        } else {
            const char *colon = strrchr(d->cfg->listen, ':');
            int hostlen = colon ? (int)(colon - d->cfg->listen) : (int)strlen(d->cfg->listen);
            snprintf(d->listen_addr, sizeof d->listen_addr, "%.*s:%d", hostlen, d->cfg->listen,
                     d->port);
        }
    }
    grpc_server_start(d->server);
    d->grpc_started = 1;
    if (d->tls == NULL) {
        /* Connections come from distird's own accept loop (listen.c), not from a gRPC port. */
        int rc = srv_listen_start(d, err);
        if (rc != 0)
            return rc;
    }
    for (int m = 0; m < SRV_NMETHOD; m++)
        for (int i = 0; i < REQUESTS_PER_METHOD; i++)
            post_request(d, m);
    return 0;
}
