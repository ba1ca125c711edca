/*
 * ir/pb.c: a module to and from its protobuf form, distir.v1.Module.
 *
 * The message mirrors the module's tables: Module.types[i], values[i] and
 * meshes[i] are the module's types[i], values[i] and meshes[i] (entry 0 of
 * each is the reserved "none" and is written as an empty message). The
 * regions are written as a tree: each top-level function is a Function whose
 * body Region holds its ops, and a pmap's body is a Region inside its Op.
 * Op.id and Region.id carry the op's and region's index in the module's
 * tables, so that decoding rebuilds every table with the same indexes and
 * decode(encode(m)) == m; without ids (a hand-written message) ops and
 * regions are numbered in order of appearance.
 *
 * Encoding builds the message tree in one arena that ir_proto_free releases
 * at once. Decoding trusts nothing: after the size limit, the depth
 * pre-check and pb_validate (UTF-8, enums), ir_from_proto walks the region
 * tree once to number ops and regions (bounding their count and nesting),
 * then rebuilds the module, checking every index before it is used. Types,
 * strings, meshes and regions go through the module.c API, so interning stays
 * consistent: types are interned in table order, which reproduces the
 * encoder's ids (duplicates in a hostile message simply map to the same id).
 * Values and ops are written at the indexes the message gives them rather
 * than with ir_op_add, which numbers values in the order of its calls (the
 * parser, for one, adds a pmap after the ops of its body); each op's
 * attributes are sorted once and appended, giving the table ir_op_put_attr
 * would give without its linear cost per insert. Errors name the place:
 * "functions[0].body.ops[3].inputs[1]: value index 99 out of range (module
 * has 12 values)".
 *
 * A pmap that calls a function (IR_OPFLAG_CALLEE) writes the function's
 * name in Op.callee instead of a body; the decoder resolves names after every
 * function exists (a callee may come later in Module.functions).
 *
 * A module round-trips when everything in its tables is reachable from a
 * function: an op left out of every region, or a body no op owns, is not
 * written, and the values it defines then fail to decode.
 */
#include "ir/pb.h"

#include <stdalign.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/pb.h"

/* Pools (ints, refs, floats, data, chars, attrs) stay below this many entries. */
#define POOL_MAX 0x7fffffffu
/* pmap bodies nest at most this deep whatever the limits say. */
#define NEST_HARD_MAX 1000u

static const Distir__V1__DType dtype_to_pb[IR_NDTYPE] = {
    [IR_DTYPE_NONE] = DISTIR__V1__DTYPE__DTYPE_NONE,
#define DTYPE_ROW_(e, name, size, onnx) [IR_##e] = DISTIR__V1__DTYPE__DTYPE_##e,
    IR_DTYPE_LIST(DTYPE_ROW_)
#undef DTYPE_ROW_
};

/* ---- encoding ---- */

/* The arena of one message tree: a list of blocks. */
typedef struct tree_block {
    struct tree_block *next;
    size_t used, cap;
} tree_block;

#define TREE_BLOCK_HEAD                                                                            \
    ((sizeof(tree_block) + alignof(max_align_t) - 1) / alignof(max_align_t) * alignof(max_align_t))
#define TREE_BLOCK_SIZE ((size_t)64 << 10)

/* The module message comes first, so that ir_proto_free finds the tree from it. */
typedef struct tree {
    Distir__V1__Module module;
    tree_block *blocks;
    const ir_module *m;
} tree;

/* Zeroed, aligned memory that lives as long as the tree. */
static void *
tree_alloc(tree *t, size_t size)
{
    tree_block *b = t->blocks;
    void *p;
    size = (size + alignof(max_align_t) - 1) / alignof(max_align_t) * alignof(max_align_t);
    if (size == 0)
        size = alignof(max_align_t);
    if (b == NULL || b->cap - b->used < size) {
        size_t cap = size > TREE_BLOCK_SIZE / 4 ? size : TREE_BLOCK_SIZE;
        b = di_xmalloc(TREE_BLOCK_HEAD + cap);
        b->used = 0;
        b->cap = cap;
        if (size > TREE_BLOCK_SIZE / 4 && t->blocks != NULL) {
            /* A big block goes behind the current one, which keeps its room. */
            b->next = t->blocks->next;
            t->blocks->next = b;
        } else {
            b->next = t->blocks;
            t->blocks = b;
        }
    }
    p = (char *)b + TREE_BLOCK_HEAD + b->used;
    b->used += size;
    memset(p, 0, size);
    return p;
}

/* A copy of s in the tree (a fresh pointer even for "", which a oneof needs to be written). */
static char *
tree_str(tree *t, const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = tree_alloc(t, n);
    memcpy(p, s, n);
    return p;
}

static void *
tree_copy(tree *t, const void *src, size_t size)
{
    void *p;
    if (size == 0)
        return NULL;
    p = tree_alloc(t, size);
    memcpy(p, src, size);
    return p;
}

static Distir__V1__Region *encode_region(tree *t, ir_id r);

static Distir__V1__Attr *
encode_attr(tree *t, const ir_attr *a)
{
    const ir_module *m = t->m;
    Distir__V1__Attr *pa = tree_alloc(t, sizeof *pa);
    distir__v1__attr__init(pa);
    pa->key = tree_str(t, ir_str_get(m, a->key));
    switch (a->kind) {
    case IR_ATTR_INT:
        pa->value_case = DISTIR__V1__ATTR__VALUE_I;
        pa->i = a->i;
        break;
    case IR_ATTR_FLOAT:
        pa->value_case = DISTIR__V1__ATTR__VALUE_F;
        pa->f = a->f;
        break;
    case IR_ATTR_STRING:
        pa->value_case = DISTIR__V1__ATTR__VALUE_S;
        pa->s = tree_str(t, ir_str_get(m, a->s));
        break;
    case IR_ATTR_INTS:
        pa->value_case = DISTIR__V1__ATTR__VALUE_INTS;
        pa->ints = tree_alloc(t, sizeof *pa->ints);
        distir__v1__ints__init(pa->ints);
        pa->ints->n_v = a->n;
        pa->ints->v = tree_copy(t, m->ints + a->off, a->n * sizeof(int64_t));
        break;
    case IR_ATTR_FLOATS:
        pa->value_case = DISTIR__V1__ATTR__VALUE_FLOATS;
        pa->floats = tree_alloc(t, sizeof *pa->floats);
        distir__v1__floats__init(pa->floats);
        pa->floats->n_v = a->n;
        pa->floats->v = tree_copy(t, m->floats + a->off, a->n * sizeof(double));
        break;
    case IR_ATTR_MESH:
        pa->value_case = DISTIR__V1__ATTR__VALUE_MESH;
        pa->mesh = a->s;
        break;
    case IR_ATTR_TENSOR:
        pa->value_case = DISTIR__V1__ATTR__VALUE_TENSOR;
        pa->tensor = tree_alloc(t, sizeof *pa->tensor);
        distir__v1__tensor_data__init(pa->tensor);
        pa->tensor->type = (uint32_t)a->i;
        pa->tensor->data.len = a->n;
        if (a->n)
            pa->tensor->data.data = tree_copy(t, m->data + a->off, a->n);
        break;
    default:
        /* Not representable; the decoder rejects an attribute without a value. */
        break;
    }
    return pa;
}

static Distir__V1__Op *
encode_op(tree *t, ir_id o)
{
    const ir_module *m = t->m;
    const ir_op *op = &m->ops[o];
    Distir__V1__Op *po = tree_alloc(t, sizeof *po);
    distir__v1__op__init(po);
    po->kind = tree_str(t, ir_opkind_name(op->kind));
    po->n_inputs = op->ninput;
    po->inputs = tree_copy(t, m->refs + op->inputs, op->ninput * sizeof(uint32_t));
    po->n_outputs = op->noutput;
    if (op->noutput) {
        po->outputs = tree_alloc(t, op->noutput * sizeof *po->outputs);
        for (uint32_t i = 0; i < op->noutput; i++)
            po->outputs[i] = op->outputs + i;
    }
    po->n_attrs = op->nattr;
    if (op->nattr) {
        po->attrs = tree_alloc(t, op->nattr * sizeof *po->attrs);
        for (uint32_t i = 0; i < op->nattr; i++)
            po->attrs[i] = encode_attr(t, &m->attrs[op->attrs + i]);
    }
    if (op->body && op->body < m->nregion) {
        const ir_region *b = &m->regions[op->body];
        if ((op->flags & IR_OPFLAG_CALLEE) && b->parent == 0)
            po->callee = tree_str(t, ir_str_get(m, b->name));
        else if (b->parent == o)
            po->body = encode_region(t, op->body);
    }
    po->name = tree_str(t, ir_str_get(m, op->name));
    po->id = o;
    po->flags = op->flags;
    return po;
}

static Distir__V1__Region *
encode_region(tree *t, ir_id r)
{
    const ir_region *reg = &t->m->regions[r];
    Distir__V1__Region *pr = tree_alloc(t, sizeof *pr);
    distir__v1__region__init(pr);
    pr->n_args = reg->narg;
    pr->args = tree_copy(t, reg->args, reg->narg * sizeof(uint32_t));
    pr->n_ops = reg->nop;
    if (reg->nop) {
        pr->ops = tree_alloc(t, reg->nop * sizeof *pr->ops);
        for (uint32_t i = 0; i < reg->nop; i++)
            pr->ops[i] = encode_op(t, reg->ops[i]);
    }
    pr->n_results = reg->nresult;
    pr->results = tree_copy(t, reg->results, reg->nresult * sizeof(uint32_t));
    pr->id = r;
    return pr;
}

static Distir__V1__Type *
encode_type(tree *t, ir_id i)
{
    const ir_module *m = t->m;
    const ir_type *ty = &m->types[i];
    Distir__V1__Type *pt = tree_alloc(t, sizeof *pt);
    distir__v1__type__init(pt);
    if (i == 0)
        return pt;
    pt->device = ty->device;
    if (ty->kind == IR_TYPE_TENSOR) {
        uint32_t np = ty->mesh ? m->meshes[ty->mesh].rank : 0;
        pt->kind = DISTIR__V1__TYPE__KIND__KIND_TENSOR;
        pt->dtype = ty->dtype < IR_NDTYPE ? dtype_to_pb[ty->dtype] : DISTIR__V1__DTYPE__DTYPE_NONE;
        pt->n_dims = ty->rank;
        pt->dims = tree_copy(t, m->ints + ty->dims, ty->rank * sizeof(int64_t));
        pt->devvar = tree_str(t, ir_str_get(m, ty->devvar));
        pt->mesh = ty->mesh;
        pt->n_placements = np;
        pt->placements = tree_copy(t, m->ints + ty->placements, np * sizeof(int64_t));
    } else if (ty->kind == IR_TYPE_TUPLE) {
        pt->kind = DISTIR__V1__TYPE__KIND__KIND_TUPLE;
        pt->n_elems = ty->nelem;
        pt->elems = tree_copy(t, m->refs + ty->elems, ty->nelem * sizeof(uint32_t));
    }
    return pt;
}

Distir__V1__Module *
ir_to_proto(const ir_module *m)
{
    tree *t = di_xcalloc(1, sizeof *t);
    Distir__V1__Module *pm = &t->module;
    size_t nfunc = 0;

    distir__v1__module__init(pm);
    t->m = m;

    pm->n_types = m->ntype;
    pm->types = tree_alloc(t, m->ntype * sizeof *pm->types);
    for (ir_id i = 0; i < m->ntype; i++)
        pm->types[i] = encode_type(t, i);

    pm->n_values = m->nvalue;
    pm->values = tree_alloc(t, m->nvalue * sizeof *pm->values);
    for (ir_id i = 0; i < m->nvalue; i++) {
        Distir__V1__Value *pv = tree_alloc(t, sizeof *pv);
        distir__v1__value__init(pv);
        if (i > 0) {
            const uint8_t *init;
            size_t ilen;
            pv->name = tree_str(t, ir_str_get(m, m->values[i].name));
            pv->type = m->values[i].type;
            if ((init = ir_value_init(m, i, &ilen)) != NULL) {
                pv->has_init = 1;
                pv->init.len = ilen;
                pv->init.data = ilen ? tree_copy(t, init, ilen) : NULL;
            }
        }
        pm->values[i] = pv;
    }

    pm->n_meshes = m->nmesh;
    pm->meshes = tree_alloc(t, m->nmesh * sizeof *pm->meshes);
    for (ir_id i = 0; i < m->nmesh; i++) {
        const ir_mesh *mesh = &m->meshes[i];
        Distir__V1__Mesh *pmesh = tree_alloc(t, sizeof *pmesh);
        distir__v1__mesh__init(pmesh);
        if (i > 0) {
            pmesh->name = tree_str(t, ir_str_get(m, mesh->name));
            pmesh->n_shape = mesh->rank;
            pmesh->shape = tree_copy(t, m->ints + mesh->shape, mesh->rank * sizeof(int64_t));
            pmesh->n_devices = mesh->ndevice;
            pmesh->devices = tree_copy(t, m->ints + mesh->devices, mesh->ndevice * sizeof(int64_t));
        }
        pm->meshes[i] = pmesh;
    }

    for (ir_id r = 1; r < m->nregion; r++)
        if (m->regions[r].parent == 0 && m->regions[r].name)
            nfunc++;
    pm->n_functions = nfunc;
    pm->functions = tree_alloc(t, nfunc * sizeof *pm->functions);
    nfunc = 0;
    for (ir_id r = 1; r < m->nregion; r++) {
        Distir__V1__Function *pf;
        if (m->regions[r].parent != 0 || m->regions[r].name == 0)
            continue;
        pf = tree_alloc(t, sizeof *pf);
        distir__v1__function__init(pf);
        pf->name = tree_str(t, ir_str_get(m, m->regions[r].name));
        pf->body = encode_region(t, r);
        pm->functions[nfunc++] = pf;
    }
    return pm;
}

/* Frees a tree made by ir_to_proto (and only such a tree: its arena sits behind the module). */
void
ir_proto_free(Distir__V1__Module *pm)
{
    tree *t = (tree *)pm;
    tree_block *b, *next;
    if (pm == NULL)
        return;
    for (b = t->blocks; b; b = next) {
        next = b->next;
        di_free(b);
    }
    di_free(t);
}

int
ir_encode(const ir_module *m, uint8_t **data, size_t *len)
{
    Distir__V1__Module *pm = ir_to_proto(m);
    size_t n = protobuf_c_message_get_packed_size(&pm->base);
    uint8_t *buf = di_malloc(n);
    *data = NULL;
    *len = 0;
    if (buf == NULL) {
        ir_proto_free(pm);
        return DI_ENOMEM;
    }
    *len = protobuf_c_message_pack(&pm->base, buf);
    *data = buf;
    ir_proto_free(pm);
    return 0;
}

/* ---- decoding ---- */

/* A place in the message, for error messages. */
typedef struct where {
    char buf[600];
    size_t len;
} where;

static void where_printf(where *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void
where_printf(where *w, const char *fmt, ...)
{
    va_list ap;
    size_t room = sizeof w->buf - w->len;
    int n;
    if (room <= 1)
        return;
    va_start(ap, fmt);
    n = vsnprintf(w->buf + w->len, room, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    w->len = (size_t)n < room ? w->len + (size_t)n : sizeof w->buf - 1;
}

/*
 * The decoder's state. Ops and regions are first numbered in order of
 * appearance (a, r: depth first, a region before its ops, an op before its
 * body); op_id[a] and reg_id[r] are their indexes in the module.
 */
typedef struct dec {
    const Distir__V1__Module *pm;
    ir_limits lim;
    uint32_t max_nest;
    ir_module *m;
    di_error *err;

    uint32_t ntype, nvalue, nmesh; /* table sizes, counting the reserved entry 0 */
    ir_id *tmap;                   /* message type index -> interned type id */
    uint8_t *defined;              /* per value: defined yet */

    /* ops by order of appearance, 1..nop */
    uint32_t nop, cop;
    const Distir__V1__Op **op_msg;
    uint32_t *op_reg;  /* containing region (appearance) */
    uint32_t *op_pos;  /* position in that region */
    uint32_t *op_body; /* body region (appearance), or 0 */
    ir_id *op_id;
    uint32_t nop_with_id;

    /* regions by order of appearance, 1..nreg */
    uint32_t nreg, creg;
    const Distir__V1__Region **reg_msg;
    uint32_t *reg_parent; /* owning op (appearance), 0 for a function body */
    uint32_t *reg_func;   /* function index of a function body */
    uint32_t *reg_first;  /* offset into flat[] of the region's ops (appearance) */
    ir_id *reg_id;
    uint32_t nreg_with_id;

    uint32_t *flat;
    size_t nflat, cflat;

    /* function names sorted, for Op.callee (built on first use) */
    struct fname *fnames;
    uint32_t nfname;
    int fnames_built;
} dec;

/* A function's name and its region id in the module. */
struct fname {
    const char *name;
    ir_id region;
};

static void dec_region_where(const dec *d, uint32_t r, where *w);

static void
dec_op_where(const dec *d, uint32_t a, where *w)
{
    dec_region_where(d, d->op_reg[a], w);
    where_printf(w, ".ops[%u]", d->op_pos[a]);
}

static void
dec_region_where(const dec *d, uint32_t r, where *w)
{
    if (d->reg_parent[r]) {
        dec_op_where(d, d->reg_parent[r], w);
        where_printf(w, ".body");
    } else {
        where_printf(w, "functions[%u].body", d->reg_func[r]);
    }
}

static const char *
op_where(const dec *d, uint32_t a, where *w)
{
    w->len = 0;
    w->buf[0] = '\0';
    dec_op_where(d, a, w);
    return w->buf;
}

static const char *
region_where(const dec *d, uint32_t r, where *w)
{
    w->len = 0;
    w->buf[0] = '\0';
    dec_region_where(d, r, w);
    return w->buf;
}

/* Checks that a pool holding have entries can take add more. */
static int
pool_room(dec *d, uint64_t have, uint64_t add, const char *what)
{
    if (have + add > POOL_MAX)
        return di_error_set(d->err, DI_ETOOBIG, "module holds more than %u %s", POOL_MAX, what);
    return 0;
}

/* Interns s, or 0 for an empty string; fails only when the string pool is full. */
static int
dec_str(dec *d, const char *s, ir_id *out)
{
    size_t n = s ? strlen(s) : 0;
    int rc;
    *out = 0;
    if (n == 0)
        return 0;
    if ((rc = pool_room(d, d->m->nchar, (uint64_t)n + 1, "bytes of strings")) != 0)
        return rc;
    *out = ir_strn(d->m, s, n);
    return 0;
}

/* ---- pass 1: number ops and regions ---- */

static int
walk_region(dec *d, const Distir__V1__Region *pr, uint32_t parent, uint32_t func, uint32_t nest)
{
    uint32_t r, first;
    where w;

    if (nest > d->max_nest)
        return di_error_set(d->err, DI_ETOODEEP, "%s.body: pmap bodies nested deeper than %u",
                            op_where(d, parent, &w), d->max_nest);
    if (d->nreg + 1 >= POOL_MAX)
        return di_error_set(d->err, DI_ETOOBIG, "module has more than %u regions", POOL_MAX);
    r = ++d->nreg;
    if (r + 1 > d->creg) {
        /* Grow the parallel arrays together. */
        DI_GROW(&d->reg_msg, &d->creg, r + 1);
        d->reg_parent = di_xrealloc(d->reg_parent, d->creg * sizeof *d->reg_parent);
        d->reg_func = di_xrealloc(d->reg_func, d->creg * sizeof *d->reg_func);
        d->reg_first = di_xrealloc(d->reg_first, d->creg * sizeof *d->reg_first);
    }
    d->reg_msg[r] = pr;
    d->reg_parent[r] = parent;
    d->reg_func[r] = func;
    if (pr->id)
        d->nreg_with_id++;
    if (pr->n_ops > d->lim.max_ops)
        return di_error_set(d->err, DI_ETOOBIG, "%s: %zu ops exceed the limit of %u",
                            region_where(d, r, &w), pr->n_ops, d->lim.max_ops);
    first = (uint32_t)d->nflat;
    d->reg_first[r] = first;
    DI_GROW(&d->flat, &d->cflat, d->nflat + pr->n_ops);
    d->nflat += pr->n_ops;

    for (size_t k = 0; k < pr->n_ops; k++) {
        const Distir__V1__Op *po = pr->ops[k];
        uint32_t a;
        int rc;
        if (d->nop >= d->lim.max_ops)
            return di_error_set(d->err, DI_ETOOBIG, "module has more than %u ops (the limit)",
                                d->lim.max_ops);
        a = ++d->nop;
        if (a + 1 > d->cop) {
            DI_GROW(&d->op_msg, &d->cop, a + 1);
            d->op_reg = di_xrealloc(d->op_reg, d->cop * sizeof *d->op_reg);
            d->op_pos = di_xrealloc(d->op_pos, d->cop * sizeof *d->op_pos);
            d->op_body = di_xrealloc(d->op_body, d->cop * sizeof *d->op_body);
        }
        d->op_msg[a] = po;
        d->op_reg[a] = r;
        d->op_pos[a] = (uint32_t)k;
        d->op_body[a] = 0;
        d->flat[first + k] = a;
        if (po == NULL)
            return di_error_set(d->err, DI_EINVAL, "%s: missing op", op_where(d, a, &w));
        if (po->id)
            d->nop_with_id++;
        if (po->body) {
            d->op_body[a] = d->nreg + 1;
            if ((rc = walk_region(d, po->body, a, func, nest + 1)) != 0)
                return rc;
        }
    }
    return 0;
}

/*
 * Gives every op and region its index in the module: the ids in the message
 * when all of them have one (then they must be 1..n, each once), else the
 * order of appearance.
 */
static int
assign_ids(dec *d)
{
    where w;
    uint8_t *seen;

    d->op_id = di_xcalloc(d->nop + 1, sizeof *d->op_id);
    d->reg_id = di_xcalloc(d->nreg + 1, sizeof *d->reg_id);
    if (d->nop_with_id != 0 && d->nop_with_id != d->nop)
        return di_error_set(d->err, DI_EDECODE,
                            "%u of %u ops have an id: either every op has one or none does",
                            d->nop_with_id, d->nop);
    if (d->nreg_with_id != 0 && d->nreg_with_id != d->nreg)
        return di_error_set(d->err, DI_EDECODE,
                            "%u of %u regions have an id: either every region has one or none "
                            "does",
                            d->nreg_with_id, d->nreg);

    seen = di_xcalloc(d->nop + 1, 1);
    for (uint32_t a = 1; a <= d->nop; a++) {
        uint32_t id = d->nop_with_id ? d->op_msg[a]->id : a;
        if (id == 0 || id > d->nop) {
            di_free(seen);
            return di_error_set(d->err, DI_EDECODE,
                                "%s.id: op id %u out of range (module has %u ops)",
                                op_where(d, a, &w), id, d->nop);
        }
        if (seen[id]) {
            di_free(seen);
            return di_error_set(d->err, DI_EDECODE, "%s.id: op id %u is used twice",
                                op_where(d, a, &w), id);
        }
        seen[id] = 1;
        d->op_id[a] = id;
    }
    di_free(seen);

    seen = di_xcalloc(d->nreg + 1, 1);
    for (uint32_t r = 1; r <= d->nreg; r++) {
        uint32_t id = d->nreg_with_id ? d->reg_msg[r]->id : r;
        if (id == 0 || id > d->nreg) {
            di_free(seen);
            return di_error_set(d->err, DI_EDECODE,
                                "%s.id: region id %u out of range (module has %u regions)",
                                region_where(d, r, &w), id, d->nreg);
        }
        if (seen[id]) {
            di_free(seen);
            return di_error_set(d->err, DI_EDECODE, "%s.id: region id %u is used twice",
                                region_where(d, r, &w), id);
        }
        seen[id] = 1;
        d->reg_id[r] = id;
    }
    di_free(seen);
    return 0;
}

/* ---- pass 2: tables ---- */

static int
decode_meshes(dec *d)
{
    const Distir__V1__Module *pm = d->pm;
    ir_module *m = d->m;
    uint32_t maxrank = d->lim.max_rank < IR_MAX_RANK ? d->lim.max_rank : IR_MAX_RANK;
    for (uint32_t i = 1; i < d->nmesh; i++) {
        const Distir__V1__Mesh *pmesh = pm->meshes[i];
        uint64_t n = 1;
        ir_id id;
        int rc;
        if (pmesh == NULL)
            return di_error_set(d->err, DI_EINVAL, "meshes[%u]: missing", i);
        if (pmesh->n_shape > maxrank)
            return di_error_set(d->err, DI_EDECODE, "meshes[%u]: rank %zu exceeds the limit of %u",
                                i, pmesh->n_shape, maxrank);
        for (size_t k = 0; k < pmesh->n_shape; k++) {
            if (pmesh->shape[k] < 1)
                return di_error_set(d->err, DI_EDECODE,
                                    "meshes[%u].shape[%zu]: axis size %lld is not positive", i, k,
                                    (long long)pmesh->shape[k]);
            if ((uint64_t)pmesh->shape[k] > pmesh->n_devices ||
                n * (uint64_t)pmesh->shape[k] > pmesh->n_devices)
                return di_error_set(d->err, DI_EDECODE,
                                    "meshes[%u]: the shape holds more devices than the %zu listed",
                                    i, pmesh->n_devices);
            n *= (uint64_t)pmesh->shape[k];
        }
        if (n != pmesh->n_devices)
            return di_error_set(d->err, DI_EDECODE,
                                "meshes[%u]: the shape holds %llu devices but %zu are listed", i,
                                (unsigned long long)n, pmesh->n_devices);
        for (size_t k = 0; k < pmesh->n_devices; k++)
            if (pmesh->devices[k] < 0 || pmesh->devices[k] > INT32_MAX)
                return di_error_set(d->err, DI_EDECODE,
                                    "meshes[%u].devices[%zu]: device id %lld out of range", i, k,
                                    (long long)pmesh->devices[k]);
        if ((rc = pool_room(d, m->nint, pmesh->n_shape + n, "ints")) != 0 ||
            (rc = pool_room(d, m->nchar, strlen(pmesh->name) + 1, "bytes of strings")) != 0)
            return rc;
        id = ir_mesh_add(m, pmesh->name, (uint32_t)pmesh->n_shape, pmesh->shape, pmesh->devices);
        if (id != i)
            return di_error_set(d->err, DI_EINTERNAL, "meshes[%u]: added as mesh %u", i, id);
    }
    return 0;
}

static int
dtype_from_pb(int v, ir_dtype *out)
{
    for (int t = 0; t < IR_NDTYPE; t++)
        if ((int)dtype_to_pb[t] == v) {
            *out = (ir_dtype)t;
            return 0;
        }
    return -1;
}

static int
decode_tensor_type(dec *d, uint32_t i, const Distir__V1__Type *pt)
{
    ir_module *m = d->m;
    uint32_t maxrank = d->lim.max_rank < IR_MAX_RANK ? d->lim.max_rank : IR_MAX_RANK;
    ir_dtype dt;
    ir_id devvar = 0;
    int places = 0, rc;

    if (dtype_from_pb(pt->dtype, &dt) != 0)
        return di_error_set(d->err, DI_EDECODE, "types[%u].dtype: unknown dtype %d", i,
                            (int)pt->dtype);
    if (pt->n_dims > maxrank)
        return di_error_set(d->err, DI_EDECODE, "types[%u]: rank %zu exceeds the limit of %u", i,
                            pt->n_dims, maxrank);
    for (size_t k = 0; k < pt->n_dims; k++)
        if (pt->dims[k] < 0)
            return di_error_set(d->err, DI_EDECODE, "types[%u].dims[%zu]: negative size %lld", i, k,
                                (long long)pt->dims[k]);
    if (pt->device < IR_DEVICE_NONE)
        return di_error_set(d->err, DI_EDECODE,
                            "types[%u].device: %d is neither a device id nor -1 (none)", i,
                            (int)pt->device);
    if (pt->mesh >= d->nmesh)
        return di_error_set(d->err, DI_EDECODE,
                            "types[%u].mesh: mesh index %u out of range (module has %u meshes)", i,
                            pt->mesh, d->nmesh);
    if (pt->n_elems)
        return di_error_set(d->err, DI_EDECODE, "types[%u]: a tensor type has no elems", i);
    places = (pt->device >= 0) + (pt->devvar && pt->devvar[0]) + (pt->mesh != 0);
    if (places > 1)
        return di_error_set(d->err, DI_EDECODE,
                            "types[%u]: a tensor lives on at most one of a device, a device "
                            "variable and a mesh",
                            i);
    if (pt->mesh) {
        uint32_t mrank = m->meshes[pt->mesh].rank;
        if (pt->n_placements != mrank)
            return di_error_set(d->err, DI_EDECODE,
                                "types[%u]: %zu placements for a mesh of rank %u", i,
                                pt->n_placements, mrank);
        for (size_t k = 0; k < pt->n_placements; k++) {
            int64_t p = pt->placements[k];
            if (p != IR_PLACE_R && p != IR_PLACE_PSUM && p != IR_PLACE_PMAX &&
                !(p >= 0 && (uint64_t)p < pt->n_dims))
                return di_error_set(d->err, DI_EDECODE,
                                    "types[%u].placements[%zu]: %lld is not a placement for a "
                                    "tensor of rank %zu",
                                    i, k, (long long)p, pt->n_dims);
        }
    } else if (pt->n_placements) {
        return di_error_set(d->err, DI_EDECODE, "types[%u]: placements without a mesh", i);
    }
    if ((rc = pool_room(d, m->nint, pt->n_dims + pt->n_placements, "ints")) != 0 ||
        (rc = dec_str(d, pt->devvar, &devvar)) != 0)
        return rc;
    if (pt->mesh)
        d->tmap[i] =
            ir_type_dtensor(m, dt, (uint32_t)pt->n_dims, pt->dims, pt->mesh, pt->placements);
    else if (devvar)
        d->tmap[i] = ir_type_tensor_var(m, dt, (uint32_t)pt->n_dims, pt->dims, devvar);
    else
        d->tmap[i] = ir_type_tensor(m, dt, (uint32_t)pt->n_dims, pt->dims, pt->device);
    return 0;
}

static int
decode_types(dec *d)
{
    const Distir__V1__Module *pm = d->pm;
    d->tmap = di_xcalloc(d->ntype, sizeof *d->tmap);
    for (uint32_t i = 1; i < d->ntype; i++) {
        const Distir__V1__Type *pt = pm->types[i];
        ir_id *elems;
        int rc;
        if (pt == NULL)
            return di_error_set(d->err, DI_EINVAL, "types[%u]: missing", i);
        switch (pt->kind) {
        case DISTIR__V1__TYPE__KIND__KIND_TENSOR:
            if ((rc = decode_tensor_type(d, i, pt)) != 0)
                return rc;
            break;
        case DISTIR__V1__TYPE__KIND__KIND_TUPLE:
            if (pt->dtype != DISTIR__V1__DTYPE__DTYPE_NONE || pt->n_dims || pt->mesh ||
                pt->n_placements || (pt->devvar && pt->devvar[0]) ||
                (pt->device != 0 && pt->device != IR_DEVICE_NONE))
                return di_error_set(d->err, DI_EDECODE,
                                    "types[%u]: a tuple type has only elems (no dtype, dims or "
                                    "placement)",
                                    i);
            for (size_t k = 0; k < pt->n_elems; k++)
                if (pt->elems[k] == 0 || pt->elems[k] >= i)
                    return di_error_set(d->err, DI_EDECODE,
                                        "types[%u].elems[%zu]: type index %u must refer to an "
                                        "earlier type (1..%u)",
                                        i, k, pt->elems[k], i - 1);
            if ((rc = pool_room(d, d->m->nref, pt->n_elems, "refs")) != 0)
                return rc;
            elems = di_xmalloc(pt->n_elems * sizeof *elems);
            for (size_t k = 0; k < pt->n_elems; k++)
                elems[k] = d->tmap[pt->elems[k]];
            d->tmap[i] = ir_type_tuple(d->m, (uint32_t)pt->n_elems, elems);
            di_free(elems);
            break;
        default:
            return di_error_set(d->err, DI_EDECODE, "types[%u].kind: %d is not a type kind", i,
                                (int)pt->kind);
        }
    }
    return 0;
}

static int
decode_values(dec *d)
{
    ir_module *m = d->m;
    DI_GROW(&m->values, &m->cvalue, d->nvalue);
    memset(m->values, 0, d->nvalue * sizeof *m->values);
    m->nvalue = d->nvalue;
    d->defined = di_xcalloc(d->nvalue, 1);
    for (uint32_t i = 1; i < d->nvalue; i++) {
        const Distir__V1__Value *pv = d->pm->values[i];
        int rc;
        if (pv == NULL)
            return di_error_set(d->err, DI_EINVAL, "values[%u]: missing", i);
        if (pv->type >= d->ntype)
            return di_error_set(d->err, DI_EDECODE,
                                "values[%u].type: type index %u out of range (module has %u "
                                "types)",
                                i, pv->type, d->ntype);
        m->values[i].type = d->tmap[pv->type];
        if ((rc = dec_str(d, pv->name, &m->values[i].name)) != 0)
            return rc;
        if (pv->has_init) {
            const ir_type *ty = &m->types[m->values[i].type];
            uint64_t want = ir_type_bytes(m, m->values[i].type);
            if (ty->kind != IR_TYPE_TENSOR || pv->init.len != want)
                return di_error_set(d->err, DI_EDECODE,
                                    "values[%u].init: %zu bytes of data for a value of %llu bytes",
                                    i, pv->init.len, (unsigned long long)want);
            ir_value_set_init(m, i, pv->init.data, pv->init.len);
        } else if (pv->init.len) {
            return di_error_set(d->err, DI_EDECODE, "values[%u].init: data without has_init", i);
        }
    }
    return 0;
}

/* Checks a value index in a use (0, "none", is allowed). */
static int
check_use(dec *d, uint32_t v, const char *place, const char *field, size_t k)
{
    if (v >= d->nvalue)
        return di_error_set(d->err, DI_EDECODE,
                            "%s.%s[%zu]: value index %u out of range (module has %u values)", place,
                            field, k, v, d->nvalue);
    return 0;
}

/* Marks value v as defined by op def (0: an argument) of region r, at position index. */
static int
define_value(dec *d, uint32_t v, ir_id def, uint32_t index, ir_id region, const char *place,
             const char *field, size_t k)
{
    ir_value *val;
    if (v == 0 || v >= d->nvalue)
        return di_error_set(d->err, DI_EDECODE,
                            "%s.%s[%zu]: value index %u out of range (module has values 1..%u)",
                            place, field, k, v, d->nvalue - 1);
    if (d->defined[v])
        return di_error_set(d->err, DI_EDECODE, "%s.%s[%zu]: value %u is defined more than once",
                            place, field, k, v);
    d->defined[v] = 1;
    val = &d->m->values[v];
    val->def = def;
    val->index = index;
    val->region = region;
    return 0;
}

/* Appends n entries to a pool of the module (the caller has checked the room). */
static uint32_t
push_ints(ir_module *m, size_t n, const int64_t *v)
{
    uint32_t off = m->nint;
    DI_GROW(&m->ints, &m->cint, m->nint + n);
    if (n)
        memcpy(m->ints + off, v, n * sizeof *v);
    m->nint += (uint32_t)n;
    return off;
}

static uint32_t
push_floats(ir_module *m, size_t n, const double *v)
{
    uint32_t off = m->nfloat;
    DI_GROW(&m->floats, &m->cfloat, m->nfloat + n);
    if (n)
        memcpy(m->floats + off, v, n * sizeof *v);
    m->nfloat += (uint32_t)n;
    return off;
}

static uint32_t
push_data(ir_module *m, size_t n, const uint8_t *v)
{
    uint32_t off = (uint32_t)m->ndata;
    DI_GROW(&m->data, &m->cdata, m->ndata + n);
    if (n)
        memcpy(m->data + off, v, n);
    m->ndata += n;
    return off;
}

/* Converts one attribute, pushing its lists to the pools; the key is interned by the caller. */
static int
decode_attr(dec *d, const Distir__V1__Attr *pa, const char *place, size_t k, ir_attr *a)
{
    ir_module *m = d->m;
    int rc;
    switch (pa->value_case) {
    case DISTIR__V1__ATTR__VALUE_I:
        a->kind = IR_ATTR_INT;
        a->i = pa->i;
        return 0;
    case DISTIR__V1__ATTR__VALUE_F:
        a->kind = IR_ATTR_FLOAT;
        a->f = pa->f;
        return 0;
    case DISTIR__V1__ATTR__VALUE_S:
        if (pa->s == NULL)
            break;
        a->kind = IR_ATTR_STRING;
        if ((rc = pool_room(d, m->nchar, strlen(pa->s) + 1, "bytes of strings")) != 0)
            return rc;
        a->s = ir_str(m, pa->s);
        return 0;
    case DISTIR__V1__ATTR__VALUE_INTS:
        if (pa->ints == NULL)
            break;
        if ((rc = pool_room(d, m->nint, pa->ints->n_v, "ints")) != 0)
            return rc;
        a->kind = IR_ATTR_INTS;
        a->n = (uint32_t)pa->ints->n_v;
        a->off = push_ints(m, pa->ints->n_v, pa->ints->v);
        return 0;
    case DISTIR__V1__ATTR__VALUE_FLOATS:
        if (pa->floats == NULL)
            break;
        if ((rc = pool_room(d, m->nfloat, pa->floats->n_v, "floats")) != 0)
            return rc;
        a->kind = IR_ATTR_FLOATS;
        a->n = (uint32_t)pa->floats->n_v;
        a->off = push_floats(m, pa->floats->n_v, pa->floats->v);
        return 0;
    case DISTIR__V1__ATTR__VALUE_MESH:
        if (pa->mesh >= d->nmesh)
            return di_error_set(d->err, DI_EDECODE,
                                "%s.attrs[%zu].mesh: mesh index %u out of range (module has %u "
                                "meshes)",
                                place, k, pa->mesh, d->nmesh);
        a->kind = IR_ATTR_MESH;
        a->s = pa->mesh;
        return 0;
    case DISTIR__V1__ATTR__VALUE_TENSOR: {
        const Distir__V1__TensorData *pt = pa->tensor;
        ir_id t;
        uint64_t bytes;
        if (pt == NULL)
            break;
        if (pt->type == 0 || pt->type >= d->ntype)
            return di_error_set(d->err, DI_EDECODE,
                                "%s.attrs[%zu].tensor.type: type index %u out of range (module "
                                "has types 1..%u)",
                                place, k, pt->type, d->ntype - 1);
        t = d->tmap[pt->type];
        if (m->types[t].kind != IR_TYPE_TENSOR)
            return di_error_set(d->err, DI_EDECODE,
                                "%s.attrs[%zu].tensor.type: type %u is not a tensor type", place, k,
                                pt->type);
        bytes = ir_type_bytes(m, t);
        if (pt->data.len != 0 && pt->data.len != bytes)
            return di_error_set(d->err, DI_EDECODE,
                                "%s.attrs[%zu].tensor.data: %zu bytes for a tensor of %llu bytes",
                                place, k, pt->data.len, (unsigned long long)bytes);
        if ((rc = pool_room(d, m->ndata, pt->data.len, "bytes of tensor data")) != 0)
            return rc;
        a->kind = IR_ATTR_TENSOR;
        a->i = t;
        a->n = (uint32_t)pt->data.len;
        a->off = push_data(m, pt->data.len, pt->data.data);
        return 0;
    }
    default:
        break;
    }
    return di_error_set(d->err, DI_EDECODE, "%s.attrs[%zu]: attribute '%.64s' has no value", place,
                        k, pa->key);
}

/* An attribute's key and its index in the message, sorted by key as ir_op_put_attr keeps them. */
typedef struct attr_slot {
    const char *key;
    size_t k;
} attr_slot;

static int
attr_order(const void *x, const void *y)
{
    const attr_slot *a = x, *b = y;
    int c = strcmp(a->key, b->key);
    return c ? c : (a->k > b->k) - (a->k < b->k);
}

/*
 * Writes the attributes of op id, sorted by key, at the end of the attribute
 * table. Sorting first (instead of inserting one by one with ir_op_put_attr,
 * which is linear per insert) keeps a hostile op with very many attributes
 * from costing quadratic time; the resulting table is the same.
 */
static int
decode_attrs(dec *d, ir_id id, const Distir__V1__Op *po, const char *place)
{
    ir_module *m = d->m;
    size_t n = po->n_attrs;
    attr_slot *order;
    uint32_t start;
    int rc = 0;

    if (n == 0)
        return 0;
    if ((rc = pool_room(d, m->nattr, n, "attributes")) != 0)
        return rc;
    for (size_t k = 0; k < n; k++) {
        if (po->attrs[k] == NULL)
            return di_error_set(d->err, DI_EINVAL, "%s.attrs[%zu]: missing", place, k);
        if (po->attrs[k]->key == NULL || po->attrs[k]->key[0] == '\0')
            return di_error_set(d->err, DI_EDECODE, "%s.attrs[%zu]: empty key", place, k);
    }
    order = di_xmalloc(n * sizeof *order);
    for (size_t k = 0; k < n; k++) {
        order[k].key = po->attrs[k]->key;
        order[k].k = k;
    }
    qsort(order, n, sizeof *order, attr_order);
    for (size_t k = 1; k < n; k++)
        if (strcmp(order[k - 1].key, order[k].key) == 0) {
            rc = di_error_set(d->err, DI_EDECODE, "%s.attrs[%zu]: duplicate key '%.64s'", place,
                              order[k].k, order[k].key);
            goto out;
        }
    start = m->nattr;
    DI_GROW(&m->attrs, &m->cattr, m->nattr + n);
    for (size_t k = 0; k < n; k++) {
        const Distir__V1__Attr *pa = po->attrs[order[k].k];
        ir_attr a;
        memset(&a, 0, sizeof a);
        if ((rc = pool_room(d, m->nchar, strlen(pa->key) + 1, "bytes of strings")) != 0 ||
            (rc = decode_attr(d, pa, place, order[k].k, &a)) != 0)
            goto out;
        a.key = ir_str(m, pa->key);
        m->attrs[start + k] = a;
    }
    m->nattr = start + (uint32_t)n;
    m->ops[id].attrs = start;
    m->ops[id].nattr = (uint32_t)n;
out:
    di_free(order);
    return rc;
}

static int
cmp_fname(const void *a, const void *b)
{
    return strcmp(((const struct fname *)a)->name, ((const struct fname *)b)->name);
}

/*
 * The region of the function an Op.callee names: the functions' names are
 * sorted once, so a module of many pmaps resolves each in O(log n).
 */
static int
resolve_callee(dec *d, const char *name, const char *place, ir_id *out)
{
    struct fname key, *hit;
    uint32_t lo, hi;
    if (!d->fnames_built) {
        d->fnames_built = 1;
        d->fnames = di_xmalloc((d->nreg + 1) * sizeof *d->fnames);
        for (uint32_t r = 1; r <= d->nreg; r++) {
            const char *fn;
            if (d->reg_parent[r] != 0)
                continue;
            fn = d->pm->functions[d->reg_func[r]]->name;
            d->fnames[d->nfname].name = fn ? fn : "";
            d->fnames[d->nfname].region = d->reg_id[r];
            d->nfname++;
        }
        qsort(d->fnames, d->nfname, sizeof *d->fnames, cmp_fname);
    }
    key.name = name;
    key.region = 0;
    hit = d->nfname ? bsearch(&key, d->fnames, d->nfname, sizeof *d->fnames, cmp_fname) : NULL;
    if (hit == NULL)
        return di_error_set(d->err, DI_EDECODE, "%s.callee: no function named '@%.64s'", place,
                            name);
    lo = hi = (uint32_t)(hit - d->fnames);
    while (lo > 0 && strcmp(d->fnames[lo - 1].name, name) == 0)
        lo--;
    while (hi + 1 < d->nfname && strcmp(d->fnames[hi + 1].name, name) == 0)
        hi++;
    if (hi > lo)
        return di_error_set(d->err, DI_EDECODE, "%s.callee: %u functions are named '@%.64s'",
                            place, hi - lo + 1, name);
    *out = hit->region;
    return 0;
}

static int
decode_op(dec *d, uint32_t a)
{
    ir_module *m = d->m;
    const Distir__V1__Op *po = d->op_msg[a];
    ir_id id = d->op_id[a], rid = d->reg_id[d->op_reg[a]];
    ir_op *op;
    where w;
    const char *place = op_where(d, a, &w);
    int kind, rc;
    uint32_t inputs;
    ir_id callee = 0;

    kind = po->kind ? ir_opkind_from_name(po->kind, strlen(po->kind)) : IR_OP_NONE;
    if (kind == IR_OP_NONE)
        return di_error_set(d->err, DI_EDECODE, "%s.kind: unknown op kind '%.64s'", place,
                            po->kind ? po->kind : "");
    if (po->body && !(ir_opkind_info(kind)->flags & IR_OPF_REGION))
        return di_error_set(d->err, DI_EDECODE, "%s.body: a %s op has no body", place,
                            ir_opkind_name(kind));
    if (po->flags > UINT16_MAX)
        return di_error_set(d->err, DI_EDECODE, "%s.flags: %u does not fit in 16 bits", place,
                            po->flags);
    if (po->callee && po->callee[0]) {
        if (!(ir_opkind_info(kind)->flags & IR_OPF_REGION))
            return di_error_set(d->err, DI_EDECODE, "%s.callee: a %s op calls no function",
                                place, ir_opkind_name(kind));
        if (po->body)
            return di_error_set(d->err, DI_EDECODE,
                                "%s: a dist.pmap has a body and a callee; it either owns its "
                                "body or calls a function",
                                place);
        if ((rc = resolve_callee(d, po->callee, place, &callee)) != 0)
            return rc;
    }
    for (size_t k = 0; k < po->n_inputs; k++)
        if ((rc = check_use(d, po->inputs[k], place, "inputs", k)) != 0)
            return rc;
    for (size_t k = 0; k < po->n_outputs; k++) {
        if (po->outputs[k] != po->outputs[0] + k)
            return di_error_set(d->err, DI_EDECODE,
                                "%s.outputs[%zu]: value %u does not follow value %u (the "
                                "results of an op are consecutive values)",
                                place, k, po->outputs[k], po->outputs[k - 1]);
        if ((rc = define_value(d, po->outputs[k], id, (uint32_t)k, rid, place, "outputs", k)) != 0)
            return rc;
    }
    if ((rc = pool_room(d, m->nref, po->n_inputs, "refs")) != 0)
        return rc;
    inputs = m->nref;
    DI_GROW(&m->refs, &m->cref, m->nref + po->n_inputs);
    for (size_t k = 0; k < po->n_inputs; k++)
        m->refs[m->nref++] = po->inputs[k];

    op = &m->ops[id];
    op->kind = (uint16_t)kind;
    op->flags = (uint16_t)po->flags;
    op->ninput = (uint32_t)po->n_inputs;
    op->inputs = inputs;
    op->noutput = (uint32_t)po->n_outputs;
    op->outputs = po->n_outputs ? po->outputs[0] : 0;
    op->nattr = 0;
    op->attrs = m->nattr;
    op->body = d->op_body[a] ? d->reg_id[d->op_body[a]] : 0;
    if (callee) {
        op->body = callee;
        op->flags |= IR_OPFLAG_CALLEE;
    }
    op->region = rid;
    if ((rc = dec_str(d, po->name, &op->name)) != 0)
        return rc;

    if ((rc = decode_attrs(d, id, po, place)) != 0)
        return rc;
    if (kind == IR_OP_OPAQUE) {
        const ir_attr *at = ir_op_attr(m, id, "op_type");
        if (at != NULL && at->kind == IR_ATTR_STRING)
            m->ops[id].opaque = at->s;
    }
    return 0;
}

/* Creates the regions in id order, then fills arguments, ops and results. */
static int
decode_regions(dec *d)
{
    ir_module *m = d->m;
    uint32_t *by_id = di_xcalloc(d->nreg + 1, sizeof *by_id);
    where w;
    int rc = 0;

    for (uint32_t r = 1; r <= d->nreg; r++)
        by_id[d->reg_id[r]] = r;
    for (uint32_t id = 1; id <= d->nreg && rc == 0; id++) {
        uint32_t r = by_id[id];
        ir_id got;
        if (d->reg_parent[r] == 0) {
            const char *name = d->pm->functions[d->reg_func[r]]->name;
            if (name == NULL)
                name = "";
            if ((rc = pool_room(d, m->nchar, strlen(name) + 1, "bytes of strings")) != 0)
                break;
            got = ir_func_new(m, name);
        } else {
            got = ir_body_new(m);
            m->regions[got].parent = d->op_id[d->reg_parent[r]];
        }
        if (got != id)
            rc = di_error_set(d->err, DI_EINTERNAL, "region %u was created as %u", id, got);
    }
    di_free(by_id);
    if (rc != 0)
        return rc;

    for (uint32_t r = 1; r <= d->nreg; r++) {
        const Distir__V1__Region *pr = d->reg_msg[r];
        ir_id rid = d->reg_id[r];
        ir_region *reg = &m->regions[rid];
        const char *place = region_where(d, r, &w);
        for (size_t k = 0; k < pr->n_args; k++)
            if ((rc = define_value(d, pr->args[k], 0, (uint32_t)k, rid, place, "args", k)) != 0)
                return rc;
        for (size_t k = 0; k < pr->n_results; k++)
            if ((rc = check_use(d, pr->results[k], place, "results", k)) != 0)
                return rc;
        DI_GROW(&reg->args, &reg->carg, pr->n_args);
        reg->narg = (uint32_t)pr->n_args;
        if (pr->n_args)
            memcpy(reg->args, pr->args, pr->n_args * sizeof *reg->args);
        DI_GROW(&reg->results, &reg->cresult, pr->n_results);
        reg->nresult = (uint32_t)pr->n_results;
        if (pr->n_results)
            memcpy(reg->results, pr->results, pr->n_results * sizeof *reg->results);
        DI_GROW(&reg->ops, &reg->cop, pr->n_ops);
        reg->nop = (uint32_t)pr->n_ops;
        for (size_t k = 0; k < pr->n_ops; k++)
            reg->ops[k] = d->op_id[d->flat[d->reg_first[r] + k]];
    }
    return 0;
}

static void
dec_fini(dec *d)
{
    di_free(d->tmap);
    di_free(d->defined);
    di_free(d->op_msg);
    di_free(d->op_reg);
    di_free(d->op_pos);
    di_free(d->op_body);
    di_free(d->op_id);
    di_free(d->reg_msg);
    di_free(d->reg_parent);
    di_free(d->reg_func);
    di_free(d->reg_first);
    di_free(d->reg_id);
    di_free(d->flat);
    di_free(d->fnames);
}

/* Table sizes, counting the reserved entry 0 even when the message leaves it out. */
static int
table_size(dec *d, size_t n, const char *what, uint32_t *out)
{
    if (n > (uint64_t)d->lim.max_values + 1 || n >= POOL_MAX)
        return di_error_set(d->err, DI_ETOOBIG, "%s: %zu entries exceed the limit of %u", what, n,
                            d->lim.max_values);
    *out = n ? (uint32_t)n : 1;
    return 0;
}

static int
decode_module(dec *d)
{
    const Distir__V1__Module *pm = d->pm;
    ir_module *m = d->m;
    int rc;

    if ((rc = table_size(d, pm->n_types, "types", &d->ntype)) != 0 ||
        (rc = table_size(d, pm->n_values, "values", &d->nvalue)) != 0 ||
        (rc = table_size(d, pm->n_meshes, "meshes", &d->nmesh)) != 0)
        return rc;
    if (pm->n_functions > d->lim.max_ops)
        return di_error_set(d->err, DI_ETOOBIG, "functions: %zu exceed the limit of %u",
                            pm->n_functions, d->lim.max_ops);

    /* Pass 1: number ops and regions. */
    for (size_t f = 0; f < pm->n_functions; f++) {
        const Distir__V1__Function *pf = pm->functions[f];
        if (pf == NULL)
            return di_error_set(d->err, DI_EINVAL, "functions[%zu]: missing", f);
        if (pf->body == NULL)
            return di_error_set(d->err, DI_EDECODE, "functions[%zu]: no body", f);
        if ((rc = walk_region(d, pf->body, 0, (uint32_t)f, 1)) != 0)
            return rc;
    }
    if ((rc = assign_ids(d)) != 0)
        return rc;

    /* Pass 2: tables, then regions and ops at their indexes. */
    if ((rc = decode_meshes(d)) != 0 || (rc = decode_types(d)) != 0 || (rc = decode_values(d)) != 0)
        return rc;
    DI_GROW(&m->ops, &m->cop, d->nop + 1);
    memset(m->ops, 0, (d->nop + 1) * sizeof *m->ops);
    m->nop = d->nop + 1;
    if ((rc = decode_regions(d)) != 0)
        return rc;
    for (uint32_t a = 1; a <= d->nop; a++)
        if ((rc = decode_op(d, a)) != 0)
            return rc;
    for (uint32_t v = 1; v < d->nvalue; v++)
        if (!d->defined[v])
            return di_error_set(d->err, DI_EDECODE,
                                "values[%u]: not defined by any region argument or op output", v);
    return 0;
}

int
ir_from_proto(const Distir__V1__Module *pm, const ir_limits *lim, ir_module **out, di_error *err)
{
    dec d;
    int rc;

    memset(&d, 0, sizeof d);
    *out = NULL;
    d.pm = pm;
    if (lim)
        d.lim = *lim;
    else
        ir_limits_default(&d.lim);
    d.max_nest = d.lim.max_depth < 1 ? 1 : d.lim.max_depth;
    if (d.max_nest > NEST_HARD_MAX)
        d.max_nest = NEST_HARD_MAX;
    d.err = err;
    d.m = ir_module_new();
    rc = decode_module(&d);
    dec_fini(&d);
    if (rc != 0) {
        ir_module_free(d.m);
        return rc;
    }
    *out = d.m;
    return 0;
}

static int
decode_bytes(const uint8_t *data, size_t len, const ir_limits *lim, ir_module **out,
             di_error *err)
{
    ir_limits dflt;
    ProtobufCMessage *msg;
    int rc, depth;

    *out = NULL;
    if (lim == NULL) {
        ir_limits_default(&dflt);
        lim = &dflt;
    }
    if (len > lim->max_bytes)
        return di_error_set(err, DI_ETOOBIG, "message of %zu bytes exceeds the limit of %llu bytes",
                            len, (unsigned long long)lim->max_bytes);
    depth = lim->max_depth > 100000 ? 100000 : (int)lim->max_depth;
    rc = pb_unpack_checked(&distir__v1__module__descriptor, data, len, depth, &msg, err);
    if (rc != 0)
        return rc;
    rc = ir_from_proto((const Distir__V1__Module *)msg, lim, out, err);
    protobuf_c_message_free_unpacked(msg, &pb_allocator);
    return rc;
}

/* The arguments of ir_decode, for its allocation scope. */
struct decode_call {
    const uint8_t *data;
    size_t len;
    const ir_limits *lim;
    ir_module **out;
    di_error *err;
};

static int
decode_call_run(void *arg)
{
    struct decode_call *c = arg;
    return decode_bytes(c->data, c->len, c->lim, c->out, c->err);
}

/* The decoding runs in an allocation scope: out-of-memory anywhere in it is DI_ENOMEM. */
int
ir_decode(const uint8_t *data, size_t len, const ir_limits *lim, ir_module **out, di_error *err)
{
    struct decode_call c = {data, len, lim, out, err};
    int rc = di_scope_run(decode_call_run, &c, err);
    if (rc != 0)
        *out = NULL;
    return rc;
}
