/*
 * tensor.c: the executors' tensors: allocation, element access in any
 * dtype, conversion from and to raw little-endian storage bytes (ONNX
 * raw_data, .npy payloads, initializers), rounding to a dtype after an op,
 * and the block copies the communication ops and sharding need.
 *
 * f16 and bf16 are computed in float and rounded back after every op
 * (round to nearest even, as hardware does); i32 and i8 are computed in
 * int64_t and wrapped back to their width, so that results match what a
 * device computing in those types would produce.
 */
#include "exec/exec_int.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

ex_class
ex_class_of(ir_dtype dt)
{
    switch (dt) {
    case IR_F64:
        return EX_CD;
    case IR_I64:
    case IR_I32:
    case IR_I8:
        return EX_CI;
    case IR_BOOL:
        return EX_CB;
    default:
        return EX_CF;
    }
}

size_t
ex_elem_size(ir_dtype dt)
{
    switch (ex_class_of(dt)) {
    case EX_CD:
    case EX_CI:
        return 8;
    case EX_CB:
        return 1;
    default:
        return sizeof(float);
    }
}

int64_t
ex_shape_numel(uint32_t rank, const int64_t *dims)
{
    int64_t n = 1;
    for (uint32_t i = 0; i < rank; i++) {
        if (dims[i] < 0)
            return -1;
        if (dims[i] != 0 && n > INT64_MAX / dims[i])
            return -1;
        n *= dims[i];
    }
    return n;
}

const char *
ex_shape_str(char *buf, size_t n, uint32_t rank, const int64_t *dims)
{
    size_t len = 0;
    if (n == 0)
        return buf;
    buf[0] = '\0';
    len += (size_t)snprintf(buf, n, "[");
    for (uint32_t i = 0; i < rank && len < n; i++)
        len += (size_t)snprintf(buf + len, n - len, "%s%lld", i ? "," : "", (long long)dims[i]);
    if (len < n)
        snprintf(buf + len, n - len, "]");
    return buf;
}

int
ex_tensor_init(ex_tensor *t, ir_dtype dt, uint32_t rank, const int64_t *dims)
{
    int64_t n;
    uint64_t bytes;
    memset(t, 0, sizeof *t);
    t->device = IR_DEVICE_NONE;
    if (rank > IR_MAX_RANK || dt == IR_DTYPE_NONE || dt >= IR_NDTYPE)
        return DI_EINVAL;
    n = ex_shape_numel(rank, dims);
    if (n < 0 || di_mul_u64((uint64_t)n, ex_elem_size(dt), &bytes) != 0 || bytes > EX_MAX_BYTES)
        return DI_ETOOBIG;
    t->data = di_calloc(n ? (size_t)n : 1, ex_elem_size(dt));
    if (t->data == NULL)
        return DI_ENOMEM;
    t->dtype = dt;
    t->rank = rank;
    if (rank)
        memcpy(t->dims, dims, rank * sizeof dims[0]);
    t->numel = (size_t)n;
    return 0;
}

void
ex_tensor_fini(ex_tensor *t)
{
    if (t == NULL)
        return;
    di_free(t->data);
    t->data = NULL;
    t->numel = 0;
}

int
ex_tensor_copy(ex_tensor *dst, const ex_tensor *src)
{
    int rc = ex_tensor_init(dst, src->dtype, src->rank, src->dims);
    if (rc != 0)
        return rc;
    dst->device = src->device;
    if (src->numel)
        memcpy(dst->data, src->data, src->numel * ex_elem_size(src->dtype));
    return 0;
}

double
ex_get(const ex_tensor *t, size_t i)
{
    switch (ex_class_of(t->dtype)) {
    case EX_CD:
        return ((const double *)t->data)[i];
    case EX_CI:
        return (double)((const int64_t *)t->data)[i];
    case EX_CB:
        return ((const uint8_t *)t->data)[i] ? 1.0 : 0.0;
    default:
        return ((const float *)t->data)[i];
    }
}

/* A double converted to int64 without undefined behaviour: truncates, saturates, NaN -> 0. */
static int64_t
to_i64(double v)
{
    if (v != v)
        return 0;
    if (v >= 9.2233720368547758e18)
        return INT64_MAX;
    if (v <= -9.2233720368547758e18)
        return INT64_MIN;
    return (int64_t)v;
}

void
ex_set(ex_tensor *t, size_t i, double v)
{
    switch (ex_class_of(t->dtype)) {
    case EX_CD:
        ((double *)t->data)[i] = v;
        break;
    case EX_CI: {
        int64_t x = to_i64(v);
        if (t->dtype == IR_I32)
            x = (int32_t)(uint32_t)(uint64_t)x;
        else if (t->dtype == IR_I8)
            x = (int8_t)(uint8_t)(uint64_t)x;
        ((int64_t *)t->data)[i] = x;
        break;
    }
    case EX_CB:
        ((uint8_t *)t->data)[i] = v != 0.0;
        break;
    default: {
        float f = (float)v;
        if (t->dtype == IR_F16)
            f = ex_half_to_float(ex_float_to_half(f));
        else if (t->dtype == IR_BF16)
            f = ex_bf16_to_float(ex_float_to_bf16(f));
        ((float *)t->data)[i] = f;
    }
    }
}

/* ---- half precision ---- */

static uint32_t
f2u(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float
u2f(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float
ex_half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h >> 15) << 31;
    uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    if (exp == 0x1f)
        return u2f(sign | 0x7f800000u | (mant << 13));
    if (exp == 0) {
        /* Zero or subnormal: mant * 2^-24. */
        float v = (float)mant * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    return u2f(sign | ((exp + 112) << 23) | (mant << 13));
}

uint16_t
ex_float_to_half(float f)
{
    uint32_t u = f2u(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    uint32_t a = u & 0x7fffffffu;
    if (a >= 0x7f800000u) /* inf or NaN */
        return (uint16_t)(sign | 0x7c00 | (a > 0x7f800000u ? 0x200 : 0));
    if (a >= 0x477ff000u) /* rounds to >= 65520: overflow to inf */
        return (uint16_t)(sign | 0x7c00);
    if (a < 0x38800000u) {
        /* Subnormal half (or zero): round a * 2^24 to an integer, ties to even. */
        float v = u2f(a) * 16777216.0f;
        float r = nearbyintf(v);
        return (uint16_t)(sign | (uint16_t)r);
    }
    {
        uint32_t mant = a & 0x7fffff, exp = (a >> 23) - 112;
        uint32_t h = (exp << 10) | (mant >> 13);
        uint32_t rest = mant & 0x1fff;
        if (rest > 0x1000 || (rest == 0x1000 && (h & 1)))
            h++;
        return (uint16_t)(sign | h);
    }
}

float
ex_bf16_to_float(uint16_t h)
{
    return u2f((uint32_t)h << 16);
}

uint16_t
ex_float_to_bf16(float f)
{
    uint32_t u = f2u(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fff + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

void
ex_fixup(ex_tensor *t)
{
    size_t n = t->numel;
    switch (t->dtype) {
    case IR_F16: {
        float *p = t->data;
        for (size_t i = 0; i < n; i++)
            p[i] = ex_half_to_float(ex_float_to_half(p[i]));
        break;
    }
    case IR_BF16: {
        float *p = t->data;
        for (size_t i = 0; i < n; i++)
            p[i] = ex_bf16_to_float(ex_float_to_bf16(p[i]));
        break;
    }
    case IR_I32: {
        int64_t *p = t->data;
        for (size_t i = 0; i < n; i++)
            p[i] = (int32_t)(uint32_t)(uint64_t)p[i];
        break;
    }
    case IR_I8: {
        int64_t *p = t->data;
        for (size_t i = 0; i < n; i++)
            p[i] = (int8_t)(uint8_t)(uint64_t)p[i];
        break;
    }
    case IR_BOOL: {
        uint8_t *p = t->data;
        for (size_t i = 0; i < n; i++)
            p[i] = p[i] != 0;
        break;
    }
    default:
        break;
    }
}

/* ---- storage bytes ---- */

int
ex_tensor_from_bytes(ex_tensor *t, ir_dtype dt, uint32_t rank, const int64_t *dims,
                     const void *bytes, size_t len, di_error *err)
{
    const uint8_t *p = bytes;
    uint32_t es;
    uint64_t need;
    char sb[IR_MAX_RANK * 22 + 4];
    int rc;
    memset(t, 0, sizeof *t);
    if (dt == IR_DTYPE_NONE || dt >= IR_NDTYPE)
        return di_error_set(err, DI_EINVAL, "invalid dtype");
    if (rank > IR_MAX_RANK)
        return di_error_set(err, DI_EINVAL, "rank %u exceeds %d", rank, IR_MAX_RANK);
    /* The size check comes first: a shape must not make us allocate what the data lacks. */
    es = ir_dtype_size(dt);
    {
        int64_t n = ex_shape_numel(rank, dims);
        if (n < 0 || di_mul_u64((uint64_t)n, es, &need) != 0)
            return di_error_set(err, DI_ETOOBIG, "a %s tensor of shape %s is too large",
                                ir_dtype_name(dt), ex_shape_str(sb, sizeof sb, rank, dims));
        if (need != len)
            return di_error_set(err, DI_EINVAL,
                                "%zu bytes of data for a %s tensor of shape %s, which needs %llu",
                                len, ir_dtype_name(dt), ex_shape_str(sb, sizeof sb, rank, dims),
                                (unsigned long long)need);
    }
    if ((rc = ex_tensor_init(t, dt, rank, dims)) != 0)
        return di_error_set(err, rc, "cannot allocate a %s tensor of shape %s", ir_dtype_name(dt),
                            ex_shape_str(sb, sizeof sb, rank, dims));
    for (size_t i = 0; i < t->numel; i++) {
        uint64_t v = di_load_le(p + i * es, es);
        switch (dt) {
        case IR_F32:
            ((float *)t->data)[i] = u2f((uint32_t)v);
            break;
        case IR_F16:
            ((float *)t->data)[i] = ex_half_to_float((uint16_t)v);
            break;
        case IR_BF16:
            ((float *)t->data)[i] = ex_bf16_to_float((uint16_t)v);
            break;
        case IR_F64: {
            double d;
            memcpy(&d, &v, 8);
            ((double *)t->data)[i] = d;
            break;
        }
        case IR_I64:
            ((int64_t *)t->data)[i] = (int64_t)v;
            break;
        case IR_I32:
            ((int64_t *)t->data)[i] = (int32_t)(uint32_t)v;
            break;
        case IR_I8:
            ((int64_t *)t->data)[i] = (int8_t)(uint8_t)v;
            break;
        default:
            ((uint8_t *)t->data)[i] = v != 0;
            break;
        }
    }
    return 0;
}

int
ex_tensor_to_bytes(const ex_tensor *t, uint8_t **out, size_t *len)
{
    uint32_t es = ir_dtype_size(t->dtype);
    uint8_t *p;
    uint64_t n;
    *out = NULL;
    *len = 0;
    if (di_mul_u64(t->numel, es, &n) != 0 || n > SIZE_MAX)
        return DI_ETOOBIG;
    p = di_malloc(n ? (size_t)n : 1);
    if (p == NULL)
        return DI_ENOMEM;
    for (size_t i = 0; i < t->numel; i++) {
        uint64_t v;
        switch (t->dtype) {
        case IR_F32:
            v = f2u(((const float *)t->data)[i]);
            break;
        case IR_F16:
            v = ex_float_to_half(((const float *)t->data)[i]);
            break;
        case IR_BF16:
            v = ex_float_to_bf16(((const float *)t->data)[i]);
            break;
        case IR_F64:
            memcpy(&v, &((const double *)t->data)[i], 8);
            break;
        case IR_I64:
        case IR_I32:
        case IR_I8:
            v = (uint64_t)((const int64_t *)t->data)[i];
            break;
        default:
            v = ((const uint8_t *)t->data)[i] != 0;
            break;
        }
        di_store_le(p + i * es, v, es);
    }
    *out = p;
    *len = (size_t)n;
    return 0;
}

/* ---- blocks ---- */

/* Row-major strides of dims. */
static void
strides_of(uint32_t rank, const int64_t *dims, int64_t *st)
{
    int64_t s = 1;
    for (uint32_t i = rank; i > 0; i--) {
        st[i - 1] = s;
        s *= dims[i - 1];
    }
}

/*
 * Walks every element of the block `bdims` (rank r) placed at `offsets` in a
 * tensor of shape `dims`, calling back with (block index, tensor index).
 * Implemented as a loop over rows of the innermost dimension.
 */
#define BLOCK_WALK(r, bdims, dims, offsets, BODY)                                                  \
    do {                                                                                           \
        int64_t st_[IR_MAX_RANK], idx_[IR_MAX_RANK];                                               \
        int64_t bn_ = ex_shape_numel((r), (bdims));                                                \
        int64_t inner_ = (r) ? (bdims)[(r)-1] : 1;                                                 \
        strides_of((r), (dims), st_);                                                              \
        memset(idx_, 0, sizeof idx_);                                                              \
        for (int64_t row_ = 0; inner_ > 0 && row_ < bn_ / inner_; row_++) {                        \
            int64_t base_ = 0;                                                                     \
            for (uint32_t d_ = 0; d_ < (r); d_++)                                                  \
                base_ += ((offsets)[d_] + idx_[d_]) * st_[d_];                                     \
            for (int64_t j_ = 0; j_ < inner_; j_++) {                                              \
                size_t bi = (size_t)(row_ * inner_ + j_);                                          \
                size_t ti = (size_t)(base_ + j_);                                                  \
                BODY;                                                                              \
            }                                                                                      \
            for (uint32_t d_ = (r) > 1 ? (r)-1 : 0; d_ > 0; d_--) {                                \
                if (++idx_[d_ - 1] < (bdims)[d_ - 1])                                              \
                    break;                                                                         \
                idx_[d_ - 1] = 0;                                                                  \
            }                                                                                      \
        }                                                                                          \
    } while (0)

void
ex_copy_block(const ex_tensor *src, const int64_t *offsets, ex_tensor *dst)
{
    size_t es = ex_elem_size(src->dtype);
    const uint8_t *s = src->data;
    uint8_t *d = dst->data;
    if (src->rank == 0) {
        memcpy(d, s, es);
        return;
    }
    BLOCK_WALK(src->rank, dst->dims, src->dims, offsets, memcpy(d + bi * es, s + ti * es, es));
}

void
ex_put_block(ex_tensor *dst, const int64_t *offsets, const ex_tensor *src, int mode)
{
    if (dst->rank == 0) {
        if (mode == 0)
            ex_set(dst, 0, ex_get(src, 0));
        else if (mode == 1)
            ex_set(dst, 0, ex_get(dst, 0) + ex_get(src, 0));
        else if (ex_get(src, 0) > ex_get(dst, 0))
            ex_set(dst, 0, ex_get(src, 0));
        return;
    }
    if (mode == 0) {
        size_t es = ex_elem_size(src->dtype);
        const uint8_t *s = src->data;
        uint8_t *d = dst->data;
        BLOCK_WALK(dst->rank, src->dims, dst->dims, offsets,
                   memcpy(d + ti * es, s + bi * es, es));
        return;
    }
    BLOCK_WALK(dst->rank, src->dims, dst->dims, offsets, {
        double a = ex_get(dst, ti);
        double b = ex_get(src, bi);
        ex_set(dst, ti, mode == 1 ? a + b : (b > a ? b : a));
    });
}

int
ex_concat(const ex_tensor *const *parts, uint32_t n, uint32_t dim, ex_tensor *out, di_error *err)
{
    int64_t dims[IR_MAX_RANK], off[IR_MAX_RANK];
    char a[IR_MAX_RANK * 22 + 4], b[IR_MAX_RANK * 22 + 4];
    int rc;
    memset(out, 0, sizeof *out);
    if (n == 0 || dim >= parts[0]->rank)
        return di_error_set(err, DI_EINVAL, "nothing to concatenate along dimension %u", dim);
    memcpy(dims, parts[0]->dims, parts[0]->rank * sizeof dims[0]);
    dims[dim] = 0;
    for (uint32_t k = 0; k < n; k++) {
        const ex_tensor *p = parts[k];
        int ok = p->rank == parts[0]->rank && p->dtype == parts[0]->dtype;
        for (uint32_t d = 0; ok && d < p->rank; d++)
            if (d != dim && p->dims[d] != parts[0]->dims[d])
                ok = 0;
        if (!ok)
            return di_error_set(err, DI_EINVAL,
                                "cannot concatenate %s %s with %s %s along dimension %u",
                                ir_dtype_name(p->dtype),
                                ex_shape_str(a, sizeof a, p->rank, p->dims),
                                ir_dtype_name(parts[0]->dtype),
                                ex_shape_str(b, sizeof b, parts[0]->rank, parts[0]->dims), dim);
        dims[dim] += p->dims[dim];
    }
    if ((rc = ex_tensor_init(out, parts[0]->dtype, parts[0]->rank, dims)) != 0)
        return di_error_set(err, rc, "cannot allocate the concatenation %s",
                            ex_shape_str(a, sizeof a, parts[0]->rank, dims));
    memset(off, 0, sizeof off);
    for (uint32_t k = 0; k < n; k++) {
        ex_put_block(out, off, parts[k], 0);
        off[dim] += parts[k]->dims[dim];
    }
    return 0;
}

int
ex_split_part(const ex_tensor *t, uint32_t dim, uint32_t n, uint32_t k, ex_tensor *out,
              di_error *err)
{
    int64_t dims[IR_MAX_RANK], off[IR_MAX_RANK];
    char a[IR_MAX_RANK * 22 + 4];
    int rc;
    memset(out, 0, sizeof *out);
    if (dim >= t->rank || n == 0 || t->dims[dim] % n != 0)
        return di_error_set(err, DI_EINVAL,
                            "cannot split a tensor of shape %s into %u equal parts along "
                            "dimension %u",
                            ex_shape_str(a, sizeof a, t->rank, t->dims), n, dim);
    memcpy(dims, t->dims, t->rank * sizeof dims[0]);
    dims[dim] /= n;
    memset(off, 0, sizeof off);
    off[dim] = dims[dim] * k;
    if ((rc = ex_tensor_init(out, t->dtype, t->rank, dims)) != 0)
        return di_error_set(err, rc, "cannot allocate a part of shape %s",
                            ex_shape_str(a, sizeof a, t->rank, dims));
    out->device = t->device;
    ex_copy_block(t, off, out);
    return 0;
}
