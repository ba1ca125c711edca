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

typedef struct hw_device {
    char kind[64];            /* "A100-SXM4-80GB" */
    double flops[IR_NDTYPE];  /* FLOP/s peak per dtype (index ir_dtype); 0 = unsupported */
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
    double max_efficiency;
    double half_flops;
    double elementwise_efficiency;
} hw_device;

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
    uint32_t *override_ids;    /* heterogeneous devices: ids ... */
    hw_device *overrides;      /* ... and their specs */
    hw_link intra_node;
    hw_link inter_node;
    hw_algo algorithm;
    double collective_step_latency; /* seconds added per algorithm step */

    uint32_t ntable;
    hw_coll_table *tables;
    uint32_t nop_time;
    hw_op_time *op_times;      /* sorted by signature */
} hw_model;

/* Builds a preset by name ("a100-dgx:4"). The caller frees with hw_free. */
int hw_preset(const char *name, hw_model **out, di_error *err);
/* The preset names, NULL-terminated (without ":N"). */
const char *const *hw_preset_names(void);
hw_model *hw_clone(const hw_model *hw);
void hw_free(hw_model *hw);

/* The spec of device id (an override or the default). */
const hw_device *hw_device_spec(const hw_model *hw, uint32_t id);
static inline uint32_t
hw_node_of(const hw_model *hw, uint32_t id)
{
    return hw->devices_per_node ? id / hw->devices_per_node : id;
}
/* The link between two distinct devices. */
const hw_link *hw_link_between(const hw_model *hw, uint32_t a, uint32_t b);

/* JSON (docs/hardware.md). hw_from_json parses with jansson; errors name the field. */
int hw_from_json(const char *text, size_t len, hw_model **out, di_error *err);
/* The caller frees the string with di_free. */
char *hw_to_json(const hw_model *hw);
/* Loads "FILE.json" or a preset name. */
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
/* Looks up a collective table time by interpolation (log-log); returns < 0 if none applies. */
double hw_table_time(const hw_model *hw, int kind, uint32_t group, int inter_node, double bytes);
/* An op's signature: "MatMul(f32[64,128],f32[128,256])"; writes into buf. */
void hw_op_signature(const ir_module *m, ir_id op, char *buf, size_t size);
/* A measured time for the op, or < 0 when none. */
double hw_op_time_lookup(const hw_model *hw, const char *signature);

/* Protobuf form (distir.v1.Hardware). */
struct _Distir__V1__Hardware;
int hw_from_proto(const struct _Distir__V1__Hardware *p, hw_model **out, di_error *err);
/* Fills *p with pointers into hw (valid while hw lives); free with hw_proto_fini. */
void hw_to_proto(const hw_model *hw, struct _Distir__V1__Hardware *p);
void hw_proto_fini(struct _Distir__V1__Hardware *p);

/* A stable content hash of the model (for cache keys). */
void hw_hash(const hw_model *hw, di_hash *out);

#endif
