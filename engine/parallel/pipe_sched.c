/* pipe_sched.c - one step of the pipeline engine (pipe_engine.h).
 *
 * Schedule: one-forward-one-backward (1F1B). Stage s (of P) runs
 *     F(0) .. F(w-1), then F(k) B(k-w) for k = w..m-1, then B(m-w) .. B(m-1),
 * w = min(P-1-s, m). Its bubble is GPipe's, (P-1)/(m+P-1) of the step with equal
 * stages, but a stage never holds more than K = min(P-s, m) micro-batches in flight
 * instead of m: the host copies of its received values (pipe_edge.c) and, where it keeps
 * them, their activations. One failure stops all P x D threads.
 *
 * A sending stage runs F(k) and B(k) by its row of `keeps` (pipe_engine.h's pipe_keep):
 * keep: micro-batch k on slot k mod K (B(k-K) ran before F(k): the order above), F the
 * step's forward half, B its backward half; recompute: F a training forward that only
 * sends (graph_model_forward_train), B the whole step, recomputing it. Every run of
 * micro-batch k draws dropout with the step's index and the micro-batch's global rows
 * (the control block's step and row base), the masks of one model over the whole batch;
 * batch norm normalizes by the micro-batch's statistics, and its running averages move
 * once per micro-batch (keep: in F; recompute: in B), as a one-stage pipeline with the
 * same micro-batches does.
 *
 * The last stage's F(k) is its whole step (forward, loss, backward). Each stage's model
 * adds the gradients of its micro-batches into its gradient buffer (fp32 on the device,
 * in micro-batch order; zeroed in the submission of the step's first run that computes
 * gradients: the last stage's or a recomputing stage's first B, a keeping stage's first
 * F). The route (pipe_engine.h's pipe_route, one row of `routes` below, picked by
 * pipe_route_pick) says what happens to that sum. direct (D = 1, no world, no guard,
 * scale 1, no clipping): nothing; after the barrier each context's optimizer, whose
 * grad_scale carries the 1/m, is due (pstage.apply_due): it goes ahead of the stage's next
 * run, in that run's submission (run_model; the route's `ahead`), or pipe_flush runs it
 * before anything outside a step reads or writes the stage. host: after its last backward
 * the stage reads the sum back once, weighted by 1 / (m D) in double; after every context
 * passed the barrier with no failure, each writes the sum over the copies of its stage
 * (double, copy order) into its host-visible hsum, and its update (hsum copied into the
 * gradient buffer, then the optimizer: `apply`) is due as the direct route's. Both
 * routes: every context updates or none does. Guarded (fp16's loss scaling,
 * nonfinite_skips; the host route): each context judges its sum at the barrier, and a
 * non-finite value anywhere (or squares past fp32's range, as one model's guarded
 * optimizer judges) skips every update; else the sum is divided by the scale. Clipping
 * (clip_norm > 0; the host route): the stages' squares meet once more (update) and every
 * stage scales by the factor of their global norm.
 * Async copies (async, async host: pipe_async.c): the same with each copy alone, its own
 * sum weighted 1 / D, the contexts of a copy meeting without the other copies (per_copy);
 * the route's begin seeds each stage's master, push follows each optimizer, end pulls. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "parallel/pipe_engine.h"

/* The stage's inputs for micro-batch k, into its slot: fed rows, received values, and its
 * dropout keys (the step, the global row of its first row). */
static vkt_status set_inputs(pstage *s, uint32_t k)
{
    vkt_pipeline *p = s->p;
    const graph_stage *gs = s->gs;
    if (p->edges->feeds_on_device) /* all of it copied in by the run (pipe_edges.begin) */
        return p->edges->recv_values(s, k);
    vkt_model *m = pipe_slot(s, k);
    uint64_t row = s->row0 + (uint64_t)k * p->mb; /* the micro-batch's first global row */
    vkt_model_set_step_index(m, p->step);
    graph_model_set_row_offset(m, (uint32_t)row);
    for (uint32_t j = 0; j < gs->n_feed; j++) {
        uint64_t n = s->feed_row[j] * p->mb;
        const char *data = (const char *)s->feed_data[j] + row * s->feed_row[j] * 4; /* 4-byte elements */
        if (vkt_model_set_input(m, gs->map[gs->feed[j]], data, n) != VKT_OK)
            return pipe_model_fail(s, VKT_ERROR_INVALID_ARGUMENT, "input");
    }
    return s->p->edges->recv_values(s, k);
}

/* Waits for model x of s (a run the device row submitted without waiting), counted in s's
 * busy time: before the host writes its inputs, reads what it computed or runs it again. */
static vkt_status settle(pstage *s, vkt_model *x)
{
    if (!graph_model_in_flight(x))
        return VKT_OK;
    double t0 = plat_now();
    vkt_status st = graph_model_settle(x);
    s->busy += plat_now() - t0;
    s->cur = x;
    if (st != VKT_OK)
        return pipe_model_fail(s, st, "a run");
    for (uint32_t j = 0; j < s->n_slots; j++) /* the last stage: its micro-batch's loss */
        if (s->slot[j] == x && s->loss_due[j]) {
            uint32_t k = s->loss_due[j] - 1;
            s->loss_due[j] = 0;
            if ((st = vkt_model_loss(x, &s->losses[k])) != VKT_OK)
                return pipe_model_fail(s, st, "loss");
        }
    return VKT_OK;
}

/* Every slot of s settled (before its gradient sum is read, the step's meeting, the update). */
static vkt_status settle_all(pstage *s)
{
    vkt_status st = VKT_OK;
    for (uint32_t j = 0; j < s->n_slots; j++) {
        vkt_status r = settle(s, s->slot[j]);
        st = st == VKT_OK ? r : st;
    }
    return st;
}

/* After a backward: gradients of received values back to their senders. The parameters'
 * gradients sum over the micro-batches on the device (the stage's model accumulates:
 * GRAPH_MODEL_ACCUMULATE, zeroed by the step's first run that computes them; its slots
 * share the buffer); after the last one (backwards run in micro-batch order) the route
 * collects the sum (host: reads it back). */
static vkt_status after_backward(pstage *s, uint32_t k)
{
    vkt_pipeline *p = s->p;
    vkt_status st = p->edges->send_grads(s, k);
    if (st != VKT_OK || k + 1 < p->m)
        return st;
    if ((st = settle_all(s)) != VKT_OK) /* the last backward may still run */
        return st;
    for (uint32_t j = 0; s->index == p->P - 1 && j < p->m; j++) /* in micro-batch order */
        s->loss += (double)s->losses[j] / ((double)p->m * p->D);
    s->cur = s->model; /* the sum is slot 0's (the owner's): its message if it fails */
    return p->route->collect(s);
}

/* Runs fn on s->cur: a due update (pstage.apply_due) goes ahead of it, in its submission
 * (graph_model_run_ahead), and is no longer due once that submission went in; a run that
 * failed before it leaves the update due (pipe_flush, or the next run, takes it). */
static vkt_status run_model(pstage *s, vkt_status (*fn)(vkt_model *))
{
    if (s->apply_due)
        graph_model_run_ahead(s->cur, s->apply);
    vkt_status st = fn(s->cur);
    if (s->apply_due && graph_model_ahead(s->cur))
        graph_model_run_ahead(s->cur, NULL); /* not submitted: still due */
    else
        s->apply_due = 0;
    return st;
}

/* Runs one of the stage's models (fn) and counts its time, and its forward (forwards);
 * the run carries the edges' copies of what it sends: values, gradients (arm). */
static vkt_status timed(pstage *s, uint32_t k, int values, int grads,
                        vkt_status (*fn)(vkt_model *), const char *what)
{
    double t0 = plat_now();
    vkt_status st = s->p->edges->arm(s, k, values, grads);
    if (st == VKT_OK)
        st = run_model(s, fn);
    s->busy += plat_now() - t0;
    s->forwards++;
    return st == VKT_OK ? VKT_OK : pipe_model_fail(s, st, what);
}

/* ---- a sending stage's F(k) and B(k): pipe_engine.h's pipe_keep rows ---- */

/* keep: F is the step's forward half on micro-batch k's slot, B feeds the gradients of what
 * it sent and runs the backward half there (the slot holds k's activations meanwhile). */
static vkt_status keep_forward(pstage *s, uint32_t k)
{
    vkt_status st = set_inputs(s, k);
    return st == VKT_OK ? timed(s, k, 1, 0, graph_model_step_forward, "forward") : st;
}
static vkt_status keep_backward(pstage *s, uint32_t k)
{
    vkt_status st = s->p->edges->recv_grads(s, k);
    if (st == VKT_OK)
        st = s->p->edges->arm(s, k, 0, 1);
    if (st != VKT_OK)
        return st;
    double t0 = plat_now();
    st = run_model(s, graph_model_step_backward);
    s->busy += plat_now() - t0;
    return st == VKT_OK ? VKT_OK : pipe_model_fail(s, st, "backward");
}

/* recompute: F is the training forward alone (states untouched), B sets the inputs again
 * and runs the whole step, which recomputes the forward with the same masks and moves
 * the states once per micro-batch (the header comment). */
static vkt_status recompute_forward(pstage *s, uint32_t k)
{
    vkt_status st = set_inputs(s, k);
    return st == VKT_OK ? timed(s, k, 1, 0, graph_model_forward_train, "forward") : st;
}
static vkt_status recompute_backward(pstage *s, uint32_t k)
{
    vkt_status st = set_inputs(s, k);
    if (st == VKT_OK)
        st = s->p->edges->recv_grads(s, k);
    return st == VKT_OK ? timed(s, k, 0, 1, vkt_model_forward_backward, "forward and backward")
                        : st;
}

static const pipe_keep keeps[] = {
    {"recompute", recompute_forward, recompute_backward},
    {"keep", keep_forward, keep_backward},
};

const pipe_keep *pipe_keep_row(int keep)
{
    return &keeps[keep ? 1 : 0];
}

static vkt_status forward(pstage *s, uint32_t k)
{
    vkt_pipeline *p = s->p;
    if (!p->edges->wait_values(s, k))
        return VKT_ERROR_STATE; /* another stage failed: its message is the one */
    /* before the host writes the slot's inputs (the host row; there nothing is in flight)
     * or reads its loss (the last stage: the run of micro-batch k - 2, or k - 1) */
    vkt_status sst = p->edges->feeds_on_device && s->index + 1 < p->P ? VKT_OK
                                                                      : settle(s, pipe_slot(s, k));
    if (sst != VKT_OK)
        return sst;
    s->cur = pipe_slot(s, k);
    if (s->index != p->P - 1) {
        vkt_status st = s->keep->forward(s, k);
        return st == VKT_OK ? p->edges->send_values(s, k) : st;
    }
    /* the last stage: its whole step (on one model, or two alternating: pick_keep) */
    vkt_status st = set_inputs(s, k);
    if (st == VKT_OK)
        st = timed(s, k, 0, 1, vkt_model_forward_backward, "forward and backward");
    if (st != VKT_OK)
        return st;
    if (graph_model_in_flight(s->cur)) { /* not waited for: its loss once it is settled */
        s->loss_due[k % s->n_slots] = k + 1;
    } else if ((st = vkt_model_loss(s->cur, &s->losses[k])) != VKT_OK) {
        return pipe_model_fail(s, st, "loss");
    }
    return after_backward(s, k);
}

static vkt_status backward(pstage *s, uint32_t k)
{
    vkt_pipeline *p = s->p;
    if (s->index == p->P - 1)
        return VKT_OK; /* its forward did it */
    if (!p->edges->wait_grads(s, k))
        return VKT_ERROR_STATE;
    s->cur = pipe_slot(s, k); /* the host writes nothing into it: no wait for F(k) */
    vkt_status st = s->keep->backward(s, k);
    return st == VKT_OK ? after_backward(s, k) : st;
}

/* The gradient summed over the copies of the stage (in copy order, so every copy
 * computes the same bits) into gtmp; returns its squares' sum when clipping (0 from the
 * copies past the first, whose sums are the same). */
static double stage_gradient(pstage *s)
{
    vkt_pipeline *p = s->p;
    double unscale = 1.0 / p->scale; /* fp16: the last stages seeded the backward with it */
    double squares = 0;
    for (uint64_t i = 0; i < s->n_train; i++) {
        double g = 0;
        if (p->world) /* the tail summed the copies (pipe_world.c) */
            g = s->gacc[i];
        for (uint32_t c = 0; c < p->D && !p->world; c++)
            g += ctx_of(p, c, s->index)->gacc[i];
        s->gtmp[i] = (float)(g * unscale);
        squares += (double)s->gtmp[i] * s->gtmp[i];
    }
    for (uint64_t i = s->n_train; i < s->n_params; i++)
        s->gtmp[i] = 0.0f;
    return s->copy == 0 ? squares : 0.0;
}

/* Clipping's factor from the squares of every stage: min(1, clip / (norm + 1e-6)), the
 * optimizer's (optim_update.comp), from a norm summed in double. */
static double clip_factor(const vkt_pipeline *p, double squares)
{
    double c = p->optim.clip_norm / (sqrt(squares) + 1e-6);
    return c < 1.0 ? c : 1.0;
}

/* The contexts that meet with s: every context, or (per_copy routes) its copy's. */
static pmeet *meeting_of(const pstage *s)
{
    return &s->p->meets[s->p->route->per_copy ? s->copy : 0];
}

static int meets_with(const pstage *s, const pstage *o)
{
    return !s->p->route->per_copy || o->copy == s->copy;
}

/* Under p->mon: counts one more context at a meeting of the step's threads and waits
 * until all of its `expected` came (arrive, squares_of_all). */
static void meet(vkt_pipeline *p, const pmeet *g, uint32_t *count)
{
    (*count)++;
    plat_monitor_broadcast(p->mon);
    while (*count < g->expected)
        plat_monitor_wait(p->mon);
}

/* In-process threads: every context of s's meeting leaves its stage's squares and waits
 * for the others (all pass here or none: after arrive); returns their sum in context
 * order, so every run sums alike. */
static double squares_of_all(pstage *s, double mine)
{
    vkt_pipeline *p = s->p;
    pmeet *g = meeting_of(s);
    plat_monitor_lock(p->mon);
    s->squares = mine;
    meet(p, g, &g->clip_arrived);
    double all = 0;
    for (uint32_t i = 0; i < p->n_ctx; i++)
        all += meets_with(s, &p->st[i]) ? p->st[i].squares : 0.0;
    plat_monitor_unlock(p->mon);
    return all;
}

/* ---- the gradient's routes (pipe_engine.h's pipe_route) ---- */

/* host: the device sum read back once, weighted 1 / (m D) in double. */
static vkt_status read_sum(pstage *s)
{
    vkt_pipeline *p = s->p;
    vkt_status st = vkt_model_read_grads(s->model, s->gtmp, s->n_params);
    if (st != VKT_OK)
        return pipe_model_fail(s, st, "gradients");
    s->grad_reads++;
    double w = 1.0 / ((double)p->m * p->D); /* rows_k / batch: equal micro-batches */
    for (uint64_t i = 0; i < s->n_train; i++)
        s->gacc[i] = w * s->gtmp[i];
    return VKT_OK;
}

/* host (staged): gtmp (times the clipping factor) into the stage's host-visible hsum,
 * which its update copies into the gradient buffer in the update's own submission
 * (pipe_apply_record): no upload, no submission of its own. The update runs no earlier
 * than the next step's first run of the stage, so nothing writes hsum meanwhile. */
static vkt_status stage_sum(pstage *s, double factor)
{
    float *h = vkt_buffer_map(s->hsum);
    if (!h || s->apply_staged != 1)
        return pipe_stage_fail(s, VKT_ERROR_INTERNAL, "writing gradients",
                               "the update is not recorded for the host's sum");
    for (uint64_t i = 0; i < s->n_train; i++)
        h[i] = factor != 1.0 ? (float)(s->gtmp[i] * factor) : s->gtmp[i];
    s->grad_writes++;
    return VKT_OK;
}

/* direct: the sum stays in the model's gradient buffer, where the optimizer reads it
 * (its grad_scale carries the 1/m: pipe_stage_optim); nothing to clip (clip_norm 0). */
static vkt_status on_device(pstage *s)
{
    (void)s;
    return VKT_OK;
}
static double no_squares(pstage *s)
{
    (void)s;
    return 0.0;
}
static vkt_status in_place(pstage *s, double factor)
{
    (void)s;
    (void)factor;
    return VKT_OK;
}
/* sync: no master to seed, push into or pull from */
static vkt_status no_step_hook(vkt_pipeline *p)
{
    (void)p;
    return VKT_OK;
}
static vkt_status no_push(pstage *s)
{
    (void)s;
    return VKT_OK;
}

/* ahead: where the update may wait for the stage's next run. direct: nothing to decide
 * on the host. host (copies, ranks, fp16's guard and scale, clipping): the host decides
 * everything at the meeting (the verdict, the scale divided out, the clipping factor),
 * before `hand` writes the result into hsum; what remains is device work on device data
 * (hsum's copy, the optimizer), and whatever reads the stage outside a step flushes first
 * (pipe_flush: parameter and optimizer-state reads and writes, evaluation, prediction,
 * a change of route, across ranks the executor's sync, exec_pipe_world.c). A skipped step
 * never gets there (no `hand`, nothing due). Not ahead: the async routes, whose push
 * reads the stage's updated parameters on the host right after its optimizer (master +=
 * new - seed), and whose end writes the master into every copy's parameters within the
 * same step: a due update would miss the push and then land on the pulled parameters.
 * staged: the routes whose sum the host writes (hsum, copied in the update's submission;
 * async host and async ranks run that submission at once). */
enum { ROUTE_HOST, ROUTE_DIRECT, ROUTE_ASYNC_HOST, ROUTE_ASYNC, ROUTE_ASYNC_RANKS };
static const pipe_route routes[] = {
    [ROUTE_HOST] = {"host", read_sum, stage_gradient, stage_sum, .begin = no_step_hook,
                    .push = no_push, .end = no_step_hook, .ahead = 1, .staged = 1},
    [ROUTE_DIRECT] = {"direct", on_device, no_squares, in_place, .weight = 1,
                      .begin = no_step_hook, .push = no_push, .end = no_step_hook, .ahead = 1},
    /* async copies (pipe_async.c): read_sum weighs the copy's sum 1 / (m D) already */
    [ROUTE_ASYNC_HOST] = {"async host", read_sum, pipe_async_gather, stage_sum, .per_copy = 1,
                          .begin = pipe_async_begin, .push = pipe_async_push,
                          .end = pipe_async_end, .staged = 1},
    [ROUTE_ASYNC] = {"async", on_device, no_squares, in_place, .weight = 1, .share = 1,
                     .per_copy = 1, .begin = pipe_async_begin, .push = pipe_async_push,
                     .end = pipe_async_end},
    /* across ranks (pipe_async_world.c): each stage's master sharded over its copies */
    [ROUTE_ASYNC_RANKS] = {"async ranks", read_sum, pipe_async_gather, stage_sum,
                           .per_copy = 1, .begin = pipe_async_world_begin,
                           .push = pipe_async_world_push, .end = pipe_async_world_end,
                           .staged = 1},
};

/* Direct where nothing needs the host's sum: no copies to sum, no rank to meet, no
 * verdict on the values, no scale to divide by, no norm to clip by. Async copies sum
 * nothing over the copies: the host only for a verdict, a scale or a norm; across ranks
 * the stage's master is served by its ranks, and the copy's sum takes the host route of
 * the sync stages (the same bits: one copy trains as the sync pipeline across ranks). */
const pipe_route *pipe_route_pick(const vkt_pipeline *p)
{
    int host_needs = p->guard || p->scale != 1.0f || p->optim.clip_norm > 0;
    if (p->opt.async && p->world)
        return &routes[ROUTE_ASYNC_RANKS];
    if (p->opt.async)
        return &routes[host_needs ? ROUTE_ASYNC_HOST : ROUTE_ASYNC];
    int direct = p->D == 1 && !p->world && !host_needs;
    return &routes[direct ? ROUTE_DIRECT : ROUTE_HOST];
}

/* The stage's gradient into its model (the route's hand), then its optimizer. */
static vkt_status apply_gradient(pstage *s, double factor)
{
    vkt_pipeline *p = s->p;
    if (!s->opt)
        return VKT_OK; /* no trainable parameters */
    s->cur = s->model; /* hand and push act on the owner: its message if they fail */
    double t0 = plat_now();
    vkt_status st = p->route->hand(s, factor);
    if (st != VKT_OK)
        return st; /* its message is on the stage */
    st = vkt_optimizer_set_step(s->opt, p->step);
    if (st == VKT_OK && p->route->ahead)
        s->apply_due = 1; /* ahead of the stage's next run (run_model), or pipe_flush */
    else if (st == VKT_OK)
        st = vkt_stream_run(s->apply);
    if (st != VKT_OK) {
        s->busy += plat_now() - t0;
        return pipe_stage_fail(s, st, "optimizer", vkt_context_errmsg(s->ctx));
    }
    st = p->route->push(s); /* async: the change into the stage's master */
    s->busy += plat_now() - t0;
    return st;
}

vkt_status pipe_flush(vkt_pipeline *p)
{
    for (uint32_t i = 0; i < p->n_ctx; i++) {
        pstage *s = &p->st[i];
        if (!s->apply_due)
            continue;
        vkt_status st = vkt_stream_run(s->apply);
        if (st != VKT_OK)
            return pipe_fail(p, st, "stage %u: optimizer: %s", s->index,
                             vkt_context_errmsg(s->ctx));
        s->apply_due = 0;
    }
    return VKT_OK;
}

/* One context's update, its stage's gradient clipped by the norm over every stage (the
 * squares: across ranks in one more allreduce, pipe_world_squares; in-process at a
 * second meeting of the threads). */
static vkt_status update(pstage *s)
{
    vkt_pipeline *p = s->p;
    double squares = p->route->gather(s), factor = 1.0;
    if (p->optim.clip_norm > 0) {
        if (p->world) {
            vkt_status st = pipe_world_squares(s, &squares);
            if (st != VKT_OK)
                return st;
        } else {
            squares = squares_of_all(s, squares);
        }
        factor = clip_factor(p, squares);
    }
    return apply_gradient(s, factor);
}

/* Guarded (pipe_set_scaler): whether s's gradient of the step, once its last backward
 * summed it, has a non-finite value (then so has the sum over the copies, in double), or
 * squares whose sum passes fp32's range: the verdict of one model's guarded optimizer,
 * which sums them in fp32 (optim_update.comp), so that a stage never applies what one
 * replica would skip (Adam's second moment would hold an infinity from then on). */
static void judge(pstage *s)
{
    s->nonfinite = 0;
    double squares = 0;
    for (uint64_t i = 0; s->p->guard && s->status == VKT_OK && i < s->n_train; i++) {
        if (!isfinite(s->gacc[i])) {
            s->nonfinite = 1;
            return;
        }
        squares += s->gacc[i] * s->gacc[i];
    }
    s->nonfinite = squares > FLT_MAX;
}

/* The end of a step for the contexts of s's meeting whose threads run (its `expected`):
 * each arrives with its vote (to stop; its gradient not finite) and waits for the
 * others; returns 1 if every one of them updates: none voted to stop and every gradient
 * is finite. (Not a plat_barrier: when some threads could not start, fewer arrive.) */
static int arrive(pstage *s, int vote, int nonfinite)
{
    vkt_pipeline *p = s->p;
    pmeet *g = meeting_of(s);
    plat_monitor_lock(p->mon);
    g->votes |= vote != 0;
    g->overflow |= nonfinite != 0;
    p->overflow |= nonfinite != 0; /* any meeting skipped (pipe_skipped) */
    meet(p, g, &g->arrived);
    int go = !g->votes && !g->overflow;
    plat_monitor_unlock(p->mon);
    return go;
}

/* 1F1B order for one stage of one copy (the header comment). */
static void stage_job(void *arg)
{
    pstage *s = arg;
    vkt_pipeline *p = s->p;
    uint32_t m = p->m, P = p->P;
    plat_monitor_lock(p->mon); /* until every thread of the step has started (or not) */
    while (!p->go)
        plat_monitor_wait(p->mon);
    plat_monitor_unlock(p->mon);
    uint32_t w = P - 1 - s->index < m ? P - 1 - s->index : m;
    vkt_status st = p->world ? pipe_world_begin(s) : VKT_OK;
    for (uint32_t k = 0; k < w && st == VKT_OK; k++)
        st = forward(s, k);
    for (uint32_t k = w; k < m && st == VKT_OK; k++) {
        st = forward(s, k);
        if (st == VKT_OK)
            st = backward(s, k - w);
    }
    for (uint32_t k = m - w; k < m && st == VKT_OK; k++)
        st = backward(s, k);
    vkt_status settled = settle_all(s); /* nothing in flight past the loop, failed or not */
    st = st == VKT_OK ? settled : st;
    if (st != VKT_OK && s->status == VKT_OK)
        s->status = st; /* stopped by another stage's failure */
    judge(s);
    if (p->world) { /* across ranks: every message of the step, then the tail decides */
        pipe_world_end(s);
        if (pipe_world_tail(s))
            update(s);
        return;
    }
    /* Every context of the meeting (all; async: the copy's) updates, or none does (and
     * after arrive every gacc is final). */
    if (arrive(s, s->status != VKT_OK, s->nonfinite))
        update(s);
}

static vkt_status check_feeds(vkt_pipeline *p, const vkt_feed *feeds, uint32_t n)
{
    if (n && !feeds)
        return pipe_fail(p, VKT_ERROR_INVALID_ARGUMENT, "%s: feeds is NULL", p->opt.fn);
    for (uint32_t i = 0; i < p->n_ctx; i++) {
        pstage *s = &p->st[i];
        for (uint32_t j = 0; s->local && j < s->gs->n_feed; j++) {
            const vkt_tensor *t = graph_node_at(p->graph, s->gs->feed[j]);
            s->feed_data[j] = NULL;
            for (uint32_t f = 0; f < n; f++)
                if (feeds[f].tensor == t)
                    s->feed_data[j] = feeds[f].data;
            if (!s->feed_data[j])
                return pipe_fail(p, VKT_ERROR_INVALID_ARGUMENT, "input '%s' (read on stage %u) is "
                                 "not fed: every step needs data for it", vkt_tensor_name(t),
                                 s->index);
        }
    }
    return VKT_OK;
}

static void reset_step(vkt_pipeline *p)
{
    pipe_edges_reset(p);
    p->failed = 0;
    p->first_failed = p->n_ctx;
    p->go = 0;
    memset(p->meets, 0, p->D * sizeof *p->meets);
    p->overflow = 0;
    p->stopped = 0;
    p->world_loss = 0;
    p->world_go = 0;
    p->remote_failed = UINT32_MAX;
    for (uint32_t i = 0; i < p->n_ctx; i++) {
        pstage *s = &p->st[i];
        if (!s->local)
            continue;
        memset(s->gacc, 0, s->n_train * sizeof *s->gacc);
        graph_model_zero_grads(s->model); /* the device sum starts over */
        s->grad_reads = 0;
        s->grad_writes = 0;
        s->squares = 0;
        s->loss = 0;
        s->busy = 0;
        s->forwards = 0;
        s->sent = 0;
        s->host_sent = 0;
        s->overlapped = 0;
        memset(s->loss_due, 0, sizeof s->loss_due);
        s->status = VKT_OK;
        s->errmsg[0] = 0;
    }
}

/* The update of contexts [i0, i0 + n) (a meeting: every context, or one copy's), one
 * after another: all of them apply, or none when a gradient is not finite. */
static vkt_status update_in_turn(vkt_pipeline *p, uint32_t i0, uint32_t n)
{
    int skip = 0;
    for (uint32_t i = i0; i < i0 + n; i++) {
        judge(&p->st[i]);
        skip |= p->st[i].nonfinite;
    }
    p->overflow |= skip;
    double squares = 0;
    for (uint32_t i = i0; i < i0 + n && !skip; i++)
        squares += p->route->gather(&p->st[i]);
    double factor = p->optim.clip_norm > 0 ? clip_factor(p, squares) : 1.0;
    vkt_status r = VKT_OK;
    for (uint32_t i = i0; i < i0 + n && r == VKT_OK && !skip; i++)
        r = apply_gradient(&p->st[i], factor);
    return r;
}

/* One stage at a time: each copy's forwards and backwards, then every meeting's update. */
static void run_sequential(vkt_pipeline *p)
{
    vkt_status r = VKT_OK;
    for (uint32_t c = 0; c < p->D && r == VKT_OK; c++)
        for (uint32_t k = 0; k < p->m && r == VKT_OK; k++) {
            for (uint32_t s = 0; s < p->P && r == VKT_OK; s++)
                r = forward(ctx_of(p, c, s), k);
            for (uint32_t s = p->P - 1; s-- > 0 && r == VKT_OK;)
                r = backward(ctx_of(p, c, s), k);
        }
    for (uint32_t i = 0; i < p->n_ctx; i++) { /* nothing in flight past the step, failed
                                                 or not (the next begin writes `feed`) */
        vkt_status settled = settle_all(&p->st[i]);
        r = r == VKT_OK ? settled : r;
    }
    uint32_t n = p->route->per_copy ? p->P : p->n_ctx;
    for (uint32_t i0 = 0; i0 < p->n_ctx && r == VKT_OK; i0 += n)
        r = update_in_turn(p, i0, n);
}

static void run_threads(vkt_pipeline *p)
{
    if (p->world) { /* this rank's one context, on the caller's thread (the one calling MPI) */
        p->go = 1;
        p->meets[0].expected = 1;
        stage_job(&p->st[p->here]);
        return;
    }
    uint32_t started = 0;
    for (; started < p->n_ctx; started++)
        if (plat_thread_start(&p->st[started].thread, stage_job, &p->st[started]) != 0)
            break;
    /* Contexts without a thread fail the step; the started ones stop at once (they see
     * `failed`) and only they arrive at the end. */
    for (uint32_t k = started; k < p->n_ctx; k++)
        pipe_stage_fail(&p->st[k], VKT_ERROR_INTERNAL, "thread", "could not start a thread");
    plat_monitor_lock(p->mon);
    for (uint32_t c = 0; c < p->D; c++) /* started: the first contexts, copy after copy */
        p->meets[p->route->per_copy ? c : 0].expected +=
            started > c * p->P ? (started - c * p->P < p->P ? started - c * p->P : p->P) : 0;
    p->go = 1;
    plat_monitor_broadcast(p->mon);
    plat_monitor_unlock(p->mon);
    for (uint32_t k = 0; k < started; k++)
        plat_thread_join(p->st[k].thread);
}

vkt_status pipe_step(vkt_pipeline *p, const vkt_feed *feeds, uint32_t n, uint64_t step,
                     double *out_loss)
{
    if (p->route_status != VKT_OK)
        return p->route_status; /* pipe_set_scaler's change of route failed: its message */
    vkt_status st = check_feeds(p, feeds, n);
    if (st != VKT_OK)
        return st;
    for (uint32_t i = 0; i < p->n_ctx; i++) { /* the update as the route wants it */
        pstage *s = &p->st[i];
        if (s->local && s->opt && s->apply_staged != p->route->staged &&
            (st = pipe_apply_record(p, s)) != VKT_OK)
            return st;
    }
    reset_step(p);
    p->step = step;
    if ((st = p->edges->begin(p)) != VKT_OK) /* device: the step's fed rows, checked */
        return st;
    double t0 = plat_now();
    if ((st = p->route->begin(p)) != VKT_OK) /* async: each stage's master seeded */
        return st;
    if (p->opt.sequential)
        run_sequential(p);
    else
        run_threads(p);
    st = p->route->end(p); /* async: every copy pulls its stage's master (after a failure
                              too: the copies stay alike) */
    p->step_seconds = plat_now() - t0;
    /* The context that failed first (the others stopped because of it, or failed after). */
    if (p->first_failed < p->n_ctx && p->st[p->first_failed].errmsg[0])
        return pipe_fail(p, p->st[p->first_failed].status, "%s", p->st[p->first_failed].errmsg);
    for (uint32_t k = 0; k < p->n_ctx; k++)
        if (p->st[k].errmsg[0])
            return pipe_fail(p, p->st[k].status, "%s", p->st[k].errmsg);
    for (uint32_t k = 0; k < p->n_ctx; k++)
        if (p->st[k].status != VKT_OK)
            return pipe_fail(p, p->st[k].status, "stage %u failed", p->st[k].index);
    if (p->world && p->remote_failed != UINT32_MAX)
        return pipe_fail(p, VKT_ERROR_REMOTE, "rank %u failed at step %llu (its message is in "
                         "its output)", p->remote_failed, (unsigned long long)step + 1);
    if (st != VKT_OK)
        return st; /* its message is the pipeline's */
    double loss = p->world_loss; /* across ranks: the tail's sum */
    for (uint32_t c = 0; c < p->D && !p->world; c++)
        loss += ctx_of(p, c, p->P - 1)->loss;
    if (out_loss)
        *out_loss = loss;
    return VKT_OK;
}
