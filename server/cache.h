/*
 * cache.h: the SQLite result cache (schema.sql). One connection per thread:
 * the event loop owns the only writer (it also answers cache hits through
 * it); each worker opens its own read-only connection. WAL journal,
 * synchronous=NORMAL, a busy timeout on every connection, BEGIN IMMEDIATE
 * for every write transaction (GRPC_NOTES.md section 9).
 *
 * A cache handle is not thread-safe: use it only on the thread that opened it.
 */
#ifndef DISTIRD_CACHE_H
#define DISTIRD_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

/* The schema text (schema.sql), generated at build time. */
extern const char cache_schema_sql[];

typedef struct cache cache;

#define CACHE_READONLY 0x1 /* a worker's connection: no migrations, no writes */

/*
 * Opens (creating when writable) the database at path and brings its schema
 * up to date. Fails with DI_ECORRUPT when the file is not a database (or a
 * damaged one), DI_EIO when it cannot be opened or written, and with
 * DI_EUNSUPPORTED when its schema version is newer than this build's.
 * Free with cache_close.
 */
int cache_open(const char *path, int flags, cache **out, di_error *err);
/* As cache_open with another schema text (tests of migrations). */
int cache_open_schema(const char *path, int flags, const char *schema, cache **out, di_error *err);
/*
 * Writes pending hit counts, checkpoints the WAL into the database (writer
 * only) and closes. cache_close(NULL) does nothing.
 */
void cache_close(cache *c);

/* The highest "-- version N" in a schema text; 0 if none. */
int cache_schema_latest(const char *schema);
/* The database's PRAGMA user_version. */
int cache_schema_version(cache *c);

/*
 * Looks key up. Returns 0 and points *data at the stored packed SimResult,
 * valid until the next call on this handle; DI_ENOTFOUND when absent;
 * DI_ECORRUPT when the stored bytes fail their SHA-256 checksum (the row is
 * deleted on the writer; a read-only connection only reports it); or
 * another code with err set.
 */
int cache_get(cache *c, const di_hash *key, const uint8_t **data, size_t *len, di_error *err);
/*
 * Stores a result and its checksum (writer only) in its own BEGIN IMMEDIATE
 * transaction. An existing row for key is kept (results are deterministic)
 * unless its checksum differs (a row gone bad), which is replaced.
 */
int cache_put(cache *c, const di_hash *key, const uint8_t *data, size_t len,
              const char *simulator_version, double step_time_s, uint64_t peak_memory_bytes,
              di_error *err);
/* Records a hit in memory; cache_flush (or close) writes hits and last_hit. */
void cache_note_hit(cache *c, const di_hash *key);
/*
 * Caps the database file at about `bytes` (SQLite's max_page_count). A store
 * that finds the file full (the cap, or a full disk) evicts the least
 * recently used rows (results first: never-hit ones in the order stored, then
 * by last hit; stored searches once no result is left) and tries again; only
 * a value that does not fit even then fails, with DI_EIO ("database or disk
 * is full"); the daemon still answers, it only stops storing.
 */
int cache_set_limit(cache *c, uint64_t bytes, di_error *err);
int cache_flush(cache *c, di_error *err);
/* A passive WAL checkpoint (writer only). */
int cache_checkpoint(cache *c, di_error *err);

/* Rows in the results table (kept current by cache_put on this handle). */
uint64_t cache_count(cache *c);
/* Rows this handle found failing their checksum. */
uint64_t cache_corrupt_count(cache *c);
/* Rows this handle evicted to make room. */
uint64_t cache_evicted_count(cache *c);
/*
 * The connection, for the other tables' modules (baseline.c): same thread
 * rules; any row cache_get lent out is released first.
 */
struct sqlite3;
struct sqlite3 *cache_sqlite(cache *c);
/* Writable (not CACHE_READONLY). */
int cache_writable(const cache *c);
/* Stored hit count of key (including unflushed ones), or -1 when absent. */
int64_t cache_hits(cache *c, const di_hash *key);

/*
 * Stored searches (the searches table): as cache_get, cache_put,
 * cache_note_hit and cache_hits, with the packed distir.v1.SearchResult of a
 * completed search under its store key (srv_search_store_key). Unlike
 * cache_put, cache_search_put replaces an existing row: the daemon stores a
 * search only after a miss, so a row there did not decode.
 */
int cache_search_get(cache *c, const di_hash *key, const uint8_t **data, size_t *len,
                     di_error *err);
int cache_search_put(cache *c, const di_hash *key, const uint8_t *data, size_t len, di_error *err);
void cache_search_note_hit(cache *c, const di_hash *key);
int64_t cache_search_hits(cache *c, const di_hash *key);

/*
 * Simulations kept between searches (the search_evals table, schema version
 * 6): each store of a search (srv_search_flush_evals as it goes, and
 * srv_search_store_evals at its end) adds one row of its newly simulated
 * candidates' packed figures (search_memo_pack_all) under space, the scoped
 * search_space.eval_key, with their SHA-256. cache_evals_each calls fn with
 * every row of space, oldest first, whose checksum holds (a row that fails it,
 * or that fn refuses with non-zero, is skipped and counted corrupt), the
 * number of rows passed in *nrows: 0, or a code with err set. Both
 * are no-ops on an older schema. Put is for the writer only, get for any
 * connection (workers read with their own).
 */
int cache_evals_put(cache *c, const di_hash *space, const uint8_t *data, size_t len, di_error *err);
int cache_evals_each(cache *c, const di_hash *space,
                     int (*fn)(void *ctx, const uint8_t *data, size_t len), void *ctx,
                     uint32_t *nrows, di_error *err);

/*
 * PRAGMA integrity_check (thorough: indexes against tables) and quick_check
 * (pages and records only, linear in the file; the daemon runs it at start):
 * 0 when it says "ok", DI_ECORRUPT with its first lines otherwise, DI_EIO when
 * the check itself cannot run.
 */
int cache_check(cache *c, di_error *err);
int cache_quick_check(cache *c, di_error *err);
/*
 * Moves a damaged database (and its -wal and -shm files) aside to
 * "<path>.damaged-<unix seconds>", writing that name to moved; the caller
 * then opens a fresh database at path. Returns 0 or DI_EIO.
 */
int cache_set_aside(const char *path, char *moved, size_t size, di_error *err);

#endif
