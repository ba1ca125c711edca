/*
 * ir.h: the DistIR intermediate representation.
 *
 * A module owns everything in flat arrays and refers to things by 32-bit
 * indexes, QBE-style; index 0 of every array is a reserved "none" entry, so a
 * zero index always means "absent". Cloning, hashing and serializing a module
 * are loops over these arrays, not pointer chases. Arrays grow with realloc,
 * so never keep a pointer into one across a call that may add to it: keep the
 * index.
 *
 *   strings  interned, NUL-terminated; a string id is an offset into `chars`
 *   types    interned: equal types have equal ids, so type equality is ==
 *   values   name + type + defining op (0 for a region argument)
 *   ops      kind + operand list + contiguous result values + attributes
 *            + an optional body region (dist.pmap), owned or, with
 *            IR_OPFLAG_CALLEE, a top-level function shared by several pmaps
 *   regions  a list of ops in topological order, arguments and results.
 *            Top-level functions are regions with a name and no parent op;
 *            region 1 is the entry function once one exists
 *   meshes   N-d grids of device ids (MLIR mesh), named
 *   attrs    per-op key/value lists, sorted by key name
 *
 * Two views share these structures (docs/ir-text.md): in the local view
 * (DistIR) every tensor lives on one device, or on the device variable of the
 * enclosing pmap; in the global view (DTensor) a tensor lives on a mesh with
 * one placement per mesh axis.
 */
#ifndef DISTIR_IR_H
#define DISTIR_IR_H

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

typedef uint32_t ir_id; /* index into one of the module's arrays; 0 = none */

/*
 * X(enum, text name, bytes per element, ONNX TensorProto.DataType code).
 * Text names follow MLIR; the ONNX code is the `to` of Cast.
 */
#define IR_DTYPE_LIST(X)                                                                           \
    X(F32, "f32", 4, 1)                                                                            \
    X(F16, "f16", 2, 10)                                                                           \
    X(BF16, "bf16", 2, 16)                                                                         \
    X(F64, "f64", 8, 11)                                                                           \
    X(I64, "i64", 8, 7)                                                                            \
    X(I32, "i32", 4, 6)                                                                            \
    X(I8, "i8", 1, 3)                                                                              \
    X(BOOL, "i1", 1, 9)

typedef enum ir_dtype {
    IR_DTYPE_NONE = 0,
#define IR_DTYPE_ENUM_(e, name, size, onnx) IR_##e,
    IR_DTYPE_LIST(IR_DTYPE_ENUM_)
#undef IR_DTYPE_ENUM_
        IR_NDTYPE
} ir_dtype;

const char *ir_dtype_name(ir_dtype t);
uint32_t ir_dtype_size(ir_dtype t); /* bytes */
/* Looks up a dtype by text name ("f32"; "bool" is accepted for "i1"). */
ir_dtype ir_dtype_from_name(const char *s, size_t len);
int ir_dtype_is_float(ir_dtype t);
/* f16 or bf16: what mixed precision computes in and keeps f32 beside. */
int ir_dtype_is_half(ir_dtype t);
/* The ONNX TensorProto.DataType code of a dtype (0 for none), and back (IR_DTYPE_NONE if unknown). */
int64_t ir_dtype_onnx(ir_dtype t);
ir_dtype ir_dtype_from_onnx(int64_t code);

/*
 * Placement of a tensor along one mesh axis (TVM DTensor, MLIR sharding):
 * replicated, split along tensor dimension i (value i >= 0), or a partial
 * value awaiting a sum or max reduction.
 */
#define IR_PLACE_R (-1)
#define IR_PLACE_PSUM (-2)
#define IR_PLACE_PMAX (-3)
#define IR_PLACE_IS_SPLIT(p) ((p) >= 0)

#define IR_DEVICE_NONE (-1) /* not placed on a device */
#define IR_MAX_RANK 16

typedef enum ir_type_kind {
    IR_TYPE_NONE = 0,
    IR_TYPE_TENSOR, /* rank 0 is a scalar */
    IR_TYPE_TUPLE,
} ir_type_kind;

/*
 * Where a tensor lives is exactly one of: nowhere (device == IR_DEVICE_NONE,
 * devvar == 0, mesh == 0), a device id, the device variable named devvar
 * (inside a pmap body), or a mesh with placements.
 */
typedef struct ir_type {
    uint8_t kind;       /* ir_type_kind */
    uint8_t dtype;      /* ir_dtype, tensors only */
    uint16_t rank;      /* tensors: number of dims */
    int32_t device;     /* device id or IR_DEVICE_NONE */
    ir_id devvar;       /* string id of a pmap device variable, or 0 */
    ir_id mesh;         /* mesh id of a distributed tensor, or 0 */
    uint32_t dims;      /* offset into ints[]: rank dims */
    uint32_t placements; /* offset into ints[]: one per mesh axis (IR_PLACE_* or split dim) */
    uint32_t nelem;     /* tuples: element count */
    uint32_t elems;     /* tuples: offset into refs[] of element type ids */
    int64_t numel;      /* tensors: product of dims (saturating at INT64_MAX), cached */
} ir_type;

typedef struct ir_value {
    ir_id name;  /* string id, 0 if unnamed (the printer numbers it) */
    ir_id type;  /* type id */
    ir_id def;   /* defining op, 0 for a region argument */
    uint32_t index; /* result index in def, or argument index in region */
    ir_id region;   /* region in which the value is defined */
    uint32_t init;  /* index into inits[] of the value's data (an initializer), 0 if none */
} ir_value;

/* Data attached to a value (an ONNX initializer): raw little-endian bytes in data[]. */
typedef struct ir_init {
    size_t off;
    size_t len;
} ir_init;

/* Attribute kinds. Lists are stored in ints[] or floats[]. */
typedef enum ir_attr_kind {
    IR_ATTR_NONE = 0,
    IR_ATTR_INT,    /* i */
    IR_ATTR_FLOAT,  /* f */
    IR_ATTR_STRING, /* s: string id */
    IR_ATTR_INTS,   /* n ints at ints[off] */
    IR_ATTR_FLOATS, /* n doubles at floats[off] */
    IR_ATTR_MESH,   /* s: mesh id; printed @name */
    IR_ATTR_TENSOR, /* dense constant: type id in i, raw little-endian bytes at data[off], n bytes */
} ir_attr_kind;

typedef struct ir_attr {
    ir_id key;      /* string id */
    uint32_t kind;  /* ir_attr_kind */
    uint32_t n;     /* list length or byte count */
    uint32_t off;   /* list offset in ints[]/floats[]/data[] */
    int64_t i;
    double f;
    ir_id s;
} ir_attr;

/*
 * ir_op.flags. IR_OPFLAG_CALLEE: the op is a dist.pmap whose body is not its
 * own region but a top-level function it calls (text: `callee = @f`); many
 * pmaps may call one function, which keeps parent 0 and its name.
 */
#define IR_OPFLAG_CALLEE 0x0001

typedef struct ir_op {
    uint16_t kind;     /* ir_opkind */
    uint16_t flags;    /* IR_OPFLAG_* (other bits are carried, not interpreted) */
    uint32_t ninput;
    uint32_t inputs;   /* offset into refs[] of ninput value ids */
    uint32_t noutput;
    ir_id outputs;     /* first result value id; results are contiguous */
    uint32_t nattr;
    uint32_t attrs;    /* index into attrs[] of the first attribute */
    ir_id body;        /* region id of a pmap body (or its callee function), or 0 */
    ir_id name;        /* string id of an op name (ONNX node name), or 0 */
    ir_id opaque;      /* string id of the op type of an opaque op, or 0 */
    ir_id region;      /* region that contains this op */
} ir_op;

typedef struct ir_region {
    ir_id name;      /* string id of a top-level function, 0 for a body */
    ir_id parent;    /* owning op for a body, 0 for a function */
    uint32_t nop, cop;
    ir_id *ops;      /* ops in topological order */
    uint32_t narg, carg;
    ir_id *args;     /* argument values */
    uint32_t nresult, cresult;
    ir_id *results;  /* returned values */
} ir_region;

typedef struct ir_mesh {
    ir_id name;      /* string id (printed @name) */
    uint32_t rank;
    uint32_t shape;  /* offset into ints[]: rank sizes */
    uint32_t ndevice;
    uint32_t devices; /* offset into ints[]: ndevice ids, row-major */
} ir_mesh;

/* Source position of an op or value parsed from text (0 when unknown). */
typedef struct ir_loc {
    uint32_t line;
    uint32_t column;
} ir_loc;

typedef struct ir_module {
    char *chars;
    uint32_t nchar, cchar;
    uint64_t *strtab; /* open-addressing intern table: hash << 32 | string id (0: empty) */
    uint32_t cstrtab, nstring;

    ir_type *types;
    uint32_t ntype, ctype;
    uint64_t *typetab; /* intern table: hash << 32 | type id (0: empty) */
    uint32_t ctypetab;

    ir_value *values;
    uint32_t nvalue, cvalue;
    ir_op *ops;
    uint32_t nop, cop;
    ir_region *regions;
    uint32_t nregion, cregion;
    ir_mesh *meshes;
    uint32_t nmesh, cmesh;
    ir_attr *attrs;
    uint32_t nattr, cattr;

    ir_id *refs;
    uint32_t nref, cref;
    int64_t *ints;
    uint32_t nint, cint;
    double *floats;
    uint32_t nfloat, cfloat;
    uint8_t *data;
    size_t ndata, cdata;
    ir_init *inits;
    uint32_t ninit, cinit;

    uint64_t hashkey[2]; /* key of the intern tables' hash (random per module) */
    struct ir_devcache *devcache; /* memo of ir_type_with_device, or NULL */
    ir_loc *oplocs;  /* parallel to ops when the module came from text, else NULL */
    ir_loc *valuelocs; /* parallel to values, likewise */
} ir_module;

/* ---- construction ---- */

/* A new empty module; never NULL (aborts on out-of-memory). Free with ir_module_free. */
ir_module *ir_module_new(void);
void ir_module_free(ir_module *m);
/* A deep copy; the caller frees it. */
ir_module *ir_module_clone(const ir_module *m);
/* Total bytes held by the module's arrays. */
size_t ir_module_bytes(const ir_module *m);

/* Interns a string; returns its id (never 0 for a non-empty or empty string). */
ir_id ir_str(ir_module *m, const char *s);
ir_id ir_strn(ir_module *m, const char *s, size_t len);
/* Looks up an existing string id without adding it; 0 if absent. */
ir_id ir_str_find(const ir_module *m, const char *s, size_t len);
static inline const char *
ir_str_get(const ir_module *m, ir_id s)
{
    return s ? m->chars + s : "";
}

/* Interned types. dims/placements are copied. */
ir_id ir_type_tensor(ir_module *m, ir_dtype dt, uint32_t rank, const int64_t *dims, int32_t device);
ir_id ir_type_tensor_var(ir_module *m, ir_dtype dt, uint32_t rank, const int64_t *dims,
                         ir_id devvar);
ir_id ir_type_dtensor(ir_module *m, ir_dtype dt, uint32_t rank, const int64_t *dims, ir_id mesh,
                      const int64_t *placements);
ir_id ir_type_tuple(ir_module *m, uint32_t n, const ir_id *elems);
/* The same tensor type placed elsewhere (device id, or devvar when devvar != 0). */
ir_id ir_type_with_device(ir_module *m, ir_id type, int32_t device, ir_id devvar);
/* The same tensor type with a new shape. */
ir_id ir_type_with_dims(ir_module *m, ir_id type, uint32_t rank, const int64_t *dims);

static inline const ir_type *
ir_type_get(const ir_module *m, ir_id t)
{
    return &m->types[t];
}
static inline const int64_t *
ir_type_dims(const ir_module *m, ir_id t)
{
    return m->ints + m->types[t].dims;
}
static inline const ir_id *
ir_type_elems(const ir_module *m, ir_id t)
{
    return m->refs + m->types[t].elems;
}
/* Element count of a tensor (product of dims; 1 for a scalar); saturates at INT64_MAX. */
int64_t ir_type_numel(const ir_module *m, ir_id t);
/* Bytes of a tensor, or the sum over a tuple's elements. */
uint64_t ir_type_bytes(const ir_module *m, ir_id t);

/* Meshes. shape has rank entries; devices has prod(shape) ids, or NULL for 0..n-1. */
ir_id ir_mesh_add(ir_module *m, const char *name, uint32_t rank, const int64_t *shape,
                  const int64_t *devices);
ir_id ir_mesh_find(const ir_module *m, ir_id name);
static inline const int64_t *
ir_mesh_shape(const ir_module *m, ir_id mesh)
{
    return m->ints + m->meshes[mesh].shape;
}
static inline const int64_t *
ir_mesh_devices(const ir_module *m, ir_id mesh)
{
    return m->ints + m->meshes[mesh].devices;
}

/*
 * The group of mesh position self (an index into the mesh's device list)
 * under a mesh-form collective over axes[0..naxes) (NULL: every axis): the
 * positions that agree with self on every other axis, in group order, which
 * is row-major over the coordinates on axes as listed (axes[0] outermost),
 * as MLIR's mesh dialect orders a group. Writes them to members (room for
 * the mesh's device count), their count to *n and self's index among them
 * to *pos. The axes must be distinct axes of the mesh (ir_verify checks).
 */
void ir_mesh_group(const ir_module *m, ir_id mesh, const uint32_t *axes, uint32_t naxes,
                   uint32_t self, uint32_t *members, uint32_t *n, uint32_t *pos);

/*
 * The local shard of tensor type ty: each dimension divided by the sizes of
 * the mesh axes that split it (ty itself when it has no mesh); -1 when a
 * split does not divide. dims has room for the rank.
 */
int ir_type_shard_dims(const ir_module *m, ir_id ty, int64_t *dims);

/*
 * Initializer data of a value (usually a function argument: a weight with
 * its values). The bytes are copied; len must equal the type's byte size.
 */
void ir_value_set_init(ir_module *m, ir_id v, const void *bytes, size_t len);
/* The value's data and its length, or NULL when it has none. */
const uint8_t *ir_value_init(const ir_module *m, ir_id v, size_t *len);

/* Regions. */
ir_id ir_func_new(ir_module *m, const char *name);
ir_id ir_body_new(ir_module *m);
/* Adds an argument of the given type to region r; returns the value id. */
ir_id ir_region_add_arg(ir_module *m, ir_id r, ir_id type, const char *name);
void ir_region_add_result(ir_module *m, ir_id r, ir_id value);
/*
 * Makes dist.pmap `op` call top-level function `func` (body = func, flag
 * IR_OPFLAG_CALLEE); the function stays a function (parent 0).
 */
void ir_op_set_callee(ir_module *m, ir_id op, ir_id func);
/* The function a pmap calls (IR_OPFLAG_CALLEE and a body), or 0 when its body is its own. */
static inline ir_id
ir_op_callee(const ir_module *m, ir_id op)
{
    return (m->ops[op].flags & IR_OPFLAG_CALLEE) ? m->ops[op].body : 0;
}
/*
 * Placements as text: "S[1]", "R, S[0]", "[P(sum), R]" (one per mesh axis,
 * comma-separated, brackets optional). ir_placement_parse writes up to max
 * to out and their count to *n; -1 when the text is not such a list.
 * ir_placement_format writes the canonical form ("S[1], R") into buf.
 */
int ir_placement_parse(const char *s, int64_t *out, uint32_t max, uint32_t *n);
const char *ir_placement_format(const int64_t *p, uint32_t n, char *buf, size_t size);
/* Finds a top-level function by name; 0 if absent. */
ir_id ir_func_find(const ir_module *m, const char *name);
/*
 * The entry function: the one named "main" if any, else the first. 0 if none.
 * The verifier rejects a module whose entry is called by a pmap, so a module
 * with callees names its entry "main" or defines it first.
 */
ir_id ir_module_entry(const ir_module *m);

/*
 * Adds an op of the given kind at the end of region r with the given inputs
 * and noutput results of the given types (names may be NULL), and returns
 * the op id. Attributes are added afterwards with ir_op_set_* (before any
 * other op is added). The results are values outputs .. outputs+noutput-1.
 */
ir_id ir_op_add(ir_module *m, ir_id r, int kind, uint32_t ninput, const ir_id *inputs,
                uint32_t noutput, const ir_id *types, const char *const *names);
static inline const ir_id *
ir_op_inputs(const ir_module *m, ir_id op)
{
    return m->refs + m->ops[op].inputs;
}
static inline ir_id
ir_op_input(const ir_module *m, ir_id op, uint32_t i)
{
    return m->refs[m->ops[op].inputs + i];
}
static inline ir_id
ir_op_output(const ir_module *m, ir_id op, uint32_t i)
{
    return m->ops[op].outputs + i;
}

/* Attribute setters: keep each op's attributes sorted by key, replacing an existing key. */
void ir_op_set_int(ir_module *m, ir_id op, const char *key, int64_t v);
void ir_op_set_float(ir_module *m, ir_id op, const char *key, double v);
void ir_op_set_string(ir_module *m, ir_id op, const char *key, const char *v);
void ir_op_set_ints(ir_module *m, ir_id op, const char *key, uint32_t n, const int64_t *v);
void ir_op_set_floats(ir_module *m, ir_id op, const char *key, uint32_t n, const double *v);
void ir_op_set_mesh(ir_module *m, ir_id op, const char *key, ir_id mesh);
void ir_op_set_tensor(ir_module *m, ir_id op, const char *key, ir_id type, const void *bytes,
                      size_t n);
/* Adds a fully formed attribute (used by the parsers); keeps the order sorted. */
void ir_op_put_attr(ir_module *m, ir_id op, const ir_attr *a);

/* Attribute getters. Each returns NULL / the default when the key is absent. */
const ir_attr *ir_op_attr(const ir_module *m, ir_id op, const char *key);
/*
 * The same by the key's string id (ir_str_find; every attribute key is
 * interned, so ids compare as the strings do), for callers that ask the
 * same key of many ops: no string comparison. key 0 (absent from the
 * module) finds nothing.
 */
const ir_attr *ir_op_attr_key(const ir_module *m, ir_id op, ir_id key);
int64_t ir_op_int(const ir_module *m, ir_id op, const char *key, int64_t dflt);
double ir_op_float(const ir_module *m, ir_id op, const char *key, double dflt);
const char *ir_op_string(const ir_module *m, ir_id op, const char *key, const char *dflt);
/* Returns the list and stores its length, or NULL with *n = 0. */
const int64_t *ir_op_ints(const ir_module *m, ir_id op, const char *key, uint32_t *n);

/* ---- the op table ---- */
#include "ir/ops.h"

/* ---- passes over a module ---- */

/*
 * The verifier. ir_verify stops at the first problem; ir_verify_all reports
 * each to fn (which may be NULL) and returns the number found, or, when
 * limit > 0, stops after limit problems. Messages name the op and value and,
 * for modules parsed from text, the line and column.
 */
typedef void (*ir_diag_fn)(void *ctx, const di_error *e);
int ir_verify(ir_module *m, di_error *err);
int ir_verify_all(ir_module *m, ir_diag_fn fn, void *ctx, int limit);
/* The verifier interns the types it infers, so it takes a mutable module; it
 * changes nothing else. Never run it on a module another thread reads. */

/* Text form (docs/ir-text.md). The printer returns a string the caller frees with di_free. */
char *ir_print(const ir_module *m, size_t *len);
int ir_parse(const char *text, size_t len, ir_module **out, di_error *err);

/* Canonical SHA-256: independent of names and of the order of independent ops. */
void ir_hash(const ir_module *m, di_hash *out);

/* Limits applied to untrusted input. */
typedef struct ir_limits {
    uint64_t max_bytes;  /* encoded size */
    uint32_t max_ops;
    uint32_t max_values;
    uint32_t max_depth;  /* protobuf nesting */
    uint32_t max_rank;
} ir_limits;
void ir_limits_default(ir_limits *l);

#endif
