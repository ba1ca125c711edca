/*
 * test_proto.c: the protobuf form of a module and the checks on untrusted
 * protobuf bytes. Hand-built modules (every dtype, tuples, device variables,
 * nested pmaps built in the parser's order, pmaps calling functions defined
 * before and after them, meshes with distributed tensors, every attribute
 * kind) and a thousand random ones must come back from
 * decode(encode(m)) identical, table by table, and encode to the same bytes
 * again. Broken input (every prefix of a valid encoding, nesting bombs,
 * undeclared enums, invalid UTF-8, bad indexes, cycles, double definitions,
 * oversize input) must be rejected with a code and a message that names the
 * place, never with a crash.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/pb.h"
#include "distir.pb-c.h"
#include "ir/ir.h"
#include "ir/pb.h"

/* ---- comparing modules table by table ---- */

static char diff_buf[512];

#define DIFF(...)                                                                                  \
    do {                                                                                           \
        snprintf(diff_buf, sizeof diff_buf, __VA_ARGS__);                                          \
        return diff_buf;                                                                           \
    } while (0)

static int
same_str(const ir_module *a, ir_id x, const ir_module *b, ir_id y)
{
    return strcmp(ir_str_get(a, x), ir_str_get(b, y)) == 0;
}

static int
same_ints(const ir_module *a, uint32_t x, const ir_module *b, uint32_t y, uint32_t n)
{
    return n == 0 || memcmp(a->ints + x, b->ints + y, n * sizeof(int64_t)) == 0;
}

static int
same_refs(const ir_module *a, uint32_t x, const ir_module *b, uint32_t y, uint32_t n)
{
    return n == 0 || memcmp(a->refs + x, b->refs + y, n * sizeof(ir_id)) == 0;
}

static int
same_ids(const ir_id *x, const ir_id *y, uint32_t n)
{
    return n == 0 || memcmp(x, y, n * sizeof *x) == 0;
}

static const char *
attr_diff(const ir_module *a, const ir_attr *x, const ir_module *b, const ir_attr *y)
{
    if (!same_str(a, x->key, b, y->key))
        DIFF("key '%s' != '%s'", ir_str_get(a, x->key), ir_str_get(b, y->key));
    if (x->kind != y->kind || x->n != y->n)
        DIFF("attribute '%s': kind/n differ", ir_str_get(a, x->key));
    switch (x->kind) {
    case IR_ATTR_INT:
        if (x->i != y->i)
            DIFF("attribute '%s': int differs", ir_str_get(a, x->key));
        break;
    case IR_ATTR_FLOAT:
        if (memcmp(&x->f, &y->f, sizeof x->f) != 0)
            DIFF("attribute '%s': float differs", ir_str_get(a, x->key));
        break;
    case IR_ATTR_STRING:
        if (!same_str(a, x->s, b, y->s))
            DIFF("attribute '%s': string differs", ir_str_get(a, x->key));
        break;
    case IR_ATTR_INTS:
        if (!same_ints(a, x->off, b, y->off, x->n))
            DIFF("attribute '%s': ints differ", ir_str_get(a, x->key));
        break;
    case IR_ATTR_FLOATS:
        if (x->n && memcmp(a->floats + x->off, b->floats + y->off, x->n * sizeof(double)) != 0)
            DIFF("attribute '%s': floats differ", ir_str_get(a, x->key));
        break;
    case IR_ATTR_MESH:
        if (x->s != y->s)
            DIFF("attribute '%s': mesh differs", ir_str_get(a, x->key));
        break;
    case IR_ATTR_TENSOR:
        if (x->i != y->i || (x->n && memcmp(a->data + x->off, b->data + y->off, x->n) != 0))
            DIFF("attribute '%s': tensor differs", ir_str_get(a, x->key));
        break;
    default:
        break;
    }
    return NULL;
}

/* NULL when a and b hold the same tables (strings and pool lists compared by content). */
static const char *
module_diff(const ir_module *a, const ir_module *b)
{
    const char *d;
    if (a->ntype != b->ntype)
        DIFF("ntype %u != %u", a->ntype, b->ntype);
    for (ir_id i = 1; i < a->ntype; i++) {
        const ir_type *x = &a->types[i], *y = &b->types[i];
        if (x->kind != y->kind || x->dtype != y->dtype || x->rank != y->rank ||
            x->device != y->device || x->mesh != y->mesh || x->nelem != y->nelem ||
            !same_str(a, x->devvar, b, y->devvar) || !same_ints(a, x->dims, b, y->dims, x->rank) ||
            !same_refs(a, x->elems, b, y->elems, x->nelem) ||
            (x->mesh && !same_ints(a, x->placements, b, y->placements, a->meshes[x->mesh].rank)))
            DIFF("types[%u] differ", i);
    }
    if (a->nvalue != b->nvalue)
        DIFF("nvalue %u != %u", a->nvalue, b->nvalue);
    for (ir_id i = 1; i < a->nvalue; i++) {
        const ir_value *x = &a->values[i], *y = &b->values[i];
        if (!same_str(a, x->name, b, y->name) || x->type != y->type || x->def != y->def ||
            x->index != y->index || x->region != y->region)
            DIFF("values[%u] differ", i);
    }
    if (a->nmesh != b->nmesh)
        DIFF("nmesh %u != %u", a->nmesh, b->nmesh);
    for (ir_id i = 1; i < a->nmesh; i++) {
        const ir_mesh *x = &a->meshes[i], *y = &b->meshes[i];
        if (!same_str(a, x->name, b, y->name) || x->rank != y->rank || x->ndevice != y->ndevice ||
            !same_ints(a, x->shape, b, y->shape, x->rank) ||
            !same_ints(a, x->devices, b, y->devices, x->ndevice))
            DIFF("meshes[%u] differ", i);
    }
    if (a->nregion != b->nregion)
        DIFF("nregion %u != %u", a->nregion, b->nregion);
    for (ir_id i = 1; i < a->nregion; i++) {
        const ir_region *x = &a->regions[i], *y = &b->regions[i];
        if (!same_str(a, x->name, b, y->name) || x->parent != y->parent || x->nop != y->nop ||
            x->narg != y->narg || x->nresult != y->nresult || !same_ids(x->ops, y->ops, x->nop) ||
            !same_ids(x->args, y->args, x->narg) || !same_ids(x->results, y->results, x->nresult))
            DIFF("regions[%u] differ", i);
    }
    if (a->nop != b->nop)
        DIFF("nop %u != %u", a->nop, b->nop);
    for (ir_id i = 1; i < a->nop; i++) {
        const ir_op *x = &a->ops[i], *y = &b->ops[i];
        if (x->kind != y->kind || x->flags != y->flags || x->ninput != y->ninput ||
            x->noutput != y->noutput || x->outputs != y->outputs || x->nattr != y->nattr ||
            x->body != y->body || x->region != y->region || !same_str(a, x->name, b, y->name) ||
            !same_str(a, x->opaque, b, y->opaque) ||
            !same_refs(a, x->inputs, b, y->inputs, x->ninput))
            DIFF("ops[%u] (%s) differ", i, ir_opkind_name(x->kind));
        for (uint32_t k = 0; k < x->nattr; k++)
            if ((d = attr_diff(a, &a->attrs[x->attrs + k], b, &b->attrs[y->attrs + k])) != NULL) {
                char tmp[sizeof diff_buf];
                memcpy(tmp, d, sizeof tmp);
                DIFF("ops[%u] (%s): %s", i, ir_opkind_name(x->kind), tmp);
            }
    }
    return NULL;
}

/* Asserts decode(encode(m)) == m and that the second encoding equals the first. */
static void
assert_round_trip(const ir_module *m)
{
    uint8_t *a, *b;
    size_t alen, blen;
    ir_module *d;
    di_error err;
    const char *diff;

    di_error_clear(&err);
    assert_int_equal(ir_encode(m, &a, &alen), 0);
    if (ir_decode(a, alen, NULL, &d, &err) != 0)
        fail_msg("decode of a valid encoding failed: %s", err.msg);
    if ((diff = module_diff(m, d)) != NULL)
        fail_msg("decode(encode(m)) != m: %s", diff);
    assert_int_equal(ir_encode(d, &b, &blen), 0);
    assert_int_equal(alen, blen);
    assert_memory_equal(a, b, alen);
    di_free(a);
    di_free(b);
    ir_module_free(d);
}

/* ---- hand-built modules ---- */

/* Every dtype, scalars, a tuple, several results, op names and flags, two functions. */
static ir_module *
build_basic(void)
{
    ir_module *m = ir_module_new();
    int64_t xd[2] = {4, 8}, wd[2] = {8, 16}, yd[2] = {4, 16}, vd[1] = {4};
    ir_id f = ir_func_new(m, "main");
    ir_id tx = ir_type_tensor(m, IR_F32, 2, xd, 0);
    ir_id tw = ir_type_tensor(m, IR_F32, 2, wd, 0);
    ir_id ty = ir_type_tensor(m, IR_F32, 2, yd, 0);
    ir_id tmask = ir_type_tensor(m, IR_BOOL, 2, yd, 0);
    ir_id th = ir_type_tensor(m, IR_F16, 2, yd, 1);
    ir_id tb = ir_type_tensor(m, IR_BF16, 1, vd, 2);
    ir_id td = ir_type_tensor(m, IR_F64, 0, NULL, IR_DEVICE_NONE);
    ir_id ti = ir_type_tensor(m, IR_I64, 1, vd, IR_DEVICE_NONE);
    ir_id t32 = ir_type_tensor(m, IR_I32, 1, vd, 3);
    ir_id t8 = ir_type_tensor(m, IR_I8, 2, xd, 3);
    ir_id tz = ir_type_tensor(m, IR_F32, 2, (int64_t[]){0, 5}, 0);
    ir_id tup = ir_type_tuple(m, 2, (ir_id[]){ty, th});
    ir_id tup2 = ir_type_tuple(m, 3, (ir_id[]){tup, tb, tup});
    ir_id empty = ir_type_tuple(m, 0, NULL);
    ir_id x, w, y, r, drop, split, tp, g;
    (void)td;
    (void)ti;
    (void)t32;
    (void)t8;
    (void)tz;
    (void)tup2;
    (void)empty;

    x = ir_region_add_arg(m, f, tx, "x");
    w = ir_region_add_arg(m, f, tw, "w");
    g = ir_region_add_arg(m, f, ti, NULL);
    y = ir_op_add(m, f, IR_OP_MATMUL, 2, (ir_id[]){x, w}, 1, &ty, (const char *[]){"y"});
    m->ops[y].name = ir_str(m, "fc1/MatMul");
    r = ir_op_add(m, f, IR_OP_RELU, 1, (ir_id[]){ir_op_output(m, y, 0)}, 1, &ty, NULL);
    m->ops[r].flags = 0x8001;
    drop = ir_op_add(m, f, IR_OP_DROPOUT, 1, (ir_id[]){ir_op_output(m, r, 0)}, 2,
                     (ir_id[]){ty, tmask}, (const char *[]){"d", "mask"});
    ir_op_set_float(m, drop, "ratio", 0.1);
    split = ir_op_add(m, f, IR_OP_SPLIT, 1, (ir_id[]){ir_op_output(m, drop, 0)}, 3,
                      (ir_id[]){tb, tb, tb}, (const char *[]){"s0", NULL, "s2"});
    ir_op_set_int(m, split, "axis", 1);
    tp = ir_op_add(m, f, IR_OP_TUPLE, 2, (ir_id[]){ir_op_output(m, drop, 0), g}, 1, &tup, NULL);
    /* An input of 0 ("none") is allowed: an absent optional operand. */
    ir_op_add(m, f, IR_OP_GEMM, 3, (ir_id[]){x, w, 0}, 1, &ty, NULL);
    ir_op_add(m, f, IR_OP_RETURN, 1, (ir_id[]){ir_op_output(m, tp, 0)}, 0, NULL, NULL);
    ir_region_add_result(m, f, ir_op_output(m, tp, 0));

    f = ir_func_new(m, "loss");
    x = ir_region_add_arg(m, f, th, "h");
    y = ir_op_add(m, f, IR_OP_IDENTITY, 1, &x, 1, &th, NULL);
    ir_op_add(m, f, IR_OP_RETURN, 1, (ir_id[]){ir_op_output(m, y, 0)}, 0, NULL, NULL);
    ir_region_add_result(m, f, ir_op_output(m, y, 0));
    ir_region_add_result(m, f, x);
    return m;
}

/*
 * A pmap nest depth levels deep, built as the text parser builds it: each
 * body region and its ops before the pmap op that owns it, so op ids are not
 * in order of appearance.
 */
static ir_id
build_pmap_level(ir_module *m, ir_id outer, ir_id input, int depth, const char *var)
{
    int64_t dims[2] = {4, 8};
    ir_id body = ir_body_new(m);
    ir_id tv = ir_type_tensor_var(m, IR_F32, 2, dims, ir_str(m, var));
    ir_id tin = m->values[input].type;
    ir_id a = ir_region_add_arg(m, body, tv, "a");
    ir_id r = ir_op_add(m, body, IR_OP_RELU, 1, &a, 1, &tv, NULL);
    ir_id v = ir_op_output(m, r, 0), pm;
    char inner[16];
    if (depth > 1) {
        snprintf(inner, sizeof inner, "d%d", depth);
        v = build_pmap_level(m, body, v, depth - 1, inner);
    }
    ir_op_add(m, body, IR_OP_RETURN, 1, &v, 0, NULL, NULL);
    ir_region_add_result(m, body, v);
    pm = ir_op_add(m, outer, IR_OP_PMAP, 1, &input, 1, &tin, (const char *[]){"p"});
    m->ops[pm].body = body;
    m->regions[body].parent = pm;
    ir_op_set_string(m, pm, "device_var", var);
    ir_op_set_ints(m, pm, "devices", 2, (int64_t[]){0, 1});
    return ir_op_output(m, pm, 0);
}

static ir_module *
build_pmap(int depth)
{
    ir_module *m = ir_module_new();
    int64_t dims[2] = {4, 8};
    ir_id t0 = ir_type_tensor(m, IR_F32, 2, dims, 0);
    ir_id t1 = ir_type_tensor(m, IR_F32, 2, dims, 1);
    ir_id tup = ir_type_tuple(m, 2, (ir_id[]){t0, t1});
    ir_id f = ir_func_new(m, "main");
    ir_id x = ir_region_add_arg(m, f, tup, "x");
    ir_id y = build_pmap_level(m, f, x, depth, "d");
    ir_op_add(m, f, IR_OP_RETURN, 1, &y, 0, NULL, NULL);
    ir_region_add_result(m, f, y);
    return m;
}

/*
 * Pmaps that call functions: @main calls @layer (defined after it) twice and
 * @pre (defined before it) once; a nested pmap in @layer's own body calls
 * @pre too. Flag bits other than the callee bit travel as they are.
 */
static ir_module *
build_callee(void)
{
    ir_module *m = ir_module_new();
    int64_t dims[2] = {4, 8};
    ir_id t0 = ir_type_tensor(m, IR_F32, 2, dims, 0);
    ir_id t1 = ir_type_tensor(m, IR_F32, 2, dims, 1);
    ir_id tup = ir_type_tuple(m, 2, (ir_id[]){t0, t1});
    ir_id tv = ir_type_tensor_var(m, IR_F32, 2, dims, ir_str(m, "d"));
    ir_id pre = ir_func_new(m, "pre");
    ir_id f = ir_func_new(m, "main");
    ir_id layer = ir_func_new(m, "layer");
    ir_id a, r, x, v, pm;
    a = ir_region_add_arg(m, pre, tv, "a");
    r = ir_op_add(m, pre, IR_OP_RELU, 1, &a, 1, &tv, NULL);
    ir_region_add_result(m, pre, ir_op_output(m, r, 0));
    a = ir_region_add_arg(m, layer, tv, "a");
    r = ir_op_add(m, layer, IR_OP_SIGMOID, 1, &a, 1, &tv, NULL);
    ir_region_add_result(m, layer, ir_op_output(m, r, 0));
    x = ir_region_add_arg(m, f, tup, "x");
    v = x;
    for (int i = 0; i < 3; i++) {
        pm = ir_op_add(m, f, IR_OP_PMAP, 1, &v, 1, &tup, NULL);
        ir_op_set_callee(m, pm, i == 0 ? pre : layer);
        ir_op_set_string(m, pm, "device_var", "d");
        ir_op_set_ints(m, pm, "devices", 2, (int64_t[]){0, 1});
        if (i == 2)
            m->ops[pm].flags |= 0x8000;
        v = ir_op_output(m, pm, 0);
    }
    ir_region_add_result(m, f, v);
    return m;
}

/* Meshes, distributed tensors, and every attribute kind (one op gets them out of order). */
static ir_module *
build_mesh(void)
{
    ir_module *m = ir_module_new();
    ir_id mesh = ir_mesh_add(m, "mesh", 2, (int64_t[]){2, 4}, NULL);
    ir_id pp = ir_mesh_add(m, "pp", 1, (int64_t[]){2}, (int64_t[]){5, 7});
    ir_id one = ir_mesh_add(m, "one", 0, NULL, (int64_t[]){3});
    int64_t dims[2] = {8, 16};
    ir_id ta = ir_type_dtensor(m, IR_F32, 2, dims, mesh, (int64_t[]){0, IR_PLACE_R});
    ir_id tb = ir_type_dtensor(m, IR_F32, 2, dims, mesh, (int64_t[]){IR_PLACE_PSUM, 1});
    ir_id tc = ir_type_dtensor(m, IR_BF16, 2, dims, pp, (int64_t[]){IR_PLACE_PMAX});
    ir_id td = ir_type_dtensor(m, IR_I32, 0, NULL, one, NULL);
    ir_id tk = ir_type_tensor(m, IR_F32, 2, (int64_t[]){2, 2}, IR_DEVICE_NONE);
    float kdata[4] = {1.0f, -2.5f, 3.25f, 0.0f};
    double coeffs[3] = {1.5, -0.0, NAN};
    ir_id f = ir_func_new(m, "main");
    ir_id x = ir_region_add_arg(m, f, ta, "x");
    ir_id k, ar, op, g;
    (void)td;

    k = ir_op_add(m, f, IR_OP_CONSTANT, 0, NULL, 1, &tk, (const char *[]){"k"});
    ir_op_set_tensor(m, k, "value", tk, kdata, sizeof kdata);
    ar = ir_op_add(m, f, IR_OP_ALLREDUCE, 1, &x, 1, &tb, NULL);
    ir_op_set_mesh(m, ar, "mesh", mesh);
    ir_op_set_ints(m, ar, "mesh_axes", 1, (int64_t[]){1});
    ir_op_set_string(m, ar, "reduction", "sum");
    g = ir_op_add(m, f, IR_OP_GEMM, 2, (ir_id[]){x, ir_op_output(m, k, 0)}, 1, &tc, NULL);
    ir_op_set_float(m, g, "beta", -0.0);
    ir_op_set_float(m, g, "alpha", 0.5);
    ir_op_set_int(m, g, "transA", INT64_MIN);

    op = ir_op_add(m, f, IR_OP_OPAQUE, 2, (ir_id[]){x, ir_op_output(m, g, 0)}, 2, (ir_id[]){ta, tc},
                   NULL);
    ir_op_set_string(m, op, "z_note", "");
    ir_op_set_floats(m, op, "coeffs", 3, coeffs);
    ir_op_set_ints(m, op, "axes", 0, NULL);
    ir_op_set_string(m, op, "op_type", "MyCustomOp");
    ir_op_set_tensor(m, op, "shape_only", tk, NULL, 0);
    ir_op_set_mesh(m, op, "mesh", pp);
    ir_op_set_int(m, op, "a_first", 7);
    ir_op_set_int(m, op, "a_first", 8); /* replaced */
    m->ops[op].opaque = ir_str(m, "MyCustomOp");
    m->ops[op].name = ir_str(m, "custom_0");

    ir_op_add(m, f, IR_OP_RETURN, 1, (ir_id[]){ir_op_output(m, op, 1)}, 0, NULL, NULL);
    ir_region_add_result(m, f, ir_op_output(m, op, 1));
    return m;
}

/* ---- random modules ---- */

typedef struct rng {
    uint64_t s;
} rng;

static uint32_t
rnd(rng *r, uint32_t n)
{
    r->s ^= r->s << 13;
    r->s ^= r->s >> 7;
    r->s ^= r->s << 17;
    return n ? (uint32_t)(r->s % n) : 0;
}

typedef struct gen {
    rng r;
    ir_module *m;
    ir_id types[64];
    uint32_t ntypes;
    ir_id tensors[64]; /* tensor types with a known dtype, for tensor attributes */
    uint32_t ntensors;
} gen;

static void
gen_types(gen *g)
{
    ir_module *m = g->m;
    uint32_t n = 1 + rnd(&g->r, 12);
    const char *vars[3] = {"d", "e", "dev"};
    for (uint32_t i = 0; i < n; i++) {
        int64_t dims[4], place[IR_MAX_RANK];
        uint32_t rank = rnd(&g->r, 5), c = rnd(&g->r, 5);
        ir_dtype dt = (ir_dtype)rnd(&g->r, IR_NDTYPE);
        ir_id t;
        for (uint32_t k = 0; k < rank && k < 4; k++)
            dims[k] = rnd(&g->r, 6);
        if (rank > 4)
            rank = 4;
        if (c == 4 && g->ntypes > 0) {
            ir_id elems[4];
            uint32_t ne = rnd(&g->r, 4);
            for (uint32_t k = 0; k < ne; k++)
                elems[k] = g->types[rnd(&g->r, g->ntypes)];
            t = ir_type_tuple(m, ne, elems);
        } else if (c == 3 && m->nmesh > 1) {
            ir_id mesh = 1 + rnd(&g->r, m->nmesh - 1);
            for (uint32_t k = 0; k < m->meshes[mesh].rank; k++) {
                uint32_t p = rnd(&g->r, 3 + rank);
                place[k] = p < 3 ? -1 - (int64_t)p : (int64_t)(p - 3);
            }
            t = ir_type_dtensor(m, dt, rank, dims, mesh, place);
        } else if (c == 2) {
            t = ir_type_tensor_var(m, dt, rank, dims, ir_str(m, vars[rnd(&g->r, 3)]));
        } else {
            t = ir_type_tensor(m, dt, rank, dims, (int32_t)rnd(&g->r, 5) - 1);
        }
        if (g->ntypes < 64)
            g->types[g->ntypes++] = t;
        if (m->types[t].kind == IR_TYPE_TENSOR && ir_type_bytes(m, t) < 512 && g->ntensors < 64)
            g->tensors[g->ntensors++] = t;
    }
}

static void
gen_attrs(gen *g, ir_id op)
{
    ir_module *m = g->m;
    static const char *keys[] = {"axis", "perm", "alpha", "name", "mesh", "value", "k", "w"};
    uint32_t n = rnd(&g->r, 5);
    for (uint32_t i = 0; i < n; i++) {
        const char *key = keys[rnd(&g->r, 8)];
        int64_t ints[5];
        double floats[5];
        uint32_t len = rnd(&g->r, 5);
        for (uint32_t k = 0; k < len; k++) {
            ints[k] = (int64_t)rnd(&g->r, 2000) - 1000;
            floats[k] = (double)ints[k] / 7.0;
        }
        switch (rnd(&g->r, 7)) {
        case 0:
            ir_op_set_int(m, op, key, (int64_t)rnd(&g->r, 100) - 50);
            break;
        case 1:
            ir_op_set_float(m, op, key, (double)rnd(&g->r, 1000) / 3.0);
            break;
        case 2:
            ir_op_set_string(m, op, key, rnd(&g->r, 2) ? "sum" : "");
            break;
        case 3:
            ir_op_set_ints(m, op, key, len, ints);
            break;
        case 4:
            ir_op_set_floats(m, op, key, len, floats);
            break;
        case 5:
            ir_op_set_mesh(m, op, key, rnd(&g->r, m->nmesh));
            break;
        default:
            if (g->ntensors) {
                ir_id t = g->tensors[rnd(&g->r, g->ntensors)];
                uint8_t bytes[512];
                size_t nb = rnd(&g->r, 2) ? ir_type_bytes(m, t) : 0;
                for (size_t k = 0; k < nb; k++)
                    bytes[k] = (uint8_t)rnd(&g->r, 256);
                ir_op_set_tensor(m, op, key, t, bytes, nb);
            }
            break;
        }
    }
}

/* Fills region r with ops; values holds the values in scope. */
static void
gen_region(gen *g, ir_id r, ir_id *scope, uint32_t nscope, int depth)
{
    ir_module *m = g->m;
    uint32_t nops = rnd(&g->r, 7), nret;
    ir_id local[256];
    uint32_t nlocal = 0;
    for (uint32_t i = 0; i < nscope && nlocal < 200; i++)
        local[nlocal++] = scope[i];
    for (uint32_t i = 0; i < nops; i++) {
        ir_id in[4], tys[3], op, body = 0;
        uint32_t nin = rnd(&g->r, 4), nout = rnd(&g->r, 4);
        int kind = 1 + (int)rnd(&g->r, IR_NOPKIND - 1);
        const char *names[3] = {NULL, "out", NULL};
        for (uint32_t k = 0; k < nin; k++)
            in[k] = nlocal ? local[rnd(&g->r, nlocal)] : 0;
        for (uint32_t k = 0; k < nout && k < 3; k++)
            tys[k] = rnd(&g->r, 8) ? g->types[rnd(&g->r, g->ntypes)] : 0;
        if (nout > 3)
            nout = 3;
        if (depth < 3 && rnd(&g->r, 4) == 0) {
            /* A pmap whose body is built before or after the op. */
            int early = (int)rnd(&g->r, 2);
            kind = IR_OP_PMAP;
            if (early) {
                body = ir_body_new(m);
                for (uint32_t k = 0; k < 2; k++)
                    ir_region_add_arg(m, body, g->types[rnd(&g->r, g->ntypes)], "b");
                gen_region(g, body, local, nlocal, depth + 1);
            }
            op = ir_op_add(m, r, kind, nin, in, nout, tys, names);
            if (!early) {
                body = ir_body_new(m);
                ir_region_add_arg(m, body, g->types[rnd(&g->r, g->ntypes)], NULL);
                gen_region(g, body, local, nlocal, depth + 1);
            }
            m->ops[op].body = body;
            m->regions[body].parent = op;
        } else {
            if (kind == IR_OP_PMAP)
                kind = IR_OP_ADD;
            op = ir_op_add(m, r, kind, nin, in, nout, tys, names);
        }
        gen_attrs(g, op);
        if (kind == IR_OP_OPAQUE) {
            ir_op_set_string(m, op, "op_type", "Weird");
            m->ops[op].opaque = ir_op_attr(m, op, "op_type")->s;
        }
        if (rnd(&g->r, 4) == 0)
            m->ops[op].name = ir_str(m, rnd(&g->r, 2) ? "node" : "n/1");
        if (rnd(&g->r, 8) == 0)
            m->ops[op].flags = (uint16_t)rnd(&g->r, 65536);
        for (uint32_t k = 0; k < nout && nlocal < 256; k++)
            local[nlocal++] = ir_op_output(m, op, k);
    }
    /* Region args of this region are in scope too (they come first in scope for bodies). */
    for (uint32_t k = 0; k < m->regions[r].narg && nlocal < 256; k++)
        local[nlocal++] = m->regions[r].args[k];
    nret = rnd(&g->r, 3);
    for (uint32_t k = 0; k < nret && nlocal; k++)
        ir_region_add_result(m, r, local[rnd(&g->r, nlocal)]);
}

static ir_module *
build_random(uint64_t seed)
{
    gen g;
    uint32_t nmesh, nfunc;
    memset(&g, 0, sizeof g);
    g.r.s = seed * 0x9e3779b97f4a7c15ull + 1;
    g.m = ir_module_new();
    nmesh = rnd(&g.r, 3);
    for (uint32_t i = 0; i < nmesh; i++) {
        int64_t shape[3];
        uint32_t rank = rnd(&g.r, 4);
        for (uint32_t k = 0; k < rank; k++)
            shape[k] = 1 + rnd(&g.r, 3);
        ir_mesh_add(g.m, i ? "m2" : "mesh", rank, shape, NULL);
    }
    gen_types(&g);
    nfunc = 1 + rnd(&g.r, 3);
    for (uint32_t i = 0; i < nfunc; i++) {
        char name[16];
        ir_id f;
        uint32_t nargs = rnd(&g.r, 4);
        snprintf(name, sizeof name, i ? "f%u" : "main", i);
        f = ir_func_new(g.m, name);
        for (uint32_t k = 0; k < nargs; k++)
            ir_region_add_arg(g.m, f, g.types[rnd(&g.r, g.ntypes)], rnd(&g.r, 2) ? "x" : NULL);
        gen_region(&g, f, g.m->regions[f].args, g.m->regions[f].narg, 0);
    }
    return g.m;
}

/* ---- round trips ---- */

static void
test_round_trip_empty(void **state)
{
    ir_module *m = ir_module_new();
    (void)state;
    assert_round_trip(m);
    ir_func_new(m, "main");
    assert_round_trip(m);
    ir_module_free(m);
}

/* Initializer data travels with its value; a wrong size is refused. */
static void
test_round_trip_init(void **state)
{
    ir_module *m = ir_module_new(), *d;
    int64_t dims[2] = {2, 3};
    float w[6] = {1, 2, 3, 4, 5, 6};
    ir_id f = ir_func_new(m, "main");
    ir_id t = ir_type_tensor(m, IR_F32, 2, dims, 0);
    ir_id a = ir_region_add_arg(m, f, t, "w");
    ir_id y = ir_op_output(m, ir_op_add(m, f, IR_OP_RELU, 1, &a, 1, &t, NULL), 0);
    uint8_t *buf;
    size_t len, ilen;
    const uint8_t *got;
    di_error err;
    (void)state;
    ir_region_add_result(m, f, y);
    ir_value_set_init(m, a, w, sizeof w);
    assert_round_trip(m);
    assert_int_equal(ir_encode(m, &buf, &len), 0);
    assert_int_equal(ir_decode(buf, len, NULL, &d, &err), 0);
    got = ir_value_init(d, a, &ilen);
    assert_non_null(got);
    assert_int_equal(ilen, sizeof w);
    assert_memory_equal(got, w, sizeof w);
    assert_null(ir_value_init(d, y, &ilen));
    ir_module_free(d);
    di_free(buf);
    /* 20 bytes for a 24-byte tensor. */
    {
        Distir__V1__Module *pm = ir_to_proto(m);
        pm->values[a]->init.len = 20;
        len = distir__v1__module__get_packed_size(pm);
        buf = di_xmalloc(len);
        distir__v1__module__pack(pm, buf);
        ir_proto_free(pm);
        assert_int_equal(ir_decode(buf, len, NULL, &d, &err), DI_EDECODE);
        assert_non_null(strstr(err.msg, "values[1].init"));
        di_free(buf);
    }
    ir_module_free(m);
}

static void
test_round_trip_basic(void **state)
{
    ir_module *m = build_basic();
    (void)state;
    assert_round_trip(m);
    ir_module_free(m);
}

static void
test_round_trip_pmap(void **state)
{
    (void)state;
    for (int depth = 1; depth <= 6; depth++) {
        ir_module *m = build_pmap(depth);
        /* The parser's order puts body ops before the pmap: ids are not in appearance order. */
        assert_int_equal(m->ops[m->regions[1].ops[0]].kind, IR_OP_PMAP);
        assert_true(m->regions[1].ops[0] > 1);
        assert_round_trip(m);
        ir_module_free(m);
    }
}

static void strip_ids(Distir__V1__Region *r);
static void expect_tree_error(Distir__V1__Module *pm, int code, const char *substr);

static void
test_round_trip_callee(void **state)
{
    ir_module *m = build_callee(), *d;
    Distir__V1__Module *pm = ir_to_proto(m);
    Distir__V1__Op *op;
    Distir__V1__Region empty;
    uint8_t *buf;
    size_t len;
    di_error err;
    (void)state;
    distir__v1__region__init(&empty);
    assert_round_trip(m);

    /* A call is the function's name, not a body; flags keep every bit. */
    op = pm->functions[1]->body->ops[0];
    assert_string_equal(op->callee, "pre");
    assert_null(op->body);
    assert_int_equal(op->flags, IR_OPFLAG_CALLEE);
    op = pm->functions[1]->body->ops[2];
    assert_string_equal(op->callee, "layer");
    assert_int_equal(op->flags, IR_OPFLAG_CALLEE | 0x8000);

    /* Without ids, calls still resolve by name. */
    strip_ids(pm->functions[0]->body);
    strip_ids(pm->functions[1]->body);
    strip_ids(pm->functions[2]->body);
    len = protobuf_c_message_get_packed_size(&pm->base);
    buf = malloc(len);
    protobuf_c_message_pack(&pm->base, buf);
    di_error_clear(&err);
    if (ir_decode(buf, len, NULL, &d, &err) != 0)
        fail_msg("%s", err.msg);
    assert_int_equal(ir_op_callee(d, d->regions[2].ops[0]), 1);
    assert_int_equal(ir_op_callee(d, d->regions[2].ops[1]), 3);
    assert_int_equal(d->regions[3].parent, 0);
    free(buf);
    ir_module_free(d);

    /* Errors: an unknown name, a body and a callee, a call from a non-pmap, an ambiguous name. */
    op = pm->functions[1]->body->ops[1];
    op->callee = (char *)"nope";
    expect_tree_error(pm, DI_EDECODE, "functions[1].body.ops[1].callee: no function named '@nope'");
    op->callee = (char *)"layer";
    op->body = &empty;
    expect_tree_error(pm, DI_EDECODE, "functions[1].body.ops[1]: a dist.pmap has a body and a "
                                      "callee");
    op->body = NULL;
    op->kind = (char *)"Relu";
    expect_tree_error(pm, DI_EDECODE,
                      "functions[1].body.ops[1].callee: a Relu op calls no function");
    op->kind = (char *)"dist.pmap";
    pm->functions[0]->name = (char *)"layer";
    pm->functions[1]->body->ops[0]->callee = (char *)"layer";
    expect_tree_error(pm, DI_EDECODE, "functions[1].body.ops[0].callee: 2 functions are named "
                                      "'@layer'");
    pm->functions[1]->body->ops[0]->callee = (char *)"pre";
    pm->functions[0]->name = (char *)"pre";
    ir_proto_free(pm);
    ir_module_free(m);
}

static void
test_round_trip_mesh(void **state)
{
    ir_module *m = build_mesh();
    uint8_t *buf;
    size_t len;
    ir_module *d;
    di_error err;
    ir_id op;
    (void)state;
    assert_round_trip(m);

    /* The opaque op keeps its op type and its sorted attributes. */
    assert_int_equal(ir_encode(m, &buf, &len), 0);
    assert_int_equal(ir_decode(buf, len, NULL, &d, &err), 0);
    op = d->regions[1].ops[3];
    assert_int_equal(d->ops[op].kind, IR_OP_OPAQUE);
    assert_string_equal(ir_op_name(d, op), "MyCustomOp");
    assert_string_equal(ir_str_get(d, d->attrs[d->ops[op].attrs].key), "a_first");
    assert_int_equal(ir_op_int(d, op, "a_first", 0), 8);
    assert_true(signbit(ir_op_float(d, d->regions[1].ops[2], "beta", 1.0)));
    di_free(buf);
    ir_module_free(d);
    ir_module_free(m);
}

static void
test_round_trip_random(void **state)
{
    (void)state;
    for (uint64_t seed = 1; seed <= 1000; seed++) {
        ir_module *m = build_random(seed);
        assert_round_trip(m);
        ir_module_free(m);
    }
}

/* Clears Region.id and Op.id throughout a region tree. */
static void
strip_ids(Distir__V1__Region *r)
{
    r->id = 0;
    for (size_t k = 0; k < r->n_ops; k++) {
        r->ops[k]->id = 0;
        if (r->ops[k]->body)
            strip_ids(r->ops[k]->body);
    }
}

/* A message written by hand without ids: ops and regions are numbered in order of appearance. */
static void
test_no_ids(void **state)
{
    ir_module *m = build_pmap(2), *d;
    Distir__V1__Module *pm = ir_to_proto(m);
    uint8_t *buf;
    size_t len;
    di_error err;
    (void)state;

    strip_ids(pm->functions[0]->body);
    len = protobuf_c_message_get_packed_size(&pm->base);
    buf = malloc(len);
    protobuf_c_message_pack(&pm->base, buf);
    ir_proto_free(pm);
    di_error_clear(&err);
    if (ir_decode(buf, len, NULL, &d, &err) != 0)
        fail_msg("%s", err.msg);
    /* Appearance order: the pmap is op 1, its body region 2 and its Relu op 2. */
    assert_int_equal(d->regions[1].ops[0], 1);
    assert_int_equal(d->ops[1].kind, IR_OP_PMAP);
    assert_int_equal(d->ops[1].body, 2);
    assert_int_equal(d->regions[2].parent, 1);
    assert_int_equal(d->ops[2].kind, IR_OP_RELU);
    assert_int_equal(d->ops[2].region, 2);
    assert_int_equal(d->nop, m->nop);
    free(buf);
    ir_module_free(d);
    ir_module_free(m);
}

/* ---- rejection ---- */

/* Decodes and returns the code; a failure must leave *out NULL and say something. */
static int
decode_rc(const uint8_t *buf, size_t len, const ir_limits *lim, di_error *err)
{
    ir_module *out = (ir_module *)1;
    int rc;
    di_error_clear(err);
    rc = ir_decode(buf, len, lim, &out, err);
    if (rc == 0) {
        assert_non_null(out);
        ir_module_free(out);
    } else {
        assert_null(out);
        assert_int_equal(err->code, rc);
        assert_true(strlen(err->msg) > 0);
    }
    return rc;
}

static void
expect_error(const uint8_t *buf, size_t len, const ir_limits *lim, int code, const char *substr)
{
    di_error err;
    int rc = decode_rc(buf, len, lim, &err);
    if (rc != code || strstr(err.msg, substr) == NULL)
        fail_msg("expected %s with '%s', got %s: %s", di_errname(code), substr, di_errname(rc),
                 err.msg);
}

/* Packs a message tree (a mutated ir_to_proto tree) and expects an error. */
static void
expect_tree_error(Distir__V1__Module *pm, int code, const char *substr)
{
    size_t len = protobuf_c_message_get_packed_size(&pm->base);
    uint8_t *buf = malloc(len ? len : 1);
    protobuf_c_message_pack(&pm->base, buf);
    expect_error(buf, len, NULL, code, substr);
    free(buf);
}

static void
test_truncated(void **state)
{
    ir_module *m = build_mesh();
    uint8_t *buf;
    size_t len, pos = 0, nboundary = 0, boundaries[64];
    int failed = 0;
    (void)state;
    assert_int_equal(ir_encode(m, &buf, &len), 0);
    /* Top-level field boundaries: a prefix that ends there is a shorter but well-formed message. */
    while (pos < len && nboundary < 64) {
        uint64_t v = 0;
        int shift = 0;
        pos++; /* every top-level tag is one byte */
        do {
            v |= (uint64_t)(buf[pos] & 0x7f) << shift;
            shift += 7;
        } while (buf[pos++] & 0x80);
        pos += v;
        boundaries[nboundary++] = pos;
    }
    for (size_t n = 0; n < len; n++) {
        di_error err;
        int rc = decode_rc(buf, n, NULL, &err);
        int at_boundary = n == 0;
        for (size_t k = 0; k < nboundary; k++)
            at_boundary |= boundaries[k] == n;
        if (rc == 0 && !at_boundary)
            fail_msg("prefix of %zu of %zu bytes decoded", n, len);
        if (rc != 0)
            failed++;
    }
    assert_true(failed > (int)len - (int)nboundary - 1);
    di_free(buf);
    ir_module_free(m);
    {
        /* A prefix ending in the middle of a function says where. */
        uint8_t *b2;
        size_t l2;
        m = build_basic();
        assert_int_equal(ir_encode(m, &b2, &l2), 0);
        expect_error(b2, l2 - 3, NULL, DI_EDECODE, "runs past the end");
        di_free(b2);
        ir_module_free(m);
    }
}

static void
test_too_deep_pmap(void **state)
{
    ir_module *m = build_pmap(40);
    uint8_t *buf;
    size_t len;
    (void)state;
    assert_int_equal(ir_encode(m, &buf, &len), 0);
    expect_error(buf, len, NULL, DI_ETOODEEP,
                 "message nested deeper than 64 levels at functions[0].body.ops[0].body.ops[1]."
                 "body");
    di_free(buf);
    ir_module_free(m);
}

/* ir_from_proto limits pmap nesting by itself (for messages unpacked elsewhere). */
static void
test_nest_limit_from_proto(void **state)
{
    ir_module *m = build_pmap(5), *d = NULL;
    uint8_t *buf;
    size_t len;
    ir_limits lim;
    di_error err;
    ProtobufCMessage *msg;
    (void)state;
    assert_int_equal(ir_encode(m, &buf, &len), 0);
    assert_int_equal(pb_unpack_checked(&distir__v1__module__descriptor, buf, len, 64, &msg, &err),
                     0);
    ir_limits_default(&lim);
    lim.max_depth = 3;
    assert_int_equal(ir_from_proto((Distir__V1__Module *)msg, &lim, &d, &err), DI_ETOODEEP);
    assert_null(d);
    assert_non_null(strstr(err.msg, "pmap bodies nested deeper than 3"));
    assert_non_null(strstr(err.msg, "functions[0].body.ops[0].body.ops[1].body.ops[1].body"));
    lim.max_depth = 6;
    assert_int_equal(ir_from_proto((Distir__V1__Module *)msg, &lim, &d, &err), 0);
    ir_module_free(d);
    protobuf_c_message_free_unpacked(msg, NULL);
    di_free(buf);
    ir_module_free(m);
}

/* Writes a varint before *p (building backwards). */
static uint8_t *
put_varint_before(uint8_t *p, uint64_t v)
{
    uint8_t tmp[10];
    int n = 0;
    do {
        tmp[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
    p -= n;
    memcpy(p, tmp, (size_t)n);
    return p;
}

static void
test_too_deep_raw(void **state)
{
    /* Module{functions: Function{body: Region{ops: Op{body: Region{ops: ...}}}}}, 10,000 deep. */
    size_t cap = 200000;
    uint8_t *mem = malloc(cap), *end = mem + cap, *p = end;
    di_error err;
    (void)state;
    for (int i = 0; i < 10000; i++) {
        p = put_varint_before(p, (uint64_t)(end - p)); /* Op.body = Region */
        *--p = 0x2a;
        p = put_varint_before(p, (uint64_t)(end - p)); /* Region.ops[0] = Op */
        *--p = 0x12;
    }
    p = put_varint_before(p, (uint64_t)(end - p)); /* Function.body */
    *--p = 0x12;
    p = put_varint_before(p, (uint64_t)(end - p)); /* Module.functions[0] */
    *--p = 0x22;
    expect_error(p, (size_t)(end - p), NULL, DI_ETOODEEP,
                 "nested deeper than 64 levels at functions[0].body.ops[0].body.ops[0].body");
    di_error_clear(&err);
    assert_int_equal(
        pb_check_depth(&distir__v1__module__descriptor, p, (size_t)(end - p), 64, &err),
        DI_ETOODEEP);
    /* With a limit above the nesting, the walk does not overflow the stack either. */
    assert_int_equal(
        pb_check_depth(&distir__v1__module__descriptor, p, (size_t)(end - p), 30000, &err), 0);
    free(mem);
}

static void
test_bad_enum(void **state)
{
    ir_module *m = build_basic();
    Distir__V1__Module *pm = ir_to_proto(m);
    (void)state;
    pm->types[3]->dtype = (Distir__V1__DType)42;
    expect_tree_error(pm, DI_EDECODE, "types[3].dtype: 42 is not a value of enum distir.v1.DType");
    pm->types[3]->dtype = DISTIR__V1__DTYPE__DTYPE_F32;
    pm->types[2]->kind = (Distir__V1__Type__Kind)7;
    expect_tree_error(pm, DI_EDECODE, "types[2].kind: 7 is not a value");
    pm->types[2]->kind = (Distir__V1__Type__Kind)-1;
    expect_tree_error(pm, DI_EDECODE, "types[2].kind: -1 is not a value");
    ir_proto_free(pm);
    ir_module_free(m);
}

static void
test_bad_utf8(void **state)
{
    ir_module *m = build_basic();
    Distir__V1__Module *pm = ir_to_proto(m);
    char bad[] = "ok\xff\xfe";
    char overlong[] = "\xc0\xaf";
    char surrogate[] = "\xed\xa0\x80";
    (void)state;
    pm->values[1]->name = bad;
    expect_tree_error(pm, DI_EDECODE, "values[1].name: invalid UTF-8");
    pm->values[1]->name = overlong;
    expect_tree_error(pm, DI_EDECODE, "values[1].name: invalid UTF-8");
    pm->values[1]->name = (char *)"x";
    pm->functions[0]->body->ops[2]->attrs[0]->key = surrogate;
    expect_tree_error(pm, DI_EDECODE, "functions[0].body.ops[2].attrs[0].key: invalid UTF-8");
    ir_proto_free(pm);
    ir_module_free(m);
}

static void
test_bad_indexes(void **state)
{
    ir_module *m = build_basic();
    Distir__V1__Module *pm = ir_to_proto(m);
    Distir__V1__Op *op;
    uint32_t saved;
    char want[128];
    (void)state;

    op = pm->functions[0]->body->ops[3];
    saved = op->inputs[0];
    op->inputs[0] = 99;
    snprintf(want, sizeof want,
             "functions[0].body.ops[3].inputs[0]: value index 99 out of range (module has %u "
             "values)",
             m->nvalue);
    expect_tree_error(pm, DI_EDECODE, want);
    op->inputs[0] = saved;

    saved = pm->functions[1]->body->results[0];
    pm->functions[1]->body->results[0] = 1000;
    expect_tree_error(pm, DI_EDECODE, "functions[1].body.results[0]: value index 1000");
    pm->functions[1]->body->results[0] = saved;

    pm->values[2]->type = 50;
    expect_tree_error(pm, DI_EDECODE, "values[2].type: type index 50 out of range");
    pm->values[2]->type = 1;

    pm->types[1]->mesh = 5;
    pm->types[1]->device = -1;
    expect_tree_error(pm, DI_EDECODE, "types[1].mesh: mesh index 5 out of range");
    pm->types[1]->mesh = 0;
    pm->types[1]->device = 0;

    /* A tuple may only refer to earlier types: no self reference, no cycle. */
    {
        Distir__V1__Type *t = pm->types[m->ntype - 1];
        uint32_t elems[2] = {1, m->ntype - 1};
        uint32_t *old = t->elems;
        size_t oldn = t->n_elems;
        char where[64];
        assert_int_equal(t->kind, DISTIR__V1__TYPE__KIND__KIND_TUPLE);
        t->elems = elems;
        t->n_elems = 2;
        snprintf(where, sizeof where, "types[%u].elems[1]: type index %u must refer to an earlier",
                 m->ntype - 1, m->ntype - 1);
        expect_tree_error(pm, DI_EDECODE, where);
        t = pm->types[m->ntype - 2];
        t->elems[0] = m->ntype - 1;
        expect_tree_error(pm, DI_EDECODE, "must refer to an earlier type");
        pm->types[m->ntype - 1]->elems = old;
        pm->types[m->ntype - 1]->n_elems = oldn;
    }
    ir_proto_free(pm);
    ir_module_free(m);
}

static void
test_defined_twice(void **state)
{
    ir_module *m = build_basic();
    Distir__V1__Module *pm = ir_to_proto(m);
    Distir__V1__Op *op = pm->functions[0]->body->ops[1];
    uint32_t saved = op->outputs[0];
    (void)state;
    /* The Relu claims the MatMul's result. */
    op->outputs[0] = pm->functions[0]->body->ops[0]->outputs[0];
    expect_tree_error(pm, DI_EDECODE, "is defined more than once");
    /* The Relu claims an argument. */
    op->outputs[0] = pm->functions[0]->body->args[0];
    expect_tree_error(pm, DI_EDECODE, "is defined more than once");
    /* Nobody defines the Relu's result any more. */
    op->n_outputs = 0;
    expect_tree_error(pm, DI_EDECODE, "not defined by any region argument or op output");
    op->n_outputs = 1;
    op->outputs[0] = saved;
    /* Results of one op are consecutive values. */
    op = pm->functions[0]->body->ops[3];
    op->outputs[1] = op->outputs[2];
    expect_tree_error(pm, DI_EDECODE, "functions[0].body.ops[3].outputs[1]: value");
    ir_proto_free(pm);
    ir_module_free(m);
}

static void
test_bad_structure(void **state)
{
    ir_module *m = build_pmap(2);
    Distir__V1__Module *pm = ir_to_proto(m);
    Distir__V1__Op *pmap = pm->functions[0]->body->ops[0];
    Distir__V1__Op *relu = pmap->body->ops[0];
    char *kind;
    uint32_t id;
    (void)state;

    kind = relu->kind;
    relu->kind = (char *)"Frobnicate";
    expect_tree_error(pm, DI_EDECODE, "functions[0].body.ops[0].body.ops[0].kind: unknown op kind");
    relu->kind = kind;

    relu->body = pmap->body->ops[1]->body;
    pmap->body->ops[1]->body = NULL;
    expect_tree_error(pm, DI_EDECODE, "body.ops[0].body: a Relu op has no body");
    pmap->body->ops[1]->body = relu->body;
    relu->body = NULL;

    id = relu->id;
    relu->id = 0;
    expect_tree_error(pm, DI_EDECODE, "either every op has one or none does");
    relu->id = 999;
    expect_tree_error(pm, DI_EDECODE, "body.ops[0].id: op id 999 out of range");
    relu->id = pmap->id;
    expect_tree_error(pm, DI_EDECODE, "is used twice");
    relu->id = id;

    id = pmap->body->id;
    pmap->body->id = pm->functions[0]->body->id;
    expect_tree_error(pm, DI_EDECODE, "functions[0].body.ops[0].body.id: region id");
    pmap->body->id = id;

    relu->flags = 0x10000;
    expect_tree_error(pm, DI_EDECODE, "does not fit in 16 bits");
    relu->flags = 0;

    pm->functions[0]->body = NULL;
    expect_tree_error(pm, DI_EDECODE, "functions[0]: no body");
    ir_proto_free(pm);
    ir_module_free(m);
}

static void
test_bad_types_and_meshes(void **state)
{
    ir_module *m = build_mesh();
    Distir__V1__Module *pm = ir_to_proto(m);
    Distir__V1__Type *t = pm->types[1];
    Distir__V1__Mesh *mesh = pm->meshes[1];
    int64_t saved;
    int64_t dims[IR_MAX_RANK + 1] = {0};
    (void)state;
    assert_int_equal(t->mesh, 1);

    saved = t->placements[0];
    t->placements[0] = 2;
    expect_tree_error(pm, DI_EDECODE, "types[1].placements[0]: 2 is not a placement");
    t->placements[0] = -4;
    expect_tree_error(pm, DI_EDECODE, "types[1].placements[0]: -4 is not a placement");
    t->placements[0] = saved;
    t->n_placements = 1;
    expect_tree_error(pm, DI_EDECODE, "types[1]: 1 placements for a mesh of rank 2");
    t->n_placements = 2;
    t->device = 3;
    expect_tree_error(pm, DI_EDECODE, "at most one of a device");
    t->device = -2;
    expect_tree_error(pm, DI_EDECODE, "types[1].device: -2");
    t->device = -1;
    t->dims[1] = -16;
    expect_tree_error(pm, DI_EDECODE, "types[1].dims[1]: negative size -16");
    t->dims[1] = 16;
    {
        int64_t *old = t->dims;
        t->dims = dims;
        t->n_dims = IR_MAX_RANK + 1;
        expect_tree_error(pm, DI_EDECODE, "types[1]: rank 17 exceeds the limit of 16");
        t->dims = old;
        t->n_dims = 2;
    }
    t->kind = DISTIR__V1__TYPE__KIND__KIND_NONE;
    expect_tree_error(pm, DI_EDECODE, "types[1].kind: 0 is not a type kind");
    t->kind = DISTIR__V1__TYPE__KIND__KIND_TENSOR;

    mesh->shape[0] = 3;
    expect_tree_error(pm, DI_EDECODE, "meshes[1]: the shape holds more devices than the 8 listed");
    mesh->shape[0] = 1;
    expect_tree_error(pm, DI_EDECODE, "meshes[1]: the shape holds 4 devices but 8 are listed");
    mesh->shape[0] = 0;
    expect_tree_error(pm, DI_EDECODE, "meshes[1].shape[0]: axis size 0 is not positive");
    mesh->shape[0] = INT64_MAX;
    expect_tree_error(pm, DI_EDECODE, "meshes[1]");
    mesh->shape[0] = 2;
    mesh->devices[3] = -1;
    expect_tree_error(pm, DI_EDECODE, "meshes[1].devices[3]: device id -1 out of range");
    mesh->devices[3] = 3;

    /* Attributes: a mesh out of range, a tensor of the wrong size, a duplicate key. */
    {
        Distir__V1__Op *ar = pm->functions[0]->body->ops[1];
        Distir__V1__Op *k = pm->functions[0]->body->ops[0];
        Distir__V1__Attr *a;
        assert_int_equal(ar->attrs[0]->value_case, DISTIR__V1__ATTR__VALUE_MESH);
        ar->attrs[0]->mesh = 9;
        expect_tree_error(pm, DI_EDECODE, "functions[0].body.ops[1].attrs[0].mesh: mesh index 9");
        ar->attrs[0]->mesh = 1;
        k->attrs[0]->tensor->data.len = 15;
        expect_tree_error(pm, DI_EDECODE, "attrs[0].tensor.data: 15 bytes for a tensor of 16");
        k->attrs[0]->tensor->data.len = 16;
        k->attrs[0]->tensor->type = 0;
        expect_tree_error(pm, DI_EDECODE, "attrs[0].tensor.type: type index 0 out of range");
        k->attrs[0]->tensor->type = 5;
        a = ar->attrs[1];
        a->key = ar->attrs[2]->key;
        expect_tree_error(pm, DI_EDECODE, "functions[0].body.ops[1].attrs[2]: duplicate key");
        a->key = (char *)"";
        expect_tree_error(pm, DI_EDECODE, "functions[0].body.ops[1].attrs[1]: empty key");
        a->key = (char *)"mesh_axes";
        a->value_case = DISTIR__V1__ATTR__VALUE__NOT_SET;
        expect_tree_error(pm, DI_EDECODE, "attribute 'mesh_axes' has no value");
    }
    ir_proto_free(pm);
    ir_module_free(m);
}

static void
test_limits(void **state)
{
    ir_module *m = build_basic();
    uint8_t *buf;
    size_t len;
    ir_limits lim;
    di_error err;
    (void)state;
    assert_int_equal(ir_encode(m, &buf, &len), 0);

    ir_limits_default(&lim);
    lim.max_bytes = len - 1;
    expect_error(buf, len, &lim, DI_ETOOBIG, "exceeds the limit of");
    lim.max_bytes = len;
    assert_int_equal(decode_rc(buf, len, &lim, &err), 0);

    ir_limits_default(&lim);
    lim.max_ops = 5;
    expect_error(buf, len, &lim, DI_ETOOBIG, "functions[0].body: 7 ops exceed the limit of 5");
    lim.max_ops = 8; /* 7 + 2 */
    expect_error(buf, len, &lim, DI_ETOOBIG, "module has more than 8 ops");
    lim.max_ops = 9;
    assert_int_equal(decode_rc(buf, len, &lim, &err), 0);
    ir_limits_default(&lim);
    lim.max_values = 3;
    expect_error(buf, len, &lim, DI_ETOOBIG, "types: 15 entries exceed the limit of 3");
    ir_limits_default(&lim);
    lim.max_rank = 1;
    expect_error(buf, len, &lim, DI_EDECODE, "rank 2 exceeds the limit of 1");
    ir_limits_default(&lim);
    lim.max_depth = 3;
    expect_error(buf, len, &lim, DI_ETOODEEP, "nested deeper than 3 levels");
    di_free(buf);
    ir_module_free(m);
}

static void
test_wire_errors(void **state)
{
    /* Module.types[0] = Type{dims: 1} followed by each kind of damage. */
    static const struct {
        const char *what;
        uint8_t bytes[16];
        size_t len;
        int code;
        const char *msg;
    } cases[] = {
        {"group start", {0x0b}, 1, DI_EDECODE, "groups (wire type 3, field 1)"},
        {"group end", {0x0c}, 1, DI_EDECODE, "groups (wire type 4, field 1)"},
        {"wire type 6", {0x0e}, 1, DI_EDECODE, "invalid wire type 6"},
        {"wire type 7 nested",
         {0x0a, 0x01, 0x1f},
         3,
         DI_EDECODE,
         "invalid wire type 7 (field 3) at byte 2 in types[0]"},
        {"field 0", {0x02, 0x00}, 2, DI_EDECODE, "invalid field number 0"},
        {"truncated tag", {0x8a}, 1, DI_EDECODE, "malformed field tag"},
        {"overlong varint",
         {0x0a, 0x0c, 0x18, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
         14,
         DI_EDECODE,
         "overlong varint"},
        {"length past end",
         {0x0a, 0x05, 0x18, 0x01},
         4,
         DI_EDECODE,
         "length 5 of field 1 runs past the end (2 bytes left) at byte 0"},
        {"wrong wire type",
         {0x0d, 0, 0, 0, 0},
         5,
         DI_EDECODE,
         "field 'types' has wire type 5, expected 2"},
        {"truncated fixed64", {0x79, 0, 0}, 3, DI_EDECODE, "field 15 needs 8 bytes, 2 left"},
        {"bad packed varint",
         {0x0a, 0x03, 0x1a, 0x01, 0x80},
         5,
         DI_EDECODE,
         "malformed varint in packed field 'dims'"},
    };
    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        di_error err;
        int rc = decode_rc(cases[i].bytes, cases[i].len, NULL, &err);
        if (rc != cases[i].code || strstr(err.msg, cases[i].msg) == NULL)
            fail_msg("%s: got %s: %s", cases[i].what, di_errname(rc), err.msg);
    }
}

/* Many empty ops unpack into far more memory than their bytes: the allocator cap stops it. */
static void
test_alloc_cap(void **state)
{
    size_t nops = 200000, len = 0, cap = nops * 2 + 64;
    uint8_t *buf = malloc(cap), *body = malloc(cap);
    size_t blen = 0;
    uint8_t *p;
    (void)state;
    for (size_t i = 0; i < nops; i++) {
        body[blen++] = 0x12; /* Region.ops */
        body[blen++] = 0x00; /* an empty Op */
    }
    /* Module.functions[0] = Function{body = Region{...}} */
    p = buf + cap;
    p -= blen;
    memcpy(p, body, blen);
    p = put_varint_before(p, blen);
    *--p = 0x12;
    p = put_varint_before(p, (uint64_t)(buf + cap - p));
    *--p = 0x22;
    len = (size_t)(buf + cap - p);
    expect_error(p, len, NULL, DI_ETOOBIG, "would take more than");
    free(body);
    free(buf);
}

/* A chain of MLP layers with unnamed values, whose unpacked form is about 9 times its size. */
static void
test_large_module(void **state)
{
    ir_module *m = ir_module_new(), *d;
    ir_id f = ir_func_new(m, "main");
    int64_t xd[2] = {1024, 4096}, wd[2] = {4096, 4096}, bd[1] = {4096};
    ir_id tx = ir_type_tensor(m, IR_F32, 2, xd, 0), tw = ir_type_tensor(m, IR_F32, 2, wd, 0);
    ir_id tb = ir_type_tensor(m, IR_F32, 1, bd, 0);
    ir_id x = ir_region_add_arg(m, f, tx, "x");
    uint8_t *buf;
    size_t len;
    di_error err;
    (void)state;
    for (int i = 0; i < 20000; i++) {
        ir_id w = ir_region_add_arg(m, f, tw, NULL), b = ir_region_add_arg(m, f, tb, NULL);
        ir_id op = ir_op_add(m, f, IR_OP_MATMUL, 2, (ir_id[]){x, w}, 1, &tx, NULL);
        op = ir_op_add(m, f, IR_OP_ADD, 2, (ir_id[]){ir_op_output(m, op, 0), b}, 1, &tx, NULL);
        op = ir_op_add(m, f, IR_OP_GELU, 1, (ir_id[]){ir_op_output(m, op, 0)}, 1, &tx, NULL);
        op = ir_op_add(m, f, IR_OP_SOFTMAX, 1, (ir_id[]){ir_op_output(m, op, 0)}, 1, &tx, NULL);
        ir_op_set_int(m, op, "axis", -1);
        x = ir_op_output(m, op, 0);
    }
    ir_op_add(m, f, IR_OP_RETURN, 1, &x, 0, NULL, NULL);
    ir_region_add_result(m, f, x);
    assert_int_equal(ir_encode(m, &buf, &len), 0);
    assert_true(len > (size_t)2 << 20);
    di_error_clear(&err);
    if (ir_decode(buf, len, NULL, &d, &err) != 0)
        fail_msg("%s", err.msg);
    assert_null(module_diff(m, d));
    ir_module_free(d);
    di_free(buf);
    ir_module_free(m);
}

/* Allocation failures inside unpack come back as DI_ENOMEM and leak nothing. */
static void
test_alloc_failures(void **state)
{
    ir_module *m = build_mesh();
    uint8_t *buf;
    size_t len;
    int ok = 0;
    (void)state;
    assert_int_equal(ir_encode(m, &buf, &len), 0);
    for (long n = 0; n < 400; n++) {
        di_error err;
        ir_module *d = NULL;
        int rc;
        di_alloc_fail_after(n);
        rc = ir_decode(buf, len, NULL, &d, &err);
        di_alloc_fail_after(-1);
        if (rc == 0) {
            ok = 1;
            ir_module_free(d);
            break;
        }
        assert_int_equal(rc, DI_ENOMEM);
        assert_null(d);
    }
    assert_true(ok);
    di_free(buf);
    ir_module_free(m);
}

/*
 * A string holding a NUL byte is refused on the wire, not cut short
 * ("a100-dgx\0:2" must not be read as the preset "a100-dgx"); a NUL in a
 * bytes field is data.
 */
static void
test_string_with_nul(void **state)
{
    static const uint8_t bad[] = {0x0a, 11, 'a', '1', '0', '0', '-', 'd', 'g', 'x', 0, ':', '2'};
    static const uint8_t good[] = {0x0a, 10, 'a', '1', '0', '0', '-', 'd', 'g', 'x', ':', '2'};
    ProtobufCMessage *msg = NULL;
    di_error err;
    (void)state;
    assert_int_equal(pb_unpack_checked(&distir__v1__hardware_ref__descriptor, bad, sizeof bad, 8,
                                       &msg, &err),
                     DI_EDECODE);
    assert_null(msg);
    assert_string_equal(err.msg, "string field 'preset' holds a NUL byte at byte 10");
    assert_int_equal(pb_unpack_checked(&distir__v1__hardware_ref__descriptor, good, sizeof good, 8,
                                       &msg, &err),
                     0);
    assert_string_equal(((Distir__V1__HardwareRef *)msg)->preset, "a100-dgx:2");
    protobuf_c_message_free_unpacked(msg, NULL);
}

static void
test_validate_paths(void **state)
{
    /* pb_validate on a message built in memory: the path goes through repeated fields. */
    ir_module *m = build_pmap(3);
    Distir__V1__Module *pm = ir_to_proto(m);
    Distir__V1__Op *inner = pm->functions[0]->body->ops[0]->body->ops[1]->body->ops[1];
    di_error err;
    char bad[] = "\x80";
    (void)state;
    inner->attrs[0]->s = bad;
    assert_int_equal(inner->attrs[0]->value_case, DISTIR__V1__ATTR__VALUE_S);
    assert_int_equal(pb_validate(&pm->base, &err), DI_EDECODE);
    assert_string_equal(err.msg,
                        "functions[0].body.ops[0].body.ops[1].body.ops[1].attrs[0].s: invalid "
                        "UTF-8 in string");
    /* A string outside the oneof's chosen case is not looked at. */
    inner->attrs[0]->value_case = DISTIR__V1__ATTR__VALUE_I;
    assert_int_equal(pb_validate(&pm->base, &err), 0);
    ir_proto_free(pm);
    ir_module_free(m);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_empty),
        cmocka_unit_test(test_round_trip_basic),
        cmocka_unit_test(test_round_trip_init),
        cmocka_unit_test(test_round_trip_pmap),
        cmocka_unit_test(test_round_trip_callee),
        cmocka_unit_test(test_round_trip_mesh),
        cmocka_unit_test(test_round_trip_random),
        cmocka_unit_test(test_no_ids),
        cmocka_unit_test(test_truncated),
        cmocka_unit_test(test_too_deep_pmap),
        cmocka_unit_test(test_nest_limit_from_proto),
        cmocka_unit_test(test_too_deep_raw),
        cmocka_unit_test(test_bad_enum),
        cmocka_unit_test(test_bad_utf8),
        cmocka_unit_test(test_bad_indexes),
        cmocka_unit_test(test_defined_twice),
        cmocka_unit_test(test_bad_structure),
        cmocka_unit_test(test_bad_types_and_meshes),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_wire_errors),
        cmocka_unit_test(test_alloc_cap),
        cmocka_unit_test(test_large_module),
        cmocka_unit_test(test_alloc_failures),
        cmocka_unit_test(test_validate_paths),
        cmocka_unit_test(test_string_with_nul),
    };
    if (getenv("TEST_FILTER"))
        cmocka_set_test_filter(getenv("TEST_FILTER"));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
