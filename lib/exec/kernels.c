/*
 * kernels.c: the numeric kernels of the reference executors, one per
 * compute op of the op table (lib/ir/ops.h; semantics follow ONNX where the
 * op is an ONNX op, and docs/ops.md for the gradient and optimizer ops).
 *
 * Every kernel computes the shapes of its results from its inputs and
 * attributes, allocates them, and checks what it reads, so a module whose
 * types lie cannot make a kernel read or write out of bounds. Hot paths
 * (elementwise arithmetic, MatMul and Gemm) have typed loops for float;
 * everything else computes in double through load/store helpers, which is
 * more precise than the float the result is rounded to.
 *
 * Conventions taken here (docs/onnx.md repeats them):
 *   Gelu is the exact erf form, 0.5 x (1 + erf(x / sqrt 2)), PyTorch's
 *   default; GeluGrad is its derivative.
 *   Swish is x sigmoid(alpha x) (alpha 1 by default: SiLU); SwishGrad its
 *   derivative.
 *   ReluGrad, GeluGrad, SwishGrad, TanhGrad and SigmoidGrad take (x, dy) where x is the
 *   forward op's input; SoftmaxGrad takes (y, dy) where y is the softmax
 *   output; DropoutGrad takes (dy, mask); MSELossGrad (a, b, dloss);
 *   SoftmaxCrossEntropyLossGrad (dloss, logits or log-probabilities,
 *   labels); LayerNormalizationGrad (dy, x, scale, [mean, inv_std_dev]).
 *   Dropout keeps element i when a hash of (seed, i) mapped to [0, 1) is at
 *   least ratio and scales kept elements by 1 / (1 - ratio); ratio 0 is the
 *   identity with an all-true mask.
 *   Integer division truncates toward zero; division by zero gives 0.
 */
#include "exec/exec_int.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- context and errors ---- */

typedef struct kctx {
    const ir_module *m;
    ir_id op;
    di_error *err;
    ex_shard shard; /* this device's block of a tensor split over a mesh group */
} kctx;

static int kfail(const kctx *k, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Sets err to "<op label>: message" (ir_op_label) and returns code. */
static int
kfail(const kctx *k, int code, const char *fmt, ...)
{
    char msg[800];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return di_error_set(k->err, code, "%s: %s", ir_op_label(k->m, k->op).s, msg);
}

typedef struct sbuf {
    char s[IR_MAX_RANK * 22 + 4];
} sbuf;

static const char *
shp(sbuf *b, const ex_tensor *t)
{
    return ex_shape_str(b->s, sizeof b->s, t->rank, t->dims);
}

static int
kalloc(const kctx *k, ex_tensor *t, ir_dtype dt, uint32_t rank, const int64_t *dims)
{
    sbuf b;
    int rc;
    if (rank > IR_MAX_RANK)
        return kfail(k, DI_EINVAL, "result rank %u exceeds %d", rank, IR_MAX_RANK);
    rc = ex_tensor_init(t, dt, rank, dims);
    if (rc != 0)
        return kfail(k, rc, "cannot allocate a %s result of shape %s", ir_dtype_name(dt),
                     ex_shape_str(b.s, sizeof b.s, rank, dims));
    return 0;
}

static int
need_float(const kctx *k, const ex_tensor *t, uint32_t i)
{
    ex_class c = ex_class_of(t->dtype);
    if (c == EX_CF || c == EX_CD)
        return 0;
    return kfail(k, DI_EINVAL, "input %u has dtype %s, expected a floating-point dtype", i,
                 ir_dtype_name(t->dtype));
}

static int
same_shape(const ex_tensor *a, const ex_tensor *b)
{
    return a->rank == b->rank && memcmp(a->dims, b->dims, a->rank * sizeof a->dims[0]) == 0;
}

static int
need_same_shape(const kctx *k, const ex_tensor *a, uint32_t ia, const ex_tensor *b, uint32_t ib)
{
    sbuf x, y;
    if (same_shape(a, b) && a->numel == b->numel)
        return 0;
    return kfail(k, DI_EINVAL, "input %u has shape %s, expected %s (the shape of input %u)", ib,
                 shp(&x, b), shp(&y, a), ia);
}

/* Normalizes an axis against rank. */
static int
axis_norm(const kctx *k, const char *what, int64_t axis, uint32_t rank, uint32_t *out)
{
    *out = 0;
    if (axis < -(int64_t)rank || axis >= (int64_t)rank)
        return kfail(k, DI_EINVAL, "%s %lld is out of range for rank %u", what, (long long)axis,
                     rank);
    *out = (uint32_t)(axis < 0 ? axis + (int64_t)rank : axis);
    return 0;
}

/* ---- double load/store ---- */

/* A freshly allocated copy of t's elements as doubles; NULL on out-of-memory. */
static double *
dload(const ex_tensor *t)
{
    double *v = di_malloc((t->numel ? t->numel : 1) * sizeof *v);
    if (v == NULL)
        return NULL;
    switch (ex_class_of(t->dtype)) {
    case EX_CF:
        for (size_t i = 0; i < t->numel; i++)
            v[i] = ((const float *)t->data)[i];
        break;
    case EX_CD:
        if (t->numel)
            memcpy(v, t->data, t->numel * sizeof *v);
        break;
    default:
        for (size_t i = 0; i < t->numel; i++)
            v[i] = ex_get(t, i);
    }
    return v;
}

/* Stores v into t (rounded to t's dtype). */
static void
dstore(ex_tensor *t, const double *v)
{
    switch (ex_class_of(t->dtype)) {
    case EX_CF:
        for (size_t i = 0; i < t->numel; i++)
            ((float *)t->data)[i] = (float)v[i];
        ex_fixup(t);
        break;
    case EX_CD:
        if (t->numel)
            memcpy(t->data, v, t->numel * sizeof *v);
        break;
    default:
        for (size_t i = 0; i < t->numel; i++)
            ex_set(t, i, v[i]);
    }
}

/* Loads n tensors; on failure frees what was loaded. */
static int
dload_all(const kctx *k, const ex_tensor *const *in, uint32_t n, double **out)
{
    for (uint32_t i = 0; i < n; i++) {
        out[i] = dload(in[i]);
        if (out[i] == NULL) {
            for (uint32_t j = 0; j < i; j++)
                di_free(out[j]);
            return kfail(k, DI_ENOMEM, "out of memory");
        }
    }
    return 0;
}

static void
dfree_all(double **v, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        di_free(v[i]);
}

/* ---- broadcasting ---- */

static int
broadcast2(uint32_t ra, const int64_t *a, uint32_t rb, const int64_t *b, uint32_t *rout,
           int64_t *out)
{
    uint32_t r = ra > rb ? ra : rb;
    for (uint32_t i = 0; i < r; i++) {
        int64_t da = i < ra ? a[ra - 1 - i] : 1;
        int64_t db = i < rb ? b[rb - 1 - i] : 1;
        int64_t d;
        if (da == db || db == 1)
            d = da;
        else if (da == 1)
            d = db;
        else
            return -1;
        out[r - 1 - i] = d;
    }
    *rout = r;
    return 0;
}

/* Strides of t aligned to the right of an output of rank r and dims od; 0 where t broadcasts. */
static void
bc_strides(const ex_tensor *t, uint32_t r, const int64_t *od, int64_t *st)
{
    int64_t s = 1;
    for (uint32_t i = 0; i < r; i++) {
        uint32_t d = r - 1 - i;
        if (i < t->rank) {
            int64_t td = t->dims[t->rank - 1 - i];
            st[d] = (td == 1 && od[d] != 1) ? 0 : s;
            s *= td;
        } else {
            st[d] = 0;
        }
    }
}

/*
 * Iterates over the rows (all dims but the last) of an output of rank r;
 * for row `row` computes the base offset of each of n inputs.
 */
static void
bc_row_base(uint32_t r, const int64_t *od, int64_t row, uint32_t n, int64_t (*st)[IR_MAX_RANK],
            int64_t *base)
{
    for (uint32_t k = 0; k < n; k++)
        base[k] = 0;
    for (uint32_t d = r > 0 ? r - 1 : 0; d > 0; d--) {
        int64_t c = row % od[d - 1];
        row /= od[d - 1];
        for (uint32_t k = 0; k < n; k++)
            base[k] += c * st[k][d - 1];
    }
}

/* ---- elementwise binary ---- */

static int64_t
ipow(int64_t b, int64_t e)
{
    uint64_t r = 1, x = (uint64_t)b;
    if (e < 0)
        return b == 1 ? 1 : b == -1 ? ((e & 1) ? -1 : 1) : 0;
    while (e) {
        if (e & 1)
            r *= x;
        x *= x;
        e >>= 1;
    }
    return (int64_t)r;
}

#define BIN_ROWS(T, EXPR)                                                                          \
    do {                                                                                           \
        const T *pa = a->data, *pb = b->data;                                                      \
        T *po = out->data;                                                                         \
        for (int64_t row = 0; row < rows; row++) {                                                 \
            int64_t base[2];                                                                       \
            bc_row_base(r, dims, row, 2, st, base);                                                \
            const T *xa = pa + base[0], *xb = pb + base[1];                                        \
            T *xo = po + row * inner;                                                              \
            for (int64_t j = 0; j < inner; j++) {                                                  \
                T x = xa[j * sa], y = xb[j * sb];                                                  \
                xo[j] = (EXPR);                                                                    \
            }                                                                                      \
        }                                                                                          \
    } while (0)

static int
k_binary(const kctx *k, const ex_tensor *a, const ex_tensor *b, ex_tensor *out)
{
    int kind = k->m->ops[k->op].kind;
    int64_t dims[IR_MAX_RANK], st[2][IR_MAX_RANK], rows, inner, sa, sb;
    uint32_t r;
    sbuf sx, sy;
    int rc;
    if (a->dtype != b->dtype)
        return kfail(k, DI_EINVAL, "input 1 has dtype %s, input 0 has %s", ir_dtype_name(b->dtype),
                     ir_dtype_name(a->dtype));
    if (broadcast2(a->rank, a->dims, b->rank, b->dims, &r, dims) != 0)
        return kfail(k, DI_EINVAL, "shapes %s and %s do not broadcast", shp(&sx, a), shp(&sy, b));
    if ((rc = kalloc(k, out, a->dtype, r, dims)) != 0)
        return rc;
    if (out->numel == 0)
        return 0;
    bc_strides(a, r, dims, st[0]);
    bc_strides(b, r, dims, st[1]);
    inner = r ? dims[r - 1] : 1;
    rows = (int64_t)out->numel / inner;
    sa = r ? st[0][r - 1] : 0;
    sb = r ? st[1][r - 1] : 0;
    switch (ex_class_of(a->dtype)) {
    case EX_CF:
        switch (kind) {
        case IR_OP_ADD:
            BIN_ROWS(float, x + y);
            break;
        case IR_OP_SUB:
            BIN_ROWS(float, x - y);
            break;
        case IR_OP_MUL:
            BIN_ROWS(float, x *y);
            break;
        case IR_OP_DIV:
            BIN_ROWS(float, x / y);
            break;
        default:
            BIN_ROWS(float, (float)pow((double)x, (double)y));
            break;
        }
        break;
    case EX_CD:
        switch (kind) {
        case IR_OP_ADD:
            BIN_ROWS(double, x + y);
            break;
        case IR_OP_SUB:
            BIN_ROWS(double, x - y);
            break;
        case IR_OP_MUL:
            BIN_ROWS(double, x *y);
            break;
        case IR_OP_DIV:
            BIN_ROWS(double, x / y);
            break;
        default:
            BIN_ROWS(double, pow(x, y));
            break;
        }
        break;
    case EX_CI:
        /* Wrapping arithmetic through uint64_t: no signed overflow. */
        switch (kind) {
        case IR_OP_ADD:
            BIN_ROWS(int64_t, (int64_t)((uint64_t)x + (uint64_t)y));
            break;
        case IR_OP_SUB:
            BIN_ROWS(int64_t, (int64_t)((uint64_t)x - (uint64_t)y));
            break;
        case IR_OP_MUL:
            BIN_ROWS(int64_t, (int64_t)((uint64_t)x * (uint64_t)y));
            break;
        case IR_OP_DIV:
            BIN_ROWS(int64_t, y == 0 ? 0 : (y == -1 ? (int64_t)(0 - (uint64_t)x) : x / y));
            break;
        default:
            BIN_ROWS(int64_t, ipow(x, y));
            break;
        }
        break;
    default:
        ex_tensor_fini(out);
        return kfail(k, DI_EINVAL, "arithmetic on booleans is not supported");
    }
    ex_fixup(out);
    return 0;
}

/* ---- elementwise unary ---- */

static double
gelu(double x)
{
    return 0.5 * x * (1.0 + erf(x * 0.70710678118654752440));
}

static double
gelu_grad(double x)
{
    double cdf = 0.5 * (1.0 + erf(x * 0.70710678118654752440));
    double pdf = 0.39894228040143267794 * exp(-0.5 * x * x);
    return cdf + x * pdf;
}

/* Gelu with approximate = "tanh": 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3). */
static double
gelu_tanh(double x)
{
    return 0.5 * x * (1.0 + tanh(0.79788456080286535588 * (x + 0.044715 * x * x * x)));
}

static double
gelu_tanh_grad(double x)
{
    double t = tanh(0.79788456080286535588 * (x + 0.044715 * x * x * x));
    return 0.5 * (1.0 + t) +
           0.5 * x * (1.0 - t * t) * 0.79788456080286535588 * (1.0 + 3 * 0.044715 * x * x);
}

static double
sigmoid(double x)
{
    if (x >= 0)
        return 1.0 / (1.0 + exp(-x));
    double e = exp(x);
    return e / (1.0 + e);
}

/* x sigmoid(a x) and its derivative s (1 + a x (1 - s)), s = sigmoid(a x). */
static double
swish(double x, double a)
{
    return x * sigmoid(a * x);
}

static double
swish_grad(double x, double a)
{
    double s = sigmoid(a * x);
    return s * (1.0 + a * x * (1.0 - s));
}

/* alpha: Swish's; approx: Gelu's tanh form (ir_gelu_tanh); unused by the others. */
static double
unary_fn(int kind, double x, double alpha, int approx)
{
    switch (kind) {
    case IR_OP_SWISH:
        return swish(x, alpha);
    case IR_OP_SQRT:
        return sqrt(x);
    case IR_OP_RELU:
        return x > 0 ? x : 0.0;
    case IR_OP_GELU:
        return approx ? gelu_tanh(x) : gelu(x);
    case IR_OP_TANH:
        return tanh(x);
    case IR_OP_SIGMOID:
        return sigmoid(x);
    case IR_OP_ERF:
        return erf(x);
    default:
        return x;
    }
}

static int
k_unary(const kctx *k, const ex_tensor *x, ex_tensor *out)
{
    int kind = k->m->ops[k->op].kind, rc;
    int approx = kind == IR_OP_GELU ? ir_gelu_tanh(k->m, k->op) : 0;
    double alpha = ir_op_float(k->m, k->op, "alpha", 1.0);
    if (kind != IR_OP_RELU && (rc = need_float(k, x, 0)) != 0)
        return rc;
    if (approx < 0)
        return kfail(k, DI_EINVAL, "approximate must be none or tanh");
    if ((rc = kalloc(k, out, x->dtype, x->rank, x->dims)) != 0)
        return rc;
    switch (ex_class_of(x->dtype)) {
    case EX_CF: {
        const float *p = x->data;
        float *o = out->data;
        if (kind == IR_OP_RELU) {
            for (size_t i = 0; i < x->numel; i++)
                o[i] = p[i] > 0 ? p[i] : 0.0f;
        } else {
            for (size_t i = 0; i < x->numel; i++)
                o[i] = (float)unary_fn(kind, p[i], alpha, approx);
        }
        break;
    }
    case EX_CD: {
        const double *p = x->data;
        double *o = out->data;
        for (size_t i = 0; i < x->numel; i++)
            o[i] = unary_fn(kind, p[i], alpha, approx);
        break;
    }
    case EX_CI: {
        const int64_t *p = x->data;
        int64_t *o = out->data;
        for (size_t i = 0; i < x->numel; i++)
            o[i] = p[i] > 0 ? p[i] : 0;
        break;
    }
    default:
        memcpy(out->data, x->data, x->numel);
    }
    ex_fixup(out);
    return 0;
}

/* Identity-like ops that copy data under a new shape: Identity, Reshape, (Un)Squeeze. */
static int
k_reshape_copy(const kctx *k, const ex_tensor *x, uint32_t rank, const int64_t *dims,
               ex_tensor *out)
{
    sbuf a, b;
    int rc;
    if (ex_shape_numel(rank, dims) != (int64_t)x->numel)
        return kfail(k, DI_EINVAL, "cannot view %s as %s", shp(&a, x),
                     ex_shape_str(b.s, sizeof b.s, rank, dims));
    if ((rc = kalloc(k, out, x->dtype, rank, dims)) != 0)
        return rc;
    if (x->numel)
        memcpy(out->data, x->data, x->numel * ex_elem_size(x->dtype));
    return 0;
}

static int
k_reshape(const kctx *k, const ex_tensor *x, ex_tensor *out)
{
    uint32_t n;
    const int64_t *shape = ir_op_ints(k->m, k->op, "shape", &n);
    int64_t dims[IR_MAX_RANK], known = 1;
    int at = -1;
    if (n > IR_MAX_RANK)
        return kfail(k, DI_EINVAL, "shape has %u entries, more than %d", n, IR_MAX_RANK);
    for (uint32_t i = 0; i < n; i++) {
        int64_t d = shape[i];
        if (d == 0) {
            if (i >= x->rank)
                return kfail(k, DI_EINVAL, "shape[%u] is 0 but the input has rank %u", i, x->rank);
            d = x->dims[i];
        } else if (d == -1) {
            if (at >= 0)
                return kfail(k, DI_EINVAL, "shape has more than one -1");
            at = (int)i;
            continue;
        } else if (d < 0) {
            return kfail(k, DI_EINVAL, "shape[%u] is %lld", i, (long long)d);
        }
        dims[i] = d;
        if (d != 0 && known > INT64_MAX / d)
            return kfail(k, DI_EINVAL, "shape has too many elements");
        known *= d;
    }
    if (at >= 0) {
        if (known == 0 || (int64_t)x->numel % known != 0)
            return kfail(k, DI_EINVAL, "cannot infer the -1 in shape for %zu elements", x->numel);
        dims[at] = (int64_t)x->numel / known;
    }
    return k_reshape_copy(k, x, n, dims, out);
}

static int
k_unsqueeze(const kctx *k, const ex_tensor *x, ex_tensor *out)
{
    uint32_t n, r, j = 0, a;
    const int64_t *axes = ir_op_ints(k->m, k->op, "axes", &n);
    uint8_t mask[IR_MAX_RANK];
    int64_t dims[IR_MAX_RANK];
    int rc;
    if (x->rank + n > IR_MAX_RANK)
        return kfail(k, DI_EINVAL, "result rank exceeds %d", IR_MAX_RANK);
    r = x->rank + n;
    memset(mask, 0, sizeof mask);
    for (uint32_t i = 0; i < n; i++) {
        if ((rc = axis_norm(k, "axes entry", axes[i], r, &a)) != 0)
            return rc;
        if (mask[a])
            return kfail(k, DI_EINVAL, "axes names axis %u twice", a);
        mask[a] = 1;
    }
    for (uint32_t i = 0; i < r; i++)
        dims[i] = mask[i] ? 1 : x->dims[j++];
    return k_reshape_copy(k, x, r, dims, out);
}

static int
k_squeeze(const kctx *k, const ex_tensor *x, ex_tensor *out)
{
    uint32_t n, r = 0, a;
    const int64_t *axes = ir_op_ints(k->m, k->op, "axes", &n);
    uint8_t mask[IR_MAX_RANK];
    int64_t dims[IR_MAX_RANK];
    int rc;
    memset(mask, 0, sizeof mask);
    if (ir_op_attr(k->m, k->op, "axes") == NULL) {
        for (uint32_t i = 0; i < x->rank; i++)
            mask[i] = x->dims[i] == 1;
    }
    for (uint32_t i = 0; i < n; i++) {
        if ((rc = axis_norm(k, "axes entry", axes[i], x->rank, &a)) != 0)
            return rc;
        if (x->dims[a] != 1)
            return kfail(k, DI_EINVAL, "axis %u has size %lld, not 1", a, (long long)x->dims[a]);
        mask[a] = 1;
    }
    for (uint32_t i = 0; i < x->rank; i++)
        if (!mask[i])
            dims[r++] = x->dims[i];
    return k_reshape_copy(k, x, r, dims, out);
}

static int
k_cast(const kctx *k, const ex_tensor *x, ex_tensor *out)
{
    ir_dtype dt = ir_dtype_from_onnx(ir_op_int(k->m, k->op, "to", 0));
    int rc;
    if (dt == IR_DTYPE_NONE)
        return kfail(k, DI_EINVAL, "to = %lld is not a supported data type",
                     (long long)ir_op_int(k->m, k->op, "to", 0));
    if ((rc = kalloc(k, out, dt, x->rank, x->dims)) != 0)
        return rc;
    for (size_t i = 0; i < x->numel; i++)
        ex_set(out, i, ex_get(x, i));
    return 0;
}

static int
k_where(const kctx *k, const ex_tensor *c, const ex_tensor *x, const ex_tensor *y, ex_tensor *out)
{
    int64_t d1[IR_MAX_RANK], dims[IR_MAX_RANK], st[3][IR_MAX_RANK], base[3];
    uint32_t r1, r;
    size_t es = ex_elem_size(x->dtype);
    sbuf a, b, e;
    int rc;
    if (c->dtype != IR_BOOL)
        return kfail(k, DI_EINVAL, "the condition has dtype %s, expected i1",
                     ir_dtype_name(c->dtype));
    if (x->dtype != y->dtype)
        return kfail(k, DI_EINVAL, "inputs 1 and 2 have dtypes %s and %s", ir_dtype_name(x->dtype),
                     ir_dtype_name(y->dtype));
    if (broadcast2(c->rank, c->dims, x->rank, x->dims, &r1, d1) != 0 ||
        broadcast2(r1, d1, y->rank, y->dims, &r, dims) != 0)
        return kfail(k, DI_EINVAL, "shapes %s, %s and %s do not broadcast", shp(&a, c), shp(&b, x),
                     shp(&e, y));
    if ((rc = kalloc(k, out, x->dtype, r, dims)) != 0)
        return rc;
    if (out->numel == 0)
        return 0;
    bc_strides(c, r, dims, st[0]);
    bc_strides(x, r, dims, st[1]);
    bc_strides(y, r, dims, st[2]);
    {
        int64_t inner = r ? dims[r - 1] : 1, rows = (int64_t)out->numel / inner;
        const uint8_t *pc = c->data, *px = x->data, *py = y->data;
        uint8_t *po = out->data;
        for (int64_t row = 0; row < rows; row++) {
            bc_row_base(r, dims, row, 3, st, base);
            for (int64_t j = 0; j < inner; j++) {
                int64_t ic = base[0] + j * (r ? st[0][r - 1] : 0);
                int64_t ix = base[1] + j * (r ? st[1][r - 1] : 0);
                int64_t iy = base[2] + j * (r ? st[2][r - 1] : 0);
                memcpy(po + (size_t)(row * inner + j) * es,
                       pc[ic] ? px + (size_t)ix * es : py + (size_t)iy * es, es);
            }
        }
    }
    return 0;
}

/* ---- matrix multiplication ---- */

/*
 * C[M,N] += A[M,K] @ B[K,N], all row-major and contiguous. Blocked as in
 * the classic GEMM design: a KB x NB block of B is packed into panels of 8
 * columns (contiguous in k), and a micro-kernel keeps a 4 x 8 block of C in
 * vector registers (GCC/Clang vector extensions, 4 floats wide, which every
 * x86-64 and AArch64 target has) while it streams four rows of A through a
 * panel. A 1024 x 1024 product takes a few tens of milliseconds.
 */
typedef float vf4 __attribute__((vector_size(16)));

enum { MM_KB = 256, MM_NB = 256, MM_MR = 4, MM_NR = 8 };

static void
mm_micro(const float *A, int64_t lda, const float *Bp, int64_t kb, float *C, int64_t ldc,
         int64_t rows, int64_t cols)
{
    /* Eight named accumulators so that they stay in registers. */
    vf4 c00 = {0, 0, 0, 0}, c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00,
        c31 = c00;
    const float *a0 = A, *a1 = A + (rows > 1 ? lda : 0), *a2 = A + (rows > 2 ? 2 * lda : 0),
                *a3 = A + (rows > 3 ? 3 * lda : 0);
    float out[MM_MR][MM_NR];
    for (int64_t kk = 0; kk < kb; kk++) {
        vf4 b0, b1, x;
        memcpy(&b0, Bp + kk * MM_NR, sizeof b0);
        memcpy(&b1, Bp + kk * MM_NR + 4, sizeof b1);
        x = (vf4){a0[kk], a0[kk], a0[kk], a0[kk]};
        c00 += x * b0;
        c01 += x * b1;
        x = (vf4){a1[kk], a1[kk], a1[kk], a1[kk]};
        c10 += x * b0;
        c11 += x * b1;
        x = (vf4){a2[kk], a2[kk], a2[kk], a2[kk]};
        c20 += x * b0;
        c21 += x * b1;
        x = (vf4){a3[kk], a3[kk], a3[kk], a3[kk]};
        c30 += x * b0;
        c31 += x * b1;
    }
    memcpy(&out[0][0], &c00, sizeof c00);
    memcpy(&out[0][4], &c01, sizeof c01);
    memcpy(&out[1][0], &c10, sizeof c10);
    memcpy(&out[1][4], &c11, sizeof c11);
    memcpy(&out[2][0], &c20, sizeof c20);
    memcpy(&out[2][4], &c21, sizeof c21);
    memcpy(&out[3][0], &c30, sizeof c30);
    memcpy(&out[3][4], &c31, sizeof c31);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            C[r * ldc + c] += out[r][c];
}

static void
mm_f32(const float *restrict A, const float *restrict B, float *restrict C, int64_t M, int64_t K,
       int64_t N)
{
    float *Bp = di_xmalloc((size_t)MM_KB * MM_NB * sizeof *Bp);
    for (int64_t k0 = 0; k0 < K; k0 += MM_KB) {
        int64_t kb = k0 + MM_KB < K ? MM_KB : K - k0;
        for (int64_t j0 = 0; j0 < N; j0 += MM_NB) {
            int64_t nb = j0 + MM_NB < N ? MM_NB : N - j0;
            int64_t npanel = (nb + MM_NR - 1) / MM_NR;
            /* Pack B[k0:k0+kb, j0:j0+nb] into panels of 8 columns, zero-padded. */
            for (int64_t p = 0; p < npanel; p++) {
                float *dst = Bp + p * kb * MM_NR;
                int64_t c0 = j0 + p * MM_NR, cols = nb - p * MM_NR < MM_NR ? nb - p * MM_NR : MM_NR;
                for (int64_t kk = 0; kk < kb; kk++) {
                    const float *src = B + (k0 + kk) * N + c0;
                    for (int64_t c = 0; c < MM_NR; c++)
                        dst[kk * MM_NR + c] = c < cols ? src[c] : 0.0f;
                }
            }
            for (int64_t i = 0; i < M; i += MM_MR) {
                int64_t rows = M - i < MM_MR ? M - i : MM_MR;
                for (int64_t p = 0; p < npanel; p++) {
                    int64_t cols = nb - p * MM_NR < MM_NR ? nb - p * MM_NR : MM_NR;
                    mm_micro(A + i * K + k0, K, Bp + p * kb * MM_NR, kb, C + i * N + j0 + p * MM_NR,
                             N, rows, cols);
                }
            }
        }
    }
    di_free(Bp);
}

static void
mm_f64(const double *restrict A, const double *restrict B, double *restrict C, int64_t M, int64_t K,
       int64_t N)
{
    for (int64_t i = 0; i < M; i++)
        for (int64_t kk = 0; kk < K; kk++) {
            double a = A[i * K + kk];
            const double *b = B + kk * N;
            double *c = C + i * N;
            for (int64_t j = 0; j < N; j++)
                c[j] += a * b[j];
        }
}

static void
mm_i64(const int64_t *A, const int64_t *B, int64_t *C, int64_t M, int64_t K, int64_t N)
{
    for (int64_t i = 0; i < M; i++)
        for (int64_t kk = 0; kk < K; kk++) {
            uint64_t a = (uint64_t)A[i * K + kk];
            for (int64_t j = 0; j < N; j++)
                C[i * N + j] = (int64_t)((uint64_t)C[i * N + j] + a * (uint64_t)B[kk * N + j]);
        }
}

/* C += A @ B for the compute class of dt (pointers at element offsets). */
static void
mm_any(ir_dtype dt, const void *A, const void *B, void *C, int64_t M, int64_t K, int64_t N)
{
    switch (ex_class_of(dt)) {
    case EX_CF:
        mm_f32(A, B, C, M, K, N);
        break;
    case EX_CD:
        mm_f64(A, B, C, M, K, N);
        break;
    default:
        mm_i64(A, B, C, M, K, N);
    }
}

/* A transposed copy of the [R, C] matrix at p (element size es). */
static void *
transpose2(const void *p, int64_t R, int64_t C, size_t es)
{
    size_t n = (size_t)(R * C);
    uint8_t *t = di_malloc((n > 0 ? n : 1) * es);
    const uint8_t *s = p;
    if (t == NULL)
        return NULL;
    for (int64_t i = 0; i < R; i++)
        for (int64_t j = 0; j < C; j++)
            memcpy(t + (size_t)(j * R + i) * es, s + (size_t)(i * C + j) * es, es);
    return t;
}

/* The numpy matmul geometry of a @ b. */
typedef struct mmgeo {
    int64_t M, K, N;
    uint32_t nb;                /* batch rank */
    int64_t bdims[IR_MAX_RANK]; /* broadcast batch dims */
    int64_t ast[IR_MAX_RANK];   /* batch strides in matrices, 0 when broadcast */
    int64_t bst[IR_MAX_RANK];
    int64_t nbatch;
    uint32_t rank;             /* result rank */
    int64_t dims[IR_MAX_RANK]; /* result dims */
} mmgeo;

static int
mm_geometry(const kctx *k, const ex_tensor *a, const ex_tensor *b, mmgeo *g)
{
    int64_t ad[IR_MAX_RANK + 1], bd[IR_MAX_RANK + 1];
    uint32_t ra = a->rank, rb = b->rank, rba, rbb;
    sbuf x, y;
    memset(g, 0, sizeof *g);
    if (ra == 0 || rb == 0)
        return kfail(k, DI_EINVAL, "matmul needs inputs of rank >= 1");
    if (a->dtype != b->dtype)
        return kfail(k, DI_EINVAL, "input 1 has dtype %s, input 0 has %s", ir_dtype_name(b->dtype),
                     ir_dtype_name(a->dtype));
    if (ra == 1) {
        ad[0] = 1;
        ad[1] = a->dims[0];
        ra = 2;
    } else {
        memcpy(ad, a->dims, ra * sizeof ad[0]);
    }
    if (rb == 1) {
        bd[0] = b->dims[0];
        bd[1] = 1;
        rb = 2;
    } else {
        memcpy(bd, b->dims, rb * sizeof bd[0]);
    }
    g->M = ad[ra - 2];
    g->K = ad[ra - 1];
    g->N = bd[rb - 1];
    if (bd[rb - 2] != g->K)
        return kfail(k, DI_EINVAL, "inner dimensions differ: %s @ %s", shp(&x, a), shp(&y, b));
    rba = ra - 2;
    rbb = rb - 2;
    {
        ex_tensor ta, tb;
        memset(&ta, 0, sizeof ta);
        memset(&tb, 0, sizeof tb);
        ta.rank = rba;
        tb.rank = rbb;
        memcpy(ta.dims, ad, rba * sizeof ad[0]);
        memcpy(tb.dims, bd, rbb * sizeof bd[0]);
        if (broadcast2(rba, ad, rbb, bd, &g->nb, g->bdims) != 0)
            return kfail(k, DI_EINVAL, "batch dimensions of %s and %s do not broadcast", shp(&x, a),
                         shp(&y, b));
        bc_strides(&ta, g->nb, g->bdims, g->ast);
        bc_strides(&tb, g->nb, g->bdims, g->bst);
    }
    g->nbatch = ex_shape_numel(g->nb, g->bdims);
    if (g->nbatch < 0)
        return kfail(k, DI_EINVAL, "batch too large");
    g->rank = 0;
    for (uint32_t i = 0; i < g->nb; i++)
        g->dims[g->rank++] = g->bdims[i];
    if (a->rank > 1)
        g->dims[g->rank++] = g->M;
    if (b->rank > 1)
        g->dims[g->rank++] = g->N;
    return 0;
}

/* Matrix offsets (in matrices) of batch index bi in a and b. */
static void
mm_batch(const mmgeo *g, int64_t bi, int64_t *oa, int64_t *ob)
{
    *oa = 0;
    *ob = 0;
    for (uint32_t d = g->nb; d > 0; d--) {
        int64_t c = bi % g->bdims[d - 1];
        bi /= g->bdims[d - 1];
        *oa += c * g->ast[d - 1];
        *ob += c * g->bst[d - 1];
    }
}

static int
k_matmul(const kctx *k, const ex_tensor *a, const ex_tensor *b, ex_tensor *out)
{
    mmgeo g;
    size_t es;
    int rc;
    if ((rc = mm_geometry(k, a, b, &g)) != 0 || (rc = kalloc(k, out, a->dtype, g.rank, g.dims)))
        return rc;
    es = ex_elem_size(a->dtype);
    for (int64_t bi = 0; bi < g.nbatch; bi++) {
        int64_t oa, ob;
        mm_batch(&g, bi, &oa, &ob);
        mm_any(a->dtype, (const uint8_t *)a->data + (size_t)(oa * g.M * g.K) * es,
               (const uint8_t *)b->data + (size_t)(ob * g.K * g.N) * es,
               (uint8_t *)out->data + (size_t)(bi * g.M * g.N) * es, g.M, g.K, g.N);
    }
    ex_fixup(out);
    return 0;
}

/*
 * MatMulGrad(a, b, dy) -> (da, db): da = dy @ b^T and db = a^T @ dy per
 * batch, summed over the batch dimensions a or b was broadcast along.
 */
static int
k_matmulgrad(const kctx *k, const ex_tensor *a, const ex_tensor *b, const ex_tensor *dy,
             ex_tensor *out)
{
    mmgeo g;
    size_t es;
    sbuf x, y;
    void *bt = NULL, *at = NULL;
    int rc;
    if ((rc = mm_geometry(k, a, b, &g)) != 0)
        return rc;
    if (dy->dtype != a->dtype || dy->rank != g.rank ||
        memcmp(dy->dims, g.dims, g.rank * sizeof g.dims[0]) != 0)
        return kfail(k, DI_EINVAL, "dy has shape %s, expected %s", shp(&x, dy),
                     ex_shape_str(y.s, sizeof y.s, g.rank, g.dims));
    if ((rc = kalloc(k, &out[0], a->dtype, a->rank, a->dims)) != 0)
        return rc;
    if ((rc = kalloc(k, &out[1], b->dtype, b->rank, b->dims)) != 0) {
        ex_tensor_fini(&out[0]);
        return rc;
    }
    es = ex_elem_size(a->dtype);
    for (int64_t bi = 0; bi < g.nbatch; bi++) {
        int64_t oa, ob;
        const uint8_t *pa, *pb, *pd = (const uint8_t *)dy->data + (size_t)(bi * g.M * g.N) * es;
        mm_batch(&g, bi, &oa, &ob);
        pa = (const uint8_t *)a->data + (size_t)(oa * g.M * g.K) * es;
        pb = (const uint8_t *)b->data + (size_t)(ob * g.K * g.N) * es;
        bt = transpose2(pb, g.K, g.N, es);
        at = transpose2(pa, g.M, g.K, es);
        if (bt == NULL || at == NULL) {
            di_free(bt);
            di_free(at);
            ex_tensor_fini(&out[0]);
            ex_tensor_fini(&out[1]);
            return kfail(k, DI_ENOMEM, "out of memory");
        }
        /* da[M,K] += dy[M,N] @ bT[N,K]; db[K,N] += aT[K,M] @ dy[M,N]. */
        mm_any(a->dtype, pd, bt, (uint8_t *)out[0].data + (size_t)(oa * g.M * g.K) * es, g.M, g.N,
               g.K);
        mm_any(a->dtype, at, pd, (uint8_t *)out[1].data + (size_t)(ob * g.K * g.N) * es, g.K, g.M,
               g.N);
        di_free(bt);
        di_free(at);
    }
    ex_fixup(&out[0]);
    ex_fixup(&out[1]);
    return 0;
}

/* Gemm(A, B, [C]){alpha, beta, transA, transB}: alpha A' B' + beta C. */
static int
k_gemm(const kctx *k, const ex_tensor *const *in, uint32_t nin, ex_tensor *out)
{
    const ex_tensor *a = in[0], *b = in[1];
    int ta = ir_op_int(k->m, k->op, "transA", 0) != 0;
    int tb = ir_op_int(k->m, k->op, "transB", 0) != 0;
    double alpha = ir_op_float(k->m, k->op, "alpha", 1.0);
    double beta = ir_op_float(k->m, k->op, "beta", 1.0);
    int64_t M, K, N, dims[2];
    size_t es;
    void *pa = NULL, *pb = NULL;
    sbuf x, y;
    int rc;
    if (a->rank != 2 || b->rank != 2)
        return kfail(k, DI_EINVAL, "inputs must be matrices, got %s and %s", shp(&x, a),
                     shp(&y, b));
    if (a->dtype != b->dtype)
        return kfail(k, DI_EINVAL, "inputs 0 and 1 have dtypes %s and %s", ir_dtype_name(a->dtype),
                     ir_dtype_name(b->dtype));
    M = ta ? a->dims[1] : a->dims[0];
    K = ta ? a->dims[0] : a->dims[1];
    N = tb ? b->dims[0] : b->dims[1];
    if ((tb ? b->dims[1] : b->dims[0]) != K)
        return kfail(k, DI_EINVAL, "inner dimensions differ: %s and %s (transA=%d transB=%d)",
                     shp(&x, a), shp(&y, b), ta, tb);
    dims[0] = M;
    dims[1] = N;
    if (nin > 2) {
        const ex_tensor *c = in[2];
        int ok = c->rank <= 2 && c->dtype == a->dtype;
        for (uint32_t i = 0; ok && i < c->rank; i++) {
            int64_t cd = c->dims[c->rank - 1 - i];
            ok = cd == 1 || cd == dims[1 - i];
        }
        if (!ok)
            return kfail(k, DI_EINVAL,
                         "input 2 has shape %s, which does not broadcast to [%lld,%lld]",
                         shp(&x, c), (long long)M, (long long)N);
    }
    if ((rc = kalloc(k, out, a->dtype, 2, dims)) != 0)
        return rc;
    es = ex_elem_size(a->dtype);
    pa = ta ? transpose2(a->data, a->dims[0], a->dims[1], es) : NULL;
    pb = tb ? transpose2(b->data, b->dims[0], b->dims[1], es) : NULL;
    if ((ta && pa == NULL) || (tb && pb == NULL)) {
        di_free(pa);
        di_free(pb);
        ex_tensor_fini(out);
        return kfail(k, DI_ENOMEM, "out of memory");
    }
    mm_any(a->dtype, ta ? pa : a->data, tb ? pb : b->data, out->data, M, K, N);
    di_free(pa);
    di_free(pb);
    if (alpha != 1.0 || nin > 2) {
        const ex_tensor *c = nin > 2 ? in[2] : NULL;
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                size_t o = (size_t)(i * N + j);
                double v = alpha * ex_get(out, o);
                if (c) {
                    int64_t ci = 0;
                    if (c->rank == 2)
                        ci = (c->dims[0] == 1 ? 0 : i) * c->dims[1] + (c->dims[1] == 1 ? 0 : j);
                    else if (c->rank == 1)
                        ci = c->dims[0] == 1 ? 0 : j;
                    v += beta * ex_get(c, (size_t)ci);
                }
                if (ex_class_of(out->dtype) == EX_CF)
                    ((float *)out->data)[o] = (float)v;
                else
                    ex_set(out, o, v);
            }
    }
    ex_fixup(out);
    return 0;
}

/* ---- softmax and normalization ---- */

/* outer / len / inner decomposition of t around axis. */
static void
around_axis(const ex_tensor *t, uint32_t axis, int64_t *outer, int64_t *len, int64_t *inner)
{
    *outer = 1;
    *inner = 1;
    for (uint32_t i = 0; i < axis; i++)
        *outer *= t->dims[i];
    *len = t->dims[axis];
    for (uint32_t i = axis + 1; i < t->rank; i++)
        *inner *= t->dims[i];
}

/* Softmax of x along axis into y (both with the outer/len/inner layout). */
static void
softmax_rows(const double *x, double *y, int64_t outer, int64_t len, int64_t inner)
{
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            const double *px = x + o * len * inner + i;
            double *py = y + o * len * inner + i;
            double mx = -INFINITY, s = 0;
            for (int64_t l = 0; l < len; l++)
                if (px[l * inner] > mx)
                    mx = px[l * inner];
            for (int64_t l = 0; l < len; l++) {
                py[l * inner] = exp(px[l * inner] - mx);
                s += py[l * inner];
            }
            for (int64_t l = 0; l < len; l++)
                py[l * inner] /= s;
        }
}

static int
k_softmax(const kctx *k, const ex_tensor *x, ex_tensor *out)
{
    uint32_t axis;
    int64_t outer, len, inner;
    double *v, *y;
    int rc;
    if ((rc = need_float(k, x, 0)) != 0)
        return rc;
    if (x->rank == 0)
        return kfail(k, DI_EINVAL, "softmax of a scalar");
    if ((rc = axis_norm(k, "axis", ir_op_int(k->m, k->op, "axis", -1), x->rank, &axis)) != 0 ||
        (rc = kalloc(k, out, x->dtype, x->rank, x->dims)) != 0)
        return rc;
    around_axis(x, axis, &outer, &len, &inner);
    v = dload(x);
    y = di_malloc((x->numel ? x->numel : 1) * sizeof *y);
    if (v == NULL || y == NULL) {
        di_free(v);
        di_free(y);
        ex_tensor_fini(out);
        return kfail(k, DI_ENOMEM, "out of memory");
    }
    softmax_rows(v, y, outer, len, inner);
    dstore(out, y);
    di_free(v);
    di_free(y);
    return 0;
}

/* SoftmaxGrad(y, dy){axis}: dx = y * (dy - sum(dy * y)). */
static int
k_softmaxgrad(const kctx *k, const ex_tensor *y, const ex_tensor *dy, ex_tensor *out)
{
    uint32_t axis;
    int64_t outer, len, inner;
    double *v[2], *dx;
    int rc;
    if ((rc = need_float(k, y, 0)) != 0 || (rc = need_same_shape(k, y, 0, dy, 1)) != 0)
        return rc;
    if (y->rank == 0)
        return kfail(k, DI_EINVAL, "softmax of a scalar");
    if ((rc = axis_norm(k, "axis", ir_op_int(k->m, k->op, "axis", -1), y->rank, &axis)) != 0)
        return rc;
    if ((rc = dload_all(k, (const ex_tensor *const[]){y, dy}, 2, v)) != 0)
        return rc;
    if ((rc = kalloc(k, out, y->dtype, y->rank, y->dims)) != 0) {
        dfree_all(v, 2);
        return rc;
    }
    around_axis(y, axis, &outer, &len, &inner);
    dx = di_malloc((y->numel ? y->numel : 1) * sizeof *dx);
    if (dx == NULL) {
        dfree_all(v, 2);
        ex_tensor_fini(out);
        return kfail(k, DI_ENOMEM, "out of memory");
    }
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            int64_t base = o * len * inner + i;
            double s = 0;
            for (int64_t l = 0; l < len; l++)
                s += v[0][base + l * inner] * v[1][base + l * inner];
            for (int64_t l = 0; l < len; l++)
                dx[base + l * inner] = v[0][base + l * inner] * (v[1][base + l * inner] - s);
        }
    dstore(out, dx);
    di_free(dx);
    dfree_all(v, 2);
    return 0;
}

/* Checks a scale or bias of LayerNormalization against the normalized size. */
static int
norm_param(const kctx *k, const ex_tensor *t, uint32_t i, int64_t size)
{
    sbuf a;
    if ((int64_t)t->numel == size || t->numel == 1)
        return 0;
    return kfail(k, DI_EINVAL,
                 "input %u has shape %s, which does not match the %lld normalized "
                 "elements",
                 i, shp(&a, t), (long long)size);
}

static int
k_layernorm(const kctx *k, const ex_tensor *const *in, uint32_t nin, ex_tensor *out, uint32_t nout)
{
    const ex_tensor *x = in[0];
    double eps = ir_op_float(k->m, k->op, "epsilon", 1e-5);
    int rms = k->m->ops[k->op].kind == IR_OP_RMSNORM; /* no centring; results y, inv_std_dev */
    uint32_t axis;
    int64_t outer = 1, size = 1, sd[IR_MAX_RANK];
    double *v[3] = {NULL, NULL, NULL}, *y, *mean, *istd;
    int rc;
    ir_dtype st = ir_norm_stat_dtype(k->m, k->op, x->dtype); /* of mean, inv_std_dev */
    if ((rc = need_float(k, x, 0)) != 0)
        return rc;
    if (x->rank == 0)
        return kfail(k, DI_EINVAL, "layer normalization of a scalar");
    if (st == IR_DTYPE_NONE)
        return kfail(k, DI_EINVAL, "stash_type is not a float data type");
    if ((rc = axis_norm(k, "axis", ir_op_int(k->m, k->op, "axis", -1), x->rank, &axis)) != 0)
        return rc;
    for (uint32_t i = 0; i < x->rank; i++) {
        if (i < axis)
            outer *= x->dims[i];
        else
            size *= x->dims[i];
        sd[i] = i < axis ? x->dims[i] : 1;
    }
    for (uint32_t i = 1; i < nin; i++)
        if ((rc = norm_param(k, in[i], i, size)) != 0)
            return rc;
    if ((rc = dload_all(k, in, nin, v)) != 0)
        return rc;
    y = di_malloc((x->numel ? x->numel : 1) * sizeof *y);
    mean = di_malloc((size_t)(outer ? outer : 1) * sizeof *mean);
    istd = di_malloc((size_t)(outer ? outer : 1) * sizeof *istd);
    if (y == NULL || mean == NULL || istd == NULL) {
        rc = kfail(k, DI_ENOMEM, "out of memory");
        goto done;
    }
    for (int64_t o = 0; o < outer; o++) {
        const double *px = v[0] + o * size;
        double mu = 0, var = 0, is;
        for (int64_t j = 0; j < size && !rms; j++)
            mu += px[j];
        mu /= (double)(size ? size : 1);
        for (int64_t j = 0; j < size; j++)
            var += (px[j] - mu) * (px[j] - mu);
        var /= (double)(size ? size : 1);
        is = 1.0 / sqrt(var + eps);
        mean[o] = mu;
        istd[o] = is;
        for (int64_t j = 0; j < size; j++) {
            double s = in[1]->numel == 1 ? v[1][0] : v[1][j];
            double b = nin > 2 ? (in[2]->numel == 1 ? v[2][0] : v[2][j]) : 0.0;
            y[o * size + j] = (px[j] - mu) * is * s + b;
        }
    }
    if ((rc = kalloc(k, &out[0], x->dtype, x->rank, x->dims)) != 0)
        goto done;
    dstore(&out[0], y);
    for (uint32_t i = 1; i < nout; i++) {
        if ((rc = kalloc(k, &out[i], st, x->rank, sd)) != 0) {
            for (uint32_t j = 0; j < i; j++)
                ex_tensor_fini(&out[j]);
            goto done;
        }
        dstore(&out[i], i == 1 && !rms ? mean : istd);
    }
done:
    di_free(y);
    di_free(mean);
    di_free(istd);
    dfree_all(v, nin);
    return rc;
}

/*
 * LayerNormalizationGrad(dy, x, scale, [mean, inv_std_dev]) -> (dx, [dscale], [dbias]):
 * with xhat = (x - mu) * r and g = dy * scale,
 * dx = r * (g - mean(g) - xhat * mean(g * xhat)), dscale = sum(dy * xhat), dbias = sum(dy).
 * RMSNormalizationGrad(dy, x, scale, [inv_std_dev]) -> (dx, [dscale]): the same with
 * mu = 0 and no mean(g) term (r = 1 / sqrt(mean(x^2) + eps)).
 */
static int
k_layernormgrad(const kctx *k, const ex_tensor *const *in, uint32_t nin, ex_tensor *out,
                uint32_t nout)
{
    const ex_tensor *dy = in[0], *x = in[1];
    double eps = ir_op_float(k->m, k->op, "epsilon", 1e-5);
    int rms = k->m->ops[k->op].kind == IR_OP_RMSNORMGRAD;
    uint32_t axis;
    int64_t outer = 1, size = 1;
    double *v[5] = {NULL, NULL, NULL, NULL, NULL}, *dx = NULL, *ds = NULL, *db = NULL;
    int rc;
    if ((rc = need_float(k, x, 1)) != 0 || (rc = need_same_shape(k, x, 1, dy, 0)) != 0)
        return rc;
    if (x->rank == 0)
        return kfail(k, DI_EINVAL, "layer normalization of a scalar");
    if ((rc = axis_norm(k, "axis", ir_op_int(k->m, k->op, "axis", -1), x->rank, &axis)) != 0)
        return rc;
    for (uint32_t i = 0; i < x->rank; i++) {
        if (i < axis)
            outer *= x->dims[i];
        else
            size *= x->dims[i];
    }
    if ((rc = norm_param(k, in[2], 2, size)) != 0)
        return rc;
    for (uint32_t i = 3; i < nin; i++)
        if ((int64_t)in[i]->numel != outer)
            return kfail(k, DI_EINVAL, "input %u has %zu elements, expected %lld", i, in[i]->numel,
                         (long long)outer);
    if ((rc = dload_all(k, in, nin, v)) != 0)
        return rc;
    dx = di_calloc((x->numel ? x->numel : 1), sizeof *dx);
    ds = di_calloc((size_t)(size ? size : 1), sizeof *ds);
    db = di_calloc((size_t)(size ? size : 1), sizeof *db);
    if (dx == NULL || ds == NULL || db == NULL) {
        rc = kfail(k, DI_ENOMEM, "out of memory");
        goto done;
    }
    for (int64_t o = 0; o < outer; o++) {
        const double *px = v[1] + o * size, *pd = v[0] + o * size;
        double mu, r, mg = 0, mgx = 0;
        if (rms && nin >= 4) {
            mu = 0;
            r = v[3][o];
        } else if (nin >= 5) {
            mu = v[3][o];
            r = v[4][o];
        } else {
            double var = 0;
            mu = 0;
            for (int64_t j = 0; j < size && !rms; j++)
                mu += px[j];
            mu /= (double)(size ? size : 1);
            for (int64_t j = 0; j < size; j++)
                var += (px[j] - mu) * (px[j] - mu);
            var /= (double)(size ? size : 1);
            r = 1.0 / sqrt(var + eps);
        }
        for (int64_t j = 0; j < size; j++) {
            double s = in[2]->numel == 1 ? v[2][0] : v[2][j];
            double xh = (px[j] - mu) * r, g = pd[j] * s;
            mg += g;
            mgx += g * xh;
            ds[in[2]->numel == 1 ? 0 : j] += pd[j] * xh;
            db[in[2]->numel == 1 ? 0 : j] += pd[j];
        }
        mg = rms ? 0 : mg / (double)(size ? size : 1);
        mgx /= (double)(size ? size : 1);
        for (int64_t j = 0; j < size; j++) {
            double s = in[2]->numel == 1 ? v[2][0] : v[2][j];
            double xh = (px[j] - mu) * r;
            dx[o * size + j] = r * (pd[j] * s - mg - xh * mgx);
        }
    }
    if ((rc = kalloc(k, &out[0], x->dtype, x->rank, x->dims)) != 0)
        goto done;
    dstore(&out[0], dx);
    for (uint32_t i = 1; i < nout; i++) {
        if ((rc = kalloc(k, &out[i], in[2]->dtype, in[2]->rank, in[2]->dims)) != 0) {
            for (uint32_t j = 0; j < i; j++)
                ex_tensor_fini(&out[j]);
            goto done;
        }
        dstore(&out[i], i == 1 ? ds : db);
    }
done:
    di_free(dx);
    di_free(ds);
    di_free(db);
    dfree_all(v, nin);
    return rc;
}

/* ---- dropout ---- */

/* Whether dropout with (seed, ratio) keeps element i. */
static int
dropout_keep(uint64_t seed, double ratio, size_t i)
{
    uint64_t h = di_splitmix64(di_splitmix64(seed) ^ (uint64_t)i);
    double u = (double)(h >> 11) * (1.0 / 9007199254740992.0);
    return u >= ratio;
}

static int
k_dropout(const kctx *k, const ex_tensor *x, ex_tensor *out, uint32_t nout)
{
    double ratio = ir_op_float(k->m, k->op, "ratio", 0.5);
    uint64_t seed = (uint64_t)ir_op_int(k->m, k->op, "seed", 0);
    double scale;
    int rc;
    if ((rc = need_float(k, x, 0)) != 0)
        return rc;
    if (!(ratio >= 0.0 && ratio < 1.0))
        return kfail(k, DI_EINVAL, "ratio %g is outside [0, 1)", ratio);
    scale = 1.0 / (1.0 - ratio);
    if ((rc = kalloc(k, &out[0], x->dtype, x->rank, x->dims)) != 0)
        return rc;
    if (nout > 1 && (rc = kalloc(k, &out[1], IR_BOOL, x->rank, x->dims)) != 0) {
        ex_tensor_fini(&out[0]);
        return rc;
    }
    for (size_t i = 0; i < x->numel; i++) {
        int keep = ratio == 0.0 || dropout_keep(seed, ratio, i);
        if (ratio == 0.0)
            ex_set(&out[0], i, ex_get(x, i));
        else
            ex_set(&out[0], i, keep ? ex_get(x, i) * scale : 0.0);
        if (nout > 1)
            ((uint8_t *)out[1].data)[i] = (uint8_t)keep;
    }
    return 0;
}

static int
k_dropoutgrad(const kctx *k, const ex_tensor *dy, const ex_tensor *mask, ex_tensor *out)
{
    double ratio = ir_op_float(k->m, k->op, "ratio", 0.5);
    double scale;
    int rc;
    if ((rc = need_float(k, dy, 0)) != 0 || (rc = need_same_shape(k, dy, 0, mask, 1)) != 0)
        return rc;
    if (!(ratio >= 0.0 && ratio < 1.0))
        return kfail(k, DI_EINVAL, "ratio %g is outside [0, 1)", ratio);
    scale = 1.0 / (1.0 - ratio);
    if ((rc = kalloc(k, out, dy->dtype, dy->rank, dy->dims)) != 0)
        return rc;
    for (size_t i = 0; i < dy->numel; i++)
        ex_set(out, i, ex_get(mask, i) != 0.0 ? ex_get(dy, i) * scale : 0.0);
    return 0;
}

/* ---- gradients of elementwise ops ---- */

static int
k_act_grad(const kctx *k, const ex_tensor *x, const ex_tensor *dy, ex_tensor *out)
{
    int kind = k->m->ops[k->op].kind, rc;
    int approx = kind == IR_OP_GELUGRAD ? ir_gelu_tanh(k->m, k->op) : 0;
    double alpha = ir_op_float(k->m, k->op, "alpha", 1.0);
    if ((rc = need_same_shape(k, x, 0, dy, 1)) != 0)
        return rc;
    if (approx < 0)
        return kfail(k, DI_EINVAL, "approximate must be none or tanh");
    if (kind != IR_OP_RELUGRAD && (rc = need_float(k, x, 0)) != 0)
        return rc;
    if ((rc = kalloc(k, out, dy->dtype, dy->rank, dy->dims)) != 0)
        return rc;
    for (size_t i = 0; i < x->numel; i++) {
        double xv = ex_get(x, i), g = ex_get(dy, i), d;
        switch (kind) {
        case IR_OP_RELUGRAD:
            d = xv > 0 ? g : 0.0;
            break;
        case IR_OP_GELUGRAD:
            d = g * (approx ? gelu_tanh_grad(xv) : gelu_grad(xv));
            break;
        case IR_OP_SWISHGRAD:
            d = g * swish_grad(xv, alpha);
            break;
        case IR_OP_TANHGRAD: {
            double t = tanh(xv);
            d = g * (1.0 - t * t);
            break;
        }
        default: {
            double s = sigmoid(xv);
            d = g * s * (1.0 - s);
            break;
        }
        }
        ex_set(out, i, d);
    }
    return 0;
}

/* ---- reductions ---- */

/* Reduces x over mask (sum or mean) into out with or without kept dims. */
static int
reduce_into(const kctx *k, const ex_tensor *x, const uint8_t *mask, int keep, int mean,
            ex_tensor *out)
{
    int64_t dims[IR_MAX_RANK], ost[IR_MAX_RANK], idx[IR_MAX_RANK], count = 1;
    uint32_t r = 0;
    double *acc;
    int rc;
    for (uint32_t i = 0; i < x->rank; i++) {
        if (!mask[i])
            dims[r++] = x->dims[i];
        else {
            count *= x->dims[i];
            if (keep)
                dims[r++] = 1;
        }
    }
    if ((rc = kalloc(k, out, x->dtype, r, dims)) != 0)
        return rc;
    /* Output strides indexed by input dim (0 for reduced dims). */
    {
        int64_t s = 1;
        for (uint32_t i = x->rank; i > 0; i--) {
            if (mask[i - 1]) {
                ost[i - 1] = 0;
            } else {
                ost[i - 1] = s;
                s *= x->dims[i - 1];
            }
        }
    }
    acc = di_calloc(out->numel ? out->numel : 1, sizeof *acc);
    if (acc == NULL) {
        ex_tensor_fini(out);
        return kfail(k, DI_ENOMEM, "out of memory");
    }
    memset(idx, 0, sizeof idx);
    for (size_t i = 0; i < x->numel; i++) {
        int64_t o = 0;
        for (uint32_t d = 0; d < x->rank; d++)
            o += idx[d] * ost[d];
        acc[o] += ex_get(x, i);
        for (uint32_t d = x->rank; d > 0; d--) {
            if (++idx[d - 1] < x->dims[d - 1])
                break;
            idx[d - 1] = 0;
        }
    }
    if (mean)
        for (size_t i = 0; i < out->numel; i++)
            acc[i] = count ? acc[i] / (double)count : NAN;
    dstore(out, acc);
    di_free(acc);
    return 0;
}

static int
k_reduce(const kctx *k, const ex_tensor *x, ex_tensor *out)
{
    uint32_t n, a;
    const int64_t *axes = ir_op_ints(k->m, k->op, "axes", &n);
    int keep = ir_op_int(k->m, k->op, "keepdims", 1) != 0, rc;
    uint8_t mask[IR_MAX_RANK];
    memset(mask, n == 0, sizeof mask);
    for (uint32_t i = 0; i < n; i++) {
        if ((rc = axis_norm(k, "axes entry", axes[i], x->rank, &a)) != 0)
            return rc;
        mask[a] = 1;
    }
    return reduce_into(k, x, mask, keep, k->m->ops[k->op].kind == IR_OP_REDUCEMEAN, out);
}

/* ReduceSumTo(x){shape}: sums x over the dimensions broadcasting from shape added. */
static int
k_reducesumto(const kctx *k, const ex_tensor *x, ex_tensor *out)
{
    uint32_t n;
    const int64_t *shape = ir_op_ints(k->m, k->op, "shape", &n);
    uint8_t mask[IR_MAX_RANK];
    ex_tensor tmp;
    sbuf a, b;
    int rc;
    if (n > x->rank)
        goto bad;
    memset(mask, 0, sizeof mask);
    for (uint32_t i = 0; i < x->rank; i++) {
        if (i < x->rank - n) {
            mask[i] = 1;
            continue;
        }
        {
            int64_t want = shape[i - (x->rank - n)];
            if (want == 1 && x->dims[i] != 1)
                mask[i] = 1;
            else if (want != x->dims[i])
                goto bad;
        }
    }
    if ((rc = reduce_into(k, x, mask, 1, 0, &tmp)) != 0)
        return rc;
    rc = k_reshape_copy(k, &tmp, n, shape, out);
    ex_tensor_fini(&tmp);
    return rc;
bad:
    return kfail(k, DI_EINVAL, "input has shape %s, which does not broadcast from %s", shp(&a, x),
                 ex_shape_str(b.s, sizeof b.s, n, shape));
}

/* ---- data movement ---- */

static int
k_transpose(const kctx *k, const ex_tensor *x, ex_tensor *out)
{
    uint32_t n;
    const int64_t *pa = ir_op_ints(k->m, k->op, "perm", &n);
    int64_t perm[IR_MAX_RANK], dims[IR_MAX_RANK], ist[IR_MAX_RANK], st[IR_MAX_RANK];
    int64_t idx[IR_MAX_RANK];
    uint8_t seen[IR_MAX_RANK];
    size_t es = ex_elem_size(x->dtype);
    int rc;
    if (pa == NULL) {
        n = x->rank;
        for (uint32_t i = 0; i < n; i++)
            perm[i] = n - 1 - i;
    } else {
        if (n != x->rank)
            return kfail(k, DI_EINVAL, "perm has %u entries for rank %u", n, x->rank);
        memcpy(perm, pa, n * sizeof perm[0]);
    }
    memset(seen, 0, sizeof seen);
    for (uint32_t i = 0; i < n; i++) {
        if (perm[i] < 0 || perm[i] >= (int64_t)n || seen[perm[i]])
            return kfail(k, DI_EINVAL, "perm is not a permutation");
        seen[perm[i]] = 1;
        dims[i] = x->dims[perm[i]];
    }
    if ((rc = kalloc(k, out, x->dtype, n, dims)) != 0)
        return rc;
    {
        int64_t s = 1;
        for (uint32_t i = n; i > 0; i--) {
            ist[i - 1] = s;
            s *= x->dims[i - 1];
        }
    }
    for (uint32_t i = 0; i < n; i++)
        st[i] = ist[perm[i]];
    memset(idx, 0, sizeof idx);
    for (size_t o = 0; o < out->numel; o++) {
        int64_t src = 0;
        for (uint32_t d = 0; d < n; d++)
            src += idx[d] * st[d];
        memcpy((uint8_t *)out->data + o * es, (const uint8_t *)x->data + (size_t)src * es, es);
        for (uint32_t d = n; d > 0; d--) {
            if (++idx[d - 1] < dims[d - 1])
                break;
            idx[d - 1] = 0;
        }
    }
    return 0;
}

static int
k_concat(const kctx *k, const ex_tensor *const *in, uint32_t nin, ex_tensor *out)
{
    uint32_t axis;
    int rc;
    if (in[0]->rank == 0)
        return kfail(k, DI_EINVAL, "concat of scalars");
    if ((rc = axis_norm(k, "axis", ir_op_int(k->m, k->op, "axis", 0), in[0]->rank, &axis)) != 0)
        return rc;
    if ((rc = ex_concat(in, nin, axis, out, k->err)) != 0) {
        char msg[sizeof k->err->msg];
        snprintf(msg, sizeof msg, "%s", k->err->msg);
        return kfail(k, rc, "%s", msg);
    }
    return 0;
}

static int
k_split(const kctx *k, const ex_tensor *x, ex_tensor *out, uint32_t nout)
{
    uint32_t axis, ns;
    const int64_t *split = ir_op_ints(k->m, k->op, "split", &ns);
    int64_t off[IR_MAX_RANK], dims[IR_MAX_RANK], sum = 0;
    int rc;
    if (x->rank == 0)
        return kfail(k, DI_EINVAL, "split of a scalar");
    if ((rc = axis_norm(k, "axis", ir_op_int(k->m, k->op, "axis", 0), x->rank, &axis)) != 0)
        return rc;
    if (split != NULL) {
        if (ns != nout)
            return kfail(k, DI_EINVAL, "split lists %u sizes for %u results", ns, nout);
        for (uint32_t i = 0; i < ns; i++) {
            if (split[i] < 0 || sum > INT64_MAX - split[i])
                return kfail(k, DI_EINVAL, "split[%u] = %lld is invalid", i, (long long)split[i]);
            sum += split[i];
        }
        if (sum != x->dims[axis])
            return kfail(k, DI_EINVAL, "split sizes add up to %lld, axis %u has %lld",
                         (long long)sum, axis, (long long)x->dims[axis]);
    } else if (nout == 0 || x->dims[axis] % nout != 0) {
        return kfail(k, DI_EINVAL, "axis %u of size %lld does not split into %u equal parts", axis,
                     (long long)x->dims[axis], nout);
    }
    memset(off, 0, sizeof off);
    memcpy(dims, x->dims, x->rank * sizeof dims[0]);
    for (uint32_t i = 0; i < nout; i++) {
        dims[axis] = split ? split[i] : x->dims[axis] / nout;
        if ((rc = kalloc(k, &out[i], x->dtype, x->rank, dims)) != 0) {
            for (uint32_t j = 0; j < i; j++)
                ex_tensor_fini(&out[j]);
            return rc;
        }
        ex_copy_block(x, off, &out[i]);
        off[axis] += dims[axis];
    }
    return 0;
}

static int64_t
clamp(int64_t v, int64_t lo, int64_t hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

static int
k_slice(const kctx *k, const ex_tensor *x, ex_tensor *out)
{
    uint32_t ns, ne, na, nst;
    const int64_t *starts = ir_op_ints(k->m, k->op, "starts", &ns);
    const int64_t *ends = ir_op_ints(k->m, k->op, "ends", &ne);
    const int64_t *axes = ir_op_ints(k->m, k->op, "axes", &na);
    const int64_t *steps = ir_op_ints(k->m, k->op, "steps", &nst);
    int64_t start[IR_MAX_RANK], step[IR_MAX_RANK], dims[IR_MAX_RANK], ist[IR_MAX_RANK];
    int64_t idx[IR_MAX_RANK];
    uint8_t seen[IR_MAX_RANK];
    size_t es = ex_elem_size(x->dtype);
    int rc;
    if (ns != ne || (axes && na != ns) || (steps && nst != ns))
        return kfail(k, DI_EINVAL, "starts, ends, axes and steps differ in length");
    memset(seen, 0, sizeof seen);
    for (uint32_t d = 0; d < x->rank; d++) {
        start[d] = 0;
        step[d] = 1;
        dims[d] = x->dims[d];
    }
    for (uint32_t j = 0; j < ns; j++) {
        uint32_t a;
        int64_t d, st = steps ? steps[j] : 1, b = starts[j], e = ends[j];
        if ((rc = axis_norm(k, "axes entry", axes ? axes[j] : (int64_t)j, x->rank, &a)) != 0)
            return rc;
        if (seen[a])
            return kfail(k, DI_EINVAL, "axes names axis %u twice", a);
        seen[a] = 1;
        d = x->dims[a];
        if (st == 0)
            return kfail(k, DI_EINVAL, "steps[%u] is 0", j);
        if (b < 0)
            b = b < INT64_MIN + d ? INT64_MIN : b + d;
        if (e < 0)
            e = e < INT64_MIN + d ? INT64_MIN : e + d;
        if (st > 0) {
            b = clamp(b, 0, d);
            e = clamp(e, 0, d);
            dims[a] = e > b ? (e - b + st - 1) / st : 0;
        } else {
            b = clamp(b, 0, d - 1);
            e = clamp(e, -1, d - 1);
            dims[a] = (d > 0 && b > e) ? (b - e + (-st) - 1) / (-st) : 0;
        }
        start[a] = b;
        step[a] = st;
    }
    if ((rc = kalloc(k, out, x->dtype, x->rank, dims)) != 0)
        return rc;
    {
        int64_t s = 1;
        for (uint32_t i = x->rank; i > 0; i--) {
            ist[i - 1] = s;
            s *= x->dims[i - 1];
        }
    }
    memset(idx, 0, sizeof idx);
    for (size_t o = 0; o < out->numel; o++) {
        int64_t src = 0;
        for (uint32_t d = 0; d < x->rank; d++)
            src += (start[d] + idx[d] * step[d]) * ist[d];
        memcpy((uint8_t *)out->data + o * es, (const uint8_t *)x->data + (size_t)src * es, es);
        for (uint32_t d = x->rank; d > 0; d--) {
            if (++idx[d - 1] < dims[d - 1])
                break;
            idx[d - 1] = 0;
        }
    }
    return 0;
}

/* Reads index i of an index tensor, normalized against dim; -1 if out of range. */
static int64_t
index_at(const ex_tensor *ind, size_t i, int64_t dim)
{
    int64_t v = ((const int64_t *)ind->data)[i];
    if (v < 0)
        v += dim;
    return v >= 0 && v < dim ? v : -1;
}

static int
need_indices(const kctx *k, const ex_tensor *t, uint32_t i)
{
    if (t->dtype == IR_I64 || t->dtype == IR_I32)
        return 0;
    return kfail(k, DI_EINVAL, "input %u has dtype %s, expected i32 or i64 indices", i,
                 ir_dtype_name(t->dtype));
}

static int
k_gather(const kctx *k, const ex_tensor *data, const ex_tensor *ind, ex_tensor *out)
{
    uint32_t axis, r = 0;
    int64_t dims[IR_MAX_RANK], outer = 1, inner = 1, dim, gdim, off;
    size_t es = ex_elem_size(data->dtype);
    int rc;
    if ((rc = need_indices(k, ind, 1)) != 0)
        return rc;
    if (data->rank == 0)
        return kfail(k, DI_EINVAL, "gather from a scalar");
    if ((rc = axis_norm(k, "axis", ir_op_int(k->m, k->op, "axis", 0), data->rank, &axis)) != 0)
        return rc;
    if (data->rank - 1 + ind->rank > IR_MAX_RANK)
        return kfail(k, DI_EINVAL, "result rank exceeds %d", IR_MAX_RANK);
    for (uint32_t i = 0; i < axis; i++) {
        dims[r++] = data->dims[i];
        outer *= data->dims[i];
    }
    for (uint32_t i = 0; i < ind->rank; i++)
        dims[r++] = ind->dims[i];
    for (uint32_t i = axis + 1; i < data->rank; i++) {
        dims[r++] = data->dims[i];
        inner *= data->dims[i];
    }
    /* On a mesh group, data is block shard.pos of the gathered axis: rows elsewhere give zeros. */
    dim = data->dims[axis];
    gdim = dim * (int64_t)k->shard.n;
    off = dim * (int64_t)k->shard.pos;
    for (size_t j = 0; j < ind->numel; j++)
        if (index_at(ind, j, gdim) < 0)
            return kfail(k, DI_EINVAL,
                         "index %lld (element %zu) is out of range for a dimension "
                         "of size %lld",
                         (long long)((const int64_t *)ind->data)[j], j, (long long)gdim);
    if ((rc = kalloc(k, out, data->dtype, r, dims)) != 0)
        return rc;
    for (int64_t o = 0; o < outer; o++)
        for (size_t j = 0; j < ind->numel; j++) {
            int64_t v = index_at(ind, j, gdim) - off;
            size_t dst = (size_t)((o * (int64_t)ind->numel + (int64_t)j) * inner);
            if (v < 0 || v >= dim)
                memset((uint8_t *)out->data + dst * es, 0, (size_t)inner * es);
            else
                memcpy((uint8_t *)out->data + dst * es,
                       (const uint8_t *)data->data + (size_t)((o * dim + v) * inner) * es,
                       (size_t)inner * es);
        }
    return 0;
}

/*
 * Fused attention (ops.c): per leading index, query row i sees keys
 * j <= offset + i when causal (offset: the query block's start, the group
 * position times sq, less the key block's start). The forward keeps lse for
 * the backward, which recomputes the probabilities from it. A ring step
 * (kv_shift s, ring attention under context parallelism) holds the keys and
 * values of the member s places before this one in its group: its block
 * starts at that member's position times sk, and the backward normalizes by
 * the lse of every block (its input), not by this block's.
 */
typedef struct attn_dims {
    int64_t n, sq, sk, d, dv, off;
    int64_t hq, hk; /* query and key/value heads (grouped-query attention: hk divides hq) */
    double scale;
    int causal, ring;
} attn_dims;

/* The key/value leading index of query leading index h. */
static inline int64_t
attn_kv(const attn_dims *a, int64_t h)
{
    return (h / a->hq) * a->hk + (h % a->hq) / (a->hq / a->hk);
}

static int
attn_setup(const kctx *k, const ex_tensor *q, const ex_tensor *kk, const ex_tensor *v, attn_dims *a)
{
    uint32_t r = q->rank;
    int rc;
    for (uint32_t i = 0; i < 3; i++)
        if ((rc = need_float(k, i == 0 ? q : i == 1 ? kk : v, i)) != 0)
            return rc;
    if (r < 2 || kk->rank != r || v->rank != r || kk->dims[r - 1] != q->dims[r - 1] ||
        v->dims[r - 2] != kk->dims[r - 2])
        return kfail(k, DI_EINVAL, "q, k, v do not match");
    a->sq = q->dims[r - 2];
    a->d = q->dims[r - 1];
    a->sk = kk->dims[r - 2];
    a->dv = v->dims[r - 1];
    a->hq = r >= 3 ? q->dims[r - 3] : 1;
    a->hk = r >= 3 ? kk->dims[r - 3] : 1;
    a->n = a->sq > 0 && a->d > 0 ? (int64_t)(q->numel / (size_t)(a->sq * a->d)) : 0;
    if (a->hk <= 0 || a->hq % a->hk != 0 || a->hq <= 0 ||
        (size_t)(a->n / a->hq * a->hk * a->sk * a->d) != kk->numel ||
        (size_t)(a->n / a->hq * a->hk * a->sk * a->dv) != v->numel)
        return kfail(k, DI_EINVAL, "q, k, v differ in their leading dimensions");
    a->causal = ir_op_int(k->m, k->op, "causal", 0) != 0;
    a->scale = ir_op_float(k->m, k->op, "scale", a->d > 0 ? 1.0 / sqrt((double)a->d) : 1.0);
    a->off = a->sq * (int64_t)k->shard.pos;
    a->ring = ir_op_attr(k->m, k->op, "kv_shift") != NULL;
    if (a->ring) {
        int64_t g = k->shard.n ? (int64_t)k->shard.n : 1;
        int64_t back = ir_op_int(k->m, k->op, "kv_shift", 0);
        int64_t from = (((int64_t)k->shard.pos - back) % g + g) % g;
        a->off -= a->sk * from;
    }
    return 0;
}

/*
 * Row i of head h: the probabilities p[0..sk) (masked ones 0) and the
 * log-sum-exp; normalized by lse when given (a ring step's backward).
 */
static double
attn_row(const attn_dims *a, const ex_tensor *q, const ex_tensor *kk, int64_t h, int64_t i,
         double *p, const double *lse)
{
    double mx = -INFINITY, sum = 0;
    int64_t last = a->causal ? a->off + i : a->sk - 1, kh = attn_kv(a, h);
    if (last >= a->sk)
        last = a->sk - 1;
    for (int64_t j = 0; j < a->sk; j++) {
        double s = 0;
        if (j > last) {
            p[j] = -INFINITY;
            continue;
        }
        for (int64_t x = 0; x < a->d; x++)
            s += ex_get(q, (size_t)((h * a->sq + i) * a->d + x)) *
                 ex_get(kk, (size_t)((kh * a->sk + j) * a->d + x));
        p[j] = s * a->scale;
        if (p[j] > mx)
            mx = p[j];
    }
    if (lse != NULL) {
        for (int64_t j = 0; j < a->sk; j++)
            p[j] = j > last ? 0.0 : exp(p[j] - *lse);
        return *lse;
    }
    for (int64_t j = 0; j < a->sk; j++) {
        p[j] = j > last ? 0.0 : exp(p[j] - mx);
        sum += p[j];
    }
    for (int64_t j = 0; j < a->sk; j++)
        p[j] = sum > 0 ? p[j] / sum : 0.0;
    return sum > 0 ? mx + log(sum) : -INFINITY;
}

static int
k_flashattn(const kctx *k, const ex_tensor *const *in, uint32_t nin, ex_tensor *out)
{
    attn_dims a;
    int64_t dims[IR_MAX_RANK];
    uint32_t r = in[0]->rank;
    double *p;
    int rc;
    if ((rc = attn_setup(k, in[0], in[1], in[2], &a)) != 0)
        return rc;
    memcpy(dims, in[0]->dims, r * sizeof dims[0]);
    dims[r - 1] = a.dv;
    if ((rc = kalloc(k, &out[0], in[0]->dtype, r, dims)) != 0)
        return rc;
    if ((rc = kalloc(k, &out[1], IR_F32, r - 1, dims)) != 0) {
        ex_tensor_fini(&out[0]);
        return rc;
    }
    p = di_xmalloc((size_t)(a.sk ? a.sk : 1) * sizeof *p);
    for (int64_t h = 0; h < a.n; h++) {
        int64_t kh = attn_kv(&a, h); /* its key/value head */
        for (int64_t i = 0; i < a.sq; i++) {
            size_t row = (size_t)(h * a.sq + i);
            double l = attn_row(&a, in[0], in[1], h, i, p, NULL), wprev = 0, wnew = 1;
            if (nin == 5) {
                /* Merged with the earlier blocks: weights exp(lse_b - lse) of the two parts. */
                double lp = ex_get(in[4], row), mx = lp > l ? lp : l;
                double lse = isinf(mx) ? mx : mx + log(exp(lp - mx) + exp(l - mx));
                wprev = isinf(lse) ? 0 : exp(lp - lse);
                wnew = isinf(lse) ? 0 : exp(l - lse);
                l = lse;
            }
            ex_set(&out[1], row, l);
            for (int64_t x = 0; x < a.dv; x++) {
                double o = 0;
                for (int64_t j = 0; j < a.sk; j++)
                    o += p[j] * ex_get(in[2], (size_t)((kh * a.sk + j) * a.dv + x));
                o *= wnew;
                if (wprev != 0)
                    o += wprev * ex_get(in[3], (size_t)((h * a.sq + i) * a.dv + x));
                ex_set(&out[0], (size_t)((h * a.sq + i) * a.dv + x), o);
            }
        }
    }
    di_free(p);
    return 0;
}

/*
 * dq, dk, dv from q, k, v, o, lse, do (lse unused, the row recomputed exactly,
 * except in a ring step, whose block the lse of every block normalizes).
 */
static int
k_flashattngrad(const kctx *k, const ex_tensor *const *in, ex_tensor *out)
{
    attn_dims a;
    double *p, *dp, *dq, *dk, *dv;
    int rc;
    if ((rc = attn_setup(k, in[0], in[1], in[2], &a)) != 0)
        return rc;
    if (in[3]->numel != (size_t)(a.n * a.sq * a.dv) || in[5]->numel != in[3]->numel)
        return kfail(k, DI_EINVAL, "o and do do not match q and v");
    for (int i = 0; i < 3; i++)
        if ((rc = kalloc(k, &out[i], in[i]->dtype, in[i]->rank, in[i]->dims)) != 0) {
            for (int j = 0; j < i; j++)
                ex_tensor_fini(&out[j]);
            return rc;
        }
    p = di_xmalloc((size_t)(a.sk ? a.sk : 1) * sizeof *p);
    dp = di_xmalloc((size_t)(a.sk ? a.sk : 1) * sizeof *dp);
    dq = di_xcalloc(in[0]->numel ? in[0]->numel : 1, sizeof *dq);
    dk = di_xcalloc(in[1]->numel ? in[1]->numel : 1, sizeof *dk);
    dv = di_xcalloc(in[2]->numel ? in[2]->numel : 1, sizeof *dv);
    for (int64_t h = 0; h < a.n; h++) {
        int64_t kh = attn_kv(&a, h); /* its key/value head */
        for (int64_t i = 0; i < a.sq; i++) {
            double dsum = 0, lse = a.ring ? ex_get(in[4], (size_t)(h * a.sq + i)) : 0;
            attn_row(&a, in[0], in[1], h, i, p, a.ring ? &lse : NULL);
            for (int64_t x = 0; x < a.dv; x++)
                dsum += ex_get(in[5], (size_t)((h * a.sq + i) * a.dv + x)) *
                        ex_get(in[3], (size_t)((h * a.sq + i) * a.dv + x));
            for (int64_t j = 0; j < a.sk; j++) {
                double g = 0;
                for (int64_t x = 0; x < a.dv; x++) {
                    double dout = ex_get(in[5], (size_t)((h * a.sq + i) * a.dv + x));
                    g += dout * ex_get(in[2], (size_t)((kh * a.sk + j) * a.dv + x));
                    dv[(kh * a.sk + j) * a.dv + x] += p[j] * dout;
                }
                dp[j] = p[j] * (g - dsum) * a.scale; /* dS / scale-free scores */
            }
            for (int64_t j = 0; j < a.sk; j++) {
                if (dp[j] == 0.0)
                    continue;
                for (int64_t x = 0; x < a.d; x++) {
                    dq[(h * a.sq + i) * a.d + x] +=
                        dp[j] * ex_get(in[1], (size_t)((kh * a.sk + j) * a.d + x));
                    dk[(kh * a.sk + j) * a.d + x] +=
                        dp[j] * ex_get(in[0], (size_t)((h * a.sq + i) * a.d + x));
                }
            }
        }
    }
    dstore(&out[0], dq);
    dstore(&out[1], dk);
    dstore(&out[2], dv);
    di_free(p);
    di_free(dp);
    di_free(dq);
    di_free(dk);
    di_free(dv);
    return 0;
}

/* Element i of an i32 or i64 tensor. */
static int64_t
int_at(const ex_tensor *t, size_t i)
{
    return t->dtype == IR_I32 ? (int64_t)((const int32_t *)t->data)[i]
                              : ((const int64_t *)t->data)[i];
}

/* TopK(x){k}: the k largest along the last axis, descending, ties to the lower index. */
static int
k_topk(const kctx *k, const ex_tensor *x, ex_tensor *out)
{
    int64_t kk = ir_op_int(k->m, k->op, "k", 0), dims[IR_MAX_RANK], n, rows;
    uint8_t *taken;
    int rc;
    if ((rc = need_float(k, x, 0)) != 0)
        return rc;
    if (x->rank == 0 || kk < 1 || kk > x->dims[x->rank - 1])
        return kfail(k, DI_EINVAL, "k %lld does not fit the input", (long long)kk);
    n = x->dims[x->rank - 1];
    rows = n ? (int64_t)(x->numel / (size_t)n) : 0;
    memcpy(dims, x->dims, x->rank * sizeof dims[0]);
    dims[x->rank - 1] = kk;
    if ((rc = kalloc(k, &out[0], x->dtype, x->rank, dims)) != 0)
        return rc;
    if ((rc = kalloc(k, &out[1], IR_I64, x->rank, dims)) != 0) {
        ex_tensor_fini(&out[0]);
        return rc;
    }
    taken = di_xcalloc((size_t)n, 1);
    for (int64_t r = 0; r < rows; r++) {
        memset(taken, 0, (size_t)n);
        for (int64_t j = 0; j < kk; j++) {
            int64_t best = -1;
            double bv = 0.0;
            for (int64_t i = 0; i < n; i++) {
                double v = ex_get(x, (size_t)(r * n + i));
                if (!taken[i] && (best < 0 || v > bv))
                    best = i, bv = v;
            }
            taken[best] = 1;
            ex_set(&out[0], (size_t)(r * kk + j), bv);
            ((int64_t *)out[1].data)[r * kk + j] = best;
        }
    }
    di_free(taken);
    return 0;
}

/* TopKGrad(dvalues, indices){size}: dvalues scattered into zeros of [.., size]. */
static int
k_topkgrad(const kctx *k, const ex_tensor *dv, const ex_tensor *ind, ex_tensor *out)
{
    int64_t size = ir_op_int(k->m, k->op, "size", 0), dims[IR_MAX_RANK], kk, rows;
    double *acc;
    int rc;
    if ((rc = need_float(k, dv, 0)) != 0 || (rc = need_indices(k, ind, 1)) != 0)
        return rc;
    if ((rc = need_same_shape(k, dv, 0, ind, 1)) != 0)
        return rc;
    if (dv->rank == 0 || size < dv->dims[dv->rank - 1])
        return kfail(k, DI_EINVAL, "size %lld does not fit the input", (long long)size);
    kk = dv->dims[dv->rank - 1];
    rows = kk ? (int64_t)(dv->numel / (size_t)kk) : 0;
    memcpy(dims, dv->dims, dv->rank * sizeof dims[0]);
    dims[dv->rank - 1] = size;
    if ((rc = kalloc(k, out, dv->dtype, dv->rank, dims)) != 0)
        return rc;
    acc = di_xcalloc(out->numel ? out->numel : 1, sizeof *acc);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < kk; j++) {
            int64_t i = int_at(ind, (size_t)(r * kk + j));
            if (i < 0 || i >= size) {
                di_free(acc);
                ex_tensor_fini(out);
                return kfail(k, DI_EINVAL, "index %lld is out of range for size %lld",
                             (long long)i, (long long)size);
            }
            acc[r * size + i] += ex_get(dv, (size_t)(r * kk + j));
        }
    dstore(out, acc);
    di_free(acc);
    return 0;
}

/* moe.slots(indices [B, S, k]){experts, capacity}: expert e's c-th choice in a row gets e*C+c. */
static int
k_moeslots(const kctx *k, const ex_tensor *ind, ex_tensor *out)
{
    int64_t e = ir_op_int(k->m, k->op, "experts", 0), cap = ir_op_int(k->m, k->op, "capacity", 0);
    int64_t per_row, *fill, *o;
    int rc;
    if ((rc = need_indices(k, ind, 0)) != 0)
        return rc;
    if (ind->rank != 3 || e < 1 || cap < 1)
        return kfail(k, DI_EINVAL, "needs [B, S, k] indices and positive experts and capacity");
    if ((rc = kalloc(k, out, IR_I64, 3, ind->dims)) != 0)
        return rc;
    per_row = ind->dims[1] * ind->dims[2];
    fill = di_xmalloc((size_t)e * sizeof *fill);
    o = out->data;
    for (int64_t b = 0; b < ind->dims[0]; b++) {
        memset(fill, 0, (size_t)e * sizeof *fill);
        for (int64_t j = 0; j < per_row; j++) {
            size_t at = (size_t)(b * per_row + j);
            int64_t x = int_at(ind, at);
            if (x < 0 || x >= e) {
                di_free(fill);
                ex_tensor_fini(out);
                return kfail(k, DI_EINVAL, "expert %lld is out of range (%lld experts)",
                             (long long)x, (long long)e);
            }
            o[at] = fill[x] < cap ? x * cap + fill[x] : -1;
            fill[x]++;
        }
    }
    di_free(fill);
    return 0;
}

/* The slot of element at of slots (a [B, S, k] tensor), -1 when dropped; -2 when out of range. */
static int64_t
slot_at(const ex_tensor *slots, size_t at, int64_t nslot)
{
    int64_t v = int_at(slots, at);
    return v < -1 || v >= nslot ? -2 : v;
}

/*
 * moe.dispatch (scatter, x [B, S, k, h] -> [B, E, C, h]) when `combine` is 0,
 * moe.combine (gather, y [B, E, C, h] -> [B, S, k, h]) when it is 1.
 */
static int
k_moemove(const kctx *k, const ex_tensor *x, const ex_tensor *slots, int combine, ex_tensor *out)
{
    int64_t dims[4], nslot, per_row, h;
    size_t es = ex_elem_size(x->dtype);
    int rc;
    if ((rc = need_float(k, x, 0)) != 0 || (rc = need_indices(k, slots, 1)) != 0)
        return rc;
    if (x->rank != 4 || slots->rank != 3 || x->dims[0] != slots->dims[0] ||
        (!combine && (x->dims[1] != slots->dims[1] || x->dims[2] != slots->dims[2])))
        return kfail(k, DI_EINVAL, "the input and the slots do not match");
    h = x->dims[3];
    per_row = slots->dims[1] * slots->dims[2];
    if (combine) {
        nslot = x->dims[1] * x->dims[2];
        memcpy(dims, slots->dims, 3 * sizeof dims[0]);
    } else {
        int64_t e = ir_op_int(k->m, k->op, "experts", 0),
                cap = ir_op_int(k->m, k->op, "capacity", 0);
        if (e < 1 || cap < 1)
            return kfail(k, DI_EINVAL, "experts and capacity must be positive");
        nslot = e * cap;
        dims[0] = x->dims[0];
        dims[1] = e;
        dims[2] = cap;
    }
    dims[3] = h;
    if ((rc = kalloc(k, out, x->dtype, 4, dims)) != 0)
        return rc;
    memset(out->data, 0, out->numel * es);
    for (int64_t b = 0; b < slots->dims[0]; b++)
        for (int64_t j = 0; j < per_row; j++) {
            int64_t sl = slot_at(slots, (size_t)(b * per_row + j), nslot);
            size_t tok = (size_t)((b * per_row + j) * h) * es, slot;
            if (sl == -2) {
                ex_tensor_fini(out);
                return kfail(k, DI_EINVAL, "slot %lld is out of range (%lld slots)",
                             (long long)int_at(slots, (size_t)(b * per_row + j)), (long long)nslot);
            }
            if (sl < 0)
                continue;
            slot = (size_t)((b * nslot + sl) * h) * es;
            if (combine)
                memcpy((uint8_t *)out->data + tok, (const uint8_t *)x->data + slot, (size_t)h * es);
            else
                memcpy((uint8_t *)out->data + slot, (const uint8_t *)x->data + tok, (size_t)h * es);
        }
    return 0;
}

/* GatherGrad(indices, dy){axis, shape}: scatter-adds dy into zeros of shape. */
static int
k_gathergrad(const kctx *k, const ex_tensor *ind, const ex_tensor *dy, ex_tensor *out)
{
    uint32_t n, axis;
    const int64_t *shape = ir_op_ints(k->m, k->op, "shape", &n);
    int64_t outer = 1, inner = 1, dim, gdim, off, want[IR_MAX_RANK];
    uint32_t r = 0;
    double *acc;
    sbuf a, b;
    int rc;
    if ((rc = need_indices(k, ind, 0)) != 0)
        return rc;
    if (n == 0 || n > IR_MAX_RANK)
        return kfail(k, DI_EINVAL, "needs a shape attribute");
    if ((rc = axis_norm(k, "axis", ir_op_int(k->m, k->op, "axis", 0), n, &axis)) != 0)
        return rc;
    if (n - 1 + ind->rank > IR_MAX_RANK)
        return kfail(k, DI_EINVAL, "rank too large");
    for (uint32_t i = 0; i < axis; i++) {
        want[r++] = shape[i];
        outer *= shape[i];
    }
    for (uint32_t i = 0; i < ind->rank; i++)
        want[r++] = ind->dims[i];
    for (uint32_t i = axis + 1; i < n; i++) {
        want[r++] = shape[i];
        inner *= shape[i];
    }
    if (dy->rank != r || memcmp(dy->dims, want, r * sizeof want[0]) != 0)
        return kfail(k, DI_EINVAL, "dy has shape %s, expected %s", shp(&a, dy),
                     ex_shape_str(b.s, sizeof b.s, r, want));
    dim = shape[axis];
    gdim = dim * (int64_t)k->shard.n;
    off = dim * (int64_t)k->shard.pos;
    for (size_t j = 0; j < ind->numel; j++)
        if (index_at(ind, j, gdim) < 0)
            return kfail(k, DI_EINVAL, "index %lld is out of range for a dimension of size %lld",
                         (long long)((const int64_t *)ind->data)[j], (long long)gdim);
    if ((rc = kalloc(k, out, dy->dtype, n, shape)) != 0)
        return rc;
    acc = di_calloc(out->numel ? out->numel : 1, sizeof *acc);
    if (acc == NULL) {
        ex_tensor_fini(out);
        return kfail(k, DI_ENOMEM, "out of memory");
    }
    for (int64_t o = 0; o < outer; o++)
        for (size_t j = 0; j < ind->numel; j++) {
            int64_t v = index_at(ind, j, gdim) - off;
            if (v < 0 || v >= dim)
                continue;
            for (int64_t i = 0; i < inner; i++)
                acc[(o * dim + v) * inner + i] +=
                    ex_get(dy, (size_t)((o * (int64_t)ind->numel + (int64_t)j) * inner + i));
        }
    dstore(out, acc);
    di_free(acc);
    return 0;
}

static int
k_constant(const kctx *k, ex_tensor *out)
{
    const ir_attr *a = ir_op_attr(k->m, k->op, "value");
    const ir_type *t;
    ir_dtype dt;
    int rc;
    if (a == NULL || a->kind != IR_ATTR_TENSOR || a->i <= 0 || (uint64_t)a->i >= k->m->ntype)
        return kfail(k, DI_EINVAL, "missing tensor attribute value");
    t = &k->m->types[a->i];
    if (t->kind != IR_TYPE_TENSOR || t->rank > IR_MAX_RANK)
        return kfail(k, DI_EINVAL, "value is not a tensor");
    dt = (ir_dtype)t->dtype;
    if (a->n == 0) {
        const int64_t *dims = k->m->ints + t->dims;
        return kalloc(k, out, dt, t->rank, dims);
    }
    if ((uint64_t)a->off + a->n > k->m->ndata)
        return kfail(k, DI_EINVAL, "value data lies outside the module");
    rc = ex_tensor_from_bytes(out, dt, t->rank, k->m->ints + t->dims, k->m->data + a->off, a->n,
                              k->err);
    if (rc != 0) {
        char msg[sizeof k->err->msg];
        snprintf(msg, sizeof msg, "%s", k->err->msg);
        return kfail(k, rc, "value: %s", msg);
    }
    return 0;
}

/* ---- losses ---- */

static int
k_mseloss(const kctx *k, const ex_tensor *a, const ex_tensor *b, ex_tensor *out)
{
    double s = 0;
    int rc;
    if ((rc = need_float(k, a, 0)) != 0 || (rc = need_same_shape(k, a, 0, b, 1)) != 0)
        return rc;
    if ((rc = kalloc(k, out, a->dtype, 0, NULL)) != 0)
        return rc;
    for (size_t i = 0; i < a->numel; i++) {
        double d = ex_get(a, i) - ex_get(b, i);
        s += d * d;
    }
    ex_set(out, 0, a->numel ? s / (double)a->numel : NAN);
    return 0;
}

/* MSELossGrad(a, b, dloss): 2 (a - b) / n * dloss. */
static int
k_mselossgrad(const kctx *k, const ex_tensor *a, const ex_tensor *b, const ex_tensor *dl,
              ex_tensor *out)
{
    double g;
    int rc;
    if ((rc = need_float(k, a, 0)) != 0 || (rc = need_same_shape(k, a, 0, b, 1)) != 0)
        return rc;
    if (dl->numel != 1)
        return kfail(k, DI_EINVAL, "input 2 (dloss) has %zu elements, expected 1", dl->numel);
    if ((rc = kalloc(k, out, a->dtype, a->rank, a->dims)) != 0)
        return rc;
    g = ex_get(dl, 0) * 2.0 / (double)(a->numel ? a->numel : 1);
    for (size_t i = 0; i < a->numel; i++)
        ex_set(out, i, g * (ex_get(a, i) - ex_get(b, i)));
    return 0;
}

/* Checks logits [N, C, d...] against labels [N, d...]; gives N*D (rows) and C. */
static int
sce_geometry(const kctx *k, const ex_tensor *lg, uint32_t il, const ex_tensor *lb, uint32_t ib,
             int64_t *n, int64_t *c, int64_t *d)
{
    sbuf a, b;
    int ok;
    int rc;
    if ((rc = need_float(k, lg, il)) != 0 || (rc = need_indices(k, lb, ib)) != 0)
        return rc;
    ok = lg->rank >= 2 && lb->rank == lg->rank - 1 && lb->dims[0] == lg->dims[0];
    for (uint32_t i = 2; ok && i < lg->rank; i++)
        ok = lb->dims[i - 1] == lg->dims[i];
    if (!ok)
        return kfail(k, DI_EINVAL,
                     "labels %s do not match logits %s (expected [N,d...] for "
                     "[N,C,d...])",
                     shp(&a, lb), shp(&b, lg));
    *n = lg->dims[0];
    *c = lg->dims[1];
    *d = 1;
    for (uint32_t i = 2; i < lg->rank; i++)
        *d *= lg->dims[i];
    return 0;
}

/* log-softmax of logits over dim 1 ([N, C, D] layout) into lp. */
static void
log_softmax_c(const double *x, double *lp, int64_t n, int64_t c, int64_t d)
{
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < d; j++) {
            const double *px = x + i * c * d + j;
            double *pl = lp + i * c * d + j;
            double mx = -INFINITY, s = 0;
            if (c <= 0)
                continue;
            for (int64_t l = 0; l < c; l++)
                if (px[l * d] > mx)
                    mx = px[l * d];
            for (int64_t l = 0; l < c; l++)
                s += exp(px[l * d] - mx);
            s = log(s) + mx;
            for (int64_t l = 0; l < c; l++)
                pl[l * d] = px[l * d] - s;
        }
}

static int
k_sceloss(const kctx *k, const ex_tensor *lg, const ex_tensor *lb, ex_tensor *out, uint32_t nout)
{
    ir_reduction red = ir_sce_reduction(k->m, k->op);
    int rc, has_ii = ir_op_attr(k->m, k->op, "ignore_index") != NULL;
    int64_t ii = ir_op_int(k->m, k->op, "ignore_index", 0), n, c, d, count = 0;
    double *x, *lp, *loss, total = 0;
    if (red == IR_REDUCTION_INVALID)
        return kfail(k, DI_EINVAL, "reduction must be mean, sum or none");
    if ((rc = sce_geometry(k, lg, 0, lb, 1, &n, &c, &d)) != 0)
        return rc;
    x = dload(lg);
    lp = di_malloc((lg->numel ? lg->numel : 1) * sizeof *lp);
    loss = di_calloc(lb->numel ? lb->numel : 1, sizeof *loss);
    if (x == NULL || lp == NULL || loss == NULL) {
        rc = kfail(k, DI_ENOMEM, "out of memory");
        goto done;
    }
    log_softmax_c(x, lp, n, c, d);
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < d; j++) {
            int64_t t = ((const int64_t *)lb->data)[i * d + j];
            if (has_ii && t == ii)
                continue;
            if (t < 0 || t >= c) {
                rc = kfail(k, DI_EINVAL, "label %lld is out of range for %lld classes",
                           (long long)t, (long long)c);
                goto done;
            }
            loss[i * d + j] = -lp[(i * c + t) * d + j];
            total += loss[i * d + j];
            count++;
        }
    if (red == IR_REDUCTION_NONE)
        rc = kalloc(k, &out[0], lg->dtype, lb->rank, lb->dims);
    else
        rc = kalloc(k, &out[0], lg->dtype, 0, NULL);
    if (rc != 0)
        goto done;
    if (red == IR_REDUCTION_NONE)
        dstore(&out[0], loss);
    else
        ex_set(&out[0], 0, red == IR_REDUCTION_SUM ? total : total / (double)count);
    if (nout > 1) {
        if ((rc = kalloc(k, &out[1], lg->dtype, lg->rank, lg->dims)) != 0) {
            ex_tensor_fini(&out[0]);
            goto done;
        }
        dstore(&out[1], lp);
    }
done:
    di_free(x);
    di_free(lp);
    di_free(loss);
    return rc;
}

/*
 * SoftmaxCrossEntropyLossGrad(dloss, logits, labels): (softmax - onehot)
 * scaled by dloss (per element for reduction none, divided by the number of
 * counted labels for mean); ignored labels get zero gradient. Input 1 may be
 * the logits or the log-probabilities: softmax gives the same for both.
 */
static int
k_scelossgrad(const kctx *k, const ex_tensor *dl, const ex_tensor *lg, const ex_tensor *lb,
              ex_tensor *out)
{
    ir_reduction red = ir_sce_reduction(k->m, k->op);
    int rc, has_ii = ir_op_attr(k->m, k->op, "ignore_index") != NULL;
    int64_t ii = ir_op_int(k->m, k->op, "ignore_index", 0), n, c, d, count = 0;
    double *x, *p, *g;
    if (red == IR_REDUCTION_INVALID)
        return kfail(k, DI_EINVAL, "reduction must be mean, sum or none");
    if ((rc = sce_geometry(k, lg, 1, lb, 2, &n, &c, &d)) != 0)
        return rc;
    if (red == IR_REDUCTION_NONE ? !same_shape(dl, lb) : dl->numel != 1)
        return kfail(k, DI_EINVAL, "input 0 (dloss) has %zu elements, expected %zu", dl->numel,
                     red == IR_REDUCTION_NONE ? lb->numel : (size_t)1);
    x = dload(lg);
    p = di_malloc((lg->numel ? lg->numel : 1) * sizeof *p);
    g = di_calloc(lg->numel ? lg->numel : 1, sizeof *g);
    if (x == NULL || p == NULL || g == NULL) {
        rc = kfail(k, DI_ENOMEM, "out of memory");
        goto done;
    }
    log_softmax_c(x, p, n, c, d);
    for (size_t i = 0; i < lg->numel; i++)
        p[i] = exp(p[i]);
    for (size_t i = 0; i < lb->numel; i++) {
        int64_t t = ((const int64_t *)lb->data)[i];
        if (!(has_ii && t == ii))
            count++;
    }
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < d; j++) {
            int64_t t = ((const int64_t *)lb->data)[i * d + j];
            double s;
            if (has_ii && t == ii)
                continue;
            if (t < 0 || t >= c) {
                rc = kfail(k, DI_EINVAL, "label %lld is out of range for %lld classes",
                           (long long)t, (long long)c);
                goto done;
            }
            s = red == IR_REDUCTION_NONE ? ex_get(dl, (size_t)(i * d + j)) : ex_get(dl, 0);
            if (red == IR_REDUCTION_MEAN)
                s /= (double)count;
            for (int64_t l = 0; l < c; l++) {
                size_t o = (size_t)((i * c + l) * d + j);
                g[o] = s * (p[o] - (l == t ? 1.0 : 0.0));
            }
        }
    if ((rc = kalloc(k, out, lg->dtype, lg->rank, lg->dims)) != 0)
        goto done;
    dstore(out, g);
done:
    di_free(x);
    di_free(p);
    di_free(g);
    return rc;
}

/*
 * Vocabulary-parallel cross-entropy (docs/ops.md). Logits [N, C] are block
 * shard.pos of the classes; labels [N] are global class ids.
 */
static int
vocab_rows(const kctx *k, const ex_tensor *lg, uint32_t il, const ex_tensor *lb, uint32_t ib)
{
    int64_t n, c, d;
    int rc;
    if ((rc = sce_geometry(k, lg, il, lb, ib, &n, &c, &d)) != 0)
        return rc;
    if (lg->rank != 2)
        return kfail(k, DI_EINVAL, "logits must be [N,C]");
    return 0;
}

/* Is label t (row i) counted: not the ignore_index, and in range of the global classes. */
static int
vocab_label(const kctx *k, const ex_tensor *lb, int64_t i, int64_t classes, int64_t *t)
{
    int has_ii = ir_op_attr(k->m, k->op, "ignore_index") != NULL;
    int64_t ii = ir_op_int(k->m, k->op, "ignore_index", 0);
    *t = ((const int64_t *)lb->data)[i];
    if (has_ii && *t == ii)
        return 0;
    if (*t < 0 || *t >= classes)
        return kfail(k, DI_EINVAL, "label %lld is out of range for %lld classes", (long long)*t,
                     (long long)classes);
    return 1;
}

/* (local max, sum of exp(x - local max), the label's logit here or 0) per row. */
static int
k_vocabstats(const kctx *k, const ex_tensor *lg, const ex_tensor *lb, ex_tensor *out)
{
    int64_t n, c, dims[2];
    double *x, *st;
    int rc;
    if ((rc = vocab_rows(k, lg, 0, lb, 1)) != 0)
        return rc;
    n = lg->dims[0];
    c = lg->dims[1];
    x = dload(lg);
    st = di_calloc((size_t)(n ? n : 1) * 3, sizeof *st);
    if (x == NULL || st == NULL) {
        rc = kfail(k, DI_ENOMEM, "out of memory");
        goto done;
    }
    for (int64_t i = 0; i < n; i++) {
        const double *px = x + i * c;
        double mx = -INFINITY, sum = 0;
        int64_t t, local;
        if ((rc = vocab_label(k, lb, i, c * (int64_t)k->shard.n, &t)) < 0)
            goto done;
        for (int64_t l = 0; l < c; l++)
            mx = px[l] > mx ? px[l] : mx;
        for (int64_t l = 0; l < c; l++)
            sum += exp(px[l] - mx);
        local = t - c * (int64_t)k->shard.pos;
        st[i * 3] = mx;
        st[i * 3 + 1] = sum;
        st[i * 3 + 2] = rc == 1 && local >= 0 && local < c ? px[local] : 0.0;
    }
    dims[0] = n;
    dims[1] = 3;
    if ((rc = kalloc(k, out, lg->dtype, 2, dims)) == 0)
        dstore(out, st);
done:
    di_free(x);
    di_free(st);
    return rc < 0 ? rc : 0;
}

/* log of the sum of exp over every class of row i, from the group's stats [N, 3n]. */
static double
vocab_lse(const double *st, int64_t i, int64_t w)
{
    const double *r = st + i * w;
    double mx = -INFINITY, sum = 0;
    for (int64_t g = 0; g < w; g += 3)
        mx = r[g] > mx ? r[g] : mx;
    for (int64_t g = 0; g < w; g += 3)
        sum += r[g + 1] * exp(r[g] - mx);
    return sum > 0 ? mx + log(sum) : -INFINITY; /* no class: the log of an empty sum */
}

static double
vocab_target(const double *st, int64_t i, int64_t w)
{
    double t = 0;
    for (int64_t g = 0; g < w; g += 3)
        t += st[i * w + g + 2];
    return t;
}

static int
vocab_stats(const kctx *k, const ex_tensor *st, uint32_t is, const ex_tensor *lb)
{
    sbuf a;
    int rc;
    if ((rc = need_float(k, st, is)) != 0)
        return rc;
    if (st->rank != 2 || lb->rank != 1 || st->dims[0] != lb->dims[0] || st->dims[1] < 3 ||
        st->dims[1] % 3 != 0)
        return kfail(k, DI_EINVAL, "stats %s do not match %lld labels", shp(&a, st),
                     (long long)(lb->rank ? lb->dims[0] : 0));
    return 0;
}

static int
k_vocabloss(const kctx *k, const ex_tensor *st, const ex_tensor *lb, ex_tensor *out)
{
    ir_reduction red = ir_sce_reduction(k->m, k->op);
    int64_t n, w, count = 0, t;
    double *s, *loss, total = 0;
    int rc;
    if (red == IR_REDUCTION_INVALID)
        return kfail(k, DI_EINVAL, "reduction must be mean, sum or none");
    if ((rc = need_indices(k, lb, 1)) != 0 || (rc = vocab_stats(k, st, 0, lb)) != 0)
        return rc;
    n = st->dims[0];
    w = st->dims[1];
    s = dload(st);
    loss = di_calloc((size_t)(n ? n : 1), sizeof *loss);
    if (s == NULL || loss == NULL) {
        rc = kfail(k, DI_ENOMEM, "out of memory");
        goto done;
    }
    for (int64_t i = 0; i < n; i++) {
        /* The classes are not known here: the stats op checked the labels' range. */
        if ((rc = vocab_label(k, lb, i, INT64_MAX, &t)) < 0)
            goto done;
        if (rc == 0)
            continue;
        loss[i] = vocab_lse(s, i, w) - vocab_target(s, i, w);
        total += loss[i];
        count++;
    }
    if (red == IR_REDUCTION_NONE)
        rc = kalloc(k, out, st->dtype, 1, lb->dims);
    else
        rc = kalloc(k, out, st->dtype, 0, NULL);
    if (rc != 0)
        goto done;
    if (red == IR_REDUCTION_NONE)
        dstore(out, loss);
    else
        ex_set(out, 0, red == IR_REDUCTION_SUM ? total : total / (double)count);
done:
    di_free(s);
    di_free(loss);
    return rc < 0 ? rc : 0;
}

/* (dloss, logits, labels, stats) -> (softmax - onehot) on this block, scaled as the loss. */
static int
k_vocabgrad(const kctx *k, const ex_tensor *const *in, ex_tensor *out)
{
    const ex_tensor *dl = in[0], *lg = in[1], *lb = in[2], *st = in[3];
    ir_reduction red = ir_sce_reduction(k->m, k->op);
    int64_t n, c, w, count = 0, t;
    double *x = NULL, *s = NULL, *g = NULL;
    int rc;
    if (red == IR_REDUCTION_INVALID)
        return kfail(k, DI_EINVAL, "reduction must be mean, sum or none");
    if ((rc = vocab_rows(k, lg, 1, lb, 2)) != 0 || (rc = vocab_stats(k, st, 3, lb)) != 0)
        return rc;
    if (red == IR_REDUCTION_NONE ? !same_shape(dl, lb) : dl->numel != 1)
        return kfail(k, DI_EINVAL, "input 0 (dloss) has %zu elements, expected %zu", dl->numel,
                     red == IR_REDUCTION_NONE ? lb->numel : (size_t)1);
    n = lg->dims[0];
    c = lg->dims[1];
    w = st->dims[1];
    x = dload(lg);
    s = dload(st);
    g = di_calloc(lg->numel ? lg->numel : 1, sizeof *g);
    if (x == NULL || s == NULL || g == NULL) {
        rc = kfail(k, DI_ENOMEM, "out of memory");
        goto done;
    }
    for (int64_t i = 0; i < n; i++) {
        if ((rc = vocab_label(k, lb, i, c * (int64_t)k->shard.n, &t)) < 0)
            goto done;
        count += rc;
    }
    for (int64_t i = 0; i < n; i++) {
        double lse, sc;
        int64_t local;
        if ((rc = vocab_label(k, lb, i, c * (int64_t)k->shard.n, &t)) <= 0)
            continue;
        lse = vocab_lse(s, i, w);
        sc = red == IR_REDUCTION_NONE ? ex_get(dl, (size_t)i) : ex_get(dl, 0);
        if (red == IR_REDUCTION_MEAN)
            sc /= (double)count;
        local = t - c * (int64_t)k->shard.pos;
        for (int64_t l = 0; l < c; l++)
            g[i * c + l] = sc * (exp(x[i * c + l] - lse) - (l == local ? 1.0 : 0.0));
    }
    if ((rc = kalloc(k, out, lg->dtype, lg->rank, lg->dims)) == 0)
        dstore(out, g);
done:
    di_free(x);
    di_free(s);
    di_free(g);
    return rc < 0 ? rc : 0;
}

/* ---- optimizers ---- */

static int
k_sgd(const kctx *k, const ex_tensor *w, const ex_tensor *dw, ex_tensor *out)
{
    double lr = ir_op_float(k->m, k->op, "lr", 0.01);
    int rc;
    if ((rc = need_float(k, w, 0)) != 0 || (rc = need_same_shape(k, w, 0, dw, 1)) != 0 ||
        (rc = kalloc(k, out, w->dtype, w->rank, w->dims)) != 0)
        return rc;
    for (size_t i = 0; i < w->numel; i++)
        ex_set(out, i, ex_get(w, i) - lr * ex_get(dw, i));
    return 0;
}

/* AdamOptimizer(w, dw, m, v){lr, beta1, beta2, epsilon, step} -> (w', m', v'). */
static int
k_adam(const kctx *k, const ex_tensor *const *in, uint32_t nin, ex_tensor *out)
{
    double lr = ir_op_float(k->m, k->op, "lr", 1e-3);
    double b1 = ir_op_float(k->m, k->op, "beta1", 0.9);
    double b2 = ir_op_float(k->m, k->op, "beta2", 0.999);
    double eps = ir_op_float(k->m, k->op, "epsilon", 1e-8);
    int64_t step = ir_op_int(k->m, k->op, "step", 1);
    double c1, c2;
    int rc;
    if (step < 1)
        return kfail(k, DI_EINVAL, "step %lld must be >= 1", (long long)step);
    for (uint32_t i = 0; i < nin; i++)
        if ((rc = need_float(k, in[i], i)) != 0 || (rc = need_same_shape(k, in[0], 0, in[i], i)))
            return rc;
    for (uint32_t i = 0; i + 1 < nin; i++)
        if ((rc = kalloc(k, &out[i], in[i == 0 ? 0 : i + 1]->dtype, in[0]->rank, in[0]->dims))) {
            for (uint32_t j = 0; j < i; j++)
                ex_tensor_fini(&out[j]);
            return rc;
        }
    c1 = 1.0 - pow(b1, (double)step);
    c2 = 1.0 - pow(b2, (double)step);
    /* With master weights (input 4) the update applies to them; w becomes their rounded copy. */
    for (size_t i = 0; i < in[0]->numel; i++) {
        double g = ex_get(in[1], i);
        double m = b1 * ex_get(in[2], i) + (1.0 - b1) * g;
        double v = b2 * ex_get(in[3], i) + (1.0 - b2) * g * g;
        double mh = m / c1, vh = v / c2;
        double w = ex_get(in[nin == 5 ? 4 : 0], i) - lr * mh / (sqrt(vh) + eps);
        ex_set(&out[0], i, w);
        ex_set(&out[1], i, m);
        ex_set(&out[2], i, v);
        if (nin == 5)
            ex_set(&out[3], i, w);
    }
    for (uint32_t i = 0; i + 1 < nin; i++)
        ex_fixup(&out[i]);
    return 0;
}

/* ---- dispatch ---- */

int
ex_kernel_run(const ir_module *m, ir_id op, const ex_tensor *const *in, uint32_t nin,
              ex_tensor *out, uint32_t nout, ex_shard shard, di_error *err)
{
    kctx k = {m, op, err, shard};
    int kind = m->ops[op].kind;
    const ir_opinfo *info;
    if (kind <= IR_OP_NONE || kind >= IR_NOPKIND)
        return kfail(&k, DI_EINVAL, "invalid op kind");
    info = ir_opkind_info(kind);
    if (nin < (uint32_t)info->min_in || (info->max_in >= 0 && nin > (uint32_t)info->max_in))
        return kfail(&k, DI_EINVAL, "has %u inputs, expected %d..%d", nin, info->min_in,
                     info->max_in);
    if (nout < (uint32_t)info->min_out || (info->max_out >= 0 && nout > (uint32_t)info->max_out))
        return kfail(&k, DI_EINVAL, "has %u results, expected %d..%d", nout, info->min_out,
                     info->max_out);
    for (uint32_t i = 0; i < nout; i++)
        memset(&out[i], 0, sizeof out[i]);
    switch (kind) {
    case IR_OP_MATMUL:
        return k_matmul(&k, in[0], in[1], out);
    case IR_OP_GEMM:
        return k_gemm(&k, in, nin, out);
    case IR_OP_ADD:
    case IR_OP_SUB:
    case IR_OP_MUL:
    case IR_OP_DIV:
    case IR_OP_POW:
        return k_binary(&k, in[0], in[1], out);
    case IR_OP_SQRT:
    case IR_OP_RELU:
    case IR_OP_GELU:
    case IR_OP_SWISH:
    case IR_OP_TANH:
    case IR_OP_SIGMOID:
    case IR_OP_ERF:
        return k_unary(&k, in[0], out);
    case IR_OP_IDENTITY:
    case IR_OP_AFTER:
        return k_reshape_copy(&k, in[0], in[0]->rank, in[0]->dims, out);
    case IR_OP_CAST:
        return k_cast(&k, in[0], out);
    case IR_OP_DROPOUT:
        return k_dropout(&k, in[0], out, nout);
    case IR_OP_SOFTMAX:
        return k_softmax(&k, in[0], out);
    case IR_OP_LAYERNORM:
    case IR_OP_RMSNORM:
        return k_layernorm(&k, in, nin, out, nout);
    case IR_OP_WHERE:
        return k_where(&k, in[0], in[1], in[2], out);
    case IR_OP_RESHAPE:
        return k_reshape(&k, in[0], out);
    case IR_OP_TRANSPOSE:
        return k_transpose(&k, in[0], out);
    case IR_OP_CONCAT:
        return k_concat(&k, in, nin, out);
    case IR_OP_SPLIT:
        return k_split(&k, in[0], out, nout);
    case IR_OP_SLICE:
        return k_slice(&k, in[0], out);
    case IR_OP_GATHER:
        return k_gather(&k, in[0], in[1], out);
    case IR_OP_FLASHATTN:
        return k_flashattn(&k, in, nin, out);
    case IR_OP_FLASHATTNGRAD:
        return k_flashattngrad(&k, in, out);
    case IR_OP_TOPK:
        return k_topk(&k, in[0], out);
    case IR_OP_MOESLOTS:
        return k_moeslots(&k, in[0], out);
    case IR_OP_MOEDISPATCH:
        return k_moemove(&k, in[0], in[1], 0, out);
    case IR_OP_MOECOMBINE:
        return k_moemove(&k, in[0], in[1], 1, out);
    case IR_OP_TOPKGRAD:
        return k_topkgrad(&k, in[0], in[1], out);
    case IR_OP_UNSQUEEZE:
        return k_unsqueeze(&k, in[0], out);
    case IR_OP_SQUEEZE:
        return k_squeeze(&k, in[0], out);
    case IR_OP_REDUCEMEAN:
    case IR_OP_REDUCESUM:
        return k_reduce(&k, in[0], out);
    case IR_OP_CONSTANT:
        return k_constant(&k, out);
    case IR_OP_MSELOSS:
        return k_mseloss(&k, in[0], in[1], out);
    case IR_OP_SCELOSS:
        return k_sceloss(&k, in[0], in[1], out, nout);
    case IR_OP_MATMULGRAD:
        return k_matmulgrad(&k, in[0], in[1], in[2], out);
    case IR_OP_RELUGRAD:
    case IR_OP_GELUGRAD:
    case IR_OP_SWISHGRAD:
    case IR_OP_TANHGRAD:
    case IR_OP_SIGMOIDGRAD:
        return k_act_grad(&k, in[0], in[1], out);
    case IR_OP_SOFTMAXGRAD:
        return k_softmaxgrad(&k, in[0], in[1], out);
    case IR_OP_LAYERNORMGRAD:
    case IR_OP_RMSNORMGRAD:
        return k_layernormgrad(&k, in, nin, out, nout);
    case IR_OP_DROPOUTGRAD:
        return k_dropoutgrad(&k, in[0], in[1], out);
    case IR_OP_MSELOSSGRAD:
        return k_mselossgrad(&k, in[0], in[1], in[2], out);
    case IR_OP_SCELOSSGRAD:
        return k_scelossgrad(&k, in[0], in[1], in[2], out);
    case IR_OP_GATHERGRAD:
        return k_gathergrad(&k, in[0], in[1], out);
    case IR_OP_VOCABSTATS:
        return k_vocabstats(&k, in[0], in[1], out);
    case IR_OP_VOCABLOSS:
        return k_vocabloss(&k, in[0], in[1], out);
    case IR_OP_VOCABGRAD:
        return k_vocabgrad(&k, in, out);
    case IR_OP_REDUCESUMTO:
        return k_reducesumto(&k, in[0], out);
    case IR_OP_SGD:
        return k_sgd(&k, in[0], in[1], out);
    case IR_OP_ADAM:
        return k_adam(&k, in, nin, out);
    case IR_OP_OPAQUE:
        return kfail(&k, DI_EUNSUPPORTED,
                     "an opaque op has no kernel (it can be simulated "
                     "with a measured time, not executed)");
    default:
        return kfail(&k, DI_EUNSUPPORTED, "no kernel for this op");
    }
}
