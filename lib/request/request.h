/*
 * request.h: a simulation request, from its bytes to what a simulation
 * needs, and the cache key of each of its strategies. This is the daemon's
 * untrusted-input pipeline (Simulate and SimulateBatch), in the library
 * because it needs no gRPC, libuv or SQLite: the daemon, the fuzz target
 * and the tests share it.
 *
 *   1. message size        the transport (GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH)
 *   2. nesting depth       pb_unpack_checked (pre-check, capped unpack, UTF-8/enums)
 *   3. counts              ops and values against the limits, before conversion
 *   4. conversion          ir_from_proto (every index bounds-checked), or for a
 *                          ModelSpec its options checked, its size bounded
 *                          and the module generated (models_spec_build)
 *   5. semantics           ir_verify
 *   6. identity            ir_hash, hw_hash
 *   7. strategies          strategy_from_proto, one candidate each
 *
 * Errors say what and where ("module: ..."); the daemon maps their codes to
 * gRPC status codes in one place (limits RESOURCE_EXHAUSTED, the rest
 * INVALID_ARGUMENT). request_decode is pure and thread-safe: distird runs
 * it on the loop thread for small requests and on a worker for large ones.
 *
 * Two requests that must give the same result get the same cache key: the
 * strategy is normalized (strategy_normalize) and options that do not change
 * the result are dropped, before hashing:
 *
 *   key = SHA-256("distir.cache.v3" with its NUL, ir_hash(module),
 *                 hw_hash(hardware), strategy_hash(strategy),
 *                 no_overlap, want_timeline, timeline_max_points,
 *                 strlen(SIM_VERSION), SIM_VERSION)
 *
 * every integer as 64-bit little-endian (di_sha256_u64).
 */
#ifndef DISTIR_REQUEST_H
#define DISTIR_REQUEST_H

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"
#include "ir/ir.h"
#include "sim/hw.h"
#include "sim/sim.h"
#include "strategy/strategy.h"

struct Distir__V1__SimOptions;

/* The module and hardware of a request, shared read-only by its jobs. */
typedef struct request_input {
    int refs;           /* owner references; one thread at a time */
    ir_module *module;  /* verified; never modified once shared */
    const hw_model *hw; /* hw_owned, or a preset owned by a request_hwcache */
    hw_model *hw_owned;
    di_hash module_hash;
    di_hash hw_hash;
    sim_model_stats stats; /* parameters, tokens and model FLOPs of the module */
    char hw_name[64]; /* the preset name or the model's name, for logs */
} request_input;

/* One candidate: a normalized strategy, or the reason it was rejected. */
typedef struct request_candidate {
    strategy strategy;
    int rc;      /* 0, or the DI_E* code of a rejected strategy */
    char *error; /* rc != 0: message (heap) */
} request_candidate;

typedef struct request_limits {
    ir_limits ir;       /* max_ops, max_values, max_depth, ... */
    uint32_t max_batch; /* strategies per SimulateBatch */
    /*
     * Memory one candidate's transform and simulation may take, by
     * xform_estimate_cost before any work (0: no limit). A candidate over it
     * fails alone with DI_ETOOBIG and a message giving the estimate.
     */
    uint64_t max_job_bytes;
} request_limits;

/* The options that affect a result (proto SimOptions), normalized. */
typedef struct request_simopts {
    int no_overlap;
    int tf32;
    int want_timeline;
    uint32_t timeline_max_points; /* 0 unless want_timeline */
    int fuse;
    int no_grad_accum_fusion; /* 0 unless fuse */
} request_simopts;

/*
 * Resolved hardware presets ("a100-dgx:2"), kept for the owner's life so
 * that each is built and hashed once. Not thread-safe.
 */
typedef struct request_hwcache request_hwcache;
request_hwcache *request_hwcache_new(void);
void request_hwcache_free(request_hwcache *hc);

typedef struct request {
    request_input *input;
    request_simopts opts;
    uint32_t ncand;
    request_candidate *cands; /* ncand entries; Simulate has exactly one */
} request;

/* Options of a ModelSpec (a model has 17 at most; repeats are allowed). */
#define REQUEST_MAX_MODEL_OPTIONS 64u
/* Sequence length and GPT hidden size of a ModelSpec (its module holds constants that long). */
#define REQUEST_MAX_MODEL_SEQ (1u << 20)

#define REQUEST_SIMULATE 0 /* SimulateRequest */
#define REQUEST_BATCH 1    /* SimulateBatchRequest */

/*
 * Decodes a SimulateRequest (kind REQUEST_SIMULATE) or SimulateBatchRequest
 * into *out. hc may be NULL (presets are then built afresh and owned by the
 * input). On failure *out is empty and err says why.
 */
int request_decode(int kind, const uint8_t *data, size_t len, const request_limits *lim,
                   request_hwcache *hc, request *out, di_error *err);
/*
 * Steps 3 to 6 for a message already unpacked (with the depth check) that
 * carries a module (or a ModelSpec, ms) and a hardware reference, as
 * SearchRequest does: *out is
 * a new input with one reference, or NULL on failure (err says why).
 */
struct Distir__V1__Module;
struct Distir__V1__ModelSpec;
struct Distir__V1__HardwareRef;
int request_decode_input(const struct Distir__V1__Module *pm,
                         const struct Distir__V1__ModelSpec *ms,
                         const struct Distir__V1__HardwareRef *ref, const request_limits *lim,
                         request_hwcache *hc, request_input **out, di_error *err);
/* Frees the candidates and drops the request's reference to its input. */
void request_fini(request *r);

void request_input_ref(request_input *in);
void request_input_unref(request_input *in);

void request_simopts_normalize(const struct Distir__V1__SimOptions *p, request_simopts *out);
/* The same from in-process options, so that a local result's key is the daemon's. */
void request_simopts_of(const sim_options *o, request_simopts *out);

/* The cache key (see the top); sim_version is SIM_VERSION (a parameter for the tests). */
void request_cache_key(const di_hash *module, const di_hash *hw, const strategy *s,
                       const request_simopts *o, const char *sim_version, di_hash *out);

/*
 * Sets *out to the module to simulate under the normalized strategy s: m
 * itself for a trivial strategy (*owned = NULL), or a new module that the
 * caller frees (*owned = *out) from xform_apply. An impossible strategy is
 * DI_ESTRATEGY with the message naming the constraint ("dp*tp*pp = N
 * exceeds the M devices of HW"). An annotated global-view module
 * (xform_is_global) takes no strategy: it is propagated and lowered
 * (xform_global_local) into *owned.
 */
int request_apply_strategy(const ir_module *m, const strategy *s, const hw_model *hw,
                           const ir_module **out, ir_module **owned, di_error *err);

#endif
