/*
 * global.c: the global view for users (docs/transforms.md, "The global
 * view"). A module written sequentially, with a few values annotated by
 * dist.annotate_sharding, becomes
 *
 *   1. (xform_shard) a global-view module: every tensor a !dist.dtensor on a
 *      mesh with a placement per mesh axis, chosen by the factor rules of
 *      shard.c (the rule table xform_apply uses), the annotations removed and
 *      a dist.redistribute wherever a value's placement differs from what its
 *      user needs; a called function is specialised per distinct placement of
 *      its arguments (one copy when call sites agree);
 *   2. (xform_lower_global) a local-view module: the ops of each mesh run in
 *      a dist.pmap over that mesh on local shards, a called function becomes
 *      a local function that a pmap calls, and each redistribute becomes
 *      mesh-form collectives on the axes where the placement changes
 *      (all_reduce, reduce_scatter, all_gather, all_to_all, all_slice), or a
 *      dist.redistribute between meshes.
 *
 * Propagation (per function, given what is known of its arguments) runs to a
 * fixpoint, forward and backward over the ops: on each mesh axis, an
 * operand's known split S[d] selects the factor of the op's rule that d maps
 * to, and every operand whose placement on that axis is still unknown gets
 * what the factor implies (S[its dimension], P for a result that sums over
 * it, R otherwise). Annotated values are fixed. Then each op, in order,
 * picks per axis the candidate (partial sums passing through, a factor split
 * by an input as it comes or by a result as it is wanted, or none) that
 * moves the fewest bytes in the redistributions it implies.
 */
#include "xform/xform_int.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define G_UNK ((int8_t)-4)
#define G_MAXDEPTH 16

/* A placement in the global view: a mesh (0 unknown) and one entry per mesh axis. */
typedef struct gpl {
    ir_id mesh;
    int8_t a[IR_MAX_RANK];
} gpl;

/* A called function specialised for its arguments' placements. */
typedef struct gspec {
    ir_id func;   /* source function */
    gpl *args;    /* as called */
    gpl *res;     /* as returned */
    ir_id out;    /* function in the output module */
} gspec;

typedef struct geng {
    const ir_module *m;
    ir_module *out;
    di_error *err;
    gspec *specs;
    uint32_t nspec, cspec;
    ir_id defmesh; /* the module's first mesh: where unannotated values go */
    uint32_t depth;
} geng;

static int
is_tensor(const ir_module *m, ir_id v)
{
    return m->types[m->values[v].type].kind == IR_TYPE_TENSOR;
}

static void
gpl_unknown(gpl *p)
{
    p->mesh = 0;
    memset(p->a, G_UNK, sizeof p->a);
}

static int
gpl_eq(const ir_module *m, const gpl *x, const gpl *y)
{
    if (x->mesh != y->mesh)
        return 0;
    return x->mesh == 0 || memcmp(x->a, y->a, m->meshes[x->mesh].rank) == 0;
}

/* Fills what is unknown in dst from src (same mesh, or dst's mesh unknown). */
static int
gpl_merge(const ir_module *m, gpl *dst, const gpl *src)
{
    int changed = 0;
    if (src->mesh == 0)
        return 0;
    if (dst->mesh == 0) {
        dst->mesh = src->mesh;
        changed = 1;
    }
    if (dst->mesh != src->mesh)
        return changed;
    for (uint32_t a = 0; a < m->meshes[src->mesh].rank; a++)
        if (dst->a[a] == G_UNK && src->a[a] != G_UNK) {
            dst->a[a] = src->a[a];
            changed = 1;
        }
    return changed;
}

/* Unknown axes become R; an unknown mesh the default one. */
static void
gpl_settle(const geng *e, gpl *p)
{
    if (p->mesh == 0)
        p->mesh = e->defmesh;
    for (uint32_t a = 0; a < IR_MAX_RANK; a++)
        if (p->a[a] == G_UNK)
            p->a[a] = IR_PLACE_R;
}

/* The placement of annotate_sharding / redistribute op's attributes. */
static int
attr_gpl(const ir_module *m, ir_id op, gpl *p)
{
    const ir_attr *ma = ir_op_attr(m, op, "mesh"), *pa = ir_op_attr(m, op, "placement");
    int64_t pl[IR_MAX_RANK];
    uint32_t n;
    gpl_unknown(p);
    if (ma == NULL || ma->kind != IR_ATTR_MESH || pa == NULL || pa->kind != IR_ATTR_STRING ||
        ir_placement_parse(ir_str_get(m, pa->s), pl, IR_MAX_RANK, &n) != 0 ||
        n != m->meshes[ma->s].rank)
        return -1;
    p->mesh = ma->s;
    for (uint32_t a = 0; a < n; a++)
        p->a[a] = (int8_t)pl[a];
    return 0;
}

/* The placement of a value's dtensor type (mesh 0 for other types). */
static void
type_gpl(const ir_module *m, ir_id v, gpl *p)
{
    const ir_type *t = &m->types[m->values[v].type];
    gpl_unknown(p);
    if (t->kind != IR_TYPE_TENSOR || t->mesh == 0)
        return;
    p->mesh = t->mesh;
    for (uint32_t a = 0; a < m->meshes[t->mesh].rank; a++)
        p->a[a] = (int8_t)m->ints[t->placements + a];
}

/* May factor f of rule r split a mesh axis of size n? */
static int
factor_splits(const ir_module *m, ir_id op, const rule *r, int f, uint32_t n)
{
    if (f < 0 || (uint32_t)f >= r->nf || r->kind[f] == F_WHOLE || r->kind[f] == F_INNER)
        return 0;
    if (r->kind[f] == F_VOCAB && m->ops[op].kind != IR_OP_GATHER &&
        m->ops[op].kind != IR_OP_GATHERGRAD && m->ops[op].kind != IR_OP_SCELOSS &&
        m->ops[op].kind != IR_OP_SCELOSSGRAD)
        return 0;
    return xf_rule_divides(r, f, n);
}

/* Operand k of op (inputs, then results). */
static ir_id
operand(const ir_module *m, ir_id op, uint32_t k)
{
    const ir_op *o = &m->ops[op];
    return k < o->ninput ? m->refs[o->inputs + k] : o->outputs + (k - o->ninput);
}

/* What factor f implies for operand k that lacks a placement. */
static int8_t
implied(const ir_module *m, ir_id op, const rule *r, uint32_t k, int f)
{
    int d = f >= 0 ? xf_rule_dim(r, k, f) : -1;
    if (d >= 0)
        return (int8_t)d;
    if (f >= 0 && k >= r->nin &&
        (r->kind[f] == F_SUM || r->kind[f] == F_MEAN ||
         (r->kind[f] == F_VOCAB && m->ops[op].kind == IR_OP_GATHER)))
        return IR_PLACE_PSUM;
    return IR_PLACE_R;
}

/* ---- propagation (the fixpoint of desired placements) ---- */

static int propagate(geng *e, ir_id f, const gpl *args, gpl *des);

/* One op of the fixpoint; returns 1 when something became known. */
static int
visit(geng *e, ir_id op, gpl *des, int forward)
{
    const ir_module *m = e->m;
    const ir_op *o = &m->ops[op];
    uint32_t nk = o->ninput + o->noutput;
    ir_id mesh = 0;
    int changed = 0;
    rule r;
    if (o->kind == IR_OP_ANNOTATE) {
        ir_id in = m->refs[o->inputs];
        return gpl_merge(m, &des[in], &des[o->outputs]);
    }
    if (o->kind == IR_OP_REDISTRIBUTE)
        return 0; /* the input keeps its own placement */
    if (o->kind == IR_OP_CALL) {
        const ir_region *fr = &m->regions[o->body];
        gpl *a = di_xcalloc(fr->narg + 1, sizeof *a);
        gpl *cd = di_xcalloc(m->nvalue, sizeof *cd);
        int rc;
        for (uint32_t i = 0; i < fr->narg; i++)
            a[i] = des[m->refs[o->inputs + i]];
        rc = propagate(e, o->body, a, cd);
        if (rc == 0) {
            for (uint32_t i = 0; i < fr->narg; i++)
                changed |= gpl_merge(m, &des[m->refs[o->inputs + i]], &cd[fr->args[i]]);
            for (uint32_t i = 0; i < fr->nresult; i++) {
                gpl p = cd[fr->results[i]];
                for (uint32_t x = 0; x < IR_MAX_RANK; x++)
                    if (p.a[x] == IR_PLACE_PSUM)
                        p.a[x] = IR_PLACE_R;
                changed |= gpl_merge(m, &des[o->outputs + i], &p);
            }
        }
        di_free(a);
        di_free(cd);
        return rc < 0 ? rc : changed;
    }
    for (uint32_t k = 0; k < nk && !mesh; k++)
        if (is_tensor(m, operand(m, op, k)))
            mesh = des[operand(m, op, k)].mesh;
    if (mesh == 0)
        return 0;
    for (uint32_t k = 0; k < nk; k++) {
        ir_id v = operand(m, op, k);
        if (is_tensor(m, v) && des[v].mesh == 0) {
            des[v].mesh = mesh;
            changed = 1;
        }
    }
    xf_rule_build(m, op, &r);
    if (r.nin + r.nout != nk)
        return changed;
    for (uint32_t a = 0; a < m->meshes[mesh].rank; a++) {
        uint32_t n = (uint32_t)ir_mesh_shape(m, mesh)[a];
        int f = -1, allin = 1;
        xf_place in[XF_MAXO];
        for (uint32_t j = 0; j < nk && f < 0; j++) {
            uint32_t k = forward ? j : nk - 1 - j;
            ir_id v = operand(m, op, k);
            int8_t p = des[v].mesh == mesh ? des[v].a[a] : G_UNK;
            if (XF_IS_S(p) && p < (int8_t)r.rank[k] && factor_splits(m, op, &r, r.map[k][p], n))
                f = r.map[k][p];
        }
        if (f < 0) {
            /* Partial sums pass through ops linear in them. */
            for (uint32_t k = 0; k < r.nin; k++) {
                ir_id v = operand(m, op, k);
                in[k].a[0] = des[v].mesh == mesh ? des[v].a[a] : G_UNK;
                if (in[k].a[0] == G_UNK)
                    allin = 0;
            }
            if (!allin || !xf_rule_passes(&r, 0, in))
                continue;
            for (uint32_t k = r.nin; k < nk; k++) {
                ir_id v = operand(m, op, k);
                if (des[v].mesh == mesh && des[v].a[a] == G_UNK) {
                    des[v].a[a] = IR_PLACE_PSUM;
                    changed = 1;
                }
            }
            continue;
        }
        for (uint32_t k = 0; k < nk; k++) {
            ir_id v = operand(m, op, k);
            if (!is_tensor(m, v) || des[v].mesh != mesh || des[v].a[a] != G_UNK)
                continue;
            des[v].a[a] = implied(m, op, &r, k, f);
            changed = 1;
        }
    }
    return changed;
}

/*
 * The desired placement of every value of function f (des, indexed by value
 * id) given what is known of its arguments; annotations are fixed first.
 */
static int
propagate(geng *e, ir_id f, const gpl *args, gpl *des)
{
    const ir_module *m = e->m;
    const ir_region *fr = &m->regions[f];
    int rc = 0;
    if (++e->depth > G_MAXDEPTH) {
        e->depth--;
        return di_error_set(e->err, DI_EUNSUPPORTED, "calls nest more than %d deep",
                            G_MAXDEPTH);
    }
    for (ir_id v = 0; v < m->nvalue; v++)
        gpl_unknown(&des[v]);
    for (uint32_t i = 0; i < fr->narg; i++) {
        ir_id v = fr->args[i];
        type_gpl(m, v, &des[v]);
        if (args)
            gpl_merge(m, &des[v], &args[i]);
    }
    for (uint32_t i = 0; i < fr->nop; i++) {
        ir_id op = fr->ops[i];
        int kind = m->ops[op].kind;
        if ((kind == IR_OP_ANNOTATE || kind == IR_OP_REDISTRIBUTE) &&
            attr_gpl(m, op, &des[m->ops[op].outputs]) != 0) {
            e->depth--;
            return di_error_set(e->err, DI_EVERIFY, "%s: bad mesh or placement",
                                ir_op_label(m, op).s);
        }
        for (uint32_t k = 0; k < m->ops[op].noutput; k++)
            if (des[m->ops[op].outputs + k].mesh == 0)
                type_gpl(m, m->ops[op].outputs + k, &des[m->ops[op].outputs + k]);
    }
    for (int iter = 0; iter < 16; iter++) {
        int changed = 0;
        for (uint32_t i = 0; i < fr->nop && rc >= 0; i++) {
            rc = visit(e, fr->ops[i], des, 1);
            changed |= rc > 0;
        }
        for (uint32_t i = fr->nop; i > 0 && rc >= 0; i--) {
            rc = visit(e, fr->ops[i - 1], des, 0);
            changed |= rc > 0;
        }
        if (rc < 0 || !changed)
            break;
    }
    e->depth--;
    return rc < 0 ? rc : 0;
}

/* ---- decisions and the global-view module ---- */

/* Bytes a conversion on one mesh axis of size n moves (per device), or INFINITY. */
static double
conv_bytes(int8_t from, int8_t to, double bytes, uint32_t n)
{
    double share = (double)(n - 1) / n;
    if (from == to || (from == IR_PLACE_R && XF_IS_S(to)))
        return 0;
    if (from == IR_PLACE_PSUM && to == IR_PLACE_R)
        return 2 * share * bytes;
    if (from == IR_PLACE_PSUM && XF_IS_S(to))
        return share * bytes;
    if (XF_IS_S(from) && to == IR_PLACE_R)
        return share * bytes;
    if (XF_IS_S(from) && XF_IS_S(to))
        return share * bytes / n;
    return INFINITY;
}

/* The state of one function being specialised. */
typedef struct gfun {
    geng *e;
    ir_id src, dst;  /* source function, output function */
    gpl *des, *act;  /* per source value: desired, as produced */
    ir_id *map;      /* per source value: output value (as produced) */
    struct gconv { ir_id src; gpl pl; ir_id v; } *conv;
    uint32_t nconv, cconv;
} gfun;

static const char *
gpl_str(const ir_module *m, const gpl *p, char *buf, size_t n)
{
    int64_t pl[IR_MAX_RANK];
    uint32_t r = m->meshes[p->mesh].rank;
    for (uint32_t a = 0; a < r; a++)
        pl[a] = p->a[a];
    return ir_placement_format(pl, r, buf, n);
}

/* The output module's dtensor type of source value v with placement p. */
static ir_id
dtype_of(gfun *g, ir_id v, const gpl *p)
{
    const ir_module *m = g->e->m;
    const ir_type *t = &m->types[m->values[v].type];
    int64_t dims[IR_MAX_RANK], pl[IR_MAX_RANK];
    memcpy(dims, ir_type_dims(m, m->values[v].type), t->rank * sizeof *dims);
    for (uint32_t a = 0; a < m->meshes[p->mesh].rank; a++)
        pl[a] = p->a[a];
    return ir_type_dtensor(g->e->out, (ir_dtype)t->dtype, t->rank, dims, p->mesh, pl);
}

/* Source value v as placement p in the output function (a redistribute when it differs). */
static ir_id
converted(gfun *g, ir_id v, const gpl *p)
{
    const ir_module *m = g->e->m;
    char buf[128];
    ir_id op, ty, in;
    if (!is_tensor(m, v) || gpl_eq(m, &g->act[v], p))
        return g->map[v];
    for (uint32_t i = 0; i < g->nconv; i++)
        if (g->conv[i].src == v && gpl_eq(m, &g->conv[i].pl, p))
            return g->conv[i].v;
    in = g->map[v];
    if (p->mesh != g->act[v].mesh) {
        /* Partial values are summed on their own mesh before they move to another. */
        gpl whole = g->act[v];
        int partial = 0;
        for (uint32_t a = 0; a < m->meshes[whole.mesh].rank; a++)
            if (whole.a[a] == IR_PLACE_PSUM || whole.a[a] == IR_PLACE_PMAX) {
                whole.a[a] = IR_PLACE_R;
                partial = 1;
            }
        if (partial)
            in = converted(g, v, &whole);
    }
    ty = dtype_of(g, v, p);
    {
        /* Named after the value and where it goes: %lv3.R, %x.S0.R, %lv0.mesh1.R. */
        const char *src = ir_str_get(m, m->values[v].name);
        char name[192];
        size_t w = (size_t)snprintf(name, sizeof name, "%s", *src ? src : "v");
        if (p->mesh != g->act[v].mesh && w < sizeof name)
            w += (size_t)snprintf(name + w, sizeof name - w, ".%s",
                                  ir_str_get(m, m->meshes[p->mesh].name));
        for (uint32_t a = 0; a < m->meshes[p->mesh].rank && w < sizeof name; a++) {
            int8_t x = p->a[a];
            if (XF_IS_S(x))
                w += (size_t)snprintf(name + w, sizeof name - w, ".S%d", x);
            else
                w += (size_t)snprintf(name + w, sizeof name - w, ".%s",
                                      x == IR_PLACE_R ? "R" : x == IR_PLACE_PMAX ? "Pmax" : "P");
        }
        const char *names[1] = {name};
        op = ir_op_add(g->e->out, g->dst, IR_OP_REDISTRIBUTE, 1, &in, 1, &ty, names);
    }
    ir_op_set_mesh(g->e->out, op, "mesh", p->mesh);
    ir_op_set_string(g->e->out, op, "placement", gpl_str(m, p, buf, sizeof buf));
    DI_GROW(&g->conv, &g->cconv, g->nconv + 1);
    g->conv[g->nconv].src = v;
    g->conv[g->nconv].pl = *p;
    g->conv[g->nconv].v = ir_op_output(g->e->out, op, 0);
    return g->conv[g->nconv++].v;
}

static int specialise(geng *e, ir_id f, const gpl *args, uint32_t *spec);

/* Does placement p split every dimension of value v evenly? Else an error naming it. */
static int
check_even(gfun *g, ir_id v, const gpl *p)
{
    const ir_module *m = g->e->m;
    const int64_t *dims = ir_type_dims(m, m->values[v].type), *shape = ir_mesh_shape(m, p->mesh);
    for (uint32_t d = 0; d < m->types[m->values[v].type].rank; d++) {
        int64_t parts = 1;
        for (uint32_t a = 0; a < m->meshes[p->mesh].rank; a++)
            if (p->a[a] == (int8_t)d)
                parts *= shape[a];
        if (dims[d] % parts != 0)
            return di_error_set(g->e->err, DI_ESTRATEGY,
                                "%%%s: dimension %u (size %lld) does not divide over the %lld "
                                "devices that split it (uneven shards are not supported)",
                                ir_str_get(m, m->values[v].name), d, (long long)dims[d],
                                (long long)parts);
    }
    return 0;
}

/* Decides op's placements per axis and emits it into the output function. */
static int
decide(gfun *g, ir_id op)
{
    geng *e = g->e;
    const ir_module *m = e->m;
    const ir_op *o = &m->ops[op];
    uint32_t nk = o->ninput + o->noutput;
    gpl req[XF_MAXO], res[XF_MAXO];
    ir_id ins[XF_MAXO], tys[XF_MAXO], mesh = 0, nop;
    const char *names[XF_MAXO];
    double scale = 1;
    int scale_in = -1;
    rule r;
    if (o->kind == IR_OP_ANNOTATE || o->kind == IR_OP_REDISTRIBUTE) {
        ir_id in = m->refs[o->inputs];
        int rc = check_even(g, o->outputs, &g->des[o->outputs]);
        if (rc != 0)
            return rc;
        g->act[o->outputs] = g->des[o->outputs];
        g->map[o->outputs] = converted(g, in, &g->des[o->outputs]);
        return 0;
    }
    if (nk > XF_MAXO)
        return di_error_set(e->err, DI_EUNSUPPORTED, "%s: more than %d operands",
                            ir_op_label(m, op).s, XF_MAXO);
    for (uint32_t k = 0; k < nk; k++)
        if (!is_tensor(m, operand(m, op, k)))
            return di_error_set(e->err, DI_EUNSUPPORTED,
                                "%s: an operand is not a tensor; the global view takes tensors",
                                ir_op_label(m, op).s);
    if (o->kind == IR_OP_CALL) {
        const ir_region *fr = &m->regions[o->body];
        gpl *a = di_xcalloc(fr->narg + 1, sizeof *a);
        uint32_t sp = 0;
        int rc;
        for (uint32_t i = 0; i < o->ninput; i++) {
            a[i] = g->act[m->refs[o->inputs + i]];
            ins[i] = g->map[m->refs[o->inputs + i]];
        }
        rc = specialise(e, o->body, a, &sp);
        di_free(a);
        if (rc != 0)
            return rc;
        for (uint32_t i = 0; i < o->noutput; i++) {
            g->act[o->outputs + i] = e->specs[sp].res[i];
            tys[i] = dtype_of(g, o->outputs + i, &e->specs[sp].res[i]);
            names[i] = ir_str_get(m, m->values[o->outputs + i].name);
        }
        nop = ir_op_add(e->out, g->dst, IR_OP_CALL, o->ninput, ins, o->noutput, tys, names);
        ir_op_set_callee(e->out, nop, e->specs[sp].out);
        for (uint32_t i = 0; i < o->noutput; i++)
            g->map[o->outputs + i] = ir_op_output(e->out, nop, i);
        return 0;
    }
    /* The op's mesh: its first result's as wanted, else its first input's as made. */
    for (uint32_t k = o->ninput; k < nk && !mesh; k++)
        mesh = g->des[operand(m, op, k)].mesh;
    for (uint32_t k = 0; k < o->ninput && !mesh; k++)
        mesh = g->act[operand(m, op, k)].mesh;
    if (!mesh)
        mesh = e->defmesh;
    xf_rule_build(m, op, &r);
    for (uint32_t k = 0; k < nk; k++) {
        gpl_unknown(&req[k]);
        req[k].mesh = mesh;
        memset(req[k].a, IR_PLACE_R, sizeof req[k].a);
    }
    for (uint32_t a = 0; a < m->meshes[mesh].rank; a++) {
        uint32_t n = (uint32_t)ir_mesh_shape(m, mesh)[a];
        int cand[2 * XF_MAXO + 2], nc = 0, best = -2;
        double best_cost = INFINITY;
        xf_place in[XF_MAXO];
        int pass = r.nin + r.nout == nk;
        for (uint32_t k = 0; k < r.nin && pass; k++) {
            const gpl *p = &g->act[operand(m, op, k)];
            in[k].a[0] = p->mesh == mesh ? p->a[a] : IR_PLACE_R;
        }
        if (pass && xf_rule_passes(&r, 0, in))
            cand[nc++] = -1; /* partial sums through */
        for (uint32_t k = 0; k < nk && r.nin + r.nout == nk; k++) {
            ir_id v = operand(m, op, k);
            const gpl *p = k < o->ninput ? &g->act[v] : &g->des[v];
            int f;
            if (p->mesh != mesh || !XF_IS_S(p->a[a]) || p->a[a] >= (int8_t)r.rank[k])
                continue;
            f = r.map[k][p->a[a]];
            if (factor_splits(m, op, &r, f, n))
                cand[nc++] = f;
        }
        cand[nc++] = -2; /* nothing split */
        for (int c = 0; c < nc; c++) {
            double cost = 0;
            for (uint32_t k = 0; k < nk; k++) {
                ir_id v = operand(m, op, k);
                double bytes = (double)ir_type_bytes(m, m->values[v].type);
                int8_t want, have;
                if (k < o->ninput) {
                    have = g->act[v].mesh == mesh ? g->act[v].a[a] : IR_PLACE_R;
                    want =
                        cand[c] == -1 ? have : implied(m, op, &r, k, cand[c] >= 0 ? cand[c] : -1);
                } else {
                    have = cand[c] == -1 ? IR_PLACE_PSUM : implied(m, op, &r, k, cand[c]);
                    want = g->des[v].mesh == mesh ? g->des[v].a[a] : have;
                    if (want == G_UNK)
                        want = have == IR_PLACE_PSUM ? IR_PLACE_R : have;
                }
                cost += conv_bytes(have, want, bytes, n);
            }
            if (cost < best_cost) {
                best_cost = cost;
                best = cand[c];
            }
        }
        for (uint32_t k = 0; k < nk; k++) {
            ir_id v = operand(m, op, k);
            if (best == -1)
                req[k].a[a] = k < o->ninput ? (g->act[v].mesh == mesh ? g->act[v].a[a] : IR_PLACE_R)
                                            : IR_PLACE_PSUM;
            else
                req[k].a[a] = implied(m, op, &r, k, best);
        }
        if (best >= 0 && r.kind[best] == F_MEAN) {
            scale /= n;
        } else if (best >= 0 && r.kind[best] == F_MEANG && r.scale_in >= 0) {
            scale /= n;
            scale_in = r.scale_in;
        }
    }
    /* Every local shape must exist (two axes may split one dimension). */
    for (uint32_t k = 0; k < nk; k++) {
        int rc = check_even(g, operand(m, op, k), &req[k]);
        if (rc != 0) {
            di_error_prefix(e->err, "%s, %s %u", ir_op_label(m, op).s,
                            k < o->ninput ? "input" : "result", k < o->ninput ? k : k - o->ninput);
            return rc;
        }
    }
    for (uint32_t k = 0; k < o->ninput; k++)
        ins[k] = converted(g, operand(m, op, k), &req[k]);
    for (uint32_t k = 0; k < o->noutput; k++) {
        ir_id v = o->outputs + k;
        res[k] = req[o->ninput + k];
        g->act[v] = res[k];
        tys[k] = dtype_of(g, v, &res[k]);
        names[k] = ir_str_get(m, m->values[v].name);
    }
    nop = ir_op_add(e->out, g->dst, o->kind, o->ninput, ins, o->noutput, tys, names);
    if (o->kind == IR_OP_CONSTANT) {
        /* The value becomes a replicated distributed tensor (no device). */
        const ir_attr *va = ir_op_attr(m, op, "value");
        xf_copy_attrs(e->out, nop, m, op, "value", "device");
        if (va == NULL || va->kind != IR_ATTR_TENSOR)
            return di_error_set(e->err, DI_EVERIFY, "%s: no value", ir_op_label(m, op).s);
        ir_op_set_tensor(e->out, nop, "value", tys[0], m->data + va->off, va->n);
    } else {
        xf_copy_attrs(e->out, nop, m, op, NULL, NULL);
    }
    if (o->kind == IR_OP_OPAQUE)
        e->out->ops[nop].opaque = ir_str(e->out, ir_str_get(m, o->opaque));
    e->out->ops[nop].name = o->name ? ir_str(e->out, ir_str_get(m, o->name)) : 0;
    if (scale != 1) {
        /* A mean over a split factor: each device's part is scaled (lowering multiplies). */
        ir_op_set_float(e->out, nop, "dist.scale", scale);
        if (scale_in >= 0)
            ir_op_set_int(e->out, nop, "dist.scale_in", scale_in);
    }
    for (uint32_t k = 0; k < o->noutput; k++)
        g->map[o->outputs + k] = ir_op_output(e->out, nop, k);
    return 0;
}

/* Emits function f of the source for arguments placed as args (NULL: as propagated). */
static int
emit_function(geng *e, ir_id f, const gpl *args, const char *name, ir_id *out_func, gpl *res)
{
    const ir_module *m = e->m;
    const ir_region *fr = &m->regions[f];
    gfun g;
    int rc;
    memset(&g, 0, sizeof g);
    g.e = e;
    g.src = f;
    g.des = di_xcalloc(m->nvalue, sizeof *g.des);
    g.act = di_xcalloc(m->nvalue, sizeof *g.act);
    g.map = di_xcalloc(m->nvalue, sizeof *g.map);
    rc = propagate(e, f, args, g.des);
    if (rc == 0) {
        g.dst = *out_func = ir_func_new(e->out, name);
        for (uint32_t i = 0; i < fr->narg; i++) {
            ir_id v = fr->args[i];
            if (!is_tensor(m, v)) {
                rc = di_error_set(e->err, DI_EUNSUPPORTED,
                                  "@%s: argument %u is not a tensor; the global view takes "
                                  "tensors",
                                  ir_str_get(m, fr->name), i);
                break;
            }
            g.act[v] = g.des[v];
            gpl_settle(e, &g.act[v]);
            if ((rc = check_even(&g, v, &g.act[v])) != 0)
                break;
            g.map[v] = ir_region_add_arg(e->out, g.dst, dtype_of(&g, v, &g.act[v]),
                                         ir_str_get(m, m->values[v].name));
            if (m->values[v].init) {
                size_t len;
                const void *d = ir_value_init(m, v, &len);
                ir_value_set_init(e->out, g.map[v], d, len);
            }
        }
    }
    for (ir_id v = 1; v < m->nvalue; v++)
        gpl_settle(e, &g.des[v]);
    for (uint32_t i = 0; i < fr->nop && rc == 0; i++)
        rc = decide(&g, fr->ops[i]);
    for (uint32_t i = 0; i < fr->nresult && rc == 0; i++) {
        ir_id v = fr->results[i];
        gpl want = g.act[v];
        for (uint32_t a = 0; a < IR_MAX_RANK; a++)
            if (want.a[a] == IR_PLACE_PSUM || want.a[a] == IR_PLACE_PMAX)
                want.a[a] = IR_PLACE_R;
        if (g.des[v].mesh == want.mesh)
            for (uint32_t a = 0; a < m->meshes[want.mesh].rank; a++)
                if (XF_IS_S(g.des[v].a[a]) || g.des[v].a[a] == IR_PLACE_R)
                    want.a[a] = g.des[v].a[a];
        if (res)
            res[i] = want;
        ir_region_add_result(e->out, g.dst, converted(&g, v, &want));
    }
    di_free(g.des);
    di_free(g.act);
    di_free(g.map);
    di_free(g.conv);
    return rc;
}

/* The specialisation of f for args (made on first use). */
static int
specialise(geng *e, ir_id f, const gpl *args, uint32_t *spec)
{
    const ir_module *m = e->m;
    const ir_region *fr = &m->regions[f];
    uint32_t copies = 0;
    char name[160];
    gspec *s;
    int rc;
    for (uint32_t i = 0; i < e->nspec; i++) {
        int same = e->specs[i].func == f;
        for (uint32_t k = 0; k < fr->narg && same; k++)
            same = gpl_eq(m, &e->specs[i].args[k], &args[k]);
        if (same) {
            *spec = i;
            return 0;
        }
        copies += e->specs[i].func == f;
    }
    if (e->depth >= G_MAXDEPTH)
        return di_error_set(e->err, DI_EUNSUPPORTED, "calls nest more than %d deep", G_MAXDEPTH);
    if (copies == 0)
        snprintf(name, sizeof name, "%s", ir_str_get(m, fr->name));
    else
        snprintf(name, sizeof name, "%s.%u", ir_str_get(m, fr->name), copies);
    DI_GROW(&e->specs, &e->cspec, e->nspec + 1);
    s = &e->specs[e->nspec];
    memset(s, 0, sizeof *s);
    s->func = f;
    s->args = di_xcalloc(fr->narg + 1, sizeof *s->args);
    s->res = di_xcalloc(fr->nresult + 1, sizeof *s->res);
    memcpy(s->args, args, fr->narg * sizeof *args);
    *spec = e->nspec++;
    e->depth++;
    {
        ir_id outf;
        gpl *res = di_xcalloc(fr->nresult + 1, sizeof *res);
        rc = emit_function(e, f, args, name, &outf, res);
        s = &e->specs[*spec];
        s->out = outf;
        memcpy(s->res, res, fr->nresult * sizeof *res);
        di_free(res);
    }
    e->depth--;
    return rc;
}

int
xform_shard(const ir_module *m, ir_module **out, di_error *err)
{
    geng e;
    ir_id entry = ir_module_entry(m), outf;
    int rc;
    *out = NULL;
    if (entry == 0)
        return di_error_set(err, DI_EINVAL, "the module has no function");
    if (m->nmesh <= 1)
        return di_error_set(err, DI_EINVAL,
                            "the module declares no mesh (dist.mesh @name = <[n]>) to shard on");
    memset(&e, 0, sizeof e);
    e.m = m;
    e.err = err;
    e.defmesh = 1;
    e.out = ir_module_new();
    for (ir_id k = 1; k < m->nmesh; k++) {
        const ir_mesh *ms = &m->meshes[k];
        ir_mesh_add(e.out, ir_str_get(m, ms->name), ms->rank, ir_mesh_shape(m, k),
                    ir_mesh_devices(m, k));
    }
    rc = emit_function(&e, entry, NULL, ir_str_get(m, m->regions[entry].name), &outf, NULL);
    for (uint32_t i = 0; i < e.nspec; i++) {
        di_free(e.specs[i].args);
        di_free(e.specs[i].res);
    }
    di_free(e.specs);
    if (rc == 0)
        rc = ir_verify(e.out, err);
    if (rc != 0) {
        ir_module_free(e.out);
        return rc;
    }
    *out = e.out;
    return 0;
}

int
xform_is_global(const ir_module *m)
{
    for (ir_id op = 1; op < m->nop; op++) {
        int k = m->ops[op].kind;
        /* Calls on a module with meshes: the global view places them (one mesh or more). */
        if (k == IR_OP_ANNOTATE || k == IR_OP_REDISTRIBUTE || (k == IR_OP_CALL && m->nmesh > 1))
            return 1;
    }
    return 0;
}

int
xform_annotate(ir_module *m, const char *value, const char *mesh, const char *placement,
               di_error *err)
{
    ir_id name = ir_str_find(m, value, strlen(value)), v = 0, ms, op, r, nv, ty;
    uint32_t at = 0;
    int64_t pl[IR_MAX_RANK];
    uint32_t n;
    ir_region *reg;
    if (name != 0)
        for (ir_id k = 1; k < m->nvalue; k++)
            if (m->values[k].name == name) {
                v = k;
                break;
            }
    if (v == 0)
        return di_error_set(err, DI_EINVAL, "--annotate: no value named %%%s", value);
    ms = ir_mesh_find(m, ir_str(m, mesh));
    if (ms == 0)
        return di_error_set(err, DI_EINVAL, "--annotate %s: no mesh named @%s", value, mesh);
    if (ir_placement_parse(placement, pl, IR_MAX_RANK, &n) != 0 || n != m->meshes[ms].rank)
        return di_error_set(err, DI_EINVAL,
                            "--annotate %s: \"%s\" is not %u placements (R, S[dim], P(sum))",
                            value, placement, m->meshes[ms].rank);
    r = m->values[v].region;
    if (m->regions[r].parent != 0)
        return di_error_set(err, DI_EINVAL, "--annotate %s: the value is inside a pmap body",
                            value);
    ty = m->values[v].type;
    op = ir_op_add(m, r, IR_OP_ANNOTATE, 1, &v, 1, &ty, NULL);
    ir_op_set_mesh(m, op, "mesh", ms);
    ir_op_set_string(m, op, "placement", placement);
    nv = ir_op_output(m, op, 0);
    /* Move the new op right after the value's definition; later uses read it. */
    reg = &m->regions[r];
    if (m->values[v].def != 0)
        for (uint32_t i = 0; i < reg->nop; i++)
            if (reg->ops[i] == m->values[v].def)
                at = i + 1;
    memmove(reg->ops + at + 1, reg->ops + at, (reg->nop - 1 - at) * sizeof *reg->ops);
    reg->ops[at] = op;
    for (uint32_t i = at + 1; i < reg->nop; i++) {
        ir_op *o = &m->ops[reg->ops[i]];
        for (uint32_t k = 0; k < o->ninput; k++)
            if (m->refs[o->inputs + k] == v)
                m->refs[o->inputs + k] = nv;
    }
    for (uint32_t i = 0; i < reg->nresult; i++)
        if (reg->results[i] == v)
            reg->results[i] = nv;
    return 0;
}
