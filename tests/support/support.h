/*
 * support.h: helpers shared by the cmocka test binaries (tests/test_*.c).
 * The Makefile links every .c file of tests/support into every test binary; a
 * helper moves here as soon as a second test file needs it. Include after
 * <cmocka.h>: the assert_ helpers fail the running test.
 */
#ifndef DISTIR_TESTS_SUPPORT_H
#define DISTIR_TESTS_SUPPORT_H

#include <stdint.h>

#include "exec/exec.h"
#include "ir/ir.h"
#include "sim/sim.h"
#include "xform/xform.h"

/* Seconds on the monotonic clock, for timing bounds. */
double monotonic_seconds(void);

/* The f32 tensor type a x b on device (0: unplaced), interned in m. */
ir_id t2(ir_module *m, int64_t a, int64_t b, int32_t device);

/* The ops of kind in m, each once (a body called several times counts once). */
uint32_t count_kind(const ir_module *m, int kind);

/* Fails the running test with the verifier's first message unless m verifies. */
void assert_verifies(ir_module *m);

/* Runs m on the sequential executor, failing the running test on an error. */
void run_ok(const ir_module *m, const ex_tensor *args, uint32_t nargs, ex_tensor **res,
            uint32_t *nres);

/* Finalizes the n tensors of t and frees the array (as ex_run returns it). */
void free_tensors(ex_tensor *t, uint32_t n);

/* xform_apply then sim_run with the memory timeline kept whole (fails the test on an error). */
sim_result *simulate_strategy(const ir_module *m, const strategy *s, const hw_model *hw);

/* The largest live bytes of each memory class on device 0 over the step (mx[SIM_NMEMCLASS]). */
void class_max(const sim_result *r, uint64_t *mx);
/* The same on the given device. */
void class_max_on(const sim_result *r, uint32_t device, uint64_t *mx);

#endif
