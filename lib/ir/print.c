/*
 * print.c: the printer of the IR text form (docs/ir-text.md). The output is
 * canonical: one op per line, two spaces of indentation per nesting level,
 * attributes sorted by key, meshes first and then the functions in region
 * order, so that print(parse(x)) == x for every printed x.
 *
 * Values print with their own names. Within a function (nested regions
 * included) the first value to use a name keeps it; unnamed values, and later
 * values whose name is already taken, get the smallest free number (%0, %1,
 * ...) in textual order. Names that are not MLIR identifiers print quoted
 * (%"a/b"), a distir extension that keeps ONNX names intact.
 *
 * The printer is built for large modules: everything goes into one di_buf,
 * each distinct type is formatted once and then copied, and nothing is
 * allocated per op.
 */
#include "ir/ir.h"
#include "ir/safe.h"

#include <stdlib.h>
#include <string.h>

#define NAME_OWN UINT32_MAX        /* the value prints its own name */
#define NAME_NEED (UINT32_MAX - 1) /* gets a number in the second pass */
#define NAME_NONE (UINT32_MAX - 2) /* in no function: prints its own name if any */
#define PRINT_MAX_DEPTH 256        /* region and type nesting printed */
#define TYPE_UNSET UINT32_MAX

typedef struct claimslot {
    uint32_t gen;
    ir_id key;
} claimslot;

typedef struct printer {
    const ir_module *m;
    di_buf out;
    di_buf types;    /* the text of every type printed so far */
    uint32_t *toff;  /* per type: offset of its text in types, or TYPE_UNSET */
    uint32_t *tlen;  /* per type: length of its text */
    uint32_t *vnum;  /* per value: NAME_OWN, NAME_NONE or its number */
    claimslot *claim; /* names taken in the current function (open addressing) */
    uint32_t cclaim, nclaim, gen;
    uint32_t next;   /* the next number to try in the current function */
    uint32_t *order; /* scratch: an op's attributes in key order */
    uint32_t corder;
} printer;

/* ---- characters ---- */

static int
is_digit(int c)
{
    return c >= '0' && c <= '9';
}

static int
is_bare_char(int c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || is_digit(c) || c == '_' ||
           c == '$' || c == '.';
}

/* MLIR's bare-id: (letter | _) (letter | digit | _ $ .)* */
static int
is_bare_id(const char *s)
{
    if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || *s == '_'))
        return 0;
    for (s++; *s; s++)
        if (!is_bare_char((unsigned char)*s))
            return 0;
    return 1;
}

/* MLIR's suffix-id (value names): digit+ | (letter | _ $ . -) (letter | digit | _ $ . -)* */
static int
is_suffix_id(const char *s)
{
    if (*s == '\0')
        return 0;
    if (is_digit((unsigned char)*s)) {
        while (is_digit((unsigned char)*s))
            s++;
        return *s == '\0';
    }
    for (; *s; s++)
        if (!is_bare_char((unsigned char)*s) && *s != '-')
            return 0;
    return 1;
}

/* ---- output helpers ---- */

static void
put_u64(di_buf *b, uint64_t v)
{
    char tmp[24];
    int i = sizeof tmp;
    do {
        tmp[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    di_buf_put(b, tmp + i, sizeof tmp - (size_t)i);
}

static void
put_i64(di_buf *b, int64_t v)
{
    if (v < 0) {
        di_buf_putc(b, '-');
        put_u64(b, 0 - (uint64_t)v);
    } else {
        put_u64(b, (uint64_t)v);
    }
}

static void
put_lit(di_buf *b, const char *s)
{
    di_buf_put(b, s, strlen(s));
}

/* A string literal: printable ASCII as is, \" \\ \n \t, every other byte as \XX. */
static void
put_string(di_buf *b, const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    const unsigned char *u = (const unsigned char *)s;
    di_buf_putc(b, '"');
    while (*u) {
        const unsigned char *run = u;
        while (*u >= 0x20 && *u < 0x7f && *u != '"' && *u != '\\')
            u++;
        di_buf_put(b, run, (size_t)(u - run));
        if (*u == '\0')
            break;
        if (*u == '"' || *u == '\\') {
            char e[2] = {'\\', (char)*u};
            di_buf_put(b, e, 2);
        } else if (*u == '\n') {
            di_buf_put(b, "\\n", 2);
        } else if (*u == '\t') {
            di_buf_put(b, "\\t", 2);
        } else {
            char e[3] = {'\\', hex[*u >> 4], hex[*u & 15]};
            di_buf_put(b, e, 3);
        }
        u++;
    }
    di_buf_putc(b, '"');
}

/* A symbol (function or mesh) name after '@'. */
static void
put_symbol(di_buf *b, const char *s)
{
    di_buf_putc(b, '@');
    if (is_bare_id(s))
        put_lit(b, s);
    else
        put_string(b, s);
}

static void
put_indent(di_buf *b, int level)
{
    static const char spaces[] = "                                ";
    size_t n = (size_t)level * 2;
    while (n > 0) {
        size_t k = n < sizeof spaces - 1 ? n : sizeof spaces - 1;
        di_buf_put(b, spaces, k);
        n -= k;
    }
}

/* ---- types ---- */

static void
put_type(printer *pr, di_buf *b, ir_id t, int depth);

/* Formats type t into pr->types once. */
static void
cache_type(printer *pr, ir_id t, int depth)
{
    const ir_module *m = pr->m;
    const ir_type *ty = &m->types[t];
    di_buf s;
    di_buf_init(&s);
    if (t == 0 || depth > PRINT_MAX_DEPTH) {
        put_lit(&s, "none");
    } else if (ty->kind == IR_TYPE_TUPLE) {
        put_lit(&s, "tuple<");
        for (uint32_t i = 0; i < ty->nelem; i++) {
            ir_id e = m->refs[ty->elems + i];
            if (i)
                put_lit(&s, ", ");
            /* Elements precede their tuple; anything else is corrupt: print none. */
            put_type(pr, &s, e < t ? e : 0, depth + 1);
        }
        di_buf_putc(&s, '>');
    } else if (ty->kind == IR_TYPE_TENSOR) {
        int mesh = ty->mesh && ty->mesh < m->nmesh;
        put_lit(&s, mesh ? "!dist.dtensor<" : "!dist.tensor<");
        for (uint32_t i = 0; i < ty->rank; i++) {
            put_i64(&s, m->ints[ty->dims + i]);
            di_buf_putc(&s, 'x');
        }
        put_lit(&s, ir_dtype_name((ir_dtype)ty->dtype));
        if (mesh) {
            const ir_mesh *me = &m->meshes[ty->mesh];
            put_lit(&s, ", ");
            put_symbol(&s, ir_str_get(m, me->name));
            put_lit(&s, ", [");
            for (uint32_t i = 0; i < me->rank; i++) {
                int64_t pl = m->ints[ty->placements + i];
                if (i)
                    put_lit(&s, ", ");
                if (pl == IR_PLACE_R) {
                    di_buf_putc(&s, 'R');
                } else if (pl == IR_PLACE_PSUM) {
                    put_lit(&s, "P(sum)");
                } else if (pl == IR_PLACE_PMAX) {
                    put_lit(&s, "P(max)");
                } else {
                    put_lit(&s, "S[");
                    put_i64(&s, pl);
                    di_buf_putc(&s, ']');
                }
            }
            di_buf_putc(&s, ']');
        } else if (ty->devvar) {
            const char *var = ir_str_get(m, ty->devvar);
            put_lit(&s, ", ");
            if (is_bare_id(var))
                put_lit(&s, var);
            else
                put_string(&s, var);
        } else if (ty->device >= 0) {
            put_lit(&s, ", ");
            put_i64(&s, ty->device);
        }
        di_buf_putc(&s, '>');
    } else {
        put_lit(&s, "none");
    }
    pr->toff[t] = (uint32_t)pr->types.len;
    pr->tlen[t] = (uint32_t)s.len;
    di_buf_put(&pr->types, s.data, s.len);
    di_buf_fini(&s);
}

static void
put_type(printer *pr, di_buf *b, ir_id t, int depth)
{
    if (t >= pr->m->ntype)
        t = 0;
    if (pr->toff[t] == TYPE_UNSET)
        cache_type(pr, t, depth);
    di_buf_put(b, pr->types.data + pr->toff[t], pr->tlen[t]);
}

/* ---- value names ---- */

static ir_id
value_type(const ir_module *m, ir_id v)
{
    return v < m->nvalue ? m->values[v].type : 0;
}

static uint32_t
claim_hash(ir_id key, uint32_t mask)
{
    uint32_t k = key * 0x9E3779B1u;
    return (k ^ (k >> 15)) & mask;
}

static int
claimed(const printer *pr, ir_id key)
{
    uint32_t mask, h;
    if (pr->cclaim == 0)
        return 0;
    mask = pr->cclaim - 1;
    for (h = claim_hash(key, mask); pr->claim[h].gen == pr->gen; h = (h + 1) & mask)
        if (pr->claim[h].key == key)
            return 1;
    return 0;
}

/* Takes a name for the current function; 0 if it was already taken. */
static int
claim(printer *pr, ir_id key)
{
    uint32_t mask, h;
    if ((pr->nclaim + 1) * 2 > pr->cclaim) {
        claimslot *old = pr->claim;
        uint32_t oldcap = pr->cclaim, oldgen = pr->gen;
        pr->cclaim = oldcap ? oldcap * 2 : 256;
        pr->claim = di_xcalloc(pr->cclaim, sizeof *pr->claim);
        pr->gen = 1;
        mask = pr->cclaim - 1;
        for (uint32_t i = 0; i < oldcap; i++) {
            if (old[i].gen != oldgen)
                continue;
            for (h = claim_hash(old[i].key, mask); pr->claim[h].gen == 1; h = (h + 1) & mask)
                ;
            pr->claim[h].gen = 1;
            pr->claim[h].key = old[i].key;
        }
        di_free(old);
    }
    mask = pr->cclaim - 1;
    for (h = claim_hash(key, mask); pr->claim[h].gen == pr->gen; h = (h + 1) & mask)
        if (pr->claim[h].key == key)
            return 0;
    pr->claim[h].gen = pr->gen;
    pr->claim[h].key = key;
    pr->nclaim++;
    return 1;
}

static void
claims_clear(printer *pr)
{
    pr->nclaim = 0;
    pr->next = 0;
    if (++pr->gen == 0) {
        if (pr->cclaim)
            memset(pr->claim, 0, pr->cclaim * sizeof *pr->claim);
        pr->gen = 1;
    }
}

static void
name_value(printer *pr, ir_id v, int pass)
{
    const ir_module *m = pr->m;
    if (v == 0 || v >= m->nvalue)
        return;
    if (pass == 1) {
        ir_id name = m->values[v].name;
        /* An empty name cannot be written: such a value gets a number. */
        pr->vnum[v] = (name && m->chars[name] && claim(pr, name)) ? NAME_OWN : NAME_NEED;
        return;
    }
    if (pr->vnum[v] != NAME_NEED)
        return;
    for (;;) {
        char tmp[16];
        int i = sizeof tmp;
        uint32_t n = pr->next++;
        ir_id id;
        do {
            tmp[--i] = (char)('0' + n % 10);
            n /= 10;
        } while (n);
        id = ir_str_find(m, tmp + i, sizeof tmp - (size_t)i);
        if (id == 0 || !claimed(pr, id))
            break;
    }
    pr->vnum[v] = pr->next - 1;
}

/* Visits the values of region r in textual order (pass 1: own names, 2: numbers). */
static void
name_region(printer *pr, ir_id r, int pass, int depth)
{
    const ir_module *m = pr->m;
    const ir_region *reg;
    if (r == 0 || r >= m->nregion || depth > PRINT_MAX_DEPTH)
        return;
    reg = &m->regions[r];
    for (uint32_t i = 0; i < reg->narg; i++)
        name_value(pr, reg->args[i], pass);
    for (uint32_t i = 0; i < reg->nop; i++) {
        ir_id op = reg->ops[i];
        if (op == 0 || op >= m->nop)
            continue;
        for (uint32_t k = 0; k < m->ops[op].noutput; k++)
            name_value(pr, m->ops[op].outputs + k, pass);
        if (m->ops[op].body && !(m->ops[op].flags & IR_OPFLAG_CALLEE))
            name_region(pr, m->ops[op].body, pass, depth + 1);
    }
}

static void
put_value(printer *pr, ir_id v)
{
    const ir_module *m = pr->m;
    di_buf *b = &pr->out;
    uint32_t n;
    if (v == 0 || v >= m->nvalue) {
        put_lit(b, "%<invalid>");
        return;
    }
    n = pr->vnum[v];
    di_buf_putc(b, '%');
    if (n == NAME_OWN || (n == NAME_NONE && m->values[v].name && m->chars[m->values[v].name])) {
        const char *name = ir_str_get(m, m->values[v].name);
        if (is_suffix_id(name))
            put_lit(b, name);
        else
            put_string(b, name);
    } else if (n == NAME_NONE) {
        put_lit(b, "<unnamed>");
    } else {
        put_u64(b, n);
    }
}

/* Raw bytes as `dense<"0xHEX">` (without a type). */
static void
put_dense(di_buf *b, const uint8_t *data, size_t n)
{
    static const char hex[] = "0123456789ABCDEF";
    put_lit(b, "dense<\"0x");
    for (size_t i = 0; i < n; i++) {
        char h[2] = {hex[data[i] >> 4], hex[data[i] & 15]};
        di_buf_put(b, h, 2);
    }
    put_lit(b, "\">");
}

/* `%a: t, %b: t = dense<"0x...">` (an argument with initializer data). */
static void
put_args(printer *pr, const ir_region *reg)
{
    for (uint32_t i = 0; i < reg->narg; i++) {
        const uint8_t *init;
        size_t n;
        if (i)
            put_lit(&pr->out, ", ");
        put_value(pr, reg->args[i]);
        put_lit(&pr->out, ": ");
        put_type(pr, &pr->out, value_type(pr->m, reg->args[i]), 0);
        if (reg->args[i] < pr->m->nvalue &&
            (init = ir_value_init(pr->m, reg->args[i], &n)) != NULL) {
            put_lit(&pr->out, " = ");
            put_dense(&pr->out, init, n);
        }
    }
}

/* The types of n values at vals, separated by ", ". */
static void
put_value_types(printer *pr, const ir_id *vals, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        if (i)
            put_lit(&pr->out, ", ");
        put_type(pr, &pr->out, value_type(pr->m, vals[i]), 0);
    }
}

/* ---- attributes ---- */

static void
put_attr_value(printer *pr, const ir_attr *a)
{
    const ir_module *m = pr->m;
    di_buf *b = &pr->out;
    switch (a->kind) {
    case IR_ATTR_INT:
        put_i64(b, a->i);
        break;
    case IR_ATTR_FLOAT:
        di_buf_double(b, a->f);
        break;
    case IR_ATTR_STRING:
        put_string(b, ir_str_get(m, a->s));
        break;
    case IR_ATTR_INTS:
        di_buf_putc(b, '[');
        for (uint32_t i = 0; i < a->n; i++) {
            if (i)
                put_lit(b, ", ");
            put_i64(b, m->ints[a->off + i]);
        }
        di_buf_putc(b, ']');
        break;
    case IR_ATTR_FLOATS:
        /* An empty list would read back as ints: use MLIR's typed array. */
        if (a->n == 0) {
            put_lit(b, "array<f64>");
            break;
        }
        di_buf_putc(b, '[');
        for (uint32_t i = 0; i < a->n; i++) {
            if (i)
                put_lit(b, ", ");
            di_buf_double(b, m->floats[a->off + i]);
        }
        di_buf_putc(b, ']');
        break;
    case IR_ATTR_MESH:
        put_symbol(b, a->s && a->s < m->nmesh ? ir_str_get(m, m->meshes[a->s].name) : "");
        break;
    case IR_ATTR_TENSOR:
        put_dense(b, m->data + a->off, a->n);
        put_lit(b, " : ");
        put_type(pr, b, (ir_id)a->i, 0);
        break;
    default:
        put_lit(b, "<invalid attribute>");
        break;
    }
}

#define ORDER_OP_TYPE UINT32_MAX       /* the op_type made from op->opaque */
#define ORDER_CALLEE (UINT32_MAX - 1)  /* `callee = @f` of a pmap that calls a function */

static int
is_callee(const ir_op *op)
{
    return (op->flags & IR_OPFLAG_CALLEE) && op->body != 0;
}

static const char *
order_key(const printer *pr, const ir_op *op, uint32_t k)
{
    if (k == ORDER_OP_TYPE)
        return "op_type";
    if (k == ORDER_CALLEE)
        return "callee";
    return ir_str_get(pr->m, pr->m->attrs[op->attrs + k].key);
}

/*
 * ` {k = v, ...}` in key order. An opaque op whose op_type attribute is
 * missing gets one from op->opaque, so that the text always names the op; a
 * pmap that calls a function names it as `callee = @f` in its sorted place.
 */
static void
put_attrs(printer *pr, const ir_op *op)
{
    const ir_module *m = pr->m;
    uint32_t n = 0, need = op->nattr + 2;
    int synth = op->kind == IR_OP_OPAQUE && op->opaque, callee = is_callee(op);
    if (op->nattr == 0 && !synth && !callee)
        return;
    DI_GROW(&pr->order, &pr->corder, need);
    for (uint32_t i = 0; i < op->nattr; i++) {
        if (strcmp(ir_str_get(m, m->attrs[op->attrs + i].key), "op_type") == 0)
            synth = 0;
        pr->order[n++] = i;
    }
    if (synth)
        pr->order[n++] = ORDER_OP_TYPE;
    if (callee)
        pr->order[n++] = ORDER_CALLEE;
    /* Insertion sort: the module keeps lists sorted, so this is one pass. */
    for (uint32_t i = 1; i < n; i++) {
        uint32_t x = pr->order[i], j = i;
        const char *kx = order_key(pr, op, x);
        while (j > 0 && strcmp(order_key(pr, op, pr->order[j - 1]), kx) > 0) {
            pr->order[j] = pr->order[j - 1];
            j--;
        }
        pr->order[j] = x;
    }
    put_lit(&pr->out, " {");
    for (uint32_t i = 0; i < n; i++) {
        const char *key = order_key(pr, op, pr->order[i]);
        if (i)
            put_lit(&pr->out, ", ");
        if (is_bare_id(key))
            put_lit(&pr->out, key);
        else
            put_string(&pr->out, key);
        put_lit(&pr->out, " = ");
        if (pr->order[i] == ORDER_OP_TYPE)
            put_string(&pr->out, ir_str_get(m, op->opaque));
        else if (pr->order[i] == ORDER_CALLEE)
            put_symbol(&pr->out, op->body < m->nregion && m->regions[op->body].parent == 0
                                     ? ir_str_get(m, m->regions[op->body].name)
                                     : "");
        else
            put_attr_value(pr, &m->attrs[op->attrs + pr->order[i]]);
    }
    di_buf_putc(&pr->out, '}');
}

/* ---- ops, regions, functions ---- */

static void print_ops(printer *pr, ir_id r, int level, int depth);

static void
print_op(printer *pr, ir_id opid, int level, int depth)
{
    const ir_module *m = pr->m;
    const ir_op *op = &m->ops[opid];
    di_buf *b = &pr->out;
    const char *name = ir_safe_kind(op->kind) ? ir_opkind_name(op->kind) : "none";

    put_indent(b, level);
    for (uint32_t i = 0; i < op->noutput; i++) {
        if (i)
            put_lit(b, ", ");
        put_value(pr, op->outputs + i);
    }
    if (op->noutput)
        put_lit(b, " = ");
    put_string(b, name);
    di_buf_putc(b, '(');
    for (uint32_t i = 0; i < op->ninput; i++) {
        if (i)
            put_lit(b, ", ");
        put_value(pr, m->refs[op->inputs + i]);
    }
    di_buf_putc(b, ')');
    if (op->body && op->body < m->nregion && !is_callee(op)) {
        const ir_region *body = &m->regions[op->body];
        put_lit(b, " ({\n");
        if (body->narg) {
            put_indent(b, level);
            put_lit(b, "^bb0(");
            put_args(pr, body);
            put_lit(b, "):\n");
        }
        if (depth < PRINT_MAX_DEPTH)
            print_ops(pr, op->body, level + 1, depth + 1);
        body = &m->regions[op->body];
        put_indent(b, level + 1);
        put_lit(b, "\"dist.return\"(");
        for (uint32_t i = 0; i < body->nresult; i++) {
            if (i)
                put_lit(b, ", ");
            put_value(pr, body->results[i]);
        }
        put_lit(b, ") : (");
        put_value_types(pr, body->results, body->nresult);
        put_lit(b, ") -> ()\n");
        put_indent(b, level);
        put_lit(b, "})");
    }
    put_attrs(pr, op);
    put_lit(b, " : (");
    for (uint32_t i = 0; i < op->ninput; i++) {
        if (i)
            put_lit(b, ", ");
        put_type(pr, b, value_type(m, m->refs[op->inputs + i]), 0);
    }
    put_lit(b, ") -> ");
    if (op->noutput == 1) {
        put_type(pr, b, value_type(m, op->outputs), 0);
    } else {
        di_buf_putc(b, '(');
        for (uint32_t i = 0; i < op->noutput; i++) {
            if (i)
                put_lit(b, ", ");
            put_type(pr, b, value_type(m, op->outputs + i), 0);
        }
        di_buf_putc(b, ')');
    }
    if (op->name) {
        put_lit(b, " loc(");
        put_string(b, ir_str_get(m, op->name));
        di_buf_putc(b, ')');
    }
    di_buf_putc(b, '\n');
}

static void
print_ops(printer *pr, ir_id r, int level, int depth)
{
    const ir_module *m = pr->m;
    for (uint32_t i = 0; i < m->regions[r].nop; i++) {
        ir_id op = m->regions[r].ops[i];
        if (op > 0 && op < m->nop)
            print_op(pr, op, level, depth);
    }
}

static void
print_func(printer *pr, ir_id r)
{
    const ir_module *m = pr->m;
    const ir_region *reg = &m->regions[r];
    di_buf *b = &pr->out;

    claims_clear(pr);
    name_region(pr, r, 1, 0);
    name_region(pr, r, 2, 0);

    put_lit(b, "func ");
    put_symbol(b, ir_str_get(m, reg->name));
    di_buf_putc(b, '(');
    put_args(pr, reg);
    di_buf_putc(b, ')');
    if (reg->nresult) {
        put_lit(b, " -> (");
        put_value_types(pr, reg->results, reg->nresult);
        di_buf_putc(b, ')');
    }
    put_lit(b, " {\n");
    print_ops(pr, r, 1, 0);
    reg = &m->regions[r];
    put_lit(b, "  return");
    for (uint32_t i = 0; i < reg->nresult; i++) {
        put_lit(b, i ? ", " : " ");
        put_value(pr, reg->results[i]);
    }
    if (reg->nresult) {
        put_lit(b, " : ");
        put_value_types(pr, reg->results, reg->nresult);
    }
    put_lit(b, "\n}\n");
}

static void
print_mesh(printer *pr, ir_id id)
{
    const ir_module *m = pr->m;
    const ir_mesh *mesh = &m->meshes[id];
    const int64_t *dev = ir_mesh_devices(m, id);
    di_buf *b = &pr->out;
    int dflt = 1;
    put_lit(b, "dist.mesh ");
    put_symbol(b, ir_str_get(m, mesh->name));
    put_lit(b, " = <[");
    for (uint32_t i = 0; i < mesh->rank; i++) {
        if (i)
            put_lit(b, ", ");
        put_i64(b, ir_mesh_shape(m, id)[i]);
    }
    di_buf_putc(b, ']');
    for (uint32_t i = 0; i < mesh->ndevice; i++)
        if (dev[i] != (int64_t)i)
            dflt = 0;
    if (!dflt) {
        put_lit(b, ", devices = [");
        for (uint32_t i = 0; i < mesh->ndevice; i++) {
            if (i)
                put_lit(b, ", ");
            put_i64(b, dev[i]);
        }
        di_buf_putc(b, ']');
    }
    put_lit(b, ">\n");
}

char *
ir_print(const ir_module *m, size_t *len)
{
    printer pr;
    int first = 1;
    char *text;

    memset(&pr, 0, sizeof pr);
    pr.m = m;
    di_buf_init(&pr.out);
    di_buf_init(&pr.types);
    pr.toff = di_xmalloc((m->ntype ? m->ntype : 1) * sizeof *pr.toff);
    pr.tlen = di_xmalloc((m->ntype ? m->ntype : 1) * sizeof *pr.tlen);
    memset(pr.toff, 0xff, (m->ntype ? m->ntype : 1) * sizeof *pr.toff);
    pr.vnum = di_xmalloc((m->nvalue ? m->nvalue : 1) * sizeof *pr.vnum);
    for (uint32_t v = 0; v < m->nvalue; v++)
        pr.vnum[v] = NAME_NONE;

    for (ir_id i = 1; i < m->nmesh; i++)
        print_mesh(&pr, i);
    for (ir_id r = 1; r < m->nregion; r++) {
        if (m->regions[r].parent != 0 || m->regions[r].name == 0)
            continue;
        if (!first || m->nmesh > 1)
            di_buf_putc(&pr.out, '\n');
        first = 0;
        print_func(&pr, r);
    }

    text = di_buf_take(&pr.out, len);
    di_buf_fini(&pr.types);
    di_free(pr.toff);
    di_free(pr.tlen);
    di_free(pr.vnum);
    di_free(pr.claim);
    di_free(pr.order);
    return text;
}
