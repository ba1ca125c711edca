/*
 * hw_calib.c: calibration data that replaces the hardware model's formulas:
 * measured collective time tables (vTrain's AR_GPU{n}_*.csv and nccl-tests
 * style CSVs) looked up by log-log interpolation, and measured op times keyed
 * by a canonical op signature (docs/hardware.md, "Calibration").
 */
#include "sim/hw.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define CSV_MAX_BYTES (256u << 20) /* a calibration CSV larger than this is refused */

/* ---- collective tables ---- */

typedef struct point {
    double bytes;
    double seconds;
} point;

static int
point_cmp(const void *a, const void *b)
{
    const point *x = a, *y = b;
    if (x->bytes != y->bytes)
        return x->bytes < y->bytes ? -1 : 1;
    if (x->seconds != y->seconds)
        return x->seconds < y->seconds ? -1 : 1;
    return 0;
}

static int
is_comm_kind(int kind)
{
    return kind > IR_OP_NONE && kind < IR_NOPKIND && (ir_opkind_info(kind)->flags & IR_OPF_COMM);
}

int
hw_add_table(hw_model *hw, int kind, uint32_t group, int inter_node, uint32_t npoint,
             const double *bytes, const double *seconds, di_error *err)
{
    point *pts;
    uint32_t n = 0, at;
    hw_coll_table t;
    if (!is_comm_kind(kind))
        return di_error_set(err, DI_EINVAL, "collective table: op kind %d is not communication",
                            kind);
    if (group < 1 || group > HW_MAX_DEVICES)
        return di_error_set(err, DI_EINVAL, "collective table: group %u is not from 1 to %u", group,
                            HW_MAX_DEVICES);
    if (npoint < 1 || npoint > HW_MAX_POINTS)
        return di_error_set(err, DI_EINVAL, "collective table: %u points (expected 1 to %u)",
                            npoint, HW_MAX_POINTS);
    for (uint32_t i = 0; i < npoint; i++)
        if (!isfinite(bytes[i]) || bytes[i] <= 0 || !isfinite(seconds[i]) || seconds[i] <= 0)
            return di_error_set(err, DI_EINVAL,
                                "collective table: point %u: expected positive bytes and "
                                "seconds, got %g, %g",
                                i, bytes[i], seconds[i]);
    pts = di_xmalloc(npoint * sizeof *pts);
    for (uint32_t i = 0; i < npoint; i++) {
        pts[i].bytes = bytes[i];
        pts[i].seconds = seconds[i];
    }
    /* Sorting by (bytes, seconds) makes the average of repeated sizes independent of input order.
     */
    qsort(pts, npoint, sizeof *pts, point_cmp);
    t.kind = kind;
    t.group = group;
    t.inter_node = inter_node ? 1 : 0;
    t.bytes = di_xmalloc(npoint * sizeof *t.bytes);
    t.seconds = di_xmalloc(npoint * sizeof *t.seconds);
    for (uint32_t i = 0; i < npoint;) {
        uint32_t j = i;
        double sum = 0;
        while (j < npoint && pts[j].bytes == pts[i].bytes)
            sum += pts[j++].seconds;
        t.bytes[n] = pts[i].bytes;
        t.seconds[n] = sum / (double)(j - i);
        n++;
        i = j;
    }
    di_free(pts);
    t.npoint = n;
    /* Insert in (kind, group, inter_node) order, replacing an equal key. */
    for (at = 0; at < hw->ntable; at++) {
        const hw_coll_table *o = &hw->tables[at];
        if (o->kind > kind ||
            (o->kind == kind &&
             (o->group > group || (o->group == group && o->inter_node >= t.inter_node))))
            break;
    }
    if (at < hw->ntable && hw->tables[at].kind == kind && hw->tables[at].group == group &&
        hw->tables[at].inter_node == t.inter_node) {
        di_free(hw->tables[at].bytes);
        di_free(hw->tables[at].seconds);
        hw->tables[at] = t;
        return 0;
    }
    if (hw->ntable >= HW_MAX_TABLES) {
        di_free(t.bytes);
        di_free(t.seconds);
        return di_error_set(err, DI_ETOOBIG, "collective tables: more than %u", HW_MAX_TABLES);
    }
    hw->tables = di_xrealloc(hw->tables, (hw->ntable + 1) * sizeof *hw->tables);
    memmove(&hw->tables[at + 1], &hw->tables[at], (hw->ntable - at) * sizeof *hw->tables);
    hw->tables[at] = t;
    hw->ntable++;
    return 0;
}

static const hw_coll_table *
find_table(const hw_model *hw, int kind, uint32_t group, int inter_node)
{
    for (uint32_t i = 0; i < hw->ntable; i++) {
        const hw_coll_table *t = &hw->tables[i];
        if (t->kind == kind && t->group == group && t->inter_node == (inter_node ? 1 : 0))
            return t;
    }
    return NULL;
}

/*
 * Interpolation (docs/hardware.md): exact at measured sizes, log-log between
 * them, linear in bytes beyond the ends with the slope measured over a
 * factor of two in size (the last two points alone are 1 MiB apart in the
 * vTrain tables and their difference is noise).
 */
double
hw_table_time(const hw_model *hw, int kind, uint32_t group, int inter_node, double bytes)
{
    const hw_coll_table *t = find_table(hw, kind, group, inter_node);
    const double *b, *s;
    uint32_t n, lo, hi;
    if (t == NULL || !(bytes >= 0) || !isfinite(bytes))
        return -1;
    if (bytes == 0)
        return 0;
    b = t->bytes;
    s = t->seconds;
    n = t->npoint;
    if (bytes > b[n - 1]) {
        double slope;
        uint32_t k = 0;
        if (n == 1)
            return s[0] * (bytes / b[0]);
        for (uint32_t i = 0; i < n - 1; i++)
            if (b[i] <= b[n - 1] / 2)
                k = i;
        slope = (s[n - 1] - s[k]) / (b[n - 1] - b[k]);
        if (!(slope > 0))
            slope = s[n - 1] / b[n - 1];
        return s[n - 1] + (bytes - b[n - 1]) * slope;
    }
    if (bytes < b[0]) {
        double slope, linear, proportional;
        uint32_t k = n - 1;
        if (n == 1)
            return s[0];
        for (uint32_t i = n - 1; i > 0; i--)
            if (b[i] >= 2 * b[0])
                k = i;
        slope = (s[k] - s[0]) / (b[k] - b[0]);
        if (!(slope > 0))
            slope = 0;
        linear = s[0] - (b[0] - bytes) * slope;
        proportional = s[0] * (bytes / b[0]);
        return linear > proportional ? linear : proportional;
    }
    /* b[lo] <= bytes <= b[hi] with hi = lo + 1, or an exact hit. */
    lo = 0;
    hi = n - 1;
    while (hi - lo > 1) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (b[mid] <= bytes)
            lo = mid;
        else
            hi = mid;
    }
    if (b[lo] == bytes)
        return s[lo];
    if (b[hi] == bytes)
        return s[hi];
    {
        double f = (log(bytes) - log(b[lo])) / (log(b[hi]) - log(b[lo]));
        double v = exp(log(s[lo]) + f * (log(s[hi]) - log(s[lo])));
        double mn = s[lo] < s[hi] ? s[lo] : s[hi];
        double mx = s[lo] < s[hi] ? s[hi] : s[lo];
        /* Rounding in log/exp must not step outside the two measurements. */
        return v < mn ? mn : v > mx ? mx : v;
    }
}

/* ---- CSV reading ---- */

/* Reads a regular file (never standard input or a device that may block). */
static int
read_regular(const char *path, uint8_t **data, size_t *len, di_error *err)
{
    struct stat st;
    *data = NULL;
    *len = 0;
    if (strcmp(path, "-") == 0)
        return di_error_set(err, DI_EIO, "cannot read '-': calibration must be a file");
    if (stat(path, &st) != 0)
        return di_read_file(path, CSV_MAX_BYTES, data, len, err); /* reports the reason */
    if (!S_ISREG(st.st_mode))
        return di_error_set(err, DI_EIO, "cannot read '%s': not a regular file", path);
    return di_read_file(path, CSV_MAX_BYTES, data, len, err);
}

/* An error at a line of a calibration file: "path:LINE: message". */
static int csv_error(di_error *err, int code, const char *path, uint32_t line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static int
csv_error(di_error *err, int code, const char *path, uint32_t line, const char *fmt, ...)
{
    char tmp[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    /* err->line stays 0: the position is in another file than any JSON that named this one. */
    return di_error_set(err, code, "%s:%u: %s", path, line, tmp);
}

/* One line of a buffer at a time: [*pos, end of line) without the newline or a trailing CR. */
static int
next_line(const char *buf, size_t len, size_t *pos, const char **line, size_t *n)
{
    size_t start = *pos, e;
    if (start >= len)
        return 0;
    e = start;
    while (e < len && buf[e] != '\n')
        e++;
    *pos = e < len ? e + 1 : e;
    if (e > start && buf[e - 1] == '\r')
        e--;
    *line = buf + start;
    *n = e - start;
    return 1;
}

static int
blank_or_comment(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n && (s[i] == ' ' || s[i] == '\t'))
        i++;
    return i == n || s[i] == '#';
}

/* Parses a whole field as a finite number (surrounding blanks allowed). */
static int
parse_number(const char *s, size_t n, double *out)
{
    char tmp[64];
    char *end;
    while (n > 0 && (*s == ' ' || *s == '\t')) {
        s++;
        n--;
    }
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t'))
        n--;
    if (n == 0 || n >= sizeof tmp)
        return -1;
    memcpy(tmp, s, n);
    tmp[n] = '\0';
    *out = strtod(tmp, &end);
    if (*end != '\0' || !isfinite(*out))
        return -1;
    return 0;
}

/* Finds field i (0-based) of a comma-separated line; -1 if absent. */
static int
csv_field(const char *line, size_t n, int i, const char **f, size_t *fn)
{
    size_t start = 0;
    for (int k = 0;; k++) {
        size_t e = start;
        while (e < n && line[e] != ',')
            e++;
        if (k == i) {
            *f = line + start;
            *fn = e - start;
            return 0;
        }
        if (e >= n)
            return -1;
        start = e + 1;
    }
}

/* Parses a data row: size in bytes (column 1) and time in nanoseconds (column 4). */
static int
parse_row(const char *line, size_t n, double *bytes, double *seconds, const char **why)
{
    const char *f;
    size_t fn;
    double ns;
    if (csv_field(line, n, 3, &f, &fn) != 0) {
        *why = "expected at least 4 comma-separated columns";
        return -1;
    }
    if (parse_number(f, fn, &ns) != 0 || !(ns > 0)) {
        *why = "column 4 (time in ns) is not a positive number";
        return -1;
    }
    csv_field(line, n, 0, &f, &fn);
    if (parse_number(f, fn, bytes) != 0 || !(*bytes > 0)) {
        *why = "column 1 (size in bytes) is not a positive number";
        return -1;
    }
    *seconds = ns / 1e9;
    return 0;
}

int
hw_load_collective_csv(hw_model *hw, int kind, uint32_t group, int inter_node, const char *path,
                       di_error *err)
{
    uint8_t *data;
    size_t len, pos = 0, n;
    const char *line;
    double *bytes = NULL, *seconds = NULL;
    uint32_t npoint = 0, capb = 0, caps = 0, lineno = 0;
    int rc;
    if (!is_comm_kind(kind))
        return di_error_set(err, DI_EINVAL, "%s: op kind %d is not communication", path, kind);
    if ((rc = read_regular(path, &data, &len, err)) != 0)
        return rc;
    while (next_line((const char *)data, len, &pos, &line, &n)) {
        double b, s;
        const char *why;
        lineno++;
        if (blank_or_comment(line, n))
            continue;
        if (parse_row(line, n, &b, &s, &why) != 0) {
            if (lineno == 1)
                continue; /* the header */
            rc = csv_error(err, DI_EPARSE, path, lineno, "%s", why);
            goto done;
        }
        if (npoint >= HW_MAX_POINTS) {
            rc = csv_error(err, DI_ETOOBIG, path, lineno, "more than %u rows", HW_MAX_POINTS);
            goto done;
        }
        DI_GROW(&bytes, &capb, npoint + 1);
        DI_GROW(&seconds, &caps, npoint + 1);
        bytes[npoint] = b;
        seconds[npoint] = s;
        npoint++;
    }
    if (npoint == 0) {
        rc = di_error_set(err, DI_EPARSE, "%s: no data rows", path);
        goto done;
    }
    rc = hw_add_table(hw, kind, group, inter_node, npoint, bytes, seconds, err);
    if (rc != 0)
        di_error_prefix(err, "%s", path);
done:
    di_free(bytes);
    di_free(seconds);
    di_free(data);
    return rc;
}

/* ---- op times ---- */

/* The index of signature in op_times, or the insertion point as -(index + 1). */
static long
find_op_time(const hw_model *hw, const char *signature)
{
    uint32_t lo = 0, hi = hw->nop_time;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        int c = strcmp(hw->op_times[mid].signature, signature);
        if (c == 0)
            return (long)mid;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -(long)lo - 1;
}

int
hw_add_op_time(hw_model *hw, const char *signature, double seconds, di_error *err)
{
    long at;
    uint32_t i;
    if (signature[0] == '\0')
        return di_error_set(err, DI_EINVAL, "op time: empty signature");
    if (strlen(signature) >= HW_SIGNATURE_MAX)
        return di_error_set(err, DI_EINVAL, "op time: signature longer than %d bytes",
                            HW_SIGNATURE_MAX - 1);
    if (!isfinite(seconds) || seconds < 0)
        return di_error_set(err, DI_EINVAL, "op time \"%s\": expected seconds >= 0, got %g",
                            signature, seconds);
    at = find_op_time(hw, signature);
    if (at >= 0) {
        hw->op_times[at].seconds = seconds;
        return 0;
    }
    if (hw->nop_time >= HW_MAX_OP_TIMES)
        return di_error_set(err, DI_ETOOBIG, "op times: more than %u", HW_MAX_OP_TIMES);
    i = (uint32_t)(-at - 1);
    hw->op_times = di_xrealloc(hw->op_times, (hw->nop_time + 1) * sizeof *hw->op_times);
    memmove(&hw->op_times[i + 1], &hw->op_times[i], (hw->nop_time - i) * sizeof *hw->op_times);
    hw->op_times[i].signature = di_xstrdup(signature);
    hw->op_times[i].seconds = seconds;
    hw->nop_time++;
    return 0;
}

double
hw_op_time_lookup(const hw_model *hw, const char *signature)
{
    long at = find_op_time(hw, signature);
    return at >= 0 ? hw->op_times[at].seconds : -1;
}

typedef struct op_time_entry {
    char *signature;
    double seconds;
    uint32_t line;
} op_time_entry;

static int
op_time_entry_cmp(const void *a, const void *b)
{
    const op_time_entry *x = a, *y = b;
    int c = strcmp(x->signature, y->signature);
    if (c != 0)
        return c;
    return x->line < y->line ? -1 : x->line > y->line;
}

/*
 * Rows are "signature,seconds"; the number is after the last comma because
 * signatures contain commas. A first line "signature,seconds" is a header.
 * A signature listed twice takes its last value. Entries are collected and
 * sorted once, so that large files load in n log n.
 */
int
hw_load_op_times(hw_model *hw, const char *path, di_error *err)
{
    uint8_t *data;
    size_t len, pos = 0, n;
    const char *line;
    op_time_entry *e = NULL;
    uint32_t ne = 0, cap = 0, lineno = 0;
    int rc;
    if ((rc = read_regular(path, &data, &len, err)) != 0)
        return rc;
    while (next_line((const char *)data, len, &pos, &line, &n)) {
        const char *comma;
        double s;
        size_t sn;
        lineno++;
        if (blank_or_comment(line, n))
            continue;
        if (lineno == 1 && n == 17 && memcmp(line, "signature,seconds", 17) == 0)
            continue;
        comma = NULL;
        for (size_t i = n; i > 0; i--)
            if (line[i - 1] == ',') {
                comma = line + i - 1;
                break;
            }
        if (comma == NULL || comma == line) {
            rc = csv_error(err, DI_EPARSE, path, lineno, "expected \"signature,seconds\"");
            goto done;
        }
        sn = (size_t)(comma - line);
        if (parse_number(comma + 1, n - sn - 1, &s) != 0 || s < 0) {
            rc = csv_error(err, DI_EPARSE, path, lineno, "seconds is not a number >= 0");
            goto done;
        }
        if (sn >= HW_SIGNATURE_MAX || memchr(line, '\0', sn) != NULL || !di_utf8_valid(line, sn)) {
            rc = csv_error(err, DI_EPARSE, path, lineno,
                           "signature is not UTF-8 text shorter than %d bytes", HW_SIGNATURE_MAX);
            goto done;
        }
        if (hw->nop_time + ne >= HW_MAX_OP_TIMES) {
            rc = csv_error(err, DI_ETOOBIG, path, lineno, "more than %u op times", HW_MAX_OP_TIMES);
            goto done;
        }
        DI_GROW(&e, &cap, ne + 1);
        e[ne].signature = di_xmalloc(sn + 1);
        memcpy(e[ne].signature, line, sn);
        e[ne].signature[sn] = '\0';
        e[ne].seconds = s;
        e[ne].line = lineno;
        ne++;
    }
    if (ne == 0) {
        rc = di_error_set(err, DI_EPARSE, "%s: no rows", path);
        goto done;
    }
    qsort(e, ne, sizeof *e, op_time_entry_cmp);
    /* Merge the sorted entries (last value of each signature) with the existing sorted list. */
    {
        hw_op_time *merged = di_xmalloc((hw->nop_time + ne) * sizeof *merged);
        uint32_t i = 0, j = 0, k = 0;
        while (i < hw->nop_time || j < ne) {
            int c;
            if (j < ne && j + 1 < ne && strcmp(e[j].signature, e[j + 1].signature) == 0) {
                di_free(e[j].signature);
                e[j++].signature = NULL;
                continue;
            }
            if (i >= hw->nop_time)
                c = 1;
            else if (j >= ne)
                c = -1;
            else
                c = strcmp(hw->op_times[i].signature, e[j].signature);
            if (c < 0) {
                merged[k++] = hw->op_times[i++];
            } else {
                if (c == 0)
                    di_free(hw->op_times[i++].signature);
                merged[k].signature = e[j].signature;
                merged[k++].seconds = e[j].seconds;
                e[j++].signature = NULL;
            }
        }
        di_free(hw->op_times);
        hw->op_times = merged;
        hw->nop_time = k;
    }
done:
    for (uint32_t i = 0; i < ne; i++)
        di_free(e[i].signature);
    di_free(e);
    di_free(data);
    return rc;
}

/* ---- op signatures ---- */

static void
sig_type(di_buf *b, const ir_module *m, ir_id t)
{
    const ir_type *ty;
    if (t == 0 || t >= m->ntype) {
        di_buf_putc(b, '?');
        return;
    }
    ty = ir_type_get(m, t);
    if (ty->kind == IR_TYPE_TUPLE) {
        const ir_id *el = ir_type_elems(m, t);
        di_buf_putc(b, '(');
        for (uint32_t i = 0; i < ty->nelem; i++) {
            if (i)
                di_buf_putc(b, ',');
            sig_type(b, m, el[i]);
        }
        di_buf_putc(b, ')');
        return;
    }
    if (ty->kind != IR_TYPE_TENSOR) {
        di_buf_putc(b, '?');
        return;
    }
    di_buf_puts(b, ir_dtype_name((ir_dtype)ty->dtype));
    di_buf_putc(b, '[');
    for (uint32_t i = 0; i < ty->rank; i++)
        di_buf_printf(b, "%s%" PRId64, i ? "," : "", ir_type_dims(m, t)[i]);
    di_buf_putc(b, ']');
}

static void
sig_attr(di_buf *b, const ir_module *m, const ir_attr *a)
{
    di_buf_puts(b, ir_str_get(m, a->key));
    di_buf_putc(b, '=');
    switch (a->kind) {
    case IR_ATTR_INT:
        di_buf_printf(b, "%" PRId64, a->i);
        break;
    case IR_ATTR_FLOAT:
        di_buf_double(b, a->f);
        break;
    case IR_ATTR_STRING:
        di_buf_json_str(b, ir_str_get(m, a->s));
        break;
    case IR_ATTR_INTS:
        di_buf_putc(b, '[');
        for (uint32_t i = 0; i < a->n; i++)
            di_buf_printf(b, "%s%" PRId64, i ? "," : "", m->ints[a->off + i]);
        di_buf_putc(b, ']');
        break;
    case IR_ATTR_FLOATS:
        di_buf_putc(b, '[');
        for (uint32_t i = 0; i < a->n; i++) {
            if (i)
                di_buf_putc(b, ',');
            di_buf_double(b, m->floats[a->off + i]);
        }
        di_buf_putc(b, ']');
        break;
    case IR_ATTR_MESH:
        /* A mesh by its shape: its name and device ids do not change an op's time. */
        di_buf_puts(b, "mesh<");
        if (a->s > 0 && a->s < m->nmesh) {
            const ir_mesh *mesh = &m->meshes[a->s];
            for (uint32_t i = 0; i < mesh->rank; i++)
                di_buf_printf(b, "%s%" PRId64, i ? "x" : "", ir_mesh_shape(m, a->s)[i]);
        }
        di_buf_putc(b, '>');
        break;
    case IR_ATTR_TENSOR:
        /* A constant by its type: its contents do not change an op's time. */
        di_buf_puts(b, "tensor<");
        sig_type(b, m, (ir_id)a->i);
        di_buf_putc(b, '>');
        break;
    default:
        di_buf_putc(b, '?');
    }
}

void
hw_op_signature(const ir_module *m, ir_id op, char *buf, size_t size)
{
    const ir_op *o = &m->ops[op];
    di_buf b;
    uint32_t shown = 0;
    if (size == 0)
        return;
    di_buf_init(&b);
    di_buf_puts(&b, ir_op_name(m, op));
    di_buf_putc(&b, '(');
    for (uint32_t i = 0; i < o->ninput; i++) {
        ir_id v = ir_op_input(m, op, i);
        if (i)
            di_buf_putc(&b, ',');
        sig_type(&b, m, v > 0 && v < m->nvalue ? m->values[v].type : 0);
    }
    di_buf_putc(&b, ')');
    for (uint32_t i = 0; i < o->nattr; i++) {
        const ir_attr *a = &m->attrs[o->attrs + i];
        /* An opaque op's type is already its name. */
        if (o->kind == IR_OP_OPAQUE && strcmp(ir_str_get(m, a->key), "op_type") == 0)
            continue;
        di_buf_putc(&b, shown++ ? ',' : '{');
        sig_attr(&b, m, a);
    }
    if (shown)
        di_buf_putc(&b, '}');
    if (b.len < size) {
        memcpy(buf, b.data, b.len + 1);
    } else {
        memcpy(buf, b.data, size - 1);
        buf[size - 1] = '\0';
    }
    di_buf_fini(&b);
}
