/*
 * strategy_flags.h: the strategy flags shared by `simulate` and `transform`
 * (--dp, --tp, --pp, --cp, --ep, --microbatches, --schedule,
 * --virtual-stages, --recompute, --stash, --zero, --sequence-parallel,
 * --overlap-grad-reduce, --bucket-mb, --order, and nested parallelism:
 * --stages DPxTP[:LAYERS],... and --tp-layers A-B,C). The flags are the library's strategy options
 * (strategy_set): parsing, checking and their messages live there.
 */
#ifndef DISTIR_CLIENT_STRATEGY_FLAGS_H
#define DISTIR_CLIENT_STRATEGY_FLAGS_H

#include "strategy/strategy.h"

/*
 * If argv[*i] is a strategy flag ("--name VALUE", "--name=VALUE" or a
 * switch), stores it in s (advancing *i past a value) and returns 1;
 * returns 0 if it is not one, -1 on a bad value (reported).
 */
int cli_strategy_flag(int argc, char **argv, int *i, strategy *s);
/* After the last flag: strategy_normalize, reporting a refusal; 0 or -1. */
int cli_strategy_finish(strategy *s);

/* The strategy flags, for the usage texts of the commands that take them. */
#define CLI_STRATEGY_FLAGS_HELP                                                                    \
    "strategy flags: [--dp N] [--tp N] [--pp N] [--cp N] [--ep N] [--microbatches M]\n"            \
    "  [--schedule gpipe|1f1b|interleaved[:V]] [--virtual-stages V]\n"                             \
    "  [--recompute none|selective|full|selective-op [--recompute-layers N]]\n"                    \
    "  [--stash none|pipedream|2bw] [--zero 0-3] [--sequence-parallel]\n"                         \
    "  [--overlap-grad-reduce [--bucket-mb N]]\n"                                                 \
    "  [--order tp-dp-pp|tp-pp-dp] [--stages DPxTP[:L],...] [--tp-layers A-B,...]"

#endif
