/* pipe_edge.c - the values and gradients that cross stages (pipe_engine.h's pipe_edges
 * rows), per copy. The host and world rows keep them in host memory: act[k] the value of
 * micro-batch k sent forward; grad[c][k] the gradient consumer stage c sends back (one
 * slot per consumer, summed by the sender in stage order, so the result does not depend
 * on timing); the world row's slots are filled by messages (pipe_world.c). The device
 * row is pipe_edge_device.c's, the import row pipe_edge_import.c's. The pipeline's monitor guards the flags of every copy; a
 * failing stage sets `failed` and wakes everybody. */
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
        x->ready = calloc(p->m, 1);
        x->pending = calloc(p->m, sizeof *x->pending);
        if (!x->ready || !x->pending)
            return pipe_fail(p, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    }
    return VKT_OK;
}

/* The host slots act and grad of every edge: the host and world rows' (pipe_edges_start,
 * once the row is known; the device row keeps its values in device buffers). */
static vkt_status host_slots(vkt_pipeline *p)
{
    for (uint32_t e = 0; e < p->n_edge; e++) {
        pedge *x = &p->edge[e];
        x->act = malloc(p->m * x->elems * sizeof *x->act);
        x->grad = malloc((uint64_t)x->n_to * p->m * x->elems * sizeof *x->grad);
        if (!x->act || !x->grad)
            return pipe_fail(p, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    }
    return VKT_OK;
}

/* VKT_PIPE_EDGES: "host" forces the rows through host memory, "device" asks for the
 * device row, "import" for the import row (an error where it does not fit; *forced set),
 * unset or empty: device where it fits. VKT_HOST_IMPORT (the replicas' averaging) does
 * not pick the import row: stages take it only where asked (docs/model_parallel.md). */
static vkt_status edges_asked(vkt_pipeline *p, int *forced)
{
    const char *v = plat_getenv("VKT_PIPE_EDGES");
    *forced = v && (strcmp(v, "device") == 0 || strcmp(v, "import") == 0);
    if (!v || !*v)
        return VKT_OK;
    if (strcmp(v, "host") == 0) {
        p->edges = pipe_edges_pick_host(p);
        return VKT_OK;
    }
    if (strcmp(v, "import") == 0) {
        char why[VKT_ERRMSG_SIZE / 2];
        if (!pipe_edges_import_fits(p, why, sizeof why))
            return pipe_fail(p, VKT_ERROR_INVALID_ARGUMENT, "VKT_PIPE_EDGES=import: %s", why);
        p->edges = &pipe_edges_import;
        return VKT_OK;
    }
    if (strcmp(v, "device") != 0)
        return pipe_fail(p, VKT_ERROR_INVALID_ARGUMENT, "VKT_PIPE_EDGES='%s': host, device, "
                         "import or unset (device where every stage of a copy shares one "
                         "VkDevice)", v);
    if (p->edges != &pipe_edges_device)
        return pipe_fail(p, VKT_ERROR_INVALID_ARGUMENT, "VKT_PIPE_EDGES=device: %s",
                         p->world ? "stages across ranks send their edges as messages"
                         : graph_model_checks(p->st[0].model) /* options or VKT_CHECK */
                             ? "check mode runs a step's parts on their own"
                         : p->n_edge == 0 ? "no value crosses stages"
                         : "the stages of a copy do not share one VkDevice (list them on one "
                           "device, with VKT_SHARE_DEVICE=1 where it has fewer queues than "
                           "stages) or it has no timeline semaphores");
    return VKT_OK;
}

vkt_status pipe_edges_start(vkt_pipeline *p)
{
    int forced = 0;
    p->edges = pipe_edges_pick(p);
    vkt_status st = edges_asked(p, &forced);
    if (st != VKT_OK)
        return st;
    if (p->edges == &pipe_edges_import)
        return pipe_edges_import_make(p);
    if (p->edges == &pipe_edges_device) {
        st = pipe_edges_device_make(p);
        if (st != VKT_ERROR_OUT_OF_MEMORY || forced)
            return st;
        pipe_edges_device_free(p); /* the host's slots need no device memory */
        p->errmsg[0] = 0;
        p->edges = pipe_edges_pick_host(p);
    }
    return host_slots(p);
}

vkt_status pipe_edges_record(vkt_pipeline *p)
{
    if (p->edges == &pipe_edges_import)
        return pipe_edges_import_record(p);
    return p->edges == &pipe_edges_device ? pipe_edges_device_record(p) : VKT_OK;
}

void pipe_edges_free(vkt_pipeline *p)
{
    pipe_edges_device_free(p); /* the copies of both device rows, the device row's buffers */
    pipe_edges_import_free(p);
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
    for (uint32_t i = 0; i < p->n_ctx; i++) /* the device row's next run: nothing yet */
        p->st[i].dev.n_before = p->st[i].dev.n_after = p->st[i].dev.n_wait = 0;
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

/* Every received value of micro-batch k is there (host: read back; device: submitted). */
int pipe_host_wait_values(pstage *s, uint32_t k)
{
    return wait_edges(s, k, s->gs->n_recv, value_here);
}

/* Every consumer of what this stage sent for micro-batch k has sent its gradient. */
int pipe_host_wait_grads(pstage *s, uint32_t k)
{
    return wait_edges(s, k, s->gs->n_send, grad_taken);
}

/* host, world: value k ready to its consumers (under the monitor). */
void pipe_edge_announce_value(vkt_pipeline *p, pedge *e, uint32_t k)
{
    plat_monitor_lock(p->mon);
    e->ready[k] = 1;
    plat_monitor_broadcast(p->mon);
    plat_monitor_unlock(p->mon);
}

/* A consumer's gradient of value k sent back (under the monitor). */
void pipe_edge_announce_grad(vkt_pipeline *p, pedge *e, uint32_t k)
{
    plat_monitor_lock(p->mon);
    e->pending[k]--;
    plat_monitor_broadcast(p->mon);
    plat_monitor_unlock(p->mon);
}

static vkt_status recv_values(pstage *s, uint32_t k)
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

/* The values of micro-batch k read back into act[k]; then to the consumers (host: their
 * flag; world: messages). */
static vkt_status send_values(pstage *s, uint32_t k, int world)
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
        s->host_sent += e->elems * 4;
        if (world) /* a message to each consumer's rank */
            st = pipe_world_send_value(s, j, k);
        else
            pipe_edge_announce_value(p, e, k);
        if (st != VKT_OK)
            return st;
    }
    return VKT_OK;
}
static vkt_status host_send_values(pstage *s, uint32_t k) { return send_values(s, k, 0); }
static vkt_status world_send_values(pstage *s, uint32_t k) { return send_values(s, k, 1); }

/* The gradients of micro-batch k's received values read back into the consumer's slot of
 * grad; then to their senders. */
static vkt_status send_grads(pstage *s, uint32_t k, int world)
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
        s->host_sent += e->elems * 4;
        if (world) /* to the sender's rank */
            st = pipe_world_send_grad(s, j, k);
        else
            pipe_edge_announce_grad(p, e, k);
        if (st != VKT_OK)
            return st;
    }
    return VKT_OK;
}
static vkt_status host_send_grads(pstage *s, uint32_t k) { return send_grads(s, k, 0); }
static vkt_status world_send_grads(pstage *s, uint32_t k) { return send_grads(s, k, 1); }

/* The gradients of what s sent for micro-batch k, summed over the consumers in stage order
 * (from consumer 0's: as the device row sums), into its inputs. */
static vkt_status recv_grads(pstage *s, uint32_t k)
{
    vkt_pipeline *p = s->p;
    const graph_stage *gs = s->gs;
    for (uint32_t j = 0; j < gs->n_send; j++) {
        pedge *e = &p->edge[s->send_edge[j]];
        const float *g = e->grad + (uint64_t)k * e->elems; /* consumer 0's */
        if (e->n_to > 1) { /* consumers' contributions in stage order */
            for (uint64_t i = 0; i < e->elems; i++) {
                float sum = g[i];
                for (uint32_t c = 1; c < e->n_to; c++)
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

/* host, world: the stage's thread writes the fed rows before each run. */
static vkt_status no_begin(vkt_pipeline *p)
{
    (void)p;
    return VKT_OK;
}

/* host, world: nothing rides with the run (the host sends after it). */
static vkt_status no_arm(pstage *s, uint32_t k, int values, int grads)
{
    (void)s;
    (void)k;
    (void)values;
    (void)grads;
    return VKT_OK;
}

static const pipe_edges rows[] = {
    {"host", pipe_host_wait_values, pipe_host_wait_grads, recv_values, recv_grads, no_arm,
     host_send_values, host_send_grads, no_begin, 0},
    {"world", pipe_world_wait_values, pipe_world_wait_grads, recv_values, recv_grads, no_arm,
     world_send_values, world_send_grads, no_begin, 0},
};

/* world across ranks; device where pipe_edges_device_fits (every stage of each copy on one
 * VkDevice with timelines, no check mode); else host. */
const pipe_edges *pipe_edges_pick(const vkt_pipeline *p)
{
    if (!p->world && pipe_edges_device_fits(p))
        return &pipe_edges_device;
    return pipe_edges_pick_host(p);
}

/* The rows through host memory: world across ranks, else host. */
const pipe_edges *pipe_edges_pick_host(const vkt_pipeline *p)
{
    return &rows[p->world ? 1 : 0];
}
