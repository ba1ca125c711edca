/*
 * cmd_validate.c: `distir validate --runs CSV [--hw PRESET|FILE.json]
 * [--sample N] [--json]`: simulates every measured run of a runs file
 * (lib/validate: vTrain's CSV columns as they are) and prints predicted
 * against measured iteration time per row, then MAPE, median and max error,
 * mean signed error and Spearman's rank correlation per model size and over
 * all rows. Rows that cannot be expressed are listed with the reason.
 * docs/validation.md has the figures.
 *
 * `distir calibrate --runs CSV [--hw PRESET|FILE.json] [--allreduce-lut DIR]
 * [--sample N] [-o OUT.json]` fits the hardware's free parameter, host_overhead, to the
 * measured runs (least MAPE; a grid, then a golden-section search) and
 * writes the hardware with the fitted value.
 */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "request/request.h"
#include "sim/sim.h"
#include "validate/validate.h"

static const char usage[] =
    "validate --runs CSV [--hw PRESET|FILE.json] [--sample N] [--grad-accum-fusion on|off]\n"
    "         [--json]\n"
    "Simulates each measured run (GPT shape, batch, micro batch, tp/dp/pp, sequence; f16, Adam,\n"
    "f16 gradients, full activation recomputation, 1F1B, vocabulary 50,257, fused kernels as\n"
    "Megatron-LM's, with its gradient accumulation fusion unless --grad-accum-fusion off) and\n"
    "compares the predicted with the measured iteration time. --sample N takes N rows evenly\n"
    "spread over the file.";

#define MAX_ROWS 100000u

/* Simulates row r: its predicted iteration time, or the reason in r->error. */
static void
simulate_row(validate_row *r, const validate_setup *v, const hw_model *hw)
{
    models_gpt g;
    strategy s;
    ir_module *m = NULL, *dm = NULL;
    const ir_module *sm;
    sim_result *res = NULL;
    sim_options o;
    di_error err;
    if (validate_row_setup(r, v, &g, &s) != 0) {
        strategy_fini(&s);
        return;
    }
    if (hw == NULL || hw->ndevice < r->gpus) {
        snprintf(r->error, sizeof r->error, "%u GPUs, the hardware has %u", r->gpus,
                 hw ? hw->ndevice : 0);
        strategy_fini(&s);
        return;
    }
    di_error_clear(&err);
    sim_options_default(&o);
    o.want_timeline = 0;
    o.fuse = v->fuse;
    o.no_grad_accum_fusion = v->no_grad_accum_fusion;
    if (models_gpt_build(&g, &m, &err) != 0 || strategy_normalize(&s, &err) != 0 ||
        request_apply_strategy(m, &s, hw, &sm, &dm, &err) != 0 ||
        sim_run(sm, hw, &o, &res, NULL, NULL, &err) != 0)
        snprintf(r->error, sizeof r->error, "%s", err.msg);
    else
    {
        r->predicted_ms = res->step_time_s * 1e3;
        r->peak_gib = (double)res->peak_memory_bytes / 1073741824.0;
    }
    sim_result_free(res);
    ir_module_free(dm);
    ir_module_free(m);
    strategy_fini(&s);
}

/*
 * The hardware of a row: hw, or for a preset named without a node count
 * ("a100-vtrain") and a row with more GPUs, that preset with enough nodes
 * (kept in *scaled until a row needs another count).
 */
static const hw_model *
hardware_for(const char *name, const hw_model *hw, uint32_t gpus, hw_model **scaled)
{
    char spec[96];
    uint32_t per = hw->devices_per_node ? hw->devices_per_node : 1, nodes;
    di_error err;
    if (gpus <= hw->ndevice || strchr(name, ':') != NULL || strstr(name, ".json") != NULL)
        return hw;
    nodes = (gpus + per - 1) / per;
    if (*scaled != NULL && (*scaled)->ndevice == nodes * per)
        return *scaled;
    hw_free(*scaled);
    *scaled = NULL;
    snprintf(spec, sizeof spec, "%s:%u", name, nodes);
    return hw_load(spec, scaled, &err) == 0 ? *scaled : NULL;
}

static int
cmp_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The rows to simulate: all, or `sample` evenly spread (first and last included). */
static uint32_t *
select_rows(uint32_t n, uint32_t sample, uint32_t *nidx)
{
    uint32_t *idx = di_xmalloc((n ? n : 1) * sizeof *idx);
    *nidx = 0;
    if (sample == 0 || sample >= n) {
        for (uint32_t i = 0; i < n; i++)
            idx[(*nidx)++] = i;
    } else {
        for (uint32_t k = 0; k < sample; k++)
            idx[(*nidx)++] = sample == 1 ? 0 : (uint32_t)((uint64_t)k * (n - 1) / (sample - 1));
    }
    return idx;
}

static void
simulate_rows(validate_row *rows, const uint32_t *idx, uint32_t nidx, const validate_setup *v,
              const char *hwname, const hw_model *hw, hw_model **scaled)
{
    for (uint32_t k = 0; k < nidx; k++)
        simulate_row(&rows[idx[k]], v, hardware_for(hwname, hw, rows[idx[k]].gpus, scaled));
}

static void
json_stats(const validate_stats *st)
{
    printf("\"rows\":%u,\"mape\":%.4f,\"median\":%.4f,\"max\":%.4f,\"bias\":%.4f,", st->rows,
           st->mape, st->median, st->max, st->bias);
    if (isnan(st->spearman))
        printf("\"spearman\":null");
    else
        printf("\"spearman\":%.4f", st->spearman);
}

static void
text_stats(const char *label, const validate_stats *st)
{
    char rho[16] = "-";
    if (!isnan(st->spearman))
        snprintf(rho, sizeof rho, "%.3f", st->spearman);
    printf("%-10s %5u %8.2f%% %8.2f%% %8.2f%% %+8.2f%% %9s\n", label, st->rows, st->mape,
           st->median, st->max, st->bias, rho);
}

int
cmd_validate(int argc, char **argv)
{
    const char *runs = NULL, *hwname = "a100-vtrain", *v;
    int json = 0, gaf = 1;
    uint32_t sample = 0, n = 0, nidx = 0, ngroup = 0;
    validate_row *rows = NULL;
    validate_setup setup;
    hw_model *hw = NULL, *scaled = NULL;
    uint8_t *text = NULL;
    size_t len;
    di_error err;
    char(*labels)[16] = NULL;
    uint32_t *idx = NULL, *group = NULL;
    int rc = CLI_FAIL;

    for (int i = 1; i < argc; i++) {
        int r;
        if (cli_is_help(argv[i]))
            return cli_help(usage);
        if (cli_flag(argv[i], "--json")) {
            json = 1;
        } else if ((r = cli_opt(argc, argv, &i, "--runs", &v)) != 0) {
            if (r < 0)
                return CLI_USAGE;
            runs = v;
        } else if ((r = cli_opt(argc, argv, &i, "--hw", &v)) != 0) {
            if (r < 0)
                return CLI_USAGE;
            hwname = v;
        } else if ((r = cli_opt(argc, argv, &i, "--sample", &v)) != 0) {
            long k;
            if (r < 0)
                return CLI_USAGE;
            if (!cli_long_in(v, 1, (long)MAX_ROWS, &k)) {
                cli_error("--sample needs a positive number of rows, got '%s'", v);
                return CLI_USAGE;
            }
            sample = (uint32_t)k;
        } else if ((r = cli_two_valued(argc, argv, &i, "--grad-accum-fusion", "on", "off",
                                       &gaf)) != 0) {
            if (r < 0)
                return CLI_USAGE;
        } else {
            cli_error("unknown option '%s'", argv[i]);
            return cli_usage(usage);
        }
    }
    if (runs == NULL)
        return cli_usage(usage);
    validate_setup_default(&setup);
    setup.no_grad_accum_fusion = !gaf;
    if (hw_load(hwname, &hw, &err) != 0) {
        cli_error("%s", err.msg);
        return CLI_FAIL;
    }
    if (di_read_file(runs, (size_t)1 << 28, &text, &len, &err) != 0 ||
        validate_parse_csv((const char *)text, len, MAX_ROWS, &rows, &n, &err) != 0) {
        cli_error("%s: %s", runs, err.msg);
        goto out;
    }
    idx = select_rows(n, sample, &nidx);
    simulate_rows(rows, idx, nidx, &setup, hwname, hw, &scaled);
    /* Groups: model sizes, in order of first appearance. */
    labels = di_xcalloc(nidx ? nidx : 1, sizeof *labels);
    group = di_xmalloc((nidx ? nidx : 1) * sizeof *group);
    for (uint32_t k = 0; k < nidx; k++) {
        char l[16];
        uint32_t g;
        validate_size_label(&rows[idx[k]], &setup, l, sizeof l);
        for (g = 0; g < ngroup && strcmp(labels[g], l) != 0; g++)
            ;
        if (g == ngroup)
            memcpy(labels[ngroup++], l, sizeof l);
        group[k] = g;
    }
    /* Statistics per model size and over all rows. */
    uint32_t *sub = di_xmalloc((nidx ? nidx : 1) * sizeof *sub);
    validate_stats all, *gst = di_xmalloc((ngroup ? ngroup : 1) * sizeof *gst);
    for (uint32_t g = 0; g < ngroup; g++) {
        uint32_t m = 0;
        for (uint32_t k = 0; k < nidx; k++)
            if (group[k] == g)
                sub[m++] = idx[k];
        validate_stats_of(rows, sub, m, &gst[g]);
    }
    validate_stats_of(rows, idx, nidx, &all);
    if (json) {
        printf("{\"runs\":");
        {
            di_buf b;
            di_buf_init(&b);
            di_buf_json_str(&b, runs);
            fwrite(b.data, 1, b.len, stdout);
            di_buf_fini(&b);
        }
        printf(",\"hardware\":\"%s\",\"rows\":[", hwname);
        for (uint32_t k = 0; k < nidx; k++) {
            const validate_row *r = &rows[idx[k]];
            printf("%s{\"line\":%u,\"size\":\"%s\",\"gpus\":%u,\"global_batch\":%u,"
                   "\"micro_batch\":%u,\"hidden\":%u,\"heads\":%u,\"layers\":%u,\"seq\":%u,"
                   "\"tp\":%u,\"dp\":%u,\"pp\":%u,\"measured_ms\":%.17g,",
                   k ? "," : "", r->line, labels[group[k]], r->gpus, r->global_batch,
                   r->micro_batch, r->hidden, r->heads, r->layers, r->seq, r->tp, r->dp, r->pp,
                   r->measured_ms);
            if (r->predicted_ms >= 0)
                printf("\"predicted_ms\":%.17g,\"error\":%.6f,\"peak_memory_gib\":%.3f}",
                       r->predicted_ms, 100 * (r->predicted_ms - r->measured_ms) / r->measured_ms,
                       r->peak_gib);
            else {
                di_buf b;
                di_buf_init(&b);
                di_buf_json_str(&b, r->error);
                printf("\"predicted_ms\":null,\"skipped\":%.*s}", (int)b.len, b.data);
                di_buf_fini(&b);
            }
        }
        printf("],\"groups\":[");
        for (uint32_t g = 0; g < ngroup; g++) {
            printf("%s{\"size\":\"%s\",", g ? "," : "", labels[g]);
            json_stats(&gst[g]);
            printf("}");
        }
        printf("],\"all\":{");
        json_stats(&all);
        printf("}}\n");
    } else {
        uint32_t skipped = 0;
        printf("%5s %6s %5s %4s %4s %4s %4s %12s %12s %8s %9s\n", "line", "size", "gpus", "tp",
               "dp", "pp", "mb", "measured", "predicted", "error", "peak");
        for (uint32_t k = 0; k < nidx; k++) {
            const validate_row *r = &rows[idx[k]];
            if (r->predicted_ms < 0) {
                skipped++;
                continue;
            }
            printf("%5u %6s %5u %4u %4u %4u %4u %9.1f ms %9.1f ms %+7.1f%% %5.1f GiB\n", r->line,
                   labels[group[k]], r->gpus, r->tp, r->dp, r->pp, r->micro_batch, r->measured_ms,
                   r->predicted_ms, 100 * (r->predicted_ms - r->measured_ms) / r->measured_ms,
                   r->peak_gib);
        }
        printf("\n%-10s %5s %9s %9s %9s %9s %9s\n", "size", "rows", "MAPE", "median", "max", "bias",
               "spearman");
        for (uint32_t g = 0; g < ngroup; g++)
            text_stats(labels[g], &gst[g]);
        text_stats("all", &all);
        if (skipped) {
            printf("\nnot simulated (%u):\n", skipped);
            for (uint32_t k = 0; k < nidx; k++)
                if (rows[idx[k]].predicted_ms < 0)
                    printf("  line %u: %s\n", rows[idx[k]].line, rows[idx[k]].error);
        }
    }
    di_free(sub);
    di_free(gst);
    rc = CLI_OK;
out:
    di_free(text);
    di_free(rows);
    di_free(idx);
    di_free(labels);
    di_free(group);
    hw_free(hw);
    hw_free(scaled);
    return rc;
}

/* ---- calibrate ---- */

static const char calibrate_usage[] =
    "calibrate --runs CSV [--hw PRESET|FILE.json] [--allreduce-lut DIR] [--sample N]\n"
    "                [-o OUT.json]\n"
    "Fits the hardware's host_overhead (seconds the host spends issuing each kernel) to measured\n"
    "runs, as `distir validate` simulates them: the value of least mean absolute percentage error\n"
    "(a grid from 0 to 200 us, then a golden-section search). Writes the hardware with the\n"
    "fitted value to OUT.json (default: standard output). --sample N (default 240) fits on N rows\n"
    "evenly spread. --allreduce-lut DIR adds the measured all-reduce tables of DIR (vTrain's\n"
    "AR_GPU<n>_*.csv: n GPUs inside one node) to the hardware, for the fit and in OUT.json, and\n"
    "first fits the intra-node link's bandwidth and latency to them (the formula's least MAPE).\n"
    "Runs are simulated with fused kernels, as Megatron-LM's. Fit on runs you do not validate on.";

#define CAL_MAX 2e-4 /* seconds: the search range of host_overhead is [0, CAL_MAX] */
#define CAL_GRID 20
#define CAL_GOLDEN 16

typedef struct cal {
    validate_row *rows;
    const uint32_t *idx;
    uint32_t nidx;
    const validate_setup *setup;
    const char *hwname;
    hw_model *hw, *scaled;
    uint32_t evals;
} cal;

/*
 * Adds every AR_GPU<n>_*.csv of dir (vTrain's measured NCCL all-reduce
 * tables, one node) to hw as the intra-node all-reduce table of n devices,
 * in name order. Returns the number added, or -1 with a message.
 */
static int
load_lut_dir(hw_model *hw, const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char **names = NULL;
    uint32_t n = 0, cap = 0;
    int added = 0;
    di_error err;
    if (d == NULL) {
        cli_error("%s: cannot open the directory", dir);
        return -1;
    }
    while ((e = readdir(d)) != NULL) {
        unsigned g;
        int end = 0;
        size_t len = strlen(e->d_name);
        if (sscanf(e->d_name, "AR_GPU%u_%*[^.].csv%n", &g, &end) < 1 || end == 0 ||
            (size_t)end != len)
            continue;
        DI_GROW(&names, &cap, n + 1);
        names[n++] = di_xstrdup(e->d_name);
    }
    closedir(d);
    if (n > 1)
        qsort(names, n, sizeof *names, cmp_name);
    for (uint32_t i = 0; i < n && added >= 0; i++) {
        char path[4096];
        unsigned g = 0;
        sscanf(names[i], "AR_GPU%u_", &g);
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (g < 2 || hw_load_collective_csv(hw, IR_OP_ALLREDUCE, g, 0, path, &err) != 0) {
            cli_error("%s: %s", path, g < 2 ? "a table needs at least 2 GPUs" : err.msg);
            added = -1;
        } else {
            added++;
        }
    }
    for (uint32_t i = 0; i < n; i++)
        di_free(names[i]);
    di_free(names);
    if (added == 0)
        cli_error("%s: no AR_GPU<n>_*.csv table", dir);
    return added > 0 ? added : -1;
}

/* MAPE of the rows with host_overhead h (every row that is simulated at all counts). */
static double
cal_mape(cal *c, double h)
{
    validate_stats st;
    c->hw->device.host_overhead = h;
    for (uint32_t i = 0; i < c->hw->noverride; i++)
        c->hw->overrides[i].host_overhead = h;
    hw_free(c->scaled); /* a scaled preset is loaded again, then given h below */
    c->scaled = NULL;
    for (uint32_t k = 0; k < c->nidx; k++) {
        validate_row *r = &c->rows[c->idx[k]];
        const hw_model *rh = hardware_for(c->hwname, c->hw, r->gpus, &c->scaled);
        if (c->scaled != NULL)
            c->scaled->device.host_overhead = h;
        simulate_row(r, c->setup, rh);
    }
    validate_stats_of(c->rows, c->idx, c->nidx, &st);
    c->evals++;
    return st.rows ? st.mape : INFINITY;
}

int
cmd_calibrate(int argc, char **argv)
{
    const char *runs = NULL, *hwname = "a100-vtrain", *out = NULL, *lut = NULL, *v;
    uint32_t sample = 240, n = 0, nidx = 0;
    validate_row *rows = NULL;
    validate_setup setup;
    uint8_t *text = NULL;
    size_t len;
    di_error err;
    uint32_t *idx = NULL;
    cal c;
    int rc = CLI_FAIL;
    double best_h = 0, best = INFINITY, lo, hi, x1, x2, f1, f2;
    const double gr = 0.6180339887498949;
    char *json = NULL;

    for (int i = 1; i < argc; i++) {
        int r;
        if (cli_is_help(argv[i]))
            return cli_help(calibrate_usage);
        if ((r = cli_opt(argc, argv, &i, "--runs", &v)) != 0) {
            if (r < 0)
                return CLI_USAGE;
            runs = v;
        } else if ((r = cli_opt(argc, argv, &i, "--hw", &v)) != 0) {
            if (r < 0)
                return CLI_USAGE;
            hwname = v;
        } else if ((r = cli_opt(argc, argv, &i, "-o", &v)) != 0) {
            if (r < 0)
                return CLI_USAGE;
            out = v;
        } else if ((r = cli_opt(argc, argv, &i, "--allreduce-lut", &v)) != 0) {
            if (r < 0)
                return CLI_USAGE;
            lut = v;
        } else if ((r = cli_opt(argc, argv, &i, "--sample", &v)) != 0) {
            long k;
            if (r < 0)
                return CLI_USAGE;
            if (!cli_long_in(v, 1, (long)MAX_ROWS, &k)) {
                cli_error("--sample needs a positive number of rows, got '%s'", v);
                return CLI_USAGE;
            }
            sample = (uint32_t)k;
        } else {
            cli_error("unknown option '%s'", argv[i]);
            return cli_usage(calibrate_usage);
        }
    }
    if (runs == NULL)
        return cli_usage(calibrate_usage);
    memset(&c, 0, sizeof c);
    validate_setup_default(&setup);
    if (hw_load(hwname, &c.hw, &err) != 0) {
        cli_error("%s", err.msg);
        return CLI_FAIL;
    }
    if (lut != NULL) {
        int k = load_lut_dir(c.hw, lut);
        if (k < 0)
            goto done;
        fprintf(stderr, "%d all-reduce tables from %s\n", k, lut);
        {
            /* The intra-node link the tables imply, for groups and sizes they do not cover. */
            double e = 0;
            uint32_t np = sim_fit_intra_link(c.hw, &c.hw->intra_node, &e);
            if (np)
                fprintf(stderr,
                        "fitted intra_node bandwidth %.4g B/s, latency %.3g s: MAPE %.2f%% on %u "
                        "all-reduce points\n",
                        c.hw->intra_node.bandwidth, c.hw->intra_node.latency, e, np);
        }
    }
    if (di_read_file(runs, (size_t)1 << 28, &text, &len, &err) != 0 ||
        validate_parse_csv((const char *)text, len, MAX_ROWS, &rows, &n, &err) != 0) {
        cli_error("%s: %s", runs, err.msg);
        goto done;
    }
    idx = select_rows(n, sample, &nidx);
    c.rows = rows;
    c.idx = idx;
    c.nidx = nidx;
    c.setup = &setup;
    c.hwname = hwname;
    /* A grid first (the error need not be unimodal far from its minimum) ... */
    fprintf(stderr, "%14s %10s\n", "host_overhead", "MAPE");
    for (int k = 0; k <= CAL_GRID; k++) {
        double h = CAL_MAX * k / CAL_GRID, e = cal_mape(&c, h);
        fprintf(stderr, "%11.2f us %9.2f%%\n", h * 1e6, e);
        if (e < best) {
            best = e;
            best_h = h;
        }
    }
    if (!isfinite(best)) {
        cli_error("%s: no row could be simulated", runs);
        goto done;
    }
    /* ... then a golden-section search in the grid cells around its best point. */
    lo = best_h - CAL_MAX / CAL_GRID;
    hi = best_h + CAL_MAX / CAL_GRID;
    lo = lo < 0 ? 0 : lo;
    x1 = hi - gr * (hi - lo);
    x2 = lo + gr * (hi - lo);
    f1 = cal_mape(&c, x1);
    f2 = cal_mape(&c, x2);
    for (int k = 0; k < CAL_GOLDEN; k++) {
        if (f1 <= f2) {
            hi = x2;
            x2 = x1;
            f2 = f1;
            x1 = hi - gr * (hi - lo);
            f1 = cal_mape(&c, x1);
        } else {
            lo = x1;
            x1 = x2;
            f1 = f2;
            x2 = lo + gr * (hi - lo);
            f2 = cal_mape(&c, x2);
        }
    }
    if (f1 < best) {
        best = f1;
        best_h = x1;
    }
    if (f2 < best) {
        best = f2;
        best_h = x2;
    }
    fprintf(stderr,
            "fitted host_overhead %.4g s (%.2f us): MAPE %.2f%% on %u rows of %s, %u "
            "evaluations\n",
            best_h, best_h * 1e6, best, nidx, runs, c.evals);
    c.hw->device.host_overhead = best_h;
    for (uint32_t i = 0; i < c.hw->noverride; i++)
        c.hw->overrides[i].host_overhead = best_h;
    json = hw_to_json(c.hw);
    if (out == NULL || strcmp(out, "-") == 0) {
        fputs(json, stdout);
    } else if (di_write_file(out, json, strlen(json), &err) != 0) {
        cli_error("%s: %s", out, err.msg);
        goto done;
    }
    rc = CLI_OK;
done:
    di_free(json);
    di_free(text);
    di_free(rows);
    di_free(idx);
    hw_free(c.hw);
    hw_free(c.scaled);
    return rc;
}
