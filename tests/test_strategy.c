/*
 * test_strategy.c: the strategy type (lib/strategy): its text options (the
 * CLI flags), the proto form both ways, the one normalizer with its
 * refusals (the same message whichever form the strategy came in), and the
 * cache key built from the normalized form, pinned to the keys of the
 * daemon's earlier encoding so that its on-disk cache stays valid.
 */
/* cmocka needs these four first, in this order. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdint.h>
#include <string.h>

#include "distir.pb-c.h"
#include "request/request.h"
#include "strategy/strategy.h"

/* Sets options from "name=value" words (NULL-terminated); fails the test on an error. */
static void
set_all(strategy *s, const char *const *opts)
{
    for (; *opts; opts++) {
        char name[32];
        const char *eq = strchr(*opts, '=');
        size_t n = eq ? (size_t)(eq - *opts) : strlen(*opts);
        di_error err;
        assert_true(n < sizeof name);
        memcpy(name, *opts, n);
        name[n] = '\0';
        di_error_clear(&err);
        if (strategy_set(s, name, eq ? eq + 1 : NULL, &err) != 0)
            fail_msg("%s: %s", *opts, err.msg);
    }
}

/*
 * Expects the options to be refused with DI_ESTRATEGY and a message
 * containing want, by strategy_set or else by strategy_normalize.
 */
static void
expect_refused(const char *const *opts, const char *want)
{
    strategy s;
    di_error err;
    int rc = 0;
    strategy_init(&s);
    di_error_clear(&err);
    for (; *opts && rc == 0; opts++) {
        char name[32];
        const char *eq = strchr(*opts, '=');
        size_t n = eq ? (size_t)(eq - *opts) : strlen(*opts);
        memcpy(name, *opts, n);
        name[n] = '\0';
        rc = strategy_set(&s, name, eq ? eq + 1 : NULL, &err);
    }
    if (rc == 0)
        rc = strategy_normalize(&s, &err);
    assert_int_equal(rc, DI_ESTRATEGY);
    if (strstr(err.msg, want) == NULL)
        fail_msg("message '%s' does not contain '%s'", err.msg, want);
    strategy_fini(&s);
}

static di_hash hash_of(const strategy *s);

static void
test_options(void **state)
{
    static const char *const opts[] = {
        "dp=2", "pp=2", "microbatches=8", "schedule=interleaved:2", "recompute=selective",
        "stash=2bw", "zero=2", "sequence-parallel", "overlap-grad-reduce", "bucket-mb=9",
        "tp=2", "tp-layers=5,0-1,1", NULL};
    strategy s;
    di_error err;
    char buf[256];
    (void)state;
    assert_int_equal(strategy_option_arity("dp"), 1);
    assert_int_equal(strategy_option_arity("sequence-parallel"), 0);
    assert_int_equal(strategy_option_arity("hw"), -1);
    strategy_init(&s);
    assert_int_equal(strategy_set(&s, "hw", "x", &err), DI_ENOTFOUND);
    set_all(&s, opts);
    assert_int_equal(strategy_normalize(&s, &err), 0);
    assert_int_equal(s.dp, 2);
    assert_int_equal(s.tp, 2);
    assert_int_equal(s.pp, 2);
    assert_int_equal(s.microbatches, 8);
    assert_int_equal(s.schedule, STRATEGY_SCHEDULE_INTERLEAVED);
    assert_int_equal(s.virtual_stages, 2);
    assert_int_equal(s.recompute, STRATEGY_RECOMPUTE_SELECTIVE);
    assert_int_equal(s.stash, STRATEGY_STASH_2BW);
    assert_int_equal(s.zero, 2);
    assert_true(s.sequence_parallel);
    assert_true(s.overlap_grad_reduce);
    assert_int_equal(s.bucket_mb, 9);
    /* tp_layers is a set: sorted, each layer once. */
    assert_int_equal(s.ntp_layers, 3);
    assert_int_equal(s.tp_layers[0], 0);
    assert_int_equal(s.tp_layers[2], 5);
    assert_false(strategy_is_trivial(&s));
    strategy_format(&s, buf, sizeof buf);
    assert_string_equal(buf, "dp=2 tp=2 pp=2 m=8 schedule=interleaved:2 recompute=selective "
                             "stash=2bw zero=2 sp overlap bucket=9MiB tp_layers=0-1,5");
    strategy_fini(&s);
    assert_null(s.tp_layers);

    /* torchtitan's op-level selective checkpointing, by name both ways. */
    strategy_init(&s);
    set_all(&s, (const char *const[]){"recompute=selective-op", NULL});
    assert_int_equal(strategy_normalize(&s, &err), 0);
    assert_int_equal(s.recompute, STRATEGY_RECOMPUTE_SELECTIVE_OP);
    strategy_format(&s, buf, sizeof buf);
    assert_non_null(strstr(buf, "recompute=selective-op"));
    assert_int_equal(strategy_set(&s, "recompute", "selective-ops", &err), DI_ESTRATEGY);
    strategy_fini(&s);

    /*
     * Megatron-LM's block recomputation: full, the first N layers of each model stage;
     * in the text and the key only when set; refused with another mode or at 0.
     */
    strategy_init(&s);
    set_all(&s, (const char *const[]){"recompute=full", NULL});
    assert_int_equal(strategy_normalize(&s, &err), 0);
    {
        di_hash a = hash_of(&s), b;
        s.recompute_layers = 2;
        assert_int_equal(strategy_normalize(&s, &err), 0);
        b = hash_of(&s);
        assert_memory_not_equal(a.b, b.b, sizeof a.b);
    }
    strategy_format(&s, buf, sizeof buf);
    assert_non_null(strstr(buf, "recompute=full stash=none zero=0 recompute_layers=2"));
    assert_int_equal(strategy_set(&s, "recompute-layers", "0", &err), DI_ESTRATEGY);
    s.recompute = STRATEGY_RECOMPUTE_SELECTIVE;
    assert_int_equal(strategy_normalize(&s, &err), DI_ESTRATEGY);
    assert_non_null(strstr(err.msg, "recompute_layers 2 needs recompute full"));
    strategy_fini(&s);

    /* Defaults: microbatches pp, the 1F1B schedule, pp from the stage count. */
    strategy_init(&s);
    set_all(&s, (const char *const[]){"stages=4x1:10,2x2:14", NULL});
    assert_int_equal(strategy_normalize(&s, &err), 0);
    assert_int_equal(s.pp, 2);
    assert_int_equal(s.microbatches, 2);
    assert_int_equal(s.schedule, STRATEGY_SCHEDULE_1F1B);
    assert_int_equal(s.nstages, 2);
    assert_int_equal(s.stages[1].tp, 2);
    strategy_format(&s, buf, sizeof buf);
    assert_non_null(strstr(buf, "stages=4x1:10,2x2:14"));
    assert_null(strstr(buf, "dp=")); /* the stages' degrees, not the top level's 1 */
    assert_null(strstr(buf, "tp="));
    assert_int_equal(strncmp(buf, "pp=2 m=2 ", 9), 0);
    strategy_fini(&s);

    /* Stages all alike are the uniform strategy; the trivial one is trivial. */
    strategy_init(&s);
    set_all(&s, (const char *const[]){"stages=2x2,2x2", "microbatches=2", NULL});
    assert_int_equal(strategy_normalize(&s, &err), 0);
    assert_int_equal(s.nstages, 0);
    assert_null(s.stages);
    assert_int_equal(s.dp, 2);
    assert_int_equal(s.tp, 2);
    assert_int_equal(s.pp, 2);
    strategy_fini(&s);
    strategy_init(&s);
    assert_int_equal(strategy_normalize(&s, &err), 0);
    assert_true(strategy_is_trivial(&s));
    strategy_fini(&s);
}

/* What no strategy can be, whichever form it came in (issue: silently accepted before). */
static void
test_refusals(void **state)
{
    (void)state;
    expect_refused((const char *const[]){"dp=0", NULL}, "dp=0 is out of range (1 to");
    expect_refused((const char *const[]){"tp=0", NULL}, "tp=0 is out of range");
    expect_refused((const char *const[]){"pp=0", NULL}, "pp=0 is out of range");
    expect_refused((const char *const[]){"dp=x2", NULL}, "dp needs an integer");
    expect_refused((const char *const[]){"zero=4", NULL}, "zero=4 is out of range (0 to 3)");
    expect_refused((const char *const[]){"pp=2", "schedule=interleaved:0", NULL},
                   "needs at least 2 virtual stages per device (interleaved:V), got 0");
    expect_refused((const char *const[]){"pp=2", "schedule=interleaved:1", NULL},
                   "needs at least 2 virtual stages per device (interleaved:V), got 1");
    expect_refused((const char *const[]){"pp=2", "schedule=interleaved", NULL},
                   "needs at least 2 virtual stages");
    expect_refused((const char *const[]){"schedule=gpipe", NULL},
                   "the gpipe schedule orders pipeline stages and pp=1");
    expect_refused((const char *const[]){"dp=2", "schedule=1f1b", NULL},
                   "the 1f1b schedule orders pipeline stages and pp=1");
    expect_refused((const char *const[]){"schedule=1f1b:2", "pp=2", NULL}, "unknown schedule");
    expect_refused((const char *const[]){"tp-layers=0-3", NULL},
                   "tp_layers chooses the tensor-parallel layers and tp=1");
    expect_refused((const char *const[]){"dp=2", "tp-layers=0-3", NULL},
                   "tp_layers chooses the tensor-parallel layers and tp=1");
    expect_refused((const char *const[]){"stages=2x1,2x1", "tp-layers=1", NULL},
                   "tp_layers chooses the tensor-parallel layers and tp=1");
    expect_refused((const char *const[]){"tp-layers=3-1", NULL}, "tp_layers needs layer numbers");
    expect_refused((const char *const[]){"stages=2x1,1x", NULL}, "stages needs DPxTP[:LAYERS]");
    expect_refused((const char *const[]){"stages=2x1:5,1x2", NULL},
                   "1 of the 2 pipeline stages give a layer count");
    expect_refused((const char *const[]){"pp=3", "stages=2x1,1x2", NULL},
                   "the strategy lists 2 pipeline stages, but pp=3");
    expect_refused((const char *const[]){"dp=2", "stages=2x1,1x2", NULL},
                   "give the degrees either as dp and tp or per pipeline stage, not both");
    expect_refused((const char *const[]){"microbatches=65537", NULL}, "microbatches=65537");
    expect_refused((const char *const[]){"recompute=some", NULL}, "unknown recompute mode 'some'");
    expect_refused((const char *const[]){"stash=all", NULL}, "unknown stash mode 'all'");
}

/* pp given together with per-stage layer counts works when the counts agree. */
static void
test_pp_with_stage_layers(void **state)
{
    strategy s;
    di_error err;
    (void)state;
    strategy_init(&s);
    set_all(&s, (const char *const[]){"pp=4", "stages=1x1:1,1x1:1,2x1:1,1x1:1", NULL});
    assert_int_equal(strategy_normalize(&s, &err), 0);
    assert_int_equal(s.pp, 4);
    assert_int_equal(s.nstages, 4);
    assert_int_equal(s.stages[2].dp, 2);
    assert_int_equal(s.stages[3].layers, 1);
    strategy_fini(&s);
    /* Alike stages with layer counts stay per-stage (the counts are kept). */
    strategy_init(&s);
    set_all(&s, (const char *const[]){"stages=1x1:3,1x1:1", "pp=2", NULL});
    assert_int_equal(strategy_normalize(&s, &err), 0);
    assert_int_equal(s.nstages, 2);
    assert_int_equal(s.stages[0].layers, 3);
    strategy_fini(&s);
}

static di_hash
hash_of(const strategy *s)
{
    di_sha256 h;
    di_hash out;
    di_sha256_init(&h);
    strategy_hash(s, &h);
    di_sha256_final(&h, &out);
    return out;
}

/* The proto form: decoded through the same normalizer, with the same messages. */
static void
test_proto(void **state)
{
    Distir__V1__Strategy p = DISTIR__V1__STRATEGY__INIT, q = DISTIR__V1__STRATEGY__INIT;
    uint32_t order[4] = {3, 2, 1, 0};
    strategy s, t;
    di_error err, err2;
    (void)state;
    assert_int_equal(strategy_from_proto(&p, &s, &err), 0);
    assert_true(strategy_is_trivial(&s));
    assert_int_equal(s.dp, 1);
    strategy_fini(&s);
    assert_int_equal(strategy_from_proto(NULL, &s, &err), 0);
    assert_true(strategy_is_trivial(&s));
    strategy_fini(&s);

    p.dp = 2;
    p.tp = 2;
    p.pp = 2;
    p.schedule = DISTIR__V1__SCHEDULE__SCHEDULE_INTERLEAVED;
    p.virtual_stages = 2;
    p.recompute = DISTIR__V1__RECOMPUTE__RECOMPUTE_FULL;
    p.recompute_layers = 3;
    p.stash = DISTIR__V1__STASH__STASH_2BW;
    p.zero = 2;
    p.sequence_parallel = 1;
    p.n_device_order = 4;
    p.device_order = order;
    assert_int_equal(strategy_from_proto(&p, &s, &err), 0);
    assert_int_equal(s.microbatches, 2);
    assert_int_equal(s.recompute_layers, 3);
    assert_int_equal(s.ndevice_order, 4);
    assert_int_equal(s.device_order[0], 3);
    assert_ptr_not_equal(s.device_order, order);
    /* To proto and back: the same strategy, and normalizing again changes nothing. */
    strategy_to_proto(&s, &q);
    assert_int_equal(strategy_from_proto(&q, &t, &err), 0);
    {
        di_hash a = hash_of(&s), b = hash_of(&t);
        assert_memory_equal(a.b, b.b, sizeof a.b);
    }
    strategy_fini(&t);
    strategy_proto_fini(&q);
    assert_null(q.device_order);
    strategy_copy(&t, &s);
    assert_ptr_not_equal(t.device_order, s.device_order);
    assert_int_equal(strategy_normalize(&t, &err), 0);
    {
        di_hash a = hash_of(&s), b = hash_of(&t);
        assert_memory_equal(a.b, b.b, sizeof a.b);
    }
    strategy_fini(&t);
    strategy_fini(&s);

    /* The refusals of the text form, with the same messages. */
    p.virtual_stages = 1;
    di_error_clear(&err);
    assert_int_equal(strategy_from_proto(&p, &s, &err), DI_ESTRATEGY);
    strategy_fini(&s);
    strategy_init(&t);
    set_all(&t, (const char *const[]){"dp=2", "tp=2", "pp=2", "schedule=interleaved:1", NULL});
    di_error_clear(&err2);
    assert_int_equal(strategy_normalize(&t, &err2), DI_ESTRATEGY);
    assert_string_equal(err.msg, err2.msg);
    strategy_fini(&t);
    p.virtual_stages = 2;
    p.zero = 4;
    assert_int_equal(strategy_from_proto(&p, &s, &err), DI_ESTRATEGY);
    assert_string_equal(err.msg, "zero=4 is out of range (0 to 3)");
    strategy_fini(&s);
    p.zero = 0;
    p.pp = 0;
    assert_int_equal(strategy_from_proto(&p, &s, &err), DI_ESTRATEGY);
    assert_non_null(strstr(err.msg, "the interleaved schedule orders pipeline stages and pp=1"));
    strategy_fini(&s);
    p.schedule = 7;
    assert_int_equal(strategy_from_proto(&p, &s, &err), DI_ESTRATEGY);
    assert_non_null(strstr(err.msg, "schedule 7 is not a schedule"));
    strategy_fini(&s);
    /* Too many stages: one code and one message (DI_ESTRATEGY), before any copy. */
    {
        Distir__V1__Strategy big = DISTIR__V1__STRATEGY__INIT;
        big.n_stages = (1u << 20) + 1;
        assert_int_equal(strategy_from_proto(&big, &s, &err), DI_ESTRATEGY);
        assert_non_null(strstr(err.msg, "pipeline stages are too many"));
        strategy_fini(&s);
    }
}

/*
 * The cache key: the hex values are what distird computed before the
 * strategy moved into the library (server/key.c at 7bf340b) for the same
 * requests. A change here invalidates every cached result: bump the key
 * domain in lib/request/request.c and update these together.
 */
static void
test_key_pinned(void **state)
{
    Distir__V1__Strategy p = DISTIR__V1__STRATEGY__INIT, q = DISTIR__V1__STRATEGY__INIT;
    Distir__V1__PipelineStage a = DISTIR__V1__PIPELINE_STAGE__INIT;
    Distir__V1__PipelineStage b = DISTIR__V1__PIPELINE_STAGE__INIT;
    Distir__V1__PipelineStage *st[2] = {&a, &b};
    uint32_t tpl[3] = {5, 1, 1}, order[4] = {3, 2, 1, 0};
    const Distir__V1__Strategy *cases[3] = {&p, &q, NULL};
    static const char *const want[3] = {
        "f42514eafadc8900e895c3229bf317c4e7915528fe1595721fbb2f8ac41f7ed7",
        "6406161ee0e9e391274903fb9820697673cf61c68ee5419a145888894059a239",
        "9d496624817862fc8ad23aff650e31b0a7e46fa89cdd7a2a8a7f41059c7d3cda",
    };
    di_hash m, h, k;
    request_simopts o;
    (void)state;
    a.dp = 4;
    a.layers = 10;
    b.dp = 2;
    b.tp = 2;
    b.layers = 14;
    p.n_stages = 2;
    p.stages = st;
    p.n_tp_layers = 3;
    p.tp_layers = tpl;
    p.microbatches = 8;
    p.recompute = DISTIR__V1__RECOMPUTE__RECOMPUTE_SELECTIVE;
    p.zero = 1;
    p.overlap_grad_reduce = 1;
    q.dp = 2;
    q.tp = 2;
    q.pp = 2;
    q.schedule = DISTIR__V1__SCHEDULE__SCHEDULE_INTERLEAVED;
    q.virtual_stages = 2;
    q.stash = DISTIR__V1__STASH__STASH_2BW;
    q.sequence_parallel = 1;
    q.n_device_order = 4;
    q.device_order = order;
    q.bucket_mb = 9; /* no effect without overlap */
    di_sha256_once("module", 6, &m);
    di_sha256_once("hardware", 8, &h);
    request_simopts_normalize(NULL, &o);
    for (int i = 0; i < 3; i++) {
        strategy s;
        di_error err;
        char hex[65];
        assert_int_equal(strategy_from_proto(cases[i], &s, &err), 0);
        request_cache_key(&m, &h, &s, &o, "distir-sim-test", &k);
        di_hash_hex(&k, hex);
        assert_string_equal(hex, want[i]);
        strategy_fini(&s);
    }
}

/*
 * The rank order: its text and proto forms, the refusals, the default where
 * both orders place every rank alike (one stage, one replica), and a key of
 * its own only when it is not the default (the keys of other strategies stay).
 */
static void
test_rank_order(void **state)
{
    static const char *const opts[] = {"dp=2", "tp=2", "pp=2", "order=tp-pp-dp", NULL};
    Distir__V1__Strategy p = DISTIR__V1__STRATEGY__INIT;
    strategy s, t, d;
    di_error err;
    char buf[256];
    (void)state;
    strategy_init(&s);
    set_all(&s, opts);
    assert_int_equal(strategy_normalize(&s, &err), 0);
    assert_int_equal(s.order, STRATEGY_ORDER_TP_PP_DP);
    assert_false(strategy_is_trivial(&s));
    strategy_format(&s, buf, sizeof buf);
    assert_string_equal(buf, "dp=2 tp=2 pp=2 m=2 schedule=1f1b recompute=none stash=none zero=0 "
                             "order=tp-pp-dp");
    strategy_to_proto(&s, &p);
    assert_int_equal(p.order, DISTIR__V1__RANK_ORDER__RANK_ORDER_TP_PP_DP);
    assert_int_equal(strategy_from_proto(&p, &t, &err), 0);
    assert_int_equal(t.order, STRATEGY_ORDER_TP_PP_DP);
    strategy_proto_fini(&p);
    strategy_init(&d);
    set_all(&d, (const char *const[]){"dp=2", "tp=2", "pp=2", "order=tp-dp-pp", NULL});
    assert_int_equal(strategy_normalize(&d, &err), 0);
    {
        di_hash a = hash_of(&s), b = hash_of(&t), c = hash_of(&d);
        assert_memory_equal(a.b, b.b, sizeof a.b);
        assert_memory_not_equal(a.b, c.b, sizeof a.b);
    }
    /* The default order's key is the key of a strategy that never named one. */
    strategy_fini(&t);
    strategy_init(&t);
    set_all(&t, (const char *const[]){"dp=2", "tp=2", "pp=2", NULL});
    assert_int_equal(strategy_normalize(&t, &err), 0);
    {
        di_hash a = hash_of(&t), b = hash_of(&d);
        assert_memory_equal(a.b, b.b, sizeof a.b);
    }
    strategy_fini(&t);
    strategy_fini(&d);
    strategy_fini(&s);

    /* One stage or one replica: the default. */
    strategy_init(&s);
    set_all(&s, (const char *const[]){"dp=4", "tp=2", "order=tp-pp-dp", NULL});
    assert_int_equal(strategy_normalize(&s, &err), 0);
    assert_int_equal(s.order, STRATEGY_ORDER_TP_DP_PP);
    strategy_fini(&s);
    strategy_init(&s);
    set_all(&s, (const char *const[]){"tp=2", "pp=4", "order=tp-pp-dp", NULL});
    assert_int_equal(strategy_normalize(&s, &err), 0);
    assert_int_equal(s.order, STRATEGY_ORDER_TP_DP_PP);
    strategy_fini(&s);
    /* With context parallelism alone (dp 1) the orders differ. */
    strategy_init(&s);
    set_all(&s, (const char *const[]){"cp=2", "pp=2", "order=tp-pp-dp", NULL});
    assert_int_equal(strategy_normalize(&s, &err), 0);
    assert_int_equal(s.order, STRATEGY_ORDER_TP_PP_DP);
    strategy_fini(&s);

    expect_refused((const char *const[]){"order=pp-dp-tp", NULL}, "unknown rank order 'pp-dp-tp'");
    expect_refused((const char *const[]){"pp=2", "stages=2x1,1x2", "order=tp-pp-dp", NULL},
                   "order=tp-pp-dp with per-stage degrees");
    p.dp = 2;
    p.pp = 2;
    p.order = 5;
    assert_int_equal(strategy_from_proto(&p, &s, &err), DI_ESTRATEGY);
    assert_non_null(strstr(err.msg, "order 5 is not a rank order"));
    strategy_fini(&s);
    {
        uint32_t devs[4] = {0, 1, 2, 3};
        p.order = DISTIR__V1__RANK_ORDER__RANK_ORDER_TP_PP_DP;
        p.n_device_order = 4;
        p.device_order = devs;
        assert_int_equal(strategy_from_proto(&p, &s, &err), DI_ESTRATEGY);
        assert_non_null(strstr(err.msg, "order=tp-pp-dp with a device order"));
        strategy_fini(&s);
    }
}

/* groups_of: strategy_device_groups of opts (normalized) on n devices, into g. */
static uint32_t
groups_of(const char *const *opts, uint32_t n, uint32_t *g)
{
    strategy s;
    di_error err;
    uint32_t pp;
    strategy_init(&s);
    set_all(&s, opts);
    assert_int_equal(strategy_normalize(&s, &err), 0);
    pp = strategy_device_groups(&s, n, g);
    strategy_fini(&s);
    return pp;
}

/*
 * The stage of each device, as the transforms place ranks (xf_device): dp x
 * cp x tp devices a stage, context between tensor and data; under
 * tp-pp-dp a replica's stages together; per-stage degrees each their own
 * count, the devices beyond them in no stage. By hand.
 */
static void
test_device_groups(void **state)
{
    uint32_t g[16];
    static const uint32_t tp_pp_dp[16] = {0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1};
    static const uint32_t stages[5] = {0, 0, 1, 1, UINT32_MAX};
    (void)state;
    assert_int_equal(groups_of((const char *const[]){"dp=2", "tp=2", "pp=2", "cp=2", NULL}, 16, g),
                     2);
    for (uint32_t d = 0; d < 16; d++)
        assert_int_equal(g[d], d < 8 ? 0 : 1);
    assert_int_equal(groups_of((const char *const[]){"dp=2", "tp=2", "pp=2", "cp=2",
                                                     "order=tp-pp-dp", NULL},
                               16, g),
                     2);
    assert_memory_equal(g, tp_pp_dp, sizeof tp_pp_dp);
    assert_int_equal(groups_of((const char *const[]){"pp=2", "stages=2x1,1x2", NULL}, 5, g), 2);
    assert_memory_equal(g, stages, sizeof stages);
    assert_int_equal(groups_of((const char *const[]){"dp=4", NULL}, 4, g), 1);
    for (uint32_t d = 0; d < 4; d++)
        assert_int_equal(g[d], 0);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_options),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_pp_with_stage_layers),
        cmocka_unit_test(test_proto),
        cmocka_unit_test(test_key_pinned),
        cmocka_unit_test(test_rank_order),
        cmocka_unit_test(test_device_groups),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
