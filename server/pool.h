/*
 * pool.h: a fixed pool of worker threads with explicit stack sizes and a
 * FIFO job queue, for distird's CPU-bound work (GRPC_NOTES.md section 4:
 * the libuv pool is shared with fs work, has no per-thread hooks and its stack
 * size follows RLIMIT_STACK). Each worker runs thread_init once when it
 * starts (distird opens the worker's read-only SQLite connection there) and
 * thread_fini before it exits, on its own thread; thread_idle when it has
 * waited idle_ms for a job.
 *
 * A job is caller storage: run() executes on a worker, then done() on the
 * same worker, which hands the job back (distird pushes it to the event
 * loop's inbox). The pool never touches a job after done() returns.
 */
#ifndef DISTIRD_POOL_H
#define DISTIRD_POOL_H

#include <stddef.h>

#include "base/base.h"

typedef struct pool pool;
typedef struct pool_worker pool_worker;
typedef struct pool_job pool_job;

struct pool_worker {
    pool *pool;
    unsigned index; /* 0 .. nthreads-1 */
    void *local;    /* set by thread_init, for the worker's own use */
};

struct pool_job {
    pool_job *next; /* the pool's queue link */
    void (*run)(pool_job *job, pool_worker *w);
    void (*done)(pool_job *job);
};

typedef struct pool_config {
    unsigned nthreads;  /* >= 1 */
    size_t stack_bytes; /* stack of each thread, bytes */
    /* Called on each worker as it starts; non-zero fails pool_new. */
    int (*thread_init)(pool_worker *w, void *ctx, di_error *err);
    void (*thread_fini)(pool_worker *w, void *ctx);
    /*
     * Called on a worker that has had nothing to do for idle_ms (once per
     * idle spell; NULL or idle_ms 0: never), to give back what it keeps for
     * the next job.
     */
    void (*thread_idle)(pool_worker *w, void *ctx);
    /*
     * Called on the worker after each job's done() (NULL: nothing), for
     * cleanup that need not delay the job's answer.
     */
    void (*thread_after)(pool_worker *w, void *ctx);
    unsigned idle_ms;
    void *ctx;
} pool_config;

/* Starts the threads and waits until every thread_init has returned. */
int pool_new(const pool_config *cfg, pool **out, di_error *err);
/* Queues a job (any thread). */
void pool_submit(pool *p, pool_job *job);
/* Jobs waiting for a worker, and jobs running now. */
unsigned pool_queued(const pool *p);
unsigned pool_running(const pool *p);
unsigned pool_size(const pool *p);
/*
 * Lets the workers finish every queued job, then joins them (each runs
 * thread_fini) and frees the pool. pool_free(NULL) does nothing.
 */
void pool_free(pool *p);

#endif
