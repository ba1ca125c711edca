/*
 * cmd_ci.c: distir baseline, compare and history, the CI regression
 * queries (docs/ci.md). Each works against a daemon (--server ADDR: the
 * result is simulated there and referenced by its cache key) or without one
 * (--db PATH: simulated in-process, the baseline table of that database file,
 * the daemon's format, read and written directly). The comparison itself is
 * the library's (lib/sim/compare.c), so both give the same verdicts.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../server/baseline.h"
#include "cli.h"
#include "distir.pb-c.h"
#include "ir/pb.h"
#include "request/request.h"
#include "rpc.h"
#include "sim/compare.h"
#include "sim/hw.h"
#include "sim/sim.h"
#include "strategy/strategy.h"
#include "strategy_flags.h"

static const char usage_baseline[] =
    "baseline set NAME FILE [--hw PRESET|FILE] [strategy flags] [--label TEXT]\n"
    "                           [--kernels fused|eager] [--math tf32|ieee]\n"
    "                           [--grad-accum-fusion on|off]\n"
    "                           [--project NAME] (--server ADDR | --db PATH)\n"
    CLI_STRATEGY_FLAGS_HELP;
static const char usage_compare[] =
    "compare FILE (--baseline NAME | --against FILE) [--hw PRESET|FILE]\n"
    "                      [strategy flags] [--kernels fused|eager] [--math tf32|ieee]\n"
    "                      [--grad-accum-fusion on|off]\n"
    "                      [--project NAME] [--max-time-regression 2%|50ms]\n"
    "                      [--max-memory-regression 5%|1GiB] [--junit OUT.xml] [--json]\n"
    "                      (--server ADDR | --db PATH)\n"
    CLI_STRATEGY_FLAGS_HELP;
static const char usage_history[] =
    "history NAME [--project NAME] [--metric step_time|peak_memory] [--svg OUT.svg]\n"
    "                      [--json] (--server ADDR | --db PATH)";

/* What the three commands share. */
typedef struct ci_args {
    const char *hwname, *server, *db, *project;
    int timeout_ms;
    int fuse, tf32, no_gaf; /* --kernels fused, --math tf32, --grad-accum-fusion off */
    strategy strat;
} ci_args;

static void
ci_args_init(ci_args *a)
{
    memset(a, 0, sizeof *a);
    a->hwname = "a100-dgx";
    a->project = "default";
    a->timeout_ms = 120000;
    strategy_init(&a->strat);
}

/* One shared option at argv[*i]: 1 taken, 0 not ours, -1 usage error. */
static int
ci_opt(int argc, char **argv, int *i, ci_args *a)
{
    const char *v;
    int r, kernels;
    if ((r = cli_opt(argc, argv, i, "--hw", &v)) != 0)
        return r < 0 ? -1 : (a->hwname = v, 1);
    if ((r = cli_opt(argc, argv, i, "--server", &v)) != 0)
        return r < 0 ? -1 : (a->server = v, 1);
    if ((r = cli_opt(argc, argv, i, "--db", &v)) != 0)
        return r < 0 ? -1 : (a->db = v, 1);
    if ((r = cli_opt(argc, argv, i, "--project", &v)) != 0)
        return r < 0 ? -1 : (a->project = v, 1);
    if ((r = cli_opt(argc, argv, i, "--timeout-ms", &v)) != 0)
        return r < 0 ? -1 : (a->timeout_ms = atoi(v), 1);
    if ((r = cli_sim_opt(argc, argv, i, &a->tf32, &a->fuse, &a->no_gaf, &kernels)) != 0)
        return r;
    return cli_strategy_flag(argc, argv, i, &a->strat);
}

/* Exactly one of --server and --db. */
static int
ci_where(const ci_args *a, const char *usage)
{
    di_error err;
    if ((a->server == NULL) == (a->db == NULL)) {
        cli_error("give --server ADDR (a daemon) or --db PATH (a database file), one of them");
        return cli_usage(usage);
    }
    di_error_clear(&err);
    if (baseline_check_name("--project", a->project, &err) != 0) {
        cli_error("%s", err.msg);
        return CLI_USAGE;
    }
    return CLI_OK;
}

/* A simulated result: packed, its figures, and its cache key (hex). */
typedef struct ci_result {
    uint8_t *data;
    size_t len;
    sim_result *r;
    char key[65];
} ci_result;

static void
ci_result_fini(ci_result *res)
{
    di_free(res->data);
    sim_result_free(res->r);
    memset(res, 0, sizeof *res);
}

/* Simulates file under a's hardware and strategy, on the daemon or in-process. */
static int
ci_simulate(const ci_args *a, const char *file, ci_result *out)
{
    hw_model *hw = NULL;
    ir_module *m = NULL;
    di_error err;
    sim_options o;
    int rc = CLI_FAIL;
    memset(out, 0, sizeof *out);
    sim_options_default(&o);
    o.fuse = a->fuse;
    o.no_grad_accum_fusion = a->no_gaf;
    o.tf32 = a->tf32;
    di_error_clear(&err);
    if (hw_load(a->hwname, &hw, &err) != 0) {
        cli_error("%s", err.msg);
        return CLI_FAIL;
    }
    if (cli_load_module(file, &m) != 0)
        goto out;
    if (ir_verify(m, &err) != 0) {
        cli_error("'%s' is not a valid module: %s", file, err.msg);
        goto out;
    }
    if (a->server != NULL) {
        Distir__V1__SimulateReply *reply = NULL;
        if ((rc = cli_simulate_remote(a->server, m, NULL, a->hwname, hw, &a->strat, &o, a->timeout_ms,
                                      &reply)) != CLI_OK)
            goto out;
        rc = CLI_FAIL;
        out->len = distir__v1__sim_result__get_packed_size(reply->result);
        out->data = di_xmalloc(out->len ? out->len : 1);
        distir__v1__sim_result__pack(reply->result, out->data);
        snprintf(out->key, sizeof out->key, "%s", reply->cache_key);
        if (sim_result_from_proto(reply->result, &out->r, &err) == 0)
            rc = CLI_OK;
        else
            cli_error("bad reply from '%s': %s", a->server, err.msg);
        protobuf_c_message_free_unpacked(&reply->base, NULL);
    } else {
        const ir_module *sm;
        ir_module *dm = NULL;
        di_hash mh, hh, key;
        request_simopts opts;
        if (request_apply_strategy(m, &a->strat, hw, &sm, &dm, &err) != 0) {
            cli_error("cannot apply the strategy: %s", err.msg);
            goto out;
        }
        if (sim_run(sm, hw, &o, &out->r, NULL, NULL, &err) != 0) {
            cli_error("cannot simulate '%s': %s", file, err.msg);
            ir_module_free(dm);
            goto out;
        }
        ir_module_free(dm);
        sim_model_stats st;
        sim_model_stats_of(m, &st);
        sim_result_set_model(out->r, &st);
        hw_hash(hw, &hh);
        {
            char text[1024];
            strategy_format(&a->strat, text, sizeof text);
            sim_result_set_inputs(out->r, text, &hh);
        }
        if (sim_result_pack(out->r, &out->data, &out->len) != 0) {
            cli_error("cannot encode the result");
            goto out;
        }
        /* Content-derived, as a daemon's; it identifies the result in this database. */
        request_simopts_of(&o, &opts);
        ir_hash(m, &mh);
        request_cache_key(&mh, &hh, &a->strat, &opts, SIM_VERSION, &key);
        di_hash_hex(&key, out->key);
        rc = CLI_OK;
    }
out:
    if (rc != CLI_OK)
        ci_result_fini(out);
    ir_module_free(m);
    hw_free(hw);
    return rc;
}

static cache *
ci_open_db(const char *path)
{
    cache *c = NULL;
    di_error err;
    di_error_clear(&err);
    if (cache_open(path, 0, &c, &err) != 0) {
        cli_error("%s", err.msg);
        return NULL;
    }
    return c;
}

/* ---- baseline set ---- */

int
cmd_baseline(int argc, char **argv)
{
    ci_args a;
    const char *name = NULL, *file = NULL, *label = "", *v;
    ci_result res;
    di_error err;
    int rc = CLI_USAGE;
    ci_args_init(&a);
    memset(&res, 0, sizeof res);
    if (argc >= 2 && cli_is_help(argv[1])) {
        rc = cli_help(usage_baseline);
        goto out;
    }
    if (argc < 2 || strcmp(argv[1], "set") != 0) {
        rc = cli_usage(usage_baseline);
        goto out;
    }
    for (int i = 2; i < argc; i++) {
        int r;
        if (cli_is_help(argv[i])) {
            rc = cli_help(usage_baseline);
            goto out;
        } else if ((r = cli_opt(argc, argv, &i, "--label", &v)) != 0) {
            if (r < 0)
                goto out;
            label = v;
        } else if ((r = ci_opt(argc, argv, &i, &a)) != 0) {
            if (r < 0)
                goto out;
        } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
            cli_error("unknown option '%s'", argv[i]);
            rc = cli_usage(usage_baseline);
            goto out;
        } else if (name == NULL) {
            name = argv[i];
        } else if (file == NULL) {
            file = argv[i];
        } else {
            rc = cli_usage(usage_baseline);
            goto out;
        }
    }
    if (file == NULL) {
        rc = cli_usage(usage_baseline);
        goto out;
    }
    di_error_clear(&err);
    if (baseline_check_name("baseline name", name, &err) != 0 ||
        (label[0] != '\0' && baseline_check_name("--label", label, &err) != 0)) {
        cli_error("%s", err.msg);
        goto out;
    }
    if ((rc = ci_where(&a, usage_baseline)) != CLI_OK || cli_strategy_finish(&a.strat) != 0) {
        rc = CLI_USAGE;
        goto out;
    }
    if ((rc = ci_simulate(&a, file, &res)) != CLI_OK)
        goto out;
    rc = CLI_FAIL;
    size_t history = 0;
    if (a.server != NULL) {
        Distir__V1__SetBaselineRequest req = DISTIR__V1__SET_BASELINE_REQUEST__INIT;
        ProtobufCMessage *m;
        req.project = (char *)a.project;
        req.name = (char *)name;
        req.cache_key = res.key;
        req.label = (char *)label;
        if (rpc_call(a.server, "/distir.v1.CostModel/SetBaseline", &req.base,
                     &distir__v1__baseline_reply__descriptor, a.timeout_ms, &m, &err) != 0) {
            cli_error("set baseline on '%s' failed: %s", a.server, err.msg);
            goto out;
        }
        history = ((Distir__V1__BaselineReply *)m)->history_length;
        protobuf_c_message_free_unpacked(m, NULL);
    } else {
        cache *c = ci_open_db(a.db);
        di_hash key;
        if (c == NULL)
            goto out;
        di_hash_from_hex(res.key, &key);
        if (baseline_add(c, "", a.project, name, label, &key, res.data, res.len,
                         res.r->step_time_s, res.r->peak_memory_bytes, NULL, &history,
                         &err) != 0) {
            cli_error("%s", err.msg);
            cache_close(c);
            goto out;
        }
        cache_close(c);
    }
    char t[32], mem[32];
    sim_format_time(t, sizeof t, res.r->step_time_s);
    sim_format_bytes(mem, sizeof mem, res.r->peak_memory_bytes);
    printf("baseline '%s' of project '%s' set%s%s: step time %s, peak memory %s (key %.16s..., "
           "%zu in its history)\n",
           name, a.project, label[0] ? " to " : "", label, t, mem, res.key, history);
    rc = CLI_OK;
out:
    ci_result_fini(&res);
    strategy_fini(&a.strat);
    return rc;
}

/* ---- compare ---- */

static void
xml_text(FILE *f, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '<':
            fputs("&lt;", f);
            break;
        case '>':
            fputs("&gt;", f);
            break;
        case '&':
            fputs("&amp;", f);
            break;
        case '"':
            fputs("&quot;", f);
            break;
        default:
            if ((unsigned char)*s >= 0x20 || *s == '\n' || *s == '\t')
                fputc(*s, f);
        }
    }
}

/* "step time grew by +1.2 ms (+3.10%), more than the 2.00% (0.8 ms) allowed" */
static void
verdict_line(const sim_compare_metric *m, int mem, di_buf *b)
{
    char d[64], al[64];
    if (mem) {
        snprintf(d, sizeof d, "%+.0f B", m->delta);
        snprintf(al, sizeof al, "%.0f B", m->allowed);
    } else {
        snprintf(d, sizeof d, "%+.9g s", m->delta);
        snprintf(al, sizeof al, "%.9g s", m->allowed);
    }
    di_buf_printf(b, "%s %s by %s (%+.3f%%), %s the %s allowed",
                  mem ? "peak memory" : "step time", m->delta >= 0 ? "grew" : "shrank", d,
                  m->rel * 100, m->regressed ? "more than" : "within", al);
}

static int
write_junit(const char *path, const sim_compare *cmp, const char *what)
{
    FILE *f = fopen(path, "w");
    int failures = 0;
    if (f == NULL) {
        cli_error("cannot write '%s'", path);
        return CLI_FAIL;
    }
    for (int i = 0; i < SIM_CMP_NMETRIC; i++)
        failures += cmp->m[i].regressed;
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    fprintf(f, "<testsuites><testsuite name=\"distir compare\" tests=\"%d\" failures=\"%d\">\n",
            SIM_CMP_NMETRIC, failures);
    for (int i = 0; i < SIM_CMP_NMETRIC; i++) {
        di_buf b;
        di_buf_init(&b);
        verdict_line(&cmp->m[i], i == SIM_CMP_MEMORY, &b);
        di_buf_put(&b, "", 1);
        fprintf(f, "  <testcase classname=\"distir.");
        xml_text(f, what);
        fprintf(f, "\" name=\"%s\">", cmp->m[i].name);
        if (cmp->m[i].regressed) {
            fprintf(f, "<failure message=\"");
            xml_text(f, b.data);
            fprintf(f, "\" type=\"regression\">");
            xml_text(f, b.data);
            fprintf(f, "</failure>");
        } else {
            fprintf(f, "<system-out>");
            xml_text(f, b.data);
            fprintf(f, "</system-out>");
        }
        fprintf(f, "</testcase>\n");
        di_buf_fini(&b);
    }
    if (cmp->ndiff > 0) { /* where CI pages show it, beside the verdicts */
        di_buf b;
        di_buf_init(&b);
        sim_compare_settings_text(cmp, &b);
        di_buf_put(&b, "", 1);
        fprintf(f, "  <system-err>warning: ");
        xml_text(f, b.data);
        fprintf(f, "</system-err>\n");
        di_buf_fini(&b);
    }
    fprintf(f, "</testsuite></testsuites>\n");
    if (fclose(f) != 0) {
        cli_error("cannot write '%s'", path);
        return CLI_FAIL;
    }
    return CLI_OK;
}

/* A baseline's result (server: by History/Compare; db: from the table). */
static int
db_baseline(const ci_args *a, const char *name, sim_result **out, baseline_entry *e)
{
    cache *c = ci_open_db(a->db);
    di_error err;
    int rc;
    memset(e, 0, sizeof *e); /* e->result stays NULL when there is no baseline */
    if (c == NULL)
        return CLI_FAIL;
    di_error_clear(&err);
    rc = baseline_latest(c, "", a->project, name, e, &err);
    cache_close(c);
    if (rc == 0 && sim_result_unpack(e->result, e->result_len, out, &err) != 0)
        rc = DI_EINTERNAL;
    di_free(e->result);
    e->result = NULL;
    if (rc != 0) {
        cli_error("%s", err.msg);
        return CLI_FAIL;
    }
    return CLI_OK;
}

/* --max-time-regression / --max-memory-regression into lim; 0 or -1 after a message. */
static int
parse_limit(const char *v, int mem, sim_compare_limits *lim)
{
    double rel, abs_value;
    di_error err;
    di_error_clear(&err);
    if (sim_compare_parse_limit(v, mem, &rel, &abs_value, &err) != 0) {
        cli_error("%s %s", mem ? "--max-memory-regression" : "--max-time-regression", err.msg);
        return -1;
    }
    if (mem) {
        lim->memory_rel = rel;
        lim->memory_abs = (uint64_t)abs_value;
    } else {
        lim->time_rel = rel;
        lim->time_abs_s = abs_value;
    }
    return 0;
}

int
cmd_compare(int argc, char **argv)
{
    ci_args a;
    const char *file = NULL, *base_name = NULL, *against = NULL, *junit = NULL, *v;
    int json = 0, rc = CLI_USAGE;
    sim_compare_limits lim;
    ci_result cand, basefile;
    sim_result *base = NULL;
    di_error err;
    ci_args_init(&a);
    memset(&lim, 0, sizeof lim);
    memset(&cand, 0, sizeof cand);
    memset(&basefile, 0, sizeof basefile);
    for (int i = 1; i < argc; i++) {
        int r;
        if (cli_is_help(argv[i])) {
            rc = cli_help(usage_compare);
            goto out;
        } else if (cli_flag(argv[i], "--json")) {
            json = 1;
        } else if ((r = cli_opt(argc, argv, &i, "--baseline", &v)) != 0) {
            if (r < 0)
                goto out;
            base_name = v;
        } else if ((r = cli_opt(argc, argv, &i, "--against", &v)) != 0) {
            if (r < 0)
                goto out;
            against = v;
        } else if ((r = cli_opt(argc, argv, &i, "--junit", &v)) != 0) {
            if (r < 0)
                goto out;
            junit = v;
        } else if ((r = cli_opt(argc, argv, &i, "--max-time-regression", &v)) != 0) {
            if (r < 0 || parse_limit(v, 0, &lim) != 0)
                goto out;
        } else if ((r = cli_opt(argc, argv, &i, "--max-memory-regression", &v)) != 0) {
            if (r < 0 || parse_limit(v, 1, &lim) != 0)
                goto out;
        } else if ((r = ci_opt(argc, argv, &i, &a)) != 0) {
            if (r < 0)
                goto out;
        } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
            cli_error("unknown option '%s'", argv[i]);
            rc = cli_usage(usage_compare);
            goto out;
        } else if (file == NULL) {
            file = argv[i];
        } else {
            rc = cli_usage(usage_compare);
            goto out;
        }
    }
    if (file == NULL || (base_name == NULL) == (against == NULL)) {
        if (file != NULL)
            cli_error("give --baseline NAME or --against FILE, one of them");
        rc = cli_usage(usage_compare);
        goto out;
    }
    if ((rc = ci_where(&a, usage_compare)) != CLI_OK || cli_strategy_finish(&a.strat) != 0) {
        rc = CLI_USAGE;
        goto out;
    }
    di_error_clear(&err);
    if (base_name != NULL && baseline_check_name("--baseline", base_name, &err) != 0) {
        cli_error("%s", err.msg);
        goto out;
    }
    if (against != NULL && (rc = ci_simulate(&a, against, &basefile)) != CLI_OK)
        goto out;
    if ((rc = ci_simulate(&a, file, &cand)) != CLI_OK)
        goto out;
    rc = CLI_FAIL;
    if (a.server != NULL) {
        /* The daemon compares its stored results; the verdict is recomputed here from the
         * results it returns, with the same library, for the JUnit file. */
        Distir__V1__CompareRequest req = DISTIR__V1__COMPARE_REQUEST__INIT;
        Distir__V1__CompareLimits pl = DISTIR__V1__COMPARE_LIMITS__INIT;
        ProtobufCMessage *m;
        pl.time_rel = lim.time_rel;
        pl.time_abs_s = lim.time_abs_s;
        pl.memory_rel = lim.memory_rel;
        pl.memory_abs_bytes = lim.memory_abs;
        req.project = (char *)a.project;
        req.baseline = (char *)(base_name ? base_name : "");
        req.base_cache_key = against ? basefile.key : (char *)"";
        req.cache_key = cand.key;
        req.limits = &pl;
        if (rpc_call(a.server, "/distir.v1.CostModel/Compare", &req.base,
                     &distir__v1__compare_reply__descriptor, a.timeout_ms, &m, &err) != 0) {
            cli_error("compare on '%s' failed: %s", a.server, err.msg);
            goto out;
        }
        Distir__V1__CompareReply *cr = (Distir__V1__CompareReply *)m;
        int ok = cr->baseline_result != NULL &&
                 sim_result_from_proto(cr->baseline_result, &base, &err) == 0;
        protobuf_c_message_free_unpacked(m, NULL);
        if (!ok) {
            cli_error("bad reply from '%s': no baseline result", a.server);
            goto out;
        }
    } else if (against != NULL) {
        base = basefile.r;
        basefile.r = NULL;
    } else {
        baseline_entry e;
        if (db_baseline(&a, base_name, &base, &e) != CLI_OK)
            goto out;
    }
    {
        sim_compare cmp;
        di_buf b;
        sim_compare_results(base, cand.r, &lim, &cmp);
        di_buf_init(&b);
        if (json) {
            sim_compare_json(&cmp, &b);
            di_buf_put(&b, "\n", 1);
        } else {
            di_buf_printf(&b, "compared with %s '%s' (project '%s')\n",
                          base_name ? "baseline" : "module", base_name ? base_name : against,
                          a.project);
            sim_compare_text(&cmp, &b);
        }
        fwrite(b.data, 1, b.len, stdout);
        fflush(stdout); /* before the verdicts on stderr, in a log that merges both */
        di_buf_fini(&b);
        if (json && cmp.ndiff > 0) { /* the text form has it on stdout */
            di_buf_init(&b);
            sim_compare_settings_text(&cmp, &b);
            di_buf_put(&b, "", 1);
            cli_error("warning: %s", b.data);
            di_buf_fini(&b);
        }
        rc = junit ? write_junit(junit, &cmp, base_name ? base_name : "against") : CLI_OK;
        for (int i = 0; i < SIM_CMP_NMETRIC && rc == CLI_OK; i++)
            if (cmp.m[i].regressed) {
                di_buf_init(&b);
                verdict_line(&cmp.m[i], i == SIM_CMP_MEMORY, &b);
                di_buf_put(&b, "", 1);
                cli_error("regression: %s", b.data);
                di_buf_fini(&b);
            }
        if (rc == CLI_OK && cmp.regressed)
            rc = CLI_FAIL;
    }
out:
    sim_result_free(base);
    ci_result_fini(&cand);
    ci_result_fini(&basefile);
    strategy_fini(&a.strat);
    return rc;
}

/* ---- history ---- */

static void
svg_text(FILE *f, double x, double y, const char *anchor, const char *extra, const char *s)
{
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\"%s>", x, y, anchor, extra);
    xml_text(f, s);
    fputs("</text>\n", f);
}

/* A line chart of the metric over the history; the points where the value changed are marked. */
static int
write_svg(const char *path, const baseline_entry *e, size_t n, int mem, const char *name)
{
    const double W = 720, H = 360, L = 90, R = 20, T = 40, B = 80;
    double lo = INFINITY, hi = -INFINITY;
    FILE *f = fopen(path, "w");
    char buf[160];
    if (f == NULL) {
        cli_error("cannot write '%s'", path);
        return CLI_FAIL;
    }
    for (size_t i = 0; i < n; i++) {
        double v = mem ? (double)e[i].peak_memory_bytes : e[i].step_time_s;
        lo = fmin(lo, v);
        hi = fmax(hi, v);
    }
    double pad = hi > lo ? (hi - lo) * 0.1 : (hi != 0 ? fabs(hi) * 0.1 : 1);
    lo -= pad;
    hi += pad;
    double scale = mem ? 1.0 / 1048576.0 : 1e3; /* MiB or ms on the axis */
    const char *unit = mem ? "peak memory (MiB)" : "step time (ms)";
#define X_OF(i) (L + (n > 1 ? (double)(i) * (W - L - R) / (double)(n - 1) : (W - L - R) / 2))
#define Y_OF(v) (T + (hi - (v)) * (H - T - B) / (hi - lo))
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
               "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\" font-size=\"12\">\n",
            W, H, W, H);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    snprintf(buf, sizeof buf, "%s: %s", name, mem ? "peak memory" : "step time");
    svg_text(f, W / 2, 22, "middle", " font-size=\"15\"", buf);
    /* axes */
    fprintf(f, "<line class=\"axis\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n",
            L, H - B, W - R, H - B);
    fprintf(f, "<line class=\"axis\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n",
            L, T, L, H - B);
    for (int t = 0; t <= 4; t++) {
        double v = lo + (hi - lo) * t / 4;
        snprintf(buf, sizeof buf, "%.4g", v * scale);
        svg_text(f, L - 6, Y_OF(v) + 4, "end", "", buf);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", L,
                Y_OF(v), W - R, Y_OF(v));
    }
    svg_text(f, 18, (T + H - B) / 2, "middle",
             " transform=\"rotate(-90 18 160)\" class=\"axis-label\"", unit);
    svg_text(f, (L + W - R) / 2, H - 12, "middle", " class=\"axis-label\"",
             "baseline set, oldest to newest (label)");
    /* the series */
    fprintf(f, "<path class=\"series\" fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"2\" d=\"");
    for (size_t i = 0; i < n; i++) {
        double v = mem ? (double)e[i].peak_memory_bytes : e[i].step_time_s;
        fprintf(f, "%s%.1f %.1f", i ? " L" : "M", X_OF(i), Y_OF(v));
    }
    fprintf(f, "\"/>\n");
    for (size_t i = 0; i < n; i++) {
        double v = mem ? (double)e[i].peak_memory_bytes : e[i].step_time_s;
        double prev = i ? (mem ? (double)e[i - 1].peak_memory_bytes : e[i - 1].step_time_s) : v;
        int changed = i > 0 && v != prev;
        fprintf(f, "<circle class=\"%s\" cx=\"%.1f\" cy=\"%.1f\" r=\"%d\" fill=\"%s\"/>\n",
                changed ? "change" : "point", X_OF(i), Y_OF(v), changed ? 6 : 3,
                changed ? (v > prev ? "#d62728" : "#2ca02c") : "#1f77b4");
        snprintf(buf, sizeof buf, "%s", e[i].label[0] ? e[i].label : "(no label)");
        char tr[96];
        snprintf(tr, sizeof tr, " transform=\"rotate(30 %.1f %.1f)\"", X_OF(i), H - B + 14);
        svg_text(f, X_OF(i), H - B + 14, "start", tr, buf);
    }
#undef X_OF
#undef Y_OF
    fprintf(f, "</svg>\n");
    if (fclose(f) != 0) {
        cli_error("cannot write '%s'", path);
        return CLI_FAIL;
    }
    return CLI_OK;
}

int
cmd_history(int argc, char **argv)
{
    ci_args a;
    const char *name = NULL, *svg = NULL, *metric = "step_time", *v;
    int json = 0, rc = CLI_USAGE, mem;
    baseline_entry *e = NULL;
    size_t n = 0;
    di_error err;
    ci_args_init(&a);
    for (int i = 1; i < argc; i++) {
        int r;
        if (cli_is_help(argv[i])) {
            rc = cli_help(usage_history);
            goto out;
        } else if (cli_flag(argv[i], "--json")) {
            json = 1;
        } else if ((r = cli_opt(argc, argv, &i, "--svg", &v)) != 0) {
            if (r < 0)
                goto out;
            svg = v;
        } else if ((r = cli_opt(argc, argv, &i, "--metric", &v)) != 0) {
            if (r < 0)
                goto out;
            metric = v;
        } else if ((r = ci_opt(argc, argv, &i, &a)) != 0) {
            if (r < 0)
                goto out;
        } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
            cli_error("unknown option '%s'", argv[i]);
            rc = cli_usage(usage_history);
            goto out;
        } else if (name == NULL) {
            name = argv[i];
        } else {
            rc = cli_usage(usage_history);
            goto out;
        }
    }
    if (name == NULL) {
        rc = cli_usage(usage_history);
        goto out;
    }
    if (strcmp(metric, "step_time") != 0 && strcmp(metric, "peak_memory") != 0) {
        cli_error("--metric: expected step_time or peak_memory, not '%s'", metric);
        goto out;
    }
    mem = strcmp(metric, "peak_memory") == 0;
    if ((rc = ci_where(&a, usage_history)) != CLI_OK)
        goto out;
    rc = CLI_FAIL;
    di_error_clear(&err);
    if (a.server != NULL) {
        Distir__V1__HistoryRequest req = DISTIR__V1__HISTORY_REQUEST__INIT;
        ProtobufCMessage *m;
        req.project = (char *)a.project;
        req.name = (char *)name;
        if (rpc_call(a.server, "/distir.v1.CostModel/History", &req.base,
                     &distir__v1__history_reply__descriptor, a.timeout_ms, &m, &err) != 0) {
            cli_error("history on '%s' failed: %s", a.server, err.msg);
            goto out;
        }
        Distir__V1__HistoryReply *hr = (Distir__V1__HistoryReply *)m;
        n = hr->n_entries;
        e = di_xcalloc(n ? n : 1, sizeof *e);
        for (size_t i = 0; i < n; i++) {
            const Distir__V1__BaselineEntry *p = hr->entries[i];
            snprintf(e[i].label, sizeof e[i].label, "%s", p->label);
            e[i].created = p->created;
            di_hash_from_hex(p->cache_key, &e[i].cache_key);
            e[i].step_time_s = p->step_time_s;
            e[i].peak_memory_bytes = p->peak_memory_bytes;
        }
        protobuf_c_message_free_unpacked(m, NULL);
    } else {
        cache *c = ci_open_db(a.db);
        if (c == NULL)
            goto out;
        int r = baseline_history(c, "", a.project, name, &e, &n, &err);
        cache_close(c);
        if (r != 0) {
            cli_error("%s", err.msg);
            goto out;
        }
        if (n == 0) {
            cli_error("no baseline '%s' in project '%s'", name, a.project);
            goto out;
        }
    }
    if (json) {
        printf("{\"project\":\"%s\",\"name\":\"%s\",\"entries\":[", a.project, name);
        for (size_t i = 0; i < n; i++) {
            char hex[65];
            di_buf b;
            di_buf_init(&b);
            di_buf_json_str(&b, e[i].label);
            di_buf_put(&b, "", 1);
            di_hash_hex(&e[i].cache_key, hex);
            printf("%s{\"label\":%s,\"created\":%.3f,\"cache_key\":\"%s\",\"step_time_s\":%.17g,"
                   "\"peak_memory_bytes\":%llu}",
                   i ? "," : "", b.data, e[i].created, hex, e[i].step_time_s,
                   (unsigned long long)e[i].peak_memory_bytes);
            di_buf_fini(&b);
        }
        printf("]}\n");
    } else {
        printf("%-4s %-20s %-22s %-16s %-14s %s\n", "#", "set (UTC)", "label", "step time",
               "peak memory", "key");
        for (size_t i = 0; i < n; i++) {
            char when[32], hex[65];
            time_t t = (time_t)e[i].created;
            struct tm tm;
            gmtime_r(&t, &tm);
            strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
            di_hash_hex(&e[i].cache_key, hex);
            printf("%-4zu %-20s %-22.22s ", i + 1, when, e[i].label[0] ? e[i].label : "-");
            char tb[32], mb[32];
            snprintf(tb, sizeof tb, "%.6g ms", e[i].step_time_s * 1e3);
            snprintf(mb, sizeof mb, "%.2f MiB", (double)e[i].peak_memory_bytes / 1048576.0);
            printf("%-16s %-14s %.16s\n", tb, mb, hex);
        }
    }
    rc = svg ? write_svg(svg, e, n, mem, name) : CLI_OK;
out:
    di_free(e);
    strategy_fini(&a.strat);
    return rc;
}
