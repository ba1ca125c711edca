/*
 * autodiff.c: reverse-mode automatic differentiation (autodiff.h).
 *
 * The pass runs in four steps over the ops that exist when it starts:
 *   1. activity: a value is active when it is floating and depends on a
 *      trainable argument; it is useful when the loss depends on it. Only
 *      ops with an output that is both need a gradient rule.
 *   2. checks: every such op must have a rule (the table `rules` below, one
 *      row per op kind) and meet its preconditions; nothing is added before
 *      all checks pass, so a rejected module is left as it was.
 *   3. backward: the ops are visited in reverse order; each rule reads the
 *      gradients of its op's outputs and adds contributions to the gradients
 *      of its active inputs. A contribution whose shape differs from the
 *      input's (broadcasting) is first reduced with ReduceSumTo; a second
 *      contribution is summed with Add.
 *   4. optimizer: one update per trainable argument, and the new results.
 *
 * Every added op is typed by ir_op_infer, so a rule that builds an ill-typed
 * op fails with the shape-inference message instead of producing a broken
 * module. Rules take the forward values they need and nothing else, so that
 * liveness (and the simulator's activation memory) matches what a framework
 * keeps: Mul by a constant keeps only the constant, Softmax keeps its output.
 *
 * Argument order of the gradient ops, as in tests/ir/seed001_mlp.dir, ops.c and the
 * executor's kernels (lib/exec/kernels.c): ReluGrad, GeluGrad, TanhGrad and
 * SigmoidGrad (x, dy) with x the forward input; SoftmaxGrad(y, dy) with y the
 * softmax output; DropoutGrad(dy, mask); LayerNormalizationGrad(dy, x,
 * scale[, mean, inv_std_dev]); MatMulGrad(a, b, dy); GatherGrad(indices, dy);
 * MSELossGrad(x, target, dloss); SoftmaxCrossEntropyLossGrad(dloss, logits,
 * labels).
 */
#include "xform/autodiff.h"

#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>

/* ---- constants and dtypes ---- */

static uint16_t
f32_to_f16(float f)
{
    uint32_t x, sign, exp, mant;
    memcpy(&x, &f, 4);
    sign = (x >> 16) & 0x8000u;
    exp = (x >> 23) & 0xffu;
    mant = x & 0x7fffffu;
    if (exp == 0xff) /* inf or nan */
        return (uint16_t)(sign | 0x7c00u | (mant ? 0x200u : 0));
    if (exp > 142) /* overflow: >= 65536 before rounding */
        return (uint16_t)(sign | 0x7c00u);
    if (exp < 113) {
        /* A subnormal half (or zero): shift with round to nearest even. */
        uint32_t shift, m, r, half;
        if (exp < 102)
            return (uint16_t)sign;
        m = mant | 0x800000u;
        shift = 126 - exp;
        r = m >> shift;
        half = 1u << (shift - 1);
        if ((m & ((half << 1) - 1)) > half || ((m & ((half << 1) - 1)) == half && (r & 1)))
            r++;
        return (uint16_t)(sign | r);
    }
    {
        uint32_t h = ((exp - 112) << 10) | (mant >> 13);
        uint32_t rest = mant & 0x1fffu;
        if (rest > 0x1000u || (rest == 0x1000u && (h & 1)))
            h++; /* may carry into the exponent, up to inf: correct */
        return (uint16_t)(sign | h);
    }
}

static uint16_t
f32_to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40u); /* quiet nan */
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

uint32_t
xform_scalar_bytes(ir_dtype dt, double v, uint8_t out[8])
{
    switch (dt) {
    case IR_F32: {
        float f = (float)v;
        memcpy(out, &f, 4);
        return 4;
    }
    case IR_F64:
        memcpy(out, &v, 8);
        return 8;
    case IR_F16: {
        uint16_t h = f32_to_f16((float)v);
        out[0] = (uint8_t)(h & 0xff);
        out[1] = (uint8_t)(h >> 8);
        return 2;
    }
    case IR_BF16: {
        uint16_t h = f32_to_bf16((float)v);
        out[0] = (uint8_t)(h & 0xff);
        out[1] = (uint8_t)(h >> 8);
        return 2;
    }
    case IR_I64: {
        int64_t i = (int64_t)v;
        memcpy(out, &i, 8);
        return 8;
    }
    case IR_I32: {
        int32_t i = (int32_t)v;
        memcpy(out, &i, 4);
        return 4;
    }
    case IR_I8:
        out[0] = (uint8_t)(int8_t)v;
        return 1;
    case IR_BOOL:
        out[0] = v != 0;
        return 1;
    default:
        return 0;
    }
}

/* ---- options ---- */

static const char *const default_data_names[] = {
    "x", "input", "inputs", "tokens", "labels", "label", "targets", "target", "y", "z", "mask",
};

void
xform_autodiff_opts_init(xform_autodiff_opts *o)
{
    memset(o, 0, sizeof *o);
    o->optimizer = XFORM_OPTIM_SGD;
    o->lr = 0.01;
    o->beta1 = 0.9;
    o->beta2 = 0.999;
    o->epsilon = 1e-8;
    o->annotate = 1;
}

int
xform_autodiff_is_data_name(const xform_autodiff_opts *opts, const char *name)
{
    const char *const *names = default_data_names;
    uint32_t n = sizeof default_data_names / sizeof default_data_names[0];
    if (strncmp(name, "data.", 5) == 0)
        return 1;
    if (opts && opts->data_names) {
        names = opts->data_names;
        n = opts->ndata_names;
    }
    for (uint32_t i = 0; i < n; i++)
        if (strcmp(names[i], name) == 0)
            return 1;
    return 0;
}

/* ---- the pass state ---- */

#define NCONST_CACHE 32

typedef struct shape {
    ir_dtype dtype;
    uint32_t rank;
    int64_t dims[IR_MAX_RANK];
    int32_t device;
} shape;

typedef struct ad {
    ir_module *m;
    ir_id func;
    const xform_autodiff_opts *o;
    di_error *err;
    int rc;              /* sticky: the first emission error */
    uint32_t nvalue0;    /* values that existed before the pass */
    ir_id *grad;         /* per forward value: its gradient so far, 0 none */
    uint8_t *active;     /* per forward value */
    uint8_t *useful;     /* per forward value */
    ir_id *first_use;    /* per forward value: its first consumer op, 0 none */
    ir_id *grad32;       /* per weight: its gradient cast to f32 in the backward pass, 0 none */
    uint8_t *shared;     /* per forward value: read by more than one op */
    ir_id src;           /* the forward op whose dist.* attributes new ops copy, 0 none */
    const char *phase;   /* dist.phase of new ops */
    int optimizer_phase; /* update ops take no dist.seq: a weight has no sequence dimension */
    struct {
        ir_dtype dtype;
        double v;
        int32_t device;
        ir_id value;
    } consts[NCONST_CACHE];
    uint32_t nconst;
} ad;

static void
value_shape(const ir_module *m, ir_id v, shape *s)
{
    const ir_type *t = &m->types[m->values[v].type];
    s->dtype = (ir_dtype)t->dtype;
    s->rank = t->rank;
    s->device = t->device;
    for (uint32_t i = 0; i < t->rank && i < IR_MAX_RANK; i++)
        s->dims[i] = m->ints[t->dims + i];
}

static int
same_dims(const shape *a, const shape *b)
{
    return a->rank == b->rank &&
           (a->rank == 0 || memcmp(a->dims, b->dims, a->rank * sizeof a->dims[0]) == 0);
}

static ir_dtype
value_dtype(const ir_module *m, ir_id v)
{
    return (ir_dtype)m->types[m->values[v].type].dtype;
}

static int
value_is_float_tensor(const ir_module *m, ir_id v)
{
    const ir_type *t = &m->types[m->values[v].type];
    return t->kind == IR_TYPE_TENSOR && ir_dtype_is_float((ir_dtype)t->dtype);
}

/* "<value name><suffix>" into buf. */
static const char *
derived_name(const ir_module *m, ir_id v, const char *suffix, char *buf, size_t n)
{
    const char *base = v ? ir_str_get(m, m->values[v].name) : "";
    snprintf(buf, n, "%s%s", *base ? base : "t", suffix);
    return buf;
}

/* ---- emitting ops ---- */

/*
 * Starts an op: adds it with untyped results all named name. Returns 0 (and
 * adds nothing) once an error is pending, so that a rule's chain of emits
 * stops at the first failure; the attribute setters below skip op 0.
 */
static ir_id
begin(ad *a, int kind, uint32_t nin, const ir_id *in, uint32_t nout, const char *name)
{
    const char *names[16];
    const char *const *np = NULL;
    if (a->rc != 0)
        return 0;
    for (uint32_t i = 0; i < nin; i++)
        if (in[i] == 0) {
            a->rc = di_error_set(a->err, DI_EINTERNAL, "autodiff: %s input %u is missing",
                                 ir_opkind_name(kind), i);
            return 0;
        }
    if (nout <= 16) {
        for (uint32_t i = 0; i < nout; i++)
            names[i] = name;
        np = names;
    }
    return ir_op_add(a->m, a->func, kind, nin, in, nout, NULL, np);
}

static void
set_int(ad *a, ir_id op, const char *key, int64_t v)
{
    if (op)
        ir_op_set_int(a->m, op, key, v);
}

static void
set_float(ad *a, ir_id op, const char *key, double v)
{
    if (op)
        ir_op_set_float(a->m, op, key, v);
}

static void
set_ints(ad *a, ir_id op, const char *key, uint32_t n, const int64_t *v)
{
    if (op)
        ir_op_set_ints(a->m, op, key, n, v);
}

/* Copies attribute key of op src (if present) onto op. */
static void
copy_attr(ad *a, ir_id op, ir_id src, const char *key)
{
    const ir_attr *at;
    ir_attr copy;
    if (!op || !src || (at = ir_op_attr(a->m, src, key)) == NULL)
        return;
    copy = *at;
    ir_op_put_attr(a->m, op, &copy);
}

/*
 * Finishes an op: infers and sets its result types, then adds the dist.*
 * attributes of a->src and dist.phase. Returns its first result, or 0 on
 * error (recorded in a->rc).
 */
static ir_id
finish(ad *a, ir_id op)
{
    ir_module *m = a->m;
    int rc;
    if (op == 0 || a->rc != 0)
        return 0;
    if ((rc = ir_op_infer_results(m, op, a->err)) != 0) {
        di_error_prefix(a->err, "autodiff");
        a->rc = rc;
        return 0;
    }
    if (a->src && a->o->annotate) {
        ir_id src = a->src;
        for (uint32_t i = 0; i < m->ops[src].nattr; i++) {
            ir_attr at = m->attrs[m->ops[src].attrs + i];
            const char *key = ir_str_get(m, at.key);
            if (strncmp(key, "dist.", 5) == 0 && strcmp(key, "dist.phase") != 0 &&
                !(a->optimizer_phase && strcmp(key, "dist.seq") == 0))
                ir_op_put_attr(m, op, &at);
        }
    }
    if (a->phase && a->o->annotate)
        ir_op_set_string(m, op, "dist.phase", a->phase);
    return m->ops[op].outputs;
}

/* An op with no attributes and one result. */
static ir_id
emit(ad *a, int kind, uint32_t nin, const ir_id *in, const char *name)
{
    return finish(a, begin(a, kind, nin, in, 1, name));
}

static ir_id
emit2(ad *a, int kind, ir_id x, ir_id y, const char *name)
{
    ir_id in[2] = {x, y};
    return emit(a, kind, 2, in, name);
}

/*
 * A rank-0 constant of dtype dt: unplaced (usable next to a tensor anywhere)
 * when device < 0, else on that device. Reused within the pass.
 */
static ir_id
constant(ad *a, ir_dtype dt, double v, int32_t device)
{
    uint8_t bytes[8];
    uint32_t n;
    ir_id op, ty, val;
    const char *phase = a->phase;
    ir_id src = a->src;
    if (a->rc != 0)
        return 0;
    for (uint32_t i = 0; i < a->nconst; i++)
        if (a->consts[i].dtype == dt && a->consts[i].v == v && a->consts[i].device == device)
            return a->consts[i].value;
    n = xform_scalar_bytes(dt, v, bytes);
    ty = ir_type_tensor(a->m, dt, 0, NULL, IR_DEVICE_NONE);
    op = begin(a, IR_OP_CONSTANT, 0, NULL, 1, v == 1.0 && device >= 0 ? "dloss" : "c");
    ir_op_set_tensor(a->m, op, "value", ty, bytes, n);
    if (device >= 0)
        ir_op_set_int(a->m, op, "device", device);
    /* Constants belong to no layer: only the phase is recorded. */
    a->src = 0;
    val = finish(a, op);
    a->src = src;
    a->phase = phase;
    if (val && a->nconst < NCONST_CACHE) {
        a->consts[a->nconst].dtype = dt;
        a->consts[a->nconst].v = v;
        a->consts[a->nconst].device = device;
        a->consts[a->nconst].value = val;
        a->nconst++;
    }
    return val;
}

static ir_id
mul_const(ad *a, ir_id x, double c, const char *name)
{
    return emit2(a, IR_OP_MUL, x, constant(a, value_dtype(a->m, x), c, -1), name);
}

/*
 * Zeros shaped like v: u * 0 (no Expand or ConstantOfShape op exists), u = v
 * or, when v is a square x * x, x: the square's gradient reads x anyway,
 * while reading v would keep it for the backward only for its shape (an
 * RMSNorm written out, as imported models have it: the mean of squares'
 * gradient, broadcast over the squares; Llama's generator emits RMSNormalization).
 */
static ir_id
zeros_like(ad *a, ir_id v)
{
    const ir_module *m = a->m;
    ir_id d = m->values[v].def, u = v;
    char nb[256];
    if (d != 0 && m->ops[d].kind == IR_OP_MUL && m->ops[d].ninput == 2 &&
        ir_op_input(m, d, 0) == ir_op_input(m, d, 1) &&
        m->values[ir_op_input(m, d, 0)].type == m->values[v].type)
        u = ir_op_input(m, d, 0);
    return mul_const(a, u, 0.0, derived_name(a->m, v, ".zeros", nb, sizeof nb));
}

static ir_id grad_f32(ad *a, ir_id w, ir_id g);
static int is_16bit(const ir_module *m, ir_id ty);

/*
 * Whether the gradient contributions of v are summed in f32: v is a 16-bit
 * weight (an argument) that more than one op reads, in mixed precision with
 * f32 master weights and accumulation (cast_complete_grads).
 */
static int
sums_in_f32(const ad *a, ir_id v)
{
    const xform_autodiff_opts *o = a->o;
    return o->optimizer == XFORM_OPTIM_ADAM && o->master_weights && !o->grad_accum_16 &&
           a->shared[v] && a->m->values[v].def == 0 && is_16bit(a->m, a->m->values[v].type);
}

/*
 * Adds contribution g to the gradient of forward value v, reducing a
 * broadcast contribution to v's shape first. Inactive values take nothing.
 */
static void
accum(ad *a, ir_id v, ir_id g)
{
    ir_module *m = a->m;
    shape sv, sg;
    char nb[256];
    if (a->rc != 0 || v == 0 || v >= a->nvalue0 || !a->active[v] || g == 0)
        return;
    derived_name(m, v, ".grad", nb, sizeof nb);
    value_shape(m, v, &sv);
    value_shape(m, g, &sg);
    if (!same_dims(&sv, &sg)) {
        ir_id op = begin(a, IR_OP_REDUCESUMTO, 1, &g, 1, nb);
        set_ints(a, op, "shape", sv.rank, sv.dims);
        g = finish(a, op);
    }
    if (g == 0)
        return;
    if (sums_in_f32(a, v)) {
        /*
         * A 16-bit weight more than one op reads (a tied embedding: the
         * lookup and the output layer) under f32 accumulation: each
         * contribution cast to f32 as made and the sum taken in f32, as
         * Megatron-LM adds each into the weight's f32 main_grad (and, on a
         * pipeline, all-reduces the first and last stages' f32 gradients).
         * Summed in 16 bits, a pipeline accumulated each stage's part over
         * the microbatches in 16 bits and sent it in 16 bits.
         */
        ir_id g32;
        a->optimizer_phase = 1; /* as cast_complete_grads' casts: no sequence dimension */
        g32 = grad_f32(a, v, g);
        a->grad32[v] = a->grad32[v] ? emit2(a, IR_OP_ADD, a->grad32[v], g32,
                                            derived_name(m, v, ".grad.f32", nb, sizeof nb))
                                    : g32;
        a->optimizer_phase = 0;
        a->grad[v] = g; /* the weight has a gradient; its update reads grad32 */
        return;
    }
    if (a->grad[v] == 0)
        a->grad[v] = g;
    else
        a->grad[v] = emit2(a, IR_OP_ADD, a->grad[v], g, nb);
}

/* ---- gradient rules ---- */

/*
 * A rule gets the forward op and dy[i], the gradient of output i (0 when the
 * loss does not depend on it), and accumulates into the op's inputs. A check
 * (optional) rejects forms the rule cannot handle before anything is added.
 */
typedef void (*rule_fn)(ad *a, ir_id op, const ir_id *dy);
typedef int (*check_fn)(ad *a, ir_id op);

#define IN(i) ir_op_input(a->m, op, (i))
#define OUT(i) ir_op_output(a->m, op, (i))
#define ACTIVE(v) ((v) < a->nvalue0 && a->active[(v)])
#define NEEDED(v) ((v) < a->nvalue0 && a->active[(v)] && a->useful[(v)])

static const char *
gname(ad *a, ir_id v, char *buf, size_t n)
{
    return derived_name(a->m, v, ".grad", buf, n);
}

static void
rule_identity(ad *a, ir_id op, const ir_id *dy)
{
    accum(a, IN(0), dy[0]);
}

static void
rule_add(ad *a, ir_id op, const ir_id *dy)
{
    accum(a, IN(0), dy[0]);
    accum(a, IN(1), dy[0]);
}

static void
rule_sub(ad *a, ir_id op, const ir_id *dy)
{
    char nb[256];
    accum(a, IN(0), dy[0]);
    if (ACTIVE(IN(1)))
        accum(a, IN(1), mul_const(a, dy[0], -1.0, gname(a, IN(1), nb, sizeof nb)));
}

/*
 * Forward op d (one input, one result) made again in the backward on input x,
 * with d's attributes: its own before finish, its dist.* hints by finish (d
 * as the source, not the op being differentiated).
 */
static ir_id
replay(ad *a, ir_id d, ir_id x)
{
    ir_module *m = a->m;
    char nb[256];
    ir_id g = begin(a, m->ops[d].kind, 1, &x, 1,
                    derived_name(m, ir_op_output(m, d, 0), ".recompute", nb, sizeof nb)),
          src = a->src, v;
    for (uint32_t i = 0; g != 0 && i < m->ops[d].nattr; i++) {
        ir_attr at = m->attrs[m->ops[d].attrs + i];
        if (strncmp(ir_str_get(m, at.key), "dist.", 5) != 0)
            ir_op_put_attr(m, g, &at);
    }
    a->src = d;
    v = finish(a, g);
    a->src = src;
    return v;
}

/*
 * A product's operand v as its gradient reads it (a Mul's, a MatMul's): v
 * itself, or v made again in the backward from a value the backward reads
 * anyway, so that v is not kept for it too, as fused kernels do:
 *   - a Swish's (SiLU's) result, when its input x needs a gradient (SwishGrad
 *     reads x): the fused SwiGLU kernels of Megatron-LM and Transformer Engine
 *     keep only the gate and recompute its activation (a [b, s, f] value per
 *     layer, docs/models.md); with fused kernels the recomputation runs inside
 *     the product's gradient kernel;
 *   - views and Transposes of a FlashAttention's output, whose gradient reads
 *     that output: the attention output merged back to [b, s, h] (a
 *     Transpose's copy) for the output projection's weight gradient, where
 *     FlashAttention kernels write the [b, s, h] layout the projection reads
 *     and one tensor serves both (2sbh bytes per layer).
 */
static ir_id
operand_for_backward(ad *a, ir_id v)
{
    const ir_module *m = a->m;
    ir_id chain[4], u = v, d, x;
    uint32_t n = 0;
    for (;;) {
        d = u < a->nvalue0 ? m->values[u].def : 0;
        if (d == 0 || n == 4 || m->ops[d].ninput != 1 || m->ops[d].noutput != 1 ||
            (m->ops[d].kind != IR_OP_TRANSPOSE && m->ops[d].kind != IR_OP_RESHAPE &&
             m->ops[d].kind != IR_OP_SQUEEZE && m->ops[d].kind != IR_OP_UNSQUEEZE))
            break;
        chain[n++] = d;
        u = ir_op_input(m, d, 0);
    }
    if (d != 0 && m->ops[d].kind == IR_OP_SWISH && ACTIVE(x = ir_op_input(m, d, 0)))
        u = replay(a, d, x);
    else if (!(n > 0 && d != 0 && m->ops[d].kind == IR_OP_FLASHATTN &&
               u == ir_op_output(m, d, 0) && ACTIVE(ir_op_input(m, d, 0))))
        return v;
    while (n > 0 && u != 0)
        u = replay(a, chain[--n], u);
    return u ? u : v;
}

/*
 * A product's operand v as its weight gradient reads it: x, flattened again in
 * the backward, when v = Reshape(x) merges x's sequence dimension (its op's
 * dist.seq hint) into the rows, else v. Megatron-LM's linear layers under
 * sequence parallelism keep their input as each rank holds it (its slice of
 * the sequence) and all-gather it again in the backward pass; reading x lets
 * the lowering do the same where the flattened rows are not the sequence
 * slices (the output layer's input, [b, s, h] flattened to [b s, h] before the
 * logits: kept gathered, 2sbh bytes per microbatch in flight where Megatron-LM
 * keeps 2sbh/t). Without sequence parallelism v is a view of x: the same bytes.
 */
static ir_id
operand_for_weight_grad(ad *a, ir_id v)
{
    const ir_module *m = a->m;
    ir_id d = v < a->nvalue0 ? m->values[v].def : 0, x, xd;
    const ir_type *vt, *xt;
    const int64_t *xdims;
    int64_t seq, rows = 1;
    if (d == 0 || m->ops[d].kind != IR_OP_RESHAPE || m->ops[d].ninput != 1 ||
        m->ops[d].noutput != 1)
        return v;
    x = ir_op_input(m, d, 0);
    xd = x < a->nvalue0 ? m->values[x].def : 0;
    if (xd == 0 || (seq = ir_op_int(m, xd, "dist.seq", -1)) <= 0)
        return v;
    vt = &m->types[m->values[v].type];
    xt = &m->types[m->values[x].type];
    if (vt->kind != IR_TYPE_TENSOR || xt->kind != IR_TYPE_TENSOR || vt->rank < 1 ||
        xt->rank <= vt->rank || seq >= (int64_t)xt->rank)
        return v;
    xdims = ir_type_dims(m, m->values[x].type);
    for (int64_t i = 0; i <= seq; i++) {
        if (xdims[i] <= 0 || rows > INT64_MAX / xdims[i])
            return v;
        rows *= xdims[i];
    }
    if (rows != ir_type_dims(m, m->values[v].type)[0])
        return v;
    return replay(a, d, x);
}

static void
rule_mul(ad *a, ir_id op, const ir_id *dy)
{
    char nb[256];
    if (ACTIVE(IN(0)))
        accum(a, IN(0),
              emit2(a, IR_OP_MUL, dy[0], operand_for_backward(a, IN(1)),
                    gname(a, IN(0), nb, sizeof nb)));
    if (ACTIVE(IN(1)))
        accum(a, IN(1),
              emit2(a, IR_OP_MUL, dy[0], operand_for_backward(a, IN(0)),
                    gname(a, IN(1), nb, sizeof nb)));
}

/* y = a / b: da = dy / b, db = -(dy * y) / b. */
static void
rule_div(ad *a, ir_id op, const ir_id *dy)
{
    char nb[256];
    if (ACTIVE(IN(0)))
        accum(a, IN(0), emit2(a, IR_OP_DIV, dy[0], IN(1), gname(a, IN(0), nb, sizeof nb)));
    if (ACTIVE(IN(1))) {
        ir_id t;
        gname(a, IN(1), nb, sizeof nb);
        t = emit2(a, IR_OP_MUL, dy[0], OUT(0), nb);
        t = emit2(a, IR_OP_DIV, t, IN(1), nb);
        accum(a, IN(1), mul_const(a, t, -1.0, nb));
    }
}

/* Pow(a, b) with a constant exponent: da = dy * b * a^(b-1). */
static int
check_pow(ad *a, ir_id op)
{
    if (ACTIVE(IN(1)))
        return di_error_set(a->err, DI_EUNSUPPORTED,
                            "autodiff: Pow with a trainable exponent needs Log, which the op "
                            "table lacks");
    return 0;
}

static void
rule_pow(ad *a, ir_id op, const ir_id *dy)
{
    char nb[256];
    ir_id bm1, p, t;
    gname(a, IN(0), nb, sizeof nb);
    bm1 = emit2(a, IR_OP_SUB, IN(1), constant(a, value_dtype(a->m, IN(1)), 1.0, -1), nb);
    p = emit2(a, IR_OP_POW, IN(0), bm1, nb);
    t = emit2(a, IR_OP_MUL, p, IN(1), nb);
    accum(a, IN(0), emit2(a, IR_OP_MUL, dy[0], t, nb));
}

/* y = sqrt(x): dx = (dy * 0.5) / y. */
static void
rule_sqrt(ad *a, ir_id op, const ir_id *dy)
{
    char nb[256];
    gname(a, IN(0), nb, sizeof nb);
    accum(a, IN(0), emit2(a, IR_OP_DIV, mul_const(a, dy[0], 0.5, nb), OUT(0), nb));
}

/* ReluGrad(x, dy), GeluGrad(x, dy), SwishGrad(x, dy), TanhGrad(x, dy), SigmoidGrad(x, dy). */
static void
rule_act(ad *a, ir_id op, const ir_id *dy)
{
    char nb[256];
    int kind;
    ir_id g;
    switch (a->m->ops[op].kind) {
    case IR_OP_RELU:
        kind = IR_OP_RELUGRAD;
        break;
    case IR_OP_GELU:
        kind = IR_OP_GELUGRAD;
        break;
    case IR_OP_SWISH:
        kind = IR_OP_SWISHGRAD;
        break;
    case IR_OP_TANH:
        kind = IR_OP_TANHGRAD;
        break;
    default:
        kind = IR_OP_SIGMOIDGRAD;
        break;
    }
    g = begin(a, kind, 2, (ir_id[]){IN(0), dy[0]}, 1, gname(a, IN(0), nb, sizeof nb));
    if (kind == IR_OP_SWISHGRAD)
        copy_attr(a, g, op, "alpha");
    if (kind == IR_OP_GELUGRAD)
        copy_attr(a, g, op, "approximate");
    accum(a, IN(0), finish(a, g));
}

/* d erf(x) = 2/sqrt(pi) exp(-x^2) dx; without an Exp op, exp(-x^2) = Pow(e, -x^2). */
static void
rule_erf(ad *a, ir_id op, const ir_id *dy)
{
    char nb[256];
    ir_id x = IN(0), t;
    ir_dtype dt = value_dtype(a->m, x);
    gname(a, x, nb, sizeof nb);
    t = mul_const(a, emit2(a, IR_OP_MUL, x, x, nb), -1.0, nb);
    t = emit2(a, IR_OP_POW, constant(a, dt, 2.718281828459045235, -1), t, nb);
    t = mul_const(a, t, 1.128379167095512574, nb); /* 2 / sqrt(pi) */
    accum(a, x, emit2(a, IR_OP_MUL, dy[0], t, nb));
}

static void
rule_softmax(ad *a, ir_id op, const ir_id *dy)
{
    char nb[256];
    ir_id in[2] = {OUT(0), dy[0]};
    ir_id g = begin(a, IR_OP_SOFTMAXGRAD, 2, in, 1, gname(a, IN(0), nb, sizeof nb));
    copy_attr(a, g, op, "axis");
    accum(a, IN(0), finish(a, g));
}

static void
rule_cast(ad *a, ir_id op, const ir_id *dy)
{
    char nb[256];
    ir_id g;
    if (!value_is_float_tensor(a->m, IN(0)))
        return;
    g = begin(a, IR_OP_CAST, 1, dy, 1, gname(a, IN(0), nb, sizeof nb));
    set_int(a, g, "to", ir_dtype_onnx(value_dtype(a->m, IN(0))));
    accum(a, IN(0), finish(a, g));
}

static int
check_dropout(ad *a, ir_id op)
{
    if (a->m->ops[op].noutput < 2)
        return di_error_set(a->err, DI_EUNSUPPORTED,
                            "autodiff: Dropout without its mask output cannot be differentiated "
                            "(give it two results)");
    return 0;
}

static void
rule_dropout(ad *a, ir_id op, const ir_id *dy)
{
    char nb[256];
    ir_id in[2] = {dy[0], OUT(1)};
    ir_id g = begin(a, IR_OP_DROPOUTGRAD, 2, in, 1, gname(a, IN(0), nb, sizeof nb));
    copy_attr(a, g, op, "ratio");
    accum(a, IN(0), finish(a, g));
}

/* The stats outputs (mean, inv_std_dev) are saved for backward, not differentiated. */
static int
check_layernorm(ad *a, ir_id op)
{
    for (uint32_t i = 1; i < a->m->ops[op].noutput; i++)
        if (NEEDED(OUT(i)))
            return di_error_set(a->err, DI_EUNSUPPORTED,
                                "autodiff: the loss depends on %s's output %u "
                                "(a statistic); only its output 0 has a gradient rule",
                                ir_opkind_name(a->m->ops[op].kind), i);
    return 0;
}

static void
rule_layernorm(ad *a, ir_id op, const ir_id *dy)
{
    char nb[256];
    uint32_t nin = a->m->ops[op].ninput, nout = a->m->ops[op].noutput, n = 3, gout = 1;
    int rms = a->m->ops[op].kind == IR_OP_RMSNORM;
    ir_id in[5], g, x = IN(0), scale = IN(1), bias = nin > 2 ? IN(2) : 0, base;
    in[0] = dy[0];
    in[1] = x;
    in[2] = scale;
    if (nout == 3 || (rms && nout == 2)) { /* the saved statistics: mean, inv_std_dev */
        for (uint32_t i = 1; i < nout; i++)
            in[2 + i] = OUT(i);
        n = 2 + nout;
    }
    if (ACTIVE(scale) || (bias && ACTIVE(bias)))
        gout = nin;
    g = begin(a, rms ? IR_OP_RMSNORMGRAD : IR_OP_LAYERNORMGRAD, n, in, gout,
              gname(a, x, nb, sizeof nb));
    copy_attr(a, g, op, "axis");
    copy_attr(a, g, op, "epsilon");
    base = finish(a, g);
    if (base == 0)
        return;
    accum(a, x, base);
    if (gout > 1)
        accum(a, scale, base + 1);
    if (gout > 2)
        accum(a, bias, base + 2);
}

/* Y = alpha op(A) op(B) + beta C, each gradient one Gemm with transposes. */
static void
rule_gemm(ad *a, ir_id op, const ir_id *dy)
{
    ir_module *m = a->m;
    char nb[256];
    int ta = ir_op_int(m, op, "transA", 0) != 0, tb = ir_op_int(m, op, "transB", 0) != 0;
    double alpha = ir_op_float(m, op, "alpha", 1.0), beta = ir_op_float(m, op, "beta", 1.0);
    ir_id A = IN(0), B = IN(1), g, in[2];
    if (ACTIVE(A)) {
        /* dA = alpha dY op(B)^T, or (transA) alpha op(B) dY^T. */
        in[0] = ta ? B : dy[0];
        in[1] = ta ? dy[0] : B;
        g = begin(a, IR_OP_GEMM, 2, in, 1, gname(a, A, nb, sizeof nb));
        if (ta) {
            if (tb)
                set_int(a, g, "transA", 1);
            set_int(a, g, "transB", 1);
        } else if (!tb) {
            set_int(a, g, "transB", 1);
        }
        if (alpha != 1.0)
            set_float(a, g, "alpha", alpha);
        accum(a, A, finish(a, g));
    }
    if (ACTIVE(B)) {
        /* dB = alpha op(A)^T dY, or (transB) alpha dY^T op(A). */
        ir_id Ab = ta ? A : operand_for_weight_grad(a, A);
        in[0] = tb ? dy[0] : Ab;
        in[1] = tb ? Ab : dy[0];
        g = begin(a, IR_OP_GEMM, 2, in, 1, gname(a, B, nb, sizeof nb));
        if (tb) {
            set_int(a, g, "transA", 1);
            if (ta)
                set_int(a, g, "transB", 1);
        } else if (!ta) {
            set_int(a, g, "transA", 1);
        }
        if (alpha != 1.0)
            set_float(a, g, "alpha", alpha);
        accum(a, B, finish(a, g));
    }
    if (m->ops[op].ninput > 2 && ACTIVE(IN(2))) {
        ir_id c = IN(2);
        g = beta != 1.0 ? mul_const(a, dy[0], beta, gname(a, c, nb, sizeof nb)) : dy[0];
        accum(a, c, g);
    }
}

static void
rule_matmul(ad *a, ir_id op, const ir_id *dy)
{
    char nb[256];
    ir_id in[3] = {operand_for_backward(a, IN(0)), operand_for_backward(a, IN(1)), dy[0]}, g, base;
    if (in[0] == IN(0) && ACTIVE(IN(1)))
        in[0] = operand_for_weight_grad(a, IN(0));
    g = begin(a, IR_OP_MATMULGRAD, 3, in, 2, gname(a, OUT(0), nb, sizeof nb));
    base = finish(a, g);
    if (base == 0)
        return;
    accum(a, IN(0), base);
    accum(a, IN(1), base + 1);
}

static void
rule_gather(ad *a, ir_id op, const ir_id *dy)
{
    char nb[256];
    shape s;
    ir_id in[2] = {IN(1), dy[0]}, g;
    value_shape(a->m, IN(0), &s);
    g = begin(a, IR_OP_GATHERGRAD, 2, in, 1, gname(a, IN(0), nb, sizeof nb));
    set_ints(a, g, "shape", s.rank, s.dims);
    copy_attr(a, g, op, "axis");
    accum(a, IN(0), finish(a, g));
}

/* FlashAttention: its fused gradient (the probabilities recomputed from lse). */
static void
rule_flashattn(ad *a, ir_id op, const ir_id *dy)
{
    char nb[256];
    ir_id in[6] = {IN(0), IN(1), IN(2), OUT(0), OUT(1), dy[0]}, g, base;
    if (dy[0] == 0)
        return;
    g = begin(a, IR_OP_FLASHATTNGRAD, 6, in, 3, gname(a, OUT(0), nb, sizeof nb));
    copy_attr(a, g, op, "causal");
    copy_attr(a, g, op, "scale");
    base = finish(a, g);
    if (base == 0)
        return;
    accum(a, IN(0), base);
    accum(a, IN(1), base + 1);
    accum(a, IN(2), base + 2);
}

/* TopK: the values' gradient goes back to the positions they came from. */
static void
rule_topk(ad *a, ir_id op, const ir_id *dy)
{
    char nb[256];
    shape s;
    ir_id in[2] = {dy[0], OUT(1)}, g;
    if (dy[0] == 0)
        return;
    value_shape(a->m, IN(0), &s);
    g = begin(a, IR_OP_TOPKGRAD, 2, in, 1, gname(a, IN(0), nb, sizeof nb));
    set_int(a, g, "size", s.dims[s.rank - 1]);
    accum(a, IN(0), finish(a, g));
}

/* moe.dispatch and moe.combine: each is the other's gradient (a scatter and its gather). */
static void
rule_moe(ad *a, ir_id op, const ir_id *dy)
{
    char nb[256];
    ir_id in[2] = {dy[0], IN(1)}, g;
    if (a->m->ops[op].kind == IR_OP_MOEDISPATCH) {
        g = begin(a, IR_OP_MOECOMBINE, 2, in, 1, gname(a, IN(0), nb, sizeof nb));
    } else {
        shape s;
        value_shape(a->m, IN(0), &s);
        g = begin(a, IR_OP_MOEDISPATCH, 2, in, 1, gname(a, IN(0), nb, sizeof nb));
        set_int(a, g, "experts", s.dims[1]);
        set_int(a, g, "capacity", s.dims[2]);
    }
    accum(a, IN(0), finish(a, g));
}

/*
 * Reshape back to x's shape, as flexibly as the forward reshape: a dimension
 * the forward shape copied (0) is copied back, and the first other dimension
 * is inferred (-1). So a data-parallel transform can change the batch and a
 * tensor-parallel one the head count without rewriting either reshape
 * (docs/models.md).
 */
static void
rule_reshape(ad *a, ir_id op, const ir_id *dy)
{
    char nb[256];
    shape s;
    uint32_t n = 0;
    const int64_t *fwd = ir_op_ints(a->m, op, "shape", &n);
    int64_t numel = 1;
    int inferred = 0;
    ir_id g;
    value_shape(a->m, IN(0), &s);
    for (uint32_t i = 0; i < s.rank; i++)
        numel *= s.dims[i];
    for (uint32_t i = 0; i < s.rank && numel > 0; i++) {
        if (i < n && fwd[i] == 0)
            s.dims[i] = 0;
        else if (!inferred) {
            s.dims[i] = -1;
            inferred = 1;
        }
    }
    g = begin(a, IR_OP_RESHAPE, 1, dy, 1, gname(a, IN(0), nb, sizeof nb));
    set_ints(a, g, "shape", s.rank, s.dims);
    accum(a, IN(0), finish(a, g));
}

static void
rule_transpose(ad *a, ir_id op, const ir_id *dy)
{
    char nb[256];
    shape s;
    uint32_t n = 0;
    const int64_t *perm = ir_op_ints(a->m, op, "perm", &n);
    int64_t p[IR_MAX_RANK], inv[IR_MAX_RANK];
    ir_id g;
    value_shape(a->m, IN(0), &s);
    for (uint32_t i = 0; i < s.rank; i++)
        p[i] = perm && n == s.rank ? perm[i] : (int64_t)(s.rank - 1 - i);
    for (uint32_t i = 0; i < s.rank; i++)
        inv[p[i]] = i;
    g = begin(a, IR_OP_TRANSPOSE, 1, dy, 1, gname(a, IN(0), nb, sizeof nb));
    set_ints(a, g, "perm", s.rank, inv);
    accum(a, IN(0), finish(a, g));
}

static void
rule_unsqueeze(ad *a, ir_id op, const ir_id *dy)
{
    char nb[256];
    ir_id g = begin(a, IR_OP_SQUEEZE, 1, dy, 1, gname(a, IN(0), nb, sizeof nb));
    copy_attr(a, g, op, "axes");
    accum(a, IN(0), finish(a, g));
}

static void
rule_squeeze(ad *a, ir_id op, const ir_id *dy)
{
    char nb[256];
    ir_id g;
    gname(a, IN(0), nb, sizeof nb);
    if (ir_op_attr(a->m, op, "axes")) {
        g = begin(a, IR_OP_UNSQUEEZE, 1, dy, 1, nb);
        copy_attr(a, g, op, "axes");
    } else {
        shape s;
        value_shape(a->m, IN(0), &s);
        g = begin(a, IR_OP_RESHAPE, 1, dy, 1, nb);
        set_ints(a, g, "shape", s.rank, s.dims);
    }
    accum(a, IN(0), finish(a, g));
}

static void
rule_concat(ad *a, ir_id op, const ir_id *dy)
{
    char nb[256];
    uint32_t n = a->m->ops[op].ninput;
    int64_t *sizes = di_xmalloc(n * sizeof *sizes), axis = ir_op_int(a->m, op, "axis", 0);
    ir_id g, base;
    shape s;
    value_shape(a->m, OUT(0), &s);
    if (axis < 0)
        axis += s.rank;
    for (uint32_t i = 0; i < n; i++) {
        shape si;
        value_shape(a->m, IN(i), &si);
        sizes[i] = si.dims[axis];
    }
    g = begin(a, IR_OP_SPLIT, 1, dy, n, gname(a, OUT(0), nb, sizeof nb));
    set_int(a, g, "axis", axis);
    set_ints(a, g, "split", n, sizes);
    di_free(sizes);
    base = finish(a, g);
    if (base == 0)
        return;
    for (uint32_t i = 0; i < n; i++)
        accum(a, IN(i), base + i);
}

static void
rule_split(ad *a, ir_id op, const ir_id *dy)
{
    char nb[256];
    uint32_t n = a->m->ops[op].noutput;
    ir_id *in = di_xmalloc(n * sizeof *in), g;
    for (uint32_t i = 0; i < n; i++)
        in[i] = dy[i] ? dy[i] : zeros_like(a, OUT(i));
    g = begin(a, IR_OP_CONCAT, n, in, 1, gname(a, IN(0), nb, sizeof nb));
    di_free(in);
    set_int(a, g, "axis", ir_op_int(a->m, op, "axis", 0));
    accum(a, IN(0), finish(a, g));
}

/* The normalized (axis, start, end) of each sliced axis, step 1 (checked). */
typedef struct slice_axis {
    uint32_t axis;
    int64_t start, end;
} slice_axis;

static uint32_t
slice_axes(const ir_module *m, ir_id op, const shape *x, slice_axis *out)
{
    uint32_t ns = 0, ne = 0, na = 0;
    const int64_t *starts = ir_op_ints(m, op, "starts", &ns);
    const int64_t *ends = ir_op_ints(m, op, "ends", &ne);
    const int64_t *axes = ir_op_ints(m, op, "axes", &na);
    for (uint32_t j = 0; j < ns && j < IR_MAX_RANK; j++) {
        int64_t ax = axes && na == ns ? axes[j] : (int64_t)j, d, b = starts[j], e = ends[j];
        if (ax < 0)
            ax += x->rank;
        d = x->dims[ax];
        if (b < 0)
            b += d;
        if (e < 0)
            e += d;
        b = b < 0 ? 0 : b > d ? d : b;
        e = e < 0 ? 0 : e > d ? d : e;
        if (e < b)
            e = b;
        out[j].axis = (uint32_t)ax;
        out[j].start = b;
        out[j].end = e;
    }
    (void)ne;
    return ns < IR_MAX_RANK ? ns : IR_MAX_RANK;
}

static int
check_slice(ad *a, ir_id op)
{
    uint32_t n = 0;
    const int64_t *steps = ir_op_ints(a->m, op, "steps", &n);
    for (uint32_t i = 0; i < n; i++)
        if (steps[i] != 1)
            return di_error_set(a->err, DI_EUNSUPPORTED,
                                "autodiff: Slice with step %lld needs Pad or ScatterElements, "
                                "which the op table lacks (only step 1 is differentiated)",
                                (long long)steps[i]);
    return 0;
}

/*
 * dx pads dy with zeros, axis by axis: Concat(zeros_before, dy, zeros_after).
 * The zero blocks are slices of x times 0, cut so that their shape matches
 * (sliced axes already padded are full, the others still sliced).
 */
static void
rule_slice(ad *a, ir_id op, const ir_id *dy)
{
    char nb[256];
    shape x;
    slice_axis sa[IR_MAX_RANK];
    uint32_t n;
    ir_id t = dy[0];
    value_shape(a->m, IN(0), &x);
    n = slice_axes(a->m, op, &x, sa);
    gname(a, IN(0), nb, sizeof nb);
    for (uint32_t k = 0; k < n; k++) {
        ir_id parts[3];
        uint32_t np = 0;
        for (int side = 0; side < 2; side++) {
            int64_t lo = side == 0 ? 0 : sa[k].end;
            int64_t hi = side == 0 ? sa[k].start : x.dims[sa[k].axis];
            int64_t st[IR_MAX_RANK], en[IR_MAX_RANK], ax[IR_MAX_RANK];
            ir_id z;
            if (hi <= lo) {
                if (side == 0)
                    parts[np++] = t;
                continue;
            }
            for (uint32_t j = 0; j < n; j++) {
                ax[j] = sa[j].axis;
                st[j] = j < k ? 0 : sa[j].start;
                en[j] = j < k ? x.dims[sa[j].axis] : sa[j].end;
            }
            st[k] = lo;
            en[k] = hi;
            z = begin(a, IR_OP_SLICE, 1, &(ir_id){IN(0)}, 1, nb);
            set_ints(a, z, "starts", n, st);
            set_ints(a, z, "ends", n, en);
            set_ints(a, z, "axes", n, ax);
            z = mul_const(a, finish(a, z), 0.0, nb);
            if (side == 0) {
                parts[np++] = z;
                parts[np++] = t;
            } else {
                parts[np++] = z;
            }
        }
        if (np > 1) {
            ir_id c = begin(a, IR_OP_CONCAT, np, parts, 1, nb);
            set_int(a, c, "axis", sa[k].axis);
            t = finish(a, c);
        }
    }
    accum(a, IN(0), t);
}

/* The reduced axes of a ReduceSum/ReduceMean as a mask; returns the element count reduced. */
static double
reduced_axes(const ir_module *m, ir_id op, const shape *x, uint8_t *mask)
{
    uint32_t n = 0;
    const int64_t *axes = ir_op_ints(m, op, "axes", &n);
    double count = 1;
    memset(mask, n == 0, IR_MAX_RANK);
    for (uint32_t j = 0; j < n; j++)
        mask[axes[j] < 0 ? axes[j] + x->rank : axes[j]] = 1;
    for (uint32_t i = 0; i < x->rank; i++)
        if (mask[i])
            count *= (double)x->dims[i];
    return count;
}

/* dx = broadcast of dy (with the reduced axes restored) to x: x * 0 + dy. */
static void
rule_reduce(ad *a, ir_id op, const ir_id *dy)
{
    ir_module *m = a->m;
    char nb[256];
    shape x;
    uint8_t mask[IR_MAX_RANK];
    double count;
    ir_id g = dy[0];
    value_shape(m, IN(0), &x);
    count = reduced_axes(m, op, &x, mask);
    gname(a, IN(0), nb, sizeof nb);
    if (ir_op_int(m, op, "keepdims", 1) == 0 && x.rank > 0) {
        int64_t axes[IR_MAX_RANK];
        uint32_t n = 0;
        ir_id u;
        for (uint32_t i = 0; i < x.rank; i++)
            if (mask[i])
                axes[n++] = i;
        u = begin(a, IR_OP_UNSQUEEZE, 1, &g, 1, nb);
        set_ints(a, u, "axes", n, axes);
        g = finish(a, u);
    }
    if (m->ops[op].kind == IR_OP_REDUCEMEAN)
        g = mul_const(a, g, count > 0 ? 1.0 / count : 0.0, nb);
    accum(a, IN(0), emit2(a, IR_OP_ADD, zeros_like(a, IN(0)), g, nb));
}

static void
rule_where(ad *a, ir_id op, const ir_id *dy)
{
    char nb[256];
    ir_id zero;
    for (uint32_t i = 1; i <= 2; i++) {
        ir_id in[3];
        if (!ACTIVE(IN(i)))
            continue;
        zero = constant(a, value_dtype(a->m, dy[0]), 0.0, -1);
        in[0] = IN(0);
        in[1] = i == 1 ? dy[0] : zero;
        in[2] = i == 1 ? zero : dy[0];
        accum(a, IN(i), emit(a, IR_OP_WHERE, 3, in, gname(a, IN(i), nb, sizeof nb)));
    }
}

/* MSELossGrad(x, target, dloss); the target's gradient is the negation. */
static void
rule_mseloss(ad *a, ir_id op, const ir_id *dy)
{
    char nb[256];
    ir_id in[3] = {IN(0), IN(1), dy[0]}, g;
    g = emit(a, IR_OP_MSELOSSGRAD, 3, in, gname(a, IN(0), nb, sizeof nb));
    accum(a, IN(0), g);
    if (ACTIVE(IN(1)))
        accum(a, IN(1), mul_const(a, g, -1.0, gname(a, IN(1), nb, sizeof nb)));
}

static int
check_sceloss(ad *a, ir_id op)
{
    if (a->m->ops[op].noutput > 1 && NEEDED(OUT(1)))
        return di_error_set(a->err, DI_EUNSUPPORTED,
                            "autodiff: the loss depends on SoftmaxCrossEntropyLoss's log_prob "
                            "output; only its loss output has a gradient rule");
    return 0;
}

static void
rule_sceloss(ad *a, ir_id op, const ir_id *dy)
{
    char nb[256];
    ir_id in[3] = {dy[0], IN(0), IN(1)};
    ir_id g = begin(a, IR_OP_SCELOSSGRAD, 3, in, 1, gname(a, IN(0), nb, sizeof nb));
    copy_attr(a, g, op, "reduction");
    copy_attr(a, g, op, "ignore_index");
    accum(a, IN(0), finish(a, g));
}

#undef IN
#undef OUT

/* The rule table: one row per differentiable op kind. */
static const struct {
    rule_fn rule;
    check_fn check;
} rules[IR_NOPKIND] = {
    [IR_OP_MATMUL] = {rule_matmul, NULL},
    [IR_OP_GEMM] = {rule_gemm, NULL},
    [IR_OP_ADD] = {rule_add, NULL},
    [IR_OP_SUB] = {rule_sub, NULL},
    [IR_OP_MUL] = {rule_mul, NULL},
    [IR_OP_DIV] = {rule_div, NULL},
    [IR_OP_POW] = {rule_pow, check_pow},
    [IR_OP_SQRT] = {rule_sqrt, NULL},
    [IR_OP_RELU] = {rule_act, NULL},
    [IR_OP_GELU] = {rule_act, NULL},
    [IR_OP_SWISH] = {rule_act, NULL},
    [IR_OP_TANH] = {rule_act, NULL},
    [IR_OP_SIGMOID] = {rule_act, NULL},
    [IR_OP_ERF] = {rule_erf, NULL},
    [IR_OP_IDENTITY] = {rule_identity, NULL},
    [IR_OP_CAST] = {rule_cast, NULL},
    [IR_OP_DROPOUT] = {rule_dropout, check_dropout},
    [IR_OP_SOFTMAX] = {rule_softmax, NULL},
    [IR_OP_LAYERNORM] = {rule_layernorm, check_layernorm},
    [IR_OP_RMSNORM] = {rule_layernorm, check_layernorm},
    [IR_OP_WHERE] = {rule_where, NULL},
    [IR_OP_RESHAPE] = {rule_reshape, NULL},
    [IR_OP_TRANSPOSE] = {rule_transpose, NULL},
    [IR_OP_CONCAT] = {rule_concat, NULL},
    [IR_OP_SPLIT] = {rule_split, NULL},
    [IR_OP_SLICE] = {rule_slice, check_slice},
    [IR_OP_GATHER] = {rule_gather, NULL},
    [IR_OP_TOPK] = {rule_topk, NULL},
    [IR_OP_FLASHATTN] = {rule_flashattn, NULL},
    [IR_OP_MOEDISPATCH] = {rule_moe, NULL},
    [IR_OP_MOECOMBINE] = {rule_moe, NULL},
    [IR_OP_UNSQUEEZE] = {rule_unsqueeze, NULL},
    [IR_OP_SQUEEZE] = {rule_squeeze, NULL},
    [IR_OP_REDUCEMEAN] = {rule_reduce, NULL},
    [IR_OP_REDUCESUM] = {rule_reduce, NULL},
    [IR_OP_MSELOSS] = {rule_mseloss, NULL},
    [IR_OP_SCELOSS] = {rule_sceloss, check_sceloss},
};

/* ---- the pass ---- */

/* Marks the trainable arguments active; 0 or DI_EINVAL. */
static int
mark_trainable(ad *a, uint32_t *ntrain)
{
    ir_module *m = a->m;
    const ir_region *r = &m->regions[a->func];
    const xform_autodiff_opts *o = a->o;
    *ntrain = 0;
    if (o->trainable) {
        for (uint32_t i = 0; i < o->ntrainable; i++) {
            uint32_t j;
            for (j = 0; j < r->narg; j++)
                if (strcmp(ir_str_get(m, m->values[r->args[j]].name), o->trainable[i]) == 0)
                    break;
            if (j == r->narg)
                return di_error_set(a->err, DI_EINVAL, "autodiff: no argument named '%s' to train",
                                    o->trainable[i]);
            if (!value_is_float_tensor(m, r->args[j]))
                return di_error_set(a->err, DI_EINVAL,
                                    "autodiff: argument '%s' is not a floating-point tensor",
                                    o->trainable[i]);
            if (!a->active[r->args[j]])
                (*ntrain)++;
            a->active[r->args[j]] = 1;
        }
    } else {
        for (uint32_t j = 0; j < r->narg; j++) {
            ir_id v = r->args[j];
            if (value_is_float_tensor(m, v) &&
                !xform_autodiff_is_data_name(o, ir_str_get(m, m->values[v].name))) {
                a->active[v] = 1;
                (*ntrain)++;
            }
        }
    }
    if (*ntrain == 0)
        return di_error_set(a->err, DI_EINVAL,
                            "autodiff: no trainable arguments (every argument is data or not "
                            "floating-point)");
    return 0;
}

/* Steps 1 and 2: activity, usefulness and the rule checks. */
static int
analyze(ad *a, ir_id loss, uint32_t nop)
{
    ir_module *m = a->m;
    ir_label label;
    int rc;
    for (uint32_t k = 0; k < nop; k++) {
        ir_id op = m->regions[a->func].ops[k];
        const ir_op *o = &m->ops[op];
        int any = 0;
        for (uint32_t i = 0; i < o->ninput; i++) {
            ir_id v = ir_op_input(m, op, i);
            any |= a->active[v];
            if (a->first_use[v] == 0)
                a->first_use[v] = op;
            else if (a->first_use[v] != op)
                a->shared[v] = 1;
        }
        for (uint32_t i = 0; i < o->noutput; i++) {
            ir_id v = o->outputs + i;
            a->active[v] = (uint8_t)(any && value_is_float_tensor(m, v));
        }
    }
    a->useful[loss] = 1;
    for (uint32_t k = nop; k-- > 0;) {
        ir_id op = m->regions[a->func].ops[k];
        const ir_op *o = &m->ops[op];
        int any = 0, needed = 0;
        for (uint32_t i = 0; i < o->noutput; i++) {
            any |= a->useful[o->outputs + i];
            needed |= a->useful[o->outputs + i] && a->active[o->outputs + i];
        }
        if (!any)
            continue;
        for (uint32_t i = 0; i < o->ninput; i++)
            a->useful[ir_op_input(m, op, i)] = 1;
        if (!needed)
            continue;
        label = ir_op_label(m, op);
        if (o->body || rules[o->kind].rule == NULL)
            return di_error_set(a->err, DI_EUNSUPPORTED,
                                "autodiff: no gradient rule for %s, which the loss depends on",
                                label.s);
        if (rules[o->kind].check && (rc = rules[o->kind].check(a, op)) != 0) {
            di_error_prefix(a->err, "%s", label.s);
            return rc;
        }
    }
    return 0;
}

static int is_16bit(const ir_module *m, ir_id ty);

/* Weight w's gradient g cast to f32 ("<w>.grad.f32"), with a's phase and source. */
static ir_id
grad_f32(ad *a, ir_id w, ir_id g)
{
    char nb[256];
    ir_id c = begin(a, IR_OP_CAST, 1, &g, 1, derived_name(a->m, w, ".grad.f32", nb, sizeof nb));
    set_int(a, c, "to", 1); /* ONNX FLOAT */
    return finish(a, c);
}

/*
 * Mixed precision with f32 accumulation (Megatron-LM's main_grad, not
 * grad_accum_16): each 16-bit weight's gradient is cast to f32 as soon as it
 * is complete, once the backward pass has visited the weight's first use
 * (ops are visited in reverse), as Megatron-LM adds each gradient into its
 * f32 buffer when the backward makes it. Cast at the end of the pass
 * instead, every layer's 16-bit gradients stayed live to its end (on
 * GPT-3 175B with tp 8, 0.42 GiB per layer of phantom activations) and the
 * data-parallel reduction of a bucket, which reads the f32 gradients, could
 * not overlap the backward.
 */
static void
cast_complete_grads(ad *a, ir_id op)
{
    ir_module *m = a->m;
    const xform_autodiff_opts *o = a->o;
    if (o->optimizer != XFORM_OPTIM_ADAM || !o->master_weights || o->grad_accum_16)
        return;
    for (uint32_t i = 0; i < m->ops[op].ninput && a->rc == 0; i++) {
        ir_id w = ir_op_input(m, op, i);
        if (w >= a->nvalue0 || m->values[w].def != 0 || !a->active[w] ||
            a->first_use[w] != op || a->grad[w] == 0 || a->grad32[w] != 0 ||
            !is_16bit(m, m->values[w].type))
            continue;
        a->src = op;
        a->optimizer_phase = 1; /* as the update's ops: a weight has no sequence dimension */
        a->grad32[w] = grad_f32(a, w, a->grad[w]);
        a->optimizer_phase = 0;
    }
}

/* Step 3. */
static void
backward(ad *a, ir_id loss, uint32_t nop)
{
    ir_module *m = a->m;
    shape ls;
    ir_id dyb[16], *dy;
    value_shape(m, loss, &ls);
    a->phase = "backward";
    a->src = m->values[loss].def;
    a->grad[loss] = constant(a, ls.dtype, 1.0, ls.device >= 0 ? ls.device : -1);
    if (a->grad[loss] && ls.rank > 0) {
        /* A one-element loss of rank > 0: reshape the seed to its shape. */
        ir_id r = begin(a, IR_OP_RESHAPE, 1, &a->grad[loss], 1, "dloss");
        set_ints(a, r, "shape", ls.rank, ls.dims);
        a->grad[loss] = finish(a, r);
    }
    for (uint32_t k = nop; k-- > 0 && a->rc == 0;) {
        ir_id op = m->regions[a->func].ops[k];
        uint32_t nout = m->ops[op].noutput;
        int any = 0;
        if (rules[m->ops[op].kind].rule == NULL || m->ops[op].body)
            continue;
        dy = nout <= 16 ? dyb : di_xmalloc(nout * sizeof *dy);
        for (uint32_t i = 0; i < nout; i++) {
            ir_id v = m->ops[op].outputs + i;
            dy[i] = a->active[v] && a->useful[v] ? a->grad[v] : 0;
            any |= dy[i] != 0;
        }
        if (any) {
            a->src = op;
            rules[m->ops[op].kind].rule(a, op, dy);
        }
        cast_complete_grads(a, op);
        if (dy != dyb)
            di_free(dy);
    }
}

static int
is_16bit(const ir_module *m, ir_id ty)
{
    const ir_type *t = &m->types[ty];
    return t->kind == IR_TYPE_TENSOR && ir_dtype_is_half((ir_dtype)t->dtype);
}

/* Type ty with dtype f32. */
static ir_id
f32_like(ir_module *m, ir_id ty)
{
    const ir_type *t = &m->types[ty];
    int64_t dims[IR_MAX_RANK];
    memcpy(dims, ir_type_dims(m, ty), t->rank * sizeof *dims);
    return ir_type_tensor(m, IR_F32, t->rank, dims, t->device);
}

/* Step 4: the optimizer and the new result list. */
static void
optimize(ad *a, ir_id loss)
{
    ir_module *m = a->m;
    const xform_autodiff_opts *o = a->o;
    ir_region *r = &m->regions[a->func];
    uint32_t narg = r->narg, nres = r->nresult, nw = 0, nnew = 0;
    ir_id *old = di_xmalloc((nres + 1) * sizeof *old);
    ir_id *weights = di_xmalloc((narg + 1) * sizeof *weights);
    ir_id *newres = di_xmalloc((4 * narg + nres + 1) * sizeof *newres);
    int has_loss = 0;
    char nb[256];
    for (uint32_t i = 0; i < nres; i++) {
        old[i] = r->results[i];
        has_loss |= old[i] == loss;
    }
    for (uint32_t j = 0; j < narg; j++) {
        ir_id v = m->regions[a->func].args[j];
        if (v < a->nvalue0 && a->active[v] && m->values[v].def == 0)
            weights[nw++] = v;
    }
    a->phase = "optimizer";
    a->optimizer_phase = 1;
    if (o->optimizer == XFORM_OPTIM_ADAM) {
        /* Per weight: m, v and (mixed precision) master weights, each an f32 copy of its type. */
        ir_id *st = di_xmalloc(3 * nw * sizeof *st);
        uint32_t nmaster = 0, mi = 0; /* master weights: in all, and placed so far */
        static const char *const sfx[3] = {".adam_m", ".adam_v", ".master"};
        for (uint32_t k = 0; k < 3; k++)
            for (uint32_t i = 0; i < nw; i++) {
                ir_id ty = m->values[weights[i]].type;
                st[k * nw + i] = 0;
                if (o->master_weights && is_16bit(m, ty))
                    ty = f32_like(m, ty);
                else if (k == 2)
                    continue;
                nmaster += k == 2;
                st[k * nw + i] = ir_region_add_arg(
                    m, a->func, ty, derived_name(m, weights[i], sfx[k], nb, sizeof nb));
            }
        for (uint32_t i = 0; i < nw; i++) {
            ir_id w = weights[i], g = a->grad[w], op, base, master = st[2 * nw + i];
            ir_id in[5];
            const char *names[4];
            char n1[256], n2[256], n3[256];
            uint32_t nin = master ? 5 : 4;
            if (g == 0) {
                newres[nnew + i] = w;
                newres[nnew + nw + i] = st[i];
                newres[nnew + 2 * nw + i] = st[nw + i];
                if (master)
                    newres[nnew + 3 * nw + mi++] = master;
                continue;
            }
            a->src = a->first_use[w];
            if (master && a->grad32[w] != 0) {
                g = a->grad32[w]; /* cast in the backward pass (cast_complete_grads) */
            } else if (master) {
                /*
                 * The gradient in f32: after the accumulation (grad_accum_16: the optimizer
                 * step), else in the backward pass for a gradient cast_complete_grads did not
                 * see complete.
                 */
                a->phase = o->grad_accum_16 ? "optimizer" : "backward";
                g = grad_f32(a, w, g);
                a->phase = "optimizer";
            }
            in[0] = w;
            in[1] = g;
            in[2] = st[i];
            in[3] = st[nw + i];
            in[4] = master;
            names[0] = derived_name(m, w, ".new", nb, sizeof nb);
            names[1] = derived_name(m, w, ".adam_m.new", n1, sizeof n1);
            names[2] = derived_name(m, w, ".adam_v.new", n2, sizeof n2);
            names[3] = derived_name(m, w, ".master.new", n3, sizeof n3);
            if (a->rc != 0)
                break;
            op = ir_op_add(m, a->func, IR_OP_ADAM, nin, in, nin - 1, NULL, names);
            set_float(a, op, "lr", o->lr);
            set_float(a, op, "beta1", o->beta1);
            set_float(a, op, "beta2", o->beta2);
            set_float(a, op, "epsilon", o->epsilon);
            base = finish(a, op);
            newres[nnew + i] = base;
            newres[nnew + nw + i] = base + 1;
            newres[nnew + 2 * nw + i] = base + 2;
            if (master)
                newres[nnew + 3 * nw + mi++] = base + 3;
        }
        nnew += 3 * nw + nmaster;
        di_free(st);
    } else {
        /* Per value added by the pass: already named as some weight's gradient. */
        uint8_t *claimed = di_xcalloc(m->nvalue - a->nvalue0 + 4 * nw + 1, 1);
        for (uint32_t i = 0; i < nw; i++) {
            ir_id w = weights[i], g = a->grad[w], op;
            a->src = a->first_use[w];
            if (o->optimizer == XFORM_OPTIM_NONE) {
                /*
                 * Name each gradient result "<weight>.grad" (distir run writes results by
                 * name): rename a value the pass made for this weight alone, else give it an
                 * Identity of that name.
                 */
                derived_name(m, w, ".grad", nb, sizeof nb);
                if (g == 0)
                    g = zeros_like(a, w);
                if (g >= a->nvalue0 && !claimed[g - a->nvalue0]) {
                    m->values[g].name = ir_str(m, nb);
                } else if (g != 0) {
                    ir_id id = begin(a, IR_OP_IDENTITY, 1, &g, 1, nb);
                    g = finish(a, id);
                }
                if (g >= a->nvalue0)
                    claimed[g - a->nvalue0] = 1;
                newres[nnew++] = g;
                continue;
            }
            if (g == 0) {
                newres[nnew++] = w;
                continue;
            }
            op = begin(a, IR_OP_SGD, 2, (ir_id[]){w, g}, 1,
                       derived_name(m, w, ".new", nb, sizeof nb));
            set_float(a, op, "lr", o->lr);
            newres[nnew++] = finish(a, op);
        }
        di_free(claimed);
    }
    if (a->rc == 0) {
        r = &m->regions[a->func];
        r->nresult = 0;
        for (uint32_t i = 0; i < nnew; i++)
            ir_region_add_result(m, a->func, newres[i]);
        for (uint32_t i = 0; i < nres; i++)
            ir_region_add_result(m, a->func, old[i]);
        if (!has_loss)
            ir_region_add_result(m, a->func, loss);
    }
    di_free(old);
    di_free(weights);
    di_free(newres);
}

int
xform_autodiff(ir_module *m, ir_id func, ir_id loss, const xform_autodiff_opts *opts, di_error *err)
{
    xform_autodiff_opts dflt;
    ad a;
    uint32_t nop, ntrain = 0;
    int rc;
    if (opts == NULL) {
        xform_autodiff_opts_init(&dflt);
        opts = &dflt;
    }
    if (func == 0 || func >= m->nregion || m->regions[func].parent != 0)
        return di_error_set(err, DI_EINVAL, "autodiff: region %u is not a top-level function",
                            func);
    if (loss == 0 || loss >= m->nvalue || m->values[loss].region != func ||
        m->values[loss].def == 0)
        return di_error_set(err, DI_EINVAL,
                            "autodiff: the loss must be a value computed by an op of the function");
    if (!value_is_float_tensor(m, loss) || ir_type_numel(m, m->values[loss].type) != 1)
        return di_error_set(err, DI_EINVAL,
                            "autodiff: the loss '%s' must be a floating-point scalar",
                            ir_str_get(m, m->values[loss].name));
    memset(&a, 0, sizeof a);
    a.m = m;
    a.func = func;
    a.o = opts;
    a.err = err;
    a.nvalue0 = m->nvalue;
    a.grad = di_xcalloc(m->nvalue, sizeof *a.grad);
    a.active = di_xcalloc(m->nvalue, 1);
    a.useful = di_xcalloc(m->nvalue, 1);
    a.first_use = di_xcalloc(m->nvalue, sizeof *a.first_use);
    a.grad32 = di_xcalloc(m->nvalue, sizeof *a.grad32);
    a.shared = di_xcalloc(m->nvalue, 1);
    nop = m->regions[func].nop;
    rc = mark_trainable(&a, &ntrain);
    if (rc == 0)
        rc = analyze(&a, loss, nop);
    if (rc == 0 && !a.active[loss])
        rc = di_error_set(err, DI_EINVAL,
                          "autodiff: the loss '%s' does not depend on any trainable argument",
                          ir_str_get(m, m->values[loss].name));
    if (rc == 0) {
        backward(&a, loss, nop);
        if (a.rc == 0)
            optimize(&a, loss);
        rc = a.rc;
    }
    di_free(a.grad);
    di_free(a.active);
    di_free(a.useful);
    di_free(a.first_use);
    di_free(a.shared);
    di_free(a.grad32);
    return rc;
}
