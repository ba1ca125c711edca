/*
 * schedule.c: the order of pipeline chunks (forward or backward pass of one
 * model stage for one microbatch).
 *
 * Each device group (pipeline rank) g runs its model stages' chunks in the
 * schedule's order:
 *   - GPipe: every forward, then every backward (Huang et al.);
 *   - 1F1B (PipeDream-Flush, Narayanan et al. 2021): p - g - 1 warm-up
 *     forwards, then one forward and one backward alternately, then the
 *     remaining backwards; at most p - g microbatches in flight;
 *   - interleaved 1F1B (Megatron-LM, Narayanan et al. 2021, section 2.2):
 *     group g holds model stages g, g + p, ..., g + (V - 1) p; forwards go
 *     through the stages in rounds of p microbatches, with
 *     2 (p - g - 1) + (V - 1) p warm-up forwards.
 * The simulator executes each device's streams in program order, so the
 * groups' sequences are merged into one program order in which every chunk
 * comes after its inputs: a round-robin over the groups that emits each
 * group's next chunk once its dependencies (the previous stage's forward,
 * the next stage's backward, its own forward) are emitted.
 */
#include "xform/xform_int.h"

#include <assert.h>
#include <string.h>

/* Appends a chunk to ev when it holds fewer than cap. */
static void
push(xform_chunk *ev, uint32_t *n, uint32_t cap, int kind, uint32_t stage, uint32_t mb)
{
    if (*n < cap) {
        ev[*n].kind = (uint8_t)kind;
        ev[*n].stage = stage;
        ev[*n].mb = mb;
        (*n)++;
    }
}

uint32_t
xform_group_sequence(int schedule, uint32_t p, uint32_t V, uint32_t m, uint32_t g,
                     xform_chunk *ev, uint32_t cap)
{
    uint32_t n = 0;
    if (schedule == STRATEGY_SCHEDULE_GPIPE) {
        for (uint32_t i = 0; i < m && n < cap; i++)
            push(ev, &n, cap, XFORM_CHUNK_F, g, i);
        for (uint32_t i = 0; i < m && n < cap; i++)
            push(ev, &n, cap, XFORM_CHUNK_B, g, i);
        assert(n == 2 * m || n == cap);
        return n;
    }
    if (V <= 1) {
        uint32_t warm = p - g - 1 < m ? p - g - 1 : m;
        for (uint32_t i = 0; i < warm && n < cap; i++)
            push(ev, &n, cap, XFORM_CHUNK_F, g, i);
        for (uint32_t j = 0; j < m - warm && n < cap; j++) {
            push(ev, &n, cap, XFORM_CHUNK_F, g, warm + j);
            push(ev, &n, cap, XFORM_CHUNK_B, g, j);
        }
        for (uint32_t j = m - warm; j < m && n < cap; j++)
            push(ev, &n, cap, XFORM_CHUNK_B, g, j);
        assert(n == 2 * m || n == cap);
        return n;
    }
    {
        uint32_t total = m * V, warm = (p - g - 1) * 2 + (V - 1) * p;
        if (warm > total)
            warm = total;
#define FWD_STAGE(k) ((((k) / p) % V) * p + g)
#define BWD_STAGE(k) ((V - 1 - ((k) / p) % V) * p + g)
#define MB_OF(k) (((k) / (p * V)) * p + (k) % p)
        for (uint32_t k = 0; k < warm && n < cap; k++)
            push(ev, &n, cap, XFORM_CHUNK_F, FWD_STAGE(k), MB_OF(k));
        for (uint32_t k = 0; k < total - warm && n < cap; k++) {
            push(ev, &n, cap, XFORM_CHUNK_F, FWD_STAGE(k + warm), MB_OF(k + warm));
            push(ev, &n, cap, XFORM_CHUNK_B, BWD_STAGE(k), MB_OF(k));
        }
        for (uint32_t k = total - warm; k < total && n < cap; k++)
            push(ev, &n, cap, XFORM_CHUNK_B, BWD_STAGE(k), MB_OF(k));
#undef FWD_STAGE
#undef BWD_STAGE
#undef MB_OF
        assert(n == 2 * total || n == cap);
        return n;
    }
}

int
xf_schedule(const xf_ctx *c, xf_event **out, uint32_t *nout)
{
    uint32_t p = c->pp, m = c->m_emit, K = c->K, per = 2 * c->V * m;
    uint64_t total = (uint64_t)2 * K * m;
    xf_event *seq, *ev;
    uint32_t *pos, n = 0;
    uint8_t *done; /* [kind][stage][mb] */
    if (total > (1u << 28))
        return di_error_set(c->err, DI_ETOOBIG, "%llu pipeline chunks are too many",
                            (unsigned long long)total);
    seq = di_xmalloc((size_t)p * per * sizeof *seq);
    ev = di_xmalloc((size_t)(total ? total : 1) * sizeof *ev);
    pos = di_xcalloc(p, sizeof *pos);
    done = di_xcalloc((size_t)(total ? total : 1), 1);
    for (uint32_t g = 0; g < p; g++)
        xform_group_sequence(c->s.schedule, p, c->V, m, g, seq + (size_t)g * per, per);
#define DONE(kind, s, i) done[((size_t)(kind) * K + (s)) * m + (i)]
    while (n < total) {
        uint32_t progress = 0;
        for (uint32_t g = 0; g < p; g++) {
            while (pos[g] < per) {
                const xf_event *e = &seq[(size_t)g * per + pos[g]];
                int ready;
                if (e->kind == XF_EV_F)
                    ready = e->stage == 0 || DONE(XF_EV_F, e->stage - 1, e->mb);
                else
                    ready = DONE(XF_EV_F, e->stage, e->mb) &&
                            (e->stage + 1 == K || DONE(XF_EV_B, e->stage + 1, e->mb));
                if (!ready)
                    break;
                assert(e->stage < K && e->mb < m && !DONE(e->kind, e->stage, e->mb));
                ev[n++] = *e;
                DONE(e->kind, e->stage, e->mb) = 1;
                pos[g]++;
                progress++;
                /* One chunk per group per round keeps the order close to time order. */
                break;
            }
        }
        if (progress == 0) {
            di_free(seq);
            di_free(ev);
            di_free(pos);
            di_free(done);
            return di_error_set(c->err, DI_EINTERNAL, "the pipeline schedule deadlocks");
        }
    }
#undef DONE
    di_free(seq);
    di_free(pos);
    di_free(done);
    *out = ev;
    *nout = n;
    return 0;
}
