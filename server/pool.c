/*
 * pool.c: the worker pool of pool.h: pthreads sharing one mutex-protected
 * FIFO and a condition variable. Counters that other threads read for
 * metrics (queued, running) are atomics; everything else is under the lock.
 */
#include "pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

typedef struct pool_thread {
    pool_worker worker;
    pthread_t thread;
    int started;
    int init_rc;
    di_error init_err;
} pool_thread;

struct pool {
    pool_config cfg;
    pthread_mutex_t lock;
    pthread_cond_t wake;  /* jobs queued or stopping */
    pthread_cond_t ready; /* a thread finished thread_init */
    pool_job *head, *tail;
    int stopping;
    unsigned ninit; /* threads past thread_init */
    atomic_uint queued;
    atomic_uint running;
    pool_thread *threads;
    unsigned nthread; /* threads created */
};

static void *
pool_main(void *arg)
{
    pool_thread *t = arg;
    pool *p = t->worker.pool;
    int rc = 0;
    di_error_clear(&t->init_err);
    if (p->cfg.thread_init != NULL)
        rc = p->cfg.thread_init(&t->worker, p->cfg.ctx, &t->init_err);
    pthread_mutex_lock(&p->lock);
    t->init_rc = rc;
    p->ninit++;
    pthread_cond_broadcast(&p->ready);
    pthread_mutex_unlock(&p->lock);
    if (rc != 0)
        return NULL;
    for (;;) {
        pthread_mutex_lock(&p->lock);
        if (p->head == NULL && !p->stopping && p->cfg.thread_idle != NULL &&
            p->cfg.idle_ms > 0) {
            /* Idle for idle_ms with nothing queued: thread_idle, once per idle spell. */
            struct timespec until;
            int waited = 0;
            clock_gettime(CLOCK_REALTIME, &until);
            until.tv_sec += p->cfg.idle_ms / 1000;
            until.tv_nsec += (long)(p->cfg.idle_ms % 1000) * 1000000L;
            if (until.tv_nsec >= 1000000000L) {
                until.tv_sec++;
                until.tv_nsec -= 1000000000L;
            }
            while (p->head == NULL && !p->stopping && waited == 0)
                waited = pthread_cond_timedwait(&p->wake, &p->lock, &until);
            if (p->head == NULL && !p->stopping) {
                pthread_mutex_unlock(&p->lock);
                p->cfg.thread_idle(&t->worker, p->cfg.ctx);
                pthread_mutex_lock(&p->lock);
            }
        }
        while (p->head == NULL && !p->stopping)
            pthread_cond_wait(&p->wake, &p->lock);
        pool_job *job = p->head;
        if (job == NULL) { /* stopping and drained */
            pthread_mutex_unlock(&p->lock);
            break;
        }
        p->head = job->next;
        if (p->head == NULL)
            p->tail = NULL;
        atomic_fetch_sub(&p->queued, 1);
        atomic_fetch_add(&p->running, 1);
        pthread_mutex_unlock(&p->lock);
        job->next = NULL;
        job->run(job, &t->worker);
        atomic_fetch_sub(&p->running, 1);
        if (job->done != NULL)
            job->done(job);
        if (p->cfg.thread_after != NULL)
            p->cfg.thread_after(&t->worker, p->cfg.ctx);
    }
    if (p->cfg.thread_fini != NULL)
        p->cfg.thread_fini(&t->worker, p->cfg.ctx);
    return NULL;
}

static void
pool_stop(pool *p)
{
    pthread_mutex_lock(&p->lock);
    p->stopping = 1;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    for (unsigned i = 0; i < p->nthread; i++)
        if (p->threads[i].started)
            pthread_join(p->threads[i].thread, NULL);
}

int
pool_new(const pool_config *cfg, pool **out, di_error *err)
{
    pool *p = di_xcalloc(1, sizeof *p);
    pthread_attr_t attr;
    int rc = 0;
    *out = NULL;
    if (cfg->nthreads == 0) {
        di_free(p);
        return di_error_set(err, DI_EINVAL, "pool: no threads");
    }
    p->cfg = *cfg;
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->ready, NULL);
    p->threads = di_xcalloc(cfg->nthreads, sizeof *p->threads);
    pthread_attr_init(&attr);
    if (cfg->stack_bytes > 0 && pthread_attr_setstacksize(&attr, cfg->stack_bytes) != 0) {
        pthread_attr_destroy(&attr);
        rc = di_error_set(err, DI_EINVAL, "pool: invalid stack size %zu bytes", cfg->stack_bytes);
        goto fail;
    }
    for (unsigned i = 0; i < cfg->nthreads; i++) {
        pool_thread *t = &p->threads[i];
        t->worker.pool = p;
        t->worker.index = i;
        int e = pthread_create(&t->thread, &attr, pool_main, t);
        if (e != 0) {
            rc = di_error_set(err, DI_EIO, "pool: cannot start thread %u: %s", i, strerror(e));
            break;
        }
        t->started = 1;
        p->nthread++;
    }
    pthread_attr_destroy(&attr);
    pthread_mutex_lock(&p->lock);
    while (p->ninit < p->nthread)
        pthread_cond_wait(&p->ready, &p->lock);
    pthread_mutex_unlock(&p->lock);
    for (unsigned i = 0; rc == 0 && i < p->nthread; i++) {
        if (p->threads[i].init_rc != 0) {
            rc = p->threads[i].init_rc;
            if (err != NULL)
                *err = p->threads[i].init_err;
        }
    }
    if (rc != 0)
        goto fail;
    *out = p;
    return 0;
fail:
    pool_stop(p);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->ready);
    pthread_mutex_destroy(&p->lock);
    di_free(p->threads);
    di_free(p);
    return rc;
}

void
pool_submit(pool *p, pool_job *job)
{
    job->next = NULL;
    pthread_mutex_lock(&p->lock);
    if (p->tail != NULL)
        p->tail->next = job;
    else
        p->head = job;
    p->tail = job;
    atomic_fetch_add(&p->queued, 1);
    pthread_cond_signal(&p->wake);
    pthread_mutex_unlock(&p->lock);
}

unsigned
pool_queued(const pool *p)
{
    return atomic_load(&((pool *)p)->queued);
}

unsigned
pool_running(const pool *p)
{
    return atomic_load(&((pool *)p)->running);
}

unsigned
pool_size(const pool *p)
{
    return p->nthread;
}

void
pool_free(pool *p)
{
    if (p == NULL)
        return;
    pool_stop(p);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->ready);
    pthread_mutex_destroy(&p->lock);
    di_free(p->threads);
    di_free(p);
}
