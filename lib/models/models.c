/*
 * models.c: the op builder shared by the generators, the GPT presets, the
 * parameter formulas, and the MLP generator (models.h). The GPT generator is
 * in gpt.c.
 *
 * The builder adds an op, lets the caller set its attributes, then types it
 * with ir_op_infer (so a generator bug is a shape-inference message, never a
 * silently ill-typed module) and tags it with the dist.* attributes from the
 * builder's current state. Errors are sticky: after the first one every call
 * returns 0 and adds nothing, so a generator checks b->rc once at the end.
 */
#include "models/models.h"
#include "models/models_int.h"

#include <stdio.h>
#include <string.h>

/* ---- the builder ---- */

void
models_builder_init(models_builder *b, ir_module *m, const char *func, di_error *err)
{
    memset(b, 0, sizeof *b);
    b->m = m;
    b->func = ir_func_new(m, func);
    b->device = 0;
    b->annotate = 1;
    b->layer = -1;
    b->seq = -1;
    b->err = err;
}

ir_id
models_arg(models_builder *b, const char *name, ir_dtype dt, uint32_t rank, const int64_t *dims)
{
    if (b->rc != 0)
        return 0;
    return ir_region_add_arg(b->m, b->func, ir_type_tensor(b->m, dt, rank, dims, b->device),
                             name);
}

ir_id
models_begin(models_builder *b, int kind, uint32_t nin, const ir_id *in, uint32_t nout,
             const char *name)
{
    const char *small[8] = {0}, **names = small;
    ir_id op;
    if (b->rc != 0)
        return 0;
    for (uint32_t i = 0; i < nin; i++)
        if (in[i] == 0) {
            b->rc = di_error_set(b->err, DI_EINTERNAL, "model: %s input %u is missing",
                                 ir_opkind_name(kind), i);
            return 0;
        }
    if (nout > sizeof small / sizeof small[0])
        names = di_xmalloc(nout * sizeof *names);
    for (uint32_t i = 0; i < nout; i++)
        names[i] = name;
    op = ir_op_add(b->m, b->func, kind, nin, in, nout, NULL, names);
    if (names != small)
        di_free(names);
    return op;
}

ir_id
models_end(models_builder *b, ir_id op)
{
    ir_module *m = b->m;
    int64_t seq = b->seq;
    int rc;
    b->seq = -1;
    if (op == 0 || b->rc != 0)
        return 0;
    if ((rc = ir_op_infer_results(m, op, b->err)) != 0) {
        di_error_prefix(b->err, "model");
        b->rc = rc;
        return 0;
    }
    if (b->annotate) {
        ir_op_set_int(m, op, "dist.layer", b->layer);
        ir_op_set_string(m, op, "dist.phase", "forward");
        if (b->part)
            ir_op_set_string(m, op, "dist.part", b->part);
        if (b->tp)
            ir_op_set_string(m, op, "dist.tp", b->tp);
        if (seq >= 0)
            ir_op_set_int(m, op, "dist.seq", seq);
    }
    return m->ops[op].noutput ? m->ops[op].outputs : 0;
}

ir_id
models_op(models_builder *b, int kind, uint32_t nin, const ir_id *in, const char *name)
{
    return models_end(b, models_begin(b, kind, nin, in, 1, name));
}

ir_id
models_scalar(models_builder *b, ir_dtype dt, double v)
{
    uint8_t bytes[8];
    uint32_t n = xform_scalar_bytes(dt, v, bytes);
    ir_id op = models_begin(b, IR_OP_CONSTANT, 0, NULL, 1, "c");
    if (op)
        ir_op_set_tensor(b->m, op, "value", ir_type_tensor(b->m, dt, 0, NULL, IR_DEVICE_NONE),
                         bytes, n);
    return models_end(b, op);
}

/* ---- defaults, presets and formulas ---- */

void
models_train_init(models_train *t)
{
    memset(t, 0, sizeof *t);
    t->optimizer = XFORM_OPTIM_SGD;
    t->lr = 0.01;
    t->annotate = 1;
}

void
models_mlp_init(models_mlp *c)
{
    memset(c, 0, sizeof *c);
    c->layers = 2;
    c->hidden = 16;
    c->batch = 8;
    c->dtype = IR_F32;
    c->act = MODELS_ACT_RELU;
    c->loss = MODELS_LOSS_SCE;
    models_train_init(&c->train);
}

/*
 * The GPT-3 family from Brown et al. 2020, Table 2.1, and Megatron-LM's 1T
 * model (Narayanan et al. 2021, Table 1). Two table entries are
 * inconsistent with d_head: 1.3B lists 24 heads with d_head 128 and
 * d_model 2048 (2048/128 = 16 heads, as every reimplementation uses), and
 * 13B lists d_model 5140 with 40 heads of 128 (5140 is not divisible by 40;
 * 40 x 128 = 5120). We keep d_head and d_model x heads consistent:
 * 1.3B = 16 heads, 13B = d_model 5120 (docs/models.md).
 */
static const struct {
    const char *name;
    uint32_t layers;
    int64_t hidden, heads;
} gpt_presets[] = {
    {"gpt3-125m", 12, 768, 12},   {"gpt3-350m", 24, 1024, 16},  {"gpt3-760m", 24, 1536, 16},
    {"gpt3-1.3b", 24, 2048, 16},  {"gpt3-2.7b", 32, 2560, 32},  {"gpt3-6.7b", 32, 4096, 32},
    {"gpt3-13b", 40, 5120, 40},   {"gpt3-175b", 96, 12288, 96}, {"gpt-1t", 128, 25600, 160},
};
#define NGPT_PRESETS (sizeof gpt_presets / sizeof gpt_presets[0])

void
models_gpt_init(models_gpt *c)
{
    memset(c, 0, sizeof *c);
    c->layers = 12;
    c->hidden = 768;
    c->heads = 12;
    c->seq = 2048;
    c->vocab = 51200;
    c->batch = 1;
    c->dtype = IR_F32;
    c->dropout = 0.1;
    models_train_init(&c->train);
}

const char *
models_gpt_preset_name(uint32_t i)
{
    return i < NGPT_PRESETS ? gpt_presets[i].name : NULL;
}

int
models_gpt_preset(const char *name, models_gpt *c, di_error *err)
{
    char list[512];
    size_t len = 0;
    for (uint32_t i = 0; i < NGPT_PRESETS; i++)
        if (strcmp(gpt_presets[i].name, name) == 0) {
            c->layers = gpt_presets[i].layers;
            c->hidden = gpt_presets[i].hidden;
            c->heads = gpt_presets[i].heads;
            c->seq = 2048;
            c->vocab = 51200;
            return 0;
        }
    list[0] = '\0';
    for (uint32_t i = 0; i < NGPT_PRESETS && len < sizeof list; i++)
        len += (size_t)snprintf(list + len, sizeof list - len, "%s%s", i ? ", " : "",
                                gpt_presets[i].name);
    return di_error_set(err, DI_ENOTFOUND, "unknown GPT preset '%s' (known: %s)", name, list);
}

uint64_t
models_mlp_parameters(const models_mlp *c)
{
    uint64_t n = 0;
    int64_t in = c->input ? c->input : c->hidden;
    int64_t classes = c->classes ? c->classes : c->hidden;
    for (uint32_t i = 0; i < c->layers; i++) {
        int64_t out = i + 1 == c->layers ? classes : c->hidden;
        n += (uint64_t)in * (uint64_t)out + (uint64_t)out;
        in = out;
    }
    return n;
}

uint64_t
models_gpt_parameters(const models_gpt *c)
{
    uint64_t l = c->layers, h = (uint64_t)c->hidden;
    uint64_t n = 12 * l * h * h + 13 * l * h + ((uint64_t)c->vocab + (uint64_t)c->seq) * h;
    return c->final_ln_params ? n + 2 * h : n;
}

/* ---- training step ---- */

int
models_train_step(models_builder *b, ir_id loss, const models_train *t)
{
    xform_autodiff_opts o;
    if (b->rc != 0)
        return b->rc;
    if (t->forward_only) {
        ir_region_add_result(b->m, b->func, loss);
        return 0;
    }
    xform_autodiff_opts_init(&o);
    o.optimizer = t->optimizer;
    o.lr = t->lr;
    o.annotate = t->annotate;
    o.master_weights = t->precision != MODELS_PRECISION_PURE;
    o.grad_accum_16 = t->precision == MODELS_PRECISION_MIXED_GRAD16;
    if (t->precision == MODELS_PRECISION_MIXED) {
        /* Megatron-LM's default: fp16 weights keep 16-bit gradients, bf16 accumulates in f32. */
        const ir_region *fr = &b->m->regions[b->func];
        for (uint32_t i = 0; i < fr->narg; i++)
            if (b->m->types[b->m->values[fr->args[i]].type].dtype == IR_F16)
                o.grad_accum_16 = 1;
    }
    return xform_autodiff(b->m, b->func, loss, &o, b->err);
}

/* ---- the MLP ---- */

int
models_mlp_build(const models_mlp *c, ir_module **out, di_error *err)
{
    models_builder b;
    ir_module *m;
    int64_t in = c->input ? c->input : c->hidden;
    int64_t classes = c->classes ? c->classes : c->hidden, dims[2];
    ir_id x, target, h, *w, loss;
    char name[64];
    int rc;
    *out = NULL;
    if ((rc = models_check_size("--hidden", c->hidden, err)) != 0 ||
        (rc = models_check_size("--batch", c->batch, err)) != 0 ||
        (rc = models_check_size("--input", in, err)) != 0 ||
        (rc = models_check_size("--classes", classes, err)) != 0)
        return rc;
    if ((rc = models_check_layers(c->layers, err)) != 0)
        return rc;
    if (!ir_dtype_is_float(c->dtype))
        return di_error_set(err, DI_EINVAL, "model: --dtype must be floating-point, got %s",
                            ir_dtype_name(c->dtype));
    m = ir_module_new();
    models_builder_init(&b, m, "mlp", err);
    b.annotate = c->train.annotate;
    dims[0] = c->batch;
    dims[1] = in;
    x = models_arg(&b, "x", c->dtype, 2, dims);
    if (c->loss == MODELS_LOSS_MSE) {
        dims[1] = classes;
        target = models_arg(&b, "targets", c->dtype, 2, dims);
    } else {
        target = models_arg(&b, "labels", IR_I64, 1, dims);
    }
    w = di_xmalloc(2 * c->layers * sizeof *w);
    for (uint32_t i = 0; i < c->layers; i++) {
        int64_t o = i + 1 == c->layers ? classes : c->hidden;
        dims[0] = in;
        dims[1] = o;
        snprintf(name, sizeof name, "l%u.w", i);
        w[2 * i] = models_arg(&b, name, c->dtype, 2, dims);
        snprintf(name, sizeof name, "l%u.b", i);
        w[2 * i + 1] = models_arg(&b, name, c->dtype, 1, &o);
        in = o;
    }
    h = x;
    b.part = "block";
    for (uint32_t i = 0; i < c->layers; i++) {
        int last = i + 1 == c->layers;
        /* Megatron pairs: even layers column-parallel, the following odd layer row-parallel. */
        const char *tp = (i % 2 == 0) ? (i + 1 < c->layers ? "column" : "none") : "row";
        ir_id in2[2];
        b.layer = i;
        b.tp = tp;
        in2[0] = h;
        in2[1] = w[2 * i];
        snprintf(name, sizeof name, "l%u.mm", i);
        h = models_op(&b, IR_OP_MATMUL, 2, in2, name);
        /* A row-parallel layer adds its bias after the reduction: replicated. */
        b.tp = i % 2 == 0 ? tp : "none";
        in2[0] = h;
        in2[1] = w[2 * i + 1];
        snprintf(name, sizeof name, "l%u.out", i);
        h = models_op(&b, IR_OP_ADD, 2, in2, name);
        if (!last) {
            snprintf(name, sizeof name, "l%u.act", i);
            h = models_op(&b, c->act == MODELS_ACT_GELU ? IR_OP_GELU : IR_OP_RELU, 1, &h, name);
        }
    }
    di_free(w);
    b.layer = -1;
    b.part = "head";
    b.tp = "none";
    {
        ir_id in2[2] = {h, target};
        loss = models_op(&b, c->loss == MODELS_LOSS_MSE ? IR_OP_MSELOSS : IR_OP_SCELOSS, 2, in2,
                         "loss");
    }
    rc = models_train_step(&b, loss, &c->train);
    if (rc != 0) {
        ir_module_free(m);
        return rc;
    }
    *out = m;
    return 0;
}

/* ---- shared by the generators (models_int.h) ---- */

ir_id
models_op2(models_builder *b, int kind, ir_id x, ir_id y, const char *name)
{
    ir_id in[2] = {x, y};
    return models_op(b, kind, 2, in, name);
}

ir_id
models_reshape(models_builder *b, ir_id x, uint32_t n, const int64_t *shape, const char *name)
{
    ir_id op = models_begin(b, IR_OP_RESHAPE, 1, &x, 1, name);
    if (op)
        ir_op_set_ints(b->m, op, "shape", n, shape);
    return models_end(b, op);
}

ir_id
models_transpose(models_builder *b, ir_id x, uint32_t n, const int64_t *perm, const char *name)
{
    ir_id op = models_begin(b, IR_OP_TRANSPOSE, 1, &x, 1, name);
    if (op)
        ir_op_set_ints(b->m, op, "perm", n, perm);
    return models_end(b, op);
}

/* A rank-1 constant of n elements on the builder's device. */
ir_id
models_vector_const(models_builder *b, ir_dtype dt, int64_t n, double (*fn)(int64_t), const char *name)
{
    uint8_t one[8];
    uint32_t sz = xform_scalar_bytes(dt, 0, one);
    uint8_t *bytes = di_xmalloc((size_t)n * sz + 1);
    ir_id op;
    for (int64_t i = 0; i < n; i++) {
        xform_scalar_bytes(dt, fn(i), one);
        memcpy(bytes + (size_t)i * sz, one, sz);
    }
    op = models_begin(b, IR_OP_CONSTANT, 0, NULL, 1, name);
    if (op) {
        ir_op_set_tensor(b->m, op, "value", ir_type_tensor(b->m, dt, 1, &n, IR_DEVICE_NONE),
                         bytes, (size_t)n * sz);
        ir_op_set_int(b->m, op, "device", b->device);
    }
    di_free(bytes);
    return models_end(b, op);
}

void
models_norm_stash(models_builder *b, ir_id op, ir_dtype dt)
{
    if (op && ir_dtype_is_half(dt))
        ir_op_set_int(b->m, op, "stash_type", ir_dtype_onnx(IR_F32));
}

double
models_index(int64_t i)
{
    return (double)i;
}

double
models_one(int64_t i)
{
    (void)i;
    return 1.0;
}

ir_id
models_flash_attention(models_builder *b, ir_id q, ir_id k, ir_id v, double scale,
                       const char *name)
{
    ir_id in[3] = {q, k, v};
    ir_id op = models_begin(b, IR_OP_FLASHATTN, 3, in, 2, name);
    if (op) {
        ir_op_set_int(b->m, op, "causal", 1);
        ir_op_set_float(b->m, op, "scale", scale);
    }
    return models_end(b, op);
}

ir_id
models_attention_probs(models_builder *b, ir_id q, ir_id k, double scale, ir_id idx,
                       int64_t seq, ir_dtype dt, const char *prefix)
{
    static const int64_t kperm[4] = {0, 1, 3, 2};
    char name[96];
    ir_id s, op;
    snprintf(name, sizeof name, "%s.kt", prefix);
    k = models_transpose(b, k, 4, kperm, name);
    snprintf(name, sizeof name, "%s.scores", prefix);
    s = models_op2(b, IR_OP_MATMUL, q, k, name);
    s = models_op2(b, IR_OP_MUL, s, models_scalar(b, dt, scale), name);
    s = models_op2(b, IR_OP_ADD, s, models_causal_mask(b, idx, seq, dt, prefix), name);
    op = models_begin(b, IR_OP_SOFTMAX, 1, &s, 1, name);
    if (op)
        ir_op_set_int(b->m, op, "axis", -1);
    snprintf(name, sizeof name, "%s.probs", prefix);
    return models_end(b, op);
}

/* The additive causal mask [s, s]: 0 where j <= i, -1e4 * (j - i) above the diagonal. */
ir_id
models_causal_mask(models_builder *b, ir_id idx, int64_t seq, ir_dtype dt, const char *prefix)
{
    char name[64];
    int64_t col[2] = {seq, 1};
    ir_id row, diff, mask;
    const char *tp = b->tp;
    /* The mask is the same for every head: not split by tensor parallelism. */
    b->tp = "none";
    snprintf(name, sizeof name, "%s.mask", prefix);
    row = models_reshape(b, idx, 2, col, name);
    diff = models_op2(b, IR_OP_SUB, idx, row, name);
    diff = models_op(b, IR_OP_RELU, 1, &diff, name);
    mask = models_op2(b, IR_OP_MUL, diff, models_scalar(b, IR_F32, -1e4), name);
    if (dt != IR_F32) {
        ir_id op = models_begin(b, IR_OP_CAST, 1, &mask, 1, name);
        if (op)
            ir_op_set_int(b->m, op, "to", ir_dtype_onnx(dt));
        mask = models_end(b, op);
    }
    b->tp = tp;
    return mask;
}

int
models_loss_step(models_builder *b, ir_id logits, ir_id labels, const models_train *t,
                 ir_module **out)
{
    int64_t flat = -1;
    ir_id op, loss;
    int rc;
    b->tp = "none";
    labels = models_reshape(b, labels, 1, &flat, "labels.flat");
    b->tp = "vocab";
    /*
     * The loss in f32 for a 16-bit model, as Megatron-LM computes it (its
     * vocabulary-parallel cross-entropy casts the logits with .float() and
     * keeps the f32 softmax for the backward; --fp16-lm-cross-entropy, off by
     * default, would not): the logits cast, the cross-entropy and its gradient
     * on f32, the gradient cast back. PURE precision keeps the model's dtype.
     */
    if (b->rc == 0 && t->precision != MODELS_PRECISION_PURE &&
        ir_dtype_is_half((ir_dtype)b->m->types[b->m->values[logits].type].dtype)) {
        op = models_begin(b, IR_OP_CAST, 1, &logits, 1, "logits.f32");
        if (op)
            ir_op_set_int(b->m, op, "to", ir_dtype_onnx(IR_F32));
        logits = models_end(b, op);
    }
    op = models_begin(b, IR_OP_SCELOSS, 2, (ir_id[]){logits, labels}, 1, "loss");
    if (op)
        ir_op_set_string(b->m, op, "reduction", "mean");
    loss = models_end(b, op);
    rc = models_train_step(b, loss, t);
    if (rc != 0) {
        ir_module_free(b->m);
        return rc;
    }
    *out = b->m;
    return 0;
}

int
models_check_size(const char *what, int64_t v, di_error *err)
{
    if (v <= 0 || v > ((int64_t)1 << 40))
        return di_error_set(err, DI_EINVAL, "model: %s must be between 1 and 2^40, got %lld",
                            what, (long long)v);
    return 0;
}

int
models_check_layers(uint32_t layers, di_error *err)
{
    if (layers < 1 || layers > MODELS_MAX_LAYERS)
        return di_error_set(err, DI_EINVAL, "model: --layers must be between 1 and %u",
                            MODELS_MAX_LAYERS);
    return 0;
}
