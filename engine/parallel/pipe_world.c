/* pipe_world.c - pipeline stages across ranks (pipe_engine.h): with a world of R = P x D
 * ranks, rank r holds one context, copy r / P's stage r mod P, and the edges between
 * stages are point-to-point messages instead of host slots (the edge's "world" kind):
 *   - at a step's start the stage posts every receive of the step (world_irecv): the
 *     values of its m micro-batches from their producers, the gradients of what it sends
 *     from each consumer; so a message that arrives while the stage computes lands in its
 *     slot at once (Open MPI has no progress thread: each wait and test drives it);
 *   - after a forward, the values it sends go out (world_isend), tag 2 e (edge e); after
 *     a backward, the gradients of what it received, tag 2 e + 1. Between two ranks the
 *     messages of one tag match in the order sent, so micro-batch k meets receive k;
 *   - the slots are the host slots' (act, grad): the summing order of a value read by
 *     several stages is the same, so the results equal one process's bit for bit.
 * Every rank sends every message of the step once, even after a failure (then zeros), so
 * no peer waits for one that never comes; a wait that fails (deadline, a rank gone) marks
 * the world broken and the stage stops communicating: its message names the rank.
 * After the 1F1B order, one allreduce (the tail) sums [loss, stop, overflow, fail[R]] and, with
 * D > 1, every stage's gradient over its copies; every rank decides the same from it.
 * One thread calls MPI in each rank: the rank's one stage thread during a step, the
 * caller's thread otherwise (MPI_THREAD_SERIALIZED). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parallel/pipe_engine.h"

#define TAG_BASE 1000   /* clear of the parameter server's tags */
#define TAG_MAX 32767   /* MPI guarantees at least this upper bound */
#define TAIL_LOSS 0
#define TAIL_STOP 1
#define TAIL_OVERFLOW 2 /* guarded: stages whose gradient is not finite (pipe_set_scaler) */
#define TAIL_FAIL 3

static uint32_t rank_of(const vkt_pipeline *p, uint32_t copy, uint32_t stage)
{
    return copy * p->P + stage;
}

static int tag_of(uint32_t edge, int grad) { return TAG_BASE + 2 * (int)edge + grad; }

vkt_status pipe_world_place(vkt_pipeline *p)
{
    vkt_world *w = p->world;
    if (p->opt.sequential)
        return pipe_fail(p, VKT_ERROR_INVALID_ARGUMENT, "%s: the sequential baseline runs in "
                         "one process, not across ranks", p->opt.fn);
    if (w->size != p->P * p->D)
        return pipe_fail(p, VKT_ERROR_INVALID_ARGUMENT, "%s: %u ranks do not hold %u copies "
                         "of %u stages (one stage per rank: the ranks must be a multiple of the "
                         "stages)", p->opt.fn, w->size, p->D, p->P);
    if (tag_of(p->n_edge, 1) > TAG_MAX)
        return pipe_fail(p, VKT_ERROR_LIMIT, "%s: %u values cross stages; at most %d can "
                         "travel between ranks", p->opt.fn, p->n_edge, (TAG_MAX - TAG_BASE) / 2);
    p->here = w->rank;
    for (uint32_t i = 0; i < p->n_ctx; i++)
        p->st[i].local = i == p->here;
    pstage *s = &p->st[p->here];
    const graph_stage *gs = s->gs;
    uint64_t m = p->m;
    s->w.rv = calloc(gs->n_recv * m + 1, sizeof *s->w.rv);
    s->w.rg = calloc(gs->n_send * GRAPH_MAX_STAGES * m + 1, sizeof *s->w.rg);
    s->w.cap_sends = (uint32_t)((gs->n_send * GRAPH_MAX_STAGES + gs->n_recv) * m + 1);
    s->w.sends = calloc(s->w.cap_sends, sizeof *s->w.sends);
    s->w.sent_v = calloc(gs->n_send * m + 1, 1);
    s->w.sent_g = calloc(gs->n_recv * m + 1, 1);
    if (!s->w.rv || !s->w.rg || !s->w.sends || !s->w.sent_v || !s->w.sent_g)
        return pipe_fail(p, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    return VKT_OK;
}

void pipe_world_free(pstage *s)
{
    free(s->w.rv);
    free(s->w.rg);
    free(s->w.sends);
    free(s->w.sent_v);
    free(s->w.sent_g);
}

/* A transport failure: kept on the stage (naming the rank from the world's message); from
 * now on the stage makes no call on the world (each would wait out its deadline too). */
static vkt_status world_broken(pstage *s, vkt_status st, const char *what)
{
    s->p->world_broken = 1;
    return pipe_stage_fail(s, st, what, vkt_world_errmsg(s->p->world));
}

static world_req **grad_req(pstage *s, uint32_t j, uint32_t c, uint32_t k)
{
    return &s->w.rg[((uint64_t)j * GRAPH_MAX_STAGES + c) * s->p->m + k];
}

vkt_status pipe_world_begin(pstage *s)
{
    vkt_pipeline *p = s->p;
    const graph_stage *gs = s->gs;
    if (p->world_broken) /* receives of that step may still be posted: no step can match */
        return pipe_stage_fail(s, VKT_ERROR_STATE, "step", "a message between the ranks "
                               "failed in an earlier step; the pipeline cannot go on");
    s->w.n_sends = 0;
    memset(s->w.sent_v, 0, gs->n_send * (uint64_t)p->m);
    memset(s->w.sent_g, 0, gs->n_recv * (uint64_t)p->m);
    for (uint32_t k = 0; k < p->m; k++) {
        for (uint32_t j = 0; j < gs->n_recv; j++) {
            pedge *e = &p->edge[s->recv_edge[j]];
            if (world_irecv(p->world, rank_of(p, s->copy, e->from), tag_of(s->recv_edge[j], 0),
                            e->act + k * e->elems, e->elems * 4,
                            &s->w.rv[(uint64_t)j * p->m + k]) != VKT_OK)
                return world_broken(s, VKT_ERROR_INTERNAL, "posting a receive");
        }
        for (uint32_t j = 0; j < gs->n_send; j++) {
            pedge *e = &p->edge[s->send_edge[j]];
            for (uint32_t c = 0; c < e->n_to; c++)
                if (world_irecv(p->world, rank_of(p, s->copy, e->to[c]),
                                tag_of(s->send_edge[j], 1),
                                e->grad + ((uint64_t)c * p->m + k) * e->elems, e->elems * 4,
                                grad_req(s, j, c, k)) != VKT_OK)
                    return world_broken(s, VKT_ERROR_INTERNAL, "posting a receive");
        }
    }
    return VKT_OK;
}

/* Completes one posted receive (NULL: done already). */
static int wait_req(pstage *s, world_req **r, const char *what)
{
    if (!*r)
        return 1;
    vkt_status st = world_wait(s->p->world, *r);
    *r = NULL; /* freed by the wait, or left in flight by a failed one */
    if (st != VKT_OK) {
        world_broken(s, st, what);
        return 0;
    }
    return 1;
}

int pipe_world_wait_values(pstage *s, uint32_t k)
{
    if (s->p->world_broken)
        return 0;
    for (uint32_t j = 0; j < s->gs->n_recv; j++)
        if (!wait_req(s, &s->w.rv[(uint64_t)j * s->p->m + k], "receiving a value"))
            return 0;
    return 1;
}

int pipe_world_wait_grads(pstage *s, uint32_t k)
{
    if (s->p->world_broken)
        return 0;
    for (uint32_t j = 0; j < s->gs->n_send; j++)
        for (uint32_t c = 0; c < s->p->edge[s->send_edge[j]].n_to; c++)
            if (!wait_req(s, grad_req(s, j, c, k), "receiving a gradient"))
                return 0;
    return 1;
}

static vkt_status send(pstage *s, uint32_t dst, int tag, const float *buf, uint64_t elems)
{
    world_req *r = NULL;
    if (s->w.n_sends >= s->w.cap_sends)
        return pipe_stage_fail(s, VKT_ERROR_INTERNAL, "sending", "too many messages");
    vkt_status st = world_isend(s->p->world, dst, tag, buf, elems * 4, &r);
    if (st != VKT_OK)
        return world_broken(s, st, "sending");
    s->w.sends[s->w.n_sends++] = r;
    return VKT_OK;
}

vkt_status pipe_world_send_value(pstage *s, uint32_t j, uint32_t k)
{
    vkt_pipeline *p = s->p;
    pedge *e = &p->edge[s->send_edge[j]];
    vkt_status st = VKT_OK;
    s->w.sent_v[(uint64_t)j * p->m + k] = 1;
    for (uint32_t c = 0; c < e->n_to && st == VKT_OK && !p->world_broken; c++)
        st = send(s, rank_of(p, s->copy, e->to[c]), tag_of(s->send_edge[j], 0),
                  e->act + k * e->elems, e->elems);
    return st;
}

vkt_status pipe_world_send_grad(pstage *s, uint32_t j, uint32_t k)
{
    vkt_pipeline *p = s->p;
    pedge *e = &p->edge[s->recv_edge[j]];
    s->w.sent_g[(uint64_t)j * p->m + k] = 1;
    if (p->world_broken)
        return VKT_ERROR_STATE;
    return send(s, rank_of(p, s->copy, e->from), tag_of(s->recv_edge[j], 1),
                e->grad + ((uint64_t)s->recv_slot[j] * p->m + k) * e->elems, e->elems);
}

void pipe_world_end(pstage *s)
{
    vkt_pipeline *p = s->p;
    const graph_stage *gs = s->gs;
    /* what a failure left unsent: zeros, so that the peers finish their step */
    for (uint32_t k = 0; k < p->m && !p->world_broken; k++) {
        for (uint32_t j = 0; j < gs->n_send && !p->world_broken; j++)
            if (!s->w.sent_v[(uint64_t)j * p->m + k]) {
                pedge *e = &p->edge[s->send_edge[j]];
                memset(e->act + k * e->elems, 0, e->elems * 4);
                pipe_world_send_value(s, j, k);
            }
        for (uint32_t j = 0; j < gs->n_recv && !p->world_broken; j++)
            if (!s->w.sent_g[(uint64_t)j * p->m + k]) {
                pedge *e = &p->edge[s->recv_edge[j]];
                memset(e->grad + ((uint64_t)s->recv_slot[j] * p->m + k) * e->elems, 0,
                       e->elems * 4);
                pipe_world_send_grad(s, j, k);
            }
    }
    for (uint32_t k = 0; k < p->m && !p->world_broken; k++) {
        pipe_world_wait_values(s, k);
        pipe_world_wait_grads(s, k);
    }
    for (uint32_t i = 0; i < s->w.n_sends && !p->world_broken; i++) {
        vkt_status st = world_wait(p->world, s->w.sends[i]);
        s->w.sends[i] = NULL;
        if (st != VKT_OK)
            world_broken(s, st, "sending");
    }
    s->w.n_sends = 0;
}

/* The first step with copies: every stage's trained count (MAX over the ranks: each
 * rank fills its own stage's slot), the segments of the tail. */
static int stage_sizes(pstage *s)
{
    vkt_pipeline *p = s->p;
    uint64_t v[VKT_MAX_STAGES] = {0};
    v[s->index] = s->n_train;
    vkt_status st = world_allreduce_u64(p->world, v, p->P, WORLD_MAX, "the pipeline's sizes");
    if (st != VKT_OK) {
        world_broken(s, st, "the pipeline's sizes");
        return 0;
    }
    p->stage_train = calloc(p->P, sizeof *p->stage_train);
    if (!p->stage_train) {
        pipe_stage_fail(s, VKT_ERROR_OUT_OF_MEMORY, "tail", "out of host memory");
        p->world_broken = 1;
        return 0;
    }
    memcpy(p->stage_train, v, p->P * sizeof *v);
    return 1;
}

int pipe_world_tail(pstage *s)
{
    vkt_pipeline *p = s->p;
    vkt_world *w = p->world;
    /* sync copies sum their gradients here; async ones (per_copy) keep their own */
    int sums = p->D > 1 && !p->route->per_copy;
    if (p->world_broken)
        return 0;
    if (sums && !p->stage_train && !stage_sizes(s))
        return 0;
    uint64_t n = TAIL_FAIL + w->size;
    for (uint32_t k = 0; sums && k < p->P; k++)
        n += p->stage_train[k];
    double *v = calloc(n, sizeof *v);
    if (!v) {
        pipe_stage_fail(s, VKT_ERROR_OUT_OF_MEMORY, "tail", "out of host memory");
        p->world_broken = 1; /* the others time out naming this rank */
        return 0;
    }
    int failed = s->status != VKT_OK;
    v[TAIL_LOSS] = failed ? 0.0 : s->loss;
    v[TAIL_STOP] = p->stop_vote;
    v[TAIL_OVERFLOW] = !failed && s->nonfinite;
    v[TAIL_FAIL + w->rank] = failed;
    if (sums && !failed) { /* stage s's segment: this copy's weighted gradient */
        uint64_t at = TAIL_FAIL + w->size;
        for (uint32_t k = 0; k < s->index; k++)
            at += p->stage_train[k];
        memcpy(v + at, s->gacc, s->n_train * sizeof *v);
    }
    w->step = p->step + 1;
    vkt_status st = world_allreduce_f64(w, v, n, WORLD_SUM, "the pipeline's step");
    if (st != VKT_OK) {
        free(v);
        world_broken(s, st, "the step's tail");
        return 0;
    }
    p->world_loss = v[TAIL_LOSS];
    p->stopped = v[TAIL_STOP] > 0;
    p->overflow = v[TAIL_OVERFLOW] > 0; /* every stage skips, or none */
    p->remote_failed = UINT32_MAX;
    for (uint32_t r = 0; r < w->size && p->remote_failed == UINT32_MAX; r++)
        if (v[TAIL_FAIL + r] > 0 && r != w->rank)
            p->remote_failed = r;
    int go = !failed && p->remote_failed == UINT32_MAX && !p->stopped && !p->overflow;
    p->world_go = go;
    if (go && sums) { /* the sum over the copies replaces this copy's */
        uint64_t at = TAIL_FAIL + w->size;
        for (uint32_t k = 0; k < s->index; k++)
            at += p->stage_train[k];
        memcpy(s->gacc, v + at, s->n_train * sizeof *v);
    }
    free(v);
    return go;
}

/* Sync: the squares of every stage (copy 0's: the copies' sums are equal); async copies
 * (per_copy) clip by their own norm: one sum per copy, in slot `copy`. */
vkt_status pipe_world_squares(pstage *s, double *squares)
{
    vkt_pipeline *p = s->p;
    vkt_world *w = p->world;
    uint32_t n = p->route->per_copy ? p->D : 1;
    double *v = calloc(n, sizeof *v);
    if (!v) {
        p->world_broken = 1; /* the others time out naming this rank */
        return pipe_stage_fail(s, VKT_ERROR_OUT_OF_MEMORY, "clipping's norm",
                               "out of host memory");
    }
    v[n > 1 ? s->copy : 0] = *squares;
    w->step = p->step + 1;
    vkt_status st = world_allreduce_f64(w, v, n, WORLD_SUM, "the gradient's norm");
    *squares = v[n > 1 ? s->copy : 0];
    free(v);
    return st != VKT_OK ? world_broken(s, st, "clipping's norm") : VKT_OK;
}
