/*
 * pipeline_int.h: what the files of the pipeline assembly share (not a
 * public API): pipeline.c cuts the step into programs and assembles the
 * distributed module; chunk.c emits one chunk (a program's body for one
 * microbatch, as a function that the chunk's dist.pmap calls) and the ZeRO
 * weight gathers. Both read and write one `pl`.
 */
#ifndef DISTIR_XFORM_PIPELINE_INT_H
#define DISTIR_XFORM_PIPELINE_INT_H

#include "xform/xform_int.h"

enum { PROG_F = 0, PROG_B = 1, PROG_S = 2 };
enum { REG_ARG = 1, REG_VAL, REG_ACC, REG_STASH, REG_GATHERED, REG_STEP };

typedef struct idlist {
    ir_id *v;
    uint32_t n, cap;
} idlist;

static inline void
idl_push(idlist *l, ir_id x)
{
    DI_GROW(&l->v, &l->cap, l->n + 1);
    l->v[l->n++] = x;
}

typedef struct prog {
    uint8_t kind;
    uint32_t stage; /* model stage (F, B) or group (S) */
    uint32_t group;
    idlist ops;     /* source ops in order */
    idlist in;      /* external inputs (source values) */
    idlist out;     /* values other programs need (per instance) */
    idlist leaf;    /* gradient contributions accumulated across microbatches */
    idlist stash;   /* weights stashed (F) or read from the stash (B) */
    idlist res;     /* indices of the function's results output here */
    idlist lazy;    /* ops (also in ops) emitted only when a later op needs them */
    struct reg_ent *argc; /* per input: its entry when it is the same for every microbatch */
    struct variant *var;  /* the functions its chunks call (F, B) */
    uint32_t nvar, cvar;
    struct reg_ent *acc;  /* per leaf: the accumulator of its latest chunk (see emit_chunk) */
    struct reg_ent *vals; /* [mb][j]: output j of chunk mb on the program's group (F, B) */
} prog;

/* A function that chunks of one program call (see emit_chunk). */
typedef struct variant {
    uint8_t key;   /* VAR_* */
    uint8_t tok;   /* ZeRO-3: its last two results are ordering tokens (zero3_units) */
    ir_id func;
    uint32_t nsig; /* arguments: inputs, then accumulators, then ZeRO-3 tokens */
    ir_id *lt;     /* per argument: its per-device type */
    xf_place *pl;  /* per argument: its placement */
    uint32_t nres;
    xf_place *opl; /* per result: its placement */
} variant;

typedef struct reg_ent {
    uint32_t kind, v, mb, g;
    ir_id tv;     /* the top-level tuple */
    ir_id lt;     /* its per-device type on the device variable */
    xf_place pl;
} reg_ent;

/* (per-device type, group) -> the tuple type over the group's devices. */
typedef struct tt_ent {
    ir_id lt, tt;
    uint32_t g;
} tt_ent;

/* A use of a value by another group: after which instance to send and at what level. */
typedef struct need {
    uint32_t g;      /* destination group */
    uint8_t step;    /* needed by a once-per-step program (send the last instance) */
    uint32_t next;   /* 1 + index of the next need of the same value, 0 none */
} need;

typedef struct pl {
    xf_ctx *c;
    ir_module *out;
    ir_id func;
    ir_id *mesh;      /* per group */
    ir_attr *pmattr;  /* per group: the chunks' "devices" attribute (one list, shared), or kind 0 */
    ir_attr devvar;   /* the chunks' device_var = "d" attribute, or kind 0 */
    uint32_t *leafgen, *leafop; /* per source op: stamp, and first leaf it makes + 1 */
    uint32_t leafstamp;
    const idlist *curleaves;    /* the leaves of the body being built */
    int32_t *devs;    /* every group's dp*tp device ids, from devs[c->goff[g]] */
    uint32_t maxgdev; /* the largest group's device count */
    prog *prog;       /* F[0..K), B[0..K), S[0..pp) */
    uint32_t nprog;
    int32_t *home;    /* per source op: the program that defines it, -1 none */
    uint32_t *mark;   /* per source value: scratch generation marks */
    uint32_t markgen;
    need *needs;
    uint32_t nneed, cneed;
    uint32_t *needhead; /* per source value */
    uint8_t *isleaf;    /* per source value */
    uint32_t *restref;  /* per source value: xf_recompute_ops' readref */
    uint8_t *isrest;    /* per source op: in xf_recompute_ops' rest */
    uint32_t *isout;    /* per source value: 1 + its index in its home program's outputs */
    int8_t *leaftgt;    /* per source value: see leaf_targets */
    int8_t *leaftp;     /* per source value: its first step consumer's tensor-axis placement */
    int8_t *leafedp;    /* per source value: and its outer-data-axis placement */
    int8_t *leafcp;     /* per source value: and its context-axis placement */
    /* registry */
    reg_ent *reg;
    uint32_t creg, nreg;
    /*
     * Chunk outputs not sent yet (xf_pl_defer): a value goes to the group that
     * needs it right before its sender's next chunk or its receiver's chunk,
     * whichever comes first in program order, as Megatron-LM's blocking
     * send/receive pairs place a transfer in both devices' sequences.
     */
    reg_ent *pend;
    uint32_t cpend, npend;
    /*
     * Received tensor-parallel slices not gathered yet (the scatter/gather of
     * xf_pl_send_needs): the receiving group all-gathers them right before its
     * first chunk that reads them (xf_pl_gather_pending), as Megatron-LM's
     * receiver gathers after its receive, so that a transfer placed early (at
     * the sender's next chunk) does not hold the receiver's tensor-parallel
     * communicator up until the data arrives.
     */
    struct pl_gather *pgat;
    uint32_t cpgat, npgat;
    uint32_t *inmark, inmark_gen; /* per source value: xf_pl_flush's mark of a chunk's inputs */
    xf_body body;
    xform_layout *lay;
    uint32_t cargs, cres;
    ir_id *tmp;        /* maxgdev scratch ids */
    tt_ent *tt;        /* open-addressing cache of group tuple types */
    uint32_t ctt, ntt;
    int64_t *tmpdev;   /* maxgdev scratch device ids */
    /*
     * ZeRO-3, per group: the two ordering tokens of its last chunk (the ends
     * of that chunk's last two units, zero3_units in chunk.c), which its next
     * chunk's first gathers wait for; kind 0 when there are none.
     */
    reg_ent *z3tok; /* [2 g + i] */
} pl;

/* ---- pipeline.c ---- */

/* A received value in tensor-parallel slices: ent as registered (the slices, placement S). */
typedef struct pl_gather {
    reg_ent ent;
    ir_id lt;      /* the whole value's per-device type */
    xf_place pl;   /* and its placement */
} pl_gather;

/*
 * Gathers the pending received slices (pl.pgat) on group g that chunk mb of
 * program p reads, or with g < 0 every pending one.
 */
int xf_pl_gather_pending(pl *P, int64_t g, const prog *p, uint32_t mb);

/* Defers sending chunk output e (per-microbatch needs) until xf_pl_flush. */
void xf_pl_defer(pl *P, const reg_ent *e);
/*
 * Sends the deferred outputs of group g and those that chunk mb of program p
 * reads (g < 0: every deferred output).
 */
int xf_pl_flush(pl *P, int64_t g, const prog *p, uint32_t mb);

/* The registry: where a value's top-level tuple is, by (kind REG_*, value, microbatch, group). */
reg_ent *xf_pl_reg_find(pl *P, uint32_t kind, uint32_t v, uint32_t mb, uint32_t g);
void xf_pl_reg_put(pl *P, uint32_t kind, uint32_t v, uint32_t mb, uint32_t g, ir_id tv, ir_id lt,
                   const xf_place *p);
/* Records the layout of function result `index` (made by microbatch mb on group g). */
void xf_pl_layout_result(pl *P, uint32_t index, uint32_t mb, uint32_t g, const xf_place *p,
                         ir_id tv);
/*
 * Sends the value of registry entry e0 to every other group that needs it
 * at this level (step: the needs of once-per-step programs), re-laid out
 * when the groups differ in shape.
 */
int xf_pl_send_needs(pl *P, const reg_ent *e0, int step);
/* The entry holding input v of program p for microbatch mb on p's group, or NULL. */
const reg_ent *xf_pl_resolve(pl *P, const prog *p, ir_id v, uint32_t mb);
/* The per-device type of result k of pmap pm. */
ir_id xf_pl_result_lt(pl *P, ir_id pm, uint32_t k);
/* Emits a dist.pmap over group g's devices running body (a callee function when callee). */
int xf_pl_make_pmap(pl *P, uint32_t g, ir_id *inputs, uint32_t nin, ir_id body, int callee,
                    ir_id *op);

/* ---- chunk.c ---- */

/* Emits the chunk of program p for microbatch mb (a call of one of p's variants). */
int xf_pl_emit_chunk(pl *P, prog *p, uint32_t mb);
/* ZeRO-1/2: the all-gathers of group g's weight shards before its first chunk. */
int xf_pl_emit_gathers(pl *P, uint32_t g);
/* Frees a program's variants. */
void xf_pl_variants_free(prog *p);

#endif
