/* pipe_edge_import.c - the import row of pipe_edges (pipe_engine.h): the stages of a copy
 * on different VkDevices (several GPUs), each of which imports host memory
 * (VK_EXT_external_memory_host). Asked for with VKT_PIPE_EDGES=import.
 *
 * Per edge e one pinned host allocation (e->host): act [m][elems], then grad [n_to][m]
 * [elems], imported into the sender's device (iact[0], igrad[0]) and each consumer's
 * (iact[1 + c], igrad[1 + c]). Per stage and micro-batch k the device row's four copies
 * (pipe_edges_copies, recorded once from the stage's side of the imports):
 *   vsend[k]: its sent values -> act[k]              (in F(k)'s submission, after it)
 *   vin[k]:   act[k] -> its received values' inputs  (in its next run's, before it)
 *   gsend[k]: the gradients of its received values -> grad[slot][k]   (after B(k))
 *   grecv[k]: grad[0][k] -> its sent values' gradient inputs, the other consumers' added
 *             in stage order on its device (kt_axpby: the host row's sum, bit for bit)
 * No semaphore is shared across VkDevices, so the ordering is the host row's: each run is
 * waited for (its fence; every recording ends with a barrier making its writes visible
 * to the host), then its values (gradients) are marked ready under the monitor, and the
 * receiver's next submission, made after it saw the mark, reads them (a submission sees
 * the host's memory as it was). What goes: the readback into staging, the host's two
 * memcpys and the staged upload (the received values and gradients are device-written
 * inputs: graph_model_device_io). The host copies nothing (sent_host_bytes 0); fed rows
 * and control words are the host row's (vkt_model_set_input). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parallel/pipe_engine.h"

/* The context of side `side` of e: its sender (0) or consumer side - 1. */
static vkt_context *side_ctx(const vkt_pipeline *p, const pedge *e, uint32_t side)
{
    uint32_t stage = side ? e->to[side - 1] : e->from;
    return p->st[e->copy * p->P + stage].ctx;
}

int pipe_edges_import_fits(const vkt_pipeline *p, char *why, size_t n)
{
    if (p->world) {
        snprintf(why, n, "stages across ranks send their edges as messages");
        return 0;
    }
    if (p->n_edge == 0) {
        snprintf(why, n, "no value crosses stages");
        return 0;
    }
    for (uint32_t i = 0; i < p->n_ctx; i++) {
        const pstage *s = &p->st[i];
        if (graph_model_checks(s->model)) { /* options or VKT_CHECK */
            snprintf(why, n, "check mode runs a step's parts on their own");
            return 0;
        }
        if (!s->ctx->host_import) {
            snprintf(why, n, "device %u ('%s') cannot import host memory "
                     "(VK_EXT_external_memory_host)", s->device, s->ctx->info.name);
            return 0;
        }
    }
    for (uint32_t i = 0; i < p->n_edge; i++) {
        const pedge *e = &p->edge[i];
        for (uint32_t a = 0; a <= e->n_to; a++)
            for (uint32_t b = a + 1; b <= e->n_to; b++)
                if (gpu_context_same_device(side_ctx(p, e, a), side_ctx(p, e, b))) {
                    snprintf(why, n, "stages %u and %u share one VkDevice (the device row "
                             "keeps their edges on it: VKT_PIPE_EDGES=device, or unset)",
                             a ? e->to[a - 1] : e->from, e->to[b - 1]);
                    return 0;
                }
    }
    return 1;
}

static vkt_status import_fail(vkt_pipeline *p, const pedge *e, uint32_t side, vkt_status st)
{
    return pipe_fail(p, st, "copy %u, stage %u: import edges (VKT_PIPE_EDGES=import): %s",
                     e->copy, side ? e->to[side - 1] : e->from,
                     vkt_context_errmsg(side_ctx(p, e, side)));
}

vkt_status pipe_edges_import_make(vkt_pipeline *p)
{
    for (uint32_t i = 0; i < p->n_edge; i++) {
        pedge *e = &p->edge[i];
        uint64_t a = 1; /* the largest alignment of its sides' devices */
        for (uint32_t side = 0; side <= e->n_to; side++)
            if (side_ctx(p, e, side)->host_import > a)
                a = side_ctx(p, e, side)->host_import;
        uint64_t act = ((uint64_t)p->m * e->elems * 4 + a - 1) / a * a;
        uint64_t grad = ((uint64_t)e->n_to * p->m * e->elems * 4 + a - 1) / a * a;
        if (!(e->host = plat_aligned_alloc(a, act + grad)))
            return pipe_fail(p, VKT_ERROR_OUT_OF_MEMORY, "out of host memory (%llu bytes of "
                             "import edges)", (unsigned long long)(act + grad));
        memset(e->host, 0, act + grad);
        for (uint32_t side = 0; side <= e->n_to; side++) {
            vkt_context *ctx = side_ctx(p, e, side);
            vkt_status st = gpu_buffer_import_host(ctx, e->host, act, &e->iact[side]);
            if (st == VKT_OK)
                st = gpu_buffer_import_host(ctx, (char *)e->host + act, grad, &e->igrad[side]);
            if (st != VKT_OK)
                return import_fail(p, e, side, st);
        }
    }
    return VKT_OK;
}

vkt_status pipe_edges_import_record(vkt_pipeline *p)
{
    for (uint32_t i = 0; i < p->n_ctx; i++) {
        vkt_status st = pipe_edges_copies(&p->st[i], 0);
        if (st != VKT_OK)
            return st;
    }
    return VKT_OK;
}

/* After every run was waited for (vkt_pipeline_destroy waits for the contexts): the
 * imports, then the memory they import. The streams are pipe_edges_device_free's. */
void pipe_edges_import_free(vkt_pipeline *p)
{
    for (uint32_t i = 0; p->edge && i < p->n_edge; i++) {
        pedge *e = &p->edge[i];
        for (uint32_t side = 0; side <= GRAPH_MAX_STAGES; side++) {
            vkt_buffer_destroy(e->iact[side]);
            vkt_buffer_destroy(e->igrad[side]);
            e->iact[side] = e->igrad[side] = NULL;
        }
        plat_aligned_free(e->host);
        e->host = NULL;
    }
}

/* ---- the row ---- */

static vkt_status recv_values(pstage *s, uint32_t k)
{
    pdev *d = &s->dev;
    if (s->gs->n_recv)
        d->before[d->n_before++] = d->vin[k];
    return VKT_OK;
}

static vkt_status recv_grads(pstage *s, uint32_t k)
{
    pdev *d = &s->dev;
    if (s->gs->n_send)
        d->before[d->n_before++] = d->grecv[k];
    return VKT_OK;
}

/* The next run of s->cur carries what recv_* gathered and the copies of what it sends
 * (values: vsend; grads: gsend); it is waited for as the host row's runs are. */
static vkt_status arm(pstage *s, uint32_t k, int values, int grads)
{
    pdev *d = &s->dev;
    if (values && s->gs->n_send)
        d->after[d->n_after++] = d->vsend[k];
    if (grads && s->gs->n_recv)
        d->after[d->n_after++] = d->gsend[k];
    if (d->n_before || d->n_after) {
        graph_run_with w = {d->before, d->n_before, d->after, d->n_after, NULL, NULL, NULL,
                            0 /* waited for: its fence orders the receiver's run */, 0};
        graph_model_run_with(s->cur, &w);
    }
    d->n_before = d->n_after = 0; /* the run copied the counts */
    return VKT_OK;
}

/* After the run that copied them (waited for): the values (grads 0) or the gradients of
 * the received values (1) of micro-batch k in the host allocation, ready for the other
 * side. */
static vkt_status announce(pstage *s, uint32_t k, int grads)
{
    vkt_pipeline *p = s->p;
    uint32_t n = grads ? s->gs->n_recv : s->gs->n_send;
    const uint32_t *edge = grads ? s->recv_edge : s->send_edge;
    for (uint32_t j = 0; j < n; j++) {
        pedge *e = &p->edge[edge[j]];
        s->sent += e->elems * 4;
        if (grads)
            pipe_edge_announce_grad(p, e, k);
        else
            pipe_edge_announce_value(p, e, k);
    }
    return VKT_OK;
}

static vkt_status send_values(pstage *s, uint32_t k) { return announce(s, k, 0); }
static vkt_status send_grads(pstage *s, uint32_t k) { return announce(s, k, 1); }

/* The stage's thread writes the fed rows before each run (vkt_model_set_input). */
static vkt_status no_begin(vkt_pipeline *p)
{
    (void)p;
    return VKT_OK;
}

const pipe_edges pipe_edges_import = {"import", pipe_host_wait_values, pipe_host_wait_grads,
                                      recv_values, recv_grads, arm, send_values, send_grads,
                                      no_begin, 0};
