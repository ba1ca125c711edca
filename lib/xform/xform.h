/*
 * xform.h: the strategy transforms (docs/transforms.md).
 *
 * A strategy is data (lib/strategy/strategy.h): data, tensor and pipeline
 * degrees, microbatches, the pipeline schedule, recomputation, weight
 * stashing, ZeRO, sequence parallelism, overlap of the gradient reduction,
 * and the order in which devices form the groups. xform_apply turns a
 * sequential training step (the local view on device 0, as `distir model`
 * writes it, or a forward function with a scalar loss, which is
 * differentiated first) into a distributed module in the local view:
 *
 *   1. placements on an extended mesh [microbatch, dp, tp, cp] (dp.c, tp.c):
 *      batch data split along dimension 0 on the microbatch and data axes
 *      (and along the sequence, dimension 1, on the context axis),
 *      weights split by their dist.tp annotation (column, row) on the tensor
 *      axis and, with ZeRO, along dimension 0 on the data axis;
 *   2. sharding propagation over every op of the step (shard.c), one rule
 *      per op kind in one table, which decides every value's placement and
 *      where a consumer needs a different one (a resharding collective);
 *   3. lowering (lower.c): each pipeline chunk (stage, microbatch, forward
 *      or backward) and each stage's optimizer step becomes a dist.pmap over
 *      the stage's devices whose body is the per-device program, with local
 *      shapes and mesh-form collectives on the stage mesh [dp, tp] ([dp, cp,
 *      tp] with context parallelism);
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
#include "strategy/strategy.h"

/* The target hardware (the simulator's hw.h); the transforms see it through cost.h. */
struct hw_model;
typedef struct hw_model hw_model;

/*
 * The trivial strategy in the form the transforms take directly: every
 * degree 1, one microbatch, no options (unlike strategy_init, which leaves
 * every option unset for strategy_normalize to fill in). xform_apply does
 * not normalize: fields at 0 read as their defaults, as in strategy.h.
 */
void xform_strategy_init(strategy *s);

/*
 * Checks that s can apply to m (hw may be NULL: then the device count is not
 * checked). An impossible strategy is DI_ESTRATEGY with a message naming the
 * constraint: "dp*tp*pp = 32 exceeds the 16 devices of a100-dgx:2", "dp=4
 * does not divide the batch 6", "tp=3 does not divide the hidden size 1024",
 * "tp=8 does not divide the 12 heads", "pp=5 does not divide the 24 layers";
 * a module the transforms cannot handle is DI_EUNSUPPORTED.
 */
int xform_validate(const ir_module *m, const strategy *s, const hw_model *hw,
                   di_error *err);

/*
 * The transforms' analysis of a sequential module (which arguments are
 * data and weights, each op's phase, layer and tensor-parallel role: the
 * dist.* annotations read once), made once and shared by the validations of
 * many strategies, so that a search does not read every op's attributes
 * again per candidate. xform_analysis_new fails as xform_validate of the
 * trivial strategy does (then *out is NULL). The analysis reads m (or a
 * differentiated copy of a forward-only m, which it owns): m must outlive
 * it. Once made it is read only: threads may share it.
 */
typedef struct xform_analysis xform_analysis;
int xform_analysis_new(const ir_module *m, xform_analysis **out, di_error *err);
void xform_analysis_free(xform_analysis *a);
/* xform_validate(m, s, hw, err) for a's module, the same answer and message, without analyzing it. */
int xform_validate_analyzed(const xform_analysis *a, const strategy *s, const hw_model *hw,
                            di_error *err);

/*
 * What the transforms see in a sequential module, the facts a strategy's
 * degrees must fit: the search (lib/search) builds its space from them, so
 * that the space and xform_validate agree.
 */
#define XFORM_ARG_DATA 1   /* batch data (tokens, labels, x, any integer): split on dimension 0 */
#define XFORM_ARG_WEIGHT 2 /* any other floating-point argument: weights, optimizer state */

typedef struct xform_model_facts {
    int64_t batch;   /* dimension 0 of the batch-data arguments, -1 when there are none */
    uint32_t layers; /* distinct dist.layer values: pp (times V) must divide them */
    int64_t heads;   /* attention heads tp must divide (dist.tp "heads"), 0 when none */
    int64_t hidden;  /* the hidden size tp must divide (column-parallel MatMul), 0 when none */
    /*
     * The arguments of the step the transforms take: m's entry function's, then, when m is
     * forward-only, the optimizer state its differentiation appends.
     */
    uint32_t nargs;
    uint8_t *arg_kind;     /* per argument: XFORM_ARG_DATA or XFORM_ARG_WEIGHT */
    uint64_t data_bytes;   /* the batch-data arguments, bytes */
    uint64_t weight_bytes; /* the weight arguments (optimizer state included), bytes */
    /*
     * Activations a layer keeps for the backward pass, for the whole batch,
     * the least over the layers (0 without layers), per recomputation mode
     * (strategy_recompute: none, selective, full). A view counts as the
     * value it views, each storage once. Kept values are live from their
     * forward op until the layer's backward has read them:
     *   none: every value a forward op of the layer makes and a backward op
     *         reads;
     *   selective: those but the attention core's (recomputed);
     *   full: the layer's inputs from outside it (its checkpoint).
     */
    uint64_t saved_min[3];
    /*
     * The forward ops selective recomputation repeats (the attention core's: the scores'
     * MatMul, scale and mask, softmax and dropout, xf_recompute_mark); 0 when the attention
     * is fused (FlashAttention keeps no scores) or there is none, and then selective
     * recomputation builds the same program as none.
     */
    uint32_t selective_ops;
    /*
     * The ops sequence parallelism splits along the sequence: those with a dist.seq hint, and
     * the forward Gathers whose indices are batch data of rank 2 or more (an embedding's
     * lookup of tokens); 0 (an MLP) when sequence parallelism builds the same program as
     * tensor parallelism alone.
     */
    uint32_t sequence_ops;
    /*
     * The least over the layers of a layer's weights and optimizer state
     * (the weight arguments its forward ops read, and the arguments an
     * optimizer update of one of them reads), bytes; 0 without layers.
     */
    uint64_t state_min;
    /* The same of a layer's parameters alone (the weights its forward ops read). */
    uint64_t param_min;
    /*
     * The same of a layer's gradients as the microbatches accumulate them and
     * the data-parallel reduction carries them: the gradient inputs of the
     * optimizer updates of its weights, at their dtype, or at the dtype before
     * the step's cast where mixed precision accumulates in 16 bits.
     */
    uint64_t grad_min;
    /*
     * Mixtures of experts: the experts of the MoE layers (the first layer's
     * count; 0 without experts), which ep must divide, and the bytes of the
     * expert weights and their optimizer state (part of weight_bytes), what
     * expert parallelism splits.
     */
    int64_t experts;
    uint64_t expert_bytes;
    int64_t seq; /* dimension 1 of the batch data (what cp splits), 0 when a datum has none */
} xform_model_facts;

/*
 * Fills *f (any contents) with m's facts. Fails as xform_validate of the
 * trivial strategy does (DI_EUNSUPPORTED for a module the transforms cannot
 * take); then there is nothing to free. On success free with
 * xform_model_facts_fini.
 */
int xform_model_facts_init(xform_model_facts *f, const ir_module *m, di_error *err);
void xform_model_facts_fini(xform_model_facts *f);
/*
 * The dimension along which ZeRO splits a tensor over n data ranks, from its
 * dims per device under tensor parallelism (rank of them; tp_dim the one the
 * tensor axis splits, -1 if none): 0 when n divides it (inside the tensor
 * split there, if any), else the first other dimension that n divides and
 * the tensor axis does not split; -1 when none does (the tensor stays whole
 * on the data ranks). DeepSpeed and Megatron-LM shard a flat buffer, so any
 * tensor; a split along a whole dimension is the nearest a placement gets.
 */
int xform_zero_dim(const int64_t *dims, uint32_t rank, int tp_dim, int64_t n);

/*
 * A parameter of a layer (xform_layer_facts.params: a weight argument a
 * layer's forward ops read; each once, with the first layer that reads it):
 * its layer index, its bytes per device and its dims per device (rank 0
 * for a scalar) under the tensor parallelism of the analysis, tp_dim the
 * one the tensor axis splits (-1 if none). ZeRO shards a parameter over the
 * data axis when xform_zero_dim finds a dimension for dp (dp.c).
 */
typedef struct xform_layer_param {
    uint32_t layer;
    uint32_t rank;
    int tp_dim;
    int64_t dims[IR_MAX_RANK];
    uint64_t bytes;
    uint64_t grad_bytes; /* its gradient's as accumulated (grad_min; 0: no update) */
    uint8_t bwd;         /* a backward op reads it (a GEMM's input gradient, a norm's) */
    uint8_t full;        /* so does a backward op or a forward op full recomputation repeats */
} xform_layer_param;

/*
 * A lower bound on the compute time of a layer on one device under s, for
 * a lower bound on a step's time (the search's time bound,
 * docs/search.md). The simulator prices a compute op of f FLOPs and B bytes
 * at no less than max(f per_flop + flop_fixed, B per_byte) + launch
 * (sim_op_bound_terms, device 0 of hw); an op's FLOPs and bytes for a
 * microbatch holding the fraction q of the batch are at least q times those
 * for the whole batch, and the tensor parallelism divides them where s's
 * placements split the op's work over the tensor axis. So a layer's ops of
 * one kind (forward, backward, or the forward ops the backward repeats
 * under a recomputation mode) take at least
 *   max(gemm_flop_s q + gemm_fixed_s, gemm_byte_s q) + gemm_launch_s
 * for their GEMMs (xform_gemm_time; gemm_flop_s q plus gemm_special_s q, fused
 * attention's exponentials, which tile and wave quantization do not touch)
 * and other_s q + other_launch_s more for the other ops (xform_work_time:
 * both) on one microbatch. Each term is the least over the layers.
 */
typedef struct xform_work_bound {
    double gemm_flop_s, gemm_fixed_s, gemm_byte_s, gemm_launch_s;
    double other_s, other_launch_s;
    /*
     * Bytes per device (whole batch) of the values that need a collective
     * over the tensor axis before the next op reads them: a forward op whose
     * result is partial on the tensor axis and which the next op wants split
     * (a reduce-scatter under sequence parallelism) or whole (an all-reduce:
     * tp_ar_bytes below), or split on it where the next op needs it whole
     * (sequence parallelism's all-gather), followed directly (views aside) by
     * a compute op that reads it and no other value needing one. The device's
     * compute stream (in program order) waits for each such collective, which
     * costs at least its kind's least latency terms plus its payload times its
     * kind's least slope over the tensor group. Forward and
     * repeated-forward slots only (the backward's:
     * xform_layer_time.bwd_tp_reduce_bytes); "next" in the repeated forward
     * is in the order the backward chunk emits its ops (a repeated op right
     * before its first use).
     */
    double tp_reduce_bytes;
    /* How many collectives those are, per microbatch (each costs at least the group's
       latency terms besides its payload's). */
    double tp_reduce_count;
    /*
     * The all-reduces (a partial sum the next op wants whole), apart:
     * tp_reduce_bytes and tp_reduce_count count the reduce-scatters and all-gathers only.
     * Each kind costs at least its own least terms (across nodes an all-reduce's slope
     * can be below an all-gather's; within a node it is about twice).
     */
    double tp_ar_bytes, tp_ar_count;
    double gemm_special_s; /* the GEMMs' special-function evaluations' seconds (whole batch) */
} xform_work_bound;

static inline double
xform_gemm_time(const xform_work_bound *w, double q)
{
    double g = (w->gemm_flop_s + w->gemm_special_s) * q + w->gemm_fixed_s, b = w->gemm_byte_s * q;
    return (g > b ? g : b) + w->gemm_launch_s;
}

static inline double
xform_work_time(const xform_work_bound *w, double q)
{
    return xform_gemm_time(w, q) + w->other_s * q + w->other_launch_s;
}

/*
 * A GEMM op of a layer, for the tile and wave quantization the work bound's
 * GEMM FLOPs leave out (it depends on the microbatch's shape): slot 0 the
 * forward, 1 the backward, 1 + r what recomputation mode r repeats; flop_s
 * its FLOPs for the whole batch (divided by the tensor parallelism where it
 * splits) times the device's seconds per FLOP; per output (MatMulGrad has
 * two), its dims on one device for the whole batch (the tensor axis split)
 * and the dimension a batch split divides (bdim; -1: none); fold as the
 * simulator's (sim_gemm_dims_shape).
 */
typedef struct xform_gemm {
    uint8_t slot, noutput, fold;
    uint32_t layer;
    double flop_s;
    struct {
        uint8_t rank;
        int8_t bdim;
        int64_t dims[IR_MAX_RANK];
    } out[2];
} xform_gemm;

/* The places of a layer's late tensor-axis reductions kept apart (xform_layer_time). */
#define XFORM_LATE_POS 4

/* One place of a pass's late tensor-axis reductions (xform_layer_time.bwd_tp_late). */
typedef struct xform_late_pair {
    double bytes, count;       /* reduce-scatters and all-gathers; collectives per microbatch */
    double ar_bytes, ar_count; /* the all-reduces, apart */
    xform_work_bound between;  /* the ops between the collective and its reader */
    double leaf_bytes, leaf_count; /* the gradient contributions those ops make */
} xform_late_pair;

/*
 * fwd, bwd and re[r], r a strategy_recompute (selective, full: what the
 * backward repeats, found as the pipeline assembly finds it); all 0 without
 * layers or hardware.
 */
typedef struct xform_layer_time {
    xform_work_bound fwd, bwd, re[3];
    /*
     * The ops outside the layers, whole: before the first layer's forward
     * (edge[0], the embedding; its backward edge[1]) and after the last
     * layer's (edge[2], the final norm, the head and the loss; their
     * backward edge[3]), on the first and the last pipeline stage. No
     * tensor-axis reductions counted (tp_reduce_bytes 0).
     */
    xform_work_bound edge[4];
    /*
     * The layers' GEMMs (gemm_flop_s is their flop_s summed, the least over
     * the layers); NULL when their batch dimensions are unknown. Owned by
     * the xform_layer_facts.
     */
    xform_gemm *gemms;
    uint32_t ngemm, nlayer;
    /*
     * Per recomputation mode: bytes per device (whole batch) of the backward
     * ops' results that need a collective over the tensor axis before the
     * next op reads them, as tp_reduce_bytes (the column-parallel GEMMs'
     * input gradients; under sequence parallelism the gathered output
     * gradients too), in the order the backward chunk emits its ops (each
     * repeated op right before its first use: one emitted between them is
     * the case below). The least over the layers.
     */
    double bwd_tp_reduce_bytes[3];
    double bwd_tp_reduce_count[3]; /* how many collectives, per microbatch */
    double bwd_tp_ar_bytes[3], bwd_tp_ar_count[3]; /* the all-reduces, apart (as tp_ar_bytes) */
    /*
     * Per recomputation mode and place k in the layer's backward chunk: the
     * same of the backward reductions whose reader comes after 1 to 4 other
     * compute ops of the layer (the weight gradient's cast to f32 between a
     * column-parallel GEMM's input gradient and the layer norm's gradient that
     * reads it), none a GEMM or a collective: the layer's k-th such pair in
     * emitted order (its last place, XFORM_LATE_POS - 1, sums the pairs from
     * there on); the least over the layers. Those ops run while the
     * collective does, so the bound adds the collective's time less
     * between's (their terms, the most over the layers, as the
     * work counts them) and less what else may run there (the accumulation of
     * the gradients they make, below), when positive: per place, as the pairs'
     * intervals are disjoint (a pair whose ops between accumulate a large weight
     * gradient hides its collective, and another's is exposed all the same).
     */
    /*
     * leaf_bytes and leaf_count: the gradient contributions those ops make
     * (bytes per device, whole batch, at their dtype, and how many; the most
     * over the layers): with several microbatches the chunk accumulates each
     * with an Add right after the op that makes it, which runs there too. A
     * superset (leaf_marks).
     */
    xform_late_pair bwd_tp_late[3][XFORM_LATE_POS];
    /*
     * The same of the repeated forward (re[r].tp_reduce_bytes those with no
     * op between), on the order in which the pipeline assembly emits it.
     */
    xform_late_pair re_tp_late[3][XFORM_LATE_POS];
    /*
     * Fused attention's blocks: [0] the keys and values the forward's
     * FlashAttention ops read (inputs 1 and 2), [1] those the backward's
     * gradient ops read, [2] the key and value gradients those make (outputs
     * 1 and 2); bytes per device (whole batch and sequence) and how many
     * tensors, the least over the layers. Under context parallelism ring
     * attention (lower.c) shifts each [0] and [1] block cp - 1 times and each
     * [2] block cp times, one dist.shift per tensor, all on the context
     * group's communicator (search_time_bound).
     */
    double ring_bytes[3], ring_count[3];
    /*
     * Mixtures of experts: the tokens expert parallelism moves by all_to_all
     * (lower.c), bytes per device (whole batch: at ep 1, where each device
     * holds every expert, the bytes each rank would send) and how many
     * tensors, the least over the layers (0 where a layer has no experts):
     * [0] the forward's, the dispatched tokens (moe.dispatch's result) and the
     * experts' output (moe.combine's input 0); [1] the backward's gradient of
     * that output (the backward moe.dispatch's result), which the experts'
     * backward GEMMs read.
     */
    double a2a_bytes[2], a2a_count[2];
} xform_layer_time;

/*
 * What the search's bounds need of the layers under s, from one run of the
 * analysis passes of xform_apply (without building the module): per
 * device, each value's bytes divided by the tensor parallelism where s's
 * placements split it over the tensor axis, saved_min, state_min,
 * param_min and grad_min as in xform_model_facts; params, every layer's parameters;
 * time, a layer's least compute time (xform_layer_time; flags:
 * XFORM_ANALYSIS_TF32, f32 GEMMs as TF32; XFORM_ANALYSIS_FUSED, a lower
 * bound that also holds when the simulator fuses kernels, sim_options.fuse,
 * with gradient accumulation fusion unless XFORM_ANALYSIS_NO_GRAD_ACCUM_FUSION,
 * sim_options.no_grad_accum_fusion).
 * The batch split (dp, microbatches) and context parallelism are
 * not applied. Fails as xform_validate does (then there is nothing to
 * free); on success free with xform_layer_facts_fini.
 */
typedef struct xform_layer_facts {
    uint64_t saved_min[3], state_min, param_min, grad_min;
    /*
     * Per recomputation mode: the most bytes per device (whole batch) that
     * one layer's backward ops and the forward ops it repeats (each right
     * before its first use, as the pipeline assembly emits them) hold live at
     * once, of the values they make that a batch split divides: the
     * backward's working set beside the kept activations (saved_min). The
     * least over the layers; 0 when unknown.
     */
    uint64_t work_set_min[3];
    /*
     * Per recomputation mode: the bytes per device (tensor-split) of the
     * layer's weights that those ops read, from the first reader to the last,
     * at the moment the working set is most (its first such moment, the most
     * of them there), the least over the layers: what ZeRO-3 holds gathered
     * beside the working set then. 0 when unknown.
     */
    uint64_t work_set_weights[3];
    /*
     * Per recomputation mode, two moments of that replay, each of its three
     * figures the least over the layers: the bytes per device live of values
     * no batch split divides (the weights' gradients and their casts, which
     * ZeRO-2 and -3 reduce-scatter and free rather than keep in a gradient
     * buffer), counted at their op and to their last reader among those ops:
     * fixed_at_most, at the working set's moment above; and fixed_most, the
     * moment they are most, with the batch-divided bytes (act) and the
     * weights read before and after (weights) there.
     */
    uint64_t work_set_fixed_at_most[3];
    struct xform_ws_moment {
        uint64_t act, weights, fixed;
    } work_set_fixed_most[3];
    /*
     * The state (weights, optimizer state), parameters and gradients (at the
     * updates' dtype) per device of the weights used only outside the
     * layers: [0] before the first layer (the embedding, on the first
     * pipeline stage), [1] after the last (the final norm and the head, on
     * the last stage); none a layer reads (state_min's), each counted where
     * first read (a weight both edges read, tied, only on the first).
     */
    uint64_t edge_state[2], edge_param[2], edge_grad[2];
    /*
     * Of edge_grad, the gradients of weights whose contributions are summed
     * (an Add, through widening Casts, makes the update's gradient: a tied
     * weight, read by the embedding and the head), in edge_grad_summed; and
     * the bytes of those contributions, in edge_grad_parts. The step
     * accumulates each contribution whole over the microbatches and combines
     * them once per step (pipeline.c), whatever the ZeRO stage, so ZeRO-2 and
     * -3 hold them whole, not a shard.
     */
    uint64_t edge_grad_summed[2], edge_grad_parts[2];
    /*
     * The activations the forward ops after the last layer (the final norm,
     * the head, the loss) make and keep for the backward, per device (whole
     * batch; not recomputed). The embedding's output, the first layer's
     * input, is not one: the layers' saved bytes count each layer's output
     * where the next layer reads it, so a stage's first input is counted in
     * the stage before, as the embedding's would be.
     */
    uint64_t head_saved;
    /*
     * The same of the forward ops before the first layer (the embedding's) that
     * no op of a layer reads: the embedding dropout's mask, not the embedding's
     * output (the first layer's input, counted as said above).
     */
    uint64_t embed_saved;
    xform_layer_param *params;
    uint32_t nparams;
    xform_layer_time time;
} xform_layer_facts;
enum {
    XFORM_ANALYSIS_TF32 = 1,
    XFORM_ANALYSIS_FUSED = 2,
    XFORM_ANALYSIS_NO_GRAD_ACCUM_FUSION = 4
};
int xform_layer_analysis(const ir_module *m, const strategy *s, const hw_model *hw,
                         unsigned flags, xform_layer_facts *out, di_error *err);
void xform_layer_facts_fini(xform_layer_facts *f);

/*
 * What a strategy will cost before any of it is done, for admission control
 * (a daemon refuses a request whose estimate exceeds its budget instead of
 * finding out by running out of memory). The simulator replays every op of
 * the distributed module once per microbatch per device group, so the work
 * and the memory grow with op_instances: the module's ops (three times over
 * when m is forward-only: differentiation adds the backward pass and the
 * optimizer) times the microbatches. bytes is op_instances times
 * XFORM_BYTES_PER_OP_INSTANCE, an upper figure from measurements (peak RSS
 * of `distir simulate` of gpt3-125m at 256 to 4,096 microbatches, pp 1 to 4,
 * tp 1 and 2, with and without recomputation: 180 to 195 bytes per op
 * instance) plus the module itself.
 */
#define XFORM_BYTES_PER_OP_INSTANCE 256u
typedef struct xform_estimate {
    uint64_t ops;          /* ops of one step, backward included */
    uint64_t microbatches; /* the strategy's, normalized */
    uint64_t op_instances; /* ops x microbatches */
    uint64_t bytes;        /* memory to transform and simulate, bytes */
} xform_estimate;
void xform_estimate_cost(const ir_module *m, const strategy *s, xform_estimate *out);

/*
 * Applies s to the sequential module m (see the top of this file). hw gives
 * the device count for validation (may be NULL). On success *out is a new
 * module the caller frees with ir_module_free.
 */
int xform_apply(const ir_module *m, const strategy *s, const hw_model *hw, ir_module **out,
                di_error *err);

/*
 * As xform_apply, but only the first `microbatches` of the strategy's
 * microbatches are emitted (every shape as with all of them; the last one
 * emitted is treated as the step's last: it completes the gradients and the
 * optimizer step follows). The module times a step with fewer microbatches
 * of the same size, for extrapolation (lib/search compose); it is not the
 * step (its gradients sum fewer microbatches) and has no layout.
 * microbatches >= the strategy's gives xform_apply's module.
 */
int xform_apply_partial(const ir_module *m, const strategy *s, const hw_model *hw,
                        uint32_t microbatches, ir_module **out, di_error *err);
/*
 * xform_apply (microbatches 0) or xform_apply_partial of a's module, the
 * same module, from its analysis (xform_analysis_new) instead of analyzing
 * the module again: a search transforms one module many times.
 */
int xform_apply_analyzed(const xform_analysis *a, const strategy *s, const hw_model *hw,
                         uint32_t microbatches, ir_module **out, di_error *err);

/*
 * A pipeline chunk: the forward (XFORM_CHUNK_F) or backward (XFORM_CHUNK_B)
 * pass of model stage `stage` for microbatch `mb`.
 */
#define XFORM_CHUNK_F 0
#define XFORM_CHUNK_B 1
typedef struct xform_chunk {
    uint8_t kind;
    uint32_t stage; /* model stage: pipeline group stage mod p */
    uint32_t mb;
} xform_chunk;
/*
 * Pipeline group g's chunks in program order (2 V m of them) under a
 * schedule (strategy_schedule, resolved: GPipe, else 1F1B, interleaved when
 * V > 1) of p groups, V model stages per group and m microbatches
 * (schedule.c says what each does): the order xform_apply emits. Writes the
 * first min(cap, 2 V m) of them to out and returns that count.
 */
uint32_t xform_group_sequence(int schedule, uint32_t p, uint32_t V, uint32_t m, uint32_t g,
                              xform_chunk *out, uint32_t cap);

/*
 * The layers (distinct dist.layer values) each pipeline group holds under s,
 * by the analysis of xform_apply without building the module: *out gets
 * *ngroup = pp counts (caller frees with di_free).
 */
int xform_stage_layers(const ir_module *m, const strategy *s, const hw_model *hw, uint32_t **out,
                       uint32_t *ngroup, di_error *err);
/*
 * The same per model stage: *nstage = pp x V counts, model stage k on
 * pipeline group k mod pp (caller frees *out with di_free).
 */
int xform_model_stage_layers(const ir_module *m, const strategy *s, const hw_model *hw,
                             uint32_t **out, uint32_t *nstage, di_error *err);

/* ---- layouts: what the distributed module's arguments and results hold ---- */

#define XFORM_AXIS_MB 0 /* microbatches (a loop in time, not devices) */
#define XFORM_AXIS_DP 1
#define XFORM_AXIS_TP 2
#define XFORM_AXIS_CP 3 /* context parallelism: the sequence (uniform over the groups) */
/*
 * The outer data axis: under expert parallelism over part of the data group
 * (1 < ep < dp) the data ranks are (outer, inner) = (dp / ep, ep), the inner
 * one XFORM_AXIS_DP (the expert group); size 1 otherwise.
 */
#define XFORM_AXIS_EDP 4
#define XFORM_NAXIS 5
/*
 * Is axis a outside (more significant than) axis b in the block index of a
 * dimension both split? Microbatch, then tensor, outer data, data, context;
 * but context outside tensor. Tensor, data and context never split one
 * dimension together (the order would be a cycle).
 */
static inline int
xform_axis_outer(int a, int b)
{
    static const int base[XFORM_NAXIS] = {0, 3, 1, 4, 2}; /* MB, DP, TP, CP, EDP */
    if (a == b)
        return 0;
    if ((a == XFORM_AXIS_CP && b == XFORM_AXIS_TP) || (a == XFORM_AXIS_TP && b == XFORM_AXIS_CP))
        return a == XFORM_AXIS_CP;
    return base[a] < base[b];
}

#define XFORM_PLACE_R (-1)
#define XFORM_PLACE_P (-2) /* partial sum */

/*
 * One argument or result of the distributed module: a tuple with one tensor
 * per device of a group, device k at mesh coordinates (k / (cp tp),
 * (k / tp) % cp, k % tp) on the data, context and tensor axes of the
 * group's degrees (the data coordinate x being (x / dp, x % dp) on the outer
 * and inner data axes when size[XFORM_AXIS_EDP] > 1, dp the group's), and
 * what part of sequential value `index` each holds. A dimension split on
 * several axes is split microbatch-outermost, then tensor, then outer data,
 * data, context (XFORM_AXIS_MB, _TP, _EDP, _DP, _CP from most to least
 * significant), except that context is outside tensor (sequence parallelism
 * splits a context rank's block of the sequence): xform_axis_outer.
 */
typedef struct xform_piece {
    uint32_t index;      /* the sequential module's argument or result index */
    uint32_t microbatch; /* the block along the microbatch axis when place[MB] splits */
    uint32_t stage;      /* device group: from layout->devices[group_first[stage]] */
    int8_t place[XFORM_NAXIS]; /* XFORM_PLACE_R, XFORM_PLACE_P or the split dimension */
} xform_piece;

typedef struct xform_layout {
    uint32_t size[XFORM_NAXIS]; /* microbatches, dp, tp, cp, outer dp (dp and tp 0 when groups
                                   differ; 0 read as 1 for cp and outer dp) */
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
int xform_apply_layout(const ir_module *m, const strategy *s, const hw_model *hw,
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

/*
 * The global view (docs/transforms.md, "The global view"). xform_annotate
 * inserts a dist.annotate_sharding of the value named value (placement text
 * as "S[1], R", one entry per axis of mesh) after its definition, for the
 * later uses to read. xform_shard propagates the annotations of a module
 * written sequentially into a global-view module: every tensor a dtensor
 * with a placement chosen by the factor rules, a dist.redistribute where
 * placements conflict, called functions specialised per call site.
 * xform_lower_global turns a global-view module into per-device programs
 * (dist.pmap over each mesh, mesh collectives). xform_is_global: the module
 * has annotations, redistributions, or calls and a mesh. xform_global_local
 * runs both when the module is global, else copies nothing and sets *out to
 * NULL. Callers free *out.
 */
int xform_annotate(ir_module *m, const char *value, const char *mesh, const char *placement,
                   di_error *err);
int xform_shard(const ir_module *m, ir_module **out, di_error *err);
int xform_lower_global(const ir_module *g, ir_module **out, di_error *err);
int xform_is_global(const ir_module *m);
int xform_global_local(const ir_module *m, ir_module **out, di_error *err);

#endif
