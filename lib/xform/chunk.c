/*
 * chunk.c: the chunks of the pipeline assembly (see pipeline.c). A chunk
 * is one program's work for one microbatch: a dist.pmap over its group's
 * devices that calls a function of the program (a variant: chunks that
 * differ only in their microbatch share one). Its body emits the program's
 * ops with their inputs converted to the placements they need, accumulates
 * gradient contributions across microbatches, reduces them (in buckets,
 * overlapped with the backward pass, or as ZeRO reduce-scatters) and
 * stashes weights; emit_gathers all-gathers ZeRO-1/2 weight shards.
 */
#include "xform/pipeline_int.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * A chunk's body depends on its microbatch only through these (and through
 * the types and placements of its inputs, which the variant records).
 */
#define VAR_ACC 1   /* adds to the accumulated gradients of earlier microbatches */
#define VAR_LAST 2  /* the last microbatch: completed gradients, once-per-step results */
#define VAR_STASH 4 /* 2BW: the first microbatch copies the stage's weights */

static uint8_t
variant_key(const pl *P, const prog *p, uint32_t mb)
{
    const xf_ctx *c = P->c;
    uint8_t key = 0;
    if (mb > 0 && p->leaf.n > 0)
        key |= VAR_ACC;
    if (mb == c->m_emit - 1 && (p->leaf.n > 0 || p->res.n > 0))
        key |= VAR_LAST;
    if (p->kind == PROG_F && c->s.stash == STRATEGY_STASH_2BW && xf_stash_copies(c, mb) &&
        p->stash.n > 0)
        key |= VAR_STASH;
    return key;
}

/* The function of program p for key and input signature, or NULL. */
static const variant *
find_variant(const prog *p, uint8_t key, uint32_t n, const ir_id *lt, const xf_place *pls)
{
    for (uint32_t i = 0; i < p->nvar; i++) {
        const variant *v = &p->var[i];
        int same = v->key == key && v->nsig == n;
        for (uint32_t j = 0; j < n && same; j++)
            same = v->lt[j] == lt[j] && xf_place_eq(&v->pl[j], &pls[j]);
        if (same)
            return v;
    }
    return NULL;
}

/* Names a new function of program p: stageK_fwd, stageK_bwd, with the variant's traits. */
static void
variant_name(pl *P, const prog *p, uint8_t key, char *buf, size_t n)
{
    size_t w = (size_t)snprintf(buf, n, "stage%u_%s", p->stage, p->kind == PROG_F ? "fwd" : "bwd");
    if (p->leaf.n > 0 && !(key & VAR_ACC) && P->c->n[XF_MB] > 1 && w < n)
        w += (size_t)snprintf(buf + w, n - w, ".first");
    if ((key & VAR_STASH) && w < n)
        w += (size_t)snprintf(buf + w, n - w, ".stash");
    if ((key & VAR_LAST) && w < n)
        w += (size_t)snprintf(buf + w, n - w, ".last");
    if (ir_func_find(P->out, buf) != 0 && w < n)
        snprintf(buf + w, n - w, ".v%u", p->nvar);
}

void
xf_pl_variants_free(prog *p)
{
    for (uint32_t i = 0; i < p->nvar; i++) {
        di_free(p->var[i].lt);
        di_free(p->var[i].pl);
        di_free(p->var[i].opl);
    }
    di_free(p->var);
    p->var = NULL;
    p->nvar = p->cvar = 0;
}

/*
 * Builds the body of program p for microbatch mb in the body being built
 * (b->region): arguments of types lt and placements pls (the first p->in.n
 * are its inputs, the rest accumulators), its ops, and its results, whose
 * placements go to opl (*nres of them).
 */
/*
 * Gradient contributions (leaves) of a body. Each is finished right after
 * the op that makes it: reduce-scattered first with ZeRO-2/3, added to the
 * accumulation of earlier microbatches, and in the last microbatch's chunk
 * with overlap_grad_reduce reduced over the data axis. Reductions go by
 * buckets of about bucket_mb MiB of one dtype and one kind (all-reduce, or
 * ZeRO's reduce-scatter), each launched as soon as it is full (as PyTorch
 * DDP and DeepSpeed do), so reduction overlaps the rest of the backward
 * pass; the buckets are split after it, and a ZeRO-2/3 gradient is then
 * added to its accumulator. The body's results take the finished values in
 * leaf order.
 */
typedef struct leafbuf {
    xf_local *fin;       /* per leaf: the finished value */
    uint8_t *done;
    uint32_t *next;      /* per leaf: the next leaf of the same op + 1, or 0 */
    const xf_place *accpl; /* placements of the accumulator arguments */
    const ir_id *acc_in;
    uint32_t *bk;        /* the open bucket: leaf indices */
    uint32_t nbk;
    uint64_t bkbytes;
    int bkdtype;
    int bkscatter;       /* the open bucket reduce-scatters */
    uint32_t bkaxes;     /* the axes its gradients are partial on (xf_partial_axes) */
    uint8_t *pending; /* per leaf: reduce-scattered per microbatch, accumulated after the split */
    uint32_t *done_bk;   /* launched buckets' leaves, bucket after bucket */
    uint32_t ndone_bk;
    struct {
        ir_id red;       /* the reduced bucket */
        uint32_t first, n; /* its leaves: done_bk[first .. first + n) */
        int scatter;
    } *launched;
    uint32_t nlaunched;
    uint32_t nflushed; /* buckets launched so far */
} leafbuf;

static void
leaves_begin(pl *P, prog *p, const xf_place *accpl, const ir_id *acc_in, leafbuf *lb)
{
    const ir_module *m = P->c->m;
    uint32_t n = p->leaf.n + 1;
    lb->fin = di_xcalloc(n, sizeof *lb->fin);
    lb->done = di_xcalloc(n, 1);
    lb->pending = di_xcalloc(n, 1);
    lb->next = di_xcalloc(n, sizeof *lb->next);
    lb->bk = di_xmalloc(n * sizeof *lb->bk);
    lb->done_bk = di_xmalloc(n * sizeof *lb->done_bk);
    lb->launched = di_xmalloc(n * sizeof *lb->launched);
    lb->ndone_bk = lb->nlaunched = lb->nflushed = 0;
    lb->nbk = 0;
    lb->bkbytes = 0;
    lb->bkdtype = -1;
    lb->bkscatter = 0;
    lb->accpl = accpl;
    lb->acc_in = acc_in;
    /* Which leaves each op makes (a stamp per body: no clearing). */
    P->leafstamp++;
    for (uint32_t j = p->leaf.n; j-- > 0;) {
        ir_id def = m->values[p->leaf.v[j]].def;
        if (def == 0)
            continue;
        if (P->leafgen[def] != P->leafstamp) {
            P->leafgen[def] = P->leafstamp;
            P->leafop[def] = 0;
        }
        lb->next[j] = P->leafop[def];
        P->leafop[def] = j + 1;
    }
}

static void
leaves_end(leafbuf *lb)
{
    di_free(lb->fin);
    di_free(lb->done);
    di_free(lb->pending);
    di_free(lb->next);
    di_free(lb->bk);
    di_free(lb->done_bk);
    di_free(lb->launched);
}

/* What leaf v's step consumer wants on the outer data axis: whole, or ZeRO's shard (dp.c). */
static int8_t
leaf_edp(const pl *P, ir_id v)
{
    return P->leafedp[v] == XF_P ? XF_R : P->leafedp[v];
}

/*
 * What leaf v's step consumer wants on the context axis: whole, or ZeRO's
 * shard over the context ranks (dp.c); a partial sum it keeps (a tied
 * weight's contribution) is handled where the target on the data axis is.
 */
static int8_t
leaf_cpw(const pl *P, ir_id v)
{
    return P->leafcp[v] == XF_P ? XF_R : P->leafcp[v];
}

/*
 * Converts a gradient whose microbatch sum is complete (to: on the data axis
 * where it is a partial sum; an expert gradient keeps its split there).
 */
static int
convert_summed(pl *P, ir_id src, xf_local *l, int8_t to)
{
    xf_body *b = &P->body;
    xf_place want = l->pl;
    int rc, step = b->step;
    if (l->pl.a[XF_DP] == XF_P || !XF_IS_S(l->pl.a[XF_DP]))
        want.a[XF_DP] = to;
    want.a[XF_CP] = leaf_cpw(P, src); /* whole on the context axis, or ZeRO's shard */
    want.a[XF_EDP] = leaf_edp(P, src);
    b->step = 1;
    rc = xf_body_convert(b, src, l, &want, l);
    b->step = step;
    return rc;
}

/* The source values and locals of the leaves idx[0..n) (caller frees both). */
static void
bucket_members(const pl *P, const leafbuf *lb, const uint32_t *idx, uint32_t n, ir_id **srcs,
               xf_local **ls)
{
    *srcs = di_xmalloc((n ? n : 1) * sizeof **srcs);
    *ls = di_xmalloc((n ? n : 1) * sizeof **ls);
    for (uint32_t k = 0; k < n; k++) {
        (*srcs)[k] = P->curleaves->v[idx[k]];
        (*ls)[k] = lb->fin[idx[k]];
    }
}

static int leaf_accumulate(pl *P, prog *p, uint32_t mb, leafbuf *lb, uint32_t j, xf_local l,
                           int side);

/* Reduces the open bucket (one leaf: an ordinary conversion). */
static int
bucket_flush(pl *P, leafbuf *lb)
{
    xf_body *b = &P->body;
    int rc = 0;
    if (lb->nbk == 0)
        return 0;
    if (lb->nbk == 1 && !lb->bkscatter) {
        uint32_t j = lb->bk[0];
        rc = convert_summed(P, P->curleaves->v[j], &lb->fin[j], XF_R);
    } else {
        ir_id *srcs, red = 0;
        xf_local *ls;
        bucket_members(P, lb, lb->bk, lb->nbk, &srcs, &ls);
        rc = xf_body_bucket_reduce(b, srcs, ls, lb->nbk, lb->bkscatter, &red);
        if (rc == 0) {
            /* Split later (buckets_split). */
            lb->launched[lb->nlaunched].red = red;
            lb->launched[lb->nlaunched].first = lb->ndone_bk;
            lb->launched[lb->nlaunched].scatter = lb->bkscatter;
            lb->launched[lb->nlaunched++].n = lb->nbk;
            memcpy(lb->done_bk + lb->ndone_bk, lb->bk, lb->nbk * sizeof *lb->bk);
            lb->ndone_bk += lb->nbk;
        }
        di_free(srcs);
        di_free(ls);
    }
    lb->nflushed++;
    lb->nbk = 0;
    lb->bkbytes = 0;
    lb->bkdtype = -1;
    return rc;
}

/* Adds leaf j (its value in lb->fin[j]) to a bucket of its kind, launching it once full. */
static int
bucket_add(pl *P, leafbuf *lb, uint32_t j, int scatter)
{
    const xf_ctx *c = P->c;
    /* A value, not a pointer: flushing interns types, which may move P->out->types. */
    int dtype = P->out->types[P->out->values[lb->fin[j].v].type].dtype;
    uint64_t cap = (uint64_t)(c->s.bucket_mb ? c->s.bucket_mb : STRATEGY_BUCKET_MB_DEFAULT) << 20;
    uint64_t bytes = ir_type_bytes(P->out, P->out->values[lb->fin[j].v].type);
    int rc;
    /* As DDP, the first bucket holds at most 1 MiB, so that reduction starts early. */
    if (lb->nflushed == 0 && cap > (1u << 20))
        cap = 1u << 20;
    uint32_t axes = xf_partial_axes(&lb->fin[j].pl);
    if (lb->nbk > 0 && (lb->bkdtype != dtype || lb->bkscatter != scatter || lb->bkaxes != axes) &&
        (rc = bucket_flush(P, lb)) != 0)
        return rc;
    lb->bk[lb->nbk++] = j;
    lb->bkdtype = dtype;
    lb->bkscatter = scatter;
    lb->bkaxes = axes;
    lb->bkbytes += bytes;
    if (lb->bkbytes >= cap)
        return bucket_flush(P, lb);
    return 0;
}

/*
 * Splits the launched buckets into their gradients: all of them after the
 * backward pass, or (early) the reduce-scattered ones launched before the
 * newest, as soon as a newer one is. ZeRO-2/3 reduce-scatter every
 * microbatch's gradients by buckets and add each shard to the accumulated
 * one (ZeRO-1 with overlap the
 * last microbatch's, its shards then the optimizer's); DeepSpeed's stage 2 and
 * FSDP do that on their reduction stream as each bucket completes, and free
 * the reduced bucket, so the split and the addition are marked to run there
 * (dist.reduction_stream: the compute stream does not wait for the
 * reduce-scatter). At the end of the backward pass both make the compute
 * stream wait for their reduction stream (FSDP's final callback, DeepSpeed's
 * epilogue synchronizes), which the buckets launched last, split there on the
 * compute stream, give: the communicator runs its collectives in order. The
 * last microbatch's buckets below ZeRO-2 (all-reduced, or ZeRO-1's
 * reduce-scatter) are all split on the reduction stream: Megatron-LM waits
 * for them only before the optimizer step, which reads them (a split on the
 * compute stream held up the slice of the gradient a pipeline stage sends
 * back, and so the stages before it). Until 2026-12-07 every bucket was split
 * after the backward pass on the compute stream, so all of a chunk's reduced
 * buckets were live at its end: 0.51 GiB of the 4.52 GiB peak of gpt3-175b
 * with dp 8, tp 32, pp 4, 1F1B, 96 microbatches, full recomputation, ZeRO-3
 * (24 layers' fp32 gradient shards).
 */
static int
buckets_split(pl *P, prog *p, uint32_t mb, leafbuf *lb, int early)
{
    xf_body *b = &P->body;
    uint32_t nsplit = lb->nlaunched;
    /* Below ZeRO-2 the buckets are the last microbatch's: nothing waits for them but the step. */
    int side = early || P->c->s.zero <= 1;
    int rc = 0;
    if (early) {
        /* The newest stays for the end, whose wait covers every earlier one (above). */
        nsplit = nsplit ? nsplit - 1 : 0;
        for (uint32_t i = 0; i < nsplit; i++)
            if (!lb->launched[i].scatter) {
                nsplit = i;
                break;
            }
    }
    for (uint32_t i = 0; i < nsplit && rc == 0; i++) {
        uint32_t n = lb->launched[i].n, *idx = lb->done_bk + lb->launched[i].first;
        ir_id *srcs;
        xf_local *ls;
        bucket_members(P, lb, idx, n, &srcs, &ls);
        rc = xf_body_bucket_split(b, srcs, ls, n, lb->launched[i].scatter, lb->launched[i].red,
                                  side);
        for (uint32_t k = 0; k < n && rc == 0; k++) {
            lb->fin[idx[k]] = ls[k];
            /* A ZeRO-2/3 microbatch gradient: now added to its accumulator. */
            if (lb->pending[idx[k]]) {
                lb->pending[idx[k]] = 0;
                rc = leaf_accumulate(P, p, mb, lb, idx[k], ls[k], side);
            }
        }
        di_free(srcs);
        di_free(ls);
    }
    memmove(lb->launched, lb->launched + nsplit, (lb->nlaunched - nsplit) * sizeof *lb->launched);
    lb->nlaunched -= nsplit;
    return rc;
}

/*
 * The placement leaf v (local l) is reduced to: tgt on the data axis; a
 * gradient split on the tensor axis along the dimension ZeRO splits, for an
 * update that is not (a layer outside tp_layers), is gathered on the tensor
 * axis too, as a tensor split cannot sit outside a data split of the same
 * dimension.
 */
static xf_place
leaf_want(const pl *P, ir_id v, const xf_local *l, int8_t tgt)
{
    xf_place want = l->pl;
    want.a[XF_DP] = tgt;
    if (tgt != XF_P) {
        want.a[XF_CP] = leaf_cpw(P, v); /* whole on the context axis, or ZeRO's shard */
        want.a[XF_EDP] = leaf_edp(P, v);
    }
    if (XF_IS_S(l->pl.a[XF_TP]) && l->pl.a[XF_TP] == tgt && P->leaftp[v] != l->pl.a[XF_TP])
        want.a[XF_TP] = P->leaftp[v];
    return want;
}

/*
 * Marks the op that makes v's storage (through views) dist.transient: a
 * gradient ZeRO-2/3 reduce-scatters as its bucket fills is no gradient
 * buffer held for the step (docs/simulator.md, Memory): DeepSpeed and FSDP
 * keep only the shard, and free the whole gradient once it is reduced.
 */
static void
mark_transient(ir_module *out, ir_id v)
{
    for (;;) {
        ir_id d = out->values[v].def;
        if (d == 0)
            return;
        if (!(ir_opkind_info(out->ops[d].kind)->flags & IR_OPF_FREE) || out->ops[d].ninput == 0) {
            ir_op_set_int(out, d, "dist.transient", 1);
            return;
        }
        v = out->refs[out->ops[d].inputs];
    }
}

/* Finishes leaf j (see leafbuf). */
static int
leaf_finish(pl *P, prog *p, uint32_t mb, leafbuf *lb, uint32_t j)
{
    xf_ctx *c = P->c;
    xf_body *b = &P->body;
    ir_id v = p->leaf.v[j];
    xf_local l;
    int8_t tgt = P->leaftgt[v];
    int rc;
    lb->done[j] = 1;
    P->curleaves = &p->leaf;
    if ((rc = xf_body_get(b, v, &l)) != 0)
        return rc;
    if (c->s.zero >= 2 && tgt != XF_P && l.pl.a[XF_DP] == XF_P) {
        xf_place want = leaf_want(P, v, &l, tgt);
        if (tgt == 0 && want.a[XF_TP] == l.pl.a[XF_TP] && xf_body_scatter_ok(b, &l)) {
            /* Reduce-scattered by buckets; accumulated once its bucket is split. */
            mark_transient(P->out, l.v);
            lb->fin[j] = l;
            lb->pending[j] = 1;
            return bucket_add(P, lb, j, 1);
        }
        if ((rc = xf_body_convert(b, v, &l, &want, &l)) != 0)
            return rc;
    }
    return leaf_accumulate(P, p, mb, lb, j, l, 0);
}

/*
 * Adds leaf j's value l to the accumulation of earlier microbatches (side: on
 * the reduction stream); on the last, reduces it.
 */
static int
leaf_accumulate(pl *P, prog *p, uint32_t mb, leafbuf *lb, uint32_t j, xf_local l, int side)
{
    xf_ctx *c = P->c;
    xf_body *b = &P->body;
    const ir_module *m = c->m;
    uint32_t last = c->m_emit - 1;
    ir_id v = p->leaf.v[j];
    int8_t tgt = P->leaftgt[v];
    if (mb > 0) {
        ir_id in2[2], op, ty;
        xf_local prev;
        prev.v = lb->acc_in[j];
        prev.pl = lb->accpl[j];
        if (!xf_place_eq(&prev.pl, &l.pl)) {
            xf_place want = l.pl;
            want.a[XF_MB] = prev.pl.a[XF_MB];
            if (!xf_place_eq(&prev.pl, &want))
                return di_error_set(c->err, DI_EINTERNAL, "accumulator placement");
        }
        in2[0] = prev.v;
        in2[1] = l.v;
        ty = P->out->values[l.v].type;
        op = ir_op_add(P->out, b->region, IR_OP_ADD, 2, in2, 1, &ty, NULL);
        ir_op_set_string(P->out, op, "dist.phase", "backward");
        /* In place, as frameworks add into the gradient buffer (the simulator aliases it). */
        ir_op_set_int(P->out, op, "dist.accumulate", 1);
        if (side)
            ir_op_set_int(P->out, op, "dist.reduction_stream", 1);
        l.v = ir_op_output(P->out, op, 0);
        {
            char nm[256];
            snprintf(nm, sizeof nm, "%s.acc", ir_str_get(m, m->values[v].name));
            P->out->values[l.v].name = ir_str(P->out, nm);
        }
    }
    lb->fin[j] = l;
    if (mb != last)
        return 0;
    lb->fin[j].pl.a[XF_MB] = XF_R;
    l = lb->fin[j];
    /* A contribution its step consumer keeps partial (a tied weight's two) waits for it. */
    if (!c->s.overlap_grad_reduce || c->s.zero >= 2 || tgt == XF_P || P->leafcp[v] == XF_P ||
        (l.pl.a[XF_DP] == tgt && l.pl.a[XF_CP] != XF_P && l.pl.a[XF_EDP] != XF_P))
        return 0;
    /*
     * An all-reduce, or ZeRO-1's reduce-scatter: into a bucket, launched once
     * full. Expert gradients (split on the data axis, partial on the outer
     * one) are all-reduced over the outer data axis only.
     */
    if (tgt == XF_R && xf_partial_axes(&l.pl) != 0)
        return bucket_add(P, lb, j, 0);
    if (l.pl.a[XF_DP] == tgt && l.pl.a[XF_CP] != XF_P && l.pl.a[XF_EDP] == XF_P)
        return bucket_add(P, lb, j, 0);
    {
        xf_place want = leaf_want(P, v, &l, tgt);
        if (tgt == 0 && want.a[XF_TP] == l.pl.a[XF_TP] && xf_body_scatter_ok(b, &l))
            return bucket_add(P, lb, j, 1);
        if (want.a[XF_TP] == l.pl.a[XF_TP])
            return convert_summed(P, v, &lb->fin[j], tgt);
        return xf_body_convert(b, v, &l, &want, &lb->fin[j]);
    }
}

/*
 * The step program of a group: the gradients that its optimizer needs
 * reduced over the data axis and that arrive partial (overlap_grad_reduce
 * reduced the others in the last microbatch's chunk) are reduced first, by
 * buckets of bucket_mb MiB of one dtype and one kind (Megatron-LM and DDP
 * reduce a flat buffer rather than tensor by tensor): all-reduced, or with
 * ZeRO reduce-scattered replica-major (Megatron-LM's distributed
 * optimizer). Every bucket is launched before any is split back, and the
 * results are remembered as the conversions the optimizer asks for.
 */
static int
step_buckets(pl *P, prog *p, const xf_place *pls)
{
    xf_ctx *c = P->c;
    xf_body *b = &P->body;
    uint64_t cap = (uint64_t)(c->s.bucket_mb ? c->s.bucket_mb : STRATEGY_BUCKET_MB_DEFAULT) << 20;
    uint32_t n = p->in.n, nm = 0, nb = 0, *bfirst, *bn;
    ir_id *srcs = di_xmalloc((n + 1) * sizeof *srcs), *red = di_xmalloc((n + 1) * sizeof *red);
    xf_local *ls = di_xmalloc((n + 1) * sizeof *ls);
    uint8_t *bsc;
    uint64_t bytes = 0;
    int dtype = -1, kind = -1, rc = 0;
    const ir_module *m = c->m;
    /*
     * A gradient that is not a microbatch accumulation (one microbatch) is a
     * candidate when only optimizer updates read it, as their gradient.
     */
    uint8_t *use = di_xcalloc(m->nvalue ? m->nvalue : 1, 1); /* 1: as a gradient, 2: otherwise */
    for (uint32_t k = 0; k < p->ops.n; k++) {
        const ir_op *o = &m->ops[p->ops.v[k]];
        int optim = (ir_opkind_info(o->kind)->flags & IR_OPF_OPTIM) != 0;
        for (uint32_t i = 0; i < o->ninput; i++)
            use[m->refs[o->inputs + i]] |= optim && i == 1 ? 1 : 2;
    }
    bfirst = di_xmalloc((n + 1) * sizeof *bfirst);
    bn = di_xmalloc((n + 1) * sizeof *bn);
    bsc = di_xmalloc(n + 1);
    /*
     * Group the candidates into buckets (members srcs/ls[bfirst[i] .. + bn[i])):
     * the data-parallel ones, then (pass 1) the expert gradients that only
     * the outer data axis reduces, so that each kind fills its own buckets.
     */
    for (int pass = 0; pass < 2 && rc == 0; pass++) {
        for (uint32_t j = 0; j < n && rc == 0; j++) {
            ir_id v = p->in.v[j];
            const ir_type *t;
            int8_t tgt = P->leaftgt[v];
            int scatter, expert = pls[j].a[XF_DP] != XF_P && pls[j].a[XF_EDP] == XF_P;
            if (expert != (pass == 1) ||
                (pls[j].a[XF_DP] != XF_P && pls[j].a[XF_CP] != XF_P && !expert) ||
                (!P->isleaf[v] && use[v] != 1))
                continue;
            if (pls[j].a[XF_CP] == XF_P && tgt != XF_R)
                continue;
            if (tgt != XF_R && tgt != 0)
                continue;
            if ((rc = xf_body_get(b, v, &ls[nm])) != 0)
                break;
            ls[nm].pl = xf_place_on(&ls[nm].pl, b->n);
            ls[nm].pl.a[XF_MB] = XF_R;
            /* Expert gradients: already split on the data axis, all-reduced on the outer one. */
            if (ls[nm].pl.a[XF_DP] != XF_P && ls[nm].pl.a[XF_DP] != tgt && tgt != XF_R)
                continue;
            scatter = tgt == 0 && ls[nm].pl.a[XF_DP] == XF_P;
            if (scatter && (!xf_body_scatter_ok(b, &ls[nm]) ||
                            leaf_want(P, v, &ls[nm], tgt).a[XF_TP] != ls[nm].pl.a[XF_TP]))
                continue;
            t = &P->out->types[P->out->values[ls[nm].v].type];
            /* A kind: reduce-scatter, or all-reduce over data, context and/or outer data. */
            int k2 = scatter | (int)xf_partial_axes(&ls[nm].pl) << 1;
            if (nb == 0 || bytes >= cap || dtype != (int)t->dtype || kind != k2) {
                bfirst[nb] = nm;
                bsc[nb] = (uint8_t)scatter;
                bn[nb++] = 0;
                bytes = 0;
            }
            srcs[nm++] = v;
            bn[nb - 1]++;
            bytes += ir_type_bytes(P->out, P->out->values[ls[nm - 1].v].type);
            dtype = (int)t->dtype;
            kind = k2;
        }
    }
    /* Launch every bucket, then split them back (a lone all-reduce: an ordinary conversion). */
    for (uint32_t i = 0; i < nb && rc == 0; i++) {
        if (bn[i] == 1 && !bsc[i])
            rc = convert_summed(P, srcs[bfirst[i]], &ls[bfirst[i]], XF_R);
        else
            rc = xf_body_bucket_reduce(b, srcs + bfirst[i], ls + bfirst[i], bn[i], bsc[i],
                                       &red[i]);
    }
    for (uint32_t i = 0; i < nb && rc == 0; i++) {
        if (bn[i] == 1 && !bsc[i])
            continue;
        rc = xf_body_bucket_split(b, srcs + bfirst[i], ls + bfirst[i], bn[i], bsc[i], red[i], 0);
        for (uint32_t k = 0; k < bn[i] && rc == 0; k++)
            xf_body_remember(b, srcs[bfirst[i] + k], &ls[bfirst[i] + k]);
    }
    di_free(use);
    di_free(srcs);
    di_free(red);
    di_free(ls);
    di_free(bfirst);
    di_free(bn);
    di_free(bsc);
    return rc;
}

/*
 * ZeRO-3: whether input k of op is a weight available in the body, split on
 * a data axis where the op wants it whole (an all-gather before the op).
 */
static int
sharded_weight(pl *P, ir_id op, uint32_t k)
{
    const xf_ctx *c = P->c;
    const xf_body *b = &P->body;
    const ir_op *o = &c->m->ops[op];
    ir_id v = c->m->refs[o->inputs + k];
    const xf_place *want = &c->req[o->inputs + k], *at;
    if (!(c->vflags[v] & XF_V_WEIGHT) || b->envgen[v] != b->gen)
        return 0;
    at = &b->env[v].pl;
    return (XF_IS_S(at->a[XF_DP]) && !XF_IS_S(want->a[XF_DP])) ||
           (XF_IS_S(at->a[XF_EDP]) && !XF_IS_S(want->a[XF_EDP])) ||
           (XF_IS_S(at->a[XF_CP]) && at->a[XF_CP] != want->a[XF_CP]);
}

static int
gathers_weights(pl *P, ir_id op)
{
    for (uint32_t k = 0; k < P->c->m->ops[op].ninput; k++)
        if (sharded_weight(P, op, k))
            return 1;
    return 0;
}

/*
 * Prefetches op's sharded weights (gathers them now; the op reuses the
 * conversions), each gather made to wait for `after` (0: nothing) through
 * dist.after.
 */
static int
prefetch_op(pl *P, ir_id op, ir_id after)
{
    xf_ctx *c = P->c;
    xf_body *b = &P->body;
    const ir_op *o = &c->m->ops[op];
    int rc = 0;
    for (uint32_t k = 0; k < o->ninput && rc == 0; k++) {
        ir_id v = c->m->refs[o->inputs + k];
        const xf_place *want = &c->req[o->inputs + k];
        xf_local l, cv;
        if (!sharded_weight(P, op, k) || xf_body_has_conversion(b, v, want))
            continue;
        l = b->env[v];
        if (after) {
            ir_id in[2] = {l.v, after};
            ir_id nop = ir_op_add(b->out, b->region, IR_OP_AFTER, 2, in, 1, NULL, NULL);
            if ((rc = xf_infer(b->out, nop, c->err)) != 0)
                break;
            l.v = ir_op_output(b->out, nop, 0);
        }
        rc = xf_body_convert(b, v, &l, want, &cv);
    }
    return rc;
}

/*
 * ZeRO-3's gathers as FSDP issues them: by unit (a layer, dist.layer; ops
 * outside every layer are units too, one per run), the next unit's weights
 * gathered while the current one computes, at most two units' gathered at a
 * time (FSDP's prefetch of the next unit and its all-gather rate limit;
 * DeepSpeed's parameter prefetch is alike). So after op j of the body (and
 * the recomputation it needed) come the gathers of the ops up to the end of
 * the next unit, each made to wait (dist.after) for the last op of the unit
 * two before its own, whose buffers it takes over; and they come before op
 * j's gradient reduce-scatter on the data-parallel communicator's stream,
 * which would otherwise hold them up until op j's compute is done.
 *
 * The units run on across the chunks of a group: a chunk returns two
 * ordering tokens, the ends of its last two units (dist.after of a weight
 * shard it reads, whose storage is held all step anyway, on the unit's last
 * result: no bytes), and the group's next chunk takes them as its units -2
 * and -1, so that its first two units' gathers wait for them as any other
 * unit's do. Without them the first two units of every chunk were gathered
 * as soon as the stream was free: on gpt3-175b, dp 64 tp 8 pp 2 interleaved
 * over 24 chunks per device with ZeRO-3, 12.5 GB of gathered weights (about
 * 27 layers') were held at the peak.
 */
#define Z3_TOKEN (INT32_MIN + 1) /* the layer of an incoming token's unit */

typedef struct zero3_units {
    uint32_t n;        /* units started so far (in emission order), tokens included */
    int32_t layer[3];  /* of the last three: their layer */
    ir_id out[3];      /* and the first result of their last op so far */
    int has_next;      /* whose weights are being prefetched: */
    int32_t next;      /* its layer */
    uint32_t pf;       /* the next op to look at */
    ir_id anchor;      /* the tokens' storage: the smallest weight shard read, or 0 */
    xf_place anchor_pl;
} zero3_units;

/* Gathers ahead: the ops from u->pf up to the end of the next unit. */
static int
zero3_ahead(pl *P, prog *p, zero3_units *u)
{
    xf_ctx *c = P->c;
    xf_body *b = &P->body;
    int rc = 0;
    while (u->pf < p->ops.n && rc == 0) {
        ir_id k = p->ops.v[u->pf];
        int32_t L = c->op[k].layer;
        uint32_t ord;
        if (b->lazygen[k] == b->gen || !gathers_weights(P, k)) {
            u->pf++;
            continue;
        }
        if (u->n > 0 && L == u->layer[(u->n - 1) % 3]) {
            ord = u->n - 1;
        } else if (!u->has_next || u->next == L) {
            ord = u->n;
            u->has_next = 1;
            u->next = L;
        } else {
            break; /* the unit after the next */
        }
        rc = prefetch_op(P, k, ord >= 2 ? u->out[(ord - 2) % 3] : 0);
        u->pf++;
    }
    return rc;
}

static int
zero3_prefetch(pl *P, prog *p, uint32_t j, zero3_units *u)
{
    xf_ctx *c = P->c;
    xf_body *b = &P->body;
    ir_id op = p->ops.v[j];
    if (gathers_weights(P, op)) {
        int32_t L = c->op[op].layer;
        ir_id y = c->m->ops[op].noutput ? c->m->ops[op].outputs : 0;
        if (u->n == 0 || L != u->layer[(u->n - 1) % 3]) {
            u->n++;
            u->layer[(u->n - 1) % 3] = L;
            u->has_next = 0;
        }
        u->out[(u->n - 1) % 3] = y && b->envgen[y] == b->gen ? b->env[y].v : 0;
    }
    if (u->pf <= j)
        u->pf = j + 1;
    return zero3_ahead(P, p, u);
}

/*
 * Starts the units of a chunk: its anchor (the smallest weight input, the
 * first of those), and the previous chunk's tokens tok[0..ntok) as units -2
 * and -1, whose successors' gathers are then emitted before the first op.
 */
static int
zero3_begin(pl *P, prog *p, const ir_id *tok, uint32_t ntok, zero3_units *u)
{
    xf_ctx *c = P->c;
    xf_body *b = &P->body;
    uint64_t least = UINT64_MAX;
    memset(u, 0, sizeof *u);
    for (uint32_t j = 0; j < p->in.n; j++) {
        ir_id v = p->in.v[j];
        uint64_t n;
        if (!(c->vflags[v] & XF_V_WEIGHT) || b->envgen[v] != b->gen)
            continue;
        n = ir_type_bytes(P->out, P->out->values[b->env[v].v].type);
        if (n < least) {
            least = n;
            u->anchor = b->env[v].v;
            u->anchor_pl = b->env[v].pl;
        }
    }
    if (ntok != 2 || u->anchor == 0)
        return 0;
    u->n = 2;
    u->layer[0] = u->layer[1] = Z3_TOKEN;
    u->out[0] = tok[0];
    u->out[1] = tok[1];
    return zero3_ahead(P, p, u);
}

/* The chunk's tokens as its last two results: the ends of its last two units. */
static int
zero3_end(pl *P, const zero3_units *u, xf_place *opl, uint32_t *nres)
{
    xf_ctx *c = P->c;
    xf_body *b = &P->body;
    for (uint32_t i = 0; i < 2; i++) {
        ir_id src = u->n + i >= 2 ? u->out[(u->n + i - 2) % 3] : 0, t = u->anchor;
        if (src != 0) {
            ir_id in[2] = {u->anchor, src};
            ir_id op = ir_op_add(b->out, b->region, IR_OP_AFTER, 2, in, 1, NULL, NULL);
            int rc = xf_infer(b->out, op, c->err);
            if (rc != 0)
                return rc;
            t = ir_op_output(b->out, op, 0);
        }
        ir_region_add_result(P->out, b->region, t);
        opl[(*nres)++] = u->anchor_pl;
    }
    return 0;
}

/*
 * A forward op full recomputation repeats though no backward op reads it
 * (xf_recompute_ops' rest): its results are reduced (or gathered) as the forward
 * makes them for the layer checkpoint that reads them, which is kept, not
 * recomputed: Megatron-LM's recomputed row-parallel GEMM all-reduces its
 * output too.
 */
static int
rest_reductions(pl *P, ir_id op)
{
    xf_ctx *c = P->c;
    xf_body *b = &P->body;
    const ir_op *o = &c->m->ops[op];
    for (uint32_t i = 0; i < o->noutput; i++) {
        ir_id v = o->outputs + i;
        uint32_t ref = P->restref[v];
        xf_local l, cv;
        int rc;
        if (ref == 0 || xf_body_has_conversion(b, v, &c->req[ref - 1]))
            continue;
        if ((rc = xf_body_get(b, v, &l)) != 0 ||
            (rc = xf_body_convert(b, v, &l, &c->req[ref - 1], &cv)) != 0)
            return rc;
    }
    return 0;
}

/*
 * The body of program p for microbatch mb: its nin arguments are the
 * program's inputs, the accumulators, then ntok ZeRO-3 ordering tokens
 * (zero3_units). *tokp tells whether its last two results are tokens.
 */
static int
build_body(pl *P, prog *p, uint32_t mb, uint32_t nin, uint32_t ntok, const ir_id *lt,
           const xf_place *pls, xf_place *opl, uint32_t *nresp, int *tokp)
{
    xf_ctx *c = P->c;
    xf_body *b = &P->body;
    const ir_module *m = c->m;
    uint32_t last = c->m_emit - 1, nres = 0;
    zero3_units z3;
    ir_id *acc_in = di_xmalloc((p->leaf.n + 1) * sizeof *acc_in), tok[2] = {0, 0};
    int zero3 = c->s.zero >= 3 && p->kind != PROG_S;
    leafbuf lb;
    int rc = 0;

    memset(&lb, 0, sizeof lb);
    b->step = p->kind == PROG_S;
    for (uint32_t j = 0; j < p->in.n; j++)
        xf_body_arg_typed(b, p->in.v[j], lt[j], &pls[j]);
    for (uint32_t j = p->in.n; j < nin - ntok; j++)
        acc_in[j - p->in.n] = ir_region_add_arg(P->out, b->region, lt[j], NULL);
    for (uint32_t j = nin - ntok; j < nin; j++)
        tok[j - (nin - ntok)] = ir_region_add_arg(P->out, b->region, lt[j], NULL);
    *tokp = 0;
    if (p->kind == PROG_S && (rc = step_buckets(P, p, pls)) != 0)
        goto out;
    /* The program's ops. */
    for (uint32_t j = 0; j < p->lazy.n; j++)
        b->lazygen[p->lazy.v[j]] = b->gen;
    leaves_begin(P, p, pls + p->in.n, acc_in, &lb);
    memset(&z3, 0, sizeof z3);
    if (zero3 && (rc = zero3_begin(P, p, tok, ntok, &z3)) != 0)
        goto out;
    for (uint32_t j = 0; j < p->ops.n; j++) {
        ir_id op = p->ops.v[j];
        if (b->lazygen[op] == b->gen)
            continue;
        if ((rc = xf_body_emit(b, op)) != 0)
            goto out;
        if (P->isrest[op] && (rc = rest_reductions(P, op)) != 0)
            goto out;
        if (zero3 && (rc = zero3_prefetch(P, p, j, &z3)) != 0)
            goto out;
        /* A gradient is accumulated (and reduced) as soon as its op has run. */
        if (P->leafgen[op] == P->leafstamp)
            for (uint32_t k = P->leafop[op]; k; k = lb.next[k - 1])
                if (!lb.done[k - 1] && (rc = leaf_finish(P, p, mb, &lb, k - 1)) != 0)
                    goto out;
        if (lb.nlaunched > 1 && (rc = buckets_split(P, p, mb, &lb, 1)) != 0)
            goto out;
    }
    /* Results of the body: outputs, accumulators, stash copies, function results. */
    for (uint32_t j = 0; j < p->out.n; j++) {
        xf_local l;
        if ((rc = xf_body_get(b, p->out.v[j], &l)) != 0)
            goto out;
        ir_region_add_result(P->out, b->region, l.v);
        opl[nres++] = l.pl;
    }
    /* Leaves not finished right after their op (made lazily, or elsewhere). */
    for (uint32_t j = 0; j < p->leaf.n; j++)
        if (!lb.done[j] && (rc = leaf_finish(P, p, mb, &lb, j)) != 0)
            goto out;
    if ((rc = bucket_flush(P, &lb)) != 0 || (rc = buckets_split(P, p, mb, &lb, 0)) != 0)
        goto out;
    for (uint32_t j = 0; j < p->leaf.n; j++) {
        ir_region_add_result(P->out, b->region, lb.fin[j].v);
        opl[nres++] = lb.fin[j].pl;
    }
    if (p->kind == PROG_F && xf_stash_copies(c, mb)) {
        for (uint32_t j = 0; j < p->stash.n; j++) {
            xf_local copy;
            if ((rc = xf_stash_copy(b, p->stash.v[j], &copy)) != 0)
                goto out;
            ir_region_add_result(P->out, b->region, copy.v);
            opl[nres++] = copy.pl;
        }
    }
    for (uint32_t j = 0; j < p->res.n; j++) {
        uint32_t r = p->res.v[j];
        ir_id v = m->regions[c->func].results[r];
        xf_local l;
        xf_place want = c->rreq[r];
        if (p->kind != PROG_S && want.a[XF_MB] == XF_R && c->n[XF_MB] > 1 && mb != last)
            continue; /* a per-step result: from the last microbatch */
        if ((rc = xf_body_get(b, v, &l)) != 0)
            goto out;
        if (p->kind == PROG_S)
            want.a[XF_MB] = XF_R;
        if ((rc = xf_body_convert(b, v, &l, &want, &l)) != 0)
            goto out;
        ir_region_add_result(P->out, b->region, l.v);
        opl[nres++] = l.pl;
    }
    if (zero3 && z3.anchor != 0) {
        if ((rc = zero3_end(P, &z3, opl, &nres)) != 0)
            goto out;
        *tokp = 1;
    }
out:
    leaves_end(&lb);
    di_free(acc_in);
    *nresp = nres;
    return rc;
}

/*
 * Emits program p for microbatch mb: a dist.pmap over its group. A chunk
 * (F or B) calls the function of its program that matches the microbatch's
 * variant (variant_key) and input types, built the first time it is needed,
 * so the module's size does not grow with the number of microbatches; a
 * once-per-step program owns its body. Then its results are registered and
 * sent where they are needed.
 */
int
xf_pl_emit_chunk(pl *P, prog *p, uint32_t mb)
{
    xf_ctx *c = P->c;
    xf_body *b = &P->body;
    const ir_module *m = c->m;
    uint32_t g = p->group, last = c->m_emit - 1, nin = 0, nres = 0, ntok = 0;
    uint32_t nmax = p->in.n + p->leaf.n + 3;
    reg_ent *tok = &P->z3tok[2 * (size_t)g];
    int hastok = 0;
    ir_id *inputs, *lts, pm;
    xf_place *pls, *opl;
    const variant *var = NULL;
    uint8_t key = variant_key(P, p, mb);
    int rc;
    assert(mb <= last && g < c->pp);
    inputs = di_xmalloc(nmax * sizeof *inputs);
    lts = di_xmalloc(nmax * sizeof *lts);
    pls = di_xmalloc(nmax * sizeof *pls);
    opl = di_xmalloc((p->out.n + p->leaf.n + p->stash.n + p->res.n + 3) * sizeof *opl);
    if (p->argc == NULL)
        p->argc = di_xcalloc(p->in.n + 1, sizeof *p->argc);
    /* The group's own pending sends go first, then what it receives (xf_pl_defer). */
    if ((rc = xf_pl_flush(P, g, p, mb)) != 0 || (rc = xf_pl_gather_pending(P, g, p, mb)) != 0)
        goto done;
    for (uint32_t j = 0; j < p->in.n; j++) {
        ir_id v = p->in.v[j];
        const reg_ent *e = p->argc[j].kind ? &p->argc[j] : xf_pl_resolve(P, p, v, mb);
        if (e && !p->argc[j].kind && m->values[v].def == 0 && !(c->vflags[v] & XF_V_DATA) &&
            !(p->kind == PROG_B && xf_stash_per_microbatch(c)))
            p->argc[j] = *e; /* a weight: the same tuple for every microbatch */
        if (e == NULL) {
            rc = di_error_set(c->err, DI_EINTERNAL,
                              "%%%s is not available on group %u for microbatch %u",
                              ir_str_get(m, m->values[v].name), g, mb);
            goto done;
        }
        inputs[nin] = e->tv;
        lts[nin] = e->lt;
        pls[nin++] = e->pl;
    }
    /* Accumulators of earlier microbatches: the previous chunk's. */
    if (p->acc == NULL)
        p->acc = di_xcalloc(p->leaf.n + 1, sizeof *p->acc);
    for (uint32_t j = 0; j < p->leaf.n && mb > 0; j++) {
        const reg_ent *e = &p->acc[j];
        if (e->kind != REG_ACC || e->mb != mb - 1) {
            rc = di_error_set(c->err, DI_EINTERNAL, "missing accumulator");
            goto done;
        }
        inputs[nin] = e->tv;
        lts[nin] = e->lt;
        pls[nin++] = e->pl;
    }
    /* ZeRO-3: the ordering tokens of the group's previous chunk (zero3_units). */
    if (c->s.zero >= 3 && p->kind != PROG_S && tok[0].kind != 0)
        for (ntok = 0; ntok < 2; ntok++) {
            inputs[nin] = tok[ntok].tv;
            lts[nin] = tok[ntok].lt;
            pls[nin++] = tok[ntok].pl;
        }
    if (p->kind != PROG_S)
        var = find_variant(p, key, nin, lts, pls);
    if (var != NULL) {
        nres = var->nres;
        hastok = var->tok;
        memcpy(opl, var->opl, nres * sizeof *opl);
        if ((rc = xf_pl_make_pmap(P, g, inputs, nin, var->func, 1, &pm)) != 0)
            goto done;
    } else if (p->kind == PROG_S) {
        xf_body_begin(b, P->mesh[g], g);
        if ((rc = build_body(P, p, mb, nin, ntok, lts, pls, opl, &nres, &hastok)) != 0 ||
            (rc = xf_pl_make_pmap(P, g, inputs, nin, b->region, 0, &pm)) != 0)
            goto done;
    } else {
        char name[96];
        variant *nv;
        variant_name(P, p, key, name, sizeof name);
        xf_body_begin_func(b, P->mesh[g], g, name);
        if ((rc = build_body(P, p, mb, nin, ntok, lts, pls, opl, &nres, &hastok)) != 0 ||
            (rc = xf_pl_make_pmap(P, g, inputs, nin, b->region, 1, &pm)) != 0)
            goto done;
        DI_GROW(&p->var, &p->cvar, p->nvar + 1);
        nv = &p->var[p->nvar++];
        nv->key = key;
        nv->tok = (uint8_t)hastok;
        nv->func = b->region;
        nv->nsig = nin;
        nv->lt = di_xmalloc((nin + 1) * sizeof *nv->lt);
        nv->pl = di_xmalloc((nin + 1) * sizeof *nv->pl);
        nv->nres = nres;
        nv->opl = di_xmalloc((nres + 1) * sizeof *nv->opl);
        memcpy(nv->lt, lts, nin * sizeof *lts);
        memcpy(nv->pl, pls, nin * sizeof *pls);
        memcpy(nv->opl, opl, nres * sizeof *opl);
    }
    /*
     * What the chunk is, for traces and tools (discardable): its microbatch,
     * model stage and phase. A once-per-step program is the optimizer step.
     */
    if (p->kind != PROG_S) {
        ir_op_set_int(P->out, pm, "dist.mb", mb);
        ir_op_set_int(P->out, pm, "dist.stage", p->stage);
    }
    ir_op_set_string(P->out, pm, "dist.phase",
                     p->kind == PROG_F ? "forward" : p->kind == PROG_B ? "backward" : "optimizer");
    /* Register the results and send them where they are needed. */
    {
        uint32_t k = 0;
        if (p->kind != PROG_S && p->vals == NULL)
            p->vals = di_xcalloc((size_t)p->out.n * c->n[XF_MB] + 1, sizeof *p->vals);
        for (uint32_t j = 0; j < p->out.n; j++, k++) {
            ir_id v = p->out.v[j];
            const reg_ent *e;
            if (p->kind == PROG_S) {
                xf_pl_reg_put(P, REG_STEP, v, 0, g, ir_op_output(P->out, pm, k),
                              xf_pl_result_lt(P, pm, k), &opl[k]);
                e = xf_pl_reg_find(P, REG_STEP, v, 0, g);
            } else {
                reg_ent *ne = &p->vals[(size_t)mb * p->out.n + j];
                ne->kind = REG_VAL;
                ne->v = v;
                ne->mb = mb;
                ne->g = g;
                ne->tv = ir_op_output(P->out, pm, k);
                ne->lt = xf_pl_result_lt(P, pm, k);
                ne->pl = opl[k];
                e = ne;
            }
            if (p->kind == PROG_S) {
                if ((rc = xf_pl_send_needs(P, e, 0)) != 0)
                    goto done;
            } else {
                xf_pl_defer(P, e);
            }
            if (p->kind == PROG_S) /* sending may have grown the registry: find it again */
                e = xf_pl_reg_find(P, REG_STEP, v, 0, g);
            if ((p->kind == PROG_S || mb == last) && (rc = xf_pl_send_needs(P, e, 1)) != 0)
                goto done;
        }
        /*
         * Only the next chunk of this program reads an accumulator, until the
         * last, which the step programs read: only that one is registered.
         */
        for (uint32_t j = 0; j < p->leaf.n; j++, k++) {
            ir_id v = p->leaf.v[j];
            reg_ent *e = &p->acc[j];
            e->kind = REG_ACC;
            e->v = v;
            e->mb = mb;
            e->g = g;
            e->tv = ir_op_output(P->out, pm, k);
            e->lt = xf_pl_result_lt(P, pm, k);
            e->pl = opl[k];
            if (mb == last) {
                xf_pl_reg_put(P, REG_ACC, v, mb, g, e->tv, e->lt, &e->pl);
                if ((rc = xf_pl_send_needs(P, xf_pl_reg_find(P, REG_ACC, v, mb, g), 1)) != 0)
                    goto done;
            }
        }
        if (p->kind == PROG_F && xf_stash_copies(c, mb)) {
            for (uint32_t j = 0; j < p->stash.n; j++, k++)
                xf_pl_reg_put(P, REG_STASH, p->stash.v[j], mb, g, ir_op_output(P->out, pm, k),
                              xf_pl_result_lt(P, pm, k), &opl[k]);
        }
        for (uint32_t j = 0; j < p->res.n; j++) {
            uint32_t r = p->res.v[j];
            int per_mb = p->kind != PROG_S && c->rreq[r].a[XF_MB] != XF_R && c->n[XF_MB] > 1;
            if (p->kind != PROG_S && !per_mb && c->n[XF_MB] > 1 && mb != last)
                continue;
            xf_pl_layout_result(P, r, per_mb ? mb : 0, g, &opl[k], ir_op_output(P->out, pm, k));
            k++;
        }
    }
    /* Its ordering tokens, for the group's next chunk (or none). */
    for (uint32_t i = 0; i < 2 && p->kind != PROG_S; i++) {
        memset(&tok[i], 0, sizeof tok[i]);
        if (hastok) {
            uint32_t k = nres - 2 + i;
            tok[i].kind = REG_VAL;
            tok[i].g = g;
            tok[i].mb = mb;
            tok[i].tv = ir_op_output(P->out, pm, k);
            tok[i].lt = xf_pl_result_lt(P, pm, k);
            tok[i].pl = opl[k];
        }
    }
    rc = 0;
done:
    di_free(inputs);
    di_free(lts);
    di_free(pls);
    di_free(opl);
    return rc;
}

/*
 * Marks dist.in_place the all-gathers that make v from the shard a, when they
 * are all it takes (one per axis the shard is split on, each reading the one
 * before): they fill the buffer of which a and each gather's input are views
 * (the simulator counts the buffer for the whole step, the views not), as
 * Megatron-LM's distributed optimizer and DeepSpeed gather in place.
 */
static void
gathers_in_place(ir_module *m, ir_id a, ir_id v)
{
    ir_id x = v;
    while (x != a) {
        ir_id def = m->values[x].def;
        if (def == 0 || m->ops[def].kind != IR_OP_ALLGATHER || m->ops[def].ninput != 1)
            return;
        x = m->refs[m->ops[def].inputs];
    }
    for (x = v; x != a; x = m->refs[m->ops[m->values[x].def].inputs])
        ir_op_set_int(m, m->values[x].def, "dist.in_place", 1);
}

/* ZeRO-1/2: one pmap per group gathering the sharded weights the chunks use. */
int
xf_pl_emit_gathers(pl *P, uint32_t g)
{
    xf_ctx *c = P->c;
    xf_body *b = &P->body;
    idlist ws = {0};
    ir_id *inputs, pm;
    xf_place *pls;
    int rc = 0;
    P->markgen++;
    for (uint32_t pi = 0; pi < 2 * c->K; pi++) {
        const prog *p = &P->prog[pi];
        if (p->group != g)
            continue;
        for (uint32_t j = 0; j < p->in.n; j++) {
            ir_id v = p->in.v[j];
            /*
             * Sharded by ZeRO: on the data axes, or, expert weights split by expert
             * parallelism, on the outer data axis (dp.c).
             */
            int expert = (c->vflags[v] & XF_V_EXPERT) != 0;
            if (!(c->vflags[v] & XF_V_WEIGHT) ||
                (xf_gdata(c, g) <= 1 && c->n[XF_CP] <= 1) ||
                ((expert ? c->place[v].a[XF_EDP] : c->place[v].a[XF_DP]) == XF_R &&
                 c->place[v].a[XF_CP] == XF_R) ||
                P->mark[v] == P->markgen)
                continue;
            P->mark[v] = P->markgen;
            idl_push(&ws, v);
        }
    }
    if (ws.n == 0)
        return 0;
    inputs = di_xmalloc(ws.n * sizeof *inputs);
    pls = di_xmalloc(ws.n * sizeof *pls);
    xf_body_begin(b, P->mesh[g], g);
    for (uint32_t j = 0; j < ws.n && rc == 0; j++) {
        ir_id v = ws.v[j];
        const reg_ent *e = xf_pl_reg_find(P, REG_ARG, v, 0, g);
        xf_local l, o;
        xf_place want;
        ir_id a;
        if (e == NULL) {
            rc = di_error_set(c->err, DI_EINTERNAL, "weight not given to group %u", g);
            break;
        }
        inputs[j] = e->tv;
        a = xf_body_arg(b, v, &e->pl, NULL);
        l.v = a;
        l.pl = e->pl;
        want = e->pl;
        if (!(c->vflags[v] & XF_V_EXPERT))
            want.a[XF_DP] = XF_R;
        want.a[XF_EDP] = XF_R;
        want.a[XF_CP] = XF_R;
        if ((rc = xf_body_convert(b, v, &l, &want, &o)) != 0)
            break;
        if (P->out->values[o.v].def) {
            ir_op_set_string(P->out, P->out->values[o.v].def, "dist.mem", "weights");
            gathers_in_place(P->out, a, o.v);
        }
        ir_region_add_result(P->out, b->region, o.v);
        pls[j] = o.pl;
    }
    if (rc == 0 && (rc = xf_pl_make_pmap(P, g, inputs, ws.n, b->region, 0, &pm)) == 0)
        for (uint32_t j = 0; j < ws.n; j++)
            xf_pl_reg_put(P, REG_GATHERED, ws.v[j], 0, g, ir_op_output(P->out, pm, j),
                          xf_pl_result_lt(P, pm, j), &pls[j]);
    di_free(inputs);
    di_free(pls);
    di_free(ws.v);
    return rc;
}

/* ---- arguments ---- */
