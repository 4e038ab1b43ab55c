/* exec_pipe.c - the pipeline executor (exec_pipe.h): model parallelism inside vkt_trainer,
 * D data-parallel copies of a P-stage pipeline (the pipeline engine, pipe.h) driven by
 * one replica with the whole global batch (docs/model_parallel.md). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "parallel/exec_pipe.h"

static vkt_status pipe_exec_create(vkt_trainer *t, const uint32_t *dev, uint32_t n)
{
    exec_facts f; /* what the pipeline does not combine with (yet): exec_plan.c */
    exec_facts_of(t, 0, &f);
    vkt_status st = exec_plan_refuse(t, &f);
    if (st != VKT_OK)
        return st;
    t->row = exec_plan_pick(&f);
    pipe_exec *pe = calloc(1, sizeof *pe);
    if (!pe)
        return trainer_fail(t, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    t->ex = pe;
    uint32_t P = f.stages;
    uint32_t D = n >= P ? n / P : 1;
    if (t->world) { /* a stage per rank (exec_plan.c refused R mod P != 0), on the device
                       list's entry of its local rank */
        D = t->ranks / P;
        dev = &dev[t->world->local_rank % n];
        n = 1;
    } else if (n >= P && n % P != 0)
        return trainer_fail(t, VKT_ERROR_INVALID_ARGUMENT, "vkt_trainer_create: the device "
                            "list has %u entries; with %u stages it names P x D contexts (copy "
                            "d's stage s on entry d * P + s), so a multiple of %u", n, P, P);
    pipe_options po = {.batch = t->opt.batch, .micro_batches = t->opt.micro_batches,
                       .stages = P, .copies = D, .devices = dev, .n_devices = n,
                       .optimizer = t->optim, .kernels = t->opt.kernels, .check = t->opt.check,
                       .precision = t->opt.precision, .recompute = t->opt.recompute,
                       .fn = "vkt_trainer_create", .world = t->world,
                       .async = t->opt.mode == VKT_PARALLEL_ASYNC,
                       .bounded = t->opt.bounded_staleness};
    st = pipe_create(t->inst, t->graph, t->loss, &po, &pe->engine);
    if (st != VKT_OK)
        return trainer_fail(t, st, "%s", vkt_last_error());
    if ((st = pipe_layout_make(t)) != VKT_OK)
        return st;
    t->split_hash = trainer_hash(pipe_split(pe->engine)->node_stage,
                                 pipe_split(pe->engine)->nodes *
                                     sizeof *pipe_split(pe->engine)->node_stage);
    t->vote_in_step = t->world != NULL;
    if (!(t->rep = calloc(1, sizeof *t->rep)))
        return trainer_fail(t, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    t->n_rep = 1;
    t->world_rep = D;
    replica *r = &t->rep[0];
    r->t = t;
    r->rows = t->opt.batch;
    r->weight = 1.0f;
    if ((st = apply_attach(t, r, APPLY_IN_PIPELINE)) != VKT_OK) /* fp16's scaler */
        return st;
    /* every copy starts from the whole graph's initial values (and equal to each other) */
    return pipe_layout_write(t, pe->host, t->param_count);
}

static vkt_status exec_pipe_create(vkt_trainer *t, const uint32_t *dev, uint32_t n,
                                   vkt_status sel, int *laid_out)
{
    vkt_status st = sel == VKT_OK ? pipe_exec_create(t, dev, n) : sel;
    /* across ranks: every rank created its stage (a failure: the others learn it from this
     * vote); one replica counted per copy (its stage 0's rank) */
    uint32_t P = t->opt.stages ? t->opt.stages : graph_placed_stages(t->graph);
    st = trainer_world_layout(t, t->world ? P && t->rank % P == 0 : n, st);
    if (st == VKT_OK && t->world)
        t->world_rep = pipe_copies(pipe_exec_of(t)->engine);
    *laid_out = st == VKT_OK;
    return st;
}

/* Copy 0's stages recorded now, their statistics summed. */
static vkt_status exec_pipe_record(vkt_trainer *t)
{
    vkt_pipeline *p = pipe_exec_of(t)->engine;
    vkt_model_stats ms;
    for (uint32_t s = 0; s < pipe_split(p)->n_stages; s++) { /* copy 0 (across ranks: this
                                                                rank's stage) */
        uint32_t c = pipe_holds(p, 0, s) ? 0 : pipe_local_copy(p, s);
        if (c == UINT32_MAX)
            continue;
        vkt_model *m = pipe_model(p, c, s);
        vkt_status st = vkt_model_stats_get(m, &ms);
        if (st != VKT_OK)
            return trainer_from_model(t, m, st);
        t->stats.step_dispatches += ms.step_dispatches + 1;
        t->stats.activation_bytes += ms.activation_bytes * pipe_arenas(p, c, s); /* kept
                                                                     micro-batches' too */
        t->stats.activation_no_reuse_bytes += ms.activation_no_reuse_bytes;
    }
    return VKT_OK;
}

static void exec_pipe_destroy(vkt_trainer *t)
{
    pipe_exec *pe = pipe_exec_of(t);
    if (!pe)
        return;
    pipe_exec_eval_free(t);
    vkt_pipeline_destroy(pe->engine); /* after the evaluation models on its contexts */
    pipe_layout_free(pe);
    free(pe->opt_host);
    free(pe->feeds);
    free(pe);
    t->ex = NULL;
}

static uint32_t exec_pipe_copies(const vkt_trainer *t)
{
    return pipe_copies(pipe_exec_of(t)->engine);
}

/* Copies x stages, copy by copy. */
static vkt_context *exec_pipe_holder(const vkt_trainer *t, uint32_t i)
{
    vkt_pipeline *p = pipe_exec_of(t)->engine;
    uint32_t P = pipe_split(p)->n_stages, D = pipe_copies(p);
    if (pipe_world(p)) /* this rank's one stage */
        for (uint32_t k = 0; k < P * D; k++)
            if (pipe_holds(p, k / P, k % P) && i-- == 0)
                return pipe_context(p, k / P, k % P);
    return i < P * D && !pipe_world(p) ? pipe_context(p, i / P, i % P) : NULL;
}

/* The step reads the global batch's rows from the feeds itself: kept until then. */
static void exec_pipe_feed(replica *r, const vkt_feed *feeds, uint32_t n)
{
    pipe_exec *pe = pipe_exec_of(r->t);
    if (n > pe->cap_feeds) {
        vkt_feed *f = realloc(pe->feeds, n * sizeof *f);
        if (!f) {
            replica_fail(r, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
            return;
        }
        pe->feeds = f;
        pe->cap_feeds = n;
    }
    if (n && feeds)
        memcpy(pe->feeds, feeds, n * sizeof *feeds);
    pe->n_feeds = n;
    pe->feeds_null = n && !feeds; /* pipe_step names it */
}

/* One step of the pipeline engine on the global batch; r->loss, or r->status and its
 * message. */
static int exec_pipe_step(replica *r, uint64_t step)
{
    pipe_exec *pe = pipe_exec_of(r->t);
    double t0 = plat_now(), loss = 0;
    int stopped = 0;
    pe->gen++; /* the parameters change */
    if (r->status == VKT_OK) {
        /* across ranks the chief's stop travels in this step's tail */
        pipe_set_stop(pe->engine, r->t->stop && trainer_is_chief(r->t));
        pipe_set_scaler(pe->engine, r->sc.guard, r->sc.scale); /* fp16: the seed, the divisor */
        vkt_status st = pipe_step(pe->engine, pe->feeds_null ? NULL : pe->feeds, pe->n_feeds,
                                  step, &loss);
        if (st != VKT_OK)
            replica_fail(r, st, "%s", vkt_pipeline_errmsg(pe->engine));
        else if ((stopped = pipe_stopped(pe->engine)) != 0)
            trainer_unread_batch(r); /* nothing updated: a resumed run reads it again */
        else if (r->sc.guard) { /* every stage skipped, or none: counted once */
            r->loss = (float)loss;
            apply_judge_skipped(r, step, pipe_skipped(pe->engine));
        } else if (!isfinite(r->loss = (float)loss))
            replica_fail(r, VKT_ERROR_DIVERGED, "the loss is %g at step %llu: training "
                         "diverged (a smaller learning rate may help)", (double)r->loss,
                         (unsigned long long)step + 1);
    }
    r->stats.step_seconds += plat_now() - t0;
    r->stats.steps += r->status == VKT_OK && !stopped;
    vkt_trainer_stats *ts = &r->t->stats; /* async copies: every stage's pushes (else 0) */
    pipe_staleness(pe->engine, UINT32_MAX, &ts->staleness_mean, &ts->staleness_p99,
                   &ts->staleness_max, &ts->updates);
    return r->status != VKT_OK || stopped;
}

static vkt_status exec_pipe_set_optimizer(vkt_trainer *t, const vkt_optimizer_options *o)
{
    vkt_pipeline *p = pipe_exec_of(t)->engine;
    vkt_status st = pipe_set_optimizer(p, o);
    return st == VKT_OK ? st : trainer_fail(t, st, "vkt_trainer_set_optimizer: %s",
                                            vkt_pipeline_errmsg(p));
}

/* A pipeline's dropout draws with the step index pipe_step gets (pipe_sched.c): one per
 * step, as one model's; its optimizers' step is set before each update. */
static uint64_t exec_pipe_dropout_step(const vkt_trainer *t) { return t->steps; }

static void exec_pipe_set_position(vkt_trainer *t, uint64_t step, uint64_t dropout_step)
{
    (void)t;
    (void)step;
    (void)dropout_step;
}

static vkt_status exec_pipe_input_row_bytes(vkt_trainer *t, const vkt_tensor *input,
                                            uint64_t *out)
{
    int64_t id = graph_node_id(t->graph, input);
    if (id < 0)
        return trainer_fail(t, VKT_ERROR_INVALID_ARGUMENT, "the input tensor does not belong "
                            "to the trainer's graph");
    graph_node_info in;
    graph_node_info_at(t->graph, (uint32_t)id, &in);
    *out = in.row_elems * 4;
    return VKT_OK;
}

/* The whole graph on copy 0's stage 0 context, with parameters of its own loaded from
 * the stages before every use. */
static void exec_pipe_eval_place(vkt_trainer *t, vkt_context **ctx, vkt_model **share)
{
    *ctx = pipe_context(pipe_exec_of(t)->engine, 0, 0);
    *share = NULL;
}

/* The stages' due updates (pipe_flush) before evaluation, prediction and the optimizer
 * state's reads and writes (layout.c; the parameters' reads and writes flush in pipe.h). */
vkt_status pipe_exec_flush(vkt_trainer *t)
{
    vkt_pipeline *p = pipe_exec_of(t)->engine;
    vkt_status st = pipe_flush(p);
    return st == VKT_OK ? st : trainer_fail(t, st, "%s", vkt_pipeline_errmsg(p));
}

static vkt_status exec_pipe_stage_stats(vkt_trainer *t, uint32_t stage,
                                        vkt_pipeline_stage_stats *out)
{
    vkt_pipeline *p = pipe_exec_of(t)->engine;
    vkt_status st = vkt_pipeline_stage_stats_get(p, stage, out);
    if (st != VKT_OK)
        trainer_fail(t, st, "%s", vkt_pipeline_errmsg(p));
    return st;
}

const exec_ops exec_pipe_ops = {
    .name = "pipeline",
    .create = exec_pipe_create,
    .record = exec_pipe_record,
    .destroy = exec_pipe_destroy,
    .copies = exec_pipe_copies,
    .holder = exec_pipe_holder,
    .feed = exec_pipe_feed,
    .step = exec_pipe_step,
    .flat_nodes = pipe_layout_nodes,
    .param_offset = pipe_layout_offset,
    .read_flat = pipe_layout_read,
    .write_flat = pipe_layout_write,
    .read_param = pipe_layout_read_param,
    .opt_size = pipe_layout_opt_size,
    .read_opt = pipe_layout_read_opt,
    .write_opt = pipe_layout_write_opt,
    .set_optimizer = exec_pipe_set_optimizer,
    .dropout_step = exec_pipe_dropout_step,
    .set_position = exec_pipe_set_position,
    .input_row_bytes = exec_pipe_input_row_bytes,
    .eval_place = exec_pipe_eval_place,
    .eval_load = pipe_layout_load_eval,
    .flush = pipe_exec_flush,
    .predict = pipe_exec_predict,
    .stage_stats = exec_pipe_stage_stats,
    .sync = pipe_exec_sync,
};
