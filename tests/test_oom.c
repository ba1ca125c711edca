/*
 * test_oom.c: out-of-memory handling, in the manner of SQLite's malloc tests.
 * For the text parser, the protobuf decoder, the transform of a small GPT
 * (data, tensor and pipeline parallel, ZeRO, overlapped reduction, sequence
 * parallelism, the schedules, recomputation, weight stashing, nested stages)
 * and a simulation (fresh tables and a reused workspace), the loop makes the Nth
 * allocation fail for N = 0, 1, 2, ... until the operation succeeds. Every
 * failing run must return DI_ENOMEM with "out of memory" and no output; the
 * run that succeeds must give the same result as a run without injection
 * (same canonical hash, same step time). Leaks and double frees on the
 * failure paths show under `make asan` (LeakSanitizer checks at exit).
 *
 * Failures reach the di_x* call sites through allocation scopes
 * (di_scope_run); the first tests check the scope itself: tracking, what a
 * successful scope hands out, blocks from outside the scope, nesting, and
 * big (mapped) tables.
 *
 * Stride: every N is tried up to OOM_DENSE allocations; beyond it N grows by
 * about 1/OOM_SPARSE of itself per run, so that the transform (tens of
 * thousands of allocations) keeps the test under a few seconds while every
 * phase of it still sees failures.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "ir/ir.h"
#include "ir/pb.h"
#include "models/models.h"
#include "search/search.h"
#include "sim/hw.h"
#include "sim/sim.h"
#include "xform/xform.h"

#define OOM_DENSE 3000
#define OOM_SPARSE 40

/* ---- the scope itself ---- */

typedef struct scope_case {
    void *outside;       /* a block allocated before the scope */
    size_t outside_size; /* its size after the scope's realloc */
    void *kept;          /* handed out by a successful scope */
    int reached_end;
} scope_case;

/* Allocates and frees a little, grows an outside block, then allocates again. */
static int
scope_work(void *arg)
{
    scope_case *c = arg;
    char *a = di_xmalloc(100), *b = di_malloc(200), *d;
    char *s = di_xstrdup("scoped");
    if (b == NULL)
        di_oom(); /* a nullable allocation failing inside a scope can leave it the same way */
    memset(a, 1, 100);
    di_free(b);
    c->outside = di_xrealloc(c->outside, c->outside_size);
    a = di_xrealloc(a, 5000);
    d = di_big_xalloc((size_t)4 << 20); /* mapped outside ASan builds */
    d = di_big_xrealloc(d, (size_t)4 << 20, (size_t)8 << 20);
    d[(8 << 20) - 1] = 1;
    di_big_free(d, (size_t)8 << 20);
    d = di_xcalloc(10, 10);
    di_free(a);
    di_free(s);
    c->kept = d;
    c->reached_end = 1;
    return 7;
}

static int
nested_work(void *arg)
{
    di_error err;
    assert_true(di_scope_active());
    /* Inside a scope, a scope is flattened: its failure jumps to the outer one. */
    return di_scope_run(scope_work, arg, &err);
}

static void
test_scope_success(void **state)
{
    scope_case c;
    di_error err;
    (void)state;
    memset(&c, 0, sizeof c);
    c.outside = di_xmalloc(16);
    c.outside_size = 4096;
    assert_false(di_scope_active());
    assert_int_equal(di_scope_run(scope_work, &c, &err), 7);
    assert_false(di_scope_active());
    assert_true(c.reached_end);
    /* What the scope handed out and the outside block both outlive it. */
    memset(c.kept, 2, 100);
    memset(c.outside, 3, c.outside_size);
    di_free(c.kept);
    di_free(c.outside);
}

static void
test_scope_failure(void **state)
{
    long n, failures = 0;
    (void)state;
    for (n = 0;; n++) {
        scope_case c;
        di_error err;
        int rc;
        memset(&c, 0, sizeof c);
        c.outside = di_xmalloc(16);
        memset(c.outside, 5, 16);
        c.outside_size = 4096;
        di_error_clear(&err);
        di_alloc_fail_after(n);
        rc = di_scope_run(n % 2 ? nested_work : scope_work, &c, &err);
        di_alloc_fail_after(-1);
        assert_false(di_scope_active());
        if (rc == 7) {
            assert_true(c.reached_end);
            di_free(c.kept);
            di_free(c.outside);
            break;
        }
        failures++;
        assert_int_equal(rc, DI_ENOMEM);
        assert_int_equal(err.code, DI_ENOMEM);
        assert_string_equal(err.msg, "out of memory");
        assert_false(c.reached_end);
        /* The outside block is still the caller's (moved or not), with its bytes. */
        assert_int_equal(((unsigned char *)c.outside)[15], 5);
        di_free(c.outside);
    }
    /* di_xmalloc, di_malloc, di_xstrdup, 2 reallocs, 2 big, di_xcalloc. */
    assert_int_equal(failures, 8);
}

/* Outside any scope di_malloc still returns NULL on an injected failure. */
static void
test_no_scope(void **state)
{
    void *p;
    (void)state;
    di_alloc_fail_after(0);
    assert_null(di_malloc(10));
    p = di_malloc(10); /* one-shot: the next succeeds */
    di_alloc_fail_after(-1);
    assert_non_null(p);
    di_free(p);
}

/* ---- the loop ---- */

/*
 * One operation under test: 0 after checking its result, or an error. It
 * stops the injection as soon as the call under test returns.
 */
typedef int (*oom_op)(void *arg, di_error *err);

/*
 * Runs op with the Nth allocation failing, N = 0, 1, ..., until it succeeds;
 * returns the number of failed runs.
 */
static long
oom_loop(const char *what, oom_op op, void *arg)
{
    long n = 0, failures = 0;
    for (;;) {
        di_error err;
        int rc;
        di_error_clear(&err);
        di_alloc_fail_after(n);
        rc = op(arg, &err);
        di_alloc_fail_after(-1);
        if (rc == 0)
            break;
        if (rc != DI_ENOMEM)
            fail_msg("%s: allocation %ld failed: %s (%s)", what, n, di_errname(rc), err.msg);
        assert_int_equal(err.code, DI_ENOMEM);
        failures++;
        n += n < OOM_DENSE ? 1 : 1 + n / OOM_SPARSE;
    }
    print_message("%s: %ld failing runs, success at allocation %ld\n", what, failures, n);
    return failures;
}

static ir_module *
small_gpt(uint32_t layers)
{
    models_gpt c;
    ir_module *m = NULL;
    di_error err;
    models_gpt_init(&c);
    c.layers = layers;
    c.hidden = 16;
    c.heads = 2;
    c.seq = 8;
    c.vocab = 13;
    c.batch = 8;
    c.dropout = 0;
    if (models_gpt_build(&c, &m, &err) != 0)
        fail_msg("gpt: %s", err.msg);
    return m;
}

static void
assert_same_module(const ir_module *a, const ir_module *b)
{
    di_hash ha, hb;
    ir_hash(a, &ha);
    ir_hash(b, &hb);
    assert_memory_equal(ha.b, hb.b, sizeof ha.b);
}

/* -- the parser -- */

typedef struct parse_case {
    const char *text;
    size_t len;
    const ir_module *want;
} parse_case;

static int
parse_op(void *arg, di_error *err)
{
    parse_case *c = arg;
    ir_module *m = (ir_module *)1;
    int rc = ir_parse(c->text, c->len, &m, err);
    di_alloc_fail_after(-1); /* the checks below are not under test */
    if (rc != 0) {
        assert_null(m);
        return rc;
    }
    assert_same_module(m, c->want);
    ir_module_free(m);
    return 0;
}

static void
test_oom_parse(void **state)
{
    ir_module *g = small_gpt(1);
    parse_case c;
    size_t len;
    char *text = ir_print(g, &len);
    (void)state;
    c.text = text;
    c.len = len;
    c.want = g;
    assert_true(oom_loop("parse", parse_op, &c) > 200);
    di_free(text);
    ir_module_free(g);
}

/* -- the protobuf decoder -- */

typedef struct decode_case {
    const uint8_t *data;
    size_t len;
    const ir_module *want;
} decode_case;

static int
decode_op(void *arg, di_error *err)
{
    decode_case *c = arg;
    ir_module *m = (ir_module *)1;
    int rc = ir_decode(c->data, c->len, NULL, &m, err);
    di_alloc_fail_after(-1); /* the checks below are not under test */
    if (rc != 0) {
        assert_null(m);
        return rc;
    }
    assert_same_module(m, c->want);
    ir_module_free(m);
    return 0;
}

static void
test_oom_decode(void **state)
{
    ir_module *g = small_gpt(1);
    decode_case c;
    uint8_t *data;
    size_t len;
    (void)state;
    assert_int_equal(ir_encode(g, &data, &len), 0);
    c.data = data;
    c.len = len;
    c.want = g;
    assert_true(oom_loop("decode", decode_op, &c) > 500);
    di_free(data);
    ir_module_free(g);
}

/* -- the transform -- */

typedef struct apply_case {
    const ir_module *m;
    const strategy *s;
    const hw_model *hw;
    const ir_module *want;
} apply_case;

static int
apply_op(void *arg, di_error *err)
{
    apply_case *c = arg;
    ir_module *out = (ir_module *)1;
    int rc = xform_apply(c->m, c->s, c->hw, &out, err);
    di_alloc_fail_after(-1); /* the checks below are not under test */
    if (rc != 0) {
        assert_null(out);
        return rc;
    }
    assert_same_module(out, c->want);
    ir_module_free(out);
    return 0;
}

static void
oom_apply(const char *what, const ir_module *g, const strategy *s, const hw_model *hw)
{
    apply_case c;
    ir_module *want = NULL;
    di_error err;
    if (xform_apply(g, s, hw, &want, &err) != 0)
        fail_msg("%s: %s", what, err.msg);
    c.m = g;
    c.s = s;
    c.hw = hw;
    c.want = want;
    assert_true(oom_loop(what, apply_op, &c) > 200);
    ir_module_free(want);
}

static void
test_oom_xform(void **state)
{
    ir_module *g = small_gpt(2), *g4 = small_gpt(4);
    hw_model *hw = NULL;
    strategy s;
    strategy_stage stages[2] = {{2, 1, 0}, {1, 2, 0}};
    di_error err;
    (void)state;
    assert_int_equal(hw_preset("a100-dgx:2", &hw, &err), 0);
    xform_strategy_init(&s);
    s.dp = 2;
    s.zero = 1;
    s.overlap_grad_reduce = 1;
    oom_apply("xform dp=2 zero=1 overlap", g, &s, hw);
    xform_strategy_init(&s);
    s.tp = 2;
    s.sequence_parallel = 1;
    oom_apply("xform tp=2 sp", g, &s, hw);
    xform_strategy_init(&s);
    s.pp = 2;
    s.dp = 2;
    s.microbatches = 4;
    oom_apply("xform pp=2 dp=2 mb=4", g, &s, hw);
    xform_strategy_init(&s);
    s.pp = 2;
    s.microbatches = 4;
    s.schedule = STRATEGY_SCHEDULE_GPIPE;
    s.recompute = STRATEGY_RECOMPUTE_FULL;
    s.stash = STRATEGY_STASH_PIPEDREAM;
    oom_apply("xform pp=2 gpipe recompute=full stash", g, &s, hw);
    xform_strategy_init(&s);
    s.pp = 2;
    s.tp = 2;
    s.microbatches = 4;
    s.schedule = STRATEGY_SCHEDULE_INTERLEAVED;
    s.virtual_stages = 2;
    s.recompute = STRATEGY_RECOMPUTE_SELECTIVE;
    s.zero = 3;
    oom_apply("xform pp=2 tp=2 interleaved:2 selective zero=3", g4, &s, hw);
    xform_strategy_init(&s);
    s.pp = 2;
    s.nstages = 2;
    s.stages = stages;
    oom_apply("xform stages=2x1,1x2", g, &s, hw);
    hw_free(hw);
    ir_module_free(g4);
    ir_module_free(g);
}

/* -- the simulation -- */

typedef struct run_case {
    const ir_module *m;
    const hw_model *hw;
    sim_workspace *ws;
    double want; /* seconds: the step time without injection */
} run_case;

static int
run_op(void *arg, di_error *err)
{
    run_case *c = arg;
    sim_result *r = (sim_result *)1;
    int rc = sim_run_ws(c->ws, c->m, c->hw, NULL, &r, NULL, NULL, err);
    di_alloc_fail_after(-1); /* the checks below are not under test */
    if (rc != 0) {
        assert_null(r);
        return rc;
    }
    assert_true(r->step_time_s == c->want);
    sim_result_free(r);
    return 0;
}

/* A scope failure inside a watch leaves no flag watched (scope_watch_work). */
static int
scope_watch_work(void *arg)
{
    di_cancel_watch(arg);
    di_free(di_xmalloc(64)); /* fails: di_alloc_fail_after(0) */
    return 7;
}

/*
 * di_cancel_watch: the transforms stop at a set flag with DI_ECANCELLED
 * (between chunks: a search's cancel reaches a large candidate's transform
 * at once), run in full once it is clear, and a scope that fails out of a
 * watch restores the flag watched before it.
 */
static void
test_cancel_watch(void **state)
{
    ir_module *g = small_gpt(2), *out = NULL;
    hw_model *hw = NULL;
    atomic_int flag = 1;
    const atomic_int *prev;
    strategy s;
    di_error err;
    (void)state;
    assert_false(di_cancel_requested());
    assert_int_equal(hw_preset("a100-dgx:2", &hw, &err), 0);
    xform_strategy_init(&s);
    s.pp = 2;
    s.dp = 2;
    s.microbatches = 4;
    prev = di_cancel_watch(&flag);
    assert_null(prev);
    assert_true(di_cancel_requested());
    assert_int_equal(xform_apply(g, &s, hw, &out, &err), DI_ECANCELLED);
    assert_null(out);
    assert_string_equal(err.msg, "transform cancelled");
    s.pp = 1;
    s.microbatches = 2;
    assert_int_equal(xform_apply(g, &s, hw, &out, &err), DI_ECANCELLED);
    assert_null(out);
    atomic_store(&flag, 0);
    assert_false(di_cancel_requested());
    assert_int_equal(xform_apply(g, &s, hw, &out, &err), 0);
    assert_non_null(out);
    ir_module_free(out);
    assert_ptr_equal(di_cancel_watch(prev), &flag);
    atomic_store(&flag, 1);
    assert_false(di_cancel_requested()); /* nothing watched */
    /* Out of memory inside a watch: the scope restores what was watched before. */
    di_alloc_fail_after(0);
    assert_int_equal(di_scope_run(scope_watch_work, &flag, &err), DI_ENOMEM);
    di_alloc_fail_after(-1);
    assert_false(di_cancel_requested());
    ir_module_free(g);
    hw_free(hw);
}

/*
 * A cancel inside a candidate's simulation returns without freeing the
 * candidate's module (freeing one of millions of ops takes milliseconds): the
 * evaluator keeps it for the caller (search_evaluator_take_garbage), and the
 * next evaluation or search_evaluator_fini frees it (ASan's leak check would
 * catch a module nobody frees).
 */
static void
test_cancel_keeps_module(void **state)
{
    ir_module *g = small_gpt(2), *kept;
    hw_model *hw = NULL;
    search_config cfg;
    search_space sp;
    search_evaluator ev;
    search_point p;
    atomic_int flag = 0;
    uint64_t k;
    di_error err;
    (void)state;
    assert_int_equal(hw_preset("a100-dgx", &hw, &err), 0);
    search_config_init(&cfg);
    assert_int_equal(search_space_init(&sp, g, hw, &cfg, &err), 0);
    search_evaluator_init(&ev, &sp);
    ev.cancel = &flag;
    ev.test_flag_after_transform = &flag; /* the cancel lands after the transform */
    /* The first candidate that gets as far as its transform is cancelled in its simulation. */
    for (k = 0; k < sp.ncandidate; k++) {
        search_eval(&ev, search_space_at(&sp, k), &p);
        if (atomic_load(&flag))
            break;
    }
    assert_true(k < sp.ncandidate);
    assert_int_equal(p.status, SEARCH_FAILED);
    assert_non_null(ev.garbage);
    kept = search_evaluator_take_garbage(&ev);
    assert_non_null(kept);
    assert_null(ev.garbage);
    assert_int_equal(ir_verify(kept, &err), 0); /* whole, not freed */
    ir_module_free(kept);
    /* Left with the evaluator: the next evaluation frees it and runs in full. */
    atomic_store(&flag, 0);
    search_eval(&ev, search_space_at(&sp, k), &p);
    assert_true(atomic_load(&flag)); /* transformed again, then cancelled again */
    assert_non_null(ev.garbage);
    ev.test_flag_after_transform = NULL;
    atomic_store(&flag, 0);
    assert_int_equal(search_eval(&ev, search_space_at(&sp, k), &p), SEARCH_OK);
    assert_null(ev.garbage);
    /* A cancelled module left at the end: search_evaluator_fini frees it. */
    ev.test_flag_after_transform = &flag;
    atomic_store(&flag, 0);
    search_eval(&ev, search_space_at(&sp, k), &p);
    assert_non_null(ev.garbage);
    search_evaluator_fini(&ev);
    search_space_fini(&sp);
    ir_module_free(g);
    hw_free(hw);
}

static void
test_oom_sim(void **state)
{
    ir_module *g = small_gpt(2), *t = NULL;
    hw_model *hw = NULL;
    strategy s;
    sim_result *r = NULL;
    run_case c;
    di_error err;
    (void)state;
    assert_int_equal(hw_preset("a100-dgx:2", &hw, &err), 0);
    xform_strategy_init(&s);
    s.pp = 2;
    s.dp = 2;
    s.microbatches = 4;
    if (xform_apply(g, &s, hw, &t, &err) != 0)
        fail_msg("xform_apply: %s", err.msg);
    assert_int_equal(sim_run(t, hw, NULL, &r, NULL, NULL, &err), 0);
    c.m = t;
    c.hw = hw;
    c.ws = NULL;
    c.want = r->step_time_s;
    sim_result_free(r);
    assert_true(oom_loop("sim", run_op, &c) > 50);
    /* A workspace filled by a first run: a failure takes its tables with it. */
    c.ws = sim_workspace_new();
    assert_int_equal(run_op(&c, &err), 0);
    assert_true(oom_loop("sim with a workspace", run_op, &c) > 20);
    assert_int_equal(run_op(&c, &err), 0);
    sim_workspace_free(c.ws);
    ir_module_free(t);
    hw_free(hw);
    ir_module_free(g);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scope_success), cmocka_unit_test(test_scope_failure),
        cmocka_unit_test(test_no_scope),      cmocka_unit_test(test_oom_parse),
        cmocka_unit_test(test_oom_decode),    cmocka_unit_test(test_oom_xform),
        cmocka_unit_test(test_oom_sim),
        cmocka_unit_test(test_cancel_watch),
        cmocka_unit_test(test_cancel_keeps_module),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
