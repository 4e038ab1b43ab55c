/* run.c - recording a model's streams once (the training step: inputs in, forward,
 * loss, backward, epilogue hooks such as the optimizer; the evaluation forward; the
 * training forward alone; the training step's two halves) and replaying them. The step
 * counter that seeds dropout lives in the host-visible control block, so replays need no
 * re-recording. Barriers come from the stream: only where a
 * command touches memory an earlier one wrote, so independent branches get none. */
#include "graph/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* For every parameter with a gradient, the last training step that writes it (-1: no
 * step does; its gradient stays zero). */
static vkt_status grad_last_writers(vkt_model *m, int32_t *last)
{
    enum { CAP = GRAPH_MAX_INPUTS * 2 + 16 };
    int32_t vals[CAP];
    int writes[CAP], phases[CAP];
    for (uint32_t i = 0; i < m->n; i++)
        last[i] = -1;
    for (uint32_t st = 0; st < m->n_steps; st++) {
        uint32_t n = model_step_access(m, &m->steps[st], vals, writes, phases, CAP, NULL);
        for (uint32_t a = 0; a < n; a++) {
            if (!writes[a])
                continue;
            int32_t root = model_root(m, vals[a]);
            if (m->val[root].space != MS_GRADS)
                continue;
            for (uint32_t p = 0; p < m->n; p++) /* the parameter owning this gradient */
                if (m->node[p].grad >= 0 && model_root(m, m->node[p].grad) == root)
                    last[p] = (int32_t)st;
        }
    }
    return VKT_OK;
}

static vkt_status grad_ready_at(vkt_model *m, vkt_stream *s, const int32_t *last, int32_t pos)
{
    vkt_status st = VKT_OK;
    for (uint32_t p = 0; p < m->n && st == VKT_OK; p++) {
        if (m->g->nodes[p]->op != GOP_PARAM || m->node[p].grad < 0 || last[p] != pos)
            continue;
        const mval *v = &m->val[model_root(m, m->node[p].grad)];
        st = m->grad_ready(s, m->grad_ready_user, v->offset, v->count);
    }
    return st;
}

/* Check mode and parameters no step writes: the hook for every parameter at once. */
static vkt_status grad_ready_all(vkt_model *m, vkt_stream *s, const int32_t *last, int only_unwritten)
{
    vkt_status st = VKT_OK;
    for (uint32_t p = 0; p < m->n && st == VKT_OK; p++) {
        if (m->g->nodes[p]->op != GOP_PARAM || m->node[p].grad < 0 ||
            (only_unwritten && last[p] >= 0))
            continue;
        const mval *v = &m->val[model_root(m, m->node[p].grad)];
        st = m->grad_ready(s, m->grad_ready_user, v->offset, v->count);
    }
    return st;
}

/* Check mode: copies the arena values step w wrote into the snapshot buffer. */
static vkt_status snapshot(vkt_model *m, vkt_stream *s, const plan_watch *w)
{
    for (uint32_t k = 0; k < w->n; k++) {
        int32_t v = model_root(m, w->vals[k]);
        const mval *r = &m->val[v];
        if (!w->writes[k] || r->space != MS_ARENA)
            continue;
        vkt_status st = vkt_stream_copy(s, m->arena, r->offset * 4, m->snap,
                                        m->snap_off[v] * 4, r->count * 4);
        if (st != VKT_OK)
            return model_ctx_fail(m, st);
    }
    return VKT_OK;
}

/* The kept values (values: after a run of the forward) and the input gradients (training:
 * after a run of the backward) into the host-visible readback buffer, at the end of the
 * run's own submission (model.h). */
static vkt_status record_readback(vkt_model *m, vkt_stream *s, int values, int training)
{
    vkt_status st = VKT_OK;
    for (uint32_t i = 0; m->readback && i < m->n && st == VKT_OK; i++) {
        if (values && m->rb_val[i] != UINT64_MAX) {
            vkt_view v = model_view(m, m->node[i].val);
            st = vkt_stream_copy(s, v.buffer, v.offset * 4, m->readback, m->rb_val[i] * 4,
                                 m->count[i] * 4);
        }
        if (st == VKT_OK && training && m->rb_grad[i] != UINT64_MAX) {
            vkt_view g = model_view(m, m->node[i].grad);
            st = vkt_stream_copy(s, g.buffer, g.offset * 4, m->readback, m->rb_grad[i] * 4,
                                 m->count[i] * 4);
        }
    }
    return st;
}

/* What a model runs: its recorded streams, one row each. */
typedef enum model_pass { PASS_TRAIN, PASS_EVAL, PASS_TRAIN_FWD, PASS_FWD_HALF, PASS_BWD_HALF }
    model_pass;
static const struct pass_def {
    int fwd;      /* records the forward steps, in model_record_forward's mode `forward` */
    int forward;
    int backward; /* records the backward steps, the gradient hooks and the epilogue */
    int zero;     /* the pending zeroing of the gradients goes in ahead of it */
    int loss;     /* the loss is copied into the control block (loss_staged) */
    int check;    /* check mode's parts (model_check) */
} passes[] = {
    [PASS_TRAIN] = {1, 1, 1, 1, 1, MODEL_CHECK_FWD | MODEL_CHECK_BWD},
    [PASS_EVAL] = {1, 0, 0, 0, 1, MODEL_CHECK_FWD},
    /* A pipeline stage's forward that sends its values on: training values (dropout
     * drawn, batch norm from the batch), with the states untouched since the backward's
     * recomputation (a PASS_TRAIN) moves them: once per micro-batch. */
    [PASS_TRAIN_FWD] = {1, MODEL_FWD_TRAIN_KEEP_STATE, 0, 0, 1, MODEL_CHECK_FWD},
    /* The training step cut between its forward and backward steps (graph_model_step_
     * forward and _backward): the same commands as PASS_TRAIN, in two submissions. */
    [PASS_FWD_HALF] = {1, 1, 0, 1, 1, MODEL_CHECK_FWD},
    [PASS_BWD_HALF] = {0, 0, 1, 0, 0, MODEL_CHECK_BWD},
};

static vkt_stream **pass_stream(vkt_model *m, model_pass pass)
{
    switch (pass) {
    case PASS_TRAIN: return &m->train;
    case PASS_EVAL: return &m->eval;
    case PASS_TRAIN_FWD: return &m->train_fwd;
    default: return &m->half[pass - PASS_FWD_HALF];
    }
}

static int *pass_recorded(vkt_model *m, model_pass pass)
{
    switch (pass) {
    case PASS_TRAIN: return &m->train_recorded;
    case PASS_EVAL: return &m->eval_recorded;
    case PASS_TRAIN_FWD: return &m->train_fwd_recorded;
    default: return &m->half_recorded[pass - PASS_FWD_HALF];
    }
}

/* The model whose gradient buffer m uses (a slot's owner: GRAPH_MODEL_SHARE_GRADS): its
 * zero_pending is the one of every model sharing the buffer. */
static vkt_model *grad_home(vkt_model *m)
{
    return m->grad_owner ? m->grad_owner : m;
}

vkt_status model_record_staged_inputs(vkt_model *m, vkt_stream *s)
{
    if (!m->dev_fed)
        return vkt_stream_copy(s, m->staging, 0, m->inputs, 0, m->inputs->size);
    vkt_status st = VKT_OK;
    for (uint32_t i = 0; i < m->n && st == VKT_OK; i++) {
        const vkt_tensor *t = m->g->nodes[i];
        if ((t->op != GOP_INPUT && t->op != GOP_LABELS) || m->node[i].val < 0 || m->dev_fed[i])
            continue;
        const mval *v = &m->val[m->node[i].val];
        st = vkt_stream_copy(s, m->staging, v->offset * 4, m->inputs, v->offset * 4,
                             v->count * 4);
    }
    return st;
}

/* Every recorded pass recorded again at its next run (what it records has changed). */
static vkt_status forget_recordings(vkt_model *m)
{
    vkt_status st = graph_model_settle(m);
    for (int p = PASS_TRAIN; p <= PASS_BWD_HALF && st == VKT_OK; p++) {
        int *done = pass_recorded(m, (model_pass)p);
        vkt_stream *s = *pass_stream(m, (model_pass)p);
        if (*done && s)
            st = vkt_stream_reset(s);
        *done = 0;
    }
    return st == VKT_OK ? VKT_OK : model_ctx_fail(m, st);
}

vkt_status graph_model_device_io(vkt_model *m, const vkt_tensor *const *in, uint32_t n_in,
                                 const vkt_tensor *const *out, uint32_t n_out)
{
    static const char fn[] = "graph_model_device_io";
    for (uint32_t j = 0; j < n_in + n_out; j++) {
        const vkt_tensor *t = j < n_in ? in[j] : out[j - n_in];
        if (!t || t->graph != m->g || t->id >= m->n ||
            (j < n_in && t->op != GOP_INPUT && t->op != GOP_LABELS))
            return model_fail(m, VKT_ERROR_INVALID_ARGUMENT, "%s: %s is not %s of this model",
                              fn, t ? t->name : "NULL", j < n_in ? "an input" : "a tensor");
    }
    if (n_in && !m->dev_fed && !(m->dev_fed = calloc(m->n, 1)))
        return model_fail(m, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    for (uint32_t j = 0; j < n_in; j++)
        m->dev_fed[in[j]->id] = 1;
    for (uint32_t j = 0; j < n_out && m->readback; j++) /* nobody reads them back */
        m->rb_val[out[j]->id] = m->rb_grad[out[j]->id] = UINT64_MAX;
    return forget_recordings(m);
}

static vkt_status record(vkt_model *m, vkt_stream *s, model_pass pass)
{
    vkt_status st = VKT_OK;
    const struct pass_def *d = &passes[pass];
    int training = d->backward;
    m->errmsg[0] = 0;
    if (m->inputs_staged)
        st = model_record_staged_inputs(m, s);
    uint32_t from = d->fwd ? 0 : m->n_fwd_steps, to = training ? m->n_steps : m->n_fwd_steps;
    int32_t *last = NULL;
    int ready = training && m->grad_ready && !m->check;
    if (ready && !(last = malloc(m->n * sizeof *last)))
        st = model_fail(m, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    if (ready && st == VKT_OK)
        st = grad_last_writers(m, last);
    for (uint32_t i = from; i < to && st == VKT_OK; i++) {
        const mstep *step = &m->steps[i];
        plan_watch w;
        plan_watch_begin(&w, m, s, i);
        st = step->backward ? model_record_backward(m, s, step->node)
                            : model_record_forward(m, s, step->node, d->forward);
        vkt_status plan_st = plan_watch_end(&w, s);
        if (st == VKT_OK)
            st = plan_st;
        if (st == VKT_OK && !step->backward && (int32_t)step->node == m->corrupt_node)
            st = vkt_fill(s, model_view(m, m->node[step->node].val), 1, 1234.5f);
        if (st == VKT_OK && m->check)
            st = snapshot(m, s, &w);
        if (step->backward && ready && st == VKT_OK)
            st = grad_ready_at(m, s, last, (int32_t)i);
    }
    if (ready && st == VKT_OK)
        st = grad_ready_all(m, s, last, 1);
    free(last);
    /* Check mode runs the epilogue (an optimizer changing parameters) after the check,
     * from its own stream, so the check sees the parameters the step used. */
    for (uint32_t h = 0; training && !m->check && h < m->n_hooks && st == VKT_OK; h++)
        st = m->hooks[h].fn(s, m->hooks[h].user);
    if (st == VKT_OK && d->loss && m->loss && m->loss_staged) {
        vkt_view l = model_view(m, m->node[m->loss->id].val);
        st = vkt_stream_copy(s, l.buffer, l.offset * 4, m->ctrl, CTRL_LOSS * 4, 4);
    }
    if (st == VKT_OK)
        st = record_readback(m, s, d->fwd, training);
    if (st != VKT_OK) {
        if (!m->errmsg[0]) /* a kernel's message, kept by the context */
            model_ctx_fail(m, st);
        vkt_stream_reset(s);
        return st;
    }
    if (pass != PASS_TRAIN && pass != PASS_EVAL)
        return VKT_OK; /* vkt_model_stats reports the step and the evaluation forward */
    return vkt_stream_stats_get(s, training ? &m->train_stats : &m->eval_stats);
}

static vkt_status ensure_recorded(vkt_model *m, model_pass pass)
{
    int *done = pass_recorded(m, pass);
    if (*done)
        return VKT_OK;
    vkt_stream **s = pass_stream(m, pass);
    vkt_status st = *s ? VKT_OK : vkt_stream_create(m->ctx, NULL, s);
    if (st != VKT_OK)
        return model_ctx_fail(m, st);
    st = record(m, *s, pass);
    if (st == VKT_OK)
        *done = 1;
    return st;
}

void graph_ctrl_image(uint64_t step, uint32_t row, uint32_t out[GRAPH_CTRL_WORDS])
{
    _Static_assert(CTRL_ELEMS <= GRAPH_CTRL_WORDS, "GRAPH_CTRL_WORDS holds the block");
    memset(out, 0, GRAPH_CTRL_WORDS * sizeof *out);
    out[CTRL_STEP] = (uint32_t)step;
    out[CTRL_STEP + 1] = (uint32_t)(step >> 32);
    out[CTRL_ROW0] = row;
}

vkt_status graph_model_record_ctrl(vkt_model *m, vkt_stream *x, vkt_buffer *image,
                                   uint64_t offset)
{
    vkt_status st = vkt_stream_copy(x, image, offset + CTRL_STEP * 4, m->ctrl, CTRL_STEP * 4, 8);
    if (st == VKT_OK)
        st = vkt_stream_copy(x, image, offset + CTRL_ROW0 * 4, m->ctrl, CTRL_ROW0 * 4, 4);
    return st == VKT_OK ? VKT_OK : model_ctx_fail(m, st);
}

void model_write_ctrl(vkt_model *m)
{
    uint32_t *ctrl = m->ctrl->mapped;
    ctrl[CTRL_STEP] = (uint32_t)m->step;
    ctrl[CTRL_STEP + 1] = (uint32_t)(m->step >> 32);
    ctrl[CTRL_ROW0] = m->row_offset;
}

/* Check mode: the epilogue hooks in a stream of their own, recorded once. */
static vkt_status run_hooks(vkt_model *m)
{
    vkt_status st = VKT_OK;
    if (!m->hooks_stream) {
        st = vkt_stream_create(m->ctx, NULL, &m->hooks_stream);
        if (st == VKT_OK && m->grad_ready)
            st = grad_ready_all(m, m->hooks_stream, NULL, 0);
        for (uint32_t h = 0; h < m->n_hooks && st == VKT_OK; h++)
            st = m->hooks[h].fn(m->hooks_stream, m->hooks[h].user);
    }
    if (st == VKT_OK)
        st = vkt_stream_run(m->hooks_stream);
    return st == VKT_OK ? VKT_OK : model_ctx_fail(m, st);
}

void graph_model_zero_grads(vkt_model *m)
{
    if (m && m->training)
        grad_home(m)->zero_pending = 1;
}

/* The stream that zeroes the gradient buffer (graph_model_zero_grads), recorded once and
 * submitted ahead of a training step (ending with the barrier gpu_stream_submit_after
 * asks of it); NULL when no zeroing is pending. */
static vkt_status zero_before(vkt_model *m, vkt_stream **out)
{
    *out = NULL;
    if (!grad_home(m)->zero_pending)
        return VKT_OK;
    vkt_status st = VKT_OK;
    if (!m->zero) {
        st = vkt_stream_create(m->ctx, NULL, &m->zero);
        if (st == VKT_OK)
            st = gpu_stream_fill_zero(m->zero, m->grads, 0, m->grads->size);
        if (st == VKT_OK)
            st = gpu_stream_barrier_all(m->zero);
        if (st != VKT_OK) {
            vkt_stream_destroy(m->zero);
            m->zero = NULL;
            return model_ctx_fail(m, st);
        }
    }
    *out = m->zero;
    return VKT_OK;
}

/* Check mode of an accumulating model: the zeroing on its own, then the gradients before
 * the run into check_prior (what the backward adds to: check.c adds it to the
 * reference). */
static vkt_status check_prior(vkt_model *m, vkt_stream *zero)
{
    vkt_status st = zero ? vkt_stream_run(zero) : VKT_OK;
    if (st == VKT_OK && !m->check_prior && !(m->check_prior = malloc(m->grads->size)))
        return model_fail(m, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    if (st == VKT_OK)
        st = vkt_buffer_read(m->grads, 0, m->check_prior, m->grads->size);
    return st == VKT_OK ? VKT_OK : model_ctx_fail(m, st);
}

int graph_model_checks(const vkt_model *m) { return m && m->check; }

int graph_model_in_flight(const vkt_model *m) { return m && m->inflight; }

vkt_status graph_model_settle(vkt_model *m)
{
    if (!m || !m->inflight)
        return VKT_OK;
    vkt_stream *s = m->inflight;
    m->inflight = NULL;
    vkt_status st = vkt_stream_wait(s);
    return st == VKT_OK ? VKT_OK : model_ctx_fail(m, st);
}

void graph_model_run_ahead(vkt_model *m, vkt_stream *x)
{
    if (m)
        m->ahead = x;
}

vkt_stream *graph_model_ahead(const vkt_model *m) { return m ? m->ahead : NULL; }

void graph_model_run_with(vkt_model *m, const graph_run_with *w)
{
    if (!m)
        return;
    m->has_with = w != NULL;
    if (w)
        m->with = *w;
}

/* The submission of stream s: the pending zeroing (NULL: none), the companions before,
 * s, those after (graph_model_run_with; NULL: none), under their sync; then submitted().
 * On a failure the model's message says why. */
static vkt_status submit_with(vkt_model *m, vkt_stream *s, vkt_stream *zero,
                              const graph_run_with *w)
{
    static const graph_run_with none = {0};
    if (!w)
        w = &none;
    vkt_stream *before[GPU_MAX_CARRIED] = {0};
    uint32_t n = 0;
    if (m->ahead) /* graph_model_run_ahead: it may read what the zeroing clears */
        before[n++] = m->ahead;
    if (zero)
        before[n++] = zero;
    if (n + w->n_before + w->n_after > GPU_MAX_CARRIED)
        return model_fail(m, VKT_ERROR_INTERNAL, "a submission with %u streams before and %u "
                          "after (at most %d with the zeroing and the stream ahead)",
                          w->n_before, w->n_after,
                          GPU_MAX_CARRIED);
    for (uint32_t i = 0; i < w->n_before; i++)
        before[n++] = w->before[i];
    vkt_status st = gpu_stream_submit_ext(s, before, n, w->after, w->n_after, w->sync);
    if (st != VKT_OK)
        return model_ctx_fail(m, st);
    m->ahead = NULL;
    if (w->submitted)
        w->submitted(w->user);
    return VKT_OK;
}

static vkt_status run(vkt_model *m, model_pass pass)
{
    m->half_pending = 0; /* any run ends a step cut in halves (PASS_FWD_HALF sets it) */
    graph_run_with with = m->with;
    const graph_run_with *w = m->has_with ? &with : NULL;
    m->has_with = 0;
    if (w && m->check)
        return model_fail(m, VKT_ERROR_STATE, "a run with streams or an order of its own in "
                          "check mode (which runs a step's parts on their own)");
    /* the run before it, if not waited for: unless the host writes nothing (ctrl_by_copy) */
    vkt_status st = w && w->ctrl_by_copy ? VKT_OK : graph_model_settle(m);
    if (st != VKT_OK)
        return st;
    st = ensure_recorded(m, pass);
    if (st == VKT_OK && m->ahead && m->check) { /* check mode: on its own, first */
        st = vkt_stream_run(m->ahead);
        if (st != VKT_OK)
            return model_ctx_fail(m, st);
        m->ahead = NULL;
    }
    const struct pass_def *d = &passes[pass];
    int training = d->backward;
    vkt_stream *zero = NULL;
    if (st == VKT_OK && d->zero)
        st = zero_before(m, &zero);
    if (st == VKT_OK && training && m->check && m->accumulate) {
        st = check_prior(m, zero);
        zero = NULL;
    }
    if (st != VKT_OK)
        return st;
    if (!(w && w->ctrl_by_copy))
        model_write_ctrl(m);
    vkt_stream *s = *pass_stream(m, pass);
    st = submit_with(m, s, zero, w);
    if (st != VKT_OK)
        return st; /* its message is the model's */
    if (w && w->no_wait) { /* waited for by graph_model_settle */
        m->inflight = s;
        if (d->zero)
            grad_home(m)->zero_pending = 0;
        return VKT_OK;
    }
    if ((st = vkt_stream_wait(s)) != VKT_OK)
        return model_ctx_fail(m, st);
    if (d->zero)
        grad_home(m)->zero_pending = 0;
    if (m->check)
        st = model_check(m, d->fwd ? d->forward != 0 : 1, d->check);
    if (st == VKT_OK && m->check && training && (m->n_hooks || m->grad_ready))
        st = run_hooks(m);
    return st;
}

vkt_status graph_model_step_submit_after(vkt_model *m, vkt_stream *const *before, uint32_t n)
{
    return graph_model_step_submit_ext(m, before, n, NULL, 0, NULL);
}

vkt_status graph_model_step_submit_ext(vkt_model *m, vkt_stream *const *before, uint32_t n,
                                       vkt_stream *const *after, uint32_t n_after,
                                       const struct gpu_submit_sync *sync)
{
    if ((m->check || !m->training) && (n_after || sync))
        return model_fail(m, VKT_ERROR_INTERNAL, "graph_model_step_submit_ext: streams after "
                          "the step or an ordered submission in check mode");
    if (m->check || !m->training) { /* the check runs the whole step at once */
        for (uint32_t i = 0; i < n; i++) {
            vkt_status st = before[i] ? vkt_stream_run(before[i]) : VKT_OK;
            if (st != VKT_OK)
                return model_ctx_fail(m, st);
        }
        return vkt_model_forward_backward(m);
    }
    vkt_status st = ensure_recorded(m, PASS_TRAIN);
    vkt_stream *zero = NULL;
    if (st == VKT_OK)
        st = zero_before(m, &zero);
    if (st != VKT_OK)
        return st;
    model_write_ctrl(m);
    m->step++;
    m->half_pending = 0;
    graph_run_with w = {.before = before, .n_before = n, .after = after, .n_after = n_after,
                        .sync = sync};
    st = submit_with(m, m->train, zero, &w); /* the zeroing first, in the same submission */
    if (st == VKT_OK)
        grad_home(m)->zero_pending = 0;
    return st;
}

vkt_status graph_model_step_submit(vkt_model *m) { return graph_model_step_submit_after(m, NULL, 0); }

vkt_status graph_model_step_wait(vkt_model *m)
{
    vkt_status st = vkt_stream_wait(m->train);
    return st == VKT_OK ? VKT_OK : model_ctx_fail(m, st);
}

int graph_model_mark_passed(vkt_model *m, uint32_t index)
{
    int r = gpu_stream_mark_passed(m->train, index);
    if (r < 0)
        model_ctx_fail(m, VKT_ERROR_VULKAN);
    return r;
}

vkt_status vkt_model_forward_backward(vkt_model *m)
{
    if (!m)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "vkt_model_forward_backward: model "
                        "is NULL");
    if (!m->training)
        return model_fail(m, VKT_ERROR_STATE, "vkt_model_forward_backward: the model is "
                          "forward-only (no loss, or options.forward_only)");
    vkt_status st = run(m, PASS_TRAIN);
    m->step++;
    return st;
}

vkt_status vkt_model_forward(vkt_model *m)
{
    if (!m)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "vkt_model_forward: model is NULL");
    return run(m, PASS_EVAL);
}

vkt_status graph_model_forward_train(vkt_model *m)
{
    if (!m)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "graph_model_forward_train: NULL");
    if (!m->training)
        return model_fail(m, VKT_ERROR_STATE, "graph_model_forward_train: the model is "
                          "forward-only");
    return run(m, PASS_TRAIN_FWD);
}

vkt_status graph_model_step_forward(vkt_model *m)
{
    if (!m)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "graph_model_step_forward: NULL");
    if (!m->training)
        return model_fail(m, VKT_ERROR_STATE, "graph_model_step_forward: the model is "
                          "forward-only");
    vkt_status st = run(m, PASS_FWD_HALF);
    m->half_pending = st == VKT_OK;
    return st;
}

vkt_status graph_model_step_backward(vkt_model *m)
{
    if (!m)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "graph_model_step_backward: NULL");
    if (!m->half_pending)
        return model_fail(m, VKT_ERROR_STATE, "graph_model_step_backward: no forward half "
                          "to continue (graph_model_step_forward, with no other run of the "
                          "model since)");
    vkt_status st = run(m, PASS_BWD_HALF);
    m->step++;
    return st;
}

void graph_model_set_row_offset(vkt_model *m, uint32_t row)
{
    if (m)
        m->row_offset = row;
}

uint64_t vkt_model_step_index(const vkt_model *m) { return m ? m->step : 0; }

void vkt_model_set_step_index(vkt_model *m, uint64_t step)
{
    if (m)
        m->step = step;
}

vkt_status vkt_model_stats_get(vkt_model *m, vkt_model_stats *out)
{
    if (!m || !out)
        return err_fail(m ? m->errmsg : NULL, VKT_ERROR_INVALID_ARGUMENT,
                        "vkt_model_stats_get: NULL argument");
    memset(out, 0, sizeof *out);
    vkt_status st = m->training ? ensure_recorded(m, PASS_TRAIN) : VKT_OK;
    if (st == VKT_OK)
        st = ensure_recorded(m, PASS_EVAL);
    if (st != VKT_OK)
        return st;
    out->param_count = m->param_elems;
    out->param_bytes = m->param_elems * 4;
    out->grad_bytes = m->training ? m->param_elems * 4 : 0;
    out->activation_bytes = m->arena_elems * 4;
    out->activation_no_reuse_bytes = m->no_reuse_elems * 4;
    out->values = m->arena_values;
    out->step_dispatches = m->train_stats.dispatches;
    out->step_copies = m->train_stats.copies;
    out->step_barriers = m->train_stats.barriers;
    out->forward_dispatches = m->eval_stats.dispatches;
    out->forward_barriers = m->eval_stats.barriers;
    return VKT_OK;
}

vkt_status graph_model_flat(vkt_model *m, vkt_view *params, vkt_view *grads, uint64_t *count)
{
    if (!m || !params || !grads || !count)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "graph_model_flat: NULL argument");
    *params = (vkt_view){m->params, 0};
    *grads = (vkt_view){m->grads, 0};
    *count = m->train_elems; /* states (vkt_state) follow, untouched by optimizers */
    return VKT_OK;
}

vkt_status graph_model_add_epilogue(vkt_model *m, graph_record_fn fn, void *user)
{
    if (!m || !fn)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "graph_model_add_epilogue: NULL");
    if (m->train_recorded || m->half_recorded[1])
        return model_fail(m, VKT_ERROR_STATE, "graph_model_add_epilogue: the training step is "
                          "already recorded (add epilogues before the first step)");
    if (m->n_hooks == MODEL_MAX_HOOKS)
        return model_fail(m, VKT_ERROR_LIMIT, "graph_model_add_epilogue: at most %d",
                          MODEL_MAX_HOOKS);
    m->hooks[m->n_hooks++] = (model_hook){fn, user};
    return VKT_OK;
}

vkt_status graph_model_train_stream(vkt_model *m, vkt_stream **out)
{
    if (!m || !out)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "graph_model_train_stream: NULL");
    *out = NULL;
    if (!m->training)
        return model_fail(m, VKT_ERROR_STATE, "graph_model_train_stream: forward-only model");
    vkt_status st = ensure_recorded(m, PASS_TRAIN);
    if (st == VKT_OK)
        *out = m->train;
    return st;
}

vkt_status graph_model_debug_corrupt(vkt_model *m, const vkt_tensor *t)
{
    if (!m || !t || t->graph != m->g || t->id >= m->n || m->node[t->id].fpos < 0)
        return err_fail(m ? m->errmsg : NULL, VKT_ERROR_INVALID_ARGUMENT,
                        "graph_model_debug_corrupt: not a computed tensor of this model");
    if (m->train_recorded || m->eval_recorded || m->train_fwd_recorded || m->half_recorded[0] ||
        m->half_recorded[1])
        return model_fail(m, VKT_ERROR_STATE, "graph_model_debug_corrupt: already recorded");
    m->corrupt_node = (int32_t)t->id;
    return VKT_OK;
}

vkt_status graph_model_debug_drop_access(vkt_model *m, const vkt_tensor *t)
{
    if (!m || !t || t->graph != m->g || t->id >= m->n)
        return err_fail(m ? m->errmsg : NULL, VKT_ERROR_INVALID_ARGUMENT,
                        "graph_model_debug_drop_access: not a tensor of this model");
    if (m->train_recorded || m->eval_recorded || m->train_fwd_recorded || m->half_recorded[0] ||
        m->half_recorded[1])
        return model_fail(m, VKT_ERROR_STATE, "graph_model_debug_drop_access: already recorded");
    m->debug_drop_access = (int32_t)t->id;
    return VKT_OK;
}

vkt_status graph_model_on_grad_ready(vkt_model *m, graph_grad_fn fn, void *user)
{
    if (!m || !fn)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "graph_model_on_grad_ready: NULL");
    if (m->train_recorded || m->half_recorded[1])
        return model_fail(m, VKT_ERROR_STATE, "graph_model_on_grad_ready: the training step "
                          "is already recorded");
    m->grad_ready = fn;
    m->grad_ready_user = user;
    return VKT_OK;
}
