/*
 * daemon.h: distird's shared state and the pieces of its event loop.
 *
 *   main thread   the libuv loop: owns every srv_call, the in-flight table,
 *                 the SQLite writer, signals, timers and the metrics endpoint;
 *                 it alone calls grpc_call_start_batch
 *   CQ thread     only grpc_completion_queue_next; each (tag, ok) is an
 *                 srv_event pushed onto the inbox
 *   workers       the pool (pool.h) runs srv_jobs on immutable inputs; a
 *                 finished job pushes its own srv_event onto the inbox
 *
 * The inbox is an intrusive list under a mutex plus uv_async_send, which
 * coalesces wake-ups, so the loop drains the whole list each time. An
 * srv_event is embedded in the object it belongs to (one per kind of
 * outstanding operation), so pushing never allocates.
 *
 * daemon.c holds start-up, the inbox, signals and shutdown; grpc_front.c the
 * calls and methods; metrics.c the Prometheus endpoint.
 */
#ifndef DISTIRD_DAEMON_H
#define DISTIRD_DAEMON_H

#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <uv.h>

#include "base/base.h"
#include "cache.h"
#include "config.h"
#include "pool.h"
#include "tokens.h"
#include "request/request.h"

typedef enum srv_event_kind {
    SRV_EV_CALL_NEW = 1, /* a requested call arrived (or the request failed) */
    SRV_EV_CALL_CLOSE,   /* RECV_CLOSE_ON_SERVER completed */
    SRV_EV_CALL_SEND,    /* a send batch completed */
    SRV_EV_JOB,          /* a worker finished a job */
    SRV_EV_SHUTDOWN,     /* grpc_server_shutdown_and_notify completed */
    SRV_EV_CQ_DONE,      /* the CQ thread saw GRPC_QUEUE_SHUTDOWN and exits */
} srv_event_kind;

typedef struct srv_event srv_event;
struct srv_event {
    srv_event *next;
    uint8_t kind; /* srv_event_kind */
    uint8_t ok;   /* the completion's success flag */
};

/* Methods; the registered ones first, in the order of srv_method_paths. */
typedef enum srv_method {
    SRV_M_SIMULATE = 0,
    SRV_M_BATCH,
    SRV_M_GET_RESULT,
    SRV_M_SERVER_INFO,
    SRV_M_HEALTH,
    SRV_M_SEARCH,
    SRV_M_SET_BASELINE,
    SRV_M_COMPARE,
    SRV_M_HISTORY,
    SRV_NREGISTERED,
    SRV_M_UNKNOWN = SRV_NREGISTERED,
    SRV_NMETHOD
} srv_method;

extern const char *const srv_method_paths[SRV_NREGISTERED];
extern const char *const srv_method_names[SRV_NMETHOD];

#define SRV_NSTATUS 17 /* gRPC status codes 0..16 */

/* Counters for ServerInfo and /metrics; loop thread only. */
typedef struct srv_metrics {
    uint64_t requests[SRV_NMETHOD];
    uint64_t responses[SRV_NMETHOD][SRV_NSTATUS];
    double latency_sum_s[SRV_NMETHOD]; /* seconds, call accepted -> status sent */
    uint64_t cache_hits;
    uint64_t cache_misses;
    uint64_t cache_corrupt; /* stored results that failed their checksum (event loop's reads) */
    uint64_t coalesced; /* misses that joined an identical job */
    uint64_t jobs_started;
    uint64_t jobs_done;
    uint64_t jobs_failed;
    uint64_t jobs_cancelled;
    double job_seconds_sum; /* seconds of worker time */
    uint64_t stream_messages;
    uint64_t memo_hits;       /* hits answered without decoding the request */
    uint64_t conn_accepted;   /* gRPC connections accepted (listen.c) */
    uint64_t conn_refused;    /* closed at once: no descriptor to spare */
    uint64_t calls_cancelled; /* deadline, client cancel or lost connection */
    uint64_t searches_done;      /* Search calls answered with a result */
    uint64_t search_candidates;  /* candidates evaluated by searches */
    uint64_t search_cache_hits;  /* Search calls answered from the stored searches */
} srv_metrics;

typedef struct srv_job srv_job;
typedef struct srv_call srv_call;
typedef struct srv_http srv_http;
typedef struct srv_tenants srv_tenants;
typedef struct srv_tls srv_tls;

/* Who is calling (auth.c): the tenant a bearer token names, and its key scope. */
typedef struct srv_identity {
    int authenticated; /* a listed token was given */
    int admin;         /* may see paths (and everything, without a token file) */
    int scoped;        /* stored keys are scoped by `scope` */
    char tenant[64];
    di_hash scope;
} srv_identity;

typedef struct srv_daemon {
    srv_config *cfg;
    request_limits limits;
    uv_loop_t *loop;

    /* The inbox (any thread pushes, the loop drains). */
    uv_async_t wake;
    pthread_mutex_t inbox_lock;
    srv_event *inbox_head, *inbox_tail;

    grpc_server *server;
    grpc_completion_queue *cq;
    uv_thread_t cq_thread;
    void *registered[SRV_NREGISTERED];
    int port;              /* the bound port (0 for a unix socket) */
    int grpc_started;      /* grpc_server_start was called */
    char listen_addr[256]; /* host:port actually bound */

    srv_tenants *tenants; /* --tokens, or NULL: anonymous */
    struct srv_tenant_load {
        char name[64];
        uint64_t jobs; /* simulation jobs queued or running for this tenant */
    } *tenant_load;
    uint32_t ntenant_load;
    srv_tls *tls;         /* --tls-cert, or NULL: plaintext */
    volatile int accept_dead; /* gRPC's own listener (TLS) logged a failed accept4 */

    /* The gRPC port's own accept loop (listen.c). */
    int listen_fd, spare_fd, listen_family, fd_ceiling, listening;
    uv_poll_t listen_poll;
    grpc_server_credentials *listen_creds;

    pool *pool;
    unsigned nworkers;
    cache *cache; /* the writer: loop thread only */
    request_hwcache *hwcache;

    /*
     * Request memo: SHA-256 of a Simulate request's bytes -> its cache key,
     * direct-mapped (a colliding entry is overwritten). The same bytes under
     * the same limits always decode to the same key, so a repeated request
     * is answered from the cache without decoding, verifying or hashing it.
     * An entry may also keep the encoded HIT reply (results never change once
     * stored), so that the answer needs no database read and no copy.
     */
    struct srv_memo_entry {
        di_hash digest;
        di_hash key;   /* stored under (scoped by tenant) */
        di_hash shown; /* the key clients see */
        int valid;
        int has_reply;
        grpc_slice reply; /* the whole SimulateReply, when has_reply */
    } *memo;
    uint32_t nmemo;    /* entries, a power of 2 */
    size_t memo_bytes; /* bytes held by memo replies */

    /* In-flight simulations by cache key (open hashing, power of 2). */
    srv_job **flights;
    uint32_t nflight_bucket, nflight;

    /* Lifetime. */
    srv_event shutdown_ev, cq_done_ev;
    uv_signal_t sig_term, sig_int, sig_hup;
    uv_timer_t flush_timer, grace_timer, health_timer;
    unsigned flushes; /* flush timer ticks (a checkpoint every CHECKPOINT_EVERY) */
    int serving;         /* health: 1 SERVING, 0 NOT_SERVING */
    int shutting_down;   /* a signal arrived */
    int shutdown_called; /* grpc_server_shutdown_and_notify was called */
    int shutdown_acked;  /* its tag came back */
    int cq_shutdown_called;
    int cancelled_all;
    int exit_code;
    unsigned live_calls;       /* accepted calls not yet freed */
    unsigned posted_requests;  /* request tags outstanding */
    unsigned jobs_outstanding; /* submitted jobs not yet back */
    srv_call *calls;           /* live calls, for shutdown */
    uint64_t start_ns;         /* uv_hrtime at start */

    srv_metrics m;
    srv_http *http;
} srv_daemon;

/* ---- daemon.c ---- */
/* Pushes an event to the loop; any thread. */
void srv_inbox_push(srv_daemon *d, srv_event *ev);
/* Starts everything from cfg; 0 or an error. Then srv_daemon_run. */
int srv_daemon_start(srv_daemon *d, srv_config *cfg, di_error *err);
/* Runs the loop until shutdown completes; returns the exit code. */
int srv_daemon_run(srv_daemon *d);
/* Starts a graceful shutdown (what SIGTERM does). */
void srv_daemon_shutdown(srv_daemon *d);
/* Called by the front when a call or job is released during shutdown. */
void srv_daemon_check_drained(srv_daemon *d);

/* ---- grpc_front.c ---- */
int srv_front_start(srv_daemon *d, di_error *err);
void srv_front_event(srv_daemon *d, srv_event *ev);
/* Cancels every in-flight job (after the grace period). */
void srv_front_cancel_jobs(srv_daemon *d);
/* Frees the front's tables (after the server and the pool are gone). */
void srv_front_fini(srv_daemon *d);
/* Worker-side hooks for the pool. */
int srv_worker_init(pool_worker *w, void *ctx, di_error *err);
void srv_worker_fini(pool_worker *w, void *ctx);
/* A worker idle for SRV_WORKER_IDLE_MS: gives back its simulation workspace beyond what it keeps. */
void srv_worker_idle(pool_worker *w, void *ctx);
/* After each job: frees what the job left for later (a cancelled candidate's module). */
void srv_worker_after(pool_worker *w, void *ctx);
#define SRV_WORKER_IDLE_MS 1000u

/* ---- metrics.c ---- */
int srv_http_start(srv_daemon *d, const char *addr, di_error *err);
void srv_http_stop(srv_daemon *d);
/* The Prometheus text exposition of d's counters. */
void srv_metrics_render(srv_daemon *d, di_buf *out);

/* auth.c */
/* Reads and parses a token file (tokens.h). */
int srv_tenants_load(const char *path, srv_tenants **out, di_error *err);
/* 0 with *who filled, or -1: the call must end UNAUTHENTICATED. */
int srv_auth_call(srv_daemon *d, const grpc_metadata_array *md, srv_identity *who);
/* The key a result or search of *who is stored under (key itself when unscoped). */
void srv_scope_key(const srv_identity *who, const di_hash *key, di_hash *out);
int srv_tls_new(const srv_config *cfg, srv_tls **out, grpc_server_credentials **creds,
                di_error *err);
int srv_tls_reload(srv_tls *tls, const srv_config *cfg, di_error *err);
void srv_tls_free(srv_tls *tls);

/* listen.c: the gRPC port's accept loop (after grpc_server_start; stop at drain). */
int srv_listen_start(srv_daemon *d, di_error *err);
void srv_listen_stop(srv_daemon *d);

#endif
