/*
 * exec.h - how a trainer is composed, and the table that picks its pieces (exec_plan.c).
 *
 * One row of the table per way of training, chosen from facts about the options, the
 * world and the graph (exec_facts). A row names:
 *   - the executor: the replicas (exec_replicas.c: one context, model and optimizer per
 *     data-parallel replica of this process, a thread each when there are several), or
 *     the pipeline (trainer_pipe.c: P stages x D copies run by the pipeline engine);
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
};

typedef struct exec_facts {
    uint32_t has;              /* EXEC_* */
    uint32_t stages, micro_batches, ranks, replicas, batch, slow_replica;
    int mode;
    const char *state;         /* the first state's name (EXEC_STATES) */
} exec_facts;

/* A way of training: the pieces for the facts it matches (all of `need`, none of
 * `deny`). */
typedef struct exec_row {
    const char *name;          /* for docs, statistics and tests */
    uint32_t need, deny;
    int pipelined;             /* the executor: 1 the pipeline, 0 the replicas */
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
/* The way of training f matches (every fact set has one). */
const exec_row *exec_plan_pick(const exec_facts *f);

/* ---- the replicas executor (exec_replicas.c) ---- */

/* Creation on the device list dev[n], once the ranks agreed on the layout: the row
 * picked (its refusals first), its reducer or exchange made, one replica per entry. */
vkt_status exec_replicas_create(vkt_trainer *t, const uint32_t *dev, uint32_t n);
void exec_replicas_destroy(vkt_trainer *t);
/* A replica's model hooks and streams (again after balancing rebuilt its model): the
 * reducer's or exchange's and the update's. */
vkt_status exec_replica_attach(vkt_trainer *t, replica *r);
/* One synchronous step of replica r on its rows already fed: its forward and backward
 * (and, alone, its update), then the reducer's average and the update. Every replica
 * of the process calls it; returns 1 to stop (statuses set). */
int exec_replica_step(replica *r, uint64_t step);
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
