/*
 * npy.c: a small reader and writer for NumPy's .npy format
 * (numpy/lib/format.py): the magic "\x93NUMPY", a version byte pair, the
 * header length (2 bytes little-endian in version 1.0, 4 bytes in 2.0 and
 * 3.0), then an ASCII Python dict literal such as
 *
 *     {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
 *
 * padded with spaces to a multiple of 64 bytes and ended by a newline, then
 * the elements in C order.
 *
 * Supported descr values: '<f4' f32, '<f2' f16, '<f8' f64, '<i8' i64,
 * '<i4' i32, '|i1' i8, '|b1' bool, and '<u2' for bfloat16: NumPy has no
 * bfloat16, so a bf16 tensor is written as the raw 16-bit patterns with
 * descr '<u2', and '<u2' is read back as bfloat16 bit patterns (from
 * PyTorch: x.view(torch.int16).numpy().view('<u2')). Big-endian data,
 * Fortran order and other dtypes are refused with a message that names
 * them. The header parser accepts exactly the three keys NumPy writes, in
 * any order, and rejects anything else, so malformed input never reaches
 * the allocator with an unchecked size.
 */
#include "exec/exec_int.h"

#include <ctype.h>
#include <string.h>

#define NPY_MAGIC "\x93NUMPY"
#define NPY_MAX_HEADER (1u << 20)

/* ---- the header dict ---- */

typedef struct hdr_parser {
    const char *s;
    size_t n, i;
    di_error *err;
} hdr_parser;

static void
skip_ws(hdr_parser *p)
{
    while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' ||
                           p->s[p->i] == '\r'))
        p->i++;
}

static int
expect(hdr_parser *p, char c)
{
    skip_ws(p);
    if (p->i < p->n && p->s[p->i] == c) {
        p->i++;
        return 0;
    }
    return di_error_set(p->err, DI_EDECODE, "npy header: expected '%c' at offset %zu", c, p->i);
}

/* A quoted string (single or double quotes, no escapes) into buf. */
static int
parse_str(hdr_parser *p, char *buf, size_t cap)
{
    char q;
    size_t len = 0;
    skip_ws(p);
    if (p->i >= p->n || (p->s[p->i] != '\'' && p->s[p->i] != '"'))
        return di_error_set(p->err, DI_EDECODE, "npy header: expected a string at offset %zu",
                            p->i);
    q = p->s[p->i++];
    while (p->i < p->n && p->s[p->i] != q) {
        if (p->s[p->i] == '\\' || (unsigned char)p->s[p->i] < 0x20)
            return di_error_set(p->err, DI_EDECODE,
                                "npy header: unexpected character in a string at offset %zu",
                                p->i);
        if (len + 1 >= cap)
            return di_error_set(p->err, DI_EDECODE, "npy header: string too long at offset %zu",
                                p->i);
        buf[len++] = p->s[p->i++];
    }
    if (p->i >= p->n)
        return di_error_set(p->err, DI_EDECODE, "npy header: unterminated string");
    p->i++;
    buf[len] = '\0';
    return 0;
}

static int
parse_bool(hdr_parser *p, int *v)
{
    skip_ws(p);
    if (p->n - p->i >= 4 && memcmp(p->s + p->i, "True", 4) == 0) {
        p->i += 4;
        *v = 1;
        return 0;
    }
    if (p->n - p->i >= 5 && memcmp(p->s + p->i, "False", 5) == 0) {
        p->i += 5;
        *v = 0;
        return 0;
    }
    return di_error_set(p->err, DI_EDECODE, "npy header: expected True or False at offset %zu",
                        p->i);
}

/* A tuple of non-negative ints: (), (3,), (3, 4), (3, 4,). */
static int
parse_shape(hdr_parser *p, uint32_t *rank, int64_t *dims)
{
    int rc;
    *rank = 0;
    if ((rc = expect(p, '(')) != 0)
        return rc;
    for (;;) {
        int64_t v = 0;
        int digits = 0;
        skip_ws(p);
        if (p->i < p->n && p->s[p->i] == ')') {
            p->i++;
            return 0;
        }
        while (p->i < p->n && isdigit((unsigned char)p->s[p->i])) {
            int d = p->s[p->i++] - '0';
            if (v > (INT64_MAX - d) / 10)
                return di_error_set(p->err, DI_EDECODE, "npy header: dimension too large");
            v = v * 10 + d;
            digits++;
        }
        /* Python 2 era files may write 3L. */
        if (digits && p->i < p->n && p->s[p->i] == 'L')
            p->i++;
        if (!digits)
            return di_error_set(p->err, DI_EDECODE,
                                "npy header: expected a dimension at offset %zu", p->i);
        if (*rank >= IR_MAX_RANK)
            return di_error_set(p->err, DI_EDECODE, "npy header: more than %d dimensions",
                                IR_MAX_RANK);
        dims[(*rank)++] = v;
        skip_ws(p);
        if (p->i < p->n && p->s[p->i] == ',') {
            p->i++;
            continue;
        }
        if ((rc = expect(p, ')')) != 0)
            return rc;
        return 0;
    }
}

static int
descr_dtype(const char *d, ir_dtype *dt, di_error *err)
{
    static const struct {
        const char *descr;
        ir_dtype dt;
    } tab[] = {
        {"<f4", IR_F32}, {"<f2", IR_F16}, {"<f8", IR_F64}, {"<i8", IR_I64}, {"<i4", IR_I32},
        {"|i1", IR_I8},  {"<i1", IR_I8},  {"|b1", IR_BOOL}, {"<u2", IR_BF16},
    };
    for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
        if (strcmp(d, tab[i].descr) == 0) {
            *dt = tab[i].dt;
            return 0;
        }
    if (d[0] == '>')
        return di_error_set(err, DI_EUNSUPPORTED,
                            "npy: big-endian data ('%s') is not supported; save it with "
                            "arr.astype(arr.dtype.newbyteorder('<'))",
                            d);
    return di_error_set(err, DI_EUNSUPPORTED,
                        "npy: dtype '%s' is not supported (use <f4, <f2, <f8, <i8, <i4, |i1, |b1, "
                        "or <u2 for bfloat16 bit patterns)",
                        d);
}

static int
parse_header(const char *s, size_t n, ir_dtype *dt, uint32_t *rank, int64_t *dims, di_error *err)
{
    hdr_parser p = {s, n, 0, err};
    int have_descr = 0, have_fortran = 0, have_shape = 0, fortran = 0, rc;
    char descr[32];
    if ((rc = expect(&p, '{')) != 0)
        return rc;
    for (;;) {
        char key[32];
        skip_ws(&p);
        if (p.i < p.n && p.s[p.i] == '}') {
            p.i++;
            break;
        }
        if ((rc = parse_str(&p, key, sizeof key)) != 0 || (rc = expect(&p, ':')) != 0)
            return rc;
        if (strcmp(key, "descr") == 0 && !have_descr) {
            if ((rc = parse_str(&p, descr, sizeof descr)) != 0)
                return rc;
            have_descr = 1;
        } else if (strcmp(key, "fortran_order") == 0 && !have_fortran) {
            if ((rc = parse_bool(&p, &fortran)) != 0)
                return rc;
            have_fortran = 1;
        } else if (strcmp(key, "shape") == 0 && !have_shape) {
            if ((rc = parse_shape(&p, rank, dims)) != 0)
                return rc;
            have_shape = 1;
        } else {
            return di_error_set(err, DI_EDECODE, "npy header: unexpected or repeated key '%s'",
                                key);
        }
        skip_ws(&p);
        if (p.i < p.n && p.s[p.i] == ',') {
            p.i++;
            continue;
        }
        if ((rc = expect(&p, '}')) != 0)
            return rc;
        break;
    }
    skip_ws(&p);
    if (p.i != p.n)
        return di_error_set(err, DI_EDECODE, "npy header: trailing characters after the dict");
    if (!have_descr || !have_fortran || !have_shape)
        return di_error_set(err, DI_EDECODE,
                            "npy header: needs the keys 'descr', 'fortran_order' and 'shape'");
    if (fortran)
        return di_error_set(err, DI_EUNSUPPORTED,
                            "npy: Fortran-order arrays are not supported; save "
                            "np.ascontiguousarray(arr)");
    return descr_dtype(descr, dt, err);
}

/* Parses a whole .npy image (exec_int.h: used by ex_npy_read and the fuzzer). */
int
ex_npy_parse(const uint8_t *data, size_t len, ex_tensor *t, di_error *err)
{
    size_t hlen, start;
    int64_t dims[IR_MAX_RANK];
    uint32_t rank = 0;
    ir_dtype dt = IR_DTYPE_NONE;
    int rc;
    memset(t, 0, sizeof *t);
    if (len < 10 || memcmp(data, NPY_MAGIC, 6) != 0)
        return di_error_set(err, DI_EDECODE, "not a .npy file (bad magic)");
    if (data[6] == 1) {
        hlen = (size_t)data[8] | (size_t)data[9] << 8;
        start = 10;
    } else if (data[6] == 2 || data[6] == 3) {
        if (len < 12)
            return di_error_set(err, DI_EDECODE, "npy: truncated header length");
        hlen = (size_t)data[8] | (size_t)data[9] << 8 | (size_t)data[10] << 16 |
               (size_t)data[11] << 24;
        start = 12;
    } else {
        return di_error_set(err, DI_EUNSUPPORTED, "npy: format version %u.%u is not supported",
                            data[6], data[7]);
    }
    if (hlen > NPY_MAX_HEADER || hlen > len - start)
        return di_error_set(err, DI_EDECODE, "npy: header length %zu exceeds the file", hlen);
    for (size_t i = 0; i < hlen; i++)
        if (data[start + i] == 0 || data[start + i] >= 0x80)
            return di_error_set(err, DI_EDECODE, "npy header: non-ASCII byte at offset %zu",
                                start + i);
    if ((rc = parse_header((const char *)data + start, hlen, &dt, &rank, dims, err)) != 0)
        return rc;
    start += hlen;
    {
        int64_t n = ex_shape_numel(rank, dims);
        uint64_t bytes;
        char sb[IR_MAX_RANK * 22 + 4];
        if (n < 0 || di_mul_u64((uint64_t)n, ir_dtype_size(dt), &bytes) != 0 ||
            bytes > EX_MAX_BYTES)
            return di_error_set(err, DI_ETOOBIG, "npy: shape %s is too large",
                                ex_shape_str(sb, sizeof sb, rank, dims));
        if (bytes != len - start)
            return di_error_set(err, DI_EDECODE,
                                "npy: shape %s of %s needs %llu data bytes, the file has %zu",
                                ex_shape_str(sb, sizeof sb, rank, dims), ir_dtype_name(dt),
                                (unsigned long long)bytes, len - start);
    }
    return ex_tensor_from_bytes(t, dt, rank, dims, data + start, len - start, err);
}

int
ex_npy_read(const char *path, ex_tensor *t, di_error *err)
{
    uint8_t *data;
    size_t len;
    int rc;
    memset(t, 0, sizeof *t);
    if ((rc = di_read_file(path, (size_t)EX_MAX_BYTES, &data, &len, err)) != 0)
        return rc;
    rc = ex_npy_parse(data, len, t, err);
    di_free(data);
    if (rc != 0)
        di_error_prefix(err, "%s", path);
    return rc;
}

static const char *
dtype_descr(ir_dtype dt)
{
    switch (dt) {
    case IR_F32:
        return "<f4";
    case IR_F16:
        return "<f2";
    case IR_BF16:
        return "<u2";
    case IR_F64:
        return "<f8";
    case IR_I64:
        return "<i8";
    case IR_I32:
        return "<i4";
    case IR_I8:
        return "|i1";
    case IR_BOOL:
        return "|b1";
    default:
        return NULL;
    }
}

int
ex_npy_write(const char *path, const ex_tensor *t, di_error *err)
{
    const char *descr = dtype_descr(t->dtype);
    di_buf b;
    uint8_t *payload;
    size_t plen, hstart, total;
    int rc;
    if (descr == NULL)
        return di_error_set(err, DI_EINVAL, "npy: cannot write dtype %s", ir_dtype_name(t->dtype));
    di_buf_init(&b);
    di_buf_printf(&b, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
    for (uint32_t i = 0; i < t->rank; i++)
        di_buf_printf(&b, "%lld,%s", (long long)t->dims[i], i + 1 < t->rank ? " " : "");
    di_buf_puts(&b, "), }");
    /* Version 1.0 unless the header needs more than 65535 bytes. */
    hstart = b.len + 1 + 10 <= 65535 ? 10 : 12;
    total = hstart + b.len + 1;
    while (total % 64 != 0) {
        di_buf_putc(&b, ' ');
        total++;
    }
    di_buf_putc(&b, '\n');
    if ((rc = ex_tensor_to_bytes(t, &payload, &plen)) != 0) {
        di_buf_fini(&b);
        return di_error_set(err, rc, "npy: cannot encode the tensor");
    }
    {
        di_buf f;
        size_t hl = b.len;
        uint8_t pre[12];
        memcpy(pre, NPY_MAGIC, 6);
        pre[6] = hstart == 10 ? 1 : 2;
        pre[7] = 0;
        pre[8] = (uint8_t)hl;
        pre[9] = (uint8_t)(hl >> 8);
        pre[10] = (uint8_t)(hl >> 16);
        pre[11] = (uint8_t)(hl >> 24);
        di_buf_init(&f);
        di_buf_put(&f, pre, hstart);
        di_buf_put(&f, b.data, b.len);
        di_buf_put(&f, payload, plen);
        rc = di_write_file(path, f.data, f.len, err);
        di_buf_fini(&f);
    }
    di_free(payload);
    di_buf_fini(&b);
    return rc;
}
