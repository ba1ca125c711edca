/*
 * stash.c: weight stashing for pipeline parallelism.
 *
 * Under an asynchronous pipeline the backward pass of a microbatch must use
 * the weights its forward pass used, although later forward passes ran in
 * between. PipeDream (Narayanan et al., SOSP 2019) keeps one weight version
 * per microbatch in flight; PipeDream-2BW (Narayanan et al., ICML 2021)
 * keeps two and updates once per batch of microbatches, so within a step
 * every backward chunk reads the same copy.
 *
 * Here a stash is a copy of the stage's weights that the forward chunk makes
 * (a Cast to the same type, marked dist.mem = "stashed" so the simulator's
 * memory profile shows it apart) and that the backward chunk reads instead
 * of the live weight: per microbatch for PipeDream, once (by the first
 * microbatch) for 2BW. The pipeline assembly (pipeline.c, chunk.c) asks
 * these functions which weights a backward program reads from a stash, when
 * a forward chunk copies, which copy a backward chunk reads, and emits the
 * copies through xf_stash_copy.
 */
#include "xform/xform_int.h"

#include <assert.h>
#include <stdio.h>

int
xf_stash_copies(const xf_ctx *c, uint32_t mb)
{
    return c->s.stash == STRATEGY_STASH_PIPEDREAM || (c->s.stash == STRATEGY_STASH_2BW && mb == 0);
}

uint32_t
xf_stash_version(const xf_ctx *c, uint32_t mb)
{
    return c->s.stash == STRATEGY_STASH_2BW ? 0 : mb;
}

int
xf_stash_per_microbatch(const xf_ctx *c)
{
    return c->s.stash == STRATEGY_STASH_PIPEDREAM;
}

uint32_t
xf_stash_select(const xf_ctx *c, const ir_id *in, uint32_t n, ir_id *out)
{
    uint32_t k = 0;
    if (c->s.stash == STRATEGY_STASH_NONE)
        return 0;
    for (uint32_t j = 0; j < n; j++)
        if (c->vflags[in[j]] & XF_V_WEIGHT)
            out[k++] = in[j];
    assert(k <= n);
    return k;
}

int
xf_stash_copy(xf_body *b, ir_id v, xf_local *copy)
{
    const ir_module *m = b->c->m;
    ir_module *out = b->out;
    ir_id op, ty;
    xf_local l;
    char nm[256];
    int rc = xf_body_get(b, v, &l);
    if (rc != 0)
        return rc;
    ty = out->values[l.v].type;
    op = ir_op_add(out, b->region, IR_OP_CAST, 1, &l.v, 1, &ty, NULL);
    ir_op_set_int(out, op, "to", ir_dtype_onnx((ir_dtype)m->types[m->values[v].type].dtype));
    ir_op_set_string(out, op, "dist.mem", "stashed");
    snprintf(nm, sizeof nm, "%s.stash", ir_str_get(m, m->values[v].name));
    out->values[ir_op_output(out, op, 0)].name = ir_str(out, nm);
    copy->v = ir_op_output(out, op, 0);
    copy->pl = l.pl;
    return 0;
}
