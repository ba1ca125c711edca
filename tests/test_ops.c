/*
 * test_ops.c: shape inference and FLOP/byte counts of the op table
 * (lib/ir/ops.c, docs/ops.md). Each test builds a small module with the
 * module API, runs ir_op_infer on one op at a time and compares the result
 * with a type built by hand (types are interned, so equal types have equal
 * ids); error cases check the code and a piece of the message. Costs are
 * compared with numbers derived by hand in the comments.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "ir/ir.h"

/* A shape literal: DIMS(64, 128) expands to the rank and the dims. */
#define DIMS(...)                                                                                  \
    (uint32_t)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[])                    \
    {                                                                                              \
        __VA_ARGS__                                                                                \
    }
#define SCALAR 0, NULL
#define IDS(...) (ir_id[]){__VA_ARGS__}
#define NIDS(...) (uint32_t)(sizeof((ir_id[]){__VA_ARGS__}) / sizeof(ir_id)), (ir_id[]){__VA_ARGS__}

/* ---- helpers ---- */

static ir_id
ten(ir_module *m, ir_dtype dt, int32_t device, uint32_t rank, const int64_t *dims)
{
    return ir_type_tensor(m, dt, rank, dims, device);
}

static ir_id
tvar(ir_module *m, ir_dtype dt, const char *var, uint32_t rank, const int64_t *dims)
{
    return ir_type_tensor_var(m, dt, rank, dims, ir_str(m, var));
}

static ir_id
arg(ir_module *m, ir_id r, ir_id type)
{
    return ir_region_add_arg(m, r, type, NULL);
}

/* Adds an op whose results have no types yet. */
static ir_id
mkop(ir_module *m, ir_id r, int kind, uint32_t nin, const ir_id *in, uint32_t nout)
{
    return ir_op_add(m, r, kind, nin, in, nout, NULL, NULL);
}

static void
type_desc(const ir_module *m, ir_id t, char *buf, size_t n)
{
    const ir_type *ty;
    size_t len;
    if (t == 0 || t >= m->ntype) {
        snprintf(buf, n, "<no type %u>", t);
        return;
    }
    ty = ir_type_get(m, t);
    if (ty->kind == IR_TYPE_TUPLE) {
        len = (size_t)snprintf(buf, n, "tuple(");
        for (uint32_t i = 0; i < ty->nelem && len < n; i++) {
            char e[256];
            type_desc(m, ir_type_elems(m, t)[i], e, sizeof e);
            len += (size_t)snprintf(buf + len, n - len, "%s%s", i ? ", " : "", e);
        }
        if (len < n)
            snprintf(buf + len, n - len, ")");
        return;
    }
    len = (size_t)snprintf(buf, n, "%s[", ir_dtype_name((ir_dtype)ty->dtype));
    for (uint32_t i = 0; i < ty->rank && len < n; i++)
        len += (size_t)snprintf(buf + len, n - len, "%s%lld", i ? "," : "",
                                (long long)ir_type_dims(m, t)[i]);
    if (len < n)
        len += (size_t)snprintf(buf + len, n - len, "] dev=%d var=%s mesh=%u", (int)ty->device,
                                ir_str_get(m, ty->devvar), ty->mesh);
    if (ty->mesh)
        for (uint32_t a = 0; a < m->meshes[ty->mesh].rank && len < n; a++)
            len += (size_t)snprintf(buf + len, n - len, " %lld",
                                    (long long)m->ints[ty->placements + a]);
}

static void
expect_type_at(const ir_module *m, ir_id got, ir_id want, const char *file, int line)
{
    char g[1024], w[1024];
    if (got == want)
        return;
    type_desc(m, got, g, sizeof g);
    type_desc(m, want, w, sizeof w);
    fail_msg("%s:%d: got type %s, expected %s", file, line, g, w);
}
#define EXPECT_TYPE(m, got, want) expect_type_at(m, got, want, __FILE__, __LINE__)

static void
infer_ok_at(ir_module *m, ir_id op, ir_id *out, const char *file, int line)
{
    di_error err;
    int rc;
    di_error_clear(&err);
    rc = ir_op_infer(m, op, out, &err);
    if (rc != 0)
        fail_msg("%s:%d: unexpected error %d: %s", file, line, rc, err.msg);
}
#define INFER_OK(m, op, out) infer_ok_at(m, op, out, __FILE__, __LINE__)

/* Infers op's single result and compares it with want. */
#define EXPECT_RESULT(m, op, want)                                                                 \
    do {                                                                                           \
        ir_id out_[1] = {0};                                                                       \
        INFER_OK(m, op, out_);                                                                     \
        EXPECT_TYPE(m, out_[0], want);                                                             \
    } while (0)

static void
infer_err_at(ir_module *m, ir_id op, const char *needle, const char *file, int line)
{
    di_error err;
    ir_id out[16] = {0};
    int rc;
    di_error_clear(&err);
    rc = ir_op_infer(m, op, out, &err);
    if (rc != DI_EVERIFY)
        fail_msg("%s:%d: expected DI_EVERIFY containing \"%s\", got %d (%s)", file, line, needle,
                 rc, err.msg);
    if (strstr(err.msg, needle) == NULL)
        fail_msg("%s:%d: error \"%s\" does not contain \"%s\"", file, line, err.msg, needle);
}
#define EXPECT_ERR(m, op, needle) infer_err_at(m, op, needle, __FILE__, __LINE__)

static void
expect_double_at(double got, double want, const char *what, const char *file, int line)
{
    if (got != want)
        fail_msg("%s:%d: %s is %.17g, expected %.17g", file, line, what, got, want);
}
#define EXPECT_D(got, want) expect_double_at(got, want, #got, __FILE__, __LINE__)

/* Gives every result of op its inferred type (so later ops can use it). */
static void
settle(ir_module *m, ir_id op)
{
    ir_id out[16] = {0};
    INFER_OK(m, op, out);
    for (uint32_t i = 0; i < m->ops[op].noutput; i++)
        m->values[ir_op_output(m, op, i)].type = out[i];
}

/* ---- labels and result types ---- */

/*
 * ir_op_label: the first result's name, else the op's name, else its id;
 * out-of-range ids and strings (a malformed module) never read outside the
 * arrays.
 */
static void
test_op_label(void **state)
{
    ir_module *m = ir_module_new();
    ir_id f = ir_func_new(m, "main");
    ir_id a = arg(m, f, ten(m, IR_F32, 0, DIMS(3, 4)));
    ir_id op = mkop(m, f, IR_OP_RELU, NIDS(a), 1);
    (void)state;
    assert_string_equal(ir_op_label(m, op).s, "Relu (op 1)");
    m->ops[op].name = ir_str(m, "act1");
    assert_string_equal(ir_op_label(m, op).s, "Relu 'act1'");
    m->values[ir_op_output(m, op, 0)].name = ir_str(m, "h");
    assert_string_equal(ir_op_label(m, op).s, "Relu %h");
    m->values[ir_op_output(m, op, 0)].name = m->nchar + 5;
    m->ops[op].name = m->nchar;
    assert_string_equal(ir_op_label(m, op).s, "Relu (op 1)");
    m->ops[op].kind = IR_NOPKIND;
    assert_string_equal(ir_op_label(m, op).s, "? (op 1)");
    assert_string_equal(ir_op_label(m, m->nop).s, "? (op 2)");
    ir_module_free(m);
}

/* ir_op_infer_results types every result, however many (no fixed cap). */
static void
test_infer_results(void **state)
{
    ir_module *m = ir_module_new();
    ir_id f = ir_func_new(m, "main");
    ir_id x = arg(m, f, ten(m, IR_F32, 0, DIMS(40, 3)));
    ir_id op = mkop(m, f, IR_OP_SPLIT, NIDS(x), 40), want = ten(m, IR_F32, 0, DIMS(1, 3));
    di_error err;
    (void)state;
    di_error_clear(&err);
    assert_int_equal(ir_op_infer_results(m, op, &err), 0);
    for (uint32_t i = 0; i < 40; i++)
        EXPECT_TYPE(m, m->values[ir_op_output(m, op, i)].type, want);
    op = mkop(m, f, IR_OP_SPLIT, NIDS(x), 3);
    assert_int_equal(ir_op_infer_results(m, op, &err), DI_EVERIFY);
    assert_string_equal(err.msg, "Split (op 2): axis 0 of input 0 has size 40, which does not "
                                 "split evenly into 3 parts");
    assert_int_equal(m->values[ir_op_output(m, op, 0)].type, 0);
    ir_module_free(m);
}

/* ---- linear algebra ---- */

static void
test_matmul(void **state)
{
    ir_module *m = ir_module_new();
    ir_id f = ir_func_new(m, "main");
    ir_id a = arg(m, f, ten(m, IR_F32, 0, DIMS(64, 128)));
    ir_id b = arg(m, f, ten(m, IR_F32, 0, DIMS(128, 256)));
    ir_id op = mkop(m, f, IR_OP_MATMUL, NIDS(a, b), 1);
    ir_cost c;
    (void)state;
    EXPECT_RESULT(m, op, ten(m, IR_F32, 0, DIMS(64, 256)));
    settle(m, op);
    ir_op_cost(m, op, &c);
    /* 2 * 64 * 128 * 256 = 4194304 FLOPs. */
    EXPECT_D(c.flops, 4194304.0);
    /* Reads (64*128 + 128*256) * 4 = 163840 bytes, writes 64*256*4 = 65536. */
    EXPECT_D(c.bytes_read, 163840.0);
    EXPECT_D(c.bytes_write, 65536.0);
    EXPECT_D(c.bytes_comm, 0.0);
    ir_module_free(m);
}

static void
test_matmul_numpy_rules(void **state)
{
    ir_module *m = ir_module_new();
    ir_id f = ir_func_new(m, "main");
    ir_id a4 = arg(m, f, ten(m, IR_F32, 0, DIMS(2, 1, 3, 4)));
    ir_id b3 = arg(m, f, ten(m, IR_F32, 0, DIMS(5, 4, 6)));
    ir_id v4 = arg(m, f, ten(m, IR_F32, 0, DIMS(4)));
    ir_id m46 = arg(m, f, ten(m, IR_F32, 0, DIMS(4, 6)));
    ir_id m34 = arg(m, f, ten(m, IR_F32, 0, DIMS(3, 4)));
    ir_id op;
    ir_cost c;
    (void)state;
    /* Batch dims [2,1] and [5] broadcast to [2,5]. */
    op = mkop(m, f, IR_OP_MATMUL, NIDS(a4, b3), 1);
    EXPECT_RESULT(m, op, ten(m, IR_F32, 0, DIMS(2, 5, 3, 6)));
    settle(m, op);
    ir_op_cost(m, op, &c);
    /* batch 2*5 = 10, M 3, N 6, K 4: 2 * 10 * 3 * 6 * 4 = 1440. */
    EXPECT_D(c.flops, 1440.0);
    /* Vector on the left: [4] x [4,6] -> [6]; on the right: [3,4] x [4] -> [3]. */
    EXPECT_RESULT(m, mkop(m, f, IR_OP_MATMUL, NIDS(v4, m46), 1), ten(m, IR_F32, 0, DIMS(6)));
    EXPECT_RESULT(m, mkop(m, f, IR_OP_MATMUL, NIDS(m34, v4), 1), ten(m, IR_F32, 0, DIMS(3)));
    /* Dot product: a scalar; 2 * 1 * 1 * 4 = 8 FLOPs. */
    op = mkop(m, f, IR_OP_MATMUL, NIDS(v4, v4), 1);
    EXPECT_RESULT(m, op, ten(m, IR_F32, 0, SCALAR));
    settle(m, op);
    ir_op_cost(m, op, &c);
    EXPECT_D(c.flops, 8.0);
    ir_module_free(m);
}

static void
test_matmul_errors(void **state)
{
    ir_module *m = ir_module_new();
    ir_id f = ir_func_new(m, "main");
    ir_id a = arg(m, f, ten(m, IR_F32, 0, DIMS(3, 4)));
    ir_id b = arg(m, f, ten(m, IR_F32, 0, DIMS(3, 5)));
    ir_id b1 = arg(m, f, ten(m, IR_F32, 1, DIMS(4, 5)));
    ir_id h = arg(m, f, ten(m, IR_F16, 0, DIMS(4, 5)));
    ir_id s = arg(m, f, ten(m, IR_F32, 0, SCALAR));
    ir_id x = arg(m, f, ten(m, IR_F32, 0, DIMS(2, 3, 4)));
    ir_id y = arg(m, f, ten(m, IR_F32, 0, DIMS(3, 4, 5)));
    ir_id tup = arg(m, f, ir_type_tuple(m, 2, IDS(ten(m, IR_F32, 0, DIMS(3, 4)),
                                                  ten(m, IR_F32, 1, DIMS(3, 4)))));
    ir_id op;
    (void)state;
    EXPECT_ERR(m, mkop(m, f, IR_OP_MATMUL, NIDS(a, b), 1),
               "MatMul (op 1): input 1 has shape [3,5], expected [4,*] (inner dimensions differ");
    EXPECT_ERR(m, mkop(m, f, IR_OP_MATMUL, NIDS(a, b1), 1),
               "inputs on different devices (0 and 1): insert a dist.send");
    EXPECT_ERR(m, mkop(m, f, IR_OP_MATMUL, NIDS(a, h), 1), "input 1 has dtype f16, expected f32");
    EXPECT_ERR(m, mkop(m, f, IR_OP_MATMUL, NIDS(a, s), 1), "input 1 is a scalar");
    EXPECT_ERR(m, mkop(m, f, IR_OP_MATMUL, NIDS(x, y), 1), "batch dimensions");
    EXPECT_ERR(m, mkop(m, f, IR_OP_MATMUL, NIDS(tup, a), 1), "input 0 is a tuple of 2");
    /* A named result labels the message. */
    op = ir_op_add(m, f, IR_OP_MATMUL, 2, IDS(a, b), 1, NULL, (const char *[]){"y"});
    EXPECT_ERR(m, op, "MatMul %y: input 1 has shape [3,5]");
    /* Wrong arity is caught before the op's own function runs. */
    EXPECT_ERR(m, mkop(m, f, IR_OP_MATMUL, NIDS(a, a, a), 1), "MatMul (op 8): takes 2 inputs, not 3");
    ir_module_free(m);
}

static void
test_gemm(void **state)
{
    ir_module *m = ir_module_new();
    ir_id f = ir_func_new(m, "main");
    ir_id a = arg(m, f, ten(m, IR_F32, 0, DIMS(4, 3)));  /* transA: M 3, K 4 */
    ir_id b = arg(m, f, ten(m, IR_F32, 0, DIMS(5, 4)));  /* transB: N 5, K 4 */
    ir_id cvec = arg(m, f, ten(m, IR_F32, 0, DIMS(5)));
    ir_id cbad = arg(m, f, ten(m, IR_F32, 0, DIMS(4)));
    ir_id op;
    ir_cost c;
    (void)state;
    op = mkop(m, f, IR_OP_GEMM, NIDS(a, b, cvec), 1);
    ir_op_set_int(m, op, "transA", 1);
    ir_op_set_int(m, op, "transB", 1);
    EXPECT_RESULT(m, op, ten(m, IR_F32, 0, DIMS(3, 5)));
    settle(m, op);
    ir_op_cost(m, op, &c);
    /* 2 * M*N * K + 2 * M*N = 2*15*4 + 30 = 150. */
    EXPECT_D(c.flops, 150.0);
    op = mkop(m, f, IR_OP_GEMM, NIDS(a, b, cbad), 1);
    ir_op_set_int(m, op, "transA", 1);
    ir_op_set_int(m, op, "transB", 1);
    EXPECT_ERR(m, op, "input 2 has shape [4], which does not broadcast to [3,5]");
    op = mkop(m, f, IR_OP_GEMM, NIDS(a, b), 1); /* no transposes: [4,3] x [5,4] */
    EXPECT_ERR(m, op, "input 1 has shape [5,4], expected [3,*]");
    ir_module_free(m);
}

/* ---- elementwise ---- */

static void
test_broadcasting(void **state)
{
    ir_module *m = ir_module_new();
    ir_id f = ir_func_new(m, "main");
    ir_id x = arg(m, f, ten(m, IR_F32, 0, DIMS(4, 1, 3)));
    ir_id y = arg(m, f, ten(m, IR_F32, 0, DIMS(5, 1)));
    ir_id p = arg(m, f, ten(m, IR_F32, 0, DIMS(3, 5)));
    ir_id q = arg(m, f, ten(m, IR_F32, 0, DIMS(4, 5)));
    ir_id i = arg(m, f, ten(m, IR_I32, 0, DIMS(4, 5)));
    ir_id cond = arg(m, f, ten(m, IR_BOOL, 0, DIMS(4, 1)));
    ir_id row = arg(m, f, ten(m, IR_F32, 0, DIMS(1, 3)));
    ir_id k = arg(m, f, ten(m, IR_F32, IR_DEVICE_NONE, SCALAR)); /* an unplaced constant */
    ir_id big = arg(m, f, ten(m, IR_F32, 0, DIMS(1000)));
    ir_id op;
    ir_cost c;
    (void)state;
    EXPECT_RESULT(m, mkop(m, f, IR_OP_ADD, NIDS(x, y), 1), ten(m, IR_F32, 0, DIMS(4, 5, 3)));
    EXPECT_RESULT(m, mkop(m, f, IR_OP_MUL, NIDS(y, x), 1), ten(m, IR_F32, 0, DIMS(4, 5, 3)));
    EXPECT_ERR(m, mkop(m, f, IR_OP_SUB, NIDS(q, p), 1),
               "input 1 has shape [3,5], which does not broadcast with input 0's shape [4,5]");
    EXPECT_ERR(m, mkop(m, f, IR_OP_DIV, NIDS(q, i), 1), "input 1 has dtype i32, expected f32");
    /* Where(cond [4,1], x [1,3], y scalar) -> [4,3]; the unplaced scalar joins device 0. */
    EXPECT_RESULT(m, mkop(m, f, IR_OP_WHERE, NIDS(cond, row, k), 1),
                  ten(m, IR_F32, 0, DIMS(4, 3)));
    EXPECT_ERR(m, mkop(m, f, IR_OP_WHERE, NIDS(q, row, k), 1), "condition) has dtype f32");
    /* Add of two [1000] tensors: 1000 FLOPs, reads 8000 bytes, writes 4000. */
    op = mkop(m, f, IR_OP_ADD, NIDS(big, big), 1);
    settle(m, op);
    ir_op_cost(m, op, &c);
    EXPECT_D(c.flops, 1000.0);
    EXPECT_D(c.bytes_read, 8000.0);
    EXPECT_D(c.bytes_write, 4000.0);
    /* Pow is transcendental: 4 per element. */
    op = mkop(m, f, IR_OP_POW, NIDS(big, k), 1);
    settle(m, op);
    ir_op_cost(m, op, &c);
    EXPECT_D(c.flops, 4000.0);
    ir_module_free(m);
}

static void
test_unary(void **state)
{
    ir_module *m = ir_module_new();
    ir_id f = ir_func_new(m, "main");
    ir_id xt = ten(m, IR_F32, 2, DIMS(8, 16));
    ir_id x = arg(m, f, xt);
    ir_id n = arg(m, f, ten(m, IR_I64, 2, DIMS(8)));
    ir_id op;
    ir_cost c;
    ir_id out[2];
    (void)state;
    EXPECT_RESULT(m, mkop(m, f, IR_OP_RELU, NIDS(x), 1), xt);
    EXPECT_RESULT(m, mkop(m, f, IR_OP_IDENTITY, NIDS(n), 1), ten(m, IR_I64, 2, DIMS(8)));
    EXPECT_RESULT(m, mkop(m, f, IR_OP_SIGMOID, NIDS(x), 1), xt);
    EXPECT_ERR(m, mkop(m, f, IR_OP_SQRT, NIDS(n), 1), "expected a floating-point dtype");
    /* Softmax: axis 1 is fine, axis 2 is out of range for rank 2. */
    op = mkop(m, f, IR_OP_SOFTMAX, NIDS(x), 1);
    ir_op_set_int(m, op, "axis", 1);
    EXPECT_RESULT(m, op, xt);
    op = mkop(m, f, IR_OP_SOFTMAX, NIDS(x), 1);
    ir_op_set_int(m, op, "axis", 2);
    EXPECT_ERR(m, op, "axis 2 is out of range for rank 2");
    /* Cast to=10 is f16; 99 is not an ONNX type we know. */
    op = mkop(m, f, IR_OP_CAST, NIDS(x), 1);
    ir_op_set_int(m, op, "to", 10);
    EXPECT_RESULT(m, op, ten(m, IR_F16, 2, DIMS(8, 16)));
    op = mkop(m, f, IR_OP_CAST, NIDS(x), 1);
    ir_op_set_int(m, op, "to", 99);
    EXPECT_ERR(m, op, "to = 99 is not a supported ONNX data type");
    /* Dropout with a mask result. */
    op = mkop(m, f, IR_OP_DROPOUT, NIDS(x), 2);
    INFER_OK(m, op, out);
    EXPECT_TYPE(m, out[0], xt);
    EXPECT_TYPE(m, out[1], ten(m, IR_BOOL, 2, DIMS(8, 16)));
    op = mkop(m, f, IR_OP_DROPOUT, NIDS(x), 1);
    ir_op_set_float(m, op, "ratio", 1.5);
    EXPECT_ERR(m, op, "ratio 1.5 is outside [0, 1)");
    /* FLOPs per element over 128 elements: Gelu 8, Swish 5, Tanh 4, Sqrt 4, Softmax 5, Relu 1. */
    op = mkop(m, f, IR_OP_GELU, NIDS(x), 1);
    settle(m, op);
    ir_op_cost(m, op, &c);
    EXPECT_D(c.flops, 1024.0);
    EXPECT_D(c.bytes_read, 512.0);
    op = mkop(m, f, IR_OP_SWISH, NIDS(x), 1);
    settle(m, op);
    ir_op_cost(m, op, &c);
    EXPECT_D(c.flops, 640.0);
    EXPECT_D(c.bytes_read, 512.0);
    op = mkop(m, f, IR_OP_TANH, NIDS(x), 1);
    settle(m, op);
    ir_op_cost(m, op, &c);
    EXPECT_D(c.flops, 512.0);
    op = mkop(m, f, IR_OP_SQRT, NIDS(x), 1);
    settle(m, op);
    ir_op_cost(m, op, &c);
    EXPECT_D(c.flops, 512.0);
    op = mkop(m, f, IR_OP_SOFTMAX, NIDS(x), 1);
    settle(m, op);
    ir_op_cost(m, op, &c);
    EXPECT_D(c.flops, 640.0);
    op = mkop(m, f, IR_OP_RELU, NIDS(x), 1);
    settle(m, op);
    ir_op_cost(m, op, &c);
    EXPECT_D(c.flops, 128.0);
    /* Identity is free: no FLOPs, no bytes. */
    op = mkop(m, f, IR_OP_IDENTITY, NIDS(x), 1);
    settle(m, op);
    ir_op_cost(m, op, &c);
    EXPECT_D(c.flops + c.bytes_read + c.bytes_write, 0.0);
    ir_module_free(m);
}

static void
test_layernorm(void **state)
{
    ir_module *m = ir_module_new();
    ir_id f = ir_func_new(m, "main");
    ir_id xt = ten(m, IR_F32, 0, DIMS(8, 16, 32));
    ir_id x = arg(m, f, xt);
    ir_id s32 = arg(m, f, ten(m, IR_F32, 0, DIMS(32)));
    ir_id s1632 = arg(m, f, ten(m, IR_F32, 0, DIMS(16, 32)));
    ir_id s16 = arg(m, f, ten(m, IR_F32, 0, DIMS(16)));
    ir_id out[3];
    ir_id op;
    ir_cost c;
    (void)state;
    op = mkop(m, f, IR_OP_LAYERNORM, NIDS(x, s32, s32), 3);
    INFER_OK(m, op, out);
    EXPECT_TYPE(m, out[0], xt);
    EXPECT_TYPE(m, out[1], ten(m, IR_F32, 0, DIMS(8, 16, 1)));
    EXPECT_TYPE(m, out[2], ten(m, IR_F32, 0, DIMS(8, 16, 1)));
    settle(m, op);
    ir_op_cost(m, op, &c);
    /* 8 FLOPs per element of x: 8 * 4096. */
    EXPECT_D(c.flops, 32768.0);
    op = mkop(m, f, IR_OP_LAYERNORM, NIDS(x, s1632), 2);
    ir_op_set_int(m, op, "axis", 1);
    INFER_OK(m, op, out);
    EXPECT_TYPE(m, out[1], ten(m, IR_F32, 0, DIMS(8, 1, 1)));
    op = mkop(m, f, IR_OP_LAYERNORM, NIDS(x, s16), 1);
    EXPECT_ERR(m, op, "input 1 (scale) has shape [16], expected [32]");
    assert_int_equal(ir_opkind_from_name("LayerNorm", 9), IR_OP_LAYERNORM);
    /* RMSNormalization: y and the inverse root mean square, 4 FLOPs per element. */
    op = mkop(m, f, IR_OP_RMSNORM, NIDS(x, s32), 2);
    INFER_OK(m, op, out);
    EXPECT_TYPE(m, out[0], xt);
    EXPECT_TYPE(m, out[1], ten(m, IR_F32, 0, DIMS(8, 16, 1)));
    settle(m, op);
    ir_op_cost(m, op, &c);
    EXPECT_D(c.flops, 4.0 * 4096.0);
    EXPECT_ERR(m, mkop(m, f, IR_OP_RMSNORM, NIDS(x, s16), 1),
               "input 1 (scale) has shape [16], expected [32]");
    ir_module_free(m);
}

/*
 * The statistics' dtype: stash_type (ONNX's code) when set, else x's (modules
 * written before the attribute).
 */
static void
test_norm_stash_type(void **state)
{
    ir_module *m = ir_module_new();
    ir_id f = ir_func_new(m, "main");
    ir_id xt = ten(m, IR_BF16, 0, DIMS(4, 8));
    ir_id x = arg(m, f, xt), s8 = arg(m, f, ten(m, IR_BF16, 0, DIMS(8)));
    ir_id out[3], op;
    (void)state;
    op = mkop(m, f, IR_OP_LAYERNORM, NIDS(x, s8, s8), 3);
    INFER_OK(m, op, out);
    EXPECT_TYPE(m, out[1], ten(m, IR_BF16, 0, DIMS(4, 1)));
    op = mkop(m, f, IR_OP_LAYERNORM, NIDS(x, s8, s8), 3);
    ir_op_set_int(m, op, "stash_type", 1);
    INFER_OK(m, op, out);
    EXPECT_TYPE(m, out[0], xt);
    EXPECT_TYPE(m, out[1], ten(m, IR_F32, 0, DIMS(4, 1)));
    EXPECT_TYPE(m, out[2], ten(m, IR_F32, 0, DIMS(4, 1)));
    op = mkop(m, f, IR_OP_RMSNORM, NIDS(x, s8), 2);
    ir_op_set_int(m, op, "stash_type", 1);
    INFER_OK(m, op, out);
    EXPECT_TYPE(m, out[1], ten(m, IR_F32, 0, DIMS(4, 1)));
    op = mkop(m, f, IR_OP_RMSNORM, NIDS(x, s8), 2);
    ir_op_set_int(m, op, "stash_type", 7);
    EXPECT_ERR(m, op, "stash_type = 7 is not a float ONNX data type");
    ir_module_free(m);
}

/* ---- shapes ---- */

static void
test_reshape_transpose(void **state)
{
    ir_module *m = ir_module_new();
    ir_id f = ir_func_new(m, "main");
    ir_id x = arg(m, f, ten(m, IR_F32, 0, DIMS(2, 3, 4)));
    ir_id op;
    ir_cost c;
    (void)state;
    op = mkop(m, f, IR_OP_RESHAPE, NIDS(x), 1);
    ir_op_set_ints(m, op, "shape", DIMS(0, -1));
    EXPECT_RESULT(m, op, ten(m, IR_F32, 0, DIMS(2, 12)));
    settle(m, op);
    ir_op_cost(m, op, &c);
    EXPECT_D(c.bytes_read + c.bytes_write + c.flops, 0.0); /* a view */
    op = mkop(m, f, IR_OP_RESHAPE, NIDS(x), 1);
    ir_op_set_ints(m, op, "shape", DIMS(6, 4));
    EXPECT_RESULT(m, op, ten(m, IR_F32, 0, DIMS(6, 4)));
    op = mkop(m, f, IR_OP_RESHAPE, NIDS(x), 1);
    ir_op_set_ints(m, op, "shape", DIMS(5, 5));
    EXPECT_ERR(m, op, "shape [5,5] has 25 elements, input 0 has shape [2,3,4] with 24");
    op = mkop(m, f, IR_OP_RESHAPE, NIDS(x), 1);
    ir_op_set_ints(m, op, "shape", DIMS(-1, -1));
    EXPECT_ERR(m, op, "more than one -1");
    op = mkop(m, f, IR_OP_RESHAPE, NIDS(x), 1);
    ir_op_set_ints(m, op, "shape", DIMS(5, -1));
    EXPECT_ERR(m, op, "cannot infer the -1");
    op = mkop(m, f, IR_OP_TRANSPOSE, NIDS(x), 1);
    EXPECT_RESULT(m, op, ten(m, IR_F32, 0, DIMS(4, 3, 2)));
    op = mkop(m, f, IR_OP_TRANSPOSE, NIDS(x), 1);
    ir_op_set_ints(m, op, "perm", DIMS(0, 2, 1));
    EXPECT_RESULT(m, op, ten(m, IR_F32, 0, DIMS(2, 4, 3)));
    settle(m, op);
    ir_op_cost(m, op, &c);
    /* A copy: 96 bytes in, 96 out, no FLOPs. */
    EXPECT_D(c.bytes_read, 96.0);
    EXPECT_D(c.bytes_write, 96.0);
    EXPECT_D(c.flops, 0.0);
    op = mkop(m, f, IR_OP_TRANSPOSE, NIDS(x), 1);
    ir_op_set_ints(m, op, "perm", DIMS(0, 0, 1));
    EXPECT_ERR(m, op, "perm is not a permutation");
    ir_module_free(m);
}

static void
test_concat_split(void **state)
{
    ir_module *m = ir_module_new();
    ir_id f = ir_func_new(m, "main");
    ir_id a = arg(m, f, ten(m, IR_F32, 0, DIMS(2, 3)));
    ir_id b = arg(m, f, ten(m, IR_F32, 0, DIMS(2, 5)));
    ir_id cc = arg(m, f, ten(m, IR_F32, 0, DIMS(3, 5)));
    ir_id x = arg(m, f, ten(m, IR_F32, 0, DIMS(6, 4)));
    ir_id out[4];
    ir_id op;
    (void)state;
    op = mkop(m, f, IR_OP_CONCAT, NIDS(a, b, a), 1);
    ir_op_set_int(m, op, "axis", -1);
    EXPECT_RESULT(m, op, ten(m, IR_F32, 0, DIMS(2, 11)));
    op = mkop(m, f, IR_OP_CONCAT, NIDS(a, cc), 1);
    ir_op_set_int(m, op, "axis", 1);
    EXPECT_ERR(m, op, "input 1 has shape [3,5], which differs from input 0's shape [2,3] outside "
                      "axis 1");
    op = mkop(m, f, IR_OP_CONCAT, NIDS(a, b), 1);
    ir_op_set_int(m, op, "axis", 2);
    EXPECT_ERR(m, op, "axis 2 is out of range for rank 2");
    /* Equal split into 3: [2,4] each. */
    op = mkop(m, f, IR_OP_SPLIT, NIDS(x), 3);
    INFER_OK(m, op, out);
    for (int i = 0; i < 3; i++)
        EXPECT_TYPE(m, out[i], ten(m, IR_F32, 0, DIMS(2, 4)));
    op = mkop(m, f, IR_OP_SPLIT, NIDS(x), 2);
    ir_op_set_int(m, op, "axis", 1);
    ir_op_set_ints(m, op, "split", DIMS(1, 3));
    INFER_OK(m, op, out);
    EXPECT_TYPE(m, out[0], ten(m, IR_F32, 0, DIMS(6, 1)));
    EXPECT_TYPE(m, out[1], ten(m, IR_F32, 0, DIMS(6, 3)));
    op = mkop(m, f, IR_OP_SPLIT, NIDS(x), 4);
    EXPECT_ERR(m, op, "does not split evenly into 4 parts");
    op = mkop(m, f, IR_OP_SPLIT, NIDS(x), 2);
    ir_op_set_ints(m, op, "split", DIMS(1, 2));
    EXPECT_ERR(m, op, "split sizes add up to 3, but axis 0 of input 0 has size 6");
    /* A negative size (once read after its buffer was freed). */
    op = mkop(m, f, IR_OP_SPLIT, NIDS(x), 2);
    ir_op_set_ints(m, op, "split", DIMS(-1, 7));
    EXPECT_ERR(m, op, "split[0] = -1 is invalid");
    ir_module_free(m);
}

static void
test_slice(void **state)
{
    ir_module *m = ir_module_new();
    ir_id f = ir_func_new(m, "main");
    ir_id x = arg(m, f, ten(m, IR_F32, 0, DIMS(10, 20)));
    ir_id op;
    ir_cost c;
    (void)state;
    /* Rows 1..end, columns -5..-1 (15..19): [9,4]. */
    op = mkop(m, f, IR_OP_SLICE, NIDS(x), 1);
    ir_op_set_ints(m, op, "starts", DIMS(1, -5));
    ir_op_set_ints(m, op, "ends", DIMS(INT64_MAX, -1));
    EXPECT_RESULT(m, op, ten(m, IR_F32, 0, DIMS(9, 4)));
    settle(m, op);
    ir_op_cost(m, op, &c);
    /* Only the slice is read: 36 * 4 bytes. */
    EXPECT_D(c.bytes_read, 144.0);
    EXPECT_D(c.bytes_write, 144.0);
    /* Reverse axis 1 entirely: starts -1, ends INT64_MIN, step -1 -> 20. */
    op = mkop(m, f, IR_OP_SLICE, NIDS(x), 1);
    ir_op_set_ints(m, op, "starts", DIMS(-1));
    ir_op_set_ints(m, op, "ends", DIMS(INT64_MIN));
    ir_op_set_ints(m, op, "axes", DIMS(-1));
    ir_op_set_ints(m, op, "steps", DIMS(-1));
    EXPECT_RESULT(m, op, ten(m, IR_F32, 0, DIMS(10, 20)));
    /* Every other row of 0..7: 0, 2, 4, 6 -> 4; starts beyond the end clamp to empty. */
    op = mkop(m, f, IR_OP_SLICE, NIDS(x), 1);
    ir_op_set_ints(m, op, "starts", DIMS(0, 30));
    ir_op_set_ints(m, op, "ends", DIMS(7, 40));
    ir_op_set_ints(m, op, "steps", DIMS(2, 1));
    EXPECT_RESULT(m, op, ten(m, IR_F32, 0, DIMS(4, 0)));
    /* A huge negative step: one element from start 9. */
    op = mkop(m, f, IR_OP_SLICE, NIDS(x), 1);
    ir_op_set_ints(m, op, "starts", DIMS(9));
    ir_op_set_ints(m, op, "ends", DIMS(-100));
    ir_op_set_ints(m, op, "axes", DIMS(0));
    ir_op_set_ints(m, op, "steps", DIMS(INT64_MIN));
    EXPECT_RESULT(m, op, ten(m, IR_F32, 0, DIMS(1, 20)));
    op = mkop(m, f, IR_OP_SLICE, NIDS(x), 1);
    ir_op_set_ints(m, op, "starts", DIMS(0));
    ir_op_set_ints(m, op, "ends", DIMS(3));
    ir_op_set_ints(m, op, "steps", DIMS(0));
    EXPECT_ERR(m, op, "steps[0] is 0");
    op = mkop(m, f, IR_OP_SLICE, NIDS(x), 1);
    ir_op_set_ints(m, op, "starts", DIMS(0, 0));
    ir_op_set_ints(m, op, "ends", DIMS(3, 3));
    ir_op_set_ints(m, op, "axes", DIMS(1, -1));
    EXPECT_ERR(m, op, "axes names axis 1 twice");
    ir_module_free(m);
}

static void
test_gather(void **state)
{
    ir_module *m = ir_module_new();
    ir_id f = ir_func_new(m, "main");
    ir_id table = arg(m, f, ten(m, IR_F32, 0, DIMS(1000, 64)));
    ir_id idx = arg(m, f, ten(m, IR_I64, 0, DIMS(8, 16)));
    ir_id data = arg(m, f, ten(m, IR_F32, 0, DIMS(4, 5, 6)));
    ir_id idx2 = arg(m, f, ten(m, IR_I32, 0, DIMS(2)));
    ir_id fidx = arg(m, f, ten(m, IR_F32, 0, DIMS(2)));
    ir_id op;
    ir_cost c;
    (void)state;
    op = mkop(m, f, IR_OP_GATHER, NIDS(table, idx), 1);
    EXPECT_RESULT(m, op, ten(m, IR_F32, 0, DIMS(8, 16, 64)));
    settle(m, op);
    ir_op_cost(m, op, &c);
    /* Reads the indices (128 * 8) and the gathered rows (8*16*64*4 = 32768), not the table. */
    EXPECT_D(c.bytes_read, 1024.0 + 32768.0);
    EXPECT_D(c.bytes_write, 32768.0);
    op = mkop(m, f, IR_OP_GATHER, NIDS(data, idx2), 1);
    ir_op_set_int(m, op, "axis", 1);
    EXPECT_RESULT(m, op, ten(m, IR_F32, 0, DIMS(4, 2, 6)));
    EXPECT_ERR(m, mkop(m, f, IR_OP_GATHER, NIDS(data, fidx), 1), "expected i32 or i64 indices");
    /* "Gather" stays the ONNX gather. */
    assert_int_equal(ir_opkind_from_name("Gather", 6), IR_OP_GATHER);
    ir_module_free(m);
}

static void
test_squeeze_reduce(void **state)
{
    ir_module *m = ir_module_new();
    ir_id f = ir_func_new(m, "main");
    ir_id x = arg(m, f, ten(m, IR_F32, 0, DIMS(3, 4)));
    ir_id y = arg(m, f, ten(m, IR_F32, 0, DIMS(1, 3, 1, 4)));
    ir_id z = arg(m, f, ten(m, IR_F32, 0, DIMS(2, 3, 4)));
    ir_id op;
    ir_cost c;
    (void)state;
    op = mkop(m, f, IR_OP_UNSQUEEZE, NIDS(x), 1);
    ir_op_set_ints(m, op, "axes", DIMS(0, -1));
    EXPECT_RESULT(m, op, ten(m, IR_F32, 0, DIMS(1, 3, 4, 1)));
    op = mkop(m, f, IR_OP_SQUEEZE, NIDS(y), 1);
    EXPECT_RESULT(m, op, ten(m, IR_F32, 0, DIMS(3, 4)));
    op = mkop(m, f, IR_OP_SQUEEZE, NIDS(y), 1);
    ir_op_set_ints(m, op, "axes", DIMS(2));
    EXPECT_RESULT(m, op, ten(m, IR_F32, 0, DIMS(1, 3, 4)));
    op = mkop(m, f, IR_OP_SQUEEZE, NIDS(y), 1);
    ir_op_set_ints(m, op, "axes", DIMS(1));
    EXPECT_ERR(m, op, "axis 1 of input 0 has size 3, not 1");
    op = mkop(m, f, IR_OP_REDUCEMEAN, NIDS(z), 1);
    ir_op_set_ints(m, op, "axes", DIMS(1));
    ir_op_set_int(m, op, "keepdims", 0);
    EXPECT_RESULT(m, op, ten(m, IR_F32, 0, DIMS(2, 4)));
    settle(m, op);
    ir_op_cost(m, op, &c);
    /* 24 additions plus 8 divisions. */
    EXPECT_D(c.flops, 32.0);
    op = mkop(m, f, IR_OP_REDUCESUM, NIDS(z), 1);
    EXPECT_RESULT(m, op, ten(m, IR_F32, 0, DIMS(1, 1, 1)));
    op = mkop(m, f, IR_OP_REDUCESUM, NIDS(z), 1);
    ir_op_set_ints(m, op, "axes", DIMS(3));
    EXPECT_ERR(m, op, "axes 3 is out of range for rank 3");
    ir_module_free(m);
}

static void
test_constant(void **state)
{
    ir_module *m = ir_module_new();
    ir_id f = ir_func_new(m, "main");
    ir_id t = ten(m, IR_F32, IR_DEVICE_NONE, DIMS(2, 2));
    float v[4] = {1, 2, 3, 4};
    ir_id op;
    ir_cost c;
    (void)state;
    op = mkop(m, f, IR_OP_CONSTANT, 0, NULL, 1);
    ir_op_set_tensor(m, op, "value", t, v, sizeof v);
    EXPECT_RESULT(m, op, t);
    settle(m, op);
    ir_op_cost(m, op, &c);
    EXPECT_D(c.bytes_read + c.bytes_write, 0.0);
    op = mkop(m, f, IR_OP_CONSTANT, 0, NULL, 1);
    ir_op_set_tensor(m, op, "value", t, v, sizeof v);
    ir_op_set_int(m, op, "device", 3);
    EXPECT_RESULT(m, op, ten(m, IR_F32, 3, DIMS(2, 2)));
    op = mkop(m, f, IR_OP_CONSTANT, 0, NULL, 1);
    ir_op_set_tensor(m, op, "value", t, v, 12);
    EXPECT_ERR(m, op, "value holds 12 bytes, but its type f32[2,2] on no device needs 16");
    op = mkop(m, f, IR_OP_CONSTANT, 0, NULL, 1);
    EXPECT_ERR(m, op, "missing tensor attribute value");
    ir_module_free(m);
}

/* ---- losses and gradients ---- */

static void
test_losses(void **state)
{
    ir_module *m = ir_module_new();
    ir_id f = ir_func_new(m, "main");
    ir_id y = arg(m, f, ten(m, IR_F32, 0, DIMS(8, 4)));
    ir_id z = arg(m, f, ten(m, IR_F32, 0, DIMS(8, 3)));
    ir_id logits = arg(m, f, ten(m, IR_F32, 0, DIMS(8, 10)));
    ir_id labels = arg(m, f, ten(m, IR_I64, 0, DIMS(8)));
    ir_id badlabels = arg(m, f, ten(m, IR_I64, 0, DIMS(10)));
    ir_id out[2];
    ir_id op;
    ir_cost c;
    (void)state;
    op = mkop(m, f, IR_OP_MSELOSS, NIDS(y, y), 1);
    EXPECT_RESULT(m, op, ten(m, IR_F32, 0, SCALAR));
    settle(m, op);
    ir_op_cost(m, op, &c);
    /* 3 FLOPs per element of y: 96. Reads 2*128 bytes, writes 4. */
    EXPECT_D(c.flops, 96.0);
    EXPECT_D(c.bytes_read, 256.0);
    EXPECT_D(c.bytes_write, 4.0);
    EXPECT_ERR(m, mkop(m, f, IR_OP_MSELOSS, NIDS(y, z), 1),
               "input 1 has shape [8,3], expected [8,4]");
    op = mkop(m, f, IR_OP_SCELOSS, NIDS(logits, labels), 2);
    INFER_OK(m, op, out);
    EXPECT_TYPE(m, out[0], ten(m, IR_F32, 0, SCALAR));
    EXPECT_TYPE(m, out[1], ten(m, IR_F32, 0, DIMS(8, 10)));
    op = mkop(m, f, IR_OP_SCELOSS, NIDS(logits, labels), 1);
    ir_op_set_string(m, op, "reduction", "none");
    EXPECT_RESULT(m, op, ten(m, IR_F32, 0, DIMS(8)));
    EXPECT_ERR(m, mkop(m, f, IR_OP_SCELOSS, NIDS(logits, badlabels), 1),
               "input 1 (labels) has shape [10], expected [8]");
    EXPECT_ERR(m, mkop(m, f, IR_OP_SCELOSS, NIDS(logits, logits), 1),
               "expected i32 or i64 indices");
    ir_module_free(m);
}

static void
test_gradients(void **state)
{
    ir_module *m = ir_module_new();
    ir_id f = ir_func_new(m, "main");
    ir_id at = ten(m, IR_F32, 0, DIMS(4, 3)), bt = ten(m, IR_F32, 0, DIMS(3, 5));
    ir_id a = arg(m, f, at), b = arg(m, f, bt);
    ir_id dy = arg(m, f, ten(m, IR_F32, 0, DIMS(4, 5)));
    ir_id x = arg(m, f, ten(m, IR_F32, 0, DIMS(4, 5)));
    ir_id dyb = arg(m, f, ten(m, IR_F32, 0, DIMS(5, 4)));
    ir_id mask = arg(m, f, ten(m, IR_BOOL, 0, DIMS(4, 5)));
    ir_id scalar = arg(m, f, ten(m, IR_F32, 0, SCALAR));
    ir_id out[3];
    ir_id op;
    ir_cost c;
    (void)state;
    op = mkop(m, f, IR_OP_MATMULGRAD, NIDS(a, b, dy), 2);
    INFER_OK(m, op, out);
    EXPECT_TYPE(m, out[0], at);
    EXPECT_TYPE(m, out[1], bt);
    settle(m, op);
    ir_op_cost(m, op, &c);
    /* 4 * M*N*K = 4 * 4*5*3 = 240 (two matmuls). */
    EXPECT_D(c.flops, 240.0);
    EXPECT_ERR(m, mkop(m, f, IR_OP_MATMULGRAD, NIDS(a, b, dyb), 2),
               "input 2 (dy) has shape [5,4], expected [4,5]");
    EXPECT_RESULT(m, mkop(m, f, IR_OP_RELUGRAD, NIDS(x, dy), 1), ten(m, IR_F32, 0, DIMS(4, 5)));
    EXPECT_ERR(m, mkop(m, f, IR_OP_GELUGRAD, NIDS(x, dyb), 1),
               "input 1 has shape [5,4], expected [4,5]");
    EXPECT_RESULT(m, mkop(m, f, IR_OP_SOFTMAXGRAD, NIDS(x, dy), 1),
                  ten(m, IR_F32, 0, DIMS(4, 5)));
    EXPECT_RESULT(m, mkop(m, f, IR_OP_DROPOUTGRAD, NIDS(dy, mask), 1),
                  ten(m, IR_F32, 0, DIMS(4, 5)));
    EXPECT_RESULT(m, mkop(m, f, IR_OP_MSELOSSGRAD, NIDS(x, dy, scalar), 1),
                  ten(m, IR_F32, 0, DIMS(4, 5)));
    EXPECT_ERR(m, mkop(m, f, IR_OP_MSELOSSGRAD, NIDS(x, dy, dy), 1),
               "input 2 has shape [4,5], expected a scalar");
    op = mkop(m, f, IR_OP_TANHGRAD, NIDS(x, dy), 1);
    settle(m, op);
    ir_op_cost(m, op, &c);
    EXPECT_D(c.flops, 60.0); /* 3 per element of [4,5] */
    ir_module_free(m);
}

static void
test_norm_loss_gradients(void **state)
{
    ir_module *m = ir_module_new();
    ir_id f = ir_func_new(m, "main");
    ir_id xt = ten(m, IR_F32, 0, DIMS(8, 32)), st = ten(m, IR_F32, 0, DIMS(32));
    ir_id x = arg(m, f, xt), dy = arg(m, f, xt), scale = arg(m, f, st);
    ir_id mean = arg(m, f, ten(m, IR_F32, 0, DIMS(8, 1)));
    ir_id badmean = arg(m, f, ten(m, IR_F32, 0, DIMS(8)));
    ir_id dl = arg(m, f, ten(m, IR_F32, 0, SCALAR));
    ir_id logits = arg(m, f, ten(m, IR_F32, 0, DIMS(8, 10)));
    ir_id labels = arg(m, f, ten(m, IR_I32, 0, DIMS(8)));
    ir_id idx = arg(m, f, ten(m, IR_I64, 0, DIMS(8, 16)));
    ir_id demb = arg(m, f, ten(m, IR_F16, 0, DIMS(8, 16, 64)));
    ir_id big = arg(m, f, ten(m, IR_F32, 0, DIMS(8, 16, 32)));
    ir_id out[3];
    ir_id op;
    ir_cost c;
    (void)state;
    op = mkop(m, f, IR_OP_LAYERNORMGRAD, NIDS(dy, x, scale, mean, mean), 3);
    INFER_OK(m, op, out);
    EXPECT_TYPE(m, out[0], xt);
    EXPECT_TYPE(m, out[1], st);
    EXPECT_TYPE(m, out[2], st);
    settle(m, op);
    ir_op_cost(m, op, &c);
    EXPECT_D(c.flops, 16.0 * 256.0);
    EXPECT_ERR(m, mkop(m, f, IR_OP_LAYERNORMGRAD, NIDS(dy, x, scale, badmean, mean), 1),
               "input 3 (mean) has shape [8], expected [8,1]");
    EXPECT_ERR(m, mkop(m, f, IR_OP_LAYERNORMGRAD, NIDS(dy, x, scale, mean), 1),
               "takes mean and inv_std_dev together (3 or 5 inputs), got 4");
    /* RMSNormalizationGrad(dy, x, scale, [inv_std_dev]) -> (dx, [dscale]): 8 FLOPs each. */
    op = mkop(m, f, IR_OP_RMSNORMGRAD, NIDS(dy, x, scale, mean), 2);
    INFER_OK(m, op, out);
    EXPECT_TYPE(m, out[0], xt);
    EXPECT_TYPE(m, out[1], st);
    settle(m, op);
    ir_op_cost(m, op, &c);
    EXPECT_D(c.flops, 8.0 * 256.0);
    EXPECT_ERR(m, mkop(m, f, IR_OP_RMSNORMGRAD, NIDS(dy, x, scale, badmean), 1),
               "input 3 (inv_std_dev) has shape [8], expected [8,1]");
    EXPECT_RESULT(m, mkop(m, f, IR_OP_SCELOSSGRAD, NIDS(dl, logits, labels), 1),
                  ten(m, IR_F32, 0, DIMS(8, 10)));
    EXPECT_ERR(m, mkop(m, f, IR_OP_SCELOSSGRAD, NIDS(x, logits, labels), 1),
               "input 0 has shape [8,32], expected a scalar");
    /* Embedding gradient: GatherGrad(indices [8,16], dy [8,16,64]){shape [1000,64]}. */
    op = mkop(m, f, IR_OP_GATHERGRAD, NIDS(idx, demb), 1);
    ir_op_set_ints(m, op, "shape", DIMS(1000, 64));
    EXPECT_RESULT(m, op, ten(m, IR_F16, 0, DIMS(1000, 64)));
    op = mkop(m, f, IR_OP_GATHERGRAD, NIDS(idx, demb), 1);
    ir_op_set_ints(m, op, "shape", DIMS(1000, 32));
    EXPECT_ERR(m, op, "input 1 (dy) has shape [8,16,64], expected [8,16,32]");
    /* ReduceSumTo: [8,16,32] down to [32] and to [16,1]. */
    op = mkop(m, f, IR_OP_REDUCESUMTO, NIDS(big), 1);
    ir_op_set_ints(m, op, "shape", DIMS(32));
    EXPECT_RESULT(m, op, ten(m, IR_F32, 0, DIMS(32)));
    op = mkop(m, f, IR_OP_REDUCESUMTO, NIDS(big), 1);
    ir_op_set_ints(m, op, "shape", DIMS(16, 1));
    EXPECT_RESULT(m, op, ten(m, IR_F32, 0, DIMS(16, 1)));
    settle(m, op);
    ir_op_cost(m, op, &c);
    EXPECT_D(c.flops, 4096.0); /* one addition per input element */
    op = mkop(m, f, IR_OP_REDUCESUMTO, NIDS(big), 1);
    ir_op_set_ints(m, op, "shape", DIMS(8));
    EXPECT_ERR(m, op, "input 0 has shape [8,16,32], which does not broadcast from shape [8]");
    ir_module_free(m);
}

static void
test_optimizers(void **state)
{
    ir_module *m = ir_module_new();
    ir_id f = ir_func_new(m, "main");
    ir_id wt = ten(m, IR_F32, 1, DIMS(16, 16));
    ir_id w = arg(m, f, wt), dw = arg(m, f, wt), mm = arg(m, f, wt), vv = arg(m, f, wt);
    ir_id bad = arg(m, f, ten(m, IR_F32, 1, DIMS(16)));
    ir_id out[3];
    ir_id op;
    ir_cost c;
    (void)state;
    op = mkop(m, f, IR_OP_SGD, NIDS(w, dw), 1);
    EXPECT_RESULT(m, op, wt);
    settle(m, op);
    ir_op_cost(m, op, &c);
    EXPECT_D(c.flops, 512.0); /* 2 per weight */
    EXPECT_ERR(m, mkop(m, f, IR_OP_SGD, NIDS(w, bad), 1), "input 1 has shape [16]");
    op = mkop(m, f, IR_OP_ADAM, NIDS(w, dw, mm, vv), 3);
    INFER_OK(m, op, out);
    for (int i = 0; i < 3; i++)
        EXPECT_TYPE(m, out[i], wt);
    settle(m, op);
    ir_op_cost(m, op, &c);
    /* 12 per weight: 3072; reads 4 * 1024 bytes, writes 3 * 1024. */
    EXPECT_D(c.flops, 3072.0);
    EXPECT_D(c.bytes_read, 4096.0);
    EXPECT_D(c.bytes_write, 3072.0);
    EXPECT_ERR(m, mkop(m, f, IR_OP_ADAM, NIDS(w, dw, mm, bad), 3), "input 3 has shape [16]");
    ir_module_free(m);
}

/* ---- placement ---- */

static void
test_placement_rules(void **state)
{
    ir_module *m = ir_module_new();
    ir_id f = ir_func_new(m, "main");
    ir_id vt = tvar(m, IR_F32, "d", DIMS(4, 4));
    ir_id v = arg(m, f, vt);
    ir_id k = arg(m, f, ten(m, IR_F32, IR_DEVICE_NONE, SCALAR));
    ir_id u = arg(m, f, ten(m, IR_F32, IR_DEVICE_NONE, DIMS(4, 4)));
    ir_id d0 = arg(m, f, ten(m, IR_F32, 0, DIMS(4, 4)));
    ir_id mesh = ir_mesh_add(m, "m", 1, (int64_t[]){2}, NULL);
    ir_id dt = arg(m, f, ir_type_dtensor(m, IR_F32, DIMS(4, 4), mesh, (int64_t[]){0}));
    (void)state;
    /* On the device variable of a pmap body, with an unplaced scalar. */
    EXPECT_RESULT(m, mkop(m, f, IR_OP_MUL, NIDS(v, k), 1), vt);
    EXPECT_RESULT(m, mkop(m, f, IR_OP_ADD, NIDS(u, u), 1), ten(m, IR_F32, IR_DEVICE_NONE,
                                                                  DIMS(4, 4)));
    EXPECT_ERR(m, mkop(m, f, IR_OP_ADD, NIDS(u, d0), 1),
               "inputs in different places: input 0 on no device, input 1 on device 0");
    EXPECT_ERR(m, mkop(m, f, IR_OP_ADD, NIDS(v, d0), 1),
               "input 0 on device variable d, input 1 on device 0");
    EXPECT_ERR(m, mkop(m, f, IR_OP_ADD, NIDS(dt, d0), 1),
               "input 0 on mesh @m, input 1 on device 0");
    ir_module_free(m);
}

static void
test_compute_on_dtensors(void **state)
{
    ir_module *m = ir_module_new();
    ir_id f = ir_func_new(m, "main");
    ir_id mesh = ir_mesh_add(m, "m", 2, (int64_t[]){2, 4}, NULL);
    ir_id a = arg(m, f, ir_type_dtensor(m, IR_F32, DIMS(8, 16), mesh,
                                        (int64_t[]){0, IR_PLACE_R}));
    ir_id b = arg(m, f, ir_type_dtensor(m, IR_F32, DIMS(16, 32), mesh,
                                        (int64_t[]){IR_PLACE_R, 1}));
    ir_id op;
    ir_cost c;
    (void)state;
    /* Global shape, every axis replicated (sharding propagation refines it later). */
    op = mkop(m, f, IR_OP_MATMUL, NIDS(a, b), 1);
    EXPECT_RESULT(m, op, ir_type_dtensor(m, IR_F32, DIMS(8, 32), mesh,
                                         (int64_t[]){IR_PLACE_R, IR_PLACE_R}));
    settle(m, op);
    ir_op_cost(m, op, &c);
    EXPECT_D(c.flops, 2.0 * 8 * 16 * 32); /* the global computation */
    EXPECT_RESULT(m, mkop(m, f, IR_OP_RELU, NIDS(a), 1),
                  ir_type_dtensor(m, IR_F32, DIMS(8, 16), mesh,
                                  (int64_t[]){IR_PLACE_R, IR_PLACE_R}));
    ir_module_free(m);
}

/* ---- communication, tuple form ---- */

static void
test_send(void **state)
{
    ir_module *m = ir_module_new();
    ir_id f = ir_func_new(m, "main");
    ir_id x = arg(m, f, ten(m, IR_F32, 0, DIMS(4, 8)));
    ir_id v = arg(m, f, tvar(m, IR_F32, "d", DIMS(4, 8)));
    ir_id op;
    ir_cost c;
    (void)state;
    op = mkop(m, f, IR_OP_SEND, NIDS(x), 1);
    ir_op_set_int(m, op, "device", 1);
    EXPECT_RESULT(m, op, ten(m, IR_F32, 1, DIMS(4, 8)));
    settle(m, op);
    ir_op_cost(m, op, &c);
    EXPECT_D(c.bytes_comm, 128.0); /* 32 floats */
    EXPECT_D(c.flops, 0.0);
    op = mkop(m, f, IR_OP_SEND, NIDS(x), 1);
    ir_op_set_int(m, op, "device", 0);
    EXPECT_ERR(m, op, "input 0 already lives on device 0");
    op = mkop(m, f, IR_OP_SEND, NIDS(v), 1);
    ir_op_set_int(m, op, "device", 1);
    EXPECT_ERR(m, op, "input 0 lives on device variable d, expected a concrete device");
    assert_int_equal(ir_opkind_from_name("Send", 4), IR_OP_SEND);
    ir_module_free(m);
}

static void
test_broadcast_scatter_gather(void **state)
{
    ir_module *m = ir_module_new();
    ir_id f = ir_func_new(m, "main");
    ir_id x = arg(m, f, ten(m, IR_F32, 0, DIMS(8, 6)));
    ir_id y = arg(m, f, ten(m, IR_F32, 0, DIMS(6, 6)));
    ir_id parts = arg(m, f, ir_type_tuple(m, 2, IDS(ten(m, IR_F32, 1, DIMS(2, 6)),
                                                    ten(m, IR_F32, 2, DIMS(3, 6)))));
    ir_id ragged = arg(m, f, ir_type_tuple(m, 2, IDS(ten(m, IR_F32, 1, DIMS(2, 6)),
                                                     ten(m, IR_F32, 2, DIMS(3, 5)))));
    ir_id op;
    ir_cost c;
    (void)state;
    op = mkop(m, f, IR_OP_BROADCAST, NIDS(x), 1);
    ir_op_set_ints(m, op, "devices", DIMS(1, 2, 3));
    EXPECT_RESULT(m, op, ir_type_tuple(m, 3, IDS(ten(m, IR_F32, 1, DIMS(8, 6)),
                                                 ten(m, IR_F32, 2, DIMS(8, 6)),
                                                 ten(m, IR_F32, 3, DIMS(8, 6)))));
    settle(m, op);
    ir_op_cost(m, op, &c);
    EXPECT_D(c.bytes_comm, 192.0); /* bytes of x: 48 floats */
    op = mkop(m, f, IR_OP_SCATTER, NIDS(x), 1);
    ir_op_set_int(m, op, "dim", 0);
    ir_op_set_ints(m, op, "devices", DIMS(0, 1, 2, 3));
    EXPECT_RESULT(m, op, ir_type_tuple(m, 4, IDS(ten(m, IR_F32, 0, DIMS(2, 6)),
                                                 ten(m, IR_F32, 1, DIMS(2, 6)),
                                                 ten(m, IR_F32, 2, DIMS(2, 6)),
                                                 ten(m, IR_F32, 3, DIMS(2, 6)))));
    settle(m, op);
    ir_op_cost(m, op, &c);
    EXPECT_D(c.bytes_comm, 192.0); /* bytes of x */
    op = mkop(m, f, IR_OP_SCATTER, NIDS(y), 1);
    ir_op_set_int(m, op, "dim", 0);
    ir_op_set_ints(m, op, "devices", DIMS(0, 1, 2, 3));
    EXPECT_ERR(m, op, "dimension 0 (size 6) does not divide into 4 parts");
    op = mkop(m, f, IR_OP_SCATTER, NIDS(x), 1);
    ir_op_set_int(m, op, "dim", 0);
    ir_op_set_ints(m, op, "devices", DIMS(1, 1));
    EXPECT_ERR(m, op, "devices names device 1 twice");
    /* Gather [2,6] on 1 and [3,6] on 2 along dim 0 onto device 0. */
    op = mkop(m, f, IR_OP_GATHERTO, NIDS(parts), 1);
    ir_op_set_int(m, op, "dim", 0);
    ir_op_set_int(m, op, "device", 0);
    EXPECT_RESULT(m, op, ten(m, IR_F32, 0, DIMS(5, 6)));
    settle(m, op);
    ir_op_cost(m, op, &c);
    EXPECT_D(c.bytes_comm, 120.0); /* bytes of the result: 30 floats */
    op = mkop(m, f, IR_OP_GATHERTO, NIDS(ragged), 1);
    ir_op_set_int(m, op, "dim", 0);
    ir_op_set_int(m, op, "device", 0);
    EXPECT_ERR(m, op, "input 0 element 1 has shape [3,5], element 0 has [2,6]");
    op = mkop(m, f, IR_OP_GATHERTO, NIDS(parts), 1);
    ir_op_set_int(m, op, "dim", 0);
    EXPECT_ERR(m, op, "needs an int attribute device");
    assert_int_equal(ir_opkind_from_name("MPIGatherFromTupleType", 22), IR_OP_GATHERTO);
    assert_int_equal(ir_opkind_from_name("Scatter", 7), IR_OP_SCATTER);
    assert_int_equal(ir_opkind_from_name("MPIBroadcastToTupleType", 23), IR_OP_BROADCAST);
    ir_module_free(m);
}

static void
test_tuple_collectives(void **state)
{
    ir_module *m = ir_module_new();
    ir_id f = ir_func_new(m, "main");
    ir_id e0 = ten(m, IR_F32, 0, DIMS(4, 6)), e1 = ten(m, IR_F32, 1, DIMS(4, 6));
    ir_id tt = ir_type_tuple(m, 2, IDS(e0, e1));
    ir_id t = arg(m, f, tt);
    ir_id dup = arg(m, f, ir_type_tuple(m, 2, IDS(e0, e0)));
    ir_id uneven = arg(m, f, ir_type_tuple(m, 2, IDS(e0, ten(m, IR_F32, 1, DIMS(4, 5)))));
    ir_id x = arg(m, f, e0);
    ir_id op;
    ir_cost c;
    (void)state;
    op = mkop(m, f, IR_OP_ALLREDUCE, NIDS(t), 1);
    EXPECT_RESULT(m, op, tt);
    settle(m, op);
    ir_op_cost(m, op, &c);
    EXPECT_D(c.bytes_comm, 96.0); /* one element: 24 floats */
    EXPECT_D(c.bytes_read, 96.0);
    op = mkop(m, f, IR_OP_ALLREDUCE, NIDS(t), 1);
    ir_op_set_string(m, op, "reduction", "prod");
    EXPECT_ERR(m, op, "reduction \"prod\" is not sum, max or mean");
    EXPECT_ERR(m, mkop(m, f, IR_OP_ALLREDUCE, NIDS(dup), 1), "input 0 names device 0 twice");
    EXPECT_ERR(m, mkop(m, f, IR_OP_ALLREDUCE, NIDS(uneven), 1),
               "input 0 element 1 has shape [4,5], element 0 has [4,6]");
    EXPECT_ERR(m, mkop(m, f, IR_OP_ALLREDUCE, NIDS(x), 1), "the tuple form takes a tuple");
    op = mkop(m, f, IR_OP_ALLGATHER, NIDS(t), 1);
    ir_op_set_int(m, op, "dim", 1);
    EXPECT_RESULT(m, op, ir_type_tuple(m, 2, IDS(ten(m, IR_F32, 0, DIMS(4, 12)),
                                                 ten(m, IR_F32, 1, DIMS(4, 12)))));
    settle(m, op);
    ir_op_cost(m, op, &c);
    EXPECT_D(c.bytes_comm, 192.0); /* one result element: 48 floats */
    op = mkop(m, f, IR_OP_REDUCESCATTER, NIDS(t), 1);
    ir_op_set_int(m, op, "dim", 0);
    EXPECT_RESULT(m, op, ir_type_tuple(m, 2, IDS(ten(m, IR_F32, 0, DIMS(2, 6)),
                                                 ten(m, IR_F32, 1, DIMS(2, 6)))));
    settle(m, op);
    ir_op_cost(m, op, &c);
    EXPECT_D(c.bytes_comm, 96.0); /* one input element */
    op = mkop(m, f, IR_OP_ALLTOALL, NIDS(t), 1);
    ir_op_set_int(m, op, "split_dim", 0);
    ir_op_set_int(m, op, "concat_dim", 1);
    EXPECT_RESULT(m, op, ir_type_tuple(m, 2, IDS(ten(m, IR_F32, 0, DIMS(2, 12)),
                                                 ten(m, IR_F32, 1, DIMS(2, 12)))));
    op = mkop(m, f, IR_OP_ALLGATHER, NIDS(t), 1);
    ir_op_set_int(m, op, "dim", 2);
    EXPECT_ERR(m, op, "dim 2 is out of range for rank 2");
    op = mkop(m, f, IR_OP_BROADCAST, NIDS(x), 1);
    ir_op_set_ints(m, op, "devices", DIMS(1));
    ir_op_set_ints(m, op, "root", DIMS(0));
    EXPECT_ERR(m, op, "root is for the mesh form");
    assert_int_equal(ir_opkind_from_name("MPIAllreduceFromTupleType", 25), IR_OP_ALLREDUCE);
    assert_int_equal(ir_opkind_from_name("Allgather", 9), IR_OP_ALLGATHER);
    assert_int_equal(ir_opkind_from_name("MPIReduceScatter", 16), IR_OP_REDUCESCATTER);
    assert_int_equal(ir_opkind_from_name("AllToAll", 8), IR_OP_ALLTOALL);
    ir_module_free(m);
}

static void
test_tuple_ops(void **state)
{
    ir_module *m = ir_module_new();
    ir_id f = ir_func_new(m, "main");
    ir_id at = ten(m, IR_F32, 0, DIMS(2)), bt = ten(m, IR_I64, 1, DIMS(3));
    ir_id a = arg(m, f, at), b = arg(m, f, bt);
    ir_id op, t;
    (void)state;
    op = mkop(m, f, IR_OP_TUPLE, NIDS(a, b), 1);
    EXPECT_RESULT(m, op, ir_type_tuple(m, 2, IDS(at, bt)));
    settle(m, op);
    t = ir_op_output(m, op, 0);
    op = mkop(m, f, IR_OP_TUPLEGET, NIDS(t), 1);
    ir_op_set_int(m, op, "index", 1);
    EXPECT_RESULT(m, op, bt);
    op = mkop(m, f, IR_OP_TUPLEGET, NIDS(t), 1);
    ir_op_set_int(m, op, "index", 2);
    EXPECT_ERR(m, op, "index 2 is out of range for a tuple of 2");
    op = mkop(m, f, IR_OP_TUPLEGET, NIDS(a), 1);
    ir_op_set_int(m, op, "index", 0);
    EXPECT_ERR(m, op, "expected a tuple");
    ir_module_free(m);
}

/* ---- pmap ---- */

/* A pmap over devices [1, 2] of Relu on f32[4,8]; body argument type argt. */
static ir_id
relu_pmap(ir_module *m, ir_id f, ir_id in, ir_id argt, ir_id rest)
{
    ir_id body = ir_body_new(m);
    ir_id pm = mkop(m, f, IR_OP_PMAP, NIDS(in), 1);
    ir_id xi, yi;
    m->ops[pm].body = body;
    m->regions[body].parent = pm;
    ir_op_set_string(m, pm, "device_var", "d");
    ir_op_set_ints(m, pm, "devices", DIMS(1, 2));
    xi = ir_region_add_arg(m, body, argt, "xi");
    yi = ir_op_add(m, body, IR_OP_RELU, 1, &xi, 1, &rest, NULL);
    ir_region_add_result(m, body, ir_op_output(m, yi, 0));
    return pm;
}

static void
test_pmap_devices(void **state)
{
    ir_module *m = ir_module_new();
    ir_id f = ir_func_new(m, "main");
    ir_id e1 = ten(m, IR_F32, 1, DIMS(4, 8)), e2 = ten(m, IR_F32, 2, DIMS(4, 8));
    ir_id xs = arg(m, f, ir_type_tuple(m, 2, IDS(e1, e2)));
    ir_id wrong = arg(m, f, ir_type_tuple(m, 2, IDS(e2, e1)));
    ir_id local = tvar(m, IR_F32, "d", DIMS(4, 8));
    ir_id badlocal = tvar(m, IR_F32, "d", DIMS(8, 4));
    ir_id pm;
    ir_id body, zi;
    (void)state;
    pm = relu_pmap(m, f, xs, local, local);
    /* Body Relu first (what the verifier does), then the pmap. */
    settle(m, m->regions[m->ops[pm].body].ops[0]);
    EXPECT_RESULT(m, pm, ir_type_tuple(m, 2, IDS(e1, e2)));
    pm = relu_pmap(m, f, wrong, local, local);
    EXPECT_ERR(m, pm, "input 0 element 0 lives on device 2, expected device 1 (devices[0])");
    pm = relu_pmap(m, f, xs, badlocal, badlocal);
    EXPECT_ERR(m, pm, "body argument 0 has type f32[8,4] on device variable d, expected "
                      "f32[4,8] on device variable d");
    /* A body that returns a value on a concrete device. */
    pm = relu_pmap(m, f, xs, local, local);
    body = m->ops[pm].body;
    zi = arg(m, f, e1);
    m->regions[body].results[0] = zi;
    EXPECT_ERR(m, pm, "body result 0 lives on device 1, expected device variable d");
    /* A pmap needs devices or a mesh, not both and not neither. */
    pm = relu_pmap(m, f, xs, local, local);
    ir_op_set_mesh(m, pm, "mesh", ir_mesh_add(m, "m", 1, (int64_t[]){2}, NULL));
    EXPECT_ERR(m, pm, "needs exactly one of the attributes devices and mesh");
    assert_int_equal(ir_opkind_from_name("Pmap", 4), IR_OP_PMAP);
    ir_module_free(m);
}

static void
test_pmap_mesh(void **state)
{
    ir_module *m = ir_module_new();
    ir_id f = ir_func_new(m, "main");
    ir_id mesh = ir_mesh_add(m, "m", 2, (int64_t[]){2, 2}, NULL);
    /* Global [8,8] split on dim 0 over axis 0, replicated on axis 1: local [4,8]. */
    ir_id gt = ir_type_dtensor(m, IR_F32, DIMS(8, 8), mesh, (int64_t[]){0, IR_PLACE_R});
    ir_id other = ir_type_dtensor(m, IR_F32, DIMS(8, 8), mesh, (int64_t[]){1, IR_PLACE_R});
    ir_id x = arg(m, f, gt);
    ir_id local = tvar(m, IR_F32, "d", DIMS(4, 8));
    ir_id body = ir_body_new(m);
    ir_id pm = ir_op_add(m, f, IR_OP_PMAP, 1, &x, 1, &gt, NULL);
    ir_id xi, yi;
    ir_id out[1];
    (void)state;
    m->ops[pm].body = body;
    m->regions[body].parent = pm;
    ir_op_set_string(m, pm, "device_var", "d");
    ir_op_set_mesh(m, pm, "mesh", mesh);
    xi = ir_region_add_arg(m, body, local, "xi");
    yi = ir_op_add(m, body, IR_OP_RELU, 1, &xi, 1, &local, NULL);
    ir_region_add_result(m, body, ir_op_output(m, yi, 0));
    INFER_OK(m, pm, out);
    EXPECT_TYPE(m, out[0], gt);
    /* Declared S[1]: its local shard is [8,4], but the body returns [4,8]. */
    m->values[ir_op_output(m, pm, 0)].type = other;
    EXPECT_ERR(m, pm, "result 0 is declared f32[8,8] on mesh @m, whose local shard is f32[8,4]");
    m->values[ir_op_output(m, pm, 0)].type = 0;
    EXPECT_ERR(m, pm, "result 0 needs a declared type");
    /* A body argument that is not the local shard. */
    m->values[ir_op_output(m, pm, 0)].type = gt;
    m->values[xi].type = tvar(m, IR_F32, "d", DIMS(8, 8));
    EXPECT_ERR(m, pm, "body argument 0 has type f32[8,8] on device variable d, expected f32[4,8]");
    ir_module_free(m);
}

/* ---- communication, mesh form ---- */

static void
test_mesh_collectives_dtensor(void **state)
{
    ir_module *m = ir_module_new();
    ir_id f = ir_func_new(m, "main");
    ir_id mesh = ir_mesh_add(m, "m", 2, (int64_t[]){2, 4}, NULL);
    ir_id mesh2 = ir_mesh_add(m, "n", 1, (int64_t[]){8}, NULL);
    ir_id psum = arg(m, f, ir_type_dtensor(m, IR_F32, DIMS(8, 16), mesh,
                                           (int64_t[]){0, IR_PLACE_PSUM}));
    ir_id split1 = arg(m, f, ir_type_dtensor(m, IR_F32, DIMS(8, 16), mesh,
                                             (int64_t[]){1, IR_PLACE_R}));
    ir_id repl6 = arg(m, f, ir_type_dtensor(m, IR_F32, DIMS(6, 16), mesh,
                                            (int64_t[]){IR_PLACE_R, IR_PLACE_R}));
    ir_id op;
    ir_cost c;
    (void)state;
    /* all_reduce over axis 1: P(sum) -> R; axis 0 keeps S[0]. */
    op = mkop(m, f, IR_OP_ALLREDUCE, NIDS(psum), 1);
    ir_op_set_mesh(m, op, "mesh", mesh);
    ir_op_set_ints(m, op, "mesh_axes", DIMS(1));
    EXPECT_RESULT(m, op, ir_type_dtensor(m, IR_F32, DIMS(8, 16), mesh,
                                         (int64_t[]){0, IR_PLACE_R}));
    settle(m, op);
    ir_op_cost(m, op, &c);
    /* The local shard: [8,16] f32 split in 2 along dim 0 = 256 bytes per device. */
    EXPECT_D(c.bytes_comm, 256.0);
    op = mkop(m, f, IR_OP_ALLREDUCE, NIDS(psum), 1);
    ir_op_set_mesh(m, op, "mesh", mesh);
    ir_op_set_ints(m, op, "mesh_axes", DIMS(0));
    EXPECT_ERR(m, op, "input 0 has placement S[0] on mesh axis 0, expected P(sum) or P(max)");
    op = mkop(m, f, IR_OP_ALLREDUCE, NIDS(psum), 1);
    ir_op_set_mesh(m, op, "mesh", mesh);
    ir_op_set_ints(m, op, "mesh_axes", DIMS(1));
    ir_op_set_string(m, op, "reduction", "max");
    EXPECT_ERR(m, op, "expected P(max)");
    /* reduce_scatter over axis 1: P(sum) -> S[1]. */
    op = mkop(m, f, IR_OP_REDUCESCATTER, NIDS(psum), 1);
    ir_op_set_mesh(m, op, "mesh", mesh);
    ir_op_set_ints(m, op, "mesh_axes", DIMS(1));
    ir_op_set_int(m, op, "dim", 1);
    EXPECT_RESULT(m, op, ir_type_dtensor(m, IR_F32, DIMS(8, 16), mesh, (int64_t[]){0, 1}));
    /* all_gather over axis 0: S[1] -> R. */
    op = mkop(m, f, IR_OP_ALLGATHER, NIDS(split1), 1);
    ir_op_set_mesh(m, op, "mesh", mesh);
    ir_op_set_ints(m, op, "mesh_axes", DIMS(0));
    ir_op_set_int(m, op, "dim", 1);
    EXPECT_RESULT(m, op, ir_type_dtensor(m, IR_F32, DIMS(8, 16), mesh,
                                         (int64_t[]){IR_PLACE_R, IR_PLACE_R}));
    settle(m, op);
    ir_op_cost(m, op, &c);
    EXPECT_D(c.bytes_comm, 512.0); /* the gathered, replicated [8,16] */
    op = mkop(m, f, IR_OP_ALLGATHER, NIDS(split1), 1);
    ir_op_set_mesh(m, op, "mesh", mesh);
    ir_op_set_ints(m, op, "mesh_axes", DIMS(0));
    ir_op_set_int(m, op, "dim", 0);
    EXPECT_ERR(m, op, "input 0 has placement S[1] on mesh axis 0, expected S[0]");
    /*
     * all_to_all over axis 0 with split_dim 0, concat_dim 1: locally dim 0
     * shrinks and dim 1 grows, so globally S[1] (concat) becomes S[0] (split).
     */
    op = mkop(m, f, IR_OP_ALLTOALL, NIDS(split1), 1);
    ir_op_set_mesh(m, op, "mesh", mesh);
    ir_op_set_ints(m, op, "mesh_axes", DIMS(0));
    ir_op_set_int(m, op, "split_dim", 0);
    ir_op_set_int(m, op, "concat_dim", 1);
    EXPECT_RESULT(m, op, ir_type_dtensor(m, IR_F32, DIMS(8, 16), mesh,
                                         (int64_t[]){0, IR_PLACE_R}));
    /* scatter R -> S[dim], gather S[dim] -> R, broadcast keeps R (named axes only). */
    op = mkop(m, f, IR_OP_SCATTER, NIDS(split1), 1);
    ir_op_set_mesh(m, op, "mesh", mesh);
    ir_op_set_ints(m, op, "mesh_axes", DIMS(1));
    ir_op_set_int(m, op, "dim", 0);
    EXPECT_RESULT(m, op, ir_type_dtensor(m, IR_F32, DIMS(8, 16), mesh, (int64_t[]){1, 0}));
    op = mkop(m, f, IR_OP_GATHERTO, NIDS(split1), 1);
    ir_op_set_mesh(m, op, "mesh", mesh);
    ir_op_set_ints(m, op, "mesh_axes", DIMS(0));
    ir_op_set_int(m, op, "dim", 1);
    EXPECT_RESULT(m, op, ir_type_dtensor(m, IR_F32, DIMS(8, 16), mesh,
                                         (int64_t[]){IR_PLACE_R, IR_PLACE_R}));
    op = mkop(m, f, IR_OP_BROADCAST, NIDS(split1), 1);
    ir_op_set_mesh(m, op, "mesh", mesh);
    ir_op_set_ints(m, op, "mesh_axes", DIMS(0));
    EXPECT_ERR(m, op, "input 0 has placement S[1] on mesh axis 0, expected R");
    /* A new split must divide: dim 0 of size 6 over axis 1's 4 devices does not. */
    op = mkop(m, f, IR_OP_SCATTER, NIDS(repl6), 1);
    ir_op_set_mesh(m, op, "mesh", mesh);
    ir_op_set_ints(m, op, "mesh_axes", DIMS(1));
    ir_op_set_int(m, op, "dim", 0);
    EXPECT_ERR(m, op, "dimension 0 does not divide over the 4 devices");
    /* The wrong mesh, a repeated axis, an axis out of range. */
    op = mkop(m, f, IR_OP_ALLREDUCE, NIDS(psum), 1);
    ir_op_set_mesh(m, op, "mesh", mesh2);
    EXPECT_ERR(m, op, "input 0 lives on mesh @m, but the op names mesh @n");
    op = mkop(m, f, IR_OP_ALLREDUCE, NIDS(psum), 1);
    ir_op_set_mesh(m, op, "mesh", mesh);
    ir_op_set_ints(m, op, "mesh_axes", DIMS(1, 1));
    EXPECT_ERR(m, op, "mesh_axes names axis 1 twice");
    op = mkop(m, f, IR_OP_ALLREDUCE, NIDS(psum), 1);
    ir_op_set_mesh(m, op, "mesh", mesh);
    ir_op_set_ints(m, op, "mesh_axes", DIMS(2));
    EXPECT_ERR(m, op, "mesh_axes[0] = 2 is not an axis of mesh @m (rank 2)");
    ir_module_free(m);
}

static void
test_mesh_collectives_devvar(void **state)
{
    ir_module *m = ir_module_new();
    ir_id f = ir_func_new(m, "main");
    ir_id mesh = ir_mesh_add(m, "m", 2, (int64_t[]){2, 4}, NULL);
    ir_id vt = tvar(m, IR_F32, "d", DIMS(4, 8));
    ir_id v = arg(m, f, vt);
    ir_id odd = arg(m, f, tvar(m, IR_F32, "d", DIMS(3, 8)));
    ir_id op;
    ir_cost c;
    (void)state;
    op = mkop(m, f, IR_OP_ALLREDUCE, NIDS(v), 1);
    ir_op_set_mesh(m, op, "mesh", mesh);
    ir_op_set_ints(m, op, "mesh_axes", DIMS(0));
    EXPECT_RESULT(m, op, vt);
    settle(m, op);
    ir_op_cost(m, op, &c);
    EXPECT_D(c.bytes_comm, 128.0);
    /* all_gather over axis 1 (4 devices) along dim 0: [16,8]. */
    op = mkop(m, f, IR_OP_ALLGATHER, NIDS(v), 1);
    ir_op_set_mesh(m, op, "mesh", mesh);
    ir_op_set_ints(m, op, "mesh_axes", DIMS(1));
    ir_op_set_int(m, op, "dim", 0);
    EXPECT_RESULT(m, op, tvar(m, IR_F32, "d", DIMS(16, 8)));
    /* reduce_scatter over both axes (8 devices) along dim 1: [4,1]. */
    op = mkop(m, f, IR_OP_REDUCESCATTER, NIDS(v), 1);
    ir_op_set_mesh(m, op, "mesh", mesh);
    ir_op_set_ints(m, op, "mesh_axes", DIMS(0, 1));
    ir_op_set_int(m, op, "dim", 1);
    EXPECT_RESULT(m, op, tvar(m, IR_F32, "d", DIMS(4, 1)));
    /* mesh_axes defaults to every axis. */
    op = mkop(m, f, IR_OP_ALLGATHER, NIDS(v), 1);
    ir_op_set_mesh(m, op, "mesh", mesh);
    ir_op_set_int(m, op, "dim", 1);
    EXPECT_RESULT(m, op, tvar(m, IR_F32, "d", DIMS(4, 64)));
    /* all_to_all over axis 0 (2 devices): split dim 0, concat dim 1: [2,16]. */
    op = mkop(m, f, IR_OP_ALLTOALL, NIDS(v), 1);
    ir_op_set_mesh(m, op, "mesh", mesh);
    ir_op_set_ints(m, op, "mesh_axes", DIMS(0));
    ir_op_set_int(m, op, "split_dim", 0);
    ir_op_set_int(m, op, "concat_dim", 1);
    EXPECT_RESULT(m, op, tvar(m, IR_F32, "d", DIMS(2, 16)));
    /* broadcast keeps, scatter divides, gather multiplies. */
    op = mkop(m, f, IR_OP_BROADCAST, NIDS(v), 1);
    ir_op_set_mesh(m, op, "mesh", mesh);
    ir_op_set_ints(m, op, "mesh_axes", DIMS(1));
    ir_op_set_ints(m, op, "root", DIMS(0));
    EXPECT_RESULT(m, op, vt);
    op = mkop(m, f, IR_OP_SCATTER, NIDS(v), 1);
    ir_op_set_mesh(m, op, "mesh", mesh);
    ir_op_set_ints(m, op, "mesh_axes", DIMS(1));
    ir_op_set_int(m, op, "dim", 1);
    EXPECT_RESULT(m, op, tvar(m, IR_F32, "d", DIMS(4, 2)));
    op = mkop(m, f, IR_OP_GATHERTO, NIDS(v), 1);
    ir_op_set_mesh(m, op, "mesh", mesh);
    ir_op_set_ints(m, op, "mesh_axes", DIMS(0));
    ir_op_set_int(m, op, "dim", 0);
    EXPECT_RESULT(m, op, tvar(m, IR_F32, "d", DIMS(8, 8)));
    op = mkop(m, f, IR_OP_SCATTER, NIDS(odd), 1);
    ir_op_set_mesh(m, op, "mesh", mesh);
    ir_op_set_ints(m, op, "mesh_axes", DIMS(0));
    ir_op_set_int(m, op, "dim", 0);
    EXPECT_ERR(m, op, "dimension 0 (size 3) does not divide into 2 parts");
    op = mkop(m, f, IR_OP_BROADCAST, NIDS(v), 1);
    ir_op_set_mesh(m, op, "mesh", mesh);
    ir_op_set_ints(m, op, "mesh_axes", DIMS(1));
    ir_op_set_ints(m, op, "root", DIMS(4));
    EXPECT_ERR(m, op, "root[0] = 4 is outside mesh axis 1");
    ir_module_free(m);
}

/* ---- structure and names ---- */

static void
test_opaque_and_return(void **state)
{
    ir_module *m = ir_module_new();
    ir_id f = ir_func_new(m, "main");
    ir_id xt = ten(m, IR_F32, 0, DIMS(4));
    ir_id x = arg(m, f, xt);
    ir_id op;
    ir_cost c;
    (void)state;
    op = ir_op_add(m, f, IR_OP_OPAQUE, 1, &x, 1, &xt, NULL);
    ir_op_set_string(m, op, "op_type", "Conv");
    m->ops[op].opaque = ir_str(m, "Conv");
    EXPECT_RESULT(m, op, xt);
    /* No cost rule for an opaque Conv: its bytes only, no FLOPs (the estimate). */
    assert_false(ir_op_has_cost_rule(m, op));
    ir_op_cost(m, op, &c);
    EXPECT_D(c.flops + c.bytes_comm, 0.0);
    EXPECT_D(c.bytes_read, 16.0);
    EXPECT_D(c.bytes_write, 16.0);
    op = mkop(m, f, IR_OP_OPAQUE, NIDS(x), 1);
    m->ops[op].opaque = ir_str(m, "Conv");
    EXPECT_ERR(m, op, "Conv (op 2): result 0 of an opaque op needs a declared type");
    op = mkop(m, f, IR_OP_RETURN, NIDS(x), 0);
    EXPECT_ERR(m, op, "dist.return (op 3): cannot be an op");
    ir_module_free(m);
}

static void
test_names(void **state)
{
    static const struct {
        const char *name;
        int kind;
    } cases[] = {
        {"MatMul", IR_OP_MATMUL},
        {"dist.all_reduce", IR_OP_ALLREDUCE},
        {"AllReduce", IR_OP_ALLREDUCE},
        {"Allreduce", IR_OP_ALLREDUCE},
        {"MPIAllreduce", IR_OP_ALLREDUCE},
        {"MPIScatterToTupleType", IR_OP_SCATTER},
        {"Broadcast", IR_OP_BROADCAST},
        {"AllGather", IR_OP_ALLGATHER},
        {"MPIAllgather", IR_OP_ALLGATHER},
        {"MPIAllgatherFromTupleType", IR_OP_ALLGATHER},
        {"ReduceScatter", IR_OP_REDUCESCATTER},
        {"MPIAllToAll", IR_OP_ALLTOALL},
        {"LayerNormalization", IR_OP_LAYERNORM},
        {"allreduce", IR_OP_NONE},
        {"MatMu", IR_OP_NONE},
        {"", IR_OP_NONE},
    };
    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int k = ir_opkind_from_name(cases[i].name, strlen(cases[i].name));
        if (k != cases[i].kind)
            fail_msg("%s -> %d, expected %d", cases[i].name, k, cases[i].kind);
    }
    /* A prefix of a longer name is not a match. */
    assert_int_equal(ir_opkind_from_name("AllReduceX", 9), IR_OP_ALLREDUCE);
    assert_int_equal(ir_opkind_from_name("AllReduceX", 10), IR_OP_NONE);
}

/* Every op kind survives inference on an op with no typed inputs: an error, never a crash. */
static void
test_untyped_inputs(void **state)
{
    ir_module *m = ir_module_new();
    ir_id f = ir_func_new(m, "main");
    ir_id in[8]; /* the most inputs any op needs at least (FlashAttentionGrad: 6) */
    (void)state;
    for (int i = 0; i < 8; i++)
        in[i] = arg(m, f, 0);
    for (int k = 1; k < IR_NOPKIND; k++) {
        const ir_opinfo *info = ir_opkind_info(k);
        uint32_t nin = (uint32_t)(info->min_in > 0 ? info->min_in : 1);
        assert_true(nin <= 8);
        uint32_t nout = (uint32_t)(info->min_out > 0 ? info->min_out : 1);
        ir_id out[8];
        di_error err;
        ir_cost c;
        ir_id op;
        if (info->max_in >= 0 && nin > (uint32_t)info->max_in)
            nin = (uint32_t)info->max_in;
        if (info->max_out >= 0 && nout > (uint32_t)info->max_out)
            nout = (uint32_t)info->max_out;
        op = mkop(m, f, k, nin, in, nout);
        di_error_clear(&err);
        if (ir_op_infer(m, op, out, &err) == 0 && nin > 0 && k != IR_OP_TUPLE)
            fail_msg("%s accepted untyped inputs", ir_opkind_name(k));
        ir_op_cost(m, op, &c);
    }
    ir_module_free(m);
}

/* Linear position of (a, b, c, d) on a 2x3x4x5 mesh. */
static uint32_t
pos4(uint32_t a, uint32_t b, uint32_t c, uint32_t d)
{
    return ((a * 3 + b) * 4 + c) * 5 + d;
}

static int
index_in(const uint32_t *members, uint32_t n, uint32_t p)
{
    for (uint32_t k = 0; k < n; k++)
        if (members[k] == p)
            return (int)k;
    return -1;
}

/* MLIR's mesh dialect's group examples on a 2x3x4x5 mesh (ir_mesh_group). */
static void
test_mesh_group_seed(void **state)
{
    (void)state;
    ir_module *m = ir_module_new();
    ir_id mesh = ir_mesh_add(m, "m", 4, (int64_t[]){2, 3, 4, 5}, NULL);
    uint32_t members[120], n, pos;
    /* axes [0, 1]: (1,0,2,3) and (1,1,2,3) share a group, (1,0,2,4) does not. */
    ir_mesh_group(m, mesh, (uint32_t[]){0, 1}, 2, pos4(1, 0, 2, 3), members, &n, &pos);
    assert_int_equal(n, 6);
    assert_int_equal(members[pos], pos4(1, 0, 2, 3));
    assert_int_equal(pos, 3); /* (1,0): row-major over axes 0 then 1 */
    assert_true(index_in(members, n, pos4(1, 1, 2, 3)) >= 0);
    assert_int_equal(index_in(members, n, pos4(1, 0, 2, 4)), -1);
    for (uint32_t k = 0; k < n; k++) { /* every member agrees off the axes */
        assert_int_equal(members[k] / 5 % 4, 2);
        assert_int_equal(members[k] % 5, 3);
    }
    /* axes [3, 1]: axis 3 outer, so (i,1,k,0) precedes (i,0,k,1) and (i,2,k,0). */
    for (uint32_t i = 0; i < 2; i++)
        for (uint32_t k = 0; k < 4; k++) {
            ir_mesh_group(m, mesh, (uint32_t[]){3, 1}, 2, pos4(i, 1, k, 0), members, &n, &pos);
            assert_int_equal(n, 15);
            int a = index_in(members, n, pos4(i, 1, k, 0));
            int b = index_in(members, n, pos4(i, 0, k, 1));
            int c = index_in(members, n, pos4(i, 2, k, 0));
            assert_true(a >= 0 && b >= 0 && c >= 0);
            assert_true(a < b);
            assert_true(a < c);
            assert_int_equal(a, (int)pos);
            assert_int_equal(a, 1); /* (d=0, j=1) */
            assert_int_equal(b, 3); /* (d=1, j=0) */
        }
    /* No axes given: every axis, the whole mesh in device order. */
    ir_mesh_group(m, mesh, NULL, 0, 7, members, &n, &pos);
    assert_int_equal(n, 120);
    assert_int_equal(pos, 7);
    for (uint32_t k = 0; k < n; k++)
        assert_int_equal(members[k], k);
    ir_module_free(m);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_op_label),
        cmocka_unit_test(test_infer_results),
        cmocka_unit_test(test_matmul),
        cmocka_unit_test(test_matmul_numpy_rules),
        cmocka_unit_test(test_matmul_errors),
        cmocka_unit_test(test_gemm),
        cmocka_unit_test(test_broadcasting),
        cmocka_unit_test(test_unary),
        cmocka_unit_test(test_layernorm),
        cmocka_unit_test(test_norm_stash_type),
        cmocka_unit_test(test_reshape_transpose),
        cmocka_unit_test(test_concat_split),
        cmocka_unit_test(test_slice),
        cmocka_unit_test(test_gather),
        cmocka_unit_test(test_squeeze_reduce),
        cmocka_unit_test(test_constant),
        cmocka_unit_test(test_losses),
        cmocka_unit_test(test_gradients),
        cmocka_unit_test(test_norm_loss_gradients),
        cmocka_unit_test(test_optimizers),
        cmocka_unit_test(test_placement_rules),
        cmocka_unit_test(test_compute_on_dtensors),
        cmocka_unit_test(test_send),
        cmocka_unit_test(test_broadcast_scatter_gather),
        cmocka_unit_test(test_tuple_collectives),
        cmocka_unit_test(test_tuple_ops),
        cmocka_unit_test(test_pmap_devices),
        cmocka_unit_test(test_pmap_mesh),
        cmocka_unit_test(test_mesh_collectives_dtensor),
        cmocka_unit_test(test_mesh_collectives_devvar),
        cmocka_unit_test(test_opaque_and_return),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_untyped_inputs),
        cmocka_unit_test(test_mesh_group_seed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
