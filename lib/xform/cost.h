/*
 * cost.h: what the transforms need to know about the target hardware: how
 * many devices it has and its name (to validate a strategy), and how long
 * each op takes there (to balance pipeline stages). It keeps lib/xform from
 * depending on the simulator: cost.c adapts the simulator's hardware model
 * to this interface and is the one file of lib/xform that includes it.
 */
#ifndef DISTIR_XFORM_COST_H
#define DISTIR_XFORM_COST_H

#include <stdint.h>

#include "ir/ir.h"

struct hw_model;

/* How kernel fusion may treat an op (the simulator's sim_fuse_kind). */
enum { XFORM_FUSE_NONE, XFORM_FUSE_ELEM, XFORM_FUSE_ROW };

/* See xform_cost.op_bound. */
typedef struct xform_op_bound {
    double per_flop, flop_fixed, per_byte, launch;
    double per_special; /* seconds per special-function evaluation (ir_cost.special) */
    int gemm; /* GEMM-class: its flop_fixed makes small ones slow */
    int fuse;     /* XFORM_FUSE_*: a fused kernel may take it in, ending there (ROW) or not */
    int own_kernel; /* by its attributes a kernel of its own whatever fuse says
                       (sim_fuse_excluded) */
    int epilogue; /* it may run in a GEMM's kernel at no cost: the cast or the accumulation of
                     a weight gradient, with gradient accumulation fusion (sim_fuse_epilogue) */
} xform_op_bound;

typedef struct xform_cost {
    uint32_t ndevice; /* devices of the target hardware */
    const char *name; /* its name, for messages */
    /*
     * Seconds op of m takes on one device of the hardware: 0 for views,
     * plumbing and communication, negative when it cannot be priced. NULL
     * when there is no target hardware (then ndevice and name mean nothing).
     */
    double (*op_time)(const void *ctx, const ir_module *m, ir_id op);
    /*
     * The terms of a lower bound on op's time on one device (sim_op_bound_terms):
     * f FLOPs and B bytes of it take at least max(f per_flop + flop_fixed,
     * B per_byte) + launch seconds. Returns 0 with every term 0 when the op
     * costs nothing or may cost anything (measured op times).
     */
    int (*op_bound)(const void *ctx, const ir_module *m, ir_id op, int tf32,
                    struct xform_op_bound *b);
    const void *ctx;  /* passed to op_time and op_bound */
} xform_cost;

/* The cost interface of hw, which must outlive *c (hw NULL: no hardware). */
void xform_cost_init(xform_cost *c, const struct hw_model *hw);

/* Is there a target hardware? */
static inline int
xform_cost_known(const xform_cost *c)
{
    return c->op_time != NULL;
}

#endif
