/*
 * support.c: helpers shared by the cmocka test binaries (support.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>
#include <time.h>

#include "support.h"

double
monotonic_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

ir_id
t2(ir_module *m, int64_t a, int64_t b, int32_t device)
{
    int64_t d[2] = {a, b};
    return ir_type_tensor(m, IR_F32, 2, d, device);
}

uint32_t
count_kind(const ir_module *m, int kind)
{
    uint32_t n = 0;
    for (ir_id op = 1; op < m->nop; op++)
        n += m->ops[op].kind == kind;
    return n;
}

void
assert_verifies(ir_module *m)
{
    di_error err;
    di_error_clear(&err);
    if (ir_verify(m, &err) != 0)
        fail_msg("verify: %s", err.msg);
}

void
run_ok(const ir_module *m, const ex_tensor *args, uint32_t nargs, ex_tensor **res,
       uint32_t *nres)
{
    di_error err;
    di_error_clear(&err);
    if (ex_run(m, args, nargs, res, nres, &err) != 0)
        fail_msg("ex_run: %s", err.msg);
}

void
free_tensors(ex_tensor *t, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        ex_tensor_fini(&t[i]);
    di_free(t);
}

sim_result *
simulate_strategy(const ir_module *m, const strategy *s, const hw_model *hw)
{
    ir_module *d = NULL;
    sim_result *r = NULL;
    sim_options o;
    di_error err;
    di_error_clear(&err);
    if (xform_apply(m, s, NULL, &d, &err) != 0)
        fail_msg("xform_apply: %s", err.msg);
    sim_options_default(&o);
    o.timeline_max_points = 0;
    if (sim_run(d, hw, &o, &r, NULL, NULL, &err) != 0)
        fail_msg("sim_run: %s", err.msg);
    ir_module_free(d);
    return r;
}

void
class_max(const sim_result *r, uint64_t *mx)
{
    class_max_on(r, 0, mx);
}

void
class_max_on(const sim_result *r, uint32_t device, uint64_t *mx)
{
    const sim_device_result *d = &r->devices[device];
    memset(mx, 0, SIM_NMEMCLASS * sizeof *mx);
    for (uint32_t i = 0; i < d->ntimeline; i++)
        for (int k = 0; k < SIM_NMEMCLASS; k++)
            if (d->timeline[i].by_class[k] > mx[k])
                mx[k] = d->timeline[i].by_class[k];
}
