/*
 * sim.c: the event simulator. It walks the entry function in program order
 * (list scheduling, as CUDA streams execute work in issue order) and gives
 * every op a start and end time on the streams of the devices it runs on:
 *
 *   - a compute op starts when its inputs are ready on its device and the
 *     device's compute stream is free;
 *   - a send occupies the sender's send stream and the receiver's receive
 *     stream (so two sends from one device serialize: link contention);
 *   - a collective starts when every participant is ready and its send and
 *     receive streams are free, and occupies both on every participant;
 *   - with no_overlap every device has a single stream for everything, as
 *     in the original DistIR simulator.
 *
 * Ties cannot arise in the order of processing (program order is total), and
 * every time is a pure function of earlier ones, so results are
 * bit-identical run to run and independent of threads.
 *
 * Values live as "instances", one per location: a tensor on a device has
 * one, a tuple one per element, a distributed tensor one per mesh device, and
 * a value inside a pmap body one per pmap device (bodies run in lockstep, so
 * a collective inside a body sees every participant's arrival). Views and
 * plumbing (Reshape, tuple_get, pmap arguments and results, optimizer
 * updates, which run in place) alias the instance they come from; memory is
 * accounted per owning instance: allocated when its producer starts, freed
 * when the last consumer of any alias ends, never freed for function inputs
 * and returned values.
 */
#include "sim/sim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define STREAM_COMPUTE 0
#define STREAM_SEND 1
#define STREAM_RECV 2
#define STREAM_COLL 3
#define NSTREAM 4

#define INST_PERSISTENT 1u

#define LOC_DEVVAR (-2) /* location is the device of the current pmap instance */

/* Value flags (sim.vuni), reset whenever a value gets new instances. */
#define VF_UNI 1u  /* one instance stands for every location (symmetry, see vidx) */
#define VF_SAME 2u /* every instance is ready at the same time (cached by pmap_symmetric) */
#define VF_DIFF 4u /* not every instance is ready at the same time */

typedef struct sim_inst {
    double ready;     /* seconds: when the value is available */
    double last_use;  /* seconds: end of the last consumer */
    double alloc;     /* seconds: producer start */
    uint32_t loc;     /* its location in tlocs, which gives its bytes (0: a reserved empty one) */
    int32_t dev;      /* dense device index */
    uint32_t owner;   /* instance owning the storage (itself if not an alias) */
    uint8_t cls;      /* sim_memclass */
    uint8_t flags;
} sim_inst;

typedef struct interval {
    double start, end;
} interval;

typedef struct ivec {
    interval *v;
    uint32_t n, cap;
} ivec;

/*
 * A memory event, sortable as one integer: key = (time bits << 1) | is_alloc.
 * Non-negative doubles order like their bit patterns, and frees sort before
 * allocations at the same instant; a stable sort keeps creation order
 * (instance order) among equal keys, so the order is fully deterministic.
 */
typedef struct memev {
    uint64_t key;
    uint64_t val; /* bytes << 3 | memory class: the scan never touches the instances */
} memev;

typedef struct sim_dev {
    double free[NSTREAM]; /* seconds: when each stream is next free */
    ivec busy[NSTREAM];   /* intervals per stream */
    ivec link[2];         /* intervals the intra- (0) and inter-node (1) links carry a transfer */
    double flops;
    uint64_t hist;    /* hash of everything that happened on the device, for symmetry */
    int32_t rep;      /* the device whose simulation stands for this one (itself if none) */
    uint32_t class_n; /* devices that this one stands for, itself included */
    uint32_t nev;     /* memory events (counted at the end) */
    uint32_t nalloc;  /* of which allocations: they come first, then the frees */
    uint32_t evoff;   /* offset of this device's events in the shared array */
} sim_dev;

/* Where the locations of a type live: device (or LOC_DEVVAR) and bytes. */
typedef struct tloc {
    int32_t dev;
    uint64_t bytes;
} tloc;

/* A mesh collective's group for one member device: devices grp[off .. off+n), its time and links. */
typedef struct sim_grp {
    ir_id op; /* 0: empty slot */
    int32_t dev;
    uint32_t off, n;
    unsigned levels;
    double t;
} sim_grp;

/* A priced op signature: its representative op, hash, time and FLOPs. */
typedef struct sim_sig {
    ir_id op;
    uint64_t hash;
    double t, flops;
} sim_sig;

typedef struct sim {
    const ir_module *m;
    const hw_model *hw;
    const sim_options *opt;
    di_error *err;

    uint32_t ndev;     /* devices of the hardware model */
    sim_dev *devs;     /* indexed by device id */
    int32_t *used;     /* device ids used, in ascending order at the end */

    uint32_t *tloc_off; /* per type: offset into tlocs, or UINT32_MAX if not computed */
    uint32_t *tloc_n;
    tloc *tlocs;
    uint32_t ntloc, ctloc;

    uint32_t cvalue;   /* capacity of the per-value tables (>= m->nvalue) */
    uint32_t *vbase;   /* per value: first instance */
    uint8_t *vuni;     /* per value: VF_* flags */
    uint32_t *vrep;    /* per value: replication (pmap instances), 1 at top level */
    sim_inst *inst;
    uint32_t ninst, cinst;

    uint8_t *vclass;   /* per value: sim_memclass */
    uint64_t nops;
    memev *ev;         /* every device's memory events, grouped by device */
    size_t cev;        /* capacity of ev */
    memev *tmp;        /* sort scratch */
    size_t ctmp;
    uint32_t *count;   /* radix counters (65536) */

    sim_event *events;
    uint32_t nevent, cevent;
    int want_events;
    int symmetric;     /* simulate symmetric pmaps once (see sim_pmap) */
    ir_id entry;       /* the entry function */
    double *memo;      /* per op: compute time and FLOPs (op_time), or NULL */
    struct sim_sig *sigs; /* top-level ops priced, by signature (op_time) */
    uint32_t nsig, csig;
    int broken;        /* a device standing for others was used on its own: rerun */
    sim_grp *grps;     /* mesh groups found (mesh_group), open addressing by (op, dev) */
    uint32_t ngrp, cgrp;
    int32_t *grpdev;   /* their devices */
    uint32_t ngrpdev, cgrpdev;
    int32_t *scratch;  /* sim_collective's group buffer */
    uint32_t cscratch;
} sim;

const char *
sim_memclass_name(int c)
{
    static const char *const names[] = {
#define SIM_MEMCLASS_NAME_(e, name) name,
        SIM_MEMCLASS_LIST(SIM_MEMCLASS_NAME_)
#undef SIM_MEMCLASS_NAME_
    };
    return (c >= 0 && c < SIM_NMEMCLASS) ? names[c] : "unknown";
}

void
sim_options_default(sim_options *o)
{
    memset(o, 0, sizeof *o);
    o->want_timeline = 1;
    o->timeline_max_points = 4096;
}

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
 * Links. Streams give issue order (each runs its work in program order);
 * links give contention: a transfer or collective holds the link level it
 * crosses (intra- or inter-node) on every device it involves, for its whole
 * duration, and takes the earliest time at or after it could start when
 * those links are idle (a later op may fill an earlier gap, as the network
 * serves whichever transfer is ready). The intervals of a link are sorted
 * and disjoint.
 */

/* Earliest start >= c at which [start, start + t) is idle on l. */
static double
link_fit(const ivec *l, double c, double t)
{
    uint32_t lo = 0, hi = l->n;
    if (t <= 0 || hi == 0 || l->v[hi - 1].end <= c)
        return c; /* the common case: transfers come in time order */
    /* First interval ending after c. */
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (l->v[mid].end <= c)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (uint32_t i = lo; i < l->n && l->v[i].start < c + t; i++)
        if (l->v[i].end > c)
            c = l->v[i].end;
    return c;
}

/* Marks [a, b) busy on l (it was idle). */
static void
link_take(ivec *l, double a, double b)
{
    uint32_t i = l->n;
    if (b <= a)
        return;
    while (i > 0 && l->v[i - 1].start > a)
        i--;
    if (i > 0 && l->v[i - 1].end >= a) {
        /* Touches the interval before: extend it (and join the next if it touches too). */
        if (b > l->v[i - 1].end)
            l->v[i - 1].end = b;
        if (i < l->n && l->v[i].start <= l->v[i - 1].end) {
            l->v[i - 1].end = l->v[i].end > l->v[i - 1].end ? l->v[i].end : l->v[i - 1].end;
            memmove(l->v + i, l->v + i + 1, (l->n - i - 1) * sizeof *l->v);
            l->n--;
        }
        return;
    }
    if (i < l->n && l->v[i].start <= b) {
        l->v[i].start = a;
        return;
    }
    DI_GROW(&l->v, &l->cap, l->n + 1);
    memmove(l->v + i + 1, l->v + i, (l->n - i) * sizeof *l->v);
    l->v[i].start = a;
    l->v[i].end = b;
    l->n++;
}

static int
cancelled(const sim *s)
{
    return s->opt->cancel && atomic_load_explicit(s->opt->cancel, memory_order_relaxed);
}

/* ---- type locations ---- */

static int
dev_check(sim *s, int64_t dev)
{
    if (dev < 0 || dev >= (int64_t)s->ndev)
        return di_error_set(s->err, DI_EINVAL,
                            "the module uses device %lld but hardware '%s' has %u devices "
                            "(0..%u)",
                            (long long)dev, s->hw->name, s->ndev, s->ndev - 1);
    return 0;
}

/* Local bytes of a distributed tensor on one mesh device (splits divide dims). */
static uint64_t
dtensor_local_bytes(const ir_module *m, const ir_type *t)
{
    const ir_mesh *mesh = &m->meshes[t->mesh];
    int64_t dims[IR_MAX_RANK];
    uint64_t n = 1;
    memcpy(dims, m->ints + t->dims, t->rank * sizeof *dims);
    for (uint32_t a = 0; a < mesh->rank; a++) {
        int64_t p = m->ints[t->placements + a];
        if (IR_PLACE_IS_SPLIT(p) && p < t->rank && m->ints[mesh->shape + a] > 0)
            dims[p] /= m->ints[mesh->shape + a];
    }
    for (uint32_t i = 0; i < t->rank; i++)
        if (di_mul_u64(n, (uint64_t)dims[i], &n) != 0)
            return UINT64_MAX;
    if (di_mul_u64(n, ir_dtype_size((ir_dtype)t->dtype), &n) != 0)
        return UINT64_MAX;
    return n;
}

static int
tloc_add(sim *s, ir_id type)
{
    const ir_module *m = s->m;
    const ir_type *t = &m->types[type];
    if (t->kind == IR_TYPE_TUPLE) {
        for (uint32_t i = 0; i < t->nelem; i++) {
            int rc = tloc_add(s, m->refs[t->elems + i]);
            if (rc)
                return rc;
        }
        return 0;
    }
    if (t->mesh) {
        const ir_mesh *mesh = &m->meshes[t->mesh];
        uint64_t b = dtensor_local_bytes(m, t);
        DI_GROW(&s->tlocs, &s->ctloc, s->ntloc + mesh->ndevice);
        for (uint32_t i = 0; i < mesh->ndevice; i++) {
            int64_t d = m->ints[mesh->devices + i];
            int rc = dev_check(s, d);
            if (rc)
                return rc;
            s->tlocs[s->ntloc].dev = (int32_t)d;
            s->tlocs[s->ntloc].bytes = b;
            s->ntloc++;
        }
        return 0;
    }
    DI_GROW(&s->tlocs, &s->ctloc, s->ntloc + 1);
    if (t->devvar || t->device < 0) {
        /*
         * The pmap instance's device; a tensor placed nowhere (a constant
         * scalar) lives where it is used: on the instance's device inside a
         * body, on device 0 at top level (a sequential module).
         */
        s->tlocs[s->ntloc].dev = LOC_DEVVAR;
    } else {
        int rc = dev_check(s, t->device);
        if (rc)
            return rc;
        s->tlocs[s->ntloc].dev = t->device;
    }
    s->tlocs[s->ntloc].bytes = ir_type_bytes(m, type);
    s->ntloc++;
    return 0;
}

/* The locations of a type (computed once per type). */
static int
type_locs(sim *s, ir_id type, const tloc **out, uint32_t *n)
{
    if (s->tloc_off[type] == UINT32_MAX) {
        uint32_t start = s->ntloc;
        int rc = tloc_add(s, type);
        if (rc)
            return rc;
        s->tloc_off[type] = start;
        s->tloc_n[type] = s->ntloc - start;
    }
    *out = s->tlocs + s->tloc_off[type];
    *n = s->tloc_n[type];
    return 0;
}

/* ---- instances ---- */

/* Room for `need` instances. */
static void
inst_reserve(sim *s, size_t need)
{
    size_t cap = s->cinst ? s->cinst : 1024;
    if (need <= s->cinst)
        return;
    while (cap < need)
        cap *= 2;
    if (cap > UINT32_MAX)
        di_oom();
    s->inst = di_big_xrealloc(s->inst, s->cinst * sizeof *s->inst, cap * sizeof *s->inst);
    s->cinst = (uint32_t)cap;
}

static uint32_t
inst_new(sim *s, uint32_t count)
{
    uint32_t first = s->ninst;
    inst_reserve(s, (size_t)s->ninst + count);
    memset(s->inst + first, 0, count * sizeof *s->inst);
    for (uint32_t i = 0; i < count; i++)
        s->inst[first + i].owner = first + i;
    s->ninst += count;
    return first;
}

/*
 * Creates the instances of value v for a context of `rep` pmap instances on
 * devices devs[0..rep) (devs NULL at top level). Instances are laid out
 * [k][location]. They are allocations owned by themselves until aliased.
 */
static int
value_instances(sim *s, ir_id v, uint32_t rep, const int32_t *devs)
{
    const tloc *locs;
    uint32_t n, first;
    int rc = type_locs(s, s->m->values[v].type, &locs, &n);
    if (rc)
        return rc;
    /* type_locs may have grown tlocs: locs stays valid until the next call. */
    first = inst_new(s, rep * n);
    s->vbase[v] = first;
    s->vrep[v] = rep;
    s->vuni[v] = 0;
    for (uint32_t k = 0; k < rep; k++)
        for (uint32_t j = 0; j < n; j++) {
            sim_inst *in = &s->inst[first + k * n + j];
            int32_t d = locs[j].dev;
            if (d == LOC_DEVVAR)
                d = devs ? devs[k] : 0;
            in->dev = d;
            in->loc = (uint32_t)(locs - s->tlocs) + j;
            in->cls = s->vclass[v];
        }
    return 0;
}

static inline uint32_t
vnloc(const sim *s, ir_id v)
{
    return s->tloc_n[s->m->values[v].type];
}

/*
 * Instance index of value v at pmap instance k, location j. A uniform value
 * (the result of a symmetric pmap or collective: every element is the same
 * representative's) has a single instance for all of them.
 */
static inline uint32_t
vidx(const sim *s, ir_id v, uint32_t k, uint32_t j)
{
    return s->vbase[v] + ((s->vuni[v] & VF_UNI) ? 0 : k * vnloc(s, v) + j);
}

static inline sim_inst *
vinst(sim *s, ir_id v, uint32_t k, uint32_t j)
{
    return &s->inst[vidx(s, v, k, j)];
}

/* The device of location j of a value's type (a concrete device, or LOC_DEVVAR). */
static inline int32_t
loc_dev(const sim *s, ir_id v, uint32_t j)
{
    return s->tlocs[s->tloc_off[s->m->values[v].type] + j].dev;
}

/* The device holding value v at instance k, location j. */
static inline int32_t
vdev(sim *s, ir_id v, uint32_t k, uint32_t j)
{
    return (s->vuni[v] & VF_UNI) ? loc_dev(s, v, j) : vinst(s, v, k, j)->dev;
}

/* Gives value v one instance for all its locations (see vidx); returns its index. */
static int
value_uniform(sim *s, ir_id v, uint32_t *idx)
{
    const tloc *locs;
    uint32_t n;
    int rc = type_locs(s, s->m->values[v].type, &locs, &n);
    if (rc)
        return rc;
    *idx = inst_new(s, 1);
    s->vbase[v] = *idx;
    s->vrep[v] = 1;
    s->vuni[v] = VF_UNI;
    s->inst[*idx].dev = n ? locs[0].dev : 0;
    s->inst[*idx].loc = n ? (uint32_t)(locs - s->tlocs) : 0;
    s->inst[*idx].cls = s->vclass[v];
    return 0;
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

static void
record_event(sim *s, ir_id op, int32_t dev, int stream, double start, double end)
{
    if (!s->want_events)
        return;
    DI_GROW(&s->events, &s->cevent, s->nevent + 1);
    s->events[s->nevent].op = op;
    s->events[s->nevent].device = dev;
    s->events[s->nevent].stream = (uint8_t)stream;
    s->events[s->nevent].start = start;
    s->events[s->nevent].end = end;
    s->nevent++;
}

/* ---- the cost model ---- */

static int
is_gemm(int kind)
{
    return kind == IR_OP_MATMUL || kind == IR_OP_GEMM || kind == IR_OP_MATMULGRAD;
}

/*
 * Roofline: max(flops / (peak(dtype) * efficiency), bytes / (bandwidth *
 * elementwise_efficiency)) + launch. GEMMs reach max_efficiency *
 * f / (f + half_flops) of peak, other ops max_efficiency. A measured time
 * for the op's signature replaces the formula.
 */
static int
compute_time(sim *s, ir_id op, int32_t dev, double scale, double *t, double *flops)
{
    const ir_module *m = s->m;
    const hw_device *d = hw_device_spec(s->hw, (uint32_t)dev);
    const ir_op *o = &m->ops[op];
    ir_cost c;
    double peak, eff, tc, tm;
    ir_dtype dt = IR_F32;

    if (s->hw->nop_time) {
        char sig[HW_SIGNATURE_MAX];
        double meas;
        hw_op_signature(m, op, sig, sizeof sig);
        meas = hw_op_time_lookup(s->hw, sig);
        if (meas >= 0) {
            ir_op_cost(m, op, &c);
            *t = meas;
            *flops = c.flops / scale;
            return 0;
        }
    }
    if (o->kind == IR_OP_OPAQUE) {
        char sig[HW_SIGNATURE_MAX];
        hw_op_signature(m, op, sig, sizeof sig);
        return di_error_set(s->err, DI_ECOST,
                            "op %u '%s' has no cost model: supply a measured time for "
                            "signature '%s' in an op-time calibration file",
                            op, ir_op_name(m, op), sig);
    }
    ir_op_cost(m, op, &c);
    if (o->noutput) {
        const ir_type *ty = &m->types[m->values[o->outputs].type];
        if (ty->kind == IR_TYPE_TENSOR)
            dt = (ir_dtype)ty->dtype;
    }
    if (o->ninput && !ir_dtype_is_float(dt)) {
        const ir_type *ty = &m->types[m->values[m->refs[o->inputs]].type];
        if (ty->kind == IR_TYPE_TENSOR)
            dt = (ir_dtype)ty->dtype;
    }
    peak = d->flops[dt];
    if (!(peak > 0) && ir_dtype_is_float(dt))
        peak = d->flops[IR_F32];
    if (!(peak > 0)) {
        /* Integer work: use the f32 rate (index arithmetic runs on CUDA cores). */
        peak = d->flops[IR_F32];
    }
    if (c.flops > 0 && !(peak > 0))
        return di_error_set(s->err, DI_ECOST, "op %u '%s': device %d (%s) has no %s peak rate",
                            op, ir_op_name(m, op), dev, d->kind, ir_dtype_name(dt));
    c.flops /= scale;
    c.bytes_read /= scale;
    c.bytes_write /= scale;
    eff = d->max_efficiency > 0 ? d->max_efficiency : 1.0;
    if (is_gemm(o->kind) && d->half_flops > 0)
        eff *= c.flops / (c.flops + d->half_flops);
    tc = c.flops > 0 ? c.flops / (peak * eff) : 0;
    tm = 0;
    if (c.bytes_read + c.bytes_write > 0) {
        double ew = d->elementwise_efficiency > 0 ? d->elementwise_efficiency : 1.0;
        if (!(d->memory_bandwidth > 0))
            return di_error_set(s->err, DI_ECOST, "device %d (%s) has no memory bandwidth", dev,
                                d->kind);
        tm = (c.bytes_read + c.bytes_write) / (d->memory_bandwidth * ew);
    }
    *t = (tc > tm ? tc : tm) + d->launch_overhead;
    *flops = c.flops;
    return 0;
}

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

static uint64_t mix64(uint64_t h, uint64_t v);
static double dtensor_scale(const sim *s, ir_id op);

static uint64_t
signature_hash(const ir_module *m, ir_id op)
{
    const ir_op *o = &m->ops[op];
    uint64_t h = mix64((uint64_t)o->kind << 32 | o->nattr, (uint64_t)o->ninput << 32 | o->noutput);
    for (uint32_t i = 0; i < o->ninput; i++)
        h = mix64(h, m->values[m->refs[o->inputs + i]].type);
    for (uint32_t i = 0; i < o->noutput; i++)
        h = mix64(h, m->values[o->outputs + i].type);
    for (uint32_t i = 0; i < o->nattr; i++) {
        const ir_attr *a = &m->attrs[o->attrs + i];
        h = mix64(h, (uint64_t)a->key << 32 ^ (uint64_t)a->i ^ a->s);
    }
    return h;
}

/*
 * compute_time with memos (homogeneous hardware, where an op's cost depends
 * on the op alone): an op inside a pmap body or a called function runs once
 * per instance and per call, so it is priced once per op; top-level ops are
 * priced once per signature (kind, types, attributes: repeated layers cost
 * the same), in a table of representative ops compared exactly.
 */
static int
op_time(sim *s, ir_id op, int32_t dev, double *t, double *flops)
{
    int rc;
    if (s->hw->noverride)
        return compute_time(s, op, dev, dtensor_scale(s, op), t, flops);
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
            free(tab);
        }
        uint64_t hash = signature_hash(s->m, op);
        mask = s->csig - 1;
        for (h = (uint32_t)hash & mask; s->sigs[h].op; h = (h + 1) & mask)
            if (s->sigs[h].hash == hash && same_signature(s->m, s->sigs[h].op, op)) {
                *t = s->sigs[h].t;
                *flops = s->sigs[h].flops;
                return 0;
            }
        if ((rc = compute_time(s, op, dev, dtensor_scale(s, op), t, flops)) != 0)
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
    if ((rc = compute_time(s, op, dev, dtensor_scale(s, op), t, flops)) != 0)
        return rc;
    s->memo[2 * op] = *t;
    s->memo[2 * op + 1] = *flops;
    return 0;
}

/* The link class of a group: slowest link and whether it spans nodes. */
typedef struct group_info {
    uint32_t n;         /* devices */
    uint32_t nodes;     /* distinct nodes */
    uint32_t per_node;  /* most devices on one node */
    hw_link intra, inter;
} group_info;

static void
group_describe(const sim *s, const int32_t *devs, uint32_t n, group_info *g)
{
    const hw_model *hw = s->hw;
    g->n = n;
    g->nodes = 0;
    g->per_node = 0;
    g->intra = hw->intra_node;
    g->inter = hw->inter_node;
    /* Devices are few per group; count nodes with a small quadratic scan over distinct nodes. */
    for (uint32_t i = 0; i < n; i++) {
        uint32_t node = hw_node_of(hw, (uint32_t)devs[i]), cnt = 0;
        int seen = 0;
        for (uint32_t j = 0; j < i; j++)
            if (hw_node_of(hw, (uint32_t)devs[j]) == node) {
                seen = 1;
                break;
            }
        if (seen)
            continue;
        g->nodes++;
        for (uint32_t j = i; j < n; j++)
            if (hw_node_of(hw, (uint32_t)devs[j]) == node)
                cnt++;
        if (cnt > g->per_node)
            g->per_node = cnt;
    }
    if (hw->devices_per_node <= 1) {
        /* One device per node (distir-classic): every link is the inter-node one. */
        g->intra = hw->inter_node;
    }
}

/* Ring costs. steps and the traffic factor depend on the collective. */
static double
ring_time(double bytes_factor, double bytes, uint32_t steps, const hw_link *l, double step_lat)
{
    return bytes_factor * bytes / l->bandwidth + steps * (l->latency + step_lat);
}

static double
log2ceil(uint32_t n)
{
    double r = 0;
    uint32_t p = 1;
    while (p < n) {
        p *= 2;
        r += 1;
    }
    return r;
}

/*
 * Time of a collective of `kind` over group g with payload `bytes` (per
 * participant, as ir_cost.bytes_comm). alpha = link latency + the preset's
 * per-step latency. Formulas (n devices, S bytes, B bandwidth):
 *   all_reduce ring: 2(n-1)/n S/B + 2(n-1) alpha
 *   all_reduce tree: 2 S/B + 2 ceil(log2 n) alpha
 *   all_gather, reduce_scatter, all_to_all ring: (n-1)/n S/B + (n-1) alpha
 *   broadcast (pipelined ring): S/B + (n-1) alpha; scatter/gather: (n-1)/n S/B + (n-1) alpha
 *   hierarchical (spanning nodes, g per node, N nodes): intra reduce-scatter,
 *   inter-node ring on S/g, intra all-gather (all_reduce); the analogous
 *   split for the others.
 */
static double
collective_time(const sim *s, int kind, const group_info *g, double bytes)
{
    const hw_model *hw = s->hw;
    double sl = hw->collective_step_latency;
    uint32_t n = g->n;
    int spans = g->nodes > 1;
    const hw_link *flat = spans ? &g->inter : &g->intra;
    double ring, tree, hier = INFINITY, t;
    double table;

    if (n <= 1)
        return 0;
    table = hw_table_time(hw, kind, n, spans, bytes);
    if (table >= 0)
        return table;

    switch (kind) {
    case IR_OP_ALLREDUCE:
        ring = ring_time(2.0 * (n - 1) / n, bytes, 2 * (n - 1), flat, sl);
        tree = 2.0 * bytes / flat->bandwidth + 2 * log2ceil(n) * (flat->latency + sl);
        if (spans && g->per_node > 1) {
            uint32_t gp = g->per_node, N = g->nodes;
            hier = ring_time((double)(gp - 1) / gp, bytes, gp - 1, &g->intra, sl) +
                   ring_time(2.0 * (N - 1) / N, bytes / gp, 2 * (N - 1), &g->inter, sl) +
                   ring_time((double)(gp - 1) / gp, bytes, gp - 1, &g->intra, sl);
        }
        break;
    case IR_OP_ALLGATHER:
    case IR_OP_REDUCESCATTER:
    case IR_OP_ALLTOALL:
    case IR_OP_SCATTER:
    case IR_OP_GATHERTO:
        ring = ring_time((double)(n - 1) / n, bytes, n - 1, flat, sl);
        tree = ring;
        if (spans && g->per_node > 1 && kind != IR_OP_ALLTOALL) {
            uint32_t gp = g->per_node, N = g->nodes;
            hier = ring_time((double)(gp - 1) / gp, bytes / N, gp - 1, &g->intra, sl) +
                   ring_time((double)(N - 1) / N, bytes, N - 1, &g->inter, sl);
        }
        break;
    case IR_OP_BROADCAST:
        ring = bytes / flat->bandwidth + (n - 1) * (flat->latency + sl);
        tree = log2ceil(n) * (bytes / flat->bandwidth + flat->latency + sl);
        break;
    default:
        ring = ring_time((double)(n - 1) / n, bytes, n - 1, flat, sl);
        tree = ring;
    }
    switch (hw->algorithm) {
    case HW_ALGO_RING:
    case HW_ALGO_SLOWEST_LINK:
        t = ring;
        break;
    case HW_ALGO_TREE:
        t = tree;
        break;
    case HW_ALGO_HIERARCHICAL:
        t = spans && isfinite(hier) ? hier : ring;
        break;
    default:
        t = ring;
        if (tree < t)
            t = tree;
        if (hier < t)
            t = hier;
    }
    return t;
}

/* ---- scheduling helpers ---- */

static uint64_t
mix64(uint64_t h, uint64_t v)
{
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h ^= h >> 31;
    h *= 0x7fb5d329728ea185ull;
    return h ^ (h >> 27);
}

static uint64_t
dbits(double v)
{
    uint64_t b;
    memcpy(&b, &v, sizeof b);
    return b;
}

/*
 * Occupies a stream. sym is set when the device is the representative of a
 * symmetric group running that group's common work; any other use of a
 * device that stands for others (or is stood for) breaks the symmetry.
 */
static void
occupy(sim *s, ir_id op, int32_t dev, int stream, double start, double end, int sym)
{
    sim_dev *d = &s->devs[dev];
    if (!sym && (d->rep != dev || d->class_n > 1))
        s->broken = 1;
    d->hist = mix64(mix64(mix64(d->hist, (uint64_t)op << 2 | (uint64_t)stream), dbits(start)),
                    dbits(end));
    if (s->opt->no_overlap) {
        for (int st = 0; st < NSTREAM; st++)
            d->free[st] = end;
    } else {
        d->free[stream] = end;
    }
    ivec_push(&d->busy[stream], start, end);
    record_event(s, op, dev, stream, start, end);
}

static double
stream_free(const sim *s, int32_t dev, int stream)
{
    return s->devs[dev].free[stream];
}

/* ---- memory classes ---- */

/* The value a view/plumbing/communication value comes from (0 if none). */
static void
mark_chain(sim *s, ir_id v, uint8_t cls, uint32_t depth)
{
    const ir_module *m = s->m;
    while (v && depth++ < 1u << 20) {
        const ir_value *val = &m->values[v];
        if (s->vclass[v] == cls)
            return;
        if (s->vclass[v] != SIM_MEM_ACTIVATIONS && s->vclass[v] != SIM_MEM_COMM)
            return; /* already classified otherwise: keep the first */
        s->vclass[v] = cls;
        if (val->def == 0) {
            /* A pmap body argument comes from the pmap's input. */
            const ir_region *r = &m->regions[val->region];
            if (r->parent == 0)
                return;
            if (val->index >= m->ops[r->parent].ninput)
                return;
            v = m->refs[m->ops[r->parent].inputs + val->index];
            continue;
        }
        const ir_op *o = &m->ops[val->def];
        const ir_opinfo *info = ir_opkind_info(o->kind);
        if (o->kind == IR_OP_PMAP) {
            const ir_region *b = &m->regions[o->body];
            if (val->index < b->nresult)
                v = b->results[val->index];
            else
                return;
        } else if (o->kind == IR_OP_TUPLE || o->kind == IR_OP_SPLIT || o->kind == IR_OP_CONCAT) {
            /* Every element; a gradient bucket is split from, or concatenated of, gradients. */
            for (uint32_t i = 1; i < o->ninput; i++)
                mark_chain(s, m->refs[o->inputs + i], cls, depth);
            v = o->ninput ? m->refs[o->inputs] : 0;
        } else if ((info->flags & (IR_OPF_COMM | IR_OPF_FREE)) && o->ninput) {
            v = m->refs[o->inputs];
        } else if (info->flags & IR_OPF_OPTIM) {
            v = val->index < o->ninput ? m->refs[o->inputs + (val->index ? val->index + 1 : 0)]
                                       : 0;
        } else {
            return;
        }
    }
}

static void
classify(sim *s)
{
    const ir_module *m = s->m;
    /* Results of communication ops are communication buffers, everything else activations. */
    memset(s->vclass, SIM_MEM_ACTIVATIONS, m->nvalue);
    for (ir_id op = 1; op < m->nop; op++) {
        const ir_op *o = &m->ops[op];
        if (o->kind < IR_NOPKIND && (ir_opkind_info(o->kind)->flags & IR_OPF_COMM))
            memset(s->vclass + o->outputs, SIM_MEM_COMM, o->noutput);
    }
    for (ir_id op = 1; op < m->nop; op++) {
        const ir_op *o = &m->ops[op];
        if (!(ir_opkind_info(o->kind)->flags & IR_OPF_OPTIM))
            continue;
        /* SGD(w, dw) and Adam(w, dw, m, v): w weights, dw gradients, m and v state. */
        if (o->ninput > 0)
            mark_chain(s, m->refs[o->inputs], SIM_MEM_WEIGHTS, 0);
        if (o->ninput > 1)
            mark_chain(s, m->refs[o->inputs + 1], SIM_MEM_GRADIENTS, 0);
        for (uint32_t i = 2; i < o->ninput; i++)
            mark_chain(s, m->refs[o->inputs + i], SIM_MEM_OPTIMIZER, 0);
        for (uint32_t i = 0; i < o->noutput; i++)
            s->vclass[o->outputs + i] = i == 0 ? SIM_MEM_WEIGHTS : SIM_MEM_OPTIMIZER;
    }
    /* An explicit "dist.mem" annotation (e.g. "stashed" on a weight copy) wins. */
    for (ir_id op = 1; op < m->nop; op++) {
        const ir_op *o = &m->ops[op];
        const char *cls;
        if (o->nattr == 0 || (cls = ir_op_string(m, op, "dist.mem", NULL)) == NULL)
            continue;
        for (int c = 0; c < SIM_NMEMCLASS; c++) {
            const char *name = sim_memclass_name(c);
            size_t n = strlen(cls);
            /* The full name or its first word ("stashed", "optimizer", "communication"). */
            if (strcmp(cls, name) == 0 || (strncmp(cls, name, n) == 0 && name[n] == '_'))
                for (uint32_t i = 0; i < o->noutput; i++)
                    s->vclass[o->outputs + i] = (uint8_t)c;
        }
    }
}

/* ---- ops ---- */

typedef struct ctx {
    uint32_t rep;        /* pmap instances simulated (1 at top level) */
    const int32_t *devs; /* device of each instance, NULL at top level */
    uint32_t sym;        /* instances each simulated instance stands for (1: none) */
} ctx;

static int sim_region(sim *s, ir_id region, const ctx *c);

/* Creates instances for every result of op in context c. */
static int
op_results(sim *s, ir_id op, const ctx *c)
{
    const ir_op *o = &s->m->ops[op];
    for (uint32_t i = 0; i < o->noutput; i++) {
        int rc = value_instances(s, o->outputs + i, c->rep, c->devs);
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
            int64_t idx = ir_op_int(m, op, "index", 0);
            uint32_t j0 = 0;
            for (int64_t e = 0; e < idx && (uint64_t)e < tt->nelem; e++) {
                const tloc *locs;
                uint32_t nl;
                rc = type_locs(s, m->refs[tt->elems + e], &locs, &nl);
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
            for (uint32_t i = 0; i < o->noutput; i++)
                for (uint32_t l = 0; l < vnloc(s, o->outputs + i); l++)
                    inst_alias(s, s->vbase[o->outputs + i] + k * vnloc(s, o->outputs + i) + l,
                               (uint32_t)(input_at(s, in, k, l) - s->inst));
        }
    }
    return 0;
}

/* Product of mesh axis sizes along which a dtensor op's work is divided. */
static double
dtensor_scale(const sim *s, ir_id op)
{
    const ir_module *m = s->m;
    const ir_op *o = &m->ops[op];
    ir_id mesh = 0;
    double scale = 1;
    uint32_t rank;
    if (m->nmesh <= 1)
        return 1; /* no meshes, no distributed tensors */
    for (uint32_t i = 0; i < o->ninput + o->noutput && !mesh; i++) {
        ir_id v = i < o->ninput ? m->refs[o->inputs + i] : o->outputs + (i - o->ninput);
        mesh = m->types[m->values[v].type].mesh;
    }
    if (!mesh)
        return 1;
    rank = m->meshes[mesh].rank;
    for (uint32_t a = 0; a < rank; a++) {
        int divided = 0;
        for (uint32_t i = 0; i < o->ninput + o->noutput; i++) {
            ir_id v = i < o->ninput ? m->refs[o->inputs + i] : o->outputs + (i - o->ninput);
            const ir_type *t = &m->types[m->values[v].type];
            if (t->mesh == mesh && m->ints[t->placements + a] != IR_PLACE_R)
                divided = 1;
        }
        if (divided)
            scale *= (double)m->ints[m->meshes[mesh].shape + a];
    }
    return scale;
}

static int
sim_compute_op(sim *s, ir_id op, const ctx *c)
{
    const ir_module *m = s->m;
    const ir_op *o = &m->ops[op];
    int optim = (ir_opkind_info(o->kind)->flags & IR_OPF_OPTIM) != 0;
    uint32_t nloc;
    int rc = op_results(s, op, c);
    if (rc)
        return rc;
    nloc = o->noutput ? vnloc(s, o->outputs) : 1;
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
            start = stream_free(s, dev, STREAM_COMPUTE);
            for (uint32_t i = 0; i < o->ninput; i++) {
                sim_inst *in = input_at(s, m->refs[o->inputs + i], k, j);
                if (in->ready > start)
                    start = in->ready;
            }
            rc = op_time(s, op, dev, &t, &fl);
            if (rc)
                return rc;
            end = start + t;
            occupy(s, op, dev, STREAM_COMPUTE, start, end, c->sym > 1);
            s->devs[dev].flops += fl;
            s->nops += c->sym;
            for (uint32_t i = 0; i < o->ninput; i++)
                inst_use(input_at(s, m->refs[o->inputs + i], k, j), end);
            for (uint32_t i = 0; i < o->noutput; i++) {
                uint32_t idx = s->vbase[o->outputs + i] + k * vnloc(s, o->outputs + i) + j;
                if (optim && i < o->ninput) {
                    /* Optimizer updates run in place: w' is w's storage. */
                    uint32_t src = (uint32_t)(input_at(s, m->refs[o->inputs + (i ? i + 1 : 0)],
                                                        k, j) -
                                              s->inst);
                    inst_alias(s, idx, src);
                    s->inst[idx].ready = end;
                } else {
                    inst_produce(&s->inst[idx], start, end);
                }
            }
        }
    }
    return 0;
}

/* Group membership of a mesh-form collective: devices sharing coordinates off mesh_axes. */
static int
mesh_group_find(sim *s, ir_id op, ir_id mesh, int32_t dev, int32_t *group, uint32_t *n)
{
    const ir_module *m = s->m;
    const ir_mesh *ms = &m->meshes[mesh];
    const int64_t *shape = m->ints + ms->shape, *devices = m->ints + ms->devices;
    uint32_t naxes, rank = ms->rank;
    const int64_t *axes = ir_op_ints(m, op, "mesh_axes", &naxes);
    int64_t coord[IR_MAX_RANK], c2[IR_MAX_RANK];
    uint32_t pos = UINT32_MAX, cnt = 0;
    uint8_t inaxes[IR_MAX_RANK] = {0};
    if (rank > IR_MAX_RANK)
        return di_error_set(s->err, DI_EINVAL, "mesh rank %u too large", rank);
    for (uint32_t i = 0; i < ms->ndevice; i++)
        if (devices[i] == dev) {
            pos = i;
            break;
        }
    if (pos == UINT32_MAX)
        return di_error_set(s->err, DI_EINVAL,
                            "op %u '%s': device %d is not in mesh '%s'", op,
                            ir_op_name(m, op), dev, ir_str_get(m, ms->name));
    if (axes == NULL) {
        /* No mesh_axes: every axis. */
        for (uint32_t a = 0; a < rank; a++)
            inaxes[a] = 1;
    } else {
        for (uint32_t a = 0; a < naxes; a++)
            if (axes[a] >= 0 && axes[a] < (int64_t)rank)
                inaxes[axes[a]] = 1;
    }
    for (int a = (int)rank - 1, p = (int)pos; a >= 0; a--) {
        coord[a] = p % shape[a];
        p /= (int)shape[a];
    }
    for (uint32_t i = 0; i < ms->ndevice; i++) {
        int same = 1;
        for (int a = (int)rank - 1, p = (int)i; a >= 0; a--) {
            c2[a] = p % shape[a];
            p /= (int)shape[a];
        }
        for (uint32_t a = 0; a < rank; a++)
            if (!inaxes[a] && c2[a] != coord[a])
                same = 0;
        if (same)
            group[cnt++] = (int32_t)devices[i];
    }
    *n = cnt;
    return 0;
}

static uint32_t
grp_slot(const sim *s, ir_id op, int32_t dev)
{
    uint32_t h = (uint32_t)(mix64(op, (uint32_t)dev) & (s->cgrp - 1));
    while (s->grps[h].op && (s->grps[h].op != op || s->grps[h].dev != dev))
        h = (h + 1) & (s->cgrp - 1);
    return h;
}

static double collective_time(const sim *s, int kind, const group_info *g, double bytes);
static unsigned group_levels(const sim *s, const group_info *g);

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
        free(old);
    }
    h = grp_slot(s, op, dev);
    if (s->grps[h].op == 0) {
        DI_GROW(&s->grpdev, &s->cgrpdev, (size_t)s->ngrpdev + nd + 1);
        group_info g;
        ir_cost cost;
        rc = mesh_group_find(s, op, mesh, dev, s->grpdev + s->ngrpdev, &cnt);
        if (rc)
            return rc;
        ir_op_cost(s->m, op, &cost);
        group_describe(s, s->grpdev + s->ngrpdev, cnt, &g);
        s->grps[h].op = op;
        s->grps[h].dev = dev;
        s->grps[h].off = s->ngrpdev;
        s->grps[h].n = cnt;
        s->grps[h].t = collective_time(s, s->m->ops[op].kind, &g, cost.bytes_comm);
        s->grps[h].levels = group_levels(s, &g);
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

/* The link levels (bit 0 intra-, bit 1 inter-node) a collective over group g crosses. */
static unsigned
group_levels(const sim *s, const group_info *g)
{
    unsigned m = 0;
    if (g->nodes > 1)
        m |= 2;
    if (g->per_node > 1)
        m |= s->hw->devices_per_node <= 1 ? 2 : 1;
    return m;
}

/* Earliest start >= c at which the levels of every device in devs[0..n) are idle for t. */
static double
links_fit(const sim *s, const int32_t *devs, uint32_t n, unsigned levels, double c, double t)
{
    double prev;
    if (t <= 0 || levels == 0)
        return c;
    do {
        prev = c;
        for (uint32_t i = 0; i < n; i++)
            for (int l = 0; l < 2; l++)
                if (levels >> l & 1)
                    c = link_fit(&s->devs[devs[i]].link[l], c, t);
    } while (c != prev && (n > 1 || levels == 3));
    return c;
}

/* Takes the levels on every device; a device's links are part of its history (symmetry). */
static void
links_take(sim *s, const int32_t *devs, uint32_t n, unsigned levels, double a, double b)
{
    for (uint32_t i = 0; i < n; i++) {
        sim_dev *d = &s->devs[devs[i]];
        for (int l = 0; l < 2; l++)
            if (levels >> l & 1)
                link_take(&d->link[l], a, b);
        d->hist = mix64(d->hist, 0x6c696e6b00ull | levels);
    }
}

/*
 * Runs one collective group: every member starts together, when its
 * collective stream is free, and occupies it. Collectives have their own
 * stream, apart from point-to-point sends and receives (as NCCL
 * collectives and pipeline p2p run on their own streams and communicators):
 * a receive waiting for another pipeline stage does not hold up a tensor-
 * parallel all-reduce queued behind it.
 */
static void
run_group(sim *s, ir_id op, const int32_t *devs, uint32_t n, unsigned levels, double ready,
          double t, double *out_start, double *out_end, int sym)
{
    double start = ready;
    for (uint32_t i = 0; i < n; i++)
        if (stream_free(s, devs[i], STREAM_COLL) > start)
            start = stream_free(s, devs[i], STREAM_COLL);
    start = links_fit(s, devs, n, levels, start, t);
    links_take(s, devs, n, levels, start, start + t);
    for (uint32_t i = 0; i < n; i++)
        occupy(s, op, devs[i], STREAM_COLL, start, start + t, sym);
    *out_start = start;
    *out_end = start + t;
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
    for (uint32_t k = 0; k < n; k++)
        s->devs[devs[k]].rep = rep;
    s->devs[rep].class_n = n;
}

/*
 * dist.send: one transfer, or (a tuple) one per element. The element-wise
 * form is symmetric when the senders form one class, the receivers another,
 * every element is ready at once and every pair uses the same kind of link:
 * then one transfer between the representatives stands for all.
 */
static int
sim_send(sim *s, ir_id op, const ctx *c)
{
    const ir_module *m = s->m;
    const ir_op *o = &m->ops[op];
    ir_id in = m->refs[o->inputs], out = o->outputs;
    uint32_t n;
    ir_cost cost;
    const tloc *locs;
    int rc = type_locs(s, m->values[out].type, &locs, &n);
    if (rc)
        return rc;
    ir_op_cost(m, op, &cost);
    if (vnloc(s, in) != n)
        return di_error_set(s->err, DI_EINVAL, "op %u 'dist.send': %u inputs for %u results", op,
                            vnloc(s, in), n);
    if (c->rep == 1 && c->devs == NULL && n > 1 && s->symmetric) {
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
                start = links_fit(s, pair, 2, lv, start, t);
                end = start + t;
                links_take(s, pair, 2, lv, start, end);
            }
            occupy(s, op, rs, STREAM_SEND, start, end, 1);
            occupy(s, op, rd, STREAM_RECV, start, end, 1);
            s->nops += n;
            for (uint32_t j = 0; j < n; j++)
                inst_use(vinst(s, in, 0, j), end);
            /* One result instance, on the receiving representative, stands for all. */
            rc = value_uniform(s, out, &yi);
            free(src);
            if (rc)
                return rc;
            s->inst[yi].dev = rd;
            inst_produce(&s->inst[yi], start, end);
            return 0;
        }
        free(src);
    }
    if ((rc = op_results(s, op, c)) != 0)
        return rc;
    for (uint32_t k = 0; k < c->rep; k++)
        for (uint32_t j = 0; j < n; j++) {
            sim_inst *x = input_at(s, in, k, j);
            sim_inst *y = vinst(s, out, k, j);
            int32_t from = vdev(s, in, s->vrep[in] > 1 ? k : 0, j), to = y->dev;
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
                start = links_fit(s, pair, 2, lv, start, t);
                links_take(s, pair, 2, lv, start, start + t);
            }
            end = start + t;
            occupy(s, op, from, STREAM_SEND, start, end, 0);
            occupy(s, op, to, STREAM_RECV, start, end, 0);
            s->nops++;
            inst_use(x, end);
            inst_produce(y, start, end);
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
    const ir_attr *meshattr = ir_op_attr(m, op, "mesh");
    ir_id in = m->refs[o->inputs], out = o->outputs;
    uint32_t nin = vnloc(s, in), nout;
    ir_cost cost;
    const tloc *locs;
    int32_t *group;
    const sim_grp *ge;
    int rc = type_locs(s, m->values[out].type, &locs, &nout);
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
        uint8_t *done = di_xcalloc(total ? total : 1, 1);
        for (uint32_t idx = 0; idx < total; idx++) {
            uint32_t n = 0;
            double ready = 0, start, end, t;
            unsigned levels;
            const int32_t *mg; /* the group's devices (the table does not move until the next lookup) */
            if (done[idx])
                continue;
            sim_inst *first = &s->inst[s->vbase[in] + (s->vrep[in] > 1 ? idx : idx % nin)];
            rc = mesh_group(s, op, meshattr->s, first->dev, &ge);
            if (rc) {
                free(done);
                return rc;
            }
            n = ge->n;
            t = ge->t;
            levels = ge->levels;
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
                run_group(s, op, &r, 1, levels, ready, t, &start, &end, 1);
                s->nops += c->sym;
            } else {
                run_group(s, op, mg, n, levels, ready, t, &start, &end, 0);
                s->nops += n;
            }
            for (uint32_t q = idx; q < total; q++) {
                if (done[q] != 2)
                    continue;
                done[q] = 1;
                inst_use(&s->inst[s->vbase[in] + (s->vrep[in] > 1 ? q : q % nin)], end);
                if (q < c->rep * nout) {
                    uint32_t oi = s->vbase[out] + q;
                    inst_produce(&s->inst[oi], start, end);
                }
            }
        }
        free(done);
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
        group_describe(s, group, n, &g);
        t = collective_time(s, o->kind, &g, cost.bytes_comm);
        if (c->rep == 1 && c->devs == NULL && tuple_symmetric(s, in, out, group, n)) {
            /*
             * The group is exactly one symmetric class and every element is
             * ready at once: run it on the representative; one result
             * instance, on the representative, stands for every element.
             */
            int32_t r = s->devs[group[0]].rep;
            uint32_t yi;
            run_group(s, op, &r, 1, group_levels(s, &g), ready, t, &start, &end, 1);
            s->nops += n;
            for (uint32_t j = 0; j < nin; j++)
                inst_use(input_at(s, in, k, j), end);
            if ((rc = value_uniform(s, out, &yi)) != 0)
                break;
            s->inst[yi].dev = r;
            inst_produce(&s->inst[yi], start, end);
            continue;
        }
        if (k == 0 && (rc = op_results(s, op, c)) != 0)
            break;
        run_group(s, op, group, n, group_levels(s, &g), ready, t, &start, &end, 0);
        s->nops += n;
        for (uint32_t j = 0; j < nin; j++)
            inst_use(input_at(s, in, k, j), end);
        for (uint32_t j = 0; j < nout; j++)
            inst_produce(vinst(s, out, k, j), start, end);
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
        return di_error_set(s->err, DI_EINVAL, "op %u 'dist.pmap' has no body", op);
    devlist = ir_op_ints(m, op, "devices", &ndev);
    if (devlist == NULL) {
        const ir_attr *ma = ir_op_attr(m, op, "mesh");
        if (ma == NULL || ma->s == 0 || ma->s >= m->nmesh)
            return di_error_set(s->err, DI_EINVAL, "op %u 'dist.pmap' has neither devices nor mesh",
                                op);
        devlist = m->ints + m->meshes[ma->s].devices;
        ndev = m->meshes[ma->s].ndevice;
    }
    devs = di_xmalloc((ndev ? ndev : 1) * sizeof *devs);
    for (uint32_t k = 0; k < ndev; k++) {
        rc = dev_check(s, devlist[k]);
        if (rc) {
            free(devs);
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
            rc = value_instances(s, arg, bc.rep, bc.devs);
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
        if (rc == 0)
            rc = sim_region(s, o->body, &bc);
        if (bc.sym > 1) {
            /* One instance per result, aliasing the representative's. */
            for (uint32_t i = 0; rc == 0 && i < o->noutput && i < body->nresult; i++) {
                uint32_t yi;
                if ((rc = value_uniform(s, o->outputs + i, &yi)) == 0)
                    inst_alias(s, yi, vidx(s, body->results[i], 0, 0));
            }
            for (uint32_t i = body->nresult; rc == 0 && i < o->noutput; i++)
                rc = value_instances(s, o->outputs + i, 1, NULL);
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
                    inst_alias(s, s->vbase[out] + q * nout + oj,
                               (uint32_t)(vinst(s, res, s->vrep[res] > 1 && bc.sym == 1 ? k : 0,
                                                l) -
                                          s->inst));
                }
        }
    }
    free(devs);
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
    if (flags & IR_OPF_FREE)
        return sim_free_op(s, op, c);
    if (o->kind == IR_OP_SEND)
        return sim_send(s, op, c);
    if (flags & IR_OPF_COMM) {
        if (o->ninput != 1 || o->noutput != 1)
            return di_error_set(s->err, DI_EINVAL, "op %u '%s' must have one input and result",
                                op, ir_op_name(m, op));
        return sim_collective(s, op, c);
    }
    return sim_compute_op(s, op, c);
}

static int
sim_region(sim *s, ir_id region, const ctx *c)
{
    const ir_region *r = &s->m->regions[region];
    for (uint32_t i = 0; i < r->nop; i++) {
        int rc;
        if ((i & 1023) == 0 && cancelled(s))
            return di_error_set(s->err, DI_ECANCELLED, "simulation cancelled");
        rc = sim_op(s, r->ops[i], c);
        if (rc)
            return rc;
        if (s->broken)
            return DI_EINTERNAL; /* sim_run starts again without symmetry */
    }
    return 0;
}

/* ---- results ---- */

/*
 * Union of two sorted lists of disjoint intervals (each stream's list is
 * sorted and merged as it is built, since streams execute in order).
 * Writes the union into out (capacity na + nb) and returns its length.
 */
static uint32_t
union2(const interval *a, uint32_t na, const interval *b, uint32_t nb, interval *out)
{
    uint32_t i = 0, j = 0, w = 0;
    while (i < na || j < nb) {
        interval x;
        if (j >= nb || (i < na && a[i].start <= b[j].start))
            x = a[i++];
        else
            x = b[j++];
        if (w && x.start <= out[w - 1].end) {
            if (x.end > out[w - 1].end)
                out[w - 1].end = x.end;
        } else {
            out[w++] = x;
        }
    }
    return w;
}

static double
total_len(const interval *v, uint32_t n)
{
    double t = 0;
    for (uint32_t i = 0; i < n; i++)
        t += v[i].end - v[i].start;
    return t;
}

/* Length of a minus b, both sorted disjoint lists. */
static double
minus_len(const interval *a, uint32_t na, const interval *b, uint32_t nb)
{
    double total = 0;
    uint32_t j = 0;
    for (uint32_t i = 0; i < na; i++) {
        double cur = a[i].start, end = a[i].end;
        while (j < nb && b[j].end <= cur)
            j++;
        for (uint32_t q = j; q < nb && b[q].start < end; q++) {
            if (b[q].start > cur)
                total += b[q].start - cur;
            if (b[q].end > cur)
                cur = b[q].end;
            if (cur >= end)
                break;
        }
        if (cur < end)
            total += end - cur;
    }
    return total;
}

static uint64_t
time_key(double t, int is_alloc)
{
    uint64_t bits;
    t += 0.0; /* no negative zero */
    memcpy(&bits, &t, sizeof bits);
    return bits << 1 | (uint64_t)(is_alloc != 0);
}

/*
 * Stable LSD radix sort of n events by key, 16 bits per pass (8 for short
 * segments, where clearing 65536 counters would dominate); passes whose
 * digit is the same for every event are skipped (times share their high
 * bits), and an already sorted segment is left alone. tmp has room for n
 * events; count has room for 65536 counters.
 */
static void
radix_sort(memev *v, memev *tmp, uint32_t *count, uint32_t n)
{
    const int BITS = n >= (1u << 17) ? 16 : 8;
    const uint32_t NB = 1u << BITS;
    memev *src = v, *dst = tmp;
    uint64_t diff = 0;
    int sorted = 1;
    for (uint32_t i = 1; i < n; i++) {
        diff |= v[i].key ^ v[0].key;
        if (v[i].key < v[i - 1].key)
            sorted = 0;
    }
    if (sorted)
        return;
    for (int shift = 0; shift < 64; shift += BITS) {
        uint32_t sum = 0;
        if (((diff >> shift) & (NB - 1)) == 0)
            continue; /* every event has the same digit here */
        memset(count, 0, NB * sizeof *count);
        for (uint32_t i = 0; i < n; i++)
            count[(src[i].key >> shift) & (NB - 1)]++;
        for (uint32_t d = 0; d < NB; d++) {
            uint32_t c = count[d];
            count[d] = sum;
            sum += c;
        }
        for (uint32_t i = 0; i < n; i++)
            dst[count[(src[i].key >> shift) & (NB - 1)]++] = src[i];
        memev *t = src;
        src = dst;
        dst = t;
    }
    if (src != v)
        memcpy(v, src, n * sizeof *v);
}

/*
 * Sorts n events by key, using that they come almost in time order (streams
 * run in order; a free follows its value's last use): one pass keeps a
 * sorted subsequence in place and moves the out-of-order events (a value
 * that lives long, a late consumer) aside, popping up to 16 kept events
 * when they, not the new one, are the exceptions; the few set aside are
 * radix-sorted and merged back from the end. When too many are out of
 * order it radix-sorts everything. Events with equal keys happen at the
 * same instant and device_memory settles an instant before looking at it,
 * so their order does not matter (it is deterministic all the same).
 * tmp has room for n events.
 */
static void
sort_events(memev *v, memev *tmp, uint32_t *count, uint32_t n)
{
    enum { POP_MAX = 16 };
    uint32_t keep = 0, nout = 0, i, j, w;
    for (i = 1; i < n && v[i].key >= v[i - 1].key; i++)
        ;
    if (i >= n)
        return; /* already sorted */
    for (i = 0; i < n; i++) {
        memev e = v[i];
        uint32_t p = 0;
        if (keep == 0 || e.key >= v[keep - 1].key) {
            v[keep++] = e;
            continue;
        }
        while (p < POP_MAX && p < keep && v[keep - 1 - p].key > e.key)
            p++;
        if (p < keep && v[keep - 1 - p].key > e.key) {
            tmp[nout++] = e; /* later than POP_MAX kept events: e is the exception */
            continue;
        }
        for (uint32_t q = 0; q < p; q++)
            tmp[nout++] = v[keep - 1 - q];
        keep -= p;
        v[keep++] = e;
    }
    if (nout > n / 4) {
        memcpy(v + keep, tmp, nout * sizeof *v);
        radix_sort(v, tmp, count, n);
        return;
    }
    radix_sort(tmp, tmp + nout, count, nout);
    /* Merge from the end: v[0..keep) and tmp[0..nout) into v[0..n). */
    i = keep;
    j = nout;
    w = n;
    while (j > 0) {
        if (i > 0 && v[i - 1].key > tmp[j - 1].key)
            v[--w] = v[--i];
        else
            v[--w] = tmp[--j];
    }
}

void
sim_sort_keys(uint64_t *keys, uint32_t n)
{
    memev *v = di_xmalloc((n ? n : 1) * sizeof *v), *tmp = di_xmalloc((n ? n : 1) * sizeof *tmp);
    uint32_t *count = di_xmalloc(65536 * sizeof *count);
    for (uint32_t i = 0; i < n; i++) {
        v[i].key = keys[i];
        v[i].val = i;
    }
    sort_events(v, tmp, count, n);
    for (uint32_t i = 0; i < n; i++)
        keys[i] = v[i].key;
    free(count);
    free(tmp);
    free(v);
}

/*
 * Builds every device's memory events from the instances: an owner is
 * allocated when its producer starts and freed when the last consumer of
 * any of its aliases ends (never, if it or an alias is persistent).
 */
static void
build_memory(sim *s, double step)
{
    uint32_t total = 0, most = 0, *count;
    memev *tmp;
    /*
     * Propagate last use and persistence from aliases to owners, and count
     * each device's allocations (owners with bytes); it has at most as many
     * frees (persistence is only final after this pass).
     */
    for (uint32_t i = 1; i < s->ninst; i++) {
        sim_inst *in = &s->inst[i];
        if (in->owner != i) {
            sim_inst *ow = &s->inst[in->owner];
            if (in->last_use > ow->last_use)
                ow->last_use = in->last_use;
            ow->flags |= in->flags & INST_PERSISTENT;
        } else if (s->tlocs[in->loc].bytes) {
            s->devs[in->dev].nalloc++;
        }
    }
    /*
     * Per device, the allocations (in instance order, which is almost time
     * order: streams run in order) and then the frees. Each part is sorted
     * on its own (radix_sort skips a sorted one) and device_memory merges
     * them: frees sort before allocations at the same instant, so the merge
     * gives exactly the order of sorting all events together.
     */
    for (uint32_t d = 0; d < s->ndev; d++) {
        s->devs[d].evoff = total;
        total += 2 * s->devs[d].nalloc;
        if (s->devs[d].nalloc > most)
            most = s->devs[d].nalloc;
        s->devs[d].nev = s->devs[d].nalloc; /* the next free's slot */
        s->devs[d].nalloc = 0;              /* the next allocation's slot */
    }
    if (total > s->cev) {
        di_big_free(s->ev, s->cev * sizeof *s->ev);
        s->cev = total;
        s->ev = di_big_xalloc(s->cev * sizeof *s->ev);
    }
    for (uint32_t i = 1; i < s->ninst; i++) {
        sim_inst *in = &s->inst[i];
        sim_dev *d;
        uint64_t bytes;
        if (in->owner != i || (bytes = s->tlocs[in->loc].bytes) == 0)
            continue;
        d = &s->devs[in->dev];
        s->ev[d->evoff + d->nalloc].key = time_key(in->alloc, 1);
        s->ev[d->evoff + d->nalloc++].val = bytes << 3 | in->cls;
        if (!(in->flags & INST_PERSISTENT)) {
            double t = in->last_use > in->ready ? in->last_use : in->ready;
            s->ev[d->evoff + d->nev].key = time_key(t > step ? step : t, 0);
            s->ev[d->evoff + d->nev++].val = bytes << 3 | in->cls;
        }
    }
    if (most > s->ctmp) {
        di_big_free(s->tmp, s->ctmp * sizeof *s->tmp);
        s->ctmp = most;
        s->tmp = di_big_xalloc(s->ctmp * sizeof *s->tmp);
    }
    if (s->count == NULL)
        s->count = di_xmalloc(65536 * sizeof *s->count);
    tmp = s->tmp;
    count = s->count;
    for (uint32_t d = 0; d < s->ndev; d++) {
        sim_dev *dv = &s->devs[d];
        sort_events(s->ev + dv->evoff, tmp, count, dv->nalloc);
        sort_events(s->ev + dv->evoff + dv->nalloc, tmp, count, dv->nev - dv->nalloc);
    }
}

static double
key_time(uint64_t key)
{
    double t;
    uint64_t bits = key >> 1;
    memcpy(&t, &bits, sizeof t);
    return t;
}

/*
 * Scans a device's sorted events: the peak, its time and composition, and
 * the timeline. With a point limit the timeline keeps, per bucket of
 * consecutive instants, the highest point, and always the final state (the
 * resident set); the buckets are sized in a first counting pass so that the
 * full timeline is never materialized.
 */
static void
device_memory(sim *s, int32_t dev, sim_device_result *r)
{
    sim_dev *d = &s->devs[dev];
    const memev *al = s->ev + d->evoff, *fr = al + d->nalloc;
    const memev *alend = fr, *frend = al + d->nev;
    int64_t live = 0, cls[SIM_NMEMCLASS] = {0};
    uint32_t ninstant = 0, npoint = 0, per = 1, inbucket = 0, maxp;
    sim_mempoint *pts = NULL, best;
    int have_best = 0;
    uint64_t last = 0;
    r->peak_memory_bytes = 0;
    r->peak_time_s = 0;
    /* Distinct instants: a merge of the two sorted parts by time. */
    {
        const memev *a = al, *f = fr;
        int first = 1;
        while (a < alend || f < frend) {
            const memev *e = (f < frend && (a >= alend || f->key < a->key)) ? f++ : a++;
            if (first || (e->key >> 1) != last)
                ninstant++;
            last = e->key >> 1;
            first = 0;
        }
    }
    maxp = s->opt->timeline_max_points;
    if (s->opt->want_timeline) {
        if (maxp && ninstant > maxp)
            per = (ninstant + maxp - 1) / maxp;
        pts = di_xmalloc(((ninstant + per - 1) / per + 2) * sizeof *pts);
    }
    memset(&best, 0, sizeof best);
    while (al < alend || fr < frend) {
        const memev *e = (fr < frend && (al >= alend || fr->key < al->key)) ? fr++ : al++;
        const memev *next = (fr < frend && (al >= alend || fr->key < al->key)) ? fr
                            : al < alend                                        ? al
                                                                                : NULL;
        uint64_t bytes = e->val >> 3;
        int c = (int)(e->val & 7);
        int64_t delta = (e->key & 1) ? (int64_t)bytes : -(int64_t)bytes;
        live += delta;
        cls[c] += delta;
        if (next && (next->key >> 1) == (e->key >> 1))
            continue; /* settle every event of one instant first */
        if (live > (int64_t)r->peak_memory_bytes) {
            r->peak_memory_bytes = (uint64_t)live;
            r->peak_time_s = key_time(e->key);
            for (int k = 0; k < SIM_NMEMCLASS; k++)
                r->peak_by_class[k] = cls[k] > 0 ? (uint64_t)cls[k] : 0;
        }
        if (pts) {
            uint64_t b = live > 0 ? (uint64_t)live : 0;
            if (!have_best || b > best.bytes) {
                best.time = key_time(e->key);
                best.bytes = b;
                for (int k = 0; k < SIM_NMEMCLASS; k++)
                    best.by_class[k] = cls[k] > 0 ? (uint64_t)cls[k] : 0;
                have_best = 1;
            }
            if (++inbucket == per || next == NULL) {
                pts[npoint++] = best;
                inbucket = 0;
                have_best = 0;
            }
        }
        last = e->key;
    }
    if (pts && npoint && d->nev) {
        /* The last point is the final state. */
        sim_mempoint *lp = &pts[npoint - 1];
        lp->time = key_time(last);
        lp->bytes = live > 0 ? (uint64_t)live : 0;
        for (int k = 0; k < SIM_NMEMCLASS; k++)
            lp->by_class[k] = cls[k] > 0 ? (uint64_t)cls[k] : 0;
    }
    r->timeline = pts;
    r->ntimeline = npoint;
    r->capacity_bytes = (uint64_t)hw_device_spec(s->hw, (uint32_t)dev)->memory_bytes;
    r->oom = r->capacity_bytes && r->peak_memory_bytes > r->capacity_bytes;
    r->oom_by_bytes = r->oom ? r->peak_memory_bytes - r->capacity_bytes : 0;
}

/* The result of one device from its streams and memory events. */
static void
device_result(sim *s, int32_t d, double step, sim_device_result *dr)
{
    sim_dev *dv = &s->devs[d];
    interval *all, *comm, *sr;
    uint32_t nc, nall, nmc, nsr;
    dr->id = d;
    nsr = dv->busy[STREAM_SEND].n + dv->busy[STREAM_RECV].n;
    nc = nsr + dv->busy[STREAM_COLL].n;
    sr = di_xmalloc((nsr ? nsr : 1) * sizeof *sr);
    comm = di_xmalloc((nc ? nc : 1) * sizeof *comm);
    nsr = union2(dv->busy[STREAM_SEND].v, dv->busy[STREAM_SEND].n, dv->busy[STREAM_RECV].v,
                 dv->busy[STREAM_RECV].n, sr);
    nmc = union2(sr, nsr, dv->busy[STREAM_COLL].v, dv->busy[STREAM_COLL].n, comm);
    free(sr);
    dr->comm_s = total_len(comm, nmc);
    dr->compute_s = total_len(dv->busy[0].v, dv->busy[0].n);
    dr->exposed_comm_s = minus_len(comm, nmc, dv->busy[0].v, dv->busy[0].n);
    nall = nmc + dv->busy[0].n;
    all = di_xmalloc((nall ? nall : 1) * sizeof *all);
    nall = union2(comm, nmc, dv->busy[0].v, dv->busy[0].n, all);
    dr->busy_s = total_len(all, nall);
    dr->idle_s = step - dr->busy_s;
    if (dr->idle_s < 0)
        dr->idle_s = 0;
    dr->flops = dv->flops;
    free(comm);
    free(all);
    device_memory(s, d, dr);
}

static int
device_active(const sim *s, int32_t d)
{
    const sim_dev *dv = &s->devs[d];
    for (int st = 0; st < NSTREAM; st++)
        if (dv->busy[st].n)
            return 1;
    return dv->nev != 0;
}

/*
 * Assembles the result: every device that did anything, in ascending id. A
 * device that a symmetric representative stood for gets a copy of the
 * representative's numbers under its own id.
 */
static int
build_result(sim *s, sim_result **out)
{
    sim_result *r = di_xcalloc(1, sizeof *r);
    double step = 0, peak_sum = 0;
    sim_device_result *per = di_xcalloc(s->ndev, sizeof *per);
    uint8_t *have = di_xcalloc(s->ndev, 1);
    uint32_t n = 0;
    for (uint32_t d = 0; d < s->ndev; d++)
        for (int st = 0; st < NSTREAM; st++)
            if (s->devs[d].free[st] > step)
                step = s->devs[d].free[st];
    build_memory(s, step);
    for (uint32_t d = 0; d < s->ndev; d++)
        if (s->devs[d].rep == (int32_t)d && device_active(s, (int32_t)d)) {
            device_result(s, (int32_t)d, step, &per[d]);
            have[d] = 1;
        }
    for (uint32_t d = 0; d < s->ndev; d++) {
        int32_t rp = s->devs[d].rep;
        if (rp != (int32_t)d && have[rp]) {
            per[d] = per[rp];
            per[d].id = (int32_t)d;
            /* Identical by construction: share the representative's timeline (a copy per
               device would cost more than the simulation with 1,000 devices). */
            per[d].timeline_shared = per[rp].timeline != NULL;
            per[d].timeline_device = rp;
            have[d] = 2;
        }
    }
    for (uint32_t d = 0; d < s->ndev; d++)
        n += have[d] != 0;
    r->devices = di_xcalloc(n ? n : 1, sizeof *r->devices);
    for (uint32_t d = 0; d < s->ndev; d++) {
        const hw_device *spec;
        double best = 0;
        if (!have[d])
            continue;
        r->devices[r->ndevice++] = per[d];
        r->flops += per[d].flops;
        if (per[d].peak_memory_bytes > r->peak_memory_bytes)
            r->peak_memory_bytes = per[d].peak_memory_bytes;
        spec = hw_device_spec(s->hw, d);
        for (int t = 1; t < IR_NDTYPE; t++)
            if (spec->flops[t] > best && ir_dtype_is_float((ir_dtype)t))
                best = spec->flops[t];
        peak_sum += best;
    }
    free(per);
    free(have);
    r->step_time_s = step;
    r->ops = s->nops;
    r->mfu = (step > 0 && peak_sum > 0) ? r->flops / (step * peak_sum) : 0;
    if (step > 0 && r->ndevice) {
        double mean = 0;
        for (uint32_t i = 0; i < r->ndevice; i++)
            mean += r->devices[i].compute_s;
        mean /= r->ndevice;
        r->bubble_fraction = 1.0 - mean / step;
        if (r->bubble_fraction < 0)
            r->bubble_fraction = 0;
    }
    *out = r;
    return 0;
}

/* The tables a workspace keeps between runs (see sim.h). */
struct sim_workspace {
    sim_inst *inst;
    uint32_t cinst;
    uint32_t cvalue;
    uint32_t *vbase, *vrep;
    uint8_t *vuni, *vclass;
    memev *ev, *tmp;
    size_t cev, ctmp;
    uint32_t *count;
};

static void
ws_release(sim_workspace *w)
{
    di_big_free(w->inst, w->cinst * sizeof *w->inst);
    di_big_free(w->vbase, w->cvalue * sizeof *w->vbase);
    di_big_free(w->vrep, w->cvalue * sizeof *w->vrep);
    di_big_free(w->vuni, w->cvalue);
    di_big_free(w->vclass, w->cvalue);
    di_big_free(w->ev, w->cev * sizeof *w->ev);
    di_big_free(w->tmp, w->ctmp * sizeof *w->tmp);
    free(w->count);
    memset(w, 0, sizeof *w);
}

sim_workspace *
sim_workspace_new(void)
{
    return di_xcalloc(1, sizeof(sim_workspace));
}

void
sim_workspace_free(sim_workspace *ws)
{
    if (ws == NULL)
        return;
    ws_release(ws);
    free(ws);
}

size_t
sim_workspace_bytes(const sim_workspace *w)
{
    return w->cinst * sizeof *w->inst + (size_t)w->cvalue * (2 * sizeof(uint32_t) + 2) +
           (w->cev + w->ctmp) * sizeof(memev) + (w->count ? 65536 * sizeof *w->count : 0);
}

void
sim_workspace_trim(sim_workspace *ws, size_t max_bytes)
{
    if (ws && sim_workspace_bytes(ws) > max_bytes)
        ws_release(ws);
}

/* Moves the tables of ws (or none) into s. */
static void
tables_take(sim *s, sim_workspace *ws)
{
    if (ws == NULL)
        return;
    s->inst = ws->inst, s->cinst = ws->cinst;
    s->cvalue = ws->cvalue;
    s->vbase = ws->vbase, s->vrep = ws->vrep, s->vuni = ws->vuni, s->vclass = ws->vclass;
    s->ev = ws->ev, s->cev = ws->cev;
    s->tmp = ws->tmp, s->ctmp = ws->ctmp;
    s->count = ws->count;
    memset(ws, 0, sizeof *ws);
}

/* Moves the tables of s back into ws, or frees them. */
static void
tables_give(sim *s, sim_workspace *ws)
{
    sim_workspace w;
    w.inst = s->inst, w.cinst = s->cinst;
    w.cvalue = s->cvalue;
    w.vbase = s->vbase, w.vrep = s->vrep, w.vuni = s->vuni, w.vclass = s->vclass;
    w.ev = s->ev, w.cev = s->cev;
    w.tmp = s->tmp, w.ctmp = s->ctmp;
    w.count = s->count;
    if (ws)
        *ws = w;
    else
        ws_release(&w);
}

static void
sim_fini(sim *s, sim_workspace *ws)
{
    if (s->devs)
        for (uint32_t d = 0; d < s->ndev; d++) {
            for (int st = 0; st < NSTREAM; st++)
                free(s->devs[d].busy[st].v);
            free(s->devs[d].link[0].v);
            free(s->devs[d].link[1].v);
        }
    tables_give(s, ws);
    if (s->memo)
        di_big_free(s->memo, 2 * s->m->nop * sizeof *s->memo);
    free(s->sigs);
    free(s->grps);
    free(s->grpdev);
    free(s->scratch);
    free(s->devs);
    free(s->used);
    free(s->tloc_off);
    free(s->tloc_n);
    free(s->tlocs);
    free(s->events);
}

/* One simulation; with symmetric set it may stop with s->broken (see pmap_symmetric). */
static int
sim_once(sim *sp, sim_workspace *ws, const ir_module *m, const hw_model *hw,
         const sim_options *opt, int symmetric, int want_events, sim_result **out, di_error *err)
{
    sim s;
    ir_id entry = ir_module_entry(m);
    const ir_region *r;
    ctx top = {1, NULL, 1};
    int rc;

    memset(&s, 0, sizeof s);
    s.m = m;
    s.hw = hw;
    s.opt = opt;
    s.err = err;
    s.ndev = hw->ndevice;
    s.want_events = want_events;
    s.symmetric = symmetric;
    s.entry = entry;
    s.devs = di_xcalloc(s.ndev, sizeof *s.devs);
    for (uint32_t d = 0; d < s.ndev; d++) {
        s.devs[d].rep = (int32_t)d;
        s.devs[d].class_n = 1;
    }
    DI_GROW(&s.tlocs, &s.ctloc, 1);
    s.tlocs[0].dev = 0;
    s.tlocs[0].bytes = 0; /* instances without a location (instance 0, empty tuples) */
    s.ntloc = 1;
    s.tloc_off = di_xmalloc(m->ntype * sizeof *s.tloc_off);
    memset(s.tloc_off, 0xff, m->ntype * sizeof *s.tloc_off);
    s.tloc_n = di_xcalloc(m->ntype, sizeof *s.tloc_n);
    tables_take(&s, ws);
    if (s.cvalue < m->nvalue || s.vbase == NULL) {
        di_big_free(s.vbase, s.cvalue * sizeof *s.vbase);
        di_big_free(s.vrep, s.cvalue * sizeof *s.vrep);
        di_big_free(s.vuni, s.cvalue);
        di_big_free(s.vclass, s.cvalue);
        s.cvalue = m->nvalue ? m->nvalue : 1;
        s.vbase = di_big_xalloc(s.cvalue * sizeof *s.vbase);
        s.vrep = di_big_xalloc(s.cvalue * sizeof *s.vrep);
        s.vuni = di_big_xalloc(s.cvalue);
        s.vclass = di_big_xalloc(s.cvalue);
    } else {
        /* A workspace's tables hold the last run's values: clear what is read before written. */
        memset(s.vbase, 0, m->nvalue * sizeof *s.vbase);
        memset(s.vrep, 0, m->nvalue * sizeof *s.vrep);
        memset(s.vuni, 0, m->nvalue);
    }
    /* Most values have one instance: reserve that many up front. */
    inst_reserve(&s, (size_t)m->nvalue + 1);
    inst_new(&s, 1); /* instance 0 is reserved */
    classify(&s);

    r = &m->regions[entry];
    for (uint32_t a = 0; a < r->narg; a++) {
        ir_id v = r->args[a];
        rc = value_instances(&s, v, 1, NULL);
        if (rc)
            goto done;
        for (uint32_t l = 0; l < vnloc(&s, v); l++) {
            sim_inst *in = vinst(&s, v, 0, l);
            in->flags |= INST_PERSISTENT;
            if (in->cls == SIM_MEM_COMM)
                in->cls = SIM_MEM_ACTIVATIONS;
            /* What a device holds from the start is part of its history. */
            s.devs[in->dev].hist =
                mix64(s.devs[in->dev].hist, s.tlocs[in->loc].bytes << 3 | in->cls);
        }
    }
    rc = sim_region(&s, entry, &top);
    if (rc)
        goto done;
    r = &m->regions[entry];
    for (uint32_t i = 0; i < r->nresult; i++) {
        ir_id v = r->results[i];
        for (uint32_t k = 0; k < s.vrep[v]; k++)
            for (uint32_t l = 0; l < vnloc(&s, v); l++)
                vinst(&s, v, k, l)->flags |= INST_PERSISTENT;
    }
    rc = build_result(&s, out);
done:
    *sp = s;
    return rc;
}

int
sim_run(const ir_module *m, const hw_model *hw, const sim_options *opt, sim_result **out,
        sim_event **events, uint32_t *nevent, di_error *err)
{
    return sim_run_ws(NULL, m, hw, opt, out, events, nevent, err);
}

static int
run_ws(sim_workspace *ws, const ir_module *m, const hw_model *hw, const sim_options *opt,
       sim_result **out, sim_event **events, uint32_t *nevent, di_error *err)
{
    sim s;
    sim_options dflt;
    sim_workspace local;
    int rc, symmetric;

    *out = NULL;
    if (events) {
        *events = NULL;
        *nevent = 0;
    }
    if (opt == NULL) {
        sim_options_default(&dflt);
        opt = &dflt;
    }
    if (ir_module_entry(m) == 0)
        return di_error_set(err, DI_EINVAL, "the module has no function to simulate");
    if (hw->ndevice == 0)
        return di_error_set(err, DI_EINVAL, "hardware '%s' has no devices", hw->name);
    /* A trace shows every device's own events, so it is made without symmetry. */
    symmetric = !opt->no_symmetry && events == NULL;
    memset(&local, 0, sizeof local);
    if (ws == NULL)
        ws = &local; /* a rerun reuses the first run's tables */
    rc = sim_once(&s, ws, m, hw, opt, symmetric, events != NULL, out, err);
    if (s.broken) {
        sim_result_free(*out);
        *out = NULL;
        sim_fini(&s, ws);
        rc = sim_once(&s, ws, m, hw, opt, 0, events != NULL, out, err);
    }
    if (rc == 0 && events) {
        *events = s.events;
        *nevent = s.nevent;
        s.events = NULL;
    }
    sim_fini(&s, ws);
    ws_release(&local);
    if (rc != 0) {
        sim_result_free(*out);
        *out = NULL;
    }
    return rc;
}

/* The arguments of sim_run_ws, for its allocation scope. */
struct run_call {
    sim_workspace *ws;
    const ir_module *m;
    const hw_model *hw;
    const sim_options *opt;
    sim_result **out;
    sim_event **events;
    uint32_t *nevent;
    di_error *err;
    int returned; /* 0 if the scope failed out of the run */
};

static int
run_call_run(void *arg)
{
    struct run_call *c = arg;
    sim_workspace *w = c->ws;
    int rc;
    if (w) {
        /* The run takes the workspace's tables: if it fails, they go with its own. */
        di_scope_adopt(w->inst, w->cinst * sizeof *w->inst);
        di_scope_adopt(w->vbase, w->cvalue * sizeof *w->vbase);
        di_scope_adopt(w->vrep, w->cvalue * sizeof *w->vrep);
        di_scope_adopt(w->vuni, w->cvalue);
        di_scope_adopt(w->vclass, w->cvalue);
        di_scope_adopt(w->ev, w->cev * sizeof *w->ev);
        di_scope_adopt(w->tmp, w->ctmp * sizeof *w->tmp);
        di_scope_adopt(w->count, 0);
    }
    rc = run_ws(w, c->m, c->hw, c->opt, c->out, c->events, c->nevent, c->err);
    c->returned = 1;
    return rc;
}

/*
 * The simulation runs in an allocation scope: out-of-memory anywhere in it is
 * DI_ENOMEM, and the workspace comes back empty.
 */
int
sim_run_ws(sim_workspace *ws, const ir_module *m, const hw_model *hw, const sim_options *opt,
           sim_result **out, sim_event **events, uint32_t *nevent, di_error *err)
{
    struct run_call c = {ws, m, hw, opt, out, events, nevent, err, 0};
    int rc = di_scope_run(run_call_run, &c, err);
    if (!c.returned) {
        *out = NULL;
        if (events) {
            *events = NULL;
            *nevent = 0;
        }
        if (ws)
            memset(ws, 0, sizeof *ws);
    }
    return rc;
}

double
sim_op_time(const ir_module *m, ir_id op, const hw_model *hw, uint32_t device)
{
    sim s;
    di_error err;
    double t, flops;
    uint32_t flags;
    if (op == 0 || op >= m->nop || m->ops[op].kind == IR_OP_NONE || m->ops[op].kind >= IR_NOPKIND)
        return -1;
    flags = ir_opkind_info(m->ops[op].kind)->flags;
    if ((flags & (IR_OPF_COMM | IR_OPF_FREE | IR_OPF_REGION | IR_OPF_TERM)) ||
        device >= hw->ndevice)
        return 0;
    memset(&s, 0, sizeof s);
    s.m = m;
    s.hw = hw;
    s.err = &err;
    if (compute_time(&s, op, (int32_t)device, dtensor_scale(&s, op), &t, &flops) != 0)
        return -1;
    return t;
}

void
sim_result_free(sim_result *r)
{
    if (r == NULL)
        return;
    for (uint32_t i = 0; i < r->ndevice; i++)
        if (!r->devices[i].timeline_shared)
            free(r->devices[i].timeline);
    free(r->devices);
    free(r);
}
