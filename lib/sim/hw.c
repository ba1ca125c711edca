/*
 * hw.c: the hardware model's core: the presets built from the public figures
 * in shared/hardware/README.md (docs/hardware.md derives every number), range
 * validation shared by the JSON and protobuf forms, copies, the canonical
 * hash, and the protobuf conversion. The JSON form is in hw_json.c and the
 * calibration tables in hw_calib.c.
 */
#include "sim/hw.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "distir.pb-c.h"

/* ---- algorithms ---- */

static const char *const algo_names[] = {
    [HW_ALGO_AUTO] = "auto",
    [HW_ALGO_RING] = "ring",
    [HW_ALGO_TREE] = "tree",
    [HW_ALGO_HIERARCHICAL] = "hierarchical",
    [HW_ALGO_SLOWEST_LINK] = "slowest_link",
};
#define NALGO ((int)(sizeof algo_names / sizeof algo_names[0]))

const char *
hw_algo_name(hw_algo a)
{
    return (int)a >= 0 && (int)a < NALGO ? algo_names[a] : "?";
}

int
hw_algo_from_name(const char *s)
{
    for (int a = 0; a < NALGO; a++)
        if (strcmp(algo_names[a], s) == 0)
            return a;
    return -1;
}

/* ---- construction, copies ---- */

hw_model *
hw_new(void)
{
    return di_xcalloc(1, sizeof(hw_model));
}

static void
free_tables(hw_model *hw)
{
    for (uint32_t i = 0; i < hw->ntable; i++) {
        di_free(hw->tables[i].bytes);
        di_free(hw->tables[i].seconds);
    }
    di_free(hw->tables);
    for (uint32_t i = 0; i < hw->nop_time; i++)
        di_free(hw->op_times[i].signature);
    di_free(hw->op_times);
}

void
hw_free(hw_model *hw)
{
    if (hw == NULL)
        return;
    di_free(hw->override_ids);
    di_free(hw->overrides);
    free_tables(hw);
    di_free(hw);
}

static void *
dup_array(const void *p, size_t n, size_t size)
{
    void *q;
    if (n == 0 || p == NULL)
        return NULL;
    q = di_xmalloc(n * size);
    memcpy(q, p, n * size);
    return q;
}

hw_model *
hw_clone(const hw_model *hw)
{
    hw_model *c = di_xmalloc(sizeof *c);
    *c = *hw;
    c->override_ids = dup_array(hw->override_ids, hw->noverride, sizeof(uint32_t));
    c->overrides = dup_array(hw->overrides, hw->noverride, sizeof(hw_device));
    c->tables = dup_array(hw->tables, hw->ntable, sizeof(hw_coll_table));
    for (uint32_t i = 0; i < hw->ntable; i++) {
        c->tables[i].bytes = dup_array(hw->tables[i].bytes, hw->tables[i].npoint, sizeof(double));
        c->tables[i].seconds =
            dup_array(hw->tables[i].seconds, hw->tables[i].npoint, sizeof(double));
    }
    c->op_times = dup_array(hw->op_times, hw->nop_time, sizeof(hw_op_time));
    for (uint32_t i = 0; i < hw->nop_time; i++)
        c->op_times[i].signature = di_xstrdup(hw->op_times[i].signature);
    return c;
}

/* ---- queries ---- */

const hw_device *
hw_device_spec(const hw_model *hw, uint32_t id)
{
    uint32_t lo = 0, hi = hw->noverride;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (hw->override_ids[mid] < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < hw->noverride && hw->override_ids[lo] == id)
        return &hw->overrides[lo];
    return &hw->device;
}

const hw_link *
hw_link_between(const hw_model *hw, uint32_t a, uint32_t b)
{
    return hw_node_of(hw, a) == hw_node_of(hw, b) ? &hw->intra_node : &hw->inter_node;
}

/* ---- validation ---- */

/* Checks one number against a HW_RULE_*; the message names path.field. */
static int
check_figure(double v, int rule, const char *path, const char *field, di_error *err)
{
    int ok = isfinite(v);
    const char *want = "a number";
    switch (rule) {
    case HW_RULE_POSITIVE:
        ok = ok && v > 0;
        want = "a positive number";
        break;
    case HW_RULE_NONNEG:
        ok = ok && v >= 0;
        want = "a number >= 0";
        break;
    case HW_RULE_FRACTION:
        ok = ok && v > 0 && v <= 1;
        want = "a number in (0, 1]";
        break;
    default:
        break;
    }
    if (ok)
        return 0;
    return di_error_set(err, DI_EINVAL, "%s%s: expected %s, got %g", path, field, want, v);
}

static int
label_ok(const char *s, size_t size)
{
    return memchr(s, '\0', size) != NULL && di_utf8_valid(s, strlen(s));
}

/* The dtypes a device may have a FLOP rate for (those protobuf Device carries). */
static int
flops_dtype_allowed(int t)
{
    return t == IR_F32 || t == IR_F16 || t == IR_BF16 || t == IR_F64 || t == IR_I8;
}

static int
validate_device(const hw_device *d, const char *path, di_error *err)
{
    int any = 0;
    if (!label_ok(d->kind, sizeof d->kind))
        return di_error_set(err, DI_EINVAL, "%skind: not a terminated UTF-8 string", path);
    for (int t = 1; t < IR_NDTYPE; t++) {
        char field[32];
        snprintf(field, sizeof field, "flops.%s", ir_dtype_name((ir_dtype)t));
        if (!flops_dtype_allowed(t)) {
            if (d->flops[t] != 0)
                return di_error_set(err, DI_EINVAL, "%s%s: not supported (must be 0)", path, field);
            continue;
        }
        if (check_figure(d->flops[t], HW_RULE_NONNEG, path, field, err) != 0)
            return DI_EINVAL;
        any |= d->flops[t] > 0;
    }
    if (check_figure(d->flops_tf32, HW_RULE_NONNEG, path, "flops.tf32", err) != 0)
        return DI_EINVAL;
    if (!any)
        return di_error_set(err, DI_EINVAL,
                            "%sflops: expected a positive peak for at least one dtype", path);
#define HW_CHECK_(name, rule)                                                                      \
    if (check_figure(d->name, rule, path, #name, err) != 0)                                        \
        return DI_EINVAL;
    HW_DEVICE_FIGURES(HW_CHECK_)
#undef HW_CHECK_
    if (d->memory_reserved >= d->memory_bytes)
        return di_error_set(err, DI_EINVAL,
                            "%smemory_reserved: %.17g bytes leave nothing of memory_bytes %.17g",
                            path, d->memory_reserved, d->memory_bytes);
    return 0;
}

static int
validate_link(const hw_link *l, const char *path, di_error *err)
{
    if (check_figure(l->bandwidth, HW_RULE_POSITIVE, path, "bandwidth", err) != 0 ||
        check_figure(l->latency, HW_RULE_NONNEG, path, "latency", err) != 0)
        return DI_EINVAL;
    return 0;
}

/* Orders tables by (kind, group, inter_node). */
static int
table_key_cmp(const hw_coll_table *a, const hw_coll_table *b)
{
    if (a->kind != b->kind)
        return a->kind < b->kind ? -1 : 1;
    if (a->group != b->group)
        return a->group < b->group ? -1 : 1;
    if (a->inter_node != b->inter_node)
        return a->inter_node < b->inter_node ? -1 : 1;
    return 0;
}

static int
validate_table(const hw_coll_table *t, uint32_t i, di_error *err)
{
    if (t->kind <= IR_OP_NONE || t->kind >= IR_NOPKIND ||
        !(ir_opkind_info(t->kind)->flags & IR_OPF_COMM))
        return di_error_set(err, DI_EINVAL,
                            "calibration.collectives[%u].op: not a communication op", i);
    if (t->group < 1 || t->group > HW_MAX_DEVICES)
        return di_error_set(err, DI_EINVAL,
                            "calibration.collectives[%u].group: expected 1 to %u, got %u", i,
                            HW_MAX_DEVICES, t->group);
    if (t->inter_node != 0 && t->inter_node != 1)
        return di_error_set(err, DI_EINVAL, "calibration.collectives[%u].inter_node: not 0 or 1",
                            i);
    if (t->npoint < 1 || t->npoint > HW_MAX_POINTS)
        return di_error_set(err, DI_EINVAL,
                            "calibration.collectives[%u].points: expected 1 to %u points, got %u",
                            i, HW_MAX_POINTS, t->npoint);
    for (uint32_t j = 0; j < t->npoint; j++) {
        double b = t->bytes[j], s = t->seconds[j];
        if (!isfinite(b) || b <= 0 || !isfinite(s) || s <= 0)
            return di_error_set(err, DI_EINVAL,
                                "calibration.collectives[%u].points[%u]: expected positive bytes "
                                "and seconds, got [%g, %g]",
                                i, j, b, s);
        if (j > 0 && !(t->bytes[j - 1] < b))
            return di_error_set(err, DI_EINVAL,
                                "calibration.collectives[%u].points[%u]: sizes not ascending", i,
                                j);
    }
    return 0;
}

int
hw_validate(const hw_model *hw, di_error *err)
{
    uint64_t n;
    int rc;
    if (!label_ok(hw->name, sizeof hw->name))
        return di_error_set(err, DI_EINVAL, "name: not a terminated UTF-8 string");
    if (hw->num_nodes < 1 || hw->num_nodes > HW_MAX_DEVICES)
        return di_error_set(err, DI_EINVAL, "num_nodes: expected 1 to %u, got %u", HW_MAX_DEVICES,
                            hw->num_nodes);
    if (hw->devices_per_node < 1 || hw->devices_per_node > HW_MAX_DEVICES)
        return di_error_set(err, DI_EINVAL, "devices_per_node: expected 1 to %u, got %u",
                            HW_MAX_DEVICES, hw->devices_per_node);
    n = (uint64_t)hw->num_nodes * hw->devices_per_node;
    if (n > HW_MAX_DEVICES)
        return di_error_set(err, DI_ETOOBIG,
                            "num_nodes * devices_per_node: %llu devices exceed the limit of %u",
                            (unsigned long long)n, HW_MAX_DEVICES);
    if (hw->ndevice != n)
        return di_error_set(err, DI_EINVAL, "ndevice: %u is not num_nodes * devices_per_node",
                            hw->ndevice);
    if ((rc = validate_device(&hw->device, "device.", err)) != 0)
        return rc;
    if (hw->noverride > hw->ndevice)
        return di_error_set(err, DI_EINVAL, "overrides: %u overrides for %u devices", hw->noverride,
                            hw->ndevice);
    for (uint32_t i = 0; i < hw->noverride; i++) {
        char path[64];
        uint32_t id = hw->override_ids[i];
        if (id >= hw->ndevice)
            return di_error_set(err, DI_EINVAL,
                                "overrides[%u].device: expected a device id below %u, got %u", i,
                                hw->ndevice, id);
        if (i > 0 && !(hw->override_ids[i - 1] < id))
            return di_error_set(err, DI_EINVAL,
                                "overrides[%u].device: ids not ascending and unique at %u", i, id);
        snprintf(path, sizeof path, "overrides[%u].spec.", i);
        if ((rc = validate_device(&hw->overrides[i], path, err)) != 0)
            return rc;
    }
    if ((rc = validate_link(&hw->intra_node, "intra_node.", err)) != 0 ||
        (rc = validate_link(&hw->inter_node, "inter_node.", err)) != 0)
        return rc;
    if ((int)hw->algorithm < 0 || (int)hw->algorithm >= NALGO)
        return di_error_set(err, DI_EINVAL, "algorithm: unknown value %d", (int)hw->algorithm);
    if (check_figure(hw->collective_step_latency, HW_RULE_NONNEG, "", "collective_step_latency",
                     err) != 0)
        return DI_EINVAL;
    if (hw->ntable > HW_MAX_TABLES)
        return di_error_set(err, DI_ETOOBIG, "calibration.collectives: %u tables exceed %u",
                            hw->ntable, HW_MAX_TABLES);
    for (uint32_t i = 0; i < hw->ntable; i++) {
        if ((rc = validate_table(&hw->tables[i], i, err)) != 0)
            return rc;
        if (i > 0 && table_key_cmp(&hw->tables[i - 1], &hw->tables[i]) >= 0)
            return di_error_set(err, DI_EINVAL,
                                "calibration.collectives[%u]: tables not sorted and unique", i);
    }
    if (hw->nop_time > HW_MAX_OP_TIMES)
        return di_error_set(err, DI_ETOOBIG, "calibration.op_times: %u entries exceed %u",
                            hw->nop_time, HW_MAX_OP_TIMES);
    for (uint32_t i = 0; i < hw->nop_time; i++) {
        const hw_op_time *t = &hw->op_times[i];
        if (t->signature == NULL || t->signature[0] == '\0')
            return di_error_set(err, DI_EINVAL, "calibration.op_times[%u]: empty signature", i);
        if (!isfinite(t->seconds) || t->seconds < 0)
            return di_error_set(err, DI_EINVAL,
                                "calibration.op_times[\"%s\"]: expected a number >= 0, got %g",
                                t->signature, t->seconds);
        if (i > 0 && strcmp(hw->op_times[i - 1].signature, t->signature) >= 0)
            return di_error_set(err, DI_EINVAL,
                                "calibration.op_times[%u]: signatures not sorted and unique", i);
    }
    return 0;
}

/* ---- overrides ---- */

typedef struct override_pair {
    uint32_t id;
    uint32_t index; /* position in the caller's arrays, for a stable order */
} override_pair;

static int
override_pair_cmp(const void *a, const void *b)
{
    const override_pair *x = a, *y = b;
    if (x->id != y->id)
        return x->id < y->id ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

int
hw_set_overrides(hw_model *hw, uint32_t n, const uint32_t *ids, const hw_device *specs,
                 di_error *err)
{
    override_pair *pairs;
    uint32_t *nids;
    hw_device *nspecs;
    if (n > hw->ndevice)
        return di_error_set(err, DI_EINVAL, "overrides: %u overrides for %u devices", n,
                            hw->ndevice);
    pairs = di_xmalloc((n ? n : 1) * sizeof *pairs);
    for (uint32_t i = 0; i < n; i++) {
        if (ids[i] >= hw->ndevice) {
            di_free(pairs);
            return di_error_set(err, DI_EINVAL,
                                "overrides[%u].device: expected a device id below %u, got %u", i,
                                hw->ndevice, ids[i]);
        }
        pairs[i].id = ids[i];
        pairs[i].index = i;
    }
    qsort(pairs, n, sizeof *pairs, override_pair_cmp);
    for (uint32_t i = 1; i < n; i++) {
        if (pairs[i].id == pairs[i - 1].id) {
            uint32_t id = pairs[i].id, where = pairs[i].index;
            di_free(pairs);
            return di_error_set(err, DI_EINVAL, "overrides[%u].device: device %u is given twice",
                                where, id);
        }
    }
    nids = n ? di_xmalloc(n * sizeof *nids) : NULL;
    nspecs = n ? di_xmalloc(n * sizeof *nspecs) : NULL;
    for (uint32_t i = 0; i < n; i++) {
        nids[i] = pairs[i].id;
        nspecs[i] = specs[pairs[i].index];
    }
    di_free(pairs);
    di_free(hw->override_ids);
    di_free(hw->overrides);
    hw->override_ids = nids;
    hw->overrides = nspecs;
    hw->noverride = n;
    return 0;
}

/* ---- presets ---- */

/*
 * One row per preset. Every figure is derived in docs/hardware.md; keep the
 * two in step. Bandwidths are bytes/s per direction and per GPU, written as
 * decimal literals so that each figure is exactly the documented number;
 * capacities are binary (GiB) because HBM is.
 */
#define GIB 1073741824.0

typedef struct preset {
    const char *name;
    const char *kind;
    uint32_t devices_per_node;            /* 0: the count parameter is devices, one per node */
    uint32_t default_count;               /* nodes (or devices when devices_per_node == 0) */
    double f32, f16, bf16, f64, i8, tf32; /* FLOP/s */
    double memory_bytes;                  /* bytes */
    double memory_bandwidth;              /* bytes/s */
    double launch_overhead;               /* seconds */
    double max_efficiency, half_flops, elementwise_efficiency;
    double intra_bw, intra_lat; /* bytes/s, seconds */
    double inter_bw, inter_lat; /* bytes/s, seconds */
    hw_algo algorithm;
    double step_latency; /* seconds */
    double memory_reserved; /* bytes */
    double host_overhead;   /* seconds per kernel issued */
    double sms;             /* streaming multiprocessors */
    double special;         /* special-function evaluations per second */
} preset;

/*
 * What a training process cannot use of a GPU's memory: about 1 GiB for the
 * CUDA context, cuBLAS/NCCL workspaces and communication buffers, and 5% of
 * the memory for the caching allocator's fragmentation (an estimate, not a
 * measurement: override it in a hardware file).
 */
#define RESERVE(mem) (GIB + 0.05 * (mem))

/*
 * Host overhead fitted by `distir calibrate` on vTrain's single-node runs
 * (tests/data/vtrain/ground_truth_single.csv, 240 rows evenly spread; never
 * on the multi-node file, which validates): the eager Megatron-LM host's
 * cost per kernel of distir's unfused op granularity (docs/validation.md).
 */
#define HOST_VTRAIN 5.556e-5

/*
 * The intra-node link of vTrain's cluster as its measured NCCL all-reduce
 * tables give it (tests/data/vtrain/allreduce/a100, 2 to 8 GPUs, 1 MiB to
 * 1 GiB): the ring formula's bandwidth and per-step latency of least mean
 * absolute percentage error over the 77 points, 5.1% (NVLink's 300 GB/s
 * and 6 us per step: 27.6%). `distir calibrate --allreduce-lut` fits them.
 */
#define VTRAIN_NVLINK_BW 221.85e9
#define VTRAIN_NVLINK_LAT 4.3055e-6

/*
 * Special-function units: 16 per SM, one evaluation per clock each (the V100,
 * A100 and H100 whitepapers), at the clock the f16 tensor peak implies: SMs x
 * clock = peak / (tensor FLOPs per SM per clock: 1,024 on V100, 2,048 on A100,
 * 4,096 on H100), 1.53, 1.41 and 1.83 GHz. H100: 3.86e12 a second, the 3.9
 * TFLOPS of special functions FlashAttention-3's paper gives (Shah et al. 2024).
 */
#define SFU(peak, per_clock) (16.0 * (peak) / (per_clock))

/* clang-format off */
static const preset presets[] = {
    /* DGX-1: NVLink 2 300 GB/s bidirectional; 4 x 100 Gb/s EDR per node over 8 GPUs. */
    {"v100-dgx1", "V100-SXM2-32GB", 8, 1,
     15.7e12, 125e12, 0, 0, 0, 0,
     32 * GIB, 900e9, 4e-6,
     0.8, 2e8, 0.8,
     150e9, 3e-6, 6.25e9, 5e-6,
     HW_ALGO_AUTO, 3e-6, RESERVE(32 * GIB), 0, 80, SFU(125e12, 1024)},
    /* DGX A100: NVSwitch 300 GB/s per direction; one 200 Gb/s HDR port per GPU. */
    {"a100-dgx", "A100-SXM4-80GB", 8, 1,
     19.5e12, 312e12, 312e12, 0, 0, 156e12,
     80 * GIB, 2039e9, 4e-6,
     0.8, 5e8, 0.8,
     300e9, 3e-6, 25e9, 5e-6,
     HW_ALGO_AUTO, 3e-6, RESERVE(80 * GIB), 0, 108, SFU(312e12, 2048)},
    {"a100-40g-dgx", "A100-SXM4-40GB", 8, 1,
     19.5e12, 312e12, 312e12, 0, 0, 156e12,
     40 * GIB, 1555e9, 4e-6,
     0.8, 5e8, 0.8,
     300e9, 3e-6, 25e9, 5e-6,
     HW_ALGO_AUTO, 3e-6, RESERVE(40 * GIB), 0, 108, SFU(312e12, 2048)},
    /*
     * vTrain's measurement cluster (../shared/data/vtrain): DGX A100 80 GB
     * nodes with 800 Gb/s per node between nodes, 100 Gb/s per GPU.
     */
    {"a100-vtrain", "A100-SXM4-80GB", 8, 1,
     19.5e12, 312e12, 312e12, 0, 0, 156e12,
     80 * GIB, 2039e9, 4e-6,
     0.8, 5e8, 0.8,
     VTRAIN_NVLINK_BW, VTRAIN_NVLINK_LAT, 12.5e9, 5e-6,
     HW_ALGO_AUTO, 3e-6, RESERVE(80 * GIB), HOST_VTRAIN, 108, SFU(312e12, 2048)},
    /* DGX H100: NVSwitch 450 GB/s per direction; one 400 Gb/s NDR port per GPU. */
    {"h100-dgx", "H100-SXM5-80GB", 8, 1,
     67e12, 989e12, 989e12, 0, 1979e12, 495e12,
     80 * GIB, 3350e9, 4e-6,
     0.8, 1.6e9, 0.8,
     450e9, 3e-6, 50e9, 5e-6,
     HW_ALGO_AUTO, 3e-6, RESERVE(80 * GIB), 0, 132, SFU(989e12, 4096)},
    {"h200-dgx", "H200-SXM-141GB", 8, 1,
     67e12, 989e12, 989e12, 0, 1979e12, 495e12,
     141 * GIB, 4800e9, 4e-6,
     0.8, 1.6e9, 0.8,
     450e9, 3e-6, 50e9, 5e-6,
     HW_ALGO_AUTO, 3e-6, RESERVE(141 * GIB), 0, 132, SFU(989e12, 4096)},
    /*
     * The original DistIR simulator: one roofline for every float dtype, no
     * efficiency curve, 25 Gbit/s between every pair of devices, no
     * latencies, and its all-reduce formula (a ring) priced on that link.
     */
    {"distir-classic", "distir-classic", 0, 8,
     1.4e13, 1.4e13, 1.4e13, 1.4e13, 0, 0,
     16 * GIB, 9e11, 1e-5,
     1.0, 0, 1.0,
     3.125e9, 0, 3.125e9, 0,
     HW_ALGO_RING, 0, 0, 0, 0, 0},
};
/* clang-format on */
#define NPRESET (sizeof presets / sizeof presets[0])

static const char *const preset_name_list[NPRESET + 1] = {
    "v100-dgx1", "a100-dgx", "a100-40g-dgx", "a100-vtrain", "h100-dgx", "h200-dgx",
    "distir-classic", NULL,
};

const char *const *
hw_preset_names(void)
{
    return preset_name_list;
}

/* Parses a strict decimal count in [1, max]; returns 0 on success. */
static int
parse_count(const char *s, uint32_t max, uint32_t *out)
{
    uint64_t v = 0;
    if (*s == '\0')
        return -1;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return -1;
        v = v * 10 + (uint64_t)(*s - '0');
        if (v > max)
            return -1;
    }
    if (v < 1)
        return -1;
    *out = (uint32_t)v;
    return 0;
}

int
hw_preset(const char *name, hw_model **out, di_error *err)
{
    const char *colon = strchr(name, ':');
    size_t baselen = colon ? (size_t)(colon - name) : strlen(name);
    const preset *p = NULL;
    hw_model *hw;
    uint32_t count, per_node, max;
    *out = NULL;
    for (size_t i = 0; i < NPRESET; i++)
        if (strlen(presets[i].name) == baselen && memcmp(presets[i].name, name, baselen) == 0)
            p = &presets[i];
    if (p == NULL) {
        di_buf b;
        di_buf_init(&b);
        for (size_t i = 0; i < NPRESET; i++)
            di_buf_printf(&b, "%s%s", i ? ", " : "", presets[i].name);
        di_error_set(err, DI_ENOTFOUND, "unknown hardware preset '%s' (known: %s)", name, b.data);
        di_buf_fini(&b);
        return DI_ENOTFOUND;
    }
    per_node = p->devices_per_node ? p->devices_per_node : 1;
    max = HW_MAX_DEVICES / per_node;
    count = p->default_count;
    if (colon && parse_count(colon + 1, max, &count) != 0)
        return di_error_set(err, DI_EINVAL,
                            "hardware preset '%s': expected %s:N with N from 1 to %u", name,
                            p->name, max);
    if (strlen(name) >= sizeof hw->name)
        return di_error_set(err, DI_EINVAL, "hardware preset '%s': name too long", name);
    hw = hw_new();
    snprintf(hw->name, sizeof hw->name, "%s", name);
    hw->num_nodes = count;
    hw->devices_per_node = per_node;
    hw->ndevice = count * per_node;
    snprintf(hw->device.kind, sizeof hw->device.kind, "%s", p->kind);
    hw->device.flops[IR_F32] = p->f32;
    hw->device.flops[IR_F16] = p->f16;
    hw->device.flops[IR_BF16] = p->bf16;
    hw->device.flops[IR_F64] = p->f64;
    hw->device.flops[IR_I8] = p->i8;
    hw->device.flops_tf32 = p->tf32;
    hw->device.memory_bytes = p->memory_bytes;
    hw->device.memory_bandwidth = p->memory_bandwidth;
    hw->device.launch_overhead = p->launch_overhead;
    hw->device.max_efficiency = p->max_efficiency;
    hw->device.half_flops = p->half_flops;
    hw->device.elementwise_efficiency = p->elementwise_efficiency;
    hw->device.memory_reserved = p->memory_reserved;
    hw->device.host_overhead = p->host_overhead;
    hw->device.sms = p->sms;
    hw->device.special_rate = p->special;
    hw->intra_node.bandwidth = p->intra_bw;
    hw->intra_node.latency = p->intra_lat;
    hw->inter_node.bandwidth = p->inter_bw;
    hw->inter_node.latency = p->inter_lat;
    hw->algorithm = p->algorithm;
    hw->collective_step_latency = p->step_latency;
    *out = hw;
    return 0;
}

/* ---- hash ---- */

/* Adds a double's bits; -0 hashes as 0 so that equal figures hash equal. */
static void
hash_double(di_sha256 *s, double v)
{
    if (v == 0)
        v = 0;
    di_sha256_u64(s, di_double_bits(v));
}

static void
hash_string(di_sha256 *s, const char *str)
{
    size_t n = strlen(str);
    di_sha256_u64(s, n);
    di_sha256_update(s, str, n);
}

static void
hash_device(di_sha256 *s, const hw_device *d)
{
    for (int t = 1; t < IR_NDTYPE; t++) {
        hash_string(s, ir_dtype_name((ir_dtype)t));
        hash_double(s, d->flops[t]);
    }
    hash_double(s, d->flops_tf32);
#define HW_HASH_(name, rule) hash_double(s, d->name);
    HW_DEVICE_FIGURES(HW_HASH_)
#undef HW_HASH_
}

void
hw_hash(const hw_model *hw, di_hash *out)
{
    di_sha256 s;
    di_sha256_init(&s);
    hash_string(&s, "distir.hw.v1");
    di_sha256_u64(&s, hw->num_nodes);
    di_sha256_u64(&s, hw->devices_per_node);
    hash_device(&s, &hw->device);
    di_sha256_u64(&s, hw->noverride);
    for (uint32_t i = 0; i < hw->noverride; i++) {
        di_sha256_u64(&s, hw->override_ids[i]);
        hash_device(&s, &hw->overrides[i]);
    }
    hash_double(&s, hw->intra_node.bandwidth);
    hash_double(&s, hw->intra_node.latency);
    hash_double(&s, hw->inter_node.bandwidth);
    hash_double(&s, hw->inter_node.latency);
    hash_string(&s, hw_algo_name(hw->algorithm));
    hash_double(&s, hw->collective_step_latency);
    di_sha256_u64(&s, hw->ntable);
    for (uint32_t i = 0; i < hw->ntable; i++) {
        const hw_coll_table *t = &hw->tables[i];
        /* The op's name, not its enum value, so that adding ops keeps hashes. */
        hash_string(&s, t->kind > 0 && t->kind < IR_NOPKIND ? ir_opkind_name(t->kind) : "?");
        di_sha256_u64(&s, t->group);
        di_sha256_u64(&s, (uint64_t)t->inter_node);
        di_sha256_u64(&s, t->npoint);
        for (uint32_t j = 0; j < t->npoint; j++) {
            hash_double(&s, t->bytes[j]);
            hash_double(&s, t->seconds[j]);
        }
    }
    di_sha256_u64(&s, hw->nop_time);
    for (uint32_t i = 0; i < hw->nop_time; i++) {
        hash_string(&s, hw->op_times[i].signature);
        hash_double(&s, hw->op_times[i].seconds);
    }
    di_sha256_final(&s, out);
}

/* ---- protobuf ---- */

static int
copy_label(char *dst, size_t size, const char *src, const char *field, di_error *err)
{
    size_t n = src ? strlen(src) : 0;
    if (n >= size)
        return di_error_set(err, DI_EINVAL, "%s: expected at most %zu bytes, got %zu", field,
                            size - 1, n);
    memcpy(dst, src ? src : "", n + 1);
    return 0;
}

static int
device_from_proto(const Distir__V1__Device *p, hw_device *d, const char *path, di_error *err)
{
    char field[80];
    memset(d, 0, sizeof *d);
    snprintf(field, sizeof field, "%skind", path);
    if (copy_label(d->kind, sizeof d->kind, p->kind, field, err) != 0)
        return DI_EINVAL;
    d->flops[IR_F32] = p->flops_f32;
    d->flops[IR_F16] = p->flops_f16;
    d->flops[IR_BF16] = p->flops_bf16;
    d->flops[IR_F64] = p->flops_f64;
    d->flops[IR_I8] = p->flops_i8;
    d->flops_tf32 = p->flops_tf32;
#define HW_FROM_PB_(name, rule) d->name = p->name;
    HW_DEVICE_FIGURES(HW_FROM_PB_)
#undef HW_FROM_PB_
    return 0;
}

int
hw_from_proto(const Distir__V1__Hardware *p, hw_model **out, di_error *err)
{
    hw_model *hw;
    uint32_t *ids = NULL;
    hw_device *specs = NULL;
    size_t nover = p->n_overrides;
    int rc;
    *out = NULL;
    if (p->device == NULL)
        return di_error_set(err, DI_EINVAL, "device: missing");
    if (p->intra_node == NULL)
        return di_error_set(err, DI_EINVAL, "intra_node: missing");
    if (p->inter_node == NULL)
        return di_error_set(err, DI_EINVAL, "inter_node: missing");
    if (p->num_nodes < 1 || p->num_nodes > HW_MAX_DEVICES)
        return di_error_set(err, DI_EINVAL, "num_nodes: expected 1 to %u, got %u", HW_MAX_DEVICES,
                            p->num_nodes);
    if (p->devices_per_node < 1 || p->devices_per_node > HW_MAX_DEVICES ||
        (uint64_t)p->num_nodes * p->devices_per_node > HW_MAX_DEVICES)
        return di_error_set(err, DI_EINVAL,
                            "devices_per_node: expected 1 to %u with at most %u devices in all, "
                            "got %u",
                            HW_MAX_DEVICES, HW_MAX_DEVICES, p->devices_per_node);
    if ((int)p->algorithm < 0 || (int)p->algorithm >= NALGO)
        return di_error_set(err, DI_EINVAL, "algorithm: unknown value %d", (int)p->algorithm);
    hw = hw_new();
    if ((rc = copy_label(hw->name, sizeof hw->name, p->name, "name", err)) != 0)
        goto fail;
    hw->num_nodes = p->num_nodes;
    hw->devices_per_node = p->devices_per_node;
    hw->ndevice = p->num_nodes * p->devices_per_node;
    if ((rc = device_from_proto(p->device, &hw->device, "device.", err)) != 0)
        goto fail;
    if (nover > hw->ndevice) {
        rc = di_error_set(err, DI_EINVAL, "overrides: %zu overrides for %u devices", nover,
                          hw->ndevice);
        goto fail;
    }
    if (nover > 0) {
        ids = di_xmalloc(nover * sizeof *ids);
        specs = di_xmalloc(nover * sizeof *specs);
    }
    for (size_t i = 0; i < nover; i++) {
        char path[64];
        const Distir__V1__DeviceOverride *o = p->overrides[i];
        snprintf(path, sizeof path, "overrides[%zu].spec.", i);
        if (o->spec == NULL) {
            rc = di_error_set(err, DI_EINVAL, "overrides[%zu].spec: missing", i);
            goto fail;
        }
        ids[i] = o->device;
        if ((rc = device_from_proto(o->spec, &specs[i], path, err)) != 0)
            goto fail;
    }
    if ((rc = hw_set_overrides(hw, (uint32_t)nover, ids, specs, err)) != 0)
        goto fail;
    hw->intra_node.bandwidth = p->intra_node->bandwidth;
    hw->intra_node.latency = p->intra_node->latency;
    hw->inter_node.bandwidth = p->inter_node->bandwidth;
    hw->inter_node.latency = p->inter_node->latency;
    hw->algorithm = (hw_algo)p->algorithm;
    hw->collective_step_latency = p->collective_step_latency;
    if (p->n_tables > HW_MAX_TABLES || p->n_op_times > HW_MAX_OP_TIMES) {
        rc = di_error_set(err, DI_EINVAL, "calibration: %zu tables and %zu op times (limits %u, %u)",
                          p->n_tables, p->n_op_times, HW_MAX_TABLES, HW_MAX_OP_TIMES);
        goto fail;
    }
    for (size_t i = 0; i < p->n_tables; i++) {
        const Distir__V1__CollectiveTable *t = p->tables[i];
        int kind = ir_opkind_from_name(t->op, strlen(t->op));
        if (kind == IR_OP_NONE || !(ir_opkind_info(kind)->flags & IR_OPF_COLLECTIVE)) {
            rc = di_error_set(err, DI_EINVAL, "tables[%zu].op: '%s' is not a collective", i,
                              t->op);
            goto fail;
        }
        if (t->n_bytes != t->n_seconds || t->n_bytes > HW_MAX_POINTS) {
            rc = di_error_set(err, DI_EINVAL,
                              "tables[%zu]: %zu sizes and %zu times (equal counts, at most %u)",
                              i, t->n_bytes, t->n_seconds, HW_MAX_POINTS);
            goto fail;
        }
        if ((rc = hw_add_table(hw, kind, t->group, t->inter_node, (uint32_t)t->n_bytes, t->bytes,
                               t->seconds, err)) != 0) {
            di_error_prefix(err, "tables[%zu]", i);
            goto fail;
        }
    }
    for (size_t i = 0; i < p->n_op_times; i++)
        if ((rc = hw_add_op_time(hw, p->op_times[i]->signature, p->op_times[i]->seconds, err)) !=
            0) {
            di_error_prefix(err, "op_times[%zu]", i);
            goto fail;
        }
    if ((rc = hw_validate(hw, err)) != 0)
        goto fail;
    di_free(ids);
    di_free(specs);
    *out = hw;
    return 0;
fail:
    di_free(ids);
    di_free(specs);
    hw_free(hw);
    return rc;
}

static Distir__V1__Device *
device_to_proto(const hw_device *d)
{
    Distir__V1__Device *p = di_xmalloc(sizeof *p);
    distir__v1__device__init(p);
    p->kind = (char *)d->kind;
    p->flops_f32 = d->flops[IR_F32];
    p->flops_f16 = d->flops[IR_F16];
    p->flops_bf16 = d->flops[IR_BF16];
    p->flops_f64 = d->flops[IR_F64];
    p->flops_i8 = d->flops[IR_I8];
    p->flops_tf32 = d->flops_tf32;
#define HW_TO_PB_(name, rule) p->name = d->name;
    HW_DEVICE_FIGURES(HW_TO_PB_)
#undef HW_TO_PB_
    return p;
}

static Distir__V1__Link *
link_to_proto(const hw_link *l)
{
    Distir__V1__Link *p = di_xmalloc(sizeof *p);
    distir__v1__link__init(p);
    p->bandwidth = l->bandwidth;
    p->latency = l->latency;
    return p;
}

void
hw_to_proto(const hw_model *hw, Distir__V1__Hardware *p)
{
    distir__v1__hardware__init(p);
    p->name = (char *)hw->name;
    p->num_nodes = hw->num_nodes;
    p->devices_per_node = hw->devices_per_node;
    p->device = device_to_proto(&hw->device);
    p->n_overrides = hw->noverride;
    if (hw->noverride > 0) {
        p->overrides = di_xmalloc(hw->noverride * sizeof *p->overrides);
        for (uint32_t i = 0; i < hw->noverride; i++) {
            Distir__V1__DeviceOverride *o = di_xmalloc(sizeof *o);
            distir__v1__device_override__init(o);
            o->device = hw->override_ids[i];
            o->spec = device_to_proto(&hw->overrides[i]);
            p->overrides[i] = o;
        }
    }
    p->intra_node = link_to_proto(&hw->intra_node);
    p->inter_node = link_to_proto(&hw->inter_node);
    p->algorithm = (Distir__V1__CollectiveAlgo)hw->algorithm;
    p->collective_step_latency = hw->collective_step_latency;
    p->n_tables = hw->ntable;
    if (hw->ntable) {
        p->tables = di_xmalloc(hw->ntable * sizeof *p->tables);
        for (uint32_t i = 0; i < hw->ntable; i++) {
            const hw_coll_table *t = &hw->tables[i];
            Distir__V1__CollectiveTable *q = di_xmalloc(sizeof *q);
            distir__v1__collective_table__init(q);
            q->op = (char *)ir_opkind_name(t->kind);
            q->group = t->group;
            q->inter_node = t->inter_node;
            q->n_bytes = q->n_seconds = t->npoint;
            q->bytes = t->bytes;
            q->seconds = t->seconds;
            p->tables[i] = q;
        }
    }
    p->n_op_times = hw->nop_time;
    if (hw->nop_time) {
        p->op_times = di_xmalloc(hw->nop_time * sizeof *p->op_times);
        for (uint32_t i = 0; i < hw->nop_time; i++) {
            Distir__V1__OpTime *q = di_xmalloc(sizeof *q);
            distir__v1__op_time__init(q);
            q->signature = hw->op_times[i].signature;
            q->seconds = hw->op_times[i].seconds;
            p->op_times[i] = q;
        }
    }
}

void
hw_proto_fini(Distir__V1__Hardware *p)
{
    di_free(p->device);
    for (size_t i = 0; i < p->n_overrides; i++) {
        di_free(p->overrides[i]->spec);
        di_free(p->overrides[i]);
    }
    di_free(p->overrides);
    di_free(p->intra_node);
    di_free(p->inter_node);
    for (size_t i = 0; i < p->n_tables; i++)
        di_free(p->tables[i]);
    di_free(p->tables);
    for (size_t i = 0; i < p->n_op_times; i++)
        di_free(p->op_times[i]);
    di_free(p->op_times);
    distir__v1__hardware__init(p);
}
