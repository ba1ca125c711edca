/*
 * xform_int.h: what the files of lib/xform share (not a public API).
 *
 * One xf_ctx holds a whole transform: the sequential source module, the
 * normalized strategy, the analysis of the source (which arguments are batch
 * data and which weights, each op's phase, layer and pipeline stage), the
 * placements that sharding propagation decides (shard.c) on the extended
 * mesh [microbatch, dp, tp, cp, outer dp], the target hardware's costs (cost.h), and the
 * output module that lowering (lower.c) and the pipeline assembly
 * (pipeline.c, chunk.c) build. apply.c runs the passes in order.
 *
 * A placement is one int8 per axis: XF_R (replicated), XF_P (partial sum) or
 * the split tensor dimension (>= 0). The microbatch axis is a loop in time:
 * a split there is a microbatch's slice, a partial sum there is a
 * contribution that accumulates across microbatches.
 */
#ifndef DISTIR_XFORM_INT_H
#define DISTIR_XFORM_INT_H

#include <stdint.h>

#include "xform/cost.h"
#include "xform/xform.h"

#define XF_MB XFORM_AXIS_MB
#define XF_DP XFORM_AXIS_DP
#define XF_TP XFORM_AXIS_TP
#define XF_CP XFORM_AXIS_CP
#define XF_EDP XFORM_AXIS_EDP
#define XF_NAXIS XFORM_NAXIS
#define XF_R XFORM_PLACE_R
#define XF_P XFORM_PLACE_P
#define XF_IS_S(p) ((p) >= 0)

typedef struct xf_place {
    int8_t a[XF_NAXIS];
} xf_place;

/* Value flags. */
#define XF_V_ARG 0x01    /* a function argument */
#define XF_V_DATA 0x02   /* a batch-data argument (tokens, labels, x, ...) */
#define XF_V_WEIGHT 0x04 /* a floating-point argument that is not data */
#define XF_V_BATCH 0x08  /* depends on batch data */
#define XF_V_CONST 0x10  /* computed from constants only (cloned wherever used) */
#define XF_V_EXPERT 0x20 /* expert weights (or their optimizer state) split by expert parallelism */

/* Op phases. XF_PH_STEP: runs once per step after the last microbatch. */
#define XF_PH_FORWARD 0
#define XF_PH_BACKWARD 1
#define XF_PH_STEP 2

/* Where a mean-reduction scale applies (shard.c decides, lower.c emits). */
#define XF_SCALE_NONE 0
#define XF_SCALE_OUT 1 /* multiply result 0 */
#define XF_SCALE_IN 2  /* multiply input scale_in */

typedef struct xf_opinfo {
    uint8_t phase;      /* XF_PH_* */
    uint8_t recompute;  /* selective recomputation recomputes it in the backward chunk */
    uint8_t scale_at;   /* XF_SCALE_* */
    uint8_t scale_in;
    int8_t seq;         /* dist.seq, or -1 */
    int8_t tp;          /* XF_TP_* from dist.tp */
    int32_t layer;      /* dist.layer, or INT32_MIN when absent */
    int32_t stage;      /* model stage (pipeline chunk index), -1 for constants */
    double scale;       /* the factor (1 / product of the splits of the mean's dimensions) */
} xf_opinfo;

#define XF_TP_NONE 0
#define XF_TP_COLUMN 1
#define XF_TP_ROW 2
#define XF_TP_HEADS 3
#define XF_TP_VOCAB 4
#define XF_TP_EXPERT 5 /* the dispatched tokens, split by expert under expert parallelism */
#define XF_TP_KV 6     /* keys or values: whole on the context-parallel axis (all-gathered there;
                          with ring attention they stay split, xf_ctx.ring) */

typedef struct xf_ctx {
    const ir_module *m; /* the sequential source */
    ir_module *owned;   /* the differentiated copy of a forward-only input, or NULL */
    ir_id func;
    strategy s;   /* normalized: degrees >= 1, schedule resolved */
    xform_cost cost;    /* the target hardware (xform_cost_known: there is one) */
    uint32_t n[XF_NAXIS]; /* microbatches, and the largest dp and tp of any group */
    uint32_t m_emit;      /* microbatches emitted: n[XF_MB], or fewer (xform_apply_partial) */
    uint32_t pp, V, K;  /* pipeline groups, virtual stages, model stages (pp * V) */
    /*
     * Per pipeline group: its data and tensor degrees and first rank
     * (nested parallelism: groups may differ, then `hetero`). Placements are
     * decided once, on axes that exist when any group has them; on a group
     * whose degree on an axis is 1 every placement there means the whole
     * tensor (xf_place_on), and a value that crosses to a group of another
     * shape is re-laid out on the way (xf_xfer_place, pipeline.c).
     */
    uint32_t *gdp, *gtp, *goff;
    uint64_t ndev;      /* ranks in all */
    int hetero;
    int vocab_parallel; /* some table is split along its vocabulary (tp.c) */
    /*
     * Ring attention: under context parallelism a fused attention's keys and
     * values stay split along the sequence, and the op is lowered to cp ring
     * steps (lower.c), instead of being gathered whole.
     */
    int ring;
    uint8_t *tplayer;   /* per index into layers: tensor parallel (tp_layers; NULL: all) */
    di_error *err;

    /*
     * analysis (strategy.c). `borrowed`: vflags, op, layers and m are an
     * xform_analysis's (xf_ctx_init_analyzed), read only and not freed here:
     * such a context validates, it does not transform.
     */
    int borrowed;
    uint8_t *vflags;    /* per value */
    xf_opinfo *op;      /* per op */
    int64_t batch;      /* dimension 0 of the data arguments */
    uint32_t nlayer;    /* distinct dist.layer values >= 0 */
    int32_t *layers;    /* sorted */
    int32_t *layer_stage; /* per index into layers: model stage */

    /* propagation (shard.c) */
    xf_place *place;    /* per value */
    xf_place *req;      /* per refs[] index: what the op needs of that input */
    xf_place *rreq;     /* per result of the function */
} xf_ctx;

/* The sizes of group g's axes: microbatches, dp, tp, cp, outer dp. */
static inline void
xf_group_n(const xf_ctx *c, uint32_t g, uint32_t *n)
{
    n[XF_MB] = c->n[XF_MB];
    n[XF_DP] = c->gdp[g];
    n[XF_TP] = c->gtp[g];
    n[XF_CP] = c->n[XF_CP];
    n[XF_EDP] = c->n[XF_EDP];
}

/* The data-parallel ranks of group g: outer x inner data axis. */
static inline uint32_t
xf_gdata(const xf_ctx *c, uint32_t g)
{
    return c->n[XF_EDP] * c->gdp[g];
}

/* The devices of group g: outer dp x dp x cp x tp. */
static inline uint32_t
xf_gdev(const xf_ctx *c, uint32_t g)
{
    return xf_gdata(c, g) * c->n[XF_CP] * c->gtp[g];
}

/* Do groups g and h have the same degrees (values cross between them as they are)? */
static inline int
xf_same_shape(const xf_ctx *c, uint32_t g, uint32_t h)
{
    return c->gdp[g] == c->gdp[h] && c->gtp[g] == c->gtp[h];
}

/* The device group an op runs on (constants: 0; they are cloned wherever used). */
static inline uint32_t
xf_op_group(const xf_ctx *c, ir_id op)
{
    return c->op[op].stage < 0 ? 0 : (uint32_t)c->op[op].stage % c->pp;
}

/* p on a group whose axes have sizes n: an axis of size 1 holds the whole value (R). */
static inline xf_place
xf_place_on(const xf_place *p, const uint32_t *n)
{
    xf_place q = *p;
    for (int a = XF_DP; a < XF_NAXIS; a++)
        if (n[a] <= 1)
            q.a[a] = XF_R;
    return q;
}

/* strategy.c */
/* "stage g: " into buf when the groups differ in degrees, else "" (prefix of messages). */
const char *xf_stage_prefix(const xf_ctx *c, uint32_t g, char *buf, size_t n);
int xf_ctx_init(xf_ctx *c, const ir_module *m, const strategy *s, const hw_model *hw,
                di_error *err);
void xf_ctx_fini(xf_ctx *c);
/* xform_analysis (xform.h): a context of the trivial strategy, made once per module. */
struct xform_analysis {
    xf_ctx c;
};
/* As xf_ctx_init, from a's analysis instead of analyzing its module again (borrowed). */
int xf_ctx_init_analyzed(xf_ctx *c, const xform_analysis *a, const strategy *s,
                         const hw_model *hw, di_error *err);
/*
 * As xf_ctx_init, from a's analysis, with copies of what the transforms
 * write (vflags, op, layers), so that the context may be transformed; the
 * module stays a's (not freed here). The same context as xf_ctx_init of a's
 * module.
 */
int xf_ctx_init_copied(xf_ctx *c, const xform_analysis *a, const strategy *s, const hw_model *hw,
                       di_error *err);
/* Device id of rank (stage, d, k, t), d the data rank (outer x inner, xf_gdata). */
int32_t xf_device(const xf_ctx *c, uint32_t group, uint32_t d, uint32_t k, uint32_t t);
/* Value of a source op's discardable string attribute, or NULL. */
const char *xf_op_str(const ir_module *m, ir_id op, const char *key);

/* stages.c: the model stage of every non-constant op (xf_opinfo.stage). */
int xf_assign_stages(xf_ctx *c);

/* dp.c, tp.c: initial placements of the arguments. */
int xf_annotate_dp(xf_ctx *c);
int64_t xf_expert_weights(const xf_ctx *c, uint8_t *mark);
int64_t xf_expert_state(const xf_ctx *c, uint8_t *mark);
int xf_annotate_tp(xf_ctx *c);
/*
 * Whether op is a forward Gather whose indices (input 1) are batch data of rank 2 or more:
 * an embedding's lookup of tokens, whose indices sequence parallelism splits along the
 * sequence (xf_annotate_tp; xform_model_facts.sequence_ops counts such ops).
 */
int xf_token_gather(const xf_ctx *c, ir_id op);

/* shard.c */
#define XF_MAXF 40
#define XF_MAXO 16

/*
 * Factor kinds. F_VOCAB is a class or vocabulary dimension that splits on
 * the tensor axis only, as Megatron-LM's vocabulary-parallel embedding and
 * cross-entropy do: a Gather from a table split along the gathered axis
 * gives a partial sum (rows outside a device's block are zeros), a
 * cross-entropy over split classes is lowered to local statistics, one
 * all_gather of them and the loss (lower.c), complete on every device.
 */
/*
 * F_INNER: the innermost dimension of a Reshape that merges dimensions (or
 * splits one), mapped to the merged dimension as its second factor (map2):
 * it may split only the context axis (the least significant in a block
 * index, layout.c). Where the dimensions outside it hold more than one
 * element locally (several sequences of a microbatch on a device), a
 * device's rows of the merged dimension are not one block of the global
 * order but its own rows in local order: a permutation of the rows, the
 * same for every value flattened so (the final hidden states and the
 * labels), which the ops reading them (row-wise, up to the loss's mean and
 * the weight gradients' sums over rows) do not see. Until 2026-12-07 that
 * case gathered the sequence over the context ranks before the Reshape, and
 * every context rank computed the output layer and the loss of its whole
 * microbatch.
 */
enum { F_FREE = 0, F_SUM, F_MEAN, F_MEANG, F_WHOLE, F_VOCAB, F_INNER };
enum { LIN_NONE = 0, LIN_ALL, LIN_FIRST, LIN_ONE };

typedef struct rule {
    uint32_t nf;
    uint8_t kind[XF_MAXF];
    uint8_t explicit_kind[XF_MAXF];
    uint32_t nin, nout;
    uint8_t rank[XF_MAXO];
    const int64_t *dims[XF_MAXO];
    int8_t map[XF_MAXO][IR_MAX_RANK];
    int8_t map2[XF_MAXO][IR_MAX_RANK]; /* a second factor of a merged dimension (F_INNER) */
    uint8_t sums;    /* a factor missing from an output is summed over */
    uint8_t lin;     /* LIN_*: partial sums that pass through */
    int8_t scale_in; /* for F_MEANG: the input that takes the scale */
} rule;

/* The factor rule of op (an op without one, or whose shapes it rejects: replicate all). */
void xf_rule_build(const ir_module *m, ir_id op, rule *r);
/* The dimension of operand k (inputs, then results) that factor f maps to, or -1. */
int xf_rule_dim(const rule *r, uint32_t k, int f);
/* Does n divide every operand dimension that factor f maps to? */
int xf_rule_divides(const rule *r, int f, uint32_t n);
/* True when the partial-sum inputs on axis a (placements in[]) can pass through the op unreduced.
 */
int xf_rule_passes(const rule *r, int a, const xf_place *in);
int xf_propagate(xf_ctx *c);
/*
 * Local dims of a source value's type under placement p on axes of sizes n
 * (-1: a split does not divide).
 */
int xf_local_dims(const xf_ctx *c, ir_id value, const xf_place *p, const uint32_t *n,
                  int64_t *dims);
/*
 * The placement in which value v, made on group g in placement p, reaches
 * group h (p itself when the groups have the same shape): partial sums are
 * summed on g first, and a split stays where h's degree divides it.
 */
xf_place xf_xfer_place(const xf_ctx *c, ir_id v, const xf_place *p, uint32_t g, uint32_t h);
/* The index of dist.layer `layer` in c->layers, or -1. */
int32_t xf_layer_index(const xf_ctx *c, int32_t layer);
/*
 * Are the ops of dist.layer `layer` (INT32_MIN: outside every layer)
 * tensor parallel? Always without tp_layers.
 */
int xf_layer_is_tp(const xf_ctx *c, int32_t layer);
/* The data, context and outer data axes p is a partial sum on (1 << axis each). */
static inline uint32_t
xf_partial_axes(const xf_place *p)
{
    return (uint32_t)(p->a[XF_DP] == XF_P) << XF_DP | (uint32_t)(p->a[XF_CP] == XF_P) << XF_CP |
           (uint32_t)(p->a[XF_EDP] == XF_P) << XF_EDP;
}

/* The placement replicated on every axis. */
static inline xf_place
xf_place_rep(void)
{
    xf_place p;
    for (int a = 0; a < XF_NAXIS; a++)
        p.a[a] = XF_R;
    return p;
}

/* True when two placements are equal. */
static inline int
xf_place_eq(const xf_place *a, const xf_place *b)
{
    return a->a[0] == b->a[0] && a->a[1] == b->a[1] && a->a[2] == b->a[2] && a->a[3] == b->a[3] &&
           a->a[4] == b->a[4];
}

/* apply.c: the placements propagation decides for m under s (caller frees *place). */
int xf_placements(const ir_module *m, const strategy *s, const hw_model *hw, xf_place **place,
                  di_error *err);

/* ---- lowering (lower.c) ---- */

/* A source value's local copy inside the body being built. */
typedef struct xf_local {
    ir_id v;      /* value id in the output module */
    xf_place pl;  /* its placement */
} xf_local;

typedef struct xf_body {
    xf_ctx *c;
    int step;         /* a once-per-step body: microbatch partial sums are already summed */
    ir_module *out;
    ir_id region;     /* the body region */
    ir_id mesh;       /* the stage mesh [dp, tp] */
    uint32_t n[XF_NAXIS]; /* its group's axis sizes (xf_body_begin) */
    ir_id devvar;     /* string id "d" */
    uint32_t gen;     /* generation of env entries that belong to this body */
    uint32_t *envgen; /* per source value */
    xf_local *env;    /* per source value */
    /* conversions made in this body: (source value, placement) -> local value */
    struct xf_conv *conv;
    uint32_t nconv, cconv;
    uint32_t *convhead; /* per source value: 1 + index of its last conversion (this gen) */
    uint32_t *convgen;
    uint32_t *lazygen;  /* per source op: emitted on demand in this body (recomputation) */
    ir_id *smap;        /* per source string id: the output module's id (0: not yet) */
    /* per source op: the input and result types of its last emission (skips inference) */
    uint32_t *tcache;   /* offset + 1 into tpool, 0 none */
    ir_id *tpool;
    uint32_t ntpool, ctpool;
} xf_body;

typedef struct xf_conv {
    ir_id src;
    xf_place pl;
    ir_id v;
    uint32_t next; /* 1 + index of the previous conversion of the same value, 0 none */
} xf_conv;

/* Allocates the per-value tables for c (once per transform). */
void xf_body_tables_init(xf_body *b, xf_ctx *c, ir_module *out);
void xf_body_tables_fini(xf_body *b);
/* Starts a new body region on group g's mesh (clears the environment). */
void xf_body_begin(xf_body *b, ir_id mesh, uint32_t g);
/* The same, the body being a new top-level function `name` that pmaps call. */
void xf_body_begin_func(xf_body *b, ir_id mesh, uint32_t g, const char *name);
/* Adds a body argument holding source value v with placement pl; returns its id. */
ir_id xf_body_arg(xf_body *b, ir_id v, const xf_place *pl, const char *suffix);
/* As xf_body_arg with the local type given. */
ir_id xf_body_arg_typed(xf_body *b, ir_id v, ir_id ty, const xf_place *pl);
/* Binds source value v to local value lv with placement pl. */
void xf_body_bind(xf_body *b, ir_id v, ir_id lv, const xf_place *pl);
/* The local value of source value v (emitting constants on demand); 0 if unbound. */
int xf_body_get(xf_body *b, ir_id v, xf_local *out);
/* Emits source op `op` with its inputs converted to the placements it needs. */
int xf_body_emit(xf_body *b, ir_id op);
/* Converts a local value to placement `to` (emitting collectives); the result in *out. */
int xf_body_convert(xf_body *b, ir_id src, const xf_local *in, const xf_place *to,
                    xf_local *out);
/* Whether this body holds a conversion of source value src to placement `to` already. */
int xf_body_has_conversion(const xf_body *b, ir_id src, const xf_place *to);
/* Records l as source value src converted to l->pl in this body (xf_body_convert reuses it). */
void xf_body_remember(xf_body *b, ir_id src, const xf_local *l);
/*
 * A bucket of gradients ls[0..n) (partial sums on the data axis, one dtype;
 * srcs name them): xf_body_bucket_reduce all-reduces their concatenation
 * into *red (with scatter: reduce-scatters it, replica-major, so that each
 * replica gets its dimension-0 shard of each); xf_body_bucket_split then
 * gives ls the reduced pieces (placement R, or S[0] with scatter, on the
 * data axis), its Split on the reduction stream with `side`.
 */
int xf_body_bucket_reduce(xf_body *b, const ir_id *srcs, const xf_local *ls, uint32_t n,
                          int scatter, ir_id *red);
int xf_body_bucket_split(xf_body *b, const ir_id *srcs, xf_local *ls, uint32_t n, int scatter,
                         ir_id red, int side);
/* Can gradient l join a reduce-scatter bucket (xf_body_bucket_reduce with scatter)? */
int xf_body_scatter_ok(const xf_body *b, const xf_local *l);
/* Appends x * scale (a scalar constant and a Mul) to region; the product in *res. */
int xf_scaled(ir_module *out, ir_id region, ir_id x, double scale, di_error *err, ir_id *res);
/* Infers and sets the result types of an op the transform made (DI_EINTERNAL if invalid). */
int xf_infer(ir_module *out, ir_id op, di_error *err);
/* Local type of source value v under placement pl on the device variable (or device). */
ir_id xf_local_type(xf_body *b, ir_id v, const xf_place *pl, int32_t device);
/* Copies op attributes (discardable ones included) from src op to dst op, except `skip`. */
void xf_copy_attrs(ir_module *dst, ir_id dop, const ir_module *src, ir_id sop, const char *skip1,
                   const char *skip2);
/* The output module's id of source string s (interned once per transform). */
ir_id xf_str(xf_body *b, ir_id s);

/* ---- weight stashing (stash.c) ---- */

/* Does the forward chunk of microbatch mb copy its stage's weights? */
int xf_stash_copies(const xf_ctx *c, uint32_t mb);
/* Which forward chunk's copy the backward chunk of microbatch mb reads. */
uint32_t xf_stash_version(const xf_ctx *c, uint32_t mb);
/* Do a backward program's weight inputs differ from one microbatch to the next? */
int xf_stash_per_microbatch(const xf_ctx *c);
/*
 * The inputs of a backward program that it reads from a stash instead of the
 * live weights: in[0..n) filtered into out (room for n); returns how many.
 */
uint32_t xf_stash_select(const xf_ctx *c, const ir_id *in, uint32_t n, ir_id *out);
/* Emits the copy of weight v in body b (marked dist.mem = "stashed"). */
int xf_stash_copy(xf_body *b, ir_id v, xf_local *copy);

/* ---- recomputation (recompute.c) ---- */

/* Selective recomputation: flags the attention-score ops (xf_opinfo.recompute). */
void xf_recompute_mark(xf_ctx *c);
void xf_recompute_mark_ops(xf_ctx *c);
/*
 * The forward ops (of fops[0..nf), in order) that a backward chunk running
 * bops[0..nb) recomputes under the strategy's mode; home[op] == fhome marks
 * the forward program's ops. Writes the ops the chunk reads, each emitted
 * right before its first use, to out (room for nf) and returns their count.
 *
 * Under full recomputation, when rest is not NULL, also the rest into
 * rest[0..*nrest) (room for nf; *nrest is 0 under other modes): Megatron-LM's
 * layer checkpointing reruns the whole forward of each checkpointed layer, so
 * the forward ops of the program's transformer layers that no backward op
 * needs and that are not layer checkpoints (kept, never recomputed): a
 * layer's last GEMM when no backward op reads its result (a Llama MLP's down
 * projection; behind a dropout the mask needs it). When readref is not NULL,
 * for each value those ops make that a checkpoint reads, readref[value] = 1 +
 * that reader's input ref (the placement its reduction is made for, as the
 * forward makes it), if not set already.
 */
uint32_t xf_recompute_ops(const xf_ctx *c, const ir_id *fops, uint32_t nf, const ir_id *bops,
                          uint32_t nb, const int32_t *home, int32_t fhome, ir_id *out,
                          ir_id *rest, uint32_t *nrest, uint32_t *readref);
/*
 * Writes bops[0..nb) to out (room for nb + nrest), each of rest[0..nrest)
 * (xf_recompute_ops' rest, in order) right before the first of bops of its layer
 * (none: left out); returns the count.
 */
uint32_t xf_recompute_place(const xf_ctx *c, const ir_id *bops, uint32_t nb, const ir_id *rest,
                            uint32_t nrest, ir_id *out);

/* ---- pipeline and schedule ---- */

#define XF_EV_F XFORM_CHUNK_F
#define XF_EV_B XFORM_CHUNK_B
typedef xform_chunk xf_event;

/*
 * The global order of the chunks: each device group's sequence follows the
 * schedule; the groups' sequences are merged in dependency order. *ev holds
 * 2 * K * m events (the caller frees it with di_free).
 */
int xf_schedule(const xf_ctx *c, xf_event **ev, uint32_t *nev);

int xf_pipeline_build(xf_ctx *c, ir_module **out, xform_layout **layout);

#endif
