/*
 * trace.c: the Chrome trace-event file of a simulation (Perfetto,
 * chrome://tracing), written while the simulator schedules ops (a
 * sim_trace_sink), so its memory does not grow with its size.
 *
 * One process per device (named "device N, stage S"), one thread per stream
 * (compute, send, recv, collective). Each op is a complete event named by
 * its op type, in the category of its phase (forward, backward, recompute,
 * optimizer, relayout), with args: op, result, layer, stage, microbatch,
 * phase. Each transfer whose two ends are both recorded is linked by a flow
 * from the send to the receive. At the end: the names and, per recorded
 * device with a timeline, a counter track of its live memory by class.
 *
 * The file is written as PATH.tmp.PID and renamed when complete: a failed
 * or interrupted run (a full disk) leaves no partial trace behind.
 */
#include "sim/sim.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ir/ops.h"

#define FLUSH_BYTES (1u << 20)

static const char *const stream_names[] = {"compute", "send", "recv", "collective"};

/* One slice of the trace: an op, or consecutive ops of one layer merged. */
typedef struct slice {
    sim_event e;       /* chunk resolved; end extended when merged */
    const char *phase; /* a string of the module or a literal */
    int64_t layer;
    uint32_t nops; /* 0: none pending */
} slice;

struct sim_trace_file {
    sim_trace_sink sink;
    const ir_module *m;
    uint32_t ndevice;
    uint8_t *select; /* copy of the selection, or NULL: every device */
    uint32_t *stage; /* per device id: stage for the process names (copy), or NULL */
    int merge;       /* merge each layer's consecutive ops into one slice */
    slice *pending;  /* with merge: per device and stream, the slice being extended */
    uint64_t nslice;
    char path[4096], tmp[4096];
    int fd;
    int err;          /* errno of the first failed write, or 0 */
    int first;        /* no event written yet (the next one has no comma) */
    uint64_t written; /* bytes, after the last restart */
    uint64_t nevent;
    di_buf b;
};

static void
flush(sim_trace_file *t)
{
    size_t off = 0;
    while (t->err == 0 && off < t->b.len) {
        ssize_t w = write(t->fd, t->b.data + off, t->b.len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            t->err = errno;
        else
            off += (size_t)w;
    }
    t->written += t->b.len;
    t->b.len = 0;
}

/* The separator before an event: none before the first. */
static void
sep(sim_trace_file *t)
{
    if (!t->first)
        di_buf_puts(&t->b, ",\n");
    t->first = 0;
}

static void
header(sim_trace_file *t)
{
    di_buf_puts(&t->b, "{\"displayTimeUnit\":\"ns\",\"otherData\":{\"simulator\":\"" SIM_VERSION
                       "\"},\"traceEvents\":[\n");
    t->first = 1;
}

static int
trace_restart(void *arg)
{
    sim_trace_file *t = arg;
    t->b.len = 0;
    t->written = 0;
    t->nevent = t->nslice = 0;
    if (t->pending)
        memset(t->pending, 0, (size_t)(t->ndevice ? t->ndevice : 1) * 4 * sizeof *t->pending);
    if (lseek(t->fd, 0, SEEK_SET) < 0 || ftruncate(t->fd, 0) != 0)
        t->err = errno;
    header(t);
    return t->err ? DI_EIO : 0;
}

/* The phase of op as the trace names it. */
static const char *
phase_of(const sim_trace_file *t, ir_id op, ir_id chunk)
{
    const ir_module *m = t->m;
    const char *ph = ir_op_string(m, op, "dist.phase", NULL);
    const char *cph = chunk ? ir_op_string(m, chunk, "dist.phase", NULL) : NULL;
    if (ph == NULL)
        return cph ? cph : "step";
    if (strcmp(ph, "forward") == 0 && cph && strcmp(cph, "backward") == 0)
        return "recompute";
    return ph;
}

/*
 * The chunk of a top-level op: its own, or for a transfer or collective
 * between chunks, the chunk that produced its input (through a tuple_get).
 */
static ir_id
chunk_of(const ir_module *m, const sim_event *e)
{
    const ir_op *o = &m->ops[e->op];
    ir_id def;
    if (e->chunk || o->ninput == 0)
        return e->chunk;
    def = m->values[m->refs[o->inputs]].def;
    if (def && m->ops[def].kind == IR_OP_TUPLEGET && m->ops[def].ninput)
        def = m->values[m->refs[m->ops[def].inputs]].def;
    return def && m->ops[def].kind == IR_OP_PMAP ? def : 0;
}

/* Microseconds with nanosecond resolution: the trace's time unit. */
static void
put_us(di_buf *b, double s)
{
    di_buf_printf(b, "%.3f", s * 1e6);
}

static void
write_slice(sim_trace_file *t, const slice *x)
{
    const ir_module *m = t->m;
    const sim_event *e = &x->e;
    di_buf *b = &t->b;
    sep(t);
    di_buf_puts(b, "{\"ph\":\"X\",\"name\":");
    if (x->nops > 1) {
        char label[96];
        snprintf(label, sizeof label, "%s L%" PRId64, x->phase, x->layer);
        di_buf_json_str(b, label);
    } else {
        di_buf_json_str(b, ir_op_name(m, e->op));
    }
    /* The phase may come from a module's dist.phase: escaped like every string. */
    di_buf_puts(b, ",\"cat\":");
    di_buf_json_str(b, x->phase);
    di_buf_printf(b, ",\"pid\":%d,\"tid\":%u,\"ts\":", e->device, e->stream);
    put_us(b, e->start);
    di_buf_puts(b, ",\"dur\":");
    put_us(b, e->end - e->start);
    di_buf_printf(b, ",\"args\":{\"op\":%u", e->op);
    if (x->nops > 1) {
        di_buf_printf(b, ",\"ops\":%u", x->nops);
    } else {
        const ir_op *op = &m->ops[e->op];
        if (op->noutput && m->values[op->outputs].name) {
            di_buf_puts(b, ",\"result\":");
            di_buf_json_str(b, ir_str_get(m, m->values[op->outputs].name));
        }
    }
    if (x->layer >= 0)
        di_buf_printf(b, ",\"layer\":%" PRId64, x->layer);
    if (e->chunk && ir_op_int(m, e->chunk, "dist.mb", -1) >= 0)
        di_buf_printf(b, ",\"stage\":%" PRId64 ",\"microbatch\":%" PRId64,
                      ir_op_int(m, e->chunk, "dist.stage", -1),
                      ir_op_int(m, e->chunk, "dist.mb", -1));
    if (e->peer >= 0)
        di_buf_printf(b, ",\"%s\":%d", e->stream == 1 ? "to" : "from", e->peer);
    di_buf_puts(b, "}}");
    /* A flow from the send to the receive, when both ends are in the trace. */
    if (e->flow && e->peer != e->device &&
        (t->select == NULL || ((uint32_t)e->peer < t->ndevice && t->select[e->peer]))) {
        di_buf_printf(b,
                      ",\n{\"ph\":\"%s\",\"name\":\"transfer\",\"cat\":\"transfer\",\"id\":%" PRIu64
                      ",\"pid\":%d,\"tid\":%u,\"ts\":",
                      e->stream == 1 ? "s" : "f", e->flow, e->device, e->stream);
        put_us(b, e->start);
        di_buf_puts(b, e->stream == 1 ? "}" : ",\"bp\":\"e\"}");
    }
    t->nslice++;
    if (b->len >= FLUSH_BYTES)
        flush(t);
}

/* Writes the pending slice of a (device, stream), if any. */
static void
flush_pending(sim_trace_file *t, slice *p)
{
    if (p->nops) {
        write_slice(t, p);
        p->nops = 0;
    }
}

static void
trace_event(void *arg, const sim_event *ev)
{
    sim_trace_file *t = arg;
    const ir_module *m = t->m;
    slice x, *p;
    x.e = *ev;
    x.e.chunk = chunk_of(m, ev);
    x.phase = phase_of(t, ev->op, x.e.chunk);
    x.layer = ir_op_int(m, ev->op, "dist.layer", -1);
    x.nops = 1;
    t->nevent++;
    if (!t->merge || (uint32_t)ev->device >= t->ndevice || ev->stream > 3) {
        write_slice(t, &x);
        return;
    }
    /*
     * Merged per layer: ops of one chunk, layer and phase that follow one
     * another without a gap on a stream become one slice (each stream's ops
     * arrive in the order they run); an op of no layer (a gradient
     * accumulation) joins the slice it follows. Transfers stay alone (their
     * flows).
     */
    p = &t->pending[(size_t)ev->device * 4 + ev->stream];
    if (p->nops && !x.e.flow && !p->e.flow && p->e.chunk == x.e.chunk && p->layer >= 0 &&
        (x.layer == p->layer || x.layer < 0) && strcmp(p->phase, x.phase) == 0 &&
        x.e.start <= p->e.end) {
        if (x.e.end > p->e.end)
            p->e.end = x.e.end;
        p->nops++;
        return;
    }
    flush_pending(t, p);
    *p = x;
}

int
sim_trace_open(const char *path, const ir_module *m, uint32_t ndevice, const uint8_t *select,
               const uint32_t *stage, int merge, sim_trace_file **out, di_error *err)
{
    sim_trace_file *t;
    *out = NULL;
    t = di_xcalloc(1, sizeof *t);
    if (snprintf(t->path, sizeof t->path, "%s", path) >= (int)sizeof t->path ||
        snprintf(t->tmp, sizeof t->tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof t->tmp) {
        di_free(t);
        return di_error_set(err, DI_EINVAL, "path too long: '%s'", path);
    }
    t->fd = open(t->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (t->fd < 0) {
        int e = errno;
        di_free(t);
        return di_error_set(err, DI_EIO, "cannot create '%s': %s", path, strerror(e));
    }
    t->m = m;
    t->ndevice = ndevice;
    if (select) {
        t->select = di_xmalloc(ndevice ? ndevice : 1);
        memcpy(t->select, select, ndevice);
    }
    if (stage) {
        t->stage = di_xmalloc((ndevice ? ndevice : 1) * sizeof *t->stage);
        memcpy(t->stage, stage, ndevice * sizeof *stage);
    }
    t->merge = merge;
    if (merge)
        t->pending = di_xcalloc((size_t)(ndevice ? ndevice : 1) * 4, sizeof *t->pending);
    di_buf_init(&t->b);
    header(t);
    t->sink.select = t->select;
    t->sink.ctx = t;
    t->sink.restart = trace_restart;
    t->sink.event = trace_event;
    *out = t;
    return 0;
}

const sim_trace_sink *
sim_trace_sink_of(sim_trace_file *t)
{
    return &t->sink;
}

uint64_t
sim_trace_events(const sim_trace_file *t)
{
    return t->nevent;
}

uint64_t
sim_trace_slices(const sim_trace_file *t)
{
    return t->nslice;
}

static void
trace_free(sim_trace_file *t)
{
    di_buf_fini(&t->b);
    di_free(t->select);
    di_free(t->stage);
    di_free(t->pending);
    di_free(t);
}

void
sim_trace_discard(sim_trace_file *t)
{
    if (t == NULL)
        return;
    close(t->fd);
    unlink(t->tmp);
    trace_free(t);
}

int
sim_trace_close(sim_trace_file *t, const sim_result *r, uint64_t *bytes, di_error *err)
{
    di_buf *b = &t->b;
    int rc = 0;
    for (size_t k = 0; t->pending && k < (size_t)t->ndevice * 4; k++)
        flush_pending(t, &t->pending[k]);
    for (uint32_t i = 0; i < r->ndevice; i++) {
        const sim_device_result *d = &r->devices[i];
        int32_t id = d->id;
        if (t->select && ((uint32_t)id >= t->ndevice || !t->select[id]))
            continue;
        sep(t);
        if (t->stage && (uint32_t)id < t->ndevice && t->stage[id] != UINT32_MAX)
            di_buf_printf(b,
                          "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%d,\"args\":"
                          "{\"name\":\"device %d, stage %u\"}}",
                          id, id, t->stage[id]);
        else
            di_buf_printf(b,
                          "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%d,\"args\":"
                          "{\"name\":\"device %d\"}}",
                          id, id);
        di_buf_printf(b,
                      ",\n{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":%d,\"args\":"
                      "{\"sort_index\":%d}}",
                      id, id);
        for (int st = 0; st < 4; st++)
            di_buf_printf(b,
                          ",\n{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%d,\"tid\":%d,"
                          "\"args\":{\"name\":\"%s\"}}",
                          id, st, stream_names[st]);
        /* Live memory by class: a stacked counter track. */
        for (uint32_t k = 0; k < d->ntimeline; k++) {
            const sim_mempoint *p = &d->timeline[k];
            di_buf_printf(b, ",\n{\"ph\":\"C\",\"name\":\"memory\",\"pid\":%d,\"ts\":", id);
            put_us(b, p->time);
            di_buf_puts(b, ",\"args\":{");
            for (int c = 0; c < SIM_NMEMCLASS; c++)
                di_buf_printf(b, "%s\"%s\":%" PRIu64, c ? "," : "", sim_memclass_name(c),
                              p->by_class[c]);
            di_buf_puts(b, "}}");
            if (b->len >= FLUSH_BYTES)
                flush(t);
        }
    }
    di_buf_puts(b, "\n]}\n");
    flush(t);
    if (bytes)
        *bytes = t->written;
    if (t->err == 0 && fsync(t->fd) != 0)
        t->err = errno;
    if (close(t->fd) != 0 && t->err == 0)
        t->err = errno;
    if (t->err != 0) {
        rc =
            di_error_set(err, DI_EIO, "cannot write the trace '%s': %s", t->path, strerror(t->err));
        unlink(t->tmp);
    } else if (rename(t->tmp, t->path) != 0) {
        int e = errno;
        unlink(t->tmp);
        rc = di_error_set(err, DI_EIO, "cannot rename '%s' to '%s': %s", t->tmp, t->path,
                          strerror(e));
    }
    trace_free(t);
    return rc;
}

/* Ops region r runs per instance, nested bodies and callees included (depth-limited). */
static double
region_ops(const ir_module *m, ir_id r, int depth)
{
    const ir_region *g = &m->regions[r];
    double n = 0;
    for (uint32_t k = 0; k < g->nop; k++) {
        const ir_op *o = &m->ops[g->ops[k]];
        if (o->kind == IR_OP_PMAP && o->body && o->body < m->nregion && depth < 8) {
            uint32_t nd = 0;
            (void)ir_op_ints(m, g->ops[k], "devices", &nd);
            n += (nd ? nd : 1) * region_ops(m, o->body, depth + 1);
        } else if (!(ir_opkind_info(o->kind)->flags & IR_OPF_FREE)) {
            n += 1;
        }
    }
    return n;
}

double
sim_trace_estimate(const ir_module *m, uint32_t ndevice, const uint8_t *select)
{
    ir_id entry = ir_module_entry(m);
    uint32_t nsel = 0;
    if (entry == 0)
        return 0;
    for (uint32_t d = 0; d < ndevice; d++)
        nsel += select == NULL || select[d];
    /* Ops per device of the whole step, times the devices recorded, at ~240 bytes an event. */
    double per_device = ndevice ? region_ops(m, entry, 0) / ndevice : 0;
    return per_device * nsel * 240.0;
}

int
sim_trace_write(const char *path, const ir_module *m, const sim_result *r, const sim_event *events,
                uint32_t nevent, di_error *err)
{
    sim_trace_file *t;
    uint32_t ndev = 0;
    int rc;
    for (uint32_t i = 0; i < r->ndevice; i++)
        if ((uint32_t)r->devices[i].id + 1 > ndev)
            ndev = (uint32_t)r->devices[i].id + 1;
    if ((rc = sim_trace_open(path, m, ndev, NULL, NULL, 0, &t, err)) != 0)
        return rc;
    for (uint32_t i = 0; i < nevent; i++)
        trace_event(t, &events[i]);
    return sim_trace_close(t, r, NULL, err);
}
