/*
 * fuzz_request.c: libFuzzer target for the request decoder the daemon
 * uses (lib/request): the bytes of a SimulateRequest or SimulateBatchRequest
 * (the first input byte picks which) through depth and count limits,
 * protobuf conversion, module verification, hardware resolution and strategy
 * normalization. Any input must decode or fail with a code and a message,
 * leaving nothing behind; a decoded request holds a verified module,
 * hardware and at least one candidate. The seed corpus in
 * fuzz/corpus/fuzz_request runs with the tests (fuzz/replay.c).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "request/request.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A candidate's strategy is normalized: normalizing it again changes nothing. */
static int
normalized(const strategy *s)
{
    strategy t;
    di_sha256 h;
    di_hash a, b;
    int ok;
    strategy_copy(&t, s);
    ok = strategy_normalize(&t, NULL) == 0;
    di_sha256_init(&h);
    strategy_hash(s, &h);
    di_sha256_final(&h, &a);
    di_sha256_init(&h);
    strategy_hash(&t, &h);
    di_sha256_final(&h, &b);
    strategy_fini(&t);
    return ok && memcmp(a.b, b.b, sizeof a.b) == 0;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    request_limits lim;
    request req;
    di_error err;
    int kind;
    if (size == 0)
        return 0;
    kind = data[0] & 1 ? REQUEST_BATCH : REQUEST_SIMULATE;
    memset(&lim, 0, sizeof lim);
    ir_limits_default(&lim.ir);
    lim.max_job_bytes = (uint64_t)1 << 30;
    lim.ir.max_ops = 1u << 14; /* keep one input's work small */
    lim.ir.max_values = 1u << 16;
    lim.max_batch = 16;
    di_error_clear(&err);
    if (request_decode(kind, data + 1, size - 1, &lim, NULL, &req, &err) != 0) {
        if (err.code == 0 || err.msg[0] == '\0' || req.input != NULL || req.cands != NULL)
            abort();
        return 0;
    }
    if (req.input == NULL || req.input->module == NULL || req.input->hw == NULL ||
        req.ncand == 0 || req.cands == NULL)
        abort();
    for (uint32_t i = 0; i < req.ncand; i++) {
        const request_candidate *c = &req.cands[i];
        if (c->rc != 0 && (c->error == NULL || c->error[0] == '\0'))
            abort();
        if (c->rc == 0 && !normalized(&c->strategy))
            abort();
    }
    request_fini(&req);
    return 0;
}
