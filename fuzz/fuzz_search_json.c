/*
 * fuzz_search_json.c: libFuzzer target for the search result JSON (what
 * `distir search --json` prints and `distir search --merge` reads back from
 * files that other processes or machines wrote). Any input must either fail
 * with a code and a message, leaving nothing to free, or give a result that
 * holds the invariants of search.h: counts that add up to the candidates
 * enumerated, at most K top points ordered best first by (cost, index),
 * a Pareto set in ascending (step time, memory, index) order where no
 * point dominates another, and every point a strategy on the result's
 * devices. That result must survive print -> parse unchanged
 * (search_result_equal), print the same text twice, and merging it with
 * itself must keep its points. The seed corpus in fuzz/corpus/fuzz_search_json
 * runs with the tests (fuzz/replay.c).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "search/search.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
check(int ok, const char *what, const di_error *err)
{
    if (!ok) {
        fprintf(stderr, "fuzz_search_json: %s%s%s\n", what, err ? ": " : "", err ? err->msg : "");
        abort();
    }
}

static int
dominates(const search_point *a, const search_point *b)
{
    if (a->step_time_s > b->step_time_s || a->peak_memory_bytes > b->peak_memory_bytes)
        return 0;
    if (a->step_time_s < b->step_time_s || a->peak_memory_bytes < b->peak_memory_bytes)
        return 1;
    return a->cand.index < b->cand.index;
}

static void
check_point(const search_result *r, const search_point *p)
{
    const search_candidate *c = &p->cand;
    char name[256];
    check(p->status == SEARCH_OK, "a point that is not ok", NULL);
    check(search_result_has_devices(r, search_candidate_devices(c)),
          "a point not on the result's devices",
          NULL);
    /* Formatting normalizes the strategy, which aborts on one out of range. */
    search_candidate_format(c, name, sizeof name);
    check(name[0] != '\0', "an empty strategy name", NULL);
}

static void
check_invariants(const search_result *r)
{
    uint64_t sum = 0;
    check(r->top_k >= 1 && r->top_k <= SEARCH_MAX_TOP, "K out of range", NULL);
    check(r->ntop <= r->top_k, "more top points than K", NULL);
    check(r->devices >= 1, "no devices", NULL);
    for (int s = 0; s < SEARCH_NSTATUS; s++)
        sum += r->count[s];
    check(sum == r->enumerated, "the counts do not add up to the candidates", NULL);
    check(r->ntop <= r->count[SEARCH_OK] && r->npareto <= r->count[SEARCH_OK],
          "more points than ok candidates", NULL);
    check((r->ntop == 0) == (r->npareto == 0), "a top point without a Pareto set", NULL);
    for (uint32_t i = 0; i < r->ntop; i++) {
        check_point(r, &r->top[i]);
        if (i > 0)
            check(search_point_compare(r, &r->top[i - 1], &r->top[i]) < 0,
                  "the top is not in (objective, index) order", NULL);
    }
    for (uint32_t i = 0; i < r->npareto; i++) {
        const search_point *p = &r->pareto[i];
        check_point(r, p);
        if (i > 0)
            check(r->pareto[i - 1].step_time_s <= p->step_time_s,
                  "the Pareto set is not in step time order", NULL);
        for (uint32_t j = 0; j < r->npareto; j++)
            check(i == j || !dominates(&r->pareto[j], p), "a dominated Pareto point", NULL);
    }
}

/* The points of a and b are the same (counts aside). */
static int
same_points(const search_result *a, const search_result *b)
{
    if (a->ntop != b->ntop || a->npareto != b->npareto)
        return 0;
    for (uint32_t i = 0; i < a->ntop; i++)
        if (!search_point_equal(&a->top[i], &b->top[i]))
            return 0;
    for (uint32_t i = 0; i < a->npareto; i++)
        if (!search_point_equal(&a->pareto[i], &b->pareto[i]))
            return 0;
    return 1;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    search_result r, back, twice;
    di_error err;
    char *json, *again;

    di_error_clear(&err);
    if (search_result_from_json((const char *)data, size, &r, &err) != 0) {
        /* A failure must say why and leave nothing behind. */
        check(err.code != 0 && err.msg[0] != '\0', "a failure without a message", NULL);
        check(r.top == NULL && r.pareto == NULL, "a failure left memory behind", NULL);
        return 0;
    }
    check_invariants(&r);

    json = search_result_to_json(&r);
    di_error_clear(&err);
    check(search_result_from_json(json, strlen(json), &back, &err) == 0,
          "the printed result does not parse", &err);
    check(search_result_equal(&r, &back), "print -> parse changed the result", NULL);
    again = search_result_to_json(&back);
    check(strcmp(json, again) == 0, "printing is not stable", NULL);

    /* A result merged with itself keeps its points; its counts double. */
    check(search_result_from_json(json, strlen(json), &twice, &err) == 0, "a second parse", &err);
    check(search_result_merge(&twice, &back, &err) == 0, "merging a result with itself", &err);
    check(same_points(&twice, &r), "merging a result with itself changed its points", NULL);
    check(twice.enumerated == 2 * r.enumerated, "merged counts", NULL);

    di_free(json);
    di_free(again);
    search_result_fini(&twice);
    search_result_fini(&back);
    search_result_fini(&r);
    return 0;
}
