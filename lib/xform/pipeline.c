/*
 * pipeline.c: pipeline parallelism and the assembly of the distributed
 * module (xform_apply).
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
 *     microbatches, such as the tied embedding's two gradients).
 * Constants are cloned into every body that uses them. With recomputation a
 * backward chunk also recomputes forward ops of its stage (recompute.c): all
 * of them (full: only the stage's inputs are kept) or the attention scores,
 * softmax and its dropout (selective).
 *
 * A chunk calls a function of its program (a dist.pmap with a callee)
 * instead of owning a copy of the body: chunks of one program that differ
 * only in their microbatch share it (emit_chunk; a few variants per program:
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
#include "xform/xform_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/sim.h"
#include "xform/autodiff.h"

enum { PROG_F = 0, PROG_B = 1, PROG_S = 2 };
enum { REG_ARG = 1, REG_VAL, REG_ACC, REG_STASH, REG_GATHERED, REG_STEP };

typedef struct idlist {
    ir_id *v;
    uint32_t n, cap;
} idlist;

static void
idl_push(idlist *l, ir_id x)
{
    DI_GROW(&l->v, &l->cap, l->n + 1);
    l->v[l->n++] = x;
}

typedef struct prog {
    uint8_t kind;
    uint32_t stage; /* model stage (F, B) or group (S) */
    uint32_t group;
    idlist ops;     /* source ops in order */
    idlist in;      /* external inputs (source values) */
    idlist out;     /* values other programs need (per instance) */
    idlist leaf;    /* gradient contributions accumulated across microbatches */
    idlist stash;   /* weights stashed (F) or read from the stash (B) */
    idlist res;     /* indices of the function's results output here */
    idlist lazy;    /* ops (also in ops) emitted only when a later op needs them */
    struct reg_ent *argc; /* per input: its entry when it is the same for every microbatch */
    struct variant *var;  /* the functions its chunks call (F, B) */
    uint32_t nvar, cvar;
    struct reg_ent *acc;  /* per leaf: the accumulator of its latest chunk (see emit_chunk) */
    struct reg_ent *vals; /* [mb][j]: output j of chunk mb on the program's group (F, B) */
} prog;

/* A function that chunks of one program call (see emit_chunk). */
typedef struct variant {
    uint8_t key;   /* VAR_* */
    ir_id func;
    uint32_t nsig; /* arguments: inputs, then accumulators */
    ir_id *lt;     /* per argument: its per-device type */
    xf_place *pl;  /* per argument: its placement */
    uint32_t nres;
    xf_place *opl; /* per result: its placement */
} variant;

typedef struct reg_ent {
    uint32_t kind, v, mb, g;
    ir_id tv;     /* the top-level tuple */
    ir_id lt;     /* its per-device type on the device variable */
    xf_place pl;
} reg_ent;

/* (per-device type, group) -> the tuple type over the group's devices. */
typedef struct tt_ent {
    ir_id lt, tt;
    uint32_t g;
} tt_ent;

/* A use of a value by another group: after which instance to send and at what level. */
typedef struct need {
    uint32_t g;      /* destination group */
    uint8_t step;    /* needed by a once-per-step program (send the last instance) */
    uint32_t next;   /* 1 + index of the next need of the same value, 0 none */
} need;

typedef struct pl {
    xf_ctx *c;
    ir_module *out;
    ir_id func;
    ir_id *mesh;      /* per group */
    ir_attr *pmattr;  /* per group: the chunks' "devices" attribute (one list, shared), or kind 0 */
    ir_attr devvar;   /* the chunks' device_var = "d" attribute, or kind 0 */
    uint32_t *leafgen, *leafop; /* per source op: stamp, and first leaf it makes + 1 */
    uint32_t leafstamp;
    const idlist *curleaves;    /* the leaves of the body being built */
    int32_t *devs;    /* every group's dp*tp device ids, from devs[c->goff[g]] */
    uint32_t maxgdev; /* the largest group's device count */
    prog *prog;       /* F[0..K), B[0..K), S[0..pp) */
    uint32_t nprog;
    int32_t *home;    /* per source op: the program that defines it, -1 none */
    uint32_t *mark;   /* per source value: scratch generation marks */
    uint32_t markgen;
    need *needs;
    uint32_t nneed, cneed;
    uint32_t *needhead; /* per source value */
    uint8_t *isleaf;    /* per source value */
    uint32_t *isout;    /* per source value: 1 + its index in its home program's outputs */
    int8_t *leaftgt;    /* per source value: see leaf_targets */
    int8_t *leaftp;     /* per source value: its first step consumer's tensor-axis placement */
    /* registry */
    reg_ent *reg;
    uint32_t creg, nreg;
    xf_body body;
    xform_layout *lay;
    uint32_t cargs, cres;
    ir_id *tmp;        /* maxgdev scratch ids */
    tt_ent *tt;        /* open-addressing cache of group tuple types */
    uint32_t ctt, ntt;
    int64_t *tmpdev;   /* maxgdev scratch device ids */
} pl;

static void pl_fini(pl *P);

/* The device count of group g, and its device ids. */
static uint32_t
gdev(const pl *P, uint32_t g)
{
    return P->c->gdp[g] * P->c->gtp[g];
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

/* splitmix64's finalizer over the packed key. */
static uint64_t
mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static uint64_t
reg_hash(uint32_t kind, uint32_t v, uint32_t mb, uint32_t g)
{
    return mix64(((uint64_t)v << 32 | mb) ^ mix64((uint64_t)g << 8 | kind));
}

static reg_ent *
reg_find(pl *P, uint32_t kind, uint32_t v, uint32_t mb, uint32_t g)
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

static void
reg_put(pl *P, uint32_t kind, uint32_t v, uint32_t mb, uint32_t g, ir_id tv, ir_id lt,
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
                reg_put(P, old[i].kind, old[i].v, old[i].mb, old[i].g, old[i].tv, old[i].lt,
                        &old[i].pl);
        di_free(old);
    }
    e = reg_find(P, kind, v, mb, g);
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

/*
 * An op's weight for balancing: the simulator's time on the target
 * hardware (by_time), else its FLOPs.
 */
static double
op_weight(const xf_ctx *c, ir_id op, int by_time)
{
    ir_cost k;
    if (by_time) {
        double t = sim_op_time(c->m, op, c->hw, 0);
        return t > 0 ? t : 0;
    }
    ir_op_cost(c->m, op, &k);
    return k.flops > 0 ? k.flops : 0;
}

/*
 * Partitions the layers into K contiguous groups minimizing the largest
 * group's cost (embedding counted with the first layer, head with the
 * last); ties go to the most even layer counts. The cost is the
 * simulator's time on the target hardware when every op can be priced
 * (so memory-bound ops count for what they cost), else FLOPs.
 */
static int
balance(xf_ctx *c)
{
    const ir_module *m = c->m;
    const ir_region *fr = &m->regions[c->func];
    uint32_t L = c->nlayer, K = c->K;
    double *cost = di_xcalloc(L + 1, sizeof *cost), *pre;
    double *best;
    double *sq;
    uint32_t *cut;
    int by_time = c->hw != NULL;
    c->layer_stage = di_xcalloc(L ? L : 1, sizeof *c->layer_stage);
    if (L == 0 || K <= 1) {
        di_free(cost);
        return 0;
    }
    if (c->s.nstages > 0 && c->s.stages[0].layers > 0) {
        /* The layer counts the strategy gives (one model stage per group, validated). */
        for (uint32_t k = 0, l = 0; k < K; k++)
            for (uint32_t j = 0; j < c->s.stages[k].layers && l < L; j++)
                c->layer_stage[l++] = (int32_t)k;
        di_free(cost);
        return 0;
    }
    for (uint32_t i = 0; i < fr->nop && by_time; i++)
        if (sim_op_time(m, fr->ops[i], c->hw, 0) < 0)
            by_time = 0;
    for (uint32_t i = 0; i < fr->nop; i++) {
        ir_id op = fr->ops[i];
        const char *part = xf_op_str(m, op, "dist.part");
        double f;
        uint32_t idx = 0;
        if (c->vflags[m->ops[op].noutput ? m->ops[op].outputs : 0] & XF_V_CONST)
            continue;
        f = op_weight(c, op, by_time);
        if (part && strcmp(part, "embed") == 0) {
            idx = 0;
        } else if (part && strcmp(part, "head") == 0) {
            idx = L - 1;
        } else if (c->op[op].layer >= 0) {
            for (idx = 0; idx < L && c->layers[idx] != c->op[op].layer; idx++)
                ;
            if (idx == L)
                idx = 0;
        } else {
            continue;
        }
        cost[idx] += f;
    }
    pre = di_xcalloc(L + 1, sizeof *pre);
    for (uint32_t i = 0; i < L; i++)
        pre[i + 1] = pre[i] + cost[i];
    /* best[k][j]: the first j layers in k groups; sq: sum of squared counts (tie-break). */
    best = di_xmalloc((size_t)(K + 1) * (L + 1) * sizeof *best);
    sq = di_xmalloc((size_t)(K + 1) * (L + 1) * sizeof *sq);
    cut = di_xcalloc((size_t)(K + 1) * (L + 1), sizeof *cut);
#define AT(a, k, j) a[(size_t)(k) * (L + 1) + (j)]
    for (uint32_t k = 0; k <= K; k++)
        for (uint32_t j = 0; j <= L; j++) {
            AT(best, k, j) = INFINITY;
            AT(sq, k, j) = INFINITY;
        }
    AT(best, 0, 0) = 0;
    AT(sq, 0, 0) = 0;
    for (uint32_t k = 1; k <= K; k++)
        for (uint32_t j = k; j <= L; j++)
            for (uint32_t i = k - 1; i < j; i++) {
                /* Groups of other shapes: the cost per device of the group. */
                double b = AT(best, k - 1, i), s = pre[j] - pre[i];
                if (c->hetero)
                    s /= (double)c->gdp[(k - 1) % c->pp] * c->gtp[(k - 1) % c->pp];
                double v = b > s ? b : s, q = AT(sq, k - 1, i) + (double)(j - i) * (j - i);
                double cur = AT(best, k, j);
                if (v < cur * (1 - 1e-12) ||
                    (v <= cur * (1 + 1e-12) && q < AT(sq, k, j))) {
                    AT(best, k, j) = v;
                    AT(sq, k, j) = q;
                    AT(cut, k, j) = i;
                }
            }
    {
        uint32_t j = L;
        for (uint32_t k = K; k >= 1; k--) {
            uint32_t i = AT(cut, k, j);
            for (uint32_t l = i; l < j; l++)
                c->layer_stage[l] = (int32_t)(k - 1);
            j = i;
        }
    }
#undef AT
    di_free(cost);
    di_free(pre);
    di_free(best);
    di_free(sq);
    di_free(cut);
    return 0;
}

/* Model stage of every non-constant op. */
static int
assign_stages(xf_ctx *c)
{
    const ir_module *m = c->m;
    const ir_region *fr = &m->regions[c->func];
    int rc = balance(c);
    if (rc)
        return rc;
    for (uint32_t i = 0; i < fr->nop; i++) {
        ir_id op = fr->ops[i];
        const ir_op *o = &m->ops[op];
        xf_opinfo *oi = &c->op[op];
        const char *part;
        if (o->noutput && (c->vflags[o->outputs] & XF_V_CONST))
            continue;
        if (c->K <= 1) {
            oi->stage = 0;
            continue;
        }
        part = xf_op_str(m, op, "dist.part");
        if (part && strcmp(part, "embed") == 0) {
            oi->stage = 0;
        } else if (part && strcmp(part, "head") == 0) {
            oi->stage = (int32_t)c->K - 1;
        } else if (oi->layer >= 0) {
            int32_t li = xf_layer_index(c, oi->layer);
            oi->stage = li >= 0 ? c->layer_stage[li] : 0;
        } else {
            /* Unannotated: the latest stage among the inputs' producers. */
            int32_t s = 0;
            for (uint32_t k = 0; k < o->ninput; k++) {
                ir_id d = m->values[m->refs[o->inputs + k]].def;
                if (d && c->op[d].stage > s)
                    s = c->op[d].stage;
            }
            oi->stage = s;
        }
    }
    return 0;
}

/* ---- programs ---- */

static prog *
prog_of(pl *P, int kind, uint32_t stage)
{
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

    /* Recomputation (recompute.c): the backward chunk also runs forward ops of its stage. */
    if (c->s.recompute != XFORM_RECOMPUTE_NONE) {
        if (c->s.recompute == XFORM_RECOMPUTE_SELECTIVE)
            xf_recompute_mark(c);
        for (uint32_t k = 0; k < K; k++) {
            prog *b = prog_of(P, PROG_B, k), *f = prog_of(P, PROG_F, k);
            ir_id *re = di_xmalloc((f->ops.n + 1) * sizeof *re);
            uint32_t nre = xf_recompute_ops(c, f->ops.v, f->ops.n, b->ops.v, b->ops.n, P->home,
                                            (int32_t)(f - P->prog), re);
            idlist ops = {0};
            /*
             * Each recomputed op is emitted right before its first use
             * (lazily, emit_chunk), so one layer's recomputed activations
             * (or, selective, one layer's scores) are live at a time.
             */
            for (uint32_t j = 0; j < nre; j++) {
                idl_push(&ops, re[j]);
                idl_push(&b->lazy, re[j]);
            }
            for (uint32_t j = 0; j < b->ops.n; j++)
                idl_push(&ops, b->ops.v[j]);
            di_free(b->ops.v);
            b->ops = ops;
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
             * buckets as it goes (PyTorch DDP without gradient accumulation).
             */
            if (p->kind == PROG_S && h->kind != PROG_S &&
                (c->place[v].a[XF_MB] == XF_P ||
                 (c->n[XF_MB] == 1 && c->s.overlap_grad_reduce && c->place[v].a[XF_DP] == XF_P))) {
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
    if (c->s.stash != XFORM_STASH_NONE) {
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

static void
layout_result(pl *P, uint32_t index, uint32_t mb, uint32_t g, const xf_place *p, ir_id tv)
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

static int make_pmap(pl *P, uint32_t g, ir_id *inputs, uint32_t nin, ir_id body, int callee,
                     ir_id *op);

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
    xf_place A = e->pl, T = e->pl, mbonly = {{e->pl.a[XF_MB], XF_R, XF_R}};
    int64_t G[IR_MAX_RANK];
    piece *ps;
    int rc = 0;
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
    if (!xf_place_eq(&A, &e->pl)) {
        xf_body *b = &P->body;
        xf_local l, r;
        ir_id pm;
        xf_body_begin(b, P->mesh[g], g);
        l.v = xf_body_arg_typed(b, v, e->lt, &e->pl);
        l.pl = e->pl;
        if ((rc = xf_body_convert(b, v, &l, &A, &r)) != 0)
            return rc;
        ir_region_add_result(o, b->region, r.v);
        if ((rc = make_pmap(P, g, &src, 1, b->region, 0, &pm)) != 0)
            return rc;
        src = ir_op_output(o, pm, 0);
    }
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

/* Sends registry entry e to every group that needs its value at this level. */
static int
send_needs(pl *P, const reg_ent *e0, int step)
{
    reg_ent e = *e0;
    for (uint32_t i = P->needhead[e.v]; i; i = P->needs[i - 1].next) {
        const need *n = &P->needs[i - 1];
        ir_id tv;
        if (n->step != step || n->g == e.g || reg_find(P, e.kind, e.v, e.mb, n->g))
            continue;
        if (!xf_same_shape(P->c, e.g, n->g)) {
            reg_ent r;
            int rc = relayout(P, &e, n->g, &r);
            if (rc != 0)
                return rc;
            reg_put(P, e.kind, e.v, e.mb, n->g, r.tv, r.lt, &r.pl);
            continue;
        }
        tv = send_tuple(P, e.tv, e.lt, n->g);
        reg_put(P, e.kind, e.v, e.mb, n->g, tv, e.lt, &e.pl);
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
    return reg_find(P, REG_VAL, v, mb, g);
}

/* The registry entry holding input v of program p for microbatch mb on its group. */
static const reg_ent *
resolve(pl *P, const prog *p, ir_id v, uint32_t mb)
{
    xf_ctx *c = P->c;
    const ir_module *m = c->m;
    uint32_t g = p->group, last = c->n[XF_MB] - 1;
    ir_id d = m->values[v].def;
    if (d == 0) {
        if (c->vflags[v] & XF_V_DATA)
            return reg_find(P, REG_ARG, v, mb, g);
        if (p->kind == PROG_B && c->s.stash != XFORM_STASH_NONE) {
            for (uint32_t j = 0; j < p->stash.n; j++)
                if (p->stash.v[j] == v)
                    return reg_find(P, REG_STASH, v, xf_stash_version(c, mb), g);
        }
        if (p->kind != PROG_S) {
            const reg_ent *e = reg_find(P, REG_GATHERED, v, 0, g);
            if (e)
                return e;
        }
        return reg_find(P, REG_ARG, v, 0, g);
    }
    if (P->prog[P->home[d]].kind == PROG_S)
        return reg_find(P, REG_STEP, v, 0, g);
    if (p->kind == PROG_S)
        return P->isleaf[v] ? reg_find(P, REG_ACC, v, last, g) : val_find(P, v, last, g);
    return val_find(P, v, mb, g);
}

/* The per-device type of result k of pmap op pm (its body's result). */
static ir_id
result_lt(pl *P, ir_id pm, uint32_t k)
{
    const ir_region *b = &P->out->regions[P->out->ops[pm].body];
    return P->out->values[b->results[k]].type;
}

/*
 * Creates a pmap over group g with the given inputs: it owns region body, or
 * with callee it calls function body. Returns the op.
 */
static int
make_pmap(pl *P, uint32_t g, ir_id *inputs, uint32_t nin, ir_id body, int callee, ir_id *op)
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
    for (uint32_t i = fr->nop; i-- > 0;) {
        ir_id op = fr->ops[i];
        const ir_op *o = &m->ops[op];
        if (c->op[op].phase != XF_PH_STEP)
            continue;
        for (uint32_t k = 0; k < o->ninput; k++) {
            P->leaftgt[m->refs[o->inputs + k]] = c->req[o->inputs + k].a[XF_DP];
            P->leaftp[m->refs[o->inputs + k]] = c->req[o->inputs + k].a[XF_TP];
        }
    }
}

/* ---- chunks ---- */

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
    if (mb == c->n[XF_MB] - 1 && (p->leaf.n > 0 || p->res.n > 0))
        key |= VAR_LAST;
    if (p->kind == PROG_F && c->s.stash == XFORM_STASH_2BW && xf_stash_copies(c, mb) &&
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

static void
variants_free(prog *p)
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
    uint8_t *pending;    /* per leaf: reduce-scattered per microbatch, accumulated after the split */
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

/* Converts a gradient whose microbatch sum is complete (to: on the data axis). */
static int
convert_summed(xf_body *b, ir_id src, xf_local *l, int8_t to)
{
    xf_place want = l->pl;
    int rc, step = b->step;
    want.a[XF_DP] = to;
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

static int leaf_accumulate(pl *P, prog *p, uint32_t mb, leafbuf *lb, uint32_t j, xf_local l);

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
        rc = convert_summed(b, P->curleaves->v[j], &lb->fin[j], XF_R);
    } else {
        ir_id *srcs, red = 0;
        xf_local *ls;
        bucket_members(P, lb, lb->bk, lb->nbk, &srcs, &ls);
        rc = xf_body_bucket_reduce(b, srcs, ls, lb->nbk, lb->bkscatter, &red);
        if (rc == 0) {
            /* Split after the backward pass (buckets_split). */
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
    uint64_t cap = (uint64_t)(c->s.bucket_mb ? c->s.bucket_mb : XFORM_BUCKET_MB_DEFAULT) << 20;
    uint64_t bytes = ir_type_bytes(P->out, P->out->values[lb->fin[j].v].type);
    int rc;
    /* As DDP, the first bucket holds at most 1 MiB, so that reduction starts early. */
    if (lb->nflushed == 0 && cap > (1u << 20))
        cap = 1u << 20;
    if (lb->nbk > 0 && (lb->bkdtype != dtype || lb->bkscatter != scatter) &&
        (rc = bucket_flush(P, lb)) != 0)
        return rc;
    lb->bk[lb->nbk++] = j;
    lb->bkdtype = dtype;
    lb->bkscatter = scatter;
    lb->bkbytes += bytes;
    if (lb->bkbytes >= cap)
        return bucket_flush(P, lb);
    return 0;
}

/* Splits the launched buckets into their gradients (after the backward pass). */
static int
buckets_split(pl *P, prog *p, uint32_t mb, leafbuf *lb)
{
    xf_body *b = &P->body;
    int rc = 0;
    for (uint32_t i = 0; i < lb->nlaunched && rc == 0; i++) {
        uint32_t n = lb->launched[i].n, *idx = lb->done_bk + lb->launched[i].first;
        ir_id *srcs;
        xf_local *ls;
        bucket_members(P, lb, idx, n, &srcs, &ls);
        rc = xf_body_bucket_split(b, srcs, ls, n, lb->launched[i].scatter, lb->launched[i].red);
        for (uint32_t k = 0; k < n && rc == 0; k++) {
            lb->fin[idx[k]] = ls[k];
            /* A ZeRO-2/3 microbatch gradient: now added to its accumulator. */
            if (lb->pending[idx[k]]) {
                lb->pending[idx[k]] = 0;
                rc = leaf_accumulate(P, p, mb, lb, idx[k], ls[k]);
            }
        }
        di_free(srcs);
        di_free(ls);
    }
    lb->nlaunched = 0;
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
    if (XF_IS_S(l->pl.a[XF_TP]) && l->pl.a[XF_TP] == tgt && P->leaftp[v] != l->pl.a[XF_TP])
        want.a[XF_TP] = P->leaftp[v];
    return want;
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
            lb->fin[j] = l;
            lb->pending[j] = 1;
            return bucket_add(P, lb, j, 1);
        }
        if ((rc = xf_body_convert(b, v, &l, &want, &l)) != 0)
            return rc;
    }
    return leaf_accumulate(P, p, mb, lb, j, l);
}

/* Adds leaf j's value l to the accumulation of earlier microbatches; on the last, reduces it. */
static int
leaf_accumulate(pl *P, prog *p, uint32_t mb, leafbuf *lb, uint32_t j, xf_local l)
{
    xf_ctx *c = P->c;
    xf_body *b = &P->body;
    const ir_module *m = c->m;
    uint32_t last = c->n[XF_MB] - 1;
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
    if (!c->s.overlap_grad_reduce || c->s.zero >= 2 || tgt == XF_P || l.pl.a[XF_DP] == tgt)
        return 0;
    /* An all-reduce, or ZeRO-1's reduce-scatter: into a bucket, launched once full. */
    if (tgt == XF_R && l.pl.a[XF_DP] == XF_P)
        return bucket_add(P, lb, j, 0);
    {
        xf_place want = leaf_want(P, v, &l, tgt);
        if (tgt == 0 && want.a[XF_TP] == l.pl.a[XF_TP] && xf_body_scatter_ok(b, &l))
            return bucket_add(P, lb, j, 1);
        if (want.a[XF_TP] == l.pl.a[XF_TP])
            return convert_summed(b, v, &lb->fin[j], tgt);
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
    uint64_t cap = (uint64_t)(c->s.bucket_mb ? c->s.bucket_mb : XFORM_BUCKET_MB_DEFAULT) << 20;
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
    /* Group the candidates into buckets (members srcs/ls[bfirst[i] .. + bn[i])). */
    for (uint32_t j = 0; j < n && rc == 0; j++) {
        ir_id v = p->in.v[j];
        const ir_type *t;
        int8_t tgt = P->leaftgt[v];
        int scatter;
        if (pls[j].a[XF_DP] != XF_P || (!P->isleaf[v] && use[v] != 1))
            continue;
        if (tgt != XF_R && tgt != 0)
            continue;
        if ((rc = xf_body_get(b, v, &ls[nm])) != 0)
            break;
        ls[nm].pl = xf_place_on(&ls[nm].pl, b->n);
        ls[nm].pl.a[XF_MB] = XF_R;
        scatter = tgt == 0;
        if (scatter && (!xf_body_scatter_ok(b, &ls[nm]) ||
                        leaf_want(P, v, &ls[nm], tgt).a[XF_TP] != ls[nm].pl.a[XF_TP]))
            continue;
        t = &P->out->types[P->out->values[ls[nm].v].type];
        if (nb == 0 || bytes >= cap || dtype != (int)t->dtype || kind != scatter) {
            bfirst[nb] = nm;
            bsc[nb] = (uint8_t)scatter;
            bn[nb++] = 0;
            bytes = 0;
        }
        srcs[nm++] = v;
        bn[nb - 1]++;
        bytes += ir_type_bytes(P->out, P->out->values[ls[nm - 1].v].type);
        dtype = (int)t->dtype;
        kind = scatter;
    }
    /* Launch every bucket, then split them back (a lone all-reduce: an ordinary conversion). */
    for (uint32_t i = 0; i < nb && rc == 0; i++) {
        if (bn[i] == 1 && !bsc[i])
            rc = convert_summed(b, srcs[bfirst[i]], &ls[bfirst[i]], XF_R);
        else
            rc = xf_body_bucket_reduce(b, srcs + bfirst[i], ls + bfirst[i], bn[i], bsc[i],
                                       &red[i]);
    }
    for (uint32_t i = 0; i < nb && rc == 0; i++) {
        if (bn[i] == 1 && !bsc[i])
            continue;
        rc = xf_body_bucket_split(b, srcs + bfirst[i], ls + bfirst[i], bn[i], bsc[i], red[i]);
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

static int
build_body(pl *P, prog *p, uint32_t mb, uint32_t nin, const ir_id *lt, const xf_place *pls,
           xf_place *opl, uint32_t *nresp)
{
    xf_ctx *c = P->c;
    xf_body *b = &P->body;
    const ir_module *m = c->m;
    uint32_t last = c->n[XF_MB] - 1, nres = 0;
    ir_id *acc_in = di_xmalloc((p->leaf.n + 1) * sizeof *acc_in);
    leafbuf lb;
    int rc = 0;

    memset(&lb, 0, sizeof lb);
    b->step = p->kind == PROG_S;
    for (uint32_t j = 0; j < p->in.n; j++)
        xf_body_arg_typed(b, p->in.v[j], lt[j], &pls[j]);
    for (uint32_t j = p->in.n; j < nin; j++)
        acc_in[j - p->in.n] = ir_region_add_arg(P->out, b->region, lt[j], NULL);
    if (p->kind == PROG_S && (rc = step_buckets(P, p, pls)) != 0)
        goto out;
    /* The program's ops. */
    for (uint32_t j = 0; j < p->lazy.n; j++)
        b->lazygen[p->lazy.v[j]] = b->gen;
    leaves_begin(P, p, pls + p->in.n, acc_in, &lb);
    for (uint32_t j = 0; j < p->ops.n; j++) {
        ir_id op = p->ops.v[j];
        if (b->lazygen[op] == b->gen)
            continue;
        if ((rc = xf_body_emit(b, op)) != 0)
            goto out;
        /* A gradient is accumulated (and reduced) as soon as its op has run. */
        if (P->leafgen[op] == P->leafstamp)
            for (uint32_t k = P->leafop[op]; k; k = lb.next[k - 1])
                if (!lb.done[k - 1] && (rc = leaf_finish(P, p, mb, &lb, k - 1)) != 0)
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
    if ((rc = bucket_flush(P, &lb)) != 0 || (rc = buckets_split(P, p, mb, &lb)) != 0)
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
static int
emit_chunk(pl *P, prog *p, uint32_t mb)
{
    xf_ctx *c = P->c;
    xf_body *b = &P->body;
    const ir_module *m = c->m;
    uint32_t g = p->group, last = c->n[XF_MB] - 1, nin = 0, nres = 0;
    uint32_t nmax = p->in.n + p->leaf.n + 1;
    ir_id *inputs, *lts, pm;
    xf_place *pls, *opl;
    const variant *var = NULL;
    uint8_t key = variant_key(P, p, mb);
    int rc;
    inputs = di_xmalloc(nmax * sizeof *inputs);
    lts = di_xmalloc(nmax * sizeof *lts);
    pls = di_xmalloc(nmax * sizeof *pls);
    opl = di_xmalloc((p->out.n + p->leaf.n + p->stash.n + p->res.n + 1) * sizeof *opl);
    if (p->argc == NULL)
        p->argc = di_xcalloc(p->in.n + 1, sizeof *p->argc);
    for (uint32_t j = 0; j < p->in.n; j++) {
        ir_id v = p->in.v[j];
        const reg_ent *e = p->argc[j].kind ? &p->argc[j] : resolve(P, p, v, mb);
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
    if (p->kind != PROG_S)
        var = find_variant(p, key, nin, lts, pls);
    if (var != NULL) {
        nres = var->nres;
        memcpy(opl, var->opl, nres * sizeof *opl);
        if ((rc = make_pmap(P, g, inputs, nin, var->func, 1, &pm)) != 0)
            goto done;
    } else if (p->kind == PROG_S) {
        xf_body_begin(b, P->mesh[g], g);
        if ((rc = build_body(P, p, mb, nin, lts, pls, opl, &nres)) != 0 ||
            (rc = make_pmap(P, g, inputs, nin, b->region, 0, &pm)) != 0)
            goto done;
    } else {
        char name[96];
        variant *nv;
        variant_name(P, p, key, name, sizeof name);
        xf_body_begin_func(b, P->mesh[g], g, name);
        if ((rc = build_body(P, p, mb, nin, lts, pls, opl, &nres)) != 0 ||
            (rc = make_pmap(P, g, inputs, nin, b->region, 1, &pm)) != 0)
            goto done;
        DI_GROW(&p->var, &p->cvar, p->nvar + 1);
        nv = &p->var[p->nvar++];
        nv->key = key;
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
    /* Register the results and send them where they are needed. */
    {
        uint32_t k = 0;
        if (p->kind != PROG_S && p->vals == NULL)
            p->vals = di_xcalloc((size_t)p->out.n * c->n[XF_MB] + 1, sizeof *p->vals);
        for (uint32_t j = 0; j < p->out.n; j++, k++) {
            ir_id v = p->out.v[j];
            const reg_ent *e;
            if (p->kind == PROG_S) {
                reg_put(P, REG_STEP, v, 0, g, ir_op_output(P->out, pm, k), result_lt(P, pm, k),
                        &opl[k]);
                e = reg_find(P, REG_STEP, v, 0, g);
            } else {
                reg_ent *ne = &p->vals[(size_t)mb * p->out.n + j];
                ne->kind = REG_VAL;
                ne->v = v;
                ne->mb = mb;
                ne->g = g;
                ne->tv = ir_op_output(P->out, pm, k);
                ne->lt = result_lt(P, pm, k);
                ne->pl = opl[k];
                e = ne;
            }
            if ((rc = send_needs(P, e, 0)) != 0)
                goto done;
            if (p->kind == PROG_S) /* sending may have grown the registry: find it again */
                e = reg_find(P, REG_STEP, v, 0, g);
            if ((p->kind == PROG_S || mb == last) && (rc = send_needs(P, e, 1)) != 0)
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
            e->lt = result_lt(P, pm, k);
            e->pl = opl[k];
            if (mb == last) {
                reg_put(P, REG_ACC, v, mb, g, e->tv, e->lt, &e->pl);
                if ((rc = send_needs(P, reg_find(P, REG_ACC, v, mb, g), 1)) != 0)
                    goto done;
            }
        }
        if (p->kind == PROG_F && xf_stash_copies(c, mb)) {
            for (uint32_t j = 0; j < p->stash.n; j++, k++)
                reg_put(P, REG_STASH, p->stash.v[j], mb, g, ir_op_output(P->out, pm, k),
                        result_lt(P, pm, k), &opl[k]);
        }
        for (uint32_t j = 0; j < p->res.n; j++) {
            uint32_t r = p->res.v[j];
            int per_mb = p->kind != PROG_S && c->rreq[r].a[XF_MB] != XF_R && c->n[XF_MB] > 1;
            if (p->kind != PROG_S && !per_mb && c->n[XF_MB] > 1 && mb != last)
                continue;
            layout_result(P, r, per_mb ? mb : 0, g, &opl[k], ir_op_output(P->out, pm, k));
            k++;
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

/* ZeRO-1/2: one pmap per group gathering the sharded weights the chunks use. */
static int
emit_gathers(pl *P, uint32_t g)
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
            if (!(c->vflags[v] & XF_V_WEIGHT) || c->place[v].a[XF_DP] == XF_R ||
                c->gdp[g] <= 1 || P->mark[v] == P->markgen)
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
        const reg_ent *e = reg_find(P, REG_ARG, v, 0, g);
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
        want.a[XF_DP] = XF_R;
        if ((rc = xf_body_convert(b, v, &l, &want, &o)) != 0)
            break;
        if (P->out->values[o.v].def)
            ir_op_set_string(P->out, P->out->values[o.v].def, "dist.mem", "weights");
        ir_region_add_result(P->out, b->region, o.v);
        pls[j] = o.pl;
    }
    if (rc == 0 && (rc = make_pmap(P, g, inputs, ws.n, b->region, 0, &pm)) == 0)
        for (uint32_t j = 0; j < ws.n; j++)
            reg_put(P, REG_GATHERED, ws.v[j], 0, g, ir_op_output(P->out, pm, j),
                    result_lt(P, pm, j), &pls[j]);
    di_free(inputs);
    di_free(pls);
    di_free(ws.v);
    return rc;
}

/* ---- arguments ---- */

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
            for (uint32_t mb = 0; mb < (data ? c->n[XF_MB] : 1); mb++) {
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
                reg_put(P, REG_ARG, v, mb, g, av, lt, &gpl);
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
                const reg_ent *e = reg_find(P, REG_ARG, v, 0, g);
                if (e) {
                    layout_result(P, r, 0, g, &e->pl, e->tv);
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
            if ((rc = make_pmap(P, 0, NULL, 0, b->region, 0, &pm)) != 0)
                return rc;
            layout_result(P, r, 0, 0, &l.pl, ir_op_output(P->out, pm, 0));
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
    P.lay->ngroup = c->pp;
    P.lay->group_dp = di_xmalloc(c->pp * sizeof *P.lay->group_dp);
    P.lay->group_tp = di_xmalloc(c->pp * sizeof *P.lay->group_tp);
    P.lay->group_first = di_xmalloc(c->pp * sizeof *P.lay->group_first);
    memcpy(P.lay->group_dp, c->gdp, c->pp * sizeof *c->gdp);
    memcpy(P.lay->group_tp, c->gtp, c->pp * sizeof *c->gtp);
    memcpy(P.lay->group_first, c->goff, c->pp * sizeof *c->goff);
    P.mark = di_xcalloc(m->nvalue ? m->nvalue : 1, sizeof *P.mark);
    P.needhead = di_xcalloc(m->nvalue ? m->nvalue : 1, sizeof *P.needhead);
    P.isleaf = di_xcalloc(m->nvalue ? m->nvalue : 1, 1);
    P.isout = di_xcalloc(m->nvalue ? m->nvalue : 1, sizeof *P.isout);
    for (uint32_t g = 0; g < c->pp; g++)
        if (gdev(&P, g) > P.maxgdev)
            P.maxgdev = gdev(&P, g);
    P.devs = di_xmalloc((c->ndev ? c->ndev : 1) * sizeof *P.devs);
    P.tmp = di_xmalloc(P.maxgdev * sizeof *P.tmp);
    P.tmpdev = di_xmalloc(P.maxgdev * sizeof *P.tmpdev);
    P.mesh = di_xmalloc(c->pp * sizeof *P.mesh);
    P.pmattr = di_xcalloc(c->pp, sizeof *P.pmattr);
    P.leafgen = di_xcalloc(m->nop ? m->nop : 1, sizeof *P.leafgen);
    P.leafop = di_xcalloc(m->nop ? m->nop : 1, sizeof *P.leafop);
    for (uint32_t g = 0; g < c->pp; g++) {
        int64_t shape[2] = {c->gdp[g], c->gtp[g]};
        int64_t *ids = di_xmalloc(gdev(&P, g) * sizeof *ids);
        char name[32];
        for (uint32_t d = 0; d < c->gdp[g]; d++)
            for (uint32_t t = 0; t < c->gtp[g]; t++) {
                int32_t dev = xf_device(c, g, d, t);
                P.devs[c->goff[g] + d * c->gtp[g] + t] = dev;
                ids[d * c->gtp[g] + t] = dev;
            }
        snprintf(name, sizeof name, "stage%u", g);
        P.mesh[g] = ir_mesh_add(P.out, name, 2, shape, ids);
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
            if ((rc = emit_gathers(&P, g)) != 0)
                goto fail;
    for (uint32_t i = 0; i < nev; i++) {
        prog *p = prog_of(&P, ev[i].kind == XF_EV_F ? PROG_F : PROG_B, ev[i].stage);
        if (p->ops.n == 0 && p->leaf.n == 0 && p->out.n == 0 && p->res.n == 0 &&
            p->stash.n == 0)
            continue;
        if ((rc = emit_chunk(&P, p, ev[i].mb)) != 0)
            goto fail;
    }
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
                    ready = resolve(&P, p, p->in.v[j], c->n[XF_MB] - 1) != NULL;
                if (!ready)
                    continue;
                if (p->ops.n || p->res.n || p->out.n)
                    rc = emit_chunk(&P, p, c->n[XF_MB] - 1);
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
    if ((rc = emit_plain_results(&P)) != 0)
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
        variants_free(p);
    }
    di_free(P->prog);
    di_free(P->home);
    di_free(P->mark);
    di_free(P->needs);
    di_free(P->needhead);
    di_free(P->isleaf);
    di_free(P->isout);
    di_free(P->leaftgt);
    di_free(P->leaftp);
    di_free(P->reg);
    di_free(P->devs);
    di_free(P->mesh);
    di_free(P->pmattr);
    di_free(P->leafgen);
    di_free(P->leafop);
    di_free(P->tmp);
    di_free(P->tmpdev);
    di_free(P->tt);
}

/* ---- the public entry points ---- */

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

static int
apply_layout(const ir_module *m, const xform_strategy *s, const hw_model *hw, ir_module **out,
             xform_layout **layout, di_error *err)
{
    xf_ctx c;
    int rc;
    *out = NULL;
    if (layout)
        *layout = NULL;
    if ((rc = xf_ctx_init(&c, m, s, hw, err)) != 0)
        return rc;
    c.place = di_xmalloc((c.m->nvalue ? c.m->nvalue : 1) * sizeof *c.place);
    memset(c.place, XF_R, (c.m->nvalue ? c.m->nvalue : 1) * sizeof *c.place);
    /* Stages first: placements depend on the degrees of the group each op runs on. */
    if ((rc = assign_stages(&c)) != 0 || (rc = xf_annotate_tp(&c)) != 0 || (rc = xf_annotate_dp(&c)) != 0 ||
        (rc = xf_propagate(&c)) != 0 || (rc = xf_pipeline_build(&c, out, layout)) != 0) {
        xf_ctx_fini(&c);
        return rc;
    }
    xf_ctx_fini(&c);
    return 0;
}

/* The arguments of xform_apply_layout, for its allocation scope. */
struct apply_call {
    const ir_module *m;
    const xform_strategy *s;
    const hw_model *hw;
    ir_module **out;
    xform_layout **layout;
    di_error *err;
};

static int
apply_call_run(void *arg)
{
    struct apply_call *c = arg;
    return apply_layout(c->m, c->s, c->hw, c->out, c->layout, c->err);
}

/* The transform runs in an allocation scope: out-of-memory anywhere in it is DI_ENOMEM. */
int
xform_apply_layout(const ir_module *m, const xform_strategy *s, const hw_model *hw,
                   ir_module **out, xform_layout **layout, di_error *err)
{
    struct apply_call c = {m, s, hw, out, layout, err};
    int rc = di_scope_run(apply_call_run, &c, err);
    if (rc != 0) {
        *out = NULL;
        if (layout)
            *layout = NULL;
    }
    return rc;
}

int
xform_apply(const ir_module *m, const xform_strategy *s, const hw_model *hw, ir_module **out,
            di_error *err)
{
    return xform_apply_layout(m, s, hw, out, NULL, err);
}
