/*
 * fuse.c: kernel fusion before pricing (sim_options.fuse). Frameworks do not
 * launch one kernel per element-wise op: Megatron-LM fuses bias+GeLU,
 * bias+dropout+add and scale+mask+softmax, uses fused layer norms, and JIT
 * compilers fuse element-wise chains in general. The simulator models that
 * with one rule over the program, the way loop-fusion compilers form
 * groups:
 *
 *  - element-wise ops (IR_OPF_ELEMWISE, Dropout and its gradient) chain
 *    into a group when one consumes another's result on the same device,
 *    in the same region;
 *  - a row-wise op (Softmax, LayerNormalization, their gradients and the
 *    reductions) may end a group: it absorbs its element-wise producers
 *    (scale and mask into the softmax, bias+dropout+add into the next layer
 *    norm), but nothing fuses after it;
 *  - an op joins a group only if every other input it reads was made
 *    before the group's first op in program order (or outside the region),
 *    so that the group is one kernel that can start once, with all its
 *    inputs;
 *  - GEMMs, attention, communication, views, optimizer updates, in-place
 *    accumulations and ops with an explicit memory class never fuse, but
 *    for one rule: gradient accumulation fusion (Megatron-LM's
 *    --gradient-accumulation-fusion, on by default, and what cuBLAS's
 *    beta = 1 gives any framework): a linear layer's weight-gradient GEMM
 *    writes its result in the gradient buffer's dtype, adding it to the
 *    buffer, so the cast of a MatMulGrad's weight gradient and its
 *    accumulation (dist.accumulate) run in the GEMM's kernel (its epilogue,
 *    sim_fuse_epilogue; not with sim_options.no_grad_accum_fusion);
 *  - an attention softmax (rank 3 or more, over the last axis) and its
 *    gradient fuse only when the rows fit Megatron-LM's fused scaled masked
 *    softmax kernels (softmax_fits): otherwise Megatron-LM runs PyTorch's
 *    eager softmax, so the softmax, its gradient and the element-wise ops
 *    feeding it the scores (scale, mask) each run as a kernel of their own.
 *
 * A group is priced as one kernel: the FLOPs of its ops, the bytes of the
 * values it reads from outside (each once) and of the results used outside
 * it (returned, saved for the backward pass, read by another kernel), one
 * launch (a GEMM's group as the GEMM, its tiles and waves included: sched.c);
 * it runs at its first op's place in program order. Results used
 * only inside the group (internal values) are never materialized: they
 * occupy no memory. The other ops of the group cost nothing and are ready
 * when the group ends.
 */
#include "sim/sim_int.h"

#include <string.h>

/*
 * Whether a softmax over the last axis of a [..., sq, sk] tensor fits
 * Megatron-LM's fused scaled (upper-triangular) masked softmax kernels
 * (FusedScaleMaskSoftmax.is_kernel_available and the CUDA dispatch it
 * guards): 16 < sk <= 16384, sq and sk multiples of 4, and the batches (the
 * product of the leading dims: micro-batch x heads on the rank) a multiple of
 * the rows a 128-thread block takes: 4 warps of one row each, two when sk's
 * next power of two is at most 128. Rank 1 and 2 softmaxes (a router's, a
 * classifier's) are not attention: the general rule fuses them.
 */
static int
softmax_fits(const ir_module *m, ir_id op)
{
    const ir_op *o = &m->ops[op];
    const ir_type *t = &m->types[m->values[o->outputs].type];
    const int64_t *d = &m->ints[t->dims];
    int64_t sq, sk, batches = 1, p2 = 1, axis;
    if (t->rank < 3)
        return 1;
    axis = ir_op_int(m, op, "axis", -1);
    if (axis != -1 && axis != (int64_t)t->rank - 1)
        return 0;
    sq = d[t->rank - 2];
    sk = d[t->rank - 1];
    for (uint32_t i = 0; i + 2 < t->rank; i++)
        batches *= d[i];
    while (p2 < sk)
        p2 *= 2;
    return sk > 16 && sk <= 16384 && sq % 4 == 0 && sk % 4 == 0 &&
           batches % (p2 <= 128 ? 8 : 4) == 0;
}

int
sim_fuse_kind(int kind)
{
    if (kind <= IR_OP_NONE || kind >= IR_NOPKIND)
        return SIM_FUSE_NONE;
    if (ir_opkind_info(kind)->flags & IR_OPF_ELEMWISE)
        return SIM_FUSE_ELEM;
    switch (kind) {
    case IR_OP_DROPOUT:
    case IR_OP_DROPOUTGRAD:
        return SIM_FUSE_ELEM;
    case IR_OP_SOFTMAX:
    case IR_OP_SOFTMAXGRAD:
    case IR_OP_LAYERNORM:
    case IR_OP_LAYERNORMGRAD:
    case IR_OP_RMSNORM:
    case IR_OP_RMSNORMGRAD:
    case IR_OP_REDUCEMEAN:
    case IR_OP_REDUCESUM:
    case IR_OP_REDUCESUMTO:
        return SIM_FUSE_ROW;
    default:
        return SIM_FUSE_NONE;
    }
}

/* Whether every input and result of op is a local tensor (no mesh). */
static int
local_tensors(const ir_module *m, ir_id op)
{
    const ir_op *o = &m->ops[op];
    for (uint32_t i = 0; i < o->ninput + o->noutput; i++) {
        ir_id v = i < o->ninput ? m->refs[o->inputs + i] : o->outputs + (i - o->ninput);
        const ir_type *t = &m->types[m->values[v].type];
        if (t->kind != IR_TYPE_TENSOR || t->mesh != 0)
            return 0;
    }
    return 1;
}

/*
 * The GEMM whose weight gradient v is, or 0: a MatMulGrad's second result,
 * or a backward Gemm's (the head's, transposed: dW = dY^T X).
 */
static ir_id
wgrad_of(const ir_module *m, ir_id v)
{
    ir_id d = m->values[v].def;
    const ir_attr *a;
    if (d == 0)
        return 0;
    if (m->ops[d].kind == IR_OP_MATMULGRAD)
        return m->ops[d].noutput == 2 && v == m->ops[d].outputs + 1 ? d : 0;
    if (m->ops[d].kind != IR_OP_GEMM || m->ops[d].noutput != 1 || m->ops[d].nattr == 0 ||
        (a = ir_op_attr(m, d, "dist.phase")) == NULL || a->kind != IR_ATTR_STRING ||
        strcmp(m->chars + a->s, "backward") != 0)
        return 0;
    return d;
}

ir_id
sim_fuse_epilogue(const ir_module *m, ir_id op)
{
    const ir_op *o;
    ir_id g = 0, v;
    if (op == 0 || op >= m->nop)
        return 0;
    o = &m->ops[op];
    if (o->noutput != 1 || o->opaque)
        return 0;
    if (o->kind == IR_OP_CAST && o->ninput == 1) {
        g = wgrad_of(m, m->refs[o->inputs]);
    } else if (o->kind == IR_OP_ADD && o->ninput == 2 && o->nattr &&
               ir_op_attr(m, op, "dist.accumulate") != NULL) {
        /* acc' = acc + dW, or acc + cast(dW). */
        ir_id d;
        v = m->refs[o->inputs + 1];
        g = wgrad_of(m, v);
        d = m->values[v].def;
        if (g == 0 && d != 0 && m->ops[d].kind == IR_OP_CAST && m->ops[d].ninput == 1 &&
            m->ops[d].noutput == 1 && !m->ops[d].opaque && m->ops[d].region == o->region &&
            local_tensors(m, d))
            g = wgrad_of(m, m->refs[m->ops[d].inputs]);
    }
    if (g == 0 || m->ops[g].region != o->region || m->ops[g].opaque || !local_tensors(m, g) ||
        !local_tensors(m, op))
        return 0;
    return g;
}

int
sim_fuse_excluded(const ir_module *m, ir_id op)
{
    return m->ops[op].nattr && (ir_op_attr(m, op, "dist.accumulate") != NULL ||
                                ir_op_attr(m, op, "dist.mem") != NULL);
}

static int
fuse_class(const ir_module *m, ir_id op)
{
    const ir_op *o = &m->ops[op];
    int c;
    if (o->kind == IR_OP_NONE || o->kind >= IR_NOPKIND || o->opaque || o->noutput == 0)
        return SIM_FUSE_NONE;
    c = sim_fuse_kind(o->kind);
    if (c == SIM_FUSE_NONE ||
        ((o->kind == IR_OP_SOFTMAX || o->kind == IR_OP_SOFTMAXGRAD) && !softmax_fits(m, op)))
        return SIM_FUSE_NONE;
    if (sim_fuse_excluded(m, op))
        return SIM_FUSE_NONE;
    return local_tensors(m, op) ? c : SIM_FUSE_NONE;
}

/* Whether ops a and b place their first results on the same device. */
static int
same_place(const ir_module *m, ir_id a, ir_id b)
{
    const ir_type *ta = &m->types[m->values[m->ops[a].outputs].type];
    const ir_type *tb = &m->types[m->values[m->ops[b].outputs].type];
    return ta->device == tb->device && ta->devvar == tb->devvar;
}

/*
 * Marks eager the element-wise ops that feed a softmax which does not fit the
 * fused kernel its scores (the ops of the scores' size before it in the same
 * region: the scale and the mask); Megatron-LM's fallback runs them one kernel
 * each, as PyTorch does.
 */
static void
mark_eager(const ir_module *m, const ir_region *r, uint8_t *eager)
{
    ir_id *stack = NULL;
    size_t n = 0, cap = 0;
    for (uint32_t i = 0; i < r->nop; i++) {
        ir_id op = r->ops[i];
        const ir_op *o = &m->ops[op];
        int64_t numel;
        if (o->kind != IR_OP_SOFTMAX || fuse_class(m, op) != SIM_FUSE_NONE || o->ninput == 0)
            continue;
        numel = m->types[m->values[m->refs[o->inputs]].type].numel;
        DI_GROW(&stack, &cap, n + 1);
        stack[n++] = op;
        while (n > 0) {
            const ir_op *c = &m->ops[stack[--n]];
            for (uint32_t a = 0; a < c->ninput; a++) {
                ir_id v = m->refs[c->inputs + a], d = m->values[v].def;
                if (d == 0 || eager[d] || m->ops[d].region != o->region ||
                    m->types[m->values[v].type].numel != numel || fuse_class(m, d) != SIM_FUSE_ELEM)
                    continue;
                eager[d] = 1;
                DI_GROW(&stack, &cap, n + 1);
                stack[n++] = d;
            }
        }
    }
    di_free(stack);
}

/* sim_fgroup.open while planning. */
enum { GROUP_CLOSED, GROUP_OPEN, GROUP_EPILOGUE };

/*
 * Joins op, a cast or an accumulation of GEMM gemm's weight gradient
 * (sim_fuse_epilogue), to gemm's group, made if need be: when that group is
 * gemm's epilogue, still open (an accumulation closes it), and op's other
 * inputs are made before gemm. Whether op joined.
 */
static int
epilogue_join(sim *s, ir_id op, ir_id gemm, const uint32_t *pos)
{
    const ir_module *m = s->m;
    const ir_op *o = &m->ops[op];
    uint32_t id = s->fgrp[gemm];
    sim_fgroup *g;
    if (!same_place(m, gemm, op))
        return 0;
    for (uint32_t b = 0; b < o->ninput; b++) {
        ir_id d = m->values[m->refs[o->inputs + b]].def;
        if (!(d == 0 || d == gemm || m->ops[d].region != o->region || (id && s->fgrp[d] == id) ||
              pos[d] < pos[gemm]))
            return 0;
    }
    if (id == 0) {
        DI_GROW(&s->fgroups, &s->cfgroup, s->nfgroup + 1);
        g = &s->fgroups[s->nfgroup++];
        memset(g, 0, sizeof *g);
        g->head = gemm;
        g->n = 1;
        g->open = GROUP_EPILOGUE;
        s->fgrp[gemm] = id = s->nfgroup;
    }
    g = &s->fgroups[id - 1];
    if (g->head != gemm || g->open != GROUP_EPILOGUE)
        return 0;
    s->fgrp[op] = id;
    g->n++;
    if (o->kind != IR_OP_CAST)
        g->open = GROUP_CLOSED;
    return 1;
}

/* Plans the groups of one region; ids in grp are group index + 1. */
static void
plan_region(sim *s, const ir_region *r, const uint32_t *pos, const uint8_t *eager)
{
    const ir_module *m = s->m;
    for (uint32_t i = 0; i < r->nop; i++) {
        ir_id op = r->ops[i];
        const ir_op *o = &m->ops[op];
        int c = eager[op] ? SIM_FUSE_NONE : fuse_class(m, op), joined = 0;
        ir_id gemm = s->opt && s->opt->no_grad_accum_fusion ? 0 : sim_fuse_epilogue(m, op);
        if (gemm != 0 && epilogue_join(s, op, gemm, pos))
            continue;
        if (c == SIM_FUSE_NONE)
            continue;
        for (uint32_t a = 0; a < o->ninput && !joined; a++) {
            ir_id p = m->values[m->refs[o->inputs + a]].def;
            sim_fgroup *g;
            uint32_t id;
            int ok = 1;
            if (p == 0 || (id = s->fgrp[p]) == 0 || m->ops[p].region != o->region)
                continue;
            g = &s->fgroups[id - 1];
            if (g->open != GROUP_OPEN || !same_place(m, g->head, op))
                continue;
            for (uint32_t b = 0; b < o->ninput && ok; b++) {
                ir_id d = m->values[m->refs[o->inputs + b]].def;
                ok = d == 0 || m->ops[d].region != o->region || s->fgrp[d] == id ||
                     pos[d] < pos[g->head];
            }
            if (!ok)
                continue;
            s->fgrp[op] = id;
            g->n++;
            g->open = c == SIM_FUSE_ELEM ? GROUP_OPEN : GROUP_CLOSED;
            joined = 1;
        }
        if (!joined) {
            sim_fgroup *g;
            DI_GROW(&s->fgroups, &s->cfgroup, s->nfgroup + 1);
            g = &s->fgroups[s->nfgroup++];
            memset(g, 0, sizeof *g);
            g->head = op;
            g->n = 1;
            g->open = c == SIM_FUSE_ELEM ? GROUP_OPEN : GROUP_CLOSED;
            s->fgrp[op] = s->nfgroup;
        }
    }
}

void
sim_fuse_plan(sim *s)
{
    const ir_module *m = s->m;
    uint32_t *pos = di_xcalloc(m->nop, sizeof *pos);
    uint32_t *uses = di_xcalloc(m->nvalue, sizeof *uses);
    uint8_t *eager = di_xcalloc(m->nop, 1);
    uint32_t *fill;

    s->fgrp = di_xcalloc(m->nop, sizeof *s->fgrp);
    s->vfused = di_xcalloc(m->nvalue, 1);
    for (ir_id r = 1; r < m->nregion; r++)
        for (uint32_t i = 0; i < m->regions[r].nop; i++)
            pos[m->regions[r].ops[i]] = i;
    for (ir_id r = 1; r < m->nregion; r++)
        mark_eager(m, &m->regions[r], eager);
    for (ir_id r = 1; r < m->nregion; r++)
        plan_region(s, &m->regions[r], pos, eager);
    di_free(eager);

    /* Single ops are not groups; the others list their members in program order. */
    for (ir_id op = 1; op < m->nop; op++)
        if (s->fgrp[op] && s->fgroups[s->fgrp[op] - 1].n < 2)
            s->fgrp[op] = 0;
    fill = di_xcalloc(s->nfgroup + 1, sizeof *fill);
    for (uint32_t g = 0; g < s->nfgroup; g++) {
        s->fgroups[g].first = g ? s->fgroups[g - 1].first + s->fgroups[g - 1].n : 0;
        s->fgroups[g].t = -1;
        if (s->fgroups[g].n < 2)
            s->fgroups[g].n = 0;
    }
    s->nfmember = s->nfgroup ? s->fgroups[s->nfgroup - 1].first + s->fgroups[s->nfgroup - 1].n : 0;
    s->fmembers = di_xmalloc((s->nfmember ? s->nfmember : 1) * sizeof *s->fmembers);
    for (ir_id r = 1; r < m->nregion; r++)
        for (uint32_t i = 0; i < m->regions[r].nop; i++) {
            ir_id op = m->regions[r].ops[i];
            if (s->fgrp[op]) {
                sim_fgroup *g = &s->fgroups[s->fgrp[op] - 1];
                s->fmembers[g->first + fill[s->fgrp[op]]++] = op;
            }
        }
    di_free(fill);

    /* Internal values: every use is by an op of the group that made them (results escape). */
    for (ir_id r = 1; r < m->nregion; r++)
        for (uint32_t i = 0; i < m->regions[r].nresult; i++)
            uses[m->regions[r].results[i]]++;
    for (ir_id op = 1; op < m->nop; op++) {
        const ir_op *o = &m->ops[op];
        if (o->kind == IR_OP_NONE)
            continue;
        for (uint32_t i = 0; i < o->ninput; i++)
            uses[m->refs[o->inputs + i]]++;
    }
    for (ir_id op = 1; op < m->nop; op++) {
        const ir_op *o = &m->ops[op];
        if (!s->fgrp[op])
            continue;
        for (uint32_t i = 0; i < o->ninput; i++) {
            ir_id v = m->refs[o->inputs + i], d = m->values[v].def;
            if (d && s->fgrp[d] == s->fgrp[op])
                uses[v]--;
        }
    }
    for (ir_id op = 1; op < m->nop; op++)
        if (s->fgrp[op])
            for (uint32_t i = 0; i < m->ops[op].noutput; i++)
                s->vfused[m->ops[op].outputs + i] = uses[m->ops[op].outputs + i] == 0;
    di_free(uses);
    di_free(pos);
}

void
sim_fuse_cost(const sim *s, uint32_t group, ir_cost *c)
{
    const ir_module *m = s->m;
    const sim_fgroup *g = &s->fgroups[group];
    memset(c, 0, sizeof *c);
    for (uint32_t k = 0; k < g->n; k++) {
        ir_id op = s->fmembers[g->first + k];
        const ir_op *o = &m->ops[op];
        ir_cost oc;
        ir_op_cost(m, op, &oc);
        c->flops += oc.flops;
        c->special += oc.special;
        for (uint32_t i = 0; i < o->ninput; i++) {
            ir_id v = m->refs[o->inputs + i], d = m->values[v].def;
            int seen = d && s->fgrp[d] == group + 1;
            /* Each outside value is read once, however many ops of the group read it. */
            for (uint32_t k2 = 0; k2 <= k && !seen; k2++) {
                const ir_op *o2 = &m->ops[s->fmembers[g->first + k2]];
                uint32_t lim = k2 == k ? i : o2->ninput;
                for (uint32_t i2 = 0; i2 < lim && !seen; i2++)
                    seen = m->refs[o2->inputs + i2] == v;
            }
            if (!seen)
                c->bytes_read += (double)ir_type_bytes(m, m->values[v].type);
        }
        for (uint32_t i = 0; i < o->noutput; i++)
            if (!s->vfused[o->outputs + i])
                c->bytes_write += (double)ir_type_bytes(m, m->values[o->outputs + i].type);
    }
}

void
sim_fuse_free(sim *s)
{
    di_free(s->fgrp);
    di_free(s->vfused);
    di_free(s->fgroups);
    di_free(s->fmembers);
    s->fgrp = NULL;
    s->vfused = NULL;
    s->fgroups = NULL;
    s->fmembers = NULL;
}
