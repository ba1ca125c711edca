/*
 * rpc.h: the CLI's gRPC client for distird (unary calls and the Search stream
 * over gRPC core).
 * Each call opens a channel to `server` ("127.0.0.1:7878"), makes one call
 * with the given deadline, and closes it. On a non-OK status the error's
 * message is "STATUS_NAME: details" and the code is mapped to a DI_E* code.
 */
#ifndef DISTIR_CLIENT_RPC_H
#define DISTIR_CLIENT_RPC_H

#include "base/base.h"
#include "distir.pb-c.h"

int rpc_simulate(const char *server, const Distir__V1__SimulateRequest *req, int timeout_ms,
                 Distir__V1__SimulateReply **reply, di_error *err);
int rpc_server_info(const char *server, int timeout_ms, Distir__V1__ServerInfoReply **reply,
                    di_error *err);
/*
 * The server-streaming Search: calls on_event for every SearchEvent as it
 * arrives (the event is freed after the callback returns); a non-zero return
 * from on_event cancels the call. Returns 0 when the stream ended with OK.
 */
typedef int (*rpc_search_event_fn)(void *ctx, const Distir__V1__SearchEvent *ev);
int rpc_search(const char *server, const Distir__V1__SearchRequest *req, int timeout_ms,
               rpc_search_event_fn on_event, void *ctx, di_error *err);
/* Any unary method ("/distir.v1.CostModel/Compare") with its request and reply types. */
int rpc_call(const char *server, const char *method, const ProtobufCMessage *req,
             const ProtobufCMessageDescriptor *reply_desc, int timeout_ms, ProtobufCMessage **reply,
             di_error *err);
/* Free replies with protobuf_c_message_free_unpacked(&reply->base, NULL). */

#endif
