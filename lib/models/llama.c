/*
 * llama.c: the Llama-family generator (models.h): a decoder-only
 * transformer with RMSNorm, grouped-query attention, a SwiGLU MLP of a given
 * FFN size, untied input and output embeddings and no biases, in the
 * Megatron-LM tensor-parallel layout, as one training step.
 *
 *   x = Gather(embed, tokens)                                [b, s, h]   embed
 *   per layer:
 *     a = RMSNorm(x) = x * (mean(x^2) + eps)^-1/2 * g           (RMSNormalization)
 *     q = a @ wq, k = a @ wk, v = a @ wv                      column
 *     heads: q [b, H, s, d]; k, v [b, KV, s, d] repeated to H heads
 *            (Unsqueeze, a broadcasting Mul by ones, Reshape)  heads
 *            (fused attention takes the KV heads as they are)
 *     p = Softmax(q @ k^T * 1/sqrt(d) + mask); ctx = p @ v, merged to [b, s, h]
 *     x = x + ctx @ wo                                        row
 *     a = RMSNorm(x); x = x + (Silu(a @ w1) * (a @ w3)) @ w2  column, column, row
 *   logits = RMSNorm(x) @ head  ([h, V], untied)               head
 *   loss = SoftmaxCrossEntropyLoss(logits, labels)
 *
 * Rotary position embedding is not generated: it has no parameters and
 * costs two element-wise passes over Q and K per layer (about 1% of a
 * layer's time at these sizes); the IR has no sine or cosine. The
 * parameter count is 2 V h + L (2 h + h (h + 2 KV d) + h h + 3 h f) + h,
 * exactly the published figures of the presets (tests/test_models.c).
 */
#include "models/models.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "models/models_int.h"

enum {
    L_NORM1, L_Q, L_K, L_V, L_O, L_NORM2, L_W1, L_W3, L_W2, /* a dense layer's, in order */
    L_ROUTER, L_E1, L_E3, L_E2, L_S1, L_S3, L_S2,           /* an MoE layer's MLP instead */
    L_QA, L_QNORM, L_KVA, L_KVNORM, L_KVB,                  /* latent attention (L_Q: wq_b) */
    L_PER_LAYER
};

static const char *const lweight_names[L_PER_LAYER] = {
    "attn_norm.scale", "attn.wq",        "attn.wk",        "attn.wv",
    "attn.wo",         "mlp_norm.scale", "mlp.w1",         "mlp.w3",
    "mlp.w2",          "moe.router",     "moe.experts.w1", "moe.experts.w3",
    "moe.experts.w2",  "moe.shared.w1",  "moe.shared.w3",  "moe.shared.w2",
    "attn.wq_a",       "attn.q_norm.scale", "attn.wkv_a",  "attn.kv_norm.scale",
    "attn.wkv_b",
};

/*
 * Published shapes (Touvron et al. 2023; Meta's Llama 3 and 3.1 model cards;
 * Mistral 7B; Mixtral of Experts (Jiang et al. 2024): 8 experts, top 2, every
 * layer; DeepSeekMoE (Dai et al. 2024), its 16B model: the first layer dense,
 * then 64 fine-grained experts of 1,408 units, top 6, 2 shared experts).
 * Mixtral's sequence is 4,096 here (its context is 32,768; --seq sets it).
 */
static const struct llama_preset {
    const char *name;
    uint32_t layers;
    int64_t hidden, heads, kv_heads, ffn, vocab, seq;
    int64_t experts, top_k, moe_ffn, shared;
    uint32_t first_dense;
} llama_presets[] = {
    {"llama2-7b", 32, 4096, 32, 32, 11008, 32000, 4096, 0, 0, 0, 0, 0},
    {"llama2-13b", 40, 5120, 40, 40, 13824, 32000, 4096, 0, 0, 0, 0, 0},
    {"llama2-70b", 80, 8192, 64, 8, 28672, 32000, 4096, 0, 0, 0, 0, 0},
    {"llama3-8b", 32, 4096, 32, 8, 14336, 128256, 8192, 0, 0, 0, 0, 0},
    {"llama3-70b", 80, 8192, 64, 8, 28672, 128256, 8192, 0, 0, 0, 0, 0},
    {"llama3-405b", 126, 16384, 128, 8, 53248, 128256, 8192, 0, 0, 0, 0, 0},
    {"mistral-7b", 32, 4096, 32, 8, 14336, 32000, 8192, 0, 0, 0, 0, 0},
    {"mixtral-8x7b", 32, 4096, 32, 8, 14336, 32000, 4096, 8, 2, 14336, 0, 0},
    {"deepseek-moe-16b", 28, 2048, 16, 16, 10944, 102400, 4096, 64, 6, 1408, 2, 1},
    {"deepseek-v3", 61, 7168, 128, 128, 18432, 129280, 4096, 256, 8, 2048, 1, 3},
};

#define NLPRESET (sizeof llama_presets / sizeof llama_presets[0])

void
models_llama_init(models_llama *c)
{
    memset(c, 0, sizeof *c);
    c->layers = 2;
    c->hidden = 256;
    c->heads = 8;
    c->kv_heads = 2;
    c->ffn = 688;
    c->seq = 128;
    c->vocab = 32000;
    c->batch = 1;
    c->dtype = IR_F32;
    c->norm_eps = 1e-5;
    c->top_k = 2;
    c->moe_every = 1;
    c->imbalance = 1.0;
    models_train_init(&c->train);
}

const char *
models_llama_preset_name(uint32_t i)
{
    return i < NLPRESET ? llama_presets[i].name : NULL;
}

int
models_llama_preset(const char *name, models_llama *c, di_error *err)
{
    char known[256];
    size_t len = 0;
    for (size_t i = 0; i < NLPRESET; i++) {
        const struct llama_preset *p = &llama_presets[i];
        if (strcmp(p->name, name) == 0) {
            c->layers = p->layers;
            c->hidden = p->hidden;
            c->heads = p->heads;
            c->kv_heads = p->kv_heads;
            c->ffn = p->ffn;
            c->vocab = p->vocab;
            c->seq = p->seq;
            c->experts = p->experts;
            c->top_k = p->experts ? p->top_k : 2;
            c->moe_ffn = p->moe_ffn;
            c->shared_experts = p->shared;
            c->first_dense = p->first_dense;
            c->moe_every = 1;
            c->q_lora = c->kv_lora = c->qk_nope = c->rope_dim = c->v_head = 0;
            if (strcmp(p->name, "deepseek-v3") == 0) {
                /* DeepSeek-V3 (DeepSeek-AI 2024): multi-head latent attention. */
                c->q_lora = 1536;
                c->kv_lora = 512;
                c->qk_nope = 128;
                c->rope_dim = 64;
                c->v_head = 128;
            }
            return 0;
        }
        if (len < sizeof known)
            len += (size_t)snprintf(known + len, sizeof known - len, "%s%s", i ? ", " : "",
                                    p->name);
    }
    return di_error_set(err, DI_ENOTFOUND, "unknown Llama preset '%s' (known: %s)", name, known);
}

int
models_llama_is_moe(const models_llama *c, uint32_t l)
{
    return c->experts > 0 && l >= c->first_dense &&
           (l - c->first_dense) % (c->moe_every ? c->moe_every : 1) == 0;
}

int64_t
models_llama_capacity(const models_llama *c)
{
    double f = c->capacity_factor > 0 ? c->capacity_factor : c->imbalance, cap;
    if (c->experts <= 0)
        return 0;
    cap = ceil((double)c->seq * (double)c->top_k / (double)c->experts * f - 1e-9);
    if (cap < 1)
        cap = 1;
    return cap >= (double)c->seq ? c->seq : (int64_t)cap;
}

/* Parameters of the model; active: an MoE layer counts only the experts a token uses. */
static uint64_t
llama_params(const models_llama *c, int active)
{
    uint64_t h = (uint64_t)c->hidden, kv = (uint64_t)c->kv_heads;
    uint64_t d = c->heads ? h / (uint64_t)c->heads : 0, f = (uint64_t)c->ffn;
    uint64_t attn = 2 * h + h * (h + 2 * kv * d) + h * h, n = 2 * (uint64_t)c->vocab * h + h;
    if (c->kv_lora > 0) {
        uint64_t H = (uint64_t)c->heads, dqk = (uint64_t)(c->qk_nope + c->rope_dim);
        uint64_t ql = (uint64_t)c->q_lora, kl = (uint64_t)c->kv_lora, dv = (uint64_t)c->v_head;
        attn = 2 * h + (ql ? h * ql + ql + ql * H * dqk : h * H * dqk) +
               h * (kl + (uint64_t)c->rope_dim) + kl + kl * H * ((uint64_t)c->qk_nope + dv) +
               H * dv * h;
    }
    for (uint32_t l = 0; l < c->layers; l++) {
        n += attn;
        if (models_llama_is_moe(c, l)) {
            uint64_t e = (uint64_t)(active ? c->top_k : c->experts);
            n += h * (uint64_t)c->experts +
                 (e + (uint64_t)c->shared_experts) * 3 * h * (uint64_t)models_llama_moe_ffn(c);
        } else {
            n += 3 * h * f;
        }
    }
    return n;
}

uint64_t
models_llama_parameters(const models_llama *c)
{
    return llama_params(c, 0);
}

int64_t
models_llama_moe_ffn(const models_llama *c)
{
    return c->moe_ffn ? c->moe_ffn : c->ffn;
}

uint64_t
models_llama_active_parameters(const models_llama *c)
{
    return llama_params(c, 1);
}

typedef struct llama_gen {
    models_builder *b;
    const models_llama *c;
    int64_t d;
    int64_t dqk; /* the query and key head dimension (d, or nope + rope with latent attention) */
    ir_id idx;
    ir_dtype dt;
} llama_gen;

/*
 * RMSNorm over the last dimension, with scale g (sequence-parallel): one
 * RMSNormalization with its inverse root mean square as a second result, which
 * the backward reads, as the fused kernels of Apex and Transformer Engine keep
 * theirs (docs/models.md).
 */
static ir_id
rmsnorm(llama_gen *g, ir_id x, ir_id scale, const char *name)
{
    models_builder *b = g->b;
    ir_id in[2] = {x, scale};
    ir_id op = models_begin(b, IR_OP_RMSNORM, 2, in, 2, name);
    if (op) {
        ir_op_set_int(b->m, op, "axis", -1);
        ir_op_set_float(b->m, op, "epsilon", g->c->norm_eps);
        models_norm_stash(b, op, g->dt);
    }
    b->seq = 1;
    return models_end(b, op);
}

/*
 * [b, s, n*hd] -> [b, n, s, hd] (n inferred: it is what tensor parallelism
 * splits). Keys and values (kv) mark the Transpose dist.tp "kv": context
 * parallelism all-gathers them there, before the grouped-query repeat.
 */
static ir_id
to_heads_d(llama_gen *g, ir_id x, int kv, int64_t hd, const char *name)
{
    int64_t shape[4] = {0, 0, -1, hd}, perm[4] = {0, 2, 1, 3};
    x = models_reshape(g->b, x, 4, shape, name);
    if (kv)
        g->b->tp = "kv";
    x = models_transpose(g->b, x, 4, perm, name);
    g->b->tp = "heads";
    return x;
}

static ir_id
to_heads(llama_gen *g, ir_id x, int kv, const char *name)
{
    return to_heads_d(g, x, kv, g->d, name);
}

/* Split of the last dimension of x into parts of sizes a and b. */
static void
split_last(models_builder *b, ir_id x, int64_t sa, int64_t sb, const char *name, ir_id *xa,
           ir_id *xb)
{
    ir_id op = models_begin(b, IR_OP_SPLIT, 1, &x, 2, name);
    if (op) {
        ir_op_set_int(b->m, op, "axis", -1);
        ir_op_set_ints(b->m, op, "split", 2, (int64_t[]){sa, sb});
    }
    *xa = models_end(b, op);
    *xb = op ? *xa + 1 : 0;
}

/*
 * Multi-head latent attention's q [b, H, s, nope + rope], k (the same) and
 * v [b, H, s, v_head] (models.h). The latent projections are replicated
 * across tensor ranks (dist.tp "none"), the up-projections split by heads.
 */
static void
mla_qkv(llama_gen *g, ir_id a, const ir_id *w, const char *p, ir_id *q, ir_id *k, ir_id *v)
{
    models_builder *b = g->b;
    const models_llama *c = g->c;
    int64_t dqk = c->qk_nope + c->rope_dim, rshape[4] = {0, 0, 1, c->rope_dim};
    int64_t perm[4] = {0, 2, 1, 3}, oshape[3] = {c->heads, 1, 1};
    char name[96];
    ir_id x, lat, kr, kn, ones, op;
    if (c->q_lora > 0) {
        b->tp = "none";
        snprintf(name, sizeof name, "%s.q_a", p);
        x = models_op2(b, IR_OP_MATMUL, a, w[L_QA], name);
        x = rmsnorm(g, x, w[L_QNORM], name);
    } else {
        x = a;
    }
    b->tp = "column";
    snprintf(name, sizeof name, "%s.q", p);
    x = models_op2(b, IR_OP_MATMUL, x, w[L_Q], name);
    b->tp = "heads";
    snprintf(name, sizeof name, "%s.q.heads", p);
    *q = to_heads_d(g, x, 0, dqk, name);
    b->tp = "none";
    snprintf(name, sizeof name, "%s.kv_a", p);
    x = models_op2(b, IR_OP_MATMUL, a, w[L_KVA], name);
    split_last(b, x, c->kv_lora, c->rope_dim, name, &lat, &kr);
    lat = rmsnorm(g, lat, w[L_KVNORM], name);
    b->tp = "column";
    snprintf(name, sizeof name, "%s.kv", p);
    x = models_op2(b, IR_OP_MATMUL, lat, w[L_KVB], name);
    b->tp = "heads";
    snprintf(name, sizeof name, "%s.kv.heads", p);
    x = to_heads_d(g, x, 1, c->qk_nope + c->v_head, name);
    split_last(b, x, c->qk_nope, c->v_head, name, &kn, v);
    /* The rotary key part, one per token, shared by every head: [b, 1, s, rope] broadcast. */
    snprintf(name, sizeof name, "%s.k_rope", p);
    kr = models_reshape(b, kr, 4, rshape, name);
    b->tp = "kv";
    kr = models_transpose(b, kr, 4, perm, name);
    b->tp = "heads";
    ones = models_vector_const(b, g->dt, c->heads, models_one, name);
    ones = models_reshape(b, ones, 3, oshape, name);
    kr = models_op2(b, IR_OP_MUL, kr, ones, name);
    snprintf(name, sizeof name, "%s.k", p);
    op = models_begin(b, IR_OP_CONCAT, 2, (ir_id[]){kn, kr}, 1, name);
    if (op)
        ir_op_set_int(b->m, op, "axis", -1);
    *k = models_end(b, op);
}

/*
 * K or V [b, KV, s, d] repeated to [b, H, s, d]: head i uses group i / (H / KV).
 * One broadcasting Mul by ones [H/KV, 1, 1] (a copy, as repeat_interleave
 * makes one), so the op count does not grow with the group size.
 */
static ir_id
repeat_kv(llama_gen *g, ir_id x, const char *name)
{
    models_builder *b = g->b;
    int64_t rep = g->c->heads / g->c->kv_heads, shape[4] = {0, -1, g->c->seq, g->d};
    int64_t oshape[3] = {rep, 1, 1};
    ir_id op, ones;
    if (rep == 1)
        return x;
    op = models_begin(b, IR_OP_UNSQUEEZE, 1, &x, 1, name);
    if (op)
        ir_op_set_ints(b->m, op, "axes", 1, (int64_t[]){2});
    x = models_end(b, op);
    ones = models_vector_const(b, g->dt, rep, models_one, name);
    ones = models_reshape(b, ones, 3, oshape, name);
    x = models_op2(b, IR_OP_MUL, x, ones, name);
    return models_reshape(b, x, 4, shape, name);
}

/* SwiGLU: (Silu(a @ w[0]) * (a @ w[1])) @ w[2]; column, column, row. Leaves b->tp at "row". */
static ir_id
swiglu(llama_gen *g, ir_id a, const ir_id *w, const char *prefix)
{
    models_builder *b = g->b;
    char name[96];
    ir_id gate, up, r;
    b->tp = "column";
    snprintf(name, sizeof name, "%s.gate", prefix);
    gate = models_op2(b, IR_OP_MATMUL, a, w[0], name);
    snprintf(name, sizeof name, "%s.up", prefix);
    up = models_op2(b, IR_OP_MATMUL, a, w[1], name);
    snprintf(name, sizeof name, "%s.silu", prefix);
    r = models_op(b, IR_OP_SWISH, 1, &gate, name); /* SiLU: one op, as torch.nn.SiLU */
    r = models_op2(b, IR_OP_MUL, r, up, name);
    b->tp = "row";
    snprintf(name, sizeof name, "%s.down", prefix);
    return models_op2(b, IR_OP_MATMUL, r, w[2], name);
}

/* An op with one input and one int-list attribute. */
static ir_id
op_ints(models_builder *b, int kind, ir_id x, const char *key, int64_t v, const char *name)
{
    ir_id op = models_begin(b, kind, 1, &x, 1, name);
    if (op)
        ir_op_set_ints(b->m, op, key, 1, &v);
    return models_end(b, op);
}

/*
 * The MoE MLP of a layer (models.h): router, top-k gates, slots, dispatch
 * to [b, E, C, h], the experts' SwiGLU as batched MatMuls over [E, h, f]
 * weights (what expert parallelism splits), combine, the gate-weighted sum
 * of the k choices, plus the shared experts.
 */
static ir_id
moe(llama_gen *g, ir_id a, const ir_id *w, const char *p)
{
    models_builder *b = g->b;
    const models_llama *c = g->c;
    int64_t cap = models_llama_capacity(c), kshape[2] = {c->top_k, 1};
    char name[96];
    ir_id probs, op, gates, idx, slots, xk, ones, y, sum;
    b->tp = "none";
    snprintf(name, sizeof name, "%s.router", p);
    probs = models_op2(b, IR_OP_MATMUL, a, w[L_ROUTER], name);
    op = models_begin(b, IR_OP_SOFTMAX, 1, &probs, 1, name);
    if (op)
        ir_op_set_int(b->m, op, "axis", -1);
    probs = models_end(b, op);
    snprintf(name, sizeof name, "%s.topk", p);
    op = models_begin(b, IR_OP_TOPK, 1, &probs, 2, name);
    if (op)
        ir_op_set_int(b->m, op, "k", c->top_k);
    gates = models_end(b, op);
    idx = op ? gates + 1 : 0;
    snprintf(name, sizeof name, "%s.gates", p);
    op = models_begin(b, IR_OP_REDUCESUM, 1, &gates, 1, name);
    if (op) {
        ir_op_set_ints(b->m, op, "axes", 1, (int64_t[]){-1});
        ir_op_set_int(b->m, op, "keepdims", 1);
    }
    sum = models_end(b, op);
    gates = models_op2(b, IR_OP_DIV, gates, sum, name);
    snprintf(name, sizeof name, "%s.slots", p);
    op = models_begin(b, IR_OP_MOESLOTS, 1, &idx, 1, name);
    if (op) {
        ir_op_set_int(b->m, op, "experts", c->experts);
        ir_op_set_int(b->m, op, "capacity", cap);
    }
    slots = models_end(b, op);
    snprintf(name, sizeof name, "%s.dispatch", p);
    xk = op_ints(b, IR_OP_UNSQUEEZE, a, "axes", 2, name);
    ones = models_vector_const(b, g->dt, c->top_k, models_one, name);
    ones = models_reshape(b, ones, 2, kshape, name);
    xk = models_op2(b, IR_OP_MUL, xk, ones, name);
    {
        ir_id in[2] = {xk, slots};
        op = models_begin(b, IR_OP_MOEDISPATCH, 2, in, 1, name);
    }
    if (op) {
        ir_op_set_int(b->m, op, "experts", c->experts);
        ir_op_set_int(b->m, op, "capacity", cap);
    }
    xk = models_end(b, op);
    /*
     * The dispatched tokens as the experts hold them: under expert
     * parallelism (dist.tp "expert") the all_to_all happens here, so the
     * backward pass reuses what arrived (its weight gradients read it).
     */
    b->tp = "expert";
    snprintf(name, sizeof name, "%s.experts.in", p);
    xk = models_op(b, IR_OP_IDENTITY, 1, &xk, name);
    snprintf(name, sizeof name, "%s.experts", p);
    y = swiglu(g, xk, w + L_E1, name);
    b->tp = "none";
    snprintf(name, sizeof name, "%s.combine", p);
    y = models_op2(b, IR_OP_MOECOMBINE, y, slots, name);
    y = models_op2(b, IR_OP_MUL, y, op_ints(b, IR_OP_UNSQUEEZE, gates, "axes", -1, name), name);
    op = models_begin(b, IR_OP_REDUCESUM, 1, &y, 1, name);
    if (op) {
        ir_op_set_ints(b->m, op, "axes", 1, (int64_t[]){2});
        ir_op_set_int(b->m, op, "keepdims", 0);
    }
    y = models_end(b, op);
    if (w[L_S1]) {
        ir_id sh;
        snprintf(name, sizeof name, "%s.shared", p);
        sh = swiglu(g, a, w + L_S1, name);
        b->tp = "none";
        y = models_op2(b, IR_OP_ADD, y, sh, name);
    }
    return y;
}

static ir_id
lblock(llama_gen *g, uint32_t l, ir_id x, const ir_id *w)
{
    models_builder *b = g->b;
    char p[32], name[96];
    int64_t perm[4] = {0, 2, 1, 3}, merged[3] = {0, 0, -1};
    ir_id a, q, k, v, s, ctx, r;
    snprintf(p, sizeof p, "l%u", l);
    b->layer = l;
    b->part = "block";

    /* Attention. */
    b->tp = "none";
    snprintf(name, sizeof name, "%s.attn_norm", p);
    a = rmsnorm(g, x, w[L_NORM1], name);
    if (g->c->kv_lora > 0) {
        mla_qkv(g, a, w, p, &q, &k, &v);
    } else {
        b->tp = "column";
        snprintf(name, sizeof name, "%s.q", p);
        q = models_op2(b, IR_OP_MATMUL, a, w[L_Q], name);
        snprintf(name, sizeof name, "%s.k", p);
        k = models_op2(b, IR_OP_MATMUL, a, w[L_K], name);
        snprintf(name, sizeof name, "%s.v", p);
        v = models_op2(b, IR_OP_MATMUL, a, w[L_V], name);
        b->tp = "heads";
        snprintf(name, sizeof name, "%s.q.heads", p);
        q = to_heads(g, q, 0, name);
        /* The fused kernel takes key/value heads as they are (grouped-query attention). */
        snprintf(name, sizeof name, "%s.k.heads", p);
        k = to_heads(g, k, 1, name);
        if (!g->c->fused_attention)
            k = repeat_kv(g, k, name);
        snprintf(name, sizeof name, "%s.v.heads", p);
        v = to_heads(g, v, 1, name);
        if (!g->c->fused_attention)
            v = repeat_kv(g, v, name);
    }
    if (g->c->fused_attention) {
        snprintf(name, sizeof name, "%s.ctx", p);
        ctx = models_flash_attention(b, q, k, v, 1.0 / sqrt((double)g->dqk), name);
    } else {
        s = models_attention_probs(b, q, k, 1.0 / sqrt((double)g->dqk), g->idx, g->c->seq,
                                   g->dt, p);
        snprintf(name, sizeof name, "%s.ctx", p);
        ctx = models_op2(b, IR_OP_MATMUL, s, v, name);
    }
    ctx = models_transpose(b, ctx, 4, perm, name);
    ctx = models_reshape(b, ctx, 3, merged, name);
    b->tp = "row";
    snprintf(name, sizeof name, "%s.attn", p);
    r = models_op2(b, IR_OP_MATMUL, ctx, w[L_O], name);
    b->tp = "none";
    snprintf(name, sizeof name, "%s.res1", p);
    b->seq = 1;
    x = models_op2(b, IR_OP_ADD, x, r, name);

    snprintf(name, sizeof name, "%s.mlp_norm", p);
    a = rmsnorm(g, x, w[L_NORM2], name);
    if (w[L_ROUTER]) {
        r = moe(g, a, w, p);
    } else {
        snprintf(name, sizeof name, "%s.mlp", p);
        r = swiglu(g, a, w + L_W1, name);
    }
    b->tp = "none";
    snprintf(name, sizeof name, "%s.res2", p);
    b->seq = 1;
    return models_op2(b, IR_OP_ADD, x, r, name);
}

static int
check_llama(const models_llama *c, di_error *err)
{
    uint64_t lim = (uint64_t)1 << 62, bs;
    const int64_t *v[] = {&c->hidden, &c->heads, &c->kv_heads, &c->ffn,
                          &c->seq,    &c->vocab, &c->batch};
    const char *names[] = {"--hidden", "--heads", "--kv-heads", "--ffn",
                           "--seq",    "--vocab", "--batch"};
    int rc;
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        if ((rc = models_check_size(names[i], *v[i], err)) != 0)
            return rc;
    if ((rc = models_check_layers(c->layers, err)) != 0)
        return rc;
    if (c->hidden % c->heads != 0)
        return di_error_set(err, DI_EINVAL, "model: --hidden %lld is not divisible by --heads %lld",
                            (long long)c->hidden, (long long)c->heads);
    if (c->heads % c->kv_heads != 0)
        return di_error_set(err, DI_EINVAL,
                            "model: --heads %lld is not a multiple of --kv-heads %lld",
                            (long long)c->heads, (long long)c->kv_heads);
    if (c->kv_lora < 0 || c->q_lora < 0 || c->kv_lora > (1 << 20) || c->q_lora > (1 << 20))
        return di_error_set(err, DI_EINVAL, "model: --kv-lora and --q-lora must be 0 to 2^20");
    if (c->kv_lora > 0 &&
        (c->qk_nope < 1 || c->rope_dim < 1 || c->v_head < 1 || c->qk_nope > 4096 ||
         c->rope_dim > 4096 || c->v_head > 4096))
        return di_error_set(err, DI_EINVAL,
                            "model: latent attention (--kv-lora) needs --qk-nope-dim, --rope-dim "
                            "and --v-head-dim from 1 to 4096");
    if (c->experts < 0 || c->experts > 65536)
        return di_error_set(err, DI_EINVAL, "model: --experts must be 0 (dense) to 65536");
    if (c->experts > 0) {
        if (c->top_k < 1 || c->top_k > c->experts)
            return di_error_set(err, DI_EINVAL, "model: --top-k %lld must be 1 to --experts %lld",
                                (long long)c->top_k, (long long)c->experts);
        if ((rc = models_check_size("--moe-ffn", models_llama_moe_ffn(c), err)) != 0)
            return rc;
        if (c->shared_experts < 0 || c->shared_experts > 64)
            return di_error_set(err, DI_EINVAL, "model: --shared-experts must be 0 to 64");
        if (c->moe_every < 1 || c->moe_every > MODELS_MAX_LAYERS)
            return di_error_set(err, DI_EINVAL, "model: --moe-every must be at least 1");
        if (!(c->imbalance >= 1.0 && c->imbalance <= 1e6) ||
            !(c->capacity_factor >= 0.0 && c->capacity_factor <= 1e6))
            return di_error_set(err, DI_EINVAL,
                                "model: --imbalance must be at least 1 and --capacity-factor 0 "
                                "(none) or positive");
        int64_t wide = c->hidden > models_llama_moe_ffn(c) ? c->hidden : models_llama_moe_ffn(c);
        if ((uint64_t)c->batch * (uint64_t)c->experts * (uint64_t)c->seq >
            ((uint64_t)1 << 62) / (uint64_t)wide)
            return di_error_set(err, DI_EINVAL, "model: batch x experts x seq x hidden overflows");
    }
    if (c->heads / c->kv_heads > 256)
        return di_error_set(err, DI_EINVAL, "model: more than 256 query heads per key/value head");
    if (!ir_dtype_is_float(c->dtype))
        return di_error_set(err, DI_EINVAL, "model: --dtype must be floating-point");
    if (c->seq > (1 << 24))
        return di_error_set(err, DI_EINVAL, "model: --seq must be at most 2^24");
    if (!(c->norm_eps > 0))
        return di_error_set(err, DI_EINVAL, "model: the norm epsilon must be positive");
    bs = (uint64_t)c->batch * (uint64_t)c->seq;
    uint64_t biggest = (uint64_t)c->vocab;
    if ((uint64_t)c->heads * (uint64_t)c->seq > biggest)
        biggest = (uint64_t)c->heads * (uint64_t)c->seq;
    if ((uint64_t)c->ffn > biggest)
        biggest = (uint64_t)c->ffn;
    if ((uint64_t)c->hidden > biggest)
        biggest = (uint64_t)c->hidden;
    if (bs > lim / biggest || (uint64_t)c->vocab * (uint64_t)c->hidden > lim ||
        (uint64_t)c->ffn * (uint64_t)c->hidden > lim || (uint64_t)c->seq * (uint64_t)c->seq > lim)
        return di_error_set(err, DI_EINVAL,
                            "model: batch x seq x max(vocab, heads x seq, ffn) overflows");
    return 0;
}

int
models_llama_build(const models_llama *c, ir_module **out, di_error *err)
{
    models_builder b;
    llama_gen g;
    ir_module *m;
    int64_t h = c->hidden, dims[2], kvd;
    ir_id tokens, labels, embed, head, norm_f, *w, x;
    char name[64];
    int rc;
    *out = NULL;
    if ((rc = check_llama(c, err)) != 0)
        return rc;
    m = ir_module_new();
    models_builder_init(&b, m, "llama", err);
    b.annotate = c->train.annotate;
    memset(&g, 0, sizeof g);
    g.b = &b;
    g.c = c;
    g.d = h / c->heads;
    g.dqk = c->kv_lora > 0 ? c->qk_nope + c->rope_dim : g.d;
    g.dt = c->dtype;
    kvd = c->kv_heads * g.d;

    dims[0] = c->batch;
    dims[1] = c->seq;
    tokens = models_arg(&b, "tokens", IR_I64, 2, dims);
    labels = models_arg(&b, "labels", IR_I64, 2, dims);
    dims[0] = c->vocab;
    dims[1] = h;
    embed = models_arg(&b, "embed.weight", c->dtype, 2, dims);
    w = di_xcalloc((size_t)c->layers * L_PER_LAYER, sizeof *w);
    for (uint32_t l = 0; l < c->layers; l++) {
        int is_moe = models_llama_is_moe(c, l);
        int64_t sf = c->shared_experts * models_llama_moe_ffn(c);
        for (uint32_t j = 0; j < L_PER_LAYER; j++) {
            int64_t wd[3] = {h, h, 0};
            uint32_t rank = 2;
            if ((j >= L_W1 && j <= L_W2 && is_moe) || (j >= L_ROUTER && j <= L_S2 && !is_moe) ||
                (j >= L_S1 && j <= L_S2 && sf == 0))
                continue;
            if (j >= L_QA && (c->kv_lora == 0 || (j <= L_QNORM && c->q_lora == 0)))
                continue;
            if (c->kv_lora > 0 && (j == L_K || j == L_V))
                continue;
            if (j == L_NORM1 || j == L_NORM2)
                rank = 1;
            else if (j == L_K || j == L_V)
                wd[1] = kvd;
            else if (j == L_W1 || j == L_W3)
                wd[1] = c->ffn;
            else if (j == L_W2)
                wd[0] = c->ffn;
            else if (j == L_ROUTER)
                wd[1] = c->experts;
            else if (j == L_S1 || j == L_S3)
                wd[1] = sf;
            else if (j == L_S2)
                wd[0] = sf;
            else if (j == L_E1 || j == L_E3)
                rank = 3, wd[0] = c->experts, wd[1] = h, wd[2] = models_llama_moe_ffn(c);
            else if (j == L_E2)
                rank = 3, wd[0] = c->experts, wd[1] = models_llama_moe_ffn(c), wd[2] = h;
            else if (j == L_QNORM)
                rank = 1, wd[0] = c->q_lora;
            else if (j == L_KVNORM)
                rank = 1, wd[0] = c->kv_lora;
            else if (j == L_QA)
                wd[1] = c->q_lora;
            else if (j == L_KVA)
                wd[1] = c->kv_lora + c->rope_dim;
            else if (j == L_KVB)
                wd[0] = c->kv_lora, wd[1] = c->heads * (c->qk_nope + c->v_head);
            if (c->kv_lora > 0 && j == L_Q)
                wd[0] = c->q_lora ? c->q_lora : h, wd[1] = c->heads * (c->qk_nope + c->rope_dim);
            if (c->kv_lora > 0 && j == L_O)
                wd[0] = c->heads * c->v_head;
            snprintf(name, sizeof name, "l%u.%s", l, lweight_names[j]);
            w[(size_t)l * L_PER_LAYER + j] = models_arg(&b, name, c->dtype, rank, wd);
        }
    }
    norm_f = models_arg(&b, "norm_f.scale", c->dtype, 1, &h);
    dims[0] = h;
    dims[1] = c->vocab;
    head = models_arg(&b, "head.weight", c->dtype, 2, dims);

    b.layer = -1;
    b.part = "embed";
    b.tp = "vocab";
    x = models_op2(&b, IR_OP_GATHER, embed, tokens, "embed.tok");
    b.tp = "none";
    /*
     * The embedding's output as the layers read it. A vocabulary-parallel lookup is a
     * partial sum; under sequence parallelism it is reduce-scattered here, so that the
     * backward reads (and the step keeps) its sequence-split form, as Megatron-LM
     * scatters the embedding to the sequence-parallel region; otherwise a view.
     */
    b.seq = 1;
    x = models_op(&b, IR_OP_IDENTITY, 1, &x, "embed.out");
    if (!c->fused_attention)
        g.idx = models_vector_const(&b, IR_F32, c->seq, models_index, "positions");

    for (uint32_t l = 0; l < c->layers && b.rc == 0; l++)
        x = lblock(&g, l, x, w + (size_t)l * L_PER_LAYER);
    di_free(w);

    b.layer = -1;
    b.part = "head";
    b.tp = "none";
    x = rmsnorm(&g, x, norm_f, "norm_f");
    dims[0] = -1;
    dims[1] = h;
    x = models_reshape(&b, x, 2, dims, "norm_f.flat");
    b.tp = "vocab";
    x = models_op2(&b, IR_OP_MATMUL, x, head, "logits");
    return models_loss_step(&b, x, labels, &c->train, out);
}
