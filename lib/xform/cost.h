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

typedef struct xform_cost {
    uint32_t ndevice; /* devices of the target hardware */
    const char *name; /* its name, for messages */
    /*
     * Seconds op of m takes on one device of the hardware: 0 for views,
     * plumbing and communication, negative when it cannot be priced. NULL
     * when there is no target hardware (then ndevice and name mean nothing).
     */
    double (*op_time)(const void *ctx, const ir_module *m, ir_id op);
    const void *ctx;  /* passed to op_time */
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
