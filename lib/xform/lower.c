/*
 * lower.c: lowering from the global view to the local view
 * (docs/transforms.md). It builds the body of a dist.pmap over one stage's devices:
 * the per-device program of a list of source ops, with the placements that
 * propagation (shard.c) decided.
 *
 * Each source value bound in the body has a local value and a placement.
 * Emitting a source op converts every input to the placement the op needs
 * with mesh-form collectives on the stage mesh [dp, tp] (per-device tensors
 * on the device variable, grouped as the mesh form of docs/ops.md says):
 *
 *   P(sum) -> R      all_reduce
 *   P(sum) -> S[d]   reduce_scatter (dim d)
 *   S[d] -> R        all_gather (dim d)
 *   S[d] -> S[e]     all_to_all (split e, concat d)
 *   R -> S[d]        all_slice (every member holds the same value and keeps
 *                    its block: no communication)
 *
 * then clones the op with local shapes: attributes that spell a shape
 * (Reshape, GatherGrad and ReduceSumTo "shape") are rewritten to the local
 * result shape, Constants become per-device constants, and a mean over a
 * split dimension (a loss, or the seed of its gradient) is scaled by 1/n so
 * that the partial results sum to the sequential value. Result types come
 * from ir_op_infer and are checked against the propagated local shapes.
 */
#include "xform/xform_int.h"

#include <stdio.h>
#include <string.h>

#include "xform/autodiff.h"

static void xf_copy_attrs_one(ir_module *dst, ir_id dop, const ir_module *src, const ir_attr *a);

void
xf_copy_attrs(ir_module *dst, ir_id dop, const ir_module *src, ir_id sop, const char *skip1,
              const char *skip2)
{
    const ir_op *o = &src->ops[sop];
    for (uint32_t j = 0; j < o->nattr; j++) {
        const ir_attr *a = &src->attrs[o->attrs + j];
        const char *key = ir_str_get(src, a->key);
        if ((skip1 && strcmp(key, skip1) == 0) || (skip2 && strcmp(key, skip2) == 0))
            continue;
        xf_copy_attrs_one(dst, dop, src, a);
    }
}

/* Copies one attribute of src into op dop of dst. */
static void
xf_copy_attrs_one(ir_module *dst, ir_id dop, const ir_module *src, const ir_attr *a)
{
    const char *key = ir_str_get(src, a->key);
    switch (a->kind) {
    case IR_ATTR_INT:
        ir_op_set_int(dst, dop, key, a->i);
        break;
    case IR_ATTR_FLOAT:
        ir_op_set_float(dst, dop, key, a->f);
        break;
    case IR_ATTR_STRING:
        ir_op_set_string(dst, dop, key, ir_str_get(src, a->s));
        break;
    case IR_ATTR_INTS:
        ir_op_set_ints(dst, dop, key, a->n, src->ints + a->off);
        break;
    case IR_ATTR_FLOATS:
        ir_op_set_floats(dst, dop, key, a->n, src->floats + a->off);
        break;
    case IR_ATTR_TENSOR: {
        const ir_type *t = &src->types[a->i];
        ir_id ty = ir_type_tensor(dst, (ir_dtype)t->dtype, t->rank, ir_type_dims(src, (ir_id)a->i),
                                  t->device);
        ir_op_set_tensor(dst, dop, key, ty, src->data + a->off, a->n);
        break;
    }
    case IR_ATTR_MESH:
        /* The global view keeps the source's meshes in order (global.c). */
        if (a->s < dst->nmesh)
            ir_op_set_mesh(dst, dop, key, a->s);
        break;
    default:
        break;
    }
}

ir_id
xf_str(xf_body *b, ir_id s)
{
    const ir_module *m = b->c->m;
    if (s == 0 || s >= m->nchar)
        return 0;
    if (b->smap[s] == 0)
        b->smap[s] = ir_str(b->out, m->chars + s);
    return b->smap[s];
}

/* Copies attributes with keys and strings mapped through the string cache. */
static void
copy_attrs_fast(xf_body *b, ir_id dop, ir_id sop, int skip_shape)
{
    const ir_module *src = b->c->m;
    const ir_op *o = &src->ops[sop];
    for (uint32_t j = 0; j < o->nattr; j++) {
        const ir_attr *a = &src->attrs[o->attrs + j];
        ir_attr na;
        switch (a->kind) {
        case IR_ATTR_INT:
        case IR_ATTR_FLOAT:
        case IR_ATTR_STRING:
            na = *a;
            na.key = xf_str(b, a->key);
            if (a->kind == IR_ATTR_STRING)
                na.s = xf_str(b, a->s);
            ir_op_put_attr(b->out, dop, &na);
            break;
        case IR_ATTR_INTS:
            if (skip_shape && strcmp(ir_str_get(src, a->key), "shape") == 0)
                break;
            ir_op_set_ints(b->out, dop, ir_str_get(src, a->key), a->n, src->ints + a->off);
            break;
        default:
            xf_copy_attrs_one(b->out, dop, src, a);
            break;
        }
    }
}

/* ---- tables ---- */

void
xf_body_tables_init(xf_body *b, xf_ctx *c, ir_module *out)
{
    uint32_t n = c->m->nvalue ? c->m->nvalue : 1;
    memset(b, 0, sizeof *b);
    b->c = c;
    b->out = out;
    b->envgen = di_xcalloc(n, sizeof *b->envgen);
    b->env = di_xcalloc(n, sizeof *b->env);
    b->convhead = di_xcalloc(n, sizeof *b->convhead);
    b->convgen = di_xcalloc(n, sizeof *b->convgen);
    b->lazygen = di_xcalloc(c->m->nop ? c->m->nop : 1, sizeof *b->lazygen);
    b->smap = di_xcalloc(c->m->nchar ? c->m->nchar : 1, sizeof *b->smap);
    b->tcache = di_xcalloc(c->m->nop ? c->m->nop : 1, sizeof *b->tcache);
    b->devvar = ir_str(out, "d");
}

void
xf_body_tables_fini(xf_body *b)
{
    di_free(b->envgen);
    di_free(b->env);
    di_free(b->convhead);
    di_free(b->convgen);
    di_free(b->lazygen);
    di_free(b->smap);
    di_free(b->tcache);
    di_free(b->tpool);
    di_free(b->conv);
    memset(b, 0, sizeof *b);
}

static void
body_start(xf_body *b, ir_id region, ir_id mesh, uint32_t g)
{
    b->region = region;
    b->mesh = mesh;
    xf_group_n(b->c, g, b->n);
    b->gen++;
    b->nconv = 0;
    b->step = 0;
}

void
xf_body_begin(xf_body *b, ir_id mesh, uint32_t g)
{
    body_start(b, ir_body_new(b->out), mesh, g);
}

void
xf_body_begin_func(xf_body *b, ir_id mesh, uint32_t g, const char *name)
{
    body_start(b, ir_func_new(b->out, name), mesh, g);
}

ir_id
xf_local_type(xf_body *b, ir_id v, const xf_place *pl, int32_t device)
{
    const ir_module *m = b->c->m;
    const ir_type *t = &m->types[m->values[v].type];
    int64_t dims[IR_MAX_RANK];
    if (t->kind != IR_TYPE_TENSOR || xf_local_dims(b->c, v, pl, b->n, dims) != 0)
        return 0;
    if (device >= 0)
        return ir_type_tensor(b->out, (ir_dtype)t->dtype, t->rank, dims, device);
    return ir_type_tensor_var(b->out, (ir_dtype)t->dtype, t->rank, dims, b->devvar);
}

void
xf_body_bind(xf_body *b, ir_id v, ir_id lv, const xf_place *pl)
{
    b->envgen[v] = b->gen;
    b->env[v].v = lv;
    b->env[v].pl = xf_place_on(pl, b->n);
}

/* Sets an output value's name to the source value's name plus suffix. */
static void
name_value(xf_body *b, ir_id lv, ir_id src, const char *suffix)
{
    ir_id sn = b->c->m->values[src].name;
    const char *n = ir_str_get(b->c->m, sn);
    char buf[256];
    if (*n == '\0')
        return;
    if (suffix && *suffix) {
        snprintf(buf, sizeof buf, "%s%s", n, suffix);
        b->out->values[lv].name = ir_str(b->out, buf);
    } else {
        b->out->values[lv].name = xf_str(b, sn);
    }
}

ir_id
xf_body_arg(xf_body *b, ir_id v, const xf_place *pl, const char *suffix)
{
    ir_id ty = xf_local_type(b, v, pl, -1);
    ir_id a = ir_region_add_arg(b->out, b->region, ty, NULL);
    name_value(b, a, v, suffix);
    xf_body_bind(b, v, a, pl);
    return a;
}

ir_id
xf_body_arg_typed(xf_body *b, ir_id v, ir_id ty, const xf_place *pl)
{
    ir_id a = ir_region_add_arg(b->out, b->region, ty, NULL);
    name_value(b, a, v, NULL);
    xf_body_bind(b, v, a, pl);
    return a;
}

int
xf_body_get(xf_body *b, ir_id v, xf_local *out)
{
    xf_ctx *c = b->c;
    if (b->envgen[v] != b->gen) {
        ir_id def = c->m->values[v].def;
        int rc;
        if (def && b->lazygen[def] == b->gen) {
            b->lazygen[def] = 0;
            if ((rc = xf_body_emit(b, def)) != 0)
                return rc;
            *out = b->env[v];
            return 0;
        }
        if (!(c->vflags[v] & XF_V_CONST) || def == 0)
            return di_error_set(c->err, DI_EINTERNAL, "value %%%s is not available in this body",
                                ir_str_get(c->m, c->m->values[v].name));
        if ((rc = xf_body_emit(b, def)) != 0)
            return rc;
    }
    *out = b->env[v];
    return 0;
}

/* ---- collectives ---- */

int
xf_infer(ir_module *out, ir_id op, di_error *err)
{
    di_error e;
    di_error_clear(&e);
    if (ir_op_infer_results(out, op, &e) != 0) {
        if (e.code == DI_ENOMEM)
            return di_error_set(err, DI_ENOMEM, "%s", e.msg);
        return di_error_set(err, DI_EINTERNAL, "the transform produced an invalid op: %s", e.msg);
    }
    return 0;
}

static int
infer_one(xf_body *b, ir_id op)
{
    return xf_infer(b->out, op, b->c->err);
}

/*
 * The body's mesh dimension of placement axis `axis`: [dp, tp], [dp, cp,
 * tp], with an outer data dimension first when there is one ([edp, dp, ...]).
 */
static int64_t
mesh_axis(const xf_body *b, int axis)
{
    int cp = b->c->n[XF_CP] > 1, e = b->c->n[XF_EDP] > 1;
    if (axis == XF_EDP)
        return 0;
    return e + (axis == XF_DP ? 0 : axis == XF_CP ? 1 : 1 + cp);
}

/* Puts local op lop on the groups along mesh axis `axis` of the body's mesh. */
static void
on_axis(xf_body *b, ir_id lop, int axis)
{
    int64_t ax = mesh_axis(b, axis);
    ir_op_set_mesh(b->out, lop, "mesh", b->mesh);
    ir_op_set_ints(b->out, lop, "mesh_axes", 1, &ax);
}

/* A reduction over several placement axes at once (mask: 1 << axis), one collective. */
static int
reduce_axes(xf_body *b, ir_id in, uint32_t mask, ir_id *out)
{
    ir_id op = ir_op_add(b->out, b->region, IR_OP_ALLREDUCE, 1, &in, 1, NULL, NULL);
    int64_t ax[XF_NAXIS];
    uint32_t n = 0;
    int rc;
    /* In mesh order: outer data, data, context. */
    static const int order[3] = {XF_EDP, XF_DP, XF_CP};
    for (int i = 0; i < 3; i++)
        if (mask & (1u << order[i]))
            ax[n++] = mesh_axis(b, order[i]);
    ir_op_set_mesh(b->out, op, "mesh", b->mesh);
    ir_op_set_ints(b->out, op, "mesh_axes", n, ax);
    if ((rc = infer_one(b, op)) != 0)
        return rc;
    *out = ir_op_output(b->out, op, 0);
    return 0;
}

/* Emits a mesh-form collective of kind on mesh axis `axis` of the body's mesh. */
static int
collective(xf_body *b, int kind, ir_id in, int axis, int64_t dim, int64_t dim2, ir_id *out)
{
    ir_id op = ir_op_add(b->out, b->region, kind, 1, &in, 1, NULL, NULL);
    int64_t root = 0;
    int rc;
    switch (kind) {
    case IR_OP_ALLGATHER:
    case IR_OP_REDUCESCATTER:
    case IR_OP_SCATTER:
    case IR_OP_ALLSLICE:
        ir_op_set_int(b->out, op, "dim", dim);
        break;
    case IR_OP_ALLTOALL:
        ir_op_set_int(b->out, op, "concat_dim", dim2);
        ir_op_set_int(b->out, op, "split_dim", dim);
        break;
    default:
        break;
    }
    on_axis(b, op, axis);
    if (kind == IR_OP_SCATTER)
        ir_op_set_ints(b->out, op, "root", 1, &root);
    if ((rc = infer_one(b, op)) != 0)
        return rc;
    *out = ir_op_output(b->out, op, 0);
    return 0;
}

static const char *const axis_name[XF_NAXIS] = {"microbatch", "data", "tensor", "context",
                                                "outer data"};

static void
place_str(const xf_place *p, char *buf, size_t n)
{
    size_t w = 0;
    for (int a = 0; a < XF_NAXIS && w < n; a++) {
        int8_t x = p->a[a];
        if (x == XF_R)
            w += (size_t)snprintf(buf + w, n - w, "%sR", a ? ", " : "[");
        else if (x == XF_P)
            w += (size_t)snprintf(buf + w, n - w, "%sP", a ? ", " : "[");
        else
            w += (size_t)snprintf(buf + w, n - w, "%sS[%d]", a ? ", " : "[", x);
    }
    if (w < n)
        snprintf(buf + w, n - w, "]");
}

static int
unsupported(xf_body *b, ir_id src, const xf_place *from, const xf_place *to, const char *why)
{
    char f[64], t[64];
    place_str(from, f, sizeof f);
    place_str(to, t, sizeof t);
    return di_error_set(b->c->err, DI_EUNSUPPORTED, "resharding %%%s from %s to %s: %s",
                        ir_str_get(b->c->m, b->c->m->values[src].name), f, t, why);
}

/* Does an axis other than a split dimension d of p inside a (less significant: layout.c)? */
static int
split_inside(const xf_place *p, int a, int8_t d)
{
    for (int x = XF_DP; x < XF_NAXIS; x++)
        if (x != a && p->a[x] == d && xform_axis_outer(a, x))
            return 1;
    return 0;
}

/*
 * Must axis a's split of dimension p come off: it changes, or an axis
 * outside it on p changes (an outer split can only come off after the inner
 * ones; an inner one that stays is split again in step 3)?
 */
static int
unsplit(const xf_place *cur, const xf_place *want, int a)
{
    int8_t p = cur->a[a];
    if (!XF_IS_S(p))
        return 0;
    if (want->a[a] != p)
        return 1;
    for (int x = XF_DP; x < XF_NAXIS; x++)
        if (x != a && cur->a[x] == p && want->a[x] != p && xform_axis_outer(x, a))
            return 1;
    return 0;
}

/*
 * One step of a conversion: collective `kind` on axis a of the local value
 * in *cur (dim, dim2 as collective() takes them), the result named src plus
 * suffix and placed `place` on a.
 */
static int
convert_step(xf_body *b, ir_id src, xf_local *cur, int kind, int a, int64_t dim, int64_t dim2,
             const char *suffix, int8_t place)
{
    int rc = collective(b, kind, cur->v, a, dim, dim2, &cur->v);
    if (rc != 0)
        return rc;
    name_value(b, cur->v, src, suffix);
    cur->pl.a[a] = place;
    return 0;
}

/* The conversion of source value src to placement want (on the body's axes) made before, or 0. */
static ir_id
conversion_of(const xf_body *b, ir_id src, const xf_place *want)
{
    if (b->convgen[src] != b->gen)
        return 0;
    for (uint32_t i = b->convhead[src]; i; i = b->conv[i - 1].next)
        if (xf_place_eq(&b->conv[i - 1].pl, want) && b->conv[i - 1].v)
            return b->conv[i - 1].v;
    return 0;
}

int
xf_body_has_conversion(const xf_body *b, ir_id src, const xf_place *to)
{
    xf_place want = xf_place_on(to, b->n);
    return conversion_of(b, src, &want) != 0;
}

int
xf_body_convert(xf_body *b, ir_id src, const xf_local *in, const xf_place *to, xf_local *out)
{
    xf_local cur = *in;
    xf_place want = xf_place_on(to, b->n);
    int rc, progress;
    /*
     * The device axes, innermost first and outermost first where one
     * dimension's splits do not decide (the order within a dimension is
     * xform_axis_outer's).
     */
    static const int axes[4] = {XF_CP, XF_DP, XF_EDP, XF_TP},
                     split_axes[4] = {XF_TP, XF_EDP, XF_DP, XF_CP};

    cur.pl = xf_place_on(&cur.pl, b->n);
    if (b->step) {
        if (want.a[XF_MB] == XF_P)
            want.a[XF_MB] = XF_R;
        if (cur.pl.a[XF_MB] == XF_P)
            cur.pl.a[XF_MB] = XF_R;
    }
    if (xf_place_eq(&cur.pl, &want)) {
        *out = cur;
        return 0;
    }
    if (cur.pl.a[XF_MB] != want.a[XF_MB])
        return unsupported(b, src, &in->pl, to,
                           "an op needs the whole batch or every microbatch at once, which "
                           "microbatching cannot give it");
    /* A conversion made before in this body. */
    if ((out->v = conversion_of(b, src, &want)) != 0) {
        out->pl = want;
        return 0;
    }
    /*
     * 1. gathers and all-to-alls, the innermost split of a dimension first
     * (an all-to-all's new split becomes the innermost of its dimension).
     */
    do {
        progress = 0;
        for (int i = 0; i < 4; i++) {
            int a = axes[i];
            int8_t p = cur.pl.a[a], q = want.a[a];
            if (!unsplit(&cur.pl, &want, a) || split_inside(&cur.pl, a, p) ||
                (XF_IS_S(q) && q != p && split_inside(&cur.pl, a, q)))
                continue;
            if ((rc = XF_IS_S(q) && q != p
                          ? convert_step(b, src, &cur, IR_OP_ALLTOALL, a, q, p, ".a2a", q)
                          : convert_step(b, src, &cur, IR_OP_ALLGATHER, a, p, 0, ".ag", XF_R)) != 0)
                return rc;
            progress = 1;
        }
    } while (progress);
    for (int i = 0; i < 4; i++)
        if (XF_IS_S(cur.pl.a[axes[i]]) && cur.pl.a[axes[i]] != want.a[axes[i]])
            return unsupported(b, src, &in->pl, to,
                               "the dimension is also split on a less significant axis");
    /* 2. reductions to replicated. */
    for (int i = 0; i < 4; i++) {
        int a = axes[i];
        if (cur.pl.a[a] == XF_P && want.a[a] == XF_R &&
            (rc = convert_step(b, src, &cur, IR_OP_ALLREDUCE, a, 0, 0, ".ar", XF_R)) != 0)
            return rc;
    }
    /*
     * 3. splits (and reduce-scatters), the outermost of a dimension first: a
     * new split is the innermost of its dimension.
     */
    do {
        progress = 0;
        for (int i = 0; i < 4; i++) {
            int a = split_axes[i], later = 0;
            int8_t p = cur.pl.a[a], q = want.a[a];
            if (!XF_IS_S(q) || p == q || split_inside(&cur.pl, a, q))
                continue;
            /* A split of q still to make outside this one goes first. */
            for (int x = XF_DP; x < XF_NAXIS; x++)
                later |= x != a && want.a[x] == q && cur.pl.a[x] != q && xform_axis_outer(x, a);
            if (later)
                continue;
            if ((rc = p == XF_P
                          ? convert_step(b, src, &cur, IR_OP_REDUCESCATTER, a, q, 0, ".rs", q)
                          : convert_step(b, src, &cur, IR_OP_ALLSLICE, a, q, 0, ".slice", q)) != 0)
                return rc;
            progress = 1;
        }
    } while (progress);
    if (!xf_place_eq(&cur.pl, &want)) {
        for (int a = 0; a < XF_NAXIS; a++)
            if (want.a[a] == XF_P && cur.pl.a[a] != XF_P)
                return unsupported(b, src, &in->pl, to,
                                   "a partial sum cannot be made from a complete value");
        for (int i = 0; i < 4; i++)
            if (XF_IS_S(want.a[axes[i]]) && cur.pl.a[axes[i]] != want.a[axes[i]])
                return unsupported(b, src, &in->pl, to,
                                   "the dimension is already split on a less significant axis");
        return unsupported(b, src, &in->pl, to, axis_name[0]);
    }
    xf_body_remember(b, src, &cur);
    *out = cur;
    return 0;
}

void
xf_body_remember(xf_body *b, ir_id src, const xf_local *l)
{
    DI_GROW(&b->conv, &b->cconv, b->nconv + 1);
    b->conv[b->nconv].src = src;
    b->conv[b->nconv].pl = l->pl;
    b->conv[b->nconv].v = l->v;
    b->conv[b->nconv].next = b->convgen[src] == b->gen ? b->convhead[src] : 0;
    b->nconv++;
    b->convhead[src] = b->nconv;
    b->convgen[src] = b->gen;
}

/*
 * Data-parallel reduction of several gradients as one bucket (as PyTorch
 * DDP and Megatron-LM reduce a contiguous buffer): each local gradient is
 * flattened, the pieces are concatenated and one all-reduce runs over the
 * data axis (xf_body_bucket_reduce); later, xf_body_bucket_split splits the
 * reduced bucket and reshapes the pieces back. The split is a separate step
 * so that the caller can place it after the rest of the backward pass: a
 * compute op waiting for the all-reduce would hold up the compute stream,
 * where DDP's gradients are views of the bucket; or, with `side`, right
 * after the reduction, on the reduction stream (dist.reduction_stream).
 *
 * With `scatter` (ZeRO: each replica keeps its shard along dimension 0, as
 * DeepSpeed and Megatron-LM's distributed optimizer reduce-scatter a flat
 * buffer) each gradient is viewed as [n, rest] for the n replicas and the
 * views are concatenated along the second dimension, so that the flat
 * bucket is replica-major: one reduce-scatter gives replica i the i-th
 * shard of every gradient, in order.
 */
int
xf_body_bucket_reduce(xf_body *b, const ir_id *srcs, const xf_local *ls, uint32_t n, int scatter,
                      ir_id *red)
{
    ir_module *out = b->out;
    ir_id *flat = di_xmalloc((n ? n : 1) * sizeof *flat), cat = 0, op;
    int64_t rep = scatter ? b->n[XF_DP] : 1;
    int rc = 0;
    for (uint32_t k = 0; k < n && rc == 0; k++) {
        int64_t shape[2] = {rep, out->types[out->values[ls[k].v].type].numel / rep};
        op = ir_op_add(out, b->region, IR_OP_RESHAPE, 1, &ls[k].v, 1, NULL, NULL);
        if (scatter)
            ir_op_set_ints(out, op, "shape", 2, shape);
        else
            ir_op_set_ints(out, op, "shape", 1, shape + 1);
        if ((rc = infer_one(b, op)) == 0) {
            flat[k] = ir_op_output(out, op, 0);
            name_value(b, flat[k], srcs[k], ".flat");
        }
    }
    if (rc == 0) {
        op = ir_op_add(out, b->region, IR_OP_CONCAT, n, flat, 1, NULL, NULL);
        ir_op_set_int(out, op, "axis", scatter ? 1 : 0);
        rc = infer_one(b, op);
        cat = ir_op_output(out, op, 0);
        name_value(b, cat, srcs[0], ".bucket");
    }
    if (rc == 0 && scatter) {
        int64_t all = out->types[out->values[cat].type].numel;
        op = ir_op_add(out, b->region, IR_OP_RESHAPE, 1, &cat, 1, NULL, NULL);
        ir_op_set_ints(out, op, "shape", 1, &all);
        if ((rc = infer_one(b, op)) == 0)
            cat = ir_op_output(out, op, 0);
    }
    if (rc == 0 && !scatter) {
        /* Partial over the data axes and/or the context axis (members alike): one all-reduce. */
        uint32_t mask = 0;
        for (int a = XF_DP; a < XF_NAXIS && n > 0; a++)
            if ((xf_partial_axes(&ls[0].pl) & 1u << a) && b->n[a] > 1)
                mask |= 1u << a;
        if ((rc = reduce_axes(b, cat, mask ? mask : 1u << XF_DP, red)) == 0)
            name_value(b, *red, srcs[0], ".bucket.ar");
    } else if (rc == 0 && (rc = collective(b, IR_OP_REDUCESCATTER, cat, XF_DP, 0, 0, red)) == 0) {
        name_value(b, *red, srcs[0], ".bucket.rs");
    }
    di_free(flat);
    return rc;
}

int
xf_body_bucket_split(xf_body *b, const ir_id *srcs, xf_local *ls, uint32_t n, int scatter,
                     ir_id red, int side)
{
    ir_module *out = b->out;
    int64_t *sizes = di_xmalloc((n ? n : 1) * sizeof *sizes);
    int64_t rep = scatter ? b->n[XF_DP] : 1;
    ir_id op;
    int rc;
    for (uint32_t k = 0; k < n; k++)
        sizes[k] = out->types[out->values[ls[k].v].type].numel / rep;
    op = ir_op_add(out, b->region, IR_OP_SPLIT, 1, &red, n, NULL, NULL);
    ir_op_set_int(out, op, "axis", 0);
    ir_op_set_ints(out, op, "split", n, sizes);
    if (side)
        ir_op_set_int(out, op, "dist.reduction_stream", 1);
    rc = infer_one(b, op);
    for (uint32_t k = 0; k < n && rc == 0; k++) {
        const ir_type *t = &out->types[out->values[ls[k].v].type];
        int64_t dims[IR_MAX_RANK];
        uint32_t rank = t->rank;
        ir_id piece = ir_op_output(out, op, k), back, rop;
        memcpy(dims, out->ints + t->dims, rank * sizeof *dims); /* ints may move below */
        dims[0] /= rep;
        rop = ir_op_add(out, b->region, IR_OP_RESHAPE, 1, &piece, 1, NULL, NULL);
        ir_op_set_ints(out, rop, "shape", rank, dims);
        if ((rc = infer_one(b, rop)) != 0)
            break;
        back = ir_op_output(out, rop, 0);
        name_value(b, back, srcs[k], scatter ? ".rs" : ".ar");
        ls[k].v = back;
        if (scatter || ls[k].pl.a[XF_DP] == XF_P)
            ls[k].pl.a[XF_DP] = scatter ? 0 : XF_R;
        if (!scatter && ls[k].pl.a[XF_CP] == XF_P)
            ls[k].pl.a[XF_CP] = XF_R;
        if (!scatter && ls[k].pl.a[XF_EDP] == XF_P)
            ls[k].pl.a[XF_EDP] = XF_R;
    }
    di_free(sizes);
    return rc;
}

/*
 * Can local gradient l (a partial sum on the data axis) join a reduce-scatter
 * bucket, ending split along dimension 0 on the data axis?
 */
int
xf_body_scatter_ok(const xf_body *b, const xf_local *l)
{
    const ir_type *t = &b->out->types[b->out->values[l->v].type];
    if (l->pl.a[XF_DP] != XF_P || t->rank == 0 || b->n[XF_DP] <= 1)
        return 0;
    /*
     * A context split (a gradient of a weight sliced along the sequence) is inside the data
     * split in a block index: gathered first by an ordinary conversion, not in a bucket.
     */
    if (XF_IS_S(l->pl.a[XF_CP]) && b->n[XF_CP] > 1)
        return 0;
    /* Partial on the outer data axis too: all-reduced there by an ordinary conversion. */
    if (l->pl.a[XF_EDP] == XF_P && b->n[XF_EDP] > 1)
        return 0;
    /* A tensor-axis split of dimension 0 is outside the data split: this is its block's dim 0. */
    return b->out->ints[t->dims] % b->n[XF_DP] == 0;
}

/* ---- ops ---- */

int
xf_scaled(ir_module *out, ir_id region, ir_id x, double scale, di_error *err, ir_id *res)
{
    ir_dtype dt = (ir_dtype)out->types[out->values[x].type].dtype;
    uint8_t bytes[8];
    uint32_t n = xform_scalar_bytes(dt, scale, bytes);
    ir_id ty = ir_type_tensor(out, dt, 0, NULL, IR_DEVICE_NONE), in[2], op;
    int rc;
    /* An unplaced scalar constant: it joins the tensor wherever it lives. */
    op = ir_op_add(out, region, IR_OP_CONSTANT, 0, NULL, 1, &ty, NULL);
    ir_op_set_tensor(out, op, "value", ty, bytes, n);
    in[0] = x;
    in[1] = ir_op_output(out, op, 0);
    op = ir_op_add(out, region, IR_OP_MUL, 2, in, 1, NULL, NULL);
    if ((rc = xf_infer(out, op, err)) != 0)
        return rc;
    *res = ir_op_output(out, op, 0);
    return 0;
}

/* x * scale (x local, any placement). */
static int
scaled(xf_body *b, ir_id x, double scale, ir_id *out)
{
    return xf_scaled(b->out, b->region, x, scale, b->c->err, out);
}

static xf_place
normalized(const xf_body *b, const xf_place *p)
{
    xf_place q = *p;
    if (b->step && q.a[XF_MB] == XF_P)
        q.a[XF_MB] = XF_R;
    return q;
}

/*
 * Does source op split its vocabulary on the tensor axis (shard.c's
 * F_VOCAB): a Gather from a table split along the gathered axis, the
 * gradient of one, a cross-entropy or its gradient over split classes?
 */
static int
vocab_split(const xf_body *b, ir_id op)
{
    const xf_ctx *c = b->c;
    const ir_module *m = c->m;
    const ir_op *o = &m->ops[op];
    int64_t axis;
    if (b->n[XF_TP] <= 1)
        return 0;
    switch (o->kind) {
    case IR_OP_GATHER:
        axis = ir_op_int(m, op, "axis", 0);
        return axis >= 0 && c->req[o->inputs].a[XF_TP] == axis;
    case IR_OP_GATHERGRAD:
        axis = ir_op_int(m, op, "axis", 0);
        return axis >= 0 && c->place[o->outputs].a[XF_TP] == axis;
    case IR_OP_SCELOSS:
        return c->req[o->inputs].a[XF_TP] == 1;
    case IR_OP_SCELOSSGRAD:
        return c->req[o->inputs + 1].a[XF_TP] == 1;
    default:
        return 0;
    }
}

/*
 * The vocabulary-parallel cross-entropy (or its gradient) of source op on
 * local inputs lin[]: local statistics, one all_gather of them over the
 * tensor axis, then the loss or the gradient (docs/transforms.md). *last is
 * the op whose result is the source op's.
 */
static int
emit_vocab_ce(xf_body *b, ir_id op, const ir_id *lin, ir_id *last)
{
    const ir_module *m = b->c->m;
    int grad = m->ops[op].kind == IR_OP_SCELOSSGRAD;
    ir_id lg = lin[grad], lb = lin[grad + 1], in[4], st, sop, fop;
    int rc;
    in[0] = lg;
    in[1] = lb;
    sop = ir_op_add(b->out, b->region, IR_OP_VOCABSTATS, 2, in, 1, NULL, NULL);
    xf_copy_attrs(b->out, sop, m, op, "reduction", NULL);
    on_axis(b, sop, XF_TP);
    if ((rc = infer_one(b, sop)) != 0 ||
        (rc = collective(b, IR_OP_ALLGATHER, ir_op_output(b->out, sop, 0), XF_TP, 1, 0, &st)) != 0)
        return rc;
    name_value(b, ir_op_output(b->out, sop, 0), m->refs[m->ops[op].inputs + grad], ".vstats");
    name_value(b, st, m->refs[m->ops[op].inputs + grad], ".vstats.ag");
    if (grad) {
        in[0] = lin[0];
        in[1] = lg;
        in[2] = lb;
        in[3] = st;
        fop = ir_op_add(b->out, b->region, IR_OP_VOCABGRAD, 4, in, 1, NULL, NULL);
        on_axis(b, fop, XF_TP);
    } else {
        in[0] = st;
        in[1] = lb;
        fop = ir_op_add(b->out, b->region, IR_OP_VOCABLOSS, 2, in, 1, NULL, NULL);
    }
    copy_attrs_fast(b, fop, op, 0);
    b->out->ops[fop].name = m->ops[op].name ? xf_str(b, m->ops[op].name) : 0;
    *last = fop;
    return infer_one(b, fop);
}

/* A ring step on the context axis: each rank's x to the next rank. */
static int
ring_shift(xf_body *b, ir_id x, ir_id src, const char *suffix, ir_id *out)
{
    ir_id op = ir_op_add(b->out, b->region, IR_OP_SHIFT, 1, &x, 1, NULL, NULL);
    int rc;
    on_axis(b, op, XF_CP);
    if ((rc = infer_one(b, op)) != 0)
        return rc;
    *out = ir_op_output(b->out, op, 0);
    name_value(b, *out, src, suffix);
    return 0;
}

/* x + y (local values of one type), for the ring's accumulations. */
static int
ring_add(xf_body *b, ir_id x, ir_id y, ir_id *out)
{
    ir_id in[2] = {x, y}, op = ir_op_add(b->out, b->region, IR_OP_ADD, 2, in, 1, NULL, NULL);
    int rc = infer_one(b, op);
    *out = ir_op_output(b->out, op, 0);
    return rc;
}

/* One attention step of the ring: source op `op` on keys and values kb, vb (held kv_shift j). */
static int
ring_step(xf_body *b, ir_id op, const ir_id *in, uint32_t nin, uint32_t j, ir_id *step)
{
    const ir_op *o = &b->c->m->ops[op];
    int64_t shift = j;
    *step = ir_op_add(b->out, b->region, o->kind, nin, in, o->noutput, NULL, NULL);
    b->out->ops[*step].name = o->name ? xf_str(b, o->name) : 0;
    copy_attrs_fast(b, *step, op, 0);
    on_axis(b, *step, XF_CP);
    ir_op_set_int(b->out, *step, "kv_shift", shift);
    return infer_one(b, *step);
}

/*
 * Ring attention (xf_ctx.ring): fused attention with the keys and values
 * split along the sequence over the cp context ranks, as Megatron-LM's
 * context parallelism runs it. Forward: cp steps; step j attends to the
 * block that rank r - j holds, merged into the running output and
 * log-sum-exp (FlashAttention's five-input form), while dist.shift brings
 * the next block (emitted before the step, so that it overlaps it). Backward:
 * cp steps of the gradient on the same blocks, normalized by the forward's
 * log-sum-exp; dq accumulates in place, the blocks' dk and dv accumulate in
 * buffers that travel with the blocks and reach their owner after one more
 * shift. The local results in outs[0..noutput).
 */
static int
emit_ring_attention(xf_body *b, ir_id op, const ir_id *lin, ir_id *outs)
{
    const ir_module *m = b->c->m;
    const ir_op *o = &m->ops[op];
    uint32_t cp = b->n[XF_CP];
    ir_id kb = lin[1], vb = lin[2], kn = 0, vn = 0, in[6], step;
    ir_id sk = m->refs[o->inputs + 1], sv = m->refs[o->inputs + 2];
    int grad = o->kind == IR_OP_FLASHATTNGRAD, rc = 0;
    memset(outs, 0, 3 * sizeof *outs);
    for (uint32_t j = 0; j < cp && rc == 0; j++) {
        if (j + 1 < cp && ((rc = ring_shift(b, kb, sk, ".ring", &kn)) != 0 ||
                           (rc = ring_shift(b, vb, sv, ".ring", &vn)) != 0))
            break;
        memcpy(in, lin, o->ninput * sizeof *in);
        in[1] = kb;
        in[2] = vb;
        if (!grad) {
            in[3] = outs[0];
            in[4] = outs[1];
            if ((rc = ring_step(b, op, in, j ? 5 : 3, j, &step)) != 0)
                break;
            outs[0] = ir_op_output(b->out, step, 0);
            outs[1] = ir_op_output(b->out, step, 1);
        } else {
            if ((rc = ring_step(b, op, in, 6, j, &step)) != 0)
                break;
            for (uint32_t k = 0; k < 3 && rc == 0; k++) {
                ir_id g = ir_op_output(b->out, step, k), acc = outs[k];
                /* The dk, dv buffers arrive from the previous rank with their block. */
                if (j > 0 && k > 0)
                    rc = ring_shift(b, acc, o->outputs + k, ".ring", &acc);
                if (rc == 0)
                    rc = j > 0 ? ring_add(b, acc, g, &outs[k]) : (outs[k] = g, 0);
            }
        }
        kb = kn;
        vb = vn;
    }
    /* The dk, dv buffers one step more, to the rank that holds their block. */
    for (uint32_t k = 1; grad && k < 3 && rc == 0; k++)
        rc = ring_shift(b, outs[k], o->outputs + k, ".ring", &outs[k]);
    return rc;
}

/* xf_body_emit with room for the op's local inputs in lin[]. */
static int
emit_op(xf_body *b, ir_id op, ir_id *lin)
{
    xf_ctx *c = b->c;
    const ir_module *m = c->m;
    const ir_op *o = &m->ops[op];
    const xf_opinfo *oi = &c->op[op];
    ir_id nop;
    int rc, hit = 0, vocab;
    for (uint32_t k = 0; k < o->ninput; k++) {
        ir_id v = m->refs[o->inputs + k];
        xf_local l, cv;
        xf_place want = c->req[o->inputs + k];
        if ((rc = xf_body_get(b, v, &l)) != 0)
            return rc;
        if ((rc = xf_body_convert(b, v, &l, &want, &cv)) != 0) {
            ir_label lab = ir_op_label(m, op);
            di_error_prefix(c->err, "%s, input %u", lab.s, k);
            return rc;
        }
        lin[k] = cv.v;
        if (oi->scale_at == XF_SCALE_IN && oi->scale_in == k && oi->scale != 1.0 &&
            (rc = scaled(b, lin[k], oi->scale, &lin[k])) != 0)
            return rc;
    }
    vocab = vocab_split(b, op);
    if (vocab && (o->kind == IR_OP_SCELOSS || o->kind == IR_OP_SCELOSSGRAD)) {
        if ((rc = emit_vocab_ce(b, op, lin, &nop)) != 0) {
            ir_label lab = ir_op_label(m, op);
            di_error_prefix(c->err, "%s", lab.s);
            return rc;
        }
        hit = 1;
        goto bind;
    }
    if ((o->kind == IR_OP_FLASHATTN || o->kind == IR_OP_FLASHATTNGRAD) && c->ring &&
        b->n[XF_CP] > 1 && XF_IS_S(c->req[o->inputs + 1].a[XF_CP])) {
        ir_id outs[3];
        if ((rc = emit_ring_attention(b, op, lin, outs)) != 0) {
            ir_label lab = ir_op_label(m, op);
            di_error_prefix(c->err, "%s", lab.s);
            return rc;
        }
        for (uint32_t k = 0; k < o->noutput && k < 3; k++) {
            ir_id sv = o->outputs + k;
            xf_place p = normalized(b, &c->place[sv]);
            name_value(b, outs[k], sv, NULL);
            xf_body_bind(b, sv, outs[k], &p);
        }
        return 0;
    }
    nop = ir_op_add(b->out, b->region, o->kind, o->ninput, lin, o->noutput, NULL, NULL);
    b->out->ops[nop].name = o->name ? xf_str(b, o->name) : 0;
    if (vocab)
        on_axis(b, nop, XF_TP);
    /* Fused causal attention on a block of the queries: its offset is the group position. */
    if ((o->kind == IR_OP_FLASHATTN || o->kind == IR_OP_FLASHATTNGRAD) && b->n[XF_CP] > 1 &&
        XF_IS_S(c->req[o->inputs].a[XF_CP]))
        on_axis(b, nop, XF_CP);
    if (o->kind == IR_OP_CONSTANT) {
        const ir_attr *va = ir_op_attr(m, op, "value");
        xf_place r = xf_place_rep();
        ir_id ty;
        xf_copy_attrs(b->out, nop, m, op, "value", "device");
        if (va == NULL || va->kind != IR_ATTR_TENSOR)
            return di_error_set(c->err, DI_EINTERNAL, "Constant without a value");
        if (m->types[m->values[o->outputs].type].rank == 0)
            ty = ir_type_tensor(b->out, (ir_dtype)m->types[m->values[o->outputs].type].dtype, 0,
                                NULL, IR_DEVICE_NONE);
        else
            ty = xf_local_type(b, o->outputs, &r, -1);
        ir_op_set_tensor(b->out, nop, "value", ty, m->data + va->off, va->n);
        b->out->values[ir_op_output(b->out, nop, 0)].type = ty;
        hit = 1;
    } else {
        int shaped =
            o->kind == IR_OP_RESHAPE || o->kind == IR_OP_GATHERGRAD || o->kind == IR_OP_REDUCESUMTO;
        copy_attrs_fast(b, nop, op, shaped);
        if (shaped) {
            int64_t dims[IR_MAX_RANK];
            xf_place p = c->place[o->outputs];
            if (xf_local_dims(c, o->outputs, &p, b->n, dims) != 0)
                return di_error_set(c->err, DI_EINTERNAL, "no local shape");
            ir_op_set_ints(b->out, nop, "shape", m->types[m->values[o->outputs].type].rank, dims);
        }
        /* The same source op with the same input types as last time: the same result types. */
        if (b->tcache[op]) {
            const ir_id *t = b->tpool + b->tcache[op] - 1;
            hit = 1;
            for (uint32_t k = 0; k < o->ninput && hit; k++)
                hit = t[k] == b->out->values[lin[k]].type;
            for (uint32_t k = 0; k < o->noutput && hit; k++)
                b->out->values[ir_op_output(b->out, nop, k)].type = t[o->ninput + k];
        }
    }
    if (!hit) {
        if ((rc = infer_one(b, nop)) != 0) {
            ir_label lab = ir_op_label(m, op);
            di_error_prefix(c->err, "%s", lab.s);
            return rc;
        }
        for (uint32_t k = 0; k < o->noutput; k++) {
            ir_id sv = o->outputs + k, lv = ir_op_output(b->out, nop, k);
            const ir_type *lt = &b->out->types[b->out->values[lv].type];
            int64_t dims[IR_MAX_RANK];
            if (xf_local_dims(c, sv, &c->place[sv], b->n, dims) != 0 ||
                memcmp(dims, ir_type_dims(b->out, b->out->values[lv].type),
                       lt->rank * sizeof *dims) != 0) {
                ir_label lab = ir_op_label(m, op);
                return di_error_set(c->err, DI_EINTERNAL,
                                    "%s: result %u has a local shape other than propagation's",
                                    lab.s, k);
            }
        }
        /* Remember the types (entries are never reused: one per emission with new types). */
        DI_GROW(&b->tpool, &b->ctpool, b->ntpool + o->ninput + o->noutput);
        b->tcache[op] = b->ntpool + 1;
        for (uint32_t k = 0; k < o->ninput; k++)
            b->tpool[b->ntpool++] = b->out->values[lin[k]].type;
        for (uint32_t k = 0; k < o->noutput; k++)
            b->tpool[b->ntpool++] = b->out->values[ir_op_output(b->out, nop, k)].type;
    }
bind:
    for (uint32_t k = 0; k < o->noutput; k++) {
        ir_id sv = o->outputs + k, lv = ir_op_output(b->out, nop, k);
        xf_place p = normalized(b, &c->place[sv]);
        name_value(b, lv, sv, NULL);
        xf_body_bind(b, sv, lv, &p);
    }
    if (oi->scale_at == XF_SCALE_OUT && oi->scale != 1.0 && o->noutput) {
        ir_id sv = o->outputs, lv;
        xf_place p = normalized(b, &c->place[sv]);
        if ((rc = scaled(b, b->env[sv].v, oi->scale, &lv)) != 0)
            return rc;
        name_value(b, lv, sv, ".scaled");
        xf_body_bind(b, sv, lv, &p);
    }
    return 0;
}

int
xf_body_emit(xf_body *b, ir_id op)
{
    ir_id small[64], *lin = small;
    uint32_t n = b->c->m->ops[op].ninput;
    int rc;
    if (n > sizeof small / sizeof small[0])
        lin = di_xmalloc(n * sizeof *lin);
    rc = emit_op(b, op, lin);
    if (lin != small)
        di_free(lin);
    return rc;
}
