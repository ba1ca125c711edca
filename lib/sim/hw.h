/*
 * hw.h: the hardware model: devices, nodes, a two-level link hierarchy, and
 * optional calibration tables that replace the formulas.
 *
 * Device ids are 0 .. ndevice-1 and are the ids the IR uses. Device d sits on
 * node d / devices_per_node. Two devices on one node talk over the
 * intra-node link (NVLink/NVSwitch), otherwise over the inter-node link
 * (InfiniBand). Bandwidths are bytes per second per direction; latencies and
 * overheads are seconds; FLOP rates are FLOP/s (dense peak).
 *
 * Presets (hw_preset) are built from shared/hardware/README.md figures:
 *   v100-dgx1[:N], a100-dgx[:N] (80 GB), a100-40g-dgx[:N], h100-dgx[:N],
 *   h200-dgx[:N], distir-classic[:D]
 * where N is the node count (8 GPUs each; default 1) and D the device count
 * of distir-classic (default 8, one device per node).
 */
#ifndef DISTIR_SIM_HW_H
#define DISTIR_SIM_HW_H

#include <stdint.h>

#include "base/base.h"
#include "ir/ir.h"

typedef enum hw_algo {
    HW_ALGO_AUTO = 0,     /* the cheapest of ring, tree and hierarchical */
    HW_ALGO_RING = 1,
    HW_ALGO_TREE = 2,
    HW_ALGO_HIERARCHICAL = 3,
    HW_ALGO_SLOWEST_LINK = 4,
} hw_algo;

/* Limits on a model (untrusted JSON and protobuf are checked against them). */
#define HW_MAX_DEVICES (1u << 20)   /* num_nodes * devices_per_node */
#define HW_MAX_TABLES 4096u         /* collective tables per model */
#define HW_MAX_POINTS (1u << 20)    /* points per collective table */
#define HW_MAX_OP_TIMES (1u << 20)  /* measured op times per model */
#define HW_SIGNATURE_MAX 4096       /* a buffer for hw_op_signature; longer ones are truncated */

typedef struct hw_device {
    char kind[64];            /* "A100-SXM4-80GB"; a label, not hashed */
    /*
     * FLOP/s dense peak per dtype (index ir_dtype); 0 = unsupported. Only
     * f32, f16, bf16, f64 and i8 may be non-zero (the dtypes the protobuf
     * Device carries); f32 is the plain (non-tensor-core) FP32 rate.
     */
    double flops[IR_NDTYPE];
    double flops_tf32;        /* FLOP/s TF32 tensor-core peak; recorded, not used yet */
    double memory_bytes;      /* bytes of device memory */
    double memory_bandwidth;  /* bytes/s */
    double launch_overhead;   /* seconds per kernel */
    /*
     * Matmul efficiency: a GEMM of f FLOPs reaches
     * max_efficiency * f / (f + half_flops) of peak (small GEMMs run far
     * below peak; half_flops is the size at which half of max is reached).
     * Other ops are memory-bound and reach elementwise_efficiency of the
     * memory bandwidth.
     */
    double max_efficiency;         /* fraction of peak, (0, 1] */
    double half_flops;             /* FLOPs */
    double elementwise_efficiency; /* fraction of memory bandwidth, (0, 1] */
    /*
     * Bytes of memory_bytes a training process cannot use for its tensors
     * (CUDA context, library workspaces, communication buffers, allocator
     * fragmentation); out-of-memory is judged against the rest.
     */
    double memory_reserved;
    /*
     * Seconds the host spends issuing each kernel (an eager framework's
     * Python and dispatch cost). The host issues kernels in program order
     * ahead of the device, which cannot start a kernel before it is issued:
     * small kernels run at the host's pace, large ones hide it. 0: never.
     */
    double host_overhead;
    /*
     * Streaming multiprocessors (a count). A GEMM runs as output tiles in
     * waves over them: tile and wave quantization (cost.c) lower its
     * efficiency when its shape fills the last wave or the last tiles
     * partly. 0: the efficiency curve alone.
     */
    double sms;
    /*
     * Special-function evaluations per second (exp, ...: the SMs' special
     * function units, 16 per SM per clock on V100, A100 and H100). Fused
     * attention spends one exponential per score on them besides its
     * tensor-core products (cost.c). 0: not priced.
     */
    double special_rate;
} hw_device;

/*
 * X(field, rule): the scalar figures of a device besides its FLOP rates, in
 * the order of the JSON form, the hash and the protobuf Device message (whose
 * fields have the same names). rule is HW_RULE_POSITIVE (> 0),
 * HW_RULE_NONNEG (>= 0) or HW_RULE_FRACTION (in (0, 1]); all must be finite.
 */
#define HW_RULE_POSITIVE 1
#define HW_RULE_NONNEG 2
#define HW_RULE_FRACTION 3
#define HW_DEVICE_FIGURES(X)                                                                       \
    X(memory_bytes, HW_RULE_POSITIVE)                                                              \
    X(memory_bandwidth, HW_RULE_POSITIVE)                                                          \
    X(launch_overhead, HW_RULE_NONNEG)                                                             \
    X(max_efficiency, HW_RULE_FRACTION)                                                            \
    X(half_flops, HW_RULE_NONNEG)                                                                  \
    X(elementwise_efficiency, HW_RULE_FRACTION)                                                    \
    X(memory_reserved, HW_RULE_NONNEG)                                                             \
    X(host_overhead, HW_RULE_NONNEG)                                                               \
    X(sms, HW_RULE_NONNEG)                                                                         \
    X(special_rate, HW_RULE_NONNEG)

typedef struct hw_link {
    double bandwidth; /* bytes/s per direction */
    double latency;   /* seconds */
} hw_link;

/* A measured collective time table: time for (group size, message bytes). */
typedef struct hw_coll_table {
    int kind;            /* ir_opkind of the collective (IR_OP_ALLREDUCE, ...) */
    uint32_t group;      /* devices in the group */
    int inter_node;      /* 0: measured inside one node; 1: across nodes */
    uint32_t npoint;
    double *bytes;       /* ascending message sizes, bytes */
    double *seconds;     /* measured time for each size */
} hw_coll_table;

/* A measured op time keyed by op signature (see hw_op_signature). */
typedef struct hw_op_time {
    char *signature;
    double seconds;
} hw_op_time;

typedef struct hw_model {
    char name[64];
    uint32_t num_nodes;
    uint32_t devices_per_node;
    uint32_t ndevice;          /* num_nodes * devices_per_node */
    hw_device device;          /* the default device */
    uint32_t noverride;
    uint32_t *override_ids;    /* heterogeneous devices: ascending ids ... */
    hw_device *overrides;      /* ... and their specs */
    hw_link intra_node;
    hw_link inter_node;
    hw_algo algorithm;
    double collective_step_latency; /* seconds added per algorithm step */

    uint32_t ntable;
    hw_coll_table *tables;     /* sorted by (kind, group, inter_node), unique */
    uint32_t nop_time;
    hw_op_time *op_times;      /* sorted by signature (strcmp), unique */
} hw_model;

/* The JSON name of an algorithm ("auto", "ring", ...) and back (-1 if unknown). */
const char *hw_algo_name(hw_algo a);
int hw_algo_from_name(const char *s);

/* A new empty model (all zero, so not yet valid); never NULL. Free with hw_free. */
hw_model *hw_new(void);
/*
 * Checks every range (docs/hardware.md): counts, positive finite bandwidths
 * and capacities, efficiencies in (0, 1], sorted unique overrides and tables.
 * Messages name the field in JSON terms ("device.memory_bandwidth: ...").
 */
int hw_validate(const hw_model *hw, di_error *err);
/*
 * Replaces the overrides with n (id, spec) pairs, copied and sorted by id.
 * Fails (leaving hw unchanged) on an id given twice or >= hw->ndevice.
 */
int hw_set_overrides(hw_model *hw, uint32_t n, const uint32_t *ids, const hw_device *specs,
                     di_error *err);
/*
 * Adds a collective table from npoint (bytes, seconds) pairs in any order,
 * replacing an existing table for the same (kind, group, inter_node). Points
 * are copied and sorted; sizes given twice are averaged. kind must be a
 * communication op; sizes and times positive and finite.
 */
int hw_add_table(hw_model *hw, int kind, uint32_t group, int inter_node, uint32_t npoint,
                 const double *bytes, const double *seconds, di_error *err);
/* Adds or replaces one measured op time (seconds >= 0). */
int hw_add_op_time(hw_model *hw, const char *signature, double seconds, di_error *err);

/* Builds a preset by name ("a100-dgx:4"). The caller frees with hw_free. */
int hw_preset(const char *name, hw_model **out, di_error *err);
/* The preset names, NULL-terminated (without ":N"). */
const char *const *hw_preset_names(void);
/* A deep copy (tables and op times included); the caller frees it with hw_free. */
hw_model *hw_clone(const hw_model *hw);
/* Frees a model and everything it owns; hw_free(NULL) does nothing. */
void hw_free(hw_model *hw);

/* The spec of device id (an override or the default). */
const hw_device *hw_device_spec(const hw_model *hw, uint32_t id);
/* The bytes a device's tensors can use: its memory less the process's reserve. */
static inline double
hw_device_capacity(const hw_device *d)
{
    return d->memory_reserved < d->memory_bytes ? d->memory_bytes - d->memory_reserved : 0.0;
}
static inline uint32_t
hw_node_of(const hw_model *hw, uint32_t id)
{
    return hw->devices_per_node ? id / hw->devices_per_node : id;
}
/* The link between two distinct devices. */
const hw_link *hw_link_between(const hw_model *hw, uint32_t a, uint32_t b);

/*
 * JSON (docs/hardware.md). hw_from_json parses with jansson; errors name the
 * field. It never touches the file system: calibration given as a file
 * ("csv", "op_times": "FILE") is accepted only by hw_load.
 */
int hw_from_json(const char *text, size_t len, hw_model **out, di_error *err);
/* Pretty JSON in a fixed key order, calibration inline; the caller frees it with di_free. */
char *hw_to_json(const hw_model *hw);
/*
 * Loads a preset name, or a JSON file (a name ending in ".json" or naming an
 * existing file). Relative calibration paths in the file resolve against the
 * file's directory.
 */
int hw_load(const char *name_or_path, hw_model **out, di_error *err);

/*
 * Calibration. A collective table CSV: a header line, then rows whose first
 * column is the message size in bytes and whose 4th column is the time in
 * nanoseconds (the format of vTrain's AR_GPU{n}_*.csv and of nccl-tests).
 * hw_load_collective_csv adds one table for `kind` and `group`.
 * Op times: a CSV of "signature,seconds" rows (see hw_op_signature).
 */
int hw_load_collective_csv(hw_model *hw, int kind, uint32_t group, int inter_node,
                           const char *path, di_error *err);
int hw_load_op_times(hw_model *hw, const char *path, di_error *err);
/*
 * Looks up a collective table time by interpolation (log-log) between
 * measured sizes, linear in bytes beyond the ends (docs/hardware.md);
 * returns < 0 if no table matches (kind, group, inter_node).
 */
double hw_table_time(const hw_model *hw, int kind, uint32_t group, int inter_node, double bytes);
/*
 * An op's signature: "MatMul(f32[64,128],f32[128,256])", then attributes as
 * "{key=value,...}" when it has any (docs/hardware.md). No value names or
 * devices. Writes at most size bytes into buf, always terminated.
 */
void hw_op_signature(const ir_module *m, ir_id op, char *buf, size_t size);
/* A measured time for the op, or < 0 when none. */
double hw_op_time_lookup(const hw_model *hw, const char *signature);

/*
 * Protobuf form (distir.v1.Hardware). The message has no calibration tables or
 * op times: hw_to_proto drops them and hw_from_proto yields none.
 */
struct Distir__V1__Hardware;
int hw_from_proto(const struct Distir__V1__Hardware *p, hw_model **out, di_error *err);
/* Fills *p with pointers into hw (valid while hw lives); free with hw_proto_fini. */
void hw_to_proto(const hw_model *hw, struct Distir__V1__Hardware *p);
void hw_proto_fini(struct Distir__V1__Hardware *p);

/*
 * A stable content hash of the model (for cache keys): SHA-256 over a
 * canonical encoding of every figure, table and op time; not the name nor
 * the device kind labels.
 */
void hw_hash(const hw_model *hw, di_hash *out);

#endif
