/*
 * test_text.c: the IR text form (docs/ir-text.md). The golden files in
 * tests/ir/ are canonical printed text: each must parse, print back byte for
 * byte, reparse to an equal module and pass the verifier. The form written
 * for DistIR's MLIR importer (MPI names, free layout) must parse to the
 * right ops, types and attributes; parse errors must carry the exact line
 * and column; a module built in code must survive print and parse (pmaps
 * that call functions included); and long chains must round-trip quickly.
 * Run from the repository root.
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
#include <time.h>

#include "ir/ir.h"
#include "support/support.h"

static const char *const golden_files[] = {
    "tests/ir/seed001_mlp.dir",
    "tests/ir/seed001_mlp_dp.dir",
    "tests/ir/dp_inf.dir",
    "tests/ir/mesh_global.dir",
    "tests/ir/dp_callee.dir",
};

/* ---- helpers ---- */

static char *
read_text(const char *path, size_t *len)
{
    uint8_t *data;
    di_error err;
    di_error_clear(&err);
    if (di_read_file(path, 64u << 20, &data, len, &err) != 0)
        fail_msg("%s", err.msg);
    return (char *)data;
}

static ir_module *
parse_ok(const char *text, size_t len)
{
    ir_module *m = NULL;
    di_error err;
    di_error_clear(&err);
    if (ir_parse(text, len, &m, &err) != 0)
        fail_msg("parse failed: %s", err.msg);
    return m;
}

static ir_module *
parse_str(const char *text)
{
    return parse_ok(text, strlen(text));
}

/* Structural type equality across two modules. */
static int
type_eq(const ir_module *a, ir_id ta, const ir_module *b, ir_id tb)
{
    const ir_type *x, *y;
    if (ta == 0 || tb == 0)
        return ta == tb;
    x = &a->types[ta];
    y = &b->types[tb];
    if (x->kind != y->kind || x->dtype != y->dtype || x->rank != y->rank ||
        x->device != y->device || x->nelem != y->nelem || !x->devvar != !y->devvar ||
        !x->mesh != !y->mesh)
        return 0;
    if (x->devvar && strcmp(ir_str_get(a, x->devvar), ir_str_get(b, y->devvar)) != 0)
        return 0;
    for (uint32_t i = 0; i < x->rank; i++)
        if (a->ints[x->dims + i] != b->ints[y->dims + i])
            return 0;
    if (x->mesh) {
        if (strcmp(ir_str_get(a, a->meshes[x->mesh].name), ir_str_get(b, b->meshes[y->mesh].name)))
            return 0;
        for (uint32_t i = 0; i < a->meshes[x->mesh].rank; i++)
            if (a->ints[x->placements + i] != b->ints[y->placements + i])
                return 0;
    }
    for (uint32_t i = 0; i < x->nelem; i++)
        if (!type_eq(a, a->refs[x->elems + i], b, b->refs[y->elems + i]))
            return 0;
    return 1;
}

static int
attr_eq(const ir_module *a, const ir_attr *x, const ir_module *b, const ir_attr *y)
{
    if (strcmp(ir_str_get(a, x->key), ir_str_get(b, y->key)) != 0 || x->kind != y->kind)
        return 0;
    switch (x->kind) {
    case IR_ATTR_INT:
        return x->i == y->i;
    case IR_ATTR_FLOAT:
        return memcmp(&x->f, &y->f, sizeof x->f) == 0 || (isnan(x->f) && isnan(y->f));
    case IR_ATTR_STRING:
        return strcmp(ir_str_get(a, x->s), ir_str_get(b, y->s)) == 0;
    case IR_ATTR_INTS:
        return x->n == y->n &&
               (x->n == 0 || memcmp(a->ints + x->off, b->ints + y->off, x->n * 8) == 0);
    case IR_ATTR_FLOATS:
        return x->n == y->n &&
               (x->n == 0 || memcmp(a->floats + x->off, b->floats + y->off, x->n * 8) == 0);
    case IR_ATTR_MESH:
        return strcmp(ir_str_get(a, a->meshes[x->s].name), ir_str_get(b, b->meshes[y->s].name)) ==
               0;
    case IR_ATTR_TENSOR:
        return x->n == y->n && type_eq(a, (ir_id)x->i, b, (ir_id)y->i) &&
               (x->n == 0 || memcmp(a->data + x->off, b->data + y->off, x->n) == 0);
    default:
        return 0;
    }
}

typedef struct eqctx {
    const ir_module *a, *b;
    ir_id *vmap; /* a's value id -> b's */
    int names;   /* compare value names too */
} eqctx;

static int
value_eq(eqctx *c, ir_id va, ir_id vb)
{
    if (!type_eq(c->a, c->a->values[va].type, c->b, c->b->values[vb].type))
        return 0;
    if (c->names && strcmp(ir_str_get(c->a, c->a->values[va].name),
                           ir_str_get(c->b, c->b->values[vb].name)) != 0)
        return 0;
    c->vmap[va] = vb;
    return 1;
}

static int
region_eq(eqctx *c, ir_id ra, ir_id rb)
{
    const ir_region *x = &c->a->regions[ra], *y = &c->b->regions[rb];
    if (x->narg != y->narg || x->nop != y->nop || x->nresult != y->nresult)
        return 0;
    for (uint32_t i = 0; i < x->narg; i++)
        if (!value_eq(c, x->args[i], y->args[i]))
            return 0;
    for (uint32_t i = 0; i < x->nop; i++) {
        const ir_op *p = &c->a->ops[x->ops[i]], *q = &c->b->ops[y->ops[i]];
        if (p->kind != q->kind || p->ninput != q->ninput || p->noutput != q->noutput ||
            p->nattr != q->nattr || !p->body != !q->body)
            return 0;
        if (strcmp(ir_str_get(c->a, p->name), ir_str_get(c->b, q->name)) != 0 ||
            strcmp(ir_op_name(c->a, x->ops[i]), ir_op_name(c->b, y->ops[i])) != 0)
            return 0;
        for (uint32_t k = 0; k < p->ninput; k++)
            if (c->vmap[c->a->refs[p->inputs + k]] != c->b->refs[q->inputs + k])
                return 0;
        for (uint32_t k = 0; k < p->nattr; k++)
            if (!attr_eq(c->a, &c->a->attrs[p->attrs + k], c->b, &c->b->attrs[q->attrs + k]))
                return 0;
        for (uint32_t k = 0; k < p->noutput; k++)
            if (!value_eq(c, p->outputs + k, q->outputs + k))
                return 0;
        if ((p->flags & IR_OPFLAG_CALLEE) != (q->flags & IR_OPFLAG_CALLEE))
            return 0;
        if (p->flags & IR_OPFLAG_CALLEE) {
            /* A call: the same function by name (functions are compared on their own). */
            if (strcmp(ir_str_get(c->a, c->a->regions[p->body].name),
                       ir_str_get(c->b, c->b->regions[q->body].name)) != 0 ||
                c->b->regions[q->body].parent != 0)
                return 0;
        } else if (p->body && (c->b->regions[q->body].parent != y->ops[i] ||
                               !region_eq(c, p->body, q->body))) {
            return 0;
        }
    }
    for (uint32_t i = 0; i < x->nresult; i++)
        if (c->vmap[x->results[i]] != y->results[i])
            return 0;
    return 1;
}

/* Same meshes, and the same functions in order, op for op. */
static int
modules_equal(const ir_module *a, const ir_module *b, int names)
{
    eqctx c = {a, b, calloc(a->nvalue, sizeof(ir_id)), names};
    ir_id ra = 1, rb = 1;
    int ok = a->nmesh == b->nmesh;
    for (ir_id i = 1; ok && i < a->nmesh; i++) {
        const ir_mesh *x = &a->meshes[i], *y = &b->meshes[i];
        ok = strcmp(ir_str_get(a, x->name), ir_str_get(b, y->name)) == 0 && x->rank == y->rank &&
             x->ndevice == y->ndevice &&
             memcmp(ir_mesh_shape(a, i), ir_mesh_shape(b, i), x->rank * 8) == 0 &&
             memcmp(ir_mesh_devices(a, i), ir_mesh_devices(b, i), x->ndevice * 8) == 0;
    }
    while (ok) {
        while (ra < a->nregion && (a->regions[ra].parent || !a->regions[ra].name))
            ra++;
        while (rb < b->nregion && (b->regions[rb].parent || !b->regions[rb].name))
            rb++;
        if (ra >= a->nregion || rb >= b->nregion) {
            ok = ra >= a->nregion && rb >= b->nregion;
            break;
        }
        ok = strcmp(ir_str_get(a, a->regions[ra].name), ir_str_get(b, b->regions[rb].name)) == 0 &&
             region_eq(&c, ra, rb);
        ra++;
        rb++;
    }
    free(c.vmap);
    return ok;
}

/* Prints m, checks print(parse(print(m))) == print(m) and parse(print(m)) == m. */
static void
check_roundtrip(const ir_module *m, int names)
{
    size_t len, len2;
    char *text = ir_print(m, &len), *text2;
    ir_module *m2 = parse_ok(text, len);
    assert_true(modules_equal(m, m2, names));
    text2 = ir_print(m2, &len2);
    assert_int_equal(len, len2);
    assert_memory_equal(text, text2, len);
    di_free(text);
    di_free(text2);
    ir_module_free(m2);
}

static ir_id
first_func_op(const ir_module *m, uint32_t i)
{
    return m->regions[ir_module_entry(m)].ops[i];
}

/* ---- golden files ---- */

static void
test_golden_roundtrip(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof golden_files / sizeof *golden_files; i++) {
        size_t len, plen;
        char *text = read_text(golden_files[i], &len), *printed;
        ir_module *m = parse_ok(text, len);
        printed = ir_print(m, &plen);
        if (plen != len || memcmp(text, printed, len) != 0)
            fail_msg("%s does not print back byte for byte", golden_files[i]);
        check_roundtrip(m, 1);
        di_free(printed);
        di_free(text);
        ir_module_free(m);
    }
}

static void
test_golden_verify(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof golden_files / sizeof *golden_files; i++) {
        size_t len;
        char *text = read_text(golden_files[i], &len);
        ir_module *m = parse_ok(text, len);
        di_error err;
        di_error_clear(&err);
        if (ir_verify(m, &err) != 0)
            fail_msg("%s: %s", golden_files[i], err.msg);
        di_free(text);
        ir_module_free(m);
    }
}

/* ---- DistIR's importer form ---- */

static const char importer_text[] =
    "func @dp_inf(%wA: !dist.tensor<4x6xf32, 0>, %x: !dist.tensor<8x4xf32, 0>)\n"
    "    -> (!dist.tensor<8x6xf32, 0>)\n"
    "{\n"
    "    %xs = \"MPIScatterToTupleType\"(%x) {dim = 0, devices = [1, 2]}\n"
    "        : (!dist.tensor<8x4xf32, 0>) -> tuple<!dist.tensor<4x4xf32, 1>, "
    "!dist.tensor<4x4xf32, 2>>\n"
    "    %wAs = \"MPIBroadcastToTupleType\"(%wA) {devices = [1, 2]}\n"
    "        : (!dist.tensor<4x6xf32, 0>) -> tuple<!dist.tensor<4x6xf32, 1>, "
    "!dist.tensor<4x6xf32, 2>>\n"
    "    %ys = \"dist.pmap\"(%xs, %wAs)\n"
    "        ({\n"
    "        ^bb0(%xi: !dist.tensor<4x4xf32, d>, %wAi: !dist.tensor<4x6xf32, d>):\n"
    "            %yi = \"MatMul\"(%xi, %wAi)\n"
    "            : (!dist.tensor<4x4xf32, d>, !dist.tensor<4x6xf32, d>) -> "
    "!dist.tensor<4x6xf32, d>\n"
    "            \"dist.return\"(%yi) : (!dist.tensor<4x6xf32, d>) -> ()\n"
    "        })\n"
    "        {device_var = \"d\", devices = [1, 2]}\n"
    "        : (tuple<!dist.tensor<4x4xf32, 1>, !dist.tensor<4x4xf32, 2>>,\n"
    "        tuple<!dist.tensor<4x6xf32, 1>, !dist.tensor<4x6xf32, 2>>)\n"
    "        -> tuple<!dist.tensor<4x6xf32, 1>, !dist.tensor<4x6xf32, 2>>\n"
    "    %y = \"MPIGatherFromTupleType\"(%ys) {device = 0, dim = 0} : "
    "(tuple<!dist.tensor<4x6xf32, 1>, !dist.tensor<4x6xf32, 2>>) -> !dist.tensor<8x6xf32, 0>\n"
    "    return %y: !dist.tensor<8x6xf32, 0>\n"
    "}\n";

static void
check_tensor(const ir_module *m, ir_id t, int64_t d0, int64_t d1, int32_t device,
             const char *devvar)
{
    const ir_type *ty = ir_type_get(m, t);
    assert_int_equal(ty->kind, IR_TYPE_TENSOR);
    assert_int_equal(ty->dtype, IR_F32);
    assert_int_equal(ty->rank, 2);
    assert_int_equal(ir_type_dims(m, t)[0], d0);
    assert_int_equal(ir_type_dims(m, t)[1], d1);
    assert_int_equal(ty->device, device);
    if (devvar)
        assert_string_equal(ir_str_get(m, ty->devvar), devvar);
    else
        assert_int_equal(ty->devvar, 0);
}

static void
test_importer_form(void **state)
{
    ir_module *m = parse_str(importer_text);
    ir_id f = ir_func_find(m, "dp_inf"), op, body, t;
    uint32_t n;
    const int64_t *devs;
    (void)state;
    assert_int_not_equal(f, 0);
    assert_int_equal(m->regions[f].narg, 2);
    assert_int_equal(m->regions[f].nop, 4);
    assert_int_equal(m->regions[f].nresult, 1);
    check_tensor(m, m->values[m->regions[f].args[0]].type, 4, 6, 0, NULL);
    assert_string_equal(ir_str_get(m, m->values[m->regions[f].args[1]].name), "x");

    op = m->regions[f].ops[0];
    assert_int_equal(m->ops[op].kind, IR_OP_SCATTER);
    assert_int_equal(ir_op_int(m, op, "dim", -1), 0);
    devs = ir_op_ints(m, op, "devices", &n);
    assert_int_equal(n, 2);
    assert_int_equal(devs[0], 1);
    assert_int_equal(devs[1], 2);
    t = m->values[ir_op_output(m, op, 0)].type;
    assert_int_equal(ir_type_get(m, t)->kind, IR_TYPE_TUPLE);
    assert_int_equal(ir_type_get(m, t)->nelem, 2);
    check_tensor(m, ir_type_elems(m, t)[1], 4, 4, 2, NULL);
    assert_string_equal(ir_str_get(m, m->values[ir_op_output(m, op, 0)].name), "xs");
    /* Positions: the op starts at its result, line 4 column 5. */
    assert_int_equal(m->oplocs[op].line, 4);
    assert_int_equal(m->oplocs[op].column, 5);
    assert_int_equal(m->valuelocs[ir_op_output(m, op, 0)].line, 4);

    assert_int_equal(m->ops[m->regions[f].ops[1]].kind, IR_OP_BROADCAST);

    op = m->regions[f].ops[2];
    assert_int_equal(m->ops[op].kind, IR_OP_PMAP);
    assert_string_equal(ir_op_string(m, op, "device_var", ""), "d");
    body = m->ops[op].body;
    assert_int_not_equal(body, 0);
    assert_int_equal(m->regions[body].parent, op);
    assert_int_equal(m->regions[body].narg, 2);
    check_tensor(m, m->values[m->regions[body].args[0]].type, 4, 4, IR_DEVICE_NONE, "d");
    assert_int_equal(m->regions[body].nop, 1);
    assert_int_equal(m->ops[m->regions[body].ops[0]].kind, IR_OP_MATMUL);
    assert_int_equal(m->ops[m->regions[body].ops[0]].region, body);
    assert_int_equal(m->regions[body].nresult, 1);
    assert_int_equal(m->regions[body].results[0], ir_op_output(m, m->regions[body].ops[0], 0));
    assert_int_equal(m->oplocs[m->regions[body].ops[0]].line, 11);
    assert_int_equal(m->oplocs[m->regions[body].ops[0]].column, 13);
    assert_int_equal(m->valuelocs[m->regions[body].args[1]].line, 10);
    assert_int_equal(m->valuelocs[m->regions[body].args[1]].column, 45);

    op = m->regions[f].ops[3];
    assert_int_equal(m->ops[op].kind, IR_OP_GATHERTO);
    assert_int_equal(ir_op_int(m, op, "device", -1), 0);
    check_tensor(m, m->values[ir_op_output(m, op, 0)].type, 8, 6, 0, NULL);
    assert_int_equal(m->regions[f].results[0], ir_op_output(m, op, 0));

    check_roundtrip(m, 1);
    {
        /* The canonical form of the importer example is the golden file. */
        size_t len, glen;
        char *text = ir_print(m, &len), *golden = read_text("tests/ir/dp_inf.dir", &glen);
        assert_int_equal(len, glen);
        assert_memory_equal(text, golden, len);
        di_free(text);
        di_free(golden);
    }
    ir_module_free(m);
}

/* "Gather" with a device attribute is DistIR's gather; without, ONNX's. */
static void
test_gather_names(void **state)
{
    ir_module *m = parse_str(
        "func @g(%t: tuple<!dist.tensor<2xf32, 1>, !dist.tensor<2xf32, 2>>, "
        "%e: !dist.tensor<10x4xf32, 0>, %i: !dist.tensor<3xi64, 0>) {\n"
        "  %a = \"Gather\"(%t) {device = 0, dim = 0} : (tuple<!dist.tensor<2xf32, 1>, "
        "!dist.tensor<2xf32, 2>>) -> !dist.tensor<4xf32, 0>\n"
        "  %b = \"Gather\"(%e, %i) {axis = 0} : (!dist.tensor<10x4xf32, 0>, "
        "!dist.tensor<3xi64, 0>) -> !dist.tensor<3x4xf32, 0>\n"
        "  %c = \"MPIAllreduce\"(%t) : (tuple<!dist.tensor<2xf32, 1>, !dist.tensor<2xf32, 2>>) "
        "-> tuple<!dist.tensor<2xf32, 1>, !dist.tensor<2xf32, 2>>\n"
        "  return\n"
        "}\n");
    (void)state;
    assert_int_equal(m->ops[first_func_op(m, 0)].kind, IR_OP_GATHERTO);
    assert_int_equal(m->ops[first_func_op(m, 1)].kind, IR_OP_GATHER);
    assert_int_equal(m->ops[first_func_op(m, 2)].kind, IR_OP_ALLREDUCE);
    check_roundtrip(m, 1);
    ir_module_free(m);
}

/* ---- the extended grammar ---- */

static void
test_grammar_forms(void **state)
{
    const char *text =
        "// a comment\n"
        "module {\n"
        "dist.mesh @m = <[2, 2], devices = [7, 6, 5, 4]>\n"
        "func.func @f(%a: !dist.tensor<4x4xbf16>, %s: !dist.tensor<bool, 3>) -> "
        "!dist.tensor<4x4xbf16> {\n"
        "  %r:2 = \"Split\"(%a) {axis = 0, split = array<i64: 2, 2>} : (!dist.tensor<4x4xbf16>) "
        "-> (!dist.tensor<2x4xbf16>, !dist.tensor<2x4xbf16>)  // two results\n"
        "  %c = \"Concat\"(%r#1, %r#0) {axis = 0 : i64} : (!dist.tensor<2x4xbf16>, "
        "!dist.tensor<2x4xbf16>) -> (!dist.tensor<4x4xbf16>)\n"
        "  %\"weird name\" = \"dist.opaque\"(%c) {op_type = \"Frob\", w = [1, 2.5], e = "
        "array<f64>, t = true, \"odd key\" = \"a\\\"b\\n\\01\"} : (!dist.tensor<4x4xbf16>) -> "
        "!dist.tensor<4x4xbf16> loc(\"node/1\")\n"
        "  func.return %\"weird name\" : !dist.tensor<4x4xbf16>\n"
        "}\n"
        "}\n";
    ir_module *m = parse_str(text);
    ir_id op, mesh;
    const ir_attr *a;
    (void)state;
    assert_int_equal(m->nmesh, 2);
    mesh = ir_mesh_find(m, ir_str(m, "m"));
    assert_int_equal(mesh, 1);
    assert_int_equal(m->meshes[mesh].ndevice, 4);
    assert_int_equal(ir_mesh_devices(m, mesh)[0], 7);
    assert_int_equal(ir_type_get(m, m->values[m->regions[1].args[1]].type)->dtype, IR_BOOL);
    assert_int_equal(ir_type_get(m, m->values[m->regions[1].args[0]].type)->device,
                     IR_DEVICE_NONE);

    op = first_func_op(m, 0);
    assert_int_equal(m->ops[op].noutput, 2);
    assert_string_equal(ir_str_get(m, m->values[ir_op_output(m, op, 1)].name), "r#1");
    op = first_func_op(m, 1);
    assert_int_equal(ir_op_input(m, op, 0), ir_op_output(m, first_func_op(m, 0), 1));
    assert_int_equal(ir_op_int(m, op, "axis", -1), 0);

    op = first_func_op(m, 2);
    assert_int_equal(m->ops[op].kind, IR_OP_OPAQUE);
    assert_string_equal(ir_op_name(m, op), "Frob");
    assert_string_equal(ir_op_string(m, op, "op_type", ""), "Frob");
    assert_string_equal(ir_str_get(m, m->ops[op].name), "node/1");
    assert_string_equal(ir_op_string(m, op, "odd key", ""), "a\"b\n\001");
    assert_int_equal(ir_op_int(m, op, "t", 0), 1);
    a = ir_op_attr(m, op, "w");
    assert_int_equal(a->kind, IR_ATTR_FLOATS);
    assert_true(m->floats[a->off] == 1.0 && m->floats[a->off + 1] == 2.5);
    a = ir_op_attr(m, op, "e");
    assert_int_equal(a->kind, IR_ATTR_FLOATS);
    assert_int_equal(a->n, 0);
    /* By the key's interned id: the same attribute; an id no attribute has, none. */
    assert_ptr_equal(ir_op_attr_key(m, op, ir_str_find(m, "w", 1)), ir_op_attr(m, op, "w"));
    assert_ptr_equal(ir_op_attr_key(m, op, ir_str_find(m, "odd key", 7)),
                     ir_op_attr(m, op, "odd key"));
    assert_null(ir_op_attr_key(m, op, ir_str_find(m, "axis", 4))); /* another op's key */
    assert_null(ir_op_attr_key(m, op, 0));
    /* Attributes are stored sorted by key. */
    assert_string_equal(ir_str_get(m, m->attrs[m->ops[op].attrs].key), "e");
    assert_string_equal(ir_str_get(m, m->values[ir_op_output(m, op, 0)].name), "weird name");
    check_roundtrip(m, 1);

    {
        size_t len;
        char *out = ir_print(m, &len);
        assert_non_null(strstr(out, "dist.mesh @m = <[2, 2], devices = [7, 6, 5, 4]>\n\nfunc @f("));
        assert_non_null(strstr(out, "%\"r#0\", %\"r#1\" = \"Split\""));
        assert_non_null(strstr(out, "{e = array<f64>, \"odd key\" = \"a\\\"b\\n\\01\", op_type = "
                                    "\"Frob\", t = 1, w = [1.0, 2.5]}"));
        assert_non_null(strstr(out, " loc(\"node/1\")\n"));
        assert_non_null(strstr(out, "  return %\"weird name\" : !dist.tensor<4x4xbf16>\n}\n"));
        di_free(out);
    }
    ir_module_free(m);
}

static void
test_numbers(void **state)
{
    ir_module *m = parse_str(
        "func @n() {\n"
        "  \"dist.opaque\"() {a = 1e300, b = -0.0, c = nan, d = inf, e = -inf, f = 0.1, "
        "g = -9223372036854775808, h = 9223372036854775807, i = 5e-324, j = 1.5E+3, "
        "k = [-inf, nan, 3]} : () -> ()\n"
        "  return\n"
        "}\n");
    ir_id op = first_func_op(m, 0);
    double negzero;
    (void)state;
    assert_true(ir_op_float(m, op, "a", 0) == 1e300);
    negzero = ir_op_float(m, op, "b", 1);
    assert_true(negzero == 0 && signbit(negzero));
    assert_true(isnan(ir_op_float(m, op, "c", 0)));
    assert_true(isinf(ir_op_float(m, op, "d", 0)) && ir_op_float(m, op, "d", 0) > 0);
    assert_true(isinf(ir_op_float(m, op, "e", 0)) && ir_op_float(m, op, "e", 0) < 0);
    assert_true(ir_op_float(m, op, "f", 0) == 0.1);
    assert_true(ir_op_int(m, op, "g", 0) == INT64_MIN);
    assert_true(ir_op_int(m, op, "h", 0) == INT64_MAX);
    assert_true(ir_op_float(m, op, "i", 0) == 5e-324);
    assert_true(ir_op_float(m, op, "j", 0) == 1500.0);
    assert_int_equal(ir_op_attr(m, op, "k")->kind, IR_ATTR_FLOATS);
    check_roundtrip(m, 1);
    {
        char *out = ir_print(m, NULL);
        assert_non_null(strstr(out, "a = 1e+300, b = -0.0, c = nan, d = inf, e = -inf, f = 0.1, "
                                    "g = -9223372036854775808, h = 9223372036854775807, "
                                    "i = 5e-324, j = 1.5e+03, "
                                    "k = [-inf, nan, 3.0]"));
        di_free(out);
    }
    ir_module_free(m);
}

/* ---- errors ---- */

typedef struct error_case {
    const char *text;
    const char *msg;
} error_case;

#define T4 "!dist.tensor<4xf32, 0>"
#define HEAD "func @f(%a: " T4 ") -> (" T4 ") {\n"

static const error_case error_cases[] = {
    {HEAD "  %b = \"Relu\"(%a {x = 1} : (" T4 ") -> " T4 "\n  return %b : " T4 "\n}\n",
     "2:18: expected ')' after operands, found '{'"},
    {HEAD "  %b = \"Relu\"(%foo) : (" T4 ") -> " T4 "\n  return %b : " T4 "\n}\n",
     "2:15: use of undefined value '%foo'"},
    {HEAD "  %a = \"Relu\"(%a) : (" T4 ") -> " T4 "\n  return %a : " T4 "\n}\n",
     "2:3: redefinition of value '%a'"},
    {HEAD "  %b = \"Frobnicate\"(%a) : (" T4 ") -> " T4 "\n  return %b : " T4 "\n}\n",
     "2:8: unknown operation 'Frobnicate'"},
    {"func @f(%a: !dist.tensor<4xf7, 0>) {\n  return\n}\n", "1:28: unknown element type 'f7'"},
    {"func @f(%a: !dist.tensor<1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1xf32>) {\n  return\n}\n",
     "1:58: tensor rank exceeds 16"},
    {"func @f(%a: !dist.tensor<4611686018427387904xf32>) {\n  return\n}\n",
     "1:26: dimension 4611686018427387904 out of range (the maximum is 4611686018427387903)"},
    {HEAD "  %b = \"Relu(%a) : (" T4 ") -> " T4 "\n", "2:8: unterminated string"},
    {HEAD "  %b = \"Relu\"(%a) : (!dist.tensor<5xf32, 0>) -> " T4 "\n  return %b : " T4 "\n}\n",
     "2:22: '%a' has type !dist.tensor<4xf32, 0>, not !dist.tensor<5xf32, 0>"},
    {HEAD "  %b, %c = \"Relu\"(%a) : (" T4 ") -> " T4 "\n  return %b : " T4 "\n}\n",
     "2:53: 2 result names but 1 result type"},
    {HEAD "  %b = \"Relu\"(%a) {x = 1, x = 2} : (" T4 ") -> " T4 "\n  return %b : " T4 "\n}\n",
     "2:27: duplicate attribute 'x'"},
    {HEAD "  %b = \"Relu\"(%a) {x = 99999999999999999999} : (" T4 ") -> " T4 "\n}\n",
     "2:24: integer 99999999999999999999 out of range"},
    {"func @f(%a: !dist.dtensor<4xf32, @nomesh, [R]>) {\n  return\n}\n",
     "1:34: unknown mesh '@nomesh'"},
    {"dist.mesh @m = <[2, 2]>\nfunc @f(%a: !dist.dtensor<4xf32, @m, [R]>) {\n  return\n}\n",
     "2:38: mesh '@m' has 2 axes but 1 placement was given"},
    {"dist.mesh @m = <[2]>\nfunc @f(%a: !dist.dtensor<4xf32, @m, [S[1]]>) {\n  return\n}\n",
     "2:41: split dimension 1 out of range for a rank-1 tensor"},
    {HEAD "  return %a : " T4 "\n}\nfunc @f() {\n  return\n}\n",
     "4:6: redefinition of function '@f'"},
    {HEAD "  return\n}\n", "2:3: function '@f' returns 0 values but its signature declares 1"},
    {HEAD "  %b = \"dist.pmap\"(%a) ({\n    %c = \"Relu\"(%a) : (" T4 ") -> " T4
          "\n    \"dist.return\"(%c) : (" T4 ") -> ()\n  }) {device_var = \"d\"} : (" T4 ") -> " T4
          "\n  return %b : " T4 "\n}\n",
     "3:17: value '%a' is defined outside this region; a region may only use its arguments and "
     "values defined in it"},
    {HEAD "  %b = \"dist.pmap\"(%a) ({\n  }) {device_var = \"d\"} : (" T4 ") -> " T4 "\n}\n",
     "3:3: a region must end with \"dist.return\""},
    {HEAD "  \"dist.return\"(%a) : (" T4 ") -> ()\n}\n",
     "2:3: 'dist.return' outside a region; a function ends with 'return'"},
    {HEAD "  %b = \"Relu\"(%a) : (" T4 ") -> " T4 "\n}\n",
     "3:1: function '@f' must end with 'return'"},
    {"func @f() {\n  return\n}\ngarbage\n", "4:1: expected 'func' or 'dist.mesh', found 'garbage'"},
    {"dist.mesh @m = <[2], devices = [3, 3]>\n", "1:32: device 3 appears twice in mesh '@m'"},
    {"func @f(%a: tuple<" T4 ", !dist.tensor<4xf32, -1>>) {\n  return\n}\n",
     "1:63: expected a device id or a device variable, found '-1'"},
    {"func @f(%a: !dist.tensor<4xf32, 0>) {\n  %b = \"Relu\"(%a) : (" T4 ") -> " T4
     " loc(7)\n  return\n}\n",
     "2:76: expected a string, found '7'"},
    {"dist.mesh @a = <[1024, 1024]>\ndist.mesh @b = <[1024, 1024]>\n"
     "dist.mesh @c = <[1024, 1024]>\ndist.mesh @d = <[1024, 1024]>\ndist.mesh @e = <[2]>\n",
     "5:17: the meshes hold more than 4194304 devices in all"},
    /* dist.pmap calling a function */
    {HEAD "  %b = \"dist.pmap\"(%a) {callee = @g, device_var = \"d\"} : (" T4 ") -> " T4
          "\n  return %b : " T4 "\n}\n",
     "2:34: unknown function '@g'"},
    {HEAD "  %b = \"dist.pmap\"(%a) ({\n  ^bb0(%x: " T4 "):\n    \"dist.return\"(%x) : (" T4
          ") -> ()\n  }) {callee = @f, device_var = \"d\"} : (" T4 ") -> " T4 "\n  return %b : " T4
          "\n}\n",
     "5:16: a dist.pmap with a region cannot also call a function"},
    {HEAD "  %b = \"dist.pmap\"(%a) {callee = @f, callee = @f} : (" T4 ") -> " T4
          "\n  return %b : " T4 "\n}\n",
     "2:38: duplicate attribute 'callee'"},
    {HEAD "  %b = \"dist.pmap\"(%a) {callee = \"f\"} : (" T4 ") -> " T4 "\n  return %b : " T4
          "\n}\n",
     "2:34: 'callee' names a function: expected '@name'"},
    {"", NULL},
};

static void
test_parse_errors(void **state)
{
    int bad = 0;
    (void)state;
    for (const error_case *c = error_cases; c->msg; c++) {
        ir_module *m = (ir_module *)1;
        di_error err;
        di_error_clear(&err);
        if (ir_parse(c->text, strlen(c->text), &m, &err) == 0) {
            print_error("parsed, but expected: %s\n%s", c->msg, c->text);
            ir_module_free(m);
            bad++;
            continue;
        }
        assert_null(m);
        assert_int_equal(err.code, DI_EPARSE);
        if (strcmp(err.msg, c->msg) != 0) {
            print_error("got      '%s'\nexpected '%s'\nfor:\n%s\n", err.msg, c->msg, c->text);
            bad++;
        }
    }
    assert_int_equal(bad, 0);
}

/* Deep nesting is refused at a fixed depth, never by running out of stack. */
static void
test_nesting_limits(void **state)
{
    di_buf b;
    ir_module *m = NULL;
    di_error err;
    (void)state;
    di_buf_init(&b);
    di_buf_puts(&b, "func @f() {\n");
    for (int i = 0; i < 70; i++)
        di_buf_printf(&b, "\"dist.pmap\"() ({\n");
    ir_parse(b.data, b.len, &m, &err);
    assert_null(m);
    assert_string_equal(err.msg, "66:16: regions nested deeper than 64 levels");

    di_buf_reset(&b);
    di_buf_puts(&b, "func @f(%a: ");
    for (int i = 0; i < 100000; i++)
        di_buf_puts(&b, "tuple<");
    ir_parse(b.data, b.len, &m, &err);
    assert_null(m);
    assert_string_equal(err.msg, "1:403: types nested deeper than 64 levels");
    di_buf_fini(&b);

    /* Input need not be terminated: a truncated buffer is an error, not a read past its end. */
    {
        static const char text[] = "func @f() {\n  return\n}\n";
        for (size_t n = 0; n + 1 < sizeof text; n++) {
            char *copy = malloc(n ? n : 1);
            memcpy(copy, text, n);
            m = NULL;
            if (ir_parse(copy, n, &m, &err) == 0)
                assert_true(n == 0 || n == sizeof text - 2);
            ir_module_free(m);
            free(copy);
        }
    }
}

/* Many attributes in shuffled order come out sorted; a repeated key is found wherever it is. */
static void
test_many_attributes(void **state)
{
    enum { N = 5000 };
    di_buf b;
    ir_module *m;
    ir_id op;
    di_error err;
    uint32_t order[N];
    (void)state;
    for (uint32_t i = 0; i < N; i++)
        order[i] = i;
    srand(7);
    for (uint32_t i = N - 1; i > 0; i--) {
        uint32_t j = (uint32_t)rand() % (i + 1), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    di_buf_init(&b);
    di_buf_puts(&b, "func @f() {\n  \"dist.opaque\"() {op_type = \"X\"");
    for (uint32_t i = 0; i < N; i++)
        di_buf_printf(&b, ", k%05u = %u", order[i], order[i]);
    di_buf_puts(&b, "} : () -> ()\n  return\n}\n");
    m = parse_ok(b.data, b.len);
    op = first_func_op(m, 0);
    assert_int_equal(m->ops[op].nattr, N + 1);
    for (uint32_t i = 0; i < N; i++)
        assert_int_equal(m->attrs[m->ops[op].attrs + i].i, i);
    assert_string_equal(ir_str_get(m, m->attrs[m->ops[op].attrs + N].key), "op_type");
    check_roundtrip(m, 1);
    ir_module_free(m);

    /* The same list with one key repeated: reported at its second appearance. */
    di_buf_reset(&b);
    di_buf_puts(&b, "func @f() {\n  \"dist.opaque\"() {op_type = \"X\"");
    for (uint32_t i = 0; i < N; i++)
        di_buf_printf(&b, ", k%05u = %u", order[i] == 4321 ? 17 : order[i], order[i]);
    di_buf_puts(&b, "} : () -> ()\n  return\n}\n");
    m = NULL;
    assert_int_equal(ir_parse(b.data, b.len, &m, &err), DI_EPARSE);
    assert_non_null(strstr(err.msg, ": duplicate attribute 'k00017'"));
    {
        /* The column is that of the later of the two k00017 keys. */
        const char *first = strstr(b.data, "k00017"), *second = strstr(first + 1, "k00017");
        char want[64];
        snprintf(want, sizeof want, "2:%u:", (unsigned)(second - strchr(b.data, '\n')));
        assert_true(strncmp(err.msg, want, strlen(want)) == 0);
    }
    di_buf_fini(&b);
}

/* ---- modules built in code ---- */

static void
test_built_module(void **state)
{
    ir_module *m = ir_module_new();
    int64_t d44[2] = {4, 4}, d4[1] = {4}, shape[2] = {2, 2}, place[2] = {0, IR_PLACE_PSUM};
    int64_t ints[3] = {1, -2, 3};
    double floats[2] = {0.5, -1e-7};
    float one = 1.0f;
    ir_id mesh = ir_mesh_add(m, "grid", 2, shape, NULL);
    ir_id t = ir_type_tensor(m, IR_F32, 2, d44, 0);
    ir_id tv = ir_type_tensor_var(m, IR_F32, 2, d44, ir_str(m, "dev var"));
    ir_id dt = ir_type_dtensor(m, IR_F16, 1, d4, mesh, place);
    ir_id tt[2], tup, f, a, b, op, body, x, y, types[2];
    const char *names[2] = {"1", NULL};
    (void)state;
    tt[0] = t;
    tt[1] = ir_type_tensor(m, IR_F32, 2, d44, 1);
    tup = ir_type_tuple(m, 2, tt);

    f = ir_func_new(m, "main");
    a = ir_region_add_arg(m, f, t, "a");
    b = ir_region_add_arg(m, f, dt, NULL); /* unnamed: printed as a number */
    op = ir_op_add(m, f, IR_OP_RELU, 1, &a, 1, &t, names); /* named "1" */
    x = ir_op_output(m, op, 0);
    ir_op_set_int(m, op, "i", -5);
    ir_op_set_float(m, op, "f", 2.0);
    ir_op_set_string(m, op, "s", "tab\there");
    ir_op_set_ints(m, op, "is", 3, ints);
    ir_op_set_floats(m, op, "fs", 2, floats);
    ir_op_set_floats(m, op, "empty", 0, NULL);
    ir_op_set_mesh(m, op, "mesh", mesh);
    ir_op_set_tensor(m, op, "value", ir_type_tensor(m, IR_F32, 0, NULL, IR_DEVICE_NONE), &one, 4);
    m->ops[op].name = ir_str(m, "relu_0");

    op = ir_op_add(m, f, IR_OP_OPAQUE, 2, (ir_id[]){x, b}, 1, &tup, (const char *[]){"a"});
    m->ops[op].opaque = ir_str(m, "MyOp");
    ir_op_set_string(m, op, "op_type", "MyOp");
    y = ir_op_output(m, op, 0);

    /* A pmap built in the parser's order: body first, then the op. */
    body = ir_body_new(m);
    {
        ir_id arg = ir_region_add_arg(m, body, tv, "xi");
        ir_id inner = ir_op_add(m, body, IR_OP_RELU, 1, &arg, 1, &tv, NULL);
        ir_region_add_result(m, body, ir_op_output(m, inner, 0));
    }
    types[0] = tup;
    op = ir_op_add(m, f, IR_OP_PMAP, 1, &y, 1, types, NULL);
    m->ops[op].body = body;
    m->regions[body].parent = op;
    ir_op_set_string(m, op, "device_var", "dev var");
    ir_region_add_result(m, f, ir_op_output(m, op, 0));
    ir_region_add_result(m, f, b);

    check_roundtrip(m, 0);
    {
        char *out = ir_print(m, NULL);
        static const char *const expect[] = {
            "dist.mesh @grid = <[2, 2]>\n\nfunc @main(%a: !dist.tensor<4x4xf32, 0>, "
            "%0: !dist.dtensor<4xf16, @grid, [S[0], P(sum)]>) -> (",
            "  %1 = \"Relu\"(%a) {empty = array<f64>, f = 2.0, fs = [0.5, -1e-07], i = -5, is = "
            "[1, -2, 3], mesh = @grid, s = \"tab\\there\", value = dense<\"0x0000803F\"> : "
            "!dist.tensor<f32>} : (!dist.tensor<4x4xf32, 0>) -> !dist.tensor<4x4xf32, 0> "
            "loc(\"relu_0\")\n",
            /* %a is taken by the argument, so the opaque op's result gets a number. */
            "  %2 = \"dist.opaque\"(%1, %0) {op_type = \"MyOp\"} : ",
            "  %3 = \"dist.pmap\"(%2) ({\n  ^bb0(%xi: !dist.tensor<4x4xf32, \"dev var\">):\n"
            "    %4 = \"Relu\"(%xi) : ",
            "    \"dist.return\"(%4) : (!dist.tensor<4x4xf32, \"dev var\">) -> ()\n"
            "  }) {device_var = \"dev var\"} : (tuple<",
            "  return %3, %0 : ",
        };
        for (size_t i = 0; i < sizeof expect / sizeof *expect; i++)
            if (strstr(out, expect[i]) == NULL)
                fail_msg("missing:\n%s\nin:\n%s", expect[i], out);
        di_free(out);
    }
    ir_module_free(m);
}

/*
 * A pmap that calls a function: `callee = @f` among the attributes (in key
 * order), no region, the function referred to before or after its
 * definition; a module built in code prints and reparses to the same calls.
 */
static void
test_callee(void **state)
{
    static const char text[] =
        "func @g(%x: !dist.tensor<4xf32, d>) -> (!dist.tensor<4xf32, d>) {\n"
        "  %y = \"Relu\"(%x) : (!dist.tensor<4xf32, d>) -> !dist.tensor<4xf32, d>\n"
        "  return %y : !dist.tensor<4xf32, d>\n"
        "}\n"
        "\n"
        "func @main(%a: tuple<!dist.tensor<4xf32, 0>, !dist.tensor<4xf32, 1>>) -> "
        "(tuple<!dist.tensor<4xf32, 0>, !dist.tensor<4xf32, 1>>) {\n"
        "  %b = \"dist.pmap\"(%a) {callee = @g, device_var = \"d\", devices = [0, 1]} : "
        "(tuple<!dist.tensor<4xf32, 0>, !dist.tensor<4xf32, 1>>) -> "
        "tuple<!dist.tensor<4xf32, 0>, !dist.tensor<4xf32, 1>>\n"
        "  %c = \"dist.pmap\"(%b) {callee = @g, device_var = \"d\", devices = [0, 1]} : "
        "(tuple<!dist.tensor<4xf32, 0>, !dist.tensor<4xf32, 1>>) -> "
        "tuple<!dist.tensor<4xf32, 0>, !dist.tensor<4xf32, 1>>\n"
        "  return %c : tuple<!dist.tensor<4xf32, 0>, !dist.tensor<4xf32, 1>>\n"
        "}\n";
    ir_module *m = parse_str(text);
    ir_id g = ir_func_find(m, "g"), f = ir_func_find(m, "main"), op;
    size_t len;
    char *out;
    di_error err;
    (void)state;
    assert_int_not_equal(g, 0);
    assert_int_equal(ir_module_entry(m), f);
    for (uint32_t i = 0; i < 2; i++) {
        op = m->regions[f].ops[i];
        assert_int_equal(m->ops[op].kind, IR_OP_PMAP);
        assert_true(m->ops[op].flags & IR_OPFLAG_CALLEE);
        assert_int_equal(ir_op_callee(m, op), g);
        assert_int_equal(m->ops[op].nattr, 2); /* callee is not an attribute */
    }
    assert_int_equal(m->regions[g].parent, 0);
    di_error_clear(&err);
    if (ir_verify(m, &err) != 0)
        fail_msg("%s", err.msg);
    out = ir_print(m, &len);
    assert_int_equal(len, strlen(text));
    assert_memory_equal(out, text, len);
    check_roundtrip(m, 1);
    di_free(out);
    ir_module_free(m);

    /* Built in code with ir_op_set_callee; a body-less pmap prints no region. */
    {
        int64_t d4[1] = {4};
        ir_id tv, t0, t1, tup, a, p;
        m = ir_module_new();
        f = ir_func_new(m, "main");
        g = ir_func_new(m, "layer fn");
        tv = ir_type_tensor_var(m, IR_F32, 1, d4, ir_str(m, "d"));
        t0 = ir_type_tensor(m, IR_F32, 1, d4, 0);
        t1 = ir_type_tensor(m, IR_F32, 1, d4, 1);
        tup = ir_type_tuple(m, 2, (ir_id[]){t0, t1});
        a = ir_region_add_arg(m, g, tv, "x");
        op = ir_op_add(m, g, IR_OP_RELU, 1, &a, 1, &tv, NULL);
        ir_region_add_result(m, g, ir_op_output(m, op, 0));
        a = ir_region_add_arg(m, f, tup, "a");
        p = ir_op_add(m, f, IR_OP_PMAP, 1, &a, 1, &tup, NULL);
        ir_op_set_callee(m, p, g);
        ir_op_set_string(m, p, "device_var", "d");
        ir_op_set_ints(m, p, "devices", 2, (int64_t[]){0, 1});
        ir_op_set_string(m, p, "a", "first"); /* sorts before callee */
        ir_region_add_result(m, f, ir_op_output(m, p, 0));
        out = ir_print(m, NULL);
        if (strstr(out, "(%a) {a = \"first\", callee = @\"layer fn\", device_var = \"d\", "
                        "devices = [0, 1]} : (tuple<") == NULL)
            fail_msg("%s", out);
        di_free(out);
        check_roundtrip(m, 0);
        ir_module_free(m);
    }
}

/* An empty module prints as nothing, and nothing parses to an empty module. */
static void
test_empty(void **state)
{
    ir_module *m = ir_module_new();
    size_t len = 1;
    char *out = ir_print(m, &len);
    (void)state;
    assert_int_equal(len, 0);
    assert_string_equal(out, "");
    di_free(out);
    ir_module_free(m);
    m = parse_ok("", 0);
    assert_int_equal(ir_module_entry(m), 0);
    ir_module_free(m);
}

/* ---- size ---- */

static ir_module *
build_chain(uint32_t n)
{
    ir_module *m = ir_module_new();
    int64_t dims[2] = {128, 64};
    ir_id t = ir_type_tensor(m, IR_F32, 2, dims, 0);
    ir_id f = ir_func_new(m, "chain");
    ir_id v = ir_region_add_arg(m, f, t, "x");
    for (uint32_t i = 0; i < n; i++) {
        ir_id op = ir_op_add(m, f, i % 2 ? IR_OP_RELU : IR_OP_TANH, 1, &v, 1, &t, NULL);
        v = ir_op_output(m, op, 0);
    }
    ir_region_add_result(m, f, v);
    return m;
}

static void
test_large_chain(void **state)
{
    ir_module *m = build_chain(100000), *m2;
    size_t len, len2;
    double t0 = monotonic_seconds(), t1, t2;
    char *text = ir_print(m, &len), *text2;
    (void)state;
    t1 = monotonic_seconds();
    m2 = parse_ok(text, len);
    t2 = monotonic_seconds();
    text2 = ir_print(m2, &len2);
    assert_int_equal(len, len2);
    assert_memory_equal(text, text2, len);
    assert_true(modules_equal(m, m2, 0));
    assert_int_equal(m2->regions[1].nop, 100000);
    assert_int_equal(m2->oplocs[m2->regions[1].ops[99999]].line, 100001);
    print_message("100k ops: print %.3fs, parse %.3fs, %zu bytes\n", t1 - t0, t2 - t1, len);
    di_free(text);
    di_free(text2);
    ir_module_free(m);
    ir_module_free(m2);
}

/* Argument initializers print as `= dense<"0x...">` and read back; a wrong size is an error. */
static void
test_initializers(void **state)
{
    static const char text[] =
        "func @f(%w: !dist.tensor<2xf32, 0> = dense<\"0x0000803F00000040\">, "
        "%x: !dist.tensor<2xf32, 0>) -> (!dist.tensor<2xf32, 0>) {\n"
        "  %y = \"Add\"(%w, %x) : (!dist.tensor<2xf32, 0>, !dist.tensor<2xf32, 0>) -> "
        "!dist.tensor<2xf32, 0>\n"
        "  return %y : !dist.tensor<2xf32, 0>\n"
        "}\n";
    static const char bad[] = "func @f(%w: !dist.tensor<2xf32, 0> = dense<\"0x0000803F\">) {\n"
                              "  return\n"
                              "}\n";
    ir_module *m = NULL;
    di_error err;
    size_t len, n;
    char *out;
    const uint8_t *data;
    float w[2];
    (void)state;
    if (ir_parse(text, sizeof text - 1, &m, &err) != 0)
        fail_msg("parse: %s", err.msg);
    data = ir_value_init(m, m->regions[1].args[0], &n);
    assert_non_null(data);
    assert_int_equal(n, 8);
    memcpy(w, data, sizeof w);
    assert_true(w[0] == 1.0f && w[1] == 2.0f);
    assert_null(ir_value_init(m, m->regions[1].args[1], &n));
    out = ir_print(m, &len);
    assert_int_equal(len, sizeof text - 1);
    assert_memory_equal(out, text, len);
    di_free(out);
    ir_module_free(m);
    assert_int_equal(ir_parse(bad, sizeof bad - 1, &m, &err), DI_EPARSE);
    assert_non_null(strstr(err.msg, "1:38: initializer of 4 bytes for an argument of 8 bytes"));
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden_roundtrip),
        cmocka_unit_test(test_initializers),
        cmocka_unit_test(test_golden_verify),
        cmocka_unit_test(test_importer_form),
        cmocka_unit_test(test_gather_names),
        cmocka_unit_test(test_grammar_forms),
        cmocka_unit_test(test_numbers),
        cmocka_unit_test(test_parse_errors),
        cmocka_unit_test(test_nesting_limits),
        cmocka_unit_test(test_many_attributes),
        cmocka_unit_test(test_built_module),
        cmocka_unit_test(test_callee),
        cmocka_unit_test(test_empty),
        cmocka_unit_test(test_large_chain),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
