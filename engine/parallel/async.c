/* Asynchronous data parallelism (Hogwild!-style): each replica's thread pulls the host
 * master, runs forward, backward and its own optimizer on its rows, and adds the change
 * of its parameters to the master without a lock. The master's elements are relaxed
 * atomics: concurrent updates of one element may lose one another (the race the design
 * allows, docs/async.md) but never tear a value. Counters, gates and shutdown go
 * through the trainer's monitor and are race-free. */
#include "trainer.h"

#include <stdlib.h>
#include <string.h>

/* Epilogue after the optimizer: the updated parameters into the staging buffer. */
static vkt_status record_params_out(vkt_stream *s, void *user)
{
    replica *r = user;
    vkt_view p, g;
    uint64_t n;
    vkt_status st = graph_model_flat(r->model, &p, &g, &n);
    return st == VKT_OK ? vkt_stream_copy(s, p.buffer, 0, r->stage, 0, n * 4) : st;
}

vkt_status async_setup(vkt_trainer *t, replica *r)
{
    vkt_status st = graph_model_add_epilogue(r->model, record_params_out, r);
    if (st != VKT_OK)
        return trainer_from_model(t, r->model, st);
    r->pulled = malloc(vkt_model_param_count(r->model) * sizeof *r->pulled);
    return r->pulled ? VKT_OK : trainer_fail(t, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
}

vkt_status async_begin(vkt_trainer *t)
{
    uint64_t n = t->param_count;
    if (!t->master) {
        t->master = malloc(n * sizeof *t->master);
        t->pulls = calloc(t->n_rep, sizeof *t->pulls);
        t->pushes = calloc(t->n_rep, sizeof *t->pushes);
        t->push_lock = plat_monitor_create();
        if (!t->master || !t->pulls || !t->pushes || !t->push_lock)
            return trainer_fail(t, VKT_ERROR_OUT_OF_MEMORY, "out of host memory for the master");
    }
    /* The master starts from replica 0's parameters (all replicas start equal). */
    float *p = t->rep[0].pulled;
    vkt_status st = vkt_model_read_params(t->rep[0].model, p, n);
    if (st != VKT_OK)
        return trainer_from_model(t, t->rep[0].model, st);
    for (uint64_t i = 0; i < n; i++)
        atomic_init(&t->master[i], p[i]);
    atomic_init(&t->version, 0);
    for (uint32_t i = 0; i < t->n_rep; i++) {
        t->pulls[i] = t->pushes[i] = 0;
        t->rep[i].n_stale = 0;
    }
    t->failed = 0;
    t->stop = 0;
    return VKT_OK;
}

static uint64_t min_of(const uint64_t *v, uint32_t n)
{
    uint64_t m = v[0];
    for (uint32_t i = 1; i < n; i++)
        m = v[i] < m ? v[i] : m;
    return m;
}

/* Waits (under the monitor) until cond holds or a replica failed or a stop was asked.
 * Returns 1 to go on. */
static int wait_until_pull_allowed(replica *r, uint64_t k)
{
    vkt_trainer *t = r->t;
    double t0 = plat_now();
    plat_monitor_lock(t->mon);
    while (!t->failed && !t->stop && t->opt.bounded_staleness &&
           min_of(t->pushes, t->n_rep) + t->opt.staleness < k)
        plat_monitor_wait(t->mon);
    int go = !t->failed && !t->stop;
    plat_monitor_unlock(t->mon);
    r->stats.wait_seconds += plat_now() - t0;
    return go;
}

/* Staleness 0: no replica pushes step k before every replica pulled for step k. */
static int wait_until_push_allowed(replica *r, uint64_t k)
{
    vkt_trainer *t = r->t;
    if (!t->opt.bounded_staleness || t->opt.staleness != 0)
        return 1;
    double t0 = plat_now();
    plat_monitor_lock(t->mon);
    while (!t->failed && min_of(t->pulls, t->n_rep) < k + 1)
        plat_monitor_wait(t->mon);
    int go = !t->failed;
    plat_monitor_unlock(t->mon);
    r->stats.wait_seconds += plat_now() - t0;
    return go;
}

static void count(replica *r, uint64_t *counter)
{
    vkt_trainer *t = r->t;
    plat_monitor_lock(t->mon);
    counter[r->index]++;
    plat_monitor_broadcast(t->mon);
    plat_monitor_unlock(t->mon);
}

static void pull(replica *r)
{
    vkt_trainer *t = r->t;
    for (uint64_t i = 0; i < t->param_count; i++)
        r->pulled[i] = atomic_load_explicit(&t->master[i], memory_order_relaxed);
    vkt_status st = vkt_model_write_params(r->model, r->pulled, t->param_count);
    if (st != VKT_OK)
        replica_fail(r, st, "%s", vkt_model_errmsg(r->model));
}

/* master += new - pulled, element by element. Unbounded (Hogwild!): lock-free, so two
 * replicas adding to one element at once may lose one addition. With a staleness bound
 * (stale-synchronous parallel) no update may be lost: pushes take a lock, reads never
 * do (they may see a push half done, which SSP allows for updates newer than the
 * bound; with bound 0 the gates keep every read of a step after every push of the
 * step before, so reads see whole updates and the result equals sync). */
static void push(replica *r, uint64_t version_at_pull)
{
    vkt_trainer *t = r->t;
    const float *now = r->stage_host;
    if (t->opt.bounded_staleness)
        plat_monitor_lock(t->push_lock);
    for (uint64_t i = 0; i < t->param_count; i++) {
        float m = atomic_load_explicit(&t->master[i], memory_order_relaxed);
        atomic_store_explicit(&t->master[i], m + (now[i] - r->pulled[i]), memory_order_relaxed);
    }
    if (t->opt.bounded_staleness)
        plat_monitor_unlock(t->push_lock);
    uint64_t v = atomic_fetch_add(&t->version, 1);
    if (r->n_stale == r->cap_stale) {
        uint64_t cap = r->cap_stale ? 2 * r->cap_stale : 1024;
        uint64_t *s = realloc(r->stale, cap * sizeof *s);
        if (!s)
            return; /* staleness statistics only */
        r->stale = s;
        r->cap_stale = cap;
    }
    r->stale[r->n_stale++] = v - version_at_pull;
}

static void one_update(replica *r, uint64_t k)
{
    vkt_trainer *t = r->t;
    double t0 = plat_now();
    trainer_slow_down(r);
    uint64_t v0 = atomic_load(&t->version);
    pull(r);
    count(r, t->pulls);
    if (r->status == VKT_OK)
        trainer_next_batch(r);
    if (r->status == VKT_OK) {
        trainer_set_step(r, t->steps + k);
        trainer_forward_backward(r, t->steps + k);
    }
    r->stats.step_seconds += plat_now() - t0;
    if (r->status != VKT_OK || !wait_until_push_allowed(r, k))
        return;
    push(r, v0);
    count(r, t->pushes);
    r->stats.steps++;
}

void async_job_steps(replica *r)
{
    vkt_trainer *t = r->t;
    for (uint64_t k = 0; k < t->run_steps && r->status == VKT_OK; k++) {
        if (!wait_until_pull_allowed(r, k))
            break;
        one_update(r, k);
        if (r->index == 0 && r->status == VKT_OK && t->progress &&
            trainer_progress(r, k, r->loss)) {
            plat_monitor_lock(t->mon);
            t->stop = 1;
            plat_monitor_broadcast(t->mon);
            plat_monitor_unlock(t->mon);
        }
    }
    if (r->status != VKT_OK) { /* the others stop at their next gate or step */
        plat_monitor_lock(t->mon);
        t->failed = 1;
        t->stop = 1;
        plat_monitor_broadcast(t->mon);
        plat_monitor_unlock(t->mon);
    }
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void staleness_stats(vkt_trainer *t)
{
    uint64_t n = 0;
    for (uint32_t i = 0; i < t->n_rep; i++)
        n += t->rep[i].n_stale;
    uint64_t *all = n ? malloc(n * sizeof *all) : NULL;
    if (!all)
        return;
    uint64_t k = 0;
    double sum = 0;
    for (uint32_t i = 0; i < t->n_rep; i++)
        for (uint64_t j = 0; j < t->rep[i].n_stale; j++)
            sum += (double)(all[k++] = t->rep[i].stale[j]);
    qsort(all, n, sizeof *all, cmp_u64);
    t->stats.staleness_mean = sum / (double)n;
    t->stats.staleness_p99 = all[(uint64_t)((double)(n - 1) * 0.99)];
    t->stats.staleness_max = all[n - 1];
    t->stats.updates = n;
    free(all);
}

vkt_status async_end(vkt_trainer *t)
{
    staleness_stats(t);
    float *p = t->rep[0].pulled;
    for (uint64_t i = 0; i < t->param_count; i++)
        p[i] = atomic_load_explicit(&t->master[i], memory_order_relaxed);
    for (uint32_t i = 0; i < t->n_rep; i++) {
        vkt_status st = vkt_model_write_params(t->rep[i].model, p, t->param_count);
        if (st != VKT_OK)
            return trainer_from_model(t, t->rep[i].model, st);
    }
    return VKT_OK;
}
