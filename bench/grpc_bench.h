/*
 * grpc_bench.h: what the daemon benchmarks share (included by
 * bench_server_*.c; static functions, one copy per benchmark binary): a
 * monotonic clock, a unary call with the gRPC core C API on a client's own
 * channel and completion queue, and starting and stopping a distird on an
 * ephemeral port with a temporary database.
 */
#ifndef DISTIR_BENCH_GRPC_BENCH_H
#define DISTIR_BENCH_GRPC_BENCH_H

#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/time.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "distir.pb-c.h"

static const char *server_addr;

static double
now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/*
 * One unary call of method with the packed request req; returns the gRPC
 * status and, if reply != NULL, the reply's bytes (grpc_empty_slice() when
 * none; the caller unrefs).
 */
static grpc_status_code
call_unary(grpc_channel *ch, grpc_completion_queue *cq, const char *method, grpc_slice req,
           grpc_slice *reply)
{
    grpc_op ops[6];
    grpc_metadata_array mi, mt;
    grpc_byte_buffer *send = grpc_raw_byte_buffer_create(&req, 1), *recv = NULL;
    grpc_status_code status = GRPC_STATUS_UNKNOWN;
    grpc_slice details = grpc_empty_slice();
    gpr_timespec deadline =
        gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(10000, GPR_TIMESPAN));
    grpc_call *call = grpc_channel_create_call(
        ch, NULL, GRPC_PROPAGATE_DEFAULTS, cq,
        grpc_slice_from_static_string(method), NULL, deadline, NULL);
    int tag;
    grpc_metadata_array_init(&mi);
    grpc_metadata_array_init(&mt);
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = send;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &mi;
    ops[4].op = GRPC_OP_RECV_MESSAGE;
    ops[4].data.recv_message.recv_message = &recv;
    ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[5].data.recv_status_on_client.trailing_metadata = &mt;
    ops[5].data.recv_status_on_client.status = &status;
    ops[5].data.recv_status_on_client.status_details = &details;
    if (grpc_call_start_batch(call, ops, 6, &tag, NULL) == GRPC_CALL_OK) {
        for (;;) {
            grpc_event ev =
                grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
            if (ev.type == GRPC_OP_COMPLETE && ev.tag == &tag)
                break;
        }
    }
    if (reply != NULL) {
        *reply = grpc_empty_slice();
        if (status == GRPC_STATUS_OK && recv != NULL) {
            grpc_byte_buffer_reader r;
            if (grpc_byte_buffer_reader_init(&r, recv)) {
                *reply = grpc_byte_buffer_reader_readall(&r);
                grpc_byte_buffer_reader_destroy(&r);
            }
        }
    }
    grpc_byte_buffer_destroy(send);
    if (recv != NULL)
        grpc_byte_buffer_destroy(recv);
    grpc_metadata_array_destroy(&mi);
    grpc_metadata_array_destroy(&mt);
    grpc_slice_unref(details);
    grpc_call_unref(call);
    return status;
}

static grpc_channel *
open_channel(void)
{
    grpc_channel_credentials *cr = grpc_insecure_credentials_create();
    grpc_channel *ch = grpc_channel_create(server_addr, cr, NULL);
    grpc_channel_credentials_release(cr);
    return ch;
}

static void
close_cq(grpc_completion_queue *cq)
{
    grpc_completion_queue_shutdown(cq);
    while (grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
           GRPC_QUEUE_SHUTDOWN) {
    }
    grpc_completion_queue_destroy(cq);
}

static pid_t daemon_pid;
static char daemon_dir[64];

/*
 * Starts distird on an ephemeral port with the extra flags (NULL-terminated,
 * at most 8); returns the address (static storage). With metrics != NULL
 * (size 128) it also passes --metrics-listen 127.0.0.1:0 and reads that
 * address into it.
 */
static const char *
start_daemon(const char *path, char *metrics, const char *const *extra)
{
    static char addr[128];
    int fd[2];
    char db[128];
    snprintf(daemon_dir, sizeof daemon_dir, "/tmp/distird-bench-XXXXXX");
    if (mkdtemp(daemon_dir) == NULL || pipe(fd) != 0)
        return NULL;
    snprintf(db, sizeof db, "%s/bench.db", daemon_dir);
    daemon_pid = fork();
    if (daemon_pid == 0) {
        dup2(fd[1], 1);
        close(fd[0]);
        close(fd[1]);
        const char *argv[24] = {path, "--listen", "127.0.0.1:0", "--db", db, "--log-level", "warn"};
        int n = 7;
        if (metrics != NULL) {
            argv[n++] = "--metrics-listen";
            argv[n++] = "127.0.0.1:0";
        }
        for (int i = 0; extra != NULL && extra[i] != NULL && i < 8; i++)
            argv[n++] = extra[i];
        argv[n] = NULL;
        execv(path, (char *const *)argv);
        _exit(127);
    }
    close(fd[1]);
    FILE *f = fdopen(fd[0], "r");
    char line[256];
    while (f != NULL && fgets(line, sizeof line, f) != NULL) {
        if (metrics != NULL && sscanf(line, "distird metrics on %127s", metrics) == 1)
            continue;
        if (sscanf(line, "distird listening on %127s", addr) == 1) {
            /* The metrics line, when asked for, comes first. */
            fclose(f);
            return addr;
        }
    }
    if (f != NULL)
        fclose(f);
    return NULL;
}

static int
stop_daemon(void)
{
    int status = 0;
    char cmd[128];
    kill(daemon_pid, SIGTERM);
    waitpid(daemon_pid, &status, 0);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", daemon_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "bench: cannot remove %s\n", daemon_dir);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

#endif
