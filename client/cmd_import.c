/*
 * cmd_import.c: `distir import MODEL.onnx [-o OUT] [--strict] [--dim NAME=N ...]
 * [--default-dim N] [--device D]` imports an ONNX model (lib/onnx) and writes
 * the module in text form (to standard output without -o, or as protobuf
 * when OUT ends in .pb). Symbolic dimensions (dim_param NAME) take the size
 * given with --dim NAME=N; any other dimension without a value takes
 * --default-dim (1). Ops distir does not have become dist.opaque ops that
 * keep their shapes (the simulator then needs measured times for them, see
 * --op-times of `distir simulate`) unless --strict, which makes them errors.
 * Initializers travel with the module as argument data where the output form
 * carries it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "ir/pb.h"
#include "onnx/onnx.h"
#include "onnx/onnx_ex.h"

static const char import_usage[] =
    "import MODEL.onnx [-o OUT.dir|OUT.pb] [--strict] [--dim NAME=N ...] [--default-dim N] "
    "[--device D]";

static int
parse_count(const char *s, int64_t *v)
{
    char *end;
    errno = 0;
    *v = strtoll(s, &end, 10);
    return *s != '\0' && *end == '\0' && errno == 0 && *v >= 0 ? 0 : -1;
}

int
cmd_import(int argc, char **argv)
{
    const char *path = NULL, *outpath = NULL, *v;
    const char **names = di_xcalloc((size_t)argc + 1, sizeof *names);
    int64_t *values = di_xcalloc((size_t)argc + 1, sizeof *values), n;
    char **owned = di_xcalloc((size_t)argc + 1, sizeof *owned);
    onnx_options opt;
    ir_module *m = NULL;
    uint8_t *data = NULL;
    size_t len;
    di_error err;
    int rc = CLI_FAIL, r;
    onnx_options_default(&opt);
    di_error_clear(&err);
    for (int i = 1; i < argc; i++) {
        if (cli_is_help(argv[i])) {
            rc = cli_help(import_usage);
            goto done;
        } else if (cli_flag(argv[i], "--strict")) {
            opt.strict = 1;
        } else if ((r = cli_opt(argc, argv, &i, "-o", &v)) != 0) {
            if (r < 0)
                goto usage;
            outpath = v;
        } else if ((r = cli_opt(argc, argv, &i, "--dim", &v)) != 0) {
            const char *eq;
            if (r < 0)
                goto usage;
            eq = strchr(v, '=');
            if (eq == NULL || eq == v || parse_count(eq + 1, &n) != 0) {
                cli_error("--dim '%s': expected NAME=N with N >= 0", v);
                goto usage;
            }
            owned[opt.ndim] = di_xstrdup(v);
            owned[opt.ndim][eq - v] = '\0';
            names[opt.ndim] = owned[opt.ndim];
            values[opt.ndim++] = n;
        } else if ((r = cli_opt(argc, argv, &i, "--default-dim", &v)) != 0) {
            if (r < 0 || parse_count(v, &opt.default_dim) != 0) {
                cli_error("--default-dim: expected an integer >= 0");
                goto usage;
            }
        } else if ((r = cli_opt(argc, argv, &i, "--device", &v)) != 0) {
            if (r < 0 || parse_count(v, &n) != 0 || n > INT32_MAX) {
                cli_error("--device: expected a device id");
                goto usage;
            }
            opt.device = (int32_t)n;
        } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
            cli_error("unknown option '%s'", argv[i]);
            goto usage;
        } else if (path == NULL) {
            path = argv[i];
        } else {
            cli_error("more than one model given ('%s' and '%s')", path, argv[i]);
            goto usage;
        }
    }
    if (path == NULL)
        goto usage;
    opt.dim_names = names;
    opt.dim_values = values;
    {
        ir_limits lim;
        ir_limits_default(&lim);
        if (di_read_file(path, (size_t)lim.max_bytes, &data, &len, &err) != 0) {
            cli_error("%s", err.msg);
            goto done;
        }
    }
    if (onnx_import_opts(data, len, &opt, &m, &err) != 0) {
        cli_error("cannot import '%s': %s", path, err.msg);
        goto done;
    }
    if (ir_verify(m, &err) != 0) {
        cli_error("the module imported from '%s' does not verify: %s", path, err.msg);
        goto done;
    }
    rc = cli_write_module(m, outpath ? outpath : "-", CLI_FORMAT_UNKNOWN);
    goto done;
usage:
    rc = cli_usage(import_usage);
done:
    for (int i = 0; i < argc; i++)
        di_free(owned[i]);
    di_free(owned);
    di_free(names);
    di_free(values);
    di_free(data);
    ir_module_free(m);
    return rc;
}
