/*
 * recompute.c: activation recomputation (Chen et al. 2016; Korthikanti et
 * al. 2022), as the choice of forward ops a backward chunk runs again.
 *
 *   - full: every forward op of the stage's transformer layers, except the
 *     layer checkpoints: the results that cross from one transformer layer
 *     (dist.layer) to the next are kept, as Megatron-LM keeps each layer's
 *     input. Megatron-LM's checkpointing reruns a layer's whole forward, so
 *     the ops whose results the backward chunk needs, transitively, and
 *     the rest (xf_recompute_ops, rest_ops: a layer's last
 *     GEMM when no backward op reads its result, as a Llama MLP's down
 *     projection, with the reduction the checkpoint waits for). Ops outside
 *     the layers (dist.layer < 0: embedding, final norm, logits, loss) are
 *     not recomputed: their activations are kept, as in Megatron-LM. chunk.c
 *     emits each needed op right before its first use and the rest before
 *     the layer's first backward op, so one layer's activations are live at
 *     a time; without layer annotations the stage's ops the backward needs
 *     are recomputed from its inputs;
 *   - selective: only the attention core that costs 5as^2b bytes per layer
 *     and little compute: Q K^T, its scale and mask, the softmax and the
 *     dropout of the probabilities. Their inputs (Q, K^T, the mask, which
 *     is a constant) stay saved; chunk.c emits each recomputed op right
 *     before its first use, so one layer's scores are live at a time;
 *   - selective-op: torchtitan's op-level selective checkpointing (its
 *     `selective_ac_option = "op"` policy for each transformer block): the
 *     results of the layer's weight GEMMs (PyTorch's aten.mm: an activation
 *     times a matrix weight) are kept but every second one's (the first,
 *     third, ... kept; on a Llama layer the K and output projections and the
 *     MLP's up projection recomputed), fused attention's are kept, and every
 *     other op of the layer is recomputed where the backward needs it, the
 *     batched products of naive attention included (aten.bmm is not on
 *     torchtitan's list). The layer checkpoints are kept as under full; a
 *     module without layer annotations is one block. PyTorch reruns the
 *     block's forward up to the last value the backward needs; here only
 *     what it needs is rerun.
 */
#include "xform/xform_int.h"

#include <string.h>

void
xf_recompute_mark(xf_ctx *c)
{
    const ir_module *m = c->m;
    const ir_region *fr = &m->regions[c->func];
    for (uint32_t i = 0; i < fr->nop; i++) {
        ir_id op = fr->ops[i], cur;
        if (m->ops[op].kind != IR_OP_SOFTMAX || c->op[op].phase != XF_PH_FORWARD ||
            c->op[op].tp != XF_TP_HEADS)
            continue;
        c->op[op].recompute = 1;
        /* Back through the score arithmetic to the Q K^T MatMul. */
        cur = op;
        while (cur) {
            ir_id in = m->refs[m->ops[cur].inputs], d = m->values[in].def;
            int k;
            if (d == 0 || c->op[d].phase != XF_PH_FORWARD || c->op[d].tp != XF_TP_HEADS ||
                (c->vflags[in] & XF_V_CONST))
                break;
            k = m->ops[d].kind;
            if (k != IR_OP_MATMUL && k != IR_OP_ADD && k != IR_OP_MUL && k != IR_OP_SUB &&
                k != IR_OP_DIV)
                break;
            c->op[d].recompute = 1;
            cur = k == IR_OP_MATMUL ? 0 : d;
        }
        /* Forward to the dropout of the probabilities. */
        for (uint32_t j = i + 1; j < fr->nop; j++) {
            ir_id u = fr->ops[j];
            if (m->ops[u].kind == IR_OP_DROPOUT && m->refs[m->ops[u].inputs] == m->ops[op].outputs)
                c->op[u].recompute = 1;
        }
    }
}

/* A GEMM of an activation and a matrix weight (PyTorch's aten.mm under nn.Linear). */
static int
weight_gemm(const xf_ctx *c, ir_id op)
{
    const ir_module *m = c->m;
    const ir_op *o = &m->ops[op];
    ir_id w;
    if (o->kind != IR_OP_MATMUL || o->ninput < 2)
        return 0;
    w = m->refs[o->inputs + 1];
    return (c->vflags[w] & XF_V_WEIGHT) && m->values[w].def == 0 &&
           m->types[m->values[w].type].rank == 2;
}

void
xf_recompute_mark_ops(xf_ctx *c)
{
    const ir_module *m = c->m;
    const ir_region *fr = &m->regions[c->func];
    int32_t layer = INT32_MIN;
    uint32_t ngemm = 0;
    uint8_t *out_layer = di_xcalloc(m->nop ? m->nop : 1, 1);
    /* Results another layer's forward op reads: the layer checkpoints, kept. */
    for (uint32_t i = 0; i < fr->nop; i++) {
        ir_id op = fr->ops[i];
        const ir_op *o = &m->ops[op];
        if (c->op[op].phase != XF_PH_FORWARD)
            continue;
        for (uint32_t k = 0; k < o->ninput; k++) {
            ir_id d = m->values[m->refs[o->inputs + k]].def;
            if (d && c->op[d].layer >= 0 && c->op[d].layer != c->op[op].layer)
                out_layer[d] = 1;
        }
    }
    for (uint32_t i = 0; i < fr->nop; i++) {
        ir_id op = fr->ops[i];
        const ir_op *o = &m->ops[op];
        int32_t L = c->op[op].layer;
        /*
         * Views too: what they view is remade, not kept through them. Without
         * layer annotations (INT32_MIN) the function is one block.
         */
        if (c->op[op].phase != XF_PH_FORWARD || (L < 0 && L != INT32_MIN) || o->noutput == 0 ||
            out_layer[op] ||
            (ir_opkind_info(o->kind)->flags & IR_OPF_COMM) ||
            (c->vflags[o->outputs] & XF_V_CONST) || o->kind == IR_OP_FLASHATTN)
            continue;
        if (L != layer) {
            layer = L;
            ngemm = 0;
        }
        if (weight_gemm(c, op) && ++ngemm % 2 == 1)
            continue;
        c->op[op].recompute = 1;
    }
    di_free(out_layer);
}

/*
 * Does full recomputation redo op d? Transformer layers' ops (dist.layer >=
 * 0) yes; ops outside every layer (dist.layer < 0: the embedding, the final
 * layer norm, the logits and the loss) no: Megatron-LM checkpoints layers,
 * so the head runs once forward and keeps its activations. Without layer
 * annotations everything is recomputed.
 */
static int
in_layers(const xf_ctx *c, ir_id d)
{
    return c->op[d].layer == INT32_MIN || c->op[d].layer >= 0;
}

/*
 * The ops full recomputation redoes among the program's forward ops (fops):
 * those in_layers, and with recompute_layers N > 0 (Megatron-LM's block
 * method) only those of the program's first N transformer layers (the
 * smallest dist.layer values), the others' activations kept. Per op id;
 * the caller frees it.
 */
static uint8_t *
full_ops(const xf_ctx *c, const ir_id *fops, uint32_t nf)
{
    uint8_t *full = di_xcalloc(c->m->nop ? c->m->nop : 1, 1);
    uint32_t n = c->s.recompute_layers;
    int32_t last = INT32_MIN; /* the N-th smallest layer of the program (n > 0) */
    if (n > 0) {
        /* The N-th smallest distinct layer: a pass a layer, at most N and the layers + 1. */
        int32_t below = -1;
        for (uint32_t k = 0; k < n; k++) {
            int32_t next = INT32_MAX;
            for (uint32_t j = 0; j < nf; j++) {
                int32_t L = c->op[fops[j]].layer;
                if (L > below && L < next)
                    next = L;
            }
            if (next == INT32_MAX)
                break;
            last = below = next;
        }
    }
    for (uint32_t j = 0; j < nf; j++) {
        int32_t L = c->op[fops[j]].layer;
        full[fops[j]] =
            (uint8_t)(in_layers(c, fops[j]) && (n == 0 || L == INT32_MIN || L <= last));
    }
    return full;
}

/* Marks forward op d of program fhome as needed when the mode recomputes it. */
static void
need_inputs(const xf_ctx *c, const ir_op *o, const int32_t *home, int32_t fhome,
            const uint8_t *ckpt, const uint8_t *full, uint8_t *needed)
{
    const ir_module *m = c->m;
    for (uint32_t q = 0; q < o->ninput; q++) {
        ir_id d = m->values[m->refs[o->inputs + q]].def;
        if (d && home[d] == fhome &&
            ((c->s.recompute == STRATEGY_RECOMPUTE_FULL && !ckpt[d] && full[d]) ||
             c->op[d].recompute))
            needed[d] = 1;
    }
}

/* Layer checkpoints: forward results consumed by a forward op of another layer. */
static uint8_t *
checkpoints(const xf_ctx *c, const ir_id *fops, uint32_t nf, const int32_t *home, int32_t fhome)
{
    const ir_module *m = c->m;
    uint8_t *ckpt = di_xcalloc(m->nop ? m->nop : 1, 1);
    for (uint32_t j = 0; j < nf; j++) {
        const ir_op *o = &m->ops[fops[j]];
        int32_t lu = c->op[fops[j]].layer;
        for (uint32_t q = 0; q < o->ninput; q++) {
            ir_id d = m->values[m->refs[o->inputs + q]].def;
            if (d && home[d] == fhome && lu != INT32_MIN && c->op[d].layer != INT32_MIN &&
                c->op[d].layer != lu)
                ckpt[d] = 1;
        }
    }
    return ckpt;
}

/*
 * The rest of xf_recompute_ops: the forward ops of the program's layers
 * that are not in needed (what the backward needs; the ones added are
 * marked there too) nor checkpoints (ckpt), into out; and readref.
 */
static uint32_t
rest_ops(const xf_ctx *c, const ir_id *fops, uint32_t nf, const int32_t *home, int32_t fhome,
         const uint8_t *ckpt, const uint8_t *full, uint8_t *needed, ir_id *out, uint32_t *readref)
{
    const ir_module *m = c->m;
    uint32_t n = 0;
    for (uint32_t j = 0; j < nf; j++) {
        ir_id d = fops[j];
        const ir_op *o = &m->ops[d];
        if (home[d] != fhome || needed[d] || ckpt[d] || c->op[d].layer < 0 || !full[d] ||
            c->op[d].phase != XF_PH_FORWARD || o->noutput == 0 ||
            (ir_opkind_info(o->kind)->flags & (IR_OPF_FREE | IR_OPF_COMM)) ||
            (c->vflags[o->outputs] & XF_V_CONST))
            continue;
        out[n++] = d;
        needed[d] = 1;
    }
    /* The checkpoints' inputs made by those ops: the reader each waits for. */
    for (uint32_t j = 0; readref != NULL && j < nf; j++) {
        const ir_op *o = &m->ops[fops[j]];
        if (!ckpt[fops[j]])
            continue;
        for (uint32_t q = 0; q < o->ninput; q++) {
            ir_id v = m->refs[o->inputs + q], d = m->values[v].def;
            if (d && needed[d] && readref[v] == 0)
                readref[v] = o->inputs + q + 1;
        }
    }
    return n;
}

uint32_t
xf_recompute_ops(const xf_ctx *c, const ir_id *fops, uint32_t nf, const ir_id *bops, uint32_t nb,
                 const int32_t *home, int32_t fhome, ir_id *out, ir_id *rest, uint32_t *nrest,
                 uint32_t *readref)
{
    const ir_module *m = c->m;
    uint8_t *needed = di_xcalloc(m->nop ? m->nop : 1, 1);
    uint8_t *ckpt = checkpoints(c, fops, nf, home, fhome);
    uint8_t *full = full_ops(c, fops, nf);
    uint32_t n = 0;
    for (uint32_t j = nb; j-- > 0;)
        need_inputs(c, &m->ops[bops[j]], home, fhome, ckpt, full, needed);
    /* Backward through the forward program: what the needed ops need. */
    for (uint32_t j = nf; j-- > 0;)
        if (needed[fops[j]])
            need_inputs(c, &m->ops[fops[j]], home, fhome, ckpt, full, needed);
    for (uint32_t j = 0; j < nf; j++)
        if (needed[fops[j]])
            out[n++] = fops[j];
    if (nrest != NULL)
        *nrest = rest != NULL && c->s.recompute == STRATEGY_RECOMPUTE_FULL
                     ? rest_ops(c, fops, nf, home, fhome, ckpt, full, needed, rest, readref)
                     : 0;
    di_free(full);
    di_free(ckpt);
    di_free(needed);
    return n;
}

uint32_t
xf_recompute_place(const xf_ctx *c, const ir_id *bops, uint32_t nb, const ir_id *rest,
                   uint32_t nrest, ir_id *out)
{
    uint8_t *done = di_xcalloc(nrest ? nrest : 1, 1);
    uint32_t n = 0;
    for (uint32_t j = 0; j < nb; j++) {
        int32_t L = c->op[bops[j]].layer;
        for (uint32_t k = 0; L >= 0 && k < nrest; k++)
            if (!done[k] && c->op[rest[k]].layer == L) {
                done[k] = 1;
                out[n++] = rest[k];
            }
        out[n++] = bops[j];
    }
    di_free(done);
    return n;
}
