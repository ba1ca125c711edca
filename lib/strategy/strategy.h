/*
 * strategy.h: a parallel strategy, the one type that the CLI, the daemon,
 * the transforms and the tests share.
 *
 * A strategy is data: data, tensor and pipeline degrees, microbatches, the
 * pipeline schedule, recomputation, weight stashing, ZeRO, sequence
 * parallelism, overlap of the gradient reduction, the order in which devices
 * form the groups, and for nested parallelism per-stage degrees and the
 * layers that are tensor parallel. It reaches the library in three forms,
 * and each goes through the same functions here:
 *
 *   CLI flags      strategy_set ("--dp 4" is strategy_set(s, "dp", "4"))
 *   proto message  strategy_from_proto (Distir__V1__Strategy)
 *   C code         fields set by hand
 *
 * then strategy_normalize, the one validator and normalizer: it refuses what
 * no strategy can be (DI_ESTRATEGY, one message per constraint) and fills in
 * the defaults, so that two strategies that mean the same thing become equal
 * field by field. The daemon's cache key is built from that form
 * (strategy_hash). What depends on the module (divisibility, layer counts,
 * device counts) is checked later by xform_validate.
 *
 * Adding an option: a field here, a line in the option table of strategy.c
 * (its flag), its proto field (strategy_from_proto/strategy_to_proto and
 * strategy_hash), and the transform that uses it.
 */
#ifndef DISTIR_STRATEGY_H
#define DISTIR_STRATEGY_H

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

struct Distir__V1__Strategy;

/* Values follow the proto enums. */
typedef enum strategy_schedule {
    STRATEGY_SCHEDULE_DEFAULT = 0, /* 1F1B when pp > 1 */
    STRATEGY_SCHEDULE_GPIPE = 1,
    STRATEGY_SCHEDULE_1F1B = 2,
    STRATEGY_SCHEDULE_INTERLEAVED = 3,
} strategy_schedule;

typedef enum strategy_recompute {
    STRATEGY_RECOMPUTE_NONE = 0,
    STRATEGY_RECOMPUTE_SELECTIVE = 1, /* attention scores, softmax and its dropout */
    STRATEGY_RECOMPUTE_FULL = 2,      /* keep only stage inputs */
    /*
     * torchtitan's op-level selective checkpointing: keep every other weight
     * GEMM's result (the first, third, ...) and fused attention's, recompute
     * the rest of the layer (recompute.c).
     */
    STRATEGY_RECOMPUTE_SELECTIVE_OP = 3,
} strategy_recompute;

typedef enum strategy_stash {
    STRATEGY_STASH_NONE = 0,
    STRATEGY_STASH_PIPEDREAM = 1, /* one weight copy per in-flight microbatch */
    STRATEGY_STASH_2BW = 2,       /* one extra weight version per stage */
} strategy_stash;

/*
 * The order of the rank axes, innermost first (Megatron-LM's --order, its
 * expert axis aside). Context parallelism sits between tensor and data in
 * both.
 */
typedef enum strategy_order {
    STRATEGY_ORDER_TP_DP_PP = 0, /* a pipeline stage's devices together (the default) */
    STRATEGY_ORDER_TP_PP_DP = 1, /* a data-parallel replica's stages together */
} strategy_order;

/* The gradient bucket of overlap_grad_reduce when bucket_mb is 0 (PyTorch DDP's bucket_cap_mb). */
#define STRATEGY_BUCKET_MB_DEFAULT 25u

/* The largest degree, stage count or device order strategy_normalize accepts. */
#define STRATEGY_MAX_DEGREE (1u << 20)
#define STRATEGY_MAX_MICROBATCHES (1u << 16)
#define STRATEGY_MAX_VIRTUAL_STAGES 1024u
#define STRATEGY_MAX_LIST (1u << 24) /* device_order and tp_layers entries */

/*
 * One pipeline group's degrees, for nested parallelism ("pipeline parallel
 * where each stage is data parallel with a different degree").
 */
typedef struct strategy_stage {
    uint32_t dp, tp; /* 0 reads as 1 */
    uint32_t layers; /* layers of the group's model stage; 0: balanced (all or none set) */
} strategy_stage;

/*
 * Fields at 0 ask for the default: dp, tp and virtual_stages 1, pp the
 * number of stages (or 1), microbatches pp, bucket_mb 25. After
 * strategy_normalize none is 0 except bucket_mb without overlap.
 */
typedef struct strategy {
    uint32_t dp, tp, pp;   /* degrees */
    uint32_t microbatches; /* per step */
    strategy_schedule schedule;
    uint32_t virtual_stages; /* interleaved: V model chunks per device (at least 2) */
    strategy_recompute recompute;
    strategy_stash stash;
    uint32_t zero; /* ZeRO stage, 0..3 */
    int sequence_parallel;
    int overlap_grad_reduce;
    uint32_t bucket_mb; /* overlap_grad_reduce: bucket size in MiB */
    /*
     * Device ids in rank order (tensor rank innermost, then data, then
     * pipeline stage): rank r = (stage * dp + d) * tp + t runs on
     * device_order[r]. Empty: rank r on device r, which puts tensor groups
     * inside a node when tp divides the node's device count.
     */
    uint32_t ndevice_order;
    uint32_t *device_order;
    /*
     * Without device_order: the rank axes' order. TP_PP_DP puts rank
     * ((d * cp + k) * pp + stage) * tp + t on the device the default puts
     * rank (stage * dp * cp + d * cp + k) * tp + t, so that a replica's
     * pipeline stages share a node and its data-parallel groups span nodes.
     * It needs the same degrees on every stage (no per-stage degrees), and
     * normalizes to the default where the two coincide (pp = 1 or dp cp = 1).
     */
    strategy_order order;
    /*
     * Per pipeline group (pp entries, or none): its data and tensor degrees
     * (then dp and tp must be 1) and optionally its layer count. Group g's
     * ranks follow group g-1's: rank = first(g) + d * tp_g + t. Stages are
     * balanced by cost per device, so a group with more devices gets more
     * layers.
     */
    uint32_t nstages;
    strategy_stage *stages;
    /*
     * The dist.layer values whose MatMuls are tensor parallel ("data
     * parallel where a subset of the layers are horizontal parallel");
     * empty: every layer. Outside them the weights are whole and the
     * tensor-parallel ranks compute the same thing, as Megatron-LM does for
     * the embedding and the head.
     */
    uint32_t ntp_layers;
    uint32_t *tp_layers;
    /*
     * Expert parallelism: the experts of MoE layers (weights a MatMul applies
     * per expert, [E, in, out]) split over ep data-parallel ranks, tokens
     * dispatched to them and back by all_to_all; their gradients are
     * reduced over the other dp / ep ranks only. ep divides dp; 1 or dp
     * today (xform_validate). 0 reads as 1.
     */
    uint32_t ep;
    /*
     * Context parallelism: the sequence dimension of the batch data (and so
     * of every activation) split over cp ranks, ranks ordered tensor
     * innermost, then context, then data; attention all-gathers the keys and
     * values over the cp group and reduce-scatters their gradients; weight
     * gradients are reduced over dp x cp. 0 reads as 1.
     */
    uint32_t cp;
    /*
     * Full recomputation of only the first recompute_layers transformer
     * layers of each model stage (a device's pipeline chunk), the others
     * keeping their activations: Megatron-LM's --recompute-method block
     * --recompute-num-layers N. 0: every layer (its uniform method, one
     * layer a checkpoint). Needs recompute full.
     */
    uint32_t recompute_layers;
} strategy;

/*
 * Every option unset (all fields 0). The three arrays belong to the
 * strategy: strategy_set, strategy_from_proto and strategy_copy allocate
 * them and strategy_fini frees them. Code that fills a strategy by hand
 * may point them at its own storage, and then does not call strategy_fini.
 */
void strategy_init(strategy *s);
void strategy_fini(strategy *s);
/* A deep copy into dst (not initialized); free with strategy_fini. */
void strategy_copy(strategy *dst, const strategy *src);

/*
 * Sets one option from its text form, as the CLI flags give it (the flag's
 * name without "--"): "dp" "4", "schedule" "interleaved:2", "stages"
 * "4x1:10,2x2:14", "tp-layers" "0-11,16", "overlap-grad-reduce" NULL.
 * Returns 0, DI_ENOTFOUND when name is not a strategy option, or
 * DI_ESTRATEGY for a value that option cannot take.
 */
int strategy_set(strategy *s, const char *name, const char *value, di_error *err);
/* 1 when the option name takes a value, 0 when it is a switch, -1 when it is not an option. */
int strategy_option_arity(const char *name);

/*
 * Checks s and fills in its defaults (see the top of this file); on
 * failure DI_ESTRATEGY, and s may be partly
 * filled in. Normalizing a normalized strategy changes nothing.
 */
int strategy_normalize(strategy *s, di_error *err);

/*
 * Decodes and normalizes a proto Strategy (NULL: the trivial strategy) into
 * *s (not initialized): free with strategy_fini, also after a failure.
 */
int strategy_from_proto(const struct Distir__V1__Strategy *p, strategy *s, di_error *err);
/*
 * Fills *p (initialized with DISTIR__V1__STRATEGY__INIT) from s; the
 * arrays it allocates are freed with strategy_proto_fini.
 */
void strategy_to_proto(const strategy *s, struct Distir__V1__Strategy *p);
void strategy_proto_fini(struct Distir__V1__Strategy *p);

/*
 * For the transforms, which also take strategies built by hand, the parts
 * of strategy_normalize that hold for any strategy: every value within its
 * range (0 still meaning the default), the per-stage degrees against pp,
 * and whether the stages are all alike and fix no layer count (then they
 * are the uniform strategy).
 */
int strategy_check_values(const strategy *s, di_error *err);
int strategy_check_stages(const strategy *s, uint32_t pp, di_error *err);
int strategy_stages_alike(const strategy *s);

/*
 * The pipeline group (stage) of each device id under s, in the transforms'
 * rank order (xf_device: tensor rank innermost, then context, then data,
 * group after group, each of dp x cp x tp ranks or its own degrees; under
 * STRATEGY_ORDER_TP_PP_DP a replica's groups together; device_order when
 * given), UINT32_MAX for a device no group uses. group has ndevice
 * entries. Returns the number of groups (pp, 1 when unset).
 */
uint32_t strategy_device_groups(const strategy *s, uint32_t ndevice, uint32_t *group);
/*
 * The device of a rank: the inner-th of pipeline group g's ranks (data x
 * context x tensor, tp tensor ranks innermost), rank the ranks before it in
 * group order: device_order[rank] when given, else under
 * STRATEGY_ORDER_TP_PP_DP ((inner / tp) pp + g) tp + inner % tp, else rank.
 * The one rank order of the transforms (xf_device) and strategy_device_groups.
 */
uint64_t strategy_rank_device(const strategy *s, uint64_t rank, uint32_t g, uint64_t inner,
                              uint64_t tp);

/* True when the normalized strategy asks for nothing (simulate the module as given). */
int strategy_is_trivial(const strategy *s);
/* Writes "dp=2 tp=2 pp=2 m=8 schedule=1f1b ..." into buf (always terminated). */
void strategy_format(const strategy *s, char *buf, size_t size);
/*
 * Feeds the normalized strategy to h as a fixed sequence of 64-bit
 * integers with counts before lists, so that no two different normalized
 * strategies share an encoding: the strategy's part of the daemon's cache
 * key. Changing it changes every key.
 */
void strategy_hash(const strategy *s, di_sha256 *h);

#endif
