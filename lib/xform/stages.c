/*
 * stages.c: the model stages of a pipeline. The layers are cut into K
 * contiguous groups balanced by their time on the target hardware (the
 * cost interface, cost.h) when every op can be priced, else by FLOPs; the
 * embedding joins the first stage, the head and the loss the last, and an
 * op outside every layer follows its inputs' producers. Per-stage layer
 * counts from the strategy are taken as given.
 */
#include "xform/xform_int.h"

#include <assert.h>
#include <math.h>
#include <string.h>

/*
 * An op's weight for balancing: its time on the target hardware (by_time,
 * through the cost interface), else its FLOPs.
 */
static double
op_weight(const xf_ctx *c, ir_id op, int by_time)
{
    ir_cost k;
    if (by_time) {
        double t = c->cost.op_time(c->cost.ctx, c->m, op);
        return t > 0 ? t : 0;
    }
    ir_op_cost(c->m, op, &k);
    return k.flops > 0 ? k.flops : 0;
}

/*
 * Partitions the layers into K contiguous groups minimizing the largest
 * group's cost (embedding counted with the first layer, head with the
 * last); ties go to the most even layer counts. The cost is the time on
 * the target hardware (cost.h) when every op can be priced
 * (so memory-bound ops count for what they cost), else FLOPs.
 */
static int
balance(xf_ctx *c)
{
    const ir_module *m = c->m;
    const ir_region *fr = &m->regions[c->func];
    uint32_t L = c->nlayer, K = c->K;
    double *cost = di_xcalloc(L + 1, sizeof *cost), *pre;
    double *best;
    double *sq;
    uint32_t *cut;
    int by_time = xform_cost_known(&c->cost);
    c->layer_stage = di_xcalloc(L ? L : 1, sizeof *c->layer_stage);
    if (L == 0 || K <= 1) {
        di_free(cost);
        return 0;
    }
    if (c->s.nstages > 0 && c->s.stages[0].layers > 0) {
        /* The layer counts the strategy gives (one model stage per group, validated). */
        for (uint32_t k = 0, l = 0; k < K; k++)
            for (uint32_t j = 0; j < c->s.stages[k].layers && l < L; j++)
                c->layer_stage[l++] = (int32_t)k;
        di_free(cost);
        return 0;
    }
    for (uint32_t i = 0; i < fr->nop && by_time; i++)
        if (c->cost.op_time(c->cost.ctx, m, fr->ops[i]) < 0)
            by_time = 0;
    for (uint32_t i = 0; i < fr->nop; i++) {
        ir_id op = fr->ops[i];
        const char *part = xf_op_str(m, op, "dist.part");
        double f;
        uint32_t idx = 0;
        if (c->vflags[m->ops[op].noutput ? m->ops[op].outputs : 0] & XF_V_CONST)
            continue;
        f = op_weight(c, op, by_time);
        if (part && strcmp(part, "embed") == 0) {
            idx = 0;
        } else if (part && strcmp(part, "head") == 0) {
            idx = L - 1;
        } else if (c->op[op].layer >= 0) {
            for (idx = 0; idx < L && c->layers[idx] != c->op[op].layer; idx++)
                ;
            if (idx == L)
                idx = 0;
        } else {
            continue;
        }
        cost[idx] += f;
    }
    pre = di_xcalloc(L + 1, sizeof *pre);
    for (uint32_t i = 0; i < L; i++)
        pre[i + 1] = pre[i] + cost[i];
    /* best[k][j]: the first j layers in k groups; sq: sum of squared counts (tie-break). */
    best = di_xmalloc((size_t)(K + 1) * (L + 1) * sizeof *best);
    sq = di_xmalloc((size_t)(K + 1) * (L + 1) * sizeof *sq);
    cut = di_xcalloc((size_t)(K + 1) * (L + 1), sizeof *cut);
#define AT(a, k, j) a[(size_t)(k) * (L + 1) + (j)]
    for (uint32_t k = 0; k <= K; k++)
        for (uint32_t j = 0; j <= L; j++) {
            AT(best, k, j) = INFINITY;
            AT(sq, k, j) = INFINITY;
        }
    AT(best, 0, 0) = 0;
    AT(sq, 0, 0) = 0;
    for (uint32_t k = 1; k <= K; k++)
        for (uint32_t j = k; j <= L; j++)
            for (uint32_t i = k - 1; i < j; i++) {
                /* Groups of other shapes: the cost per device of the group. */
                double b = AT(best, k - 1, i), s = pre[j] - pre[i];
                if (c->hetero)
                    s /= (double)c->gdp[(k - 1) % c->pp] * c->gtp[(k - 1) % c->pp];
                double v = b > s ? b : s, q = AT(sq, k - 1, i) + (double)(j - i) * (j - i);
                double cur = AT(best, k, j);
                if (v < cur * (1 - 1e-12) ||
                    (v <= cur * (1 + 1e-12) && q < AT(sq, k, j))) {
                    AT(best, k, j) = v;
                    AT(sq, k, j) = q;
                    AT(cut, k, j) = i;
                }
            }
    {
        uint32_t j = L;
        for (uint32_t k = K; k >= 1; k--) {
            uint32_t i = AT(cut, k, j);
            for (uint32_t l = i; l < j; l++)
                c->layer_stage[l] = (int32_t)(k - 1);
            j = i;
        }
        assert(j == 0); /* K groups cover the L layers from the first */
    }
#undef AT
    di_free(cost);
    di_free(pre);
    di_free(best);
    di_free(sq);
    di_free(cut);
    return 0;
}

/* Model stage of every non-constant op. */
int
xf_assign_stages(xf_ctx *c)
{
    const ir_module *m = c->m;
    const ir_region *fr = &m->regions[c->func];
    int rc = balance(c);
    if (rc)
        return rc;
    for (uint32_t i = 0; i < fr->nop; i++) {
        ir_id op = fr->ops[i];
        const ir_op *o = &m->ops[op];
        xf_opinfo *oi = &c->op[op];
        const char *part;
        if (o->noutput && (c->vflags[o->outputs] & XF_V_CONST))
            continue;
        if (c->K <= 1) {
            oi->stage = 0;
            continue;
        }
        part = xf_op_str(m, op, "dist.part");
        if (part && strcmp(part, "embed") == 0) {
            oi->stage = 0;
        } else if (part && strcmp(part, "head") == 0) {
            oi->stage = (int32_t)c->K - 1;
        } else if (oi->layer >= 0) {
            int32_t li = xf_layer_index(c, oi->layer);
            oi->stage = li >= 0 ? c->layer_stage[li] : 0;
        } else {
            /* Unannotated: the latest stage among the inputs' producers. */
            int32_t s = 0;
            for (uint32_t k = 0; k < o->ninput; k++) {
                ir_id d = m->values[m->refs[o->inputs + k]].def;
                if (d && c->op[d].stage > s)
                    s = c->op[d].stage;
            }
            oi->stage = s;
        }
        assert(oi->stage >= 0 && (uint32_t)oi->stage < c->K);
    }
    return 0;
}

