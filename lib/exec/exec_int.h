/*
 * exec_int.h: pieces shared by the files of lib/exec (not a public API).
 *
 * Tensors keep their elements in one of four compute classes (exec.h):
 * float, double, int64_t and uint8_t. ex_class names the class of a dtype;
 * ex_fixup rounds a freshly computed tensor back to its dtype (f16 and bf16
 * to their precision, i32 and i8 by wrapping, bool to 0/1), which every
 * kernel calls on its results.
 *
 * ex_kernel_run runs one compute op (everything that is not communication
 * or structure) on tensors: it allocates its results from the shapes of its
 * inputs and attributes, so it never writes outside a tensor even when the
 * module's types disagree with the data; the executor compares the results
 * with the declared types afterwards.
 */
#ifndef DISTIR_EXEC_INT_H
#define DISTIR_EXEC_INT_H

#include "exec/exec.h"

typedef enum ex_class {
    EX_CF = 0, /* float: f32, f16, bf16 */
    EX_CD,     /* double: f64 */
    EX_CI,     /* int64_t: i64, i32, i8 */
    EX_CB,     /* uint8_t: i1 */
} ex_class;

/* Largest tensor the executor allocates (bytes of the compute type). */
#define EX_MAX_BYTES ((uint64_t)1 << 34)

ex_class ex_class_of(ir_dtype dt);
/* Rounds every element of t to its dtype's precision or range. */
void ex_fixup(ex_tensor *t);
/* IEEE half and bfloat16 conversions (round to nearest even). */
float ex_half_to_float(uint16_t h);
uint16_t ex_float_to_half(float f);
float ex_bf16_to_float(uint16_t h);
uint16_t ex_float_to_bf16(float f);
/* Element count of a shape, or -1 on overflow or a negative dim. */
int64_t ex_shape_numel(uint32_t rank, const int64_t *dims);
/* "[2,3]" into buf. */
const char *ex_shape_str(char *buf, size_t n, uint32_t rank, const int64_t *dims);

/*
 * Runs compute op `op` of m on inputs in[0..nin) (NULL for an absent
 * optional input) and initializes out[0..nout) (the op's result count).
 * On error nothing in out needs freeing. The label names the op in errors.
 */
/*
 * A compute op that holds a block of a tensor split over a mesh group (a
 * Gather from a vocabulary shard, the vocabulary-parallel cross-entropy)
 * runs as member `pos` of `n`; every other op as member 0 of 1.
 */
typedef struct ex_shard {
    uint32_t pos, n;
} ex_shard;

int ex_kernel_run(const ir_module *m, ir_id op, const ex_tensor *const *in, uint32_t nin,
                  ex_tensor *out, uint32_t nout, ex_shard shard, di_error *err);

/* Concatenates parts[0..n) along dim into out (initialized here). */
int ex_concat(const ex_tensor *const *parts, uint32_t n, uint32_t dim, ex_tensor *out,
              di_error *err);
/* The k-th of n equal parts of t along dim (n must divide the dim). */
int ex_split_part(const ex_tensor *t, uint32_t dim, uint32_t n, uint32_t k, ex_tensor *out,
                  di_error *err);
/* Copies the block of src starting at offsets into dst (dst's shape gives the block size). */
void ex_copy_block(const ex_tensor *src, const int64_t *offsets, ex_tensor *dst);
/* Writes (mode 0), adds (mode 1) or maxes (mode 2) src into dst at offsets. */
void ex_put_block(ex_tensor *dst, const int64_t *offsets, const ex_tensor *src, int mode);

/* Parses a whole .npy file image (npy.c); used by ex_npy_read and the fuzz target. */
int ex_npy_parse(const uint8_t *data, size_t len, ex_tensor *t, di_error *err);

#endif
