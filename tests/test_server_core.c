/*
 * test_server_core.c: the daemon's pure parts, without sockets: normalized
 * strategies and the cache key (lib/request, lib/strategy), the
 * hand-encoded SimulateReply (server/reply.c, checked by decoding it with
 * protobuf-c), the worker pool (server/pool.c), and the request pipeline
 * (lib/request) on good, malformed, too deep, invalid and over-limit
 * requests, each with the status its error maps to.
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
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../server/pool.h"
#include "../server/reply.h"
#include "../server/status.h"
#include "models/models.h"
#include "request/request.h"
#include "sim/hw.h"
#include "distir.pb-c.h"
#include "ir/pb.h"
#include "xform/xform.h"
#include "sim/sim.h"

/* tests/ir/seed001_mlp.dir: a two-layer MLP with its backward pass on device 0. */
static const char mlp_text[] =
    "func @mlp(%wA: !dist.tensor<4x6xf32, 0>, %wB: !dist.tensor<6x2xf32, 0>, "
    "%x: !dist.tensor<8x4xf32, 0>, %z: !dist.tensor<8x2xf32, 0>) -> (!dist.tensor<8x2xf32, 0>, "
    "!dist.tensor<f32, 0>) {\n"
    "  %a = \"MatMul\"(%x, %wA) : (!dist.tensor<8x4xf32, 0>, !dist.tensor<4x6xf32, 0>) -> "
    "!dist.tensor<8x6xf32, 0>\n"
    "  %y = \"MatMul\"(%a, %wB) : (!dist.tensor<8x6xf32, 0>, !dist.tensor<6x2xf32, 0>) -> "
    "!dist.tensor<8x2xf32, 0>\n"
    "  %l = \"MSELoss\"(%y, %z) : (!dist.tensor<8x2xf32, 0>, !dist.tensor<8x2xf32, 0>) -> "
    "!dist.tensor<f32, 0>\n"
    "  return %y, %l : !dist.tensor<8x2xf32, 0>, !dist.tensor<f32, 0>\n"
    "}\n";

/* ---------------------------------------------------------------- key */

static di_hash
key_for(const Distir__V1__Strategy *s, const Distir__V1__SimOptions *o, const char *version)
{
    di_hash m, h, k;
    strategy st;
    request_simopts so;
    di_sha256_once("module", 6, &m);
    di_sha256_once("hardware", 8, &h);
    assert_int_equal(strategy_from_proto(s, &st, NULL), 0);
    request_simopts_normalize(o, &so);
    request_cache_key(&m, &h, &st, &so, version, &k);
    strategy_fini(&st);
    return k;
}

static void
test_key_normalization(void **state)
{
    Distir__V1__Strategy a = DISTIR__V1__STRATEGY__INIT, b = DISTIR__V1__STRATEGY__INIT;
    Distir__V1__SimOptions o1 = DISTIR__V1__SIM_OPTIONS__INIT, o2 = DISTIR__V1__SIM_OPTIONS__INIT;
    (void)state;
    di_hash none = key_for(NULL, NULL, SIM_VERSION);
    /* Absent, all-zero and explicit 1s are the same request. */
    di_hash zero = key_for(&a, &o1, SIM_VERSION);
    assert_memory_equal(none.b, zero.b, 32);
    b.dp = 1;
    b.tp = 1;
    b.pp = 1;
    b.microbatches = 1;
    di_hash ones = key_for(&b, NULL, SIM_VERSION);
    assert_memory_equal(none.b, ones.b, 32);
    /* microbatches 0 means pp; the default schedule with pp > 1 is 1F1B. */
    a.pp = 4;
    b.pp = 4;
    b.microbatches = 4;
    b.schedule = DISTIR__V1__SCHEDULE__SCHEDULE_1F1B;
    di_hash ka = key_for(&a, NULL, SIM_VERSION), kb = key_for(&b, NULL, SIM_VERSION);
    assert_memory_equal(ka.b, kb.b, 32);
    b.schedule = DISTIR__V1__SCHEDULE__SCHEDULE_GPIPE;
    kb = key_for(&b, NULL, SIM_VERSION);
    assert_memory_not_equal(ka.b, kb.b, 32);
    /* Each field that changes the result changes the key. */
    Distir__V1__Strategy c = DISTIR__V1__STRATEGY__INIT;
    c.dp = 2;
    di_hash kc = key_for(&c, NULL, SIM_VERSION);
    assert_memory_not_equal(none.b, kc.b, 32);
    c.dp = 0;
    c.zero = 1;
    kc = key_for(&c, NULL, SIM_VERSION);
    assert_memory_not_equal(none.b, kc.b, 32);
    /* bucket_mb matters only with overlap_grad_reduce, and 0 is its default, 25. */
    c.zero = 0;
    c.dp = 2;
    c.bucket_mb = 7;
    di_hash kbk = key_for(&c, NULL, SIM_VERSION);
    c.bucket_mb = 0;
    kc = key_for(&c, NULL, SIM_VERSION);
    assert_memory_equal(kbk.b, kc.b, 32);
    c.overlap_grad_reduce = 1;
    kbk = key_for(&c, NULL, SIM_VERSION);
    c.bucket_mb = 25;
    kc = key_for(&c, NULL, SIM_VERSION);
    assert_memory_equal(kbk.b, kc.b, 32);
    c.bucket_mb = 7;
    kc = key_for(&c, NULL, SIM_VERSION);
    assert_memory_not_equal(kbk.b, kc.b, 32);
    /* Per-stage degrees: alike ones are the uniform strategy; layer counts and tp_layers count. */
    {
        Distir__V1__Strategy u = DISTIR__V1__STRATEGY__INIT, n = DISTIR__V1__STRATEGY__INIT;
        Distir__V1__PipelineStage s0 = DISTIR__V1__PIPELINE_STAGE__INIT;
        Distir__V1__PipelineStage s1 = DISTIR__V1__PIPELINE_STAGE__INIT;
        Distir__V1__PipelineStage *st[2] = {&s0, &s1};
        uint32_t l1[3] = {3, 1, 1}, l2[2] = {1, 3};
        u.dp = 2;
        u.pp = 2;
        s0.dp = s1.dp = 2;
        n.n_stages = 2; /* pp from the count */
        n.stages = st;
        di_hash ku = key_for(&u, NULL, SIM_VERSION), kn = key_for(&n, NULL, SIM_VERSION);
        assert_memory_equal(ku.b, kn.b, 32);
        s1.tp = 2;
        kn = key_for(&n, NULL, SIM_VERSION);
        assert_memory_not_equal(ku.b, kn.b, 32);
        s0.layers = 10;
        s1.layers = 14;
        di_hash kl = key_for(&n, NULL, SIM_VERSION);
        assert_memory_not_equal(kl.b, kn.b, 32);
        /* tp_layers: a set (order and repeats do not matter). */
        n.n_tp_layers = 3;
        n.tp_layers = l1;
        di_hash t1 = key_for(&n, NULL, SIM_VERSION);
        n.n_tp_layers = 2;
        n.tp_layers = l2;
        di_hash t2 = key_for(&n, NULL, SIM_VERSION);
        assert_memory_equal(t1.b, t2.b, 32);
        assert_memory_not_equal(t1.b, kl.b, 32);
    }
    /* timeline_max_points matters only with a timeline. */
    o1.timeline_max_points = 100;
    di_hash k1 = key_for(NULL, &o1, SIM_VERSION);
    assert_memory_equal(none.b, k1.b, 32);
    o1.want_timeline = 1;
    o2.want_timeline = 1;
    k1 = key_for(NULL, &o1, SIM_VERSION);
    di_hash k2 = key_for(NULL, &o2, SIM_VERSION);
    assert_memory_not_equal(k1.b, k2.b, 32);
    assert_memory_not_equal(none.b, k2.b, 32);
    o2.no_overlap = 1;
    di_hash k3 = key_for(NULL, &o2, SIM_VERSION);
    assert_memory_not_equal(k2.b, k3.b, 32);
    /* A new simulator version invalidates every key. */
    di_hash kv = key_for(NULL, NULL, "distir-sim-999");
    assert_memory_not_equal(none.b, kv.b, 32);
}

static void
test_strategy_checks(void **state)
{
    Distir__V1__Strategy s = DISTIR__V1__STRATEGY__INIT;
    strategy st;
    di_error err;
    (void)state;
    s.zero = 4;
    di_error_clear(&err);
    assert_int_equal(strategy_from_proto(&s, &st, &err), DI_ESTRATEGY);
    assert_non_null(strstr(err.msg, "zero"));
    strategy_fini(&st);
    s.zero = 0;
    s.tp = 2;
    s.n_device_order = 2;
    uint32_t order[2] = {1, 0};
    s.device_order = order;
    assert_int_equal(strategy_from_proto(&s, &st, &err), 0);
    assert_false(strategy_is_trivial(&st));
    strategy copy;
    strategy_copy(&copy, &st);
    assert_int_equal(copy.ndevice_order, 2);
    assert_int_equal(copy.device_order[0], 1);
    assert_ptr_not_equal(copy.device_order, st.device_order);
    /*
     * A real strategy goes through xform_apply: tp=2 on a 4-layer MLP of
     * hidden 64 gives a distributed module that verifies; tp=3 does not
     * divide the hidden size and is DI_ESTRATEGY, INVALID_ARGUMENT on the
     * wire, with the constraint named.
     */
    ir_module *m = ir_module_new();
    const ir_module *out;
    ir_module *owned, *mlp;
    models_mlp cfg;
    hw_model *hw;
    models_mlp_init(&cfg);
    cfg.layers = 4;
    cfg.hidden = 64;
    cfg.batch = 8;
    assert_int_equal(models_mlp_build(&cfg, &mlp, &err), 0);
    assert_int_equal(hw_preset("a100-dgx", &hw, &err), 0);
    s.n_device_order = 0;
    s.device_order = NULL;
    strategy_fini(&st);
    assert_int_equal(strategy_from_proto(&s, &st, &err), 0);
    di_error_clear(&err);
    if (request_apply_strategy(mlp, &st, hw, &out, &owned, &err) != 0)
        fail_msg("tp=2: %s", err.msg);
    assert_non_null(owned);
    assert_ptr_equal(out, owned);
    assert_int_equal(ir_verify(owned, &err), 0);
    ir_module_free(owned);
    strategy_fini(&st);
    s.tp = 3;
    assert_int_equal(strategy_from_proto(&s, &st, &err), 0);
    int rc = request_apply_strategy(mlp, &st, hw, &out, &owned, &err);
    assert_int_equal(rc, DI_ESTRATEGY);
    assert_int_equal(srv_status_from_code(rc), GRPC_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "tp=3"));
    ir_module_free(mlp);
    hw_free(hw);
    strategy_fini(&st);
    strategy_fini(&copy);
    assert_int_equal(strategy_from_proto(NULL, &st, NULL), 0);
    assert_true(strategy_is_trivial(&st));
    assert_int_equal(request_apply_strategy(m, &st, NULL, &out, &owned, NULL), 0);
    assert_ptr_equal(out, m);
    assert_null(owned);
    ir_module_free(m);
}

/* ---------------------------------------------------------------- reply */

static Distir__V1__SimulateReply *
decode_reply(grpc_byte_buffer *bb)
{
    grpc_slice s;
    assert_int_equal(srv_buffer_read(bb, &s), 0);
    Distir__V1__SimulateReply *r =
        distir__v1__simulate_reply__unpack(NULL, GRPC_SLICE_LENGTH(s), GRPC_SLICE_START_PTR(s));
    grpc_slice_unref(s);
    grpc_byte_buffer_destroy(bb);
    assert_non_null(r);
    return r;
}

static void
test_reply_encoding(void **state)
{
    (void)state;
    /* A SimResult of some size, packed the way workers and the cache hold it. */
    Distir__V1__SimResult res = DISTIR__V1__SIM_RESULT__INIT;
    res.step_time_s = 1.25;
    res.peak_memory_bytes = 123456789012ull;
    res.ops = 300;
    res.simulator_version = (char *)SIM_VERSION;
    size_t n = distir__v1__sim_result__get_packed_size(&res);
    uint8_t *packed = malloc(n);
    distir__v1__sim_result__pack(&res, packed);
    char key[65];
    memset(key, 'a', 64);
    key[64] = '\0';

    Distir__V1__SimulateReply *r = decode_reply(
        srv_reply_simulate(packed, n, DISTIR__V1__CACHE_STATUS__CACHE_HIT, key, 0, NULL, 0));
    assert_non_null(r->result);
    assert_true(r->result->step_time_s == 1.25);
    assert_int_equal(r->result->peak_memory_bytes, 123456789012ull);
    assert_int_equal(r->result->ops, 300);
    assert_string_equal(r->result->simulator_version, SIM_VERSION);
    assert_int_equal(r->cache, DISTIR__V1__CACHE_STATUS__CACHE_HIT);
    assert_string_equal(r->cache_key, key);
    assert_int_equal(r->index, 0);
    assert_int_equal(r->error_code, 0);
    /* The encoding is the canonical one: protobuf-c packs the same bytes. */
    {
        size_t m = distir__v1__simulate_reply__get_packed_size(r);
        uint8_t *again = malloc(m);
        distir__v1__simulate_reply__pack(r, again);
        grpc_slice s;
        grpc_byte_buffer *bb =
            srv_reply_simulate(packed, n, DISTIR__V1__CACHE_STATUS__CACHE_HIT, key, 0, NULL, 0);
        assert_int_equal(srv_buffer_read(bb, &s), 0);
        assert_int_equal(GRPC_SLICE_LENGTH(s), m);
        assert_memory_equal(GRPC_SLICE_START_PTR(s), again, m);
        grpc_slice_unref(s);
        grpc_byte_buffer_destroy(bb);
        free(again);
    }
    distir__v1__simulate_reply__free_unpacked(r, NULL);

    /* A batch error entry: no result, an index beyond one varint byte, a code. */
    r = decode_reply(srv_reply_simulate(NULL, 0, 0, NULL, 300, "strategy: no", 12));
    assert_null(r->result);
    assert_int_equal(r->index, 300);
    assert_string_equal(r->error, "strategy: no");
    assert_int_equal(r->error_code, 12);
    assert_int_equal(r->cache, DISTIR__V1__CACHE_STATUS__CACHE_NONE);
    distir__v1__simulate_reply__free_unpacked(r, NULL);

    /* A result longer than 127 bytes needs a two-byte length. */
    uint8_t *big = calloc(1, 20000);
    Distir__V1__SimResult res2 = DISTIR__V1__SIM_RESULT__INIT;
    res2.simulator_version = (char *)"x";
    char *ver = malloc(19000);
    memset(ver, 'v', 18999);
    ver[18999] = '\0';
    res2.simulator_version = ver;
    size_t n2 = distir__v1__sim_result__pack(&res2, big);
    r = decode_reply(
        srv_reply_simulate(big, n2, DISTIR__V1__CACHE_STATUS__CACHE_MISS, key, 1, NULL, 0));
    assert_int_equal(strlen(r->result->simulator_version), 18999);
    assert_int_equal(r->index, 1);
    distir__v1__simulate_reply__free_unpacked(r, NULL);
    free(ver);
    free(big);
    free(packed);
}

/* ---------------------------------------------------------------- pool */

typedef struct count_job {
    pool_job pj;
    atomic_int *ran;
    atomic_int *done;
    unsigned worker;
    char stack_probe_ok;
    int done_seen; /* set by count_done */
} count_job;

static atomic_int inits, finis;

static int
count_init(pool_worker *w, void *ctx, di_error *err)
{
    (void)ctx;
    (void)err;
    w->local = (void *)(uintptr_t)(w->index + 100);
    atomic_fetch_add(&inits, 1);
    return 0;
}

static void
count_fini(pool_worker *w, void *ctx)
{
    (void)ctx;
    assert_int_equal((uintptr_t)w->local, w->index + 100);
    atomic_fetch_add(&finis, 1);
}

static _Thread_local count_job *last_job; /* the worker's job since its thread_after */
static atomic_int afters;

static void
count_run(pool_job *pj, pool_worker *w)
{
    count_job *j = (count_job *)pj;
    pthread_attr_t attr;
    size_t stack = 0;
    j->worker = w->index;
    if (pthread_getattr_np(pthread_self(), &attr) == 0) {
        pthread_attr_getstacksize(&attr, &stack);
        pthread_attr_destroy(&attr);
    }
    j->stack_probe_ok = stack >= (8u << 20);
    atomic_fetch_add(j->ran, 1);
    last_job = j;
}

static void
count_done(pool_job *pj)
{
    count_job *j = (count_job *)pj;
    j->done_seen = 1;
    atomic_fetch_add(j->done, 1);
}

/* thread_after: on the job's worker, once its done() has run. */
static void
count_after(pool_worker *w, void *ctx)
{
    (void)ctx;
    assert_non_null(last_job);
    assert_int_equal(last_job->worker, w->index);
    assert_int_equal(last_job->done_seen, 1);
    last_job = NULL;
    atomic_fetch_add(&afters, 1);
}

static void
test_pool(void **state)
{
    pool *p;
    pool_config cfg = {.nthreads = 3, .stack_bytes = 8u << 20, .thread_init = count_init,
                       .thread_fini = count_fini, .thread_after = count_after};
    atomic_int ran = 0, done = 0;
    count_job jobs[200];
    (void)state;
    atomic_store(&inits, 0);
    atomic_store(&finis, 0);
    atomic_store(&afters, 0);
    assert_int_equal(pool_new(&cfg, &p, NULL), 0);
    assert_int_equal(atomic_load(&inits), 3);
    assert_int_equal(pool_size(p), 3);
    for (int i = 0; i < 200; i++) {
        memset(&jobs[i], 0, sizeof jobs[i]);
        jobs[i].pj.run = count_run;
        jobs[i].pj.done = count_done;
        jobs[i].ran = &ran;
        jobs[i].done = &done;
        pool_submit(p, &jobs[i].pj);
    }
    /* pool_free finishes every queued job before the threads exit. */
    pool_free(p);
    assert_int_equal(atomic_load(&ran), 200);
    assert_int_equal(atomic_load(&done), 200);
    assert_int_equal(atomic_load(&afters), 200); /* once per job, after its done() */
    assert_int_equal(atomic_load(&finis), 3);
    for (int i = 0; i < 200; i++) {
        assert_true(jobs[i].worker < 3);
        assert_true(jobs[i].stack_probe_ok);
    }
}

static atomic_int idles;

static void
count_idle(pool_worker *w, void *ctx)
{
    (void)w;
    (void)ctx;
    atomic_fetch_add(&idles, 1);
}

static void
sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/*
 * thread_idle runs on each worker once it has waited idle_ms with nothing
 * queued, once per idle spell: not again while it stays idle, again after
 * it has run a job and waited once more.
 */
static void
test_pool_idle(void **state)
{
    pool *p;
    pool_config cfg = {.nthreads = 2, .stack_bytes = 1u << 20, .thread_idle = count_idle,
                       .idle_ms = 20};
    atomic_int ran = 0, done = 0;
    count_job job;
    (void)state;
    atomic_store(&idles, 0);
    assert_int_equal(pool_new(&cfg, &p, NULL), 0);
    for (int i = 0; i < 500 && atomic_load(&idles) < 2; i++)
        sleep_ms(10);
    assert_int_equal(atomic_load(&idles), 2);
    sleep_ms(100); /* five more idle periods: still one call per worker */
    assert_int_equal(atomic_load(&idles), 2);
    memset(&job, 0, sizeof job);
    job.pj.run = count_run;
    job.pj.done = count_done;
    job.ran = &ran;
    job.done = &done;
    pool_submit(p, &job.pj);
    for (int i = 0; i < 500 && atomic_load(&idles) < 3; i++)
        sleep_ms(10);
    assert_int_equal(atomic_load(&ran), 1);
    assert_int_equal(atomic_load(&idles), 3); /* the worker that ran it, idle again */
    pool_free(p);
    assert_int_equal(atomic_load(&idles), 3);
}

static int
failing_init(pool_worker *w, void *ctx, di_error *err)
{
    (void)ctx;
    if (w->index == 1)
        return di_error_set(err, DI_EIO, "worker %u cannot open its database", w->index);
    return 0;
}

static void
test_pool_init_failure(void **state)
{
    pool *p = (pool *)1;
    pool_config cfg = {.nthreads = 2, .stack_bytes = 1u << 20, .thread_init = failing_init};
    di_error err;
    (void)state;
    di_error_clear(&err);
    assert_int_equal(pool_new(&cfg, &p, &err), DI_EIO);
    assert_null(p);
    assert_non_null(strstr(err.msg, "worker 1"));
    cfg.nthreads = 0;
    assert_int_equal(pool_new(&cfg, &p, &err), DI_EINVAL);
}

/* ---------------------------------------------------------------- input */

static ir_module *
mlp(void)
{
    ir_module *m = NULL;
    di_error err;
    di_error_clear(&err);
    if (ir_parse(mlp_text, strlen(mlp_text), &m, &err) != 0)
        fail_msg("parse: %s", err.msg);
    return m;
}

/* Packs a SimulateRequest for m on a preset; the caller frees the bytes. */
static uint8_t *
request_bytes(Distir__V1__Module *pm, const char *preset, size_t *len)
{
    Distir__V1__SimulateRequest req = DISTIR__V1__SIMULATE_REQUEST__INIT;
    Distir__V1__HardwareRef ref = DISTIR__V1__HARDWARE_REF__INIT;
    req.module = pm;
    if (preset != NULL) {
        ref.spec_case = DISTIR__V1__HARDWARE_REF__SPEC_PRESET;
        ref.preset = (char *)preset;
        req.hardware = &ref;
    }
    *len = distir__v1__simulate_request__get_packed_size(&req);
    uint8_t *b = malloc(*len + 1);
    distir__v1__simulate_request__pack(&req, b);
    return b;
}

static void
limits(request_limits *l)
{
    memset(l, 0, sizeof *l);
    ir_limits_default(&l->ir);
    l->max_batch = 16;
}

static int
decode(int kind, const uint8_t *b, size_t len, const request_limits *l, request *r, di_error *err)
{
    di_error_clear(err);
    return request_decode(kind, b, len, l, NULL, r, err);
}

static void
test_input_good(void **state)
{
    request_limits l;
    request r;
    di_error err;
    size_t len;
    (void)state;
    limits(&l);
    ir_module *m = mlp();
    Distir__V1__Module *pm = ir_to_proto(m);
    uint8_t *b = request_bytes(pm, "a100-dgx", &len);
    assert_int_equal(decode(REQUEST_SIMULATE, b, len, &l, &r, &err), 0);
    assert_non_null(r.input);
    assert_int_equal(r.ncand, 1);
    assert_int_equal(r.cands[0].rc, 0);
    assert_true(strategy_is_trivial(&r.cands[0].strategy));
    assert_int_equal(r.input->module->nop, m->nop);
    di_hash h;
    ir_hash(m, &h);
    assert_memory_equal(h.b, r.input->module_hash.b, 32);
    assert_non_null(r.input->hw);
    assert_string_equal(r.input->hw_name, "a100-dgx");
    /* Simulating the decoded input gives the in-process result bit for bit. */
    sim_options o;
    sim_result *a, *c;
    uint8_t *pa, *pc;
    size_t na, nc;
    sim_options_default(&o);
    assert_int_equal(sim_run(r.input->module, r.input->hw, &o, &a, NULL, NULL, &err), 0);
    assert_int_equal(sim_run(m, r.input->hw, &o, &c, NULL, NULL, &err), 0);
    assert_int_equal(sim_result_pack(a, &pa, &na), 0);
    assert_int_equal(sim_result_pack(c, &pc, &nc), 0);
    assert_int_equal(na, nc);
    assert_memory_equal(pa, pc, na);
    di_free(pa);
    di_free(pc);
    sim_result_free(a);
    sim_result_free(c);
    request_fini(&r);
    free(b);

    /* A batch: per-candidate strategy errors do not fail the request. */
    Distir__V1__SimulateBatchRequest breq = DISTIR__V1__SIMULATE_BATCH_REQUEST__INIT;
    Distir__V1__HardwareRef ref = DISTIR__V1__HARDWARE_REF__INIT;
    Distir__V1__Strategy s0 = DISTIR__V1__STRATEGY__INIT, s1 = DISTIR__V1__STRATEGY__INIT;
    Distir__V1__Strategy s2 = DISTIR__V1__STRATEGY__INIT, s3 = DISTIR__V1__STRATEGY__INIT;
    Distir__V1__Strategy *ss[4] = {&s0, &s1, &s2, &s3};
    uint32_t tpl[1] = {0};
    s1.zero = 9;
    /* Refused as the CLI refuses them: a schedule without pp, tp_layers without tp. */
    s2.schedule = DISTIR__V1__SCHEDULE__SCHEDULE_GPIPE;
    s3.dp = 2;
    s3.n_tp_layers = 1;
    s3.tp_layers = tpl;
    ref.spec_case = DISTIR__V1__HARDWARE_REF__SPEC_PRESET;
    ref.preset = (char *)"h100-dgx";
    breq.module = pm;
    breq.hardware = &ref;
    breq.n_strategies = 4;
    breq.strategies = ss;
    len = distir__v1__simulate_batch_request__get_packed_size(&breq);
    b = malloc(len);
    distir__v1__simulate_batch_request__pack(&breq, b);
    assert_int_equal(decode(REQUEST_BATCH, b, len, &l, &r, &err), 0);
    assert_int_equal(r.ncand, 4);
    assert_int_equal(r.cands[0].rc, 0);
    assert_int_equal(r.cands[1].rc, DI_ESTRATEGY);
    assert_non_null(strstr(r.cands[1].error, "zero"));
    assert_int_equal(r.cands[2].rc, DI_ESTRATEGY);
    assert_non_null(strstr(r.cands[2].error, "the gpipe schedule orders pipeline stages and pp=1"));
    assert_int_equal(r.cands[3].rc, DI_ESTRATEGY);
    assert_non_null(strstr(r.cands[3].error, "tp_layers chooses the tensor-parallel layers"));
    assert_int_equal(srv_status_from_code(r.cands[3].rc), GRPC_STATUS_INVALID_ARGUMENT);
    request_fini(&r);
    /* Over the job budget: that candidate alone fails, at the estimate's edge. */
    {
        xform_estimate e0;
        strategy triv;
        strategy_init(&triv);
        xform_estimate_cost(m, &triv, &e0);
        assert_true(e0.ops >= (uint64_t)m->nop - 1);
        assert_int_equal(e0.microbatches, 1);
        assert_true(e0.bytes >= e0.op_instances * XFORM_BYTES_PER_OP_INSTANCE);
        l.max_job_bytes = e0.bytes;
        assert_int_equal(decode(REQUEST_BATCH, b, len, &l, &r, &err), 0);
        assert_int_equal(r.cands[0].rc, 0);
        request_fini(&r);
        l.max_job_bytes = e0.bytes - 1;
        assert_int_equal(decode(REQUEST_BATCH, b, len, &l, &r, &err), 0);
        assert_int_equal(r.cands[0].rc, DI_ETOOBIG);
        assert_non_null(strstr(r.cands[0].error, "op instances (1 microbatches x"));
        assert_non_null(strstr(r.cands[0].error, "--max-job-mb"));
        assert_int_equal(srv_status_from_code(r.cands[0].rc), GRPC_STATUS_RESOURCE_EXHAUSTED);
        assert_int_equal(r.cands[1].rc, DI_ESTRATEGY);
        request_fini(&r);
        l.max_job_bytes = 0;
    }
    /* Over the batch limit: RESOURCE_EXHAUSTED. */
    l.max_batch = 1;
    assert_int_equal(decode(REQUEST_BATCH, b, len, &l, &r, &err), DI_ETOOBIG);
    assert_int_equal(srv_status_from_code(err.code), GRPC_STATUS_RESOURCE_EXHAUSTED);
    assert_non_null(strstr(err.msg, "limit"));
    free(b);
    ir_proto_free(pm);
    ir_module_free(m);
}

static void
test_input_errors(void **state)
{
    request_limits l;
    request r;
    di_error err;
    size_t len;
    (void)state;
    limits(&l);
    ir_module *m = mlp();
    Distir__V1__Module *pm = ir_to_proto(m);

    /* Malformed bytes. */
    const uint8_t junk[] = {0x0a, 0xff, 0xff, 0xff, 0x0f, 0x01, 0x02};
    assert_int_not_equal(decode(REQUEST_SIMULATE, junk, sizeof junk, &l, &r, &err), 0);
    assert_int_equal(srv_status_from_code(err.code), GRPC_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "request"));
    assert_null(r.input);

    /* No hardware. */
    uint8_t *b = request_bytes(pm, NULL, &len);
    assert_int_equal(decode(REQUEST_SIMULATE, b, len, &l, &r, &err), DI_EINVAL);
    assert_non_null(strstr(err.msg, "hardware"));
    free(b);
    /* An unknown preset. */
    b = request_bytes(pm, "no-such-gpu", &len);
    assert_int_not_equal(decode(REQUEST_SIMULATE, b, len, &l, &r, &err), 0);
    assert_int_equal(srv_status_from_code(err.code), GRPC_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "hardware"));
    free(b);
    /* No module. */
    b = request_bytes(NULL, "a100-dgx", &len);
    assert_int_equal(decode(REQUEST_SIMULATE, b, len, &l, &r, &err), DI_EINVAL);
    assert_non_null(strstr(err.msg, "no module"));
    free(b);

    /* Over the op limit: RESOURCE_EXHAUSTED before the module is built. */
    b = request_bytes(pm, "a100-dgx", &len);
    l.ir.max_ops = 2;
    assert_int_equal(decode(REQUEST_SIMULATE, b, len, &l, &r, &err), DI_ETOOBIG);
    assert_int_equal(srv_status_from_code(err.code), GRPC_STATUS_RESOURCE_EXHAUSTED);
    assert_non_null(strstr(err.msg, "ops"));
    limits(&l);
    l.ir.max_values = 3;
    assert_int_equal(decode(REQUEST_SIMULATE, b, len, &l, &r, &err), DI_ETOOBIG);
    assert_non_null(strstr(err.msg, "values"));
    limits(&l);
    free(b);

    /* An invalid module: MatMul with one input. */
    Distir__V1__Region *body = pm->functions[0]->body;
    size_t saved = body->ops[0]->n_inputs;
    body->ops[0]->n_inputs = 1;
    b = request_bytes(pm, "a100-dgx", &len);
    body->ops[0]->n_inputs = saved;
    assert_int_not_equal(decode(REQUEST_SIMULATE, b, len, &l, &r, &err), 0);
    assert_int_equal(srv_status_from_code(err.code), GRPC_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "module"));
    assert_non_null(strstr(err.msg, "MatMul"));
    free(b);
    ir_proto_free(pm);
    ir_module_free(m);
}

/* Appends a length-delimited field to out. */
static size_t
wrap(uint8_t *out, uint8_t tag, const uint8_t *inner, size_t n)
{
    size_t k = 0;
    out[k++] = tag;
    size_t v = n;
    while (v >= 0x80) {
        out[k++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    out[k++] = (uint8_t)v;
    memmove(out + k, inner, n);
    return k + n;
}

static void
test_input_too_deep(void **state)
{
    request_limits l;
    request r;
    di_error err;
    (void)state;
    limits(&l);
    /* Region{ops: Op{body: Region{ops: ...}}} nested 1000 times, inside a function and a module. */
    size_t cap = 1 << 16, n = 0;
    uint8_t *a = calloc(1, cap), *b = calloc(1, cap);
    for (int i = 0; i < 1000; i++) {
        n = wrap(b, 0x2a, a, n); /* Op.body = 5 */
        n = wrap(a, 0x12, b, n); /* Region.ops = 2 */
    }
    n = wrap(b, 0x12, a, n); /* Function.body = 2 */
    n = wrap(a, 0x22, b, n); /* Module.functions = 4 */
    n = wrap(b, 0x0a, a, n); /* SimulateRequest.module = 1 */
    assert_int_equal(decode(REQUEST_SIMULATE, b, n, &l, &r, &err), DI_ETOODEEP);
    assert_int_equal(srv_status_from_code(err.code), GRPC_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "deep"));
    free(a);
    free(b);
}

/*
 * Random damage to a valid request: flipped bytes, truncations, insertions.
 * Whatever the bytes, decoding returns (no crash, no hang under ASan) with
 * either a request or an error that maps to a client status and has a message.
 */
static void
test_input_mutations(void **state)
{
    request_limits l;
    di_error err;
    size_t len;
    unsigned seed = 12345, ok = 0, bad = 0;
    (void)state;
    limits(&l);
    ir_module *m = mlp();
    Distir__V1__Module *pm = ir_to_proto(m);
    uint8_t *good = request_bytes(pm, "a100-dgx", &len);
    uint8_t *b = malloc(len + 64);
    for (int iter = 0; iter < 3000; iter++) {
        size_t n = len;
        memcpy(b, good, len);
        int edits = 1 + (int)(rand_r(&seed) % 4);
        for (int e = 0; e < edits; e++) {
            unsigned r = (unsigned)rand_r(&seed);
            size_t at = (size_t)rand_r(&seed) % n;
            switch (r % 4) {
            case 0:
                b[at] ^= (uint8_t)(1u << (r >> 8) % 8);
                break;
            case 1:
                b[at] = (uint8_t)(r >> 8);
                break;
            case 2:
                n = at + 1;
                break;
            default:
                if (n < len + 60) {
                    memmove(b + at + 1, b + at, n - at);
                    b[at] = (uint8_t)(r >> 8);
                    n++;
                }
                break;
            }
        }
        request r;
        int rc = decode(REQUEST_SIMULATE, b, n, &l, &r, &err);
        if (rc == 0) {
            assert_non_null(r.input);
            assert_int_equal(r.ncand, 1);
            request_fini(&r);
            ok++;
        } else {
            grpc_status_code st = srv_status_from_code(rc);
            assert_true(st == GRPC_STATUS_INVALID_ARGUMENT ||
                        st == GRPC_STATUS_RESOURCE_EXHAUSTED);
            assert_true(err.msg[0] != '\0');
            assert_null(r.input);
            bad++;
        }
    }
    assert_true(bad > 0);
    print_message("mutations: %u decoded, %u rejected\n", ok, bad);
    free(b);
    free(good);
    ir_proto_free(pm);
    ir_module_free(m);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_key_normalization), cmocka_unit_test(test_strategy_checks),
        cmocka_unit_test(test_reply_encoding),    cmocka_unit_test(test_pool),
        cmocka_unit_test(test_pool_init_failure), cmocka_unit_test(test_pool_idle),
        cmocka_unit_test(test_input_good),
        cmocka_unit_test(test_input_errors),      cmocka_unit_test(test_input_too_deep),
        cmocka_unit_test(test_input_mutations),
    };
    grpc_init();
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    grpc_shutdown_blocking();
    return rc;
}
