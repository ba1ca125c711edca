/*
 * reply.h: building and reading gRPC byte buffers for distird.
 *
 * A SimulateReply is written directly around the packed SimResult that the
 * worker produced or the cache stored (field 1, length-delimited), so a
 * cache hit is answered with the stored bytes untouched: a hit is bit for bit
 * the reply of the fresh simulation, and nothing is unpacked on the hot path.
 */
#ifndef DISTIRD_REPLY_H
#define DISTIRD_REPLY_H

#include <grpc/byte_buffer.h>
#include <protobuf-c/protobuf-c.h>
#include <stddef.h>
#include <stdint.h>

/*
 * A distir.v1.SimulateReply. result may be NULL (no result field);
 * cache_key NULL or "" and error NULL or "" are omitted, like zero numbers.
 * Destroy the buffer with grpc_byte_buffer_destroy.
 */
grpc_byte_buffer *srv_reply_simulate(const uint8_t *result, size_t result_len, int cache_status,
                                     const char *cache_key, uint32_t index, const char *error,
                                     int error_code);
/* The same reply as one slice (the caller unrefs it), to keep and send many times. */
grpc_slice srv_reply_simulate_slice(const uint8_t *result, size_t result_len, int cache_status,
                                    const char *cache_key, uint32_t index, const char *error,
                                    int error_code);
/* A byte buffer holding a new reference to s (no copy). */
grpc_byte_buffer *srv_reply_from_slice(grpc_slice s);
/* Packs any message into a new byte buffer. */
grpc_byte_buffer *srv_reply_pack(const ProtobufCMessage *msg);

/*
 * Copies a received buffer into one contiguous slice (*out, which the caller
 * releases with grpc_slice_unref). Returns 0, or -1 if the buffer cannot be
 * read (e.g. an unsupported compression).
 */
int srv_buffer_read(grpc_byte_buffer *bb, grpc_slice *out);

#endif
