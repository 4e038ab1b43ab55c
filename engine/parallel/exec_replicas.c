/* exec_replicas.c - the replicas executor (exec.h): data parallelism, one context, model
 * and optimizer per replica of this process, each on its share of the global batch. A
 * synchronous step: every replica's forward and backward (its update at the end, alone),
 * then the reducer's average and the update after it (exec_plan.c's row). The async
 * exchange drives the same step (trainer_forward_backward) itself. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "parallel/exec.h"

vkt_status exec_replica_attach(vkt_trainer *t, replica *r)
{
    const exec_row *row = t->row;
    vkt_status st = VKT_OK;
    if (row->apply == APPLY_IN_STEP) /* first: the parameters go out after the update */
        st = apply_attach(t, r, APPLY_IN_STEP);
    if (st == VKT_OK && t->xc)
        st = exchange_attach(t->xc, r);
    if (st == VKT_OK && t->rd)
        st = t->rd->ops->attach(t->rd, r);
    if (st == VKT_OK && row->apply == APPLY_AFTER_AVERAGE)
        st = apply_attach(t, r, APPLY_AFTER_AVERAGE);
    return st;
}

static vkt_status create_replica(vkt_trainer *t, replica *r, uint32_t device)
{
    vkt_context_options co = {.device_index = device, .kernels = t->opt.kernels};
    vkt_status st = vkt_context_create(t->inst, &co, &r->ctx);
    if (st != VKT_OK)
        return trainer_fail(t, st, "replica %u (device %u): %s", r->index, device,
                            vkt_last_error());
    vkt_model_options mo = {.batch = r->rows, .check = t->opt.check, .row_offset = r->row0};
    st = vkt_model_create(r->ctx, t->graph, t->loss, &mo, &r->model);
    if (st != VKT_OK)
        return trainer_fail(t, st, "replica %u: %s", r->index, vkt_last_error());
    vkt_optimizer_options oo = apply_options(t, &t->optim, r);
    vkt_view pv, gv;
    uint64_t trained = 0;
    graph_model_flat(r->model, &pv, &gv, &trained); /* states are not the optimizer's */
    st = vkt_optimizer_create(r->ctx, &oo, trained, &r->opt);
    if (st != VKT_OK)
        return trainer_fail(t, st, "replica %u: optimizer: %s", r->index,
                            vkt_context_errmsg(r->ctx));
    if (t->rd || t->xc) { /* gradients or parameters pass through host staging */
        st = vkt_buffer_create(r->ctx, vkt_model_param_count(r->model) * 4, VKT_MEMORY_HOST,
                               &r->stage);
        if (st != VKT_OK)
            return trainer_fail(t, st, "replica %u: staging: %s", r->index,
                                vkt_context_errmsg(r->ctx));
        r->stage_host = vkt_buffer_map(r->stage);
        /* Alignment gaps between parameters are never copied out: keep them zero. */
        memset(r->stage_host, 0, vkt_model_param_count(r->model) * 4);
    }
    return exec_replica_attach(t, r);
}

/* The row for the world's replicas (its refusals first), and its reducer or exchange. */
static vkt_status pick(vkt_trainer *t)
{
    exec_facts f;
    exec_facts_of(t, t->world_rep, &f);
    vkt_status st = exec_plan_refuse(t, &f);
    if (st != VKT_OK)
        return st;
    t->row = exec_plan_pick(&f);
    if (t->row->reduce)
        st = t->row->reduce->create(t, t->world, &t->rd);
    if (st == VKT_OK && t->row->exchange)
        st = t->row->exchange->create(t, t->world, &t->xc);
    return st;
}

vkt_status exec_replicas_create(vkt_trainer *t, const uint32_t *dev, uint32_t n)
{
    vkt_status st = pick(t);
    if (st == VKT_OK && !(t->rep = calloc(n, sizeof *t->rep)))
        st = trainer_fail(t, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    if (st != VKT_OK)
        return st;
    t->n_rep = n;
    uint64_t B = t->opt.batch, G = t->world_rep;
    for (uint32_t i = 0; i < n; i++) { /* an even split over the world; the first rows to
                                          the first replicas */
        replica *r = &t->rep[i];
        uint64_t g = t->rep_base + i;
        r->t = t;
        r->index = i;
        r->row0 = (uint32_t)(B * g / G);
        r->rows = (uint32_t)(B * (g + 1) / G) - r->row0;
        r->weight = (float)r->rows / (float)t->opt.batch;
    }
    for (uint32_t i = 0; st == VKT_OK && i < n; i++)
        st = create_replica(t, &t->rep[i], dev[i]);
    if (st == VKT_OK && t->rd) /* before the first recording, which places the marks */
        t->rd->overlap = t->opt.overlap > 0 ||
                         (t->opt.overlap == 0 &&
                          vkt_context_kernel_variant(t->rep[0].ctx) == VKT_KERNELS_GPU);
    if (st == VKT_OK) {
        vkt_view p, g;
        t->param_count = vkt_model_param_count(t->rep[0].model);
        graph_model_flat(t->rep[0].model, &p, &g, &t->grad_count);
    }
    if (st == VKT_OK && n > 1)
        st = trainer_workers_start(t);
    if (st == VKT_OK && t->rd && t->rd->ops->start)
        st = t->rd->ops->start(t->rd);
    return st;
}

void exec_replicas_destroy(vkt_trainer *t)
{
    trainer_workers_stop(t);
    for (uint32_t i = 0; i < t->n_rep; i++) {
        replica *r = &t->rep[i];
        for (uint32_t e = 0; e < r->n_eval; e++)
            vkt_model_destroy(r->eval[e].model);
        vkt_model_destroy(r->model);
        vkt_optimizer_destroy(r->opt);
        vkt_context_destroy(r->ctx); /* also its stage buffer and apply stream */
        vkt_loader_destroy(r->loader);
        free(r->x);
        free(r->y);
    }
    free(t->rep);
    t->rep = NULL;
    t->n_rep = 0;
    if (t->rd)
        t->rd->ops->destroy(t->rd);
    if (t->xc)
        t->xc->ops->destroy(t->xc);
    t->rd = NULL;
    t->xc = NULL;
}

void trainer_slow_down(replica *r)
{
    vkt_trainer *t = r->t;
    uint32_t slow = t->opt.slow_replica == UINT32_MAX ? t->world_rep - 1 : t->opt.slow_replica;
    if (t->opt.slow_seconds > 0 && t->rep_base + r->index == slow)
        plat_sleep(t->opt.slow_seconds * r->rows * t->world_rep / t->opt.batch);
}

vkt_status trainer_step_submit(replica *r)
{
    r->submitted_at = plat_now();
    vkt_status st = graph_model_step_submit(r->model);
    return st == VKT_OK ? st : replica_fail(r, st, "%s", vkt_model_errmsg(r->model));
}

vkt_status trainer_forward_backward(replica *r, uint64_t step)
{
    vkt_status st = trainer_step_submit(r);
    return st == VKT_OK ? trainer_step_finish(r, step) : st;
}

vkt_status trainer_step_finish(replica *r, uint64_t step)
{
    vkt_status st = graph_model_step_wait(r->model);
    if (st == VKT_OK)
        st = vkt_model_loss(r->model, &r->loss);
    if (st != VKT_OK)
        return replica_fail(r, st, "%s", vkt_model_errmsg(r->model));
    if (!isfinite(r->loss))
        return replica_fail(r, VKT_ERROR_DIVERGED, "the loss is %g at step %llu: training "
                            "diverged (a smaller learning rate or gradient clipping may help)",
                            (double)r->loss, (unsigned long long)step + 1);
    return VKT_OK;
}

int exec_replica_step(replica *r, uint64_t step)
{
    vkt_trainer *t = r->t;
    reducer *rd = t->rd;
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
        apply_set_step(r, step);
        if (rd && rd->ops->submit_only) /* the exchange works while the step runs, then
                                            waits for it */
            trainer_step_submit(r);
        else
            trainer_forward_backward(r, step);
    }
    if (!rd || !rd->ops->submit_only) /* else the exchange counts the step when it waits */
        r->stats.step_seconds += plat_now() - t0;
    if (!rd) { /* alone: the update was the end of the step */
        r->stats.steps += r->status == VKT_OK;
        return r->status != VKT_OK;
    }
    if (rd->ops->exchange(rd, r, step))
        return 1;
    double t3 = plat_now();
    apply_after_average(r);
    r->stats.step_seconds += plat_now() - t3;
    r->stats.steps++;
    if (rd->ops->applied)
        rd->ops->applied(rd, r, step);
    return 0;
}
