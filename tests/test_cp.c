/*
 * test_cp.c: context parallelism (docs/transforms.md, "Context
 * parallelism"), its communication derived by hand:
 *   - per layer and microbatch, keys and values are all-gathered over the cp
 *     group in the forward pass, [b, s / cp, kv heads, d] to [b, s, kv, d]
 *     (before the grouped-query repeat: key/value heads, not query heads;
 *     the backward pass reuses them), and their gradients [b, s, kv d]
 *     reduce-scattered: each device receives (cp - 1) / cp of every full
 *     key and value tensor, twice;
 *   - the weight gradients are reduced over the data and context ranks by
 *     one bucket all-reduce; the output layer and the loss stay on the local
 *     tokens (one sequence per device or two);
 *   - load balance: every context rank does the same FLOPs;
 *   - with sequence parallelism (cp 2, tp 2): the tensor ranks split each
 *     context rank's block of the sequence, [b, s / (cp tp), h] in the
 *     norms' region, all-gathered over the tensor ranks only to [b, s / cp,
 *     h] (the numerics, device (c, t) holding block c tp + t of the sequence,
 *     are in test_xform_equiv);
 *   - ring attention (fused attention): per layer and microbatch the keys
 *     and values travel the ring in cp - 1 dist.shift steps of one block
 *     [b, kv heads, s / cp, d] each forward ((cp - 1) / cp of them received,
 *     as the all-gather form), the backward pass again plus their
 *     gradients' buffers (cp steps each); each shift is issued before the
 *     attention step it overlaps, and with blocks whose attention takes
 *     longer than a shift the steps follow each other without a gap;
 *   - what is refused, by name.
 * (The numerics of cp = 2 with every dp/tp/pp are in test_xform_equiv.)
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ir/ir.h"
#include "models/models.h"
#include "sim/hw.h"
#include "sim/sim.h"
#include "xform/xform.h"
#include "support/support.h"

enum { L = 2, H = 32, A = 8, KV = 2, S = 16, B = 2 };

/* The test's Llama with `batch` sequences, trained with Adam where `adam` is set (else SGD). */
static ir_module *
llama_of(int64_t batch, int adam)
{
    models_llama c;
    ir_module *m = NULL;
    di_error err;
    models_llama_init(&c);
    c.layers = L;
    c.hidden = H;
    c.heads = A;
    c.kv_heads = KV;
    c.ffn = 48;
    c.seq = S;
    c.vocab = 64;
    c.batch = batch;
    if (adam)
        c.train.optimizer = XFORM_OPTIM_ADAM;
    if (models_llama_build(&c, &m, &err) != 0)
        fail_msg("llama: %s", err.msg);
    return m;
}

static ir_module *
llama(void)
{
    return llama_of(B, 0);
}

static ir_module *
apply(const ir_module *m, uint32_t dp, uint32_t cp)
{
    ir_module *d = NULL;
    strategy s;
    di_error err;
    xform_strategy_init(&s);
    s.dp = dp;
    s.cp = cp;
    if (xform_apply(m, &s, NULL, &d, &err) != 0)
        fail_msg("apply: %s", err.msg);
    assert_verifies(d);
    return d;
}

static void
test_kv_exchange(void **state)
{
    ir_module *m = llama();
    const uint32_t cp = 4;
    ir_module *d = apply(m, 1, cp);
    uint32_t ngather = 0, nscatter = 0, nbucket = 0;
    const int64_t d_head = H / A;
    (void)state;
    for (ir_id op = 1; op < d->nop; op++) {
        const ir_op *o = &d->ops[op];
        ir_id in, out;
        const int64_t *id, *od;
        if (o->kind != IR_OP_ALLGATHER && o->kind != IR_OP_REDUCESCATTER &&
            o->kind != IR_OP_ALLREDUCE)
            continue;
        in = d->values[d->refs[o->inputs]].type;
        out = d->values[o->outputs].type;
        id = ir_type_dims(d, in);
        od = ir_type_dims(d, out);
        if (o->kind == IR_OP_ALLREDUCE) {
            if (d->types[in].rank == 1 && id[0] > 1000)
                nbucket++; /* the weight gradients' bucket */
            continue;
        }
        assert_int_equal(id[0], B);
        if (o->kind == IR_OP_ALLGATHER) {
            /*
             * Keys or values [b, s / cp, kv heads, d]: before the grouped-query repeat.
             * Nothing else: with the B = 2 sequences of the microbatch on one device, the
             * final hidden states and the labels are flattened on the local tokens (rows
             * in local order: xform_int.h, F_INNER) and the output layer and the loss work
             * on them; until 2026-12-07 both were gathered over the context ranks first
             * and every context rank computed the logits of the whole microbatch.
             */
            assert_int_equal(d->types[in].rank, 4);
            assert_int_equal(id[1], S / cp);
            assert_int_equal(od[1], S);
            assert_int_equal(id[2], KV);
            assert_int_equal(id[3], d_head);
            ngather++;
        } else {
            /* Their gradients [b, s, kv d] (the projections' outputs). */
            assert_int_equal(d->types[in].rank, 3);
            assert_int_equal(id[1], S);
            assert_int_equal(od[1], S / cp);
            assert_int_equal(id[2], KV * d_head);
            nscatter++;
        }
    }
    fprintf(stderr, "cp=%u: %u key/value all-gathers, %u reduce-scatters, %u gradient buckets\n",
            cp, ngather, nscatter, nbucket);
    /* Per layer: keys and values gathered once, their gradients scattered. */
    assert_int_equal(ngather, 2 * L);
    assert_int_equal(nscatter, 2 * L);
    assert_int_equal(nbucket, 1);
    ir_module_free(d);

    /*
     * With dp = 2 the bucket is reduced over both axes of the stage mesh [dp, cp, tp]; one
     * sequence per device, so the output layer and the loss work on the local tokens (the
     * batch and sequence flattened as one block): nothing but keys and values is gathered.
     */
    d = apply(m, 2, 2);
    nbucket = 0;
    for (ir_id op = 1; op < d->nop; op++) {
        uint32_t n;
        const int64_t *ax;
        if (d->ops[op].kind == IR_OP_ALLGATHER)
            assert_int_equal(d->types[d->values[d->refs[d->ops[op].inputs]].type].rank, 4);
        if (d->ops[op].kind != IR_OP_ALLREDUCE)
            continue;
        ax = ir_op_ints(d, op, "mesh_axes", &n);
        if (n == 2) {
            assert_int_equal(ax[0], 0);
            assert_int_equal(ax[1], 1);
            nbucket++;
        }
    }
    assert_int_equal(nbucket, 1);
    ir_module_free(d);
    ir_module_free(m);
}

/* Every context rank does the same work (the same local shapes everywhere). */
static void
test_load_balance(void **state)
{
    ir_module *m = llama(), *d1 = apply(m, 1, 1), *d2 = apply(m, 1, 2);
    hw_model *hw = NULL;
    sim_options o;
    sim_result *r1 = NULL, *r2 = NULL;
    di_error err;
    (void)state;
    assert_int_equal(hw_preset("a100-dgx", &hw, &err), 0);
    sim_options_default(&o);
    assert_int_equal(sim_run(d1, hw, &o, &r1, NULL, NULL, &err), 0);
    assert_int_equal(sim_run(d2, hw, &o, &r2, NULL, NULL, &err), 0);
    assert_int_equal(r2->ndevice, 2);
    fprintf(stderr, "flops per device: cp=1 %.6g; cp=2 %.6g and %.6g\n", r1->devices[0].flops,
            r2->devices[0].flops, r2->devices[1].flops);
    assert_true(r2->devices[0].flops == r2->devices[1].flops);
    /* Each rank does at most half the work plus what the head replicates, and not less. */
    assert_true(r2->devices[0].flops < 0.75 * r1->devices[0].flops);
    assert_true(r2->devices[0].flops >= 0.5 * r1->devices[0].flops);
    sim_result_free(r1);
    sim_result_free(r2);
    hw_free(hw);
    ir_module_free(d1);
    ir_module_free(d2);
    ir_module_free(m);
}

/* The mesh dimensions a collective runs over, as a bit set (mesh [dp, cp, tp]: tp is bit 2). */
static uint32_t
axes_of(const ir_module *d, ir_id op)
{
    uint32_t n = 0, mask = 0;
    const int64_t *ax = ir_op_ints(d, op, "mesh_axes", &n);
    for (uint32_t i = 0; i < n; i++)
        mask |= 1u << ax[i];
    return mask;
}

static void
test_sp_with_cp(void **state)
{
    ir_module *m = llama(), *d = NULL;
    strategy s;
    di_error err;
    uint32_t ngather = 0, nscatter = 0;
    const uint32_t cp = 2, tp = 2;
    (void)state;
    xform_strategy_init(&s);
    s.cp = cp;
    s.tp = tp;
    s.sequence_parallel = 1;
    assert_int_equal(xform_apply(m, &s, NULL, &d, &err), 0);
    assert_verifies(d);
    for (ir_id op = 1; op < d->nop; op++) {
        const ir_op *o = &d->ops[op];
        ir_id in, out;
        if ((o->kind != IR_OP_ALLGATHER && o->kind != IR_OP_REDUCESCATTER) ||
            axes_of(d, op) != 1u << 2)
            continue;
        in = d->values[d->refs[o->inputs]].type;
        out = d->values[o->outputs].type;
        if (d->types[in].rank != 3 || ir_type_dims(d, in)[2] != H)
            continue; /* not an activation [b, s, h] */
        /* Over the tensor ranks, inside the context rank's block: s / (cp tp) <-> s / cp. */
        if (o->kind == IR_OP_ALLGATHER) {
            assert_int_equal(ir_type_dims(d, in)[1], S / (cp * tp));
            assert_int_equal(ir_type_dims(d, out)[1], S / cp);
            ngather++;
        } else {
            assert_int_equal(ir_type_dims(d, in)[1], S / cp);
            assert_int_equal(ir_type_dims(d, out)[1], S / (cp * tp));
            nscatter++;
        }
    }
    fprintf(stderr, "cp=%u tp=%u sp: %u all-gathers and %u reduce-scatters of activations over "
            "the tensor ranks\n", cp, tp, ngather, nscatter);
    /* Per layer, before and after attention and the MLP; the backward pass mirrors them. */
    assert_true(ngather >= 2 * L);
    assert_true(nscatter >= 2 * L);
    /*
     * The residual stream itself (the layers' forward Adds with the sequence hint) is
     * sequence-split over the tensor ranks inside the context rank's block. Until
     * 2026-12-07 an op that passes partial sums on (the Llama's embedding output, an
     * Identity; the residual Adds of two partial sums) kept them partial under cp and
     * the stream was whole on the tensor ranks, [b, s / cp, h]: on llama3-8b at 32,768
     * tokens, dp 4, tp 8, cp 2, 16 microbatches, 26.6 GiB a device instead of 19.5.
     */
    {
        uint32_t nres = 0;
        for (ir_id op = 1; op < d->nop; op++) {
            const ir_op *o = &d->ops[op];
            ir_id t = d->values[o->outputs].type;
            if (o->kind != IR_OP_ADD || ir_op_attr(d, op, "dist.seq") == NULL ||
                ir_op_int(d, op, "dist.layer", -1) < 0 || d->types[t].rank != 3 ||
                strcmp(ir_op_string(d, op, "dist.phase", ""), "forward") != 0)
                continue;
            assert_int_equal(ir_type_dims(d, t)[1], S / (cp * tp));
            nres++;
        }
        assert_int_equal(nres, 2 * L); /* after attention and after the MLP */
    }
    ir_module_free(d);
    ir_module_free(m);
}

/*
 * ZeRO shards over the data and the context ranks, as Megatron-LM's
 * distributed optimizer does over its data-parallel group with context
 * parallelism: a Llama with Adam (f32: two moments of 4 bytes a parameter,
 * every tensor divisible by 4) holds the same optimizer state per device on
 * dp 2 x cp 2 as on dp 4, a quarter of it without ZeRO, and on dp 1 x cp 2
 * half of it (ZeRO with context parallelism alone). Until 2026-12-07 ZeRO
 * sharded over the data ranks only, and a cp plan held cp times the state
 * (the first figure was twice the second; the last, no ZeRO at all).
 */
static void
test_zero_over_cp(void **state)
{
    ir_module *m = llama_of(4, 1);
    hw_model *hw = NULL;
    di_error err;
    const uint32_t conf[4][3] = {{2, 2, 1}, {4, 1, 1}, {2, 2, 0}, {1, 2, 1}}; /* dp, cp, zero */
    uint64_t opt[4];
    (void)state;
    assert_int_equal(hw_preset("a100-dgx", &hw, &err), 0);
    for (int k = 0; k < 4; k++) {
        strategy s;
        sim_result *r;
        uint64_t mx[SIM_NMEMCLASS];
        xform_strategy_init(&s);
        s.dp = conf[k][0];
        s.cp = conf[k][1];
        s.zero = conf[k][2];
        r = simulate_strategy(m, &s, hw);
        class_max(r, mx);
        opt[k] = mx[SIM_MEM_OPTIMIZER];
        fprintf(stderr, "dp %u cp %u zero %u: %llu bytes of optimizer state a device\n",
                conf[k][0], conf[k][1], conf[k][2], (unsigned long long)opt[k]);
        sim_result_free(r);
    }
    assert_true(opt[0] > 0);
    assert_int_equal(opt[0], opt[1]);
    assert_int_equal(4 * opt[0], opt[2]);
    assert_int_equal(2 * opt[3], opt[2]);
    hw_free(hw);
    ir_module_free(m);
}

static void
test_ring_attention(void **state)
{
    enum { RS = 4096, RH = 8, RKV = 2, RD = 64, RB = 1, RCP = 4 };
    models_llama c;
    ir_module *m = NULL, *d = NULL;
    strategy s;
    di_error err;
    hw_model *hw = NULL;
    sim_options so;
    sim_result *r = NULL;
    sim_event *ev = NULL;
    uint32_t nev = 0, nshift = 0, nfa = 0, nfag = 0;
    /* f32 keys of one rank: key/value heads (the fused kernel takes them before any repeat). */
    const uint64_t block = (uint64_t)RB * RKV * (RS / RCP) * RD * 4;
    double fa_start[RCP], fa_end[RCP], sh_start[RCP], sh_end[RCP];
    ir_id fa_op[RCP] = {0}, sh_op[RCP] = {0};
    uint32_t nf = 0, nsh = 0;
    (void)state;
    models_llama_init(&c);
    c.layers = 1;
    c.hidden = RH * RD;
    c.heads = RH;
    c.kv_heads = RKV;
    c.ffn = 2 * RH * RD;
    c.seq = RS;
    c.vocab = 256;
    c.batch = RB;
    c.fused_attention = 1;
    assert_int_equal(models_llama_build(&c, &m, &err), 0);
    xform_strategy_init(&s);
    s.cp = RCP;
    assert_int_equal(xform_apply(m, &s, NULL, &d, &err), 0);
    assert_verifies(d);
    for (ir_id op = 1; op < d->nop; op++) {
        const ir_op *o = &d->ops[op];
        if (o->kind == IR_OP_SHIFT) {
            /* One block of keys, values or their gradients, to the next context rank. */
            assert_int_equal(ir_type_bytes(d, d->values[o->outputs].type), block);
            nshift++;
        }
        nfa += o->kind == IR_OP_FLASHATTN;
        nfag += o->kind == IR_OP_FLASHATTNGRAD;
        assert_int_not_equal(o->kind, IR_OP_ALLGATHER); /* no key/value gather (one sequence) */
    }
    fprintf(stderr, "ring, cp=%u: %u attention steps, %u gradient steps, %u shifts of %llu bytes\n",
            RCP, nfa, nfag, nshift, (unsigned long long)block);
    /* Forward: cp steps, cp - 1 shifts of k and of v; backward: the same, plus cp of dk, dv. */
    assert_int_equal(nfa, RCP);
    assert_int_equal(nfag, RCP);
    assert_int_equal(nshift, 2 * (RCP - 1) + 2 * (RCP - 1) + 2 * RCP);

    /*
     * The timeline on context rank 0: the forward steps (kv_shift 0 .. cp - 1) and the shifts
     * that bring step j + 1 its keys (the op defining that step's input 1).
     */
    assert_int_equal(hw_preset("a100-dgx", &hw, &err), 0);
    sim_options_default(&so);
    assert_int_equal(sim_run(d, hw, &so, &r, &ev, &nev, &err), 0);
    for (ir_id op = 1; op < d->nop; op++) {
        const ir_op *o = &d->ops[op];
        int64_t j = ir_op_int(d, op, "kv_shift", -1);
        if (o->kind != IR_OP_FLASHATTN || j < 0 || j >= RCP)
            continue;
        fa_op[j] = op;
        if (j > 0) {
            sh_op[j - 1] = d->values[d->refs[o->inputs + 1]].def;
            assert_int_equal(d->ops[sh_op[j - 1]].kind, IR_OP_SHIFT);
        }
    }
    for (uint32_t i = 0; i < nev; i++) {
        if (ev[i].device != 0)
            continue;
        for (uint32_t j = 0; j < RCP; j++) {
            if (ev[i].op == fa_op[j]) {
                fa_start[j] = ev[i].start;
                fa_end[j] = ev[i].end;
                nf++;
            }
            if (j + 1 < RCP && ev[i].op == sh_op[j]) {
                sh_start[j] = ev[i].start;
                sh_end[j] = ev[i].end;
                nsh++;
            }
        }
    }
    assert_int_equal(nsh, RCP - 1);
    assert_int_equal(nf, RCP);
    for (uint32_t j = 0; j + 1 < RCP; j++) {
        double b = fa_end[j] - fa_start[j], t = sh_end[j] - sh_start[j];
        fprintf(stderr, "step %u: attention %.2f us, key shift %.2f us (from %.2f, the step "
                "from %.2f), gap to the next step %.3f us\n",
                j, b * 1e6, t * 1e6, sh_start[j] * 1e6, fa_start[j] * 1e6,
                (fa_start[j + 1] - fa_end[j]) * 1e6);
        /* The shift for the next step runs (at the latest) while this step computes... */
        assert_true(sh_start[j] < fa_end[j]);
        /* ...and, shorter than it, leaves no gap before the next step. */
        if (t < b)
            assert_true(fa_start[j + 1] - fa_end[j] < 1e-9);
    }
    di_free(ev);
    sim_result_free(r);
    hw_free(hw);
    ir_module_free(d);
    ir_module_free(m);
}

static void
test_refusals(void **state)
{
    ir_module *m = llama(), *d = NULL;
    strategy s;
    di_error err;
    (void)state;
    xform_strategy_init(&s);
    s.cp = 3;
    assert_int_equal(xform_apply(m, &s, NULL, &d, &err), DI_ESTRATEGY);
    assert_non_null(strstr(err.msg, "does not divide the sequence length 16"));
    ir_module_free(m);
    /* An MLP has no sequence to split. */
    {
        models_mlp c;
        models_mlp_init(&c);
        assert_int_equal(models_mlp_build(&c, &m, &err), 0);
        xform_strategy_init(&s);
        s.cp = 2;
        assert_int_equal(xform_apply(m, &s, NULL, &d, &err), DI_ESTRATEGY);
        assert_non_null(strstr(err.msg, "no dimension 1"));
        ir_module_free(m);
    }
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kv_exchange),
        cmocka_unit_test(test_load_balance),
        cmocka_unit_test(test_sp_with_cp),
        cmocka_unit_test(test_zero_over_cp),
        cmocka_unit_test(test_ring_attention),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
