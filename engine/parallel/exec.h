/*
 * exec.h - how a trainer is composed, and the table that picks its pieces (exec_plan.c).
 *
 * One row of the table per way of training, chosen from facts about the options, the
 * world and the graph (exec_facts). A row names:
 *   - the executor: the replicas (exec_replicas.c: one context, model and optimizer per
 *     data-parallel replica of this process, a thread each when there are several), or
 *     the pipeline (exec_pipe.c: P stages x D copies run by the pipeline engine);
 *   - for sync replicas, the gradient reducer (reduce.h), or for async replicas the
 *     exchange (exchange.h); one replica in the world needs neither;
 *   - where the optimizer's update runs (apply.h).
 * Refusals are rows too: the facts a combination is refused for, and why, in the words
 * of the message. The first matching refusal is reported; combinations no row refuses
 * compose.
 */
#ifndef VKT_PARALLEL_EXEC_H
#define VKT_PARALLEL_EXEC_H

#include "parallel/apply.h"
#include "parallel/exchange.h"
#include "parallel/reduce.h"
#include "parallel/trainer.h"

/* Facts a row is matched on. */
enum {
    EXEC_PIPELINED = 1u << 0,  /* stages > 1 or micro-batches > 1: the pipeline engine */
    EXEC_WORLD = 1u << 1,      /* a world of several ranks */
    EXEC_ASYNC = 1u << 2,      /* mode async */
    EXEC_NOT_SYNC = 1u << 3,   /* a mode other than sync (async, or unknown) */
    EXEC_BAD_MODE = 1u << 4,   /* neither sync nor async */
    EXEC_SEVERAL = 1u << 5,    /* more than one replica over the world */
    EXEC_FEW_ROWS = 1u << 6,   /* more replicas than rows in the global batch */
    EXEC_SCALE_LR = 1u << 7,   /* the learning rate scaled with the replicas */
    EXEC_BALANCE = 1u << 8,    /* balancing the batch by measured speed */
    EXEC_SLOW = 1u << 9,       /* an artificially slowed replica */
    EXEC_NO_SLOW = 1u << 10,   /*   which does not exist */
    EXEC_STALENESS = 1u << 11, /* a staleness bound */
    EXEC_STATES = 1u << 12,    /* the graph has states (batch norm's running averages) */
    EXEC_SKIPS = 1u << 13,     /* fp16 loss scaling or skipping non-finite steps (apply.c) */
    EXEC_SHARED = 1u << 14,    /* this process's replicas share one VkDevice with timelines
                                  (known once their contexts exist), outside check mode */
    EXEC_UNEVEN = 1u << 15,    /* stages across ranks: the ranks not a multiple of them */
};

typedef struct exec_facts {
    uint32_t has;              /* EXEC_* */
    uint32_t stages, micro_batches, ranks, replicas, batch, slow_replica;
    int mode;
    const char *state;         /* the first state's name (EXEC_STATES) */
} exec_facts;

/* ---- executors: who holds the model on which contexts, and a driver's step ---- */

typedef struct exec_ops {
    const char *name;
    /* Creation on the device list dev[n] (sel: the status of choosing it): the row for the
     * world's replicas picked (its refusals first), the holders made, and across ranks the
     * layout voted (trainer_world_layout; *laid_out: every rank got that far, so every
     * rank goes on to the agreement after creation). */
    vkt_status (*create)(vkt_trainer *t, const uint32_t *dev, uint32_t n, vkt_status sel,
                         int *laid_out);
    /* The holders' steps recorded now (a shape past a device limit fails at creation, not
     * at the first step): the statistics of one step (dispatches, activation bytes). */
    vkt_status (*record)(vkt_trainer *t);
    /* The holders (the drivers' loaders and evaluation models are the facade's). */
    void (*destroy)(vkt_trainer *t);
    /* Data-parallel copies of the model in this process (vkt_trainer_replicas). */
    uint32_t (*copies)(const vkt_trainer *t);
    /* Context i of this process's holders, NULL past the last: what the round-trip
     * statistics sum over. */
    vkt_context *(*holder)(const vkt_trainer *t, uint32_t i);
    /* A step's data for driver r: every feed holds the global batch's rows (failures on
     * r: replica_fail). Then its step: 1 to stop (statuses set). */
    void (*feed)(replica *r, const vkt_feed *feeds, uint32_t n);
    int (*step)(replica *r, uint64_t step);
    /* Parameters in one unpipelined model's layout (graph_flat_layout): the graph nodes
     * it covers, a parameter's offset, copy `copy`'s values (count: param_count), the
     * values into every copy, one parameter of copy 0. */
    uint32_t (*flat_nodes)(const vkt_trainer *t);
    vkt_status (*param_offset)(const vkt_trainer *t, const vkt_tensor *p, uint64_t *off);
    vkt_status (*read_flat)(vkt_trainer *t, uint32_t copy, float *flat, uint64_t count);
    vkt_status (*write_flat)(vkt_trainer *t, const float *flat, uint64_t count);
    vkt_status (*read_param)(vkt_trainer *t, const vkt_tensor *p, float *out, uint64_t count);
    /* The optimizer state as one unpipelined model's blob (vkt_optimizer_read_state): its
     * size, copy 0's, and into every copy (its header checked first: a mismatch changes
     * nothing; path names the checkpoint in messages). */
    uint64_t (*opt_size)(vkt_trainer *t);
    vkt_status (*read_opt)(vkt_trainer *t, void *blob, uint64_t bytes);
    vkt_status (*write_opt)(vkt_trainer *t, const char *path, const void *blob,
                            uint64_t bytes);
    vkt_status (*set_optimizer)(vkt_trainer *t, const vkt_optimizer_options *o);
    /* A checkpoint's position: dropout's step index now; both set on a restore. */
    uint64_t (*dropout_step)(const vkt_trainer *t);
    void (*set_position)(vkt_trainer *t, uint64_t step, uint64_t dropout_step);
    /* Bytes of one row of an input of the graph. */
    vkt_status (*input_row_bytes)(vkt_trainer *t, const vkt_tensor *input, uint64_t *out);
    /* Evaluation: where the whole graph's forward-only models live (the context, and the
     * model whose parameters they share, or NULL), and, when they hold parameters of
     * their own, copy 0's loaded into one before each use (NULL: shared). */
    void (*eval_place)(vkt_trainer *t, vkt_context **ctx, vkt_model **share);
    vkt_status (*eval_load)(vkt_trainer *t, vkt_model *m);
    /* Updates still pending run now (apply.h; NULL: none ever are): before evaluation,
     * which reads the parameters on the device. */
    vkt_status (*flush)(vkt_trainer *t);
    /* Prediction through the holders instead of a whole-graph model (NULL: none);
     * *handled 0: the output is not theirs, use the whole graph. */
    vkt_status (*predict)(vkt_trainer *t, const vkt_feed *feeds, uint32_t n_feeds,
                          uint32_t rows, const vkt_tensor *output, float *out, int *handled);
    /* vkt_trainer_stage_stats_get (NULL: no stages). */
    vkt_status (*stage_stats)(vkt_trainer *t, uint32_t stage, vkt_pipeline_stage_stats *out);
    /* After a fit or a step that succeeded (collective across ranks; NULL: nothing): what
     * this process does not hold brought up to date (the stages of other ranks). */
    vkt_status (*sync)(vkt_trainer *t);
} exec_ops;

extern const exec_ops exec_replicas_ops; /* exec_replicas.c */
extern const exec_ops exec_pipe_ops;     /* exec_pipe.c */

/* A way of training: the pieces for the facts it matches (all of `need`, none of
 * `deny`). */
typedef struct exec_row {
    const char *name;          /* for docs, statistics and tests */
    uint32_t need, deny;
    const exec_ops *exec;      /* the executor */
    const reduce_ops *reduce;  /* sync replicas: the reducer; else NULL */
    const exchange_ops *exchange; /* async replicas: the exchange; else NULL */
    apply_at apply;            /* where the update runs */
    int balances;              /* balance_after may re-split the batch (one process) */
} exec_row;

/* The facts of t (its options, world and graph; replicas: over the world, 0 before the
 * ranks counted them). */
void exec_facts_of(const vkt_trainer *t, uint32_t replicas, exec_facts *out);
/* The first refusal matching f: its message in t (VKT_ERROR_INVALID_ARGUMENT, or
 * VKT_ERROR_SHAPE for a batch too small); VKT_OK when none does. */
vkt_status exec_plan_refuse(vkt_trainer *t, const exec_facts *f);
/* The way of training f matches (every fact set has one). Before the ranks counted the
 * replicas it names the executor; the replicas executor picks again once they have. */
const exec_row *exec_plan_pick(const exec_facts *f);

/* ---- the replicas executor (exec_replicas.c) ---- */

/* A replica's model hooks and streams (again after balancing rebuilt its model): the
 * reducer's or exchange's and the update's. */
vkt_status exec_replica_attach(vkt_trainer *t, replica *r);
/* The replica's forward and backward (+ its own update when it has one) of `step` and
 * its loss; a non-finite loss fails it (VKT_ERROR_DIVERGED naming the step). */
vkt_status trainer_forward_backward(replica *r, uint64_t step);
/* The same in two halves: the step submitted; then waited for, with its loss checked. */
vkt_status trainer_step_submit(replica *r);
vkt_status trainer_step_finish(replica *r, uint64_t step);
/* Benchmarking: the artificial slowness of options.slow_replica, in proportion to rows. */
void trainer_slow_down(replica *r);
/* balance.c: re-splits the global batch by measured speed (sync); rebuilds models. */
vkt_status trainer_balance(vkt_trainer *t);

#endif
