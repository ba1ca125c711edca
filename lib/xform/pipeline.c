/*
 * pipeline.c: pipeline parallelism and the assembly of the distributed
 * module (the last pass of xform_apply, apply.c).
 *
 * The source step is cut into programs:
 *   - F[k], B[k]: the forward and backward ops of model stage k (contiguous
 *     layers balanced by the simulator's time for them, or by FLOPs when an
 *     op cannot be priced; the embedding joins the first stage, the head
 *     and the loss the last), run once per microbatch as a dist.pmap over
 *     the devices of group k mod pp ("chunks");
 *   - S[g]: the ops that run once per step on group g, after the last
 *     microbatch: the optimizer, and backward ops that only combine
 *     gradient contributions (an Add of two partial sums across
 *     microbatches, such as the tied embedding's two gradients), but for a
 *     widening Cast (mixed precision's gradient to f32), which runs per
 *     microbatch so that the accumulation is in the wider type.
 * Constants are cloned into every body that uses them. With recomputation a
 * backward chunk also recomputes forward ops of its stage (recompute.c): all
 * of them (full: only the stage's inputs are kept) or the attention scores,
 * softmax and its dropout (selective).
 *
 * A chunk calls a function of its program (a dist.pmap with a callee)
 * instead of owning a copy of the body: chunks of one program that differ
 * only in their microbatch share it (chunk.c; a few variants per program:
 * the first microbatch, the last, the ones between).
 *
 * Chunks are emitted in the schedule's order (schedule.c). A value crosses
 * to another device group as one dist.send per device (tuple_get, send,
 * tuple), right after the chunk that makes it. A gradient contribution
 * (a partial sum on the microbatch axis, see dp.c) is accumulated across
 * microbatches inside the chunk with an Add; the data-parallel reduction of
 * the accumulated gradient follows in S[g], or in the last microbatch's
 * backward chunk with overlap_grad_reduce, or, with ZeRO-2, as a
 * reduce-scatter in every chunk before the accumulation. Weight stashing
 * copies the stage's weights in the forward chunk and the backward chunk
 * uses the copy (stash.c decides which weights, when and which copy).
 *
 * Arguments of the distributed module are tuples over a group's devices:
 * each weight once per group that uses it, each batch-data argument once
 * per group and microbatch; the layout records them.
 */
#include "xform/pipeline_int.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void pl_fini(pl *P);

/* The device count of group g, and its device ids. */
static uint32_t
gdev(const pl *P, uint32_t g)
{
    return xf_gdev(P->c, g);
}

static const int32_t *
gdevs(const pl *P, uint32_t g)
{
    return P->devs + P->c->goff[g];
}

/* The per-device type of source value v under placement pl on group g (outside any body). */
static ir_id
group_local_type(pl *P, ir_id v, const xf_place *xpl, uint32_t g)
{
    xf_group_n(P->c, g, P->body.n);
    return xf_local_type(&P->body, v, xpl, -1);
}

/* ---- registry ---- */

static uint64_t
reg_hash(uint32_t kind, uint32_t v, uint32_t mb, uint32_t g)
{
    return di_mix64(((uint64_t)v << 32 | mb) ^ di_mix64((uint64_t)g << 8 | kind));
}

reg_ent *
xf_pl_reg_find(pl *P, uint32_t kind, uint32_t v, uint32_t mb, uint32_t g)
{
    uint64_t h;
    if (P->creg == 0)
        return NULL;
    h = reg_hash(kind, v, mb, g);
    for (uint32_t i = (uint32_t)h & (P->creg - 1);; i = (i + 1) & (P->creg - 1)) {
        reg_ent *e = &P->reg[i];
        if (e->kind == 0)
            return NULL;
        if (e->kind == kind && e->v == v && e->mb == mb && e->g == g)
            return e;
    }
}

void
xf_pl_reg_put(pl *P, uint32_t kind, uint32_t v, uint32_t mb, uint32_t g, ir_id tv, ir_id lt,
              const xf_place *p)
{
    reg_ent *e;
    if ((P->nreg + 1) * 2 > P->creg) {
        uint32_t oc = P->creg, nc = oc ? oc * 2 : 1024;
        reg_ent *old = P->reg;
        P->reg = di_xcalloc(nc, sizeof *P->reg);
        P->creg = nc;
        P->nreg = 0;
        for (uint32_t i = 0; i < oc; i++)
            if (old[i].kind)
                xf_pl_reg_put(P, old[i].kind, old[i].v, old[i].mb, old[i].g, old[i].tv, old[i].lt,
                              &old[i].pl);
        di_free(old);
    }
    assert(kind != 0 && P->creg > 0 && (P->creg & (P->creg - 1)) == 0);
    e = xf_pl_reg_find(P, kind, v, mb, g);
    if (e == NULL) {
        uint64_t h = reg_hash(kind, v, mb, g);
        uint32_t i = (uint32_t)h & (P->creg - 1);
        while (P->reg[i].kind)
            i = (i + 1) & (P->creg - 1);
        e = &P->reg[i];
        e->kind = kind;
        e->v = v;
        e->mb = mb;
        e->g = g;
        P->nreg++;
    }
    e->tv = tv;
    e->lt = lt;
    e->pl = *p;
}

/* ---- stages ---- */

static prog *
prog_of(pl *P, int kind, uint32_t stage)
{
    assert(stage < (kind == PROG_S ? P->c->pp : P->c->K));
    if (kind == PROG_S)
        return &P->prog[2 * P->c->K + stage];
    return &P->prog[kind * P->c->K + stage];
}

static void
add_need(pl *P, ir_id v, uint32_t g, int step)
{
    for (uint32_t i = P->needhead[v]; i; i = P->needs[i - 1].next)
        if (P->needs[i - 1].g == g && P->needs[i - 1].step == step)
            return;
    DI_GROW(&P->needs, &P->cneed, P->nneed + 1);
    P->needs[P->nneed].g = g;
    P->needs[P->nneed].step = (uint8_t)step;
    P->needs[P->nneed].next = P->needhead[v];
    P->nneed++;
    P->needhead[v] = P->nneed;
}

/*
 * A weight that chunks of several groups read (a tied embedding: the first
 * stage's lookup and the last stage's logits) is held by each of them, as
 * Megatron-LM's last stage holds the output layer's copy of the word
 * embeddings: each copy has its own optimizer state and its own update, from
 * the combined gradient (which Megatron-LM all-reduces over the first and
 * last stages; here the group that combines the contributions sends the sum
 * to the others). So the update of such a weight also runs in the step
 * program of every other group that reads it; its results there are that
 * group's copy, which the module does not return.
 */
static void
mirror_shared_updates(pl *P)
{
    xf_ctx *c = P->c;
    const ir_module *m = c->m;
    uint32_t nv = m->nvalue ? m->nvalue : 1, n = 0, cap = 0;
    uint32_t *last = di_xcalloc(nv, sizeof *last); /* 1 + the last group recorded reading it */
    uint32_t *head = di_xcalloc(nv, sizeof *head); /* 1 + its latest (group, next) entry */
    struct xg {
        uint32_t g, next;
    } *x = NULL;
    /* The groups whose chunks read each weight, in group order (so each once). */
    for (uint32_t g = 0; g < c->pp; g++)
        for (uint32_t k = g; k < c->K; k += c->pp)
            for (int kind = PROG_F; kind <= PROG_B; kind++) {
                const prog *p = prog_of(P, kind, k);
                for (uint32_t j = 0; j < p->ops.n; j++) {
                    const ir_op *o = &m->ops[p->ops.v[j]];
                    for (uint32_t q = 0; q < o->ninput; q++) {
                        ir_id v = m->refs[o->inputs + q];
                        if (m->values[v].def != 0 || (c->vflags[v] & (XF_V_DATA | XF_V_CONST)) ||
                            last[v] == g + 1)
                            continue;
                        last[v] = g + 1;
                        DI_GROW(&x, &cap, n + 1);
                        x[n].g = g;
                        x[n].next = head[v];
                        head[v] = ++n;
                    }
                }
            }
    for (uint32_t g = 0; g < c->pp; g++) {
        prog *s = prog_of(P, PROG_S, g);
        uint32_t nops = s->ops.n;
        for (uint32_t j = 0; j < nops; j++) {
            ir_id op = s->ops.v[j];
            const ir_op *o = &m->ops[op];
            ir_id w;
            if (!(ir_opkind_info(o->kind)->flags & IR_OPF_OPTIM) || o->ninput < 1 ||
                P->home[op] != (int32_t)(s - P->prog)) /* mirrored here */
                continue;
            w = m->refs[o->inputs];
            if (m->values[w].def != 0)
                continue;
            for (uint32_t e = head[w]; e != 0; e = x[e - 1].next)
                if (x[e - 1].g != g)
                    idl_push(&prog_of(P, PROG_S, x[e - 1].g)->ops, op);
        }
    }
    di_free(x);
    di_free(head);
    di_free(last);
}

static int
build_programs(pl *P)
{
    xf_ctx *c = P->c;
    const ir_module *m = c->m;
    const ir_region *fr = &m->regions[c->func];
    uint32_t K = c->K, nprog = 2 * K + c->pp;
    uint32_t *pmark = di_xcalloc(m->nop ? m->nop : 1, sizeof *pmark); /* program id + 1 */
    P->prog = di_xcalloc(nprog, sizeof *P->prog);
    P->nprog = nprog;
    for (uint32_t k = 0; k < K; k++) {
        prog_of(P, PROG_F, k)->kind = PROG_F;
        prog_of(P, PROG_F, k)->stage = k;
        prog_of(P, PROG_F, k)->group = k % c->pp;
        prog_of(P, PROG_B, k)->kind = PROG_B;
        prog_of(P, PROG_B, k)->stage = k;
        prog_of(P, PROG_B, k)->group = k % c->pp;
    }
    for (uint32_t g = 0; g < c->pp; g++) {
        prog_of(P, PROG_S, g)->kind = PROG_S;
        prog_of(P, PROG_S, g)->stage = g;
        prog_of(P, PROG_S, g)->group = g;
    }
    P->home = di_xmalloc((m->nop ? m->nop : 1) * sizeof *P->home);
    for (uint32_t i = 0; i < m->nop; i++)
        P->home[i] = -1;

    /* Deferred backward ops: every non-constant input is a partial sum over microbatches. */
    for (uint32_t i = 0; i < fr->nop; i++) {
        ir_id op = fr->ops[i];
        const ir_op *o = &m->ops[op];
        int all = o->ninput > 0, any = 0;
        if (c->op[op].phase != XF_PH_BACKWARD || c->n[XF_MB] <= 1)
            continue;
        if (o->noutput && (c->vflags[o->outputs] & XF_V_CONST))
            continue;
        /* A widening Cast (a gradient to f32) runs per microbatch: accumulation is in f32. */
        if (o->kind == IR_OP_CAST && o->noutput &&
            ir_dtype_size((ir_dtype)m->types[m->values[o->outputs].type].dtype) >
                ir_dtype_size((ir_dtype)m->types[m->values[m->refs[o->inputs]].type].dtype)) {
            ir_id d = m->values[m->refs[o->inputs]].def;
            /* Unless its input is itself combined once per step (a tied weight's gradients). */
            if (d == 0 || c->op[d].phase != XF_PH_STEP)
                continue;
        }
        for (uint32_t k = 0; k < o->ninput; k++) {
            ir_id v = m->refs[o->inputs + k];
            if (c->vflags[v] & XF_V_CONST)
                continue;
            any = 1;
            if (c->place[v].a[XF_MB] != XF_P)
                all = 0;
        }
        if (all && any)
            c->op[op].phase = XF_PH_STEP;
    }

    /* Home programs and op lists. */
    for (uint32_t i = 0; i < fr->nop; i++) {
        ir_id op = fr->ops[i];
        const ir_op *o = &m->ops[op];
        const xf_opinfo *oi = &c->op[op];
        prog *p;
        if (o->noutput && (c->vflags[o->outputs] & XF_V_CONST))
            continue;
        if (o->noutput == 0)
            continue;
        if (oi->phase == XF_PH_STEP)
            p = prog_of(P, PROG_S, (uint32_t)oi->stage % c->pp);
        else if (oi->phase == XF_PH_BACKWARD)
            p = prog_of(P, PROG_B, (uint32_t)oi->stage);
        else
            p = prog_of(P, PROG_F, (uint32_t)oi->stage);
        P->home[op] = (int32_t)(p - P->prog);
        idl_push(&p->ops, op);
    }
    mirror_shared_updates(P);

    /* Recomputation (recompute.c): the backward chunk also runs forward ops of its stage. */
    if (c->s.recompute != STRATEGY_RECOMPUTE_NONE) {
        if (c->s.recompute == STRATEGY_RECOMPUTE_SELECTIVE)
            xf_recompute_mark(c);
        else if (c->s.recompute == STRATEGY_RECOMPUTE_SELECTIVE_OP)
            xf_recompute_mark_ops(c);
        for (uint32_t k = 0; k < K; k++) {
            prog *b = prog_of(P, PROG_B, k), *f = prog_of(P, PROG_F, k);
            ir_id *re = di_xmalloc((f->ops.n + 1) * sizeof *re);
            ir_id *rest = di_xmalloc((f->ops.n + 1) * sizeof *rest);
            uint32_t nrest;
            uint32_t nre = xf_recompute_ops(c, f->ops.v, f->ops.n, b->ops.v, b->ops.n, P->home,
                                            (int32_t)(f - P->prog), re, rest, &nrest, P->restref);
            idlist ops = {0};
            /*
             * Each recomputed op is emitted right before its first use
             * (lazily, xf_pl_emit_chunk), so one layer's recomputed activations
             * (or, selective, one layer's scores) are live at a time.
             */
            for (uint32_t j = 0; j < nre; j++) {
                idl_push(&ops, re[j]);
                idl_push(&b->lazy, re[j]);
            }
            /*
             * Full recomputation's other forward ops (xf_recompute_ops' rest) run
             * before the first backward op of their layer, as Megatron-LM
             * recomputes a layer's forward before its backward.
             */
            {
                ir_id *seq = di_xmalloc((b->ops.n + nrest + 1) * sizeof *seq);
                uint32_t nseq = xf_recompute_place(c, b->ops.v, b->ops.n, rest, nrest, seq);
                for (uint32_t j = 0; j < nseq; j++)
                    idl_push(&ops, seq[j]);
                di_free(seq);
            }
            for (uint32_t j = 0; j < nrest; j++)
                P->isrest[rest[j]] = 1;
            di_free(b->ops.v);
            b->ops = ops;
            di_free(rest);
            di_free(re);
        }
    }

    /* External inputs of every program. */
    for (uint32_t pi = 0; pi < nprog; pi++) {
        prog *p = &P->prog[pi];
        P->markgen++;
        for (uint32_t j = 0; j < p->ops.n; j++)
            pmark[p->ops.v[j]] = pi + 1;
        for (uint32_t j = 0; j < p->ops.n; j++) {
            const ir_op *o = &m->ops[p->ops.v[j]];
            for (uint32_t q = 0; q < o->ninput; q++) {
                ir_id v = m->refs[o->inputs + q], d = m->values[v].def;
                if (c->vflags[v] & XF_V_CONST)
                    continue;
                if (d && pmark[d] == pi + 1)
                    continue;
                if (P->mark[v] == P->markgen)
                    continue;
                P->mark[v] = P->markgen;
                idl_push(&p->in, v);
            }
        }
    }

    /* Outputs, leaves and the groups that need each value. */
    for (uint32_t pi = 0; pi < nprog; pi++) {
        prog *p = &P->prog[pi];
        for (uint32_t j = 0; j < p->in.n; j++) {
            ir_id v = p->in.v[j], d = m->values[v].def;
            prog *h;
            if (d == 0)
                continue; /* an argument */
            if (P->home[d] < 0)
                return di_error_set(c->err, DI_EINTERNAL, "value without a home program");
            h = &P->prog[P->home[d]];
            if (h->kind == PROG_S && p->kind != PROG_S) {
                di_free(pmark);
                return di_error_set(c->err, DI_EUNSUPPORTED,
                                    "%%%s is computed once per step but used per microbatch",
                                    ir_str_get(m, m->values[v].name));
            }
            /*
             * A gradient contribution the step program reads: accumulated across
             * microbatches, or, with one microbatch and overlap_grad_reduce, a
             * data-parallel partial sum that the backward chunk reduces by
             * buckets as it goes (PyTorch DDP without gradient accumulation);
             * under ZeRO-2/3 always, as FSDP and DeepSpeed reduce-scatter each
             * module's or bucket's gradients during the backward pass whether
             * or not the reduction overlaps it, so the whole gradient is never
             * held.
             */
            if (p->kind == PROG_S && h->kind != PROG_S &&
                (c->place[v].a[XF_MB] == XF_P ||
                 (c->n[XF_MB] == 1 && (c->s.overlap_grad_reduce || c->s.zero >= 2) &&
                  (c->place[v].a[XF_DP] == XF_P || c->place[v].a[XF_EDP] == XF_P)))) {
                if (!P->isleaf[v]) {
                    P->isleaf[v] = 1;
                    idl_push(&h->leaf, v);
                }
            } else if (!P->isout[v]) {
                idl_push(&h->out, v);
                P->isout[v] = h->out.n;
            }
            if (p->group != h->group)
                add_need(P, v, p->group, p->kind == PROG_S);
        }
    }
    /* Results. */
    for (uint32_t r = 0; r < fr->nresult; r++) {
        ir_id v = fr->results[r], d = m->values[v].def;
        prog *h;
        if (d == 0 || (c->vflags[v] & XF_V_CONST))
            continue; /* arguments and constants: handled by the assembly */
        h = &P->prog[P->home[d]];
        if (h->kind != PROG_S && c->place[v].a[XF_MB] == XF_P) {
            prog *s = prog_of(P, PROG_S, h->group);
            if (!P->isleaf[v]) {
                P->isleaf[v] = 1;
                idl_push(&h->leaf, v);
            }
            idl_push(&s->res, r);
            /* The step program reads the accumulated value. */
            {
                int found = 0;
                for (uint32_t q = 0; q < s->in.n && !found; q++)
                    found = s->in.v[q] == v;
                if (!found)
                    idl_push(&s->in, v);
            }
        } else {
            idl_push(&h->res, r);
        }
    }
    /* Stashing (stash.c): the backward chunk's weights come from the forward chunk's copies. */
    if (c->s.stash != STRATEGY_STASH_NONE) {
        for (uint32_t k = 0; k < K; k++) {
            prog *b = prog_of(P, PROG_B, k), *f = prog_of(P, PROG_F, k);
            ir_id *w = di_xmalloc((b->in.n ? b->in.n : 1) * sizeof *w);
            uint32_t nw = xf_stash_select(c, b->in.v, b->in.n, w);
            for (uint32_t j = 0; j < nw; j++) {
                int found = 0;
                idl_push(&b->stash, w[j]);
                idl_push(&f->stash, w[j]);
                for (uint32_t q = 0; q < f->in.n && !found; q++)
                    found = f->in.v[q] == w[j];
                if (!found)
                    idl_push(&f->in, w[j]);
            }
            di_free(w);
        }
    }
    di_free(pmark);
    return 0;
}

/* ---- emission helpers ---- */

static void
layout_arg(pl *P, uint32_t index, uint32_t mb, uint32_t g, const xf_place *p)
{
    xform_layout *l = P->lay;
    DI_GROW(&l->args, &P->cargs, l->nargs + 1);
    l->args[l->nargs].index = index;
    l->args[l->nargs].microbatch = mb;
    l->args[l->nargs].stage = g;
    memcpy(l->args[l->nargs].place, p->a, sizeof p->a);
    l->nargs++;
}

void
xf_pl_layout_result(pl *P, uint32_t index, uint32_t mb, uint32_t g, const xf_place *p, ir_id tv)
{
    xform_layout *l = P->lay;
    DI_GROW(&l->results, &P->cres, l->nresults + 1);
    l->results[l->nresults].index = index;
    l->results[l->nresults].microbatch = mb;
    l->results[l->nresults].stage = g;
    memcpy(l->results[l->nresults].place, p->a, sizeof p->a);
    l->nresults++;
    ir_region_add_result(P->out, P->func, tv);
}

/* The tuple over group g's devices of per-device type lt (on the device variable). */
static ir_id
group_tuple(pl *P, ir_id lt, uint32_t g)
{
    uint32_t i;
    ir_id *elems = P->tmp, tt;
    if ((P->ntt + 1) * 2 > P->ctt) {
        uint32_t oc = P->ctt, nc = oc ? oc * 2 : 256;
        tt_ent *old = P->tt;
        P->tt = di_xcalloc(nc, sizeof *P->tt);
        P->ctt = nc;
        for (uint32_t j = 0; j < oc; j++) {
            if (old[j].lt == 0)
                continue;
            i = (uint32_t)(reg_hash(0, old[j].lt, 0, old[j].g) & (nc - 1));
            while (P->tt[i].lt)
                i = (i + 1) & (nc - 1);
            P->tt[i] = old[j];
        }
        di_free(old);
    }
    i = (uint32_t)(reg_hash(0, lt, 0, g) & (P->ctt - 1));
    for (; P->tt[i].lt; i = (i + 1) & (P->ctt - 1))
        if (P->tt[i].lt == lt && P->tt[i].g == g)
            return P->tt[i].tt;
    for (uint32_t k = 0; k < gdev(P, g); k++)
        elems[k] = ir_type_with_device(P->out, lt, gdevs(P, g)[k], 0);
    tt = ir_type_tuple(P->out, gdev(P, g), elems);
    P->tt[i].lt = lt;
    P->tt[i].g = g;
    P->tt[i].tt = tt;
    P->ntt++;
    return tt;
}

/*
 * Sends tuple tv of per-device type lt to group g2, device k to device k, as
 * one element-wise dist.send (the simulator prices the pairs as symmetric
 * when both groups are); returns the new tuple. The type is set from the
 * group tuple type, not inferred.
 */
static ir_id
send_tuple(pl *P, ir_id tv, ir_id lt, uint32_t g2)
{
    ir_module *o = P->out;
    ir_id dst = group_tuple(P, lt, g2), snd;
    int64_t *dl = P->tmpdev;
    for (uint32_t k = 0; k < gdev(P, g2); k++)
        dl[k] = gdevs(P, g2)[k];
    snd = ir_op_add(o, P->func, IR_OP_SEND, 1, &tv, 1, &dst, NULL);
    ir_op_set_ints(o, snd, "devices", gdev(P, g2), dl);
    return ir_op_output(o, snd, 0);
}

/* ---- re-layout between groups of different shapes ---- */

/* A box: per dimension, its start and length. */
typedef struct box {
    int64_t lo[IR_MAX_RANK], len[IR_MAX_RANK];
} box;

/* The block of the per-microbatch dims G that mesh coordinates (d, t) hold under pl on sizes n. */
static void
block_of(const xf_place *xpl, const uint32_t *n, uint32_t d, uint32_t t, uint32_t rank,
         const int64_t *G, box *bx)
{
    for (uint32_t i = 0; i < rank; i++) {
        bx->lo[i] = 0;
        bx->len[i] = G[i];
        /* Tensor outermost, then data (as xf_local_dims and layout.c). */
        if (xpl->a[XF_TP] == (int8_t)i) {
            bx->len[i] /= n[XF_TP];
            bx->lo[i] += bx->len[i] * t;
        }
        if (xpl->a[XF_DP] == (int8_t)i) {
            bx->len[i] /= n[XF_DP];
            bx->lo[i] += bx->len[i] * d;
        }
    }
}

/* One piece a receiving device gets: from which sending device, which box of its block. */
typedef struct piece {
    uint32_t from, to;   /* device indices in their groups */
    box src;             /* in the sender's local block */
    int64_t at[IR_MAX_RANK]; /* where it sits in the receiver's block */
    int whole;           /* the sender's whole block */
    ir_id v;             /* the piece on the receiver */
} piece;

static int
cmp_piece(const void *a, const void *b)
{
    const piece *x = a, *y = b;
    if (x->to != y->to)
        return x->to < y->to ? -1 : 1;
    for (uint32_t i = 0; i < IR_MAX_RANK; i++)
        if (x->at[i] != y->at[i])
            return x->at[i] < y->at[i] ? -1 : 1;
    return 0;
}

/* Concatenates pieces ps[0..n) (sorted by position) of one receiver into its block. */
static int
assemble(pl *P, piece *ps, uint32_t n, uint32_t rank, ir_id *out)
{
    ir_id *in;
    uint32_t dim = rank, k = 0, nin = 0;
    int rc = 0;
    if (n == 1) {
        *out = ps[0].v;
        return 0;
    }
    /* The outermost dimension along which the pieces' positions differ. */
    for (uint32_t i = 0; i < rank && dim == rank; i++)
        for (uint32_t j = 1; j < n; j++)
            if (ps[j].at[i] != ps[0].at[i]) {
                dim = i;
                break;
            }
    if (dim == rank)
        return di_error_set(P->c->err, DI_EINTERNAL, "re-layout: overlapping pieces");
    in = di_xmalloc(n * sizeof *in);
    /* Runs of equal position along dim, each assembled inside first, then concatenated. */
    while (k < n && rc == 0) {
        uint32_t j = k + 1;
        while (j < n && ps[j].at[dim] == ps[k].at[dim])
            j++;
        rc = assemble(P, ps + k, j - k, rank, &in[nin++]);
        k = j;
    }
    if (rc == 0) {
        ir_id op = ir_op_add(P->out, P->func, IR_OP_CONCAT, nin, in, 1, NULL, NULL);
        ir_op_set_int(P->out, op, "axis", dim);
        if ((rc = xf_infer(P->out, op, P->c->err)) == 0)
            *out = ir_op_output(P->out, op, 0);
    }
    di_free(in);
    return rc;
}

/*
 * Converts tuple tv (value v, per-device type lt, placement from, on group
 * g) to placement to, in a pmap on g with the collectives xf_body_convert
 * chooses; *out is the pmap's result tuple.
 */
static int
convert_on(pl *P, uint32_t g, ir_id v, ir_id tv, ir_id lt, const xf_place *from,
           const xf_place *to, ir_id *out)
{
    xf_body *b = &P->body;
    xf_local l, r;
    ir_id pm;
    int rc;
    xf_body_begin(b, P->mesh[g], g);
    l.v = xf_body_arg_typed(b, v, lt, from);
    l.pl = *from;
    if ((rc = xf_body_convert(b, v, &l, to, &r)) != 0)
        return rc;
    ir_region_add_result(P->out, b->region, r.v);
    if ((rc = xf_pl_make_pmap(P, g, &tv, 1, b->region, 0, &pm)) != 0)
        return rc;
    *out = ir_op_output(P->out, pm, 0);
    return 0;
}

/*
 * Re-lays out registry entry e (on group e->g) for group h of another shape
 * (nested parallelism): partial sums are summed on e->g first (a pmap with
 * the all-reduces), then every device of h gets the parts of its block from
 * devices of e->g that hold them (a Slice where a part is less than a
 * sender's block, a replica chosen by the receiver's rank so that senders
 * share the load), sent in rounds of element-wise dist.sends, and
 * concatenates them in position order.
 */
static int
relayout(pl *P, const reg_ent *e, uint32_t h, reg_ent *out)
{
    xf_ctx *c = P->c;
    ir_module *o = P->out;
    uint32_t g = e->g, ng[XF_NAXIS], nh[XF_NAXIS], rank, np = 0, cp;
    ir_id v = e->v, src = e->tv, *from, lt, *sget, *el;
    uint32_t nr = gdev(P, h), *first, *cnt, *idx, rounds = 0;
    int64_t *dl;
    xf_place A = e->pl, T = e->pl, mbonly = xf_place_rep();
    int64_t G[IR_MAX_RANK];
    piece *ps;
    int rc = 0;
    mbonly.a[XF_MB] = e->pl.a[XF_MB];
    xf_group_n(c, g, ng);
    xf_group_n(c, h, nh);
    /* The target: where g's axis has size 1 the value is whole, and follows the plan. */
    for (int a = XF_DP; a < XF_NAXIS; a++)
        if (ng[a] <= 1)
            T.a[a] = c->place[v].a[a];
    T = xf_xfer_place(c, v, &T, g, h);
    T = xf_place_on(&T, nh);
    /* Partial sums: summed on the sending group. */
    for (int a = XF_DP; a < XF_NAXIS; a++)
        if (A.a[a] == XF_P)
            A.a[a] = XF_R;
    if (!xf_place_eq(&A, &e->pl) && (rc = convert_on(P, g, v, src, e->lt, &e->pl, &A, &src)) != 0)
        return rc;
    if (xf_local_dims(c, v, &mbonly, ng, G) != 0)
        return di_error_set(c->err, DI_EINTERNAL, "re-layout: no per-microbatch shape");
    rank = o->types[e->lt].rank;
    /* The pieces: per receiver, the sender blocks its block meets. */
    cp = nr * 4;
    ps = di_xmalloc(cp * sizeof *ps);
    for (uint32_t r = 0; r < nr; r++) {
        box want;
        uint32_t ds0 = 0, ds1 = ng[XF_DP], ts0 = 0, ts1 = ng[XF_TP];
        block_of(&T, nh, r / nh[XF_TP], r % nh[XF_TP], rank, G, &want);
        /* Replicated axes of the sender: one replica, chosen by the receiver's rank. */
        if (!XF_IS_S(A.a[XF_DP])) {
            ds0 = r % ng[XF_DP];
            ds1 = ds0 + 1;
        }
        if (!XF_IS_S(A.a[XF_TP])) {
            ts0 = r % ng[XF_TP];
            ts1 = ts0 + 1;
        }
        for (uint32_t ds = ds0; ds < ds1; ds++)
            for (uint32_t ts = ts0; ts < ts1; ts++) {
                box have;
                piece pc;
                int empty = 0;
                block_of(&A, ng, ds, ts, rank, G, &have);
                memset(&pc, 0, sizeof pc);
                pc.whole = 1;
                for (uint32_t i = 0; i < rank; i++) {
                    int64_t lo = want.lo[i] > have.lo[i] ? want.lo[i] : have.lo[i];
                    int64_t hi1 = want.lo[i] + want.len[i], hi2 = have.lo[i] + have.len[i];
                    int64_t hi = hi1 < hi2 ? hi1 : hi2;
                    if (hi <= lo) {
                        empty = 1;
                        break;
                    }
                    pc.src.lo[i] = lo - have.lo[i];
                    pc.src.len[i] = hi - lo;
                    pc.at[i] = lo - want.lo[i];
                    if (pc.src.lo[i] != 0 || pc.src.len[i] != have.len[i])
                        pc.whole = 0;
                }
                if (empty)
                    continue;
                pc.from = ds * ng[XF_TP] + ts;
                pc.to = r;
                DI_GROW(&ps, &cp, np + 1);
                ps[np++] = pc;
            }
    }
    /* The senders' parts, sliced where needed. */
    qsort(ps, np, sizeof *ps, cmp_piece);
    from = di_xmalloc((np + 1) * sizeof *from);
    sget = di_xcalloc(gdev(P, g) + 1, sizeof *sget);
    for (uint32_t i = 0; i < np && rc == 0; i++) {
        piece *pc = &ps[i];
        ir_id x = sget[pc->from];
        if (x == 0) {
            ir_id op = ir_op_add(o, P->func, IR_OP_TUPLEGET, 1, &src, 1, NULL, NULL);
            ir_op_set_int(o, op, "index", pc->from);
            if ((rc = xf_infer(o, op, c->err)) != 0)
                break;
            x = sget[pc->from] = ir_op_output(o, op, 0);
        }
        if (!pc->whole) {
            int64_t st[IR_MAX_RANK], en[IR_MAX_RANK], ax[IR_MAX_RANK];
            uint32_t na = 0;
            ir_id op;
            for (uint32_t d = 0; d < rank; d++) {
                const ir_type *xt = &o->types[o->values[x].type];
                if (pc->src.lo[d] == 0 && pc->src.len[d] == o->ints[xt->dims + d])
                    continue;
                st[na] = pc->src.lo[d];
                en[na] = pc->src.lo[d] + pc->src.len[d];
                ax[na++] = d;
            }
            op = ir_op_add(o, P->func, IR_OP_SLICE, 1, &x, 1, NULL, NULL);
            ir_op_set_ints(o, op, "starts", na, st);
            ir_op_set_ints(o, op, "ends", na, en);
            ir_op_set_ints(o, op, "axes", na, ax);
            ir_op_set_string(o, op, "dist.phase", "relayout");
            if ((rc = xf_infer(o, op, c->err)) != 0)
                break;
            x = ir_op_output(o, op, 0);
        }
        from[i] = x;
    }
    /*
     * Sent in rounds, each an element-wise dist.send that gives every
     * receiver at most one part (round k: receiver r's part (k + r) mod its
     * count, so that senders take turns).
     */
    /* Each receiver's parts: ps[first[r] .. first[r] + cnt[r]) (sorted by receiver). */
    first = di_xcalloc(2 * (size_t)nr + 1, sizeof *first);
    cnt = first + nr;
    for (uint32_t i = np; i-- > 0;) {
        first[ps[i].to] = i;
        if (++cnt[ps[i].to] > rounds)
            rounds = cnt[ps[i].to];
    }
    for (uint32_t r = 0; r < nr && rc == 0; r++)
        if (cnt[r] == 0)
            rc = di_error_set(c->err, DI_EINTERNAL, "re-layout: device %u gets nothing", r);
    el = di_xmalloc((nr + 1) * sizeof *el);
    dl = di_xmalloc((nr + 1) * sizeof *dl);
    idx = di_xmalloc((nr + 1) * sizeof *idx);
    for (uint32_t k = 0; k < rounds && rc == 0; k++) {
        ir_id tup, op;
        uint32_t ne = 0;
        for (uint32_t r = 0; r < nr; r++) {
            if (cnt[r] <= k)
                continue;
            idx[ne] = first[r] + (k + r) % cnt[r];
            el[ne] = from[idx[ne]];
            dl[ne++] = gdevs(P, h)[r];
        }
        op = ir_op_add(o, P->func, IR_OP_TUPLE, ne, el, 1, NULL, NULL);
        if ((rc = xf_infer(o, op, c->err)) == 0) {
            tup = ir_op_output(o, op, 0);
            op = ir_op_add(o, P->func, IR_OP_SEND, 1, &tup, 1, NULL, NULL);
            ir_op_set_ints(o, op, "devices", ne, dl);
            rc = xf_infer(o, op, c->err);
            tup = ir_op_output(o, op, 0);
        }
        for (uint32_t i = 0; i < ne && rc == 0; i++) {
            ir_id get = ir_op_add(o, P->func, IR_OP_TUPLEGET, 1, &tup, 1, NULL, NULL);
            ir_op_set_int(o, get, "index", i);
            if ((rc = xf_infer(o, get, c->err)) == 0)
                ps[idx[i]].v = ir_op_output(o, get, 0);
        }
    }
    /* Each receiver's parts, in position order, concatenated into its block. */
    if (rc == 0) {
        ir_id *blk = di_xmalloc(nr * sizeof *blk), op;
        for (uint32_t r = 0; r < nr && rc == 0; r++)
            rc = assemble(P, ps + first[r], cnt[r], rank, &blk[r]);
        if (rc == 0) {
            lt = group_local_type(P, v, &T, h);
            op = ir_op_add(o, P->func, IR_OP_TUPLE, nr, blk, 1, NULL, NULL);
            o->values[ir_op_output(o, op, 0)].type = group_tuple(P, lt, h);
            out->tv = ir_op_output(o, op, 0);
            out->lt = lt;
            out->pl = T;
            for (uint32_t r = 0; r < nr && rc == 0; r++)
                if (o->values[blk[r]].type != ir_type_with_device(o, lt, gdevs(P, h)[r], 0))
                    rc = di_error_set(c->err, DI_EINTERNAL, "re-layout: block %u has the wrong "
                                      "shape", r);
        }
        di_free(blk);
    }
    di_free(first);
    di_free(el);
    di_free(dl);
    di_free(idx);
    di_free(ps);
    di_free(from);
    di_free(sget);
    return rc;
}

int
xf_pl_gather_pending(pl *P, int64_t g, const prog *p, uint32_t mb)
{
    uint32_t keep = 0;
    int rc = 0;
    /* p's inputs are marked by xf_pl_flush, which the chunk calls first. */
    for (uint32_t i = 0; i < P->npgat; i++) {
        pl_gather q = P->pgat[i];
        const reg_ent *e = &q.ent;
        ir_id tv;
        int now = g < 0 || (e->g == (uint32_t)g && p &&
                            (e->mb == mb || p->kind == PROG_S) &&
                            P->inmark[e->v] == P->inmark_gen);
        if (!now || rc != 0) {
            P->pgat[keep++] = q;
            continue;
        }
        if ((rc = convert_on(P, e->g, e->v, e->tv, e->lt, &e->pl, &q.pl, &tv)) == 0)
            xf_pl_reg_put(P, e->kind, e->v, e->mb, e->g, tv, q.lt, &q.pl);
    }
    P->npgat = keep;
    return rc;
}

void
xf_pl_defer(pl *P, const reg_ent *e)
{
    DI_GROW(&P->pend, &P->cpend, P->npend + 1);
    P->pend[P->npend++] = *e;
}

int
xf_pl_flush(pl *P, int64_t g, const prog *p, uint32_t mb)
{
    uint32_t keep = 0;
    int rc = 0;
    /* p's inputs marked once (a chunk of a stage reads many, and many are pending). */
    if (p) {
        if (++P->inmark_gen == 0) {
            memset(P->inmark, 0, P->c->m->nvalue * sizeof *P->inmark);
            P->inmark_gen = 1;
        }
        for (uint32_t j = 0; j < p->in.n; j++)
            P->inmark[p->in.v[j]] = P->inmark_gen;
    }
    for (uint32_t i = 0; i < P->npend; i++) {
        reg_ent e = P->pend[i];
        int now = g < 0 || e.g == (uint32_t)g ||
                  (p && e.mb == mb && P->inmark[e.v] == P->inmark_gen);
        if (!now || rc != 0) {
            P->pend[keep++] = e;
            continue;
        }
        rc = xf_pl_send_needs(P, &e, 0);
    }
    P->npend = keep;
    return rc;
}

/*
 * The dimension along which a value replicated over the tensor-parallel
 * ranks of its group crosses to another group in tp slices (Megatron-LM's
 * scatter_gather_tensors_in_pipeline), or -1 (tp 1, a value split or partial
 * over the tensor axis already, as under sequence parallelism, or no
 * dimension that tp divides and no other axis splits): the innermost such
 * dimension of its per-device block.
 */
static int
scatter_dim(pl *P, const reg_ent *e)
{
    uint32_t n[XF_NAXIS];
    const ir_type *t = &P->out->types[e->lt];
    xf_group_n(P->c, e->g, n);
    if (n[XF_TP] <= 1 || e->pl.a[XF_TP] != XF_R || t->kind != IR_TYPE_TENSOR)
        return -1;
    for (uint32_t d = t->rank; d-- > 0;) {
        int64_t len = P->out->ints[t->dims + d];
        int taken = 0;
        for (int a = 0; a < XF_NAXIS; a++)
            taken |= e->pl.a[a] == (int8_t)d;
        if (!taken && len > 0 && len % n[XF_TP] == 0)
            return (int)d;
    }
    return -1;
}

/* Sends registry entry e to every group that needs its value at this level. */
int
xf_pl_send_needs(pl *P, const reg_ent *e0, int step)
{
    reg_ent e = *e0;
    for (uint32_t i = P->needhead[e.v]; i; i = P->needs[i - 1].next) {
        const need *n = &P->needs[i - 1];
        ir_id tv;
        int d;
        if (n->step != step || n->g == e.g || xf_pl_reg_find(P, e.kind, e.v, e.mb, n->g))
            continue;
        if (!xf_same_shape(P->c, e.g, n->g)) {
            reg_ent r;
            int rc = relayout(P, &e, n->g, &r);
            if (rc != 0)
                return rc;
            xf_pl_reg_put(P, e.kind, e.v, e.mb, n->g, r.tv, r.lt, &r.pl);
            continue;
        }
        if ((d = scatter_dim(P, &e)) >= 0) {
            /*
             * Megatron-LM's scatter/gather of the tensor-parallel replicas: each rank
             * sends its 1/tp slice (no copy of the others'), the receiving ranks
             * all-gather the slices over their tensor axis (inside a node).
             */
            xf_place S = e.pl;
            ir_id lts, ts;
            int rc;
            S.a[XF_TP] = (int8_t)d;
            lts = group_local_type(P, e.v, &S, e.g);
            if ((rc = convert_on(P, e.g, e.v, e.tv, e.lt, &e.pl, &S, &ts)) != 0)
                return rc;
            ts = send_tuple(P, ts, lts, n->g);
            /* Registered as slices; gathered before the receiver's first reader. */
            {
                reg_ent r = {e.kind, e.v, e.mb, n->g, ts, lts, S};
                xf_pl_reg_put(P, r.kind, r.v, r.mb, r.g, r.tv, r.lt, &r.pl);
                DI_GROW(&P->pgat, &P->cpgat, P->npgat + 1);
                P->pgat[P->npgat++] = (pl_gather){r, e.lt, e.pl};
            }
            continue;
        } else {
            tv = send_tuple(P, e.tv, e.lt, n->g);
        }
        xf_pl_reg_put(P, e.kind, e.v, e.mb, n->g, tv, e.lt, &e.pl);
    }
    return 0;
}

/*
 * The entry of value v (an output of a chunk program) for microbatch mb on
 * group g: on the home program's group it is in the program's table of
 * outputs, elsewhere (sent) in the registry.
 */
static const reg_ent *
val_find(pl *P, ir_id v, uint32_t mb, uint32_t g)
{
    const prog *h = &P->prog[P->home[P->c->m->values[v].def]];
    if (h->group == g) {
        const reg_ent *e;
        if (h->vals == NULL || P->isout[v] == 0)
            return NULL;
        e = &h->vals[(size_t)mb * h->out.n + P->isout[v] - 1];
        return e->kind ? e : NULL;
    }
    return xf_pl_reg_find(P, REG_VAL, v, mb, g);
}

/* The registry entry holding input v of program p for microbatch mb on its group. */
const reg_ent *
xf_pl_resolve(pl *P, const prog *p, ir_id v, uint32_t mb)
{
    xf_ctx *c = P->c;
    const ir_module *m = c->m;
    uint32_t g = p->group, last = c->m_emit - 1;
    ir_id d = m->values[v].def;
    if (d == 0) {
        if (c->vflags[v] & XF_V_DATA)
            return xf_pl_reg_find(P, REG_ARG, v, mb, g);
        if (p->kind == PROG_B && c->s.stash != STRATEGY_STASH_NONE) {
            for (uint32_t j = 0; j < p->stash.n; j++)
                if (p->stash.v[j] == v)
                    return xf_pl_reg_find(P, REG_STASH, v, xf_stash_version(c, mb), g);
        }
        if (p->kind != PROG_S) {
            const reg_ent *e = xf_pl_reg_find(P, REG_GATHERED, v, 0, g);
            if (e)
                return e;
        }
        return xf_pl_reg_find(P, REG_ARG, v, 0, g);
    }
    if (P->prog[P->home[d]].kind == PROG_S)
        return xf_pl_reg_find(P, REG_STEP, v, 0, g);
    if (p->kind == PROG_S)
        return P->isleaf[v] ? xf_pl_reg_find(P, REG_ACC, v, last, g) : val_find(P, v, last, g);
    return val_find(P, v, mb, g);
}

/* The per-device type of result k of pmap op pm (its body's result). */
ir_id
xf_pl_result_lt(pl *P, ir_id pm, uint32_t k)
{
    const ir_region *b = &P->out->regions[P->out->ops[pm].body];
    return P->out->values[b->results[k]].type;
}

/*
 * Creates a pmap over group g with the given inputs: it owns region body, or
 * with callee it calls function body. Returns the op.
 */
int
xf_pl_make_pmap(pl *P, uint32_t g, ir_id *inputs, uint32_t nin, ir_id body, int callee,
                ir_id *op)
{
    ir_id o = ir_op_add(P->out, P->func, IR_OP_PMAP, nin, inputs,
                        P->out->regions[body].nresult, NULL, NULL);
    int64_t *dl = P->tmpdev;
    int rc;
    if (callee) {
        ir_op_set_callee(P->out, o, body);
    } else {
        P->out->ops[o].body = body;
        P->out->regions[body].parent = o;
    }
    /* The attributes are the same for every chunk of a group: made once, the list shared. */
    if (P->devvar.kind == 0) {
        ir_op_set_string(P->out, o, "device_var", "d");
        P->devvar = *ir_op_attr(P->out, o, "device_var");
    } else {
        ir_op_put_attr(P->out, o, &P->devvar);
    }
    if (P->pmattr[g].kind == 0) {
        for (uint32_t k = 0; k < gdev(P, g); k++)
            dl[k] = gdevs(P, g)[k];
        ir_op_set_ints(P->out, o, "devices", gdev(P, g), dl);
        P->pmattr[g] = *ir_op_attr(P->out, o, "devices");
    } else {
        ir_op_put_attr(P->out, o, &P->pmattr[g]);
    }
    rc = 0;
    for (uint32_t i = 0; i < P->out->regions[body].nresult && rc == 0; i++) {
        ir_id lt = P->out->values[P->out->regions[body].results[i]].type;
        if (P->out->types[lt].devvar == 0) {
            rc = di_error_set(P->c->err, DI_EINTERNAL, "a pmap body result not on the device "
                              "variable");
            break;
        }
        P->out->values[ir_op_output(P->out, o, i)].type = group_tuple(P, lt, g);
    }
    *op = o;
    return rc;
}

/*
 * For every leaf (a gradient contribution accumulated across microbatches):
 * the placement on the data axis its first once-per-step consumer needs, or
 * P when that consumer keeps it partial (an Add of two contributions) or it
 * is a function result (reduced in the step program).
 */
static void
leaf_targets(pl *P)
{
    xf_ctx *c = P->c;
    const ir_module *m = c->m;
    const ir_region *fr = &m->regions[c->func];
    P->leaftgt = di_xmalloc((m->nvalue ? m->nvalue : 1) * sizeof *P->leaftgt);
    memset(P->leaftgt, XF_P, (m->nvalue ? m->nvalue : 1) * sizeof *P->leaftgt);
    P->leaftp = di_xmalloc((m->nvalue ? m->nvalue : 1) * sizeof *P->leaftp);
    memset(P->leaftp, XF_P, (m->nvalue ? m->nvalue : 1) * sizeof *P->leaftp);
    P->leafedp = di_xmalloc((m->nvalue ? m->nvalue : 1) * sizeof *P->leafedp);
    memset(P->leafedp, XF_R, (m->nvalue ? m->nvalue : 1) * sizeof *P->leafedp);
    P->leafcp = di_xmalloc((m->nvalue ? m->nvalue : 1) * sizeof *P->leafcp);
    memset(P->leafcp, XF_R, (m->nvalue ? m->nvalue : 1) * sizeof *P->leafcp);
    for (uint32_t i = fr->nop; i-- > 0;) {
        ir_id op = fr->ops[i];
        const ir_op *o = &m->ops[op];
        if (c->op[op].phase != XF_PH_STEP)
            continue;
        for (uint32_t k = 0; k < o->ninput; k++) {
            P->leaftgt[m->refs[o->inputs + k]] = c->req[o->inputs + k].a[XF_DP];
            P->leaftp[m->refs[o->inputs + k]] = c->req[o->inputs + k].a[XF_TP];
            P->leafedp[m->refs[o->inputs + k]] = c->req[o->inputs + k].a[XF_EDP];
            P->leafcp[m->refs[o->inputs + k]] = c->req[o->inputs + k].a[XF_CP];
        }
    }
}

static int
emit_args(pl *P)
{
    xf_ctx *c = P->c;
    const ir_module *m = c->m;
    const ir_region *fr = &m->regions[c->func];
    uint8_t *needg = di_xcalloc((size_t)fr->narg * c->pp + 1, 1);
    for (uint32_t pi = 0; pi < P->nprog; pi++) {
        const prog *p = &P->prog[pi];
        for (uint32_t j = 0; j < p->in.n; j++) {
            ir_id v = p->in.v[j];
            if (m->values[v].def == 0 && (c->vflags[v] & XF_V_ARG))
                needg[(size_t)m->values[v].index * c->pp + p->group] = 1;
        }
    }
    for (uint32_t r = 0; r < fr->nresult; r++) {
        ir_id v = fr->results[r];
        if (m->values[v].def == 0) {
            int any = 0;
            for (uint32_t g = 0; g < c->pp; g++)
                any |= needg[(size_t)m->values[v].index * c->pp + g];
            if (!any)
                needg[(size_t)m->values[v].index * c->pp] = 1;
        }
    }
    for (uint32_t a = 0; a < fr->narg; a++) {
        ir_id v = fr->args[a];
        int data = (c->vflags[v] & XF_V_DATA) != 0;
        for (uint32_t g = 0; g < c->pp; g++) {
            xf_place gpl;
            uint32_t n[XF_NAXIS];
            if (!needg[(size_t)a * c->pp + g])
                continue;
            /* On this group's axes (an axis of size 1 holds the whole). */
            xf_group_n(c, g, n);
            gpl = xf_place_on(&c->place[v], n);
            for (uint32_t mb = 0; mb < (data ? c->m_emit : 1); mb++) {
                ir_id lt = group_local_type(P, v, &gpl, g);
                ir_id ty = group_tuple(P, lt, g), av;
                char nm[256];
                if (data && c->n[XF_MB] > 1)
                    snprintf(nm, sizeof nm, "%s.mb%u", ir_str_get(m, m->values[v].name), mb);
                else
                    snprintf(nm, sizeof nm, "%s", ir_str_get(m, m->values[v].name));
                if (c->pp > 1) {
                    size_t len = strlen(nm);
                    snprintf(nm + len, sizeof nm - len, ".g%u", g);
                }
                av = ir_region_add_arg(P->out, P->func, ty, nm);
                xf_pl_reg_put(P, REG_ARG, v, mb, g, av, lt, &gpl);
                layout_arg(P, a, mb, g, &gpl);
            }
        }
    }
    di_free(needg);
    return 0;
}

/* Results that are arguments or constants, in the step program of group 0 or from the args. */
static int
emit_plain_results(pl *P)
{
    xf_ctx *c = P->c;
    const ir_module *m = c->m;
    const ir_region *fr = &m->regions[c->func];
    for (uint32_t r = 0; r < fr->nresult; r++) {
        ir_id v = fr->results[r];
        if (m->values[v].def == 0) {
            for (uint32_t g = 0; g < c->pp; g++) {
                const reg_ent *e = xf_pl_reg_find(P, REG_ARG, v, 0, g);
                if (e) {
                    xf_pl_layout_result(P, r, 0, g, &e->pl, e->tv);
                    break;
                }
            }
        } else if (c->vflags[v] & XF_V_CONST) {
            /* A constant result: a pmap on group 0 that makes it. */
            xf_body *b = &P->body;
            xf_local l;
            ir_id pm;
            int rc;
            xf_body_begin(b, P->mesh[0], 0);
            if ((rc = xf_body_get(b, v, &l)) != 0)
                return rc;
            ir_region_add_result(P->out, b->region, l.v);
            if ((rc = xf_pl_make_pmap(P, 0, NULL, 0, b->region, 0, &pm)) != 0)
                return rc;
            xf_pl_layout_result(P, r, 0, 0, &l.pl, ir_op_output(P->out, pm, 0));
        }
    }
    return 0;
}

/* The layout's result pieces in function-result order (chunks emit them as they go). */
static void
sort_results(pl *P)
{
    xform_layout *l = P->lay;
    ir_region *fr = &P->out->regions[P->func];
    uint32_t n = l->nresults;
    uint32_t *idx = di_xmalloc((n ? n : 1) * sizeof *idx);
    xform_piece *pc = di_xmalloc((n ? n : 1) * sizeof *pc);
    ir_id *rv = di_xmalloc((n ? n : 1) * sizeof *rv);
    /* Stable counting by (index, microbatch): insertion sort is fine for results. */
    for (uint32_t i = 0; i < n; i++)
        idx[i] = i;
    for (uint32_t i = 1; i < n; i++) {
        uint32_t x = idx[i], j = i;
        while (j > 0 && (l->results[idx[j - 1]].index > l->results[x].index ||
                         (l->results[idx[j - 1]].index == l->results[x].index &&
                          l->results[idx[j - 1]].microbatch > l->results[x].microbatch))) {
            idx[j] = idx[j - 1];
            j--;
        }
        idx[j] = x;
    }
    for (uint32_t i = 0; i < n; i++) {
        pc[i] = l->results[idx[i]];
        rv[i] = fr->results[idx[i]];
    }
    memcpy(l->results, pc, n * sizeof *pc);
    memcpy(fr->results, rv, n * sizeof *rv);
    di_free(idx);
    di_free(pc);
    di_free(rv);
}

int
xf_pipeline_build(xf_ctx *c, ir_module **outp, xform_layout **layp)
{
    pl P;
    const ir_module *m = c->m;
    xf_event *ev = NULL;
    uint32_t nev = 0;
    int rc;
    memset(&P, 0, sizeof P);
    P.c = c;
    P.out = ir_module_new();
    P.lay = di_xcalloc(1, sizeof *P.lay);
    P.lay->size[XF_MB] = c->n[XF_MB];
    P.lay->size[XF_DP] = c->hetero ? 0 : c->gdp[0];
    P.lay->size[XF_TP] = c->hetero ? 0 : c->gtp[0];
    P.lay->size[XF_CP] = c->n[XF_CP];
    P.lay->size[XF_EDP] = c->n[XF_EDP];
    P.lay->ngroup = c->pp;
    P.lay->group_dp = di_xmalloc(c->pp * sizeof *P.lay->group_dp);
    P.lay->group_tp = di_xmalloc(c->pp * sizeof *P.lay->group_tp);
    P.lay->group_first = di_xmalloc(c->pp * sizeof *P.lay->group_first);
    memcpy(P.lay->group_dp, c->gdp, c->pp * sizeof *c->gdp);
    memcpy(P.lay->group_tp, c->gtp, c->pp * sizeof *c->gtp);
    memcpy(P.lay->group_first, c->goff, c->pp * sizeof *c->goff);
    P.mark = di_xcalloc(m->nvalue ? m->nvalue : 1, sizeof *P.mark);
    P.needhead = di_xcalloc(m->nvalue ? m->nvalue : 1, sizeof *P.needhead);
    P.inmark = di_xcalloc(m->nvalue ? m->nvalue : 1, sizeof *P.inmark);
    P.isleaf = di_xcalloc(m->nvalue ? m->nvalue : 1, 1);
    P.restref = di_xcalloc(m->nvalue ? m->nvalue : 1, sizeof *P.restref);
    P.isrest = di_xcalloc(m->nop ? m->nop : 1, 1);
    P.isout = di_xcalloc(m->nvalue ? m->nvalue : 1, sizeof *P.isout);
    for (uint32_t g = 0; g < c->pp; g++)
        if (gdev(&P, g) > P.maxgdev)
            P.maxgdev = gdev(&P, g);
    P.devs = di_xmalloc((c->ndev ? c->ndev : 1) * sizeof *P.devs);
    P.tmp = di_xmalloc(P.maxgdev * sizeof *P.tmp);
    P.tmpdev = di_xmalloc(P.maxgdev * sizeof *P.tmpdev);
    P.mesh = di_xmalloc(c->pp * sizeof *P.mesh);
    P.z3tok = di_xcalloc(2 * (size_t)c->pp, sizeof *P.z3tok);
    P.pmattr = di_xcalloc(c->pp, sizeof *P.pmattr);
    P.leafgen = di_xcalloc(m->nop ? m->nop : 1, sizeof *P.leafgen);
    P.leafop = di_xcalloc(m->nop ? m->nop : 1, sizeof *P.leafop);
    for (uint32_t g = 0; g < c->pp; g++) {
        /*
         * [dp, tp], or [dp, cp, tp] with context parallelism, after the outer
         * data axis when there is one (mesh_axis in lower.c).
         */
        uint32_t ncp = c->n[XF_CP], nd = xf_gdata(c, g), r = 0;
        int64_t shape[4];
        int64_t *ids = di_xmalloc(gdev(&P, g) * sizeof *ids);
        char name[32];
        for (uint32_t d = 0; d < nd; d++)
            for (uint32_t k = 0; k < ncp; k++)
                for (uint32_t t = 0; t < c->gtp[g]; t++) {
                    int32_t dev = xf_device(c, g, d, k, t);
                    uint32_t i = (d * ncp + k) * c->gtp[g] + t;
                    P.devs[c->goff[g] + i] = dev;
                    ids[i] = dev;
                }
        if (c->n[XF_EDP] > 1)
            shape[r++] = c->n[XF_EDP];
        shape[r++] = c->gdp[g];
        if (ncp > 1)
            shape[r++] = ncp;
        shape[r++] = c->gtp[g];
        snprintf(name, sizeof name, "stage%u", g);
        P.mesh[g] = ir_mesh_add(P.out, name, r, shape, ids);
        di_free(ids);
    }
    P.lay->devices = di_xmalloc((c->ndev ? c->ndev : 1) * sizeof *P.lay->devices);
    memcpy(P.lay->devices, P.devs, c->ndev * sizeof *P.devs);
    P.func = ir_func_new(P.out, ir_str_get(m, m->regions[c->func].name));
    xf_body_tables_init(&P.body, c, P.out);

    if ((rc = build_programs(&P)) != 0 ||
        (rc = emit_args(&P)) != 0 || (rc = xf_schedule(c, &ev, &nev)) != 0)
        goto fail;
    leaf_targets(&P);
    if (c->s.zero == 1 || c->s.zero == 2)
        for (uint32_t g = 0; g < c->pp; g++)
            if ((rc = xf_pl_emit_gathers(&P, g)) != 0)
                goto fail;
    for (uint32_t i = 0; i < nev; i++) {
        prog *p = prog_of(&P, ev[i].kind == XF_EV_F ? PROG_F : PROG_B, ev[i].stage);
        /* A caller's cancel (di_cancel_watch), polled once per chunk: well under a millisecond. */
        if (di_cancel_requested()) {
            rc = di_error_set(c->err, DI_ECANCELLED, "transform cancelled");
            goto fail;
        }
        if (p->ops.n == 0 && p->leaf.n == 0 && p->out.n == 0 && p->res.n == 0 &&
            p->stash.n == 0)
            continue;
        if ((rc = xf_pl_emit_chunk(&P, p, ev[i].mb)) != 0)
            goto fail;
    }
    if ((rc = xf_pl_flush(&P, -1, NULL, 0)) != 0)
        goto fail;
    /* Once-per-step programs, each after the step programs it reads from. */
    {
        uint8_t *done = di_xcalloc(c->pp, 1);
        uint32_t left = c->pp;
        while (left > 0 && rc == 0) {
            uint32_t progress = 0;
            for (uint32_t g = 0; g < c->pp && rc == 0; g++) {
                prog *p = prog_of(&P, PROG_S, g);
                int ready = 1;
                if (done[g])
                    continue;
                for (uint32_t j = 0; j < p->in.n && ready; j++)
                    ready = xf_pl_resolve(&P, p, p->in.v[j], c->m_emit - 1) != NULL;
                if (!ready)
                    continue;
                if (p->ops.n || p->res.n || p->out.n)
                    rc = xf_pl_emit_chunk(&P, p, c->m_emit - 1);
                done[g] = 1;
                left--;
                progress++;
            }
            if (progress == 0 && rc == 0)
                rc = di_error_set(c->err, DI_EINTERNAL,
                                  "the once-per-step programs depend on each other in a cycle");
        }
        di_free(done);
        if (rc)
            goto fail;
    }
    if ((rc = xf_pl_gather_pending(&P, -1, NULL, 0)) != 0 ||
        (rc = emit_plain_results(&P)) != 0)
        goto fail;
    sort_results(&P);
    di_free(ev);
    pl_fini(&P);
    *outp = P.out;
    if (layp)
        *layp = P.lay;
    else
        xform_layout_free(P.lay);
    return 0;
fail:
    di_free(ev);
    pl_fini(&P);
    xform_layout_free(P.lay);
    ir_module_free(P.out);
    return rc;
}

/* Frees the working state of an assembly (not the output module or layout). */
static void
pl_fini(pl *P)
{
    xf_body_tables_fini(&P->body);
    di_free(P->pend);
    di_free(P->pgat);
    for (uint32_t i = 0; P->prog && i < P->nprog; i++) {
        prog *p = &P->prog[i];
        di_free(p->ops.v);
        di_free(p->in.v);
        di_free(p->out.v);
        di_free(p->leaf.v);
        di_free(p->stash.v);
        di_free(p->res.v);
        di_free(p->lazy.v);
        di_free(p->argc);
        di_free(p->acc);
        di_free(p->vals);
        xf_pl_variants_free(p);
    }
    di_free(P->prog);
    di_free(P->home);
    di_free(P->mark);
    di_free(P->needs);
    di_free(P->needhead);
    di_free(P->inmark);
    di_free(P->isleaf);
    di_free(P->restref);
    di_free(P->isrest);
    di_free(P->isout);
    di_free(P->leaftgt);
    di_free(P->leaftp);
    di_free(P->leafedp);
    di_free(P->leafcp);
    di_free(P->reg);
    di_free(P->devs);
    di_free(P->mesh);
    di_free(P->z3tok);
    di_free(P->pmattr);
    di_free(P->leafgen);
    di_free(P->leafop);
    di_free(P->tmp);
    di_free(P->tmpdev);
    di_free(P->tt);
}

/* ---- the public entry points ---- */

/* ---- the layout it returns ---- */

void
xform_layout_free(xform_layout *l)
{
    if (l == NULL)
        return;
    di_free(l->devices);
    di_free(l->group_dp);
    di_free(l->group_tp);
    di_free(l->group_first);
    di_free(l->args);
    di_free(l->results);
    di_free(l);
}
