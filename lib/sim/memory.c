/*
 * memory.c: where values live and what they cost in memory. Each type has
 * its locations (a device, or the pmap instance's device, and the bytes
 * there); each value gets instances, one per location and pmap instance,
 * whose storage an alias shares; each value has a memory class (weights,
 * gradients, optimizer state, activations, communication buffers, ...).
 * After the walk, every owning instance becomes an allocation and a free
 * event on its device; the events are sorted (almost in order already:
 * an insertion pass plus a bucket sort) and scanned into the peak, its
 * composition and the live-memory timeline.
 */
#include "sim/sim_int.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>

/* ---- type locations ---- */

int
sim_dev_check(sim *s, int64_t dev)
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
            int rc = sim_dev_check(s, d);
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
        int rc = sim_dev_check(s, t->device);
        if (rc)
            return rc;
        s->tlocs[s->ntloc].dev = t->device;
    }
    s->tlocs[s->ntloc].bytes = ir_type_bytes(m, type);
    s->ntloc++;
    return 0;
}

/* The locations of a type (computed once per type). */
int
sim_type_locs(sim *s, ir_id type, const tloc **out, uint32_t *n)
{
    if (s->tloc_off[type] == UINT32_MAX) {
        uint32_t start = s->ntloc;
        int rc = tloc_add(s, type);
        if (rc)
            return rc;
        s->tloc_off[type] = start;
        s->tloc_n[type] = s->ntloc - start;
    }
    assert(s->tloc_off[type] + s->tloc_n[type] <= s->ntloc);
    *out = s->tlocs + s->tloc_off[type];
    *n = s->tloc_n[type];
    return 0;
}

/* ---- instances ---- */

/* Room for `need` instances. */
void
sim_inst_reserve(sim *s, size_t need)
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

/* Inlined into sim_value_instances, the hot caller; sim_inst_new is the same for the others. */
static inline uint32_t
inst_new(sim *s, uint32_t count)
{
    uint32_t first = s->ninst;
    sim_inst_reserve(s, (size_t)s->ninst + count);
    memset(s->inst + first, 0, count * sizeof *s->inst);
    for (uint32_t i = 0; i < count; i++)
        s->inst[first + i].owner = first + i;
    s->ninst += count;
    return first;
}

uint32_t
sim_inst_new(sim *s, uint32_t count)
{
    return inst_new(s, count);
}

/*
 * Creates the instances of value v for a context of `rep` pmap instances on
 * devices devs[0..rep) (devs NULL at top level). Instances are laid out
 * [k][location]. They are allocations owned by themselves until aliased.
 */
int
sim_value_instances(sim *s, ir_id v, uint32_t rep, const int32_t *devs)
{
    const tloc *locs;
    uint32_t n, first, type = s->m->values[v].type, off = s->tloc_off[type];
    uint8_t cls = s->vclass[v];
    if (off == UINT32_MAX) {
        int rc = sim_type_locs(s, type, &locs, &n);
        if (rc)
            return rc;
        off = (uint32_t)(locs - s->tlocs);
    }
    /* sim_type_locs may have grown tlocs: locs stays valid until the next call. */
    locs = s->tlocs + off;
    n = s->tloc_n[type];
    s->vbase[v] = s->ninst;
    s->vrep[v] = rep;
    s->vuni[v] = 0;
    if ((size_t)rep * n == 1) {
        /* Most values: one instance (inst_new's work, written once). */
        sim_inst *in;
        int32_t d = locs[0].dev;
        first = s->ninst;
        sim_inst_reserve(s, (size_t)first + 1);
        in = &s->inst[first];
        memset(in, 0, sizeof *in);
        in->owner = first;
        in->dev = d == LOC_DEVVAR ? (devs ? devs[0] : 0) : d;
        in->loc = off;
        in->cls = cls;
        s->ninst = first + 1;
        return 0;
    }
    first = inst_new(s, rep * n);
    for (uint32_t k = 0; k < rep; k++)
        for (uint32_t j = 0; j < n; j++) {
            sim_inst *in = &s->inst[first + k * n + j];
            int32_t d = locs[j].dev;
            if (d == LOC_DEVVAR)
                d = devs ? devs[k] : 0;
            in->dev = d;
            in->loc = off + j;
            in->cls = cls;
        }
    return 0;
}

/* Gives value v one instance for all its locations (see vidx); returns its index. */
int
sim_value_uniform(sim *s, ir_id v, uint32_t *idx)
{
    const tloc *locs;
    uint32_t n;
    int rc = sim_type_locs(s, s->m->values[v].type, &locs, &n);
    if (rc)
        return rc;
    *idx = sim_inst_new(s, 1);
    s->vbase[v] = *idx;
    s->vrep[v] = 1;
    s->vuni[v] = VF_UNI;
    s->inst[*idx].dev = n ? locs[0].dev : 0;
    s->inst[*idx].loc = n ? (uint32_t)(locs - s->tlocs) : 0;
    s->inst[*idx].cls = s->vclass[v];
    return 0;
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
        } else if (o->ninput && o->nattr && ir_op_attr_key(m, val->def, s->key_accumulate)) {
            v = m->refs[o->inputs]; /* an in-place gradient accumulation */
        } else if (o->kind == IR_OP_CAST && o->nattr && s->str_optimizer != 0 &&
                   op_string_is(m, val->def, s->key_phase, s->str_optimizer)) {
            v = m->refs[o->inputs]; /* the update's cast of an accumulated gradient */
        } else {
            return;
        }
    }
}

void
sim_classify(sim *s)
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
        const ir_attr *a;
        if (o->nattr == 0 || (a = ir_op_attr_key(m, op, s->key_mem)) == NULL ||
            a->kind != IR_ATTR_STRING)
            continue;
        cls = m->chars + a->s;
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

static uint64_t
time_key(double t, int is_alloc)
{
    t += 0.0; /* no negative zero */
    return di_double_bits(t) << 1 | (uint64_t)(is_alloc != 0);
}

/*
 * Stable LSD radix sort of n events by key. One pass counts every digit of
 * every key (16 bits, 4 digits, from 65,536 events: a scatter pass fewer than
 * 11-bit digits for the time keys, whose low 48 bits or so differ; 11 bits,
 * 6 digits, from 4,096; 8 bits, 8 digits below, where clearing and summing
 * the larger counters would dominate), then one
 * scatter per digit; digits that are the same for every event are skipped
 * (times share their high bits), and an already sorted segment is left
 * alone. tmp has room for n events; count for SORT_COUNTERS counters.
 * Counting every digit at once reads the events once instead of once per
 * digit: on gpt3-175b's interleaved candidates, whose frees come far out of
 * order, it was a sixth of the whole memory pass with one counting pass per
 * 8-bit digit.
 */
static void
radix_sort(memev *v, memev *tmp, uint32_t *count, uint32_t n, const atomic_int *cancel)
{
    const int BITS = n >= 65536 ? 16 : n >= 4096 ? 11 : 8;
    const uint32_t NB = 1u << BITS, NDIGIT = (64 + (uint32_t)BITS - 1) / (uint32_t)BITS;
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
    memset(count, 0, NDIGIT * NB * sizeof *count);
    for (uint32_t i = 0; i < n; i++) {
        uint64_t k = v[i].key;
        for (uint32_t d = 0; d < NDIGIT; d++, k >>= BITS)
            count[d * NB + (k & (NB - 1))]++;
    }
    for (uint32_t d = 0; d < NDIGIT; d++) {
        const int shift = (int)d * BITS;
        uint32_t *c = count + d * NB, sum = 0;
        if (((diff >> shift) & (NB - 1)) == 0)
            continue; /* every event has the same digit here */
        if (cancel && atomic_load_explicit(cancel, memory_order_relaxed))
            return; /* left unsorted: the run stops (sim_build_memory) */
        for (uint32_t b = 0; b < NB; b++) {
            uint32_t x = c[b];
            c[b] = sum;
            sum += x;
        }
        for (uint32_t i = 0; i < n; i++)
            dst[c[(src[i].key >> shift) & (NB - 1)]++] = src[i];
        memev *t = src;
        src = dst;
        dst = t;
    }
    if (src != v)
        memcpy(v, src, n * sizeof *v);
}

/* A key's time (time_key's inverse). */
static double
key_time(uint64_t key)
{
    return di_bits_double(key >> 1);
}

/* The bucket of a key whose time is t in [lo, ...]: monotone in t, below nb. */
static inline uint32_t
time_bucket(uint64_t key, double lo, double width, uint32_t nb)
{
    double x = (key_time(key) - lo) / width;
    return x < (double)(nb - 1) ? (uint32_t)x : nb - 1;
}

/* Insertion sort of n events by key: for the few events of a bucket. */
static void
insertion_sort(memev *v, uint32_t n)
{
    for (uint32_t i = 1; i < n; i++) {
        memev e = v[i];
        uint32_t j = i;
        for (; j > 0 && v[j - 1].key > e.key; j--)
            v[j] = v[j - 1];
        v[j] = e;
    }
}

/*
 * Sorts n memory events by key with one pass of buckets over their times
 * (about 4 events per bucket, at most 2^16 buckets, each an equal slice of
 * the time from the first event to the last), each bucket then sorted on
 * its own: by insertion when small, else by radix_sort. A key is a time's
 * bits (time_key), so the bucket, a monotone function of the time, orders
 * the keys as they sort. The out-of-order events of a step (the frees of
 * an interleaved pipeline, a quarter of them out of place) are spread over
 * it, so most buckets hold a few: one scatter where radix_sort makes three
 * or four, each over 65,536 counters (a tenth of a gpt3-175b search's time
 * was in those scatters). Keys that are no finite non-negative time, or a
 * span too short to slice, go to radix_sort whole. tmp has room for n
 * events; count for SORT_COUNTERS counters.
 */
static void
bucket_sort(memev *v, memev *tmp, uint32_t *count, uint32_t n, const atomic_int *cancel)
{
    enum { SMALL = 32 };
    uint32_t *end = count + SORT_RADIX_COUNTERS, nb = 16, start = 0;
    double lo, hi, width;
    if (n <= SMALL) {
        insertion_sort(v, n);
        return;
    }
    lo = hi = key_time(v[0].key);
    for (uint32_t i = 0; i < n; i++) {
        double t = key_time(v[i].key);
        if (!(t >= 0 && t <= DBL_MAX)) { /* not a time: NaN, infinite, negative */
            radix_sort(v, tmp, count, n, cancel);
            return;
        }
        lo = t < lo ? t : lo;
        hi = t > hi ? t : hi;
    }
    while (nb < (1u << 16) && 4 * nb < n)
        nb *= 2;
    width = (hi - lo) / nb;
    if (!isnormal(width)) {
        radix_sort(v, tmp, count, n, cancel);
        return;
    }
    if (cancel && atomic_load_explicit(cancel, memory_order_relaxed))
        return; /* left unsorted: the run stops (sim_build_memory) */
    memset(end, 0, nb * sizeof *end);
    for (uint32_t i = 0; i < n; i++)
        end[time_bucket(v[i].key, lo, width, nb)]++;
    for (uint32_t b = 0, sum = 0; b < nb; b++) {
        uint32_t x = end[b];
        end[b] = sum; /* the bucket's start; its end once scattered */
        sum += x;
    }
    for (uint32_t i = 0; i < n; i++)
        tmp[end[time_bucket(v[i].key, lo, width, nb)]++] = v[i];
    for (uint32_t b = 0; b < nb; b++) {
        uint32_t k = end[b] - start;
        if (k <= SMALL)
            insertion_sort(tmp + start, k);
        else /* v's room for these events is free until the copy back */
            radix_sort(tmp + start, v + start, count, k, cancel);
        start = end[b];
    }
    memcpy(v, tmp, n * sizeof *v);
}

/*
 * Sorts n events by key, using that they come almost in time order (streams
 * run in order; a free follows its value's last use): one pass keeps a
 * sorted subsequence in place and moves the out-of-order events (a value
 * that lives long, a late consumer) aside, popping up to 16 kept events
 * when they, not the new one, are the exceptions; the few set aside are
 * sorted (bucket_sort) and merged back from the end. When too many are out
 * of order it sorts everything so. Events with equal keys happen at the
 * same instant and sim_device_memory settles an instant before looking at it,
 * so their order does not matter (it is deterministic all the same).
 * tmp has room for n events.
 */
static void
sort_events(memev *v, memev *tmp, uint32_t *count, uint32_t n, const atomic_int *cancel)
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
        bucket_sort(v, tmp, count, n, cancel);
        return;
    }
    bucket_sort(tmp, tmp + nout, count, nout, cancel);
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
    uint32_t *count = di_xmalloc(SORT_COUNTERS * sizeof *count);
    for (uint32_t i = 0; i < n; i++) {
        v[i].key = keys[i];
        v[i].val = i;
    }
    sort_events(v, tmp, count, n, NULL);
    for (uint32_t i = 0; i < n; i++)
        keys[i] = v[i].key;
    di_free(count);
    di_free(tmp);
    di_free(v);
}

/*
 * The instances of the entry function's arguments (instances [1,
 * s->arg_end), sim_once) on a device that is its own representative, in
 * instance order, into *out (caller frees): the others' are never read. The
 * representatives' locations are found once per type from its table
 * (tlocs), not by reading every instance: the arguments of a model's layers
 * share a few types.
 */
static uint32_t
rep_args(const sim *s, uint32_t **out)
{
    const ir_module *m = s->m;
    const ir_region *r = &m->regions[s->entry];
    uint32_t *first = di_xmalloc((m->ntype ? m->ntype : 1) * sizeof *first);
    uint32_t *cnt = di_xmalloc((m->ntype ? m->ntype : 1) * sizeof *cnt);
    uint32_t *locs = NULL, nloc = 0, cloc = 0, *v = NULL, n = 0, cap = 0;
    memset(first, 0xff, (m->ntype ? m->ntype : 1) * sizeof *first);
    for (uint32_t a = 0; a < r->narg; a++) {
        ir_id val = r->args[a];
        uint32_t t = m->values[val].type;
        if (first[t] == UINT32_MAX) {
            const tloc *tl = s->tlocs + s->tloc_off[t];
            first[t] = nloc;
            for (uint32_t l = 0; l < s->tloc_n[t]; l++) {
                int32_t d = tl[l].dev == LOC_DEVVAR ? 0 : tl[l].dev; /* sim_value_instances */
                if (tl[l].bytes && s->devs[d].rep == d) {
                    DI_GROW(&locs, &cloc, nloc + 1);
                    locs[nloc++] = l;
                }
            }
            cnt[t] = nloc - first[t];
        }
        for (uint32_t k = 0; k < cnt[t]; k++) {
            uint32_t i = s->vbase[val] + locs[first[t] + k];
            assert(s->inst[i].owner == i && s->tlocs[s->inst[i].loc].bytes &&
                   s->devs[s->inst[i].dev].rep == s->inst[i].dev);
            DI_GROW(&v, &cap, n + 1);
            v[n++] = i;
        }
    }
    di_free(locs);
    di_free(cnt);
    di_free(first);
    *out = v;
    return n;
}

/* Instance i's allocation, and its free unless it is persistent, into its device's events. */
static void
add_events(sim *s, uint32_t i, double step)
{
    const sim_inst *in = &s->inst[i];
    sim_dev *d = &s->devs[in->dev];
    /* A view (INST_VIEW) is counted in the buffer that holds it: an event of no bytes. */
    uint64_t bytes = in->flags & INST_VIEW ? 0 : s->tlocs[in->loc].bytes;
    /*
     * Gradient buffers (a gradient the backward pass makes, accumulated in
     * place) exist for the whole step, as Megatron-LM's contiguous gradient
     * buffer and PyTorch's persistent .grad do; reduction buckets do not.
     */
    s->ev[d->evoff + d->nalloc].key =
        time_key(in->cls == SIM_MEM_GRADIENTS && (in->flags & INST_GRADBUF) ? 0.0 : in->alloc, 1);
    s->ev[d->evoff + d->nalloc++].val = bytes << 3 | in->cls;
    if (!(in->flags & INST_PERSISTENT)) {
        double t = in->last_use > in->ready ? in->last_use : in->ready;
        s->ev[d->evoff + d->nev].key = time_key(t > step ? step : t, 0);
        s->ev[d->evoff + d->nev++].val = bytes << 3 | in->cls;
    }
}

/* Whether instance i is an allocation of a representative: an owner with bytes, not fused. */
static int
rep_alloc(const sim *s, uint32_t i)
{
    const sim_inst *in = &s->inst[i];
    return in->owner == i && s->tlocs[in->loc].bytes && !(in->flags & INST_FUSED) &&
           s->devs[in->dev].rep == in->dev;
}

/*
 * Builds every device's memory events from the instances: an owner is
 * allocated when its producer starts and freed when the last consumer of
 * any of its aliases ends (never, if it or an alias is persistent). Only
 * representatives get events: a device a representative stood for shares
 * its timeline (build_result), so its own instances (the module's arguments
 * on each of 1,024 devices, made before any pmap was found symmetric) would
 * be sorted for nothing: 4.7 of gpt3-175b's 4.8 million instances with dp
 * 128 and tp 8.
 */
int
sim_build_memory(sim *s, double step)
{
    uint32_t total = 0, most = 0, *count, *args, nargs = rep_args(s, &args);
    memev *tmp;
    /*
     * Propagate last use and persistence from aliases to owners, and count
     * each device's allocations (owners with bytes); it has at most as many
     * frees (persistence is only final after this pass). The arguments are
     * their own owners (each alias is made later, of them).
     */
    for (uint32_t k = 0; k < nargs; k++)
        s->devs[s->inst[args[k]].dev].nalloc++;
    for (uint32_t i = s->arg_end > 1 ? s->arg_end : 1; i < s->ninst; i++) {
        sim_inst *in = &s->inst[i];
        if ((i & 0xffff) == 0 && sim_cancelled(s)) {
            di_free(args);
            return di_error_set(s->err, DI_ECANCELLED, "simulation cancelled");
        }
        if (in->owner != i) {
            sim_inst *ow = &s->inst[in->owner];
            if (in->last_use > ow->last_use)
                ow->last_use = in->last_use;
            ow->flags |= in->flags & INST_PERSISTENT;
        } else if (rep_alloc(s, i)) {
            in->flags |= INST_REPALLOC; /* read back below: rep_alloc reads two other tables */
            s->devs[in->dev].nalloc++;
        }
    }
    /*
     * Per device, the allocations (in instance order, which is almost time
     * order: streams run in order) and then the frees. Each part is sorted
     * on its own (radix_sort skips a sorted one) and sim_device_memory merges
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
        size_t cap = sim_grown_cap(s->cev, total);
        s->ev = di_big_xrealloc(s->ev, s->cev * sizeof *s->ev, cap * sizeof *s->ev);
        s->cev = cap;
    }
    for (uint32_t k = 0; k < nargs; k++)
        add_events(s, args[k], step);
    di_free(args);
    for (uint32_t i = s->arg_end > 1 ? s->arg_end : 1; i < s->ninst; i++) {
        if ((i & 0xffff) == 0 && sim_cancelled(s))
            return di_error_set(s->err, DI_ECANCELLED, "simulation cancelled");
        if (s->inst[i].flags & INST_REPALLOC)
            add_events(s, i, step);
    }
    if (most > s->ctmp) {
        size_t cap = sim_grown_cap(s->ctmp, most);
        s->tmp = di_big_xrealloc(s->tmp, s->ctmp * sizeof *s->tmp, cap * sizeof *s->tmp);
        s->ctmp = cap;
    }
    if (s->count == NULL)
        s->count = di_xmalloc(SORT_COUNTERS * sizeof *s->count);
    tmp = s->tmp;
    count = s->count;
    for (uint32_t d = 0; d < s->ndev; d++) {
        sim_dev *dv = &s->devs[d];
        /* Every allocation counted above was written; a free for each at most. */
        assert(dv->nalloc <= dv->nev && dv->nev <= 2 * dv->nalloc);
        /* A device's sort takes up to ~10 ms on the largest modules: it polls too. */
        sort_events(s->ev + dv->evoff, tmp, count, dv->nalloc, s->opt ? s->opt->cancel : NULL);
        sort_events(s->ev + dv->evoff + dv->nalloc, tmp, count, dv->nev - dv->nalloc,
                    s->opt ? s->opt->cancel : NULL);
        if (sim_cancelled(s)) /* the sorts may have stopped part way */
            return di_error_set(s->err, DI_ECANCELLED, "simulation cancelled");
    }
    return 0;
}

/*
 * Scans a device's sorted events: the peak, its time and composition, and
 * the timeline. With a point limit the timeline keeps, per bucket of
 * consecutive instants, the highest point, and always the final state (the
 * resident set); the buckets are sized in a first counting pass so that the
 * full timeline is never materialized.
 */
void
sim_device_memory(sim *s, int32_t dev, sim_device_result *r)
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
    /* Distinct instants (to size the timeline): a merge of the two sorted parts by time. */
    if (s->opt->want_timeline) {
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
    assert(live >= 0); /* every free has its allocation */
    r->timeline = pts;
    r->ntimeline = npoint;
    r->capacity_bytes = (uint64_t)hw_device_capacity(hw_device_spec(s->hw, (uint32_t)dev));
    r->oom = r->capacity_bytes && r->peak_memory_bytes > r->capacity_bytes;
    r->oom_by_bytes = r->oom ? r->peak_memory_bytes - r->capacity_bytes : 0;
}
