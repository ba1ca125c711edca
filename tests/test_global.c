/*
 * test_global.c: the global view (docs/transforms.md, "The global view").
 * Seed 003's annotated MLP propagates to the placements the seed shows and
 * lowers to 128x64 MatMuls and one all-reduce; seed 002's main, calling mlp
 * on two meshes, specialises the callee per call site; every resharding
 * pair lowers to its collective on 1-d and 2-d meshes; random modules with
 * random annotations execute as their sequential form does; a GPT annotated
 * like Megatron-LM (tensor axis, and data x tensor on a 2x2 mesh) propagates
 * to the placements xform_apply picks on every axis; bad
 * annotations and impossible layouts fail with a message. The executor is
 * the judge: an annotated module runs sequentially (an annotation is the
 * identity), its lowering runs per device. Run from the repository root.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/exec.h"
#include "ir/ir.h"
#include "models/models.h"
#include "request/request.h"
#include "sim/hw.h"
#include "sim/sim.h"
#include "support/support.h"
#include "xform/xform.h"
#include "xform/xform_int.h"

/* ---- helpers ---- */

static ir_module *
parse_text(const char *text)
{
    ir_module *m = NULL;
    di_error err;
    di_error_clear(&err);
    if (ir_parse(text, strlen(text), &m, &err) != 0)
        fail_msg("parse failed: %s\n%s", err.msg, text);
    return m;
}

static ir_module *
load(const char *path)
{
    uint8_t *data;
    size_t len;
    ir_module *m = NULL;
    di_error err;
    di_error_clear(&err);
    if (di_read_file(path, 1u << 20, &data, &len, &err) != 0)
        fail_msg("%s", err.msg);
    if (ir_parse((const char *)data, len, &m, &err) != 0)
        fail_msg("%s: %s", path, err.msg);
    di_free(data);
    return m;
}

static ir_module *
shard_ok(const ir_module *m)
{
    ir_module *g = NULL;
    di_error err;
    di_error_clear(&err);
    if (xform_shard(m, &g, &err) != 0)
        fail_msg("xform_shard: %s", err.msg);
    return g;
}

static ir_module *
lower_ok(const ir_module *g)
{
    ir_module *l = NULL;
    di_error err;
    di_error_clear(&err);
    if (xform_lower_global(g, &l, &err) != 0) {
        char *t = ir_print(g, NULL);
        fail_msg("xform_lower_global: %s\n%s", err.msg, t);
    }
    return l;
}

/* The placement text of value v's dtensor type ("" when it has none). */
static const char *
placement_of(const ir_module *m, ir_id v, char *buf, size_t n)
{
    const ir_type *t = &m->types[m->values[v].type];
    buf[0] = '\0';
    if (t->kind == IR_TYPE_TENSOR && t->mesh)
        ir_placement_format(m->ints + t->placements, m->meshes[t->mesh].rank, buf, n);
    return buf;
}

static ir_id
func_named(const ir_module *m, const char *name)
{
    ir_id f = ir_func_find(m, name);
    if (f == 0)
        fail_msg("no function @%s", name);
    return f;
}

/*
 * Runs the sequential (annotated) module and the lowered one on the same
 * random arguments and fails unless every result agrees within tol
 * relative to the result's largest magnitude (floor 1): partial sums add in
 * another order than the sequential MatMul's.
 */
static void
assert_same_results(const ir_module *seq, const ir_module *low, int64_t bound, double tol)
{
    ex_tensor *args, *r1, *r2;
    uint32_t na, n1, n2;
    di_error err;
    di_error_clear(&err);
    if (ex_random_args(seq, 17, bound, &args, &na, &err) != 0)
        fail_msg("random args: %s", err.msg);
    run_ok(seq, args, na, &r1, &n1);
    if (ex_run(low, args, na, &r2, &n2, &err) != 0) {
        char *t = ir_print(low, NULL);
        fail_msg("the lowered module fails: %s\n%s", err.msg, t);
    }
    assert_int_equal(n1, n2);
    for (uint32_t i = 0; i < n1; i++) {
        double scale = 1;
        assert_int_equal(r1[i].numel, r2[i].numel);
        for (size_t k = 0; k < r1[i].numel; k++)
            scale = fmax(scale, fabs(ex_get(&r1[i], k)));
        for (size_t k = 0; k < r1[i].numel; k++) {
            double a = ex_get(&r1[i], k), b = ex_get(&r2[i], k);
            if (fabs(a - b) > tol * scale)
                fail_msg("result %u element %zu: sequential %.9g, lowered %.9g", i, k, a, b);
        }
    }
    free_tensors(args, na);
    free_tensors(r1, n1);
    free_tensors(r2, n2);
}

/* ---- seed 003 ---- */

static void
test_seed003(void **state)
{
    ir_module *m = load("tests/ir/seed003_annotated.dir"), *g, *l;
    ir_id f;
    const ir_region *fr;
    char buf[64];
    (void)state;
    g = shard_ok(m);
    f = ir_module_entry(g);
    fr = &g->regions[f];
    assert_int_equal(fr->narg, 3);
    assert_string_equal(placement_of(g, fr->args[0], buf, sizeof buf), "R");
    assert_string_equal(placement_of(g, fr->args[1], buf, sizeof buf), "S[1]");
    assert_string_equal(placement_of(g, fr->args[2], buf, sizeof buf), "S[0]");
    assert_string_equal(placement_of(g, fr->results[0], buf, sizeof buf), "R");
    /* The annotation is gone; one redistribution, of the partial sums, to R. */
    assert_int_equal(count_kind(g, IR_OP_ANNOTATE), 0);
    assert_int_equal(count_kind(g, IR_OP_REDISTRIBUTE), 1);
    for (ir_id op = 1; op < g->nop; op++)
        if (g->ops[op].kind == IR_OP_REDISTRIBUTE)
            assert_string_equal(placement_of(g, g->refs[g->ops[op].inputs], buf, sizeof buf),
                                "P(sum)");
    l = lower_ok(g);
    assert_int_equal(count_kind(l, IR_OP_PMAP), 1);
    assert_int_equal(count_kind(l, IR_OP_MATMUL), 2);
    assert_int_equal(count_kind(l, IR_OP_ALLREDUCE), 1);
    assert_int_equal(count_kind(l, IR_OP_ALLGATHER) + count_kind(l, IR_OP_ALLSLICE) +
                         count_kind(l, IR_OP_ALLTOALL) + count_kind(l, IR_OP_REDUCESCATTER),
                     0);
    /* Per-device MatMuls on 128x64 shards: x[128x128] w1[128x64] and h[128x64] w2[64x128]. */
    for (ir_id op = 1; op < l->nop; op++) {
        const int64_t *a, *b;
        if (l->ops[op].kind != IR_OP_MATMUL)
            continue;
        a = ir_type_dims(l, l->values[l->refs[l->ops[op].inputs]].type);
        b = ir_type_dims(l, l->values[l->refs[l->ops[op].inputs + 1]].type);
        assert_true((a[0] == 128 && a[1] == 128 && b[0] == 128 && b[1] == 64) ||
                    (a[0] == 128 && a[1] == 64 && b[0] == 64 && b[1] == 128));
    }
    assert_same_results(m, l, 0, 1e-4);
    ir_module_free(l);
    ir_module_free(g);
    ir_module_free(m);
}

/* `distir shard --annotate lv1=mesh0:S[1]` on the plain MLP gives the same global module. */
static void
test_annotate_api(void **state)
{
    ir_module *m = load("tests/ir/seed003_annotated.dir"), *p, *g1, *g2;
    char *t, *t1, *t2, *at, *end;
    di_error err;
    (void)state;
    di_error_clear(&err);
    /* The plain module: the annotation line removed, its use renamed. */
    t = ir_print(m, NULL);
    at = strstr(t, "  %lv2 = \"dist.annotate_sharding\"");
    assert_non_null(at);
    end = strchr(at, '\n');
    memmove(at, end + 1, strlen(end + 1) + 1);
    at = strstr(t, "(%lv2, %weight2)");
    assert_non_null(at);
    memcpy(at, "(%lv1,", 6);
    p = parse_text(t);
    assert_int_equal(xform_is_global(p), 0);
    assert_int_equal(xform_annotate(p, "lv1", "mesh0", "S[1]", &err), 0);
    assert_int_equal(xform_is_global(p), 1);
    assert_verifies(p);
    g1 = shard_ok(m);
    g2 = shard_ok(p);
    t1 = ir_print(g1, NULL);
    t2 = ir_print(g2, NULL);
    assert_string_equal(t1, t2);
    /* Bad annotations name what is wrong. */
    assert_int_not_equal(xform_annotate(p, "nope", "mesh0", "R", &err), 0);
    assert_non_null(strstr(err.msg, "no value named %nope"));
    assert_int_not_equal(xform_annotate(p, "lv0", "mesh9", "R", &err), 0);
    assert_non_null(strstr(err.msg, "no mesh named @mesh9"));
    assert_int_not_equal(xform_annotate(p, "lv0", "mesh0", "R, R", &err), 0);
    assert_non_null(strstr(err.msg, "is not 1 placements"));
    assert_int_not_equal(xform_annotate(p, "lv0", "mesh0", "Q[1]", &err), 0);
    free(t);
    free(t1);
    free(t2);
    ir_module_free(g1);
    ir_module_free(g2);
    ir_module_free(p);
    ir_module_free(m);
}

/* ---- seed 002 ---- */

static void
test_seed002(void **state)
{
    ir_module *m = load("tests/ir/seed002_calls.dir"), *g, *l;
    const ir_region *fr;
    ir_id f;
    char buf[64];
    (void)state;
    g = shard_ok(m);
    /* Two call sites on two meshes: two specialised copies of mlp. */
    f = func_named(g, "main");
    func_named(g, "mlp");
    func_named(g, "mlp.1");
    fr = &g->regions[f];
    assert_int_equal(count_kind(g, IR_OP_CALL), 2);
    assert_string_equal(placement_of(g, fr->args[1], buf, sizeof buf), "S[1]");
    assert_string_equal(placement_of(g, fr->args[2], buf, sizeof buf), "S[0]");
    assert_int_equal(g->types[g->values[fr->args[2]].type].mesh, 1);
    assert_int_equal(g->types[g->values[fr->args[4]].type].mesh, 2);
    assert_string_equal(placement_of(g, fr->args[4], buf, sizeof buf), "S[0]");
    /* One transfer between the meshes, in main. */
    {
        uint32_t cross = 0;
        for (ir_id op = 1; op < g->nop; op++)
            if (g->ops[op].kind == IR_OP_REDISTRIBUTE &&
                g->types[g->values[g->refs[g->ops[op].inputs]].type].mesh !=
                    g->types[g->values[g->ops[op].outputs].type].mesh)
                cross++;
        assert_int_equal(cross, 1);
    }
    l = lower_ok(g);
    assert_int_equal(count_kind(l, IR_OP_PMAP), 2);
    assert_int_equal(count_kind(l, IR_OP_ALLREDUCE), 2);
    for (ir_id op = 1; op < l->nop; op++)
        if (l->ops[op].kind == IR_OP_PMAP)
            assert_int_not_equal(ir_op_callee(l, op), 0);
    assert_same_results(m, l, 0, 1e-4);
    ir_module_free(l);
    ir_module_free(g);
    ir_module_free(m);
}

/* Call sites that agree share one copy; seed 002 as written (one device per mesh) lowers too. */
static void
test_seed002_variants(void **state)
{
    static const char *const same =
        "dist.mesh @mesh0 = <[2]>\n"
        "func @main(%x: !dist.tensor<16x16xf32>, %A: !dist.tensor<16x16xf32>, %B: "
        "!dist.tensor<16x16xf32>) -> (!dist.tensor<16x16xf32>) {\n"
        "  %Aa = \"dist.annotate_sharding\"(%A) {mesh = @mesh0, placement = \"S[1]\"} : "
        "(!dist.tensor<16x16xf32>) -> !dist.tensor<16x16xf32>\n"
        "  %y = \"func.call\"(%x, %Aa, %B) {callee = @mlp} : (!dist.tensor<16x16xf32>, "
        "!dist.tensor<16x16xf32>, !dist.tensor<16x16xf32>) -> !dist.tensor<16x16xf32>\n"
        "  %z = \"func.call\"(%y, %Aa, %B) {callee = @mlp} : (!dist.tensor<16x16xf32>, "
        "!dist.tensor<16x16xf32>, !dist.tensor<16x16xf32>) -> !dist.tensor<16x16xf32>\n"
        "  return %z : !dist.tensor<16x16xf32>\n"
        "}\n"
        "func @mlp(%x: !dist.tensor<16x16xf32>, %A: !dist.tensor<16x16xf32>, %B: "
        "!dist.tensor<16x16xf32>) -> (!dist.tensor<16x16xf32>) {\n"
        "  %h = \"MatMul\"(%x, %A) : (!dist.tensor<16x16xf32>, !dist.tensor<16x16xf32>) -> "
        "!dist.tensor<16x16xf32>\n"
        "  %r = \"Relu\"(%h) : (!dist.tensor<16x16xf32>) -> !dist.tensor<16x16xf32>\n"
        "  %o = \"MatMul\"(%r, %B) : (!dist.tensor<16x16xf32>, !dist.tensor<16x16xf32>) -> "
        "!dist.tensor<16x16xf32>\n"
        "  return %o : !dist.tensor<16x16xf32>\n"
        "}\n";
    ir_module *m = parse_text(same), *g = shard_ok(m), *l;
    uint32_t funcs = 0;
    (void)state;
    for (ir_id r = 1; r < g->nregion; r++)
        funcs += g->regions[r].parent == 0;
    assert_int_equal(funcs, 2); /* main and one mlp */
    assert_int_equal(ir_func_find(g, "mlp.1"), 0);
    l = lower_ok(g);
    assert_same_results(m, l, 0, 1e-4);
    ir_module_free(l);
    ir_module_free(g);
    ir_module_free(m);

    /* Seed 002 verbatim: meshes of one device each, x annotated R before each call. */
    {
        static const char *const verbatim =
            "dist.mesh @mesh0 = <[1], devices = [0]>\n"
            "dist.mesh @mesh1 = <[1], devices = [1]>\n"
            "func @main(%x: !dist.tensor<128x128xf32>, %A: !dist.tensor<128x128xf32>, %B: "
            "!dist.tensor<128x128xf32>, %C: !dist.tensor<128x128xf32>, %D: "
            "!dist.tensor<128x128xf32>) -> (!dist.tensor<128x128xf32>) {\n"
            "  %xa = \"dist.annotate_sharding\"(%x) {mesh = @mesh0, placement = \"R\"} : "
            "(!dist.tensor<128x128xf32>) -> !dist.tensor<128x128xf32>\n"
            "  %lv0 = \"func.call\"(%xa, %A, %B) {callee = @mlp} : (!dist.tensor<128x128xf32>, "
            "!dist.tensor<128x128xf32>, !dist.tensor<128x128xf32>) -> !dist.tensor<128x128xf32>\n"
            "  %la = \"dist.annotate_sharding\"(%lv0) {mesh = @mesh1, placement = \"R\"} : "
            "(!dist.tensor<128x128xf32>) -> !dist.tensor<128x128xf32>\n"
            "  %lv1 = \"func.call\"(%la, %C, %D) {callee = @mlp} : (!dist.tensor<128x128xf32>, "
            "!dist.tensor<128x128xf32>, !dist.tensor<128x128xf32>) -> !dist.tensor<128x128xf32>\n"
            "  return %lv1 : !dist.tensor<128x128xf32>\n"
            "}\n"
            "func @mlp(%x: !dist.tensor<128x128xf32>, %A: !dist.tensor<128x128xf32>, %B: "
            "!dist.tensor<128x128xf32>) -> (!dist.tensor<128x128xf32>) {\n"
            "  %lv0 = \"MatMul\"(%x, %A) : (!dist.tensor<128x128xf32>, "
            "!dist.tensor<128x128xf32>) -> !dist.tensor<128x128xf32>\n"
            "  %Y = \"Relu\"(%lv0) : (!dist.tensor<128x128xf32>) -> !dist.tensor<128x128xf32>\n"
            "  %Z = \"MatMul\"(%Y, %B) : (!dist.tensor<128x128xf32>, "
            "!dist.tensor<128x128xf32>) -> !dist.tensor<128x128xf32>\n"
            "  return %Z : !dist.tensor<128x128xf32>\n"
            "}\n";
        ir_module *v = parse_text(verbatim), *vg = shard_ok(v), *vl;
        assert_int_not_equal(ir_func_find(vg, "mlp.1"), 0);
        vl = lower_ok(vg);
        assert_same_results(v, vl, 0, 1e-4);
        ir_module_free(vl);
        ir_module_free(vg);
        ir_module_free(v);
    }
}

/* ---- resharding pairs ---- */

/*
 * A global module: x (rows x cols) placed `from` on a mesh of the given
 * shape, redistributed to `to`, then Relu. Returns its lowering after
 * checking that execution agrees.
 */
static ir_module *
reshard(const char *shape, int64_t rows, int64_t cols, const char *from, const char *to)
{
    char text[2048];
    ir_module *g, *l;
    snprintf(text, sizeof text,
             "dist.mesh @m = <[%s]>\n"
             "func @f(%%x: !dist.dtensor<%lldx%lldxf32, @m, [%s]>) -> "
             "(!dist.dtensor<%lldx%lldxf32, @m, [%s]>) {\n"
             "  %%y = \"dist.redistribute\"(%%x) {mesh = @m, placement = \"%s\"} : "
             "(!dist.dtensor<%lldx%lldxf32, @m, [%s]>) -> !dist.dtensor<%lldx%lldxf32, @m, "
             "[%s]>\n"
             "  %%z = \"Relu\"(%%y) : (!dist.dtensor<%lldx%lldxf32, @m, [%s]>) -> "
             "!dist.dtensor<%lldx%lldxf32, @m, [%s]>\n"
             "  return %%z : !dist.dtensor<%lldx%lldxf32, @m, [%s]>\n"
             "}\n",
             shape, (long long)rows, (long long)cols, from, (long long)rows, (long long)cols, to,
             to, (long long)rows, (long long)cols, from, (long long)rows, (long long)cols, to,
             (long long)rows, (long long)cols, to, (long long)rows, (long long)cols, to,
             (long long)rows, (long long)cols, to);
    g = parse_text(text);
    assert_verifies(g);
    l = lower_ok(g);
    assert_same_results(g, l, 0, 0);
    ir_module_free(g);
    return l;
}

/* Exactly one collective, of kind, and none of the others. */
static void
assert_only(const ir_module *l, int kind, uint32_t n)
{
    static const int kinds[] = {IR_OP_ALLGATHER, IR_OP_ALLREDUCE, IR_OP_REDUCESCATTER,
                                IR_OP_ALLTOALL, IR_OP_ALLSLICE};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        assert_int_equal(count_kind(l, kinds[i]), kinds[i] == kind ? n : 0);
}

static void
test_pairs_1d(void **state)
{
    ir_module *l;
    (void)state;
    assert_only(l = reshard("4", 8, 12, "S[0]", "R"), IR_OP_ALLGATHER, 1);
    ir_module_free(l);
    assert_only(l = reshard("4", 8, 12, "P(sum)", "R"), IR_OP_ALLREDUCE, 1);
    ir_module_free(l);
    assert_only(l = reshard("4", 8, 12, "P(max)", "R"), IR_OP_ALLREDUCE, 1);
    for (ir_id op = 1; op < l->nop; op++)
        if (l->ops[op].kind == IR_OP_ALLREDUCE)
            assert_string_equal(ir_op_string(l, op, "reduction", ""), "max");
    ir_module_free(l);
    assert_only(l = reshard("4", 8, 12, "P(sum)", "S[1]"), IR_OP_REDUCESCATTER, 1);
    ir_module_free(l);
    assert_only(l = reshard("4", 8, 12, "S[0]", "S[1]"), IR_OP_ALLTOALL, 1);
    ir_module_free(l);
    assert_only(l = reshard("4", 8, 12, "R", "S[1]"), IR_OP_ALLSLICE, 1);
    ir_module_free(l);
    assert_only(l = reshard("2", 8, 12, "S[1]", "S[1]"), IR_OP_ALLSLICE, 0);
    ir_module_free(l);
}

static void
test_pairs_2d(void **state)
{
    ir_module *l;
    (void)state;
    /* Axis by axis: the first axis gathers, the second all-reduces. */
    l = reshard("2, 3", 12, 6, "S[0], P(sum)", "R, R");
    assert_int_equal(count_kind(l, IR_OP_ALLGATHER), 1);
    assert_int_equal(count_kind(l, IR_OP_ALLREDUCE), 1);
    ir_module_free(l);
    /* Two axes split one dimension: gathered inner axis first, split outer first. */
    l = reshard("2, 2", 8, 8, "S[0], S[0]", "R, S[0]");
    ir_module_free(l);
    l = reshard("2, 2", 8, 8, "S[0], S[0]", "S[1], S[0]");
    ir_module_free(l);
    l = reshard("2, 2", 8, 8, "R, S[0]", "S[0], S[0]");
    ir_module_free(l);
    l = reshard("2, 2", 8, 8, "S[1], S[0]", "S[0], S[1]");
    ir_module_free(l);
    l = reshard("2, 4", 8, 8, "P(sum), S[1]", "S[1], R");
    ir_module_free(l);
    l = reshard("2, 2, 2", 8, 8, "S[0], P(sum), S[1]", "S[1], S[0], S[1]");
    ir_module_free(l);
}

/* Refusals carry a reason. */
static void
test_refusals(void **state)
{
    static const char *const r_to_p =
        "dist.mesh @m = <[2]>\n"
        "func @f(%x: !dist.dtensor<8x8xf32, @m, [R]>) -> (!dist.dtensor<8x8xf32, @m, "
        "[P(sum)]>) {\n"
        "  %y = \"dist.redistribute\"(%x) {mesh = @m, placement = \"P(sum)\"} : "
        "(!dist.dtensor<8x8xf32, @m, [R]>) -> !dist.dtensor<8x8xf32, @m, [P(sum)]>\n"
        "  return %y : !dist.dtensor<8x8xf32, @m, [P(sum)]>\n"
        "}\n";
    static const char *const uneven =
        "dist.mesh @m = <[4]>\n"
        "func @f(%x: !dist.tensor<6x8xf32>) -> (!dist.tensor<6x8xf32>) {\n"
        "  %xa = \"dist.annotate_sharding\"(%x) {mesh = @m, placement = \"S[0]\"} : "
        "(!dist.tensor<6x8xf32>) -> !dist.tensor<6x8xf32>\n"
        "  %y = \"Relu\"(%xa) : (!dist.tensor<6x8xf32>) -> !dist.tensor<6x8xf32>\n"
        "  return %y : !dist.tensor<6x8xf32>\n"
        "}\n";
    static const char *const nomesh =
        "func @f(%x: !dist.tensor<8x8xf32>) -> (!dist.tensor<8x8xf32>) {\n"
        "  %y = \"Relu\"(%x) : (!dist.tensor<8x8xf32>) -> !dist.tensor<8x8xf32>\n"
        "  return %y : !dist.tensor<8x8xf32>\n"
        "}\n";
    ir_module *m, *out = NULL;
    di_error err;
    (void)state;
    di_error_clear(&err);
    m = parse_text(r_to_p);
    assert_int_not_equal(xform_lower_global(m, &out, &err), 0);
    assert_null(out);
    assert_non_null(strstr(err.msg, "a partial value cannot be made from a complete one"));
    ir_module_free(m);
    m = parse_text(uneven);
    assert_int_not_equal(xform_shard(m, &out, &err), 0);
    assert_null(out);
    assert_non_null(strstr(err.msg, "does not divide"));
    ir_module_free(m);
    m = parse_text(nomesh);
    assert_int_not_equal(xform_shard(m, &out, &err), 0);
    assert_non_null(strstr(err.msg, "declares no mesh"));
    ir_module_free(m);
}

/* ---- property: random modules, random annotations ---- */

static uint64_t
rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static const char *const T8 = "!dist.tensor<8x8xf32>";

/* A random placement for a mesh of rank r (R, S[0], S[1] per axis). */
static void
random_placement(uint64_t *s, uint32_t r, char *buf, size_t n)
{
    size_t w = 0;
    for (uint32_t a = 0; a < r; a++) {
        static const char *const p[] = {"R", "S[0]", "S[1]"};
        w += (size_t)snprintf(buf + w, n - w, "%s%s", a ? ", " : "", p[rnd(s) % 3]);
    }
}

/*
 * A random module of 8x8 tensors on one of four meshes: ops from MatMul,
 * Add, Mul, Sub, Relu, Tanh, Transpose, Softmax; about half the values
 * annotated with a random placement.
 */
static char *
random_module(uint64_t *s)
{
    static const char *const meshes[] = {"2", "4", "2, 2", "2, 4"};
    static const uint32_t ranks[] = {1, 1, 2, 2};
    size_t cap = 1 << 16, w = 0;
    char *t = malloc(cap), pl[64];
    uint32_t mi = (uint32_t)(rnd(s) % 4), nval = 3, nops = 3 + (uint32_t)(rnd(s) % 6);
    char names[64][16];
    w += (size_t)snprintf(t + w, cap - w, "dist.mesh @m = <[%s]>\n", meshes[mi]);
    w += (size_t)snprintf(t + w, cap - w, "func @f(%%a0: %s, %%a1: %s, %%a2: %s) -> (%s, %s) {\n",
                          T8, T8, T8, T8, T8);
    for (uint32_t i = 0; i < 3; i++)
        snprintf(names[i], sizeof names[i], "a%u", i);
    for (uint32_t i = 0; i < nops; i++) {
        const char *x = names[rnd(s) % nval], *y = names[rnd(s) % nval];
        uint32_t k = (uint32_t)(rnd(s) % 8);
        static const char *const bin[] = {"MatMul", "Add", "Mul", "Sub"};
        static const char *const un[] = {"Relu", "Tanh"};
        char *v = names[nval];
        snprintf(v, sizeof names[0], "v%u", i);
        if (k < 4)
            w += (size_t)snprintf(t + w, cap - w, "  %%%s = \"%s\"(%%%s, %%%s) : (%s, %s) -> %s\n",
                                  v, bin[k], x, y, T8, T8, T8);
        else if (k < 6)
            w += (size_t)snprintf(t + w, cap - w, "  %%%s = \"%s\"(%%%s) : (%s) -> %s\n", v,
                                  un[k - 4], x, T8, T8);
        else if (k == 6)
            w += (size_t)snprintf(t + w, cap - w,
                                  "  %%%s = \"Transpose\"(%%%s) {perm = [1, 0]} : (%s) -> %s\n",
                                  v, x, T8, T8);
        else
            w += (size_t)snprintf(t + w, cap - w,
                                  "  %%%s = \"Softmax\"(%%%s) {axis = 1} : (%s) -> %s\n", v, x,
                                  T8, T8);
        nval++;
        if (rnd(s) % 2) {
            char *na = names[nval];
            random_placement(s, ranks[mi], pl, sizeof pl);
            snprintf(na, sizeof names[0], "n%u", i);
            w += (size_t)snprintf(t + w, cap - w,
                                  "  %%%s = \"dist.annotate_sharding\"(%%%s) {mesh = @m, "
                                  "placement = \"%s\"} : (%s) -> %s\n",
                                  na, v, pl, T8, T8);
            nval++;
        }
    }
    w += (size_t)snprintf(t + w, cap - w, "  return %%%s, %%%s : %s, %s\n}\n", names[nval - 1],
                          names[3 + rnd(s) % (nval - 3)], T8, T8);
    return t;
}

static void
test_random_modules(void **state)
{
    static const int kinds[] = {IR_OP_ALLGATHER, IR_OP_ALLREDUCE, IR_OP_REDUCESCATTER,
                                IR_OP_ALLTOALL, IR_OP_ALLSLICE};
    uint32_t seen[5] = {0};
    uint64_t s = 0x9e3779b97f4a7c15ull;
    (void)state;
    for (int iter = 0; iter < 300; iter++) {
        char *t = random_module(&s);
        ir_module *m = parse_text(t), *g, *l;
        assert_verifies(m);
        g = shard_ok(m);
        l = lower_ok(g);
        assert_same_results(m, l, 0, 1e-4);
        for (int k = 0; k < 5; k++)
            seen[k] += count_kind(l, kinds[k]);
        ir_module_free(l);
        ir_module_free(g);
        ir_module_free(m);
        free(t);
    }
    /* Random global modules: every pair of placements on 1-d and 2-d meshes. */
    for (int iter = 0; iter < 200; iter++) {
        static const char *const shapes[] = {"2", "4", "2, 2", "2, 4"};
        static const char *const from[] = {"R", "S[0]", "S[1]", "P(sum)"};
        static const char *const to[] = {"R", "S[0]", "S[1]"};
        uint32_t mi = (uint32_t)(rnd(&s) % 4), r = mi < 2 ? 1 : 2;
        char pf[64] = "", pt[64] = "";
        ir_module *l;
        for (uint32_t a = 0; a < r; a++) {
            strcat(pf, a ? ", " : "");
            strcat(pf, from[rnd(&s) % 4]);
            strcat(pt, a ? ", " : "");
            strcat(pt, to[rnd(&s) % 3]);
        }
        l = reshard(shapes[mi], 8, 16, pf, pt);
        for (int k = 0; k < 5; k++)
            seen[k] += count_kind(l, kinds[k]);
        ir_module_free(l);
    }
    for (int k = 0; k < 5; k++)
        if (seen[k] == 0)
            fail_msg("no %s in any lowering", ir_opkind_name(kinds[k]));
}

/* ---- one engine: Megatron-LM's layout ---- */

/*
 * A small GPT training step annotated as xform_apply lays out tensor
 * parallelism (its weights' placements on the tensor axis) propagates to the
 * placements xform_apply decides for every one of its values, and the
 * lowering computes the sequential step. With dp = 2 the mesh is 2x2, the
 * batch data split on axis 0 and the weights on axis 1: both axes must
 * match xform_apply's data and tensor axes (gradient partial sums and their
 * reductions included).
 */
static void
megatron_case(uint32_t dp)
{
    models_gpt c;
    ir_module *m, *a, *g, *l;
    strategy s;
    xf_place *pl;
    di_error err;
    ir_id fa, fg;
    uint32_t j = 0, compared = 0, split = 0, rank = dp > 1 ? 2 : 1;
    int64_t shape[2] = {2, 2};
    di_error_clear(&err);
    models_gpt_init(&c);
    c.layers = 2;
    c.hidden = 64;
    c.heads = 4;
    c.seq = 16;
    c.vocab = 128;
    c.batch = 4;
    c.dropout = 0;
    assert_int_equal(models_gpt_build(&c, &m, &err), 0);
    strategy_init(&s);
    s.tp = 2;
    s.dp = dp;
    if (xf_placements(m, &s, NULL, &pl, &err) != 0)
        fail_msg("%s", err.msg);
    a = ir_module_clone(m);
    ir_mesh_add(a, "m", rank, shape, NULL);
    fa = ir_module_entry(m);
    for (uint32_t i = 0; i < m->regions[fa].narg; i++) {
        ir_id v = m->regions[fa].args[i];
        const char *name = ir_str_get(m, m->values[v].name);
        char b[32];
        if (dp > 1 && (strcmp(name, "tokens") == 0 || strcmp(name, "labels") == 0))
            snprintf(b, sizeof b, "S[0], R");
        else if (pl[v].a[XF_TP] >= 0)
            snprintf(b, sizeof b, "%sS[%d]", dp > 1 ? "R, " : "", pl[v].a[XF_TP]);
        else
            continue;
        if (xform_annotate(a, name, "m", b, &err) != 0)
            fail_msg("%s", err.msg);
    }
    g = shard_ok(a);
    /* Source ops and global ops correspond in order (annotations and redistributions aside). */
    fa = ir_module_entry(a);
    fg = ir_module_entry(g);
    for (uint32_t i = 0; i < a->regions[fa].nop; i++) {
        ir_id op = a->regions[fa].ops[i], gop;
        if (a->ops[op].kind == IR_OP_ANNOTATE)
            continue;
        while (g->ops[g->regions[fg].ops[j]].kind == IR_OP_REDISTRIBUTE)
            j++;
        gop = g->regions[fg].ops[j++];
        assert_int_equal(g->ops[gop].kind, a->ops[op].kind);
        for (uint32_t k = 0; k < a->ops[op].noutput; k++) {
            ir_id v = a->ops[op].outputs + k, gv = g->ops[gop].outputs + k;
            const ir_type *t = &g->types[g->values[gv].type];
            if (t->kind != IR_TYPE_TENSOR || t->mesh == 0)
                continue;
            for (uint32_t ax = 0; ax < rank; ax++) {
                int8_t got = (int8_t)g->ints[t->placements + ax];
                int8_t want = pl[v].a[rank == 2 && ax == 0 ? XF_DP : XF_TP];
                if (got != want)
                    fail_msg("%s result %u, mesh axis %u: xform_apply %d, the global view %d",
                             ir_op_label(a, op).s, k, ax, want, got);
                compared++;
                split += got != XF_R;
            }
        }
    }
    assert_true(compared > 150 * rank);
    assert_true(split > 40 * rank);
    l = lower_ok(g);
    assert_same_results(a, l, c.vocab, 1e-4);
    di_free(pl);
    ir_module_free(l);
    ir_module_free(g);
    ir_module_free(a);
    ir_module_free(m);
}

static void
test_megatron_layout(void **state)
{
    (void)state;
    megatron_case(1);
}

static void
test_megatron_dp_tp(void **state)
{
    (void)state;
    megatron_case(2);
}

/* ---- simulation and requests ---- */

/* The request path lowers annotated modules; a strategy on one is refused. */
static void
test_simulate_annotated(void **state)
{
    ir_module *m = load("tests/ir/seed002_calls.dir");
    const ir_module *sm;
    ir_module *owned;
    hw_model *hw;
    sim_result *r;
    sim_options o;
    strategy s;
    di_error err;
    (void)state;
    di_error_clear(&err);
    assert_int_equal(hw_preset("a100-dgx", &hw, &err), 0);
    strategy_init(&s);
    assert_int_equal(request_apply_strategy(m, &s, hw, &sm, &owned, &err), 0);
    assert_non_null(owned);
    assert_ptr_equal(sm, owned);
    assert_int_equal(count_kind(sm, IR_OP_ANNOTATE), 0);
    sim_options_default(&o);
    if (sim_run(sm, hw, &o, &r, NULL, NULL, &err) != 0)
        fail_msg("%s", err.msg);
    /* Both meshes work: devices 0-1 first, then 2-3 after the transfer. */
    assert_true(r->step_time_s > 0);
    assert_int_equal(r->ndevice >= 4, 1);
    assert_true(r->devices[0].compute_s > 0 && r->devices[2].compute_s > 0);
    /* Each mesh reduces its partial products and the transfer joins them: mesh 1 waits. */
    assert_true(r->devices[0].comm_s > 0 && r->devices[2].comm_s > 0);
    assert_true(r->step_time_s >= r->devices[0].compute_s + r->devices[2].compute_s +
                                       r->devices[0].comm_s);
    sim_result_free(r);
    ir_module_free(owned);
    s.tp = 2;
    assert_int_not_equal(request_apply_strategy(m, &s, hw, &sm, &owned, &err), 0);
    assert_non_null(strstr(err.msg, "takes no strategy"));
    hw_free(hw);
    ir_module_free(m);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_seed003),
        cmocka_unit_test(test_annotate_api),
        cmocka_unit_test(test_seed002),
        cmocka_unit_test(test_seed002_variants),
        cmocka_unit_test(test_pairs_1d),
        cmocka_unit_test(test_pairs_2d),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_random_modules),
        cmocka_unit_test(test_megatron_layout),
        cmocka_unit_test(test_megatron_dp_tp),
        cmocka_unit_test(test_simulate_annotated),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
