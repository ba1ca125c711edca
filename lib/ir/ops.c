/*
 * ops.c: the op table's functions: shape inference (infer_*), FLOP and byte
 * counts (cost_*), and name lookup including DistIR's aliases.
 *
 * Shape inference reads the types of an op's inputs (and, for a few ops, the
 * declared types of its results) and writes the result type ids; it interns
 * new types, which may move every array of the module, so the helpers here
 * copy what they read into a local `tensor` before building anything. Every
 * error is DI_EVERIFY with a message that starts with the op kind (and the
 * op's first result name when it has one) and names the offending input.
 *
 * Placement rules (docs/ops.md): a compute op's tensor inputs live in one
 * place (a device, the device variable of the enclosing pmap, or a mesh) and
 * its results live there too; on a mesh the results are replicated (sharding
 * propagation refines them later). An unplaced scalar is a constant that may
 * join tensors anywhere. Communication ops have a tuple form (one tensor per
 * device, DistIR) and a mesh form (mesh + mesh_axes, MLIR's mesh dialect).
 *
 * Costs count FLOPs per execution and bytes read and written in device
 * memory; for communication ops, bytes are per participant.
 */
#include "ir/ir.h"
#include "ir/safe.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- error messages ---- */

ir_label
ir_op_label(const ir_module *m, ir_id op)
{
    ir_label l;
    const ir_op *o;
    const char *kind = "?", *value = "", *name;
    if (op == 0 || op >= m->nop) {
        snprintf(l.s, sizeof l.s, "? (op %u)", op);
        return l;
    }
    o = &m->ops[op];
    if (o->kind == IR_OP_OPAQUE && *ir_safe_str(m, o->opaque) != '\0')
        kind = ir_safe_str(m, o->opaque);
    else if (ir_safe_kind(o->kind))
        kind = ir_opkind_name(o->kind);
    if (o->noutput > 0 && o->outputs > 0 && o->outputs < m->nvalue)
        value = ir_safe_str(m, m->values[o->outputs].name);
    name = ir_safe_str(m, o->name);
    if (*value != '\0')
        snprintf(l.s, sizeof l.s, "%s %%%s", kind, value);
    else if (*name != '\0')
        snprintf(l.s, sizeof l.s, "%s '%s'", kind, name);
    else
        snprintf(l.s, sizeof l.s, "%s (op %u)", kind, op);
    return l;
}

static int fail(const ir_module *m, ir_id op, di_error *err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Sets DI_EVERIFY with "<op label>: <message>"; returns DI_EVERIFY. */
static int
fail(const ir_module *m, ir_id op, di_error *err, const char *fmt, ...)
{
    char msg[800];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return di_error_set(err, DI_EVERIFY, "%s: %s", ir_op_label(m, op).s, msg);
}

/* A buffer big enough for any shape "[d0,d1,...]" of rank <= IR_MAX_RANK. */
typedef struct sbuf {
    char s[IR_MAX_RANK * 22 + 8];
} sbuf;

static const char *
shape_str(sbuf *b, uint32_t rank, const int64_t *dims)
{
    size_t len = 0;
    b->s[len++] = '[';
    for (uint32_t i = 0; i < rank && i < IR_MAX_RANK; i++)
        len += (size_t)snprintf(b->s + len, sizeof b->s - len, "%s%lld", i ? "," : "",
                                (long long)dims[i]);
    snprintf(b->s + len, sizeof b->s - len, "]");
    return b->s;
}

/* ---- reading types ---- */

/* Where a tensor lives: nowhere, a device, a device variable, or a mesh. */
typedef struct site {
    int32_t device; /* device id or IR_DEVICE_NONE */
    ir_id devvar;   /* string id or 0 */
    ir_id mesh;     /* mesh id or 0 */
} site;

/* A copy of a tensor type, safe to keep while new types are interned. */
typedef struct tensor {
    ir_id type;
    ir_dtype dtype;
    uint32_t rank;
    int64_t dims[IR_MAX_RANK];
    site at;
    uint32_t nplace; /* mesh rank when at.mesh != 0 */
    int64_t placements[IR_MAX_RANK];
} tensor;

static int
site_unplaced(const site *s)
{
    return s->device == IR_DEVICE_NONE && s->devvar == 0 && s->mesh == 0;
}

static int
site_equal(const site *a, const site *b)
{
    return a->device == b->device && a->devvar == b->devvar && a->mesh == b->mesh;
}

typedef struct pbuf {
    char s[160];
} pbuf;

static const char *
site_str(const ir_module *m, const site *s, pbuf *b)
{
    if (s->mesh)
        snprintf(b->s, sizeof b->s, "mesh @%s", ir_str_get(m, m->meshes[s->mesh].name));
    else if (s->devvar)
        snprintf(b->s, sizeof b->s, "device variable %s", ir_str_get(m, s->devvar));
    else if (s->device != IR_DEVICE_NONE)
        snprintf(b->s, sizeof b->s, "device %d", (int)s->device);
    else
        snprintf(b->s, sizeof b->s, "no device");
    return b->s;
}

static const char *
place_str(int64_t p, pbuf *b)
{
    if (p == IR_PLACE_R)
        snprintf(b->s, sizeof b->s, "R");
    else if (p == IR_PLACE_PSUM)
        snprintf(b->s, sizeof b->s, "P(sum)");
    else if (p == IR_PLACE_PMAX)
        snprintf(b->s, sizeof b->s, "P(max)");
    else
        snprintf(b->s, sizeof b->s, "S[%lld]", (long long)p);
    return b->s;
}

/* "f32[3,5] on device 0" or "a tuple of 4". */
typedef struct tbuf {
    char s[IR_MAX_RANK * 22 + 200];
} tbuf;

static const char *
type_str(const ir_module *m, ir_id ty, tbuf *b)
{
    const ir_type *t;
    sbuf sb;
    pbuf pb;
    site s;
    if (ty == 0 || ty >= m->ntype) {
        snprintf(b->s, sizeof b->s, "no type");
        return b->s;
    }
    t = &m->types[ty];
    if (t->kind == IR_TYPE_TUPLE) {
        snprintf(b->s, sizeof b->s, "a tuple of %u", t->nelem);
        return b->s;
    }
    s.device = t->device;
    s.devvar = t->devvar;
    s.mesh = t->mesh < m->nmesh ? t->mesh : 0;
    snprintf(b->s, sizeof b->s, "%s%s on %s", ir_dtype_name((ir_dtype)t->dtype),
             shape_str(&sb, t->rank, m->ints + t->dims), site_str(m, &s, &pb));
    return b->s;
}

/*
 * Copies tensor type ty into *t, checking it is well formed. what and i name
 * it in errors ("input 1", "input 0 element 3", "body result 2").
 */
static int
load_type(const ir_module *m, ir_id op, ir_id ty, const char *what, int64_t i, tensor *t,
          di_error *err)
{
    const ir_type *tp;
    memset(t, 0, sizeof *t);
    if (ty == 0 || ty >= m->ntype)
        return fail(m, op, err, "%s %lld has no type", what, (long long)i);
    tp = &m->types[ty];
    if (tp->kind == IR_TYPE_TUPLE)
        return fail(m, op, err,
                    "%s %lld is a tuple of %u, expected a tensor (take an element with "
                    "dist.tuple_get, or map the op over devices with dist.pmap)",
                    what, (long long)i, tp->nelem);
    if (tp->kind != IR_TYPE_TENSOR)
        return fail(m, op, err, "%s %lld has no type", what, (long long)i);
    if (tp->dtype == IR_DTYPE_NONE || tp->dtype >= IR_NDTYPE)
        return fail(m, op, err, "%s %lld has an invalid dtype", what, (long long)i);
    if (tp->rank > IR_MAX_RANK)
        return fail(m, op, err, "%s %lld has rank %u, more than %d", what, (long long)i, tp->rank,
                    IR_MAX_RANK);
    t->type = ty;
    t->dtype = (ir_dtype)tp->dtype;
    t->rank = tp->rank;
    for (uint32_t d = 0; d < t->rank; d++) {
        t->dims[d] = m->ints[tp->dims + d];
        if (t->dims[d] < 0)
            return fail(m, op, err, "%s %lld has a negative dimension (%lld at %u)", what,
                        (long long)i, (long long)t->dims[d], d);
    }
    t->at.device = tp->device;
    t->at.devvar = tp->devvar;
    t->at.mesh = tp->mesh;
    if (tp->mesh) {
        if (tp->mesh >= m->nmesh)
            return fail(m, op, err, "%s %lld names mesh %u, which does not exist", what,
                        (long long)i, tp->mesh);
        t->nplace = m->meshes[tp->mesh].rank;
        if (t->nplace > IR_MAX_RANK)
            return fail(m, op, err, "%s %lld: mesh rank %u exceeds %d", what, (long long)i,
                        t->nplace, IR_MAX_RANK);
        for (uint32_t a = 0; a < t->nplace; a++) {
            int64_t p = m->ints[tp->placements + a];
            t->placements[a] = p;
            if (p != IR_PLACE_R && p != IR_PLACE_PSUM && p != IR_PLACE_PMAX &&
                !(p >= 0 && p < (int64_t)t->rank))
                return fail(m, op, err, "%s %lld has an invalid placement %lld on mesh axis %u",
                            what, (long long)i, (long long)p, a);
        }
    }
    return 0;
}

static int
load_input(const ir_module *m, ir_id op, uint32_t i, tensor *t, di_error *err)
{
    return load_type(m, op, m->values[ir_op_input(m, op, i)].type, "input", i, t, err);
}

/* Loads inputs 0..n-1 into t[]. */
static int
load_inputs(const ir_module *m, ir_id op, uint32_t n, tensor *t, di_error *err)
{
    int rc;
    for (uint32_t i = 0; i < n; i++)
        if ((rc = load_input(m, op, i, &t[i], err)) != 0)
            return rc;
    return 0;
}

/* An unplaced scalar is a constant usable anywhere. */
static int
is_floating(const tensor *t)
{
    return t->rank == 0 && site_unplaced(&t->at);
}

/*
 * Folds tensor t (input index i) into the running common site *acc of the
 * inputs seen so far (*acc_index is the input that fixed it, or -1 while all
 * inputs seen float).
 */
static int
merge_site(const ir_module *m, ir_id op, site *acc, int64_t *acc_index, const tensor *t, uint32_t i,
           di_error *err)
{
    pbuf a, b;
    if (is_floating(t))
        return 0;
    if (*acc_index < 0) {
        *acc = t->at;
        *acc_index = i;
        return 0;
    }
    if (site_equal(acc, &t->at))
        return 0;
    if (acc->device != IR_DEVICE_NONE && t->at.device != IR_DEVICE_NONE)
        return fail(m, op, err,
                    "inputs on different devices (%d and %d): insert a dist.send to move input "
                    "%u to device %d",
                    (int)acc->device, (int)t->at.device, i, (int)acc->device);
    return fail(m, op, err, "inputs in different places: input %lld on %s, input %u on %s",
                (long long)*acc_index, site_str(m, acc, &a), i, site_str(m, &t->at, &b));
}

/* The site shared by t[0..n). */
static int
common_site(const ir_module *m, ir_id op, const tensor *t, uint32_t n, site *out, di_error *err)
{
    int64_t idx = -1;
    int rc;
    out->device = IR_DEVICE_NONE;
    out->devvar = 0;
    out->mesh = 0;
    for (uint32_t i = 0; i < n; i++)
        if ((rc = merge_site(m, op, out, &idx, &t[i], i, err)) != 0)
            return rc;
    return 0;
}

/* A compute result at site s: on a mesh it is replicated on every axis. */
static ir_id
result_type(ir_module *m, const site *s, ir_dtype dt, uint32_t rank, const int64_t *dims)
{
    if (s->mesh) {
        int64_t r[IR_MAX_RANK];
        uint32_t n = m->meshes[s->mesh].rank;
        for (uint32_t a = 0; a < n && a < IR_MAX_RANK; a++)
            r[a] = IR_PLACE_R;
        return ir_type_dtensor(m, dt, rank, dims, s->mesh, r);
    }
    if (s->devvar)
        return ir_type_tensor_var(m, dt, rank, dims, s->devvar);
    return ir_type_tensor(m, dt, rank, dims, s->device);
}

/* ---- small checks ---- */

/* a * b for non-negative a, b; -1 on overflow. */
static int
mul_dim(int64_t a, int64_t b, int64_t *out)
{
    if (a != 0 && b > INT64_MAX / a)
        return -1;
    *out = a * b;
    return 0;
}

/* The element count of a shape, or -1 when it overflows int64. */
static int64_t
numel_checked(uint32_t rank, const int64_t *dims)
{
    int64_t n = 1;
    for (uint32_t i = 0; i < rank; i++)
        if (mul_dim(n, dims[i], &n) != 0)
            return -1;
    return n;
}

static int
dims_equal(const tensor *a, const tensor *b)
{
    return a->rank == b->rank &&
           (a->rank == 0 || memcmp(a->dims, b->dims, a->rank * sizeof a->dims[0]) == 0);
}

static int
check_same_dtype(const ir_module *m, ir_id op, const tensor *a, uint32_t ia, const tensor *b,
                 uint32_t ib, di_error *err)
{
    if (a->dtype == b->dtype)
        return 0;
    return fail(m, op, err, "input %u has dtype %s, expected %s (the dtype of input %u)", ib,
                ir_dtype_name(b->dtype), ir_dtype_name(a->dtype), ia);
}

static int
check_same_shape(const ir_module *m, ir_id op, const tensor *a, uint32_t ia, const tensor *b,
                 uint32_t ib, di_error *err)
{
    sbuf x, y;
    if (dims_equal(a, b))
        return 0;
    return fail(m, op, err, "input %u has shape %s, expected %s (the shape of input %u)", ib,
                shape_str(&x, b->rank, b->dims), shape_str(&y, a->rank, a->dims), ia);
}

static int
check_float(const ir_module *m, ir_id op, const tensor *t, uint32_t i, di_error *err)
{
    if (ir_dtype_is_float(t->dtype))
        return 0;
    return fail(m, op, err, "input %u has dtype %s, expected a floating-point dtype", i,
                ir_dtype_name(t->dtype));
}

static int
check_index_dtype(const ir_module *m, ir_id op, const tensor *t, uint32_t i, di_error *err)
{
    if (t->dtype == IR_I32 || t->dtype == IR_I64)
        return 0;
    return fail(m, op, err, "input %u has dtype %s, expected i32 or i64 indices", i,
                ir_dtype_name(t->dtype));
}

/* Normalizes axis into [0, rank) (ONNX: negative counts from the end). */
static int
norm_axis(const ir_module *m, ir_id op, const char *attr, int64_t axis, uint32_t rank,
          uint32_t *out, di_error *err)
{
    *out = 0;
    if (axis < -(int64_t)rank || axis >= (int64_t)rank)
        return fail(m, op, err, "%s %lld is out of range for rank %u (allowed %lld..%lld)", attr,
                    (long long)axis, rank, -(long long)rank, (long long)rank - 1);
    *out = (uint32_t)(axis < 0 ? axis + (int64_t)rank : axis);
    return 0;
}

/* Reads a required int attribute. */
static int
attr_int_req(const ir_module *m, ir_id op, const char *key, int64_t *v, di_error *err)
{
    const ir_attr *a = ir_op_attr(m, op, key);
    *v = 0;
    if (a == NULL || a->kind != IR_ATTR_INT)
        return fail(m, op, err, "missing int attribute %s", key);
    *v = a->i;
    return 0;
}

/*
 * Copies an optional ints attribute into v[0..max); *n = -1 when absent.
 * Longer lists are an error.
 */
static int
attr_ints(const ir_module *m, ir_id op, const char *key, int64_t *v, uint32_t max, int64_t *n,
          di_error *err)
{
    const ir_attr *a = ir_op_attr(m, op, key);
    if (a == NULL) {
        *n = -1;
        return 0;
    }
    if (a->kind != IR_ATTR_INTS)
        return fail(m, op, err, "attribute %s must be a list of ints", key);
    if (a->n > max)
        return fail(m, op, err, "attribute %s has %u entries, at most %u allowed", key, a->n, max);
    if (a->n)
        memcpy(v, m->ints + a->off, a->n * sizeof *v);
    *n = a->n;
    return 0;
}

/*
 * Normalizes a list of axes against rank, rejecting repeats; sets mask[axis]
 * for each.
 */
static int
norm_axes(const ir_module *m, ir_id op, const char *attr, const int64_t *axes, uint32_t n,
          uint32_t rank, uint8_t *mask, di_error *err)
{
    int rc;
    memset(mask, 0, IR_MAX_RANK);
    for (uint32_t j = 0; j < n; j++) {
        uint32_t a = 0;
        if ((rc = norm_axis(m, op, attr, axes[j], rank, &a, err)) != 0)
            return rc;
        if (mask[a])
            return fail(m, op, err, "%s names axis %u twice", attr, a);
        mask[a] = 1;
    }
    return 0;
}

/*
 * numpy broadcasting of shapes a and b into out (rank *rout). Returns -1 with
 * *bad set to the offending output dimension when they are incompatible.
 */
static int
broadcast_dims(uint32_t ra, const int64_t *a, uint32_t rb, const int64_t *b, uint32_t *rout,
               int64_t *out, uint32_t *bad)
{
    uint32_t r = ra > rb ? ra : rb;
    for (uint32_t i = 0; i < r; i++) {
        /* i counts from the right. */
        int64_t da = i < ra ? a[ra - 1 - i] : 1;
        int64_t db = i < rb ? b[rb - 1 - i] : 1;
        int64_t d;
        if (da == db || db == 1)
            d = da;
        else if (da == 1)
            d = db;
        else {
            *bad = r - 1 - i;
            return -1;
        }
        out[r - 1 - i] = d;
    }
    *rout = r;
    return 0;
}

/* ---- compute ops: elementwise ---- */

static int
infer_broadcast(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    tensor in[2];
    site s;
    int64_t dims[IR_MAX_RANK];
    uint32_t rank, bad;
    sbuf x, y;
    int rc;
    if ((rc = load_inputs(m, op, 2, in, err)) != 0 ||
        (rc = common_site(m, op, in, 2, &s, err)) != 0 ||
        (rc = check_same_dtype(m, op, &in[0], 0, &in[1], 1, err)) != 0)
        return rc;
    if (broadcast_dims(in[0].rank, in[0].dims, in[1].rank, in[1].dims, &rank, dims, &bad) != 0)
        return fail(m, op, err,
                    "input 1 has shape %s, which does not broadcast with input 0's shape %s "
                    "(result dimension %u)",
                    shape_str(&x, in[1].rank, in[1].dims), shape_str(&y, in[0].rank, in[0].dims),
                    bad);
    out[0] = result_type(m, &s, in[0].dtype, rank, dims);
    return 0;
}

static int
infer_where(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    tensor in[3];
    site s;
    int64_t d1[IR_MAX_RANK], d2[IR_MAX_RANK];
    uint32_t r1, r2, bad;
    sbuf x, y;
    int rc;
    if ((rc = load_inputs(m, op, 3, in, err)) != 0 ||
        (rc = common_site(m, op, in, 3, &s, err)) != 0 ||
        (rc = check_same_dtype(m, op, &in[1], 1, &in[2], 2, err)) != 0)
        return rc;
    if (in[0].dtype != IR_BOOL)
        return fail(m, op, err, "input 0 (the condition) has dtype %s, expected i1",
                    ir_dtype_name(in[0].dtype));
    if (broadcast_dims(in[0].rank, in[0].dims, in[1].rank, in[1].dims, &r1, d1, &bad) != 0)
        return fail(m, op, err,
                    "input 1 has shape %s, which does not broadcast with input 0's "
                    "shape %s",
                    shape_str(&x, in[1].rank, in[1].dims), shape_str(&y, in[0].rank, in[0].dims));
    if (broadcast_dims(r1, d1, in[2].rank, in[2].dims, &r2, d2, &bad) != 0)
        return fail(m, op, err,
                    "input 2 has shape %s, which does not broadcast with %s (inputs "
                    "0 and 1 broadcast)",
                    shape_str(&x, in[2].rank, in[2].dims), shape_str(&y, r1, d1));
    out[0] = result_type(m, &s, in[1].dtype, r2, d2);
    return 0;
}

/*
 * Typed like their (first) input: Sqrt, Relu, Gelu, Swish, Tanh, Sigmoid, Identity, Softmax,
 * dist.after
 */
static int
infer_same(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    int kind = m->ops[op].kind;
    tensor x;
    site s;
    int rc;
    if ((rc = load_input(m, op, 0, &x, err)) != 0 || (rc = common_site(m, op, &x, 1, &s, err)) != 0)
        return rc;
    if (kind != IR_OP_RELU && kind != IR_OP_IDENTITY && kind != IR_OP_AFTER &&
        (rc = check_float(m, op, &x, 0, err)) != 0)
        return rc;
    if (kind == IR_OP_GELU && ir_gelu_tanh(m, op) < 0)
        return fail(m, op, err, "approximate must be none or tanh");
    if (kind == IR_OP_SOFTMAX) {
        uint32_t axis;
        if (x.rank == 0)
            return fail(m, op, err, "input 0 is a scalar; softmax needs rank >= 1");
        if ((rc = norm_axis(m, op, "axis", ir_op_int(m, op, "axis", -1), x.rank, &axis, err)) != 0)
            return rc;
    }
    out[0] = result_type(m, &s, x.dtype, x.rank, x.dims);
    return 0;
}

static int
infer_cast(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    tensor x;
    site s;
    int64_t to;
    ir_dtype dt;
    int rc;
    if ((rc = load_input(m, op, 0, &x, err)) != 0 ||
        (rc = common_site(m, op, &x, 1, &s, err)) != 0 ||
        (rc = attr_int_req(m, op, "to", &to, err)) != 0)
        return rc;
    if ((dt = ir_dtype_from_onnx(to)) == IR_DTYPE_NONE)
        return fail(m, op, err,
                    "to = %lld is not a supported ONNX data type (1 f32, 10 f16, 16 bf16, "
                    "11 f64, 7 i64, 6 i32, 3 i8, 9 bool)",
                    (long long)to);
    out[0] = result_type(m, &s, dt, x.rank, x.dims);
    return 0;
}

static int
infer_dropout(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    tensor x;
    site s;
    double ratio = ir_op_float(m, op, "ratio", 0.5);
    int rc;
    if ((rc = load_input(m, op, 0, &x, err)) != 0 ||
        (rc = common_site(m, op, &x, 1, &s, err)) != 0 ||
        (rc = check_float(m, op, &x, 0, err)) != 0)
        return rc;
    if (!(ratio >= 0.0 && ratio < 1.0))
        return fail(m, op, err, "ratio %g is outside [0, 1)", ratio);
    out[0] = result_type(m, &s, x.dtype, x.rank, x.dims);
    if (m->ops[op].noutput > 1)
        out[1] = result_type(m, &s, IR_BOOL, x.rank, x.dims);
    return 0;
}

/* ---- compute ops: linear algebra ---- */

/*
 * numpy matmul of a (input 0) and b (input 1): writes the result shape, and
 * the sizes the cost needs. Rank-1 operands get a 1 prepended (a) or
 * appended (b) that is removed from the result.
 */
static int
matmul_shape(const ir_module *m, ir_id op, const tensor *a, const tensor *b, uint32_t *rank,
             int64_t *dims, di_error *err)
{
    sbuf x, y;
    int64_t ka, kb, bd[IR_MAX_RANK];
    uint32_t rba, rbb, rbatch, bad, r = 0;
    if (a->rank == 0)
        return fail(m, op, err, "input 0 is a scalar; matmul needs rank >= 1");
    if (b->rank == 0)
        return fail(m, op, err, "input 1 is a scalar; matmul needs rank >= 1");
    ka = a->dims[a->rank - 1];
    kb = b->rank == 1 ? b->dims[0] : b->dims[b->rank - 2];
    if (ka != kb) {
        const char *expect = b->rank == 1 ? "[%lld]" : b->rank == 2 ? "[%lld,*]" : "[...,%lld,*]";
        char e[64];
        snprintf(e, sizeof e, expect, (long long)ka);
        return fail(m, op, err,
                    "input 1 has shape %s, expected %s (inner dimensions differ: input 0 has "
                    "shape %s)",
                    shape_str(&x, b->rank, b->dims), e, shape_str(&y, a->rank, a->dims));
    }
    rba = a->rank > 2 ? a->rank - 2 : 0;
    rbb = b->rank > 2 ? b->rank - 2 : 0;
    if (broadcast_dims(rba, a->dims, rbb, b->dims, &rbatch, bd, &bad) != 0)
        return fail(m, op, err, "batch dimensions of input 0 %s and input 1 %s do not broadcast",
                    shape_str(&x, a->rank, a->dims), shape_str(&y, b->rank, b->dims));
    for (uint32_t i = 0; i < rbatch; i++)
        dims[r++] = bd[i];
    if (a->rank > 1)
        dims[r++] = a->dims[a->rank - 2];
    if (b->rank > 1)
        dims[r++] = b->dims[b->rank - 1];
    *rank = r;
    return 0;
}

static int
infer_matmul(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    tensor in[2];
    site s;
    int64_t dims[IR_MAX_RANK];
    uint32_t rank;
    int rc;
    if ((rc = load_inputs(m, op, 2, in, err)) != 0 ||
        (rc = common_site(m, op, in, 2, &s, err)) != 0 ||
        (rc = check_same_dtype(m, op, &in[0], 0, &in[1], 1, err)) != 0 ||
        (rc = matmul_shape(m, op, &in[0], &in[1], &rank, dims, err)) != 0)
        return rc;
    out[0] = result_type(m, &s, in[0].dtype, rank, dims);
    return 0;
}

static int
infer_gemm(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    tensor in[3];
    uint32_t n = m->ops[op].ninput;
    int ta = ir_op_int(m, op, "transA", 0) != 0, tb = ir_op_int(m, op, "transB", 0) != 0;
    int64_t mm, k, kb, nn, dims[2];
    site s;
    sbuf x, y;
    int rc;
    if ((rc = load_inputs(m, op, n, in, err)) != 0 ||
        (rc = common_site(m, op, in, n, &s, err)) != 0)
        return rc;
    for (uint32_t i = 0; i < 2; i++)
        if (in[i].rank != 2)
            return fail(m, op, err, "input %u has shape %s, expected rank 2", i,
                        shape_str(&x, in[i].rank, in[i].dims));
    for (uint32_t i = 1; i < n; i++)
        if ((rc = check_same_dtype(m, op, &in[0], 0, &in[i], i, err)) != 0)
            return rc;
    mm = ta ? in[0].dims[1] : in[0].dims[0];
    k = ta ? in[0].dims[0] : in[0].dims[1];
    kb = tb ? in[1].dims[1] : in[1].dims[0];
    nn = tb ? in[1].dims[0] : in[1].dims[1];
    if (k != kb)
        return fail(m, op, err,
                    "input 1 has shape %s, expected %s%lld%s (inner dimensions differ; transA=%d "
                    "transB=%d)",
                    shape_str(&x, 2, in[1].dims), tb ? "[*," : "[", (long long)k, tb ? "]" : ",*]",
                    ta, tb);
    dims[0] = mm;
    dims[1] = nn;
    if (n == 3) {
        /* C broadcasts unidirectionally to [M, N]. */
        if (in[2].rank > 2)
            return fail(m, op, err, "input 2 has shape %s, which does not broadcast to %s",
                        shape_str(&x, in[2].rank, in[2].dims), shape_str(&y, 2, dims));
        for (uint32_t i = 0; i < in[2].rank; i++) {
            int64_t c = in[2].dims[in[2].rank - 1 - i];
            if (c != 1 && c != dims[1 - i])
                return fail(m, op, err, "input 2 has shape %s, which does not broadcast to %s",
                            shape_str(&x, in[2].rank, in[2].dims), shape_str(&y, 2, dims));
        }
    }
    out[0] = result_type(m, &s, in[0].dtype, 2, dims);
    return 0;
}

static int
infer_matmulgrad(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    tensor in[3];
    site s;
    int64_t dims[IR_MAX_RANK];
    uint32_t rank;
    sbuf x, y;
    int rc;
    if ((rc = load_inputs(m, op, 3, in, err)) != 0 ||
        (rc = common_site(m, op, in, 3, &s, err)) != 0 ||
        (rc = check_same_dtype(m, op, &in[0], 0, &in[1], 1, err)) != 0 ||
        (rc = check_same_dtype(m, op, &in[0], 0, &in[2], 2, err)) != 0 ||
        (rc = matmul_shape(m, op, &in[0], &in[1], &rank, dims, err)) != 0)
        return rc;
    if (rank != in[2].rank || (rank && memcmp(dims, in[2].dims, rank * sizeof dims[0]) != 0))
        return fail(m, op, err,
                    "input 2 (dy) has shape %s, expected %s (the shape of matmul of "
                    "inputs 0 and 1)",
                    shape_str(&x, in[2].rank, in[2].dims), shape_str(&y, rank, dims));
    out[0] = result_type(m, &s, in[0].dtype, in[0].rank, in[0].dims);
    out[1] = result_type(m, &s, in[1].dtype, in[1].rank, in[1].dims);
    return 0;
}

/* ---- compute ops: normalization ---- */

/* Checks that scale (input i) has shape x.dims[axis:]. */
static int
check_norm_shape(const ir_module *m, ir_id op, const tensor *x, uint32_t axis, const tensor *t,
                 uint32_t i, const char *what, di_error *err)
{
    sbuf a, b;
    uint32_t r = x->rank - axis;
    if (t->rank == r && (r == 0 || memcmp(t->dims, x->dims + axis, r * sizeof t->dims[0]) == 0))
        return 0;
    return fail(m, op, err, "input %u (%s) has shape %s, expected %s (the normalized dimensions)",
                i, what, shape_str(&a, t->rank, t->dims), shape_str(&b, r, x->dims + axis));
}

/* The shape of mean and inv_std_dev: x.dims[:axis] + [1] * (rank - axis). */
static void
stat_dims(const tensor *x, uint32_t axis, int64_t *dims)
{
    for (uint32_t i = 0; i < x->rank; i++)
        dims[i] = i < axis ? x->dims[i] : 1;
}

static int
infer_layernorm(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    tensor in[3];
    uint32_t n = m->ops[op].ninput, axis;
    int64_t sd[IR_MAX_RANK];
    double eps = ir_op_float(m, op, "epsilon", 1e-5);
    ir_dtype st;
    site s;
    int rc;
    if ((rc = load_inputs(m, op, n, in, err)) != 0 ||
        (rc = common_site(m, op, in, n, &s, err)) != 0 ||
        (rc = check_float(m, op, &in[0], 0, err)) != 0)
        return rc;
    if (in[0].rank == 0)
        return fail(m, op, err, "input 0 is a scalar; normalization needs rank >= 1");
    if ((rc = norm_axis(m, op, "axis", ir_op_int(m, op, "axis", -1), in[0].rank, &axis, err)) != 0)
        return rc;
    if (!(eps >= 0.0))
        return fail(m, op, err, "epsilon %g must be >= 0", eps);
    for (uint32_t i = 1; i < n; i++)
        if ((rc = check_same_dtype(m, op, &in[0], 0, &in[i], i, err)) != 0 ||
            (rc = check_norm_shape(m, op, &in[0], axis, &in[i], i, i == 1 ? "scale" : "bias",
                                   err)) != 0)
            return rc;
    if ((st = ir_norm_stat_dtype(m, op, in[0].dtype)) == IR_DTYPE_NONE)
        return fail(m, op, err,
                    "stash_type = %lld is not a float ONNX data type (1 f32, 10 f16, 16 bf16, "
                    "11 f64)",
                    (long long)ir_op_int(m, op, "stash_type", 0));
    out[0] = result_type(m, &s, in[0].dtype, in[0].rank, in[0].dims);
    stat_dims(&in[0], axis, sd);
    for (uint32_t i = 1; i < m->ops[op].noutput; i++)
        out[i] = result_type(m, &s, st, in[0].rank, sd);
    return 0;
}

ir_dtype
ir_norm_stat_dtype(const ir_module *m, ir_id op, ir_dtype x)
{
    ir_dtype dt;
    if (ir_op_attr(m, op, "stash_type") == NULL)
        return x;
    dt = ir_dtype_from_onnx(ir_op_int(m, op, "stash_type", 0));
    return ir_dtype_is_float(dt) ? dt : IR_DTYPE_NONE;
}

/*
 * LayerNormalizationGrad(dy, x, scale, [mean, inv_std_dev]) -> (dx, [dscale], [dbias]);
 * RMSNormalizationGrad(dy, x, scale, [inv_std_dev]) -> (dx, [dscale]).
 */
static int
infer_layernormgrad(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    tensor in[5];
    uint32_t n = m->ops[op].ninput, axis;
    int64_t sd[IR_MAX_RANK];
    int rms = m->ops[op].kind == IR_OP_RMSNORMGRAD;
    site s;
    sbuf a, b;
    int rc;
    if (n == 4 && !rms)
        return fail(m, op, err, "takes mean and inv_std_dev together (3 or 5 inputs), got 4");
    if ((rc = load_inputs(m, op, n, in, err)) != 0 ||
        (rc = common_site(m, op, in, n, &s, err)) != 0 ||
        (rc = check_float(m, op, &in[1], 1, err)) != 0 ||
        (rc = check_same_dtype(m, op, &in[1], 1, &in[0], 0, err)) != 0 ||
        (rc = check_same_shape(m, op, &in[1], 1, &in[0], 0, err)) != 0 ||
        (rc = check_same_dtype(m, op, &in[1], 1, &in[2], 2, err)) != 0)
        return rc;
    if (in[1].rank == 0)
        return fail(m, op, err, "input 1 is a scalar; normalization needs rank >= 1");
    if ((rc = norm_axis(m, op, "axis", ir_op_int(m, op, "axis", -1), in[1].rank, &axis, err)) != 0)
        return rc;
    if ((rc = check_norm_shape(m, op, &in[1], axis, &in[2], 2, "scale", err)) != 0)
        return rc;
    stat_dims(&in[1], axis, sd);
    for (uint32_t i = 3; i < n; i++)
        if (in[i].rank != in[1].rank || memcmp(in[i].dims, sd, in[1].rank * sizeof sd[0]) != 0)
            return fail(m, op, err, "input %u (%s) has shape %s, expected %s", i,
                        i == 3 && !rms ? "mean" : "inv_std_dev",
                        shape_str(&a, in[i].rank, in[i].dims),
                        shape_str(&b, in[1].rank, sd));
    out[0] = result_type(m, &s, in[1].dtype, in[1].rank, in[1].dims);
    for (uint32_t i = 1; i < m->ops[op].noutput; i++)
        out[i] = result_type(m, &s, in[2].dtype, in[2].rank, in[2].dims);
    return 0;
}

/* ---- compute ops: shapes and data movement ---- */

static int
infer_reshape(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    tensor x;
    site s;
    int64_t shape[IR_MAX_RANK], dims[IR_MAX_RANK], n, known = 1, total;
    int64_t infer_at = -1;
    sbuf a, b;
    int rc;
    if ((rc = load_input(m, op, 0, &x, err)) != 0 ||
        (rc = common_site(m, op, &x, 1, &s, err)) != 0 ||
        (rc = attr_ints(m, op, "shape", shape, IR_MAX_RANK, &n, err)) != 0)
        return rc;
    if (n < 0)
        return fail(m, op, err, "missing ints attribute shape");
    if ((total = numel_checked(x.rank, x.dims)) < 0)
        return fail(m, op, err, "input 0 has too many elements");
    for (uint32_t i = 0; i < (uint32_t)n; i++) {
        int64_t d = shape[i];
        if (d == 0) {
            if (i >= x.rank)
                return fail(m, op, err,
                            "shape[%u] is 0 (copy the input's dimension) but input 0 "
                            "has rank %u",
                            i, x.rank);
            d = x.dims[i];
        } else if (d == -1) {
            if (infer_at >= 0)
                return fail(m, op, err, "shape %s has more than one -1",
                            shape_str(&a, (uint32_t)n, shape));
            infer_at = i;
            continue;
        } else if (d < -1) {
            return fail(m, op, err,
                        "shape[%u] is %lld; only -1 (infer) and 0 (copy) may be "
                        "negative or zero",
                        i, (long long)d);
        }
        dims[i] = d;
        if (mul_dim(known, d, &known) != 0)
            return fail(m, op, err, "shape %s has too many elements",
                        shape_str(&a, (uint32_t)n, shape));
    }
    if (infer_at >= 0) {
        if (known == 0 || total % known != 0)
            return fail(m, op, err,
                        "cannot infer the -1 in shape %s from input 0's shape %s "
                        "(%lld elements)",
                        shape_str(&a, (uint32_t)n, shape), shape_str(&b, x.rank, x.dims),
                        (long long)total);
        dims[infer_at] = total / known;
    } else if (known != total) {
        return fail(m, op, err, "shape %s has %lld elements, input 0 has shape %s with %lld",
                    shape_str(&a, (uint32_t)n, dims), (long long)known,
                    shape_str(&b, x.rank, x.dims), (long long)total);
    }
    out[0] = result_type(m, &s, x.dtype, (uint32_t)n, dims);
    return 0;
}

static int
infer_transpose(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    tensor x;
    site s;
    int64_t perm[IR_MAX_RANK], dims[IR_MAX_RANK], n;
    uint8_t seen[IR_MAX_RANK];
    int rc;
    if ((rc = load_input(m, op, 0, &x, err)) != 0 ||
        (rc = common_site(m, op, &x, 1, &s, err)) != 0 ||
        (rc = attr_ints(m, op, "perm", perm, IR_MAX_RANK, &n, err)) != 0)
        return rc;
    if (n < 0) {
        n = x.rank;
        for (uint32_t i = 0; i < x.rank; i++)
            perm[i] = x.rank - 1 - i;
    }
    if ((uint32_t)n != x.rank)
        return fail(m, op, err, "perm has %lld entries, input 0 has rank %u", (long long)n, x.rank);
    memset(seen, 0, sizeof seen);
    for (uint32_t i = 0; i < x.rank; i++) {
        if (perm[i] < 0 || perm[i] >= (int64_t)x.rank || seen[perm[i]])
            return fail(m, op, err, "perm is not a permutation of 0..%u (entry %u is %lld)",
                        x.rank - 1, i, (long long)perm[i]);
        seen[perm[i]] = 1;
        dims[i] = x.dims[perm[i]];
    }
    out[0] = result_type(m, &s, x.dtype, x.rank, dims);
    return 0;
}

static int
infer_concat(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    tensor first, t;
    site s;
    int64_t idx = -1, axis_attr;
    uint32_t axis;
    sbuf a, b;
    int rc;
    s.device = IR_DEVICE_NONE;
    s.devvar = 0;
    s.mesh = 0;
    if ((rc = attr_int_req(m, op, "axis", &axis_attr, err)) != 0 ||
        (rc = load_input(m, op, 0, &first, err)) != 0 ||
        (rc = merge_site(m, op, &s, &idx, &first, 0, err)) != 0)
        return rc;
    if (first.rank == 0)
        return fail(m, op, err, "input 0 is a scalar; concat needs rank >= 1");
    if ((rc = norm_axis(m, op, "axis", axis_attr, first.rank, &axis, err)) != 0)
        return rc;
    for (uint32_t i = 1; i < m->ops[op].ninput; i++) {
        if ((rc = load_input(m, op, i, &t, err)) != 0 ||
            (rc = merge_site(m, op, &s, &idx, &t, i, err)) != 0 ||
            (rc = check_same_dtype(m, op, &first, 0, &t, i, err)) != 0)
            return rc;
        for (uint32_t d = 0; d < first.rank; d++)
            if (t.rank != first.rank || (d != axis && t.dims[d] != first.dims[d]))
                return fail(m, op, err,
                            "input %u has shape %s, which differs from input 0's "
                            "shape %s outside axis %u",
                            i, shape_str(&a, t.rank, t.dims), shape_str(&b, first.rank, first.dims),
                            axis);
        if (first.dims[axis] > INT64_MAX - t.dims[axis])
            return fail(m, op, err, "the concatenated dimension overflows");
        first.dims[axis] += t.dims[axis];
    }
    out[0] = result_type(m, &s, first.dtype, first.rank, first.dims);
    return 0;
}

static int
infer_split(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    tensor x;
    site s;
    uint32_t nout = m->ops[op].noutput, axis;
    int64_t *sizes, n, sum = 0;
    const ir_attr *sa;
    int rc;
    if ((rc = load_input(m, op, 0, &x, err)) != 0 || (rc = common_site(m, op, &x, 1, &s, err)) != 0)
        return rc;
    if (x.rank == 0)
        return fail(m, op, err, "input 0 is a scalar; split needs rank >= 1");
    if ((rc = norm_axis(m, op, "axis", ir_op_int(m, op, "axis", 0), x.rank, &axis, err)) != 0)
        return rc;
    sizes = di_malloc(nout * sizeof *sizes);
    if (sizes == NULL)
        return di_error_set(err, DI_ENOMEM, "out of memory");
    sa = ir_op_attr(m, op, "split");
    if (sa != NULL) {
        if (sa->kind != IR_ATTR_INTS || sa->n != nout) {
            di_free(sizes);
            return fail(m, op, err, "split must list one size per result (%u)", nout);
        }
        for (uint32_t i = 0; i < nout; i++) {
            int64_t size = m->ints[sa->off + i];
            if (size < 0 || sum > INT64_MAX - size) {
                di_free(sizes);
                return fail(m, op, err, "split[%u] = %lld is invalid", i, (long long)size);
            }
            sizes[i] = size;
            sum += sizes[i];
        }
        if (sum != x.dims[axis]) {
            di_free(sizes);
            return fail(m, op, err,
                        "split sizes add up to %lld, but axis %u of input 0 has "
                        "size %lld",
                        (long long)sum, axis, (long long)x.dims[axis]);
        }
    } else {
        n = nout;
        if (x.dims[axis] % n != 0) {
            di_free(sizes);
            return fail(m, op, err,
                        "axis %u of input 0 has size %lld, which does not split "
                        "evenly into %u parts",
                        axis, (long long)x.dims[axis], nout);
        }
        for (uint32_t i = 0; i < nout; i++)
            sizes[i] = x.dims[axis] / n;
    }
    for (uint32_t i = 0; i < nout; i++) {
        x.dims[axis] = sizes[i];
        out[i] = result_type(m, &s, x.dtype, x.rank, x.dims);
    }
    di_free(sizes);
    return 0;
}

static int64_t
clamp64(int64_t v, int64_t lo, int64_t hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

/* ceil(a / b) for a >= 0, b > 0, without overflow. */
static int64_t
ceil_div_u(uint64_t a, uint64_t b)
{
    return (int64_t)(a / b + (a % b != 0));
}

static int
infer_slice(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    tensor x;
    site s;
    int64_t starts[IR_MAX_RANK], ends[IR_MAX_RANK], axes[IR_MAX_RANK], steps[IR_MAX_RANK];
    int64_t ns, ne, na, nst;
    uint8_t mask[IR_MAX_RANK];
    int rc;
    if ((rc = load_input(m, op, 0, &x, err)) != 0 ||
        (rc = common_site(m, op, &x, 1, &s, err)) != 0 ||
        (rc = attr_ints(m, op, "starts", starts, IR_MAX_RANK, &ns, err)) != 0 ||
        (rc = attr_ints(m, op, "ends", ends, IR_MAX_RANK, &ne, err)) != 0 ||
        (rc = attr_ints(m, op, "axes", axes, IR_MAX_RANK, &na, err)) != 0 ||
        (rc = attr_ints(m, op, "steps", steps, IR_MAX_RANK, &nst, err)) != 0)
        return rc;
    if (ns < 0 || ne < 0)
        return fail(m, op, err, "needs ints attributes starts and ends");
    if (ne != ns || (na >= 0 && na != ns) || (nst >= 0 && nst != ns))
        return fail(m, op, err, "starts, ends, axes and steps must have the same length");
    if (na < 0)
        for (int64_t j = 0; j < ns; j++)
            axes[j] = j;
    if (nst < 0)
        for (int64_t j = 0; j < ns; j++)
            steps[j] = 1;
    if ((rc = norm_axes(m, op, "axes", axes, (uint32_t)ns, x.rank, mask, err)) != 0)
        return rc;
    for (uint32_t j = 0; j < (uint32_t)ns; j++) {
        uint32_t a = (uint32_t)(axes[j] < 0 ? axes[j] + x.rank : axes[j]);
        int64_t d = x.dims[a], st = steps[j], b = starts[j], e = ends[j], len;
        if (st == 0)
            return fail(m, op, err, "steps[%u] is 0", j);
        if (b < 0)
            b += d;
        if (e < 0)
            e += d;
        if (st > 0) {
            b = clamp64(b, 0, d);
            e = clamp64(e, 0, d);
            len = e > b ? ceil_div_u((uint64_t)(e - b), (uint64_t)st) : 0;
        } else {
            b = clamp64(b, 0, d - 1);
            e = clamp64(e, -1, d - 1);
            len = (d > 0 && b > e) ? ceil_div_u((uint64_t)(b - e), (uint64_t)0 - (uint64_t)st) : 0;
        }
        x.dims[a] = len;
    }
    out[0] = result_type(m, &s, x.dtype, x.rank, x.dims);
    return 0;
}

/* Gather(data, indices){axis}: data.dims[:axis] + indices.dims + data.dims[axis+1:]. */
static int
infer_gather(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    tensor in[2];
    site s;
    int64_t dims[IR_MAX_RANK];
    uint32_t axis, r = 0;
    int rc;
    if ((rc = load_inputs(m, op, 2, in, err)) != 0 ||
        (rc = common_site(m, op, in, 2, &s, err)) != 0 ||
        (rc = check_index_dtype(m, op, &in[1], 1, err)) != 0)
        return rc;
    if (in[0].rank == 0)
        return fail(m, op, err, "input 0 is a scalar; gather needs rank >= 1");
    if ((rc = norm_axis(m, op, "axis", ir_op_int(m, op, "axis", 0), in[0].rank, &axis, err)) != 0)
        return rc;
    if (in[0].rank - 1 + in[1].rank > IR_MAX_RANK)
        return fail(m, op, err, "the result would have rank %u, more than %d",
                    in[0].rank - 1 + in[1].rank, IR_MAX_RANK);
    for (uint32_t i = 0; i < axis; i++)
        dims[r++] = in[0].dims[i];
    for (uint32_t i = 0; i < in[1].rank; i++)
        dims[r++] = in[1].dims[i];
    for (uint32_t i = axis + 1; i < in[0].rank; i++)
        dims[r++] = in[0].dims[i];
    out[0] = result_type(m, &s, in[0].dtype, r, dims);
    return 0;
}

static int
infer_unsqueeze(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    tensor x;
    site s;
    int64_t axes[IR_MAX_RANK], n, dims[IR_MAX_RANK];
    uint8_t mask[IR_MAX_RANK];
    uint32_t r, k = 0;
    int rc;
    if ((rc = load_input(m, op, 0, &x, err)) != 0 ||
        (rc = common_site(m, op, &x, 1, &s, err)) != 0 ||
        (rc = attr_ints(m, op, "axes", axes, IR_MAX_RANK, &n, err)) != 0)
        return rc;
    if (n < 0)
        return fail(m, op, err, "missing ints attribute axes");
    if (x.rank + (uint32_t)n > IR_MAX_RANK)
        return fail(m, op, err, "the result would have rank %u, more than %d", x.rank + (uint32_t)n,
                    IR_MAX_RANK);
    r = x.rank + (uint32_t)n;
    if ((rc = norm_axes(m, op, "axes", axes, (uint32_t)n, r, mask, err)) != 0)
        return rc;
    for (uint32_t i = 0; i < r; i++)
        dims[i] = mask[i] ? 1 : x.dims[k++];
    out[0] = result_type(m, &s, x.dtype, r, dims);
    return 0;
}

static int
infer_squeeze(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    tensor x;
    site s;
    int64_t axes[IR_MAX_RANK], n, dims[IR_MAX_RANK];
    uint8_t mask[IR_MAX_RANK];
    uint32_t r = 0;
    int rc;
    if ((rc = load_input(m, op, 0, &x, err)) != 0 ||
        (rc = common_site(m, op, &x, 1, &s, err)) != 0 ||
        (rc = attr_ints(m, op, "axes", axes, IR_MAX_RANK, &n, err)) != 0)
        return rc;
    if (n < 0) {
        for (uint32_t i = 0; i < x.rank; i++)
            mask[i] = x.dims[i] == 1;
    } else {
        if ((rc = norm_axes(m, op, "axes", axes, (uint32_t)n, x.rank, mask, err)) != 0)
            return rc;
        for (uint32_t i = 0; i < x.rank; i++)
            if (mask[i] && x.dims[i] != 1)
                return fail(m, op, err, "axis %u of input 0 has size %lld, not 1", i,
                            (long long)x.dims[i]);
    }
    for (uint32_t i = 0; i < x.rank; i++)
        if (!mask[i])
            dims[r++] = x.dims[i];
    out[0] = result_type(m, &s, x.dtype, r, dims);
    return 0;
}

static int
infer_reduce(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    tensor x;
    site s;
    int64_t axes[IR_MAX_RANK], n, dims[IR_MAX_RANK];
    uint8_t mask[IR_MAX_RANK];
    int keep = ir_op_int(m, op, "keepdims", 1) != 0;
    uint32_t r = 0;
    int rc;
    if ((rc = load_input(m, op, 0, &x, err)) != 0 ||
        (rc = common_site(m, op, &x, 1, &s, err)) != 0 ||
        (rc = attr_ints(m, op, "axes", axes, IR_MAX_RANK, &n, err)) != 0)
        return rc;
    if (n <= 0)
        memset(mask, 1, sizeof mask);
    else if ((rc = norm_axes(m, op, "axes", axes, (uint32_t)n, x.rank, mask, err)) != 0)
        return rc;
    for (uint32_t i = 0; i < x.rank; i++) {
        if (!mask[i])
            dims[r++] = x.dims[i];
        else if (keep)
            dims[r++] = 1;
    }
    out[0] = result_type(m, &s, x.dtype, r, dims);
    return 0;
}

static int
infer_constant(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    const ir_attr *v = ir_op_attr(m, op, "value");
    const ir_attr *dev = ir_op_attr(m, op, "device");
    tensor t;
    uint64_t bytes;
    tbuf tb;
    int rc;
    if (v == NULL || v->kind != IR_ATTR_TENSOR)
        return fail(m, op, err, "missing tensor attribute value");
    if (v->i <= 0 || (uint64_t)v->i >= m->ntype)
        return fail(m, op, err, "value has no valid type");
    if ((rc = load_type(m, op, (ir_id)v->i, "value", 0, &t, err)) != 0)
        return rc;
    bytes = ir_type_bytes(m, t.type);
    if (v->n != 0 && v->n != bytes)
        return fail(m, op, err, "value holds %u bytes, but its type %s needs %llu", v->n,
                    type_str(m, t.type, &tb), (unsigned long long)bytes);
    if (dev == NULL) {
        out[0] = t.type;
        return 0;
    }
    if (dev->kind != IR_ATTR_INT || dev->i < 0 || dev->i > INT32_MAX)
        return fail(m, op, err, "device must be a device id >= 0");
    if (t.at.mesh)
        return fail(m, op, err, "value is a distributed tensor; it cannot also name a device");
    out[0] = ir_type_with_device(m, t.type, (int32_t)dev->i, 0);
    return 0;
}

/* ---- losses and their gradients ---- */

static int
infer_loss(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    tensor in[2];
    site s;
    int rc;
    if ((rc = load_inputs(m, op, 2, in, err)) != 0 ||
        (rc = common_site(m, op, in, 2, &s, err)) != 0 ||
        (rc = check_float(m, op, &in[0], 0, err)) != 0 ||
        (rc = check_same_dtype(m, op, &in[0], 0, &in[1], 1, err)) != 0 ||
        (rc = check_same_shape(m, op, &in[0], 0, &in[1], 1, err)) != 0)
        return rc;
    out[0] = result_type(m, &s, in[0].dtype, 0, NULL);
    return 0;
}

int
ir_gelu_tanh(const ir_module *m, ir_id op)
{
    const char *a = ir_op_string(m, op, "approximate", "none");
    return strcmp(a, "none") == 0 ? 0 : strcmp(a, "tanh") == 0 ? 1 : -1;
}

ir_reduction
ir_sce_reduction(const ir_module *m, ir_id op)
{
    const char *r = ir_op_string(m, op, "reduction", "mean");
    if (strcmp(r, "mean") == 0)
        return IR_REDUCTION_MEAN;
    if (strcmp(r, "sum") == 0)
        return IR_REDUCTION_SUM;
    if (strcmp(r, "none") == 0)
        return IR_REDUCTION_NONE;
    return IR_REDUCTION_INVALID;
}

/* Checks logits (input il) [N, C, d...] against labels (input ib) [N, d...]. */
static int
check_sce_labels(const ir_module *m, ir_id op, const tensor *lg, uint32_t il, const tensor *lb,
                 uint32_t ib, di_error *err)
{
    sbuf a, b, c;
    int64_t want[IR_MAX_RANK];
    int rc;
    if ((rc = check_float(m, op, lg, il, err)) != 0 ||
        (rc = check_index_dtype(m, op, lb, ib, err)) != 0)
        return rc;
    if (lg->rank < 2)
        return fail(m, op, err, "input %u has shape %s, expected [N,C,...]", il,
                    shape_str(&a, lg->rank, lg->dims));
    want[0] = lg->dims[0];
    for (uint32_t i = 2; i < lg->rank; i++)
        want[i - 1] = lg->dims[i];
    if (lb->rank != lg->rank - 1 || memcmp(lb->dims, want, lb->rank * sizeof want[0]) != 0)
        return fail(m, op, err, "input %u (labels) has shape %s, expected %s for logits %s", ib,
                    shape_str(&a, lb->rank, lb->dims), shape_str(&b, lg->rank - 1, want),
                    shape_str(&c, lg->rank, lg->dims));
    return 0;
}

/* A loss's reduction attribute into *red: mean, sum or none, else an error. */
static int
loss_reduction(const ir_module *m, ir_id op, ir_reduction *red, di_error *err)
{
    *red = ir_sce_reduction(m, op);
    if (*red == IR_REDUCTION_INVALID)
        return fail(m, op, err, "reduction must be mean, sum or none");
    return 0;
}

/* A loss's result: the labels' shape for reduction none, else a scalar. */
static ir_id
loss_result(ir_module *m, const site *s, ir_dtype dt, ir_reduction red, const tensor *labels)
{
    if (red == IR_REDUCTION_NONE)
        return result_type(m, s, dt, labels->rank, labels->dims);
    return result_type(m, s, dt, 0, NULL);
}

/* Checks reduction and the seed dloss of a loss gradient: labels-shaped for none, else scalar. */
static int check_scalar_like(const ir_module *m, ir_id op, const tensor *t, uint32_t i,
                             di_error *err);

static int
check_loss_seed(const ir_module *m, ir_id op, const tensor *dloss, const tensor *labels,
                di_error *err)
{
    ir_reduction red;
    sbuf a, b;
    int rc;
    if ((rc = loss_reduction(m, op, &red, err)) != 0)
        return rc;
    if (red != IR_REDUCTION_NONE)
        return check_scalar_like(m, op, dloss, 0, err);
    if (!dims_equal(dloss, labels))
        return fail(m, op, err,
                    "input 0 has shape %s, expected %s (the labels' shape, reduction "
                    "none)",
                    shape_str(&a, dloss->rank, dloss->dims),
                    shape_str(&b, labels->rank, labels->dims));
    return 0;
}

static int
infer_sceloss(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    tensor in[2];
    site s;
    ir_reduction red;
    int rc;
    if ((rc = load_inputs(m, op, 2, in, err)) != 0 ||
        (rc = common_site(m, op, in, 2, &s, err)) != 0 ||
        (rc = check_sce_labels(m, op, &in[0], 0, &in[1], 1, err)) != 0 ||
        (rc = loss_reduction(m, op, &red, err)) != 0)
        return rc;
    out[0] = loss_result(m, &s, in[0].dtype, red, &in[1]);
    if (m->ops[op].noutput > 1)
        out[1] = result_type(m, &s, in[0].dtype, in[0].rank, in[0].dims);
    return 0;
}

/* Checks that input i holds one element (a loss gradient seed). */
static int
check_scalar_like(const ir_module *m, ir_id op, const tensor *t, uint32_t i, di_error *err)
{
    sbuf a;
    if (numel_checked(t->rank, t->dims) == 1)
        return 0;
    return fail(m, op, err, "input %u has shape %s, expected a scalar", i,
                shape_str(&a, t->rank, t->dims));
}

static int
infer_scelossgrad(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    tensor in[3];
    site s;
    int rc;
    if ((rc = load_inputs(m, op, 3, in, err)) != 0 ||
        (rc = common_site(m, op, in, 3, &s, err)) != 0 ||
        (rc = check_sce_labels(m, op, &in[1], 1, &in[2], 2, err)) != 0 ||
        (rc = check_same_dtype(m, op, &in[1], 1, &in[0], 0, err)) != 0)
        return rc;
    if ((rc = check_loss_seed(m, op, &in[0], &in[2], err)) != 0)
        return rc;
    out[0] = result_type(m, &s, in[1].dtype, in[1].rank, in[1].dims);
    return 0;
}

/*
 * Vocabulary-parallel cross-entropy (docs/ops.md): logits [N, C] hold this
 * device's block of the classes. dist.vocab_ce_stats(logits, labels) gives
 * per row (local max, sum of exp(x - local max), the label's logit where
 * this device holds the label's class, else 0) as [N, 3]; an all_gather
 * along dimension 1 gives the group's [N, 3n]; dist.vocab_ce_loss(stats,
 * labels) and dist.vocab_ce_grad(dloss, logits, labels, stats) finish.
 */
static int
check_vocab_rows(const ir_module *m, ir_id op, const tensor *lg, uint32_t il, const tensor *lb,
                 uint32_t ib, di_error *err)
{
    sbuf a;
    int rc;
    if ((rc = check_sce_labels(m, op, lg, il, lb, ib, err)) != 0)
        return rc;
    if (lg->rank != 2)
        return fail(m, op, err, "input %u has shape %s, expected [N,C]", il,
                    shape_str(&a, lg->rank, lg->dims));
    return 0;
}

/* stats [N, 3n] for labels [N]. */
static int
check_vocab_stats(const ir_module *m, ir_id op, const tensor *st, uint32_t is, const tensor *lb,
                  di_error *err)
{
    sbuf a;
    int rc;
    if ((rc = check_float(m, op, st, is, err)) != 0)
        return rc;
    if (st->rank != 2 || lb->rank != 1 || st->dims[0] != lb->dims[0] || st->dims[1] < 3 ||
        st->dims[1] % 3 != 0)
        return fail(m, op, err, "input %u (stats) has shape %s, expected [%lld, 3n]", is,
                    shape_str(&a, st->rank, st->dims), (long long)(lb->rank ? lb->dims[0] : 0));
    return 0;
}

static int
infer_vocabstats(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    tensor in[2];
    site s;
    int64_t dims[2];
    int rc;
    if ((rc = load_inputs(m, op, 2, in, err)) != 0 ||
        (rc = common_site(m, op, in, 2, &s, err)) != 0 ||
        (rc = check_vocab_rows(m, op, &in[0], 0, &in[1], 1, err)) != 0)
        return rc;
    dims[0] = in[0].dims[0];
    dims[1] = 3;
    out[0] = result_type(m, &s, in[0].dtype, 2, dims);
    return 0;
}

static int
infer_vocabloss(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    tensor in[2];
    site s;
    ir_reduction red;
    int rc;
    if ((rc = load_inputs(m, op, 2, in, err)) != 0 ||
        (rc = common_site(m, op, in, 2, &s, err)) != 0 ||
        (rc = check_index_dtype(m, op, &in[1], 1, err)) != 0 ||
        (rc = check_vocab_stats(m, op, &in[0], 0, &in[1], err)) != 0 ||
        (rc = loss_reduction(m, op, &red, err)) != 0)
        return rc;
    out[0] = loss_result(m, &s, in[0].dtype, red, &in[1]);
    return 0;
}

static int
infer_vocabgrad(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    tensor in[4];
    site s;
    int rc;
    if ((rc = load_inputs(m, op, 4, in, err)) != 0 ||
        (rc = common_site(m, op, in, 4, &s, err)) != 0 ||
        (rc = check_vocab_rows(m, op, &in[1], 1, &in[2], 2, err)) != 0 ||
        (rc = check_vocab_stats(m, op, &in[3], 3, &in[2], err)) != 0 ||
        (rc = check_same_dtype(m, op, &in[1], 1, &in[0], 0, err)) != 0)
        return rc;
    if ((rc = check_loss_seed(m, op, &in[0], &in[2], err)) != 0)
        return rc;
    out[0] = result_type(m, &s, in[1].dtype, in[1].rank, in[1].dims);
    return 0;
}

/* Gradients typed like input 0: ReluGrad(x, dy), ..., DropoutGrad(dy, mask), MSELossGrad. */
static int
infer_grad_like_x(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    tensor in[3];
    uint32_t n = m->ops[op].ninput, axis;
    int kind = m->ops[op].kind;
    site s;
    int rc;
    if ((rc = load_inputs(m, op, n, in, err)) != 0 ||
        (rc = common_site(m, op, in, n, &s, err)) != 0 ||
        (rc = check_same_shape(m, op, &in[0], 0, &in[1], 1, err)) != 0)
        return rc;
    if (kind == IR_OP_DROPOUTGRAD) {
        if (in[1].dtype != IR_BOOL && in[1].dtype != in[0].dtype)
            return fail(m, op, err, "input 1 (mask) has dtype %s, expected i1 or %s",
                        ir_dtype_name(in[1].dtype), ir_dtype_name(in[0].dtype));
    } else if ((rc = check_same_dtype(m, op, &in[0], 0, &in[1], 1, err)) != 0) {
        return rc;
    }
    if (kind == IR_OP_GELUGRAD && ir_gelu_tanh(m, op) < 0)
        return fail(m, op, err, "approximate must be none or tanh");
    if (kind == IR_OP_SOFTMAXGRAD) {
        if (in[0].rank == 0)
            return fail(m, op, err, "input 0 is a scalar; softmax needs rank >= 1");
        if ((rc = norm_axis(m, op, "axis", ir_op_int(m, op, "axis", -1), in[0].rank, &axis, err)) !=
            0)
            return rc;
    }
    if (kind == IR_OP_MSELOSSGRAD && n == 3 && (rc = check_scalar_like(m, op, &in[2], 2, err)) != 0)
        return rc;
    out[0] = result_type(m, &s, in[0].dtype, in[0].rank, in[0].dims);
    return 0;
}

/* GatherGrad(indices, dy){shape, axis}: the gradient of Gather's data input. */
static int
infer_gathergrad(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    tensor in[2];
    site s;
    int64_t shape[IR_MAX_RANK], n, want[IR_MAX_RANK];
    uint32_t axis, r = 0;
    sbuf a, b, c;
    int rc;
    if ((rc = load_inputs(m, op, 2, in, err)) != 0 ||
        (rc = common_site(m, op, in, 2, &s, err)) != 0 ||
        (rc = check_index_dtype(m, op, &in[0], 0, err)) != 0 ||
        (rc = attr_ints(m, op, "shape", shape, IR_MAX_RANK, &n, err)) != 0)
        return rc;
    if (n <= 0)
        return fail(m, op, err, "needs ints attribute shape (the gathered data's shape)");
    for (uint32_t i = 0; i < (uint32_t)n; i++)
        if (shape[i] < 0)
            return fail(m, op, err, "shape[%u] is negative", i);
    if (numel_checked((uint32_t)n, shape) < 0)
        return fail(m, op, err, "shape has too many elements");
    if ((rc = norm_axis(m, op, "axis", ir_op_int(m, op, "axis", 0), (uint32_t)n, &axis, err)) != 0)
        return rc;
    if ((uint32_t)n - 1 + in[0].rank > IR_MAX_RANK)
        return fail(m, op, err, "input 1 cannot match: rank would exceed %d", IR_MAX_RANK);
    for (uint32_t i = 0; i < axis; i++)
        want[r++] = shape[i];
    for (uint32_t i = 0; i < in[0].rank; i++)
        want[r++] = in[0].dims[i];
    for (uint32_t i = axis + 1; i < (uint32_t)n; i++)
        want[r++] = shape[i];
    if (in[1].rank != r || memcmp(in[1].dims, want, r * sizeof want[0]) != 0)
        return fail(m, op, err, "input 1 (dy) has shape %s, expected %s (gather of shape %s)",
                    shape_str(&a, in[1].rank, in[1].dims), shape_str(&b, r, want),
                    shape_str(&c, (uint32_t)n, shape));
    out[0] = result_type(m, &s, in[1].dtype, (uint32_t)n, shape);
    return 0;
}

/*
 * Mixture of experts (docs/ops.md). TopK(x){k} along the last axis:
 * (values, indices), the k largest in descending order, ties to the lower
 * index. moe.slots(indices [B, S, k]){experts, capacity}: per batch row,
 * each (token, choice) in order gets the next free slot e * capacity + c of
 * its expert e, or -1 once the expert's capacity is full (dropped).
 * moe.dispatch(x [B, S, k, h], slots){experts, capacity} scatters into
 * [B, experts, capacity, h] (empty slots zero); moe.combine(y [B, E, C, h],
 * slots) gathers back [B, S, k, h] (dropped choices zero). Each of the two
 * is the other's gradient.
 */
/*
 * FlashAttention(q [.., sq, d], k [.., sk, d], v [.., sk, dv]){causal, scale}
 * -> (o [.., sq, dv], lse [.., sq] f32): softmax(scale q k^T, causal mask) v
 * as one fused kernel (the scores are never materialized) and the
 * log-sum-exp of each row for the backward pass. Causal: query row i may see
 * keys j <= offset + i, offset the query block's start (the executor's
 * position on the op's mesh group times sq; 0 without a mesh). Grouped-query
 * attention: k and v may have fewer heads (dimension -3) than q, a divisor;
 * query head i uses key/value head i / (H / KV).
 * FlashAttentionGrad(q, k, v, o, lse, do) -> (dq, dk, dv).
 */
static int
check_attention(const ir_module *m, ir_id op, const tensor *t, di_error *err)
{
    sbuf a, b, c;
    uint32_t r = t[0].rank;
    int rc, lead = 1;
    for (uint32_t i = 0; i < 3; i++)
        if ((rc = check_float(m, op, &t[i], i, err)) != 0 ||
            (rc = check_same_dtype(m, op, &t[0], 0, &t[i], i, err)) != 0)
            return rc;
    for (uint32_t d = 0; r >= 2 && d + 2 < r && t[1].rank == r && t[2].rank == r; d++)
        lead &= t[1].dims[d] == t[2].dims[d] &&
                (d + 3 == r ? t[1].dims[d] > 0 && t[0].dims[d] % t[1].dims[d] == 0
                            : t[0].dims[d] == t[1].dims[d]);
    if (r < 2 || t[1].rank != r || t[2].rank != r || !lead ||
        t[0].dims[r - 1] != t[1].dims[r - 1] || t[1].dims[r - 2] != t[2].dims[r - 2])
        return fail(m, op, err, "q %s, k %s, v %s are not [.., sq, d], [.., sk, d], [.., sk, dv]",
                    shape_str(&a, t[0].rank, t[0].dims), shape_str(&b, t[1].rank, t[1].dims),
                    shape_str(&c, t[2].rank, t[2].dims));
    return 0;
}

/*
 * FlashAttention (q, k, v[, o, lse] -> o, lse): with five inputs, one step
 * of ring attention: the block of keys and values given is attended and
 * merged into the running output and log-sum-exp (o, lse) of the earlier
 * blocks.
 */
static int
infer_flashattn(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    tensor in[5];
    site s;
    sbuf a, b;
    int64_t dims[IR_MAX_RANK];
    uint32_t r, n = m->ops[op].ninput == 5 ? 5 : 3;
    int rc;
    if (m->ops[op].ninput != 3 && m->ops[op].ninput != 5)
        return fail(m, op, err, "takes 3 inputs (q, k, v) or 5 (q, k, v, o, lse), not %u",
                    m->ops[op].ninput);
    if ((rc = load_inputs(m, op, n, in, err)) != 0 ||
        (rc = common_site(m, op, in, n, &s, err)) != 0 ||
        (rc = check_attention(m, op, in, err)) != 0)
        return rc;
    r = in[0].rank;
    memcpy(dims, in[0].dims, r * sizeof dims[0]);
    dims[r - 1] = in[2].dims[r - 1];
    if (n == 5 && (in[3].rank != r || memcmp(in[3].dims, dims, r * sizeof dims[0]) != 0 ||
                   in[3].dtype != in[0].dtype))
        return fail(m, op, err, "input 3 (o) has shape %s, expected %s",
                    shape_str(&a, in[3].rank, in[3].dims), shape_str(&b, r, dims));
    if (n == 5 && (in[4].rank != r - 1 || memcmp(in[4].dims, dims, (r - 1) * sizeof dims[0]) != 0 ||
                   in[4].dtype != IR_F32))
        return fail(m, op, err, "input 4 (lse) has shape %s, expected f32 %s",
                    shape_str(&a, in[4].rank, in[4].dims), shape_str(&b, r - 1, dims));
    out[0] = result_type(m, &s, in[0].dtype, r, dims);
    out[1] = result_type(m, &s, IR_F32, r - 1, dims);
    return 0;
}

static int
infer_flashattngrad(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    tensor in[6];
    site s;
    sbuf a, b;
    uint32_t r;
    int rc;
    if ((rc = load_inputs(m, op, 6, in, err)) != 0 ||
        (rc = common_site(m, op, in, 6, &s, err)) != 0 ||
        (rc = check_attention(m, op, in, err)) != 0)
        return rc;
    r = in[0].rank;
    for (uint32_t i = 3; i < 6; i += 2)
        if (in[i].rank != r ||
            memcmp(in[i].dims, in[0].dims, (r - 1) * sizeof in[0].dims[0]) != 0 ||
            in[i].dims[r - 1] != in[2].dims[r - 1])
            return fail(m, op, err, "input %u has shape %s, expected the output's %s", i,
                        shape_str(&a, in[i].rank, in[i].dims),
                        shape_str(&b, in[3].rank, in[3].dims));
    if (in[4].rank != r - 1 || memcmp(in[4].dims, in[0].dims, (r - 1) * sizeof in[0].dims[0]) != 0)
        return fail(m, op, err, "input 4 (lse) has shape %s, expected [.., sq]",
                    shape_str(&a, in[4].rank, in[4].dims));
    out[0] = result_type(m, &s, in[0].dtype, r, in[0].dims);
    out[1] = result_type(m, &s, in[1].dtype, r, in[1].dims);
    out[2] = result_type(m, &s, in[2].dtype, r, in[2].dims);
    return 0;
}

static int
infer_topk(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    tensor x;
    site s;
    int64_t k = ir_op_int(m, op, "k", 0), dims[IR_MAX_RANK];
    int rc;
    if ((rc = load_input(m, op, 0, &x, err)) != 0 ||
        (rc = common_site(m, op, &x, 1, &s, err)) != 0 ||
        (rc = check_float(m, op, &x, 0, err)) != 0)
        return rc;
    if (x.rank == 0)
        return fail(m, op, err, "input 0 is a scalar; TopK needs rank >= 1");
    if (k < 1 || k > x.dims[x.rank - 1])
        return fail(m, op, err, "k %lld is out of range for a last dimension of %lld",
                    (long long)k, (long long)x.dims[x.rank - 1]);
    memcpy(dims, x.dims, x.rank * sizeof dims[0]);
    dims[x.rank - 1] = k;
    out[0] = result_type(m, &s, x.dtype, x.rank, dims);
    out[1] = result_type(m, &s, IR_I64, x.rank, dims);
    return 0;
}

/* TopKGrad(dvalues, indices){size}: dvalues scattered to [.., size]. */
static int
infer_topkgrad(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    tensor in[2];
    site s;
    int64_t size = ir_op_int(m, op, "size", 0), dims[IR_MAX_RANK];
    sbuf a, b;
    int rc;
    if ((rc = load_inputs(m, op, 2, in, err)) != 0 ||
        (rc = common_site(m, op, in, 2, &s, err)) != 0 ||
        (rc = check_float(m, op, &in[0], 0, err)) != 0 ||
        (rc = check_index_dtype(m, op, &in[1], 1, err)) != 0)
        return rc;
    if (in[0].rank == 0 || in[0].rank != in[1].rank ||
        memcmp(in[0].dims, in[1].dims, in[0].rank * sizeof in[0].dims[0]) != 0)
        return fail(m, op, err, "dvalues %s and indices %s differ in shape",
                    shape_str(&a, in[0].rank, in[0].dims), shape_str(&b, in[1].rank, in[1].dims));
    if (size < in[0].dims[in[0].rank - 1])
        return fail(m, op, err, "size %lld is smaller than k %lld", (long long)size,
                    (long long)in[0].dims[in[0].rank - 1]);
    memcpy(dims, in[0].dims, in[0].rank * sizeof dims[0]);
    dims[in[0].rank - 1] = size;
    if (numel_checked(in[0].rank, dims) < 0)
        return fail(m, op, err, "the result has too many elements");
    out[0] = result_type(m, &s, in[0].dtype, in[0].rank, dims);
    return 0;
}

/* experts and capacity of a moe op: both >= 1, and their product an index. */
static int
moe_sizes(const ir_module *m, ir_id op, int64_t *e, int64_t *cap, di_error *err)
{
    *e = ir_op_int(m, op, "experts", 0);
    *cap = ir_op_int(m, op, "capacity", 0);
    if (*e < 1 || *cap < 1 || *e > (INT64_C(1) << 24) || *cap > (INT64_C(1) << 30))
        return fail(m, op, err, "experts %lld and capacity %lld must be positive (experts at most "
                    "2^24, capacity at most 2^30)",
                    (long long)*e, (long long)*cap);
    return 0;
}

static int
check_slots(const ir_module *m, ir_id op, const tensor *t, uint32_t i, di_error *err)
{
    sbuf a;
    int rc;
    if ((rc = check_index_dtype(m, op, t, i, err)) != 0)
        return rc;
    if (t->rank != 3)
        return fail(m, op, err, "input %u has shape %s, expected [B, S, k] slots", i,
                    shape_str(&a, t->rank, t->dims));
    return 0;
}

static int
infer_moeslots(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    tensor x;
    site s;
    int64_t e, cap;
    int rc;
    if ((rc = load_input(m, op, 0, &x, err)) != 0 ||
        (rc = common_site(m, op, &x, 1, &s, err)) != 0 ||
        (rc = check_slots(m, op, &x, 0, err)) != 0 || (rc = moe_sizes(m, op, &e, &cap, err)) != 0)
        return rc;
    out[0] = result_type(m, &s, IR_I64, 3, x.dims);
    return 0;
}

static int
infer_moedispatch(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    tensor in[2];
    site s;
    int64_t e, cap, dims[4];
    sbuf a, b;
    int rc;
    if ((rc = load_inputs(m, op, 2, in, err)) != 0 ||
        (rc = common_site(m, op, in, 2, &s, err)) != 0 ||
        (rc = check_float(m, op, &in[0], 0, err)) != 0 ||
        (rc = check_slots(m, op, &in[1], 1, err)) != 0 ||
        (rc = moe_sizes(m, op, &e, &cap, err)) != 0)
        return rc;
    if (in[0].rank != 4 || memcmp(in[0].dims, in[1].dims, 3 * sizeof in[0].dims[0]) != 0)
        return fail(m, op, err, "input 0 has shape %s, expected [B, S, k, h] for slots %s",
                    shape_str(&a, in[0].rank, in[0].dims), shape_str(&b, 3, in[1].dims));
    dims[0] = in[0].dims[0];
    dims[1] = e;
    dims[2] = cap;
    dims[3] = in[0].dims[3];
    if (numel_checked(4, dims) < 0)
        return fail(m, op, err, "the result has too many elements");
    out[0] = result_type(m, &s, in[0].dtype, 4, dims);
    return 0;
}

static int
infer_moecombine(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    tensor in[2];
    site s;
    int64_t dims[4];
    sbuf a, b;
    int rc;
    if ((rc = load_inputs(m, op, 2, in, err)) != 0 ||
        (rc = common_site(m, op, in, 2, &s, err)) != 0 ||
        (rc = check_float(m, op, &in[0], 0, err)) != 0 ||
        (rc = check_slots(m, op, &in[1], 1, err)) != 0)
        return rc;
    if (in[0].rank != 4 || in[0].dims[0] != in[1].dims[0])
        return fail(m, op, err, "input 0 has shape %s, expected [B, E, C, h] for slots %s",
                    shape_str(&a, in[0].rank, in[0].dims), shape_str(&b, 3, in[1].dims));
    memcpy(dims, in[1].dims, 3 * sizeof dims[0]);
    dims[3] = in[0].dims[3];
    if (numel_checked(4, dims) < 0)
        return fail(m, op, err, "the result has too many elements");
    out[0] = result_type(m, &s, in[0].dtype, 4, dims);
    return 0;
}

/* ReduceSumTo(x){shape}: sums x over the dimensions that broadcasting from shape added. */
static int
infer_reshape_reduce(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    tensor x;
    site s;
    int64_t shape[IR_MAX_RANK], n;
    sbuf a, b;
    int rc;
    if ((rc = load_input(m, op, 0, &x, err)) != 0 ||
        (rc = common_site(m, op, &x, 1, &s, err)) != 0 ||
        (rc = attr_ints(m, op, "shape", shape, IR_MAX_RANK, &n, err)) != 0)
        return rc;
    if (n < 0)
        return fail(m, op, err, "missing ints attribute shape");
    if ((uint32_t)n > x.rank)
        goto bad;
    for (uint32_t i = 0; i < (uint32_t)n; i++) {
        int64_t want = shape[n - 1 - i], have = x.dims[x.rank - 1 - i];
        if (want < 0 || (want != 1 && want != have))
            goto bad;
    }
    out[0] = result_type(m, &s, x.dtype, (uint32_t)n, shape);
    return 0;
bad:
    return fail(m, op, err, "input 0 has shape %s, which does not broadcast from shape %s",
                shape_str(&a, x.rank, x.dims), shape_str(&b, (uint32_t)n, shape));
}

/* ---- optimizers ---- */

static int
infer_first_input(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    tensor in[2];
    site s;
    int rc;
    if ((rc = load_inputs(m, op, 2, in, err)) != 0 ||
        (rc = common_site(m, op, in, 2, &s, err)) != 0 ||
        (rc = check_float(m, op, &in[0], 0, err)) != 0 ||
        (rc = check_float(m, op, &in[1], 1, err)) != 0 ||
        (rc = check_same_shape(m, op, &in[0], 0, &in[1], 1, err)) != 0)
        return rc;
    out[0] = result_type(m, &s, in[0].dtype, in[0].rank, in[0].dims);
    return 0;
}

static int
infer_adam(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    /* (w, g, m, v[, master]) -> (w, m, v[, master]): with master weights w is their copy. */
    tensor in[5];
    site s;
    uint32_t n = m->ops[op].ninput;
    int rc;
    if (n > 5 || m->ops[op].noutput != n - 1)
        return fail(m, op, err,
                    "has %u inputs and %u results: expected 4 and 3, or 5 and 4 (with "
                    "master weights)",
                    n, m->ops[op].noutput);
    if ((rc = load_inputs(m, op, n, in, err)) != 0 ||
        (rc = common_site(m, op, in, n, &s, err)) != 0)
        return rc;
    for (uint32_t i = 0; i < n; i++)
        if ((rc = check_float(m, op, &in[i], i, err)) != 0 ||
            (rc = check_same_shape(m, op, &in[0], 0, &in[i], i, err)) != 0)
            return rc;
    out[0] = result_type(m, &s, in[0].dtype, in[0].rank, in[0].dims);
    for (uint32_t i = 1; i + 1 < n; i++)
        out[i] = result_type(m, &s, in[i + 1].dtype, in[i + 1].rank, in[i + 1].dims);
    return 0;
}

/* ---- communication ---- */

static int
cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/*
 * Checks that the device ids ids[0..n) are distinct (what names the list in
 * errors). Sorts a copy, so it stays fast for thousands of devices.
 */
static int
check_distinct(const ir_module *m, ir_id op, const int64_t *ids, uint32_t n, const char *what,
               di_error *err)
{
    int64_t *sorted = di_malloc((n ? n : 1) * sizeof *sorted);
    int64_t dup = 0;
    int found = 0;
    if (sorted == NULL)
        return di_error_set(err, DI_ENOMEM, "out of memory");
    if (n)
        memcpy(sorted, ids, n * sizeof *sorted);
    qsort(sorted, n, sizeof *sorted, cmp_i64);
    for (uint32_t i = 1; i < n && !found; i++)
        if (sorted[i] == sorted[i - 1]) {
            dup = sorted[i];
            found = 1;
        }
    di_free(sorted);
    if (found)
        return fail(m, op, err, "%s names device %lld twice", what, (long long)dup);
    return 0;
}

/*
 * Checks a device list: non-empty, ids in [0, INT32_MAX], distinct. The
 * caller frees *out (a copy) with di_free.
 */
static int
load_devices(const ir_module *m, ir_id op, const char *key, int64_t **out, uint32_t *n,
             di_error *err)
{
    const ir_attr *a = ir_op_attr(m, op, key);
    int64_t *d;
    int rc;
    *out = NULL;
    *n = 0;
    if (a == NULL || a->kind != IR_ATTR_INTS || a->n == 0)
        return fail(m, op, err, "needs a non-empty ints attribute %s", key);
    d = di_malloc(a->n * sizeof *d);
    if (d == NULL)
        return di_error_set(err, DI_ENOMEM, "out of memory");
    memcpy(d, m->ints + a->off, a->n * sizeof *d);
    for (uint32_t i = 0; i < a->n; i++)
        if (d[i] < 0 || d[i] > INT32_MAX) {
            rc = fail(m, op, err, "%s[%u] = %lld is not a device id", key, i, (long long)d[i]);
            di_free(d);
            return rc;
        }
    if ((rc = check_distinct(m, op, d, a->n, key, err)) != 0) {
        di_free(d);
        return rc;
    }
    *out = d;
    *n = a->n;
    return 0;
}

/* The device group of a mesh-form collective. */
typedef struct group {
    ir_id mesh;
    uint32_t naxis;
    int64_t axes[IR_MAX_RANK];
    int64_t n; /* devices per group */
} group;

/*
 * Reads mesh and mesh_axes. Returns 0 with g->mesh = 0 for the tuple form.
 * mesh_axes defaults to every axis of the mesh.
 */
static int
load_group(const ir_module *m, ir_id op, group *g, di_error *err)
{
    const ir_attr *ma = ir_op_attr(m, op, "mesh");
    const ir_attr *ax = ir_op_attr(m, op, "mesh_axes");
    const ir_attr *root = ir_op_attr(m, op, "root");
    uint32_t mrank;
    const int64_t *shape;
    uint8_t seen[IR_MAX_RANK];
    memset(g, 0, sizeof *g);
    if (ma == NULL) {
        if (ax != NULL)
            return fail(m, op, err, "mesh_axes needs a mesh");
        if (root != NULL)
            return fail(m, op, err, "root is for the mesh form (give mesh and mesh_axes)");
        return 0;
    }
    if (ma->kind != IR_ATTR_MESH || ma->s == 0 || ma->s >= m->nmesh)
        return fail(m, op, err, "mesh does not name a mesh of the module");
    if (ir_op_attr(m, op, "devices") != NULL)
        return fail(m, op, err, "give devices or mesh, not both");
    g->mesh = ma->s;
    mrank = m->meshes[g->mesh].rank;
    if (mrank > IR_MAX_RANK)
        return fail(m, op, err, "mesh rank %u exceeds %d", mrank, IR_MAX_RANK);
    shape = ir_mesh_shape(m, g->mesh);
    if (ax == NULL) {
        g->naxis = mrank;
        for (uint32_t a = 0; a < mrank; a++)
            g->axes[a] = a;
    } else {
        if (ax->kind != IR_ATTR_INTS || ax->n > mrank)
            return fail(m, op, err, "mesh_axes must list distinct axes of the %u-d mesh", mrank);
        g->naxis = ax->n;
        memcpy(g->axes, m->ints + ax->off, ax->n * sizeof g->axes[0]);
    }
    memset(seen, 0, sizeof seen);
    g->n = 1;
    for (uint32_t j = 0; j < g->naxis; j++) {
        int64_t a = g->axes[j];
        if (a < 0 || a >= (int64_t)mrank)
            return fail(m, op, err, "mesh_axes[%u] = %lld is not an axis of mesh @%s (rank %u)", j,
                        (long long)a, ir_str_get(m, m->meshes[g->mesh].name), mrank);
        if (seen[a])
            return fail(m, op, err, "mesh_axes names axis %lld twice", (long long)a);
        seen[a] = 1;
        if (shape[a] < 1 || mul_dim(g->n, shape[a], &g->n) != 0)
            return fail(m, op, err, "mesh @%s has an invalid size on axis %lld",
                        ir_str_get(m, m->meshes[g->mesh].name), (long long)a);
    }
    if (root != NULL) {
        if (root->kind != IR_ATTR_INTS || root->n != g->naxis)
            return fail(m, op, err, "root must give one coordinate per mesh axis in mesh_axes");
        for (uint32_t j = 0; j < g->naxis; j++) {
            int64_t c = m->ints[root->off + j];
            if (c < 0 || c >= shape[g->axes[j]])
                return fail(m, op, err, "root[%u] = %lld is outside mesh axis %lld", j,
                            (long long)c, (long long)g->axes[j]);
        }
    }
    return 0;
}

/* The reduction attribute: "sum" (default), "max" or "mean". */
static int
load_reduction(const ir_module *m, ir_id op, const char **red, di_error *err)
{
    *red = ir_op_string(m, op, "reduction", NULL);
    if (*red == NULL)
        return 0;
    if (strcmp(*red, "sum") != 0 && strcmp(*red, "max") != 0 && strcmp(*red, "mean") != 0)
        return fail(m, op, err, "reduction \"%s\" is not sum, max or mean", *red);
    return 0;
}

/* dims[d] / n, which must divide. */
static int
div_dim(const ir_module *m, ir_id op, const tensor *t, uint32_t d, int64_t n, const char *what,
        int64_t *dims, di_error *err)
{
    sbuf a;
    if (n <= 0 || t->dims[d] % n != 0)
        return fail(m, op, err,
                    "%s has shape %s: dimension %u (size %lld) does not divide into "
                    "%lld parts",
                    what, shape_str(&a, t->rank, t->dims), d, (long long)t->dims[d], (long long)n);
    dims[d] = t->dims[d] / n;
    return 0;
}

static int
mul_dim_at(const ir_module *m, ir_id op, const tensor *t, uint32_t d, int64_t n, int64_t *dims,
           di_error *err)
{
    if (mul_dim(t->dims[d], n, &dims[d]) != 0)
        return fail(m, op, err, "dimension %u overflows when multiplied by %lld", d, (long long)n);
    return 0;
}

/* The dims attributes of a collective, normalized against rank. */
typedef struct comm_dims {
    uint32_t dim, split_dim, concat_dim;
} comm_dims;

static int
load_comm_dims(const ir_module *m, ir_id op, uint32_t rank, comm_dims *cd, di_error *err)
{
    int kind = m->ops[op].kind;
    int64_t v;
    int rc;
    memset(cd, 0, sizeof *cd);
    if (kind == IR_OP_ALLTOALL) {
        if ((rc = attr_int_req(m, op, "split_dim", &v, err)) != 0 ||
            (rc = norm_axis(m, op, "split_dim", v, rank, &cd->split_dim, err)) != 0 ||
            (rc = attr_int_req(m, op, "concat_dim", &v, err)) != 0 ||
            (rc = norm_axis(m, op, "concat_dim", v, rank, &cd->concat_dim, err)) != 0)
            return rc;
    } else if (kind == IR_OP_SCATTER || kind == IR_OP_GATHERTO || kind == IR_OP_ALLGATHER ||
               kind == IR_OP_REDUCESCATTER || kind == IR_OP_ALLSLICE) {
        if ((rc = attr_int_req(m, op, "dim", &v, err)) != 0 ||
            (rc = norm_axis(m, op, "dim", v, rank, &cd->dim, err)) != 0)
            return rc;
    }
    return 0;
}

/*
 * The per-device result shape of collective kind over a group of n devices,
 * from the per-device input t (mesh form on a device tensor, and each
 * element of the tuple form).
 */
static int
local_comm_dims(const ir_module *m, ir_id op, const tensor *t, const comm_dims *cd, int64_t n,
                const char *what, int64_t *dims, di_error *err)
{
    int rc = 0;
    memcpy(dims, t->dims, t->rank * sizeof dims[0]);
    switch (m->ops[op].kind) {
    case IR_OP_ALLGATHER:
    case IR_OP_GATHERTO:
        rc = mul_dim_at(m, op, t, cd->dim, n, dims, err);
        break;
    case IR_OP_REDUCESCATTER:
    case IR_OP_SCATTER:
    case IR_OP_ALLSLICE:
        rc = div_dim(m, op, t, cd->dim, n, what, dims, err);
        break;
    case IR_OP_ALLTOALL:
        if ((rc = div_dim(m, op, t, cd->split_dim, n, what, dims, err)) != 0)
            return rc;
        if (cd->concat_dim == cd->split_dim)
            dims[cd->concat_dim] = t->dims[cd->concat_dim];
        else
            rc = mul_dim_at(m, op, t, cd->concat_dim, n, dims, err);
        break;
    default:
        break;
    }
    return rc;
}

/*
 * The mesh form on a distributed tensor: the global shape stays, the
 * placements on the group's axes change.
 */
static int
comm_dtensor(ir_module *m, ir_id op, const group *g, const tensor *t, const comm_dims *cd,
             const char *red, ir_id *out, di_error *err)
{
    int kind = m->ops[op].kind;
    int64_t place[IR_MAX_RANK], want = 0, become = IR_PLACE_R;
    const char *want_s = "";
    pbuf pa, pb;
    sbuf sa;
    memcpy(place, t->placements, t->nplace * sizeof place[0]);
    if (t->at.mesh != g->mesh)
        return fail(m, op, err, "input 0 lives on mesh @%s, but the op names mesh @%s",
                    ir_str_get(m, m->meshes[t->at.mesh].name),
                    ir_str_get(m, m->meshes[g->mesh].name));
    for (uint32_t j = 0; j < g->naxis; j++) {
        uint32_t a = (uint32_t)g->axes[j];
        int64_t p = place[a];
        int ok;
        switch (kind) {
        case IR_OP_ALLREDUCE:
        case IR_OP_REDUCESCATTER:
            if (red == NULL)
                ok = p == IR_PLACE_PSUM || p == IR_PLACE_PMAX;
            else if (strcmp(red, "max") == 0)
                ok = p == IR_PLACE_PMAX;
            else
                ok = p == IR_PLACE_PSUM;
            want_s = red == NULL               ? "P(sum) or P(max)"
                     : strcmp(red, "max") == 0 ? "P(max)"
                                               : "P(sum)";
            become = kind == IR_OP_ALLREDUCE ? IR_PLACE_R : (int64_t)cd->dim;
            break;
        case IR_OP_ALLGATHER:
        case IR_OP_GATHERTO:
            want = cd->dim;
            ok = p == want;
            become = IR_PLACE_R;
            break;
        case IR_OP_ALLTOALL:
            /* The local concat_dim grows and split_dim shrinks: S[concat] -> S[split]. */
            want = cd->concat_dim;
            ok = p == want;
            become = cd->split_dim;
            break;
        case IR_OP_SCATTER:
        case IR_OP_ALLSLICE:
            want = IR_PLACE_R;
            ok = p == want;
            become = cd->dim;
            break;
        default: /* broadcast */
            want = IR_PLACE_R;
            ok = p == want;
            become = IR_PLACE_R;
            break;
        }
        if (!ok)
            return fail(m, op, err, "input 0 has placement %s on mesh axis %u, expected %s",
                        place_str(p, &pa), a, *want_s ? want_s : place_str(want, &pb));
        place[a] = become;
    }
    /* New splits must divide the global dimension by the product of their axes. */
    for (uint32_t d = 0; d < t->rank; d++) {
        int64_t parts = 1;
        for (uint32_t a = 0; a < t->nplace; a++)
            if (place[a] == (int64_t)d && mul_dim(parts, ir_mesh_shape(m, g->mesh)[a], &parts) != 0)
                parts = 0;
        if (parts <= 0 || t->dims[d] % parts != 0)
            return fail(m, op, err,
                        "input 0 has shape %s: dimension %u does not divide over "
                        "the %lld devices that would split it",
                        shape_str(&sa, t->rank, t->dims), d, (long long)parts);
    }
    out[0] = ir_type_dtensor(m, t->dtype, t->rank, t->dims, g->mesh, place);
    return 0;
}

/* The mesh form: a distributed tensor or the per-device tensor of a pmap body. */
static int
comm_mesh(ir_module *m, ir_id op, const group *g, ir_id *out, di_error *err)
{
    tensor t;
    comm_dims cd;
    const char *red = NULL;
    int64_t dims[IR_MAX_RANK];
    int rc;
    if ((rc = load_input(m, op, 0, &t, err)) != 0 || (rc = load_reduction(m, op, &red, err)) != 0)
        return rc;
    if (t.rank == 0 && m->ops[op].kind != IR_OP_ALLREDUCE && m->ops[op].kind != IR_OP_BROADCAST)
        return fail(m, op, err, "input 0 is a scalar; this collective needs rank >= 1");
    if ((rc = load_comm_dims(m, op, t.rank, &cd, err)) != 0)
        return rc;
    if (t.at.mesh)
        return comm_dtensor(m, op, g, &t, &cd, red, out, err);
    if ((rc = local_comm_dims(m, op, &t, &cd, g->n, "input 0", dims, err)) != 0)
        return rc;
    out[0] = ir_type_with_dims(m, t.type, t.rank, dims);
    return 0;
}

/* Checks that input 0 is a tensor outside any mesh or device variable. */
static int
load_source(const ir_module *m, ir_id op, tensor *t, int need_device, di_error *err)
{
    pbuf b;
    int rc;
    if ((rc = load_input(m, op, 0, t, err)) != 0)
        return rc;
    if (t->at.mesh || t->at.devvar || (need_device && t->at.device == IR_DEVICE_NONE))
        return fail(m, op, err, "input 0 lives on %s, expected a concrete device%s",
                    site_str(m, &t->at, &b), need_device ? "" : " (or none)");
    return 0;
}

/*
 * Reads the tuple form's input: a tuple of n >= 1 tensors on distinct
 * concrete devices. Each element is checked against element 0: same dtype
 * and rank, and same shape except along dimension except_dim (-1: none;
 * -2: the shapes are not compared).
 * *first receives element 0.
 */
static int
load_tuple_input(const ir_module *m, ir_id op, int64_t except_dim, tensor *first, uint32_t *n,
                 di_error *err)
{
    ir_id ty = m->values[ir_op_input(m, op, 0)].type;
    int64_t *devs;
    tensor t;
    tbuf tb;
    sbuf a, b;
    pbuf pb;
    int rc = 0;
    if (ty == 0 || ty >= m->ntype || m->types[ty].kind != IR_TYPE_TUPLE)
        return fail(m, op, err,
                    "input 0 is %s; the tuple form takes a tuple with one tensor per "
                    "device (or give mesh and mesh_axes)",
                    type_str(m, ty, &tb));
    *n = m->types[ty].nelem;
    if (*n == 0)
        return fail(m, op, err, "input 0 is an empty tuple");
    devs = di_malloc(*n * sizeof *devs);
    if (devs == NULL)
        return di_error_set(err, DI_ENOMEM, "out of memory");
    for (uint32_t k = 0; k < *n && rc == 0; k++) {
        tensor *e = k == 0 ? first : &t;
        int same = 1;
        ir_id et = m->refs[m->types[ty].elems + k];
        if ((rc = load_type(m, op, et, "input 0 element", k, e, err)) != 0)
            break;
        if (e->at.device == IR_DEVICE_NONE || e->at.devvar || e->at.mesh) {
            rc = fail(m, op, err, "input 0 element %u lives on %s, expected a device", k,
                      site_str(m, &e->at, &pb));
            break;
        }
        devs[k] = e->at.device;
        if (k == 0)
            continue;
        if (t.dtype != first->dtype) {
            rc = fail(m, op, err, "input 0 element %u has dtype %s, element 0 has %s", k,
                      ir_dtype_name(t.dtype), ir_dtype_name(first->dtype));
            break;
        }
        if (t.rank != first->rank)
            same = 0;
        for (uint32_t d = 0; same && except_dim != -2 && d < first->rank; d++)
            if ((int64_t)d != except_dim && t.dims[d] != first->dims[d])
                same = 0;
        if (!same)
            rc = fail(m, op, err, "input 0 element %u has shape %s, element 0 has %s%s", k,
                      shape_str(&a, t.rank, t.dims), shape_str(&b, first->rank, first->dims),
                      except_dim >= 0 ? " (they may differ only along dim)" : "");
    }
    if (rc == 0)
        rc = check_distinct(m, op, devs, *n, "input 0", err);
    di_free(devs);
    return rc;
}

/* The tuple form of all_reduce, all_gather, reduce_scatter, all_to_all. */
static int
comm_tuple(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    tensor first;
    comm_dims cd;
    const char *red = NULL;
    int64_t dims[IR_MAX_RANK];
    uint32_t n;
    ir_id ty, *elems;
    int rc;
    if ((rc = load_reduction(m, op, &red, err)) != 0 ||
        (rc = load_tuple_input(m, op, -1, &first, &n, err)) != 0)
        return rc;
    if (first.rank == 0 && m->ops[op].kind != IR_OP_ALLREDUCE)
        return fail(m, op, err, "input 0 holds scalars; this collective needs rank >= 1");
    if ((rc = load_comm_dims(m, op, first.rank, &cd, err)) != 0 ||
        (rc = local_comm_dims(m, op, &first, &cd, n, "input 0 element 0", dims, err)) != 0)
        return rc;
    elems = di_malloc(n * sizeof *elems);
    if (elems == NULL)
        return di_error_set(err, DI_ENOMEM, "out of memory");
    ty = m->values[ir_op_input(m, op, 0)].type;
    for (uint32_t k = 0; k < n; k++)
        elems[k] = ir_type_with_dims(m, m->refs[m->types[ty].elems + k], first.rank, dims);
    out[0] = ir_type_tuple(m, n, elems);
    di_free(elems);
    return 0;
}

static int
infer_allreduce(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    group g;
    int rc = load_group(m, op, &g, err);
    if (rc != 0)
        return rc;
    return g.mesh ? comm_mesh(m, op, &g, out, err) : comm_tuple(m, op, out, err);
}

static int
infer_allgather(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    return infer_allreduce(m, op, out, err);
}

static int
infer_reducescatter(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    return infer_allreduce(m, op, out, err);
}

static int
infer_alltoall(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    return infer_allreduce(m, op, out, err);
}

/*
 * dist.shift: member i's tensor goes to member i + offset (1 by default) of
 * its group, cyclically, along the mesh axes (MLIR's mesh.shift with
 * rotation): a ring step. On per-device tensors only: on a distributed
 * tensor it would move blocks between devices, which no placement says.
 */
static int
infer_shift(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    group g;
    tensor t;
    int rc = load_group(m, op, &g, err);
    if (rc != 0)
        return rc;
    if (g.mesh == 0)
        return fail(m, op, err, "needs a mesh (there is no tuple form)");
    if ((rc = load_input(m, op, 0, &t, err)) != 0)
        return rc;
    if (t.at.mesh)
        return fail(m, op, err, "input 0 is a distributed tensor; a shift moves per-device ones");
    out[0] = t.type;
    return 0;
}

/* dist.all_slice: each member keeps its block of a replicated value (mesh form only). */
static int
infer_allslice(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    group g;
    int rc = load_group(m, op, &g, err);
    if (rc != 0)
        return rc;
    if (g.mesh == 0)
        return fail(m, op, err, "needs a mesh (there is no tuple form)");
    return comm_mesh(m, op, &g, out, err);
}

int
ir_placement_parse(const char *s, int64_t *out, uint32_t max, uint32_t *n)
{
    uint32_t k = 0;
    int bracket;
    while (*s == ' ')
        s++;
    bracket = *s == '[';
    if (bracket)
        s++;
    for (;;) {
        int64_t p;
        while (*s == ' ')
            s++;
        if (*s == 'R') {
            p = IR_PLACE_R;
            s++;
        } else if (strncmp(s, "P(sum)", 6) == 0 || strncmp(s, "P(max)", 6) == 0) {
            p = s[2] == 's' ? IR_PLACE_PSUM : IR_PLACE_PMAX;
            s += 6;
        } else if (s[0] == 'S' && s[1] == '[' && s[2] >= '0' && s[2] <= '9') {
            p = 0;
            for (s += 2; *s >= '0' && *s <= '9'; s++)
                if ((p = p * 10 + (*s - '0')) >= IR_MAX_RANK)
                    return -1;
            if (*s++ != ']')
                return -1;
        } else {
            return -1;
        }
        if (k >= max)
            return -1;
        out[k++] = p;
        while (*s == ' ')
            s++;
        if (*s != ',')
            break;
        s++;
    }
    if (bracket && *s++ != ']')
        return -1;
    while (*s == ' ')
        s++;
    if (*s != '\0')
        return -1;
    *n = k;
    return 0;
}

const char *
ir_placement_format(const int64_t *p, uint32_t n, char *buf, size_t size)
{
    size_t len = 0;
    buf[0] = '\0';
    for (uint32_t a = 0; a < n && len < size; a++) {
        pbuf b;
        len += (size_t)snprintf(buf + len, size - len, "%s%s", a ? ", " : "", place_str(p[a], &b));
    }
    return buf;
}

/*
 * The mesh and placements attributes of annotate_sharding and redistribute,
 * checked against a tensor t: one placement per mesh axis, splits of
 * dimensions below the rank that divide.
 */
static int
load_sharding(const ir_module *m, ir_id op, const tensor *t, ir_id *mesh, int64_t *place,
              di_error *err)
{
    const ir_attr *ma = ir_op_attr(m, op, "mesh");
    const ir_attr *pa = ir_op_attr(m, op, "placement");
    const int64_t *shape;
    uint32_t n, mrank;
    sbuf sa;
    if (ma == NULL || ma->kind != IR_ATTR_MESH || ma->s == 0 || ma->s >= m->nmesh)
        return fail(m, op, err, "mesh does not name a mesh of the module");
    if (pa == NULL || pa->kind != IR_ATTR_STRING)
        return fail(m, op, err, "needs a string attribute placement (\"S[1]\", \"R, S[0]\", ...)");
    *mesh = ma->s;
    mrank = m->meshes[ma->s].rank;
    shape = ir_mesh_shape(m, ma->s);
    if (ir_placement_parse(ir_str_get(m, pa->s), place, IR_MAX_RANK, &n) != 0)
        return fail(m, op, err,
                    "placement \"%.64s\" is not a list of R, S[dim], P(sum) or P(max)",
                    ir_str_get(m, pa->s));
    if (n != mrank)
        return fail(m, op, err, "placement \"%.64s\" has %u entries for the %u axes of @%s",
                    ir_str_get(m, pa->s), n, mrank, ir_str_get(m, m->meshes[ma->s].name));
    for (uint32_t d = 0; d < t->rank; d++) {
        int64_t parts = 1;
        for (uint32_t a = 0; a < mrank; a++)
            if (place[a] == (int64_t)d && mul_dim(parts, shape[a], &parts) != 0)
                parts = 0;
        if (parts <= 0 || t->dims[d] % parts != 0)
            return fail(m, op, err,
                        "input 0 has shape %s: dimension %u does not divide over the %lld "
                        "devices that split it",
                        shape_str(&sa, t->rank, t->dims), d, (long long)parts);
    }
    for (uint32_t a = 0; a < mrank; a++)
        if (IR_PLACE_IS_SPLIT(place[a]) && place[a] >= (int64_t)t->rank)
            return fail(m, op, err, "placement splits dimension %lld of a rank-%u tensor",
                        (long long)place[a], t->rank);
    return 0;
}

/*
 * dist.annotate_sharding: the user's wish for a value's placement; the
 * value's type is unchanged until sharding propagation, which removes it.
 * dist.redistribute: a global value to another placement, on its mesh or
 * another; the result is that distributed tensor.
 */
static int
infer_sharding(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    int annotate = m->ops[op].kind == IR_OP_ANNOTATE;
    tensor t;
    ir_id mesh = 0;
    int64_t place[IR_MAX_RANK];
    int rc;
    if ((rc = load_input(m, op, 0, &t, err)) != 0 ||
        (rc = load_sharding(m, op, &t, &mesh, place, err)) != 0)
        return rc;
    /* A sequential module may live on one device (as an ONNX import does); not a pmap body. */
    if (t.at.devvar || (!annotate && t.at.device != IR_DEVICE_NONE))
        return fail(m, op, err, "input 0 lives on a %s; %s values of the global view",
                    t.at.devvar ? "pmap's device variable" : "device",
                    annotate ? "annotate" : "redistribute");
    out[0] = annotate ? t.type : ir_type_dtensor(m, t.dtype, t.rank, t.dims, mesh, place);
    return 0;
}

/* func.call: the callee's signature, the inputs' types equal to its arguments'. */
static int
infer_call(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    ir_id f = m->ops[op].body;
    const ir_region *r;
    if (!(m->ops[op].flags & IR_OPFLAG_CALLEE) || f == 0 || f >= m->nregion ||
        m->regions[f].parent != 0)
        return fail(m, op, err, "names no function (give callee = @f)");
    r = &m->regions[f];
    if (r->narg != m->ops[op].ninput || r->nresult != m->ops[op].noutput)
        return fail(m, op, err, "@%s takes %u arguments and returns %u values; the call has %u "
                    "and %u",
                    ir_str_get(m, r->name), r->narg, r->nresult, m->ops[op].ninput,
                    m->ops[op].noutput);
    for (uint32_t i = 0; i < r->narg; i++)
        if (m->values[ir_op_input(m, op, i)].type != m->values[r->args[i]].type)
            return fail(m, op, err, "input %u's type differs from argument %u of @%s", i, i,
                        ir_str_get(m, r->name));
    for (uint32_t i = 0; i < r->nresult; i++)
        out[i] = m->values[r->results[i]].type;
    return 0;
}

/*
 * dist.send: a tensor on one device to another (`device`), or, given a
 * tuple, every element to its own destination (`devices`, one per element):
 * the point-to-point transfers of a pipeline stage boundary as one op.
 */
static int
infer_send(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    tensor x;
    int64_t d;
    int rc;
    ir_id ty = m->ops[op].ninput ? m->values[ir_op_input(m, op, 0)].type : 0;
    if (ty && ty < m->ntype && m->types[ty].kind == IR_TYPE_TUPLE) {
        const ir_type *tt = &m->types[ty];
        uint32_t n;
        const int64_t *devs = ir_op_ints(m, op, "devices", &n);
        ir_id *elems;
        if (ir_op_attr(m, op, "device") != NULL)
            return fail(m, op, err,
                        "a tuple is sent with `devices` (one per element), not `device`");
        if (devs == NULL || n != tt->nelem)
            return fail(m, op, err, "input 0 is a tuple of %u tensors: `devices` needs %u entries",
                        tt->nelem, tt->nelem);
        /* Checked first: interning types below may move m->types, m->refs and m->ints. */
        for (uint32_t i = 0; i < n; i++) {
            const ir_type *e = &m->types[m->refs[tt->elems + i]];
            if (e->kind != IR_TYPE_TENSOR || e->mesh || e->devvar || e->device < 0)
                return fail(m, op, err, "element %u of input 0 is not a tensor on a device", i);
            if (devs[i] < 0 || devs[i] > INT32_MAX || devs[i] == e->device)
                return fail(m, op, err, "devices[%u] = %lld: not another device than element %u's",
                            i, (long long)devs[i], i);
        }
        elems = di_malloc((n ? n : 1) * sizeof *elems);
        if (elems == NULL)
            return di_error_set(err, DI_ENOMEM, "out of memory");
        for (uint32_t i = 0; i < n; i++) {
            uint32_t nd;
            int32_t dev = (int32_t)ir_op_ints(m, op, "devices", &nd)[i];
            elems[i] = ir_type_with_device(m, m->refs[m->types[ty].elems + i], dev, 0);
        }
        out[0] = ir_type_tuple(m, n, elems);
        di_free(elems);
        return 0;
    }
    if (ir_op_attr(m, op, "devices") != NULL)
        return fail(m, op, err, "`devices` is for sending a tuple; a tensor takes `device`");
    if ((rc = load_source(m, op, &x, 1, err)) != 0 ||
        (rc = attr_int_req(m, op, "device", &d, err)) != 0)
        return rc;
    if (d < 0 || d > INT32_MAX)
        return fail(m, op, err, "device %lld is not a device id", (long long)d);
    if (d == x.at.device)
        return fail(m, op, err, "input 0 already lives on device %lld", (long long)d);
    out[0] = ir_type_with_device(m, x.type, (int32_t)d, 0);
    return 0;
}

/* Tuple-form broadcast and scatter: from one tensor to a tuple over devices. */
static int
infer_broadcast_tuple(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    group g;
    tensor x;
    comm_dims cd;
    int64_t *devs, dims[IR_MAX_RANK];
    uint32_t n;
    ir_id *elems, shaped;
    int rc;
    if ((rc = load_group(m, op, &g, err)) != 0)
        return rc;
    if (g.mesh)
        return comm_mesh(m, op, &g, out, err);
    if ((rc = load_source(m, op, &x, 0, err)) != 0)
        return rc;
    if (m->ops[op].kind == IR_OP_SCATTER && x.rank == 0)
        return fail(m, op, err, "input 0 is a scalar; scatter needs rank >= 1");
    if ((rc = load_comm_dims(m, op, x.rank, &cd, err)) != 0 ||
        (rc = load_devices(m, op, "devices", &devs, &n, err)) != 0)
        return rc;
    if ((rc = local_comm_dims(m, op, &x, &cd, n, "input 0", dims, err)) != 0) {
        di_free(devs);
        return rc;
    }
    elems = di_malloc(n * sizeof *elems);
    if (elems == NULL) {
        di_free(devs);
        return di_error_set(err, DI_ENOMEM, "out of memory");
    }
    shaped = ir_type_with_dims(m, x.type, x.rank, dims);
    for (uint32_t k = 0; k < n; k++)
        elems[k] = ir_type_with_device(m, shaped, (int32_t)devs[k], 0);
    out[0] = ir_type_tuple(m, n, elems);
    di_free(elems);
    di_free(devs);
    return 0;
}

static int
infer_scatter(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    return infer_broadcast_tuple(m, op, out, err);
}

/* Tuple-form gather: concatenates a tuple's elements on one device. */
static int
infer_gather_tuple(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    group g;
    tensor first, t;
    int64_t dim_attr, dev;
    uint32_t n, dim;
    ir_id ty;
    int rc;
    if ((rc = load_group(m, op, &g, err)) != 0)
        return rc;
    if (g.mesh)
        return comm_mesh(m, op, &g, out, err);
    if (ir_op_attr(m, op, "device") == NULL)
        return fail(m, op, err, "the tuple form needs an int attribute device (the destination)");
    if ((rc = attr_int_req(m, op, "device", &dev, err)) != 0 ||
        (rc = attr_int_req(m, op, "dim", &dim_attr, err)) != 0)
        return rc;
    if (dev < 0 || dev > INT32_MAX)
        return fail(m, op, err, "device %lld is not a device id", (long long)dev);
    /* Element 0 fixes the rank that dim is normalized against; then check them all. */
    if ((rc = load_tuple_input(m, op, -2, &first, &n, err)) != 0)
        return rc;
    if (first.rank == 0)
        return fail(m, op, err, "input 0 holds scalars; gather needs rank >= 1");
    if ((rc = norm_axis(m, op, "dim", dim_attr, first.rank, &dim, err)) != 0 ||
        (rc = load_tuple_input(m, op, dim, &first, &n, err)) != 0)
        return rc;
    ty = m->values[ir_op_input(m, op, 0)].type;
    for (uint32_t k = 1; k < n; k++) {
        if ((rc = load_type(m, op, m->refs[m->types[ty].elems + k], "input 0 element", k, &t,
                            err)) != 0)
            return rc;
        if (first.dims[dim] > INT64_MAX - t.dims[dim])
            return fail(m, op, err, "the gathered dimension overflows");
        first.dims[dim] += t.dims[dim];
    }
    out[0] = ir_type_tensor(m, first.dtype, first.rank, first.dims, (int32_t)dev);
    return 0;
}

/* ---- structure ---- */

static int
infer_tuple(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    uint32_t n = m->ops[op].ninput;
    ir_id *elems = di_malloc((n ? n : 1) * sizeof *elems);
    if (elems == NULL)
        return di_error_set(err, DI_ENOMEM, "out of memory");
    for (uint32_t i = 0; i < n; i++) {
        elems[i] = m->values[ir_op_input(m, op, i)].type;
        if (elems[i] == 0 || elems[i] >= m->ntype) {
            di_free(elems);
            return fail(m, op, err, "input %u has no type", i);
        }
    }
    out[0] = ir_type_tuple(m, n, elems);
    di_free(elems);
    return 0;
}

static int
infer_tupleget(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    ir_id ty = m->values[ir_op_input(m, op, 0)].type;
    int64_t index;
    tbuf tb;
    int rc;
    if ((rc = attr_int_req(m, op, "index", &index, err)) != 0)
        return rc;
    if (ty == 0 || ty >= m->ntype || m->types[ty].kind != IR_TYPE_TUPLE)
        return fail(m, op, err, "input 0 is %s, expected a tuple", type_str(m, ty, &tb));
    if (index < 0 || index >= (int64_t)m->types[ty].nelem)
        return fail(m, op, err, "index %lld is out of range for a tuple of %u", (long long)index,
                    m->types[ty].nelem);
    out[0] = m->refs[m->types[ty].elems + index];
    return 0;
}

/* Local shard dims of a distributed tensor: each dimension divided by the axes splitting it. */
static int
shard_dims(const ir_module *m, ir_id op, const tensor *t, const char *what, uint32_t i,
           int64_t *dims, di_error *err)
{
    const int64_t *shape = ir_mesh_shape(m, t->at.mesh);
    sbuf a;
    memcpy(dims, t->dims, t->rank * sizeof dims[0]);
    for (uint32_t ax = 0; ax < t->nplace; ax++) {
        int64_t p = t->placements[ax];
        if (!IR_PLACE_IS_SPLIT(p))
            continue;
        if (shape[ax] < 1 || dims[p] % shape[ax] != 0)
            return fail(m, op, err,
                        "%s %u has shape %s, split over mesh axis %u (size %lld): "
                        "dimension %lld does not divide",
                        what, i, shape_str(&a, t->rank, t->dims), ax, (long long)shape[ax],
                        (long long)p);
        dims[p] /= shape[ax];
    }
    return 0;
}

/* "body", or "callee @f" for a pmap that calls function f, for messages. */
static const char *
pmap_body_word(const ir_module *m, ir_id op, char *buf, size_t n)
{
    ir_id f = ir_op_callee(m, op);
    if (f == 0 || f >= m->nregion)
        return "body";
    snprintf(buf, n, "callee @%.64s", ir_str_get(m, m->regions[f].name));
    return buf;
}

/*
 * Is tensor type a type b placed on device dev instead (same dtype and
 * shape, a concrete device, no mesh or device variable)? A group's tuple
 * holds one such type per device: the first is checked in full, the others
 * by this comparison, without interning a type per element.
 */
static int
same_but_device(const ir_module *m, ir_id a, ir_id b, int64_t dev)
{
    const ir_type *x, *y;
    if (a == 0 || b == 0 || a >= m->ntype || b >= m->ntype)
        return 0;
    x = &m->types[a];
    y = &m->types[b];
    return x->kind == IR_TYPE_TENSOR && y->kind == IR_TYPE_TENSOR && x->dtype == y->dtype &&
           x->rank == y->rank && x->mesh == 0 && y->mesh == 0 && x->devvar == 0 &&
           y->devvar == 0 && (int64_t)x->device == dev &&
           (x->rank == 0 || x->dims == y->dims ||
            memcmp(m->ints + x->dims, m->ints + y->dims, x->rank * sizeof(int64_t)) == 0);
}

static int
pmap_devices(ir_module *m, ir_id op, ir_id devvar, ir_id body, ir_id *out, di_error *err)
{
    int64_t *devs;
    uint32_t n;
    ir_id *elems;
    tensor t;
    tbuf ta, tb;
    pbuf pb;
    int rc;
    if ((rc = load_devices(m, op, "devices", &devs, &n, err)) != 0)
        return rc;
    elems = di_malloc(n * sizeof *elems);
    if (elems == NULL) {
        di_free(devs);
        return di_error_set(err, DI_ENOMEM, "out of memory");
    }
    for (uint32_t i = 0; i < m->ops[op].ninput && rc == 0; i++) {
        ir_id ty = m->values[ir_op_input(m, op, i)].type;
        ir_id argty = m->values[m->regions[body].args[i]].type;
        if (ty == 0 || ty >= m->ntype || m->types[ty].kind != IR_TYPE_TUPLE ||
            m->types[ty].nelem != n) {
            rc = fail(m, op, err,
                      "input %u is %s, expected a tuple of %u tensors (one per "
                      "device)",
                      i, type_str(m, ty, &ta), n);
            break;
        }
        for (uint32_t k = 0; k < n; k++) {
            ir_id et = m->refs[m->types[ty].elems + k], local;
            if (k > 0 && same_but_device(m, et, m->refs[m->types[ty].elems], devs[k]))
                continue; /* element 0 was checked: this one differs in its device only */
            if ((rc = load_type(m, op, et, "input element", i, &t, err)) != 0)
                break;
            if (t.at.mesh || t.at.devvar || t.at.device != devs[k]) {
                rc = fail(m, op, err,
                          "input %u element %u lives on %s, expected device %lld "
                          "(devices[%u])",
                          i, k, site_str(m, &t.at, &pb), (long long)devs[k], k);
                break;
            }
            local = ir_type_with_device(m, et, IR_DEVICE_NONE, devvar);
            if (local != argty) {
                char w[96];
                rc = fail(m, op, err,
                          "%s argument %u has type %s, expected %s (input %u "
                          "element %u)",
                          pmap_body_word(m, op, w, sizeof w), i, type_str(m, argty, &ta),
                          type_str(m, local, &tb), i, k);
                break;
            }
        }
    }
    for (uint32_t i = 0; i < m->ops[op].noutput && rc == 0; i++) {
        ir_id rty = m->values[m->regions[body].results[i]].type;
        if ((rc = load_type(m, op, rty, "body result", i, &t, err)) != 0)
            break;
        if (t.at.devvar != devvar || t.at.mesh) {
            char w[96];
            rc = fail(m, op, err, "%s result %u lives on %s, expected device variable %s",
                      pmap_body_word(m, op, w, sizeof w), i, site_str(m, &t.at, &pb),
                      ir_str_get(m, devvar));
            break;
        }
        /* The declared type when it is that tuple (checked without interning n types). */
        {
            ir_id dty = m->values[ir_op_output(m, op, i)].type;
            const ir_type *dt = dty && dty < m->ntype ? &m->types[dty] : NULL;
            int same = dt && dt->kind == IR_TYPE_TUPLE && dt->nelem == n && n > 0 &&
                       m->refs[dt->elems] == ir_type_with_device(m, rty, (int32_t)devs[0], 0);
            for (uint32_t k = 1; k < n && same; k++)
                same = same_but_device(m, m->refs[dt->elems + k], m->refs[dt->elems], devs[k]);
            if (same) {
                out[i] = dty;
                continue;
            }
        }
        for (uint32_t k = 0; k < n; k++)
            elems[k] = ir_type_with_device(m, rty, (int32_t)devs[k], 0);
        out[i] = ir_type_tuple(m, n, elems);
    }
    di_free(elems);
    di_free(devs);
    return rc;
}

static int
pmap_mesh(ir_module *m, ir_id op, ir_id devvar, ir_id mesh, ir_id body, ir_id *out, di_error *err)
{
    tensor t;
    int64_t dims[IR_MAX_RANK];
    tbuf ta, tb, tc;
    pbuf pb;
    int rc;
    if (mesh == 0 || mesh >= m->nmesh)
        return fail(m, op, err, "mesh does not name a mesh of the module");
    for (uint32_t i = 0; i < m->ops[op].ninput; i++) {
        ir_id argty = m->values[m->regions[body].args[i]].type, local;
        if ((rc = load_input(m, op, i, &t, err)) != 0)
            return rc;
        if (t.at.mesh != mesh)
            return fail(m, op, err, "input %u lives on %s, expected mesh @%s", i,
                        site_str(m, &t.at, &pb), ir_str_get(m, m->meshes[mesh].name));
        if ((rc = shard_dims(m, op, &t, "input", i, dims, err)) != 0)
            return rc;
        local = ir_type_tensor_var(m, t.dtype, t.rank, dims, devvar);
        if (local != argty) {
            char w[96];
            return fail(m, op, err,
                        "%s argument %u has type %s, expected %s (the local shard "
                        "of input %u)",
                        pmap_body_word(m, op, w, sizeof w), i, type_str(m, argty, &ta),
                        type_str(m, local, &tb), i);
        }
    }
    for (uint32_t i = 0; i < m->ops[op].noutput; i++) {
        ir_id decl = m->values[ir_op_output(m, op, i)].type, local;
        ir_id rty = m->values[m->regions[body].results[i]].type;
        if (decl == 0)
            return fail(m, op, err,
                        "result %u needs a declared type: a dist.pmap over a mesh "
                        "cannot infer the placements of its results",
                        i);
        if ((rc = load_type(m, op, decl, "result", i, &t, err)) != 0)
            return rc;
        if (t.at.mesh != mesh)
            return fail(m, op, err, "result %u is declared on %s, expected mesh @%s", i,
                        site_str(m, &t.at, &pb), ir_str_get(m, m->meshes[mesh].name));
        if ((rc = shard_dims(m, op, &t, "result", i, dims, err)) != 0)
            return rc;
        local = ir_type_tensor_var(m, t.dtype, t.rank, dims, devvar);
        if (local != rty) {
            char w[96];
            return fail(m, op, err,
                        "result %u is declared %s, whose local shard is %s, but the "
                        "%s returns %s",
                        i, type_str(m, decl, &ta), type_str(m, local, &tb),
                        pmap_body_word(m, op, w, sizeof w), type_str(m, rty, &tc));
        }
        out[i] = decl;
    }
    return 0;
}

static int
infer_pmap(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    const ir_attr *dv = ir_op_attr(m, op, "device_var");
    const ir_attr *ma = ir_op_attr(m, op, "mesh");
    const ir_attr *devs = ir_op_attr(m, op, "devices");
    ir_id body = m->ops[op].body;
    if (dv == NULL || dv->kind != IR_ATTR_STRING || dv->s == 0 || m->chars[dv->s] == '\0')
        return fail(m, op, err, "needs a string attribute device_var");
    if ((ma != NULL) == (devs != NULL))
        return fail(m, op, err, "needs exactly one of the attributes devices and mesh");
    if (body == 0 || body >= m->nregion)
        return fail(m, op, err, "has no body");
    if (m->regions[body].narg != m->ops[op].ninput)
        return fail(m, op, err, "body has %u arguments for %u inputs", m->regions[body].narg,
                    m->ops[op].ninput);
    if (m->regions[body].nresult != m->ops[op].noutput)
        return fail(m, op, err, "body returns %u values for %u results", m->regions[body].nresult,
                    m->ops[op].noutput);
    if (ma != NULL)
        return pmap_mesh(m, op, dv->s, ma->kind == IR_ATTR_MESH ? ma->s : 0, body, out, err);
    return pmap_devices(m, op, dv->s, body, out, err);
}

static int
infer_none(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    (void)out;
    return fail(m, op, err, "cannot be an op: a region's results hold the values it returns");
}

static int
infer_opaque(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    for (uint32_t i = 0; i < m->ops[op].noutput; i++) {
        out[i] = m->values[ir_op_output(m, op, i)].type;
        if (out[i] == 0)
            return fail(m, op, err, "result %u of an opaque op needs a declared type", i);
    }
    return 0;
}

/* ---- costs ---- */

static double
value_bytes(const ir_module *m, ir_id v)
{
    ir_id t = m->values[v].type;
    return t && t < m->ntype ? (double)ir_type_bytes(m, t) : 0.0;
}

static double
value_numel(const ir_module *m, ir_id v)
{
    ir_id t = m->values[v].type;
    if (t == 0 || t >= m->ntype || m->types[t].kind != IR_TYPE_TENSOR)
        return 0.0;
    return (double)ir_type_numel(m, t);
}

static double
input_bytes(const ir_module *m, ir_id op, uint32_t i)
{
    return i < m->ops[op].ninput ? value_bytes(m, ir_op_input(m, op, i)) : 0.0;
}

static double
input_numel(const ir_module *m, ir_id op, uint32_t i)
{
    return i < m->ops[op].ninput ? value_numel(m, ir_op_input(m, op, i)) : 0.0;
}

/* Zeroes c and fills bytes_read (all inputs) and bytes_write (all results). */
static void
cost_base(const ir_module *m, ir_id op, ir_cost *c)
{
    memset(c, 0, sizeof *c);
    for (uint32_t i = 0; i < m->ops[op].ninput; i++)
        c->bytes_read += input_bytes(m, op, i);
    for (uint32_t i = 0; i < m->ops[op].noutput; i++)
        c->bytes_write += value_bytes(m, ir_op_output(m, op, i));
}

/* The largest element count among the op's inputs and results. */
static double
max_numel(const ir_module *m, ir_id op)
{
    double n = 0.0, v;
    for (uint32_t i = 0; i < m->ops[op].ninput; i++)
        if ((v = input_numel(m, op, i)) > n)
            n = v;
    for (uint32_t i = 0; i < m->ops[op].noutput; i++)
        if ((v = value_numel(m, ir_op_output(m, op, i))) > n)
            n = v;
    return n;
}

static void
cost_none(const ir_module *m, ir_id op, ir_cost *c)
{
    (void)m;
    (void)op;
    memset(c, 0, sizeof *c);
}

/*
 * Opaque ops that ONNX Runtime's training graphs use, and the op kind whose
 * cost rule prices them (com.microsoft SoftmaxCrossEntropy is
 * SoftmaxCrossEntropyLoss with probability labels, FastGeluGrad is GeluGrad,
 * ...). LambOptimizer does Adam's work plus two norms: Adam's rule is a
 * lower bound for it.
 */
static const struct {
    const char *op_type;
    int kind;
} opaque_costs[] = {
    {"SoftmaxCrossEntropy", IR_OP_SCELOSS},
    {"SoftmaxCrossEntropyGrad", IR_OP_SCELOSSGRAD},
    {"SoftmaxCrossEntropyLossInternal", IR_OP_SCELOSS},
    {"SoftmaxCrossEntropyLossInternalGrad", IR_OP_SCELOSSGRAD},
    {"FastGeluGrad", IR_OP_GELUGRAD},
    {"BiasGeluGrad_dX", IR_OP_GELUGRAD},
    {"SGDOptimizer", IR_OP_SGD},
    {"AdamOptimizer", IR_OP_ADAM},
    {"LambOptimizer", IR_OP_ADAM},
};

/*
 * The kind whose cost rule prices op: its own, or for an opaque op its
 * counterpart's (IR_OP_NONE when it has none).
 */
static int
priced_kind(const ir_module *m, ir_id op)
{
    const char *t;
    if (m->ops[op].kind != IR_OP_OPAQUE)
        return m->ops[op].kind;
    t = m->ops[op].opaque ? ir_safe_str(m, m->ops[op].opaque) : "";
    for (size_t i = 0; i < sizeof opaque_costs / sizeof opaque_costs[0]; i++)
        if (strcmp(t, opaque_costs[i].op_type) == 0)
            return opaque_costs[i].kind;
    return IR_OP_NONE;
}

int
ir_op_has_cost_rule(const ir_module *m, ir_id op)
{
    if (op == 0 || op >= m->nop)
        return 0;
    return priced_kind(m, op) != IR_OP_NONE;
}

/*
 * An opaque op with a counterpart is priced by its rule; one without gets
 * its bytes only (reads and writes, no FLOPs): the memory-bound estimate,
 * which callers that must not guess refuse (ir_op_has_cost_rule).
 */
static void
cost_opaque(const ir_module *m, ir_id op, ir_cost *c)
{
    int k = priced_kind(m, op);
    if (k != IR_OP_NONE)
        ir_opinfos[k].cost(m, op, c);
    else
        cost_base(m, op, c);
}

/* FLOPs per element of elementwise ops (docs/ops.md). */
static double
elemwise_flops(int kind)
{
    switch (kind) {
    case IR_OP_SGD:
        return 2;
    case IR_OP_MSELOSS:
    case IR_OP_MSELOSSGRAD:
    case IR_OP_TANHGRAD:
    case IR_OP_SIGMOIDGRAD:
        return 3;
    default:
        return 1;
    }
}

static void
cost_elemwise(const ir_module *m, ir_id op, ir_cost *c)
{
    cost_base(m, op, c);
    c->flops = elemwise_flops(priced_kind(m, op)) * max_numel(m, op);
}

static void
cost_transcend(const ir_module *m, ir_id op, ir_cost *c)
{
    cost_base(m, op, c);
    c->flops = 4 * max_numel(m, op);
}

static void
cost_gelu(const ir_module *m, ir_id op, ir_cost *c)
{
    cost_base(m, op, c);
    c->flops = 8 * max_numel(m, op);
}

/*
 * Swish (SiLU at alpha 1): x sigmoid(alpha x), a sigmoid's 4 and a product's
 * 1 (the Sigmoid and Mul it replaces); its gradient
 * dy s (1 + alpha x (1 - s)), s = sigmoid(alpha x), 8 as GeluGrad's.
 */
static void
cost_swish(const ir_module *m, ir_id op, ir_cost *c)
{
    cost_base(m, op, c);
    c->flops = (priced_kind(m, op) == IR_OP_SWISHGRAD ? 8 : 5) * max_numel(m, op);
}

static void
cost_softmax(const ir_module *m, ir_id op, ir_cost *c)
{
    cost_base(m, op, c);
    c->flops = 5 * max_numel(m, op);
}

static void
cost_layernorm(const ir_module *m, ir_id op, ir_cost *c)
{
    cost_base(m, op, c);
    /*
     * RMSNormalization: the written-out ops it replaces (a square, the row's sum,
     * two products) 4, its gradient 8; without the centring, half of LayerNormalization's.
     */
    switch (priced_kind(m, op)) {
    case IR_OP_LAYERNORMGRAD:
        c->flops = 16 * max_numel(m, op);
        break;
    case IR_OP_RMSNORM:
        c->flops = 4 * max_numel(m, op);
        break;
    default: /* LayerNormalization, RMSNormalizationGrad */
        c->flops = 8 * max_numel(m, op);
        break;
    }
}

static void
cost_adam(const ir_module *m, ir_id op, ir_cost *c)
{
    cost_base(m, op, c);
    c->flops = 12 * input_numel(m, op, 0);
}

static void
cost_reduce(const ir_module *m, ir_id op, ir_cost *c)
{
    cost_base(m, op, c);
    c->flops = input_numel(m, op, 0);
    if (m->ops[op].kind == IR_OP_REDUCEMEAN && m->ops[op].noutput > 0)
        c->flops += value_numel(m, ir_op_output(m, op, 0));
}

/*
 * Fused attention: 2 sq sk (d + dv) FLOPs per head forward (QK^T and PV), 2.5
 * times that backward (FlashAttention-2: five products, the scores
 * recomputed); causal: the unmasked half, as a load-balanced split gives every
 * rank (docs/ops.md). One exponential per score each way (the softmax's, and
 * the backward's recomputed probabilities), in special. The bytes are the
 * operands' only.
 */
static void
cost_flashattn(const ir_module *m, ir_id op, ir_cost *c)
{
    ir_id q = ir_op_input(m, op, 0), k = ir_op_input(m, op, 1), v = ir_op_input(m, op, 2);
    const ir_type *tq = &m->types[m->values[q].type];
    double sq, sk, d, dv, heads, share;
    cost_base(m, op, c);
    if (tq->kind != IR_TYPE_TENSOR || tq->rank < 2)
        return;
    sq = (double)m->ints[tq->dims + tq->rank - 2];
    d = (double)m->ints[tq->dims + tq->rank - 1];
    sk = (double)ir_type_dims(m, m->values[k].type)[tq->rank - 2];
    dv = (double)ir_type_dims(m, m->values[v].type)[tq->rank - 1];
    heads = value_numel(m, q) / (sq * d);
    share = ir_op_int(m, op, "causal", 0) ? 0.5 * (1.0 + 1.0 / sk) : 1.0; /* of the scores */
    c->flops = 2.0 * heads * sq * sk * (d + dv) * share;
    c->special = heads * sq * sk * share;
    if (m->ops[op].kind == IR_OP_FLASHATTNGRAD)
        c->flops *= 2.5;
}

/* Data movement: no FLOPs, except GatherGrad's scatter-add (one per dy element). */
static void
cost_copy(const ir_module *m, ir_id op, ir_cost *c)
{
    int kind = m->ops[op].kind;
    cost_base(m, op, c);
    if (kind == IR_OP_SLICE) {
        /* Only the slice is read. */
        c->bytes_read = c->bytes_write;
    } else if (kind == IR_OP_GATHER) {
        /* The indices and the gathered rows, not the whole table. */
        c->bytes_read = input_bytes(m, op, 1) + c->bytes_write;
    } else if (kind == IR_OP_GATHERGRAD) {
        c->flops = input_numel(m, op, 1);
    } else if (kind == IR_OP_MOECOMBINE) {
        /* The slots and the rows they name, not the whole expert output. */
        c->bytes_read = input_bytes(m, op, 1) + c->bytes_write;
    } else if (kind == IR_OP_TOPKGRAD) {
        /* Zeros, then the k values per row. */
        c->bytes_read = input_bytes(m, op, 0) + input_bytes(m, op, 1);
    }
}

static double local_bytes(const ir_module *m, ir_id ty);

/* A local slice: the slice is read and written. */
static void
cost_allslice(const ir_module *m, ir_id op, ir_cost *c)
{
    memset(c, 0, sizeof *c);
    if (m->ops[op].noutput < 1)
        return;
    c->bytes_read = c->bytes_write = local_bytes(m, m->values[ir_op_output(m, op, 0)].type);
}

/*
 * Sizes of matmul(a, b) for pricing: batch (product of broadcast batch
 * dims), M, N, K. Zero when the types are not valid matmul operands.
 */
static void
matmul_sizes(const ir_module *m, ir_id op, double *batch, double *mm, double *nn, double *kk)
{
    ir_id ta, tb;
    const int64_t *a, *b;
    uint32_t ra, rb, rba, rbb, r;
    *batch = *mm = *nn = *kk = 0.0;
    if (m->ops[op].ninput < 2)
        return;
    ta = m->values[ir_op_input(m, op, 0)].type;
    tb = m->values[ir_op_input(m, op, 1)].type;
    if (ta == 0 || tb == 0 || ta >= m->ntype || tb >= m->ntype ||
        m->types[ta].kind != IR_TYPE_TENSOR || m->types[tb].kind != IR_TYPE_TENSOR)
        return;
    ra = m->types[ta].rank;
    rb = m->types[tb].rank;
    if (ra == 0 || rb == 0 || ra > IR_MAX_RANK || rb > IR_MAX_RANK)
        return;
    a = ir_type_dims(m, ta);
    b = ir_type_dims(m, tb);
    for (uint32_t i = 0; i < ra; i++)
        if (a[i] < 0)
            return;
    for (uint32_t i = 0; i < rb; i++)
        if (b[i] < 0)
            return;
    *kk = (double)a[ra - 1];
    *mm = ra > 1 ? (double)a[ra - 2] : 1.0;
    *nn = rb > 1 ? (double)b[rb - 1] : 1.0;
    *batch = 1.0;
    rba = ra > 2 ? ra - 2 : 0;
    rbb = rb > 2 ? rb - 2 : 0;
    r = rba > rbb ? rba : rbb;
    for (uint32_t i = 0; i < r; i++) {
        double da = i < rba ? (double)a[rba - 1 - i] : 1.0;
        double db = i < rbb ? (double)b[rbb - 1 - i] : 1.0;
        *batch *= da > db ? da : db;
    }
}

static void
cost_matmul(const ir_module *m, ir_id op, ir_cost *c)
{
    double batch, mm, nn, kk;
    cost_base(m, op, c);
    matmul_sizes(m, op, &batch, &mm, &nn, &kk);
    c->flops = 2.0 * batch * mm * nn * kk;
}

static void
cost_matmulgrad(const ir_module *m, ir_id op, ir_cost *c)
{
    double batch, mm, nn, kk;
    cost_base(m, op, c);
    matmul_sizes(m, op, &batch, &mm, &nn, &kk);
    c->flops = 4.0 * batch * mm * nn * kk;
}

static void
cost_gemm(const ir_module *m, ir_id op, ir_cost *c)
{
    ir_id ta;
    double mn, k;
    int trans = ir_op_int(m, op, "transA", 0) != 0;
    cost_base(m, op, c);
    if (m->ops[op].ninput < 2 || m->ops[op].noutput < 1)
        return;
    ta = m->values[ir_op_input(m, op, 0)].type;
    if (ta == 0 || ta >= m->ntype || m->types[ta].kind != IR_TYPE_TENSOR || m->types[ta].rank != 2)
        return;
    k = (double)ir_type_dims(m, ta)[trans ? 0 : 1];
    mn = value_numel(m, ir_op_output(m, op, 0));
    if (k < 0)
        return;
    c->flops = 2.0 * mn * k + (m->ops[op].ninput > 2 ? 2.0 * mn : 0.0);
}

/*
 * Bytes one participant holds of a communicated value: a tuple's largest
 * element, a distributed tensor's local shard, or the tensor itself.
 */
static double
local_bytes(const ir_module *m, ir_id ty)
{
    const ir_type *t;
    double best = 0.0, b;
    if (ty == 0 || ty >= m->ntype)
        return 0.0;
    t = &m->types[ty];
    if (t->kind == IR_TYPE_TUPLE) {
        /*
         * A tuple of per-device tensors (one per device of a group of up to
         * thousands) mostly repeats one dtype and size: a plain tensor's bytes
         * depend on nothing else, so a repeat is skipped.
         */
        const ir_type *last = NULL;
        for (uint32_t k = 0; k < t->nelem; k++) {
            ir_id e = m->refs[t->elems + k];
            const ir_type *et = e < m->ntype ? &m->types[e] : NULL;
            int plain = et != NULL && et->kind == IR_TYPE_TENSOR && et->mesh == 0;
            if (plain && last != NULL && et->dtype == last->dtype && et->numel == last->numel)
                continue;
            if ((b = local_bytes(m, e)) > best)
                best = b;
            last = plain ? et : NULL;
        }
        return best;
    }
    b = (double)ir_type_bytes(m, ty);
    if (t->mesh && t->mesh < m->nmesh && m->meshes[t->mesh].rank <= IR_MAX_RANK) {
        const int64_t *shape = ir_mesh_shape(m, t->mesh);
        for (uint32_t a = 0; a < m->meshes[t->mesh].rank; a++)
            if (IR_PLACE_IS_SPLIT(m->ints[t->placements + a]) && shape[a] > 0)
                b /= (double)shape[a];
    }
    return b;
}

static void
cost_comm(const ir_module *m, ir_id op, ir_cost *c)
{
    double in, res;
    memset(c, 0, sizeof *c);
    if (m->ops[op].ninput < 1 || m->ops[op].noutput < 1)
        return;
    in = local_bytes(m, m->values[ir_op_input(m, op, 0)].type);
    res = local_bytes(m, m->values[ir_op_output(m, op, 0)].type);
    c->bytes_read = in;
    c->bytes_write = res;
    switch (m->ops[op].kind) {
    case IR_OP_GATHERTO:
    case IR_OP_ALLGATHER:
    case IR_OP_REDISTRIBUTE: /* each device receives its shard */
        c->bytes_comm = res;
        break;
    default: /* send, broadcast, scatter, all_reduce, reduce_scatter, all_to_all */
        c->bytes_comm = in;
        break;
    }
}

/* ---- the table ---- */

const ir_opinfo ir_opinfos[IR_NOPKIND] = {[IR_OP_NONE] = {"none", 0, 0, 0, 0, 0, "", NULL, NULL},
#define IR_OP_ROW_(e, name, a, b, c, d, fl, at, inf, cost)                                         \
    [IR_OP_##e] = {name, a, b, c, d, fl, at, infer_##inf, cost_##cost},
                                          IR_OP_LIST(IR_OP_ROW_)
#undef IR_OP_ROW_
};

/* DistIR's and common spellings of op names. */
static const struct {
    const char *alias;
    int kind;
} aliases[] = {
    {"Send", IR_OP_SEND},
    {"Scatter", IR_OP_SCATTER},
    {"MPIScatterToTupleType", IR_OP_SCATTER},
    {"Broadcast", IR_OP_BROADCAST},
    {"MPIBroadcastToTupleType", IR_OP_BROADCAST},
    {"MPIGatherFromTupleType", IR_OP_GATHERTO},
    {"AllReduce", IR_OP_ALLREDUCE},
    {"Allreduce", IR_OP_ALLREDUCE},
    {"MPIAllreduce", IR_OP_ALLREDUCE},
    {"MPIAllreduceFromTupleType", IR_OP_ALLREDUCE},
    {"AllGather", IR_OP_ALLGATHER},
    {"Allgather", IR_OP_ALLGATHER},
    {"MPIAllgather", IR_OP_ALLGATHER},
    {"MPIAllgatherFromTupleType", IR_OP_ALLGATHER},
    {"ReduceScatter", IR_OP_REDUCESCATTER},
    {"MPIReduceScatter", IR_OP_REDUCESCATTER},
    {"AllToAll", IR_OP_ALLTOALL},
    {"MPIAllToAll", IR_OP_ALLTOALL},
    {"Pmap", IR_OP_PMAP},
    {"LayerNorm", IR_OP_LAYERNORM},
};

int
ir_opkind_from_name(const char *s, size_t len)
{
    for (int k = 1; k < IR_NOPKIND; k++)
        if (strlen(ir_opinfos[k].name) == len && memcmp(ir_opinfos[k].name, s, len) == 0)
            return k;
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
        if (strlen(aliases[i].alias) == len && memcmp(aliases[i].alias, s, len) == 0)
            return aliases[i].kind;
    return IR_OP_NONE;
}

const char *
ir_op_name(const ir_module *m, ir_id op)
{
    if (m->ops[op].kind == IR_OP_OPAQUE && m->ops[op].opaque)
        return ir_str_get(m, m->ops[op].opaque);
    if (m->ops[op].kind >= IR_NOPKIND)
        return "none";
    return ir_opkind_name(m->ops[op].kind);
}

/* "2", "2 to 3" or "at least 1". */
static const char *
arity_str(int lo, int hi, pbuf *b)
{
    if (hi < 0)
        snprintf(b->s, sizeof b->s, "at least %d", lo);
    else if (lo == hi)
        snprintf(b->s, sizeof b->s, "%d", lo);
    else
        snprintf(b->s, sizeof b->s, "%d to %d", lo, hi);
    return b->s;
}

int
ir_op_infer(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    const ir_op *o;
    const ir_opinfo *info;
    pbuf ab;
    if (op == 0 || op >= m->nop)
        return di_error_set(err, DI_EINVAL, "op %u does not exist", op);
    o = &m->ops[op];
    if (o->kind == IR_OP_NONE || o->kind >= IR_NOPKIND)
        return di_error_set(err, DI_EVERIFY, "op %u has an invalid kind %u", op, o->kind);
    info = &ir_opinfos[o->kind];
    if (!ir_safe_slice(o->inputs, o->ninput, m->nref) ||
        (o->noutput > 0 && !ir_safe_slice(o->outputs, o->noutput, m->nvalue)))
        return di_error_set(err, DI_EVERIFY, "op %u has operands out of range", op);
    if (o->ninput < (uint32_t)info->min_in ||
        (info->max_in >= 0 && o->ninput > (uint32_t)info->max_in))
        return fail(m, op, err, "takes %s inputs, not %u",
                    arity_str(info->min_in, info->max_in, &ab), o->ninput);
    if (o->noutput < (uint32_t)info->min_out ||
        (info->max_out >= 0 && o->noutput > (uint32_t)info->max_out))
        return fail(m, op, err, "has %s results, not %u",
                    arity_str(info->min_out, info->max_out, &ab), o->noutput);
    for (uint32_t i = 0; i < o->ninput; i++) {
        ir_id v = ir_op_input(m, op, i);
        if (v == 0 || v >= m->nvalue)
            return fail(m, op, err, "input %u is not a value", i);
    }
    return info->infer(m, op, out, err);
}

int
ir_op_infer_results(ir_module *m, ir_id op, di_error *err)
{
    ir_id small[16], *types = small;
    uint32_t n;
    int rc;
    if (op == 0 || op >= m->nop)
        return di_error_set(err, DI_EINVAL, "op %u does not exist", op);
    n = m->ops[op].noutput;
    if (n > sizeof small / sizeof small[0])
        types = di_xmalloc(n * sizeof *types);
    /* Inference may grow the module's arrays: index them afresh afterwards. */
    if ((rc = ir_op_infer(m, op, types, err)) == 0)
        for (uint32_t i = 0; i < n; i++)
            m->values[m->ops[op].outputs + i].type = types[i];
    if (types != small)
        di_free(types);
    return rc;
}

void
ir_op_cost(const ir_module *m, ir_id op, ir_cost *c)
{
    const ir_op *o;
    memset(c, 0, sizeof *c);
    if (op == 0 || op >= m->nop)
        return;
    o = &m->ops[op];
    if (o->kind == IR_OP_NONE || o->kind >= IR_NOPKIND || (ir_opinfos[o->kind].flags & IR_OPF_FREE))
        return;
    if (!ir_safe_slice(o->inputs, o->ninput, m->nref) ||
        (o->noutput > 0 && !ir_safe_slice(o->outputs, o->noutput, m->nvalue)))
        return;
    for (uint32_t i = 0; i < o->ninput; i++)
        if (ir_op_input(m, op, i) >= m->nvalue)
            return;
    ir_opinfos[m->ops[op].kind].cost(m, op, c);
}
