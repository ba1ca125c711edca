/*
 * cmd_module.c: the commands that read one module and show it: `print`,
 * `verify`, `hash` and `convert`.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "sim/sim.h"
#include "ir/pb.h"

/*
 * Finds the single FILE argument of a command that takes no options. After
 * -h or --help it prints the usage and returns CLI_OK with *file NULL: the
 * command is done.
 */
static int
one_file(int argc, char **argv, const char *usage, const char **file)
{
    *file = NULL;
    for (int i = 1; i < argc; i++) {
        if (cli_is_help(argv[i]))
            return cli_help(usage);
        if (argv[i][0] == '-' && argv[i][1] != '\0')
            return cli_usage(usage);
        if (*file)
            return cli_usage(usage);
        *file = argv[i];
    }
    if (*file == NULL)
        return cli_usage(usage);
    return CLI_OK;
}

/*
 * FLOPs of one execution of region r: a pmap counts its body once per
 * device, so a called function counts once per call and device. memo holds
 * each region's total (< 0: not computed); depth bounds call chains.
 */
static double
region_flops(const ir_module *m, ir_id r, double *memo, int depth)
{
    const ir_region *reg = &m->regions[r];
    double total = 0;
    if (memo[r] >= 0)
        return memo[r];
    for (uint32_t i = 0; i < reg->nop; i++) {
        ir_id op = reg->ops[i];
        const ir_op *o = &m->ops[op];
        if (o->kind == IR_OP_PMAP && o->body && o->body < m->nregion && depth < 64) {
            uint32_t n = 0;
            const ir_attr *mesh = ir_op_attr(m, op, "mesh");
            if (ir_op_ints(m, op, "devices", &n) == NULL && mesh && mesh->s < m->nmesh)
                n = m->meshes[mesh->s].ndevice;
            total += n * region_flops(m, o->body, memo, depth + 1);
        } else {
            ir_cost c;
            ir_op_cost(m, op, &c);
            total += c.flops;
        }
    }
    memo[r] = total;
    return total;
}

uint64_t
cli_module_parameters(const ir_module *m)
{
    sim_model_stats st;
    sim_model_stats_of(m, &st);
    return st.parameters;
}

static void
print_stats(const ir_module *m, int json)
{
    uint64_t ops = 0, params = 0;
    double flops = 0;
    ir_id entry = ir_module_entry(m);
    for (ir_id op = 1; op < m->nop; op++)
        if (m->ops[op].kind != IR_OP_NONE)
            ops++;
    /* FLOPs per step: the entry function, pmap bodies and called functions once per device. */
    if (entry) {
        double *memo = di_xmalloc(m->nregion * sizeof *memo);
        for (uint32_t r = 0; r < m->nregion; r++)
            memo[r] = -1;
        flops = region_flops(m, entry, memo, 0);
        di_free(memo);
    }
    sim_model_stats st;
    sim_model_stats_of(m, &st);
    params = st.parameters;
    /*
     * Per token: 6N (forward 2N, backward 4N; N the active matmul weights) and the model
     * FLOPs with attention (what MFU counts, docs/simulator.md).
     */
    double per6n = st.tokens > 0 ? st.flops_6n / st.tokens : 0;
    double permodel = st.tokens > 0 ? st.model_flops / st.tokens : 0;
    if (json)
        printf("{\"ops\":%llu,\"values\":%u,\"parameters\":%llu,\"active_parameters\":%llu,"
               "\"matmul_parameters\":%llu,\"flops\":%.17g,\"tokens\":%.17g,"
               "\"flops_per_token_6n\":%.17g,\"model_flops_per_token\":%.17g}\n",
               (unsigned long long)ops, m->nvalue - 1, (unsigned long long)params,
               (unsigned long long)st.active_parameters, (unsigned long long)st.matmul_parameters,
               flops, st.tokens, per6n, permodel);
    else
        printf("ops         %llu\nvalues      %u\nparameters  %llu\nactive      %llu\n"
               "matmul      %llu (active weights a matmul reads: N of 6N)\n"
               "flops       %.6g\ntokens      %.6g per step\n"
               "per token   %.6g FLOPs by 6N, %.6g with attention (model FLOPs)\n",
               (unsigned long long)ops, m->nvalue - 1, (unsigned long long)params,
               (unsigned long long)st.active_parameters, (unsigned long long)st.matmul_parameters,
               flops, st.tokens, per6n, permodel);
}

int
cmd_print(int argc, char **argv)
{
    static const char usage[] = "print FILE [--stats [--json]]";
    const char *file = NULL;
    int stats = 0, json = 0;
    ir_module *m;
    for (int i = 1; i < argc; i++) {
        if (cli_is_help(argv[i]))
            return cli_help(usage);
        if (cli_flag(argv[i], "--stats"))
            stats = 1;
        else if (cli_flag(argv[i], "--json"))
            json = 1;
        else if ((argv[i][0] == '-' && argv[i][1] != '\0') || file)
            return cli_usage(usage);
        else
            file = argv[i];
    }
    if (file == NULL || (json && !stats))
        return cli_usage(usage);
    if (cli_load_module(file, &m) != 0)
        return CLI_FAIL;
    if (stats) {
        print_stats(m, json);
    } else {
        size_t len;
        char *text = ir_print(m, &len);
        fwrite(text, 1, len, stdout);
        di_free(text);
    }
    ir_module_free(m);
    return CLI_OK;
}

static void
report(void *ctx, const di_error *e)
{
    const char *file = ctx;
    fprintf(stderr, "%s: %s\n", file, e->msg);
}

int
cmd_verify(int argc, char **argv)
{
    const char *file;
    ir_module *m;
    int rc = one_file(argc, argv, "verify FILE", &file), n;
    if (rc != CLI_OK || file == NULL)
        return rc;
    if (cli_load_module(file, &m) != 0)
        return CLI_FAIL;
    n = ir_verify_all(m, report, (void *)file, 0);
    ir_module_free(m);
    if (n > 0) {
        fprintf(stderr, "%s: %d problem%s\n", file, n, n == 1 ? "" : "s");
        return CLI_FAIL;
    }
    printf("%s: ok\n", file);
    return CLI_OK;
}

int
cmd_hash(int argc, char **argv)
{
    const char *file;
    ir_module *m;
    di_hash h;
    char hex[65];
    int rc = one_file(argc, argv, "hash FILE", &file);
    if (rc != CLI_OK || file == NULL)
        return rc;
    if (cli_load_module(file, &m) != 0)
        return CLI_FAIL;
    ir_hash(m, &h);
    di_hash_hex(&h, hex);
    printf("%s\n", hex);
    ir_module_free(m);
    return CLI_OK;
}

int
cmd_convert(int argc, char **argv)
{
    static const char usage[] = "convert FILE -o OUT.{dir,pb} [--to text|pb]";
    const char *file = NULL, *outpath = NULL, *to = NULL, *v;
    cli_format fmt;
    ir_module *m;
    int rc;
    for (int i = 1; i < argc; i++) {
        int r;
        if (cli_is_help(argv[i]))
            return cli_help(usage);
        if ((r = cli_opt(argc, argv, &i, "-o", &v)) != 0) {
            if (r < 0)
                return CLI_USAGE;
            outpath = v;
        } else if ((r = cli_opt(argc, argv, &i, "--to", &v)) != 0) {
            if (r < 0)
                return CLI_USAGE;
            to = v;
        } else if ((argv[i][0] == '-' && argv[i][1] != '\0') || file) {
            return cli_usage(usage);
        } else {
            file = argv[i];
        }
    }
    if (file == NULL || outpath == NULL)
        return cli_usage(usage);
    if (to)
        fmt = strcmp(to, "text") == 0 ? CLI_FORMAT_TEXT
              : strcmp(to, "pb") == 0 ? CLI_FORMAT_PB
                                      : CLI_FORMAT_UNKNOWN;
    else
        fmt = cli_format_from_path(outpath);
    if (fmt != CLI_FORMAT_TEXT && fmt != CLI_FORMAT_PB) {
        cli_error("cannot tell the output format of '%s': name it .dir or .pb, or use --to",
                  outpath);
        return CLI_USAGE;
    }
    if (cli_load_module(file, &m) != 0)
        return CLI_FAIL;
    rc = cli_write_module(m, outpath, fmt);
    ir_module_free(m);
    return rc;
}
