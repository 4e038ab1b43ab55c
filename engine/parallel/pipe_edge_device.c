/* pipe_edge_device.c - the device row of pipe_edges (pipe_engine.h): every stage of each
 * copy on one VkDevice (pipe_engine.c shares it as replicas do), so the values and
 * gradients that cross stages stay in device buffers both stages' command buffers use.
 *
 * Per edge e (on its sender's context): dact [m][elems], dgrad [n_to][m][elems]. Per
 * stage and micro-batch k, four copies recorded once (each with a barrier over all
 * writes at both ends, so the commands before and after it in submission order see its
 * writes and it sees theirs):
 *   vsend[k]: the values it sends, from micro-batch k's slot -> dact[k]     (after F(k))
 *   vin[k]:   its control words and fed rows of micro-batch k (from `feed`, which
 *             begin fills at the step's start) and dact[k] -> its slot's inputs
 *                                                                  (before F(k))
 *   gsend[k]: the gradients of its received values -> dgrad[slot][k]      (after B(k))
 *   grecv[k]: dgrad[0][k] -> its sent values' gradient inputs, the other consumers'
 *             added there in stage order (kt_axpby: the host row's float sum, bit for
 *             bit)                                                         (before B(k))
 * (pipe_edges_copies: the import row records the same copies from its imports.)
 * A run that sends raises its stage's timeline to the next value, which the edge keeps
 * (act_sig, grad_sig) before the run is submitted; once it is, the run's values are marked
 * ready (pipe_edge.c's flags, under the monitor) and the receiver's run waits for that
 * value on the device. So a wait is never submitted before its signal (gpu.h's rule for
 * one queue), no thread waits for another stage's fence, and no value passes through
 * the host. A stage's runs are submitted without waiting (no_wait), and the host writes
 * nothing into its models during a step (begin: the step's fed rows and control words
 * into `feed`, which vin copies from; ctrl_by_copy): the thread of a keeping stage, whose
 * consecutive runs are on different slots, never waits for its own runs in a step; a
 * recomputing stage's replay of its forward (or backward) stream waits for that stream's
 * last run (gpu_stream_submit_ext); the last stage waits only to read a loss (pipe_sched.c's
 * settle); `overlapped` counts the submissions made with another slot's run in flight. Every
 * run starts with a barrier (a copy's, or its slot's own): the runs in flight share the
 * parameter and gradient buffers (batch norm's running averages, the summed gradients). */
#include <stdlib.h>
#include <string.h>

#include "kernels/train_ops.h"
#include "parallel/pipe_engine.h"

int pipe_edges_device_fits(const vkt_pipeline *p)
{
    if (p->world || p->n_edge == 0)
        return 0;
    for (uint32_t c = 0; c < p->D; c++) {
        const pstage *s0 = &p->st[c * p->P];
        if (!s0->ctx || !s0->ctx->timeline)
            return 0;
        for (uint32_t k = 0; k < p->P; k++)
            if (!gpu_context_same_device(s0->ctx, p->st[c * p->P + k].ctx) ||
                graph_model_checks(p->st[c * p->P + k].model))
                return 0; /* check mode (options or VKT_CHECK): a step's parts on their own */
    }
    return 1;
}

static vkt_status dev_fail(pstage *s, vkt_status st, const char *what)
{
    const char *msg = s->cur ? vkt_model_errmsg(s->cur) : "";
    if (!msg || !*msg)
        msg = vkt_context_errmsg(s->ctx);
    return pipe_fail(s->p, st, "copy %u, stage %u: device edges: %s: %s", s->copy, s->index,
                     what, msg);
}

static uint64_t bytes_at(const pedge *e, uint64_t slot, uint32_t m, uint32_t k)
{
    return (slot * m + k) * e->elems * 4;
}

/* One of the copies above for micro-batch k, into *out (the header's list). */
typedef vkt_status (*record_fn)(pstage *s, uint32_t k, vkt_stream *x);

/* A plain copy between a model's view and an edge buffer (pipe_edge_buffer: the stage's
 * side of it), for each of the stage's sent values (sent) or received ones: where the
 * model holds it (view), into the edge's gradients at the consumer's slot (grad) or its
 * values, or (to_edge 0) from its values into the model. */
typedef struct copy_kind {
    int sent;
    vkt_status (*view)(vkt_model *m, const vkt_tensor *t, vkt_view *out);
    int grad, to_edge;
} copy_kind;

static vkt_status record_copies(pstage *s, uint32_t k, vkt_stream *x, const copy_kind *c)
{
    vkt_pipeline *p = s->p;
    const graph_stage *gs = s->gs;
    vkt_status st = VKT_OK;
    for (uint32_t j = 0; j < (c->sent ? gs->n_send : gs->n_recv) && st == VKT_OK; j++) {
        pedge *e = &p->edge[c->sent ? s->send_edge[j] : s->recv_edge[j]];
        vkt_buffer *b = pipe_edge_buffer(e, c->grad, c->sent ? 0 : 1 + s->recv_slot[j]);
        uint64_t at = bytes_at(e, c->grad ? s->recv_slot[j] : 0, p->m, k), n = e->elems * 4;
        vkt_view v;
        st = c->view(s->cur, gs->map[c->sent ? gs->send[j] : gs->recv[j]], &v);
        if (st == VKT_OK)
            st = c->to_edge ? vkt_stream_copy(x, v.buffer, v.offset * 4, b, at, n)
                            : vkt_stream_copy(x, b, at, v.buffer, v.offset * 4, n);
    }
    return st;
}

static vkt_status record_vsend(pstage *s, uint32_t k, vkt_stream *x)
{
    static const copy_kind c = {1, graph_model_value_view, 0, 1};
    return record_copies(s, k, x, &c);
}

/* The slot's received values of micro-batch k from the edges' values [k]. */
static vkt_status record_vvalues(pstage *s, uint32_t k, vkt_stream *x)
{
    static const copy_kind c = {0, graph_model_input_view, 0, 0};
    return record_copies(s, k, x, &c);
}

/* The slot's control words and fed rows of micro-batch k from `feed`, then its received
 * values (record_vvalues). */
static vkt_status record_vin(pstage *s, uint32_t k, vkt_stream *x)
{
    const graph_stage *gs = s->gs;
    uint32_t m = s->p->m;
    vkt_status st = graph_model_record_ctrl(s->cur, x, s->dev.feed,
                                            (uint64_t)k * GRAPH_CTRL_WORDS * 4);
    uint64_t at = ((uint64_t)m * GRAPH_CTRL_WORDS + k * s->dev.feed_words) * 4;
    for (uint32_t j = 0; j < gs->n_feed && st == VKT_OK; j++) {
        uint64_t n = s->feed_row[j] * s->p->mb * 4;
        vkt_view v;
        st = graph_model_input_view(s->cur, gs->map[gs->feed[j]], &v);
        if (st == VKT_OK)
            st = vkt_stream_copy(x, s->dev.feed, at, v.buffer, v.offset * 4, n);
        at += n;
    }
    return st == VKT_OK ? record_vvalues(s, k, x) : st;
}

static vkt_status record_gsend(pstage *s, uint32_t k, vkt_stream *x)
{
    static const copy_kind c = {0, graph_model_input_grad_view, 1, 1};
    return record_copies(s, k, x, &c);
}

/* The gradients of its sent values, consumer 0's copied into the input and the others'
 * added in stage order (v = g_c + v, kt_axpby: the host row's float sum, bit for bit). */
static vkt_status record_grecv(pstage *s, uint32_t k, vkt_stream *x)
{
    vkt_pipeline *p = s->p;
    const graph_stage *gs = s->gs;
    vkt_status st = VKT_OK;
    for (uint32_t j = 0; j < gs->n_send && st == VKT_OK; j++) {
        pedge *e = &p->edge[s->send_edge[j]];
        vkt_buffer *g = pipe_edge_buffer(e, 1, 0);
        vkt_view v;
        st = graph_model_input_view(s->cur, gs->send_grad[j], &v);
        if (st == VKT_OK)
            st = vkt_stream_copy(x, g, bytes_at(e, 0, p->m, k), v.buffer, v.offset * 4,
                                 e->elems * 4);
        for (uint32_t c = 1; c < e->n_to && st == VKT_OK; c++) {
            st = gpu_stream_barrier_all(x);
            vkt_view gc = {g, bytes_at(e, c, p->m, k) / 4};
            if (st == VKT_OK)
                st = kt_axpby(x, 1.0f, gc, 1.0f, v, e->elems);
        }
    }
    return st;
}

/* out[k] for k < m: a stream each, recorded by fn between two barriers. */
static vkt_status record_all(pstage *s, vkt_stream ***out, record_fn fn, const char *what)
{
    uint32_t m = s->p->m;
    if (!(*out = calloc(m, sizeof **out)))
        return pipe_fail(s->p, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    for (uint32_t k = 0; k < m; k++) {
        s->cur = pipe_slot(s, k);
        vkt_status st = vkt_stream_create(s->ctx, NULL, &(*out)[k]);
        if (st == VKT_OK)
            st = gpu_stream_barrier_all((*out)[k]);
        if (st == VKT_OK)
            st = fn(s, k, (*out)[k]);
        if (st == VKT_OK)
            st = gpu_stream_barrier_all((*out)[k]);
        if (st != VKT_OK)
            return dev_fail(s, st, what);
    }
    return VKT_OK;
}

/* Every slot's received values and the gradients of its sent values (and feeds: its fed
 * rows) are written on the device, its sent values and the gradients of its received ones
 * read there: no staged copy of them, no readback (graph_model_device_io). */
static vkt_status device_io(pstage *s, int feeds)
{
    const graph_stage *gs = s->gs;
    uint32_t n_in = gs->n_recv + gs->n_send + (feeds ? gs->n_feed : 0);
    uint32_t n_out = gs->n_send + gs->n_recv;
    const vkt_tensor **in = malloc((n_in + n_out + 1) * sizeof *in);
    if (!in)
        return pipe_fail(s->p, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    const vkt_tensor **out = in + n_in;
    for (uint32_t j = 0; j < gs->n_recv; j++)
        in[j] = out[gs->n_send + j] = gs->map[gs->recv[j]];
    for (uint32_t j = 0; j < gs->n_send; j++) {
        in[gs->n_recv + j] = gs->send_grad[j];
        out[j] = gs->map[gs->send[j]];
    }
    for (uint32_t j = 0; feeds && j < gs->n_feed; j++) /* fed rows: copied in by vin */
        in[gs->n_recv + gs->n_send + j] = gs->map[gs->feed[j]];
    vkt_status st = VKT_OK;
    for (uint32_t j = 0; j < s->n_slots && st == VKT_OK; j++) {
        s->cur = s->slot[j];
        st = graph_model_device_io(s->slot[j], in, n_in, out, n_out);
    }
    free(in);
    return st == VKT_OK ? VKT_OK : dev_fail(s, st, "inputs and outputs on the device");
}

vkt_status pipe_edges_copies(pstage *s, int feeds)
{
    const graph_stage *gs = s->gs;
    vkt_status st = device_io(s, feeds);
    if (gs->n_send && st == VKT_OK)
        st = record_all(s, &s->dev.vsend, record_vsend, "copying sent values");
    if (gs->n_send && st == VKT_OK)
        st = record_all(s, &s->dev.grecv, record_grecv, "summing gradients of sent values");
    if ((feeds || gs->n_recv) && st == VKT_OK)
        st = record_all(s, &s->dev.vin, feeds ? record_vin : record_vvalues,
                        "copying inputs and received values");
    if (gs->n_recv && st == VKT_OK)
        st = record_all(s, &s->dev.gsend, record_gsend, "copying gradients of received values");
    s->cur = NULL;
    return st;
}

static vkt_status make_stage(pstage *s)
{
    vkt_status st = gpu_timeline_create(s->ctx, 0, &s->dev.tl);
    if (st != VKT_OK)
        return dev_fail(s, st, "timeline");
    s->dev.tl_next = 0;
    for (uint32_t j = 0; j < s->n_slots && st == VKT_OK; j++) {
        st = vkt_stream_create(s->ctx, NULL, &s->dev.barrier[j]);
        if (st == VKT_OK)
            st = gpu_stream_barrier_all(s->dev.barrier[j]);
    }
    if (st != VKT_OK)
        return dev_fail(s, st, "barrier");
    return pipe_edges_copies(s, 1);
}

vkt_status pipe_edges_device_make(vkt_pipeline *p)
{
    for (uint32_t i = 0; i < p->n_edge; i++) {
        pedge *e = &p->edge[i];
        pstage *from = &p->st[e->copy * p->P + e->from];
        uint64_t bytes = (uint64_t)p->m * e->elems * 4;
        vkt_status st = vkt_buffer_create(from->ctx, bytes, VKT_MEMORY_DEVICE, &e->dact);
        if (st == VKT_OK)
            st = vkt_buffer_create(from->ctx, bytes * e->n_to, VKT_MEMORY_DEVICE, &e->dgrad);
        if (st != VKT_OK)
            return dev_fail(from, st, "buffers");
        e->act_sig = calloc(p->m, sizeof *e->act_sig);
        e->grad_sig = calloc((uint64_t)p->m * e->n_to, sizeof *e->grad_sig);
        if (!e->act_sig || !e->grad_sig)
            return pipe_fail(p, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    }
    for (uint32_t i = 0; i < p->n_ctx; i++) { /* each stage's fed rows and control words */
        pstage *s = &p->st[i];
        s->dev.feed_words = 0;
        for (uint32_t j = 0; j < s->gs->n_feed; j++)
            s->dev.feed_words += s->feed_row[j] * p->mb;
        uint64_t bytes = (uint64_t)p->m * (GRAPH_CTRL_WORDS + s->dev.feed_words) * 4;
        vkt_status st = vkt_buffer_create(s->ctx, bytes, VKT_MEMORY_HOST, &s->dev.feed);
        if (st != VKT_OK)
            return dev_fail(s, st, "fed rows");
    }
    return VKT_OK;
}

vkt_status pipe_edges_device_record(vkt_pipeline *p)
{
    for (uint32_t i = 0; i < p->n_ctx; i++) {
        vkt_status st = make_stage(&p->st[i]);
        if (st != VKT_OK)
            return st;
    }
    return VKT_OK;
}

static void free_streams(vkt_stream **x, uint32_t m)
{
    for (uint32_t k = 0; x && k < m; k++)
        vkt_stream_destroy(x[k]);
    free(x);
}

void pipe_edges_device_free(vkt_pipeline *p)
{
    for (uint32_t i = 0; p->st && i < p->n_ctx; i++) {
        pdev *d = &p->st[i].dev;
        free_streams(d->vsend, p->m);
        free_streams(d->vin, p->m);
        vkt_buffer_destroy(d->feed);
        free_streams(d->gsend, p->m);
        free_streams(d->grecv, p->m);
        for (uint32_t j = 0; j < GRAPH_MAX_STAGES; j++)
            vkt_stream_destroy(d->barrier[j]);
        if (d->tl)
            gpu_timeline_destroy(d->tl);
        memset(d, 0, sizeof *d);
    }
    for (uint32_t i = 0; p->edge && i < p->n_edge; i++) {
        pedge *e = &p->edge[i];
        vkt_buffer_destroy(e->dact);
        vkt_buffer_destroy(e->dgrad);
        free(e->act_sig);
        free(e->grad_sig);
        e->dact = e->dgrad = NULL;
        e->act_sig = e->grad_sig = NULL;
    }
}

/* ---- the row ---- */

/* The next run waits until timeline t reaches v (the largest value asked of each). */
static void wait_for(pdev *d, gpu_timeline *t, uint64_t v)
{
    for (uint32_t i = 0; i < d->n_wait; i++)
        if (d->wait[i].t == t) {
            d->wait[i].value = v > d->wait[i].value ? v : d->wait[i].value;
            return;
        }
    d->wait[d->n_wait++] = (gpu_sync){t, v}; /* at most P - 1 other stages: < GPU_MAX_SYNC */
}

static vkt_status recv_values(pstage *s, uint32_t k)
{
    vkt_pipeline *p = s->p;
    pdev *d = &s->dev;
    d->before[d->n_before++] = d->vin[k]; /* control words, fed rows, received values */
    for (uint32_t j = 0; j < s->gs->n_recv; j++) {
        const pedge *e = &p->edge[s->recv_edge[j]];
        wait_for(d, p->st[e->copy * p->P + e->from].dev.tl, e->act_sig[k]);
    }
    return VKT_OK;
}

static vkt_status recv_grads(pstage *s, uint32_t k)
{
    vkt_pipeline *p = s->p;
    pdev *d = &s->dev;
    if (!s->gs->n_send)
        return VKT_OK;
    d->before[d->n_before++] = d->grecv[k];
    for (uint32_t j = 0; j < s->gs->n_send; j++) {
        const pedge *e = &p->edge[s->send_edge[j]];
        for (uint32_t c = 0; c < e->n_to; c++)
            wait_for(d, p->st[e->copy * p->P + e->to[c]].dev.tl,
                     e->grad_sig[(uint64_t)c * p->m + k]);
    }
    return VKT_OK;
}

/* Once the run is submitted (graph_model_run_with's submitted): its values, or gradients,
 * ready for the stages that wait for them. */
static void submitted(void *user)
{
    pstage *s = user;
    vkt_pipeline *p = s->p;
    pdev *d = &s->dev;
    for (uint32_t j = 0; d->values && j < s->gs->n_send; j++) {
        pedge *e = &p->edge[s->send_edge[j]];
        s->sent += e->elems * 4;
        pipe_edge_announce_value(p, e, d->k);
    }
    for (uint32_t j = 0; d->grads && j < s->gs->n_recv; j++) {
        pedge *e = &p->edge[s->recv_edge[j]];
        s->sent += e->elems * 4;
        pipe_edge_announce_grad(p, e, d->k);
    }
}

/* The next run of s->cur carries what recv_* gathered, and the copies of what it sends
 * (values: vsend; grads: gsend), raising s's timeline. */
static vkt_status arm(pstage *s, uint32_t k, int values, int grads)
{
    vkt_pipeline *p = s->p;
    pdev *d = &s->dev;
    d->values = values && s->gs->n_send;
    d->grads = grads && s->gs->n_recv;
    d->k = k;
    if (d->n_before == 0) /* another run of the stage may be in flight (no_wait): after it
                             (every run carries vin or grecv today: a safeguard) */
        d->before[d->n_before++] = d->barrier[k % s->n_slots];
    if (d->values)
        d->after[d->n_after++] = d->vsend[k];
    if (d->grads)
        d->after[d->n_after++] = d->gsend[k];
    d->sync = (gpu_submit_sync){d->wait, d->n_wait, &d->signal, 0};
    if (d->values || d->grads) {
        d->signal = (gpu_sync){d->tl, ++d->tl_next};
        d->sync.n_signal = 1;
    }
    for (uint32_t j = 0; d->values && j < s->gs->n_send; j++)
        p->edge[s->send_edge[j]].act_sig[k] = d->signal.value;
    for (uint32_t j = 0; d->grads && j < s->gs->n_recv; j++)
        p->edge[s->recv_edge[j]].grad_sig[(uint64_t)s->recv_slot[j] * p->m + k] = d->signal.value;
    graph_run_with w = {d->before, d->n_before, d->after, d->n_after,
                        d->sync.n_wait || d->sync.n_signal ? &d->sync : NULL, submitted, s,
                        1 /* no_wait: pipe_sched.c's settle waits for it when it must */,
                        1 /* ctrl_by_copy: vin carries the control words and fed rows */};
    for (uint32_t j = 0; j < s->n_slots; j++) /* another slot's: a replay of the same
                                                 slot's stream would wait for its last run */
        if (s->slot[j] != s->cur && graph_model_in_flight(s->slot[j])) {
            s->overlapped++; /* submitted behind another run of the stage, no host between */
            break;
        }
    graph_model_run_with(s->cur, &w);
    d->n_before = d->n_after = d->n_wait = 0; /* the run copied the counts */
    return VKT_OK;
}

/* The step's control words and fed rows of every micro-batch into each local stage's
 * `feed` (the previous step's runs were all waited for), checked as
 * vkt_model_set_input checks them (labels in range, token ids in the vocabulary). */
vkt_status pipe_edges_device_begin(vkt_pipeline *p)
{
    for (uint32_t i = 0; i < p->n_ctx; i++) {
        pstage *s = &p->st[i];
        const graph_stage *gs = s->gs;
        uint32_t *ctrl = vkt_buffer_map(s->dev.feed);
        float *rows = (float *)(ctrl + (uint64_t)p->m * GRAPH_CTRL_WORDS);
        for (uint32_t k = 0; s->local && k < p->m; k++) {
            uint64_t row = s->row0 + (uint64_t)k * p->mb; /* its first global row */
            graph_ctrl_image(p->step, (uint32_t)row, ctrl + (uint64_t)k * GRAPH_CTRL_WORDS);
            for (uint32_t j = 0; j < gs->n_feed; j++) {
                uint64_t n = s->feed_row[j] * p->mb;
                const char *data = (const char *)s->feed_data[j] + row * s->feed_row[j] * 4;
                s->cur = pipe_slot(s, k);
                vkt_status st = graph_model_check_input(s->cur, gs->map[gs->feed[j]], data, n);
                if (st != VKT_OK) {
                    pipe_model_fail(s, st, "input");
                    return pipe_fail(p, st, "%s", s->errmsg);
                }
                memcpy(rows, data, n * 4);
                rows += n;
            }
        }
    }
    return VKT_OK;
}

/* Sent at submission (submitted): nothing after the run. */
static vkt_status sent_already(pstage *s, uint32_t k)
{
    (void)s;
    (void)k;
    return VKT_OK;
}

const pipe_edges pipe_edges_device = {"device", pipe_host_wait_values, pipe_host_wait_grads,
                                      recv_values, recv_grads, arm, sent_already,
                                      sent_already, pipe_edges_device_begin, 1};
