/*
 * fuzz_strategy.c: libFuzzer target for the strategy decoder and the
 * transforms on hostile strategies (the daemon applies whatever Strategy a
 * client sends): the bytes are a distir.v1.Strategy, decoded and normalized
 * by strategy_from_proto, then applied to a small GPT (4 layers, with
 * dist.* annotations) and a small MLP. Any strategy must either transform
 * into a module that verifies, with a layout whose pieces name existing
 * groups, or fail with a code and a message. Degrees, stages and
 * microbatches are capped so that one input stays small. The seed corpus
 * in fuzz/corpus/fuzz_strategy runs with the tests (fuzz/replay.c).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "distir.pb-c.h"
#include "ir/ir.h"
#include "models/models.h"
#include "strategy/strategy.h"
#include "xform/xform.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static ir_module *models[2];

static void
build_models(void)
{
    models_gpt g;
    models_mlp p;
    di_error err;
    models_gpt_init(&g);
    g.layers = 4;
    g.hidden = 16;
    g.heads = 4;
    g.seq = 4;
    g.vocab = 11;
    g.batch = 8;
    models_mlp_init(&p);
    p.layers = 4;
    p.hidden = 8;
    p.batch = 16;
    if (models_gpt_build(&g, &models[0], &err) != 0 || models_mlp_build(&p, &models[1], &err) != 0)
        abort();
}

/* Keeps one input's work small: every degree and count bounded. */
static int
small(const strategy *s)
{
    uint64_t dev = 0;
    if (s->pp > 8 || s->microbatches > 16 || s->virtual_stages > 4 || s->nstages > 8 ||
        s->ntp_layers > 64 || s->dp > 16 || s->tp > 16)
        return 0;
    for (uint32_t g = 0; g < s->nstages; g++) {
        if (s->stages[g].dp > 16 || s->stages[g].tp > 16)
            return 0;
        dev += (uint64_t)(s->stages[g].dp ? s->stages[g].dp : 1) *
               (s->stages[g].tp ? s->stages[g].tp : 1);
    }
    return dev <= 64 && (uint64_t)s->dp * s->tp * s->pp <= 64;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    Distir__V1__Strategy *p;
    strategy s;
    di_error err;
    if (models[0] == NULL)
        build_models();
    p = distir__v1__strategy__unpack(NULL, size, data);
    if (p == NULL)
        return 0;
    di_error_clear(&err);
    if (strategy_from_proto(p, &s, &err) != 0) {
        if (err.code == 0 || err.msg[0] == '\0')
            abort();
    } else if (small(&s)) {
        for (int k = 0; k < 2; k++) {
            ir_module *out = NULL;
            xform_layout *lay = NULL;
            di_error_clear(&err);
            if (xform_apply_layout(models[k], &s, NULL, &out, &lay, &err) != 0) {
                if (err.code == 0 || err.msg[0] == '\0' || out != NULL || lay != NULL)
                    abort();
                continue;
            }
            if (ir_verify(out, &err) != 0)
                abort();
            for (uint32_t i = 0; i < lay->nargs; i++)
                if (lay->args[i].stage >= lay->ngroup)
                    abort();
            for (uint32_t i = 0; i < lay->nresults; i++)
                if (lay->results[i].stage >= lay->ngroup)
                    abort();
            xform_layout_free(lay);
            ir_module_free(out);
        }
    }
    strategy_fini(&s);
    distir__v1__strategy__free_unpacked(p, NULL);
    return 0;
}
