/*
 * cmd_simulate.c: `distir simulate FILE [--hw PRESET|FILE] [--json] [--trace OUT]
 * [--no-overlap] [--math tf32|ieee] [--fail-on-oom] [--strict] [--server ADDR] [--op-times CSV]
 * [--collective-table OP:N:CSV]`.
 *
 * Without --server the library runs in-process; with it the daemon does the
 * work. The printed result is the same either way except for the cache
 * fields the daemon adds ("cache" and "cache_key" in the JSON).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "distir.pb-c.h"
#include "ir/pb.h"
#include "request/request.h"
#include "rpc.h"
#include "sim/sim.h"
#include "strategy_flags.h"
#include "xform/xform.h"

static const char usage[] =
    "simulate (FILE | --model NAME [model options]) [--hw PRESET|FILE.json] [--json] [--devices]\n"
    "                [--trace OUT.json [--trace-devices all|first-of-each-stage|0,8,16-23]\n"
    "                 [--trace-detail auto|op|layer]]\n"
    "                [--no-overlap] [--math tf32|ieee] [--kernels fused|eager] [--fail-on-oom]\n"
    "                [--grad-accum-fusion on|off] [--strict]\n"
    "                [--server ADDR]\n"
    "                [--timeout-ms N] [--op-times CSV] [--collective-table all_reduce:N:CSV]\n"
    "                [strategy flags]\n"
    "--model: a GPT preset (distir model presets), gpt or mlp, with the options of\n"
    "`distir model` (--batch, --seq, --dtype, --layers, --optimizer, ...): no file needed\n"
    "--kernels fused: element-wise chains as one kernel each and, unless --grad-accum-fusion\n"
    "off, each weight gradient's cast and accumulation inside its GEMM (Megatron-LM's\n"
    "gradient accumulation fusion, on by default there since 2022)\n"
    CLI_STRATEGY_FLAGS_HELP;

static int
collective_kind(const char *name)
{
    int k = ir_opkind_from_name(name, strlen(name));
    if (k == IR_OP_NONE) {
        char buf[64];
        snprintf(buf, sizeof buf, "dist.%s", name);
        k = ir_opkind_from_name(buf, strlen(buf));
    }
    return k;
}

/* "all_reduce:8:path.csv" (intra-node table) or "all_reduce:8:inter:path.csv". */
static int
load_table(hw_model *hw, const char *spec)
{
    char kind[64];
    unsigned group = 0;
    int n = 0, inter = 0, k;
    const char *path;
    di_error err;
    if (sscanf(spec, "%63[^:]:%u:%n", kind, &group, &n) != 2 || n == 0) {
        cli_error("bad --collective-table '%s': expected OP:GROUP:CSV", spec);
        return CLI_USAGE;
    }
    path = spec + n;
    if (strncmp(path, "inter:", 6) == 0) {
        inter = 1;
        path += 6;
    }
    k = collective_kind(kind);
    if (k == IR_OP_NONE) {
        cli_error("unknown collective '%s' in --collective-table", kind);
        return CLI_USAGE;
    }
    if (hw_load_collective_csv(hw, k, group, inter, path, &err) != 0) {
        cli_error("%s", err.msg);
        return CLI_FAIL;
    }
    return CLI_OK;
}

/* What was simulated, for the text result's first lines. */
typedef struct sim_inputs {
    const char *model; /* file name or --model name */
    const ir_module *module; /* sequential */
    sim_model_stats stats;
    const char *hwname;
    const hw_model *hw;
    const strategy *strat;
    int devices; /* --devices: the per-device table instead of the per-stage one */
} sim_inputs;

/* The stage of each device of r (r->ndevice entries), UINT32_MAX if none. */
static uint32_t
stage_map(const sim_result *r, const strategy *s, uint32_t ndevice, uint32_t *stage_of)
{
    uint32_t *stage = di_xmalloc((ndevice ? ndevice : 1) * sizeof *stage);
    uint32_t pp = strategy_device_groups(s, ndevice, stage);
    for (uint32_t i = 0; i < r->ndevice; i++) {
        uint32_t id = (uint32_t)r->devices[i].id;
        stage_of[i] = id < ndevice ? stage[id] : UINT32_MAX;
    }
    di_free(stage);
    return pp;
}

/* Per stage: stage_of (r->ndevice entries) and the layers of each stage (NULL if unknown). */
static uint32_t
stages_of(const sim_result *r, const sim_inputs *in, uint32_t **stage_of, uint32_t **layers)
{
    uint32_t nstage, ngroup = 0;
    di_error err;
    di_error_clear(&err);
    *stage_of = di_xmalloc((r->ndevice ? r->ndevice : 1) * sizeof **stage_of);
    nstage = stage_map(r, in->strat, in->hw->ndevice, *stage_of);
    if (xform_stage_layers(in->module, in->strat, in->hw, layers, &ngroup, &err) != 0 ||
        ngroup != nstage) {
        di_free(*layers);
        *layers = NULL;
    }
    return nstage;
}

static void
print_json(const sim_result *r, const char *cache, const char *key, const sim_inputs *in)
{
    char strat[512], *s = sim_result_to_json(r);
    uint32_t *stage_of, *layers;
    uint32_t nstage = stages_of(r, in, &stage_of, &layers);
    di_buf b;
    di_buf_init(&b);
    di_buf_putc(&b, '{');
    if (cache)
        di_buf_printf(&b, "\"cache\":\"%s\",\"cache_key\":\"%s\",", cache, key);
    strategy_format(in->strat, strat, sizeof strat);
    di_buf_puts(&b, "\"inputs\":{\"model\":");
    di_buf_json_str(&b, in->model);
    di_buf_printf(&b, ",\"parameters\":%llu,\"tokens\":", (unsigned long long)in->stats.parameters);
    di_buf_double(&b, in->stats.tokens);
    di_buf_puts(&b, ",\"flops_6n\":");
    di_buf_double(&b, in->stats.flops_6n);
    di_buf_puts(&b, ",\"attention_flops\":");
    di_buf_double(&b, in->stats.attention_flops);
    di_buf_puts(&b, ",\"hardware\":");
    di_buf_json_str(&b, in->hwname);
    di_buf_printf(&b, ",\"devices\":%u,\"devices_per_node\":%u,\"strategy\":", in->hw->ndevice,
                  in->hw->devices_per_node);
    di_buf_json_str(&b, strat);
    di_buf_puts(&b, "},\"stages\":");
    sim_result_stages_json(r, nstage, stage_of, layers, &b);
    di_buf_printf(&b, ",%s\n", s + 1);
    fwrite(b.data, 1, b.len, stdout);
    di_buf_fini(&b);
    di_free(s);
    di_free(stage_of);
    di_free(layers);
}

static void
print_result(const sim_result *r, int json, const char *cache, const char *key,
             const sim_inputs *in)
{
    char *s;
    if (json) {
        print_json(r, cache, key, in);
        return;
    }
    di_buf b;
    char strat[512];
    di_buf_init(&b);
    strategy_format(in->strat, strat, sizeof strat);
    if (cache)
        di_buf_printf(&b, "cache            %s (key %s)\n", cache, key);
    if (in->stats.parameters > 0)
        di_buf_printf(&b, "model            %s (%.4g parameters, %.6g tokens per step)\n",
                      in->model, (double)in->stats.parameters, in->stats.tokens);
    else
        di_buf_printf(&b, "model            %s\n", in->model);
    di_buf_printf(&b, "hardware         %s: %u devices, %u per node\n", in->hwname,
                  in->hw->ndevice, in->hw->devices_per_node);
    di_buf_printf(&b, "strategy         %s\n", strat);
    sim_result_summary(r, &b);
    di_buf_puts(&b, "\n");
    fwrite(b.data, 1, b.len, stdout);
    di_buf_fini(&b);
    if (in->devices || strategy_is_trivial(in->strat)) {
        /*
         * The per-device table (sim_result_to_table after its summary lines): asked for, or
         * no strategy was applied (a sequential module, or one distributed already).
         */
        s = sim_result_to_table(r);
        const char *t = strstr(s, "\n\n");
        fputs(t ? t + 2 : s, stdout);
        di_free(s);
        return;
    }
    uint32_t *stage_of, *layers;
    uint32_t nstage = stages_of(r, in, &stage_of, &layers);
    di_buf_init(&b);
    sim_result_stages(r, nstage, stage_of, layers, &b);
    di_buf_puts(&b, "(per stage: mean over its devices; --devices for every device)\n");
    fwrite(b.data, 1, b.len, stdout);
    di_buf_fini(&b);
    di_free(stage_of);
    di_free(layers);
}

/*
 * --fail-on-oom: CLI_FAIL when a device's peak exceeds its capacity, naming
 * the first such device and the excess on stderr (the result is printed
 * first, so a CI log shows both).
 */
static int
check_oom(const sim_result *r)
{
    uint32_t noom = 0;
    const sim_device_result *first = NULL;
    for (uint32_t i = 0; i < r->ndevice; i++)
        if (r->devices[i].oom) {
            if (first == NULL)
                first = &r->devices[i];
            noom++;
        }
    if (first == NULL)
        return CLI_OK;
    cli_error("out of memory on %u of %u devices: device %d needs %llu bytes (%.2f GiB), "
              "%llu bytes (%.2f GiB) over its capacity of %.2f GiB",
              noom, r->ndevice, first->id, (unsigned long long)first->peak_memory_bytes,
              first->peak_memory_bytes / 1073741824.0, (unsigned long long)first->oom_by_bytes,
              first->oom_by_bytes / 1073741824.0, first->capacity_bytes / 1073741824.0);
    return CLI_FAIL;
}

/*
 * Ops with no cost rule and no measured time are priced by their bytes
 * alone: say so once, with the first few op types, unless --strict refuses
 * them (then the simulator's error names the op).
 */
static void
warn_estimates(const ir_module *m, const hw_model *hw)
{
    char sig[HW_SIGNATURE_MAX], names[256] = "";
    size_t len = 0;
    uint32_t n = 0;
    for (ir_id op = 1; op < m->nop; op++) {
        const char *t;
        if (m->ops[op].kind == IR_OP_NONE || ir_op_has_cost_rule(m, op))
            continue;
        if (hw->nop_time) {
            hw_op_signature(m, op, sig, sizeof sig);
            if (hw_op_time_lookup(hw, sig) >= 0)
                continue;
        }
        t = ir_op_name(m, op);
        if (n++ < 4 && strstr(names, t) == NULL && len + strlen(t) + 3 < sizeof names)
            len += (size_t)snprintf(names + len, sizeof names - len, "%s%s", len ? ", " : "", t);
    }
    if (n)
        fprintf(stderr,
                "distir: warning: %u op(s) have no cost model and are priced by their bytes alone "
                "(a memory-bound estimate): %s; --op-times gives measured times, --strict "
                "refuses them\n",
                n, names);
}

int
cli_simulate_remote(const char *server, const ir_module *m, const Distir__V1__ModelSpec *spec,
                    const char *hwname, const hw_model *hw, const strategy *strat,
                    const sim_options *o, int timeout_ms, Distir__V1__SimulateReply **reply)
{
    Distir__V1__SimulateRequest req = DISTIR__V1__SIMULATE_REQUEST__INIT;
    Distir__V1__Strategy sp = DISTIR__V1__STRATEGY__INIT;
    Distir__V1__HardwareRef ref = DISTIR__V1__HARDWARE_REF__INIT;
    Distir__V1__SimOptions opts = DISTIR__V1__SIM_OPTIONS__INIT;
    Distir__V1__Hardware hwp;
    di_error err;
    int rc, own_hw = 0;

    if (spec != NULL)
        req.model = (Distir__V1__ModelSpec *)spec; /* the daemon generates the module */
    else
        req.module = ir_to_proto(m);
    if (hw->ntable == 0 && hw->nop_time == 0 && hwname && !strstr(hwname, ".json")) {
        ref.spec_case = DISTIR__V1__HARDWARE_REF__SPEC_PRESET;
        ref.preset = (char *)hwname;
    } else {
        hw_to_proto(hw, &hwp);
        own_hw = 1;
        ref.spec_case = DISTIR__V1__HARDWARE_REF__SPEC_HARDWARE;
        ref.hardware = &hwp;
    }
    req.hardware = &ref;
    strategy_to_proto(strat, &sp);
    req.strategy = &sp;
    opts.no_overlap = o->no_overlap;
    opts.tf32 = o->tf32;
    opts.fuse = o->fuse;
    opts.no_grad_accum_fusion = o->no_grad_accum_fusion;
    opts.want_timeline = o->want_timeline;
    opts.timeline_max_points = o->timeline_max_points;
    req.options = &opts;
    rc = rpc_simulate(server, &req, timeout_ms, reply, &err);
    ir_proto_free(req.module);
    strategy_proto_fini(&sp);
    if (own_hw)
        hw_proto_fini(&hwp);
    if (rc != 0) {
        cli_error("simulate on '%s' failed: %s", server, err.msg);
        return CLI_FAIL;
    }
    if ((*reply)->result == NULL) {
        cli_error("bad reply from '%s': no result in reply", server);
        protobuf_c_message_free_unpacked(&(*reply)->base, NULL);
        *reply = NULL;
        return CLI_FAIL;
    }
    return CLI_OK;
}

static int
simulate_remote(const char *server, const ir_module *m, const Distir__V1__ModelSpec *spec,
                const char *hwname, const hw_model *hw, const strategy *strat,
                const sim_options *o, int timeout_ms, int json, int fail_on_oom,
                const sim_inputs *in)
{
    Distir__V1__SimulateReply *reply = NULL;
    sim_result *r = NULL;
    di_error err;
    int rc = cli_simulate_remote(server, m, spec, hwname, hw, strat, o, timeout_ms, &reply);
    if (rc != CLI_OK)
        return rc;
    if (sim_result_from_proto(reply->result, &r, &err) != 0) {
        cli_error("bad reply from '%s': %s", server, err.msg);
        protobuf_c_message_free_unpacked(&reply->base, NULL);
        return CLI_FAIL;
    }
    print_result(r, json, reply->cache == DISTIR__V1__CACHE_STATUS__CACHE_HIT ? "hit" : "miss",
                 reply->cache_key, in);
    rc = fail_on_oom ? check_oom(r) : CLI_OK;
    sim_result_free(r);
    protobuf_c_message_free_unpacked(&reply->base, NULL);
    return rc;
}

/*
 * --trace-devices: "all" (the default), "first-of-each-stage" (the lowest
 * device id of each pipeline stage) or a list of ids and ranges
 * ("0,8,16-23"). Sets sel[0..ndevice).
 */
static int
trace_select(const char *spec, const strategy *s, uint32_t ndevice, const uint32_t *stage,
             uint8_t *sel)
{
    memset(sel, 0, ndevice);
    if (spec == NULL || strcmp(spec, "all") == 0) {
        memset(sel, 1, ndevice);
        return 0;
    }
    if (strcmp(spec, "first-of-each-stage") == 0) {
        uint32_t pp = s->pp ? s->pp : 1;
        uint8_t *seen = di_xcalloc(pp, 1);
        for (uint32_t d = 0; d < ndevice; d++)
            if (stage[d] < pp && !seen[stage[d]])
                seen[stage[d]] = sel[d] = 1;
        di_free(seen);
        return 0;
    }
    for (const char *p = spec; *p;) {
        char *end;
        unsigned long lo = strtoul(p, &end, 10), hi = lo;
        if (end == p)
            goto bad;
        if (*end == '-') {
            p = end + 1;
            hi = strtoul(p, &end, 10);
            if (end == p || hi < lo)
                goto bad;
        }
        if (hi >= ndevice) {
            cli_error("--trace-devices: device %lu does not exist (the hardware has %u)", hi,
                      ndevice);
            return -1;
        }
        for (unsigned long d = lo; d <= hi; d++)
            sel[d] = 1;
        if (*end != ',' && *end != '\0')
            goto bad;
        p = *end ? end + 1 : end;
    }
    return 0;
bad:
    cli_error("bad --trace-devices '%s': expected all, first-of-each-stage or ids and ranges "
              "(0,8,16-23)",
              spec);
    return -1;
}

/* Opens the streamed trace of sm (warning first when it will be large). */
enum { TRACE_AUTO, TRACE_OP, TRACE_LAYER };

static int
trace_open(const char *path, const char *spec, int detail, const ir_module *sm,
           const hw_model *hw, const strategy *s, sim_trace_file **out)
{
    uint32_t n = hw->ndevice;
    uint8_t *sel = di_xmalloc(n ? n : 1);
    uint32_t *stage = di_xmalloc((n ? n : 1) * sizeof *stage);
    di_error err;
    int rc = CLI_OK;
    strategy_device_groups(s, n, stage);
    if (trace_select(spec, s, n, stage, sel) != 0) {
        rc = CLI_USAGE;
    } else {
        const uint8_t *use = spec == NULL || strcmp(spec, "all") == 0 ? NULL : sel;
        double est = sim_trace_estimate(sm, n, use);
        int merge = detail == TRACE_LAYER || (detail == TRACE_AUTO && est > 100e6);
        if (detail == TRACE_AUTO && merge)
            fprintf(stderr,
                    "distir: trace: every op would take about %.0f MB; each layer's consecutive "
                    "ops are merged into one slice (--trace-detail op keeps every op)\n",
                    est / 1e6);
        else if (!merge && est > 1e9)
            fprintf(stderr,
                    "distir: warning: the trace will take about %.1f GB; --trace-devices "
                    "first-of-each-stage (or a list of devices) records fewer devices\n",
                    est / 1e9);
        if (sim_trace_open(path, sm, n, use, strategy_is_trivial(s) ? NULL : stage, merge, out,
                           &err) != 0) {
            cli_error("%s", err.msg);
            rc = CLI_FAIL;
        }
    }
    di_free(sel);
    di_free(stage);
    return rc;
}

/* The command, with its strategy (s) owned by cmd_simulate. */
static int
simulate_cmd(int argc, char **argv, strategy *s)
{
    const char *file = NULL, *hwname = "a100-dgx", *trace = NULL, *server = NULL, *v;
    const char *trace_devices = NULL;
    int trace_detail = TRACE_AUTO;
    const char *optimes = NULL, *model = NULL;
    const char *tables[16];
    /* --model NAME: the generator's options, gathered from the command line */
    cli_model_ref mr = {NULL, 0, {NULL}};
    int ntable = 0, json = 0, timeout_ms = 60000, fail_on_oom = 0, per_device = 0, kernels = 0, rc;
    sim_options o;
    hw_model *hw = NULL;
    ir_module *m = NULL;
    di_error err;

    sim_options_default(&o);
    for (int i = 1; i < argc; i++) {
        int r;
        if (cli_is_help(argv[i]))
            return cli_help(usage);
        if (cli_flag(argv[i], "--json")) {
            json = 1;
        } else if (cli_flag(argv[i], "--devices")) {
            per_device = 1;
        } else if (cli_flag(argv[i], "--no-overlap")) {
            o.no_overlap = 1;
        } else if ((r = cli_sim_opt(argc, argv, &i, &o.tf32, &o.fuse, &o.no_grad_accum_fusion,
                                     &kernels)) != 0) {
            if (r < 0)
                return CLI_USAGE;
        } else if (cli_flag(argv[i], "--fail-on-oom")) {
            fail_on_oom = 1;
        } else if (cli_flag(argv[i], "--strict")) {
            o.strict = 1;
        } else if ((r = cli_opt(argc, argv, &i, "--hw", &v)) != 0) {
            if (r < 0)
                return CLI_USAGE;
            hwname = v;
        } else if ((r = cli_opt(argc, argv, &i, "--trace", &v)) != 0) {
            if (r < 0)
                return CLI_USAGE;
            trace = v;
        } else if ((r = cli_opt(argc, argv, &i, "--trace-detail", &v)) != 0) {
            if (r < 0)
                return CLI_USAGE;
            if (strcmp(v, "auto") == 0)
                trace_detail = TRACE_AUTO;
            else if (strcmp(v, "op") == 0)
                trace_detail = TRACE_OP;
            else if (strcmp(v, "layer") == 0)
                trace_detail = TRACE_LAYER;
            else {
                cli_error("--trace-detail needs auto, op or layer, got '%s'", v);
                return CLI_USAGE;
            }
        } else if ((r = cli_opt(argc, argv, &i, "--trace-devices", &v)) != 0) {
            if (r < 0)
                return CLI_USAGE;
            trace_devices = v;
        } else if ((r = cli_opt(argc, argv, &i, "--server", &v)) != 0) {
            if (r < 0)
                return CLI_USAGE;
            server = v;
        } else if ((r = cli_opt(argc, argv, &i, "--timeout-ms", &v)) != 0) {
            if (r < 0)
                return CLI_USAGE;
            timeout_ms = atoi(v);
        } else if ((r = cli_opt(argc, argv, &i, "--op-times", &v)) != 0) {
            if (r < 0)
                return CLI_USAGE;
            optimes = v;
        } else if ((r = cli_opt(argc, argv, &i, "--collective-table", &v)) != 0) {
            if (r < 0)
                return CLI_USAGE;
            if (ntable == (int)(sizeof tables / sizeof tables[0])) {
                cli_error("too many --collective-table options");
                return CLI_USAGE;
            }
            tables[ntable++] = v;
        } else if ((r = cli_opt(argc, argv, &i, "--model", &v)) != 0) {
            if (r < 0)
                return CLI_USAGE;
            model = v;
        } else if ((r = cli_strategy_flag(argc, argv, &i, s)) != 0) {
            if (r < 0)
                return CLI_USAGE;
        } else if ((r = cli_model_opt(argc, argv, &i, &mr)) != 0) {
            /* A generator option (for --model): kept with its value, checked when building. */
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
    if ((file == NULL) == (model == NULL)) {
        if (file != NULL)
            cli_error("give a FILE or --model NAME, not both");
        return cli_usage(usage);
    }
    if (mr.argc > 0 && model == NULL) {
        cli_error("'%s' is a model option: it needs --model NAME", mr.argv[0]);
        return cli_usage(usage);
    }
    if (cli_strategy_finish(s) != 0)
        return CLI_USAGE;
    if ((trace_devices || trace_detail != TRACE_AUTO) && !trace) {
        cli_error("--trace-devices and --trace-detail shape --trace OUT.json: give --trace");
        return CLI_USAGE;
    }
    if (trace && server) {
        cli_error("--trace runs the simulation in-process: drop --server");
        return CLI_USAGE;
    }
    if (o.strict && server) {
        cli_error("--strict runs the simulation in-process: drop --server");
        return CLI_USAGE;
    }
    if (hw_load(hwname, &hw, &err) != 0) {
        cli_error("%s", err.msg);
        return CLI_FAIL;
    }
    for (int t = 0; t < ntable; t++)
        if ((rc = load_table(hw, tables[t])) != CLI_OK) {
            hw_free(hw);
            return rc;
        }
    if (optimes && hw_load_op_times(hw, optimes, &err) != 0) {
        cli_error("%s", err.msg);
        hw_free(hw);
        return CLI_FAIL;
    }
    if (model != NULL) {
        mr.name = model;
        if ((rc = cli_model_ref_build(&mr, &m)) != CLI_OK) {
            hw_free(hw);
            return rc;
        }
        file = model;
        cli_warn_model_defaults(&mr, hw, kernels);
    } else if (cli_load_module(file, &m) != 0) {
        hw_free(hw);
        return CLI_FAIL;
    }
    if (ir_verify(m, &err) != 0) {
        cli_error("'%s' is not a valid module: %s", file, err.msg);
        ir_module_free(m);
        hw_free(hw);
        return CLI_FAIL;
    }
    if (!o.strict)
        warn_estimates(m, hw);
    sim_inputs inputs = {.model = file, .module = m, .hwname = hwname, .hw = hw, .strat = s,
                         .devices = per_device};
    sim_model_stats_of(m, &inputs.stats);
    if (server) {
        /* A built-in model goes by name: the daemon generates the same module. */
        Distir__V1__ModelSpec ms;
        if (model != NULL)
            cli_model_ref_proto(&mr, &ms);
        rc = simulate_remote(server, m, model != NULL ? &ms : NULL, hwname, hw, s, &o, timeout_ms,
                             json, fail_on_oom, &inputs);
        if (model != NULL)
            cli_model_ref_proto_fini(&ms);
    } else {
        sim_result *r = NULL;
        sim_trace_file *tf = NULL;
        const ir_module *sm = NULL;
        ir_module *dm = NULL;
        rc = CLI_OK;
        if (request_apply_strategy(m, s, hw, &sm, &dm, &err) != 0) {
            cli_error("cannot apply the strategy: %s", err.msg);
            rc = CLI_FAIL;
        } else if (trace && (rc = trace_open(trace, trace_devices, trace_detail, sm, hw, s, &tf)) != CLI_OK) {
            /* said why */
        } else if ((o.trace = tf ? sim_trace_sink_of(tf) : NULL, sim_run(sm, hw, &o, &r, NULL,
                                                                          NULL, &err)) != 0) {
            cli_error("cannot simulate '%s': %s", file, err.msg);
            rc = CLI_FAIL;
        } else {
            sim_result_set_model(r, &inputs.stats);
            if (tf) {
                uint64_t nev = sim_trace_events(tf), nsl = sim_trace_slices(tf), bytes = 0;
                int trc = sim_trace_close(tf, r, &bytes, &err);
                tf = NULL;
                if (trc != 0) {
                    cli_error("%s", err.msg);
                    rc = CLI_FAIL;
                } else {
                    fprintf(stderr, "distir: trace: %llu ops in %llu slices, %.1f MB in '%s'\n",
                            (unsigned long long)nev, (unsigned long long)nsl, bytes / 1e6, trace);
                }
            }
            print_result(r, json, NULL, NULL, &inputs);
            if (rc == CLI_OK && fail_on_oom)
                rc = check_oom(r);
        }
        sim_trace_discard(tf);
        sim_result_free(r);
        ir_module_free(dm);
    }
    ir_module_free(m);
    hw_free(hw);
    return rc;
}

int
cmd_simulate(int argc, char **argv)
{
    strategy s;
    int rc;
    strategy_init(&s);
    rc = simulate_cmd(argc, argv, &s);
    strategy_fini(&s);
    return rc;
}
