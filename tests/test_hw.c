/*
 * test_hw.c: the hardware model. Presets carry the figures documented in
 * docs/hardware.md; JSON and protobuf round trips keep the hash; JSON errors
 * name the field; the measured vTrain all-reduce tables load and interpolate;
 * op times are found by signature; the hash sees every figure and no label.
 * Run from the repository root (the vTrain data is at ../shared/data/...).
 */
/* cmocka needs these four first, in this order. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "distir.pb-c.h"
#include "ir/ir.h"
#include "sim/hw.h"
#include "sim/sim.h"

#define GIB 1073741824.0
/* vTrain's measured NCCL all-reduce tables, in the repository (tests/data/vtrain/README.md). */
#define VTRAIN_A100 "tests/data/vtrain/allreduce/a100"

static hw_model *
preset(const char *name)
{
    hw_model *hw = NULL;
    di_error err;
    di_error_clear(&err);
    if (hw_preset(name, &hw, &err) != 0)
        fail_msg("preset %s: %s", name, err.msg);
    assert_int_equal(hw_validate(hw, &err), 0);
    return hw;
}

static int
hash_equal(const hw_model *a, const hw_model *b)
{
    di_hash x, y;
    hw_hash(a, &x);
    hw_hash(b, &y);
    return memcmp(x.b, y.b, sizeof x.b) == 0;
}

/* A fresh temporary directory (removed by the caller with rm_tree). */
static void
temp_dir(char *out, size_t size)
{
    snprintf(out, size, "/tmp/test_hw.XXXXXX");
    assert_non_null(mkdtemp(out));
}

static void
write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

static void
rm_tree(const char *dir)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

/* ---- presets ---- */

static void
test_preset_names(void **state)
{
    const char *const *names = hw_preset_names();
    size_t n = 0;
    (void)state;
    for (; names[n]; n++) {
        hw_model *hw = preset(names[n]);
        assert_string_equal(hw->name, names[n]);
        assert_int_equal(hw->ndevice, hw->num_nodes * hw->devices_per_node);
        hw_free(hw);
    }
    assert_int_equal(n, 7);
}

/* vTrain's cluster: a100-dgx's devices, 800 Gb/s per node between nodes (12.5 GB/s per GPU). */
static void
test_preset_vtrain(void **state)
{
    hw_model *hw = preset("a100-vtrain:4"), *dgx = preset("a100-dgx:4");
    (void)state;
    assert_int_equal(hw->ndevice, 32);
    assert_memory_equal(&hw->device.flops, &dgx->device.flops, sizeof hw->device.flops);
    assert_true(hw->device.memory_bytes == dgx->device.memory_bytes);
    assert_true(hw->inter_node.bandwidth == 12.5e9);
    assert_true(hw->inter_node.bandwidth * 8 * 8 == 800e9);
    assert_true(hw->device.sms == 108 && dgx->device.sms == 108);
    {
        /*
         * The intra-node link is what the measured all-reduce tables give
         * (sim_fit_intra_link, as `distir calibrate --allreduce-lut` fits it),
         * not NVLink's 300 GB/s, which the tables reach only at 76%.
         */
        hw_model *fit = preset("a100-vtrain");
        hw_link l;
        double mape = -1;
        di_error err;
        char path[128];
        for (int g = 2; g <= 8; g++) {
            snprintf(path, sizeof path, "tests/data/vtrain/allreduce/a100/AR_GPU%d_1M_1024M_LUT.csv",
                     g);
            assert_int_equal(hw_load_collective_csv(fit, IR_OP_ALLREDUCE, (uint32_t)g, 0, path, &err),
                             0);
        }
        assert_int_equal(sim_fit_intra_link(fit, &l, &mape), 7 * 1024);
        assert_true(fabs(l.bandwidth - hw->intra_node.bandwidth) <= 0.005 * l.bandwidth);
        assert_true(fabs(l.latency - hw->intra_node.latency) <= 0.01 * l.latency);
        assert_true(mape > 0 && mape < 6);
        assert_true(hw->intra_node.bandwidth < dgx->intra_node.bandwidth);
        /* Fitted from the physical figures instead: the same link. */
        {
            double m2;
            hw_link mine = l;
            fit->intra_node = dgx->intra_node;
            assert_int_equal(sim_fit_intra_link(fit, &mine, &m2), 7 * 1024);
            assert_true(m2 == mape); /* the fit does not depend on where it starts */
        }
        hw_free(fit);
    }
    hw_free(hw);
    hw_free(dgx);
}

static void
test_preset_v100(void **state)
{
    hw_model *hw = preset("v100-dgx1");
    (void)state;
    assert_int_equal(hw->num_nodes, 1);
    assert_int_equal(hw->ndevice, 8);
    assert_string_equal(hw->device.kind, "V100-SXM2-32GB");
    assert_true(hw->device.flops[IR_F16] == 125e12);
    assert_true(hw->device.flops[IR_F32] == 15.7e12);
    assert_true(hw->device.flops[IR_BF16] == 0);
    assert_true(hw->device.flops_tf32 == 0);
    assert_true(hw->device.memory_bytes == 32 * GIB);
    assert_true(hw->device.memory_bandwidth == 900e9);
    assert_true(hw->intra_node.bandwidth == 150e9);  /* 300 GB/s bidirectional / 2 */
    assert_true(hw->inter_node.bandwidth == 6.25e9); /* 4 x 100 Gb/s / 8 bits / 8 GPUs */
    assert_true(hw->device.launch_overhead == 4e-6);
    hw_free(hw);
}

static void
test_preset_a100(void **state)
{
    hw_model *hw = preset("a100-dgx:2");
    (void)state;
    assert_string_equal(hw->name, "a100-dgx:2");
    assert_int_equal(hw->num_nodes, 2);
    assert_int_equal(hw->devices_per_node, 8);
    assert_int_equal(hw->ndevice, 16);
    assert_int_equal(hw_node_of(hw, 9), 1);
    assert_int_equal(hw_node_of(hw, 7), 0);
    assert_true(hw->intra_node.bandwidth == 3e11);
    assert_true(hw->inter_node.bandwidth == 2.5e10);
    assert_ptr_equal(hw_link_between(hw, 0, 7), &hw->intra_node);
    assert_ptr_equal(hw_link_between(hw, 7, 8), &hw->inter_node);
    assert_ptr_equal(hw_link_between(hw, 9, 15), &hw->intra_node);
    assert_true(hw->device.flops[IR_F16] == 312e12);
    assert_true(hw->device.flops[IR_BF16] == 312e12);
    assert_true(hw->device.flops[IR_F32] == 19.5e12);
    assert_true(hw->device.flops_tf32 == 156e12);
    assert_true(hw->device.memory_bytes == 80 * GIB);
    /* The process's reserve: 1 GiB plus 5% (docs/hardware.md): 75 GiB usable. */
    assert_true(hw->device.memory_reserved == GIB + 0.05 * 80 * GIB);
    assert_true(hw->device.memory_bandwidth == 2039e9);
    assert_true(hw->device.max_efficiency == 0.8);
    assert_true(hw->device.half_flops == 5e8);
    assert_true(hw->device.elementwise_efficiency == 0.8);
    assert_int_equal(hw->algorithm, HW_ALGO_AUTO);
    assert_ptr_equal(hw_device_spec(hw, 3), &hw->device);
    hw_free(hw);

    hw = preset("a100-40g-dgx");
    assert_int_equal(hw->ndevice, 8);
    assert_true(hw->device.memory_bytes == 40 * GIB);
    assert_true(hw->device.memory_bandwidth == 1555e9);
    assert_true(hw->device.flops[IR_F16] == 312e12);
    hw_free(hw);
}

static void
test_preset_hopper(void **state)
{
    hw_model *hw = preset("h100-dgx:4");
    (void)state;
    assert_int_equal(hw->ndevice, 32);
    assert_true(hw->device.flops[IR_F16] == 989e12);
    assert_true(hw->device.flops[IR_BF16] == 989e12);
    assert_true(hw->device.flops_tf32 == 495e12);
    assert_true(hw->device.flops[IR_F32] == 67e12);
    assert_true(hw->device.flops[IR_I8] == 1979e12);
    assert_true(hw->device.memory_bandwidth == 3350e9);
    assert_true(hw->device.memory_bytes == 80 * GIB);
    assert_true(hw->intra_node.bandwidth == 450e9);
    assert_true(hw->inter_node.bandwidth == 50e9);
    hw_free(hw);

    hw = preset("h200-dgx");
    assert_true(hw->device.memory_bytes == 141 * GIB);
    assert_true(hw->device.memory_bandwidth == 4800e9);
    assert_true(hw->device.flops[IR_F16] == 989e12);
    assert_true(hw->intra_node.bandwidth == 450e9);
    hw_free(hw);
}

static void
test_preset_classic(void **state)
{
    hw_model *hw = preset("distir-classic");
    (void)state;
    assert_int_equal(hw->ndevice, 8);
    assert_int_equal(hw->devices_per_node, 1);
    assert_int_equal(hw->num_nodes, 8);
    assert_int_equal(hw_node_of(hw, 5), 5);
    assert_true(hw->device.flops[IR_F32] == 1.4e13);
    assert_true(hw->device.flops[IR_F16] == 1.4e13);
    assert_true(hw->device.flops[IR_BF16] == 1.4e13);
    assert_true(hw->device.flops[IR_F64] == 1.4e13);
    assert_true(hw->device.memory_bandwidth == 9e11);
    assert_true(hw->device.launch_overhead == 1e-5);
    assert_true(hw->device.max_efficiency == 1.0);
    assert_true(hw->device.half_flops == 0);
    assert_true(hw->device.elementwise_efficiency == 1.0);
    assert_true(hw->device.memory_bytes == 16 * GIB);
    assert_true(hw->intra_node.bandwidth == 3.125e9);
    assert_true(hw->inter_node.bandwidth == 3.125e9);
    assert_true(hw->intra_node.latency == 0 && hw->inter_node.latency == 0);
    assert_true(hw->collective_step_latency == 0);
    assert_int_equal(hw->algorithm, HW_ALGO_RING);
    assert_ptr_equal(hw_link_between(hw, 0, 1), &hw->inter_node);
    hw_free(hw);

    hw = preset("distir-classic:3");
    assert_int_equal(hw->ndevice, 3);
    hw_free(hw);
}

static void
test_preset_errors(void **state)
{
    static const struct {
        const char *name;
        int code;
        const char *msg;
    } cases[] = {
        {"tpu-v9", DI_ENOTFOUND, "unknown hardware preset 'tpu-v9' (known: v100-dgx1, a100-dgx"},
        {"a100-dgx:0", DI_EINVAL, "expected a100-dgx:N with N from 1 to 131072"},
        {"a100-dgx:", DI_EINVAL, "expected a100-dgx:N"},
        {"a100-dgx:x", DI_EINVAL, "expected a100-dgx:N"},
        {"a100-dgx:-1", DI_EINVAL, "expected a100-dgx:N"},
        {"a100-dgx:131073", DI_EINVAL, "expected a100-dgx:N"},
        {"a100-dgx:99999999999999999999", DI_EINVAL, "expected a100-dgx:N"},
        {"distir-classic:1048577", DI_EINVAL, "N from 1 to 1048576"},
    };
    hw_model *hw;
    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        di_error err;
        di_error_clear(&err);
        assert_int_equal(hw_preset(cases[i].name, &hw, &err), cases[i].code);
        assert_null(hw);
        if (strstr(err.msg, cases[i].msg) == NULL)
            fail_msg("%s: message '%s' lacks '%s'", cases[i].name, err.msg, cases[i].msg);
    }
    hw = preset("a100-dgx:131072");
    assert_int_equal(hw->ndevice, HW_MAX_DEVICES);
    hw_free(hw);
}

/* ---- JSON ---- */

static hw_model *
json_ok(const char *text)
{
    hw_model *hw = NULL;
    di_error err;
    di_error_clear(&err);
    if (hw_from_json(text, strlen(text), &hw, &err) != 0)
        fail_msg("hw_from_json: %s\n%s", err.msg, text);
    return hw;
}

/* Round trip: the reparsed model has the same hash and prints identically. */
static void
check_json_round_trip(const hw_model *hw)
{
    char *a = hw_to_json(hw), *b;
    hw_model *back = json_ok(a);
    assert_true(hash_equal(hw, back));
    assert_string_equal(back->name, hw->name);
    b = hw_to_json(back);
    assert_string_equal(a, b);
    di_free(a);
    di_free(b);
    hw_free(back);
}

static void
test_json_round_trip(void **state)
{
    const char *const *names = hw_preset_names();
    (void)state;
    for (size_t i = 0; names[i]; i++) {
        char name[64];
        hw_model *hw = preset(names[i]);
        check_json_round_trip(hw);
        hw_free(hw);
        snprintf(name, sizeof name, "%s:3", names[i]);
        hw = preset(name);
        check_json_round_trip(hw);
        hw_free(hw);
    }
}

#define COUNTS "\"num_nodes\": 2, \"devices_per_node\": 8"
#define DEVICE                                                                                     \
    "\"device\": {\"flops\": {\"f16\": 3.12e14}, \"memory_bytes\": 8e10, "                         \
    "\"memory_bandwidth\": 2e12}"
#define LINKS "\"intra_node\": {\"bandwidth\": 3e11}, \"inter_node\": {\"bandwidth\": 2.5e10}"
#define MINIMAL "{" COUNTS ", " DEVICE ", " LINKS "}"

static void
test_json_minimal(void **state)
{
    hw_model *hw = json_ok(MINIMAL);
    (void)state;
    assert_string_equal(hw->name, "");
    assert_int_equal(hw->ndevice, 16);
    assert_true(hw->device.flops[IR_F16] == 3.12e14);
    assert_true(hw->device.flops[IR_F32] == 0);
    /* Optional figures default to the plain roofline. */
    assert_true(hw->device.max_efficiency == 1);
    assert_true(hw->device.elementwise_efficiency == 1);
    assert_true(hw->device.half_flops == 0);
    assert_true(hw->device.launch_overhead == 0);
    assert_true(hw->intra_node.latency == 0);
    assert_true(hw->collective_step_latency == 0);
    assert_int_equal(hw->algorithm, HW_ALGO_AUTO);
    check_json_round_trip(hw);
    hw_free(hw);
}

static void
test_json_errors(void **state)
{
    static const struct {
        const char *text;
        const char *msg;
    } cases[] = {
        /* malformed JSON */
        {"{", "1:1: malformed JSON: "},
        {"", "malformed JSON"},
        {"{\"num_nodes\": 1, \"num_nodes\": 2}", "duplicate object key"},
        {"[1, 2]", "hardware: expected a JSON object, got an array"},
        /* wrong types */
        {"{" COUNTS ", \"device\": {\"flops\": {\"f16\": 1e14}, \"memory_bytes\": 8e10, "
         "\"memory_bandwidth\": \"fast\"}, " LINKS "}",
         "device.memory_bandwidth: expected a positive number, got a string"},
        {"{\"num_nodes\": 2.5, \"devices_per_node\": 8, " DEVICE ", " LINKS "}",
         "num_nodes: expected an integer from 1 to 1048576, got 2.5"},
        {"{" COUNTS ", " DEVICE ", " LINKS ", \"name\": 7}", "name: expected a string, got 7"},
        {"{" COUNTS ", \"device\": [], " LINKS "}", "device: expected an object, got an array"},
        /* out of range */
        {"{" COUNTS ", \"device\": {\"flops\": {\"f16\": 1e14}, \"memory_bytes\": 8e10, "
         "\"memory_bandwidth\": -1}, " LINKS "}",
         "device.memory_bandwidth: expected a positive number, got -1"},
        {"{" COUNTS ", \"device\": {\"flops\": {\"f16\": -3}, \"memory_bytes\": 8e10, "
         "\"memory_bandwidth\": 1e12}, " LINKS "}",
         "device.flops.f16: expected a number >= 0, got -3"},
        {"{" COUNTS ", \"device\": {\"flops\": {\"f16\": 1e14}, \"memory_bytes\": 8e10, "
         "\"memory_bandwidth\": 1e12, \"max_efficiency\": 1.5}, " LINKS "}",
         "device.max_efficiency: expected a number in (0, 1], got 1.5"},
        {"{" COUNTS ", \"device\": {\"flops\": {\"f16\": 1e14}, \"memory_bytes\": 8e10, "
         "\"memory_bandwidth\": 1e12, \"memory_reserved\": 8e10}, " LINKS "}",
         "device.memory_reserved: 80000000000 bytes leave nothing of memory_bytes 80000000000"},
        {"{" COUNTS ", \"device\": {\"flops\": {\"f16\": 0}, \"memory_bytes\": 8e10, "
         "\"memory_bandwidth\": 1e12}, " LINKS "}",
         "device.flops: expected a positive peak for at least one dtype"},
        {"{\"num_nodes\": 0, \"devices_per_node\": 8, " DEVICE ", " LINKS "}",
         "num_nodes: expected an integer from 1 to 1048576, got 0"},
        {"{\"num_nodes\": 2048, \"devices_per_node\": 1024, " DEVICE ", " LINKS "}",
         "num_nodes * devices_per_node: 2097152 devices exceed the limit of 1048576"},
        {"{" COUNTS ", " DEVICE ", \"intra_node\": {\"bandwidth\": 3e11, \"latency\": -1e-6}, "
         "\"inter_node\": {\"bandwidth\": 1e10}}",
         "intra_node.latency: expected a number >= 0, got -1e-06"},
        {"{" COUNTS ", " DEVICE ", " LINKS ", \"algorithm\": \"fastest\"}",
         "algorithm: expected one of \"auto\", \"ring\""},
        /* unknown keys */
        {"{" COUNTS ", \"device\": {\"flops\": {\"f16\": 1e14}, \"memry_bytes\": 8e10, "
         "\"memory_bandwidth\": 1e12}, " LINKS "}",
         "device: unknown key \"memry_bytes\" (expected one of: kind, flops, memory_bytes"},
        {"{" COUNTS ", " DEVICE ", " LINKS ", \"nodes\": 3}", "unknown key \"nodes\""},
        {"{" COUNTS ", \"device\": {\"flops\": {\"fp8\": 1e14}, \"memory_bytes\": 8e10, "
         "\"memory_bandwidth\": 1e12}, " LINKS "}",
         "device.flops: unknown key \"fp8\""},
        /* missing required fields */
        {"{" COUNTS ", " DEVICE ", \"intra_node\": {\"bandwidth\": 3e11}}",
         "inter_node: missing (required)"},
        {"{" COUNTS ", \"device\": {\"flops\": {\"f16\": 1e14}, \"memory_bytes\": 8e10}, " LINKS
         "}",
         "device.memory_bandwidth: missing (required)"},
        {"{\"devices_per_node\": 8, " DEVICE ", " LINKS "}", "num_nodes: missing (required)"},
        {"{" COUNTS ", " DEVICE ", \"intra_node\": {\"latency\": 1e-6}, " LINKS "}",
         "duplicate object key"},
        {"{" COUNTS ", " DEVICE ", \"intra_node\": {\"latency\": 1e-6}, "
         "\"inter_node\": {\"bandwidth\": 1e10}}",
         "intra_node.bandwidth: missing (required)"},
        /* overrides */
        {"{" COUNTS ", " DEVICE ", " LINKS ", \"overrides\": [{\"device\": 16, \"spec\": {}}]}",
         "overrides[0].device: expected an integer from 0 to 15, got 16"},
        {"{" COUNTS ", " DEVICE ", " LINKS ", \"overrides\": [{\"device\": 3, \"spec\": {}}, "
         "{\"device\": 3, \"spec\": {}}]}",
         "overrides[1].device: device 3 is given twice"},
        {"{" COUNTS ", " DEVICE ", " LINKS ", \"overrides\": [{\"device\": 3}]}",
         "overrides[0].spec: missing (required)"},
        {"{" COUNTS ", " DEVICE ", " LINKS
         ", \"overrides\": [{\"device\": 3, \"spec\": {\"half_flops\": -2}}]}",
         "overrides[0].spec.half_flops: expected a number >= 0, got -2"},
        /* calibration */
        {"{" COUNTS ", " DEVICE ", " LINKS ", \"calibration\": {\"collectives\": [{\"op\": "
         "\"all_reduce\", \"group\": 8, \"csv\": \"x.csv\"}]}}",
         "calibration.collectives[0].csv: a file reference is allowed only in a file loaded"},
        {"{" COUNTS ", " DEVICE ", " LINKS ", \"calibration\": {\"op_times\": \"t.csv\"}}",
         "calibration.op_times: a file reference is allowed only"},
        {"{" COUNTS ", " DEVICE ", " LINKS ", \"calibration\": {\"collectives\": [{\"op\": "
         "\"all_reduce\", \"group\": 8, \"points\": [[0, 1e-5]]}]}}",
         "calibration.collectives[0].points[0]: expected a pair [bytes, seconds] of positive"},
        {"{" COUNTS ", " DEVICE ", " LINKS ", \"calibration\": {\"collectives\": [{\"op\": "
         "\"matmul\", \"group\": 8, \"points\": [[1, 1e-5]]}]}}",
         "calibration.collectives[0].op: expected a communication op"},
        {"{" COUNTS ", " DEVICE ", " LINKS ", \"calibration\": {\"collectives\": [{\"op\": "
         "\"all_reduce\", \"group\": 8}]}}",
         "calibration.collectives[0]: expected exactly one of \"csv\" and \"points\""},
        {"{" COUNTS ", " DEVICE ", " LINKS ", \"calibration\": {\"collectives\": ["
         "{\"op\": \"all_reduce\", \"group\": 8, \"points\": [[1, 1e-5]]},"
         "{\"op\": \"all_reduce\", \"group\": 8, \"points\": [[2, 1e-5]]}]}}",
         "calibration.collectives[1]: a second table for op all_reduce, group 8"},
        {"{" COUNTS ", " DEVICE ", " LINKS ", \"calibration\": {\"op_times\": {\"Relu(f32[4])\": "
         "-1}}}",
         "calibration.op_times[\"Relu(f32[4])\"]: expected seconds >= 0, got -1"},
    };
    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        hw_model *hw = (hw_model *)1;
        di_error err;
        di_error_clear(&err);
        if (hw_from_json(cases[i].text, strlen(cases[i].text), &hw, &err) == 0)
            fail_msg("case %zu parsed: %s", i, cases[i].text);
        assert_null(hw);
        if (strstr(err.msg, cases[i].msg) == NULL)
            fail_msg("case %zu: message '%s' lacks '%s'", i, err.msg, cases[i].msg);
    }
}

static void
test_json_override(void **state)
{
    static const char text[] =
        "{\"name\": \"mixed\", \"num_nodes\": 2, \"devices_per_node\": 8, "
        "\"device\": {\"kind\": \"A100\", \"flops\": {\"f16\": 3.12e14, \"f32\": 1.95e13}, "
        "\"memory_bytes\": 8e10, \"memory_bandwidth\": 2e12, \"max_efficiency\": 0.8}, "
        "\"overrides\": [{\"device\": 9, \"spec\": {\"kind\": \"slow\", "
        "\"flops\": {\"f16\": 1.5e14}}}, {\"device\": 2, \"spec\": {\"memory_bytes\": 4e10}}], "
        "\"intra_node\": {\"bandwidth\": 3e11}, \"inter_node\": {\"bandwidth\": 2.5e10}}";
    hw_model *hw = json_ok(text);
    const hw_device *d9, *d2, *d8;
    (void)state;
    assert_int_equal(hw->noverride, 2);
    assert_int_equal(hw->override_ids[0], 2); /* sorted by id */
    d9 = hw_device_spec(hw, 9);
    d2 = hw_device_spec(hw, 2);
    d8 = hw_device_spec(hw, 8);
    assert_ptr_equal(d8, &hw->device);
    assert_string_equal(d9->kind, "slow");
    assert_true(d9->flops[IR_F16] == 1.5e14);
    assert_true(d9->flops[IR_F32] == 1.95e13); /* merged from the default */
    assert_true(d9->memory_bytes == 8e10);
    assert_true(d9->max_efficiency == 0.8);
    assert_string_equal(d2->kind, "A100");
    assert_true(d2->memory_bytes == 4e10);
    assert_true(d2->flops[IR_F16] == 3.12e14);
    check_json_round_trip(hw);
    hw_free(hw);
}

static void
test_set_overrides(void **state)
{
    hw_model *hw = preset("a100-dgx");
    hw_device specs[2];
    uint32_t ids[2] = {5, 1};
    di_error err;
    (void)state;
    specs[0] = hw->device;
    specs[1] = hw->device;
    specs[0].flops[IR_F16] = 1e14;
    specs[1].memory_bytes = 1e9;
    specs[1].memory_reserved = 0; /* the default reserve (5 GiB) exceeds 1 GB */
    assert_int_equal(hw_set_overrides(hw, 2, ids, specs, &err), 0);
    assert_true(hw_device_spec(hw, 5)->flops[IR_F16] == 1e14);
    assert_true(hw_device_spec(hw, 1)->memory_bytes == 1e9);
    assert_ptr_equal(hw_device_spec(hw, 0), &hw->device);
    assert_int_equal(hw_validate(hw, &err), 0);
    ids[1] = 8;
    di_error_clear(&err);
    assert_int_equal(hw_set_overrides(hw, 2, ids, specs, &err), DI_EINVAL);
    assert_non_null(strstr(err.msg, "overrides[1].device: expected a device id below 8, got 8"));
    assert_int_equal(hw->noverride, 2); /* unchanged */
    ids[1] = 5;
    assert_int_equal(hw_set_overrides(hw, 2, ids, specs, &err), DI_EINVAL);
    assert_non_null(strstr(err.msg, "device 5 is given twice"));
    hw_free(hw);
}

/* ---- hash ---- */

static void
test_hash(void **state)
{
    hw_model *base = preset("a100-dgx:2"), *c;
    di_error err;
    double *figures[64];
    size_t nfig = 0;
    (void)state;
    /* Labels do not change the hash. */
    c = hw_clone(base);
    snprintf(c->name, sizeof c->name, "something else");
    snprintf(c->device.kind, sizeof c->device.kind, "relabelled");
    assert_true(hash_equal(base, c));
    hw_free(c);

    /* Every figure does: change each in a copy. */
    c = hw_clone(base);
    for (int t = 1; t < IR_NDTYPE; t++)
        figures[nfig++] = &c->device.flops[t];
    figures[nfig++] = &c->device.flops_tf32;
#define FIG_(name, rule) figures[nfig++] = &c->device.name;
    HW_DEVICE_FIGURES(FIG_)
#undef FIG_
    figures[nfig++] = &c->intra_node.bandwidth;
    figures[nfig++] = &c->intra_node.latency;
    figures[nfig++] = &c->inter_node.bandwidth;
    figures[nfig++] = &c->inter_node.latency;
    figures[nfig++] = &c->collective_step_latency;
    for (size_t i = 0; i < nfig; i++) {
        double old = *figures[i];
        *figures[i] = old == 0 ? 1e-9 : old * 0.5;
        if (hash_equal(base, c))
            fail_msg("figure %zu does not change the hash", i);
        *figures[i] = old;
        assert_true(hash_equal(base, c));
    }
    c->algorithm = HW_ALGO_TREE;
    assert_false(hash_equal(base, c));
    c->algorithm = base->algorithm;
    c->num_nodes = 1;
    c->devices_per_node = 16;
    assert_false(hash_equal(base, c));
    c->num_nodes = 2;
    c->devices_per_node = 8;
    assert_true(hash_equal(base, c));
    {
        hw_device spec = c->device;
        uint32_t id = 3;
        assert_int_equal(hw_set_overrides(c, 1, &id, &spec, &err), 0);
        assert_false(hash_equal(base, c)); /* an override is content, even an identical one */
        assert_int_equal(hw_set_overrides(c, 0, NULL, NULL, &err), 0);
        assert_true(hash_equal(base, c));
    }
    {
        double b[2] = {1e6, 2e6}, s[2] = {1e-5, 2e-5};
        assert_int_equal(hw_add_table(c, IR_OP_ALLREDUCE, 8, 0, 2, b, s, &err), 0);
        assert_false(hash_equal(base, c));
    }
    hw_free(c);
    c = hw_clone(base);
    assert_int_equal(hw_add_op_time(c, "Relu(f32[4])", 1e-6, &err), 0);
    assert_false(hash_equal(base, c));
    hw_free(c);
    /* A preset with :N names the same hardware as the default count. */
    c = preset("a100-dgx:1");
    hw_free(base);
    base = preset("a100-dgx");
    assert_true(hash_equal(base, c));
    hw_free(c);
    hw_free(base);
}

/* ---- calibration tables ---- */

/* Reads the first n data rows of a vTrain CSV independently of the library. */
static int
read_rows(const char *path, double *bytes, double *ns, int n)
{
    FILE *f = fopen(path, "r");
    char line[512];
    int k = 0;
    if (f == NULL)
        return -1;
    if (fgets(line, sizeof line, f) == NULL) {
        fclose(f);
        return -1;
    }
    while (k < n && fgets(line, sizeof line, f)) {
        char type[32];
        long long count;
        if (sscanf(line, "%lf,%lld,%31[^,],%lf", &bytes[k], &count, type, &ns[k]) == 4)
            k++;
    }
    fclose(f);
    return k;
}

static void
test_vtrain_tables(void **state)
{
    hw_model *hw;
    di_error err;
    struct stat st;
    (void)state;
    if (stat(VTRAIN_A100, &st) != 0)
        fail_msg("%s not found (the tests run from the repository root)", VTRAIN_A100);
    hw = preset("a100-dgx");
    for (uint32_t n = 2; n <= 8; n++) {
        char path[256];
        double b[3], ns[3], t0, t1, mid;
        snprintf(path, sizeof path, VTRAIN_A100 "/AR_GPU%u_1M_1024M_LUT.csv", n);
        di_error_clear(&err);
        if (hw_load_collective_csv(hw, IR_OP_ALLREDUCE, n, 0, path, &err) != 0)
            fail_msg("%s: %s", path, err.msg);
        assert_int_equal(read_rows(path, b, ns, 3), 3);
        /* Exact at measured sizes. */
        t0 = hw_table_time(hw, IR_OP_ALLREDUCE, n, 0, b[0]);
        t1 = hw_table_time(hw, IR_OP_ALLREDUCE, n, 0, b[1]);
        assert_true(t0 == ns[0] / 1e9);
        assert_true(t1 == ns[1] / 1e9);
        /* Between two sizes: between their times. */
        mid = hw_table_time(hw, IR_OP_ALLREDUCE, n, 0, (b[0] + b[1]) / 2);
        assert_true(mid >= fmin(t0, t1) && mid <= fmax(t0, t1));
        /* Beyond the ends: above grows, below stays positive and no larger. */
        {
            double t_end = hw_table_time(hw, IR_OP_ALLREDUCE, n, 0, 1073741824.0);
            double t_big = hw_table_time(hw, IR_OP_ALLREDUCE, n, 0, 2 * 1073741824.0);
            double t_small = hw_table_time(hw, IR_OP_ALLREDUCE, n, 0, 1024);
            assert_true(t_end > 0 && t_big > t_end && t_big < 3 * t_end);
            assert_true(t_small > 0 && t_small <= t0);
        }
    }
    assert_int_equal(hw->ntable, 7);
    assert_int_equal(hw->tables[0].npoint, 1024);
    assert_true(hw_table_time(hw, IR_OP_ALLREDUCE, 16, 0, 1e6) < 0); /* no table */
    assert_true(hw_table_time(hw, IR_OP_ALLREDUCE, 8, 1, 1e6) < 0);  /* inter-node: none */
    assert_true(hw_table_time(hw, IR_OP_ALLGATHER, 8, 0, 1e6) < 0);
    assert_int_equal(hw_validate(hw, &err), 0);
    check_json_round_trip(hw);
    {
        hw_model *c = hw_clone(hw);
        assert_true(hash_equal(hw, c));
        hw_free(c);
    }
    hw_free(hw);

    /* The same tables through a hardware file with a relative CSV path. */
    {
        char dir[64], json[128], cwd[1024], text[2048];
        assert_non_null(getcwd(cwd, sizeof cwd));
        temp_dir(dir, sizeof dir);
        snprintf(json, sizeof json, "%s/hw.json", dir);
        snprintf(text, sizeof text, "%s/%s/AR_GPU8_1M_1024M_LUT.csv", cwd, VTRAIN_A100);
        {
            char link[128];
            snprintf(link, sizeof link, "%s/ar8.csv", dir);
            assert_int_equal(symlink(text, link), 0);
        }
        snprintf(text, sizeof text,
                 "{" COUNTS ", " DEVICE ", " LINKS ", \"calibration\": {\"collectives\": "
                 "[{\"op\": \"all_reduce\", \"group\": 8, \"csv\": \"ar8.csv\"}]}}");
        write_text(json, text);
        di_error_clear(&err);
        if (hw_load(json, &hw, &err) != 0)
            fail_msg("hw_load: %s", err.msg);
        assert_int_equal(hw->ntable, 1);
        assert_true(hw_table_time(hw, IR_OP_ALLREDUCE, 8, 0, 1048576) == 92790 / 1e9);
        hw_free(hw);
        rm_tree(dir);
    }
}

static void
test_table_interpolation(void **state)
{
    hw_model *hw = preset("a100-dgx");
    di_error err;
    /* A power law t = 1e-10 * b: log-log interpolation is exact on it. */
    double b[4] = {1e8, 1e6, 1e7, 1e6}, s[4] = {1e-2, 1e-4, 1e-3, 3e-4};
    double t;
    (void)state;
    const double avg = (1e-4 + 3e-4) / 2;
    /* Unsorted input, 1e6 given twice (averaged). */
    assert_int_equal(hw_add_table(hw, IR_OP_ALLGATHER, 4, 1, 4, b, s, &err), 0);
    assert_int_equal(hw->tables[0].npoint, 3);
    assert_true(hw_table_time(hw, IR_OP_ALLGATHER, 4, 1, 1e6) == avg);
    t = hw_table_time(hw, IR_OP_ALLGATHER, 4, 1, sqrt(1e7 * 1e8));
    assert_true(fabs(t - sqrt(1e-3 * 1e-2)) < 1e-15);
    /* Above: linear with the slope between 1e8 and the largest point <= 5e7 (1e7). */
    t = hw_table_time(hw, IR_OP_ALLGATHER, 4, 1, 2e8);
    assert_true(fabs(t - (1e-2 + 1e8 * (1e-2 - 1e-3) / (1e8 - 1e7))) < 1e-15);
    /* Below: linear with the slope to the first point >= 2e6 (1e7), floored by proportion. */
    t = hw_table_time(hw, IR_OP_ALLGATHER, 4, 1, 5e5);
    {
        double slope = (1e-3 - avg) / (1e7 - 1e6);
        double linear = avg - 5e5 * slope;
        assert_true(fabs(t - fmax(linear, avg / 2)) < 1e-15);
    }
    assert_true(hw_table_time(hw, IR_OP_ALLGATHER, 4, 1, 0) == 0);
    assert_true(hw_table_time(hw, IR_OP_ALLGATHER, 4, 1, -1) < 0);
    assert_true(hw_table_time(hw, IR_OP_ALLGATHER, 4, 1, NAN) < 0);
    /* Replacing a table, and a one-point table. */
    assert_int_equal(hw_add_table(hw, IR_OP_ALLGATHER, 4, 1, 1, b, s, &err), 0);
    assert_int_equal(hw->ntable, 1);
    assert_true(hw_table_time(hw, IR_OP_ALLGATHER, 4, 1, 2e8) == 2e-2);
    assert_true(hw_table_time(hw, IR_OP_ALLGATHER, 4, 1, 1e3) == 1e-2);
    /* Tables stay sorted by (kind, group, inter_node). */
    assert_int_equal(hw_add_table(hw, IR_OP_ALLREDUCE, 8, 0, 2, b, s, &err), 0);
    assert_int_equal(hw_add_table(hw, IR_OP_ALLREDUCE, 2, 0, 2, b, s, &err), 0);
    assert_int_equal(hw_add_table(hw, IR_OP_ALLREDUCE, 2, 1, 2, b, s, &err), 0);
    assert_int_equal(hw->ntable, 4);
    assert_int_equal(hw_validate(hw, &err), 0);
    check_json_round_trip(hw);
    /* Rejected input. */
    s[0] = 0;
    assert_int_equal(hw_add_table(hw, IR_OP_ALLREDUCE, 8, 0, 2, b, s, &err), DI_EINVAL);
    assert_int_equal(hw_add_table(hw, IR_OP_MATMUL, 8, 0, 1, b + 1, s + 1, &err), DI_EINVAL);
    assert_int_equal(hw_add_table(hw, IR_OP_ALLREDUCE, 0, 0, 1, b + 1, s + 1, &err), DI_EINVAL);
    hw_free(hw);
}

static void
test_csv_errors(void **state)
{
    hw_model *hw = preset("a100-dgx");
    char dir[64], path[128];
    di_error err;
    (void)state;
    temp_dir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/bad.csv", dir);
    write_text(path, "size(B),count,type,time(ns)\n1048576,1,float,1000\n\n2097152,1,float\n");
    di_error_clear(&err);
    assert_int_equal(hw_load_collective_csv(hw, IR_OP_ALLREDUCE, 8, 0, path, &err), DI_EPARSE);
    assert_non_null(strstr(err.msg, "bad.csv:4: expected at least 4 comma-separated columns"));
    write_text(path, "size,count,type,time\n1048576,1,float,-5\n");
    assert_int_equal(hw_load_collective_csv(hw, IR_OP_ALLREDUCE, 8, 0, path, &err), DI_EPARSE);
    assert_non_null(strstr(err.msg, "bad.csv:2: column 4 (time in ns) is not a positive number"));
    write_text(path, "size,count,type,time\nabc,1,float,5\n");
    assert_int_equal(hw_load_collective_csv(hw, IR_OP_ALLREDUCE, 8, 0, path, &err), DI_EPARSE);
    assert_non_null(strstr(err.msg, "bad.csv:2: column 1 (size in bytes)"));
    write_text(path, "size,count,type,time\n");
    assert_int_equal(hw_load_collective_csv(hw, IR_OP_ALLREDUCE, 8, 0, path, &err), DI_EPARSE);
    assert_non_null(strstr(err.msg, "no data rows"));
    /* Windows line ends, no header, comments. */
    write_text(path, "# measured by hand\r\n1000,1,float,2000\r\n4000,1,float,3000\r\n");
    assert_int_equal(hw_load_collective_csv(hw, IR_OP_ALLREDUCE, 8, 0, path, &err), 0);
    assert_true(hw_table_time(hw, IR_OP_ALLREDUCE, 8, 0, 4000) == 3e-6);
    assert_int_equal(hw->tables[0].npoint, 2);
    assert_int_equal(hw_load_collective_csv(hw, IR_OP_ALLREDUCE, 8, 0, dir, &err), DI_EIO);
    assert_non_null(strstr(err.msg, "not a regular file"));
    snprintf(path, sizeof path, "%s/missing.csv", dir);
    assert_int_equal(hw_load_collective_csv(hw, IR_OP_ALLREDUCE, 8, 0, path, &err), DI_EIO);
    assert_int_equal(hw_load_collective_csv(hw, IR_OP_ALLREDUCE, 8, 0, "-", &err), DI_EIO);
    assert_int_equal(hw_load_collective_csv(hw, IR_OP_RELU, 8, 0, path, &err), DI_EINVAL);
    hw_free(hw);
    rm_tree(dir);
}

/* ---- op times and signatures ---- */

/* y = MatMul(x: f32[64,128]@dev, w: f32[128,256]@dev); z = Softmax(y, axis=1). */
static ir_module *
matmul_module(const char *xname, int32_t dev, ir_id *mm, ir_id *sm)
{
    ir_module *m = ir_module_new();
    ir_id f = ir_func_new(m, "main");
    int64_t dx[2] = {64, 128}, dw[2] = {128, 256}, dy[2] = {64, 256};
    ir_id tx = ir_type_tensor(m, IR_F32, 2, dx, dev);
    ir_id tw = ir_type_tensor(m, IR_F32, 2, dw, dev);
    ir_id ty = ir_type_tensor(m, IR_F32, 2, dy, dev);
    ir_id in[2];
    in[0] = ir_region_add_arg(m, f, tx, xname);
    in[1] = ir_region_add_arg(m, f, tw, "w");
    *mm = ir_op_add(m, f, IR_OP_MATMUL, 2, in, 1, &ty, NULL);
    in[0] = ir_op_output(m, *mm, 0);
    *sm = ir_op_add(m, f, IR_OP_SOFTMAX, 1, in, 1, &ty, NULL);
    ir_op_set_int(m, *sm, "axis", 1);
    return m;
}

static void
test_op_signature(void **state)
{
    ir_id mm, sm, mm2, sm2;
    ir_module *a = matmul_module("x", 0, &mm, &sm);
    ir_module *b = matmul_module("renamed", 3, &mm2, &sm2);
    char sig[HW_SIGNATURE_MAX], sig2[HW_SIGNATURE_MAX], small[8];
    (void)state;
    hw_op_signature(a, mm, sig, sizeof sig);
    assert_string_equal(sig, "MatMul(f32[64,128],f32[128,256])");
    hw_op_signature(b, mm2, sig2, sizeof sig2);
    assert_string_equal(sig, sig2); /* no value names, no devices */
    hw_op_signature(a, sm, sig, sizeof sig);
    assert_string_equal(sig, "Softmax(f32[64,256]){axis=1}");
    hw_op_signature(a, mm, small, sizeof small);
    assert_string_equal(small, "MatMul(");
    ir_module_free(a);
    ir_module_free(b);
}

static void
test_op_times(void **state)
{
    hw_model *hw = preset("a100-dgx");
    char dir[64], path[128];
    di_error err;
    (void)state;
    temp_dir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/ops.csv", dir);
    write_text(path, "signature,seconds\n"
                     "MatMul(f32[64,128],f32[128,256]),1.5e-05\n"
                     "Softmax(f32[64,256]){axis=1},4e-06\n"
                     "# a comment\n"
                     "Relu(f32[8]),1e-06\n"
                     "Relu(f32[8]),2e-06\n");
    di_error_clear(&err);
    if (hw_load_op_times(hw, path, &err) != 0)
        fail_msg("%s", err.msg);
    assert_int_equal(hw->nop_time, 3);
    assert_true(hw_op_time_lookup(hw, "MatMul(f32[64,128],f32[128,256])") == 1.5e-5);
    assert_true(hw_op_time_lookup(hw, "Softmax(f32[64,256]){axis=1}") == 4e-6);
    assert_true(hw_op_time_lookup(hw, "Relu(f32[8])") == 2e-6); /* the last row wins */
    assert_true(hw_op_time_lookup(hw, "Relu(f32[9])") < 0);
    assert_true(hw_op_time_lookup(hw, "") < 0);
    /* The signature of a real op finds its row. */
    {
        ir_id mm, sm;
        char sig[HW_SIGNATURE_MAX];
        ir_module *m = matmul_module("x", 0, &mm, &sm);
        hw_op_signature(m, mm, sig, sizeof sig);
        assert_true(hw_op_time_lookup(hw, sig) == 1.5e-5);
        ir_module_free(m);
    }
    /* A second file merges; entries stay sorted. */
    write_text(path, "Add(f32[8],f32[8]),3e-06\nRelu(f32[8]),5e-06\n");
    assert_int_equal(hw_load_op_times(hw, path, &err), 0);
    assert_int_equal(hw->nop_time, 4);
    assert_true(hw_op_time_lookup(hw, "Add(f32[8],f32[8])") == 3e-6);
    assert_true(hw_op_time_lookup(hw, "Relu(f32[8])") == 5e-6);
    assert_int_equal(hw_validate(hw, &err), 0);
    check_json_round_trip(hw);
    /* Malformed rows name their line and leave the model alone. */
    write_text(path, "signature,seconds\nGelu(f32[8]),1e-6\nno number here\n");
    assert_int_equal(hw_load_op_times(hw, path, &err), DI_EPARSE);
    assert_non_null(strstr(err.msg, "ops.csv:3: expected \"signature,seconds\""));
    write_text(path, "Gelu(f32[8]),soon\n");
    assert_int_equal(hw_load_op_times(hw, path, &err), DI_EPARSE);
    assert_non_null(strstr(err.msg, "ops.csv:1: seconds is not a number"));
    assert_int_equal(hw->nop_time, 4);
    assert_int_equal(hw_add_op_time(hw, "Gelu(f32[8])", -1, &err), DI_EINVAL);
    assert_int_equal(hw_add_op_time(hw, "Gelu(f32[8])", 1e-6, &err), 0);
    assert_int_equal(hw->nop_time, 5);
    assert_int_equal(hw_validate(hw, &err), 0);
    hw_free(hw);
    rm_tree(dir);
}

/* ---- files ---- */

static void
test_load(void **state)
{
    hw_model *hw;
    di_error err;
    char dir[64], path[128], *json;
    (void)state;
    assert_int_equal(hw_load("h100-dgx:2", &hw, &err), 0);
    assert_int_equal(hw->ndevice, 16);
    temp_dir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/h100.json", dir);
    json = hw_to_json(hw);
    write_text(path, json);
    di_free(json);
    {
        hw_model *back;
        assert_int_equal(hw_load(path, &back, &err), 0);
        assert_true(hash_equal(hw, back));
        assert_string_equal(back->name, "h100-dgx:2");
        hw_free(back);
    }
    hw_free(hw);
    /* Errors are prefixed with the file. */
    write_text(path, "{\"num_nodes\": 1}");
    di_error_clear(&err);
    assert_int_equal(hw_load(path, &hw, &err), DI_EINVAL);
    assert_non_null(strstr(err.msg, "h100.json: devices_per_node: missing (required)"));
    snprintf(path, sizeof path, "%s/missing.json", dir);
    assert_int_equal(hw_load(path, &hw, &err), DI_EIO);
    assert_int_equal(hw_load("no-such-preset", &hw, &err), DI_ENOTFOUND);
    rm_tree(dir);
}

/* ---- protobuf ---- */

static void
proto_round_trip(const hw_model *hw)
{
    Distir__V1__Hardware p;
    Distir__V1__Hardware *u;
    uint8_t *buf;
    size_t len;
    hw_model *back;
    di_error err;
    hw_to_proto(hw, &p);
    len = distir__v1__hardware__get_packed_size(&p);
    buf = malloc(len ? len : 1);
    assert_int_equal(distir__v1__hardware__pack(&p, buf), len);
    hw_proto_fini(&p);
    u = distir__v1__hardware__unpack(NULL, len, buf);
    assert_non_null(u);
    di_error_clear(&err);
    if (hw_from_proto(u, &back, &err) != 0)
        fail_msg("hw_from_proto: %s", err.msg);
    assert_true(hash_equal(hw, back));
    assert_string_equal(back->name, hw->name);
    assert_string_equal(back->device.kind, hw->device.kind);
    hw_free(back);
    distir__v1__hardware__free_unpacked(u, NULL);
    free(buf);
}

static void
test_proto(void **state)
{
    const char *const *names = hw_preset_names();
    hw_model *hw;
    di_error err;
    (void)state;
    for (size_t i = 0; names[i]; i++) {
        hw = preset(names[i]);
        proto_round_trip(hw);
        hw_free(hw);
    }
    hw = preset("h100-dgx:2");
    {
        hw_device spec = hw->device;
        uint32_t ids[2] = {12, 4};
        hw_device specs[2];
        spec.flops[IR_F16] = 5e14;
        specs[0] = spec;
        specs[1] = hw->device;
        specs[1].memory_bytes = 1e10;
        assert_int_equal(hw_set_overrides(hw, 2, ids, specs, &err), 0);
    }
    proto_round_trip(hw);
    /* Calibration travels too: the hash covers tables and op times. */
    {
        const double bytes[3] = {1048576, 2097152, 4194304}, secs[3] = {4.4e-5, 5.3e-5, 7.1e-5};
        hw_model *plain = hw_clone(hw);
        assert_int_equal(hw_add_table(hw, IR_OP_ALLREDUCE, 8, 0, 3, bytes, secs, &err), 0);
        assert_int_equal(hw_add_op_time(hw, "MatMul(f32[64,128],f32[128,256])", 1e-5, &err), 0);
        assert_false(hash_equal(hw, plain));
        proto_round_trip(hw);
        hw_free(plain);
    }

    /* Invalid messages are refused with the field named. */
    {
        Distir__V1__Hardware p;
        hw_model *bad = (hw_model *)1;
        hw_to_proto(hw, &p);
        p.num_nodes = 0;
        assert_int_equal(hw_from_proto(&p, &bad, &err), DI_EINVAL);
        assert_null(bad);
        assert_non_null(strstr(err.msg, "num_nodes: expected 1 to"));
        p.num_nodes = 2;
        p.intra_node->bandwidth = -5;
        assert_int_equal(hw_from_proto(&p, &bad, &err), DI_EINVAL);
        assert_non_null(
            strstr(err.msg, "intra_node.bandwidth: expected a positive number, got -5"));
        p.intra_node->bandwidth = 1e11;
        p.overrides[0]->spec->max_efficiency = 2;
        assert_int_equal(hw_from_proto(&p, &bad, &err), DI_EINVAL);
        assert_non_null(strstr(err.msg, "overrides[0].spec.max_efficiency"));
        p.overrides[0]->spec->max_efficiency = 0.5;
        p.overrides[0]->device = 16;
        assert_int_equal(hw_from_proto(&p, &bad, &err), DI_EINVAL);
        assert_non_null(strstr(err.msg, "overrides[0].device: expected a device id below 16"));
        p.overrides[0]->device = 12;
        assert_int_equal(hw_from_proto(&p, &bad, &err), DI_EINVAL);
        assert_non_null(strstr(err.msg, "device 12 is given twice"));
        p.overrides[0]->device = 3;
        p.algorithm = (Distir__V1__CollectiveAlgo)9;
        assert_int_equal(hw_from_proto(&p, &bad, &err), DI_EINVAL);
        assert_non_null(strstr(err.msg, "algorithm: unknown value 9"));
        p.algorithm = DISTIR__V1__COLLECTIVE_ALGO__ALGO_TREE;
        assert_int_equal(hw_from_proto(&p, &bad, &err), 0);
        assert_int_equal(bad->algorithm, HW_ALGO_TREE);
        hw_free(bad);
        {
            Distir__V1__Device *dev = p.device;
            p.device = NULL;
            assert_int_equal(hw_from_proto(&p, &bad, &err), DI_EINVAL);
            assert_non_null(strstr(err.msg, "device: missing"));
            p.device = dev;
        }
        hw_proto_fini(&p);
    }
    hw_free(hw);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_preset_names),
        cmocka_unit_test(test_preset_vtrain),    cmocka_unit_test(test_preset_v100),
        cmocka_unit_test(test_preset_a100),     cmocka_unit_test(test_preset_hopper),
        cmocka_unit_test(test_preset_classic),  cmocka_unit_test(test_preset_errors),
        cmocka_unit_test(test_json_round_trip), cmocka_unit_test(test_json_minimal),
        cmocka_unit_test(test_json_errors),     cmocka_unit_test(test_json_override),
        cmocka_unit_test(test_set_overrides),   cmocka_unit_test(test_hash),
        cmocka_unit_test(test_vtrain_tables),   cmocka_unit_test(test_table_interpolation),
        cmocka_unit_test(test_csv_errors),      cmocka_unit_test(test_op_signature),
        cmocka_unit_test(test_op_times),        cmocka_unit_test(test_load),
        cmocka_unit_test(test_proto),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
