/*
 * strategy.c: see strategy.h. A non-trivial strategy goes through
 * xform_apply (lib/xform); impossible strategies come back as DI_ESTRATEGY
 * (INVALID_ARGUMENT in status.c) with the message naming the constraint,
 * including "dp*tp*pp = N exceeds the M devices of HW".
 */
#include "strategy.h"

#include "xform/xform.h"

int
srv_strategy_apply(const ir_module *m, const srv_strategy *s, const hw_model *hw,
                   const ir_module **out, ir_module **owned, di_error *err)
{
    xform_strategy xs;
    int rc;
    *owned = NULL;
    *out = NULL;
    if (srv_strategy_is_trivial(s)) {
        *out = m;
        return 0;
    }
    xform_strategy_init(&xs);
    xs.dp = s->dp;
    xs.tp = s->tp;
    xs.pp = s->pp;
    xs.microbatches = s->microbatches;
    xs.schedule = (xform_schedule)s->schedule;
    xs.virtual_stages = s->virtual_stages;
    xs.recompute = (xform_recompute)s->recompute;
    xs.stash = (xform_stash)s->stash;
    xs.zero = s->zero;
    xs.sequence_parallel = s->sequence_parallel;
    xs.overlap_grad_reduce = s->overlap_grad_reduce;
    xs.bucket_mb = s->bucket_mb;
    xs.ndevice_order = s->ndevice_order;
    xs.device_order = s->device_order;
    xs.ntp_layers = s->ntp_layers;
    xs.tp_layers = s->tp_layers;
    xs.nstages = s->nstages;
    xs.stages = s->stages;
    if ((rc = xform_apply(m, &xs, hw, owned, err)) != 0)
        return rc;
    *out = *owned;
    return 0;
}
