/*
 * key.h: what a simulation request means, in canonical form, and the cache
 * key derived from it. Two requests that must give the same result get the
 * same key: the strategy's defaults are filled in (dp 0 means 1,
 * microbatches 0 means pp, ...) and options that do not change the result
 * are dropped, before hashing.
 *
 *   key = SHA-256("distir.cache.v1", ir_hash(module), hw_hash(hardware),
 *                 canonical strategy, canonical options, SIM_VERSION)
 */
#ifndef DISTIRD_KEY_H
#define DISTIRD_KEY_H

#include <stdint.h>

#include "base/base.h"
#include "distir.pb-c.h"
#include "xform/xform.h"

/* A strategy with every default filled in (proto Strategy). */
typedef struct srv_strategy {
    uint32_t dp, tp, pp;     /* >= 1 */
    uint32_t microbatches;   /* >= 1 */
    uint32_t schedule;       /* Distir__V1__Schedule; DEFAULT only when pp == 1 */
    uint32_t virtual_stages; /* >= 1; > 1 only for interleaved */
    uint32_t recompute;      /* Distir__V1__Recompute */
    uint32_t stash;          /* Distir__V1__Stash */
    uint32_t zero;           /* 0..3 */
    int sequence_parallel;
    int overlap_grad_reduce;
    uint32_t bucket_mb;      /* > 0 with overlap_grad_reduce, 0 without */
    uint32_t ndevice_order;
    uint32_t *device_order; /* owned; NULL when empty */
    /* Nested parallelism: per pipeline stage dp, tp, layers (owned; none when all alike). */
    uint32_t nstages;
    xform_stage *stages;    /* dp and tp >= 1 */
    uint32_t ntp_layers;
    uint32_t *tp_layers;    /* owned, ascending and distinct; none when tp is 1 everywhere */
} srv_strategy;

/* The options that affect a result (proto SimOptions). */
typedef struct srv_simopts {
    int no_overlap;
    int want_timeline;
    uint32_t timeline_max_points; /* 0 unless want_timeline */
} srv_simopts;

/*
 * Fills *out from p (NULL: simulate the module as given). Rejects values
 * that no strategy can have (zero > 3, ...) with DI_ESTRATEGY. Free with
 * srv_strategy_fini.
 */
int srv_strategy_normalize(const Distir__V1__Strategy *p, srv_strategy *out, di_error *err);
void srv_strategy_fini(srv_strategy *s);
/* True when the strategy asks for nothing beyond the module as given. */
int srv_strategy_is_trivial(const srv_strategy *s);
/* A deep copy. */
void srv_strategy_copy(srv_strategy *dst, const srv_strategy *src);

void srv_simopts_normalize(const Distir__V1__SimOptions *p, srv_simopts *out);

/* The cache key; sim_version is SIM_VERSION (a parameter so that tests can vary it). */
void srv_cache_key(const di_hash *module, const di_hash *hw, const srv_strategy *s,
                   const srv_simopts *o, const char *sim_version, di_hash *out);

#endif
