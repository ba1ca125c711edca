/*
 * fuzz_hwjson.c: libFuzzer target for the hardware JSON parser. Any input
 * either fails with a message or yields a model that validates; that model
 * must survive hw_to_json -> hw_from_json, hw_clone and (without its
 * calibration, which the message lacks) protobuf pack -> unpack ->
 * hw_from_proto with its hash unchanged. Every lookup must stay in bounds.
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "distir.pb-c.h"
#include "sim/hw.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
check(int ok, const char *what, const di_error *err)
{
    if (!ok) {
        fprintf(stderr, "fuzz_hwjson: %s%s%s\n", what, err ? ": " : "", err ? err->msg : "");
        abort();
    }
}

static int
same_hash(const hw_model *a, const hw_model *b)
{
    di_hash x, y;
    hw_hash(a, &x);
    hw_hash(b, &y);
    return memcmp(x.b, y.b, sizeof x.b) == 0;
}

static void
check_proto(const hw_model *hw)
{
    hw_model *plain = hw_clone(hw), *back = NULL;
    Distir__V1__Hardware p;
    Distir__V1__Hardware *u;
    uint8_t *buf;
    size_t len;
    di_error err;
    /* The message carries no calibration: compare against the model without it. */
    for (uint32_t i = 0; i < plain->ntable; i++) {
        di_free(plain->tables[i].bytes);
        di_free(plain->tables[i].seconds);
    }
    di_free(plain->tables);
    plain->tables = NULL;
    plain->ntable = 0;
    for (uint32_t i = 0; i < plain->nop_time; i++)
        di_free(plain->op_times[i].signature);
    di_free(plain->op_times);
    plain->op_times = NULL;
    plain->nop_time = 0;
    hw_to_proto(plain, &p);
    len = distir__v1__hardware__get_packed_size(&p);
    buf = di_xmalloc(len ? len : 1);
    check(distir__v1__hardware__pack(&p, buf) == len, "pack size", NULL);
    hw_proto_fini(&p);
    u = distir__v1__hardware__unpack(NULL, len, buf);
    check(u != NULL, "unpack of a packed model", NULL);
    di_error_clear(&err);
    check(hw_from_proto(u, &back, &err) == 0, "hw_from_proto of a valid model", &err);
    check(same_hash(plain, back), "protobuf round trip changed the hash", NULL);
    hw_free(back);
    distir__v1__hardware__free_unpacked(u, NULL);
    di_free(buf);
    hw_free(plain);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    hw_model *hw = NULL, *back = NULL, *copy;
    di_error err;
    char *json;
    di_error_clear(&err);
    if (hw_from_json((const char *)data, size, &hw, &err) != 0) {
        check(hw == NULL && err.msg[0] != '\0', "a failure without a message", NULL);
        return 0;
    }
    check(hw_validate(hw, &err) == 0, "parsed model does not validate", &err);
    json = hw_to_json(hw);
    di_error_clear(&err);
    check(hw_from_json(json, strlen(json), &back, &err) == 0, "printed JSON does not parse", &err);
    check(same_hash(hw, back), "JSON round trip changed the hash", NULL);
    {
        char *again = hw_to_json(back);
        check(strcmp(json, again) == 0, "printing is not stable", NULL);
        di_free(again);
    }
    copy = hw_clone(hw);
    check(same_hash(hw, copy), "hw_clone changed the hash", NULL);
    hw_free(copy);
    /* Lookups over every device and link stay in bounds. */
    for (uint32_t d = 0; d < hw->ndevice && d < 4096; d++) {
        const hw_device *spec = hw_device_spec(hw, d);
        check(spec != NULL && spec->memory_bytes > 0, "device spec", NULL);
        check(hw_link_between(hw, 0, d) != NULL, "link", NULL);
    }
    for (uint32_t i = 0; i < hw->ntable; i++) {
        const hw_coll_table *t = &hw->tables[i];
        double probes[4] = {t->bytes[0] / 3, t->bytes[0], t->bytes[t->npoint - 1] * 2,
                            t->bytes[0] / 2 + t->bytes[t->npoint - 1] / 2};
        for (int k = 0; k < 4; k++) {
            double v;
            if (!isfinite(probes[k]))
                continue;
            v = hw_table_time(hw, t->kind, t->group, t->inter_node, probes[k]);
            check(v >= 0, "table time negative or missing", NULL);
        }
        check(hw_table_time(hw, t->kind, t->group, t->inter_node, t->bytes[0]) == t->seconds[0],
              "table time not exact at a measured size", NULL);
    }
    for (uint32_t i = 0; i < hw->nop_time; i++)
        check(hw_op_time_lookup(hw, hw->op_times[i].signature) == hw->op_times[i].seconds,
              "op time lookup", NULL);
    check_proto(hw);
    di_free(json);
    hw_free(back);
    hw_free(hw);
    return 0;
}
