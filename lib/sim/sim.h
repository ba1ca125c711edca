/*
 * sim.h: the simulator. Given a local-view module and a hardware model it
 * predicts the step time and each device's busy time and live memory over the
 * step, without running anything (docs/simulator.md).
 *
 * Each device has a compute stream, send and receive streams for point-to-
 * point transfers and a stream for collectives, and two link levels (intra-
 * and inter-node) that transfers and collectives contend for. An op starts
 * when its inputs are on its device and its stream is free, a collective
 * when all its participants are ready and their links idle. Ops are taken
 * in program order, so results are bit-identical run to run and independent
 * of threads. The implementation is split by concern: sim.c (the driver),
 * cost.c, sched.c, memory.c and work.c (see sim_int.h).
 */
#ifndef DISTIR_SIM_SIM_H
#define DISTIR_SIM_SIM_H

#include <stdatomic.h>
#include <stdint.h>

#include "base/base.h"
#include "ir/ir.h"
#include "sim/hw.h"

#define SIM_VERSION "distir-sim-35"

/* Memory classes; the order is the proto enum MemoryClass. */
#define SIM_MEMCLASS_LIST(X)                                                                       \
    X(WEIGHTS, "weights")                                                                          \
    X(GRADIENTS, "gradients")                                                                      \
    X(OPTIMIZER, "optimizer_state")                                                                \
    X(ACTIVATIONS, "activations")                                                                  \
    X(STASHED, "stashed_weights")                                                                  \
    X(COMM, "communication_buffers")                                                               \
    X(WORKSPACE, "workspace")

typedef enum sim_memclass {
#define SIM_MEMCLASS_ENUM_(e, name) SIM_MEM_##e,
    SIM_MEMCLASS_LIST(SIM_MEMCLASS_ENUM_)
#undef SIM_MEMCLASS_ENUM_
        SIM_NMEMCLASS
} sim_memclass;

const char *sim_memclass_name(int c);

typedef struct sim_trace_sink sim_trace_sink; /* below */

typedef struct sim_options {
    int no_overlap;                 /* serialize compute and communication per device */
    int tf32;                       /* f32 GEMMs run as TF32 at the device's flops_tf32 peak */
    int no_symmetry;                /* simulate every pmap instance (same results, slower) */
    int want_timeline;              /* record the live-memory timeline */
    uint32_t timeline_max_points;   /* per device; 0 = unlimited */
    const atomic_int *cancel;       /* if non-NULL and set, the run stops with DI_ECANCELLED */
    int strict;                     /* refuse ops with no cost rule (ir_op_has_cost_rule) instead
                                       of pricing them by their bytes */
    const sim_trace_sink *trace;    /* if non-NULL, every scheduled op goes there */
    int fuse;                       /* fuse element-wise chains into one kernel each (fuse.c),
                                       as Megatron-LM's fused kernels and JIT compilers do */
    int no_grad_accum_fusion;       /* with fuse: a weight gradient's cast and accumulation
                                       are kernels of their own (sim_fuse_epilogue's rule off) */
} sim_options;

void sim_options_default(sim_options *o);

typedef struct sim_mempoint {
    double time;                    /* seconds */
    uint64_t bytes;
    uint64_t by_class[SIM_NMEMCLASS];
} sim_mempoint;

typedef struct sim_device_result {
    int32_t id;
    double busy_s;          /* time any stream is active */
    double compute_s;       /* compute stream active */
    double comm_s;          /* communication streams active */
    double exposed_comm_s;  /* communication active while compute is idle */
    double idle_s;          /* step time - busy */
    uint64_t peak_memory_bytes;
    double peak_time_s;
    uint64_t peak_by_class[SIM_NMEMCLASS];
    uint64_t capacity_bytes;
    int oom;
    uint64_t oom_by_bytes;
    double flops;
    uint32_t ntimeline;
    sim_mempoint *timeline;
    int timeline_shared;    /* timeline belongs to device timeline_device's entry (the
                               representative that simulated this one): read, never free */
    int32_t timeline_device;
} sim_device_result;

/*
 * What a result was simulated with, so that a comparison can tell a change of
 * the module from a change of the settings (lib/sim/compare.c). sim_run sets
 * the simulator version, the options and the hardware's name; the caller that
 * knows them the strategy and the hardware's content hash
 * (sim_result_set_inputs). Empty strings: not recorded (results stored
 * before these were); have_options 0: the options not recorded.
 */
typedef struct sim_settings {
    char version[32];      /* SIM_VERSION */
    char hardware[64];     /* hw_model.name */
    char hardware_hash[65]; /* hw_hash, 64 hex digits, or "" */
    char *strategy;        /* strategy_format text (owned), or NULL */
    int have_options;
    int fuse, tf32, no_overlap, strict; /* sim_options' */
    int no_grad_accum_fusion;           /* sim_options' (0 without fuse) */
} sim_settings;

typedef struct sim_result {
    double step_time_s;
    uint32_t ndevice;
    sim_device_result *devices; /* ascending id */
    uint64_t peak_memory_bytes; /* max over devices */
    double flops;               /* total over devices: hardware FLOPs, recomputation and
                                   replicated work included */
    double peak_flops;          /* sum of the devices' peak FLOP/s (best floating dtype) */
    double hfu;                 /* flops / (step_time * peak_flops) */
    /* Set by sim_result_set_model (0 until then): */
    double model_flops;         /* per step: 6N per token plus attention */
    double tokens;              /* per step ("tokens" argument, else samples) */
    double mfu;                 /* model_flops / (step_time * peak_flops) */
    double tokens_per_s;        /* tokens / step_time */
    double bubble_fraction;     /* 1 - mean compute time / step time: compute idle (pipeline
                                   bubbles, exposed communication, load imbalance) */
    uint64_t ops;               /* ops simulated (pmap bodies counted per device) */
    sim_settings settings;
} sim_result;

/*
 * Records the strategy (its strategy_format text, or NULL) and the hardware's
 * content hash (or NULL) in r's settings.
 */
void sim_result_set_inputs(sim_result *r, const char *strategy, const di_hash *hw);

/*
 * What a sequential training step is worth (modelstats.c): parameters (the
 * entry arguments an optimizer updates), tokens per step (elements of the
 * "tokens" argument, else dimension 0 of the first argument), and model
 * FLOPs as Megatron-LM counts them: 6 N per token, N the active matmul
 * weights, plus attention (3x the forward matmuls between two
 * activations). model_flops is 0 when the module has no optimizer (no
 * parameters).
 */
typedef struct sim_model_stats {
    uint64_t parameters;
    /*
     * The parameters a token uses: each expert weight (an [E, in, out]
     * argument a MatMul applies per expert) counts top_k / E of itself, k
     * from the module's TopK; the same as parameters without experts.
     */
    uint64_t active_parameters;
    /*
     * Of the active parameters, those a MatMul or Gemm (or an opaque op)
     * reads, through views and casts: N of 6N. Not an embedding table only
     * looked up (a tied one the output layer reads counts once), a bias or a
     * norm's scale.
     */
    uint64_t matmul_parameters;
    double tokens;
    double flops_6n;
    double attention_flops;
    double model_flops;
} sim_model_stats;

void sim_model_stats_of(const ir_module *m, sim_model_stats *out);
/* Sets r's model_flops, tokens, mfu and tokens_per_s from the stats of the module simulated. */
void sim_result_set_model(sim_result *r, const sim_model_stats *st);

/* One scheduled op, for the trace. */
typedef struct sim_event {
    ir_id op;
    ir_id chunk;      /* the top-level pmap the op runs in (its dist.mb, dist.stage,
                         dist.phase name the pipeline chunk), or 0 */
    int32_t device;
    int32_t peer;     /* a transfer's other end, else -1 */
    uint64_t flow;    /* a transfer's number, the same at both ends (from 1), else 0 */
    uint8_t stream;   /* 0 compute, 1 send, 2 receive, 3 collective */
    double start, end;
} sim_event;

/*
 * Where scheduled ops go as they are scheduled (sim_options.trace), so a
 * trace never has to be held in memory. With select (per device id,
 * non-zero: record) the simulator keeps its symmetry and records a
 * representative's ops once for each selected device it stands for; with
 * select NULL every device is recorded and symmetry is off. The simulator
 * may start a run again without symmetry (docs/simulator.md): restart is
 * called first and must drop what was recorded.
 */
struct sim_trace_sink {
    const uint8_t *select;
    void *ctx;
    int (*restart)(void *ctx);
    void (*event)(void *ctx, const sim_event *e);
};

/*
 * Simulates the entry function of m on hw. On success *out holds a result the
 * caller frees with sim_result_free. When events is non-NULL, every scheduled
 * op is recorded there (the caller frees *events with di_free).
 */
int sim_run(const ir_module *m, const hw_model *hw, const sim_options *opt, sim_result **out,
            sim_event **events, uint32_t *nevent, di_error *err);

/*
 * A simulation workspace: the large tables of one simulation (instances,
 * per-value tables, memory events), kept between runs so that a long-lived
 * caller (a daemon worker, a search loop) does not map, fault and zero them
 * again for every module. One workspace serves one simulation at a time
 * (one per thread). sim_workspace_trim releases the tables when they hold
 * more than max_bytes. Results never depend on the workspace.
 */
typedef struct sim_workspace sim_workspace;
sim_workspace *sim_workspace_new(void);
void sim_workspace_free(sim_workspace *ws);
size_t sim_workspace_bytes(const sim_workspace *ws);
void sim_workspace_trim(sim_workspace *ws, size_t max_bytes);
/* sim_run using ws's tables (ws may be NULL: fresh tables, freed at the end). */
int sim_run_ws(sim_workspace *ws, const ir_module *m, const hw_model *hw, const sim_options *opt,
               sim_result **out, sim_event **events, uint32_t *nevent, di_error *err);
void sim_result_free(sim_result *r);

/*
 * The simulator's time for one op of m on device `device` of hw, in seconds:
 * the roofline cost (or a measured time) for a compute op, 0 for views,
 * plumbing, communication and pmaps. Negative when it cannot be priced (an
 * opaque op without a measured time). Used to balance pipeline stages.
 */
double sim_op_time(const ir_module *m, ir_id op, const hw_model *hw, uint32_t device);
/* The dtype op computes in (its result's, else its first input's), which picks its peak rate. */
ir_dtype sim_op_dtype(const ir_module *m, ir_id op);
/*
 * The terms of a lower bound on the time of a compute op of `kind` in dtype
 * dt on `device` (tf32: f32 GEMMs as TF32): the simulator prices f FLOPs,
 * E special-function evaluations (ir_cost.special: fused attention's
 * exponentials) and B bytes of it at no less than max(f per_flop +
 * flop_fixed + E per_special, B per_byte) + launch seconds (its roofline;
 * flop_fixed, a GEMM's half_flops at the peak, makes small GEMMs slow).
 * Returns 1 with the terms, or 0 with all 0 when the op costs nothing (views,
 * plumbing, communication, regions) or may cost anything (measured op times).
 */
typedef struct sim_op_bound {
    double per_flop, flop_fixed, per_byte, launch, per_special;
    int gemm; /* GEMM-class (MatMul, Gemm, MatMulGrad, FlashAttention, its gradient) */
} sim_op_bound;
int sim_op_bound_terms(const hw_model *hw, uint32_t device, int kind, ir_dtype dt, int tf32,
                       sim_op_bound *b);
/*
 * How kernel fusion (sim_options.fuse, fuse.c) may treat an op of `kind`,
 * from its kind alone: SIM_FUSE_ELEM, an element-wise op that may run inside
 * a fused kernel at no cost of its own; SIM_FUSE_ROW, a row-wise op (softmax,
 * layer norm, their gradients, reductions) that may end a fused kernel but
 * never has a fused op after it, so each runs in a kernel of its own that
 * writes its results if anything reads them; SIM_FUSE_NONE, never fused. A
 * superset of what fuse.c fuses (it also looks at attributes, placements and
 * shapes), for lower bounds that hold with fused kernels.
 */
enum { SIM_FUSE_NONE, SIM_FUSE_ELEM, SIM_FUSE_ROW };
int sim_fuse_kind(int kind);
/*
 * Whether op runs as a kernel of its own whatever its kind: an in-place
 * accumulation (dist.accumulate) or an op with an explicit memory class
 * (dist.mem). One of fuse.c's rules beyond sim_fuse_kind.
 */
int sim_fuse_excluded(const ir_module *m, ir_id op);
/*
 * Gradient accumulation fusion: when op is the cast of a weight gradient made
 * by a GEMM (a MatMulGrad's second result, a backward Gemm's result) or the
 * accumulation (dist.accumulate) of that gradient or its cast, in the GEMM's
 * region with local tensors, that GEMM; else 0. With fused kernels the op runs in the GEMM's kernel
 * (its epilogue) at no cost of its own, and the values between are never
 * stored (fuse.c).
 */
ir_id sim_fuse_epilogue(const ir_module *m, ir_id op);
/*
 * A GEMM output of dims[0..rank) as `batch` matrices of rows x cols, as the
 * simulator sees it (fold: its second operand is a 2-D weight, whose
 * leading dims fold into the rows, as PyTorch's linear layers do); and the
 * tile and wave quantization factor, in (0, 1], of such a GEMM on `device`
 * (1 without an SM count). A GEMM op of f FLOPs is priced as f / q FLOPs
 * (MatMulGrad: q the harmonic mean over its two outputs).
 */
void sim_gemm_dims_shape(const int64_t *dims, uint32_t rank, int fold, double *batch, double *rows,
                         double *cols);
double sim_gemm_quantization(const hw_model *hw, uint32_t device, double batch, double rows,
                             double cols);
/*
 * Seconds per byte of payload (ir_cost.bytes_comm) that a collective of
 * `kind` (IR_OP_ALLREDUCE, ...) over devices devs[0..n) costs at least: any
 * such collective of S bytes takes at least S times this (the least
 * bandwidth term of the algorithms the hardware may choose; latencies only
 * add). 0 for one device and where a measured table prices the group.
 */
double sim_collective_slope(const hw_model *hw, int kind, const int32_t *devs, uint32_t n);

/*
 * Seconds that a collective of `kind` over devices devs[0..n) costs at least
 * whatever its payload: the least latency terms of the algorithms the
 * hardware may choose (each algorithm costs its latency terms plus its slope
 * times the payload, so any such collective of S bytes takes at least this
 * plus S times sim_collective_slope). 0 for one device and where a measured
 * table prices the group.
 */
double sim_collective_latency(const hw_model *hw, int kind, const int32_t *devs, uint32_t n);

/*
 * Fits hw's intra-node link (bandwidth, latency) to its measured intra-node
 * all-reduce tables: the pair whose formula times (the preset's algorithm
 * and step latency, as the simulator prices a group inside one node) have
 * the least mean absolute percentage error over every table point. Returns
 * the number of points (0: no such table, nothing fitted) and the error in
 * *mape (%).
 */
uint32_t sim_fit_intra_link(const hw_model *hw, hw_link *out, double *mape);

/*
 * The memory-event sort, exposed for its test: sorts n 64-bit keys
 * ascending (the simulator sorts events by such keys).
 */
void sim_sort_keys(uint64_t *keys, uint32_t n);

/* The result as one JSON object (the `distir simulate --json` form). Caller frees. */
char *sim_result_to_json(const sim_result *r);
/* A human-readable table. Caller frees. */
char *sim_result_to_table(const sim_result *r);
/* "512 B", "1.50 KiB", ... "2.00 GiB" (binary units, two decimals) and "1.2345 s", "12.3456 ms",
 * "123.456 us": the units of every table. */
void sim_format_bytes(char *out, size_t n, uint64_t v);
void sim_format_time(char *out, size_t n, double s);
/* The summary lines of sim_result_to_table (step time, peak memory, FLOPs, MFU, idle, ops). */
void sim_result_summary(const sim_result *r, di_buf *b);
/*
 * Per pipeline stage: stage_of[i] is the stage of r->devices[i] (UINT32_MAX
 * or >= nstage: none). Times and FLOPs are sums over the stage's devices
 * (so the stages add up to the devices); peak is its fullest device.
 */
typedef struct sim_stage {
    uint32_t devices;
    double compute_s, exposed_comm_s, idle_s, flops;
    const sim_device_result *peak;
} sim_stage;
void sim_result_stage_stats(const sim_result *r, uint32_t nstage, const uint32_t *stage_of,
                            sim_stage *out);
/*
 * The table of the text result: per stage its devices, layers (layers[g];
 * layers may be NULL), mean compute, exposed communication and idle time,
 * and the peak memory of its fullest device with that device's weights,
 * gradients, optimizer state and activations.
 */
void sim_result_stages(const sim_result *r, uint32_t nstage, const uint32_t *stage_of,
                       const uint32_t *layers, di_buf *b);
/* The same as a JSON array ("stages" of `distir simulate --json`), the same means. */
void sim_result_stages_json(const sim_result *r, uint32_t nstage, const uint32_t *stage_of,
                            const uint32_t *layers, di_buf *b);

/* Protobuf form (distir.v1.SimResult). */
struct Distir__V1__SimResult;
/* A heap message tree; free with sim_result_proto_free. */
struct Distir__V1__SimResult *sim_result_to_proto(const sim_result *r);
void sim_result_proto_free(struct Distir__V1__SimResult *p);
/* Validates and converts; the caller frees *out. */
int sim_result_from_proto(const struct Distir__V1__SimResult *p, sim_result **out,
                          di_error *err);
/* Packs the result; caller frees *data with di_free. */
int sim_result_pack(const sim_result *r, uint8_t **data, size_t *len);
int sim_result_unpack(const uint8_t *data, size_t len, sim_result **out, di_error *err);

/*
 * The Chrome trace-event file (trace.c), streamed while simulating: open it
 * for the distributed module m on ndevice devices, pass sim_trace_sink_of
 * as sim_options.trace, then close it with the result (names, memory
 * counters; the file appears only then, complete) or discard it. select
 * (per device id, copied) limits it to some devices, NULL records all;
 * stage (per device id, UINT32_MAX: none; copied) names each
 * device's pipeline stage, or NULL. With merge, consecutive ops of one
 * layer, chunk and phase on a stream become one slice ("forward L5", args
 * "ops"), which keeps a large model's trace small; otherwise every op is a
 * slice. sim_trace_events counts ops recorded, sim_trace_slices slices.
 */
typedef struct sim_trace_file sim_trace_file;
int sim_trace_open(const char *path, const ir_module *m, uint32_t ndevice, const uint8_t *select,
                   const uint32_t *stage, int merge, sim_trace_file **out, di_error *err);
const sim_trace_sink *sim_trace_sink_of(sim_trace_file *t);
/* *bytes (may be NULL): the file's size. */
int sim_trace_close(sim_trace_file *t, const sim_result *r, uint64_t *bytes, di_error *err);
void sim_trace_discard(sim_trace_file *t);
uint64_t sim_trace_events(const sim_trace_file *t);
uint64_t sim_trace_slices(const sim_trace_file *t);
/* The trace's approximate size in bytes for module m with that selection, before simulating. */
double sim_trace_estimate(const ir_module *m, uint32_t ndevice, const uint8_t *select);
/* A whole trace from recorded events (sim_run's events array). */
int sim_trace_write(const char *path, const ir_module *m, const sim_result *r,
                    const sim_event *events, uint32_t nevent, di_error *err);

#endif
