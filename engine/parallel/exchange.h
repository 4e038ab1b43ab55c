/*
 * exchange.h - the exchange of asynchronous data parallelism: each replica pulls the
 * shared parameters, runs forward, backward and its own optimizer on its rows (grad_scale
 * w_r = rows / global batch), and pushes the change of its parameters, without waiting for
 * the others (bounded by a staleness limit when asked). exec_plan.c picks one for async
 * training with several replicas:
 *   master (exchange_master.c): one process; a host master of relaxed atomics
 *          (Hogwild!-style: lost updates allowed, docs/async.md), gates on a monitor;
 *   ps     (ps.c): across ranks; the master sharded over the ranks, served by one
 *          communication thread per rank (docs/distributed.md);
 *   device (exchange_device.c): replicas of this process sharing one VkDevice
 *          (VKT_SHARE_DEVICE): the master is a buffer on that device; each replica's step
 *          submission pulls it first and pushes its change last, ordered by a timeline;
 *          no parameter reaches the host during a fit.
 * The host exchanges (master, ps) see a replica's new parameters in its stage (its step's
 * epilogue copies them there, exchange_attach) and what it pulled in pulled[r]: the mapping of
 * a host-visible upload buffer that the replica's pull stream copies into its parameters ahead
 * of its next step, in the step's submission (exchange_pulled; apply_submit_step). So an
 * update is one submission and one fence wait even where the parameters are not mapped (a
 * discrete GPU: the pull was a staged copy of its own).
 */
#ifndef VKT_PARALLEL_EXCHANGE_H
#define VKT_PARALLEL_EXCHANGE_H

#include "parallel/trainer.h"

typedef struct exchange exchange;

typedef struct exchange_ops {
    const char *name;
    /* w: the world (NULL for the master of one process) */
    vkt_status (*create)(vkt_trainer *t, vkt_world *w, exchange **out);
    void (*destroy)(exchange *x);
    /* A replica's model and buffers (exchange_attach for the host exchanges). */
    vkt_status (*attach)(exchange *x, replica *r);
    /* 1: the parameters never leave the device: no host staging (exec_replicas.c). */
    int on_device;
    /* A fit's start: the shared parameters from replica 0's (all replicas start equal). */
    vkt_status (*begin)(exchange *x);
    /* Replica r's job in a fit: run_steps updates (pull, step, push) until done, stopped
     * or failed. */
    void (*job)(exchange *x, replica *r);
    /* A fit's end: the shared parameters into every replica; the staleness statistics. */
    vkt_status (*end)(exchange *x);
    /* During a fit (the chief's progress callback): the shared parameters now, for a
     * checkpoint. */
    vkt_status (*snapshot)(exchange *x, float *flat);
    /* Optional (ps): global replica g's loss scaler as of its last push (1) or unknown (0),
     * for the replicas of other ranks (apply_scaler); set sets it (a restore). */
    int (*scaler_get)(exchange *x, uint32_t g, loss_scaler *out);
    void (*scaler_set)(exchange *x, uint32_t g, const loss_scaler *sc);
} exchange_ops;

struct exchange {
    const exchange_ops *ops;
    vkt_trainer *t;
    float *pulled[TRAINER_MAX_REPLICAS]; /* per local replica: the parameters it pulled */
};

extern const exchange_ops exchange_master_ops;
extern const exchange_ops exchange_ps_ops;
extern const exchange_ops exchange_device_ops;

/* A replica's model and buffers for either exchange: its step's epilogue copies the
 * updated parameters into its stage; its upload buffer (pulled[r], mapped) and the pull
 * stream that copies it into the parameters. */
vkt_status exchange_attach(exchange *x, replica *r);
/* pulled[r] holds what replica r pulled: its next step's submission copies it into the
 * parameters first. */
void exchange_pulled(replica *r);
/* Parameter bytes the host moved for the exchange (vkt_trainer_stats.exchange_host_bytes):
 * the master's pull copies the master out and its push reads the replica's parameters
 * (2 x params per update); ps counts what a replica pulls into pulled[r] and pushes to
 * the shards (params each, own shard included). Safe from the replicas' threads. */
void exchange_count_host(vkt_trainer *t, uint64_t bytes);
/* The staleness bound's gate (exchange_master.c), under the trainer's monitor: waits until
 * min(counts[0..n_rep)) + staleness >= k, or *failed or a stop was asked (no wait without
 * a bound); counts the wait in r's statistics. 1 to go on. */
int exchange_gate(replica *r, const int *failed, const uint64_t *counts, uint64_t k);
/* A replica's job for an exchange in one process (exchange_master.c): update(x, r, k) for
 * k = 0 .. run_steps - 1, each after the gate on counts; replica 0 reports progress (a
 * stop asked there stops every replica); a failure sets *failed and stops the others
 * (under the trainer's monitor). */
void exchange_run(exchange *x, replica *r, int *failed, const uint64_t *counts,
                  void (*update)(exchange *x, replica *r, uint64_t k));
/* The smallest of v[0..n). */
uint64_t exchange_min(const uint64_t *v, uint32_t n);
/* The shared part of destroy: forgets the pulled arrays (the replicas' contexts own
 * their buffers). */
void exchange_free_pulled(exchange *x);

/* The staleness statistics (exchange_master.c): a replica's log of each update's staleness
 * (master updates between its pull and its push), then over every replica of the process
 * into t->stats (staleness_mean, p99, max, updates); free forgets the logs. */
typedef struct exchange_stale {
    uint64_t *v, n, cap;
} exchange_stale;
void exchange_stale_add(exchange_stale *s, uint64_t v);
void exchange_stale_stats(vkt_trainer *t, exchange_stale *logs);
void exchange_stale_free(exchange_stale *logs);

#endif
