/*
 * input.h: the untrusted-input pipeline of distird, shared by Simulate and
 * SimulateBatch. From the request bytes to an immutable, verified module and
 * hardware model plus canonical strategies and options:
 *
 *   1. message size        gRPC (GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH)
 *   2. nesting depth       pb_unpack_checked (pre-check, capped unpack, UTF-8/enums)
 *   3. counts              ops and values against the limits, before conversion
 *   4. conversion          ir_from_proto (every index bounds-checked)
 *   5. semantics           ir_verify
 *   6. identity            ir_hash, hw_hash
 *
 * Errors say what and where ("module: ..."); their codes map to gRPC status
 * codes in status.c (limits: RESOURCE_EXHAUSTED, the rest INVALID_ARGUMENT).
 * srv_request_decode is pure and thread-safe: distird runs it on the loop
 * thread for small requests and on a worker for large ones.
 */
#ifndef DISTIRD_INPUT_H
#define DISTIRD_INPUT_H

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"
#include "ir/ir.h"
#include "key.h"
#include "sim/hw.h"

/* The module and hardware of a request, shared read-only by its jobs. */
typedef struct srv_input {
    int refs;           /* owner references; loop thread only after hand-off */
    ir_module *module;  /* verified; never modified once shared */
    const hw_model *hw; /* hw_owned, or a preset owned by srv_hwcache */
    hw_model *hw_owned;
    di_hash module_hash;
    di_hash hw_hash;
    char hw_name[64]; /* the preset name or the model's name, for logs */
} srv_input;

/* One candidate: a strategy, or the reason it was rejected. */
typedef struct srv_candidate {
    srv_strategy strategy;
    int rc;      /* 0, or the DI_E* code of a rejected strategy */
    char *error; /* rc != 0: message (heap) */
} srv_candidate;

typedef struct srv_limits {
    ir_limits ir;       /* max_ops, max_values, max_depth, ... */
    uint32_t max_batch; /* strategies per SimulateBatch */
} srv_limits;

/*
 * Resolved hardware presets ("a100-dgx:2"), kept for the daemon's life so
 * that each is built and hashed once. Loop thread only.
 */
typedef struct srv_hwcache srv_hwcache;
srv_hwcache *srv_hwcache_new(void);
void srv_hwcache_free(srv_hwcache *hc);

typedef struct srv_request {
    srv_input *input;
    srv_simopts opts;
    uint32_t ncand;
    srv_candidate *cands; /* ncand entries; Simulate has exactly one */
} srv_request;

#define SRV_REQ_SIMULATE 0
#define SRV_REQ_BATCH 1

/*
 * Decodes a SimulateRequest (kind SRV_REQ_SIMULATE) or SimulateBatchRequest
 * into *out. hc may be NULL (presets are then built afresh and owned by the
 * input). On failure *out is empty and err says why.
 */
int srv_request_decode(int kind, const uint8_t *data, size_t len, const srv_limits *lim,
                       srv_hwcache *hc, srv_request *out, di_error *err);
/* Frees the candidates and drops the request's reference to its input. */
void srv_request_fini(srv_request *r);

void srv_input_ref(srv_input *in);
void srv_input_unref(srv_input *in);

#endif
