/*
 * hash.c: the canonical hash of a module (docs/ir-text.md), the key of
 * every cache entry. Two modules hash the same when they differ only in
 * names of values, ops, meshes and pmap device variables, or in the ids the
 * arrays happen to give things; any change to a shape, dtype, attribute key
 * or value, device, placement, mesh content, op kind, edge (which value
 * feeds which input slot), function name, the set of ops (dead ones
 * included) or the order of a region's ops changes it. The order counts
 * even between independent ops: the simulator runs each device's ops in
 * program order, so it decides the streams' timing and the liveness of
 * every value (HASH_VERSION 1 ignored it, and a pipeline transformed with
 * GPipe and with 1F1B hashed the same: gpt3-1.3b, tp 8, pp 2, 32
 * microbatches, peaks of 44.2 and 4.4 GiB, one cache entry).
 *
 * The encoding is a tree of SHA-256 digests built bottom-up, each over a
 * tagged, length-prefixed serialization (integers as 8 little-endian bytes):
 *
 *   type    ("tensor", dtype, rank, dims, device, device variable as the
 *            nesting level of the pmap body that binds it (not its name),
 *            mesh content or none, placements) or ("tuple", n, elements)
 *   mesh    ("mesh", rank, shape, ndevice, devices); its name is not hashed
 *   value   a use of a value is ("arg", nesting level, position, type) for a
 *            region argument and ("res", digest of the defining op, result
 *            index) for an op result
 *   op      ("op", kind, opaque op type, attributes sorted by key with their
 *            values (a mesh by content, a tensor by type and bytes, pmap's
 *            device_var by its role only), inputs in slot order, the body's
 *            digest for a pmap, result types and initializer bytes)
 *   region  ("region", nesting level, argument types and initializer bytes
 *            (ONNX weights) in order, results in order, the digests of all
 *            its ops in program order), so dead ops count
 *   module  ("distir-module", version, the sorted multiset of mesh digests,
 *            the entry function (ir_module_entry) as ("func", name, region),
 *            then the other functions' digests sorted, except callees)
 *
 * A pmap that calls a function (IR_OPFLAG_CALLEE) hashes the function's
 * region digest where an owned body's would be, and a function that pmaps
 * call is hashed as the body of a pmap in a function (nesting level 1, its
 * device variable bound at level 1), so a pmap calling a function and a pmap
 * owning a copy of that function's body hash the same. Functions that pmaps
 * call are part of their callers, like bodies: they are not listed on their
 * own and their names are not hashed, so sharing one function among many
 * pmaps, or giving each pmap its own copy, leaves the hash unchanged (the
 * simulation, whose cache key this is, is the same). Callees are hashed
 * before their callers (a topological order of the call graph); a call in a
 * cycle, which the verifier rejects, hashes as `bad`.
 *
 * Op kinds and dtypes are hashed by name and attribute kinds by their schema
 * letter, never by enum number, so adding an op to ops.h changes no hash.
 * Function names are hashed, except those of callees: they are the
 * module's API (the entry is found by name). Value names, op names, mesh
 * names and device variable names are not. Ops that no region lists are
 * arena garbage and are ignored, as the verifier ignores them.
 *
 * Each op is hashed once (one SHA-256 per op) and each type once per
 * binding context. Pmap bodies are walked with an explicit stack. The hash never reads
 * outside the module's arrays, even for a module that fails the verifier
 * (whose hash is then well defined but meaningless).
 *
 * Changing anything here changes every hash: it is a cache-format change
 * (bump HASH_VERSION and the known-answer test in tests/test_hash.c).
 */
#include "ir/ir.h"
#include "ir/safe.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define HASH_VERSION 2

/* One region being hashed. */
typedef struct hframe {
    ir_id region;
    ir_id pmap;     /* the op whose body this is; 0 for a function */
    uint32_t next;  /* position of the next op */
    uint32_t level; /* nesting level: 0 for a function */
    ir_id bound;    /* string id of the device variable this body binds, or 0 */
    uint32_t saved; /* its binding outside this body */
} hframe;

/* Type memo states. */
enum {
    TD_NONE = 0,
    TD_FREE = 1, /* valid in every context */
    TD_ENV = 2,  /* depends on device-variable bindings: valid in region tenv[t] only */
};

typedef struct hasher {
    const ir_module *m;
    di_hash *odig; /* per op */
    uint8_t *odone;
    di_hash *tdig; /* per type */
    uint8_t *tstate;
    ir_id *tenv;
    di_hash *mdig; /* per mesh */
    di_hash *rdig; /* per region */
    uint8_t *rdone;
    uint8_t *visited; /* per region */
    uint32_t *bind;   /* per string id: level of the innermost body binding it, 0 none */
    ir_id *cvar;      /* per region: a callee function's device variable (first caller's) */
    uint8_t *callee;  /* per region: a function some reachable pmap calls */
    hframe *stack;
    uint32_t nstack, cstack;
    ir_id *tstack;
    uint32_t ntstack, ctstack;
    di_hash bad; /* stands for anything that is out of range */
} hasher;

/* ---- serialization ---- */

/*
 * The input of one digest. Small encodings collect in `local` and are hashed
 * with one call (OpenSSL's per-context cost dominates otherwise); once one
 * outgrows it (tensor constants, weights) it streams. Either way the digest
 * is SHA-256 of the same bytes.
 */
typedef struct enc {
    size_t n;
    int streaming;
    di_sha256 s;
    uint8_t local[1024];
} enc;

static void
enc_init(enc *e)
{
    e->n = 0;
    e->streaming = 0;
}

static void
enc_put(enc *e, const void *p, size_t n)
{
    if (e->n + n > sizeof e->local) {
        if (!e->streaming) {
            di_sha256_init(&e->s);
            e->streaming = 1;
        }
        di_sha256_update(&e->s, e->local, e->n);
        e->n = 0;
        if (n > sizeof e->local) {
            di_sha256_update(&e->s, p, n);
            return;
        }
    }
    memcpy(e->local + e->n, p, n);
    e->n += n;
}

static void
enc_final(enc *e, di_hash *out)
{
    if (!e->streaming) {
        di_sha256_once(e->local, e->n, out);
        return;
    }
    di_sha256_update(&e->s, e->local, e->n);
    di_sha256_final(&e->s, out);
}

/* Integers are 8 little-endian bytes. */
static void
put_u64(enc *s, uint64_t v)
{
    uint8_t b[8];
    di_store_le(b, v, sizeof b);
    enc_put(s, b, sizeof b);
}

static void
put_i64(enc *s, int64_t v)
{
    put_u64(s, (uint64_t)v);
}

static void
put_bytes(enc *s, const void *p, size_t n)
{
    put_u64(s, (uint64_t)n);
    if (n)
        enc_put(s, p, n);
}

static void
put_str(enc *s, const char *str)
{
    put_bytes(s, str, strlen(str));
}

static void
put_digest(enc *s, const di_hash *h)
{
    enc_put(s, h->b, sizeof h->b);
}

/* A double by its bits, with every NaN the same. */
static void
put_double(enc *s, double v)
{
    put_u64(s, isnan(v) ? 0x7ff8000000000000ull : di_double_bits(v));
}

/*
 * Enums are hashed by name, not number, so that adding an op or a dtype to
 * its table does not change the hash of every module.
 */
static void
put_opkind(enc *s, int kind)
{
    if (kind > IR_OP_NONE && kind < IR_NOPKIND) {
        put_str(s, ir_opkind_name(kind));
    } else {
        put_str(s, "?op");
        put_u64(s, (uint64_t)kind);
    }
}

static void
put_dtype(enc *s, unsigned dtype)
{
    if (dtype > IR_DTYPE_NONE && dtype < IR_NDTYPE) {
        put_str(s, ir_dtype_name((ir_dtype)dtype));
    } else {
        put_str(s, "?dtype");
        put_u64(s, dtype);
    }
}

/* Attribute kinds by the letters of the op table's schemas. */
static void
put_attr_kind(enc *s, uint32_t kind)
{
    static const char letters[] = "?ifsIFmt";
    char c[2] = {kind < sizeof letters - 1 ? letters[kind] : '?', '\0'};
    put_str(s, c);
    if (c[0] == '?')
        put_u64(s, kind);
}

/* ---- meshes and types ---- */

static void
hash_mesh(const ir_module *m, ir_id id, di_hash *out)
{
    const ir_mesh *me = &m->meshes[id];
    enc s;
    enc_init(&s);
    put_str(&s, "mesh");
    if (me->rank > IR_MAX_RANK || !ir_safe_slice(me->shape, me->rank, m->nint) ||
        !ir_safe_slice(me->devices, me->ndevice, m->nint)) {
        put_str(&s, "malformed");
    } else {
        put_u64(&s, me->rank);
        for (uint32_t a = 0; a < me->rank; a++)
            put_i64(&s, m->ints[me->shape + a]);
        put_u64(&s, me->ndevice);
        for (uint32_t d = 0; d < me->ndevice; d++)
            put_i64(&s, m->ints[me->devices + d]);
    }
    enc_final(&s, out);
}

static const di_hash *
mesh_digest(const hasher *h, ir_id mesh)
{
    return (mesh != 0 && mesh < h->m->nmesh) ? &h->mdig[mesh] : &h->bad;
}

static int
type_ready(const hasher *h, ir_id t, ir_id region)
{
    return h->tstate[t] == TD_FREE || (h->tstate[t] == TD_ENV && h->tenv[t] == region);
}

/* Hashes type x whose tuple elements, if any, are ready. */
static void
hash_type_node(hasher *h, ir_id x, ir_id region)
{
    const ir_module *m = h->m;
    const ir_type *ty = &m->types[x];
    int env = 0;
    enc s;
    enc_init(&s);
    if (ty->kind == IR_TYPE_TUPLE) {
        put_str(&s, "tuple");
        if (!ir_safe_slice(ty->elems, ty->nelem, m->nref)) {
            put_str(&s, "malformed");
        } else {
            put_u64(&s, ty->nelem);
            for (uint32_t i = 0; i < ty->nelem; i++) {
                ir_id e = m->refs[ty->elems + i];
                if (e == 0 || e >= x) {
                    put_digest(&s, &h->bad);
                } else {
                    put_digest(&s, &h->tdig[e]);
                    env |= h->tstate[e] == TD_ENV;
                }
            }
        }
    } else if (ty->kind == IR_TYPE_TENSOR) {
        put_str(&s, "tensor");
        put_dtype(&s, ty->dtype);
        if (ty->rank > IR_MAX_RANK || !ir_safe_slice(ty->dims, ty->rank, m->nint)) {
            put_str(&s, "malformed");
        } else {
            put_u64(&s, ty->rank);
            for (uint32_t d = 0; d < ty->rank; d++)
                put_i64(&s, m->ints[ty->dims + d]);
        }
        put_i64(&s, ty->device);
        if (ty->devvar == 0) {
            put_u64(&s, 0);
        } else if (ty->devvar < m->nchar && h->bind[ty->devvar] != 0) {
            put_u64(&s, 1);
            put_u64(&s, h->bind[ty->devvar]);
            env = 1;
        } else {
            /* Unbound (the verifier rejects it): fall back to the name. */
            put_u64(&s, 2);
            put_str(&s, ir_safe_str(m, ty->devvar));
            env = 1;
        }
        if (ty->mesh == 0) {
            put_u64(&s, 0);
        } else {
            put_u64(&s, 1);
            put_digest(&s, mesh_digest(h, ty->mesh));
            if (ty->mesh < m->nmesh && m->meshes[ty->mesh].rank <= IR_MAX_RANK &&
                ir_safe_slice(ty->placements, m->meshes[ty->mesh].rank, m->nint)) {
                uint32_t rank = m->meshes[ty->mesh].rank;
                put_u64(&s, rank);
                for (uint32_t a = 0; a < rank; a++)
                    put_i64(&s, m->ints[ty->placements + a]);
            } else {
                put_str(&s, "malformed");
            }
        }
    } else {
        put_str(&s, "badtype");
        put_u64(&s, ty->kind);
    }
    enc_final(&s, &h->tdig[x]);
    h->tstate[x] = env ? TD_ENV : TD_FREE;
    h->tenv[x] = region;
}

/*
 * The digest of type t in region (whose device-variable bindings are live).
 * Tuples are walked with an explicit stack; elements must be earlier types,
 * anything else hashes as `bad`, so the walk ends on any input.
 */
static const di_hash *
type_digest(hasher *h, ir_id t, ir_id region)
{
    const ir_module *m = h->m;
    if (t == 0 || t >= m->ntype)
        return &h->bad;
    if (type_ready(h, t, region))
        return &h->tdig[t];
    h->ntstack = 0;
    DI_GROW(&h->tstack, &h->ctstack, 1);
    h->tstack[h->ntstack++] = t;
    while (h->ntstack > 0) {
        ir_id x = h->tstack[h->ntstack - 1];
        const ir_type *ty = &m->types[x];
        int pushed = 0;
        if (type_ready(h, x, region)) {
            h->ntstack--;
            continue;
        }
        if (ty->kind == IR_TYPE_TUPLE && ir_safe_slice(ty->elems, ty->nelem, m->nref)) {
            for (uint32_t i = 0; i < ty->nelem; i++) {
                ir_id e = m->refs[ty->elems + i];
                if (e != 0 && e < x && !type_ready(h, e, region)) {
                    DI_GROW(&h->tstack, &h->ctstack, h->ntstack + 1);
                    h->tstack[h->ntstack++] = e;
                    pushed = 1;
                }
            }
        }
        if (pushed)
            continue;
        hash_type_node(h, x, region);
        h->ntstack--;
    }
    return &h->tdig[t];
}

/* ---- values, ops, regions ---- */

/* A use of value v in a region at the given level. */
static void
put_value(hasher *h, enc *s, ir_id v, const hframe *f)
{
    const ir_module *m = h->m;
    const ir_value *val;
    if (v == 0 || v >= m->nvalue) {
        put_str(s, "badvalue");
        return;
    }
    val = &m->values[v];
    if (val->def == 0) {
        put_str(s, "arg");
        put_u64(s, f->level);
        put_u64(s, val->index);
        put_digest(s, type_digest(h, val->type, f->region));
    } else {
        put_str(s, "res");
        if (val->def < m->nop && h->odone[val->def])
            put_digest(s, &h->odig[val->def]);
        else
            put_digest(s, &h->bad);
        put_u64(s, val->index);
    }
}

/* A value's initializer data (ONNX weights): absent, or its bytes. */
static void
put_init(const hasher *h, enc *s, ir_id v)
{
    const ir_module *m = h->m;
    uint32_t i;
    if (v == 0 || v >= m->nvalue || (i = m->values[v].init) == 0) {
        put_u64(s, 0);
        return;
    }
    put_u64(s, 1);
    if (i >= m->ninit || m->inits[i].off > m->ndata || m->inits[i].len > m->ndata - m->inits[i].off)
        put_str(s, "malformed");
    else
        put_bytes(s, m->data + m->inits[i].off, m->inits[i].len);
}

static int
cmp_attr_key(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static void
put_attr(hasher *h, enc *s, const ir_op *o, const ir_attr *a, const hframe *f)
{
    const ir_module *m = h->m;
    const char *key = ir_safe_str(m, a->key);
    put_str(s, key);
    put_attr_kind(s, a->kind);
    switch (a->kind) {
    case IR_ATTR_INT:
        put_i64(s, a->i);
        break;
    case IR_ATTR_FLOAT:
        put_double(s, a->f);
        break;
    case IR_ATTR_STRING:
        /* A pmap's device variable is a name: only its role (bound by the body) counts. */
        if (o->kind == IR_OP_PMAP && strcmp(key, "device_var") == 0)
            put_str(s, "bound");
        else
            put_str(s, a->s < m->nchar ? m->chars + a->s : "");
        break;
    case IR_ATTR_INTS:
        if (!ir_safe_slice(a->off, a->n, m->nint)) {
            put_str(s, "malformed");
            break;
        }
        put_u64(s, a->n);
        for (uint32_t i = 0; i < a->n; i++)
            put_i64(s, m->ints[a->off + i]);
        break;
    case IR_ATTR_FLOATS:
        if (!ir_safe_slice(a->off, a->n, m->nfloat)) {
            put_str(s, "malformed");
            break;
        }
        put_u64(s, a->n);
        for (uint32_t i = 0; i < a->n; i++)
            put_double(s, m->floats[a->off + i]);
        break;
    case IR_ATTR_MESH:
        put_digest(s, mesh_digest(h, a->s));
        break;
    case IR_ATTR_TENSOR:
        put_digest(s, (a->i > 0 && a->i < (int64_t)m->ntype)
                          ? type_digest(h, (ir_id)a->i, f->region)
                          : &h->bad);
        if (!ir_safe_slice(a->off, a->n, m->ndata))
            put_str(s, "malformed");
        else
            put_bytes(s, m->data + a->off, a->n);
        break;
    default:
        break;
    }
}

/* Attributes in key order (they are kept sorted; a module that is not gets sorted here). */
static void
put_attrs(hasher *h, enc *s, const ir_op *o, const hframe *f)
{
    const ir_module *m = h->m;
    const ir_attr *a;
    int sorted = 1;
    if (o->nattr == 0 || !ir_safe_slice(o->attrs, o->nattr, m->nattr)) {
        put_u64(s, 0);
        if (o->nattr != 0)
            put_str(s, "malformed");
        return;
    }
    a = &m->attrs[o->attrs];
    put_u64(s, o->nattr);
    for (uint32_t i = 1; i < o->nattr && sorted; i++)
        sorted = strcmp(ir_safe_str(m, a[i - 1].key), ir_safe_str(m, a[i].key)) <= 0;
    if (sorted) {
        for (uint32_t i = 0; i < o->nattr; i++)
            put_attr(h, s, o, &a[i], f);
        return;
    }
    {
        /* Pairs of (key, attribute) sorted by key; the key comes first so qsort can compare. */
        struct keyed {
            const char *key;
            const ir_attr *attr;
        } *k = di_xmalloc(o->nattr * sizeof *k);
        for (uint32_t i = 0; i < o->nattr; i++) {
            k[i].key = ir_safe_str(m, a[i].key);
            k[i].attr = &a[i];
        }
        qsort(k, o->nattr, sizeof *k, cmp_attr_key);
        for (uint32_t i = 0; i < o->nattr; i++)
            put_attr(h, s, o, k[i].attr, f);
        di_free(k);
    }
}

static void
hash_op(hasher *h, ir_id op, const hframe *f)
{
    const ir_module *m = h->m;
    const ir_op *o = &m->ops[op];
    enc s;
    enc_init(&s);
    put_str(&s, "op");
    put_opkind(&s, o->kind);
    if (o->kind == IR_OP_OPAQUE) {
        const char *t = ir_safe_str(m, o->opaque);
        if (*t == '\0' && o->nattr != 0 && ir_safe_slice(o->attrs, o->nattr, m->nattr))
            for (uint32_t i = 0; i < o->nattr; i++)
                if (m->attrs[o->attrs + i].kind == IR_ATTR_STRING &&
                    strcmp(ir_safe_str(m, m->attrs[o->attrs + i].key), "op_type") == 0)
                    t = ir_safe_str(m, m->attrs[o->attrs + i].s);
        put_str(&s, t);
    }
    put_attrs(h, &s, o, f);
    if (!ir_safe_slice(o->inputs, o->ninput, m->nref)) {
        put_str(&s, "malformed");
    } else {
        put_u64(&s, o->ninput);
        for (uint32_t i = 0; i < o->ninput; i++)
            put_value(h, &s, m->refs[o->inputs + i], f);
    }
    if (o->body != 0) {
        const di_hash *bd = &h->bad;
        if (o->body < m->nregion && h->rdone[o->body]) {
            const ir_region *br = &m->regions[o->body];
            if (br->parent == op || ((o->flags & IR_OPFLAG_CALLEE) && h->callee[o->body]))
                bd = &h->rdig[o->body];
        }
        put_digest(&s, bd);
    }
    if (o->noutput != 0 && (o->outputs == 0 || !ir_safe_slice(o->outputs, o->noutput, m->nvalue))) {
        put_str(&s, "malformed");
    } else {
        put_u64(&s, o->noutput);
        for (uint32_t i = 0; i < o->noutput; i++) {
            put_digest(&s, type_digest(h, m->values[o->outputs + i].type, f->region));
            put_init(h, &s, o->outputs + i);
        }
    }
    enc_final(&s, &h->odig[op]);
    h->odone[op] = 1;
}

static int
cmp_digest(const void *a, const void *b)
{
    return memcmp(a, b, sizeof(di_hash));
}

/* Finishes the region on top of the stack: its digest, then the pending pmap op's. */
static void
leave_region(hasher *h)
{
    const ir_module *m = h->m;
    hframe f = h->stack[h->nstack - 1];
    const ir_region *reg = &m->regions[f.region];
    enc s;

    enc_init(&s);
    put_str(&s, "region");
    put_u64(&s, f.level);
    put_u64(&s, reg->narg);
    for (uint32_t i = 0; i < reg->narg; i++) {
        ir_id v = reg->args[i];
        put_digest(&s, (v != 0 && v < m->nvalue) ? type_digest(h, m->values[v].type, f.region)
                                                 : &h->bad);
        put_init(h, &s, v);
    }
    put_u64(&s, reg->nresult);
    for (uint32_t i = 0; i < reg->nresult; i++)
        put_value(h, &s, reg->results[i], &f);
    /* In program order: the simulator runs a device's ops in it (streams, liveness). */
    put_u64(&s, reg->nop);
    for (uint32_t i = 0; i < reg->nop; i++) {
        ir_id op = reg->ops[i];
        put_digest(&s, (op != 0 && op < m->nop && h->odone[op]) ? &h->odig[op] : &h->bad);
    }
    enc_final(&s, &h->rdig[f.region]);
    h->rdone[f.region] = 1;

    if (f.bound != 0)
        h->bind[f.bound] = f.saved;
    h->nstack--;
    if (f.pmap != 0)
        hash_op(h, f.pmap, &h->stack[h->nstack - 1]);
}

static int
lists_ok(const ir_region *reg)
{
    return !(reg->nop != 0 && reg->ops == NULL) && !(reg->narg != 0 && reg->args == NULL) &&
           !(reg->nresult != 0 && reg->results == NULL);
}

/* Binds device variable var (a string id) at the level of frame f. */
static void
bind_var(hasher *h, hframe *f, ir_id var)
{
    f->bound = var;
    f->saved = h->bind[var];
    h->bind[var] = f->level;
}

static void
enter_region(hasher *h, ir_id r, ir_id pmap, uint32_t level)
{
    const ir_module *m = h->m;
    hframe *f;
    DI_GROW(&h->stack, &h->cstack, h->nstack + 1);
    f = &h->stack[h->nstack++];
    memset(f, 0, sizeof *f);
    f->region = r;
    f->pmap = pmap;
    f->level = level;
    h->visited[r] = 1;
    if (pmap == 0 && h->callee[r]) {
        /* A callee: hashed as the body of a pmap in a function. */
        f->level = 1;
        if (h->cvar[r] != 0)
            bind_var(h, f, h->cvar[r]);
    } else if (pmap != 0) {
        const ir_op *o = &m->ops[pmap];
        if (o->nattr != 0 && ir_safe_slice(o->attrs, o->nattr, m->nattr)) {
            for (uint32_t i = 0; i < o->nattr; i++) {
                const ir_attr *a = &m->attrs[o->attrs + i];
                if (a->kind == IR_ATTR_STRING && a->s != 0 && a->s < m->nchar &&
                    strcmp(ir_safe_str(m, a->key), "device_var") == 0) {
                    bind_var(h, f, a->s);
                    break;
                }
            }
        }
    }
}

/* Hashes a function's region and, depth first, the pmap bodies inside it. */
static void
hash_function(hasher *h, ir_id r)
{
    const ir_module *m = h->m;
    enter_region(h, r, 0, 0);
    while (h->nstack > 0) {
        hframe *f = &h->stack[h->nstack - 1];
        const ir_region *reg = &m->regions[f->region];
        ir_id op, b;
        if (f->next >= reg->nop) {
            leave_region(h);
            continue;
        }
        op = reg->ops[f->next++];
        if (op == 0 || op >= m->nop)
            continue;
        b = m->ops[op].body;
        if (m->ops[op].kind == IR_OP_PMAP && b != 0 && b < m->nregion &&
            m->regions[b].parent == op && !h->visited[b] && lists_ok(&m->regions[b])) {
            enter_region(h, b, op, f->level + 1); /* the op is hashed when its body is done */
            continue;
        }
        hash_op(h, op, f);
    }
}

/* The device variable a pmap's device_var attribute names, or 0. */
static ir_id
pmap_var(const ir_module *m, ir_id op)
{
    const ir_op *o = &m->ops[op];
    if (o->nattr == 0 || !ir_safe_slice(o->attrs, o->nattr, m->nattr))
        return 0;
    for (uint32_t i = 0; i < o->nattr; i++) {
        const ir_attr *a = &m->attrs[o->attrs + i];
        if (a->kind == IR_ATTR_STRING && a->s != 0 && a->s < m->nchar &&
            strcmp(ir_safe_str(m, a->key), "device_var") == 0)
            return a->s;
    }
    return 0;
}

/* A call edge: function `from` (through its bodies) holds pmap `op` calling function `to`. */
typedef struct call_edge {
    ir_id from, to;
} call_edge;

/*
 * Finds the pmaps that call functions (walking each function and the owned
 * bodies in it, as hash_function does), marks the callees and their device
 * variables, and returns the call edges.
 */
static call_edge *
find_calls(hasher *h, uint32_t *nedge)
{
    const ir_module *m = h->m;
    call_edge *e = NULL;
    uint32_t ne = 0, ce = 0, nst = 0, cst = 0;
    ir_id *st = NULL;
    uint8_t *seen = di_xcalloc(m->nregion, 1);
    for (ir_id f = 1; f < m->nregion; f++) {
        if (m->regions[f].parent != 0 || !lists_ok(&m->regions[f]))
            continue;
        DI_GROW(&st, &cst, nst + 1);
        st[nst++] = f;
        seen[f] = 1;
        while (nst > 0) {
            const ir_region *reg = &m->regions[st[--nst]];
            for (uint32_t i = 0; i < reg->nop; i++) {
                ir_id op = reg->ops[i], b;
                const ir_op *o;
                if (op == 0 || op >= m->nop)
                    continue;
                o = &m->ops[op];
                b = o->body;
                if (!ir_opkind_calls(o->kind) || b == 0 || b >= m->nregion)
                    continue;
                if ((o->flags & IR_OPFLAG_CALLEE) && m->regions[b].parent == 0 &&
                    lists_ok(&m->regions[b])) {
                    if (!h->callee[b]) {
                        h->callee[b] = 1;
                        h->cvar[b] = pmap_var(m, op);
                    }
                    DI_GROW(&e, &ce, ne + 1);
                    e[ne].from = f;
                    e[ne].to = b;
                    ne++;
                } else if (m->regions[b].parent == op && !seen[b] && lists_ok(&m->regions[b])) {
                    seen[b] = 1;
                    DI_GROW(&st, &cst, nst + 1);
                    st[nst++] = b;
                }
            }
        }
    }
    di_free(st);
    di_free(seen);
    *nedge = ne;
    return e;
}

/*
 * Hashes every function, each callee before the functions that call it
 * (Kahn's algorithm over the call edges); functions left in a cycle follow
 * in region order, their calls into the cycle hashing as `bad`.
 */
static void
hash_functions(hasher *h)
{
    const ir_module *m = h->m;
    uint32_t ne, nq = 0, *deps = di_xcalloc(m->nregion, sizeof *deps);
    uint32_t *first = di_xcalloc((size_t)m->nregion + 1, sizeof *first), *by_to;
    ir_id *queue = di_xmalloc(m->nregion * sizeof *queue);
    call_edge *e = find_calls(h, &ne);
    by_to = di_xmalloc((ne ? ne : 1) * sizeof *by_to);
    /* Edges grouped by callee (counting sort): first[to] .. first[to + 1]. */
    for (uint32_t i = 0; i < ne; i++) {
        deps[e[i].from]++;
        first[e[i].to + 1]++;
    }
    for (ir_id r = 1; r <= m->nregion - 1; r++)
        first[r + 1] += first[r];
    {
        uint32_t *pos = di_xmalloc(((size_t)m->nregion + 1) * sizeof *pos);
        memcpy(pos, first, ((size_t)m->nregion + 1) * sizeof *pos);
        for (uint32_t i = 0; i < ne; i++)
            by_to[pos[e[i].to]++] = i;
        di_free(pos);
    }
    for (ir_id r = 1; r < m->nregion; r++)
        if (m->regions[r].parent == 0 && lists_ok(&m->regions[r]) && deps[r] == 0)
            queue[nq++] = r;
    for (uint32_t qi = 0; qi < nq; qi++) {
        ir_id g = queue[qi];
        hash_function(h, g);
        for (uint32_t k = first[g]; k < first[g + 1]; k++) {
            ir_id f = e[by_to[k]].from;
            if (--deps[f] == 0)
                queue[nq++] = f;
        }
    }
    for (ir_id r = 1; r < m->nregion; r++)
        if (m->regions[r].parent == 0 && lists_ok(&m->regions[r]) && !h->visited[r])
            hash_function(h, r);
    di_free(deps);
    di_free(first);
    di_free(by_to);
    di_free(queue);
    di_free(e);
}

static void
hash_function_digest(const hasher *h, ir_id r, di_hash *out)
{
    enc s;
    enc_init(&s);
    put_str(&s, "func");
    put_str(&s, ir_safe_str(h->m, h->m->regions[r].name));
    put_digest(&s, &h->rdig[r]);
    enc_final(&s, out);
}

void
ir_hash(const ir_module *m, di_hash *out)
{
    hasher h;
    enc s;
    ir_id entry;
    di_hash *list;
    uint32_t n = 0;

    if (m == NULL || !ir_safe_arrays(m)) {
        di_sha256_once("distir-module-malformed", 23, out);
        return;
    }
    memset(&h, 0, sizeof h);
    h.m = m;
    h.odig = di_xcalloc(m->nop, sizeof *h.odig);
    h.odone = di_xcalloc(m->nop, 1);
    h.tdig = di_xcalloc(m->ntype, sizeof *h.tdig);
    h.tstate = di_xcalloc(m->ntype, 1);
    h.tenv = di_xcalloc(m->ntype, sizeof *h.tenv);
    h.mdig = di_xcalloc(m->nmesh, sizeof *h.mdig);
    h.rdig = di_xcalloc(m->nregion, sizeof *h.rdig);
    h.rdone = di_xcalloc(m->nregion, 1);
    h.visited = di_xcalloc(m->nregion, 1);
    h.bind = di_xcalloc(m->nchar, sizeof *h.bind);
    h.cvar = di_xcalloc(m->nregion, sizeof *h.cvar);
    h.callee = di_xcalloc(m->nregion, 1);
    di_sha256_once("distir-bad", 10, &h.bad);
    for (ir_id i = 1; i < m->nmesh; i++)
        hash_mesh(m, i, &h.mdig[i]);

    hash_functions(&h);

    list = di_xmalloc(((size_t)m->nmesh + m->nregion) * sizeof *list);
    enc_init(&s);
    put_str(&s, "distir-module");
    put_u64(&s, HASH_VERSION);
    for (ir_id i = 1; i < m->nmesh; i++)
        list[n++] = h.mdig[i];
    qsort(list, n, sizeof *list, cmp_digest);
    put_u64(&s, n);
    for (uint32_t i = 0; i < n; i++)
        put_digest(&s, &list[i]);

    entry = ir_safe_entry(m);
    if (entry != 0 && h.rdone[entry]) {
        di_hash fd;
        put_u64(&s, 1);
        hash_function_digest(&h, entry, &fd);
        put_digest(&s, &fd);
    } else {
        put_u64(&s, 0);
    }
    n = 0;
    for (ir_id r = 1; r < m->nregion; r++)
        if (r != entry && m->regions[r].parent == 0 && h.rdone[r] && !h.callee[r])
            hash_function_digest(&h, r, &list[n++]);
    qsort(list, n, sizeof *list, cmp_digest);
    put_u64(&s, n);
    for (uint32_t i = 0; i < n; i++)
        put_digest(&s, &list[i]);
    enc_final(&s, out);

    di_free(list);
    di_free(h.odig);
    di_free(h.odone);
    di_free(h.tdig);
    di_free(h.tstate);
    di_free(h.tenv);
    di_free(h.mdig);
    di_free(h.rdig);
    di_free(h.rdone);
    di_free(h.visited);
    di_free(h.bind);
    di_free(h.cvar);
    di_free(h.callee);
    di_free(h.stack);
    di_free(h.tstack);
}
