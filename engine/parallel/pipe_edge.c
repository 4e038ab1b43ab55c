/* pipe_edge.c - the values and gradients that cross stages (pipe_engine.h), per copy, in
 * host memory: act[k] the value of micro-batch k sent forward; grad[c][k] the gradient
 * consumer stage c sends back (one slot per consumer, summed by the sender in stage
 * order, so the result does not depend on timing). The pipeline's monitor guards the
 * flags of every copy; a failing stage sets `failed` and wakes everybody. */
#include <stdlib.h>
#include <string.h>

#include "parallel/pipe_engine.h"

/* One copy's edges, appended to p->edge; its stages' send and receive lists. */
static vkt_status make_copy_edges(vkt_pipeline *p, uint32_t c)
{
    uint32_t base = p->n_edge;
    for (uint32_t k = 0; k < p->P; k++) {
        pstage *s = ctx_of(p, c, k);
        graph_stage *gs = s->gs;
        s->send_edge = calloc(gs->n_send + 1, sizeof *s->send_edge);
        s->recv_edge = calloc(gs->n_recv + 1, sizeof *s->recv_edge);
        s->recv_slot = calloc(gs->n_recv + 1, sizeof *s->recv_slot);
        if (!s->send_edge || !s->recv_edge || !s->recv_slot)
            return pipe_fail(p, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
        for (uint32_t j = 0; j < gs->n_send; j++) {
            pedge *e = &p->edge[p->n_edge];
            graph_node_info v;
            graph_node_info_at(p->graph, gs->send[j], &v);
            e->node = v.id;
            e->from = k;
            e->copy = c;
            e->elems = v.count / p->split.batch * p->mb;
            s->send_edge[j] = p->n_edge++;
        }
    }
    for (uint32_t k = 0; k < p->P; k++) { /* consumers, in stage order */
        pstage *s = ctx_of(p, c, k);
        for (uint32_t j = 0; j < s->gs->n_recv; j++)
            for (uint32_t e = base; e < p->n_edge; e++)
                if (p->edge[e].node == s->gs->recv[j]) {
                    s->recv_edge[j] = e;
                    s->recv_slot[j] = p->edge[e].n_to;
                    p->edge[e].to[p->edge[e].n_to++] = k;
                }
    }
    return VKT_OK;
}

vkt_status pipe_edges_make(vkt_pipeline *p)
{
    uint32_t cap = 0;
    for (uint32_t k = 0; k < p->P; k++)
        cap += p->split.stage[k].n_send;
    p->edge = calloc(cap ? (uint64_t)cap * p->D : 1, sizeof *p->edge);
    if (!p->edge)
        return pipe_fail(p, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    for (uint32_t c = 0; c < p->D; c++) {
        vkt_status st = make_copy_edges(p, c);
        if (st != VKT_OK)
            return st;
    }
    for (uint32_t e = 0; e < p->n_edge; e++) {
        pedge *x = &p->edge[e];
        x->act = malloc(p->m * x->elems * sizeof *x->act);
        x->grad = malloc((uint64_t)x->n_to * p->m * x->elems * sizeof *x->grad);
        x->ready = calloc(p->m, 1);
        x->pending = calloc(p->m, sizeof *x->pending);
        if (!x->act || !x->grad || !x->ready || !x->pending)
            return pipe_fail(p, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    }
    return VKT_OK;
}

void pipe_edges_free(vkt_pipeline *p)
{
    for (uint32_t e = 0; p->edge && e < p->n_edge; e++) {
        free(p->edge[e].act);
        free(p->edge[e].grad);
        free(p->edge[e].ready);
        free(p->edge[e].pending);
    }
    free(p->edge);
    p->edge = NULL;
}

void pipe_edges_reset(vkt_pipeline *p)
{
    for (uint32_t e = 0; e < p->n_edge; e++) {
        memset(p->edge[e].ready, 0, p->m);
        for (uint32_t k = 0; k < p->m; k++)
            p->edge[e].pending[k] = p->edge[e].n_to;
    }
}

/* Edge i of stage s's list is done for micro-batch k (lock held). */
typedef int (*edge_done_fn)(const vkt_pipeline *p, const pstage *s, uint32_t i, uint32_t k);

static int value_here(const vkt_pipeline *p, const pstage *s, uint32_t i, uint32_t k)
{
    return p->edge[s->recv_edge[i]].ready[k];
}

static int grad_taken(const vkt_pipeline *p, const pstage *s, uint32_t i, uint32_t k)
{
    return p->edge[s->send_edge[i]].pending[k] == 0;
}

/* Waits until done() holds for each of n edges for micro-batch k (or a stage failed:
 * returns 0). */
static int wait_edges(pstage *s, uint32_t k, uint32_t n, edge_done_fn done)
{
    vkt_pipeline *p = s->p;
    plat_monitor_lock(p->mon);
    for (;;) {
        int all = 1;
        for (uint32_t j = 0; j < n && all; j++)
            all = done(p, s, j, k);
        if (all || p->failed)
            break;
        plat_monitor_wait(p->mon);
    }
    int ok = !p->failed;
    plat_monitor_unlock(p->mon);
    return ok;
}

/* Every received value of micro-batch k is there. */
int pipe_wait_values(pstage *s, uint32_t k)
{
    if (s->p->world)
        return pipe_world_wait_values(s, k);
    return wait_edges(s, k, s->gs->n_recv, value_here);
}

/* Every gradient this stage sent for micro-batch k has been taken by its readers. */
int pipe_wait_grads(pstage *s, uint32_t k)
{
    if (s->p->world)
        return pipe_world_wait_grads(s, k);
    return wait_edges(s, k, s->gs->n_send, grad_taken);
}

vkt_status pipe_recv_values(pstage *s, uint32_t k)
{
    vkt_pipeline *p = s->p;
    const graph_stage *gs = s->gs;
    for (uint32_t j = 0; j < gs->n_recv; j++) {
        const pedge *e = &p->edge[s->recv_edge[j]];
        vkt_status st = vkt_model_set_input(pipe_slot(s, k), gs->map[gs->recv[j]],
                                            e->act + k * e->elems, e->elems);
        if (st != VKT_OK)
            return pipe_model_fail(s, st, "received value");
    }
    return VKT_OK;
}

vkt_status pipe_send_values(pstage *s, uint32_t k)
{
    vkt_pipeline *p = s->p;
    const graph_stage *gs = s->gs;
    for (uint32_t j = 0; j < gs->n_send; j++) {
        pedge *e = &p->edge[s->send_edge[j]];
        vkt_status st = vkt_model_read(pipe_slot(s, k), gs->map[gs->send[j]], e->act + k * e->elems,
                                       e->elems);
        if (st != VKT_OK)
            return pipe_model_fail(s, st, "sending a value");
        s->sent += e->elems * 4;
        if (p->world) { /* the edge's world kind: a message to each consumer's rank */
            if ((st = pipe_world_send_value(s, j, k)) != VKT_OK)
                return st;
            continue;
        }
        plat_monitor_lock(p->mon);
        e->ready[k] = 1;
        plat_monitor_broadcast(p->mon);
        plat_monitor_unlock(p->mon);
    }
    return VKT_OK;
}

vkt_status pipe_send_grads(pstage *s, uint32_t k)
{
    vkt_pipeline *p = s->p;
    const graph_stage *gs = s->gs;
    for (uint32_t j = 0; j < gs->n_recv; j++) {
        pedge *e = &p->edge[s->recv_edge[j]];
        float *dst = e->grad + ((uint64_t)s->recv_slot[j] * p->m + k) * e->elems;
        vkt_status st = graph_model_read_input_grad(pipe_slot(s, k), gs->map[gs->recv[j]], dst,
                                                    e->elems);
        if (st != VKT_OK)
            return pipe_model_fail(s, st, "gradient of a received value");
        s->sent += e->elems * 4;
        if (p->world) { /* to the sender's rank */
            if ((st = pipe_world_send_grad(s, j, k)) != VKT_OK)
                return st;
            continue;
        }
        plat_monitor_lock(p->mon);
        e->pending[k]--;
        plat_monitor_broadcast(p->mon);
        plat_monitor_unlock(p->mon);
    }
    return VKT_OK;
}

vkt_status pipe_recv_grads(pstage *s, uint32_t k)
{
    vkt_pipeline *p = s->p;
    const graph_stage *gs = s->gs;
    for (uint32_t j = 0; j < gs->n_send; j++) {
        pedge *e = &p->edge[s->send_edge[j]];
        const float *g = e->grad + (uint64_t)k * e->elems; /* consumer 0's */
        if (e->n_to > 1) { /* consumers' contributions in stage order */
            for (uint64_t i = 0; i < e->elems; i++) {
                float sum = 0;
                for (uint32_t c = 0; c < e->n_to; c++)
                    sum += e->grad[((uint64_t)c * p->m + k) * e->elems + i];
                s->gsum[i] = sum;
            }
            g = s->gsum;
        }
        vkt_status st = vkt_model_set_input(pipe_slot(s, k), gs->send_grad[j], g, e->elems);
        if (st != VKT_OK)
            return pipe_model_fail(s, st, "gradient of a sent value");
    }
    return VKT_OK;
}
