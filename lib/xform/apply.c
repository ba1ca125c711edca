/*
 * apply.c: xform_apply, the composition of the transform's passes. Each
 * pass reads what the ones before it computed, in this order:
 *
 *   stages     the model stage of every op (stages.c; needs the analysis of
 *              xf_ctx_init: layers, constants);
 *   tp, dp     the initial placements of the arguments: tensor-parallel
 *              weights (tp.c), then batch data split over the data axis and
 *              the microbatches (dp.c); both need the stages, since an op's
 *              placements depend on the degrees of the group it runs on;
 *   propagate  the placement of every value and what each op needs of its
 *              inputs (shard.c);
 *   pipeline   the distributed module: programs, chunks in the schedule's
 *              order, re-layouts between groups, gradient reductions
 *              (pipeline.c, chunk.c, schedule.c, lower.c).
 *
 * Only the last pass makes IR; the others fill the tables of xf_ctx. In
 * debug builds (DISTIR_DEBUG) the verifier checks the module the passes
 * read before they run and the module they make after the last one, and
 * each analysis pass's tables are checked for what must hold after it;
 * a failure names the pass. The verifier interns the types it infers, so it
 * runs on copies: debug builds make the same output as release builds.
 */
#include "xform/xform_int.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>

/* One transform in progress: the context and, after the last pass, its results. */
typedef struct xf_apply {
    xf_ctx c;
    ir_module *out;
    xform_layout *layout;
} xf_apply;

static int
pass_stages(xf_apply *a)
{
    return xf_assign_stages(&a->c);
}

static int
pass_tp(xf_apply *a)
{
    return xf_annotate_tp(&a->c);
}

static int
pass_dp(xf_apply *a)
{
    return xf_annotate_dp(&a->c);
}

static int
pass_propagate(xf_apply *a)
{
    return xf_propagate(&a->c);
}

static int
pass_pipeline(xf_apply *a)
{
    return xf_pipeline_build(&a->c, &a->out, &a->layout);
}

typedef struct xf_pass {
    const char *name;
    int (*run)(xf_apply *a);
} xf_pass;

static const xf_pass passes[] = {
    {"stages", pass_stages},
    {"tp", pass_tp},
    {"dp", pass_dp},
    {"propagate", pass_propagate},
    {"pipeline", pass_pipeline},
};

#ifdef DISTIR_DEBUG
/* Runs the verifier on a copy of m (it interns types); the first problem in err. */
static int
verify_copy(const ir_module *m, di_error *err)
{
    ir_module *copy = ir_module_clone(m);
    int rc = ir_verify(copy, err);
    ir_module_free(copy);
    return rc;
}

/* Is every placement of the source values one of R, P or a dimension of the value? */
static int
places_valid(const xf_ctx *c, di_error *err)
{
    const ir_module *m = c->m;
    for (ir_id v = 1; v < m->nvalue; v++) {
        const ir_type *t = &m->types[m->values[v].type];
        for (int ax = 0; ax < XF_NAXIS; ax++) {
            int8_t p = c->place[v].a[ax];
            if (p == XF_R || p == XF_P)
                continue;
            if (p < 0 || t->kind != IR_TYPE_TENSOR || (uint32_t)p >= t->rank)
                return di_error_set(err, DI_EINTERNAL,
                                    "value %u has placement %d on axis %d (rank %u)", v, p, ax,
                                    t->rank);
        }
    }
    return 0;
}

/* Does every non-constant op of the function have a model stage in [0, K)? */
static int
stages_valid(const xf_ctx *c, di_error *err)
{
    const ir_region *r = &c->m->regions[c->func];
    for (uint32_t i = 0; i < r->nop; i++) {
        ir_id op = r->ops[i];
        const ir_op *o = &c->m->ops[op];
        if (o->noutput && (c->vflags[o->outputs] & XF_V_CONST))
            continue;
        if (c->op[op].stage < 0 || (uint32_t)c->op[op].stage >= c->K)
            return di_error_set(err, DI_EINTERNAL, "op %u has model stage %d of %u", op,
                                c->op[op].stage, c->K);
    }
    return 0;
}

/* What must hold after pass i (before the first when i < 0). */
static int
check_after(const xf_apply *a, int i, di_error *err)
{
    const char *name = i < 0 ? "" : passes[i].name;
    int rc = 0;
    if (i < 0)
        rc = verify_copy(a->c.m, err);
    else if (strcmp(name, "stages") == 0)
        rc = stages_valid(&a->c, err);
    else if (strcmp(name, "pipeline") == 0)
        rc = verify_copy(a->out, err);
    else
        rc = places_valid(&a->c, err);
    if (rc == 0)
        return 0;
    if (rc == DI_ENOMEM)
        return rc; /* the check could not run: not a broken invariant */
    if (i < 0)
        di_error_prefix(err, "internal error: the module the transform reads does not verify");
    else
        di_error_prefix(err, "internal error after pass '%s'", name);
    err->code = DI_EINTERNAL;
    return DI_EINTERNAL;
}
#endif

static int
apply_layout(const ir_module *m, const xform_analysis *an, const strategy *s, const hw_model *hw,
             uint32_t m_emit, ir_module **out, xform_layout **layout, di_error *err)
{
    xf_apply a;
    size_t nplace;
    int rc;
    *out = NULL;
    if (layout)
        *layout = NULL;
    memset(&a, 0, sizeof a);
    rc = an ? xf_ctx_init_copied(&a.c, an, s, hw, err) : xf_ctx_init(&a.c, m, s, hw, err);
    if (rc != 0)
        return rc;
    if (m_emit > 0 && m_emit < a.c.m_emit)
        a.c.m_emit = m_emit;
    nplace = a.c.m->nvalue ? a.c.m->nvalue : 1;
    a.c.place = di_xmalloc(nplace * sizeof *a.c.place);
    memset(a.c.place, XF_R, nplace * sizeof *a.c.place);
#ifdef DISTIR_DEBUG
    rc = check_after(&a, -1, err);
#endif
    for (size_t i = 0; rc == 0 && i < sizeof passes / sizeof passes[0]; i++) {
        rc = passes[i].run(&a);
        assert(rc != 0 || i + 1 < sizeof passes / sizeof passes[0] || a.out != NULL);
#ifdef DISTIR_DEBUG
        if (rc == 0)
            rc = check_after(&a, (int)i, err);
#endif
    }
    xf_ctx_fini(&a.c);
    if (rc != 0) {
        ir_module_free(a.out);
        xform_layout_free(a.layout);
        return rc;
    }
    *out = a.out;
    if (layout)
        *layout = a.layout;
    else
        xform_layout_free(a.layout);
    return 0;
}

/* The arguments of xform_apply_layout, for its allocation scope. */
struct apply_call {
    const ir_module *m;
    const xform_analysis *an; /* m's analysis, or NULL */
    const strategy *s;
    const hw_model *hw;
    uint32_t m_emit;
    ir_module **out;
    xform_layout **layout;
    di_error *err;
};

static int
apply_call_run(void *arg)
{
    struct apply_call *c = arg;
    return apply_layout(c->m, c->an, c->s, c->hw, c->m_emit, c->out, c->layout, c->err);
}

/* The transform runs in an allocation scope: out-of-memory anywhere in it is DI_ENOMEM. */
static int
apply_scoped(struct apply_call *c)
{
    int rc = di_scope_run(apply_call_run, c, c->err);
    if (rc != 0) {
        *c->out = NULL;
        if (c->layout)
            *c->layout = NULL;
    }
    return rc;
}

int
xform_apply_layout(const ir_module *m, const strategy *s, const hw_model *hw,
                   ir_module **out, xform_layout **layout, di_error *err)
{
    struct apply_call c = {m, NULL, s, hw, 0, out, layout, err};
    return apply_scoped(&c);
}

int
xform_apply(const ir_module *m, const strategy *s, const hw_model *hw, ir_module **out,
            di_error *err)
{
    return xform_apply_layout(m, s, hw, out, NULL, err);
}

int
xform_apply_partial(const ir_module *m, const strategy *s, const hw_model *hw, uint32_t microbatches,
                    ir_module **out, di_error *err)
{
    struct apply_call c = {m, NULL, s, hw, microbatches ? microbatches : 1, out, NULL, err};
    return apply_scoped(&c);
}

int
xform_apply_analyzed(const xform_analysis *a, const strategy *s, const hw_model *hw,
                     uint32_t microbatches, ir_module **out, di_error *err)
{
    struct apply_call c = {a->c.m, a, s, hw, microbatches, out, NULL, err};
    return apply_scoped(&c);
}

/* The arguments of xform_stage_layers, for its allocation scope. */
struct stage_layers_call {
    const ir_module *m;
    const strategy *s;
    const hw_model *hw;
    uint32_t **out;
    uint32_t *ngroup;
    di_error *err;
    int per_model_stage; /* count per model stage, not per group */
};

static int
stage_layers_run(void *arg)
{
    struct stage_layers_call *a = arg;
    xf_ctx c;
    int rc;
    if ((rc = xf_ctx_init(&c, a->m, a->s, a->hw, a->err)) != 0)
        return rc;
    if ((rc = xf_assign_stages(&c)) == 0) {
        uint32_t k = a->per_model_stage ? c.K : c.pp;
        uint32_t *n = di_xcalloc(k, sizeof *n);
        for (uint32_t l = 0; l < c.nlayer; l++)
            if (c.layer_stage[l] >= 0)
                n[(uint32_t)c.layer_stage[l] % k]++;
        *a->out = n;
        *a->ngroup = k;
    }
    xf_ctx_fini(&c);
    return rc;
}

int
xform_stage_layers(const ir_module *m, const strategy *s, const hw_model *hw, uint32_t **out,
                   uint32_t *ngroup, di_error *err)
{
    struct stage_layers_call a = {m, s, hw, out, ngroup, err, 0};
    *out = NULL;
    *ngroup = 0;
    return di_scope_run(stage_layers_run, &a, err);
}

int
xform_model_stage_layers(const ir_module *m, const strategy *s, const hw_model *hw,
                         uint32_t **out, uint32_t *nstage, di_error *err)
{
    struct stage_layers_call a = {m, s, hw, out, nstage, err, 1};
    *out = NULL;
    *nstage = 0;
    return di_scope_run(stage_layers_run, &a, err);
}

/*
 * The placements sharding propagation decides for training step m under s,
 * one per value of m (the global view's tests compare xform_shard with
 * them). m must not be forward-only (the transform would differentiate a
 * copy with other value ids).
 */
int
xf_placements(const ir_module *m, const strategy *s, const hw_model *hw, xf_place **place,
              di_error *err)
{
    xf_apply a;
    int rc;
    *place = NULL;
    memset(&a, 0, sizeof a);
    if ((rc = xf_ctx_init(&a.c, m, s, hw, err)) != 0)
        return rc;
    if (a.c.owned) {
        xf_ctx_fini(&a.c);
        return di_error_set(err, DI_EINVAL, "the module is forward-only");
    }
    a.c.place = di_xmalloc((m->nvalue ? m->nvalue : 1) * sizeof *a.c.place);
    memset(a.c.place, XF_R, (m->nvalue ? m->nvalue : 1) * sizeof *a.c.place);
    for (size_t i = 0; rc == 0 && i + 1 < sizeof passes / sizeof passes[0]; i++)
        rc = passes[i].run(&a);
    if (rc == 0) {
        *place = a.c.place;
        a.c.place = NULL;
    }
    xf_ctx_fini(&a.c);
    return rc;
}
