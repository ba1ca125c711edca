/*
 * sim.c: the event simulator's driver. It walks the entry function in
 * program order (list scheduling, as CUDA streams execute work in issue
 * order; sched.c) and gives every op a start and end time on the streams of
 * the devices it runs on:
 *
 *   - a compute op starts when its inputs are ready on its device and the
 *     device's compute stream is free;
 *   - a send occupies the sender's send stream and the receiver's receive
 *     stream (so two sends from one device serialize);
 *   - a collective starts when every participant is ready and its collective
 *     stream is free, and occupies that stream on every participant
 *     (collectives and point-to-point transfers have streams of their own,
 *     as NCCL collectives and pipeline sends run on their own streams);
 *   - transfers and collectives also hold the link level they cross (intra-
 *     or inter-node) on every device involved, and wait until it is idle:
 *     that is where link contention is modelled;
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
 * and returned values (memory.c).
 *
 * This file runs a simulation (sim_once, again without symmetry when
 * symmetry broke) and assembles the per-device results.
 */
#include "sim/sim_int.h"

#include <stdio.h>
#include <stdlib.h>

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
    di_free(sr);
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
    di_free(comm);
    di_free(all);
    sim_device_memory(s, d, dr);
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
    if (sim_build_memory(s, step) != 0)
        goto cancelled;
    for (uint32_t d = 0; d < s->ndev; d++)
        if (s->devs[d].rep == (int32_t)d && device_active(s, (int32_t)d)) {
            if (sim_cancelled(s)) { /* each device's scan reads its events: polled between */
                di_error_set(s->err, DI_ECANCELLED, "simulation cancelled");
                goto cancelled;
            }
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
    di_free(per);
    di_free(have);
    r->step_time_s = step;
    r->ops = s->nops;
    r->peak_flops = peak_sum;
    r->hfu = (step > 0 && peak_sum > 0) ? r->flops / (step * peak_sum) : 0;
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
cancelled: /* the error is set */
    for (uint32_t d = 0; d < s->ndev; d++)
        if (have[d])
            di_free(per[d].timeline);
    di_free(per);
    di_free(have);
    di_free(r);
    return DI_ECANCELLED;
}

static void
sim_fini(sim *s, sim_workspace *ws)
{
    if (s->devs)
        for (uint32_t d = 0; d < s->ndev; d++) {
            for (int st = 0; st < NSTREAM; st++)
                di_free(s->devs[d].busy[st].v);
            for (int l = 0; l < 2; l++)
                for (int x = 0; x < 2; x++)
                    di_free(s->devs[d].link[l][x].v);
        }
    sim_tables_give(s, ws);
    if (s->memo)
        di_big_free(s->memo, 2 * s->m->nop * sizeof *s->memo);
    di_big_free(s->opbits, s->m->nop);
    di_big_free(s->opattr, s->m->nop * sizeof *s->opattr);
    di_free(s->sigs);
    sim_fuse_free(s);
    di_free(s->grps);
    di_free(s->grpdev);
    di_free(s->scratch);
    di_free(s->done);
    di_free(s->devs);
    di_free(s->used);
    di_free(s->tloc_off);
    di_free(s->tloc_n);
    di_free(s->tlocs);
    di_free(s->tsel);
}

/* String s's id in m (every key and string attribute is interned), 0 if m has none. */
static ir_id
str_id(const ir_module *m, const char *s)
{
    return ir_str_find(m, s, strlen(s));
}

/* One simulation; with symmetric set it may stop with s->broken (see pmap_symmetric). */
static int
sim_once(sim *sp, sim_workspace *ws, const ir_module *m, const hw_model *hw,
         const sim_options *opt, int symmetric, const sim_trace_sink *trace, sim_result **out,
         di_error *err)
{
    sim s;
    ir_id entry = ir_module_entry(m);
    const ir_region *r;
    ctx top = {1, NULL, 1};
    int rc;

    memset(&s, 0, sizeof s);
    s.m = m;
    s.key_mesh = str_id(m, "mesh");
    s.key_devices = str_id(m, "devices");
    s.key_index = str_id(m, "index");
    s.key_mesh_axes = str_id(m, "mesh_axes");
    s.key_mem = str_id(m, "dist.mem");
    s.key_accumulate = str_id(m, "dist.accumulate");
    s.key_phase = str_id(m, "dist.phase");
    s.key_transient = str_id(m, "dist.transient");
    s.key_reduction = str_id(m, "dist.reduction_stream");
    s.key_in_place = str_id(m, "dist.in_place");
    s.str_backward = str_id(m, "backward");
    s.str_optimizer = str_id(m, "optimizer");
    s.hw = hw;
    s.opt = opt;
    s.err = err;
    s.ndev = hw->ndevice;
    s.trace = trace;
    if (trace && trace->select) {
        s.tsel = di_xmalloc(s.ndev * sizeof *s.tsel);
        for (uint32_t d = 0; d < s.ndev; d++)
            if (trace->select[d])
                s.tsel[s.ntsel++] = (int32_t)d;
    }
    s.symmetric = symmetric;
    s.entry = entry;
    /* Measured op times are per (unfused) op: with them, nothing fuses. */
    if (opt && opt->fuse && !hw->nop_time)
        sim_fuse_plan(&s);
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
    sim_tables_take(&s, ws);
    if (s.cvalue < m->nvalue || s.vbase == NULL) {
        /*
         * Grown in place and by half at least, so that a workspace serving
         * modules of growing sizes faults only the new pages, and rarely.
         */
        uint32_t cap = (uint32_t)sim_grown_cap(s.cvalue, m->nvalue ? m->nvalue : 1);
        s.vbase = di_big_xrealloc(s.vbase, s.cvalue * sizeof *s.vbase, cap * sizeof *s.vbase);
        s.vrep = di_big_xrealloc(s.vrep, s.cvalue * sizeof *s.vrep, cap * sizeof *s.vrep);
        s.vuni = di_big_xrealloc(s.vuni, s.cvalue, cap);
        s.vclass = di_big_xrealloc(s.vclass, s.cvalue, cap);
        s.cvalue = cap;
    }
    /* A workspace's tables hold the last run's values: clear what is read before written. */
    memset(s.vbase, 0, m->nvalue * sizeof *s.vbase);
    memset(s.vrep, 0, m->nvalue * sizeof *s.vrep);
    memset(s.vuni, 0, m->nvalue);
    /* Most values have one instance: reserve that many up front. */
    sim_inst_reserve(&s, (size_t)m->nvalue + 1);
    sim_inst_new(&s, 1); /* instance 0 is reserved */
    sim_classify(&s);

    r = &m->regions[entry];
    for (uint32_t a = 0; a < r->narg; a++) {
        ir_id v = r->args[a];
        rc = sim_value_instances(&s, v, 1, NULL);
        if (rc)
            goto done;
        /*
         * Every instance of an argument is ready at 0 and no op writes it again
         * (results are new instances or aliases): pmap_symmetric need not scan
         * them, a pass over every device's copy of every weight (7% of the time
         * of gpt3-175b's candidates with dp 64, tp 8, pp 2 and 4 or 6 microbatches).
         */
        s.vuni[v] |= VF_SAME;
        for (uint32_t l = 0; l < vnloc(&s, v); l++) {
            sim_inst *in = vinst(&s, v, 0, l);
            in->flags |= INST_PERSISTENT;
            if (in->cls == SIM_MEM_COMM)
                in->cls = SIM_MEM_ACTIVATIONS;
            /* What a device holds from the start is part of its history. */
            s.devs[in->dev].hist =
                sim_hash_combine(s.devs[in->dev].hist, s.tlocs[in->loc].bytes << 3 | in->cls);
        }
    }
    s.arg_end = s.ninst;
    rc = sim_region(&s, entry, &top);
    if (rc)
        goto done;
    r = &m->regions[entry];
    for (uint32_t i = 0; i < r->nresult; i++) {
        ir_id v = r->results[i];
        if (s.vuni[v] & VF_UNI) { /* one instance for all its locations */
            s.inst[s.vbase[v]].flags |= INST_PERSISTENT;
            continue;
        }
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

/* sim_run's array of events, as a trace sink. */
typedef struct event_array {
    sim_event *v;
    uint32_t n, cap;
} event_array;

static int
array_restart(void *arg)
{
    ((event_array *)arg)->n = 0;
    return 0;
}

static void
array_event(void *arg, const sim_event *e)
{
    event_array *a = arg;
    DI_GROW(&a->v, &a->cap, a->n + 1);
    a->v[a->n++] = *e;
}

static int
run_ws(sim_workspace *ws, const ir_module *m, const hw_model *hw, const sim_options *opt,
       sim_result **out, sim_event **events, uint32_t *nevent, di_error *err)
{
    sim s;
    sim_options dflt;
    sim_workspace local;
    event_array arr = {NULL, 0, 0};
    sim_trace_sink asink = {NULL, &arr, array_restart, array_event};
    const sim_trace_sink *trace;
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
    trace = events ? &asink : opt->trace;
    /*
     * A trace of every device shows each device's own events, so it is made
     * without symmetry; one of selected devices keeps it (record_event).
     */
    symmetric = !opt->no_symmetry && (trace == NULL || trace->select != NULL);
    memset(&local, 0, sizeof local);
    if (ws == NULL)
        ws = &local; /* a rerun reuses the first run's tables */
    rc = sim_once(&s, ws, m, hw, opt, symmetric, trace, out, err);
    if (s.broken) {
        sim_result_free(*out);
        *out = NULL;
        sim_fini(&s, ws);
        if (trace && (rc = trace->restart(trace->ctx)) != 0) {
            /* s is finished already: nothing more to release but the events. */
            di_free(arr.v);
            sim_workspace_release(&local);
            return di_error_set(err, rc, "cannot restart the trace");
        }
        rc = sim_once(&s, ws, m, hw, opt, 0, trace, out, err);
    }
    if (rc == 0) {
        sim_settings *st = &(*out)->settings;
        snprintf(st->version, sizeof st->version, "%s", SIM_VERSION);
        snprintf(st->hardware, sizeof st->hardware, "%s", hw->name);
        st->have_options = 1;
        st->fuse = opt->fuse != 0;
        st->tf32 = opt->tf32 != 0;
        st->no_overlap = opt->no_overlap != 0;
        st->strict = opt->strict != 0;
        st->no_grad_accum_fusion = opt->fuse && opt->no_grad_accum_fusion;
    }
    if (rc == 0 && events) {
        *events = arr.v;
        *nevent = arr.n;
        arr.v = NULL;
    }
    di_free(arr.v);
    sim_fini(&s, ws);
    sim_workspace_release(&local);
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

void
sim_result_free(sim_result *r)
{
    if (r == NULL)
        return;
    for (uint32_t i = 0; i < r->ndevice; i++)
        if (!r->devices[i].timeline_shared)
            di_free(r->devices[i].timeline);
    di_free(r->devices);
    di_free(r->settings.strategy);
    di_free(r);
}

void
sim_result_set_inputs(sim_result *r, const char *strategy, const di_hash *hw)
{
    di_free(r->settings.strategy);
    r->settings.strategy = strategy ? di_xstrdup(strategy) : NULL;
    if (hw != NULL)
        di_hash_hex(hw, r->settings.hardware_hash);
    else
        r->settings.hardware_hash[0] = '\0';
}
