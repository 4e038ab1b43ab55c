/* pipe_async.c - async copies of the pipeline in one process (pipe_engine.h's async
 * routes; docs/async.md, "Pipeline stages"); across ranks the masters are
 * pipe_async_world.c's and only the staleness counts here serve (pipe_async_count).
 *
 * The master exchange of async replicas (exchange_master.c) stage by stage: stage s has
 * one master, its trained parameters as relaxed atomics, shared by the D copies of the
 * stage. After its micro-batches each copy's stages meet (every stage of a copy updates
 * or none does: pipe_sched.c's per-copy meeting), each applies its own optimizer to its
 * own gradient (the copy's share of the batch, 1 / D) and pushes the change of its
 * parameters into its stage's master, without waiting for the other copies' gradients:
 *     master[i] += new[i] - pulled[i]     (a relaxed load and store: a concurrent push to
 *                                          the same element may be lost, as Hogwild!'s)
 * With a staleness bound (bounded) pushes take the master's lock: none is lost.
 *
 * The engine's step is one call (pipe_step) whose threads are joined at its end, so the
 * copies still meet once per step there. Each copy's pull of step k + 1 is therefore the
 * end of step k (pipe_async_end: every copy's trained parameters := its stage's master,
 * its states, e.g. batch norm's running averages, stay its own), and every master is
 * seeded from copy 0's parameters at the step's start (pipe_async_begin: they equal the
 * master of the step before unless the caller wrote parameters in between, which reach
 * every copy). The staleness of a push, measured as the replicas' (master updates between
 * a copy's pull and its push), is then the other copies' pushes into the same master
 * earlier in the step: 0 to D - 1, below any bound (D - 1)(2s + 1) of async replicas.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "parallel/pipe_engine.h"

struct pipe_master {
    uint64_t n_train, n_params; /* stage s's (copy 0's: every copy's alike) */
    _Atomic float *v;           /* [n_train] */
    float *seed;                /* [n_params] what every copy pulled: copy 0's parameters at
                                   the step's start */
    atomic_uint_fast64_t version; /* pushes since creation */
    uint64_t at_pull;           /* the version at the step's start */
    int pushed;                 /* under lock: some copy pushed this step */
    uint64_t *count;            /* [D] under lock: pushes by their staleness */
    uint64_t *world;            /* [D] across ranks: every rank's counts summed (under lock;
                                   pipe_staleness_gather) */
    plat_monitor *lock;
};

vkt_status pipe_async_make(vkt_pipeline *p)
{
    p->master = calloc(p->P, sizeof *p->master);
    if (!p->master)
        return pipe_fail(p, VKT_ERROR_OUT_OF_MEMORY, "out of host memory for the masters");
    for (uint32_t s = 0; s < p->P; s++) {
        pipe_master *ms = &p->master[s];
        pstage *c0 = p->world ? NULL : ctx_of(p, 0, s); /* across ranks: counts only */
        ms->n_train = c0 ? c0->n_train : 0;
        ms->n_params = c0 ? c0->n_params : 0;
        ms->v = malloc((ms->n_train ? ms->n_train : 1) * sizeof *ms->v);
        ms->seed = malloc((ms->n_params ? ms->n_params : 1) * sizeof *ms->seed);
        ms->count = calloc(2 * (uint64_t)p->D, sizeof *ms->count);
        ms->world = ms->count + p->D;
        ms->lock = plat_monitor_create();
        atomic_init(&ms->version, 0);
        if (!ms->v || !ms->seed || !ms->count || !ms->lock)
            return pipe_fail(p, VKT_ERROR_OUT_OF_MEMORY, "out of host memory for the masters");
    }
    return VKT_OK;
}

void pipe_async_free(vkt_pipeline *p)
{
    for (uint32_t s = 0; p->master && s < p->P; s++) {
        free((void *)p->master[s].v);
        free(p->master[s].seed);
        free(p->master[s].count);
        if (p->master[s].lock)
            plat_monitor_destroy(p->master[s].lock);
    }
    free(p->master);
    p->master = NULL;
}

vkt_status pipe_async_begin(vkt_pipeline *p)
{
    for (uint32_t s = 0; s < p->P; s++) {
        pipe_master *ms = &p->master[s];
        pstage *c0 = ctx_of(p, 0, s);
        ms->pushed = 0;
        if (!ms->n_train)
            continue; /* nothing trained on this stage */
        vkt_status st = vkt_model_read_params(c0->model, ms->seed, ms->n_params);
        if (st != VKT_OK)
            return pipe_fail(p, st, "stage %u: seeding its master: %s", s,
                             vkt_model_errmsg(c0->model));
        for (uint64_t i = 0; i < ms->n_train; i++)
            atomic_store_explicit(&ms->v[i], ms->seed[i], memory_order_relaxed);
        ms->at_pull = atomic_load(&ms->version);
    }
    return VKT_OK;
}

/* The async host route's gather: the copy's own sum (read_sum weighed it 1 / (m D)),
 * unscaled, into gtmp; its squares, for clipping by the norm over the copy's stages. */
double pipe_async_gather(pstage *s)
{
    double unscale = 1.0 / s->p->scale, squares = 0;
    for (uint64_t i = 0; i < s->n_train; i++) {
        s->gtmp[i] = (float)(s->gacc[i] * unscale);
        squares += (double)s->gtmp[i] * s->gtmp[i];
    }
    for (uint64_t i = s->n_train; i < s->n_params; i++)
        s->gtmp[i] = 0.0f;
    return squares;
}

/* master += new - seed. Where the master still holds the seed (no other copy changed the
 * element yet) it takes `new` itself: the same sum, without its rounding, so one copy
 * trains exactly as the sync engine. */
vkt_status pipe_async_push(pstage *s)
{
    vkt_pipeline *p = s->p;
    pipe_master *ms = &p->master[s->index];
    vkt_status st = vkt_model_read_params(s->model, s->gtmp, s->n_params);
    if (st != VKT_OK)
        return pipe_model_fail(s, st, "reading its parameters for the push");
    if (p->opt.bounded)
        plat_monitor_lock(ms->lock);
    for (uint64_t i = 0; i < ms->n_train; i++) {
        float m = atomic_load_explicit(&ms->v[i], memory_order_relaxed), was = ms->seed[i];
        float now = m == was ? s->gtmp[i] : m + (s->gtmp[i] - was);
        atomic_store_explicit(&ms->v[i], now, memory_order_relaxed);
    }
    if (p->opt.bounded)
        plat_monitor_unlock(ms->lock);
    uint64_t stale = atomic_fetch_add(&ms->version, 1) - ms->at_pull;
    plat_monitor_lock(ms->lock);
    ms->count[stale < p->D ? stale : p->D - 1]++; /* below D: D pushes a step */
    ms->pushed = 1;
    plat_monitor_unlock(ms->lock);
    return VKT_OK;
}

vkt_status pipe_async_end(vkt_pipeline *p)
{
    vkt_status first = VKT_OK;
    for (uint32_t i = 0; i < p->n_ctx; i++) {
        pstage *s = &p->st[i];
        pipe_master *ms = &p->master[s->index];
        if (!ms->pushed || !ms->n_train)
            continue; /* the master is the seed: every copy holds it */
        vkt_status st = VKT_OK;
        if (ms->n_params > ms->n_train) /* its own states behind the trained values */
            st = vkt_model_read_params(s->model, s->gtmp, s->n_params);
        for (uint64_t k = 0; st == VKT_OK && k < ms->n_train; k++)
            s->gtmp[k] = atomic_load_explicit(&ms->v[k], memory_order_relaxed);
        if (st == VKT_OK)
            st = vkt_model_write_params(s->model, s->gtmp, s->n_params);
        if (st != VKT_OK && first == VKT_OK)
            first = pipe_fail(p, st, "stage %u of copy %u: pulling its master: %s", s->index,
                              s->copy, vkt_model_errmsg(s->model));
    }
    return first;
}

void pipe_async_count(vkt_pipeline *p, uint32_t s, uint64_t stale)
{
    pipe_master *ms = &p->master[s];
    plat_monitor_lock(ms->lock);
    ms->count[stale < p->D ? stale : p->D - 1]++;
    plat_monitor_unlock(ms->lock);
}

vkt_status pipe_staleness_gather(vkt_pipeline *p)
{
    if (!p->world || !p->master)
        return VKT_OK;
    uint64_t *v = calloc((uint64_t)p->P * p->D, sizeof *v);
    if (!v)
        return pipe_fail(p, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    for (uint32_t s = 0; s < p->P; s++) {
        plat_monitor_lock(p->master[s].lock);
        memcpy(v + (uint64_t)s * p->D, p->master[s].count, p->D * sizeof *v);
        plat_monitor_unlock(p->master[s].lock);
    }
    vkt_status st = world_allreduce_u64(p->world, v, (uint64_t)p->P * p->D, WORLD_SUM,
                                        "the staleness counts");
    for (uint32_t s = 0; st == VKT_OK && s < p->P; s++) {
        plat_monitor_lock(p->master[s].lock);
        memcpy(p->master[s].world, v + (uint64_t)s * p->D, p->D * sizeof *v);
        plat_monitor_unlock(p->master[s].lock);
    }
    free(v);
    return st == VKT_OK ? st : pipe_fail(p, st, "%s", vkt_world_errmsg(p->world));
}

void pipe_staleness(const vkt_pipeline *p, uint32_t stage, double *mean, uint64_t *p99,
                    uint64_t *max, uint64_t *updates)
{
    uint64_t n = 0, sum = 0, top = 0;
    uint64_t *by = calloc(p->D, sizeof *by); /* pushes by staleness, pooled */
    for (uint32_t s = 0; by && p->master && s < p->P; s++)
        for (uint32_t v = 0; (stage == UINT32_MAX || stage == s) && v < p->D; v++) {
            plat_monitor_lock(p->master[s].lock);
            uint64_t c = (p->world ? p->master[s].world : p->master[s].count)[v];
            plat_monitor_unlock(p->master[s].lock);
            by[v] += c;
            n += c;
            sum += c * v;
            top = c && v > top ? v : top;
        }
    uint64_t at = n ? (uint64_t)((double)(n - 1) * 0.99) : 0, seen = 0, q = 0;
    for (uint32_t v = 0; by && n && v < p->D; v++) { /* the (n - 1) 0.99-th, sorted */
        q = v;
        if ((seen += by[v]) > at)
            break;
    }
    free(by);
    *mean = n ? (double)sum / (double)n : 0.0;
    *p99 = q;
    *max = top;
    *updates = n;
}
