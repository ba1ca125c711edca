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
 * the tensor-parallel shard's dimension 0 divides, else along another
 * dimension that divides (xform_zero_dim; and on the context axis too,
 * zero_cp_dim): stage 1 the optimizer
 * state and the update (so the gradient reduction becomes a reduce-scatter
 * and the updated weights are gathered again), stage 2 also the gradients
 * (reduce-scattered per microbatch before accumulation, chunk.c), stage 3
 * also the parameters, gathered before each use. At stages 1 and 2 the
 * weights arrive sharded and are gathered once at the start of the step
 * (the full working copy that every replica keeps), which is the
 * all-gather of the updated weights moved to the start of the next step.
 */
#include "xform/xform_int.h"

#include <string.h>

int
xform_zero_dim(const int64_t *dims, uint32_t rank, int tp_dim, int64_t n)
{
    if (rank == 0 || n <= 0)
        return -1;
    if (dims[0] % n == 0)
        return 0;
    for (uint32_t k = 1; k < rank; k++)
        if ((int)k != tp_dim && dims[k] % n == 0)
            return (int)k;
    return -1;
}

/*
 * The dimension along which ZeRO splits v over the data axis of group g
 * (xform_zero_dim of its tensor shard), or -1.
 */
static int
zero_dim(const xf_ctx *c, ir_id v, uint32_t g)
{
    const ir_module *m = c->m;
    const ir_type *t = &m->types[m->values[v].type];
    int64_t dims[IR_MAX_RANK];
    int tp = c->place[v].a[XF_TP];
    memcpy(dims, ir_type_dims(m, m->values[v].type), t->rank * sizeof *dims);
    if (XF_IS_S(tp)) {
        if (dims[tp] % c->gtp[g] != 0)
            return -1;
        dims[tp] /= c->gtp[g];
    }
    return xform_zero_dim(dims, t->rank, XF_IS_S(tp) ? tp : -1, xf_gdata(c, g));
}

/*
 * The expert weights: arguments a forward MatMul applies per slice of a
 * batch dimension, [E, in, out] against [.., E, C, in] (docs/models.md).
 * Returns the expert count of the first (0 when there are none); marks them
 * in mark[] when mark is not NULL.
 */
int64_t
xf_expert_weights(const xf_ctx *c, uint8_t *mark)
{
    const ir_module *m = c->m;
    const ir_region *fr = &m->regions[c->func];
    int64_t experts = 0;
    for (uint32_t i = 0; i < fr->nop; i++) {
        ir_id op = fr->ops[i], w, x;
        const ir_op *o = &m->ops[op];
        if (o->kind != IR_OP_MATMUL || c->op[op].phase != XF_PH_FORWARD || o->ninput != 2)
            continue;
        x = m->refs[o->inputs];
        w = m->refs[o->inputs + 1];
        if (!(c->vflags[w] & XF_V_WEIGHT) || m->types[m->values[w].type].rank != 3 ||
            m->types[m->values[x].type].rank < 4)
            continue;
        if (experts == 0)
            experts = ir_type_dims(m, m->values[w].type)[0];
        if (mark)
            mark[w] = 1;
    }
    return experts;
}

/* The expert weights and their optimizer state (arguments of their updates), marked. */
int64_t
xf_expert_state(const xf_ctx *c, uint8_t *mark)
{
    const ir_module *m = c->m;
    const ir_region *fr = &m->regions[c->func];
    int64_t experts = xf_expert_weights(c, mark);
    for (uint32_t i = 0; i < fr->nop; i++) {
        ir_id op = fr->ops[i];
        const ir_op *o = &m->ops[op];
        if (!(ir_opkind_info(o->kind)->flags & IR_OPF_OPTIM) || o->ninput < 1 ||
            !mark[m->refs[o->inputs]])
            continue;
        for (uint32_t k = 2; k < o->ninput; k++)
            if (c->vflags[m->refs[o->inputs + k]] & XF_V_ARG)
                mark[m->refs[o->inputs + k]] = 1;
    }
    return experts;
}

/* Expert parallelism: expert weights and their optimizer state split along the experts. */
static void
annotate_ep(xf_ctx *c)
{
    const ir_module *m = c->m;
    const ir_region *fr = &m->regions[c->func];
    uint8_t *mark = di_xcalloc(m->nvalue ? m->nvalue : 1, 1);
    xf_expert_state(c, mark);
    for (uint32_t a = 0; a < fr->narg; a++) {
        ir_id v = fr->args[a];
        if (!mark[v])
            continue;
        c->place[v].a[XF_DP] = 0;
        c->vflags[v] |= XF_V_EXPERT;
    }
    di_free(mark);
}

/*
 * The dimension along which ZeRO also splits v over the context ranks of
 * group g, or -1, the data axis splitting dimension dd: one the tensor axis
 * does not split (so that no dimension is split on the tensor, data and
 * context axes together: xform_axis_outer has no order for the three),
 * dimension 0 or 1 other than dd where one qualifies, else dd with its extent
 * divided by the data ranks too.
 */
static int
zero_cp_dim(const xf_ctx *c, ir_id v, uint32_t g, int dd)
{
    const ir_module *m = c->m;
    const ir_type *t = &m->types[m->values[v].type];
    const int64_t *d = ir_type_dims(m, m->values[v].type);
    int64_t cp = c->n[XF_CP];
    int order[3] = {dd == 1 ? 0 : 1, dd == 1 ? 1 : 0, dd};
    for (int i = 0; i < 3; i++) {
        int k = order[i];
        int64_t n = k == dd ? xf_gdata(c, g) * cp : cp;
        if ((uint32_t)k < t->rank && c->place[v].a[XF_TP] != k && d[k] % n == 0)
            return k;
    }
    return -1;
}

/*
 * The dimension along which ZeRO splits expert state v over the context
 * ranks, or -1: one no other axis splits (the tensor axis, the outer data
 * axis), else dimension 0 beside the experts' split, where each device's
 * experts divide by cp.
 */
static int
expert_cp_dim(const xf_ctx *c, ir_id v)
{
    const ir_module *m = c->m;
    const ir_type *t = &m->types[m->values[v].type];
    const int64_t *d = ir_type_dims(m, m->values[v].type);
    int64_t cp = c->n[XF_CP];
    for (uint32_t k = 1; k < t->rank; k++)
        if (c->place[v].a[XF_TP] != (int8_t)k && c->place[v].a[XF_EDP] != (int8_t)k &&
            d[k] % cp == 0)
            return (int)k;
    if (c->place[v].a[XF_TP] != 0 && c->place[v].a[XF_EDP] != 0 &&
        d[0] % ((int64_t)c->n[XF_DP] * cp) == 0)
        return 0;
    return -1;
}

int
xf_annotate_dp(xf_ctx *c)
{
    const ir_module *m = c->m;
    const ir_region *fr = &m->regions[c->func];
    uint8_t *cand;
    int8_t *zd;
    for (uint32_t a = 0; a < fr->narg; a++) {
        ir_id v = fr->args[a];
        if (!(c->vflags[v] & XF_V_DATA))
            continue;
        if (c->n[XF_MB] > 1)
            c->place[v].a[XF_MB] = 0;
        if (c->n[XF_DP] > 1)
            c->place[v].a[XF_DP] = 0;
        if (c->n[XF_EDP] > 1)
            c->place[v].a[XF_EDP] = 0;
        /* Context parallelism: the sequence (dimension 1 of tokens and labels). */
        if (c->n[XF_CP] > 1)
            c->place[v].a[XF_CP] = 1;
    }
    if (c->s.ep > 1 && c->n[XF_DP] > 1)
        annotate_ep(c);
    if (c->s.zero == 0 || (c->n[XF_DP] <= 1 && c->n[XF_CP] <= 1))
        return 0;
    /* Candidates: optimizer state and weights (1), unless a group cannot split them (2). */
    cand = di_xcalloc(m->nvalue ? m->nvalue : 1, 1);
    for (uint32_t i = 0; i < fr->nop; i++) {
        ir_id op = fr->ops[i];
        const ir_op *o = &m->ops[op];
        if (!(ir_opkind_info(o->kind)->flags & IR_OPF_OPTIM))
            continue;
        for (uint32_t k = 0; k < o->ninput; k++) {
            ir_id v = m->refs[o->inputs + k];
            if (k == 1 || !(c->vflags[v] & XF_V_ARG) || c->place[v].a[XF_DP] != XF_R ||
                m->types[m->values[v].type].rank == 0)
                continue;
            cand[v] = 1;
        }
    }
    /* The dimension each splits along (zero_dim): the same for every group that reads it. */
    zd = di_xmalloc(m->nvalue ? m->nvalue : 1);
    memset(zd, -2, m->nvalue ? m->nvalue : 1);
    for (uint32_t i = 0; i < fr->nop; i++) {
        ir_id op = fr->ops[i];
        const ir_op *o = &m->ops[op];
        for (uint32_t k = 0; k < o->ninput; k++) {
            ir_id v = m->refs[o->inputs + k];
            int d;
            if (cand[v] != 1)
                continue;
            d = zero_dim(c, v, xf_op_group(c, op));
            zd[v] = zd[v] == -2 || zd[v] == d ? (int8_t)d : -1;
        }
    }
    for (uint32_t a = 0; a < fr->narg; a++)
        if (cand[fr->args[a]] == 1 && zd[fr->args[a]] < 0)
            cand[fr->args[a]] = 2;
    /*
     * Over the context ranks too, as Megatron-LM's distributed optimizer shards
     * over the data-parallel group with context parallelism (zero_cp_dim: the
     * same dimension for every group that reads it, else not).
     */
    if (c->n[XF_CP] > 1) {
        int8_t *cpd = di_xmalloc(m->nvalue ? m->nvalue : 1);
        uint8_t *expert = di_xcalloc(m->nvalue ? m->nvalue : 1, 1);
        /* Not the experts' (their gradients come split over the context ranks by expert). */
        xf_expert_state(c, expert);
        memset(cpd, -2, m->nvalue ? m->nvalue : 1);
        for (uint32_t i = 0; i < fr->nop; i++) {
            ir_id op = fr->ops[i];
            const ir_op *o = &m->ops[op];
            for (uint32_t k = 0; k < o->ninput; k++) {
                ir_id v = m->refs[o->inputs + k];
                int d;
                if (cand[v] != 1 || expert[v])
                    continue;
                d = zero_cp_dim(c, v, xf_op_group(c, op), zd[v]);
                cpd[v] = cpd[v] == -2 || cpd[v] == d ? (int8_t)d : -1;
            }
        }
        for (uint32_t a = 0; a < fr->narg; a++) {
            ir_id v = fr->args[a];
            if (cand[v] == 1 && cpd[v] >= 0)
                c->place[v].a[XF_CP] = cpd[v];
        }
        di_free(cpd);
        di_free(expert);
    }
    /* Over the whole data group: outer x inner under expert parallelism over part of it. */
    for (uint32_t a = 0; a < fr->narg && c->n[XF_DP] > 1; a++)
        if (cand[fr->args[a]] == 1) {
            c->place[fr->args[a]].a[XF_DP] = zd[fr->args[a]];
            if (c->n[XF_EDP] > 1)
                c->place[fr->args[a]].a[XF_EDP] = zd[fr->args[a]];
        }
    di_free(zd);
    if (c->s.ep > 1 && (c->n[XF_EDP] > 1 || c->n[XF_CP] > 1)) {
        /*
         * The experts' state over the ranks that hold the same experts (the
         * outer data axis), as Megatron-LM's distributed optimizer shards it
         * over the expert-data-parallel group: along dimension 1, as
         * dimension 0 (the experts) is split by expert parallelism. That group
         * holds the context ranks too (Megatron-LM folds context parallelism
         * into the experts' data parallelism): over them along another
         * dimension (expert_cp_dim).
         */
        memset(cand, 0, m->nvalue ? m->nvalue : 1);
        xf_expert_state(c, cand);
        for (uint32_t a = 0; a < fr->narg; a++) {
            ir_id v = fr->args[a];
            const ir_type *t = &m->types[m->values[v].type];
            int64_t d1;
            if (!cand[v] || t->rank < 2)
                continue;
            d1 = ir_type_dims(m, m->values[v].type)[1];
            if (c->place[v].a[XF_TP] == 1)
                d1 = d1 % c->gtp[0] == 0 ? d1 / c->gtp[0] : 1;
            if (c->n[XF_EDP] > 1 && d1 % c->n[XF_EDP] == 0)
                c->place[v].a[XF_EDP] = 1;
            if (c->n[XF_CP] > 1) {
                int d = expert_cp_dim(c, v);
                if (d >= 0)
                    c->place[v].a[XF_CP] = (int8_t)d;
            }
        }
    }
    di_free(cand);
    return 0;
}
