/* apply.c - the optimizer application (apply.h): a replica's update at the end of its
 * step, or after the reducer's average in its next submission; flushes; each step's
 * learning rate and position. */
#include "parallel/apply.h"

vkt_optimizer_options apply_options(const vkt_trainer *t, const vkt_optimizer_options *base,
                                    const replica *r)
{
    vkt_optimizer_options o = *base;
    if (t->xc) /* async: each replica's gradient counts by its share of the batch */
        o.grad_scale = (o.grad_scale ? o.grad_scale : 1.0f) * r->weight;
    return o;
}

/* The update at the end of the step: the optimizer over the model's flat parameters and
 * gradient. */
static vkt_status record_update(vkt_stream *s, void *user)
{
    replica *r = user;
    vkt_view params, grads;
    uint64_t n;
    vkt_status st = graph_model_flat(r->model, &params, &grads, &n);
    return st == VKT_OK ? vkt_optimizer_record(r->opt, s, params, grads) : st;
}

/* The average back into the replica, then its optimizer, then a barrier that orders the
 * step submitted after it in the same submission: recorded once (again when the replica's
 * model is rebuilt by balancing). */
static vkt_status record_next_submission(vkt_trainer *t, replica *r)
{
    vkt_view p, g;
    uint64_t n;
    graph_model_flat(r->model, &p, &g, &n);
    vkt_status st = r->apply ? vkt_stream_reset(r->apply)
                             : vkt_stream_create(r->ctx, NULL, &r->apply);
    if (st == VKT_OK)
        st = vkt_stream_copy(r->apply, r->stage, 0, g.buffer, 0, n * 4);
    if (st == VKT_OK)
        st = vkt_optimizer_record(r->opt, r->apply, p, g);
    if (st == VKT_OK)
        st = gpu_stream_barrier_all(r->apply);
    r->pending = 0;
    return st == VKT_OK ? VKT_OK
                        : trainer_fail(t, st, "replica %u: %s", r->index,
                                       vkt_context_errmsg(r->ctx));
}

vkt_status apply_attach(vkt_trainer *t, replica *r, apply_at at)
{
    if (at == APPLY_NEXT_SUBMISSION)
        return record_next_submission(t, r);
    vkt_status st = graph_model_add_epilogue(r->model, record_update, r);
    return st == VKT_OK ? VKT_OK : trainer_from_model(t, r->model, st);
}

void apply_pending(replica *r, uint64_t step)
{
    apply_set_step(r, step); /* the hyperparameters the update reads when it runs */
    r->pending = 1;
}

vkt_status apply_submit_step(replica *r)
{
    /* in this submission: a failure of it fails the replica anyway */
    vkt_stream *before[2] = {r->pending ? r->apply : NULL, r->pull_pending ? r->pull : NULL};
    r->pending = r->pull_pending = 0;
    return graph_model_step_submit_after(r->model, before, 2);
}

vkt_status apply_flush_replica(replica *r)
{
    if (!r->pending)
        return VKT_OK;
    r->pending = 0;
    vkt_status st = vkt_stream_run(r->apply);
    return st == VKT_OK ? VKT_OK : replica_fail(r, st, "%s", vkt_context_errmsg(r->ctx));
}

vkt_status apply_flush(vkt_trainer *t)
{
    uint32_t n = t->live ? 1 : t->n_rep; /* live: on replica 0's thread, which is its own */
    for (uint32_t i = 0; i < n; i++) {
        replica *r = &t->rep[i];
        if (!r->pending)
            continue;
        r->pending = 0;
        vkt_status st = vkt_stream_run(r->apply);
        if (st != VKT_OK)
            return trainer_fail(t, st, "replica %u: %s", r->index, vkt_context_errmsg(r->ctx));
    }
    return VKT_OK;
}

void apply_set_step(replica *r, uint64_t step)
{
    vkt_trainer *t = r->t;
    if (t->opt.scale_lr && t->world_rep > 1) {
        double ramp = t->opt.scale_lr_warmup ? (double)step / t->opt.scale_lr_warmup : 1.0;
        double f = 1.0 + (t->world_rep - 1) * (ramp < 1.0 ? ramp : 1.0);
        vkt_optimizer_options o;
        vkt_optimizer_get_options(r->opt, &o);
        o.lr = (float)(t->optim.lr * f);
        vkt_optimizer_set_options(r->opt, &o);
    }
    vkt_optimizer_set_step(r->opt, step);
}
