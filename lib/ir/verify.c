/*
 * verify.c: the verifier. It checks that a module is well formed before any
 * pass, the simulator or the cache trusts it: ids in range and back pointers
 * consistent, every value defined once and before its uses in its own region
 * (no implicit capture into pmap bodies), arities and attributes against the
 * op table (ops.h), types well formed (dims, placements that divide the
 * dimensions they split, device variables bound by an enclosing pmap),
 * result types equal to what ir_op_infer computes from the inputs, device
 * ids, device lists and mesh axes sane, and pmap bodies matching their ops.
 * A pmap that calls a function (IR_OPFLAG_CALLEE) is checked like one that
 * owns its body: the function must be a top-level function other than the
 * entry, whose arguments and results agree with the pmap as a body's would;
 * a function that pmaps call may use their device variable (bound as in a
 * body), and calls must not form a cycle.
 *
 * It never trusts the module: the protobuf decoder hands it modules that
 * passed index bounds checks, but every id is checked again before use and
 * shape inference only runs on ops whose inputs, attributes and result ids
 * passed. It is linear in the module's size: "defined" marks and memos are
 * arrays indexed by id, pmap bodies are walked with an explicit stack (no
 * recursion, so deep nesting cannot overflow the C stack) and the only sorts
 * are of function and mesh names.
 *
 * Messages name the function, the op (ir_op_label: `@mlp: MatMul %y: `) and
 * the value; unnamed values show as #ID, their index. For modules parsed from text they start with "LINE:COL: ".
 *
 * Ops that no region lists are garbage left in the arena by a transform; the
 * verifier ignores them, as do the printer and the hash.
 */
#include "ir/ir.h"
#include "ir/safe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Device ids are below 2^20, the size of the bitmap used to find repeats. */
#define DEVICE_LIMIT (1u << 20)
#define SCHEMA_MAX 16

typedef struct schema_entry {
    const char *name; /* points into the op table's attribute string */
    uint32_t len;
    char kind; /* i f s I F m t */
    uint8_t optional;
} schema_entry;

typedef struct schema {
    uint32_t n;
    schema_entry e[SCHEMA_MAX];
} schema;

/* Per-type memo bits. */
enum {
    TYPE_OK = 1,
    TYPE_BAD = 2,
    TYPE_DEVVAR = 4, /* the type, or one of its tuple elements, lives on a device variable */
};

/* One region being checked: a function, or a pmap body. */
typedef struct frame {
    ir_id region;
    ir_id pmap;     /* the op whose body this is; 0 for a function */
    uint32_t next;  /* position of the next op to check */
    ir_id bound;    /* string id of the device variable this body binds, or 0 */
    uint32_t saved; /* the binding of `bound` outside this body */
    int errors;     /* problem count when the pmap op's checks began */
} frame;

/* One type being checked: the type and whether its elements were pushed. */
typedef struct tframe {
    ir_id type;
    uint32_t expanded;
} tframe;

typedef struct verifier {
    ir_module *m;
    ir_diag_fn fn;
    void *ctx;
    int limit;
    int count; /* problems found */
    int stop;
    di_error *first; /* ir_verify's error, or NULL */
    ir_id func;      /* function being checked, for messages */
    uint32_t ntype0; /* types that existed before inference added any */
    int no_infer;    /* some type's lists are out of range: interning could read them */
    int nomem;       /* shape inference ran out of memory: the verdict is unknown */

    uint8_t *defined; /* per value */
    ir_id *listed;    /* per op: the region whose list holds it */
    uint8_t *visited; /* per region */
    uint8_t *tstate;  /* per type: TYPE_* bits */
    uint32_t *tmark;  /* per type: walk stamp for device-variable lookups */
    uint32_t stamp;
    uint32_t *bind;   /* per string id: depth of the innermost pmap body binding it, 0 none */
    uint8_t *mesh_ok; /* per mesh */
    ir_id *cvar;      /* per region: device variable of a function pmaps call (first caller's) */
    uint8_t *callee;  /* per region: a function some pmap calls */
    ir_id entry;      /* the entry function (ir_module_entry's choice), 0 if none */
    uint8_t *devbits; /* DEVICE_LIMIT bits, all clear between uses */

    frame *stack;
    uint32_t nstack, cstack;
    tframe *tstack;
    uint32_t ntstack, ctstack;
    ir_id *walk;
    uint32_t nwalk, cwalk;
    ir_id *out; /* inferred result types */
    uint32_t cout;

    char vn[128]; /* scratch for value labels in messages */
    schema schemas[IR_NOPKIND];
} verifier;

/* ---- strings and names for messages ---- */

static void
value_label(const ir_module *m, ir_id v, char *buf, size_t n)
{
    if (v != 0 && v < m->nvalue && m->values[v].name != 0 && m->values[v].name < m->nchar)
        snprintf(buf, n, "%%%s", m->chars + m->values[v].name);
    else
        snprintf(buf, n, "#%u", v);
}

/* The label of v in vf's scratch buffer, for one message at a time. */
static const char *
vname(verifier *vf, ir_id v)
{
    value_label(vf->m, v, vf->vn, sizeof vf->vn);
    return vf->vn;
}

/* A bounded string appender for messages. */
typedef struct sbuf {
    char *p;
    size_t cap;
    size_t len;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void
sb_printf(sbuf *b, const char *fmt, ...)
{
    va_list ap;
    int n;
    if (b->len + 1 >= b->cap)
        return;
    va_start(ap, fmt);
    n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    if (n > 0)
        b->len = (b->len + (size_t)n < b->cap) ? b->len + (size_t)n : b->cap - 1;
}

static void
print_type(const ir_module *m, ir_id t, sbuf *b, int depth)
{
    const ir_type *ty;
    if (t == 0 || t >= m->ntype) {
        sb_printf(b, "<no type %u>", t);
        return;
    }
    ty = &m->types[t];
    if (ty->kind == IR_TYPE_TUPLE) {
        sb_printf(b, "tuple<");
        if (!ir_safe_slice(ty->elems, ty->nelem, m->nref) || depth > 3) {
            sb_printf(b, "...>");
            return;
        }
        for (uint32_t i = 0; i < ty->nelem; i++) {
            if (i == 8) {
                sb_printf(b, ", ... %u in all", ty->nelem);
                break;
            }
            if (i)
                sb_printf(b, ", ");
            print_type(m, m->refs[ty->elems + i], b, depth + 1);
        }
        sb_printf(b, ">");
        return;
    }
    if (ty->kind != IR_TYPE_TENSOR) {
        sb_printf(b, "<type %u of kind %u>", t, ty->kind);
        return;
    }
    sb_printf(b, ty->mesh != 0 ? "!dist.dtensor<" : "!dist.tensor<");
    if (ty->rank <= IR_MAX_RANK && ir_safe_slice(ty->dims, ty->rank, m->nint))
        for (uint32_t i = 0; i < ty->rank; i++)
            sb_printf(b, "%lldx", (long long)m->ints[ty->dims + i]);
    else
        sb_printf(b, "?x");
    sb_printf(b, "%s", ir_dtype_name((ir_dtype)ty->dtype));
    if (ty->mesh != 0 && ty->mesh < m->nmesh) {
        const ir_mesh *me = &m->meshes[ty->mesh];
        sb_printf(b, ", @%s, [", ir_safe_str(m, me->name));
        if (me->rank <= IR_MAX_RANK && ir_safe_slice(ty->placements, me->rank, m->nint)) {
            for (uint32_t a = 0; a < me->rank; a++) {
                int64_t p = m->ints[ty->placements + a];
                if (a)
                    sb_printf(b, ", ");
                if (p == IR_PLACE_R)
                    sb_printf(b, "R");
                else if (p == IR_PLACE_PSUM)
                    sb_printf(b, "P(sum)");
                else if (p == IR_PLACE_PMAX)
                    sb_printf(b, "P(max)");
                else if (p >= 0)
                    sb_printf(b, "S[%lld]", (long long)p);
                else
                    sb_printf(b, "?%lld", (long long)p);
            }
        }
        sb_printf(b, "]");
    } else if (ty->mesh != 0) {
        sb_printf(b, ", @<mesh %u>, []", ty->mesh);
    } else if (ty->devvar != 0) {
        sb_printf(b, ", %s", ir_safe_str(m, ty->devvar));
    } else if (ty->device != IR_DEVICE_NONE) {
        sb_printf(b, ", %d", ty->device);
    }
    sb_printf(b, ">");
}

/* Writes a type for a message; never reads outside the module's arrays. */
static const char *
type_text(const ir_module *m, ir_id t, char *buf, size_t n)
{
    sbuf b = {buf, n, 0};
    buf[0] = '\0';
    print_type(m, t, &b, 0);
    return buf;
}

/* ---- reporting ---- */

static void report(verifier *vf, ir_id op, ir_id value, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/*
 * Reports one problem about op (0: none) and value (0: none; used for the
 * position when the op has none). The message is prefixed with the position,
 * the function and the op.
 */
static void
report(verifier *vf, ir_id op, ir_id value, const char *fmt, ...)
{
    const ir_module *m = vf->m;
    char body[768], where[256];
    sbuf w = {where, sizeof where, 0};
    uint32_t line = 0, column = 0;
    di_error e;
    va_list ap;

    if (vf->stop)
        return;
    va_start(ap, fmt);
    vsnprintf(body, sizeof body, fmt, ap);
    va_end(ap);
    where[0] = '\0';
    if (op != 0 && op < m->nop && m->oplocs != NULL && m->oplocs[op].line != 0) {
        line = m->oplocs[op].line;
        column = m->oplocs[op].column;
    } else if (value != 0 && value < m->nvalue && m->valuelocs != NULL &&
               m->valuelocs[value].line != 0) {
        line = m->valuelocs[value].line;
        column = m->valuelocs[value].column;
    }
    if (vf->func != 0)
        sb_printf(&w, "@%s: ", ir_safe_str(m, m->regions[vf->func].name));
    if (op != 0 && op < m->nop)
        sb_printf(&w, "%s: ", ir_op_label(m, op).s);
    di_error_clear(&e);
    if (line != 0)
        di_error_at(&e, DI_EVERIFY, line, column, "%s%s", where, body);
    else
        di_error_set(&e, DI_EVERIFY, "%s%s", where, body);
    vf->count++;
    if (vf->fn != NULL)
        vf->fn(vf->ctx, &e);
    if (vf->first != NULL && vf->count == 1)
        *vf->first = e;
    if (vf->limit > 0 && vf->count >= vf->limit)
        vf->stop = 1;
}

/* ---- the attribute schemas of ops.h ---- */

static void
parse_schemas(verifier *vf)
{
    for (int k = 1; k < IR_NOPKIND; k++) {
        const char *s = ir_opinfos[k].attrs;
        schema *sc = &vf->schemas[k];
        sc->n = 0;
        while (s != NULL && *s != '\0') {
            const char *start;
            schema_entry e;
            while (*s == ' ')
                s++;
            if (*s == '\0')
                break;
            start = s;
            while (*s != '\0' && *s != ':' && *s != ' ')
                s++;
            if (*s != ':' || s[1] == '\0' || sc->n == SCHEMA_MAX)
                abort(); /* a malformed op table is a broken invariant */
            e.name = start;
            e.len = (uint32_t)(s - start);
            e.kind = s[1];
            s += 2;
            e.optional = 0;
            if (*s == '?') {
                e.optional = 1;
                s++;
            }
            sc->e[sc->n++] = e;
        }
    }
}

static const char *
attr_kind_name(uint32_t kind)
{
    static const char *const names[] = {"none", "int",    "float", "string",
                                        "ints", "floats", "mesh",  "tensor"};
    return kind < sizeof names / sizeof names[0] ? names[kind] : "unknown";
}

static const char *
schema_kind_name(char k)
{
    switch (k) {
    case 'i':
        return "an int";
    case 'f':
        return "a float";
    case 's':
        return "a string";
    case 'I':
        return "a list of ints";
    case 'F':
        return "a list of floats";
    case 'm':
        return "a mesh";
    case 't':
        return "a tensor";
    default:
        return "unknown";
    }
}

/* An int is acceptable where a float is expected, and ints where floats are. */
static int
schema_kind_matches(char k, uint32_t kind)
{
    switch (k) {
    case 'i':
        return kind == IR_ATTR_INT;
    case 'f':
        return kind == IR_ATTR_FLOAT || kind == IR_ATTR_INT;
    case 's':
        return kind == IR_ATTR_STRING;
    case 'I':
        return kind == IR_ATTR_INTS;
    case 'F':
        return kind == IR_ATTR_FLOATS || kind == IR_ATTR_INTS;
    case 'm':
        return kind == IR_ATTR_MESH;
    case 't':
        return kind == IR_ATTR_TENSOR;
    default:
        return 0;
    }
}

/*
 * An attribute of op by key whose value passed the bounds checks of
 * check_attrs (the caller checks the kind), or NULL.
 */
static const ir_attr *
find_attr(const ir_module *m, ir_id op, const char *key)
{
    const ir_op *o = &m->ops[op];
    for (uint32_t i = 0; i < o->nattr; i++) {
        const ir_attr *a = &m->attrs[o->attrs + i];
        if (a->key != 0 && a->key < m->nchar && strcmp(m->chars + a->key, key) == 0)
            return a;
    }
    return NULL;
}

static const ir_attr *
find_attr_kind(const ir_module *m, ir_id op, const char *key, uint32_t kind)
{
    const ir_attr *a = find_attr(m, op, key);
    if (a == NULL || a->kind != kind)
        return NULL;
    if (kind == IR_ATTR_INTS && !ir_safe_slice(a->off, a->n, m->nint))
        return NULL;
    if (kind == IR_ATTR_MESH && (a->s == 0 || a->s >= m->nmesh))
        return NULL;
    if (kind == IR_ATTR_STRING && a->s >= m->nchar)
        return NULL;
    return a;
}

/* ---- types ---- */

static uint32_t mesh_rank(const ir_module *m, ir_id mesh);

/*
 * Checks t's own fields, and for a tuple the ids of its elements (each must
 * be an earlier type, which rules out cycles). Returns 0 or -1 with a reason.
 */
static int
type_local(const verifier *vf, ir_id t, char *why, size_t n)
{
    const ir_module *m = vf->m;
    const ir_type *ty = &m->types[t];
    if (ty->kind == IR_TYPE_TUPLE) {
        if (!ir_safe_slice(ty->elems, ty->nelem, m->nref)) {
            snprintf(why, n, "tuple elements out of range");
            return -1;
        }
        for (uint32_t i = 0; i < ty->nelem; i++) {
            ir_id e = m->refs[ty->elems + i];
            if (e == 0 || e >= t) {
                snprintf(why, n, "tuple element %u refers to type %u, not an earlier type", i, e);
                return -1;
            }
        }
        return 0;
    }
    if (ty->kind != IR_TYPE_TENSOR) {
        snprintf(why, n, "unknown type kind %u", ty->kind);
        return -1;
    }
    if (ty->dtype == IR_DTYPE_NONE || ty->dtype >= IR_NDTYPE) {
        snprintf(why, n, "unknown dtype %u", ty->dtype);
        return -1;
    }
    if (ty->rank > IR_MAX_RANK) {
        snprintf(why, n, "rank %u exceeds %d", ty->rank, IR_MAX_RANK);
        return -1;
    }
    if (!ir_safe_slice(ty->dims, ty->rank, m->nint)) {
        snprintf(why, n, "dimensions out of range");
        return -1;
    }
    for (uint32_t d = 0; d < ty->rank; d++) {
        if (m->ints[ty->dims + d] < 0) {
            snprintf(why, n, "dimension %u is %lld", d, (long long)m->ints[ty->dims + d]);
            return -1;
        }
    }
    if ((ty->device != IR_DEVICE_NONE) + (ty->devvar != 0) + (ty->mesh != 0) > 1) {
        snprintf(why, n, "it lives in more than one place (device, device variable, mesh)");
        return -1;
    }
    if (ty->device != IR_DEVICE_NONE && (ty->device < 0 || (uint32_t)ty->device >= DEVICE_LIMIT)) {
        snprintf(why, n, "device %d is not a device id (0 to 2^20-1)", ty->device);
        return -1;
    }
    if (ty->devvar != 0 && ty->devvar >= m->nchar) {
        snprintf(why, n, "device variable id %u out of range", ty->devvar);
        return -1;
    }
    if (ty->mesh != 0) {
        uint64_t split[IR_MAX_RANK];
        const int64_t *pl, *shape;
        uint32_t rank;
        if (ty->mesh >= m->nmesh) {
            snprintf(why, n, "mesh %u does not exist (the module has %u)", ty->mesh, m->nmesh - 1);
            return -1;
        }
        if (!vf->mesh_ok[ty->mesh]) {
            snprintf(why, n, "its mesh @%s is invalid", ir_safe_str(m, m->meshes[ty->mesh].name));
            return -1;
        }
        rank = mesh_rank(m, ty->mesh);
        if (!ir_safe_slice(ty->placements, rank, m->nint)) {
            snprintf(why, n, "placements out of range");
            return -1;
        }
        pl = m->ints + ty->placements;
        shape = m->ints + m->meshes[ty->mesh].shape;
        for (uint32_t d = 0; d < IR_MAX_RANK; d++)
            split[d] = 1;
        for (uint32_t a = 0; a < rank; a++) {
            if (IR_PLACE_IS_SPLIT(pl[a])) {
                if (pl[a] >= ty->rank) {
                    snprintf(why, n, "mesh axis %u splits dimension %lld of a rank-%u tensor", a,
                             (long long)pl[a], ty->rank);
                    return -1;
                }
                split[pl[a]] *= (uint64_t)shape[a]; /* mesh sizes multiply to at most 2^20 */
            } else if (pl[a] != IR_PLACE_R && pl[a] != IR_PLACE_PSUM && pl[a] != IR_PLACE_PMAX) {
                snprintf(why, n, "placement %lld on mesh axis %u is invalid", (long long)pl[a], a);
                return -1;
            }
        }
        for (uint32_t d = 0; d < ty->rank; d++) {
            int64_t dim = m->ints[ty->dims + d];
            if (split[d] > 1 && (uint64_t)dim % split[d] != 0) {
                snprintf(why, n,
                         "dimension %u (%lld) is not divisible by %llu, the number of devices "
                         "splitting it",
                         d, (long long)dim, (unsigned long long)split[d]);
                return -1;
            }
        }
    }
    return 0;
}

static uint32_t
mesh_rank(const ir_module *m, ir_id mesh)
{
    return m->meshes[mesh].rank;
}

static void
push_tframe(verifier *vf, ir_id t)
{
    DI_GROW(&vf->tstack, &vf->ctstack, vf->ntstack + 1);
    vf->tstack[vf->ntstack].type = t;
    vf->tstack[vf->ntstack].expanded = 0;
    vf->ntstack++;
}

/*
 * The TYPE_* state of an existing type id (< ntype0), computed once per type
 * with an explicit stack: a tuple is valid when its own fields and all its
 * elements are.
 */
static uint8_t
type_state(verifier *vf, ir_id t)
{
    const ir_module *m = vf->m;
    char why[8];
    if (vf->tstate[t] != 0)
        return vf->tstate[t];
    vf->ntstack = 0;
    push_tframe(vf, t);
    while (vf->ntstack > 0) {
        tframe *f = &vf->tstack[vf->ntstack - 1];
        ir_id x = f->type;
        const ir_type *ty = &m->types[x];
        if (vf->tstate[x] != 0) {
            vf->ntstack--;
            continue;
        }
        if (type_local(vf, x, why, sizeof why) != 0) {
            vf->tstate[x] = TYPE_BAD;
            vf->ntstack--;
            continue;
        }
        if (ty->kind == IR_TYPE_TENSOR) {
            vf->tstate[x] = TYPE_OK | (ty->devvar != 0 ? TYPE_DEVVAR : 0);
            vf->ntstack--;
            continue;
        }
        if (!f->expanded) {
            uint32_t nelem = ty->nelem, elems = ty->elems;
            f->expanded = 1;
            for (uint32_t i = 0; i < nelem; i++) {
                ir_id e = m->refs[elems + i];
                if (vf->tstate[e] == 0)
                    push_tframe(vf, e); /* may move the stack; f is not used again */
            }
            continue;
        }
        {
            uint8_t st = TYPE_OK;
            for (uint32_t i = 0; i < ty->nelem; i++) {
                uint8_t es = vf->tstate[m->refs[ty->elems + i]];
                if (es & TYPE_BAD)
                    st = TYPE_BAD;
                if (es & TYPE_DEVVAR)
                    st |= TYPE_DEVVAR;
            }
            vf->tstate[x] = (st & TYPE_BAD) ? TYPE_BAD : st;
            vf->ntstack--;
        }
    }
    return vf->tstate[t];
}

/* Explains why type t (whose state is TYPE_BAD) is invalid: the path to the first bad part. */
static void
type_reason(verifier *vf, ir_id t, char *why, size_t n)
{
    const ir_module *m = vf->m;
    sbuf b = {why, n, 0};
    char local[256];
    why[0] = '\0';
    for (int steps = 0; steps < 64; steps++) {
        const ir_type *ty = &m->types[t];
        ir_id next = 0;
        if (type_local(vf, t, local, sizeof local) != 0) {
            sb_printf(&b, "%s", local);
            return;
        }
        if (ty->kind != IR_TYPE_TUPLE)
            break;
        for (uint32_t i = 0; i < ty->nelem; i++) {
            ir_id e = m->refs[ty->elems + i];
            if (vf->tstate[e] & TYPE_BAD) {
                sb_printf(&b, "tuple element %u: ", i);
                next = e;
                break;
            }
        }
        if (next == 0)
            break;
        t = next;
    }
    sb_printf(&b, "invalid");
}

/* The first device variable in type t (state TYPE_DEVVAR) that no enclosing pmap binds, or 0. */
static ir_id
unbound_devvar(verifier *vf, ir_id t)
{
    const ir_module *m = vf->m;
    if (++vf->stamp == 0) {
        memset(vf->tmark, 0, vf->ntype0 * sizeof *vf->tmark);
        vf->stamp = 1;
    }
    vf->nwalk = 0;
    DI_GROW(&vf->walk, &vf->cwalk, 1);
    vf->walk[vf->nwalk++] = t;
    vf->tmark[t] = vf->stamp;
    while (vf->nwalk > 0) {
        ir_id x = vf->walk[--vf->nwalk];
        const ir_type *ty = &m->types[x];
        if (ty->kind == IR_TYPE_TENSOR) {
            if (ty->devvar != 0 && vf->bind[ty->devvar] == 0)
                return ty->devvar;
            continue;
        }
        for (uint32_t i = 0; i < ty->nelem; i++) {
            ir_id e = m->refs[ty->elems + i];
            if ((vf->tstate[e] & TYPE_DEVVAR) && vf->tmark[e] != vf->stamp) {
                vf->tmark[e] = vf->stamp;
                DI_GROW(&vf->walk, &vf->cwalk, vf->nwalk + 1);
                vf->walk[vf->nwalk++] = e;
            }
        }
    }
    return 0;
}

/* check_value_type's slow path, which explains the problem. */
static int
check_value_type_slow(verifier *vf, ir_id op, ir_id v, const char *what)
{
    const ir_module *m = vf->m;
    char why[512];
    ir_id t = m->values[v].type, var;
    uint8_t st;
    if (t == 0) {
        report(vf, op, v, "%s (%s) has no type", what, vname(vf, v));
        return 0;
    }
    if (t >= vf->ntype0) {
        report(vf, op, v, "%s (%s) has type id %u, out of range", what, vname(vf, v), t);
        return 0;
    }
    st = type_state(vf, t);
    if (st & TYPE_BAD) {
        type_reason(vf, t, why, sizeof why);
        report(vf, op, v, "%s (%s) has an invalid type: %s", what, vname(vf, v), why);
        return 0;
    }
    if (m->values[v].init != 0) {
        uint32_t i = m->values[v].init;
        if (i >= m->ninit || m->inits[i].off > m->ndata ||
            m->inits[i].len > m->ndata - m->inits[i].off) {
            report(vf, op, v, "%s (%s): initializer %u out of range", what, vname(vf, v), i);
            return 0;
        }
        if (m->types[t].kind != IR_TYPE_TENSOR || m->inits[i].len != ir_type_bytes(m, t)) {
            char tt[256];
            report(vf, op, v,
                   "%s (%s) has %zu bytes of initializer data but its type %s needs %llu", what,
                   vname(vf, v), m->inits[i].len, type_text(m, t, tt, sizeof tt),
                   (unsigned long long)ir_type_bytes(m, t));
            return 0;
        }
    }
    if ((st & TYPE_DEVVAR) && (var = unbound_devvar(vf, t)) != 0) {
        char tt[256];
        report(vf, op, v,
               "%s (%s) has type %s on device variable %s, which no enclosing dist.pmap binds",
               what, vname(vf, v), type_text(m, t, tt, sizeof tt), ir_safe_str(m, var));
        return 0;
    }
    return 1;
}

/*
 * Checks the type of value v (an argument or a result), described as "word
 * index" ("result 0") in messages about op. Returns 1 if it is valid here.
 * Messages are only formatted when there is a problem.
 */
static int
check_value_type(verifier *vf, ir_id op, ir_id v, const char *word, uint32_t index)
{
    const ir_module *m = vf->m;
    ir_id t = m->values[v].type;
    char what[64];
    if (m->values[v].name >= m->nchar) {
        report(vf, op, v, "%s %u: name id %u out of range", word, index, m->values[v].name);
        return 0;
    }
    if (t != 0 && t < vf->ntype0 && m->values[v].init == 0 && type_state(vf, t) == TYPE_OK)
        return 1;
    snprintf(what, sizeof what, "%s %u", word, index);
    return check_value_type_slow(vf, op, v, what);
}

/* Is v's type already known to be valid? (Inputs were checked when they were defined.) */
static int
value_type_ok(const verifier *vf, ir_id v)
{
    ir_id t = vf->m->values[v].type;
    return t != 0 && t < vf->ntype0 && (vf->tstate[t] & TYPE_OK);
}

/* ---- meshes, regions, functions: module-wide checks ---- */

static int
cmp_str_ptr(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Reports the first repeated name among n; `what` names the kind of thing. */
static void
check_unique_names(verifier *vf, const char **names, uint32_t n, const char *what)
{
    qsort(names, n, sizeof *names, cmp_str_ptr);
    /* Report each duplicated name once: at its second occurrence. */
    for (uint32_t i = 1; i < n; i++) {
        int first_dup = strcmp(names[i - 1], names[i]) == 0;
        if (first_dup && i >= 2 && strcmp(names[i - 2], names[i]) == 0)
            first_dup = 0;
        if (first_dup)
            report(vf, 0, 0, "two %s are named @%s", what, names[i]);
    }
}

/* Checks ids against the device bitmap; clears the bits it set. Returns 1 if all distinct. */
static int
devices_distinct(verifier *vf, const int64_t *ids, uint32_t n, int64_t *dup)
{
    int ok = 1;
    uint32_t i;
    for (i = 0; i < n; i++) {
        uint32_t d = (uint32_t)ids[i]; /* callers check the range first */
        if (vf->devbits[d >> 3] & (1u << (d & 7))) {
            ok = 0;
            *dup = ids[i];
            break;
        }
        vf->devbits[d >> 3] |= (uint8_t)(1u << (d & 7));
    }
    for (uint32_t j = 0; j < i; j++) {
        uint32_t d = (uint32_t)ids[j];
        vf->devbits[d >> 3] &= (uint8_t) ~(1u << (d & 7));
    }
    return ok;
}

static void
check_meshes(verifier *vf)
{
    const ir_module *m = vf->m;
    const char **names = di_xmalloc((m->nmesh + 1) * sizeof *names);
    uint32_t nnames = 0;
    for (ir_id i = 1; i < m->nmesh && !vf->stop; i++) {
        const ir_mesh *me = &m->meshes[i];
        const char *name = ir_safe_str(m, me->name);
        uint64_t n = 1;
        int64_t dup;
        int ok = 1;
        if (me->name >= m->nchar) {
            report(vf, 0, 0, "mesh %u has an invalid name", i);
            continue;
        }
        if (*name != '\0')
            names[nnames++] = name;
        if (me->rank == 0 || me->rank > IR_MAX_RANK) {
            report(vf, 0, 0, "mesh @%s has rank %u, not 1 to %d", name, me->rank, IR_MAX_RANK);
            continue;
        }
        if (!ir_safe_slice(me->shape, me->rank, m->nint)) {
            report(vf, 0, 0, "mesh @%s: shape out of range", name);
            continue;
        }
        for (uint32_t a = 0; a < me->rank && ok; a++) {
            int64_t s = m->ints[me->shape + a];
            if (s < 1 || s > (int64_t)DEVICE_LIMIT) {
                report(vf, 0, 0, "mesh @%s: axis %u has size %lld", name, a, (long long)s);
                ok = 0;
            } else if ((n *= (uint64_t)s) > DEVICE_LIMIT) {
                report(vf, 0, 0, "mesh @%s has more than 2^20 devices", name);
                ok = 0;
            }
        }
        if (!ok)
            continue;
        if (me->ndevice != n) {
            report(vf, 0, 0, "mesh @%s lists %u devices but its shape holds %llu", name,
                   me->ndevice, (unsigned long long)n);
            continue;
        }
        if (!ir_safe_slice(me->devices, me->ndevice, m->nint)) {
            report(vf, 0, 0, "mesh @%s: devices out of range", name);
            continue;
        }
        for (uint32_t d = 0; d < me->ndevice && ok; d++) {
            int64_t id = m->ints[me->devices + d];
            if (id < 0 || id >= (int64_t)DEVICE_LIMIT) {
                report(vf, 0, 0, "mesh @%s: device %lld is not a device id (0 to 2^20-1)", name,
                       (long long)id);
                ok = 0;
            }
        }
        if (ok && !devices_distinct(vf, m->ints + me->devices, me->ndevice, &dup)) {
            report(vf, 0, 0, "mesh @%s lists device %lld twice", name, (long long)dup);
            ok = 0;
        }
        vf->mesh_ok[i] = (uint8_t)ok;
    }
    check_unique_names(vf, names, nnames, "meshes");
    di_free(names);
}

/*
 * Shape inference interns types, and interning compares a new type with
 * existing ones and rehashes them all when its table grows, reading each
 * type's lists. So before any inference runs, every type in the module (used
 * or not) must have its lists in range, and the intern table only valid ids.
 */
static void
check_type_lists(verifier *vf)
{
    const ir_module *m = vf->m;
    for (ir_id t = 1; t < m->ntype && !vf->stop; t++) {
        const ir_type *ty = &m->types[t];
        int ok;
        if (ty->kind == IR_TYPE_TENSOR)
            ok =
                ir_safe_slice(ty->dims, ty->rank, m->nint) &&
                (ty->mesh == 0 || (ty->mesh < m->nmesh &&
                                   ir_safe_slice(ty->placements, m->meshes[ty->mesh].rank, m->nint)));
        else
            ok = ir_safe_slice(ty->elems, ty->nelem, m->nref);
        if (!ok) {
            report(vf, 0, 0, "type %u is malformed: its lists are out of range", t);
            vf->no_infer = 1;
        }
    }
    if (m->typetab != NULL)
        for (uint32_t i = 0; i < m->ctypetab && !vf->no_infer; i++)
            if ((uint32_t)m->typetab[i] >= m->ntype) {
                report(vf, 0, 0, "the type intern table holds type id %u",
                       (uint32_t)m->typetab[i]);
                vf->no_infer = 1;
            }
}

static int
region_lists_ok(const ir_region *reg)
{
    return !(reg->nop != 0 && reg->ops == NULL) && !(reg->narg != 0 && reg->args == NULL) &&
           !(reg->nresult != 0 && reg->results == NULL);
}

/*
 * Back pointers between bodies and their ops, the region of each listed op,
 * and function names.
 */
static void
check_regions(verifier *vf)
{
    const ir_module *m = vf->m;
    const char **names = di_xmalloc((m->nregion + 1) * sizeof *names);
    uint32_t nnames = 0;
    for (ir_id r = 1; r < m->nregion && !vf->stop; r++) {
        const ir_region *reg = &m->regions[r];
        if (!region_lists_ok(reg)) {
            report(vf, 0, 0, "region %u has a count without a list", r);
            continue;
        }
        if (reg->parent != 0) {
            if (reg->parent >= m->nop)
                report(vf, 0, 0, "region %u: its parent op %u does not exist", r, reg->parent);
            else if (m->ops[reg->parent].body != r)
                report(vf, reg->parent, 0,
                       "region %u names this op as its parent, but the op's body is region %u", r,
                       m->ops[reg->parent].body);
        } else if (reg->name == 0 || reg->name >= m->nchar || m->chars[reg->name] == '\0') {
            report(vf, 0, 0, "region %u is a top-level function with no name", r);
        } else {
            names[nnames++] = m->chars + reg->name;
        }
        for (uint32_t i = 0; i < reg->nop; i++) {
            ir_id op = reg->ops[i];
            if (op == 0 || op >= m->nop) {
                report(vf, 0, 0, "region %u: op id %u at position %u does not exist", r, op, i);
            } else if (vf->listed[op] != 0) {
                report(vf, op, 0, "op is listed in region %u and again in region %u",
                       vf->listed[op], r);
            } else {
                vf->listed[op] = r;
                if (m->ops[op].region != r)
                    report(vf, op, 0, "op is listed in region %u but records region %u", r,
                           m->ops[op].region);
            }
        }
    }
    check_unique_names(vf, names, nnames, "functions");
    di_free(names);
}

/* ---- ops ---- */

static void
check_attr_value(verifier *vf, ir_id op, const ir_attr *a, const char *key)
{
    const ir_module *m = vf->m;
    switch (a->kind) {
    case IR_ATTR_INT:
    case IR_ATTR_FLOAT:
        break;
    case IR_ATTR_STRING:
        if (a->s >= m->nchar)
            report(vf, op, 0, "attribute '%s': string id %u out of range", key, a->s);
        break;
    case IR_ATTR_INTS:
        if (!ir_safe_slice(a->off, a->n, m->nint))
            report(vf, op, 0, "attribute '%s': list out of range", key);
        break;
    case IR_ATTR_FLOATS:
        if (!ir_safe_slice(a->off, a->n, m->nfloat))
            report(vf, op, 0, "attribute '%s': list out of range", key);
        break;
    case IR_ATTR_MESH:
        if (a->s == 0 || a->s >= m->nmesh)
            report(vf, op, 0, "attribute '%s' refers to mesh %u but the module has %u meshes", key,
                   a->s, m->nmesh - 1);
        else if (!vf->mesh_ok[a->s]) /* shape inference must never see a bad mesh */
            report(vf, op, 0, "attribute '%s' refers to the invalid mesh @%s", key,
                   ir_safe_str(m, m->meshes[a->s].name));
        break;
    case IR_ATTR_TENSOR: {
        char why[512];
        if (a->i <= 0 || a->i >= (int64_t)vf->ntype0) {
            report(vf, op, 0, "attribute '%s': type id %lld out of range", key, (long long)a->i);
        } else if (type_state(vf, (ir_id)a->i) & TYPE_BAD) {
            type_reason(vf, (ir_id)a->i, why, sizeof why);
            report(vf, op, 0, "attribute '%s' has an invalid type: %s", key, why);
        } else if (m->types[a->i].kind != IR_TYPE_TENSOR) {
            report(vf, op, 0, "attribute '%s' has a tuple type", key);
        } else if (!ir_safe_slice(a->off, a->n, m->ndata)) {
            report(vf, op, 0, "attribute '%s': data out of range", key);
        } else if (a->n != 0 && a->n != ir_type_bytes(m, (ir_id)a->i)) {
            /* No bytes at all is a constant known only by its type. */
            char tt[256];
            report(vf, op, 0, "attribute '%s' holds %u bytes but its type %s needs %llu", key, a->n,
                   type_text(m, (ir_id)a->i, tt, sizeof tt),
                   (unsigned long long)ir_type_bytes(m, (ir_id)a->i));
        }
        break;
    }
    default:
        report(vf, op, 0, "attribute '%s' has unknown kind %u", key, a->kind);
        break;
    }
}

/*
 * Attributes against the op's schema: each known, of the right kind, given
 * once, required ones present. Opaque ops carry their ONNX node's attributes,
 * so only op_type is checked on them.
 */
static void
check_attrs(verifier *vf, ir_id op)
{
    const ir_module *m = vf->m;
    const ir_op *o = &m->ops[op];
    const schema *sc = &vf->schemas[o->kind];
    uint32_t seen = 0;
    for (uint32_t i = 0; i < o->nattr; i++) {
        const ir_attr *a = &m->attrs[o->attrs + i];
        const char *key;
        uint32_t j, len;
        if (a->key == 0 || a->key >= m->nchar) {
            report(vf, op, 0, "attribute %u has an invalid key", i);
            continue;
        }
        key = m->chars + a->key;
        len = (uint32_t)strlen(key);
        for (j = 0; j < sc->n; j++)
            if (sc->e[j].len == len && memcmp(sc->e[j].name, key, len) == 0)
                break;
        if (j == sc->n) {
            /*
             * Keys with a dialect prefix ("dist.layer") are discardable
             * annotations, as in MLIR: checked for well-formed values only.
             */
            if (o->kind == IR_OP_OPAQUE || memchr(key, '.', len) != NULL)
                check_attr_value(vf, op, a, key);
            else
                report(vf, op, 0, "unknown attribute '%s'", key);
            continue;
        }
        if (seen & (1u << j)) {
            report(vf, op, 0, "attribute '%s' is given twice", key);
            continue;
        }
        seen |= 1u << j;
        if (!schema_kind_matches(sc->e[j].kind, a->kind)) {
            report(vf, op, 0, "attribute '%s' should be %s but is a %s", key,
                   schema_kind_name(sc->e[j].kind), attr_kind_name(a->kind));
            continue;
        }
        check_attr_value(vf, op, a, key);
    }
    for (uint32_t j = 0; j < sc->n; j++)
        if (!sc->e[j].optional && !(seen & (1u << j)))
            report(vf, op, 0, "missing attribute '%.*s'", (int)sc->e[j].len, sc->e[j].name);
}

/* Checks that the tensors of a tuple-typed value sit on distinct devices. */
static void
check_tuple_devices(verifier *vf, ir_id op, ir_id v, const char *word, uint32_t index)
{
    const ir_module *m = vf->m;
    const ir_type *ty = &m->types[m->values[v].type];
    uint32_t i;
    int64_t dup = -1;
    if (ty->kind != IR_TYPE_TUPLE)
        return;
    for (i = 0; i < ty->nelem; i++) {
        const ir_type *e = &m->types[m->refs[ty->elems + i]];
        uint32_t d;
        if (e->kind != IR_TYPE_TENSOR || e->device == IR_DEVICE_NONE)
            continue;
        d = (uint32_t)e->device; /* in range: the type is valid */
        if (vf->devbits[d >> 3] & (1u << (d & 7))) {
            dup = e->device;
            break;
        }
        vf->devbits[d >> 3] |= (uint8_t)(1u << (d & 7));
    }
    for (uint32_t j = 0; j < i; j++) {
        const ir_type *e = &m->types[m->refs[ty->elems + j]];
        if (e->kind == IR_TYPE_TENSOR && e->device != IR_DEVICE_NONE)
            vf->devbits[(uint32_t)e->device >> 3] &= (uint8_t) ~(1u << ((uint32_t)e->device & 7));
    }
    if (dup >= 0) {
        report(vf, op, v, "%s %u (%s) has two elements on device %lld", word, index, vname(vf, v),
               (long long)dup);
    }
}

/* Device lists, device ids, mesh axes, pmap widths and tuple placements. */
static void
check_devices(verifier *vf, ir_id op)
{
    const ir_module *m = vf->m;
    const ir_op *o = &m->ops[op];
    uint32_t flags = ir_opinfos[o->kind].flags;
    const ir_attr *devs = find_attr_kind(m, op, "devices", IR_ATTR_INTS);
    const ir_attr *dev = find_attr_kind(m, op, "device", IR_ATTR_INT);
    const ir_attr *axes = find_attr_kind(m, op, "mesh_axes", IR_ATTR_INTS);
    const ir_attr *mesh = find_attr_kind(m, op, "mesh", IR_ATTR_MESH);
    int devs_ok = 0;

    if (devs != NULL) {
        const int64_t *ids = m->ints + devs->off;
        int64_t dup;
        devs_ok = 1;
        if (devs->n == 0) {
            report(vf, op, 0, "attribute 'devices' is empty");
            devs_ok = 0;
        }
        for (uint32_t i = 0; i < devs->n && devs_ok; i++) {
            if (ids[i] < 0 || ids[i] >= (int64_t)DEVICE_LIMIT) {
                report(vf, op, 0, "devices[%u] = %lld is not a device id (0 to 2^20-1)", i,
                       (long long)ids[i]);
                devs_ok = 0;
            }
        }
        if (devs_ok && !devices_distinct(vf, ids, devs->n, &dup)) {
            report(vf, op, 0, "attribute 'devices' lists device %lld twice", (long long)dup);
            devs_ok = 0;
        }
    }
    if (dev != NULL && (dev->i < 0 || dev->i >= (int64_t)DEVICE_LIMIT))
        report(vf, op, 0, "attribute 'device' = %lld is not a device id (0 to 2^20-1)",
               (long long)dev->i);
    if (axes != NULL) {
        if (mesh == NULL) {
            report(vf, op, 0, "attribute 'mesh_axes' needs a 'mesh'");
        } else if (vf->mesh_ok[mesh->s]) {
            uint32_t rank = m->meshes[mesh->s].rank, used = 0;
            const int64_t *ax = m->ints + axes->off;
            for (uint32_t i = 0; i < axes->n; i++) {
                if (ax[i] < 0 || ax[i] >= (int64_t)rank) {
                    report(vf, op, 0, "mesh_axes[%u] = %lld is not an axis of @%s (rank %u)", i,
                           (long long)ax[i], ir_safe_str(m, m->meshes[mesh->s].name), rank);
                    break;
                }
                if (used & (1u << ax[i])) {
                    report(vf, op, 0, "mesh axis %lld appears twice in 'mesh_axes'",
                           (long long)ax[i]);
                    break;
                }
                used |= 1u << ax[i];
            }
        }
    }
    if (o->kind == IR_OP_PMAP) {
        uint32_t ndev = 0;
        int known = 0;
        if (devs != NULL) {
            ndev = devs->n;
            known = devs_ok;
        } else if (mesh != NULL) {
            ndev = m->meshes[mesh->s].ndevice;
            known = vf->mesh_ok[mesh->s];
        } else {
            report(vf, op, 0, "dist.pmap needs 'devices' or 'mesh'");
        }
        for (uint32_t i = 0; known && i < o->ninput; i++) {
            ir_id v = m->refs[o->inputs + i];
            const ir_type *ty;
            if (v == 0 || v >= m->nvalue || !value_type_ok(vf, v))
                continue;
            ty = &m->types[m->values[v].type];
            if (ty->kind == IR_TYPE_TUPLE && ty->nelem != ndev) {
                report(vf, op, v, "input %u (%s) is a tuple of %u but the pmap runs on %u devices",
                       i, vname(vf, v), ty->nelem, ndev);
            }
        }
    }
    if (flags & IR_OPF_COLLECTIVE) {
        for (uint32_t i = 0; i < o->ninput; i++) {
            ir_id v = m->refs[o->inputs + i];
            if (v != 0 && v < m->nvalue && value_type_ok(vf, v)) {
                check_tuple_devices(vf, op, v, "input", i);
            }
        }
        for (uint32_t i = 0; i < o->noutput; i++) {
            ir_id v = o->outputs + i;
            if (value_type_ok(vf, v)) {
                check_tuple_devices(vf, op, v, "result", i);
            }
        }
    }
}

/*
 * Do two tensor types agree in all but placements? Sharding propagation is a
 * later pass, so compute ops on distributed tensors may keep any placement.
 */
static int
same_but_placements(const ir_module *m, ir_id a, ir_id b)
{
    const ir_type *x = &m->types[a], *y = &m->types[b];
    if (x->kind != IR_TYPE_TENSOR || y->kind != IR_TYPE_TENSOR || x->mesh == 0 ||
        x->mesh != y->mesh || x->dtype != y->dtype || x->rank != y->rank || x->rank > IR_MAX_RANK ||
        !ir_safe_slice(x->dims, x->rank, m->nint) || !ir_safe_slice(y->dims, y->rank, m->nint))
        return 0;
    return x->rank == 0 ||
           memcmp(m->ints + x->dims, m->ints + y->dims, x->rank * sizeof(int64_t)) == 0;
}

/* Result types against shape inference. Runs only on ops that passed every other check. */
static void
check_infer(verifier *vf, ir_id op)
{
    ir_module *m = vf->m;
    uint32_t n = m->ops[op].noutput;
    int compute = !(ir_opinfos[m->ops[op].kind].flags & IR_OPF_COMM);
    di_error e;
    DI_GROW(&vf->out, &vf->cout, n + 1);
    memset(vf->out, 0, (n + 1) * sizeof *vf->out);
    di_error_clear(&e);
    if (ir_op_infer(m, op, vf->out, &e) != 0) {
        if (e.code == DI_ENOMEM) {
            vf->nomem = 1;
            vf->stop = 1;
            return;
        }
        /* Inference names the op as report does: say it once. */
        ir_label l = ir_op_label(m, op);
        size_t len = strlen(l.s);
        const char *msg = e.msg;
        if (strncmp(msg, l.s, len) == 0 && strncmp(msg + len, ": ", 2) == 0)
            msg += len + 2;
        report(vf, op, 0, "%s", *msg != '\0' ? msg : "shape inference failed");
        return;
    }
    /* Inference may have grown the module's arrays: read everything afresh. */
    for (uint32_t i = 0; i < n; i++) {
        ir_id v = m->ops[op].outputs + i;
        ir_id have = m->values[v].type, want = vf->out[i];
        char t1[256], t2[256];
        if (have == want)
            continue;
        if (want == 0 || want >= m->ntype) {
            report(vf, op, v, "shape inference gave no type for result %u", i);
            continue;
        }
        if (compute && same_but_placements(m, have, want))
            continue;
        report(vf, op, v, "result %u has type %s but the inputs give %s", i,
               type_text(m, have, t1, sizeof t1), type_text(m, want, t2, sizeof t2));
    }
}

static void enter_region(verifier *vf, ir_id r, ir_id pmap, int errors);

/* Is value v a valid id whose type is a valid type? (A callee's own checks report why not.) */
static int
value_typed(verifier *vf, ir_id v)
{
    const ir_module *m = vf->m;
    ir_id t;
    if (v == 0 || v >= m->nvalue)
        return 0;
    t = m->values[v].type;
    return t != 0 && t < vf->ntype0 && !(type_state(vf, t) & TYPE_BAD);
}

/*
 * The function a pmap calls: a top-level function other than the entry with
 * one argument per input and one result per result. Returns 1 when shape
 * inference may compare the pmap with the function's signature.
 */
static int
check_callee(verifier *vf, ir_id op)
{
    const ir_module *m = vf->m;
    const ir_op *o = &m->ops[op];
    ir_id b = o->body;
    const ir_region *f;
    const char *name;
    int ok = 1;
    if (b == 0) {
        report(vf, op, 0, "%s has the callee flag but names no function", ir_opkind_name(o->kind));
        return 0;
    }
    if (b >= m->nregion) {
        report(vf, op, 0, "callee region %u does not exist", b);
        return 0;
    }
    f = &m->regions[b];
    if (f->parent != 0 || f->name == 0 || f->name >= m->nchar) {
        report(vf, op, 0, "callee region %u is not a top-level function", b);
        return 0;
    }
    name = m->chars + f->name;
    if (b == vf->entry) {
        report(vf, op, 0, "%s calls @%s, the entry function", ir_opkind_name(o->kind), name);
        return 0;
    }
    if (!region_lists_ok(f))
        return 0; /* reported with the regions */
    if (f->narg != o->ninput) {
        report(vf, op, 0, "callee @%s takes %u arguments but the op has %u inputs", name, f->narg,
               o->ninput);
        ok = 0;
    }
    if (f->nresult != o->noutput) {
        report(vf, op, 0, "callee @%s returns %u values but the op has %u results", name,
               f->nresult, o->noutput);
        ok = 0;
    }
    for (uint32_t i = 0; i < f->narg && ok; i++)
        ok = value_typed(vf, f->args[i]);
    for (uint32_t i = 0; i < f->nresult && ok; i++)
        ok = value_typed(vf, f->results[i]);
    return ok;
}

/* Checks one op listed in region r; a pmap's body is pushed and checked next. */
static void
check_op(verifier *vf, ir_id r, ir_id op)
{
    ir_module *m = vf->m;
    const ir_op *o = &m->ops[op];
    const ir_opinfo *info;
    int before = vf->count, inputs_ok = 1;

    if (!ir_safe_kind(o->kind)) {
        report(vf, op, 0, "unknown op kind %u", o->kind);
        return;
    }
    if (o->kind == IR_OP_RETURN) {
        report(vf, op, 0,
               "dist.return is stored as an op; a region's results list holds the "
               "values it returns");
        return;
    }
    if (!ir_safe_slice(o->inputs, o->ninput, m->nref)) {
        report(vf, op, 0, "input list out of range");
        return;
    }
    if (o->noutput != 0 && (o->outputs == 0 || !ir_safe_slice(o->outputs, o->noutput, m->nvalue))) {
        report(vf, op, 0, "results %u..%u out of range", o->outputs, o->outputs + o->noutput);
        return;
    }
    if (o->nattr != 0 && (o->attrs == 0 || !ir_safe_slice(o->attrs, o->nattr, m->nattr))) {
        report(vf, op, 0, "attribute list out of range");
        return;
    }
    info = &ir_opinfos[o->kind];
    if (o->opaque >= m->nchar)
        report(vf, op, 0, "opaque op type id %u out of range", o->opaque);
    if (o->name >= m->nchar)
        report(vf, op, 0, "op name id %u out of range", o->name);
    if (!(info->flags & IR_OPF_REGION) && o->body != 0)
        report(vf, op, 0, "op has a body region but only dist.pmap may");
    if (o->ninput < (uint32_t)info->min_in ||
        (info->max_in >= 0 && o->ninput > (uint32_t)info->max_in))
        report(vf, op, 0, "has %u inputs; %s takes %d to %d", o->ninput, info->name, info->min_in,
               info->max_in);
    if (o->noutput < (uint32_t)info->min_out ||
        (info->max_out >= 0 && o->noutput > (uint32_t)info->max_out))
        report(vf, op, 0, "has %u results; %s gives %d to %d", o->noutput, info->name,
               info->min_out, info->max_out);
    check_attrs(vf, op);

    for (uint32_t i = 0; i < o->ninput; i++) {
        ir_id v = m->refs[o->inputs + i];
        const ir_value *val;
        if (v == 0 || v >= m->nvalue) {
            report(vf, op, 0, "input %u: value id %u does not exist", i, v);
            inputs_ok = 0;
            continue;
        }
        val = &m->values[v];
        if (val->region != r) {
            report(vf, op, v,
                   "input %u (%s) is defined in region %u, not in this op's region %u (values "
                   "are arguments of the region or results of earlier ops in it)",
                   i, vname(vf, v), val->region, r);
            inputs_ok = 0;
        } else if (!vf->defined[v]) {
            report(vf, op, v, "input %u (%s) is used before it is defined", i, vname(vf, v));
            inputs_ok = 0;
        } else if (!value_type_ok(vf, v)) {
            inputs_ok = 0; /* reported where it was defined */
        }
    }
    for (uint32_t i = 0; i < o->noutput; i++) {
        ir_id v = o->outputs + i;
        const ir_value *val = &m->values[v];
        if (vf->defined[v]) {
            report(vf, op, v, "result %u (%s) is defined twice", i, vname(vf, v));
            continue;
        }
        vf->defined[v] = 1;
        if (val->def != op || val->index != i || val->region != r) {
            report(vf, op, v,
                   "result %u (%s) records op %u, result %u, region %u; expected op %u, "
                   "result %u, region %u",
                   i, vname(vf, v), val->def, val->index, val->region, op, i, r);
            continue;
        }
        check_value_type(vf, op, v, "result", i);
    }
    check_devices(vf, op);

    if ((o->flags & IR_OPFLAG_CALLEE) && !ir_opkind_calls(o->kind)) {
        report(vf, op, 0,
               "only dist.pmap and func.call may call a function, but the op has the callee flag");
        return;
    }
    if (o->kind == IR_OP_CALL && !(o->flags & IR_OPFLAG_CALLEE)) {
        report(vf, op, 0, "func.call names no function (give callee = @f)");
        return;
    }
    if (ir_opkind_calls(o->kind) && (o->flags & IR_OPFLAG_CALLEE)) {
        if (check_callee(vf, op) && vf->count == before && inputs_ok && !vf->no_infer)
            check_infer(vf, op);
        return;
    }
    if (o->kind == IR_OP_PMAP) {
        ir_id b = o->body;
        if (b == 0) {
            report(vf, op, 0, "dist.pmap has no body");
        } else if (b >= m->nregion) {
            report(vf, op, 0, "body region %u does not exist", b);
        } else if (m->regions[b].parent != op) {
            report(vf, op, 0, "body region %u does not name this op as its parent", b);
        } else if (vf->visited[b] || !region_lists_ok(&m->regions[b])) {
            report(vf, op, 0, "body region %u cannot be checked", b);
        } else {
            const ir_region *body = &m->regions[b];
            if (body->narg != o->ninput)
                report(vf, op, 0, "body has %u arguments but the op has %u inputs", body->narg,
                       o->ninput);
            if (body->nresult != o->noutput)
                report(vf, op, 0, "body returns %u values but the op has %u results", body->nresult,
                       o->noutput);
            /* The rest, shape inference included, happens when the body is done. */
            enter_region(vf, b, op, inputs_ok ? before : -1);
            return;
        }
        return;
    }
    if (vf->count == before && inputs_ok && !vf->no_infer)
        check_infer(vf, op);
}

/* ---- regions ---- */

static void
enter_region(verifier *vf, ir_id r, ir_id pmap, int errors)
{
    const ir_module *m = vf->m;
    const ir_region *reg = &m->regions[r];
    frame *f;
    const char *argword = pmap ? "body argument" : "argument";

    DI_GROW(&vf->stack, &vf->cstack, vf->nstack + 1);
    f = &vf->stack[vf->nstack++];
    memset(f, 0, sizeof *f);
    f->region = r;
    f->pmap = pmap;
    f->errors = errors;
    vf->visited[r] = 1;
    if (pmap != 0) {
        const ir_attr *a = find_attr_kind(m, pmap, "device_var", IR_ATTR_STRING);
        if (a != NULL && a->s != 0) {
            f->bound = a->s;
            f->saved = vf->bind[a->s];
            vf->bind[a->s] = vf->nstack;
        }
    } else if (vf->callee[r] && vf->cvar[r] != 0) {
        /* A function pmaps call: their device variable is bound in it, as in a body. */
        f->bound = vf->cvar[r];
        f->saved = vf->bind[f->bound];
        vf->bind[f->bound] = vf->nstack;
    }
    for (uint32_t i = 0; i < reg->narg; i++) {
        ir_id v = reg->args[i];
        const ir_value *val;
        if (v == 0 || v >= m->nvalue) {
            report(vf, pmap, 0, "%s %u: value id %u does not exist", argword, i, v);
            continue;
        }
        if (vf->defined[v]) {
            report(vf, pmap, v, "%s %u (%s) is defined twice", argword, i, vname(vf, v));
            continue;
        }
        vf->defined[v] = 1;
        val = &m->values[v];
        if (val->def != 0 || val->region != r || val->index != i) {
            report(vf, pmap, v,
                   "%s %u (%s) records op %u, index %u, region %u; expected an argument of "
                   "region %u at %u",
                   argword, i, vname(vf, v), val->def, val->index, val->region, r, i);
            continue;
        }
        check_value_type(vf, pmap, v, argword, i);
    }
}

/* Checks the results of the region on top of the stack and pops it. */
static void
leave_region(verifier *vf)
{
    const ir_module *m = vf->m;
    frame f = vf->stack[vf->nstack - 1];
    const ir_region *reg = &m->regions[f.region];
    const char *word = f.pmap ? "body result" : "result";

    for (uint32_t i = 0; i < reg->nresult; i++) {
        ir_id v = reg->results[i];
        if (v == 0 || v >= m->nvalue) {
            report(vf, f.pmap, 0, "%s %u: value id %u does not exist", word, i, v);
            continue;
        }
        if (m->values[v].region != f.region || !vf->defined[v])
            report(vf, f.pmap, v, "%s %u is %s, which is not defined in this region", word, i,
                   vname(vf, v));
    }
    if (f.bound != 0)
        vf->bind[f.bound] = f.saved;
    vf->nstack--;
    if (f.pmap != 0 && f.errors >= 0 && f.errors == vf->count && !vf->no_infer)
        check_infer(vf, f.pmap);
}

/* Checks a function and, depth first, the pmap bodies inside it. */
static void
check_function(verifier *vf, ir_id r)
{
    const ir_module *m = vf->m;
    vf->func = r;
    enter_region(vf, r, 0, 0);
    while (vf->nstack > 0 && !vf->stop) {
        frame *f = &vf->stack[vf->nstack - 1];
        const ir_region *reg = &m->regions[f->region];
        if (f->next < reg->nop) {
            ir_id op = reg->ops[f->next++];
            if (op != 0 && op < m->nop && vf->listed[op] == f->region)
                check_op(vf, f->region, op);
        } else {
            leave_region(vf);
        }
    }
    vf->nstack = 0;
    vf->func = 0;
}

/* ---- calls ---- */

typedef struct call_edge {
    ir_id from; /* the function whose region (or a body in it) holds the pmap */
    ir_id op;   /* the pmap */
    ir_id to;   /* the function it calls */
} call_edge;

static int
cmp_edge_from(const void *a, const void *b)
{
    const call_edge *x = a, *y = b;
    if (x->from != y->from)
        return x->from < y->from ? -1 : 1;
    return (x->op > y->op) - (x->op < y->op);
}

/*
 * Finds the pmaps that call functions, in every function and the owned
 * bodies reachable from it (the ops check_function will check), marks the
 * callees with their first caller's device variable, then reports each call
 * that closes a cycle (a depth-first search over functions).
 */
static void
check_calls(verifier *vf)
{
    const ir_module *m = vf->m;
    call_edge *e = NULL;
    uint32_t ne = 0, ce = 0, nst = 0, cst = 0;
    ir_id *st = NULL;
    uint8_t *seen = di_xcalloc(m->nregion, 1);
    for (ir_id f = 1; f < m->nregion; f++) {
        const ir_region *fr = &m->regions[f];
        if (fr->parent != 0 || fr->name == 0 || fr->name >= m->nchar || !region_lists_ok(fr))
            continue;
        DI_GROW(&st, &cst, nst + 1);
        st[nst++] = f;
        seen[f] = 1;
        while (nst > 0) {
            ir_id r = st[--nst];
            const ir_region *reg = &m->regions[r];
            for (uint32_t i = 0; i < reg->nop; i++) {
                ir_id op = reg->ops[i], b;
                const ir_op *o;
                if (op == 0 || op >= m->nop || vf->listed[op] != r)
                    continue;
                o = &m->ops[op];
                b = o->body;
                if (!ir_opkind_calls(o->kind) || b == 0 || b >= m->nregion)
                    continue;
                if (o->flags & IR_OPFLAG_CALLEE) {
                    if (m->regions[b].parent != 0)
                        continue;
                    if (!vf->callee[b]) {
                        /* The op's checks come later: read its attributes only if in range. */
                        const ir_attr *a =
                            ir_safe_slice(o->attrs, o->nattr, m->nattr)
                                ? find_attr_kind(m, op, "device_var", IR_ATTR_STRING)
                                : NULL;
                        vf->callee[b] = 1;
                        vf->cvar[b] = a != NULL && a->s < m->nchar ? a->s : 0;
                    }
                    DI_GROW(&e, &ce, ne + 1);
                    e[ne].from = f;
                    e[ne].op = op;
                    e[ne].to = b;
                    ne++;
                } else if (m->regions[b].parent == op && !seen[b] &&
                           region_lists_ok(&m->regions[b])) {
                    seen[b] = 1;
                    DI_GROW(&st, &cst, nst + 1);
                    st[nst++] = b;
                }
            }
        }
    }
    di_free(seen);
    if (ne > 0) {
        /* Edges sorted by caller; first[f] .. first[f + 1] are f's calls. */
        uint32_t *first = di_xcalloc((size_t)m->nregion + 1, sizeof *first);
        uint8_t *color = di_xcalloc(m->nregion, 1); /* 0 new, 1 on the path, 2 done */
        uint32_t *next = di_xcalloc(m->nregion, sizeof *next);
        qsort(e, ne, sizeof *e, cmp_edge_from);
        for (uint32_t i = 0; i < ne; i++)
            first[e[i].from + 1]++;
        for (ir_id r = 1; r < m->nregion; r++)
            first[r + 1] += first[r];
        for (ir_id f0 = 1; f0 < m->nregion && !vf->stop; f0++) {
            if (color[f0] != 0 || first[f0] == first[f0 + 1])
                continue;
            nst = 0;
            DI_GROW(&st, &cst, nst + 1);
            st[nst++] = f0;
            color[f0] = 1;
            next[f0] = first[f0];
            while (nst > 0 && !vf->stop) {
                ir_id f = st[nst - 1];
                const call_edge *x;
                if (next[f] == first[f + 1]) {
                    color[f] = 2;
                    nst--;
                    continue;
                }
                x = &e[next[f]++];
                if (color[x->to] == 1) {
                    vf->func = x->from;
                    report(vf, x->op, 0,
                           "dist.pmap calls @%s, which is already being called: calls form a "
                           "cycle",
                           ir_safe_str(m, m->regions[x->to].name));
                    vf->func = 0;
                } else if (color[x->to] == 0) {
                    color[x->to] = 1;
                    next[x->to] = first[x->to];
                    DI_GROW(&st, &cst, nst + 1);
                    st[nst++] = x->to;
                }
            }
        }
        di_free(first);
        di_free(color);
        di_free(next);
    }
    di_free(st);
    di_free(e);
}

/* ---- entry points ---- */

static void
verifier_free(verifier *vf)
{
    di_free(vf->defined);
    di_free(vf->listed);
    di_free(vf->visited);
    di_free(vf->tstate);
    di_free(vf->tmark);
    di_free(vf->bind);
    di_free(vf->mesh_ok);
    di_free(vf->cvar);
    di_free(vf->callee);
    di_free(vf->devbits);
    di_free(vf->stack);
    di_free(vf->tstack);
    di_free(vf->walk);
    di_free(vf->out);
    di_free(vf);
}

/* Runs every check; returns the number of problems, or DI_ENOMEM. */
static int
verify_run(ir_module *m, ir_diag_fn fn, void *ctx, int limit, di_error *first)
{
    verifier *vf;
    int count;
    if (m == NULL)
        return di_error_set(first, DI_EINVAL, "no module");
    vf = di_calloc(1, sizeof *vf);
    if (vf == NULL)
        return di_error_set(first, DI_ENOMEM, "out of memory verifying a module");
    vf->m = m;
    vf->fn = fn;
    vf->ctx = ctx;
    vf->limit = limit;
    vf->first = first;
    if (!ir_safe_arrays(m)) {
        report(vf, 0, 0, "the module's arrays are malformed");
        count = vf->count;
        verifier_free(vf);
        return count;
    }
    vf->ntype0 = m->ntype;
    vf->defined = di_calloc(m->nvalue, 1);
    vf->listed = di_calloc(m->nop, sizeof *vf->listed);
    vf->visited = di_calloc(m->nregion, 1);
    vf->tstate = di_calloc(m->ntype, 1);
    vf->tmark = di_calloc(m->ntype, sizeof *vf->tmark);
    vf->bind = di_calloc(m->nchar, sizeof *vf->bind);
    vf->mesh_ok = di_calloc(m->nmesh, 1);
    vf->devbits = di_calloc(DEVICE_LIMIT / 8, 1);
    vf->cvar = di_calloc(m->nregion, sizeof *vf->cvar);
    vf->callee = di_calloc(m->nregion, 1);
    if (!vf->defined || !vf->listed || !vf->visited || !vf->tstate || !vf->tmark || !vf->bind ||
        !vf->mesh_ok || !vf->devbits || !vf->cvar || !vf->callee) {
        verifier_free(vf);
        return di_error_set(first, DI_ENOMEM, "out of memory verifying a module");
    }
    parse_schemas(vf);
    check_meshes(vf);
    check_type_lists(vf);
    check_regions(vf);
    vf->entry = ir_safe_entry(m);
    if (!vf->stop)
        check_calls(vf);
    for (ir_id r = 1; r < m->nregion && !vf->stop; r++) {
        const ir_region *reg = &m->regions[r];
        if (reg->parent == 0 && reg->name != 0 && reg->name < m->nchar && !vf->visited[r] &&
            region_lists_ok(reg))
            check_function(vf, r);
    }
    count = vf->nomem ? DI_ENOMEM : vf->count;
    verifier_free(vf);
    if (count == DI_ENOMEM)
        return di_error_set(first, DI_ENOMEM, "out of memory verifying a module");
    return count;
}

int
ir_verify(ir_module *m, di_error *err)
{
    int n;
    if (err != NULL)
        di_error_clear(err);
    n = verify_run(m, NULL, NULL, 1, err);
    if (n < 0)
        return n;
    return n > 0 ? DI_EVERIFY : 0;
}

int
ir_verify_all(ir_module *m, ir_diag_fn fn, void *ctx, int limit)
{
    return verify_run(m, fn, ctx, limit, NULL);
}
