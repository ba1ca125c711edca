/*
 * bench_server_hits.c: cache-hit latency and throughput of distird over
 * loopback gRPC, with 1 and 8 concurrent client threads (each with its own
 * channel and completion queue, making unary Simulate calls back to back).
 * The request is always the same small module, so after one warm-up miss
 * every call is a cache hit answered on the daemon's loop thread.
 *
 *   bench_server_hits [--server ADDR] [--distird PATH] [--seconds S]
 *
 * Without --server it starts BUILD/distird (next to bench/) on 127.0.0.1:0
 * with a temporary database and stops it with SIGTERM afterwards. Targets
 * (2 cores shared by client and server): p99 under 1 ms, and at
 * least 20,000 hits/s with 8 clients. Figures are printed next to them; the
 * exit status reports errors only, never speed.
 */
#include <errno.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/time.h>
#include <libgen.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "grpc_bench.h"
#include "ir/ir.h"
#include "ir/pb.h"

#define TARGET_P99_US 1000.0
#define TARGET_HITS_PER_S 20000.0

/* The MLP of tests/ir/seed001_mlp.dir, forward and backward. */
static const char module_text[] =
    "func @mlp(%wA: !dist.tensor<4x6xf32, 0>, %wB: !dist.tensor<6x2xf32, 0>, "
    "%x: !dist.tensor<8x4xf32, 0>, %z: !dist.tensor<8x2xf32, 0>) -> (!dist.tensor<8x2xf32, 0>, "
    "!dist.tensor<f32, 0>) {\n"
    "  %a = \"MatMul\"(%x, %wA) : (!dist.tensor<8x4xf32, 0>, !dist.tensor<4x6xf32, 0>) -> "
    "!dist.tensor<8x6xf32, 0>\n"
    "  %y = \"MatMul\"(%a, %wB) : (!dist.tensor<8x6xf32, 0>, !dist.tensor<6x2xf32, 0>) -> "
    "!dist.tensor<8x2xf32, 0>\n"
    "  %l = \"MSELoss\"(%y, %z) : (!dist.tensor<8x2xf32, 0>, !dist.tensor<8x2xf32, 0>) -> "
    "!dist.tensor<f32, 0>\n"
    "  return %y, %l : !dist.tensor<8x2xf32, 0>, !dist.tensor<f32, 0>\n"
    "}\n";

static grpc_slice request_slice;
static double run_seconds = 2.0;

typedef struct client {
    pthread_t thread;
    double *lat_us; /* one per call, microseconds */
    size_t n, cap;
    long errors;
    int hit_checked; /* the first reply was a cache hit */
    const char *first_error;
} client;

/* One Simulate of the bench's request; returns the status and, if reply != NULL, the reply. */
static grpc_status_code
call_once(grpc_channel *ch, grpc_completion_queue *cq, Distir__V1__SimulateReply **reply)
{
    grpc_slice s;
    grpc_status_code st =
        call_unary(ch, cq, "/distir.v1.CostModel/Simulate", request_slice, reply ? &s : NULL);
    if (reply != NULL) {
        *reply = st == GRPC_STATUS_OK ? distir__v1__simulate_reply__unpack(
                                            NULL, GRPC_SLICE_LENGTH(s), GRPC_SLICE_START_PTR(s))
                                      : NULL;
        grpc_slice_unref(s);
    }
    return st;
}

static void *
client_main(void *arg)
{
    client *c = arg;
    grpc_channel *ch = open_channel();
    grpc_completion_queue *cq = grpc_completion_queue_create_for_next(NULL);
    Distir__V1__SimulateReply *reply;
    /* The first call connects and checks that this is a hit; it is not timed. */
    if (call_once(ch, cq, &reply) != GRPC_STATUS_OK || reply == NULL) {
        c->errors++;
        c->first_error = "first call failed";
    } else {
        c->hit_checked = reply->cache == DISTIR__V1__CACHE_STATUS__CACHE_HIT;
        distir__v1__simulate_reply__free_unpacked(reply, NULL);
    }
    double end = now_s() + run_seconds;
    for (;;) {
        double t0 = now_s();
        if (t0 >= end)
            break;
        grpc_status_code st = call_once(ch, cq, NULL);
        double t1 = now_s();
        if (st != GRPC_STATUS_OK) {
            c->errors++;
            continue;
        }
        if (c->n == c->cap) {
            c->cap = c->cap ? c->cap * 2 : 65536;
            c->lat_us = realloc(c->lat_us, c->cap * sizeof *c->lat_us);
            if (c->lat_us == NULL)
                abort();
        }
        c->lat_us[c->n++] = (t1 - t0) * 1e6;
    }
    close_cq(cq);
    grpc_channel_destroy(ch);
    return NULL;
}

static int
cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Runs nclient threads for run_seconds; prints one line; returns the error count. */
static long
run(int nclient)
{
    client *cs = calloc((size_t)nclient, sizeof *cs);
    double t0 = now_s();
    for (int i = 0; i < nclient; i++)
        pthread_create(&cs[i].thread, NULL, client_main, &cs[i]);
    for (int i = 0; i < nclient; i++)
        pthread_join(cs[i].thread, NULL);
    double wall = now_s() - t0;
    size_t total = 0;
    long errors = 0;
    int hits = 1;
    for (int i = 0; i < nclient; i++) {
        total += cs[i].n;
        errors += cs[i].errors;
        hits &= cs[i].hit_checked;
    }
    double *all = malloc((total ? total : 1) * sizeof *all);
    size_t k = 0;
    for (int i = 0; i < nclient; i++) {
        memcpy(all + k, cs[i].lat_us, cs[i].n * sizeof *all);
        k += cs[i].n;
        free(cs[i].lat_us);
    }
    qsort(all, total, sizeof *all, cmp_double);
    double p50 = total ? all[total / 2] : 0, p99 = total ? all[(size_t)((double)total * 0.99)] : 0;
    /* Each thread spends about a connect outside the timed window; count the window only. */
    double rate = (double)total / (wall > run_seconds ? run_seconds : wall);
    printf("clients=%d calls=%zu errors=%ld all_hits=%s  p50=%.1f us  p99=%.1f us (target < %.0f"
           " us: %s)  throughput=%.0f hits/s",
           nclient, total, errors, hits ? "yes" : "NO", p50, p99, TARGET_P99_US,
           p99 < TARGET_P99_US ? "met" : "missed", rate);
    if (nclient >= 8)
        printf(" (target >= %.0f: %s)", TARGET_HITS_PER_S,
               rate >= TARGET_HITS_PER_S ? "met" : "missed");
    printf("\n");
    fflush(stdout);
    free(all);
    free(cs);
    return errors + (hits ? 0 : 1);
}

static int
build_request(void)
{
    ir_module *m = NULL;
    di_error err;
    Distir__V1__SimulateRequest req = DISTIR__V1__SIMULATE_REQUEST__INIT;
    Distir__V1__HardwareRef ref = DISTIR__V1__HARDWARE_REF__INIT;
    if (ir_parse(module_text, strlen(module_text), &m, &err) != 0) {
        fprintf(stderr, "bench: %s\n", err.msg);
        return -1;
    }
    req.module = ir_to_proto(m);
    ref.spec_case = DISTIR__V1__HARDWARE_REF__SPEC_PRESET;
    ref.preset = (char *)"a100-dgx";
    req.hardware = &ref;
    size_t n = distir__v1__simulate_request__get_packed_size(&req);
    request_slice = grpc_slice_malloc(n);
    distir__v1__simulate_request__pack(&req, GRPC_SLICE_START_PTR(request_slice));
    ir_proto_free(req.module);
    ir_module_free(m);
    return 0;
}

int
main(int argc, char **argv)
{
    const char *distird = NULL;
    char exe[PATH_MAX], path[PATH_MAX + 16];
    long errors = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--server") == 0 && i + 1 < argc)
            server_addr = argv[++i];
        else if (strcmp(argv[i], "--distird") == 0 && i + 1 < argc)
            distird = argv[++i];
        else if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc)
            run_seconds = atof(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_server_hits [--server ADDR] [--distird PATH] "
                            "[--seconds S]\n");
            return 2;
        }
    }
    if (server_addr == NULL) {
        if (distird == NULL) {
            ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
            if (n <= 0)
                return 1;
            exe[n] = '\0';
            snprintf(path, sizeof path, "%s/../distird", dirname(exe));
            distird = path;
        }
        server_addr = start_daemon(distird, NULL, NULL);
        if (server_addr == NULL) {
            fprintf(stderr, "bench: cannot start %s\n", distird);
            return 1;
        }
    }
    grpc_init();
    if (build_request() != 0)
        return 1;
    {
        /* Warm-up: the first call computes and stores the result. */
        grpc_channel *ch = open_channel();
        grpc_completion_queue *cq = grpc_completion_queue_create_for_next(NULL);
        Distir__V1__SimulateReply *reply;
        grpc_status_code st = call_once(ch, cq, &reply);
        if (st != GRPC_STATUS_OK || reply == NULL) {
            fprintf(stderr, "bench: warm-up call failed with status %d\n", (int)st);
            errors++;
        } else {
            printf("distird at %s; warm-up call: cache %s, key %.16s...\n", server_addr,
                   reply->cache == DISTIR__V1__CACHE_STATUS__CACHE_HIT ? "hit" : "miss",
                   reply->cache_key);
            distir__v1__simulate_reply__free_unpacked(reply, NULL);
        }
        close_cq(cq);
        grpc_channel_destroy(ch);
    }
    if (errors == 0) {
        errors += run(1);
        errors += run(8);
    }
    grpc_slice_unref(request_slice);
    grpc_shutdown_blocking();
    if (daemon_pid > 0) {
        int rc = stop_daemon();
        if (rc != 0) {
            fprintf(stderr, "bench: distird exited with %d\n", rc);
            errors++;
        }
    }
    return errors ? 1 : 0;
}
