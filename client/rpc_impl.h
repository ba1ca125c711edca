/*
 * rpc_impl.h: the functions of distir-rpc.so (rpc.c), which rpc_load.c looks
 * up by name: rpc.h's with an rpc_impl_ prefix, same arguments.
 */
#ifndef DISTIR_CLIENT_RPC_IMPL_H
#define DISTIR_CLIENT_RPC_IMPL_H

#include "rpc.h"

int rpc_impl_simulate(const char *server, const Distir__V1__SimulateRequest *req, int timeout_ms,
                      Distir__V1__SimulateReply **reply, di_error *err);
int rpc_impl_server_info(const char *server, int timeout_ms, Distir__V1__ServerInfoReply **reply,
                         di_error *err);
int rpc_impl_search(const char *server, const Distir__V1__SearchRequest *req, int timeout_ms,
                    rpc_search_event_fn on_event, void *ctx, di_error *err);
int rpc_impl_call(const char *server, const char *method, const ProtobufCMessage *req,
                  const ProtobufCMessageDescriptor *reply_desc, int timeout_ms,
                  ProtobufCMessage **reply, di_error *err);

#endif
