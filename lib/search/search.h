/*
 * search.h: the strategy search (docs/search.md). Given a sequential module,
 * a hardware model and a device count N, it enumerates the space of
 * strategies that use the N devices, evaluates each candidate with the real
 * transforms (xform_apply) and the real simulator (sim_run), and keeps the
 * best K candidates by an objective and the Pareto set over (step time, peak
 * memory per device).
 *
 * The pieces are separate so that a threaded driver (the daemon, later) can
 * run them: search_space_init builds the whole candidate list once
 * (immutable afterwards, shared read-only), workers take candidate indexes
 * from a shared counter (search_space_at), evaluate them on their own
 * search_evaluator (one simulator workspace each) and add the points to
 * their own search_result; search_result_merge then combines the workers'
 * results. Every order is by enumeration index, so the merged result is the
 * same whatever the worker count, the interleaving or the sharding:
 *
 *   search_space sp;  search_evaluator ev;  search_result r;
 *   search_space_init(&sp, m, hw, &cfg, &err);
 *   search_evaluator_init(&ev, &sp);
 *   search_result_init(&r, &sp);
 *   for (uint64_t c = 0; c < search_space_shard_size(&sp); c++) {
 *       search_point p;
 *       search_eval(&ev, search_space_at(&sp, c), &p);
 *       search_result_add(&r, &p);
 *   }
 *
 * This file is a pure library: no threads, no network, no database.
 */
#ifndef DISTIR_SEARCH_H
#define DISTIR_SEARCH_H

#include <stdatomic.h>
#include <stdint.h>

#include "base/base.h"
#include "ir/ir.h"
#include "sim/hw.h"
#include "sim/sim.h"
#include "strategy/strategy.h"
#include "xform/xform.h"

/* The largest number of values an allowed set of one axis may list. */
#define SEARCH_MAX_SET 64u
/*
 * Part of every search key with SIM_VERSION: changed whenever the bounds or the
 * plan change which candidates are counted under which status (the answer's
 * counts), so that a stored search of an older version is not served.
 */
#define SEARCH_VERSION "distir-search-51"

/* The sequence length from which the space has context parallelism unless told (cp). */
#define SEARCH_LONG_SEQUENCE 32768
/* The largest K of a top K (results hold K points). */
#define SEARCH_MAX_TOP 65536u

typedef enum search_objective {
    SEARCH_MIN_TIME = 0,       /* minimise the step time (default) */
    SEARCH_MAX_THROUGHPUT = 1, /* maximise tokens (or samples) per second per device */
    SEARCH_MIN_DEVICES = 2,    /* the fewest devices that reach target_step_s, then time */
    SEARCH_MIN_COST = 3,       /* the least device time per step (devices x step time), within
                                  target_step_s when one is given */
} search_objective;
#define SEARCH_NOBJECTIVE 4
/* "time", "throughput", "devices", "cost". */
const char *search_objective_name(search_objective o);

/*
 * The constraints that shape the space. A list axis with n == 0 allows
 * every value; a mask has one bit per value (bit v for value v) and 0 also
 * allows every value. search_config_init allows everything.
 */
typedef struct search_config {
    uint32_t devices; /* N; 0: every device of the hardware */
    /*
     * Several device counts (ascending once the space is built): the space
     * is the union of the spaces on each, device count outermost; devices is
     * then the largest. n == 0: the one count `devices`.
     */
    uint32_t ndevice_counts, device_counts[SEARCH_MAX_SET];
    uint32_t ndp, dp[SEARCH_MAX_SET];
    uint32_t ntp, tp[SEARCH_MAX_SET];
    uint32_t npp, pp[SEARCH_MAX_SET];
    /*
     * Context parallelism: the allowed cp (dividing the sequence); none
     * given: cp = 1, and every divisor when the sequence is at least
     * SEARCH_LONG_SEQUENCE tokens.
     */
    uint32_t ncp, cp[SEARCH_MAX_SET];
    uint32_t nmicrobatches, microbatches[SEARCH_MAX_SET];
    uint32_t nvirtual, virtual_stages[SEARCH_MAX_SET]; /* interleaved schedule's V */
    uint32_t schedules;         /* mask of strategy_schedule (GPIPE, 1F1B, INTERLEAVED) */
    uint32_t recomputes;        /* mask of strategy_recompute */
    /*
     * Under full recomputation, the allowed recompute_layers (Megatron-LM's
     * block method: the first N layers of each model stage, 0 every layer);
     * none given: 0 only.
     */
    uint32_t nrecompute_layers, recompute_layers[SEARCH_MAX_SET];
    uint32_t zeros;             /* mask of ZeRO stages 0..3 */
    uint32_t sequence_parallel; /* mask: bit 0 off, bit 1 on */
    uint32_t overlap;           /* mask: bit 0 off, bit 1 on (overlap_grad_reduce) */
    uint32_t orders;            /* mask of strategy_order ("order" "tp-dp-pp,tp-pp-dp") */
    /*
     * Also pipelines of 2 to SEARCH_NESTED_MAX_STAGES stages whose stages
     * have degrees of their own ("nested" "1"): every split of the devices
     * over the stages and of each stage's over dp x tp (docs/search.md).
     */
    int nested;
    double memory_headroom;     /* usable fraction of each device's memory, (0, 1]; default 1 */
    /*
     * The Pareto set holds only the points whose step time is at most this
     * many times the fastest point's (>= 1); 0: every point (the default).
     * Candidates whose time bound is above that are pruned (search_plan).
     */
    double pareto_within;
    /*
     * Re-simulate in full the composed points of the Pareto set too ("refine"
     * "all"), not only those of the top K (the default, "top"): every composed
     * estimate is within 1% of its full simulation's step and 0.5% of its peak
     * (docs/search.md), and a deep pipeline's full simulation costs hundreds of
     * microbatches'.
     */
    int refine_pareto;
    int no_compose;             /* simulate every candidate in full (no composed estimates) */
    uint32_t compose_saves;     /* compose only when it saves simulating this many microbatches
                                   (search_compose_counts); default SEARCH_COMPOSE_SAVES */
    int no_time_bound;          /* no branch and bound (search_plan): evaluate every candidate */
    int tf32;                   /* f32 GEMMs as TF32 (sim_options.tf32; "math" "tf32") */
    int fuse;                   /* fused element-wise kernels (sim_options.fuse; "kernels"
                                   "fused"); the time bound counts fused kernels then */
    int no_grad_accum_fusion;   /* sim_options.no_grad_accum_fusion ("grad-accum-fusion"
                                   "off"); only with fuse */
    search_objective objective;
    double target_step_s;         /* SEARCH_MIN_DEVICES (required), SEARCH_MIN_COST: a step time
                                     to reach; points slower rank after every point that reaches
                                     it. 0: none */
    double price_per_device_hour; /* reported: the cost of a step, of training (0: not) */
    double train_tokens;          /* reported: time and cost to train for these tokens (0: not) */
    uint32_t top_k;                    /* default 10, at most SEARCH_MAX_TOP */
    uint32_t shard_index, shard_count; /* this process evaluates index % count == shard_index */
} search_config;

void search_config_init(search_config *cfg);
/*
 * Sets one constraint from its text form, as the CLI gives it: "tp" "1,2,4",
 * "pp" "8", "microbatches" "4,8", "virtual-stages" "2", "schedule"
 * "gpipe,1f1b,interleaved:2" (":V" also adds V to virtual-stages),
 * "recompute" "none,full", "zero" "0,1", "sequence-parallel" "0,1",
 * "overlap-grad-reduce" "1", "devices" "16", "top" "5", "headroom" "0.9", "pareto-within" "1.25",
 * "objective" "time|throughput", "shard" "1/4". Returns 0, DI_ENOTFOUND for
 * an unknown name or DI_EINVAL for a bad value (err says which).
 */
int search_config_set(search_config *cfg, const char *name, const char *value, di_error *err);
/* "pp=8": search_config_set(cfg, "pp", "8"). */
int search_config_fix(search_config *cfg, const char *assignment, di_error *err);

/*
 * One point of the space: a uniform strategy (no per-stage degrees, no
 * tp_layers, the default device order, no weight stashing).
 */
/* The most pipeline stages a nested candidate has (search_config.nested). */
#define SEARCH_NESTED_MAX_STAGES 4u
/*
 * The most ways a nested space may split its devices over one pp (each
 * stage's count and its dp x tp; search_space_init refuses more).
 */
#define SEARCH_NESTED_MAX_SPLITS 10000u

typedef struct search_candidate {
    uint64_t index; /* enumeration index in the whole (unsharded) space */
    uint32_t dp, tp, pp, microbatches;
    uint32_t virtual_stages; /* 1 unless the schedule is interleaved */
    uint8_t schedule;        /* strategy_schedule: DEFAULT when pp = 1, else never */
    uint8_t recompute;       /* strategy_recompute */
    uint8_t zero;
    uint8_t sequence_parallel;
    uint8_t overlap;
    uint32_t ep; /* expert parallelism: 1, or dp when the model's experts divide by it */
    uint32_t cp; /* context parallelism (0 reads as 1) */
    uint8_t order; /* strategy_order: TP_PP_DP only where it places ranks apart (search.md) */
    uint16_t recompute_layers; /* full recomputation of each model stage's first N layers; 0 all */
    /*
     * Nested (search_config.nested): pp stages of their own degrees,
     * stage g data parallel over sdp[g] and tensor parallel over stp[g]
     * devices (strategy.stages), dp and tp then 1; 0: every stage dp x tp.
     */
    uint8_t nstages;
    uint32_t sdp[SEARCH_NESTED_MAX_STAGES], stp[SEARCH_NESTED_MAX_STAGES];
} search_candidate;

/* The devices c uses: dp tp pp cp, or the nested stages' dp tp summed. */
uint64_t search_candidate_devices(const search_candidate *c);

/*
 * Whether the rank order tp-pp-dp places c's ranks otherwise than the
 * default does on hw, as far as costs go: with pp > 1 and dp cp > 1, unless
 * the N devices fit one node or tp cp is a multiple of the devices per node
 * (then both orders give every node one (data, stage) block, the same nodes
 * relabelled), on hardware of identical devices.
 */
int search_order_matters(const hw_model *hw, const search_candidate *c);

/*
 * Fills *s (any contents) with c's strategy, normalized; free it with
 * strategy_fini (a nested candidate's stages are allocated).
 */
void search_candidate_strategy(const search_candidate *c, strategy *s);
/* strategy_format of the candidate's strategy. */
void search_candidate_format(const search_candidate *c, char *buf, size_t size);

/*
 * The space, in enumeration order (outermost first):
 *   pp    the divisors of N, ascending
 *   tp    the divisors of N / pp, ascending; dp = N / (pp tp)
 *   m     the divisors of batch / dp, ascending (1 for a module without batch data)
 *   schedule  none when pp = 1 (whatever the allowed schedules); else GPipe,
 *         1F1B, then interleaved with V = each divisor >= 2 of the layer count
 *   recompute none, selective, full; selective-op after them only when the
 *         allowed set names it (recomputes bit 3: not in the default space);
 *         with full, each allowed recompute_layers below the model's layers
 *         (0 only unless given)
 *   zero  0..3 when dp > 1, else 0 (ZeRO shards over the data axis)
 *   sp    off, then on when tp > 1 (sequence parallelism splits the tensor axis)
 *   overlap off, then on when dp > 1 (it overlaps the data-parallel reduction)
 *   ep    1, then every ep > 1 dividing dp and the experts (a model with experts)
 *   order tp-dp-pp, then tp-pp-dp where it puts ranks on other nodes
 *         (search_order_matters)
 * each filtered by the config's allowed values and by the strategy's limits
 * (STRATEGY_MAX_MICROBATCHES, STRATEGY_MAX_VIRTUAL_STAGES). Degrees that divide N but
 * not the module's heads, hidden size or layers stay in the space:
 * search_eval prunes them with xform_validate (SEARCH_PRUNED_INDIVISIBLE).
 */
typedef struct search_space {
    search_config cfg;
    const ir_module *module; /* borrowed: must outlive the space */
    xform_analysis *analysis; /* the transforms' analysis of module (search_space_analyse), or NULL */
    const hw_model *hw;      /* borrowed */
    uint32_t devices;        /* N */
    int64_t batch;           /* dimension 0 of the batch data, -1 when none */
    uint32_t layers;         /* distinct dist.layer values */
    double tokens_per_step;  /* elements of the "tokens" argument, else the batch */
    sim_model_stats stats;   /* of the module (model FLOPs for the MFU) */
    uint64_t state_bytes;    /* the module's floating-point non-data arguments: weights and
                                optimizer state, bytes */
    uint64_t data_bytes;     /* its batch-data arguments, bytes */
    uint64_t saved_min[3];   /* the activations a layer keeps per recomputation mode, the
                                least over the layers (xform_model_facts) */
    uint64_t state_min;      /* a layer's weights and optimizer state, the least */
    uint64_t param_min;      /* a layer's parameters alone (what its forward reads), the least */
    uint64_t grad_min;       /* a layer's gradients as accumulated (xform_model_facts), the least */
    uint32_t selective_ops;  /* the ops selective recomputation repeats (xform_model_facts):
                                0, and selective is none's twin */
    uint32_t sequence_ops;   /* the ops sequence parallelism splits (xform_model_facts): 0,
                                and sequence parallelism is its absence's twin */
    int64_t experts; /* the MoE layers' experts (0: none): ep in {1, dp} where they divide */
    int64_t seq;             /* the sequence cp must divide (0: no cp) */
    uint64_t expert_bytes;   /* the part of state_bytes that expert parallelism splits */
    /*
     * The same per device under each tensor parallelism of the space, with
     * and without sequence parallelism, for the memory bound, and a layer's
     * compute work there (time), for the time bound (xform_layer_analysis);
     * ok 0 where the analysis refused the degree.
     */
    uint32_t nlayer_mem;
    struct search_layer_mem {
        uint32_t tp;
        uint8_t sequence_parallel, ok;
        uint64_t saved_min[3], state_min, param_min, grad_min;
        uint64_t work_set_min[3], work_set_weights[3]; /* xform_layer_facts' */
        uint64_t work_set_fixed_at_most[3];            /* xform_layer_facts' */
        struct xform_ws_moment work_set_fixed_most[3]; /* xform_layer_facts' */
        uint64_t edge_state[2], edge_param[2], edge_grad[2]; /* xform_layer_facts' */
        uint64_t edge_grad_summed[2], edge_grad_parts[2];    /* xform_layer_facts' */
        uint64_t head_saved, embed_saved;                    /* xform_layer_facts' */
        xform_layer_time time;
        /* The least seconds per byte of a reduce-scatter or an all-gather over a tensor
           group (devices 0 .. tp - 1; sim_collective_slope), for the time bound's
           tensor-axis collectives, and the least seconds either takes whatever its payload
           (sim_collective_latency): each costs at least tp_alpha + tp_slope x its payload;
           an all-reduce tp_ar_alpha + tp_ar_slope x its payload. */
        double tp_slope, tp_alpha, tp_ar_slope, tp_ar_alpha;
        /*
         * The least over the layers of the seconds a layer's gradient
         * accumulation takes per microbatch after the first (ZeRO 0 and 1:
         * an in-place Add of each parameter's whole gradient, as the update
         * reads it, into its buffer: its bytes read twice and written once,
         * sim_op_bound_terms), for the time bound.
         */
        double accumulate_s;
        double add_per_byte, add_launch; /* those Adds' terms (sim_op_bound_terms) */
        /*
         * Seconds per byte a Concat of f32 gradients takes at least (sim_op_bound_terms):
         * ZeRO-2/3 copy each microbatch's sharded gradients into their buckets.
         */
        double concat_per_byte;
        /*
         * Per dp of the space (dps): the least over the layers of a layer's
         * parameters ZeRO shards at that dp (xform_layer_facts.params: dp divides
         * their dimension 0), bytes per device; NULL where refused.
         */
        uint64_t *zero_min;
        uint64_t *zero_grad_min; /* the same of those parameters' gradients (grad_bytes) */
        /*
         * Per dp of the space: the least over the layers of how many of a layer's
         * parameters ZeRO shards at that dp, and of how many of those a backward
         * op reads (ZeRO-3 gathers each before its uses in a forward chunk, and
         * those again in a backward chunk), and of those a backward op or a
         * forward op full recomputation repeats reads; NULL where refused.
         */
        uint32_t *zero_count_min, *zero_bwd_count_min, *zero_full_count_min;
        /*
         * Per batch split den = dp m of the space (ascending): time.*.gemm_flop_s
         * with each GEMM's tile and wave quantization at that microbatch's
         * shape (slots: forward, backward, re[1], re[2]), for the time bound.
         */
        uint32_t nsplit;
        struct search_split_gemm {
            uint64_t den;
            double gemm_flop_s[4];
        } *split;
    } *layer_mem;
    uint32_t ndp, *dps; /* the data-parallel degrees of the space, ascending */
    /*
     * The data-parallel group of the first pipeline stage per (dp, tp cp) of
     * the space (devices k tp cp, k < dp): the least seconds per byte of an
     * all-reduce, a reduce-scatter and an all-gather over it
     * (sim_collective_slope), for the time bound.
     */
    uint32_t ndp_group;
    struct search_dp_group {
        uint32_t dp, stride;
        double all_reduce, reduce_scatter, all_gather;
        double all_gather_alpha; /* the least seconds an all-gather takes (its latency terms) */
    } *dp_group;
    /*
     * The layers of each model stage the transforms give a pipeline of pp
     * groups and V virtual stages (xform_model_stage_layers), once per (pp, V) of
     * the space, for the time bound; nstage 0 where that was refused.
     */
    uint32_t nstage_layout;
    struct search_stage_layout {
        uint32_t pp, V, nstage;
        uint32_t *layers;
    } *stage_layout;
    /*
     * The pipeline schedule per (pp, V, m, schedule) of the space with
     * pp > 1 (sorted by those): each group's chunks in program order
     * (xform_group_sequence) give its in-flight forwards, for the memory
     * bound; group 0's, weighted by the stage layout's layers, the bubble,
     * for the time bound (pipe_bound in space.c): the layers of the chunks
     * of each span and of the stages the chains cross. ok 0 where the stage
     * layout was refused.
     */
    uint32_t npipe;
    struct search_pipe {
        uint32_t pp, V, m;
        uint8_t schedule, ok;
        uint8_t lf_late, same_mb; /* LF comes after B0; LF and LB are of one microbatch */
        /* Layers of the forward chunks before the first backward (B0), and of B0. */
        double warm_f, n_b0;
        /* Layers of the chunks after B0 up to the last forward (lf_late: B0 comes first). */
        double mid_f, mid_b;
        /* Layers of the backward chunks after the later of B0 and the last forward. */
        double tail_b;
        /* The same of the backward chunks of microbatches after the first. */
        double mid_b1, tail_b1;
        /* Layers of the forward chunks up to the last forward (when it precedes B0). */
        double pre_f;
        double n_first, layers;   /* model stage 0's layers; all layers */
        double above_b0;          /* layers of the model stages after B0's */
        double above_lf, above_lb; /* the same after the last forward's, the last backward's */
        double n_lb;              /* the last backward chunk's layers */
        /* Model stages: all, and those after B0's, LF's, LB's. */
        double stages, st_above_b0, st_above_lf, st_above_lb;
        /*
         * Per group g and its j-th model stage (g V + j): the forward chunks of
         * that stage the group runs before its first backward chunk (the
         * memory bound's in-flight microbatches); NULL where not counted.
         */
        uint32_t *inflight;
    } *pipe;
    double max_capacity;     /* the largest device memory of the hardware, bytes */
    /*
     * Identifies the search, whatever the shard: SHA-256 over "distir.search.v1",
     * ir_hash(module), hw_hash(hardware), N, every constraint (lists sorted, masks with
     * "0: every value" spelled out), the objective, K, SIM_VERSION and SEARCH_VERSION. Results carry it,
     * and only results with the same key merge. The daemon's key for a stored search.
     */
    di_hash key;
    /*
     * What a simulated candidate's figures depend on, whatever the search:
     * SHA-256 over "distir.search.eval.v1", ir_hash(module), hw_hash(hardware),
     * the memory headroom, the composition settings, TF32 and fusion,
     * SIM_VERSION and SEARCH_VERSION (not the constraints, objective, K,
     * devices or shard). The key of a search_memo's entries.
     */
    di_hash eval_key;
    int analysed; /* the bound analyses are made (search_space_analyse) */
    uint64_t ncandidate; /* the whole space (every shard) */
    search_candidate *candidates;
} search_space;

/*
 * Builds the space of m on hw under cfg (copied). Fails with DI_EINVAL on a
 * bad config (N above the hardware's device count, shard index out of range,
 * ...) or with the transforms' error when m cannot be analysed. On success
 * free with search_space_fini; on failure there is nothing to free.
 */
int search_space_init(search_space *sp, const ir_module *m, const hw_model *hw,
                      const search_config *cfg, di_error *err);
/*
 * search_space_init in two steps: the candidates and the key first (what a
 * stored search is found by), the analyses behind the bounds (layer_mem,
 * stage_layout, dps, dp_group) when search_space_analyse is called, which
 * must be before any evaluation, bound or plan. search_space_init does both.
 */
int search_space_init_keyed(search_space *sp, const ir_module *m, const hw_model *hw,
                            const search_config *cfg, di_error *err);
void search_space_analyse(search_space *sp);
void search_space_fini(search_space *sp);
/* xform_validate of s on the space's module and hardware (from its analysis once analysed). */
int search_space_validate(const search_space *sp, const strategy *s, di_error *err);
/* The number of candidates of this process's shard. */
uint64_t search_space_shard_size(const search_space *sp);
/* The k-th candidate of the shard (k < search_space_shard_size): whole-space index
 * shard_index + k * shard_count. */
const search_candidate *search_space_at(const search_space *sp, uint64_t k);
/* Sequential iteration over the shard: *cursor starts at 0. NULL at the end. */
const search_candidate *search_space_next(const search_space *sp, uint64_t *cursor);

/*
 * A lower bound on the simulated peak memory of the candidate's busiest
 * device, in bytes. The simulator holds every argument of the distributed
 * module from the start of the step (docs/simulator.md), and the
 * transforms give every element of the sequential module's arguments to at
 * least one device, and, without ZeRO, every element of its weights and
 * optimizer state to each of the dp data-parallel replicas (ZeRO 1 to 3 let
 * them arrive sharded over the data axis). So the N devices hold at least
 * data + state x (zero ? 1 : dp) bytes at time 0, and the busiest device at
 * least 1/N of that. search_eval prunes a candidate when the bound exceeds
 * the usable memory of the largest device (SEARCH_MEMORY_BOUND); the tests
 * check the bound against full simulations.
 */
uint64_t search_memory_bound(const search_space *sp, const search_candidate *c);
/* Whether a memory bound (search_memory_bound) exceeds the usable memory: the candidate is pruned. */
int search_memory_pruned(const search_space *sp, uint64_t bound);

/*
 * A lower bound on the candidate's simulated step time, in seconds (0 when
 * there is none: context or expert parallelism, no layers, measured op
 * times, devices of several kinds, an analysis the transforms refuse).
 * Only the layers' compute ops count (xform_layer_facts.time), w the least time
 * of one layer's forward, backward and repeated forward ops for one
 * microbatch on one device, w_g that of their GEMMs, c_g that of its
 * forward and backward GEMMs. Device d
 * of the pipeline, whose model stages hold N_d layers, runs its compute ops
 * one at a time: T >= m N_d w. Its GEMMs all depend on the first
 * microbatch's activations, which pass the GEMMs of the S_d layers of the
 * model stages before its first; its last GEMM is a backward one of its
 * lowest model stage, after which that microbatch's gradient passes the
 * backward GEMMs of the same S_d layers: T >= S_d c_g + m N_d w_g. (The
 * ops other than GEMMs and the repeated forward may run while the device
 * waits: recomputation needs only the stage's checkpoint.) And the first
 * stage's collective stream carries its data-parallel reductions and ZeRO's
 * gathers one at a time, each at least its bytes at the group's least
 * slope (dp_comm_bound in space.c). search_plan prunes on it
 * (SEARCH_TIME_BOUND); the tests check it against full simulations.
 */
double search_time_bound(const search_space *sp, const search_candidate *c);
/*
 * search_time_bound, or more where the pipeline's schedule says so: its chunks played out
 * in program order at search_time_bound's least times per layer, each waiting for its
 * input's chunk on another pipeline group (schedule_bound in space.c). It sees what the
 * closed form does not: the stalls of an interleaved schedule whose microbatches come
 * round again before the other groups have passed them on, a last stage the head makes
 * slower, the drain. It costs a walk over the 2 V m chunks of every group (0.2 ms on average
 * over the 954 candidates gpt3-175b's search on 1,024 GPUs evaluates, 7 ms at most), so
 * search_plan takes it only for the candidates that search_time_bound does not prune. Still
 * a lower bound; the tests check it against full simulations.
 */
double search_time_bound_schedule(const search_space *sp, const search_candidate *c);
/*
 * Whether c has no time bound because the transforms' analyses refuse its
 * degrees (its tensor parallelism, or its pipeline's stages over the
 * layers): such a candidate is indivisible, never a point of the answer.
 */
int search_time_bound_refused(const search_space *sp, const search_candidate *c);
/*
 * The composed estimate that ranks a composed candidate may fall below its
 * full simulation, which the time bound bounds (by at most 0.79% measured,
 * docs/search.md): branch and bound takes a composable candidate's bound
 * this much lower.
 */
#define SEARCH_COMPOSE_SLACK 0.02
/*
 * What a simulation costs besides its microbatches (the transforms, the step
 * program's set-up, the optimizer step), in microbatches of a full simulation
 * (measured on gpt3-175b: search_compose_counts).
 */
#define SEARCH_SETUP_MICROBATCHES 40u
/*
 * A composition simulates m1 + m2 + m3 microbatches in three runs, which pay
 * the set-up three times: two more than one full simulation.
 */
#define SEARCH_COMPOSE_SAVES (2 * SEARCH_SETUP_MICROBATCHES)
/*
 * A composition is kept when its two extrapolations, from (m1, m2) and from
 * (m2, m3), agree to m within these fractions of the latter (step time, and
 * every device's peak); otherwise the pipeline is not steady yet at m1 (a
 * queue still filling, a later regime) and the candidate is simulated in full.
 */
#define SEARCH_COMPOSE_CHECK_TIME 1e-3
#define SEARCH_COMPOSE_CHECK_MEMORY 5e-4

/* What became of a candidate. */
#define SEARCH_STATUS_LIST(X)                                                                      \
    X(OK, "ok")                     /* simulated, fits in memory */                                \
    X(OOM, "out_of_memory")         /* simulated, peak above the usable memory */                  \
    X(INDIVISIBLE, "indivisible")   /* pruned: xform_validate refuses the shapes */                \
    X(MEMORY_BOUND, "memory_bound") /* pruned: search_memory_bound above the usable memory */      \
    X(UNSUPPORTED, "unsupported")   /* pruned: the transforms cannot take the module so */         \
    X(FAILED, "failed")             /* valid, but the transform or the simulation failed */   \
    X(DUPLICATE, "duplicate")       /* pruned: simulates as an earlier candidate (search_twin) */ \
    X(TIME_BOUND, "time_bound")     /* pruned: its bounds cannot enter the answer (search_plan) */

typedef enum search_status {
#define SEARCH_STATUS_ENUM_(e, name) SEARCH_##e,
    SEARCH_STATUS_LIST(SEARCH_STATUS_ENUM_)
#undef SEARCH_STATUS_ENUM_
        SEARCH_NSTATUS
} search_status;

const char *search_status_name(int status);

/* A point's figures: what a simulation (full or composed) says of a candidate. */
typedef struct search_figures {
    int status;                 /* search_status */
    double step_time_s;         /* seconds; simulated candidates only */
    uint64_t peak_memory_bytes; /* the largest per-device peak */
    double tokens_per_s;        /* per device */
    double mfu;
} search_figures;

/*
 * A simulated candidate's figures, as a search found them: a composed
 * estimate (search_eval, when search_compose_counts says so) or a full
 * simulation (search_eval_full, or search_eval otherwise). The same for every
 * search of spaces with the same eval_key: simulations are deterministic.
 */
typedef struct search_memo_entry {
    search_candidate cand; /* its index is not part of it */
    uint8_t composed;
    uint8_t unsteady; /* composed, but its check failed: f is a full simulation's (compose) */
    search_figures f; /* status SEARCH_OK or SEARCH_OOM */
} search_memo_entry;

/*
 * Figures of simulated candidates of one eval_key: a caller's store of earlier
 * searches (the daemon's cache database), read by every evaluator of a search
 * at once (nothing changes it then), and each evaluator's journal of what it
 * simulated (search_evaluator.memo, .journal). An open-addressing table.
 */
typedef struct search_memo {
    search_memo_entry *v;
    uint32_t n, cap;
    uint32_t *slot; /* entry index + 1; 0: empty */
    uint32_t nslot; /* a power of two, at least twice n */
} search_memo;

void search_memo_init(search_memo *m);
void search_memo_fini(search_memo *m);
/* Adds e (figures of status OK or OOM only) unless m holds its candidate and kind already. */
void search_memo_add(search_memo *m, const search_memo_entry *e);
/* The entry of candidate c (its index aside), composed or full, or NULL. */
const search_memo_entry *search_memo_find(const search_memo *m, const search_candidate *c,
                                          int composed);
/*
 * e's canonical bytes, little-endian, for storage and checksums (doubles as
 * their bits): SEARCH_MEMO_BYTES of them.
 */
#define SEARCH_MEMO_BYTES 88
void search_memo_entry_pack(const search_memo_entry *e, uint8_t out[SEARCH_MEMO_BYTES]);
/*
 * The inverse, validated (degrees at least 1, a known schedule and
 * recomputation, ZeRO 0..3, a status OK or OOM, figures finite and not
 * negative): 0, or DI_EINVAL with the reason in err.
 */
int search_memo_entry_unpack(const uint8_t in[SEARCH_MEMO_BYTES], search_memo_entry *e,
                             di_error *err);
/*
 * Adds the len / SEARCH_MEMO_BYTES packed entries of data to m, each
 * validated; on an error (len not a multiple, an invalid entry) m keeps
 * the entries before it. 0 or DI_EINVAL.
 */
int search_memo_unpack_all(const uint8_t *data, size_t len, search_memo *m, di_error *err);
/* Every entry of m packed, in order, into *out (di_free it); *len bytes. */
void search_memo_pack_all(const search_memo *m, uint8_t **out, size_t *len);

typedef struct search_point {
    search_candidate cand;
    int status;                 /* search_status */
    double step_time_s;         /* seconds; simulated candidates only */
    uint64_t peak_memory_bytes; /* the largest per-device peak */
    double tokens_per_s;        /* per device */
    double mfu;
    /*
     * composed: the figures above are the composed estimate (search_eval,
     * docs/search.md), not a full simulation. They rank the point (top K,
     * Pareto set) whatever happens next, so that rankings do not depend on
     * which points were re-simulated. full: set by search_result_refine for
     * a composed point of the top K or the Pareto set: the full simulation
     * of the same candidate, the figures reported.
     */
    uint8_t composed, refined;
    uint8_t cached; /* the figures came from search_evaluator.memo (not simulated here) */
    uint8_t unsteady; /* composable, but its composition check failed: a full simulation's
                         figures (composed 0; compose in lib/search/space.c) */
    search_figures full;
} search_point;

/*
 * Evaluates candidates of one space; one per thread (it owns a simulator
 * workspace).
 */
typedef struct search_evaluator {
    const search_space *space;
    struct sim_workspace *ws;
    int own_ws; /* ws was made by search_evaluator_init (and is freed by _fini) */
    /*
     * The verdict of xform_validate on the last base strategy: the
     * candidate's degrees, microbatches and schedule with every option off
     * (no recomputation, ZeRO, sequence parallelism or overlap). Options only
     * add requirements, so when the base is refused every variant is too,
     * and the candidates that share a base are consecutive in the space.
     */
    int have_base;
    search_candidate base;
    int base_rc;
    /*
     * If non-NULL (the caller sets it after search_evaluator_init): polled by
     * the simulation of each candidate, which stops when it is set (the
     * candidate then counts as failed; a cancelled search is discarded).
     */
    const atomic_int *cancel;
    /*
     * If non-NULL (set by the caller): figures found here are taken rather
     * than simulated (the point's `cached`), and what is simulated is added
     * to the journal (a composed estimate or a full simulation, as
     * evaluated). The memo is only read, so evaluators of several threads
     * may share it; each needs its own journal.
     */
    const search_memo *memo;
    search_memo *journal;
    /*
     * A cancelled candidate's module (the cancel returns without freeing it:
     * a module of millions of ops takes milliseconds to free), freed by the
     * next evaluation or search_evaluator_fini, or taken by the caller
     * (search_evaluator_take_garbage) to free once it has answered.
     */
    ir_module *garbage;
    /* Testing only (NULL otherwise): set to 1 once a candidate's transform is done, before its
       simulation starts, so that a test can cancel inside the simulation. */
    atomic_int *test_flag_after_transform;
} search_evaluator;

/* The evaluator's garbage (above), now the caller's to free with ir_module_free; NULL if none. */
ir_module *search_evaluator_take_garbage(search_evaluator *ev);

void search_evaluator_init(search_evaluator *ev, const search_space *sp);
/*
 * The same with the caller's simulation workspace (results never depend on
 * it; a daemon worker keeps one per thread across its slices), or a new one
 * when ws is NULL; _fini frees only a workspace it made.
 */
void search_evaluator_init_ws(search_evaluator *ev, const search_space *sp,
                              struct sim_workspace *ws);
void search_evaluator_fini(search_evaluator *ev);
/*
 * Evaluates c: xform_validate of its base strategy, then of c itself (a
 * refusal prunes it: INDIVISIBLE or UNSUPPORTED), a duplicate of an earlier
 * candidate (search_twin: DUPLICATE), the memory bound (MEMORY_BOUND), xform_apply,
 * sim_run (or the composed estimate), then the memory check against memory_headroom times each
 * device's capacity. Always fills *out; returns its status.
 */
int search_eval(search_evaluator *ev, const search_candidate *c, search_point *out);
/*
 * Whether c simulates exactly as an earlier candidate of the space, its
 * twin (into *twin, whose index is unset): ZeRO-2/3 with overlap is
 * ZeRO-2/3 without (each microbatch's gradients are reduce-scattered as they
 * are made either way), with one microbatch 1F1B runs GPipe's order,
 * selective recomputation is none where it repeats no op (fused attention,
 * or none: search_space.selective_ops), and sequence parallelism is its
 * absence where it splits no op (an MLP: search_space.sequence_ops).
 * Only when the twin's schedule, ZeRO stage, overlap, recomputation and
 * sequence parallelism are allowed, so the twin is in the space. The tests
 * check every pruned duplicate's full simulation against its twin's.
 */
int search_twin(const search_space *sp, const search_candidate *c, search_candidate *twin);
/*
 * The microbatch counts m1 < m2 whose simulations compose candidate c
 * (search_eval), or 0 when c is simulated in full (composition off, or c
 * has too few microbatches for it to save anything: fewer than 2 (m1 + m2)).
 */
int search_compose_counts(const search_space *sp, const search_candidate *c, uint32_t *m1,
                          uint32_t *m2);
/* Evaluates c with a full simulation whatever the config, duplicates too (the reference
 * composition is checked against, and the figures of a point reported). */
int search_eval_full(search_evaluator *ev, const search_candidate *c, search_point *out);

/*
 * Branch and bound (plan.c, docs/search.md): the order in which a search's
 * workers take its candidates, and which ones they prune by the time bound.
 * A seed (2 K, from 16 to 64, and 8 more candidates of the whole space
 * that pass the memory bound and xform_validate, chosen by their time and
 * memory bounds: plan.c; then, round after round, the candidates that could
 * still enter the top K by the seed's points so far, the best optimistic
 * point first; then those no point so far dominates, the smallest optimistic
 * step time first) is evaluated first; then each other candidate of the shard whose time and
 * memory bounds, as its figures, would rank after K seed points and be
 * dominated by a seed point is pruned (SEARCH_TIME_BOUND) without being
 * validated, transformed or simulated, and the rest are evaluated
 * (search_eval). The decisions depend on the space alone, so the statuses,
 * counts and result are the same whatever the workers, their interleaving
 * or the shards. cfg.no_time_bound: no seed, nothing pruned by it.
 *
 * One search_plan per search, shared by its workers (read-only but for the
 * atomics and each seed slot, written once by the worker that evaluates it);
 * one search_planner per worker:
 *
 *   search_plan_init(&pl, &sp);              once, before the workers start
 *   search_planner_init(&w, &pl);            per worker, with its evaluator
 *   for (;;) {
 *       int k = search_plan_next(&w, &ev, &p);
 *       if (k == SEARCH_PLAN_END) break;
 *       if (k == SEARCH_PLAN_WAIT) { sleep a little; continue; }
 *       if (k == SEARCH_PLAN_POINT) search_result_add(&r, &p);
 *   }
 */
typedef struct search_plan {
    const search_space *sp;
    uint32_t seed_cap;        /* the seed's slots */
    uint64_t *seed;           /* whole-space indexes, by round, each the smallest bounds first */
    search_point *seed_point; /* per seed, written by the worker that evaluates it */
    uint8_t *is_seed;         /* per candidate of the space */
    uint64_t nranked, ranked_pos;
    uint64_t *ranked;         /* what a round may take, the best optimistic point first */
    uint64_t nby_time, by_time_pos;
    uint64_t *by_time;        /* the same, the smallest optimistic step time first */
    int pareto_phase;         /* the top K's rounds are over: rounds for the Pareto set */
    /*
     * Candidates of the whole space that may be feasible but have no time
     * bound (context or expert parallelism, devices of other kinds): no round
     * takes them, so while there are any the top K is not settled early.
     */
    uint64_t unbounded;
    /*
     * Set once the seed's rounds show that no candidate left can enter the top
     * K (search_plan_settled_top): then settled_top[0 .. nsettled_top) is the
     * answer's top K, best first, by the figures the search ranks (composed
     * estimates where composed). Written before the flag is set.
     */
    atomic_int top_settled;
    struct search_point *settled_top;
    uint32_t nsettled_top;
    uint32_t rounds;          /* the seed's rounds so far */
    uint64_t norder;
    uint64_t *order;          /* the shard's candidates but the first round's seeds
                                 (indexes), enumeration order */
    atomic_uint_fast64_t cursor;     /* positions: the seeds, then order */
    atomic_uint_fast32_t nseed;      /* seeds published (each slot written before) */
    atomic_uint_fast32_t seeds_done; /* seeds evaluated */
    atomic_int seeded;               /* no more rounds: nseed is final */
    atomic_int planning;             /* a worker is choosing the next round */
} search_plan;

typedef struct search_planner {
    search_plan *plan;
    uint64_t pos;         /* the position taken */
    int holding;          /* pos waits for the seed */
    int ready;            /* seeds_result holds the seed's points */
    struct search_result *seeds_result;
} search_planner;

#define SEARCH_PLAN_END 0   /* nothing left for this worker */
#define SEARCH_PLAN_POINT 1 /* *out is a point of the shard: add it to the worker's result */
#define SEARCH_PLAN_SKIP 2  /* a seed of another shard was evaluated: nothing to add */
#define SEARCH_PLAN_WAIT 3  /* the seed is not complete yet: call again a little later */

void search_plan_init(search_plan *pl, const search_space *sp);
void search_plan_fini(search_plan *pl);
void search_planner_init(search_planner *w, search_plan *pl);
void search_planner_fini(search_planner *w);
int search_plan_next(search_planner *w, search_evaluator *ev, search_point *out);
/* Whether the seed is complete: every round chosen and evaluated. */
int search_plan_seeded(search_plan *pl);
/*
 * Whether the top K is settled before the search ends: the seed's top-K
 * rounds are over, every candidate of the whole space either evaluated in
 * them or unable to enter the top K by its time bound (none without one),
 * so the whole search's top K is this one, whatever the Pareto rounds and
 * the shards find. Then *top and *n give it (owned by the plan, best first;
 * a composed point's figures are its estimate: the search's result reports
 * its full simulation). Any thread may ask, at any time after
 * search_plan_init.
 */
int search_plan_settled_top(search_plan *pl, const struct search_point **top, uint32_t *n);
/*
 * Whether the plan prunes c by the time bound (SEARCH_TIME_BOUND), once its
 * seed is evaluated (0 before, and without a seed): what search_plan_next
 * decides for a candidate outside the seed.
 */
int search_plan_prunes(search_planner *w, const search_candidate *c);
/*
 * search_result_refine for r, a worker's part of the plan's shard, once
 * its candidates are done: only the composed points that may be in the
 * whole answer. The shard's seed points are among the whole's, so a point
 * that K of them rank before and one of them dominates (search_result's own
 * rules, the point added to them when it is not a seed) is not in the
 * whole's top K or Pareto set and is not re-simulated; every point of the
 * whole answer is. Without a complete seed, all of r's (search_result_refine).
 */
uint32_t search_planner_refine(search_planner *w, search_evaluator *ev,
                               struct search_result *r);

/*
 * Counts, the top K by the objective (ties by enumeration index) and the
 * Pareto set over (step time, peak memory) among the feasible points (OK).
 * A point dominates another when it is no worse in both and better in one,
 * or equal in both with a smaller index: so the set holds one point per
 * distinct (time, memory) and does not depend on the order of additions.
 */
typedef struct search_result {
    di_hash key; /* the space's key */
    search_objective objective;
    double target_step_s;         /* the config's, for the ranking */
    double price_per_device_hour; /* the config's, for the report */
    double train_tokens;          /* the config's, for the report */
    double tokens_per_step;       /* the module's */
    uint32_t top_k;
    uint32_t devices; /* the largest device count of the space */
    uint32_t ndevice_counts, device_counts[SEARCH_MAX_SET]; /* every count (ascending) */
    uint64_t enumerated;            /* candidates seen (added) */
    uint64_t count[SEARCH_NSTATUS]; /* by status */
    uint64_t composed;              /* of the simulated (ok or out_of_memory): composed */
    /*
     * Of the simulated: figures from search_evaluator.memo. Where the figures
     * came from, not part of the answer: not in the JSON, the tables or
     * search_result_equal (the daemon reports it in SearchResult.cache_hits).
     */
    uint64_t cache_hits;
    uint32_t ntop;
    search_point *top; /* best first */
    uint32_t npareto, capacity_pareto;
    search_point *pareto; /* ascending step time (then memory, index) */
    double pareto_within; /* the config's: pareto holds steps <= this x pareto[0]'s; 0: all */
    int refine_pareto;    /* the config's: the Pareto set's composed points are re-simulated */
} search_result;

/* An empty result for sp's objective, K and device count; free with search_result_fini. */
void search_result_init(search_result *r, const search_space *sp);
void search_result_fini(search_result *r);
void search_result_add(search_result *r, const search_point *p);
/*
 * Adds src's counts and points to dst. Both must have the same key, objective,
 * K and device count (DI_EINVAL otherwise). Merging the results of disjoint
 * parts of a space gives the result of the whole.
 */
int search_result_merge(search_result *dst, const search_result *src, di_error *err);
/*
 * Re-simulates in full every composed point of the top K (and of the Pareto
 * set under refine_pareto) not re-simulated yet (search_point.full), so that
 * what is reported there is a full simulation. Ranks do not change. Returns
 * the number re-simulated. Call it on each part before merging (a worker's, a
 * shard's): the whole's points are among the parts' and carry their figures.
 * Without refine_pareto a point of the Pareto set reports its full simulation
 * exactly when it is in the top K too (the merge keeps that a function of the
 * set: a part's top point re-simulated there may be in the whole's Pareto set
 * only).
 */
uint32_t search_result_refine(search_evaluator *ev, search_result *r);
/* As search_result_refine, the points keep(ctx, p) is nonzero for only. */
uint32_t search_result_refine_if(search_evaluator *ev, search_result *r,
                                 int (*keep)(void *ctx, const search_point *p), void *ctx);
/*
 * The figures a point reports: the full simulation's when it has one
 * (search_result_refine), else its own.
 */
search_figures search_point_reported(const search_point *p);
/*
 * The top K as reported, into out (r->ntop points): ordered by the reported
 * figures (a point out of memory in its full simulation last), ties by
 * index. The set is the top K by rank (the estimates); the order within it
 * is the full simulations'. A function of the set, so merges keep it.
 */
void search_result_reported_top(const search_result *r, search_point *out);
/* Whether the two results are equal (counts, top and Pareto points). */
int search_result_equal(const search_result *a, const search_result *b);
/* Field by field (structure padding is not part of a point). */
int search_point_equal(const search_point *a, const search_point *b);

/*
 * Orders two points by the objective of r (its target for the devices and
 * cost objectives), ties by enumeration index: negative when a is better.
 * Total and a function of the two points only, so every set ordered by it
 * is the same whatever the order of additions.
 */
int search_point_compare(const search_result *r, const search_point *a, const search_point *b);
/* Whether n is a device count of r's space (devices, or one of device_counts). */
int search_result_has_devices(const search_result *r, uint64_t n);
/* The devices a point uses (dp x tp x pp). */
uint32_t search_point_devices(const search_point *p);
/*
 * For figures f of point p in r: the cost of one step (devices x step time x
 * r's price per device-hour) and the time to train for r's train_tokens
 * (train_tokens / tokens per step x step time; 0 without tokens per step).
 */
void search_point_train(const search_result *r, const search_figures *f, const search_point *p,
                        double *step_cost, double *train_s);

/*
 * JSON: {"search_key":"hex", "objective":..., "top_k":..., "devices":..., "enumerated":...,
 * "counts":{...}, "top":[...], "pareto":[...]}, each point with its
 * candidate fields, strategy text and figures (doubles to 17 digits, so a
 * JSON round trip is exact). The caller frees the text with di_free.
 */
char *search_result_to_json(const search_result *r);
/*
 * Parses that form into *r (not initialized); free with search_result_fini. Refuses
 * (DI_EINVAL, nothing to free) what no search writes: counts that do not add up to
 * "enumerated", a point whose dp*tp*pp is not "devices", more distinct points than
 * candidates counted ok, or one index with two different points.
 */
int search_result_from_json(const char *text, size_t len, search_result *r, di_error *err);
/* Human-readable tables of the top K and the Pareto set, and the counts. Caller frees. */
char *search_result_to_table(const search_result *r);

#endif
