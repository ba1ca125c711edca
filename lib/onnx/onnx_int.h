/*
 * onnx_int.h: pieces shared by the importer's files: the import context,
 * the table of ONNX values, and the protocol between the graph walk
 * (onnx.c) and the per-op handlers (onnx_ops.c).
 *
 * Every ONNX value name has an entry (oval). A value may be known as data
 * (a Constant node, an integer initializer, or the result of constant
 * folding), be an initializer (a float weight: it becomes a function
 * argument with data when an op uses it), or be a runtime IR value. A
 * handler translates one node:
 *   cfn  computes the node's outputs as constants (Constant, Shape,
 *        ConstantOfShape, comparisons of constants, ...); it returns
 *        ONNX_NOTCONST when its inputs are not constants;
 *   fn   emits ops of the op table through an emitter. The walk runs fn
 *        on a scratch module and executes it (constant folding) when every
 *        input is a constant, and on the real module otherwise.
 * A handler that meets something it does not support returns
 * DI_EUNSUPPORTED before emitting anything, so that the walk can import
 * the node as a dist.opaque op instead (unless strict).
 */
#ifndef DISTIR_ONNX_INT_H
#define DISTIR_ONNX_INT_H

#include "exec/exec_int.h"
#include "onnx/onnx-ml.pb-c.h"
#include "onnx/onnx.h"
#include "onnx/onnx_ex.h"

/* A handler's "my inputs are not all constants" (not an error code). */
#define ONNX_NOTCONST 1

/* Constant folding produces at most this many elements per value. */
#define ONNX_FOLD_MAX ((int64_t)1 << 22)

typedef struct oval {
    const char *name;                /* points into the unpacked model */
    ir_id value;                     /* IR value in the module, 0 until materialized */
    const Onnx__TensorProto *init;   /* initializer, or NULL */
    const Onnx__ValueInfoProto *vi;  /* declared type (value_info, inputs, outputs), or NULL */
    ex_tensor cst;                   /* known data when cst.data != NULL */
    int has_type;                    /* dtype/rank/dims below are known */
    ir_dtype dtype;
    uint32_t rank;
    int64_t dims[IR_MAX_RANK];
    int defined;                     /* produced by a node, an input or an initializer */
} oval;

typedef struct imp {
    const Onnx__ModelProto *model;
    const Onnx__GraphProto *g;
    onnx_options opt;
    int64_t opset;                   /* of the default domain */
    ir_module *m;
    ir_id f;
    oval **vals;                     /* entries never move once created */
    uint32_t nval, cval;
    uint32_t *tab;                   /* open addressing: index + 1, 0 empty */
    uint32_t ctab;
    const Onnx__NodeProto *node;     /* the node being imported, for messages */
    di_error *err;
} imp;

/* How a handler reaches the node's inputs and binds its outputs. */
typedef struct emit {
    ir_module *m;
    ir_id r;
    int scratch;       /* folding: inputs are the scratch function's arguments */
    uint32_t nin;
    ir_id *in;         /* IR values of the inputs, 0 until used (scratch: preset) */
    uint32_t nout;
    ir_id *out;        /* IR values bound to the node's outputs (0: not produced) */
} emit;

typedef struct onnx_handler {
    const char *domain; /* "" for the default domain, "com.microsoft" */
    const char *op_type;
    int (*cfn)(imp *I, const Onnx__NodeProto *n);
    int (*fn)(imp *I, const Onnx__NodeProto *n, emit *e);
} onnx_handler;

/* The handler of (domain, op_type), or NULL (onnx_ops.c). */
const onnx_handler *onnx_find_handler(const char *domain, const char *op_type);

/* ---- services of onnx.c for the handlers ---- */

int onnx_fail(imp *I, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The entry of a name, resolving ORT's undefined helper names; NULL if unknown. */
oval *onnx_lookup(imp *I, const char *name);
/* Whether node input i is present (not missing and not ""). */
int onnx_has_input(const Onnx__NodeProto *n, uint32_t i);
/* The constant value of node input i, or NULL when it is absent or not constant. */
const ex_tensor *onnx_const_input(imp *I, const Onnx__NodeProto *n, uint32_t i);
/* Node input i read as a list of integers (a constant 0-d or 1-d integer tensor). */
int onnx_const_ints(imp *I, const Onnx__NodeProto *n, uint32_t i, const char *what, int64_t *v,
                    uint32_t max, uint32_t *count);
/* The static type of node input i (dtype, rank, dims); error if unknown. */
int onnx_input_type(imp *I, const Onnx__NodeProto *n, uint32_t i, ir_dtype *dt, uint32_t *rank,
                    int64_t *dims);
/* Binds node output k to a constant (takes ownership of t). */
int onnx_bind_const(imp *I, const Onnx__NodeProto *n, uint32_t k, ex_tensor *t);

/* The IR value of node input i in e (materializing it in the real module); 0 on error. */
ir_id onnx_in(imp *I, emit *e, const Onnx__NodeProto *n, uint32_t i);
/* Adds an op of kind to e's region; names may be NULL. */
ir_id onnx_op(emit *e, int kind, uint32_t nin, const ir_id *in, uint32_t nout);
/* Infers the op's result types; errors name the node. */
int onnx_infer(imp *I, emit *e, ir_id op);
/* Adds a Constant op holding t in e's region; returns its value. */
ir_id onnx_const_op(imp *I, emit *e, const ex_tensor *t);

/* Attributes. */
const Onnx__AttributeProto *onnx_attr(const Onnx__NodeProto *n, const char *name);
/* Rejects attributes not in the space-separated list (DI_EUNSUPPORTED). */
int onnx_check_attrs(imp *I, const Onnx__NodeProto *n, const char *known);
int onnx_attr_int(imp *I, const Onnx__NodeProto *n, const char *name, int64_t dflt, int64_t *v);
int onnx_attr_float(imp *I, const Onnx__NodeProto *n, const char *name, double dflt, double *v);
/* An ints attribute; *present = 0 when absent. */
int onnx_attr_ints(imp *I, const Onnx__NodeProto *n, const char *name, int64_t *v, uint32_t max,
                   uint32_t *count, int *present);
/* A string attribute into buf ("" when absent). */
int onnx_attr_string(imp *I, const Onnx__NodeProto *n, const char *name, char *buf, size_t cap);

/* The name of an ONNX data type number ("UINT8"); the mapping to ir_dtype is ir_dtype_from_onnx. */
const char *onnx_dtype_name(int64_t t);
/* Decodes an unpacked TensorProto (what names it in errors). */
int onnx_tensor_from_proto(const Onnx__TensorProto *tp, const char *what, ex_tensor *t,
                           di_error *err);

#endif
