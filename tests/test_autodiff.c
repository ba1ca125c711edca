/*
 * test_autodiff.c: reverse-mode autodiff (lib/xform/autodiff) against
 * central finite differences on the sequential executor, in f64.
 *
 * Every gradient rule gets a small random module of its own (built with the
 * models_builder of lib/models), and the built-in MLP and a tiny GPT (1 and 2
 * layers, h 8, 2 heads, s 4, V 11, b 2, with and without dropout) are
 * checked whole: each gradient element within 1e-3 relative of
 * (L(w + eps) - L(w - eps)) / 2 eps. Then one SGD step equals w - lr g, one
 * Adam step updates the moments as Kingma and Ba, and the errors (an op
 * without a rule, an unsupported form, a bad loss) leave the module as it
 * was and say why.
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
#include "xform/autodiff.h"
#include "support/support.h"

#define RTOL 1e-3
#define ATOL 1e-7
#define EPS 1e-6

/* ---- helpers ---- */

/* The loss of forward module f (its only result) at args. */
static double
loss_at(const ir_module *f, const ex_tensor *args, uint32_t nargs)
{
    ex_tensor *res;
    uint32_t nres;
    double l;
    run_ok(f, args, nargs, &res, &nres);
    l = ex_get(&res[nres - 1], 0);
    free_tensors(res, nres);
    return l;
}

/* The value id of f's only result (the loss). */
static ir_id
loss_of(const ir_module *f)
{
    const ir_region *r = &f->regions[ir_module_entry(f)];
    assert_int_equal(r->nresult, 1);
    return r->results[0];
}

/*
 * Checks autodiff's gradients of forward module f (entry function, one
 * result: the loss) against central differences: every element, or at most
 * max_per_arg spread over each trainable argument. bound limits integer
 * arguments (labels, tokens). Frees f.
 */
static void
fd_check(ir_module *f, int64_t bound, uint32_t max_per_arg, const char *what)
{
    ir_module *g = ir_module_clone(f);
    ir_id func = ir_module_entry(f);
    xform_autodiff_opts o;
    di_error err;
    ex_tensor *args, *res;
    uint32_t nargs, nres, k = 0, checked = 0;
    double worst = 0;
    const ir_region *r;
    xform_autodiff_opts_init(&o);
    o.optimizer = XFORM_OPTIM_NONE;
    di_error_clear(&err);
    if (xform_autodiff(g, func, loss_of(f), &o, &err) != 0) {
        fprintf(stderr, "%s: autodiff: %s\n", what, err.msg);
        fail();
    }
    assert_verifies(g);
    assert_int_equal(ex_random_args(f, 7, bound, &args, &nargs, &err), 0);
    /* Moderate magnitudes keep softmax and layer norm away from saturation. */
    for (uint32_t i = 0; i < nargs; i++)
        if (ir_dtype_is_float(args[i].dtype))
            for (size_t e = 0; e < args[i].numel; e++)
                ex_set(&args[i], e, ex_get(&args[i], e) * 0.8);
    run_ok(g, args, nargs, &res, &nres);
    r = &f->regions[func];
    for (uint32_t a = 0; a < r->narg; a++) {
        ir_id v = r->args[a];
        ex_tensor *t = &args[a], *gt;
        size_t step;
        if (!ir_dtype_is_float((ir_dtype)f->types[f->values[v].type].dtype) ||
            xform_autodiff_is_data_name(NULL, ir_str_get(f, f->values[v].name)))
            continue;
        assert_true(k < nres - 1);
        gt = &res[k++];
        assert_int_equal(gt->numel, t->numel);
        step = max_per_arg && t->numel > max_per_arg ? t->numel / max_per_arg : 1;
        for (size_t e = 0; e < t->numel; e += step) {
            double w = ex_get(t, e), lp, lm, fd, an, err_rel;
            ex_set(t, e, w + EPS);
            lp = loss_at(f, args, nargs);
            ex_set(t, e, w - EPS);
            lm = loss_at(f, args, nargs);
            ex_set(t, e, w);
            fd = (lp - lm) / (2 * EPS);
            an = ex_get(gt, e);
            err_rel = fabs(an - fd) / fmax(fmax(fabs(an), fabs(fd)), 1e-300);
            if (fmax(fabs(an), fabs(fd)) > 1e-6 && err_rel > worst)
                worst = err_rel;
            if (fabs(an - fd) > ATOL + RTOL * fmax(fabs(an), fabs(fd))) {
                fprintf(stderr, "%s: d loss / d %s[%zu] = %.10g by autodiff, %.10g by finite "
                        "differences\n", what, ir_str_get(f, f->values[v].name), e, an, fd);
                fail();
            }
            checked++;
        }
    }
    assert_int_equal(k, nres - 1);
    assert_true(checked > 0);
    printf("%-24s %4u gradient elements of %u weights match (worst relative error %.2g)\n",
           what, checked, k, worst);
    free_tensors(res, nres);
    free_tensors(args, nargs);
    ir_module_free(g);
    ir_module_free(f);
}

/* ---- small modules, one per rule ---- */

typedef struct fixture {
    ir_module *m;
    models_builder b;
    di_error err;
} fixture;

static void
fx_init(fixture *fx)
{
    fx->m = ir_module_new();
    di_error_clear(&fx->err);
    models_builder_init(&fx->b, fx->m, "f", &fx->err);
    fx->b.annotate = 0;
}

static ir_id
weight(fixture *fx, const char *name, uint32_t rank, const int64_t *dims)
{
    return models_arg(&fx->b, name, IR_F64, rank, dims);
}

static ir_id
op2(fixture *fx, int kind, ir_id x, ir_id y)
{
    ir_id in[2] = {x, y};
    return models_op(&fx->b, kind, 2, in, NULL);
}

static ir_id
op1(fixture *fx, int kind, ir_id x)
{
    return models_op(&fx->b, kind, 1, &x, NULL);
}

static ir_id
scalar(fixture *fx, double v)
{
    return models_scalar(&fx->b, IR_F64, v);
}

/* x * x + 0.5: strictly positive, for Sqrt, Pow and Div. */
static ir_id
positive(fixture *fx, ir_id x)
{
    return op2(fx, IR_OP_ADD, op2(fx, IR_OP_MUL, x, x), scalar(fx, 0.5));
}

/* Ends the module with MSELoss(y, target) against a random data target; returns it for fd_check. */
static ir_module *
finish_mse(fixture *fx, ir_id y)
{
    const ir_type *t;
    int64_t dims[IR_MAX_RANK];
    ir_id target, loss;
    assert_int_equal(fx->b.rc, 0);
    t = &fx->m->types[fx->m->values[y].type];
    memcpy(dims, fx->m->ints + t->dims, t->rank * sizeof dims[0]);
    target = models_arg(&fx->b, "target", IR_F64, t->rank, dims);
    loss = op2(fx, IR_OP_MSELOSS, y, target);
    if (fx->b.rc != 0) {
        fprintf(stderr, "build: %s\n", fx->err.msg);
        fail();
    }
    ir_region_add_result(fx->m, fx->b.func, loss);
    return fx->m;
}

static ir_id
with_attr_ints(fixture *fx, int kind, ir_id x, const char *key, uint32_t n, const int64_t *v)
{
    ir_id op = models_begin(&fx->b, kind, 1, &x, 1, NULL);
    if (op)
        ir_op_set_ints(fx->m, op, key, n, v);
    return models_end(&fx->b, op);
}

static void
test_elementwise(void **state)
{
    static const int kinds[] = {IR_OP_ADD, IR_OP_SUB, IR_OP_MUL, IR_OP_DIV};
    static const char *const names[] = {"Add", "Sub", "Mul", "Div"};
    (void)state;
    for (int k = 0; k < 4; k++)
        for (int bcast = 0; bcast < 3; bcast++) {
            fixture fx;
            int64_t d23[2] = {2, 3}, d3[1] = {3}, d21[2] = {2, 1};
            ir_id a, b, y;
            char what[64];
            fx_init(&fx);
            a = weight(&fx, "a", 2, d23);
            b = bcast == 0 ? weight(&fx, "b", 2, d23)
                : bcast == 1 ? weight(&fx, "b", 1, d3) : weight(&fx, "b", 2, d21);
            if (kinds[k] == IR_OP_DIV)
                b = positive(&fx, b);
            /* Both operands used twice: gradients accumulate. */
            y = op2(&fx, kinds[k], a, b);
            y = op2(&fx, IR_OP_MUL, y, a);
            snprintf(what, sizeof what, "%s broadcast %d", names[k], bcast);
            fd_check(finish_mse(&fx, y), 0, 0, what);
        }
}

static void
test_unary(void **state)
{
    /*
     * Swish twice: SiLU (alpha 1, no attribute), then alpha 1.702 (kept by
     * SwishGrad); Gelu twice, the second with approximate "tanh" (kept by GeluGrad).
     */
    static const int kinds[] = {IR_OP_RELU, IR_OP_GELU,    IR_OP_SWISH, IR_OP_SWISH,
                                IR_OP_TANH, IR_OP_SIGMOID, IR_OP_SQRT,  IR_OP_ERF,
                                IR_OP_IDENTITY, IR_OP_POW, IR_OP_GELU};
    static const char *const names[] = {"Relu",    "Gelu", "Swish", "Swish alpha 1.702",
                                        "Tanh",    "Sigmoid", "Sqrt", "Erf",
                                        "Identity", "Pow",  "Gelu approximate tanh"};
    (void)state;
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        fixture fx;
        int64_t d[2] = {3, 4};
        ir_id x, y;
        fx_init(&fx);
        x = weight(&fx, "w", 2, d);
        if (kinds[k] == IR_OP_SQRT)
            y = op1(&fx, IR_OP_SQRT, positive(&fx, x));
        else if (kinds[k] == IR_OP_POW)
            y = op2(&fx, IR_OP_POW, positive(&fx, x), scalar(&fx, 1.5));
        else
            y = op1(&fx, kinds[k], x);
        if (k == 3)
            ir_op_set_float(fx.m, fx.m->values[y].def, "alpha", 1.702);
        if (k == 10)
            ir_op_set_string(fx.m, fx.m->values[y].def, "approximate", "tanh");
        fd_check(finish_mse(&fx, y), 0, 0, names[k]);
    }
}

/*
 * SwiGLU, Swish(g) * u: the gradients match finite differences, and the
 * backward reads g (SwishGrad, and a Swish made again for u's gradient) but
 * never the forward Swish's result, which is then not kept for it.
 */
static void
test_swiglu_recompute(void **state)
{
    fixture fx;
    int64_t d[2] = {3, 4};
    ir_id g, u, s, y, ad;
    uint32_t swish = 0, reads = 0;
    ir_module *m;
    xform_autodiff_opts o;
    (void)state;
    fx_init(&fx);
    g = weight(&fx, "g", 2, d);
    u = weight(&fx, "u", 2, d);
    s = op1(&fx, IR_OP_SWISH, g);
    y = op2(&fx, IR_OP_MUL, s, u);
    m = ir_module_clone(finish_mse(&fx, y));
    fd_check(fx.m, 0, 0, "SwiGLU"); /* frees fx.m */
    xform_autodiff_opts_init(&o);
    o.optimizer = XFORM_OPTIM_NONE;
    assert_int_equal(xform_autodiff(m, ir_module_entry(m), loss_of(m), &o, &fx.err), 0);
    ad = m->values[y].def;
    for (uint32_t i = 1; i < m->nop; i++) {
        if (i <= ad)
            continue; /* the forward ops */
        swish += m->ops[i].kind == IR_OP_SWISH && ir_op_input(m, i, 0) == g;
        for (uint32_t k = 0; k < m->ops[i].ninput; k++)
            reads += ir_op_input(m, i, k) == s;
    }
    assert_int_equal(swish, 1);
    assert_int_equal(reads, 0);
    ir_module_free(m);
}

/*
 * FlashAttention's output merged to [b, s, h] (a Transpose and a Reshape)
 * times a weight: the gradients match finite differences, and the weight's
 * gradient reads the merge made again from the output (which
 * FlashAttentionGrad reads anyway), not the forward's merged copy.
 */
static void
test_attention_merge_recompute(void **state)
{
    fixture fx;
    int64_t dq[4] = {1, 2, 3, 2}, dw[2] = {4, 3}, perm[4] = {0, 2, 1, 3}, merged[3] = {0, 0, -1};
    ir_id in[3], op, o, t, r, y, mm;
    uint32_t transposes = 0, reads = 0;
    ir_module *m;
    xform_autodiff_opts o2;
    (void)state;
    fx_init(&fx);
    in[0] = weight(&fx, "q", 4, dq);
    in[1] = weight(&fx, "k", 4, dq);
    in[2] = weight(&fx, "v", 4, dq);
    op = models_begin(&fx.b, IR_OP_FLASHATTN, 3, in, 2, NULL);
    ir_op_set_int(fx.m, op, "causal", 1);
    ir_op_set_float(fx.m, op, "scale", 0.7);
    o = models_end(&fx.b, op);
    t = with_attr_ints(&fx, IR_OP_TRANSPOSE, o, "perm", 4, perm);
    r = with_attr_ints(&fx, IR_OP_RESHAPE, t, "shape", 3, merged);
    y = op2(&fx, IR_OP_MATMUL, r, weight(&fx, "w", 2, dw));
    mm = fx.m->values[y].def;
    m = ir_module_clone(finish_mse(&fx, y));
    fd_check(fx.m, 0, 0, "FlashAttention, merge, MatMul"); /* frees fx.m */
    xform_autodiff_opts_init(&o2);
    o2.optimizer = XFORM_OPTIM_NONE;
    assert_int_equal(xform_autodiff(m, ir_module_entry(m), loss_of(m), &o2, &fx.err), 0);
    for (uint32_t i = mm + 2; i < m->nop; i++) { /* the ops after the MatMul and the loss */
        transposes += m->ops[i].kind == IR_OP_TRANSPOSE && ir_op_input(m, i, 0) == o;
        for (uint32_t k = 0; k < m->ops[i].ninput; k++)
            reads += ir_op_input(m, i, k) == r || ir_op_input(m, i, k) == t;
    }
    assert_int_equal(transposes, 1);
    assert_int_equal(reads, 0);
    ir_module_free(m);
}

static void
test_gemm(void **state)
{
    (void)state;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            for (int c = 0; c < 3; c++) {
                fixture fx;
                int64_t da[2] = {ta ? 3 : 2, ta ? 2 : 3}, db[2] = {tb ? 4 : 3, tb ? 3 : 4};
                int64_t dc2[2] = {2, 4}, dc1[1] = {4};
                ir_id in[3], op, y;
                char what[64];
                fx_init(&fx);
                in[0] = weight(&fx, "A", 2, da);
                in[1] = weight(&fx, "B", 2, db);
                if (c)
                    in[2] = c == 1 ? weight(&fx, "C", 2, dc2) : weight(&fx, "C", 1, dc1);
                op = models_begin(&fx.b, IR_OP_GEMM, c ? 3 : 2, in, 1, NULL);
                ir_op_set_int(fx.m, op, "transA", ta);
                ir_op_set_int(fx.m, op, "transB", tb);
                ir_op_set_float(fx.m, op, "alpha", 0.7);
                ir_op_set_float(fx.m, op, "beta", 1.3);
                y = models_end(&fx.b, op);
                snprintf(what, sizeof what, "Gemm tA%d tB%d C%d", ta, tb, c);
                fd_check(finish_mse(&fx, y), 0, 0, what);
            }
}

static void
test_matmul(void **state)
{
    fixture fx;
    int64_t da[3] = {2, 3, 4}, db[2] = {4, 5}, dc[3] = {2, 5, 3};
    ir_id a, b, c, y;
    (void)state;
    /* Batched with a broadcast weight, then batched with both operands trained. */
    fx_init(&fx);
    a = weight(&fx, "a", 3, da);
    b = weight(&fx, "b", 2, db);
    c = weight(&fx, "c", 3, dc);
    y = op2(&fx, IR_OP_MATMUL, a, b);
    y = op2(&fx, IR_OP_MATMUL, y, c);
    fd_check(finish_mse(&fx, y), 0, 0, "MatMul");
}

static void
test_softmax_layernorm(void **state)
{
    (void)state;
    for (int axis = -1; axis <= 1; axis += 2) {
        fixture fx;
        int64_t d[3] = {2, 3, 4};
        ir_id x, op, y;
        fx_init(&fx);
        x = weight(&fx, "w", 3, d);
        op = models_begin(&fx.b, IR_OP_SOFTMAX, 1, &x, 1, NULL);
        ir_op_set_int(fx.m, op, "axis", axis);
        y = models_end(&fx.b, op);
        fd_check(finish_mse(&fx, y), 0, 0, axis < 0 ? "Softmax axis -1" : "Softmax axis 1");
    }
    for (int variant = 0; variant < 4; variant++) {
        /* 2 or 3 inputs, 1 or 3 outputs. */
        fixture fx;
        int64_t d[3] = {2, 3, 4}, ds[1] = {4};
        ir_id in[3], op, y;
        uint32_t nin = variant & 1 ? 3 : 2, nout = variant & 2 ? 3 : 1;
        char what[64];
        fx_init(&fx);
        in[0] = weight(&fx, "w", 3, d);
        in[1] = weight(&fx, "scale", 1, ds);
        in[2] = weight(&fx, "bias", 1, ds);
        op = models_begin(&fx.b, IR_OP_LAYERNORM, nin, in, nout, NULL);
        ir_op_set_int(fx.m, op, "axis", -1);
        y = models_end(&fx.b, op);
        snprintf(what, sizeof what, "LayerNorm in%u out%u", nin, nout);
        fd_check(finish_mse(&fx, y), 0, 0, what);
    }
    for (uint32_t nout = 1; nout <= 2; nout++) {
        /* RMSNormalization: 1 result, or 2 (the inverse root mean square, saved). */
        fixture fx;
        int64_t d[3] = {2, 3, 4}, ds[1] = {4};
        ir_id in[2], op, y;
        char what[64];
        fx_init(&fx);
        in[0] = weight(&fx, "w", 3, d);
        in[1] = weight(&fx, "scale", 1, ds);
        op = models_begin(&fx.b, IR_OP_RMSNORM, 2, in, nout, NULL);
        ir_op_set_int(fx.m, op, "axis", -1);
        y = models_end(&fx.b, op);
        snprintf(what, sizeof what, "RMSNorm out%u", nout);
        fd_check(finish_mse(&fx, y), 0, 0, what);
    }
}

static void
test_shapes(void **state)
{
    int64_t d[3] = {2, 3, 4};
    (void)state;
    {
        fixture fx;
        int64_t shape[2] = {0, -1}, perm[3] = {2, 0, 1};
        ir_id x;
        fx_init(&fx);
        x = weight(&fx, "w", 3, d);
        x = with_attr_ints(&fx, IR_OP_TRANSPOSE, x, "perm", 3, perm);
        x = with_attr_ints(&fx, IR_OP_RESHAPE, x, "shape", 2, shape);
        fd_check(finish_mse(&fx, x), 0, 0, "Transpose, Reshape");
    }
    {
        fixture fx;
        int64_t axes[2] = {0, 3}, sq[1] = {0};
        ir_id x;
        fx_init(&fx);
        x = weight(&fx, "w", 3, d);
        x = with_attr_ints(&fx, IR_OP_UNSQUEEZE, x, "axes", 2, axes);
        x = with_attr_ints(&fx, IR_OP_SQUEEZE, x, "axes", 1, sq);
        x = op1(&fx, IR_OP_SQUEEZE, x);
        fd_check(finish_mse(&fx, x), 0, 0, "Unsqueeze, Squeeze");
    }
    {
        /* Split into three, one part unused; Concat of two weights. */
        fixture fx;
        int64_t d2[3] = {2, 2, 4};
        ir_id x, in[2], op, parts, y;
        fx_init(&fx);
        in[0] = weight(&fx, "w", 3, d);
        in[1] = weight(&fx, "v", 3, d2);
        op = models_begin(&fx.b, IR_OP_CONCAT, 2, in, 1, NULL);
        ir_op_set_int(fx.m, op, "axis", 1);
        x = models_end(&fx.b, op);
        op = models_begin(&fx.b, IR_OP_SPLIT, 1, &x, 3, NULL);
        ir_op_set_int(fx.m, op, "axis", -2);
        ir_op_set_ints(fx.m, op, "split", 3, (int64_t[]){1, 3, 1});
        parts = models_end(&fx.b, op);
        y = op2(&fx, IR_OP_MUL, parts + 1, parts + 1);
        y = op2(&fx, IR_OP_ADD, y, parts + 2);
        fd_check(finish_mse(&fx, y), 0, 0, "Concat, Split");
    }
    {
        fixture fx;
        ir_id x, op;
        fx_init(&fx);
        x = weight(&fx, "w", 3, d);
        op = models_begin(&fx.b, IR_OP_SLICE, 1, &x, 1, NULL);
        ir_op_set_ints(fx.m, op, "starts", 2, (int64_t[]){1, -3});
        ir_op_set_ints(fx.m, op, "ends", 2, (int64_t[]){3, 3});
        ir_op_set_ints(fx.m, op, "axes", 2, (int64_t[]){1, -1});
        x = models_end(&fx.b, op);
        fd_check(finish_mse(&fx, x), 0, 0, "Slice");
    }
}

static void
test_reduce_where_cast(void **state)
{
    int64_t d[3] = {2, 3, 4};
    (void)state;
    for (int kind = 0; kind < 2; kind++)
        for (int keep = 0; keep < 2; keep++)
            for (int all = 0; all < 2; all++) {
                fixture fx;
                ir_id x, op;
                char what[64];
                fx_init(&fx);
                x = weight(&fx, "w", 3, d);
                op = models_begin(&fx.b, kind ? IR_OP_REDUCEMEAN : IR_OP_REDUCESUM, 1, &x, 1,
                                  NULL);
                if (!all)
                    ir_op_set_ints(fx.m, op, "axes", 2, (int64_t[]){0, -1});
                ir_op_set_int(fx.m, op, "keepdims", keep);
                x = models_end(&fx.b, op);
                snprintf(what, sizeof what, "%s keep%d all%d", kind ? "ReduceMean" : "ReduceSum",
                         keep, all);
                fd_check(finish_mse(&fx, x), 0, 0, what);
            }
    {
        /* Where with a data condition, then Cast (f64 to f64: a round trip through f32 would
         * be too coarse for finite differences). */
        fixture fx;
        int64_t d1[1] = {4};
        ir_id c, a, b, in[3], y, op;
        fx_init(&fx);
        c = models_arg(&fx.b, "mask", IR_BOOL, 3, d);
        a = weight(&fx, "a", 3, d);
        b = weight(&fx, "b", 1, d1);
        in[0] = c;
        in[1] = a;
        in[2] = b;
        y = models_op(&fx.b, IR_OP_WHERE, 3, in, NULL);
        op = models_begin(&fx.b, IR_OP_CAST, 1, &y, 1, NULL);
        ir_op_set_int(fx.m, op, "to", 11);
        y = models_end(&fx.b, op);
        fd_check(finish_mse(&fx, y), 2, 0, "Where, Cast");
    }
    {
        fixture fx;
        int64_t dw[2] = {5, 3}, di[2] = {2, 4};
        ir_id w, idx;
        fx_init(&fx);
        w = weight(&fx, "w", 2, dw);
        idx = models_arg(&fx.b, "tokens", IR_I64, 2, di);
        fd_check(finish_mse(&fx, op2(&fx, IR_OP_GATHER, w, idx)), 5, 0, "Gather");
    }
}

/* SoftmaxCrossEntropyLoss directly as the loss, mean and sum. */
static void
test_sce(void **state)
{
    (void)state;
    for (int sum = 0; sum < 2; sum++) {
        fixture fx;
        int64_t d[2] = {6, 5}, dl[1] = {6};
        ir_id lg, lb, op, loss;
        fx_init(&fx);
        lg = weight(&fx, "w", 2, d);
        lb = models_arg(&fx.b, "labels", IR_I64, 1, dl);
        op = models_begin(&fx.b, IR_OP_SCELOSS, 2, (ir_id[]){lg, lb}, 1, NULL);
        ir_op_set_string(fx.m, op, "reduction", sum ? "sum" : "mean");
        loss = models_end(&fx.b, op);
        ir_region_add_result(fx.m, fx.b.func, loss);
        fd_check(fx.m, 5, 0, sum ? "SCE sum" : "SCE mean");
    }
}

/* ---- whole models ---- */

static void
test_mlp(void **state)
{
    (void)state;
    for (int v = 0; v < 4; v++) {
        models_mlp c;
        ir_module *m;
        di_error err;
        char what[64];
        models_mlp_init(&c);
        c.layers = 3;
        c.hidden = 6;
        c.input = 4;
        c.classes = 3;
        c.batch = 5;
        c.dtype = IR_F64;
        c.act = v & 1 ? MODELS_ACT_GELU : MODELS_ACT_RELU;
        c.loss = v & 2 ? MODELS_LOSS_MSE : MODELS_LOSS_SCE;
        c.train.forward_only = 1;
        assert_int_equal(models_mlp_build(&c, &m, &err), 0);
        snprintf(what, sizeof what, "MLP %s %s", v & 1 ? "gelu" : "relu", v & 2 ? "mse" : "sce");
        fd_check(m, c.classes, 0, what);
    }
}

static void
test_tiny_gpt(void **state)
{
    (void)state;
    for (int v = 0; v < 4; v++) {
        models_gpt c;
        ir_module *m;
        di_error err;
        char what[64];
        models_gpt_init(&c);
        c.layers = v == 3 ? 2 : 1;
        c.hidden = 8;
        c.heads = 2;
        c.seq = 4;
        c.vocab = 11;
        c.batch = 2;
        c.dtype = IR_F64;
        c.dropout = v == 1 ? 0.1 : 0.0;
        c.final_ln_params = v == 2;
        c.train.forward_only = 1;
        assert_int_equal(models_gpt_build(&c, &m, &err), 0);
        snprintf(what, sizeof what, "GPT l%u%s%s", c.layers, v == 1 ? " dropout" : "",
                 v == 2 ? " ln_f params" : "");
        fd_check(m, c.vocab, v == 3 ? 12 : 0, what);
    }
}

/* ---- optimizer steps ---- */

/* Runs a 2-layer f64 MLP with the given optimizer and with none; returns both results. */
static void
mlp_step(xform_optim opt, double lr, ir_module **mo, ex_tensor **args, uint32_t *nargs,
         ex_tensor **grads, uint32_t *ngrads, ex_tensor **upd, uint32_t *nupd)
{
    models_mlp c;
    ir_module *mg;
    di_error err;
    models_mlp_init(&c);
    c.layers = 2;
    c.hidden = 5;
    c.input = 3;
    c.classes = 4;
    c.batch = 6;
    c.dtype = IR_F64;
    c.train.optimizer = XFORM_OPTIM_NONE;
    assert_int_equal(models_mlp_build(&c, &mg, &err), 0);
    c.train.optimizer = opt;
    c.train.lr = lr;
    assert_int_equal(models_mlp_build(&c, mo, &err), 0);
    assert_verifies(*mo);
    /* Random values for every argument of the optimizing module (Adam adds moments). */
    assert_int_equal(ex_random_args(*mo, 11, c.classes, args, nargs, &err), 0);
    run_ok(mg, *args, ex_num_args(mg), grads, ngrads);
    run_ok(*mo, *args, *nargs, upd, nupd);
    ir_module_free(mg);
}

static void
test_sgd_step(void **state)
{
    ir_module *m;
    ex_tensor *args, *g, *u;
    uint32_t nargs, ng, nu;
    (void)state;
    mlp_step(XFORM_OPTIM_SGD, 0.25, &m, &args, &nargs, &g, &ng, &u, &nu);
    assert_int_equal(ng, nu);
    assert_int_equal(nu, 5); /* 4 weights + loss */
    for (uint32_t i = 0; i < 4; i++)
        for (size_t e = 0; e < u[i].numel; e++)
            assert_true(fabs(ex_get(&u[i], e) -
                             (ex_get(&args[2 + i], e) - 0.25 * ex_get(&g[i], e))) < 1e-12);
    assert_true(fabs(ex_get(&u[4], 0) - ex_get(&g[4], 0)) < 1e-12);
    free_tensors(args, nargs);
    free_tensors(g, ng);
    free_tensors(u, nu);
    ir_module_free(m);
}

static void
test_adam_step(void **state)
{
    ir_module *m;
    ex_tensor *args, *g, *u;
    uint32_t nargs, ng, nu;
    const ir_region *r;
    (void)state;
    mlp_step(XFORM_OPTIM_ADAM, 0.01, &m, &args, &nargs, &g, &ng, &u, &nu);
    r = &m->regions[ir_module_entry(m)];
    /* x, labels, 4 weights, 4 first moments, 4 second moments. */
    assert_int_equal(nargs, 14);
    assert_string_equal(ir_str_get(m, m->values[r->args[6]].name), "l0.w.adam_m");
    assert_string_equal(ir_str_get(m, m->values[r->args[13]].name), "l1.b.adam_v");
    assert_int_equal(nu, 13); /* 4 weights, 4 m, 4 v, loss */
    for (uint32_t i = 0; i < 4; i++)
        for (size_t e = 0; e < u[i].numel; e++) {
            double gr = ex_get(&g[i], e), m0 = ex_get(&args[6 + i], e);
            double v0 = ex_get(&args[10 + i], e);
            assert_true(fabs(ex_get(&u[4 + i], e) - (0.9 * m0 + 0.1 * gr)) < 1e-12);
            assert_true(fabs(ex_get(&u[8 + i], e) - (0.999 * v0 + 0.001 * gr * gr)) < 1e-12);
            assert_true(ex_get(&u[i], e) != ex_get(&args[2 + i], e) || gr == 0);
        }
    free_tensors(args, nargs);
    free_tensors(g, ng);
    free_tensors(u, nu);
    ir_module_free(m);
}

/* ---- errors ---- */

/* Autodiff on f must fail with code, a message containing want, and leave f unchanged. */
static void
expect_error(ir_module *f, const xform_autodiff_opts *o, int code, const char *want)
{
    uint32_t nop = f->nop, nvalue = f->nvalue, narg = f->regions[ir_module_entry(f)].narg;
    di_error err;
    di_error_clear(&err);
    assert_int_equal(xform_autodiff(f, ir_module_entry(f), loss_of(f), o, &err), code);
    if (strstr(err.msg, want) == NULL) {
        fprintf(stderr, "message '%s' lacks '%s'\n", err.msg, want);
        fail();
    }
    assert_int_equal(f->nop, nop);
    assert_int_equal(f->nvalue, nvalue);
    assert_int_equal(f->regions[ir_module_entry(f)].narg, narg);
    ir_module_free(f);
}

static void
test_errors(void **state)
{
    int64_t d[2] = {2, 3};
    xform_autodiff_opts o;
    (void)state;
    {
        /* ReluGrad has no gradient rule. */
        fixture fx;
        ir_id w, x;
        fx_init(&fx);
        w = weight(&fx, "w", 2, d);
        x = models_arg(&fx.b, "x", IR_F64, 2, d);
        expect_error(finish_mse(&fx, op2(&fx, IR_OP_RELUGRAD, x, w)), NULL, DI_EUNSUPPORTED,
                     "no gradient rule for ReluGrad");
    }
    {
        fixture fx;
        ir_id w;
        fx_init(&fx);
        w = weight(&fx, "w", 2, d);
        expect_error(finish_mse(&fx, op2(&fx, IR_OP_POW, scalar(&fx, 2.0), w)), NULL,
                     DI_EUNSUPPORTED, "trainable exponent");
    }
    {
        fixture fx;
        ir_id w, op;
        fx_init(&fx);
        w = weight(&fx, "w", 2, d);
        op = models_begin(&fx.b, IR_OP_SLICE, 1, &w, 1, NULL);
        ir_op_set_ints(fx.m, op, "starts", 1, (int64_t[]){0});
        ir_op_set_ints(fx.m, op, "ends", 1, (int64_t[]){3});
        ir_op_set_ints(fx.m, op, "axes", 1, (int64_t[]){1});
        ir_op_set_ints(fx.m, op, "steps", 1, (int64_t[]){2});
        expect_error(finish_mse(&fx, models_end(&fx.b, op)), NULL, DI_EUNSUPPORTED, "step 2");
    }
    {
        /* A loss that no weight influences. */
        fixture fx;
        fx_init(&fx);
        weight(&fx, "w", 2, d);
        expect_error(finish_mse(&fx, models_arg(&fx.b, "x", IR_F64, 2, d)), NULL, DI_EINVAL,
                     "does not depend");
    }
    {
        fixture fx;
        ir_id w;
        fx_init(&fx);
        w = weight(&fx, "w", 2, d);
        xform_autodiff_opts_init(&o);
        o.trainable = (const char *const[]){"nope"};
        o.ntrainable = 1;
        expect_error(finish_mse(&fx, op1(&fx, IR_OP_TANH, w)), &o, DI_EINVAL, "'nope'");
    }
    {
        /* A non-scalar loss. */
        fixture fx;
        ir_id w;
        fx_init(&fx);
        w = weight(&fx, "w", 2, d);
        ir_region_add_result(fx.m, fx.b.func, op1(&fx, IR_OP_TANH, w));
        expect_error(fx.m, NULL, DI_EINVAL, "scalar");
    }
}

/* Only the listed arguments are trained; a data-named argument is not. */
static void
test_trainable_list(void **state)
{
    fixture fx;
    int64_t d[2] = {2, 3};
    ir_id a, b, x, y;
    xform_autodiff_opts o;
    di_error err;
    const ir_region *r;
    (void)state;
    fx_init(&fx);
    a = weight(&fx, "a", 2, d);
    b = weight(&fx, "b", 2, d);
    x = models_arg(&fx.b, "x", IR_F64, 2, d);
    y = op2(&fx, IR_OP_MUL, op2(&fx, IR_OP_MUL, a, b), x);
    finish_mse(&fx, y);
    xform_autodiff_opts_init(&o);
    o.trainable = (const char *const[]){"b"};
    o.ntrainable = 1;
    assert_int_equal(xform_autodiff(fx.m, fx.b.func, loss_of(fx.m), &o, &err), 0);
    r = &fx.m->regions[fx.b.func];
    assert_int_equal(r->nresult, 2);
    assert_string_equal(ir_str_get(fx.m, fx.m->values[r->results[0]].name), "b.new");
    assert_int_equal(fx.m->ops[fx.m->values[r->results[0]].def].kind, IR_OP_SGD);
    assert_verifies(fx.m);
    ir_module_free(fx.m);
}

static void
test_scalar_bytes(void **state)
{
    uint8_t b[8];
    (void)state;
    assert_int_equal(xform_scalar_bytes(IR_F16, 1.0, b), 2);
    assert_int_equal(b[0] | b[1] << 8, 0x3c00);
    xform_scalar_bytes(IR_F16, -2.5, b);
    assert_int_equal(b[0] | b[1] << 8, 0xc100);
    xform_scalar_bytes(IR_F16, 65504.0, b);
    assert_int_equal(b[0] | b[1] << 8, 0x7bff);
    xform_scalar_bytes(IR_F16, 1e6, b);
    assert_int_equal(b[0] | b[1] << 8, 0x7c00);
    xform_scalar_bytes(IR_F16, 5.960464477539063e-08, b); /* smallest subnormal */
    assert_int_equal(b[0] | b[1] << 8, 0x0001);
    assert_int_equal(xform_scalar_bytes(IR_BF16, 1.0, b), 2);
    assert_int_equal(b[0] | b[1] << 8, 0x3f80);
    xform_scalar_bytes(IR_BF16, -1e4, b);
    assert_int_equal(b[0] | b[1] << 8, 0xc61c);
    assert_int_equal(ir_dtype_onnx(IR_BF16), 16);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scalar_bytes),
        cmocka_unit_test(test_elementwise),
        cmocka_unit_test(test_unary),
        cmocka_unit_test(test_swiglu_recompute),
        cmocka_unit_test(test_attention_merge_recompute),
        cmocka_unit_test(test_gemm),
        cmocka_unit_test(test_matmul),
        cmocka_unit_test(test_softmax_layernorm),
        cmocka_unit_test(test_shapes),
        cmocka_unit_test(test_reduce_where_cast),
        cmocka_unit_test(test_sce),
        cmocka_unit_test(test_mlp),
        cmocka_unit_test(test_tiny_gpt),
        cmocka_unit_test(test_sgd_step),
        cmocka_unit_test(test_adam_step),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_trainable_list),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
