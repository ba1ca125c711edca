/*
 * test_exec.c: the reference executors. Kernels are checked against values
 * computed by hand (a small MatMul, softmax rows summing to one, layer
 * normalization giving mean 0 and unit variance), every gradient op against
 * a central finite difference of its forward op (in f64, so that the
 * difference is precise), broadcasting, the distributed executor against the
 * sequential one (scatter, pmap, mesh-form all_reduce, gather; a pmap over
 * a mesh with distributed tensors; pmaps calling a function; the tuple-form
 * collectives by hand), and
 * the .npy reader and writer (round trips and malformed headers).
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
#include <time.h>
#include <unistd.h>

#include "exec/exec.h"
#include "exec/exec_int.h"
#include "ir/ir.h"
#include "support/support.h"

/* ---- building one-op modules ---- */

static ir_id
ty(ir_module *m, ir_dtype dt, uint32_t rank, const int64_t *dims)
{
    return ir_type_tensor(m, dt, rank, dims, 0);
}

/* A module "main" with the given argument types; returns the function id. */
static ir_id
func(ir_module *m, uint32_t n, const ir_id *types, ir_id *args)
{
    ir_id f = ir_func_new(m, "main");
    for (uint32_t i = 0; i < n; i++) {
        char name[16];
        snprintf(name, sizeof name, "a%u", i);
        args[i] = ir_region_add_arg(m, f, types[i], name);
    }
    return f;
}

/* Infers the op's result types (failing the test on error) and returns them as results. */
static void
finish(ir_module *m, ir_id f, ir_id op, int as_results)
{
    di_error err;
    di_error_clear(&err);
    if (ir_op_infer_results(m, op, &err) != 0)
        fail_msg("infer: %s", err.msg);
    for (uint32_t i = 0; i < m->ops[op].noutput && as_results; i++)
        ir_region_add_result(m, f, ir_op_output(m, op, i));
}

static void
tensor_f(ex_tensor *t, ir_dtype dt, uint32_t rank, const int64_t *dims, const double *v)
{
    assert_int_equal(ex_tensor_init(t, dt, rank, dims), 0);
    for (size_t i = 0; i < t->numel; i++)
        ex_set(t, i, v ? v[i] : 0.0);
}

/* Deterministic values in [-1, 1). */
static void
tensor_rand(ex_tensor *t, ir_dtype dt, uint32_t rank, const int64_t *dims, uint64_t seed)
{
    assert_int_equal(ex_tensor_init(t, dt, rank, dims), 0);
    for (size_t i = 0; i < t->numel; i++) {
        uint64_t h = di_splitmix64(seed * 7919 + i);
        ex_set(t, i, (double)(h >> 11) / 9007199254740992.0 * 2.0 - 1.0);
    }
}

static void
free_args(ex_tensor *a, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        ex_tensor_fini(&a[i]);
}

/*
 * Runs a one-op module of kind with inputs in[] (attributes set by fn) and
 * returns result `which` in *out.
 */
typedef void (*attr_fn)(ir_module *m, ir_id op);

static void
run_op(int kind, uint32_t nin, const ex_tensor *in, uint32_t nout, attr_fn fn, uint32_t which,
       ex_tensor *out)
{
    ir_module *m = ir_module_new();
    ir_id types[8], args[8], f, op;
    ex_tensor *res;
    uint32_t nres;
    for (uint32_t i = 0; i < nin; i++)
        types[i] = ty(m, in[i].dtype, in[i].rank, in[i].dims);
    f = func(m, nin, types, args);
    op = ir_op_add(m, f, kind, nin, args, nout, NULL, NULL);
    if (fn)
        fn(m, op);
    finish(m, f, op, 1);
    run_ok(m, in, nin, &res, &nres);
    assert_true(which < nres);
    *out = res[which];
    for (uint32_t i = 0; i < nres; i++)
        if (i != which)
            ex_tensor_fini(&res[i]);
    di_free(res);
    ir_module_free(m);
}

static void
assert_close(double got, double want, double tol)
{
    if (!(fabs(got - want) <= tol * (1.0 + fabs(want))))
        fail_msg("got %.9g, want %.9g (tolerance %g)", got, want, tol);
}

/* ---- kernels by hand ---- */

static void
test_matmul_small(void **state)
{
    int64_t da[2] = {2, 3}, db[2] = {3, 2};
    double a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {7, 8, 9, 10, 11, 12};
    double want[4] = {58, 64, 139, 154};
    ex_tensor in[2], out;
    (void)state;
    tensor_f(&in[0], IR_F32, 2, da, a);
    tensor_f(&in[1], IR_F32, 2, db, b);
    run_op(IR_OP_MATMUL, 2, in, 1, NULL, 0, &out);
    assert_int_equal(out.rank, 2);
    assert_int_equal(out.dims[0], 2);
    assert_int_equal(out.dims[1], 2);
    for (int i = 0; i < 4; i++)
        assert_close(ex_get(&out, i), want[i], 0);
    ex_tensor_fini(&out);
    free_args(in, 2);
}

static void
test_matmul_batched_vector(void **state)
{
    /* [2,2,3] @ [3] -> [2,2]. */
    int64_t da[3] = {2, 2, 3}, db[1] = {3};
    double a[12] = {1, 0, 0, 0, 1, 0, 0, 0, 1, 1, 1, 1}, b[3] = {1, 2, 3};
    double want[4] = {1, 2, 3, 6};
    ex_tensor in[2], out;
    (void)state;
    tensor_f(&in[0], IR_F32, 3, da, a);
    tensor_f(&in[1], IR_F32, 1, db, b);
    run_op(IR_OP_MATMUL, 2, in, 1, NULL, 0, &out);
    assert_int_equal(out.rank, 2);
    for (int i = 0; i < 4; i++)
        assert_close(ex_get(&out, i), want[i], 0);
    ex_tensor_fini(&out);
    free_args(in, 2);
}

static void
test_matmul_1024_fast(void **state)
{
    int64_t d[2] = {1024, 1024};
    ex_tensor in[2], out;
    struct timespec t0, t1;
    double secs, want = 0;
    (void)state;
    tensor_rand(&in[0], IR_F32, 2, d, 1);
    tensor_rand(&in[1], IR_F32, 2, d, 2);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    run_op(IR_OP_MATMUL, 2, in, 1, NULL, 0, &out);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    for (int k = 0; k < 1024; k++)
        want += ex_get(&in[0], 5 * 1024 + k) * ex_get(&in[1], (size_t)k * 1024 + 7);
    assert_close(ex_get(&out, 5 * 1024 + 7), want, 1e-4);
    printf("1024x1024 MatMul: %.3f s\n", secs);
#if !defined(__SANITIZE_ADDRESS__) && !defined(DISTIR_DEBUG)
    assert_true(secs < 1.0);
#endif
    ex_tensor_fini(&out);
    free_args(in, 2);
}

static void
gemm_attrs(ir_module *m, ir_id op)
{
    ir_op_set_int(m, op, "transA", 1);
    ir_op_set_float(m, op, "alpha", 2.0);
    ir_op_set_float(m, op, "beta", 0.5);
}

static void
test_gemm(void **state)
{
    /* A^T with A = [[1,3],[2,4]] is [[1,2],[3,4]]; B = I; C = [10, 20] broadcast. */
    int64_t d2[2] = {2, 2}, d1[1] = {2};
    double a[4] = {1, 3, 2, 4}, b[4] = {1, 0, 0, 1}, c[2] = {10, 20};
    double want[4] = {2 * 1 + 5, 2 * 2 + 10, 2 * 3 + 5, 2 * 4 + 10};
    ex_tensor in[3], out;
    (void)state;
    tensor_f(&in[0], IR_F32, 2, d2, a);
    tensor_f(&in[1], IR_F32, 2, d2, b);
    tensor_f(&in[2], IR_F32, 1, d1, c);
    run_op(IR_OP_GEMM, 3, in, 1, gemm_attrs, 0, &out);
    for (int i = 0; i < 4; i++)
        assert_close(ex_get(&out, i), want[i], 0);
    ex_tensor_fini(&out);
    free_args(in, 3);
}

static void
test_broadcasting(void **state)
{
    int64_t da[2] = {2, 1}, db[2] = {1, 3}, dc[1] = {3};
    double a[2] = {10, 20}, b[3] = {1, 2, 3};
    double want[6] = {11, 12, 13, 21, 22, 23};
    ex_tensor in[2], out;
    (void)state;
    tensor_f(&in[0], IR_F32, 2, da, a);
    tensor_f(&in[1], IR_F32, 2, db, b);
    run_op(IR_OP_ADD, 2, in, 1, NULL, 0, &out);
    assert_int_equal(out.dims[0], 2);
    assert_int_equal(out.dims[1], 3);
    for (int i = 0; i < 6; i++)
        assert_close(ex_get(&out, i), want[i], 0);
    ex_tensor_fini(&out);
    ex_tensor_fini(&in[1]);
    /* [2,1] - [3] and a scalar divisor. */
    tensor_f(&in[1], IR_F32, 1, dc, b);
    run_op(IR_OP_SUB, 2, in, 1, NULL, 0, &out);
    assert_close(ex_get(&out, 5), 17, 0);
    ex_tensor_fini(&out);
    ex_tensor_fini(&in[1]);
    tensor_f(&in[1], IR_F32, 0, NULL, (double[]){4});
    run_op(IR_OP_DIV, 2, in, 1, NULL, 0, &out);
    assert_int_equal(out.rank, 2);
    assert_close(ex_get(&out, 1), 5, 0);
    ex_tensor_fini(&out);
    free_args(in, 2);
}

static void
test_int_arith(void **state)
{
    int64_t d[1] = {4};
    double a[4] = {7, -7, 5, 2147483647}, b[4] = {2, 2, 0, 1};
    ex_tensor in[2], out;
    (void)state;
    tensor_f(&in[0], IR_I32, 1, d, a);
    tensor_f(&in[1], IR_I32, 1, d, b);
    run_op(IR_OP_DIV, 2, in, 1, NULL, 0, &out);
    assert_close(ex_get(&out, 0), 3, 0);
    assert_close(ex_get(&out, 1), -3, 0);
    assert_close(ex_get(&out, 2), 0, 0); /* division by zero gives 0, not a crash */
    ex_tensor_fini(&out);
    run_op(IR_OP_ADD, 2, in, 1, NULL, 0, &out);
    assert_close(ex_get(&out, 3), -2147483648.0, 0); /* i32 wraps */
    ex_tensor_fini(&out);
    free_args(in, 2);
}

static void
softmax_axis1(ir_module *m, ir_id op)
{
    ir_op_set_int(m, op, "axis", 1);
}

static void
test_softmax_rows(void **state)
{
    int64_t d[3] = {2, 5, 3};
    ex_tensor in, out;
    (void)state;
    tensor_rand(&in, IR_F32, 3, d, 3);
    ex_set(&in, 0, 80.0); /* large values must not overflow */
    run_op(IR_OP_SOFTMAX, 1, &in, 1, softmax_axis1, 0, &out);
    for (int o = 0; o < 2; o++)
        for (int i = 0; i < 3; i++) {
            double s = 0;
            for (int l = 0; l < 5; l++) {
                double v = ex_get(&out, (size_t)(o * 15 + l * 3 + i));
                assert_true(v >= 0 && v <= 1);
                s += v;
            }
            assert_close(s, 1.0, 1e-6);
        }
    ex_tensor_fini(&out);
    ex_tensor_fini(&in);
}

static void
test_layernorm_stats(void **state)
{
    int64_t dx[2] = {3, 8}, ds[1] = {8};
    ex_tensor in[2], out, mean, istd;
    double ones[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    (void)state;
    tensor_rand(&in[0], IR_F32, 2, dx, 4);
    tensor_f(&in[1], IR_F32, 1, ds, ones);
    run_op(IR_OP_LAYERNORM, 2, in, 3, NULL, 0, &out);
    run_op(IR_OP_LAYERNORM, 2, in, 3, NULL, 1, &mean);
    run_op(IR_OP_LAYERNORM, 2, in, 3, NULL, 2, &istd);
    assert_int_equal(mean.rank, 2);
    assert_int_equal(mean.dims[1], 1);
    for (int r = 0; r < 3; r++) {
        double mu = 0, var = 0, xm = 0;
        for (int j = 0; j < 8; j++) {
            mu += ex_get(&out, (size_t)(r * 8 + j));
            xm += ex_get(&in[0], (size_t)(r * 8 + j));
        }
        mu /= 8;
        xm /= 8;
        for (int j = 0; j < 8; j++)
            var += pow(ex_get(&out, (size_t)(r * 8 + j)) - mu, 2);
        assert_close(mu, 0.0, 1e-6);
        assert_close(var / 8, 1.0, 1e-3);
        assert_close(ex_get(&mean, (size_t)r), xm, 1e-6);
        assert_true(ex_get(&istd, (size_t)r) > 0);
    }
    ex_tensor_fini(&out);
    ex_tensor_fini(&mean);
    ex_tensor_fini(&istd);
    free_args(in, 2);
}

static void
dropout_half(ir_module *m, ir_id op)
{
    ir_op_set_float(m, op, "ratio", 0.5);
    ir_op_set_int(m, op, "seed", 42);
}

static void
dropout_zero(ir_module *m, ir_id op)
{
    ir_op_set_float(m, op, "ratio", 0.0);
}

static void
test_dropout(void **state)
{
    int64_t d[1] = {1000};
    ex_tensor in, y, mask, y2;
    size_t kept = 0;
    (void)state;
    tensor_rand(&in, IR_F32, 1, d, 5);
    run_op(IR_OP_DROPOUT, 1, &in, 2, dropout_half, 0, &y);
    run_op(IR_OP_DROPOUT, 1, &in, 2, dropout_half, 1, &mask);
    run_op(IR_OP_DROPOUT, 1, &in, 2, dropout_half, 0, &y2);
    assert_int_equal(mask.dtype, IR_BOOL);
    for (size_t i = 0; i < 1000; i++) {
        double want = ex_get(&mask, i) ? 2.0 * ex_get(&in, i) : 0.0;
        assert_close(ex_get(&y, i), want, 1e-6);
        assert_close(ex_get(&y2, i), ex_get(&y, i), 0); /* deterministic from the seed */
        kept += ex_get(&mask, i) != 0;
    }
    assert_true(kept > 400 && kept < 600);
    ex_tensor_fini(&y);
    ex_tensor_fini(&y2);
    ex_tensor_fini(&mask);
    run_op(IR_OP_DROPOUT, 1, &in, 1, dropout_zero, 0, &y);
    for (size_t i = 0; i < 1000; i++)
        assert_close(ex_get(&y, i), ex_get(&in, i), 0);
    ex_tensor_fini(&y);
    ex_tensor_fini(&in);
}

static void
test_adam_sgd(void **state)
{
    int64_t d[1] = {2};
    double w[2] = {1, 2}, g[2] = {0.5, -1}, z[2] = {0, 0};
    ex_tensor in[4], out;
    (void)state;
    tensor_f(&in[0], IR_F32, 1, d, w);
    tensor_f(&in[1], IR_F32, 1, d, g);
    tensor_f(&in[2], IR_F32, 1, d, z);
    tensor_f(&in[3], IR_F32, 1, d, z);
    run_op(IR_OP_SGD, 2, in, 1, NULL, 0, &out);
    assert_close(ex_get(&out, 0), 1 - 0.01 * 0.5, 1e-7);
    ex_tensor_fini(&out);
    /* Step 1 from zero state: m-hat = g, v-hat = g^2, so w' = w - lr * sign(g) (eps aside). */
    run_op(IR_OP_ADAM, 4, in, 3, NULL, 0, &out);
    assert_close(ex_get(&out, 0), 1 - 1e-3, 1e-6);
    assert_close(ex_get(&out, 1), 2 + 1e-3, 1e-6);
    ex_tensor_fini(&out);
    run_op(IR_OP_ADAM, 4, in, 3, NULL, 1, &out);
    assert_close(ex_get(&out, 0), 0.1 * 0.5, 1e-7);
    ex_tensor_fini(&out);
    run_op(IR_OP_ADAM, 4, in, 3, NULL, 2, &out);
    assert_close(ex_get(&out, 1), 0.001 * 1.0, 1e-7);
    ex_tensor_fini(&out);
    free_args(in, 4);
}

static void
sce_attrs(ir_module *m, ir_id op)
{
    ir_op_set_int(m, op, "ignore_index", 2);
}

static void
test_sce_loss(void **state)
{
    /* Two rows, uniform logits over 3 classes: loss log 3 per counted row; row 1 is ignored. */
    int64_t dl[2] = {2, 3}, db[1] = {2};
    double z[6] = {0, 0, 0, 0, 0, 0}, lab[2] = {1, 2};
    ex_tensor in[2], out;
    (void)state;
    tensor_f(&in[0], IR_F32, 2, dl, z);
    tensor_f(&in[1], IR_I64, 1, db, lab);
    run_op(IR_OP_SCELOSS, 2, in, 1, sce_attrs, 0, &out);
    assert_int_equal(out.rank, 0);
    assert_close(ex_get(&out, 0), log(3.0), 1e-6);
    ex_tensor_fini(&out);
    run_op(IR_OP_MSELOSS, 2, (ex_tensor[]){in[0], in[0]}, 1, NULL, 0, &out);
    assert_close(ex_get(&out, 0), 0, 0);
    ex_tensor_fini(&out);
    free_args(in, 2);
}

/* ---- gradients against central differences ---- */

/*
 * The forward op fwd (nin inputs, attributes afn, output `fout`) and the
 * scalar L = sum(w * fwd(x)) for fixed random weights w. Checks that
 * dL/d input `wrt` equals `grad` (a tensor computed by a gradient op).
 */
typedef struct fdcase {
    int kind;
    uint32_t nin, nout, fout, wrt;
    attr_fn afn;
} fdcase;

static double
fd_loss(const fdcase *c, const ex_tensor *in, const ex_tensor *w)
{
    ex_tensor y;
    double l = 0;
    run_op(c->kind, c->nin, in, c->nout, c->afn, c->fout, &y);
    assert_int_equal(y.numel, w->numel);
    for (size_t i = 0; i < y.numel; i++)
        l += ex_get(&y, i) * ex_get(w, i);
    ex_tensor_fini(&y);
    return l;
}

static void
fd_check(const fdcase *c, ex_tensor *in, const ex_tensor *w, const ex_tensor *grad)
{
    const double h = 1e-6;
    ex_tensor *x = &in[c->wrt];
    assert_int_equal(grad->numel, x->numel);
    for (size_t i = 0; i < x->numel; i++) {
        double v = ex_get(x, i), lp, lm;
        ex_set(x, i, v + h);
        lp = fd_loss(c, in, w);
        ex_set(x, i, v - h);
        lm = fd_loss(c, in, w);
        ex_set(x, i, v);
        if (fabs((lp - lm) / (2 * h) - ex_get(grad, i)) > 1e-5 * (1 + fabs(ex_get(grad, i))))
            fail_msg("%s: d/dx[%zu] is %.9g by finite difference, the gradient op gives %.9g",
                     ir_opkind_name(c->kind), i, (lp - lm) / (2 * h), ex_get(grad, i));
    }
}

/* Weights shaped like output fout of the forward op on in. */
static void
fd_weights(const fdcase *c, const ex_tensor *in, ex_tensor *w, uint64_t seed)
{
    ex_tensor y;
    run_op(c->kind, c->nin, in, c->nout, c->afn, c->fout, &y);
    tensor_rand(w, IR_F64, y.rank, y.dims, seed);
    ex_tensor_fini(&y);
}

static void
test_grad_matmul(void **state)
{
    int64_t da[3] = {2, 3, 4}, db[2] = {4, 5};
    fdcase c = {IR_OP_MATMUL, 2, 1, 0, 0, NULL};
    ex_tensor in[3], w, g0, g1;
    (void)state;
    tensor_rand(&in[0], IR_F64, 3, da, 10);
    tensor_rand(&in[1], IR_F64, 2, db, 11);
    fd_weights(&c, in, &w, 12);
    in[2] = w; /* dy = w */
    run_op(IR_OP_MATMULGRAD, 3, in, 2, NULL, 0, &g0);
    run_op(IR_OP_MATMULGRAD, 3, in, 2, NULL, 1, &g1);
    fd_check(&c, in, &w, &g0);
    c.wrt = 1; /* b is broadcast over the batch: its gradient sums over it */
    fd_check(&c, in, &w, &g1);
    ex_tensor_fini(&g0);
    ex_tensor_fini(&g1);
    free_args(in, 3);
}

/* Unary activations: grad(x, dy), with the attributes fn sets on both (or none). */
static void
check_act(int fwd, int grad, attr_fn fn)
{
    int64_t d[2] = {3, 4};
    fdcase c = {fwd, 1, 1, 0, 0, fn};
    ex_tensor in[2], w, g;
    tensor_rand(&in[0], IR_F64, 2, d, 20 + (uint64_t)fwd);
    ex_set(&in[0], 0, 0.3); /* away from Relu's kink */
    fd_weights(&c, in, &w, 21);
    in[1] = w;
    run_op(grad, 2, in, 1, fn, 0, &g);
    fd_check(&c, in, &w, &g);
    ex_tensor_fini(&g);
    free_args(in, 2);
}

static void
swish_alpha(ir_module *m, ir_id op)
{
    ir_op_set_float(m, op, "alpha", 2.0);
}

/* Swish by hand: x sigmoid(alpha x) at alpha 1 (SiLU) and 2. */
static void
test_swish(void **state)
{
    int64_t d[1] = {3};
    double x[3] = {-1.0, 0.0, 1.5};
    ex_tensor in, out;
    (void)state;
    tensor_f(&in, IR_F64, 1, d, x);
    run_op(IR_OP_SWISH, 1, &in, 1, NULL, 0, &out);
    for (int i = 0; i < 3; i++)
        assert_close(ex_get(&out, (size_t)i), x[i] / (1.0 + exp(-x[i])), 1e-15);
    ex_tensor_fini(&out);
    run_op(IR_OP_SWISH, 1, &in, 1, swish_alpha, 0, &out);
    for (int i = 0; i < 3; i++)
        assert_close(ex_get(&out, (size_t)i), x[i] / (1.0 + exp(-2.0 * x[i])), 1e-15);
    ex_tensor_fini(&out);
    ex_tensor_fini(&in);
}

static void
gelu_tanh_attr(ir_module *m, ir_id op)
{
    ir_op_set_string(m, op, "approximate", "tanh");
}

/*
 * Gelu by hand: x Phi(x) with erf by default, 0.5 x (1 + tanh(sqrt(2/pi) (x +
 * 0.044715 x^3))) with approximate "tanh" (ONNX opset 20; 0.841192 at 1, where
 * the erf form gives 0.841345).
 */
static void
test_gelu_tanh(void **state)
{
    int64_t d[1] = {3};
    double x[3] = {-1.0, 0.5, 1.0};
    ex_tensor in, out;
    (void)state;
    tensor_f(&in, IR_F64, 1, d, x);
    run_op(IR_OP_GELU, 1, &in, 1, NULL, 0, &out);
    for (int i = 0; i < 3; i++)
        assert_close(ex_get(&out, (size_t)i), 0.5 * x[i] * (1.0 + erf(x[i] / sqrt(2.0))), 1e-15);
    ex_tensor_fini(&out);
    run_op(IR_OP_GELU, 1, &in, 1, gelu_tanh_attr, 0, &out);
    for (int i = 0; i < 3; i++) {
        double u = sqrt(2.0 / M_PI) * (x[i] + 0.044715 * x[i] * x[i] * x[i]);
        assert_close(ex_get(&out, (size_t)i), 0.5 * x[i] * (1.0 + tanh(u)), 1e-15);
    }
    assert_close(ex_get(&out, 2), 0.841192, 1e-6);
    ex_tensor_fini(&out);
    ex_tensor_fini(&in);
}

static void
test_grad_activations(void **state)
{
    (void)state;
    check_act(IR_OP_RELU, IR_OP_RELUGRAD, NULL);
    check_act(IR_OP_GELU, IR_OP_GELUGRAD, NULL);
    check_act(IR_OP_GELU, IR_OP_GELUGRAD, gelu_tanh_attr);
    check_act(IR_OP_SWISH, IR_OP_SWISHGRAD, NULL);
    check_act(IR_OP_SWISH, IR_OP_SWISHGRAD, swish_alpha);
    check_act(IR_OP_TANH, IR_OP_TANHGRAD, NULL);
    check_act(IR_OP_SIGMOID, IR_OP_SIGMOIDGRAD, NULL);
}

static void
test_grad_softmax(void **state)
{
    int64_t d[2] = {3, 5};
    fdcase c = {IR_OP_SOFTMAX, 1, 1, 0, 0, NULL};
    ex_tensor in[1], gin[2], w, y, g;
    (void)state;
    tensor_rand(&in[0], IR_F64, 2, d, 30);
    fd_weights(&c, in, &w, 31);
    run_op(IR_OP_SOFTMAX, 1, in, 1, NULL, 0, &y);
    gin[0] = y; /* SoftmaxGrad(y, dy) */
    gin[1] = w;
    run_op(IR_OP_SOFTMAXGRAD, 2, gin, 1, NULL, 0, &g);
    fd_check(&c, in, &w, &g);
    ex_tensor_fini(&g);
    ex_tensor_fini(&y);
    ex_tensor_fini(&w);
    ex_tensor_fini(&in[0]);
}

static void
test_grad_layernorm(void **state)
{
    int64_t dx[2] = {3, 6}, ds[1] = {6};
    fdcase c = {IR_OP_LAYERNORM, 3, 1, 0, 0, NULL};
    ex_tensor in[3], gin[5], w, g[3], mean, istd;
    (void)state;
    tensor_rand(&in[0], IR_F64, 2, dx, 40);
    tensor_rand(&in[1], IR_F64, 1, ds, 41);
    tensor_rand(&in[2], IR_F64, 1, ds, 42);
    fd_weights(&c, in, &w, 43);
    run_op(IR_OP_LAYERNORM, 3, in, 3, NULL, 1, &mean);
    run_op(IR_OP_LAYERNORM, 3, in, 3, NULL, 2, &istd);
    gin[0] = w;
    gin[1] = in[0];
    gin[2] = in[1];
    gin[3] = mean;
    gin[4] = istd;
    for (int i = 0; i < 3; i++)
        run_op(IR_OP_LAYERNORMGRAD, 5, gin, 3, NULL, (uint32_t)i, &g[i]);
    for (uint32_t i = 0; i < 3; i++) {
        c.wrt = i;
        fd_check(&c, in, &w, &g[i]);
    }
    ex_tensor_fini(&g[0]);
    /* Without the saved statistics the op recomputes them. */
    run_op(IR_OP_LAYERNORMGRAD, 3, gin, 1, NULL, 0, &g[0]);
    c.wrt = 0;
    fd_check(&c, in, &w, &g[0]);
    for (int i = 0; i < 3; i++)
        ex_tensor_fini(&g[i]);
    ex_tensor_fini(&mean);
    ex_tensor_fini(&istd);
    ex_tensor_fini(&w);
    free_args(in, 3);
}

/*
 * RMSNormalization by hand (x / sqrt(mean(x^2) + eps) * scale, its second
 * result 1 / sqrt(mean(x^2) + eps)), and RMSNormalizationGrad against finite
 * differences of it, with the saved statistic and without (recomputed).
 */
static void
test_rmsnorm(void **state)
{
    int64_t dx[2] = {3, 6}, ds[1] = {6};
    fdcase c = {IR_OP_RMSNORM, 2, 1, 0, 0, NULL};
    ex_tensor in[2], gin[4], w, y, istd, g[2];
    (void)state;
    tensor_rand(&in[0], IR_F64, 2, dx, 50);
    tensor_rand(&in[1], IR_F64, 1, ds, 51);
    run_op(IR_OP_RMSNORM, 2, in, 2, NULL, 0, &y);
    run_op(IR_OP_RMSNORM, 2, in, 2, NULL, 1, &istd);
    assert_int_equal(istd.rank, 2);
    assert_int_equal(istd.dims[0], 3);
    assert_int_equal(istd.dims[1], 1);
    for (int r = 0; r < 3; r++) {
        double ms = 0, is;
        for (int j = 0; j < 6; j++)
            ms += pow(ex_get(&in[0], (size_t)(r * 6 + j)), 2) / 6;
        is = 1.0 / sqrt(ms + 1e-5);
        assert_close(ex_get(&istd, (size_t)r), is, 1e-12);
        for (int j = 0; j < 6; j++)
            assert_close(ex_get(&y, (size_t)(r * 6 + j)),
                         ex_get(&in[0], (size_t)(r * 6 + j)) * is * ex_get(&in[1], (size_t)j),
                         1e-12);
    }
    fd_weights(&c, in, &w, 52);
    gin[0] = w;
    gin[1] = in[0];
    gin[2] = in[1];
    gin[3] = istd;
    for (uint32_t i = 0; i < 2; i++) {
        run_op(IR_OP_RMSNORMGRAD, 4, gin, 2, NULL, i, &g[i]);
        c.wrt = i;
        fd_check(&c, in, &w, &g[i]);
        ex_tensor_fini(&g[i]);
    }
    run_op(IR_OP_RMSNORMGRAD, 3, gin, 1, NULL, 0, &g[0]);
    c.wrt = 0;
    fd_check(&c, in, &w, &g[0]);
    ex_tensor_fini(&g[0]);
    ex_tensor_fini(&y);
    ex_tensor_fini(&istd);
    ex_tensor_fini(&w);
    free_args(in, 2);
}

static void
stash_f32(ir_module *m, ir_id op)
{
    ir_op_set_int(m, op, "stash_type", 1);
}

/*
 * A bf16 RMSNormalization's inverse root mean square in f32 with stash_type 1
 * (not rounded to bf16), in bf16 without it; y stays bf16 either way.
 */
static void
test_norm_stash_type_exec(void **state)
{
    int64_t dx[2] = {1, 3}, ds[1] = {3};
    double xv[3] = {1, 2, 3}, sv[3] = {1, 1, 1};
    double exact = 1.0 / sqrt(14.0 / 3.0 + 1e-5);
    ex_tensor in[2], y, istd;
    (void)state;
    tensor_f(&in[0], IR_BF16, 2, dx, xv);
    tensor_f(&in[1], IR_BF16, 1, ds, sv);
    run_op(IR_OP_RMSNORM, 2, in, 2, stash_f32, 1, &istd);
    run_op(IR_OP_RMSNORM, 2, in, 2, stash_f32, 0, &y);
    assert_int_equal(istd.dtype, IR_F32);
    assert_int_equal(y.dtype, IR_BF16);
    assert_close(ex_get(&istd, 0), exact, 1e-7);
    ex_tensor_fini(&istd);
    run_op(IR_OP_RMSNORM, 2, in, 2, NULL, 1, &istd);
    assert_int_equal(istd.dtype, IR_BF16);
    assert_true(fabs(ex_get(&istd, 0) - exact) > 1e-5); /* bf16 keeps 8 bits */
    ex_tensor_fini(&istd);
    ex_tensor_fini(&y);
    free_args(in, 2);
}

static void
dropout_grad_attrs(ir_module *m, ir_id op)
{
    ir_op_set_float(m, op, "ratio", 0.5);
}

static void
test_grad_dropout(void **state)
{
    int64_t d[1] = {50};
    fdcase c = {IR_OP_DROPOUT, 1, 2, 0, 0, dropout_half};
    ex_tensor in[1], gin[2], w, mask, g;
    (void)state;
    tensor_rand(&in[0], IR_F64, 1, d, 50);
    fd_weights(&c, in, &w, 51);
    run_op(IR_OP_DROPOUT, 1, in, 2, dropout_half, 1, &mask);
    gin[0] = w;
    gin[1] = mask;
    run_op(IR_OP_DROPOUTGRAD, 2, gin, 1, dropout_grad_attrs, 0, &g);
    fd_check(&c, in, &w, &g);
    ex_tensor_fini(&g);
    ex_tensor_fini(&mask);
    ex_tensor_fini(&w);
    ex_tensor_fini(&in[0]);
}

static void
test_grad_losses(void **state)
{
    int64_t d[2] = {4, 3}, dl[1] = {4};
    double lab[4] = {0, 2, 1, 2};
    fdcase mse = {IR_OP_MSELOSS, 2, 1, 0, 0, NULL};
    fdcase sce = {IR_OP_SCELOSS, 2, 1, 0, 0, sce_attrs};
    ex_tensor in[2], gin[3], w, g;
    (void)state;
    tensor_rand(&in[0], IR_F64, 2, d, 60);
    tensor_rand(&in[1], IR_F64, 2, d, 61);
    fd_weights(&mse, in, &w, 62);
    gin[0] = in[0];
    gin[1] = in[1];
    gin[2] = w;
    run_op(IR_OP_MSELOSSGRAD, 3, gin, 1, NULL, 0, &g);
    fd_check(&mse, in, &w, &g);
    ex_tensor_fini(&g);
    ex_tensor_fini(&in[1]);
    /* Cross-entropy with ignore_index 2: rows 1 and 3 get no gradient. */
    tensor_f(&in[1], IR_I64, 1, dl, lab);
    gin[0] = w;
    gin[1] = in[0];
    gin[2] = in[1];
    run_op(IR_OP_SCELOSSGRAD, 3, gin, 1, sce_attrs, 0, &g);
    fd_check(&sce, in, &w, &g);
    for (int j = 0; j < 3; j++)
        assert_close(ex_get(&g, (size_t)(3 + j)), 0, 0);
    ex_tensor_fini(&g);
    ex_tensor_fini(&w);
    free_args(in, 2);
}

static void
gathergrad_attrs(ir_module *m, ir_id op)
{
    int64_t shape[2] = {5, 3};
    ir_op_set_ints(m, op, "shape", 2, shape);
}

static void
test_grad_gather(void **state)
{
    int64_t dd[2] = {5, 3}, di[2] = {2, 2};
    double idx[4] = {4, 0, 4, -1}; /* a repeat and a negative index: scatter-add */
    fdcase c = {IR_OP_GATHER, 2, 1, 0, 0, NULL};
    ex_tensor in[2], gin[2], w, g;
    (void)state;
    tensor_rand(&in[0], IR_F64, 2, dd, 70);
    tensor_f(&in[1], IR_I64, 2, di, idx);
    fd_weights(&c, in, &w, 71);
    gin[0] = in[1];
    gin[1] = w;
    run_op(IR_OP_GATHERGRAD, 2, gin, 1, gathergrad_attrs, 0, &g);
    fd_check(&c, in, &w, &g);
    ex_tensor_fini(&g);
    ex_tensor_fini(&w);
    free_args(in, 2);
}

static void
reducesumto_attrs(ir_module *m, ir_id op)
{
    int64_t shape[2] = {1, 4};
    ir_op_set_ints(m, op, "shape", 2, shape);
}

static void
test_grad_reducesumto(void **state)
{
    /* The gradient of broadcasting b [1,4] in a + b with a [2,3,4] is ReduceSumTo(dy){[1,4]}. */
    int64_t da[3] = {2, 3, 4}, db[2] = {1, 4};
    fdcase c = {IR_OP_ADD, 2, 1, 0, 1, NULL};
    ex_tensor in[2], w, g;
    (void)state;
    tensor_rand(&in[0], IR_F64, 3, da, 80);
    tensor_rand(&in[1], IR_F64, 2, db, 81);
    fd_weights(&c, in, &w, 82);
    run_op(IR_OP_REDUCESUMTO, 1, &w, 1, reducesumto_attrs, 0, &g);
    assert_int_equal(g.rank, 2);
    fd_check(&c, in, &w, &g);
    ex_tensor_fini(&g);
    ex_tensor_fini(&w);
    free_args(in, 2);
}

/* ---- shapes and data movement ---- */

static void
slice_attrs(ir_module *m, ir_id op)
{
    int64_t starts[2] = {-1, 0}, ends[2] = {-100, 10}, axes[2] = {0, 1}, steps[2] = {-2, 2};
    ir_op_set_ints(m, op, "starts", 2, starts);
    ir_op_set_ints(m, op, "ends", 2, ends);
    ir_op_set_ints(m, op, "axes", 2, axes);
    ir_op_set_ints(m, op, "steps", 2, steps);
}

static void
perm_attrs(ir_module *m, ir_id op)
{
    int64_t perm[3] = {2, 0, 1};
    ir_op_set_ints(m, op, "perm", 3, perm);
}

static void
test_movement(void **state)
{
    int64_t d[2] = {4, 3}, d3[3] = {2, 3, 4};
    ex_tensor in, out;
    (void)state;
    tensor_f(&in, IR_F32, 2, d, (double[]){0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
    run_op(IR_OP_SLICE, 1, &in, 1, slice_attrs, 0, &out);
    /* Rows 3 and 1, columns 0 and 2. */
    assert_int_equal(out.dims[0], 2);
    assert_int_equal(out.dims[1], 2);
    assert_close(ex_get(&out, 0), 9, 0);
    assert_close(ex_get(&out, 1), 11, 0);
    assert_close(ex_get(&out, 2), 3, 0);
    assert_close(ex_get(&out, 3), 5, 0);
    ex_tensor_fini(&out);
    ex_tensor_fini(&in);
    tensor_rand(&in, IR_F32, 3, d3, 90);
    run_op(IR_OP_TRANSPOSE, 1, &in, 1, perm_attrs, 0, &out);
    assert_int_equal(out.dims[0], 4);
    assert_int_equal(out.dims[1], 2);
    assert_int_equal(out.dims[2], 3);
    /* out[k][i][j] = in[i][j][k]. */
    assert_close(ex_get(&out, (size_t)(3 * 6 + 1 * 3 + 2)), ex_get(&in, 1 * 12 + 2 * 4 + 3), 0);
    ex_tensor_fini(&out);
    ex_tensor_fini(&in);
}

/* ---- the distributed executor ---- */

/*
 * Sequential: y = Relu(x @ w), s = ReduceSum(y) on device 0.
 * Distributed: x scattered by rows over devices 0 and 1, w broadcast, a
 * pmap computing y_l and s_l = all_reduce(ReduceSum(y_l)) over mesh @m,
 * then y gathered on device 0 and s taken from device 0.
 */
static void
test_distributed_equals_sequential(void **state)
{
    int64_t dx[2] = {8, 4}, dw[2] = {4, 3}, dxl[2] = {4, 4}, devs[2] = {0, 1}, two = 2;
    ir_module *seq = ir_module_new(), *dist = ir_module_new();
    ir_id args[2], f, op, y;
    ex_tensor in[2], *r1, *r2;
    uint32_t n1, n2;
    (void)state;
    /* Sequential. */
    {
        ir_id types[2] = {ty(seq, IR_F32, 2, dx), ty(seq, IR_F32, 2, dw)};
        f = func(seq, 2, types, args);
        op = ir_op_add(seq, f, IR_OP_MATMUL, 2, args, 1, NULL, NULL);
        finish(seq, f, op, 0);
        y = ir_op_output(seq, op, 0);
        op = ir_op_add(seq, f, IR_OP_RELU, 1, &y, 1, NULL, NULL);
        finish(seq, f, op, 1);
        y = ir_op_output(seq, op, 0);
        op = ir_op_add(seq, f, IR_OP_REDUCESUM, 1, &y, 1, NULL, NULL);
        ir_op_set_int(seq, op, "keepdims", 0);
        finish(seq, f, op, 1);
    }
    /* Distributed. */
    {
        ir_module *m = dist;
        ir_id types[2] = {ty(m, IR_F32, 2, dx), ty(m, IR_F32, 2, dw)};
        ir_id mesh = ir_mesh_add(m, "m", 1, &two, devs), dv = ir_str(m, "d");
        ir_id xs, ws, body, bx, bw, by, bs, pm, pin[2], g, sv;
        f = func(m, 2, types, args);
        op = ir_op_add(m, f, IR_OP_SCATTER, 1, &args[0], 1, NULL, NULL);
        ir_op_set_int(m, op, "dim", 0);
        ir_op_set_ints(m, op, "devices", 2, devs);
        finish(m, f, op, 0);
        xs = ir_op_output(m, op, 0);
        op = ir_op_add(m, f, IR_OP_BROADCAST, 1, &args[1], 1, NULL, NULL);
        ir_op_set_ints(m, op, "devices", 2, devs);
        finish(m, f, op, 0);
        ws = ir_op_output(m, op, 0);
        body = ir_body_new(m);
        bx = ir_region_add_arg(m, body, ir_type_tensor_var(m, IR_F32, 2, dxl, dv), "xl");
        bw = ir_region_add_arg(m, body, ir_type_tensor_var(m, IR_F32, 2, dw, dv), "wl");
        pin[0] = bx;
        pin[1] = bw;
        op = ir_op_add(m, body, IR_OP_MATMUL, 2, pin, 1, NULL, NULL);
        finish(m, body, op, 0);
        by = ir_op_output(m, op, 0);
        op = ir_op_add(m, body, IR_OP_RELU, 1, &by, 1, NULL, NULL);
        finish(m, body, op, 0);
        by = ir_op_output(m, op, 0);
        op = ir_op_add(m, body, IR_OP_REDUCESUM, 1, &by, 1, NULL, NULL);
        ir_op_set_int(m, op, "keepdims", 0);
        finish(m, body, op, 0);
        bs = ir_op_output(m, op, 0);
        op = ir_op_add(m, body, IR_OP_ALLREDUCE, 1, &bs, 1, NULL, NULL);
        ir_op_set_mesh(m, op, "mesh", mesh);
        finish(m, body, op, 0);
        bs = ir_op_output(m, op, 0);
        ir_region_add_result(m, body, by);
        ir_region_add_result(m, body, bs);
        pin[0] = xs;
        pin[1] = ws;
        pm = ir_op_add(m, f, IR_OP_PMAP, 2, pin, 2, NULL, NULL);
        m->ops[pm].body = body;
        m->regions[body].parent = pm;
        ir_op_set_string(m, pm, "device_var", "d");
        ir_op_set_ints(m, pm, "devices", 2, devs);
        finish(m, f, pm, 0);
        g = ir_op_output(m, pm, 0);
        op = ir_op_add(m, f, IR_OP_GATHERTO, 1, &g, 1, NULL, NULL);
        ir_op_set_int(m, op, "dim", 0);
        ir_op_set_int(m, op, "device", 0);
        finish(m, f, op, 1);
        sv = ir_op_output(m, pm, 1);
        op = ir_op_add(m, f, IR_OP_TUPLEGET, 1, &sv, 1, NULL, NULL);
        ir_op_set_int(m, op, "index", 1);
        finish(m, f, op, 1);
        {
            di_error err;
            di_error_clear(&err);
            if (ir_verify(m, &err) != 0)
                fail_msg("verify: %s", err.msg);
        }
    }
    tensor_rand(&in[0], IR_F32, 2, dx, 100);
    tensor_rand(&in[1], IR_F32, 2, dw, 101);
    run_ok(seq, in, 2, &r1, &n1);
    run_ok(dist, in, 2, &r2, &n2);
    assert_int_equal(n1, 2);
    assert_int_equal(n2, 2);
    for (uint32_t k = 0; k < 2; k++) {
        assert_int_equal(r1[k].numel, r2[k].numel);
        for (size_t i = 0; i < r1[k].numel; i++)
            assert_close(ex_get(&r2[k], i), ex_get(&r1[k], i), 1e-6);
    }
    assert_int_equal(r2[1].device, 1); /* element 1 of the all-reduced tuple lives on device 1 */
    free_tensors(r1, n1);
    free_tensors(r2, n2);
    free_args(in, 2);
    ir_module_free(seq);
    ir_module_free(dist);
}

/*
 * tests/ir/dp_callee.dir (two pmaps calling one function, MatMul then Relu)
 * equals the sequential Relu(Relu(x w) w); a cycle of calls, which the
 * verifier rejects, ends in an error, not in a crash.
 */
static void
test_callee(void **state)
{
    static const char seq_text[] =
        "func @main(%w: !dist.tensor<4x4xf32, 0>, %x: !dist.tensor<8x4xf32, 0>) -> "
        "(!dist.tensor<8x4xf32, 0>) {\n"
        "  %a = \"MatMul\"(%x, %w) : (!dist.tensor<8x4xf32, 0>, !dist.tensor<4x4xf32, 0>) -> "
        "!dist.tensor<8x4xf32, 0>\n"
        "  %b = \"Relu\"(%a) : (!dist.tensor<8x4xf32, 0>) -> !dist.tensor<8x4xf32, 0>\n"
        "  %c = \"MatMul\"(%b, %w) : (!dist.tensor<8x4xf32, 0>, !dist.tensor<4x4xf32, 0>) -> "
        "!dist.tensor<8x4xf32, 0>\n"
        "  %y = \"Relu\"(%c) : (!dist.tensor<8x4xf32, 0>) -> !dist.tensor<8x4xf32, 0>\n"
        "  return %y : !dist.tensor<8x4xf32, 0>\n"
        "}\n";
    int64_t dw[2] = {4, 4}, dx[2] = {8, 4};
    ex_tensor in[2], *r1, *r2;
    uint32_t n1, n2;
    uint8_t *text;
    size_t len;
    ir_module *seq, *dist;
    di_error err;
    (void)state;
    di_error_clear(&err);
    if (di_read_file("tests/ir/dp_callee.dir", 1u << 20, &text, &len, &err) != 0)
        fail_msg("%s", err.msg);
    assert_int_equal(ir_parse((const char *)text, len, &dist, &err), 0);
    di_free(text);
    assert_int_equal(ir_parse(seq_text, strlen(seq_text), &seq, &err), 0);
    tensor_rand(&in[0], IR_F32, 2, dw, 7);
    tensor_rand(&in[1], IR_F32, 2, dx, 8);
    run_ok(seq, in, 2, &r1, &n1);
    run_ok(dist, in, 2, &r2, &n2);
    assert_int_equal(n1, 1);
    assert_int_equal(n2, 1);
    assert_int_equal(r1[0].numel, r2[0].numel);
    for (size_t i = 0; i < r1[0].numel; i++)
        assert_close(ex_get(&r2[0], i), ex_get(&r1[0], i), 1e-6);
    free_tensors(r1, n1);
    free_tensors(r2, n2);

    /* @f calls itself through a pmap over device 0: calls without end. */
    {
#define T "!dist.tensor<4xf32, 0>"
#define V "!dist.tensor<4xf32, d>"
        static const char cyc[] =
            "func @main(%x: tuple<" T ">) -> (tuple<" T ">) {\n"
            "  %y = \"dist.pmap\"(%x) {callee = @f, device_var = \"d\", devices = [0]} : "
            "(tuple<" T ">) -> tuple<" T ">\n"
            "  return %y : tuple<" T ">\n"
            "}\n"
            "func @f(%a: " V ") -> (" V ") {\n"
            "  %t = \"dist.tuple\"(%a) : (" V ") -> tuple<" V ">\n"
            "  %b = \"dist.pmap\"(%t) {callee = @f, device_var = \"d\", devices = [0]} : "
            "(tuple<" V ">) -> tuple<" V ">\n"
            "  %c = \"dist.tuple_get\"(%b) {index = 0} : (tuple<" V ">) -> " V "\n"
            "  return %c : " V "\n"
            "}\n";
#undef T
#undef V
        int64_t d4[1] = {4};
        ex_tensor one;
        ir_module *m;
        assert_int_equal(ir_parse(cyc, strlen(cyc), &m, &err), 0);
        assert_int_equal(ir_verify(m, &err), DI_EVERIFY);
        tensor_rand(&one, IR_F32, 1, d4, 9);
        di_error_clear(&err);
        assert_int_not_equal(ex_run(m, &one, 1, &r2, &n2, &err), 0);
        if (strstr(err.msg, "pmaps nested more than 64 deep") == NULL)
            fail_msg("%s", err.msg);
        free_args(&one, 1);
        ir_module_free(m);
    }
    free_args(in, 2);
    ir_module_free(seq);
    ir_module_free(dist);
}

/* The tuple-form collectives on a tuple of two [2,2] tensors, by hand. */
static void
test_tuple_collectives(void **state)
{
    int64_t d[2] = {2, 2};
    ir_module *m = ir_module_new();
    ir_id t0 = ir_type_tensor(m, IR_F32, 2, d, 0), t1 = ir_type_tensor(m, IR_F32, 2, d, 1);
    ir_id types[2] = {t0, t1}, args[2], f, tup, op;
    ex_tensor in[2], *res;
    uint32_t nres;
    (void)state;
    f = func(m, 2, types, args);
    op = ir_op_add(m, f, IR_OP_TUPLE, 2, args, 1, NULL, NULL);
    finish(m, f, op, 0);
    tup = ir_op_output(m, op, 0);
    op = ir_op_add(m, f, IR_OP_ALLREDUCE, 1, &tup, 1, NULL, NULL);
    finish(m, f, op, 1);
    op = ir_op_add(m, f, IR_OP_ALLGATHER, 1, &tup, 1, NULL, NULL);
    ir_op_set_int(m, op, "dim", 1);
    finish(m, f, op, 1);
    op = ir_op_add(m, f, IR_OP_REDUCESCATTER, 1, &tup, 1, NULL, NULL);
    ir_op_set_int(m, op, "dim", 0);
    finish(m, f, op, 1);
    op = ir_op_add(m, f, IR_OP_ALLTOALL, 1, &tup, 1, NULL, NULL);
    ir_op_set_int(m, op, "split_dim", 0);
    ir_op_set_int(m, op, "concat_dim", 1);
    finish(m, f, op, 1);
    op = ir_op_add(m, f, IR_OP_SEND, 1, &args[0], 1, NULL, NULL);
    ir_op_set_int(m, op, "device", 3);
    finish(m, f, op, 1);
    tensor_f(&in[0], IR_F32, 2, d, (double[]){1, 2, 3, 4});
    tensor_f(&in[1], IR_F32, 2, d, (double[]){10, 20, 30, 40});
    run_ok(m, in, 2, &res, &nres);
    assert_int_equal(nres, 9);
    /* all_reduce: both get the sum. */
    assert_close(ex_get(&res[0], 3), 44, 0);
    assert_close(ex_get(&res[1], 0), 11, 0);
    /* all_gather along dim 1: [[1,2,10,20],[3,4,30,40]]. */
    assert_int_equal(res[2].dims[1], 4);
    assert_close(ex_get(&res[3], 2), 10, 0);
    assert_close(ex_get(&res[3], 7), 40, 0);
    /* reduce_scatter along dim 0: device 0 gets row 0 of the sum, device 1 row 1. */
    assert_int_equal(res[4].dims[0], 1);
    assert_close(ex_get(&res[4], 1), 22, 0);
    assert_close(ex_get(&res[5], 0), 33, 0);
    /* all_to_all: device 0 gets rows 0 of both, side by side: [1,2,10,20]. */
    assert_int_equal(res[6].dims[0], 1);
    assert_int_equal(res[6].dims[1], 4);
    assert_close(ex_get(&res[6], 2), 10, 0);
    assert_close(ex_get(&res[7], 0), 3, 0);
    assert_int_equal(res[8].device, 3);
    free_tensors(res, nres);
    free_args(in, 2);
    ir_module_free(m);
}

/*
 * Global view: a pmap over a 2-device mesh with x split by rows (S[0]) and w
 * replicated; the body's y_l is returned as S[0] and its ReduceSum as
 * P(sum); the executor assembles them, so they equal the sequential values.
 */
static void
test_pmap_mesh_dtensor(void **state)
{
    int64_t dx[2] = {6, 4}, dw[2] = {4, 2}, dxl[2] = {3, 4}, dy[2] = {6, 2}, dyl[2] = {3, 2};
    int64_t two = 2, s0 = 0, r = IR_PLACE_R, ps = IR_PLACE_PSUM;
    ir_module *m = ir_module_new();
    ir_id mesh = ir_mesh_add(m, "m", 1, &two, NULL), dv = ir_str(m, "d");
    ir_id types[2] = {ir_type_dtensor(m, IR_F32, 2, dx, mesh, &s0),
                      ir_type_dtensor(m, IR_F32, 2, dw, mesh, &r)};
    ir_id rtypes[2] = {ir_type_dtensor(m, IR_F32, 2, dy, mesh, &s0),
                       ir_type_dtensor(m, IR_F32, 0, NULL, mesh, &ps)};
    ir_id args[2], f, body, pin[2], op, by, bs, pm, ar;
    ex_tensor in[2], *res;
    uint32_t nres;
    double total = 0;
    (void)state;
    (void)dyl;
    f = func(m, 2, types, args);
    body = ir_body_new(m);
    pin[0] = ir_region_add_arg(m, body, ir_type_tensor_var(m, IR_F32, 2, dxl, dv), "xl");
    pin[1] = ir_region_add_arg(m, body, ir_type_tensor_var(m, IR_F32, 2, dw, dv), "wl");
    op = ir_op_add(m, body, IR_OP_MATMUL, 2, pin, 1, NULL, NULL);
    finish(m, body, op, 0);
    by = ir_op_output(m, op, 0);
    op = ir_op_add(m, body, IR_OP_REDUCESUM, 1, &by, 1, NULL, NULL);
    ir_op_set_int(m, op, "keepdims", 0);
    finish(m, body, op, 0);
    bs = ir_op_output(m, op, 0);
    ir_region_add_result(m, body, by);
    ir_region_add_result(m, body, bs);
    pm = ir_op_add(m, f, IR_OP_PMAP, 2, args, 2, rtypes, NULL);
    m->ops[pm].body = body;
    m->regions[body].parent = pm;
    ir_op_set_string(m, pm, "device_var", "d");
    ir_op_set_mesh(m, pm, "mesh", mesh);
    finish(m, f, pm, 1);
    /* A collective on a distributed tensor keeps its logical value. */
    ar = ir_op_output(m, pm, 1);
    op = ir_op_add(m, f, IR_OP_ALLREDUCE, 1, &ar, 1, NULL, NULL);
    ir_op_set_mesh(m, op, "mesh", mesh);
    finish(m, f, op, 1);
    tensor_rand(&in[0], IR_F32, 2, dx, 110);
    tensor_rand(&in[1], IR_F32, 2, dw, 111);
    run_ok(m, in, 2, &res, &nres);
    assert_int_equal(nres, 3);
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < 2; j++) {
            double want = 0;
            for (int k = 0; k < 4; k++)
                want += ex_get(&in[0], (size_t)(i * 4 + k)) * ex_get(&in[1], (size_t)(k * 2 + j));
            assert_close(ex_get(&res[0], (size_t)(i * 2 + j)), want, 1e-6);
            total += want;
        }
    assert_close(ex_get(&res[1], 0), total, 1e-5);
    assert_close(ex_get(&res[2], 0), total, 1e-5);
    free_tensors(res, nres);
    free_args(in, 2);
    ir_module_free(m);
}

static void
test_initializers_and_random(void **state)
{
    int64_t d[1] = {3};
    float w[3] = {1.5f, -2.0f, 0.25f};
    ir_module *m = ir_module_new();
    ir_id types[2], args[2], f, op;
    ex_tensor *a, *res;
    uint32_t na, nres;
    di_error err;
    (void)state;
    types[0] = ty(m, IR_F32, 1, d);
    types[1] = ty(m, IR_I64, 1, d);
    f = func(m, 2, types, args);
    ir_value_set_init(m, args[0], w, sizeof w);
    op = ir_op_add(m, f, IR_OP_IDENTITY, 1, &args[0], 1, NULL, NULL);
    finish(m, f, op, 1);
    op = ir_op_add(m, f, IR_OP_IDENTITY, 1, &args[1], 1, NULL, NULL);
    finish(m, f, op, 1);
    di_error_clear(&err);
    assert_int_equal(ex_num_args(m), 2);
    assert_int_equal(ex_random_args(m, 7, 5, &a, &na, &err), 0);
    assert_close(ex_get(&a[0], 1), -2.0, 0); /* the initializer */
    for (int i = 0; i < 3; i++)
        assert_true(ex_get(&a[1], (size_t)i) >= 0 && ex_get(&a[1], (size_t)i) < 5);
    /* data == NULL takes the initializer. */
    ex_tensor_fini(&a[0]);
    run_ok(m, a, na, &res, &nres);
    assert_close(ex_get(&res[0], 2), 0.25, 0);
    free_tensors(res, nres);
    /* A wrong shape is refused with a message naming the argument. */
    ex_tensor_fini(&a[1]);
    tensor_f(&a[1], IR_I64, 0, NULL, (double[]){1});
    assert_int_not_equal(ex_run(m, a, na, &res, &nres, &err), 0);
    assert_non_null(strstr(err.msg, "a1"));
    free_args(a, na);
    di_free(a);
    ir_module_free(m);
}

/* ---- npy ---- */

static char tmpdir[256];

static int
setup_tmp(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/test_exec.XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int
teardown_tmp(void **state)
{
    char cmd[300];
    (void)state;
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

static void
test_npy_round_trip(void **state)
{
    ir_dtype dts[] = {IR_F32, IR_F16, IR_BF16, IR_F64, IR_I64, IR_I32, IR_I8, IR_BOOL};
    int64_t d[3] = {2, 3, 2};
    char path[300];
    (void)state;
    for (size_t k = 0; k < sizeof dts / sizeof dts[0]; k++) {
        ex_tensor t, back;
        di_error err;
        di_error_clear(&err);
        assert_int_equal(ex_tensor_init(&t, dts[k], k == 0 ? 0 : 3, d), 0);
        for (size_t i = 0; i < t.numel; i++)
            ex_set(&t, i, (double)i * 1.5 - 4.0);
        snprintf(path, sizeof path, "%s/t%zu.npy", tmpdir, k);
        if (ex_npy_write(path, &t, &err) != 0 || ex_npy_read(path, &back, &err) != 0)
            fail_msg("%s: %s", ir_dtype_name(dts[k]), err.msg);
        assert_int_equal(back.dtype, t.dtype);
        assert_int_equal(back.rank, t.rank);
        assert_int_equal(back.numel, t.numel);
        for (size_t i = 0; i < t.numel; i++)
            assert_close(ex_get(&back, i), ex_get(&t, i), 0);
        ex_tensor_fini(&t);
        ex_tensor_fini(&back);
    }
}

/* A .npy image with the given header text and n payload bytes. */
static size_t
npy_image(uint8_t *buf, int version, const char *header, size_t payload)
{
    size_t hl = strlen(header), start = version == 1 ? 10 : 12;
    memcpy(buf, "\x93NUMPY", 6);
    buf[6] = (uint8_t)version;
    buf[7] = 0;
    buf[8] = (uint8_t)hl;
    buf[9] = (uint8_t)(hl >> 8);
    if (version != 1) {
        buf[10] = 0;
        buf[11] = 0;
    }
    memcpy(buf + start, header, hl);
    memset(buf + start + hl, 0, payload);
    return start + hl + payload;
}

static void
test_npy_malformed(void **state)
{
    static const struct {
        int version;
        const char *header;
        size_t payload;
        const char *want;
    } cases[] = {
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }\n", 8, NULL},
        {2, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }\n", 8, NULL},
        {1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }\n", 8, "Fortran"},
        {1, "{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }\n", 8, "big-endian"},
        {1, "{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }\n", 16, "'<c8'"},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }\n", 8, "needs 12"},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}\n", 8, "'x'"},
        {1, "{'descr': '<f4', 'shape': (2,), }\n", 8, "needs the keys"},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,-1), }\n", 8, "dimension"},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999,99999999999,"
            "99999999999), }\n", 8, "too large"},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,)", 8, "expected"},
        {1, "{'descr': '<f4\\', 'fortran_order': False, 'shape': (2,), }\n", 8, "character"},
        {9, "{}", 0, "version"},
    };
    uint8_t buf[512];
    (void)state;
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        size_t n = npy_image(buf, cases[k].version, cases[k].header, cases[k].payload);
        ex_tensor t;
        di_error err;
        int rc;
        di_error_clear(&err);
        rc = ex_npy_parse(buf, n, &t, &err);
        if (cases[k].want == NULL) {
            if (rc != 0)
                fail_msg("case %zu: %s", k, err.msg);
            ex_tensor_fini(&t);
            continue;
        }
        if (rc == 0)
            fail_msg("case %zu was accepted", k);
        if (strstr(err.msg, cases[k].want) == NULL)
            fail_msg("case %zu: message \"%s\" does not mention \"%s\"", k, err.msg,
                     cases[k].want);
    }
    /* Truncations of a good file never crash and are all refused. */
    {
        size_t n = npy_image(buf, 1, cases[0].header, 8);
        for (size_t cut = 0; cut < n; cut++) {
            ex_tensor t;
            di_error err;
            assert_int_not_equal(ex_npy_parse(buf, cut, &t, &err), 0);
        }
        ex_tensor t;
        di_error err;
        assert_int_not_equal(ex_npy_parse((const uint8_t *)"\x93NUMPX\x01\x00\x00\x00", 10, &t,
                                          &err), 0);
        assert_non_null(strstr(err.msg, "magic"));
    }
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matmul_small),
        cmocka_unit_test(test_matmul_batched_vector),
        cmocka_unit_test(test_matmul_1024_fast),
        cmocka_unit_test(test_gemm),
        cmocka_unit_test(test_broadcasting),
        cmocka_unit_test(test_int_arith),
        cmocka_unit_test(test_softmax_rows),
        cmocka_unit_test(test_layernorm_stats),
        cmocka_unit_test(test_dropout),
        cmocka_unit_test(test_adam_sgd),
        cmocka_unit_test(test_sce_loss),
        cmocka_unit_test(test_grad_matmul),
        cmocka_unit_test(test_swish),
        cmocka_unit_test(test_rmsnorm),
        cmocka_unit_test(test_norm_stash_type_exec),
        cmocka_unit_test(test_grad_activations),
        cmocka_unit_test(test_gelu_tanh),
        cmocka_unit_test(test_grad_softmax),
        cmocka_unit_test(test_grad_layernorm),
        cmocka_unit_test(test_grad_dropout),
        cmocka_unit_test(test_grad_losses),
        cmocka_unit_test(test_grad_gather),
        cmocka_unit_test(test_grad_reducesumto),
        cmocka_unit_test(test_movement),
        cmocka_unit_test(test_distributed_equals_sequential),
        cmocka_unit_test(test_callee),
        cmocka_unit_test(test_tuple_collectives),
        cmocka_unit_test(test_pmap_mesh_dtensor),
        cmocka_unit_test(test_initializers_and_random),
        cmocka_unit_test_setup_teardown(test_npy_round_trip, setup_tmp, teardown_tmp),
        cmocka_unit_test(test_npy_malformed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
