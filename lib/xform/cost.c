/*
 * cost.c: the adapter from the simulator to the transforms' cost interface
 * (cost.h). An op's time is the simulator's (sim_op_time) on device 0 of the
 * hardware, the device the stage balancing prices every op on. This is the
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

void
xform_cost_init(xform_cost *c, const hw_model *hw)
{
    memset(c, 0, sizeof *c);
    if (hw == NULL)
        return;
    c->ndevice = hw->ndevice;
    c->name = hw->name;
    c->op_time = simulated_op_time;
    c->ctx = hw;
}
