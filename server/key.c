/*
 * key.c: canonical strategies and options, and the cache key (key.h). The
 * encoding fed to SHA-256 is a fixed sequence of 64-bit little-endian
 * integers (di_sha256_u64) with counts before lists and lengths before
 * strings, so no two different canonical requests share an encoding.
 * Changing it changes every key: bump the domain string when you do.
 */
#include "key.h"

#include <stdlib.h>
#include <string.h>

#include "xform/xform.h"

#define KEY_DOMAIN "distir.cache.v3"

static int
cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/*
 * Per-stage degrees with 0 read as 1, folded into dp and tp when every stage
 * is alike and none fixes its layers (the uniform strategy); tp_layers sorted
 * and distinct, dropped when no group is tensor parallel.
 */
static int
stages_normalize(const Distir__V1__Strategy *p, srv_strategy *out, di_error *err)
{
    uint32_t maxtp = out->tp;
    if (p->n_stages > (1u << 20) || p->n_tp_layers > (1u << 24))
        return di_error_set(err, DI_ETOOBIG, "strategy: %zu stages and %zu tp_layers",
                            p->n_stages, p->n_tp_layers);
    if (p->n_stages > 0) {
        int alike = 1, layers = 0;
        out->nstages = (uint32_t)p->n_stages;
        out->stages = di_xcalloc(p->n_stages, sizeof *out->stages);
        for (size_t i = 0; i < p->n_stages; i++) {
            const Distir__V1__PipelineStage *st = p->stages[i];
            xform_stage *q = &out->stages[i];
            q->dp = st && st->dp ? st->dp : 1;
            q->tp = st && st->tp ? st->tp : 1;
            q->layers = st ? st->layers : 0;
            alike &= q->dp == out->stages[0].dp && q->tp == out->stages[0].tp;
            layers |= q->layers != 0;
            if (q->tp > maxtp)
                maxtp = q->tp;
        }
        if (alike && !layers && out->dp == 1 && out->tp == 1 && out->nstages == out->pp) {
            out->dp = out->stages[0].dp;
            out->tp = out->stages[0].tp;
            di_free(out->stages);
            out->stages = NULL;
            out->nstages = 0;
        }
    }
    if (p->n_tp_layers > 0 && maxtp > 1) {
        uint32_t n = 0;
        out->tp_layers = di_xmalloc(p->n_tp_layers * sizeof *out->tp_layers);
        memcpy(out->tp_layers, p->tp_layers, p->n_tp_layers * sizeof *out->tp_layers);
        qsort(out->tp_layers, p->n_tp_layers, sizeof *out->tp_layers, cmp_u32);
        for (size_t i = 0; i < p->n_tp_layers; i++)
            if (n == 0 || out->tp_layers[n - 1] != out->tp_layers[i])
                out->tp_layers[n++] = out->tp_layers[i];
        out->ntp_layers = n;
    }
    return 0;
}

int
srv_strategy_normalize(const Distir__V1__Strategy *p, srv_strategy *out, di_error *err)
{
    int rc;
    memset(out, 0, sizeof *out);
    out->dp = out->tp = out->pp = out->microbatches = out->virtual_stages = 1;
    out->schedule = DISTIR__V1__SCHEDULE__SCHEDULE_DEFAULT;
    out->recompute = DISTIR__V1__RECOMPUTE__RECOMPUTE_NONE;
    out->stash = DISTIR__V1__STASH__STASH_NONE;
    if (p == NULL)
        return 0;
    if (p->zero > 3)
        return di_error_set(err, DI_ESTRATEGY, "strategy: zero stage %u is not 0..3", p->zero);
    if ((unsigned)p->schedule > DISTIR__V1__SCHEDULE__SCHEDULE_INTERLEAVED)
        return di_error_set(err, DI_ESTRATEGY, "strategy: unknown schedule %d", (int)p->schedule);
    if ((unsigned)p->recompute > DISTIR__V1__RECOMPUTE__RECOMPUTE_FULL)
        return di_error_set(err, DI_ESTRATEGY, "strategy: unknown recompute %d", (int)p->recompute);
    if ((unsigned)p->stash > DISTIR__V1__STASH__STASH_2BW)
        return di_error_set(err, DI_ESTRATEGY, "strategy: unknown stash %d", (int)p->stash);
    out->dp = p->dp ? p->dp : 1;
    out->tp = p->tp ? p->tp : 1;
    out->pp = p->pp ? p->pp : p->n_stages ? (uint32_t)p->n_stages : 1;
    out->microbatches = p->microbatches ? p->microbatches : out->pp;
    if (out->pp > 1) {
        out->schedule = p->schedule == DISTIR__V1__SCHEDULE__SCHEDULE_DEFAULT
                            ? DISTIR__V1__SCHEDULE__SCHEDULE_1F1B
                            : (uint32_t)p->schedule;
        if (out->schedule == DISTIR__V1__SCHEDULE__SCHEDULE_INTERLEAVED)
            out->virtual_stages = p->virtual_stages ? p->virtual_stages : 1;
    } else if (p->schedule != DISTIR__V1__SCHEDULE__SCHEDULE_DEFAULT) {
        /* A schedule orders pipeline stages; with one stage it has no effect. */
        out->schedule = DISTIR__V1__SCHEDULE__SCHEDULE_DEFAULT;
    }
    out->recompute = (uint32_t)p->recompute;
    out->stash = (uint32_t)p->stash;
    out->zero = p->zero;
    out->sequence_parallel = p->sequence_parallel != 0;
    out->overlap_grad_reduce = p->overlap_grad_reduce != 0;
    /* The bucket size only matters with overlap: normalized so that equal strategies share a key. */
    out->bucket_mb = !out->overlap_grad_reduce ? 0
                     : p->bucket_mb            ? p->bucket_mb
                                               : XFORM_BUCKET_MB_DEFAULT;
    if (p->n_device_order > 0) {
        if (p->n_device_order > (1u << 24))
            return di_error_set(err, DI_ETOOBIG, "strategy: device_order has %zu entries",
                                p->n_device_order);
        out->ndevice_order = (uint32_t)p->n_device_order;
        out->device_order = di_xmalloc(p->n_device_order * sizeof *out->device_order);
        memcpy(out->device_order, p->device_order, p->n_device_order * sizeof(uint32_t));
    }
    if ((rc = stages_normalize(p, out, err)) != 0) {
        srv_strategy_fini(out);
        return rc;
    }
    return 0;
}

void
srv_strategy_fini(srv_strategy *s)
{
    di_free(s->device_order);
    s->device_order = NULL;
    s->ndevice_order = 0;
    di_free(s->stages);
    s->stages = NULL;
    s->nstages = 0;
    di_free(s->tp_layers);
    s->tp_layers = NULL;
    s->ntp_layers = 0;
}

void
srv_strategy_copy(srv_strategy *dst, const srv_strategy *src)
{
    *dst = *src;
    if (src->ndevice_order > 0) {
        dst->device_order = di_xmalloc(src->ndevice_order * sizeof *dst->device_order);
        memcpy(dst->device_order, src->device_order,
               src->ndevice_order * sizeof *dst->device_order);
    }
    if (src->nstages > 0) {
        dst->stages = di_xmalloc(src->nstages * sizeof *dst->stages);
        memcpy(dst->stages, src->stages, src->nstages * sizeof *dst->stages);
    }
    if (src->ntp_layers > 0) {
        dst->tp_layers = di_xmalloc(src->ntp_layers * sizeof *dst->tp_layers);
        memcpy(dst->tp_layers, src->tp_layers, src->ntp_layers * sizeof *dst->tp_layers);
    }
}

int
srv_strategy_is_trivial(const srv_strategy *s)
{
    return s->dp == 1 && s->tp == 1 && s->pp == 1 && s->microbatches == 1 &&
           s->virtual_stages == 1 && s->recompute == DISTIR__V1__RECOMPUTE__RECOMPUTE_NONE &&
           s->stash == DISTIR__V1__STASH__STASH_NONE && s->zero == 0 && !s->sequence_parallel &&
           !s->overlap_grad_reduce && s->ndevice_order == 0 && s->nstages == 0 &&
           s->ntp_layers == 0;
}

void
srv_simopts_normalize(const Distir__V1__SimOptions *p, srv_simopts *out)
{
    memset(out, 0, sizeof *out);
    if (p == NULL)
        return;
    out->no_overlap = p->no_overlap != 0;
    out->want_timeline = p->want_timeline != 0;
    out->timeline_max_points = out->want_timeline ? p->timeline_max_points : 0;
}

void
srv_cache_key(const di_hash *module, const di_hash *hw, const srv_strategy *s, const srv_simopts *o,
              const char *sim_version, di_hash *out)
{
    di_sha256 h;
    di_sha256_init(&h);
    di_sha256_update(&h, KEY_DOMAIN, sizeof KEY_DOMAIN); /* with its NUL */
    di_sha256_update(&h, module->b, sizeof module->b);
    di_sha256_update(&h, hw->b, sizeof hw->b);
    di_sha256_u64(&h, s->dp);
    di_sha256_u64(&h, s->tp);
    di_sha256_u64(&h, s->pp);
    di_sha256_u64(&h, s->microbatches);
    di_sha256_u64(&h, s->schedule);
    di_sha256_u64(&h, s->virtual_stages);
    di_sha256_u64(&h, s->recompute);
    di_sha256_u64(&h, s->stash);
    di_sha256_u64(&h, s->zero);
    di_sha256_u64(&h, (uint64_t)s->sequence_parallel);
    di_sha256_u64(&h, (uint64_t)s->overlap_grad_reduce);
    di_sha256_u64(&h, s->bucket_mb);
    di_sha256_u64(&h, s->ndevice_order);
    for (uint32_t i = 0; i < s->ndevice_order; i++)
        di_sha256_u64(&h, s->device_order[i]);
    di_sha256_u64(&h, s->nstages);
    for (uint32_t i = 0; i < s->nstages; i++) {
        di_sha256_u64(&h, s->stages[i].dp);
        di_sha256_u64(&h, s->stages[i].tp);
        di_sha256_u64(&h, s->stages[i].layers);
    }
    di_sha256_u64(&h, s->ntp_layers);
    for (uint32_t i = 0; i < s->ntp_layers; i++)
        di_sha256_u64(&h, s->tp_layers[i]);
    di_sha256_u64(&h, (uint64_t)o->no_overlap);
    di_sha256_u64(&h, (uint64_t)o->want_timeline);
    di_sha256_u64(&h, o->timeline_max_points);
    di_sha256_u64(&h, strlen(sim_version));
    di_sha256_update(&h, sim_version, strlen(sim_version));
    di_sha256_final(&h, out);
}
