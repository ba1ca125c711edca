/*
 * fuzz_server_request.c: libFuzzer target for the daemon's request decoder
 * (server/input.c): the bytes of a SimulateRequest or SimulateBatchRequest
 * (the first input byte picks which) through depth and count limits,
 * protobuf conversion, module verification, hardware resolution and strategy
 * normalization. Any input must decode or fail with a code and a message,
 * leaving nothing behind; a decoded request holds a verified module,
 * hardware and at least one candidate. The seed corpus in
 * fuzz/corpus/fuzz_server_request runs with the tests (fuzz/replay.c).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../server/input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    srv_limits lim;
    srv_request req;
    di_error err;
    int kind;
    if (size == 0)
        return 0;
    kind = data[0] & 1 ? SRV_REQ_BATCH : SRV_REQ_SIMULATE;
    ir_limits_default(&lim.ir);
    lim.ir.max_ops = 1u << 14; /* keep one input's work small */
    lim.ir.max_values = 1u << 16;
    lim.max_batch = 16;
    di_error_clear(&err);
    if (srv_request_decode(kind, data + 1, size - 1, &lim, NULL, &req, &err) != 0) {
        if (err.code == 0 || err.msg[0] == '\0' || req.input != NULL || req.cands != NULL)
            abort();
        return 0;
    }
    if (req.input == NULL || req.input->module == NULL || req.input->hw == NULL ||
        req.ncand == 0 || req.cands == NULL)
        abort();
    for (uint32_t i = 0; i < req.ncand; i++)
        if (req.cands[i].rc != 0 && (req.cands[i].error == NULL || req.cands[i].error[0] == '\0'))
            abort();
    srv_request_fini(&req);
    return 0;
}
