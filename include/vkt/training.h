/*
 * vkt/training.h - training: optimizers, trainers (data parallel, async, pipelined),
 * pipelines and automatic splits, summaries, checkpoints, interruption, importing
 * weights. Part of vkt.h, readable alone; the data its trainers read: vkt/data.h.
 * The conventions of every part (statuses, messages, NULL options, ...): vkt/base.h.
 */
#ifndef VKT_TRAINING_H
#define VKT_TRAINING_H

#include "base.h"
#include "compute.h"
#include "graph.h"
#include "data.h"
#include "distributed.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------------ */
/* Optimizers: one update of every parameter, recorded once and replayed each step */
/* ------------------------------------------------------------------------------ */

/* An optimizer updates one flat parameter buffer of n elements from the gradient buffer
 * of the same layout, on the device: one dispatch for all parameters (two with
 * clipping; more only past maxStorageBufferRange, one per binding-sized chunk). The
 * update is recorded into a stream once; the per-step values (learning rate after the
 * schedule, Adam's step, betas, weight decay, clipping) live in a small host-visible
 * buffer that vkt_optimizer_set_step / _set_options rewrite, so every replay of the
 * same stream uses the current values without re-recording.
 * Messages of failed calls are kept by the optimizer's context (vkt_context_errmsg).
 * Destroy an optimizer before its context. */
typedef struct vkt_optimizer vkt_optimizer;

typedef enum vkt_optimizer_kind {
    VKT_OPTIMIZER_SGD = 0, /* with optional momentum and Nesterov */
    VKT_OPTIMIZER_ADAM,    /* weight decay as L2 added to the gradient */
    VKT_OPTIMIZER_ADAMW    /* weight decay decoupled: w -= lr * weight_decay * w */
} vkt_optimizer_kind;

typedef enum vkt_schedule_kind {
    VKT_SCHEDULE_CONSTANT = 0, /* lr */
    VKT_SCHEDULE_STEP,         /* lr * gamma^floor(step / step_size) */
    /* lr * (step + 1) / warmup_steps for step < warmup_steps; then
     * min_lr + (lr - min_lr) * (1 + cos(pi * (step - warmup_steps) /
     * (total_steps - warmup_steps))) / 2; min_lr from total_steps on. */
    VKT_SCHEDULE_WARMUP_COSINE
} vkt_schedule_kind;

/* A zero-initialised struct (or NULL) is plain SGD at lr 0.01 with a constant schedule.
 * Fields marked "0 = x" take that default when 0; the others mean what 0 says. Fields
 * that do not apply to the kind must stay 0 (a set momentum for Adam is an error). */
typedef struct vkt_optimizer_options {
    vkt_optimizer_kind kind;
    float lr;             /* base learning rate, >= 0; 0 = 0.01 (SGD), 0.001 (Adam, AdamW) */
    /* SGD: buf = momentum * buf + g; step along buf, or g + momentum * buf (Nesterov).
     * The velocity buffer exists only if momentum > 0 at creation. */
    float momentum;       /* [0, 1) */
    int nesterov;         /* 1: Nesterov momentum (needs momentum > 0) */
    /* Adam, AdamW (bias-corrected moments, t = step + 1) */
    float beta1;          /* (0, 1); 0 = 0.9 */
    float beta2;          /* (0, 1); 0 = 0.999 */
    float eps;            /* > 0; 0 = 1e-8, added to sqrt(v_hat) */
    /* every kind */
    float weight_decay;   /* >= 0: L2 added to the gradient (SGD, Adam); decoupled (AdamW) */
    float clip_norm;      /* > 0: scale the gradient so its global L2 norm is at most this,
                             by min(1, clip_norm / (norm + 1e-6)); 0 = no clipping */
    float grad_scale;     /* the gradient is multiplied by this first (e.g. 1/replicas
                             when they are summed); 0 = 1 */
    /* learning-rate schedule; `step` counts updates from 0 */
    vkt_schedule_kind schedule;
    uint64_t step_size;   /* STEP: > 0 */
    float gamma;          /* STEP: > 0; 0 = 0.1 */
    uint64_t warmup_steps; /* WARMUP_COSINE: <= total_steps (0 = no warmup) */
    uint64_t total_steps; /* WARMUP_COSINE: > 0 */
    float min_lr;         /* WARMUP_COSINE: in [0, lr] */
} vkt_optimizer_options;

VKT_API const char *vkt_optimizer_kind_name(vkt_optimizer_kind kind);   /* "sgd", "adam", "adamw" */
VKT_API const char *vkt_schedule_kind_name(vkt_schedule_kind kind);     /* "constant", "step",
                                           ... */

/* The learning rate of update number `step` (0 = the first) under `options` (defaults
 * applied). NaN if the options are invalid (vkt_optimizer_create says why). */
VKT_API float vkt_schedule_lr(const vkt_optimizer_options *options, uint64_t step);

/* An optimizer of n_params parameters with its moments (zero) on the device: SGD with
 * momentum keeps n floats, Adam and AdamW 2n. Ready for step 0. */
VKT_API vkt_status vkt_optimizer_create(vkt_context *context, const vkt_optimizer_options *options,
                                        uint64_t n_params, vkt_optimizer **out_optimizer /* OUT */);
VKT_API void vkt_optimizer_destroy(vkt_optimizer *optimizer);

/* Records one update of params[0, n) from grads[0, n) (views of n_params elements that
 * do not overlap) into the stream; every submission of the stream applies it again.
 * Record it once per stream. Clipping needs clip_norm > 0 at recording (it adds the
 * norm pass). Views that start at a multiple of 4 elements take a vec4 path (about
 * twice as fast on lavapipe); SGD without momentum needs only the two to agree mod 4. */
VKT_API vkt_status vkt_optimizer_record(vkt_optimizer *optimizer, vkt_stream *stream,
                                        vkt_view params, vkt_view grads);

/* Writes the hyperparameters of update number `step` (0 = the first; the schedule's
 * step and Adam's t - 1) for the next submission. Call it while no submission that
 * runs the update is in flight (after vkt_stream_wait). */
VKT_API vkt_status vkt_optimizer_set_step(vkt_optimizer *optimizer, uint64_t step);
/* The step the hyperparameters are set for (0 after creation). */
VKT_API uint64_t vkt_optimizer_step(const vkt_optimizer *optimizer);
VKT_API uint64_t vkt_optimizer_size(const vkt_optimizer *optimizer); /* n_params */

/* Changes the options from the current step on (rewrites its hyperparameters), without
 * re-recording: lr, schedule, momentum, betas, eps, weight decay, clip_norm, grad_scale.
 * The kind cannot change; momentum cannot be turned on for an SGD optimizer created
 * without it, nor clipping on after an update was recorded without it
 * (VKT_ERROR_STATE). Same timing rule as vkt_optimizer_set_step. */
VKT_API vkt_status vkt_optimizer_set_options(vkt_optimizer *optimizer,
                                             const vkt_optimizer_options *options);
/* The options in use, defaults applied. */
VKT_API vkt_status vkt_optimizer_get_options(const vkt_optimizer *optimizer,
                                             vkt_optimizer_options *out /* OUT */);

/* The optimizer's state as one blob, for checkpoints and for moving state between
 * replicas: a small header (kind, n_params, step; host byte order) and the moments.
 * write_state checks the header against the optimizer (VKT_ERROR_FORMAT,
 * VKT_ERROR_SHAPE) and restores the step; `bytes` must equal the state size. Both wait
 * for the device. */
VKT_API uint64_t vkt_optimizer_state_size(const vkt_optimizer *optimizer);
VKT_API vkt_status vkt_optimizer_read_state(vkt_optimizer *optimizer, void *host /* OUT */,
                                            uint64_t bytes);
VKT_API vkt_status vkt_optimizer_write_state(vkt_optimizer *optimizer, const void *host,
                                             uint64_t bytes);

/* ------------------------------------------------------------------------------ */
/* Trainers: model + optimizer + replicas, one call per training step             */
/* ------------------------------------------------------------------------------ */
/*
 * A trainer compiles a graph on one or more replicas (one vkt_context each, from the
 * device list), attaches the optimizer to each replica's recorded step, and runs steps
 * on global batches fed from the host. With one replica a step is one submission:
 * inputs, forward, loss, backward and the optimizer update in one command buffer.
 * It owns its contexts; the instance and graph must outlive it.
 */

typedef struct vkt_trainer vkt_trainer;

typedef enum vkt_parallel_mode {
    VKT_PARALLEL_SYNC = 0, /* averaged gradients, identical replicas */
    VKT_PARALLEL_ASYNC     /* lock-free updates of a master copy (docs/async.md) */
} vkt_parallel_mode;

#define VKT_MAX_REPLICAS 64 /* replicas of one trainer (in one process) */

typedef struct vkt_trainer_options {
    uint32_t batch;                   /* global batch (required), split across replicas */
    vkt_optimizer_options optimizer;  /* zeroed: SGD with its default lr */
    const uint32_t *devices;          /* device index per replica; NULL: VKT_DEVICES, */
    uint32_t device_count;            /*   else device 0; at most VKT_MAX_REPLICAS */
    vkt_parallel_mode mode;
    vkt_kernel_variant kernels;
    int check;                        /* VKT_CHECK mode on every replica */
    /* Async: bound the staleness (stale-synchronous parallel). A replica waits before
     * its k-th read of the master until every replica has pushed at least k - staleness
     * updates; with staleness 0 it also waits before pushing until every replica has
     * read for the same step, so the result equals synchronous training (SGD). */
    int bounded_staleness;
    uint32_t staleness;
    /* Linear learning-rate scaling with the number of replicas N: lr grows from lr to
     * N * lr over `scale_lr_warmup` steps (0: at once). */
    int scale_lr;
    uint32_t scale_lr_warmup;
    /* Sync: after `balance_after` steps of vkt_trainer_fit (0: never), split the global
     * batch in proportion to each replica's measured speed (rows per second of device
     * time), so a mixed set of devices is not held back by the slowest. */
    uint32_t balance_after;
    /* Benchmarking: replica `slow_replica` (an index over all ranks' replicas; UINT32_MAX:
     * the last) is slowed by `slow_seconds` per step at an even share of the batch, in
     * proportion to its rows (as a slower device would be). */
    uint32_t slow_replica;
    double slow_seconds;
    /* Across processes (docs/distributed.md): NULL or a one-rank world trains in this
     * process alone. Otherwise every rank creates its trainer from the same graph and
     * options (checked: VKT_ERROR_INVALID_ARGUMENT naming the first difference), the
     * chief's initial parameters are broadcast, `batch` is the global batch split by
     * rows over every rank's replicas, and create, fit, step and restore are collective
     * (every rank calls them in the same order; a rank's failure inside a step stops
     * every rank there, the others with VKT_ERROR_REMOTE). set_optimizer and
     * write_params are local: call them alike on every rank, or the ranks drift apart
     * (check_identical finds it). Saving writes on the chief only (every rank checks its
     * own copy with the divergence guard, so all return the same status in sync mode);
     * restoring reads on the chief only and sends the bytes to the others. Without
     * `devices` and VKT_DEVICES, a rank uses device local_rank % device count. */
    vkt_world *world;
    /* Sync replicas: gradient bytes per bucket, across ranks per allreduce (0: 4 MiB). */
    uint32_t bucket_bytes;
    /* Sync replicas (in one process and across ranks): sum (and send) a bucket of
     * gradients while the device computes the rest of the backward (1), or after the step
     * (-1). 0: on for GPU kernels, off on CPU
     * devices such as lavapipe, whose host threads share the cores with the device and
     * where it measured slower (docs/distributed.md). */
    int overlap;
    /* Sync across ranks: every N steps compare a hash of the parameters of every rank and
     * fail (VKT_ERROR_INTERNAL) if any differ (0: never). */
    uint32_t check_identical;
    /* Model parallelism (docs/model_parallel.md): `stages` P (0: 1 + the highest stage an
     * op of the graph is placed on, so a graph built without vkt_graph_set_stage trains as
     * before; 1: the whole graph on each replica, whatever its placement) and
     * `micro_batches` m (0: 1). With P > 1 or m > 1 the trainer runs D data-parallel
     * copies of a P-stage pipeline (vkt_pipeline's engine) on P x D contexts. The device
     * list (devices, else VKT_DEVICES) names them: copy d's stage s on entry d * P + s, so
     * it holds P x D entries (D = its length / P); a list shorter than P, such as the
     * default device 0 alone, gives D = 1 with stage s on entry s mod its length. The
     * global batch (a multiple of D x m) is split over the copies and each copy's share
     * into m micro-batches; sync: each stage's gradients are averaged over the copies and
     * the copies stay identical; async: each copy pushes its own update into a master per
     * stage (docs/async.md; not across ranks). fit, step, read/write_params (one unpipelined
     * model's layout), predict and evaluate (a forward model on copy 0's stage 0 context,
     * loaded with the parameters), checkpoints work. Refused: scale_lr, balance_after, slow. */
    uint32_t stages;
    uint32_t micro_batches;
    /* The divergence guard (docs/checkpoint.md, "Divergence"): a checkpoint is written
     * (vkt_trainer_save, vkt_checkpoint_save_dir) or restored only if every parameter,
     * state and optimizer moment in it is finite and the RMS of the trained parameters is
     * at most `divergence_growth` times their RMS at the start of the run (at creation,
     * at vkt_trainer_write_params, or carried by the checkpoint the run resumed from; a
     * start below 0.05 counts as 0.05). 0: 10; negative: no limit on the growth
     * (non-finite values are still refused). */
    float divergence_growth;
    /* Mixed precision (README, "Mixed precision"): the matrix products in fp16 or bf16 with
     * fp32 accumulation, fp32 master weights and optimizer state; AUTO: the fastest the
     * device supports (vkt_context_precision, resolved on each device; vkt_trainer_precision
     * says what replica 0 chose and why). 0: fp32. An fp16 or bf16 the device cannot run
     * fails creation with VKT_ERROR_NO_DEVICE naming what it lacks. */
    vkt_precision precision;
    /* fp16's dynamic loss scaling: the backward starts from loss_scale (0: 2^16) instead of
     * 1 and the optimizer divides it out; a step whose gradients overflow is skipped (its
     * update never applied, counted by vkt_trainer_skipped) and the scale halved (not
     * below 1); after loss_scale_interval (0: 2000) steps in a row without one it doubles
     * (not past 2^32). Other precisions need none: their scale stays 1. */
    float loss_scale;
    uint32_t loss_scale_interval;
    /* A step whose gradients hold a non-finite value (or whose squares overflow fp32, or
     * whose loss is not finite) is skipped, its update never applied, at most this many
     * steps in a row; one more stops training with VKT_ERROR_DIVERGED naming the count. 0:
     * 32 under fp16's loss scaling, else none: a non-finite loss stops training at once, as
     * it always did. Pipeline stages skip together (one verdict over every stage's
     * gradient); async replicas each scale and skip their own updates (vkt_trainer_skipped:
     * the sum, the smallest scale; across ranks the others' as of their last push). */
    uint32_t nonfinite_skips;
    vkt_recompute recompute; /* pipeline stages (stages, micro_batches above) */
} vkt_trainer_options;

/* One input's data for a step or a prediction: rows of `tensor` (fp32, or int32 for
 * labels), the batch dimension first. */
typedef struct vkt_feed {
    const vkt_tensor *tensor;
    const void *data;
} vkt_feed;

/* ------------------------------------------------------------------------------ */
/* Model parallelism: a pipeline of stages (docs/model_parallel.md)               */
/* ------------------------------------------------------------------------------ */

/* A graph placed on P stages (vkt_graph_set_stage), each stage compiled on its own
 * context holding only its parameters, gradients, optimizer state and activations.
 * Values crossing stages go through host memory forward, their gradients backward. A
 * step cuts the global batch into m equal micro-batches that flow through the stages,
 * one thread per stage, in the one-forward-one-backward order (1F1B); each stage sums
 * its micro-batches' gradients on its device, then applies one optimizer update: the
 * same step as one model on the whole batch, up to the order of float sums. A stage keeps
 * its micro-batches' activations or recomputes its forward (vkt_recompute); dropout draws
 * the masks of the micro-batch's global rows, and batch normalization normalizes by each
 * micro-batch's statistics, its running averages moved once per micro-batch. Gradient
 * clipping takes the global norm over every stage. The instance and graph must outlive
 * the pipeline. vkt_trainer runs the same engine (options.stages, micro_batches) with
 * data-parallel copies, fit and checkpoints. */
/* Automatic placement (vkt train --pipeline P): cuts the ops the loss depends on, in the
 * order they were built, into P consecutive groups and moves each op to its group's stage
 * (vkt_tensor_set_stage), so values flow to higher stages and the loss is on the last.
 * The groups balance a cost per op: its measured device time, forward plus backward
 * (vkt_model_profile of the whole training model on `context`, unfused, at `batch` rows:
 * give the micro-batch; forwards count twice on all but the last stage under `recompute`
 * ALWAYS only: docs/model_parallel.md), or the bytes of the parameters it reads where
 * times are unknown (no context, or the whole model does not fit one). The split minimizes
 * the largest group's cost, then, among splits within `tolerance` of it, the bytes that
 * cross stages. It never cuts between two readers of one parameter, or across a value not
 * laid out by batch rows. Refused (VKT_ERROR_INVALID_ARGUMENT, vkt_last_error says why):
 * fewer ops than stages, no valid cut, an unknown recompute; VKT_SPLIT_COST_TIME when the
 * times cannot be measured. The graph is unchanged on failure. */
typedef enum vkt_split_cost {
    VKT_SPLIT_COST_AUTO = 0, /* TIME where it can be measured, else PARAMS */
    VKT_SPLIT_COST_TIME,     /* measured microseconds per op, forward + backward */
    VKT_SPLIT_COST_PARAMS    /* bytes of the parameters each op reads */
} vkt_split_cost;

typedef struct vkt_split_options {
    uint32_t stages;         /* P, 1..VKT_MAX_STAGES */
    vkt_split_cost cost;
    vkt_context *context;    /* where ops are timed; NULL: parameter bytes */
    uint32_t batch;          /* rows to time at; 0: as built */
    uint32_t runs;           /* timed runs, each after a warm-up; an op's cost is its
                                fastest (robust to other work on the device); 0: 3 */
    double tolerance;        /* a split this much above the best max cost may be chosen for
                                fewer crossing bytes; 0: 0.05 */
    vkt_recompute recompute; /* the pipeline's: ALWAYS counts forwards twice (see above) */
} vkt_split_options;

typedef struct vkt_split_stage {
    uint32_t ops;                    /* ops placed on it */
    char first[VKT_NAME_SIZE];       /* its first and last op (tensor names) */
    char last[VKT_NAME_SIZE];
    double cost;                     /* microseconds or bytes, as the report's cost says */
    uint64_t param_bytes;            /* parameters it holds */
    uint64_t send_bytes;             /* values it sends on, at the graph's batch */
} vkt_split_stage;

typedef struct vkt_split_report {
    uint32_t stages;
    vkt_split_cost cost;             /* what the split balanced: TIME or PARAMS */
    char note[256];                  /* why TIME was not used ("" when it was) */
    double imbalance;                /* largest stage cost / mean stage cost (1: perfect) */
    vkt_split_stage stage[VKT_MAX_STAGES];
} vkt_split_report;

VKT_API vkt_status vkt_graph_split(vkt_graph *graph, vkt_tensor *loss,
                                   const vkt_split_options *options,
                                   vkt_split_report *out_report /* OUT, may be NULL */);

typedef struct vkt_pipeline vkt_pipeline;

typedef struct vkt_pipeline_options {
    uint32_t batch;            /* global batch rows (required): a multiple of micro_batches */
    uint32_t micro_batches;    /* m; 0 = 1 */
    uint32_t stages;           /* P, 1..VKT_MAX_STAGES; 0 = 1 + the highest stage of an op */
    const uint32_t *devices;   /* device index per stage (may repeat: several contexts on
                                  one device); NULL: VKT_DEVICES (stage s on entry s mod
                                  its length), else device 0 */
    vkt_optimizer_options optimizer; /* zeroed: SGD with its default lr */
    int sequential;            /* 1: one stage at a time, micro-batch after micro-batch (no
                                  overlap): the baseline that measures the bubble */
    vkt_precision precision;   /* as vkt_trainer_options.precision, on each stage's device */
    vkt_recompute recompute;   /* AUTO: keep activations where they fit (stats' kept) */
} vkt_pipeline_options;

VKT_API vkt_status vkt_pipeline_create(vkt_instance *instance, vkt_graph *graph, vkt_tensor *loss,
                                       const vkt_pipeline_options *options,
                                       vkt_pipeline **out_pipeline /* OUT */);
VKT_API void vkt_pipeline_destroy(vkt_pipeline *pipeline);
VKT_API const char *vkt_pipeline_errmsg(const vkt_pipeline *pipeline);
VKT_API uint32_t vkt_pipeline_stages(const vkt_pipeline *pipeline);
/* One training step on a global batch: every feed holds options.batch
 * rows. *out_loss (may be NULL): the batch's mean loss before the update. */
VKT_API vkt_status vkt_pipeline_step(vkt_pipeline *pipeline, const vkt_feed *feeds,
                                     uint32_t n_feeds, float *out_loss /* OUT */);
/* One parameter's values, from the stage that holds it. */
VKT_API vkt_status vkt_pipeline_read(vkt_pipeline *pipeline, const vkt_tensor *param,
                                     float *out /* OUT */, uint64_t count);

typedef struct vkt_pipeline_stage_stats {
    uint32_t device, ops;      /* its device index; ops of the graph placed on it */
    uint64_t param_bytes, grad_bytes, optimizer_bytes; /* on its device */
    uint64_t activation_bytes; /* its arenas: one per micro-batch kept (kept, else 1) */
    uint64_t sent_bytes;       /* values sent forward and gradients sent back, last step */
    double busy_seconds;       /* last step: time in its forwards, backwards and update */
    uint64_t device_bytes;     /* device-local memory of its context (vkt_memory_stats) */
    uint64_t grad_reads, grad_writes; /* last step: by the host (1 each; direct route: 0) */
    double staleness_mean;     /* async copies (docs/async.md): its master's staleness */
    uint64_t staleness_p99, staleness_max, updates; /* and pushes since creation; else 0 */
    uint64_t forwards;         /* last step: its forward's runs (2m where it recomputes) */
    uint32_t kept;             /* micro-batches kept at once (min(P - s, m); the last
                                  stage on device edges: 2); 0: recomputes */
    uint64_t sent_host_bytes;  /* of sent_bytes, copied by the host (0: device, import) */
    uint64_t overlapped;       /* device edges: runs submitted with another in flight */
} vkt_pipeline_stage_stats;
VKT_API vkt_status vkt_pipeline_stage_stats_get(vkt_pipeline *pipeline, uint32_t stage,
                                                vkt_pipeline_stage_stats *out /* OUT */);
/* The last step's wall time. */
VKT_API double vkt_pipeline_step_seconds(const vkt_pipeline *pipeline);

/* ------------------------------------------------------------------------------ */
/* Trainers, continued: creation, steps, fit, predict, evaluate, parameters       */
/* ------------------------------------------------------------------------------ */

VKT_API vkt_status vkt_trainer_create(vkt_instance *instance, vkt_graph *graph, vkt_tensor *loss,
                                      const vkt_trainer_options *options,
                                      vkt_trainer **out_trainer /* OUT */);
VKT_API void vkt_trainer_destroy(vkt_trainer *trainer);
VKT_API const char *vkt_trainer_errmsg(const vkt_trainer *trainer);
VKT_API uint32_t vkt_trainer_replicas(const vkt_trainer *trainer);        /* this rank's */
VKT_API uint32_t vkt_trainer_world_replicas(const vkt_trainer *trainer);  /* over all ranks */

/* One synchronous step on a global batch: every feed holds options.batch rows, split
 * across the replicas by rows. *out_loss (may be NULL) is the batch's mean loss before
 * the update. In async mode use vkt_trainer_fit. */
VKT_API vkt_status vkt_trainer_step(vkt_trainer *trainer, const vkt_feed *feeds, uint32_t n_feeds,
                                    float *out_loss /* OUT */);
/* Steps taken so far (the schedule's position). */
VKT_API uint64_t vkt_trainer_step_count(const vkt_trainer *trainer);
/* The element type the trainer's matrix products run in on its first device (options.
 * precision resolved: vkt_context_precision) into *out, and why into `why` (may be NULL). */
VKT_API vkt_status vkt_trainer_precision(const vkt_trainer *trainer, vkt_dtype *out /* OUT */,
                                         char *why /* OUT */, size_t why_size);
/* The steps skipped so far for non-finite gradients (fp16 overflows under loss scaling,
 * options.nonfinite_skips), and the loss scale the next step starts from (1 without
 * scaling); either pointer may be NULL. Async replicas: their skipped updates summed and
 * the smallest of their scales. Checkpoints carry the scaler: a run resumed in fp16
 * goes on with the saved scale and counts (docs/checkpoint.md, SCAL). */
VKT_API vkt_status vkt_trainer_skipped(const vkt_trainer *trainer,
                                       uint64_t *out_skipped /* OUT */,
                                       float *out_loss_scale /* OUT */);
/* Changes hyperparameters (same optimizer kind) from the next step on. */
VKT_API vkt_status vkt_trainer_set_optimizer(vkt_trainer *trainer, const vkt_optimizer_options *o);

/* Called from one training thread after each global step (sync) or each of replica 0's
 * updates (async); may call vkt_trainer_evaluate and save checkpoints. Returning nonzero
 * stops training; a save in it that the divergence guard refuses ends the fit with
 * VKT_ERROR_DIVERGED, whatever it returns. Across ranks it is called on the chief (rank
 * 0) only, and a stop (or that failure) stops every rank after the same step. */
typedef int (*vkt_progress_fn)(void *user, uint64_t step, uint64_t total, float loss);

/* Trains `steps` global steps on a classification data set: batches of options.batch
 * rows in a seeded per-epoch order (vkt_loader), `input` fed the features and `labels`
 * the labels. Sync: every step splits one global batch across the replicas. Async:
 * every replica makes `steps` updates on its share of the same batch sequence,
 * without waiting for the others (except for a staleness bound), lock-free on the
 * master; afterwards every replica holds the master. The data-set position continues
 * across calls. */
VKT_API vkt_status vkt_trainer_fit(vkt_trainer *trainer, const vkt_dataset *train,
                                   const vkt_tensor *input, const vkt_tensor *labels,
                                   uint64_t steps, uint64_t seed, vkt_progress_fn progress,
                                   void *user);

/* One replica's flat parameters (sync mode keeps them bitwise equal). */
VKT_API vkt_status vkt_trainer_read_replica_params(vkt_trainer *trainer, uint32_t replica,
                                                   float *out /* OUT */, uint64_t count);

/* Forward in evaluation mode (no dropout) over `rows` rows of the feeds, any number, in
 * chunks; writes `output` ([rows, ...] fp32) to out. */
VKT_API vkt_status vkt_trainer_predict(vkt_trainer *trainer, const vkt_feed *feeds,
                                       uint32_t n_feeds, uint32_t rows, const vkt_tensor *output,
                                       float *out /* OUT */);

typedef struct vkt_eval_result {
    float loss;      /* mean softmax cross-entropy over the set, in nats */
    float accuracy;  /* fraction of samples whose largest logit is the label */
    uint32_t count;
} vkt_eval_result;

/* Classification metrics of a data set: `input` takes its features, `logits` ([B, C])
 * is the graph's class-score tensor. */
VKT_API vkt_status vkt_trainer_evaluate(vkt_trainer *trainer, const vkt_dataset *dataset,
                                        const vkt_tensor *input, const vkt_tensor *logits,
                                        vkt_eval_result *out /* OUT */);

/* Language models on a vkt_text (ids [B,T] fed from the text, logits [B,T,vocab]): the
 * mean next-character cross-entropy, in nats per character, over up to max_windows (0:
 * all) evenly spread consecutive windows of `context` characters of a split. */
VKT_API vkt_status vkt_trainer_evaluate_text(vkt_trainer *trainer, const vkt_text *text, int split,
                                             const vkt_tensor *ids, const vkt_tensor *logits,
                                             uint32_t context, uint32_t max_windows,
                                             float *out_loss /* OUT */);
/* Writes n characters sampled one at a time after `prompt` (NULL or "": a line break) into
 * out (n + 1 bytes, NUL-terminated), each from softmax(logits / temperature) of the last
 * `context` characters (temperature 0: the most likely), with a batch-1 forward model
 * sharing the trainer's parameters. The same seed gives the same text. */
VKT_API vkt_status vkt_trainer_sample_text(vkt_trainer *trainer, const vkt_text *text,
                                           const vkt_tensor *ids, const vkt_tensor *logits,
                                           uint32_t context, const char *prompt, uint32_t n,
                                           float temperature, uint64_t seed, char *out /* OUT */);

/* Parameters (replica 0's, which all replicas equal in sync mode; states such as batch
 * norm's running averages are each replica's own). */
VKT_API uint64_t vkt_trainer_param_count(const vkt_trainer *trainer);
VKT_API vkt_status vkt_trainer_read_params(vkt_trainer *trainer, float *out /* OUT */,
                                           uint64_t count);
VKT_API vkt_status vkt_trainer_write_params(vkt_trainer *trainer, const float *data,
                                            uint64_t count);
/* One parameter's values. */
VKT_API vkt_status vkt_trainer_read(vkt_trainer *trainer, const vkt_tensor *param,
                                    float *out /* OUT */, uint64_t count);

typedef struct vkt_replica_stats {
    double step_seconds;      /* forward + backward (+ update) on the device, summed */
    double wait_seconds;      /* waiting at barriers or staleness gates, summed */
    double data_wait_seconds; /* fit: inside vkt_loader_next (waiting for the prefetch
                                 thread's batch, copying it), summed */
    uint64_t steps;
    uint32_t rows;            /* its current share of the global batch */
} vkt_replica_stats;

typedef struct vkt_trainer_stats {
    uint64_t steps;               /* global steps (sync); updates / replicas (async) */
    double step_seconds;          /* wall time inside vkt_trainer_step / _fit, summed */
    double host_cpu_seconds;      /* process CPU time inside them, summed */
    uint32_t step_dispatches;     /* per step, per replica, optimizer included */
    uint64_t activation_bytes, activation_no_reuse_bytes; /* replica 0's plan */
    uint32_t replicas;
    double average_seconds;       /* sync: host averaging of the gradients, summed */
    uint64_t bytes_staged_per_step; /* host <-> device bytes per global step, all replicas */
    /* async: staleness of each update = master updates between its read and its write */
    double staleness_mean;
    uint64_t staleness_p99, staleness_max, updates;
    double data_wait_seconds;     /* fit: the largest replica's (over step_seconds: the
                                     fraction of step time spent waiting for data) */
    vkt_replica_stats replica[VKT_MAX_REPLICAS]; /* this rank's replicas (pipelined: [0]
                                     the whole pipeline; stages: vkt_trainer_stage_stats_get) */
    /* across processes: this rank and the world's size; replicas over all ranks */
    uint32_t rank, ranks, world_replicas;
    double comm_seconds;          /* sync: from each bucket's allreduce start to its end
                                     (it overlaps the rest of the backward), summed;
                                     async: waiting for parameter servers */
    double comm_exposed_seconds;  /* sync: of comm_seconds, the part after the device
                                     finished the step (not hidden by the backward) */
    uint64_t comm_bytes;          /* bytes this rank handed to MPI */
    /* Host round trips since creation, summed over this process's holders: its replicas'
     * contexts, or a pipelined trainer's stages x copies. Per holder and step: divide the
     * difference across a run by holders x steps (README "Data parallelism"). */
    uint32_t holders;
    uint64_t submits;             /* vkQueueSubmit calls */
    uint64_t fence_waits;         /* blocking waits for a submission (vkWaitForFences) */
    uint64_t sync_transfers;      /* synchronous staged copies, where the host cannot map
                                     device memory (each also counted as a submit and a wait) */
    double exposed_seconds;       /* inside fit and step: a device waiting for this host, from
                                     the wait that completed a holder's last submission to
                                     its next one, summed over the holders */
    uint32_t average_threads;     /* sync: host threads that sum the gradients (0: none) */
    int32_t stage_cached;         /* the replicas' host staging (N > 1) in host-cached memory
                                     (1: host reads at memory speed) or not (0); -1: none */
    /* sync: who averages: "host" (host threads), "device" (a kernel on the VkDevice the
     * replicas share: VKT_SHARE_DEVICE), "world" (MPI around the host sum); else NULL */
    const char *reducer;
    uint64_t average_host_bytes;  /* sync: gradient bytes the host read to average them,
                                     summed over steps (0 when the device averages) */
    const char *exchange;         /* async: the master: "master" (host), "ps", "device" */
    uint64_t exchange_host_bytes; /*   parameter bytes the host moved for this rank's replicas:
                                     master, ps 2 x params per update, device 0 (docs/async.md) */
} vkt_trainer_stats;

VKT_API vkt_status vkt_trainer_stats_get(const vkt_trainer *trainer,
                                         vkt_trainer_stats *out /* OUT */);
/* A pipelined trainer's stage (options.stages): copy 0's (the copies are alike).
 * VKT_ERROR_INVALID_ARGUMENT for a trainer without stages or a stage out of range. */
VKT_API vkt_status vkt_trainer_stage_stats_get(vkt_trainer *trainer, uint32_t stage,
                                               vkt_pipeline_stage_stats *out /* OUT */);

/* ------------------------------------------------------------------------------ */
/* Summaries: scalars for TensorBoard and a CSV file                              */
/* ------------------------------------------------------------------------------ */
/*
 * A summary writer appends scalars (tag, step, value) to two files it creates in a log
 * folder (made if missing), named from the Unix time of creation and the host name. Both
 * are new files of this writer: when a name is taken (another run started in the same
 * second on the same folder), "-2", "-3", ... follows <time> in both names, so no two
 * writers ever share or truncate a file:
 *  - events.out.tfevents.<time>.<host>: a TensorBoard event file (`tensorboard --logdir
 *    DIR` draws one curve per tag). TFRecord framing, little endian: uint64 length,
 *    masked CRC32C of the length's 8 bytes, an Event protobuf, masked CRC32C of it
 *    (mask: ((crc >> 15) | (crc << 17)) + 0xa282ead8). The first Event carries
 *    file_version "brain.Event:2"; each later one wall_time, step and one
 *    Summary.Value { tag, simple_value }.
 *  - scalars.<time>.<host>.csv: the header `step,wall_time,tag,value`, then one row per
 *    scalar in the order written (wall_time in Unix seconds; value as %.9g, which reads
 *    back to the same float).
 * Records are buffered: vkt_summary_flush makes them visible to readers. One thread at a
 * time per writer.
 */
typedef struct vkt_summary vkt_summary;

/* Unwritable or uncreatable folder: VKT_ERROR_IO, with a message (vkt_last_error)
 * naming the path and the system's reason. */
VKT_API vkt_status vkt_summary_create(const char *logdir, vkt_summary **out_writer /* OUT */);
/* A tag ("train/loss") is 1 to VKT_MAX_TAG_BYTES bytes without commas, quotes, newlines. */
#define VKT_MAX_TAG_BYTES 256
VKT_API vkt_status vkt_summary_scalar(vkt_summary *writer, const char *tag, uint64_t step,
                                      float value);
VKT_API vkt_status vkt_summary_flush(vkt_summary *writer);
/* Closes the files (buffered records are written; use flush to see write errors). */
VKT_API void vkt_summary_destroy(vkt_summary *writer);
VKT_API const char *vkt_summary_errmsg(const vkt_summary *writer);
/* Paths of the two files. */
VKT_API const char *vkt_summary_event_path(const vkt_summary *writer);
VKT_API const char *vkt_summary_csv_path(const vkt_summary *writer);

/* ------------------------------------------------------------------------------ */
/* Checkpoints (docs/checkpoint.md)                                               */
/* ------------------------------------------------------------------------------ */
/*
 * A checkpoint is one versioned little-endian file with a CRC32 of its payload: the
 * parameters (each tensor's name, shape and values), the optimizer state (moments and
 * step) of replica 0, the step count (the schedule's position), the dropout step index
 * and the data-set position (loader epoch, batch index, seed). Saving reads replica 0,
 * the chief (in async mode during a run: the master parameters); it may be called from
 * the progress callback of vkt_trainer_fit. Restoring writes every replica, whatever the
 * number of replicas the file was saved with: the same parameters everywhere and replica
 * 0's optimizer state copied to each. The data position is resumed by the next
 * vkt_trainer_fit with the same seed and global batch (otherwise the order starts anew).
 */

/* Writes a checkpoint atomically (temporary file in the same folder, fsync, rename, fsync
 * of the folder): a crash at any moment leaves the old file or the new one. A checkpoint
 * is a regular file only: a path naming a device, a pipe or a folder is VKT_ERROR_IO
 * naming it, and nothing is replaced (a symbolic link keeps pointing where it did). A
 * state the divergence guard refuses (vkt_trainer_options.divergence_growth) is not
 * written: VKT_ERROR_DIVERGED, "training diverged by step N: <what was found>; not saved
 * ..."; refused inside vkt_trainer_fit's progress callback, it also ends that fit with
 * VKT_ERROR_DIVERGED (on every rank). */
VKT_API vkt_status vkt_trainer_save(vkt_trainer *trainer, const char *path);
/* Restores a checkpoint. A corrupt, truncated, empty or foreign file, or one of another
 * version: VKT_ERROR_FORMAT with "checkpoint '<path>' is corrupt: <why>" (why such as
 * "checksum mismatch ..."). Another model (a parameter missing or of another shape) or
 * another optimizer kind: VKT_ERROR_SHAPE naming the tensor. A diverged one (the guard,
 * measured against the start the file carries, or for older files the trainer's own):
 * VKT_ERROR_DIVERGED, "checkpoint '<path>' (step N) holds a diverged model: ...". On
 * failure the trainer is unchanged. */
VKT_API vkt_status vkt_trainer_restore(vkt_trainer *trainer, const char *path);
/* The step a checkpoint saved now records (inside a progress callback: that step). */
VKT_API uint64_t vkt_trainer_checkpoint_step(const vkt_trainer *trainer);
/* The divergence guard (vkt_trainer_options.divergence_growth) on the trainer's state
 * now, as a save would check it, writing nothing: VKT_OK, or VKT_ERROR_DIVERGED with
 * "training diverged by step N: <what was found>" (a non-finite parameter, state or
 * optimizer moment, or the parameters' RMS, its start and the limit). For runs that save
 * no checkpoint (vkt train without --checkpoint-dir calls it at the end). Across ranks
 * every rank checks its own copy: identical in sync mode, so the same status. */
VKT_API vkt_status vkt_trainer_check_divergence(vkt_trainer *trainer);

/* Saves `dir`/ckpt-<step>.vkt (creating dir), then keeps the newest `keep` checkpoints
 * of the folder that verify (parse with their checksums; 0: keeps all), the one just
 * saved always among them, and deletes older ones and temporary files of interrupted
 * saves. A corrupt checkpoint among the newest is never counted nor deleted: it is
 * renamed ckpt-<step>.vkt.corrupt ("moved aside"). Verification results are cached in
 * the process by path, size and modification time, so each file is read once.
 * The folder's lock (vkt_checkpoint_dir_lock) is taken for the call unless this process
 * holds it; held by another process: VKT_ERROR_STATE naming the folder and the holder,
 * and nothing is written. Across ranks (vkt_world) only the chief touches the folder. A
 * state the divergence guard refuses: VKT_ERROR_DIVERGED, nothing written or deleted,
 * and the message names the newest checkpoint of the folder (from before) to go back to. */
VKT_API vkt_status vkt_checkpoint_save_dir(vkt_trainer *trainer, const char *dir, uint32_t keep);
/* The same, and describes what retention found, one message per line, in `notes` (may
 * be NULL; "" if nothing): each corrupt file moved aside ("checkpoint '<path>' is
 * corrupt: <why> (moved aside to '<path>.corrupt')"), each unreadable one left in place.
 * Messages go in whole or not at all: those that do not fit notes_size are counted in a
 * last line "... and <n> more like these" (so a small buffer never cuts a sentence). */
VKT_API vkt_status vkt_checkpoint_save_dir_v2(vkt_trainer *trainer, const char *dir, uint32_t keep,
                                              char *notes /* OUT */, size_t notes_size);
/* Restores the newest valid checkpoint of `dir`. Corrupt newer files are skipped and
 * described, one message per line, in `notes` (may be NULL; whole messages, the rest
 * counted, as by vkt_checkpoint_save_dir_v2); once an older valid one is
 * found they are moved aside as by vkt_checkpoint_save_dir, and each line ends with
 * "(moved aside to '<path>.corrupt')". No checkpoint (or no folder): VKT_OK with
 * *out_found = 0. Only corrupt ones: VKT_ERROR_FORMAT, and the files stay. Diverged
 * ones (as vkt_trainer_restore finds them) are gone back past the same way, moved aside as
 * ckpt-<step>.vkt.diverged ("checkpoint '<path>' (step N) holds a diverged model: ...
 * (moved aside to '...')"); with none sound: VKT_ERROR_DIVERGED ("no checkpoint in
 * '<dir>' is from before training diverged ..."), and the files stay. A checkpoint of
 * another model: VKT_ERROR_SHAPE (no fallback to older files). The folder locked by
 * another process: VKT_ERROR_STATE, as for saving. */
VKT_API vkt_status vkt_checkpoint_restore_latest(vkt_trainer *trainer, const char *dir,
                                                 int *out_found /* OUT */,
                                                 uint64_t *out_step /* OUT */,
                                                 char *notes /* OUT */, size_t notes_size);
/* One run per checkpoint folder. Two runs saving into one folder would delete each
 * other's checkpoints, and one would resume from the other's. A lock is an OS advisory
 * lock on the hidden file `dir`/.vkt.lock (created with `dir` if missing; it holds the
 * holder's "pid <n> on <host>" and stays in the folder), held until
 * vkt_checkpoint_dir_unlock or the end of the process, however it ends: a killed run
 * leaves no lock behind. Take it before the first restore and keep it for the whole run
 * (vkt train does); save_dir and restore_latest then use the folder freely in this
 * process and refuse it to others. Held by another process: VKT_ERROR_STATE with
 * "checkpoint folder '<dir>' is in use by another run (pid <n> on <host>): ..." (the
 * holder is named once it has written its note); already locked by this process:
 * VKT_ERROR_STATE; the folder cannot be created or locked: VKT_ERROR_IO. Messages:
 * vkt_last_error. On failure *out_lock is NULL. Across ranks only the chief (rank 0)
 * touches the folder: lock it there alone. */
typedef struct vkt_checkpoint_lock vkt_checkpoint_lock;
VKT_API vkt_status vkt_checkpoint_dir_lock(const char *dir,
                                           vkt_checkpoint_lock **out_lock /* OUT */);
/* Releases the lock; NULL is harmless. */
VKT_API void vkt_checkpoint_dir_unlock(vkt_checkpoint_lock *lock);

/* Writes the parameters of the newest valid checkpoint of `dir` as a safetensors file
 * (8-byte little-endian header length, JSON header: dtype F32, shape, data_offsets;
 * little-endian data), by vkt_file_write's rule. An out_path that is a file of the folder
 * (a checkpoint, a corrupt one moved aside, its lock), a name in it that would be taken for
 * a checkpoint (ckpt-...), or any other checkpoint is VKT_ERROR_INVALID_ARGUMENT, naming
 * it, with nothing written. *out_step (may be NULL): its step. Messages: vkt_last_error. */
VKT_API vkt_status vkt_checkpoint_export_safetensors(const char *dir, const char *out_path,
                                                     uint64_t *out_step /* OUT */);
/* The same, and describes each corrupt newer checkpoint it skipped, one message per line,
 * in `notes` (may be NULL; "" if none), as vkt_checkpoint_restore_latest does; the files
 * stay where they are. */
VKT_API vkt_status vkt_checkpoint_export_safetensors_v2(const char *dir, const char *out_path,
                                                        uint64_t *out_step /* OUT */,
                                                        char *notes /* OUT */, size_t notes_size);
/* The same, writing the tensors as `dtype` (F32, F16 or BF16 in the header; 16-bit values
 * rounded to nearest even as vkt_convert rounds, from the checkpoint's fp32 masters). A
 * finite value past the type's range (fp16: 65504) is VKT_ERROR_INVALID_ARGUMENT naming
 * the tensor, with nothing written; so is a dtype outside vkt_dtype. */
VKT_API vkt_status vkt_checkpoint_export_safetensors_v3(const char *dir, const char *out_path,
                                                        vkt_dtype dtype,
                                                        uint64_t *out_step /* OUT */,
                                                        char *notes /* OUT */, size_t notes_size);

/* Writes `size` bytes of `data` to `path` by the rule every file vktrain writes for the
 * user follows (README, "Outputs never clobber"): a new name or a regular file is written
 * to a temporary file in the same folder (a short name, whatever the final name's
 * length), flushed and renamed over it, so a crash leaves the old or the new file whole (a
 * symbolic link keeps pointing where it did: the file it names is replaced); a character
 * device such as /dev/null or /dev/full, or a pipe, is written in place, never replaced.
 * Refused with VKT_ERROR_INVALID_ARGUMENT, naming the file, and nothing written: `path`
 * being the same file as one of the n_inputs paths of `inputs` (may be NULL; compared by
 * file identity, so links, hard links and other spellings count), an existing vktrain
 * checkpoint, a folder, a block device or a socket. A failed write (a full disk,
 * /dev/full) is VKT_ERROR_IO. Messages: vkt_last_error. */
VKT_API vkt_status vkt_file_write(const char *path, const void *data, size_t size,
                                  const char *const *inputs, size_t n_inputs);

/* ------------------------------------------------------------------------------ */
/* Interruption: Ctrl-C and termination requests                                  */
/* ------------------------------------------------------------------------------ */
/*
 * A training program stopped by Ctrl-C (SIGINT), by SIGTERM (kill, a job scheduler, a
 * container stop) or by SIGHUP (its terminal or ssh session closed) dies at once and
 * loses the work since its last checkpoint. With
 * vkt_interrupt_install the first such request only marks the process: the program sees
 * it with vkt_interrupted() between steps (e.g. in the progress callback of
 * vkt_trainer_fit, returning nonzero to stop after the current step), saves a
 * checkpoint and exits, conventionally with status 128 + the signal number (130 for
 * SIGINT, 143 for SIGTERM, 129 for SIGHUP). A second request ends the process at once,
 * as the signal would have without the handlers (status 128 + n), so a stuck program can
 * still be stopped. The handlers are process-wide and do nothing else (async-signal-safe); a
 * signal ignored when vkt_interrupt_install is called (a background job of a script)
 * stays ignored (nohup makes SIGHUP so). POSIX: SIGINT, SIGTERM and SIGHUP; Win32
 * (SetConsoleCtrlHandler): Ctrl-C as SIGINT, closing the console as SIGHUP (1: Win32's
 * <signal.h> has no SIGHUP), Ctrl-Break, logoff and shutdown as SIGTERM; for the last
 * three (close, logoff, shutdown) Windows ends the process a few seconds later whatever
 * the program does (5 s for a closed console). The library never installs
 * them by itself; `vkt train` does. Across MPI ranks the launcher forwards the signal
 * to every rank: decide on the chief (fit's callback runs there; its stop reaches every
 * rank at the same step), and let the others learn it from the chief (e.g.
 * vkt_world_broadcast of the signal number after fit returns).
 */
/* Installs the handlers (a second call does nothing). VKT_ERROR_INTERNAL if the system
 * refuses (message: vkt_last_error). */
VKT_API vkt_status vkt_interrupt_install(void);
/* The signal number of the first request (SIGINT, SIGTERM, SIGHUP from <signal.h>); 0 if
 * none has come. Safe from any thread. */
VKT_API int vkt_interrupted(void);
/* Restores the handlers found by vkt_interrupt_install and forgets a request. */
VKT_API void vkt_interrupt_uninstall(void);

/* ------------------------------------------------------------------------------ */
/* Importing weights: safetensors files by name (docs/import.md)                  */
/* ------------------------------------------------------------------------------ */
/*
 * vkt_trainer_import_safetensors sets a trainer's parameters (and states) from a
 * safetensors file, such as PyTorch's safetensors.torch.save_file or vkt export writes:
 * tensors of dtype F32, F16, BF16 or F64 (converted to fp32), each assigned to the
 * parameter of the same name or to the one a name map gives it. A name map is text, one
 * line each (blank lines and words from '#' on are ignored; names have no spaces):
 *
 *   PARAM TENSOR              parameter PARAM gets the file's tensor TENSOR
 *   PARAM TENSOR transpose    ... transposed: a 2-D [a,b] tensor for a [b,a] parameter.
 *                             PyTorch's nn.Linear keeps its weight as [out, in], vkt_linear
 *                             takes [in, out]: map every Linear weight with transpose
 *   PARAM -                   PARAM keeps the values it has (a new head, say)
 *   - TENSOR                  the file's TENSOR is left unused
 *   - *                       every tensor no parameter takes is left unused
 *
 * The whole file is checked before anything changes (on failure the trainer is
 * unchanged): its format (a truncated file, a header length past the end, JSON that is
 * not the format's, an unknown dtype, offsets that overlap, leave holes or pass the end,
 * a size that does not match dtype and shape, a name twice: VKT_ERROR_FORMAT naming the
 * header byte or the tensor), and its match with the model: a parameter without a tensor,
 * a tensor of another shape, a tensor no parameter takes and the map does not leave
 * unused (VKT_ERROR_SHAPE), a dtype that cannot be loaded, a NaN or an infinity
 * (VKT_ERROR_FORMAT), a map line that names no parameter of the model or is malformed
 * (VKT_ERROR_INVALID_ARGUMENT), each named, as many as the message holds. A file that
 * cannot be read: VKT_ERROR_IO. The values become the divergence guard's new start (as
 * with vkt_trainer_write_params); the optimizer state and step are unchanged. Across
 * ranks it is collective: the chief reads the file and every rank gets its values.
 */
typedef struct vkt_import_options {
    const char *map;       /* a name map's text; NULL or "": every parameter by its own name */
} vkt_import_options;

typedef struct vkt_import_report {
    uint32_t loaded;       /* parameters given a tensor's values */
    uint32_t transposed;   /*   of which transposed */
    uint32_t kept;         /* parameters the map kept ("PARAM -") */
    uint32_t ignored;      /* tensors of the file the map left unused */
} vkt_import_report;

/* options may be NULL; out_report (may be NULL) is zero on failure. Messages:
 * vkt_trainer_errmsg and vkt_last_error. */
VKT_API vkt_status vkt_trainer_import_safetensors(vkt_trainer *trainer, const char *path,
                                                  const vkt_import_options *options,
                                                  vkt_import_report *out_report /* OUT */);

#ifdef __cplusplus
}
#endif

#endif /* VKT_TRAINING_H */
