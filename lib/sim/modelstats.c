/*
 * modelstats.c: what a training step is worth, independent of how it runs:
 * parameters, tokens and model FLOPs of a sequential module, and the MFU and
 * tokens/s a result earns with them (docs/simulator.md, "MFU and HFU").
 *
 * Model FLOPs follow Megatron-LM: 6 N per token for the weights (forward 2N,
 * backward 4N; N the active matmul weights: the parameters a MatMul or Gemm
 * reads, through views and casts, of a mixture of experts' expert weights
 * the top_k of E a token uses; an embedding table only looked up, biases and
 * norm scales cost no matmul and do not count) plus attention, the matmuls
 * between two activations (QK^T and AV), counted three times their forward
 * FLOPs. The attention term comes from the module, not from a formula: a
 * forward MatMul whose operands both derive from no parameter. Recomputation and
 * work replicated by the strategy do not count (that is HFU's business).
 */
#include "sim/sim.h"

#include <string.h>

#include "ir/ops.h"

/* Ops through which a parameter stays a parameter (views, casts, copies). */
static int
passes_weight(int kind)
{
    return kind == IR_OP_RESHAPE || kind == IR_OP_TRANSPOSE || kind == IR_OP_CAST ||
           kind == IR_OP_IDENTITY || kind == IR_OP_UNSQUEEZE || kind == IR_OP_SQUEEZE ||
           kind == IR_OP_SLICE || kind == IR_OP_SPLIT || kind == IR_OP_ANNOTATE ||
           kind == IR_OP_REDISTRIBUTE;
}

void
sim_model_stats_of(const ir_module *m, sim_model_stats *out)
{
    ir_id entry = ir_module_entry(m);
    uint8_t *weight, *matmul;
    uint32_t *root; /* a weight-derived value's entry argument, by index */
    int annotated = 0;

    memset(out, 0, sizeof *out);
    if (entry == 0)
        return;
    const ir_region *f = &m->regions[entry];
    weight = di_xcalloc(m->nvalue ? m->nvalue : 1, 1);
    root = di_xcalloc(m->nvalue ? m->nvalue : 1, sizeof *root);
    matmul = di_xcalloc(f->narg ? f->narg : 1, 1);
    /* Parameters: the entry arguments an optimizer updates. */
    for (ir_id op = 1; op < m->nop; op++) {
        const ir_op *o = &m->ops[op];
        if (o->kind != IR_OP_NONE && (ir_opkind_info(o->kind)->flags & IR_OPF_OPTIM) && o->ninput)
            weight[m->refs[o->inputs]] = 1;
        if (o->kind != IR_OP_NONE && ir_op_attr(m, op, "dist.phase") != NULL)
            annotated = 1;
    }
    for (uint32_t a = 0; a < f->narg; a++) {
        const ir_value *v = &m->values[f->args[a]];
        if (weight[f->args[a]]) {
            out->parameters += (uint64_t)ir_type_numel(m, v->type);
            root[f->args[a]] = a;
        }
        if (strcmp(ir_str_get(m, v->name), "tokens") == 0)
            out->tokens = (double)ir_type_numel(m, v->type);
    }
    /* Without a "tokens" argument a sample is the unit: dimension 0 of the first argument. */
    if (out->tokens == 0 && f->narg > 0) {
        const ir_type *t = &m->types[m->values[f->args[0]].type];
        out->tokens = t->kind == IR_TYPE_TENSOR && t->rank > 0 ? (double)m->ints[t->dims] : 1;
    }
    /* Attention: forward matmuls between activations (ops are in topological order). */
    for (uint32_t k = 0; k < f->nop; k++) {
        ir_id op = f->ops[k];
        const ir_op *o = &m->ops[op];
        if (passes_weight(o->kind) && o->ninput && weight[m->refs[o->inputs]]) {
            for (uint32_t r = 0; r < o->noutput; r++) {
                weight[o->outputs + r] = 1;
                root[o->outputs + r] = root[m->refs[o->inputs]];
            }
            continue;
        }
        /* A weight a matmul reads (an opaque op's: it may be one) costs 2 FLOPs per element. */
        if (o->kind == IR_OP_MATMUL || o->kind == IR_OP_GEMM || o->kind == IR_OP_OPAQUE)
            for (uint32_t i = 0; i < o->ninput; i++)
                if (weight[m->refs[o->inputs + i]])
                    matmul[root[m->refs[o->inputs + i]]] = 1;
        if (o->kind == IR_OP_FLASHATTN && o->ninput == 3 &&
            (!annotated || strcmp(ir_op_string(m, op, "dist.phase", ""), "forward") == 0)) {
            /* Fused attention: its two products counted dense, as the unfused form's are. */
            ir_cost c;
            ir_op_cost(m, op, &c);
            if (ir_op_int(m, op, "causal", 0)) {
                const ir_type *tk = &m->types[m->values[m->refs[o->inputs + 1]].type];
                double sk = (double)m->ints[tk->dims + tk->rank - 2];
                c.flops /= 0.5 * (1.0 + 1.0 / sk);
            }
            out->attention_flops += 3 * c.flops;
            continue;
        }
        if ((o->kind != IR_OP_MATMUL && o->kind != IR_OP_GEMM) || o->ninput < 2)
            continue;
        if (annotated && strcmp(ir_op_string(m, op, "dist.phase", ""), "forward") != 0)
            continue;
        if (weight[m->refs[o->inputs]] || weight[m->refs[o->inputs + 1]])
            continue;
        ir_cost c;
        ir_op_cost(m, op, &c);
        out->attention_flops += 3 * c.flops;
    }
    /* Experts: a forward MatMul of dispatched tokens [.., E, C, in] by a weight [E, in, out]. */
    {
        int64_t topk = 0;
        uint8_t *seen = di_xcalloc(m->nvalue ? m->nvalue : 1, 1);
        double inactive = 0;
        for (uint32_t k = 0; k < f->nop && topk == 0; k++)
            if (m->ops[f->ops[k]].kind == IR_OP_TOPK)
                topk = ir_op_int(m, f->ops[k], "k", 0);
        for (uint32_t k = 0; k < f->nop && topk > 0; k++) {
            const ir_op *o = &m->ops[f->ops[k]];
            ir_id w;
            const ir_type *wt;
            if (o->kind != IR_OP_MATMUL || o->ninput != 2)
                continue;
            w = m->refs[o->inputs + 1];
            wt = &m->types[m->values[w].type];
            if (m->values[w].def != 0 || seen[w] || wt->kind != IR_TYPE_TENSOR || wt->rank != 3 ||
                m->types[m->values[m->refs[o->inputs]].type].rank < 4)
                continue;
            seen[w] = 1;
            int64_t e = m->ints[wt->dims];
            if (e > topk)
                inactive +=
                    (double)ir_type_numel(m, m->values[w].type) * (double)(e - topk) / (double)e;
        }
        di_free(seen);
        out->active_parameters = out->parameters - (uint64_t)(inactive + 0.5);
        for (uint32_t a = 0; a < f->narg; a++)
            if (matmul[a])
                out->matmul_parameters += (uint64_t)ir_type_numel(m, m->values[f->args[a]].type);
        /* The inactive experts' share: of weights a MatMul reads, so counted above. */
        out->matmul_parameters -= out->matmul_parameters > (uint64_t)(inactive + 0.5)
                                      ? (uint64_t)(inactive + 0.5)
                                      : out->matmul_parameters;
    }
    di_free(matmul);
    di_free(root);
    di_free(weight);
    out->flops_6n = 6.0 * (double)out->matmul_parameters * out->tokens;
    out->model_flops = out->parameters ? out->flops_6n + out->attention_flops : 0;
}

void
sim_result_set_model(sim_result *r, const sim_model_stats *st)
{
    r->model_flops = st->model_flops;
    r->tokens = st->tokens;
    r->mfu = r->step_time_s > 0 && r->peak_flops > 0
                 ? st->model_flops / (r->step_time_s * r->peak_flops)
                 : 0;
    r->tokens_per_s = r->step_time_s > 0 ? st->tokens / r->step_time_s : 0;
}
