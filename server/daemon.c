/*
 * daemon.c: distird's lifetime: start-up in dependency order, the inbox that
 * carries completion-queue events and finished jobs to the loop, signals,
 * timers, and the graceful shutdown (GRPC_NOTES.md section 4):
 *
 *   SIGTERM/SIGINT  health NOT_SERVING; after --health-delay-ms,
 *                   grpc_server_shutdown_and_notify (listeners close, no new
 *                   calls) and the grace timer starts
 *   grace expires   grpc_server_cancel_all_calls and every job's cancel flag
 *   drained         shutdown tag back, no live calls, no jobs, no posted
 *                   requests: grpc_completion_queue_shutdown
 *   CQ thread ends  join it, destroy the CQ and server, stop the pool (each
 *                   worker closes its SQLite connection), write pending hits,
 *                   checkpoint and close the database, close the handles;
 *                   uv_run returns and grpc_shutdown runs last
 *
 * A second SIGTERM skips the rest of the grace period.
 */
#include <grpc/grpc.h>
#include <grpc/support/log.h>
#include <grpc/support/time.h>
#include <signal.h>
#include <sys/resource.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon.h"
#include "log.h"
#include "sim/sim.h"

#define FLUSH_INTERVAL_MS 1000
#define CHECKPOINT_EVERY 10 /* flushes */

void
srv_inbox_push(srv_daemon *d, srv_event *ev)
{
    ev->next = NULL;
    pthread_mutex_lock(&d->inbox_lock);
    if (d->inbox_tail != NULL)
        d->inbox_tail->next = ev;
    else
        d->inbox_head = ev;
    d->inbox_tail = ev;
    pthread_mutex_unlock(&d->inbox_lock);
    uv_async_send(&d->wake);
}

static void
close_handle(uv_handle_t *h)
{
    if (h->loop != NULL && !uv_is_closing(h))
        uv_close(h, NULL);
}

/* The daemon whose health gRPC's accept failures affect (one per process). */
static srv_daemon *log_daemon;

/* The CQ thread has gone: tear down in reverse order of start-up. */
static void
daemon_finish(srv_daemon *d)
{
    di_error err;
    uv_thread_join(&d->cq_thread);
    grpc_completion_queue_destroy(d->cq);
    d->cq = NULL;
    grpc_server_destroy(d->server);
    d->server = NULL;
    log_daemon = NULL;
    srv_tls_free(d->tls); /* the credentials' fetcher data: after the server */
    d->tls = NULL;
    srv_tenants_free(d->tenants);
    d->tenants = NULL;
    pool_free(d->pool);
    d->pool = NULL;
    di_error_clear(&err);
    if (cache_flush(d->cache, &err) != 0)
        srv_log(SRV_LOG_ERROR, "cache_flush_failed", "error=\"%s\"", err.msg);
    uint64_t entries = cache_count(d->cache);
    cache_close(d->cache);
    d->cache = NULL;
    request_hwcache_free(d->hwcache);
    d->hwcache = NULL;
    srv_front_fini(d);
    srv_http_stop(d);
    close_handle((uv_handle_t *)&d->wake);
    close_handle((uv_handle_t *)&d->sig_term);
    close_handle((uv_handle_t *)&d->sig_int);
    close_handle((uv_handle_t *)&d->sig_hup);
    close_handle((uv_handle_t *)&d->flush_timer);
    close_handle((uv_handle_t *)&d->grace_timer);
    close_handle((uv_handle_t *)&d->health_timer);
    srv_log(SRV_LOG_INFO, "stopped",
            "uptime_s=%.3f cache_entries=%llu cache_hits=%llu cache_misses=%llu jobs=%llu",
            (double)(uv_hrtime() - d->start_ns) / 1e9, (unsigned long long)entries,
            (unsigned long long)d->m.cache_hits, (unsigned long long)d->m.cache_misses,
            (unsigned long long)d->m.jobs_started);
}

/* Events handled per wake-up before the loop polls its other handles again. */
#define INBOX_BATCH 64

/*
 * Handles at most INBOX_BATCH events of the inbox, then, if more are
 * waiting, puts the rest back at its head and wakes itself again: under a
 * steady stream of completions libuv still gets to poll between batches, so
 * the metrics port, timers and signals are served (a loop that drained the
 * inbox until empty starved them under load).
 */
static void
on_wake(uv_async_t *h)
{
    srv_daemon *d = h->data;
    srv_event *ev, *last = NULL;
    unsigned n = 0;
    pthread_mutex_lock(&d->inbox_lock);
    ev = d->inbox_head;
    d->inbox_head = d->inbox_tail = NULL;
    pthread_mutex_unlock(&d->inbox_lock);
    while (ev != NULL && n < INBOX_BATCH) {
        srv_event *next = ev->next; /* ev's owner may be freed below */
        switch (ev->kind) {
        case SRV_EV_SHUTDOWN:
            d->shutdown_acked = 1;
            srv_log(SRV_LOG_INFO, "grpc_shutdown_done", "live_calls=%u jobs=%u", d->live_calls,
                    d->jobs_outstanding);
            srv_daemon_check_drained(d);
            break;
        case SRV_EV_CQ_DONE:
            daemon_finish(d);
            break;
        default:
            srv_front_event(d, ev);
            break;
        }
        ev = next;
        n++;
    }
    if (ev == NULL)
        return;
    for (last = ev; last->next != NULL; last = last->next)
        ;
    pthread_mutex_lock(&d->inbox_lock);
    last->next = d->inbox_head;
    d->inbox_head = ev;
    if (d->inbox_tail == NULL)
        d->inbox_tail = last;
    pthread_mutex_unlock(&d->inbox_lock);
    uv_async_send(&d->wake);
}

static void
cq_main(void *arg)
{
    srv_daemon *d = arg;
    for (;;) {
        grpc_event e = grpc_completion_queue_next(d->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        if (e.type == GRPC_QUEUE_SHUTDOWN)
            break;
        if (e.type == GRPC_OP_COMPLETE) {
            srv_event *ev = e.tag;
            ev->ok = (uint8_t)(e.success != 0);
            srv_inbox_push(d, ev);
        }
    }
    srv_inbox_push(d, &d->cq_done_ev);
}

void
srv_daemon_check_drained(srv_daemon *d)
{
    if (!d->shutdown_acked || d->cq_shutdown_called)
        return;
    if (d->live_calls > 0 || d->jobs_outstanding > 0 || d->posted_requests > 0)
        return;
    d->cq_shutdown_called = 1;
    uv_timer_stop(&d->grace_timer);
    srv_log(SRV_LOG_INFO, "drained", "posted_requests=0");
    grpc_completion_queue_shutdown(d->cq);
}

static void
cancel_everything(srv_daemon *d, const char *why)
{
    if (d->cancelled_all || d->cq_shutdown_called)
        return;
    d->cancelled_all = 1;
    srv_log(SRV_LOG_WARN, "cancelling_calls", "reason=%s live_calls=%u jobs=%u", why, d->live_calls,
            d->jobs_outstanding);
    grpc_server_cancel_all_calls(d->server);
    srv_front_cancel_jobs(d);
}

static void
on_grace(uv_timer_t *t)
{
    cancel_everything(t->data, "grace_expired");
}

static void
begin_drain(srv_daemon *d)
{
    if (d->shutdown_called)
        return;
    d->shutdown_called = 1;
    srv_listen_stop(d);
    grpc_server_shutdown_and_notify(d->server, d->cq, &d->shutdown_ev);
    if (d->live_calls == 0 && d->jobs_outstanding == 0) {
        /*
         * Nothing in flight: the grace period has nothing to protect, and
         * gRPC core would otherwise wait for idle clients to hang up.
         * Cancelling all calls (there are none) disconnects them now.
         */
        d->cancelled_all = 1;
        srv_log(SRV_LOG_INFO, "idle_disconnect", "live_calls=0 jobs=0");
        grpc_server_cancel_all_calls(d->server);
        return;
    }
    uv_timer_start(&d->grace_timer, on_grace, (uint64_t)d->cfg->grace_ms, 0);
}

static void
on_health_delay(uv_timer_t *t)
{
    begin_drain(t->data);
}

void
srv_daemon_shutdown(srv_daemon *d)
{
    if (d->shutting_down) {
        if (d->shutdown_called)
            cancel_everything(d, "second_signal");
        else
            begin_drain(d);
        return;
    }
    d->shutting_down = 1;
    d->serving = 0;
    srv_log(SRV_LOG_INFO, "shutdown", "live_calls=%u jobs=%u grace_ms=%lld", d->live_calls,
            d->jobs_outstanding, (long long)d->cfg->grace_ms);
    uv_timer_stop(&d->flush_timer);
    if (d->cfg->health_delay_ms > 0)
        uv_timer_start(&d->health_timer, on_health_delay, (uint64_t)d->cfg->health_delay_ms, 0);
    else
        begin_drain(d);
}

/* SIGHUP: the token file and the TLS files again; on an error the old ones stay. */
static void
reload_credentials(srv_daemon *d)
{
    di_error err;
    if (d->cfg->tokens[0] != '\0') {
        srv_tenants *ts;
        di_error_clear(&err);
        if (srv_tenants_load(d->cfg->tokens, &ts, &err) == 0) {
            srv_tenants_free(d->tenants);
            d->tenants = ts;
            srv_log(SRV_LOG_INFO, "tokens_reloaded", "tenants=%u", srv_tenants_count(ts));
        } else {
            srv_log(SRV_LOG_ERROR, "tokens_reload_failed", "error=\"%s\" action=kept", err.msg);
        }
    }
    if (d->tls != NULL) {
        di_error_clear(&err);
        if (srv_tls_reload(d->tls, d->cfg, &err) == 0)
            srv_log(SRV_LOG_INFO, "tls_reloaded", "cert=%s", d->cfg->tls_cert);
        else
            srv_log(SRV_LOG_ERROR, "tls_reload_failed", "error=\"%s\" action=kept", err.msg);
    }
}

/* A listen address that only this machine can reach. */
static int
is_loopback(const char *listen)
{
    static const char *const local[] = {"127.", "[::1]:", "localhost:", "unix:"};
    for (size_t i = 0; i < sizeof local / sizeof local[0]; i++)
        if (strncmp(listen, local[i], strlen(local[i])) == 0)
            return 1;
    return 0;
}

static void
on_signal(uv_signal_t *h, int signum)
{
    srv_daemon *d = h->data;
    if (signum == SIGHUP) {
        int rc = srv_log_reopen();
        srv_log(rc == 0 ? SRV_LOG_INFO : SRV_LOG_ERROR, "log_reopened", "result=%d", rc);
        reload_credentials(d);
        return;
    }
    srv_log(SRV_LOG_INFO, "signal", "signal=%s", signum == SIGTERM ? "SIGTERM" : "SIGINT");
    srv_daemon_shutdown(d);
}

static void
on_flush(uv_timer_t *t)
{
    srv_daemon *d = t->data;
    di_error err;
    di_error_clear(&err);
    if (cache_flush(d->cache, &err) != 0)
        srv_log(SRV_LOG_WARN, "cache_flush_failed", "error=\"%s\"", err.msg);
    if (++d->flushes % CHECKPOINT_EVERY == 0 && cache_checkpoint(d->cache, &err) != 0)
        srv_log(SRV_LOG_WARN, "checkpoint_failed", "error=\"%s\"", err.msg);
}

/* gRPC's own messages, as key=value lines like ours (any gRPC thread). */
static void
grpc_log_to_srv(gpr_log_func_args *args)
{
    char q[1200];
    /*
     * gRPC core 1.51 stops accepting on a port of its own (the TLS listener)
     * after this: health says NOT_SERVING from now on, so that a supervisor
     * restarts the daemon.
     */
    if (log_daemon != NULL && strstr(args->message, "Failed accept4") != NULL)
        log_daemon->accept_dead = 1;
    int level = args->severity == GPR_LOG_SEVERITY_ERROR  ? SRV_LOG_ERROR
                : args->severity == GPR_LOG_SEVERITY_INFO ? SRV_LOG_INFO
                                                          : SRV_LOG_DEBUG;
    srv_log(level, "grpc", "file=%s line=%d message=%s", args->file, args->line,
            srv_log_quote(args->message, q, sizeof q));
}

static unsigned
count_cores(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (unsigned)n : 1;
}

static void
init_timer(srv_daemon *d, uv_timer_t *t)
{
    uv_timer_init(d->loop, t);
    t->data = d;
}

static void
init_signal(srv_daemon *d, uv_signal_t *s, int signum)
{
    uv_signal_init(d->loop, s);
    s->data = d;
    uv_signal_start(s, on_signal, signum);
}


/* The address space the process has mapped now (/proc/self/statm), bytes; 0 if unknown. */
static uint64_t
mapped_bytes(void)
{
    unsigned long long pages = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f != NULL) {
        if (fscanf(f, "%llu", &pages) != 1)
            pages = 0;
        fclose(f);
    }
    return (uint64_t)pages * (uint64_t)sysconf(_SC_PAGESIZE);
}

/*
 * The memory one simulation may take (request_limits.max_job_bytes), called
 * once the workers and gRPC are up: --max-job-mb, or else half of what the
 * daemon may use, shared by the workers, so that jobs running at once stay
 * within it together. What it may use is RLIMIT_AS minus what is mapped
 * already when an address-space limit is set (prlimit, systemd's
 * LimitAS), else the machine's memory. The rest is for the event loop,
 * replies, SQLite and gRPC.
 */
static uint64_t
job_budget(const srv_config *cfg, unsigned nworkers)
{
    struct rlimit rl;
    uint64_t total;
    if (cfg->max_job_mb > 0)
        return (uint64_t)cfg->max_job_mb << 20;
    if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
        uint64_t used = mapped_bytes();
        total = (uint64_t)rl.rlim_cur > used ? (uint64_t)rl.rlim_cur - used : 0;
    } else {
        total = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
    }
    total /= 2 * (uint64_t)(nworkers ? nworkers : 1);
    return total > ((uint64_t)1 << 20) ? total : (uint64_t)1 << 20;
}

/*
 * Opens the result cache and checks it (PRAGMA quick_check). A damaged
 * database (not a database, or failing the check) is moved aside, loudly, and
 * a fresh one started: the daemon serves with an empty cache rather than not
 * at all, and the damaged file stays for inspection.
 */
static int
open_cache(srv_daemon *d, di_error *err)
{
    const char *path = d->cfg->db;
    char moved[4200];
    int rc = cache_open(path, 0, &d->cache, err);
    if (rc == 0 && (rc = cache_quick_check(d->cache, err)) != 0) {
        cache_close(d->cache);
        d->cache = NULL;
    }
    if (rc != DI_ECORRUPT)
        return rc;
    char q[1200];
    srv_log(SRV_LOG_ERROR, "cache_damaged", "db=%s error=%s", path,
            srv_log_quote(err->msg, q, sizeof q));
    if ((rc = cache_set_aside(path, moved, sizeof moved, err)) != 0)
        return rc;
    srv_log(SRV_LOG_ERROR, "cache_set_aside", "db=%s moved_to=%s action=fresh_database", path,
            moved);
    di_error_clear(err);
    return cache_open(path, 0, &d->cache, err);
}

int
srv_daemon_start(srv_daemon *d, srv_config *cfg, di_error *err)
{
    pool_config pc;
    int rc;
    memset(d, 0, sizeof *d);
    d->cfg = cfg;
    d->start_ns = uv_hrtime();
    d->shutdown_ev.kind = SRV_EV_SHUTDOWN;
    d->cq_done_ev.kind = SRV_EV_CQ_DONE;
    ir_limits_default(&d->limits.ir);
    d->limits.ir.max_ops = (uint32_t)cfg->max_ops;
    d->limits.ir.max_values = (uint32_t)cfg->max_values;
    d->limits.ir.max_depth = (uint32_t)cfg->max_depth;
    d->limits.ir.max_bytes = (uint64_t)cfg->max_message_mb << 20;
    d->limits.max_batch = (uint32_t)cfg->max_batch;
    d->nworkers = cfg->workers > 0 ? (unsigned)cfg->workers : count_cores();
    d->loop = di_xmalloc(sizeof *d->loop);
    uv_loop_init(d->loop);
    pthread_mutex_init(&d->inbox_lock, NULL);

    rc = open_cache(d, err);
    if (rc != 0)
        goto fail_loop;
    if (cfg->max_db_kb > 0 &&
        (rc = cache_set_limit(d->cache, (uint64_t)cfg->max_db_kb << 10, err)) != 0)
        goto fail_loop;
    d->hwcache = request_hwcache_new();
    uv_async_init(d->loop, &d->wake, on_wake);
    d->wake.data = d;

    memset(&pc, 0, sizeof pc);
    pc.nthreads = d->nworkers;
    pc.stack_bytes = (size_t)cfg->worker_stack_mb << 20;
    pc.thread_init = srv_worker_init;
    pc.thread_fini = srv_worker_fini;
    pc.thread_idle = srv_worker_idle;
    pc.thread_after = srv_worker_after;
    pc.idle_ms = SRV_WORKER_IDLE_MS;
    pc.ctx = d;
    rc = pool_new(&pc, &d->pool, err);
    if (rc != 0)
        goto fail_cache;

    if (cfg->tokens[0] != '\0' && (rc = srv_tenants_load(cfg->tokens, &d->tenants, err)) != 0)
        goto fail_pool;
    if ((cfg->tls_cert[0] != '\0') != (cfg->tls_key[0] != '\0') ||
        (cfg->tls_client_ca[0] != '\0' && cfg->tls_cert[0] == '\0') ||
        (cfg->tls_require_client_cert && cfg->tls_client_ca[0] == '\0')) {
        rc = di_error_set(err, DI_EINVAL,
                          "TLS needs --tls-cert and --tls-key together; --tls-client-ca needs "
                          "them; --tls-require-client-cert needs --tls-client-ca");
        goto fail_pool;
    }
    if (cfg->tls_cert[0] == '\0' && !cfg->insecure_public && !is_loopback(cfg->listen)) {
        rc = di_error_set(err, DI_EINVAL,
                          "--listen %s is reachable from other machines and has no TLS: give "
                          "--tls-cert and --tls-key (and --tokens), or --insecure-public 1 if the "
                          "network is trusted",
                          cfg->listen);
        goto fail_pool;
    }
    gpr_set_log_function(grpc_log_to_srv);
    log_daemon = d;
    grpc_init();
    rc = srv_front_start(d, err);
    if (rc != 0)
        goto fail_grpc;
    if (uv_thread_create(&d->cq_thread, cq_main, d) != 0) {
        rc = di_error_set(err, DI_EIO, "cannot start the completion-queue thread");
        goto fail_grpc;
    }

    init_signal(d, &d->sig_term, SIGTERM);
    init_signal(d, &d->sig_int, SIGINT);
    init_signal(d, &d->sig_hup, SIGHUP);
    init_timer(d, &d->flush_timer);
    init_timer(d, &d->grace_timer);
    init_timer(d, &d->health_timer);
    uv_timer_start(&d->flush_timer, on_flush, FLUSH_INTERVAL_MS, FLUSH_INTERVAL_MS);
    d->serving = 1;

    if (cfg->metrics_listen[0] != '\0') {
        rc = srv_http_start(d, cfg->metrics_listen, err);
        if (rc != 0) {
            /* Serving has begun: stop through the normal path, then report. */
            srv_log(SRV_LOG_ERROR, "metrics_failed", "error=\"%s\"", err ? err->msg : "");
            d->exit_code = 1;
            srv_daemon_shutdown(d);
            return 0;
        }
    }

    d->limits.max_job_bytes = job_budget(cfg, d->nworkers);
    {
        di_buf dump;
        di_buf_init(&dump);
        srv_config_dump(cfg, &dump);
        srv_log(SRV_LOG_INFO, "started",
                "version=%s simulator=%s bound=%s threads=%u cache_entries=%llu pid=%ld "
                "job_budget_mb=%llu %s",
                DISTIR_VERSION, SIM_VERSION, d->listen_addr, d->nworkers,
                (unsigned long long)cache_count(d->cache), (long)getpid(),
                (unsigned long long)(d->limits.max_job_bytes >> 20), dump.data ? dump.data : "");
        di_buf_fini(&dump);
    }
    printf("distird listening on %s\n", d->listen_addr);
    fflush(stdout);
    return 0;

fail_grpc:
    srv_listen_stop(d); /* its handle closes in the uv_run below */
    if (d->server != NULL && d->grpc_started) {
        /* The CQ thread failed: drain the queue here. */
        grpc_server_shutdown_and_notify(d->server, d->cq, &d->shutdown_ev);
        grpc_server_cancel_all_calls(d->server);
        grpc_completion_queue_shutdown(d->cq);
        for (;;) {
            grpc_event e =
                grpc_completion_queue_next(d->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
            if (e.type == GRPC_QUEUE_SHUTDOWN)
                break;
            if (e.type == GRPC_OP_COMPLETE && e.tag != &d->shutdown_ev) {
                srv_event *ev = e.tag;
                ev->ok = 0;
                srv_front_event(d, ev);
            }
        }
        grpc_server_destroy(d->server);
        grpc_completion_queue_destroy(d->cq);
        d->server = NULL;
        d->cq = NULL;
    } else if (d->server != NULL) {
        /* Never started: nothing was posted. */
        grpc_server_destroy(d->server);
        grpc_completion_queue_shutdown(d->cq);
        grpc_completion_queue_destroy(d->cq);
        d->server = NULL;
        d->cq = NULL;
    }
    srv_front_fini(d);
    grpc_shutdown_blocking();
fail_pool:
    log_daemon = NULL;
    srv_tls_free(d->tls);
    d->tls = NULL;
    srv_tenants_free(d->tenants);
    d->tenants = NULL;
    pool_free(d->pool);
    d->pool = NULL;
fail_cache:
    request_hwcache_free(d->hwcache);
    cache_close(d->cache);
    d->cache = NULL;
    if (d->wake.loop != NULL)
        uv_close((uv_handle_t *)&d->wake, NULL);
    uv_run(d->loop, UV_RUN_DEFAULT);
fail_loop:
    uv_loop_close(d->loop);
    di_free(d->loop);
    d->loop = NULL;
    pthread_mutex_destroy(&d->inbox_lock);
    return rc;
}

int
srv_daemon_run(srv_daemon *d)
{
    uv_run(d->loop, UV_RUN_DEFAULT);
    if (uv_loop_close(d->loop) != 0)
        srv_log(SRV_LOG_WARN, "loop_close_busy", "handles=open");
    di_free(d->loop);
    d->loop = NULL;
    pthread_mutex_destroy(&d->inbox_lock);
    grpc_shutdown_blocking();
    return d->exit_code;
}
