/*
 * strategy_flags.h: the strategy flags shared by `simulate`, `transform` and
 * `search` (--dp, --tp, --pp, --microbatches, --schedule, --virtual-stages,
 * --recompute, --stash, --zero, --sequence-parallel, --overlap-grad-reduce, --bucket-mb,
 * and nested parallelism: --stages DPxTP[:LAYERS],... and --tp-layers A-B,C).
 */
#ifndef DISTIR_CLIENT_STRATEGY_FLAGS_H
#define DISTIR_CLIENT_STRATEGY_FLAGS_H

#include "distir.pb-c.h"
#include "ir/ir.h"
#include "sim/hw.h"

/*
 * If argv[*i] is a strategy flag, stores it in s (advancing *i past a value)
 * and returns 1; returns 0 if it is not one, -1 on a bad value (reported).
 */
int cli_strategy_flag(int argc, char **argv, int *i, Distir__V1__Strategy *s);
/* True if the strategy asks for nothing (every degree 1, no options). */
int cli_strategy_is_trivial(const Distir__V1__Strategy *s);
/*
 * Applies s to m for hardware hw. *out is NULL when the strategy is trivial
 * (simulate m as given), else the distributed module (caller frees).
 * Reports errors itself and returns non-zero.
 */
int cli_apply_strategy(const ir_module *m, const Distir__V1__Strategy *s, const hw_model *hw,
                       ir_module **out);

#endif
