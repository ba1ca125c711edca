/*
 * sched.c: the simulator's walk. Ops run in program order on their
 * devices' streams (compute, send, receive, collective); transfers and
 * collectives also take the links they cross, a link's busy intervals kept
 * sorted so that a later transfer may fill an earlier gap. Free ops (views,
 * plumbing) alias their source's instances; sends and collectives form
 * their groups (mesh groups are found once per op and device); a pmap runs
 * its body once per instance, or once for all of them when its devices are
 * symmetric (see pmap_symmetric). Every op's times depend only on earlier
 * ones: results are deterministic.
 */
#include "sim/sim_int.h"

#include <stdlib.h>

static void
ivec_push(ivec *v, double start, double end)
{
    if (end <= start)
        return;
    if (v->n && v->v[v->n - 1].end >= start && v->v[v->n - 1].start <= start) {
        /* Merge with the previous interval (streams are in order). */
        if (end > v->v[v->n - 1].end)
            v->v[v->n - 1].end = end;
        return;
    }
    DI_GROW(&v->v, &v->cap, v->n + 1);
    v->v[v->n].start = start;
    v->v[v->n].end = end;
    v->n++;
}

/*
 * Adds [start, end) to v, kept sorted and disjoint, where intervals may come
 * out of order or overlap earlier ones (the collective streams of several
 * communicators).
 */
static void
ivec_add(ivec *v, double start, double end)
{
    uint32_t i = v->n, j;
    if (end <= start)
        return;
    if (i == 0 || v->v[i - 1].start <= start) {
        ivec_push(v, start, end);
        return;
    }
    while (i > 0 && v->v[i - 1].start > start)
        i--;
    /* v[i] is the first interval starting after start; merge with v[i - 1] if it touches. */
    if (i > 0 && v->v[i - 1].end >= start) {
        i--;
        if (v->v[i].end > end)
            end = v->v[i].end;
        start = v->v[i].start;
    } else {
        DI_GROW(&v->v, &v->cap, v->n + 1);
        memmove(v->v + i + 1, v->v + i, (v->n - i) * sizeof *v->v);
        v->n++;
    }
    /* Swallow the intervals after i that [start, end) reaches. */
    for (j = i + 1; j < v->n && v->v[j].start <= end; j++)
        if (v->v[j].end > end)
            end = v->v[j].end;
    v->v[i].start = start;
    v->v[i].end = end;
    memmove(v->v + i + 1, v->v + j, (v->n - j) * sizeof *v->v);
    v->n -= j - i - 1;
}

/*
 * Links. Streams give issue order (each runs its work in program order);
 * links give contention: a transfer or collective crosses the link level it
 * needs (intra- or inter-node) on every device it involves, starts when its
 * stream allows, and shares the link with the transfers placed before it
 * (link_end). A link's intervals, sorted and disjoint, are the times it
 * carries anything.
 */

/*
 * When a transfer that takes t seconds alone on link l, started at c, ends:
 * the link is shared, not taken in turns (the network interleaves the
 * packets of every transfer it carries): while l carries transfers started
 * before, this one moves at half its rate. Transfers already placed keep
 * their times (the walk is in program order), so a later transfer yields.
 */
static double
link_end(const ivec *l, double c, double t)
{
    uint32_t lo = 0, hi = l->n;
    if (t <= 0 || hi == 0 || l->v[hi - 1].end <= c)
        return c + t; /* the common case: the link is idle from c */
    /* First interval ending after c. */
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (l->v[mid].end <= c)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (uint32_t i = lo; i < l->n; i++) {
        double a = l->v[i].start, b = l->v[i].end;
        if (a > c) { /* idle until a */
            if (t <= a - c)
                return c + t;
            t -= a - c;
            c = a;
        }
        if (t <= (b - c) / 2) /* busy until b: half the rate */
            return c + 2 * t;
        t -= (b - c) / 2;
        c = b;
    }
    return c + t;
}

/* Makes instance a an alias of b's storage. */
static void
inst_alias(sim *s, uint32_t a, uint32_t b)
{
    s->inst[a].owner = s->inst[b].owner;
    s->inst[a].ready = s->inst[b].ready;
    s->inst[a].dev = s->inst[b].dev;
}

static void
inst_use(sim_inst *in, double end)
{
    if (end > in->last_use)
        in->last_use = end;
}

static void
inst_produce(sim_inst *in, double start, double end)
{
    in->alloc = start;
    in->ready = end;
    in->last_use = end;
}

/* Sends e to the trace when its device is recorded. */
static void
emit(sim *s, const sim_event *e)
{
    if (s->trace->select == NULL || s->trace->select[e->device])
        s->trace->event(s->trace->ctx, e);
}

/*
 * An op on one stream of dev. When sym is set, dev is a representative and
 * the op is recorded for each selected device it stands for.
 */
static void
record_event(sim *s, ir_id op, int32_t dev, int stream, double start, double end, int sym)
{
    sim_event e = {op, s->chunk, dev, -1, 0, (uint8_t)stream, start, end};
    if (s->trace == NULL)
        return;
    if (!sym || s->trace->select == NULL) {
        emit(s, &e);
        return;
    }
    for (uint32_t i = 0; i < s->ntsel; i++) {
        int32_t d = s->tsel[i];
        if (d == dev || s->devs[d].rep == dev) {
            e.device = d;
            s->trace->event(s->trace->ctx, &e);
        }
    }
}

/* The n transfers src[j] -> dst[j] of op, each with a flow number, at both ends. */
static void
record_transfers(sim *s, ir_id op, const int32_t *src, const int32_t *dst, uint32_t n, double start,
                 double end)
{
    if (s->trace == NULL)
        return;
    for (uint32_t j = 0; j < n; j++) {
        sim_event e = {op, s->chunk, src[j], dst[j], ++s->flow, STREAM_SEND, start, end};
        emit(s, &e);
        e.device = dst[j];
        e.peer = src[j];
        e.stream = STREAM_RECV;
        emit(s, &e);
    }
}

/*
 * Records work on a device's stream in its history. sym is set when the
 * device is the representative of a symmetric group running that group's
 * common work; any other use of a device that stands for others (or is
 * stood for) breaks the symmetry.
 */
static void
mark_history(sim *s, ir_id op, int32_t dev, int stream, double start, double end, int sym)
{
    sim_dev *d = &s->devs[dev];
    assert(dev >= 0 && (uint32_t)dev < s->ndev && stream >= 0 && stream < NSTREAM);
    assert(end >= start);
    if (!sym && (d->rep != dev || d->class_n > 1))
        s->broken = 1;
    d->hist = sim_hash_combine(
        sim_hash_combine(sim_hash_combine(d->hist, (uint64_t)op << 2 | (uint64_t)stream),
                         di_double_bits(start)),
        di_double_bits(end));
}

/* Occupies a stream (mark_history's sym). */
static void
occupy(sim *s, ir_id op, int32_t dev, int stream, double start, double end, int sym)
{
    sim_dev *d = &s->devs[dev];
    mark_history(s, op, dev, stream, start, end, sym);
    if (s->opt->no_overlap) {
        for (int st = 0; st < NSTREAM; st++)
            d->free[st] = end;
    } else if (stream != STREAM_COLL || end > d->free[stream]) {
        d->free[stream] = end;
    }
    if (stream == STREAM_COLL || stream == STREAM_COMPUTE)
        ivec_add(&d->busy[stream], start, end); /* communicators overlap one another, and
                                                    the reduction stream's kernels compute */
    else
        ivec_push(&d->busy[stream], start, end);
    if (stream != STREAM_SEND && stream != STREAM_RECV) /* transfers: record_transfers */
        record_event(s, op, dev, stream, start, end, sym);
}

/*
 * An op on the reduction stream (dist.reduction_stream): it holds up no
 * stream, but it is a kernel of the device, busy computing meanwhile (shown
 * on the collective stream of the trace).
 */
static void
occupy_side(sim *s, ir_id op, int32_t dev, double start, double end, int sym)
{
    mark_history(s, op, dev, STREAM_COLL, start, end, sym);
    ivec_add(&s->devs[dev].busy[STREAM_COMPUTE], start, end);
    record_event(s, op, dev, STREAM_COLL, start, end, sym);
}

static double
stream_free(const sim *s, int32_t dev, int stream)
{
    return s->devs[dev].free[stream];
}

/*
 * The slot of communicator `key`'s collective stream on device dev (taken
 * when first used; past SIM_NCOMM communicators the last slot is shared).
 */
static sim_comm *
comm_slot(sim *s, int32_t dev, uint64_t key)
{
    sim_comm *c = s->devs[dev].comm;
    uint32_t i;
    for (i = 0; i < SIM_NCOMM - 1 && c[i].key != 0; i++)
        if (c[i].key == key)
            return &c[i];
    c[i].key = key;
    return &c[i];
}

/* The communicator of the group devs[0..n): a hash of its set of devices, never 0. */
static uint64_t
comm_key(const int32_t *devs, uint32_t n)
{
    uint64_t h = 0;
    for (uint32_t i = 0; i < n; i++)
        h += sim_hash_combine(0x636f6d6dull, (uint64_t)(uint32_t)devs[i]); /* order-free */
    h = sim_hash_combine(h, n);
    return h ? h : 1;
}

/* ---- pricing: the cost model (cost.c), memoized ---- */

/* Do ops a and b have the same signature: kind, operand and result types, attributes? */
static int
same_signature(const ir_module *m, ir_id a, ir_id b)
{
    const ir_op *x = &m->ops[a], *y = &m->ops[b];
    if (x->kind != y->kind || x->ninput != y->ninput || x->noutput != y->noutput ||
        x->nattr != y->nattr || x->opaque != y->opaque)
        return 0;
    for (uint32_t i = 0; i < x->ninput; i++)
        if (m->values[m->refs[x->inputs + i]].type != m->values[m->refs[y->inputs + i]].type)
            return 0;
    for (uint32_t i = 0; i < x->noutput; i++)
        if (m->values[x->outputs + i].type != m->values[y->outputs + i].type)
            return 0;
    for (uint32_t i = 0; i < x->nattr; i++) {
        const ir_attr *p = &m->attrs[x->attrs + i], *q = &m->attrs[y->attrs + i];
        if (p->key != q->key || p->kind != q->kind || p->n != q->n || p->i != q->i ||
            memcmp(&p->f, &q->f, sizeof p->f) != 0 || p->s != q->s)
            return 0;
        if (p->n && p->off != q->off) {
            const void *u, *v;
            size_t size;
            if (p->kind == IR_ATTR_INTS) {
                u = m->ints + p->off, v = m->ints + q->off, size = p->n * sizeof(int64_t);
            } else if (p->kind == IR_ATTR_FLOATS) {
                u = m->floats + p->off, v = m->floats + q->off, size = p->n * sizeof(double);
            } else {
                u = m->data + p->off, v = m->data + q->off, size = p->n;
            }
            if (memcmp(u, v, size) != 0)
                return 0;
        }
    }
    return 1;
}

static uint64_t
signature_hash(const ir_module *m, ir_id op)
{
    const ir_op *o = &m->ops[op];
    uint64_t h = sim_hash_combine((uint64_t)o->kind << 32 | o->nattr,
                                  (uint64_t)o->ninput << 32 | o->noutput);
    for (uint32_t i = 0; i < o->ninput; i++)
        h = sim_hash_combine(h, m->values[m->refs[o->inputs + i]].type);
    for (uint32_t i = 0; i < o->noutput; i++)
        h = sim_hash_combine(h, m->values[o->outputs + i].type);
    for (uint32_t i = 0; i < o->nattr; i++) {
        const ir_attr *a = &m->attrs[o->attrs + i];
        h = sim_hash_combine(h, (uint64_t)a->key << 32 ^ (uint64_t)a->i ^ a->s);
    }
    return h;
}

/*
 * sim_cost_compute with memos (homogeneous hardware, where an op's cost depends
 * on the op alone): an op inside a pmap body or a called function runs once
 * per instance and per call, so it is priced once per op; top-level ops are
 * priced once per signature (kind, types, attributes: repeated layers cost
 * the same), in a table of representative ops compared exactly.
 */
static int
op_time(sim *s, ir_id op, int32_t dev, double *t, double *flops)
{
    int rc;
    if (s->fgrp && s->fgrp[op]) {
        /* The first op of a fused group: the whole group as one kernel. */
        sim_fgroup *g = &s->fgroups[s->fgrp[op] - 1];
        if (g->t < 0 || s->hw->noverride) {
            ir_cost c;
            sim_fuse_cost(s, s->fgrp[op] - 1, &c);
            /* A GEMM's epilogue group: the GEMM's tiles and waves. */
            if ((rc = sim_cost_roofline(s, dev, s->m->ops[op].kind, sim_op_dtype(s->m, op),
                                        sim_op_gemm_efficiency(s, op, dev), &c, t)) != 0)
                return rc;
            g->t = *t;
            g->flops = c.flops;
        }
        *t = g->t;
        *flops = g->flops;
        return 0;
    }
    if (s->hw->noverride)
        return sim_cost_compute(s, op, dev, t, flops);
    if (s->m->ops[op].region == s->entry) {
        uint32_t mask, h;
        if ((s->nsig + 1) * 2 > s->csig) {
            /* Grow (and rehash) the signature table. */
            uint32_t old = s->csig;
            sim_sig *tab = s->sigs;
            s->csig = old ? 2 * old : 1024;
            s->sigs = di_xcalloc(s->csig, sizeof *s->sigs);
            for (uint32_t i = 0; i < old; i++)
                if (tab[i].op) {
                    uint32_t j = (uint32_t)tab[i].hash & (s->csig - 1);
                    while (s->sigs[j].op)
                        j = (j + 1) & (s->csig - 1);
                    s->sigs[j] = tab[i];
                }
            di_free(tab);
        }
        uint64_t hash = signature_hash(s->m, op);
        mask = s->csig - 1;
        for (h = (uint32_t)hash & mask; s->sigs[h].op; h = (h + 1) & mask)
            if (s->sigs[h].hash == hash && same_signature(s->m, s->sigs[h].op, op)) {
                *t = s->sigs[h].t;
                *flops = s->sigs[h].flops;
                return 0;
            }
        if ((rc = sim_cost_compute(s, op, dev, t, flops)) != 0)
            return rc;
        s->sigs[h].op = op;
        s->sigs[h].hash = hash;
        s->sigs[h].t = *t;
        s->sigs[h].flops = *flops;
        s->nsig++;
        return 0;
    }
    if (s->memo == NULL) {
        s->memo = di_big_xalloc(2 * s->m->nop * sizeof *s->memo);
        for (uint32_t i = 0; i < 2 * s->m->nop; i++)
            s->memo[i] = -1;
    }
    if (s->memo[2 * op] >= 0) {
        *t = s->memo[2 * op];
        *flops = s->memo[2 * op + 1];
        return 0;
    }
    if ((rc = sim_cost_compute(s, op, dev, t, flops)) != 0)
        return rc;
    s->memo[2 * op] = *t;
    s->memo[2 * op + 1] = *flops;
    return 0;
}

/* ---- ops ---- */

/* Creates instances for every result of op in context c. */
static int
op_results(sim *s, ir_id op, const ctx *c)
{
    const ir_op *o = &s->m->ops[op];
    for (uint32_t i = 0; i < o->noutput; i++) {
        int rc = sim_value_instances(s, o->outputs + i, c->rep, c->devs);
        if (rc)
            return rc;
    }
    return 0;
}

/* Instance of input value v at location j (or the single one) for pmap instance k. */
static sim_inst *
input_at(sim *s, ir_id v, uint32_t k, uint32_t j)
{
    uint32_t n = vnloc(s, v);
    uint32_t kk = s->vrep[v] > 1 ? k : 0;
    if (j >= n)
        j = n ? n - 1 : 0;
    return vinst(s, v, kk, j);
}

/*
 * Attribute key of op, which is the only key the walk asks of op (see
 * sim.opattr), looked up the first time.
 */
static const ir_attr *
op_attr(sim *s, ir_id op, ir_id key)
{
    const ir_module *m = s->m;
    if (s->opattr == NULL)
        s->opattr = di_big_xalloc(m->nop * sizeof *s->opattr); /* zeroed */
    if (s->opattr[op] == 0) {
        const ir_attr *a = ir_op_attr_key(m, op, key);
        s->opattr[op] = a != NULL ? (uint32_t)(a - m->attrs) + 2 : 1;
    }
    return s->opattr[op] > 1 ? &m->attrs[s->opattr[op] - 2] : NULL;
}

/* Free ops: views and plumbing alias their source, cost nothing. */
static int
sim_free_op(sim *s, ir_id op, const ctx *c)
{
    const ir_module *m = s->m;
    const ir_op *o = &m->ops[op];
    int rc = op_results(s, op, c);
    if (rc)
        return rc;
    for (uint32_t k = 0; k < c->rep; k++) {
        if (o->kind == IR_OP_TUPLE) {
            uint32_t j = 0;
            ir_id out = o->outputs;
            for (uint32_t i = 0; i < o->ninput; i++) {
                ir_id in = m->refs[o->inputs + i];
                for (uint32_t l = 0; l < vnloc(s, in); l++, j++)
                    inst_alias(s, s->vbase[out] + k * vnloc(s, out) + j,
                               (uint32_t)(input_at(s, in, k, l) - s->inst));
            }
        } else if (o->kind == IR_OP_TUPLEGET) {
            ir_id in = m->refs[o->inputs], out = o->outputs;
            const ir_type *tt = &m->types[m->values[in].type];
            const ir_attr *ia = op_attr(s, op, s->key_index);
            int64_t idx = ia != NULL && ia->kind == IR_ATTR_INT ? ia->i : 0;
            uint32_t j0 = 0;
            for (int64_t e = 0; e < idx && (uint64_t)e < tt->nelem; e++) {
                const tloc *locs;
                uint32_t nl;
                rc = sim_type_locs(s, m->refs[tt->elems + e], &locs, &nl);
                if (rc)
                    return rc;
                j0 += nl;
            }
            for (uint32_t l = 0; l < vnloc(s, out); l++)
                inst_alias(s, s->vbase[out] + k * vnloc(s, out) + l,
                           (uint32_t)(input_at(s, in, k, j0 + l) - s->inst));
        } else if (o->kind == IR_OP_CONSTANT || o->ninput == 0) {
            for (uint32_t i = 0; i < o->noutput; i++)
                for (uint32_t l = 0; l < vnloc(s, o->outputs + i); l++) {
                    sim_inst *in = vinst(s, o->outputs + i, k, l);
                    in->flags |= INST_PERSISTENT;
                    in->cls = SIM_MEM_WEIGHTS;
                }
        } else {
            ir_id in = m->refs[o->inputs];
            double after = 0;
            if (o->kind == IR_OP_AFTER) /* available once its second input is too */
                for (uint32_t l = 0; l < vnloc(s, m->refs[o->inputs + 1]); l++) {
                    const sim_inst *t = input_at(s, m->refs[o->inputs + 1], k, l);
                    after = t->ready > after ? t->ready : after;
                }
            for (uint32_t i = 0; i < o->noutput; i++)
                for (uint32_t l = 0; l < vnloc(s, o->outputs + i); l++) {
                    uint32_t a = s->vbase[o->outputs + i] + k * vnloc(s, o->outputs + i) + l;
                    inst_alias(s, a, (uint32_t)(input_at(s, in, k, l) - s->inst));
                    if (s->inst[a].ready < after)
                        s->inst[a].ready = after;
                }
        }
    }
    return 0;
}

/*
 * The start of fused group's kernel at instance (k, j) no earlier than t:
 * when every value its ops read from outside the group is ready (fuse.c
 * guarantees they are all made before its first op).
 */
static double
fused_start(sim *s, ir_id head, uint32_t k, uint32_t j, double t)
{
    const ir_module *m = s->m;
    uint32_t id = s->fgrp[head];
    const sim_fgroup *g = &s->fgroups[id - 1];
    for (uint32_t x = 1; x < g->n; x++) {
        const ir_op *o = &m->ops[s->fmembers[g->first + x]];
        for (uint32_t i = 0; i < o->ninput; i++) {
            ir_id v = m->refs[o->inputs + i], d = m->values[v].def;
            sim_inst *in;
            if (d && s->fgrp[d] == id)
                continue;
            in = input_at(s, v, k, j);
            if (in->ready > t)
                t = in->ready;
        }
    }
    return t;
}

/* The OPB_* bits of op, from its attributes the first time it is asked. */
static unsigned
op_bits(sim *s, ir_id op)
{
    const ir_module *m = s->m;
    if (s->opbits == NULL)
        s->opbits = di_big_xalloc(m->nop); /* zeroed */
    if (!(s->opbits[op] & OPB_KNOWN)) {
        unsigned b = OPB_KNOWN;
        const ir_attr *t = ir_op_attr_key(m, op, s->key_transient);
        if (ir_op_attr_key(m, op, s->key_accumulate) != NULL)
            b |= OPB_ACCUM;
        if (s->str_backward != 0 && op_string_is(m, op, s->key_phase, s->str_backward))
            b |= OPB_BACKWARD;
        if (t != NULL && t->kind == IR_ATTR_INT && t->i != 0)
            b |= OPB_TRANSIENT;
        t = ir_op_attr_key(m, op, s->key_reduction);
        if (t != NULL && t->kind == IR_ATTR_INT && t->i != 0)
            b |= OPB_REDUCTION;
        t = ir_op_attr_key(m, op, s->key_in_place);
        if (t != NULL && t->kind == IR_ATTR_INT && t->i != 0)
            b |= OPB_IN_PLACE;
        s->opbits[op] = (uint8_t)b;
    }
    return s->opbits[op];
}

/*
 * Result i of op at instance (k, j), made by a kernel running from start to
 * end: a new allocation, or in place (an optimizer update's w' is w's
 * storage; a gradient accumulation, dist.accumulate, adds into its first
 * input's).
 */
static void
op_output(sim *s, ir_id op, uint32_t i, uint32_t k, uint32_t j, double start, double end,
          int optim, int accum)
{
    const ir_module *m = s->m;
    const ir_op *o = &m->ops[op];
    uint32_t idx = s->vbase[o->outputs + i] + k * vnloc(s, o->outputs + i) + j;
    if ((optim && i < o->ninput) || (accum && i == 0)) {
        uint32_t src =
            (uint32_t)(input_at(s, m->refs[o->inputs + (i ? i + 1 : 0)], k, j) - s->inst);
        inst_alias(s, idx, src);
        s->inst[idx].ready = end;
        if (accum && s->vclass[o->outputs] == SIM_MEM_GRADIENTS) {
            /*
             * The last accumulation of a gradient: its buffer, made by an
             * earlier microbatch's chunk (a shared function the class
             * analysis does not follow back), is a gradient buffer.
             */
            sim_inst *ow = &s->inst[s->inst[idx].owner];
            ow->cls = SIM_MEM_GRADIENTS;
            ow->flags |= INST_GRADBUF;
        }
        return;
    }
    inst_produce(&s->inst[idx], start, end);
    if (s->vfused && s->vfused[o->outputs + i])
        s->inst[idx].flags |= INST_FUSED;
    /*
     * A gradient the backward pass makes: a gradient buffer, unless it is
     * reduce-scattered as made (dist.transient: ZeRO-2/3 keep only their
     * shard, freeing the whole gradient once reduced).
     */
    if (s->vclass[o->outputs + i] == SIM_MEM_GRADIENTS &&
        (op_bits(s, op) & (OPB_BACKWARD | OPB_TRANSIENT)) == OPB_BACKWARD)
        s->inst[idx].flags |= INST_GRADBUF;
}

/*
 * An op of a fused group after its first: the group's kernel (priced at
 * its first op) made its results, so it takes no time and no stream; its
 * results are ready when the inputs it reads from the group are, at the
 * kernel's end (in place for an accumulation: fuse.c's GEMM epilogues).
 */
static int
fused_member(sim *s, ir_id op, const ctx *c, uint32_t nloc, int accum)
{
    const ir_module *m = s->m;
    const ir_op *o = &m->ops[op];
    for (uint32_t k = 0; k < c->rep; k++)
        for (uint32_t j = 0; j < nloc; j++) {
            double end = 0;
            for (uint32_t i = 0; i < o->ninput; i++) {
                sim_inst *in = input_at(s, m->refs[o->inputs + i], k, j);
                if (in->ready > end)
                    end = in->ready;
            }
            s->nops += c->sym;
            for (uint32_t i = 0; i < o->ninput; i++)
                inst_use(input_at(s, m->refs[o->inputs + i], k, j), end);
            for (uint32_t i = 0; i < o->noutput; i++)
                op_output(s, op, i, k, j, end, end, 0, accum);
        }
    return 0;
}

static int
sim_compute_op(sim *s, ir_id op, const ctx *c)
{
    const ir_module *m = s->m;
    const ir_op *o = &m->ops[op];
    int optim = (ir_opkind_info(o->kind)->flags & IR_OPF_OPTIM) != 0;
    /* A gradient accumulation (dist.accumulate) adds into its first input's storage. */
    int accum = o->ninput && (op_bits(s, op) & OPB_ACCUM);
    /*
     * On the reduction stream (dist.reduction_stream: a reduced bucket's split
     * and ZeRO-2/3's addition of a shard to the accumulated gradient, as FSDP
     * and DeepSpeed run them after the collective on its stream; chunk.c's
     * buckets_split): it waits for its inputs and the host, not
     * for the compute stream, and holds up nothing but its results' readers
     * (occupy_side).
     */
    int side = !s->opt->no_overlap && (op_bits(s, op) & OPB_REDUCTION);
    uint32_t nloc;
    int rc = op_results(s, op, c);
    if (rc)
        return rc;
    nloc = o->noutput ? vnloc(s, o->outputs) : 1;
    if (s->fgrp && s->fgrp[op] && s->fgroups[s->fgrp[op] - 1].head != op)
        return fused_member(s, op, c, nloc, accum);
    for (uint32_t k = 0; k < c->rep; k++) {
        for (uint32_t j = 0; j < nloc; j++) {
            int32_t dev;
            double start, t = 0, fl = 0, end;
            if (o->noutput)
                dev = vinst(s, o->outputs, k, j)->dev;
            else if (o->ninput)
                dev = input_at(s, m->refs[o->inputs], k, j)->dev;
            else
                dev = c->devs ? c->devs[k] : 0;
            start = side ? 0 : stream_free(s, dev, STREAM_COMPUTE);
            {
                /* The host issues kernels in program order, host_overhead apart. */
                double h = hw_device_spec(s->hw, (uint32_t)dev)->host_overhead;
                if (h > 0) {
                    for (uint32_t i = 0; i < o->ninput; i++) {
                        /*
                         * A received input: the host blocked in the receive until it
                         * arrived and synchronized the device (Megatron-LM's
                         * point-to-point communication calls torch.cuda.synchronize()),
                         * so it issues this kernel only after the data and every
                         * kernel issued before it.
                         */
                        sim_inst *in = input_at(s, m->refs[o->inputs + i], k, j);
                        if (s->inst[in->owner].flags & INST_RECV) {
                            double sync = in->ready > start ? in->ready : start;
                            if (sync > s->devs[dev].host)
                                s->devs[dev].host = sync;
                        }
                    }
                    s->devs[dev].host += h;
                    if (s->devs[dev].host > start)
                        start = s->devs[dev].host;
                }
            }
            for (uint32_t i = 0; i < o->ninput; i++) {
                sim_inst *in = input_at(s, m->refs[o->inputs + i], k, j);
                if (in->ready > start)
                    start = in->ready;
            }
            if (s->fgrp && s->fgrp[op])
                start = fused_start(s, op, k, j, start);
            rc = op_time(s, op, dev, &t, &fl);
            if (rc)
                return rc;
            end = start + t;
            if (side)
                occupy_side(s, op, dev, start, end, c->sym > 1);
            else
                occupy(s, op, dev, STREAM_COMPUTE, start, end, c->sym > 1);
            s->devs[dev].flops += fl;
            s->nops += c->sym;
            for (uint32_t i = 0; i < o->ninput; i++)
                inst_use(input_at(s, m->refs[o->inputs + i], k, j), end);
            for (uint32_t i = 0; i < o->noutput; i++)
                op_output(s, op, i, k, j, start, end, optim, accum);
        }
    }
    return 0;
}

/* Group membership of a mesh-form collective (ir_mesh_group), as device ids. */
static int
mesh_group_find(sim *s, ir_id op, ir_id mesh, int32_t dev, int32_t *group, uint32_t *n)
{
    const ir_module *m = s->m;
    const ir_mesh *ms = &m->meshes[mesh];
    const int64_t *devices = ir_mesh_devices(m, mesh);
    uint32_t naxes, axes[IR_MAX_RANK], pos = UINT32_MAX, self;
    const ir_attr *axa = ir_op_attr_key(m, op, s->key_mesh_axes);
    const int64_t *ax = axa != NULL && axa->kind == IR_ATTR_INTS ? m->ints + axa->off : NULL;
    uint32_t *members;
    naxes = ax != NULL ? axa->n : 0;
    if (ms->rank > IR_MAX_RANK || (ax != NULL && naxes > ms->rank))
        return di_error_set(s->err, DI_EINVAL, "%s: mesh rank %u too large", ir_op_label(m, op).s,
                            ms->rank);
    for (uint32_t a = 0; ax != NULL && a < naxes; a++) {
        if (ax[a] < 0 || ax[a] >= (int64_t)ms->rank)
            return di_error_set(s->err, DI_EINVAL, "%s: mesh_axes[%u] is not an axis",
                                ir_op_label(m, op).s, a);
        axes[a] = (uint32_t)ax[a];
    }
    for (uint32_t i = 0; i < ms->ndevice; i++)
        if (devices[i] == dev) {
            pos = i;
            break;
        }
    if (pos == UINT32_MAX)
        return di_error_set(s->err, DI_EINVAL, "%s: device %d is not in mesh '%s'",
                            ir_op_label(m, op).s, dev, ir_str_get(m, ms->name));
    members = di_xcalloc(ms->ndevice, sizeof *members);
    ir_mesh_group(m, mesh, ax ? axes : NULL, ax ? naxes : 0, pos, members, n, &self);
    for (uint32_t k = 0; k < *n; k++)
        group[k] = (int32_t)devices[members[k]];
    di_free(members);
    return 0;
}

static uint32_t
grp_slot(const sim *s, ir_id op, int32_t dev)
{
    uint32_t h = (uint32_t)(sim_hash_combine(op, (uint32_t)dev) & (s->cgrp - 1));
    while (s->grps[h].op && (s->grps[h].op != op || s->grps[h].dev != dev))
        h = (h + 1) & (s->cgrp - 1);
    return h;
}

static unsigned group_levels(const sim *s, const group_info *g);

/*
 * Instance out of a gather into the buffer that holds its input shard in
 * (dist.in_place: ZeRO-1 and -2's working copy of the weights, of which the
 * optimizer updates each device's shard in place, as Megatron-LM's
 * distributed optimizer and DeepSpeed keep the shard as a view of the full
 * parameter buffer and gather into that buffer): the buffer exists for the
 * whole step, and the shard, a function argument, takes no bytes of its own.
 * A chain of such gathers (one per axis the shard is split on: the data and
 * the context axes) fills one buffer, every input a view of it. Anything
 * else (an input that is neither an argument of this device nor such a
 * gather's result, or larger than the result) stays as it is: two buffers.
 */
static void
gather_in_place(sim *s, sim_inst *out, const sim_inst *in)
{
    sim_inst *ow = &s->inst[in->owner];
    if (in->owner == 0 || !(in->owner < s->arg_end || (ow->flags & INST_GATHERED)) ||
        ow->dev != out->dev || s->tlocs[ow->loc].bytes > s->tlocs[out->loc].bytes)
        return;
    ow->flags |= INST_VIEW;
    out->flags |= INST_PERSISTENT | INST_GATHERED;
    out->alloc = 0;
}

/*
 * The group of a mesh-form collective op for member device dev, its time
 * and the link levels it crosses: found once per (op, device) and kept (an
 * op in a called function runs once per call). *e points into the table,
 * its devices at s->grpdev + e->off; both valid until the next call.
 */
static int
mesh_group(sim *s, ir_id op, ir_id mesh, int32_t dev, const sim_grp **e)
{
    uint32_t h, cnt = 0, nd = s->m->meshes[mesh].ndevice;
    int rc;
    if ((s->ngrp + 1) * 2 > s->cgrp) {
        sim_grp *old = s->grps;
        uint32_t oldn = s->cgrp;
        s->cgrp = oldn ? 2 * oldn : 256;
        s->grps = di_xcalloc(s->cgrp, sizeof *s->grps);
        for (uint32_t i = 0; i < oldn; i++)
            if (old[i].op)
                s->grps[grp_slot(s, old[i].op, old[i].dev)] = old[i];
        di_free(old);
    }
    h = grp_slot(s, op, dev);
    if (s->grps[h].op == 0) {
        DI_GROW(&s->grpdev, &s->cgrpdev, (size_t)s->ngrpdev + nd + 1);
        group_info g;
        ir_cost cost;
        rc = mesh_group_find(s, op, mesh, dev, s->grpdev + s->ngrpdev, &cnt);
        if (rc)
            return rc;
        assert(cnt >= 1 && cnt <= nd); /* dev itself, within the room reserved above */
        ir_op_cost(s->m, op, &cost);
        sim_group_describe(s, s->grpdev + s->ngrpdev, cnt, &g);
        s->grps[h].op = op;
        s->grps[h].dev = dev;
        s->grps[h].off = s->ngrpdev;
        s->grps[h].n = cnt;
        s->grps[h].t = sim_collective_time(s, s->m->ops[op].kind, &g, cost.bytes_comm);
        s->grps[h].levels = group_levels(s, &g);
        s->grps[h].key = comm_key(s->grpdev + s->ngrpdev, cnt);
        s->ngrpdev += cnt;
        s->ngrp++;
    }
    *e = &s->grps[h];
    return 0;
}

/* The link level a transfer between devices a and b crosses: 0 intra-node, 1 inter-node. */
static int
pair_level(const sim *s, int32_t a, int32_t b)
{
    if (s->hw->devices_per_node <= 1)
        return 1; /* one device per node (distir-classic): every link is the inter-node one */
    return hw_node_of(s->hw, (uint32_t)a) != hw_node_of(s->hw, (uint32_t)b);
}

/*
 * The link levels (bit 0 intra-, bit 1 inter-node) a collective over group g
 * crosses. A group that spans nodes counts the inter-node links only: its
 * intra-node hops carry no more bytes than its inter-node ones over links
 * many times faster (NVLink against a node's share of InfiniBand), so a
 * tensor-parallel collective inside a node runs beside it, as NCCL runs the
 * two communicators (when a collective held both levels for its whole
 * duration, every tensor-parallel collective of the backward pass waited for
 * the data-parallel buckets of overlap_grad_reduce).
 */
static unsigned
group_levels(const sim *s, const group_info *g)
{
    if (g->nodes > 1)
        return 2;
    if (g->per_node > 1)
        return s->hw->devices_per_node <= 1 ? 2 : 1;
    return 0;
}

/*
 * Links are full duplex, as NVLink, NVSwitch ports and InfiniBand are: what a
 * device sends and what it receives cross its link in two directions that do
 * not share. A send takes the sender's LINK_TX side and the receiver's
 * LINK_RX side; a collective both sides of every member (each sends and
 * receives its share of every step). Before 2026-12-06 the two directions
 * were one: a pipeline stage's forward send and its backward receive from the
 * next stage slowed each other down.
 */
enum { LINK_TX, LINK_RX };
#define LINK_SEND (1u << LINK_TX)
#define LINK_RECV (1u << LINK_RX)
#define LINK_BOTH (LINK_SEND | LINK_RECV)
/* A send's sides: the sender's and the receiver's. */
static const unsigned send_dirs[2] = {LINK_SEND, LINK_RECV};

/*
 * When a transfer of t seconds alone, started at c, ends on the levels of
 * devs[0..n), device i using the sides dirs[i] (LINK_SEND, LINK_RECV; NULL:
 * LINK_BOTH on every device).
 */
static double
links_end(const sim *s, const int32_t *devs, const unsigned *dirs, uint32_t n, unsigned levels,
          double c, double t)
{
    double end = c + t;
    if (t <= 0 || levels == 0)
        return end;
    for (uint32_t i = 0; i < n; i++)
        for (int l = 0; l < 2; l++)
            for (int x = 0; x < 2; x++)
                if ((levels >> l & 1) && ((dirs ? dirs[i] : LINK_BOTH) >> x & 1)) {
                    double e = link_end(&s->devs[devs[i]].link[l][x], c, t);
                    if (e > end)
                        end = e;
                }
    return end;
}

/* Marks the levels' sides busy on every device; its links are part of its history (symmetry). */
static void
links_take(sim *s, const int32_t *devs, const unsigned *dirs, uint32_t n, unsigned levels,
           double a, double b)
{
    for (uint32_t i = 0; i < n; i++) {
        sim_dev *d = &s->devs[devs[i]];
        unsigned x = dirs ? dirs[i] : LINK_BOTH;
        for (int l = 0; l < 2; l++)
            for (int k = 0; k < 2; k++)
                if ((levels >> l & 1) && (x >> k & 1))
                    ivec_add(&d->link[l][k], a, b);
        d->hist = sim_hash_combine(d->hist, 0x6c696e6b00ull | levels | x << 2);
    }
}

/*
 * Runs one collective group: every member starts together, when the
 * collective stream of the group's communicator (key: comm_key of the whole
 * group, also when devs is only its representative) is free on each, and
 * occupies it. Collectives run apart from point-to-point sends and receives,
 * and each communicator on its own stream, as NCCL runs them: a receive
 * waiting for another pipeline stage does not hold up a tensor-parallel
 * all-reduce queued behind it, nor does a data-parallel reduction of
 * gradient buckets (overlap_grad_reduce) or a ZeRO-3 gather; only the links
 * they both cross slow them (link_end). With no_overlap every stream of a
 * device is one clock.
 */
static void
run_group(sim *s, ir_id op, const int32_t *devs, uint32_t n, unsigned levels, uint64_t key,
          double ready, double t, double *out_start, double *out_end, int sym)
{
    double start = ready, end;
    for (uint32_t i = 0; i < n; i++) {
        double f = s->opt->no_overlap ? stream_free(s, devs[i], STREAM_COLL)
                                      : comm_slot(s, devs[i], key)->free;
        if (f > start)
            start = f;
    }
    end = links_end(s, devs, NULL, n, levels, start, t);
    links_take(s, devs, NULL, n, levels, start, end);
    for (uint32_t i = 0; i < n; i++) {
        occupy(s, op, devs[i], STREAM_COLL, start, end, sym);
        comm_slot(s, devs[i], key)->free = end;
    }
    *out_start = start;
    *out_end = end;
}

/*
 * Can the devices devs[0..n) act as one symmetric class: either exactly an
 * existing class, or devices on their own with identical histories (which
 * form_class then joins)? *rep receives the representative.
 */
static int
class_of(const sim *s, const int32_t *devs, uint32_t n, int32_t *rep)
{
    const sim_dev *d0 = &s->devs[devs[0]];
    int32_t r = d0->rep;
    if (d0->class_n > 1 || r != devs[0]) {
        if (s->devs[r].class_n != n)
            return 0;
        for (uint32_t k = 0; k < n; k++)
            if (s->devs[devs[k]].rep != r)
                return 0;
        *rep = r;
        return 1;
    }
    for (uint32_t k = 1; k < n; k++) {
        const sim_dev *d = &s->devs[devs[k]];
        if (d->rep != devs[k] || d->class_n != 1 || d->hist != d0->hist ||
            memcmp(d->free, d0->free, sizeof d->free) != 0)
            return 0;
        for (uint32_t q = 0; q < k; q++)
            if (devs[q] == devs[k])
                return 0;
    }
    *rep = devs[0];
    return 1;
}

static void
form_class(sim *s, const int32_t *devs, uint32_t n, int32_t rep)
{
    assert(n >= 1 && rep >= 0 && (uint32_t)rep < s->ndev);
    for (uint32_t k = 0; k < n; k++)
        s->devs[devs[k]].rep = rep;
    s->devs[rep].class_n = n;
}

/*
 * dist.send: one transfer, or (a tuple) one per element. The element-wise
 * form is symmetric when the senders form one class, the receivers another,
 * every element is ready at once and every pair uses the same kind of link:
 * then one transfer between the representatives stands for all. A
 * dist.redistribute between two meshes (the global view's cross-mesh
 * transfer) is priced the same way: device j of the destination mesh
 * receives its shard (bytes_comm) from device j mod n of the source mesh.
 */
static int
sim_send(sim *s, ir_id op, const ctx *c)
{
    const ir_module *m = s->m;
    const ir_op *o = &m->ops[op];
    ir_id in = m->refs[o->inputs], out = o->outputs;
    uint32_t n, nin;
    ir_cost cost;
    const tloc *locs;
    int rc = sim_type_locs(s, m->values[out].type, &locs, &n);
    if (rc)
        return rc;
    ir_op_cost(m, op, &cost);
    nin = vnloc(s, in);
    if (nin == 0 || (nin != n && o->kind == IR_OP_SEND))
        return di_error_set(s->err, DI_EINVAL, "%s: %u inputs for %u results", ir_op_label(m, op).s,
                            vnloc(s, in), n);
    if (c->rep == 1 && c->devs == NULL && n > 1 && nin == n && s->symmetric) {
        int32_t *src = di_xmalloc(2 * n * sizeof *src), *dst = src + n, rs, rd;
        int sym = 1;
        const hw_link *l0 = NULL;
        for (uint32_t j = 0; j < n; j++) {
            src[j] = vdev(s, in, 0, j);
            dst[j] = loc_dev(s, out, j);
            if (vinst(s, in, 0, j)->ready != vinst(s, in, 0, 0)->ready || src[j] == dst[j] ||
                dst[j] < 0)
                sym = 0;
            else if (j == 0)
                l0 = hw_link_between(s->hw, (uint32_t)src[0], (uint32_t)dst[0]);
            else if (memcmp(hw_link_between(s->hw, (uint32_t)src[j], (uint32_t)dst[j]), l0,
                            sizeof *l0) != 0 ||
                     pair_level(s, src[j], dst[j]) != pair_level(s, src[0], dst[0]))
                sym = 0;
        }
        if (sym && class_of(s, src, n, &rs) && class_of(s, dst, n, &rd) && rs != rd) {
            uint32_t js = 0, yi;
            sim_inst *x;
            double start, end;
            form_class(s, src, n, rs);
            form_class(s, dst, n, rd);
            for (uint32_t j = 0; j < n; j++)
                if (src[j] == rs)
                    js = j;
            x = vinst(s, in, 0, js);
            start = x->ready;
            if (stream_free(s, rs, STREAM_SEND) > start)
                start = stream_free(s, rs, STREAM_SEND);
            if (stream_free(s, rd, STREAM_RECV) > start)
                start = stream_free(s, rd, STREAM_RECV);
            /* The same arithmetic as one pair below, so the results are bit-identical. */
            {
                int32_t pair[2] = {rs, rd};
                double t = l0->latency + cost.bytes_comm / l0->bandwidth;
                unsigned lv = 1u << pair_level(s, src[0], dst[0]);
                end = links_end(s, pair, send_dirs, 2, lv, start, t);
                links_take(s, pair, send_dirs, 2, lv, start, end);
            }
            occupy(s, op, rs, STREAM_SEND, start, end, 1);
            occupy(s, op, rd, STREAM_RECV, start, end, 1);
            record_transfers(s, op, src, dst, n, start, end);
            s->nops += n;
            for (uint32_t j = 0; j < n; j++)
                inst_use(vinst(s, in, 0, j), end);
            /* One result instance, on the receiving representative, stands for all. */
            rc = sim_value_uniform(s, out, &yi);
            di_free(src);
            if (rc)
                return rc;
            s->inst[yi].dev = rd;
            inst_produce(&s->inst[yi], start, end);
            s->inst[yi].flags |= INST_RECV;
            return 0;
        }
        di_free(src);
    }
    if ((rc = op_results(s, op, c)) != 0)
        return rc;
    for (uint32_t k = 0; k < c->rep; k++)
        for (uint32_t j = 0; j < n; j++) {
            sim_inst *x = input_at(s, in, k, j % nin);
            sim_inst *y = vinst(s, out, k, j);
            int32_t from = vdev(s, in, s->vrep[in] > 1 ? k : 0, j % nin), to = y->dev;
            double start = x->ready, t = 0, end;
            if (from != to) {
                const hw_link *l = hw_link_between(s->hw, (uint32_t)from, (uint32_t)to);
                t = l->latency + cost.bytes_comm / l->bandwidth;
            }
            if (stream_free(s, from, STREAM_SEND) > start)
                start = stream_free(s, from, STREAM_SEND);
            if (stream_free(s, to, STREAM_RECV) > start)
                start = stream_free(s, to, STREAM_RECV);
            if (from != to) {
                int32_t pair[2] = {from, to};
                unsigned lv = 1u << pair_level(s, from, to);
                t = links_end(s, pair, send_dirs, 2, lv, start, t) - start;
                links_take(s, pair, send_dirs, 2, lv, start, start + t);
            }
            end = start + t;
            occupy(s, op, from, STREAM_SEND, start, end, 0);
            occupy(s, op, to, STREAM_RECV, start, end, 0);
            record_transfers(s, op, &from, &to, 1, start, end);
            s->nops++;
            inst_use(x, end);
            inst_produce(y, start, end);
            y->flags |= INST_RECV;
        }
    return 0;
}

/* Collects distinct devices into set (keeping first-seen order). */
static void
set_add(int32_t *set, uint32_t *n, int32_t d)
{
    for (uint32_t i = 0; i < *n; i++)
        if (set[i] == d)
            return;
    set[(*n)++] = d;
}

/*
 * Is a top-level tuple collective symmetric: its devices are exactly one
 * class of devices that stand for each other, every input element is ready
 * at the same time, and input and output have one element per device?
 */
static int
tuple_symmetric(sim *s, ir_id in, ir_id out, const int32_t *group, uint32_t n)
{
    int32_t r;
    double ready;
    if (!s->symmetric || n < 2 || vnloc(s, in) != n || vnloc(s, out) != n)
        return 0;
    r = s->devs[group[0]].rep;
    if (s->devs[r].class_n != n)
        return 0;
    for (uint32_t i = 0; i < n; i++)
        if (s->devs[group[i]].rep != r)
            return 0;
    ready = vinst(s, in, 0, 0)->ready;
    for (uint32_t j = 1; j < n; j++)
        if (vinst(s, in, 0, j)->ready != ready)
            return 0;
    return 1;
}

static int
sim_collective(sim *s, ir_id op, const ctx *c)
{
    const ir_module *m = s->m;
    const ir_op *o = &m->ops[op];
    const ir_attr *meshattr = op_attr(s, op, s->key_mesh);
    ir_id in = m->refs[o->inputs], out = o->outputs;
    uint32_t nin = vnloc(s, in), nout;
    ir_cost cost;
    const tloc *locs;
    int32_t *group;
    const sim_grp *ge;
    int in_place = (op_bits(s, op) & OPB_IN_PLACE) != 0; /* mesh form only */
    int rc = sim_type_locs(s, m->values[out].type, &locs, &nout);
    if (rc)
        return rc;
    /* The mesh form always, the tuple form unless it turns out symmetric, makes instances now. */
    if (meshattr && (rc = op_results(s, op, c)) != 0)
        return rc;

    if (meshattr) {
        /*
         * Mesh form: per location (a per-device tensor in a pmap body, or
         * each mesh device of a distributed tensor), the group is the set of
         * devices that share coordinates off mesh_axes. Groups are formed
         * over every (instance, location) pair, each group run once.
         */
        uint32_t total = c->rep * nin;
        uint8_t *done;
        /* The per-(instance, location) marks: a buffer kept for the run (one call per
           collective op and instance made it an allocation per collective). */
        DI_GROW(&s->done, &s->cdone, total ? total : 1);
        done = s->done;
        memset(done, 0, total ? total : 1);
        for (uint32_t idx = 0; idx < total; idx++) {
            uint32_t n = 0;
            double ready = 0, start, end, t;
            unsigned levels;
            uint64_t key;
            const int32_t
                *mg; /* the group's devices (the table does not move until the next lookup) */
            if (done[idx])
                continue;
            sim_inst *first = &s->inst[s->vbase[in] + (s->vrep[in] > 1 ? idx : idx % nin)];
            rc = mesh_group(s, op, meshattr->s, first->dev, &ge);
            if (rc)
                return rc;
            n = ge->n;
            t = ge->t;
            levels = ge->levels;
            key = ge->key;
            mg = s->grpdev + ge->off;
            /* Members are the (instance, location) pairs on the group's devices. */
            for (uint32_t q = idx; q < total; q++) {
                sim_inst *x = &s->inst[s->vbase[in] + (s->vrep[in] > 1 ? q : q % nin)];
                for (uint32_t g2 = 0; g2 < n; g2++)
                    if (x->dev == mg[g2] && !done[q]) {
                        done[q] = 2;
                        if (x->ready > ready)
                            ready = x->ready;
                    }
            }
            if (c->sym > 1) {
                /*
                 * The representative of a symmetric pmap: every member of its
                 * group stands in its class and runs the same collective.
                 */
                int32_t r = first->dev;
                for (uint32_t g2 = 0; g2 < n; g2++)
                    if (s->devs[mg[g2]].rep != r)
                        s->broken = 1;
                run_group(s, op, &r, 1, levels, key, ready, t, &start, &end, 1);
                s->nops += c->sym;
            } else {
                run_group(s, op, mg, n, levels, key, ready, t, &start, &end, 0);
                s->nops += n;
            }
            for (uint32_t q = idx; q < total; q++) {
                sim_inst *x;
                if (done[q] != 2)
                    continue;
                done[q] = 1;
                x = &s->inst[s->vbase[in] + (s->vrep[in] > 1 ? q : q % nin)];
                inst_use(x, end);
                if (q < c->rep * nout) {
                    uint32_t oi = s->vbase[out] + q;
                    inst_produce(&s->inst[oi], start, end);
                    /* A collective over received data (the all-gather of a pipeline
                       transfer's tensor-parallel slices) passes the receive on. */
                    s->inst[oi].flags |= s->inst[x->owner].flags & INST_RECV;
                    if (in_place)
                        gather_in_place(s, &s->inst[oi], x);
                }
            }
        }
        return 0;
    }

    /* Tuple form: the group is every device holding an input or output location. */
    ir_op_cost(m, op, &cost);
    DI_GROW(&s->scratch, &s->cscratch, nin + nout + 1);
    group = s->scratch;
    for (uint32_t k = 0; k < c->rep; k++) {
        uint32_t n = 0;
        double ready = 0, start, end, t;
        group_info g;
        for (uint32_t j = 0; j < nin; j++) {
            sim_inst *x = input_at(s, in, k, j);
            set_add(group, &n, vdev(s, in, s->vrep[in] > 1 ? k : 0, j));
            if (x->ready > ready)
                ready = x->ready;
        }
        for (uint32_t j = 0; j < nout; j++) {
            int32_t d = loc_dev(s, out, j);
            set_add(group, &n, d == LOC_DEVVAR ? (c->devs ? c->devs[k] : 0) : d);
        }
        assert(n >= 1 && n <= nin + nout); /* within the scratch buffer */
        sim_group_describe(s, group, n, &g);
        t = sim_collective_time(s, o->kind, &g, cost.bytes_comm);
        if (c->rep == 1 && c->devs == NULL && tuple_symmetric(s, in, out, group, n)) {
            /*
             * The group is exactly one symmetric class and every element is
             * ready at once: run it on the representative; one result
             * instance, on the representative, stands for every element.
             */
            int32_t r = s->devs[group[0]].rep;
            uint32_t yi;
            run_group(s, op, &r, 1, group_levels(s, &g), comm_key(group, n), ready, t, &start, &end,
                      1);
            s->nops += n;
            for (uint32_t j = 0; j < nin; j++)
                inst_use(input_at(s, in, k, j), end);
            if ((rc = sim_value_uniform(s, out, &yi)) != 0)
                break;
            s->inst[yi].dev = r;
            inst_produce(&s->inst[yi], start, end);
            continue;
        }
        if (k == 0 && (rc = op_results(s, op, c)) != 0)
            break;
        run_group(s, op, group, n, group_levels(s, &g), comm_key(group, n), ready, t, &start,
                  &end, 0);
        s->nops += n;
        {
            uint8_t recv = 0;
            for (uint32_t j = 0; j < nin; j++) {
                sim_inst *x = input_at(s, in, k, j);
                inst_use(x, end);
                recv |= s->inst[x->owner].flags & INST_RECV;
            }
            for (uint32_t j = 0; j < nout; j++) {
                inst_produce(vinst(s, out, k, j), start, end);
                vinst(s, out, k, j)->flags |= recv;
            }
        }
    }
    return rc;
}

/*
 * Symmetry. The instances of a pmap are symmetric when its devices have
 * identical histories (same hash of everything that ran on them, same stream
 * clocks) and every input element is ready at the same time: then every
 * instance would be simulated to the same times, and one stands for all.
 * The devices become a class whose representative alone is simulated from
 * then on; a later pmap or collective over exactly that class stays
 * symmetric. Any other use of a class member breaks the symmetry, and
 * sim_run simulates the module again without it, so results never depend on
 * whether symmetry applied (only the time to compute them does).
 */
static int class_of(const sim *s, const int32_t *devs, uint32_t n, int32_t *rep);
static void form_class(sim *s, const int32_t *devs, uint32_t n, int32_t rep);

static int
pmap_symmetric(sim *s, ir_id op, const int32_t *devs, uint32_t n, uint32_t *p)
{
    const ir_module *m = s->m;
    const ir_op *o = &m->ops[op];
    int32_t r;
    if (!s->symmetric || n < 2)
        return 0;
    /* Inputs: element k of every per-instance input ready at one time. */
    for (uint32_t a = 0; a < o->ninput; a++) {
        ir_id in = m->refs[o->inputs + a];
        uint32_t nl = vnloc(s, in) / n;
        if (s->vuni[in] & (VF_UNI | VF_SAME))
            continue;
        if (!(s->vuni[in] & VF_DIFF)) {
            /* Ready times are final once a value is made: check every instance once. */
            uint32_t total = vnloc(s, in) * s->vrep[in], i;
            const sim_inst *x = &s->inst[s->vbase[in]];
            for (i = 1; i < total && x[i].ready == x[0].ready; i++)
                ;
            s->vuni[in] |= i >= total ? VF_SAME : VF_DIFF;
            if (i >= total)
                continue;
        }
        if (vnloc(s, in) != n * nl)
            continue;
        for (uint32_t l = 0; l < nl; l++)
            for (uint32_t k = 1; k < n; k++)
                if (vinst(s, in, 0, k * nl + l)->ready != vinst(s, in, 0, l)->ready)
                    return 0;
    }
    if (!class_of(s, devs, n, &r))
        return 0;
    form_class(s, devs, n, r);
    for (uint32_t k = 0; k < n; k++)
        if (devs[k] == r)
            *p = k;
    return 1;
}

/*
 * Lets body argument arg of a pmap of n instances, run once by its context
 * (at top level, or in a context of one instance), use its input's
 * instances instead of instances of its own that alias them, when element k
 * of the input is instance k's argument laid out as the argument's instances
 * would be: the n instances' locations one after the other (from instance
 * `first`, the representative, for a symmetric pmap of rep 1). Aliases share
 * the storage, ready time and device of what they alias and pass their last
 * use on to it (sim_build_memory), so the result is the same; a chunk's
 * weights and activations no longer cost instances of their own per call
 * (4.1 million instances for gpt3-175b at dp 8, tp 8, pp 16 with 192
 * microbatches). 0 when the layouts differ (the caller aliases then).
 */
static int
share_input(sim *s, ir_id arg, ir_id in, uint32_t n, uint32_t first, uint32_t rep, int *rc)
{
    const tloc *locs;
    uint32_t nl;
    *rc = sim_type_locs(s, s->m->values[arg].type, &locs, &nl);
    if (*rc != 0 || nl == 0 || (s->vuni[in] & VF_UNI) || vnloc(s, in) != n * nl)
        return 0;
    s->vbase[arg] = s->vbase[in] + first * nl;
    s->vrep[arg] = rep;
    s->vuni[arg] = 0;
    return 1;
}

static int
sim_pmap(sim *s, ir_id op, const ctx *c)
{
    const ir_module *m = s->m;
    const ir_op *o = &m->ops[op];
    const ir_region *body;
    uint32_t n = 0, ndev;
    const int64_t *devlist;
    int32_t *devs;
    ctx bc;
    int rc;
    uint32_t p = 0; /* the instance that is simulated when the pmap is symmetric */
    if (o->body == 0 || o->body >= m->nregion)
        return di_error_set(s->err, DI_EINVAL, "%s has no body", ir_op_label(m, op).s);
    {
        const ir_attr *da = op_attr(s, op, s->key_devices);
        devlist = da != NULL && da->kind == IR_ATTR_INTS ? m->ints + da->off : NULL;
        ndev = devlist != NULL ? da->n : 0;
    }
    if (devlist == NULL) {
        const ir_attr *ma = ir_op_attr_key(m, op, s->key_mesh);
        if (ma == NULL || ma->s == 0 || ma->s >= m->nmesh)
            return di_error_set(s->err, DI_EINVAL, "%s has neither devices nor mesh",
                                ir_op_label(m, op).s);
        devlist = m->ints + m->meshes[ma->s].devices;
        ndev = m->meshes[ma->s].ndevice;
    }
    devs = di_xmalloc((ndev ? ndev : 1) * sizeof *devs);
    for (uint32_t k = 0; k < ndev; k++) {
        rc = sim_dev_check(s, devlist[k]);
        if (rc) {
            di_free(devs);
            return rc;
        }
        devs[n++] = (int32_t)devlist[k];
    }
    body = &m->regions[o->body];
    bc.rep = n;
    bc.devs = devs;
    bc.sym = 1;
    /* Only a top-level pmap may be symmetric; a nested one runs per outer instance. */
    if (c->devs == NULL && pmap_symmetric(s, op, devs, n, &p)) {
        bc.rep = 1;
        bc.devs = devs + p;
        bc.sym = n;
    }
    /* A symmetric pmap's results are uniform: made after the body, below. */
    rc = bc.sym > 1 ? 0 : op_results(s, op, c);
    /*
     * Once per instance of the enclosing context (once at top level; inside
     * a body, once for each of its instances, in order): the body's
     * arguments alias element k of each input (or its one instance), and
     * result i's element k aliases body result i of instance k.
     */
    for (uint32_t q = 0; rc == 0 && q < c->rep; q++) {
        for (uint32_t a = 0; a < body->narg && a < o->ninput; a++) {
            ir_id arg = body->args[a], in = m->refs[o->inputs + a];
            uint32_t nl;
            if (c->rep == 1 && share_input(s, arg, in, n, bc.sym > 1 ? p : 0, bc.rep, &rc))
                continue;
            if (rc)
                break;
            rc = sim_value_instances(s, arg, bc.rep, bc.devs);
            if (rc)
                break;
            nl = vnloc(s, arg);
            for (uint32_t k = 0; k < bc.rep; k++)
                for (uint32_t l = 0; l < nl; l++) {
                    uint32_t kk = bc.sym > 1 ? p : k;
                    uint32_t src_j = vnloc(s, in) == n * nl ? kk * nl + l : l;
                    inst_alias(s, s->vbase[arg] + k * nl + l,
                               (uint32_t)(input_at(s, in, q, src_j) - s->inst));
                }
        }
        if (rc == 0) {
            ir_id outer = s->chunk;
            if (c->devs == NULL)
                s->chunk = op;
            rc = sim_region(s, o->body, &bc);
            s->chunk = outer;
        }
        if (bc.sym > 1) {
            /* One instance per result, aliasing the representative's. */
            for (uint32_t i = 0; rc == 0 && i < o->noutput && i < body->nresult; i++) {
                uint32_t yi;
                if ((rc = sim_value_uniform(s, o->outputs + i, &yi)) == 0)
                    inst_alias(s, yi, vidx(s, body->results[i], 0, 0));
            }
            for (uint32_t i = body->nresult; rc == 0 && i < o->noutput; i++)
                rc = sim_value_instances(s, o->outputs + i, 1, NULL);
            continue;
        }
        for (uint32_t i = 0; rc == 0 && i < o->noutput && i < body->nresult; i++) {
            ir_id res = body->results[i], out = o->outputs + i;
            uint32_t nl = vnloc(s, res), nout = vnloc(s, out);
            for (uint32_t k = 0; k < n; k++)
                for (uint32_t l = 0; l < nl; l++) {
                    uint32_t oj = k * nl + l;
                    if (oj >= nout)
                        continue;
                    inst_alias(
                        s, s->vbase[out] + q * nout + oj,
                        (uint32_t)(vinst(s, res, s->vrep[res] > 1 && bc.sym == 1 ? k : 0, l) -
                                   s->inst));
                }
        }
    }
    di_free(devs);
    return rc;
}

static int
sim_op(sim *s, ir_id op, const ctx *c)
{
    const ir_module *m = s->m;
    const ir_op *o = &m->ops[op];
    uint32_t flags;
    if (o->kind == IR_OP_NONE || o->kind >= IR_NOPKIND)
        return di_error_set(s->err, DI_EINVAL, "op %u has an invalid kind", op);
    flags = ir_opkind_info(o->kind)->flags;
    if (o->kind == IR_OP_PMAP)
        return sim_pmap(s, op, c);
    if (o->kind == IR_OP_RETURN)
        return di_error_set(s->err, DI_EINVAL, "op %u: dist.return stored as an op", op);
    if (o->kind == IR_OP_CALL || o->kind == IR_OP_ANNOTATE)
        return di_error_set(s->err, DI_EUNSUPPORTED,
                            "%s: the simulator runs per-device programs; declare a mesh and "
                            "lower the module first (distir shard --lower, or simulate it "
                            "annotated)",
                            ir_op_label(m, op).s);
    if (flags & IR_OPF_FREE)
        return sim_free_op(s, op, c);
    if (o->kind == IR_OP_SEND || o->kind == IR_OP_REDISTRIBUTE)
        return sim_send(s, op, c);
    if (flags & IR_OPF_COMM) {
        if (o->ninput != 1 || o->noutput != 1)
            return di_error_set(s->err, DI_EINVAL, "%s must have one input and result",
                                ir_op_label(m, op).s);
        return sim_collective(s, op, c);
    }
    return sim_compute_op(s, op, c);
}

int
sim_region(sim *s, ir_id region, const ctx *c)
{
    const ir_region *r = &s->m->regions[region];
    for (uint32_t i = 0; i < r->nop; i++) {
        int rc;
        if ((i & 1023) == 0 && sim_cancelled(s))
            return di_error_set(s->err, DI_ECANCELLED, "simulation cancelled");
        rc = sim_op(s, r->ops[i], c);
        if (rc)
            return rc;
        if (s->broken)
            return DI_EINTERNAL; /* sim_run starts again without symmetry */
    }
    return 0;
}
