/*
 * cost.c: the simulator's cost model. A compute op costs its roofline time
 * (FLOPs at the device's peak for its dtype times an efficiency, or bytes
 * at its memory bandwidth, whichever is longer, plus a launch overhead) or
 * a measured time for its signature (sched.c memoizes these prices per
 * signature at top level and per op inside bodies). A collective costs the
 * best (or the preset's) of ring, tree and hierarchical algorithms over its
 * group's links, or a measured table's time. sim_op_time exposes an op's time to
 * the transforms' stage balancing (through lib/xform/cost.c).
 */
#include "sim/sim_int.h"

#include <math.h>
#include <stdlib.h>

/* ---- the cost model ---- */

static int
is_gemm(int kind)
{
    return kind == IR_OP_MATMUL || kind == IR_OP_GEMM || kind == IR_OP_MATMULGRAD ||
           kind == IR_OP_FLASHATTN || kind == IR_OP_FLASHATTNGRAD;
}

/*
 * The dtype an op computes in: its first result's if that is a tensor,
 * unless that is not floating point and its first input is a tensor (a
 * comparison, an index): then the input's; f32 otherwise.
 */
ir_dtype
sim_op_dtype(const ir_module *m, ir_id op)
{
    const ir_op *o = &m->ops[op];
    ir_dtype dt = IR_F32;
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
    return dt;
}

/*
 * The peak rate an op of `kind` in dtype dt runs at on d: the dtype's, TF32's
 * for f32 GEMMs when asked (PyTorch's allow_tf32), the f32 rate for a float
 * dtype the device lists no rate for and for integer work (index arithmetic
 * runs on CUDA cores).
 */
static double
gemm_peak(const hw_device *d, int kind, ir_dtype dt, int tf32)
{
    double peak = d->flops[dt];
    if (tf32 && dt == IR_F32 && is_gemm(kind) && d->flops_tf32 > 0)
        peak = d->flops_tf32;
    if (!(peak > 0))
        peak = d->flops[IR_F32];
    return peak;
}

/*
 * Roofline: max(flops / (peak(dtype) * efficiency), bytes / (bandwidth *
 * elementwise_efficiency)) + launch. GEMMs reach max_efficiency *
 * f / (f + half_flops) of peak, other ops max_efficiency. A measured time
 * for the op's signature replaces the formula. An opaque op with no cost
 * rule costs its bytes at the memory bandwidth (ir_op_cost gives no FLOPs):
 * an estimate, refused under sim_options.strict.
 */
static int
compute_time(sim *s, ir_id op, int32_t dev, double scale, double *t, double *flops)
{
    const ir_module *m = s->m;
    const hw_device *d = hw_device_spec(s->hw, (uint32_t)dev);
    const ir_op *o = &m->ops[op];
    ir_cost c;
    double peak, eff, tc, tm;
    ir_dtype dt;

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
    if (s->opt && s->opt->strict && !ir_op_has_cost_rule(m, op)) {
        char sig[HW_SIGNATURE_MAX];
        hw_op_signature(m, op, sig, sizeof sig);
        return di_error_set(s->err, DI_ECOST,
                            "%s has no cost model: supply a measured time for "
                            "signature '%s' in an op-time calibration file",
                            ir_op_label(m, op).s, sig);
    }
    ir_op_cost(m, op, &c);
    dt = sim_op_dtype(m, op);
    peak = gemm_peak(d, o->kind, dt, s->opt && s->opt->tf32);
    if (c.flops > 0 && !(peak > 0))
        return di_error_set(s->err, DI_ECOST, "%s: device %d (%s) has no %s peak rate",
                            ir_op_label(m, op).s, dev, d->kind, ir_dtype_name(dt));
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

void
sim_group_describe(const sim *s, const int32_t *devs, uint32_t n, group_info *g)
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
double
sim_collective_time(const sim *s, int kind, const group_info *g, double bytes)
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

int
sim_cost_compute(sim *s, ir_id op, int32_t dev, double *t, double *flops)
{
    return compute_time(s, op, dev, dtensor_scale(s, op), t, flops);
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

int
sim_op_bound_terms(const hw_model *hw, uint32_t device, int kind, ir_dtype dt, int tf32,
                   sim_op_bound *b)
{
    const hw_device *d;
    double peak, eff, ew;
    uint32_t flags;
    memset(b, 0, sizeof *b);
    if (kind <= IR_OP_NONE || kind >= IR_NOPKIND || device >= hw->ndevice || hw->nop_time)
        return 0;
    flags = ir_opkind_info(kind)->flags;
    if (flags & (IR_OPF_COMM | IR_OPF_FREE | IR_OPF_REGION | IR_OPF_TERM))
        return 0;
    d = hw_device_spec(hw, device);
    peak = gemm_peak(d, kind, dt, tf32);
    eff = d->max_efficiency > 0 ? d->max_efficiency : 1.0;
    ew = d->elementwise_efficiency > 0 ? d->elementwise_efficiency : 1.0;
    if (peak > 0)
        b->per_flop = 1.0 / (peak * eff);
    if (is_gemm(kind) && d->half_flops > 0)
        b->flop_fixed = d->half_flops * b->per_flop;
    if (d->memory_bandwidth > 0)
        b->per_byte = 1.0 / (d->memory_bandwidth * ew);
    b->launch = d->launch_overhead;
    b->gemm = is_gemm(kind);
    return 1;
}

double
sim_collective_slope(const hw_model *hw, int kind, const int32_t *devs, uint32_t n)
{
    sim s;
    di_error err;
    group_info g;
    double big = 1e12;
    memset(&s, 0, sizeof s);
    s.hw = hw;
    s.err = &err;
    if (n <= 1)
        return 0;
    sim_group_describe(&s, devs, n, &g);
    /* A measured table prices the group as it says: no slope from the formulas. */
    if (hw_table_time(hw, kind, n, g.nodes > 1, 1.0) >= 0)
        return 0;
    /* The cheapest algorithm for large payloads has the least slope; latency terms cancel. */
    return (sim_collective_time(&s, kind, &g, 2 * big) - sim_collective_time(&s, kind, &g, big)) /
           big;
}
