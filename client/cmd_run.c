/*
 * cmd_run.c: `distir run FILE [--input NAME=FILE.npy ...] [--random-seed S]
 * [--int-bound N] [-o DIR]` executes a module on the CPU with the reference
 * executors (lib/exec) and real numbers.
 *
 * Arguments are matched by name: `--input x=x.npy` fills argument x (an
 * element of a tuple argument is NAME:K). An argument not given takes its
 * initializer when it has one, else deterministic random values from the
 * seed (floats uniform in [-1, 1), integers in [0, bound) where the bound is
 * --int-bound, or else the smallest size any Gather or loss that reads the
 * argument allows, so that random token ids and labels are valid). Every
 * result is summarized on stdout (name, dtype, shape, min, max, mean) and,
 * with -o DIR, written to DIR/NAME.npy (characters other than letters,
 * digits, '.', '-' and '_' in NAME become '_'; tuple elements are NAME.K).
 * An annotated global-view module runs as its lowering (xform_global_local):
 * per-device programs whose results are assembled into global values.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "exec/exec.h"
#include "xform/xform.h"

static const char run_usage[] =
    "run FILE [--input NAME=FILE.npy ...] [--random-seed S] [--int-bound N] [-o DIR]";

/* Argument location of "NAME" or "NAME:K"; -1 if there is none. */
static long
find_location(const ir_module *m, const char *spec, size_t len)
{
    ir_id f = ir_module_entry(m);
    long loc = 0, elem = -1;
    size_t nlen = len;
    const char *colon = memchr(spec, ':', len);
    if (colon != NULL) {
        char *end;
        elem = strtol(colon + 1, &end, 10);
        if (end != spec + len || elem < 0)
            return -1;
        nlen = (size_t)(colon - spec);
    }
    for (uint32_t i = 0; i < m->regions[f].narg; i++) {
        ir_id v = m->regions[f].args[i], ty = m->values[v].type;
        const char *name = ir_str_get(m, m->values[v].name);
        uint32_t n = m->types[ty].kind == IR_TYPE_TUPLE ? m->types[ty].nelem : 1;
        if (strlen(name) == nlen && memcmp(name, spec, nlen) == 0) {
            if (m->types[ty].kind == IR_TYPE_TUPLE)
                return elem >= 0 && elem < (long)n ? loc + elem : -1;
            return elem < 0 ? loc : -1;
        }
        loc += n;
    }
    return -1;
}

/*
 * The bound for random integers: the smallest dimension that an integer
 * argument indexes (Gather's axis of data, a loss's class count).
 */
static int64_t
int_bound(const ir_module *m)
{
    int64_t bound = 0;
    ir_id f = ir_module_entry(m);
    const ir_region *r = &m->regions[f];
    for (uint32_t i = 0; i < r->nop; i++) {
        ir_id op = r->ops[i];
        int kind = m->ops[op].kind;
        int64_t b = 0;
        if (kind == IR_OP_GATHER && m->ops[op].ninput == 2) {
            ir_id dt = m->values[ir_op_input(m, op, 0)].type;
            int64_t axis = ir_op_int(m, op, "axis", 0);
            uint32_t rank = m->types[dt].rank;
            if (axis < 0)
                axis += rank;
            if (axis >= 0 && axis < (int64_t)rank)
                b = ir_type_dims(m, dt)[axis];
        } else if ((kind == IR_OP_SCELOSS || kind == IR_OP_SCELOSSGRAD) &&
                   m->ops[op].ninput >= 2) {
            ir_id lt = m->values[ir_op_input(m, op, kind == IR_OP_SCELOSS ? 0 : 1)].type;
            if (m->types[lt].rank >= 2)
                b = ir_type_dims(m, lt)[1];
        }
        if (b > 0 && (bound == 0 || b < bound))
            bound = b;
    }
    return bound > 0 ? bound : 2;
}

/* Converts t in place to dtype dt (float to float or integer to integer only). */
static int
convert(ex_tensor *t, ir_dtype dt)
{
    ex_tensor c;
    int fa = ir_dtype_is_float(t->dtype), fb = ir_dtype_is_float(dt);
    if (fa != fb || (t->dtype == IR_BOOL) != (dt == IR_BOOL))
        return -1;
    if (ex_tensor_init(&c, dt, t->rank, t->dims) != 0)
        return -1;
    for (size_t i = 0; i < t->numel; i++)
        ex_set(&c, i, ex_get(t, i));
    c.device = t->device;
    ex_tensor_fini(t);
    *t = c;
    return 0;
}

/* A file name from a value name. */
static void
file_name(char *out, size_t n, const char *name, long index)
{
    size_t k = 0;
    for (const char *p = name; *p && k + 1 < n; p++) {
        char c = *p;
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '.' || c == '-' || c == '_';
        out[k++] = ok ? c : '_';
    }
    out[k] = '\0';
    if (k == 0 || out[0] == '.')
        snprintf(out, n, "result");
    if (index >= 0) {
        size_t len = strlen(out);
        snprintf(out + len, n - len, ".%ld", index);
    }
}

static void
summarize(const char *name, const ex_tensor *t)
{
    double mn = INFINITY, mx = -INFINITY, sum = 0;
    printf("%-24s %-4s [", name, ir_dtype_name(t->dtype));
    for (uint32_t i = 0; i < t->rank; i++)
        printf("%s%" PRId64, i ? "," : "", t->dims[i]);
    printf("]");
    for (size_t i = 0; i < t->numel; i++) {
        double v = ex_get(t, i);
        mn = v < mn ? v : mn;
        mx = v > mx ? v : mx;
        sum += v;
    }
    if (t->numel)
        printf("  min %.6g  max %.6g  mean %.6g\n", mn, mx, sum / (double)t->numel);
    else
        printf("  (empty)\n");
}

int
cmd_run(int argc, char **argv)
{
    const char *path = NULL, *outdir = NULL, *v;
    const char **inputs = NULL;
    uint32_t ninput = 0;
    uint64_t seed = 0;
    int64_t bound = 0;
    ir_module *m = NULL;
    ex_tensor *args = NULL, *res = NULL;
    uint32_t nargs = 0, nres = 0;
    di_error err;
    int rc = CLI_FAIL, r;
    di_error_clear(&err);
    inputs = di_xcalloc((size_t)argc + 1, sizeof *inputs);
    for (int i = 1; i < argc; i++) {
        if (cli_is_help(argv[i])) {
            di_free(inputs);
            return cli_help(run_usage);
        } else if ((r = cli_opt(argc, argv, &i, "--input", &v)) != 0) {
            if (r < 0)
                goto usage;
            inputs[ninput++] = v;
        } else if ((r = cli_opt(argc, argv, &i, "--random-seed", &v)) != 0) {
            char *end;
            if (r < 0)
                goto usage;
            errno = 0;
            seed = strtoull(v, &end, 10);
            if (*v == '\0' || *end != '\0' || errno != 0) {
                cli_error("--random-seed: '%s' is not a non-negative integer", v);
                goto usage;
            }
        } else if ((r = cli_opt(argc, argv, &i, "--int-bound", &v)) != 0) {
            char *end;
            if (r < 0)
                goto usage;
            bound = strtoll(v, &end, 10);
            if (*v == '\0' || *end != '\0' || bound < 1) {
                cli_error("--int-bound: '%s' is not a positive integer", v);
                goto usage;
            }
        } else if ((r = cli_opt(argc, argv, &i, "-o", &v)) != 0) {
            if (r < 0)
                goto usage;
            outdir = v;
        } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
            cli_error("unknown option '%s'", argv[i]);
            goto usage;
        } else if (path == NULL) {
            path = argv[i];
        } else {
            cli_error("more than one module given ('%s' and '%s')", path, argv[i]);
            goto usage;
        }
    }
    if (path == NULL)
        goto usage;
    if (cli_load_module(path, &m) != 0)
        goto done;
    if (ir_module_entry(m) == 0) {
        cli_error("'%s' has no function to run", path);
        goto done;
    }
    if (ir_verify(m, &err) != 0) {
        cli_error("'%s' is not a valid module: %s", path, err.msg);
        goto done;
    }
    if (xform_is_global(m)) {
        /* An annotated module runs as its lowering (per-device programs). */
        ir_module *lm;
        if (xform_global_local(m, &lm, &err) != 0) {
            cli_error("cannot lower the annotated module '%s': %s", path, err.msg);
            goto done;
        }
        ir_module_free(m);
        m = lm;
    }
    if (ex_random_args(m, seed, bound ? bound : int_bound(m), &args, &nargs, &err) != 0) {
        cli_error("%s", err.msg);
        goto done;
    }
    for (uint32_t i = 0; i < ninput; i++) {
        const char *eq = strchr(inputs[i], '=');
        long loc;
        ex_tensor t;
        if (eq == NULL || eq == inputs[i] || eq[1] == '\0') {
            cli_error("--input '%s': expected NAME=FILE.npy", inputs[i]);
            goto done;
        }
        loc = find_location(m, inputs[i], (size_t)(eq - inputs[i]));
        if (loc < 0) {
            cli_error("--input '%.*s': the function has no argument of that name (an element of "
                      "a tuple argument is NAME:K)",
                      (int)(eq - inputs[i]), inputs[i]);
            goto done;
        }
        if (ex_npy_read(eq + 1, &t, &err) != 0) {
            cli_error("--input '%.*s': %s", (int)(eq - inputs[i]), inputs[i], err.msg);
            goto done;
        }
        if (t.dtype != args[loc].dtype && convert(&t, args[loc].dtype) != 0) {
            cli_error("--input '%.*s': '%s' holds %s, the argument is %s", (int)(eq - inputs[i]),
                      inputs[i], eq + 1, ir_dtype_name(t.dtype), ir_dtype_name(args[loc].dtype));
            ex_tensor_fini(&t);
            goto done;
        }
        t.device = args[loc].device;
        ex_tensor_fini(&args[loc]);
        args[loc] = t;
    }
    if (ex_run(m, args, nargs, &res, &nres, &err) != 0) {
        cli_error("run failed: %s", err.msg);
        goto done;
    }
    if (outdir != NULL && mkdir(outdir, 0777) != 0 && errno != EEXIST) {
        cli_error("cannot create '%s': %s", outdir, strerror(errno));
        goto done;
    }
    {
        ir_id f = ir_module_entry(m);
        uint32_t k = 0;
        rc = CLI_OK;
        for (uint32_t i = 0; i < m->regions[f].nresult && k < nres; i++) {
            ir_id val = m->regions[f].results[i], ty = m->values[val].type;
            uint32_t n = m->types[ty].kind == IR_TYPE_TUPLE ? m->types[ty].nelem : 1;
            const char *name = ir_str_get(m, m->values[val].name);
            char base[64];
            if (*name == '\0') {
                snprintf(base, sizeof base, "result%u", i);
                name = base;
            }
            for (uint32_t j = 0; j < n && k < nres; j++, k++) {
                char fname[300], full[4096];
                file_name(fname, sizeof fname, name,
                          m->types[ty].kind == IR_TYPE_TUPLE ? (long)j : -1);
                summarize(m->types[ty].kind == IR_TYPE_TUPLE ? fname : name, &res[k]);
                if (outdir == NULL)
                    continue;
                snprintf(full, sizeof full, "%s/%s.npy", outdir, fname);
                if (ex_npy_write(full, &res[k], &err) != 0) {
                    cli_error("cannot write '%s': %s", full, err.msg);
                    rc = CLI_FAIL;
                }
            }
        }
    }
    goto done;
usage:
    rc = cli_usage(run_usage);
done:
    for (uint32_t i = 0; i < nargs; i++)
        ex_tensor_fini(&args[i]);
    di_free(args);
    for (uint32_t i = 0; i < nres; i++)
        ex_tensor_fini(&res[i]);
    di_free(res);
    di_free(inputs);
    ir_module_free(m);
    return rc;
}
