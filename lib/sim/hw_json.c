/*
 * hw_json.c: the JSON form of the hardware model (docs/hardware.md). Parsing
 * goes through jansson and checks every key against the schema: unknown keys,
 * wrong types and out-of-range numbers are errors that name the field
 * ("device.memory_bandwidth: expected a positive number, got -1"), so a typo
 * is never silently ignored. Printing writes a fixed key order with the
 * shortest decimal form of each number that reads back to the same bits, so
 * hw_from_json(hw_to_json(hw)) has the same hw_hash as hw.
 */
#include "sim/hw.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <threads.h>

#define JSON_MAX_BYTES (256u << 20) /* a hardware file larger than this is refused */
#define PATH_MAX_LEN 4096

/* ---- error helpers ---- */

/* path joined with key: "device" + "kind" -> "device.kind"; "" + "name" -> "name". */
static void
join(char *out, size_t size, const char *path, const char *key)
{
    snprintf(out, size, "%s%s%s", path, path[0] ? "." : "", key);
}

/* A short description of a JSON value for messages: "a string", "-1", "true". */
static void
describe(const json_t *v, char *out, size_t size)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        snprintf(out, size, "an object");
        break;
    case JSON_ARRAY:
        snprintf(out, size, "an array");
        break;
    case JSON_STRING:
        snprintf(out, size, "a string");
        break;
    case JSON_INTEGER:
        snprintf(out, size, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        break;
    case JSON_REAL:
        snprintf(out, size, "%g", json_real_value(v));
        break;
    case JSON_TRUE:
        snprintf(out, size, "true");
        break;
    case JSON_FALSE:
        snprintf(out, size, "false");
        break;
    default:
        snprintf(out, size, "null");
    }
}

static int
type_error(di_error *err, const char *field, const char *want, const json_t *v)
{
    char got[64];
    describe(v, got, sizeof got);
    return di_error_set(err, DI_EINVAL, "%s: expected %s, got %s", field, want, got);
}

/* Rejects keys of obj that are not in allowed (NULL-terminated). */
static int
check_keys(const json_t *obj, const char *path, const char *const *allowed, di_error *err)
{
    const char *key;
    json_t *v;
    json_object_foreach ((json_t *)obj, key, v) {
        size_t i;
        di_buf b;
        for (i = 0; allowed[i]; i++)
            if (strcmp(allowed[i], key) == 0)
                break;
        if (allowed[i])
            continue;
        di_buf_init(&b);
        for (i = 0; allowed[i]; i++)
            di_buf_printf(&b, "%s%s", i ? ", " : "", allowed[i]);
        di_error_set(err, DI_EINVAL, "%s%sunknown key \"%s\" (expected one of: %s)", path,
                     path[0] ? ": " : "", key, b.data);
        di_buf_fini(&b);
        return DI_EINVAL;
    }
    return 0;
}

/* The member key of obj, or NULL; a missing required member is an error (*rc set). */
static json_t *
member(const json_t *obj, const char *path, const char *key, int required, int *rc, di_error *err)
{
    json_t *v = json_object_get(obj, key);
    if (v == NULL && required) {
        char field[256];
        join(field, sizeof field, path, key);
        *rc = di_error_set(err, DI_EINVAL, "%s: missing (required)", field);
    }
    return v;
}

static const char *
rule_text(int rule)
{
    switch (rule) {
    case HW_RULE_POSITIVE:
        return "a positive number";
    case HW_RULE_NONNEG:
        return "a number >= 0";
    default:
        return "a number in (0, 1]";
    }
}

/* Reads obj.key as a number obeying rule into *out; absent leaves *out alone unless required. */
static int
get_number(const json_t *obj, const char *path, const char *key, int rule, int required,
           double *out, di_error *err)
{
    int rc = 0;
    json_t *v = member(obj, path, key, required, &rc, err);
    char field[256];
    double x;
    int ok;
    if (v == NULL)
        return rc;
    join(field, sizeof field, path, key);
    if (!json_is_number(v))
        return type_error(err, field, rule_text(rule), v);
    x = json_number_value(v);
    ok = isfinite(x) && (rule == HW_RULE_POSITIVE ? x > 0
                         : rule == HW_RULE_NONNEG ? x >= 0
                                                  : x > 0 && x <= 1);
    if (!ok)
        return type_error(err, field, rule_text(rule), v);
    *out = x;
    return 0;
}

static int
get_uint(const json_t *obj, const char *path, const char *key, uint32_t min, uint32_t max,
         int required, uint32_t *out, di_error *err)
{
    int rc = 0;
    json_t *v = member(obj, path, key, required, &rc, err);
    char field[256], want[64];
    if (v == NULL)
        return rc;
    join(field, sizeof field, path, key);
    snprintf(want, sizeof want, "an integer from %u to %u", min, max);
    if (!json_is_integer(v) || json_integer_value(v) < (json_int_t)min ||
        json_integer_value(v) > (json_int_t)max)
        return type_error(err, field, want, v);
    *out = (uint32_t)json_integer_value(v);
    return 0;
}

/* Reads a string member shorter than size bytes into out. */
static int
get_label(const json_t *obj, const char *path, const char *key, char *out, size_t size,
          di_error *err)
{
    int rc = 0;
    json_t *v = member(obj, path, key, 0, &rc, err);
    char field[256];
    size_t n;
    if (v == NULL)
        return rc;
    join(field, sizeof field, path, key);
    if (!json_is_string(v))
        return type_error(err, field, "a string", v);
    n = json_string_length(v);
    if (n >= size)
        return di_error_set(err, DI_EINVAL, "%s: expected at most %zu bytes, got %zu", field,
                            size - 1, n);
    memcpy(out, json_string_value(v), n + 1);
    return 0;
}

static int
expect_object(const json_t *v, const char *field, di_error *err)
{
    return json_is_object(v) ? 0 : type_error(err, field, "an object", v);
}

/* ---- the device ---- */

static const char *const device_keys[] = {
    "kind",
    "flops",
#define HW_KEY_(name, rule) #name,
    HW_DEVICE_FIGURES(HW_KEY_)
#undef HW_KEY_
        NULL,
};

/* The JSON flops keys and where each goes: a dtype index, or 0 for tf32. */
static const struct {
    const char *key;
    int dtype;
} flops_keys[] = {
    {"f32", IR_F32}, {"f16", IR_F16}, {"bf16", IR_BF16},
    {"f64", IR_F64}, {"i8", IR_I8},   {"tf32", 0},
};
#define NFLOPS_KEYS (sizeof flops_keys / sizeof flops_keys[0])

static int
parse_flops(const json_t *v, const char *path, hw_device *d, di_error *err)
{
    static const char *const keys[] = {"f32", "f16", "bf16", "f64", "i8", "tf32", NULL};
    int rc;
    if ((rc = expect_object(v, path, err)) != 0 || (rc = check_keys(v, path, keys, err)) != 0)
        return rc;
    for (size_t i = 0; i < NFLOPS_KEYS; i++) {
        double *slot = flops_keys[i].dtype ? &d->flops[flops_keys[i].dtype] : &d->flops_tf32;
        if ((rc = get_number(v, path, flops_keys[i].key, HW_RULE_NONNEG, 0, slot, err)) != 0)
            return rc;
    }
    return 0;
}

/*
 * Reads a device object over *d, which holds the defaults (or, for an
 * override, the default device): keys present replace, flops merge per dtype.
 * top: the default device, whose flops and memory figures are required.
 */
static int
parse_device(const json_t *v, const char *path, hw_device *d, int top, di_error *err)
{
    char field[256];
    int rc = 0;
    json_t *flops;
    if ((rc = expect_object(v, path, err)) != 0 ||
        (rc = check_keys(v, path, device_keys, err)) != 0)
        return rc;
    if ((rc = get_label(v, path, "kind", d->kind, sizeof d->kind, err)) != 0)
        return rc;
    flops = member(v, path, "flops", top, &rc, err);
    if (rc != 0)
        return rc;
    join(field, sizeof field, path, "flops");
    if (flops && (rc = parse_flops(flops, field, d, err)) != 0)
        return rc;
#define HW_GET_(name, rule)                                                                        \
    if ((rc = get_number(v, path, #name, rule, top && rule == HW_RULE_POSITIVE, &d->name, err)) != \
        0)                                                                                         \
        return rc;
    HW_DEVICE_FIGURES(HW_GET_)
#undef HW_GET_
    return 0;
}

static int
parse_link(const json_t *v, const char *path, hw_link *l, di_error *err)
{
    static const char *const keys[] = {"bandwidth", "latency", NULL};
    int rc;
    if ((rc = expect_object(v, path, err)) != 0 || (rc = check_keys(v, path, keys, err)) != 0 ||
        (rc = get_number(v, path, "bandwidth", HW_RULE_POSITIVE, 1, &l->bandwidth, err)) != 0 ||
        (rc = get_number(v, path, "latency", HW_RULE_NONNEG, 0, &l->latency, err)) != 0)
        return rc;
    return 0;
}

static int
parse_overrides(const json_t *v, hw_model *hw, di_error *err)
{
    static const char *const keys[] = {"device", "spec", NULL};
    size_t n;
    uint32_t *ids;
    hw_device *specs;
    int rc = 0;
    if (!json_is_array(v))
        return type_error(err, "overrides", "an array", v);
    n = json_array_size(v);
    if (n > hw->ndevice)
        return di_error_set(err, DI_EINVAL, "overrides: %zu overrides for %u devices", n,
                            hw->ndevice);
    ids = di_xmalloc((n ? n : 1) * sizeof *ids);
    specs = di_xmalloc((n ? n : 1) * sizeof *specs);
    for (size_t i = 0; i < n && rc == 0; i++) {
        char path[64], spath[80];
        const json_t *o = json_array_get(v, i);
        json_t *spec;
        snprintf(path, sizeof path, "overrides[%zu]", i);
        snprintf(spath, sizeof spath, "%s.spec", path);
        if ((rc = expect_object(o, path, err)) != 0 || (rc = check_keys(o, path, keys, err)) != 0 ||
            (rc = get_uint(o, path, "device", 0, hw->ndevice - 1, 1, &ids[i], err)) != 0)
            break;
        spec = member(o, path, "spec", 1, &rc, err);
        if (rc != 0)
            break;
        specs[i] = hw->device;
        rc = parse_device(spec, spath, &specs[i], 0, err);
    }
    if (rc == 0)
        rc = hw_set_overrides(hw, (uint32_t)n, ids, specs, err);
    di_free(ids);
    di_free(specs);
    return rc;
}

/* ---- calibration ---- */

/* The communication op named "all_reduce" (its table name without "dist."), or 0. */
static int
comm_kind_from_name(const char *s)
{
    for (int k = 1; k < IR_NOPKIND; k++) {
        const char *name = ir_opkind_name(k);
        if ((ir_opkind_info(k)->flags & IR_OPF_COMM) && strncmp(name, "dist.", 5) == 0 &&
            strcmp(name + 5, s) == 0)
            return k;
    }
    return 0;
}

/* A calibration file path: absolute, or relative to base_dir. */
static int
resolve(const char *base_dir, const char *path, char *out, size_t size, const char *field,
        di_error *err)
{
    int n;
    if (path[0] == '/' || strcmp(base_dir, ".") == 0)
        n = snprintf(out, size, "%s", path);
    else
        n = snprintf(out, size, "%s/%s", base_dir, path);
    if (n < 0 || (size_t)n >= size)
        return di_error_set(err, DI_EINVAL, "%s: path too long", field);
    return 0;
}

static int
no_files(const char *field, di_error *err)
{
    return di_error_set(err, DI_EINVAL,
                        "%s: a file reference is allowed only in a file loaded with hw_load "
                        "(give the data inline)",
                        field);
}

static int
parse_points(const json_t *v, const char *path, int kind, uint32_t group, int inter, hw_model *hw,
             di_error *err)
{
    size_t n;
    double *bytes, *seconds;
    int rc = 0;
    if (!json_is_array(v))
        return type_error(err, path, "an array of [bytes, seconds] pairs", v);
    n = json_array_size(v);
    if (n < 1 || n > HW_MAX_POINTS)
        return di_error_set(err, DI_EINVAL, "%s: expected 1 to %u points, got %zu", path,
                            HW_MAX_POINTS, n);
    bytes = di_xmalloc(n * sizeof *bytes);
    seconds = di_xmalloc(n * sizeof *seconds);
    for (size_t i = 0; i < n; i++) {
        char field[128];
        const json_t *p = json_array_get(v, i);
        const json_t *b, *s;
        snprintf(field, sizeof field, "%s[%zu]", path, i);
        b = json_array_get(p, 0);
        s = json_array_get(p, 1);
        if (!json_is_array(p) || json_array_size(p) != 2 || !json_is_number(b) ||
            !json_is_number(s) || !(json_number_value(b) > 0) || !(json_number_value(s) > 0)) {
            rc = type_error(err, field, "a pair [bytes, seconds] of positive numbers", p);
            break;
        }
        bytes[i] = json_number_value(b);
        seconds[i] = json_number_value(s);
    }
    if (rc == 0)
        rc = hw_add_table(hw, kind, group, inter, (uint32_t)n, bytes, seconds, err);
    di_free(bytes);
    di_free(seconds);
    return rc;
}

static int
parse_collective(const json_t *v, size_t index, const char *base_dir, hw_model *hw, di_error *err)
{
    static const char *const keys[] = {"op", "group", "inter_node", "csv", "points", NULL};
    char path[64], field[96];
    json_t *op, *inter, *csv, *points;
    uint32_t group = 0;
    int kind, inter_node = 0, rc = 0;
    snprintf(path, sizeof path, "calibration.collectives[%zu]", index);
    if ((rc = expect_object(v, path, err)) != 0 || (rc = check_keys(v, path, keys, err)) != 0)
        return rc;
    op = member(v, path, "op", 1, &rc, err);
    if (rc != 0)
        return rc;
    join(field, sizeof field, path, "op");
    kind = json_is_string(op) ? comm_kind_from_name(json_string_value(op)) : 0;
    if (kind == 0)
        return type_error(err, field,
                          "a communication op (all_reduce, all_gather, reduce_scatter, "
                          "all_to_all, broadcast, scatter, gather, send)",
                          op);
    if ((rc = get_uint(v, path, "group", 1, HW_MAX_DEVICES, 1, &group, err)) != 0)
        return rc;
    inter = json_object_get(v, "inter_node");
    if (inter) {
        join(field, sizeof field, path, "inter_node");
        if (!json_is_boolean(inter))
            return type_error(err, field, "true or false", inter);
        inter_node = json_is_true(inter);
    }
    for (uint32_t i = 0; i < hw->ntable; i++)
        if (hw->tables[i].kind == kind && hw->tables[i].group == group &&
            hw->tables[i].inter_node == inter_node)
            return di_error_set(err, DI_EINVAL,
                                "%s: a second table for op %s, group %u, inter_node %s", path,
                                json_string_value(op), group, inter_node ? "true" : "false");
    csv = json_object_get(v, "csv");
    points = json_object_get(v, "points");
    if ((csv == NULL) == (points == NULL))
        return di_error_set(err, DI_EINVAL, "%s: expected exactly one of \"csv\" and \"points\"",
                            path);
    if (points) {
        join(field, sizeof field, path, "points");
        return parse_points(points, field, kind, group, inter_node, hw, err);
    }
    join(field, sizeof field, path, "csv");
    if (!json_is_string(csv))
        return type_error(err, field, "a file name", csv);
    if (base_dir == NULL)
        return no_files(field, err);
    {
        char file[PATH_MAX_LEN];
        if ((rc = resolve(base_dir, json_string_value(csv), file, sizeof file, field, err)) != 0)
            return rc;
        if ((rc = hw_load_collective_csv(hw, kind, group, inter_node, file, err)) != 0)
            di_error_prefix(err, "%s", field);
    }
    return rc;
}

static int
op_time_cmp(const void *a, const void *b)
{
    return strcmp(((const hw_op_time *)a)->signature, ((const hw_op_time *)b)->signature);
}

/* Inline op times: {"signature": seconds, ...}, sorted once (keys are unique in jansson). */
static int
parse_op_times_inline(const json_t *v, hw_model *hw, di_error *err)
{
    size_t n = json_object_size(v), k = 0;
    hw_op_time *t;
    const char *key;
    json_t *val;
    if (n > HW_MAX_OP_TIMES)
        return di_error_set(err, DI_ETOOBIG, "calibration.op_times: %zu entries exceed %u", n,
                            HW_MAX_OP_TIMES);
    if (n == 0)
        return 0;
    t = di_xcalloc(n, sizeof *t);
    json_object_foreach ((json_t *)v, key, val) {
        char field[96];
        snprintf(field, sizeof field, "calibration.op_times[\"%.40s%s\"]", key,
                 strlen(key) > 40 ? "..." : "");
        if (key[0] == '\0' || strlen(key) >= HW_SIGNATURE_MAX) {
            di_error_set(err, DI_EINVAL, "%s: expected a signature of 1 to %d bytes", field,
                         HW_SIGNATURE_MAX - 1);
            goto fail;
        }
        if (!json_is_number(val) || !isfinite(json_number_value(val)) ||
            json_number_value(val) < 0) {
            type_error(err, field, "seconds >= 0", val);
            goto fail;
        }
        t[k].signature = di_xstrdup(key);
        t[k].seconds = json_number_value(val);
        k++;
    }
    qsort(t, k, sizeof *t, op_time_cmp);
    hw->op_times = t;
    hw->nop_time = (uint32_t)k;
    return 0;
fail:
    for (size_t i = 0; i < k; i++)
        di_free(t[i].signature);
    di_free(t);
    return DI_EINVAL;
}

static int
parse_calibration(const json_t *v, const char *base_dir, hw_model *hw, di_error *err)
{
    static const char *const keys[] = {"collectives", "op_times", NULL};
    json_t *coll, *ops;
    int rc;
    if ((rc = expect_object(v, "calibration", err)) != 0 ||
        (rc = check_keys(v, "calibration", keys, err)) != 0)
        return rc;
    coll = json_object_get(v, "collectives");
    if (coll) {
        if (!json_is_array(coll))
            return type_error(err, "calibration.collectives", "an array", coll);
        if (json_array_size(coll) > HW_MAX_TABLES)
            return di_error_set(err, DI_ETOOBIG, "calibration.collectives: more than %u tables",
                                HW_MAX_TABLES);
        for (size_t i = 0; i < json_array_size(coll); i++)
            if ((rc = parse_collective(json_array_get(coll, i), i, base_dir, hw, err)) != 0)
                return rc;
    }
    ops = json_object_get(v, "op_times");
    if (ops == NULL)
        return 0;
    if (json_is_object(ops))
        return parse_op_times_inline(ops, hw, err);
    if (!json_is_string(ops))
        return type_error(err, "calibration.op_times", "an object or a file name", ops);
    if (base_dir == NULL)
        return no_files("calibration.op_times", err);
    {
        char file[PATH_MAX_LEN];
        if ((rc = resolve(base_dir, json_string_value(ops), file, sizeof file,
                          "calibration.op_times", err)) != 0)
            return rc;
        if ((rc = hw_load_op_times(hw, file, err)) != 0)
            di_error_prefix(err, "calibration.op_times");
    }
    return rc;
}

/* ---- the model ---- */

static int
parse_model(const json_t *root, const char *base_dir, hw_model *hw, di_error *err)
{
    static const char *const keys[] = {
        "name",        "comment",    "num_nodes",  "devices_per_node", "device",
        "overrides",   "intra_node", "inter_node", "algorithm",        "collective_step_latency",
        "calibration", NULL,
    };
    json_t *v;
    int rc = 0;
    if (!json_is_object(root))
        return type_error(err, "hardware", "a JSON object", root);
    if ((rc = check_keys(root, "", keys, err)) != 0 ||
        (rc = get_label(root, "", "name", hw->name, sizeof hw->name, err)) != 0)
        return rc;
    v = json_object_get(root, "comment");
    if (v && !json_is_string(v))
        return type_error(err, "comment", "a string", v);
    if ((rc = get_uint(root, "", "num_nodes", 1, HW_MAX_DEVICES, 1, &hw->num_nodes, err)) != 0 ||
        (rc = get_uint(root, "", "devices_per_node", 1, HW_MAX_DEVICES, 1, &hw->devices_per_node,
                       err)) != 0)
        return rc;
    if ((uint64_t)hw->num_nodes * hw->devices_per_node > HW_MAX_DEVICES)
        return di_error_set(
            err, DI_ETOOBIG, "num_nodes * devices_per_node: %llu devices exceed the limit of %u",
            (unsigned long long)hw->num_nodes * hw->devices_per_node, HW_MAX_DEVICES);
    hw->ndevice = hw->num_nodes * hw->devices_per_node;
    /* Defaults of optional device figures: the plain roofline. */
    hw->device.max_efficiency = 1;
    hw->device.elementwise_efficiency = 1;
    v = member(root, "", "device", 1, &rc, err);
    if (rc != 0 || (rc = parse_device(v, "device", &hw->device, 1, err)) != 0)
        return rc;
    v = json_object_get(root, "overrides");
    if (v && (rc = parse_overrides(v, hw, err)) != 0)
        return rc;
    v = member(root, "", "intra_node", 1, &rc, err);
    if (rc != 0 || (rc = parse_link(v, "intra_node", &hw->intra_node, err)) != 0)
        return rc;
    v = member(root, "", "inter_node", 1, &rc, err);
    if (rc != 0 || (rc = parse_link(v, "inter_node", &hw->inter_node, err)) != 0)
        return rc;
    v = json_object_get(root, "algorithm");
    if (v) {
        int a = json_is_string(v) ? hw_algo_from_name(json_string_value(v)) : -1;
        if (a < 0)
            return type_error(err, "algorithm",
                              "one of \"auto\", \"ring\", \"tree\", \"hierarchical\", "
                              "\"slowest_link\"",
                              v);
        hw->algorithm = (hw_algo)a;
    }
    if ((rc = get_number(root, "", "collective_step_latency", HW_RULE_NONNEG, 0,
                         &hw->collective_step_latency, err)) != 0)
        return rc;
    v = json_object_get(root, "calibration");
    if (v && (rc = parse_calibration(v, base_dir, hw, err)) != 0)
        return rc;
    return hw_validate(hw, err);
}

/*
 * Jansson allocates through di_malloc and di_free, so that fault injection
 * reaches it. Its allocator is process-wide and must be set before its first
 * allocation: once, here, before any JSON is read.
 */
static once_flag json_alloc_once = ONCE_FLAG_INIT;

static void
json_alloc_set(void)
{
    json_set_alloc_funcs(di_malloc, di_free);
}

/* Parses text; base_dir NULL forbids file references. */
static int
from_json(const char *text, size_t len, const char *base_dir, hw_model **out, di_error *err)
{
    json_error_t jerr;
    json_t *root;
    hw_model *hw;
    int rc;
    *out = NULL;
    call_once(&json_alloc_once, json_alloc_set);
    root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (root == NULL && json_error_code(&jerr) == json_error_out_of_memory)
        return di_error_set(err, DI_ENOMEM, "out of memory reading JSON");
    if (root == NULL)
        return di_error_at(err, DI_EPARSE, (uint32_t)(jerr.line > 0 ? jerr.line : 0),
                           (uint32_t)(jerr.column > 0 ? jerr.column : 0), "malformed JSON: %s",
                           jerr.text);
    hw = hw_new();
    rc = parse_model(root, base_dir, hw, err);
    json_decref(root);
    if (rc != 0) {
        hw_free(hw);
        return rc;
    }
    *out = hw;
    return 0;
}

int
hw_from_json(const char *text, size_t len, hw_model **out, di_error *err)
{
    return from_json(text, len, NULL, out, err);
}

int
hw_load(const char *name_or_path, hw_model **out, di_error *err)
{
    size_t n = strlen(name_or_path);
    struct stat st;
    uint8_t *data;
    size_t len;
    char dir[PATH_MAX_LEN];
    const char *slash;
    int rc;
    *out = NULL;
    if (!(n >= 5 && strcmp(name_or_path + n - 5, ".json") == 0) &&
        !(stat(name_or_path, &st) == 0 && S_ISREG(st.st_mode)))
        return hw_preset(name_or_path, out, err);
    if ((rc = di_read_file(name_or_path, JSON_MAX_BYTES, &data, &len, err)) != 0)
        return rc;
    slash = strrchr(name_or_path, '/');
    if (slash == NULL)
        snprintf(dir, sizeof dir, ".");
    else if (slash == name_or_path)
        snprintf(dir, sizeof dir, "/");
    else
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - name_or_path), name_or_path);
    rc = from_json((const char *)data, len, dir, out, err);
    di_free(data);
    if (rc != 0 && err) {
        /* "FILE:LINE:COLUMN: malformed JSON: ..." or "FILE: device.kind: ..." */
        char tmp[sizeof err->msg];
        snprintf(tmp, sizeof tmp, "%s:%s%s", name_or_path, err->line ? "" : " ", err->msg);
        memcpy(err->msg, tmp, sizeof tmp);
    }
    return rc;
}

/* ---- printing ---- */

static void
put_key(di_buf *b, int indent, const char *key)
{
    for (int i = 0; i < indent; i++)
        di_buf_putc(b, ' ');
    di_buf_json_str(b, key);
    di_buf_puts(b, ": ");
}

/*
 * A number in the shortest form that reads back to the same bits, or, for a
 * count such as memory_bytes (85899345920 rather than 8.589934592e+10), as
 * an integer when it is a whole number below 1e15. Both read back exactly.
 */
static void
put_number(di_buf *b, double v, int count)
{
    if (count && v >= 0 && v < 1e15 && v == floor(v))
        di_buf_printf(b, "%.0f", v);
    else
        di_buf_double(b, v);
}

static void
put_device(di_buf *b, int indent, const hw_device *d)
{
    di_buf_puts(b, "{\n");
    put_key(b, indent + 2, "kind");
    di_buf_json_str(b, d->kind);
    di_buf_puts(b, ",\n");
    put_key(b, indent + 2, "flops");
    di_buf_putc(b, '{');
    for (size_t i = 0; i < NFLOPS_KEYS; i++) {
        di_buf_printf(b, "%s\"%s\": ", i ? ", " : "", flops_keys[i].key);
        di_buf_double(b, flops_keys[i].dtype ? d->flops[flops_keys[i].dtype] : d->flops_tf32);
    }
    di_buf_putc(b, '}');
#define HW_PUT_(name, rule)                                                                        \
    di_buf_puts(b, ",\n");                                                                         \
    put_key(b, indent + 2, #name);                                                                 \
    put_number(b, d->name, strcmp(#name, "memory_bytes") == 0);
    HW_DEVICE_FIGURES(HW_PUT_)
#undef HW_PUT_
    di_buf_putc(b, '\n');
    for (int i = 0; i < indent; i++)
        di_buf_putc(b, ' ');
    di_buf_putc(b, '}');
}

static void
put_link(di_buf *b, const hw_link *l)
{
    di_buf_puts(b, "{\"bandwidth\": ");
    di_buf_double(b, l->bandwidth);
    di_buf_puts(b, ", \"latency\": ");
    di_buf_double(b, l->latency);
    di_buf_putc(b, '}');
}

static void
put_calibration(di_buf *b, const hw_model *hw)
{
    int more = 0;
    di_buf_puts(b, "{\n");
    if (hw->ntable > 0) {
        put_key(b, 4, "collectives");
        di_buf_puts(b, "[\n");
        for (uint32_t i = 0; i < hw->ntable; i++) {
            const hw_coll_table *t = &hw->tables[i];
            const char *name = ir_opkind_name(t->kind);
            di_buf_puts(b, "      {\"op\": ");
            di_buf_json_str(b, strncmp(name, "dist.", 5) == 0 ? name + 5 : name);
            di_buf_printf(b, ", \"group\": %u, \"inter_node\": %s, \"points\": [\n", t->group,
                          t->inter_node ? "true" : "false");
            for (uint32_t j = 0; j < t->npoint; j++) {
                di_buf_puts(b, "        [");
                put_number(b, t->bytes[j], 1);
                di_buf_puts(b, ", ");
                di_buf_double(b, t->seconds[j]);
                di_buf_puts(b, j + 1 < t->npoint ? "],\n" : "]\n");
            }
            di_buf_puts(b, i + 1 < hw->ntable ? "      ]},\n" : "      ]}\n");
        }
        di_buf_puts(b, "    ]");
        more = 1;
    }
    if (hw->nop_time > 0) {
        if (more)
            di_buf_puts(b, ",\n");
        put_key(b, 4, "op_times");
        di_buf_puts(b, "{\n");
        for (uint32_t i = 0; i < hw->nop_time; i++) {
            put_key(b, 6, hw->op_times[i].signature);
            di_buf_double(b, hw->op_times[i].seconds);
            di_buf_puts(b, i + 1 < hw->nop_time ? ",\n" : "\n");
        }
        di_buf_puts(b, "    }");
    }
    di_buf_puts(b, "\n  }");
}

char *
hw_to_json(const hw_model *hw)
{
    di_buf b;
    di_buf_init(&b);
    di_buf_puts(&b, "{\n");
    put_key(&b, 2, "name");
    di_buf_json_str(&b, hw->name);
    di_buf_printf(&b, ",\n  \"num_nodes\": %u,\n  \"devices_per_node\": %u,\n", hw->num_nodes,
                  hw->devices_per_node);
    put_key(&b, 2, "device");
    put_device(&b, 2, &hw->device);
    if (hw->noverride > 0) {
        di_buf_puts(&b, ",\n");
        put_key(&b, 2, "overrides");
        di_buf_puts(&b, "[\n");
        for (uint32_t i = 0; i < hw->noverride; i++) {
            di_buf_printf(&b, "    {\"device\": %u, \"spec\": ", hw->override_ids[i]);
            put_device(&b, 4, &hw->overrides[i]);
            di_buf_puts(&b, i + 1 < hw->noverride ? "},\n" : "}\n");
        }
        di_buf_puts(&b, "  ]");
    }
    di_buf_puts(&b, ",\n");
    put_key(&b, 2, "intra_node");
    put_link(&b, &hw->intra_node);
    di_buf_puts(&b, ",\n");
    put_key(&b, 2, "inter_node");
    put_link(&b, &hw->inter_node);
    di_buf_puts(&b, ",\n");
    put_key(&b, 2, "algorithm");
    di_buf_json_str(&b, hw_algo_name(hw->algorithm));
    di_buf_puts(&b, ",\n");
    put_key(&b, 2, "collective_step_latency");
    di_buf_double(&b, hw->collective_step_latency);
    if (hw->ntable > 0 || hw->nop_time > 0) {
        di_buf_puts(&b, ",\n");
        put_key(&b, 2, "calibration");
        put_calibration(&b, hw);
    }
    di_buf_puts(&b, "\n}\n");
    return di_buf_take(&b, NULL);
}
