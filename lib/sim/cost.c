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
 * Tile and wave quantization of one GEMM of `batch` independent M x N
 * outputs on a device of `sms` streaming multiprocessors. A GEMM kernel
 * (cuBLAS, CUTLASS) computes its output in tiles, one per thread block, and
 * runs them in waves of one tile per SM. For a tile shape Mt x Nt the
 * fraction of the device doing useful work is
 *
 *     tile quantization  M N / (ceil(M/Mt) Mt ceil(N/Nt) Nt)   (padding)
 *   x wave quantization  tiles / (ceil(tiles / sms) sms)       (idle SMs)
 *   x tile efficiency    min(1, (Mt Nt / (Mt + Nt)) / 64)
 *
 * with tiles = batch ceil(M/Mt) ceil(N/Nt); the last factor because a tile
 * loads (Mt + Nt) K operands for Mt Nt K multiply-adds: below 128 x 128
 * (intensity 64) a tile cannot feed the tensor cores. The library picks the
 * best tile of the usual set (as cuBLAS's heuristics pick among CUTLASS
 * configurations). NVIDIA, "Matrix Multiplication Background User's Guide"
 * (tile and wave quantization). Split-K (slicing K over more blocks when
 * the output is small) is not modelled: with it the calibration runs
 * (vTrain's single-node file) came out further from their measurements
 * (MAPE 9.61% against 8.47%), all too fast, so the libraries those runs
 * used did not split as freely as a model that always may.
 */
static double
gemm_quantization(double sms, double batch, double M, double N)
{
    static const double tiles[][2] = {{256, 128}, {128, 256}, {128, 128},
                                      {128, 64},  {64, 128},  {64, 64}};
    double best = 0;
    if (!(sms >= 1) || !(batch >= 1) || !(M >= 1) || !(N >= 1))
        return 1;
    for (size_t i = 0; i < sizeof tiles / sizeof tiles[0]; i++) {
        double mt = tiles[i][0], nt = tiles[i][1];
        double tm = ceil(M / mt), tn = ceil(N / nt), n = batch * tm * tn;
        double q = (M * N) / (tm * mt * tn * nt) * n / (ceil(n / sms) * sms) *
                   fmin(1.0, mt * nt / (mt + nt) / 64.0);
        if (q > best)
            best = q;
    }
    return best > 0 ? best : 1;
}

void
sim_gemm_dims_shape(const int64_t *dims, uint32_t rank, int fold, double *batch, double *rows,
                    double *cols)
{
    double n = 1, last, prev = 1;
    *batch = 1;
    *rows = 1;
    *cols = 1;
    for (uint32_t i = 0; i < rank; i++)
        n *= (double)dims[i];
    if (rank == 0 || !(n > 0))
        return;
    last = (double)dims[rank - 1];
    if (rank >= 2)
        prev = (double)dims[rank - 2];
    *cols = last;
    if (fold || rank < 2) {
        *rows = last > 0 ? n / last : 1;
    } else {
        *rows = prev;
        *batch = prev * last > 0 ? n / (prev * last) : 1;
    }
}

double
sim_gemm_quantization(const hw_model *hw, uint32_t device, double batch, double rows,
                      double cols)
{
    const hw_device *d = hw_device_spec(hw, device);
    return d->sms >= 1 ? gemm_quantization(d->sms, batch, rows, cols) : 1;
}

/* The output of a GEMM as `batch` matrices of rows x cols (2-D weights fold leading dims). */
static void
gemm_output_shape(const ir_module *m, ir_id v, int fold, double *batch, double *rows,
                  double *cols)
{
    const ir_type *t = &m->types[m->values[v].type];
    *batch = *rows = *cols = 1;
    if (t->kind == IR_TYPE_TENSOR)
        sim_gemm_dims_shape(&m->ints[t->dims], t->rank, fold, batch, rows, cols);
}

/*
 * The quantization factor of a GEMM op on dev (1 for other ops and on
 * devices without an SM count): MatMul and Gemm have one output; MatMulGrad
 * computes two GEMMs of equal FLOPs (dA and dB), whose times add, so its
 * factor is their harmonic mean. A GEMM with a 2-D second operand (a
 * weight) folds the first operand's leading dims into M, as PyTorch's
 * linear layers do.
 */
static double
gemm_shape_efficiency(const sim *s, ir_id op, int32_t dev)
{
    const ir_module *m = s->m;
    const ir_op *o = &m->ops[op];
    const hw_device *d = hw_device_spec(s->hw, (uint32_t)dev);
    double inv = 0;
    int fold;
    if (!(d->sms >= 1) || o->ninput < 2 || o->noutput == 0 ||
        (o->kind != IR_OP_MATMUL && o->kind != IR_OP_GEMM && o->kind != IR_OP_MATMULGRAD))
        return 1;
    fold = m->types[m->values[m->refs[o->inputs + 1]].type].rank == 2;
    for (uint32_t i = 0; i < o->noutput; i++) {
        double b, r, col;
        gemm_output_shape(m, o->outputs + i, fold, &b, &r, &col);
        inv += 1.0 / gemm_quantization(d->sms, b, r, col);
    }
    return o->noutput / inv;
}

double
sim_op_gemm_efficiency(const sim *s, ir_id op, int32_t dev)
{
    return gemm_shape_efficiency(s, op, dev);
}

/*
 * Roofline: max((f / q + half_flops) / (peak(dtype) max_efficiency) +
 * special / special_rate, bytes / (bandwidth elementwise_efficiency)) +
 * launch, where q is a GEMM's tile and wave quantization (1 for other ops and
 * on devices without an SM count) and half_flops applies to GEMMs only: a GEMM
 * of f FLOPs reaches max_efficiency f / (f + half_flops) of peak before
 * quantization. Fused attention's exponentials (special) run on the special
 * function units after the products whose scores they read, in each warp
 * (FlashAttention-2's kernels: its softmax does not overlap its GEMMs), so
 * their time adds to the products'. A measured time for the op's signature
 * replaces the formula. An opaque op with no cost rule costs its bytes at the
 * memory bandwidth (ir_op_cost gives no FLOPs): an estimate, refused under
 * sim_options.strict.
 */
static int
compute_time(sim *s, ir_id op, int32_t dev, double scale, double *t, double *flops)
{
    const ir_module *m = s->m;
    const ir_op *o = &m->ops[op];
    ir_cost c;

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
    c.flops /= scale;
    c.special /= scale;
    c.bytes_read /= scale;
    c.bytes_write /= scale;
    *flops = c.flops;
    return sim_cost_roofline(s, dev, o->kind, sim_op_dtype(m, op),
                             gemm_shape_efficiency(s, op, dev), &c, t);
}

int
sim_cost_roofline(sim *s, int32_t dev, int kind, ir_dtype dt, double q, ir_cost *c, double *t)
{
    const hw_device *d = hw_device_spec(s->hw, (uint32_t)dev);
    double peak = gemm_peak(d, kind, dt, s->opt && s->opt->tf32), eff, tc, tm;
    if (c->flops > 0 && !(peak > 0))
        return di_error_set(s->err, DI_ECOST, "%s: device %d (%s) has no %s peak rate",
                            ir_opkind_info(kind)->name, dev, d->kind, ir_dtype_name(dt));
    eff = d->max_efficiency > 0 ? d->max_efficiency : 1.0;
    /*
     * (f / q + half_flops) / (peak max_efficiency): the curve's fixed cost
     * (f / (f + half_flops) of max_efficiency) plus the work the GEMM's tiles
     * and waves really occupy the device for.
     */
    tc = 0;
    if (c->flops > 0)
        tc = (c->flops / q + (is_gemm(kind) && d->half_flops > 0 ? d->half_flops : 0)) /
             (peak * eff);
    if (c->special > 0 && d->special_rate > 0)
        tc += c->special / d->special_rate;
    tm = 0;
    if (c->bytes_read + c->bytes_write > 0) {
        double ew = d->elementwise_efficiency > 0 ? d->elementwise_efficiency : 1.0;
        if (!(d->memory_bandwidth > 0))
            return di_error_set(s->err, DI_ECOST, "device %d (%s) has no memory bandwidth", dev,
                                d->kind);
        tm = (c->bytes_read + c->bytes_write) / (d->memory_bandwidth * ew);
    }
    *t = (tc > tm ? tc : tm) + d->launch_overhead;
    return 0;
}

static int
cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
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
    /*
     * The nodes and the most members on one: runs of equal nodes in node
     * order. Groups list their devices in ascending order almost always (a
     * data-parallel group of 1,024 devices is described once per collective,
     * so no quadratic scan); otherwise a sorted copy of their nodes.
     */
    {
        uint32_t prev = 0, run = 0, *sorted = NULL;
        for (uint32_t i = 1; i < n && sorted == NULL; i++)
            if (hw_node_of(hw, (uint32_t)devs[i]) < hw_node_of(hw, (uint32_t)devs[i - 1])) {
                sorted = di_xmalloc(n * sizeof *sorted);
                for (uint32_t j = 0; j < n; j++)
                    sorted[j] = hw_node_of(hw, (uint32_t)devs[j]);
                qsort(sorted, n, sizeof *sorted, cmp_u32);
            }
        for (uint32_t i = 0; i < n; i++) {
            uint32_t node = sorted ? sorted[i] : hw_node_of(hw, (uint32_t)devs[i]);
            run = i > 0 && node == prev ? run + 1 : 1;
            g->nodes += run == 1;
            if (run > g->per_node)
                g->per_node = run;
            prev = node;
        }
        di_free(sorted);
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
 *   shift (one ring step): S/B + alpha
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
        if (spans && g->per_node > 1 && (kind == IR_OP_ALLGATHER || kind == IR_OP_REDUCESCATTER)) {
            /*
             * Half of the all-reduce's hierarchy: the devices of one local
             * rank exchange their shards over their own inter-node links
             * (each node's gp links carry a gp-th of the bytes each), and
             * each node all-gathers the blocks inside it (a reduce-scatter
             * the other way round), so that reduce-scatter + all-gather
             * costs the all-reduce. Until 2026-12-07 every device carried
             * the whole (N - 1) / N of the bytes over its own inter-node
             * link, gp times the all-reduce's share.
             */
            uint32_t gp = g->per_node, N = g->nodes;
            hier = ring_time((double)(N - 1) / N, bytes / gp, N - 1, &g->inter, sl) +
                   ring_time((double)(gp - 1) / gp, bytes, gp - 1, &g->intra, sl);
        } else if (spans && g->per_node > 1 && kind != IR_OP_ALLTOALL) {
            /* Rooted: the root's own inter-node link carries the other nodes' share. */
            uint32_t gp = g->per_node, N = g->nodes;
            hier = ring_time((double)(gp - 1) / gp, bytes / N, gp - 1, &g->intra, sl) +
                   ring_time((double)(N - 1) / N, bytes, N - 1, &g->inter, sl);
        }
        break;
    case IR_OP_SHIFT:
        /* One ring step: every member sends its tensor to the next at once. */
        ring = tree = bytes / flat->bandwidth + flat->latency + sl;
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
    if (d->special_rate > 0)
        b->per_special = 1.0 / d->special_rate;
    b->gemm = is_gemm(kind);
    return 1;
}

/* Mean absolute percentage error of link l on the intra-node all-reduce tables of hw. */
static double
intra_link_error(const hw_model *formula, const hw_model *hw, const hw_link *l, uint32_t *npt)
{
    sim s;
    di_error err;
    double sum = 0;
    uint32_t n = 0;
    memset(&s, 0, sizeof s);
    s.hw = formula;
    s.err = &err;
    for (uint32_t i = 0; i < hw->ntable; i++) {
        const hw_coll_table *t = &hw->tables[i];
        group_info g;
        if (t->kind != IR_OP_ALLREDUCE || t->inter_node || t->group < 2)
            continue;
        g.n = t->group;
        g.nodes = 1;
        g.per_node = t->group;
        g.intra = *l;
        g.inter = formula->inter_node;
        for (uint32_t k = 0; k < t->npoint; k++, n++)
            sum += fabs(sim_collective_time(&s, IR_OP_ALLREDUCE, &g, t->bytes[k]) - t->seconds[k]) /
                   t->seconds[k];
    }
    *npt = n;
    return n ? 100 * sum / n : 0;
}

uint32_t
sim_fit_intra_link(const hw_model *hw, hw_link *out, double *mape)
{
    hw_model formula = *hw; /* the formulas alone: no tables */
    hw_link best = hw->intra_node, l;
    double be = INFINITY, bw0 = 1e9, bw1 = 2e12, lat0 = 0, lat1 = 50e-6;
    uint32_t n;
    formula.ntable = 0;
    formula.tables = NULL;
    intra_link_error(&formula, hw, &best, &n);
    if (n == 0)
        return 0;
    /*
     * A fine grid over bandwidth (log-spaced, 1 GB/s to 2 TB/s, 120 steps)
     * and latency (0 to 50 us, 200 steps), then four finer grids around the
     * best pair: about 31,000 evaluations (a second), deterministic, and
     * independent of hw's own link. The error has several basins (the
     * algorithms' crossovers move with the latency): a coarse first grid
     * lands in the wrong one.
     */
    for (int round = 0; round < 5; round++) {
        int nb = round ? 40 : 120, nl = round ? 40 : 200;
        for (int i = 0; i <= nb; i++)
            for (int j = 0; j <= nl; j++) {
                double e;
                uint32_t m;
                l.bandwidth = bw0 * pow(bw1 / bw0, (double)i / nb);
                l.latency = lat0 + (lat1 - lat0) * j / nl;
                e = intra_link_error(&formula, hw, &l, &m);
                if (e < be) {
                    be = e;
                    best = l;
                }
            }
        {
            /* The next grid spans two steps of this one on each side of the best. */
            double step = pow(bw1 / bw0, 1.0 / nb), span = (lat1 - lat0) * 2 / nl;
            bw0 = best.bandwidth / (step * step);
            bw1 = best.bandwidth * step * step;
            lat0 = best.latency > span ? best.latency - span : 0;
            lat1 = best.latency + span;
        }
    }
    *out = best;
    *mape = be;
    return n;
}

/*
 * Sets up s and g for the formulas over devices devs[0..n): 0 where they do not price the
 * group (one device, or a measured table for it).
 */
static int
formula_group(const hw_model *hw, int kind, const int32_t *devs, uint32_t n, sim *s,
              di_error *err, group_info *g)
{
    memset(s, 0, sizeof *s);
    s->hw = hw;
    s->err = err;
    if (n <= 1)
        return 0;
    sim_group_describe(s, devs, n, g);
    return hw_table_time(hw, kind, n, g->nodes > 1, 1.0) < 0;
}

double
sim_collective_slope(const hw_model *hw, int kind, const int32_t *devs, uint32_t n)
{
    sim s;
    di_error err;
    group_info g;
    double big = 1e12;
    /* A measured table prices the group as it says: no slope from the formulas. */
    if (!formula_group(hw, kind, devs, n, &s, &err, &g))
        return 0;
    /* The cheapest algorithm for large payloads has the least slope; latency terms cancel. */
    return (sim_collective_time(&s, kind, &g, 2 * big) - sim_collective_time(&s, kind, &g, big)) /
           big;
}

double
sim_collective_latency(const hw_model *hw, int kind, const int32_t *devs, uint32_t n)
{
    sim s;
    di_error err;
    group_info g;
    if (!formula_group(hw, kind, devs, n, &s, &err, &g))
        return 0;
    /* Every algorithm's time is its latency terms plus its slope times the payload. */
    return sim_collective_time(&s, kind, &g, 0);
}
