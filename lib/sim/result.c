/*
 * result.c: the forms of a simulation result: the JSON object of
 * `distir simulate --json`, the human-readable table, the protobuf message
 * distir.v1.SimResult (the daemon's wire and cache form), and the Chrome
 * trace-event file for Perfetto and chrome://tracing.
 *
 * Doubles are written in the shortest form that reads back bit-identical,
 * so JSON from the daemon and from an in-process run compare byte for byte.
 */
#include "sim/sim.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/pb.h"
#include "distir.pb-c.h"

static void
json_key(di_buf *b, const char *key)
{
    di_buf_json_str(b, key);
    di_buf_putc(b, ':');
}

/*
 * A number of a result: shortest round-trip form, with negative zero written
 * as 0 (the protobuf form cannot tell them apart: proto3 leaves zeros out).
 */
static void
json_num(di_buf *b, double v)
{
    di_buf_double(b, v == 0 ? 0.0 : v);
}

static void
json_double(di_buf *b, const char *key, double v)
{
    json_key(b, key);
    json_num(b, v);
}

static void
json_u64(di_buf *b, const char *key, uint64_t v)
{
    json_key(b, key);
    di_buf_printf(b, "%" PRIu64, v);
}

static int
same_timeline(const sim_device_result *a, const sim_device_result *b)
{
    return a->ntimeline == b->ntimeline &&
           (a->timeline == b->timeline ||
            memcmp(a->timeline, b->timeline, a->ntimeline * sizeof *a->timeline) == 0);
}

/* Group of device i's timeline: joins the first device with the same content, or starts one. */
static uint32_t
content_root(const sim_result *r, uint32_t *tab, uint32_t cap, uint32_t i)
{
    const sim_device_result *d = &r->devices[i];
    uint32_t h = (uint32_t)di_siphash(d->timeline, d->ntimeline * sizeof *d->timeline, 0, 0) &
                 (cap - 1);
    for (; tab[h] != UINT32_MAX; h = (h + 1) & (cap - 1))
        if (same_timeline(&r->devices[tab[h]], d))
            return tab[h];
    tab[h] = i;
    return i;
}

/*
 * For each device, the index of the first device with an identical
 * (non-empty) timeline, or its own index. Both serialized forms write an
 * identical timeline once and name it from the other devices, by content,
 * so that they do not depend on how the result was computed (a symmetric
 * representative's shared timeline or equal ones simulated apart). Equal
 * timelines are found by a hash of their bytes, then compared.
 */
static uint32_t *
timeline_refs(const sim_result *r)
{
    uint32_t n = r->ndevice, cap = 16, *ref = di_xmalloc((n ? n : 1) * sizeof *ref), *tab, *ptab;
    uint32_t *root = di_xmalloc((n ? n : 1) * sizeof *root);
    while (cap < 2 * n)
        cap *= 2;
    tab = di_xmalloc(cap * sizeof *tab);
    ptab = di_xmalloc(cap * sizeof *ptab);
    memset(tab, 0xff, cap * sizeof *tab);
    memset(ptab, 0xff, cap * sizeof *ptab);
    /*
     * Timelines of their own: grouped by content. Shared ones (the same
     * storage as an owner's) join their owner's group by address, which
     * saves hashing a copy; only the grouping, never an address, reaches
     * the output.
     */
    for (uint32_t i = 0; i < n; i++)
        root[i] = i;
    for (int pass = 0; pass < 2; pass++)
        for (uint32_t i = 0; i < n; i++) {
            const sim_device_result *d = &r->devices[i];
            uint32_t h;
            if (d->ntimeline == 0 || d->timeline == NULL || (d->timeline_shared != 0) != pass)
                continue;
            h = (uint32_t)(((uintptr_t)d->timeline >> 4) * 0x9e3779b97f4a7c15ull >> 32) &
                (cap - 1);
            for (; ptab[h] != UINT32_MAX; h = (h + 1) & (cap - 1))
                if (r->devices[ptab[h]].timeline == d->timeline)
                    break;
            if (ptab[h] != UINT32_MAX) {
                root[i] = root[ptab[h]];
                continue;
            }
            root[i] = content_root(r, tab, cap, i);
            ptab[h] = i;
        }
    /* Each group is written at its first device. */
    for (uint32_t i = 0; i < n; i++)
        ref[i] = UINT32_MAX;
    for (uint32_t i = 0; i < n; i++)
        if (ref[root[i]] == UINT32_MAX)
            ref[root[i]] = i;
    for (uint32_t i = 0; i < n; i++)
        ref[i] = r->devices[i].ntimeline && r->devices[i].timeline ? ref[root[i]] : i;
    di_free(tab);
    di_free(ptab);
    di_free(root);
    return ref;
}

char *
sim_result_to_json(const sim_result *r)
{
    di_buf b;
    uint32_t *ref = timeline_refs(r);
    di_buf_init(&b);
    di_buf_putc(&b, '{');
    json_double(&b, "step_time_s", r->step_time_s);
    di_buf_putc(&b, ',');
    json_u64(&b, "peak_memory_bytes", r->peak_memory_bytes);
    di_buf_putc(&b, ',');
    json_double(&b, "flops", r->flops);
    di_buf_putc(&b, ',');
    json_double(&b, "peak_flops", r->peak_flops);
    di_buf_putc(&b, ',');
    json_double(&b, "hfu", r->hfu);
    di_buf_putc(&b, ',');
    json_double(&b, "model_flops", r->model_flops);
    di_buf_putc(&b, ',');
    json_double(&b, "mfu", r->mfu);
    di_buf_putc(&b, ',');
    json_double(&b, "tokens", r->tokens);
    di_buf_putc(&b, ',');
    json_double(&b, "tokens_per_s", r->tokens_per_s);
    di_buf_putc(&b, ',');
    json_double(&b, "bubble_fraction", r->bubble_fraction);
    di_buf_putc(&b, ',');
    json_u64(&b, "ops", r->ops);
    di_buf_putc(&b, ',');
    json_key(&b, "simulator_version");
    di_buf_json_str(&b, SIM_VERSION);
    di_buf_puts(&b, ",\"devices\":[");
    for (uint32_t i = 0; i < r->ndevice; i++) {
        const sim_device_result *d = &r->devices[i];
        if (i)
            di_buf_putc(&b, ',');
        di_buf_printf(&b, "{\"id\":%d,", d->id);
        json_double(&b, "busy_s", d->busy_s);
        di_buf_putc(&b, ',');
        json_double(&b, "compute_s", d->compute_s);
        di_buf_putc(&b, ',');
        json_double(&b, "comm_s", d->comm_s);
        di_buf_putc(&b, ',');
        json_double(&b, "exposed_comm_s", d->exposed_comm_s);
        di_buf_putc(&b, ',');
        json_double(&b, "idle_s", d->idle_s);
        di_buf_putc(&b, ',');
        json_double(&b, "flops", d->flops);
        di_buf_putc(&b, ',');
        json_u64(&b, "peak_memory_bytes", d->peak_memory_bytes);
        di_buf_putc(&b, ',');
        json_double(&b, "peak_time_s", d->peak_time_s);
        di_buf_putc(&b, ',');
        json_u64(&b, "capacity_bytes", d->capacity_bytes);
        di_buf_printf(&b, ",\"oom\":%s,", d->oom ? "true" : "false");
        json_u64(&b, "oom_by_bytes", d->oom_by_bytes);
        di_buf_puts(&b, ",\"peak_by_class\":{");
        for (int c = 0; c < SIM_NMEMCLASS; c++) {
            if (c)
                di_buf_putc(&b, ',');
            json_u64(&b, sim_memclass_name(c), d->peak_by_class[c]);
        }
        if (ref[i] != i) {
            /* The same timeline as an earlier device's: named, not repeated. */
            di_buf_printf(&b, "},\"timeline_same_as\":%d}", r->devices[ref[i]].id);
            continue;
        }
        di_buf_puts(&b, "},\"timeline\":[");
        for (uint32_t t = 0; t < d->ntimeline; t++) {
            const sim_mempoint *p = &d->timeline[t];
            if (t)
                di_buf_putc(&b, ',');
            di_buf_putc(&b, '[');
            json_num(&b, p->time);
            di_buf_printf(&b, ",%" PRIu64 "]", p->bytes);
        }
        di_buf_puts(&b, "]}");
    }
    di_buf_puts(&b, "]}");
    di_free(ref);
    return di_buf_take(&b, NULL);
}

void
sim_format_bytes(char *out, size_t n, uint64_t v)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    double x = (double)v;
    int u = 0;
    while (x >= 1024 && u < 5) {
        x /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(out, n, "%" PRIu64 " B", v);
    else
        snprintf(out, n, "%.2f %s", x, units[u]);
}

void
sim_format_time(char *out, size_t n, double s)
{
    if (s >= 1)
        snprintf(out, n, "%.4f s", s);
    else if (s >= 1e-3)
        snprintf(out, n, "%.4f ms", s * 1e3);
    else
        snprintf(out, n, "%.3f us", s * 1e6);
}

void
sim_result_summary(const sim_result *r, di_buf *b)
{
    char t[32], m1[32], m2[32];
    const sim_device_result *peak = NULL, *exposed = NULL;
    for (uint32_t i = 0; i < r->ndevice; i++) {
        const sim_device_result *d = &r->devices[i];
        if (peak == NULL || d->peak_memory_bytes > peak->peak_memory_bytes)
            peak = d;
        if (exposed == NULL || d->exposed_comm_s > exposed->exposed_comm_s)
            exposed = d;
    }
    sim_format_time(t, sizeof t, r->step_time_s);
    di_buf_printf(b, "step time        %s\n", t);
    if (r->tokens_per_s > 0 && r->ndevice)
        di_buf_printf(b, "tokens/s         %.6g (%.6g per device)\n", r->tokens_per_s,
                      r->tokens_per_s / r->ndevice);
    if (r->model_flops > 0)
        di_buf_printf(b, "MFU              %.2f%% (model FLOPs, 6N per token + attention: %.6g)\n",
                      r->mfu * 100, r->model_flops);
    di_buf_printf(b, "HFU              %.2f%% (hardware FLOPs, recomputation included: %.6g)\n",
                  r->hfu * 100, r->flops);
    di_buf_printf(b, "bubble fraction  %.2f%% (compute idle: bubbles, exposed communication)\n",
                  r->bubble_fraction * 100);
    if (exposed != NULL) {
        sim_format_time(t, sizeof t, exposed->exposed_comm_s);
        di_buf_printf(b, "exposed comm     %s (most on device %d)\n", t, exposed->id);
    }
    if (peak != NULL) {
        sim_format_bytes(m1, sizeof m1, peak->peak_memory_bytes);
        sim_format_bytes(m2, sizeof m2, peak->capacity_bytes);
        di_buf_printf(b, "peak memory      %s of %s (%.1f%%, device %d)%s\n", m1, m2,
                      peak->capacity_bytes ? 100.0 * (double)peak->peak_memory_bytes /
                                                 (double)peak->capacity_bytes
                                           : 0.0,
                      peak->id, peak->oom ? "  OUT OF MEMORY" : "");
    }
    di_buf_printf(b, "ops simulated    %" PRIu64 "\n", r->ops);
}

void
sim_result_stage_stats(const sim_result *r, uint32_t nstage, const uint32_t *stage_of,
                       sim_stage *out)
{
    memset(out, 0, nstage * sizeof *out);
    for (uint32_t i = 0; i < r->ndevice; i++) {
        const sim_device_result *d = &r->devices[i];
        sim_stage *g;
        if (stage_of[i] >= nstage)
            continue;
        g = &out[stage_of[i]];
        g->devices++;
        g->compute_s += d->compute_s;
        g->exposed_comm_s += d->exposed_comm_s;
        g->idle_s += d->idle_s;
        g->flops += d->flops;
        if (g->peak == NULL || d->peak_memory_bytes > g->peak->peak_memory_bytes)
            g->peak = d;
    }
}

void
sim_result_stages(const sim_result *r, uint32_t nstage, const uint32_t *stage_of,
                  const uint32_t *layers, di_buf *b)
{
    char t1[32], t2[32], t3[32], m1[32], m2[32], m3[32], m4[32], m5[32];
    sim_stage *st = di_xmalloc((nstage ? nstage : 1) * sizeof *st);
    sim_result_stage_stats(r, nstage, stage_of, st);
    di_buf_printf(b, "%5s %7s %6s %11s %11s %11s %11s %11s %11s %11s %11s\n", "stage",
                  "devices", "layers", "compute", "exposed", "idle", "peak mem", "weights",
                  "grads", "optimizer", "activations");
    for (uint32_t g = 0; g < nstage; g++) {
        const sim_stage *x = &st[g];
        const sim_device_result *peak = x->peak;
        char nl[16] = "-";
        if (x->devices == 0)
            continue;
        if (layers)
            snprintf(nl, sizeof nl, "%u", layers[g]);
        sim_format_time(t1, sizeof t1, x->compute_s / x->devices);
        sim_format_time(t2, sizeof t2, x->exposed_comm_s / x->devices);
        sim_format_time(t3, sizeof t3, x->idle_s / x->devices);
        sim_format_bytes(m1, sizeof m1, peak->peak_memory_bytes);
        sim_format_bytes(m2, sizeof m2, peak->peak_by_class[SIM_MEM_WEIGHTS]);
        sim_format_bytes(m3, sizeof m3, peak->peak_by_class[SIM_MEM_GRADIENTS]);
        sim_format_bytes(m4, sizeof m4, peak->peak_by_class[SIM_MEM_OPTIMIZER]);
        sim_format_bytes(m5, sizeof m5, peak->peak_by_class[SIM_MEM_ACTIVATIONS]);
        di_buf_printf(b, "%5u %7u %6s %11s %11s %11s %11s %11s %11s %11s %11s%s\n", g, x->devices,
                      nl, t1, t2, t3, m1, m2, m3, m4, m5, peak->oom ? "  OUT OF MEMORY" : "");
    }
    di_free(st);
}

void
sim_result_stages_json(const sim_result *r, uint32_t nstage, const uint32_t *stage_of,
                       const uint32_t *layers, di_buf *b)
{
    sim_stage *st = di_xmalloc((nstage ? nstage : 1) * sizeof *st);
    int first = 1;
    sim_result_stage_stats(r, nstage, stage_of, st);
    di_buf_putc(b, '[');
    for (uint32_t g = 0; g < nstage; g++) {
        const sim_stage *x = &st[g];
        if (x->devices == 0)
            continue;
        if (!first)
            di_buf_putc(b, ',');
        first = 0;
        di_buf_printf(b, "{\"stage\":%u,\"devices\":%u,", g, x->devices);
        if (layers)
            di_buf_printf(b, "\"layers\":%u,", layers[g]);
        json_double(b, "compute_s", x->compute_s / x->devices);
        di_buf_putc(b, ',');
        json_double(b, "exposed_comm_s", x->exposed_comm_s / x->devices);
        di_buf_putc(b, ',');
        json_double(b, "idle_s", x->idle_s / x->devices);
        di_buf_putc(b, ',');
        json_double(b, "flops", x->flops / x->devices);
        di_buf_putc(b, ',');
        json_u64(b, "peak_memory_bytes", x->peak->peak_memory_bytes);
        di_buf_printf(b, ",\"peak_device\":%d,\"oom\":%s,\"peak_by_class\":{", x->peak->id,
                      x->peak->oom ? "true" : "false");
        for (int c = 0; c < SIM_NMEMCLASS; c++) {
            if (c)
                di_buf_putc(b, ',');
            json_u64(b, sim_memclass_name(c), x->peak->peak_by_class[c]);
        }
        di_buf_puts(b, "}}");
    }
    di_buf_putc(b, ']');
    di_free(st);
}

char *
sim_result_to_table(const sim_result *r)
{
    di_buf b;
    char t1[32], t2[32], t3[32], t4[32], t5[32], m1[32], m2[32];
    di_buf_init(&b);
    sim_result_summary(r, &b);
    di_buf_puts(&b, "\n");
    di_buf_printf(&b, "%6s %12s %12s %12s %12s %12s %12s %12s %4s\n", "device", "busy",
                  "compute", "comm", "exposed", "idle", "peak mem", "capacity", "oom");
    for (uint32_t i = 0; i < r->ndevice; i++) {
        const sim_device_result *d = &r->devices[i];
        sim_format_time(t1, sizeof t1, d->busy_s);
        sim_format_time(t2, sizeof t2, d->compute_s);
        sim_format_time(t3, sizeof t3, d->comm_s);
        sim_format_time(t4, sizeof t4, d->exposed_comm_s);
        sim_format_time(t5, sizeof t5, d->idle_s);
        sim_format_bytes(m1, sizeof m1, d->peak_memory_bytes);
        sim_format_bytes(m2, sizeof m2, d->capacity_bytes);
        di_buf_printf(&b, "%6d %12s %12s %12s %12s %12s %12s %12s %4s\n", d->id, t1, t2, t3, t4,
                      t5, m1, m2, d->oom ? "YES" : "no");
    }
    return di_buf_take(&b, NULL);
}

/* ---- protobuf ---- */

struct Distir__V1__SimResult *
sim_result_to_proto(const sim_result *r)
{
    Distir__V1__SimResult *p = di_xcalloc(1, sizeof *p);
    uint32_t *ref = timeline_refs(r);
    distir__v1__sim_result__init(p);
    p->step_time_s = r->step_time_s;
    p->peak_memory_bytes = r->peak_memory_bytes;
    p->flops = r->flops;
    p->mfu = r->mfu;
    p->hfu = r->hfu;
    p->peak_flops = r->peak_flops;
    p->model_flops = r->model_flops;
    p->tokens = r->tokens;
    p->tokens_per_s = r->tokens_per_s;
    p->bubble_fraction = r->bubble_fraction;
    p->ops = r->ops;
    p->simulator_version = di_xstrdup(r->settings.version[0] ? r->settings.version : SIM_VERSION);
    {
        const sim_settings *st = &r->settings;
        Distir__V1__SimSettings *q = di_xcalloc(1, sizeof *q);
        distir__v1__sim_settings__init(q);
        q->hardware = di_xstrdup(st->hardware);
        q->hardware_hash = di_xstrdup(st->hardware_hash);
        q->strategy = di_xstrdup(st->strategy ? st->strategy : "");
        q->have_options = st->have_options != 0;
        q->fuse = st->fuse != 0;
        q->tf32 = st->tf32 != 0;
        q->no_overlap = st->no_overlap != 0;
        q->strict = st->strict != 0;
        q->no_grad_accum_fusion = st->no_grad_accum_fusion != 0;
        p->settings = q;
    }
    p->n_devices = r->ndevice;
    p->devices = di_xcalloc(r->ndevice ? r->ndevice : 1, sizeof *p->devices);
    for (uint32_t i = 0; i < r->ndevice; i++) {
        const sim_device_result *d = &r->devices[i];
        Distir__V1__DeviceResult *q = di_xcalloc(1, sizeof *q);
        distir__v1__device_result__init(q);
        q->id = d->id;
        q->busy_s = d->busy_s;
        q->compute_s = d->compute_s;
        q->comm_s = d->comm_s;
        q->exposed_comm_s = d->exposed_comm_s;
        q->idle_s = d->idle_s;
        q->peak_memory_bytes = d->peak_memory_bytes;
        q->peak_time_s = d->peak_time_s;
        q->oom = d->oom;
        q->oom_by_bytes = d->oom_by_bytes;
        q->flops = d->flops;
        q->capacity_bytes = d->capacity_bytes;
        q->n_peak_by_class = SIM_NMEMCLASS;
        q->peak_by_class = di_xmalloc(SIM_NMEMCLASS * sizeof *q->peak_by_class);
        memcpy(q->peak_by_class, d->peak_by_class, sizeof d->peak_by_class);
        q->timeline_shared = ref[i] != i;
        q->timeline_device = ref[i] != i ? r->devices[ref[i]].id : 0;
        q->n_timeline = ref[i] != i ? 0 : d->ntimeline;
        q->timeline = di_xcalloc(q->n_timeline ? q->n_timeline : 1, sizeof *q->timeline);
        for (uint32_t t = 0; t < q->n_timeline; t++) {
            Distir__V1__MemoryPoint *mp = di_xcalloc(1, sizeof *mp);
            distir__v1__memory_point__init(mp);
            mp->time = d->timeline[t].time;
            mp->bytes = d->timeline[t].bytes;
            mp->n_by_class = SIM_NMEMCLASS;
            mp->by_class = di_xmalloc(SIM_NMEMCLASS * sizeof *mp->by_class);
            memcpy(mp->by_class, d->timeline[t].by_class, sizeof d->timeline[t].by_class);
            q->timeline[t] = mp;
        }
        p->devices[i] = q;
    }
    di_free(ref);
    return p;
}

void
sim_result_proto_free(struct Distir__V1__SimResult *p)
{
    if (p == NULL)
        return;
    for (size_t i = 0; i < p->n_devices; i++) {
        Distir__V1__DeviceResult *q = p->devices[i];
        for (size_t t = 0; t < q->n_timeline; t++) {
            di_free(q->timeline[t]->by_class);
            di_free(q->timeline[t]);
        }
        di_free(q->timeline);
        di_free(q->peak_by_class);
        di_free(q);
    }
    di_free(p->devices);
    di_free(p->simulator_version);
    if (p->settings != NULL) {
        di_free(p->settings->hardware);
        di_free(p->settings->hardware_hash);
        di_free(p->settings->strategy);
        di_free(p->settings);
    }
    di_free(p);
}

int
sim_result_from_proto(const struct Distir__V1__SimResult *p, sim_result **out, di_error *err)
{
    sim_result *r;
    *out = NULL;
    if (p->n_devices > (1u << 20))
        return di_error_set(err, DI_EDECODE, "result has %zu devices (limit %u)", p->n_devices,
                            1u << 20);
    r = di_xcalloc(1, sizeof *r);
    r->step_time_s = p->step_time_s;
    r->peak_memory_bytes = p->peak_memory_bytes;
    r->flops = p->flops;
    r->mfu = p->mfu;
    r->hfu = p->hfu;
    r->peak_flops = p->peak_flops;
    r->model_flops = p->model_flops;
    r->tokens = p->tokens;
    r->tokens_per_s = p->tokens_per_s;
    r->bubble_fraction = p->bubble_fraction;
    r->ops = p->ops;
    if (p->simulator_version != NULL)
        snprintf(r->settings.version, sizeof r->settings.version, "%s", p->simulator_version);
    if (p->settings != NULL) {
        const Distir__V1__SimSettings *q = p->settings;
        sim_settings *st = &r->settings;
        snprintf(st->hardware, sizeof st->hardware, "%s", q->hardware ? q->hardware : "");
        /* A hash is 64 hex digits or absent; anything else is not recorded. */
        if (q->hardware_hash != NULL && strlen(q->hardware_hash) == 64)
            memcpy(st->hardware_hash, q->hardware_hash, 65);
        if (q->strategy != NULL && q->strategy[0] != '\0')
            st->strategy = di_xstrdup(q->strategy);
        st->have_options = q->have_options;
        st->fuse = q->fuse;
        st->tf32 = q->tf32;
        st->no_overlap = q->no_overlap;
        st->strict = q->strict;
        st->no_grad_accum_fusion = q->no_grad_accum_fusion;
    }
    r->ndevice = (uint32_t)p->n_devices;
    r->devices = di_xcalloc(r->ndevice ? r->ndevice : 1, sizeof *r->devices);
    for (uint32_t i = 0; i < r->ndevice; i++) {
        const Distir__V1__DeviceResult *q = p->devices[i];
        sim_device_result *d = &r->devices[i];
        if (i > 0 && q->id <= p->devices[i - 1]->id) {
            int32_t id = q->id, prev = p->devices[i - 1]->id;
            sim_result_free(r);
            return di_error_set(err, DI_EDECODE,
                                "result devices must have ascending, distinct ids (device %d "
                                "follows %d)",
                                id, prev);
        }
        d->id = q->id;
        d->busy_s = q->busy_s;
        d->compute_s = q->compute_s;
        d->comm_s = q->comm_s;
        d->exposed_comm_s = q->exposed_comm_s;
        d->idle_s = q->idle_s;
        d->peak_memory_bytes = q->peak_memory_bytes;
        d->peak_time_s = q->peak_time_s;
        d->oom = q->oom;
        d->oom_by_bytes = q->oom_by_bytes;
        d->flops = q->flops;
        d->capacity_bytes = q->capacity_bytes;
        for (size_t c = 0; c < q->n_peak_by_class && c < SIM_NMEMCLASS; c++)
            d->peak_by_class[c] = q->peak_by_class[c];
        d->ntimeline = (uint32_t)q->n_timeline;
        d->timeline = di_xcalloc(d->ntimeline ? d->ntimeline : 1, sizeof *d->timeline);
        for (uint32_t t = 0; t < d->ntimeline; t++) {
            d->timeline[t].time = q->timeline[t]->time;
            d->timeline[t].bytes = q->timeline[t]->bytes;
            for (size_t c = 0; c < q->timeline[t]->n_by_class && c < SIM_NMEMCLASS; c++)
                d->timeline[t].by_class[c] = q->timeline[t]->by_class[c];
        }
        d->timeline_device = q->timeline_device;
    }
    /* A shared timeline names a device that has its own (ids ascend: found by bisection). */
    for (uint32_t i = 0; i < r->ndevice; i++) {
        sim_device_result *d = &r->devices[i];
        uint32_t lo = 0, hi = r->ndevice;
        if (!p->devices[i]->timeline_shared)
            continue;
        while (lo < hi) {
            uint32_t mid = lo + (hi - lo) / 2;
            if (r->devices[mid].id < d->timeline_device)
                lo = mid + 1;
            else
                hi = mid;
        }
        if (lo == r->ndevice || r->devices[lo].id != d->timeline_device ||
            p->devices[lo]->timeline_shared) {
            int32_t id = d->id, to = d->timeline_device;
            sim_result_free(r);
            return di_error_set(err, DI_EDECODE,
                                "device %d shares the timeline of device %d, which has none of "
                                "its own",
                                id, to);
        }
        di_free(d->timeline);
        d->timeline = r->devices[lo].timeline;
        d->ntimeline = r->devices[lo].ntimeline;
        d->timeline_shared = 1;
    }
    *out = r;
    return 0;
}

int
sim_result_pack(const sim_result *r, uint8_t **data, size_t *len)
{
    Distir__V1__SimResult *p = sim_result_to_proto(r);
    size_t n = distir__v1__sim_result__get_packed_size(p);
    *data = di_xmalloc(n ? n : 1);
    *len = distir__v1__sim_result__pack(p, *data);
    sim_result_proto_free(p);
    return 0;
}

int
sim_result_unpack(const uint8_t *data, size_t len, sim_result **out, di_error *err)
{
    ProtobufCMessage *msg;
    int rc;
    *out = NULL;
    rc = pb_unpack_checked(&distir__v1__sim_result__descriptor, data, len, 16, &msg, err);
    if (rc)
        return rc;
    rc = sim_result_from_proto((const Distir__V1__SimResult *)msg, out, err);
    protobuf_c_message_free_unpacked(msg, NULL);
    return rc;
}
