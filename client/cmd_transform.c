/*
 * cmd_transform.c: `distir transform FILE [strategy flags] [--hw PRESET|FILE]
 * [--stats] -o OUT` applies a parallel strategy (lib/xform, docs/transforms.md)
 * to a sequential training step and writes the distributed module: IR text
 * (.dir, or "-" for standard output) or protobuf (.pb). --hw checks the
 * device count against the hardware; --stats prints the op counts of the
 * result to standard error.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "ir/pb.h"
#include "sim/hw.h"
#include "strategy_flags.h"
#include "xform/xform.h"

static const char usage[] =
    "transform FILE [strategy flags] [--hw PRESET|FILE.json] [--stats] [-o OUT]\n"
    CLI_STRATEGY_FLAGS_HELP;

/* The command, with its strategy (s) owned by cmd_transform. */
static int
transform_cmd(int argc, char **argv, strategy *s)
{
    const char *file = NULL, *out = "-", *hwname = NULL, *v;
    hw_model *hw = NULL;
    ir_module *m = NULL, *dm = NULL;
    di_error err;
    int stats = 0, rc;
    struct timespec t0, t1;
    for (int i = 1; i < argc; i++) {
        int r;
        if (cli_is_help(argv[i]))
            return cli_help(usage);
        if (cli_flag(argv[i], "--stats")) {
            stats = 1;
        } else if ((r = cli_opt(argc, argv, &i, "-o", &v)) != 0) {
            if (r < 0)
                return CLI_USAGE;
            out = v;
        } else if ((r = cli_opt(argc, argv, &i, "--hw", &v)) != 0) {
            if (r < 0)
                return CLI_USAGE;
            hwname = v;
        } else if ((r = cli_strategy_flag(argc, argv, &i, s)) != 0) {
            if (r < 0)
                return CLI_USAGE;
        } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
            cli_error("unknown option '%s'", argv[i]);
            return cli_usage(usage);
        } else if (file == NULL) {
            file = argv[i];
        } else {
            return cli_usage(usage);
        }
    }
    if (file == NULL)
        return cli_usage(usage);
    if (cli_strategy_finish(s) != 0)
        return CLI_USAGE;
    if (hwname && hw_load(hwname, &hw, &err) != 0) {
        cli_error("%s", err.msg);
        return CLI_FAIL;
    }
    if (cli_load_module(file, &m) != 0) {
        hw_free(hw);
        return CLI_FAIL;
    }
    clock_gettime(CLOCK_MONOTONIC, &t0);
    rc = xform_apply(m, s, hw, &dm, &err);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (rc != 0) {
        cli_error("cannot transform '%s': %s", file, err.msg);
        rc = CLI_FAIL;
    } else {
        if (stats) {
            double sec = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
            char buf[256];
            strategy_format(s, buf, sizeof buf);
            fprintf(stderr, "%s: %u ops, %u values, %u pmaps' bodies, %.3f ms (%.3f us per op)\n",
                    buf, dm->nop - 1, dm->nvalue - 1, dm->nregion - 2, sec * 1e3,
                    dm->nop > 1 ? sec * 1e6 / (dm->nop - 1) : 0.0);
        }
        rc = cli_write_module(dm, out, CLI_FORMAT_UNKNOWN);
    }
    ir_module_free(dm);
    ir_module_free(m);
    hw_free(hw);
    return rc;
}

int
cmd_transform(int argc, char **argv)
{
    strategy s;
    int rc;
    strategy_init(&s);
    rc = transform_cmd(argc, argv, &s);
    strategy_fini(&s);
    return rc;
}
