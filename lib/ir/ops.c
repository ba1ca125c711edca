/*
 * ops.c: the op table's functions: shape inference (infer_*) and FLOP/byte
 * counts (cost_*), and name lookup including DistIR's aliases.
 */
#include "ir/ir.h"

#include <string.h>

static int
infer_broadcast(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    (void)out;
    return di_error_set(err, DI_EUNSUPPORTED, "%s: shape inference not implemented", ir_op_name(m, op));
}

static int
infer_cast(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    (void)out;
    return di_error_set(err, DI_EUNSUPPORTED, "%s: shape inference not implemented", ir_op_name(m, op));
}

static int
infer_concat(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    (void)out;
    return di_error_set(err, DI_EUNSUPPORTED, "%s: shape inference not implemented", ir_op_name(m, op));
}

static int
infer_constant(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    (void)out;
    return di_error_set(err, DI_EUNSUPPORTED, "%s: shape inference not implemented", ir_op_name(m, op));
}

static int
infer_dropout(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    (void)out;
    return di_error_set(err, DI_EUNSUPPORTED, "%s: shape inference not implemented", ir_op_name(m, op));
}

static int
infer_first_input(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    (void)out;
    return di_error_set(err, DI_EUNSUPPORTED, "%s: shape inference not implemented", ir_op_name(m, op));
}

static int
infer_gather(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    (void)out;
    return di_error_set(err, DI_EUNSUPPORTED, "%s: shape inference not implemented", ir_op_name(m, op));
}

static int
infer_gathergrad(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    (void)out;
    return di_error_set(err, DI_EUNSUPPORTED, "%s: shape inference not implemented", ir_op_name(m, op));
}

static int
infer_gemm(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    (void)out;
    return di_error_set(err, DI_EUNSUPPORTED, "%s: shape inference not implemented", ir_op_name(m, op));
}

static int
infer_grad_like_x(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    (void)out;
    return di_error_set(err, DI_EUNSUPPORTED, "%s: shape inference not implemented", ir_op_name(m, op));
}

static int
infer_layernorm(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    (void)out;
    return di_error_set(err, DI_EUNSUPPORTED, "%s: shape inference not implemented", ir_op_name(m, op));
}

static int
infer_loss(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    (void)out;
    return di_error_set(err, DI_EUNSUPPORTED, "%s: shape inference not implemented", ir_op_name(m, op));
}

static int
infer_matmul(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    (void)out;
    return di_error_set(err, DI_EUNSUPPORTED, "%s: shape inference not implemented", ir_op_name(m, op));
}

static int
infer_matmulgrad(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    (void)out;
    return di_error_set(err, DI_EUNSUPPORTED, "%s: shape inference not implemented", ir_op_name(m, op));
}

static int
infer_none(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    (void)out;
    return di_error_set(err, DI_EUNSUPPORTED, "%s: shape inference not implemented", ir_op_name(m, op));
}

static int
infer_opaque(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    (void)out;
    return di_error_set(err, DI_EUNSUPPORTED, "%s: shape inference not implemented", ir_op_name(m, op));
}

static int
infer_reduce(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    (void)out;
    return di_error_set(err, DI_EUNSUPPORTED, "%s: shape inference not implemented", ir_op_name(m, op));
}

static int
infer_reshape(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    (void)out;
    return di_error_set(err, DI_EUNSUPPORTED, "%s: shape inference not implemented", ir_op_name(m, op));
}

static int
infer_reshape_reduce(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    (void)out;
    return di_error_set(err, DI_EUNSUPPORTED, "%s: shape inference not implemented", ir_op_name(m, op));
}

static int
infer_same(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    (void)out;
    return di_error_set(err, DI_EUNSUPPORTED, "%s: shape inference not implemented", ir_op_name(m, op));
}

static int
infer_send(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    (void)out;
    return di_error_set(err, DI_EUNSUPPORTED, "%s: shape inference not implemented", ir_op_name(m, op));
}

static int
infer_slice(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    (void)out;
    return di_error_set(err, DI_EUNSUPPORTED, "%s: shape inference not implemented", ir_op_name(m, op));
}

static int
infer_split(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    (void)out;
    return di_error_set(err, DI_EUNSUPPORTED, "%s: shape inference not implemented", ir_op_name(m, op));
}

static int
infer_squeeze(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    (void)out;
    return di_error_set(err, DI_EUNSUPPORTED, "%s: shape inference not implemented", ir_op_name(m, op));
}

static int
infer_transpose(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    (void)out;
    return di_error_set(err, DI_EUNSUPPORTED, "%s: shape inference not implemented", ir_op_name(m, op));
}

static int
infer_tuple(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    (void)out;
    return di_error_set(err, DI_EUNSUPPORTED, "%s: shape inference not implemented", ir_op_name(m, op));
}

static int
infer_tupleget(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    (void)out;
    return di_error_set(err, DI_EUNSUPPORTED, "%s: shape inference not implemented", ir_op_name(m, op));
}

static int
infer_unsqueeze(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    (void)out;
    return di_error_set(err, DI_EUNSUPPORTED, "%s: shape inference not implemented", ir_op_name(m, op));
}

static int
infer_where(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    (void)out;
    return di_error_set(err, DI_EUNSUPPORTED, "%s: shape inference not implemented", ir_op_name(m, op));
}

static void
cost_comm(const ir_module *m, ir_id op, ir_cost *c)
{
    (void)m;
    (void)op;
    memset(c, 0, sizeof *c);
}

static void
cost_copy(const ir_module *m, ir_id op, ir_cost *c)
{
    (void)m;
    (void)op;
    memset(c, 0, sizeof *c);
}

static void
cost_elemwise(const ir_module *m, ir_id op, ir_cost *c)
{
    (void)m;
    (void)op;
    memset(c, 0, sizeof *c);
}

static void
cost_gelu(const ir_module *m, ir_id op, ir_cost *c)
{
    (void)m;
    (void)op;
    memset(c, 0, sizeof *c);
}

static void
cost_gemm(const ir_module *m, ir_id op, ir_cost *c)
{
    (void)m;
    (void)op;
    memset(c, 0, sizeof *c);
}

static void
cost_layernorm(const ir_module *m, ir_id op, ir_cost *c)
{
    (void)m;
    (void)op;
    memset(c, 0, sizeof *c);
}

static void
cost_matmul(const ir_module *m, ir_id op, ir_cost *c)
{
    (void)m;
    (void)op;
    memset(c, 0, sizeof *c);
}

static void
cost_matmulgrad(const ir_module *m, ir_id op, ir_cost *c)
{
    (void)m;
    (void)op;
    memset(c, 0, sizeof *c);
}

static void
cost_none(const ir_module *m, ir_id op, ir_cost *c)
{
    (void)m;
    (void)op;
    memset(c, 0, sizeof *c);
}

static void
cost_opaque(const ir_module *m, ir_id op, ir_cost *c)
{
    (void)m;
    (void)op;
    memset(c, 0, sizeof *c);
}

static void
cost_reduce(const ir_module *m, ir_id op, ir_cost *c)
{
    (void)m;
    (void)op;
    memset(c, 0, sizeof *c);
}

static void
cost_softmax(const ir_module *m, ir_id op, ir_cost *c)
{
    (void)m;
    (void)op;
    memset(c, 0, sizeof *c);
}

static void
cost_transcend(const ir_module *m, ir_id op, ir_cost *c)
{
    (void)m;
    (void)op;
    memset(c, 0, sizeof *c);
}

static int
infer_adam(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    (void)out;
    return di_error_set(err, DI_EUNSUPPORTED, "%s: shape inference not implemented", ir_op_name(m, op));
}
static int
infer_allgather(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    (void)out;
    return di_error_set(err, DI_EUNSUPPORTED, "%s: shape inference not implemented", ir_op_name(m, op));
}
static int
infer_allreduce(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    (void)out;
    return di_error_set(err, DI_EUNSUPPORTED, "%s: shape inference not implemented", ir_op_name(m, op));
}
static int
infer_alltoall(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    (void)out;
    return di_error_set(err, DI_EUNSUPPORTED, "%s: shape inference not implemented", ir_op_name(m, op));
}
static int
infer_broadcast_tuple(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    (void)out;
    return di_error_set(err, DI_EUNSUPPORTED, "%s: shape inference not implemented", ir_op_name(m, op));
}
static int
infer_gather_tuple(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    (void)out;
    return di_error_set(err, DI_EUNSUPPORTED, "%s: shape inference not implemented", ir_op_name(m, op));
}
static int
infer_layernormgrad(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    (void)out;
    return di_error_set(err, DI_EUNSUPPORTED, "%s: shape inference not implemented", ir_op_name(m, op));
}
static int
infer_pmap(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    (void)out;
    return di_error_set(err, DI_EUNSUPPORTED, "%s: shape inference not implemented", ir_op_name(m, op));
}
static int
infer_reducescatter(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    (void)out;
    return di_error_set(err, DI_EUNSUPPORTED, "%s: shape inference not implemented", ir_op_name(m, op));
}
static int
infer_scatter(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    (void)out;
    return di_error_set(err, DI_EUNSUPPORTED, "%s: shape inference not implemented", ir_op_name(m, op));
}
static int
infer_sceloss(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    (void)out;
    return di_error_set(err, DI_EUNSUPPORTED, "%s: shape inference not implemented", ir_op_name(m, op));
}
static int
infer_scelossgrad(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    (void)out;
    return di_error_set(err, DI_EUNSUPPORTED, "%s: shape inference not implemented", ir_op_name(m, op));
}
static void
cost_adam(const ir_module *m, ir_id op, ir_cost *c)
{
    (void)m;
    (void)op;
    memset(c, 0, sizeof *c);
}

const ir_opinfo ir_opinfos[IR_NOPKIND] = {
    [IR_OP_NONE] = {"none", 0, 0, 0, 0, 0, "", NULL, NULL},
#define IR_OP_ROW_(e, name, a, b, c, d, fl, at, inf, cost) \
    [IR_OP_##e] = {name, a, b, c, d, fl, at, infer_##inf, cost_##cost},
    IR_OP_LIST(IR_OP_ROW_)
#undef IR_OP_ROW_
};

int
ir_opkind_from_name(const char *s, size_t len)
{
    for (int k = 1; k < IR_NOPKIND; k++)
        if (strlen(ir_opinfos[k].name) == len && memcmp(ir_opinfos[k].name, s, len) == 0)
            return k;
    return IR_OP_NONE;
}

const char *
ir_op_name(const ir_module *m, ir_id op)
{
    if (m->ops[op].kind == IR_OP_OPAQUE && m->ops[op].opaque)
        return ir_str_get(m, m->ops[op].opaque);
    return ir_opkind_name(m->ops[op].kind);
}

int
ir_op_infer(ir_module *m, ir_id op, ir_id *out, di_error *err)
{
    return ir_opinfos[m->ops[op].kind].infer(m, op, out, err);
}

void
ir_op_cost(const ir_module *m, ir_id op, ir_cost *c)
{
    ir_opinfos[m->ops[op].kind].cost(m, op, c);
}
