/*
 * dp.c: data parallelism and microbatching as placements, and ZeRO.
 *
 * Batch-data arguments are split along dimension 0 on the microbatch axis
 * (a microbatch is a slice of the batch, processed in turn) and on the data
 * axis (a replica's share); weights are replicated on both. Propagation
 * (shard.c) then makes every activation batch-split and every weight
 * gradient a partial sum on both axes: the sum across microbatches is the
 * gradient accumulation, the sum across replicas the data-parallel
 * all-reduce, both inserted where the optimizer needs the whole gradient.
 *
 * ZeRO (Rajbhandari et al.) splits along dimension 0 on the data axis, when
 * the tensor-parallel shard's dimension 0 divides: stage 1 the optimizer
 * state and the update (so the gradient reduction becomes a reduce-scatter
 * and the updated weights are gathered again), stage 2 also the gradients
 * (reduce-scattered per microbatch before accumulation, pipeline.c), stage 3
 * also the parameters, gathered before each use. At stages 1 and 2 the
 * weights arrive sharded and are gathered once at the start of the step
 * (the full working copy that every replica keeps), which is the
 * all-gather of the updated weights moved to the start of the next step.
 */
#include "xform/xform_int.h"

/* Splits v along dimension 0 on the data axis when the tensor shard's dimension 0 divides. */
static void
zero_split(xf_ctx *c, ir_id v)
{
    const ir_module *m = c->m;
    const ir_type *t = &m->types[m->values[v].type];
    int64_t d0;
    if (t->rank == 0)
        return;
    d0 = ir_type_dims(m, m->values[v].type)[0];
    if (c->place[v].a[XF_TP] == 0)
        d0 /= c->n[XF_TP];
    if (d0 % c->n[XF_DP] == 0)
        c->place[v].a[XF_DP] = 0;
}

int
xf_annotate_dp(xf_ctx *c)
{
    const ir_module *m = c->m;
    const ir_region *fr = &m->regions[c->func];
    for (uint32_t a = 0; a < fr->narg; a++) {
        ir_id v = fr->args[a];
        if (!(c->vflags[v] & XF_V_DATA))
            continue;
        if (c->n[XF_MB] > 1)
            c->place[v].a[XF_MB] = 0;
        if (c->n[XF_DP] > 1)
            c->place[v].a[XF_DP] = 0;
    }
    if (c->s.zero == 0 || c->n[XF_DP] <= 1)
        return 0;
    for (uint32_t i = 0; i < fr->nop; i++) {
        ir_id op = fr->ops[i];
        const ir_op *o = &m->ops[op];
        if (!(ir_opkind_info(o->kind)->flags & IR_OPF_OPTIM))
            continue;
        for (uint32_t k = 0; k < o->ninput; k++) {
            ir_id v = m->refs[o->inputs + k];
            if (k == 1 || !(c->vflags[v] & XF_V_ARG) || c->place[v].a[XF_DP] != XF_R)
                continue;
            zero_split(c, v);
        }
    }
    return 0;
}
