/*
 * test_xform_equiv.c: every strategy transform preserves numerics. For a
 * small MLP, a small GPT and a small Llama (grouped-query attention, RMSNorm,
 * SwiGLU, untied embeddings; the grid only) and a small mixture of experts
 * (a dense layer, then MoE layers with a shared expert; dropless: every
 * expert's capacity holds a whole sequence; dp, tp, pp in {1, 2}, with and
 * without expert parallelism; also with DeepSeek's latent attention) (dropout 0: the executor's
 * dropout mask depends on an element's index within the local tensor, so a split changes it), every
 * (dp, tp, pp) in {1, 2, 4}^3 that divides the model, and every row of the variant table
 * (schedules, recomputation, ZeRO stages, stashing, sequence parallelism, overlapped gradient
 * reduction, Adam), the distributed executor's loss and updated weights (and Adam moments) equal
 * the sequential executor's within 1e-5 relative.
 *
 * The arguments go through xform_shard_args and the results through
 * xform_gather_results (the layouts), so the test also checks those. The
 * relative error of an element is |a - b| / (|a| + 1e-4 max|tensor|): a
 * different summation order (all-reduce, accumulation across microbatches)
 * perturbs elements near zero by about 1e-7 of the tensor's scale.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/exec.h"
#include "ir/ir.h"
#include "models/models.h"
#include "xform/xform.h"
#include "xform/xform_exec.h"
#include "support/support.h"

#define TOL 1e-5

typedef struct variant {
    const char *name;
    strategy_schedule schedule;
    uint32_t virtual_stages;
    strategy_recompute recompute;
    strategy_stash stash;
    uint32_t zero;
    int sp;
    int overlap;
    int adam;
    int max_mb; /* 1: no microbatches */
    uint32_t recompute_layers;
} variant;

static const variant variants[] = {
    {"1f1b", STRATEGY_SCHEDULE_1F1B, 1, STRATEGY_RECOMPUTE_NONE, STRATEGY_STASH_NONE, 0, 0, 0, 0,
     4, 0},
    {"single microbatch", STRATEGY_SCHEDULE_1F1B, 1, STRATEGY_RECOMPUTE_NONE, STRATEGY_STASH_NONE,
     0, 0, 0, 0, 1, 0},
    {"gpipe", STRATEGY_SCHEDULE_GPIPE, 1, STRATEGY_RECOMPUTE_NONE, STRATEGY_STASH_NONE, 0, 0, 0, 0,
     4, 0},
    {"interleaved:2", STRATEGY_SCHEDULE_INTERLEAVED, 2, STRATEGY_RECOMPUTE_NONE,
     STRATEGY_STASH_NONE, 0, 0, 0, 0, 4, 0},
    {"recompute selective", STRATEGY_SCHEDULE_1F1B, 1, STRATEGY_RECOMPUTE_SELECTIVE,
     STRATEGY_STASH_NONE, 0, 0, 0, 0, 2, 0},
    {"recompute full", STRATEGY_SCHEDULE_1F1B, 1, STRATEGY_RECOMPUTE_FULL, STRATEGY_STASH_NONE, 0,
     0, 0, 0, 2, 0},
    {"recompute selective-op sp adam", STRATEGY_SCHEDULE_1F1B, 1, STRATEGY_RECOMPUTE_SELECTIVE_OP,
     STRATEGY_STASH_NONE, 0, 1, 0, 1, 2, 0},
    {"recompute full, a stage's first layer", STRATEGY_SCHEDULE_1F1B, 1, STRATEGY_RECOMPUTE_FULL,
     STRATEGY_STASH_NONE, 0, 0, 0, 1, 2, 1},
    {"zero 1 adam", STRATEGY_SCHEDULE_1F1B, 1, STRATEGY_RECOMPUTE_NONE, STRATEGY_STASH_NONE, 1, 0,
     0, 1, 2, 0},
    {"zero 2", STRATEGY_SCHEDULE_1F1B, 1, STRATEGY_RECOMPUTE_NONE, STRATEGY_STASH_NONE, 2, 0, 0, 0,
     2, 0},
    {"zero 3 adam", STRATEGY_SCHEDULE_GPIPE, 1, STRATEGY_RECOMPUTE_FULL, STRATEGY_STASH_NONE, 3, 0,
     0, 1, 2, 0},
    {"stash pipedream", STRATEGY_SCHEDULE_1F1B, 1, STRATEGY_RECOMPUTE_NONE,
     STRATEGY_STASH_PIPEDREAM, 0, 0, 0, 0, 4, 0},
    {"stash 2bw zero 1", STRATEGY_SCHEDULE_1F1B, 1, STRATEGY_RECOMPUTE_NONE, STRATEGY_STASH_2BW, 1,
     0, 0, 0, 2, 0},
    {"sequence parallel", STRATEGY_SCHEDULE_1F1B, 1, STRATEGY_RECOMPUTE_SELECTIVE,
     STRATEGY_STASH_NONE, 0, 1, 0, 0, 2, 0},
    {"overlap grad reduce", STRATEGY_SCHEDULE_1F1B, 1, STRATEGY_RECOMPUTE_NONE, STRATEGY_STASH_NONE,
     0, 0, 1, 0, 4, 0},
    {"overlap zero 2 sp adam", STRATEGY_SCHEDULE_1F1B, 1, STRATEGY_RECOMPUTE_NONE,
     STRATEGY_STASH_NONE, 2, 1, 1, 1, 2, 0},
    {"overlap zero 1 adam", STRATEGY_SCHEDULE_1F1B, 1, STRATEGY_RECOMPUTE_NONE, STRATEGY_STASH_NONE,
     1, 0, 1, 1, 2, 0},
    {"overlap single microbatch", STRATEGY_SCHEDULE_1F1B, 1, STRATEGY_RECOMPUTE_NONE,
     STRATEGY_STASH_NONE, 0, 0, 1, 0, 1, 0},
    {"overlap single microbatch zero 2 adam", STRATEGY_SCHEDULE_1F1B, 1, STRATEGY_RECOMPUTE_NONE,
     STRATEGY_STASH_NONE, 2, 0, 1, 1, 1, 0},
};

typedef struct model_case {
    const char *name;
    int gpt;
    int adam;
    ir_module *m;
    ex_tensor *args, *res;
    uint32_t nargs, nres;
    int64_t batch;
    uint32_t layers;
    int64_t heads; /* tensor-parallel divisibility */
    uint32_t ep;   /* expert parallelism of the strategies run_one makes (0: none) */
    uint32_t cp;   /* context parallelism of the strategies run_one makes (0: none) */
    strategy_order order; /* the rank order of the strategies run_one makes */
} model_case;

/* The layers of the GPT and MLP test models (the others have 4). */
static uint32_t build_layers = 4;

static ir_module *
build(int gpt, int adam)
{
    ir_module *m = NULL;
    di_error err;
    int rc;
    if (gpt == 3 || gpt == 5) {
        /* Mixture of experts: layer 0 dense, layers 1-3 4 experts (top 2) and a shared one. */
        models_llama c;
        models_llama_init(&c);
        if (gpt == 5) {
            /* 5: with multi-head latent attention (DeepSeek-V3's shape, scaled down). */
            c.q_lora = 12;
            c.kv_lora = 8;
            c.qk_nope = 4;
            c.rope_dim = 2;
            c.v_head = 6;
        }
        c.layers = 4;
        c.hidden = 32;
        c.heads = 8;
        c.kv_heads = 4;
        c.ffn = 24;
        c.experts = 4;
        c.top_k = 2;
        c.moe_ffn = 8;
        c.shared_experts = 1;
        c.first_dense = 1;
        c.imbalance = 2; /* capacity = seq: dropless, whatever the routing */
        c.dtype = IR_F64;
        c.seq = 4;
        c.vocab = 12;
        c.batch = 8;
        c.train.optimizer = adam ? XFORM_OPTIM_ADAM : XFORM_OPTIM_SGD;
        rc = models_llama_build(&c, &m, &err);
        if (rc == 0 && models_llama_capacity(&c) != c.seq)
            fail_msg("the MoE test model drops tokens (capacity %lld)",
                     (long long)models_llama_capacity(&c));
    } else if (gpt == 2 || gpt == 4) {
        /* Grouped-query attention: 8 query heads share 4 key/value heads (tp up to 4). */
        models_llama c;
        models_llama_init(&c);
        c.fused_attention = gpt == 4; /* 4: one FlashAttention op per layer */
        c.layers = 4;
        c.hidden = 32;
        c.heads = 8;
        c.kv_heads = 4;
        c.ffn = 24;
        c.dtype = IR_F64; /* f32 Adam moments of near-zero gradients differ by 2e-5 */
        c.seq = 4;
        c.vocab = 12; /* tp 2 and 4 split it; ids 0..10 fall in every block */
        c.batch = 8;
        c.train.optimizer = adam ? XFORM_OPTIM_ADAM : XFORM_OPTIM_SGD;
        rc = models_llama_build(&c, &m, &err);
    } else if (gpt) {
        models_gpt c;
        models_gpt_init(&c);
        c.layers = (int)build_layers;
        c.hidden = 16;
        c.heads = 4;
        c.seq = 4;
        c.vocab = 12;
        c.batch = 8;
        c.dropout = 0;
        c.train.optimizer = adam ? XFORM_OPTIM_ADAM : XFORM_OPTIM_SGD;
        rc = models_gpt_build(&c, &m, &err);
    } else {
        models_mlp c;
        models_mlp_init(&c);
        c.layers = (int)build_layers;
        c.hidden = 8;
        c.input = 6;
        c.classes = 4;
        c.batch = 16;
        c.train.optimizer = adam ? XFORM_OPTIM_ADAM : XFORM_OPTIM_SGD;
        rc = models_mlp_build(&c, &m, &err);
    }
    if (rc != 0)
        fail_msg("build: %s", err.msg);
    return m;
}

static void
case_init(model_case *mc, int gpt, int adam)
{
    di_error err;
    const ir_region *fr;
    memset(mc, 0, sizeof *mc);
    mc->gpt = gpt;
    mc->adam = adam;
    mc->m = build(gpt, adam);
    mc->batch = gpt ? 8 : 16;
    mc->layers = gpt == 0 || gpt == 1 ? build_layers : 4;
    mc->heads = 4;
    if (ex_random_args(mc->m, 1234, gpt ? 11 : 4, &mc->args, &mc->nargs, &err) != 0)
        fail_msg("args: %s", err.msg);
    /* Adam's second moments must not be negative. */
    fr = &mc->m->regions[ir_module_entry(mc->m)];
    for (uint32_t a = 0; a < fr->narg; a++) {
        const char *n = ir_str_get(mc->m, mc->m->values[fr->args[a]].name);
        size_t len = strlen(n);
        if (len > 7 && strcmp(n + len - 7, ".adam_v") == 0)
            for (size_t i = 0; i < mc->args[a].numel; i++)
                ex_set(&mc->args[a], i, fabs(ex_get(&mc->args[a], i)) + 0.1);
    }
    if (ex_run(mc->m, mc->args, mc->nargs, &mc->res, &mc->nres, &err) != 0)
        fail_msg("sequential: %s", err.msg);
}

static void
case_fini(model_case *mc)
{
    free_tensors(mc->args, mc->nargs);
    free_tensors(mc->res, mc->nres);
    ir_module_free(mc->m);
}

/* Worst relative error over every result; INFINITY on a shape mismatch or NaN. */
static double
compare(const ex_tensor *want, const ex_tensor *got, uint32_t n, uint32_t *where)
{
    double worst = 0;
    for (uint32_t i = 0; i < n; i++) {
        double scale = 0;
        if (want[i].numel != got[i].numel) {
            *where = i;
            return INFINITY;
        }
        for (size_t j = 0; j < want[i].numel; j++)
            if (fabs(ex_get(&want[i], j)) > scale)
                scale = fabs(ex_get(&want[i], j));
        for (size_t j = 0; j < want[i].numel; j++) {
            double a = ex_get(&want[i], j), b = ex_get(&got[i], j);
            double e = fabs(a - b) / (fabs(a) + 1e-4 * scale + 1e-30);
            if (isnan(a) || isnan(b))
                e = INFINITY;
            if (e > worst) {
                worst = e;
                *where = i;
            }
        }
    }
    return worst;
}

/* The largest microbatch count <= max that divides the batch share. */
static uint32_t
pick_mb(int64_t share, uint32_t max, uint32_t multiple_of)
{
    for (uint32_t m = max; m >= 1; m--)
        if (share % m == 0 && m % multiple_of == 0)
            return m;
    return 0;
}

static uint32_t nrun, nskip, nvocab; /* nvocab: runs with a vocabulary-parallel loss */

/* Applies s to the case, runs both executors and compares. */
static void
check(model_case *mc, const strategy *s, const char *vname)
{
    ir_module *dm = NULL;
    xform_layout *lay = NULL;
    ex_tensor *dargs, *dres, *got;
    uint32_t nd, ndr, ng, where = 0;
    di_error err;
    char desc[512];
    double e;
    strategy_format(s, desc, sizeof desc);
    di_error_clear(&err);
    if (xform_apply_layout(mc->m, s, NULL, &dm, &lay, &err) != 0)
        fail_msg("%s %s (%s): apply: %s", mc->name, desc, vname, err.msg);
    if (ir_verify(dm, &err) != 0)
        fail_msg("%s %s (%s): verify: %s", mc->name, desc, vname, err.msg);
    for (uint32_t i = 1; i < dm->nop; i++)
        if (dm->ops[i].kind == IR_OP_VOCABSTATS) {
            nvocab++;
            break;
        }
    if (xform_shard_args(lay, mc->args, mc->nargs, &dargs, &nd, &err) != 0)
        fail_msg("%s %s: shard: %s", mc->name, desc, err.msg);
    if (ex_run(dm, dargs, nd, &dres, &ndr, &err) != 0)
        fail_msg("%s %s (%s): distributed executor: %s", mc->name, desc, vname, err.msg);
    if (xform_gather_results(lay, dres, ndr, &got, &ng, &err) != 0)
        fail_msg("%s %s: gather: %s", mc->name, desc, err.msg);
    assert_int_equal(ng, mc->nres);
    e = compare(mc->res, got, ng, &where);
    if (!(e <= TOL))
        fail_msg("%s %s (%s): result %u differs from the sequential one by %g relative",
                 mc->name, desc, vname, where, e);
    nrun++;
    free_tensors(dargs, nd);
    free_tensors(dres, ndr);
    free_tensors(got, ng);
    xform_layout_free(lay);
    ir_module_free(dm);
}

/* A strategy with pp stages and the options of variant v (degrees and microbatches: caller). */
static void
strategy_of(const variant *v, uint32_t pp, strategy *s)
{
    xform_strategy_init(s);
    s->pp = pp;
    s->schedule = v->schedule;
    s->virtual_stages = v->virtual_stages;
    s->recompute = v->recompute;
    s->recompute_layers = v->recompute_layers;
    s->stash = v->stash;
    s->zero = v->zero;
    s->sequence_parallel = v->sp;
    s->overlap_grad_reduce = v->overlap;
}

static void
run_one(model_case *mc, uint32_t dp, uint32_t tp, uint32_t pp, const variant *v)
{
    strategy s;
    strategy_of(v, pp, &s);
    s.dp = dp;
    s.tp = tp;
    s.ep = mc->ep;
    s.cp = mc->cp;
    s.order = mc->order;
    if (v->sp && (!mc->gpt || tp == 1)) {
        nskip++;
        return;
    }
    if (v->schedule == STRATEGY_SCHEDULE_INTERLEAVED && (pp == 1 || pp * 2 > mc->layers)) {
        nskip++;
        return;
    }
    s.microbatches = pick_mb(mc->batch / dp, (uint32_t)v->max_mb,
                             v->schedule == STRATEGY_SCHEDULE_INTERLEAVED ? pp : 1);
    if (s.microbatches == 0) {
        nskip++;
        return;
    }
    check(mc, &s, v->name);
}

/*
 * Nested parallelism (seed 000): pipeline stages with their own data and
 * tensor degrees, optionally their own layer counts, and tensor parallelism
 * on a subset of the layers; each with every variant that applies.
 */
typedef struct nested {
    uint32_t pp;
    strategy_stage st[4];  /* dp, tp, layers per group; dp 0 ends a uniform strategy */
    uint32_t dp, tp;    /* uniform degrees when st[0].dp is 0 */
    uint32_t ntpl;
    uint32_t tpl[4];    /* tp_layers */
} nested;

static const nested nests[] = {
    {2, {{2, 1, 0}, {1, 2, 0}}, 0, 0, 0, {0}},
    {2, {{1, 2, 0}, {2, 1, 0}}, 0, 0, 0, {0}},
    {2, {{4, 1, 0}, {1, 1, 0}}, 0, 0, 0, {0}},
    {2, {{1, 1, 0}, {2, 2, 0}}, 0, 0, 0, {0}},
    {2, {{2, 2, 0}, {4, 1, 0}}, 0, 0, 0, {0}},
    {2, {{2, 1, 1}, {1, 2, 3}}, 0, 0, 0, {0}},
    {4, {{1, 1, 0}, {2, 1, 0}, {1, 2, 0}, {2, 2, 0}}, 0, 0, 0, {0}},
    {1, {{0, 0, 0}}, 2, 2, 2, {1, 2}},
    {1, {{0, 0, 0}}, 1, 4, 1, {0}},
    {2, {{0, 0, 0}}, 1, 2, 2, {0, 3}},
    {2, {{2, 2, 0}, {1, 2, 0}}, 0, 0, 2, {2, 3}},
};

static void
nested_grid(int gpt)
{
    model_case sgd, adam;
    case_init(&sgd, gpt, 0);
    case_init(&adam, gpt, 1);
    sgd.name = adam.name = gpt == 2 ? "llama" : gpt ? "gpt" : "mlp";
    nrun = nskip = 0;
    for (size_t n = 0; n < sizeof nests / sizeof nests[0]; n++) {
        const nested *ne = &nests[n];
        uint32_t maxdp = 1, maxtp = 1;
        for (uint32_t g = 0; g < ne->pp && ne->st[0].dp; g++) {
            if (ne->st[g].dp > maxdp)
                maxdp = ne->st[g].dp;
            if (ne->st[g].tp > maxtp)
                maxtp = ne->st[g].tp;
        }
        if (!ne->st[0].dp) {
            maxdp = ne->dp;
            maxtp = ne->tp;
        }
        for (size_t k = 0; k < sizeof variants / sizeof variants[0]; k++) {
            const variant *v = &variants[k];
            model_case *mc = v->adam ? &adam : &sgd;
            strategy s;
            strategy_stage st[4]; /* the strategy's arrays are not const */
            uint32_t tpl[4];
            int fixed = ne->st[0].layers != 0;
            memcpy(st, ne->st, sizeof st);
            memcpy(tpl, ne->tpl, sizeof tpl);
            strategy_of(v, ne->pp, &s);
            if (ne->st[0].dp) {
                s.nstages = ne->pp;
                s.stages = st;
            } else {
                s.dp = ne->dp;
                s.tp = ne->tp;
            }
            s.ntp_layers = ne->ntpl;
            s.tp_layers = tpl;
            if ((v->sp && (!gpt || maxtp == 1 || ne->ntpl)) ||
                (v->schedule == STRATEGY_SCHEDULE_INTERLEAVED &&
                 (ne->pp == 1 || fixed || mc->layers % (ne->pp * 2) != 0))) {
                nskip++;
                continue;
            }
            s.microbatches = pick_mb(mc->batch / maxdp, (uint32_t)v->max_mb,
                                     v->schedule == STRATEGY_SCHEDULE_INTERLEAVED ? ne->pp : 1);
            if (s.microbatches == 0) {
                nskip++;
                continue;
            }
            check(mc, &s, v->name);
        }
    }
    fprintf(stderr, "%s: %u nested strategies equal the sequential step, %u not applicable\n",
            sgd.name, nrun, nskip);
    assert_true(nrun > 100);
    case_fini(&sgd);
    case_fini(&adam);
}

static void
test_mlp_nested(void **state)
{
    (void)state;
    nested_grid(0);
}

static void
test_gpt_nested(void **state)
{
    (void)state;
    nested_grid(1);
}

static void
grid(int gpt)
{
    static const uint32_t deg[3] = {1, 2, 4};
    model_case sgd, adam;
    case_init(&sgd, gpt, 0);
    case_init(&adam, gpt, 1);
    sgd.name = adam.name = gpt == 2 ? "llama" : gpt ? "gpt" : "mlp";
    nrun = nskip = nvocab = 0;
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++)
            for (int c = 0; c < 3; c++) {
                uint32_t dp = deg[a], tp = deg[b], pp = deg[c];
                if (sgd.batch % dp != 0 || sgd.heads % tp != 0 || sgd.layers % pp != 0)
                    continue;
                for (size_t k = 0; k < sizeof variants / sizeof variants[0]; k++)
                    run_one(variants[k].adam ? &adam : &sgd, dp, tp, pp, &variants[k]);
            }
    fprintf(stderr,
            "%s: %u strategies equal the sequential step (%u with a vocabulary-parallel "
            "embedding and loss), %u not applicable\n",
            sgd.name, nrun, nvocab, nskip);
    assert_true(nrun > 200);
    /* Every tp > 1 run of the GPT and the Llama splits the vocabulary (12 classes). */
    if (gpt)
        assert_true(nvocab > 100);
    case_fini(&sgd);
    case_fini(&adam);
}

/*
 * The MLP and the GPT on pp stages, every variant of vs[0..n) with dp and tp in {1, 2};
 * returns the runs that equal the sequential step per model (mlp, gpt).
 */
static void
uneven_grid(const variant *vs, size_t n, uint32_t pp, const char *what, uint32_t runs[2])
{
    model_case sgd, adam;
    for (int gpt = 0; gpt <= 1; gpt++) {
        case_init(&sgd, gpt, 0);
        case_init(&adam, gpt, 1);
        sgd.name = adam.name = gpt ? "gpt" : "mlp";
        nrun = nskip = 0;
        for (uint32_t dp = 1; dp <= 2; dp++)
            for (uint32_t tp = 1; tp <= 2; tp++)
                for (size_t k = 0; k < n; k++)
                    run_one(vs[k].adam ? &adam : &sgd, dp, tp, pp, &vs[k]);
        fprintf(stderr, "%s: %u strategies on %s equal the sequential step\n", sgd.name, nrun,
                what);
        runs[gpt] = nrun;
        case_fini(&sgd);
        case_fini(&adam);
    }
}

/*
 * Pipelines whose degree does not divide the layers (4 layers on pp 3, as
 * Llama-3.1-405B's 126 on 16): stages balanced by cost, every variant that
 * applies, with and without data and tensor parallelism.
 */
static void
test_uneven_pipeline(void **state)
{
    uint32_t runs[2];
    (void)state;
    uneven_grid(variants, sizeof variants / sizeof variants[0], 3, "3 uneven stages", runs);
    assert_true(runs[0] >= 40 && runs[1] >= 40);
}

/*
 * Interleaved pipelines whose model stages do not divide the layers (6 layers on pp 2 x V 2
 * = 4 model stages, as Llama-3.1-405B's 126 on pp 16 x V 2): stages balanced by cost, with
 * recomputation, ZeRO and overlap, with and without data and tensor parallelism.
 */
static void
test_uneven_interleaved(void **state)
{
    static const variant iv[] = {
        {"interleaved:2", STRATEGY_SCHEDULE_INTERLEAVED, 2, STRATEGY_RECOMPUTE_NONE,
         STRATEGY_STASH_NONE, 0, 0, 0, 0, 4, 0},
        {"interleaved:2 recompute full", STRATEGY_SCHEDULE_INTERLEAVED, 2,
         STRATEGY_RECOMPUTE_FULL, STRATEGY_STASH_NONE, 0, 0, 0, 0, 4, 0},
        {"interleaved:2 recompute selective sp", STRATEGY_SCHEDULE_INTERLEAVED, 2,
         STRATEGY_RECOMPUTE_SELECTIVE, STRATEGY_STASH_NONE, 0, 1, 0, 0, 2, 0},
        {"interleaved:2 zero 1 overlap adam", STRATEGY_SCHEDULE_INTERLEAVED, 2,
         STRATEGY_RECOMPUTE_NONE, STRATEGY_STASH_NONE, 1, 0, 1, 1, 4, 0},
        {"interleaved:2 zero 3 adam", STRATEGY_SCHEDULE_INTERLEAVED, 2, STRATEGY_RECOMPUTE_FULL,
         STRATEGY_STASH_NONE, 3, 0, 0, 1, 2, 0},
        {"interleaved:2 recompute full, a chunk's first layer adam", STRATEGY_SCHEDULE_INTERLEAVED,
         2, STRATEGY_RECOMPUTE_FULL, STRATEGY_STASH_NONE, 0, 0, 0, 1, 2, 1},
    };
    uint32_t runs[2];
    (void)state;
    build_layers = 6;
    uneven_grid(iv, sizeof iv / sizeof iv[0], 2, "4 uneven interleaved model stages", runs);
    build_layers = 4;
    assert_true(runs[0] >= 14 && runs[1] >= 18);
}

/*
 * The mixture of experts: every dp, tp, pp in {1, 2}, expert parallelism
 * off and (dp = 2) over the data-parallel group, every variant; the expert
 * weights' all_to_all dispatch and combine and their unreduced gradients
 * give the sequential step.
 */
static void
test_moe_grid(void **state)
{
    (void)state;
    /* 3: the MoE with grouped-query attention; 5: with multi-head latent attention. */
    for (int gpt = 3; gpt <= 5; gpt += 2) {
        model_case sgd, adam;
        uint32_t nep = 0;
        case_init(&sgd, gpt, 0);
        case_init(&adam, gpt, 1);
        sgd.name = adam.name = gpt == 5 ? "moe-mla" : "moe";
        nrun = nskip = nvocab = 0;
        for (uint32_t dp = 1; dp <= 2; dp++)
            for (uint32_t tp = 1; tp <= 2; tp++)
                for (uint32_t pp = 1; pp <= 2; pp++)
                    for (uint32_t ep = 1; ep <= dp; ep++) {
                        uint32_t before = nrun;
                        sgd.ep = adam.ep = ep;
                        for (size_t k = 0; k < sizeof variants / sizeof variants[0]; k++)
                            run_one(variants[k].adam ? &adam : &sgd, dp, tp, pp, &variants[k]);
                        if (ep > 1)
                            nep += nrun - before;
                    }
        fprintf(stderr,
                "%s: %u strategies equal the sequential step (%u with ep=2), %u not applicable\n",
                sgd.name, nrun, nep, nskip);
        assert_true(nrun > 80);
        assert_true(nep > 20);
        case_fini(&sgd);
        case_fini(&adam);
    }
}

/*
 * Expert parallelism over part of the data group: dp = 4 as (outer, inner)
 * = (2, 2) with ep = 2, every tp, pp in {1, 2}, with and without cp = 2,
 * every variant; the all_to_alls run inside each pair of data ranks and the
 * expert gradients are all-reduced over the outer data axis only.
 */
static void
test_moe_ep_subgroup(void **state)
{
    (void)state;
    for (int gpt = 3; gpt <= 5; gpt += 2) {
        model_case sgd, adam;
        case_init(&sgd, gpt, 0);
        case_init(&adam, gpt, 1);
        sgd.name = adam.name = gpt == 5 ? "moe-mla" : "moe";
        sgd.ep = adam.ep = 2;
        nrun = nskip = nvocab = 0;
        for (uint32_t cp = 1; cp <= (gpt == 3 ? 2u : 1u); cp++)
            for (uint32_t tp = 1; tp <= 2; tp++)
                for (uint32_t pp = 1; pp <= 2; pp++) {
                    sgd.cp = adam.cp = cp > 1 ? cp : 0;
                    for (size_t k = 0; k < sizeof variants / sizeof variants[0]; k++)
                        run_one(variants[k].adam ? &adam : &sgd, 4, tp, pp, &variants[k]);
                }
        fprintf(stderr,
                "%s: %u strategies with dp=4, ep=2 equal the sequential step, %u not "
                "applicable\n",
                sgd.name, nrun, nskip);
        assert_true(nrun >= 40);
        case_fini(&sgd);
        case_fini(&adam);
    }
}

/*
 * Context parallelism: the sequence split over cp = 2 ranks (keys and values
 * all-gathered for attention, their gradients reduce-scattered, weight
 * gradients reduced over dp x cp) with every dp, tp, pp in {1, 2} and every
 * variant (sequence parallelism included), on the
 * GPT, the Llama (also with fused causal attention: each rank's query block
 * offsets its mask) and the mixtures of experts (with grouped-query and with
 * latent attention; with and without ep).
 */
static void
test_cp_grid(void **state)
{
    (void)state;
    for (int gpt = 1; gpt <= 5; gpt++) {
        model_case sgd, adam;
        case_init(&sgd, gpt, 0);
        case_init(&adam, gpt, 1);
        sgd.name = adam.name = gpt == 5   ? "moe-mla"
                               : gpt == 4 ? "llama-fused"
                               : gpt == 3 ? "moe"
                               : gpt == 2 ? "llama"
                                          : "gpt";
        sgd.cp = adam.cp = 2;
        nrun = nskip = nvocab = 0;
        for (uint32_t dp = 1; dp <= 2; dp++)
            for (uint32_t tp = 1; tp <= 2; tp++)
                for (uint32_t pp = 1; pp <= 2; pp++)
                    for (uint32_t ep = 1; ep <= (gpt == 3 || gpt == 5 ? dp : 1); ep++) {
                        sgd.ep = adam.ep = ep;
                        for (size_t k = 0; k < sizeof variants / sizeof variants[0]; k++)
                            run_one(variants[k].adam ? &adam : &sgd, dp, tp, pp, &variants[k]);
                    }
        fprintf(stderr, "%s: %u strategies with cp=2 equal the sequential step, %u not "
                "applicable\n", sgd.name, nrun, nskip);
        assert_true(nrun >= 60);
        case_fini(&sgd);
        case_fini(&adam);
    }
}

/*
 * The rank order tp-pp-dp (a replica's stages on consecutive devices): every
 * dp x pp with both above 1 that fits 8 devices, tp 1 and 2, every variant,
 * on the MLP, the GPT and the Llama, and on the GPT with cp = 2 (dp 1: the
 * context ranks between a replica's stages): the same step as the
 * sequential module. A wrong device for a rank would put two ranks on one
 * device or a collective over the wrong group, and change the result.
 */
static void
test_order_grid(void **state)
{
    (void)state;
    for (int gpt = 0; gpt <= 3; gpt++) {
        model_case sgd, adam;
        case_init(&sgd, gpt == 3 ? 1 : gpt, 0);
        case_init(&adam, gpt == 3 ? 1 : gpt, 1);
        sgd.name = adam.name = gpt == 3 ? "gpt-cp" : gpt == 2 ? "llama" : gpt ? "gpt" : "mlp";
        sgd.order = adam.order = STRATEGY_ORDER_TP_PP_DP;
        if (gpt == 3)
            sgd.cp = adam.cp = 2;
        nrun = nskip = nvocab = 0;
        for (uint32_t dp = gpt == 3 ? 1 : 2; dp <= 2; dp++)
            for (uint32_t tp = 1; tp <= 2; tp++)
                for (uint32_t pp = 2; pp <= 4; pp += 2) {
                    if (dp * tp * pp * (gpt == 3 ? 2u : 1u) > 8)
                        continue;
                    for (size_t k = 0; k < sizeof variants / sizeof variants[0]; k++)
                        run_one(variants[k].adam ? &adam : &sgd, dp, tp, pp, &variants[k]);
                }
        fprintf(stderr, "%s: %u strategies with order=tp-pp-dp equal the sequential step, %u not "
                "applicable\n", sgd.name, nrun, nskip);
        assert_true(nrun >= 20);
        case_fini(&sgd);
        case_fini(&adam);
    }
}

static void
test_mlp_grid(void **state)
{
    (void)state;
    grid(0);
}

static void
test_gpt_grid(void **state)
{
    (void)state;
    grid(1);
}

static void
test_llama_grid(void **state)
{
    (void)state;
    grid(2);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mlp_grid),
        cmocka_unit_test(test_uneven_pipeline),
        cmocka_unit_test(test_uneven_interleaved),
        cmocka_unit_test(test_gpt_grid),
        cmocka_unit_test(test_llama_grid),
        cmocka_unit_test(test_moe_grid),
        cmocka_unit_test(test_moe_ep_subgroup),
        cmocka_unit_test(test_cp_grid),
        cmocka_unit_test(test_order_grid),
        cmocka_unit_test(test_mlp_nested),
        cmocka_unit_test(test_gpt_nested),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
