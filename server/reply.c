/*
 * reply.c: see reply.h. The SimulateReply encoding follows the protobuf wire
 * format (proto3: fields in number order, zero values omitted); the unit
 * tests decode it with protobuf-c to keep it honest.
 */
#include "reply.h"

#include <grpc/byte_buffer_reader.h>
#include <grpc/slice.h>
#include <string.h>

#include "distir.pb-c.h"

static size_t
varint_size(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static uint8_t *
put_varint(uint8_t *p, uint64_t v)
{
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

static uint8_t *
put_bytes(uint8_t *p, uint8_t tag, const void *data, size_t len)
{
    *p++ = tag;
    p = put_varint(p, len);
    if (len)
        memcpy(p, data, len);
    return p + len;
}

grpc_slice
srv_reply_simulate_slice(const uint8_t *result, size_t result_len, int cache_status,
                         const char *cache_key, uint32_t index, const char *error, int error_code)
{
    size_t keylen = cache_key ? strlen(cache_key) : 0;
    size_t errlen = error ? strlen(error) : 0;
    size_t n = 0;
    if (result != NULL)
        n += 1 + varint_size(result_len) + result_len;
    if (cache_status != 0)
        n += 1 + varint_size((uint64_t)(int64_t)cache_status);
    if (keylen)
        n += 1 + varint_size(keylen) + keylen;
    if (index != 0)
        n += 1 + varint_size(index);
    if (errlen)
        n += 1 + varint_size(errlen) + errlen;
    if (error_code != 0)
        n += 1 + varint_size((uint64_t)(int64_t)error_code);
    grpc_slice s = grpc_slice_malloc(n);
    uint8_t *p = GRPC_SLICE_START_PTR(s);
    if (result != NULL)
        p = put_bytes(p, 0x0a, result, result_len);
    if (cache_status != 0) {
        *p++ = 0x10;
        p = put_varint(p, (uint64_t)(int64_t)cache_status);
    }
    if (keylen)
        p = put_bytes(p, 0x1a, cache_key, keylen);
    if (index != 0) {
        *p++ = 0x20;
        p = put_varint(p, index);
    }
    if (errlen)
        p = put_bytes(p, 0x2a, error, errlen);
    if (error_code != 0) {
        *p++ = 0x30;
        p = put_varint(p, (uint64_t)(int64_t)error_code);
    }
    return s;
}

grpc_byte_buffer *
srv_reply_simulate(const uint8_t *result, size_t result_len, int cache_status,
                   const char *cache_key, uint32_t index, const char *error, int error_code)
{
    grpc_slice s = srv_reply_simulate_slice(result, result_len, cache_status, cache_key, index,
                                            error, error_code);
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
    grpc_slice_unref(s);
    return bb;
}

grpc_byte_buffer *
srv_reply_from_slice(grpc_slice s)
{
    return grpc_raw_byte_buffer_create(&s, 1); /* adds its own reference */
}

grpc_byte_buffer *
srv_reply_pack(const ProtobufCMessage *msg)
{
    size_t n = protobuf_c_message_get_packed_size(msg);
    grpc_slice s = grpc_slice_malloc(n);
    protobuf_c_message_pack(msg, GRPC_SLICE_START_PTR(s));
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
    grpc_slice_unref(s);
    return bb;
}

int
srv_buffer_read(grpc_byte_buffer *bb, grpc_slice *out)
{
    grpc_byte_buffer_reader r;
    if (!grpc_byte_buffer_reader_init(&r, bb))
        return -1;
    *out = grpc_byte_buffer_reader_readall(&r);
    grpc_byte_buffer_reader_destroy(&r);
    return 0;
}
