/*
 * parse.c: the parser of the IR text form (docs/ir-text.md), MLIR generic
 * syntax with a `dist` dialect. It reads what ir_print writes, and the form
 * written for the original DistIR's MLIR importer (MPI op names, `func`
 * without a dialect prefix, operations spread over several lines).
 *
 * The parser is a recursive descent over characters rather than over tokens,
 * because MLIR's lexical rules depend on the context (`4x6xf32` is a shape in
 * a type, `%0` a value name, `0` a number). It builds the module directly:
 * values, ops and regions are created as they are read, and every op and
 * value gets its source position in m->oplocs / m->valuelocs so that the
 * verifier can report line and column. Types are taken exactly as written;
 * nothing is inferred here, the verifier compares later.
 *
 * Every error is reported once, as "LINE:COL: message" with code DI_EPARSE,
 * and unwinds by return codes to ir_parse, which frees the partial module.
 * The input is untrusted: it need not be NUL-terminated, sizes and nesting
 * are bounded, and no input makes the parser crash or leak.
 */
#include "ir/ir.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PARSE_MAX_TEXT ((size_t)1 << 30)  /* bytes of input */
#define PARSE_MAX_DEPTH 64                /* region nesting */
#define PARSE_MAX_TYPE_DEPTH 64           /* tuple nesting */
#define PARSE_MAX_TUPLE (1u << 20)        /* elements of one tuple type */
#define PARSE_MAX_GROUP (1u << 16)        /* results of one %name:N group */
#define PARSE_MAX_MESH (1u << 20)         /* devices of one mesh */
#define PARSE_MAX_MESH_TOTAL (1u << 22)   /* devices of all meshes: no short line may
                                             allocate megabytes of device ids */
#define PARSE_MAX_DIM ((uint64_t)1 << 62) /* exclusive bound of a dimension */
#define PARSE_MAX_NUMBER 400              /* characters of one numeric literal */

/* ---- a map from string ids to ids, emptied in O(1) by a generation count ---- */

typedef struct symslot {
    uint32_t gen; /* the slot is in use when gen equals the map's */
    ir_id key;
    ir_id val;
} symslot;

typedef struct symmap {
    symslot *slot;
    uint32_t cap; /* a power of two, or 0 */
    uint32_t count;
    uint32_t gen;
} symmap;

static uint32_t
mix(uint32_t k)
{
    k ^= k >> 16;
    k *= 0x7feb352du;
    k ^= k >> 15;
    k *= 0x846ca68bu;
    k ^= k >> 16;
    return k;
}

/* The slot holding key, or the empty slot where it would go. Needs cap > 0. */
static symslot *
symmap_slot(const symmap *t, ir_id key)
{
    uint32_t mask = t->cap - 1, h = mix(key) & mask;
    while (t->slot[h].gen == t->gen && t->slot[h].key != key)
        h = (h + 1) & mask;
    return &t->slot[h];
}

static int
symmap_get(const symmap *t, ir_id key, ir_id *val)
{
    const symslot *s;
    if (t->cap == 0)
        return 0;
    s = symmap_slot(t, key);
    if (s->gen != t->gen)
        return 0;
    *val = s->val;
    return 1;
}

static void
symmap_put(symmap *t, ir_id key, ir_id val)
{
    symslot *s;
    if ((t->count + 1) * 2 > t->cap) {
        symslot *old = t->slot;
        uint32_t oldcap = t->cap, oldgen = t->gen;
        t->cap = oldcap ? oldcap * 2 : 64;
        t->slot = di_xcalloc(t->cap, sizeof *t->slot);
        t->gen = 1;
        for (uint32_t i = 0; i < oldcap; i++) {
            if (old[i].gen != oldgen)
                continue;
            s = symmap_slot(t, old[i].key);
            *s = old[i];
            s->gen = 1;
        }
        di_free(old);
    }
    s = symmap_slot(t, key);
    if (s->gen != t->gen) {
        s->gen = t->gen;
        s->key = key;
        t->count++;
    }
    s->val = val;
}

static void
symmap_clear(symmap *t)
{
    t->count = 0;
    if (++t->gen == 0) {
        if (t->cap)
            memset(t->slot, 0, t->cap * sizeof *t->slot);
        t->gen = 1;
    }
}

static void
symmap_fini(symmap *t)
{
    di_free(t->slot);
    memset(t, 0, sizeof *t);
}

/* ---- the parser's state ---- */

/* A pmap's `callee = @name`, resolved once every function is known. */
struct callee_use {
    ir_id op;
    ir_id name;
    size_t off; /* text offset of '@' */
};

/* One entry of an op's result list: %name, or %name:N naming name#0 .. name#N-1. */
typedef struct group {
    ir_id name;
    uint32_t count;
    int multi;
    size_t off; /* text offset, for errors */
    ir_loc loc;
} group;

typedef struct parser {
    const char *s;
    size_t n;
    size_t pos;
    uint32_t line;    /* line of pos, kept by skip_ws */
    size_t linestart; /* offset of the first byte of that line */
    int failed;
    ir_module *m;
    di_error *err;

    symmap values; /* per function: value name -> value id (0 while being defined) */
    symmap funcs;  /* function name -> region */
    /* `callee = @f` of the op being read (0: none), and every callee to resolve at the end */
    ir_id callee;
    size_t calleeoff;
    struct callee_use *callees;
    uint32_t ncallee, ccallee;
    symmap meshes; /* mesh name -> mesh id */
    uint64_t mesh_devices; /* devices in the meshes so far */

    int depth;                          /* region nesting: 0 in a function body */
    ir_id regions[PARSE_MAX_DEPTH + 1]; /* the enclosing regions, [0] the function */

    di_buf sbuf; /* the last name or decoded string literal */

    /* Stacks shared by nested constructs; each user pops back to its base. */
    ir_id *ids;
    uint32_t nids, cids;
    group *groups;
    uint32_t ngroups, cgroups;
    ir_attr *attrs;
    uint32_t nattrs, cattrs;
    size_t *attroff; /* parallel to attrs: text offset of each key */
    uint32_t cattroff;
    int64_t *lints;
    uint32_t nlints, clints;
    double *lfloats;
    uint32_t nlfloats, clfloats;
} parser;

static int
is_digit(int c)
{
    return c >= '0' && c <= '9';
}

static int
is_alpha(int c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

/* MLIR's bare-id: (letter | _) (letter | digit | _ $ .)* */
static int
is_bare_start(int c)
{
    return is_alpha(c) || c == '_';
}

static int
is_bare_char(int c)
{
    return is_alpha(c) || is_digit(c) || c == '_' || c == '$' || c == '.';
}

/* MLIR's suffix-id (value names): digit+ | (letter | _ $ . -) (letter | digit | _ $ . -)* */
static int
is_suffix_char(int c)
{
    return is_bare_char(c) || c == '-';
}

static int
is_hex(int c)
{
    return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static int
hex_value(int c)
{
    if (is_digit(c))
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return c - 'A' + 10;
}

static int
cur(const parser *p)
{
    return p->pos < p->n ? (unsigned char)p->s[p->pos] : -1;
}

static int
char_at(const parser *p, size_t off)
{
    return off < p->n ? (unsigned char)p->s[off] : -1;
}

/* ---- errors ---- */

/* Describes the text at off for "found ..." in messages. */
static const char *
describe(const parser *p, size_t off, char *buf, size_t size)
{
    size_t e = off;
    int c = char_at(p, off);
    if (c < 0)
        return "end of input";
    if (is_bare_char(c) || c == '-') {
        if (c == '-' && char_at(p, off + 1) == '>')
            e = off + 2;
        else
            while (e < p->n && is_suffix_char((unsigned char)p->s[e]) && e - off < 32)
                e++;
    } else if (c == '%' || c == '@' || c == '^' || c == '!') {
        e = off + 1;
        while (e < p->n && is_suffix_char((unsigned char)p->s[e]) && e - off < 32)
            e++;
    } else if (c == '"') {
        e = off + 1;
        while (e < p->n && p->s[e] != '"' && p->s[e] != '\n' && e - off < 32)
            e++;
        if (e < p->n && p->s[e] == '"')
            e++;
    } else if (c < 0x20 || c >= 0x7f) {
        snprintf(buf, size, "byte 0x%02X", (unsigned)c);
        return buf;
    } else {
        e = off + 1;
    }
    for (size_t i = off; i < e; i++)
        if ((unsigned char)p->s[i] < 0x20 || (unsigned char)p->s[i] >= 0x7f)
            e = i;
    snprintf(buf, size, "'%.*s'", (int)(e - off), p->s + off);
    return buf;
}

/* Reports an error at text offset off; only the first error of a parse is kept. */
__attribute__((format(printf, 3, 4))) static int
fail(parser *p, size_t off, const char *fmt, ...)
{
    va_list ap;
    char msg[900];
    uint32_t line = 1;
    size_t ls = 0;
    if (p->failed)
        return -1;
    p->failed = 1;
    if (off > p->n)
        off = p->n;
    for (const char *q = p->s, *end = p->s + off; (q = memchr(q, '\n', (size_t)(end - q)));) {
        line++;
        q++;
        ls = (size_t)(q - p->s);
    }
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    di_error_at(p->err, DI_EPARSE, line, (uint32_t)(off - ls + 1), "%s", msg);
    return -1;
}

/* "expected WHAT, found X" at the current position. */
static int
expected(parser *p, const char *what)
{
    char buf[64];
    return fail(p, p->pos, "expected %s, found %s", what, describe(p, p->pos, buf, sizeof buf));
}

/* ---- lexical helpers ---- */

static void
skip_ws(parser *p)
{
    while (p->pos < p->n) {
        char c = p->s[p->pos];
        if (c == '\n') {
            p->pos++;
            p->line++;
            p->linestart = p->pos;
        } else if (c == ' ' || c == '\t' || c == '\r') {
            p->pos++;
        } else if (c == '/' && p->pos + 1 < p->n && p->s[p->pos + 1] == '/') {
            const char *nl = memchr(p->s + p->pos, '\n', p->n - p->pos);
            p->pos = nl ? (size_t)(nl - p->s) : p->n;
        } else {
            break;
        }
    }
}

static int
peek(parser *p)
{
    skip_ws(p);
    return cur(p);
}

static int
accept(parser *p, char c)
{
    if (peek(p) == (unsigned char)c) {
        p->pos++;
        return 1;
    }
    return 0;
}

/* Expects the character c; ctx ("after operands") completes the message. */
static int
expect(parser *p, char c, const char *ctx)
{
    char what[80];
    if (accept(p, c))
        return 0;
    snprintf(what, sizeof what, "'%c'%s%s", c, *ctx ? " " : "", ctx);
    return expected(p, what);
}

static int
accept_arrow(parser *p)
{
    if (peek(p) == '-' && char_at(p, p->pos + 1) == '>') {
        p->pos += 2;
        return 1;
    }
    return 0;
}

/* Length of the bare-id at off (0 if none). */
static size_t
bare_len(const parser *p, size_t off)
{
    size_t e = off;
    if (e >= p->n || !is_bare_start((unsigned char)p->s[e]))
        return 0;
    while (e < p->n && is_bare_char((unsigned char)p->s[e]))
        e++;
    return e - off;
}

/* Is the bare-id at off exactly word? */
static int
word_at(const parser *p, size_t off, const char *word)
{
    size_t len = strlen(word);
    return bare_len(p, off) == len && memcmp(p->s + off, word, len) == 0;
}

static int
accept_word(parser *p, const char *word)
{
    skip_ws(p);
    if (word_at(p, p->pos, word)) {
        p->pos += strlen(word);
        return 1;
    }
    return 0;
}

/*
 * Reads a string literal at pos into sbuf, decoding the escapes \" \\ \n \t
 * and \XX (two hex digits). A string may not span lines or hold a NUL byte.
 */
static int
read_string(parser *p)
{
    size_t at = p->pos, i = at + 1;
    di_buf_reset(&p->sbuf);
    for (;;) {
        size_t run = i;
        while (i < p->n && p->s[i] != '"' && p->s[i] != '\\' && p->s[i] != '\n' &&
               p->s[i] != '\0')
            i++;
        di_buf_put(&p->sbuf, p->s + run, i - run);
        if (i >= p->n || p->s[i] == '\n')
            return fail(p, at, "unterminated string");
        if (p->s[i] == '\0')
            return fail(p, i, "NUL byte in a string");
        if (p->s[i] == '"')
            break;
        /* A backslash. */
        switch (char_at(p, i + 1)) {
        case '"':
            di_buf_putc(&p->sbuf, '"');
            i += 2;
            break;
        case '\\':
            di_buf_putc(&p->sbuf, '\\');
            i += 2;
            break;
        case 'n':
            di_buf_putc(&p->sbuf, '\n');
            i += 2;
            break;
        case 't':
            di_buf_putc(&p->sbuf, '\t');
            i += 2;
            break;
        default:
            if (is_hex(char_at(p, i + 1)) && is_hex(char_at(p, i + 2))) {
                int b = hex_value(p->s[i + 1]) * 16 + hex_value(p->s[i + 2]);
                if (b == 0)
                    return fail(p, i, "NUL byte in a string");
                di_buf_putc(&p->sbuf, (char)b);
                i += 3;
                break;
            }
            return fail(p, i, "invalid escape in a string");
        }
    }
    p->pos = i + 1;
    return 0;
}

/*
 * Reads the name that follows a sigil (%, @, ^) into sbuf: a string literal,
 * or an identifier (MLIR's suffix-id for values and blocks, bare-id for
 * symbols). No space may separate the sigil and the name.
 */
static int
read_name(parser *p, int suffix, const char *what)
{
    size_t at = p->pos, e = at;
    int c = char_at(p, at);
    di_buf_reset(&p->sbuf);
    if (c == '"') {
        if (read_string(p) != 0)
            return -1;
        /* Symbols may be "" (ir_func_new accepts it); values may not. */
        if (p->sbuf.len == 0 && suffix)
            return fail(p, at, "empty %s name", what);
        return 0;
    }
    if (suffix && is_digit(c)) {
        while (e < p->n && is_digit((unsigned char)p->s[e]))
            e++;
    } else if (suffix ? (c >= 0 && is_suffix_char(c)) : (c >= 0 && is_bare_start(c))) {
        e++;
        while (e < p->n && (suffix ? is_suffix_char((unsigned char)p->s[e])
                                   : is_bare_char((unsigned char)p->s[e])))
            e++;
    } else {
        char buf[64];
        return fail(p, at, "expected a %s name, found %s", what, describe(p, at, buf, sizeof buf));
    }
    di_buf_put(&p->sbuf, p->s + at, e - at);
    p->pos = e;
    return 0;
}

/* Reads an unsigned decimal at pos (no sign, no space skipped); fails above max. */
static int
read_uint(parser *p, uint64_t max, uint64_t *out, const char *what)
{
    size_t at = p->pos;
    uint64_t v = 0;
    if (!is_digit(cur(p))) {
        char buf[80];
        snprintf(buf, sizeof buf, "a %s", what);
        return expected(p, buf);
    }
    while (is_digit(cur(p))) {
        uint64_t d = (uint64_t)(p->s[p->pos] - '0');
        if (v > (max - d) / 10) {
            while (is_digit(cur(p)))
                p->pos++;
            return fail(p, at, "%s %.*s out of range (the maximum is %llu)", what,
                        (int)(p->pos - at > 40 ? 40 : p->pos - at), p->s + at,
                        (unsigned long long)max);
        }
        v = v * 10 + d;
        p->pos++;
    }
    *out = v;
    return 0;
}

typedef struct number {
    int isfloat;
    int64_t i;
    double f;
} number;

/*
 * Reads an integer or a float: -?digits, with a fraction or an exponent for
 * a float, or inf, -inf, nan (as di_buf_double prints them).
 */
static int
parse_number(parser *p, number *num)
{
    size_t at, e;
    int neg = 0, isf = 0;
    skip_ws(p);
    at = e = p->pos;
    memset(num, 0, sizeof *num);
    if (char_at(p, e) == '-') {
        neg = 1;
        e++;
    }
    if (word_at(p, e, "inf") || word_at(p, e, "nan")) {
        num->isfloat = 1;
        if (p->s[e] == 'n')
            num->f = NAN;
        else
            num->f = neg ? -INFINITY : INFINITY;
        p->pos = e + 3;
        return 0;
    }
    if (!is_digit(char_at(p, e)))
        return expected(p, "a number");
    while (is_digit(char_at(p, e)))
        e++;
    if (char_at(p, e) == '.') {
        isf = 1;
        e++;
        while (is_digit(char_at(p, e)))
            e++;
    }
    if (char_at(p, e) == 'e' || char_at(p, e) == 'E') {
        isf = 1;
        e++;
        if (char_at(p, e) == '+' || char_at(p, e) == '-')
            e++;
        if (!is_digit(char_at(p, e)))
            return fail(p, e, "expected the digits of an exponent");
        while (is_digit(char_at(p, e)))
            e++;
    }
    if (is_bare_char(char_at(p, e))) {
        char buf[64];
        return fail(p, e, "unexpected %s after a number", describe(p, e, buf, sizeof buf));
    }
    if (e - at > PARSE_MAX_NUMBER)
        return fail(p, at, "number longer than %d characters", PARSE_MAX_NUMBER);
    if (isf) {
        char tmp[PARSE_MAX_NUMBER + 1];
        memcpy(tmp, p->s + at, e - at);
        tmp[e - at] = '\0';
        num->isfloat = 1;
        num->f = strtod(tmp, NULL);
    } else {
        uint64_t v = 0, max = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
        for (size_t i = at + (size_t)neg; i < e; i++) {
            uint64_t d = (uint64_t)(p->s[i] - '0');
            if (v > (max - d) / 10)
                return fail(p, at, "integer %.*s out of range", (int)(e - at > 40 ? 40 : e - at),
                            p->s + at);
            v = v * 10 + d;
        }
        num->i = neg ? (int64_t)(0 - v) : (int64_t)v;
    }
    p->pos = e;
    return 0;
}

/* ---- stacks ---- */

static void
push_id(parser *p, ir_id id)
{
    DI_GROW(&p->ids, &p->cids, p->nids + 1);
    p->ids[p->nids++] = id;
}

/* ---- types ---- */

static int parse_type(parser *p, ir_id *out, int depth);

/* Reads `4x6xf32` (or `f32` for rank 0) at pos. */
static int
parse_shape(parser *p, uint32_t *rank, int64_t *dims, ir_dtype *dt)
{
    *rank = 0;
    skip_ws(p);
    for (;;) {
        size_t at = p->pos;
        int c = cur(p);
        if (is_digit(c)) {
            uint64_t v;
            if (read_uint(p, PARSE_MAX_DIM - 1, &v, "dimension") != 0)
                return -1;
            if (*rank == IR_MAX_RANK)
                return fail(p, at, "tensor rank exceeds %d", IR_MAX_RANK);
            dims[(*rank)++] = (int64_t)v;
            if (cur(p) != 'x')
                return expected(p, "'x' after a dimension");
            p->pos++;
        } else if (c >= 0 && is_alpha(c)) {
            size_t e = at;
            while (e < p->n &&
                   (is_alpha((unsigned char)p->s[e]) || is_digit((unsigned char)p->s[e])))
                e++;
            *dt = ir_dtype_from_name(p->s + at, e - at);
            if (*dt == IR_DTYPE_NONE)
                return fail(p, at, "unknown element type '%.*s'", (int)(e - at > 32 ? 32 : e - at),
                            p->s + at);
            p->pos = e;
            return 0;
        } else if (c == '?') {
            return fail(p, at, "dynamic dimensions are not supported");
        } else {
            return expected(p, "a dimension or an element type");
        }
    }
}

/* Looks up the mesh named in sbuf, reported at off when unknown. */
static int
find_mesh(parser *p, size_t off, ir_id *mesh)
{
    ir_id name = ir_str_find(p->m, p->sbuf.data, p->sbuf.len);
    if (name == 0 || !symmap_get(&p->meshes, name, mesh))
        return fail(p, off, "unknown mesh '@%.64s'", p->sbuf.data);
    return 0;
}

/* Reads `[R, S[1], P(sum)]` for a tensor of the given rank on mesh. */
static int
parse_placements(parser *p, ir_id mesh, uint32_t rank, int64_t *place)
{
    uint32_t np = 0, want = p->m->meshes[mesh].rank;
    size_t open;
    skip_ws(p);
    open = p->pos;
    if (expect(p, '[', "to open the placements") != 0)
        return -1;
    if (!accept(p, ']')) {
        do {
            size_t at;
            int64_t v;
            skip_ws(p);
            at = p->pos;
            if (np == want)
                return fail(p, at, "too many placements: mesh '@%s' has %u axes",
                            ir_str_get(p->m, p->m->meshes[mesh].name), want);
            if (accept_word(p, "R")) {
                v = IR_PLACE_R;
            } else if (accept_word(p, "S")) {
                uint64_t d;
                if (expect(p, '[', "after S") != 0)
                    return -1;
                skip_ws(p);
                at = p->pos;
                if (read_uint(p, IR_MAX_RANK, &d, "split dimension") != 0)
                    return -1;
                if (d >= rank)
                    return fail(p, at, "split dimension %llu out of range for a rank-%u tensor",
                                (unsigned long long)d, rank);
                if (expect(p, ']', "after the split dimension") != 0)
                    return -1;
                v = (int64_t)d;
            } else if (accept_word(p, "P")) {
                if (expect(p, '(', "after P") != 0)
                    return -1;
                if (accept_word(p, "sum"))
                    v = IR_PLACE_PSUM;
                else if (accept_word(p, "max"))
                    v = IR_PLACE_PMAX;
                else
                    return expected(p, "'sum' or 'max'");
                if (expect(p, ')', "after the reduction") != 0)
                    return -1;
            } else {
                return expected(p, "a placement (R, S[dim], P(sum) or P(max))");
            }
            place[np++] = v;
        } while (accept(p, ','));
        if (expect(p, ']', "after the placements") != 0)
            return -1;
    }
    if (np != want)
        return fail(p, open, "mesh '@%s' has %u ax%s but %u placement%s given",
                    ir_str_get(p->m, p->m->meshes[mesh].name), want, want == 1 ? "is" : "es", np,
                    np == 1 ? " was" : "s were");
    return 0;
}

/* After `!dist.tensor` or `!dist.dtensor`: the bracketed part. */
static int
parse_tensor(parser *p, ir_id *out, int distributed)
{
    int64_t dims[IR_MAX_RANK], place[IR_MAX_RANK];
    uint32_t rank;
    ir_dtype dt = IR_DTYPE_NONE;
    if (expect(p, '<', "after the type name") != 0 || parse_shape(p, &rank, dims, &dt) != 0)
        return -1;
    if (distributed) {
        ir_id mesh;
        size_t at;
        if (expect(p, ',', "after the element type") != 0)
            return -1;
        skip_ws(p);
        at = p->pos;
        if (expect(p, '@', "before the mesh name") != 0 || read_name(p, 0, "mesh") != 0 ||
            find_mesh(p, at, &mesh) != 0)
            return -1;
        if (expect(p, ',', "after the mesh") != 0 || parse_placements(p, mesh, rank, place) != 0 ||
            expect(p, '>', "to close the type") != 0)
            return -1;
        *out = ir_type_dtensor(p->m, dt, rank, dims, mesh, place);
        return 0;
    }
    if (accept(p, ',')) {
        int c = peek(p);
        if (is_digit(c)) {
            uint64_t dev;
            if (read_uint(p, INT32_MAX, &dev, "device id") != 0)
                return -1;
            if (expect(p, '>', "to close the type") != 0)
                return -1;
            *out = ir_type_tensor(p->m, dt, rank, dims, (int32_t)dev);
            return 0;
        }
        if (c == '"') {
            if (read_string(p) != 0)
                return -1;
        } else if (c >= 0 && is_bare_start(c)) {
            size_t len = bare_len(p, p->pos);
            di_buf_reset(&p->sbuf);
            di_buf_put(&p->sbuf, p->s + p->pos, len);
            p->pos += len;
        } else {
            return expected(p, "a device id or a device variable");
        }
        {
            ir_id var = ir_strn(p->m, p->sbuf.data, p->sbuf.len);
            if (expect(p, '>', "to close the type") != 0)
                return -1;
            *out = ir_type_tensor_var(p->m, dt, rank, dims, var);
        }
        return 0;
    }
    if (expect(p, '>', "to close the type") != 0)
        return -1;
    *out = ir_type_tensor(p->m, dt, rank, dims, IR_DEVICE_NONE);
    return 0;
}

static int
parse_tuple(parser *p, ir_id *out, int depth)
{
    uint32_t base = p->nids;
    if (expect(p, '<', "after 'tuple'") != 0)
        return -1;
    if (!accept(p, '>')) {
        do {
            ir_id t;
            if (p->nids - base == PARSE_MAX_TUPLE)
                return fail(p, p->pos, "tuple with more than %u elements", PARSE_MAX_TUPLE);
            if (parse_type(p, &t, depth + 1) != 0)
                return -1;
            push_id(p, t);
        } while (accept(p, ','));
        if (expect(p, '>', "to close the tuple") != 0)
            return -1;
    }
    *out = ir_type_tuple(p->m, p->nids - base, p->ids + base);
    p->nids = base;
    return 0;
}

static int
parse_type(parser *p, ir_id *out, int depth)
{
    size_t at;
    skip_ws(p);
    at = p->pos;
    if (depth > PARSE_MAX_TYPE_DEPTH)
        return fail(p, at, "types nested deeper than %d levels", PARSE_MAX_TYPE_DEPTH);
    if (cur(p) == '!') {
        size_t len = bare_len(p, at + 1);
        p->pos = at + 1 + len;
        if (len == 11 && memcmp(p->s + at + 1, "dist.tensor", 11) == 0)
            return parse_tensor(p, out, 0);
        if (len == 12 && memcmp(p->s + at + 1, "dist.dtensor", 12) == 0)
            return parse_tensor(p, out, 1);
        return fail(p, at, "unknown type '!%.*s'", (int)(len > 40 ? 40 : len), p->s + at + 1);
    }
    if (accept_word(p, "tuple"))
        return parse_tuple(p, out, depth);
    if (accept_word(p, "none")) {
        *out = 0;
        return 0;
    }
    return expected(p, "a type");
}

/* Pushes a parenthesised, possibly empty list of types onto ids. */
static int
parse_type_list(parser *p, const char *ctx)
{
    if (expect(p, '(', ctx) != 0)
        return -1;
    if (accept(p, ')'))
        return 0;
    do {
        ir_id t;
        if (parse_type(p, &t, 0) != 0)
            return -1;
        push_id(p, t);
    } while (accept(p, ','));
    return expect(p, ')', "after the types");
}

/* `-> (t, ...)`, `-> ()` or `-> t`: pushes the types onto ids. */
static int
parse_result_types(parser *p)
{
    ir_id t;
    if (peek(p) == '(')
        return parse_type_list(p, "");
    if (parse_type(p, &t, 0) != 0)
        return -1;
    push_id(p, t);
    return 0;
}

/* A short printed form of type t, for messages (ir_print writes the full one). */
static void
type_write(const ir_module *m, ir_id t, di_buf *b, int depth)
{
    const ir_type *ty;
    if (t == 0 || t >= m->ntype) {
        di_buf_puts(b, "none");
        return;
    }
    if (b->len > 160 || depth > 4) {
        di_buf_puts(b, "...");
        return;
    }
    ty = &m->types[t];
    if (ty->kind == IR_TYPE_TUPLE) {
        di_buf_puts(b, "tuple<");
        for (uint32_t i = 0; i < ty->nelem; i++) {
            if (i)
                di_buf_puts(b, ", ");
            type_write(m, m->refs[ty->elems + i], b, depth + 1);
        }
        di_buf_putc(b, '>');
        return;
    }
    di_buf_puts(b, ty->mesh ? "!dist.dtensor<" : "!dist.tensor<");
    for (uint32_t i = 0; i < ty->rank; i++)
        di_buf_printf(b, "%lldx", (long long)m->ints[ty->dims + i]);
    di_buf_puts(b, ir_dtype_name((ir_dtype)ty->dtype));
    if (ty->mesh)
        di_buf_printf(b, ", @%s, ...", ir_str_get(m, m->meshes[ty->mesh].name));
    else if (ty->devvar)
        di_buf_printf(b, ", %s", ir_str_get(m, ty->devvar));
    else if (ty->device >= 0)
        di_buf_printf(b, ", %d", (int)ty->device);
    di_buf_putc(b, '>');
}

static void
type_text(const ir_module *m, ir_id t, char *buf, size_t size)
{
    di_buf b;
    di_buf_init(&b);
    type_write(m, t, &b, 0);
    snprintf(buf, size, "%s", b.data);
    di_buf_fini(&b);
}

/* ---- values ---- */

/* Reserves a value name in the function: a redefinition is an error. */
static int
reserve_name(parser *p, ir_id name, size_t at)
{
    ir_id v;
    if (symmap_get(&p->values, name, &v))
        return fail(p, at, "redefinition of value '%%%.64s'", ir_str_get(p->m, name));
    symmap_put(&p->values, name, 0);
    return 0;
}

/* Reads `%name` or `%name#N` and resolves it in the current region. */
static int
parse_use(parser *p, ir_id *out)
{
    ir_module *m = p->m;
    ir_id name, v = 0;
    size_t at;
    skip_ws(p);
    at = p->pos;
    if (cur(p) != '%')
        return expected(p, "a value");
    p->pos++;
    if (read_name(p, 1, "value") != 0)
        return -1;
    if (cur(p) == '#') {
        size_t d = ++p->pos;
        while (is_digit(cur(p)) && p->pos - d < 10)
            p->pos++;
        if (p->pos == d)
            return expected(p, "a result number after '#'");
        di_buf_putc(&p->sbuf, '#');
        di_buf_put(&p->sbuf, p->s + d, p->pos - d);
    }
    name = ir_str_find(m, p->sbuf.data, p->sbuf.len);
    if (name == 0 || !symmap_get(&p->values, name, &v) || v == 0)
        return fail(p, at, "use of undefined value '%%%.64s'", p->sbuf.data);
    if (m->values[v].region != p->regions[p->depth]) {
        for (int d = p->depth - 1; d >= 0; d--)
            if (p->regions[d] == m->values[v].region)
                return fail(p, at,
                            "value '%%%.64s' is defined outside this region; a region may only "
                            "use its arguments and values defined in it",
                            p->sbuf.data);
        return fail(p, at, "value '%%%.64s' is defined in another region and not visible here",
                    p->sbuf.data);
    }
    *out = v;
    return 0;
}

/* Fails at off when value v does not have type t; sig names a function signature. */
static int
check_type(parser *p, ir_id v, ir_id t, size_t off, const char *sig)
{
    ir_module *m = p->m;
    char a[200], b[200];
    if (m->values[v].type == t)
        return 0;
    type_text(m, m->values[v].type, a, sizeof a);
    type_text(m, t, b, sizeof b);
    if (sig)
        return fail(p, off, "'%%%.64s' has type %s, but the signature of '@%.64s' declares %s",
                    ir_str_get(m, m->values[v].name), a, sig, b);
    return fail(p, off, "'%%%.64s' has type %s, not %s", ir_str_get(m, m->values[v].name), a, b);
}

/*
 * Reads types separated by ',' for the nval values at ids[vbase..], checking
 * each against its value's type where it is written; stores the count in *n.
 */
static int
parse_types_of(parser *p, uint32_t vbase, uint32_t nval, const char *what, uint32_t *n)
{
    *n = 0;
    do {
        ir_id t;
        size_t at;
        skip_ws(p);
        at = p->pos;
        if (parse_type(p, &t, 0) != 0)
            return -1;
        if (*n == nval)
            return fail(p, at, "more types than %s (%u)", what, nval);
        if (check_type(p, p->ids[vbase + *n], t, at, NULL) != 0)
            return -1;
        (*n)++;
    } while (accept(p, ','));
    return 0;
}

/* ---- attributes ---- */

/* Pushes an attribute and the text offset of its key. */
static void
push_attr(parser *p, const ir_attr *a, size_t off)
{
    DI_GROW(&p->attrs, &p->cattrs, p->nattrs + 1);
    DI_GROW(&p->attroff, &p->cattroff, p->nattrs + 1);
    p->attroff[p->nattrs] = off;
    p->attrs[p->nattrs++] = *a;
}

static uint32_t
pool_ints(ir_module *m, const int64_t *v, uint32_t n)
{
    uint32_t off = m->nint;
    DI_GROW(&m->ints, &m->cint, (size_t)m->nint + n);
    if (n)
        memcpy(m->ints + off, v, n * sizeof *v);
    m->nint += n;
    return off;
}

static uint32_t
pool_floats(ir_module *m, const double *v, uint32_t n)
{
    uint32_t off = m->nfloat;
    DI_GROW(&m->floats, &m->cfloat, (size_t)m->nfloat + n);
    if (n)
        memcpy(m->floats + off, v, n * sizeof *v);
    m->nfloat += n;
    return off;
}

static void
push_list_number(parser *p, const number *num)
{
    DI_GROW(&p->lints, &p->clints, p->nlints + 1);
    DI_GROW(&p->lfloats, &p->clfloats, p->nlfloats + 1);
    p->lints[p->nlints++] = num->i;
    p->lfloats[p->nlfloats++] = num->isfloat ? num->f : (double)num->i;
}

/* Stores the list gathered in lints/lfloats as INTS or FLOATS. */
static void
finish_list(parser *p, ir_attr *a, int isfloat)
{
    a->n = p->nlints;
    if (isfloat) {
        a->kind = IR_ATTR_FLOATS;
        a->off = pool_floats(p->m, p->lfloats, p->nlfloats);
    } else {
        a->kind = IR_ATTR_INTS;
        a->off = pool_ints(p->m, p->lints, p->nlints);
    }
}

/* `[1, 2]` or `[1.5, 2.0]`. */
static int
parse_list(parser *p, ir_attr *a)
{
    int isfloat = 0;
    p->nlints = p->nlfloats = 0;
    if (expect(p, '[', "") != 0)
        return -1;
    if (!accept(p, ']')) {
        do {
            number num;
            if (parse_number(p, &num) != 0)
                return -1;
            isfloat |= num.isfloat;
            push_list_number(p, &num);
        } while (accept(p, ','));
        if (expect(p, ']', "to close the list") != 0)
            return -1;
    }
    finish_list(p, a, isfloat);
    return 0;
}

/* MLIR's dense arrays: `array<i64: 1, 2>`, `array<f64: 0.5>`, `array<f64>`. */
static int
parse_array(parser *p, ir_attr *a)
{
    size_t at;
    ir_dtype dt;
    int isfloat;
    p->nlints = p->nlfloats = 0;
    if (expect(p, '<', "after 'array'") != 0)
        return -1;
    skip_ws(p);
    at = p->pos;
    dt = ir_dtype_from_name(p->s + at, bare_len(p, at));
    if (dt == IR_DTYPE_NONE)
        return expected(p, "an element type");
    p->pos += bare_len(p, at);
    isfloat = ir_dtype_is_float(dt);
    if (accept(p, ':')) {
        do {
            number num;
            skip_ws(p);
            at = p->pos;
            if (parse_number(p, &num) != 0)
                return -1;
            if (num.isfloat && !isfloat)
                return fail(p, at, "expected an integer in an integer array");
            push_list_number(p, &num);
        } while (accept(p, ','));
    }
    if (expect(p, '>', "to close the array") != 0)
        return -1;
    finish_list(p, a, isfloat);
    return 0;
}

/* `<"0xHEX">` after `dense`: the bytes go to p->sbuf. */
static int
parse_dense_bytes(parser *p)
{
    size_t at, i, ndig;
    if (expect(p, '<', "after 'dense'") != 0)
        return -1;
    skip_ws(p);
    at = p->pos;
    if (cur(p) != '"' || char_at(p, at + 1) != '0' ||
        (char_at(p, at + 2) != 'x' && char_at(p, at + 2) != 'X'))
        return expected(p, "a hexadecimal string \"0x...\"");
    for (i = at + 3; i < p->n && is_hex((unsigned char)p->s[i]); i++)
        ;
    if (char_at(p, i) != '"')
        return fail(p, i, "expected a hexadecimal digit or '\"'");
    ndig = i - (at + 3);
    if (ndig % 2)
        return fail(p, at, "odd number of hexadecimal digits");
    if (p->m->ndata + ndig / 2 > UINT32_MAX)
        return fail(p, at, "constant data larger than 4 GiB");
    di_buf_reset(&p->sbuf);
    for (size_t k = 0; k < ndig / 2; k++) {
        char x = (char)(hex_value(p->s[at + 3 + 2 * k]) * 16 + hex_value(p->s[at + 4 + 2 * k]));
        di_buf_putc(&p->sbuf, x);
    }
    p->pos = i + 1;
    return expect(p, '>', "to close dense<...>");
}

/* `dense<"0xHEX"> : type`: raw little-endian bytes. */
static int
parse_dense(parser *p, ir_attr *a)
{
    ir_module *m = p->m;
    ir_id type;
    if (parse_dense_bytes(p) != 0)
        return -1;
    a->kind = IR_ATTR_TENSOR;
    a->n = (uint32_t)p->sbuf.len;
    a->off = (uint32_t)m->ndata;
    DI_GROW(&m->data, &m->cdata, m->ndata + a->n);
    if (a->n)
        memcpy(m->data + m->ndata, p->sbuf.data, a->n);
    m->ndata += a->n;
    if (expect(p, ':', "after dense<...>") != 0 || parse_type(p, &type, 0) != 0)
        return -1;
    a->i = type;
    return 0;
}

static int
parse_attr_value(parser *p, ir_attr *a)
{
    int c = peek(p);
    size_t at = p->pos;
    if (c == '"') {
        if (read_string(p) != 0)
            return -1;
        a->kind = IR_ATTR_STRING;
        a->s = ir_strn(p->m, p->sbuf.data, p->sbuf.len);
        return 0;
    }
    if (c == '[')
        return parse_list(p, a);
    if (c == '@') {
        p->pos++;
        if (read_name(p, 0, "mesh") != 0 || find_mesh(p, at, &a->s) != 0)
            return -1;
        a->kind = IR_ATTR_MESH;
        return 0;
    }
    if (accept_word(p, "dense"))
        return parse_dense(p, a);
    if (accept_word(p, "array"))
        return parse_array(p, a);
    if (accept_word(p, "true") || accept_word(p, "false")) {
        a->kind = IR_ATTR_INT;
        a->i = p->s[at] == 't';
        return 0;
    }
    if (c == '-' || is_digit(c) || word_at(p, at, "inf") || word_at(p, at, "nan")) {
        number num;
        if (parse_number(p, &num) != 0)
            return -1;
        a->kind = num.isfloat ? IR_ATTR_FLOAT : IR_ATTR_INT;
        a->i = num.i;
        a->f = num.f;
        /* MLIR's typed scalars (`1 : i64`): the type adds nothing here. */
        if (accept(p, ':')) {
            skip_ws(p);
            if (ir_dtype_from_name(p->s + p->pos, bare_len(p, p->pos)) == IR_DTYPE_NONE)
                return expected(p, "an element type");
            p->pos += bare_len(p, p->pos);
        }
        return 0;
    }
    return expected(p, "an attribute value");
}

/*
 * Sorts attrs[base..] by key with a stable merge sort (qsort takes no
 * context, and a library used by many threads keeps no mutable globals),
 * then reports a repeated key at its second appearance. O(n log n), so an
 * op with a million attributes costs no more than a million ops.
 */
static int
sort_attrs(parser *p, uint32_t base)
{
    const ir_module *m = p->m;
    uint32_t n = p->nattrs - base, dup = UINT32_MAX;
    ir_attr *a = p->attrs + base, *ta;
    size_t *off = p->attroff + base, *to;
    if (n < 2)
        return 0;
    ta = di_xmalloc(n * sizeof *ta);
    to = di_xmalloc(n * sizeof *to);
    for (uint32_t width = 1; width < n; width = width > n / 2 ? n : width * 2) {
        for (uint32_t lo = 0; lo < n;) {
            uint32_t mid = n - lo > width ? lo + width : n;
            uint32_t hi = n - mid > width ? mid + width : n, i = lo, j = mid;
            for (uint32_t k = lo; k < hi; k++) {
                int left = j >= hi || (i < mid && strcmp(ir_str_get(m, a[i].key),
                                                         ir_str_get(m, a[j].key)) <= 0);
                ta[k] = left ? a[i] : a[j];
                to[k] = left ? off[i++] : off[j++];
            }
            lo = hi;
        }
        memcpy(a, ta, n * sizeof *a);
        memcpy(off, to, n * sizeof *off);
    }
    di_free(ta);
    di_free(to);
    for (uint32_t i = 1; i < n; i++)
        if (a[i].key == a[i - 1].key && (dup == UINT32_MAX || off[i] < off[dup]))
            dup = i;
    if (dup != UINT32_MAX)
        return fail(p, off[dup], "duplicate attribute '%.64s'", ir_str_get(m, a[dup].key));
    return 0;
}

/*
 * `{key = value, ...}`: pushes the attributes onto attrs (above base). For a
 * dist.pmap, `callee = @f` is not an attribute: it goes to p->callee.
 */
static int
parse_attr_dict(parser *p, uint32_t base, int kind)
{
    if (expect(p, '{', "") != 0)
        return -1;
    if (accept(p, '}'))
        return 0;
    do {
        ir_attr a;
        size_t at;
        int c = peek(p);
        at = p->pos;
        memset(&a, 0, sizeof a);
        if (c == '"') {
            if (read_string(p) != 0)
                return -1;
        } else if (c >= 0 && is_bare_start(c)) {
            size_t len = bare_len(p, at);
            di_buf_reset(&p->sbuf);
            di_buf_put(&p->sbuf, p->s + at, len);
            p->pos += len;
        } else {
            return expected(p, "an attribute name");
        }
        if (ir_opkind_calls(kind) && p->sbuf.len == 6 && memcmp(p->sbuf.data, "callee", 6) == 0) {
            size_t sym;
            if (p->callee != 0)
                return fail(p, at, "duplicate attribute 'callee'");
            if (expect(p, '=', "after the attribute name") != 0)
                return -1;
            skip_ws(p);
            sym = p->pos;
            if (!accept(p, '@'))
                return fail(p, sym, "'callee' names a function: expected '@name'");
            if (read_name(p, 0, "function") != 0)
                return -1;
            p->callee = ir_strn(p->m, p->sbuf.data, p->sbuf.len);
            p->calleeoff = sym;
            continue;
        }
        a.key = ir_strn(p->m, p->sbuf.data, p->sbuf.len);
        if (expect(p, '=', "after the attribute name") != 0 || parse_attr_value(p, &a) != 0)
            return -1;
        push_attr(p, &a, at);
    } while (accept(p, ','));
    if (expect(p, '}', "after the attributes") != 0)
        return -1;
    return sort_attrs(p, base);
}

/* ---- ops and regions ---- */

static int parse_region(parser *p, ir_id *out);

/* Reads the result list `%a, %b:2 =` onto groups. */
static int
parse_results(parser *p)
{
    do {
        group g;
        memset(&g, 0, sizeof g);
        skip_ws(p);
        g.off = p->pos;
        g.loc.line = p->line;
        g.loc.column = (uint32_t)(p->pos - p->linestart + 1);
        if (cur(p) != '%')
            return expected(p, "a result name");
        p->pos++;
        if (read_name(p, 1, "value") != 0)
            return -1;
        g.name = ir_strn(p->m, p->sbuf.data, p->sbuf.len);
        g.count = 1;
        if (reserve_name(p, g.name, g.off) != 0)
            return -1;
        if (cur(p) == ':') {
            uint64_t k;
            p->pos++;
            if (read_uint(p, PARSE_MAX_GROUP, &k, "result count") != 0)
                return -1;
            g.count = (uint32_t)k;
            g.multi = 1;
        }
        DI_GROW(&p->groups, &p->cgroups, p->ngroups + 1);
        p->groups[p->ngroups++] = g;
    } while (accept(p, ','));
    return expect(p, '=', "after the result names");
}

/* Names the results of op after the groups at groups[gbase..]. */
static int
name_results(parser *p, ir_id op, uint32_t gbase, ir_loc oploc)
{
    ir_module *m = p->m;
    ir_id v = m->ops[op].outputs;
    if (p->ngroups == gbase) {
        for (uint32_t i = 0; i < m->ops[op].noutput; i++)
            m->valuelocs[v + i] = oploc;
        return 0;
    }
    for (uint32_t g = gbase; g < p->ngroups; g++) {
        group gr = p->groups[g];
        if (!gr.multi) {
            m->values[v].name = gr.name;
            m->valuelocs[v] = gr.loc;
            symmap_put(&p->values, gr.name, v);
            v++;
            continue;
        }
        for (uint32_t k = 0; k < gr.count; k++, v++) {
            char num[16];
            ir_id name, old;
            size_t len = strlen(ir_str_get(m, gr.name));
            di_buf_reset(&p->sbuf);
            di_buf_put(&p->sbuf, ir_str_get(m, gr.name), len);
            snprintf(num, sizeof num, "#%u", k);
            di_buf_puts(&p->sbuf, num);
            name = ir_strn(m, p->sbuf.data, p->sbuf.len);
            if (symmap_get(&p->values, name, &old))
                return fail(p, gr.off, "redefinition of value '%%%.64s'", ir_str_get(m, name));
            m->values[v].name = name;
            m->valuelocs[v] = gr.loc;
            symmap_put(&p->values, name, v);
        }
    }
    return 0;
}

/*
 * One operation in the current region:
 *   [results =] "Name"(operands) [({region})] [{attrs}] : (types) -> types [loc("name")]
 * A "dist.return" ends a region: its operands become the region's results
 * and *ended is set.
 */
static int
parse_op(parser *p, int *ended)
{
    ir_module *m = p->m;
    uint32_t gbase = p->ngroups, ibase = p->nids, abase = p->nattrs, nin, nres = 0, ntype, rbase;
    ir_id region = p->regions[p->depth], body = 0, opname = 0, op;
    size_t opoff, nameoff, typeoff;
    ir_loc oploc;
    int kind, gather;

    *ended = 0;
    skip_ws(p);
    opoff = p->pos;
    oploc.line = p->line;
    oploc.column = (uint32_t)(p->pos - p->linestart + 1);
    if (cur(p) == '%' && parse_results(p) != 0)
        return -1;
    for (uint32_t g = gbase; g < p->ngroups; g++)
        nres += p->groups[g].count;

    skip_ws(p);
    nameoff = p->pos;
    if (cur(p) != '"')
        return expected(p, p->ngroups > gbase ? "an operation name in quotes"
                           : p->depth    ? "an operation or \"dist.return\""
                                         : "an operation or 'return'");
    if (read_string(p) != 0)
        return -1;
    kind = ir_opkind_from_name(p->sbuf.data, p->sbuf.len);
    gather = p->sbuf.len == 6 && memcmp(p->sbuf.data, "Gather", 6) == 0;
    if (kind == IR_OP_NONE)
        return fail(p, nameoff, "unknown operation '%.64s'", p->sbuf.data);
    if (kind == IR_OP_RETURN) {
        if (p->depth == 0)
            return fail(p, nameoff,
                        "'dist.return' outside a region; a function ends with 'return'");
        if (p->ngroups > gbase)
            return fail(p, opoff, "'dist.return' has no results");
    }

    if (expect(p, '(', "after the operation name") != 0)
        return -1;
    if (!accept(p, ')')) {
        do {
            ir_id v;
            if (parse_use(p, &v) != 0)
                return -1;
            push_id(p, v);
        } while (accept(p, ','));
        if (expect(p, ')', "after operands") != 0)
            return -1;
    }
    nin = p->nids - ibase;

    if (peek(p) == '(') {
        size_t at = p->pos;
        if (kind == IR_OP_RETURN)
            return fail(p, at, "'dist.return' has no region");
        p->pos++;
        if (parse_region(p, &body) != 0)
            return -1;
        if (peek(p) == ',')
            return fail(p, p->pos, "only one region per operation is supported");
        if (expect(p, ')', "after the region") != 0)
            return -1;
    }
    p->callee = 0;
    if (peek(p) == '{') {
        if (kind == IR_OP_RETURN)
            return fail(p, p->pos, "'dist.return' has no attributes");
        if (parse_attr_dict(p, abase, kind) != 0)
            return -1;
        if (p->callee != 0 && body != 0)
            return fail(p, p->calleeoff,
                        "a dist.pmap with a region cannot also call a function");
    }

    if (expect(p, ':', "before the operation's type") != 0)
        return -1;
    if (expect(p, '(', "to open the operand types") != 0)
        return -1;
    ntype = 0;
    if (peek(p) != ')' && parse_types_of(p, ibase, nin, "operands", &ntype) != 0)
        return -1;
    skip_ws(p);
    typeoff = p->pos;
    if (expect(p, ')', "after the operand types") != 0)
        return -1;
    if (ntype != nin)
        return fail(p, typeoff, "%u operands but %u operand types", nin, ntype);
    if (!accept_arrow(p))
        return expected(p, "'->' after the operand types");
    skip_ws(p);
    typeoff = p->pos;
    rbase = p->nids;
    if (parse_result_types(p) != 0)
        return -1;
    if (kind == IR_OP_RETURN && p->nids != rbase)
        return fail(p, typeoff, "'dist.return' has no results: its type ends in '-> ()'");
    if (p->ngroups > gbase && nres != p->nids - rbase)
        return fail(p, typeoff, "%u result name%s but %u result type%s", nres,
                    nres == 1 ? "" : "s", p->nids - rbase, p->nids - rbase == 1 ? "" : "s");
    nres = p->nids - rbase;

    if (accept_word(p, "loc")) {
        if (expect(p, '(', "after 'loc'") != 0)
            return -1;
        skip_ws(p);
        if (cur(p) != '"')
            return expected(p, "a string");
        if (read_string(p) != 0)
            return -1;
        opname = ir_strn(m, p->sbuf.data, p->sbuf.len);
        if (expect(p, ')', "after the location") != 0)
            return -1;
    }

    if (kind == IR_OP_RETURN) {
        if (opname)
            return fail(p, opoff, "'dist.return' has no location");
        for (uint32_t i = 0; i < nin; i++)
            ir_region_add_result(m, region, p->ids[ibase + i]);
        p->nids = ibase;
        *ended = 1;
        return 0;
    }

    /* DistIR's communication gather is "Gather" with a device attribute. */
    if (gather) {
        ir_id key = ir_str_find(m, "device", 6);
        for (uint32_t i = abase; i < p->nattrs; i++)
            if (key && p->attrs[i].key == key)
                kind = IR_OP_GATHERTO;
    }
    op = ir_op_add(m, region, kind, nin, p->ids + ibase, nres, p->ids + rbase, NULL);
    m->oplocs[op] = oploc;
    m->ops[op].name = opname;
    if (body) {
        m->ops[op].body = body;
        m->regions[body].parent = op;
    }
    if (p->callee != 0) {
        /* Resolved when the whole file is read: a function may be defined later. */
        m->ops[op].flags |= IR_OPFLAG_CALLEE;
        DI_GROW(&p->callees, &p->ccallee, p->ncallee + 1);
        p->callees[p->ncallee].op = op;
        p->callees[p->ncallee].name = p->callee;
        p->callees[p->ncallee].off = p->calleeoff;
        p->ncallee++;
        p->callee = 0;
    }
    /*
     * The attributes are sorted and distinct, and the op is new: append them
     * as its list directly (ir_op_put_attr would cost O(n) per attribute).
     */
    if (p->nattrs > abase) {
        uint32_t k = p->nattrs - abase;
        DI_GROW(&m->attrs, &m->cattr, (size_t)m->nattr + k);
        memcpy(m->attrs + m->nattr, p->attrs + abase, k * sizeof *m->attrs);
        m->ops[op].attrs = m->nattr;
        m->ops[op].nattr = k;
        m->nattr += k;
    }
    if (kind == IR_OP_OPAQUE) {
        const ir_attr *a = ir_op_attr(m, op, "op_type");
        if (a && a->kind == IR_ATTR_STRING)
            m->ops[op].opaque = a->s;
    }
    if (name_results(p, op, gbase, oploc) != 0)
        return -1;
    p->nids = ibase;
    p->ngroups = gbase;
    p->nattrs = abase;
    return 0;
}

/* `%name: type, ...` arguments of region r, up to the closing ')'. */
static int
parse_args(parser *p, ir_id r)
{
    if (accept(p, ')'))
        return 0;
    do {
        ir_id name, type, v;
        size_t at;
        ir_loc loc;
        skip_ws(p);
        at = p->pos;
        loc.line = p->line;
        loc.column = (uint32_t)(p->pos - p->linestart + 1);
        if (cur(p) != '%')
            return expected(p, "an argument name");
        p->pos++;
        if (read_name(p, 1, "value") != 0)
            return -1;
        name = ir_strn(p->m, p->sbuf.data, p->sbuf.len);
        if (reserve_name(p, name, at) != 0)
            return -1;
        if (expect(p, ':', "after the argument name") != 0 || parse_type(p, &type, 0) != 0)
            return -1;
        v = ir_region_add_arg(p->m, r, type, NULL);
        p->m->values[v].name = name;
        p->m->valuelocs[v] = loc;
        symmap_put(&p->values, name, v);
        /* `= dense<"0x...">`: the argument's initializer data. */
        if (accept(p, '=')) {
            size_t dat;
            uint64_t want = ir_type_bytes(p->m, type);
            skip_ws(p);
            dat = p->pos;
            if (!accept_word(p, "dense"))
                return expected(p, "dense<\"0x...\"> after '='");
            if (parse_dense_bytes(p) != 0)
                return -1;
            if (p->m->types[type].kind != IR_TYPE_TENSOR || p->sbuf.len != want)
                return fail(p, dat, "initializer of %zu bytes for an argument of %llu bytes",
                            p->sbuf.len, (unsigned long long)want);
            ir_value_set_init(p->m, v, p->sbuf.data, p->sbuf.len);
        }
    } while (accept(p, ','));
    return expect(p, ')', "after the arguments");
}

/* `{ [^bb0(args):] ops "dist.return"(...) : (...) -> () }` after the '('. */
static int
parse_region(parser *p, ir_id *out)
{
    ir_id body;
    skip_ws(p);
    if (p->depth >= PARSE_MAX_DEPTH)
        return fail(p, p->pos, "regions nested deeper than %d levels", PARSE_MAX_DEPTH);
    if (expect(p, '{', "to open the region") != 0)
        return -1;
    body = ir_body_new(p->m);
    *out = body;
    p->regions[++p->depth] = body;
    if (peek(p) == '^') {
        p->pos++;
        if (read_name(p, 1, "block") != 0)
            return -1;
        if (accept(p, '(') && parse_args(p, body) != 0)
            return -1;
        if (expect(p, ':', "after the block arguments") != 0)
            return -1;
    }
    for (;;) {
        int ended, c = peek(p);
        if (c == '}')
            return fail(p, p->pos, "a region must end with \"dist.return\"");
        if (c == -1)
            return expected(p, "an operation");
        if (parse_op(p, &ended) != 0)
            return -1;
        if (ended)
            break;
    }
    if (expect(p, '}', "after \"dist.return\"") != 0)
        return -1;
    p->depth--;
    return 0;
}

/* After `func`: `@name(args) [-> types] { ops return ... }`. */
static int
parse_func(parser *p)
{
    ir_module *m = p->m;
    ir_id name, r, old;
    size_t at, retoff;
    uint32_t sbase, nsig, vbase, nret = 0;

    skip_ws(p);
    at = p->pos;
    if (expect(p, '@', "before the function name") != 0 || read_name(p, 0, "function") != 0)
        return -1;
    name = ir_strn(m, p->sbuf.data, p->sbuf.len);
    if (symmap_get(&p->funcs, name, &old))
        return fail(p, at, "redefinition of function '@%.64s'", ir_str_get(m, name));
    r = ir_func_new(m, ir_str_get(m, name));
    symmap_put(&p->funcs, name, r);
    symmap_clear(&p->values);
    p->depth = 0;
    p->regions[0] = r;

    if (expect(p, '(', "after the function name") != 0 || parse_args(p, r) != 0)
        return -1;
    sbase = p->nids;
    if (accept_arrow(p) && parse_result_types(p) != 0)
        return -1;
    nsig = p->nids - sbase;
    if (expect(p, '{', "to open the function body") != 0)
        return -1;

    for (;;) {
        int ended, c = peek(p);
        retoff = p->pos;
        if (accept_word(p, "return") || accept_word(p, "func.return"))
            break;
        if (c == '}')
            return fail(p, p->pos, "function '@%.64s' must end with 'return'", ir_str_get(m, name));
        if (parse_op(p, &ended) != 0)
            return -1;
    }

    /* return [%a, %b : t1, t2]; the offsets of the values go to lints. */
    skip_ws(p);
    vbase = p->nids;
    p->nlints = 0;
    if (cur(p) == '%') {
        uint32_t ntype;
        do {
            ir_id v;
            skip_ws(p);
            DI_GROW(&p->lints, &p->clints, p->nlints + 1);
            p->lints[p->nlints++] = (int64_t)p->pos;
            if (parse_use(p, &v) != 0)
                return -1;
            push_id(p, v);
        } while (accept(p, ','));
        nret = p->nids - vbase;
        if (expect(p, ':', "before the returned types") != 0 ||
            parse_types_of(p, vbase, nret, "returned values", &ntype) != 0)
            return -1;
        if (ntype != nret)
            return fail(p, p->pos, "%u returned values but %u types", nret, ntype);
    }
    if (nret != nsig)
        return fail(p, retoff, "function '@%.64s' returns %u values but its signature declares %u",
                    ir_str_get(m, name), nret, nsig);
    for (uint32_t i = 0; i < nret; i++)
        if (check_type(p, p->ids[vbase + i], p->ids[sbase + i], (size_t)p->lints[i],
                       ir_str_get(m, name)) != 0)
            return -1;
    for (uint32_t i = 0; i < nret; i++)
        ir_region_add_result(m, r, p->ids[vbase + i]);
    p->nids = sbase;
    return expect(p, '}', "after 'return'");
}

static int
cmp_int64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Does the list hold a value twice? Stores one such value in *dup. */
static int
has_duplicate(const int64_t *v, uint32_t n, int64_t *dup)
{
    int64_t *sorted = di_xmalloc((n ? n : 1) * sizeof *sorted);
    int found = 0;
    if (n)
        memcpy(sorted, v, n * sizeof *sorted);
    qsort(sorted, n, sizeof *sorted, cmp_int64);
    for (uint32_t i = 1; i < n && !found; i++)
        if (sorted[i] == sorted[i - 1]) {
            *dup = sorted[i];
            found = 1;
        }
    di_free(sorted);
    return found;
}

/* `dist.mesh @name = <[2, 4]>` or `<[2, 4], devices = [...]>`. */
static int
parse_mesh(parser *p)
{
    ir_module *m = p->m;
    int64_t shape[IR_MAX_RANK];
    uint32_t rank = 0;
    uint64_t ndev = 1;
    ir_id name, mesh, old;
    size_t at, open;
    int64_t *devices = NULL;

    skip_ws(p);
    at = p->pos;
    if (expect(p, '@', "before the mesh name") != 0 || read_name(p, 0, "mesh") != 0)
        return -1;
    name = ir_strn(m, p->sbuf.data, p->sbuf.len);
    if (symmap_get(&p->meshes, name, &old))
        return fail(p, at, "redefinition of mesh '@%.64s'", ir_str_get(m, name));
    if (expect(p, '=', "after the mesh name") != 0 || expect(p, '<', "before the mesh shape") != 0)
        return -1;
    skip_ws(p);
    open = p->pos;
    if (expect(p, '[', "to open the mesh shape") != 0)
        return -1;
    do {
        uint64_t v;
        skip_ws(p);
        at = p->pos;
        if (rank == IR_MAX_RANK)
            return fail(p, at, "mesh rank exceeds %d", IR_MAX_RANK);
        if (read_uint(p, PARSE_MAX_MESH, &v, "mesh axis size") != 0)
            return -1;
        if (v == 0)
            return fail(p, at, "a mesh axis has at least one device");
        ndev *= v;
        if (ndev > PARSE_MAX_MESH)
            return fail(p, open, "mesh with more than %u devices", PARSE_MAX_MESH);
        if (p->mesh_devices + ndev > PARSE_MAX_MESH_TOTAL)
            return fail(p, open, "the meshes hold more than %u devices in all",
                        PARSE_MAX_MESH_TOTAL);
        shape[rank++] = (int64_t)v;
    } while (accept(p, ','));
    if (expect(p, ']', "to close the mesh shape") != 0)
        return -1;
    if (accept(p, ',')) {
        int64_t dup;
        if (!accept_word(p, "devices"))
            return expected(p, "'devices'");
        if (expect(p, '=', "after 'devices'") != 0)
            return -1;
        skip_ws(p);
        open = p->pos;
        if (expect(p, '[', "to open the device list") != 0)
            return -1;
        p->nlints = 0;
        if (!accept(p, ']')) {
            do {
                uint64_t v;
                skip_ws(p);
                if (read_uint(p, INT32_MAX, &v, "device id") != 0)
                    return -1;
                if (p->nlints == ndev)
                    return fail(p, open, "mesh '@%.64s' has %llu devices but more are listed",
                                ir_str_get(m, name), (unsigned long long)ndev);
                DI_GROW(&p->lints, &p->clints, p->nlints + 1);
                p->lints[p->nlints++] = (int64_t)v;
            } while (accept(p, ','));
            if (expect(p, ']', "to close the device list") != 0)
                return -1;
        }
        if (p->nlints != ndev)
            return fail(p, open, "mesh '@%.64s' has %llu devices but %u are listed",
                        ir_str_get(m, name), (unsigned long long)ndev, p->nlints);
        devices = p->lints;
        if (has_duplicate(devices, (uint32_t)ndev, &dup))
            return fail(p, open, "device %lld appears twice in mesh '@%.64s'", (long long)dup,
                        ir_str_get(m, name));
    }
    if (expect(p, '>', "to close the mesh") != 0)
        return -1;
    p->mesh_devices += ndev;
    mesh = ir_mesh_add(m, ir_str_get(m, name), rank, shape, devices);
    symmap_put(&p->meshes, name, mesh);
    return 0;
}

static int
parse_top(parser *p)
{
    int in_module = 0;
    for (;;) {
        int c = peek(p);
        if (c == -1)
            break;
        if (accept_word(p, "dist.mesh")) {
            if (parse_mesh(p) != 0)
                return -1;
        } else if (accept_word(p, "func") || accept_word(p, "func.func")) {
            if (parse_func(p) != 0)
                return -1;
        } else if (!in_module && accept_word(p, "module")) {
            if (peek(p) == '@') {
                p->pos++;
                if (read_name(p, 0, "module") != 0)
                    return -1;
            }
            if (expect(p, '{', "to open the module") != 0)
                return -1;
            in_module = 1;
        } else if (in_module == 1 && c == '}') {
            p->pos++;
            in_module = 2;
        } else {
            return expected(p, in_module == 1 ? "'func', 'dist.mesh' or '}'"
                                              : "'func' or 'dist.mesh'");
        }
    }
    if (in_module == 1)
        return expected(p, "'}' to close the module");
    return 0;
}

static int
parse_module(const char *text, size_t len, ir_module **out, di_error *err)
{
    parser p;
    int rc;
    *out = NULL;
    if (len > PARSE_MAX_TEXT)
        return di_error_set(err, DI_ETOOBIG, "text of %zu bytes exceeds the limit of %zu bytes",
                            len, PARSE_MAX_TEXT);
    memset(&p, 0, sizeof p);
    p.s = text ? text : "";
    p.n = text ? len : 0;
    p.line = 1;
    p.err = err;
    p.m = ir_module_new();
    p.m->oplocs = di_xcalloc(p.m->cop, sizeof *p.m->oplocs);
    p.m->valuelocs = di_xcalloc(p.m->cvalue, sizeof *p.m->valuelocs);
    di_buf_init(&p.sbuf);
    DI_GROW(&p.ids, &p.cids, 64); /* never NULL: ids + base is always a valid pointer */
    rc = parse_top(&p);
    for (uint32_t i = 0; i < p.ncallee && rc == 0; i++) {
        ir_id f;
        const struct callee_use *u = &p.callees[i];
        if (!symmap_get(&p.funcs, u->name, &f))
            rc = fail(&p, u->off, "unknown function '@%.64s'", ir_str_get(p.m, u->name));
        else
            ir_op_set_callee(p.m, u->op, f);
    }
    di_free(p.callees);
    symmap_fini(&p.values);
    symmap_fini(&p.funcs);
    symmap_fini(&p.meshes);
    di_buf_fini(&p.sbuf);
    di_free(p.ids);
    di_free(p.groups);
    di_free(p.attrs);
    di_free(p.attroff);
    di_free(p.lints);
    di_free(p.lfloats);
    if (rc != 0) {
        ir_module_free(p.m);
        if (!p.failed)
            return di_error_at(err, DI_EPARSE, 1, 1, "syntax error");
        return DI_EPARSE;
    }
    *out = p.m;
    return 0;
}

/* The arguments of ir_parse, for its allocation scope. */
struct parse_call {
    const char *text;
    size_t len;
    ir_module **out;
    di_error *err;
};

static int
parse_call_run(void *arg)
{
    struct parse_call *c = arg;
    return parse_module(c->text, c->len, c->out, c->err);
}

/* The parse runs in an allocation scope: out-of-memory anywhere in it is DI_ENOMEM. */
int
ir_parse(const char *text, size_t len, ir_module **out, di_error *err)
{
    struct parse_call c = {text, len, out, err};
    int rc = di_scope_run(parse_call_run, &c, err);
    if (rc != 0)
        *out = NULL;
    return rc;
}
