/* exchange_master.c - the master exchange (exchange.h): asynchronous data parallelism
 * in one process (Hogwild!-style). Each replica's thread pulls the host master, runs
 * forward, backward and its own optimizer on its rows, and adds the change of its
 * parameters to the master without a lock. The master's elements are relaxed atomics:
 * concurrent updates of one element may lose one another (the race the design allows,
 * docs/async.md) but never tear a value. Counters, gates and shutdown go through the
 * trainer's monitor and are race-free. Also what both exchanges share: a replica's new
 * parameters out of its step (exchange_attach). */
#include "parallel/exchange.h"
#include "parallel/apply.h"
#include "parallel/exec.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

typedef struct master {
    exchange base;
    _Atomic float *master;
    atomic_uint_fast64_t version;  /* master updates so far */
    uint64_t *pulls, *pushes;      /* per replica, under the trainer's monitor */
    plat_monitor *push_lock;       /* bounded staleness: pushes one at a time */
    int failed;                    /* under the monitor: a replica failed, the others stop */
    exchange_stale stale[TRAINER_MAX_REPLICAS];
} master;

static master *of(exchange *x) { return (master *)x; }

/* Epilogue after the optimizer: the updated parameters into the staging buffer. */
static vkt_status record_params_out(vkt_stream *s, void *user)
{
    replica *r = user;
    vkt_view p, g;
    uint64_t n;
    vkt_status st = graph_model_flat(r->model, &p, &g, &n);
    return st == VKT_OK ? vkt_stream_copy(s, p.buffer, 0, r->stage, 0, n * 4) : st;
}

vkt_status exchange_attach(exchange *x, replica *r)
{
    vkt_trainer *t = x->t;
    vkt_status st = graph_model_add_epilogue(r->model, record_params_out, r);
    if (st != VKT_OK)
        return trainer_from_model(t, r->model, st);
    /* the pull: host-visible upload -> parameters, then a barrier for the step after it */
    uint64_t n = vkt_model_param_count(r->model);
    vkt_view p, g;
    uint64_t trained;
    graph_model_flat(r->model, &p, &g, &trained);
    st = vkt_buffer_create(r->ctx, n * 4, VKT_MEMORY_HOST, &r->upload);
    if (st == VKT_OK)
        st = vkt_stream_create(r->ctx, NULL, &r->pull);
    if (st == VKT_OK)
        st = vkt_stream_copy(r->pull, r->upload, 0, p.buffer, 0, n * 4);
    if (st == VKT_OK)
        st = gpu_stream_barrier_all(r->pull);
    if (st != VKT_OK)
        return trainer_fail(t, st, "replica %u: the pull: %s", r->index,
                            vkt_context_errmsg(r->ctx));
    x->pulled[r->index] = vkt_buffer_map(r->upload);
    return VKT_OK;
}

void exchange_pulled(replica *r) { r->pull_pending = 1; }

void exchange_stale_add(exchange_stale *s, uint64_t v)
{
    if (s->n == s->cap) {
        uint64_t cap = s->cap ? 2 * s->cap : 1024;
        uint64_t *nv = realloc(s->v, cap * sizeof *nv);
        if (!nv)
            return; /* staleness statistics only */
        s->v = nv;
        s->cap = cap;
    }
    s->v[s->n++] = v;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

void exchange_stale_stats(vkt_trainer *t, exchange_stale *logs)
{
    uint64_t n = 0;
    for (uint32_t i = 0; i < t->n_rep; i++)
        n += logs[i].n;
    uint64_t *all = n ? malloc(n * sizeof *all) : NULL;
    if (!all)
        return;
    uint64_t k = 0;
    double sum = 0;
    for (uint32_t i = 0; i < t->n_rep; i++)
        for (uint64_t j = 0; j < logs[i].n; j++)
            sum += (double)(all[k++] = logs[i].v[j]);
    qsort(all, n, sizeof *all, cmp_u64);
    t->stats.staleness_mean = sum / (double)n;
    t->stats.staleness_p99 = all[(uint64_t)((double)(n - 1) * 0.99)];
    t->stats.staleness_max = all[n - 1];
    t->stats.updates = n;
    free(all);
}

void exchange_stale_free(exchange_stale *logs)
{
    for (uint32_t i = 0; i < TRAINER_MAX_REPLICAS; i++) {
        free(logs[i].v);
        logs[i] = (exchange_stale){0};
    }
}

void exchange_free_pulled(exchange *x)
{
    for (uint32_t i = 0; i < TRAINER_MAX_REPLICAS; i++)
        x->pulled[i] = NULL;
}

static vkt_status master_begin(exchange *x)
{
    master *ms = of(x);
    vkt_trainer *t = x->t;
    uint64_t n = t->param_count;
    if (!ms->master) {
        ms->master = malloc(n * sizeof *ms->master);
        ms->pulls = calloc(t->n_rep, sizeof *ms->pulls);
        ms->pushes = calloc(t->n_rep, sizeof *ms->pushes);
        ms->push_lock = plat_monitor_create();
        if (!ms->master || !ms->pulls || !ms->pushes || !ms->push_lock)
            return trainer_fail(t, VKT_ERROR_OUT_OF_MEMORY, "out of host memory for the master");
    }
    /* The master starts from replica 0's parameters (all replicas start equal); a pull
     * a stopped run left untaken is void (its end wrote the master into every replica). */
    for (uint32_t i = 0; i < t->n_rep; i++)
        t->rep[i].pull_pending = 0;
    float *p = x->pulled[0];
    vkt_status st = vkt_model_read_params(t->rep[0].model, p, n);
    if (st != VKT_OK)
        return trainer_from_model(t, t->rep[0].model, st);
    for (uint64_t i = 0; i < n; i++)
        atomic_init(&ms->master[i], p[i]);
    atomic_init(&ms->version, 0);
    for (uint32_t i = 0; i < t->n_rep; i++) {
        ms->pulls[i] = ms->pushes[i] = 0;
        ms->stale[i].n = 0;
    }
    ms->failed = 0;
    t->stop = 0;
    return VKT_OK;
}

uint64_t exchange_min(const uint64_t *v, uint32_t n)
{
    uint64_t m = v[0];
    for (uint32_t i = 1; i < n; i++)
        m = v[i] < m ? v[i] : m;
    return m;
}

int exchange_gate(replica *r, const int *failed, const uint64_t *counts, uint64_t k)
{
    vkt_trainer *t = r->t;
    double t0 = plat_now();
    plat_monitor_lock(t->mon);
    while (!*failed && !t->stop && t->opt.bounded_staleness &&
           exchange_min(counts, t->n_rep) + t->opt.staleness < k)
        plat_monitor_wait(t->mon);
    int go = !*failed && !t->stop;
    plat_monitor_unlock(t->mon);
    r->stats.wait_seconds += plat_now() - t0;
    return go;
}

void exchange_run(exchange *x, replica *r, int *failed, const uint64_t *counts,
                  void (*update)(exchange *x, replica *r, uint64_t k))
{
    vkt_trainer *t = r->t;
    for (uint64_t k = 0; k < t->run_steps && r->status == VKT_OK; k++) {
        if (!exchange_gate(r, failed, counts, k))
            break;
        update(x, r, k);
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
        *failed = 1;
        t->stop = 1;
        plat_monitor_broadcast(t->mon);
        plat_monitor_unlock(t->mon);
    }
}

/* Staleness 0: no replica pushes step k before every replica pulled for step k. */
static int wait_until_push_allowed(master *ms, replica *r, uint64_t k)
{
    vkt_trainer *t = r->t;
    if (!t->opt.bounded_staleness || t->opt.staleness != 0)
        return 1;
    double t0 = plat_now();
    plat_monitor_lock(t->mon);
    while (!ms->failed && exchange_min(ms->pulls, t->n_rep) < k + 1)
        plat_monitor_wait(t->mon);
    int go = !ms->failed;
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

static void pull(master *ms, replica *r)
{
    vkt_trainer *t = r->t;
    float *pulled = ms->base.pulled[r->index];
    for (uint64_t i = 0; i < t->param_count; i++)
        pulled[i] = atomic_load_explicit(&ms->master[i], memory_order_relaxed);
    exchange_pulled(r); /* into the parameters at the start of its step's submission */
}

/* master += new - pulled, element by element. Unbounded (Hogwild!): lock-free, so two
 * replicas adding to one element at once may lose one addition. With a staleness bound
 * (stale-synchronous parallel) no update may be lost: pushes take a lock, reads never
 * do (they may see a push half done, which SSP allows for updates newer than the
 * bound; with bound 0 the gates keep every read of a step after every push of the
 * step before, so reads see whole updates and the result equals sync). */
static void push(master *ms, replica *r, uint64_t version_at_pull)
{
    vkt_trainer *t = r->t;
    const float *now = r->stage_host, *pulled = ms->base.pulled[r->index];
    if (t->opt.bounded_staleness)
        plat_monitor_lock(ms->push_lock);
    for (uint64_t i = 0; i < t->param_count; i++) {
        float m = atomic_load_explicit(&ms->master[i], memory_order_relaxed);
        atomic_store_explicit(&ms->master[i], m + (now[i] - pulled[i]), memory_order_relaxed);
    }
    if (t->opt.bounded_staleness)
        plat_monitor_unlock(ms->push_lock);
    uint64_t v = atomic_fetch_add(&ms->version, 1);
    exchange_stale_add(&ms->stale[r->index], v - version_at_pull);
}

void exchange_count_host(vkt_trainer *t, uint64_t bytes)
{
    if (t->mon) /* the replicas' threads count, the chief's callback may read */
        plat_monitor_lock(t->mon);
    t->xc_host_bytes += bytes;
    if (t->mon)
        plat_monitor_unlock(t->mon);
}

static void one_update(master *ms, replica *r, uint64_t k)
{
    vkt_trainer *t = r->t;
    double t0 = plat_now();
    trainer_slow_down(r);
    uint64_t v0 = atomic_load(&ms->version);
    pull(ms, r);
    count(r, ms->pulls);
    if (r->status == VKT_OK)
        trainer_next_batch(r);
    if (r->status == VKT_OK) {
        apply_set_step(r, t->steps + k);
        trainer_forward_backward(r, t->steps + k);
    }
    r->stats.step_seconds += plat_now() - t0;
    if (r->status != VKT_OK || !wait_until_push_allowed(ms, r, k))
        return;
    push(ms, r, v0);
    count(r, ms->pushes);
    exchange_count_host(t, 2 * t->param_count * 4); /* the pull's copy, the push's reads */
    r->stats.steps++;
}

static void master_job_update(exchange *x, replica *r, uint64_t k) { one_update(of(x), r, k); }

static void master_job(exchange *x, replica *r)
{
    exchange_run(x, r, &of(x)->failed, of(x)->pushes, master_job_update);
}

static vkt_status master_end(exchange *x)
{
    master *ms = of(x);
    vkt_trainer *t = x->t;
    exchange_stale_stats(t, ms->stale);
    float *p = x->pulled[0];
    for (uint64_t i = 0; i < t->param_count; i++)
        p[i] = atomic_load_explicit(&ms->master[i], memory_order_relaxed);
    for (uint32_t i = 0; i < t->n_rep; i++) {
        vkt_status st = vkt_model_write_params(t->rep[i].model, p, t->param_count);
        if (st != VKT_OK)
            return trainer_from_model(t, t->rep[i].model, st);
    }
    return VKT_OK;
}

static vkt_status master_snapshot(exchange *x, float *flat)
{
    master *ms = of(x);
    for (uint64_t i = 0; i < x->t->param_count; i++)
        flat[i] = atomic_load_explicit(&ms->master[i], memory_order_relaxed);
    return VKT_OK;
}

static void master_destroy(exchange *x)
{
    master *ms = of(x);
    if (!ms)
        return;
    exchange_free_pulled(x);
    exchange_stale_free(ms->stale);
    free((void *)ms->master);
    plat_monitor_destroy(ms->push_lock);
    free(ms->pulls);
    free(ms->pushes);
    free(ms);
}

static vkt_status master_create(vkt_trainer *t, vkt_world *w, exchange **out)
{
    (void)w;
    master *ms = calloc(1, sizeof *ms);
    if (!ms)
        return trainer_fail(t, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    ms->base.ops = &exchange_master_ops;
    ms->base.t = t;
    *out = &ms->base;
    return VKT_OK;
}

const exchange_ops exchange_master_ops = {
    .name = "master",
    .create = master_create,
    .attach = exchange_attach,
    .destroy = master_destroy,
    .begin = master_begin,
    .job = master_job,
    .end = master_end,
    .snapshot = master_snapshot,
};
