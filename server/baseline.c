/*
 * baseline.c: CI baselines (baseline.h) on the cache's SQLite connection.
 */
#include "baseline.h"

#include <sqlite3.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static int
sql_error(sqlite3 *db, di_error *err, const char *what)
{
    return di_error_set(err, DI_EIO, "baselines: %s: %s", what, sqlite3_errmsg(db));
}

int
baseline_check_name(const char *what, const char *s, di_error *err)
{
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n > 127)
        return di_error_set(err, DI_EINVAL, "%s: expected 1 to 127 characters", what);
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
            return di_error_set(err, DI_EINVAL, "%s: control characters are not allowed", what);
    return 0;
}

static int select_rows(sqlite3 *db, const char *sql, const char *tenant, const char *project,
                       const char *name, sqlite3_stmt **st, di_error *err);

int
baseline_add(cache *c, const char *tenant, const char *project, const char *name,
             const char *label, const di_hash *key, const uint8_t *result, size_t len,
             double step_time_s, uint64_t peak_memory_bytes, baseline_entry *added,
             size_t *history, di_error *err)
{
    sqlite3 *db = cache_sqlite(c);
    sqlite3_stmt *st = NULL;
    struct timespec ts;
    di_hash sum;
    int rc;
    if (!cache_writable(c))
        return di_error_set(err, DI_EINVAL, "baselines: a read-only connection");
    rc = sqlite3_prepare_v2(db,
                            "INSERT INTO baselines (tenant, project, name, label, created, "
                            "cache_key, step_time_s, peak_memory_bytes, result, checksum) "
                            "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
                            -1, &st, NULL);
    if (rc != SQLITE_OK)
        return sql_error(db, err, "cannot prepare the insert (is the database older than "
                                  "this build?)");
    clock_gettime(CLOCK_REALTIME, &ts);
    di_sha256_once(result, len, &sum);
    sqlite3_bind_text(st, 1, tenant, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, project, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, name, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 4, label ? label : "", -1, SQLITE_STATIC);
    sqlite3_bind_double(st, 5, (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9);
    sqlite3_bind_blob(st, 6, key->b, sizeof key->b, SQLITE_STATIC);
    sqlite3_bind_double(st, 7, step_time_s);
    sqlite3_bind_int64(st, 8,
                       peak_memory_bytes > INT64_MAX ? INT64_MAX : (sqlite3_int64)peak_memory_bytes);
    sqlite3_bind_blob64(st, 9, len ? result : (const uint8_t *)"", len, SQLITE_STATIC);
    sqlite3_bind_blob(st, 10, sum.b, sizeof sum.b, SQLITE_STATIC);
    rc = sqlite3_step(st);
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE)
        return sql_error(db, err, "cannot store the baseline");
    if (added != NULL) {
        memset(added, 0, sizeof *added);
        snprintf(added->label, sizeof added->label, "%s", label ? label : "");
        added->created = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
        added->cache_key = *key;
        added->step_time_s = step_time_s;
        added->peak_memory_bytes = peak_memory_bytes;
    }
    if (history != NULL) {
        if ((rc = select_rows(db,
                              "SELECT count(*) FROM baselines WHERE tenant = ?1 AND project = ?2 "
                              "AND name = ?3",
                              tenant, project, name, &st, err)) != 0)
            return rc;
        rc = sqlite3_step(st);
        *history = rc == SQLITE_ROW ? (size_t)sqlite3_column_int64(st, 0) : 0;
        sqlite3_finalize(st);
        if (rc != SQLITE_ROW)
            return sql_error(db, err, "cannot count the history");
    }
    return 0;
}

/* Fills e from a row of (label, created, cache_key, step_time_s, peak_memory_bytes). */
static void
row_entry(sqlite3_stmt *st, baseline_entry *e)
{
    const unsigned char *label = sqlite3_column_text(st, 0);
    const void *key = sqlite3_column_blob(st, 2);
    memset(e, 0, sizeof *e);
    snprintf(e->label, sizeof e->label, "%s", label ? (const char *)label : "");
    e->created = sqlite3_column_double(st, 1);
    if (key != NULL && sqlite3_column_bytes(st, 2) == (int)sizeof e->cache_key.b)
        memcpy(e->cache_key.b, key, sizeof e->cache_key.b);
    e->step_time_s = sqlite3_column_double(st, 3);
    e->peak_memory_bytes = (uint64_t)sqlite3_column_int64(st, 4);
}

static int
select_rows(sqlite3 *db, const char *sql, const char *tenant, const char *project,
            const char *name, sqlite3_stmt **st, di_error *err)
{
    if (sqlite3_prepare_v2(db, sql, -1, st, NULL) != SQLITE_OK)
        return sql_error(db, err, "cannot prepare the lookup (is the database older than "
                                  "this build?)");
    sqlite3_bind_text(*st, 1, tenant, -1, SQLITE_STATIC);
    sqlite3_bind_text(*st, 2, project, -1, SQLITE_STATIC);
    sqlite3_bind_text(*st, 3, name, -1, SQLITE_STATIC);
    return 0;
}

int
baseline_latest(cache *c, const char *tenant, const char *project, const char *name,
                baseline_entry *e, di_error *err)
{
    sqlite3 *db = cache_sqlite(c);
    sqlite3_stmt *st;
    memset(e, 0, sizeof *e);
    int rc = select_rows(db,
                         "SELECT label, created, cache_key, step_time_s, peak_memory_bytes, "
                         "result, checksum FROM baselines WHERE tenant = ?1 AND project = ?2 "
                         "AND name = ?3 ORDER BY id DESC LIMIT 1",
                         tenant, project, name, &st, err);
    if (rc != 0)
        return rc;
    rc = sqlite3_step(st);
    if (rc != SQLITE_ROW) {
        sqlite3_finalize(st);
        if (rc != SQLITE_DONE)
            return sql_error(db, err, "lookup failed");
        return di_error_set(err, DI_ENOTFOUND, "no baseline '%s' in project '%s'", name,
                            project);
    }
    row_entry(st, e);
    const void *blob = sqlite3_column_blob(st, 5);
    size_t len = (size_t)sqlite3_column_bytes(st, 5);
    const void *want = sqlite3_column_blob(st, 6);
    di_hash sum;
    di_sha256_once(blob ? blob : "", len, &sum);
    if (want == NULL || sqlite3_column_bytes(st, 6) != (int)sizeof sum.b ||
        memcmp(want, sum.b, sizeof sum.b) != 0) {
        sqlite3_finalize(st);
        return di_error_set(err, DI_ECORRUPT,
                            "the stored result of baseline '%s' fails its checksum", name);
    }
    e->result = di_xmalloc(len ? len : 1);
    memcpy(e->result, blob ? blob : "", len);
    e->result_len = len;
    sqlite3_finalize(st);
    return 0;
}

int
baseline_history(cache *c, const char *tenant, const char *project, const char *name,
                 baseline_entry **out, size_t *n, di_error *err)
{
    sqlite3 *db = cache_sqlite(c);
    sqlite3_stmt *st;
    size_t cap = 0;
    int rc = select_rows(db,
                         "SELECT label, created, cache_key, step_time_s, peak_memory_bytes "
                         "FROM baselines WHERE tenant = ?1 AND project = ?2 AND name = ?3 "
                         "ORDER BY id",
                         tenant, project, name, &st, err);
    *out = NULL;
    *n = 0;
    if (rc != 0)
        return rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        DI_GROW(out, &cap, *n + 1);
        row_entry(st, &(*out)[(*n)++]);
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) {
        di_free(*out);
        *out = NULL;
        *n = 0;
        return sql_error(db, err, "history lookup failed");
    }
    return 0;
}
