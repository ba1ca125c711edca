/*
 * strategy.c: see strategy.h. Strategy transforms (DESIGN.md section 6) are a
 * later issue; until then a non-trivial strategy is answered UNIMPLEMENTED
 * (DI_EUNSUPPORTED maps to it in status.c).
 */
#include "strategy.h"

int
srv_strategy_apply(const ir_module *m, const srv_strategy *s, const hw_model *hw,
                   const ir_module **out, ir_module **owned, di_error *err)
{
    (void)hw; /* the transforms will check the device count against it */
    *owned = NULL;
    *out = NULL;
    if (srv_strategy_is_trivial(s)) {
        *out = m;
        return 0;
    }
    return di_error_set(err, DI_EUNSUPPORTED, "strategy transforms are not available yet");
}
