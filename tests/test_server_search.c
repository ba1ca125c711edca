/*
 * test_server_search.c: the daemon's shared search (server/search.c)
 * without sockets: a SearchRequest worked on by 1, 2 and 3 threads on the
 * shared cursor gives a result event whose JSON equals the sequential
 * library search byte for byte and whose fields agree with it; progress
 * events are consistent; stored searches are found by the same search and
 * shard only, and only when they decode; a cancelled search evaluates nothing more; the
 * candidate limit and bad constraints are refused with their codes.
 */
/* cmocka needs these four first, in this order. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../server/cache.h"
#include "../server/reply.h"
#include "../server/search.h"
#include "distir.pb-c.h"
#include "ir/pb.h"
#include "models/models.h"
#include "search/search.h"
#include "sim/hw.h"

static ir_module *
gpt(void)
{
    models_gpt c;
    ir_module *m = NULL;
    di_error err;
    models_gpt_init(&c);
    c.layers = 4;
    c.hidden = 48;
    c.heads = 6;
    c.seq = 8;
    c.vocab = 13;
    c.batch = 24;
    c.dropout = 0;
    if (models_gpt_build(&c, &m, &err) != 0)
        fail_msg("gpt: %s", err.msg);
    return m;
}

static const uint32_t microbatches[] = {1, 2, 4};

/* The constraints of the shell tests: --devices 8 --recompute none,full --zero 0,3
 * --microbatches 1,2,4 --top 3, as a config and as a request. */
static void
config(search_config *cfg)
{
    di_error err;
    search_config_init(cfg);
    assert_int_equal(search_config_set(cfg, "devices", "8", &err), 0);
    assert_int_equal(search_config_set(cfg, "recompute", "none,full", &err), 0);
    assert_int_equal(search_config_set(cfg, "zero", "0,3", &err), 0);
    assert_int_equal(search_config_set(cfg, "microbatches", "1,2,4", &err), 0);
    assert_int_equal(search_config_set(cfg, "top", "3", &err), 0);
}

static grpc_slice
request_bytes_shard(const ir_module *m, uint32_t zero_mask, uint32_t shard_index,
                    uint32_t shard_count)
{
    Distir__V1__SearchRequest req = DISTIR__V1__SEARCH_REQUEST__INIT;
    Distir__V1__SearchConstraints c = DISTIR__V1__SEARCH_CONSTRAINTS__INIT;
    Distir__V1__HardwareRef ref = DISTIR__V1__HARDWARE_REF__INIT;
    grpc_slice s;
    req.module = ir_to_proto(m);
    ref.spec_case = DISTIR__V1__HARDWARE_REF__SPEC_PRESET;
    ref.preset = (char *)"a100-dgx";
    req.hardware = &ref;
    req.devices = 8;
    req.top_k = 3;
    c.recomputes =
        1u << DISTIR__V1__RECOMPUTE__RECOMPUTE_NONE | 1u << DISTIR__V1__RECOMPUTE__RECOMPUTE_FULL;
    c.zero = zero_mask;
    c.n_microbatches = 3;
    c.microbatches = (uint32_t *)microbatches;
    req.constraints = &c;
    req.shard_index = shard_index;
    req.shard_count = shard_count;
    s = grpc_slice_malloc(distir__v1__search_request__get_packed_size(&req));
    distir__v1__search_request__pack(&req, GRPC_SLICE_START_PTR(s));
    ir_proto_free(req.module);
    return s;
}

static grpc_slice
request_bytes(const ir_module *m, uint32_t zero_mask)
{
    return request_bytes_shard(m, zero_mask, 0, 0);
}

static request_limits
limits(void)
{
    request_limits l;
    memset(&l, 0, sizeof l);
    ir_limits_default(&l.ir);
    l.max_batch = 16;
    return l;
}

static Distir__V1__SearchEvent *
unpack_event(grpc_byte_buffer *bb)
{
    grpc_byte_buffer_reader r;
    Distir__V1__SearchEvent *ev;
    assert_true(grpc_byte_buffer_reader_init(&r, bb));
    grpc_slice s = grpc_byte_buffer_reader_readall(&r);
    grpc_byte_buffer_reader_destroy(&r);
    ev = distir__v1__search_event__unpack(NULL, GRPC_SLICE_LENGTH(s), GRPC_SLICE_START_PTR(s));
    assert_non_null(ev);
    grpc_slice_unref(s);
    grpc_byte_buffer_destroy(bb);
    return ev;
}

/*
 * The sequential library search of the same space, as JSON: one thread on the
 * plan (branch and bound), as `distir search` without --server runs it.
 */
static char *
local_json(const ir_module *m)
{
    hw_model *hw;
    search_config cfg;
    search_space sp;
    search_evaluator ev;
    search_plan plan;
    search_planner w;
    search_result r;
    search_point p;
    di_error err;
    char *json;
    int k;
    assert_int_equal(hw_preset("a100-dgx", &hw, &err), 0);
    config(&cfg);
    assert_int_equal(search_space_init(&sp, m, hw, &cfg, &err), 0);
    search_evaluator_init(&ev, &sp);
    search_plan_init(&plan, &sp);
    search_planner_init(&w, &plan);
    search_result_init(&r, &sp);
    while ((k = search_plan_next(&w, &ev, &p)) != SEARCH_PLAN_END) {
        assert_int_not_equal(k, SEARCH_PLAN_WAIT); /* no other thread holds the seed */
        if (k == SEARCH_PLAN_POINT)
            search_result_add(&r, &p);
    }
    search_result_refine(&ev, &r);
    json = search_result_to_json(&r);
    search_planner_fini(&w);
    search_plan_fini(&plan);
    search_evaluator_fini(&ev);
    search_result_fini(&r);
    search_space_fini(&sp);
    hw_free(hw);
    return json;
}

typedef struct worker_arg {
    srv_search *s;
    unsigned part;
} worker_arg;

static void *
worker(void *p)
{
    worker_arg *a = p;
    /* 1 ms slices, as the daemon's are 20 ms: a part resumes where its slice ended. */
    while (srv_search_work(a->s, a->part, 1000000, NULL))
        ;
    return NULL;
}

static void
test_parts_equal_local(void **state)
{
    (void)state;
    ir_module *m = gpt();
    char *local = local_json(m);
    request_limits lim = limits();
    for (unsigned nparts = 1; nparts <= 3; nparts++) {
        srv_search *s = srv_search_new(request_bytes(m, 0x9), &lim, 1u << 20, nparts, 0);
        pthread_t t[3];
        worker_arg a[3];
        grpc_byte_buffer *bb;
        di_error err;
        assert_int_equal(srv_search_prepare(s, &err), 0);
        srv_search_plan(s); /* as the daemon does when the search is not stored */
        assert_int_equal(srv_search_total(s), 400);
        for (unsigned i = 0; i < nparts; i++) {
            a[i].s = s;
            a[i].part = i;
            assert_int_equal(pthread_create(&t[i], NULL, worker, &a[i]), 0);
        }
        for (unsigned i = 0; i < nparts; i++)
            pthread_join(t[i], NULL);
        assert_int_equal(srv_search_done(s), 400);

        Distir__V1__SearchEvent *pe = unpack_event(srv_search_progress(s));
        assert_int_equal(pe->event_case, DISTIR__V1__SEARCH_EVENT__EVENT_PROGRESS);
        assert_int_equal(pe->progress->done, 400);
        assert_int_equal(pe->progress->total, 400);
        assert_int_equal(pe->progress->n_counts, SEARCH_NSTATUS);
        assert_non_null(pe->progress->best);

        uint8_t *stored;
        size_t nstored;
        assert_int_equal(srv_search_result(s, &bb, &stored, &nstored, &err), 0);
        /* The packed result to store is the event's result. */
        assert_non_null(stored);
        Distir__V1__SearchResult *sr = distir__v1__search_result__unpack(NULL, nstored, stored);
        assert_non_null(sr);
        assert_string_equal(sr->json, local);
        assert_false(sr->cached);
        protobuf_c_message_free_unpacked(&sr->base, NULL);
        di_free(stored);
        Distir__V1__SearchEvent *re = unpack_event(bb);
        assert_int_equal(re->event_case, DISTIR__V1__SEARCH_EVENT__EVENT_RESULT);
        Distir__V1__SearchResult *r = re->result;
        assert_string_equal(r->json, local);
        assert_int_equal(r->enumerated, 400);
        assert_int_equal(r->space_candidates, 400);
        assert_int_equal(r->devices, 8);
        assert_int_equal(r->top_k, 3);
        assert_int_equal(r->n_top, 3);
        assert_true(r->n_pareto >= 1);
        /* The best point of the last progress is the result's first. */
        assert_int_equal(pe->progress->best->index, r->top[0]->index);
        assert_true(pe->progress->best->step_time_s == r->top[0]->step_time_s);
        /* The top K the plan settled early, in the progress: the result's (as a set). */
        assert_int_equal(pe->progress->n_settled_top, r->n_top);
        for (size_t i = 0; i < pe->progress->n_settled_top; i++) {
            size_t j = 0;
            while (j < r->n_top && r->top[j]->index != pe->progress->settled_top[i]->index)
                j++;
            assert_true(j < r->n_top);
            assert_string_equal(pe->progress->settled_top[i]->strategy, r->top[j]->strategy);
        }
        for (size_t i = 0; i < r->n_top; i++) {
            Distir__V1__SearchPoint *p = r->top[i];
            assert_string_equal(p->status, "ok");
            assert_non_null(p->spec);
            assert_int_equal((p->spec->dp ? p->spec->dp : 1) * (p->spec->tp ? p->spec->tp : 1) *
                                 (p->spec->pp ? p->spec->pp : 1),
                             8);
            assert_non_null(strstr(local, p->strategy));
            assert_true(i == 0 || r->top[i - 1]->step_time_s <= p->step_time_s);
        }
        protobuf_c_message_free_unpacked(&pe->base, NULL);
        protobuf_c_message_free_unpacked(&re->base, NULL);
        srv_search_free(s);
    }
    di_free(local);
    ir_module_free(m);
}

/* A prepared search of the request (1 part); free with srv_search_free. */
static srv_search *
prepared(const ir_module *m, uint32_t zero_mask, uint32_t shard_index, uint32_t shard_count)
{
    request_limits lim = limits();
    di_error err;
    srv_search *s = srv_search_new(request_bytes_shard(m, zero_mask, shard_index, shard_count),
                                   &lim, 1u << 20, 1, 0);
    assert_int_equal(srv_search_prepare(s, &err), 0);
    return s;
}

/* Runs a prepared search to its end and returns the packed result to store (di_free). */
static uint8_t *
computed(srv_search *s, size_t *n)
{
    grpc_byte_buffer *bb;
    uint8_t *stored;
    di_error err;
    srv_search_plan(s); /* not stored: planned, as the daemon does */
    assert_int_equal(srv_search_work(s, 0, 0, NULL), 0);
    assert_int_equal(srv_search_result(s, &bb, &stored, n, &err), 0);
    grpc_byte_buffer_destroy(bb);
    assert_non_null(stored);
    return stored;
}

/*
 * Stored searches: the store key covers the constraints and the shard; a
 * search stored in a cache is found by the same search (a hit needs no work
 * and gives the stored JSON marked cached, and a progress event with the
 * stored counts), not by another one; a row that does not decode, or that
 * holds another search's result, is a miss.
 */
static void
test_stored(void **state)
{
    (void)state;
    ir_module *m = gpt();
    char *local = local_json(m);
    char dir[] = "/tmp/distird-search-XXXXXX", path[64], cmd[96];
    cache *w, *r;
    di_error err;
    di_hash k_whole, k_again, k_shard, k_other;
    size_t n_whole, n_shard;
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/cache.db", dir);
    assert_int_equal(cache_open(path, 0, &w, &err), 0);
    assert_int_equal(cache_open(path, CACHE_READONLY, &r, &err), 0);

    srv_search *whole = prepared(m, 0x9, 0, 0), *shard = prepared(m, 0x9, 1, 4);
    srv_search *other = prepared(m, 0x1, 0, 0), *again = prepared(m, 0x9, 0, 1);
    srv_search_store_key(whole, &k_whole);
    srv_search_store_key(again, &k_again);
    srv_search_store_key(shard, &k_shard);
    srv_search_store_key(other, &k_other);
    assert_memory_equal(k_whole.b, k_again.b, 32); /* shard_count 0 means 1 */
    assert_memory_not_equal(k_whole.b, k_shard.b, 32);
    assert_memory_not_equal(k_whole.b, k_other.b, 32);
    assert_int_equal(srv_search_lookup(again, r), 0);
    assert_false(srv_search_hit(again));

    uint8_t *b_whole = computed(whole, &n_whole), *b_shard = computed(shard, &n_shard);
    assert_int_equal(cache_search_put(w, &k_whole, b_whole, n_whole, &err), 0);
    assert_int_equal(cache_search_put(w, &k_shard, b_shard, n_shard, &err), 0);

    /* The same search hits; another constraint misses. */
    assert_int_equal(srv_search_lookup(again, r), 1);
    assert_true(srv_search_hit(again));
    assert_int_equal(srv_search_lookup(other, r), 0);
    Distir__V1__SearchEvent *pe = unpack_event(srv_search_progress(again));
    assert_int_equal(pe->progress->done, 400);
    assert_int_equal(pe->progress->total, 400);
    protobuf_c_message_free_unpacked(&pe->base, NULL);
    grpc_byte_buffer *bb;
    uint8_t *none;
    size_t nnone;
    assert_int_equal(srv_search_result(again, &bb, &none, &nnone, &err), 0);
    assert_null(none);
    Distir__V1__SearchEvent *re = unpack_event(bb);
    assert_int_equal(re->event_case, DISTIR__V1__SEARCH_EVENT__EVENT_RESULT);
    assert_true(re->result->cached);
    assert_string_equal(re->result->json, local);
    assert_int_equal(re->result->enumerated, 400);
    protobuf_c_message_free_unpacked(&re->base, NULL);
    assert_int_equal(srv_search_done(again), 400);
    srv_search_free(again);

    /* Integrity: garbage, the shard's result under the whole's key, or a result whose JSON
     * does not parse, is a miss. */
    again = prepared(m, 0x9, 0, 1);
    assert_int_equal(cache_search_put(w, &k_whole, (const uint8_t *)"\x0a\xff\x01", 3, &err), 0);
    assert_int_equal(srv_search_lookup(again, r), 0);
    assert_int_equal(cache_search_put(w, &k_whole, b_shard, n_shard, &err), 0);
    assert_int_equal(srv_search_lookup(again, r), 0);
    assert_false(srv_search_hit(again));
    /* A result that unpacks but whose JSON does not parse. */
    Distir__V1__SearchResult *bad = distir__v1__search_result__unpack(NULL, n_whole, b_whole);
    assert_non_null(bad);
    char *json = bad->json;
    bad->json = (char *)"{\"search_key\":";
    size_t n_bad = distir__v1__search_result__get_packed_size(bad);
    uint8_t *b_bad = malloc(n_bad);
    distir__v1__search_result__pack(bad, b_bad);
    bad->json = json;
    protobuf_c_message_free_unpacked(&bad->base, NULL);
    assert_int_equal(cache_search_put(w, &k_whole, b_bad, n_bad, &err), 0);
    free(b_bad);
    assert_int_equal(srv_search_lookup(again, r), 0);
    assert_int_equal(cache_search_put(w, &k_whole, b_whole, n_whole, &err), 0);
    assert_int_equal(srv_search_lookup(again, r), 1);

    di_free(b_whole);
    di_free(b_shard);
    srv_search_free(again);
    srv_search_free(whole);
    srv_search_free(shard);
    srv_search_free(other);
    cache_close(r);
    cache_close(w);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
    di_free(local);
    ir_module_free(m);
}

static void
test_cancel(void **state)
{
    (void)state;
    ir_module *m = gpt();
    request_limits lim = limits();
    srv_search *s = srv_search_new(request_bytes(m, 0), &lim, 1u << 20, 2, 0);
    di_error err;
    assert_int_equal(srv_search_prepare(s, &err), 0);
    assert_false(srv_search_cancelled(s));
    srv_search_cancel(s);
    assert_true(srv_search_cancelled(s));
    assert_int_equal(srv_search_work(s, 0, 0, NULL), 0);
    assert_int_equal(srv_search_work(s, 1, 0, NULL), 0);
    assert_int_equal(srv_search_done(s), 0);
    srv_search_free(s);
    ir_module_free(m);
}

/*
 * A cancel inside a candidate's simulation: the part's work returns, and the
 * candidate's module is the worker's to free after its answer
 * (srv_search_take_garbage, whole), once; one nobody takes goes with the
 * search (srv_search_free; ASan's leak check would catch it otherwise).
 */
static void
test_cancel_in_simulation(void **state)
{
    (void)state;
    ir_module *m = gpt();
    request_limits lim = limits();
    for (int take = 1; take >= 0; take--) {
        srv_search *s = srv_search_new(request_bytes(m, 0), &lim, 1u << 20, 1, 0);
        di_error err;
        assert_int_equal(srv_search_prepare(s, &err), 0);
        srv_search_plan(s);
        srv_search_test_cancel_in_simulation(s);
        assert_int_equal(srv_search_work(s, 0, 0, NULL), 0);
        assert_true(srv_search_cancelled(s));
        assert_true(srv_search_done(s) < srv_search_total(s));
        if (take) {
            ir_module *g = srv_search_take_garbage(s, 0);
            assert_non_null(g);
            assert_int_equal(ir_verify(g, &err), 0);
            ir_module_free(g);
            assert_null(srv_search_take_garbage(s, 0));
        }
        srv_search_free(s);
    }
    ir_module_free(m);
}

static void
test_refusals(void **state)
{
    (void)state;
    ir_module *m = gpt();
    request_limits lim = limits();
    di_error err;
    /* 400 candidates to evaluate, 100 allowed. */
    srv_search *s = srv_search_new(request_bytes(m, 0x9), &lim, 100, 1, 0);
    assert_int_equal(srv_search_prepare(s, &err), DI_ETOOBIG);
    assert_non_null(strstr(err.msg, "--max-search-candidates"));
    srv_search_free(s);
    /* ZeRO stage 5 does not exist. */
    s = srv_search_new(request_bytes(m, 1u << 5), &lim, 1u << 20, 1, 0);
    assert_int_equal(srv_search_prepare(s, &err), DI_EINVAL);
    assert_non_null(strstr(err.msg, "zero"));
    srv_search_free(s);
    /* Not a SearchRequest. */
    s = srv_search_new(grpc_slice_from_copied_string("\xff\xff\xff"), &lim, 1u << 20, 1, 0);
    assert_int_not_equal(srv_search_prepare(s, &err), 0);
    srv_search_free(s);
    ir_module_free(m);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parts_equal_local),
        cmocka_unit_test(test_stored),
        cmocka_unit_test(test_cancel),
        cmocka_unit_test(test_cancel_in_simulation),
        cmocka_unit_test(test_refusals),
    };
    grpc_init();
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    grpc_shutdown_blocking();
    return rc;
}
