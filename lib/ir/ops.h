/*
 * ops.h: the one table of operations. Adding an op is adding a line here and,
 * if no existing shape-inference or cost function fits, writing one in
 * ops.c. Included from ir.h; do not include it directly.
 *
 * X(ENUM, "TextName", min_in, max_in, min_out, max_out, flags, "attrs", infer, cost)
 *   max_in / max_out of -1 mean "any number".
 *   attrs is the attribute schema: space-separated "name:K" where K is
 *   i (int), f (float), s (string), I (ints), F (floats), m (mesh), t (tensor);
 *   a trailing '?' marks the attribute optional. Attributes not in the
 *   schema are rejected by the verifier.
 *   infer computes result types (ops.c: infer_<infer>); cost gives FLOPs and
 *   bytes moved (ops.c: cost_<cost>).
 *
 * Communication ops use the dist dialect names (mirroring MLIR's mesh
 * dialect); the parser also accepts DistIR's names (MPIAllreduce, ...),
 * see ir_opkind_from_name. Each collective has two forms: the tuple form
 * (DistIR local view: a tuple with one tensor per device) and the mesh form
 * (attributes mesh and mesh_axes, as in MLIR's mesh dialect: on a
 * distributed tensor in the global view, or on the per-device tensor inside
 * a pmap over a mesh).
 */
#ifndef DISTIR_IR_OPS_H
#define DISTIR_IR_OPS_H

/* Flags. */
#define IR_OPF_COMM 0x0001      /* communication: priced by the network model */
#define IR_OPF_ELEMWISE 0x0002  /* elementwise with numpy broadcasting */
#define IR_OPF_REGION 0x0004    /* carries a body region */
#define IR_OPF_TERM 0x0008      /* region terminator */
#define IR_OPF_GRAD 0x0010      /* a gradient op */
#define IR_OPF_OPTIM 0x0020     /* an optimizer update */
#define IR_OPF_LOSS 0x0040      /* a loss */
#define IR_OPF_FREE 0x0080      /* costs nothing (tuple plumbing, views) */
#define IR_OPF_COLLECTIVE 0x0100 /* a collective over a group of devices */

#define IR_OP_LIST(X)                                                                              \
    /* compute: linear algebra and elementwise */                                                 \
    X(MATMUL, "MatMul", 2, 2, 1, 1, 0, "", matmul, matmul)                                         \
    X(GEMM, "Gemm", 2, 3, 1, 1, 0, "alpha:f? beta:f? transA:i? transB:i?", gemm, gemm)             \
    X(ADD, "Add", 2, 2, 1, 1, IR_OPF_ELEMWISE, "", broadcast, elemwise)                            \
    X(SUB, "Sub", 2, 2, 1, 1, IR_OPF_ELEMWISE, "", broadcast, elemwise)                            \
    X(MUL, "Mul", 2, 2, 1, 1, IR_OPF_ELEMWISE, "", broadcast, elemwise)                            \
    X(DIV, "Div", 2, 2, 1, 1, IR_OPF_ELEMWISE, "", broadcast, elemwise)                            \
    X(POW, "Pow", 2, 2, 1, 1, IR_OPF_ELEMWISE, "", broadcast, transcend)                           \
    X(SQRT, "Sqrt", 1, 1, 1, 1, IR_OPF_ELEMWISE, "", same, transcend)                              \
    X(RELU, "Relu", 1, 1, 1, 1, IR_OPF_ELEMWISE, "", same, elemwise)                               \
    X(GELU, "Gelu", 1, 1, 1, 1, IR_OPF_ELEMWISE, "approximate:s?", same, gelu)                     \
    X(SWISH, "Swish", 1, 1, 1, 1, IR_OPF_ELEMWISE, "alpha:f?", same, swish)                        \
    X(TANH, "Tanh", 1, 1, 1, 1, IR_OPF_ELEMWISE, "", same, transcend)                              \
    X(SIGMOID, "Sigmoid", 1, 1, 1, 1, IR_OPF_ELEMWISE, "", same, transcend)                        \
    X(ERF, "Erf", 1, 1, 1, 1, IR_OPF_ELEMWISE, "", same, transcend)                                \
    X(IDENTITY, "Identity", 1, 1, 1, 1, IR_OPF_FREE, "", same, none)                               \
    X(CAST, "Cast", 1, 1, 1, 1, IR_OPF_ELEMWISE, "to:i", cast, elemwise)                           \
    X(DROPOUT, "Dropout", 1, 1, 1, 2, 0, "ratio:f? seed:i?", dropout, elemwise)                    \
    X(SOFTMAX, "Softmax", 1, 1, 1, 1, 0, "axis:i?", same, softmax)                                 \
    X(LAYERNORM, "LayerNormalization", 2, 3, 1, 3, 0, "axis:i? epsilon:f? stash_type:i?",          \
      layernorm, layernorm)                                                                        \
    X(RMSNORM, "RMSNormalization", 2, 2, 1, 2, 0, "axis:i? epsilon:f? stash_type:i?", layernorm,   \
      layernorm)                                                                                   \
    X(WHERE, "Where", 3, 3, 1, 1, IR_OPF_ELEMWISE, "", where, elemwise)                            \
    /* compute: shape and data movement */                                                        \
    X(RESHAPE, "Reshape", 1, 1, 1, 1, IR_OPF_FREE, "shape:I", reshape, none)                       \
    X(TRANSPOSE, "Transpose", 1, 1, 1, 1, 0, "perm:I?", transpose, copy)                           \
    X(CONCAT, "Concat", 1, -1, 1, 1, 0, "axis:i", concat, copy)                                    \
    X(SPLIT, "Split", 1, 1, 1, -1, 0, "axis:i? split:I?", split, copy)                             \
    X(SLICE, "Slice", 1, 1, 1, 1, 0, "starts:I ends:I axes:I? steps:I?", slice, copy)              \
    X(GATHER, "Gather", 2, 2, 1, 1, 0, "axis:i? mesh:m? mesh_axes:I?", gather, copy)                                    \
    X(FLASHATTN, "FlashAttention", 3, 5, 2, 2, 0,                                                  \
      "causal:i? scale:f? mesh:m? mesh_axes:I? kv_shift:i?", flashattn, flashattn)                 \
    X(TOPK, "TopK", 1, 1, 2, 2, 0, "k:i", topk, reduce)                                            \
    X(MOESLOTS, "moe.slots", 1, 1, 1, 1, 0, "experts:i capacity:i", moeslots, copy)                \
    X(MOEDISPATCH, "moe.dispatch", 2, 2, 1, 1, 0, "experts:i capacity:i", moedispatch, copy)       \
    X(MOECOMBINE, "moe.combine", 2, 2, 1, 1, 0, "", moecombine, copy)                              \
    X(UNSQUEEZE, "Unsqueeze", 1, 1, 1, 1, IR_OPF_FREE, "axes:I", unsqueeze, none)                  \
    X(SQUEEZE, "Squeeze", 1, 1, 1, 1, IR_OPF_FREE, "axes:I?", squeeze, none)                       \
    X(REDUCEMEAN, "ReduceMean", 1, 1, 1, 1, 0, "axes:I? keepdims:i?", reduce, reduce)              \
    X(REDUCESUM, "ReduceSum", 1, 1, 1, 1, 0, "axes:I? keepdims:i?", reduce, reduce)                \
    X(CONSTANT, "Constant", 0, 0, 1, 1, IR_OPF_FREE, "device:i? value:t", constant, none)          \
    /* losses */                                                                                  \
    X(MSELOSS, "MSELoss", 2, 2, 1, 1, IR_OPF_LOSS, "", loss, elemwise)                             \
    X(SCELOSS, "SoftmaxCrossEntropyLoss", 2, 2, 1, 2, IR_OPF_LOSS,                                 \
      "ignore_index:i? reduction:s?", sceloss, softmax)                                            \
    /* gradients */                                                                               \
    X(MATMULGRAD, "MatMulGrad", 3, 3, 2, 2, IR_OPF_GRAD, "", matmulgrad, matmulgrad)               \
    X(RELUGRAD, "ReluGrad", 2, 2, 1, 1, IR_OPF_GRAD | IR_OPF_ELEMWISE, "", grad_like_x, elemwise)  \
    X(GELUGRAD, "GeluGrad", 2, 2, 1, 1, IR_OPF_GRAD | IR_OPF_ELEMWISE, "approximate:s?",           \
      grad_like_x, gelu)                                                                           \
    X(SWISHGRAD, "SwishGrad", 2, 2, 1, 1, IR_OPF_GRAD | IR_OPF_ELEMWISE, "alpha:f?", grad_like_x,  \
      swish)                                                                                       \
    X(TANHGRAD, "TanhGrad", 2, 2, 1, 1, IR_OPF_GRAD | IR_OPF_ELEMWISE, "", grad_like_x, elemwise)  \
    X(SIGMOIDGRAD, "SigmoidGrad", 2, 2, 1, 1, IR_OPF_GRAD | IR_OPF_ELEMWISE, "", grad_like_x,      \
      elemwise)                                                                                    \
    X(SOFTMAXGRAD, "SoftmaxGrad", 2, 2, 1, 1, IR_OPF_GRAD, "axis:i?", grad_like_x, softmax)        \
    X(LAYERNORMGRAD, "LayerNormalizationGrad", 3, 5, 1, 3, IR_OPF_GRAD, "axis:i? epsilon:f?",      \
      layernormgrad, layernorm)                                                                    \
    X(RMSNORMGRAD, "RMSNormalizationGrad", 3, 4, 1, 2, IR_OPF_GRAD, "axis:i? epsilon:f?",          \
      layernormgrad, layernorm)                                                                    \
    X(DROPOUTGRAD, "DropoutGrad", 2, 2, 1, 1, IR_OPF_GRAD, "ratio:f?", grad_like_x, elemwise)      \
    X(MSELOSSGRAD, "MSELossGrad", 3, 3, 1, 1, IR_OPF_GRAD, "", grad_like_x, elemwise)              \
    X(SCELOSSGRAD, "SoftmaxCrossEntropyLossGrad", 3, 3, 1, 1, IR_OPF_GRAD,                         \
      "ignore_index:i? reduction:s?", scelossgrad, softmax)                                        \
    X(GATHERGRAD, "GatherGrad", 2, 2, 1, 1, IR_OPF_GRAD, "axis:i? shape:I mesh:m? mesh_axes:I?",   \
      gathergrad, copy)      \
    X(TOPKGRAD, "TopKGrad", 2, 2, 1, 1, IR_OPF_GRAD, "size:i", topkgrad, copy)                     \
    X(FLASHATTNGRAD, "FlashAttentionGrad", 6, 6, 3, 3, IR_OPF_GRAD,                                \
      "causal:i? scale:f? mesh:m? mesh_axes:I? kv_shift:i?", flashattngrad, flashattn)             \
    X(REDUCESUMTO, "ReduceSumTo", 1, 1, 1, 1, IR_OPF_GRAD, "shape:I", reshape_reduce, reduce)      \
    /* optimizers */                                                                              \
    X(SGD, "SGDOptimizer", 2, 2, 1, 1, IR_OPF_OPTIM, "lr:f?", first_input, elemwise)               \
    X(ADAM, "AdamOptimizer", 4, 5, 3, 4, IR_OPF_OPTIM,                                             \
      "lr:f? beta1:f? beta2:f? epsilon:f? step:i?", adam, adam)                                    \
    /* communication (DistIR local view and MLIR mesh forms) */                                   \
    X(SEND, "dist.send", 1, 1, 1, 1, IR_OPF_COMM, "device:i? devices:I?", send, comm)                          \
    X(BROADCAST, "dist.broadcast", 1, 1, 1, 1, IR_OPF_COMM | IR_OPF_COLLECTIVE,                    \
      "devices:I? mesh:m? mesh_axes:I? root:I?", broadcast_tuple, comm)                            \
    X(SCATTER, "dist.scatter", 1, 1, 1, 1, IR_OPF_COMM | IR_OPF_COLLECTIVE,                        \
      "dim:i devices:I? mesh:m? mesh_axes:I? root:I?", scatter, comm)                              \
    X(GATHERTO, "dist.gather", 1, 1, 1, 1, IR_OPF_COMM | IR_OPF_COLLECTIVE,                        \
      "dim:i device:i? mesh:m? mesh_axes:I? root:I?", gather_tuple, comm)                          \
    X(ALLREDUCE, "dist.all_reduce", 1, 1, 1, 1, IR_OPF_COMM | IR_OPF_COLLECTIVE,                   \
      "mesh:m? mesh_axes:I? reduction:s?", allreduce, comm)                                        \
    X(ALLGATHER, "dist.all_gather", 1, 1, 1, 1, IR_OPF_COMM | IR_OPF_COLLECTIVE,                   \
      "dim:i mesh:m? mesh_axes:I?", allgather, comm)                                               \
    X(REDUCESCATTER, "dist.reduce_scatter", 1, 1, 1, 1, IR_OPF_COMM | IR_OPF_COLLECTIVE,           \
      "dim:i mesh:m? mesh_axes:I? reduction:s?", reducescatter, comm)                              \
    X(ALLTOALL, "dist.all_to_all", 1, 1, 1, 1, IR_OPF_COMM | IR_OPF_COLLECTIVE,                    \
      "split_dim:i concat_dim:i mesh:m? mesh_axes:I?", alltoall, comm)                             \
    /* a ring step: each member's tensor to the next member along the axes (MLIR mesh.shift) */   \
    X(SHIFT, "dist.shift", 1, 1, 1, 1, IR_OPF_COMM | IR_OPF_COLLECTIVE,                            \
      "mesh:m mesh_axes:I? offset:i?", shift, comm)                                                \
    /* the global view: a local slice (R -> S[dim], no communication), annotations */            \
    X(ALLSLICE, "dist.all_slice", 1, 1, 1, 1, IR_OPF_COLLECTIVE, "dim:i mesh:m mesh_axes:I?",      \
      allslice, allslice)                                                                          \
    X(ANNOTATE, "dist.annotate_sharding", 1, 1, 1, 1, IR_OPF_FREE, "mesh:m placement:s", sharding, \
      none)                                                                                        \
    X(REDISTRIBUTE, "dist.redistribute", 1, 1, 1, 1, IR_OPF_COMM, "mesh:m placement:s",            \
      sharding, comm)                                                                          \
    /* vocabulary-parallel cross-entropy (Megatron-LM), the logits split over a mesh group */   \
    X(VOCABSTATS, "dist.vocab_ce_stats", 2, 2, 1, 1, 0, "mesh:m mesh_axes:I? ignore_index:i?",     \
      vocabstats, softmax)                                                                         \
    X(VOCABLOSS, "dist.vocab_ce_loss", 2, 2, 1, 1, 0, "ignore_index:i? reduction:s?", vocabloss,   \
      elemwise)                                                                                    \
    X(VOCABGRAD, "dist.vocab_ce_grad", 4, 4, 1, 1, IR_OPF_GRAD,                                    \
      "mesh:m mesh_axes:I? ignore_index:i? reduction:s?", vocabgrad, softmax)                      \
    /* structure */                                                                               \
    X(TUPLE, "dist.tuple", 0, -1, 1, 1, IR_OPF_FREE, "", tuple, none)                              \
    X(TUPLEGET, "dist.tuple_get", 1, 1, 1, 1, IR_OPF_FREE, "index:i", tupleget, none)              \
    /* input 0, available once input 1 is too: an ordering edge (ZeRO-3's rate-limited gathers) */  \
    X(AFTER, "dist.after", 2, 2, 1, 1, IR_OPF_FREE, "", same, none)                                \
    X(PMAP, "dist.pmap", 0, -1, 0, -1, IR_OPF_REGION, "device_var:s devices:I? mesh:m?", pmap,     \
      none)                                                                                        \
    X(CALL, "func.call", 0, -1, 0, -1, IR_OPF_REGION, "", call, none)                             \
    X(RETURN, "dist.return", 0, -1, 0, 0, IR_OPF_TERM | IR_OPF_FREE, "", none, none)               \
    X(OPAQUE, "dist.opaque", 0, -1, 0, -1, 0, "op_type:s", opaque, opaque)

typedef enum ir_opkind {
    IR_OP_NONE = 0,
#define IR_OP_ENUM_(e, name, a, b, c, d, fl, at, inf, cost) IR_OP_##e,
    IR_OP_LIST(IR_OP_ENUM_)
#undef IR_OP_ENUM_
        IR_NOPKIND
} ir_opkind;

/* FLOPs and bytes for one execution of an op (for a collective: per device). */
typedef struct ir_cost {
    double flops;       /* floating-point operations */
    double bytes_read;  /* bytes read from device memory */
    double bytes_write; /* bytes written to device memory */
    double bytes_comm;  /* communication ops: payload bytes per participant */
    double special;     /* special-function evaluations (exponentials): fused attention's */
} ir_cost;

typedef struct ir_opinfo {
    const char *name;
    int16_t min_in, max_in, min_out, max_out;
    uint32_t flags;
    const char *attrs;
    /* Writes noutput result type ids into out; returns 0 or an error naming the op. */
    int (*infer)(ir_module *m, ir_id op, ir_id *out, di_error *err);
    void (*cost)(const ir_module *m, ir_id op, ir_cost *c);
} ir_opinfo;

extern const ir_opinfo ir_opinfos[IR_NOPKIND];

static inline const ir_opinfo *
ir_opkind_info(int kind)
{
    return &ir_opinfos[kind];
}
static inline const char *
ir_opkind_name(int kind)
{
    return ir_opinfos[kind].name;
}
/* Can ops of this kind call a function (dist.pmap, func.call)? */
static inline int
ir_opkind_calls(int kind)
{
    return kind == IR_OP_PMAP || kind == IR_OP_CALL;
}
/* Looks up a kind by text name, including DistIR's aliases; IR_OP_NONE if unknown. */
int ir_opkind_from_name(const char *s, size_t len);
/* The printed name of an op: the table name, or op_type for opaque ops. */
const char *ir_op_name(const ir_module *m, ir_id op);

/* An op as error messages name it (ir_op_label). */
typedef struct ir_label {
    char s[192];
} ir_label;

/*
 * The one way messages name an op: its kind and its first result,
 * "MatMul %y"; else its op name (an ONNX node name), "MatMul 'fc1'"; else
 * its id, "MatMul (op 12)". Long names are cut. Safe on a malformed module
 * (out-of-range ids show as "?"), so the verifier uses it too. Use as
 * ir_op_label(m, op).s within one expression, or keep the struct.
 */
ir_label ir_op_label(const ir_module *m, ir_id op);

/*
 * Infers the result types of an op from its inputs and attributes; the op's
 * results need not have types yet. Interns any new types in m. Returns 0 or
 * an error naming the op and the offending input.
 */
int ir_op_infer(ir_module *m, ir_id op, ir_id *out, di_error *err);
/*
 * Infers op's result types (ir_op_infer) and sets them on its results, for
 * any number of results. Returns 0 or ir_op_infer's error, in which case the
 * results keep their types (new types may have been interned).
 */
int ir_op_infer_results(ir_module *m, ir_id op, di_error *err);
/* The reduction of a SoftmaxCrossEntropyLoss or its gradient (attribute "reduction"). */
typedef enum ir_reduction {
    IR_REDUCTION_INVALID = -1, /* not mean, sum or none */
    IR_REDUCTION_MEAN = 0,     /* the default */
    IR_REDUCTION_SUM,
    IR_REDUCTION_NONE,
} ir_reduction;
ir_reduction ir_sce_reduction(const ir_module *m, ir_id op);
/*
 * Gelu's and GeluGrad's attribute "approximate" (ONNX opset 20): 0 for "none"
 * (the default: x Phi(x) with erf), 1 for "tanh" (0.5 x (1 + tanh(sqrt(2/pi)
 * (x + 0.044715 x^3))), GPT-2's and Megatron-LM's), -1 for anything else.
 */
int ir_gelu_tanh(const ir_module *m, ir_id op);
/*
 * The dtype of a LayerNormalization's or RMSNormalization's statistics (mean,
 * inv_std_dev): attribute "stash_type" (an ONNX data type code, as Cast's "to")
 * when set, else x's dtype x (distir's modules before the attribute). ONNX's
 * default is 1 (f32): the importer and the model generators set it. IR_DTYPE_NONE
 * when stash_type is not a float type distir knows.
 */
ir_dtype ir_norm_stat_dtype(const ir_module *m, ir_id op, ir_dtype x);

/* FLOPs and bytes of an op, from its types and attributes. */
void ir_op_cost(const ir_module *m, ir_id op, ir_cost *c);
/*
 * 1 when ir_op_cost prices op by a rule: every op kind but an opaque op
 * whose op_type has none (ONNX Runtime's training ops have one); such an op
 * is priced by its bytes alone, an estimate.
 */
int ir_op_has_cost_rule(const ir_module *m, ir_id op);

#endif
