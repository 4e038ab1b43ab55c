/*
 * pipe.h - the pipeline engine (pipe_engine.h: pipe_engine.c, pipe_sched.c, pipe_edge.c):
 * a graph cut into P stages (graph/runtime.h's graph_split), D data-parallel copies of
 * that P-stage pipeline, P x D contexts, one model, optimizer and thread each.
 * vkt_pipeline_* (pipeline.c) is the engine with D = 1; vkt_trainer with stages or
 * micro-batches (the pipeline executor, exec_pipe.c) drives it with D copies.
 *
 * A step: copy d takes rows [d B/D, (d+1) B/D) of the global batch and cuts them into m
 * equal micro-batches that flow through its stages (1F1B, pipe_sched.c's header). Each
 * stage's model sums its micro-batch gradients on its device (GRAPH_MODEL_ACCUMULATE).
 * Where nothing needs the host's sum (D = 1, no world, no loss scale or guard, no
 * clipping: the direct route, pipe_engine.h's pipe_route) it stays there and the stage's
 * optimizer applies it with grad_scale times 1/m: no gradient read or written by the host.
 * Otherwise (the host route), after its last backward the stage reads the sum back once
 * and weights it by 1/(D m) (the rows' share of the batch) in double on the host, and
 * after the barrier every context of stage s writes the sum over copies (in copy order)
 * of those sums into its host-visible buffer, which its update copies into its gradient
 * buffer before its optimizer: the copies of a stage apply the same bits and stay
 * identical. On both routes the update is due after the step and goes ahead of the
 * stage's next run (pipe_flush). Either way all P x D threads meet at a barrier
 * where each votes, and after it every context updates or none does: any failure, and the
 * step returns the message of the first stage that failed.
 */
#ifndef VKT_PARALLEL_PIPE_H
#define VKT_PARALLEL_PIPE_H

#include "graph/runtime.h"

typedef struct pipe_options {
    uint32_t batch;          /* global rows, split into copies x micro_batches equal parts */
    uint32_t micro_batches;  /* m per copy, >= 1 */
    uint32_t stages;         /* P, 1..VKT_MAX_STAGES */
    uint32_t copies;         /* D, >= 1 */
    const uint32_t *devices; /* context d * P + s runs on devices[(d * P + s) % n_devices] */
    uint32_t n_devices;
    vkt_optimizer_options optimizer;
    vkt_kernel_variant kernels;
    int check;               /* VKT_CHECK mode on every stage model */
    int sequential;          /* one stage at a time (the bubble's baseline) */
    vkt_precision precision; /* resolved on each stage's context (vkt_context_precision) */
    vkt_recompute recompute; /* keep activations or recompute (pipe_engine.h's pipe_keep) */
    const char *fn;          /* the public call, for messages */
    /* Stages across ranks (NULL: every context in this process). With a world of R = P x D
     * ranks, rank r holds context r only (copy r / P, stage r mod P) on devices[0]; the
     * values and gradients that cross stages travel as messages (pipe_world.c), and one
     * small allreduce per step (the tail) carries the loss, the stop vote and failures. */
    vkt_world *world;
    /* Async copies (docs/async.md): each copy applies its own gradient and pushes the
     * change into its stage's master (pipe_async.c); bounded: no push is lost (a lock). */
    int async, bounded;
} pipe_options;

/* Splits the graph and makes the P x D contexts. On failure the thread's last error
 * (vkt_last_error) holds the message. */
vkt_status pipe_create(vkt_instance *inst, vkt_graph *g, vkt_tensor *loss,
                       const pipe_options *o, vkt_pipeline **out);

/* One step on a global batch (every feed holds `batch` rows) with the optimizers' step
 * set to `step`; *out_loss: the batch's mean loss. The message: vkt_pipeline_errmsg. */
vkt_status pipe_step(vkt_pipeline *p, const vkt_feed *feeds, uint32_t n, uint64_t step,
                     double *out_loss);

/* Across ranks: the chief's stop vote for the next step (travels in its tail), and
 * whether the last pipe_step stopped on it (then no context updated: the batch is unused). */
void pipe_set_stop(vkt_pipeline *p, int stop);
int pipe_stopped(const vkt_pipeline *p);
/* fp16's loss scale and the skipping of non-finite steps (the trainer's scaler, apply.c),
 * for the next steps: the last stages' backward starts from `scale` instead of 1 (the
 * scaled gradients then cross the edges to the stages before), and each stage applies
 * its gradient divided by it. guard: after the step's last backward every stage judges
 * its summed gradient (gacc) on the host, and the contexts vote at the step's end (the
 * barrier; across ranks, the tail): one non-finite value anywhere and no stage applies.
 * A guard or a scale other than 1 takes the host route (and guard 0 with scale 1 may
 * leave it); a failure to change route fails the next pipe_step with its message.
 * pipe_skipped: whether the last pipe_step was skipped so. */
void pipe_set_scaler(vkt_pipeline *p, int guard, float scale);
int pipe_skipped(const vkt_pipeline *p);
/* Whether this process holds copy `copy`'s stage `stage` (always, without a world); the
 * copy of stage s this process holds (UINT32_MAX: none; 0 without a world). */
int pipe_holds(const vkt_pipeline *p, uint32_t copy, uint32_t stage);
uint32_t pipe_local_copy(const vkt_pipeline *p, uint32_t stage);
vkt_world *pipe_world(const vkt_pipeline *p);

uint32_t pipe_copies(const vkt_pipeline *p);
/* Async copies: stage `stage`'s pushes into its master since creation and their staleness
 * (the pushes into that master between a copy's pull and its push; stage UINT32_MAX:
 * every stage's pooled). Zeros without async. Across ranks: every rank's pushes as of the
 * last pipe_staleness_gather (collective: each rank counts its own, this sums them). */
vkt_status pipe_staleness_gather(vkt_pipeline *p);
void pipe_staleness(const vkt_pipeline *p, uint32_t stage, double *mean, uint64_t *p99,
                    uint64_t *max, uint64_t *updates);
/* The split: which stage holds each node of the full graph, each stage's sub-graph. */
const graph_split *pipe_split(const vkt_pipeline *p);
vkt_model *pipe_model(vkt_pipeline *p, uint32_t copy, uint32_t stage);
/* Its activation arenas: 1, or the K slots of a stage that keeps its micro-batches. */
uint32_t pipe_arenas(const vkt_pipeline *p, uint32_t copy, uint32_t stage);
vkt_optimizer *pipe_optimizer(vkt_pipeline *p, uint32_t copy, uint32_t stage);
vkt_context *pipe_context(vkt_pipeline *p, uint32_t copy, uint32_t stage);

/* A parameter of the full graph: read from copy `copy`, or written into every copy.
 * VKT_ERROR_INVALID_ARGUMENT when no stage holds it (the loss does not use it). */
vkt_status pipe_read_param(vkt_pipeline *p, uint32_t copy, const vkt_tensor *param,
                           float *out, uint64_t count);
vkt_status pipe_write_param(vkt_pipeline *p, const vkt_tensor *param, const float *data,
                            uint64_t count);
/* New hyperparameters for every context (clipping by the norm over every stage is the
 * pipeline's: the contexts' optimizers get clip_norm 0; clip_norm > 0 takes the host
 * route, and the direct route's optimizers get grad_scale times 1/m). */
vkt_status pipe_set_optimizer(vkt_pipeline *p, const vkt_optimizer_options *o);
/* The direct and host routes (pipe_engine.h) leave each stage's agreed update due after
 * pipe_step (the async routes run it at once: their push reads its result):
 * it goes ahead of the stage's first run of the next step, in that run's submission. This
 * runs the due updates now (one submission and one wait each): before anything outside a
 * step reads or writes a stage's parameters or optimizer state, or evaluates on them
 * (pipe_read_param, pipe_write_param and pipe_set_optimizer call it themselves). On
 * failure the pipeline's message (vkt_pipeline_errmsg). */
vkt_status pipe_flush(vkt_pipeline *p);

#endif
