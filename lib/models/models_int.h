/*
 * models_int.h: building blocks the generators share (models.c): typed ops
 * with their attributes, constants and the causal mask.
 */
#ifndef DISTIR_MODELS_INT_H
#define DISTIR_MODELS_INT_H

#include "models/models.h"

ir_id models_op2(models_builder *b, int kind, ir_id x, ir_id y, const char *name);
ir_id models_reshape(models_builder *b, ir_id x, uint32_t n, const int64_t *shape,
                     const char *name);
ir_id models_transpose(models_builder *b, ir_id x, uint32_t n, const int64_t *perm,
                       const char *name);
/* A rank-1 constant of n elements fn(0), ..., fn(n - 1) on the builder's device. */
ir_id models_vector_const(models_builder *b, ir_dtype dt, int64_t n, double (*fn)(int64_t),
                          const char *name);
double models_index(int64_t i); /* i */
double models_one(int64_t i);   /* 1 */
/*
 * The additive causal mask [s, s] from idx (f32[s] 0, 1, ..., s - 1): 0
 * where j <= i, -1e4 * (j - i) above the diagonal, in dtype dt; computed in
 * the layer so that no [s, s] tensor crosses a pipeline stage.
 */
ir_id models_causal_mask(models_builder *b, ir_id idx, int64_t seq, ir_dtype dt,
                         const char *prefix);

/*
 * One causal FlashAttention op of q, k, v ([b, heads, s, d]; k and v may have
 * fewer heads) with the given scale: the attention core of `--attention
 * fused`. Returns its output (the log-sum-exp is its second result).
 */
ir_id models_flash_attention(models_builder *b, ir_id q, ir_id k, ir_id v, double scale,
                             const char *name);

/*
 * The unfused attention's probabilities of q and k ([b, heads, s, d]): k^T,
 * the scores q k^T times scale, the causal mask (models_causal_mask of idx)
 * added, the softmax over the keys; names prefix.kt, .scores, .probs.
 */
ir_id models_attention_probs(models_builder *b, ir_id q, ir_id k, double scale, ir_id idx,
                             int64_t seq, ir_dtype dt, const char *prefix);

/* The generators' size checks: 1 to 2^40 (what names the option), 1 to MODELS_MAX_LAYERS. */
int models_check_size(const char *what, int64_t v, di_error *err);
int models_check_layers(uint32_t layers, di_error *err);

/*
 * The end of a language model: mean softmax cross-entropy of logits [b*s, V]
 * against labels [b, s] (flattened), then the training step; *out is the
 * builder's module, or on failure it is freed and the code returned.
 */
int models_loss_step(models_builder *b, ir_id logits, ir_id labels, const models_train *t,
                     ir_module **out);

#endif
