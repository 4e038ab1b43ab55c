/*
 * trainer.h - internals of vkt_trainer, the facade: data, progress and the stop vote,
 * checkpoints, statistics, and what the ranks agree on. Under it sit the pieces one row of
 * exec_plan.c picks (exec.h):
 *   - the executor: one replica or several (exec_replicas.c: a context, model and
 *     optimizer each, a thread each when several), or pipelined stages (exec_pipe.c
 *     over the pipeline engine, pipe.h);
 *   - sync: the gradient reducer (reduce.h): host threads (reduce_host.c), or MPI around
 *     the host sum (reduce_world.c);
 *   - async: the exchange (exchange.h): the host master (exchange_master.c), or the
 *     sharded parameter server (ps.c);
 *   - the optimizer application (apply.h): in the step, or after the average.
 * The parallel layer: it knows models and optimizers, not file formats; the graph only
 * through graph/runtime.h.
 */
#ifndef VKT_PARALLEL_TRAINER_H
#define VKT_PARALLEL_TRAINER_H

#include <stdatomic.h>

#include "gpu/gpu.h" /* the holders' round-trip counters, stream marks */
#include "graph/runtime.h"
#include "parallel/world.h"
#include "platform/platform.h"

#define TRAINER_MAX_REPLICAS VKT_MAX_REPLICAS
#define TRAINER_MAX_EVAL 4      /* evaluation models cached, per output tensor and batch */
#define TRAINER_EVAL_BATCH 500  /* rows per evaluation chunk */

typedef struct eval_model {
    const vkt_tensor *output;
    uint32_t batch;
    vkt_model *model;
} eval_model;

typedef struct vkt_trainer vkt_trainer_t;

/* fp16's dynamic loss scale and the skipping of non-finite steps (apply.c), per replica:
 * every replica of a sync trainer sees the same averaged gradient and so takes the same
 * decisions, with no shared state. */
typedef struct loss_scaler {
    int ready;              /* set up (apply_attach) */
    int guard;              /* non-finite steps are skipped */
    int scaling;            /* fp16: the scale moves */
    float scale;            /* the next step's (1 without scaling) */
    uint32_t interval;      /* clean steps before it doubles */
    uint32_t limit;         /* skipped steps in a row allowed */
    uint32_t clean, in_a_row;
    uint64_t skipped;       /* so far */
    float seeded;           /* the scale the last submitted step's backward started from */
    uint64_t pending_step;  /* sync: the step whose update is pending */
    int judge;              /* an update ran in the last submission and awaits judging */
    uint64_t judge_step;    /*   its step */
} loss_scaler;

/* A replica: one data-parallel driver of this process, with its thread's data (loader,
 * batch, loss, status, statistics) and, with the replicas executor, the context, model and
 * optimizer it holds (a pipeline's one driver holds none: the engine's stages do). */
typedef struct replica {
    vkt_trainer_t *t;
    uint32_t index;
    vkt_context *ctx;
    vkt_model *model;
    vkt_optimizer *opt;
    uint32_t row0, rows;        /* its share of the global batch (rows over all ranks) */
    float weight;               /* rows / batch */
    vkt_buffer *stage;          /* host-visible, param_count floats (a reducer or exchange) */
    float *stage_host;          /* its mapping */
    vkt_stream *apply;          /* after the average: stage -> gradient, optimizer (apply.c) */
    int pending;                /*   an agreed update not run yet: it goes in with the next
                                     step, or a flush runs it (apply.h) */
    vkt_buffer *upload;         /* async: host-visible, what the replica pulled (exchange.h) */
    vkt_stream *pull;           /*   upload -> parameters, ahead of the next step */
    int pull_pending;           /*   upload holds a pull its parameters have not taken */
    vkt_buffer *avg_in;         /* the host reducer's import variant: where the average is
                                   (every replica's import of one region); NULL: stage */
    gpu_sync apply_wait;        /* the device reducer: what the pending update waits for
                                   on the device (its average); t NULL: nothing */
    eval_model eval[TRAINER_MAX_EVAL];
    uint32_t n_eval;
    /* per run */
    vkt_loader *loader;
    uint64_t batch_epoch, batch_index; /* the loader's position before the current batch */
    float *x;
    int32_t *y;
    float loss;
    vkt_status status;
    char errmsg[VKT_ERRMSG_SIZE];
    vkt_replica_stats stats;
    double submitted_at;        /* when its step was submitted */
    loss_scaler sc;
} replica;

typedef void (*replica_job)(replica *r);

struct vkt_trainer {
    vkt_instance *inst;
    vkt_graph *graph;
    vkt_tensor *loss;
    vkt_trainer_options opt;
    vkt_optimizer_options optim;
    replica *rep;
    uint32_t n_rep;             /* this process's replicas */
    /* the pieces (exec_plan.c): the row picked, its executor (and the executor's state),
     * and its reducer (sync) or exchange (async) when the world has several replicas */
    const struct exec_row *row;
    const struct exec_ops *exec;
    void *ex;
    struct reducer *rd;
    struct exchange *xc;

    /* across processes (trainer_world.c); world is NULL when this process trains alone (no
     * world, or a one-rank world) */
    vkt_world *world;
    uint32_t rank, ranks;       /* 0 and 1 alone */
    uint32_t world_rep;         /* replicas over all ranks (n_rep when alone) */
    uint32_t rep_base;          /* global index of this rank's replica 0 */
    uint64_t steps;             /* global steps taken (the schedule's position) */
    uint64_t param_count;
    uint64_t grad_count;       /* the trained parameters: the first of param_count (states follow) */
    vkt_trainer_stats stats;
    char errmsg[VKT_ERRMSG_SIZE];

    /* worker threads: one per replica when N > 1 */
    plat_thread **threads;
    plat_monitor *mon;
    uint64_t job_gen, jobs_done;
    replica_job job;
    int quit;
    plat_barrier *barrier;

    /* the current run (fit or step) */
    const vkt_feed *feeds;
    uint32_t n_feeds;
    const vkt_dataset *data;
    const vkt_tensor *in_x, *in_y;
    uint64_t run_steps, seed;
    vkt_progress_fn progress;
    void *progress_user;
    int stop;                   /* the progress callback asked to stop */
    double avg_seconds;
    uint64_t avg_host_bytes;    /* gradient bytes the host read to average (stats) */
    uint64_t xc_host_bytes;     /* async: parameter bytes the host moved to exchange them
                                   (stats; under mon during a fit) */

    int balanced;                  /* the split was re-made by measured speed */
    int vote_in_step;              /* across ranks, the chief's stop travels in the next
                                      step (stages across ranks), not before it */
    uint64_t split_hash;           /* stages: where every node runs (the ranks agree on it) */

    /* checkpoints (trainer_checkpoint.c) */
    int live;                      /* inside a progress callback of a run: */
    uint64_t live_steps;           /*   the global steps done so far (t->steps lags) */
    int resume_pending;            /* loaders made from now on seek to this position */
    int step_checked;              /* across ranks: vkt_trainer_step's first feeds compared
                                      (again after a restore) */
    uint64_t resume_epoch, resume_batch, resume_seed;
    int lost;                      /* a device was lost: every later step fails */
    char lost_msg[VKT_ERRMSG_SIZE];

    /* the divergence guard (trainer_guard.c): what a checkpoint is about to hold is
     * measured against the run's start before it is written */
    double guard_rms;              /* the reference: the trained parameters' RMS at the */
    uint64_t guard_step;           /*   start of the run (this step) */
    int guard_tripped;             /* a save from the progress callback found the model
                                      diverged: the run ends with VKT_ERROR_DIVERGED */
    char guard_msg[VKT_ERRMSG_SIZE];
};

/* ---- checkpoints (trainer_checkpoint.c; the format: engine/io/checkpoint.h) ---- */

struct ckpt;
/* Restores a parsed checkpoint into every replica; checks the parameters' names and
 * shapes and the optimizer state first, so a mismatch (VKT_ERROR_SHAPE, naming the
 * tensor) changes nothing. `path` names it in messages. */
vkt_status trainer_ckpt_restore(vkt_trainer *t, const char *path, const struct ckpt *k);
/* Across ranks (collective): the chief's outcome of reading a checkpoint (status st,
 * *found, the parsed k, its path) to every rank, which parses the same bytes into k.
 * Without a world: returns st. */
vkt_status trainer_ckpt_share(vkt_trainer *t, vkt_status st, int *found, struct ckpt *k,
                              char *path, size_t path_size);
/* restore_latest's question about each candidate (a ckpt_accept_fn, user = the trainer):
 * its parameters match the model and the guard finds it sound. */
vkt_status trainer_ckpt_usable(void *user, const char *path, const struct ckpt *k, char *msg);
/* The flat parameters a checkpoint saved now would hold (replica 0's, copy 0's with
 * stages, the master during an async run), in one unpipelined model's layout. */
vkt_status trainer_read_flat(vkt_trainer *t, float *flat);
/* The guard alone (every rank but the chief, which does not write): VKT_OK, or
 * VKT_ERROR_DIVERGED naming the step and what was found. */
vkt_status trainer_ckpt_check(vkt_trainer *t);

/* ---- the divergence guard (trainer_guard.c; docs/checkpoint.md, "Divergence") ---- */

/* The reference from the trainer's parameters now (creation), or from `flat` (host
 * values written by vkt_trainer_write_params). */
vkt_status trainer_guard_start(vkt_trainer *t);
void trainer_guard_reset(vkt_trainer *t, const float *flat);
/* Whether a state is sound: flat (param_count floats, the trained ones first) and the
 * optimizer blob (opt_bytes, host order, not necessarily aligned; NULL: not checked) all
 * finite, and the trained parameters' RMS within the growth limit of `ref_rms` (measured
 * at ref_step). VKT_OK, or VKT_ERROR_DIVERGED with what was found in why. */
vkt_status trainer_guard_check(const vkt_trainer *t, const float *flat, const void *opt,
                               uint64_t opt_bytes, double ref_rms, uint64_t ref_step,
                               char *why, size_t why_size);
/* fit's progress callback at global step k + 1 of the run (chief, replica 0's thread),
 * with t->live set for a checkpoint saved inside it; returns 1 to stop. A save in it that
 * the guard refused fails replica r with VKT_ERROR_DIVERGED (every replica and rank stops
 * there). */
int trainer_progress(replica *r, uint64_t k, float loss);

vkt_status trainer_fail(vkt_trainer *t, vkt_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Copies a model's message into the trainer's after a failed call ("replica N: " first
 * when it is one of several replicas' models). */
vkt_status trainer_from_model(vkt_trainer *t, const vkt_model *m, vkt_status st);
/* A replica's failure, kept on the replica (threads must not share a buffer). */
vkt_status replica_fail(replica *r, vkt_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Bytes of one row (batch dimension 1) of an input of model m. */
vkt_status trainer_row_bytes(char *errmsg, vkt_model *m, const vkt_tensor *input,
                             uint64_t *out);
/* Writes rows [row0, row0+rows) of every feed into the model's inputs (zero rows up to
 * pad_to); checks that every input the model computes from is fed. */
vkt_status trainer_feed(char *errmsg, vkt_model *m, const vkt_feed *feeds, uint32_t n,
                        uint32_t row0, uint32_t rows, uint32_t pad_to);

/* fit.c: the replica's rows of the next global batch from its own loader (every
 * replica's loader has the same seed, so all see the same sequence of batches). */
vkt_status trainer_next_batch(replica *r);
/* Puts the replica's loader back before the batch trainer_next_batch took (a step that
 * was not applied). */
void trainer_unread_batch(replica *r);

/* trainer_world.c: what the ranks agree on (docs/distributed.md). Every function here is
 * the facade's only test for ranks: without a world (alone, or a one-rank world) each
 * returns `local` (or VKT_OK) at once, so the callers do not ask. */
/* The world the options name: t->world, rank and ranks (0 of 1 alone). */
void trainer_world_join(vkt_trainer *t, vkt_world *w);
/* Across ranks without VKT_DEVICES: the one device this rank trains on (*dev: its local
 * rank over the host's `count` devices), returns 1; else 0 (the device list decides). */
int trainer_world_device(const vkt_trainer *t, uint32_t count, uint32_t *dev);
/* The replica layout: every rank's replica count (n_local), or a failure before. */
vkt_status trainer_world_layout(vkt_trainer *t, uint32_t n_local, vkt_status local);
/* After creation: every rank created its trainer, all from the same graph and options
 * (else every rank fails naming the first difference); then the chief's parameters. */
vkt_status trainer_world_agree(vkt_trainer *t, vkt_status local);
/* Fit: the same data set, seed and steps on every rank. */
vkt_status trainer_world_check_fit(vkt_trainer *t, vkt_status local, uint64_t steps);
/* vkt_trainer_step's first step (after creation or a restore): the same step count and
 * the same global batch in the feeds on every rank (the same data and seed). */
vkt_status trainer_world_check_step(vkt_trainer *t, const vkt_feed *feeds, uint32_t n_feeds);
/* From the chief to every rank (a checkpoint's bytes): n bytes of buf. */
vkt_status trainer_world_bcast(vkt_trainer *t, void *buf, uint64_t n);
/* A 64-bit FNV-style hash of n bytes, fast over whole data sets and parameter arrays:
 * equal bytes, equal hash on every rank. */
uint64_t trainer_hash(const void *data, size_t n);
/* Whether this process writes files (the chief of the world, or alone). */
int trainer_is_chief(const vkt_trainer *t);

/* Context i of this process's holders (replicas, or a pipeline's copies x stages, copy
 * by copy), NULL past the last: what the round-trip statistics sum over. */
vkt_context *trainer_holder_context(const vkt_trainer *t, uint32_t i);
/* options.precision resolved on ctx (vkt_context_precision): the models' precision there;
 * a failure is the trainer's, naming what the device lacks. */
vkt_status trainer_precision_on(vkt_trainer *t, vkt_context *ctx, vkt_dtype *out);

/* workers.c: runs job(r) for every replica (in threads when N > 1) and waits; the
 * holders' idle time counts as exposed only inside it (gpu_context_idle_disarm). */
vkt_status trainer_run_all(vkt_trainer *t, replica_job job);
vkt_status trainer_workers_start(vkt_trainer *t);
void trainer_workers_stop(vkt_trainer *t);
/* The first failure among the replicas, copied into the trainer's message. */
vkt_status trainer_collect(vkt_trainer *t);

/* fit.c: the sync drivers' jobs. Steps: run_steps steps, each from the replica's own
 * loader, as long as the replicas (and ranks) vote to go on; feeds: one step from
 * t->feeds (vkt_trainer_step). */
void trainer_job_steps(replica *r);
void trainer_job_feeds(replica *r);
/* The last step's mean loss over the global batch. */
double trainer_mean_loss(const vkt_trainer *t);

/* The executor's flat layout (one unpipelined model's): graph nodes it covers, a
 * parameter's offset in it; bytes of one row of an input (exec_ops, exec.h). */
uint32_t trainer_flat_nodes(const vkt_trainer *t);
vkt_status trainer_param_offset(const vkt_trainer *t, const vkt_tensor *param, uint64_t *off);
vkt_status trainer_input_row_bytes(vkt_trainer *t, const vkt_tensor *input, uint64_t *out);

/* trainer_eval.c: the forward-only model computing `output` for `batch` rows on replica
 * 0 (sharing its parameters), made on first use and cached. */
vkt_status trainer_eval_model(vkt_trainer *t, const vkt_tensor *output, uint32_t batch,
                              vkt_model **out);
/* vkt_trainer_predict's work on that model: `rows` rows of `output` into out, `batch`
 * rows a forward (the last chunk padded). */
vkt_status trainer_predict_chunks(vkt_trainer *t, const vkt_feed *feeds, uint32_t n_feeds,
                                  uint32_t rows, const vkt_tensor *output, float *out,
                                  uint32_t batch);
/* -log softmax(z)[label] over `classes` logits, in double; *argmax (may be NULL) gets the
 * largest logit's class. */
double trainer_nll(const float *z, uint32_t classes, uint32_t label, uint32_t *argmax);

#endif
