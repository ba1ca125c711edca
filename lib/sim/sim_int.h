/*
 * sim_int.h: what the files of the simulator share (not a public API).
 *
 * One `sim` holds a whole simulation: the module and hardware, each
 * device's streams, links and symmetry class, the type locations, the
 * per-value instance tables and the memory events. The files split it by
 * concern:
 *   - sim.c     the driver: sim_run, the per-device results, the options;
 *   - cost.c    the cost model: an op's compute time (roofline or measured),
 *               a collective's time over a group;
 *   - sched.c   the walk in program order: every op on its streams and links,
 *               sends, collectives, pmaps and symmetry; op prices memoized;
 *   - memory.c  type locations, value instances, memory classes, and the
 *               memory events sorted into peaks and timelines;
 *   - work.c    the workspace that keeps the large tables between runs.
 * The small accessors used in the hot loops are static inline here.
 */
#ifndef DISTIR_SIM_INT_H
#define DISTIR_SIM_INT_H

#include <assert.h>
#include <stdint.h>
#include <string.h>

#include "sim/sim.h"

#define STREAM_COMPUTE 0
#define STREAM_SEND 1
#define STREAM_RECV 2
#define STREAM_COLL 3
#define NSTREAM 4

#define INST_PERSISTENT 1u
#define INST_GRADBUF 2u /* made by the backward pass: a gradient buffer if classified so */
#define INST_FUSED 4u   /* internal to a fused kernel: takes no memory */
#define INST_RECV 8u    /* made by a point-to-point transfer (the host syncs on it) */
#define INST_REPALLOC 16u /* sim_build_memory: an allocation of a representative (rep_alloc) */
/* Held inside another instance's storage (a dist.in_place gather's): no bytes of its own. */
#define INST_VIEW 32u
#define INST_GATHERED 64u /* the result of a dist.in_place gather: its input may be a view */

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

/*
 * Counters the memory-event sort needs (memory.c): radix_sort's 4 digits of
 * 16 bits, its largest, then bucket_sort's bucket ends (up to 2^16).
 */
#define SORT_RADIX_COUNTERS (4u << 16)
#define SORT_COUNTERS (SORT_RADIX_COUNTERS + (1u << 16))

/*
 * A communicator's collective stream on a device: NCCL runs each
 * communicator's collectives in order on its own stream, and those of
 * different communicators (the tensor-parallel group's and the data-parallel
 * group's) side by side, sharing only the links they cross.
 */
#define SIM_NCOMM 8 /* communicators kept apart per device; more share the last slot */
typedef struct sim_comm {
    uint64_t key; /* the group's devices, hashed (0: unused) */
    double free;  /* seconds: when its stream is next free */
} sim_comm;

typedef struct sim_dev {
    double free[NSTREAM]; /* seconds: when each stream is next free (STREAM_COLL: the last
                             collective's end on any communicator) */
    sim_comm comm[SIM_NCOMM];
    double host;          /* when the host has issued every kernel so far (host_overhead) */
    ivec busy[NSTREAM];   /* intervals per stream */
    ivec link[2][2];      /* intervals the intra- (0) and inter-node (1) links carry a transfer,
                             sending (LINK_TX) and receiving (LINK_RX): full duplex */
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
    uint64_t key; /* the communicator: sim_comm.key */
    double t;
} sim_grp;

/* A fused group of ops (fuse.c): its ops are fmembers[first .. first + n). */
typedef struct sim_fgroup {
    ir_id head;        /* its first op in program order, where the kernel runs */
    uint32_t first, n; /* n = 0: not a group (a single op) */
    int open;          /* planning: more ops may join (fuse.c's GROUP_*) */
    double t, flops;   /* its price (t < 0: not priced yet) */
} sim_fgroup;

/* A priced op signature: its representative op, hash, time and FLOPs. */
typedef struct sim_sig {
    ir_id op;
    uint64_t hash;
    double t, flops;
} sim_sig;

typedef struct sim {
    const ir_module *m;
    /*
     * Attribute keys asked of many ops, and values compared, as string ids
     * (ir_op_attr_key; 0: no op has it, or no string is it).
     */
    ir_id key_mesh, key_devices, key_index, key_mesh_axes, key_mem, key_accumulate, key_phase,
        key_transient, key_reduction, key_in_place;
    ir_id str_backward, str_optimizer;
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
    /*
     * Instances [1, arg_end) are the entry function's arguments', made first
     * (sim_once), [v][location] in argument order, each its own owner and
     * persistent. Those of a device a representative stands for are never
     * read again, so sim_build_memory walks that range by location (tlocs)
     * and reads only the representatives' (every argument on every device
     * is most instances of a large model: 4.7 million for gpt3-175b on
     * 1,024 GPUs with pp = 1).
     */
    uint32_t arg_end;

    uint8_t *vclass;   /* per value: sim_memclass */
    uint64_t nops;
    memev *ev;         /* every device's memory events, grouped by device */
    size_t cev;        /* capacity of ev */
    memev *tmp;        /* sort scratch */
    size_t ctmp;
    uint32_t *count;   /* radix counters (SORT_COUNTERS) */

    const sim_trace_sink *trace; /* opt->trace, or sim_run's array of events */
    int32_t *tsel;     /* with trace->select: the selected devices */
    uint32_t ntsel;
    uint64_t flow;     /* transfers numbered so far */
    ir_id chunk;       /* the top-level pmap being simulated, or 0 */
    int symmetric;     /* simulate symmetric pmaps once (see sim_pmap) */
    ir_id entry;       /* the entry function */
    double *memo;      /* per op: compute time and FLOPs (sim_cost_op), or NULL */
    /*
     * Per op: the one attribute the walk asks of it again and again (a pmap's
     * "devices", a tuple_get's "index", a collective's "mesh"), found once:
     * 0 not yet, 1 absent, else its index in attrs + 2.
     */
    uint32_t *opattr;
    uint8_t *opbits;   /* per op: OPB_* of its attributes, read once (an op in a called
                          function runs once per call), or NULL */
    struct sim_sig *sigs; /* top-level ops priced, by signature (sim_cost_op) */
    uint32_t nsig, csig;
    int broken;        /* a device standing for others was used on its own: rerun */
    sim_grp *grps;     /* mesh groups found (mesh_group), open addressing by (op, dev) */
    uint32_t ngrp, cgrp;
    int32_t *grpdev;   /* their devices */
    uint32_t ngrpdev, cgrpdev;
    int32_t *scratch;  /* sim_collective's group buffer */
    uint32_t cscratch;
    uint8_t *done;     /* sim_collective's marks over a mesh-form collective's instances */
    uint32_t cdone;
    uint32_t *fgrp;    /* with opt->fuse: per op, its fused group + 1, or 0 */
    uint8_t *vfused;   /* per value: used only inside its group (never materialized) */
    sim_fgroup *fgroups;
    uint32_t nfgroup, cfgroup;
    ir_id *fmembers;
    uint32_t nfmember;
} sim;

#define OPB_KNOWN 1u    /* the bits below are read */
#define OPB_ACCUM 2u    /* dist.accumulate: adds into its first input's storage */
#define OPB_BACKWARD 4u /* dist.phase = "backward" */
#define OPB_TRANSIENT 8u /* dist.transient: its gradient is no gradient buffer (ZeRO-2/3) */
#define OPB_REDUCTION 16u /* dist.reduction_stream: runs on the reduction stream, not compute */
#define OPB_IN_PLACE 32u /* dist.in_place: gathers into the buffer that holds its input shard */

/* The context an op runs in: top level, or the instances of a pmap body. */
typedef struct ctx {
    uint32_t rep;        /* pmap instances simulated (1 at top level) */
    const int32_t *devs; /* device of each instance, NULL at top level */
    uint32_t sym;        /* instances each simulated instance stands for (1: none) */
} ctx;

/* The link class of a group: slowest link and whether it spans nodes. */
typedef struct group_info {
    uint32_t n;         /* devices */
    uint32_t nodes;     /* distinct nodes */
    uint32_t per_node;  /* most devices on one node */
    hw_link intra, inter;
} group_info;

/* ---- hot accessors (memory.c makes the instances, sched.c reads them) ---- */

/* The number of locations of value v's type (its type's locations are computed). */
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

/*
 * Mixes v into the hash h (device histories, hash tables): a hash-combine
 * step, not splitmix64 (di_mix64); changing it would change tie-breaking.
 */
static inline uint64_t
sim_hash_combine(uint64_t h, uint64_t v)
{
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h ^= h >> 31;
    h *= 0x7fb5d329728ea185ull;
    return h ^ (h >> 27);
}

/* ---- cost.c ---- */

/*
 * The compute time (seconds) and FLOPs of op on device dev: its roofline
 * cost, or the measured time of its signature. Fails with DI_ECOST when it
 * cannot be priced. sched.c memoizes it (op_time).
 */
int sim_cost_compute(sim *s, ir_id op, int32_t dev, double *t, double *flops);
/* The link class of the devices devs[0..n): nodes, most devices on one node, links. */
void sim_group_describe(const sim *s, const int32_t *devs, uint32_t n, group_info *g);
/* Seconds a collective of `kind` takes over group g with `bytes` per participant. */
double sim_collective_time(const sim *s, int kind, const group_info *g, double bytes);

/* ---- fuse.c ---- */

/* Plans the fused groups of s->m (s->fgrp, s->fgroups, s->vfused). */
void sim_fuse_plan(sim *s);
/* The FLOPs and bytes of fused group `group` (an index into s->fgroups) as one kernel. */
void sim_fuse_cost(const sim *s, uint32_t group, ir_cost *c);
/* A GEMM op's tile and wave quantization on dev (cost.c; 1 for other ops). */
double sim_op_gemm_efficiency(const sim *s, ir_id op, int32_t dev);
void sim_fuse_free(sim *s);
/*
 * Roofline time of work c of an op of `kind` in dtype dt on device dev, its
 * GEMM efficiency multiplied by q (cost.c).
 */
int sim_cost_roofline(sim *s, int32_t dev, int kind, ir_dtype dt, double q, ir_cost *c,
                      double *t);

/* ---- memory.c ---- */

/* Checks that dev is a device of the hardware (DI_EINVAL otherwise). */
int sim_dev_check(sim *s, int64_t dev);
/* The locations of a type (computed once per type); valid until the next call. */
int sim_type_locs(sim *s, ir_id type, const tloc **out, uint32_t *n);
/*
 * Whether the caller asked the run to stop (sim_options.cancel). Checked
 * between ops and in the memory pass's long loops, so that a cancelled run
 * of the largest modules returns within milliseconds.
 */
static inline int
sim_cancelled(const sim *s)
{
    return s->opt && s->opt->cancel && atomic_load_explicit(s->opt->cancel, memory_order_relaxed);
}

/*
 * The capacity a table of `have` entries grows to when it needs `need`: by
 * half at least, so that a workspace serving modules of growing sizes grows
 * (and faults fresh pages) rarely; at most UINT32_MAX.
 */
static inline size_t
sim_grown_cap(size_t have, size_t need)
{
    size_t cap = have + have / 2;
    if (cap < need)
        cap = need;
    if (cap > UINT32_MAX)
        cap = need > UINT32_MAX ? need : UINT32_MAX;
    return cap;
}

/* Room for `need` instances. */
void sim_inst_reserve(sim *s, size_t need);
/* count new instances, each its own owner; returns the first. */
uint32_t sim_inst_new(sim *s, uint32_t count);
/* Value v's instances for rep pmap instances on devs[0..rep) (NULL at top level). */
int sim_value_instances(sim *s, ir_id v, uint32_t rep, const int32_t *devs);
/* Gives value v one instance for all its locations; *idx receives its index. */
int sim_value_uniform(sim *s, ir_id v, uint32_t *idx);
/* Every value's memory class (s->vclass). */
void sim_classify(sim *s);
/* Every device's memory events, sorted, from the instances (after the walk). */
int sim_build_memory(sim *s, double step);
/* A device's peak, its composition and the timeline from its sorted events. */
void sim_device_memory(sim *s, int32_t dev, sim_device_result *r);

/* ---- sched.c ---- */

/* Simulates the ops of region in context c, in program order. */
int sim_region(sim *s, ir_id region, const ctx *c);

/* ---- work.c ---- */

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

/* Moves the tables of ws (or none) into s. */
void sim_tables_take(sim *s, sim_workspace *ws);
/* Moves the tables of s back into ws, or frees them when ws is NULL. */
void sim_tables_give(sim *s, sim_workspace *ws);
/* Frees a workspace's tables (not the workspace) and clears it. */
void sim_workspace_release(sim_workspace *w);

/* Whether op's string attribute key (a string id) is the string id str. */
static inline int
op_string_is(const ir_module *m, ir_id op, ir_id key, ir_id str)
{
    const ir_attr *a = ir_op_attr_key(m, op, key);
    return a != NULL && a->kind == IR_ATTR_STRING && a->s == str;
}

#endif
