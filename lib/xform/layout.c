/*
 * layout.c: sequential tensors to distributed ones and back (xform_exec.h).
 *
 * A piece (xform.h) is a tuple over the dp x cp x tp devices of a group
 * (its own degrees), device k at mesh coordinates (k / (cp tp),
 * (k / tp) % cp, k % tp), the data coordinate being (outer, inner) under
 * expert parallelism over part of the data group. Along each tensor
 * dimension the axes that split it do so in xform_axis_outer's order
 * (microbatch outermost, then tensor, then data, context inside data but
 * outside tensor), so a device's block index along a dimension is the
 * mixed-radix number of its coordinates on those axes in that order. Replicated axes hold copies;
 * partial sums are summed when gathering (and given to coordinate 0, zeros
 * elsewhere, when sharding, though no argument is ever a partial sum).
 */
#include "xform/xform_exec.h"

#include <string.h>


/* The context-parallel degree (0 in layouts made before it existed reads as 1). */
static uint32_t
ncp(const xform_layout *l)
{
    return l->size[XFORM_AXIS_CP] ? l->size[XFORM_AXIS_CP] : 1;
}

/* The outer data degree (0 reads as 1, as ncp). */
static uint32_t
nedp(const xform_layout *l)
{
    return l->size[XFORM_AXIS_EDP] ? l->size[XFORM_AXIS_EDP] : 1;
}

/* The sizes of the axes of a piece's group. */
static void
sizes(const xform_layout *l, const xform_piece *p, uint32_t *n)
{
    n[XFORM_AXIS_MB] = l->size[XFORM_AXIS_MB];
    n[XFORM_AXIS_DP] = l->group_dp[p->stage];
    n[XFORM_AXIS_TP] = l->group_tp[p->stage];
    n[XFORM_AXIS_CP] = ncp(l);
    n[XFORM_AXIS_EDP] = nedp(l);
}

/* The coordinates of device k of a piece on the axes. */
static void
coords(const xform_layout *l, const xform_piece *p, uint32_t k, uint32_t *co)
{
    uint32_t d = k / (ncp(l) * l->group_tp[p->stage]);
    co[XFORM_AXIS_MB] = p->microbatch;
    co[XFORM_AXIS_DP] = d % l->group_dp[p->stage];
    co[XFORM_AXIS_EDP] = d / l->group_dp[p->stage];
    co[XFORM_AXIS_CP] = (k / l->group_tp[p->stage]) % ncp(l);
    co[XFORM_AXIS_TP] = k % l->group_tp[p->stage];
}

/* Block counts and this device's block index along each dimension. */
static void
blocks(const xform_layout *l, const xform_piece *p, const uint32_t *co, uint32_t rank,
       int64_t *nblk, int64_t *idx)
{
    uint32_t n[XFORM_NAXIS];
    sizes(l, p, n);
    for (uint32_t d = 0; d < rank; d++) {
        int ax[XFORM_NAXIS], na = 0;
        nblk[d] = 1;
        idx[d] = 0;
        /* The axes splitting d, outermost first (insertion by xform_axis_outer). */
        for (int a = 0; a < XFORM_NAXIS; a++) {
            int i;
            if (p->place[a] != (int8_t)d)
                continue;
            i = na++;
            while (i > 0 && xform_axis_outer(a, ax[i - 1])) {
                ax[i] = ax[i - 1];
                i--;
            }
            ax[i] = a;
        }
        for (int i = 0; i < na; i++) {
            idx[d] = idx[d] * n[ax[i]] + co[ax[i]];
            nblk[d] *= n[ax[i]];
        }
    }
}

/* Copies (or adds) the block of `big` at offsets with `small`'s shape, either direction. */
static void
block_copy(ex_tensor *big, ex_tensor *small, const int64_t *off, int to_big, int add)
{
    uint32_t r = small->rank;
    int64_t pos[IR_MAX_RANK] = {0};
    for (size_t i = 0; i < small->numel; i++) {
        size_t bi = 0;
        for (uint32_t d = 0; d < r; d++)
            bi = bi * (size_t)big->dims[d] + (size_t)(off[d] + pos[d]);
        if (to_big)
            ex_set(big, bi, add ? ex_get(big, bi) + ex_get(small, i) : ex_get(small, i));
        else
            ex_set(small, i, ex_get(big, bi));
        for (int d = (int)r - 1; d >= 0; d--) {
            if (++pos[d] < small->dims[d])
                break;
            pos[d] = 0;
        }
    }
}

/* The devices of a piece's group. */
static uint32_t
ngdev(const xform_layout *l, const xform_piece *p)
{
    return nedp(l) * l->group_dp[p->stage] * ncp(l) * l->group_tp[p->stage];
}

int
xform_shard_args(const xform_layout *l, const ex_tensor *args, uint32_t nargs, ex_tensor **out,
                 uint32_t *nout, di_error *err)
{
    uint32_t total = 0, w = 0;
    ex_tensor *o;
    for (uint32_t i = 0; i < l->nargs; i++)
        total += ngdev(l, &l->args[i]);
    o = di_calloc(total ? total : 1, sizeof *o);
    *out = NULL;
    *nout = 0;
    if (o == NULL)
        return di_error_set(err, DI_ENOMEM, "out of memory");
    for (uint32_t i = 0; i < l->nargs; i++) {
        const xform_piece *p = &l->args[i];
        const ex_tensor *src;
        if (p->index >= nargs) {
            for (uint32_t j = 0; j < w; j++)
                ex_tensor_fini(&o[j]);
            di_free(o);
            return di_error_set(err, DI_EINVAL, "argument %u is missing", p->index);
        }
        src = &args[p->index];
        for (uint32_t k = 0, n = ngdev(l, p); k < n; k++, w++) {
            uint32_t co[XFORM_NAXIS];
            int64_t nblk[IR_MAX_RANK], idx[IR_MAX_RANK], dims[IR_MAX_RANK], off[IR_MAX_RANK];
            int zero = 0, rc;
            coords(l, p, k, co);
            blocks(l, p, co, src->rank, nblk, idx);
            for (int a = 0; a < XFORM_NAXIS; a++)
                if (p->place[a] == XFORM_PLACE_P && co[a] != 0)
                    zero = 1;
            for (uint32_t d = 0; d < src->rank; d++) {
                dims[d] = src->dims[d] / nblk[d];
                off[d] = idx[d] * dims[d];
            }
            rc = ex_tensor_init(&o[w], src->dtype, src->rank, dims);
            if (rc != 0) {
                for (uint32_t j = 0; j < w; j++)
                    ex_tensor_fini(&o[j]);
                di_free(o);
                return di_error_set(err, rc, "cannot allocate an argument block");
            }
            o[w].device = l->devices[l->group_first[p->stage] + k];
            if (!zero)
                block_copy((ex_tensor *)src, &o[w], off, 0, 0);
        }
    }
    *out = o;
    *nout = w;
    return 0;
}

int
xform_gather_results(const xform_layout *l, const ex_tensor *res, uint32_t nres, ex_tensor **out,
                     uint32_t *nout, di_error *err)
{
    uint32_t nseq = 0;
    uint64_t total = 0, at = 0;
    ex_tensor *o;
    *out = NULL;
    *nout = 0;
    for (uint32_t i = 0; i < l->nresults; i++)
        total += ngdev(l, &l->results[i]);
    if (total != nres)
        return di_error_set(err, DI_EINVAL, "%u result tensors for a layout of %llu", nres,
                            (unsigned long long)total);
    for (uint32_t i = 0; i < l->nresults; i++)
        if (l->results[i].index + 1 > nseq)
            nseq = l->results[i].index + 1;
    o = di_calloc(nseq ? nseq : 1, sizeof *o);
    if (o == NULL)
        return di_error_set(err, DI_ENOMEM, "out of memory");
    for (uint32_t i = 0; i < l->nresults; i++) {
        const xform_piece *p = &l->results[i];
        const ex_tensor *first = &res[at];
        ex_tensor *dst = &o[p->index];
        uint32_t n = ngdev(l, p);
        if (dst->data == NULL) {
            /* The global shape: the local one times the splits. */
            uint32_t co[XFORM_NAXIS] = {0};
            int64_t nblk[IR_MAX_RANK], idx[IR_MAX_RANK], dims[IR_MAX_RANK];
            int rc;
            blocks(l, p, co, first->rank, nblk, idx);
            for (uint32_t d = 0; d < first->rank; d++)
                dims[d] = first->dims[d] * nblk[d];
            if ((rc = ex_tensor_init(dst, first->dtype, first->rank, dims)) != 0) {
                for (uint32_t j = 0; j < nseq; j++)
                    ex_tensor_fini(&o[j]);
                di_free(o);
                return di_error_set(err, rc, "cannot allocate a result");
            }
        }
        for (uint32_t k = 0; k < n; k++) {
            const ex_tensor *t = &res[at + k];
            uint32_t co[XFORM_NAXIS];
            int64_t nblk[IR_MAX_RANK], idx[IR_MAX_RANK], off[IR_MAX_RANK];
            int skip = 0, add = 0;
            coords(l, p, k, co);
            for (int a = 1; a < XFORM_NAXIS; a++) {
                if (p->place[a] == XFORM_PLACE_R && co[a] != 0)
                    skip = 1;
                if (p->place[a] == XFORM_PLACE_P)
                    add = 1;
            }
            if (skip)
                continue;
            blocks(l, p, co, t->rank, nblk, idx);
            for (uint32_t d = 0; d < t->rank; d++)
                off[d] = idx[d] * t->dims[d];
            block_copy(dst, (ex_tensor *)t, off, 1, add);
        }
        at += n;
    }
    *out = o;
    *nout = nseq;
    return 0;
}
