/* Synchronous data parallelism: every replica runs forward and backward on its rows,
 * host threads average the gradients through host-visible staging (a pool sized to the
 * cores takes chunks of the gradient: reduce_sum.h), every replica applies the same
 * update. */
#include "trainer.h"
#include "reduce_sum.h"

#include <stdlib.h>
#include <string.h>

/* Recorded right after the backward step that completes a parameter's gradient: that
 * gradient into the replica's staging buffer, so on devices that overlap independent
 * commands the copy runs while earlier layers' backward still computes. */
static vkt_status record_grad_out(vkt_stream *s, void *user, uint64_t offset, uint64_t count)
{
    replica *r = user;
    vkt_view p, g;
    uint64_t n;
    vkt_status st = graph_model_flat(r->model, &p, &g, &n);
    if (st == VKT_OK)
        st = vkt_stream_copy(s, g.buffer, offset * 4, r->stage, offset * 4, count * 4);
    if (st == VKT_OK && r->t->world) /* across ranks: buckets sent as they complete */
        st = sync_world_on_grad(r, s, offset, count);
    return st;
}

vkt_status sync_setup(vkt_trainer *t, replica *r)
{
    vkt_status st = graph_model_on_grad_ready(r->model, record_grad_out, r);
    if (st == VKT_OK && t->world)
        st = sync_world_setup_replica(t, r);
    if (st != VKT_OK)
        return trainer_from_model(t, r->model, st);
    vkt_view p, g;
    uint64_t n;
    graph_model_flat(r->model, &p, &g, &n);
    /* The averaged gradient back into the replica, then its optimizer: recorded once
     * (again when the replica's model is rebuilt by balancing). */
    st = r->apply ? vkt_stream_reset(r->apply) : vkt_stream_create(r->ctx, NULL, &r->apply);
    if (st == VKT_OK)
        st = vkt_stream_copy(r->apply, r->stage, 0, g.buffer, 0, n * 4);
    if (st == VKT_OK)
        st = vkt_optimizer_record(r->opt, r->apply, p, g);
    return st == VKT_OK ? VKT_OK
                        : trainer_fail(t, st, "replica %u: %s", r->index,
                                       vkt_context_errmsg(r->ctx));
}

/* The pool's job: elements [c0, c1) of the weighted average, written back into every
 * replica's stage. The sum runs over the replicas in index order, so every replica gets
 * the same bits. */
static void reduce_chunk(void *user, uint64_t c0, uint64_t c1)
{
    vkt_trainer *t = user;
    float *stage[TRAINER_MAX_REPLICAS], w[TRAINER_MAX_REPLICAS];
    for (uint32_t q = 0; q < t->n_rep; q++) {
        stage[q] = t->rep[q].stage_host + c0;
        w[q] = t->rep[q].weight;
    }
    reduce_sum(stage, t->n_rep, (const float *const *)stage, w, t->n_rep, c1 - c0);
}

vkt_status sync_pool_start(vkt_trainer *t)
{
    /* the bytes one step's sum moves: every stage read, the average written to each */
    uint32_t threads = reduce_pool_size(2ull * t->n_rep * t->grad_count * 4, plat_cpu_count());
    uint32_t callers = threads < t->n_rep ? threads : t->n_rep;
    vkt_status st = reduce_pool_create(callers, threads - callers, &t->pool);
    return st == VKT_OK ? VKT_OK
                        : trainer_fail(t, st, "cannot start the averaging's %u threads", threads);
}

/* The replica's forward and backward (and, alone, its update); then, with others,
 * averaging and the update. Every replica reaches both barriers whatever happens, and
 * leaves when any of them voted a failure. Returns 1 to stop. */
static int step_together(replica *r, uint64_t step)
{
    vkt_trainer *t = r->t;
    double t0 = plat_now();
    if (t->pipe) { /* stages: the pipeline engine steps its P x D contexts (fit's batch) */
        vkt_feed feeds[2] = {{t->in_x, r->x}, {t->in_y, r->y}};
        if (r->status == VKT_OK)
            trainer_pipe_step(r, feeds, 2, step);
        r->stats.step_seconds += plat_now() - t0;
        r->stats.steps += r->status == VKT_OK;
        return r->status != VKT_OK;
    }
    trainer_slow_down(r);
    if (r->status == VKT_OK) {
        trainer_set_step(r, step);
        if (t->world) /* the exchange works while the step runs, then waits for it */
            trainer_step_submit(r);
        else
            trainer_forward_backward(r, step);
    }
    double t1 = plat_now();
    if (!t->world) /* across ranks the exchange counts the step when it waits for it */
        r->stats.step_seconds += t1 - t0;
    if (!t->staged) {
        r->stats.steps += r->status == VKT_OK;
        return r->status != VKT_OK;
    }
    if (t->world) { /* across ranks: sync_world.c */
        if (sync_world_exchange(r, step))
            return 1;
    } else {
        if (plat_barrier_wait(t->barrier, r->status != VKT_OK))
            return 1;
        double t2 = plat_now();
        r->stats.wait_seconds += t2 - t1;
        if (r->index < reduce_pool_callers(t->pool)) /* the states have no gradient */
            reduce_pool_run(t->pool, r->index, reduce_chunk, t, t->grad_count);
        plat_barrier_wait(t->barrier, 0);
        if (r->index == 0)
            t->avg_seconds += plat_now() - t2;
    }
    double t3 = plat_now();
    vkt_status st = vkt_stream_run(r->apply);
    if (st != VKT_OK)
        replica_fail(r, st, "%s", vkt_context_errmsg(r->ctx));
    r->stats.step_seconds += plat_now() - t3;
    r->stats.steps++;
    sync_world_check_identical(r, step);
    return 0;
}

double sync_mean_loss(const vkt_trainer *t)
{
    if (t->world)
        return t->global_loss;
    double loss = 0;
    for (uint32_t q = 0; q < t->n_rep; q++)
        loss += (double)t->rep[q].weight * t->rep[q].loss;
    return loss;
}

void sync_job_feeds(replica *r)
{
    vkt_trainer *t = r->t;
    if (t->pipe) {
        trainer_pipe_step(r, t->feeds, t->n_feeds, t->steps);
        return;
    }
    vkt_status st = trainer_feed(t, r->errmsg, r->model, t->feeds, t->n_feeds, r->row0, r->rows,
                                 0);
    if (st != VKT_OK)
        replica_fail(r, st, "%s", r->errmsg);
    step_together(r, t->steps);
}

/* Replicas agree before every step whether to take it: a failure anywhere or a stop
 * asked by the progress callback ends the run for all at the same step. */
static int agree_to_go_on(replica *r)
{
    vkt_trainer *t = r->t;
    int vote = r->status != VKT_OK || (r->index == 0 && t->stop);
    if (t->world) /* across ranks the vote travels with the step's sums (sync_world.c) */
        return 1;
    if (t->n_rep == 1)
        return !vote;
    return !plat_barrier_wait(t->barrier, vote);
}

void sync_job_steps(replica *r)
{
    vkt_trainer *t = r->t;
    for (uint64_t k = 0; k < t->run_steps && agree_to_go_on(r); k++) {
        trainer_next_batch(r);
        if (step_together(r, t->steps + k)) {
            if (t->world && t->x_stop && !t->x_fail) /* the batch was not used */
                trainer_unread_batch(r);
            break;
        }
        if (r->index != 0)
            continue;
        t->stats.steps++;
        if (t->progress && trainer_is_chief(t)) /* across ranks: the chief alone */
            t->stop = trainer_progress(r, k, (float)sync_mean_loss(t));
    }
}
