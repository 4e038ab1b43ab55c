/*
 * apply.h - the optimizer application (apply.c): where a replica's update runs, and each
 * step's hyperparameters. A row of exec_plan.c names the place:
 *   APPLY_IN_STEP       recorded at the end of the replica's own step, one submission
 *                       (one replica alone; async replicas, which exchange parameters);
 *   APPLY_AFTER_AVERAGE a stream of its own run after the reducer's average: the
 *                       average copied from the stage into the gradient, then the update
 *                       (sync replicas);
 *   APPLY_IN_PIPELINE   the pipeline engine's: each stage applies the sum over its copies
 *                       (pipe.h).
 */
#ifndef VKT_PARALLEL_APPLY_H
#define VKT_PARALLEL_APPLY_H

#include "parallel/trainer.h"

typedef enum apply_at { APPLY_IN_STEP, APPLY_AFTER_AVERAGE, APPLY_IN_PIPELINE } apply_at;

/* Replica r's optimizer options from the trainer's (base): async replicas scale their
 * gradient by their share of the batch. */
vkt_optimizer_options apply_options(const vkt_trainer *t, const vkt_optimizer_options *base,
                                    const replica *r);
/* Records where r's update runs (the row's place): the step's epilogue, or the stream
 * after the average (recorded again after balancing rebuilt the model). */
vkt_status apply_attach(vkt_trainer *t, replica *r, apply_at at);
/* APPLY_AFTER_AVERAGE: the stream, run once the average is in r's stage. */
vkt_status apply_after_average(replica *r);
/* The learning rate and the optimizer's step of `step` (linear scaling with the world's
 * replicas and its warmup when asked). */
void apply_set_step(replica *r, uint64_t step);

#endif
