/* exchange_device.c - the device exchange (exchange.h): asynchronous replicas of one
 * process that share one VkDevice (gpu_context_create_shared, VKT_SHARE_DEVICE) keep the
 * master on that device. Replica q's step is one submission:
 *   [pull: master -> its parameters, and -> pulled_q (what it pulled)]
 *   [forward, backward, its own optimizer (APPLY_IN_STEP)]
 *   [push: pulled_q = parameters - pulled_q; master += pulled_q (kt_axpby twice: the host
 *    master's m + (now - pulled), rounded alike)]
 * and one fence wait. No parameter reaches the host during a fit: the host only counts
 * versions (the staleness statistics) and gates the submissions by step (the bound).
 *
 * Ordering: every submission that touches the master (the replicas' steps, and begin,
 * snapshot and end) takes a ticket j under a lock, in the order it is submitted, and waits
 * for the timeline `order` to reach j, signalling j + 1 when it completes: the master's
 * users run one after another, each seeing the whole of the ones before. Where every
 * replica submits to one VkQueue (lavapipe's one queue under its lock) the queue's own
 * order is the tickets' and each user ends with a barrier over all its writes (a pipeline
 * barrier orders everything earlier in the queue's submission order), so no semaphore is
 * passed: a wait on one costs a trip through the driver's submit thread there. A wait
 * never comes before its signal is submitted (tickets are taken in submission order); a
 * submission that fails takes no ticket, so nothing waits for what it would have signalled.
 * So a pull never sees half a push: unbounded or bounded by s > 0, each update sees every
 * update submitted before it (staleness 0; the bound limits how many steps a replica may
 * run ahead of the slowest: it is submitted only when every replica has submitted step
 * k - s - 1).
 *
 * Bound 0 is sync's semantics (as the host master's): every pull of step k sees every
 * push of step k - 1 and none of step k. Two master buffers: step k pulls m[k % 2] and
 * pushes into m[(k + 1) % 2], the round's first push writing m[k % 2] + its change there,
 * the others adding theirs; a replica submits step k once every replica submitted step
 * k - 1. Its staleness is its push's place in the round (0 .. N-1), as the host's. */
#include <stdlib.h>
#include <string.h>

#include "kernels/train_ops.h"
#include "parallel/apply.h"
#include "parallel/exchange.h"
#include "parallel/exec.h"

typedef struct dev_replica {
    vkt_buffer *pulled;        /* device: the master it pulled */
    vkt_stream *pull[2];       /* m[b] -> parameters, pulled */
    vkt_stream *push[2][2];    /* [dst][init]: m[dst] (= m[1 - dst] when init) += change */
} dev_replica;

typedef struct device_exchange {
    exchange base;
    uint64_t n;                /* floats of the flat parameters (alignment gaps: zeros) */
    int twin;                  /* bound 0: two master buffers */
    int one_queue;             /* every replica on one VkQueue: its order is the ticket's */
    vkt_buffer *m[2];          /* on replica 0's context */
    vkt_buffer *host;          /* replica 0's, host-visible: a snapshot lands there */
    vkt_stream *io;            /* replica 0's: begin, snapshot and end */
    gpu_timeline *order;       /* the master's users in ticket order */
    plat_monitor *lock;        /* tickets; the fields below */
    uint64_t ticket;           /* the master's users submitted so far */
    uint64_t round, in_round;  /* twin: the round of the last push, pushes of it so far */
    int cur;                   /* the master buffer holding every push so far */
    /* under the trainer's monitor */
    uint64_t *submitted;       /* per replica: its steps submitted this fit */
    int failed;
    dev_replica rep[TRAINER_MAX_REPLICAS];
    exchange_stale stale[TRAINER_MAX_REPLICAS];
} device_exchange;

static device_exchange *of(exchange *x) { return (device_exchange *)x; }

/* go(arg, sync) submits the next of the master's users (replica 0's io stream, or a
 * replica's step with its pull and push) ordered by sync; the caller holds the lock. */
static vkt_status submit_in_order(device_exchange *d, vkt_status (*go)(void *, const
                                  gpu_submit_sync *), void *arg)
{
    gpu_sync wait = {d->order, d->ticket}, signal = {d->order, d->ticket + 1};
    gpu_submit_sync sync = {&wait, 1, &signal, 1};
    vkt_status st = go(arg, d->one_queue ? NULL : &sync);
    if (st == VKT_OK)
        d->ticket++;
    return st;
}

static vkt_status go_io(void *arg, const gpu_submit_sync *sync)
{
    return gpu_stream_submit_ext(arg, NULL, 0, NULL, 0, sync);
}

/* Replica 0's io stream: src (NULL: the master as of now) copied into to[0..n_to), in
 * the master's order, and waited for. */
static vkt_status run_io(device_exchange *d, vkt_buffer *src, vkt_buffer *const *to,
                         uint32_t n_to)
{
    vkt_trainer *t = d->base.t;
    replica *r0 = &t->rep[0];
    vkt_status st = vkt_stream_reset(d->io);
    plat_monitor_lock(d->lock);
    for (uint32_t i = 0; i < n_to && st == VKT_OK; i++)
        st = vkt_stream_copy(d->io, src ? src : d->m[d->cur], 0, to[i], 0, d->n * 4);
    if (st == VKT_OK)
        st = gpu_stream_barrier_all(d->io);
    if (st == VKT_OK)
        st = submit_in_order(d, go_io, d->io);
    plat_monitor_unlock(d->lock);
    if (st == VKT_OK)
        st = vkt_stream_wait(d->io);
    return st == VKT_OK ? VKT_OK
                        : trainer_fail(t, st, "replica 0: the master on the device: %s",
                                       vkt_context_errmsg(r0->ctx));
}

static vkt_status make_streams(device_exchange *d, replica *r)
{
    dev_replica *q = &d->rep[r->index];
    vkt_view p, g;
    uint64_t trained, n = d->n;
    vkt_status st = graph_model_flat(r->model, &p, &g, &trained);
    if (st == VKT_OK && !q->pulled)
        st = vkt_buffer_create(r->ctx, n * 4, VKT_MEMORY_DEVICE, &q->pulled);
    vkt_view pv = {p.buffer, 0}, dv = {q->pulled, 0};
    for (int b = 0; b < 1 + d->twin && st == VKT_OK; b++) {
        vkt_stream **s = &q->pull[b];
        st = *s ? vkt_stream_reset(*s) : vkt_stream_create(r->ctx, NULL, s);
        if (st == VKT_OK)
            st = vkt_stream_copy(*s, d->m[b], 0, p.buffer, 0, n * 4);
        if (st == VKT_OK)
            st = vkt_stream_copy(*s, d->m[b], 0, q->pulled, 0, n * 4);
        if (st == VKT_OK)
            st = gpu_stream_barrier_all(*s);
        for (int init = 0; init < 1 + d->twin && st == VKT_OK; init++) {
            vkt_stream **u = &q->push[b][init];
            st = *u ? vkt_stream_reset(*u) : vkt_stream_create(r->ctx, NULL, u);
            if (st == VKT_OK) /* pulled = parameters - pulled: the change */
                st = kt_axpby(*u, 1.0f, pv, -1.0f, dv, n);
            if (st == VKT_OK && init) /* the round's first push starts from the last round */
                st = vkt_stream_copy(*u, d->m[1 - b], 0, d->m[b], 0, n * 4);
            if (st == VKT_OK)
                st = kt_axpby(*u, 1.0f, dv, 1.0f, (vkt_view){d->m[b], 0}, n);
            if (st == VKT_OK)
                st = gpu_stream_barrier_all(*u);
        }
    }
    return st;
}

static vkt_status device_attach(exchange *x, replica *r)
{
    device_exchange *d = of(x);
    vkt_trainer *t = x->t;
    vkt_status st = VKT_OK;
    if (!d->m[0]) { /* replica 0 is attached first */
        d->n = vkt_model_param_count(r->model);
        d->twin = t->opt.bounded_staleness && t->opt.staleness == 0;
        /* every context exists (exec_replicas.c: contexts, then models); VKT_EXCHANGE_
         * TIMELINE=1 orders by the timeline anyway (how CI runs that path on lavapipe) */
        const char *force = plat_getenv("VKT_EXCHANGE_TIMELINE");
        d->one_queue = !(force && strcmp(force, "1") == 0);
        for (uint32_t i = 1; i < t->n_rep; i++)
            d->one_queue &= t->rep[i].ctx->queue == r->ctx->queue;
        for (int b = 0; b < 1 + d->twin && st == VKT_OK; b++)
            st = vkt_buffer_create(r->ctx, d->n * 4, VKT_MEMORY_DEVICE, &d->m[b]);
        if (st == VKT_OK)
            st = vkt_buffer_create(r->ctx, d->n * 4, VKT_MEMORY_HOST, &d->host);
        if (st == VKT_OK)
            st = vkt_stream_create(r->ctx, NULL, &d->io);
        if (st == VKT_OK && !d->one_queue)
            st = gpu_timeline_create(r->ctx, 0, &d->order);
    }
    if (st == VKT_OK)
        st = make_streams(d, r);
    return st == VKT_OK ? VKT_OK
                        : trainer_fail(t, st, "replica %u: the master on the device: %s",
                                       r->index, vkt_context_errmsg(r->ctx));
}

static vkt_status device_begin(exchange *x)
{
    device_exchange *d = of(x);
    vkt_trainer *t = x->t;
    if (!d->submitted && !(d->submitted = calloc(t->n_rep, sizeof *d->submitted)))
        return trainer_fail(t, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    for (uint32_t i = 0; i < t->n_rep; i++) {
        d->submitted[i] = 0;
        d->stale[i].n = 0;
        t->rep[i].pull_pending = 0;
    }
    d->failed = 0;
    d->cur = 0;
    d->in_round = 0;
    d->round = 0;
    t->stop = 0;
    vkt_view p, g; /* replica 0's parameters (all replicas start equal) -> m[0] */
    uint64_t trained;
    graph_model_flat(t->rep[0].model, &p, &g, &trained);
    return run_io(d, p.buffer, &d->m[0], 1);
}

typedef struct step_arg {
    replica *r;
    vkt_stream *push;
} step_arg;

static vkt_status go_step(void *arg, const gpu_submit_sync *sync)
{
    step_arg *a = arg;
    return apply_submit_step_ext(a->r, &a->push, 1, sync);
}

/* Step k's submission in the master's order; its staleness logged. 1 when submitted. */
static int submit(device_exchange *d, replica *r, uint64_t k)
{
    dev_replica *q = &d->rep[r->index];
    plat_monitor_lock(d->lock);
    int src = d->twin ? (int)(k % 2) : 0, dst = d->twin ? 1 - src : 0;
    if (d->twin && k != d->round) { /* the round's first push (begin: round 0) */
        d->round = k;
        d->in_round = 0;
    }
    int init = d->twin && d->in_round == 0;
    step_arg a = {r, q->push[dst][init]};
    r->pull = q->pull[src]; /* ahead of the step, in its submission (apply.c) */
    r->pull_pending = 1;
    r->submitted_at = plat_now();
    apply_seed(r); /* fp16: the backward starts from the loss scale */
    vkt_status st = submit_in_order(d, go_step, &a);
    if (st == VKT_OK) { /* twin: it pulled the master before this round's pushes */
        exchange_stale_add(&d->stale[r->index], d->twin ? d->in_round : 0);
        d->in_round++;
        d->cur = dst;
    }
    plat_monitor_unlock(d->lock);
    if (st != VKT_OK)
        replica_fail(r, st, "%s", vkt_model_errmsg(r->model));
    return st == VKT_OK;
}

static void one_update(device_exchange *d, replica *r, uint64_t k)
{
    vkt_trainer *t = r->t;
    double t0 = plat_now();
    trainer_slow_down(r);
    if (r->status == VKT_OK)
        trainer_next_batch(r);
    int submitted = 0;
    if (r->status == VKT_OK) {
        apply_set_step(r, t->steps + k);
        submitted = submit(d, r, k);
    }
    if (submitted) { /* the others may go on: the device orders them after this one */
        plat_monitor_lock(t->mon);
        d->submitted[r->index]++;
        plat_monitor_broadcast(t->mon);
        plat_monitor_unlock(t->mon);
        trainer_step_finish(r, t->steps + k);
    }
    r->stats.step_seconds += plat_now() - t0;
    if (r->status == VKT_OK)
        r->stats.steps++;
}

static void device_job_update(exchange *x, replica *r, uint64_t k) { one_update(of(x), r, k); }

static void device_job(exchange *x, replica *r)
{
    exchange_run(x, r, &of(x)->failed, of(x)->submitted, device_job_update);
}

/* The master into every replica's parameters: device copies, one submission. */
static vkt_status device_end(exchange *x)
{
    device_exchange *d = of(x);
    vkt_trainer *t = x->t;
    exchange_stale_stats(t, d->stale);
    vkt_buffer *to[TRAINER_MAX_REPLICAS];
    for (uint32_t i = 0; i < t->n_rep; i++) {
        vkt_view p, g;
        uint64_t trained;
        graph_model_flat(t->rep[i].model, &p, &g, &trained);
        to[i] = p.buffer;
        t->rep[i].pull_pending = 0;
    }
    return run_io(d, NULL, to, t->n_rep);
}

/* The master now (the chief's progress callback, on replica 0's thread): one copy into
 * replica 0's host-visible buffer, in the master's order. */
static vkt_status device_snapshot(exchange *x, float *flat)
{
    device_exchange *d = of(x);
    vkt_status st = run_io(d, NULL, &d->host, 1);
    if (st == VKT_OK)
        memcpy(flat, vkt_buffer_map(d->host), x->t->param_count * 4);
    return st;
}

static void device_destroy(exchange *x)
{
    device_exchange *d = of(x);
    if (!d)
        return;
    /* buffers, streams and the timeline went with the replicas' contexts */
    exchange_stale_free(d->stale);
    plat_monitor_destroy(d->lock);
    free(d->submitted);
    free(d);
}

static vkt_status device_create(vkt_trainer *t, vkt_world *w, exchange **out)
{
    (void)w;
    device_exchange *d = calloc(1, sizeof *d);
    if (!d || !(d->lock = plat_monitor_create())) {
        free(d);
        return trainer_fail(t, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    }
    d->base.ops = &exchange_device_ops;
    d->base.t = t;
    *out = &d->base;
    return VKT_OK;
}

const exchange_ops exchange_device_ops = {
    .name = "device",
    .create = device_create,
    .destroy = device_destroy,
    .attach = device_attach,
    .on_device = 1,
    .begin = device_begin,
    .job = device_job,
    .end = device_end,
    .snapshot = device_snapshot,
};
