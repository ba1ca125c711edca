/*
 * cmd_shard.c: `distir shard FILE [--mesh NAME=2x4[@FIRST]] ...
 * [--annotate VALUE=MESH:PLACEMENTS] ... [--lower] [-o OUT]`, the global
 * view (docs/transforms.md, "The global view"): declares meshes, annotates
 * values (`--annotate lv1=mesh0:S[1]`, one placement per mesh axis,
 * comma-separated: `w=m:R,S[0]`), propagates the annotations (xform_shard)
 * and writes the global-view module, or with --lower the per-device
 * programs (xform_lower_global). The module may carry its own
 * dist.annotate_sharding ops; the flags add to them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "xform/xform.h"

static const char usage[] =
    "shard FILE [--mesh NAME=2x4[@FIRST]] ... [--annotate VALUE=MESH:PLACEMENTS] ...\n"
    "             [--lower] [-o OUT]";

/* --mesh NAME=AxB[@FIRST]: devices FIRST.. in row-major order. */
static int
add_mesh(ir_module *m, const char *arg)
{
    const char *eq = strchr(arg, '='), *p;
    int64_t shape[IR_MAX_RANK], devs[4096], n = 1, first = 0;
    uint32_t rank = 0;
    char name[128];
    if (eq == NULL || eq == arg || (size_t)(eq - arg) >= sizeof name)
        goto bad;
    memcpy(name, arg, (size_t)(eq - arg));
    name[eq - arg] = '\0';
    for (p = eq + 1;;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 1 || v > 4096 || rank == IR_MAX_RANK)
            goto bad;
        shape[rank++] = v;
        n *= v;
        p = end;
        if (*p == 'x') {
            p++;
            continue;
        }
        if (*p == '@') {
            first = strtol(p + 1, &end, 10);
            if (end == p + 1 || *end != '\0' || first < 0 || first > 1 << 20)
                goto bad;
        } else if (*p != '\0') {
            goto bad;
        }
        break;
    }
    if (n > 4096) {
        cli_error("--mesh '%s': more than 4096 devices", arg);
        return -1;
    }
    if (ir_mesh_find(m, ir_str(m, name)) != 0) {
        cli_error("--mesh '%s': the module already declares @%s", arg, name);
        return -1;
    }
    for (int64_t k = 0; k < n; k++)
        devs[k] = first + k;
    ir_mesh_add(m, name, rank, shape, devs);
    return 0;
bad:
    cli_error("--mesh '%s': expected NAME=AxBx...[@FIRST], e.g. mesh0=2x4", arg);
    return -1;
}

/* --annotate VALUE=MESH:PLACEMENTS */
static int
annotate(ir_module *m, const char *arg)
{
    const char *eq = strchr(arg, '='), *colon = eq ? strchr(eq, ':') : NULL;
    char value[256], mesh[128];
    di_error err;
    if (eq == NULL || colon == NULL || eq == arg || colon == eq + 1 || colon[1] == '\0' ||
        (size_t)(eq - arg) >= sizeof value || (size_t)(colon - eq - 1) >= sizeof mesh) {
        cli_error("--annotate '%s': expected VALUE=MESH:PLACEMENTS, e.g. lv1=mesh0:S[1]", arg);
        return -1;
    }
    memcpy(value, arg, (size_t)(eq - arg));
    value[eq - arg] = '\0';
    memcpy(mesh, eq + 1, (size_t)(colon - eq - 1));
    mesh[colon - eq - 1] = '\0';
    if (value[0] == '%')
        memmove(value, value + 1, strlen(value));
    if (xform_annotate(m, value, mesh[0] == '@' ? mesh + 1 : mesh, colon + 1, &err) != 0) {
        cli_error("%s", err.msg);
        return -1;
    }
    return 0;
}

int
cmd_shard(int argc, char **argv)
{
    const char *file = NULL, *out = "-", *v;
    const char **meshes = di_xcalloc((size_t)argc + 1, sizeof *meshes);
    const char **notes = di_xcalloc((size_t)argc + 1, sizeof *notes);
    uint32_t nmesh = 0, nnote = 0;
    ir_module *m = NULL, *g = NULL, *l = NULL;
    int lower = 0, rc = CLI_FAIL;
    di_error err;
    for (int i = 1; i < argc; i++) {
        int r;
        if (cli_is_help(argv[i])) {
            rc = cli_help(usage);
            goto done;
        }
        if (cli_flag(argv[i], "--lower")) {
            lower = 1;
        } else if ((r = cli_opt(argc, argv, &i, "-o", &v)) != 0) {
            if (r < 0)
                goto usage;
            out = v;
        } else if ((r = cli_opt(argc, argv, &i, "--mesh", &v)) != 0) {
            if (r < 0)
                goto usage;
            meshes[nmesh++] = v;
        } else if ((r = cli_opt(argc, argv, &i, "--annotate", &v)) != 0) {
            if (r < 0)
                goto usage;
            notes[nnote++] = v;
        } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
            cli_error("unknown option '%s'", argv[i]);
            goto usage;
        } else if (file == NULL) {
            file = argv[i];
        } else {
            goto usage;
        }
    }
    if (file == NULL)
        goto usage;
    if (cli_load_module(file, &m) != 0)
        goto done;
    for (uint32_t i = 0; i < nmesh; i++)
        if (add_mesh(m, meshes[i]) != 0)
            goto done;
    for (uint32_t i = 0; i < nnote; i++)
        if (annotate(m, notes[i]) != 0)
            goto done;
    if (ir_verify(m, &err) != 0) {
        cli_error("'%s' is not a valid module: %s", file, err.msg);
        goto done;
    }
    if (xform_shard(m, &g, &err) != 0) {
        cli_error("cannot propagate the annotations of '%s': %s", file, err.msg);
        goto done;
    }
    if (lower && xform_lower_global(g, &l, &err) != 0) {
        cli_error("cannot lower '%s': %s", file, err.msg);
        goto done;
    }
    rc = cli_write_module(lower ? l : g, out, CLI_FORMAT_UNKNOWN);
    goto done;
usage:
    rc = cli_usage(usage);
done:
    ir_module_free(l);
    ir_module_free(g);
    ir_module_free(m);
    di_free(meshes);
    di_free(notes);
    return rc;
}
