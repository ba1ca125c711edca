/*
 * pb.h: checks for untrusted protobuf bytes, run before and after
 * protobuf-c's unpack (which has no recursion limit and accepts invalid
 * UTF-8 and undeclared enum values; see GRPC_NOTES.md 8.3 and 8.4).
 */
#ifndef DISTIR_BASE_PB_H
#define DISTIR_BASE_PB_H

#include <protobuf-c/protobuf-c.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

/*
 * Walks the wire format of buf as message type desc without unpacking it and
 * returns 0 if it is well formed and nested at most max_depth deep
 * (DI_ETOODEEP or DI_EDECODE with a message otherwise). Only fields of
 * message type are descended into.
 */
int pb_check_depth(const ProtobufCMessageDescriptor *desc, const uint8_t *buf, size_t len,
                   int max_depth, di_error *err);

/*
 * Checks an unpacked message recursively: every string is valid UTF-8 and
 * every enum field holds a declared value. Errors name the field path
 * ("functions[0].body.ops[3].kind").
 */
int pb_validate(const ProtobufCMessage *msg, di_error *err);

/*
 * protobuf-c's allocator hook on di_malloc/di_free: messages that protobuf-c
 * allocates through it are subject to fault injection and allocation scopes.
 * Never modified.
 */
extern ProtobufCAllocator pb_allocator;

/*
 * Depth check, unpack (with an allocator on di_malloc that fails beyond
 * max_alloc bytes), then pb_validate. On success *out is the message (free
 * with protobuf_c_message_free_unpacked(*out, &pb_allocator); NULL, the
 * default allocator, is equivalent outside an allocation scope).
 */
int pb_unpack_checked(const ProtobufCMessageDescriptor *desc, const uint8_t *buf, size_t len,
                      int max_depth, ProtobufCMessage **out, di_error *err);

#endif
