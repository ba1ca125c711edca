/*
 * onnx.c: the ONNX importer's graph walk. It checks the bytes (size, then
 * nesting depth with pb_check_depth before protobuf-c recurses, GRPC_NOTES
 * 8.4), unpacks onnx.ModelProto, and builds one function "main":
 *
 *   graph inputs   -> function arguments, in order (an input that is also an
 *                     initializer is an argument with data);
 *   initializers   -> function arguments with their data (ir_value_set_init),
 *                     created when an op first uses them; integer ones are
 *                     also constants, so that shape-like inputs (Reshape's
 *                     shape, Split's sizes, ...) fold into attributes;
 *   nodes          -> ops of the op table through the handlers of
 *                     onnx_ops.c, with constant folding of subgraphs whose
 *                     inputs are all constants (Shape of a static tensor is
 *                     a constant); unsupported ops -> dist.opaque ops that
 *                     carry op_type and their declared shapes (or an error
 *                     naming the node when strict);
 *   graph outputs  -> function results.
 *
 * Dimensions without a value (dim_param or nothing) take the sizes given in
 * onnx_options (default 1). Every value lives on one device (default 0).
 * Opsets 9 through 17 of the default domain are accepted.
 *
 * Graphs that ONNX Runtime wrote after automatic differentiation reference
 * a few names no node defines; the importer recreates them (docs/onnx.md):
 * "X_grad" for a defined X is the seed gradient (an argument like X whose
 * initializer is all ones), ".../Shape_X" is the shape of X (a constant),
 * and Gemm ignores its C input when beta is 0 (ORT's "ZeroConstant").
 */
#include "onnx/onnx_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/pb.h"

#define ONNX_MAX_DEPTH 64

/* ---- errors ---- */

int
onnx_fail(imp *I, int code, const char *fmt, ...)
{
    char msg[800];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (I->node != NULL) {
        const char *name = I->node->name && *I->node->name ? I->node->name : "";
        const char *type = I->node->op_type ? I->node->op_type : "";
        if (*name)
            return di_error_set(I->err, code, "node '%s' (%s): %s", name, type, msg);
        return di_error_set(I->err, code, "node %s (unnamed, output '%s'): %s", type,
                            I->node->n_output && I->node->output[0] ? I->node->output[0] : "",
                            msg);
    }
    return di_error_set(I->err, code, "%s", msg);
}

/* ---- data types ---- */

const char *
onnx_dtype_name(int64_t t)
{
    static const char *const names[] = {
        "UNDEFINED", "FLOAT",  "UINT8",  "INT8",      "UINT16",     "INT16",
        "INT32",     "INT64",  "STRING", "BOOL",      "FLOAT16",    "DOUBLE",
        "UINT32",    "UINT64", "COMPLEX64", "COMPLEX128", "BFLOAT16",
    };
    return t >= 0 && t < (int64_t)(sizeof names / sizeof names[0]) ? names[t] : "unknown";
}

/* ---- tensors ---- */

int
onnx_tensor_from_proto(const Onnx__TensorProto *tp, const char *what, ex_tensor *t,
                       di_error *err)
{
    ir_dtype dt;
    int64_t dims[IR_MAX_RANK], n;
    size_t have;
    int rc;
    memset(t, 0, sizeof *t);
    if ((tp->has_data_location &&
         tp->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL) ||
        tp->n_external_data > 0) {
        const char *file = "?";
        for (size_t i = 0; i < tp->n_external_data; i++)
            if (tp->external_data[i]->key && strcmp(tp->external_data[i]->key, "location") == 0)
                file = tp->external_data[i]->value ? tp->external_data[i]->value : "?";
        return di_error_set(err, DI_EUNSUPPORTED,
                            "%s uses external data (file '%s'): not supported; embed the weights "
                            "(onnx.save_model(m, path, save_as_external_data=False))",
                            what, file);
    }
    if (tp->segment != NULL)
        return di_error_set(err, DI_EUNSUPPORTED, "%s is a segment of a tensor: not supported",
                            what);
    dt = ir_dtype_from_onnx(tp->data_type);
    if (dt == IR_DTYPE_NONE)
        return di_error_set(err, DI_EUNSUPPORTED, "%s has data type %s, which distir does not "
                            "support", what, onnx_dtype_name(tp->data_type));
    if (tp->n_dims > IR_MAX_RANK)
        return di_error_set(err, DI_EUNSUPPORTED, "%s has rank %zu, more than %d", what,
                            tp->n_dims, IR_MAX_RANK);
    for (size_t i = 0; i < tp->n_dims; i++) {
        if (tp->dims[i] < 0)
            return di_error_set(err, DI_EDECODE, "%s has a negative dimension %lld", what,
                                (long long)tp->dims[i]);
        dims[i] = tp->dims[i];
    }
    n = ex_shape_numel((uint32_t)tp->n_dims, dims);
    if (n < 0)
        return di_error_set(err, DI_ETOOBIG, "%s has too many elements", what);
    if (tp->has_raw_data) {
        rc = ex_tensor_from_bytes(t, dt, (uint32_t)tp->n_dims, dims, tp->raw_data.data,
                                  tp->raw_data.len, err);
        if (rc != 0)
            di_error_prefix(err, "%s", what);
        return rc;
    }
    switch (dt) {
    case IR_F32:
        have = tp->n_float_data;
        break;
    case IR_F64:
        have = tp->n_double_data;
        break;
    case IR_I64:
        have = tp->n_int64_data;
        break;
    default:
        have = tp->n_int32_data;
        break;
    }
    if (have != (size_t)n)
        return di_error_set(err, DI_EDECODE, "%s holds %zu values for %lld elements", what, have,
                            (long long)n);
    if ((rc = ex_tensor_init(t, dt, (uint32_t)tp->n_dims, dims)) != 0)
        return di_error_set(err, rc, "%s: cannot allocate %lld elements", what, (long long)n);
    for (size_t i = 0; i < (size_t)n; i++) {
        switch (dt) {
        case IR_F32:
            ((float *)t->data)[i] = tp->float_data[i];
            break;
        case IR_F64:
            ((double *)t->data)[i] = tp->double_data[i];
            break;
        case IR_I64:
            ((int64_t *)t->data)[i] = tp->int64_data[i];
            break;
        case IR_F16:
            ((float *)t->data)[i] = ex_half_to_float((uint16_t)tp->int32_data[i]);
            break;
        case IR_BF16:
            ((float *)t->data)[i] = ex_bf16_to_float((uint16_t)tp->int32_data[i]);
            break;
        default:
            ex_set(t, i, (double)tp->int32_data[i]);
        }
    }
    return 0;
}

int
onnx_tensor_decode(const uint8_t *data, size_t len, ex_tensor *t, char **name, di_error *err)
{
    ProtobufCMessage *msg;
    const Onnx__TensorProto *tp;
    int rc;
    memset(t, 0, sizeof *t);
    if (name)
        *name = NULL;
    if ((rc = pb_unpack_checked(&onnx__tensor_proto__descriptor, data, len, ONNX_MAX_DEPTH, &msg,
                                err)) != 0)
        return rc;
    tp = (const Onnx__TensorProto *)msg;
    if (tp->data_type == 4 && tp->has_raw_data) {
        /* UINT16 data is bfloat16 bit patterns (NumPy has no bfloat16; ONNX's tests do so). */
        Onnx__TensorProto copy = *tp;
        copy.data_type = 16;
        rc = onnx_tensor_from_proto(&copy, "the tensor", t, err);
    } else {
        rc = onnx_tensor_from_proto(tp, "the tensor", t, err);
    }
    if (rc == 0 && name)
        *name = di_xstrdup(tp->name ? tp->name : "");
    protobuf_c_message_free_unpacked(msg, NULL);
    return rc;
}

/* ---- the value table ---- */

static uint32_t
str_hash(const char *s)
{
    uint32_t h = 2166136261u;
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 16777619u;
    return h;
}

static oval *
find_val(imp *I, const char *name)
{
    uint32_t h;
    if (I->ctab == 0)
        return NULL;
    for (h = str_hash(name) & (I->ctab - 1);; h = (h + 1) & (I->ctab - 1)) {
        uint32_t k = I->tab[h];
        if (k == 0)
            return NULL;
        if (strcmp(I->vals[k - 1]->name, name) == 0)
            return I->vals[k - 1];
    }
}

static void
tab_insert(imp *I, uint32_t idx)
{
    uint32_t h = str_hash(I->vals[idx]->name) & (I->ctab - 1);
    while (I->tab[h] != 0)
        h = (h + 1) & (I->ctab - 1);
    I->tab[h] = idx + 1;
}

/* The entry of name, created empty if absent. */
static oval *
get_val(imp *I, const char *name)
{
    oval *v = find_val(I, name);
    if (v != NULL)
        return v;
    if ((I->nval + 1) * 2 > I->ctab) {
        uint32_t nc = I->ctab ? I->ctab * 2 : 64;
        di_free(I->tab);
        I->tab = di_xcalloc(nc, sizeof *I->tab);
        I->ctab = nc;
        for (uint32_t i = 0; i < I->nval; i++)
            tab_insert(I, i);
    }
    DI_GROW(&I->vals, &I->cval, I->nval + 1);
    v = di_xcalloc(1, sizeof *v);
    I->vals[I->nval] = v;
    v->name = name;
    tab_insert(I, I->nval++);
    return v;
}

static void
set_type(oval *v, ir_dtype dt, uint32_t rank, const int64_t *dims)
{
    v->has_type = 1;
    v->dtype = dt;
    v->rank = rank;
    if (rank)
        memcpy(v->dims, dims, rank * sizeof dims[0]);
}

/* Reads a tensor TypeProto, binding symbolic dimensions. */
static int
read_type(imp *I, const Onnx__TypeProto *tp, const char *what, ir_dtype *dt, uint32_t *rank,
          int64_t *dims)
{
    const Onnx__TypeProto__Tensor *tt;
    if (tp == NULL || tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE ||
        tp->tensor_type == NULL)
        return onnx_fail(I, DI_EUNSUPPORTED, "%s is not a tensor (sequence, map, optional and "
                         "sparse types are not supported)", what);
    tt = tp->tensor_type;
    *dt = ir_dtype_from_onnx(tt->elem_type);
    if (*dt == IR_DTYPE_NONE)
        return onnx_fail(I, DI_EUNSUPPORTED, "%s has data type %s, which distir does not support",
                         what, onnx_dtype_name(tt->elem_type));
    if (tt->shape == NULL)
        return onnx_fail(I, DI_EUNSUPPORTED, "%s has no shape (distir needs the rank)", what);
    if (tt->shape->n_dim > IR_MAX_RANK)
        return onnx_fail(I, DI_EUNSUPPORTED, "%s has rank %zu, more than %d", what,
                         tt->shape->n_dim, IR_MAX_RANK);
    *rank = (uint32_t)tt->shape->n_dim;
    for (uint32_t i = 0; i < *rank; i++) {
        const Onnx__TensorShapeProto__Dimension *d = tt->shape->dim[i];
        int64_t v = I->opt.default_dim;
        if (d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE) {
            v = d->dim_value;
            if (v < 0)
                return onnx_fail(I, DI_EDECODE, "%s has a negative dimension %lld", what,
                                 (long long)v);
        } else if (d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM &&
                   d->dim_param) {
            for (uint32_t k = 0; k < I->opt.ndim; k++)
                if (strcmp(I->opt.dim_names[k], d->dim_param) == 0)
                    v = I->opt.dim_values[k];
        }
        dims[i] = v;
    }
    if (ex_shape_numel(*rank, dims) < 0)
        return onnx_fail(I, DI_ETOOBIG, "%s has too many elements", what);
    return 0;
}

/* The known type of v, from data, a declaration or an op. */
static int
val_type(imp *I, oval *v)
{
    ir_dtype dt;
    uint32_t rank;
    int64_t dims[IR_MAX_RANK];
    int rc;
    if (v->has_type)
        return 0;
    if (v->init != NULL) {
        const Onnx__TensorProto *tp = v->init;
        dt = ir_dtype_from_onnx(tp->data_type);
        if (dt == IR_DTYPE_NONE)
            return onnx_fail(I, DI_EUNSUPPORTED, "initializer '%s' has data type %s, which "
                             "distir does not support", v->name, onnx_dtype_name(tp->data_type));
        if (tp->n_dims > IR_MAX_RANK)
            return onnx_fail(I, DI_EUNSUPPORTED, "initializer '%s' has rank %zu", v->name,
                             tp->n_dims);
        for (size_t i = 0; i < tp->n_dims; i++) {
            if (tp->dims[i] < 0)
                return onnx_fail(I, DI_EDECODE, "initializer '%s' has a negative dimension",
                                 v->name);
            dims[i] = tp->dims[i];
        }
        set_type(v, dt, (uint32_t)tp->n_dims, dims);
        return 0;
    }
    if (v->vi != NULL) {
        char what[300];
        snprintf(what, sizeof what, "value '%s'", v->name);
        if ((rc = read_type(I, v->vi->type, what, &dt, &rank, dims)) != 0)
            return rc;
        set_type(v, dt, rank, dims);
        return 0;
    }
    return onnx_fail(I, DI_EUNSUPPORTED, "the type of '%s' is unknown", v->name);
}

/* Decodes an integer initializer into v->cst. */
static int
load_init(imp *I, oval *v)
{
    char what[300];
    int rc;
    if (v->cst.data != NULL || v->init == NULL)
        return 0;
    snprintf(what, sizeof what, "initializer '%s'", v->name);
    rc = onnx_tensor_from_proto(v->init, what, &v->cst, I->err);
    if (rc != 0) {
        char msg[sizeof I->err->msg];
        snprintf(msg, sizeof msg, "%s", I->err->msg);
        return onnx_fail(I, rc, "%s", msg);
    }
    return 0;
}

/* Whether v's data is a compile-time constant (not a trainable float initializer). */
static int
is_const(imp *I, oval *v)
{
    if (v->cst.data != NULL)
        return 1;
    if (v->init != NULL && v->value == 0) {
        ir_dtype dt = ir_dtype_from_onnx(v->init->data_type);
        if ((dt == IR_I64 || dt == IR_I32 || dt == IR_I8 || dt == IR_BOOL) &&
            load_init(I, v) == 0)
            return 1;
    }
    return 0;
}

/* ---- ORT's undefined helper names ---- */

/* A tensor of ones (the seed gradient) or the shape of t, as raw bytes. */
static oval *
resolve_missing(imp *I, const char *name)
{
    size_t len = strlen(name);
    const char *base = strrchr(name, '/');
    base = base ? base + 1 : name;
    /* "X_grad": the seed gradient of X. */
    if (len > 5 && strcmp(name + len - 5, "_grad") == 0) {
        char prefix[512];
        oval *x;
        if (len - 5 >= sizeof prefix)
            return NULL;
        memcpy(prefix, name, len - 5);
        prefix[len - 5] = '\0';
        x = find_val(I, prefix);
        if (x != NULL && x->defined && val_type(I, x) == 0 && ir_dtype_is_float(x->dtype)) {
            oval *v = get_val(I, name);
            ex_tensor ones;
            uint8_t *bytes;
            size_t nb;
            ir_id ty = ir_type_tensor(I->m, x->dtype, x->rank, x->dims, I->opt.device);
            v->value = ir_region_add_arg(I->m, I->f, ty, name);
            /* The seed of ones as its data (unless absurdly large: then no data). */
            if (ex_shape_numel(x->rank, x->dims) <= ONNX_FOLD_MAX &&
                ex_tensor_init(&ones, x->dtype, x->rank, x->dims) == 0) {
                for (size_t i = 0; i < ones.numel; i++)
                    ex_set(&ones, i, 1.0);
                if (ex_tensor_to_bytes(&ones, &bytes, &nb) == 0) {
                    ir_value_set_init(I->m, v->value, bytes, nb);
                    di_free(bytes);
                }
                ex_tensor_fini(&ones);
            }
            set_type(v, x->dtype, x->rank, x->dims);
            v->defined = 1;
            return v;
        }
    }
    /* ".../Shape_X": the shape of X. */
    if (strncmp(base, "Shape_", 6) == 0) {
        oval *x = find_val(I, base + 6);
        if (x != NULL && x->defined && val_type(I, x) == 0) {
            oval *v;
            int64_t r = x->rank;
            ex_tensor t;
            if (ex_tensor_init(&t, IR_I64, 1, &r) != 0)
                return NULL;
            for (uint32_t i = 0; i < x->rank; i++)
                ((int64_t *)t.data)[i] = x->dims[i];
            v = get_val(I, name);
            v->cst = t;
            set_type(v, IR_I64, 1, &r);
            v->defined = 1;
            return v;
        }
    }
    return NULL;
}

oval *
onnx_lookup(imp *I, const char *name)
{
    oval *v = find_val(I, name);
    if (v != NULL && v->defined)
        return v;
    return resolve_missing(I, name);
}

int
onnx_has_input(const Onnx__NodeProto *n, uint32_t i)
{
    return i < n->n_input && n->input[i] != NULL && n->input[i][0] != '\0';
}

const ex_tensor *
onnx_const_input(imp *I, const Onnx__NodeProto *n, uint32_t i)
{
    oval *v;
    if (!onnx_has_input(n, i) || (v = onnx_lookup(I, n->input[i])) == NULL)
        return NULL;
    return is_const(I, v) ? &v->cst : NULL;
}

int
onnx_const_ints(imp *I, const Onnx__NodeProto *n, uint32_t i, const char *what, int64_t *v,
                uint32_t max, uint32_t *count)
{
    const ex_tensor *t = onnx_const_input(I, n, i);
    *count = 0;
    if (t == NULL)
        return onnx_fail(I, DI_EUNSUPPORTED, "input %u (%s, '%s') is not a constant; distir needs "
                         "static shapes", i, what, onnx_has_input(n, i) ? n->input[i] : "");
    if (ex_class_of(t->dtype) != EX_CI || t->rank > 1)
        return onnx_fail(I, DI_EUNSUPPORTED, "input %u (%s) must be a 1-d integer tensor", i,
                         what);
    if (t->numel > max)
        return onnx_fail(I, DI_EUNSUPPORTED, "input %u (%s) has %zu entries, at most %u", i, what,
                         t->numel, max);
    for (size_t k = 0; k < t->numel; k++)
        v[k] = ((const int64_t *)t->data)[k];
    *count = (uint32_t)t->numel;
    return 0;
}

int
onnx_input_type(imp *I, const Onnx__NodeProto *n, uint32_t i, ir_dtype *dt, uint32_t *rank,
                int64_t *dims)
{
    oval *v;
    int rc;
    if (!onnx_has_input(n, i))
        return onnx_fail(I, DI_EUNSUPPORTED, "input %u is missing", i);
    if ((v = onnx_lookup(I, n->input[i])) == NULL)
        return onnx_fail(I, DI_EVERIFY, "input '%s' is not a graph input, initializer or node "
                         "output", n->input[i]);
    if ((rc = val_type(I, v)) != 0)
        return rc;
    *dt = v->dtype;
    *rank = v->rank;
    if (v->rank)
        memcpy(dims, v->dims, v->rank * sizeof dims[0]);
    return 0;
}

int
onnx_bind_const(imp *I, const Onnx__NodeProto *n, uint32_t k, ex_tensor *t)
{
    oval *v;
    if (k >= n->n_output || n->output[k] == NULL || n->output[k][0] == '\0') {
        ex_tensor_fini(t);
        return 0;
    }
    v = get_val(I, n->output[k]);
    if (v->defined) {
        ex_tensor_fini(t);
        return onnx_fail(I, DI_EVERIFY, "output '%s' is defined twice", n->output[k]);
    }
    ex_tensor_fini(&v->cst);
    v->cst = *t;
    memset(t, 0, sizeof *t);
    set_type(v, v->cst.dtype, v->cst.rank, v->cst.dims);
    v->defined = 1;
    return 0;
}

/* ---- building IR ---- */

ir_id
onnx_const_op(imp *I, emit *e, const ex_tensor *t)
{
    uint8_t *bytes;
    size_t nb;
    ir_id ty, op;
    if (ex_tensor_to_bytes(t, &bytes, &nb) != 0) {
        onnx_fail(I, DI_ENOMEM, "out of memory");
        return 0;
    }
    ty = ir_type_tensor(e->m, t->dtype, t->rank, t->dims, IR_DEVICE_NONE);
    op = ir_op_add(e->m, e->r, IR_OP_CONSTANT, 0, NULL, 1, NULL, NULL);
    ir_op_set_tensor(e->m, op, "value", ty, bytes, nb);
    ir_op_set_int(e->m, op, "device", I->opt.device);
    di_free(bytes);
    if (onnx_infer(I, e, op) != 0)
        return 0;
    return ir_op_output(e->m, op, 0);
}

/* The IR value of entry v in the real module, creating an argument or a Constant op. */
static ir_id
materialize(imp *I, oval *v)
{
    if (v->value != 0)
        return v->value;
    if (v->init != NULL) {
        /* A weight: a function argument with data. */
        uint8_t *bytes;
        size_t nb;
        ir_id ty, id;
        int rc;
        if ((rc = load_init(I, v)) != 0)
            return 0;
        if (ex_tensor_to_bytes(&v->cst, &bytes, &nb) != 0) {
            onnx_fail(I, DI_ENOMEM, "out of memory");
            return 0;
        }
        ty = ir_type_tensor(I->m, v->cst.dtype, v->cst.rank, v->cst.dims, I->opt.device);
        id = ir_region_add_arg(I->m, I->f, ty, v->name);
        ir_value_set_init(I->m, id, bytes, nb);
        di_free(bytes);
        v->value = id;
        return id;
    }
    if (v->cst.data != NULL) {
        emit e;
        ir_id id;
        const char *name = v->name;
        memset(&e, 0, sizeof e);
        e.m = I->m;
        e.r = I->f;
        id = onnx_const_op(I, &e, &v->cst);
        if (id == 0)
            return 0;
        I->m->values[id].name = ir_str(I->m, name);
        v->value = id;
        return id;
    }
    onnx_fail(I, DI_EVERIFY, "'%s' has no value", v->name);
    return 0;
}

ir_id
onnx_in(imp *I, emit *e, const Onnx__NodeProto *n, uint32_t i)
{
    oval *v;
    if (i >= e->nin || !onnx_has_input(n, i)) {
        onnx_fail(I, DI_EVERIFY, "input %u is missing", i);
        return 0;
    }
    if (e->in[i] != 0)
        return e->in[i];
    if (e->scratch) {
        onnx_fail(I, DI_EINTERNAL, "folding reached input %u without a value", i);
        return 0;
    }
    if ((v = onnx_lookup(I, n->input[i])) == NULL) {
        onnx_fail(I, DI_EVERIFY, "input '%s' is not a graph input, initializer or node output",
                  n->input[i]);
        return 0;
    }
    e->in[i] = materialize(I, v);
    return e->in[i];
}

ir_id
onnx_op(emit *e, int kind, uint32_t nin, const ir_id *in, uint32_t nout)
{
    return ir_op_add(e->m, e->r, kind, nin, in, nout, NULL, NULL);
}

int
onnx_infer(imp *I, emit *e, ir_id op)
{
    di_error sub;
    di_error_clear(&sub);
    if (ir_op_infer_results(e->m, op, &sub) != 0)
        return onnx_fail(I, sub.code == DI_ENOMEM ? DI_ENOMEM : DI_EVERIFY, "%s", sub.msg);
    return 0;
}

/* ---- attributes ---- */

const Onnx__AttributeProto *
onnx_attr(const Onnx__NodeProto *n, const char *name)
{
    for (size_t i = 0; i < n->n_attribute; i++)
        if (n->attribute[i]->name && strcmp(n->attribute[i]->name, name) == 0)
            return n->attribute[i];
    return NULL;
}

int
onnx_check_attrs(imp *I, const Onnx__NodeProto *n, const char *known)
{
    for (size_t i = 0; i < n->n_attribute; i++) {
        const char *a = n->attribute[i]->name ? n->attribute[i]->name : "";
        size_t len = strlen(a);
        const char *p = known;
        int found = 0;
        while (*p && !found) {
            const char *q = strchr(p, ' ');
            size_t l = q ? (size_t)(q - p) : strlen(p);
            found = l == len && memcmp(p, a, len) == 0;
            p += l;
            while (*p == ' ')
                p++;
        }
        if (!found)
            return onnx_fail(I, DI_EUNSUPPORTED, "attribute '%s' is not supported", a);
    }
    return 0;
}

int
onnx_attr_int(imp *I, const Onnx__NodeProto *n, const char *name, int64_t dflt, int64_t *v)
{
    const Onnx__AttributeProto *a = onnx_attr(n, name);
    *v = dflt;
    if (a == NULL)
        return 0;
    if (a->type != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT && !(a->has_i && !a->has_type))
        return onnx_fail(I, DI_EDECODE, "attribute '%s' must be an int", name);
    *v = a->i;
    return 0;
}

int
onnx_attr_float(imp *I, const Onnx__NodeProto *n, const char *name, double dflt, double *v)
{
    const Onnx__AttributeProto *a = onnx_attr(n, name);
    *v = dflt;
    if (a == NULL)
        return 0;
    if (a->type != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT && !(a->has_f && !a->has_type))
        return onnx_fail(I, DI_EDECODE, "attribute '%s' must be a float", name);
    *v = a->f;
    return 0;
}

int
onnx_attr_ints(imp *I, const Onnx__NodeProto *n, const char *name, int64_t *v, uint32_t max,
               uint32_t *count, int *present)
{
    const Onnx__AttributeProto *a = onnx_attr(n, name);
    *count = 0;
    *present = a != NULL;
    if (a == NULL)
        return 0;
    if (a->type != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS && a->has_type)
        return onnx_fail(I, DI_EDECODE, "attribute '%s' must be a list of ints", name);
    if (a->n_ints > max)
        return onnx_fail(I, DI_EUNSUPPORTED, "attribute '%s' has %zu entries, at most %u", name,
                         a->n_ints, max);
    for (size_t i = 0; i < a->n_ints; i++)
        v[i] = a->ints[i];
    *count = (uint32_t)a->n_ints;
    return 0;
}

int
onnx_attr_string(imp *I, const Onnx__NodeProto *n, const char *name, char *buf, size_t cap)
{
    const Onnx__AttributeProto *a = onnx_attr(n, name);
    buf[0] = '\0';
    if (a == NULL)
        return 0;
    if (a->type != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING && a->has_type)
        return onnx_fail(I, DI_EDECODE, "attribute '%s' must be a string", name);
    if (a->s.len >= cap || (a->s.len && memchr(a->s.data, 0, a->s.len) != NULL))
        return onnx_fail(I, DI_EUNSUPPORTED, "attribute '%s' is too long", name);
    if (a->s.len)
        memcpy(buf, a->s.data, a->s.len);
    buf[a->s.len] = '\0';
    return 0;
}

/* ---- nodes ---- */

static void
emit_init(emit *e, ir_module *m, ir_id r, const Onnx__NodeProto *n)
{
    memset(e, 0, sizeof *e);
    e->m = m;
    e->r = r;
    e->nin = (uint32_t)n->n_input;
    e->nout = (uint32_t)n->n_output;
    e->in = di_xcalloc(e->nin + 1, sizeof *e->in);
    e->out = di_xcalloc(e->nout + 1, sizeof *e->out);
}

static void
emit_fini(emit *e)
{
    di_free(e->in);
    di_free(e->out);
}

/*
 * Constant folding: runs the handler on a scratch function whose arguments
 * are the node's constant inputs and executes it. Returns ONNX_NOTCONST
 * when a result would be too large to keep as a constant.
 */
static int
fold_node(imp *I, const Onnx__NodeProto *n, const onnx_handler *h)
{
    ir_module *sm = ir_module_new();
    ir_id sf = ir_func_new(sm, "main");
    emit e;
    ex_tensor *args, *res = NULL;
    uint32_t nargs = 0, nres = 0;
    int rc = 0;
    emit_init(&e, sm, sf, n);
    e.scratch = 1;
    args = di_xcalloc(e.nin + 1, sizeof *args);
    for (uint32_t i = 0; i < e.nin; i++) {
        const ex_tensor *c = onnx_const_input(I, n, i);
        if (c == NULL)
            continue;
        e.in[i] = ir_region_add_arg(sm, sf, ir_type_tensor(sm, c->dtype, c->rank, c->dims,
                                                           I->opt.device), NULL);
        args[nargs] = *c; /* borrowed */
        args[nargs++].device = I->opt.device;
    }
    rc = h->fn(I, n, &e);
    for (uint32_t k = 0; rc == 0 && k < e.nout; k++) {
        ir_id v = e.out[k];
        if (v == 0)
            continue;
        if (ir_type_numel(sm, sm->values[v].type) > ONNX_FOLD_MAX) {
            rc = ONNX_NOTCONST;
            break;
        }
        ir_region_add_result(sm, sf, v);
    }
    if (rc == 0) {
        di_error sub;
        di_error_clear(&sub);
        if (ex_run(sm, args, nargs, &res, &nres, &sub) != 0)
            rc = onnx_fail(I, sub.code, "constant folding failed: %s", sub.msg);
    }
    for (uint32_t k = 0, j = 0; rc == 0 && k < e.nout; k++)
        if (e.out[k] != 0 && j < nres)
            rc = onnx_bind_const(I, n, k, &res[j++]);
    for (uint32_t j = 0; j < nres; j++)
        ex_tensor_fini(&res[j]);
    di_free(res);
    di_free(args);
    emit_fini(&e);
    ir_module_free(sm);
    return rc;
}

/* Declared or ORT-rule type for output k of an opaque node. */
static int
opaque_out_type(imp *I, const Onnx__NodeProto *n, uint32_t k, ir_id *ty)
{
    oval *v = find_val(I, n->output[k]);
    ir_dtype dt;
    uint32_t rank;
    int64_t dims[IR_MAX_RANK];
    int rc;
    if (v != NULL && v->vi != NULL) {
        char what[300];
        snprintf(what, sizeof what, "output '%s'", n->output[k]);
        if ((rc = read_type(I, v->vi->type, what, &dt, &rank, dims)) != 0)
            return rc;
        *ty = ir_type_tensor(I->m, dt, rank, dims, I->opt.device);
        return 0;
    }
    /* ONNX Runtime's training ops whose outputs are typed like an input. */
    {
        static const struct {
            const char *op;
            uint32_t out, like;
        } rules[] = {
            {"SoftmaxCrossEntropy", 1, 0},    {"SoftmaxCrossEntropyGrad", 0, 1},
            {"SoftmaxCrossEntropyLoss", 1, 0}, {"SoftmaxCrossEntropyLossGrad", 0, 1},
            {"SoftmaxCrossEntropyLossInternal", 1, 0},
            {"SoftmaxCrossEntropyLossInternalGrad", 0, 1},
            {"FastGeluGrad", 0, 1},           {"BiasGeluGrad_dX", 0, 1},
            {"SGDOptimizer", 0, 1},           {"AdamOptimizer", 1, 2},
            {"LambOptimizer", 1, 2},
        };
        for (size_t r = 0; r < sizeof rules / sizeof rules[0]; r++)
            if (strcmp(n->op_type, rules[r].op) == 0 && rules[r].out == k &&
                onnx_input_type(I, n, rules[r].like, &dt, &rank, dims) == 0) {
                *ty = ir_type_tensor(I->m, dt, rank, dims, I->opt.device);
                return 0;
            }
    }
    return onnx_fail(I, DI_EUNSUPPORTED, "cannot import it as an opaque op: output '%s' has no "
                     "declared type (add value_info for it)", n->output[k]);
}

static int
import_opaque(imp *I, const Onnx__NodeProto *n, const char *why)
{
    ir_id *in = di_xcalloc(n->n_input + 1, sizeof *in), *types, op;
    const char **names;
    uint32_t nin = 0, nout = 0;
    int rc = 0;
    types = di_xcalloc(n->n_output + 1, sizeof *types);
    names = di_xcalloc(n->n_output + 1, sizeof *names);
    for (uint32_t i = 0; i < n->n_input && rc == 0; i++) {
        oval *v;
        if (!onnx_has_input(n, i))
            continue;
        if ((v = onnx_lookup(I, n->input[i])) == NULL) {
            rc = onnx_fail(I, DI_EVERIFY, "input '%s' is not a graph input, initializer or node "
                           "output", n->input[i]);
            break;
        }
        if ((in[nin++] = materialize(I, v)) == 0)
            rc = DI_EVERIFY;
    }
    /* Results: the declared outputs, skipping empty names. */
    for (uint32_t k = 0; k < n->n_output && rc == 0; k++) {
        if (n->output[k] == NULL || n->output[k][0] == '\0')
            continue;
        if ((rc = opaque_out_type(I, n, k, &types[nout])) != 0) {
            if (why && *why) {
                char msg[sizeof I->err->msg];
                snprintf(msg, sizeof msg, "%s (unsupported: %s)", I->err->msg, why);
                di_error_set(I->err, rc, "%s", msg);
            }
            break;
        }
        names[nout++] = n->output[k];
    }
    if (rc == 0) {
        op = ir_op_add(I->m, I->f, IR_OP_OPAQUE, nin, in, nout, types, names);
        ir_op_set_string(I->m, op, "op_type", n->op_type);
        I->m->ops[op].opaque = ir_str(I->m, n->op_type);
        if (n->name && *n->name)
            I->m->ops[op].name = ir_str(I->m, n->name);
        for (uint32_t k = 0, j = 0; k < n->n_output; k++) {
            oval *v;
            if (n->output[k] == NULL || n->output[k][0] == '\0')
                continue;
            v = get_val(I, n->output[k]);
            v->value = ir_op_output(I->m, op, j++);
            {
                const ir_type *t = &I->m->types[I->m->values[v->value].type];
                set_type(v, (ir_dtype)t->dtype, t->rank, I->m->ints + t->dims);
            }
            v->defined = 1;
        }
    }
    di_free(in);
    di_free(types);
    di_free(names);
    return rc;
}

/* Runs the handler on the real module and binds the outputs. */
static int
import_runtime(imp *I, const Onnx__NodeProto *n, const onnx_handler *h)
{
    emit e;
    int rc;
    emit_init(&e, I->m, I->f, n);
    rc = h->fn(I, n, &e);
    for (uint32_t k = 0; rc == 0 && k < e.nout; k++) {
        oval *v;
        ir_id id = e.out[k];
        const ir_type *t;
        if (n->output[k] == NULL || n->output[k][0] == '\0')
            continue;
        if (id == 0) {
            rc = onnx_fail(I, DI_EUNSUPPORTED, "output %u ('%s') is not produced", k,
                           n->output[k]);
            break;
        }
        v = get_val(I, n->output[k]);
        if (v->defined) {
            rc = onnx_fail(I, DI_EVERIFY, "output '%s' is defined twice", n->output[k]);
            break;
        }
        if (I->m->values[id].name == 0 && I->m->values[id].def != 0)
            I->m->values[id].name = ir_str(I->m, n->output[k]);
        v->value = id;
        t = &I->m->types[I->m->values[id].type];
        set_type(v, (ir_dtype)t->dtype, t->rank, I->m->ints + t->dims);
        v->defined = 1;
        if (n->name && *n->name && I->m->values[id].def)
            I->m->ops[I->m->values[id].def].name = ir_str(I->m, n->name);
    }
    emit_fini(&e);
    return rc;
}

/* Unsupported: an opaque op, or an error when strict. */
static int
unsupported(imp *I, const Onnx__NodeProto *n, int rc)
{
    char why[sizeof I->err->msg];
    if (rc != DI_EUNSUPPORTED)
        return rc;
    if (I->opt.strict)
        return rc;
    /* Keep the reason (after the node label) for the opaque op's error path. */
    {
        const char *p = strstr(I->err->msg, "): ");
        snprintf(why, sizeof why, "%s", p ? p + 3 : I->err->msg);
    }
    di_error_clear(I->err);
    return import_opaque(I, n, why);
}

static int
import_node(imp *I, const Onnx__NodeProto *n)
{
    const char *domain = n->domain ? n->domain : "";
    const onnx_handler *h;
    int rc, all_const = 1;
    I->node = n;
    if (n->op_type == NULL || n->op_type[0] == '\0')
        return onnx_fail(I, DI_EDECODE, "a node has no op_type");
    h = onnx_find_handler(strcmp(domain, "ai.onnx") == 0 ? "" : domain, n->op_type);
    if (h == NULL) {
        if (I->opt.strict)
            return onnx_fail(I, DI_EUNSUPPORTED, "op %s%s%s is not supported", domain,
                             *domain ? "." : "", n->op_type);
        return import_opaque(I, n, "");
    }
    if (h->cfn != NULL) {
        rc = h->cfn(I, n);
        if (rc != ONNX_NOTCONST)
            return rc == 0 ? 0 : unsupported(I, n, rc);
        if (h->fn == NULL)
            return unsupported(I, n, onnx_fail(I, DI_EUNSUPPORTED, "its inputs are not "
                                                "constants, and distir has no such op"));
    }
    for (uint32_t i = 0; i < n->n_input; i++)
        if (onnx_has_input(n, i) && onnx_const_input(I, n, i) == NULL)
            all_const = 0;
    if (all_const && n->n_input > 0) {
        rc = fold_node(I, n, h);
        if (rc != ONNX_NOTCONST)
            return rc == 0 ? 0 : unsupported(I, n, rc);
    }
    rc = import_runtime(I, n, h);
    return rc == 0 ? 0 : unsupported(I, n, rc);
}

/* ---- the model ---- */

static int
import_graph(imp *I)
{
    const Onnx__GraphProto *g = I->g;
    ir_limits lim;
    int rc;
    ir_limits_default(&lim);
    if (g->n_node > lim.max_ops)
        return onnx_fail(I, DI_ETOOBIG, "the graph has %zu nodes, more than %u", g->n_node,
                         lim.max_ops);
    /* Declarations first: initializers and declared types. */
    for (size_t i = 0; i < g->n_initializer; i++) {
        const Onnx__TensorProto *tp = g->initializer[i];
        oval *v;
        if (tp->name == NULL || tp->name[0] == '\0')
            return onnx_fail(I, DI_EDECODE, "initializer %zu has no name", i);
        if ((tp->has_data_location &&
             tp->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL) ||
            tp->n_external_data > 0) {
            ex_tensor t;
            char what[300];
            snprintf(what, sizeof what, "initializer '%s'", tp->name);
            return onnx_tensor_from_proto(tp, what, &t, I->err);
        }
        v = get_val(I, tp->name);
        v->init = tp;
        v->defined = 1;
    }
    for (size_t i = 0; i < g->n_value_info; i++)
        if (g->value_info[i]->name && g->value_info[i]->name[0])
            get_val(I, g->value_info[i]->name)->vi = g->value_info[i];
    for (size_t i = 0; i < g->n_output; i++)
        if (g->output[i]->name && g->output[i]->name[0])
            get_val(I, g->output[i]->name)->vi = g->output[i];
    /* Graph inputs become the function's arguments, in order. */
    for (size_t i = 0; i < g->n_input; i++) {
        const Onnx__ValueInfoProto *vi = g->input[i];
        oval *v;
        ir_dtype dt;
        uint32_t rank;
        int64_t dims[IR_MAX_RANK];
        char what[300];
        if (vi->name == NULL || vi->name[0] == '\0')
            return onnx_fail(I, DI_EDECODE, "graph input %zu has no name", i);
        v = get_val(I, vi->name);
        v->vi = vi;
        if (v->init != NULL) {
            if (materialize(I, v) == 0)
                return I->err->code ? I->err->code : DI_EINTERNAL;
            continue;
        }
        if (v->defined)
            return onnx_fail(I, DI_EDECODE, "graph input '%s' is listed twice", vi->name);
        {
            /* An input the caller fixed to a value is a constant, not an argument. */
            int bound = 0;
            for (uint32_t k = 0; k < I->opt.nconst && !bound; k++)
                if (strcmp(I->opt.const_names[k], vi->name) == 0) {
                    if ((rc = ex_tensor_copy(&v->cst, &I->opt.const_values[k])) != 0)
                        return onnx_fail(I, rc, "out of memory");
                    set_type(v, v->cst.dtype, v->cst.rank, v->cst.dims);
                    v->defined = 1;
                    bound = 1;
                }
            if (bound)
                continue;
        }
        snprintf(what, sizeof what, "graph input '%s'", vi->name);
        if ((rc = read_type(I, vi->type, what, &dt, &rank, dims)) != 0)
            return rc;
        v = get_val(I, vi->name);
        v->value = ir_region_add_arg(I->m, I->f,
                                     ir_type_tensor(I->m, dt, rank, dims, I->opt.device),
                                     vi->name);
        set_type(v, dt, rank, dims);
        v->defined = 1;
    }
    for (size_t i = 0; i < g->n_node; i++)
        if ((rc = import_node(I, g->node[i])) != 0)
            return rc;
    I->node = NULL;
    for (size_t i = 0; i < g->n_output; i++) {
        const char *name = g->output[i]->name;
        oval *v = name ? onnx_lookup(I, name) : NULL;
        ir_id id;
        if (v == NULL)
            return onnx_fail(I, DI_EVERIFY, "graph output '%s' is never defined",
                             name ? name : "");
        if ((id = materialize(I, v)) == 0)
            return I->err->code ? I->err->code : DI_EINTERNAL;
        ir_region_add_result(I->m, I->f, id);
    }
    return 0;
}

void
onnx_options_default(onnx_options *o)
{
    memset(o, 0, sizeof *o);
    o->default_dim = 1;
    o->device = 0;
}

int
onnx_import_opts(const uint8_t *data, size_t len, const onnx_options *o, ir_module **out,
                 di_error *err)
{
    ProtobufCMessage *msg = NULL;
    imp I;
    ir_limits lim;
    int rc;
    *out = NULL;
    memset(&I, 0, sizeof I);
    I.err = err;
    if (o != NULL)
        I.opt = *o;
    else
        onnx_options_default(&I.opt);
    if (I.opt.default_dim < 0 || I.opt.device < 0)
        return di_error_set(err, DI_EINVAL, "invalid import options");
    ir_limits_default(&lim);
    if (len > lim.max_bytes || len > ((size_t)1 << 31))
        return di_error_set(err, DI_ETOOBIG, "the model has %zu bytes, more than %llu", len,
                            (unsigned long long)(lim.max_bytes < ((uint64_t)1 << 31)
                                                     ? lim.max_bytes
                                                     : ((uint64_t)1 << 31)));
    if ((rc = pb_unpack_checked(&onnx__model_proto__descriptor, data, len, ONNX_MAX_DEPTH, &msg,
                                err)) != 0) {
        di_error_prefix(err, "not a readable ONNX model");
        return rc;
    }
    I.model = (const Onnx__ModelProto *)msg;
    I.g = I.model->graph;
    if (I.g == NULL) {
        protobuf_c_message_free_unpacked(msg, NULL);
        return di_error_set(err, DI_EDECODE, "the ONNX model has no graph");
    }
    I.opset = -1;
    for (size_t i = 0; i < I.model->n_opset_import; i++) {
        const Onnx__OperatorSetIdProto *os = I.model->opset_import[i];
        const char *d = os->domain ? os->domain : "";
        if (*d == '\0' || strcmp(d, "ai.onnx") == 0)
            I.opset = os->has_version ? os->version : 1;
    }
    if (I.opset < 9 || I.opset > ONNX_OPSET_MAX) {
        protobuf_c_message_free_unpacked(msg, NULL);
        if (I.opset < 0)
            return di_error_set(err, DI_EUNSUPPORTED, "the model imports no opset of the default "
                                "ONNX domain");
        return di_error_set(err, DI_EUNSUPPORTED, "the model uses ONNX opset %lld; distir "
                            "imports opsets 9 through %d", (long long)I.opset, ONNX_OPSET_MAX);
    }
    I.m = ir_module_new();
    I.f = ir_func_new(I.m, "main");
    rc = import_graph(&I);
    for (uint32_t i = 0; i < I.nval; i++) {
        ex_tensor_fini(&I.vals[i]->cst);
        di_free(I.vals[i]);
    }
    di_free(I.vals);
    di_free(I.tab);
    protobuf_c_message_free_unpacked(msg, NULL);
    if (rc != 0) {
        if (err && err->code == 0)
            di_error_set(err, rc, "import failed");
        ir_module_free(I.m);
        return rc;
    }
    *out = I.m;
    return 0;
}

int
onnx_import(const uint8_t *data, size_t len, int strict, ir_module **out, di_error *err)
{
    onnx_options o;
    onnx_options_default(&o);
    o.strict = strict;
    return onnx_import_opts(data, len, &o, out, err);
}
