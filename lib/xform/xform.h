/*
 * xform.h: the strategy transforms (docs/transforms.md).
 *
 * A strategy is data (proto message Strategy): data, tensor and pipeline
 * degrees, microbatches, the pipeline schedule, recomputation, weight
 * stashing, ZeRO, sequence parallelism, overlap of the gradient reduction,
 * and the order in which devices form the groups. xform_apply turns a
 * sequential training step (the local view on device 0, as `distir model`
 * writes it, or a forward function with a scalar loss, which is
 * differentiated first) into a distributed module in the local view:
 *
 *   1. placements on an extended mesh [microbatch, dp, tp] (dp.c, tp.c):
 *      batch data split along dimension 0 on the microbatch and data axes,
 *      weights split by their dist.tp annotation (column, row) on the tensor
 *      axis and, with ZeRO, along dimension 0 on the data axis;
 *   2. sharding propagation over every op of the step (shard.c), one rule
 *      per op kind in one table, which decides every value's placement and
 *      where a consumer needs a different one (a resharding collective);
 *   3. lowering (lower.c): each pipeline chunk (stage, microbatch, forward
 *      or backward) and each stage's optimizer step becomes a dist.pmap over
 *      the stage's devices whose body is the per-device program, with local
 *      shapes and mesh-form collectives on the stage mesh [dp, tp];
 *   4. the pipeline (pipeline.c, schedule.c): stages balanced by cost,
 *      chunks in the schedule's order, activations sent between stages,
 *      gradients accumulated across microbatches, recomputation and weight
 *      stashing.
 *
 * The distributed module's arguments are already distributed: tuples of
 * per-device tensors (weights replicated or sharded, batch data split per
 * microbatch), so a simulation does not pay for the initial scatter. Its
 * results stay distributed too. xform_layout says which sequential argument
 * or result each of them holds and how; xform_exec.h turns sequential
 * tensors into distributed ones and back with it.
 *
 * docs/transforms.md describes the rules, the layouts and the limits.
 */
#ifndef DISTIR_XFORM_H
#define DISTIR_XFORM_H

#include <stdint.h>

#include "base/base.h"
#include "ir/ir.h"

/* The target hardware (the simulator's hw.h); the transforms see it through cost.h. */
struct hw_model;
typedef struct hw_model hw_model;

struct Distir__V1__Strategy;

/* Values follow the proto enums. */
typedef enum xform_schedule {
    XFORM_SCHEDULE_DEFAULT = 0, /* 1F1B when pp > 1 */
    XFORM_SCHEDULE_GPIPE = 1,
    XFORM_SCHEDULE_1F1B = 2,
    XFORM_SCHEDULE_INTERLEAVED = 3,
} xform_schedule;

typedef enum xform_recompute {
    XFORM_RECOMPUTE_NONE = 0,
    XFORM_RECOMPUTE_SELECTIVE = 1, /* attention scores, softmax and its dropout */
    XFORM_RECOMPUTE_FULL = 2,      /* keep only stage inputs */
} xform_recompute;

typedef enum xform_stash {
    XFORM_STASH_NONE = 0,
    XFORM_STASH_PIPEDREAM = 1, /* one weight copy per in-flight microbatch */
    XFORM_STASH_2BW = 2,       /* one extra weight version per stage */
} xform_stash;

/*
 * One pipeline group's degrees, for nested parallelism (pipeline parallelism
 * where each stage is data parallel with a different degree).
 */
typedef struct xform_stage {
    uint32_t dp, tp;  /* 0 reads as 1 */
    uint32_t layers;  /* layers of the group's model stage; 0: balanced (all or none set) */
} xform_stage;

typedef struct xform_strategy {
    uint32_t dp, tp, pp;         /* degrees; 0 reads as 1 */
    uint32_t microbatches;       /* 0: pp */
    xform_schedule schedule;
    uint32_t virtual_stages;     /* interleaved: V model chunks per device (0 reads as 1) */
    xform_recompute recompute;
    xform_stash stash;
    uint32_t zero;               /* 0..3 */
    int sequence_parallel;
    int overlap_grad_reduce;
    uint32_t bucket_mb;          /* overlap_grad_reduce: bucket size in MiB (0: 25, as DDP) */
    /*
     * Device ids in rank order (tensor rank innermost, then data, then
     * pipeline stage): rank r = (stage * dp + d) * tp + t runs on
     * device_order[r]. Empty: rank r on device r, which puts tensor groups
     * inside a node when tp divides the node's device count. Points into
     * caller storage.
     */
    uint32_t ndevice_order;
    const uint32_t *device_order;
    /*
     * Per pipeline group (pp entries, or none): its data and tensor degrees
     * (then dp and tp must be 1) and optionally its layer count. Group g's
     * ranks follow group g-1's: rank = first(g) + d * tp_g + t. Stages are
     * balanced by cost per device, so a group with more devices gets more
     * layers. Points into caller storage.
     */
    uint32_t nstages;
    const xform_stage *stages;
    /*
     * The dist.layer values whose MatMuls are tensor parallel (data
     * parallelism where a subset of the layers is also tensor parallel);
     * empty: every layer. Outside them the weights are whole
     * and the tensor-parallel ranks compute the same thing, as Megatron-LM
     * does for the embedding and the head. Points into caller storage.
     */
    uint32_t ntp_layers;
    const uint32_t *tp_layers;
    xform_stage *owned_stages;   /* xform_strategy_from_proto's copy (xform_strategy_fini) */
} xform_strategy;

/* The gradient bucket of overlap_grad_reduce when bucket_mb is 0 (PyTorch DDP's bucket_cap_mb). */
#define XFORM_BUCKET_MB_DEFAULT 25u

/* Every degree 1, no options. */
void xform_strategy_init(xform_strategy *s);
/*
 * Copies a proto Strategy (device_order and tp_layers point into *p, the
 * stages are copied: free with xform_strategy_fini). Rejects zero > 3 or an
 * unknown enum.
 */
int xform_strategy_from_proto(const struct Distir__V1__Strategy *p, xform_strategy *s,
                              di_error *err);
void xform_strategy_fini(xform_strategy *s);
/* True when the strategy asks for nothing (simulate the module as given). */
int xform_strategy_is_trivial(const xform_strategy *s);
/* Writes "dp=2 tp=2 pp=2 m=8 1f1b ..." into buf (always terminated). */
void xform_strategy_format(const xform_strategy *s, char *buf, size_t size);

/*
 * Checks that s can apply to m (hw may be NULL: then the device count is not
 * checked). An impossible strategy is DI_ESTRATEGY with a message naming the
 * constraint: "dp*tp*pp = 32 exceeds the 16 devices of a100-dgx:2", "dp=4
 * does not divide the batch 6", "tp=3 does not divide the hidden size 1024",
 * "tp=8 does not divide the 12 heads", "pp=5 does not divide the 24 layers";
 * a module the transforms cannot handle is DI_EUNSUPPORTED.
 */
int xform_validate(const ir_module *m, const xform_strategy *s, const hw_model *hw,
                   di_error *err);

/*
 * Applies s to the sequential module m (see the top of this file). hw gives
 * the device count for validation (may be NULL). On success *out is a new
 * module the caller frees with ir_module_free.
 */
int xform_apply(const ir_module *m, const xform_strategy *s, const hw_model *hw, ir_module **out,
                di_error *err);

/* ---- layouts: what the distributed module's arguments and results hold ---- */

#define XFORM_AXIS_MB 0 /* microbatches (a loop in time, not devices) */
#define XFORM_AXIS_DP 1
#define XFORM_AXIS_TP 2
#define XFORM_NAXIS 3
#define XFORM_PLACE_R (-1)
#define XFORM_PLACE_P (-2) /* partial sum */

/*
 * One argument or result of the distributed module: a tuple with one tensor
 * per device of a group, device k at mesh coordinates (k / tp, k % tp) of
 * the group's degrees, and
 * what part of sequential value `index` each holds. A dimension split on
 * several axes is split microbatch-outermost, then tensor, then data
 * (XFORM_AXIS_MB, _TP, _DP from most to least significant).
 */
typedef struct xform_piece {
    uint32_t index;      /* the sequential module's argument or result index */
    uint32_t microbatch; /* the block along the microbatch axis when place[MB] splits */
    uint32_t stage;      /* device group: from layout->devices[group_first[stage]] */
    int8_t place[XFORM_NAXIS]; /* XFORM_PLACE_R, XFORM_PLACE_P or the split dimension */
} xform_piece;

typedef struct xform_layout {
    uint32_t size[XFORM_NAXIS]; /* microbatches, dp, tp (dp and tp 0 when groups differ) */
    uint32_t ngroup;            /* device groups (pipeline stages) */
    uint32_t *group_dp, *group_tp; /* per group: its degrees */
    uint32_t *group_first;      /* per group: the index of its first device in devices */
    int32_t *devices;           /* every group's dp * tp device ids, group after group */
    uint32_t nargs;
    xform_piece *args;          /* one per argument of the distributed module, in order */
    uint32_t nresults;
    xform_piece *results;       /* one per result, in order */
} xform_layout;

/* As xform_apply, and also the layout (caller frees with xform_layout_free). */
int xform_apply_layout(const ir_module *m, const xform_strategy *s, const hw_model *hw,
                       ir_module **out, xform_layout **layout, di_error *err);
void xform_layout_free(xform_layout *l);

/*
 * The pure tuple data-parallel form (tests/ir/seed001_mlp_dp.dir): the
 * batch arguments scattered from device 0 to devices[0..n), the weights
 * broadcast, one pmap over the devices for the forward and backward pass,
 * a tuple-form all_reduce per gradient, one pmap for the optimizer, and the
 * results brought back to device 0 (weights from replica 0, batch outputs
 * gathered, the loss averaged). grad_mean: average the gradients (reduction
 * "mean"), which makes the update equal the sequential one when the loss is
 * a mean over the batch; 0 gives that file's sum. The caller frees *out.
 */
int xform_data_parallel_tuple(const ir_module *m, uint32_t n, const int32_t *devices,
                              int grad_mean, ir_module **out, di_error *err);

#endif
