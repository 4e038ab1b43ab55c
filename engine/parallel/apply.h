/*
 * apply.h - the optimizer application (apply.c): where a replica's update runs, and each
 * step's hyperparameters. A row of exec_plan.c names the place:
 *   APPLY_IN_STEP          recorded at the end of the replica's own step, one submission
 *                          (one replica alone; async replicas, which exchange parameters);
 *   APPLY_NEXT_SUBMISSION  after the reducer's average (sync replicas): a stream of its
 *                          own (the average copied from the stage into the gradient, then
 *                          the update), recorded once, which goes into the replica's next
 *                          step's submission ahead of the step (graph_model_step_submit_
 *                          after). So a step costs one submission and one fence wait where
 *                          it cost two; the update of an agreed step is *pending* until
 *                          then;
 *   APPLY_IN_PIPELINE      the pipeline engine's: each stage applies the sum over its
 *                          copies (pipe.h); the driver's scaler sets the engine's scale
 *                          before each step (pipe_set_scaler) and judges the engine's
 *                          verdict after it (apply_judge_skipped), once per step. Where
 *                          nothing on the host needs the update's result before the
 *                          stage's next run (pipe_route.ahead: the direct route, and the
 *                          host route, whose decisions - copies, verdict, scale, clipping
 *                          - are made at the step's meeting and its sum written into
 *                          host-visible memory the update copies in), the agreed update
 *                          is due and goes ahead of the stage's next run, in its
 *                          submission, as APPLY_NEXT_SUBMISSION's; the engine flushes it
 *                          itself before its parameters and optimizer state are read or
 *                          written (pipe_flush, pipe.h; the executor's flush, its sync
 *                          across ranks, layout.c and prediction call it).
 *
 * A pending update belongs to a step every replica (and rank) agreed to apply: it is never
 * dropped, only run later. Whatever reads or changes a replica's parameters, optimizer
 * state or hyperparameters outside a step runs it first (apply_flush): the replicas
 * executor's parameter, optimizer-state, position and set_optimizer operations, its
 * evaluation (exec_ops.flush), balancing, and the world reducer's identity check. A flush
 * runs on the thread that owns the replica: inside fit's progress callback (t->live, on
 * replica 0's thread) it runs replica 0's alone, which is all a save or an evaluation
 * there reads; the others go in with their next step. A step that is refused (a stop, a
 * failure) sets nothing pending.
 *
 * fp16's loss scale and skipped steps (loss_scaler, trainer.h): each submission's backward
 * starts from the scale (apply_seed); the update divides out the scale its gradient was
 * made with; once an update has run (at the end of its own step, or in the next step's
 * submission, or a flush) apply_judge reads whether the device skipped it. With the update
 * in the next submission the verdict on step k comes after step k + 1 was seeded, so an
 * overflow there may cost the next step too (one step of lag).
 */
#ifndef VKT_PARALLEL_APPLY_H
#define VKT_PARALLEL_APPLY_H

#include "parallel/trainer.h"

typedef enum apply_at { APPLY_IN_STEP, APPLY_NEXT_SUBMISSION, APPLY_IN_PIPELINE } apply_at;

/* Replica r's optimizer options from the trainer's (base): async replicas scale their
 * gradient by their share of the batch. */
vkt_optimizer_options apply_options(const vkt_trainer *t, const vkt_optimizer_options *base,
                                    const replica *r);
/* Records where r's update runs (the row's place): the step's epilogue, or the stream of
 * the next submission (recorded again after balancing rebuilt the model); its scaler.
 * APPLY_IN_PIPELINE: the scaler alone (the pipeline's one driver; its stages apply). */
vkt_status apply_attach(vkt_trainer *t, replica *r, apply_at at);
/* APPLY_NEXT_SUBMISSION: step `step`'s average is in r's stage and agreed: its update
 * (with that step's hyperparameters, set now) is pending. */
void apply_pending(replica *r, uint64_t step);
/* Replica r's step submitted with its pending update ahead of it (one submission). */
vkt_status apply_submit_step(replica *r);
/* The same with after[0..n_after) run after the step and the submission ordered by
 * `sync` (the device reducer's timelines: reduce_device.c). */
vkt_status apply_submit_step_ext(replica *r, vkt_stream *const *after, uint32_t n_after,
                                 const gpu_submit_sync *sync);
/* Pending updates run now (each one submission and one wait): replica 0's alone inside a
 * progress callback, else every replica's (the workers idle). On failure t's message. */
vkt_status apply_flush(vkt_trainer *t);
/* Replica r's, on its own thread (r's status on failure). */
vkt_status apply_flush_replica(replica *r);
/* Before a submission of r's step: its backward starts from the current loss scale. */
void apply_seed(replica *r);
/* After a submission or flush in which r's guarded update ran: a skip (non-finite
 * gradients) is counted and halves the fp16 loss scale; clean steps double it every
 * interval; past the limit of skips in a row, VKT_ERROR_DIVERGED (r's status). */
vkt_status apply_judge(replica *r);
/* The verdict on step `step` learnt elsewhere (the pipeline's vote: skipped when any
 * stage's gradient was not finite), judged as apply_judge does. */
vkt_status apply_judge_skipped(replica *r, uint64_t step, int skipped);
/* The scaler the trainer reports (vkt_trainer_skipped) and saves (SCAL): replica 0's
 * where every replica decides alike (sync) or there is one; async replicas each have
 * their own (an overflow is a property of the replica's gradient, and its skipped update
 * adds nothing to the master): their skips summed, the smallest scale and clean count,
 * the most skips in a row, over the world's replicas (another rank's as of its last push:
 * exchange_ops.scaler_get). */
loss_scaler apply_scaler(const vkt_trainer *t);
/* After a restore wrote the parameters (nothing pending): every replica's scaler from
 * checkpoint k's SCAL section (docs/checkpoint.md); async: the skip count to replica 0
 * alone (the sum goes on), the scale and counts in a row to every replica. The skip counts go on when this run
 * skips non-finite steps; the scale and its clean steps when both runs scale (fp16); a
 * checkpoint without the section starts the scaler as a run starts; a run that skips
 * nothing ignores it. */
void apply_restore_scaler(vkt_trainer *t, const struct ckpt *k);
/* The learning rate and the optimizer's step of `step` (linear scaling with the world's
 * replicas and its warmup when asked). */
void apply_set_step(replica *r, uint64_t step);

#endif
