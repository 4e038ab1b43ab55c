/* reduce_host.c - the host reducer (reduce.h): synchronous data parallelism within one
 * process. Every replica's step copies each gradient into the replica's host-visible
 * stage right after the backward completes it; a pool of host threads sized to the cores
 * then averages them (chunks of the gradient, the vectorized sum of reduce_sum.h), and
 * every replica applies the same update. Also the local sum the world reducer wraps. */
#include <stdlib.h>
#include <string.h>

#include "parallel/reduce.h"
#include "parallel/reduce_sum.h"

typedef struct host_reducer {
    reducer base;
    reduce_pool *pool;         /* the threads that sum (replica threads 0..callers-1 and
                                  helpers), made at start */
} host_reducer;

vkt_status reduce_host_copy_out(replica *r, vkt_stream *s, uint64_t offset, uint64_t count)
{
    vkt_view p, g;
    uint64_t n;
    vkt_status st = graph_model_flat(r->model, &p, &g, &n);
    if (st == VKT_OK)
        st = vkt_stream_copy(s, g.buffer, offset * 4, r->stage, offset * 4, count * 4);
    return st;
}

/* Recorded right after the backward step that completes a parameter's gradient: that
 * gradient into the replica's staging buffer, so on devices that overlap independent
 * commands the copy runs while earlier layers' backward still computes. */
static vkt_status record_grad_out(vkt_stream *s, void *user, uint64_t offset, uint64_t count)
{
    return reduce_host_copy_out(user, s, offset, count);
}

static vkt_status host_attach(reducer *rd, replica *r)
{
    vkt_status st = graph_model_on_grad_ready(r->model, record_grad_out, r);
    return st == VKT_OK ? VKT_OK : trainer_from_model(rd->t, r->model, st);
}

void reduce_host_sum(const reducer *local, uint64_t at, float *dst, uint64_t n)
{
    const vkt_trainer *t = local->t;
    const float *src[TRAINER_MAX_REPLICAS];
    float w[TRAINER_MAX_REPLICAS];
    for (uint32_t q = 0; q < t->n_rep; q++) {
        src[q] = t->rep[q].stage_host + at;
        w[q] = t->rep[q].weight;
    }
    reduce_sum(&dst, 1, src, w, t->n_rep, n);
}

void reduce_host_scatter(const reducer *local, uint64_t at, const float *src, uint64_t n)
{
    const vkt_trainer *t = local->t;
    for (uint32_t q = 0; q < t->n_rep; q++)
        memcpy(t->rep[q].stage_host + at, src, n * sizeof *src);
}

/* The pool's job: elements [c0, c1) of the weighted average, written back into every
 * replica's stage. The sum runs over the replicas in index order, so every replica gets
 * the same bits. */
static void reduce_chunk(void *user, uint64_t c0, uint64_t c1)
{
    vkt_trainer *t = user;
    float *stage[TRAINER_MAX_REPLICAS], w[TRAINER_MAX_REPLICAS];
    for (uint32_t q = 0; q < t->n_rep; q++) {
        stage[q] = t->rep[q].stage_host + c0;
        w[q] = t->rep[q].weight;
    }
    reduce_sum(stage, t->n_rep, (const float *const *)stage, w, t->n_rep, c1 - c0);
}

static vkt_status host_start(reducer *rd)
{
    host_reducer *h = (host_reducer *)rd;
    vkt_trainer *t = rd->t;
    /* the bytes one step's sum moves: every stage read, the average written to each */
    uint32_t threads = reduce_pool_size(2ull * t->n_rep * t->grad_count * 4, plat_cpu_count());
    uint32_t callers = threads < t->n_rep ? threads : t->n_rep;
    vkt_status st = reduce_pool_create(callers, threads - callers, &h->pool);
    return st == VKT_OK ? VKT_OK
                        : trainer_fail(t, st, "cannot start the averaging's %u threads", threads);
}

static uint32_t host_threads(const reducer *rd)
{
    const host_reducer *h = (const host_reducer *)rd;
    return h->pool ? reduce_pool_threads(h->pool) : rd->t->n_rep;
}

/* Every replica reaches both barriers whatever happens, and leaves when any of them
 * voted a failure. */
static int host_exchange(reducer *rd, replica *r, uint64_t step)
{
    (void)step;
    vkt_trainer *t = rd->t;
    reduce_pool *pool = ((host_reducer *)rd)->pool;
    double t1 = plat_now();
    if (plat_barrier_wait(t->barrier, r->status != VKT_OK))
        return 1;
    double t2 = plat_now();
    r->stats.wait_seconds += t2 - t1;
    if (r->index < reduce_pool_callers(pool)) /* the states have no gradient */
        reduce_pool_run(pool, r->index, reduce_chunk, t, t->grad_count);
    plat_barrier_wait(t->barrier, 0);
    if (r->index == 0)
        t->avg_seconds += plat_now() - t2;
    return 0;
}

static int host_go_on(reducer *rd, replica *r, int vote)
{
    (void)r;
    return !plat_barrier_wait(rd->t->barrier, vote);
}

double reduce_local_loss(const vkt_trainer *t)
{
    double loss = 0;
    for (uint32_t q = 0; q < t->n_rep; q++)
        loss += (double)t->rep[q].weight * t->rep[q].loss;
    return loss;
}

static double host_mean_loss(const reducer *rd) { return reduce_local_loss(rd->t); }
static int host_batch_unused(const reducer *rd)
{
    (void)rd;
    return 0;
}

static vkt_status host_create(vkt_trainer *t, vkt_world *w, reducer **out)
{
    (void)w;
    host_reducer *h = calloc(1, sizeof *h);
    if (!h)
        return trainer_fail(t, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    h->base = (reducer){&reduce_host_ops, t, 0};
    h->pool = NULL;
    *out = &h->base;
    return VKT_OK;
}

static void host_destroy(reducer *rd)
{
    reduce_pool_destroy(((host_reducer *)rd)->pool);
    free(rd);
}

const reduce_ops reduce_host_ops = {
    .name = "host",
    .create = host_create,
    .destroy = host_destroy,
    .attach = host_attach,
    .start = host_start,
    .threads = host_threads,
    .submit_only = 0,
    .exchange = host_exchange,
    .go_on = host_go_on,
    .applied = NULL,
    .mean_loss = host_mean_loss,
    .batch_unused = host_batch_unused,
};
