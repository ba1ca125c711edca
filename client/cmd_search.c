/*
 * cmd_search.c: `distir search FILE [--hw PRESET|FILE] [--devices N]
 * [--objective time|throughput] [--top K] [--json] [--shard i/n]
 * [--headroom F] [--tp 1,2,4 ...] [--fix pp=2 ...]` and
 * `distir search --merge A.json B.json ...`.
 *
 * The search runs in-process, one candidate after another (lib/search),
 * with a progress line on standard error when it is a terminal;
 * the daemon's streamed, threaded search is not there yet (no --server).
 * --shard i/n evaluates every n-th candidate from i, so that n processes
 * cover the space once; --merge combines their --json outputs into the
 * unsharded answer.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "search/search.h"
#include "sim/hw.h"

static const char usage[] =
    "search FILE [--hw PRESET|FILE.json] [--devices N] [--objective time|throughput]\n"
    "              [--top K] [--json] [--shard i/n] [--headroom F]\n"
    "              [--dp L] [--tp L] [--pp L] [--microbatches L] [--virtual-stages L]\n"
    "              [--schedule gpipe,1f1b,interleaved[:V]] [--recompute none,selective,full]\n"
    "              [--zero L] [--sequence-parallel 0,1] [--overlap-grad-reduce 0,1]\n"
    "              [--fix NAME=VALUE ...]\n"
    "       distir search --merge A.json B.json ... [--json]\n"
    "\n"
    "Enumerates the strategies that use N devices (default: every device of the\n"
    "hardware), simulates each with the real transforms and simulator, and prints\n"
    "the top K by the objective and the Pareto set over (step time, peak memory).\n"
    "L is a comma-separated list of allowed values; --fix pp=8 allows one value.\n"
    "The search runs in this process (no --server yet).";

/* The list-valued constraints: "--tp 1,2" is search_config_set(cfg, "tp", "1,2"). */
static const char *const list_options[] = {
    "dp",        "tp",        "pp",       "microbatches",      "virtual-stages",      "schedule",
    "recompute", "zero",      "headroom", "sequence-parallel", "overlap-grad-reduce", "devices",
    "top",       "objective", "shard",
};

static int
print_result(const search_result *r, int json)
{
    char *s = json ? search_result_to_json(r) : search_result_to_table(r);
    fputs(s, stdout);
    if (json)
        fputc('\n', stdout);
    di_free(s);
    return CLI_OK;
}

static int
merge(int nfile, char **files, int json)
{
    search_result total;
    di_error err;
    int rc = CLI_OK;
    memset(&total, 0, sizeof total);
    for (int i = 0; i < nfile && rc == CLI_OK; i++) {
        uint8_t *data = NULL;
        size_t len = 0;
        search_result part;
        if (di_read_file(files[i], 1u << 30, &data, &len, &err) != 0) {
            cli_error("cannot read '%s': %s", files[i], err.msg);
            return CLI_FAIL;
        }
        if (search_result_from_json((const char *)data, len, &part, &err) != 0) {
            cli_error("'%s' is not a search result: %s", files[i], err.msg);
            rc = CLI_FAIL;
        } else if (i == 0) {
            total = part;
        } else {
            if (search_result_merge(&total, &part, &err) != 0) {
                cli_error("cannot merge '%s': %s", files[i], err.msg);
                rc = CLI_FAIL;
            }
            search_result_fini(&part);
        }
        di_free(data);
    }
    if (rc == CLI_OK)
        print_result(&total, json);
    search_result_fini(&total);
    return rc;
}

static double
seconds_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* One progress line on a terminal's standard error, redrawn in place. */
static void
progress(const search_result *r, uint64_t total)
{
    fprintf(stderr, "\rsearch: %llu/%llu candidates, %llu fit", (unsigned long long)r->enumerated,
            (unsigned long long)total, (unsigned long long)r->count[SEARCH_OK]);
    if (r->ntop > 0)
        fprintf(stderr, ", best %.3f ms", r->top[0].step_time_s * 1e3);
    fflush(stderr);
}

static int
search(const char *file, const char *hwname, const search_config *cfg, int json)
{
    hw_model *hw = NULL;
    ir_module *m = NULL;
    search_space sp;
    search_evaluator ev;
    search_result r;
    const search_candidate *c;
    uint64_t cursor = 0;
    double t0, shown;
    int tty = isatty(STDERR_FILENO);
    di_error err;

    if (hw_load(hwname, &hw, &err) != 0) {
        cli_error("%s", err.msg);
        return CLI_FAIL;
    }
    if (cli_load_module(file, &m) != 0) {
        hw_free(hw);
        return CLI_FAIL;
    }
    if (ir_verify(m, &err) != 0) {
        cli_error("'%s' is not a valid module: %s", file, err.msg);
        goto fail;
    }
    if (search_space_init(&sp, m, hw, cfg, &err) != 0) {
        cli_error("cannot search '%s': %s", file, err.msg);
        goto fail;
    }
    t0 = shown = seconds_now();
    search_evaluator_init(&ev, &sp);
    search_result_init(&r, &sp);
    while ((c = search_space_next(&sp, &cursor)) != NULL) {
        search_point p;
        search_eval(&ev, c, &p);
        search_result_add(&r, &p);
        if (tty && seconds_now() - shown >= 0.25) {
            progress(&r, search_space_shard_size(&sp));
            shown = seconds_now();
        }
    }
    search_evaluator_fini(&ev);
    if (tty && shown > t0)
        fputs("\r\033[K", stderr);
    if (!json)
        printf("space: %llu candidates on %u devices of %s (batch %lld, %u layers)\n",
               (unsigned long long)sp.ncandidate, sp.devices, hw->name, (long long)sp.batch,
               sp.layers);
    if (!json && cfg->shard_count > 1)
        printf("shard %u/%u: %llu candidates\n", cfg->shard_index, cfg->shard_count,
               (unsigned long long)r.enumerated);
    print_result(&r, json);
    if (!json)
        printf("searched in %.2f s\n", seconds_now() - t0);
    search_result_fini(&r);
    search_space_fini(&sp);
    ir_module_free(m);
    hw_free(hw);
    return CLI_OK;
fail:
    ir_module_free(m);
    hw_free(hw);
    return CLI_FAIL;
}

int
cmd_search(int argc, char **argv)
{
    const char *file = NULL, *hwname = "a100-dgx", *v;
    search_config cfg;
    di_error err;
    int json = 0, nmerge = 0, merging = 0;
    char **merge_files = NULL;
    int rc;

    search_config_init(&cfg);
    merge_files = calloc((size_t)argc + 1, sizeof *merge_files);
    if (merge_files == NULL)
        abort();
    for (int i = 1; i < argc; i++) {
        int r = 0, matched = 0;
        if (cli_is_help(argv[i])) {
            free(merge_files);
            return cli_help(usage);
        }
        if (cli_flag(argv[i], "--json")) {
            json = 1;
            continue;
        }
        if (cli_flag(argv[i], "--merge")) {
            merging = 1;
            continue;
        }
        if ((r = cli_opt(argc, argv, &i, "--hw", &v)) != 0) {
            if (r < 0)
                goto usage;
            hwname = v;
            continue;
        }
        if ((r = cli_opt(argc, argv, &i, "--fix", &v)) != 0) {
            if (r < 0)
                goto usage;
            if (search_config_fix(&cfg, v, &err) != 0) {
                cli_error("bad --fix '%s': %s", v, err.msg);
                goto usage;
            }
            continue;
        }
        for (size_t k = 0; k < sizeof list_options / sizeof list_options[0] && !matched; k++) {
            char flag[64];
            snprintf(flag, sizeof flag, "--%s", list_options[k]);
            if ((r = cli_opt(argc, argv, &i, flag, &v)) == 0)
                continue;
            matched = 1;
            if (r < 0)
                goto usage;
            if (search_config_set(&cfg, list_options[k], v, &err) != 0) {
                cli_error("bad %s: %s", flag, err.msg);
                goto usage;
            }
        }
        if (matched)
            continue;
        if (argv[i][0] == '-' && argv[i][1] != '\0') {
            cli_error("unknown option '%s'", argv[i]);
            goto usage;
        }
        if (merging)
            merge_files[nmerge++] = argv[i];
        else if (file == NULL)
            file = argv[i];
        else
            goto usage;
    }
    if (merging) {
        if (file != NULL || nmerge == 0)
            goto usage;
        rc = merge(nmerge, merge_files, json);
    } else if (file == NULL) {
        goto usage;
    } else {
        rc = search(file, hwname, &cfg, json);
    }
    free(merge_files);
    return rc;
usage:
    free(merge_files);
    return cli_usage(usage);
}
