/*
 * shard.c: sharding propagation over a sequential training step on the
 * extended mesh [microbatch, dp, tp, cp] (docs/transforms.md).
 *
 * Every op kind has one rule (the table `rules` below) that describes the
 * op as factors, in the manner of GSPMD and Shardy: each dimension of each
 * operand maps to a factor of the op's iteration space or to none (a
 * broadcast dimension, or one the op cannot split). Splitting a factor on a
 * mesh axis splits every operand dimension that maps to it; an output that
 * lacks the factor becomes a partial sum (P) when the op sums over it
 * (MatMul's K, MatMulGrad's batch for the weight gradient, ReduceSumTo), a
 * partial sum scaled by 1/n when it is the mean of a loss, and the factor
 * cannot be split at all otherwise (a softmax axis, a layer norm's
 * normalized dimensions, a concatenation axis, a vocabulary).
 *
 * Propagation visits ops in order and decides, per mesh axis independently,
 * one factor to split (or none):
 *   - a partial-sum input passes through only ops that are linear in it and
 *     cheap to run on partials (Add of two partials, views, ReduceSumTo,
 *     Concat, Split, Mul by a non-partial): Add(P, P) = P, but Relu(P) or
 *     Add(P, R) needs the reduction first;
 *   - on the microbatch and data axes the op follows the split of its batch
 *     data inputs (so weight gradients come out as partial sums: the
 *     data-parallel gradient reduction and the microbatch accumulation);
 *   - on the tensor axis a sequence-parallel hint (dist.seq) comes first,
 *     then the split of a weight (Megatron's column and row layouts), then a
 *     split of an activation unless following it would create a partial sum.
 * The inputs' required placements and the outputs' placements follow from
 * the chosen factor; where an input's placement differs from what the op
 * needs, lowering inserts the resharding collective.
 */
#include "xform/xform_int.h"

#include <stdio.h>
#include <string.h>

typedef int (*rule_fn)(const ir_module *m, ir_id op, rule *r);

static int
newf(rule *r, int kind)
{
    if (r->nf >= XF_MAXF)
        return -1;
    r->kind[r->nf] = (uint8_t)kind;
    r->explicit_kind[r->nf] = kind != F_FREE;
    return (int)r->nf++;
}

static void
setf(rule *r, int f, int kind)
{
    if (f >= 0) {
        r->kind[f] = (uint8_t)kind;
        r->explicit_kind[f] = 1;
    }
}

/* ---- builders ---- */

/* Elementwise with numpy broadcasting: one factor per dimension of result 0. */
static int
r_elemwise(const ir_module *m, ir_id op, rule *r)
{
    uint32_t ro = r->rank[r->nin];
    int f[IR_MAX_RANK];
    (void)m;
    (void)op;
    for (uint32_t d = 0; d < ro; d++)
        f[d] = r->dims[r->nin][d] > 1 ? newf(r, F_FREE) : -1;
    for (uint32_t k = 0; k < r->nin + r->nout; k++) {
        uint32_t rk = r->rank[k];
        if (rk > ro)
            return -1;
        for (uint32_t d = 0; d < rk; d++) {
            uint32_t od = d + ro - rk;
            r->map[k][d] = (int8_t)(r->dims[k][d] == r->dims[r->nin][od] ? f[od] : -1);
        }
    }
    return 0;
}

/* The factors of a (possibly batched) matmul a[.., M, K] x b[.., K, N] -> y[.., M, N]. */
static int
matmul_factors(rule *r, uint32_t ia, uint32_t ib, uint32_t iy, int8_t *ma, int8_t *mb, int8_t *my)
{
    uint32_t ra = r->rank[ia], rb = r->rank[ib], ry = r->rank[iy];
    uint32_t nbatch;
    int fm = -1, fn = -1, fk;
    if (ra == 0 || rb == 0)
        return -1;
    if (ry < (uint32_t)(ra > 1) + (uint32_t)(rb > 1))
        return -1;
    nbatch = ry - (uint32_t)(ra > 1) - (uint32_t)(rb > 1);
    for (uint32_t d = 0; d < nbatch; d++)
        my[d] = (int8_t)(r->dims[iy][d] > 1 ? newf(r, F_FREE) : -1);
    if (ra > 1)
        fm = newf(r, F_FREE), my[nbatch] = (int8_t)fm;
    if (rb > 1)
        fn = newf(r, F_FREE), my[ry - 1] = (int8_t)fn;
    fk = newf(r, F_FREE);
    if (fk < 0)
        return -1;
    if (ra == 1) {
        ma[0] = (int8_t)fk;
    } else {
        uint32_t ab = ra - 2;
        ma[ra - 2] = (int8_t)fm;
        ma[ra - 1] = (int8_t)fk;
        for (uint32_t d = 0; d < ab; d++) {
            int64_t yd = d + nbatch >= ab ? (int64_t)(d + nbatch - ab) : -1;
            ma[d] = (int8_t)(yd >= 0 && r->dims[ia][d] == r->dims[iy][yd] ? my[yd] : -1);
        }
    }
    if (rb == 1) {
        mb[0] = (int8_t)fk;
    } else {
        uint32_t bb = rb - 2;
        mb[rb - 2] = (int8_t)fk;
        mb[rb - 1] = (int8_t)fn;
        for (uint32_t d = 0; d < bb; d++) {
            int64_t yd = d + nbatch >= bb ? (int64_t)(d + nbatch - bb) : -1;
            mb[d] = (int8_t)(yd >= 0 && r->dims[ib][d] == r->dims[iy][yd] ? my[yd] : -1);
        }
    }
    return 0;
}

static int
r_matmul(const ir_module *m, ir_id op, rule *r)
{
    (void)m;
    (void)op;
    r->sums = 1;
    return matmul_factors(r, 0, 1, 2, r->map[0], r->map[1], r->map[2]);
}

/* MatMulGrad(a, b, dy) -> (da, db): the matmul's factors; each output sums what it lacks. */
static int
r_matmulgrad(const ir_module *m, ir_id op, rule *r)
{
    (void)m;
    (void)op;
    r->sums = 1;
    if (matmul_factors(r, 0, 1, 2, r->map[0], r->map[1], r->map[2]) != 0)
        return -1;
    memcpy(r->map[3], r->map[0], sizeof r->map[0]);
    memcpy(r->map[4], r->map[1], sizeof r->map[1]);
    return 0;
}

static int
r_gemm(const ir_module *m, ir_id op, rule *r)
{
    int ta = ir_op_int(m, op, "transA", 0) != 0, tb = ir_op_int(m, op, "transB", 0) != 0;
    int fm, fn, fk;
    uint32_t iy = r->nin;
    if (r->rank[0] != 2 || r->rank[1] != 2 || r->rank[iy] != 2)
        return -1;
    r->sums = 1;
    fm = newf(r, F_FREE);
    fn = newf(r, F_FREE);
    fk = newf(r, F_FREE);
    r->map[0][ta ? 1 : 0] = (int8_t)fm;
    r->map[0][ta ? 0 : 1] = (int8_t)fk;
    r->map[1][tb ? 1 : 0] = (int8_t)fk;
    r->map[1][tb ? 0 : 1] = (int8_t)fn;
    r->map[iy][0] = (int8_t)fm;
    r->map[iy][1] = (int8_t)fn;
    if (r->nin == 3) {
        uint32_t rc = r->rank[2];
        int f2[2] = {fm, fn};
        for (uint32_t d = 0; d < rc; d++)
            r->map[2][d] = (int8_t)(r->dims[2][d] == r->dims[iy][d + 2 - rc] ? f2[d + 2 - rc] : -1);
        r->lin = LIN_NONE;
    }
    return 0;
}

/* Same shape everywhere; one axis (attribute "axis", default -1 or 0) cannot split. */
static int
identity_axis(const ir_module *m, ir_id op, rule *r, int64_t dflt)
{
    int64_t axis;
    uint32_t ro = r->rank[r->nin];
    if (r_elemwise(m, op, r) != 0)
        return -1;
    axis = ir_op_int(m, op, "axis", dflt);
    if (axis < 0)
        axis += ro;
    if (axis >= 0 && (uint32_t)axis < ro && r->map[r->nin][axis] >= 0)
        setf(r, r->map[r->nin][axis], F_WHOLE);
    return 0;
}

static int
r_softmax(const ir_module *m, ir_id op, rule *r)
{
    return identity_axis(m, op, r, -1);
}

static int
r_concat_split(const ir_module *m, ir_id op, rule *r)
{
    /* Concat and Split: every operand has the rank of the result; the axis stays whole. */
    uint32_t ro = r->rank[r->nin];
    int f[IR_MAX_RANK];
    int64_t axis = ir_op_int(m, op, "axis", 0);
    if (axis < 0)
        axis += ro;
    for (uint32_t d = 0; d < ro; d++)
        f[d] = (int64_t)d == axis ? -1 : newf(r, F_FREE);
    for (uint32_t k = 0; k < r->nin + r->nout; k++) {
        if (r->rank[k] != ro)
            return -1;
        for (uint32_t d = 0; d < ro; d++)
            r->map[k][d] = (int8_t)f[d];
    }
    return 0;
}

static int
r_slice(const ir_module *m, ir_id op, rule *r)
{
    uint32_t n, nstart, ro = r->rank[1];
    const int64_t *axes = ir_op_ints(m, op, "axes", &n);
    (void)ir_op_ints(m, op, "starts", &nstart);
    if (r_elemwise(m, op, r) != 0)
        return -1;
    if (axes == NULL) {
        /* Without axes the slice covers dimensions 0 .. len(starts) - 1. */
        for (uint32_t d = 0; d < nstart && d < ro; d++)
            if (r->map[1][d] >= 0)
                setf(r, r->map[1][d], F_WHOLE);
        return 0;
    }
    for (uint32_t i = 0; i < n; i++) {
        int64_t a = axes[i] < 0 ? axes[i] + ro : axes[i];
        if (a >= 0 && (uint32_t)a < ro && r->map[1][a] >= 0)
            setf(r, r->map[1][a], F_WHOLE);
    }
    /* A sliced dimension differs in size: r_elemwise left it unmapped on the input. */
    return 0;
}

static int
r_layernorm(const ir_module *m, ir_id op, rule *r)
{
    /* LayerNormalization(x, scale[, bias]) -> y[, mean, inv_std_dev]; RMSNormalization's too. */
    uint32_t rx = r->rank[0];
    int64_t axis = ir_op_int(m, op, "axis", -1);
    int f[IR_MAX_RANK];
    if (axis < 0)
        axis += rx;
    if (axis < 0 || (uint32_t)axis > rx)
        return -1;
    for (uint32_t d = 0; d < rx; d++)
        f[d] = newf(r, (int64_t)d >= axis ? F_WHOLE : F_FREE);
    for (uint32_t k = 0; k < r->nin + r->nout; k++) {
        uint32_t rk = r->rank[k];
        int is_param = k > 0 && k < r->nin;
        int is_stat = k > r->nin;
        for (uint32_t d = 0; d < rk; d++) {
            if (is_param)
                r->map[k][d] = (int8_t)(d + axis < rx ? f[d + axis] : -1);
            else if (is_stat)
                r->map[k][d] = (int8_t)((int64_t)d < axis ? f[d] : -1);
            else
                r->map[k][d] = (int8_t)(d < rx ? f[d] : -1);
        }
    }
    return 0;
}

static int
r_layernormgrad(const ir_module *m, ir_id op, rule *r)
{
    /* (dy, x, scale[, mean, inv_std_dev]) -> dx[, dscale, dbias]; RMS: no mean, no dbias. */
    uint32_t rx = r->rank[1];
    int64_t axis = ir_op_int(m, op, "axis", -1);
    int f[IR_MAX_RANK];
    if (axis < 0)
        axis += rx;
    if (axis < 0 || (uint32_t)axis > rx)
        return -1;
    r->sums = 1;
    for (uint32_t d = 0; d < rx; d++)
        f[d] = newf(r, (int64_t)d >= axis ? F_WHOLE : F_FREE);
    for (uint32_t k = 0; k < r->nin + r->nout; k++) {
        uint32_t rk = r->rank[k];
        int is_param = k == 2 || k > r->nin;
        int is_stat = k == 3 || k == 4;
        if (k >= r->nin)
            is_stat = 0;
        for (uint32_t d = 0; d < rk; d++) {
            if (is_stat)
                r->map[k][d] = (int8_t)((int64_t)d < axis ? f[d] : -1);
            else if (is_param)
                r->map[k][d] = (int8_t)(d + axis < rx ? f[d + axis] : -1);
            else
                r->map[k][d] = (int8_t)(d < rx ? f[d] : -1);
        }
    }
    return 0;
}

/* Reshape: dimensions grouped into blocks of equal products; a block's leading dims share. */
static int
r_reshape(const ir_module *m, ir_id op, rule *r)
{
    const int64_t *a = r->dims[0], *b = r->dims[1];
    uint32_t ra = r->rank[0], rb = r->rank[1], i = 0, j = 0;
    (void)m;
    (void)op;
    while (i < ra || j < rb) {
        int64_t pa, pb;
        uint32_t i0, j0;
        while (i < ra && a[i] == 1)
            i++;
        while (j < rb && b[j] == 1)
            j++;
        if (i >= ra || j >= rb)
            break;
        i0 = i;
        j0 = j;
        pa = a[i++];
        pb = b[j++];
        while (pa != pb) {
            if (pa < pb) {
                if (i >= ra)
                    return -1;
                pa *= a[i++];
            } else {
                if (j >= rb)
                    return -1;
                pb *= b[j++];
            }
        }
        {
            int f = newf(r, F_FREE);
            if (f < 0)
                return -1;
            r->map[0][i0] = (int8_t)f;
            r->map[1][j0] = (int8_t)f;
            /* A merge (or split) of several dimensions: the innermost is F_INNER (xform_int.h). */
            if ((i - i0 > 1) != (j - j0 > 1)) {
                uint32_t k = i - i0 > 1 ? 0 : 1, last = k == 0 ? i - 1 : j - 1;
                uint32_t first = k == 0 ? i0 : j0, merged = k == 0 ? j0 : i0;
                const int64_t *dd = r->dims[k];
                if (dd[last] > 1 && last > first) {
                    int g = newf(r, F_INNER);
                    if (g < 0)
                        return -1;
                    r->map[k][last] = (int8_t)g;
                    r->map2[1 - k][merged] = (int8_t)g;
                }
            }
        }
    }
    return 0;
}

static int
r_transpose(const ir_module *m, ir_id op, rule *r)
{
    uint32_t n, ro = r->rank[1];
    const int64_t *perm = ir_op_ints(m, op, "perm", &n);
    for (uint32_t d = 0; d < ro; d++) {
        int64_t src = perm ? (d < n ? perm[d] : -1) : (int64_t)(ro - 1 - d);
        int f;
        if (src < 0 || (uint32_t)src >= r->rank[0])
            return -1;
        f = newf(r, F_FREE);
        r->map[1][d] = (int8_t)f;
        r->map[0][src] = (int8_t)f;
    }
    return 0;
}

/* Unsqueeze/Squeeze: the dimensions that are not inserted or removed map in order. */
static int
r_squeeze_like(const ir_module *m, ir_id op, rule *r)
{
    uint32_t ri = r->rank[0], ro = r->rank[1], i = 0, j = 0;
    (void)m;
    (void)op;
    while (i < ri && j < ro) {
        if (r->dims[0][i] == r->dims[1][j] && r->dims[0][i] != 1) {
            int f = newf(r, F_FREE);
            r->map[0][i++] = (int8_t)f;
            r->map[1][j++] = (int8_t)f;
        } else if (r->dims[0][i] == 1) {
            i++;
        } else if (r->dims[1][j] == 1) {
            j++;
        } else {
            return -1;
        }
    }
    return 0;
}

static int
r_gather(const ir_module *m, ir_id op, rule *r)
{
    /* Gather(data, idx): out = data[:axis] + idx + data[axis+1:]. */
    uint32_t rd = r->rank[0], ri = r->rank[1], ro = r->rank[2];
    int64_t axis = ir_op_int(m, op, "axis", 0);
    if (axis < 0)
        axis += rd;
    if (axis < 0 || (uint32_t)axis >= rd || ro != rd - 1 + ri)
        return -1;
    for (uint32_t d = 0; d < ro; d++) {
        int f = newf(r, F_FREE);
        r->map[2][d] = (int8_t)f;
        if ((int64_t)d < axis)
            r->map[0][d] = (int8_t)f;
        else if (d < axis + ri)
            r->map[1][d - axis] = (int8_t)f;
        else
            r->map[0][d - ri + 1] = (int8_t)f;
    }
    r->map[0][axis] = (int8_t)newf(r, F_VOCAB);
    return 0;
}

/*
 * FlashAttention (q, k, v -> o, lse) and its gradient (q, k, v, o, lse, do ->
 * dq, dk, dv): the leading dimensions (batch, heads) and the query rows;
 * the keys' rows and the head dimension are whole (context parallelism
 * gathers the keys and values), and the gradient sums dk and dv over the
 * query rows (partial sums where the queries are split).
 */
static int
r_flashattn(const ir_module *m, ir_id op, rule *r)
{
    uint32_t rk = r->rank[0], nop = r->nin + r->nout;
    int grad = m->ops[op].kind == IR_OP_FLASHATTNGRAD, fq;
    /* Operands with query rows: q, o, lse (forward: 0, 3, 4; gradient: 0, 3, 4, 5, 6). */
    static const uint8_t rows_f[] = {0, 3, 4}, rows_g[] = {0, 3, 4, 5, 6};
    if (rk < 2 || nop != (grad ? 9u : 5u))
        return -1;
    r->sums = (uint8_t)grad;
    for (uint32_t d = 0; d + 2 < rk; d++) {
        int f = newf(r, F_FREE);
        for (uint32_t k = 0; k < nop; k++)
            r->map[k][d] = (int8_t)f;
    }
    fq = newf(r, F_FREE);
    for (uint32_t i = 0; i < (grad ? 5u : 3u); i++)
        r->map[grad ? rows_g[i] : rows_f[i]][rk - 2] = (int8_t)fq;
    return 0;
}

/* TopK (x -> values, indices) and TopKGrad (dvalues, indices -> dx): every dimension but the last.
 */
static int
r_topk(const ir_module *m, ir_id op, rule *r)
{
    uint32_t rk = r->rank[0];
    (void)m;
    (void)op;
    if (rk == 0 || r->nin + r->nout != 3 || r->rank[1] != rk || r->rank[2] != rk)
        return -1;
    for (uint32_t d = 0; d + 1 < rk; d++) {
        int f = newf(r, F_FREE);
        for (uint32_t k = 0; k < 3; k++)
            r->map[k][d] = (int8_t)f;
    }
    return 0;
}

/*
 * moe.slots, moe.dispatch, moe.combine: the batch (dimension 0 of every
 * operand: slots are counted per row) and the hidden dimension (the last of
 * the tensors of rank 4). The tokens, choices, experts and capacity are not
 * factors: a slot depends on the whole row, and the expert-parallel split is
 * a resharding of the dispatched tensor (all_to_all).
 */
static int
r_moe(const ir_module *m, ir_id op, rule *r)
{
    int fb = newf(r, F_FREE), fh = -1;
    (void)m;
    (void)op;
    for (uint32_t k = 0; k < r->nin + r->nout; k++) {
        if (r->rank[k] == 0)
            return -1;
        r->map[k][0] = (int8_t)fb;
        if (r->rank[k] == 4) {
            if (fh < 0)
                fh = newf(r, F_FREE);
            r->map[k][3] = (int8_t)fh;
        }
    }
    return 0;
}

static int
r_gathergrad(const ir_module *m, ir_id op, rule *r)
{
    /* GatherGrad(idx, dy) -> [shape]: dy = shape[:axis] + idx + shape[axis+1:]. */
    uint32_t ri = r->rank[0], rdy = r->rank[1], ro = r->rank[2];
    int64_t axis = ir_op_int(m, op, "axis", 0);
    if (axis < 0)
        axis += ro;
    if (axis < 0 || (uint32_t)axis >= ro || rdy != ro - 1 + ri)
        return -1;
    r->sums = 1;
    for (uint32_t d = 0; d < ri; d++) {
        int f = newf(r, F_FREE);
        r->map[0][d] = (int8_t)f;
        r->map[1][axis + d] = (int8_t)f;
    }
    for (uint32_t d = 0; d < ro; d++) {
        int f = newf(r, (int64_t)d == axis ? F_VOCAB : F_FREE);
        r->map[2][d] = (int8_t)f;
        if ((int64_t)d < axis)
            r->map[1][d] = (int8_t)f;
        else if ((int64_t)d > axis)
            r->map[1][d - 1 + ri] = (int8_t)f;
    }
    return 0;
}

static int
r_reducesumto(const ir_module *m, ir_id op, rule *r)
{
    uint32_t ri = r->rank[0], ro = r->rank[1];
    (void)m;
    (void)op;
    if (ro > ri)
        return -1;
    r->sums = 1;
    for (uint32_t d = 0; d < ri; d++) {
        int f = r->dims[0][d] > 1 ? newf(r, F_FREE) : -1;
        r->map[0][d] = (int8_t)f;
        if (d >= ri - ro && r->dims[1][d - (ri - ro)] == r->dims[0][d])
            r->map[1][d - (ri - ro)] = (int8_t)f;
    }
    return 0;
}

static int
r_reduce(const ir_module *m, ir_id op, rule *r)
{
    uint32_t n, ri = r->rank[0], j = 0;
    const int64_t *axes = ir_op_ints(m, op, "axes", &n);
    int keep = ir_op_int(m, op, "keepdims", 1) != 0;
    int mean = m->ops[op].kind == IR_OP_REDUCEMEAN;
    r->sums = 1;
    for (uint32_t d = 0; d < ri; d++) {
        int reduced = axes == NULL || n == 0;
        for (uint32_t k = 0; k < n && axes; k++)
            if ((axes[k] < 0 ? axes[k] + ri : axes[k]) == d)
                reduced = 1;
        if (reduced) {
            r->map[0][d] = (int8_t)newf(r, mean ? F_MEAN : F_SUM);
            if (keep)
                j++;
        } else {
            int f = newf(r, F_FREE);
            r->map[0][d] = (int8_t)f;
            if (j < r->rank[1])
                r->map[1][j++] = (int8_t)f;
        }
    }
    return 0;
}

static int
r_mseloss(const ir_module *m, ir_id op, rule *r)
{
    (void)m;
    (void)op;
    for (uint32_t d = 0; d < r->rank[0]; d++) {
        int f = newf(r, F_MEAN);
        r->map[0][d] = (int8_t)f;
        if (d < r->rank[1])
            r->map[1][d] = (int8_t)f;
    }
    return 0;
}

static int
r_mselossgrad(const ir_module *m, ir_id op, rule *r)
{
    (void)m;
    (void)op;
    for (uint32_t d = 0; d < r->rank[0]; d++) {
        int f = newf(r, F_MEANG);
        r->map[0][d] = (int8_t)f;
        if (d < r->rank[1])
            r->map[1][d] = (int8_t)f;
        if (d < r->rank[3])
            r->map[3][d] = (int8_t)f;
    }
    r->scale_in = 2;
    return 0;
}

static int
r_sceloss(const ir_module *m, ir_id op, rule *r)
{
    /* (logits [N, C, d...], labels [N, d...]) -> loss[, log_prob]. */
    ir_reduction red = ir_sce_reduction(m, op);
    int kind = red == IR_REDUCTION_MEAN ? F_MEAN : red == IR_REDUCTION_SUM ? F_SUM : F_FREE;
    uint32_t rl = r->rank[0];
    int classes = rl == 2 && r->nout == 1 ? F_VOCAB : F_WHOLE;
    if (rl < 2 || r->rank[1] != rl - 1)
        return -1;
    for (uint32_t d = 0; d < rl; d++) {
        int f = newf(r, d == 1 ? classes : kind);
        r->map[0][d] = (int8_t)f;
        if (d != 1) {
            uint32_t ld = d == 0 ? 0 : d - 1;
            r->map[1][ld] = (int8_t)f;
            if (kind == F_FREE && ld < r->rank[2])
                r->map[2][ld] = (int8_t)f;
        }
        if (r->nout > 1)
            r->map[3][d] = (int8_t)f;
    }
    return 0;
}

static int
r_scelossgrad(const ir_module *m, ir_id op, rule *r)
{
    /* (dloss, logits [N, C, d...], labels [N, d...]) -> dlogits. */
    ir_reduction red = ir_sce_reduction(m, op);
    int none = red == IR_REDUCTION_NONE, mean = red == IR_REDUCTION_MEAN;
    uint32_t rl = r->rank[1];
    if (rl < 2 || r->rank[2] != rl - 1)
        return -1;
    for (uint32_t d = 0; d < rl; d++) {
        int f = newf(r, d == 1 ? (rl == 2 ? F_VOCAB : F_WHOLE) : mean ? F_MEANG : F_FREE);
        r->map[1][d] = (int8_t)f;
        r->map[3][d] = (int8_t)f;
        if (d != 1) {
            uint32_t ld = d == 0 ? 0 : d - 1;
            r->map[2][ld] = (int8_t)f;
            if (none && ld < r->rank[0])
                r->map[0][ld] = (int8_t)f;
        }
    }
    r->scale_in = 0;
    return 0;
}

static int
r_replicated(const ir_module *m, ir_id op, rule *r)
{
    (void)m;
    (void)op;
    (void)r;
    return 0;
}

/* The rule table: one builder and one partial-sum pattern per op kind. */
typedef struct rule_entry {
    rule_fn fn;
    uint8_t lin;
} rule_entry;

static const rule_entry rules[IR_NOPKIND] = {
    [IR_OP_MATMUL] = {r_matmul, LIN_NONE},
    [IR_OP_GEMM] = {r_gemm, LIN_NONE},
    [IR_OP_ADD] = {r_elemwise, LIN_ALL},
    [IR_OP_SUB] = {r_elemwise, LIN_ALL},
    [IR_OP_MUL] = {r_elemwise, LIN_ONE},
    [IR_OP_DIV] = {r_elemwise, LIN_FIRST},
    [IR_OP_POW] = {r_elemwise, LIN_NONE},
    [IR_OP_SQRT] = {r_elemwise, LIN_NONE},
    [IR_OP_RELU] = {r_elemwise, LIN_NONE},
    [IR_OP_GELU] = {r_elemwise, LIN_NONE},
    [IR_OP_SWISH] = {r_elemwise, LIN_NONE},
    [IR_OP_TANH] = {r_elemwise, LIN_NONE},
    [IR_OP_SIGMOID] = {r_elemwise, LIN_NONE},
    [IR_OP_ERF] = {r_elemwise, LIN_NONE},
    [IR_OP_IDENTITY] = {r_elemwise, LIN_FIRST},
    [IR_OP_CAST] = {r_elemwise, LIN_NONE},
    [IR_OP_DROPOUT] = {r_elemwise, LIN_NONE},
    [IR_OP_SOFTMAX] = {r_softmax, LIN_NONE},
    [IR_OP_LAYERNORM] = {r_layernorm, LIN_NONE},
    [IR_OP_RMSNORM] = {r_layernorm, LIN_NONE},
    [IR_OP_WHERE] = {r_elemwise, LIN_NONE},
    [IR_OP_RESHAPE] = {r_reshape, LIN_FIRST},
    [IR_OP_TRANSPOSE] = {r_transpose, LIN_FIRST},
    [IR_OP_CONCAT] = {r_concat_split, LIN_ALL},
    [IR_OP_SPLIT] = {r_concat_split, LIN_FIRST},
    [IR_OP_SLICE] = {r_slice, LIN_FIRST},
    [IR_OP_GATHER] = {r_gather, LIN_NONE},
    [IR_OP_FLASHATTN] = {r_flashattn, LIN_NONE},
    [IR_OP_TOPK] = {r_topk, LIN_NONE},
    [IR_OP_MOESLOTS] = {r_moe, LIN_NONE},
    [IR_OP_MOEDISPATCH] = {r_moe, LIN_FIRST},
    [IR_OP_MOECOMBINE] = {r_moe, LIN_FIRST},
    [IR_OP_UNSQUEEZE] = {r_squeeze_like, LIN_FIRST},
    [IR_OP_SQUEEZE] = {r_squeeze_like, LIN_FIRST},
    [IR_OP_REDUCEMEAN] = {r_reduce, LIN_FIRST},
    [IR_OP_REDUCESUM] = {r_reduce, LIN_FIRST},
    [IR_OP_CONSTANT] = {r_replicated, LIN_NONE},
    [IR_OP_MSELOSS] = {r_mseloss, LIN_NONE},
    [IR_OP_SCELOSS] = {r_sceloss, LIN_NONE},
    [IR_OP_MATMULGRAD] = {r_matmulgrad, LIN_NONE},
    [IR_OP_RELUGRAD] = {r_elemwise, LIN_NONE},
    [IR_OP_GELUGRAD] = {r_elemwise, LIN_NONE},
    [IR_OP_SWISHGRAD] = {r_elemwise, LIN_NONE},
    [IR_OP_TANHGRAD] = {r_elemwise, LIN_NONE},
    [IR_OP_SIGMOIDGRAD] = {r_elemwise, LIN_NONE},
    [IR_OP_SOFTMAXGRAD] = {r_softmax, LIN_NONE},
    [IR_OP_LAYERNORMGRAD] = {r_layernormgrad, LIN_NONE},
    [IR_OP_RMSNORMGRAD] = {r_layernormgrad, LIN_NONE},
    [IR_OP_DROPOUTGRAD] = {r_elemwise, LIN_NONE},
    [IR_OP_MSELOSSGRAD] = {r_mselossgrad, LIN_NONE},
    [IR_OP_SCELOSSGRAD] = {r_scelossgrad, LIN_NONE},
    [IR_OP_GATHERGRAD] = {r_gathergrad, LIN_NONE},
    [IR_OP_TOPKGRAD] = {r_topk, LIN_FIRST},
    [IR_OP_FLASHATTNGRAD] = {r_flashattn, LIN_NONE},
    [IR_OP_REDUCESUMTO] = {r_reducesumto, LIN_FIRST},
    [IR_OP_SGD] = {r_elemwise, LIN_NONE},
    [IR_OP_ADAM] = {r_elemwise, LIN_NONE},
};

/* Fills r for op; an op without a rule (or whose shapes the rule rejects) gets "replicate all". */
void
xf_rule_build(const ir_module *m, ir_id op, rule *r)
{
    const ir_op *o = &m->ops[op];
    const rule_entry *e = o->kind < IR_NOPKIND ? &rules[o->kind] : NULL;
    int ok = 0;
    memset(r, 0, sizeof *r);
    r->scale_in = -1;
    memset(r->map, -1, sizeof r->map);
    memset(r->map2, -1, sizeof r->map2);
    r->nin = o->ninput;
    r->nout = o->noutput;
    if (e && e->fn && r->nin + r->nout <= XF_MAXO && r->nout > 0) {
        ok = 1;
        for (uint32_t k = 0; k < r->nin + r->nout; k++) {
            ir_id v = k < r->nin ? m->refs[o->inputs + k] : o->outputs + (k - r->nin);
            const ir_type *t = &m->types[m->values[v].type];
            if (t->kind != IR_TYPE_TENSOR) {
                ok = 0;
                break;
            }
            r->rank[k] = (uint8_t)t->rank;
            r->dims[k] = ir_type_dims(m, m->values[v].type);
        }
        if (ok) {
            r->lin = e->lin;
            if (e->fn(m, op, r) != 0)
                ok = 0;
        }
    }
    if (o->kind == IR_OP_CAST && ok) {
        /* Cast is linear only between floating types. */
        const ir_type *ti = &m->types[m->values[m->refs[o->inputs]].type];
        const ir_type *to = &m->types[m->values[o->outputs].type];
        if (ir_dtype_is_float((ir_dtype)ti->dtype) && ir_dtype_is_float((ir_dtype)to->dtype))
            r->lin = LIN_FIRST;
    }
    if (!ok) {
        uint32_t nin = r->nin, nout = r->nout;
        memset(r, 0, sizeof *r);
        memset(r->map, -1, sizeof r->map);
        memset(r->map2, -1, sizeof r->map2);
        r->scale_in = -1;
        r->nin = nin < XF_MAXO ? nin : XF_MAXO;
        r->nout = nout;
        return;
    }
    /* A factor missing from an output is summed there, or cannot split. */
    for (uint32_t f = 0; f < r->nf; f++) {
        if (r->explicit_kind[f])
            continue;
        for (uint32_t k = r->nin; k < r->nin + r->nout; k++) {
            int has = 0;
            for (uint32_t d = 0; d < r->rank[k]; d++)
                if (r->map[k][d] == (int8_t)f)
                    has = 1;
            if (!has)
                r->kind[f] = r->sums ? F_SUM : F_WHOLE;
        }
    }
}

/* ---- propagation ---- */

/* The dimension of operand k that factor f maps to, or -1. */
int
xf_rule_dim(const rule *r, uint32_t k, int f)
{
    for (uint32_t d = 0; d < r->rank[k]; d++)
        if (r->map[k][d] == f)
            return (int)d;
    for (uint32_t d = 0; d < r->rank[k] && f >= 0; d++)
        if (r->map2[k][d] == f)
            return (int)d;
    return -1;
}

/* True when factor f can split on mesh axis a of size n. */
static int
factor_ok(const rule *r, int f, int a, uint32_t n)
{
    if (f < 0 || r->kind[f] == F_WHOLE || (r->kind[f] == F_VOCAB && a != XF_TP) ||
        (r->kind[f] == F_INNER && a != XF_CP))
        return 0;
    return xf_rule_divides(r, f, n);
}

int
xf_rule_divides(const rule *r, int f, uint32_t n)
{
    for (uint32_t k = 0; k < r->nin + r->nout; k++) {
        int d = xf_rule_dim(r, k, f);
        if (d >= 0 && r->dims[k][d] % n != 0)
            return 0;
    }
    return 1;
}

/* The operand value of op (input or output k). */
static ir_id
operand(const ir_module *m, ir_id op, uint32_t k, uint32_t nin)
{
    return k < nin ? m->refs[m->ops[op].inputs + k] : m->ops[op].outputs + (k - nin);
}

/*
 * The operand of an op with the hint (dist.seq) whose sequence dimension the
 * hint names: its first activation operand that has that dimension, or -1.
 */
static int
seq_operand(const xf_ctx *c, ir_id op, const rule *r)
{
    if (c->op[op].seq < 0)
        return -1;
    for (uint32_t k = 0; k < r->nin + r->nout; k++)
        if ((c->vflags[operand(c->m, op, k, r->nin)] & XF_V_BATCH) &&
            r->rank[k] > (uint32_t)c->op[op].seq)
            return (int)k;
    return -1;
}

/*
 * Under sequence parallelism, the tensor axis's factor of an op with the hint:
 * the sequence dimension of seq_operand, or -1.
 */
static int
seq_factor(const xf_ctx *c, ir_id op, const rule *r, uint32_t n)
{
    int k = c->s.sequence_parallel ? seq_operand(c, op, r) : -1, f;
    if (k < 0)
        return -1;
    f = r->map[k][c->op[op].seq];
    return factor_ok(r, f, XF_TP, n) ? f : -1;
}

/*
 * Without sequence parallelism, does an op with the hint take its partial sums
 * whole, all-reduced, rather than pass them on? The residual stream is then whole
 * between blocks, as Megatron-LM keeps it, so that what the backward saves of it is
 * whole too and its reduction is not repeated for the backward's readers (Llama's
 * embedding output).
 */
static int
seq_whole(const xf_ctx *c, ir_id op, const rule *r)
{
    return !c->s.sequence_parallel && seq_operand(c, op, r) >= 0;
}

/*
 * Picks the factor for axis a (or -1), given the placements in[] of the
 * inputs as the op sees them and the axis size n on the op's group.
 */
static int
choose(const xf_ctx *c, ir_id op, const rule *r, int a, uint32_t n, const xf_place *in)
{
    const ir_module *m = c->m;
    int pass, fs;
    if (a == XF_TP && (fs = seq_factor(c, op, r, n)) >= 0)
        return fs;
    if (a == XF_TP && c->vocab_parallel && m->ops[op].kind == IR_OP_GATHERGRAD &&
        c->op[op].tp == XF_TP_VOCAB) {
        /* The embedding's gradient is split as its table: no input says so. */
        int f = -1;
        for (uint32_t d = 0; d < r->rank[r->nin]; d++)
            if (r->map[r->nin][d] >= 0 && r->kind[r->map[r->nin][d]] == F_VOCAB)
                f = r->map[r->nin][d];
        if (factor_ok(r, f, a, n))
            return f;
    }
    if (a == XF_CP && c->op[op].tp == XF_TP_KV && !c->ring)
        return -1; /* keys and values whole on each context rank: gathered here */
    if (a == XF_DP && c->s.ep > 1 && c->op[op].tp == XF_TP_EXPERT && r->nin > 0 &&
        r->rank[0] >= 2 && factor_ok(r, r->map[0][1], a, n))
        return r->map[0][1]; /* tokens laid out by expert [B, E, C, h]: split E */
    if (a == XF_DP) {
        /* An op on expert weights split by expert parallelism works on its experts. */
        for (uint32_t k = 0; k < r->nin; k++) {
            ir_id v = m->refs[m->ops[op].inputs + k];
            int8_t p = in[k].a[a];
            if ((c->vflags[v] & XF_V_EXPERT) && XF_IS_S(p) && p < (int)r->rank[k] &&
                factor_ok(r, r->map[k][p], a, n))
                return r->map[k][p];
        }
    }
    for (pass = 0; pass < 2; pass++) {
        for (uint32_t k = 0; k < r->nin; k++) {
            ir_id v = m->refs[m->ops[op].inputs + k];
            int8_t p = in[k].a[a];
            int batch = (c->vflags[v] & XF_V_BATCH) != 0, f;
            if (!XF_IS_S(p) || p >= (int)r->rank[k])
                continue;
            /* Batch axes follow activations first; the tensor axis weights first. */
            if (a == XF_TP ? batch != pass : batch == pass)
                continue;
            /* An update is split on the tensor (or context) axis as its weight is, whatever its
             * gradient. */
            if ((a == XF_TP || a == XF_CP) && batch && c->op[op].phase == XF_PH_STEP &&
                (ir_opkind_info(m->ops[op].kind)->flags & IR_OPF_OPTIM))
                continue;
            f = r->map[k][p];
            /* On the context axis a merged dimension's split is its inner factor's. */
            if (a == XF_CP && r->map2[k][p] >= 0)
                f = r->map2[k][p];
            if (!factor_ok(r, f, a, n))
                continue;
            if (a == XF_TP && batch && (r->kind[f] == F_SUM || r->kind[f] == F_MEAN))
                continue;
            return f;
        }
    }
    return -1;
}

/* True when the partial-sum inputs on axis a can pass through op unreduced. */
int
xf_rule_passes(const rule *r, int a, const xf_place *in)
{
    uint32_t np = 0, nother_r = 0;
    int first_p = 0;
    if (r->lin == LIN_NONE)
        return 0;
    for (uint32_t k = 0; k < r->nin; k++) {
        int8_t p = in[k].a[a];
        if (p == XF_P) {
            np++;
            if (k == 0)
                first_p = 1;
        } else if (p == XF_R) {
            nother_r++;
        }
    }
    if (np == 0 || np + nother_r != r->nin)
        return 0;
    switch (r->lin) {
    case LIN_ALL:
        return np == r->nin;
    case LIN_FIRST:
        return np == 1 && first_p;
    case LIN_ONE:
        return np == 1;
    default:
        return 0;
    }
}

int
xf_local_dims(const xf_ctx *c, ir_id value, const xf_place *p, const uint32_t *n, int64_t *dims)
{
    const ir_module *m = c->m;
    const ir_type *t = &m->types[m->values[value].type];
    memcpy(dims, ir_type_dims(m, m->values[value].type), t->rank * sizeof *dims);
    for (int a = 0; a < XF_NAXIS; a++) {
        int8_t s = p->a[a];
        if (!XF_IS_S(s))
            continue;
        if ((uint32_t)s >= t->rank || dims[s] % n[a] != 0)
            return -1;
        dims[s] /= n[a];
    }
    return 0;
}

xf_place
xf_xfer_place(const xf_ctx *c, ir_id v, const xf_place *p, uint32_t g, uint32_t h)
{
    static const int drop[2] = {XF_TP, XF_DP};
    xf_place q = *p;
    uint32_t n[XF_NAXIS];
    int64_t dims[IR_MAX_RANK];
    if (xf_same_shape(c, g, h))
        return q;
    xf_group_n(c, h, n);
    for (int a = XF_DP; a < XF_NAXIS; a++)
        if (q.a[a] == XF_P)
            q.a[a] = XF_R;
    if (c->m->types[c->m->values[v].type].kind != IR_TYPE_TENSOR)
        return q;
    for (int i = 0; i < 2 && xf_local_dims(c, v, &q, n, dims) != 0; i++)
        if (XF_IS_S(q.a[drop[i]]))
            q.a[drop[i]] = XF_R;
    return q;
}

/* Input k of op as the op sees it: re-laid out when it comes from a group of another shape. */
static xf_place
input_place(const xf_ctx *c, ir_id op, uint32_t k)
{
    const ir_module *m = c->m;
    ir_id v = m->refs[m->ops[op].inputs + k], d = m->values[v].def;
    if ((c->vflags[v] & XF_V_EXPERT) &&
        !(ir_opkind_info(m->ops[op].kind)->flags & IR_OPF_OPTIM)) {
        /*
         * ZeRO's split of the experts' state over the context ranks (dp.c) is
         * storage: their updates work on it, the passes on gathered weights.
         */
        xf_place p = c->place[v];
        p.a[XF_CP] = XF_R;
        return p;
    }
    if (!c->hetero || d == 0 || (c->vflags[v] & XF_V_CONST))
        return c->place[v];
    return xf_xfer_place(c, v, &c->place[v], xf_op_group(c, d), xf_op_group(c, op));
}

/*
 * A Cast to a wider float once per step (16-bit gradients accumulated in
 * their own dtype, then cast for the f32 optimizer: Megatron-LM's fp16
 * default) keeps partial sums from passing: they are reduced in the narrow
 * dtype first, half the bytes, and bucketed with the other gradients. A
 * per-microbatch widening Cast (f32 accumulation) lets them pass, so that
 * the f32 accumulators are what the step reduces.
 */
static int
widening_step_cast(const xf_ctx *c, ir_id op)
{
    const ir_module *m = c->m;
    const ir_op *o = &m->ops[op];
    if (o->kind != IR_OP_CAST || c->op[op].phase != XF_PH_STEP || o->ninput < 1 || o->noutput < 1)
        return 0;
    return ir_dtype_size((ir_dtype)m->types[m->values[o->outputs].type].dtype) >
           ir_dtype_size((ir_dtype)m->types[m->values[m->refs[o->inputs]].type].dtype);
}

/*
 * A partial sum on the tensor axis that an op before already wants whole
 * (reduced[v]: its all-reduce is made anyway) is whole for the ops after it:
 * they read the reduced value instead of passing the partial sum on, which
 * would need a reduction of its own later. An RMSNorm written out (Llama's:
 * the squares need the whole input, the normalisation is linear in it)
 * otherwise all-reduced the residual for the squares and, again, the
 * normalised output before the next GEMM; and in the backward a product of
 * two partial sums (the norm's gradient and its saved input) reduced both.
 */
int
xf_propagate(xf_ctx *c)
{
    const ir_module *m = c->m;
    const ir_region *fr = &m->regions[c->func];
    xf_place small[64], *in = small;
    uint32_t cin = 64;
    uint8_t *reduced = di_xcalloc(m->nvalue ? m->nvalue : 1, 1); /* reduced[v], above */
    rule r;
    c->req = di_xcalloc(m->nref ? m->nref : 1, sizeof *c->req);
    c->rreq = di_xcalloc(fr->nresult ? fr->nresult : 1, sizeof *c->rreq);
    for (uint32_t i = 0; i < fr->nop; i++) {
        ir_id op = fr->ops[i];
        const ir_op *o = &m->ops[op];
        xf_opinfo *oi = &c->op[op];
        uint32_t n[XF_NAXIS];
        xf_group_n(c, xf_op_group(c, op), n);
        if (o->ninput > cin) {
            if (in != small)
                di_free(in);
            cin = o->ninput;
            in = di_xmalloc(cin * sizeof *in);
        }
        for (uint32_t k = 0; k < o->ninput; k++) {
            in[k] = input_place(c, op, k);
            /* Reduced for an op before: this one reads the reduced value. */
            if (in[k].a[XF_TP] == XF_P && reduced[m->refs[o->inputs + k]])
                in[k].a[XF_TP] = XF_R;
        }
        xf_rule_build(m, op, &r);
        for (uint32_t k = 0; k < o->ninput; k++)
            memset(c->req[o->inputs + k].a, XF_R, XF_NAXIS);
        for (uint32_t k = 0; k < o->noutput; k++)
            memset(c->place[o->outputs + k].a, XF_R, XF_NAXIS);
        for (int a = 0; a < XF_NAXIS; a++) {
            int f;
            /* An axis some group has: placements are the same on every group. */
            if (c->n[a] <= 1)
                continue;
            /*
             * Under sequence parallelism an op with the hint takes its partial sums
             * reduce-scattered along the sequence rather than passing them on: the
             * residual stream between blocks is sequence-split, as Megatron-LM keeps
             * it, so what the backward saves of it is 1/tp of it and the next block's
             * reduction is not repeated for the backward's readers; without it, such
             * an op takes them all-reduced (seq_whole). With context parallelism
             * too, inside the context rank's block (until 2026-12-07 not: the
             * Llama's embedding output, an Identity, and the residual Adds of two
             * partial sums passed them on, and its residual stream was whole on the
             * tensor ranks; test_sp_with_cp).
             */
            if (xf_rule_passes(&r, a, in) && !widening_step_cast(c, op) &&
                !(a == XF_TP &&
                  (seq_factor(c, op, &r, n[a]) >= 0 || seq_whole(c, op, &r)))) {
                for (uint32_t k = 0; k < o->ninput; k++)
                    c->req[o->inputs + k].a[a] = in[k].a[a];
                for (uint32_t k = 0; k < o->noutput; k++)
                    c->place[o->outputs + k].a[a] = XF_P;
                continue;
            }
            f = choose(c, op, &r, a, n[a], in);
            if (f < 0)
                continue;
            for (uint32_t k = 0; k < o->ninput && k < XF_MAXO; k++) {
                int d = xf_rule_dim(&r, k, f);
                c->req[o->inputs + k].a[a] = (int8_t)(d >= 0 ? d : XF_R);
            }
            for (uint32_t k = 0; k < o->noutput; k++) {
                int d = xf_rule_dim(&r, r.nin + k, f);
                if (d >= 0)
                    c->place[o->outputs + k].a[a] = (int8_t)d;
                else if (r.kind[f] == F_SUM || r.kind[f] == F_MEAN ||
                         (r.kind[f] == F_VOCAB && o->kind == IR_OP_GATHER))
                    c->place[o->outputs + k].a[a] = XF_P;
            }
            if (r.kind[f] == F_MEAN) {
                oi->scale /= n[a];
                oi->scale_at = XF_SCALE_OUT;
            } else if (r.kind[f] == F_MEANG && r.scale_in >= 0) {
                oi->scale /= n[a];
                oi->scale_at = XF_SCALE_IN;
                oi->scale_in = (uint8_t)r.scale_in;
            }
        }
        /*
         * Ring attention: the keys and values (and their gradients) stay split
         * along the sequence where the queries are; the ring brings the
         * other blocks (lower.c).
         */
        if (c->ring && n[XF_CP] > 1 &&
            (o->kind == IR_OP_FLASHATTN || o->kind == IR_OP_FLASHATTNGRAD) && o->ninput >= 3) {
            int8_t rows = (int8_t)(c->m->types[c->m->values[m->refs[o->inputs]].type].rank - 2);
            if (c->req[o->inputs].a[XF_CP] == rows) {
                c->req[o->inputs + 1].a[XF_CP] = rows;
                c->req[o->inputs + 2].a[XF_CP] = rows;
                if (o->kind == IR_OP_FLASHATTNGRAD && o->noutput == 3) {
                    c->place[o->outputs + 1].a[XF_CP] = rows;
                    c->place[o->outputs + 2].a[XF_CP] = rows;
                }
            }
        }
        /* (An input in[] no longer shows as P is marked already.) */
        for (uint32_t k = 0; k < o->ninput; k++)
            if (in[k].a[XF_TP] == XF_P && c->req[o->inputs + k].a[XF_TP] == XF_R)
                reduced[m->refs[o->inputs + k]] = 1;
        /* Every operand's local shape must exist. */
        for (uint32_t k = 0; k < o->ninput + o->noutput; k++) {
            ir_id v = k < o->ninput ? m->refs[o->inputs + k] : o->outputs + (k - o->ninput);
            const xf_place *p = k < o->ninput ? &c->req[o->inputs + k] : &c->place[v];
            int64_t dims[IR_MAX_RANK];
            if (m->types[m->values[v].type].kind != IR_TYPE_TENSOR)
                continue;
            if (xf_local_dims(c, v, p, n, dims) != 0) {
                ir_label lab = ir_op_label(m, op);
                if (in != small)
                    di_free(in);
                di_free(reduced);
                return di_error_set(c->err, DI_ESTRATEGY,
                                    "%s: the strategy splits a dimension of %s %u that the "
                                    "degrees do not divide",
                                    lab.s, k < o->ninput ? "input" : "result",
                                    k < o->ninput ? k : k - o->ninput);
            }
        }
    }
    if (in != small)
        di_free(in);
    di_free(reduced);
    for (uint32_t i = 0; i < fr->nresult; i++) {
        xf_place p = c->place[fr->results[i]];
        for (int a = 0; a < XF_NAXIS; a++)
            if (p.a[a] == XF_P)
                p.a[a] = XF_R;
        c->rreq[i] = p;
    }
    return 0;
}
