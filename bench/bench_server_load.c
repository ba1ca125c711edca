/*
 * bench_server_load.c: distird under a sustained mixed load over loopback
 * gRPC: N client threads (64 by default), each with its own channel and
 * completion queue, for S seconds (60 by default), calling back to back
 * in a fixed mix: 7 cache hits (one small module), 2 misses (the same MLP
 * with a batch size never asked before) and one SimulateBatch of 4
 * data-parallel strategies of another new one, per 10 calls. Meanwhile
 * one thread scrapes /metrics every 100 ms (a new TCP connection each time,
 * as Prometheus does) and another samples the daemon's RSS every second.
 *
 *   bench_server_load [--distird PATH] [--clients N] [--seconds S]
 *
 * Targets: zero unexpected errors (any status but OK; RESOURCE_EXHAUSTED
 * from a full queue is counted apart as load shedding), /metrics scrape
 * p99 under 100 ms during the load, RSS flat over the last 30 s (growth
 * under 5%). Figures are printed next to them; the exit status reports
 * errors only, never speed.
 */
#include <arpa/inet.h>
#include <libgen.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>

#include "grpc_bench.h"
#include "ir/ir.h"
#include "ir/pb.h"

#define TARGET_SCRAPE_P99_MS 100.0
#define TARGET_RSS_GROWTH 0.05

/*
 * The MLP of tests/ir/seed001_mlp.dir (forward and backward) with a batch of
 * rows: 8 for the hits, 8 (k + 1) for the k-th miss, so that every miss is
 * a new module of the same small size (the daemon's memory does not grow
 * with the requests' size, only with their number up to its bounds).
 */
static const char module_fmt[] =
    "func @mlp(%%wA: !dist.tensor<4x6xf32, 0>, %%wB: !dist.tensor<6x2xf32, 0>, "
    "%%x: !dist.tensor<%ux4xf32, 0>, %%z: !dist.tensor<%ux2xf32, 0>) -> "
    "(!dist.tensor<%ux2xf32, 0>, !dist.tensor<f32, 0>) {\n"
    "  %%a = \"MatMul\"(%%x, %%wA) : (!dist.tensor<%ux4xf32, 0>, !dist.tensor<4x6xf32, 0>) -> "
    "!dist.tensor<%ux6xf32, 0>\n"
    "  %%y = \"MatMul\"(%%a, %%wB) : (!dist.tensor<%ux6xf32, 0>, !dist.tensor<6x2xf32, 0>) -> "
    "!dist.tensor<%ux2xf32, 0>\n"
    "  %%l = \"MSELoss\"(%%y, %%z) : (!dist.tensor<%ux2xf32, 0>, !dist.tensor<%ux2xf32, 0>) -> "
    "!dist.tensor<f32, 0>\n"
    "  return %%y, %%l : !dist.tensor<%ux2xf32, 0>, !dist.tensor<f32, 0>\n"
    "}\n";

enum { K_HIT, K_MISS, K_BATCH, NKIND };
static const char *const kind_name[NKIND] = {"hit", "miss", "batch"};

static grpc_slice hit_request;
static atomic_uint next_miss = 1;
static atomic_int stop_flag;
static double run_seconds = 60.0;
static char metrics_addr[128];
static pid_t target_pid;

typedef struct client {
    pthread_t thread;
    long calls[NKIND], errors[NKIND], shed[NKIND];
    grpc_status_code first_error;
} client;

/*
 * A SimulateRequest (batch = 0) or SimulateBatchRequest (dp 1, 2, 4, 8) of
 * the MLP with 8 (k + 1) rows on a100-dgx:8.
 */
static grpc_slice
pack_request(unsigned k, int batch)
{
    Distir__V1__HardwareRef ref = DISTIR__V1__HARDWARE_REF__INIT;
    char text[2048];
    unsigned b = 8 * (k + 1);
    ir_module *m = NULL;
    di_error err;
    grpc_slice s;
    snprintf(text, sizeof text, module_fmt, b, b, b, b, b, b, b, b, b, b);
    if (ir_parse(text, strlen(text), &m, &err) != 0) {
        fprintf(stderr, "bench: %s\n", err.msg);
        abort();
    }
    Distir__V1__Module *mod = ir_to_proto(m);
    ref.spec_case = DISTIR__V1__HARDWARE_REF__SPEC_PRESET;
    ref.preset = (char *)"a100-dgx:8";
    if (!batch) {
        Distir__V1__SimulateRequest req = DISTIR__V1__SIMULATE_REQUEST__INIT;
        req.module = mod;
        req.hardware = &ref;
        s = grpc_slice_malloc(distir__v1__simulate_request__get_packed_size(&req));
        distir__v1__simulate_request__pack(&req, GRPC_SLICE_START_PTR(s));
    } else {
        Distir__V1__SimulateBatchRequest req = DISTIR__V1__SIMULATE_BATCH_REQUEST__INIT;
        Distir__V1__Strategy st[4], *sp[4];
        for (int i = 0; i < 4; i++) {
            distir__v1__strategy__init(&st[i]);
            st[i].dp = 1u << i;
            sp[i] = &st[i];
        }
        req.module = mod;
        req.hardware = &ref;
        req.n_strategies = 4;
        req.strategies = sp;
        s = grpc_slice_malloc(distir__v1__simulate_batch_request__get_packed_size(&req));
        distir__v1__simulate_batch_request__pack(&req, GRPC_SLICE_START_PTR(s));
    }
    ir_proto_free(mod);
    ir_module_free(m);
    return s;
}

/* Waits on cq for tag want; notes the completion of *other (the send batch) when seen first. */
static void
wait_tag(grpc_completion_queue *cq, void *want, void *other, int *other_done)
{
    for (;;) {
        grpc_event ev = grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        if (ev.type != GRPC_OP_COMPLETE)
            continue;
        if (ev.tag == other)
            *other_done = 1;
        if (ev.tag == want)
            return;
    }
}

/* A server-streaming call: sends req, reads every message; returns the status. */
static grpc_status_code
call_stream(grpc_channel *ch, grpc_completion_queue *cq, const char *method, grpc_slice req)
{
    grpc_op ops[4];
    grpc_metadata_array mi, mt;
    grpc_byte_buffer *send = grpc_raw_byte_buffer_create(&req, 1), *recv = NULL;
    grpc_status_code status = GRPC_STATUS_UNKNOWN;
    grpc_slice details = grpc_empty_slice();
    gpr_timespec deadline =
        gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(30000, GPR_TIMESPAN));
    grpc_call *call =
        grpc_channel_create_call(ch, NULL, GRPC_PROPAGATE_DEFAULTS, cq,
                                 grpc_slice_from_static_string(method), NULL, deadline, NULL);
    int tag_send, tag_recv, tag_status, sent = 0;
    grpc_metadata_array_init(&mi);
    grpc_metadata_array_init(&mt);
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = send;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &mi;
    if (grpc_call_start_batch(call, ops, 4, &tag_send, NULL) == GRPC_CALL_OK) {
        /* Messages until the stream ends (recv == NULL), then the status. */
        do {
            if (recv != NULL)
                grpc_byte_buffer_destroy(recv);
            recv = NULL;
            memset(ops, 0, sizeof ops);
            ops[0].op = GRPC_OP_RECV_MESSAGE;
            ops[0].data.recv_message.recv_message = &recv;
            if (grpc_call_start_batch(call, ops, 1, &tag_recv, NULL) != GRPC_CALL_OK)
                break;
            wait_tag(cq, &tag_recv, &tag_send, &sent);
        } while (recv != NULL);
        memset(ops, 0, sizeof ops);
        ops[0].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
        ops[0].data.recv_status_on_client.trailing_metadata = &mt;
        ops[0].data.recv_status_on_client.status = &status;
        ops[0].data.recv_status_on_client.status_details = &details;
        if (grpc_call_start_batch(call, ops, 1, &tag_status, NULL) == GRPC_CALL_OK)
            wait_tag(cq, &tag_status, &tag_send, &sent);
        if (!sent)
            wait_tag(cq, &tag_send, NULL, &sent);
    }
    grpc_byte_buffer_destroy(send);
    grpc_metadata_array_destroy(&mi);
    grpc_metadata_array_destroy(&mt);
    grpc_slice_unref(details);
    grpc_call_unref(call);
    return status;
}

static void *
client_main(void *arg)
{
    client *c = arg;
    grpc_channel *ch = open_channel();
    grpc_completion_queue *cq = grpc_completion_queue_create_for_next(NULL);
    for (unsigned i = 0; !atomic_load(&stop_flag); i++) {
        int kind = i % 10 < 7 ? K_HIT : i % 10 < 9 ? K_MISS : K_BATCH;
        grpc_status_code st;
        if (kind == K_HIT) {
            st = call_unary(ch, cq, "/distir.v1.CostModel/Simulate", hit_request, NULL);
        } else {
            grpc_slice req = pack_request(atomic_fetch_add(&next_miss, 1), kind == K_BATCH);
            st = kind == K_MISS
                     ? call_unary(ch, cq, "/distir.v1.CostModel/Simulate", req, NULL)
                     : call_stream(ch, cq, "/distir.v1.CostModel/SimulateBatch", req);
            grpc_slice_unref(req);
        }
        c->calls[kind]++;
        if (st == GRPC_STATUS_RESOURCE_EXHAUSTED) {
            c->shed[kind]++;
        } else if (st != GRPC_STATUS_OK) {
            if (c->errors[0] + c->errors[1] + c->errors[2] == 0)
                c->first_error = st;
            c->errors[kind]++;
        }
    }
    close_cq(cq);
    grpc_channel_destroy(ch);
    return NULL;
}

/* ---- /metrics scraper ---- */

typedef struct scraper {
    pthread_t thread;
    double *ms;
    size_t n, cap;
    long failures;
} scraper;

/* One GET /metrics on a new connection; returns its duration in ms, or -1. */
static double
scrape_once(void)
{
    char host[128], buf[65536];
    int port = 0;
    struct sockaddr_in sa;
    struct timeval tv = {5, 0};
    const char *colon = strrchr(metrics_addr, ':');
    if (colon == NULL)
        return -1;
    snprintf(host, sizeof host, "%.*s", (int)(colon - metrics_addr), metrics_addr);
    port = atoi(colon + 1);
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1)
        return -1;
    double t0 = now_s();
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        close(fd);
        return -1;
    }
    static const char get[] = "GET /metrics HTTP/1.0\r\nHost: bench\r\n\r\n";
    if (write(fd, get, sizeof get - 1) != (ssize_t)(sizeof get - 1)) {
        close(fd);
        return -1;
    }
    size_t total = 0;
    int ok = 0;
    for (;;) {
        ssize_t r = read(fd, buf + (total < 64 ? total : 64), sizeof buf - 64);
        if (r <= 0) {
            ok = r == 0 && total > 0;
            break;
        }
        if (total == 0 && strncmp(buf, "HTTP/1.", 7) != 0)
            break;
        total += (size_t)r;
    }
    close(fd);
    return ok ? (now_s() - t0) * 1e3 : -1;
}

static void *
scraper_main(void *arg)
{
    scraper *s = arg;
    while (!atomic_load(&stop_flag)) {
        double ms = scrape_once();
        if (ms < 0) {
            s->failures++;
        } else {
            if (s->n == s->cap) {
                s->cap = s->cap ? 2 * s->cap : 1024;
                s->ms = realloc(s->ms, s->cap * sizeof *s->ms);
                if (s->ms == NULL)
                    abort();
            }
            s->ms[s->n++] = ms;
        }
        usleep(100000);
    }
    return NULL;
}

/* The daemon's resident set in KiB (/proc/PID/status VmRSS), or -1. */
static long
rss_kib(pid_t pid)
{
    char path[64], line[256];
    long kib = -1;
    snprintf(path, sizeof path, "/proc/%ld/status", (long)pid);
    FILE *f = fopen(path, "r");
    while (f != NULL && fgets(line, sizeof line, f) != NULL)
        if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
            break;
    if (f != NULL)
        fclose(f);
    return kib;
}

static int
cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int
main(int argc, char **argv)
{
    const char *distird = NULL;
    char exe[PATH_MAX], path[PATH_MAX + 16];
    int nclient = 64;
    long errors = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--distird") == 0 && i + 1 < argc)
            distird = argv[++i];
        else if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc)
            run_seconds = atof(argv[++i]);
        else if (strcmp(argv[i], "--clients") == 0 && i + 1 < argc)
            nclient = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_server_load [--distird PATH] [--clients N] "
                            "[--seconds S]\n");
            return 2;
        }
    }
    if (nclient < 1 || nclient > 1024 || run_seconds <= 0) {
        fprintf(stderr, "bench: --clients 1..1024, --seconds > 0\n");
        return 2;
    }
    if (distird == NULL) {
        ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
        if (n <= 0)
            return 1;
        exe[n] = '\0';
        snprintf(path, sizeof path, "%s/../distird", dirname(exe));
        distird = path;
    }
    static const char *const extra[] = {"--max-queue", "100000", NULL};
    server_addr = start_daemon(distird, metrics_addr, extra);
    if (server_addr == NULL || metrics_addr[0] == '\0') {
        fprintf(stderr, "bench: cannot start %s with metrics\n", distird);
        return 1;
    }
    target_pid = daemon_pid;
    grpc_init();
    hit_request = pack_request(0, 0);
    {
        grpc_channel *ch = open_channel();
        grpc_completion_queue *cq = grpc_completion_queue_create_for_next(NULL);
        if (call_unary(ch, cq, "/distir.v1.CostModel/Simulate", hit_request, NULL) !=
            GRPC_STATUS_OK)
            errors++;
        close_cq(cq);
        grpc_channel_destroy(ch);
    }
    printf("distird at %s (metrics %s): %d clients x %.0f s, 7 hits : 2 misses : 1 batch of 4\n",
           server_addr, metrics_addr, nclient, run_seconds);
    fflush(stdout);

    client *cs = calloc((size_t)nclient, sizeof *cs);
    scraper sc;
    memset(&sc, 0, sizeof sc);
    int nsample = (int)run_seconds + 2;
    long *rss = calloc((size_t)nsample, sizeof *rss);
    double t0 = now_s();
    for (int i = 0; i < nclient; i++)
        pthread_create(&cs[i].thread, NULL, client_main, &cs[i]);
    pthread_create(&sc.thread, NULL, scraper_main, &sc);
    int ns = 0;
    while (now_s() - t0 < run_seconds && ns < nsample) {
        usleep(1000000);
        rss[ns++] = rss_kib(target_pid);
    }
    atomic_store(&stop_flag, 1);
    for (int i = 0; i < nclient; i++)
        pthread_join(cs[i].thread, NULL);
    pthread_join(sc.thread, NULL);
    double wall = now_s() - t0;

    long calls[NKIND] = {0}, errs[NKIND] = {0}, shed[NKIND] = {0};
    grpc_status_code first = GRPC_STATUS_OK;
    for (int i = 0; i < nclient; i++)
        for (int k = 0; k < NKIND; k++) {
            calls[k] += cs[i].calls[k];
            errs[k] += cs[i].errors[k];
            shed[k] += cs[i].shed[k];
            if (first == GRPC_STATUS_OK && cs[i].errors[k])
                first = cs[i].first_error;
        }
    for (int k = 0; k < NKIND; k++) {
        printf("%-5s calls=%ld (%.0f/s) unexpected_errors=%ld shed=%ld\n", kind_name[k], calls[k],
               (double)calls[k] / wall, errs[k], shed[k]);
        errors += errs[k];
    }
    if (first != GRPC_STATUS_OK)
        printf("first unexpected status: %d\n", (int)first);
    qsort(sc.ms, sc.n, sizeof *sc.ms, cmp_double);
    double p50 = sc.n ? sc.ms[sc.n / 2] : 0, p99 = sc.n ? sc.ms[(size_t)((double)sc.n * 0.99)] : 0,
           mx = sc.n ? sc.ms[sc.n - 1] : 0;
    printf("target: /metrics p99 under %.0f ms during the load; measured: %zu scrapes, %ld failed, "
           "p50 %.1f ms, p99 %.1f ms, max %.1f ms: %s\n",
           TARGET_SCRAPE_P99_MS, sc.n, sc.failures, p50, p99, mx,
           sc.n > 0 && sc.failures == 0 && p99 < TARGET_SCRAPE_P99_MS ? "met" : "missed");
    /* RSS over the last 30 s (or the last half of a shorter run). */
    int from = ns > 30 ? ns - 30 : ns / 2;
    long lo = -1, hi = -1;
    for (int i = from; i < ns; i++) {
        if (rss[i] < 0)
            continue;
        lo = lo < 0 || rss[i] < lo ? rss[i] : lo;
        hi = hi < 0 || rss[i] > hi ? rss[i] : hi;
    }
    double growth = lo > 0 ? (double)(hi - lo) / (double)lo : 1;
    printf("target: RSS flat over the last 30 s (growth under %.0f%%); measured: %ld MiB at 1 s, "
           "%ld..%ld MiB over the last %d s (%.1f%%): %s\n",
           TARGET_RSS_GROWTH * 100, ns > 0 ? rss[0] >> 10 : -1, lo >> 10, hi >> 10, ns - from,
           growth * 100, growth < TARGET_RSS_GROWTH ? "met" : "missed");
    printf("target: zero unexpected errors; measured: %ld\n", errors);
    free(sc.ms);
    free(rss);
    free(cs);
    grpc_slice_unref(hit_request);
    grpc_shutdown_blocking();
    int rc = stop_daemon();
    if (rc != 0) {
        fprintf(stderr, "bench: distird exited with %d\n", rc);
        errors++;
    }
    return errors ? 1 : 0;
}
