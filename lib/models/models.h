/*
 * models.h: the built-in model generators (docs/models.md).
 *
 * Each generator produces one full training step as IR in the local view,
 * every tensor on device 0: the forward pass, the loss, the backward pass
 * (lib/xform/autodiff) and the optimizer step. Nothing is allocated per
 * weight element: weights are function arguments with types only, so
 * gpt3-175b is generated in milliseconds.
 *
 * docs/models.md documents the conventions the strategy transforms rely on:
 * argument names and roles ("tokens", "labels", "l3.mlp.w1", ...), batch in
 * dimension 0 of every activation, reshapes that copy or infer dimension 0,
 * and the discardable "dist." attributes on every op: dist.layer (int),
 * dist.part ("embed", "block", "head"), dist.phase ("forward", "backward",
 * "optimizer"), dist.tp ("column", "row", "heads", "vocab", "none") and
 * dist.seq (the sequence dimension, on ops that sequence parallelism splits).
 *
 * The GPT parameter count equals Megatron-LM's formula
 * 12 l h^2 (1 + 13/(12 h) + (V + s)/(12 l h)) exactly: the final layer norm
 * has no learnable scale or bias (elementwise_affine=False) unless
 * final_ln_params is set, which adds 2h.
 */
#ifndef DISTIR_MODELS_H
#define DISTIR_MODELS_H

#include <stdint.h>

#include "ir/ir.h"
#include "xform/autodiff.h"

typedef enum models_act {
    MODELS_ACT_RELU = 0,
    MODELS_ACT_GELU,
} models_act;

typedef enum models_loss {
    MODELS_LOSS_SCE = 0, /* softmax cross-entropy against integer labels */
    MODELS_LOSS_MSE,     /* mean squared error against float targets */
} models_loss;

/* What follows the forward pass; shared by every generator. */
typedef struct models_train {
    int forward_only;      /* 1: forward pass and loss only */
    xform_optim optimizer; /* SGD (default), Adam, or none (the gradients are the results) */
    double lr;             /* learning rate */
    int annotate;          /* 1 (default): add the dist.* attributes */
    int precision;         /* MODELS_PRECISION_*: how f16/bf16 weights train under Adam */
} models_train;

/*
 * Mixed precision as Megatron-LM trains 16-bit models with Adam: f32 master
 * weights and moments, and gradients either accumulated and reduced in f32
 * (GRAD32: 18 bytes per parameter) or accumulated in the model's dtype and
 * cast for the update (GRAD16: 16 bytes). MIXED, the default, is
 * Megatron-LM's choice for the dtype: f32 gradients for bf16, f16 gradients
 * for fp16 (its --accumulate-allreduce-grads-in-fp32 is off unless bf16
 * turns it on). PURE keeps everything in the model's dtype (8 bytes with
 * bf16). f32 models and SGD are unaffected.
 */
enum {
    MODELS_PRECISION_MIXED = 0,
    MODELS_PRECISION_MIXED_GRAD16,
    MODELS_PRECISION_PURE,
    MODELS_PRECISION_MIXED_GRAD32
};

/*
 * MLP: layers Linear layers (MatMul + bias Add), an activation after each
 * but the last: input -> hidden -> ... -> hidden -> classes.
 */
typedef struct models_mlp {
    uint32_t layers;
    int64_t hidden;
    int64_t batch;
    int64_t input;   /* features; 0: hidden */
    int64_t classes; /* outputs; 0: hidden */
    ir_dtype dtype;
    models_act act;
    models_loss loss;
    models_train train;
} models_mlp;

/* GPT-2/3-style decoder-only transformer with a tied embedding. */
typedef struct models_gpt {
    uint32_t layers;
    int64_t hidden;
    int64_t heads;
    int64_t seq;
    int64_t vocab;
    int64_t batch;
    ir_dtype dtype;
    double dropout;      /* ratio of every Dropout; 0: no Dropout ops */
    int final_ln_params; /* 1: the final layer norm has a learnable scale and bias (+2h) */
    /*
     * 1: the attention core (k^T, scores, scale, causal mask, softmax, its
     * dropout, the product with v) is one causal FlashAttention op per layer.
     */
    int fused_attention;
    models_train train;
} models_gpt;

/*
 * Llama family (llama.c): RMSNorm, grouped-query attention (kv_heads key
 * and value heads shared by heads / kv_heads query heads; 1 is multi-query
 * attention), a SwiGLU MLP of ffn units, untied embeddings, no biases.
 */
typedef struct models_llama {
    uint32_t layers;
    int64_t hidden, heads, kv_heads, ffn, seq, vocab, batch;
    ir_dtype dtype;
    double norm_eps;
    /*
     * Mixture of experts (experts > 0): layer l is an MoE layer when
     * l >= first_dense and (l - first_dense) % moe_every == 0; its MLP is a
     * router ([h, experts], softmax, top_k, the k gates renormalized), experts
     * SwiGLU MLPs of moe_ffn units (0: ffn, as Mixtral's experts are the dense
     * MLP's size; models_llama_moe_ffn) and shared_experts more that every token
     * uses (one SwiGLU of shared_experts * moe_ffn units). Tokens go to their
     * experts in slots of `capacity` per expert and sequence (moe.slots):
     * capacity = min(seq, ceil(seq * top_k / experts * f)), f the capacity
     * factor when one is set (tokens above it are dropped, GShard), else the
     * imbalance (dropless routing priced for the busiest expert's share: 1 is
     * a balanced router). docs/models.md.
     */
    int64_t experts, top_k, moe_ffn, shared_experts;
    uint32_t moe_every, first_dense;
    double capacity_factor, imbalance;
    /* 1: attention as one fused FlashAttention op (causal); 0 (default): the unfused ops. */
    int fused_attention;
    /*
     * Multi-head latent attention (DeepSeek-V2/V3) when kv_lora > 0: keys and
     * values from a kv_lora-dimensional latent (normalized, then up-projected
     * per head to qk_nope + v_head), a rope_dim key part shared by the heads,
     * queries through a q_lora-dimensional latent (0: directly); the query and
     * key head dimension is qk_nope + rope_dim, the value's v_head.
     */
    int64_t q_lora, kv_lora, qk_nope, rope_dim, v_head;
    models_train train;
} models_llama;

/* Defaults: a small model (2 layers, hidden 256, 8 heads, 2 key/value heads, ffn 688). */
void models_llama_init(models_llama *c);
/* Sets the shape of a preset (llama2-7b/13b/70b, llama3-8b/70b/405b, mistral-7b, mixtral-8x7b,
 * deepseek-moe-16b, deepseek-v3). */
int models_llama_preset(const char *name, models_llama *c, di_error *err);
const char *models_llama_preset_name(uint32_t i);
/* 2 V h + L (2 h + h (h + 2 KV d) + h h + 3 h ffn) + h; an MoE layer's MLP is
 * h E + (E + shared) 3 h moe_ffn. */
uint64_t models_llama_parameters(const models_llama *c);
/* An expert's units: moe_ffn, or ffn when it is 0. */
int64_t models_llama_moe_ffn(const models_llama *c);
/* The parameters one token uses: an MoE layer counts top_k + shared experts, and its router. */
uint64_t models_llama_active_parameters(const models_llama *c);
/* Is layer l an MoE layer; the per-sequence expert capacity. */
int models_llama_is_moe(const models_llama *c, uint32_t l);
int64_t models_llama_capacity(const models_llama *c);
int models_llama_build(const models_llama *c, ir_module **out, di_error *err);

#define MODELS_MAX_LAYERS 100000u

/*
 * A built-in model by name and options (spec.c): "mlp", "gpt" or a GPT
 * preset, then options named as on the command line without "--"
 * ("batch" "1536", "dtype" "bf16", "final-ln-params" with no value),
 * applied in order on top of the preset. `distir model`, `simulate
 * --model`, the daemon's ModelSpec and the Python client all go through it.
 */
typedef enum models_spec_kind {
    MODELS_SPEC_MLP = 1,
    MODELS_SPEC_GPT,
    MODELS_SPEC_LLAMA
} models_spec_kind;

typedef struct models_spec {
    models_spec_kind kind;
    char name[32];
    models_mlp mlp;
    models_gpt gpt;
    models_llama llama;
} models_spec;

/* "llama" or a Llama preset picks models_llama, "mlp" the MLP, "gpt" or a GPT preset the GPT.
 * 0 or DI_EINVAL/DI_ENOTFOUND (an unknown preset: the message lists them). */
int models_spec_init(models_spec *sp, const char *name, di_error *err);
/* One option; value NULL (or "") for a flag. DI_ENOTFOUND: not an option of this model. */
int models_spec_set(models_spec *sp, const char *key, const char *value, di_error *err);
/* 1: the option takes a value, 0: a flag, -1: no model has it. */
int models_spec_arity(const char *key);
uint32_t models_spec_layers(const models_spec *sp);
int models_spec_build(const models_spec *sp, ir_module **out, di_error *err);

/* Defaults: SGD, lr 0.01, annotated. */
void models_train_init(models_train *t);
/* Defaults: 2 layers, hidden 16, batch 8, ReLU, softmax cross-entropy, f32. */
void models_mlp_init(models_mlp *c);
/* Defaults: gpt3-125m's shape (12 layers, 768, 12 heads), seq 2048, vocab 51200, batch 1, f32,
 * dropout 0.1. */
void models_gpt_init(models_gpt *c);

/*
 * Sets layers, hidden and heads of a named preset and resets seq to 2048 and
 * vocab to 51200 (callers apply overrides afterwards). Returns 0 or
 * DI_ENOTFOUND with a message listing the presets.
 */
int models_gpt_preset(const char *name, models_gpt *c, di_error *err);
/* The i-th preset name, NULL past the end. */
const char *models_gpt_preset_name(uint32_t i);

/* Parameter counts by formula (for the GPT: 12lh^2 + 13lh + (V+s)h [+ 2h]). */
uint64_t models_mlp_parameters(const models_mlp *c);
uint64_t models_gpt_parameters(const models_gpt *c);

/*
 * Generate a module with one function ("mlp" or "gpt"). Returns 0 and a new
 * module the caller frees with ir_module_free, or DI_EINVAL naming the
 * offending size (hidden not divisible by heads, a zero dimension, an
 * element count that overflows), or an error from autodiff.
 */
int models_mlp_build(const models_mlp *c, ir_module **out, di_error *err);
int models_gpt_build(const models_gpt *c, ir_module **out, di_error *err);

/* ---- building blocks: a small typed op builder, used by the generators and tests ---- */

typedef struct models_builder {
    ir_module *m;
    ir_id func;
    int32_t device;    /* where arguments and constants live (0) */
    int annotate;      /* add dist.* attributes */
    int64_t layer;     /* dist.layer of the next ops */
    const char *part;  /* dist.part of the next ops, or NULL */
    const char *tp;    /* dist.tp of the next ops, or NULL */
    int64_t seq;       /* dist.seq of the next op only when >= 0 (reset to -1 after it) */
    int rc;            /* the first error; later calls do nothing and return 0 */
    di_error *err;
} models_builder;

/* Starts a new function named func in m. */
void models_builder_init(models_builder *b, ir_module *m, const char *func, di_error *err);
/* Adds a function argument on b->device. */
ir_id models_arg(models_builder *b, const char *name, ir_dtype dt, uint32_t rank,
                 const int64_t *dims);
/*
 * Adds an op with untyped results all named name; set attributes with
 * ir_op_set_* (op 0 is skipped by models_end), then call models_end, which
 * infers the result types, adds the dist.* attributes and returns the first
 * result (0 on error, kept in b->rc).
 */
ir_id models_begin(models_builder *b, int kind, uint32_t nin, const ir_id *in, uint32_t nout,
                   const char *name);
ir_id models_end(models_builder *b, ir_id op);
/* An op with one result and no attributes. */
ir_id models_op(models_builder *b, int kind, uint32_t nin, const ir_id *in, const char *name);
/*
 * A normalization op of a model in dtype dt: its statistics in f32 when dt is
 * 16-bit (stash_type 1), as Apex's and Transformer Engine's kernels keep them.
 */
void models_norm_stash(models_builder *b, ir_id op, ir_dtype dt);
/* An unplaced rank-0 constant (it joins tensors on any device). */
ir_id models_scalar(models_builder *b, ir_dtype dt, double v);
/*
 * Finishes a forward function whose loss is `loss`: with t->forward_only the
 * loss becomes its only result; otherwise autodiff appends the backward pass
 * and the optimizer step (results: new weights, [Adam moments,] loss).
 */
int models_train_step(models_builder *b, ir_id loss, const models_train *t);

#endif
