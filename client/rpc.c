/*
 * rpc.c: the CLI's gRPC core client for distird (rpc.h), built as the shared
 * object distir-rpc.so that rpc_load.c opens on the first call, so that a
 * command without --server never loads gRPC. Its functions are the rpc_*
 * of rpc.h with an rpc_impl_ prefix; the library and protobuf-c symbols it
 * needs come from the distir executable (linked with --export-dynamic).
 * Every call is one
 * batch of six ops (send initial metadata, send message, close from client,
 * receive initial metadata, receive message, receive status) on its own
 * channel and completion queue, torn down before returning, with
 * grpc_init/grpc_shutdown_blocking around it, and a wait for gRPC's threads to
 * be gone, so the CLI holds no gRPC state (and no gRPC thread: a process may
 * exit right after) between
 * calls. Replies are untrusted bytes like any other: they go through the
 * depth-checked unpack.
 */
#include "rpc_impl.h"

#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/grpc_status.h"
#include "base/pb.h"

#define RPC_MAX_REPLY_BYTES (1 << 30) /* results with memory timelines can be large */
#define RPC_REPLY_DEPTH 16

/* The reverse of the daemon's mapping (DI_E* to gRPC status in distird), for exit paths. */
static int
code_from_status(grpc_status_code s)
{
    switch (s) {
    case GRPC_STATUS_OK:
        return 0;
    case GRPC_STATUS_INVALID_ARGUMENT:
    case GRPC_STATUS_FAILED_PRECONDITION:
    case GRPC_STATUS_OUT_OF_RANGE:
        return DI_EINVAL;
    case GRPC_STATUS_RESOURCE_EXHAUSTED:
        return DI_ETOOBIG;
    case GRPC_STATUS_UNIMPLEMENTED:
        return DI_EUNSUPPORTED;
    case GRPC_STATUS_NOT_FOUND:
        return DI_ENOTFOUND;
    case GRPC_STATUS_ALREADY_EXISTS:
        return DI_EEXISTS;
    case GRPC_STATUS_CANCELLED:
    case GRPC_STATUS_DEADLINE_EXCEEDED:
        return DI_ECANCELLED;
    case GRPC_STATUS_UNAVAILABLE:
        return DI_EIO;
    case GRPC_STATUS_UNAUTHENTICATED:
    case GRPC_STATUS_PERMISSION_DENIED:
        return DI_EINVAL;
    case GRPC_STATUS_DATA_LOSS:
        return DI_ECORRUPT;
    default:
        return DI_EINTERNAL;
    }
}

#define PEM_MAX ((size_t)1 << 24) /* bytes of a PEM file */

static const char *
env(const char *name)
{
    const char *v = getenv(name);
    return v != NULL && v[0] != '\0' ? v : NULL;
}

/*
 * The channel credentials: TLS when DISTIR_TLS_CA (the server's CA) or a
 * client certificate (DISTIR_TLS_CERT and DISTIR_TLS_KEY, for mutual TLS) is
 * given (the CLI's --tls-ca, --tls-cert, --tls-key set them), else
 * plaintext. NULL with err set when a file cannot be read.
 */
static grpc_channel_credentials *
channel_creds(di_error *err)
{
    const char *ca = env("DISTIR_TLS_CA"), *cert = env("DISTIR_TLS_CERT"),
               *key = env("DISTIR_TLS_KEY");
    char *ca_pem = NULL, *cert_pem = NULL, *key_pem = NULL;
    grpc_channel_credentials *c = NULL;
    if (ca == NULL && cert == NULL && key == NULL)
        return grpc_insecure_credentials_create();
    if ((cert == NULL) != (key == NULL)) {
        di_error_set(err, DI_EINVAL, "a client certificate needs --tls-cert and --tls-key");
        return NULL;
    }
    if ((ca == NULL || (ca_pem = di_read_text(ca, PEM_MAX, "--tls-ca", err)) != NULL) &&
        (cert == NULL || ((cert_pem = di_read_text(cert, PEM_MAX, "--tls-cert", err)) != NULL &&
                          (key_pem = di_read_text(key, PEM_MAX, "--tls-key", err)) != NULL))) {
        grpc_ssl_pem_key_cert_pair pair = {key_pem, cert_pem};
        c = grpc_ssl_credentials_create(ca_pem, cert ? &pair : NULL, NULL, NULL);
        if (c == NULL)
            di_error_set(err, DI_EINVAL, "TLS: gRPC refused the certificates");
    }
    di_free(ca_pem);
    di_free(cert_pem);
    di_free(key_pem);
    return c;
}

/*
 * The initial metadata of every call: "authorization: Bearer TOKEN" when
 * DISTIR_TOKEN (or --token) is set. *md stays valid while the slices live.
 */
static size_t
call_metadata(grpc_metadata *md)
{
    const char *token = env("DISTIR_TOKEN");
    char buf[1024];
    if (token == NULL)
        return 0;
    memset(md, 0, sizeof *md);
    snprintf(buf, sizeof buf, "Bearer %s", token);
    md->key = grpc_slice_from_static_string("authorization");
    md->value = grpc_slice_from_copied_string(buf);
    return 1;
}

/*
 * A channel to server (replies up to RPC_MAX_REPLY_BYTES, requests of any
 * size), a completion queue and a call of method with timeout_ms (0: none);
 * NULL with err set (and nothing open) when the credentials cannot be made.
 */
/* Threads of this process (Linux: /proc/self/task), or 0 when unknown. */
static int
count_threads(void)
{
    DIR *d = opendir("/proc/self/task");
    struct dirent *e;
    int n = 0;
    if (d == NULL)
        return 0;
    while ((e = readdir(d)) != NULL)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

static int threads_before; /* before grpc_init: the CLI's own */

/*
 * grpc_shutdown_blocking, then a wait (10 s at most) until gRPC's threads
 * have exited, not only been told to: gRPC 1.51 lets some finish after it
 * returns, and a process that exits while one is half torn down can crash
 * at exit (LeakSanitizer's final scan did, about one remote search in ten).
 */
static void
grpc_done(void)
{
    grpc_shutdown_blocking();
    for (int i = 0; i < 10000 && threads_before > 0 && count_threads() > threads_before; i++) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
}

static grpc_call *
open_call(const char *server, const char *method, int timeout_ms, grpc_channel **ch,
          grpc_completion_queue **cq, di_error *err)
{
    grpc_arg args[2];
    grpc_channel_args cargs = {2, args};
    grpc_channel_credentials *creds;
    gpr_timespec deadline;
    threads_before = count_threads();
    grpc_init();
    creds = channel_creds(err);
    if (creds == NULL) {
        grpc_done();
        *ch = NULL;
        *cq = NULL;
        return NULL;
    }
    memset(args, 0, sizeof args);
    args[0].type = GRPC_ARG_INTEGER;
    args[0].key = (char *)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
    args[0].value.integer = RPC_MAX_REPLY_BYTES;
    args[1].type = GRPC_ARG_INTEGER;
    args[1].key = (char *)GRPC_ARG_MAX_SEND_MESSAGE_LENGTH;
    args[1].value.integer = -1;
    *ch = grpc_channel_create(server, creds, &cargs);
    grpc_channel_credentials_release(creds);
    *cq = grpc_completion_queue_create_for_next(NULL);
    deadline = timeout_ms > 0 ? gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                             gpr_time_from_millis(timeout_ms, GPR_TIMESPAN))
                              : gpr_inf_future(GPR_CLOCK_REALTIME);
    return grpc_channel_create_call(*ch, NULL, GRPC_PROPAGATE_DEFAULTS, *cq,
                                    grpc_slice_from_static_string(method), NULL, deadline, NULL);
}

static int
rpc_unary(const char *server, const char *method, const ProtobufCMessage *req,
          const ProtobufCMessageDescriptor *reply_desc, int timeout_ms, ProtobufCMessage **reply,
          di_error *err)
{
    grpc_channel *ch;
    grpc_completion_queue *cq;
    grpc_call *call;
    grpc_metadata_array md_initial, md_trailing;
    grpc_byte_buffer *send_bb, *recv_bb = NULL;
    grpc_status_code status = GRPC_STATUS_UNKNOWN;
    grpc_slice details = grpc_empty_slice();
    const char *error_string = NULL;
    grpc_op ops[6];
    grpc_call_error e;
    int rc = 0;
    int tag;

    *reply = NULL;
    call = open_call(server, method, timeout_ms, &ch, &cq, err);
    if (call == NULL)
        return err ? err->code : DI_EINVAL;
    grpc_metadata auth;
    size_t nauth = call_metadata(&auth);

    {
        size_t n = protobuf_c_message_get_packed_size(req);
        grpc_slice s = grpc_slice_malloc(n);
        protobuf_c_message_pack(req, GRPC_SLICE_START_PTR(s));
        send_bb = grpc_raw_byte_buffer_create(&s, 1);
        grpc_slice_unref(s);
    }
    grpc_metadata_array_init(&md_initial);
    grpc_metadata_array_init(&md_trailing);
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[0].data.send_initial_metadata.count = nauth;
    ops[0].data.send_initial_metadata.metadata = nauth ? &auth : NULL;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = send_bb;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &md_initial;
    ops[4].op = GRPC_OP_RECV_MESSAGE;
    ops[4].data.recv_message.recv_message = &recv_bb;
    ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[5].data.recv_status_on_client.trailing_metadata = &md_trailing;
    ops[5].data.recv_status_on_client.status = &status;
    ops[5].data.recv_status_on_client.status_details = &details;
    ops[5].data.recv_status_on_client.error_string = &error_string;
    e = grpc_call_start_batch(call, ops, 6, &tag, NULL);
    if (e != GRPC_CALL_OK) {
        rc = di_error_set(err, DI_EINTERNAL, "cannot start the call: %s",
                          grpc_call_error_to_string(e));
    } else {
        for (;;) {
            grpc_event ev =
                grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
            if (ev.type == GRPC_OP_COMPLETE && ev.tag == &tag)
                break;
        }
        if (status != GRPC_STATUS_OK) {
            char *d = grpc_slice_to_c_string(details);
            rc = di_error_set(err, code_from_status(status), "%s: %s",
                              di_grpc_status_name((int)status),
                              d[0] ? d : (error_string ? error_string : "no details"));
            gpr_free(d);
        } else if (recv_bb == NULL) {
            rc = di_error_set(err, DI_EDECODE, "the server sent no reply message");
        } else {
            grpc_byte_buffer_reader r;
            if (!grpc_byte_buffer_reader_init(&r, recv_bb)) {
                rc = di_error_set(err, DI_EDECODE, "cannot read the reply");
            } else {
                grpc_slice s = grpc_byte_buffer_reader_readall(&r);
                grpc_byte_buffer_reader_destroy(&r);
                rc = pb_unpack_checked(reply_desc, GRPC_SLICE_START_PTR(s), GRPC_SLICE_LENGTH(s),
                                       RPC_REPLY_DEPTH, reply, err);
                if (rc != 0)
                    di_error_prefix(err, "bad reply");
                grpc_slice_unref(s);
            }
        }
    }

    grpc_byte_buffer_destroy(send_bb);
    if (recv_bb != NULL)
        grpc_byte_buffer_destroy(recv_bb);
    grpc_metadata_array_destroy(&md_initial);
    grpc_metadata_array_destroy(&md_trailing);
    grpc_slice_unref(details);
    gpr_free((void *)error_string);
    if (nauth)
        grpc_slice_unref(auth.value);
    grpc_call_unref(call);
    grpc_completion_queue_shutdown(cq);
    for (;;) {
        grpc_event ev = grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        if (ev.type == GRPC_QUEUE_SHUTDOWN)
            break;
    }
    grpc_completion_queue_destroy(cq);
    grpc_channel_destroy(ch);
    grpc_done();
    return rc;
}

int
rpc_impl_simulate(const char *server, const Distir__V1__SimulateRequest *req, int timeout_ms,
                  Distir__V1__SimulateReply **reply, di_error *err)
{
    ProtobufCMessage *m;
    int rc = rpc_unary(server, "/distir.v1.CostModel/Simulate", &req->base,
                       &distir__v1__simulate_reply__descriptor, timeout_ms, &m, err);
    *reply = rc == 0 ? (Distir__V1__SimulateReply *)m : NULL;
    return rc;
}

int
rpc_impl_call(const char *server, const char *method, const ProtobufCMessage *req,
              const ProtobufCMessageDescriptor *reply_desc, int timeout_ms,
              ProtobufCMessage **reply, di_error *err)
{
    return rpc_unary(server, method, req, reply_desc, timeout_ms, reply, err);
}

int
rpc_impl_server_info(const char *server, int timeout_ms, Distir__V1__ServerInfoReply **reply,
                     di_error *err)
{
    Distir__V1__ServerInfoRequest req = DISTIR__V1__SERVER_INFO_REQUEST__INIT;
    ProtobufCMessage *m;
    int rc = rpc_unary(server, "/distir.v1.CostModel/ServerInfo", &req.base,
                       &distir__v1__server_info_reply__descriptor, timeout_ms, &m, err);
    *reply = rc == 0 ? (Distir__V1__ServerInfoReply *)m : NULL;
    return rc;
}

/* Waits for the completion of tag on cq (the only tag outstanding). */
static void
wait_tag(grpc_completion_queue *cq, void *tag)
{
    for (;;) {
        grpc_event ev = grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        if (ev.type == GRPC_OP_COMPLETE && ev.tag == tag)
            return;
    }
}

/*
 * Search: one batch sends the request and closes the client side, then one
 * RECV_MESSAGE batch at a time until the stream ends (a NULL message), then
 * RECV_STATUS_ON_CLIENT.
 */
int
rpc_impl_search(const char *server, const Distir__V1__SearchRequest *req, int timeout_ms,
                rpc_search_event_fn on_event, void *ctx, di_error *err)
{
    grpc_channel *ch;
    grpc_completion_queue *cq;
    grpc_call *call;
    grpc_metadata_array md_initial, md_trailing;
    grpc_byte_buffer *send_bb;
    grpc_status_code status = GRPC_STATUS_UNKNOWN;
    grpc_slice details = grpc_empty_slice();
    const char *error_string = NULL;
    grpc_op ops[4];
    grpc_call_error e;
    int rc = 0, stopped = 0;
    int tag;

    call = open_call(server, "/distir.v1.CostModel/Search", timeout_ms, &ch, &cq, err);
    if (call == NULL)
        return err ? err->code : DI_EINVAL;
    grpc_metadata auth;
    size_t nauth = call_metadata(&auth);
    {
        size_t n = protobuf_c_message_get_packed_size(&req->base);
        grpc_slice s = grpc_slice_malloc(n);
        protobuf_c_message_pack(&req->base, GRPC_SLICE_START_PTR(s));
        send_bb = grpc_raw_byte_buffer_create(&s, 1);
        grpc_slice_unref(s);
    }
    grpc_metadata_array_init(&md_initial);
    grpc_metadata_array_init(&md_trailing);
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[0].data.send_initial_metadata.count = nauth;
    ops[0].data.send_initial_metadata.metadata = nauth ? &auth : NULL;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = send_bb;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &md_initial;
    e = grpc_call_start_batch(call, ops, 4, &tag, NULL);
    if (e != GRPC_CALL_OK) {
        rc = di_error_set(err, DI_EINTERNAL, "cannot start the call: %s",
                          grpc_call_error_to_string(e));
        goto out;
    }
    wait_tag(cq, &tag);
    for (;;) {
        grpc_byte_buffer *recv_bb = NULL;
        memset(ops, 0, sizeof ops);
        ops[0].op = GRPC_OP_RECV_MESSAGE;
        ops[0].data.recv_message.recv_message = &recv_bb;
        e = grpc_call_start_batch(call, ops, 1, &tag, NULL);
        if (e != GRPC_CALL_OK) {
            rc =
                di_error_set(err, DI_EINTERNAL, "cannot receive: %s", grpc_call_error_to_string(e));
            goto out;
        }
        wait_tag(cq, &tag);
        if (recv_bb == NULL)
            break; /* the stream ended; the status follows */
        {
            grpc_byte_buffer_reader r;
            ProtobufCMessage *m = NULL;
            int stop;
            if (!grpc_byte_buffer_reader_init(&r, recv_bb)) {
                grpc_byte_buffer_destroy(recv_bb);
                rc = di_error_set(err, DI_EDECODE, "cannot read an event");
                grpc_call_cancel(call, NULL);
                stopped = 1;
                break;
            }
            grpc_slice s = grpc_byte_buffer_reader_readall(&r);
            grpc_byte_buffer_reader_destroy(&r);
            grpc_byte_buffer_destroy(recv_bb);
            rc = pb_unpack_checked(&distir__v1__search_event__descriptor, GRPC_SLICE_START_PTR(s),
                                   GRPC_SLICE_LENGTH(s), RPC_REPLY_DEPTH, &m, err);
            grpc_slice_unref(s);
            if (rc != 0) {
                di_error_prefix(err, "bad event");
                grpc_call_cancel(call, NULL);
                stopped = 1;
                break;
            }
            stop = on_event(ctx, (const Distir__V1__SearchEvent *)m);
            protobuf_c_message_free_unpacked(m, NULL);
            if (stop) {
                rc = di_error_set(err, DI_ECANCELLED, "cancelled by the client");
                grpc_call_cancel(call, NULL);
                stopped = 1;
                break;
            }
        }
    }
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[0].data.recv_status_on_client.trailing_metadata = &md_trailing;
    ops[0].data.recv_status_on_client.status = &status;
    ops[0].data.recv_status_on_client.status_details = &details;
    ops[0].data.recv_status_on_client.error_string = &error_string;
    e = grpc_call_start_batch(call, ops, 1, &tag, NULL);
    if (e == GRPC_CALL_OK)
        wait_tag(cq, &tag);
    if (!stopped && status != GRPC_STATUS_OK) {
        char *d = grpc_slice_to_c_string(details);
        rc = di_error_set(err, code_from_status(status), "%s: %s", di_grpc_status_name((int)status),
                          d[0] ? d : (error_string ? error_string : "no details"));
        gpr_free(d);
    }
out:
    grpc_byte_buffer_destroy(send_bb);
    grpc_metadata_array_destroy(&md_initial);
    grpc_metadata_array_destroy(&md_trailing);
    grpc_slice_unref(details);
    gpr_free((void *)error_string);
    if (nauth)
        grpc_slice_unref(auth.value);
    grpc_call_unref(call);
    grpc_completion_queue_shutdown(cq);
    for (;;) {
        grpc_event ev = grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        if (ev.type == GRPC_QUEUE_SHUTDOWN)
            break;
    }
    grpc_completion_queue_destroy(cq);
    grpc_channel_destroy(ch);
    grpc_done();
    return rc;
}
