/*
 * search.h: the daemon's side of the Search RPC (docs/daemon.md): one
 * search of lib/search shared by several worker jobs.
 *
 * The loop thread creates an srv_search from the request bytes and hands it
 * to one worker job that decodes the request and builds the space
 * (srv_search_prepare, which also builds the search's plan: branch and
 * bound, lib/search/plan.c); then to one job per worker, each of which takes
 * candidates from the shared plan (an atomic cursor over the seed, then
 * the rest of the space), evaluates them on its own search_evaluator and
 * adds them to its own part of the result (srv_search_work). Counters for the progress events are
 * atomics, and the best point so far sits under a mutex; the loop reads
 * them while the workers run (srv_search_progress). When every work job is
 * back, the loop merges the parts with search_result_merge (srv_search_result):
 * every order there is by enumeration index, so the answer is bit-identical
 * whatever the worker count and the interleaving.
 *
 * Stored searches: after the prepare, the worker looks the search up in the
 * cache (srv_search_lookup); on a hit no work job runs and srv_search_result
 * gives the stored result, marked cached. A computed result comes back
 * packed from srv_search_result for the loop to store.
 *
 * lib/ stays free of threads: the threads, the mutex and the waiting (a
 * worker past the seed before it is complete sleeps a millisecond at a
 * time) live here.
 */
#ifndef DISTIRD_SEARCH_H
#define DISTIRD_SEARCH_H

#include <grpc/byte_buffer.h>
#include <grpc/slice.h>
#include <stdint.h>

#include "base/base.h"
#include "request/request.h"

typedef struct srv_search srv_search;
struct cache;

/*
 * A search of the SearchRequest in bytes (the search takes the reference),
 * to be worked on by at most nparts jobs. A space with more than
 * max_candidates candidates to evaluate is refused (DI_ETOOBIG).
 * test_delay_ms (testing only) slows every candidate down, polling the
 * cancel flag. Free with srv_search_free once no job holds it.
 */
srv_search *srv_search_new(grpc_slice bytes, const request_limits *lim, uint64_t max_candidates,
                           unsigned nparts, int64_t test_delay_ms);
void srv_search_free(srv_search *s);

/*
 * Worker: decodes the request and builds the space's candidates and key
 * (enough to find a stored search); 0 or an error in err.
 */
int srv_search_prepare(srv_search *s, di_error *err);
/*
 * Worker, after a prepare whose search is not stored: the analyses behind
 * the bounds and the plan (branch and bound's seed), before any work job.
 */
void srv_search_plan(srv_search *s);
/*
 * Worker: evaluates candidates from the shared plan into part `part` (< nparts) until the
 * space is done, the search is cancelled, or slice_ns (0: no limit) has
 * passed; returns 1 when it stopped for the slice (candidates may be left),
 * so that the caller queues it again behind other work. ws: the worker thread's simulation
 * workspace, kept across its slices (NULL: a new one per call).
 */
int srv_search_work(srv_search *s, unsigned part, uint64_t slice_ns, struct sim_workspace *ws);
/*
 * Worker, after srv_search_work: the module of the candidate a cancel
 * stopped (NULL if none), now the caller's to free (ir_module_free) once
 * the job has been handed back, so that the free (milliseconds for a large
 * module) does not delay the answer. srv_search_free frees any left.
 */
struct ir_module *srv_search_take_garbage(srv_search *s, unsigned part);
/*
 * Testing only: the first candidate to finish its transform cancels the
 * search, so that the cancel lands inside its simulation.
 */
void srv_search_test_cancel_in_simulation(srv_search *s);
/* Any thread: asks the workers to stop after their current candidate. */
void srv_search_cancel(srv_search *s);
int srv_search_cancelled(srv_search *s);
/* The number of candidates of the request's shard (after a successful prepare). */
uint64_t srv_search_total(const srv_search *s);
/* Candidates evaluated so far (any thread). */
uint64_t srv_search_done(srv_search *s);

/*
 * Stored searches (docs/daemon.md "Search"). After a successful prepare:
 * the key under which the search's result is stored in the cache, SHA-256
 * over "distir.search.store.v1", the search's key (search_space.key) and
 * the shard i/n.
 */
void srv_search_store_key(const srv_search *s, di_hash *key);
/* Stores and looks the search up under a tenant's scope (auth.c); before it is prepared. */
void srv_search_set_scope(srv_search *s, const di_hash *scope);
/*
 * Worker, after a successful prepare: looks the search up in c (the
 * worker's read-only connection). Returns 1 when a stored result is found
 * and decodes as this search's result (the search then needs no work job);
 * 0 on a miss, including a stored blob that does not decode or is another
 * search's (the search then runs, and storing its result replaces the row).
 */
int srv_search_lookup(srv_search *s, struct cache *c);
/* Whether srv_search_lookup found the search. */
int srv_search_hit(const srv_search *s);

/* Loop thread, while the workers run: a SearchEvent with the progress so far. */
grpc_byte_buffer *srv_search_progress(srv_search *s);
/*
 * Whether candidate log lines (SearchRequest.log_candidates) wait for a
 * progress event: the caller sends events until none does, before the result.
 */
int srv_search_log_pending(srv_search *s);
/*
 * Simulations kept between searches (cache_evals_*, docs/search.md): after
 * srv_search_plan, on the same worker, srv_search_load_evals reads what
 * earlier searches of the same module, hardware and evaluation options
 * simulated (through the worker's read-only connection c), so that the
 * workers take those figures instead of simulating; returns the entries
 * loaded. Once every job is back, srv_search_store_evals (the loop thread,
 * the writer) stores what this search simulated that was not loaded, also
 * for a cancelled search, and sets *stored to the count.
 */
uint32_t srv_search_load_evals(srv_search *s, struct cache *c);
int srv_search_store_evals(srv_search *s, struct cache *c, uint32_t *stored, di_error *err);
/*
 * Between two slices of part's work (the loop thread, while no job of that
 * part runs): stores what the part simulated since its last store when that
 * is at least min_new entries or every_ns have passed since (and there is
 * something), so that a daemon killed during a long search keeps most of its
 * work. *stored receives the count (0 when nothing was stored).
 */
int srv_search_flush_evals(srv_search *s, unsigned part, uint32_t min_new, uint64_t every_ns,
                           struct cache *c, uint32_t *stored, di_error *err);
/*
 * Loop thread, once every work job is back: a SearchEvent with the merged
 * result. When stored is not NULL, *stored (freed by the caller with
 * di_free) and *nstored get the packed SearchResult to store in the cache.
 * On a hit (srv_search_hit), the stored result marked cached, with this
 * call's elapsed_s, and *stored is NULL.
 */
int srv_search_result(srv_search *s, grpc_byte_buffer **out, uint8_t **stored, size_t *nstored,
                      di_error *err);

#endif
