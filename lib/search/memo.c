/*
 * memo.c: figures of simulated candidates kept between searches (search.h,
 * search_memo). A table keyed by the candidate's degrees and options and by
 * whether the figures are a composed estimate; the caller stores entries
 * (the daemon in its cache database, search_memo_entry_pack) and hands
 * them to the next search with the same search_space.eval_key.
 */
#include "search/search.h"

#include <math.h>
#include <string.h>

void
search_memo_init(search_memo *m)
{
    memset(m, 0, sizeof *m);
}

void
search_memo_fini(search_memo *m)
{
    di_free(m->v);
    di_free(m->slot);
    memset(m, 0, sizeof *m);
}

/* The candidate's fields that decide its simulation (not its index). */
static void
cand_words(const search_candidate *c, int composed, uint32_t w[15])
{
    w[0] = c->dp, w[1] = c->tp, w[2] = c->pp, w[3] = c->microbatches;
    w[4] = c->virtual_stages, w[5] = c->schedule, w[6] = c->recompute, w[7] = c->zero;
    w[8] = c->sequence_parallel, w[9] = c->overlap;
    w[10] = c->ep > 1 ? c->ep : 1; /* 0 reads as 1 */
    w[11] = c->cp > 1 ? c->cp : 1;
    w[12] = composed != 0;
    w[13] = c->order;
    w[14] = c->recompute_layers;
}

static uint32_t
cand_hash(const search_candidate *c, int composed)
{
    uint32_t w[15];
    uint64_t h = 0x9e3779b97f4a7c15ull;
    cand_words(c, composed, w);
    for (int i = 0; i < 15; i++)
        h = di_mix64(h ^ w[i]);
    return (uint32_t)(h ^ (h >> 32));
}

static int
same(const search_memo_entry *e, const search_candidate *c, int composed)
{
    uint32_t a[15], b[15];
    cand_words(&e->cand, e->composed, a);
    cand_words(c, composed, b);
    return memcmp(a, b, sizeof a) == 0;
}

static void
reslot(search_memo *m, uint32_t nslot)
{
    di_free(m->slot);
    m->nslot = nslot;
    m->slot = di_xcalloc(nslot, sizeof *m->slot);
    for (uint32_t i = 0; i < m->n; i++) {
        uint32_t h = cand_hash(&m->v[i].cand, m->v[i].composed) & (nslot - 1);
        while (m->slot[h])
            h = (h + 1) & (nslot - 1);
        m->slot[h] = i + 1;
    }
}

const search_memo_entry *
search_memo_find(const search_memo *m, const search_candidate *c, int composed)
{
    uint32_t h;
    /* Nested candidates are not kept: an entry holds uniform degrees only (the layout below). */
    if (m == NULL || m->n == 0 || c->nstages > 0)
        return NULL;
    for (h = cand_hash(c, composed) & (m->nslot - 1); m->slot[h]; h = (h + 1) & (m->nslot - 1))
        if (same(&m->v[m->slot[h] - 1], c, composed))
            return &m->v[m->slot[h] - 1];
    return NULL;
}

void
search_memo_add(search_memo *m, const search_memo_entry *e)
{
    if ((e->f.status != SEARCH_OK && e->f.status != SEARCH_OOM) || e->cand.nstages > 0)
        return;
    if (search_memo_find(m, &e->cand, e->composed) != NULL)
        return;
    DI_GROW(&m->v, &m->cap, m->n + 1);
    m->v[m->n] = *e;
    m->v[m->n].cand.index = 0;
    m->v[m->n].composed = e->composed != 0;
    m->v[m->n].unsteady = e->composed && e->unsteady;
    m->n++;
    if (2 * m->n > m->nslot)
        reslot(m, m->nslot ? 2 * m->nslot : 64);
    else {
        uint32_t h = cand_hash(&e->cand, e->composed) & (m->nslot - 1);
        while (m->slot[h])
            h = (h + 1) & (m->nslot - 1);
        m->slot[h] = m->n;
    }
}

/*
 * Layout (88 bytes): the first 12 candidate words (cand_words) as 32-bit
 * values at 0..47; composed at 48, the status at 49, unsteady at 50 and the
 * rank order at 51 (bytes; entries older than the order have 0 there, the
 * default), recompute_layers at 52..53 (16 bits; 0 in older entries, every
 * layer), 54..55 zero;
 * step time, peak memory, tokens/s and MFU as 64-bit values at 56, 64, 72
 * and 80 (doubles as their bits, so a round trip is exact).
 */
void
search_memo_entry_pack(const search_memo_entry *e, uint8_t out[SEARCH_MEMO_BYTES])
{
    uint32_t w[15];
    cand_words(&e->cand, e->composed, w);
    memset(out, 0, SEARCH_MEMO_BYTES);
    for (int i = 0; i < 12; i++)
        di_store_le(out + 4 * i, w[i], 4);
    out[48] = (uint8_t)w[12];
    out[49] = (uint8_t)e->f.status;
    out[50] = e->composed && e->unsteady;
    out[51] = (uint8_t)w[13];
    di_store_le(out + 52, w[14], 2);
    di_store_le(out + 56, di_double_bits(e->f.step_time_s), 8);
    di_store_le(out + 64, e->f.peak_memory_bytes, 8);
    di_store_le(out + 72, di_double_bits(e->f.tokens_per_s), 8);
    di_store_le(out + 80, di_double_bits(e->f.mfu), 8);
}

static int
figure_ok(double v)
{
    return isfinite(v) && v >= 0;
}

int
search_memo_entry_unpack(const uint8_t in[SEARCH_MEMO_BYTES], search_memo_entry *e, di_error *err)
{
    search_candidate *c = &e->cand;
    uint32_t w[12];
    memset(e, 0, sizeof *e);
    for (int i = 0; i < 12; i++)
        w[i] = (uint32_t)di_load_le(in + 4 * i, 4);
    for (int i = 5; i < 10; i++)
        if (w[i] > 255)
            return di_error_set(err, DI_EINVAL, "search memo: field %d is %u, not a byte", i,
                                w[i]);
    c->dp = w[0], c->tp = w[1], c->pp = w[2], c->microbatches = w[3], c->virtual_stages = w[4];
    c->schedule = (uint8_t)w[5], c->recompute = (uint8_t)w[6], c->zero = (uint8_t)w[7];
    c->sequence_parallel = (uint8_t)w[8], c->overlap = (uint8_t)w[9];
    c->ep = w[10], c->cp = w[11];
    e->composed = in[48];
    e->f.status = in[49];
    e->unsteady = in[50];
    c->order = in[51];
    c->recompute_layers = (uint16_t)di_load_le(in + 52, 2);
    e->f.step_time_s = di_bits_double(di_load_le(in + 56, 8));
    e->f.peak_memory_bytes = di_load_le(in + 64, 8);
    e->f.tokens_per_s = di_bits_double(di_load_le(in + 72, 8));
    e->f.mfu = di_bits_double(di_load_le(in + 80, 8));
    if (!c->dp || !c->tp || !c->pp || !c->microbatches || !c->virtual_stages || !c->ep || !c->cp)
        return di_error_set(err, DI_EINVAL, "search memo: a degree or count is 0");
    if (c->schedule > STRATEGY_SCHEDULE_INTERLEAVED ||
        c->recompute > STRATEGY_RECOMPUTE_SELECTIVE_OP || c->zero > 3 ||
        c->sequence_parallel > 1 || c->overlap > 1 || c->order > STRATEGY_ORDER_TP_PP_DP ||
        e->composed > 1 || e->unsteady > e->composed ||
        (c->recompute_layers > 0 && c->recompute != STRATEGY_RECOMPUTE_FULL))
        return di_error_set(err, DI_EINVAL, "search memo: an option out of its range");
    for (int i = 54; i < 56; i++)
        if (in[i] != 0)
            return di_error_set(err, DI_EINVAL, "search memo: reserved byte %d is not 0", i);
    if (e->f.status != SEARCH_OK && e->f.status != SEARCH_OOM)
        return di_error_set(err, DI_EINVAL, "search memo: status %d is not ok or out_of_memory",
                            e->f.status);
    if (!figure_ok(e->f.step_time_s) || !figure_ok(e->f.tokens_per_s) || !figure_ok(e->f.mfu))
        return di_error_set(err, DI_EINVAL, "search memo: a figure is negative or not finite");
    return 0;
}

int
search_memo_unpack_all(const uint8_t *data, size_t len, search_memo *m, di_error *err)
{
    if (len % SEARCH_MEMO_BYTES != 0)
        return di_error_set(err, DI_EINVAL, "search memo: %zu bytes is not a whole number of "
                                            "%d-byte entries",
                            len, SEARCH_MEMO_BYTES);
    for (size_t off = 0; off < len; off += SEARCH_MEMO_BYTES) {
        search_memo_entry e;
        int rc = search_memo_entry_unpack(data + off, &e, err);
        if (rc != 0)
            return rc;
        search_memo_add(m, &e);
    }
    return 0;
}

void
search_memo_pack_all(const search_memo *m, uint8_t **out, size_t *len)
{
    *len = (size_t)m->n * SEARCH_MEMO_BYTES;
    *out = di_xmalloc(*len ? *len : 1);
    for (uint32_t i = 0; i < m->n; i++)
        search_memo_entry_pack(&m->v[i], *out + (size_t)i * SEARCH_MEMO_BYTES);
}
