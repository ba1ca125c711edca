/*
 * tp.c: horizontal (tensor) parallelism, Megatron-LM style, as placements on
 * the tensor axis of the extended mesh. Sharding propagation (shard.c) does
 * the rest.
 *
 * Each weight argument takes the placement its forward consumers' dist.tp
 * annotation asks for (docs/models.md): a column-parallel MatMul's weight is
 * split along its last dimension (S[1]) and the bias Add after it along the
 * bias's dimension (S[0]); a row-parallel MatMul's weight along its first
 * dimension (S[0]), its bias replicated; everything else replicated
 * (attention heads then follow from the column split of the QKV weight,
 * through the reshapes). A "vocab" weight (the embedding table, the output
 * layer) is split along its vocabulary, as Megatron-LM's vocabulary-parallel
 * embedding and output layer are, when tp divides the vocabulary, and stays
 * replicated otherwise: the Gather becomes a masked lookup plus a reduction,
 * the logits come out split by vocabulary and the loss uses them so (shard.c).
 * Optimizer moments take their weight's placement.
 *
 * With sequence parallelism (Korthikanti et al.) ops marked dist.seq get a
 * hint in shard.c; here a weight that such an op broadcasts along the
 * sequence (the position embedding) is split along it, and integer data
 * feeding the embedding Gather (the token ids) is split along the sequence,
 * so that the embedding comes out sequence-split without communication.
 */
#include "xform/xform_int.h"

#include <string.h>

/* The vocabulary dimension of table v (input k of op) when tp divides it, else R. */
static int8_t
vocab_dim(const xf_ctx *c, ir_id op, uint32_t k, ir_id v)
{
    const ir_module *m = c->m;
    const ir_op *o = &m->ops[op];
    const int64_t *wd = ir_type_dims(m, m->values[v].type);
    int d = -1;
    if (m->types[m->values[v].type].rank != 2)
        return XF_R;
    if (o->kind == IR_OP_GATHER && k == 0 && ir_op_int(m, op, "axis", 0) == 0)
        d = 0;
    else if (o->kind == IR_OP_GEMM && k == 1)
        d = ir_op_int(m, op, "transB", 0) ? 0 : 1;
    else if (o->kind == IR_OP_MATMUL && k == 1)
        d = 1;
    if (d < 0 || wd[d] % c->gtp[xf_op_group(c, op)] != 0)
        return XF_R;
    return (int8_t)d;
}

/* The placement consumer `op` wants for weight v (input k), on the tensor axis. */
static int8_t
wanted(const xf_ctx *c, ir_id op, uint32_t k, ir_id v)
{
    const ir_module *m = c->m;
    const ir_op *o = &m->ops[op];
    const ir_type *wt = &m->types[m->values[v].type];
    const ir_type *ot = o->noutput ? &m->types[m->values[o->outputs].type] : NULL;
    int tp = c->op[op].tp;
    if (ot == NULL || wt->rank == 0 || !xf_layer_is_tp(c, c->op[op].layer))
        return XF_R;
    if (tp == XF_TP_VOCAB)
        return vocab_dim(c, op, k, v);
    if (o->kind == IR_OP_MATMUL && k == 1 && wt->rank >= 2) {
        if (tp == XF_TP_COLUMN)
            return (int8_t)(wt->rank - 1);
        if (tp == XF_TP_ROW)
            return (int8_t)(wt->rank - 2);
        return XF_R;
    }
    if (o->kind == IR_OP_ADD && tp == XF_TP_COLUMN) {
        /* The bias: its last dimension is the output's (split) last dimension. */
        const int64_t *wd = ir_type_dims(m, m->values[v].type);
        const int64_t *od = ir_type_dims(m, m->values[o->outputs].type);
        if (wd[wt->rank - 1] == od[ot->rank - 1] && ot->rank >= wt->rank)
            return (int8_t)(wt->rank - 1);
        return XF_R;
    }
    /*
     * A weight along the sequence (learned positions) added where sequence
     * parallelism splits it: split with it, unless context parallelism splits
     * the sequence outside the tensor ranks (it stays whole and each rank
     * slices its block).
     */
    if (c->s.sequence_parallel && c->op[op].seq >= 0 && (o->kind == IR_OP_ADD) &&
        ot->rank >= wt->rank && c->n[XF_CP] <= 1) {
        uint32_t s = (uint32_t)c->op[op].seq, off = ot->rank - wt->rank;
        const int64_t *wd = ir_type_dims(m, m->values[v].type);
        const int64_t *od = ir_type_dims(m, m->values[o->outputs].type);
        if (s >= off && wd[s - off] == od[s] && od[s] > 1)
            return (int8_t)(s - off);
    }
    return XF_R;
}

int
xf_token_gather(const xf_ctx *c, ir_id op)
{
    const ir_module *m = c->m;
    const ir_op *o = &m->ops[op];
    ir_id idx;
    if (o->kind != IR_OP_GATHER || o->ninput < 2 || c->op[op].phase != XF_PH_FORWARD)
        return 0;
    idx = m->refs[o->inputs + 1];
    return (c->vflags[idx] & XF_V_DATA) && m->types[m->values[idx].type].rank >= 2;
}

int
xf_annotate_tp(xf_ctx *c)
{
    const ir_module *m = c->m;
    const ir_region *fr = &m->regions[c->func];
    int8_t *want;
    uint8_t *seen;
    if (c->n[XF_TP] <= 1)
        return 0;
    want = di_xmalloc(m->nvalue * sizeof *want);
    seen = di_xcalloc(m->nvalue, 1);
    for (uint32_t i = 0; i < fr->nop; i++) {
        ir_id op = fr->ops[i];
        const ir_op *o = &m->ops[op];
        if (c->op[op].phase != XF_PH_FORWARD)
            continue;
        for (uint32_t k = 0; k < o->ninput; k++) {
            ir_id v = m->refs[o->inputs + k];
            int8_t w;
            if (c->vflags[v] & XF_V_WEIGHT) {
                w = wanted(c, op, k, v);
                if (!seen[v])
                    want[v] = w;
                else if (want[v] != w)
                    want[v] = XF_R;
                seen[v] = 1;
            } else if (k == 1 && c->s.sequence_parallel && xf_token_gather(c, op) &&
                       wanted(c, op, 0, m->refs[o->inputs]) == XF_R &&
                       ir_type_dims(m, m->values[v].type)[1] % c->gtp[xf_op_group(c, op)] == 0) {
                c->place[v].a[XF_TP] = 1;
            }
        }
    }
    /* Every group that reads a split weight must divide it. */
    for (uint32_t i = 0; i < fr->nop; i++) {
        ir_id op = fr->ops[i];
        const ir_op *o = &m->ops[op];
        uint32_t g = xf_op_group(c, op), tp = c->gtp[g];
        for (uint32_t k = 0; k < o->ninput; k++) {
            ir_id v = m->refs[o->inputs + k];
            int dim;
            int64_t d;
            if (!(c->vflags[v] & XF_V_ARG) || !seen[v] || want[v] == XF_R)
                continue;
            char pre[32];
            dim = want[v];
            d = ir_type_dims(m, m->values[v].type)[dim];
            if (d % tp == 0)
                continue;
            di_free(want);
            di_free(seen);
            return di_error_set(c->err, DI_ESTRATEGY,
                                "%stp=%u does not divide dimension %d (%lld) of weight %%%s",
                                xf_stage_prefix(c, g, pre, sizeof pre), tp, dim, (long long)d,
                                ir_str_get(m, m->values[v].name));
        }
    }
    for (uint32_t a = 0; a < fr->narg; a++) {
        ir_id v = fr->args[a];
        if (seen[v] && want[v] != XF_R)
            c->place[v].a[XF_TP] = want[v];
    }
    /* A split table: the lookups and the loss use the split (shard.c). */
    for (uint32_t i = 0; i < fr->nop && !c->vocab_parallel; i++) {
        ir_id op = fr->ops[i];
        const ir_op *o = &m->ops[op];
        if (c->op[op].tp != XF_TP_VOCAB || c->op[op].phase != XF_PH_FORWARD)
            continue;
        for (uint32_t k = 0; k < o->ninput; k++) {
            ir_id v = m->refs[o->inputs + k];
            if ((c->vflags[v] & XF_V_ARG) && seen[v] && want[v] != XF_R)
                c->vocab_parallel = 1;
        }
    }
    di_free(want);
    di_free(seen);
    /* Optimizer state follows its weight. */
    for (uint32_t i = 0; i < fr->nop; i++) {
        ir_id op = fr->ops[i];
        const ir_op *o = &m->ops[op];
        if (o->kind != IR_OP_ADAM || o->ninput < 4)
            continue;
        for (uint32_t k = 2; k < o->ninput; k++) {
            ir_id v = m->refs[o->inputs + k];
            if (c->vflags[v] & XF_V_ARG)
                c->place[v].a[XF_TP] = c->place[m->refs[o->inputs]].a[XF_TP];
        }
    }
    return 0;
}
