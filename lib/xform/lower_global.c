/*
 * lower_global.c: a global-view module (every tensor a !dist.dtensor, as
 * xform_shard makes it or a user writes it) to per-device programs
 * (docs/transforms.md, "The global view").
 *
 * The entry function keeps its distributed arguments and results. Its ops
 * are cut into runs of consecutive ops on one mesh; each run becomes one
 * dist.pmap over that mesh whose body computes on local shards (each
 * dimension divided by the mesh sizes of the axes that split it) on the
 * device variable "d". The pmap's inputs are the values the run reads from
 * outside, its results the values read after it or returned, with their
 * distributed types. A func.call becomes a pmap that calls the lowered
 * callee (a function on one mesh whose arguments and results are local
 * shards); a dist.redistribute between two meshes stays a top-level op.
 *
 * A dist.redistribute on one mesh becomes mesh-form collectives, one mesh
 * axis each (devices that agree on the other axes form the group, as
 * docs/ops.md says), in two phases:
 *
 *   1. innermost axis first: S[d] -> R all_gather, S[i] -> S[j] all_to_all,
 *      P -> R all_reduce (max for P(max)), P(sum) -> S[j] reduce_scatter;
 *   2. outermost axis first: R -> S[j] all_slice (each device keeps its
 *      block; no communication).
 *
 * A split dimension's blocks are numbered with the outer axis more
 * significant, so the one-step forms (all_to_all, reduce_scatter, a lone
 * gather or slice) are used when only the changing axis splits the
 * dimensions involved; otherwise every axis that splits such a dimension is
 * gathered (inner first) and split again (outer first), which keeps the
 * block order right on any N-d mesh. R -> P and S -> P are refused (a
 * complete value is not a partial sum), as are splits that do not divide.
 *
 * Compute ops are cloned with local types (ir_op_infer checks them against
 * the distributed types' shards); attributes that spell a shape ("shape" of
 * Reshape, GatherGrad, ReduceSumTo) are rewritten to the local result; a
 * Gather (GatherGrad) from a table split along the gathered axis gets the
 * mesh group of that split (the masked lookup); dist.scale, the mean over a
 * split factor that xform_shard records, becomes a multiplication of the
 * result (or, with dist.scale_in, of that input).
 */
#include "xform/xform_int.h"

#include <stdio.h>
#include <string.h>

typedef struct lg {
    const ir_module *g; /* the global view */
    ir_module *out;
    di_error *err;
    ir_id devvar;
    ir_id *env;     /* per global value: its value in the region being built (0 none) */
    ir_id *lfunc;   /* per global region: its lowered local function (callees) */
    int32_t *run;   /* per global op: its run in the entry function (-1: top level) */
} lg;

static int
is_dtensor(const ir_module *m, ir_id v)
{
    const ir_type *t = &m->types[m->values[v].type];
    return t->kind == IR_TYPE_TENSOR && t->mesh != 0;
}

static const char *
vname(const ir_module *m, ir_id v)
{
    return ir_str_get(m, m->values[v].name);
}

/* The type ty of the global module in the output module (same meshes, same ids). */
static ir_id
copy_type(lg *L, ir_id ty)
{
    const ir_module *g = L->g;
    const ir_type *t = &g->types[ty];
    if (t->kind != IR_TYPE_TENSOR)
        return 0;
    if (t->mesh)
        return ir_type_dtensor(L->out, (ir_dtype)t->dtype, t->rank, ir_type_dims(g, ty), t->mesh,
                               g->ints + t->placements);
    return ir_type_tensor(L->out, (ir_dtype)t->dtype, t->rank, ir_type_dims(g, ty), t->device);
}

/* The local (per-device, on "d") type of global value v's shard. */
static int
local_type(lg *L, ir_id v, ir_id *ty)
{
    const ir_module *g = L->g;
    const ir_type *t = &g->types[g->values[v].type];
    int64_t dims[IR_MAX_RANK];
    if (t->kind != IR_TYPE_TENSOR || t->mesh == 0)
        return di_error_set(L->err, DI_EUNSUPPORTED,
                            "%%%s is not a distributed tensor; lowering takes a global-view "
                            "module (every tensor a !dist.dtensor)",
                            vname(g, v));
    if (ir_type_shard_dims(g, g->values[v].type, dims) != 0)
        return di_error_set(L->err, DI_ESTRATEGY,
                            "%%%s: a split does not divide its dimension (uneven shards are "
                            "not supported)",
                            vname(g, v));
    *ty = ir_type_tensor_var(L->out, (ir_dtype)t->dtype, t->rank, dims, L->devvar);
    return 0;
}

/* Adds op to region r, sets attributes via the caller, infers its result. */
static int
infer(lg *L, ir_id op)
{
    return xf_infer(L->out, op, L->err);
}

/* Local value x * s. */
static int
scaled(lg *L, ir_id r, ir_id x, double s, ir_id *out)
{
    return xf_scaled(L->out, r, x, s, L->err, out);
}

/* ---- redistribution on one mesh ---- */

/* One mesh-form collective of kind on axis a of mesh. */
static int
coll(lg *L, ir_id r, int kind, ir_id mesh, uint32_t a, int64_t dim, int64_t dim2, int pmax,
     ir_id *v)
{
    ir_id op = ir_op_add(L->out, r, kind, 1, v, 1, NULL, NULL);
    int64_t ax = a;
    if (kind == IR_OP_ALLTOALL) {
        ir_op_set_int(L->out, op, "concat_dim", dim2);
        ir_op_set_int(L->out, op, "split_dim", dim);
    } else if (kind != IR_OP_ALLREDUCE) {
        ir_op_set_int(L->out, op, "dim", dim);
    }
    ir_op_set_mesh(L->out, op, "mesh", mesh);
    ir_op_set_ints(L->out, op, "mesh_axes", 1, &ax);
    if (pmax)
        ir_op_set_string(L->out, op, "reduction", "max");
    *v = ir_op_output(L->out, op, 0);
    return infer(L, op);
}

/* Does an axis other than a split dimension d in p or in q? */
static int
shared_dim(const int64_t *p, const int64_t *q, uint32_t rank, uint32_t a, int64_t d)
{
    for (uint32_t b = 0; b < rank; b++)
        if (b != a && (p[b] == d || q[b] == d))
            return 1;
    return 0;
}

/*
 * Local value *v of global value src with placement p (on mesh) converted to
 * placement q: the collectives of the file comment.
 */
static int
redistribute(lg *L, ir_id r, ir_id src, ir_id mesh, const int64_t *p, const int64_t *q, ir_id *v)
{
    const ir_module *g = L->g;
    uint32_t rank = g->meshes[mesh].rank;
    int64_t cur[IR_MAX_RANK];
    uint8_t regather[IR_MAX_RANK + 1] = {0}; /* per tensor dim: gather every split of it */
    char from[96], to[96];
    int rc;
    memcpy(cur, p, rank * sizeof *cur);
    ir_placement_format(p, rank, from, sizeof from);
    ir_placement_format(q, rank, to, sizeof to);
    for (uint32_t a = 0; a < rank; a++) {
        if (p[a] == q[a])
            continue;
        if (q[a] == IR_PLACE_PSUM || q[a] == IR_PLACE_PMAX)
            return di_error_set(L->err, DI_EUNSUPPORTED,
                                "redistributing %%%s from [%s] to [%s]: mesh axis %u: a partial "
                                "value cannot be made from a complete one",
                                vname(g, src), from, to, a);
        /* A dimension that another axis also splits: gather all its splits, split again. */
        if (IR_PLACE_IS_SPLIT(p[a]) && shared_dim(p, q, rank, a, p[a]) && p[a] < IR_MAX_RANK)
            regather[p[a]] = 1;
        if (IR_PLACE_IS_SPLIT(q[a]) && shared_dim(p, q, rank, a, q[a]) && q[a] < IR_MAX_RANK)
            regather[q[a]] = 1;
    }
    /* Phase 1, innermost axis first. */
    for (uint32_t i = rank; i > 0; i--) {
        uint32_t a = i - 1;
        int64_t c = cur[a], w = q[a];
        if (IR_PLACE_IS_SPLIT(c) && (c != w || regather[c])) {
            if (IR_PLACE_IS_SPLIT(w) && w != c && !regather[c] && !regather[w]) {
                rc = coll(L, r, IR_OP_ALLTOALL, mesh, a, w, c, 0, v);
                cur[a] = w;
            } else {
                rc = coll(L, r, IR_OP_ALLGATHER, mesh, a, c, 0, 0, v);
                cur[a] = IR_PLACE_R;
            }
        } else if ((c == IR_PLACE_PSUM || c == IR_PLACE_PMAX) && c != w) {
            if (c == IR_PLACE_PSUM && IR_PLACE_IS_SPLIT(w) && !regather[w]) {
                rc = coll(L, r, IR_OP_REDUCESCATTER, mesh, a, w, 0, 0, v);
                cur[a] = w;
            } else {
                rc = coll(L, r, IR_OP_ALLREDUCE, mesh, a, 0, 0, c == IR_PLACE_PMAX, v);
                cur[a] = IR_PLACE_R;
            }
        } else {
            continue;
        }
        if (rc != 0) {
            di_error_prefix(L->err, "redistributing %%%s from [%s] to [%s]", vname(g, src), from,
                            to);
            return rc;
        }
    }
    /* Phase 2, outermost axis first. */
    for (uint32_t a = 0; a < rank; a++) {
        if (cur[a] == q[a])
            continue;
        if (cur[a] != IR_PLACE_R || !IR_PLACE_IS_SPLIT(q[a]))
            return di_error_set(L->err, DI_EINTERNAL,
                                "redistributing %%%s from [%s] to [%s]: no collective for mesh "
                                "axis %u",
                                vname(g, src), from, to, a);
        if ((rc = coll(L, r, IR_OP_ALLSLICE, mesh, a, q[a], 0, 0, v)) != 0) {
            di_error_prefix(L->err, "redistributing %%%s from [%s] to [%s]", vname(g, src), from,
                            to);
            return rc;
        }
        cur[a] = q[a];
    }
    return 0;
}

/* ---- ops on local shards ---- */

/* The axes of mesh on which global tensor type ty splits dimension d (at most one). */
static int
split_axis(const ir_module *g, ir_id ty, int64_t d)
{
    const ir_type *t = &g->types[ty];
    int found = -1;
    if (t->mesh == 0)
        return -1;
    for (uint32_t a = 0; a < g->meshes[t->mesh].rank; a++)
        if (g->ints[t->placements + a] == d)
            found = found < 0 ? (int)a : -2;
    return found;
}

/*
 * A cross-entropy (or its gradient) over classes split on mesh axis a, as
 * Megatron-LM's vocabulary-parallel cross-entropy (docs/ops.md): local
 * statistics, one all_gather of them over the axis, then the loss or the
 * gradient, never gathering the logits. lin holds the local inputs.
 */
static int
emit_vocab_ce(lg *L, ir_id r, ir_id op, const ir_id *lin, ir_id mesh, uint32_t a, double scale,
              int64_t scale_in)
{
    const ir_module *g = L->g;
    const ir_op *o = &g->ops[op];
    int grad = o->kind == IR_OP_SCELOSSGRAD;
    int64_t ax = a;
    ir_id in[4], sop, fop, st, lv, ty;
    int rc;
    in[0] = lin[grad];
    in[1] = lin[grad + 1];
    sop = ir_op_add(L->out, r, IR_OP_VOCABSTATS, 2, in, 1, NULL, NULL);
    xf_copy_attrs(L->out, sop, g, op, "reduction", "dist.scale");
    ir_op_set_mesh(L->out, sop, "mesh", mesh);
    ir_op_set_ints(L->out, sop, "mesh_axes", 1, &ax);
    if ((rc = infer(L, sop)) != 0)
        return rc;
    st = ir_op_output(L->out, sop, 0);
    if ((rc = coll(L, r, IR_OP_ALLGATHER, mesh, a, 1, 0, 0, &st)) != 0)
        return rc;
    if (grad) {
        in[0] = lin[0];
        in[1] = lin[1];
        in[2] = lin[2];
        in[3] = st;
        fop = ir_op_add(L->out, r, IR_OP_VOCABGRAD, 4, in, 1, NULL, NULL);
        xf_copy_attrs(L->out, fop, g, op, "dist.scale", "dist.scale_in");
        ir_op_set_mesh(L->out, fop, "mesh", mesh);
        ir_op_set_ints(L->out, fop, "mesh_axes", 1, &ax);
    } else {
        in[0] = st;
        in[1] = lin[1];
        fop = ir_op_add(L->out, r, IR_OP_VOCABLOSS, 2, in, 1, NULL, NULL);
        xf_copy_attrs(L->out, fop, g, op, "dist.scale", "dist.scale_in");
    }
    if ((rc = infer(L, fop)) != 0)
        return rc;
    lv = ir_op_output(L->out, fop, 0);
    if ((rc = local_type(L, o->outputs, &ty)) != 0)
        return rc;
    if (ty != L->out->values[lv].type)
        return di_error_set(L->err, DI_EINTERNAL, "%s: the vocabulary-parallel loss has another "
                            "local shape", ir_op_label(g, op).s);
    if (scale != 1 && scale_in < 0 && (rc = scaled(L, r, lv, scale, &lv)) != 0)
        return rc;
    L->env[o->outputs] = lv;
    return 0;
}

/* Emits global op op of the current region into local region r (values through L->env). */
static int
emit_local(lg *L, ir_id r, ir_id op)
{
    const ir_module *g = L->g;
    const ir_op *o = &g->ops[op];
    ir_label lab = ir_op_label(g, op);
    ir_id lin[XF_MAXO], nop;
    const ir_attr *sa = ir_op_attr(g, op, "dist.scale");
    double scale = sa && sa->kind == IR_ATTR_FLOAT ? sa->f : 1;
    int64_t scale_in = ir_op_int(g, op, "dist.scale_in", -1);
    int rc;
    if (o->ninput > XF_MAXO || o->noutput > XF_MAXO)
        return di_error_set(L->err, DI_EUNSUPPORTED, "%s: too many operands", lab.s);
    for (uint32_t k = 0; k < o->ninput; k++) {
        ir_id v = g->refs[o->inputs + k];
        lin[k] = L->env[v];
        if (lin[k] == 0)
            return di_error_set(L->err, DI_EINTERNAL, "%s: input %%%s is not available", lab.s,
                                vname(g, v));
        if ((int64_t)k == scale_in && scale != 1 &&
            (rc = scaled(L, r, lin[k], scale, &lin[k])) != 0)
            return rc;
    }
    if (o->kind == IR_OP_REDISTRIBUTE) {
        ir_id in = g->refs[o->inputs];
        const ir_type *ti = &g->types[g->values[in].type];
        const ir_type *tr = &g->types[g->values[o->outputs].type];
        ir_id v = lin[0];
        if (ti->mesh != tr->mesh)
            return di_error_set(L->err, DI_EINTERNAL, "%s: a transfer between meshes inside a "
                                "pmap", lab.s);
        if ((rc = redistribute(L, r, in, ti->mesh, g->ints + ti->placements,
                               g->ints + tr->placements, &v)) != 0)
            return rc;
        if (v != lin[0] && g->values[o->outputs].name)
            L->out->values[v].name = ir_str(L->out, vname(g, o->outputs));
        L->env[o->outputs] = v;
        return 0;
    }
    if (o->kind == IR_OP_ANNOTATE || o->kind == IR_OP_CALL || o->kind == IR_OP_PMAP ||
        (ir_opkind_info(o->kind)->flags & IR_OPF_REGION))
        return di_error_set(L->err, DI_EUNSUPPORTED,
                            "%s: not in a function that a pmap runs (annotations are removed by "
                            "`distir shard`; calls nest at most one deep)",
                            lab.s);
    if (o->kind == IR_OP_SCELOSS || o->kind == IR_OP_SCELOSSGRAD) {
        int grad = o->kind == IR_OP_SCELOSSGRAD;
        ir_id logits = g->refs[o->inputs + grad];
        int a = split_axis(g, g->values[logits].type, 1);
        if (a == -2 || (a >= 0 && o->noutput != 1))
            return di_error_set(L->err, DI_EUNSUPPORTED,
                                "%s: the classes are split on two mesh axes, or the loss "
                                "returns its log-probabilities; gather the logits first",
                                lab.s);
        if (a >= 0)
            return emit_vocab_ce(L, r, op, lin, g->types[g->values[logits].type].mesh,
                                 (uint32_t)a, scale, scale_in);
    }
    if (o->kind == IR_OP_OPAQUE) {
        /* An op the table does not know declares its results: their local shards. */
        ir_id tys[XF_MAXO];
        for (uint32_t k = 0; k < o->noutput; k++)
            if ((rc = local_type(L, o->outputs + k, &tys[k])) != 0)
                return rc;
        nop = ir_op_add(L->out, r, o->kind, o->ninput, lin, o->noutput, tys, NULL);
    } else {
        nop = ir_op_add(L->out, r, o->kind, o->ninput, lin, o->noutput, NULL, NULL);
    }
    xf_copy_attrs(L->out, nop, g, op, "dist.scale", "dist.scale_in");
    if (o->kind == IR_OP_OPAQUE)
        L->out->ops[nop].opaque = ir_str(L->out, ir_str_get(g, o->opaque));
    L->out->ops[nop].name = o->name ? ir_str(L->out, ir_str_get(g, o->name)) : 0;
    if (o->kind == IR_OP_CONSTANT) {
        const ir_attr *va = ir_op_attr(g, op, "value");
        const ir_type *t = &g->types[g->values[o->outputs].type];
        ir_id ty;
        for (uint32_t a = 0; t->mesh && a < g->meshes[t->mesh].rank; a++)
            if (g->ints[t->placements + a] != IR_PLACE_R)
                return di_error_set(L->err, DI_EUNSUPPORTED,
                                    "%s: a constant is replicated; redistribute its result",
                                    lab.s);
        if (va == NULL || va->kind != IR_ATTR_TENSOR)
            return di_error_set(L->err, DI_EVERIFY, "%s: no value", lab.s);
        if ((rc = local_type(L, o->outputs, &ty)) != 0)
            return rc;
        ir_op_set_tensor(L->out, nop, "value", ty, g->data + va->off, va->n);
    }
    if (o->kind == IR_OP_RESHAPE || o->kind == IR_OP_GATHERGRAD || o->kind == IR_OP_REDUCESUMTO) {
        ir_id ty;
        if ((rc = local_type(L, o->outputs, &ty)) != 0)
            return rc;
        ir_op_set_ints(L->out, nop, "shape", L->out->types[ty].rank, ir_type_dims(L->out, ty));
    }
    if (o->kind == IR_OP_GATHER || o->kind == IR_OP_GATHERGRAD) {
        /* A table split along the gathered axis: the lookup is masked to the device's rows. */
        ir_id table = o->kind == IR_OP_GATHER ? g->values[g->refs[o->inputs]].type
                                              : g->values[o->outputs].type;
        const ir_type *tt = &g->types[table];
        int a = split_axis(g, table, ir_op_int(g, op, "axis", 0));
        if (a == -2)
            return di_error_set(L->err, DI_EUNSUPPORTED,
                                "%s: the table's gathered axis is split on two mesh axes", lab.s);
        if (a >= 0) {
            int64_t ax = a;
            ir_op_set_mesh(L->out, nop, "mesh", tt->mesh);
            ir_op_set_ints(L->out, nop, "mesh_axes", 1, &ax);
        }
    }
    if ((rc = infer(L, nop)) != 0) {
        di_error_prefix(L->err, "%s", lab.s);
        return rc;
    }
    for (uint32_t k = 0; k < o->noutput; k++) {
        ir_id sv = o->outputs + k, lv = ir_op_output(L->out, nop, k), ty;
        if ((rc = local_type(L, sv, &ty)) != 0)
            return rc;
        if (ty != L->out->values[lv].type)
            return di_error_set(L->err, DI_ESTRATEGY,
                                "%s: result %u: the op computes a local shard other than its "
                                "placement says (placements disagree with the op's rule)",
                                lab.s, k);
        if (g->values[sv].name)
            L->out->values[lv].name = ir_str(L->out, vname(g, sv));
        L->env[sv] = lv;
    }
    if (scale != 1 && scale_in < 0 && o->noutput &&
        (rc = scaled(L, r, L->env[o->outputs], scale, &L->env[o->outputs])) != 0)
        return rc;
    return 0;
}

/* ---- functions ---- */

/* The mesh of every distributed value of function f, or an error when there are several. */
static int
func_mesh(lg *L, ir_id f, ir_id *mesh)
{
    const ir_module *g = L->g;
    const ir_region *fr = &g->regions[f];
    *mesh = 0;
    for (ir_id v = 1; v < g->nvalue; v++) {
        const ir_type *t = &g->types[g->values[v].type];
        if (g->values[v].region != f || t->kind != IR_TYPE_TENSOR)
            continue;
        if (t->mesh == 0)
            return local_type(L, v, mesh);
        if (*mesh && *mesh != t->mesh)
            return di_error_set(L->err, DI_EUNSUPPORTED,
                                "@%s: a called function uses two meshes; only the entry "
                                "function may move values between meshes",
                                ir_str_get(g, fr->name));
        *mesh = t->mesh;
    }
    if (*mesh == 0)
        return di_error_set(L->err, DI_EUNSUPPORTED, "@%s: no distributed tensor",
                            ir_str_get(g, fr->name));
    return 0;
}

/* Lowers called function f into a local function (once). */
static int
lower_callee(lg *L, ir_id f, ir_id *out, ir_id *mesh)
{
    const ir_module *g = L->g;
    const ir_region *fr = &g->regions[f];
    ir_id lf, ty;
    int rc;
    if ((rc = func_mesh(L, f, mesh)) != 0)
        return rc;
    if (L->lfunc[f]) {
        *out = L->lfunc[f];
        return 0;
    }
    lf = ir_func_new(L->out, ir_str_get(g, fr->name));
    for (uint32_t i = 0; i < fr->narg; i++) {
        if ((rc = local_type(L, fr->args[i], &ty)) != 0)
            return rc;
        L->env[fr->args[i]] = ir_region_add_arg(L->out, lf, ty, vname(g, fr->args[i]));
    }
    for (uint32_t i = 0; i < fr->nop; i++)
        if ((rc = emit_local(L, lf, fr->ops[i])) != 0)
            return rc;
    for (uint32_t i = 0; i < fr->nresult; i++)
        ir_region_add_result(L->out, lf, L->env[fr->results[i]]);
    L->lfunc[f] = lf;
    *out = lf;
    return 0;
}

/* The mesh an entry-function op runs on (its first distributed result's, else input's). */
static ir_id
op_mesh(const ir_module *g, ir_id op)
{
    const ir_op *o = &g->ops[op];
    for (uint32_t k = 0; k < o->noutput; k++)
        if (is_dtensor(g, o->outputs + k))
            return g->types[g->values[o->outputs + k].type].mesh;
    for (uint32_t k = 0; k < o->ninput; k++)
        if (is_dtensor(g, g->refs[o->inputs + k]))
            return g->types[g->values[g->refs[o->inputs + k]].type].mesh;
    return 0;
}

/* Is entry op op a top-level op (a call, a transfer between meshes)? */
static int
top_level(const ir_module *g, ir_id op)
{
    const ir_op *o = &g->ops[op];
    if (o->kind == IR_OP_CALL)
        return 1;
    if (o->kind == IR_OP_REDISTRIBUTE)
        return g->types[g->values[g->refs[o->inputs]].type].mesh !=
               g->types[g->values[o->outputs].type].mesh;
    return 0;
}

/* Adds a pmap over mesh to region r with the given inputs (top-level values) and body. */
static ir_id
add_pmap(lg *L, ir_id r, ir_id mesh, const ir_id *ins, uint32_t nin, const ir_id *tys,
         const char *const *names, uint32_t nout)
{
    ir_id op = ir_op_add(L->out, r, IR_OP_PMAP, nin, ins, nout, tys, names);
    ir_op_set_string(L->out, op, "device_var", "d");
    ir_op_set_mesh(L->out, op, "mesh", mesh);
    return op;
}

/* Emits run [i0, i1) of the entry's ops (all on mesh) as one pmap into region top. */
static int
emit_run(lg *L, ir_id top, const ir_region *fr, uint32_t i0, uint32_t i1, int32_t run,
         ir_id mesh)
{
    const ir_module *g = L->g;
    ir_id *outer = di_xcalloc(g->nvalue, sizeof *outer); /* top-level values read */
    ir_id *ins = NULL, *tys = NULL, *res = NULL, body, op, ty;
    const char **names = NULL;
    uint32_t nin = 0, nres = 0, cap = 0;
    int rc = 0;
    /* Inputs: values read by the run and made outside it, in first-use order. */
    for (uint32_t i = i0; i < i1; i++) {
        const ir_op *o = &g->ops[fr->ops[i]];
        for (uint32_t k = 0; k < o->ninput; k++) {
            ir_id v = g->refs[o->inputs + k], def = g->values[v].def;
            if ((def && L->run[def] == run) || outer[v])
                continue;
            outer[v] = L->env[v];
            DI_GROW(&ins, &cap, nin + 1);
            ins[nin++] = v;
        }
    }
    body = ir_body_new(L->out);
    for (uint32_t i = 0; i < nin && rc == 0; i++) {
        if (!is_dtensor(g, ins[i]) || g->types[g->values[ins[i]].type].mesh != mesh) {
            rc = di_error_set(L->err, DI_EINTERNAL, "%%%s reaches a pmap over @%s on another mesh",
                              vname(g, ins[i]), ir_str_get(g, g->meshes[mesh].name));
            break;
        }
        if ((rc = local_type(L, ins[i], &ty)) == 0)
            L->env[ins[i]] = ir_region_add_arg(L->out, body, ty, vname(g, ins[i]));
    }
    for (uint32_t i = i0; i < i1 && rc == 0; i++)
        rc = emit_local(L, body, fr->ops[i]);
    /* Results: values made by the run and read after it or returned. */
    cap = 0;
    for (uint32_t i = i0; i < i1 && rc == 0; i++) {
        const ir_op *o = &g->ops[fr->ops[i]];
        for (uint32_t k = 0; k < o->noutput; k++) {
            ir_id v = o->outputs + k;
            int used = 0;
            for (uint32_t j = i1; j < fr->nop && !used; j++) {
                const ir_op *u = &g->ops[fr->ops[j]];
                for (uint32_t x = 0; x < u->ninput && !used; x++)
                    used = g->refs[u->inputs + x] == v;
            }
            for (uint32_t j = 0; j < fr->nresult && !used; j++)
                used = fr->results[j] == v;
            if (!used)
                continue;
            DI_GROW(&res, &cap, nres + 1);
            res[nres++] = v;
        }
    }
    if (rc == 0) {
        ir_id *lins = di_xcalloc(nin + 1, sizeof *lins);
        tys = di_xcalloc(nres + 1, sizeof *tys);
        names = di_xcalloc(nres + 1, sizeof *names);
        for (uint32_t i = 0; i < nres; i++) {
            tys[i] = copy_type(L, g->values[res[i]].type);
            names[i] = vname(g, res[i]);
            ir_region_add_result(L->out, body, L->env[res[i]]);
        }
        for (uint32_t i = 0; i < nin; i++)
            lins[i] = outer[ins[i]];
        op = add_pmap(L, top, mesh, lins, nin, tys, names, nres);
        L->out->ops[op].body = body;
        L->out->regions[body].parent = op;
        for (uint32_t i = 0; i < nres; i++)
            L->env[res[i]] = ir_op_output(L->out, op, i);
        /* Inside the run the inputs were body arguments; outside, the top-level values again. */
        for (uint32_t i = 0; i < nin; i++)
            L->env[ins[i]] = outer[ins[i]];
        di_free(lins);
    }
    di_free(outer);
    di_free(ins);
    di_free(tys);
    di_free(names);
    di_free(res);
    return rc;
}

/* Lowers the entry function f. */
static int
lower_entry(lg *L, ir_id f)
{
    const ir_module *g = L->g;
    const ir_region *fr = &g->regions[f];
    ir_id top = ir_func_new(L->out, ir_str_get(g, fr->name)), ty;
    int32_t nrun = 0;
    int rc = 0;
    for (uint32_t i = 0; i < fr->narg; i++) {
        ir_id v = fr->args[i];
        if (!is_dtensor(g, v))
            return di_error_set(L->err, DI_EUNSUPPORTED,
                                "argument %%%s is not a distributed tensor; lowering takes a "
                                "global-view module (`distir shard` makes one)",
                                vname(g, v));
        ty = copy_type(L, g->values[v].type);
        L->env[v] = ir_region_add_arg(L->out, top, ty, vname(g, v));
        if (g->values[v].init) {
            size_t len;
            const void *d = ir_value_init(g, v, &len);
            ir_value_set_init(L->out, L->env[v], d, len);
        }
    }
    /* Runs of consecutive ops on one mesh. */
    for (uint32_t i = 0; i < fr->nop; i++) {
        ir_id op = fr->ops[i];
        if (top_level(g, op)) {
            L->run[op] = -1;
            continue;
        }
        if (i == 0 || L->run[fr->ops[i - 1]] < 0 || op_mesh(g, fr->ops[i - 1]) != op_mesh(g, op))
            nrun++;
        L->run[op] = nrun;
    }
    for (uint32_t i = 0; i < fr->nop && rc == 0;) {
        ir_id op = fr->ops[i];
        const ir_op *o = &g->ops[op];
        if (o->kind == IR_OP_CALL) {
            ir_id lf, mesh, pm, *ins = di_xcalloc(o->ninput + 1, sizeof *ins);
            ir_id *tys = di_xcalloc(o->noutput + 1, sizeof *tys);
            const char **names = di_xcalloc(o->noutput + 1, sizeof *names);
            rc = lower_callee(L, o->body, &lf, &mesh);
            for (uint32_t k = 0; k < o->ninput && rc == 0; k++)
                ins[k] = L->env[g->refs[o->inputs + k]];
            for (uint32_t k = 0; k < o->noutput && rc == 0; k++) {
                tys[k] = copy_type(L, g->values[o->outputs + k].type);
                names[k] = vname(g, o->outputs + k);
            }
            if (rc == 0) {
                pm = add_pmap(L, top, mesh, ins, o->ninput, tys, names, o->noutput);
                ir_op_set_callee(L->out, pm, lf);
                for (uint32_t k = 0; k < o->noutput; k++)
                    L->env[o->outputs + k] = ir_op_output(L->out, pm, k);
            }
            di_free(ins);
            di_free(tys);
            di_free((void *)names);
            i++;
        } else if (L->run[op] < 0) {
            ir_id in = L->env[g->refs[o->inputs]], nop;
            const char *name = vname(g, o->outputs);
            ty = copy_type(L, g->values[o->outputs].type);
            nop = ir_op_add(L->out, top, IR_OP_REDISTRIBUTE, 1, &in, 1, &ty, &name);
            xf_copy_attrs(L->out, nop, g, op, NULL, NULL);
            L->env[o->outputs] = ir_op_output(L->out, nop, 0);
            i++;
        } else {
            uint32_t j = i;
            while (j < fr->nop && L->run[fr->ops[j]] == L->run[op])
                j++;
            rc = emit_run(L, top, fr, i, j, L->run[op], op_mesh(g, op));
            i = j;
        }
    }
    for (uint32_t i = 0; i < fr->nresult && rc == 0; i++)
        ir_region_add_result(L->out, top, L->env[fr->results[i]]);
    return rc;
}

int
xform_lower_global(const ir_module *g, ir_module **out, di_error *err)
{
    lg L;
    ir_id entry = ir_module_entry(g);
    int rc;
    *out = NULL;
    if (entry == 0)
        return di_error_set(err, DI_EINVAL, "the module has no function");
    memset(&L, 0, sizeof L);
    L.g = g;
    L.err = err;
    L.out = ir_module_new();
    L.devvar = ir_str(L.out, "d");
    L.env = di_xcalloc(g->nvalue + 1, sizeof *L.env);
    L.lfunc = di_xcalloc(g->nregion + 1, sizeof *L.lfunc);
    L.run = di_xcalloc(g->nop + 1, sizeof *L.run);
    for (ir_id k = 1; k < g->nmesh; k++) {
        const ir_mesh *ms = &g->meshes[k];
        ir_mesh_add(L.out, ir_str_get(g, ms->name), ms->rank, ir_mesh_shape(g, k),
                    ir_mesh_devices(g, k));
    }
    rc = lower_entry(&L, entry);
    di_free(L.env);
    di_free(L.lfunc);
    di_free(L.run);
    if (rc == 0)
        rc = ir_verify(L.out, err);
    if (rc != 0) {
        ir_module_free(L.out);
        return rc;
    }
    *out = L.out;
    return 0;
}

int
xform_global_local(const ir_module *m, ir_module **out, di_error *err)
{
    ir_module *g = NULL;
    int rc;
    *out = NULL;
    if (!xform_is_global(m))
        return 0;
    if ((rc = xform_shard(m, &g, err)) != 0)
        return rc;
    rc = xform_lower_global(g, out, err);
    ir_module_free(g);
    return rc;
}
