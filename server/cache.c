/*
 * cache.c: the result cache on SQLite. See cache.h for the threading rules
 * and schema.sql for the tables and the migration scheme.
 *
 * Hits are frequent and cheap, so they are not written one by one: the
 * writer collects them in memory (cache_note_hit) and cache_flush, called by
 * the daemon from a timer and at shutdown, applies them in one transaction,
 * one UPDATE per distinct key.
 */
#include "cache.h"

#include <errno.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

enum {
    ST_GET,
    ST_PUT,
    ST_HIT,
    ST_HITS,
    ST_SEARCH_GET,
    ST_SEARCH_PUT,
    ST_SEARCH_HIT,
    ST_SEARCH_HITS,
    ST_REPAIR,
    ST_EVICT,
    ST_EVALS_EVICT,
    ST_SEARCH_EVICT,
    ST_DROP,
    ST_SEARCH_DROP,
    ST_EVALS_GET,
    ST_EVALS_PUT,
    ST_BEGIN,
    ST_COMMIT,
    ST_ROLLBACK,
    NSTMT
};

static const char *const stmt_sql[NSTMT] = {
    [ST_GET] = "SELECT result, checksum FROM results WHERE key = ?1",
    /*
     * Results are deterministic, so an existing row is kept, unless it fails
     * its checksum (a row gone bad that a worker's read-only connection found)
     * or has none (written before checksums): ST_REPAIR then replaces it.
     */
    [ST_PUT] = "INSERT INTO results (key, result, simulator_version, step_time_s, "
               "peak_memory_bytes, created, checksum) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) "
               "ON CONFLICT (key) DO NOTHING",
    [ST_HIT] = "UPDATE results SET hits = hits + ?2, "
               "last_hit = max(coalesce(last_hit, 0), ?3) WHERE key = ?1",
    [ST_HITS] = "SELECT hits FROM results WHERE key = ?1",
    [ST_SEARCH_GET] = "SELECT result, checksum FROM searches WHERE key = ?1",
    /* A search is stored only after a miss: an existing row did not decode, so it is replaced. */
    [ST_SEARCH_PUT] = "INSERT INTO searches (key, result, created, checksum) "
                      "VALUES (?1, ?2, ?3, ?4) "
                      "ON CONFLICT (key) DO UPDATE SET result = excluded.result, "
                      "created = excluded.created, checksum = excluded.checksum",
    [ST_SEARCH_HIT] = "UPDATE searches SET hits = hits + ?2, "
                      "last_hit = max(coalesce(last_hit, 0), ?3) WHERE key = ?1",
    [ST_SEARCH_HITS] = "SELECT hits FROM searches WHERE key = ?1",
    [ST_REPAIR] = "UPDATE results SET result = ?2, checksum = ?3 WHERE key = ?1 AND "
                  "(checksum IS NULL OR checksum IS NOT distir_sha256(result))",
    /*
     * Least recently used first: rows never hit (last_hit NULL) in the order
     * they were stored, then by last hit; both walk the last_hit index.
     */
    [ST_EVICT] = "DELETE FROM results WHERE id IN "
                 "(SELECT id FROM results ORDER BY last_hit LIMIT ?1)",
    /* The oldest searches' simulations first. */
    [ST_EVALS_EVICT] = "DELETE FROM search_evals WHERE id IN "
                       "(SELECT id FROM search_evals ORDER BY id LIMIT ?1)",
    [ST_EVALS_GET] = "SELECT entries, checksum FROM search_evals WHERE space = ?1 ORDER BY id",
    [ST_EVALS_PUT] = "INSERT INTO search_evals (space, entries, created, checksum) "
                     "VALUES (?1, ?2, ?3, ?4)",
    [ST_SEARCH_EVICT] = "DELETE FROM searches WHERE id IN "
                        "(SELECT id FROM searches ORDER BY last_hit LIMIT ?1)",
    [ST_DROP] = "DELETE FROM results WHERE key = ?1",
    [ST_SEARCH_DROP] = "DELETE FROM searches WHERE key = ?1",
    [ST_BEGIN] = "BEGIN IMMEDIATE",
    [ST_COMMIT] = "COMMIT",
    [ST_ROLLBACK] = "ROLLBACK",
};

/* The statements that differ on a schema before version 4 (no checksums; tests of migrations). */
static const char *const stmt_sql_v3[NSTMT] = {
    [ST_GET] = "SELECT result FROM results WHERE key = ?1",
    [ST_PUT] = "INSERT INTO results (key, result, simulator_version, step_time_s, "
               "peak_memory_bytes, created) VALUES (?1, ?2, ?3, ?4, ?5, ?6) "
               "ON CONFLICT (key) DO NOTHING",
    [ST_SEARCH_GET] = "SELECT result FROM searches WHERE key = ?1",
    [ST_SEARCH_PUT] = "INSERT INTO searches (key, result, created) VALUES (?1, ?2, ?3) "
                      "ON CONFLICT (key) DO UPDATE SET result = excluded.result, "
                      "created = excluded.created",
};

typedef struct cache_hit {
    di_hash key;
    int search;  /* a hit on the searches table rather than on results */
    double time; /* Unix seconds */
} cache_hit;

struct cache {
    sqlite3 *db;
    int readonly;
    int checksums; /* the schema has checksum columns (version 4 on) */
    uint64_t corrupt; /* rows found corrupt (and dropped when writable) */
    uint64_t evicted; /* rows evicted to make room under the size limit */
    sqlite3_stmt *st[NSTMT];
    sqlite3_stmt *active; /* the statement whose row cache_get lent out */
    uint64_t count;
    cache_hit *hits; /* pending hits */
    size_t nhit, chit;
};

/* The statements of the search_evals table (schema version 6 on). */
static int
is_evals_stmt(int which)
{
    return which == ST_EVALS_GET || which == ST_EVALS_PUT || which == ST_EVALS_EVICT;
}

static int
is_search_stmt(int which)
{
    return (which >= ST_SEARCH_GET && which <= ST_SEARCH_HITS) || which == ST_SEARCH_DROP ||
           which == ST_SEARCH_EVICT;
}

/* SQL distir_sha256(blob): the SHA-256 of a blob, as stored in the checksum columns. */
static void
sql_sha256(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    di_hash sum;
    const void *p = sqlite3_value_blob(argv[0]);
    (void)argc;
    di_sha256_once(p != NULL ? p : "", (size_t)sqlite3_value_bytes(argv[0]), &sum);
    sqlite3_result_blob(ctx, sum.b, sizeof sum.b, SQLITE_TRANSIENT);
}

static double
now_unix(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int
db_error(cache *c, di_error *err, int code, const char *what)
{
    return di_error_set(err, code, "cache: %s: %s", what,
                        c->db ? sqlite3_errmsg(c->db) : "no database");
}

static void
release_active(cache *c)
{
    if (c->active != NULL) {
        sqlite3_reset(c->active);
        c->active = NULL;
    }
}

int
cache_schema_latest(const char *schema)
{
    int latest = 0;
    const char *p = schema;
    while ((p = strstr(p, "-- version ")) != NULL) {
        if (p == schema || p[-1] == '\n') {
            int v = atoi(p + 11);
            if (v > latest)
                latest = v;
        }
        p += 11;
    }
    return latest;
}

static int
pragma_int(sqlite3 *db, const char *sql, int *out)
{
    sqlite3_stmt *st;
    int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
    if (rc != SQLITE_OK)
        return rc;
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        *out = sqlite3_column_int(st, 0);
        rc = SQLITE_OK;
    }
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

/*
 * Runs every "-- version N" section with N > the current user_version, in
 * order, in one transaction, then sets user_version.
 */
static int
migrate(cache *c, const char *schema, di_error *err)
{
    int current = 0, latest = cache_schema_latest(schema);
    char *msg = NULL;
    if (sqlite3_exec(c->db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK)
        return db_error(c, err, DI_EIO, "cannot start the schema migration");
    if (pragma_int(c->db, "PRAGMA user_version", &current) != SQLITE_OK) {
        sqlite3_exec(c->db, "ROLLBACK", NULL, NULL, NULL);
        return db_error(c, err, DI_EIO, "cannot read the schema version");
    }
    if (current > latest) {
        sqlite3_exec(c->db, "ROLLBACK", NULL, NULL, NULL);
        return di_error_set(err, DI_EUNSUPPORTED,
                            "cache: database schema version %d is newer than this build's (%d)",
                            current, latest);
    }
    for (int v = current + 1; v <= latest; v++) {
        /* Find the section "-- version v" and cut it at the next marker. */
        char marker[32];
        const char *start = NULL, *p = schema;
        snprintf(marker, sizeof marker, "-- version %d", v);
        while ((p = strstr(p, marker)) != NULL) {
            char after = p[strlen(marker)];
            if ((p == schema || p[-1] == '\n') &&
                (after == '\n' || after == '\0' || after == '\r')) {
                start = p;
                break;
            }
            p++;
        }
        if (start == NULL)
            continue; /* versions need not be contiguous */
        const char *end = start + strlen(marker);
        const char *next = strstr(end, "\n-- version ");
        size_t n = next ? (size_t)(next - end) : strlen(end);
        char *section = di_strndup(end, n);
        if (section == NULL)
            di_oom();
        int rc = sqlite3_exec(c->db, section, NULL, NULL, &msg);
        di_free(section);
        if (rc != SQLITE_OK) {
            di_error_set(err, DI_EIO, "cache: schema version %d failed: %s", v,
                         msg ? msg : sqlite3_errstr(rc));
            sqlite3_free(msg);
            sqlite3_exec(c->db, "ROLLBACK", NULL, NULL, NULL);
            return DI_EIO;
        }
    }
    if (latest > current) {
        char sql[64];
        snprintf(sql, sizeof sql, "PRAGMA user_version = %d", latest);
        if (sqlite3_exec(c->db, sql, NULL, NULL, NULL) != SQLITE_OK) {
            sqlite3_exec(c->db, "ROLLBACK", NULL, NULL, NULL);
            return db_error(c, err, DI_EIO, "cannot set the schema version");
        }
    }
    if (sqlite3_exec(c->db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) {
        sqlite3_exec(c->db, "ROLLBACK", NULL, NULL, NULL);
        return db_error(c, err, DI_EIO, "cannot commit the schema migration");
    }
    return 0;
}

int
cache_open_schema(const char *path, int flags, const char *schema, cache **out, di_error *err)
{
    cache *c = di_xcalloc(1, sizeof *c);
    int oflags = SQLITE_OPEN_NOMUTEX;
    int rc, version = 0;
    *out = NULL;
    c->readonly = (flags & CACHE_READONLY) != 0;
    oflags |= c->readonly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;
    rc = sqlite3_open_v2(path, &c->db, oflags, NULL);
    if (rc != SQLITE_OK) {
        di_error_set(err, DI_EIO, "cache: cannot open '%s': %s", path,
                     c->db ? sqlite3_errmsg(c->db) : sqlite3_errstr(rc));
        cache_close(c);
        return DI_EIO;
    }
    sqlite3_busy_timeout(c->db, 5000);
    sqlite3_extended_result_codes(c->db, 1);
    sqlite3_create_function_v2(c->db, "distir_sha256", 1,
                               SQLITE_UTF8 | SQLITE_DETERMINISTIC | SQLITE_INNOCUOUS, NULL,
                               sql_sha256, NULL, NULL, NULL);
    if (!c->readonly) {
        char *msg = NULL;
        rc = sqlite3_exec(c->db,
                          "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; "
                          "PRAGMA journal_size_limit = 67108864;",
                          NULL, NULL, &msg);
        if (rc != SQLITE_OK) {
            int code = (sqlite3_errcode(c->db) & 0xff) == SQLITE_NOTADB ||
                               (sqlite3_errcode(c->db) & 0xff) == SQLITE_CORRUPT
                           ? DI_ECORRUPT
                           : DI_EIO;
            di_error_set(err, code, "cache: '%s' is not usable as a database: %s", path,
                         msg ? msg : sqlite3_errstr(rc));
            sqlite3_free(msg);
            cache_close(c);
            return code;
        }
        rc = migrate(c, schema, err);
        if (rc != 0) {
            di_error_prefix(err, "'%s'", path);
            cache_close(c);
            return rc;
        }
    }
    if (pragma_int(c->db, "PRAGMA user_version", &version) != SQLITE_OK) {
        db_error(c, err, DI_EIO, "cannot read the schema version");
        di_error_prefix(err, "'%s'", path);
        cache_close(c);
        return DI_EIO;
    }
    if (version != cache_schema_latest(schema)) {
        di_error_set(err, version > cache_schema_latest(schema) ? DI_EUNSUPPORTED : DI_EIO,
                     "cache: '%s' has schema version %d, this build needs %d", path, version,
                     cache_schema_latest(schema));
        cache_close(c);
        return err ? err->code : DI_EIO;
    }
    c->checksums = cache_schema_latest(schema) >= 4;
    for (int i = 0; i < NSTMT; i++) {
        const char *sql = !c->checksums && stmt_sql_v3[i] ? stmt_sql_v3[i] : stmt_sql[i];
        if (c->readonly && i != ST_GET && i != ST_HITS && i != ST_SEARCH_GET &&
            i != ST_SEARCH_HITS && i != ST_EVALS_GET)
            continue;
        if (i == ST_REPAIR && !c->checksums)
            continue;
        rc = sqlite3_prepare_v3(c->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &c->st[i], NULL);
        /*
         * A schema text older than version 3 (tests of migrations) has no
         * searches table: its statements stay NULL and the database stores
         * no searches (is_search_stmt).
         */
        if (rc != SQLITE_OK && is_search_stmt(i) && cache_schema_latest(schema) < 3) {
            c->st[i] = NULL;
            continue;
        }
        /* Nor, before version 6, a search_evals table: no simulations kept between searches. */
        if (rc != SQLITE_OK && is_evals_stmt(i) && cache_schema_latest(schema) < 6) {
            c->st[i] = NULL;
            continue;
        }
        if (rc != SQLITE_OK) {
            db_error(c, err, DI_EIO, "cannot prepare a statement");
            cache_close(c);
            return DI_EIO;
        }
    }
    {
        sqlite3_stmt *st;
        if (sqlite3_prepare_v2(c->db, "SELECT count(*) FROM results", -1, &st, NULL) == SQLITE_OK) {
            if (sqlite3_step(st) == SQLITE_ROW)
                c->count = (uint64_t)sqlite3_column_int64(st, 0);
            sqlite3_finalize(st);
        }
    }
    *out = c;
    return 0;
}

int
cache_open(const char *path, int flags, cache **out, di_error *err)
{
    return cache_open_schema(path, flags, cache_schema_sql, out, err);
}

void
cache_close(cache *c)
{
    if (c == NULL)
        return;
    release_active(c);
    if (c->db != NULL && !c->readonly) {
        cache_flush(c, NULL);
        sqlite3_wal_checkpoint_v2(c->db, NULL, SQLITE_CHECKPOINT_TRUNCATE, NULL, NULL);
    }
    for (int i = 0; i < NSTMT; i++)
        sqlite3_finalize(c->st[i]);
    if (c->db != NULL)
        sqlite3_close(c->db);
    di_free(c->hits);
    di_free(c);
}

int
cache_schema_version(cache *c)
{
    int v = -1;
    release_active(c);
    pragma_int(c->db, "PRAGMA user_version", &v);
    return v;
}

/*
 * Deletes the row of key from results or searches (writer only), after it
 * failed its checksum.
 */
static void
drop_row(cache *c, int search, const di_hash *key)
{
    sqlite3_stmt *st = c->st[search ? ST_SEARCH_DROP : ST_DROP];
    if (c->readonly || st == NULL)
        return;
    sqlite3_bind_blob(st, 1, key->b, sizeof key->b, SQLITE_STATIC);
    if (sqlite3_step(st) == SQLITE_DONE && !search && sqlite3_changes(c->db) > 0 && c->count > 0)
        c->count--;
    sqlite3_reset(st);
}

/* Whether column sum_col of st's row holds the SHA-256 of the len bytes at data. */
static int
sum_matches(sqlite3_stmt *st, int sum_col, const uint8_t *data, size_t len)
{
    di_hash sum;
    const void *want = sqlite3_column_blob(st, sum_col);
    di_sha256_once(data, len, &sum);
    return want != NULL && sqlite3_column_bytes(st, sum_col) == (int)sizeof sum.b &&
           memcmp(want, sum.b, sizeof sum.b) == 0;
}

/*
 * cache_get and cache_search_get: the statement `which` looks key up and the
 * blob is checked against its stored SHA-256.
 */
static int
get_blob(cache *c, int which, const di_hash *key, const uint8_t **data, size_t *len, di_error *err)
{
    sqlite3_stmt *st = c->st[which];
    int rc;
    release_active(c);
    if (st == NULL)
        return DI_ENOTFOUND; /* no searches table */
    sqlite3_bind_blob(st, 1, key->b, sizeof key->b, SQLITE_STATIC);
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        const void *p = sqlite3_column_blob(st, 0);
        *len = (size_t)sqlite3_column_bytes(st, 0);
        *data = p != NULL ? p : (const uint8_t *)"";
        if (c->checksums && sqlite3_column_type(st, 1) != SQLITE_NULL) {
            if (!sum_matches(st, 1, *data, *len)) {
                char hex[65];
                sqlite3_reset(st);
                c->corrupt++;
                drop_row(c, which == ST_SEARCH_GET, key);
                di_hash_hex(key, hex);
                return di_error_set(err, DI_ECORRUPT,
                                    "cache: the stored %s for key %s fails its checksum%s",
                                    which == ST_SEARCH_GET ? "search" : "result", hex,
                                    c->readonly ? "" : "; the row was dropped");
            }
        }
        c->active = st;
        return 0;
    }
    sqlite3_reset(st);
    if (rc == SQLITE_DONE)
        return DI_ENOTFOUND;
    return db_error(c, err, DI_EIO, "lookup failed");
}

int
cache_get(cache *c, const di_hash *key, const uint8_t **data, size_t *len, di_error *err)
{
    return get_blob(c, ST_GET, key, data, len, err);
}

int
cache_search_get(cache *c, const di_hash *key, const uint8_t **data, size_t *len, di_error *err)
{
    return get_blob(c, ST_SEARCH_GET, key, data, len, err);
}

static int
exec_stmt(cache *c, int which)
{
    int rc = sqlite3_step(c->st[which]);
    sqlite3_reset(c->st[which]);
    return rc;
}

/*
 * Makes room after a store failed with SQLITE_FULL (the size limit, or a full
 * disk: deleted rows' pages are reused by the next insert): deletes the least
 * recently used eighth of the results (at least 8 rows), or once no result is
 * left the 8 oldest searches' simulations (search_evals), then the 8 least
 * recently used stored searches. Pending hits are written first so that
 * recent ones count. Returns the number of rows deleted (0: nothing left).
 */
static uint64_t
evict(cache *c)
{
    uint64_t n = 0;
    cache_flush(c, NULL);
    for (int which = ST_EVICT; which <= ST_SEARCH_EVICT && n == 0; which++) {
        sqlite3_stmt *st = c->st[which];
        int64_t batch = which == ST_EVICT ? (int64_t)(c->count / 8) : 8;
        if (st == NULL)
            continue;
        if (exec_stmt(c, ST_BEGIN) != SQLITE_DONE)
            return 0;
        sqlite3_bind_int64(st, 1, batch < 8 ? 8 : batch);
        int rc = sqlite3_step(st);
        sqlite3_reset(st);
        if (rc != SQLITE_DONE) {
            exec_stmt(c, ST_ROLLBACK);
            return 0;
        }
        n = (uint64_t)sqlite3_changes(c->db);
        if (exec_stmt(c, ST_COMMIT) != SQLITE_DONE) {
            exec_stmt(c, ST_ROLLBACK);
            return 0;
        }
        if (which == ST_EVICT)
            c->count = n < c->count ? c->count - n : 0;
    }
    c->evicted += n;
    return n;
}

/* A store failed because the database or the disk is full. */
static int
is_full(cache *c)
{
    return (sqlite3_extended_errcode(c->db) & 0xff) == SQLITE_FULL;
}

/*
 * What a store writes: a result (simulator_version set), or a blob under a key
 * with its time and checksum through statement `which` (a search, a search's
 * kept simulations), `what` naming it in errors.
 */
typedef struct store_args {
    const di_hash *key;
    const uint8_t *data;
    size_t len;
    const char *simulator_version;
    double step_time_s;
    uint64_t peak_memory_bytes;
    int which;
    const char *what;
} store_args;

/* A failed write: rolled back, err says why, *full when for want of room. */
static int
write_failed(cache *c, const char *what, int *full, di_error *err)
{
    *full = is_full(c);
    db_error(c, err, DI_EIO, what);
    exec_stmt(c, ST_ROLLBACK);
    return DI_EIO;
}

static int
put_once(cache *c, const store_args *a, int *full, di_error *err)
{
    sqlite3_stmt *st = c->st[ST_PUT];
    di_hash sum;
    int rc;
    if (exec_stmt(c, ST_BEGIN) != SQLITE_DONE)
        return db_error(c, err, DI_EIO, "cannot begin a write");
    sqlite3_bind_blob(st, 1, a->key->b, sizeof a->key->b, SQLITE_STATIC);
    sqlite3_bind_blob64(st, 2, a->len ? a->data : (const uint8_t *)"", a->len, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, a->simulator_version, -1, SQLITE_STATIC);
    sqlite3_bind_double(st, 4, a->step_time_s);
    sqlite3_bind_int64(st, 5,
                       a->peak_memory_bytes > INT64_MAX ? INT64_MAX
                                                        : (sqlite3_int64)a->peak_memory_bytes);
    sqlite3_bind_double(st, 6, now_unix());
    if (c->checksums) {
        di_sha256_once(a->data, a->len, &sum);
        sqlite3_bind_blob(st, 7, sum.b, sizeof sum.b, SQLITE_STATIC);
    }
    rc = sqlite3_step(st);
    sqlite3_clear_bindings(st);
    sqlite3_reset(st);
    int added = rc == SQLITE_DONE && sqlite3_changes(c->db) > 0;
    if (rc == SQLITE_DONE && !added && c->checksums) {
        st = c->st[ST_REPAIR];
        sqlite3_bind_blob(st, 1, a->key->b, sizeof a->key->b, SQLITE_STATIC);
        sqlite3_bind_blob64(st, 2, a->len ? a->data : (const uint8_t *)"", a->len,
                            SQLITE_STATIC);
        sqlite3_bind_blob(st, 3, sum.b, sizeof sum.b, SQLITE_STATIC);
        rc = sqlite3_step(st);
        sqlite3_clear_bindings(st);
        sqlite3_reset(st);
    }
    if (rc != SQLITE_DONE)
        return write_failed(c, "cannot store a result", full, err);
    if (exec_stmt(c, ST_COMMIT) != SQLITE_DONE)
        return write_failed(c, "cannot commit a result", full, err);
    c->count += (uint64_t)added;
    return 0;
}

/* A blob row (ST_SEARCH_PUT, ST_EVALS_PUT): key, blob, time, checksum (from version 4). */
static int
blob_put_once(cache *c, const store_args *a, int *full, di_error *err)
{
    sqlite3_stmt *st = c->st[a->which];
    char what[64];
    int rc;
    if (exec_stmt(c, ST_BEGIN) != SQLITE_DONE)
        return db_error(c, err, DI_EIO, "cannot begin a write");
    sqlite3_bind_blob(st, 1, a->key->b, sizeof a->key->b, SQLITE_STATIC);
    sqlite3_bind_blob64(st, 2, a->len ? a->data : (const uint8_t *)"", a->len, SQLITE_STATIC);
    sqlite3_bind_double(st, 3, now_unix());
    if (c->checksums) {
        di_hash sum;
        di_sha256_once(a->data, a->len, &sum);
        sqlite3_bind_blob(st, 4, sum.b, sizeof sum.b, SQLITE_TRANSIENT);
    }
    rc = sqlite3_step(st);
    sqlite3_clear_bindings(st);
    sqlite3_reset(st);
    if (rc != SQLITE_DONE) {
        snprintf(what, sizeof what, "cannot store %s", a->what);
        return write_failed(c, what, full, err);
    }
    if (exec_stmt(c, ST_COMMIT) != SQLITE_DONE) {
        snprintf(what, sizeof what, "cannot commit %s", a->what);
        return write_failed(c, what, full, err);
    }
    return 0;
}

/*
 * One store, and when the database or the disk is full, least recently
 * used rows evicted and the store tried again (8 rounds at most).
 */
static int
store(cache *c, int (*once)(cache *, const store_args *, int *, di_error *), const store_args *a,
      di_error *err)
{
    if (c->readonly)
        return di_error_set(err, DI_EINVAL, "cache: put on a read-only connection");
    for (int round = 0;; round++) {
        int full = 0, rc;
        release_active(c);
        rc = once(c, a, &full, err);
        if (rc != DI_EIO || !full || round == 8 || evict(c) == 0)
            return rc;
        di_error_clear(err);
    }
}

int
cache_put(cache *c, const di_hash *key, const uint8_t *data, size_t len,
          const char *simulator_version, double step_time_s, uint64_t peak_memory_bytes,
          di_error *err)
{
    store_args a = {key, data, len, simulator_version, step_time_s, peak_memory_bytes, ST_PUT,
                    "a result"};
    return store(c, put_once, &a, err);
}

/* Stores data under key with statement `which` (blob_put_once) if the schema has its table. */
static int
blob_put(cache *c, const di_hash *key, const uint8_t *data, size_t len, int which,
         const char *what, const char *table, di_error *err)
{
    store_args a = {key, data, len, NULL, 0, 0, which, what};
    if (!c->readonly && c->st[which] == NULL)
        return di_error_set(err, DI_EUNSUPPORTED, "cache: the schema has no %s table", table);
    return store(c, blob_put_once, &a, err);
}

int
cache_evals_put(cache *c, const di_hash *space, const uint8_t *data, size_t len, di_error *err)
{
    return blob_put(c, space, data, len, ST_EVALS_PUT, "a search's simulations", "search_evals",
                    err);
}

int
cache_evals_each(cache *c, const di_hash *space,
                 int (*fn)(void *ctx, const uint8_t *data, size_t len), void *ctx,
                 uint32_t *nrows, di_error *err)
{
    sqlite3_stmt *st = c->st[ST_EVALS_GET];
    int rc;
    *nrows = 0;
    release_active(c);
    if (st == NULL)
        return 0; /* no search_evals table */
    sqlite3_bind_blob(st, 1, space->b, sizeof space->b, SQLITE_STATIC);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        const uint8_t *data = sqlite3_column_blob(st, 0);
        size_t len = (size_t)sqlite3_column_bytes(st, 0);
        if (data == NULL)
            data = (const uint8_t *)"";
        if (!sum_matches(st, 1, data, len) || fn(ctx, data, len) != 0) {
            /* A row gone bad: skipped (those simulations are simply run again). */
            c->corrupt++;
            continue;
        }
        (*nrows)++;
    }
    sqlite3_reset(st);
    if (rc != SQLITE_DONE)
        return db_error(c, err, DI_EIO, "cannot read a search's simulations");
    return 0;
}

int
cache_search_put(cache *c, const di_hash *key, const uint8_t *data, size_t len, di_error *err)
{
    return blob_put(c, key, data, len, ST_SEARCH_PUT, "a search", "searches", err);
}

static void
note_hit(cache *c, const di_hash *key, int search)
{
    if (c->readonly)
        return;
    DI_GROW(&c->hits, &c->chit, c->nhit + 1);
    c->hits[c->nhit].key = *key;
    c->hits[c->nhit].search = search;
    c->hits[c->nhit].time = now_unix();
    c->nhit++;
}

void
cache_note_hit(cache *c, const di_hash *key)
{
    note_hit(c, key, 0);
}

void
cache_search_note_hit(cache *c, const di_hash *key)
{
    note_hit(c, key, 1);
}

/* By table, then by key: equal keys of one table are adjacent. */
static int
hit_cmp(const void *a, const void *b)
{
    const cache_hit *x = a, *y = b;
    if (x->search != y->search)
        return x->search - y->search;
    return memcmp(x->key.b, y->key.b, 32);
}

static int
same_hit(const cache_hit *a, const cache_hit *b)
{
    return a->search == b->search && memcmp(a->key.b, b->key.b, 32) == 0;
}

int
cache_set_limit(cache *c, uint64_t bytes, di_error *err)
{
    int page = 0, got = 0;
    char sql[96];
    if (c->readonly)
        return 0;
    if (pragma_int(c->db, "PRAGMA page_size", &page) != SQLITE_OK || page <= 0)
        return db_error(c, err, DI_EIO, "cannot read the page size");
    snprintf(sql, sizeof sql, "PRAGMA max_page_count = %llu",
             (unsigned long long)(bytes / (uint64_t)page ? bytes / (uint64_t)page : 1));
    if (pragma_int(c->db, sql, &got) != SQLITE_OK)
        return db_error(c, err, DI_EIO, "cannot set the size limit");
    return 0;
}

int
cache_flush(cache *c, di_error *err)
{
    if (c->readonly || c->nhit == 0)
        return 0;
    release_active(c);
    qsort(c->hits, c->nhit, sizeof c->hits[0], hit_cmp);
    if (exec_stmt(c, ST_BEGIN) != SQLITE_DONE)
        return db_error(c, err, DI_EIO, "cannot begin writing hits");
    for (size_t i = 0; i < c->nhit;) {
        size_t j = i;
        double last = 0;
        sqlite3_stmt *st = c->st[c->hits[i].search ? ST_SEARCH_HIT : ST_HIT];
        while (j < c->nhit && same_hit(&c->hits[j], &c->hits[i])) {
            if (c->hits[j].time > last)
                last = c->hits[j].time;
            j++;
        }
        if (st == NULL) { /* no searches table */
            i = j;
            continue;
        }
        sqlite3_bind_blob(st, 1, c->hits[i].key.b, 32, SQLITE_STATIC);
        sqlite3_bind_int64(st, 2, (sqlite3_int64)(j - i));
        sqlite3_bind_double(st, 3, last);
        int rc = sqlite3_step(st);
        sqlite3_reset(st);
        if (rc != SQLITE_DONE) {
            db_error(c, err, DI_EIO, "cannot record hits");
            exec_stmt(c, ST_ROLLBACK);
            return DI_EIO;
        }
        i = j;
    }
    if (exec_stmt(c, ST_COMMIT) != SQLITE_DONE) {
        db_error(c, err, DI_EIO, "cannot commit hits");
        exec_stmt(c, ST_ROLLBACK);
        return DI_EIO;
    }
    c->nhit = 0;
    return 0;
}

int
cache_checkpoint(cache *c, di_error *err)
{
    if (c->readonly)
        return 0;
    release_active(c);
    int rc = sqlite3_wal_checkpoint_v2(c->db, NULL, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
    if (rc != SQLITE_OK && rc != SQLITE_BUSY)
        return db_error(c, err, DI_EIO, "checkpoint failed");
    return 0;
}

uint64_t
cache_count(cache *c)
{
    return c->count;
}

uint64_t
cache_corrupt_count(cache *c)
{
    return c->corrupt;
}

uint64_t
cache_evicted_count(cache *c)
{
    return c->evicted;
}

sqlite3 *
cache_sqlite(cache *c)
{
    release_active(c);
    return c->db;
}

int
cache_writable(const cache *c)
{
    return !c->readonly;
}

/* cache_hits and cache_search_hits. */
static int64_t
stored_hits(cache *c, const di_hash *key, int search)
{
    sqlite3_stmt *st = c->st[search ? ST_SEARCH_HITS : ST_HITS];
    int64_t n = -1;
    release_active(c);
    if (st == NULL)
        return -1; /* no searches table */
    sqlite3_bind_blob(st, 1, key->b, 32, SQLITE_STATIC);
    if (sqlite3_step(st) == SQLITE_ROW)
        n = sqlite3_column_int64(st, 0);
    sqlite3_reset(st);
    if (n >= 0)
        for (size_t i = 0; i < c->nhit; i++)
            if (c->hits[i].search == search && memcmp(c->hits[i].key.b, key->b, 32) == 0)
                n++;
    return n;
}

int64_t
cache_hits(cache *c, const di_hash *key)
{
    return stored_hits(c, key, 0);
}

int64_t
cache_search_hits(cache *c, const di_hash *key)
{
    return stored_hits(c, key, 1);
}

/* Runs an integrity pragma: 0 when it says "ok", DI_ECORRUPT with its first lines otherwise. */
static int
check_pragma(cache *c, const char *sql, di_error *err)
{
    sqlite3_stmt *st;
    di_buf report;
    int ok = 0, rows = 0;
    release_active(c);
    if (sqlite3_prepare_v2(c->db, sql, -1, &st, NULL) != SQLITE_OK)
        return db_error(c, err, DI_EIO, "cannot run the integrity check");
    di_buf_init(&report);
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *line = (const char *)sqlite3_column_text(st, 0);
        if (rows++ == 0 && line != NULL && strcmp(line, "ok") == 0)
            ok = 1;
        if (rows > 1)
            di_buf_puts(&report, "; ");
        di_buf_puts(&report, line ? line : "?");
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) {
        int corrupt = (rc & 0xff) == SQLITE_CORRUPT || (rc & 0xff) == SQLITE_NOTADB;
        di_buf_fini(&report);
        return db_error(c, err, corrupt ? DI_ECORRUPT : DI_EIO, "integrity check failed");
    }
    if (!ok || rows != 1) {
        di_error_set(err, DI_ECORRUPT, "cache: integrity check: %s",
                     report.data ? report.data : "");
        di_buf_fini(&report);
        return DI_ECORRUPT;
    }
    di_buf_fini(&report);
    return 0;
}

int
cache_check(cache *c, di_error *err)
{
    return check_pragma(c, "PRAGMA integrity_check(8)", err);
}

int
cache_quick_check(cache *c, di_error *err)
{
    return check_pragma(c, "PRAGMA quick_check(8)", err);
}

int
cache_set_aside(const char *path, char *moved, size_t size, di_error *err)
{
    static const char *const suffix[] = {"", "-wal", "-shm"};
    char from[4096], to[4096];
    struct stat sb;
    long long t = (long long)time(NULL);
    /* path.damaged-<unix seconds>[.N]: never over an earlier one */
    for (int n = 0;; n++) {
        if (n == 0)
            snprintf(moved, size, "%s.damaged-%lld", path, t);
        else
            snprintf(moved, size, "%s.damaged-%lld.%d", path, t, n);
        if (stat(moved, &sb) != 0 && errno == ENOENT)
            break;
        if (n == 1000)
            return di_error_set(err, DI_EIO, "cache: no free name to set '%s' aside", path);
    }
    for (int i = 0; i < 3; i++) {
        snprintf(from, sizeof from, "%s%s", path, suffix[i]);
        snprintf(to, sizeof to, "%s%s", moved, suffix[i]);
        if (rename(from, to) != 0 && !(i > 0 && errno == ENOENT))
            return di_error_set(err, DI_EIO, "cache: cannot move '%s' to '%s': %s", from, to,
                                strerror(errno));
    }
    return 0;
}
