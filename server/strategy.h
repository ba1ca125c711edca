/*
 * strategy.h: applying a parallel strategy to a module before simulation,
 * on a worker thread. This is the one place where distird turns (module,
 * strategy) into the module it simulates; when lib/xform lands, the body of
 * srv_strategy_apply becomes a call to xform_apply(m, strategy, hw, &out, err)
 * (srv_strategy's fields are xform_strategy's, with defaults filled in).
 */
#ifndef DISTIRD_STRATEGY_H
#define DISTIRD_STRATEGY_H

#include "base/base.h"
#include "ir/ir.h"
#include "key.h"
#include "sim/hw.h"

/*
 * Sets *out to the module to simulate: m itself for a trivial strategy
 * (*owned = NULL), or a new module that the caller frees (*owned = *out).
 * Fails with DI_EUNSUPPORTED while transforms are not available.
 */
int srv_strategy_apply(const ir_module *m, const srv_strategy *s, const hw_model *hw,
                       const ir_module **out, ir_module **owned, di_error *err);

#endif
