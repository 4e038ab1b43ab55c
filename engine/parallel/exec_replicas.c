/* exec_replicas.c - the replicas executor (exec.h): data parallelism, one context, model
 * and optimizer per replica of this process, each on its share of the global batch. A
 * synchronous step: every replica's forward and backward (its update at the end, alone),
 * then the reducer's average and the update after it (exec_plan.c's row). The async
 * exchange drives the same step (trainer_forward_backward) itself. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "parallel/exec.h"
#include "parallel/share.h"

vkt_status exec_replica_attach(vkt_trainer *t, replica *r)
{
    const exec_row *row = t->row;
    vkt_status st = VKT_OK;
    if (row->apply == APPLY_IN_STEP) /* first: the parameters go out after the update */
        st = apply_attach(t, r, APPLY_IN_STEP);
    if (st == VKT_OK && t->xc)
        st = t->xc->ops->attach(t->xc, r);
    if (st == VKT_OK && t->rd)
        st = t->rd->ops->attach(t->rd, r);
    if (st == VKT_OK && row->apply == APPLY_NEXT_SUBMISSION)
        st = apply_attach(t, r, APPLY_NEXT_SUBMISSION);
    return st;
}

/* Replica j's context (share_pick's ctx). */
static vkt_context *rep_ctx(void *user, uint32_t j)
{
    return ((vkt_trainer *)user)->rep[j].ctx;
}

/* The context replica i shares its VkDevice with (NULL: a device of its own): share.h. */
static vkt_context *share_with(vkt_trainer *t, const uint32_t *dev, uint32_t n, uint32_t i)
{
    return share_pick(dev, n, i, rep_ctx, t);
}

static vkt_status create_context(vkt_trainer *t, replica *r, uint32_t device, vkt_context *share)
{
    vkt_context_options co = {.device_index = device, .kernels = t->opt.kernels};
    vkt_status st = gpu_context_create_shared(t->inst, &co, share, &r->ctx);
    return st == VKT_OK ? st : trainer_fail(t, st, "replica %u (device %u): %s", r->index,
                                            device, vkt_last_error());
}

static vkt_status create_replica(vkt_trainer *t, replica *r)
{
    vkt_model_options mo = {.batch = r->rows, .check = t->opt.check, .row_offset = r->row0};
    vkt_status st = trainer_precision_on(t, r->ctx, &mo.precision);
    if (st != VKT_OK)
        return st;
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
    /* gradients or parameters pass through host staging (not the device reducer's nor
     * the device exchange's) */
    if ((t->rd && !t->rd->ops->on_device) || (t->xc && !t->xc->ops->on_device)) {
        uint64_t bytes = vkt_model_param_count(r->model) * 4;
        st = t->rd && t->rd->ops->make_stage
                 ? t->rd->ops->make_stage(t->rd, r, bytes)
                 : vkt_buffer_create(r->ctx, bytes, VKT_MEMORY_HOST, &r->stage);
        if (st != VKT_OK)
            return trainer_fail(t, st, "replica %u: staging: %s", r->index,
                                vkt_context_errmsg(r->ctx));
        r->stage_host = vkt_buffer_map(r->stage);
        /* Alignment gaps between parameters are never copied out: keep them zero. */
        memset(r->stage_host, 0, vkt_model_param_count(r->model) * 4);
    }
    return exec_replica_attach(t, r);
}

/* The row for the world's replicas (its refusals were checked first), now that their
 * contexts exist (whether they share a device is a fact), and its reducer or exchange. */
static vkt_status pick(vkt_trainer *t)
{
    exec_facts f;
    exec_facts_of(t, t->world_rep, &f);
    t->row = exec_plan_pick(&f);
    vkt_status st = VKT_OK;
    if (t->row->reduce)
        st = t->row->reduce->create(t, t->world, &t->rd);
    if (st == VKT_OK && t->row->exchange)
        st = t->row->exchange->create(t, t->world, &t->xc);
    return st;
}

static vkt_status replicas_create(vkt_trainer *t, const uint32_t *dev, uint32_t n,
                                 vkt_status sel, int *laid_out)
{
    t->world_rep = n; /* collective: every rank's replica count */
    vkt_status st = trainer_world_layout(t, n, sel);
    *laid_out = st == VKT_OK;
    exec_facts f;
    if (st == VKT_OK) {
        exec_facts_of(t, t->world_rep, &f);
        st = exec_plan_refuse(t, &f);
    }
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
    char why[320];
    if (st == VKT_OK && share_refuse("replicas", why, sizeof why))
        st = trainer_fail(t, VKT_ERROR_INVALID_ARGUMENT, "%s", why);
    for (uint32_t i = 0; st == VKT_OK && i < n; i++)
        st = create_context(t, &t->rep[i], dev[i], share_with(t, dev, n, i));
    if (st == VKT_OK)
        st = pick(t);
    for (uint32_t i = 0; st == VKT_OK && i < n; i++)
        st = create_replica(t, &t->rep[i]);
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

/* Records replica 0's step now, so a shape past a device limit (found when a kernel is
 * recorded) fails at creation rather than at the first step. */
static vkt_status replicas_record(vkt_trainer *t)
{
    vkt_model_stats ms;
    vkt_status st = vkt_model_stats_get(t->rep[0].model, &ms);
    if (st != VKT_OK)
        return trainer_from_model(t, t->rep[0].model, st);
    t->stats.step_dispatches = ms.step_dispatches +
                               (t->rep[0].apply ? 1 + (t->optim.clip_norm > 0) : 0);
    t->stats.activation_bytes = ms.activation_bytes;
    t->stats.activation_no_reuse_bytes = ms.activation_no_reuse_bytes;
    return VKT_OK;
}

static void replicas_destroy(vkt_trainer *t)
{
    for (uint32_t i = 0; i < t->n_rep; i++) {
        replica *r = &t->rep[i];
        vkt_model_destroy(r->model);
        vkt_optimizer_destroy(r->opt);
        vkt_context_destroy(r->ctx); /* also its stage buffer and apply stream */
    }
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
    apply_seed(r); /* fp16: the backward starts from the loss scale */
    vkt_status st = apply_submit_step(r); /* with the previous step's pending update */
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
    if (apply_judge(r) != VKT_OK) /* the update that ran in this submission */
        return r->status;
    if (!isfinite(r->loss) && !r->sc.guard) /* else a non-finite step is skipped, counted */
        return replica_fail(r, VKT_ERROR_DIVERGED, "the loss is %g at step %llu: training "
                            "diverged (a smaller learning rate or gradient clipping may help)",
                            (double)r->loss, (unsigned long long)step + 1);
    return VKT_OK;
}

static void replicas_feed(replica *r, const vkt_feed *feeds, uint32_t n)
{
    vkt_status st = trainer_feed(r->errmsg, r->model, feeds, n, r->row0, r->rows, 0);
    if (st != VKT_OK)
        replica_fail(r, st, "%s", r->errmsg);
}

/* One synchronous step of replica r on its rows already fed: its forward and backward
 * (alone: and its update; with a reducer: after the previous step's update, in one
 * submission), then the reducer's average, whose update is pending until the next
 * step or a flush (apply.h). Every replica of the process calls it; returns 1 to stop
 * (statuses set). */
static int replicas_step(replica *r, uint64_t step)
{
    vkt_trainer *t = r->t;
    reducer *rd = t->rd;
    double t0 = plat_now();
    trainer_slow_down(r);
    if (rd && rd->ops->step) /* the reducer's own: in its turn, failed or not */
        rd->ops->step(rd, r, step);
    else if (r->status == VKT_OK) {
        if (!rd) /* the update in the step reads this step's hyperparameters */
            apply_set_step(r, step);
        if (rd && (rd->ops->submit_only || rd->overlap)) /* the exchange works while the
                                                             step runs, then waits for it */
            trainer_step_submit(r);
        else
            trainer_forward_backward(r, step);
    }
    if (!rd || !(rd->ops->submit_only || rd->overlap)) /* else the exchange counts the
                                                           step when it waits */
        r->stats.step_seconds += plat_now() - t0;
    if (!rd) { /* alone: the update was the end of the step */
        r->stats.steps += r->status == VKT_OK;
        return r->status != VKT_OK;
    }
    if (rd->ops->exchange(rd, r, step))
        return 1;
    apply_pending(r, step);
    r->stats.steps++;
    if (rd->ops->applied)
        rd->ops->applied(rd, r, step);
    return 0;
}

/* ---- parameters, optimizer state, evaluation ---- */

static uint32_t replicas_copies(const vkt_trainer *t) { return t->n_rep; }

static vkt_context *replicas_holder(const vkt_trainer *t, uint32_t i)
{
    return i < t->n_rep ? t->rep[i].ctx : NULL;
}

static uint32_t replicas_flat_nodes(const vkt_trainer *t)
{
    return graph_model_nodes(t->rep[0].model);
}

static vkt_status replicas_param_offset(const vkt_trainer *t, const vkt_tensor *p,
                                        uint64_t *off)
{
    return vkt_model_param_offset(t->rep[0].model, p, off);
}

static vkt_status replicas_read_flat(vkt_trainer *t, uint32_t copy, float *flat,
                                     uint64_t count)
{
    vkt_status st = apply_flush(t);
    if (st != VKT_OK)
        return st;
    st = vkt_model_read_params(t->rep[copy].model, flat, count);
    return st == VKT_OK ? st : trainer_from_model(t, t->rep[copy].model, st);
}

static vkt_status replicas_write_flat(vkt_trainer *t, const float *flat, uint64_t count)
{
    vkt_status st = apply_flush(t); /* else it would land on the values written */
    for (uint32_t i = 0; i < t->n_rep && st == VKT_OK; i++)
        if ((st = vkt_model_write_params(t->rep[i].model, flat, count)) != VKT_OK)
            trainer_from_model(t, t->rep[i].model, st);
    return st;
}

static vkt_status replicas_read_param(vkt_trainer *t, const vkt_tensor *p, float *out,
                                      uint64_t count)
{
    vkt_status st = apply_flush(t);
    if (st != VKT_OK)
        return st;
    st = vkt_model_read(t->rep[0].model, p, out, count);
    return st == VKT_OK ? st : trainer_from_model(t, t->rep[0].model, st);
}

static uint64_t replicas_opt_size(vkt_trainer *t) { return vkt_optimizer_state_size(t->rep[0].opt); }

static vkt_status replicas_read_opt(vkt_trainer *t, void *blob, uint64_t bytes)
{
    vkt_status st = apply_flush(t);
    if (st != VKT_OK)
        return st;
    st = vkt_optimizer_read_state(t->rep[0].opt, blob, bytes);
    return st == VKT_OK ? st : trainer_fail(t, st, "%s", vkt_context_errmsg(t->rep[0].ctx));
}

static vkt_status replicas_write_opt(vkt_trainer *t, const char *path, const void *blob,
                                     uint64_t bytes)
{
    vkt_status st = apply_flush(t);
    for (uint32_t i = 0; i < t->n_rep && st == VKT_OK; i++)
        if ((st = vkt_optimizer_write_state(t->rep[i].opt, blob, bytes)) != VKT_OK)
            trainer_fail(t, st, "checkpoint '%s': %s", path, vkt_context_errmsg(t->rep[i].ctx));
    return st;
}

static vkt_status replicas_set_optimizer(vkt_trainer *t, const vkt_optimizer_options *o)
{
    vkt_status fst = apply_flush(t); /* a pending update keeps its own step's options */
    if (fst != VKT_OK)
        return fst;
    for (uint32_t i = 0; i < t->n_rep; i++) {
        vkt_optimizer_options oo = apply_options(t, o, &t->rep[i]);
        vkt_status st = vkt_optimizer_set_options(t->rep[i].opt, &oo);
        if (st != VKT_OK)
            return trainer_fail(t, st, "%s", vkt_context_errmsg(t->rep[i].ctx));
    }
    return VKT_OK;
}

static uint64_t replicas_dropout_step(const vkt_trainer *t)
{
    return vkt_model_step_index(t->rep[0].model);
}

static void replicas_set_position(vkt_trainer *t, uint64_t step, uint64_t dropout_step)
{
    apply_flush(t); /* a restore wrote the parameters (flushed there): nothing pending */
    for (uint32_t i = 0; i < t->n_rep; i++) {
        vkt_model_set_step_index(t->rep[i].model, dropout_step);
        vkt_optimizer_set_step(t->rep[i].opt, step);
    }
}

static vkt_status replicas_input_row_bytes(vkt_trainer *t, const vkt_tensor *input,
                                           uint64_t *out)
{
    return trainer_row_bytes(t->errmsg, t->rep[0].model, input, out);
}

/* Evaluation models live on replica 0, sharing its parameters. */
static void replicas_eval_place(vkt_trainer *t, vkt_context **ctx, vkt_model **share)
{
    *ctx = t->rep[0].ctx;
    *share = t->rep[0].model;
}

const exec_ops exec_replicas_ops = {
    .name = "replicas",
    .create = replicas_create,
    .record = replicas_record,
    .destroy = replicas_destroy,
    .copies = replicas_copies,
    .holder = replicas_holder,
    .feed = replicas_feed,
    .step = replicas_step,
    .flat_nodes = replicas_flat_nodes,
    .param_offset = replicas_param_offset,
    .read_flat = replicas_read_flat,
    .write_flat = replicas_write_flat,
    .read_param = replicas_read_param,
    .opt_size = replicas_opt_size,
    .read_opt = replicas_read_opt,
    .write_opt = replicas_write_opt,
    .set_optimizer = replicas_set_optimizer,
    .dropout_step = replicas_dropout_step,
    .set_position = replicas_set_position,
    .input_row_bytes = replicas_input_row_bytes,
    .eval_place = replicas_eval_place,
    .eval_load = NULL,
    .flush = apply_flush,
    .predict = NULL,
    .stage_stats = NULL,
};
