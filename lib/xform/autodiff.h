/*
 * autodiff.h: reverse-mode automatic differentiation of a forward function
 * into a training step (docs/models.md).
 *
 * xform_autodiff takes a top-level function whose ops compute a scalar loss
 * and appends, in the same function, the backward pass (one gradient rule per
 * op kind, gradients summed with Add where a value has several consumers and
 * reduced with ReduceSumTo where an input was broadcast) and the optimizer
 * step (SGDOptimizer or AdamOptimizer) for every trainable argument. Adam
 * adds two arguments per trained weight, its first and second moments, named
 * "<weight>.adam_m" and "<weight>.adam_v" (after the existing arguments, in
 * weight order). The function's results become, as in
 * tests/ir/seed001_mlp.dir: the updated weights in argument order, then
 * (Adam) the updated first moments and then the updated second moments in
 * the same order, then the function's previous results, with the loss
 * appended when it was not among them. With
 * XFORM_OPTIM_NONE the gradients take the place of the updated weights.
 *
 * Which arguments are trainable: the floating-point arguments whose names
 * are not data names (docs/models.md: "x", "tokens", "labels", ... and any
 * name starting with "data."), or exactly those listed in opts->trainable.
 *
 * Every op the pass adds carries the discardable attributes of the forward
 * op it differentiates (keys starting with "dist.", e.g. dist.layer and
 * dist.tp), with dist.phase set to "backward", or "optimizer" on the update
 * ops (whose other dist.* attributes come from the weight's first consumer),
 * so that the strategy transforms (xform.h) can find them.
 */
#ifndef DISTIR_XFORM_AUTODIFF_H
#define DISTIR_XFORM_AUTODIFF_H

#include <stdint.h>

#include "ir/ir.h"

typedef enum xform_optim {
    XFORM_OPTIM_SGD = 0,
    XFORM_OPTIM_ADAM,
    XFORM_OPTIM_NONE, /* no update: return the gradients */
} xform_optim;

typedef struct xform_autodiff_opts {
    xform_optim optimizer;
    double lr;      /* learning rate (SGD and Adam) */
    double beta1;   /* Adam */
    double beta2;   /* Adam */
    double epsilon; /* Adam */
    /* Names of data arguments (never trained); NULL: the default list of docs/models.md. */
    const char *const *data_names;
    uint32_t ndata_names;
    /* When non-NULL, exactly these arguments are trained (each must exist and be floating). */
    const char *const *trainable;
    uint32_t ntrainable;
    int annotate; /* 1 (default): add dist.phase and copy the forward op's dist.* attributes */
    /*
     * Mixed precision (Adam only, for f16 and bf16 weights, as Megatron-LM
     * trains): f32 master weights and moments (extra arguments "<w>.master",
     * f32 "<w>.adam_m", "<w>.adam_v"), the gradient cast to f32, and the
     * update on the master weights, of which the 16-bit weights are the
     * rounded copy. grad_accum_16: the cast comes after the accumulation over
     * microbatches and the data-parallel reduction (in the optimizer step),
     * not before them (in the backward pass: Megatron-LM's f32 main_grad).
     */
    int master_weights;
    int grad_accum_16;
} xform_autodiff_opts;

/* Defaults: SGD with lr 0.01; Adam betas 0.9/0.999, epsilon 1e-8; default data names;
 * annotated. */
void xform_autodiff_opts_init(xform_autodiff_opts *o);

/*
 * Differentiates function func of m with respect to its trainable arguments,
 * from the scalar (one-element, floating) value loss computed in func, and
 * appends the backward pass and the optimizer step as described above.
 * opts may be NULL for the defaults. Returns 0, or DI_EUNSUPPORTED naming the
 * first op on the path to the loss that has no gradient rule, or DI_EINVAL
 * for a bad loss or argument list. All checks run before anything is added,
 * so on those errors m is unchanged; DI_EVERIFY from shape inference of an
 * added op (a bug) leaves it partly changed.
 */
int xform_autodiff(ir_module *m, ir_id func, ir_id loss, const xform_autodiff_opts *opts,
                   di_error *err);

/* True when name is a data argument's name under opts (NULL: the defaults). */
int xform_autodiff_is_data_name(const xform_autodiff_opts *opts, const char *name);

/*
 * Writes v as one little-endian element of dtype dt into out (f16 and bf16
 * rounded to nearest even) and returns its size in bytes (0 for an unknown
 * dtype). The generators use it for constants.
 */
uint32_t xform_scalar_bytes(ir_dtype dt, double v, uint8_t out[8]);


#endif
