/*
 * request.c: the request pipeline, the cache key and the strategy's
 * application of request.h. Counting ops and values on the unpacked message
 * before conversion keeps an over-limit module from being built at all; the
 * depth pre-check has already bounded the recursion here.
 */
#include "request/request.h"
#include "sim/sim.h"

#include <stdio.h>
#include <string.h>

#include "base/pb.h"
#include "distir.pb-c.h"
#include "ir/pb.h"
#include "models/models.h"
#include "xform/xform.h"

/* Bump when the encoding of the key changes (request.h). */
#define KEY_DOMAIN "distir.cache.v3"

#define HWCACHE_MAX 64

typedef struct hwcache_entry {
    char *name;
    hw_model *hw;
    di_hash hash;
} hwcache_entry;

struct request_hwcache {
    hwcache_entry e[HWCACHE_MAX];
    unsigned n;
};

request_hwcache *
request_hwcache_new(void)
{
    return di_xcalloc(1, sizeof(request_hwcache));
}

void
request_hwcache_free(request_hwcache *hc)
{
    if (hc == NULL)
        return;
    for (unsigned i = 0; i < hc->n; i++) {
        di_free(hc->e[i].name);
        hw_free(hc->e[i].hw);
    }
    di_free(hc);
}

void
request_input_ref(request_input *in)
{
    in->refs++;
}

void
request_input_unref(request_input *in)
{
    if (in == NULL || --in->refs > 0)
        return;
    ir_module_free(in->module);
    hw_free(in->hw_owned);
    di_free(in);
}

void
request_fini(request *r)
{
    for (uint32_t i = 0; i < r->ncand; i++) {
        strategy_fini(&r->cands[i].strategy);
        di_free(r->cands[i].error);
    }
    di_free(r->cands);
    request_input_unref(r->input);
    memset(r, 0, sizeof *r);
}

/* Counts ops in a region and its bodies; stops counting past max. */
static uint64_t
count_ops(const Distir__V1__Region *r, uint64_t n, uint64_t max)
{
    if (r == NULL)
        return n;
    for (size_t i = 0; i < r->n_ops && n <= max; i++) {
        n++;
        n = count_ops(r->ops[i]->body, n, max);
    }
    return n;
}

static int
resolve_hw(const Distir__V1__HardwareRef *ref, request_hwcache *hc, request_input *in,
           di_error *err)
{
    int rc;
    if (ref == NULL || ref->spec_case == DISTIR__V1__HARDWARE_REF__SPEC__NOT_SET)
        return di_error_set(err, DI_EINVAL, "request has no hardware (preset or description)");
    if (ref->spec_case == DISTIR__V1__HARDWARE_REF__SPEC_PRESET) {
        const char *name = ref->preset;
        snprintf(in->hw_name, sizeof in->hw_name, "%s", name);
        if (hc != NULL) {
            for (unsigned i = 0; i < hc->n; i++) {
                if (strcmp(hc->e[i].name, name) == 0) {
                    in->hw = hc->e[i].hw;
                    in->hw_hash = hc->e[i].hash;
                    return 0;
                }
            }
        }
        hw_model *hw;
        rc = hw_preset(name, &hw, err);
        if (rc != 0) {
            /* A preset the request names but nobody has is a bad argument, not a lookup. */
            if (rc == DI_ENOTFOUND) {
                rc = DI_EINVAL;
                if (err != NULL)
                    err->code = rc;
            }
            di_error_prefix(err, "hardware");
            return rc;
        }
        di_hash h;
        hw_hash(hw, &h);
        if (hc != NULL && hc->n < HWCACHE_MAX) {
            hc->e[hc->n].name = di_xstrdup(name);
            hc->e[hc->n].hw = hw;
            hc->e[hc->n].hash = h;
            hc->n++;
            in->hw = hw;
        } else {
            in->hw = in->hw_owned = hw;
        }
        in->hw_hash = h;
        return 0;
    }
    rc = hw_from_proto(ref->hardware, &in->hw_owned, err);
    if (rc != 0) {
        di_error_prefix(err, "hardware");
        return rc;
    }
    in->hw = in->hw_owned;
    hw_hash(in->hw, &in->hw_hash);
    snprintf(in->hw_name, sizeof in->hw_name, "%s", in->hw->name[0] ? in->hw->name : "custom");
    return 0;
}

/*
 * A ModelSpec: checked option by option (models_spec_set), its size bounded
 * before anything is built (a generated GPT has about 80 ops and 160
 * values per layer with Adam, a Llama 150 and 200, an MLP about 10 and 20),
 * then generated.
 */
static int
build_spec(const Distir__V1__ModelSpec *ms, const request_limits *lim, request_input *in,
           di_error *err)
{
    models_spec sp;
    uint64_t layers, per_layer;
    int rc;
    if (ms->n_options > REQUEST_MAX_MODEL_OPTIONS)
        return di_error_set(err, DI_ETOOBIG, "model: %zu options (limit %u)", ms->n_options,
                            REQUEST_MAX_MODEL_OPTIONS);
    if ((rc = models_spec_init(&sp, ms->name, err)) != 0) {
        rc = DI_EINVAL; /* an unknown preset is a bad argument, not a missing resource */
        goto fail;
    }
    for (size_t i = 0; i < ms->n_options; i++) {
        const Distir__V1__ModelOption *o = ms->options[i];
        if ((rc = models_spec_set(&sp, o->key, o->value, err)) != 0) {
            if (rc == DI_ENOTFOUND)
                rc = DI_EINVAL;
            goto fail;
        }
    }
    /*
     * Constants of the generated module hold seq (positions) and, for a GPT
     * without final layer-norm parameters, hidden floats: bounded, as a
     * module's size would be.
     */
    if ((sp.kind == MODELS_SPEC_GPT &&
         (sp.gpt.seq > REQUEST_MAX_MODEL_SEQ || sp.gpt.hidden > REQUEST_MAX_MODEL_SEQ)) ||
        (sp.kind == MODELS_SPEC_LLAMA && sp.llama.seq > REQUEST_MAX_MODEL_SEQ))
        return di_error_set(err, DI_ETOOBIG, "model: --seq or --hidden above %u (the generated "
                            "module's constants) is refused here",
                            REQUEST_MAX_MODEL_SEQ);
    layers = models_spec_layers(&sp);
    per_layer = sp.kind == MODELS_SPEC_GPT ? 80 : sp.kind == MODELS_SPEC_LLAMA ? 150 : 10;
    if (layers * per_layer > lim->ir.max_ops || 2 * layers * per_layer > lim->ir.max_values)
        return di_error_set(err, DI_ETOOBIG,
                            "model: %llu layers make about %llu ops, over the limit of %u "
                            "(--max-ops)",
                            (unsigned long long)layers, (unsigned long long)(layers * per_layer),
                            lim->ir.max_ops);
    if ((rc = models_spec_build(&sp, &in->module, err)) != 0)
        goto fail;
    return 0;
fail:
    if (err != NULL)
        err->code = rc;
    di_error_prefix(err, "model");
    return rc;
}

static int
decode_module(const Distir__V1__Module *pm, const Distir__V1__ModelSpec *ms,
              const request_limits *lim, request_input *in, di_error *err)
{
    uint64_t nop = 0;
    int rc;
    if (pm != NULL && ms != NULL)
        return di_error_set(err, DI_EINVAL, "request has both a module and a model: send one");
    if (ms != NULL) {
        if ((rc = build_spec(ms, lim, in, err)) != 0)
            return rc;
        goto verify;
    }
    if (pm == NULL)
        return di_error_set(err, DI_EINVAL, "request has no module (or model)");
    for (size_t i = 0; i < pm->n_functions && nop <= lim->ir.max_ops; i++)
        nop = count_ops(pm->functions[i]->body, nop, lim->ir.max_ops);
    if (nop > lim->ir.max_ops)
        return di_error_set(err, DI_ETOOBIG, "module: more than %u ops (limit --max-ops)",
                            lim->ir.max_ops);
    if (pm->n_values > lim->ir.max_values)
        return di_error_set(err, DI_ETOOBIG, "module: %zu values exceed the limit of %u",
                            pm->n_values, lim->ir.max_values);
    rc = ir_from_proto(pm, &lim->ir, &in->module, err);
    if (rc != 0) {
        di_error_prefix(err, "module");
        return rc;
    }
verify:
    if (in->module->nop > lim->ir.max_ops)
        return di_error_set(err, DI_ETOOBIG, "module: %u ops exceed the limit of %u",
                            in->module->nop, lim->ir.max_ops);
    rc = ir_verify(in->module, err);
    if (rc != 0) {
        if (err != NULL && err->code == 0)
            err->code = rc;
        di_error_prefix(err, "module");
        return rc;
    }
    ir_hash(in->module, &in->module_hash);
    sim_model_stats_of(in->module, &in->stats);
    return 0;
}

static void
candidate_init(request_candidate *c, const Distir__V1__Strategy *s, const ir_module *m,
               const request_limits *lim)
{
    di_error e;
    di_error_clear(&e);
    c->rc = strategy_from_proto(s, &c->strategy, &e);
    if (c->rc == 0 && lim->max_job_bytes > 0) {
        xform_estimate est;
        xform_estimate_cost(m, &c->strategy, &est);
        if (est.bytes > lim->max_job_bytes)
            c->rc = di_error_set(&e, DI_ETOOBIG,
                                 "this strategy would simulate about %.3g op instances (%llu "
                                 "microbatches x %llu ops), an estimated %.1f MiB; one simulation "
                                 "may take %.1f MiB here (distird --max-job-mb): use fewer "
                                 "microbatches",
                                 (double)est.op_instances, (unsigned long long)est.microbatches,
                                 (unsigned long long)est.ops, (double)est.bytes / (1 << 20),
                                 (double)lim->max_job_bytes / (1 << 20));
    }
    if (c->rc != 0)
        c->error = di_xstrdup(e.msg);
}

int
request_decode_input(const Distir__V1__Module *pm, const Distir__V1__ModelSpec *ms,
                     const Distir__V1__HardwareRef *ref, const request_limits *lim,
                     request_hwcache *hc, request_input **out, di_error *err)
{
    request_input *in = di_xcalloc(1, sizeof *in);
    int rc;
    in->refs = 1;
    rc = decode_module(pm, ms, lim, in, err);
    if (rc == 0)
        rc = resolve_hw(ref, hc, in, err);
    if (rc != 0) {
        request_input_unref(in);
        in = NULL;
    }
    *out = in;
    return rc;
}

int
request_decode(int kind, const uint8_t *data, size_t len, const request_limits *lim,
               request_hwcache *hc, request *out, di_error *err)
{
    const ProtobufCMessageDescriptor *desc = kind == REQUEST_BATCH
                                                 ? &distir__v1__simulate_batch_request__descriptor
                                                 : &distir__v1__simulate_request__descriptor;
    ProtobufCMessage *msg = NULL;
    const Distir__V1__Module *pm;
    const Distir__V1__ModelSpec *ms;
    const Distir__V1__HardwareRef *href;
    const Distir__V1__SimOptions *popts;
    int rc;
    memset(out, 0, sizeof *out);
    /* The request and module wrappers add two levels above the module's own. */
    rc = pb_unpack_checked(desc, data, len, (int)lim->ir.max_depth + 2, &msg, err);
    if (rc != 0) {
        if (err != NULL && err->code == 0)
            err->code = rc;
        di_error_prefix(err, "request");
        return rc;
    }
    if (kind == REQUEST_BATCH) {
        const Distir__V1__SimulateBatchRequest *b = (const void *)msg;
        pm = b->module;
        ms = b->model;
        href = b->hardware;
        popts = b->options;
        if (b->n_strategies == 0) {
            rc = di_error_set(err, DI_EINVAL, "batch has no strategies");
            goto fail;
        }
        if (b->n_strategies > lim->max_batch) {
            rc = di_error_set(err, DI_ETOOBIG, "batch has %zu strategies, the limit is %u",
                              b->n_strategies, lim->max_batch);
            goto fail;
        }
    } else {
        const Distir__V1__SimulateRequest *s = (const void *)msg;
        pm = s->module;
        ms = s->model;
        href = s->hardware;
        popts = s->options;
    }
    out->input = di_xcalloc(1, sizeof *out->input);
    out->input->refs = 1;
    rc = decode_module(pm, ms, lim, out->input, err);
    if (rc != 0)
        goto fail;
    rc = resolve_hw(href, hc, out->input, err);
    if (rc != 0)
        goto fail;
    request_simopts_normalize(popts, &out->opts);
    if (kind == REQUEST_BATCH) {
        const Distir__V1__SimulateBatchRequest *b = (const void *)msg;
        out->ncand = (uint32_t)b->n_strategies;
        out->cands = di_xcalloc(out->ncand, sizeof *out->cands);
        for (uint32_t i = 0; i < out->ncand; i++)
            candidate_init(&out->cands[i], b->strategies[i], out->input->module, lim);
    } else {
        const Distir__V1__SimulateRequest *s = (const void *)msg;
        out->ncand = 1;
        out->cands = di_xcalloc(1, sizeof *out->cands);
        candidate_init(&out->cands[0], s->strategy, out->input->module, lim);
    }
    protobuf_c_message_free_unpacked(msg, NULL);
    return 0;
fail:
    protobuf_c_message_free_unpacked(msg, NULL);
    request_fini(out);
    return rc;
}

void
request_simopts_normalize(const Distir__V1__SimOptions *p, request_simopts *out)
{
    memset(out, 0, sizeof *out);
    if (p == NULL)
        return;
    out->no_overlap = p->no_overlap != 0;
    out->tf32 = p->tf32 != 0;
    out->fuse = p->fuse != 0;
    out->no_grad_accum_fusion = out->fuse && p->no_grad_accum_fusion;
    out->want_timeline = p->want_timeline != 0;
    out->timeline_max_points = out->want_timeline ? p->timeline_max_points : 0;
}

void
request_simopts_of(const sim_options *o, request_simopts *out)
{
    memset(out, 0, sizeof *out);
    out->no_overlap = o->no_overlap != 0;
    out->tf32 = o->tf32 != 0;
    out->fuse = o->fuse != 0;
    out->no_grad_accum_fusion = out->fuse && o->no_grad_accum_fusion;
    out->want_timeline = o->want_timeline != 0;
    out->timeline_max_points = out->want_timeline ? o->timeline_max_points : 0;
}

void
request_cache_key(const di_hash *module, const di_hash *hw, const strategy *s,
                  const request_simopts *o, const char *sim_version, di_hash *out)
{
    di_sha256 h;
    di_sha256_init(&h);
    di_sha256_update(&h, KEY_DOMAIN, sizeof KEY_DOMAIN); /* with its NUL */
    di_sha256_update(&h, module->b, sizeof module->b);
    di_sha256_update(&h, hw->b, sizeof hw->b);
    strategy_hash(s, &h);
    di_sha256_u64(&h, (uint64_t)o->no_overlap);
    if (o->tf32) /* keys of results without it stay as they were */
        di_sha256_u64(&h, 0x74663332u);
    if (o->fuse)
        di_sha256_u64(&h, 0x66757365u); /* "fuse" */
    if (o->no_grad_accum_fusion)
        di_sha256_u64(&h, 0x6e6f676166u); /* "nogaf" */
    di_sha256_u64(&h, (uint64_t)o->want_timeline);
    di_sha256_u64(&h, o->timeline_max_points);
    di_sha256_u64(&h, strlen(sim_version));
    di_sha256_update(&h, sim_version, strlen(sim_version));
    di_sha256_final(&h, out);
}

int
request_apply_strategy(const ir_module *m, const strategy *s, const hw_model *hw,
                       const ir_module **out, ir_module **owned, di_error *err)
{
    int rc;
    *owned = NULL;
    *out = NULL;
    if (xform_is_global(m)) {
        /* Annotated (global-view) modules carry their own placements: lower them. */
        if (!strategy_is_trivial(s))
            return di_error_set(err, DI_EINVAL,
                                "the module is annotated (dist.annotate_sharding or "
                                "dist.redistribute): its placements come from the annotations, "
                                "so it takes no strategy");
        if ((rc = xform_global_local(m, owned, err)) != 0)
            return rc;
        *out = *owned;
        return 0;
    }
    if (strategy_is_trivial(s)) {
        *out = m;
        return 0;
    }
    if ((rc = xform_apply(m, s, hw, owned, err)) != 0)
        return rc;
    *out = *owned;
    return 0;
}
