/*
 * bench_sim.c: simulator speed and memory for modules of 10^3 .. 10^6 ops.
 *
 * The module is a training-like mix on 8 devices of one a100-dgx node:
 * per device a chain of MatMul, Add and Gelu ops, a send to the next device
 * every 16 ops and a tuple all-reduce over the 8 devices every 256 ops.
 * Each size runs in a child process so that its peak RSS (VmHWM) is its own.
 * Targets: under 100 ns per op and under 200 bytes per op for the
 * 1,000,000-op module, with cost growing linearly.
 */
#define _POSIX_C_SOURCE 200809L
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ir/ir.h"
#include "sim/hw.h"
#include "sim/sim.h"

static double
now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static long
vm_kib(const char *field)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    size_t n = strlen(field);
    if (f == NULL)
        return -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, field, n) == 0) {
            v = strtol(line + n + 1, NULL, 10);
            break;
        }
    fclose(f);
    return v;
}

static ir_module *
build(uint32_t nops)
{
    ir_module *m = ir_module_new();
    ir_id f = ir_func_new(m, "main");
    int64_t dims[2] = {1024, 1024};
    ir_id ty[8], cur[8], tup;
    uint32_t made = 0;
    for (int d = 0; d < 8; d++) {
        ty[d] = ir_type_tensor(m, IR_BF16, 2, dims, d);
        cur[d] = ir_region_add_arg(m, f, ty[d], NULL);
    }
    tup = ir_type_tuple(m, 8, ty);
    while (made < nops) {
        for (int d = 0; d < 8 && made < nops; d++, made++) {
            ir_id in[2] = {cur[d], cur[d]};
            int kind = made % 3 == 0 ? IR_OP_MATMUL : made % 3 == 1 ? IR_OP_ADD : IR_OP_GELU;
            ir_id op;
            if (made % 256 == 255) {
                ir_id t = ir_op_output(m, ir_op_add(m, f, IR_OP_TUPLE, 8, cur, 1, &tup, NULL), 0);
                op = ir_op_add(m, f, IR_OP_ALLREDUCE, 1, &t, 1, &tup, NULL);
                for (int e = 0; e < 8; e++) {
                    ir_id g = ir_op_add(m, f, IR_OP_TUPLEGET, 1, (ir_id[]){ir_op_output(m, op, 0)},
                                        1, &ty[e], NULL);
                    ir_op_set_int(m, g, "index", e);
                    cur[e] = ir_op_output(m, g, 0);
                }
                made += 9;
                continue;
            }
            if (made % 16 == 15) {
                int to = (d + 1) % 8;
                op = ir_op_add(m, f, IR_OP_SEND, 1, &cur[d], 1, &ty[to], NULL);
                ir_op_set_int(m, op, "device", to);
                in[0] = cur[to];
                in[1] = ir_op_output(m, op, 0);
                op = ir_op_add(m, f, IR_OP_ADD, 2, in, 1, &ty[to], NULL);
                cur[to] = ir_op_output(m, op, 0);
                made++;
                continue;
            }
            op = ir_op_add(m, f, kind, kind == IR_OP_GELU ? 1 : 2, in, 1, &ty[d], NULL);
            cur[d] = ir_op_output(m, op, 0);
        }
    }
    for (int d = 0; d < 8; d++)
        ir_region_add_result(m, f, cur[d]);
    return m;
}

/*
 * Best of at least reps simulations of m (with ws, through that workspace),
 * repeated for at least 0.3 s: a small module's runs take tens of
 * microseconds, less than a virtual CPU takes to come up to speed.
 */
static int
best_of(const ir_module *m, hw_model *hw, sim_workspace *ws, int reps, double *best)
{
    sim_options o;
    di_error err;
    double start = now();
    sim_options_default(&o);
    *best = 1e30;
    for (int r = 0; r < reps || (now() - start < 0.3 && r < 100000); r++) {
        sim_result *res;
        double t0 = now(), t;
        if (sim_run_ws(ws, m, hw, &o, &res, NULL, NULL, &err) != 0) {
            fprintf(stderr, "bench_sim: %s\n", err.msg);
            return 1;
        }
        t = now() - t0;
        if (t < *best)
            *best = t;
        sim_result_free(res);
    }
    return 0;
}

/*
 * Cold: every run maps, faults and frees its own tables (a one-shot CLI
 * run). Warm: runs share one workspace (a daemon worker, a search loop);
 * its first run fills it and is not counted. Memory is the cold peak.
 */
static int
one(uint32_t nops, hw_model *hw)
{
    long base, after_build, peak;
    double cold, warm;
    ir_module *m;
    size_t modbytes;
    sim_workspace *ws;
    const char *r_env = getenv("BENCH_REPS");
    int reps = r_env ? atoi(r_env) : nops >= 1000000 ? 3 : nops >= 100000 ? 5 : 20;
    uint32_t n;

    base = vm_kib("VmHWM:");
    m = build(nops);
    n = m->nop - 1;
    modbytes = ir_module_bytes(m);
    after_build = vm_kib("VmHWM:");
    if (best_of(m, hw, NULL, reps, &cold) != 0)
        return 1;
    peak = vm_kib("VmHWM:");
    ws = sim_workspace_new();
    if (best_of(m, hw, ws, 1, &warm) != 0 || best_of(m, hw, ws, reps, &warm) != 0)
        return 1;
    sim_workspace_free(ws);
    printf("%9u ops  cold %6.1f ns/op  warm %6.1f ns/op  %10.0f ops/s  module %6.1f B/op  "
           "simulation %6.1f B/op  total %6.1f B/op\n",
           n, cold / n * 1e9, warm / n * 1e9, n / cold, (double)modbytes / n,
           (double)(peak - after_build) * 1024 / n, (double)(peak - base) * 1024 / n);
    fflush(stdout);
    ir_module_free(m);
    return 0;
}

int
main(int argc, char **argv)
{
    static const uint32_t sizes[] = {1000, 10000, 100000, 1000000};
    hw_model *hw;
    di_error err;
    if (hw_preset("a100-dgx:1", &hw, &err) != 0) {
        fprintf(stderr, "bench_sim: %s\n", err.msg);
        return 1;
    }
    if (argc > 1) { /* one size, in this process (for profilers) */
        int rc = one((uint32_t)strtoul(argv[1], NULL, 10), hw);
        hw_free(hw);
        return rc;
    }
    printf("bench_sim: simulator speed and memory (targets: < 100 ns/op and < 200 B/op "
           "at 10^6 ops; linear growth)\n");
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        pid_t pid;
        int status;
        fflush(stdout);
        pid = fork();
        if (pid == 0)
            _exit(one(sizes[i], hw));
        if (pid < 0 || waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) ||
            WEXITSTATUS(status) != 0) {
            hw_free(hw);
            return 1;
        }
    }
    hw_free(hw);
    return 0;
}
