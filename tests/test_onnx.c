/*
 * test_onnx.c: the ONNX importer. Models are built in the test with the
 * protobuf-c types of onnx-ml.proto and packed, except the real ONNX Runtime
 * training graph (tests/data/onnx/mnist_gemm_bw_running.onnx), which
 * must import (its ORT-only ops as dist.opaque), verify, and simulate with
 * its ORT losses priced by rule, also under strict pricing, and with the op
 * times in tests/data/ort_mnist_op_times.csv replacing the rules. Also: a depth bomb
 * (GraphProto nested in AttributeProto 5,000 deep) is refused with
 * DI_ETOODEEP before protobuf-c recurses; external-data initializers are
 * reported with the file name; an opset-13 Split whose sizes are a constant
 * initializer input folds into the split attribute; an unknown op becomes a
 * dist.opaque op, or an error naming it when strict; a non-constant shape
 * input is an error naming the node; opset-12 Squeeze (axes attribute) and
 * Shape-of-a-static-tensor folding.
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
#include <unistd.h>

#include "exec/exec.h"
#include "ir/ir.h"
#include "onnx/onnx-ml.pb-c.h"
#include "onnx/onnx.h"
#include "onnx/onnx_ex.h"
#include "sim/hw.h"
#include "sim/sim.h"
#include "support/support.h"

/* ---- building models ---- */

/* A small arena of everything a model points to, freed at once. */
typedef struct arena {
    void *p[512];
    int n;
} arena;

static void *
alloc(arena *a, size_t size)
{
    void *p = di_xcalloc(1, size);
    assert_true(a->n < 512);
    a->p[a->n++] = p;
    return p;
}

static void
arena_free(arena *a)
{
    for (int i = 0; i < a->n; i++)
        di_free(a->p[i]);
    a->n = 0;
}

static char *
str(arena *a, const char *s)
{
    char *p = alloc(a, strlen(s) + 1);
    memcpy(p, s, strlen(s) + 1);
    return p;
}

static Onnx__NodeProto *
node(arena *a, const char *op, const char *name, int nin, const char *const *in, int nout,
     const char *const *out)
{
    Onnx__NodeProto *n = alloc(a, sizeof *n);
    onnx__node_proto__init(n);
    n->op_type = str(a, op);
    n->name = str(a, name);
    n->n_input = (size_t)nin;
    n->input = alloc(a, sizeof(char *) * (size_t)(nin + 1));
    for (int i = 0; i < nin; i++)
        n->input[i] = str(a, in[i]);
    n->n_output = (size_t)nout;
    n->output = alloc(a, sizeof(char *) * (size_t)(nout + 1));
    for (int i = 0; i < nout; i++)
        n->output[i] = str(a, out[i]);
    return n;
}

/* A new attribute of the given type on n, its value for the caller to set. */
static Onnx__AttributeProto *
node_attr(arena *a, Onnx__NodeProto *n, const char *name, Onnx__AttributeProto__AttributeType type)
{
    Onnx__AttributeProto *at = alloc(a, sizeof *at);
    onnx__attribute_proto__init(at);
    at->name = str(a, name);
    at->has_type = 1;
    at->type = type;
    n->attribute = di_xrealloc(n->attribute, sizeof *n->attribute * (n->n_attribute + 1));
    n->attribute[n->n_attribute++] = at;
    return at;
}

static void
node_attr_ints(arena *a, Onnx__NodeProto *n, const char *name, int count, const int64_t *v)
{
    Onnx__AttributeProto *at = node_attr(a, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
    at->n_ints = (size_t)count;
    at->ints = alloc(a, sizeof(int64_t) * (size_t)(count + 1));
    memcpy(at->ints, v, sizeof(int64_t) * (size_t)count);
}

static void
node_attr_int(arena *a, Onnx__NodeProto *n, const char *name, int64_t v)
{
    Onnx__AttributeProto *at = node_attr(a, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
    at->has_i = 1;
    at->i = v;
}

static void
node_attr_string(arena *a, Onnx__NodeProto *n, const char *name, const char *v)
{
    Onnx__AttributeProto *at = node_attr(a, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING);
    at->has_s = 1;
    at->s.len = strlen(v);
    at->s.data = (uint8_t *)str(a, v);
}

static void
node_attr_float(arena *a, Onnx__NodeProto *n, const char *name, float v)
{
    Onnx__AttributeProto *at = node_attr(a, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT);
    at->has_f = 1;
    at->f = v;
}

static Onnx__ValueInfoProto *
vinfo(arena *a, const char *name, int elem, int rank, const int64_t *dims)
{
    Onnx__ValueInfoProto *v = alloc(a, sizeof *v);
    Onnx__TypeProto *t = alloc(a, sizeof *t);
    Onnx__TypeProto__Tensor *tt = alloc(a, sizeof *tt);
    Onnx__TensorShapeProto *sh = alloc(a, sizeof *sh);
    onnx__value_info_proto__init(v);
    onnx__type_proto__init(t);
    onnx__type_proto__tensor__init(tt);
    onnx__tensor_shape_proto__init(sh);
    v->name = str(a, name);
    v->type = t;
    t->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    t->tensor_type = tt;
    tt->has_elem_type = 1;
    tt->elem_type = elem;
    tt->shape = sh;
    sh->n_dim = (size_t)rank;
    sh->dim = alloc(a, sizeof *sh->dim * (size_t)(rank + 1));
    for (int i = 0; i < rank; i++) {
        Onnx__TensorShapeProto__Dimension *d = alloc(a, sizeof *d);
        onnx__tensor_shape_proto__dimension__init(d);
        if (dims[i] >= 0) {
            d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
            d->dim_value = dims[i];
        } else {
            d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
            d->dim_param = str(a, "batch");
        }
        sh->dim[i] = d;
    }
    return v;
}

static Onnx__TensorProto *
int_tensor(arena *a, const char *name, int count, const int64_t *v)
{
    Onnx__TensorProto *t = alloc(a, sizeof *t);
    int64_t dim = count;
    onnx__tensor_proto__init(t);
    t->name = str(a, name);
    t->has_data_type = 1;
    t->data_type = 7;
    t->n_dims = 1;
    t->dims = alloc(a, sizeof(int64_t));
    t->dims[0] = dim;
    t->n_int64_data = (size_t)count;
    t->int64_data = alloc(a, sizeof(int64_t) * (size_t)(count + 1));
    memcpy(t->int64_data, v, sizeof(int64_t) * (size_t)count);
    return t;
}

typedef struct model_spec {
    int opset;
    int nnode;
    Onnx__NodeProto *nodes[8];
    int ninput;
    Onnx__ValueInfoProto *inputs[8];
    int noutput;
    Onnx__ValueInfoProto *outputs[8];
    int ninit;
    Onnx__TensorProto *inits[8];
    int nvi;
    Onnx__ValueInfoProto *vis[8];
} model_spec;

/* Packs the model; the caller frees *data with di_free. */
static void
pack_model(const model_spec *s, uint8_t **data, size_t *len)
{
    Onnx__ModelProto m;
    Onnx__GraphProto g;
    Onnx__OperatorSetIdProto os, *osp = &os;
    onnx__model_proto__init(&m);
    onnx__graph_proto__init(&g);
    onnx__operator_set_id_proto__init(&os);
    os.domain = (char *)"";
    os.has_version = 1;
    os.version = s->opset;
    m.has_ir_version = 1;
    m.ir_version = 8;
    m.n_opset_import = 1;
    m.opset_import = &osp;
    m.graph = &g;
    g.name = (char *)"test";
    g.n_node = (size_t)s->nnode;
    g.node = (Onnx__NodeProto **)s->nodes;
    g.n_input = (size_t)s->ninput;
    g.input = (Onnx__ValueInfoProto **)s->inputs;
    g.n_output = (size_t)s->noutput;
    g.output = (Onnx__ValueInfoProto **)s->outputs;
    g.n_initializer = (size_t)s->ninit;
    g.initializer = (Onnx__TensorProto **)s->inits;
    g.n_value_info = (size_t)s->nvi;
    g.value_info = (Onnx__ValueInfoProto **)s->vis;
    *len = onnx__model_proto__get_packed_size(&m);
    *data = di_xmalloc(*len + 1);
    onnx__model_proto__pack(&m, *data);
    for (int i = 0; i < s->nnode; i++) {
        di_free(s->nodes[i]->attribute);
        s->nodes[i]->attribute = NULL;
        s->nodes[i]->n_attribute = 0;
    }
}


/* ---- the ORT training graph ---- */

/* Kept in the repository (tests/data/onnx/README.md says where it is from). */
#define ORT_GRAPH "tests/data/onnx/mnist_gemm_bw_running.onnx"

static void
test_ort_training_graph(void **state)
{
    const char *path = ORT_GRAPH;
    uint8_t *data;
    size_t len;
    ir_module *m;
    di_error err;
    hw_model *hw;
    sim_result *res;
    int opaque = 0;
    (void)state;
    di_error_clear(&err);
    if (di_read_file(path, 1u << 26, &data, &len, &err) != 0)
        fail_msg("%s (run the tests from the top of the repository)", err.msg);
    if (onnx_import(data, len, 0, &m, &err) != 0)
        fail_msg("import: %s", err.msg);
    if (ir_verify(m, &err) != 0)
        fail_msg("verify: %s", err.msg);
    /* Forward Gemms, their gradient Gemms, ReluGrad, and the bias reductions map. */
    assert_int_equal(count_kind(m, IR_OP_GEMM), 8);
    assert_int_equal(count_kind(m, IR_OP_RELUGRAD), 2);
    assert_int_equal(count_kind(m, IR_OP_REDUCESUM), 3);
    for (uint32_t i = 1; i < m->nop; i++)
        if (m->ops[i].kind == IR_OP_OPAQUE) {
            const char *t = ir_str_get(m, m->ops[i].opaque);
            assert_true(strcmp(t, "SoftmaxCrossEntropy") == 0 ||
                        strcmp(t, "SoftmaxCrossEntropyGrad") == 0);
            opaque++;
        }
    assert_int_equal(opaque, 2);
    /*
     * ORT's losses are priced like their ONNX counterparts, also under
     * strict pricing; the measured times, when given, replace the rules
     * (the two ops then take 8 + 6 us in place of their rule's times).
     */
    {
        sim_options o;
        double ruled;
        sim_options_default(&o);
        o.strict = 1;
        for (uint32_t i = 1; i < m->nop; i++)
            if (m->ops[i].kind == IR_OP_OPAQUE)
                assert_true(ir_op_has_cost_rule(m, i));
        assert_int_equal(hw_preset("a100-dgx", &hw, &err), 0);
        if (sim_run(m, hw, &o, &res, NULL, NULL, &err) != 0)
            fail_msg("simulate: %s", err.msg);
        ruled = res->step_time_s;
        assert_true(ruled > 0);
        sim_result_free(res);
        if (hw_load_op_times(hw, "tests/data/ort_mnist_op_times.csv", &err) != 0)
            fail_msg("op times: %s", err.msg);
        if (sim_run(m, hw, &o, &res, NULL, NULL, &err) != 0)
            fail_msg("simulate: %s", err.msg);
        assert_true(res->step_time_s > 0 && res->step_time_s != ruled);
        sim_result_free(res);
        hw_free(hw);
    }
    ir_module_free(m);
    /* Strict: the first unsupported op is named. */
    assert_int_not_equal(onnx_import(data, len, 1, &m, &err), 0);
    assert_int_equal(err.code, DI_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "SoftmaxCrossEntropy"));
    di_free(data);
}

/* ---- malformed and hostile input ---- */

/* Appends a varint. */
static size_t
put_varint(uint8_t *p, uint64_t v)
{
    size_t n = 0;
    do {
        p[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
    return n;
}

/*
 * ModelProto{graph(7): Graph{node(1): Node{attribute(5): Attribute{g(6): Graph{...}}}}}
 * nested `depth` times, built from the inside out.
 */
static uint8_t *
depth_bomb(int depth, size_t *len)
{
    size_t cap = (size_t)depth * 16 + 64, n = 0;
    uint8_t *buf = di_xmalloc(cap), *tmp = di_xmalloc(cap);
    for (int i = 0; i < depth; i++) {
        /* Attribute{g = buf}; Node{attribute = that}; Graph{node = that}. */
        static const uint8_t tags[3] = {0x32, 0x2a, 0x0a};
        for (int t = 0; t < 3; t++) {
            size_t k = 0;
            tmp[k++] = tags[t];
            k += put_varint(tmp + k, n);
            memcpy(tmp + k, buf, n);
            n += k;
            memcpy(buf, tmp, n);
        }
    }
    {
        size_t k = 0;
        tmp[k++] = 0x08; /* ir_version = 8 */
        tmp[k++] = 8;
        tmp[k++] = 0x3a; /* graph */
        k += put_varint(tmp + k, n);
        memcpy(tmp + k, buf, n);
        n += k;
    }
    di_free(buf);
    *len = n;
    return tmp;
}

static void
test_depth_bomb(void **state)
{
    size_t len;
    uint8_t *bomb = depth_bomb(5000, &len);
    ir_module *m = NULL;
    di_error err;
    (void)state;
    di_error_clear(&err);
    assert_true(len > 40000);
    assert_int_equal(onnx_import(bomb, len, 0, &m, &err), DI_ETOODEEP);
    assert_null(m);
    printf("depth bomb (%zu bytes): %s\n", len, err.msg);
    di_free(bomb);
    /* Garbage and truncations are refused, never crash. */
    assert_int_not_equal(onnx_import((const uint8_t *)"\x08\x08\x3a\xff", 4, 0, &m, &err), 0);
    assert_int_not_equal(onnx_import(NULL, 0, 0, &m, &err), 0);
}

static void
test_external_data(void **state)
{
    arena a = {{0}, 0};
    model_spec s;
    Onnx__TensorProto *w;
    Onnx__StringStringEntryProto *loc;
    int64_t d[1] = {4};
    uint8_t *data;
    size_t len;
    ir_module *m = NULL;
    di_error err;
    (void)state;
    memset(&s, 0, sizeof s);
    s.opset = 13;
    w = alloc(&a, sizeof *w);
    onnx__tensor_proto__init(w);
    w->name = str(&a, "w");
    w->has_data_type = 1;
    w->data_type = 1;
    w->n_dims = 1;
    w->dims = d;
    w->has_data_location = 1;
    w->data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
    loc = alloc(&a, sizeof *loc);
    onnx__string_string_entry_proto__init(loc);
    loc->key = str(&a, "location");
    loc->value = str(&a, "weights.bin");
    w->n_external_data = 1;
    w->external_data = alloc(&a, sizeof *w->external_data);
    w->external_data[0] = loc;
    s.inits[s.ninit++] = w;
    s.nodes[s.nnode++] = node(&a, "Identity", "id", 1, (const char *[]){"w"}, 1,
                              (const char *[]){"y"});
    s.outputs[s.noutput++] = vinfo(&a, "y", 1, 1, d);
    pack_model(&s, &data, &len);
    di_error_clear(&err);
    assert_int_not_equal(onnx_import(data, len, 0, &m, &err), 0);
    assert_non_null(strstr(err.msg, "initializer 'w' uses external data (file 'weights.bin'): "
                                    "not supported"));
    di_free(data);
    arena_free(&a);
}

/* ---- folding and opsets ---- */

static void
test_split_input_folded(void **state)
{
    arena a = {{0}, 0};
    model_spec s;
    int64_t dx[1] = {6}, d2[1] = {2}, d4[1] = {4}, sizes[2] = {2, 4};
    uint8_t *data;
    size_t len;
    ir_module *m;
    di_error err;
    ex_tensor in, *res;
    uint32_t nres, n;
    const int64_t *split = NULL;
    (void)state;
    memset(&s, 0, sizeof s);
    s.opset = 13;
    s.inputs[s.ninput++] = vinfo(&a, "x", 1, 1, dx);
    s.inits[s.ninit++] = int_tensor(&a, "sizes", 2, sizes);
    s.nodes[s.nnode++] = node(&a, "Split", "split", 2, (const char *[]){"x", "sizes"}, 2,
                              (const char *[]){"a", "b"});
    s.outputs[s.noutput++] = vinfo(&a, "a", 1, 1, d2);
    s.outputs[s.noutput++] = vinfo(&a, "b", 1, 1, d4);
    pack_model(&s, &data, &len);
    di_error_clear(&err);
    if (onnx_import(data, len, 1, &m, &err) != 0)
        fail_msg("import: %s", err.msg);
    for (uint32_t i = 1; i < m->nop; i++)
        if (m->ops[i].kind == IR_OP_SPLIT)
            split = ir_op_ints(m, i, "split", &n);
    assert_non_null(split);
    assert_int_equal(n, 2);
    assert_int_equal(split[0], 2);
    assert_int_equal(split[1], 4);
    /* The integer initializer was folded: the function takes only x. */
    assert_int_equal(ex_num_args(m), 1);
    assert_int_equal(ex_tensor_init(&in, IR_F32, 1, dx), 0);
    for (int i = 0; i < 6; i++)
        ex_set(&in, (size_t)i, i);
    if (ex_run(m, &in, 1, &res, &nres, &err) != 0)
        fail_msg("run: %s", err.msg);
    assert_int_equal(nres, 2);
    assert_int_equal(res[1].numel, 4);
    assert_true(ex_get(&res[1], 0) == 2.0);
    for (uint32_t i = 0; i < nres; i++)
        ex_tensor_fini(&res[i]);
    di_free(res);
    ex_tensor_fini(&in);
    ir_module_free(m);
    di_free(data);
    arena_free(&a);
}

/* Reshape to Shape(x) + Squeeze with the opset-12 axes attribute: all folds to attributes. */
static void
test_shape_folding_opset12(void **state)
{
    arena a = {{0}, 0};
    model_spec s;
    int64_t dx[3] = {2, 1, 3}, dy[2] = {2, 3}, axes[1] = {1};
    uint8_t *data;
    size_t len;
    ir_module *m;
    di_error err;
    Onnx__NodeProto *sq;
    (void)state;
    memset(&s, 0, sizeof s);
    s.opset = 12;
    s.inputs[s.ninput++] = vinfo(&a, "x", 1, 3, dx);
    sq = node(&a, "Squeeze", "sq", 1, (const char *[]){"x"}, 1, (const char *[]){"s"});
    node_attr_ints(&a, sq, "axes", 1, axes);
    s.nodes[s.nnode++] = sq;
    s.nodes[s.nnode++] = node(&a, "Shape", "shape", 1, (const char *[]){"s"}, 1,
                              (const char *[]){"shp"});
    s.nodes[s.nnode++] = node(&a, "Reshape", "rs", 2, (const char *[]){"s", "shp"}, 1,
                              (const char *[]){"y"});
    s.outputs[s.noutput++] = vinfo(&a, "y", 1, 2, dy);
    pack_model(&s, &data, &len);
    di_error_clear(&err);
    if (onnx_import(data, len, 1, &m, &err) != 0)
        fail_msg("import: %s", err.msg);
    assert_int_equal(count_kind(m, IR_OP_SQUEEZE), 1);
    assert_int_equal(count_kind(m, IR_OP_RESHAPE), 1);
    assert_int_equal(count_kind(m, IR_OP_CONSTANT), 0);
    if (ir_verify(m, &err) != 0)
        fail_msg("verify: %s", err.msg);
    ir_module_free(m);
    di_free(data);
    arena_free(&a);
}

/*
 * ONNX Runtime's SimplifiedLayerNormalization (default domain and
 * com.microsoft) and its gradient import as RMSNormalization and
 * RMSNormalizationGrad with their epsilon and the saved inverse root mean
 * square, and the module verifies.
 */
static void
test_simplified_layernorm(void **state)
{
    arena a = {{0}, 0};
    model_spec s;
    int64_t dx[2] = {2, 4}, ds[1] = {4}, dr[2] = {2, 1};
    uint8_t *data;
    size_t len;
    ir_module *m;
    di_error err;
    Onnx__NodeProto *n1, *n2, *g;
    (void)state;
    memset(&s, 0, sizeof s);
    s.opset = 17;
    s.inputs[s.ninput++] = vinfo(&a, "x", 1, 2, dx);
    s.inputs[s.ninput++] = vinfo(&a, "scale", 1, 1, ds);
    s.inputs[s.ninput++] = vinfo(&a, "dy", 1, 2, dx);
    n1 = node(&a, "SimplifiedLayerNormalization", "rms", 2, (const char *[]){"x", "scale"}, 2,
              (const char *[]){"y", "istd"});
    node_attr_float(&a, n1, "epsilon", 1e-6f);
    n2 = node(&a, "SimplifiedLayerNormalization", "rms2", 2, (const char *[]){"y", "scale"}, 1,
              (const char *[]){"y2"});
    n2->domain = str(&a, "com.microsoft");
    g = node(&a, "SimplifiedLayerNormalizationGrad", "rms.grad", 4,
             (const char *[]){"dy", "x", "scale", "istd"}, 2, (const char *[]){"dx", "dscale"});
    g->domain = str(&a, "com.microsoft");
    node_attr_float(&a, g, "epsilon", 1e-6f);
    s.nodes[s.nnode++] = n1;
    s.nodes[s.nnode++] = n2;
    s.nodes[s.nnode++] = g;
    s.outputs[s.noutput++] = vinfo(&a, "y2", 1, 2, dx);
    s.outputs[s.noutput++] = vinfo(&a, "istd", 1, 2, dr);
    s.outputs[s.noutput++] = vinfo(&a, "dx", 1, 2, dx);
    s.outputs[s.noutput++] = vinfo(&a, "dscale", 1, 1, ds);
    pack_model(&s, &data, &len);
    di_error_clear(&err);
    if (onnx_import(data, len, 1, &m, &err) != 0)
        fail_msg("import: %s", err.msg);
    assert_int_equal(count_kind(m, IR_OP_RMSNORM), 2);
    assert_int_equal(count_kind(m, IR_OP_RMSNORMGRAD), 1);
    for (uint32_t i = 1; i < m->nop; i++)
        if (m->ops[i].kind == IR_OP_RMSNORMGRAD) {
            assert_int_equal(m->ops[i].ninput, 4);
            assert_true(fabs(ir_op_float(m, i, "epsilon", 0) - 1e-6) < 1e-12);
        }
    if (ir_verify(m, &err) != 0)
        fail_msg("verify: %s", err.msg);
    ir_module_free(m);
    di_free(data);
    arena_free(&a);
}

/* Packs s, imports it (strict) into *m, frees the arena; onnx_import's result. */
static int
import_spec(model_spec *s, arena *a, ir_module **m, di_error *err)
{
    uint8_t *data;
    size_t len;
    int rc;
    pack_model(s, &data, &len);
    di_error_clear(err);
    rc = onnx_import(data, len, 1, m, err);
    di_free(data);
    arena_free(a);
    return rc;
}

/*
 * A normalization of a 16-bit tensor keeps its statistics in ONNX's default
 * stash_type, f32 (the graph declares them so), or in the one the node names;
 * a stash_type that is not a float type is refused with its value.
 */
static int
import_norm_f16(const char *op, int64_t stash, int stat_elem, ir_module **m, di_error *err)
{
    arena a = {{0}, 0};
    model_spec s;
    int64_t dx[2] = {2, 4}, ds[1] = {4}, dr[2] = {2, 1};
    Onnx__NodeProto *n;
    memset(&s, 0, sizeof s);
    s.opset = 17;
    s.inputs[s.ninput++] = vinfo(&a, "x", 10, 2, dx);
    s.inputs[s.ninput++] = vinfo(&a, "scale", 10, 1, ds);
    n = node(&a, op, "norm", 2, (const char *[]){"x", "scale"}, 2, (const char *[]){"y", "st"});
    if (stash != 0)
        node_attr_int(&a, n, "stash_type", stash);
    s.nodes[s.nnode++] = n;
    s.outputs[s.noutput++] = vinfo(&a, "y", 10, 2, dx);
    s.outputs[s.noutput++] = vinfo(&a, "st", stat_elem, 2, dr);
    return import_spec(&s, &a, m, err);
}

static void
test_norm_stash_type(void **state)
{
    const char *ops[2] = {"LayerNormalization", "SimplifiedLayerNormalization"};
    ir_module *m;
    di_error err;
    (void)state;
    for (int i = 0; i < 2; i++) {
        int kind = i == 0 ? IR_OP_LAYERNORM : IR_OP_RMSNORM;
        if (import_norm_f16(ops[i], 0, 1, &m, &err) != 0)
            fail_msg("%s: %s", ops[i], err.msg);
        for (uint32_t j = 1; j < m->nop; j++)
            if (m->ops[j].kind == kind) {
                assert_int_equal(ir_op_int(m, j, "stash_type", 0), 1);
                assert_int_equal(m->types[m->values[ir_op_output(m, j, 1)].type].dtype, IR_F32);
            }
        if (ir_verify(m, &err) != 0)
            fail_msg("verify: %s", err.msg);
        ir_module_free(m);
        if (import_norm_f16(ops[i], 10, 10, &m, &err) != 0)
            fail_msg("%s, stash_type 10: %s", ops[i], err.msg);
        ir_module_free(m);
        assert_int_not_equal(import_norm_f16(ops[i], 7, 7, &m, &err), 0);
        assert_non_null(strstr(err.msg, "stash_type 7"));
    }
}

/*
 * A model of opset `opset`: Cast (saturate 1), Gelu (approximate gelu), Swish
 * (alpha 1.5), RMSNormalization, Split into 3 by num_outputs along 8 (3, 3, 2).
 */
static int
import_recent(int64_t opset, const char *gelu, ir_module **m, di_error *err)
{
    arena a = {{0}, 0};
    model_spec s;
    int64_t dx[2] = {2, 8}, ds[1] = {8}, d3[2] = {2, 3}, d2[2] = {2, 2};
    Onnx__NodeProto *n;
    memset(&s, 0, sizeof s);
    s.opset = opset;
    s.inputs[s.ninput++] = vinfo(&a, "x", 1, 2, dx);
    s.inputs[s.ninput++] = vinfo(&a, "scale", 1, 1, ds);
    n = node(&a, "Cast", "cast", 1, (const char *[]){"x"}, 1, (const char *[]){"xc"});
    node_attr_int(&a, n, "to", 1);
    node_attr_int(&a, n, "saturate", 1);
    s.nodes[s.nnode++] = n;
    n = node(&a, "Gelu", "gelu", 1, (const char *[]){"xc"}, 1, (const char *[]){"g"});
    node_attr_string(&a, n, "approximate", gelu);
    s.nodes[s.nnode++] = n;
    n = node(&a, "Swish", "swish", 1, (const char *[]){"g"}, 1, (const char *[]){"sw"});
    node_attr_float(&a, n, "alpha", 1.5f);
    s.nodes[s.nnode++] = n;
    n = node(&a, "RMSNormalization", "rms", 2, (const char *[]){"sw", "scale"}, 1,
             (const char *[]){"y"});
    node_attr_float(&a, n, "epsilon", 1e-6f);
    s.nodes[s.nnode++] = n;
    n = node(&a, "Split", "split", 1, (const char *[]){"y"}, 3, (const char *[]){"p0", "p1", "p2"});
    node_attr_int(&a, n, "axis", 1);
    node_attr_int(&a, n, "num_outputs", 3);
    s.nodes[s.nnode++] = n;
    s.outputs[s.noutput++] = vinfo(&a, "p0", 1, 2, d3);
    s.outputs[s.noutput++] = vinfo(&a, "p1", 1, 2, d3);
    s.outputs[s.noutput++] = vinfo(&a, "p2", 1, 2, d2);
    return import_spec(&s, &a, m, err);
}

/* Opsets 18 to 24: the ops they added that distir has, and the attributes they changed. */
static void
test_recent_opsets(void **state)
{
    ir_module *m;
    di_error err;
    const int64_t *split;
    uint32_t ns = 0;
    (void)state;
    if (import_recent(24, "tanh", &m, &err) != 0)
        fail_msg("opset 24: %s", err.msg);
    assert_int_equal(count_kind(m, IR_OP_GELU), 1);
    assert_int_equal(count_kind(m, IR_OP_SWISH), 1);
    assert_int_equal(count_kind(m, IR_OP_RMSNORM), 1);
    for (uint32_t i = 1; i < m->nop; i++) {
        switch (m->ops[i].kind) {
        case IR_OP_GELU:
            assert_int_equal(ir_gelu_tanh(m, i), 1);
            break;
        case IR_OP_SWISH:
            assert_true(ir_op_float(m, i, "alpha", 0) == 1.5);
            break;
        case IR_OP_RMSNORM:
            assert_int_equal(m->ops[i].noutput, 1);
            assert_int_equal(ir_op_int(m, i, "stash_type", 0), 1);
            assert_true(fabs(ir_op_float(m, i, "epsilon", 0) - 1e-6) < 1e-12);
            break;
        case IR_OP_SPLIT:
            split = ir_op_ints(m, i, "split", &ns);
            assert_non_null(split);
            assert_int_equal(ns, 3);
            assert_int_equal(split[0], 3);
            assert_int_equal(split[1], 3);
            assert_int_equal(split[2], 2);
            break;
        default:
            break;
        }
    }
    if (ir_verify(m, &err) != 0)
        fail_msg("verify: %s", err.msg);
    ir_module_free(m);
    if (import_recent(20, "none", &m, &err) != 0)
        fail_msg("opset 20: %s", err.msg);
    for (uint32_t i = 1; i < m->nop; i++)
        if (m->ops[i].kind == IR_OP_GELU)
            assert_int_equal(ir_gelu_tanh(m, i), 0);
    ir_module_free(m);
    assert_int_not_equal(import_recent(20, "erf", &m, &err), 0);
    assert_non_null(strstr(err.msg, "approximate must be none or tanh"));
    assert_int_not_equal(import_recent(25, "none", &m, &err), 0);
    assert_non_null(strstr(err.msg, "opset 25; distir imports opsets 9 through 24"));
    /* Before opset 18 Split has no num_outputs. */
    assert_int_not_equal(import_recent(17, "none", &m, &err), 0);
    assert_non_null(strstr(err.msg, "num_outputs"));
}

/*
 * Attention (opset 23) is one FlashAttention (test_onnx_recent.sh checks its
 * numbers); what FlashAttention does not have is refused by name: a mask,
 * softcap, the scores as an output.
 */
static int
import_attention(int mask, double softcap, int scores, ir_module **m, di_error *err)
{
    arena a = {{0}, 0};
    model_spec s;
    int64_t dq[4] = {1, 4, 8, 16}, dk[4] = {1, 2, 8, 16}, dm[2] = {8, 8};
    Onnx__NodeProto *n;
    memset(&s, 0, sizeof s);
    s.opset = 23;
    s.inputs[s.ninput++] = vinfo(&a, "q", 1, 4, dq);
    s.inputs[s.ninput++] = vinfo(&a, "k", 1, 4, dk);
    s.inputs[s.ninput++] = vinfo(&a, "v", 1, 4, dk);
    s.inputs[s.ninput++] = vinfo(&a, "mask", 1, 2, dm);
    n = node(&a, "Attention", "attn", mask ? 4 : 3, (const char *[]){"q", "k", "v", "mask"},
             scores ? 4 : 1, (const char *[]){"y", "", "", "qk"});
    node_attr_int(&a, n, "is_causal", 1);
    if (softcap != 0)
        node_attr_float(&a, n, "softcap", (float)softcap);
    s.nodes[s.nnode++] = n;
    s.outputs[s.noutput++] = vinfo(&a, "y", 1, 4, dq);
    return import_spec(&s, &a, m, err);
}

static void
test_attention(void **state)
{
    ir_module *m;
    di_error err;
    uint32_t fa = 0;
    (void)state;
    if (import_attention(0, 0, 0, &m, &err) != 0)
        fail_msg("attention: %s", err.msg);
    for (uint32_t i = 1; i < m->nop; i++)
        if (m->ops[i].kind == IR_OP_FLASHATTN) {
            fa++;
            assert_int_equal(ir_op_int(m, i, "causal", 0), 1);
        }
    assert_int_equal(fa, 1);
    ir_module_free(m);
    assert_int_not_equal(import_attention(1, 0, 0, &m, &err), 0);
    assert_non_null(strstr(err.msg, "attn_mask"));
    assert_int_not_equal(import_attention(0, 30, 0, &m, &err), 0);
    assert_non_null(strstr(err.msg, "softcap"));
    assert_int_not_equal(import_attention(0, 0, 1, &m, &err), 0);
    assert_non_null(strstr(err.msg, "only Y"));
}

static void
test_unknown_op(void **state)
{
    arena a = {{0}, 0};
    model_spec s;
    int64_t dx[2] = {-1, 4};
    uint8_t *data;
    size_t len;
    ir_module *m;
    di_error err;
    onnx_options opt;
    const char *names[1] = {"batch"};
    int64_t values[1] = {8};
    (void)state;
    memset(&s, 0, sizeof s);
    s.opset = 17;
    s.inputs[s.ninput++] = vinfo(&a, "x", 1, 2, dx);
    s.nodes[s.nnode++] = node(&a, "Frobnicate", "frob", 1, (const char *[]){"x"}, 1,
                              (const char *[]){"f"});
    s.nodes[s.nnode++] = node(&a, "Relu", "relu", 1, (const char *[]){"f"}, 1,
                              (const char *[]){"y"});
    s.vis[s.nvi++] = vinfo(&a, "f", 1, 2, dx);
    s.outputs[s.noutput++] = vinfo(&a, "y", 1, 2, dx);
    pack_model(&s, &data, &len);
    di_error_clear(&err);
    /* Not strict: an opaque op with the declared shape ("batch" sized by the options). */
    onnx_options_default(&opt);
    opt.ndim = 1;
    opt.dim_names = names;
    opt.dim_values = values;
    if (onnx_import_opts(data, len, &opt, &m, &err) != 0)
        fail_msg("import: %s", err.msg);
    assert_int_equal(count_kind(m, IR_OP_OPAQUE), 1);
    for (uint32_t i = 1; i < m->nop; i++)
        if (m->ops[i].kind == IR_OP_OPAQUE) {
            ir_id ty = m->values[ir_op_output(m, i, 0)].type;
            assert_string_equal(ir_op_name(m, i), "Frobnicate");
            assert_string_equal(ir_op_string(m, i, "op_type", ""), "Frobnicate");
            assert_int_equal(ir_type_dims(m, ty)[0], 8);
        }
    if (ir_verify(m, &err) != 0)
        fail_msg("verify: %s", err.msg);
    ir_module_free(m);
    /* Strict: an error naming the node and the op. */
    assert_int_equal(onnx_import(data, len, 1, &m, &err), DI_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "'frob'"));
    assert_non_null(strstr(err.msg, "Frobnicate"));
    di_free(data);
    arena_free(&a);
}

static void
test_dynamic_shape_error(void **state)
{
    arena a = {{0}, 0};
    model_spec s;
    int64_t dx[2] = {2, 3}, ds[1] = {1}, dy[1] = {6};
    uint8_t *data;
    size_t len;
    ir_module *m;
    di_error err;
    (void)state;
    memset(&s, 0, sizeof s);
    s.opset = 14;
    s.inputs[s.ninput++] = vinfo(&a, "x", 1, 2, dx);
    s.inputs[s.ninput++] = vinfo(&a, "shape", 7, 1, ds);
    s.nodes[s.nnode++] = node(&a, "Reshape", "flatten", 2, (const char *[]){"x", "shape"}, 1,
                              (const char *[]){"y"});
    s.outputs[s.noutput++] = vinfo(&a, "y", 1, 1, dy);
    pack_model(&s, &data, &len);
    di_error_clear(&err);
    assert_int_not_equal(onnx_import(data, len, 1, &m, &err), 0);
    assert_non_null(strstr(err.msg, "'flatten'"));
    assert_non_null(strstr(err.msg, "not a constant"));
    di_free(data);
    arena_free(&a);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ort_training_graph),
        cmocka_unit_test(test_depth_bomb),
        cmocka_unit_test(test_external_data),
        cmocka_unit_test(test_split_input_folded),
        cmocka_unit_test(test_shape_folding_opset12),
        cmocka_unit_test(test_simplified_layernorm),
        cmocka_unit_test(test_norm_stash_type),
        cmocka_unit_test(test_recent_opsets),
        cmocka_unit_test(test_attention),
        cmocka_unit_test(test_unknown_op),
        cmocka_unit_test(test_dynamic_shape_error),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
