/*
 * xform_exec.h: moving real tensors between a sequential module and the
 * distributed module xform_apply made from it, with its layout (xform.h).
 *
 * xform_shard_args turns the sequential module's argument tensors into the
 * distributed module's (each device's block of each piece: a microbatch's
 * slice of the batch, a tensor-parallel shard, a ZeRO shard, or a replica);
 * xform_gather_results assembles the sequential results from the
 * distributed ones (concatenating blocks, taking one replica, summing
 * partial sums). With ex_run on both modules this is how the tests check
 * that a transform preserves numerics.
 */
#ifndef DISTIR_XFORM_EXEC_H
#define DISTIR_XFORM_EXEC_H

#include "exec/exec.h"
#include "xform/xform.h"

/*
 * args[0..nargs) are the sequential arguments in order. On success *out holds
 * one tensor per argument location of the distributed module (ex_run's
 * convention: tuples flattened) and *nout their count; the caller frees each
 * with ex_tensor_fini and the array with di_free.
 */
int xform_shard_args(const xform_layout *l, const ex_tensor *args, uint32_t nargs,
                     ex_tensor **out, uint32_t *nout, di_error *err);

/*
 * res[0..nres) are the distributed module's result locations (as ex_run
 * returns them). On success *out holds the sequential results in order and
 * *nout their count (the caller frees them as above).
 */
int xform_gather_results(const xform_layout *l, const ex_tensor *res, uint32_t nres,
                         ex_tensor **out, uint32_t *nout, di_error *err);

#endif
