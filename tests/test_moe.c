/*
 * test_moe.c: mixtures of experts and expert parallelism (docs/models.md,
 * "Mixture of experts"; docs/transforms.md, "Expert parallelism").
 *
 *   - the presets' parameter counts (total and active) against the
 *     published figures, and the module's trained arguments against the
 *     formula;
 *   - the routing ops on hand-computed values: TopK, slots (capacity and
 *     drops), dispatch and combine (each the other's gradient);
 *   - expert parallelism's communication, derived by hand: per MoE layer and
 *     microbatch four all_to_alls (dispatch and combine, forward and
 *     backward) of [B/dp, E, C, h] blocks among ep ranks, each device
 *     keeping 1/ep of them; no gradient reduction for the experts when ep =
 *     dp, an all-reduce over the dp / ep ranks that hold the same experts
 *     when ep < dp;
 *   - the model-state memory per device under ep, against the formula in
 *     docs/models.md.
 * (The numerics of every dp/tp/pp/ep combination are in test_xform_equiv.)
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "exec/exec.h"
#include "ir/ir.h"
#include "models/models.h"
#include "sim/hw.h"
#include "sim/sim.h"
#include "xform/xform.h"
#include "support/support.h"

/* Published totals and active counts, to the precision published (3 significant figures). */
static void
test_presets(void **state)
{
    static const struct {
        const char *name;
        double total, active, digits; /* digits: half a unit of the last published digit */
        int active_embed;             /* the published active count includes the input embedding */
    } want[] = {
        {"mixtral-8x7b", 46.7e9, 12.9e9, 0.05e9, 1},    /* Jiang et al. 2024; Mistral AI */
        {"deepseek-moe-16b", 16.4e9, 2.8e9, 0.05e9, 1}, /* Dai et al. 2024, Table 1 */
        /* DeepSeek-AI 2024 (V3): 671B, 37B activated; the latter without the input embedding. */
        {"deepseek-v3", 671e9, 37e9, 0.5e9, 0},
    };
    (void)state;
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        models_llama c;
        di_error err;
        models_llama_init(&c);
        assert_int_equal(models_llama_preset(want[i].name, &c, &err), 0);
        double n = (double)models_llama_parameters(&c),
               a = (double)models_llama_active_parameters(&c);
        double a_pub = a - (want[i].active_embed ? 0 : (double)c.vocab * (double)c.hidden);
        printf("%-17s %.6g parameters (published %.3g), %.6g active (published %.3g)\n",
               want[i].name, n, want[i].total, a_pub, want[i].active);
        assert_true(fabs(n - want[i].total) <= want[i].digits);
        assert_true(fabs(n / want[i].total - 1) < 2e-3);
        assert_true(fabs(a_pub - want[i].active) <= want[i].digits);
        assert_true(c.experts > 0 && a < n);
    }
    /* Mixtral's total to 0.1%: 2 V h + 32 (attention + router + 8 experts) + h. */
    {
        models_llama c;
        models_llama_init(&c);
        models_llama_preset("mixtral-8x7b", &c, NULL);
        assert_int_equal(models_llama_parameters(&c), UINT64_C(46702792704));
        assert_int_equal(models_llama_active_parameters(&c), UINT64_C(12879925248));
    }
}

/*
 * The expert parameters of small_moe(8, ...): 2 MoE layers of 8 experts, each
 * 3 matrices of 32 x 16.
 */
#define SMALL_MOE_EXPERT_PARAMS ((uint64_t)2 * 8 * 3 * 32 * 16)

/* A small MoE: layer 0 dense, layers 1.. MoE with E experts, top k, one shared expert. */
static ir_module *
small_moe(int64_t experts, int64_t k, double imbalance, ir_dtype dt, xform_optim opt,
          models_llama *out)
{
    models_llama c;
    ir_module *m = NULL;
    di_error err;
    models_llama_init(&c);
    c.layers = 3;
    c.hidden = 32;
    c.heads = 4;
    c.kv_heads = 2;
    c.ffn = 48;
    c.experts = experts;
    c.top_k = k;
    c.moe_ffn = 16;
    c.shared_experts = 1;
    c.first_dense = 1;
    c.imbalance = imbalance;
    c.seq = 8;
    c.vocab = 64;
    c.batch = 8;
    c.dtype = dt;
    c.train.optimizer = opt;
    if (models_llama_build(&c, &m, &err) != 0)
        fail_msg("build: %s", err.msg);
    if (out)
        *out = c;
    return m;
}

static void
test_module_counts(void **state)
{
    models_llama c;
    sim_model_stats st;
    ir_module *m = small_moe(8, 2, 1, IR_F32, XFORM_OPTIM_ADAM, &c);
    (void)state;
    assert_verifies(m);
    sim_model_stats_of(m, &st);
    assert_int_equal(st.parameters, models_llama_parameters(&c));
    assert_int_equal(st.active_parameters, models_llama_active_parameters(&c));
    /* Per MoE layer: 8 experts of 3 x 32 x 16, 2 of them active. */
    assert_int_equal(st.parameters - st.active_parameters, 2 * 6 * 3 * 32 * 16);
    /*
     * 6N's N: the active weights a matmul reads, the router and the active experts
     * included; not the token embedding (64 x 32, untied, only looked up) nor the 7 norms.
     */
    assert_int_equal(st.matmul_parameters, st.active_parameters - 64 * 32 - 7 * 32);
    assert_true(st.flops_6n == 6.0 * (double)st.matmul_parameters * st.tokens);
    /* Balanced capacity: ceil(seq k / E) = 2 slots per expert and sequence. */
    assert_int_equal(models_llama_capacity(&c), 2);
    c.imbalance = 2.5;
    assert_int_equal(models_llama_capacity(&c), 5);
    c.capacity_factor = 1.25; /* a capacity factor wins over the imbalance */
    assert_int_equal(models_llama_capacity(&c), 3);
    c.capacity_factor = 100;
    assert_int_equal(models_llama_capacity(&c), c.seq);
    ir_module_free(m);
    /* With multi-head latent attention: the module's trained arguments are the formula's too. */
    c.q_lora = 12;
    c.kv_lora = 8;
    c.qk_nope = 4;
    c.rope_dim = 2;
    c.v_head = 6;
    c.capacity_factor = 0;
    assert_int_equal(models_llama_build(&c, &m, NULL), 0);
    assert_verifies(m);
    sim_model_stats_of(m, &st);
    assert_int_equal(st.parameters, models_llama_parameters(&c));
    assert_int_equal(st.active_parameters, models_llama_active_parameters(&c));
    ir_module_free(m);
    c.rope_dim = 0;
    assert_int_equal(models_llama_build(&c, &m, NULL), DI_EINVAL);
    c.kv_lora = 0;
    /* --moe-ffn unset: the experts are the dense MLP's size (Mixtral), the same module. */
    {
        ir_module *a, *b;
        di_hash ha, hb;
        c.moe_ffn = 0;
        assert_int_equal(models_llama_moe_ffn(&c), c.ffn);
        assert_int_equal(models_llama_build(&c, &a, NULL), 0);
        c.moe_ffn = c.ffn;
        assert_int_equal(models_llama_build(&c, &b, NULL), 0);
        ir_hash(a, &ha);
        ir_hash(b, &hb);
        assert_memory_equal(ha.b, hb.b, sizeof ha.b);
        ir_module_free(a);
        ir_module_free(b);
        c.moe_ffn = 16;
    }
    /* Bad shapes are refused by name. */
    c.top_k = 9;
    assert_int_equal(models_llama_build(&c, &m, NULL), DI_EINVAL);
}

/* The routing ops on one row: 3 tokens, top 1 of 2 experts, capacity 1 (a token dropped). */
static const char routing_ir[] =
    "func @f(%p: !dist.tensor<1x3x2xf32, 0>, %x: !dist.tensor<1x3x1x2xf32, 0>) -> "
    "(!dist.tensor<1x3x1xf32, 0>, !dist.tensor<1x3x1xi64, 0>, !dist.tensor<1x2x1x2xf32, 0>, "
    "!dist.tensor<1x3x1x2xf32, 0>, !dist.tensor<1x3x2xf32, 0>) {\n"
    "  %v, %i = \"TopK\"(%p) {k = 1} : (!dist.tensor<1x3x2xf32, 0>) -> "
    "(!dist.tensor<1x3x1xf32, 0>, !dist.tensor<1x3x1xi64, 0>)\n"
    "  %s = \"moe.slots\"(%i) {experts = 2, capacity = 1} : (!dist.tensor<1x3x1xi64, 0>) -> "
    "!dist.tensor<1x3x1xi64, 0>\n"
    "  %d = \"moe.dispatch\"(%x, %s) {experts = 2, capacity = 1} : (!dist.tensor<1x3x1x2xf32, 0>, "
    "!dist.tensor<1x3x1xi64, 0>) -> !dist.tensor<1x2x1x2xf32, 0>\n"
    "  %c = \"moe.combine\"(%d, %s) : (!dist.tensor<1x2x1x2xf32, 0>, !dist.tensor<1x3x1xi64, 0>) "
    "-> !dist.tensor<1x3x1x2xf32, 0>\n"
    "  %g = \"TopKGrad\"(%v, %i) {size = 2} : (!dist.tensor<1x3x1xf32, 0>, "
    "!dist.tensor<1x3x1xi64, 0>) -> !dist.tensor<1x3x2xf32, 0>\n"
    "  return %v, %s, %d, %c, %g : !dist.tensor<1x3x1xf32, 0>, !dist.tensor<1x3x1xi64, 0>, "
    "!dist.tensor<1x2x1x2xf32, 0>, !dist.tensor<1x3x1x2xf32, 0>, !dist.tensor<1x3x2xf32, 0>\n"
    "}\n";

static void
test_routing_ops(void **state)
{
    /* Tokens 0 and 1 prefer expert 0 (token 1 ties: the lower index), token 2 expert 1. */
    static const float p[6] = {0.9f, 0.1f, 0.5f, 0.5f, 0.2f, 0.8f};
    static const float x[6] = {1, 2, 3, 4, 5, 6};
    static const float want_d[4] = {1, 2, 5, 6}; /* expert 0: token 0; expert 1: token 2 */
    static const float want_c[6] = {1, 2, 0, 0, 5, 6};     /* token 1 dropped */
    static const float want_g[6] = {0.9f, 0, 0.5f, 0, 0, 0.8f};
    static const int64_t want_s[3] = {0, -1, 1};
    ir_module *m = NULL;
    ex_tensor args[2], *res;
    uint32_t nres;
    di_error err;
    (void)state;
    if (ir_parse(routing_ir, strlen(routing_ir), &m, &err) != 0)
        fail_msg("parse: %s", err.msg);
    assert_verifies(m);
    assert_int_equal(ex_tensor_init(&args[0], IR_F32, 3, (int64_t[]){1, 3, 2}), 0);
    assert_int_equal(ex_tensor_init(&args[1], IR_F32, 4, (int64_t[]){1, 3, 1, 2}), 0);
    memcpy(args[0].data, p, sizeof p);
    memcpy(args[1].data, x, sizeof x);
    run_ok(m, args, 2, &res, &nres);
    assert_int_equal(nres, 5);
    for (int i = 0; i < 3; i++) {
        assert_true(((const int64_t *)res[1].data)[i] == want_s[i]);
        assert_true(ex_get(&res[0], (size_t)i) == (double)p[i * 2 + (i == 2)]);
    }
    for (int i = 0; i < 4; i++)
        assert_true(ex_get(&res[2], (size_t)i) == want_d[i]);
    for (int i = 0; i < 6; i++) {
        assert_true(ex_get(&res[3], (size_t)i) == want_c[i]);
        assert_true(fabs(ex_get(&res[4], (size_t)i) - want_g[i]) < 1e-7);
    }
    free_tensors(res, nres);
    ex_tensor_fini(&args[0]);
    ex_tensor_fini(&args[1]);
    ir_module_free(m);
}

/* Bytes of a tensor type. */
static uint64_t
type_bytes(const ir_module *m, ir_id t)
{
    return (uint64_t)ir_type_numel(m, t) * ir_dtype_size((ir_dtype)m->types[t].dtype);
}

/* The devices a mesh-form collective op runs among (its group). */
static int64_t
group_size(const ir_module *d, ir_id op)
{
    uint32_t na = 0;
    const int64_t *ax = ir_op_ints(d, op, "mesh_axes", &na);
    const ir_attr *ma = ir_op_attr(d, op, "mesh");
    int64_t n = 1;
    assert_non_null(ax);
    assert_non_null(ma);
    for (uint32_t i = 0; i < na; i++)
        n *= ir_mesh_shape(d, ma->s)[ax[i]];
    return n;
}

/*
 * Under ep over dp (ep = dp, then ep = dp / 2): the all_to_alls move
 * [B/(dp m), E, C, h] token-major blocks to [B ep/(dp m), E/ep, C, h]
 * expert-major ones among the ep ranks of an expert group; the expert
 * gradients are reduced among the dp / ep ranks holding the same experts (none
 * when ep = dp), in all-reduces of E/ep experts' bytes.
 */
static void
test_ep_all_to_all(void **state)
{
    models_llama c;
    ir_module *m = small_moe(4, 2, 1, IR_F32, XFORM_OPTIM_SGD, &c), *d = NULL;
    strategy s;
    di_error err;
    const uint32_t mb = 2, moe_layers = 2;
    const int64_t cap = models_llama_capacity(&c); /* 8 * 2 / 4 = 4 */
    /* Per MoE layer: w1, w3 [E, h, f] and w2 [E, f, h] (small_moe: h 32, moe_ffn 16). */
    const int64_t expert_params = (int64_t)moe_layers * 3 * c.experts * c.hidden * c.moe_ffn;
    static const uint32_t dps[2] = {2, 4}, eps[2] = {2, 2};
    (void)state;
    assert_int_equal(cap, 4);
    for (int k = 0; k < 2; k++) {
        const uint32_t dp = dps[k], ep = eps[k];
        uint32_t na2a = 0, nar = 0, nexpert_ar = 0;
        int64_t expert_ar_bytes = 0;
        xform_strategy_init(&s);
        s.dp = dp;
        s.ep = ep;
        s.microbatches = mb;
        assert_int_equal(xform_apply(m, &s, NULL, &d, &err), 0);
        assert_verifies(d);
        for (ir_id op = 1; op < d->nop; op++) {
            const ir_op *o = &d->ops[op];
            if (o->kind == IR_OP_ALLTOALL) {
                ir_id in = d->values[d->refs[o->inputs]].type, out = d->values[o->outputs].type;
                const int64_t *id = ir_type_dims(d, in), *od = ir_type_dims(d, out);
                /*
                 * Token-major [B/(dp m), E, C, h] <-> expert-major [B ep/(dp m), E/ep, C, h]:
                 * the same bytes, 1/ep of them kept (dispatch one way, combine the other).
                 */
                if (id[1] != c.experts) {
                    const int64_t *t = id;
                    ir_id tt = in;
                    id = od, od = t;
                    in = out, out = tt;
                }
                assert_int_equal(d->types[in].rank, 4);
                assert_int_equal(id[0], c.batch / (dp * mb));
                assert_int_equal(id[1], c.experts);
                assert_int_equal(id[2], cap);
                assert_int_equal(id[3], c.hidden);
                assert_int_equal(od[0], c.batch * ep / (dp * mb));
                assert_int_equal(od[1], c.experts / ep);
                assert_int_equal(type_bytes(d, in), type_bytes(d, out));
                assert_int_equal(type_bytes(d, in),
                                 (c.batch / (dp * mb)) * c.experts * cap * c.hidden * 4);
                assert_int_equal(group_size(d, op), ep);
                na2a++;
            } else if (o->kind == IR_OP_ALLREDUCE) {
                uint32_t na = 0;
                const int64_t *ax = ir_op_ints(d, op, "mesh_axes", &na);
                uint64_t bytes = type_bytes(d, d->values[o->outputs].type);
                nar++;
                /* Over the outer data axis alone (mesh [dp/ep, ep, ...]), not a scalar. */
                if (dp > ep && na == 1 && ax[0] == 0 && bytes > 8) {
                    assert_int_equal(group_size(d, op), dp / ep);
                    nexpert_ar++;
                    expert_ar_bytes += (int64_t)bytes;
                }
            }
        }
        /* The pmap bodies are shared by microbatches: per body, per MoE layer, 2 forward + 2
         * backward. */
        fprintf(stderr,
                "dp=%u ep=%u: %u all_to_all ops in the module's bodies, %u all_reduce (%u over "
                "the %u ranks holding the same experts, %lld bytes)\n",
                dp, ep, na2a, nar, nexpert_ar, dp / ep, (long long)expert_ar_bytes);
        assert_int_equal(na2a % (4 * moe_layers), 0);
        assert_true(na2a >= 4 * moe_layers);
        /* Every expert gradient once, E/ep experts of it per rank, f32 (by buckets). */
        if (dp > ep) {
            assert_true(nexpert_ar >= 1);
            assert_int_equal(expert_ar_bytes, expert_params / ep * 4);
        } else {
            assert_int_equal(nexpert_ar, 0);
        }
        ir_module_free(d);
    }

    /* Without ep: no all_to_all; the experts' gradients join the data-parallel reduction. */
    s.dp = 2;
    s.ep = 1;
    assert_int_equal(xform_apply(m, &s, NULL, &d, &err), 0);
    for (ir_id op = 1; op < d->nop; op++)
        assert_int_not_equal(d->ops[op].kind, IR_OP_ALLTOALL);
    ir_module_free(d);

    /* ep must divide the experts and dp; a dense model has no experts. */
    s.dp = 8;
    s.ep = 8;
    s.microbatches = 1;
    assert_int_equal(xform_apply(m, &s, NULL, &d, &err), DI_ESTRATEGY);
    assert_non_null(strstr(err.msg, "does not divide the 4 experts"));
    s.dp = 2;
    s.ep = 4;
    assert_int_equal(xform_apply(m, &s, NULL, &d, &err), DI_ESTRATEGY);
    assert_non_null(strstr(err.msg, "does not divide dp=2"));
    ir_module_free(m);
    {
        models_llama dense;
        models_llama_init(&dense);
        dense.batch = 4;
        assert_int_equal(models_llama_build(&dense, &m, &err), 0);
        s.dp = s.ep = 2;
        assert_int_equal(xform_apply(m, &s, NULL, &d, &err), DI_ESTRATEGY);
        assert_non_null(strstr(err.msg, "no MoE layer"));
        ir_module_free(m);
    }
}

/*
 * docs/models.md: per device, weights N_d / tp + N_e / (ep tp) parameters
 * (N_d dense, N_e experts); f32 Adam: 4 bytes each for weights and gradients,
 * 8 for the moments; with dp > 1 (no overlap) the flat buckets of the
 * gradients the step's all-reduces reduce: all of them without ep, the dense
 * ones with ep = dp, the dense ones and the rank's experts with ep < dp (the
 * experts' reduced over the dp / ep ranks that hold them).
 */
static void
test_ep_model_state(void **state)
{
    models_llama c;
    ir_module *m = small_moe(8, 2, 1, IR_F32, XFORM_OPTIM_ADAM, &c);
    hw_model *hw = NULL;
    di_error err;
    strategy s;
    const uint64_t ne = SMALL_MOE_EXPERT_PARAMS, nd = models_llama_parameters(&c) - ne;
    (void)state;
    assert_int_equal(hw_preset("a100-dgx", &hw, &err), 0);
    for (uint32_t ep = 1; ep <= 4; ep *= 2) {
        uint64_t mx[SIM_NMEMCLASS], per = nd + ne / ep;
        sim_result *r;
        xform_strategy_init(&s);
        s.dp = 4;
        s.ep = ep == 1 ? 0 : ep;
        r = simulate_strategy(m, &s, hw);
        class_max(r, mx);
        fprintf(stderr, "ep=%u: weights %llu, gradients %llu, optimizer %llu bytes (formula %llu, "
                "%llu, %llu)\n",
                ep, (unsigned long long)mx[SIM_MEM_WEIGHTS],
                (unsigned long long)mx[SIM_MEM_GRADIENTS],
                (unsigned long long)mx[SIM_MEM_OPTIMIZER], (unsigned long long)(4 * per),
                (unsigned long long)(4 * per +
                                     4 * (ep == 1 ? nd + ne : ep < 4 ? nd + ne / ep : nd)),
                (unsigned long long)(8 * per));
        /* Weights: up to the scalar constants (a few bytes) the simulator counts there. */
        assert_true(mx[SIM_MEM_WEIGHTS] >= 4 * per && mx[SIM_MEM_WEIGHTS] <= 4 * per + 512);
        /* The gradients, and the flat bucket the data-parallel all-reduce reduces (dense only
         * under ep: the experts' gradients are complete where they are). */
        assert_int_equal(mx[SIM_MEM_GRADIENTS], 4 * per + 4 * (ep == 1 ? nd + ne
                                                               : ep < 4 ? nd + ne / ep
                                                                        : nd));
        assert_int_equal(mx[SIM_MEM_OPTIMIZER], 8 * per);
        sim_result_free(r);
        /*
         * ZeRO-1 shards the dense optimizer state over the 4 data ranks and the experts' over
         * the dp / ep ranks that hold the same experts (ep = dp: the experts are not
         * replicated, nothing to shard): 8 (N_d / 4 + N_e / (ep (dp / ep))) bytes of moments,
         * N_e / dp whatever ep (every dimension sharded divides here).
         */
        s.zero = 1;
        r = simulate_strategy(m, &s, hw);
        class_max(r, mx);
        fprintf(stderr, "ep=%u, ZeRO-1: optimizer %llu bytes (formula %llu)\n", ep,
                (unsigned long long)mx[SIM_MEM_OPTIMIZER],
                (unsigned long long)(8 * (nd / 4 + ne / 4)));
        assert_int_equal(mx[SIM_MEM_OPTIMIZER], 8 * (nd / 4 + ne / 4));
        sim_result_free(r);
    }
    hw_free(hw);
    ir_module_free(m);
}

/*
 * Under context parallelism ZeRO shards the experts' state over the context
 * ranks too, as Megatron-LM folds them into the expert-data-parallel group:
 * with dp x cp = 4 and 8 (ep 2), ZeRO-1 holds 8 (N_d + N_e) / (dp cp) bytes
 * of Adam moments a device, as dp 4 without cp does. Until 2026-12-08 the
 * experts' state was whole on the context axis: cp times N_e / dp.
 */
static void
test_ep_state_over_cp(void **state)
{
    models_llama c;
    ir_module *m = small_moe(8, 2, 1, IR_F32, XFORM_OPTIM_ADAM, &c);
    hw_model *hw = NULL;
    di_error err;
    const uint64_t ne = SMALL_MOE_EXPERT_PARAMS, nd = models_llama_parameters(&c) - ne;
    const uint32_t conf[3][2] = {{2, 2}, {4, 2}, {4, 1}}; /* dp, cp (ep 2) */
    uint64_t opt[3];
    (void)state;
    assert_int_equal(hw_preset("a100-dgx", &hw, &err), 0);
    for (int k = 0; k < 3; k++) {
        uint64_t mx[SIM_NMEMCLASS], n = (uint64_t)conf[k][0] * conf[k][1];
        sim_result *r;
        strategy s;
        xform_strategy_init(&s);
        s.dp = conf[k][0];
        s.cp = conf[k][1];
        s.ep = 2;
        s.zero = 1;
        r = simulate_strategy(m, &s, hw);
        class_max(r, mx);
        opt[k] = mx[SIM_MEM_OPTIMIZER];
        fprintf(stderr, "dp %u cp %u ep 2, ZeRO-1: optimizer %llu bytes (formula %llu)\n",
                conf[k][0], conf[k][1], (unsigned long long)opt[k],
                (unsigned long long)(8 * (nd / n + ne / n)));
        assert_int_equal(opt[k], 8 * (nd / n + ne / n));
        sim_result_free(r);
    }
    /* dp 2 x cp 2 holds what dp 4 holds. */
    assert_int_equal(opt[0], opt[2]);
    hw_free(hw);
    ir_module_free(m);
}

/*
 * The search's analysis of expert parallelism's all_to_alls
 * (xform_layer_time.a2a_bytes, which search_time_bound puts on each MoE
 * layer's chain): per layer the forward moves the dispatched tokens and the
 * experts' output, each [B, E, C, h] (the 8 sequences of the batch at ep 1,
 * where a device holds them all; 8 experts, capacity C, hidden 32), and the
 * backward the output's gradient, the same; f32. The least over the layers: 0 with a
 * dense first layer.
 */
static void
test_a2a_analysis(void **state)
{
    models_llama c;
    ir_module *m = small_moe(8, 2, 1, IR_F32, XFORM_OPTIM_ADAM, &c), *all = NULL;
    hw_model *hw = NULL;
    di_error err;
    strategy s;
    xform_layer_facts f;
    double per;
    (void)state;
    assert_int_equal(hw_preset("a100-dgx", &hw, &err), 0);
    strategy_init(&s);
    assert_int_equal(strategy_normalize(&s, &err), 0);
    assert_int_equal(xform_layer_analysis(m, &s, hw, 0, &f, &err), 0);
    assert_true(f.time.a2a_bytes[0] == 0 && f.time.a2a_count[0] == 0); /* layer 0 is dense */
    xform_layer_facts_fini(&f);
    c.first_dense = 0;
    if (models_llama_build(&c, &all, &err) != 0)
        fail_msg("build: %s", err.msg);
    /* The capacity C: seq x top-k / experts tokens an expert per sequence (factor 1), 2. */
    assert_int_equal(models_llama_capacity(&c), 8 * 2 / 8);
    per = (double)c.batch * c.experts * models_llama_capacity(&c) * c.hidden * 4;
    assert_int_equal(xform_layer_analysis(all, &s, hw, 0, &f, &err), 0);
    fprintf(stderr, "a2a per layer: forward %.0f bytes in %.0f, backward %.0f in %.0f (%.0f a "
            "tensor)\n", f.time.a2a_bytes[0], f.time.a2a_count[0], f.time.a2a_bytes[1],
            f.time.a2a_count[1], per);
    assert_true(f.time.a2a_bytes[0] == 2 * per);
    assert_true(f.time.a2a_count[0] == 2);
    assert_true(f.time.a2a_bytes[1] == per);
    assert_true(f.time.a2a_count[1] == 1);
    xform_layer_facts_fini(&f);
    strategy_fini(&s);
    hw_free(hw);
    ir_module_free(all);
    ir_module_free(m);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_presets),
        cmocka_unit_test(test_module_counts),
        cmocka_unit_test(test_routing_ops),
        cmocka_unit_test(test_ep_all_to_all),
        cmocka_unit_test(test_ep_model_state),
        cmocka_unit_test(test_ep_state_over_cp),
        cmocka_unit_test(test_a2a_analysis),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
