/*
 * module.c: building and owning a module: interned strings and types,
 * values, ops with their attributes, regions and meshes, and deep copies.
 * Everything lives in the module's arrays (see ir.h); index 0 of each array is
 * a reserved "none" entry.
 */
#include "ir/ir.h"

#include <assert.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name;
    uint32_t size;
    int64_t onnx;
} dtypes[IR_NDTYPE] = {
    [IR_DTYPE_NONE] = {"none", 0, 0},
#define IR_DTYPE_ROW_(e, name, size, onnx) [IR_##e] = {name, size, onnx},
    IR_DTYPE_LIST(IR_DTYPE_ROW_)
#undef IR_DTYPE_ROW_
};

const char *
ir_dtype_name(ir_dtype t)
{
    return (unsigned)t < IR_NDTYPE ? dtypes[t].name : "none";
}

uint32_t
ir_dtype_size(ir_dtype t)
{
    return (unsigned)t < IR_NDTYPE ? dtypes[t].size : 0;
}

ir_dtype
ir_dtype_from_name(const char *s, size_t len)
{
    for (int t = 1; t < IR_NDTYPE; t++)
        if (strlen(dtypes[t].name) == len && memcmp(dtypes[t].name, s, len) == 0)
            return (ir_dtype)t;
    if (len == 4 && memcmp(s, "bool", 4) == 0)
        return IR_BOOL;
    return IR_DTYPE_NONE;
}

int64_t
ir_dtype_onnx(ir_dtype t)
{
    return (unsigned)t < IR_NDTYPE ? dtypes[t].onnx : 0;
}

ir_dtype
ir_dtype_from_onnx(int64_t code)
{
    for (int t = 1; t < IR_NDTYPE; t++)
        if (dtypes[t].onnx == code)
            return (ir_dtype)t;
    return IR_DTYPE_NONE;
}

int
ir_dtype_is_float(ir_dtype t)
{
    return t == IR_F32 || t == IR_F16 || t == IR_BF16 || t == IR_F64;
}

int
ir_dtype_is_half(ir_dtype t)
{
    return t == IR_F16 || t == IR_BF16;
}

void
ir_limits_default(ir_limits *l)
{
    l->max_bytes = 256u << 20;
    l->max_ops = 4u << 20;
    l->max_values = 8u << 20;
    l->max_depth = 64;
    l->max_rank = IR_MAX_RANK;
}

/*
 * The intern tables' hash: SipHash keyed per module (m->hashkey), chained
 * over pieces, so that a hostile module cannot make every name or type land
 * in one slot. Table layout never affects ids (they are assigned in
 * insertion order), so results stay deterministic.
 */
static uint32_t
keyed(const ir_module *m, const void *p, size_t n, uint32_t h)
{
    return (uint32_t)di_siphash(p, n, m->hashkey[0] ^ h, m->hashkey[1]);
}

ir_module *
ir_module_new(void)
{
    ir_module *m = di_xcalloc(1, sizeof *m);
    di_hash_key(m->hashkey);
    /* Reserve entry 0 everywhere; chars[0] is the empty string's terminator. */
    DI_GROW(&m->chars, &m->cchar, 1);
    m->chars[0] = '\0';
    m->nchar = 1;
    DI_GROW(&m->types, &m->ctype, 1);
    memset(&m->types[0], 0, sizeof m->types[0]);
    m->ntype = 1;
    DI_GROW(&m->values, &m->cvalue, 1);
    memset(&m->values[0], 0, sizeof m->values[0]);
    m->nvalue = 1;
    DI_GROW(&m->ops, &m->cop, 1);
    memset(&m->ops[0], 0, sizeof m->ops[0]);
    m->nop = 1;
    DI_GROW(&m->regions, &m->cregion, 1);
    memset(&m->regions[0], 0, sizeof m->regions[0]);
    m->nregion = 1;
    DI_GROW(&m->meshes, &m->cmesh, 1);
    memset(&m->meshes[0], 0, sizeof m->meshes[0]);
    m->nmesh = 1;
    DI_GROW(&m->attrs, &m->cattr, 1);
    memset(&m->attrs[0], 0, sizeof m->attrs[0]);
    m->nattr = 1;
    DI_GROW(&m->refs, &m->cref, 1);
    m->refs[0] = 0;
    m->nref = 1;
    DI_GROW(&m->ints, &m->cint, 1);
    m->ints[0] = 0;
    m->nint = 1;
    DI_GROW(&m->floats, &m->cfloat, 1);
    m->floats[0] = 0;
    m->nfloat = 1;
    DI_GROW(&m->inits, &m->cinit, 1);
    memset(&m->inits[0], 0, sizeof m->inits[0]);
    m->ninit = 1;
    return m;
}

void
ir_module_free(ir_module *m)
{
    if (m == NULL)
        return;
    for (uint32_t r = 1; r < m->nregion; r++) {
        di_free(m->regions[r].ops);
        di_free(m->regions[r].args);
        di_free(m->regions[r].results);
    }
    di_free(m->chars);
    di_free(m->strtab);
    di_free(m->types);
    di_free(m->typetab);
    di_free(m->values);
    di_free(m->ops);
    di_free(m->regions);
    di_free(m->meshes);
    di_free(m->attrs);
    di_free(m->refs);
    di_free(m->ints);
    di_free(m->floats);
    di_free(m->data);
    di_free(m->inits);
    di_free(m->oplocs);
    di_free(m->valuelocs);
    di_free(m->devcache);
    di_free(m);
}

static void *
dup_array(const void *p, size_t n, size_t size)
{
    void *q;
    if (p == NULL)
        return NULL;
    q = di_xmalloc(n * size);
    if (n)
        memcpy(q, p, n * size);
    return q;
}

ir_module *
ir_module_clone(const ir_module *m)
{
    ir_module *c = di_xcalloc(1, sizeof *c);
    *c = *m;
#define CLONE_(field, count, cap)                                                                  \
    do {                                                                                           \
        c->field = dup_array(m->field, m->cap, sizeof *m->field);                                  \
    } while (0)
    CLONE_(chars, nchar, cchar);
    CLONE_(strtab, cstrtab, cstrtab);
    CLONE_(types, ntype, ctype);
    CLONE_(typetab, ctypetab, ctypetab);
    CLONE_(values, nvalue, cvalue);
    CLONE_(ops, nop, cop);
    CLONE_(regions, nregion, cregion);
    CLONE_(meshes, nmesh, cmesh);
    CLONE_(attrs, nattr, cattr);
    CLONE_(refs, nref, cref);
    CLONE_(ints, nint, cint);
    CLONE_(floats, nfloat, cfloat);
    CLONE_(data, ndata, cdata);
    CLONE_(inits, ninit, cinit);
#undef CLONE_
    c->devcache = NULL; /* a memo: the copy builds its own */
    c->oplocs = m->oplocs ? dup_array(m->oplocs, m->cop, sizeof *m->oplocs) : NULL;
    c->valuelocs = m->valuelocs ? dup_array(m->valuelocs, m->cvalue, sizeof *m->valuelocs) : NULL;
    for (uint32_t r = 1; r < m->nregion; r++) {
        ir_region *d = &c->regions[r];
        const ir_region *s = &m->regions[r];
        d->ops = dup_array(s->ops, s->cop, sizeof *s->ops);
        d->args = dup_array(s->args, s->carg, sizeof *s->args);
        d->results = dup_array(s->results, s->cresult, sizeof *s->results);
    }
    return c;
}

size_t
ir_module_bytes(const ir_module *m)
{
    size_t n = sizeof *m;
    n += m->cchar + (size_t)m->cstrtab * sizeof *m->strtab +
         (size_t)m->ctypetab * sizeof *m->typetab;
    n += (size_t)m->ctype * sizeof(ir_type) + (size_t)m->cvalue * sizeof(ir_value);
    n += (size_t)m->cop * sizeof(ir_op) + (size_t)m->cregion * sizeof(ir_region);
    n += (size_t)m->cmesh * sizeof(ir_mesh) + (size_t)m->cattr * sizeof(ir_attr);
    n += (size_t)m->cref * sizeof(ir_id) + (size_t)m->cint * sizeof(int64_t);
    n += (size_t)m->cfloat * sizeof(double) + m->cdata + (size_t)m->cinit * sizeof(ir_init);
    for (uint32_t r = 1; r < m->nregion; r++)
        n += ((size_t)m->regions[r].cop + m->regions[r].carg + m->regions[r].cresult) *
             sizeof(ir_id);
    if (m->oplocs)
        n += (size_t)m->cop * sizeof(ir_loc);
    if (m->valuelocs)
        n += (size_t)m->cvalue * sizeof(ir_loc);
    return n;
}

/* ---- strings ---- */

/*
 * Both intern tables keep each entry's hash beside its id (hash << 32 | id),
 * so growing a table never hashes again and a probe compares hashes before
 * contents.
 */
static void
tab_put(uint64_t *tab, uint32_t cap, uint32_t hash, ir_id id)
{
    uint32_t h = hash & (cap - 1);
    while (tab[h])
        h = (h + 1) & (cap - 1);
    tab[h] = (uint64_t)hash << 32 | id;
}

static uint64_t *
tab_grow(uint64_t *old, uint32_t *cap)
{
    uint32_t oc = *cap, nc = oc ? oc * 2 : 64;
    uint64_t *tab = di_xcalloc(nc, sizeof *tab);
    for (uint32_t i = 0; i < oc; i++)
        if (old[i])
            tab_put(tab, nc, (uint32_t)(old[i] >> 32), (ir_id)old[i]);
    di_free(old);
    *cap = nc;
    return tab;
}

static ir_id
str_find_hashed(const ir_module *m, const char *s, size_t len, uint32_t hash)
{
    uint32_t mask, h;
    if (m->cstrtab == 0)
        return 0;
    mask = m->cstrtab - 1;
    for (h = hash & mask; m->strtab[h]; h = (h + 1) & mask) {
        const char *t;
        if ((uint32_t)(m->strtab[h] >> 32) != hash)
            continue;
        t = m->chars + (ir_id)m->strtab[h];
        if (strncmp(t, s, len) == 0 && t[len] == '\0')
            return (ir_id)m->strtab[h];
    }
    return 0;
}

ir_id
ir_str_find(const ir_module *m, const char *s, size_t len)
{
    return str_find_hashed(m, s, len, keyed(m, s, len, 0));
}

ir_id
ir_strn(ir_module *m, const char *s, size_t len)
{
    uint32_t hash = keyed(m, s, len, 0);
    ir_id id = str_find_hashed(m, s, len, hash);
    if (id)
        return id;
    if ((m->nstring + 1) * 2 > m->cstrtab)
        m->strtab = tab_grow(m->strtab, &m->cstrtab);
    if ((uint64_t)m->nchar + len + 1 > UINT32_MAX)
        di_oom();
    DI_GROW(&m->chars, &m->cchar, m->nchar + len + 1);
    id = m->nchar;
    memcpy(m->chars + id, s, len);
    m->chars[id + len] = '\0';
    m->nchar += (uint32_t)len + 1;
    m->nstring++;
    tab_put(m->strtab, m->cstrtab, hash, id);
    return id;
}

ir_id
ir_str(ir_module *m, const char *s)
{
    return ir_strn(m, s, strlen(s));
}

/* ---- pools ---- */

/*
 * The pushes accept source lists that live in the same pool (a transform
 * copying an op's operands): such a source is re-based after the pool grows.
 */
static uint32_t
push_ints(ir_module *m, uint32_t n, const int64_t *v)
{
    uint32_t off = m->nint;
    int alias = v >= m->ints && v < m->ints + m->cint;
    size_t voff = alias ? (size_t)(v - m->ints) : 0;
    DI_GROW(&m->ints, &m->cint, m->nint + n);
    if (alias)
        v = m->ints + voff;
    if (n)
        memcpy(m->ints + off, v, n * sizeof *v);
    m->nint += n;
    return off;
}

static uint32_t
push_refs(ir_module *m, uint32_t n, const ir_id *v)
{
    uint32_t off = m->nref;
    int alias = v >= m->refs && v < m->refs + m->cref;
    size_t voff = alias ? (size_t)(v - m->refs) : 0;
    DI_GROW(&m->refs, &m->cref, m->nref + n);
    if (alias)
        v = m->refs + voff;
    if (n)
        memcpy(m->refs + off, v, n * sizeof *v);
    m->nref += n;
    return off;
}

/* ---- types ---- */

/* One keyed hash over the type's fields and lists (one SipHash call for a tensor). */
static uint32_t
type_hash(const ir_module *m, const ir_type *t)
{
    struct type_key {
        uint8_t kind, dtype;
        uint16_t rank;
        int32_t device;
        ir_id devvar, mesh;
        int64_t lists[2 * IR_MAX_RANK];
    } buf;
    size_t n = 0;
    memset(&buf, 0, offsetof(struct type_key, lists));
    buf.kind = t->kind;
    buf.dtype = t->dtype;
    buf.rank = t->rank;
    buf.device = t->device;
    buf.devvar = t->devvar;
    buf.mesh = t->mesh;
    if (t->kind == IR_TYPE_TENSOR) {
        uint32_t np = t->mesh ? m->meshes[t->mesh].rank : 0;
        if (t->rank <= IR_MAX_RANK && np <= IR_MAX_RANK) {
            memcpy(buf.lists, m->ints + t->dims, t->rank * sizeof(int64_t));
            memcpy(buf.lists + t->rank, m->ints + t->placements, np * sizeof(int64_t));
            n = (t->rank + np) * sizeof(int64_t);
        }
        return keyed(m, &buf, offsetof(struct type_key, lists) + n, 0);
    }
    return keyed(m, m->refs + t->elems, t->nelem * sizeof(ir_id),
                 keyed(m, &buf, offsetof(struct type_key, lists), 0));
}

/* Does the probe (whose lists are already in the pools) equal type id? */
static int
type_equal(const ir_module *m, const ir_type *t, ir_id id)
{
    const ir_type *u = &m->types[id];
    if (t->kind != u->kind || t->dtype != u->dtype || t->rank != u->rank ||
        t->device != u->device || t->devvar != u->devvar || t->mesh != u->mesh ||
        t->nelem != u->nelem)
        return 0;
    if (t->kind == IR_TYPE_TENSOR) {
        if (t->rank &&
            memcmp(m->ints + t->dims, m->ints + u->dims, t->rank * sizeof(int64_t)) != 0)
            return 0;
        if (t->mesh && memcmp(m->ints + t->placements, m->ints + u->placements,
                              m->meshes[t->mesh].rank * sizeof(int64_t)) != 0)
            return 0;
        return 1;
    }
    return t->nelem == 0 ||
           memcmp(m->refs + t->elems, m->refs + u->elems, t->nelem * sizeof(ir_id)) == 0;
}

static ir_id
type_intern(ir_module *m, ir_type t, const int64_t *dims, const int64_t *place,
            const ir_id *elems)
{
    ir_type probe = t;
    uint32_t h, mask, hash;
    ir_id id;
    uint32_t nplace = t.mesh ? m->meshes[t.mesh].rank : 0;

    /*
     * Append the candidate's lists to the pools (rolled back if the type
     * exists). The inputs may point into those very pools, which can move
     * when they grow, so copy them first.
     */
    uint32_t nint0 = m->nint, nref0 = m->nref;
    if (t.kind == IR_TYPE_TENSOR) {
        int64_t d[IR_MAX_RANK], p[IR_MAX_RANK];
        if (t.rank)
            memcpy(d, dims, t.rank * sizeof *d);
        if (nplace > IR_MAX_RANK)
            di_oom(); /* mesh ranks are checked when meshes are made */
        if (nplace)
            memcpy(p, place, nplace * sizeof *p);
        probe.dims = push_ints(m, t.rank, d);
        probe.placements = nplace ? push_ints(m, nplace, p) : 0;
    } else {
        ir_id *e = t.nelem ? di_xmalloc(t.nelem * sizeof *e) : NULL;
        if (t.nelem)
            memcpy(e, elems, t.nelem * sizeof *e);
        probe.elems = push_refs(m, t.nelem, e);
        di_free(e);
    }
    if ((m->ntype + 1) * 2 > m->ctypetab)
        m->typetab = tab_grow(m->typetab, &m->ctypetab);
    mask = m->ctypetab - 1;
    hash = type_hash(m, &probe);
    for (h = hash & mask; m->typetab[h]; h = (h + 1) & mask) {
        id = (ir_id)m->typetab[h];
        if ((uint32_t)(m->typetab[h] >> 32) == hash && type_equal(m, &probe, id)) {
            m->nint = nint0;
            m->nref = nref0;
            return id;
        }
    }
    DI_GROW(&m->types, &m->ctype, m->ntype + 1);
    id = m->ntype++;
    m->types[id] = probe;
    m->typetab[h] = (uint64_t)hash << 32 | id;
    return id;
}

/* Product of dims, saturating at INT64_MAX; 0 if a dim is negative. */
static int64_t
dims_numel(const int64_t *dims, uint32_t rank)
{
    int64_t n = 1;
    for (uint32_t i = 0; i < rank; i++) {
        int64_t d = dims[i];
        if (d < 0)
            return 0;
        if (d != 0 && n > INT64_MAX / d)
            return INT64_MAX;
        n *= d;
    }
    return n;
}

static ir_id
tensor_type(ir_module *m, ir_dtype dt, uint32_t rank, const int64_t *dims, int32_t device,
            ir_id devvar, ir_id mesh, const int64_t *placements)
{
    ir_type t;
    memset(&t, 0, sizeof t);
    if (rank > IR_MAX_RANK)
        di_oom(); /* callers check ranks first; this is an invariant */
    t.kind = IR_TYPE_TENSOR;
    t.dtype = (uint8_t)dt;
    t.rank = (uint16_t)rank;
    t.device = device;
    t.devvar = devvar;
    t.mesh = mesh;
    t.numel = dims_numel(dims, rank);
    return type_intern(m, t, dims, placements, NULL);
}

ir_id
ir_type_tensor(ir_module *m, ir_dtype dt, uint32_t rank, const int64_t *dims, int32_t device)
{
    return tensor_type(m, dt, rank, dims, device, 0, 0, NULL);
}

ir_id
ir_type_tensor_var(ir_module *m, ir_dtype dt, uint32_t rank, const int64_t *dims, ir_id devvar)
{
    return tensor_type(m, dt, rank, dims, IR_DEVICE_NONE, devvar, 0, NULL);
}

ir_id
ir_type_dtensor(ir_module *m, ir_dtype dt, uint32_t rank, const int64_t *dims, ir_id mesh,
                const int64_t *placements)
{
    return tensor_type(m, dt, rank, dims, IR_DEVICE_NONE, 0, mesh, placements);
}

ir_id
ir_type_tuple(ir_module *m, uint32_t n, const ir_id *elems)
{
    ir_type t;
    memset(&t, 0, sizeof t);
    t.kind = IR_TYPE_TUPLE;
    t.device = IR_DEVICE_NONE;
    t.nelem = n;
    return type_intern(m, t, NULL, NULL, elems);
}

/*
 * A small direct-mapped memo of ir_type_with_device: pmaps place the same
 * element types on the same devices over and over (a pipeline has thousands
 * of pmaps over the same device groups). Interned ids never change, so an
 * entry stays valid for the module's life.
 */
#define DEVCACHE_SIZE 4096

struct ir_devcache {
    ir_id type, devvar, result;
    int32_t device;
};

ir_id
ir_type_with_device(ir_module *m, ir_id type, int32_t device, ir_id devvar)
{
    ir_type t = m->types[type];
    int64_t dims[IR_MAX_RANK];
    ir_id r;
    uint32_t slot = (type * 2654435761u ^ (uint32_t)device * 40503u ^ devvar * 97u) &
                    (DEVCACHE_SIZE - 1);
    if (m->devcache == NULL)
        m->devcache = di_xcalloc(DEVCACHE_SIZE, sizeof *m->devcache);
    if (m->devcache[slot].type == type && m->devcache[slot].device == device &&
        m->devcache[slot].devvar == devvar && m->devcache[slot].result)
        return m->devcache[slot].result;
    memcpy(dims, m->ints + t.dims, t.rank * sizeof *dims);
    if (devvar)
        r = tensor_type(m, (ir_dtype)t.dtype, t.rank, dims, IR_DEVICE_NONE, devvar, 0, NULL);
    else
        r = tensor_type(m, (ir_dtype)t.dtype, t.rank, dims, device, 0, 0, NULL);
    m->devcache[slot].type = type;
    m->devcache[slot].device = device;
    m->devcache[slot].devvar = devvar;
    m->devcache[slot].result = r;
    return r;
}

ir_id
ir_type_with_dims(ir_module *m, ir_id type, uint32_t rank, const int64_t *dims)
{
    ir_type t = m->types[type];
    int64_t place[IR_MAX_RANK];
    uint32_t np = t.mesh ? m->meshes[t.mesh].rank : 0;
    if (np > IR_MAX_RANK)
        np = IR_MAX_RANK;
    memcpy(place, m->ints + t.placements, np * sizeof *place);
    return tensor_type(m, (ir_dtype)t.dtype, rank, dims, t.device, t.devvar, t.mesh, place);
}

int64_t
ir_type_numel(const ir_module *m, ir_id t)
{
    return m->types[t].kind == IR_TYPE_TENSOR ? m->types[t].numel : 0;
}

uint64_t
ir_type_bytes(const ir_module *m, ir_id t)
{
    const ir_type *ty = &m->types[t];
    uint64_t n = 0, b;
    if (ty->kind == IR_TYPE_TUPLE) {
        for (uint32_t i = 0; i < ty->nelem; i++) {
            b = ir_type_bytes(m, m->refs[ty->elems + i]);
            n = (n + b < n) ? UINT64_MAX : n + b;
        }
        return n;
    }
    if (di_mul_u64((uint64_t)ir_type_numel(m, t), ir_dtype_size((ir_dtype)ty->dtype), &n) != 0)
        return UINT64_MAX;
    return n;
}

/* ---- meshes ---- */

ir_id
ir_mesh_add(ir_module *m, const char *name, uint32_t rank, const int64_t *shape,
            const int64_t *devices)
{
    ir_mesh *mesh;
    ir_id id;
    uint64_t n = 1;
    for (uint32_t i = 0; i < rank; i++)
        n *= (uint64_t)(shape[i] > 0 ? shape[i] : 0);
    DI_GROW(&m->meshes, &m->cmesh, m->nmesh + 1);
    id = m->nmesh++;
    mesh = &m->meshes[id];
    mesh->name = ir_str(m, name);
    mesh->rank = rank;
    mesh->shape = push_ints(m, rank, shape);
    mesh->ndevice = (uint32_t)n;
    if (devices) {
        uint32_t off = push_ints(m, (uint32_t)n, devices);
        m->meshes[id].devices = off;
    } else {
        uint32_t off = m->nint;
        DI_GROW(&m->ints, &m->cint, m->nint + n);
        for (uint64_t i = 0; i < n; i++)
            m->ints[off + i] = (int64_t)i;
        m->nint += (uint32_t)n;
        m->meshes[id].devices = off;
    }
    return id;
}

ir_id
ir_mesh_find(const ir_module *m, ir_id name)
{
    for (ir_id i = 1; i < m->nmesh; i++)
        if (m->meshes[i].name == name)
            return i;
    return 0;
}

void
ir_mesh_group(const ir_module *m, ir_id mesh, const uint32_t *axes, uint32_t naxes, uint32_t self,
              uint32_t *members, uint32_t *n, uint32_t *pos)
{
    const ir_mesh *ms = &m->meshes[mesh];
    const int64_t *shape = ir_mesh_shape(m, mesh);
    uint32_t rank = ms->rank, all[IR_MAX_RANK];
    int64_t coord[IR_MAX_RANK], count = 1;
    assert(rank <= IR_MAX_RANK && self < ms->ndevice);
    if (axes == NULL) {
        for (uint32_t a = 0; a < rank; a++)
            all[a] = a;
        axes = all;
        naxes = rank;
    }
    for (uint32_t a = rank, p = self; a > 0; a--) {
        coord[a - 1] = p % shape[a - 1];
        p /= (uint32_t)shape[a - 1];
    }
    for (uint32_t j = 0; j < naxes; j++)
        count *= shape[axes[j]];
    *pos = 0;
    for (int64_t k = 0; k < count; k++) {
        int64_t c[IR_MAX_RANK], rem = k, lin = 0;
        memcpy(c, coord, rank * sizeof c[0]);
        for (uint32_t j = naxes; j > 0; j--) { /* axes[0] outermost */
            c[axes[j - 1]] = rem % shape[axes[j - 1]];
            rem /= shape[axes[j - 1]];
        }
        for (uint32_t a = 0; a < rank; a++)
            lin = lin * shape[a] + c[a];
        members[k] = (uint32_t)lin;
        if (lin == self)
            *pos = (uint32_t)k;
    }
    *n = (uint32_t)count;
}

/* ---- regions ---- */

static ir_id
region_new(ir_module *m, ir_id name, ir_id parent)
{
    ir_id id;
    DI_GROW(&m->regions, &m->cregion, m->nregion + 1);
    id = m->nregion++;
    memset(&m->regions[id], 0, sizeof m->regions[id]);
    m->regions[id].name = name;
    m->regions[id].parent = parent;
    return id;
}

ir_id
ir_func_new(ir_module *m, const char *name)
{
    return region_new(m, ir_str(m, name), 0);
}

ir_id
ir_body_new(ir_module *m)
{
    return region_new(m, 0, 0);
}

static ir_id
value_new(ir_module *m, ir_id type, const char *name, ir_id def, uint32_t index, ir_id region)
{
    ir_id id;
    uint32_t cap = m->cvalue;
    DI_GROW(&m->values, &m->cvalue, m->nvalue + 1);
    if (m->valuelocs) {
        if (m->cvalue != cap) /* only when it grew: a realloc per value is quadratic under ASan */
            m->valuelocs = di_xrealloc(m->valuelocs, m->cvalue * sizeof *m->valuelocs);
        memset(&m->valuelocs[m->nvalue], 0, sizeof *m->valuelocs);
    }
    id = m->nvalue++;
    m->values[id].name = (name && *name) ? ir_str(m, name) : 0;
    m->values[id].type = type;
    m->values[id].def = def;
    m->values[id].index = index;
    m->values[id].region = region;
    m->values[id].init = 0;
    return id;
}

void
ir_value_set_init(ir_module *m, ir_id v, const void *bytes, size_t len)
{
    ir_init *in;
    if (m->values[v].init == 0) {
        DI_GROW(&m->inits, &m->cinit, m->ninit + 1);
        m->values[v].init = m->ninit++;
    }
    if (m->ndata + len < m->ndata)
        di_oom();
    DI_GROW(&m->data, &m->cdata, m->ndata + len);
    in = &m->inits[m->values[v].init];
    in->off = m->ndata;
    in->len = len;
    if (len)
        memcpy(m->data + in->off, bytes, len);
    m->ndata += len;
}

const uint8_t *
ir_value_init(const ir_module *m, ir_id v, size_t *len)
{
    uint32_t i = m->values[v].init;
    if (i == 0 || i >= m->ninit) {
        *len = 0;
        return NULL;
    }
    *len = m->inits[i].len;
    return m->data + m->inits[i].off;
}

ir_id
ir_region_add_arg(ir_module *m, ir_id r, ir_id type, const char *name)
{
    ir_id v = value_new(m, type, name, 0, m->regions[r].narg, r);
    ir_region *reg = &m->regions[r];
    DI_GROW(&reg->args, &reg->carg, reg->narg + 1);
    reg->args[reg->narg++] = v;
    return v;
}

void
ir_region_add_result(ir_module *m, ir_id r, ir_id value)
{
    ir_region *reg = &m->regions[r];
    DI_GROW(&reg->results, &reg->cresult, reg->nresult + 1);
    reg->results[reg->nresult++] = value;
}

ir_id
ir_func_find(const ir_module *m, const char *name)
{
    for (ir_id r = 1; r < m->nregion; r++)
        if (m->regions[r].parent == 0 && m->regions[r].name &&
            strcmp(m->chars + m->regions[r].name, name) == 0)
            return r;
    return 0;
}

void
ir_op_set_callee(ir_module *m, ir_id op, ir_id func)
{
    m->ops[op].body = func;
    m->ops[op].flags |= IR_OPFLAG_CALLEE;
}

ir_id
ir_module_entry(const ir_module *m)
{
    ir_id first = 0, r;
    if ((r = ir_func_find(m, "main")) != 0)
        return r;
    for (r = 1; r < m->nregion; r++)
        if (m->regions[r].parent == 0 && m->regions[r].name) {
            first = r;
            break;
        }
    return first;
}

/* ---- ops ---- */

ir_id
ir_op_add(ir_module *m, ir_id r, int kind, uint32_t ninput, const ir_id *inputs,
          uint32_t noutput, const ir_id *types, const char *const *names)
{
    ir_id id;
    ir_op *op;
    ir_region *reg;
    uint32_t in, cap;
    in = push_refs(m, ninput, inputs);
    cap = m->cop;
    DI_GROW(&m->ops, &m->cop, m->nop + 1);
    if (m->oplocs) {
        if (m->cop != cap) /* only when it grew, as for valuelocs */
            m->oplocs = di_xrealloc(m->oplocs, m->cop * sizeof *m->oplocs);
        memset(&m->oplocs[m->nop], 0, sizeof *m->oplocs);
    }
    id = m->nop++;
    op = &m->ops[id];
    memset(op, 0, sizeof *op);
    op->kind = (uint16_t)kind;
    op->ninput = ninput;
    op->inputs = in;
    op->noutput = noutput;
    op->outputs = m->nvalue;
    op->region = r;
    op->attrs = m->nattr;
    for (uint32_t i = 0; i < noutput; i++)
        value_new(m, types ? types[i] : 0, names ? names[i] : NULL, id, i, r);
    if (noutput == 0)
        m->ops[id].outputs = 0;
    reg = &m->regions[r];
    DI_GROW(&reg->ops, &reg->cop, reg->nop + 1);
    reg->ops[reg->nop++] = id;
    return id;
}

/*
 * Attributes of one op are contiguous in attrs[] and sorted by key. They must
 * be added before another op gets attributes; when that rule is broken (a
 * transform decorating an old op) the op's list is moved to the end.
 */
void
ir_op_put_attr(ir_module *m, ir_id opid, const ir_attr *a)
{
    ir_op *op = &m->ops[opid];
    uint32_t pos;
    const char *key = m->chars + a->key;
    for (uint32_t i = 0; i < op->nattr; i++) {
        ir_attr *b = &m->attrs[op->attrs + i];
        if (b->key == a->key) {
            *b = *a;
            return;
        }
    }
    if (op->nattr == 0 || op->attrs + op->nattr != m->nattr) {
        /* Move this op's list to the end of the array so that it can grow. */
        uint32_t start = m->nattr;
        DI_GROW(&m->attrs, &m->cattr, m->nattr + op->nattr + 1);
        op = &m->ops[opid];
        if (op->nattr)
            memmove(m->attrs + start, m->attrs + op->attrs, op->nattr * sizeof *m->attrs);
        op->attrs = start;
        m->nattr = start + op->nattr;
    }
    DI_GROW(&m->attrs, &m->cattr, m->nattr + 1);
    op = &m->ops[opid];
    pos = op->nattr;
    while (pos > 0 && strcmp(m->chars + m->attrs[op->attrs + pos - 1].key, key) > 0) {
        m->attrs[op->attrs + pos] = m->attrs[op->attrs + pos - 1];
        pos--;
    }
    m->attrs[op->attrs + pos] = *a;
    op->nattr++;
    m->nattr++;
}

static ir_attr
attr_make(ir_module *m, const char *key, uint32_t kind)
{
    ir_attr a;
    memset(&a, 0, sizeof a);
    a.key = ir_str(m, key);
    a.kind = kind;
    return a;
}

void
ir_op_set_int(ir_module *m, ir_id op, const char *key, int64_t v)
{
    ir_attr a = attr_make(m, key, IR_ATTR_INT);
    a.i = v;
    ir_op_put_attr(m, op, &a);
}

void
ir_op_set_float(ir_module *m, ir_id op, const char *key, double v)
{
    ir_attr a = attr_make(m, key, IR_ATTR_FLOAT);
    a.f = v;
    ir_op_put_attr(m, op, &a);
}

void
ir_op_set_string(ir_module *m, ir_id op, const char *key, const char *v)
{
    ir_attr a = attr_make(m, key, IR_ATTR_STRING);
    a.s = ir_str(m, v);
    ir_op_put_attr(m, op, &a);
}

void
ir_op_set_ints(ir_module *m, ir_id op, const char *key, uint32_t n, const int64_t *v)
{
    ir_attr a = attr_make(m, key, IR_ATTR_INTS);
    a.n = n;
    a.off = push_ints(m, n, v);
    ir_op_put_attr(m, op, &a);
}

void
ir_op_set_floats(ir_module *m, ir_id op, const char *key, uint32_t n, const double *v)
{
    ir_attr a = attr_make(m, key, IR_ATTR_FLOATS);
    a.n = n;
    a.off = m->nfloat;
    DI_GROW(&m->floats, &m->cfloat, m->nfloat + n);
    if (n)
        memcpy(m->floats + a.off, v, n * sizeof *v);
    m->nfloat += n;
    ir_op_put_attr(m, op, &a);
}

void
ir_op_set_mesh(ir_module *m, ir_id op, const char *key, ir_id mesh)
{
    ir_attr a = attr_make(m, key, IR_ATTR_MESH);
    a.s = mesh;
    ir_op_put_attr(m, op, &a);
}

void
ir_op_set_tensor(ir_module *m, ir_id op, const char *key, ir_id type, const void *bytes, size_t n)
{
    ir_attr a = attr_make(m, key, IR_ATTR_TENSOR);
    if (n > UINT32_MAX)
        di_oom();
    a.i = type;
    a.n = (uint32_t)n;
    a.off = (uint32_t)m->ndata;
    if (m->ndata + n > UINT32_MAX)
        di_oom();
    DI_GROW(&m->data, &m->cdata, m->ndata + n);
    if (n)
        memcpy(m->data + a.off, bytes, n);
    m->ndata += n;
    ir_op_put_attr(m, op, &a);
}

const ir_attr *
ir_op_attr(const ir_module *m, ir_id opid, const char *key)
{
    const ir_op *op = &m->ops[opid];
    for (uint32_t i = 0; i < op->nattr; i++) {
        const ir_attr *a = &m->attrs[op->attrs + i];
        if (strcmp(m->chars + a->key, key) == 0)
            return a;
    }
    return NULL;
}

const ir_attr *
ir_op_attr_key(const ir_module *m, ir_id opid, ir_id key)
{
    const ir_op *op = &m->ops[opid];
    if (key == 0)
        return NULL;
    for (uint32_t i = 0; i < op->nattr; i++)
        if (m->attrs[op->attrs + i].key == key)
            return &m->attrs[op->attrs + i];
    return NULL;
}

int64_t
ir_op_int(const ir_module *m, ir_id op, const char *key, int64_t dflt)
{
    const ir_attr *a = ir_op_attr(m, op, key);
    return (a && a->kind == IR_ATTR_INT) ? a->i : dflt;
}

double
ir_op_float(const ir_module *m, ir_id op, const char *key, double dflt)
{
    const ir_attr *a = ir_op_attr(m, op, key);
    if (a && a->kind == IR_ATTR_FLOAT)
        return a->f;
    if (a && a->kind == IR_ATTR_INT)
        return (double)a->i;
    return dflt;
}

const char *
ir_op_string(const ir_module *m, ir_id op, const char *key, const char *dflt)
{
    const ir_attr *a = ir_op_attr(m, op, key);
    return (a && a->kind == IR_ATTR_STRING) ? m->chars + a->s : dflt;
}

const int64_t *
ir_op_ints(const ir_module *m, ir_id op, const char *key, uint32_t *n)
{
    const ir_attr *a = ir_op_attr(m, op, key);
    if (a && a->kind == IR_ATTR_INTS) {
        *n = a->n;
        return m->ints + a->off;
    }
    *n = 0;
    return NULL;
}

int
ir_type_shard_dims(const ir_module *m, ir_id ty, int64_t *dims)
{
    const ir_type *t = &m->types[ty];
    const int64_t *shape = ir_mesh_shape(m, t->mesh);
    const int64_t *place = m->ints + t->placements;
    memcpy(dims, m->ints + t->dims, t->rank * sizeof dims[0]);
    for (uint32_t a = 0; t->mesh && a < m->meshes[t->mesh].rank; a++)
        if (IR_PLACE_IS_SPLIT(place[a])) {
            if (place[a] >= t->rank || shape[a] < 1 || dims[place[a]] % shape[a] != 0)
                return -1;
            dims[place[a]] /= shape[a];
        }
    return 0;
}
