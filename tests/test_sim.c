/*
 * test_sim.c: the simulator against numbers derived by hand. Every test
 * builds its module with the module API and a hardware model with round
 * figures, so the expected times in the comments are easy to check.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ir/ir.h"
#include "models/models.h"
#include "sim/compare.h"
#include "sim/hw.h"
#include "sim/sim.h"
#include "xform/cost.h"
#include "xform/xform.h"
#include "distir.pb-c.h"
#include "support/support.h"

/*
 * Hardware for the tests: `nodes` nodes of `per_node` devices; 1 TFLOP/s for
 * every float dtype, 100 GB/s memory, 10 us launch, perfect efficiency;
 * intra-node links 100 GB/s with 1 us latency, inter-node 10 GB/s with 5 us.
 * No per-step collective latency, ring algorithm.
 */
static hw_model *
test_hw(uint32_t nodes, uint32_t per_node)
{
    hw_model *hw = di_xcalloc(1, sizeof *hw);
    snprintf(hw->name, sizeof hw->name, "test");
    hw->num_nodes = nodes;
    hw->devices_per_node = per_node;
    hw->ndevice = nodes * per_node;
    snprintf(hw->device.kind, sizeof hw->device.kind, "testgpu");
    for (int t = 1; t < IR_NDTYPE; t++)
        hw->device.flops[t] = 1e12;
    hw->device.memory_bytes = 1e9;
    hw->device.memory_bandwidth = 1e11;
    hw->device.launch_overhead = 1e-5;
    hw->device.max_efficiency = 1.0;
    hw->device.half_flops = 0;
    hw->device.elementwise_efficiency = 1.0;
    hw->intra_node.bandwidth = 1e11;
    hw->intra_node.latency = 1e-6;
    hw->inter_node.bandwidth = 1e10;
    hw->inter_node.latency = 5e-6;
    hw->algorithm = HW_ALGO_RING;
    hw->collective_step_latency = 0;
    return hw;
}

static ir_id
op1(ir_module *m, ir_id f, int kind, uint32_t nin, const ir_id *in, ir_id type, const char *name)
{
    const char *names[1] = {name};
    ir_id op = ir_op_add(m, f, kind, nin, in, 1, &type, names);
    return ir_op_output(m, op, 0);
}

static sim_result *
run(const ir_module *m, const hw_model *hw, int no_overlap)
{
    sim_options o;
    sim_result *r = NULL;
    di_error err;
    int rc;
    sim_options_default(&o);
    o.no_overlap = no_overlap;
    rc = sim_run(m, hw, &o, &r, NULL, NULL, &err);
    if (rc != 0)
        fail_msg("sim_run failed: %s", err.msg);
    return r;
}

static const sim_device_result *
dev_result(const sim_result *r, int32_t id)
{
    for (uint32_t i = 0; i < r->ndevice; i++)
        if (r->devices[i].id == id)
            return &r->devices[i];
    fail_msg("device %d not in result", id);
    return NULL;
}

#define assert_close(a, b) assert_true(fabs((double)(a) - (double)(b)) <= 1e-12 + 1e-9 * fabs((double)(b)))

/* One MatMul [64,128] x [128,256] on device 0. */
static void
test_roofline(void **state)
{
    (void)state;
    hw_model *hw = test_hw(1, 2);
    ir_module *m = ir_module_new();
    ir_id f = ir_func_new(m, "main");
    ir_id a = ir_region_add_arg(m, f, t2(m, 64, 128, 0), "a");
    ir_id b = ir_region_add_arg(m, f, t2(m, 128, 256, 0), "b");
    ir_id in[2] = {a, b};
    ir_id y = op1(m, f, IR_OP_MATMUL, 2, in, t2(m, 64, 256, 0), "y");
    sim_result *r;
    ir_region_add_result(m, f, y);
    r = run(m, hw, 0);
    /*
     * flops = 2 * 64 * 128 * 256 = 4,194,304 -> 4.194304 us at 1 TFLOP/s;
     * bytes = (64*128 + 128*256 + 64*256) * 4 = 229,376 -> 2.29376 us at
     * 100 GB/s; compute-bound, plus 10 us launch = 14.194304 us.
     */
    assert_close(r->step_time_s, 4.194304e-6 + 1e-5);
    assert_close(r->flops, 4194304.0);
    assert_close(dev_result(r, 0)->compute_s, 4.194304e-6 + 1e-5);
    assert_close(dev_result(r, 0)->exposed_comm_s, 0);
    sim_result_free(r);
    ir_module_free(m);
    hw_free(hw);
}

/* A memory-bound op: Relu over 1M floats = 8 MB moved -> 80 us + 10 us launch. */
static void
test_roofline_memory_bound(void **state)
{
    (void)state;
    hw_model *hw = test_hw(1, 1);
    ir_module *m = ir_module_new();
    ir_id f = ir_func_new(m, "main");
    ir_id x = ir_region_add_arg(m, f, t2(m, 1024, 1024, 0), "x");
    ir_id y = op1(m, f, IR_OP_RELU, 1, &x, t2(m, 1024, 1024, 0), "y");
    sim_result *r;
    ir_region_add_result(m, f, y);
    r = run(m, hw, 0);
    assert_close(r->step_time_s, 8388608.0 / 1e11 + 1e-5);
    sim_result_free(r);
    ir_module_free(m);
    hw_free(hw);
}

/* A send of 1 MB: alpha + bytes / bandwidth on the link between the ends. */
static void
test_send_links(void **state)
{
    (void)state;
    hw_model *hw = test_hw(2, 2);
    for (int inter = 0; inter < 2; inter++) {
        ir_module *m = ir_module_new();
        ir_id f = ir_func_new(m, "main");
        int32_t dst = inter ? 2 : 1; /* device 2 is on node 1 */
        ir_id x = ir_region_add_arg(m, f, t2(m, 512, 512, 0), "x");
        ir_id y = op1(m, f, IR_OP_SEND, 1, &x, t2(m, 512, 512, dst), "y");
        ir_op_set_int(m, m->values[y].def, "device", dst);
        ir_region_add_result(m, f, y);
        sim_result *r = run(m, hw, 0);
        /* 512*512*4 = 1,048,576 B: intra 1 us + 10.48576 us; inter 5 us + 104.8576 us. */
        double expect = inter ? 5e-6 + 1048576.0 / 1e10 : 1e-6 + 1048576.0 / 1e11;
        assert_close(r->step_time_s, expect);
        assert_close(dev_result(r, 0)->comm_s, expect);
        assert_close(dev_result(r, dst)->comm_s, expect);
        /* The receiver holds the 1 MiB buffer at the end (it is returned). */
        assert_int_equal(dev_result(r, dst)->peak_memory_bytes, 1048576);
        sim_result_free(r);
        ir_module_free(m);
    }
    hw_free(hw);
}

/* Ring all-reduce of S bytes on n devices: 2(n-1)/n S/bw + 2(n-1) alpha. */
static void
test_ring_allreduce(void **state)
{
    (void)state;
    hw_model *hw = test_hw(2, 4);
    /* Intra-node: devices 0..3 of node 0; inter-node: devices 0 and 4..6 (spans nodes). */
    const int32_t groups[2][4] = {{0, 1, 2, 3}, {0, 4, 5, 6}};
    for (int g = 0; g < 2; g++) {
        ir_module *m = ir_module_new();
        ir_id f = ir_func_new(m, "main");
        ir_id elems[4], tup, x, y;
        for (int i = 0; i < 4; i++)
            elems[i] = t2(m, 256, 1024, groups[g][i]);
        tup = ir_type_tuple(m, 4, elems);
        x = ir_region_add_arg(m, f, tup, "xs");
        y = op1(m, f, IR_OP_ALLREDUCE, 1, &x, tup, "ys");
        ir_region_add_result(m, f, y);
        sim_result *r = run(m, hw, 0);
        /*
         * S = 256*1024*4 = 1 MiB, n = 4: 2*3/4 * S / bw + 6 * alpha.
         * Intra: bw 1e11, alpha 1 us. Spanning nodes with the ring
         * algorithm: the slowest link, bw 1e10, alpha 5 us.
         */
        double S = 1048576.0, bw = g ? 1e10 : 1e11, alpha = g ? 5e-6 : 1e-6;
        double expect = 2.0 * 3 / 4 * S / bw + 6 * alpha;
        assert_close(r->step_time_s, expect);
        for (int i = 0; i < 4; i++)
            assert_close(dev_result(r, groups[g][i])->comm_s, expect);
        sim_result_free(r);
        ir_module_free(m);
    }
    hw_free(hw);
}

/* A compute op and an independent send on one device overlap; with no_overlap they add. */
static void
test_overlap(void **state)
{
    (void)state;
    hw_model *hw = test_hw(1, 2);
    ir_module *m = ir_module_new();
    ir_id f = ir_func_new(m, "main");
    ir_id a = ir_region_add_arg(m, f, t2(m, 1024, 1024, 0), "a");
    ir_id x = ir_region_add_arg(m, f, t2(m, 512, 512, 0), "x");
    ir_id y = op1(m, f, IR_OP_RELU, 1, &a, t2(m, 1024, 1024, 0), "y");
    ir_id z = op1(m, f, IR_OP_SEND, 1, &x, t2(m, 512, 512, 1), "z");
    ir_op_set_int(m, m->values[z].def, "device", 1);
    ir_region_add_result(m, f, y);
    ir_region_add_result(m, f, z);
    /* Relu: 8,388,608 B / 1e11 + 10 us = 93.88608 us; send: 1 us + 10.48576 us. */
    double relu = 8388608.0 / 1e11 + 1e-5, send = 1e-6 + 1048576.0 / 1e11;
    sim_result *r = run(m, hw, 0);
    assert_close(r->step_time_s, relu);
    assert_close(dev_result(r, 0)->exposed_comm_s, 0);
    sim_result_free(r);
    r = run(m, hw, 1);
    assert_close(r->step_time_s, relu + send);
    assert_close(dev_result(r, 0)->exposed_comm_s, send);
    sim_result_free(r);
    ir_module_free(m);
    hw_free(hw);
}

/* Two sends from one device share its link: the second waits for the first. */
static void
test_link_contention(void **state)
{
    (void)state;
    hw_model *hw = test_hw(1, 3);
    ir_module *m = ir_module_new();
    ir_id f = ir_func_new(m, "main");
    ir_id x = ir_region_add_arg(m, f, t2(m, 512, 512, 0), "x");
    ir_id y1 = op1(m, f, IR_OP_SEND, 1, &x, t2(m, 512, 512, 1), "y1");
    ir_id y2 = op1(m, f, IR_OP_SEND, 1, &x, t2(m, 512, 512, 2), "y2");
    ir_op_set_int(m, m->values[y1].def, "device", 1);
    ir_op_set_int(m, m->values[y2].def, "device", 2);
    ir_region_add_result(m, f, y1);
    ir_region_add_result(m, f, y2);
    sim_result *r = run(m, hw, 0);
    double one = 1e-6 + 1048576.0 / 1e11;
    assert_close(r->step_time_s, 2 * one);
    assert_close(dev_result(r, 0)->comm_s, 2 * one);
    sim_result_free(r);
    ir_module_free(m);
    hw_free(hw);
}

/*
 * Links are full duplex: device 0 sends x to device 1 while device 1 sends z
 * to device 0, both ready at 0; each crosses the link one way (its sender's
 * sending side, its receiver's receiving side), so neither slows the other
 * and the step is one send's time (1 MiB: 1 us + S / 1e11). Before they
 * shared the link: the second moved at half its rate while the first ran,
 * 1.5 sends.
 */
static void
test_link_duplex(void **state)
{
    (void)state;
    hw_model *hw = test_hw(1, 2);
    ir_module *m = ir_module_new();
    ir_id f = ir_func_new(m, "main");
    ir_id x = ir_region_add_arg(m, f, t2(m, 512, 512, 0), "x");
    ir_id z = ir_region_add_arg(m, f, t2(m, 512, 512, 1), "z");
    ir_id y1 = op1(m, f, IR_OP_SEND, 1, &x, t2(m, 512, 512, 1), "y1");
    ir_id y2 = op1(m, f, IR_OP_SEND, 1, &z, t2(m, 512, 512, 0), "y2");
    ir_op_set_int(m, m->values[y1].def, "device", 1);
    ir_op_set_int(m, m->values[y2].def, "device", 0);
    ir_region_add_result(m, f, y1);
    ir_region_add_result(m, f, y2);
    sim_result *r = run(m, hw, 0);
    double one = 1e-6 + 1048576.0 / 1e11;
    assert_close(r->step_time_s, one);
    assert_close(dev_result(r, 0)->comm_s, one);
    assert_close(dev_result(r, 1)->comm_s, one);
    sim_result_free(r);
    ir_module_free(m);
    hw_free(hw);
}

/*
 * Collectives and point-to-point transfers run on separate streams but
 * share the links they cross. On 2 nodes x 2 devices (0, 1 on node 0; 2, 3
 * on node 1), with S = 1 MiB:
 *   send 0 -> 2 (inter-node): 5 us + S / 1e10 = 109.8576 us;
 *   all-reduce {0, 2} (inter): 2*1/2 * S / 1e10 + 2 * 5 us = 114.8576 us;
 *   all-reduce {0, 1} (intra): S / 1e11 + 2 * 1 us = 12.48576 us.
 * The send and the inter-node all-reduce both cross device 0's inter-node
 * link, which they share: the send, placed first, takes its full rate; the
 * all-reduce moves at half its rate until the send ends, then at its own:
 * it ends at send + (ar_inter - send / 2). The send and the intra-node all-reduce cross different
 * links: they overlap. And a receive that waits for a long computation
 * does not hold up an all-reduce issued after it, which takes the link
 * while it is idle: device 1 computes a Relu on [1024,1024] (8 MiB / 1e11 +
 * 10 us = 93.88608 us) and sends its result to device 0 (1 us + 4 MiB /
 * 1e11 = 42.94304 us); the all-reduce {0, 1} of x is ready at 0, runs
 * first, and step = relu + send.
 */
static void
test_link_levels(void **state)
{
    (void)state;
    hw_model *hw = test_hw(2, 2);
    const double S = 1048576.0;
    const double send = 5e-6 + S / 1e10, ar_inter = S / 1e10 + 2 * 5e-6,
                 ar_intra = S / 1e11 + 2 * 1e-6;
    for (int which = 0; which < 3; which++) {
        ir_module *m = ir_module_new();
        ir_id f = ir_func_new(m, "main");
        ir_id x = ir_region_add_arg(m, f, t2(m, 512, 512, 0), "x");
        int32_t peer = which == 0 ? 2 : 1;
        ir_id el[2] = {t2(m, 512, 512, 0), t2(m, 512, 512, peer)}, tup = ir_type_tuple(m, 2, el);
        ir_id xs = ir_region_add_arg(m, f, tup, "xs"), ys, y;
        sim_result *r;
        if (which < 2) {
            y = op1(m, f, IR_OP_SEND, 1, &x, t2(m, 512, 512, 2), "y");
            ir_op_set_int(m, m->values[y].def, "device", 2);
            ys = op1(m, f, IR_OP_ALLREDUCE, 1, &xs, tup, "ys");
        } else {
            ir_id a = ir_region_add_arg(m, f, t2(m, 1024, 1024, 1), "a");
            ir_id b = op1(m, f, IR_OP_RELU, 1, &a, t2(m, 1024, 1024, 1), "b");
            y = op1(m, f, IR_OP_SEND, 1, &b, t2(m, 1024, 1024, 0), "y");
            ir_op_set_int(m, m->values[y].def, "device", 0);
            ys = op1(m, f, IR_OP_ALLREDUCE, 1, &xs, tup, "ys");
        }
        ir_region_add_result(m, f, y);
        ir_region_add_result(m, f, ys);
        r = run(m, hw, 0);
        if (which == 0) {
            assert_close(r->step_time_s, ar_inter + send / 2);
            assert_close(dev_result(r, 0)->comm_s, ar_inter + send / 2);
        } else if (which == 1) {
            assert_close(r->step_time_s, send > ar_intra ? send : ar_intra);
            assert_close(dev_result(r, 0)->comm_s, send);
        } else {
            double relu = 8388608.0 / 1e11 + 1e-5, big = 1e-6 + 4194304.0 / 1e11;
            assert_close(r->step_time_s, relu + big);
            assert_close(dev_result(r, 0)->comm_s, ar_intra + big);
        }
        sim_result_free(r);
        ir_module_free(m);
    }
    hw_free(hw);
}

/*
 * Each communicator has its own collective stream: on 2 nodes x 2 devices,
 * an all-reduce over {0, 2} (inter-node, ar_inter as above) and then one
 * over {0, 1} (intra-node, ar_intra), both ready at 0, run side by side on
 * device 0 (NCCL runs the two communicators on two streams, and a group
 * that spans nodes crosses only the inter-node links): the step is
 * ar_inter, not ar_inter + ar_intra, and device 0 communicates for
 * ar_inter. Two all-reduces over the same group {0, 2} still run one after
 * the other. With --no-overlap (one clock per device) all of them add.
 */
static void
test_communicators(void **state)
{
    (void)state;
    hw_model *hw = test_hw(2, 2);
    const double S = 1048576.0;
    const double ar_inter = S / 1e10 + 2 * 5e-6, ar_intra = S / 1e11 + 2 * 1e-6;
    for (int which = 0; which < 3; which++) {
        ir_module *m = ir_module_new();
        ir_id f = ir_func_new(m, "main");
        int32_t second = which == 1 ? 2 : 1;
        ir_id e1[2] = {t2(m, 512, 512, 0), t2(m, 512, 512, 2)}, tup1 = ir_type_tuple(m, 2, e1);
        ir_id e2[2] = {t2(m, 512, 512, 0), t2(m, 512, 512, second)},
              tup2 = ir_type_tuple(m, 2, e2);
        ir_id xa = ir_region_add_arg(m, f, tup1, "xa"), xb = ir_region_add_arg(m, f, tup2, "xb");
        ir_id ya = op1(m, f, IR_OP_ALLREDUCE, 1, &xa, tup1, "ya");
        ir_id yb = op1(m, f, IR_OP_ALLREDUCE, 1, &xb, tup2, "yb");
        sim_result *r;
        ir_region_add_result(m, f, ya);
        ir_region_add_result(m, f, yb);
        r = run(m, hw, which == 2);
        if (which == 0) {
            assert_close(r->step_time_s, ar_inter);
            assert_close(dev_result(r, 0)->comm_s, ar_inter);
            assert_close(dev_result(r, 1)->comm_s, ar_intra);
        } else if (which == 1) {
            assert_close(r->step_time_s, 2 * ar_inter);
        } else {
            assert_close(r->step_time_s, ar_inter + ar_intra);
        }
        sim_result_free(r);
        ir_module_free(m);
    }
    hw_free(hw);
}

/*
 * The step of one collective of `kind` ("all_gather", "reduce_scatter" or
 * "all_reduce"; along dimension 0) whose input elements are [rows, 1024] f32
 * held by devs[0..n) (a tuple in that order), on two nodes of per_node
 * devices (test_hw), priced hierarchically (by the nodes and the members per
 * node).
 */
static double
collective_step(const char *kind, const int *devs, uint32_t n, uint32_t per_node, int64_t rows,
                int64_t out_rows)
{
    char in[512], out[512], text[2048];
    size_t wi = 0, wo = 0;
    ir_module *m = NULL;
    sim_result *r = NULL;
    hw_model *hw = test_hw(2, per_node);
    di_error err;
    double t;
    hw->algorithm = HW_ALGO_HIERARCHICAL;
    wi += (size_t)snprintf(in + wi, sizeof in - wi, "tuple<");
    wo += (size_t)snprintf(out + wo, sizeof out - wo, "tuple<");
    for (uint32_t i = 0; i < n; i++) {
        wi += (size_t)snprintf(in + wi, sizeof in - wi, "%s!dist.tensor<%lldx1024xf32, %d>",
                               i ? ", " : "", (long long)rows, devs[i]);
        wo += (size_t)snprintf(out + wo, sizeof out - wo, "%s!dist.tensor<%lldx1024xf32, %d>",
                               i ? ", " : "", (long long)out_rows, devs[i]);
    }
    snprintf(in + wi, sizeof in - wi, ">");
    snprintf(out + wo, sizeof out - wo, ">");
    snprintf(text, sizeof text,
             "func @main(%%x: %s) -> (%s) {\n"
             "  %%y = \"dist.%s\"(%%x) %s : (%s) -> %s\n"
             "  return %%y : %s\n"
             "}\n",
             in, out, kind, strcmp(kind, "all_reduce") ? "{dim = 0}" : "", in, out, out);
    if (ir_parse(text, strlen(text), &m, &err) != 0)
        fail_msg("ir_parse: %s\n%s", err.msg, text);
    r = run(m, hw, 0);
    t = r->step_time_s;
    sim_result_free(r);
    ir_module_free(m);
    hw_free(hw);
    return t;
}

/* The step of one all-reduce of a 1024x1024 f32 tensor held by devs[0..n) on two nodes of 8. */
static double
all_reduce_step(const int *devs, uint32_t n)
{
    return collective_step("all_reduce", devs, n, 8, 1024, 1024);
}

/*
 * A collective's group is priced by its nodes and its most members on one
 * node, whatever order the group lists its devices in: the same step for
 * every order of {0, 1, 8, 9} (two nodes, two on each) and of {0, 1, 8};
 * one node's four devices are faster (intra-node links only), and three on
 * one node and one on the other differ from two and two.
 */
static void
test_group_order(void **state)
{
    static const int asc[] = {0, 1, 8, 9}, perm1[] = {9, 0, 8, 1}, perm2[] = {8, 9, 1, 0};
    static const int three[] = {0, 1, 8}, three_perm[] = {8, 0, 1}, intra[] = {0, 1, 2, 3};
    static const int lopsided[] = {0, 1, 2, 8}; /* three members on one node */
    double t = all_reduce_step(asc, 4);
    (void)state;
    assert_true(t > 0);
    assert_true(all_reduce_step(perm1, 4) == t);
    assert_true(all_reduce_step(perm2, 4) == t);
    assert_true(all_reduce_step(three_perm, 3) == all_reduce_step(three, 3));
    assert_true(all_reduce_step(intra, 4) < t);
    assert_true(all_reduce_step(lopsided, 4) != t);
}

/*
 * Hierarchical all-gather and reduce-scatter over two nodes of four devices
 * (N = 2, gp = 4), S = 4 MiB (the gathered [1024, 1024] f32): the devices of
 * one local rank exchange their shards over their own inter-node links,
 * (N - 1) / N of S / gp each (each node's four links share the node's
 * traffic), in N - 1 steps; then each node gathers inside it, (gp - 1) / gp
 * of S over the intra-node links in gp - 1 steps. A reduce-scatter costs the
 * same, and the two together cost the hierarchical all-reduce. Until
 * 2026-12-07 each device carried (N - 1) / N of the whole S over its own
 * inter-node link: gp times the all-reduce's share, so that sequence
 * parallelism across nodes, whose all-gathers and reduce-scatters replace
 * all-reduces, came out slower (gpt3-175b, dp 2, tp 16, pp 32: 69.4 s
 * against 46.9 s without it; now 39.5 s).
 */
static void
test_hierarchical_gather(void **state)
{
    const double S = 1024.0 * 1024 * 4;
    const double want = 0.5 * S / 4 / 1e10 + 5e-6 + 0.75 * S / 1e11 + 3 * 1e-6;
    static const int devs[] = {0, 1, 2, 3, 4, 5, 6, 7};
    double ag = collective_step("all_gather", devs, 8, 4, 128, 1024);
    double rs = collective_step("reduce_scatter", devs, 8, 4, 1024, 128);
    double ar = collective_step("all_reduce", devs, 8, 4, 1024, 1024);
    (void)state;
    assert_close(ag, want);
    assert_close(rs, want);
    assert_close(ar, ag + rs);
}

/* main(x) = relu^n(x) on 256x256 f32 (256 KiB a value), the last result returned. */
static ir_module *
relu_chain(uint32_t n)
{
    static const char *const names[] = {"a", "b", "c", "d"};
    ir_module *m = ir_module_new();
    ir_id f = ir_func_new(m, "main");
    ir_id t = t2(m, 256, 256, 0);
    ir_id v = ir_region_add_arg(m, f, t, "x");
    for (uint32_t i = 0; i < n && i < 4; i++)
        v = op1(m, f, IR_OP_RELU, 1, &v, t, names[i]);
    ir_region_add_result(m, f, v);
    return m;
}

/*
 * Peak memory of a chain x -> a -> b -> c (Relu each) on [256,256] f32
 * (256 KiB each): x is resident; a lives until b ends, b until c ends, c is
 * returned. While b runs: x + a + b = 768 KiB; while c runs: x + b + c =
 * 768 KiB (a is freed when b ends, before c starts). Peak = 786,432 B; at the
 * end x and c remain: 524,288 B.
 */
static void
test_memory_chain(void **state)
{
    (void)state;
    hw_model *hw = test_hw(1, 1);
    ir_module *m = relu_chain(3);
    sim_result *r = run(m, hw, 0);
    const sim_device_result *d = dev_result(r, 0);
    assert_int_equal(d->peak_memory_bytes, 786432);
    assert_int_equal(d->peak_by_class[SIM_MEM_ACTIVATIONS], 786432);
    assert_true(d->ntimeline > 0);
    assert_int_equal(d->timeline[d->ntimeline - 1].bytes, 524288);
    assert_false(d->oom);
    sim_result_free(r);
    ir_module_free(m);
    hw_free(hw);
}

/* Out of memory is flagged with the excess; the simulation still completes. */
static void
test_oom(void **state)
{
    (void)state;
    hw_model *hw = test_hw(1, 1);
    hw->device.memory_bytes = 600000;
    ir_module *m = relu_chain(2);
    sim_result *r = run(m, hw, 0);
    const sim_device_result *d = dev_result(r, 0);
    /* Peak: x + a + b = 786,432 B > 600,000 B capacity by 186,432 B. */
    assert_int_equal(d->peak_memory_bytes, 786432);
    assert_true(d->oom);
    assert_int_equal(d->oom_by_bytes, 186432);
    assert_true(r->step_time_s > 0);
    sim_result_free(r);
    ir_module_free(m);
    hw_free(hw);
}

/*
 * Host overhead: the host issues kernels host_overhead apart, and a kernel
 * starts once issued and once the device is free. Four Relus of 256 KiB each
 * take t = 524,288 B / 100 GB/s + 10 us launch = 15.24288 us on the device.
 */
static void
test_host_overhead(void **state)
{
    static const double hs[2] = {40e-6, 1e-6};
    const double t = 524288.0 / 1e11 + 1e-5;
    (void)state;
    for (int i = 0; i < 2; i++) {
        hw_model *hw = test_hw(1, 1);
        ir_module *m = ir_module_new();
        ir_id f = ir_func_new(m, "main");
        ir_id ty = t2(m, 256, 256, 0);
        ir_id x = ir_region_add_arg(m, f, ty, "x");
        sim_result *r;
        for (int k = 0; k < 4; k++)
            x = op1(m, f, IR_OP_RELU, 1, &x, ty, "y");
        ir_region_add_result(m, f, x);
        hw->device.host_overhead = hs[i];
        r = run(m, hw, 0);
        if (i == 0)
            assert_close(r->step_time_s, 4 * hs[i] + t); /* host-bound: the last issue, then t */
        else
            assert_close(r->step_time_s, hs[i] + 4 * t); /* device-bound: one issue, then 4 t */
        sim_result_free(r);
        ir_module_free(m);
        hw_free(hw);
    }
}

/* --math tf32: an f32 MatMul runs at the device's TF32 peak; element-wise ops do not change. */
static void
test_tf32(void **state)
{
    (void)state;
    hw_model *hw = test_hw(1, 1);
    ir_module *m = ir_module_new();
    ir_id f = ir_func_new(m, "main");
    ir_id a = ir_region_add_arg(m, f, t2(m, 64, 128, 0), "a");
    ir_id b = ir_region_add_arg(m, f, t2(m, 128, 256, 0), "b");
    ir_id in[2] = {a, b};
    ir_id y = op1(m, f, IR_OP_MATMUL, 2, in, t2(m, 64, 256, 0), "y");
    sim_options o;
    sim_result *r = NULL;
    di_error err;
    ir_region_add_result(m, f, y);
    hw->device.flops_tf32 = 8e12;
    sim_options_default(&o);
    o.tf32 = 1;
    if (sim_run(m, hw, &o, &r, NULL, NULL, &err) != 0)
        fail_msg("sim_run: %s", err.msg);
    /* 4,194,304 FLOPs at 8 TFLOP/s = 0.524288 us; bytes take 2.29376 us: memory-bound now. */
    assert_close(r->step_time_s, 229376.0 / 1e11 + 1e-5);
    sim_result_free(r);
    r = run(m, hw, 0); /* without: 4.194304 us at the 1 TFLOP/s f32 peak */
    assert_close(r->step_time_s, 4.194304e-6 + 1e-5);
    sim_result_free(r);
    ir_module_free(m);
    hw_free(hw);
}

/*
 * Kernel fusion (sim_options.fuse): a = x + b; g = Relu(a); z = Softmax(g)
 * fuse into one kernel (element-wise ops, then the row-wise op that ends the
 * group). In the first round g is returned and w = Relu(z) follows: w
 * starts a group of its own, alone, so unfused; in the second only z is
 * returned. The fused kernel reads x and b once, writes z and g when it is
 * returned, and never materializes a (used only inside), nor g when only
 * the group reads it: bytes 4 MiB + 4 KiB + 4 MiB (+ 4 MiB), its FLOPs those
 * of the three ops, one launch. Memory in the second round (x and b are
 * arguments, resident): one kernel per op peaks at 12 MiB + 4 KiB (x, b, a
 * and g while Relu runs), fused at 8 MiB + 4 KiB (x, b, z).
 */
static void
test_fusion(void **state)
{
    (void)state;
    for (int ret_g = 1; ret_g >= 0; ret_g--) {
        hw_model *hw = test_hw(1, 1);
        ir_module *m = ir_module_new();
        ir_id f = ir_func_new(m, "main");
        ir_id ty = t2(m, 1024, 1024, 0), vt;
        ir_id x = ir_region_add_arg(m, f, ty, "x"), b, in[2], a, g, z, w = 0;
        ir_cost ca, cg, cz;
        sim_options o;
        sim_result *fused = NULL, *eager;
        di_error err;
        int64_t d = 1024;
        double mib = 1048576.0, kernel, relu = 8 * mib / 1e11 + 1e-5;
        vt = ir_type_tensor(m, IR_F32, 1, &d, 0);
        b = ir_region_add_arg(m, f, vt, "b");
        in[0] = x;
        in[1] = b;
        a = op1(m, f, IR_OP_ADD, 2, in, ty, "a");
        g = op1(m, f, IR_OP_RELU, 1, &a, ty, "g");
        z = op1(m, f, IR_OP_SOFTMAX, 1, &g, ty, "z");
        if (ret_g) {
            w = op1(m, f, IR_OP_RELU, 1, &z, ty, "w");
            ir_region_add_result(m, f, g);
            ir_region_add_result(m, f, w);
        } else {
            ir_region_add_result(m, f, z);
        }
        ir_op_cost(m, m->values[a].def, &ca);
        ir_op_cost(m, m->values[g].def, &cg);
        ir_op_cost(m, m->values[z].def, &cz);
        kernel = fmax((ca.flops + cg.flops + cz.flops) / 1e12,
                      ((ret_g ? 12 : 8) * mib + 4096) / 1e11) +
                 1e-5;
        sim_options_default(&o);
        o.fuse = 1;
        if (sim_run(m, hw, &o, &fused, NULL, NULL, &err) != 0)
            fail_msg("sim_run: %s", err.msg);
        assert_close(fused->step_time_s, kernel + (ret_g ? relu : 0));
        assert_close(fused->flops, ca.flops + cg.flops + cz.flops + (ret_g ? 1048576.0 : 0));
        eager = run(m, hw, 0); /* a kernel per op, each with its own bytes and launch */
        assert_true(eager->step_time_s > fused->step_time_s + 3e-5);
        if (!ret_g) {
            assert_int_equal(eager->peak_memory_bytes, 12 * 1048576 + 4096);
            assert_int_equal(fused->peak_memory_bytes, 8 * 1048576 + 4096);
        }
        sim_result_free(fused);
        sim_result_free(eager);
        ir_module_free(m);
        hw_free(hw);
    }
}

/*
 * Gradient accumulation fusion (lib/sim/fuse.c, sim_fuse_epilogue): the
 * weight-gradient GEMM writes its result in the buffer's dtype and adds it
 * to the buffer. (dx, dw) = MatMulGrad(x, w, dy) in bf16 with x [64, 128],
 * w [128, 256], dy [64, 256]; c = Cast(dw) to f32; acc' = acc + c in place
 * (dist.accumulate); dx and acc' returned. With fused kernels one kernel:
 * the three ops' FLOPs, bytes read x, w, dy, acc (16 + 64 + 32 + 128 KiB)
 * and written dx and acc' (16 + 128 KiB): 384 KiB, one launch; dw and c are
 * never stored. The arguments are resident (240 KiB): the peak is 256 KiB
 * with dx, where one kernel per op holds dx, dw (64 KiB) and c (128 KiB)
 * during the cast: 448 KiB. The cast of dx (an activation's gradient, not a
 * weight's) stays a kernel of its own. With no_grad_accum_fusion nothing
 * here fuses: the eager step and peak.
 */
/* A [a, b] tensor of dtype dt on device 0. */
static ir_id
tdt(ir_module *m, int64_t a, int64_t b, ir_dtype dt)
{
    int64_t d[2] = {a, b};
    return ir_type_tensor(m, dt, 2, d, 0);
}

static void
test_fusion_wgrad(void **state)
{
    (void)state;
    for (int cast_dx = 0; cast_dx < 2; cast_dx++) {
        hw_model *hw = test_hw(1, 1);
        ir_module *m = ir_module_new();
        ir_id f = ir_func_new(m, "main");
        ir_id x = ir_region_add_arg(m, f, tdt(m, 64, 128, IR_BF16), "x");
        ir_id w = ir_region_add_arg(m, f, tdt(m, 128, 256, IR_BF16), "w");
        ir_id dy = ir_region_add_arg(m, f, tdt(m, 64, 256, IR_BF16), "dy");
        ir_id acc = ir_region_add_arg(m, f, tdt(m, 128, 256, IR_F32), "acc");
        ir_id in[3] = {x, w, dy}, g, cop, aop, c, dxc = 0, acc2, add_in[2];
        ir_id outt[2] = {tdt(m, 64, 128, IR_BF16), tdt(m, 128, 256, IR_BF16)}, dw;
        ir_cost cg, cc, ca, cx;
        sim_options o;
        sim_result *fused = NULL, *eager;
        di_error err;
        double kib = 1024.0, kernel, cast_x = 0;
        g = ir_op_add(m, f, IR_OP_MATMULGRAD, 3, in, 2, outt, NULL);
        dw = ir_op_output(m, g, 1);
        c = op1(m, f, IR_OP_CAST, 1, &dw, tdt(m, 128, 256, IR_F32), "c");
        cop = m->values[c].def;
        ir_op_set_int(m, cop, "to", 1);
        add_in[0] = acc;
        add_in[1] = c;
        acc2 = op1(m, f, IR_OP_ADD, 2, add_in, tdt(m, 128, 256, IR_F32), "acc2");
        aop = m->values[acc2].def;
        ir_op_set_int(m, aop, "dist.accumulate", 1);
        if (cast_dx) {
            dxc = op1(m, f, IR_OP_CAST, 1, &(ir_id){ir_op_output(m, g, 0)}, tdt(m, 64, 128, IR_F32),
                      "dxc");
            ir_op_set_int(m, m->values[dxc].def, "to", 1);
            ir_op_cost(m, m->values[dxc].def, &cx);
            /* Its own kernel: reads dx (16 KiB), writes dxc (32 KiB). */
            cast_x = fmax(cx.flops / 1e12, 48 * kib / 1e11) + 1e-5;
        }
        ir_region_add_result(m, f, cast_dx ? dxc : ir_op_output(m, g, 0));
        ir_region_add_result(m, f, acc2);
        assert_int_equal(sim_fuse_epilogue(m, cop), g);
        assert_int_equal(sim_fuse_epilogue(m, aop), g);
        assert_int_equal(sim_fuse_epilogue(m, g), 0);
        if (cast_dx)
            assert_int_equal(sim_fuse_epilogue(m, m->values[dxc].def), 0);
        ir_op_cost(m, g, &cg);
        ir_op_cost(m, cop, &cc);
        ir_op_cost(m, aop, &ca);
        kernel = fmax((cg.flops + cc.flops + ca.flops) / 1e12, 384 * kib / 1e11) + 1e-5;
        sim_options_default(&o);
        o.fuse = 1;
        if (sim_run(m, hw, &o, &fused, NULL, NULL, &err) != 0)
            fail_msg("sim_run: %s", err.msg);
        assert_close(fused->step_time_s, kernel + cast_x);
        eager = run(m, hw, 0); /* three kernels, each with its bytes and launch */
        assert_true(eager->step_time_s > fused->step_time_s + 2e-5);
        if (!cast_dx) {
            assert_int_equal(fused->peak_memory_bytes, 256 * 1024);
            assert_int_equal(eager->peak_memory_bytes, 448 * 1024);
        }
        sim_result_free(fused);
        o.no_grad_accum_fusion = 1;
        if (sim_run(m, hw, &o, &fused, NULL, NULL, &err) != 0)
            fail_msg("sim_run: %s", err.msg);
        assert_close(fused->step_time_s, eager->step_time_s);
        assert_int_equal(fused->peak_memory_bytes, eager->peak_memory_bytes);
        assert_true(fused->settings.no_grad_accum_fusion);
        sim_result_free(fused);
        sim_result_free(eager);
        ir_module_free(m);
        hw_free(hw);
    }
}

/*
 * An attention softmax fuses with the scale and mask before it only when its
 * rows fit Megatron-LM's fused scaled masked softmax kernel (lib/sim/fuse.c):
 * z = Softmax(x * c + mask) over [b, heads, sq, sk], sk = 256 (a power of two
 * above 128: a block takes 4 rows). With b x heads = 4 (a multiple of 4), sq
 * = 8 and sk = 256 the three ops are one kernel: their FLOPs, x, c and mask
 * read once, z written, one launch. With 2 or 6 batches, sq = 6 or
 * sk = 32,768 (above the kernel's 16,384) Megatron-LM runs PyTorch's eager
 * softmax: three kernels, each with its own bytes and launch, and the scaled
 * and masked scores materialized. A rank-2 softmax keeps the general rule
 * (test_fusion).
 */
static void
test_fusion_softmax_kernel(void **state)
{
    static const struct {
        int64_t dims[4];
        int fused;
    } cases[] = {
        {{1, 4, 8, 256}, 1},   {{2, 2, 8, 256}, 1}, {{1, 2, 8, 256}, 0},
        {{1, 6, 8, 256}, 0},   {{1, 4, 6, 256}, 0}, {{1, 4, 4, 32768}, 0},
        {{1, 8, 4, 64}, 1}, /* sk <= 128: two rows a warp, 8 a block */
        {{1, 4, 4, 64}, 0},
    };
    (void)state;
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        hw_model *hw = test_hw(1, 1);
        ir_module *m = ir_module_new();
        ir_id f = ir_func_new(m, "main");
        const int64_t *d = cases[k].dims;
        ir_id ty = ir_type_tensor(m, IR_F32, 4, d, 0);
        ir_id cty = ir_type_tensor(m, IR_F32, 0, NULL, 0);
        ir_id mty = ir_type_tensor(m, IR_F32, 2, d + 2, 0);
        ir_id x = ir_region_add_arg(m, f, ty, "x"), c = ir_region_add_arg(m, f, cty, "c");
        ir_id mask = ir_region_add_arg(m, f, mty, "mask"), in[2], a, b, z;
        ir_cost ca, cb, cz;
        sim_options o;
        sim_result *r = NULL;
        di_error err;
        double xb = (double)(d[0] * d[1] * d[2] * d[3]) * 4, mb = (double)(d[2] * d[3]) * 4;
        double want;
        in[0] = x;
        in[1] = c;
        a = op1(m, f, IR_OP_MUL, 2, in, ty, "a");
        in[0] = a;
        in[1] = mask;
        b = op1(m, f, IR_OP_ADD, 2, in, ty, "b");
        z = op1(m, f, IR_OP_SOFTMAX, 1, &b, ty, "z");
        ir_region_add_result(m, f, z);
        ir_op_cost(m, m->values[a].def, &ca);
        ir_op_cost(m, m->values[b].def, &cb);
        ir_op_cost(m, m->values[z].def, &cz);
        if (cases[k].fused)
            want = fmax((ca.flops + cb.flops + cz.flops) / 1e12, (xb + 4 + mb + xb) / 1e11) + 1e-5;
        else
            want = fmax(ca.flops / 1e12, (xb + 4 + xb) / 1e11) + 1e-5 +
                   fmax(cb.flops / 1e12, (xb + mb + xb) / 1e11) + 1e-5 +
                   fmax(cz.flops / 1e12, (xb + xb) / 1e11) + 1e-5;
        sim_options_default(&o);
        o.fuse = 1;
        if (sim_run(m, hw, &o, &r, NULL, NULL, &err) != 0)
            fail_msg("sim_run: %s", err.msg);
        if (fabs(r->step_time_s - want) > 1e-9 * want)
            fail_msg("case %zu [%lld, %lld, %lld, %lld]: step %.9g s, want %.9g s (%s)", k,
                     (long long)d[0], (long long)d[1], (long long)d[2], (long long)d[3],
                     r->step_time_s, want, cases[k].fused ? "one kernel" : "three");
        sim_result_free(r);
        ir_module_free(m);
        hw_free(hw);
    }
}

/*
 * Tile and wave quantization on a device of 108 SMs: a MatMul [128, 64] x
 * [64, 128 n]. With n = 108 the 128 x 128 tiles fill one wave exactly:
 * full efficiency. With n = 109 they take two waves, the second with one
 * tile: of the tile shapes, 128 x 128 is still the best, at 109 / 216 of
 * the device (128 x 256: 55 tiles in one wave, padded 13,952 / 14,080,
 * 0.5045; 64-wide tiles reach at most 2/3 of peak).
 */
static void
test_gemm_waves(void **state)
{
    (void)state;
    for (int n = 108; n <= 109; n++) {
        hw_model *hw = test_hw(1, 1);
        ir_module *m = ir_module_new();
        ir_id f = ir_func_new(m, "main");
        ir_id a = ir_region_add_arg(m, f, t2(m, 128, 64, 0), "a");
        ir_id b = ir_region_add_arg(m, f, t2(m, 64, 128 * n, 0), "b");
        ir_id in[2] = {a, b};
        ir_id y = op1(m, f, IR_OP_MATMUL, 2, in, t2(m, 128, 128 * n, 0), "y");
        double flops = 2.0 * 128 * 64 * 128 * n;
        sim_result *r;
        ir_region_add_result(m, f, y);
        hw->device.sms = 108;
        r = run(m, hw, 0);
        assert_close(r->step_time_s, flops / 1e12 / (n == 108 ? 1.0 : 109.0 / 216.0) + 1e-5);
        sim_result_free(r);
        hw->device.sms = 0; /* no SM count: the efficiency curve alone */
        r = run(m, hw, 0);
        assert_close(r->step_time_s, flops / 1e12 + 1e-5);
        sim_result_free(r);
        ir_module_free(m);
        hw_free(hw);
    }
}

/*
 * With a host overhead h, a received input synchronizes the host (Megatron-
 * LM's point-to-point communication ends in torch.cuda.synchronize()): device
 * 1 issues Relu(recv) only once the transfer has ended. Device 0: issue h,
 * Relu t; the transfer tt; device 1: issue h, Relu t, Relu t (issued h
 * later, while the first runs). Without the synchronization device 1's host
 * would have issued both long before, and the step would be h shorter.
 */
static void
test_host_sync_on_receive(void **state)
{
    const double h = 1e-6, t = 524288.0 / 1e11 + 1e-5, tt = 1e-6 + 262144.0 / 1e11;
    (void)state;
    hw_model *hw = test_hw(1, 2);
    ir_module *m = ir_module_new();
    ir_id f = ir_func_new(m, "main");
    ir_id x = ir_region_add_arg(m, f, t2(m, 256, 256, 0), "x");
    ir_id y = op1(m, f, IR_OP_RELU, 1, &x, t2(m, 256, 256, 0), "y");
    ir_id r1 = op1(m, f, IR_OP_SEND, 1, &y, t2(m, 256, 256, 1), "r1");
    ir_id z, w;
    sim_result *r;
    ir_op_set_int(m, m->values[r1].def, "device", 1);
    z = op1(m, f, IR_OP_RELU, 1, &r1, t2(m, 256, 256, 1), "z");
    w = op1(m, f, IR_OP_RELU, 1, &z, t2(m, 256, 256, 1), "w");
    ir_region_add_result(m, f, w);
    hw->device.host_overhead = h;
    r = run(m, hw, 0);
    assert_close(r->step_time_s, 2 * h + 3 * t + tt);
    sim_result_free(r);
    ir_module_free(m);
    hw_free(hw);
}

/* Out of memory is judged against the usable memory: memory_bytes less memory_reserved. */
static void
test_oom_reserve(void **state)
{
    (void)state;
    hw_model *hw = test_hw(1, 1);
    hw->device.memory_bytes = 800000;
    hw->device.memory_reserved = 100000;
    ir_module *m = relu_chain(2);
    sim_result *r = run(m, hw, 0);
    const sim_device_result *d = dev_result(r, 0);
    /* 786,432 B fit in 800,000 B but not in the 700,000 B usable: over by 86,432 B. */
    assert_int_equal(d->capacity_bytes, 700000);
    assert_true(d->oom);
    assert_int_equal(d->oom_by_bytes, 86432);
    sim_result_free(r);
    ir_module_free(m);
    hw_free(hw);
}

/* SGD updates in place: w' adds no memory; dw is a gradient; w is a weight. */
static void
test_memory_classes(void **state)
{
    (void)state;
    hw_model *hw = test_hw(1, 1);
    ir_module *m = ir_module_new();
    ir_id f = ir_func_new(m, "main");
    ir_id t = t2(m, 256, 256, 0);
    ir_id w = ir_region_add_arg(m, f, t, "w");
    ir_id x = ir_region_add_arg(m, f, t, "x");
    ir_id in[2] = {x, w};
    ir_id dw = op1(m, f, IR_OP_MUL, 2, in, t, "dw");
    ir_id in2[2] = {w, dw};
    ir_id w1 = op1(m, f, IR_OP_SGD, 2, in2, t, "w1");
    ir_region_add_result(m, f, w1);
    sim_result *r = run(m, hw, 0);
    const sim_device_result *d = dev_result(r, 0);
    /* w (weights) + x (data) + dw (gradient) = 3 * 256 KiB; w1 aliases w. */
    assert_int_equal(d->peak_memory_bytes, 3 * 262144);
    assert_int_equal(d->peak_by_class[SIM_MEM_WEIGHTS], 262144);
    assert_int_equal(d->peak_by_class[SIM_MEM_GRADIENTS], 262144);
    assert_int_equal(d->timeline[d->ntimeline - 1].bytes, 2 * 262144);
    sim_result_free(r);
    ir_module_free(m);
    hw_free(hw);
}

/*
 * An op the cost model has no rule for is priced by its bytes at the memory
 * bandwidth (never a silent zero); under sim_options.strict it is an error
 * naming it. ONNX Runtime's SoftmaxCrossEntropy is priced like
 * SoftmaxCrossEntropyLoss: 5 FLOPs per logit plus its bytes.
 */
/*
 * Fused attention's exponentials: one per score each way, on the special
 * function units after the products (cost.c): the op's time is its
 * products' plus its exponentials' at the device's special_rate, its
 * products' alone without one; causal halves both (plus the diagonal).
 */
static void
test_flashattn_exponentials(void **state)
{
    (void)state;
    hw_model *hw = test_hw(1, 1);
    ir_module *m = ir_module_new();
    ir_id f = ir_func_new(m, "main");
    int64_t dims[3] = {2, 64, 16}; /* heads, sequence, head size */
    ir_id ty = ir_type_tensor(m, IR_BF16, 3, dims, 0), in[3], out[2];
    ir_id lse_ty, op, causal;
    ir_cost c;
    double scores = 2.0 * 64 * 64, products = 2.0 * scores * (16 + 16), t0, t1, t2v;
    for (int i = 0; i < 3; i++)
        in[i] = ir_region_add_arg(m, f, ty, NULL);
    lse_ty = ir_type_tensor(m, IR_F32, 2, dims, 0);
    out[0] = ty;
    out[1] = lse_ty;
    op = ir_op_add(m, f, IR_OP_FLASHATTN, 3, in, 2, out, NULL);
    causal = ir_op_add(m, f, IR_OP_FLASHATTN, 3, in, 2, out, NULL);
    ir_op_set_int(m, causal, "causal", 1);
    ir_region_add_result(m, f, ir_op_output(m, op, 0));
    ir_region_add_result(m, f, ir_op_output(m, causal, 0));
    ir_op_cost(m, op, &c);
    assert_true(c.flops == products && c.special == scores);
    ir_op_cost(m, causal, &c);
    assert_true(c.special == scores * 0.5 * (1 + 1.0 / 64) &&
                c.flops == products * 0.5 * (1 + 1.0 / 64));
    /* 1 TFLOP/s: the products' time; the operands at 100 GB/s take less. */
    t0 = sim_op_time(m, op, hw, 0);
    assert_close(t0, hw->device.launch_overhead + products / 1e12);
    hw->device.special_rate = 1e9;
    t1 = sim_op_time(m, op, hw, 0);
    assert_close(t1, t0 + scores / 1e9);
    t2v = sim_op_time(m, causal, hw, 0);
    assert_close(t2v, hw->device.launch_overhead +
                          (products + 1e3 * scores) * 0.5 * (1 + 1.0 / 64) / 1e12);
    /* The presets price them: A100's 16 units per SM at 1.41 GHz, H100's at 1.83 GHz. */
    {
        hw_model *a100, *h100;
        di_error err;
        assert_int_equal(hw_preset("a100-dgx", &a100, &err), 0);
        assert_int_equal(hw_preset("h100-dgx", &h100, &err), 0);
        assert_close(a100->device.special_rate, 16 * 108 * (312e12 / (108 * 2048.0)));
        assert_true(h100->device.special_rate > 3.8e12 && h100->device.special_rate < 3.9e12);
        hw_free(a100);
        hw_free(h100);
    }
    ir_module_free(m);
    hw_free(hw);
}

static void
test_opaque_needs_profile(void **state)
{
    (void)state;
    hw_model *hw = test_hw(1, 1);
    ir_module *m = ir_module_new();
    ir_id f = ir_func_new(m, "main");
    ir_id x = ir_region_add_arg(m, f, t2(m, 4, 4, 0), "x");
    ir_id y = op1(m, f, IR_OP_OPAQUE, 1, &x, t2(m, 4, 4, 0), "y");
    ir_op_set_string(m, m->values[y].def, "op_type", "FancyConv");
    m->ops[m->values[y].def].opaque = ir_str(m, "FancyConv");
    ir_region_add_result(m, f, y);
    sim_result *r = NULL;
    sim_options o;
    di_error err;
    ir_cost c;
    ir_id op = m->values[y].def;
    assert_false(ir_op_has_cost_rule(m, op));
    ir_op_cost(m, op, &c);
    assert_true(c.flops == 0 && c.bytes_read == 64 && c.bytes_write == 64);
    sim_options_default(&o);
    assert_int_equal(sim_run(m, hw, &o, &r, NULL, NULL, &err), 0);
    assert_true(r->step_time_s > 0);
    assert_close(r->step_time_s, sim_op_time(m, op, hw, 0));
    sim_result_free(r);
    r = NULL;
    o.strict = 1;
    assert_int_equal(sim_run(m, hw, &o, &r, NULL, NULL, &err), DI_ECOST);
    assert_non_null(strstr(err.msg, "FancyConv"));
    assert_null(r);
    /* The ORT loss: priced by the softmax rule. */
    m->ops[op].opaque = ir_str(m, "SoftmaxCrossEntropy");
    assert_true(ir_op_has_cost_rule(m, op));
    ir_op_cost(m, op, &c);
    assert_true(c.flops == 5 * 16 && c.bytes_read == 64 && c.bytes_write == 64);
    /* ORT's SGDOptimizer: SGD's 2 FLOPs per weight. */
    m->ops[op].opaque = ir_str(m, "SGDOptimizer");
    ir_op_cost(m, op, &c);
    assert_true(c.flops == 2 * 16 && c.bytes_read == 64 && c.bytes_write == 64);
    m->ops[op].opaque = ir_str(m, "SoftmaxCrossEntropy");
    assert_int_equal(sim_run(m, hw, &o, &r, NULL, NULL, &err), 0);
    sim_result_free(r);
    ir_module_free(m);
    hw_free(hw);
}

/*
 * The transforms' cost interface (xform/cost.h) gives the simulator's
 * numbers: the hardware's devices and name, and each op's time on it (the
 * roofline for compute, 0 for plumbing, the bytes-only estimate for an
 * opaque op without a cost rule); without hardware it knows nothing.
 */
static void
test_xform_cost(void **state)
{
    (void)state;
    hw_model *hw = test_hw(2, 4);
    ir_module *m = ir_module_new();
    ir_id f = ir_func_new(m, "main");
    ir_id a = ir_region_add_arg(m, f, t2(m, 64, 128, 0), "a");
    ir_id b = ir_region_add_arg(m, f, t2(m, 128, 256, 0), "b");
    ir_id in[2] = {a, b};
    ir_id y = op1(m, f, IR_OP_MATMUL, 2, in, t2(m, 64, 256, 0), "y");
    ir_id z = op1(m, f, IR_OP_OPAQUE, 1, &y, t2(m, 64, 256, 0), "z");
    xform_cost c;
    m->ops[m->values[z].def].opaque = ir_str(m, "FancyConv");
    ir_region_add_result(m, f, z);
    xform_cost_init(&c, NULL);
    assert_false(xform_cost_known(&c));
    xform_cost_init(&c, hw);
    assert_true(xform_cost_known(&c));
    assert_int_equal(c.ndevice, 8);
    assert_string_equal(c.name, "test");
    assert_close(c.op_time(c.ctx, m, m->values[y].def), 4.194304e-6 + 1e-5);
    /* An op with no cost rule: its bytes (2 x 64 KiB) at the memory bandwidth. */
    assert_true(c.op_time(c.ctx, m, m->values[z].def) > 1e-5);
    for (ir_id op = 1; op < m->nop; op++)
        assert_true(c.op_time(c.ctx, m, op) == sim_op_time(m, op, hw, 0));
    ir_module_free(m);
    hw_free(hw);
}

/* A device the hardware does not have is an error. */
static void
test_device_out_of_range(void **state)
{
    (void)state;
    hw_model *hw = test_hw(1, 2);
    ir_module *m = ir_module_new();
    ir_id f = ir_func_new(m, "main");
    ir_id x = ir_region_add_arg(m, f, t2(m, 4, 4, 5), "x");
    ir_id y = op1(m, f, IR_OP_RELU, 1, &x, t2(m, 4, 4, 5), "y");
    ir_region_add_result(m, f, y);
    sim_result *r = NULL;
    di_error err;
    assert_int_equal(sim_run(m, hw, NULL, &r, NULL, NULL, &err), DI_EINVAL);
    assert_non_null(strstr(err.msg, "device 5"));
    ir_module_free(m);
    hw_free(hw);
}

/*
 * Data parallel over a pmap: scatter x [8,4] from device 0 to devices 1, 2;
 * each computes Relu on [4,4] in the body; the results are all-reduced.
 */
static ir_module *
pmap_module(void)
{
    ir_module *m = ir_module_new();
    ir_id f = ir_func_new(m, "main");
    ir_id d = ir_str(m, "d");
    int64_t dims[2] = {4, 4};
    ir_id e1 = t2(m, 4, 4, 1), e2 = t2(m, 4, 4, 2), el[2] = {e1, e2};
    ir_id tup = ir_type_tuple(m, 2, el);
    ir_id x = ir_region_add_arg(m, f, t2(m, 8, 4, 0), "x");
    ir_id xs = op1(m, f, IR_OP_SCATTER, 1, &x, tup, "xs");
    int64_t devs[2] = {1, 2};
    ir_id opx = m->values[xs].def;
    ir_op_set_int(m, opx, "dim", 0);
    ir_op_set_ints(m, opx, "devices", 2, devs);
    ir_id body = ir_body_new(m);
    ir_id tv = ir_type_tensor_var(m, IR_F32, 2, dims, d);
    ir_id pm = ir_op_add(m, f, IR_OP_PMAP, 1, &xs, 1, &tup, (const char *[]){"ys"});
    m->ops[pm].body = body;
    m->regions[body].parent = pm;
    ir_op_set_string(m, pm, "device_var", "d");
    ir_op_set_ints(m, pm, "devices", 2, devs);
    ir_id xi = ir_region_add_arg(m, body, tv, "xi");
    ir_id yi = op1(m, body, IR_OP_RELU, 1, &xi, tv, "yi");
    ir_region_add_result(m, body, yi);
    ir_id ys = ir_op_output(m, pm, 0);
    ir_id zs = op1(m, f, IR_OP_ALLREDUCE, 1, &ys, tup, "zs");
    ir_region_add_result(m, f, zs);
    return m;
}

static void
test_pmap(void **state)
{
    (void)state;
    hw_model *hw = test_hw(1, 4);
    ir_module *m = pmap_module();
    sim_result *r = run(m, hw, 0);
    /*
     * scatter of 128 B over {0,1,2}: (n-1)/n S/bw + (n-1) alpha
     *   = 2/3 * 128 / 1e11 + 2 us;
     * Relu [4,4]: 128 B / 1e11 + 10 us on each of devices 1 and 2 (in parallel);
     * all-reduce of 64 B over {1,2}: 2*1/2 * 64 / 1e11 + 2 * 1 us.
     */
    double scatter = 2.0 / 3 * 128 / 1e11 + 2e-6;
    double relu = 128.0 / 1e11 + 1e-5;
    double ar = 64.0 / 1e11 + 2e-6;
    assert_close(r->step_time_s, scatter + relu + ar);
    assert_close(dev_result(r, 1)->compute_s, relu);
    assert_close(dev_result(r, 2)->compute_s, relu);
    /* 1 scatter x 3 participants + 2 relus + 1 all-reduce x 2 participants. */
    assert_int_equal(r->ops, 7);
    sim_result_free(r);
    ir_module_free(m);
    hw_free(hw);
}

static void
test_deterministic(void **state)
{
    (void)state;
    hw_model *hw = test_hw(1, 4);
    ir_module *m = pmap_module();
    sim_result *first = run(m, hw, 0);
    char *a = sim_result_to_json(first);
    for (int i = 0; i < 100; i++) {
        sim_result *r = run(m, hw, 0);
        char *b = sim_result_to_json(r);
        assert_string_equal(a, b);
        assert_memory_equal(&first->step_time_s, &r->step_time_s, sizeof(double));
        di_free(b);
        sim_result_free(r);
    }
    di_free(a);
    sim_result_free(first);
    ir_module_free(m);
    hw_free(hw);
}

/* The trace is valid JSON with one complete event per op and stream. */
static void
test_trace(void **state)
{
    (void)state;
    hw_model *hw = test_hw(1, 4);
    ir_module *m = pmap_module();
    sim_options o;
    sim_result *r;
    sim_event *ev;
    uint32_t nev;
    di_error err;
    char path[] = "/tmp/distir-trace-XXXXXX";
    int fd = mkstemp(path);
    json_t *root, *events;
    json_error_t jerr;
    size_t nx = 0, i;
    json_t *e;
    assert_true(fd >= 0);
    close(fd);
    sim_options_default(&o);
    assert_int_equal(sim_run(m, hw, &o, &r, &ev, &nev, &err), 0);
    assert_int_equal(sim_trace_write(path, m, r, ev, nev, &err), 0);
    root = json_load_file(path, 0, &jerr);
    assert_non_null(root);
    events = json_object_get(root, "traceEvents");
    assert_true(json_is_array(events));
    json_array_foreach(events, i, e)
    {
        if (strcmp(json_string_value(json_object_get(e, "ph")), "X") == 0)
            nx++;
    }
    /*
     * Events per op and stream: the scatter on 3 devices' collective
     * streams = 3, two Relus = 2, the all-reduce on 2 devices = 2.
     */
    assert_int_equal(nx, 7);
    assert_int_equal(nx, nev);
    json_decref(root);
    unlink(path);
    di_free(ev);
    sim_result_free(r);
    ir_module_free(m);
    hw_free(hw);
}

/*
 * Random valid modules: chains and joins of Relu/Add/MatMul on random
 * devices with sends between them. Invariants: step >= every device's busy
 * time; memory never negative and back to the resident set (inputs and
 * returned values) at the end; every op scheduled exactly once.
 */
static void
test_random_invariants(void **state)
{
    (void)state;
    hw_model *hw = test_hw(2, 2);
    unsigned seed = 12345;
    for (int iter = 0; iter < 200; iter++) {
        ir_module *m = ir_module_new();
        ir_id f = ir_func_new(m, "main");
        ir_id vals[64];
        uint32_t nv = 0, nop = 0;
        uint64_t resident[4] = {0};
        int64_t n = 8 << (rand_r(&seed) % 4);
        for (int i = 0; i < 3; i++) {
            int32_t dev = (int32_t)(rand_r(&seed) % 4);
            vals[nv++] = ir_region_add_arg(m, f, t2(m, n, n, dev), NULL);
            resident[dev] += (uint64_t)(n * n * 4);
        }
        int nops = 5 + (int)(rand_r(&seed) % 40);
        for (int i = 0; i < nops && nv < 64; i++) {
            ir_id a = vals[rand_r(&seed) % nv], b = vals[rand_r(&seed) % nv];
            int32_t da = m->types[m->values[a].type].device;
            int32_t db = m->types[m->values[b].type].device;
            int what = (int)(rand_r(&seed) % 4);
            ir_id in[2] = {a, b};
            if (what == 0) {
                vals[nv++] = op1(m, f, IR_OP_RELU, 1, &a, t2(m, n, n, da), NULL);
            } else if (what == 1 || da != db) {
                int32_t to = (da + 1 + (int32_t)(rand_r(&seed) % 3)) % 4;
                ir_id y = op1(m, f, IR_OP_SEND, 1, &a, t2(m, n, n, to), NULL);
                ir_op_set_int(m, m->values[y].def, "device", to);
                vals[nv++] = y;
            } else {
                vals[nv++] = op1(m, f, what == 2 ? IR_OP_ADD : IR_OP_MATMUL, 2, in,
                                 t2(m, n, n, da), NULL);
            }
            nop++;
        }
        ir_id last = vals[nv - 1];
        ir_region_add_result(m, f, last);
        resident[m->types[m->values[last].type].device] += (uint64_t)(n * n * 4);
        sim_options o;
        sim_result *r;
        sim_event *ev;
        uint32_t nev;
        di_error err;
        sim_options_default(&o);
        o.timeline_max_points = 0;
        assert_int_equal(sim_run(m, hw, &o, &r, &ev, &nev, &err), 0);
        /* Each compute op is one event; each send two (sender and receiver). */
        uint32_t expect = 0;
        for (ir_id op = 1; op < m->nop; op++)
            expect += m->ops[op].kind == IR_OP_SEND ? 2 : 1;
        assert_int_equal(nev, expect);
        uint8_t *seen = di_xcalloc(m->nop, 1);
        for (uint32_t e = 0; e < nev; e++)
            if (ev[e].stream != 2)
                seen[ev[e].op]++;
        for (ir_id op = 1; op < m->nop; op++)
            assert_int_equal(seen[op], 1);
        di_free(seen);
        for (uint32_t i = 0; i < r->ndevice; i++) {
            const sim_device_result *d = &r->devices[i];
            assert_true(r->step_time_s + 1e-15 >= d->busy_s);
            assert_true(d->busy_s + 1e-15 >= d->compute_s);
            for (uint32_t t = 0; t < d->ntimeline; t++)
                assert_true(d->timeline[t].bytes <= d->peak_memory_bytes);
            if (d->ntimeline)
                assert_int_equal(d->timeline[d->ntimeline - 1].bytes, resident[d->id]);
        }
        di_free(ev);
        sim_result_free(r);
        ir_module_free(m);
    }
    hw_free(hw);
}

/* A cancelled run stops with DI_ECANCELLED. */
static void
test_cancel(void **state)
{
    (void)state;
    hw_model *hw = test_hw(1, 1);
    ir_module *m = ir_module_new();
    ir_id f = ir_func_new(m, "main");
    ir_id t = t2(m, 4, 4, 0);
    ir_id x = ir_region_add_arg(m, f, t, "x");
    for (int i = 0; i < 5000; i++)
        x = op1(m, f, IR_OP_RELU, 1, &x, t, NULL);
    ir_region_add_result(m, f, x);
    atomic_int flag = 1;
    sim_options o;
    sim_result *r = NULL;
    di_error err;
    sim_options_default(&o);
    o.cancel = &flag;
    assert_int_equal(sim_run(m, hw, &o, &r, NULL, NULL, &err), DI_ECANCELLED);
    assert_null(r);
    ir_module_free(m);
    hw_free(hw);
}

/* Results survive the protobuf form bit for bit. */
static void
test_result_proto(void **state)
{
    (void)state;
    hw_model *hw = test_hw(1, 4);
    ir_module *m = pmap_module();
    sim_result *r = run(m, hw, 0), *back = NULL;
    uint8_t *data;
    size_t len;
    di_error err;
    char *a, *b;
    di_hash h;
    di_sha256_once("hw", 2, &h);
    sim_result_set_inputs(r, "dp=2 tp=1", &h);
    assert_int_equal(sim_result_pack(r, &data, &len), 0);
    assert_int_equal(sim_result_unpack(data, len, &back, &err), 0);
    a = sim_result_to_json(r);
    b = sim_result_to_json(back);
    assert_string_equal(a, b);
    /* And what it was simulated with (sim_run's, then the caller's). */
    assert_string_equal(back->settings.version, SIM_VERSION);
    assert_string_equal(back->settings.hardware, hw->name);
    assert_string_equal(back->settings.strategy, "dp=2 tp=1");
    assert_int_equal(strlen(back->settings.hardware_hash), 64);
    assert_string_equal(back->settings.hardware_hash, r->settings.hardware_hash);
    assert_true(back->settings.have_options);
    assert_false(back->settings.fuse);
    di_free(a);
    di_free(b);
    di_free(data);
    sim_result_free(back);
    sim_result_free(r);
    ir_module_free(m);
    hw_free(hw);
}

/*
 * A comparison names the settings that differ where both results recorded
 * them, and none when they agree or one side did not record them (a result
 * stored before they were).
 */
static void
test_compare_settings(void **state)
{
    (void)state;
    hw_model *hw = test_hw(1, 4);
    ir_module *m = pmap_module();
    sim_result *a = run(m, hw, 0), *b = run(m, hw, 1);
    sim_compare_limits lim;
    sim_compare c;
    di_hash h;
    di_buf j;
    json_t *root;
    json_error_t jerr;
    char longer[400];
    memset(&lim, 0, sizeof lim);
    di_sha256_once("hw", 2, &h);
    sim_result_set_inputs(a, "dp=4 tp=1", &h);
    sim_result_set_inputs(b, "dp=4 tp=1", &h);
    sim_compare_results(a, a, &lim, &c);
    assert_int_equal(c.ndiff, 0);
    sim_compare_results(a, b, &lim, &c); /* --no-overlap on one side */
    assert_int_equal(c.ndiff, 1);
    assert_string_equal(c.diff[0].setting, "overlap");
    assert_string_equal(c.diff[0].base, "on");
    assert_string_equal(c.diff[0].cand, "off");
    b->settings.fuse = 1;
    b->settings.version[0] = 'x';
    /* A long strategy with two-byte characters: cut with "..." at a character's start. */
    memset(longer, 0, sizeof longer);
    longer[0] = 'x'; /* then characters start at odd offsets: the plain cut would split one */
    for (int i = 0; i < 199; i++)
        memcpy(longer + 1 + 2 * i, "\xc3\xa9", 2);
    sim_result_set_inputs(b, longer, &h);
    sim_compare_results(a, b, &lim, &c);
    assert_int_equal(c.ndiff, 4);
    assert_string_equal(c.diff[0].setting, "simulator");
    assert_string_equal(c.diff[1].setting, "strategy");
    assert_string_equal(c.diff[2].setting, "kernels");
    assert_string_equal(c.diff[2].base, "eager");
    assert_string_equal(c.diff[2].cand, "fused");
    assert_string_equal(c.diff[3].setting, "overlap");
    {
        size_t n = strlen(c.diff[1].cand);
        assert_true(n < sizeof c.diff[1].cand && n > 100);
        assert_string_equal(c.diff[1].cand + n - 3, "...");
        assert_int_equal((n - 3 - 1) % 2, 0); /* 'x' and whole characters before it */
    }
    di_buf_init(&j);
    sim_compare_json(&c, &j);
    di_buf_put(&j, "", 1);
    root = json_loads(j.data, 0, &jerr);
    assert_non_null(root);
    assert_int_equal(json_array_size(json_object_get(root, "settings_differ")), 4);
    assert_string_equal(json_string_value(json_object_get(
                            json_array_get(json_object_get(root, "settings_differ"), 2),
                            "candidate")),
                        "fused");
    json_decref(root);
    di_buf_fini(&j);
    di_buf_init(&j);
    sim_compare_text(&c, &j);
    di_buf_put(&j, "", 1);
    assert_non_null(strstr(j.data, "warning: the results were simulated with different settings"));
    assert_non_null(strstr(j.data, "kernels 'eager' (baseline) -> 'fused'"));
    di_buf_fini(&j);
    /* Not recorded on one side (a result stored before settings were): nothing to name. */
    memset(&b->settings.version, 0, sizeof b->settings.version);
    b->settings.hardware[0] = b->settings.hardware_hash[0] = '\0';
    sim_result_set_inputs(b, NULL, NULL);
    b->settings.have_options = 0;
    sim_compare_results(a, b, &lim, &c);
    assert_int_equal(c.ndiff, 0);
    /* The same name with other figures: a hardware difference shown with the hashes. */
    sim_result_set_inputs(b, "dp=4 tp=1", &h);
    snprintf(b->settings.hardware, sizeof b->settings.hardware, "%s", a->settings.hardware);
    b->settings.hardware_hash[0] = b->settings.hardware_hash[0] == '0' ? '1' : '0';
    sim_compare_results(a, b, &lim, &c);
    assert_int_equal(c.ndiff, 1);
    assert_string_equal(c.diff[0].setting, "hardware");
    assert_non_null(strstr(c.diff[0].base, "(figures "));
    sim_result_free(a);
    sim_result_free(b);
    ir_module_free(m);
    hw_free(hw);
}

/*
 * An SPMD module over a 2x4 mesh of devices 0..7: the batch is scattered,
 * each device runs MatMul, Relu and a mesh-form all-reduce over mesh axis 1
 * (groups of 4) in a pmap body, and the results are all-reduced over all 8.
 * The results then cross to devices 8..15 with one element-wise send and a
 * second pmap runs there. With `tail`, device 0's result is also sent to
 * device 9 alone, which breaks the symmetry of both groups after the fact.
 */
static ir_module *
spmd_module(int tail)
{
    ir_module *m = ir_module_new();
    ir_id f = ir_func_new(m, "main");
    ir_id d = ir_str(m, "d");
    int64_t shape[2] = {2, 4}, devs[8], dims[2] = {16, 64}, wd[2] = {64, 64};
    ir_id el[8], tup, xs, pm, body, mesh;
    for (int i = 0; i < 8; i++) {
        devs[i] = i;
        el[i] = t2(m, 16, 64, i);
    }
    mesh = ir_mesh_add(m, "m", 2, shape, devs);
    tup = ir_type_tuple(m, 8, el);
    ir_id wel[8];
    for (int i = 0; i < 8; i++)
        wel[i] = t2(m, 64, 64, i);
    ir_id wtup = ir_type_tuple(m, 8, wel);
    xs = ir_region_add_arg(m, f, tup, "xs");
    ir_id ws = ir_region_add_arg(m, f, wtup, "ws");
    body = ir_body_new(m);
    ir_id in2[2] = {xs, ws};
    pm = ir_op_add(m, f, IR_OP_PMAP, 2, in2, 1, &tup, (const char *[]){"ys"});
    m->ops[pm].body = body;
    m->regions[body].parent = pm;
    ir_op_set_string(m, pm, "device_var", "d");
    ir_op_set_ints(m, pm, "devices", 8, devs);
    ir_id tv = ir_type_tensor_var(m, IR_F32, 2, dims, d);
    ir_id wv = ir_type_tensor_var(m, IR_F32, 2, wd, d);
    ir_id xi = ir_region_add_arg(m, body, tv, "xi");
    ir_id wi = ir_region_add_arg(m, body, wv, "wi");
    ir_id mm[2] = {xi, wi};
    ir_id a = op1(m, body, IR_OP_MATMUL, 2, mm, tv, "a");
    ir_id b = op1(m, body, IR_OP_RELU, 1, &a, tv, "b");
    ir_id c = op1(m, body, IR_OP_ALLREDUCE, 1, &b, tv, "c");
    ir_op_set_mesh(m, m->values[c].def, "mesh", mesh);
    ir_op_set_ints(m, m->values[c].def, "mesh_axes", 1, (int64_t[]){1});
    ir_region_add_result(m, body, c);
    ir_id ys = ir_op_output(m, pm, 0);
    ir_id zs = op1(m, f, IR_OP_ALLREDUCE, 1, &ys, tup, "zs");
    ir_region_add_result(m, f, zs);
    /* A stage boundary: every element to its counterpart on node 1 (devices 8..15). */
    ir_id el2[8];
    int64_t devs2[8];
    for (int i = 0; i < 8; i++) {
        devs2[i] = 8 + i;
        el2[i] = t2(m, 16, 64, 8 + i);
    }
    ir_id tup2 = ir_type_tuple(m, 8, el2);
    ir_id moved = op1(m, f, IR_OP_SEND, 1, &zs, tup2, "moved");
    ir_op_set_ints(m, m->values[moved].def, "devices", 8, devs2);
    ir_id body2 = ir_body_new(m);
    ir_id pm2 = ir_op_add(m, f, IR_OP_PMAP, 1, &moved, 1, &tup2, (const char *[]){"vs"});
    m->ops[pm2].body = body2;
    m->regions[body2].parent = pm2;
    ir_op_set_string(m, pm2, "device_var", "d");
    ir_op_set_ints(m, pm2, "devices", 8, devs2);
    ir_id ui = ir_region_add_arg(m, body2, tv, "ui");
    ir_id vi = op1(m, body2, IR_OP_RELU, 1, &ui, tv, "vi");
    ir_region_add_result(m, body2, vi);
    ir_region_add_result(m, f, ir_op_output(m, pm2, 0));
    if (tail) {
        ir_id g = op1(m, f, IR_OP_TUPLEGET, 1, &zs, el[0], "z0");
        ir_op_set_int(m, m->values[g].def, "index", 0);
        ir_id snd = op1(m, f, IR_OP_SEND, 1, &g, t2(m, 16, 64, 9), "z9");
        ir_op_set_int(m, m->values[snd].def, "device", 9);
        ir_region_add_result(m, f, snd);
    }
    return m;
}

/* Symmetric simulation (one representative) gives exactly the per-device result. */
static void
test_symmetry(void **state)
{
    (void)state;
    hw_model *hw = test_hw(2, 8);
    for (int tail = 0; tail < 2; tail++) {
        for (int which = 0; which < 2; which++) {
            ir_module *m = which ? spmd_module(tail) : pmap_module();
            sim_options o;
            sim_result *a, *b;
            di_error err;
            char *ja, *jb;
            sim_options_default(&o);
            assert_int_equal(sim_run(m, hw, &o, &a, NULL, NULL, &err), 0);
            o.no_symmetry = 1;
            assert_int_equal(sim_run(m, hw, &o, &b, NULL, NULL, &err), 0);
            ja = sim_result_to_json(a);
            jb = sim_result_to_json(b);
            assert_string_equal(ja, jb);
            /* Without a timeline (the daemon's default), the copies have none either. */
            {
                sim_result *c;
                sim_options_default(&o);
                o.want_timeline = 0;
                assert_int_equal(sim_run(m, hw, &o, &c, NULL, NULL, &err), 0);
                assert_true(c->ndevice == a->ndevice);
                for (uint32_t i = 0; i < c->ndevice; i++) {
                    assert_null(c->devices[i].timeline);
                    assert_int_equal(c->devices[i].peak_memory_bytes,
                                     a->devices[i].peak_memory_bytes);
                }
                sim_result_free(c);
            }
            if (which) {
                /*
                 * MatMul [16,64]x[64,64]: 131,072 FLOPs -> 0.131072 us, bytes
                 * (1024+4096+1024)*4 = 24,576 -> 0.24576 us: memory-bound,
                 * + 10 us launch; Relu: 8,192 B -> 0.08192 us + 10 us;
                 * all-reduce of 4 KiB over 4 (intra-node): 2*3/4*4096/1e11 +
                 * 6 us; then over all 8: 2*7/8*4096/1e11 + 14 us.
                 */
                /*
                 * Then the 4 KiB elements cross to node 1 in parallel pairs:
                 * 5 us + 4096 / 1e10; and a Relu there: 8,192 B / 1e11 + 10 us.
                 */
                double expect = 0.24576e-6 + 1e-5 + 0.08192e-6 + 1e-5 +
                                (1.5 * 4096 / 1e11 + 6e-6) + (1.75 * 4096 / 1e11 + 14e-6) +
                                (5e-6 + 4096 / 1e10) + (0.08192e-6 + 1e-5);
                if (!tail)
                    assert_close(a->step_time_s, expect);
                assert_int_equal(a->ndevice, 16);
            }
            di_free(ja);
            di_free(jb);
            sim_result_free(a);
            sim_result_free(b);
            ir_module_free(m);
        }
    }
    hw_free(hw);
}

/*
 * The cost memos (per op inside bodies, per signature at top level) change
 * nothing: an identity override of one device turns them off, and the
 * results must be the same bytes.
 */
static void
test_cost_memo(void **state)
{
    (void)state;
    hw_model *a = test_hw(2, 8), *b = test_hw(2, 8);
    uint32_t id = 15;
    di_error err;
    assert_int_equal(hw_set_overrides(b, 1, &id, &b->device, &err), 0);
    for (int which = 0; which < 3; which++) {
        ir_module *m;
        if (which == 0) {
            /* Top level: repeated signatures with different attributes and shapes. */
            m = ir_module_new();
            ir_id f = ir_func_new(m, "main");
            ir_id x = ir_region_add_arg(m, f, t2(m, 32, 64, 0), "x");
            ir_id w = ir_region_add_arg(m, f, t2(m, 64, 64, 0), "w");
            for (int i = 0; i < 40; i++) {
                ir_id in[2] = {x, w};
                ir_id y = op1(m, f, IR_OP_MATMUL, 2, in, t2(m, 32, 64, 0), NULL);
                ir_id z = op1(m, f, IR_OP_SOFTMAX, 1, &y, t2(m, 32, 64, 0), NULL);
                ir_op_set_int(m, m->values[z].def, "axis", i % 2);
                x = op1(m, f, i % 3 ? IR_OP_RELU : IR_OP_GELU, 1, &z, t2(m, 32, 64, 0), NULL);
            }
            ir_region_add_result(m, f, x);
        } else {
            m = which == 1 ? pmap_module() : spmd_module(0);
        }
        sim_result *ra = run(m, a, 0), *rb = run(m, b, 0);
        char *ja = sim_result_to_json(ra), *jb = sim_result_to_json(rb);
        assert_string_equal(ja, jb);
        di_free(ja);
        di_free(jb);
        sim_result_free(ra);
        sim_result_free(rb);
        ir_module_free(m);
    }
    hw_free(a);
    hw_free(b);
}

/*
 * A workspace keeps tables between runs: results through one workspace,
 * across modules of different sizes (larger, then smaller, then larger;
 * one of them breaks symmetry and reruns), equal fresh results byte for
 * byte; after a trim it holds nothing and still works.
 */
static void
test_workspace(void **state)
{
    (void)state;
    hw_model *hw = test_hw(2, 8);
    ir_module *mods[4];
    char *fresh[4];
    sim_workspace *ws = sim_workspace_new();
    di_error err;
    mods[0] = spmd_module(0);
    mods[1] = pmap_module();
    mods[2] = spmd_module(1);
    {
        /* A longer chain, so that the tables must grow. */
        ir_module *m = ir_module_new();
        ir_id f = ir_func_new(m, "main");
        ir_id x = ir_region_add_arg(m, f, t2(m, 32, 64, 0), "x");
        for (int i = 0; i < 3000; i++)
            x = op1(m, f, i % 2 ? IR_OP_RELU : IR_OP_GELU, 1, &x, t2(m, 32, 64, 0), NULL);
        ir_region_add_result(m, f, x);
        mods[3] = m;
    }
    for (int i = 0; i < 4; i++) {
        sim_result *r = run(mods[i], hw, 0);
        fresh[i] = sim_result_to_json(r);
        sim_result_free(r);
    }
    for (int round = 0; round < 3; round++) {
        for (int k = 0; k < 4; k++) {
            int i = round == 1 ? 3 - k : k;
            sim_options o;
            sim_result *r = NULL;
            char *j;
            sim_options_default(&o);
            assert_int_equal(sim_run_ws(ws, mods[i], hw, &o, &r, NULL, NULL, &err), 0);
            j = sim_result_to_json(r);
            assert_string_equal(j, fresh[i]);
            di_free(j);
            sim_result_free(r);
        }
        assert_true(sim_workspace_bytes(ws) > 0);
        if (round == 1) {
            sim_workspace_trim(ws, SIZE_MAX);
            assert_true(sim_workspace_bytes(ws) > 0);
            sim_workspace_trim(ws, 0);
            assert_int_equal(sim_workspace_bytes(ws), 0);
        }
    }
    sim_workspace_free(ws);
    for (int i = 0; i < 4; i++) {
        di_free(fresh[i]);
        ir_module_free(mods[i]);
    }
    hw_free(hw);
}

/*
 * Devices a symmetric representative stood for share its timeline: JSON
 * and protobuf write it once and name it from the others
 * ("timeline_same_as" / timeline_shared), by content, so the exact
 * simulation serializes to the same bytes; unpacking restores every
 * device's timeline; a shared timeline naming a device without one of its
 * own is a decoding error.
 */
static void
test_shared_timelines(void **state)
{
    (void)state;
    hw_model *hw = test_hw(2, 8);
    ir_module *m = spmd_module(0);
    sim_options o;
    sim_result *sym, *exact, *back;
    uint8_t *d1, *d2;
    size_t n1, n2;
    di_error err;
    char *js, *je, *jb;
    uint32_t shared = 0;
    sim_options_default(&o);
    assert_int_equal(sim_run(m, hw, &o, &sym, NULL, NULL, &err), 0);
    o.no_symmetry = 1;
    assert_int_equal(sim_run(m, hw, &o, &exact, NULL, NULL, &err), 0);
    for (uint32_t i = 0; i < sym->ndevice; i++)
        shared += sym->devices[i].timeline_shared != 0;
    assert_true(shared >= 8); /* two classes of four (devices 0..7, 8..15), less their reps */
    js = sim_result_to_json(sym);
    je = sim_result_to_json(exact);
    assert_string_equal(js, je);
    assert_non_null(strstr(js, "\"timeline_same_as\":0}"));
    assert_int_equal(sim_result_pack(sym, &d1, &n1), 0);
    assert_int_equal(sim_result_pack(exact, &d2, &n2), 0);
    assert_int_equal(n1, n2);
    assert_memory_equal(d1, d2, n1);
    assert_int_equal(sim_result_unpack(d1, n1, &back, &err), 0);
    jb = sim_result_to_json(back);
    assert_string_equal(jb, je);
    for (uint32_t i = 0; i < back->ndevice; i++) {
        assert_int_equal(back->devices[i].ntimeline, exact->devices[i].ntimeline);
        assert_memory_equal(back->devices[i].timeline, exact->devices[i].timeline,
                            exact->devices[i].ntimeline * sizeof(sim_mempoint));
    }
    sim_result_free(back);
    {
        /* Device 1 names device 0's timeline, but device 0 names device 2's. */
        struct Distir__V1__SimResult *p = sim_result_to_proto(exact);
        assert_true(p->devices[1]->timeline_shared);
        p->devices[0]->timeline_shared = 1;
        p->devices[0]->timeline_device = 2;
        p->devices[2]->timeline_shared = 1;
        p->devices[2]->timeline_device = 1;
        assert_int_not_equal(sim_result_from_proto(p, &back, &err), 0);
        assert_non_null(strstr(err.msg, "shares the timeline of device"));
        assert_null(back);
        sim_result_proto_free(p);
    }
    di_free(d1);
    di_free(d2);
    di_free(js);
    di_free(je);
    di_free(jb);
    sim_result_free(sym);
    sim_result_free(exact);
    ir_module_free(m);
    hw_free(hw);
}

static int
cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* A memory event's key for time t (memory.c's time_key): the time's bits, then the flag. */
static uint64_t
time_key_of(double t, unsigned flag)
{
    uint64_t b;
    memcpy(&b, &t, sizeof b);
    return b << 1 | flag;
}

/*
 * The memory-event sort keeps a sorted subsequence, sets the exceptions
 * aside and merges them back; it must equal a plain sort on every shape:
 * sorted, reversed, a few late or early outliers (fewer and more than the
 * 16 it pops), runs, duplicates, and random data (the radix fallback); and
 * on keys that are times (the bucket pass): a quarter freed late as an
 * interleaved pipeline's activations are, random times over a step, a few
 * instants shared by many events, and nearly all in a sliver of the span
 * (one bucket holding most: its radix sort).
 */
static void
test_sort_keys(void **state)
{
    uint32_t sizes[] = {0, 1, 2, 17, 1000, 70000};
    uint64_t seed = 12345;
    (void)state;
    for (int shape = 0; shape < 13; shape++)
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
            uint32_t n = sizes[si];
            uint64_t *a = malloc((n ? n : 1) * sizeof *a), *b = malloc((n ? n : 1) * sizeof *b);
            for (uint32_t i = 0; i < n; i++) {
                seed = seed * 6364136223846793005ull + 1442695040888963407ull;
                uint64_t r = seed >> 20;
                switch (shape) {
                case 0: a[i] = i; break;                                   /* sorted */
                case 1: a[i] = n - i; break;                               /* reversed */
                case 2: a[i] = r % 50 == 0 ? i + 1000000 : i; break;       /* late outliers */
                case 3: a[i] = r % 50 == 0 ? i / 2 : i; break;             /* early outliers */
                case 4: a[i] = i == 0 ? UINT64_MAX : i; break;             /* one huge first */
                case 5: a[i] = (i % 100) * 7 + i / 100; break;             /* runs */
                case 6: a[i] = r % 8; break;                               /* duplicates */
                case 7: a[i] = r % 50 == 0 ? i / 4 : i + 500; break;       /* below the first */
                case 8: a[i] = r; break;                                   /* random */
                case 9: /* late frees */
                    a[i] = time_key_of(i * 1e-3 + (r % 4 == 0 ? (double)(r % 1000) * 1e-2 : 0), 0);
                    break;
                case 10: /* random times */
                    a[i] = time_key_of((double)(r % 5000000) * 1e-5, r >> 40 & 1);
                    break;
                case 11: a[i] = time_key_of((double)(r % 7) * 3.5, 1); break; /* shared instants */
                default: /* skewed */
                    a[i] = time_key_of(r % 100 == 0 ? 40.0 + (double)(r % 1000)
                                                    : (double)(r % 100000) * 1e-12,
                                       r >> 40 & 1);
                    break;
                }
            }
            memcpy(b, a, n * sizeof *a);
            sim_sort_keys(a, n);
            qsort(b, n, sizeof *b, cmp_u64);
            assert_memory_equal(a, b, n * sizeof *a);
            free(a);
            free(b);
        }
}

/* The token after the one at p in a space-separated list (the end: ""). */
static const char *
next_token(const char *p)
{
    while (*p && *p != ' ')
        p++;
    while (*p == ' ')
        p++;
    return p;
}

/*
 * Single-clock 1F1B (no_overlap: one stream per device, as the original
 * DistIR simulator) against the schedule derived by hand. Two stages, four
 * microbatches, Megatron-LM's order: stage 0 runs F0 F1 B0 F2 B1 F3 B2 B3,
 * stage 1 F0 B0 F1 B1 F2 B2 F3 B3; an activation a_i goes from stage 0 to 1
 * and a gradient g_i back, each a blocking transfer that holds both devices
 * (a rendezvous at the points below, a_i before g_{i-1} on both sides, as
 * the distributed module orders them). The chunks' and transfers' durations
 * come from the simulation's events; the schedule is this test's own. A
 * transfer placed at the producer instead (the old order: stage 1 received
 * a_2 before running B1) made the step 8% longer than this and longer than
 * GPipe's.
 */
static void
test_single_clock_1f1b(void **state)
{
    static const char *const seq[2] = {
        "F0 a0 F1 a1 g0 B0 F2 a2 g1 B1 F3 a3 g2 B2 g3 B3 O",
        "a0 F0 B0 a1 g0 F1 B1 a2 g1 F2 B2 a3 g2 F3 B3 g3 O",
    };
    models_mlp c;
    ir_module *m, *dm;
    hw_model *hw;
    strategy s;
    sim_options o;
    sim_result *r;
    sim_event *ev;
    uint32_t nev;
    di_error err;
    double dur[2][3][4] = {{{0}}}, lo[2][3][4], hi[2][3][4], opt[2] = {0, 0}, T = -1;
    double clock[2] = {0, 0}, expect;
    const char *pos[2];
    (void)state;
    models_mlp_init(&c);
    c.layers = 2;
    c.hidden = 512;
    c.batch = 64;
    assert_int_equal(models_mlp_build(&c, &m, &err), 0);
    assert_int_equal(hw_load("distir-classic:2", &hw, &err), 0);
    xform_strategy_init(&s);
    s.pp = 2;
    s.microbatches = 4;
    s.schedule = STRATEGY_SCHEDULE_1F1B;
    if (xform_apply(m, &s, hw, &dm, &err) != 0)
        fail_msg("%s", err.msg);
    sim_options_default(&o);
    o.no_overlap = 1;
    if (sim_run(dm, hw, &o, &r, &ev, &nev, &err) != 0)
        fail_msg("%s", err.msg);
    for (int d = 0; d < 2; d++)
        for (int k = 0; k < 3; k++)
            for (int i = 0; i < 4; i++)
                lo[d][k][i] = INFINITY, hi[d][k][i] = -INFINITY;
    for (uint32_t i = 0; i < nev; i++) {
        const sim_event *e = &ev[i];
        const char *ph;
        int k, mb;
        if (e->stream == 1 || e->stream == 2) {
            double t = e->end - e->start;
            if (T >= 0)
                assert_true(fabs(t - T) <= 1e-12 * T); /* equal activations and gradients */
            T = t;
            continue;
        }
        assert_true(e->chunk != 0 && e->device >= 0 && e->device < 2);
        ph = ir_op_string(dm, e->chunk, "dist.phase", "");
        k = ph[0] == 'f' ? 0 : ph[0] == 'b' ? 1 : 2;
        mb = (int)ir_op_int(dm, e->chunk, "dist.mb", 0);
        assert_true(mb >= 0 && mb < 4);
        if (e->start < lo[e->device][k][mb])
            lo[e->device][k][mb] = e->start;
        if (e->end > hi[e->device][k][mb])
            hi[e->device][k][mb] = e->end;
        if (k == 2)
            opt[e->device] += e->end - e->start;
        else
            dur[e->device][k][mb] += e->end - e->start;
    }
    assert_true(T > 0);
    /* A chunk runs without a gap on one clock: its ops' durations add up to its span. */
    for (int d = 0; d < 2; d++)
        for (int k = 0; k < 2; k++)
            for (int i = 0; i < 4; i++)
                assert_true(fabs(hi[d][k][i] - lo[d][k][i] - dur[d][k][i]) < 1e-9);
    /* The hand-derived schedule: chunks in each device's order, transfers as rendezvous. */
    pos[0] = seq[0];
    pos[1] = seq[1];
    while (*pos[0] || *pos[1]) {
        int moved = 0;
        for (int d = 0; d < 2; d++) {
            char t = *pos[d];
            if (t == 'F' || t == 'B') {
                clock[d] += dur[d][t == 'B'][pos[d][1] - '0'];
            } else if (t == 'O') {
                clock[d] += opt[d];
            } else if (t == 'a' || t == 'g') {
                /* Both devices at the same transfer: it starts when both are free. */
                if (strncmp(pos[d], pos[1 - d], 2) != 0)
                    continue;
                clock[0] = clock[1] = fmax(clock[0], clock[1]) + T;
                pos[1 - d] = next_token(pos[1 - d]);
            } else {
                continue;
            }
            pos[d] = next_token(pos[d]);
            moved = 1;
        }
        assert_true(moved);
    }
    expect = fmax(clock[0], clock[1]);
    if (fabs(r->step_time_s - expect) > 1e-9 * expect)
        fail_msg("single-clock 1F1B: simulated %.9g s, hand-derived %.9g s", r->step_time_s,
                 expect);
    di_free(ev);
    sim_result_free(r);
    ir_module_free(dm);
    ir_module_free(m);
    hw_free(hw);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roofline),
        cmocka_unit_test(test_roofline_memory_bound),
        cmocka_unit_test(test_send_links),
        cmocka_unit_test(test_ring_allreduce),
        cmocka_unit_test(test_overlap),
        cmocka_unit_test(test_link_contention),
        cmocka_unit_test(test_link_duplex),
        cmocka_unit_test(test_link_levels),
        cmocka_unit_test(test_communicators),
        cmocka_unit_test(test_memory_chain),
        cmocka_unit_test(test_group_order),
        cmocka_unit_test(test_hierarchical_gather),
        cmocka_unit_test(test_oom),
        cmocka_unit_test(test_oom_reserve),
        cmocka_unit_test(test_host_overhead),
        cmocka_unit_test(test_tf32),
        cmocka_unit_test(test_fusion),
        cmocka_unit_test(test_fusion_wgrad),
        cmocka_unit_test(test_fusion_softmax_kernel),
        cmocka_unit_test(test_gemm_waves),
        cmocka_unit_test(test_host_sync_on_receive),
        cmocka_unit_test(test_memory_classes),
        cmocka_unit_test(test_opaque_needs_profile),
        cmocka_unit_test(test_xform_cost),
        cmocka_unit_test(test_device_out_of_range),
        cmocka_unit_test(test_pmap),
        cmocka_unit_test(test_deterministic),
        cmocka_unit_test(test_trace),
        cmocka_unit_test(test_random_invariants),
        cmocka_unit_test(test_cancel),
        cmocka_unit_test(test_result_proto),
        cmocka_unit_test(test_symmetry),
        cmocka_unit_test(test_cost_memo),
        cmocka_unit_test(test_sort_keys),
        cmocka_unit_test(test_workspace),
        cmocka_unit_test(test_shared_timelines),
        cmocka_unit_test(test_single_clock_1f1b),
        cmocka_unit_test(test_compare_settings),
        cmocka_unit_test(test_flashattn_exponentials),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
