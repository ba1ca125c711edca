/*
 * strategy.c: the trivial strategy in the transforms' form, the analysis
 * of a sequential training step that every transform shares, and
 * validation (xform_validate).
 *
 * The analysis finds the batch-data arguments (autodiff's data names, and
 * any integer argument) and the weights (the other floating-point
 * arguments), each op's phase (forward, backward, once-per-step) and layer
 * from the dist.* annotations of docs/models.md (inferred when absent:
 * optimizer ops run once per step, gradient ops and everything downstream of
 * them are backward), and which values are computed from constants only.
 * Validation then checks every divisibility the strategy needs and names
 * the constraint that fails. xform_model_facts_init publishes what the
 * analysis found (batch, layers, heads, hidden size, which arguments are
 * data) for callers outside the transforms, such as the search.
 */
#include "xform/xform_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xform/autodiff.h"

void
xform_strategy_init(strategy *s)
{
    memset(s, 0, sizeof *s);
    s->dp = s->tp = s->pp = 1;
    s->microbatches = 1;
    s->virtual_stages = 1;
}

/* ---- analysis ---- */

const char *
xf_op_str(const ir_module *m, ir_id op, const char *key)
{
    const ir_attr *a = ir_op_attr(m, op, key);
    if (a == NULL || a->kind != IR_ATTR_STRING)
        return NULL;
    return ir_str_get(m, a->s);
}

int32_t
xf_device(const xf_ctx *c, uint32_t group, uint32_t d, uint32_t k, uint32_t t)
{
    /* d: outer x inner; under tp-pp-dp every stage has the same degrees (strategy_normalize). */
    uint32_t inner = (d * c->n[XF_CP] + k) * c->gtp[group] + t;
    return (int32_t)strategy_rank_device(&c->s, c->goff[group] + inner, group, inner,
                                         c->gtp[group]);
}

/* True when the entry function computes only a forward pass (no gradient or optimizer op). */
static int
forward_only(const ir_module *m, ir_id f)
{
    const ir_region *r = &m->regions[f];
    for (uint32_t i = 0; i < r->nop; i++) {
        uint32_t fl = ir_opkind_info(m->ops[r->ops[i]].kind)->flags;
        if (fl & (IR_OPF_GRAD | IR_OPF_OPTIM))
            return 0;
    }
    return 1;
}

void
xform_estimate_cost(const ir_module *m, const strategy *s, xform_estimate *out)
{
    int training = 0;
    for (ir_id i = 1; i < m->nop && !training; i++)
        training = (ir_opkind_info(m->ops[i].kind)->flags & (IR_OPF_GRAD | IR_OPF_OPTIM)) != 0;
    out->ops = (uint64_t)(m->nop > 0 ? m->nop - 1 : 0) * (training ? 1 : 3);
    out->microbatches = s->microbatches ? s->microbatches : s->pp ? s->pp : 1;
    if (s->schedule == STRATEGY_SCHEDULE_INTERLEAVED && s->virtual_stages > 1)
        out->microbatches *= s->virtual_stages; /* each microbatch crosses V chunks per device */
    out->op_instances = out->ops * out->microbatches;
    out->bytes = out->op_instances * XFORM_BYTES_PER_OP_INSTANCE +
                 (uint64_t)m->nop * 64 + (uint64_t)m->nvalue * 64;
}

static int
cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/*
 * Per-stage degrees: checks their shape and folds stages that are all
 * alike (and fix no layer counts) into plain dp and tp, so that such a
 * strategy is the uniform one.
 */
static int
stages_init(xf_ctx *c)
{
    strategy *s = &c->s;
    int rc = strategy_check_stages(s, s->pp, c->err);
    if (rc != 0)
        return rc;
    if (strategy_stages_alike(s)) {
        s->dp = s->stages[0].dp ? s->stages[0].dp : 1;
        s->tp = s->stages[0].tp ? s->stages[0].tp : 1;
        s->nstages = 0;
        s->stages = NULL;
    }
    return 0;
}

int32_t
xf_layer_index(const xf_ctx *c, int32_t layer)
{
    uint32_t lo = 0, hi = c->nlayer;
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (c->layers[mid] < layer)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < c->nlayer && c->layers[lo] == layer ? (int32_t)lo : -1;
}

int
xf_layer_is_tp(const xf_ctx *c, int32_t layer)
{
    int32_t li;
    if (c->tplayer == NULL)
        return 1;
    li = layer == INT32_MIN ? -1 : xf_layer_index(c, layer);
    return li >= 0 && c->tplayer[li];
}

static int
analyze(xf_ctx *c)
{
    const ir_module *m = c->m;
    const ir_region *r = &m->regions[c->func];
    int32_t *ls;
    uint32_t nl = 0;

    c->vflags = di_xcalloc(m->nvalue ? m->nvalue : 1, 1);
    c->op = di_xcalloc(m->nop ? m->nop : 1, sizeof *c->op);
    c->batch = -1;
    for (uint32_t a = 0; a < r->narg; a++) {
        ir_id v = r->args[a];
        const ir_type *t = &m->types[m->values[v].type];
        const char *name = ir_str_get(m, m->values[v].name);
        uint8_t fl = XF_V_ARG;
        if (t->kind != IR_TYPE_TENSOR)
            return di_error_set(c->err, DI_EUNSUPPORTED,
                                "argument %%%s is a tuple: the transforms take a sequential "
                                "module (every tensor on one device)",
                                name);
        if (t->mesh || t->devvar)
            return di_error_set(c->err, DI_EUNSUPPORTED,
                                "argument %%%s is already distributed: the transforms take a "
                                "sequential module",
                                name);
        if (xform_autodiff_is_data_name(NULL, name) || !ir_dtype_is_float((ir_dtype)t->dtype)) {
            fl |= XF_V_DATA | XF_V_BATCH;
            if (t->rank == 0)
                return di_error_set(c->err, DI_EUNSUPPORTED,
                                    "data argument %%%s is a scalar: batch data needs a batch "
                                    "dimension 0",
                                    name);
            if (c->batch < 0)
                c->batch = ir_type_dims(m, m->values[v].type)[0];
            else if (c->batch != ir_type_dims(m, m->values[v].type)[0])
                return di_error_set(c->err, DI_EUNSUPPORTED,
                                    "data arguments disagree on the batch (dimension 0): %lld "
                                    "and %lld of %%%s",
                                    (long long)c->batch,
                                    (long long)ir_type_dims(m, m->values[v].type)[0], name);
        } else {
            fl |= XF_V_WEIGHT;
        }
        c->vflags[v] = fl;
    }

    ls = di_xmalloc((r->nop + 1) * sizeof *ls);
    for (uint32_t i = 0; i < r->nop; i++) {
        ir_id op = r->ops[i];
        const ir_op *o = &m->ops[op];
        xf_opinfo *oi = &c->op[op];
        uint32_t fl = ir_opkind_info(o->kind)->flags;
        const char *ph = xf_op_str(m, op, "dist.phase"), *tp = xf_op_str(m, op, "dist.tp");
        const ir_attr *la = ir_op_attr(m, op, "dist.layer");
        const ir_attr *sa = ir_op_attr(m, op, "dist.seq");
        uint8_t vin = XF_V_CONST, batch = 0;
        int backward_input = 0;
        if (o->body)
            return di_error_set(c->err, DI_EUNSUPPORTED,
                                "the module already has a dist.pmap: the transforms take a "
                                "sequential module");
        if (fl & IR_OPF_COMM)
            return di_error_set(c->err, DI_EUNSUPPORTED,
                                "the module already communicates (%s): the transforms take a "
                                "sequential module",
                                ir_op_label(m, op).s);
        for (uint32_t k = 0; k < o->ninput; k++) {
            ir_id v = m->refs[o->inputs + k];
            uint8_t f = c->vflags[v];
            if (!(f & XF_V_CONST))
                vin = 0;
            batch |= f & XF_V_BATCH;
            if (m->values[v].def && c->op[m->values[v].def].phase == XF_PH_BACKWARD &&
                !(f & XF_V_CONST))
                backward_input = 1;
        }
        for (uint32_t k = 0; k < o->noutput; k++)
            c->vflags[o->outputs + k] = vin | batch;
        oi->layer = la && la->kind == IR_ATTR_INT ? (int32_t)la->i : INT32_MIN;
        oi->seq = sa && sa->kind == IR_ATTR_INT && sa->i >= 0 && sa->i < 16 ? (int8_t)sa->i : -1;
        oi->tp = XF_TP_NONE;
        if (tp && strcmp(tp, "column") == 0)
            oi->tp = XF_TP_COLUMN;
        else if (tp && strcmp(tp, "row") == 0)
            oi->tp = XF_TP_ROW;
        else if (tp && strcmp(tp, "heads") == 0)
            oi->tp = XF_TP_HEADS;
        else if (tp && strcmp(tp, "vocab") == 0)
            oi->tp = XF_TP_VOCAB;
        else if (tp && strcmp(tp, "expert") == 0)
            oi->tp = XF_TP_EXPERT;
        else if (tp && strcmp(tp, "kv") == 0)
            oi->tp = XF_TP_KV;
        if (fl & IR_OPF_OPTIM)
            oi->phase = XF_PH_STEP;
        else if (ph && strcmp(ph, "optimizer") == 0)
            oi->phase = XF_PH_STEP;
        else if (ph && strcmp(ph, "backward") == 0)
            oi->phase = XF_PH_BACKWARD;
        else if (ph && strcmp(ph, "forward") == 0)
            oi->phase = XF_PH_FORWARD;
        else
            oi->phase = (fl & IR_OPF_GRAD) || backward_input ? XF_PH_BACKWARD : XF_PH_FORWARD;
        oi->stage = -1;
        oi->scale = 1.0;
        if (oi->layer >= 0)
            ls[nl++] = oi->layer;
    }
    qsort(ls, nl, sizeof *ls, cmp_i32);
    c->nlayer = 0;
    for (uint32_t i = 0; i < nl; i++)
        if (c->nlayer == 0 || ls[c->nlayer - 1] != ls[i])
            ls[c->nlayer++] = ls[i];
    c->layers = ls;
    return 0;
}

/* ---- validation ---- */

/* The first op of kind/tp in the function, or 0. */
static ir_id
find_op(const xf_ctx *c, int kind, int tp, uint32_t out_rank)
{
    const ir_module *m = c->m;
    const ir_region *r = &m->regions[c->func];
    for (uint32_t i = 0; i < r->nop; i++) {
        ir_id op = r->ops[i];
        if (m->ops[op].kind != kind || c->op[op].tp != tp || c->op[op].phase != XF_PH_FORWARD)
            continue;
        if (out_rank && m->types[m->values[m->ops[op].outputs].type].rank != out_rank)
            continue;
        return op;
    }
    return 0;
}

const char *
xf_stage_prefix(const xf_ctx *c, uint32_t g, char *buf, size_t n)
{
    if (!c->hetero)
        return "";
    snprintf(buf, n, "stage %u: ", g);
    return buf;
}

/* tp_layers: which layers are tensor parallel. */
static int
tp_layers_init(xf_ctx *c)
{
    const strategy *s = &c->s;
    if (s->ntp_layers == 0)
        return 0;
    c->tplayer = di_xcalloc(c->nlayer ? c->nlayer : 1, 1);
    for (uint32_t i = 0; i < s->ntp_layers; i++) {
        uint32_t l = s->tp_layers[i];
        int32_t li = l > INT32_MAX ? -1 : xf_layer_index(c, (int32_t)l);
        if (li < 0) {
            if (c->nlayer == 0)
                return di_error_set(c->err, DI_ESTRATEGY,
                                    "tp_layers needs dist.layer annotations and the module has "
                                    "none");
            return di_error_set(c->err, DI_ESTRATEGY,
                                "tp_layers lists layer %u, which the module does not have "
                                "(layers %d to %d)",
                                s->tp_layers[i], c->layers[0], c->layers[c->nlayer - 1]);
        }
        c->tplayer[li] = 1;
    }
    return 0;
}

/* Tensor parallelism on group g: hidden size, heads, sequence. */
static int
validate_tp(xf_ctx *c, uint32_t g)
{
    const ir_module *m = c->m;
    uint32_t tp = c->gtp[g];
    char pre[32];
    ir_id heads = find_op(c, IR_OP_RESHAPE, XF_TP_HEADS, 4);
    ir_id col = find_op(c, IR_OP_MATMUL, XF_TP_COLUMN, 0);
    if (col == 0 && find_op(c, IR_OP_MATMUL, XF_TP_ROW, 0) == 0)
        return di_error_set(c->err, DI_ESTRATEGY,
                            "%stp=%u needs dist.tp annotations (column- and row-parallel "
                            "MatMuls) and the module has none",
                            xf_stage_prefix(c, g, pre, sizeof pre), tp);
    if (col) {
        const int64_t *wd = ir_type_dims(m, m->values[ir_op_input(m, col, 1)].type);
        int64_t hidden = heads ? wd[0] : wd[1];
        if (hidden % tp != 0)
            return di_error_set(c->err, DI_ESTRATEGY,
                                "%stp=%u does not divide the hidden size %lld",
                                xf_stage_prefix(c, g, pre, sizeof pre), tp, (long long)hidden);
    }
    if (heads) {
        const ir_region *r = &m->regions[c->func];
        int64_t a = ir_type_dims(m, m->values[m->ops[heads].outputs].type)[2];
        if (a % tp != 0)
            return di_error_set(c->err, DI_ESTRATEGY, "%stp=%u does not divide the %lld heads",
                                xf_stage_prefix(c, g, pre, sizeof pre), tp, (long long)a);
        /*
         * Grouped-query attention: the key/value heads split too (Megatron-LM
         * and torchtitan give each rank whole key/value heads and refuse a tp
         * that does not divide them). Every [b, s, heads, d] view of a
         * column-parallel projection: the query's, the keys' and values' (not
         * a replicated one, such as MLA's one rotary key all heads share).
         */
        for (uint32_t i = 0; i < r->nop; i++) {
            ir_id o = r->ops[i], in, d;
            int64_t k;
            if (m->ops[o].kind != IR_OP_RESHAPE || c->op[o].tp != XF_TP_HEADS ||
                c->op[o].phase != XF_PH_FORWARD || m->ops[o].ninput < 1 ||
                m->types[m->values[m->ops[o].outputs].type].rank != 4)
                continue;
            in = ir_op_input(m, o, 0);
            d = m->values[in].def;
            if (m->types[m->values[in].type].rank != 3 || d == 0 || c->op[d].tp != XF_TP_COLUMN)
                continue;
            k = ir_type_dims(m, m->values[m->ops[o].outputs].type)[2];
            if (k % tp != 0)
                return di_error_set(c->err, DI_ESTRATEGY,
                                    "%stp=%u does not divide the %lld key/value heads",
                                    xf_stage_prefix(c, g, pre, sizeof pre), tp, (long long)k);
        }
    }
    if (c->s.sequence_parallel) {
        const ir_region *r = &m->regions[c->func];
        for (uint32_t i = 0; i < r->nop; i++) {
            ir_id o = r->ops[i];
            const ir_type *t;
            int64_t len;
            if (c->op[o].seq < 0 || m->ops[o].noutput == 0)
                continue;
            t = &m->types[m->values[m->ops[o].outputs].type];
            if (t->rank <= (uint32_t)c->op[o].seq)
                continue;
            len = ir_type_dims(m, m->values[m->ops[o].outputs].type)[c->op[o].seq];
            if (len % tp)
                return di_error_set(c->err, DI_ESTRATEGY,
                                    "%stp=%u does not divide the sequence length %lld",
                                    xf_stage_prefix(c, g, pre, sizeof pre), tp, (long long)len);
        }
    }
    return 0;
}

static int
validate(xf_ctx *c)
{
    const strategy *s = &c->s;
    uint64_t ndev = c->ndev;
    const char *what = c->hetero         ? "the stages' dp*tp"
                       : c->n[XF_CP] > 1 ? "dp*cp*tp*pp"
                                         : "dp*tp*pp";
    char pre[32];
    ir_id op = 0;
    int rc;

    /* The degrees themselves are within range (strategy_check_values in xf_ctx_init). */
    if (ndev > STRATEGY_MAX_DEGREE)
        return di_error_set(c->err, DI_ESTRATEGY, "%s = %llu devices is too many", what,
                            (unsigned long long)ndev);
    if (xform_cost_known(&c->cost) && ndev > c->cost.ndevice)
        return di_error_set(c->err, DI_ESTRATEGY, "%s = %llu exceeds the %u devices of %s", what,
                            (unsigned long long)ndev, c->cost.ndevice, c->cost.name);
    if (s->ndevice_order) {
        uint8_t *seen;
        if (s->ndevice_order != ndev)
            return di_error_set(c->err, DI_ESTRATEGY,
                                "the device order lists %u devices, but %s = %llu",
                                s->ndevice_order, what, (unsigned long long)ndev);
        seen = di_xcalloc(1u << 20, 1);
        for (uint32_t i = 0; i < s->ndevice_order; i++) {
            uint32_t d = s->device_order[i];
            if (d >= (1u << 20) || (xform_cost_known(&c->cost) && d >= c->cost.ndevice) ||
                seen[d]) {
                int twice = d < (1u << 20) && seen[d];
                di_free(seen);
                return di_error_set(c->err, DI_ESTRATEGY,
                                    "device order entry %u (device %u) is %s", i, d,
                                    twice ? "listed twice" : "not a device of the hardware");
            }
            seen[d] = 1;
        }
        di_free(seen);
    }
    /* A hand-built strategy may skip strategy_normalize, which refuses these. */
    if (s->order != STRATEGY_ORDER_TP_DP_PP && (s->ndevice_order || c->hetero || s->nstages))
        return di_error_set(c->err, DI_ESTRATEGY,
                            "order=tp-pp-dp needs the same degrees on every stage and no "
                            "device order");
    if (s->schedule == STRATEGY_SCHEDULE_INTERLEAVED && s->pp > 1 && s->virtual_stages > 1 &&
        s->microbatches % s->pp != 0)
        return di_error_set(c->err, DI_ESTRATEGY,
                            "the interleaved schedule needs the microbatches (%u) to be a "
                            "multiple of pp=%u",
                            s->microbatches, s->pp);
    if (s->microbatches > STRATEGY_MAX_MICROBATCHES) /* 0 read as pp */
        return di_error_set(c->err, DI_ESTRATEGY, "microbatches=%u is out of range (1 to %u)",
                            s->microbatches, STRATEGY_MAX_MICROBATCHES);
    if ((rc = tp_layers_init(c)) != 0)
        return rc;
    if (c->n[XF_CP] > 1) {
        const ir_region *fr = &c->m->regions[c->func];
        uint32_t ndata = 0;
        if (c->hetero || s->nstages)
            return di_error_set(c->err, DI_ESTRATEGY,
                                "cp=%u needs the same degrees on every pipeline stage",
                                c->n[XF_CP]);
        for (uint32_t a = 0; a < fr->narg; a++) {
            ir_id v = fr->args[a];
            const ir_type *t = &c->m->types[c->m->values[v].type];
            if (!(c->vflags[v] & XF_V_DATA))
                continue;
            ndata++;
            if (t->rank < 2)
                return di_error_set(c->err, DI_ESTRATEGY,
                                    "cp=%u splits the sequence (dimension 1) of the batch data, "
                                    "and %%%s has no dimension 1",
                                    c->n[XF_CP], ir_str_get(c->m, c->m->values[v].name));
            if (ir_type_dims(c->m, c->m->values[v].type)[1] % c->n[XF_CP] != 0)
                return di_error_set(c->err, DI_ESTRATEGY,
                                    "cp=%u does not divide the sequence length %lld", c->n[XF_CP],
                                    (long long)ir_type_dims(c->m, c->m->values[v].type)[1]);
        }
        if (ndata == 0)
            return di_error_set(c->err, DI_ESTRATEGY,
                                "cp=%u splits the sequence of the batch data, and the module has "
                                "none",
                                c->n[XF_CP]);
    }
    if (s->ep > 1) {
        int64_t experts = xf_expert_weights(c, NULL);
        if (experts == 0)
            return di_error_set(c->err, DI_ESTRATEGY,
                                "ep=%u splits experts and the module has none (no MoE layer)",
                                s->ep);
        if (experts % s->ep != 0)
            return di_error_set(c->err, DI_ESTRATEGY, "ep=%u does not divide the %lld experts",
                                s->ep, (long long)experts);
        if (c->hetero)
            return di_error_set(c->err, DI_ESTRATEGY,
                                "ep=%u needs the same dp on every pipeline stage", s->ep);
        if (s->dp % s->ep != 0)
            return di_error_set(c->err, DI_ESTRATEGY,
                                "ep=%u does not divide dp=%u (expert parallelism splits the "
                                "data-parallel group)",
                                s->ep, s->dp);
    }
    if (c->tplayer && s->sequence_parallel)
        return di_error_set(c->err, DI_ESTRATEGY,
                            "sequence parallelism needs tensor parallelism on every layer "
                            "(tp_layers is set)");

    /* Batch, and tensor parallelism, per group (once when the groups are alike). */
    for (uint32_t g = 0; g < (c->hetero ? c->pp : 1); g++) {
        uint32_t dp = xf_gdata(c, g);
        if (c->batch < 0 && (dp > 1 || s->microbatches > 1))
            return di_error_set(c->err, DI_ESTRATEGY,
                                "the module has no batch-data argument (tokens, labels, x, ...) "
                                "to split over dp=%u x microbatches=%u",
                                dp, s->microbatches);
        if (c->batch >= 0 && c->batch % dp != 0)
            return di_error_set(c->err, DI_ESTRATEGY, "%sdp=%u does not divide the batch %lld",
                                xf_stage_prefix(c, g, pre, sizeof pre), dp, (long long)c->batch);
        if (c->batch >= 0 && c->batch % ((int64_t)dp * s->microbatches) != 0)
            return di_error_set(c->err, DI_ESTRATEGY,
                                "%sdp x microbatches = %u x %u = %llu does not divide the batch "
                                "%lld",
                                xf_stage_prefix(c, g, pre, sizeof pre), dp, s->microbatches,
                                (unsigned long long)dp * s->microbatches, (long long)c->batch);
        if (c->gtp[g] > 1 && (rc = validate_tp(c, g)) != 0)
            return rc;
    }

    /* Pipeline: layers. */
    if (c->K > 1) {
        if (c->nlayer == 0)
            return di_error_set(c->err, DI_ESTRATEGY,
                                "pp=%u needs dist.layer annotations and the module has none",
                                s->pp);
        if (s->nstages > 0 && s->stages[0].layers > 0) {
            uint64_t sum = 0;
            for (uint32_t g = 0; g < s->nstages; g++)
                sum += s->stages[g].layers;
            if (sum != c->nlayer)
                return di_error_set(c->err, DI_ESTRATEGY,
                                    "the stages' layer counts add up to %llu, but the module has "
                                    "%u layers",
                                    (unsigned long long)sum, c->nlayer);
        } else if (c->nlayer < c->K) {
            /*
             * Per-stage degrees, or pp x V not dividing the layers (Llama-3.1-405B's 126
             * layers on pp 16, interleaved or not): stages balanced by cost (stages.c), not
             * equal counts, as Megatron-LM's first/last-stage layer counts and DeepSpeed's
             * partitioning do. At least a layer per model stage.
             */
            if (c->V > 1)
                return di_error_set(c->err, DI_ESTRATEGY,
                                    "pp x virtual stages = %u x %u = %u model stages need at "
                                    "least as many layers (the module has %u)",
                                    c->pp, c->V, c->K, c->nlayer);
            return di_error_set(c->err, DI_ESTRATEGY,
                                "%u model stages need at least as many layers (the module "
                                "has %u)",
                                c->K, c->nlayer);
        }
    }
    (void)op;
    return 0;
}

/* Per-group degrees and first ranks (xf_ctx); the largest degree of each axis. */
static void
groups_init(xf_ctx *c)
{
    c->n[XF_MB] = c->s.microbatches;
    c->n[XF_CP] = c->s.cp > 1 ? c->s.cp : 1;
    /*
     * Expert parallelism over part of the data group: the data ranks as
     * (outer, inner) = (dp / ep, ep), experts split on the inner axis
     * (Megatron-LM's expert group: ep consecutive data ranks).
     */
    c->n[XF_EDP] = 1;
    if (c->s.ep > 1 && c->s.ep < c->s.dp && c->s.dp % c->s.ep == 0 && c->s.nstages == 0)
        c->n[XF_EDP] = c->s.dp / c->s.ep;
    c->m_emit = c->s.microbatches;
    c->gdp = di_xmalloc(c->pp * sizeof *c->gdp);
    c->gtp = di_xmalloc(c->pp * sizeof *c->gtp);
    c->goff = di_xmalloc(c->pp * sizeof *c->goff);
    for (uint32_t g = 0; g < c->pp; g++) {
        const strategy_stage *st = c->s.nstages ? &c->s.stages[g] : NULL;
        c->gdp[g] = st ? (st->dp ? st->dp : 1) : c->s.dp / c->n[XF_EDP];
        c->gtp[g] = st ? (st->tp ? st->tp : 1) : c->s.tp;
        c->goff[g] = (uint32_t)c->ndev;
        c->ndev += (uint64_t)xf_gdev(c, g);
        if (c->gdp[g] > c->n[XF_DP])
            c->n[XF_DP] = c->gdp[g];
        if (c->gtp[g] > c->n[XF_TP])
            c->n[XF_TP] = c->gtp[g];
        if (c->gdp[g] != c->gdp[0] || c->gtp[g] != c->gtp[0])
            c->hetero = 1;
    }
}

/* The strategy's part of a context: checked, its defaults resolved (before the module). */
static int
ctx_strategy(xf_ctx *c, const strategy *s, const hw_model *hw, di_error *err)
{
    int rc;
    memset(c, 0, sizeof *c);
    c->err = err;
    /* Hand-built strategies are not normalized: the checks that need no module come first. */
    if ((rc = strategy_check_values(s, err)) != 0)
        return rc;
    c->s = *s;
    xform_cost_init(&c->cost, hw);
    if (c->s.dp == 0)
        c->s.dp = 1;
    if (c->s.tp == 0)
        c->s.tp = 1;
    if (c->s.pp == 0)
        c->s.pp = c->s.nstages ? c->s.nstages : 1;
    if (c->s.virtual_stages == 0)
        c->s.virtual_stages = 1;
    if (c->s.microbatches == 0)
        c->s.microbatches = c->s.pp;
    if (c->s.schedule == STRATEGY_SCHEDULE_DEFAULT)
        c->s.schedule = STRATEGY_SCHEDULE_1F1B;
    if (c->s.schedule != STRATEGY_SCHEDULE_INTERLEAVED)
        c->s.virtual_stages = 1;
    if (c->s.nstages > 0 && (rc = stages_init(c)) != 0)
        return rc;
    c->pp = c->s.pp;
    c->V = c->pp > 1 ? c->s.virtual_stages : 1;
    c->K = c->pp * c->V;
    return 0;
}

/* The groups, validation, ring attention: what follows the module's analysis. */
static int
ctx_finish(xf_ctx *c)
{
    int rc;
    groups_init(c);
    if ((rc = validate(c)) != 0) {
        xf_ctx_fini(c);
        return rc;
    }
    if (c->n[XF_CP] > 1) {
        const ir_region *fr = &c->m->regions[c->func];
        for (uint32_t i = 0; i < fr->nop && !c->ring; i++)
            c->ring = c->m->ops[fr->ops[i]].kind == IR_OP_FLASHATTN;
    }
    return 0;
}

int
xf_ctx_init(xf_ctx *c, const ir_module *m, const strategy *s, const hw_model *hw,
            di_error *err)
{
    ir_id f;
    int rc;
    if ((rc = ctx_strategy(c, s, hw, err)) != 0)
        return rc;
    f = ir_module_entry(m);
    if (f == 0)
        return di_error_set(err, DI_EINVAL, "the module has no function to transform");
    c->m = m;
    c->func = f;
    if (forward_only(m, f)) {
        const ir_region *r = &m->regions[f];
        ir_id loss;
        const ir_type *t;
        if (r->nresult != 1)
            return di_error_set(err, DI_EUNSUPPORTED,
                                "a forward-only module must return one scalar loss (it returns "
                                "%u values)",
                                r->nresult);
        loss = r->results[0];
        t = &m->types[m->values[loss].type];
        if (t->kind != IR_TYPE_TENSOR || ir_type_numel(m, m->values[loss].type) != 1 ||
            !ir_dtype_is_float((ir_dtype)t->dtype))
            return di_error_set(err, DI_EUNSUPPORTED,
                                "a forward-only module must return one scalar floating-point "
                                "loss");
        c->owned = ir_module_clone(m);
        rc = xform_autodiff(c->owned, f, loss, NULL, err);
        if (rc != 0) {
            di_error_prefix(err, "before the strategy");
            xf_ctx_fini(c);
            return rc;
        }
        c->m = c->owned;
    }
    if ((rc = analyze(c)) != 0) {
        xf_ctx_fini(c);
        return rc;
    }
    return ctx_finish(c);
}

/*
 * A context from a's analysis: borrowed (read only: validation writes none
 * of vflags, op, layers) or with copies of them (the transforms write them:
 * recomputation, phases, expert values). The module stays a's either way.
 */
static int
ctx_from_analysis(xf_ctx *c, const xform_analysis *a, const strategy *s, const hw_model *hw,
                  int copy, di_error *err)
{
    const ir_module *m = a->c.m;
    int rc;
    if ((rc = ctx_strategy(c, s, hw, err)) != 0)
        return rc;
    c->m = m;
    c->func = a->c.func;
    c->batch = a->c.batch;
    c->nlayer = a->c.nlayer;
    if (!copy) {
        c->borrowed = 1;
        c->vflags = a->c.vflags;
        c->op = a->c.op;
        c->layers = a->c.layers;
        return ctx_finish(c);
    }
    c->vflags = di_xmalloc(m->nvalue ? m->nvalue : 1);
    memcpy(c->vflags, a->c.vflags, m->nvalue);
    c->op = di_xmalloc((m->nop ? m->nop : 1) * sizeof *c->op);
    memcpy(c->op, a->c.op, m->nop * sizeof *c->op);
    c->layers = di_xmalloc((a->c.nlayer ? a->c.nlayer : 1) * sizeof *c->layers);
    memcpy(c->layers, a->c.layers, a->c.nlayer * sizeof *c->layers);
    return ctx_finish(c);
}

int
xf_ctx_init_analyzed(xf_ctx *c, const xform_analysis *a, const strategy *s,
                     const hw_model *hw, di_error *err)
{
    return ctx_from_analysis(c, a, s, hw, 0, err);
}

int
xf_ctx_init_copied(xf_ctx *c, const xform_analysis *a, const strategy *s, const hw_model *hw,
                   di_error *err)
{
    return ctx_from_analysis(c, a, s, hw, 1, err);
}

void
xf_ctx_fini(xf_ctx *c)
{
    if (!c->borrowed) {
        di_free(c->vflags);
        di_free(c->op);
        di_free(c->layers);
        ir_module_free(c->owned);
    }
    di_free(c->layer_stage);
    di_free(c->gdp);
    di_free(c->gtp);
    di_free(c->goff);
    di_free(c->tplayer);
    di_free(c->place);
    di_free(c->req);
    di_free(c->rreq);
    memset(c, 0, sizeof *c);
}

int
xform_validate(const ir_module *m, const strategy *s, const hw_model *hw, di_error *err)
{
    xf_ctx c;
    int rc = xf_ctx_init(&c, m, s, hw, err);
    if (rc != 0)
        return rc;
    xf_ctx_fini(&c);
    return 0;
}

int
xform_analysis_new(const ir_module *m, xform_analysis **out, di_error *err)
{
    strategy trivial;
    xform_analysis *a = di_xcalloc(1, sizeof *a);
    int rc;
    xform_strategy_init(&trivial);
    if ((rc = xf_ctx_init(&a->c, m, &trivial, NULL, err)) != 0) {
        di_free(a);
        *out = NULL;
        return rc;
    }
    *out = a;
    return 0;
}

void
xform_analysis_free(xform_analysis *a)
{
    if (a == NULL)
        return;
    xf_ctx_fini(&a->c);
    di_free(a);
}

int
xform_validate_analyzed(const xform_analysis *a, const strategy *s, const hw_model *hw,
                        di_error *err)
{
    xf_ctx c;
    int rc = xf_ctx_init_analyzed(&c, a, s, hw, err);
    if (rc != 0)
        return rc;
    xf_ctx_fini(&c);
    return 0;
}

/* The value whose storage v shares (through views and plumbing), or v. */
static ir_id
storage_of(const xf_ctx *c, ir_id v)
{
    const ir_module *m = c->m;
    for (uint32_t depth = 0; depth < 1u << 16; depth++) {
        ir_id d = m->values[v].def;
        if (d == 0 || m->ops[d].ninput == 0 ||
            !(ir_opkind_info(m->ops[d].kind)->flags & IR_OPF_FREE))
            return v;
        v = m->refs[m->ops[d].inputs];
    }
    return v;
}

static int
cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static void
sort_u64(uint64_t *v, uint32_t n)
{
    if (n > 1)
        qsort(v, n, sizeof *v, cmp_u64);
}

/*
 * The bytes of v on one device: its type's, divided by the tensor
 * parallelism when c's placements (after propagation; NULL before) split it
 * over the tensor axis.
 */
static uint64_t
device_bytes(const xf_ctx *c, ir_id v)
{
    uint64_t b = ir_type_bytes(c->m, c->m->values[v].type);
    if (c->place != NULL && c->place[v].a[XF_TP] >= 0 && c->n[XF_TP] > 1)
        b /= c->n[XF_TP];
    return b;
}

/* Adds b to layer index li's figure of mode r (0 none, 1 selective, 2 full). */
static void
layer_add(uint64_t *per, uint32_t nlayer, int32_t li, int r, uint64_t b)
{
    if (li >= 0 && (uint32_t)li < nlayer)
        per[(size_t)r * nlayer + (uint32_t)li] += b;
}

/*
 * xform_model_facts.saved_min. c's recompute marks are set (selective).
 * With head, into *head the bytes per device (whole batch) that the forward
 * ops after the last layer's keep for the backward (a value one of them
 * makes and a backward op reads, not recomputed: the final norm's output,
 * the logits, the vocabulary-parallel cross-entropy's softmax), and into
 * *embed those the forward ops before the first layer's keep that no op of
 * a layer reads (the embedding dropout's mask; not its output, the first
 * layer's input, which the layers' figures count); 0 without layers.
 */
static void
saved_min(xf_ctx *c, uint64_t out[3], uint64_t *head, uint64_t *embed)
{
    const ir_module *m = c->m;
    const ir_region *r = &m->regions[c->func];
    uint32_t L = c->nlayer;
    uint64_t *per = di_xcalloc(3 * (size_t)(L ? L : 1), sizeof *per);
    uint8_t *seen = di_xcalloc(m->nvalue ? m->nvalue : 1, 1); /* counted for the backward */
    uint8_t *after = di_xcalloc(m->nop ? m->nop : 1, 1);     /* a forward op after a layer's */
    uint64_t *pairs = NULL;                                  /* (value << 32 | layer) inputs */
    uint32_t npair = 0, cpair = 0;
    uint8_t *in_layer = NULL; /* with embed: read by an op of a layer */
    int seen_layer = 0;
    memset(out, 0, 3 * sizeof *out);
    if (head != NULL)
        *head = 0;
    if (embed != NULL) {
        *embed = 0;
        in_layer = di_xcalloc(m->nvalue ? m->nvalue : 1, 1);
        for (uint32_t i = 0; i < r->nop; i++) {
            const ir_op *o = &m->ops[r->ops[i]];
            if (c->op[r->ops[i]].layer >= 0)
                for (uint32_t k = 0; k < o->ninput; k++)
                    in_layer[storage_of(c, m->refs[o->inputs + k])] = 1;
        }
    }
    xf_recompute_mark(c);
    for (uint32_t i = 0; i < r->nop && L > 0; i++) {
        ir_id op = r->ops[i];
        const ir_op *o = &m->ops[op];
        const xf_opinfo *oi = &c->op[op];
        if (oi->phase == XF_PH_FORWARD) {
            seen_layer |= oi->layer >= 0;
            after[op] = (uint8_t)seen_layer;
        }
        for (uint32_t k = 0; k < o->ninput; k++) {
            ir_id v = storage_of(c, m->refs[o->inputs + k]), d = m->values[v].def;
            uint64_t b;
            if (d == 0 || (ir_opkind_info(m->ops[d].kind)->flags & IR_OPF_FREE) ||
                c->op[d].phase != XF_PH_FORWARD)
                continue;
            b = device_bytes(c, v);
            if (oi->phase == XF_PH_BACKWARD && c->op[d].layer < 0 && after[d] && !seen[v] &&
                !c->op[d].recompute && head != NULL) {
                seen[v] = 1;
                *head += b;
            }
            if (oi->phase == XF_PH_BACKWARD && c->op[d].layer < 0 && !after[d] && !seen[v] &&
                !c->op[d].recompute && embed != NULL && !in_layer[v]) {
                seen[v] = 1;
                *embed += b;
            }
            if (oi->phase == XF_PH_BACKWARD && c->op[d].layer >= 0 && !seen[v]) {
                int32_t li = xf_layer_index(c, c->op[d].layer);
                seen[v] = 1;
                layer_add(per, L, li, 0, b);
                if (!c->op[d].recompute)
                    layer_add(per, L, li, 1, b);
            }
            /* A layer's input from outside it: its checkpoint under full recomputation. */
            if (oi->phase == XF_PH_FORWARD && oi->layer >= 0 && c->op[d].layer != oi->layer) {
                int32_t li = xf_layer_index(c, oi->layer);
                if (li >= 0) {
                    DI_GROW(&pairs, &cpair, npair + 1);
                    pairs[npair++] = (uint64_t)v << 32 | (uint32_t)li;
                }
            }
        }
    }
    /* Each (value, layer) once. */
    sort_u64(pairs, npair);
    for (uint32_t i = 0; i < npair; i++)
        if (i == 0 || pairs[i] != pairs[i - 1])
            layer_add(per, L, (int32_t)(uint32_t)pairs[i], 2,
                      device_bytes(c, (ir_id)(pairs[i] >> 32)));
    for (int k = 0; k < 3 && L > 0; k++) {
        out[k] = per[(size_t)k * L];
        for (uint32_t l = 1; l < L; l++)
            if (per[(size_t)k * L + l] < out[k])
                out[k] = per[(size_t)k * L + l];
    }
    di_free(per);
    di_free(seen);
    di_free(after);
    di_free(pairs);
    di_free(in_layer);
}

/*
 * Bytes per device of the gradient that optimizer update op (SGD(w, dw),
 * Adam(w, dw, m, v)) reads, as the microbatches accumulate it and the
 * data-parallel reduction carries it: where the update's input is a cast of
 * the step phase (mixed precision with 16-bit accumulation, autodiff.c), the
 * value it casts; the fewer bytes of the two.
 */
static uint64_t
grad_bytes(const xf_ctx *c, ir_id op)
{
    const ir_module *m = c->m;
    ir_id v = storage_of(c, m->refs[m->ops[op].inputs + 1]), d = m->values[v].def;
    uint64_t b = device_bytes(c, v);
    while (d != 0 && m->ops[d].kind == IR_OP_CAST && c->op[d].phase == XF_PH_STEP &&
           m->ops[d].ninput == 1) {
        v = storage_of(c, m->refs[m->ops[d].inputs]);
        d = m->values[v].def;
        if (device_bytes(c, v) < b)
            b = device_bytes(c, v);
    }
    return b;
}

/*
 * xform_model_facts.state_min, into *param_least the least over the layers
 * of a layer's parameters alone (the weights its forward ops read), and into
 * *grad_least the least of a layer's gradients (grad_bytes: the accumulation
 * buffers). A weight belongs to the layer whose forward op reads it first;
 * one no layer's forward op reads, to the edge whose forward op reads it
 * first (before the first layer's forward: the embedding's, after: the
 * final norm's and the head's); the other arguments of its update (moments,
 * master weights) go with it. With f, the edges' state, parameters and
 * gradients per device into f->edge_state, edge_param and edge_grad ([0]
 * before, [1] after; 0 without layers).
 */
/*
 * The bytes of the contributions an update's gradient sums (xform_layer_facts.
 * edge_grad_parts): its gradient (input 1), through Casts, made by an Add of
 * two values backward ops make; 0 when it is not.
 */
static uint64_t
summed_parts(const xf_ctx *c, ir_id op)
{
    const ir_module *m = c->m;
    ir_id v = storage_of(c, m->refs[m->ops[op].inputs + 1]), d = m->values[v].def;
    uint64_t b = 0;
    while (d != 0 && m->ops[d].kind == IR_OP_CAST && m->ops[d].ninput == 1) {
        v = storage_of(c, m->refs[m->ops[d].inputs]);
        d = m->values[v].def;
    }
    if (d == 0 || m->ops[d].kind != IR_OP_ADD || m->ops[d].ninput != 2)
        return 0;
    for (uint32_t k = 0; k < 2; k++) {
        ir_id in = storage_of(c, m->refs[m->ops[d].inputs + k]), dk = m->values[in].def;
        /* Contributions: values backward ops make (not a weight, nor a constant). */
        if ((c->vflags[in] & XF_V_CONST) || dk == 0 || c->op[dk].phase != XF_PH_BACKWARD)
            return 0;
        b += device_bytes(c, in);
    }
    return b;
}

static uint64_t
state_min(const xf_ctx *c, uint64_t *param_least, uint64_t *grad_least, xform_layer_facts *f)
{
    const ir_module *m = c->m;
    const ir_region *r = &m->regions[c->func];
    uint32_t L = c->nlayer, S = L + 2; /* slots: the layers, then the two edges */
    int32_t *slot = di_xmalloc((m->nvalue ? m->nvalue : 1) * sizeof *slot);
    uint8_t *param = di_xcalloc(m->nvalue ? m->nvalue : 1, 1);
    uint64_t *per = di_xcalloc(3 * (size_t)S, sizeof *per), least = 0;
    uint64_t summed[2] = {0, 0}, parts[2] = {0, 0}; /* per edge: edge_grad_summed, _parts */
    int seen_layer = 0;
    for (uint32_t v = 0; v < m->nvalue; v++)
        slot[v] = -1;
    for (uint32_t i = 0; i < r->nop; i++) {
        const ir_op *o = &m->ops[r->ops[i]];
        const xf_opinfo *oi = &c->op[r->ops[i]];
        int32_t to = oi->layer >= 0 ? xf_layer_index(c, oi->layer) : (int32_t)L + seen_layer;
        if (oi->phase != XF_PH_FORWARD)
            continue;
        seen_layer |= oi->layer >= 0;
        for (uint32_t k = 0; k < o->ninput; k++) {
            ir_id v = storage_of(c, m->refs[o->inputs + k]);
            if (m->values[v].def != 0 || !(c->vflags[v] & XF_V_WEIGHT))
                continue;
            /* A layer's reader takes it from an edge; an edge's only an unread one. */
            if (slot[v] < 0 || (oi->layer >= 0 && slot[v] >= (int32_t)L)) {
                slot[v] = to;
                param[v] = 1;
            }
        }
    }
    for (uint32_t i = 0; i < r->nop; i++) {
        const ir_op *o = &m->ops[r->ops[i]];
        int32_t si = -1;
        if (!(ir_opkind_info(o->kind)->flags & IR_OPF_OPTIM))
            continue;
        for (uint32_t k = 0; k < o->ninput && si < 0; k++)
            si = slot[storage_of(c, m->refs[o->inputs + k])];
        for (uint32_t k = 0; k < o->ninput && si >= 0; k++) {
            ir_id v = storage_of(c, m->refs[o->inputs + k]);
            if (m->values[v].def == 0 && (c->vflags[v] & XF_V_WEIGHT) && slot[v] < 0)
                slot[v] = si;
        }
        if (si >= 0 && (uint32_t)si < S && o->ninput > 1) {
            uint64_t g = grad_bytes(c, r->ops[i]), p;
            per[2 * (size_t)S + (uint32_t)si] += g;
            if ((uint32_t)si >= L && (p = summed_parts(c, r->ops[i])) > 0) {
                summed[(uint32_t)si - L] += g;
                parts[(uint32_t)si - L] += p;
            }
        }
    }
    for (uint32_t a = 0; a < r->narg; a++) {
        ir_id v = r->args[a];
        if (slot[v] >= 0 && (uint32_t)slot[v] < S) {
            per[slot[v]] += device_bytes(c, v);
            if (param[v])
                per[S + (uint32_t)slot[v]] += device_bytes(c, v);
        }
    }
    *param_least = *grad_least = 0;
    for (uint32_t l = 0; l < L; l++) {
        if (l == 0 || per[l] < least)
            least = per[l];
        if (l == 0 || per[S + l] < *param_least)
            *param_least = per[S + l];
        if (l == 0 || per[2 * (size_t)S + l] < *grad_least)
            *grad_least = per[2 * (size_t)S + l];
    }
    for (uint32_t e = 0; f != NULL && e < 2; e++) {
        f->edge_state[e] = seen_layer ? per[L + e] : 0;
        f->edge_param[e] = seen_layer ? per[S + L + e] : 0;
        f->edge_grad[e] = seen_layer ? per[2 * (size_t)S + L + e] : 0;
        f->edge_grad_summed[e] = seen_layer ? summed[e] : 0;
        f->edge_grad_parts[e] = seen_layer ? parts[e] : 0;
    }
    di_free(slot);
    di_free(param);
    di_free(per);
    return least;
}

int
xform_model_facts_init(xform_model_facts *f, const ir_module *m, di_error *err)
{
    strategy trivial;
    xf_ctx c;
    const ir_region *r;
    ir_id heads, col;
    uint8_t *expert;
    int rc, no_seq = 0;

    memset(f, 0, sizeof *f);
    xform_strategy_init(&trivial);
    if ((rc = xf_ctx_init(&c, m, &trivial, NULL, err)) != 0)
        return rc;
    f->batch = c.batch;
    f->layers = c.nlayer;
    /* The same ops validate_tp reads. */
    heads = find_op(&c, IR_OP_RESHAPE, XF_TP_HEADS, 4);
    col = find_op(&c, IR_OP_MATMUL, XF_TP_COLUMN, 0);
    if (heads)
        f->heads = ir_type_dims(c.m, c.m->values[c.m->ops[heads].outputs].type)[2];
    if (col) {
        const int64_t *wd = ir_type_dims(c.m, c.m->values[ir_op_input(c.m, col, 1)].type);
        f->hidden = heads ? wd[0] : wd[1];
    }
    r = &c.m->regions[c.func];
    saved_min(&c, f->saved_min, NULL, NULL);
    for (uint32_t i = 0; i < r->nop; i++) {
        ir_id o = r->ops[i];
        f->selective_ops += c.op[o].recompute; /* saved_min set the selective marks */
        f->sequence_ops += c.op[o].seq >= 0 || xf_token_gather(&c, o);
    }
    f->state_min = state_min(&c, &f->param_min, &f->grad_min, NULL);
    f->nargs = r->narg;
    f->arg_kind = di_xcalloc(r->narg ? r->narg : 1, sizeof *f->arg_kind);
    expert = di_xcalloc(c.m->nvalue ? c.m->nvalue : 1, 1);
    f->experts = xf_expert_state(&c, expert);
    for (uint32_t a = 0; a < r->narg; a++) {
        ir_id v = r->args[a];
        uint64_t bytes = ir_type_bytes(c.m, c.m->values[v].type);
        if (expert[v])
            f->expert_bytes += bytes;
        if (c.vflags[v] & XF_V_DATA) {
            const ir_type *t = &c.m->types[c.m->values[v].type];
            f->arg_kind[a] = XFORM_ARG_DATA;
            f->data_bytes += bytes;
            if (t->rank >= 2 && f->seq == 0)
                f->seq = ir_type_dims(c.m, c.m->values[v].type)[1];
            no_seq |= t->rank < 2;
        } else if (c.vflags[v] & XF_V_WEIGHT) {
            f->arg_kind[a] = XFORM_ARG_WEIGHT;
            f->weight_bytes += bytes;
        }
    }
    /*
     * cp splits dimension 1 of every batch datum (xform_validate): a datum without one (an
     * MLP's labels [batch]) leaves the module no sequence, whatever the others' dimension 1
     * (the MLP's features).
     */
    if (no_seq)
        f->seq = 0;
    di_free(expert);
    xf_ctx_fini(&c);
    return 0;
}

/*
 * The analysis passes of xform_apply (apply.c) into c, without building the
 * module: stages, tensor and data placements, propagation. On failure c is
 * finalized.
 */
static int
analyse(xf_ctx *c, const ir_module *m, const strategy *s, const hw_model *hw, di_error *err)
{
    size_t nplace;
    int rc;
    if ((rc = xf_ctx_init(c, m, s, hw, err)) != 0)
        return rc;
    nplace = c->m->nvalue ? c->m->nvalue : 1;
    c->place = di_xmalloc(nplace * sizeof *c->place);
    memset(c->place, XF_R, nplace * sizeof *c->place);
    if ((rc = xf_assign_stages(c)) == 0 && (rc = xf_annotate_tp(c)) == 0 &&
        (rc = xf_annotate_dp(c)) == 0 && (rc = xf_propagate(c)) == 0)
        return 0;
    xf_ctx_fini(c);
    return rc;
}

/*
 * xform_layer_facts.params. full: per op, whether full recomputation repeats
 * it (layer_work), or NULL.
 */
static void
layer_params(const xf_ctx *c, const uint8_t *full, xform_layer_param **out, uint32_t *n)
{
    const ir_region *r = &c->m->regions[c->func];
    uint8_t *seen = di_xcalloc(c->m->nvalue ? c->m->nvalue : 1, 1);
    uint64_t *grad = di_xcalloc(c->m->nvalue ? c->m->nvalue : 1, sizeof *grad);
    uint8_t *bwd = di_xcalloc(c->m->nvalue ? c->m->nvalue : 1, 1);
    uint32_t cap = 0;
    *out = NULL;
    *n = 0;
    /* The weights a backward op reads (bits 0 and 1) or a forward op full recomputation
       repeats (bit 1). */
    for (uint32_t i = 0; i < r->nop; i++) {
        const ir_op *o = &c->m->ops[r->ops[i]];
        uint8_t b = c->op[r->ops[i]].phase == XF_PH_BACKWARD ? 3 : full && full[r->ops[i]] ? 2 : 0;
        for (uint32_t k = 0; b && k < o->ninput; k++)
            bwd[storage_of(c, c->m->refs[o->inputs + k])] |= b;
    }
    /* SGD(w, dw) and Adam(w, dw, m, v): w's gradient as it is accumulated and reduced. */
    for (uint32_t i = 0; i < r->nop; i++) {
        const ir_op *o = &c->m->ops[r->ops[i]];
        if ((ir_opkind_info(o->kind)->flags & IR_OPF_OPTIM) && o->ninput > 1)
            grad[storage_of(c, c->m->refs[o->inputs])] = grad_bytes(c, r->ops[i]);
    }
    /* A layer's parameters: the weight arguments its forward ops read (as state_min). */
    for (uint32_t i = 0; i < r->nop; i++) {
        const ir_op *o = &c->m->ops[r->ops[i]];
        const xf_opinfo *oi = &c->op[r->ops[i]];
        if (oi->phase != XF_PH_FORWARD || oi->layer < 0)
            continue;
        for (uint32_t k = 0; k < o->ninput; k++) {
            ir_id v = storage_of(c, c->m->refs[o->inputs + k]);
            int64_t dims[IR_MAX_RANK];
            xform_layer_param *p;
            if (c->m->values[v].def != 0 || !(c->vflags[v] & XF_V_WEIGHT) || seen[v])
                continue;
            seen[v] = 1;
            DI_GROW(out, &cap, *n + 1);
            p = &(*out)[(*n)++];
            p->layer = (uint32_t)xf_layer_index(c, oi->layer);
            p->bytes = device_bytes(c, v);
            p->grad_bytes = grad[v];
            p->bwd = bwd[v] & 1;
            p->full = (bwd[v] & 2) != 0;
            p->rank = 0;
            p->tp_dim = XF_IS_S(c->place[v].a[XF_TP]) ? c->place[v].a[XF_TP] : -1;
            if (xf_local_dims(c, v, &c->place[v], c->n, dims) == 0) {
                p->rank = c->m->types[c->m->values[v].type].rank;
                memcpy(p->dims, dims, p->rank * sizeof *dims);
            }
        }
    }
    di_free(seen);
    di_free(grad);
    di_free(bwd);
}

/* Does op's work divide over the tensor axis (an input it needs or a result split there)? */
static int
tp_divides(const xf_ctx *c, ir_id op)
{
    const ir_op *o = &c->m->ops[op];
    if (c->n[XF_TP] <= 1)
        return 0;
    for (uint32_t k = 0; k < o->ninput; k++)
        if (c->req[o->inputs + k].a[XF_TP] >= 0)
            return 1;
    for (uint32_t i = 0; i < o->noutput; i++)
        if (c->place[o->outputs + i].a[XF_TP] >= 0)
            return 1;
    return 0;
}

/* The number of work terms per (slot, layer): xform_work_bound's fields. */
#define WORK_TERMS 11
/*
 * Per (kind, mode, layer) of the ops between a late reduction and its reader:
 * their WORK_TERMS, then the bytes (per device, whole batch) and the number
 * of the gradient contributions they make (leaf_marks), which the pipeline
 * assembly accumulates right after them.
 */
#define BETWEEN_TERMS (WORK_TERMS + 2)

/* Compute op's (first) result when it is not replicated on the tensor axis, else 0. */
static ir_id
tp_unreplicated_result(const xf_ctx *c, ir_id op)
{
    const ir_module *m = c->m;
    if (c->n[XF_TP] <= 1 || m->ops[op].noutput == 0 ||
        (ir_opkind_info(m->ops[op].kind)->flags & (IR_OPF_FREE | IR_OPF_COMM)) ||
        c->place[m->ops[op].outputs].a[XF_TP] == XF_R)
        return 0;
    return m->ops[op].outputs;
}

/*
 * Whether input ref of an op needs a collective over the tensor axis before
 * the op: a partial sum (itself or its storage, through views and plumbing:
 * *storage), or with gathers a value split on the axis that the op wants
 * whole.
 */
static int
tp_input_needs(const xf_ctx *c, uint32_t ref, int gathers, ir_id *storage)
{
    ir_id v = c->m->refs[ref];
    int8_t have = c->place[v].a[XF_TP];
    *storage = storage_of(c, v);
    return have == XF_P || (gathers && have >= 0 && c->req[ref].a[XF_TP] == XF_R) ||
           c->place[*storage].a[XF_TP] == XF_P;
}

/*
 * The collective input ref (tp_input_needs) waits for: 2 an all-reduce (a
 * partial sum the op wants whole), 1 a reduce-scatter (a partial sum it
 * wants split) or an all-gather (a split value it wants whole), 0 none (the
 * op takes the partial sum as it is, as a cast of a layer norm's weight
 * gradient does: the reduction comes later, off the compute path). The bound
 * prices each kind at its own least terms (xform_work_bound).
 */
static int
tp_collective_kind(const xf_ctx *c, uint32_t ref)
{
    ir_id v = c->m->refs[ref];
    int8_t want = c->req[ref].a[XF_TP];
    if (c->place[v].a[XF_TP] == XF_P || c->place[storage_of(c, v)].a[XF_TP] == XF_P)
        return want == XF_P ? 0 : want == XF_R ? 2 : 1;
    return 1;
}

/*
 * Whether forward op's first result needs a collective over the tensor
 * axis before the next compute op of the function (views and plumbing
 * aside) reads it: a partial sum to reduce (an all-reduce, a reduce-scatter
 * under sequence parallelism), or a value split over the tensor axis that
 * the next op needs whole (sequence parallelism's all-gather); that op
 * reads no other value needing one and is in the same layer (a stage
 * boundary falls between layers). The next op cannot start before the
 * collective, which cannot start before op ends, and nothing the bound
 * counts runs between them (xform_work_bound.tp_reduce_bytes). *nextp: that
 * next op. The backward chunk's, repeated forward included, are counted on
 * the order the pipeline assembly emits them in (emitted_reductions).
 */
static int
tp_reduced_next(const xf_ctx *c, const uint32_t *pos, ir_id op, ir_id *nextp)
{
    const ir_module *m = c->m;
    const ir_region *r = &m->regions[c->func];
    ir_id out = tp_unreplicated_result(c, op), next = 0;
    int reads = 0;
    *nextp = 0;
    if (out == 0)
        return 0;
    for (uint32_t i = pos[op] + 1; i < r->nop && next == 0; i++)
        if (!(ir_opkind_info(m->ops[r->ops[i]].kind)->flags & IR_OPF_FREE))
            next = r->ops[i];
    if (next == 0 || (ir_opkind_info(m->ops[next].kind)->flags & IR_OPF_COMM) ||
        c->op[next].layer != c->op[op].layer)
        return 0;
    for (uint32_t i = 0; i < m->ops[next].ninput; i++) {
        ir_id v;
        int need = tp_input_needs(c, m->ops[next].inputs + i, 1, &v);
        if (need && v == out) {
            if ((reads = tp_collective_kind(c, m->ops[next].inputs + i)) == 0)
                return 0;
        } else if (need) {
            return 0;
        }
    }
    *nextp = next;
    return reads;
}

/*
 * The layers' GEMMs as add_work finds them (xform_layer_time.gemms): mb,
 * every value's placement under the same strategy with two microbatches
 * (where the batch split divides it); ok 0 once one cannot be described.
 */
typedef struct gemm_list {
    const xf_place *mb;
    xform_gemm *v;
    uint32_t n, cap;
    int ok;
} gemm_list;

/* Adds GEMM op of layer li, slot k, whose FLOPs take flop_s at the device's peak, to g. */
static void
add_gemm(const xf_ctx *c, gemm_list *g, ir_id op, uint32_t li, uint32_t k, double flop_s)
{
    const ir_module *m = c->m;
    const ir_op *o = &m->ops[op];
    xform_gemm *e;
    if (g == NULL || !g->ok)
        return;
    DI_GROW(&g->v, &g->cap, g->n + 1);
    e = &g->v[g->n++];
    memset(e, 0, sizeof *e);
    e->slot = (uint8_t)k;
    e->layer = li;
    e->flop_s = flop_s;
    /* The simulator quantizes MatMul, Gemm and MatMulGrad (cost.c); other GEMMs: none. */
    if (o->ninput < 2 || o->noutput == 0 ||
        (o->kind != IR_OP_MATMUL && o->kind != IR_OP_GEMM && o->kind != IR_OP_MATMULGRAD))
        return;
    e->fold = m->types[m->values[m->refs[o->inputs + 1]].type].rank == 2;
    e->noutput = o->noutput < 2 ? (uint8_t)o->noutput : 2;
    for (uint32_t i = 0; i < e->noutput; i++) {
        ir_id v = o->outputs + i;
        const ir_type *t = &m->types[m->values[v].type];
        int8_t b = g->mb[v].a[XF_MB];
        if (t->kind != IR_TYPE_TENSOR || xf_local_dims(c, v, &c->place[v], c->n, e->out[i].dims)) {
            g->ok = 0;
            return;
        }
        e->out[i].rank = (uint8_t)t->rank;
        e->out[i].bdim = XF_IS_S(b) && (uint32_t)b < t->rank ? b : -1;
    }
}

/*
 * How layer_work prices ops: tf32, f32 GEMMs as TF32; fused, for a
 * simulation with fused kernels (XFORM_ANALYSIS_FUSED); used, per value of
 * the module, which ops read it (USE_*, value_uses).
 */
/* work_opts.fusable: element-wise, a GEMM's epilogue (sim_fuse_epilogue), row-wise. */
enum { FUS_ELEM = 1, FUS_EPI = 2, FUS_ROW = 3 };

typedef struct work_opts {
    int tf32, fused;
    int epilogues; /* with fused kernels, gradient accumulation fusion too */
    /* per op, with fused kernels: a fused kernel may take it in (FUS_*), else 0 */
    const uint8_t *fusable;
    /* with fused kernels, per op: its 1-based place among the forward ops of the function */
    const uint32_t *fwd_pos;
    const uint8_t *used;
    uint8_t *read; /* per value: SLOT_BIT of the slots that counted reading it (add_terms) */
} work_opts;

/*
 * Readers of a value: a forward op (USE_FWD), a backward or step op or a
 * region's results (USE_BWD); the same by an op no fused kernel takes in
 * (USE_FWD_KERNEL, USE_BWD_KERNEL: a GEMM, a collective, a view, ...); with
 * fused kernels, an op that may run in a GEMM's epilogue (USE_EPI) or any
 * other reader (USE_NOT_EPI), and an op a fused kernel may take in (USE_FUSED).
 */
enum {
    USE_FWD = 1,
    USE_BWD = 2,
    USE_FWD_KERNEL = 4,
    USE_BWD_KERNEL = 8,
    USE_EPI = 16,
    USE_NOT_EPI = 32,
    USE_FUSED = 64
};

/*
 * Slots add_terms counts for: a forward op, a backward one, one repeated in
 * the backward; and their bits in work_opts.read: the forward, the backward,
 * what each recomputation mode repeats, the ops between a reduction and its
 * reader (emitted_reductions: not kept when fused).
 */
enum { SLOT_FWD, SLOT_BWD, SLOT_RE };
#define SLOT_BIT(k) (1u << (k)) /* k: add_work's slot 0..3; 4 between */

/* Whether, with fused kernels, a fused kernel may take op in (add_terms' 2). */
static int
fusable(const work_opts *wo, ir_id op)
{
    return wo->fusable != NULL && wo->fusable[op];
}

/*
 * Adds op's compute terms (xform_work_bound's first six) to w: its FLOPs and
 * bytes for the whole batch, divided by the tensor parallelism where its
 * work splits over the tensor axis. Returns 1 for a GEMM (*flop_s: its FLOP
 * term), 0 for another op, -1 when it costs nothing or may cost anything,
 * and with fused kernels 2 for an op a fused kernel may take in
 * (sim_fuse_kind via xform_op_bound.fuse). Such an op may cost nothing of
 * its own; what every fused kernel costs at least is counted instead, op by
 * op, never its FLOPs (a kernel is priced at its first op's dtype) nor the
 * inputs another such op makes (they may be made inside the kernel): a
 * row-wise op ends its
 * kernel, so it adds one launch and, when its first result is read, that
 * result's bytes (nothing fuses after it, so the kernel writes it); an
 * element-wise op adds its first result's bytes when an op no kernel takes
 * in reads it (the kernel writes it for that reader), not a launch (one
 * kernel may hold many). "Read" is in the chunk the op runs in (slot): by
 * forward ops for a forward op (under recomputation a backward reader reads
 * the repeated copy), by backward and step ops for a backward op; the copy
 * a backward chunk repeats counts a row-wise result read at all (it is
 * repeated because something there reads it) and no element-wise one. Both
 * add the bytes of each input no kernel can make (an argument, or, through
 * views, the result of an op no kernel takes in: a GEMM's, a collective's),
 * which some kernel reads; once per value and slot (bit: SLOT_BIT), as a
 * kernel reads a value once however many of its ops read it, and a repeated
 * op not again what a backward op read (both run in the backward chunk, where
 * one kernel may hold both).
 */
static int
add_terms(const xf_ctx *c, ir_id op, const work_opts *wo, int slot, unsigned bit, double *w,
          double *flop_s)
{
    xform_op_bound t;
    ir_cost cost;
    double split, f, bytes, special;
    if (!c->cost.op_bound(c->cost.ctx, c->m, op, wo->tf32, &t))
        return -1;
    *flop_s = 0;
    if (wo->fused && wo->epilogues && t.epilogue)
        return -1; /* in its GEMM's kernel, which costs at least the GEMM alone */
    ir_op_cost(c->m, op, &cost);
    split = tp_divides(c, op) ? c->n[XF_TP] : 1;
    f = cost.flops / split;
    bytes = (cost.bytes_read + cost.bytes_write) / split;
    *flop_s = f * t.per_flop;
    if (wo->fused && t.fuse != XFORM_FUSE_NONE) {
        const ir_op *o = &c->m->ops[op];
        static const uint8_t row_reads[3] = {USE_FWD, USE_BWD, USE_FWD | USE_BWD};
        static const uint8_t elem_reads[3] = {USE_FWD_KERNEL, USE_BWD_KERNEL, 0};
        uint8_t reads = (t.fuse == XFORM_FUSE_ROW ? row_reads : elem_reads)[slot];
        unsigned seen = slot == SLOT_RE ? bit | SLOT_BIT(1) : bit;
        double io = 0;
        *flop_s = 0;
        if (o->noutput && (wo->used[o->outputs] & reads))
            io += (double)ir_type_bytes(c->m, c->m->values[o->outputs].type);
        for (uint32_t i = 0; i < o->ninput; i++) {
            ir_id v = c->m->refs[o->inputs + i], d = c->m->values[storage_of(c, v)].def;
            if ((wo->read[v] & seen) || (d != 0 && fusable(wo, d)))
                continue;
            wo->read[v] |= (uint8_t)bit;
            io += (double)ir_type_bytes(c->m, c->m->values[v].type);
        }
        w[4] += io / split * t.per_byte;
        if (t.fuse == XFORM_FUSE_ROW)
            w[5] += t.launch;
        return 2;
    }
    /* Fused attention's exponentials (unquantized: w[10], not in flop_s). */
    special = cost.special / split * t.per_special;
    if (t.gemm) {
        w[0] += f * t.per_flop;
        w[1] += t.flop_fixed;
        w[2] += bytes * t.per_byte;
        w[3] += t.launch;
        w[10] += special;
        return 1;
    }
    w[4] += f * t.per_flop + special > bytes * t.per_byte ? f * t.per_flop + special
                                                          : bytes * t.per_byte;
    w[5] += t.launch;
    return 0;
}

/* At most this many compute ops between a reduction and its reader (emitted_reductions). */
#define LATE_MAX 4

/*
 * Whether, with fused kernels, the kernel holding op y may hold no op after
 * it that is not in its region's prefix: y is one no kernel takes in (a
 * kernel of its own), a row-wise one (nothing fuses after it), or an
 * element-wise one that no element-wise op's result feeds (it starts its
 * kernel: lib/sim/fuse.c joins an op only to the open group of one of its
 * inputs' makers) and no op a kernel may take in reads (nothing joins it).
 */
static int
kernel_closed(const xf_ctx *c, const work_opts *wo, ir_id y)
{
    const ir_op *o = &c->m->ops[y];
    if (!fusable(wo, y) || wo->fusable[y] == FUS_ROW)
        return 1;
    if (wo->fusable[y] != FUS_ELEM)
        return 0;
    for (uint32_t i = 0; i < o->ninput; i++) {
        ir_id d = c->m->values[c->m->refs[o->inputs + i]].def;
        if (d != 0 && wo->fusable[d] == FUS_ELEM)
            return 0;
    }
    for (uint32_t i = 0; i < o->noutput; i++)
        if (wo->used[o->outputs + i] & USE_FUSED)
            return 0;
    return 1;
}

/*
 * Whether op e may be in a fused group whose first op is d or before it
 * (lib/sim/fuse.c: a group's ops are element-wise but its last, which may
 * be row-wise, and every input of theirs is made before the first op or in
 * the group): e is d, or an op a kernel may take in every input of which
 * is made before d or by an op that may be in it too. depth bounds the
 * recursion (beyond it: may).
 */
static int
may_be_in(const xf_ctx *c, const work_opts *wo, const uint32_t *pos, ir_id e, ir_id d,
          int depth)
{
    const ir_op *o = &c->m->ops[e];
    if (e == d)
        return 1;
    if (pos[e] == 0 || (wo->fusable[e] != FUS_ELEM && wo->fusable[e] != FUS_ROW))
        return 0;
    if (depth == 0)
        return 1;
    for (uint32_t i = 0; i < o->ninput; i++) {
        ir_id f = c->m->values[c->m->refs[o->inputs + i]].def;
        if (f != 0 && pos[f] >= pos[d] && !may_be_in(c, wo, pos, f, d, depth - 1))
            return 0;
    }
    return 1;
}

/*
 * Whether op y may join the fused group of its input i's maker d (both in
 * the chunk's order: pos, 1-based, 0 for an op of another program): d is
 * element-wise (a group is open only after such an op), and every other
 * input of y is made before d or by an op that may be in d's group
 * (may_be_in).
 */
static int
may_join(const xf_ctx *c, const work_opts *wo, const uint32_t *pos, ir_id y, uint32_t i)
{
    const ir_module *m = c->m;
    const ir_op *o = &m->ops[y];
    ir_id d = m->values[m->refs[o->inputs + i]].def;
    if (d == 0 || pos[d] == 0 || wo->fusable[d] != FUS_ELEM)
        return 0;
    for (uint32_t k = 0; k < o->ninput; k++) {
        ir_id e = m->values[m->refs[o->inputs + k]].def;
        if (k != i && e != 0 && pos[e] > pos[d] && !may_be_in(c, wo, pos, e, d, 8))
            return 0;
    }
    return 1;
}

/*
 * Whether, with whatever fused kernels, the kernel that makes order[p]'s
 * result X ends at X's place in order (it may have begun earlier), but for
 * the ops between its start and X that are not its own, which are then put
 * in *extra (*nextra of them, at most LATE_MAX): they may run after it,
 * while X's collective does. X is an op no kernel takes in; or one a
 * kernel may take in but not a GEMM's epilogue, whose kernel starts at X or
 * at one of the element-wise ops it may join through (may_join),
 * transitively. Walking back from X to the last of those, every other
 * compute op met must be one whose kernel holds nothing after it
 * (kernel_closed) and no GEMM (counted quantized, more than its terms): a
 * kernel that may hold later ops (after X's reader, counted there) could
 * run them inside the interval. pos: 1-based places in order.
 */
static int
kernel_ends_at(const xf_ctx *c, const work_opts *wo, const ir_id *order, const uint32_t *pos,
               uint32_t p, ir_id *extra, uint32_t *nextra)
{
    const ir_module *m = c->m;
    ir_id x = order[p];
    uint32_t need = 0;
    uint8_t *mark;
    int ok = 0;
    *nextra = 0;
    if (!fusable(wo, x))
        return 1;
    if (wo->fusable[x] == FUS_EPI)
        return 0;
    mark = di_xcalloc(m->nop ? m->nop : 1, 1);
    for (uint32_t q = p + 1; q-- > 0;) {
        ir_id y = order[q];
        const ir_op *o = &m->ops[y];
        if (q < p) {
            if (!mark[y]) {
                xform_op_bound t;
                if (ir_opkind_info(o->kind)->flags & (IR_OPF_FREE | IR_OPF_COMM))
                    continue;
                if (*nextra == LATE_MAX || !kernel_closed(c, wo, y) ||
                    (c->cost.op_bound(c->cost.ctx, m, y, wo->tf32, &t) && t.gemm))
                    break;
                extra[(*nextra)++] = y;
                continue;
            }
            need--;
        }
        for (uint32_t i = 0; i < o->ninput; i++) {
            ir_id d = m->values[m->refs[o->inputs + i]].def;
            if (d != 0 && !mark[d] && may_join(c, wo, pos, y, i)) {
                mark[d] = 1;
                need++;
            }
        }
        if (need == 0) {
            ok = 1;
            break;
        }
    }
    di_free(mark);
    return ok;
}

/*
 * Adds op's lower-bound terms (xform_work_bound) to its layer's slot k of
 * per (add_terms) and, in the forward slot (0), its tensor-axis reduction;
 * a GEMM to g.
 */
static void
add_work(const xf_ctx *c, const uint32_t *pos, ir_id op, const work_opts *wo, double *per,
         uint32_t L, uint32_t k, gemm_list *g)
{
    int32_t li = xf_layer_index(c, c->op[op].layer);
    ir_id next, extra[LATE_MAX];
    uint32_t nextra;
    double flop_s, *w;
    int kind, terms;
    if (li < 0 || (uint32_t)li >= L)
        return;
    w = &per[((size_t)k * L + (uint32_t)li) * WORK_TERMS];
    terms = add_terms(c, op, wo, k == 0 ? SLOT_FWD : k == 1 ? SLOT_BWD : SLOT_RE, SLOT_BIT(k), w,
                      &flop_s);
    if (terms == 1)
        add_gemm(c, g, op, (uint32_t)li, k, flop_s);
    if (terms < 0 || k != 0 || (kind = tp_reduced_next(c, pos, op, &next)) == 0)
        return;
    /*
     * An op a fused kernel may take in (terms 2): its result's collective counts
     * only when the kernel surely ends at it with none of another kernel's ops
     * since its start (kernel_ends_at, on the forward's order): one that began
     * earlier could let them run after it, beside the collective.
     */
    if (terms == 2 &&
        (wo->fwd_pos == NULL ||
         !kernel_ends_at(c, wo, c->m->regions[c->func].ops, wo->fwd_pos, pos[op], extra,
                         &nextra) ||
         nextra > 0))
        return;
    /* w[6], w[7]: reduce-scatters and all-gathers; w[8], w[9]: all-reduces. */
    w[kind == 2 ? 8 : 6] += (double)ir_type_bytes(c->m, c->m->values[c->m->ops[op].outputs].type);
    w[kind == 2 ? 9 : 7] += 1;
}

/* Terms w (WORK_TERMS) as an xform_work_bound. */
static void
work_bound_of(const double *w, xform_work_bound *out)
{
    out->gemm_flop_s = w[0];
    out->gemm_fixed_s = w[1];
    out->gemm_byte_s = w[2];
    out->gemm_launch_s = w[3];
    out->other_s = w[4];
    out->other_launch_s = w[5];
    out->tp_reduce_bytes = w[6];
    out->tp_reduce_count = w[7];
    out->tp_ar_bytes = w[8];
    out->tp_ar_count = w[9];
    out->gemm_special_s = w[10];
}

/* The least over the layers of each term of slot k into *out. */
static void
least_work(const double *per, uint32_t L, uint32_t k, xform_work_bound *out)
{
    double least[WORK_TERMS];
    for (uint32_t l = 0; l < L; l++) {
        const double *w = &per[((size_t)k * L + l) * WORK_TERMS];
        for (int j = 0; j < WORK_TERMS; j++)
            if (l == 0 || w[j] < least[j])
                least[j] = w[j];
    }
    work_bound_of(least, out);
}

/* The least over the L layers of a[row + l]. */
static double
least_row(const double *a, size_t row, uint32_t L)
{
    double least = 0;
    for (uint32_t l = 0; l < L; l++)
        if (l == 0 || a[row + l] < least)
            least = a[row + l];
    return least;
}

/* Bytes of v one device holds at least while v is live (work_set_min). */
static uint64_t
live_bytes(const xf_ctx *c, const xf_place *mb, ir_id v)
{
    uint64_t b;
    if (!XF_IS_S(mb[v].a[XF_MB])) /* only what a batch split divides */
        return 0;
    b = device_bytes(c, v);
    /* A partial sum may be reduce-scattered (sequence parallelism) before it is read. */
    if (c->place[v].a[XF_TP] == XF_P && c->n[XF_TP] > 1)
        b /= c->n[XF_TP];
    return b;
}

/* *least = v when first or below it (a least over the layers). */
static void
keep_least(uint64_t *least, uint64_t v, int first)
{
    if (first || v < *least)
        *least = v;
}

/* What a working-set event counts (work_set_min). */
enum { WS_ACT, WS_WEIGHT, WS_FIXED };

typedef struct ws_event {
    uint32_t layer, pos;
    int64_t bytes;
    int kind; /* WS_ACT: a batch-divided value's; WS_WEIGHT: a weight's; WS_FIXED: a value's
                 no batch split divides */
} ws_event;

static int
cmp_ws_event(const void *a, const void *b)
{
    const ws_event *x = a, *y = b;
    if (x->layer != y->layer)
        return x->layer < y->layer ? -1 : 1;
    if (x->pos != y->pos)
        return x->pos < y->pos ? -1 : 1;
    return (x->bytes > y->bytes) - (x->bytes < y->bytes); /* ends before starts */
}

/*
 * A backward chunk's ops in the order the pipeline assembly emits them:
 * the backward ops bops[0..nb) in program order, each repeated op (of set)
 * right before its first use, depth first over the inputs (as xf_body_get
 * emits the lazy ops of a backward chunk). Writes the n ops to order[] and
 * epos[op] = its place from 1 (0: not emitted); stack and kin are scratch
 * of m->nop entries, epos and kin zeroed. Returns n.
 */
static uint32_t
emitted_order(const xf_ctx *c, const ir_id *bops, uint32_t nb, const uint8_t *set,
              uint32_t *epos, ir_id *order, ir_id *stack, uint32_t *kin)
{
    const ir_module *m = c->m;
    uint32_t n = 0, top = 0;
    for (uint32_t j = 0; j < nb; j++) {
        if (epos[bops[j]] || set[bops[j]])
            continue;
        stack[top++] = bops[j];
        kin[bops[j]] = 0;
        while (top > 0) {
            ir_id op = stack[top - 1];
            const ir_op *o = &m->ops[op];
            if (kin[op] < o->ninput) {
                ir_id d = m->values[m->refs[o->inputs + kin[op]++]].def;
                if (d && set[d] && !epos[d] && kin[d] == 0 && top < m->nop) {
                    kin[d] = 0;
                    stack[top++] = d;
                }
                continue;
            }
            epos[op] = ++n;
            order[n - 1] = op;
            top--;
        }
    }
    return n;
}

/* The gradient contributions op y makes (marked in leaf) into between terms (BETWEEN_TERMS). */
static void
leaf_terms(const xf_ctx *c, ir_id y, const uint8_t *leaf, double *terms)
{
    const ir_module *m = c->m;
    for (uint32_t i = 0; i < m->ops[y].noutput; i++) {
        ir_id v = m->ops[y].outputs + i;
        if (leaf[v]) {
            double vb = (double)ir_type_bytes(m, m->values[v].type);
            terms[WORK_TERMS] += XF_IS_S(c->place[v].a[XF_TP]) ? vb / c->n[XF_TP] : vb;
            terms[WORK_TERMS + 1] += 1;
        }
    }
}

/*
 * The tensor-axis collectives a backward chunk's compute stream waits for,
 * on its emitted order (emitted_order; the repeated forward's included,
 * whose order is known there): op X's result needs a collective over the
 * tensor axis (a partial sum to reduce, or a split value to gather) before
 * R, the first later compute op that reads it (views and plumbing aside),
 * which reads no other value needing one; X and R are in the same layer;
 * the 0 to LATE_MAX compute ops between them are of that layer, no
 * collective and no GEMM (the search counts a GEMM quantized, more than its
 * terms); they may read X's result as it is (a bias's gradient, summed from
 * a sequence-split output gradient before that gradient's all-gather): they
 * run while the collective does, which waits for X, not for them. And X is
 * not between the ends of a pair counted before it (the intervals are
 * disjoint). R cannot start before the collective ends, which cannot start
 * before X ends (nor before the collectives issued before it on the same
 * communicator, which only delays it), and the stream runs the ops between
 * in the meantime, so from X's end to R's start it spends at least the
 * collective's time: the bound may add it less their terms. Per layer, X a
 * backward op: its result's bytes (whole batch, per device) to red[layer] with no op
 * between, else to late[layer] and the ops' terms to between[layer]
 * (BETWEEN_TERMS each: with the gradient contributions they make, marked in
 * leaf, whose accumulations the pipeline assembly emits right after them);
 * X repeated (set): the same to rred, rlate, rbetween. With fused kernels
 * X's kernel must end at X's place (kernel_ends_at): its end, after every
 * op it holds, is the interval's start; and an op between may not be an
 * element-wise one a fused kernel can take in: its kernel may hold later ops
 * (after R, whose terms are counted) and run them at its place, inside the
 * interval. A row-wise op ends its kernel: nothing after it fuses.
 */
static void
emitted_reductions(const xf_ctx *c, const ir_id *order, uint32_t n, const uint8_t *set,
                   const uint8_t *leaf, const work_opts *wo, double *red, double *late,
                   double *between, double *rred, double *rlate, double *rbetween, double *redn,
                   double *laten, double *rredn, double *rlaten, size_t ar, size_t plane,
                   size_t bplane)
{
    const ir_module *m = c->m;
    uint32_t busy = 0; /* the place after the last counted pair's reader */
    uint32_t *pos = NULL;
    /* Per layer, the late pairs so far (the backward's, then the repeated forward's). */
    uint32_t *npair = di_xcalloc(2 * (size_t)c->nlayer + 1, sizeof *npair);
    if (wo->fusable != NULL) {
        pos = di_xcalloc(m->nop ? m->nop : 1, sizeof *pos);
        for (uint32_t p = 0; p < n; p++)
            pos[order[p]] = p + 1;
    }
    for (uint32_t p = 0; p < n; p++) {
        ir_id x = order[p], out = tp_unreplicated_result(c, x);
        int32_t li = xf_layer_index(c, c->op[x].layer);
        double terms[BETWEEN_TERMS] = {0}, flop_s;
        uint32_t nbetween = 0;
        size_t at = 0; /* the reader's collective: at ar for an all-reduce */
        ir_id extra[LATE_MAX];
        uint32_t nextra;
        if (out == 0 || p < busy || li < 0 || (uint32_t)li >= c->nlayer ||
            !kernel_ends_at(c, wo, order, pos, p, extra, &nextra))
            continue;
        /* The ops before X that may run after its kernel: between it and R. */
        for (uint32_t k = 0; k < nextra; k++) {
            if (add_terms(c, extra[k], wo, SLOT_RE, SLOT_BIT(4), terms, &flop_s) == 1)
                break; /* not a GEMM: kernel_ends_at */
            leaf_terms(c, extra[k], leaf, terms);
        }
        nbetween = nextra;
        for (uint32_t q = p + 1; q < n; q++) {
            ir_id y = order[q];
            int reads = 0, direct = 0, other = 0, terms_of;
            if (ir_opkind_info(m->ops[y].kind)->flags & IR_OPF_FREE)
                continue;
            if ((ir_opkind_info(m->ops[y].kind)->flags & IR_OPF_COMM) ||
                c->op[y].layer != c->op[x].layer)
                break;
            for (uint32_t k = 0; k < m->ops[y].ninput; k++) {
                ir_id sv;
                int need = tp_input_needs(c, m->ops[y].inputs + k, 1, &sv);
                if (m->refs[m->ops[y].inputs + k] == out || sv == out) {
                    int kind = need ? tp_collective_kind(c, m->ops[y].inputs + k) : 0;
                    if (kind == 0) {
                        direct = 1; /* read without the collective: not a reduction's reader */
                    } else {
                        at = kind == 2 ? ar : 0;
                        reads = 1;
                    }
                } else if (need) {
                    other = 1;
                }
            }
            if (reads) {
                double bytes = (double)ir_type_bytes(m, m->values[out].type);
                int re = set[x] != 0;
                if (direct || other)
                    break;
                if (nbetween == 0) {
                    (re ? rred : red)[li + at] += bytes;
                    (re ? rredn : redn)[li + at] += 1;
                } else {
                    uint32_t *np = &npair[(size_t)re * c->nlayer + (uint32_t)li];
                    size_t k = *np < XFORM_LATE_POS - 1 ? *np : XFORM_LATE_POS - 1;
                    double *b = &(re ? rbetween : between)[k * bplane + (size_t)li * BETWEEN_TERMS];
                    (re ? rlate : late)[k * plane + li + at] += bytes;
                    (re ? rlaten : laten)[k * plane + li + at] += 1;
                    for (int j = 0; j < BETWEEN_TERMS; j++)
                        b[j] += terms[j];
                    (*np)++;
                }
                busy = q + 1;
                break;
            }
            if (++nbetween > LATE_MAX)
                break;
            /*
             * Not a GEMM, nor an op a fused kernel may take in but a row-wise one,
             * which ends its kernel: no op after R runs in it, inside the interval.
             */
            terms_of = add_terms(c, y, wo, SLOT_RE, SLOT_BIT(4), terms, &flop_s);
            if (terms_of == 1 || (terms_of == 2 && !kernel_closed(c, wo, y)))
                break;
            leaf_terms(c, y, leaf, terms);
        }
    }
    di_free(npair);
    di_free(pos);
}

/*
 * The values of function r that may be gradient contributions (the pipeline
 * assembly's leaves: made in a chunk, read by the step program, accumulated
 * across microbatches by an Add emitted right after the op that makes them),
 * as a caller-freed mark per value: the inputs of the once-per-step ops (the
 * optimizer updates), and, back from those, the inputs of the Adds, Casts and
 * views that make marked values (a tied weight's contributions summed once
 * per step, mixed precision's gradient cast to f32, whichever side of it the
 * step program starts). A superset: the bound subtracts their accumulations
 * from the time it adds (late_reductions in lib/search/space.c), so marking
 * more only loosens it.
 */
static uint8_t *
leaf_marks(const xf_ctx *c, const ir_region *r)
{
    const ir_module *m = c->m;
    uint8_t *leaf = di_xcalloc(m->nvalue ? m->nvalue : 1, 1);
    for (uint32_t i = r->nop; i > 0; i--) {
        ir_id op = r->ops[i - 1];
        const ir_op *o = &m->ops[op];
        int through = o->noutput > 0 && leaf[o->outputs] &&
                      (o->kind == IR_OP_ADD || o->kind == IR_OP_CAST ||
                       (ir_opkind_info(o->kind)->flags & IR_OPF_FREE));
        if (c->op[op].phase != XF_PH_STEP && !through)
            continue;
        for (uint32_t k = 0; k < o->ninput; k++)
            leaf[m->refs[o->inputs + k]] = 1;
    }
    return leaf;
}

/*
 * emitted_reductions of the backward chunk of recomputation mode `mode`
 * (bops[0..nb) its ops in program order but the ones emitted where first
 * used, marked in set; every repeated op marked in rep) into the mode's rows
 * of red, late and between: [kind][mode][layer] (x BETWEEN_TERMS for between),
 * kind 0 the backward ops' reductions, 1 the repeated forward's; late, laten
 * and between per place of the late pair too (XFORM_LATE_POS planes of 12 L,
 * and of 6 L BETWEEN_TERMS).
 */
static void
chunk_reductions(const xf_ctx *c, const ir_id *bops, uint32_t nb, const uint8_t *set,
                 const uint8_t *rep, const uint8_t *leaf, const work_opts *wo, uint32_t mode,
                 double *red, double *late, double *between, double *redn, double *laten)
{
    const ir_module *m = c->m;
    size_t L = c->nlayer, b = (size_t)mode * L, r = (size_t)(3 + mode) * L;
    uint32_t *epos = di_xcalloc(m->nop ? m->nop : 1, sizeof *epos);
    uint32_t *kin = di_xcalloc(m->nop ? m->nop : 1, sizeof *kin);
    ir_id *order = di_xmalloc((m->nop ? m->nop : 1) * sizeof *order);
    ir_id *stack = di_xmalloc((m->nop ? m->nop : 1) * sizeof *stack);
    uint32_t n = emitted_order(c, bops, nb, set, epos, order, stack, kin);
    emitted_reductions(c, order, n, rep, leaf, wo, red + b, late + b,
                       between + b * BETWEEN_TERMS, red + r, late + r, between + r * BETWEEN_TERMS,
                       redn + b, laten + b, redn + r, laten + r, 6 * L, 12 * L,
                       6 * L * BETWEEN_TERMS);
    di_free(stack);
    di_free(order);
    di_free(kin);
    di_free(epos);
}

/*
 * xform_layer_facts.work_set_min for the recomputation mode whose repeated
 * ops set marks: the backward ops bops[0..nb) in program order, each
 * repeated op emitted right before its first use (as xf_body_get emits the
 * lazy ops of a backward chunk: depth first over the inputs); a value made
 * by one of them is live from its op to its last reader of the same layer,
 * directly or through views of it, both included (the simulator allocates an
 * op's results when it starts and frees a storage after the last reader of
 * any of its aliases ends; readers in other layers not counted: a lower
 * bound); a partial sum whole at its op, then at live_bytes'.
 * Per layer the most bytes (batch-divided values, whole batch, one device)
 * live at once; the least over the layers. 0 without mb. With fused kernels
 * (wo->fused) a value an op a kernel may take in makes counts only when an op
 * no kernel takes in reads it in the backward: otherwise it may live inside
 * one kernel and never be stored.
 *
 * Into *weights, the bytes per device (tensor-split, whole otherwise) of the
 * layer's weights read at the moment of that most (first counted there), the
 * least over the layers: a weight from its first reader to its last among
 * these ops, both included (ZeRO-3 gathers a weight once per chunk before its
 * first reader and frees the gathered copy after its last, chunk.c; one ZeRO
 * cannot split is whole all along). And the values those ops make that no
 * batch split divides (weight gradients, their casts), whole from their op to
 * their last reader among these ops: into *fixed_at_most what of them is live
 * at that most, into *fixed_most the moment they are most (the batch-divided
 * bytes, the weights and they, there); each figure the least over the layers.
 */
static uint64_t
work_set_min(const xf_ctx *c, const work_opts *wo, const xf_place *mb, const ir_id *bops,
             uint32_t nb, const uint8_t *set, uint64_t *weights, uint64_t *fixed_at_most,
             struct xform_ws_moment *fixed_most)
{
    const ir_module *m = c->m;
    uint32_t L = c->nlayer, n, nev = 0, cap = 0;
    uint32_t *epos, *last, *kin, *wfirst, *wlast;
    uint8_t *stored; /* per value: with fused kernels, surely stored (read outside its kernel) */
    ir_id *order, *stack;
    ws_event *ev = NULL;
    uint64_t *most, *wat, *fat, least = 0;
    struct xform_ws_moment *fm;
    *weights = *fixed_at_most = 0;
    memset(fixed_most, 0, sizeof *fixed_most);
    if (mb == NULL || L == 0 || nb == 0)
        return 0;
    epos = di_xcalloc(m->nop ? m->nop : 1, sizeof *epos);
    kin = di_xcalloc(m->nop ? m->nop : 1, sizeof *kin);
    order = di_xmalloc((m->nop ? m->nop : 1) * sizeof *order);
    stack = di_xmalloc((m->nop ? m->nop : 1) * sizeof *stack);
    last = di_xcalloc(m->nvalue ? m->nvalue : 1, sizeof *last);
    wfirst = di_xcalloc(m->nvalue ? m->nvalue : 1, sizeof *wfirst);
    wlast = di_xcalloc(m->nvalue ? m->nvalue : 1, sizeof *wlast);
    stored = di_xcalloc(m->nvalue ? m->nvalue : 1, 1);
    most = di_xcalloc(L, sizeof *most);
    wat = di_xcalloc(L, sizeof *wat);
    fat = di_xcalloc(L, sizeof *fat);
    fm = di_xcalloc(L, sizeof *fm);
    n = emitted_order(c, bops, nb, set, epos, order, stack, kin);
    for (uint32_t p = 1; p <= n; p++) {
        const ir_op *o = &m->ops[order[p - 1]];
        int32_t layer = c->op[order[p - 1]].layer;
        for (uint32_t k = 0; k < o->ninput; k++) {
            /* A view's reader reads its storage, which the simulator keeps as long. */
            ir_id v = storage_of(c, m->refs[o->inputs + k]), d = m->values[v].def;
            ir_id rv = m->refs[o->inputs + k], rd = m->values[rv].def;
            /* Read by an op that cannot be in its maker's fused group: stored. */
            if (rd != 0 && epos[rd] && fusable(wo, rd) &&
                (!fusable(wo, order[p - 1]) || !may_be_in(c, wo, epos, order[p - 1], rd, 8)))
                stored[rv] = 1;
            if (d && epos[d] && c->op[d].layer == layer && last[v] < p)
                last[v] = p;
            /* A weight: its readers of the layer that reads it first. */
            if (d == 0 && (c->vflags[v] & XF_V_WEIGHT) && layer >= 0 &&
                (wfirst[v] == 0 || c->op[order[wfirst[v] - 1]].layer == layer)) {
                if (wfirst[v] == 0)
                    wfirst[v] = p;
                wlast[v] = p;
            }
        }
    }
    for (ir_id v = 1; v < m->nvalue; v++) {
        int32_t li;
        uint64_t b;
        if (wfirst[v] == 0 || (b = device_bytes(c, v)) == 0)
            continue;
        li = xf_layer_index(c, c->op[order[wfirst[v] - 1]].layer);
        if (li < 0 || (uint32_t)li >= L)
            continue;
        DI_GROW(&ev, &cap, nev + 2);
        ev[nev++] = (ws_event){(uint32_t)li, wfirst[v], (int64_t)b, WS_WEIGHT};
        ev[nev++] = (ws_event){(uint32_t)li, wlast[v] + 1, -(int64_t)b, WS_WEIGHT};
    }
    for (uint32_t p = 1; p <= n; p++) {
        ir_id d = order[p - 1];
        const ir_op *o = &m->ops[d];
        int32_t li = xf_layer_index(c, c->op[d].layer);
        int internal = fusable(wo, d); /* its results may stay inside a kernel */
        if (li < 0 || (uint32_t)li >= L ||
            (ir_opkind_info(o->kind)->flags & (IR_OPF_FREE | IR_OPF_COMM)))
            continue;
        for (uint32_t i = 0; i < o->noutput; i++) {
            ir_id v = o->outputs + i;
            uint64_t b;
            /* Read only in GEMM epilogues (a weight gradient, its cast): maybe never stored. */
            if ((internal && !(wo->used[v] & USE_BWD_KERNEL) && !stored[v]) ||
                (wo->used[v] & (USE_EPI | USE_NOT_EPI)) == USE_EPI)
                continue;
            if (!XF_IS_S(mb[v].a[XF_MB])) {
                /* No batch split divides it: whole at its op, and to its last reader here. */
                if ((b = device_bytes(c, v)) == 0)
                    continue;
                DI_GROW(&ev, &cap, nev + 2);
                ev[nev++] = (ws_event){(uint32_t)li, p, (int64_t)b, WS_FIXED};
                ev[nev++] = (ws_event){(uint32_t)li, (last[v] > p ? last[v] : p) + 1,
                                       -(int64_t)b, WS_FIXED};
                continue;
            }
            if (last[v] <= p || (b = live_bytes(c, mb, v)) == 0)
                continue;
            DI_GROW(&ev, &cap, nev + 3);
            if (c->place[v].a[XF_TP] == XF_P && c->n[XF_TP] > 1 && mb[v].a[XF_MB] >= 0) {
                /*
                 * A partial sum is whole on its device while its op runs: the
                 * reduction (or reduce-scatter) reads it after that.
                 */
                uint64_t whole = device_bytes(c, v);
                ev[nev++] = (ws_event){(uint32_t)li, p, (int64_t)whole, WS_ACT};
                ev[nev++] = (ws_event){(uint32_t)li, p + 1, -(int64_t)(whole - b), WS_ACT};
            } else {
                ev[nev++] = (ws_event){(uint32_t)li, p, (int64_t)b, WS_ACT};
            }
            ev[nev++] = (ws_event){(uint32_t)li, last[v] + 1, -(int64_t)b, WS_ACT};
        }
    }
    qsort(ev, nev, sizeof *ev, cmp_ws_event);
    {
        /*
         * What is live at each position: after all its events (the frees, which
         * sort first, then the allocations); in between it never holds more.
         */
        int64_t live[3] = {0, 0, 0};
        for (uint32_t i = 0; i < nev; i++) {
            const ws_event *e = &ev[i];
            uint64_t a, w, f;
            if (i > 0 && e->layer != ev[i - 1].layer)
                live[WS_ACT] = live[WS_WEIGHT] = live[WS_FIXED] = 0;
            live[e->kind] += e->bytes;
            if (i + 1 < nev && ev[i + 1].layer == e->layer && ev[i + 1].pos == e->pos)
                continue;
            a = live[WS_ACT] > 0 ? (uint64_t)live[WS_ACT] : 0;
            w = live[WS_WEIGHT] > 0 ? (uint64_t)live[WS_WEIGHT] : 0;
            f = live[WS_FIXED] > 0 ? (uint64_t)live[WS_FIXED] : 0;
            if (a > 0 && (a > most[e->layer] || (a == most[e->layer] && w > wat[e->layer]))) {
                most[e->layer] = a;
                wat[e->layer] = w;
                fat[e->layer] = f;
            }
            if (f > fm[e->layer].fixed ||
                (f == fm[e->layer].fixed && f > 0 && a > fm[e->layer].act)) {
                fm[e->layer].act = a;
                fm[e->layer].weights = w;
                fm[e->layer].fixed = f;
            }
        }
    }
    for (uint32_t l = 0; l < L; l++) {
        keep_least(&least, most[l], l == 0);
        keep_least(weights, wat[l], l == 0);
        keep_least(fixed_at_most, fat[l], l == 0);
        keep_least(&fixed_most->act, fm[l].act, l == 0);
        keep_least(&fixed_most->weights, fm[l].weights, l == 0);
        keep_least(&fixed_most->fixed, fm[l].fixed, l == 0);
    }
    di_free(ev);
    di_free(most);
    di_free(wat);
    di_free(fat);
    di_free(fm);
    di_free(wfirst);
    di_free(wlast);
    di_free(stored);
    di_free(last);
    di_free(stack);
    di_free(order);
    di_free(kin);
    di_free(epos);
    return least;
}

/*
 * xform_layer_facts.time. It leaves c's recomputation marks and mode as the
 * full mode's, and marks in full (per op, zeroed by the caller) the ops the
 * full mode repeats.
 */
static void
layer_work(xf_ctx *c, const work_opts *wo, const xf_place *mb, xform_layer_time *out,
           uint64_t ws[3], uint64_t wsw[3], uint64_t wsf[3], struct xform_ws_moment wsm[3],
           uint8_t *full)
{
    gemm_list g = {mb, NULL, 0, 0, mb != NULL};
    const ir_region *r = &c->m->regions[c->func];
    ir_id *fops, *bops, *re, *rest, *bseq; /* rest, bseq: xf_recompute_ops' rest, and placed */
    int32_t *home;
    uint32_t *pos; /* per op: its place in the function */
    uint32_t *fpos = NULL; /* with fused kernels: work_opts.fwd_pos */
    work_opts wf;          /* wo with fwd_pos */
    uint8_t *set;  /* per op: repeated by the mode at hand where first used (xf_recompute_ops) */
    uint8_t *rep;  /* per op: repeated by the mode at hand (set and xf_recompute_ops' rest) */
    uint8_t *inl;  /* per place in the function: its op is in a layer of c */
    double *per; /* (forward, backward, repeated by selective, by full) x layer x terms */
    /*
     * (backward's, repeated forward's) x recomputation mode x layer: the
     * backward chunk's reductions (chunk_reductions); with ops between:
     * bytes, and those ops' terms.
     */
    double *red, *late, *between, *redn, *laten; /* redn, laten: how many collectives */
    uint8_t *leaf = NULL; /* leaf_marks */
    uint32_t nf = 0, nb = 0, L = c->nlayer;
    uint32_t first[2] = {UINT32_MAX, UINT32_MAX}, last[2] = {0, 0}; /* layers' ops: fwd, bwd */
    double edge[4 * WORK_TERMS] = {0};
    memset(out, 0, sizeof *out);
    if (L == 0 || !xform_cost_known(&c->cost) || c->cost.op_bound == NULL)
        return;
    fops = di_xmalloc((r->nop + 1) * sizeof *fops);
    bops = di_xmalloc((r->nop + 1) * sizeof *bops);
    re = di_xmalloc((r->nop + 1) * sizeof *re);
    rest = di_xmalloc((r->nop + 1) * sizeof *rest);
    bseq = di_xmalloc((2 * (size_t)r->nop + 1) * sizeof *bseq);
    rep = di_xcalloc(c->m->nop ? c->m->nop : 1, 1);
    home = di_xcalloc(c->m->nop ? c->m->nop : 1, sizeof *home);
    per = di_xcalloc((size_t)4 * L * WORK_TERMS, sizeof *per);
    red = di_xcalloc((size_t)12 * L, sizeof *red);
    late = di_xcalloc((size_t)12 * L * XFORM_LATE_POS, sizeof *late);
    between = di_xcalloc((size_t)6 * L * BETWEEN_TERMS * XFORM_LATE_POS, sizeof *between);
    redn = di_xcalloc((size_t)12 * L, sizeof *redn);
    laten = di_xcalloc((size_t)12 * L * XFORM_LATE_POS, sizeof *laten);
    pos = di_xcalloc(c->m->nop ? c->m->nop : 1, sizeof *pos);
    set = di_xcalloc(c->m->nop ? c->m->nop : 1, 1);
    inl = di_xmalloc((r->nop + 1) * sizeof *inl);
    for (uint32_t i = 0; i < r->nop; i++)
        pos[r->ops[i]] = i;
    wf = *wo;
    if (wo->fusable != NULL) {
        /* The forward chunk's order, for its fused kernels (add_work). */
        fpos = di_xcalloc(c->m->nop ? c->m->nop : 1, sizeof *fpos);
        for (uint32_t i = 0; i < r->nop; i++)
            if (c->op[r->ops[i]].phase == XF_PH_FORWARD)
                fpos[r->ops[i]] = i + 1;
        wf.fwd_pos = fpos;
    }
    for (uint32_t i = 0; i < r->nop; i++) {
        ir_id op = r->ops[i];
        int fwd = c->op[op].phase == XF_PH_FORWARD;
        inl[i] = c->op[op].layer >= 0 && xf_layer_index(c, c->op[op].layer) >= 0;
        if (!inl[i] || (!fwd && c->op[op].phase != XF_PH_BACKWARD))
            continue;
        if (fwd && first[0] == UINT32_MAX)
            first[0] = i;
        if (!fwd && first[1] == UINT32_MAX)
            first[1] = i;
        last[!fwd] = i;
    }
    for (uint32_t i = 0; i < r->nop; i++) {
        ir_id op = r->ops[i];
        int fwd = c->op[op].phase == XF_PH_FORWARD;
        double flop_s;
        if (fwd)
            fops[nf++] = op;
        else if (c->op[op].phase == XF_PH_BACKWARD)
            bops[nb++] = op;
        if (c->op[op].phase != XF_PH_STEP)
            add_work(c, pos, op, &wf, per, L, fwd ? 0 : 1, &g);
        /*
         * Ops outside the layers before the first layer's forward (the
         * embedding) and after the last's (the head and the loss), and their
         * backward ops (after and before the layers' backward).
         */
        if (!inl[i] && first[0] != UINT32_MAX && first[1] != UINT32_MAX &&
            (fwd || c->op[op].phase == XF_PH_BACKWARD)) {
            int e = -1;
            if (fwd)
                e = i < first[0] ? 0 : i > last[0] ? 2 : -1;
            else
                e = i > last[1] ? 1 : i < first[1] ? 3 : -1;
            if (e >= 0)
                add_terms(c, op, wo, fwd ? SLOT_FWD : SLOT_BWD, SLOT_BIT(fwd ? 0 : 1),
                          &edge[e * WORK_TERMS], &flop_s);
        }
    }
    for (int e = 0; e < 4; e++)
        work_bound_of(&edge[e * WORK_TERMS], &out->edge[e]);
    /*
     * What each recomputation mode repeats, found as the pipeline assembly
     * finds it (xf_recompute_ops), over the whole function as one program: a
     * stage boundary can only make a layer's output a further op to repeat.
     */
    leaf = leaf_marks(c, r);
    chunk_reductions(c, bops, nb, set, set, leaf, wo, STRATEGY_RECOMPUTE_NONE, red, late,
                     between, redn, laten);
    {
        int none = STRATEGY_RECOMPUTE_NONE;
        ws[none] = work_set_min(c, wo, mb, bops, nb, set, &wsw[none], &wsf[none], &wsm[none]);
    }
    for (uint32_t k = 2; k < 4; k++) {
        strategy_recompute mode = k == 2 ? STRATEGY_RECOMPUTE_SELECTIVE : STRATEGY_RECOMPUTE_FULL;
        uint32_t nre;
        c->s.recompute = mode;
        if (mode == STRATEGY_RECOMPUTE_SELECTIVE)
            xf_recompute_mark(c);
        else
            for (uint32_t i = 0; i < c->m->nop; i++)
                c->op[i].recompute = 0;
        const ir_id *seq = bops;
        uint32_t nseq = nb, nrest;
        nre = xf_recompute_ops(c, fops, nf, bops, nb, home, 0, re, rest, &nrest, NULL);
        memset(set, 0, c->m->nop ? c->m->nop : 1);
        for (uint32_t j = 0; j < nre; j++)
            set[re[j]] = 1;
        memcpy(rep, set, c->m->nop ? c->m->nop : 1);
        /*
         * Full recomputation's other forward ops, emitted in program order
         * before their layer's first backward op (xf_recompute_ops, pipeline.c).
         */
        for (uint32_t j = 0; j < nrest; j++) {
            rep[rest[j]] = 1;
            add_work(c, pos, rest[j], wo, per, L, k, &g);
        }
        if (nrest > 0) {
            nseq = xf_recompute_place(c, bops, nb, rest, nrest, bseq);
            seq = bseq;
        }
        if (mode == STRATEGY_RECOMPUTE_FULL)
            memcpy(full, rep, c->m->nop ? c->m->nop : 1);
        for (uint32_t j = 0; j < nre; j++)
            add_work(c, pos, re[j], wo, per, L, k, &g);
        chunk_reductions(c, seq, nseq, set, rep, leaf, wo, mode, red, late, between, redn, laten);
        ws[mode] = work_set_min(c, wo, mb, seq, nseq, set, &wsw[mode], &wsf[mode], &wsm[mode]);
    }
    {
        /* Fused attention's blocks per layer (xform_layer_time.ring_bytes). */
        double *ring = di_xcalloc((size_t)6 * L, sizeof *ring);
        for (uint32_t i = 0; i < r->nop; i++) {
            ir_id op = r->ops[i];
            const ir_op *o = &c->m->ops[op];
            int32_t l = c->op[op].layer >= 0 ? xf_layer_index(c, c->op[op].layer) : -1;
            int grad = o->kind == IR_OP_FLASHATTNGRAD;
            if (l < 0 || o->ninput < 3 || (o->kind != IR_OP_FLASHATTN && !grad) ||
                c->op[op].phase != (grad ? XF_PH_BACKWARD : XF_PH_FORWARD))
                continue;
            uint64_t kv = device_bytes(c, ir_op_input(c->m, op, 1)) +
                          device_bytes(c, ir_op_input(c->m, op, 2));
            ring[(size_t)grad * L + (uint32_t)l] += (double)kv;
            ring[(size_t)(3 + grad) * L + (uint32_t)l] += 2;
            if (grad && o->noutput >= 3) {
                kv = device_bytes(c, o->outputs + 1) + device_bytes(c, o->outputs + 2);
                ring[(size_t)2 * L + (uint32_t)l] += (double)kv;
                ring[(size_t)5 * L + (uint32_t)l] += 2;
            }
        }
        for (int k = 0; k < 3; k++) {
            out->ring_bytes[k] = least_row(ring, (size_t)k * L, L);
            out->ring_count[k] = least_row(ring, (size_t)(3 + k) * L, L);
        }
        di_free(ring);
    }
    {
        /* The experts' tokens per layer (xform_layer_time.a2a_bytes). */
        double *a2a = di_xcalloc((size_t)4 * L, sizeof *a2a);
        for (uint32_t i = 0; i < r->nop; i++) {
            ir_id op = r->ops[i];
            const ir_op *o = &c->m->ops[op];
            int32_t l = c->op[op].layer >= 0 ? xf_layer_index(c, c->op[op].layer) : -1;
            int bwd = c->op[op].phase == XF_PH_BACKWARD;
            ir_id v;
            if (l < 0 || o->noutput < 1 || o->ninput < 1 ||
                (c->op[op].phase != XF_PH_FORWARD && !bwd))
                continue;
            if (o->kind == IR_OP_MOEDISPATCH)
                v = o->outputs;
            else if (o->kind == IR_OP_MOECOMBINE && !bwd)
                v = ir_op_input(c->m, op, 0);
            else
                continue;
            a2a[(size_t)bwd * 2 * L + (uint32_t)l] += (double)device_bytes(c, v);
            a2a[((size_t)bwd * 2 + 1) * L + (uint32_t)l] += 1;
        }
        for (int k = 0; k < 2; k++) {
            out->a2a_bytes[k] = least_row(a2a, (size_t)2 * k * L, L);
            out->a2a_count[k] = least_row(a2a, ((size_t)2 * k + 1) * L, L);
        }
        di_free(a2a);
    }
    least_work(per, L, 0, &out->fwd);
    least_work(per, L, 1, &out->bwd);
    least_work(per, L, 2, &out->re[STRATEGY_RECOMPUTE_SELECTIVE]);
    least_work(per, L, 3, &out->re[STRATEGY_RECOMPUTE_FULL]);
    for (uint32_t kind = 0; kind < 2; kind++)
        for (uint32_t mode = 0; mode < 3; mode++) {
            /*
             * The least bytes and counts (reduce-scatters and all-gathers at row, all-reduces
             * at ar), and the most of each term of the ops between (subtracted).
             */
            size_t row = (size_t)(3 * kind + mode) * L, ar = row + (size_t)6 * L;
            double rb = least_row(red, row, L), rn = least_row(redn, row, L);
            double arb = least_row(red, ar, L), arn = least_row(redn, ar, L);
            if (kind == 0) {
                out->bwd_tp_reduce_bytes[mode] = rb;
                out->bwd_tp_reduce_count[mode] = rn;
                out->bwd_tp_ar_bytes[mode] = arb;
                out->bwd_tp_ar_count[mode] = arn;
            } else {
                out->re[mode].tp_reduce_bytes = rb;
                out->re[mode].tp_reduce_count = rn;
                out->re[mode].tp_ar_bytes = arb;
                out->re[mode].tp_ar_count = arn;
            }
            for (size_t k = 0; k < XFORM_LATE_POS; k++) {
                const double *lt = late + k * 12 * L, *ltn = laten + k * 12 * L;
                const double *bt = between + k * 6 * L * BETWEEN_TERMS;
                double most[BETWEEN_TERMS] = {0}; /* 0 when there are no layers (L = 0) */
                double lb = least_row(lt, row, L), ln = least_row(ltn, row, L);
                double alb = least_row(lt, ar, L), aln = least_row(ltn, ar, L);
                for (uint32_t l = 0; l < L; l++)
                    for (int j = 0; j < BETWEEN_TERMS; j++) {
                        double b = bt[(row + l) * BETWEEN_TERMS + j];
                        most[j] = l == 0 || b > most[j] ? b : most[j];
                    }
                xform_late_pair *lp =
                    kind == 0 ? &out->bwd_tp_late[mode][k] : &out->re_tp_late[mode][k];
                lp->bytes = lb;
                lp->count = ln;
                lp->ar_bytes = alb;
                lp->ar_count = aln;
                work_bound_of(most, &lp->between);
                lp->leaf_bytes = most[WORK_TERMS];
                lp->leaf_count = most[WORK_TERMS + 1];
            }
        }
    if (g.ok) {
        out->gemms = g.v;
        out->ngemm = g.n;
        out->nlayer = L;
    } else {
        di_free(g.v);
    }
    di_free(per);
    di_free(red);
    di_free(late);
    di_free(between);
    di_free(leaf);
    di_free(redn);
    di_free(laten);
    di_free(pos);
    di_free(fpos);
    di_free(inl);
    di_free(set);
    di_free(home);
    di_free(re);
    di_free(rest);
    di_free(bseq);
    di_free(rep);
    di_free(bops);
    di_free(fops);
}

/* Per op of c's module, with fused kernels, whether a fused kernel may take it in; caller frees. */
static uint8_t *
op_fusable(const xf_ctx *c, const work_opts *wo)
{
    uint8_t *f = di_xcalloc(c->m->nop ? c->m->nop : 1, 1);
    for (ir_id op = 1; op < c->m->nop; op++) {
        xform_op_bound t;
        if (!c->cost.op_bound(c->cost.ctx, c->m, op, wo->tf32, &t))
            continue;
        if (wo->epilogues && t.epilogue)
            f[op] = FUS_EPI;
        else if (t.fuse != XFORM_FUSE_NONE && !t.own_kernel)
            f[op] = t.fuse == XFORM_FUSE_ROW ? FUS_ROW : FUS_ELEM;
    }
    return f;
}

/* Per value of c's module, its readers (USE_*); caller frees. */
static uint8_t *
value_uses(const xf_ctx *c, const work_opts *wo)
{
    const ir_module *m = c->m;
    uint8_t *used = di_xcalloc(m->nvalue ? m->nvalue : 1, 1);
    for (ir_id op = 1; op < m->nop; op++) {
        const ir_op *o = &m->ops[op];
        int fwd = c->op[op].phase == XF_PH_FORWARD;
        uint8_t bits = fwd ? USE_FWD : USE_BWD;
        if (o->kind == IR_OP_NONE)
            continue;
        if (!fusable(wo, op))
            bits |= fwd ? USE_FWD_KERNEL : USE_BWD_KERNEL;
        else
            bits |= USE_FUSED;
        bits |= wo->fusable != NULL && wo->fusable[op] == FUS_EPI ? USE_EPI : USE_NOT_EPI;
        for (uint32_t i = 0; i < o->ninput; i++)
            used[m->refs[o->inputs + i]] |= bits;
    }
    for (ir_id r = 1; r < m->nregion; r++)
        for (uint32_t i = 0; i < m->regions[r].nresult; i++)
            used[m->regions[r].results[i]] |= USE_BWD | USE_BWD_KERNEL | USE_NOT_EPI;
    return used;
}

int
xform_layer_analysis(const ir_module *m, const strategy *s, const hw_model *hw, unsigned flags,
                     xform_layer_facts *out, di_error *err)
{
    xf_ctx c, c2;
    strategy s2;
    di_error err2;
    uint8_t *full, *used;
    int fused = (flags & XFORM_ANALYSIS_FUSED) != 0;
    work_opts wo = {(flags & XFORM_ANALYSIS_TF32) != 0, fused,
                    fused && !(flags & XFORM_ANALYSIS_NO_GRAD_ACCUM_FUSION), NULL, NULL, NULL,
                    NULL};
    uint8_t *fus = NULL;
    int rc, have2;
    memset(out, 0, sizeof *out);
    if ((rc = analyse(&c, m, s, hw, err)) != 0)
        return rc;
    /*
     * Which dimension of each value a batch split divides: the placements
     * of the same strategy with two microbatches (the same ops and values).
     */
    s2 = *s;
    s2.microbatches = 2;
    have2 = analyse(&c2, m, &s2, hw, &err2) == 0;
    if (have2 && (c2.m->nvalue != c.m->nvalue || c2.m->nop != c.m->nop)) {
        xf_ctx_fini(&c2);
        have2 = 0;
    }
    saved_min(&c, out->saved_min, &out->head_saved, &out->embed_saved);
    out->state_min = state_min(&c, &out->param_min, &out->grad_min, out);
    /* After the analyses that read the recomputation marks: it changes them. */
    full = di_xcalloc(c.m->nop ? c.m->nop : 1, 1);
    if (wo.fused && xform_cost_known(&c.cost) && c.cost.op_bound != NULL)
        wo.fusable = fus = op_fusable(&c, &wo);
    used = value_uses(&c, &wo);
    wo.used = used;
    wo.read = di_xcalloc(c.m->nvalue ? c.m->nvalue : 1, 1);
    layer_work(&c, &wo, have2 ? c2.place : NULL, &out->time, out->work_set_min,
               out->work_set_weights, out->work_set_fixed_at_most, out->work_set_fixed_most,
               full);
    layer_params(&c, full, &out->params, &out->nparams);
    di_free(wo.read);
    di_free(fus);
    di_free(used);
    di_free(full);
    if (have2)
        xf_ctx_fini(&c2);
    xf_ctx_fini(&c);
    return 0;
}

void
xform_layer_facts_fini(xform_layer_facts *f)
{
    di_free(f->params);
    di_free(f->time.gemms);
    memset(f, 0, sizeof *f);
}

void
xform_model_facts_fini(xform_model_facts *f)
{
    di_free(f->arg_kind);
    memset(f, 0, sizeof *f);
}
