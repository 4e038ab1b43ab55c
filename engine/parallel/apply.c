/* apply.c - the optimizer application (apply.h): a replica's update at the end of its
 * step, or after the reducer's average in its next submission; flushes; each step's
 * learning rate and position. */
#include "parallel/apply.h"
#include "parallel/exchange.h"
#include "io/checkpoint.h"
#include "optim/optim.h"

#define SCALE_START 65536.0f      /* 2^16 */
#define SCALE_INTERVAL 2000u      /* clean steps before the scale doubles */
#define SCALE_MAX 4294967296.0f   /* 2^32 */
#define SKIPS_UNDER_SCALING 32u   /* skips in a row allowed by default with scaling: 2^16
                                     halves to 1 in 16 */

/* The scaler as a run starts it: the first scale, no step counted. */
static void scaler_start(const vkt_trainer *t, loss_scaler *sc)
{
    sc->scale = sc->scaling && t->opt.loss_scale > 0 ? t->opt.loss_scale
                : sc->scaling                        ? SCALE_START
                                                     : 1.0f;
    sc->seeded = sc->scale;
    sc->clean = sc->in_a_row = 0;
    sc->skipped = 0;
}

/* r's scaler from the options and its model's precision; the optimizer guarded when
 * steps may be skipped. Once: a model rebuilt by balancing keeps the scaler. */
static vkt_status scaler_setup(vkt_trainer *t, replica *r)
{
    loss_scaler *sc = &r->sc;
    if (sc->ready)
        return VKT_OK;
    vkt_dtype d = VKT_DTYPE_FP32; /* a pipeline's driver holds no context: its first stage's */
    vkt_status st = trainer_precision_on(t, r->ctx ? r->ctx : trainer_holder_context(t, 0), &d);
    if (st != VKT_OK)
        return st;
    *sc = (loss_scaler){.ready = 1, .scaling = d == VKT_DTYPE_FP16};
    sc->limit = t->opt.nonfinite_skips ? t->opt.nonfinite_skips
                                       : sc->scaling ? SKIPS_UNDER_SCALING : 0;
    sc->guard = sc->scaling || sc->limit > 0;
    if (sc->scaling)
        sc->interval = t->opt.loss_scale_interval ? t->opt.loss_scale_interval : SCALE_INTERVAL;
    scaler_start(t, sc);
    if (sc->guard && r->opt && (st = optim_guard_nonfinite(r->opt)) != VKT_OK)
        return trainer_fail(t, st, "replica %u: %s", r->index, vkt_context_errmsg(r->ctx));
    return VKT_OK;
}

void apply_seed(replica *r)
{
    if (!r->sc.scaling)
        return;
    r->sc.seeded = r->sc.scale;
    graph_model_set_loss_scale(r->model, r->sc.scale);
}

/* The verdict on step sc->judge_step: skipped (not applied) or applied. */
static vkt_status judge_locked(replica *r, int skipped);

/* Async replicas' scalers are read by the others' threads (apply_scaler): under the
 * trainer's monitor. */
static vkt_status judge(replica *r, int skipped)
{
    plat_monitor *mon = r->t->xc ? r->t->mon : NULL;
    if (mon)
        plat_monitor_lock(mon);
    vkt_status st = judge_locked(r, skipped);
    if (mon)
        plat_monitor_unlock(mon);
    return st;
}

static vkt_status judge_locked(replica *r, int skipped)
{
    loss_scaler *sc = &r->sc;
    if (!skipped) {
        sc->in_a_row = 0;
        if (sc->scaling && ++sc->clean >= sc->interval) {
            sc->clean = 0;
            sc->scale = sc->scale * 2.0f <= SCALE_MAX ? sc->scale * 2.0f : SCALE_MAX;
        }
        return VKT_OK;
    }
    sc->skipped++;
    sc->in_a_row++;
    sc->clean = 0;
    float was = sc->scale;
    if (sc->scaling && sc->scale > 1.0f)
        sc->scale *= 0.5f;
    if (sc->in_a_row > sc->limit)
        return replica_fail(r, VKT_ERROR_DIVERGED,
                            "%u steps in a row (the last step %llu) had non-finite gradients%s%g; "
                            "%llu skipped in all: training diverged (the limit is %u in a row: "
                            "nonfinite_skips, --skip-nonfinite)", sc->in_a_row,
                            (unsigned long long)sc->judge_step + 1,
                            sc->scaling ? " at loss scale " : "", sc->scaling ? (double)was : 0.0,
                            (unsigned long long)sc->skipped, sc->limit);
    return VKT_OK;
}

vkt_status apply_judge(replica *r)
{
    loss_scaler *sc = &r->sc;
    if (!sc->judge)
        return VKT_OK;
    sc->judge = 0;
    if (r->status != VKT_OK)
        return r->status;
    return judge(r, optim_skipped(r->opt));
}

vkt_status apply_judge_skipped(replica *r, uint64_t step, int skipped)
{
    r->sc.judge = 0;
    r->sc.judge_step = step;
    return r->status != VKT_OK ? r->status : judge(r, skipped);
}

loss_scaler apply_scaler(const vkt_trainer *t)
{
    loss_scaler s = t->rep[0].sc;
    if (!t->xc) /* one replica, a pipeline's driver, or sync replicas that decide alike */
        return s;
    exchange *x = t->xc;
    int first = 1;
    if (t->mon) /* the replicas judge on their threads (apply_judge) */
        plat_monitor_lock(t->mon);
    for (uint32_t g = 0; g < t->world_rep; g++) { /* async: each replica's own */
        loss_scaler o = t->rep[0].sc; /* the settings, alike on every replica */
        if (g >= t->rep_base && g - t->rep_base < t->n_rep) {
            /* the counts judge() writes under the monitor, never the whole struct: the
             * rest (seeded, judge, judge_step) its replica's thread writes without it */
            const loss_scaler *q = &t->rep[g - t->rep_base].sc;
            o.skipped = q->skipped, o.scale = q->scale;
            o.clean = q->clean, o.in_a_row = q->in_a_row;
        } else if (!x->ops->scaler_get || !x->ops->scaler_get(x, g, &o))
            continue; /* another rank's replica that has not pushed yet */
        if (first) {
            s = o;
            first = 0;
            continue;
        }
        s.skipped += o.skipped;
        s.scale = o.scale < s.scale ? o.scale : s.scale;
        s.clean = o.clean < s.clean ? o.clean : s.clean;
        s.in_a_row = o.in_a_row > s.in_a_row ? o.in_a_row : s.in_a_row;
    }
    if (t->mon)
        plat_monitor_unlock(t->mon);
    return s;
}

void apply_restore_scaler(vkt_trainer *t, const ckpt *k)
{
    for (uint32_t i = 0; i < t->n_rep; i++) {
        loss_scaler *sc = &t->rep[i].sc;
        if (!sc->guard) /* this run skips no step: nothing to carry on */
            continue;
        scaler_start(t, sc); /* a checkpoint without SCAL: as a run starts */
        if (!k->has_scal)
            continue;
        /* async: the file's count is the replicas' sum, kept once (by global replica 0)
         * so the sum goes on; every replica starts from the rest (apply_scaler) */
        sc->skipped = t->xc && t->rep_base + i > 0 ? 0 : k->scal_skipped;
        sc->in_a_row = k->scal_in_a_row;
        if (sc->scaling && k->scal_scaling) { /* fp16 then and now: its scale goes on */
            sc->scale = sc->seeded = (float)k->scal_scale;
            sc->clean = k->scal_clean;
        }
    }
    /* across ranks (ps): the other ranks' replicas restored alike, as this rank's 1.. are */
    exchange *x = t->xc;
    for (uint32_t g = 0; x && x->ops->scaler_set && t->rep[0].sc.guard && g < t->world_rep; g++) {
        loss_scaler sc = t->rep[t->n_rep > 1 ? 1 : 0].sc;
        sc.skipped = g == 0 && k->has_scal ? k->scal_skipped : 0;
        x->ops->scaler_set(x, g, &sc);
    }
}

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
        st = vkt_stream_copy(r->apply, r->avg_in ? r->avg_in : r->stage, 0, g.buffer, 0, n * 4);
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
    vkt_status st = scaler_setup(t, r);
    if (st != VKT_OK || at == APPLY_IN_PIPELINE) /* the engine's stages apply (pipe.h) */
        return st;
    if (at == APPLY_NEXT_SUBMISSION)
        return record_next_submission(t, r);
    st = graph_model_add_epilogue(r->model, record_update, r);
    return st == VKT_OK ? VKT_OK : trainer_from_model(t, r->model, st);
}

void apply_pending(replica *r, uint64_t step)
{
    apply_set_step(r, step); /* the hyperparameters the update reads when it runs */
    r->pending = 1;
    r->sc.pending_step = step;
}

vkt_status apply_submit_step(replica *r) { return apply_submit_step_ext(r, NULL, 0, NULL); }

vkt_status apply_submit_step_ext(replica *r, vkt_stream *const *after, uint32_t n_after,
                                 const gpu_submit_sync *sync)
{
    if (r->pending && r->sc.guard) { /* judged once the submission has run */
        r->sc.judge = 1;
        r->sc.judge_step = r->sc.pending_step;
    }
    /* in this submission: a failure of it fails the replica anyway */
    vkt_stream *before[2] = {r->pending ? r->apply : NULL, r->pull_pending ? r->pull : NULL};
    r->pending = r->pull_pending = 0;
    return graph_model_step_submit_ext(r->model, before, 2, after, n_after, sync);
}

/* The pending update alone: one submission (after what it waits for on the device, the
 * device reducer's average) and one wait. */
static vkt_status run_apply(replica *r)
{
    gpu_submit_sync sync = {&r->apply_wait, 1, NULL, 0};
    vkt_status st = gpu_stream_submit_ext(r->apply, NULL, 0, NULL, 0,
                                          r->apply_wait.t ? &sync : NULL);
    return st == VKT_OK ? vkt_stream_wait(r->apply) : st;
}

vkt_status apply_flush_replica(replica *r)
{
    if (!r->pending)
        return VKT_OK;
    r->pending = 0;
    vkt_status st = run_apply(r);
    if (st != VKT_OK)
        return replica_fail(r, st, "%s", vkt_context_errmsg(r->ctx));
    r->sc.judge = r->sc.guard;
    r->sc.judge_step = r->sc.pending_step;
    return apply_judge(r);
}

vkt_status apply_flush(vkt_trainer *t)
{
    uint32_t n = t->live ? 1 : t->n_rep; /* live: on replica 0's thread, which is its own */
    for (uint32_t i = 0; i < n; i++) {
        replica *r = &t->rep[i];
        if (!r->pending)
            continue;
        r->pending = 0;
        vkt_status st = run_apply(r);
        if (st != VKT_OK)
            return trainer_fail(t, st, "replica %u: %s", r->index, vkt_context_errmsg(r->ctx));
        r->sc.judge = r->sc.guard;
        r->sc.judge_step = r->sc.pending_step;
        if ((st = apply_judge(r)) != VKT_OK)
            return trainer_fail(t, st, "%s", r->errmsg);
    }
    return VKT_OK;
}

void apply_set_step(replica *r, uint64_t step)
{
    vkt_trainer *t = r->t;
    if (r->sc.scaling) {
        /* the update divides out the scale its gradient was made with: in the step, the
         * one the step is about to be seeded with; after the average, the one it was */
        float s = t->rd ? r->sc.seeded : r->sc.scale;
        vkt_optimizer_options o, base = apply_options(t, &t->optim, r); /* async: x weight */
        vkt_optimizer_get_options(r->opt, &o);
        o.grad_scale = (base.grad_scale > 0 ? base.grad_scale : 1.0f) / s;
        vkt_optimizer_set_options(r->opt, &o);
    }
    if (!t->rd && r->sc.guard) { /* the update runs in this step: judged after it */
        r->sc.judge = 1;
        r->sc.judge_step = step;
    }
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
