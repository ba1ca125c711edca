/*
 * dp_tuple.c: the tuple data-parallel form (xform_data_parallel_tuple), the
 * tuple-form local view with the sequential inputs on device 0:
 *
 *   scatter the batch data, broadcast the weights;
 *   pmap 1: the forward and backward pass on every device's share, returning
 *           the gradients (in weight order) and the other results it computes;
 *   one tuple-form all_reduce per gradient;
 *   pmap 2: the optimizer ops on every replica;
 *   results back on device 0: updated weights from replica 0, batch-shaped
 *   results gathered along dimension 0, scalars (the loss) averaged.
 *
 * It is the golden-test form (tests/ir/seed001_mlp_dp.dir) and the simplest
 * data-parallel module; xform_apply produces the general form (a pmap per
 * pipeline chunk over a [dp, tp] mesh with mesh-form collectives). Shapes in
 * the bodies come from ir_op_infer on the local inputs, so reshapes must copy
 * or infer the batch dimension (docs/models.md).
 */
#include "xform/xform.h"

#include <stdio.h>
#include <string.h>

#include "xform/autodiff.h"

typedef struct dpt {
    const ir_module *m;
    ir_module *out;
    ir_id func;
    ir_id devvar;
    uint32_t n;
    const int32_t *devices;
    ir_id *map;   /* source value -> output value (in the region being built) */
    di_error *err;
} dpt;

static int
infer(dpt *d, ir_id op)
{
    di_error e;
    di_error_clear(&e);
    if (ir_op_infer_results(d->out, op, &e) != 0)
        return di_error_set(d->err, DI_EUNSUPPORTED, "data parallel: %s", e.msg);
    return 0;
}

static void
copy_name(dpt *d, ir_id dst, ir_id src, const char *suffix)
{
    const char *n = ir_str_get(d->m, d->m->values[src].name);
    char buf[256];
    if (*n == '\0')
        return;
    snprintf(buf, sizeof buf, "%s%s", n, suffix);
    d->out->values[dst].name = ir_str(d->out, buf);
}

/* The local (device variable) type of a source value's type, dimension 0 divided when split. */
static ir_id
local_type(dpt *d, ir_id srcv, int split)
{
    const ir_type *t = &d->m->types[d->m->values[srcv].type];
    int64_t dims[IR_MAX_RANK];
    memcpy(dims, ir_type_dims(d->m, d->m->values[srcv].type), t->rank * sizeof *dims);
    if (split)
        dims[0] /= d->n;
    return ir_type_tensor_var(d->out, (ir_dtype)t->dtype, t->rank, dims, d->devvar);
}

/*
 * Clones source op into region r of the output with mapped inputs (a
 * per-device copy); in[] has room for the op's inputs.
 */
static int
clone_op_with(dpt *d, ir_id r, ir_id op, ir_id *in)
{
    const ir_module *m = d->m;
    const ir_op *o = &m->ops[op];
    ir_id nop;
    int rc;
    for (uint32_t k = 0; k < o->ninput; k++) {
        in[k] = d->map[m->refs[o->inputs + k]];
        if (in[k] == 0)
            return di_error_set(d->err, DI_EINTERNAL, "data parallel: unmapped input");
    }
    nop = ir_op_add(d->out, r, o->kind, o->ninput, in, o->noutput, NULL, NULL);
    d->out->ops[nop].name = o->name ? ir_str(d->out, ir_str_get(m, o->name)) : 0;
    for (uint32_t j = 0; j < o->nattr; j++) {
        const ir_attr *a = &m->attrs[o->attrs + j];
        const char *key = ir_str_get(m, a->key);
        switch (a->kind) {
        case IR_ATTR_INT:
            if (o->kind == IR_OP_CONSTANT && strcmp(key, "device") == 0)
                break;
            ir_op_set_int(d->out, nop, key, a->i);
            break;
        case IR_ATTR_FLOAT:
            ir_op_set_float(d->out, nop, key, a->f);
            break;
        case IR_ATTR_STRING:
            ir_op_set_string(d->out, nop, key, ir_str_get(m, a->s));
            break;
        case IR_ATTR_INTS:
            ir_op_set_ints(d->out, nop, key, a->n, m->ints + a->off);
            break;
        case IR_ATTR_FLOATS:
            ir_op_set_floats(d->out, nop, key, a->n, m->floats + a->off);
            break;
        case IR_ATTR_TENSOR: {
            const ir_type *t = &m->types[a->i];
            ir_id ty;
            if (o->kind == IR_OP_CONSTANT && t->rank > 0)
                ty = ir_type_tensor_var(d->out, (ir_dtype)t->dtype, t->rank,
                                        ir_type_dims(m, (ir_id)a->i), d->devvar);
            else
                ty = ir_type_tensor(d->out, (ir_dtype)t->dtype, t->rank,
                                    ir_type_dims(m, (ir_id)a->i),
                                    o->kind == IR_OP_CONSTANT ? IR_DEVICE_NONE : t->device);
            ir_op_set_tensor(d->out, nop, key, ty, m->data + a->off, a->n);
            break;
        }
        default:
            return di_error_set(d->err, DI_EUNSUPPORTED, "data parallel: a mesh attribute");
        }
    }
    if ((rc = infer(d, nop)) != 0)
        return rc;
    for (uint32_t k = 0; k < o->noutput; k++) {
        d->map[o->outputs + k] = ir_op_output(d->out, nop, k);
        copy_name(d, ir_op_output(d->out, nop, k), o->outputs + k, "i");
    }
    return 0;
}

static int
clone_op(dpt *d, ir_id r, ir_id op)
{
    ir_id small[64], *in = small;
    uint32_t n = d->m->ops[op].ninput;
    int rc;
    if (n > sizeof small / sizeof small[0])
        in = di_xmalloc(n * sizeof *in);
    rc = clone_op_with(d, r, op, in);
    if (in != small)
        di_free(in);
    return rc;
}

static ir_id
top_op(dpt *d, int kind, ir_id in, const char *name)
{
    ir_id op = ir_op_add(d->out, d->func, kind, 1, &in, 1, NULL, NULL);
    if (name)
        d->out->values[ir_op_output(d->out, op, 0)].name = ir_str(d->out, name);
    return op;
}

static int
is_data(const ir_module *m, ir_id v)
{
    const ir_type *t = &m->types[m->values[v].type];
    return xform_autodiff_is_data_name(NULL, ir_str_get(m, m->values[v].name)) ||
           !ir_dtype_is_float((ir_dtype)t->dtype);
}

static ir_id
make_pmap(dpt *d, ir_id body, uint32_t nin, const ir_id *in, int *rc)
{
    int64_t devs[1024];
    ir_id op = ir_op_add(d->out, d->func, IR_OP_PMAP, nin, in, d->out->regions[body].nresult,
                         NULL, NULL);
    d->out->ops[op].body = body;
    d->out->regions[body].parent = op;
    ir_op_set_string(d->out, op, "device_var", "d");
    for (uint32_t k = 0; k < d->n; k++)
        devs[k] = d->devices[k];
    ir_op_set_ints(d->out, op, "devices", d->n, devs);
    *rc = infer(d, op);
    return op;
}

int
xform_data_parallel_tuple(const ir_module *m, uint32_t n, const int32_t *devices, int grad_mean,
                          ir_module **outp, di_error *err)
{
    dpt d;
    ir_id f = ir_module_entry(m), *tup, body1, body2, p1 = 0, p2 = 0, *grads = NULL;
    const ir_region *fr;
    uint32_t ng = 0, nin, cin = 0;
    ir_id *in = NULL; /* the inputs of the pmap being built */
    int64_t devs[1024];
    char fname[256];
    int rc = 0;
    *outp = NULL;
    if (f == 0)
        return di_error_set(err, DI_EINVAL, "the module has no function");
    if (n == 0 || n > 1024)
        return di_error_set(err, DI_ESTRATEGY, "data parallel over %u devices", n);
    fr = &m->regions[f];
    memset(&d, 0, sizeof d);
    d.m = m;
    d.n = n;
    d.devices = devices;
    d.err = err;
    for (uint32_t a = 0; a < fr->narg; a++) {
        ir_id v = fr->args[a];
        const ir_type *t = &m->types[m->values[v].type];
        if (t->kind != IR_TYPE_TENSOR)
            return di_error_set(err, DI_EUNSUPPORTED, "argument %u is not a tensor", a);
        if (is_data(m, v) && (t->rank == 0 || ir_type_dims(m, m->values[v].type)[0] % n != 0))
            return di_error_set(err, DI_ESTRATEGY, "dp=%u does not divide the batch of %%%s", n,
                                ir_str_get(m, m->values[v].name));
    }
    for (uint32_t k = 0; k < n; k++)
        devs[k] = devices[k];
    d.out = ir_module_new();
    d.devvar = ir_str(d.out, "d");
    d.map = di_xcalloc(m->nvalue ? m->nvalue : 1, sizeof *d.map);
    tup = di_xcalloc(m->nvalue ? m->nvalue : 1, sizeof *tup);
    snprintf(fname, sizeof fname, "%s_dp", ir_str_get(m, fr->name));
    d.func = ir_func_new(d.out, fname);
    for (uint32_t a = 0; a < fr->narg; a++) {
        ir_id v = fr->args[a];
        const ir_type *t = &m->types[m->values[v].type];
        ir_id ty = ir_type_tensor(d.out, (ir_dtype)t->dtype, t->rank,
                                  ir_type_dims(m, m->values[v].type), t->device);
        d.map[v] = ir_region_add_arg(d.out, d.func, ty, ir_str_get(m, m->values[v].name));
    }
    /* Scatter the data, broadcast the weights. */
    for (int pass = 0; pass < 2 && rc == 0; pass++)
        for (uint32_t a = 0; a < fr->narg && rc == 0; a++) {
            ir_id v = fr->args[a], op;
            char nm[256];
            if (is_data(m, v) != (pass == 0))
                continue;
            snprintf(nm, sizeof nm, "%ss", ir_str_get(m, m->values[v].name));
            op = top_op(&d, pass == 0 ? IR_OP_SCATTER : IR_OP_BROADCAST, d.map[v], nm);
            if (pass == 0)
                ir_op_set_int(d.out, op, "dim", 0);
            ir_op_set_ints(d.out, op, "devices", n, devs);
            rc = infer(&d, op);
            tup[v] = ir_op_output(d.out, op, 0);
        }
    /* pmap 1: everything but the optimizer. */
    body1 = ir_body_new(d.out);
    nin = 0;
    for (int pass = 0; pass < 2 && rc == 0; pass++)
        for (uint32_t a = 0; a < fr->narg; a++) {
            ir_id v = fr->args[a];
            int used = 0;
            if (is_data(m, v) != (pass == 0))
                continue;
            for (uint32_t i = 0; i < fr->nop && !used; i++) {
                const ir_op *o = &m->ops[fr->ops[i]];
                if (ir_opkind_info(o->kind)->flags & IR_OPF_OPTIM)
                    continue;
                for (uint32_t k = 0; k < o->ninput; k++)
                    used |= m->refs[o->inputs + k] == v;
            }
            if (!used)
                continue;
            DI_GROW(&in, &cin, nin + 1);
            in[nin++] = tup[v];
            d.map[v] = ir_region_add_arg(d.out, body1, local_type(&d, v, pass == 0), NULL);
            copy_name(&d, d.map[v], v, "i");
        }
    for (uint32_t i = 0; i < fr->nop && rc == 0; i++) {
        ir_id op = fr->ops[i];
        if (!(ir_opkind_info(m->ops[op].kind)->flags & IR_OPF_OPTIM))
            rc = clone_op(&d, body1, op);
    }
    /* Gradients in weight order, then the other results computed here. */
    grads = di_xcalloc(fr->narg + 1, sizeof *grads);
    for (uint32_t a = 0; a < fr->narg && rc == 0; a++)
        for (uint32_t i = 0; i < fr->nop; i++) {
            const ir_op *o = &m->ops[fr->ops[i]];
            if ((ir_opkind_info(o->kind)->flags & IR_OPF_OPTIM) && o->ninput > 1 &&
                m->refs[o->inputs] == fr->args[a]) {
                grads[ng++] = m->refs[o->inputs + 1];
                ir_region_add_result(d.out, body1, d.map[m->refs[o->inputs + 1]]);
                break;
            }
        }
    for (uint32_t r = 0; r < fr->nresult && rc == 0; r++) {
        ir_id v = fr->results[r], def = m->values[v].def;
        if (def == 0 || (ir_opkind_info(m->ops[def].kind)->flags & IR_OPF_OPTIM))
            continue;
        ir_region_add_result(d.out, body1, d.map[v]);
    }
    if (rc == 0)
        p1 = make_pmap(&d, body1, nin, in, &rc);
    /* All-reduce the gradients. */
    for (uint32_t i = 0; i < ng && rc == 0; i++) {
        ir_id op = top_op(&d, IR_OP_ALLREDUCE, ir_op_output(d.out, p1, i), NULL);
        if (grad_mean)
            ir_op_set_string(d.out, op, "reduction", "mean");
        rc = infer(&d, op);
        tup[grads[i]] = ir_op_output(d.out, op, 0);
        copy_name(&d, ir_op_output(d.out, op, 0), grads[i], "s");
    }
    /* pmap 2: the optimizer on every replica (weights, gradients, then other state). */
    body2 = ir_body_new(d.out);
    nin = 0;
    for (uint32_t a = 0; a < fr->narg && rc == 0; a++)
        for (uint32_t i = 0; i < ng; i++) {
            ir_id w = fr->args[a];
            int found = 0;
            for (uint32_t j = 0; j < fr->nop && !found; j++) {
                const ir_op *o = &m->ops[fr->ops[j]];
                found = (ir_opkind_info(o->kind)->flags & IR_OPF_OPTIM) && o->ninput > 1 &&
                        m->refs[o->inputs] == w && m->refs[o->inputs + 1] == grads[i];
            }
            if (!found)
                continue;
            DI_GROW(&in, &cin, nin + 1);
            in[nin++] = tup[w];
            d.map[w] = ir_region_add_arg(d.out, body2, local_type(&d, w, 0), NULL);
            copy_name(&d, d.map[w], w, "k");
        }
    for (uint32_t i = 0; i < ng && rc == 0; i++) {
        DI_GROW(&in, &cin, nin + 1);
        in[nin++] = tup[grads[i]];
        d.map[grads[i]] = ir_region_add_arg(d.out, body2, local_type(&d, grads[i], 0), NULL);
        copy_name(&d, d.map[grads[i]], grads[i], "k");
    }
    for (uint32_t i = 0; i < fr->nop && rc == 0; i++) {
        const ir_op *o = &m->ops[fr->ops[i]];
        if (!(ir_opkind_info(o->kind)->flags & IR_OPF_OPTIM))
            continue;
        for (uint32_t k = 2; k < o->ninput; k++) {
            ir_id v = m->refs[o->inputs + k];
            if (tup[v] == 0 || m->values[d.map[v]].region == body2)
                continue;
            DI_GROW(&in, &cin, nin + 1);
            in[nin++] = tup[v];
            d.map[v] = ir_region_add_arg(d.out, body2, local_type(&d, v, 0), NULL);
        }
    }
    for (uint32_t i = 0; i < fr->nop && rc == 0; i++) {
        ir_id op = fr->ops[i];
        if (ir_opkind_info(m->ops[op].kind)->flags & IR_OPF_OPTIM)
            rc = clone_op(&d, body2, op);
    }
    for (uint32_t r = 0; r < fr->nresult && rc == 0; r++) {
        ir_id v = fr->results[r], def = m->values[v].def;
        if (def && (ir_opkind_info(m->ops[def].kind)->flags & IR_OPF_OPTIM))
            ir_region_add_result(d.out, body2, d.map[v]);
    }
    if (rc == 0)
        p2 = make_pmap(&d, body2, nin, in, &rc);
    /* Results back on device 0. */
    {
        uint32_t i1 = ng, i2 = 0;
        for (uint32_t r = 0; r < fr->nresult && rc == 0; r++) {
            ir_id v = fr->results[r], def = m->values[v].def, x, op;
            const char *name = ir_str_get(m, m->values[v].name);
            char nm[256];
            if (def == 0) {
                ir_region_add_result(d.out, d.func, d.map[v]);
                continue;
            }
            if (ir_opkind_info(m->ops[def].kind)->flags & IR_OPF_OPTIM) {
                x = ir_op_output(d.out, p2, i2++);
                snprintf(nm, sizeof nm, "%sr", name);
            } else if (m->types[m->values[v].type].rank > 0) {
                op = top_op(&d, IR_OP_GATHERTO, ir_op_output(d.out, p1, i1++), name);
                ir_op_set_int(d.out, op, "device", 0);
                ir_op_set_int(d.out, op, "dim", 0);
                rc = infer(&d, op);
                ir_region_add_result(d.out, d.func, ir_op_output(d.out, op, 0));
                continue;
            } else {
                snprintf(nm, sizeof nm, "%smean", name);
                op = top_op(&d, IR_OP_ALLREDUCE, ir_op_output(d.out, p1, i1++), nm);
                ir_op_set_string(d.out, op, "reduction", "mean");
                if ((rc = infer(&d, op)) != 0)
                    break;
                x = ir_op_output(d.out, op, 0);
                snprintf(nm, sizeof nm, "%sr", name);
            }
            op = top_op(&d, IR_OP_TUPLEGET, x, nm);
            ir_op_set_int(d.out, op, "index", 0);
            if ((rc = infer(&d, op)) != 0)
                break;
            x = ir_op_output(d.out, op, 0);
            if (devices[0] != 0) {
                op = top_op(&d, IR_OP_SEND, x, name);
                ir_op_set_int(d.out, op, "device", 0);
                if ((rc = infer(&d, op)) != 0)
                    break;
                x = ir_op_output(d.out, op, 0);
            }
            ir_region_add_result(d.out, d.func, x);
        }
    }
    di_free(grads);
    di_free(d.map);
    di_free(tup);
    di_free(in);
    if (rc != 0) {
        ir_module_free(d.out);
        return rc;
    }
    *outp = d.out;
    return 0;
}
