/*
 * test_server_cache.c: distird's SQLite cache (server/cache.c) on real
 * temporary files: put and get, persistence across close and reopen, hit
 * counting, stored searches (their own table and hits), read-only worker
 * connections, schema migrations by user_version (an old database is
 * upgraded with its rows intact, a newer one is refused), files that are not databases, and the
 * integrity check.
 */
/* cmocka needs these four first, in this order. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../server/cache.h"

typedef struct fixture {
    char dir[64];
    char path[128];
} fixture;

static int
setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    snprintf(f->dir, sizeof f->dir, "/tmp/distird-cache-XXXXXX");
    if (mkdtemp(f->dir) == NULL)
        return -1;
    snprintf(f->path, sizeof f->path, "%s/cache.db", f->dir);
    *state = f;
    return 0;
}

static int
teardown(void **state)
{
    fixture *f = *state;
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", f->dir);
    if (system(cmd) != 0)
        return -1;
    free(f);
    return 0;
}

static di_hash
key_of(int i)
{
    di_hash h;
    char s[32];
    snprintf(s, sizeof s, "key-%d", i);
    di_sha256_once(s, strlen(s), &h);
    return h;
}

static cache *
open_ok(const char *path, int flags)
{
    cache *c = NULL;
    di_error err;
    di_error_clear(&err);
    if (cache_open(path, flags, &c, &err) != 0)
        fail_msg("cache_open %s: %s", path, err.msg);
    return c;
}

static void
put_ok(cache *c, int i, const char *value)
{
    di_hash k = key_of(i);
    di_error err;
    di_error_clear(&err);
    if (cache_put(c, &k, (const uint8_t *)value, strlen(value), "sim-test", 0.5 + i,
                  1000u + (unsigned)i, &err) != 0)
        fail_msg("cache_put: %s", err.msg);
}

static void
assert_get(cache *c, int i, const char *expect)
{
    di_hash k = key_of(i);
    const uint8_t *data;
    size_t len;
    int rc = cache_get(c, &k, &data, &len, NULL);
    if (expect == NULL) {
        assert_int_equal(rc, DI_ENOTFOUND);
        return;
    }
    assert_int_equal(rc, 0);
    assert_int_equal(len, strlen(expect));
    assert_memory_equal(data, expect, len);
}

static void
test_put_get(void **state)
{
    fixture *f = *state;
    cache *c = open_ok(f->path, 0);
    assert_int_equal(cache_count(c), 0);
    assert_get(c, 1, NULL);
    put_ok(c, 1, "one");
    put_ok(c, 2, "two");
    assert_get(c, 1, "one");
    assert_get(c, 2, "two");
    assert_get(c, 3, NULL);
    assert_int_equal(cache_count(c), 2);
    /* Results are deterministic: a second put of a key keeps the first value. */
    put_ok(c, 1, "other");
    assert_get(c, 1, "one");
    assert_int_equal(cache_count(c), 2);
    /* A binary value with NUL bytes round-trips; so does an empty one. */
    {
        di_hash k = key_of(9);
        const uint8_t bin[] = {0, 1, 0, 255, 0};
        const uint8_t *data;
        size_t len;
        assert_int_equal(cache_put(c, &k, bin, sizeof bin, "v", 1, 2, NULL), 0);
        assert_int_equal(cache_get(c, &k, &data, &len, NULL), 0);
        assert_int_equal(len, sizeof bin);
        assert_memory_equal(data, bin, sizeof bin);
        k = key_of(10);
        assert_int_equal(cache_put(c, &k, NULL, 0, "v", 1, 2, NULL), 0);
        assert_int_equal(cache_get(c, &k, &data, &len, NULL), 0);
        assert_int_equal(len, 0);
    }
    cache_close(c);
}

static void
test_restart_persistence(void **state)
{
    fixture *f = *state;
    cache *c = open_ok(f->path, 0);
    for (int i = 0; i < 50; i++) {
        char v[32];
        snprintf(v, sizeof v, "value %d", i);
        put_ok(c, i, v);
    }
    cache_close(c);
    /* Closing checkpoints the WAL into the database and removes it. */
    char wal[160];
    snprintf(wal, sizeof wal, "%s-wal", f->path);
    assert_int_not_equal(access(wal, F_OK), 0);
    c = open_ok(f->path, 0);
    assert_int_equal(cache_count(c), 50);
    for (int i = 0; i < 50; i++) {
        char v[32];
        snprintf(v, sizeof v, "value %d", i);
        assert_get(c, i, v);
    }
    assert_int_equal(cache_check(c, NULL), 0);
    cache_close(c);
}

static void
test_indexed_columns(void **state)
{
    fixture *f = *state;
    cache *c = open_ok(f->path, 0);
    put_ok(c, 7, "seven");
    cache_close(c);
    sqlite3 *db;
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_open(f->path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(db,
                                        "SELECT step_time_s, peak_memory_bytes, simulator_version,"
                                        " hits, last_hit IS NULL, created > 1.6e9 FROM results",
                                        -1, &st, NULL),
                     SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_true(sqlite3_column_double(st, 0) == 7.5);
    assert_int_equal(sqlite3_column_int64(st, 1), 1007);
    assert_string_equal((const char *)sqlite3_column_text(st, 2), "sim-test");
    assert_int_equal(sqlite3_column_int(st, 3), 0);
    assert_int_equal(sqlite3_column_int(st, 4), 1);
    assert_int_equal(sqlite3_column_int(st, 5), 1);
    sqlite3_finalize(st);
    /* WAL mode persists in the file. */
    assert_int_equal(sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_string_equal((const char *)sqlite3_column_text(st, 0), "wal");
    sqlite3_finalize(st);
    sqlite3_close(db);
}

static void
test_hits(void **state)
{
    fixture *f = *state;
    cache *c = open_ok(f->path, 0);
    di_hash k1 = key_of(1), k2 = key_of(2), k3 = key_of(3);
    put_ok(c, 1, "one");
    put_ok(c, 2, "two");
    for (int i = 0; i < 5; i++)
        cache_note_hit(c, &k1);
    cache_note_hit(c, &k2);
    cache_note_hit(c, &k3); /* absent: ignored */
    assert_int_equal(cache_hits(c, &k1), 5);
    assert_int_equal(cache_flush(c, NULL), 0);
    assert_int_equal(cache_hits(c, &k1), 5);
    assert_int_equal(cache_hits(c, &k2), 1);
    assert_int_equal(cache_hits(c, &k3), -1);
    cache_note_hit(c, &k2);
    cache_close(c); /* writes the pending hit */
    c = open_ok(f->path, 0);
    assert_int_equal(cache_hits(c, &k1), 5);
    assert_int_equal(cache_hits(c, &k2), 2);
    cache_close(c);
}

static char *schema_upto(int version);

/* Fetches the stored search of key i into a string (NULL when absent); the caller frees it. */
static char *
search_get(cache *c, int i)
{
    di_hash k = key_of(i);
    const uint8_t *data;
    size_t len;
    int rc = cache_search_get(c, &k, &data, &len, NULL);
    if (rc == DI_ENOTFOUND)
        return NULL;
    assert_int_equal(rc, 0);
    return strndup((const char *)data, len);
}

static void
search_put_ok(cache *c, int i, const char *value)
{
    di_hash k = key_of(i);
    di_error err;
    di_error_clear(&err);
    if (cache_search_put(c, &k, (const uint8_t *)value, strlen(value), &err) != 0)
        fail_msg("cache_search_put: %s", err.msg);
}

static void
assert_search(cache *c, int i, const char *expect)
{
    char *got = search_get(c, i);
    if (expect == NULL)
        assert_null(got);
    else
        assert_string_equal(got, expect);
    free(got);
}

/*
 * Stored searches: their own table (a result under the same key is another
 * row), a put replaces (the daemon stores only after a miss), hits are
 * counted per table, rows survive a reopen, and workers read them.
 */
static void
test_searches(void **state)
{
    fixture *f = *state;
    cache *c = open_ok(f->path, 0);
    di_hash k1 = key_of(1), k2 = key_of(2);
    di_error err;
    assert_search(c, 1, NULL);
    assert_int_equal(cache_search_hits(c, &k1), -1);
    search_put_ok(c, 1, "search one");
    put_ok(c, 1, "result one");
    assert_search(c, 1, "search one");
    assert_get(c, 1, "result one");
    assert_search(c, 2, NULL);
    assert_int_equal(cache_count(c), 1); /* results only */
    search_put_ok(c, 1, "search one again");
    assert_search(c, 1, "search one again");
    search_put_ok(c, 2, "");
    assert_search(c, 2, "");
    /* Hits: per table, pending until the flush, kept across a reopen. */
    cache_search_note_hit(c, &k1);
    cache_search_note_hit(c, &k1);
    cache_note_hit(c, &k1);
    assert_int_equal(cache_search_hits(c, &k1), 2);
    assert_int_equal(cache_hits(c, &k1), 1);
    assert_int_equal(cache_search_hits(c, &k2), 0);
    assert_int_equal(cache_flush(c, NULL), 0);
    assert_int_equal(cache_search_hits(c, &k1), 2);
    assert_int_equal(cache_hits(c, &k1), 1);
    cache_search_note_hit(c, &k2);
    cache_close(c);
    c = open_ok(f->path, 0);
    cache *r = open_ok(f->path, CACHE_READONLY);
    assert_search(c, 1, "search one again");
    assert_search(r, 1, "search one again");
    assert_search(r, 3, NULL);
    assert_int_equal(cache_search_hits(c, &k1), 2);
    assert_int_equal(cache_search_hits(r, &k2), 1);
    di_error_clear(&err);
    assert_int_not_equal(cache_search_put(r, &k1, (const uint8_t *)"x", 1, &err), 0);
    assert_non_null(strstr(err.msg, "read-only"));
    cache_close(r);
    cache_close(c);
}

/* A version-2 database is upgraded to the searches table with its results intact. */
static void
test_migration_searches(void **state)
{
    fixture *f = *state;
    char *v2 = schema_upto(2);
    cache *c = NULL;
    di_error err;
    di_error_clear(&err);
    assert_int_equal(cache_schema_latest(v2), 2);
    assert_int_equal(cache_open_schema(f->path, 0, v2, &c, &err), 0);
    put_ok(c, 1, "from version 2");
    /* That schema has no searches table: nothing is found, a put fails. */
    assert_search(c, 1, NULL);
    di_hash k = key_of(1);
    assert_int_equal(cache_search_put(c, &k, (const uint8_t *)"x", 1, &err), DI_EUNSUPPORTED);
    cache_close(c);
    c = open_ok(f->path, 0);
    assert_true(cache_schema_version(c) >= 3);
    assert_get(c, 1, "from version 2");
    search_put_ok(c, 1, "stored search");
    assert_search(c, 1, "stored search");
    cache_close(c);
    free(v2);
}

static void
test_readonly(void **state)
{
    fixture *f = *state;
    cache *w = open_ok(f->path, 0);
    cache *r = open_ok(f->path, CACHE_READONLY);
    di_hash k = key_of(4);
    di_error err;
    assert_get(r, 4, NULL);
    put_ok(w, 4, "four");
    /* The reader sees the writer's committed row (WAL: no blocking). */
    assert_get(r, 4, "four");
    di_error_clear(&err);
    assert_int_not_equal(cache_put(r, &k, (const uint8_t *)"x", 1, "v", 0, 0, &err), 0);
    assert_non_null(strstr(err.msg, "read-only"));
    cache_close(r);
    cache_close(w);
    /* A read-only open of a missing file fails instead of creating it. */
    char missing[160];
    cache *c = NULL;
    snprintf(missing, sizeof missing, "%s/missing.db", f->dir);
    assert_int_equal(cache_open(missing, CACHE_READONLY, &c, &err), DI_EIO);
    assert_null(c);
    assert_int_not_equal(access(missing, F_OK), 0);
}

/* The real schema's first section only: a database written by an older build. */
static char *
schema_upto(int version)
{
    char marker[32];
    snprintf(marker, sizeof marker, "\n-- version %d", version + 1);
    const char *end = strstr(cache_schema_sql, marker);
    size_t n = end ? (size_t)(end - cache_schema_sql) : strlen(cache_schema_sql);
    return strndup(cache_schema_sql, n);
}

static void
test_migration(void **state)
{
    fixture *f = *state;
    int latest = cache_schema_latest(cache_schema_sql);
    assert_true(latest >= 2);
    char *v1 = schema_upto(1);
    assert_int_equal(cache_schema_latest(v1), 1);
    cache *c = NULL;
    di_error err;
    di_error_clear(&err);
    assert_int_equal(cache_open_schema(f->path, 0, v1, &c, &err), 0);
    assert_int_equal(cache_schema_version(c), 1);
    put_ok(c, 1, "from version 1");
    cache_close(c);
    /* The current build upgrades it in place and keeps the row. */
    c = open_ok(f->path, 0);
    assert_int_equal(cache_schema_version(c), latest);
    assert_get(c, 1, "from version 1");
    assert_int_equal(cache_count(c), 1);
    cache_close(c);
    sqlite3 *db;
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_open(f->path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(db,
                                        "SELECT count(*) FROM sqlite_schema WHERE name IN "
                                        "('meta', 'results_last_hit')",
                                        -1, &st, NULL),
                     SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_int_equal(sqlite3_column_int(st, 0), 2);
    sqlite3_finalize(st);
    /* A newer database than this build knows is refused, and left alone. */
    assert_int_equal(sqlite3_exec(db, "PRAGMA user_version = 99", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    c = NULL;
    di_error_clear(&err);
    assert_int_equal(cache_open(f->path, 0, &c, &err), DI_EUNSUPPORTED);
    assert_null(c);
    assert_non_null(strstr(err.msg, "99"));
    /* An old build (schema v1) refuses the current database the same way. */
    assert_int_equal(sqlite3_open(f->path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "PRAGMA user_version = 2", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    assert_int_equal(cache_open_schema(f->path, 0, v1, &c, &err), DI_EUNSUPPORTED);
    free(v1);
}

static void
test_failed_migration_rolls_back(void **state)
{
    fixture *f = *state;
    char *v1 = schema_upto(1);
    cache *c = NULL;
    di_error err;
    assert_int_equal(cache_open_schema(f->path, 0, v1, &c, &err), 0);
    put_ok(c, 1, "kept");
    cache_close(c);
    /* Version 2 of this schema fails half-way: nothing of it may stay. */
    size_t n = strlen(v1) + 200;
    char *bad = malloc(n);
    snprintf(bad, n, "%s\n-- version 2\nCREATE TABLE extra (x);\nTHIS IS NOT SQL;\n", v1);
    di_error_clear(&err);
    assert_int_equal(cache_open_schema(f->path, 0, bad, &c, &err), DI_EIO);
    assert_non_null(strstr(err.msg, "version 2"));
    free(bad);
    assert_int_equal(cache_open_schema(f->path, 0, v1, &c, &err), 0);
    assert_int_equal(cache_schema_version(c), 1);
    assert_get(c, 1, "kept");
    cache_close(c);
    sqlite3 *db;
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_open(f->path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(db,
                                        "SELECT count(*) FROM sqlite_schema WHERE name = 'extra'",
                                        -1, &st, NULL),
                     SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_int_equal(sqlite3_column_int(st, 0), 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    free(v1);
}

static void
test_not_a_database(void **state)
{
    fixture *f = *state;
    FILE *fp = fopen(f->path, "wb");
    assert_non_null(fp);
    for (int i = 0; i < 4096; i++)
        fputc("garbage!"[i % 8], fp);
    fclose(fp);
    cache *c = NULL;
    di_error err;
    di_error_clear(&err);
    assert_int_equal(cache_open(f->path, 0, &c, &err), DI_ECORRUPT);
    assert_null(c);
    assert_non_null(strstr(err.msg, f->path));
    /* Set aside: the name is reported, the file moved, a fresh database opens at path. */
    char moved[4200];
    assert_int_equal(cache_set_aside(f->path, moved, sizeof moved, &err), 0);
    assert_non_null(strstr(moved, ".damaged-"));
    fp = fopen(moved, "rb");
    assert_non_null(fp);
    assert_int_equal(fgetc(fp), 'g');
    fclose(fp);
    c = open_ok(f->path, 0);
    assert_int_equal(cache_quick_check(c, NULL), 0);
    cache_close(c);
    unlink(moved); /* in f->dir anyway */
}

static void
test_integrity(void **state)
{
    fixture *f = *state;
    cache *c = open_ok(f->path, 0);
    for (int i = 0; i < 200; i++)
        put_ok(c, i, "some result bytes that fill pages a little faster than short ones do");
    assert_int_equal(cache_check(c, NULL), 0);
    cache_close(c);
    /* Damage an index page behind SQLite's back: the check must notice. */
    sqlite3 *db;
    assert_int_equal(sqlite3_open(f->path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db,
                                  "PRAGMA writable_schema = ON; "
                                  "UPDATE sqlite_schema SET sql = replace(sql, 'step_time_s',"
                                  " 'peak_memory_bytes') WHERE name = 'results_step_time';",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(db);
    c = open_ok(f->path, 0);
    di_error err;
    di_error_clear(&err);
    assert_int_equal(cache_check(c, &err), DI_ECORRUPT);
    assert_non_null(strstr(err.msg, "integrity"));
    cache_close(c);
}

static void
test_schema_text(void **state)
{
    (void)state;
    assert_int_equal(cache_schema_latest(""), 0);
    assert_int_equal(cache_schema_latest("-- version 1\nX;\n-- version 3\nY;\n"), 3);
    /* "-- version N" inside a comment line is not a marker. */
    assert_int_equal(cache_schema_latest("-- see \"-- version 9\" below\n-- version 2\n"), 2);
    assert_non_null(strstr(cache_schema_sql, "CREATE TABLE results"));
}

/* Changes one byte of a stored value behind the cache's back (another connection). */
static void
flip_byte(const char *path, const char *table, int i)
{
    sqlite3 *db;
    sqlite3_stmt *st;
    di_hash k = key_of(i);
    char sql[160];
    snprintf(sql, sizeof sql,
             "UPDATE %s SET result = CAST(substr(result, 1, 1) || 'X' || substr(result, 3) "
             "AS BLOB) WHERE key = ?1",
             table);
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
    sqlite3_bind_blob(st, 1, k.b, 32, SQLITE_STATIC);
    assert_int_equal(sqlite3_step(st), SQLITE_DONE);
    assert_int_equal(sqlite3_changes(db), 1);
    sqlite3_finalize(st);
    sqlite3_close(db);
}

/* A value changed in place is detected on read, not served; the writer drops it; a put repairs it. */
static void
test_checksum(void **state)
{
    fixture *f = *state;
    cache *c = open_ok(f->path, 0);
    const uint8_t *data;
    size_t len;
    di_error err;
    put_ok(c, 1, "result one");
    put_ok(c, 2, "result two");
    search_put_ok(c, 1, "search one");
    flip_byte(f->path, "results", 1);
    flip_byte(f->path, "searches", 1);
    /* A worker's read-only connection reports it and leaves the row to the writer. */
    cache *r = open_ok(f->path, CACHE_READONLY);
    di_hash k1 = key_of(1);
    di_error_clear(&err);
    assert_int_equal(cache_get(r, &k1, &data, &len, &err), DI_ECORRUPT);
    assert_non_null(strstr(err.msg, "checksum"));
    assert_int_equal(cache_corrupt_count(r), 1);
    /* A put of the same key (the worker's recomputed result) replaces the bad row... */
    put_ok(c, 1, "result one");
    assert_get(r, 1, "result one");
    assert_int_equal(cache_count(c), 2);
    /* ...while a good row is still kept as it is (results are deterministic). */
    put_ok(c, 2, "other");
    assert_get(c, 2, "result two");
    /* The writer drops a bad row on read: the next lookup is a miss. */
    flip_byte(f->path, "results", 2);
    assert_get(c, 1, "result one");
    di_hash k2 = key_of(2);
    assert_int_equal(cache_get(c, &k2, &data, &len, NULL), DI_ECORRUPT);
    assert_int_equal(cache_get(c, &k2, &data, &len, NULL), DI_ENOTFOUND);
    assert_int_equal(cache_count(c), 1);
    /* Searches likewise. */
    di_error_clear(&err);
    assert_int_equal(cache_search_get(c, &k1, &data, &len, &err), DI_ECORRUPT);
    assert_non_null(strstr(err.msg, "search"));
    assert_search(c, 1, NULL);
    assert_int_equal(cache_corrupt_count(c), 2);
    cache_close(r);
    cache_close(c);
}

/* Collects the rows cache_evals_each passes; refuses a row that starts with 'R'. */
typedef struct rows {
    char text[8][16];
    int n;
} rows;

static int
collect_row(void *ctx, const uint8_t *data, size_t len)
{
    rows *r = ctx;
    if (len > 0 && data[0] == 'R')
        return 1;
    if (r->n < 8 && len < sizeof r->text[0]) {
        memcpy(r->text[r->n], data, len);
        r->text[r->n][len] = 0;
    }
    r->n++;
    return 0;
}

/*
 * Kept simulations (search_evals): rows of a space oldest first, from the
 * writer and a reader; a row whose bytes change, or that the caller
 * refuses, is skipped and counted corrupt; a reader cannot put.
 */
static void
test_evals(void **state)
{
    fixture *f = *state;
    cache *c = open_ok(f->path, 0);
    di_hash s1 = key_of(1), s2 = key_of(2);
    di_error err;
    uint32_t n = 99;
    rows got;
    di_error_clear(&err);
    memset(&got, 0, sizeof got);
    assert_int_equal(cache_evals_each(c, &s1, collect_row, &got, &n, &err), 0);
    assert_int_equal(n, 0);
    assert_int_equal(cache_evals_put(c, &s1, (const uint8_t *)"first", 5, &err), 0);
    assert_int_equal(cache_evals_put(c, &s2, (const uint8_t *)"other", 5, &err), 0);
    assert_int_equal(cache_evals_put(c, &s1, (const uint8_t *)"second", 6, &err), 0);
    assert_int_equal(cache_evals_put(c, &s1, (const uint8_t *)"Refused", 7, &err), 0);
    cache *r = open_ok(f->path, CACHE_READONLY);
    assert_int_equal(cache_evals_each(r, &s1, collect_row, &got, &n, &err), 0);
    assert_int_equal(n, 2);
    assert_int_equal(got.n, 2);
    assert_string_equal(got.text[0], "first");
    assert_string_equal(got.text[1], "second");
    assert_int_equal(cache_corrupt_count(r), 1); /* the refused row */
    assert_int_not_equal(cache_evals_put(r, &s1, (const uint8_t *)"x", 1, &err), 0);
    /* A changed byte fails the checksum: skipped. */
    {
        sqlite3 *db;
        assert_int_equal(sqlite3_open(f->path, &db), SQLITE_OK);
        assert_int_equal(sqlite3_exec(db,
                                      "UPDATE search_evals SET entries = CAST('fiRst' AS BLOB) "
                                      "WHERE CAST(entries AS TEXT) = 'first'",
                                      NULL, NULL, NULL),
                         SQLITE_OK);
        sqlite3_close(db);
    }
    memset(&got, 0, sizeof got);
    assert_int_equal(cache_evals_each(c, &s1, collect_row, &got, &n, &err), 0);
    assert_int_equal(n, 1);
    assert_string_equal(got.text[0], "second");
    assert_int_equal(cache_corrupt_count(c), 2);
    cache_close(r);
    cache_close(c);
}

/* A capped cache evicts least recently used rows to store new ones and stays under its cap. */
static void
test_eviction(void **state)
{
    fixture *f = *state;
    cache *c = open_ok(f->path, 0);
    char value[1024];
    di_error err;
    di_error_clear(&err);
    assert_int_equal(cache_set_limit(c, 256 << 10, &err), 0);
    memset(value, 'v', sizeof value - 1);
    value[sizeof value - 1] = '\0';
    for (int i = 0; i < 2000; i++) {
        value[0] = (char)('a' + i % 26);
        put_ok(c, i, value); /* never fails: room is made */
        if (i % 50 == 0) { /* key 0 stays in use */
            di_hash k0 = key_of(0);
            cache_note_hit(c, &k0);
        }
    }
    assert_true(cache_evicted_count(c) > 0);
    assert_true(cache_count(c) < 2000);
    assert_true(cache_count(c) + cache_evicted_count(c) == 2000);
    value[0] = (char)('a' + 1999 % 26);
    assert_get(c, 1999, value); /* the newest */
    value[0] = 'a';
    assert_get(c, 0, value);    /* the one in use */
    assert_get(c, 1, NULL);     /* old and never hit */
    /* Searches share the room. */
    search_put_ok(c, 1, "a stored search");
    assert_search(c, 1, "a stored search");
    cache_close(c);
    struct stat sb;
    assert_int_equal(stat(f->path, &sb), 0);
    assert_true(sb.st_size <= 256 << 10);
    /* A value larger than the whole cap still fails, after evicting what it could. */
    c = open_ok(f->path, 0);
    assert_int_equal(cache_set_limit(c, 256 << 10, &err), 0);
    static char big[300 << 10];
    memset(big, 'b', sizeof big);
    di_hash kb = key_of(5000);
    di_error_clear(&err);
    assert_int_equal(cache_put(c, &kb, (const uint8_t *)big, sizeof big, "v", 1, 2, &err), DI_EIO);
    assert_non_null(strstr(err.msg, "full"));
    cache_close(c);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_put_get, setup, teardown),
        cmocka_unit_test_setup_teardown(test_restart_persistence, setup, teardown),
        cmocka_unit_test_setup_teardown(test_indexed_columns, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_searches, setup, teardown),
        cmocka_unit_test_setup_teardown(test_migration_searches, setup, teardown),
        cmocka_unit_test_setup_teardown(test_readonly, setup, teardown),
        cmocka_unit_test_setup_teardown(test_migration, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failed_migration_rolls_back, setup, teardown),
        cmocka_unit_test_setup_teardown(test_not_a_database, setup, teardown),
        cmocka_unit_test_setup_teardown(test_integrity, setup, teardown),
        cmocka_unit_test_setup_teardown(test_checksum, setup, teardown),
        cmocka_unit_test_setup_teardown(test_evals, setup, teardown),
        cmocka_unit_test_setup_teardown(test_eviction, setup, teardown),
        cmocka_unit_test(test_schema_text),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
