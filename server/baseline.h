/*
 * baseline.h: CI baselines in the cache database (schema.sql version 5),
 * shared by distird (SetBaseline, Compare, History) and the CLI's --db mode,
 * so both read and write the same table. Every set adds a row; the latest
 * row of (tenant, project, name) is the baseline, all rows its history.
 */
#ifndef DISTIRD_BASELINE_H
#define DISTIRD_BASELINE_H

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"
#include "cache.h"

typedef struct baseline_entry {
    char label[128];
    double created; /* Unix seconds */
    di_hash cache_key;
    double step_time_s;
    uint64_t peak_memory_bytes;
    uint8_t *result; /* packed SimResult (baseline_latest only; di_free) */
    size_t result_len;
} baseline_entry;

/* Names: 1 to 127 printable characters. */
int baseline_check_name(const char *what, const char *s, di_error *err);
/*
 * Adds a row (writer connection): *added (may be NULL) is its entry and
 * *history (may be NULL) the rows of the name now. Returns 0 or DI_EIO.
 */
int baseline_add(cache *c, const char *tenant, const char *project, const char *name,
                 const char *label, const di_hash *key, const uint8_t *result, size_t len,
                 double step_time_s, uint64_t peak_memory_bytes, baseline_entry *added,
                 size_t *history, di_error *err);
/*
 * The latest row with its result (checked against its checksum:
 * DI_ECORRUPT), DI_ENOTFOUND when the name has none. Free e->result.
 */
int baseline_latest(cache *c, const char *tenant, const char *project, const char *name,
                    baseline_entry *e, di_error *err);
/* Every row, oldest first, without results: *out (di_free) and *n. */
int baseline_history(cache *c, const char *tenant, const char *project, const char *name,
                     baseline_entry **out, size_t *n, di_error *err);

#endif
