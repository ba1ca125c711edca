/*
 * gpt.c: the GPT generator (models.h): a GPT-2/3-style decoder-only
 * transformer in the Megatron-LM layout, as one training step.
 *
 *   x = Gather(wte, tokens) + wpe                       [b, s, h]   embed
 *   per layer:
 *     a = LayerNorm(x)
 *     qkv = a @ wqkv + bqkv                             [b, s, 3h]  column
 *     heads: Reshape [0, 0, -1, 3d], Transpose -> [b, a, s, 3d], Split -> q, k, v
 *     p = Softmax(q @ k^T * 1/sqrt(d) + mask)           [b, a, s, s] heads
 *     ctx = Dropout(p) @ v, merged back to [b, s, h]
 *     x = x + Dropout(ctx @ wo + bo)                    row
 *     x = x + Dropout(Gelu(LayerNorm(x) @ w1 + b1) @ w2 + b2)   column, row
 *   logits = LayerNorm(x) @ wte^T  (Gemm transB, rows b*s)      head
 *   loss = SoftmaxCrossEntropyLoss(logits, labels)
 *
 * The per-head reshapes infer the head count (-1) and copy the batch (0), so
 * neither tensor nor data parallelism has to rewrite them. The causal mask
 * is computed in every layer from one index vector (j - i clipped at 0 and
 * scaled by -1e4; in f32, then cast), so a block depends only on its input
 * and constants, and no [s, s] tensor crosses a pipeline stage.
 */
#include "models/models.h"
#include "models/models_int.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Weights of one block, in argument order. */
enum {
    W_LN1_SCALE,
    W_LN1_BIAS,
    W_QKV,
    W_QKV_B,
    W_O,
    W_O_B,
    W_LN2_SCALE,
    W_LN2_BIAS,
    W_1,
    W_1_B,
    W_2,
    W_2_B,
    W_PER_LAYER
};

static const char *const weight_names[W_PER_LAYER] = {
    "ln1.scale",  "ln1.bias",  "attn.wqkv", "attn.bqkv", "attn.wo", "attn.bo",
    "ln2.scale",  "ln2.bias",  "mlp.w1",    "mlp.b1",    "mlp.w2",  "mlp.b2",
};

typedef struct gpt_gen {
    models_builder *b;
    const models_gpt *c;
    int64_t d;   /* head size h / a */
    ir_id idx;   /* f32[s] 0, 1, ..., s-1: the mask's index vector */
    ir_dtype dt;
    uint32_t ndropout;
} gpt_gen;

static ir_id
layernorm(gpt_gen *g, ir_id x, ir_id scale, ir_id bias, const char *name)
{
    ir_id in[3] = {x, scale, bias};
    ir_id op = models_begin(g->b, IR_OP_LAYERNORM, bias ? 3 : 2, in, 3, name);
    if (op) {
        ir_op_set_int(g->b->m, op, "axis", -1);
        ir_op_set_float(g->b->m, op, "epsilon", 1e-5);
        models_norm_stash(g->b, op, g->dt);
    }
    g->b->seq = 1;
    return models_end(g->b, op);
}

/* Dropout with its mask (for the backward pass), or x itself when the ratio is 0. */
static ir_id
dropout(gpt_gen *g, ir_id x, const char *name, int seq)
{
    ir_id op;
    if (g->c->dropout <= 0)
        return x;
    op = models_begin(g->b, IR_OP_DROPOUT, 1, &x, 2, name);
    if (op) {
        ir_op_set_float(g->b->m, op, "ratio", g->c->dropout);
        ir_op_set_int(g->b->m, op, "seed", (int64_t)++g->ndropout);
    }
    if (seq)
        g->b->seq = 1;
    return models_end(g->b, op);
}

/* One transformer block; returns the new residual stream. */
static ir_id
block(gpt_gen *g, uint32_t l, ir_id x, const ir_id *w)
{
    models_builder *b = g->b;
    ir_module *m = b->m;
    char p[32], name[96];
    int64_t heads_shape[4] = {0, 0, -1, 3 * g->d}, perm[4] = {0, 2, 1, 3};
    int64_t merged[3] = {0, 0, -1};
    ir_id a, qkv, op, q, k, v, s, ctx, r;
    snprintf(p, sizeof p, "l%u", l);
    b->layer = l;
    b->part = "block";

    /* Attention. */
    b->tp = "none";
    snprintf(name, sizeof name, "%s.ln1", p);
    a = layernorm(g, x, w[W_LN1_SCALE], w[W_LN1_BIAS], name);
    b->tp = "column";
    snprintf(name, sizeof name, "%s.qkv", p);
    qkv = models_op2(b, IR_OP_MATMUL, a, w[W_QKV], name);
    qkv = models_op2(b, IR_OP_ADD, qkv, w[W_QKV_B], name);
    b->tp = "heads";
    snprintf(name, sizeof name, "%s.heads", p);
    qkv = models_reshape(b, qkv, 4, heads_shape, name);
    qkv = models_transpose(b, qkv, 4, perm, name);
    op = models_begin(b, IR_OP_SPLIT, 1, &qkv, 3, name);
    if (op) {
        ir_op_set_int(m, op, "axis", 3);
        ir_op_set_ints(m, op, "split", 3, (int64_t[]){g->d, g->d, g->d});
    }
    q = models_end(b, op);
    if (q == 0)
        return 0;
    k = q + 1;
    v = q + 2;
    snprintf(name, sizeof name, "%s.q", p);
    m->values[q].name = ir_str(m, name);
    snprintf(name, sizeof name, "%s.k", p);
    m->values[k].name = ir_str(m, name);
    snprintf(name, sizeof name, "%s.v", p);
    m->values[v].name = ir_str(m, name);
    if (g->c->fused_attention) {
        /* As FlashAttention in Megatron-LM (its dropout of the probabilities is inside). */
        snprintf(name, sizeof name, "%s.ctx", p);
        ctx = models_flash_attention(b, q, k, v, 1.0 / sqrt((double)g->d), name);
    } else {
        s = models_attention_probs(b, q, k, 1.0 / sqrt((double)g->d), g->idx, g->c->seq, g->dt,
                                   p);
        snprintf(name, sizeof name, "%s.probs", p);
        s = dropout(g, s, name, 0);
        snprintf(name, sizeof name, "%s.ctx", p);
        ctx = models_op2(b, IR_OP_MATMUL, s, v, name);
    }
    ctx = models_transpose(b, ctx, 4, perm, name);
    ctx = models_reshape(b, ctx, 3, merged, name);
    b->tp = "row";
    snprintf(name, sizeof name, "%s.attn", p);
    r = models_op2(b, IR_OP_MATMUL, ctx, w[W_O], name);
    b->tp = "none";
    b->seq = 1;
    r = models_op2(b, IR_OP_ADD, r, w[W_O_B], name);
    r = dropout(g, r, name, 1);
    snprintf(name, sizeof name, "%s.res1", p);
    b->seq = 1;
    x = models_op2(b, IR_OP_ADD, x, r, name);

    /* MLP. */
    snprintf(name, sizeof name, "%s.ln2", p);
    a = layernorm(g, x, w[W_LN2_SCALE], w[W_LN2_BIAS], name);
    b->tp = "column";
    snprintf(name, sizeof name, "%s.fc1", p);
    r = models_op2(b, IR_OP_MATMUL, a, w[W_1], name);
    r = models_op2(b, IR_OP_ADD, r, w[W_1_B], name);
    snprintf(name, sizeof name, "%s.gelu", p);
    r = models_op(b, IR_OP_GELU, 1, &r, name);
    b->tp = "row";
    snprintf(name, sizeof name, "%s.fc2", p);
    r = models_op2(b, IR_OP_MATMUL, r, w[W_2], name);
    b->tp = "none";
    b->seq = 1;
    r = models_op2(b, IR_OP_ADD, r, w[W_2_B], name);
    r = dropout(g, r, name, 1);
    snprintf(name, sizeof name, "%s.res2", p);
    b->seq = 1;
    return models_op2(b, IR_OP_ADD, x, r, name);
}

/* Every element count the model forms stays below 2^62. */
static int
check_sizes(const models_gpt *c, di_error *err)
{
    uint64_t lim = (uint64_t)1 << 62, bs, biggest;
    int rc;
    if ((rc = models_check_size("--hidden", c->hidden, err)) != 0 ||
        (rc = models_check_size("--heads", c->heads, err)) != 0 ||
        (rc = models_check_size("--seq", c->seq, err)) != 0 ||
        (rc = models_check_size("--vocab", c->vocab, err)) != 0 ||
        (rc = models_check_size("--batch", c->batch, err)) != 0)
        return rc;
    if ((rc = models_check_layers(c->layers, err)) != 0)
        return rc;
    if (c->hidden % c->heads != 0)
        return di_error_set(err, DI_EINVAL,
                            "model: --hidden %lld is not divisible by --heads %lld",
                            (long long)c->hidden, (long long)c->heads);
    if (!(c->dropout >= 0 && c->dropout < 1))
        return di_error_set(err, DI_EINVAL, "model: --dropout must be in [0, 1), got %g",
                            c->dropout);
    if (!ir_dtype_is_float(c->dtype))
        return di_error_set(err, DI_EINVAL, "model: --dtype must be floating-point, got %s",
                            ir_dtype_name(c->dtype));
    if (c->seq > (1 << 24))
        return di_error_set(err, DI_EINVAL, "model: --seq must be at most 2^24 (the mask "
                            "indexes positions in f32)");
    bs = (uint64_t)c->batch * (uint64_t)c->seq;
    biggest = (uint64_t)c->vocab;
    if ((uint64_t)c->heads * (uint64_t)c->seq > biggest)
        biggest = (uint64_t)c->heads * (uint64_t)c->seq;
    if (4 * (uint64_t)c->hidden > biggest)
        biggest = 4 * (uint64_t)c->hidden;
    if (bs > lim / biggest || (uint64_t)c->vocab * (uint64_t)c->hidden > lim ||
        (uint64_t)c->seq * (uint64_t)c->seq > lim)
        return di_error_set(err, DI_EINVAL,
                            "model: batch x seq x max(vocab, heads x seq, 4 hidden) overflows");
    return 0;
}

int
models_gpt_build(const models_gpt *c, ir_module **out, di_error *err)
{
    models_builder b;
    gpt_gen g;
    ir_module *m;
    int64_t h = c->hidden, dims[2];
    ir_id tokens, labels, wte, wpe, *w, x, lnf_scale = 0, lnf_bias = 0, op;
    char name[64];
    int rc;
    *out = NULL;
    if ((rc = check_sizes(c, err)) != 0)
        return rc;
    m = ir_module_new();
    models_builder_init(&b, m, "gpt", err);
    b.annotate = c->train.annotate;
    memset(&g, 0, sizeof g);
    g.b = &b;
    g.c = c;
    g.d = h / c->heads;
    g.dt = c->dtype;

    dims[0] = c->batch;
    dims[1] = c->seq;
    tokens = models_arg(&b, "tokens", IR_I64, 2, dims);
    labels = models_arg(&b, "labels", IR_I64, 2, dims);
    dims[0] = c->vocab;
    dims[1] = h;
    wte = models_arg(&b, "embed.wte", c->dtype, 2, dims);
    dims[0] = c->seq;
    wpe = models_arg(&b, "embed.wpe", c->dtype, 2, dims);
    w = di_xmalloc((size_t)c->layers * W_PER_LAYER * sizeof *w);
    for (uint32_t l = 0; l < c->layers; l++)
        for (uint32_t j = 0; j < W_PER_LAYER; j++) {
            int64_t wd[2];
            uint32_t rank = 1;
            switch (j) {
            case W_QKV:
                wd[0] = h, wd[1] = 3 * h, rank = 2;
                break;
            case W_QKV_B:
                wd[0] = 3 * h;
                break;
            case W_O:
                wd[0] = h, wd[1] = h, rank = 2;
                break;
            case W_1:
                wd[0] = h, wd[1] = 4 * h, rank = 2;
                break;
            case W_1_B:
                wd[0] = 4 * h;
                break;
            case W_2:
                wd[0] = 4 * h, wd[1] = h, rank = 2;
                break;
            default:
                wd[0] = h;
                break;
            }
            snprintf(name, sizeof name, "l%u.%s", l, weight_names[j]);
            w[(size_t)l * W_PER_LAYER + j] = models_arg(&b, name, c->dtype, rank, wd);
        }
    if (c->final_ln_params) {
        lnf_scale = models_arg(&b, "ln_f.scale", c->dtype, 1, &h);
        lnf_bias = models_arg(&b, "ln_f.bias", c->dtype, 1, &h);
    }

    /* Embedding. */
    b.layer = -1;
    b.part = "embed";
    b.tp = "vocab";
    x = models_op2(&b, IR_OP_GATHER, wte, tokens, "embed.tok");
    b.tp = "none";
    b.seq = 1;
    x = models_op2(&b, IR_OP_ADD, x, wpe, "embed.out");
    x = dropout(&g, x, "embed.out", 1);
    if (!c->fused_attention)
        g.idx = models_vector_const(&b, IR_F32, c->seq, models_index, "positions");

    for (uint32_t l = 0; l < c->layers && b.rc == 0; l++)
        x = block(&g, l, x, w + (size_t)l * W_PER_LAYER);
    di_free(w);

    /* Head: final layer norm, logits with the tied embedding, loss. */
    b.layer = -1;
    b.part = "head";
    b.tp = "none";
    if (!c->final_ln_params)
        lnf_scale = models_vector_const(&b, c->dtype, h, models_one, "ln_f.scale");
    x = layernorm(&g, x, lnf_scale, lnf_bias, "ln_f");
    dims[0] = -1;
    dims[1] = h;
    x = models_reshape(&b, x, 2, dims, "ln_f.flat");
    b.tp = "vocab";
    op = models_begin(&b, IR_OP_GEMM, 2, (ir_id[]){x, wte}, 1, "logits");
    if (op)
        ir_op_set_int(m, op, "transB", 1);
    x = models_end(&b, op);
    return models_loss_step(&b, x, labels, &c->train, out);
}
