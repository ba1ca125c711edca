/*
 * pb.c: checks for untrusted protobuf bytes, wrapped around protobuf-c's
 * unpack. protobuf-c 1.4.1 recurses once per nested message with no limit
 * (a few kilobytes of nesting overflow the stack), and it accepts invalid
 * UTF-8 in strings and undeclared enum values (GRPC_NOTES.md 8.3, 8.4).
 *
 * pb_check_depth walks the wire format before anything is unpacked. It looks
 * each field up in the message descriptor and descends only into fields of
 * message type, keeping its own stack of levels on the heap so that it cannot
 * overflow the C stack whatever the input. It also rejects what unpack would
 * reject (truncated varints and fields, lengths past the end, groups, wire
 * types that do not match a known field), and strings holding a NUL byte
 * (which protobuf-c would hand out cut short at it), so that errors come with
 * a byte position and a field path instead of a bare NULL or a wrong string.
 *
 * pb_validate walks an unpacked message by its descriptor and checks strings
 * and enum values. pb_unpack_checked runs the depth check, unpacks with an
 * allocator that refuses to hand out more than a fixed multiple of the input
 * size, and validates.
 */
#include "base/pb.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * The unpacked message may take at most this many bytes per input byte, plus
 * a constant. Real modules unpack to 6 to 12 times their size (an op of a
 * dozen bytes becomes a 112-byte struct plus its arrays); a message of empty
 * sub-messages would reach about 60 times.
 */
#define PB_ALLOC_FACTOR 16
#define PB_ALLOC_SLACK ((size_t)1 << 20)

/* Room for a field path in an error message; longer paths end in "...". */
#define PB_PATH_MAX 640

/* ---- field paths ---- */

/*
 * A field path kept as a stack of (name, index) frames and formatted only
 * when an error needs it: validation pushes a frame per field of every
 * message, so formatting eagerly would dominate the cost of a large module.
 */
#define PB_PATH_FRAMES 256

typedef struct pb_path {
    struct {
        const char *name;
        long index; /* < 0: none */
    } f[PB_PATH_FRAMES];
    size_t n;                 /* frames pushed (may exceed PB_PATH_FRAMES: deeper ones are cut) */
    char buf[PB_PATH_MAX];    /* the formatted path, after pb_path_str */
} pb_path;

static void
pb_path_init(pb_path *p)
{
    p->n = 0;
    p->buf[0] = '\0';
}

/* Appends ".name" or ".name[index]" (index < 0: none); returns the mark for pb_path_pop. */
static size_t
pb_path_push(pb_path *p, const char *name, long index)
{
    size_t old = p->n;
    if (p->n < PB_PATH_FRAMES) {
        p->f[p->n].name = name;
        p->f[p->n].index = index;
    }
    p->n++;
    return old;
}

static void
pb_path_pop(pb_path *p, size_t old)
{
    p->n = old;
}

/* The path as text ("functions[0].body.ops[3]"); longer paths end in "...". */
static const char *
pb_path_str(pb_path *p)
{
    size_t len = 0, n = p->n < PB_PATH_FRAMES ? p->n : PB_PATH_FRAMES;
    p->buf[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        size_t room = sizeof p->buf - len;
        int w;
        if (p->f[i].index >= 0)
            w = snprintf(p->buf + len, room, "%s%s[%ld]", len ? "." : "", p->f[i].name,
                         p->f[i].index);
        else
            w = snprintf(p->buf + len, room, "%s%s", len ? "." : "", p->f[i].name);
        if (w < 0 || (size_t)w >= room || (i + 1 == n && n < p->n)) {
            /* Too long: mark the cut and keep what fits. */
            len = len + 4 <= sizeof p->buf ? len : sizeof p->buf - 4;
            memcpy(p->buf + len, "...", 4);
            break;
        }
        len += (size_t)w;
    }
    return p->buf;
}

/* ---- the wire walk ---- */

enum {
    WIRE_VARINT = 0,
    WIRE_64BIT = 1,
    WIRE_LENGTH = 2,
    WIRE_GROUP_START = 3,
    WIRE_GROUP_END = 4,
    WIRE_32BIT = 5,
};

/*
 * One message being walked: its descriptor and its bytes [start, end) of the
 * input, the read position, and, while one of its fields is being descended
 * into, that field and the position of its tag (from which the field's
 * repetition index is recounted when an error needs the path).
 */
typedef struct wire_level {
    const ProtobufCMessageDescriptor *desc;
    size_t start, end, pos;
    const ProtobufCFieldDescriptor *field;
    size_t tag_pos;
} wire_level;

typedef struct wire_walk {
    const uint8_t *buf;
    wire_level *levels;
    size_t nlevel, clevel;
} wire_walk;

/*
 * Reads a varint of at most maxbytes bytes at buf[*pos] (below end). Returns
 * 0, or -1 when it is truncated or too long.
 */
static int
wire_varint(const uint8_t *buf, size_t end, size_t *pos, unsigned maxbytes, uint64_t *out)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < maxbytes; i++) {
        uint8_t b;
        if (*pos >= end)
            return -1;
        b = buf[(*pos)++];
        v |= (uint64_t)(b & 0x7f) << (7 * i);
        if ((b & 0x80) == 0) {
            *out = v;
            return 0;
        }
    }
    return -1;
}

/* The wire type a known field must have; repeated scalars may also come packed (length). */
static int
wire_type_of(ProtobufCType t)
{
    switch (t) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_BOOL:
    case PROTOBUF_C_TYPE_ENUM:
        return WIRE_VARINT;
    case PROTOBUF_C_TYPE_FIXED64:
    case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_DOUBLE:
        return WIRE_64BIT;
    case PROTOBUF_C_TYPE_FIXED32:
    case PROTOBUF_C_TYPE_SFIXED32:
    case PROTOBUF_C_TYPE_FLOAT:
        return WIRE_32BIT;
    default:
        return WIRE_LENGTH;
    }
}

/* How many times field id occurs in buf[start, upto) (already checked to be well formed). */
static long
wire_count_field(const uint8_t *buf, size_t start, size_t upto, uint32_t id)
{
    size_t pos = start;
    long n = 0;
    while (pos < upto) {
        uint64_t tag, v;
        if (wire_varint(buf, upto, &pos, 5, &tag) != 0)
            break;
        if ((tag >> 3) == id)
            n++;
        switch (tag & 7) {
        case WIRE_VARINT:
            if (wire_varint(buf, upto, &pos, 10, &v) != 0)
                return n;
            break;
        case WIRE_64BIT:
            pos += 8;
            break;
        case WIRE_32BIT:
            pos += 4;
            break;
        case WIRE_LENGTH:
            if (wire_varint(buf, upto, &pos, 10, &v) != 0 || v > upto - pos)
                return n;
            pos += (size_t)v;
            break;
        default:
            return n;
        }
    }
    return n;
}

/* Writes the path of the field being descended into at every level, root first. */
static void
wire_path(const wire_walk *w, pb_path *p)
{
    pb_path_init(p);
    for (size_t i = 0; i < w->nlevel; i++) {
        const wire_level *l = &w->levels[i];
        if (l->field == NULL)
            break;
        if (l->field->label == PROTOBUF_C_LABEL_REPEATED)
            pb_path_push(p, l->field->name,
                         wire_count_field(w->buf, l->start, l->tag_pos, l->field->id));
        else
            pb_path_push(p, l->field->name, -1);
    }
}

/* Sets a DI_EDECODE error "what at byte N in PATH". */
static int wire_error(const wire_walk *w, di_error *err, size_t pos, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int
wire_error(const wire_walk *w, di_error *err, size_t pos, const char *fmt, ...)
{
    char what[512];
    pb_path p;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    wire_path(w, &p);
    if (p.n)
        return di_error_set(err, DI_EDECODE, "%s at byte %zu in %s", what, pos, pb_path_str(&p));
    return di_error_set(err, DI_EDECODE, "%s at byte %zu", what, pos);
}

/* Checks the packed payload buf[pos, end) of a repeated scalar field. */
static int
wire_check_packed(const wire_walk *w, const ProtobufCFieldDescriptor *f, size_t pos, size_t end,
                  di_error *err)
{
    size_t n = end - pos;
    switch (wire_type_of(f->type)) {
    case WIRE_64BIT:
        if (n % 8 != 0)
            return wire_error(w, err, pos, "packed field '%s' has %zu bytes, not a multiple of 8",
                              f->name, n);
        return 0;
    case WIRE_32BIT:
        if (n % 4 != 0)
            return wire_error(w, err, pos, "packed field '%s' has %zu bytes, not a multiple of 4",
                              f->name, n);
        return 0;
    case WIRE_VARINT:
        while (pos < end) {
            uint64_t v;
            size_t at = pos;
            if (wire_varint(w->buf, end, &pos, 10, &v) != 0)
                return wire_error(w, err, at, "malformed varint in packed field '%s'", f->name);
        }
        return 0;
    default:
        return 0;
    }
}

/*
 * Reads one field of the innermost level. Returns 0, or an error; sets *child
 * to the message descriptor and (*cstart, *cend) to the bytes of a sub-message
 * to descend into (NULL otherwise).
 */
static int
wire_field(wire_walk *w, const ProtobufCMessageDescriptor **child, size_t *cstart, size_t *cend,
           di_error *err)
{
    wire_level *l = &w->levels[w->nlevel - 1];
    size_t tag_pos = l->pos;
    uint64_t tag, v;
    uint32_t id;
    int wt;
    const ProtobufCFieldDescriptor *f;

    *child = NULL;
    if (wire_varint(w->buf, l->end, &l->pos, 5, &tag) != 0)
        return wire_error(w, err, tag_pos, "malformed field tag");
    wt = (int)(tag & 7);
    if ((tag >> 3) == 0 || (tag >> 3) > 0x1fffffff)
        return wire_error(w, err, tag_pos, "invalid field number %llu",
                          (unsigned long long)(tag >> 3));
    id = (uint32_t)(tag >> 3);
    if (wt == WIRE_GROUP_START || wt == WIRE_GROUP_END)
        return wire_error(w, err, tag_pos, "groups (wire type %d, field %u) are not supported", wt,
                          id);
    if (wt != WIRE_VARINT && wt != WIRE_64BIT && wt != WIRE_LENGTH && wt != WIRE_32BIT)
        return wire_error(w, err, tag_pos, "invalid wire type %d (field %u)", wt, id);
    f = protobuf_c_message_descriptor_get_field(l->desc, id);

    if (f != NULL && wt != wire_type_of(f->type) &&
        !(wt == WIRE_LENGTH && f->label == PROTOBUF_C_LABEL_REPEATED))
        return wire_error(w, err, tag_pos, "field '%s' has wire type %d, expected %d", f->name, wt,
                          wire_type_of(f->type));

    switch (wt) {
    case WIRE_VARINT:
        if (wire_varint(w->buf, l->end, &l->pos, 10, &v) != 0)
            return wire_error(w, err, tag_pos, "truncated or overlong varint in field %u", id);
        return 0;
    case WIRE_64BIT:
        if (l->end - l->pos < 8)
            return wire_error(w, err, tag_pos, "field %u needs 8 bytes, %zu left", id,
                              l->end - l->pos);
        l->pos += 8;
        return 0;
    case WIRE_32BIT:
        if (l->end - l->pos < 4)
            return wire_error(w, err, tag_pos, "field %u needs 4 bytes, %zu left", id,
                              l->end - l->pos);
        l->pos += 4;
        return 0;
    case WIRE_LENGTH: {
        size_t start;
        if (wire_varint(w->buf, l->end, &l->pos, 10, &v) != 0)
            return wire_error(w, err, tag_pos, "malformed length of field %u", id);
        if (v > l->end - l->pos)
            return wire_error(w, err, tag_pos,
                              "length %llu of field %u runs past the end (%zu bytes left)",
                              (unsigned long long)v, id, l->end - l->pos);
        start = l->pos;
        l->pos += (size_t)v;
        if (f != NULL && f->type == PROTOBUF_C_TYPE_STRING) {
            /* Strings become C strings: an embedded NUL would silently cut them short. */
            const uint8_t *nul = memchr(w->buf + start, 0, (size_t)v);
            if (nul != NULL)
                return wire_error(w, err, (size_t)(nul - w->buf),
                                  "string field '%s' holds a NUL byte", f->name);
        }
        if (f != NULL && f->type == PROTOBUF_C_TYPE_MESSAGE) {
            l->field = f;
            l->tag_pos = tag_pos;
            *child = f->descriptor;
            *cstart = start;
            *cend = l->pos;
        } else if (f != NULL && wire_type_of(f->type) != WIRE_LENGTH) {
            return wire_check_packed(w, f, start, l->pos, err);
        }
        return 0;
    }
    default:
        return 0; /* unreachable: the wire type was checked above */
    }
}

int
pb_check_depth(const ProtobufCMessageDescriptor *desc, const uint8_t *buf, size_t len,
               int max_depth, di_error *err)
{
    wire_walk w;
    int rc = 0;

    if (max_depth < 1)
        return di_error_set(err, DI_ETOODEEP, "a depth limit of %d admits no message", max_depth);
    memset(&w, 0, sizeof w);
    w.buf = buf;
    DI_GROW(&w.levels, &w.clevel, 16);
    w.levels[0] = (wire_level){desc, 0, len, 0, NULL, 0};
    w.nlevel = 1;

    while (w.nlevel > 0) {
        wire_level *l = &w.levels[w.nlevel - 1];
        const ProtobufCMessageDescriptor *child;
        size_t cstart = 0, cend = 0;
        if (l->pos >= l->end) {
            /* This message is done; the parent stops descending. */
            w.nlevel--;
            if (w.nlevel > 0)
                w.levels[w.nlevel - 1].field = NULL;
            continue;
        }
        if ((rc = wire_field(&w, &child, &cstart, &cend, err)) != 0)
            break;
        if (child == NULL)
            continue;
        if (w.nlevel + 1 > (size_t)max_depth) {
            pb_path p;
            wire_path(&w, &p);
            rc = di_error_set(err, DI_ETOODEEP, "message nested deeper than %d levels at %s...",
                              max_depth, pb_path_str(&p));
            break;
        }
        DI_GROW(&w.levels, &w.clevel, w.nlevel + 1);
        w.levels[w.nlevel++] = (wire_level){child, cstart, cend, cstart, NULL, 0};
    }
    di_free(w.levels);
    return rc;
}

/* ---- validation of unpacked messages ---- */

static int validate_message(const ProtobufCMessage *msg, pb_path *p, di_error *err);

/* Checks one string, enum or message element of field f; elem points at it. */
static int
validate_element(const ProtobufCFieldDescriptor *f, const void *elem, pb_path *p, di_error *err)
{
    switch (f->type) {
    case PROTOBUF_C_TYPE_STRING: {
        const char *s = *(const char *const *)elem;
        if (s != NULL && !di_utf8_valid(s, strlen(s)))
            return di_error_set(err, DI_EDECODE, "%s: invalid UTF-8 in string", pb_path_str(p));
        return 0;
    }
    case PROTOBUF_C_TYPE_ENUM: {
        int v = *(const int *)elem;
        const ProtobufCEnumDescriptor *ed = f->descriptor;
        if (protobuf_c_enum_descriptor_get_value(ed, v) == NULL)
            return di_error_set(err, DI_EDECODE, "%s: %d is not a value of enum %s", pb_path_str(p), v,
                                ed->name);
        return 0;
    }
    case PROTOBUF_C_TYPE_MESSAGE: {
        const ProtobufCMessage *sub = *(const ProtobufCMessage *const *)elem;
        return sub ? validate_message(sub, p, err) : 0;
    }
    default:
        return 0;
    }
}

static int
validate_message(const ProtobufCMessage *msg, pb_path *p, di_error *err)
{
    const ProtobufCMessageDescriptor *d = msg->descriptor;
    const char *base = (const char *)msg;
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        const void *member = base + f->offset;
        size_t mark;
        int rc;
        if (f->type != PROTOBUF_C_TYPE_STRING && f->type != PROTOBUF_C_TYPE_ENUM &&
            f->type != PROTOBUF_C_TYPE_MESSAGE)
            continue;
        if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            size_t n = *(const size_t *)(base + f->quantifier_offset);
            const char *arr = *(const char *const *)member;
            /* Enums are stored as int, strings and messages as pointers. */
            size_t size = f->type == PROTOBUF_C_TYPE_ENUM ? sizeof(int) : sizeof(void *);
            if (n > 0 && arr == NULL)
                return di_error_set(err, DI_EINVAL, "%s%s%s: %zu elements but no array",
                                    pb_path_str(p), p->n ? "." : "", f->name, n);
            for (size_t j = 0; j < n; j++) {
                mark = pb_path_push(p, f->name, (long)j);
                rc = validate_element(f, arr + j * size, p, err);
                pb_path_pop(p, mark);
                if (rc != 0)
                    return rc;
            }
            continue;
        }
        if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
            if (*(const uint32_t *)(base + f->quantifier_offset) != f->id)
                continue;
        } else if (f->label == PROTOBUF_C_LABEL_OPTIONAL && f->type == PROTOBUF_C_TYPE_ENUM) {
            if (!*(const protobuf_c_boolean *)(base + f->quantifier_offset))
                continue;
        }
        mark = pb_path_push(p, f->name, -1);
        rc = validate_element(f, member, p, err);
        pb_path_pop(p, mark);
        if (rc != 0)
            return rc;
    }
    return 0;
}

int
pb_validate(const ProtobufCMessage *msg, di_error *err)
{
    pb_path p;
    pb_path_init(&p);
    return validate_message(msg, &p, err);
}

/* ---- capped unpack ---- */

/*
 * An allocator for protobuf-c that counts what it hands out and refuses past
 * a cap. It allocates with di_malloc (so that tests can inject failures and
 * an allocation scope tracks the message; plain malloc underneath, so that
 * outside a scope the message can also be freed with the default allocator)
 * and never gives memory back to the count: unpack frees little before it
 * returns.
 */
typedef struct capped_alloc {
    size_t used, cap;
    int over, nomem;
} capped_alloc;

static void *
capped_alloc_fn(void *data, size_t size)
{
    capped_alloc *c = data;
    void *p;
    if (size > c->cap - c->used) {
        c->over = 1;
        return NULL;
    }
    p = di_malloc(size);
    if (p == NULL) {
        c->nomem = 1;
        return NULL;
    }
    c->used += size;
    return p;
}

static void
capped_free_fn(void *data, void *ptr)
{
    (void)data;
    di_free(ptr);
}

static void *
pb_alloc_fn(void *data, size_t size)
{
    (void)data;
    return di_malloc(size);
}

ProtobufCAllocator pb_allocator = {pb_alloc_fn, capped_free_fn, NULL};

int
pb_unpack_checked(const ProtobufCMessageDescriptor *desc, const uint8_t *buf, size_t len,
                  int max_depth, ProtobufCMessage **out, di_error *err)
{
    capped_alloc c = {0, 0, 0, 0};
    ProtobufCAllocator a;
    ProtobufCMessage *msg;
    int rc;

    *out = NULL;
    if ((rc = pb_check_depth(desc, buf, len, max_depth, err)) != 0)
        return rc;
    c.cap = len > (SIZE_MAX - PB_ALLOC_SLACK) / PB_ALLOC_FACTOR
                ? SIZE_MAX
                : len * PB_ALLOC_FACTOR + PB_ALLOC_SLACK;
    a.alloc = capped_alloc_fn;
    a.free = capped_free_fn;
    a.allocator_data = &c;
    msg = protobuf_c_message_unpack(desc, &a, len, buf);
    if (msg == NULL) {
        if (c.over)
            return di_error_set(err, DI_ETOOBIG,
                                "unpacking %zu bytes of %s would take more than %zu bytes of "
                                "memory",
                                len, desc->name, c.cap);
        if (c.nomem)
            return di_error_set(err, DI_ENOMEM, "out of memory unpacking %s", desc->name);
        return di_error_set(err, DI_EDECODE, "protobuf-c could not unpack %s", desc->name);
    }
    if ((rc = pb_validate(msg, err)) != 0) {
        protobuf_c_message_free_unpacked(msg, &pb_allocator);
        return rc;
    }
    *out = msg;
    return 0;
}
