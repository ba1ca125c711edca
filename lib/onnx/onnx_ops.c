/*
 * onnx_ops.c: one handler per supported ONNX op (onnx_int.h describes the
 * protocol). Handlers read attributes, fold the inputs that later opsets
 * turned from attributes into tensors (Split's split, Squeeze's and
 * Unsqueeze's axes, ReduceSum's axes, Slice's starts/ends/axes/steps,
 * Reshape's shape, Dropout's ratio and training_mode) back into attributes
 * when they are constants, and emit ops of the op table. Ops that distir has
 * no op for but that only ever compute on constants in exported models
 * (Shape, ConstantOfShape, comparisons, Range, Trilu, ...) are evaluated at
 * import time. A handler checks everything before it emits anything.
 *
 * ONNX Runtime's training ops (domain com.microsoft) map where the op table
 * has the same computation: ReluGrad, GeluGrad, SoftmaxGrad,
 * LayerNormalizationGrad, DropoutGrad, ReduceSumTraining, Gelu,
 * SGDOptimizer (w - lr * g), and BroadcastGradientArgs (evaluated).
 */
#include "onnx/onnx_int.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- helpers ---- */

static int
emit_done(imp *I, emit *e, ir_id op, uint32_t nbind)
{
    int rc = onnx_infer(I, e, op);
    if (rc != 0)
        return rc;
    for (uint32_t k = 0; k < nbind && k < e->nout; k++)
        e->out[k] = ir_op_output(e->m, op, k);
    return 0;
}

/* Gathers inputs 0..n-1 (all required). */
static int
inputs(imp *I, emit *e, const Onnx__NodeProto *n, uint32_t count, ir_id *in)
{
    for (uint32_t i = 0; i < count; i++)
        if ((in[i] = onnx_in(I, e, n, i)) == 0)
            return I->err->code ? I->err->code : DI_EVERIFY;
    return 0;
}

static int
need_inputs(imp *I, const Onnx__NodeProto *n, uint32_t min, uint32_t max)
{
    uint32_t have = 0;
    for (uint32_t i = 0; i < n->n_input; i++)
        if (onnx_has_input(n, i))
            have = i + 1;
    if (have < min || have > max)
        return onnx_fail(I, DI_EUNSUPPORTED, "has %u inputs, expected %u to %u", have, min, max);
    for (uint32_t i = 0; i < min; i++)
        if (!onnx_has_input(n, i))
            return onnx_fail(I, DI_EVERIFY, "input %u is missing", i);
    return 0;
}

/* The number of results: up to the last named output. */
static uint32_t
named_outputs(const Onnx__NodeProto *n)
{
    uint32_t k = 0;
    for (uint32_t i = 0; i < n->n_output; i++)
        if (n->output[i] && n->output[i][0])
            k = i + 1;
    return k;
}

/* An op of kind (Reshape or Transpose) on x with the ints attribute key; its result. */
static ir_id
view_op(imp *I, emit *e, int kind, ir_id x, const char *key, uint32_t n, const int64_t *v)
{
    ir_id op = onnx_op(e, kind, 1, &x, 1);
    ir_op_set_ints(e->m, op, key, n, v);
    if (onnx_infer(I, e, op) != 0)
        return 0;
    return ir_op_output(e->m, op, 0);
}

/* ---- elementwise ---- */

static int
unary(imp *I, const Onnx__NodeProto *n, emit *e, int kind)
{
    ir_id in, op;
    int rc;
    if ((rc = onnx_check_attrs(I, n, "")) != 0 || (rc = need_inputs(I, n, 1, 1)) != 0 ||
        (rc = inputs(I, e, n, 1, &in)) != 0)
        return rc;
    op = onnx_op(e, kind, 1, &in, 1);
    return emit_done(I, e, op, 1);
}

#define UNARY(fname, kind)                                                                         \
    static int fname(imp *I, const Onnx__NodeProto *n, emit *e)                                    \
    {                                                                                              \
        return unary(I, n, e, kind);                                                               \
    }
UNARY(h_sqrt, IR_OP_SQRT)
UNARY(h_relu, IR_OP_RELU)
UNARY(h_tanh, IR_OP_TANH)
UNARY(h_sigmoid, IR_OP_SIGMOID)
UNARY(h_erf, IR_OP_ERF)
UNARY(h_identity, IR_OP_IDENTITY)
UNARY(h_gelu, IR_OP_GELU)

/* Gelu (opset 20): approximate "none" (erf) or "tanh". */
static int
h_onnx_gelu(imp *I, const Onnx__NodeProto *n, emit *e)
{
    char approx[8];
    ir_id in, op;
    int rc;
    if ((rc = onnx_check_attrs(I, n, "approximate")) != 0 || (rc = need_inputs(I, n, 1, 1)) != 0 ||
        (rc = onnx_attr_string(I, n, "approximate", approx, sizeof approx)) != 0)
        return rc;
    if (approx[0] != '\0' && strcmp(approx, "none") != 0 && strcmp(approx, "tanh") != 0)
        return onnx_fail(I, DI_EUNSUPPORTED, "approximate must be none or tanh");
    if ((rc = inputs(I, e, n, 1, &in)) != 0)
        return rc;
    op = onnx_op(e, IR_OP_GELU, 1, &in, 1);
    if (strcmp(approx, "tanh") == 0)
        ir_op_set_string(e->m, op, "approximate", approx);
    return emit_done(I, e, op, 1);
}

/* Swish (opset 24): x * sigmoid(alpha * x). */
static int
h_swish(imp *I, const Onnx__NodeProto *n, emit *e)
{
    double alpha;
    ir_id in, op;
    int rc;
    if ((rc = onnx_check_attrs(I, n, "alpha")) != 0 || (rc = need_inputs(I, n, 1, 1)) != 0 ||
        (rc = onnx_attr_float(I, n, "alpha", 1.0, &alpha)) != 0 || (rc = inputs(I, e, n, 1, &in)))
        return rc;
    op = onnx_op(e, IR_OP_SWISH, 1, &in, 1);
    if (alpha != 1.0)
        ir_op_set_float(e->m, op, "alpha", alpha);
    return emit_done(I, e, op, 1);
}

static int
binary(imp *I, const Onnx__NodeProto *n, emit *e, int kind)
{
    ir_dtype da, db;
    uint32_t r;
    int64_t dims[IR_MAX_RANK];
    ir_id in[2], op;
    int rc;
    if ((rc = onnx_check_attrs(I, n, "")) != 0 || (rc = need_inputs(I, n, 2, 2)) != 0 ||
        (rc = onnx_input_type(I, n, 0, &da, &r, dims)) != 0 ||
        (rc = onnx_input_type(I, n, 1, &db, &r, dims)) != 0)
        return rc;
    if (da == IR_BOOL)
        return onnx_fail(I, DI_EUNSUPPORTED, "arithmetic on booleans is not supported");
    if (da != db && !(kind == IR_OP_POW && (ir_dtype_is_float(da) || ir_dtype_is_float(db))))
        return onnx_fail(I, DI_EUNSUPPORTED, "inputs of dtypes %s and %s: distir's %s takes one "
                         "dtype", ir_dtype_name(da), ir_dtype_name(db), ir_opkind_name(kind));
    if ((rc = inputs(I, e, n, 2, in)) != 0)
        return rc;
    if (da != db) {
        /*
         * Pow with mixed dtypes computes in the floating-point one: Pow(float, int) casts
         * the exponent to the base's dtype; Pow(int, float) casts the base to the
         * exponent's dtype and the result back to the base's (as NumPy does).
         */
        uint32_t which = ir_dtype_is_float(da) ? 1 : 0;
        ir_dtype ft = which == 1 ? da : db;
        op = onnx_op(e, IR_OP_CAST, 1, &in[which], 1);
        ir_op_set_int(e->m, op, "to", ir_dtype_onnx(ft));
        if ((rc = onnx_infer(I, e, op)) != 0)
            return rc;
        in[which] = ir_op_output(e->m, op, 0);
        if (which == 0) {
            ir_id p;
            op = onnx_op(e, kind, 2, in, 1);
            if ((rc = onnx_infer(I, e, op)) != 0)
                return rc;
            p = ir_op_output(e->m, op, 0);
            op = onnx_op(e, IR_OP_CAST, 1, &p, 1);
            ir_op_set_int(e->m, op, "to", ir_dtype_onnx(da));
            return emit_done(I, e, op, 1);
        }
    }
    op = onnx_op(e, kind, 2, in, 1);
    return emit_done(I, e, op, 1);
}

#define BINARY(fname, kind)                                                                        \
    static int fname(imp *I, const Onnx__NodeProto *n, emit *e)                                    \
    {                                                                                              \
        return binary(I, n, e, kind);                                                              \
    }
BINARY(h_add, IR_OP_ADD)
BINARY(h_sub, IR_OP_SUB)
BINARY(h_mul, IR_OP_MUL)
BINARY(h_div, IR_OP_DIV)
BINARY(h_pow, IR_OP_POW)

static int
cast_to(imp *I, const Onnx__NodeProto *n, emit *e, int64_t to)
{
    ir_dtype dt;
    uint32_t r;
    int64_t dims[IR_MAX_RANK];
    ir_id in, op;
    int rc;
    if (ir_dtype_from_onnx(to) == IR_DTYPE_NONE)
        return onnx_fail(I, DI_EUNSUPPORTED, "cast to %s is not supported",
                         onnx_dtype_name(to));
    if ((rc = onnx_input_type(I, n, 0, &dt, &r, dims)) != 0 || (rc = inputs(I, e, n, 1, &in)))
        return rc;
    op = onnx_op(e, IR_OP_CAST, 1, &in, 1);
    ir_op_set_int(e->m, op, "to", to);
    return emit_done(I, e, op, 1);
}

/*
 * Cast's and CastLike's saturate (opset 19) and round_mode (opset 24) apply
 * only to the 8- and 4-bit float types, which distir refuses: accepted, unused.
 */
#define CAST_FP8_ATTRS "saturate round_mode"

static int
h_cast(imp *I, const Onnx__NodeProto *n, emit *e)
{
    int64_t to;
    int rc;
    if ((rc = onnx_check_attrs(I, n, "to " CAST_FP8_ATTRS)) != 0 ||
        (rc = need_inputs(I, n, 1, 1)) != 0 ||
        (rc = onnx_attr_int(I, n, "to", 0, &to)) != 0)
        return rc;
    return cast_to(I, n, e, to);
}

static int
h_castlike(imp *I, const Onnx__NodeProto *n, emit *e)
{
    ir_dtype dt;
    uint32_t r;
    int64_t dims[IR_MAX_RANK];
    int rc;
    if ((rc = onnx_check_attrs(I, n, CAST_FP8_ATTRS)) != 0 || (rc = need_inputs(I, n, 2, 2)) != 0 ||
        (rc = onnx_input_type(I, n, 1, &dt, &r, dims)) != 0)
        return rc;
    return cast_to(I, n, e, ir_dtype_onnx(dt));
}

static int
h_where(imp *I, const Onnx__NodeProto *n, emit *e)
{
    ir_id in[3], op;
    int rc;
    if ((rc = onnx_check_attrs(I, n, "")) != 0 || (rc = need_inputs(I, n, 3, 3)) != 0 ||
        (rc = inputs(I, e, n, 3, in)) != 0)
        return rc;
    op = onnx_op(e, IR_OP_WHERE, 3, in, 1);
    return emit_done(I, e, op, 1);
}

/* ---- linear algebra ---- */

static int
h_matmul(imp *I, const Onnx__NodeProto *n, emit *e)
{
    ir_id in[2], op;
    int rc;
    if ((rc = onnx_check_attrs(I, n, "")) != 0 || (rc = need_inputs(I, n, 2, 2)) != 0 ||
        (rc = inputs(I, e, n, 2, in)) != 0)
        return rc;
    op = onnx_op(e, IR_OP_MATMUL, 2, in, 1);
    return emit_done(I, e, op, 1);
}

static int
h_gemm(imp *I, const Onnx__NodeProto *n, emit *e)
{
    double alpha, beta;
    int64_t ta, tb;
    uint32_t nin;
    ir_id in[3], op;
    int rc;
    if ((rc = onnx_check_attrs(I, n, "alpha beta transA transB")) != 0 ||
        (rc = need_inputs(I, n, 2, 3)) != 0 ||
        (rc = onnx_attr_float(I, n, "alpha", 1.0, &alpha)) != 0 ||
        (rc = onnx_attr_float(I, n, "beta", 1.0, &beta)) != 0 ||
        (rc = onnx_attr_int(I, n, "transA", 0, &ta)) != 0 ||
        (rc = onnx_attr_int(I, n, "transB", 0, &tb)) != 0)
        return rc;
    /* beta = 0 ignores C (ONNX Runtime's gradient graphs pass an undefined "ZeroConstant"). */
    nin = onnx_has_input(n, 2) && beta != 0.0 ? 3 : 2;
    if ((rc = inputs(I, e, n, nin, in)) != 0)
        return rc;
    op = onnx_op(e, IR_OP_GEMM, nin, in, 1);
    if (alpha != 1.0)
        ir_op_set_float(e->m, op, "alpha", alpha);
    if (beta != 1.0 && nin == 3)
        ir_op_set_float(e->m, op, "beta", beta);
    if (ta)
        ir_op_set_int(e->m, op, "transA", 1);
    if (tb)
        ir_op_set_int(e->m, op, "transB", 1);
    return emit_done(I, e, op, 1);
}

/* ---- normalization and friends ---- */

static int
h_softmax(imp *I, const Onnx__NodeProto *n, emit *e)
{
    ir_dtype dt;
    uint32_t r;
    int64_t dims[IR_MAX_RANK], axis;
    ir_id in, op;
    int rc;
    if ((rc = onnx_check_attrs(I, n, "axis")) != 0 || (rc = need_inputs(I, n, 1, 1)) != 0 ||
        (rc = onnx_attr_int(I, n, "axis", I->opset >= 13 ? -1 : 1, &axis)) != 0 ||
        (rc = onnx_input_type(I, n, 0, &dt, &r, dims)) != 0)
        return rc;
    if (r == 0 || axis < -(int64_t)r || axis >= (int64_t)r)
        return onnx_fail(I, DI_EVERIFY, "axis %lld is out of range for rank %u", (long long)axis,
                         r);
    if (axis < 0)
        axis += r;
    if ((rc = inputs(I, e, n, 1, &in)) != 0)
        return rc;
    if (I->opset >= 13 || axis == (int64_t)r - 1) {
        op = onnx_op(e, IR_OP_SOFTMAX, 1, &in, 1);
        ir_op_set_int(e->m, op, "axis", axis);
        return emit_done(I, e, op, 1);
    }
    /* Before opset 13 Softmax works on the input coerced to 2-d at axis. */
    {
        int64_t flat[2] = {1, 1};
        for (uint32_t i = 0; i < r; i++)
            flat[i < axis ? 0 : 1] *= dims[i];
        if ((in = view_op(I, e, IR_OP_RESHAPE, in, "shape", 2, flat)) == 0)
            return I->err->code ? I->err->code : DI_EVERIFY;
        op = onnx_op(e, IR_OP_SOFTMAX, 1, &in, 1);
        ir_op_set_int(e->m, op, "axis", -1);
        if ((rc = onnx_infer(I, e, op)) != 0)
            return rc;
        in = ir_op_output(e->m, op, 0);
        op = onnx_op(e, IR_OP_RESHAPE, 1, &in, 1);
        ir_op_set_ints(e->m, op, "shape", r, dims);
        return emit_done(I, e, op, 1);
    }
}

/*
 * A normalization's stash_type (the dtype of its statistics and of their
 * computation; ONNX's default 1, f32), set on op explicitly: distir reads an
 * absent one as the input's dtype.
 */
static int
set_stash_type(imp *I, const Onnx__NodeProto *n, emit *e, ir_id op)
{
    int64_t st;
    int rc;
    if ((rc = onnx_attr_int(I, n, "stash_type", 1, &st)) != 0)
        return rc;
    if (!ir_dtype_is_float(ir_dtype_from_onnx(st)))
        return onnx_fail(I, DI_EUNSUPPORTED, "stash_type %lld is not a float data type distir has",
                         (long long)st);
    ir_op_set_int(e->m, op, "stash_type", st);
    return 0;
}

static int
h_layernorm(imp *I, const Onnx__NodeProto *n, emit *e)
{
    int64_t axis;
    double eps;
    uint32_t nin, nout = named_outputs(n);
    ir_id in[3], op;
    int rc;
    if ((rc = onnx_check_attrs(I, n, "axis epsilon stash_type")) != 0 ||
        (rc = need_inputs(I, n, 2, 3)) != 0 || (rc = onnx_attr_int(I, n, "axis", -1, &axis)) ||
        (rc = onnx_attr_float(I, n, "epsilon", 1e-5, &eps)) != 0)
        return rc;
    nin = onnx_has_input(n, 2) ? 3 : 2;
    if (nout < 1 || nout > 3)
        return onnx_fail(I, DI_EUNSUPPORTED, "has %u outputs", nout);
    if ((rc = inputs(I, e, n, nin, in)) != 0)
        return rc;
    op = onnx_op(e, IR_OP_LAYERNORM, nin, in, nout);
    ir_op_set_int(e->m, op, "axis", axis);
    ir_op_set_float(e->m, op, "epsilon", eps);
    if ((rc = set_stash_type(I, n, e, op)) != 0)
        return rc;
    return emit_done(I, e, op, nout);
}

/* Dropout: inference mode (and ratio 0) is the identity with an all-true mask. */
static int
h_dropout(imp *I, const Onnx__NodeProto *n, emit *e)
{
    double ratio = 0.5;
    int64_t seed = 0, training = 0;
    uint32_t nout = named_outputs(n);
    ir_id in, op;
    int rc;
    if (I->opset >= 12) {
        const ex_tensor *r = onnx_const_input(I, n, 1), *t = onnx_const_input(I, n, 2);
        if ((rc = onnx_check_attrs(I, n, "seed")) != 0 || (rc = need_inputs(I, n, 1, 3)) != 0 ||
            (rc = onnx_attr_int(I, n, "seed", 0, &seed)) != 0)
            return rc;
        if ((onnx_has_input(n, 1) && (r == NULL || r->numel != 1)) ||
            (onnx_has_input(n, 2) && (t == NULL || t->numel != 1)))
            return onnx_fail(I, DI_EUNSUPPORTED, "ratio and training_mode must be constant "
                             "scalars");
        if (r != NULL)
            ratio = ex_get(r, 0);
        if (t != NULL)
            training = ex_get(t, 0) != 0;
    } else {
        if ((rc = onnx_check_attrs(I, n, "ratio seed is_test")) != 0 ||
            (rc = need_inputs(I, n, 1, 1)) != 0 ||
            (rc = onnx_attr_float(I, n, "ratio", 0.5, &ratio)) != 0)
            return rc;
        /* Opsets 7 to 11 describe Dropout at inference: the identity. */
        training = 0;
    }
    if (!(ratio >= 0.0 && ratio < 1.0))
        return onnx_fail(I, DI_EVERIFY, "ratio %g is outside [0, 1)", ratio);
    if (nout < 1 || nout > 2)
        return onnx_fail(I, DI_EUNSUPPORTED, "has %u outputs", nout);
    if ((in = onnx_in(I, e, n, 0)) == 0)
        return I->err->code;
    op = onnx_op(e, IR_OP_DROPOUT, 1, &in, nout);
    ir_op_set_float(e->m, op, "ratio", training ? ratio : 0.0);
    if (training && seed)
        ir_op_set_int(e->m, op, "seed", seed);
    return emit_done(I, e, op, nout);
}

static int
h_sceloss(imp *I, const Onnx__NodeProto *n, emit *e)
{
    char red[16];
    int64_t ii;
    uint32_t nout = named_outputs(n);
    ir_id in[2], op;
    int rc;
    if ((rc = onnx_check_attrs(I, n, "ignore_index reduction")) != 0 ||
        (rc = onnx_attr_string(I, n, "reduction", red, sizeof red)) != 0 ||
        (rc = onnx_attr_int(I, n, "ignore_index", 0, &ii)) != 0)
        return rc;
    if (onnx_has_input(n, 2))
        return onnx_fail(I, DI_EUNSUPPORTED, "class weights (input 2) are not supported");
    if ((rc = need_inputs(I, n, 2, 2)) != 0)
        return rc;
    if (nout < 1 || nout > 2)
        return onnx_fail(I, DI_EUNSUPPORTED, "has %u outputs", nout);
    if (*red && strcmp(red, "mean") && strcmp(red, "sum") && strcmp(red, "none"))
        return onnx_fail(I, DI_EUNSUPPORTED, "reduction '%s' is not supported", red);
    if ((rc = inputs(I, e, n, 2, in)) != 0)
        return rc;
    op = onnx_op(e, IR_OP_SCELOSS, 2, in, nout);
    if (*red)
        ir_op_set_string(e->m, op, "reduction", red);
    if (onnx_attr(n, "ignore_index") != NULL)
        ir_op_set_int(e->m, op, "ignore_index", ii);
    return emit_done(I, e, op, nout);
}

/* ---- shapes ---- */

static int
h_reshape(imp *I, const Onnx__NodeProto *n, emit *e)
{
    int64_t shape[IR_MAX_RANK], allowzero;
    uint32_t ns;
    ir_id in, op;
    int rc;
    if ((rc = onnx_check_attrs(I, n, "allowzero")) != 0 || (rc = need_inputs(I, n, 2, 2)) ||
        (rc = onnx_attr_int(I, n, "allowzero", 0, &allowzero)) != 0 ||
        (rc = onnx_const_ints(I, n, 1, "shape", shape, IR_MAX_RANK, &ns)) != 0)
        return rc;
    for (uint32_t i = 0; allowzero && i < ns; i++)
        if (shape[i] == 0)
            return onnx_fail(I, DI_EUNSUPPORTED, "allowzero=1 with a 0 in the shape (an empty "
                             "dimension) is not supported");
    if ((rc = inputs(I, e, n, 1, &in)) != 0)
        return rc;
    op = onnx_op(e, IR_OP_RESHAPE, 1, &in, 1);
    ir_op_set_ints(e->m, op, "shape", ns, shape);
    return emit_done(I, e, op, 1);
}

static int
h_transpose(imp *I, const Onnx__NodeProto *n, emit *e)
{
    int64_t perm[IR_MAX_RANK];
    uint32_t np;
    int present;
    ir_id in, op;
    int rc;
    if ((rc = onnx_check_attrs(I, n, "perm")) != 0 || (rc = need_inputs(I, n, 1, 1)) != 0 ||
        (rc = onnx_attr_ints(I, n, "perm", perm, IR_MAX_RANK, &np, &present)) != 0 ||
        (rc = inputs(I, e, n, 1, &in)) != 0)
        return rc;
    op = onnx_op(e, IR_OP_TRANSPOSE, 1, &in, 1);
    if (present)
        ir_op_set_ints(e->m, op, "perm", np, perm);
    return emit_done(I, e, op, 1);
}

static int
h_concat(imp *I, const Onnx__NodeProto *n, emit *e)
{
    int64_t axis;
    ir_id *in, op;
    int rc;
    if ((rc = onnx_check_attrs(I, n, "axis")) != 0)
        return rc;
    if (onnx_attr(n, "axis") == NULL)
        return onnx_fail(I, DI_EVERIFY, "needs the attribute axis");
    if ((rc = onnx_attr_int(I, n, "axis", 0, &axis)) != 0 ||
        (rc = need_inputs(I, n, 1, (uint32_t)n->n_input)) != 0)
        return rc;
    for (uint32_t i = 0; i < n->n_input; i++)
        if (!onnx_has_input(n, i))
            return onnx_fail(I, DI_EVERIFY, "input %u is missing", i);
    in = di_xcalloc(n->n_input, sizeof *in);
    if ((rc = inputs(I, e, n, (uint32_t)n->n_input, in)) != 0) {
        di_free(in);
        return rc;
    }
    op = onnx_op(e, IR_OP_CONCAT, (uint32_t)n->n_input, in, 1);
    di_free(in);
    ir_op_set_int(e->m, op, "axis", axis);
    return emit_done(I, e, op, 1);
}

/*
 * Split's num_outputs (opset 18): parts of ceil(d / k) along the axis, the last
 * smaller when k does not divide d; into split[] when it does not (an even
 * split needs no sizes).
 */
static int
split_num_outputs(imp *I, const Onnx__NodeProto *n, int64_t axis, int64_t k, int64_t *split,
                  uint32_t *ns, int *present)
{
    ir_dtype dt;
    uint32_t r;
    int64_t dims[IR_MAX_RANK], a, d, chunk;
    int rc;
    if (k != (int64_t)n->n_output)
        return onnx_fail(I, DI_EVERIFY, "num_outputs is %lld but the node has %zu outputs",
                         (long long)k, n->n_output);
    if ((rc = onnx_input_type(I, n, 0, &dt, &r, dims)) != 0)
        return rc;
    a = axis < 0 ? axis + (int64_t)r : axis;
    if (a < 0 || a >= (int64_t)r)
        return onnx_fail(I, DI_EVERIFY, "axis %lld is out of range for rank %u", (long long)axis,
                         r);
    d = dims[a];
    chunk = (d + k - 1) / k;
    if (d % k == 0)
        return 0;
    if (d - chunk * (k - 1) <= 0)
        return onnx_fail(I, DI_EVERIFY, "cannot split %lld elements into %lld parts of %lld",
                         (long long)d, (long long)k, (long long)chunk);
    for (int64_t i = 0; i < k; i++)
        split[i] = i + 1 < k ? chunk : d - chunk * (k - 1);
    *ns = (uint32_t)k;
    *present = 1;
    return 0;
}

static int
h_split(imp *I, const Onnx__NodeProto *n, emit *e)
{
    int64_t axis, split[256], k = 0;
    uint32_t ns = 0, nout = (uint32_t)n->n_output;
    int present = 0;
    ir_id in, op;
    int rc;
    if ((rc = onnx_check_attrs(I, n,
                               I->opset >= 18   ? "axis num_outputs"
                               : I->opset >= 13 ? "axis"
                                                : "axis split")) != 0 ||
        (rc = need_inputs(I, n, 1, I->opset >= 13 ? 2 : 1)) != 0 ||
        (rc = onnx_attr_int(I, n, "axis", 0, &axis)) != 0 ||
        (rc = onnx_attr_int(I, n, "num_outputs", 0, &k)) != 0)
        return rc;
    if (k != 0 && onnx_has_input(n, 1))
        return onnx_fail(I, DI_EVERIFY, "has both num_outputs and the split input");
    if (I->opset >= 13) {
        if (onnx_has_input(n, 1)) {
            if ((rc = onnx_const_ints(I, n, 1, "split", split, 256, &ns)) != 0)
                return rc;
            present = 1;
        }
    } else if ((rc = onnx_attr_ints(I, n, "split", split, 256, &ns, &present)) != 0) {
        return rc;
    }
    if (nout == 0 || nout > 256)
        return onnx_fail(I, DI_EUNSUPPORTED, "has %u outputs", nout);
    if ((rc = inputs(I, e, n, 1, &in)) != 0)
        return rc;
    if (k != 0 && (rc = split_num_outputs(I, n, axis, k, split, &ns, &present)) != 0)
        return rc;
    op = onnx_op(e, IR_OP_SPLIT, 1, &in, nout);
    ir_op_set_int(e->m, op, "axis", axis);
    if (present)
        ir_op_set_ints(e->m, op, "split", ns, split);
    return emit_done(I, e, op, nout);
}

static int
h_slice(imp *I, const Onnx__NodeProto *n, emit *e)
{
    int64_t starts[IR_MAX_RANK], ends[IR_MAX_RANK], axes[IR_MAX_RANK], steps[IR_MAX_RANK];
    uint32_t ns, ne, na = 0, nst = 0;
    int has_axes = 0, has_steps = 0;
    ir_id in, op;
    int rc;
    if (I->opset >= 10) {
        if ((rc = onnx_check_attrs(I, n, "")) != 0 || (rc = need_inputs(I, n, 3, 5)) != 0 ||
            (rc = onnx_const_ints(I, n, 1, "starts", starts, IR_MAX_RANK, &ns)) != 0 ||
            (rc = onnx_const_ints(I, n, 2, "ends", ends, IR_MAX_RANK, &ne)) != 0)
            return rc;
        if (onnx_has_input(n, 3)) {
            if ((rc = onnx_const_ints(I, n, 3, "axes", axes, IR_MAX_RANK, &na)) != 0)
                return rc;
            has_axes = 1;
        }
        if (onnx_has_input(n, 4)) {
            if ((rc = onnx_const_ints(I, n, 4, "steps", steps, IR_MAX_RANK, &nst)) != 0)
                return rc;
            has_steps = 1;
        }
    } else {
        int p1, p2;
        if ((rc = onnx_check_attrs(I, n, "starts ends axes")) != 0 ||
            (rc = need_inputs(I, n, 1, 1)) != 0 ||
            (rc = onnx_attr_ints(I, n, "starts", starts, IR_MAX_RANK, &ns, &p1)) != 0 ||
            (rc = onnx_attr_ints(I, n, "ends", ends, IR_MAX_RANK, &ne, &p2)) != 0 ||
            (rc = onnx_attr_ints(I, n, "axes", axes, IR_MAX_RANK, &na, &has_axes)) != 0)
            return rc;
    }
    if ((rc = inputs(I, e, n, 1, &in)) != 0)
        return rc;
    op = onnx_op(e, IR_OP_SLICE, 1, &in, 1);
    ir_op_set_ints(e->m, op, "starts", ns, starts);
    ir_op_set_ints(e->m, op, "ends", ne, ends);
    if (has_axes)
        ir_op_set_ints(e->m, op, "axes", na, axes);
    if (has_steps)
        ir_op_set_ints(e->m, op, "steps", nst, steps);
    return emit_done(I, e, op, 1);
}

static int
h_gather(imp *I, const Onnx__NodeProto *n, emit *e)
{
    int64_t axis;
    ir_id in[2], op;
    int rc;
    if ((rc = onnx_check_attrs(I, n, "axis")) != 0 || (rc = need_inputs(I, n, 2, 2)) != 0 ||
        (rc = onnx_attr_int(I, n, "axis", 0, &axis)) != 0 || (rc = inputs(I, e, n, 2, in)) != 0)
        return rc;
    op = onnx_op(e, IR_OP_GATHER, 2, in, 1);
    if (axis)
        ir_op_set_int(e->m, op, "axis", axis);
    return emit_done(I, e, op, 1);
}

/* Axes from the attribute (before opset `from`) or from input 1. */
static int
axes_of(imp *I, const Onnx__NodeProto *n, int64_t from, int64_t *axes, uint32_t *na,
        int *present)
{
    int rc;
    *present = 0;
    *na = 0;
    if (I->opset >= from) {
        if ((rc = onnx_check_attrs(I, n, "")) != 0 || (rc = need_inputs(I, n, 1, 2)) != 0)
            return rc;
        if (!onnx_has_input(n, 1))
            return 0;
        *present = 1;
        return onnx_const_ints(I, n, 1, "axes", axes, IR_MAX_RANK, na);
    }
    if ((rc = onnx_check_attrs(I, n, "axes")) != 0 || (rc = need_inputs(I, n, 1, 1)) != 0)
        return rc;
    return onnx_attr_ints(I, n, "axes", axes, IR_MAX_RANK, na, present);
}

static int
h_unsqueeze(imp *I, const Onnx__NodeProto *n, emit *e)
{
    int64_t axes[IR_MAX_RANK];
    uint32_t na;
    int present;
    ir_id in, op;
    int rc;
    if ((rc = axes_of(I, n, 13, axes, &na, &present)) != 0)
        return rc;
    if (!present)
        return onnx_fail(I, DI_EVERIFY, "needs axes");
    if ((rc = inputs(I, e, n, 1, &in)) != 0)
        return rc;
    op = onnx_op(e, IR_OP_UNSQUEEZE, 1, &in, 1);
    ir_op_set_ints(e->m, op, "axes", na, axes);
    return emit_done(I, e, op, 1);
}

static int
h_squeeze(imp *I, const Onnx__NodeProto *n, emit *e)
{
    int64_t axes[IR_MAX_RANK];
    uint32_t na;
    int present;
    ir_id in, op;
    int rc;
    if ((rc = axes_of(I, n, 13, axes, &na, &present)) != 0 || (rc = inputs(I, e, n, 1, &in)))
        return rc;
    op = onnx_op(e, IR_OP_SQUEEZE, 1, &in, 1);
    if (present)
        ir_op_set_ints(e->m, op, "axes", na, axes);
    return emit_done(I, e, op, 1);
}

/* ReduceSum/ReduceMean; axes_input_from: the opset from which axes is an input. */
static int
reduce(imp *I, const Onnx__NodeProto *n, emit *e, int kind, int64_t axes_input_from)
{
    int64_t axes[IR_MAX_RANK], keep, noop = 0;
    uint32_t na = 0;
    int present = 0;
    ir_id in, op;
    int rc;
    if (I->opset >= axes_input_from || (axes_input_from == 0 && onnx_has_input(n, 1))) {
        if ((rc = onnx_check_attrs(I, n, "keepdims noop_with_empty_axes")) != 0 ||
            (rc = need_inputs(I, n, 1, 2)) != 0 ||
            (rc = onnx_attr_int(I, n, "noop_with_empty_axes", 0, &noop)) != 0)
            return rc;
        if (onnx_has_input(n, 1)) {
            if ((rc = onnx_const_ints(I, n, 1, "axes", axes, IR_MAX_RANK, &na)) != 0)
                return rc;
            present = na > 0;
        }
    } else {
        if ((rc = onnx_check_attrs(I, n, "axes keepdims")) != 0 ||
            (rc = need_inputs(I, n, 1, 1)) != 0 ||
            (rc = onnx_attr_ints(I, n, "axes", axes, IR_MAX_RANK, &na, &present)) != 0)
            return rc;
        present = present && na > 0;
    }
    if ((rc = onnx_attr_int(I, n, "keepdims", 1, &keep)) != 0 || (rc = inputs(I, e, n, 1, &in)))
        return rc;
    if (!present && noop) {
        op = onnx_op(e, IR_OP_IDENTITY, 1, &in, 1);
        return emit_done(I, e, op, 1);
    }
    op = onnx_op(e, kind, 1, &in, 1);
    if (present)
        ir_op_set_ints(e->m, op, "axes", na, axes);
    ir_op_set_int(e->m, op, "keepdims", keep != 0);
    return emit_done(I, e, op, 1);
}

static int
h_reducesum(imp *I, const Onnx__NodeProto *n, emit *e)
{
    return reduce(I, n, e, IR_OP_REDUCESUM, 13);
}

static int
h_reducemean(imp *I, const Onnx__NodeProto *n, emit *e)
{
    return reduce(I, n, e, IR_OP_REDUCEMEAN, 18);
}

/* com.microsoft ReduceSumTraining: axes are always an input. */
static int
h_reducesumtraining(imp *I, const Onnx__NodeProto *n, emit *e)
{
    return reduce(I, n, e, IR_OP_REDUCESUM, 0);
}

/* Expand(x, shape) = x + zeros(shape) (numpy broadcasting both ways). */
static int
h_expand(imp *I, const Onnx__NodeProto *n, emit *e)
{
    int64_t shape[IR_MAX_RANK];
    uint32_t ns, r;
    ir_dtype dt;
    int64_t dims[IR_MAX_RANK];
    ex_tensor z;
    ir_id in[2], op;
    int rc;
    if ((rc = onnx_check_attrs(I, n, "")) != 0 || (rc = need_inputs(I, n, 2, 2)) != 0 ||
        (rc = onnx_const_ints(I, n, 1, "shape", shape, IR_MAX_RANK, &ns)) != 0 ||
        (rc = onnx_input_type(I, n, 0, &dt, &r, dims)) != 0)
        return rc;
    if (dt == IR_BOOL)
        return onnx_fail(I, DI_EUNSUPPORTED, "Expand of a boolean tensor is not supported");
    for (uint32_t i = 0; i < ns; i++)
        if (shape[i] < 0)
            return onnx_fail(I, DI_EVERIFY, "shape has a negative entry");
    if (ex_shape_numel(ns, shape) < 0 || ex_shape_numel(ns, shape) > ONNX_FOLD_MAX)
        return onnx_fail(I, DI_EUNSUPPORTED, "the shape is too large to expand with a constant");
    if ((rc = ex_tensor_init(&z, dt, ns, shape)) != 0)
        return onnx_fail(I, rc, "out of memory");
    if ((in[0] = onnx_in(I, e, n, 0)) == 0 || (in[1] = onnx_const_op(I, e, &z)) == 0) {
        ex_tensor_fini(&z);
        return I->err->code;
    }
    ex_tensor_fini(&z);
    op = onnx_op(e, IR_OP_ADD, 2, in, 1);
    return emit_done(I, e, op, 1);
}

/* ---- constants and shapes, evaluated at import ---- */

static int
c_constant(imp *I, const Onnx__NodeProto *n)
{
    const Onnx__AttributeProto *a;
    ex_tensor t;
    int rc;
    if ((rc = onnx_check_attrs(I, n, "value value_float value_floats value_int value_ints")))
        return rc;
    if (n->n_attribute != 1)
        return onnx_fail(I, DI_EVERIFY, "needs exactly one value attribute");
    a = n->attribute[0];
    if (strcmp(a->name, "value") == 0) {
        if (a->t == NULL)
            return onnx_fail(I, DI_EVERIFY, "value is not a tensor");
        if ((rc = onnx_tensor_from_proto(a->t, "value", &t, I->err)) != 0) {
            char msg[sizeof I->err->msg];
            snprintf(msg, sizeof msg, "%s", I->err->msg);
            return onnx_fail(I, rc, "%s", msg);
        }
    } else if (strcmp(a->name, "value_float") == 0 || strcmp(a->name, "value_int") == 0) {
        int isf = a->name[6] == 'f';
        if ((rc = ex_tensor_init(&t, isf ? IR_F32 : IR_I64, 0, NULL)) != 0)
            return onnx_fail(I, rc, "out of memory");
        ex_set(&t, 0, isf ? (double)a->f : (double)a->i);
        if (!isf)
            ((int64_t *)t.data)[0] = a->i;
    } else {
        int isf = a->name[6] == 'f';
        int64_t len = isf ? (int64_t)a->n_floats : (int64_t)a->n_ints;
        if ((rc = ex_tensor_init(&t, isf ? IR_F32 : IR_I64, 1, &len)) != 0)
            return onnx_fail(I, rc, "out of memory");
        for (int64_t i = 0; i < len; i++) {
            if (isf)
                ((float *)t.data)[i] = a->floats[i];
            else
                ((int64_t *)t.data)[i] = a->ints[i];
        }
    }
    return onnx_bind_const(I, n, 0, &t);
}

static int
c_shape(imp *I, const Onnx__NodeProto *n)
{
    ir_dtype dt;
    uint32_t r;
    int64_t dims[IR_MAX_RANK], start, end, len;
    ex_tensor t;
    int rc;
    if ((rc = onnx_check_attrs(I, n, "start end")) != 0 || (rc = need_inputs(I, n, 1, 1)) != 0 ||
        (rc = onnx_attr_int(I, n, "start", 0, &start)) != 0 ||
        (rc = onnx_attr_int(I, n, "end", INT64_MAX, &end)) != 0 ||
        (rc = onnx_input_type(I, n, 0, &dt, &r, dims)) != 0)
        return rc;
    if (start < 0)
        start += r;
    if (end < 0)
        end += r;
    start = start < 0 ? 0 : start > (int64_t)r ? (int64_t)r : start;
    end = end < 0 ? 0 : end > (int64_t)r ? (int64_t)r : end;
    len = end > start ? end - start : 0;
    if ((rc = ex_tensor_init(&t, IR_I64, 1, &len)) != 0)
        return onnx_fail(I, rc, "out of memory");
    for (int64_t i = 0; i < len; i++)
        ((int64_t *)t.data)[i] = dims[start + i];
    return onnx_bind_const(I, n, 0, &t);
}

static int
c_size(imp *I, const Onnx__NodeProto *n)
{
    ir_dtype dt;
    uint32_t r;
    int64_t dims[IR_MAX_RANK];
    ex_tensor t;
    int rc;
    if ((rc = onnx_check_attrs(I, n, "")) != 0 || (rc = need_inputs(I, n, 1, 1)) != 0 ||
        (rc = onnx_input_type(I, n, 0, &dt, &r, dims)) != 0)
        return rc;
    if ((rc = ex_tensor_init(&t, IR_I64, 0, NULL)) != 0)
        return onnx_fail(I, rc, "out of memory");
    ((int64_t *)t.data)[0] = ex_shape_numel(r, dims);
    return onnx_bind_const(I, n, 0, &t);
}

static int
c_constantofshape(imp *I, const Onnx__NodeProto *n)
{
    const Onnx__AttributeProto *a = onnx_attr(n, "value");
    int64_t shape[IR_MAX_RANK];
    uint32_t ns;
    ex_tensor v, t;
    int rc;
    if ((rc = onnx_check_attrs(I, n, "value")) != 0 || (rc = need_inputs(I, n, 1, 1)) != 0)
        return rc;
    if (onnx_const_input(I, n, 0) == NULL)
        return ONNX_NOTCONST;
    if ((rc = onnx_const_ints(I, n, 0, "shape", shape, IR_MAX_RANK, &ns)) != 0)
        return rc;
    for (uint32_t i = 0; i < ns; i++)
        if (shape[i] < 0)
            return onnx_fail(I, DI_EVERIFY, "shape has a negative entry");
    if (ex_shape_numel(ns, shape) < 0 || ex_shape_numel(ns, shape) > ONNX_FOLD_MAX)
        return onnx_fail(I, DI_EUNSUPPORTED, "the shape is too large for a constant");
    if (a != NULL && a->t != NULL) {
        if ((rc = onnx_tensor_from_proto(a->t, "value", &v, I->err)) != 0) {
            char msg[sizeof I->err->msg];
            snprintf(msg, sizeof msg, "%s", I->err->msg);
            return onnx_fail(I, rc, "%s", msg);
        }
        if (v.numel != 1) {
            ex_tensor_fini(&v);
            return onnx_fail(I, DI_EVERIFY, "value must hold one element");
        }
    } else if ((rc = ex_tensor_init(&v, IR_F32, 0, NULL)) != 0) {
        return onnx_fail(I, rc, "out of memory");
    }
    if ((rc = ex_tensor_init(&t, v.dtype, ns, shape)) != 0) {
        ex_tensor_fini(&v);
        return onnx_fail(I, rc, "out of memory");
    }
    for (size_t i = 0; i < t.numel; i++)
        ex_set(&t, i, ex_get(&v, 0));
    if (ex_class_of(v.dtype) == EX_CI)
        for (size_t i = 0; i < t.numel; i++)
            ((int64_t *)t.data)[i] = ((int64_t *)v.data)[0];
    ex_tensor_fini(&v);
    return onnx_bind_const(I, n, 0, &t);
}

/* Broadcast shapes of two tensors; -1 if incompatible. */
static int
bshape(const ex_tensor *a, const ex_tensor *b, uint32_t *r, int64_t *dims)
{
    uint32_t rr = a->rank > b->rank ? a->rank : b->rank;
    for (uint32_t i = 0; i < rr; i++) {
        int64_t da = i < a->rank ? a->dims[a->rank - 1 - i] : 1;
        int64_t db = i < b->rank ? b->dims[b->rank - 1 - i] : 1;
        if (da != db && da != 1 && db != 1)
            return -1;
        dims[rr - 1 - i] = da == 1 ? db : da;
    }
    *r = rr;
    return 0;
}

/* The index into t of output element o of a broadcast of shape (r, dims). */
static size_t
bindex(const ex_tensor *t, uint32_t r, const int64_t *dims, size_t o)
{
    size_t idx = 0, st = 1;
    for (uint32_t i = 0; i < r; i++) {
        uint32_t d = r - 1 - i;
        int64_t c = (int64_t)(o % (size_t)dims[d]);
        o /= (size_t)dims[d];
        if (i < t->rank) {
            int64_t td = t->dims[t->rank - 1 - i];
            idx += (size_t)(td == 1 ? 0 : c) * st;
            st *= (size_t)td;
        }
    }
    return idx;
}

/* Elementwise ops on constants that the op table does not have. */
static int
c_elementwise(imp *I, const Onnx__NodeProto *n)
{
    const char *op = n->op_type;
    static const char *const unary_ops[] = {"Not", "Neg", "Abs", "Exp", "Log", "Reciprocal",
                                            "Floor", "Ceil"};
    int un = 0, cmp, logic;
    const ex_tensor *a, *b;
    int64_t dims[IR_MAX_RANK];
    uint32_t r;
    ex_tensor t;
    int rc;
    for (size_t i = 0; i < sizeof unary_ops / sizeof unary_ops[0]; i++)
        if (strcmp(op, unary_ops[i]) == 0)
            un = 1;
    if ((rc = onnx_check_attrs(I, n, "")) != 0 || (rc = need_inputs(I, n, un ? 1 : 2, un ? 1 : 2)))
        return rc;
    a = onnx_const_input(I, n, 0);
    b = un ? a : onnx_const_input(I, n, 1);
    if (a == NULL || b == NULL)
        return ONNX_NOTCONST;
    cmp = !strcmp(op, "Equal") || !strcmp(op, "Less") || !strcmp(op, "Greater") ||
          !strcmp(op, "LessOrEqual") || !strcmp(op, "GreaterOrEqual");
    logic = !strcmp(op, "And") || !strcmp(op, "Or") || !strcmp(op, "Xor") || !strcmp(op, "Not");
    if (bshape(a, b, &r, dims) != 0)
        return onnx_fail(I, DI_EVERIFY, "input shapes do not broadcast");
    if (ex_shape_numel(r, dims) > ONNX_FOLD_MAX)
        return onnx_fail(I, DI_EUNSUPPORTED, "the result is too large for a constant");
    if ((rc = ex_tensor_init(&t, cmp || logic ? IR_BOOL : a->dtype, r, dims)) != 0)
        return onnx_fail(I, rc, "out of memory");
    for (size_t o = 0; o < t.numel; o++) {
        double x = ex_get(a, bindex(a, r, dims, o)), y = ex_get(b, bindex(b, r, dims, o)), v;
        if (!strcmp(op, "Equal"))
            v = x == y;
        else if (!strcmp(op, "Less"))
            v = x < y;
        else if (!strcmp(op, "Greater"))
            v = x > y;
        else if (!strcmp(op, "LessOrEqual"))
            v = x <= y;
        else if (!strcmp(op, "GreaterOrEqual"))
            v = x >= y;
        else if (!strcmp(op, "And"))
            v = x != 0 && y != 0;
        else if (!strcmp(op, "Or"))
            v = x != 0 || y != 0;
        else if (!strcmp(op, "Xor"))
            v = (x != 0) != (y != 0);
        else if (!strcmp(op, "Not"))
            v = x == 0;
        else if (!strcmp(op, "Neg"))
            v = -x;
        else if (!strcmp(op, "Abs"))
            v = fabs(x);
        else if (!strcmp(op, "Exp"))
            v = exp(x);
        else if (!strcmp(op, "Log"))
            v = log(x);
        else if (!strcmp(op, "Reciprocal"))
            v = 1.0 / x;
        else if (!strcmp(op, "Floor"))
            v = floor(x);
        else if (!strcmp(op, "Ceil"))
            v = ceil(x);
        else if (!strcmp(op, "Max"))
            v = x > y ? x : y;
        else
            v = x < y ? x : y;
        ex_set(&t, o, v);
    }
    return onnx_bind_const(I, n, 0, &t);
}

static int
c_range(imp *I, const Onnx__NodeProto *n)
{
    const ex_tensor *s, *l, *d;
    double start, limit, delta, cnt;
    int64_t len;
    ex_tensor t;
    int rc;
    if ((rc = onnx_check_attrs(I, n, "")) != 0 || (rc = need_inputs(I, n, 3, 3)) != 0)
        return rc;
    s = onnx_const_input(I, n, 0);
    l = onnx_const_input(I, n, 1);
    d = onnx_const_input(I, n, 2);
    if (s == NULL || l == NULL || d == NULL)
        return ONNX_NOTCONST;
    if (s->numel != 1 || l->numel != 1 || d->numel != 1)
        return onnx_fail(I, DI_EVERIFY, "start, limit and delta must be scalars");
    start = ex_get(s, 0);
    limit = ex_get(l, 0);
    delta = ex_get(d, 0);
    if (delta == 0)
        return onnx_fail(I, DI_EVERIFY, "delta is 0");
    cnt = ceil((limit - start) / delta);
    if (!(cnt <= (double)ONNX_FOLD_MAX))
        return onnx_fail(I, DI_EUNSUPPORTED, "the range is too large for a constant");
    len = cnt > 0 ? (int64_t)cnt : 0;
    if ((rc = ex_tensor_init(&t, s->dtype, 1, &len)) != 0)
        return onnx_fail(I, rc, "out of memory");
    for (int64_t i = 0; i < len; i++)
        ex_set(&t, (size_t)i, start + (double)i * delta);
    return onnx_bind_const(I, n, 0, &t);
}

static int
c_trilu(imp *I, const Onnx__NodeProto *n)
{
    const ex_tensor *x, *kt;
    int64_t upper, k = 0, rows, cols;
    ex_tensor t;
    int rc;
    if ((rc = onnx_check_attrs(I, n, "upper")) != 0 || (rc = need_inputs(I, n, 1, 2)) != 0 ||
        (rc = onnx_attr_int(I, n, "upper", 1, &upper)) != 0)
        return rc;
    x = onnx_const_input(I, n, 0);
    kt = onnx_const_input(I, n, 1);
    if (x == NULL || (onnx_has_input(n, 1) && kt == NULL))
        return ONNX_NOTCONST;
    if (kt != NULL) {
        if (kt->numel != 1)
            return onnx_fail(I, DI_EVERIFY, "k must be a scalar");
        k = (int64_t)ex_get(kt, 0);
    }
    if (x->rank < 2)
        return onnx_fail(I, DI_EVERIFY, "input must have rank >= 2");
    if ((rc = ex_tensor_copy(&t, x)) != 0)
        return onnx_fail(I, rc, "out of memory");
    rows = x->dims[x->rank - 2];
    cols = x->dims[x->rank - 1];
    for (size_t o = 0; o < t.numel; o++) {
        int64_t j = (int64_t)(o % (size_t)cols), i = (int64_t)((o / (size_t)cols) % (size_t)rows);
        int keep = upper ? j - i >= k : j - i <= k;
        if (!keep)
            ex_set(&t, o, 0.0);
    }
    return onnx_bind_const(I, n, 0, &t);
}

static int
c_expand(imp *I, const Onnx__NodeProto *n)
{
    const ex_tensor *x = onnx_const_input(I, n, 0), *s = onnx_const_input(I, n, 1);
    int64_t dims[IR_MAX_RANK];
    uint32_t r;
    ex_tensor shape, t;
    int rc;
    if (x == NULL || s == NULL)
        return ONNX_NOTCONST;
    if ((rc = onnx_check_attrs(I, n, "")) != 0)
        return rc;
    if (ex_class_of(s->dtype) != EX_CI || s->rank != 1 || s->numel > IR_MAX_RANK)
        return onnx_fail(I, DI_EVERIFY, "shape must be a 1-d integer tensor");
    memset(&shape, 0, sizeof shape);
    shape.rank = (uint32_t)s->numel;
    for (uint32_t i = 0; i < shape.rank; i++)
        shape.dims[i] = ((const int64_t *)s->data)[i];
    if (bshape(x, &shape, &r, dims) != 0)
        return onnx_fail(I, DI_EVERIFY, "the shape does not broadcast with the input");
    if (ex_shape_numel(r, dims) < 0 || ex_shape_numel(r, dims) > ONNX_FOLD_MAX)
        return onnx_fail(I, DI_EUNSUPPORTED, "the result is too large for a constant");
    if ((rc = ex_tensor_init(&t, x->dtype, r, dims)) != 0)
        return onnx_fail(I, rc, "out of memory");
    for (size_t o = 0; o < t.numel; o++)
        ex_set(&t, o, ex_get(x, bindex(x, r, dims, o)));
    if (ex_class_of(x->dtype) == EX_CI)
        for (size_t o = 0; o < t.numel; o++)
            ((int64_t *)t.data)[o] = ((const int64_t *)x->data)[bindex(x, r, dims, o)];
    return onnx_bind_const(I, n, 0, &t);
}

/* ---- ONNX Runtime training ops (com.microsoft) ---- */

/* (dY, X) -> our grad(X, dY). */
static int
ms_act_grad(imp *I, const Onnx__NodeProto *n, emit *e, int kind)
{
    ir_id in[2], sw[2], op;
    int rc;
    if ((rc = onnx_check_attrs(I, n, "")) != 0 || (rc = need_inputs(I, n, 2, 2)) != 0 ||
        (rc = inputs(I, e, n, 2, in)) != 0)
        return rc;
    sw[0] = in[1];
    sw[1] = in[0];
    op = onnx_op(e, kind, 2, sw, 1);
    return emit_done(I, e, op, 1);
}

static int
h_ms_relugrad(imp *I, const Onnx__NodeProto *n, emit *e)
{
    return ms_act_grad(I, n, e, IR_OP_RELUGRAD);
}

static int
h_ms_gelugrad(imp *I, const Onnx__NodeProto *n, emit *e)
{
    return ms_act_grad(I, n, e, IR_OP_GELUGRAD);
}

/* SoftmaxGrad(dY, Y){axis} -> SoftmaxGrad(Y, dY) when axis is the last one. */
static int
h_ms_softmaxgrad(imp *I, const Onnx__NodeProto *n, emit *e)
{
    ir_dtype dt;
    uint32_t r;
    int64_t dims[IR_MAX_RANK], axis;
    ir_id in[2], sw[2], op;
    int rc;
    if ((rc = onnx_check_attrs(I, n, "axis")) != 0 || (rc = need_inputs(I, n, 2, 2)) != 0 ||
        (rc = onnx_input_type(I, n, 1, &dt, &r, dims)) != 0 ||
        (rc = onnx_attr_int(I, n, "axis", strcmp(n->op_type, "SoftmaxGrad_13") == 0 ? -1 : 1,
                            &axis)) != 0)
        return rc;
    if (axis < 0)
        axis += r;
    if (r == 0 || axis != (int64_t)r - 1)
        return onnx_fail(I, DI_EUNSUPPORTED, "only the last axis is supported");
    if ((rc = inputs(I, e, n, 2, in)) != 0)
        return rc;
    sw[0] = in[1];
    sw[1] = in[0];
    op = onnx_op(e, IR_OP_SOFTMAXGRAD, 2, sw, 1);
    ir_op_set_int(e->m, op, "axis", -1);
    return emit_done(I, e, op, 1);
}

static int
h_ms_layernormgrad(imp *I, const Onnx__NodeProto *n, emit *e)
{
    int64_t axis;
    double eps;
    uint32_t nout = named_outputs(n);
    ir_id in[5], op;
    int rc;
    if ((rc = onnx_check_attrs(I, n, "axis epsilon")) != 0 || (rc = need_inputs(I, n, 5, 5)) ||
        (rc = onnx_attr_int(I, n, "axis", -1, &axis)) != 0 ||
        (rc = onnx_attr_float(I, n, "epsilon", 1e-5, &eps)) != 0)
        return rc;
    if (nout < 1 || nout > 3)
        return onnx_fail(I, DI_EUNSUPPORTED, "has %u outputs", nout);
    if ((rc = inputs(I, e, n, 5, in)) != 0)
        return rc;
    op = onnx_op(e, IR_OP_LAYERNORMGRAD, 5, in, nout);
    ir_op_set_int(e->m, op, "axis", axis);
    ir_op_set_float(e->m, op, "epsilon", eps);
    return emit_done(I, e, op, nout);
}

/*
 * ONNX Runtime's RMS normalization: SimplifiedLayerNormalization(X, scale) ->
 * (Y, [inv_std_var]) (a contrib op in the default domain, also seen under
 * com.microsoft) and its training gradient SimplifiedLayerNormalizationGrad
 * (dY, X, scale, inv_std_var) -> (dX, [dscale]) are RMSNormalization and
 * RMSNormalizationGrad.
 */
static int
ort_rmsnorm(imp *I, const Onnx__NodeProto *n, emit *e, int grad)
{
    int64_t axis;
    double eps;
    uint32_t nin = grad ? 4 : 2, nout = named_outputs(n);
    ir_id in[4], op;
    int rc;
    if ((rc = onnx_check_attrs(I, n, grad ? "axis epsilon" : "axis epsilon stash_type")) != 0 ||
        (rc = need_inputs(I, n, nin, nin)) != 0 || (rc = onnx_attr_int(I, n, "axis", -1, &axis)) ||
        (rc = onnx_attr_float(I, n, "epsilon", 1e-5, &eps)) != 0)
        return rc;
    if (nout < 1 || nout > 2)
        return onnx_fail(I, DI_EUNSUPPORTED, "has %u outputs", nout);
    if ((rc = inputs(I, e, n, nin, in)) != 0)
        return rc;
    op = onnx_op(e, grad ? IR_OP_RMSNORMGRAD : IR_OP_RMSNORM, nin, in, nout);
    ir_op_set_int(e->m, op, "axis", axis);
    ir_op_set_float(e->m, op, "epsilon", eps);
    if (!grad && (rc = set_stash_type(I, n, e, op)) != 0)
        return rc;
    return emit_done(I, e, op, nout);
}

/*
 * Attention (opset 23) as one FlashAttention: Q, K, V as [B, heads, S, D]
 * (kv heads a divisor of q's: grouped-query attention), or [B, S, heads x D]
 * with q_num_heads and kv_num_heads (reshaped and transposed to that and the
 * result back), is_causal, scale (default 1/sqrt(D)). What FlashAttention
 * does not have is refused by name: a mask, past keys and values, softcap,
 * the extra outputs.
 */
static int
h_attention(imp *I, const Onnx__NodeProto *n, emit *e)
{
    static const int64_t heads_first[4] = {0, 2, 1, 3};
    int64_t causal, qh, kvh, mode, dims[3][IR_MAX_RANK];
    double scale, softcap;
    uint32_t rank[3];
    ir_dtype dt;
    ir_id in[3], op, y;
    int rc;
    if ((rc = onnx_check_attrs(I, n, "is_causal kv_num_heads q_num_heads qk_matmul_output_mode "
                                     "scale softcap softmax_precision")) != 0 ||
        (rc = need_inputs(I, n, 3, 6)) != 0 ||
        (rc = onnx_attr_int(I, n, "is_causal", 0, &causal)) != 0 ||
        (rc = onnx_attr_int(I, n, "q_num_heads", 0, &qh)) != 0 ||
        (rc = onnx_attr_int(I, n, "kv_num_heads", 0, &kvh)) != 0 ||
        (rc = onnx_attr_int(I, n, "qk_matmul_output_mode", 0, &mode)) != 0 ||
        (rc = onnx_attr_float(I, n, "scale", 0.0, &scale)) != 0 ||
        (rc = onnx_attr_float(I, n, "softcap", 0.0, &softcap)) != 0)
        return rc;
    for (uint32_t i = 3; i < n->n_input; i++)
        if (onnx_has_input(n, i))
            return onnx_fail(I, DI_EUNSUPPORTED, "input %u (%s) is not supported: FlashAttention "
                             "takes no mask and no past keys or values",
                             i, i == 3 ? "attn_mask" : i == 4 ? "past_key" : "past_value");
    if (named_outputs(n) != 1)
        return onnx_fail(I, DI_EUNSUPPORTED, "has %u outputs; only Y is supported",
                         named_outputs(n));
    if (softcap != 0.0)
        return onnx_fail(I, DI_EUNSUPPORTED, "softcap %g is not supported", softcap);
    (void)mode; /* which scores the absent fourth output would hold */
    for (uint32_t i = 0; i < 3; i++)
        if ((rc = onnx_input_type(I, n, i, &dt, &rank[i], dims[i])) != 0)
            return rc;
    if ((rc = inputs(I, e, n, 3, in)) != 0)
        return rc;
    if (rank[0] == 3) {
        /* [B, S, H x D] -> [B, H, S, D]. */
        if (qh <= 0 || kvh <= 0 || rank[1] != 3 || rank[2] != 3 || dims[0][2] % qh != 0 ||
            dims[1][2] % kvh != 0 || dims[2][2] % kvh != 0)
            return onnx_fail(I, DI_EVERIFY, "3-d inputs need q_num_heads and kv_num_heads "
                             "dividing their last dimensions");
        for (uint32_t i = 0; i < 3; i++) {
            int64_t h = i == 0 ? qh : kvh;
            int64_t split[4] = {dims[i][0], dims[i][1], h, dims[i][2] / h};
            if ((in[i] = view_op(I, e, IR_OP_RESHAPE, in[i], "shape", 4, split)) == 0 ||
                (in[i] = view_op(I, e, IR_OP_TRANSPOSE, in[i], "perm", 4, heads_first)) == 0)
                return I->err->code ? I->err->code : DI_EVERIFY;
        }
    } else if (rank[0] != 4) {
        return onnx_fail(I, DI_EVERIFY, "Q has rank %u; Attention takes 3 or 4", rank[0]);
    }
    op = onnx_op(e, IR_OP_FLASHATTN, 3, in, 2);
    if (causal)
        ir_op_set_int(e->m, op, "causal", 1);
    if (scale != 0.0)
        ir_op_set_float(e->m, op, "scale", scale);
    if (rank[0] == 4)
        return emit_done(I, e, op, 1);
    /* [B, H, S, Dv] -> [B, S, H x Dv]. */
    if ((rc = onnx_infer(I, e, op)) != 0)
        return rc;
    {
        int64_t merged[3] = {dims[0][0], dims[0][1], -1};
        y = view_op(I, e, IR_OP_TRANSPOSE, ir_op_output(e->m, op, 0), "perm", 4, heads_first);
        op = y ? onnx_op(e, IR_OP_RESHAPE, 1, &y, 1) : 0;
        if (op == 0)
            return I->err->code ? I->err->code : DI_EVERIFY;
        ir_op_set_ints(e->m, op, "shape", 3, merged);
        return emit_done(I, e, op, 1);
    }
}

/* RMSNormalization (opset 23): (X, scale) -> Y, as ORT's forward without its second result. */
static int
h_rmsnorm(imp *I, const Onnx__NodeProto *n, emit *e)
{
    if (n->n_output != 1)
        return onnx_fail(I, DI_EVERIFY, "has %zu outputs; RMSNormalization has one", n->n_output);
    return ort_rmsnorm(I, n, e, 0);
}

static int
h_ort_rmsnorm(imp *I, const Onnx__NodeProto *n, emit *e)
{
    return ort_rmsnorm(I, n, e, 0);
}

static int
h_ort_rmsnormgrad(imp *I, const Onnx__NodeProto *n, emit *e)
{
    return ort_rmsnorm(I, n, e, 1);
}

static int
h_ms_dropoutgrad(imp *I, const Onnx__NodeProto *n, emit *e)
{
    const ex_tensor *r = onnx_const_input(I, n, 2);
    ir_id in[2], op;
    int rc;
    if ((rc = onnx_check_attrs(I, n, "")) != 0 || (rc = need_inputs(I, n, 2, 4)) != 0)
        return rc;
    if (onnx_has_input(n, 2) && (r == NULL || r->numel != 1))
        return onnx_fail(I, DI_EUNSUPPORTED, "ratio must be a constant scalar");
    if ((rc = inputs(I, e, n, 2, in)) != 0)
        return rc;
    op = onnx_op(e, IR_OP_DROPOUTGRAD, 2, in, 1);
    ir_op_set_float(e->m, op, "ratio", r ? ex_get(r, 0) : 0.5);
    return emit_done(I, e, op, 1);
}

/* SGDOptimizer(ETA, W, G) -> (W - ETA * G, [G]). */
static int
h_ms_sgd(imp *I, const Onnx__NodeProto *n, emit *e)
{
    const ex_tensor *lr = onnx_const_input(I, n, 0);
    ir_id in[3], op;
    int rc;
    if ((rc = onnx_check_attrs(I, n, "")) != 0 || (rc = need_inputs(I, n, 3, 3)) != 0)
        return rc;
    if (lr != NULL && lr->numel == 1) {
        if ((in[1] = onnx_in(I, e, n, 1)) == 0 || (in[2] = onnx_in(I, e, n, 2)) == 0)
            return I->err->code;
        op = onnx_op(e, IR_OP_SGD, 2, in + 1, 1);
        ir_op_set_float(e->m, op, "lr", ex_get(lr, 0));
    } else {
        ir_id p[2];
        /* A learning rate fed at run time: the same update from Mul and Sub. */
        if ((rc = inputs(I, e, n, 3, in)) != 0)
            return rc;
        p[0] = in[0];
        p[1] = in[2];
        op = onnx_op(e, IR_OP_MUL, 2, p, 1);
        if ((rc = onnx_infer(I, e, op)) != 0)
            return rc;
        p[0] = in[1];
        p[1] = ir_op_output(e->m, op, 0);
        op = onnx_op(e, IR_OP_SUB, 2, p, 1);
    }
    if ((rc = emit_done(I, e, op, 1)) != 0)
        return rc;
    if (e->nout > 1)
        e->out[1] = onnx_in(I, e, n, 2);
    return 0;
}

/* BroadcastGradientArgs(a_shape, b_shape) -> the axes each side was broadcast along. */
static int
c_ms_bcastargs(imp *I, const Onnx__NodeProto *n)
{
    const ex_tensor *a = onnx_const_input(I, n, 0), *b = onnx_const_input(I, n, 1);
    int64_t ax[2][IR_MAX_RANK], cnt[2] = {0, 0};
    uint32_t r;
    int rc;
    if ((rc = onnx_check_attrs(I, n, "")) != 0 || (rc = need_inputs(I, n, 2, 2)) != 0)
        return rc;
    if (a == NULL || b == NULL)
        return ONNX_NOTCONST;
    if (ex_class_of(a->dtype) != EX_CI || ex_class_of(b->dtype) != EX_CI || a->rank != 1 ||
        b->rank != 1 || a->numel > IR_MAX_RANK || b->numel > IR_MAX_RANK)
        return onnx_fail(I, DI_EVERIFY, "inputs must be 1-d integer shapes");
    r = (uint32_t)(a->numel > b->numel ? a->numel : b->numel);
    for (uint32_t i = 0; i < r; i++) {
        uint32_t d = r - 1 - i;
        int64_t da = i < a->numel ? ((const int64_t *)a->data)[a->numel - 1 - i] : -1;
        int64_t db = i < b->numel ? ((const int64_t *)b->data)[b->numel - 1 - i] : -1;
        if (da == -1 || (da == 1 && db != 1))
            ax[0][cnt[0]++] = d;
        if (db == -1 || (db == 1 && da != 1))
            ax[1][cnt[1]++] = d;
    }
    for (uint32_t k = 0; k < 2; k++) {
        ex_tensor t;
        if ((rc = ex_tensor_init(&t, IR_I64, 1, &cnt[k])) != 0)
            return onnx_fail(I, rc, "out of memory");
        /* Ascending order. */
        for (int64_t j = 0; j < cnt[k]; j++)
            ((int64_t *)t.data)[j] = ax[k][cnt[k] - 1 - j];
        if ((rc = onnx_bind_const(I, n, k, &t)) != 0)
            return rc;
    }
    return 0;
}

/* ---- the table ---- */

static const onnx_handler handlers[] = {
    {"", "MatMul", NULL, h_matmul},
    {"", "Gemm", NULL, h_gemm},
    {"", "Add", NULL, h_add},
    {"", "Sub", NULL, h_sub},
    {"", "Mul", NULL, h_mul},
    {"", "Div", NULL, h_div},
    {"", "Pow", NULL, h_pow},
    {"", "Sqrt", NULL, h_sqrt},
    {"", "Relu", NULL, h_relu},
    {"", "Gelu", NULL, h_onnx_gelu},
    {"", "Swish", NULL, h_swish},
    {"", "Tanh", NULL, h_tanh},
    {"", "Sigmoid", NULL, h_sigmoid},
    {"", "Erf", NULL, h_erf},
    {"", "Identity", NULL, h_identity},
    {"", "Cast", NULL, h_cast},
    {"", "CastLike", NULL, h_castlike},
    {"", "Dropout", NULL, h_dropout},
    {"", "Softmax", NULL, h_softmax},
    {"", "LayerNormalization", NULL, h_layernorm},
    /* ONNX Runtime's, registered in the default domain (and com.microsoft below). */
    {"", "SimplifiedLayerNormalization", NULL, h_ort_rmsnorm},
    {"", "RMSNormalization", NULL, h_rmsnorm},
    {"", "Attention", NULL, h_attention},
    {"", "Where", NULL, h_where},
    {"", "Reshape", NULL, h_reshape},
    {"", "Transpose", NULL, h_transpose},
    {"", "Concat", NULL, h_concat},
    {"", "Split", NULL, h_split},
    {"", "Slice", NULL, h_slice},
    {"", "Gather", NULL, h_gather},
    {"", "Unsqueeze", NULL, h_unsqueeze},
    {"", "Squeeze", NULL, h_squeeze},
    {"", "ReduceMean", NULL, h_reducemean},
    {"", "ReduceSum", NULL, h_reducesum},
    {"", "SoftmaxCrossEntropyLoss", NULL, h_sceloss},
    {"", "Constant", c_constant, NULL},
    {"", "Shape", c_shape, NULL},
    {"", "Size", c_size, NULL},
    {"", "ConstantOfShape", c_constantofshape, NULL},
    {"", "Expand", c_expand, h_expand},
    {"", "Range", c_range, NULL},
    {"", "Trilu", c_trilu, NULL},
    {"", "Equal", c_elementwise, NULL},
    {"", "Less", c_elementwise, NULL},
    {"", "Greater", c_elementwise, NULL},
    {"", "LessOrEqual", c_elementwise, NULL},
    {"", "GreaterOrEqual", c_elementwise, NULL},
    {"", "And", c_elementwise, NULL},
    {"", "Or", c_elementwise, NULL},
    {"", "Xor", c_elementwise, NULL},
    {"", "Not", c_elementwise, NULL},
    {"", "Neg", c_elementwise, NULL},
    {"", "Abs", c_elementwise, NULL},
    {"", "Exp", c_elementwise, NULL},
    {"", "Log", c_elementwise, NULL},
    {"", "Reciprocal", c_elementwise, NULL},
    {"", "Floor", c_elementwise, NULL},
    {"", "Ceil", c_elementwise, NULL},
    {"com.microsoft", "Gelu", NULL, h_gelu},
    {"com.microsoft", "ReluGrad", NULL, h_ms_relugrad},
    {"com.microsoft", "GeluGrad", NULL, h_ms_gelugrad},
    {"com.microsoft", "SimplifiedLayerNormalization", NULL, h_ort_rmsnorm},
    {"com.microsoft", "SimplifiedLayerNormalizationGrad", NULL, h_ort_rmsnormgrad},
    {"com.microsoft", "SoftmaxGrad", NULL, h_ms_softmaxgrad},
    {"com.microsoft", "SoftmaxGrad_13", NULL, h_ms_softmaxgrad},
    {"com.microsoft", "LayerNormalizationGrad", NULL, h_ms_layernormgrad},
    {"com.microsoft", "DropoutGrad", NULL, h_ms_dropoutgrad},
    {"com.microsoft", "SGDOptimizer", NULL, h_ms_sgd},
    {"com.microsoft", "ReduceSumTraining", NULL, h_reducesumtraining},
    {"com.microsoft", "BroadcastGradientArgs", c_ms_bcastargs, NULL},
};

const onnx_handler *
onnx_find_handler(const char *domain, const char *op_type)
{
    for (size_t i = 0; i < sizeof handlers / sizeof handlers[0]; i++)
        if (strcmp(handlers[i].domain, domain) == 0 && strcmp(handlers[i].op_type, op_type) == 0)
            return &handlers[i];
    return NULL;
}
