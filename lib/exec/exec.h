/*
 * exec.h: the reference executors. They run a module on the CPU with real
 * numbers so that transforms can be checked (docs/onnx.md): the
 * sequential executor runs a single-device module, the distributed executor
 * a local-view module with one value table per device, executing
 * communication for real (a scatter splits, an all-reduce sums).
 *
 * Tensors hold their elements in a compute type: float for f32, f16 and
 * bf16 (f16/bf16 values are rounded to their precision after every op),
 * double for f64, int64_t for i64, i32 and i8, uint8_t for i1 (bool).
 */
#ifndef DISTIR_EXEC_H
#define DISTIR_EXEC_H

#include <stddef.h>
#include <stdint.h>

#include "ir/ir.h"

typedef struct ex_tensor {
    ir_dtype dtype;
    uint32_t rank;
    int64_t dims[IR_MAX_RANK];
    int32_t device;  /* where it lives (-1 none) */
    size_t numel;
    void *data;      /* numel elements of the compute type; owned by the tensor */
} ex_tensor;

/* Bytes per element of the compute type of dt. */
size_t ex_elem_size(ir_dtype dt);
/* Allocates a zeroed tensor. Returns 0 or DI_ENOMEM / DI_ETOOBIG. */
int ex_tensor_init(ex_tensor *t, ir_dtype dt, uint32_t rank, const int64_t *dims);
void ex_tensor_fini(ex_tensor *t);
int ex_tensor_copy(ex_tensor *dst, const ex_tensor *src);
/* Element i as a double (any dtype). */
double ex_get(const ex_tensor *t, size_t i);
void ex_set(ex_tensor *t, size_t i, double v);
/* Converts raw little-endian storage bytes of dtype dt (ONNX raw_data, .npy, initializers). */
int ex_tensor_from_bytes(ex_tensor *t, ir_dtype dt, uint32_t rank, const int64_t *dims,
                         const void *bytes, size_t len, di_error *err);
/* The tensor as raw little-endian bytes of its dtype; caller frees *out with di_free. */
int ex_tensor_to_bytes(const ex_tensor *t, uint8_t **out, size_t *len);

/*
 * Runs the entry function of m. args has one tensor per argument location:
 * a tensor argument takes one, a tuple argument one per element, in order.
 * An argument whose tensor has data == NULL takes the value's initializer
 * (error if it has none). On success *results holds one tensor per result
 * location (the caller frees each with ex_tensor_fini and the array with
 * di_free). Modules with several devices run on the distributed executor.
 */
int ex_run(const ir_module *m, const ex_tensor *args, uint32_t nargs, ex_tensor **results,
           uint32_t *nresults, di_error *err);
/* Number of argument locations of the entry function (tuples count their elements). */
uint32_t ex_num_args(const ir_module *m);
/*
 * Fills every argument location deterministically from seed: initializers
 * where present, else floats uniform in [-1, 1), integers in [0, bound) where
 * bound is the `bound` argument (e.g. class labels or token ids). Caller frees.
 */
int ex_random_args(const ir_module *m, uint64_t seed, int64_t bound, ex_tensor **args,
                   uint32_t *nargs, di_error *err);

/* NumPy .npy files (format version 1.0/2.0, little-endian, C order). */
int ex_npy_read(const char *path, ex_tensor *t, di_error *err);
int ex_npy_write(const char *path, const ex_tensor *t, di_error *err);

#endif
