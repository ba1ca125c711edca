/*
 * cost.c: the adapter from the simulator to the transforms' cost interface
 * (cost.h). An op's time is the simulator's (sim_op_time) on device 0 of the
 * hardware, the device the stage balancing prices every op on (and the
 * terms of a lower bound on an op's time there, for the search's time bound). This is the
 * only file of lib/xform that includes the simulator.
 */
#include "xform/cost.h"

#include <string.h>

#include "sim/hw.h"
#include "sim/sim.h"

static double
simulated_op_time(const void *ctx, const ir_module *m, ir_id op)
{
    return sim_op_time(m, op, (const hw_model *)ctx, 0);
}

static int
simulated_op_bound(const void *ctx, const ir_module *m, ir_id op, int tf32, xform_op_bound *b)
{
    sim_op_bound t;
    int rc = sim_op_bound_terms((const hw_model *)ctx, 0, m->ops[op].kind, sim_op_dtype(m, op), tf32,
                                &t);
    b->per_flop = t.per_flop;
    b->flop_fixed = t.flop_fixed;
    b->per_byte = t.per_byte;
    b->launch = t.launch;
    b->per_special = t.per_special;
    b->gemm = t.gemm;
    switch (sim_fuse_kind(m->ops[op].kind)) {
    case SIM_FUSE_ELEM:
        b->fuse = XFORM_FUSE_ELEM;
        break;
    case SIM_FUSE_ROW:
        b->fuse = XFORM_FUSE_ROW;
        break;
    default:
        b->fuse = XFORM_FUSE_NONE;
    }
    b->own_kernel = sim_fuse_excluded(m, op);
    b->epilogue = sim_fuse_epilogue(m, op) != 0;
    return rc;
}

void
xform_cost_init(xform_cost *c, const hw_model *hw)
{
    memset(c, 0, sizeof *c);
    if (hw == NULL)
        return;
    c->ndevice = hw->ndevice;
    c->name = hw->name;
    c->op_time = simulated_op_time;
    c->op_bound = simulated_op_bound;
    c->ctx = hw;
}
