/*
 * exec.c: the sequential and distributed reference executors (ex_run).
 *
 * One value table holds every value of the module: a slot per value id with
 * one tensor per *lane* and *leaf*. A leaf is a tensor location of the
 * value's type (a tensor has one; a tuple has one per element, flattened
 * when tuples nest). A lane is one instance of a dist.pmap body: the entry
 * function runs with one lane, and a pmap runs its body with one lane per
 * device, op by op in lockstep, so that a mesh-form collective inside the
 * body sees the inputs of every instance of its group at once. Values on
 * different devices are simply different slots (or lanes), each tensor
 * tagged with its device. A pmap that calls a function (IR_OPFLAG_CALLEE)
 * runs the function as its body; the function's values are freed after
 * each call.
 *
 * Communication executes for real: dist.send copies, dist.scatter splits
 * along dim, dist.broadcast copies, dist.gather concatenates, all_reduce
 * reduces (sum, max or mean) and gives every member the result, all_gather
 * concatenates in group order, reduce_scatter reduces then hands out parts,
 * all_to_all exchanges parts. Groups of the mesh form (docs/ops.md) are the
 * devices that agree on the axes outside mesh_axes, ordered by their
 * coordinates along mesh_axes, the first listed axis outermost.
 *
 * Global-view (DTensor) values hold the full logical tensor: compute ops run
 * on logical values, and a collective applied to a distributed tensor is the
 * identity on its logical value (only the placement changes). A dist.pmap
 * over a mesh hands each instance its shard (S[d]: the block along d, outer
 * mesh axes more significant; R: a copy; P(sum): the value on coordinate 0
 * and zeros elsewhere; P(max): a copy) and assembles its results from the
 * instances according to the declared placements (concatenate, take
 * coordinate 0, sum or max).
 *
 * Every result is compared with its declared type, so a module whose types
 * disagree with the data fails with a message instead of computing garbage.
 */
#include "exec/exec_int.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

typedef struct slot {
    uint32_t nlane; /* lanes holding the value; 0 = not computed */
    uint32_t nleaf; /* tensors per lane */
    ex_tensor *t;   /* nlane * nleaf tensors, lane-major */
} slot;

typedef struct exec {
    const ir_module *m;
    slot *vals;     /* one per value id */
    uint32_t *uses; /* remaining uses of each top-level value (for early freeing) */
    di_error *err;
    uint32_t depth; /* pmaps running inside each other */
} exec;

/* ---- helpers ---- */

/* Number of tensor locations of a type (tuples flattened). */
static uint32_t
type_leaves(const ir_module *m, ir_id ty, int depth)
{
    const ir_type *t;
    uint32_t n = 0;
    if (ty == 0 || ty >= m->ntype || depth > 64)
        return 0;
    t = &m->types[ty];
    if (t->kind == IR_TYPE_TENSOR)
        return 1;
    if (t->kind != IR_TYPE_TUPLE)
        return 0;
    for (uint32_t i = 0; i < t->nelem; i++)
        n += type_leaves(m, m->refs[t->elems + i], depth + 1);
    return n;
}

/* The type of leaf i of ty (0 if none). */
static ir_id
leaf_type(const ir_module *m, ir_id ty, uint32_t i, int depth)
{
    const ir_type *t;
    if (ty == 0 || ty >= m->ntype || depth > 64)
        return 0;
    t = &m->types[ty];
    if (t->kind == IR_TYPE_TENSOR)
        return i == 0 ? ty : 0;
    for (uint32_t e = 0; e < t->nelem; e++) {
        ir_id et = m->refs[t->elems + e];
        uint32_t n = type_leaves(m, et, depth + 1);
        if (i < n)
            return leaf_type(m, et, i, depth + 1);
        i -= n;
    }
    return 0;
}

static void
slot_free(slot *s)
{
    for (uint32_t i = 0; i < s->nlane * s->nleaf; i++)
        ex_tensor_fini(&s->t[i]);
    di_free(s->t);
    memset(s, 0, sizeof *s);
}

static int
slot_alloc(exec *x, slot *s, uint32_t nlane, uint32_t nleaf)
{
    size_t n = (size_t)nlane * nleaf;
    memset(s, 0, sizeof *s);
    s->t = di_calloc(n > 0 ? n : 1, sizeof *s->t);
    if (s->t == NULL)
        return di_error_set(x->err, DI_ENOMEM, "out of memory");
    s->nlane = nlane;
    s->nleaf = nleaf;
    return 0;
}

/* Leaf `leaf` of value v on lane l (values computed with one lane serve every lane). */
static ex_tensor *
val_at(exec *x, ir_id v, uint32_t lane, uint32_t leaf)
{
    slot *s = &x->vals[v];
    if (s->nlane == 0 || leaf >= s->nleaf)
        return NULL;
    if (lane >= s->nlane)
        lane = 0;
    return &s->t[(size_t)lane * s->nleaf + leaf];
}

static int xfail(exec *x, ir_id op, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int
xfail(exec *x, ir_id op, int code, const char *fmt, ...)
{
    char msg[800];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return di_error_set(x->err, code, "%s: %s", ir_op_label(x->m, op).s, msg);
}

/*
 * Checks tensor t against tensor type ty and tags it with its device
 * (lane_dev for a tensor on a device variable).
 */
static int
check_type(exec *x, ir_id op, uint32_t out, ex_tensor *t, ir_id ty, int32_t lane_dev)
{
    const ir_module *m = x->m;
    const ir_type *tp;
    char a[IR_MAX_RANK * 22 + 4], b[IR_MAX_RANK * 22 + 4];
    if (ty == 0 || ty >= m->ntype || m->types[ty].kind != IR_TYPE_TENSOR)
        return xfail(x, op, DI_EVERIFY, "result %u has no tensor type", out);
    tp = &m->types[ty];
    if (tp->dtype != t->dtype || tp->rank != t->rank ||
        (t->rank && memcmp(m->ints + tp->dims, t->dims, t->rank * sizeof t->dims[0]) != 0))
        return xfail(x, op, DI_EVERIFY, "result %u is %s%s but its type says %s%s", out,
                     ir_dtype_name(t->dtype), ex_shape_str(a, sizeof a, t->rank, t->dims),
                     ir_dtype_name((ir_dtype)tp->dtype),
                     ex_shape_str(b, sizeof b, tp->rank, m->ints + tp->dims));
    t->device = tp->devvar ? lane_dev : tp->device;
    return 0;
}

/* ---- groups of the mesh form ---- */

/* Lanes of the running region: their count and device ids. */
typedef struct lanes {
    uint32_t n;
    const int32_t *dev; /* NULL at the top level */
} lanes;

/*
 * The group of lane l for a mesh-form collective: member lanes in group
 * order (members[0..*g)), the position of l among them, and the root member
 * index. Returns 0 or an error naming the op.
 */
static int
mesh_group(exec *x, ir_id op, const lanes *ln, uint32_t l, uint32_t *members, uint32_t *g,
           uint32_t *pos, uint32_t *root)
{
    const ir_module *m = x->m;
    const ir_attr *ma = ir_op_attr(m, op, "mesh");
    uint32_t na, axes[IR_MAX_RANK], mrank, nrt;
    const int64_t *ax = ir_op_ints(m, op, "mesh_axes", &na);
    const int64_t *rt = ir_op_ints(m, op, "root", &nrt);
    const int64_t *shape, *devs;
    int64_t ndev, self = -1;
    uint32_t *posn;
    ir_id mesh;
    if (ma == NULL || ma->kind != IR_ATTR_MESH || ma->s == 0 || ma->s >= m->nmesh)
        return xfail(x, op, DI_EVERIFY, "mesh does not name a mesh of the module");
    mesh = ma->s;
    mrank = m->meshes[mesh].rank;
    if (mrank > IR_MAX_RANK)
        return xfail(x, op, DI_EVERIFY, "mesh rank %u exceeds %d", mrank, IR_MAX_RANK);
    shape = ir_mesh_shape(m, mesh);
    devs = ir_mesh_devices(m, mesh);
    ndev = m->meshes[mesh].ndevice;
    if (ax == NULL) {
        na = mrank;
        for (uint32_t i = 0; i < mrank; i++)
            axes[i] = i;
    } else {
        if (na > mrank)
            return xfail(x, op, DI_EVERIFY, "mesh_axes has %u entries for a %u-d mesh", na, mrank);
        for (uint32_t i = 0; i < na; i++) {
            if (ax[i] < 0 || ax[i] >= (int64_t)mrank)
                return xfail(x, op, DI_EVERIFY, "mesh_axes[%u] is not an axis", i);
            axes[i] = (uint32_t)ax[i];
        }
    }
    for (int64_t i = 0; i < ndev; i++)
        if (devs[i] == ln->dev[l]) {
            self = i;
            break;
        }
    if (self < 0)
        return xfail(x, op, DI_EVERIFY, "device %d of this pmap instance is not in mesh @%s",
                     (int)ln->dev[l], ir_str_get(m, m->meshes[mesh].name));
    posn = di_xcalloc((size_t)ndev, sizeof *posn);
    ir_mesh_group(m, mesh, axes, na, (uint32_t)self, posn, g, pos);
    *root = 0;
    for (uint32_t k = 0; k < *g; k++) {
        int64_t dev = devs[posn[k]];
        uint32_t lane = UINT32_MAX;
        for (uint32_t i = 0; i < ln->n; i++)
            if (ln->dev[i] == dev) {
                lane = i;
                break;
            }
        if (lane == UINT32_MAX) {
            di_free(posn);
            return xfail(x, op, DI_EVERIFY,
                         "group member device %lld runs no instance of the "
                         "enclosing dist.pmap",
                         (long long)dev);
        }
        members[k] = lane;
    }
    di_free(posn);
    if (rt != NULL && nrt == na) {
        int64_t r = 0;
        for (uint32_t j = 0; j < na; j++)
            r = r * shape[axes[j]] + rt[j];
        if (r < 0 || r >= (int64_t)*g)
            return xfail(x, op, DI_EVERIFY, "root lies outside the group");
        *root = (uint32_t)r;
    }
    return 0;
}

/* ---- collective arithmetic on a list of tensors ---- */

/* reduction: 0 sum, 1 max, 2 mean. */
static int
reduction_of(exec *x, ir_id op, int *red)
{
    const char *r = ir_op_string(x->m, op, "reduction", "sum");
    if (strcmp(r, "sum") == 0)
        *red = 0;
    else if (strcmp(r, "max") == 0)
        *red = 1;
    else if (strcmp(r, "mean") == 0)
        *red = 2;
    else
        return xfail(x, op, DI_EVERIFY, "reduction \"%s\" is not sum, max or mean", r);
    return 0;
}

static int
reduce_list(exec *x, ir_id op, const ex_tensor *const *in, uint32_t n, int red, ex_tensor *out)
{
    char a[IR_MAX_RANK * 22 + 4], b[IR_MAX_RANK * 22 + 4];
    int rc;
    for (uint32_t k = 1; k < n; k++)
        if (in[k]->dtype != in[0]->dtype || in[k]->rank != in[0]->rank ||
            memcmp(in[k]->dims, in[0]->dims, in[0]->rank * sizeof in[0]->dims[0]) != 0)
            return xfail(x, op, DI_EVERIFY, "member %u holds %s, member 0 holds %s", k,
                         ex_shape_str(a, sizeof a, in[k]->rank, in[k]->dims),
                         ex_shape_str(b, sizeof b, in[0]->rank, in[0]->dims));
    if ((rc = ex_tensor_copy(out, in[0])) != 0)
        return xfail(x, op, rc, "cannot allocate the result");
    for (size_t i = 0; i < out->numel; i++) {
        double v = ex_get(in[0], i);
        for (uint32_t k = 1; k < n; k++) {
            double w = ex_get(in[k], i);
            v = red == 1 ? (w > v ? w : v) : v + w;
        }
        if (red == 2)
            v /= (double)n;
        ex_set(out, i, v);
    }
    return 0;
}

/* Normalized int attribute key against rank. */
static int
dim_attr(exec *x, ir_id op, const char *key, uint32_t rank, uint32_t *out)
{
    const ir_attr *a = ir_op_attr(x->m, op, key);
    int64_t d;
    if (a == NULL || a->kind != IR_ATTR_INT)
        return xfail(x, op, DI_EVERIFY, "missing int attribute %s", key);
    d = a->i;
    if (d < -(int64_t)rank || d >= (int64_t)rank)
        return xfail(x, op, DI_EVERIFY, "%s %lld is out of range for rank %u", key, (long long)d,
                     rank);
    *out = (uint32_t)(d < 0 ? d + rank : d);
    return 0;
}

/* Propagates an error from a tensor helper with the op's label. */
static int
relabel(exec *x, ir_id op, int rc)
{
    char msg[sizeof x->err->msg];
    snprintf(msg, sizeof msg, "%s", x->err->msg);
    return xfail(x, op, rc, "%s", msg);
}

/*
 * The result of collective `kind` for group member `pos` of g from the
 * members' inputs in[0..g), into out.
 */
static int
collective(exec *x, ir_id op, int kind, const ex_tensor *const *in, uint32_t g, uint32_t pos,
           uint32_t root, ex_tensor *out)
{
    uint32_t dim, d2;
    int red, rc;
    switch (kind) {
    case IR_OP_ALLREDUCE:
        if ((rc = reduction_of(x, op, &red)) != 0)
            return rc;
        return reduce_list(x, op, in, g, red, out);
    case IR_OP_ALLGATHER:
    case IR_OP_GATHERTO:
        if ((rc = dim_attr(x, op, "dim", in[0]->rank, &dim)) != 0)
            return rc;
        if ((rc = ex_concat(in, g, dim, out, x->err)) != 0)
            return relabel(x, op, rc);
        return 0;
    case IR_OP_REDUCESCATTER: {
        ex_tensor sum;
        if ((rc = reduction_of(x, op, &red)) != 0 ||
            (rc = dim_attr(x, op, "dim", in[0]->rank, &dim)) != 0 ||
            (rc = reduce_list(x, op, in, g, red, &sum)) != 0)
            return rc;
        rc = ex_split_part(&sum, dim, g, pos, out, x->err);
        ex_tensor_fini(&sum);
        return rc ? relabel(x, op, rc) : 0;
    }
    case IR_OP_ALLTOALL: {
        ex_tensor *parts;
        const ex_tensor **pp;
        if ((rc = dim_attr(x, op, "split_dim", in[0]->rank, &dim)) != 0 ||
            (rc = dim_attr(x, op, "concat_dim", in[0]->rank, &d2)) != 0)
            return rc;
        parts = di_calloc(g, sizeof *parts);
        pp = di_calloc(g, sizeof *pp);
        if (parts == NULL || pp == NULL) {
            di_free(parts);
            di_free(pp);
            return xfail(x, op, DI_ENOMEM, "out of memory");
        }
        rc = 0;
        for (uint32_t j = 0; j < g && rc == 0; j++) {
            rc = ex_split_part(in[j], dim, g, pos, &parts[j], x->err);
            pp[j] = &parts[j];
        }
        if (rc == 0)
            rc = ex_concat(pp, g, d2, out, x->err);
        for (uint32_t j = 0; j < g; j++)
            ex_tensor_fini(&parts[j]);
        di_free(parts);
        di_free(pp);
        return rc ? relabel(x, op, rc) : 0;
    }
    case IR_OP_BROADCAST:
        if ((rc = ex_tensor_copy(out, in[root])) != 0)
            return xfail(x, op, rc, "cannot allocate the result");
        return 0;
    case IR_OP_SCATTER:
        if ((rc = dim_attr(x, op, "dim", in[root]->rank, &dim)) != 0)
            return rc;
        rc = ex_split_part(in[root], dim, g, pos, out, x->err);
        return rc ? relabel(x, op, rc) : 0;
    case IR_OP_SHIFT: {
        /* Member pos receives member pos - offset's tensor (cyclically). */
        int64_t off = ir_op_int(x->m, op, "offset", 1) % (int64_t)g;
        uint32_t from = (uint32_t)(((int64_t)pos - off + (int64_t)g) % (int64_t)g);
        if ((rc = ex_tensor_copy(out, in[from])) != 0)
            return xfail(x, op, rc, "cannot allocate the result");
        return 0;
    }
    case IR_OP_ALLSLICE:
        /* Each member keeps its own block of its own (replicated) copy. */
        if ((rc = dim_attr(x, op, "dim", in[pos]->rank, &dim)) != 0)
            return rc;
        rc = ex_split_part(in[pos], dim, g, pos, out, x->err);
        return rc ? relabel(x, op, rc) : 0;
    default:
        return xfail(x, op, DI_EUNSUPPORTED, "not a collective");
    }
}

/* ---- communication ops ---- */

/* Stores result tensors (lane-major, nleaf per lane) into the op's result slot and checks them. */
static int
store_result(exec *x, ir_id op, uint32_t out, slot *s, const lanes *ln)
{
    ir_id v = ir_op_output(x->m, op, out);
    ir_id ty = x->m->values[v].type;
    for (uint32_t l = 0; l < s->nlane; l++)
        for (uint32_t f = 0; f < s->nleaf; f++) {
            int rc = check_type(x, op, out, &s->t[(size_t)l * s->nleaf + f],
                                leaf_type(x->m, ty, f, 0), ln->dev ? ln->dev[l] : -1);
            if (rc != 0) {
                slot_free(s);
                return rc;
            }
        }
    slot_free(&x->vals[v]);
    x->vals[v] = *s;
    return 0;
}

/* Whether value v is a distributed (global-view) tensor. */
static int
is_dtensor(const ir_module *m, ir_id v)
{
    ir_id ty = m->values[v].type;
    return ty && ty < m->ntype && m->types[ty].kind == IR_TYPE_TENSOR && m->types[ty].mesh;
}

static int
run_comm(exec *x, ir_id op, const lanes *ln)
{
    const ir_module *m = x->m;
    int kind = m->ops[op].kind, rc = 0;
    ir_id in = ir_op_input(m, op, 0), res = ir_op_output(m, op, 0);
    uint32_t nleaf_out = type_leaves(m, m->values[res].type, 0);
    int mesh_form = ir_op_attr(m, op, "mesh") != NULL;
    slot s;
    if (x->vals[in].nlane == 0)
        return xfail(x, op, DI_EINTERNAL, "input 0 has not been computed");
    if ((rc = slot_alloc(x, &s, ln->n, nleaf_out)) != 0)
        return rc;
    if (mesh_form && is_dtensor(m, in)) {
        /* Global view: the logical value does not change. */
        for (uint32_t l = 0; l < ln->n && rc == 0; l++)
            if ((rc = ex_tensor_copy(&s.t[l], val_at(x, in, l, 0))) != 0)
                rc = xfail(x, op, rc, "cannot allocate the result");
    } else if (mesh_form) {
        uint32_t *members, g = 0, pos = 0, root = 0;
        const ex_tensor **gin;
        if (ln->dev == NULL) {
            slot_free(&s);
            return xfail(x, op, DI_EVERIFY,
                         "the mesh form on a device tensor runs only inside "
                         "a dist.pmap (or give a distributed tensor)");
        }
        members = di_calloc(ln->n + 1, sizeof *members);
        gin = di_calloc(ln->n + 1, sizeof *gin);
        if (members == NULL || gin == NULL)
            rc = xfail(x, op, DI_ENOMEM, "out of memory");
        for (uint32_t l = 0; l < ln->n && rc == 0; l++) {
            if ((rc = mesh_group(x, op, ln, l, members, &g, &pos, &root)) != 0)
                break;
            if (g > ln->n) {
                rc = xfail(x, op, DI_EVERIFY,
                           "the group has %u members, more than the %u "
                           "instances of the enclosing dist.pmap",
                           g, ln->n);
                break;
            }
            for (uint32_t k = 0; k < g; k++)
                gin[k] = val_at(x, in, members[k], 0);
            rc = collective(x, op, kind, gin, g, pos, root, &s.t[l]);
        }
        di_free(members);
        di_free(gin);
    } else {
        /* Tuple form (or send), per lane. */
        for (uint32_t l = 0; l < ln->n && rc == 0; l++) {
            slot *si = &x->vals[in];
            const ex_tensor *const *elems;
            const ex_tensor *gin[1];
            uint32_t n = si->nleaf;
            ex_tensor *dst = &s.t[(size_t)l * nleaf_out];
            uint32_t li = l < si->nlane ? l : 0;
            elems = (const ex_tensor *const *)NULL;
            {
                /* Pointers to this lane's leaves. */
                const ex_tensor **ptrs = di_calloc(n ? n : 1, sizeof *ptrs);
                if (ptrs == NULL) {
                    rc = xfail(x, op, DI_ENOMEM, "out of memory");
                    break;
                }
                for (uint32_t k = 0; k < n; k++)
                    ptrs[k] = &si->t[(size_t)li * n + k];
                elems = ptrs;
            }
            switch (kind) {
            case IR_OP_SEND:
                /* A tensor, or a tuple sent element by element. */
                for (uint32_t k = 0; k < nleaf_out && rc == 0; k++)
                    if ((rc = ex_tensor_copy(&dst[k], elems[k < n ? k : 0])) != 0)
                        rc = xfail(x, op, rc, "cannot allocate the result");
                break;
            case IR_OP_BROADCAST:
            case IR_OP_SCATTER:
                gin[0] = elems[0];
                for (uint32_t k = 0; k < nleaf_out && rc == 0; k++)
                    rc = collective(x, op, kind, gin, nleaf_out, k, 0, &dst[k]);
                break;
            case IR_OP_GATHERTO:
                rc = collective(x, op, kind, elems, n, 0, 0, dst);
                break;
            default:
                if (nleaf_out != n) {
                    rc = xfail(x, op, DI_EVERIFY, "result has %u elements for %u inputs", nleaf_out,
                               n);
                    break;
                }
                for (uint32_t k = 0; k < n && rc == 0; k++)
                    rc = collective(x, op, kind, elems, n, k, 0, &dst[k]);
                break;
            }
            di_free((void *)elems);
        }
    }
    if (rc != 0) {
        slot_free(&s);
        return rc;
    }
    return store_result(x, op, 0, &s, ln);
}

/* dist.tuple and dist.tuple_get. */
static int
run_tuple(exec *x, ir_id op, const lanes *ln)
{
    const ir_module *m = x->m;
    const ir_op *o = &m->ops[op];
    ir_id res = ir_op_output(m, op, 0);
    uint32_t nleaf = type_leaves(m, m->values[res].type, 0), first = 0;
    int rc;
    slot s;
    if (o->kind == IR_OP_TUPLEGET) {
        ir_id in = ir_op_input(m, op, 0), ty = m->values[in].type;
        int64_t index = ir_op_int(m, op, "index", -1);
        if (ty == 0 || ty >= m->ntype || m->types[ty].kind != IR_TYPE_TUPLE || index < 0 ||
            index >= (int64_t)m->types[ty].nelem)
            return xfail(x, op, DI_EVERIFY, "index %lld does not select a tuple element",
                         (long long)index);
        for (int64_t e = 0; e < index; e++)
            first += type_leaves(m, m->refs[m->types[ty].elems + e], 0);
    }
    if ((rc = slot_alloc(x, &s, ln->n, nleaf)) != 0)
        return rc;
    for (uint32_t l = 0; l < ln->n; l++) {
        uint32_t f = 0;
        if (o->kind == IR_OP_TUPLEGET) {
            for (f = 0; f < nleaf; f++) {
                ex_tensor *src = val_at(x, ir_op_input(m, op, 0), l, first + f);
                if (src == NULL || ex_tensor_copy(&s.t[(size_t)l * nleaf + f], src) != 0) {
                    slot_free(&s);
                    return xfail(x, op, DI_EINTERNAL, "cannot take the tuple element");
                }
            }
            continue;
        }
        for (uint32_t i = 0; i < o->ninput; i++) {
            ir_id in = ir_op_input(m, op, i);
            for (uint32_t k = 0; k < x->vals[in].nleaf; k++, f++) {
                ex_tensor *src = val_at(x, in, l, k);
                if (f >= nleaf || src == NULL ||
                    ex_tensor_copy(&s.t[(size_t)l * nleaf + f], src) != 0) {
                    slot_free(&s);
                    return xfail(x, op, DI_EINTERNAL, "cannot build the tuple");
                }
            }
        }
    }
    return store_result(x, op, 0, &s, ln);
}

/* ---- compute ops ---- */

static int
run_compute(exec *x, ir_id op, const lanes *ln)
{
    const ir_module *m = x->m;
    const ir_op *o = &m->ops[op];
    uint32_t nin = o->ninput, nout = o->noutput;
    const ex_tensor **in = di_calloc(nin ? nin : 1, sizeof *in);
    ex_tensor *out = di_calloc(nout ? nout : 1, sizeof *out);
    slot *res = di_calloc(nout ? nout : 1, sizeof *res);
    ex_shard shard = {0, 1};
    int rc = 0;
    if (in == NULL || out == NULL || res == NULL) {
        rc = xfail(x, op, DI_ENOMEM, "out of memory");
        goto done;
    }
    for (uint32_t i = 0; i < nout && rc == 0; i++)
        rc = slot_alloc(x, &res[i], ln->n, 1);
    for (uint32_t l = 0; l < ln->n && rc == 0; l++) {
        for (uint32_t i = 0; i < nin; i++) {
            ir_id v = ir_op_input(m, op, i);
            in[i] = val_at(x, v, l, 0);
            if (in[i] == NULL || x->vals[v].nleaf != 1) {
                rc = xfail(x, op, DI_EVERIFY, "input %u is %s", i,
                           in[i] == NULL ? "not computed" : "a tuple, expected a tensor");
                break;
            }
        }
        if (rc != 0)
            break;
        if (ir_op_attr(m, op, "mesh") != NULL) {
            uint32_t *members, root;
            if (ln->dev == NULL) {
                rc = xfail(x, op, DI_EVERIFY, "an op on a mesh group runs only inside a dist.pmap");
                break;
            }
            members = di_xcalloc(ln->n + 1, sizeof *members);
            rc = mesh_group(x, op, ln, l, members, &shard.n, &shard.pos, &root);
            di_free(members);
            if (rc != 0)
                break;
        }
        if ((rc = ex_kernel_run(m, op, in, nin, out, nout, shard, x->err)) != 0)
            break;
        for (uint32_t i = 0; i < nout; i++)
            res[i].t[l] = out[i];
    }
    for (uint32_t i = 0; i < nout; i++) {
        if (rc == 0)
            rc = store_result(x, op, i, &res[i], ln);
        else
            slot_free(&res[i]);
    }
done:
    di_free(in);
    di_free(out);
    di_free(res);
    return rc;
}

/* ---- pmap ---- */

static int run_region(exec *x, ir_id r, const lanes *ln, int top);

/* Mesh coordinates of row-major index k. */
static void
mesh_coord(const ir_module *m, ir_id mesh, int64_t k, int64_t *c)
{
    uint32_t r = m->meshes[mesh].rank;
    const int64_t *shape = ir_mesh_shape(m, mesh);
    for (uint32_t a = r; a > 0; a--) {
        c[a - 1] = k % shape[a - 1];
        k /= shape[a - 1];
    }
}

/*
 * The block offsets of the shard at mesh coordinate c of a distributed
 * tensor type ty whose local dims are ldims.
 */
static void
shard_offsets(const ir_module *m, ir_id ty, const int64_t *c, const int64_t *ldims, int64_t *off)
{
    const ir_type *t = &m->types[ty];
    const int64_t *shape = ir_mesh_shape(m, t->mesh);
    const int64_t *place = m->ints + t->placements;
    uint32_t mr = m->meshes[t->mesh].rank;
    for (uint32_t d = 0; d < t->rank; d++) {
        int64_t block = 0;
        for (uint32_t a = 0; a < mr; a++)
            if (place[a] == (int64_t)d)
                block = block * shape[a] + c[a];
        off[d] = block * ldims[d];
    }
}

/* The shard of global tensor g (type ty) for coordinate c into out. */
static int
make_shard(exec *x, ir_id op, const ex_tensor *g, ir_id ty, const int64_t *c, ex_tensor *out)
{
    const ir_module *m = x->m;
    const ir_type *t = &m->types[ty];
    const int64_t *place = m->ints + t->placements;
    int64_t ldims[IR_MAX_RANK], off[IR_MAX_RANK];
    int zero = 0, rc;
    if (ir_type_shard_dims(m, ty, ldims) != 0)
        return xfail(x, op, DI_EVERIFY, "an input's split does not divide its shape");
    for (uint32_t a = 0; a < m->meshes[t->mesh].rank; a++)
        if (place[a] == IR_PLACE_PSUM && c[a] != 0)
            zero = 1;
    if ((rc = ex_tensor_init(out, g->dtype, g->rank, ldims)) != 0)
        return xfail(x, op, rc, "cannot allocate a shard");
    if (!zero) {
        shard_offsets(m, ty, c, ldims, off);
        ex_copy_block(g, off, out);
    }
    return 0;
}

/* Assembles the global value of result type ty from per-lane locals. */
static int
assemble(exec *x, ir_id op, ir_id ty, ir_id mesh, const ex_tensor *const *locals, uint32_t n,
         ex_tensor *out)
{
    const ir_module *m = x->m;
    const ir_type *t = &m->types[ty];
    const int64_t *place = m->ints + t->placements;
    uint32_t mr = m->meshes[mesh].rank;
    int64_t off[IR_MAX_RANK], c[IR_MAX_RANK];
    int mode = 0, rc;
    for (uint32_t a = 0; a < mr; a++) {
        if (place[a] == IR_PLACE_PSUM)
            mode = mode == 2 ? -1 : 1;
        else if (place[a] == IR_PLACE_PMAX)
            mode = mode == 1 ? -1 : 2;
    }
    if (mode < 0)
        return xfail(x, op, DI_EUNSUPPORTED,
                     "a result is partial-sum on one axis and "
                     "partial-max on another");
    if ((rc = ex_tensor_init(out, (ir_dtype)t->dtype, t->rank, m->ints + t->dims)) != 0)
        return xfail(x, op, rc, "cannot allocate a result");
    if (mode == 2)
        for (size_t i = 0; i < out->numel; i++)
            ex_set(out, i, -INFINITY);
    for (uint32_t k = 0; k < n; k++) {
        int skip = 0;
        mesh_coord(m, mesh, k, c);
        for (uint32_t a = 0; a < mr; a++)
            if (place[a] == IR_PLACE_R && c[a] != 0)
                skip = 1;
        if (skip)
            continue;
        shard_offsets(m, ty, c, locals[k]->dims, off);
        for (uint32_t d = 0; d < t->rank; d++)
            if (off[d] + locals[k]->dims[d] > out->dims[d]) {
                ex_tensor_fini(out);
                return xfail(x, op, DI_EVERIFY,
                             "a body result does not fit its declared "
                             "distributed type");
            }
        ex_put_block(out, off, locals[k], mode);
    }
    return 0;
}

/* Values defined in region r (arguments and op results, nested bodies included). */
static void
free_region_values(exec *x, ir_id r, int depth)
{
    const ir_module *m = x->m;
    const ir_region *reg = &m->regions[r];
    if (depth > 64)
        return;
    for (uint32_t i = 0; i < reg->narg; i++)
        slot_free(&x->vals[reg->args[i]]);
    for (uint32_t i = 0; i < reg->nop; i++) {
        const ir_op *o = &m->ops[reg->ops[i]];
        for (uint32_t j = 0; j < o->noutput; j++)
            slot_free(&x->vals[o->outputs + j]);
        if (o->body && !(o->flags & IR_OPFLAG_CALLEE))
            free_region_values(x, o->body, depth + 1); /* a callee frees its own */
    }
}

/* Runs a pmap for outer lane `ol` of the enclosing region; results go to lane ol of res[i]. */
static int
run_pmap_lane(exec *x, ir_id op, uint32_t ol, slot *res)
{
    const ir_module *m = x->m;
    const ir_op *o = &m->ops[op];
    ir_id body = o->body;
    const ir_region *reg;
    const ir_attr *ma = ir_op_attr(m, op, "mesh");
    uint32_t nd = 0;
    const int64_t *dl = ir_op_ints(m, op, "devices", &nd);
    ir_id mesh = 0;
    int32_t *devs = NULL;
    lanes inner;
    int rc = 0;
    if (body == 0 || body >= m->nregion)
        return xfail(x, op, DI_EVERIFY, "has no body");
    reg = &m->regions[body];
    if (reg->narg != o->ninput || reg->nresult != o->noutput)
        return xfail(x, op, DI_EVERIFY, "body arguments or results do not match the op");
    if (ma != NULL) {
        if (ma->kind != IR_ATTR_MESH || ma->s == 0 || ma->s >= m->nmesh)
            return xfail(x, op, DI_EVERIFY, "mesh does not name a mesh of the module");
        mesh = ma->s;
        nd = m->meshes[mesh].ndevice;
        dl = ir_mesh_devices(m, mesh);
    }
    if (nd == 0 || dl == NULL)
        return xfail(x, op, DI_EVERIFY, "needs devices or a mesh");
    devs = di_calloc(nd, sizeof *devs);
    if (devs == NULL)
        return xfail(x, op, DI_ENOMEM, "out of memory");
    for (uint32_t k = 0; k < nd; k++)
        devs[k] = (int32_t)dl[k];
    inner.n = nd;
    inner.dev = devs;
    /* Bind the body's arguments. */
    for (uint32_t i = 0; i < o->ninput && rc == 0; i++) {
        ir_id in = ir_op_input(m, op, i), arg = reg->args[i];
        slot *s = &x->vals[arg];
        slot_free(s);
        if ((rc = slot_alloc(x, s, nd, 1)) != 0)
            break;
        for (uint32_t k = 0; k < nd && rc == 0; k++) {
            ex_tensor *src;
            if (mesh) {
                int64_t c[IR_MAX_RANK];
                src = val_at(x, in, ol, 0);
                if (src == NULL || !is_dtensor(m, in)) {
                    rc = xfail(x, op, DI_EVERIFY, "input %u is not a distributed tensor", i);
                    break;
                }
                mesh_coord(m, mesh, k, c);
                rc = make_shard(x, op, src, m->values[in].type, c, &s->t[k]);
            } else {
                src = val_at(x, in, ol, k);
                if (src == NULL || x->vals[in].nleaf != nd) {
                    rc = xfail(x, op, DI_EVERIFY, "input %u is not a tuple of %u tensors", i, nd);
                    break;
                }
                if ((rc = ex_tensor_copy(&s->t[k], src)) != 0)
                    rc = xfail(x, op, rc, "cannot copy input %u", i);
            }
            if (rc == 0)
                rc = check_type(x, op, i, &s->t[k], m->values[arg].type, devs[k]);
        }
    }
    if (rc == 0)
        rc = run_region(x, body, &inner, 0);
    /* Collect the results. */
    for (uint32_t i = 0; i < o->noutput && rc == 0; i++) {
        ir_id bv = reg->results[i];
        slot *s = &x->vals[bv];
        ex_tensor *dst = &res[i].t[(size_t)ol * res[i].nleaf];
        if (s->nlane == 0 || s->nleaf != 1) {
            rc = xfail(x, op, DI_EVERIFY, "body result %u is not a computed tensor", i);
            break;
        }
        if (mesh) {
            const ex_tensor **locals = di_calloc(nd, sizeof *locals);
            if (locals == NULL) {
                rc = xfail(x, op, DI_ENOMEM, "out of memory");
                break;
            }
            for (uint32_t k = 0; k < nd; k++)
                locals[k] = val_at(x, bv, k, 0);
            rc = assemble(x, op, m->values[ir_op_output(m, op, i)].type, mesh, locals, nd, dst);
            di_free(locals);
        } else {
            for (uint32_t k = 0; k < nd && rc == 0; k++) {
                if ((rc = ex_tensor_copy(&dst[k], val_at(x, bv, k, 0))) != 0)
                    rc = xfail(x, op, rc, "cannot copy result %u", i);
                else
                    dst[k].device = devs[k];
            }
        }
    }
    free_region_values(x, body, 0);
    di_free(devs);
    return rc;
}

static int
run_pmap(exec *x, ir_id op, const lanes *ln)
{
    const ir_module *m = x->m;
    const ir_op *o = &m->ops[op];
    slot *res = di_calloc(o->noutput ? o->noutput : 1, sizeof *res);
    int rc = 0;
    if (res == NULL)
        return xfail(x, op, DI_ENOMEM, "out of memory");
    /* A body (or called function) may hold pmaps; calls that never end stop here. */
    if (x->depth >= 64) {
        di_free(res);
        return xfail(x, op, DI_EVERIFY, "pmaps nested more than 64 deep (a cycle of calls?)");
    }
    x->depth++;
    for (uint32_t i = 0; i < o->noutput && rc == 0; i++)
        rc = slot_alloc(x, &res[i], ln->n, type_leaves(m, m->values[o->outputs + i].type, 0));
    /* Nested pmaps run once per instance of the enclosing body. */
    for (uint32_t l = 0; l < ln->n && rc == 0; l++)
        rc = run_pmap_lane(x, op, l, res);
    x->depth--;
    for (uint32_t i = 0; i < o->noutput; i++) {
        if (rc == 0)
            rc = store_result(x, op, i, &res[i], ln);
        else
            slot_free(&res[i]);
    }
    di_free(res);
    return rc;
}

/* ---- regions ---- */

static int run_region(exec *x, ir_id r, const lanes *ln, int top);

/*
 * Ops that do not change a global (logical) value: annotate_sharding and
 * redistribute, and so the executor of the global view copies it.
 */
static int
run_identity(exec *x, ir_id op, const lanes *ln)
{
    ir_id in = ir_op_input(x->m, op, 0);
    slot s, *si = &x->vals[in];
    int rc = slot_alloc(x, &s, si->nlane, si->nleaf);
    for (size_t k = 0; rc == 0 && k < (size_t)si->nlane * si->nleaf; k++)
        if ((rc = ex_tensor_copy(&s.t[k], &si->t[k])) != 0)
            rc = xfail(x, op, rc, "cannot allocate the result");
    if (rc != 0) {
        slot_free(&s);
        return rc;
    }
    return store_result(x, op, 0, &s, ln);
}

/* func.call: the callee's body on the caller's lanes. */
static int
run_call(exec *x, ir_id op, const lanes *ln)
{
    const ir_module *m = x->m;
    const ir_op *o = &m->ops[op];
    const ir_region *reg;
    int rc = 0;
    if (!(o->flags & IR_OPFLAG_CALLEE) || o->body == 0 || o->body >= m->nregion)
        return xfail(x, op, DI_EVERIFY, "names no function");
    reg = &m->regions[o->body];
    if (reg->narg != o->ninput || reg->nresult != o->noutput)
        return xfail(x, op, DI_EVERIFY, "the callee's arguments or results do not match the call");
    if (x->depth >= 64)
        return xfail(x, op, DI_EVERIFY, "calls nest more than 64 deep");
    for (uint32_t i = 0; i < o->ninput && rc == 0; i++) {
        slot *si = &x->vals[ir_op_input(m, op, i)], *sa = &x->vals[reg->args[i]];
        slot_free(sa);
        if ((rc = slot_alloc(x, sa, si->nlane, si->nleaf)) != 0)
            break;
        for (size_t k = 0; rc == 0 && k < (size_t)si->nlane * si->nleaf; k++)
            if ((rc = ex_tensor_copy(&sa->t[k], &si->t[k])) != 0)
                rc = xfail(x, op, rc, "cannot copy input %u", i);
    }
    x->depth++;
    if (rc == 0)
        rc = run_region(x, o->body, ln, 0);
    x->depth--;
    for (uint32_t i = 0; i < o->noutput && rc == 0; i++) {
        slot *sr = &x->vals[reg->results[i]], s;
        if (sr->nlane == 0)
            return xfail(x, op, DI_EVERIFY, "the callee's result %u is not computed", i);
        if ((rc = slot_alloc(x, &s, sr->nlane, sr->nleaf)) != 0)
            break;
        for (size_t k = 0; rc == 0 && k < (size_t)sr->nlane * sr->nleaf; k++)
            if ((rc = ex_tensor_copy(&s.t[k], &sr->t[k])) != 0)
                rc = xfail(x, op, rc, "cannot copy result %u", i);
        if (rc != 0) {
            slot_free(&s);
            break;
        }
        rc = store_result(x, op, i, &s, ln);
    }
    free_region_values(x, o->body, 0); /* the function's values, until its next call */
    return rc;
}

static int
run_op(exec *x, ir_id op, const lanes *ln)
{
    int kind = x->m->ops[op].kind;
    if (kind <= IR_OP_NONE || kind >= IR_NOPKIND)
        return xfail(x, op, DI_EVERIFY, "invalid op kind %d", kind);
    switch (kind) {
    case IR_OP_RETURN:
        return 0;
    case IR_OP_PMAP:
        return run_pmap(x, op, ln);
    case IR_OP_CALL:
        return run_call(x, op, ln);
    case IR_OP_ANNOTATE:
    case IR_OP_REDISTRIBUTE:
        return run_identity(x, op, ln);
    case IR_OP_ALLSLICE:
        return run_comm(x, op, ln);
    case IR_OP_TUPLE:
    case IR_OP_TUPLEGET:
        return run_tuple(x, op, ln);
    default:
        if (ir_opkind_info(kind)->flags & IR_OPF_COMM)
            return run_comm(x, op, ln);
        return run_compute(x, op, ln);
    }
}

static int
run_region(exec *x, ir_id r, const lanes *ln, int top)
{
    const ir_module *m = x->m;
    const ir_region *reg = &m->regions[r];
    for (uint32_t i = 0; i < reg->nop; i++) {
        ir_id op = reg->ops[i];
        const ir_op *o = &m->ops[op];
        int rc;
        for (uint32_t j = 0; j < o->ninput; j++) {
            ir_id v = ir_op_input(m, op, j);
            if (v == 0 || v >= m->nvalue)
                return xfail(x, op, DI_EVERIFY, "input %u is not a value", j);
            if (x->vals[v].nlane == 0)
                return xfail(x, op, DI_EVERIFY, "input %u (%s) is used before it is computed", j,
                             m->values[v].name ? ir_str_get(m, m->values[v].name) : "unnamed");
        }
        if ((rc = run_op(x, op, ln)) != 0)
            return rc;
        if (top)
            for (uint32_t j = 0; j < o->ninput; j++) {
                ir_id v = ir_op_input(m, op, j);
                if (x->uses[v] > 0 && --x->uses[v] == 0)
                    slot_free(&x->vals[v]);
            }
    }
    return 0;
}

/* ---- the public entry points ---- */

uint32_t
ex_num_args(const ir_module *m)
{
    ir_id f = ir_module_entry(m);
    uint32_t n = 0;
    if (f == 0)
        return 0;
    for (uint32_t i = 0; i < m->regions[f].narg; i++)
        n += type_leaves(m, m->values[m->regions[f].args[i]].type, 0);
    return n;
}

/* Fills t from the initializer of value v with leaf type ty. */
static int
init_from_value(const ir_module *m, ir_id v, ir_id ty, ex_tensor *t, di_error *err)
{
    size_t len;
    const uint8_t *data = ir_value_init(m, v, &len);
    const ir_type *tp = &m->types[ty];
    int rc;
    if (data == NULL)
        return di_error_set(err, DI_ENOTFOUND, "argument '%s' has no value and no initializer",
                            ir_str_get(m, m->values[v].name));
    rc = ex_tensor_from_bytes(t, (ir_dtype)tp->dtype, tp->rank, m->ints + tp->dims, data, len, err);
    if (rc != 0)
        di_error_prefix(err, "initializer of '%s'", ir_str_get(m, m->values[v].name));
    t->device = tp->device;
    return rc;
}

int
ex_random_args(const ir_module *m, uint64_t seed, int64_t bound, ex_tensor **args, uint32_t *nargs,
               di_error *err)
{
    ir_id f = ir_module_entry(m);
    uint32_t n = ex_num_args(m), loc = 0;
    ex_tensor *a;
    *args = NULL;
    *nargs = 0;
    if (f == 0)
        return di_error_set(err, DI_EINVAL, "the module has no function");
    a = di_calloc(n ? n : 1, sizeof *a);
    if (a == NULL)
        return di_error_set(err, DI_ENOMEM, "out of memory");
    if (bound < 1)
        bound = 1;
    for (uint32_t i = 0; i < m->regions[f].narg; i++) {
        ir_id v = m->regions[f].args[i], ty = m->values[v].type;
        uint32_t nl = type_leaves(m, ty, 0);
        for (uint32_t j = 0; j < nl; j++, loc++) {
            ir_id lt = leaf_type(m, ty, j, 0);
            const ir_type *tp = &m->types[lt];
            size_t len;
            int rc;
            if (nl == 1 && ir_value_init(m, v, &len) != NULL) {
                rc = init_from_value(m, v, lt, &a[loc], err);
            } else {
                rc = ex_tensor_init(&a[loc], (ir_dtype)tp->dtype, tp->rank, m->ints + tp->dims);
                if (rc != 0)
                    di_error_set(err, rc, "cannot allocate argument '%s'",
                                 ir_str_get(m, m->values[v].name));
                for (size_t e = 0; rc == 0 && e < a[loc].numel; e++) {
                    uint64_t h = di_splitmix64(di_splitmix64(di_splitmix64(seed) ^ loc) ^ e);
                    double u = (double)(h >> 11) * (1.0 / 9007199254740992.0);
                    if (ir_dtype_is_float((ir_dtype)tp->dtype))
                        ex_set(&a[loc], e, 2.0 * u - 1.0);
                    else if (tp->dtype == IR_BOOL)
                        ex_set(&a[loc], e, (double)(h >> 63));
                    else
                        ex_set(&a[loc], e, (double)(h % (uint64_t)bound));
                }
                a[loc].device = tp->device;
            }
            if (rc != 0) {
                for (uint32_t k = 0; k < loc; k++)
                    ex_tensor_fini(&a[k]);
                di_free(a);
                return rc;
            }
        }
    }
    *args = a;
    *nargs = n;
    return 0;
}

/*
 * Counts uses of every value by the ops of region r and of the bodies
 * nested in it. Only the entry function frees values early (when their
 * count drops to 0 after a top-level op), so a value a body reads from an
 * enclosing region keeps a count that never reaches 0 and lives to the end.
 */
static void
count_uses(const ir_module *m, ir_id r, uint32_t *uses, int depth)
{
    const ir_region *reg = &m->regions[r];
    if (depth > 64)
        return;
    for (uint32_t i = 0; i < reg->nop; i++) {
        const ir_op *o = &m->ops[reg->ops[i]];
        for (uint32_t j = 0; j < o->ninput; j++) {
            ir_id v = m->refs[o->inputs + j];
            if (v < m->nvalue)
                uses[v]++;
        }
        if (o->body && o->body < m->nregion) {
            const ir_region *b = &m->regions[o->body];
            /* A called function's values are its own: count them once, not per call. */
            if (!(o->flags & IR_OPFLAG_CALLEE))
                count_uses(m, o->body, uses, depth + 1);
            for (uint32_t k = 0; k < b->nresult; k++)
                if (b->results[k] < m->nvalue)
                    uses[b->results[k]]++;
        }
    }
}

/* Results are never freed early: they are copied out at the end. */
static void
keep_results(const ir_module *m, ir_id f, uint32_t *uses)
{
    for (uint32_t i = 0; i < m->regions[f].nresult; i++)
        if (m->regions[f].results[i] < m->nvalue)
            uses[m->regions[f].results[i]] = 0;
}

int
ex_run(const ir_module *m, const ex_tensor *args, uint32_t nargs, ex_tensor **results,
       uint32_t *nresults, di_error *err)
{
    ir_id f = ir_module_entry(m);
    exec x;
    lanes top = {1, NULL};
    uint32_t loc = 0, nres = 0;
    ex_tensor *res = NULL;
    int rc = 0;
    char a[IR_MAX_RANK * 22 + 4], b[IR_MAX_RANK * 22 + 4];
    *results = NULL;
    *nresults = 0;
    if (f == 0)
        return di_error_set(err, DI_EINVAL, "the module has no function to run");
    if (nargs != ex_num_args(m))
        return di_error_set(err, DI_EINVAL, "%u argument tensors given, the function takes %u",
                            nargs, ex_num_args(m));
    memset(&x, 0, sizeof x);
    x.m = m;
    x.err = err;
    x.vals = di_calloc(m->nvalue ? m->nvalue : 1, sizeof *x.vals);
    x.uses = di_calloc(m->nvalue ? m->nvalue : 1, sizeof *x.uses);
    if (x.vals == NULL || x.uses == NULL) {
        di_free(x.vals);
        di_free(x.uses);
        return di_error_set(err, DI_ENOMEM, "out of memory");
    }
    count_uses(m, f, x.uses, 0);
    keep_results(m, f, x.uses);
    /* Bind the arguments. */
    for (uint32_t i = 0; i < m->regions[f].narg && rc == 0; i++) {
        ir_id v = m->regions[f].args[i], ty = m->values[v].type;
        uint32_t nl = type_leaves(m, ty, 0);
        const char *name = ir_str_get(m, m->values[v].name);
        if (nl == 0) {
            rc = di_error_set(err, DI_EVERIFY, "argument %u ('%s') has no tensor type", i, name);
            break;
        }
        if ((rc = slot_alloc(&x, &x.vals[v], 1, nl)) != 0)
            break;
        for (uint32_t j = 0; j < nl && rc == 0; j++, loc++) {
            ir_id lt = leaf_type(m, ty, j, 0);
            const ir_type *tp = &m->types[lt];
            ex_tensor *t = &x.vals[v].t[j];
            if (args[loc].data == NULL) {
                if (nl != 1) {
                    rc = di_error_set(err, DI_EINVAL, "argument '%s' element %u has no value", name,
                                      j);
                    break;
                }
                rc = init_from_value(m, v, lt, t, err);
                continue;
            }
            if (args[loc].dtype != tp->dtype || args[loc].rank != tp->rank ||
                (tp->rank && memcmp(args[loc].dims, m->ints + tp->dims,
                                    tp->rank * sizeof args[loc].dims[0]) != 0)) {
                rc =
                    di_error_set(err, DI_EINVAL, "argument '%s'%s is %s%s, expected %s%s", name,
                                 nl > 1 ? " (a tuple element)" : "", ir_dtype_name(args[loc].dtype),
                                 ex_shape_str(a, sizeof a, args[loc].rank, args[loc].dims),
                                 ir_dtype_name((ir_dtype)tp->dtype),
                                 ex_shape_str(b, sizeof b, tp->rank, m->ints + tp->dims));
                break;
            }
            if ((rc = ex_tensor_copy(t, &args[loc])) != 0) {
                rc = di_error_set(err, rc, "cannot copy argument '%s'", name);
                break;
            }
            ex_fixup(t);
            t->device = tp->device;
        }
    }
    if (rc == 0)
        rc = run_region(&x, f, &top, 1);
    /* Collect the results. */
    for (uint32_t i = 0; rc == 0 && i < m->regions[f].nresult; i++)
        nres += x.vals[m->regions[f].results[i]].nleaf;
    if (rc == 0) {
        res = di_calloc(nres ? nres : 1, sizeof *res);
        if (res == NULL)
            rc = di_error_set(err, DI_ENOMEM, "out of memory");
    }
    for (uint32_t i = 0, k = 0; rc == 0 && i < m->regions[f].nresult; i++) {
        ir_id v = m->regions[f].results[i];
        for (uint32_t j = 0; j < x.vals[v].nleaf && rc == 0; j++, k++)
            if ((rc = ex_tensor_copy(&res[k], &x.vals[v].t[j])) != 0) {
                rc = di_error_set(err, rc, "cannot copy result %u", i);
                for (uint32_t q = 0; q < k; q++)
                    ex_tensor_fini(&res[q]);
                di_free(res);
                res = NULL;
            }
    }
    for (uint32_t v = 0; v < m->nvalue; v++)
        slot_free(&x.vals[v]);
    di_free(x.vals);
    di_free(x.uses);
    if (rc != 0)
        return rc;
    *results = res;
    *nresults = nres;
    return 0;
}
