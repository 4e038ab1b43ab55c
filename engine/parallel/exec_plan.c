/* exec_plan.c - the table of ways to train (exec.h): which executor, reducer or exchange,
 * and update placement each combination of options, world and graph gets, and which
 * combinations are refused, why. docs/architecture.md shows the pieces. */
#include <stdio.h>

#include "parallel/exec.h"

/* ---- refusals, in the order they are checked ---- */

typedef struct refusal {
    uint32_t need, deny;       /* the facts refused together (all of need, none of deny) */
    const char *what;          /* what is refused, in the words of the message */
    /* the message: VKT_ERROR_INVALID_ARGUMENT unless said otherwise */
    vkt_status (*say)(vkt_trainer *t, const exec_facts *f, const char *what);
} refusal;

static vkt_status say_pipeline(vkt_trainer *t, const exec_facts *f, const char *what)
{
    return trainer_fail(t, VKT_ERROR_INVALID_ARGUMENT, "vkt_trainer_create: %s is not "
                        "supported with pipeline stages (%u stages, %u micro-batches)", what,
                        f->stages, f->micro_batches);
}

static vkt_status say_ranks(vkt_trainer *t, const exec_facts *f, const char *what)
{
    return trainer_fail(t, VKT_ERROR_INVALID_ARGUMENT, "%s works within one process, not "
                        "across %u ranks", what, f->ranks);
}

static vkt_status say_mode(vkt_trainer *t, const exec_facts *f, const char *what)
{
    (void)what;
    return trainer_fail(t, VKT_ERROR_INVALID_ARGUMENT, "unknown parallel mode %d", f->mode);
}

static vkt_status say_rows(vkt_trainer *t, const exec_facts *f, const char *what)
{
    (void)what;
    return trainer_fail(t, VKT_ERROR_SHAPE, "%u replicas cannot share a global batch of %u "
                        "rows: every replica needs at least one row", f->replicas, f->batch);
}

static vkt_status say_slow(vkt_trainer *t, const exec_facts *f, const char *what)
{
    (void)what;
    return trainer_fail(t, VKT_ERROR_INVALID_ARGUMENT, "slow_replica %u does not exist (%u "
                        "replicas)", f->slow_replica, f->replicas);
}

static vkt_status say_plain(vkt_trainer *t, const exec_facts *f, const char *what)
{
    (void)f;
    return trainer_fail(t, VKT_ERROR_INVALID_ARGUMENT, "%s", what);
}

/* Replicas pull the whole master copy in async mode, which would overwrite the states
 * each replica's ops update (running averages) with the master's stale ones. */
static vkt_status say_states(vkt_trainer *t, const exec_facts *f, const char *what)
{
    (void)what;
    return trainer_fail(t, VKT_ERROR_INVALID_ARGUMENT, "state '%s' (e.g. batch "
                        "normalization's running averages) is not supported by async "
                        "training with %u replicas: use sync mode", f->state, f->replicas);
}

/* Stages across ranks: one stage per rank, so R = P x D. */
static vkt_status say_uneven(vkt_trainer *t, const exec_facts *f, const char *what)
{
    (void)what;
    return trainer_fail(t, VKT_ERROR_INVALID_ARGUMENT, "vkt_trainer_create: %u ranks do not "
                        "split into pipelines of %u stages: across ranks each rank holds one "
                        "stage, so the ranks must be a multiple of the stages (%u ranks, %u "
                        "stages)", f->ranks, f->stages, f->ranks, f->stages);
}

static const refusal refusals[] = {
    /* the pipeline engine (its clipping and batch split: pipe_engine.c, pipe_create) */
    {EXEC_PIPELINED | EXEC_WORLD | EXEC_UNEVEN, 0, "stages across ranks", say_uneven},
    {EXEC_BAD_MODE, 0, "an unknown mode", say_mode},
    {EXEC_PIPELINED | EXEC_SCALE_LR, 0, "learning-rate scaling with the replicas (scale_lr)",
     say_pipeline},
    {EXEC_PIPELINED | EXEC_BALANCE, 0, "balancing the batch by replica speed (balance_after)",
     say_pipeline},
    {EXEC_PIPELINED | EXEC_SLOW, 0, "an artificially slowed replica (slow_seconds)",
     say_pipeline},
    /* replicas, once the ranks counted them */
    {EXEC_WORLD | EXEC_BALANCE, EXEC_PIPELINED,
     "balancing the batch by replica speed (balance_after, --balance)", say_ranks},
    {EXEC_FEW_ROWS, EXEC_PIPELINED, "fewer rows than replicas", say_rows},
    {EXEC_NO_SLOW, EXEC_PIPELINED, "a slowed replica that does not exist", say_slow},
    {EXEC_STALENESS, EXEC_ASYNC, "a staleness bound applies to async mode only",
     say_plain},
    {EXEC_ASYNC | EXEC_SEVERAL | EXEC_STATES, EXEC_PIPELINED,
     "states with async replicas", say_states},
};

/* ---- ways of training: the first row matching is the trainer's ---- */

static const exec_row rows[] = {
    {"async pipeline copies across ranks (each stage's master sharded over its ranks, "
     "pipe_async_world.c)", EXEC_PIPELINED | EXEC_ASYNC | EXEC_WORLD, 0, &exec_pipe_ops, NULL,
     NULL, APPLY_IN_PIPELINE, 0},
    {"pipeline stages across ranks (a stage per rank, edges as messages)",
     EXEC_PIPELINED | EXEC_WORLD, 0, &exec_pipe_ops, NULL, NULL, APPLY_IN_PIPELINE, 0},
    {"async pipeline copies (a master per stage, pipe_async.c)", EXEC_PIPELINED | EXEC_ASYNC,
     EXEC_WORLD, &exec_pipe_ops, NULL, NULL, APPLY_IN_PIPELINE, 0},
    {"pipeline stages", EXEC_PIPELINED, 0, &exec_pipe_ops, NULL, NULL, APPLY_IN_PIPELINE, 0},
    {"one replica", 0, EXEC_SEVERAL, &exec_replicas_ops, NULL, NULL, APPLY_IN_STEP, 0},
    {"sync replicas averaged on their shared device", EXEC_SEVERAL | EXEC_SHARED,
     EXEC_ASYNC | EXEC_WORLD, &exec_replicas_ops, &reduce_device_ops, NULL,
     APPLY_NEXT_SUBMISSION, 1},
    {"sync replicas averaged by host threads", EXEC_SEVERAL, EXEC_ASYNC | EXEC_WORLD,
     &exec_replicas_ops, &reduce_host_ops, NULL, APPLY_NEXT_SUBMISSION, 1},
    {"sync replicas across ranks: MPI around the host sum", EXEC_SEVERAL | EXEC_WORLD,
     EXEC_ASYNC, &exec_replicas_ops, &reduce_world_ops, NULL, APPLY_NEXT_SUBMISSION, 0},
    {"async replicas on their shared device's master", EXEC_SEVERAL | EXEC_ASYNC | EXEC_SHARED,
     EXEC_WORLD, &exec_replicas_ops, NULL, &exchange_device_ops, APPLY_IN_STEP, 0},
    {"async replicas on a host master", EXEC_SEVERAL | EXEC_ASYNC, EXEC_WORLD,
     &exec_replicas_ops, NULL, &exchange_master_ops, APPLY_IN_STEP, 0},
    {"async replicas across ranks on a sharded parameter server",
     EXEC_SEVERAL | EXEC_ASYNC | EXEC_WORLD, 0, &exec_replicas_ops, NULL, &exchange_ps_ops,
     APPLY_IN_STEP, 0},
};

/* Every replica of this process on replica 0's VkDevice (gpu_context_create_shared), which
 * has timelines: the average (reduce_device.c) or the async master (exchange_device.c) can
 * stay there. Check mode runs a step's parts on their own, so it goes through the host. */
static int shared_device(const vkt_trainer *t)
{
    if (!t->rep || t->n_rep < 2 || !t->rep[0].ctx || !t->rep[0].ctx->timeline ||
        graph_check_asked(t->opt.check)) /* the option, or VKT_CHECK */
        return 0;
    for (uint32_t i = 1; i < t->n_rep; i++)
        if (!gpu_context_same_device(t->rep[0].ctx, t->rep[i].ctx))
            return 0;
    return 1;
}

static int matches(uint32_t has, uint32_t need, uint32_t deny)
{
    return (has & need) == need && !(has & deny);
}

void exec_facts_of(const vkt_trainer *t, uint32_t replicas, exec_facts *out)
{
    const vkt_trainer_options *o = &t->opt;
    exec_facts f = {.stages = o->stages ? o->stages : graph_placed_stages(t->graph),
                    .micro_batches = o->micro_batches ? o->micro_batches : 1,
                    .ranks = t->ranks, .replicas = replicas, .batch = o->batch,
                    .slow_replica = o->slow_replica, .mode = (int)o->mode};
    uint32_t h = 0;
    h |= f.stages > 1 || o->micro_batches > 1 ? EXEC_PIPELINED : 0;
    h |= t->world ? EXEC_WORLD : 0;
    h |= t->world && f.stages && t->ranks % f.stages != 0 ? EXEC_UNEVEN : 0;
    h |= o->mode == VKT_PARALLEL_ASYNC ? EXEC_ASYNC : 0;
    h |= o->mode != VKT_PARALLEL_SYNC ? EXEC_NOT_SYNC : 0;
    h |= o->mode != VKT_PARALLEL_SYNC && o->mode != VKT_PARALLEL_ASYNC ? EXEC_BAD_MODE : 0;
    h |= replicas > 1 ? EXEC_SEVERAL : 0;
    h |= replicas > o->batch ? EXEC_FEW_ROWS : 0;
    h |= o->scale_lr ? EXEC_SCALE_LR : 0;
    h |= o->balance_after ? EXEC_BALANCE : 0;
    h |= o->slow_seconds > 0 ? EXEC_SLOW : 0;
    h |= o->slow_seconds > 0 && o->slow_replica >= replicas && o->slow_replica != UINT32_MAX
             ? EXEC_NO_SLOW : 0;
    h |= o->bounded_staleness ? EXEC_STALENESS : 0;
    h |= o->precision == VKT_PRECISION_FP16 || o->nonfinite_skips ? EXEC_SKIPS : 0;
    for (uint32_t i = 0; i < graph_node_count(t->graph) && !f.state; i++) {
        graph_node_info in;
        graph_node_info_at(t->graph, i, &in);
        if (in.param && in.state) {
            f.state = in.name;
            h |= EXEC_STATES;
        }
    }
    h |= shared_device(t) ? EXEC_SHARED : 0;
    f.has = h;
    *out = f;
}

vkt_status exec_plan_refuse(vkt_trainer *t, const exec_facts *f)
{
    for (size_t i = 0; i < sizeof refusals / sizeof refusals[0]; i++)
        if (matches(f->has, refusals[i].need, refusals[i].deny))
            return refusals[i].say(t, f, refusals[i].what);
    return VKT_OK;
}

const exec_row *exec_plan_pick(const exec_facts *f)
{
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        if (matches(f->has, rows[i].need, rows[i].deny))
            return &rows[i];
    return &rows[4]; /* one replica; not reached: the rows cover every fact set */
}
