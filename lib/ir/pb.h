/*
 * ir/pb.h: the protobuf form of a module (proto/distir.proto, message
 * distir.v1.Module). decode(encode(m)) == m for every module: same arrays,
 * same names, same order.
 */
#ifndef DISTIR_IR_PB_H
#define DISTIR_IR_PB_H

#include "distir.pb-c.h"
#include "ir/ir.h"

/*
 * Decodes untrusted bytes: size limit, depth pre-check, unpack, UTF-8 and
 * enum checks, then conversion with every index bounds-checked against the
 * limits. Does not run the verifier. On success the caller frees *out.
 */
int ir_decode(const uint8_t *data, size_t len, const ir_limits *lim, ir_module **out,
              di_error *err);
/* Converts an already unpacked (and pb_validate'd) message. */
int ir_from_proto(const Distir__V1__Module *pm, const ir_limits *lim, ir_module **out,
                  di_error *err);
/* Encodes m; the caller frees *data with di_free. */
int ir_encode(const ir_module *m, uint8_t **data, size_t *len);
/* Builds a message tree (heap; free with ir_proto_free). */
Distir__V1__Module *ir_to_proto(const ir_module *m);
void ir_proto_free(Distir__V1__Module *pm);

#endif
