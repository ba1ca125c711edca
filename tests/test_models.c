/*
 * test_models.c: the built-in generators (lib/models). Parameter counts
 * equal Megatron-LM's formula for several shapes and every preset (counted
 * the way `distir print --stats` counts them: elements of the arguments an
 * optimizer updates); generated modules verify; op counts grow linearly with
 * the layers; every op carries the dist.* annotations; the batch can be
 * changed by retyping the data arguments alone (what a data-parallel
 * transform does); gpt3-175b is generated fast; and an MLP trained for five
 * SGD steps on the sequential executor lowers its loss.
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
#include <time.h>

#include "exec/exec.h"
#include "ir/ir.h"
#include "models/models.h"
#include "sim/sim.h"
#include "support/support.h"

/* Parameters as `distir print --stats` counts them. */
static uint64_t
count_parameters(const ir_module *m)
{
    ir_id f = ir_module_entry(m);
    const ir_region *r = &m->regions[f];
    uint8_t *updated = calloc(m->nvalue, 1);
    uint64_t n = 0;
    for (ir_id op = 1; op < m->nop; op++)
        if ((ir_opkind_info(m->ops[op].kind)->flags & IR_OPF_OPTIM) && m->ops[op].ninput)
            updated[ir_op_input(m, op, 0)] = 1;
    for (uint32_t a = 0; a < r->narg; a++)
        if (updated[r->args[a]])
            n += (uint64_t)ir_type_numel(m, m->values[r->args[a]].type);
    free(updated);
    return n;
}

/* c: the defaults with these shapes. */
static void
gpt_conf(models_gpt *c, uint32_t l, int64_t h, int64_t a, int64_t s, int64_t v, int64_t b)
{
    models_gpt_init(c);
    c->layers = l;
    c->hidden = h;
    c->heads = a;
    c->seq = s;
    c->vocab = v;
    c->batch = b;
}

static ir_module *
gpt(uint32_t l, int64_t h, int64_t a, int64_t s, int64_t v, int64_t b)
{
    models_gpt c;
    ir_module *m;
    di_error err;
    gpt_conf(&c, l, h, a, s, v, b);
    if (models_gpt_build(&c, &m, &err) != 0) {
        fprintf(stderr, "gpt: %s\n", err.msg);
        fail();
    }
    return m;
}

static uint64_t
formula(uint64_t l, uint64_t h, uint64_t v, uint64_t s)
{
    return 12 * l * h * h + 13 * l * h + (v + s) * h;
}

static void
test_gpt_parameters(void **state)
{
    static const int64_t shapes[][6] = {
        /* l, h, a, s, V, b */
        {1, 8, 2, 4, 11, 2},  {2, 16, 4, 8, 50, 3},  {3, 24, 3, 5, 7, 1},
        {4, 64, 8, 32, 101, 2}, {12, 768, 12, 1024, 50257, 1},
    };
    (void)state;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const int64_t *s = shapes[i];
        ir_module *m = gpt((uint32_t)s[0], s[1], s[2], s[3], s[4], s[5]);
        models_gpt c;
        uint64_t want = formula((uint64_t)s[0], (uint64_t)s[1], (uint64_t)s[4], (uint64_t)s[3]);
        double l = (double)s[0], h = (double)s[1], V = (double)s[4], S = (double)s[3];
        double megatron = 12 * l * h * h * (1 + 13 / (12 * h) + (V + S) / (12 * l * h));
        models_gpt_init(&c);
        c.layers = (uint32_t)s[0];
        c.hidden = s[1];
        c.vocab = s[4];
        c.seq = s[3];
        assert_int_equal(count_parameters(m), want);
        assert_int_equal(models_gpt_parameters(&c), want);
        assert_true(fabs(megatron - (double)want) <= 1e-9 * (double)want);
        assert_verifies(m);
        ir_module_free(m);
    }
}

/* The learnable final layer norm adds exactly 2h. */
static void
test_gpt_final_ln_params(void **state)
{
    models_gpt c;
    ir_module *m;
    di_error err;
    (void)state;
    models_gpt_init(&c);
    c.layers = 2;
    c.hidden = 16;
    c.heads = 2;
    c.seq = 8;
    c.vocab = 20;
    c.final_ln_params = 1;
    assert_int_equal(models_gpt_build(&c, &m, &err), 0);
    assert_int_equal(count_parameters(m), formula(2, 16, 20, 8) + 32);
    assert_int_equal(models_gpt_parameters(&c), formula(2, 16, 20, 8) + 32);
    assert_verifies(m);
    ir_module_free(m);
}

static void
test_presets(void **state)
{
    (void)state;
    for (uint32_t i = 0; models_gpt_preset_name(i); i++) {
        models_gpt c;
        ir_module *m;
        di_error err;
        double t0, t1;
        models_gpt_init(&c);
        assert_int_equal(models_gpt_preset(models_gpt_preset_name(i), &c, &err), 0);
        assert_int_equal(c.seq, 2048);
        assert_int_equal(c.vocab, 51200);
        assert_int_equal(c.hidden % c.heads, 0);
        t0 = monotonic_seconds();
        assert_int_equal(models_gpt_build(&c, &m, &err), 0);
        t1 = monotonic_seconds();
        assert_int_equal(count_parameters(m),
                         formula(c.layers, (uint64_t)c.hidden, (uint64_t)c.vocab,
                                 (uint64_t)c.seq));
        printf("%-10s %6.2f B parameters, %6u ops, generated in %.1f ms\n",
               models_gpt_preset_name(i), (double)count_parameters(m) / 1e9, m->nop - 1,
               (t1 - t0) * 1e3);
        ir_module_free(m);
    }
}

/* gpt3-175b: 174.6B parameters by the formula, generated (and verified) quickly. */
static void
test_gpt3_175b(void **state)
{
    models_gpt c;
    ir_module *m;
    di_error err;
    double t0, t1, t2, l = 96, h = 12288, V = 51200, S = 2048;
    double megatron = 12 * l * h * h * (1 + 13 / (12 * h) + (V + S) / (12 * l * h));
    (void)state;
    models_gpt_init(&c);
    assert_int_equal(models_gpt_preset("gpt3-175b", &c, &err), 0);
    t0 = monotonic_seconds();
    assert_int_equal(models_gpt_build(&c, &m, &err), 0);
    t1 = monotonic_seconds();
    assert_int_equal(count_parameters(m), (uint64_t)megatron);
    assert_true(fabs((double)count_parameters(m) / 1e9 - 174.6) < 0.05);
    assert_verifies(m);
    t2 = monotonic_seconds();
    printf("gpt3-175b: %.4f B parameters, %u ops, %u values, generated in %.1f ms "
           "(verified in %.1f ms)\n",
           (double)count_parameters(m) / 1e9, m->nop - 1, m->nvalue - 1, (t1 - t0) * 1e3,
           (t2 - t1) * 1e3);
    assert_true(t1 - t0 < 5.0);
    ir_module_free(m);
}

/*
 * FLOPs per step (the costs of the op table summed, as `distir print --stats`)
 * against Megatron-LM's count without recomputation (Narayanan et al. 2021,
 * section 5.1, with 72 for 96: the forward pass once): the matmuls of a layer
 * are 24 b s h^2 + 4 b s^2 h forward and twice that backward, the logits
 * 2 b s h V forward, so 72 b s l h^2 (1 + s/(6h) + V/(12 l h)). Elementwise
 * ops add a little on top: within 1%.
 */
static void
test_gpt_flops(void **state)
{
    models_gpt c;
    ir_module *m;
    di_error err;
    double flops = 0, b, s, l, h, V, want;
    (void)state;
    models_gpt_init(&c);
    assert_int_equal(models_gpt_preset("gpt3-175b", &c, &err), 0);
    c.batch = 4;
    assert_int_equal(models_gpt_build(&c, &m, &err), 0);
    for (ir_id op = 1; op < m->nop; op++) {
        ir_cost cost;
        ir_op_cost(m, op, &cost);
        flops += cost.flops;
    }
    b = 4, s = 2048, l = 96, h = 12288, V = 51200;
    want = 72 * b * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h));
    printf("gpt3-175b batch 4: %.5g FLOPs per step, Megatron's formula %.5g (%+.3f%%)\n", flops,
           want, 100 * (flops / want - 1));
    assert_true(flops >= want && flops < 1.01 * want);
    ir_module_free(m);
}

/*
 * sim_model_stats_of: parameters as counted above, tokens = batch x seq, and
 * model FLOPs = 6 N T plus attention 12 l h s T (PaLM's 12 L H Q T), found in
 * the module as the forward matmuls between two activations, N the weights a
 * matmul reads: Megatron-LM's 72 l h^2 + 6 V h per token, the tied token
 * embedding once (the output layer reads it), not the position embedding
 * (only looked up), the biases or the layer norms; an MLP has no attention,
 * counts samples, and its N is its weight matrices, without the biases; a
 * module without an optimizer has no parameters, hence no model FLOPs.
 */
static void
test_model_stats(void **state)
{
    sim_model_stats st;
    models_mlp mc;
    ir_module *m = gpt(3, 64, 4, 32, 100, 5);
    di_error err;
    double l = 3, h = 64, s = 32, T = 5 * 32;
    (void)state;
    sim_model_stats_of(m, &st);
    assert_int_equal(st.parameters, formula(3, 64, 100, 32));
    assert_true(st.tokens == T);
    assert_int_equal(st.matmul_parameters, 12 * 3 * 64 * 64 + 100 * 64);
    assert_true(st.flops_6n == 6.0 * (12 * l * h * h + 100 * h) * T);
    assert_true(fabs(st.attention_flops - 12 * l * h * s * T) <= 1e-9 * st.attention_flops);
    assert_true(st.model_flops == st.flops_6n + st.attention_flops);
    ir_module_free(m);

    models_mlp_init(&mc);
    mc.batch = 7;
    assert_int_equal(models_mlp_build(&mc, &m, &err), 0);
    sim_model_stats_of(m, &st);
    assert_int_equal(st.parameters, models_mlp_parameters(&mc));
    assert_true(st.tokens == 7);
    assert_true(st.attention_flops == 0);
    assert_int_equal(st.matmul_parameters, 2 * 16 * 16); /* two 16 x 16 layers */
    assert_true(st.model_flops == 6.0 * 2 * 16 * 16 * 7);
    ir_module_free(m);

    mc.train.forward_only = 1;
    assert_int_equal(models_mlp_build(&mc, &m, &err), 0);
    sim_model_stats_of(m, &st);
    assert_int_equal(st.parameters, 0);
    assert_true(st.model_flops == 0);
    ir_module_free(m);
}

/*
 * The Llama presets have their published parameter counts (within 0.1%:
 * Llama 2 paper, Meta's Llama 3 / 3.1 model cards, Mistral 7B), and the
 * generated module's parameters equal the formula.
 */
static void
test_llama_presets(void **state)
{
    static const struct {
        const char *name;
        double published;
    } want[] = {
        {"llama2-7b", 6.74e9},   {"llama2-13b", 13.02e9},  {"llama2-70b", 68.98e9},
        {"llama3-8b", 8.03e9},   {"llama3-70b", 70.6e9},   {"llama3-405b", 405.9e9},
        {"mistral-7b", 7.24e9},
    };
    models_llama c;
    ir_module *m;
    di_error err;
    sim_model_stats st;
    (void)state;
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        double n;
        models_llama_init(&c);
        assert_int_equal(models_llama_preset(want[i].name, &c, &err), 0);
        n = (double)models_llama_parameters(&c);
        printf("%-12s %.4g parameters, published %.4g (%+.3f%%)\n", want[i].name, n,
               want[i].published, 100 * (n / want[i].published - 1));
        assert_true(fabs(n / want[i].published - 1) < 1e-3);
    }
    /* Then the three mixtures of experts (tests/test_moe.c checks them). */
    assert_string_equal(models_llama_preset_name(sizeof want / sizeof want[0]), "mixtral-8x7b");
    assert_null(models_llama_preset_name(sizeof want / sizeof want[0] + 3));
    assert_int_equal(models_llama_preset("llama4", &c, &err), DI_ENOTFOUND);
    /* A small model: the module's trained arguments are the formula's count. */
    models_llama_init(&c);
    c.train.optimizer = XFORM_OPTIM_ADAM;
    assert_int_equal(models_llama_build(&c, &m, &err), 0);
    assert_int_equal(ir_verify(m, &err), 0);
    sim_model_stats_of(m, &st);
    assert_int_equal(st.parameters, models_llama_parameters(&c));
    assert_int_equal(count_parameters(m), models_llama_parameters(&c));
    ir_module_free(m);
    /* Grouped-query attention needs heads to be a multiple of the key/value heads. */
    c.kv_heads = 3;
    assert_int_equal(models_llama_build(&c, &m, &err), DI_EINVAL);
    assert_non_null(strstr(err.msg, "--kv-heads"));
}

static void
test_unknown_preset(void **state)
{
    models_gpt c;
    di_error err;
    (void)state;
    models_gpt_init(&c);
    assert_int_equal(models_gpt_preset("gpt5", &c, &err), DI_ENOTFOUND);
    assert_non_null(strstr(err.msg, "gpt5"));
    assert_non_null(strstr(err.msg, "gpt3-175b"));
}

static void
test_bad_shapes(void **state)
{
    models_gpt c;
    models_mlp mc;
    ir_module *m;
    di_error err;
    (void)state;
    models_gpt_init(&c);
    c.hidden = 10;
    c.heads = 3;
    assert_int_equal(models_gpt_build(&c, &m, &err), DI_EINVAL);
    assert_null(m);
    assert_non_null(strstr(err.msg, "not divisible"));
    models_gpt_init(&c);
    c.batch = 0;
    assert_int_equal(models_gpt_build(&c, &m, &err), DI_EINVAL);
    assert_non_null(strstr(err.msg, "--batch"));
    models_gpt_init(&c);
    c.batch = (int64_t)1 << 40;
    c.seq = (int64_t)1 << 20;
    assert_int_equal(models_gpt_build(&c, &m, &err), DI_EINVAL);
    models_mlp_init(&mc);
    mc.layers = 0;
    assert_int_equal(models_mlp_build(&mc, &m, &err), DI_EINVAL);
    models_mlp_init(&mc);
    mc.dtype = IR_I64;
    assert_int_equal(models_mlp_build(&mc, &m, &err), DI_EINVAL);
}

static uint32_t
gpt_ops(uint32_t layers, double dropout)
{
    models_gpt c;
    ir_module *m;
    di_error err;
    uint32_t n;
    models_gpt_init(&c);
    c.layers = layers;
    c.hidden = 16;
    c.heads = 4;
    c.seq = 8;
    c.vocab = 30;
    c.batch = 2;
    c.dropout = dropout;
    assert_int_equal(models_gpt_build(&c, &m, &err), 0);
    n = m->nop - 1;
    ir_module_free(m);
    return n;
}

static void
test_linear_in_layers(void **state)
{
    (void)state;
    for (int d = 0; d < 2; d++) {
        double p = d ? 0.1 : 0.0;
        uint32_t n1 = gpt_ops(1, p), n2 = gpt_ops(2, p), n3 = gpt_ops(3, p), n8 = gpt_ops(8, p);
        assert_true(n2 > n1);
        assert_int_equal(n3 - n2, n2 - n1);
        assert_int_equal(n8 - n1, 7 * (n2 - n1));
    }
}

/* Every op is annotated; the Megatron MatMuls carry their split. */
static void
test_annotations(void **state)
{
    ir_module *m = gpt(2, 16, 4, 8, 30, 2);
    uint32_t column = 0, row = 0, heads = 0, seq = 0, phases[3] = {0, 0, 0};
    (void)state;
    for (ir_id op = 1; op < m->nop; op++) {
        const char *phase = ir_op_string(m, op, "dist.phase", NULL);
        const char *tp = ir_op_string(m, op, "dist.tp", "none");
        int64_t layer = ir_op_int(m, op, "dist.layer", -100);
        assert_non_null(phase);
        if (strcmp(phase, "forward") == 0)
            phases[0]++;
        else if (strcmp(phase, "backward") == 0)
            phases[1]++;
        else if (strcmp(phase, "optimizer") == 0)
            phases[2]++;
        else
            fail();
        if (m->ops[op].kind != IR_OP_CONSTANT)
            assert_true(layer >= -1 && layer < 2);
        if (strcmp(phase, "forward") != 0)
            continue;
        if (m->ops[op].kind == IR_OP_MATMUL && strcmp(tp, "column") == 0)
            column++;
        if (m->ops[op].kind == IR_OP_MATMUL && strcmp(tp, "row") == 0)
            row++;
        if (m->ops[op].kind == IR_OP_MATMUL && strcmp(tp, "heads") == 0)
            heads++;
        if (m->ops[op].kind == IR_OP_LAYERNORM || m->ops[op].kind == IR_OP_DROPOUT)
            seq += ir_op_int(m, op, "dist.seq", -1) == 1;
    }
    /* Per layer: QKV and MLP-up column, output and MLP-down row, QK^T and PV heads. */
    assert_int_equal(column, 4);
    assert_int_equal(row, 4);
    assert_int_equal(heads, 4);
    /* Layer norms: 2 per layer + final; dropouts on sequence: embedding + 2 per layer. */
    assert_int_equal(seq, 5 + 5);
    assert_true(phases[0] > 0 && phases[1] > 0);
    /* One SGD per weight: 2 embeddings + 12 per layer. */
    assert_int_equal(phases[2], 2 + 24);
    ir_module_free(m);
}

/*
 * Retypes the data arguments with a new batch and re-infers every op in
 * order, as a data-parallel transform does: every reshape copies or infers
 * the batch, so the module stays valid without rewriting any attribute.
 */
static void
rebatch(ir_module *m, int64_t batch)
{
    ir_id f = ir_module_entry(m);
    const ir_region *r = &m->regions[f];
    di_error err;
    for (uint32_t a = 0; a < r->narg; a++) {
        ir_id v = r->args[a];
        const char *name = ir_str_get(m, m->values[v].name);
        const ir_type *t = &m->types[m->values[v].type];
        int64_t dims[IR_MAX_RANK];
        if (strcmp(name, "tokens") != 0 && strcmp(name, "labels") != 0 && strcmp(name, "x") != 0)
            continue;
        memcpy(dims, m->ints + t->dims, t->rank * sizeof dims[0]);
        dims[0] = batch;
        m->values[v].type = ir_type_with_dims(m, m->values[v].type, t->rank, dims);
    }
    for (uint32_t i = 0; i < m->regions[f].nop; i++) {
        if (ir_op_infer_results(m, m->regions[f].ops[i], &err) != 0) {
            fprintf(stderr, "rebatch: %s\n", err.msg);
            fail();
        }
    }
}

static void
test_batch_in_dim0(void **state)
{
    ir_module *m = gpt(2, 16, 4, 8, 30, 3);
    models_mlp mc;
    di_error err;
    (void)state;
    /* Every reshape of an activation copies (0) or infers (-1) dimension 0. */
    for (ir_id op = 1; op < m->nop; op++) {
        uint32_t n;
        const int64_t *shape;
        if (m->ops[op].kind != IR_OP_RESHAPE)
            continue;
        if (m->types[m->values[ir_op_input(m, op, 0)].type].rank < 2)
            continue;
        shape = ir_op_ints(m, op, "shape", &n);
        assert_true(n > 0 && (shape[0] == 0 || shape[0] == -1));
    }
    rebatch(m, 5);
    assert_verifies(m);
    ir_module_free(m);

    models_mlp_init(&mc);
    mc.layers = 3;
    assert_int_equal(models_mlp_build(&mc, &m, &err), 0);
    rebatch(m, 3);
    assert_verifies(m);
    ir_module_free(m);
}

static void
test_mlp_shapes(void **state)
{
    models_mlp c;
    ir_module *m;
    di_error err;
    (void)state;
    for (int opt = 0; opt < 3; opt++)
        for (int loss = 0; loss < 2; loss++)
            for (uint32_t layers = 1; layers <= 4; layers++) {
                models_mlp_init(&c);
                c.layers = layers;
                c.hidden = 12;
                c.input = 5;
                c.classes = 3;
                c.batch = 4;
                c.loss = loss ? MODELS_LOSS_MSE : MODELS_LOSS_SCE;
                c.act = layers % 2 ? MODELS_ACT_GELU : MODELS_ACT_RELU;
                c.train.optimizer = (xform_optim)opt;
                assert_int_equal(models_mlp_build(&c, &m, &err), 0);
                assert_verifies(m);
                if (opt != XFORM_OPTIM_NONE)
                    assert_int_equal(count_parameters(m), models_mlp_parameters(&c));
                {
                    const ir_region *r = &m->regions[ir_module_entry(m)];
                    uint32_t nw = 2 * layers;
                    /* data + weights (+ Adam's two moments per weight) */
                    assert_int_equal(r->narg, 2 + nw + (opt == XFORM_OPTIM_ADAM ? 2 * nw : 0));
                    /* new weights (+ moments) + loss */
                    assert_int_equal(r->nresult,
                                     nw * (opt == XFORM_OPTIM_ADAM ? 3 : 1) + 1);
                }
                ir_module_free(m);
            }
    assert_int_equal(models_mlp_parameters(&c), 5 * 12 + 12 + 12 * 12 + 12 + 12 * 12 + 12 +
                                                    12 * 3 + 3);
}

static void
test_forward_only_and_dtypes(void **state)
{
    static const ir_dtype dts[] = {IR_F32, IR_F16, IR_BF16, IR_F64};
    (void)state;
    for (size_t i = 0; i < sizeof dts / sizeof dts[0]; i++)
        for (int fwd = 0; fwd < 2; fwd++) {
            models_gpt c;
            ir_module *m;
            di_error err;
            gpt_conf(&c, 1, 8, 2, 4, 11, 2);
            c.dtype = dts[i];
            c.train.forward_only = fwd;
            c.train.annotate = fwd;
            assert_int_equal(models_gpt_build(&c, &m, &err), 0);
            assert_verifies(m);
            if (fwd) {
                assert_int_equal(m->regions[ir_module_entry(m)].nresult, 1);
                assert_int_equal(count_parameters(m), 0);
            } else {
                for (ir_id op = 1; op < m->nop; op++)
                    assert_null(ir_op_attr(m, op, "dist.phase"));
            }
            ir_module_free(m);
        }
}

/*
 * The loss runs in f32 for 16-bit models (Megatron-LM's vocabulary-parallel
 * cross-entropy on logits.float()): a Cast of the logits to f32 feeds it; not
 * for f32 or f64 models, nor under PURE precision (everything in the model's dtype).
 */
static void
test_loss_dtype(void **state)
{
    static const struct {
        ir_dtype dt;
        int precision;
        ir_dtype loss;
    } cases[] = {{IR_BF16, MODELS_PRECISION_MIXED, IR_F32},
                 {IR_F16, MODELS_PRECISION_MIXED, IR_F32},
                 {IR_BF16, MODELS_PRECISION_PURE, IR_BF16},
                 {IR_F32, MODELS_PRECISION_MIXED, IR_F32},
                 {IR_F64, MODELS_PRECISION_MIXED, IR_F64}};
    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        models_gpt c;
        ir_module *m;
        di_error err;
        uint32_t found = 0;
        gpt_conf(&c, 1, 8, 2, 4, 11, 2);
        c.dtype = cases[i].dt;
        c.train.optimizer = XFORM_OPTIM_ADAM;
        c.train.precision = cases[i].precision;
        assert_int_equal(models_gpt_build(&c, &m, &err), 0);
        assert_verifies(m);
        for (ir_id op = 1; op < m->nop; op++) {
            ir_id x;
            if (m->ops[op].kind != IR_OP_SCELOSS)
                continue;
            x = ir_op_input(m, op, 0);
            found++;
            assert_int_equal(m->types[m->values[x].type].dtype, cases[i].loss);
            /* Cast from the model's dtype exactly when the two differ. */
            assert_int_equal(m->ops[m->values[x].def].kind == IR_OP_CAST,
                             cases[i].loss != cases[i].dt);
        }
        assert_int_equal(found, 1);
        ir_module_free(m);
    }
}

/* Text and protobuf round trips keep the generated module. */
static void
test_round_trip(void **state)
{
    ir_module *m = gpt(1, 8, 2, 4, 11, 2), *m2;
    di_hash h1, h2;
    di_error err;
    size_t len;
    char *text;
    (void)state;
    text = ir_print(m, &len);
    assert_int_equal(ir_parse(text, len, &m2, &err), 0);
    ir_hash(m, &h1);
    ir_hash(m2, &h2);
    assert_memory_equal(h1.b, h2.b, 32);
    di_free(text);
    ir_module_free(m2);
    ir_module_free(m);
}

/* Five SGD steps of a small MLP on the sequential executor lower the loss. */
static void
test_mlp_trains(void **state)
{
    models_mlp c;
    ir_module *m;
    di_error err;
    ex_tensor *args, *res;
    uint32_t nargs, nres, nw;
    double first = 0, last = 0;
    (void)state;
    models_mlp_init(&c);
    c.layers = 3;
    c.hidden = 16;
    c.input = 8;
    c.classes = 4;
    c.batch = 16;
    c.train.lr = 0.1;
    assert_int_equal(models_mlp_build(&c, &m, &err), 0);
    assert_int_equal(ex_random_args(m, 42, c.classes, &args, &nargs, &err), 0);
    nw = 2 * c.layers;
    for (int step = 0; step < 5; step++) {
        double loss;
        if (ex_run(m, args, nargs, &res, &nres, &err) != 0) {
            fprintf(stderr, "ex_run: %s\n", err.msg);
            fail();
        }
        assert_int_equal(nres, nw + 1);
        loss = ex_get(&res[nw], 0);
        printf("step %d: loss %.6f\n", step, loss);
        if (step == 0)
            first = loss;
        else
            assert_true(loss < last);
        last = loss;
        /* The new weights are the next step's arguments (arguments 2..). */
        for (uint32_t i = 0; i < nw; i++) {
            ex_tensor_fini(&args[2 + i]);
            args[2 + i] = res[i];
        }
        ex_tensor_fini(&res[nw]);
        di_free(res);
    }
    assert_true(last < first);
    for (uint32_t i = 0; i < nargs; i++)
        ex_tensor_fini(&args[i]);
    di_free(args);
    ir_module_free(m);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpt_parameters),
        cmocka_unit_test(test_gpt_final_ln_params),
        cmocka_unit_test(test_presets),
        cmocka_unit_test(test_gpt3_175b),
        cmocka_unit_test(test_gpt_flops),
        cmocka_unit_test(test_model_stats),
        cmocka_unit_test(test_llama_presets),
        cmocka_unit_test(test_unknown_preset),
        cmocka_unit_test(test_bad_shapes),
        cmocka_unit_test(test_linear_in_layers),
        cmocka_unit_test(test_annotations),
        cmocka_unit_test(test_batch_in_dim0),
        cmocka_unit_test(test_mlp_shapes),
        cmocka_unit_test(test_forward_only_and_dtypes),
        cmocka_unit_test(test_loss_dtype),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_mlp_trains),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
