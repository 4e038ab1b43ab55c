/* reduce_device.c - the device reducer (reduce.h): synchronous replicas of one process
 * that share one VkDevice (gpu_context_create_shared, VKT_SHARE_DEVICE) average their
 * gradients with a kernel on that device (kernels/train_ops.h: kt_reduce_avg, the host
 * sum's order and rounding, so the same bits as the host reducer), and every update reads
 * the one average buffer there. No gradient byte reaches the host; each replica's step is
 * one vkQueueSubmit and one fence wait.
 *
 * Ordering (timelines, gpu.h). Replica q's timeline done[q] reaches k + 1 when its
 * submission of round k (step k) has completed; avg_done reaches k + 1 when the average
 * of step k has. Round k's submissions, made in replica order (a turn the host keeps):
 *   replica q < N-1: [pending update of step k-1 (reads avg) · forward · backward]
 *                    waits avg_done >= k, signals done[q] = k + 1;
 *   replica N-1:     [its pending update · forward · backward · the average of step k]
 *                    waits avg_done >= k and done[p] >= k + 1 for every p < N-1,
 *                    signals done[N-1] = k + 1 and avg_done = k + 1.
 * The average waits for every replica's backward of step k (and so for their updates that
 * read the previous average: a signal covers all earlier work of its submission), and
 * every replica's next submission waits for the average before its update reads it and
 * its backward overwrites the gradient the average read. The turn is why: replicas may
 * share one queue (lavapipe has one), which runs in order, so no submission may wait for
 * a signal submitted after it. The update itself goes into the next submission (or a
 * flush, which waits for the same value): APPLY_NEXT_SUBMISSION, as with the host.
 *
 * Failures: a replica that could not submit (its status failed, or vkQueueSubmit did)
 * still takes its turn; the last replica then leaves the average out, and the host
 * raises the timelines the missing work would have raised, so nothing on the device
 * waits forever; every replica stops at the exchange's barrier. */
#include <stdlib.h>
#include <string.h>

#include "kernels/train_ops.h"
#include "parallel/exec.h"
#include "parallel/reduce.h"

typedef struct device_reducer {
    reducer base;
    vkt_buffer *avg;                  /* on replica 0's context: param_count floats */
    vkt_stream *sum;                  /* on the last replica's: the average kernel */
    int dirty;                        /* models (re)attached: record sum again */
    gpu_timeline *done[TRAINER_MAX_REPLICAS];
    gpu_timeline *avg_done;           /* on the last replica's context */
    plat_monitor *mon;                /* the turn */
    uint64_t turn;                    /* submissions taken in all: round * N + replica */
    uint64_t failed_round;            /* a round in which a replica did not submit */
    uint64_t round[TRAINER_MAX_REPLICAS];
} device_reducer;

static device_reducer *of(reducer *rd) { return (device_reducer *)rd; }

static vkt_status device_create(vkt_trainer *t, vkt_world *w, reducer **out)
{
    (void)w;
    device_reducer *d = calloc(1, sizeof *d);
    if (!d || !(d->mon = plat_monitor_create())) {
        free(d);
        return trainer_fail(t, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    }
    d->base = (reducer){&reduce_device_ops, t, 0};
    d->failed_round = UINT64_MAX;
    *out = &d->base;
    return VKT_OK;
}

static void device_destroy(reducer *rd)
{
    device_reducer *d = of(rd);
    /* avg, sum and the timelines went with their contexts (replicas_destroy) */
    plat_monitor_destroy(d->mon);
    free(d);
}

/* The end of each replica's step: every write done before what follows it in the
 * submission (the average, on the last replica). */
static vkt_status end_step(vkt_stream *s, void *user)
{
    (void)user;
    return gpu_stream_barrier_all(s);
}

static vkt_status device_attach(reducer *rd, replica *r)
{
    device_reducer *d = of(rd);
    vkt_trainer *t = rd->t;
    vkt_status st = VKT_OK;
    if (!d->avg) { /* replica 0 is attached first */
        uint64_t bytes = vkt_model_param_count(r->model) * 4;
        st = vkt_buffer_create(r->ctx, bytes, VKT_MEMORY_DEVICE, &d->avg);
        if (st != VKT_OK)
            return trainer_fail(t, st, "replica %u: the average: %s", r->index,
                                vkt_context_errmsg(r->ctx));
    }
    if (!d->done[r->index] && (st = gpu_timeline_create(r->ctx, 0, &d->done[r->index])) != VKT_OK)
        return trainer_fail(t, st, "replica %u: %s", r->index, vkt_context_errmsg(r->ctx));
    r->stage = d->avg; /* what its update reads (apply.c) */
    r->stage_host = NULL;
    d->dirty = 1;
    st = graph_model_add_epilogue(r->model, end_step, r);
    return st == VKT_OK ? VKT_OK : trainer_from_model(t, r->model, st);
}

/* The average kernel over every replica's gradient, into avg, on the last replica's
 * context (its submission carries it). */
static vkt_status record_sum(device_reducer *d)
{
    vkt_trainer *t = d->base.t;
    replica *last = &t->rep[t->n_rep - 1];
    vkt_view g[TRAINER_MAX_REPLICAS];
    float w[TRAINER_MAX_REPLICAS];
    vkt_status st = d->sum ? vkt_stream_reset(d->sum) : vkt_stream_create(last->ctx, NULL, &d->sum);
    for (uint32_t q = 0; q < t->n_rep && st == VKT_OK; q++) {
        vkt_view p;
        uint64_t n;
        st = graph_model_flat(t->rep[q].model, &p, &g[q], &n);
        w[q] = t->rep[q].weight;
    }
    if (st == VKT_OK)
        st = kt_reduce_avg(d->sum, (vkt_view){d->avg, 0}, g, w, t->n_rep, t->grad_count);
    if (st == VKT_OK)
        st = gpu_stream_barrier_all(d->sum);
    if (st != VKT_OK)
        return replica_fail(last, st, "the average on the device: %s",
                            vkt_context_errmsg(last->ctx));
    d->dirty = 0;
    return VKT_OK;
}

static vkt_status device_start(reducer *rd)
{
    device_reducer *d = of(rd);
    vkt_trainer *t = rd->t;
    rd->overlap = 0; /* nothing for the host to overlap */
    replica *last = &t->rep[t->n_rep - 1];
    vkt_status st = gpu_timeline_create(last->ctx, 0, &d->avg_done);
    if (st != VKT_OK)
        return trainer_fail(t, st, "replica %u: %s", last->index, vkt_context_errmsg(last->ctx));
    if ((st = record_sum(d)) != VKT_OK)
        return trainer_fail(t, st, "%s", last->errmsg);
    return VKT_OK;
}

static uint32_t device_threads(const reducer *rd)
{
    (void)rd;
    return 0;
}

/* Round k's submission of replica r, in its turn: see the top of the file. Returns 1
 * when it was submitted. */
static int submit(device_reducer *d, replica *r, uint64_t k, int average)
{
    vkt_trainer *t = d->base.t;
    gpu_sync wait[TRAINER_MAX_REPLICAS + 1], signal[2];
    gpu_submit_sync sync = {wait, 0, signal, 0};
    if (k > 0)
        wait[sync.n_wait++] = (gpu_sync){d->avg_done, k};
    signal[sync.n_signal++] = (gpu_sync){d->done[r->index], k + 1};
    vkt_stream *after = NULL;
    if (average) {
        for (uint32_t p = 0; p + 1 < t->n_rep; p++)
            wait[sync.n_wait++] = (gpu_sync){d->done[p], k + 1};
        signal[sync.n_signal++] = (gpu_sync){d->avg_done, k + 1};
        after = d->sum;
    }
    r->submitted_at = plat_now();
    apply_seed(r); /* fp16: the backward starts from the loss scale */
    vkt_status st = apply_submit_step_ext(r, &after, average, &sync);
    if (st != VKT_OK)
        replica_fail(r, st, "%s", vkt_model_errmsg(r->model));
    return st == VKT_OK;
}

/* The replica's step: its submission in its turn, then its fence and loss. */
static void device_step(reducer *rd, replica *r, uint64_t step)
{
    device_reducer *d = of(rd);
    vkt_trainer *t = rd->t;
    uint32_t n = t->n_rep, q = r->index;
    uint64_t k = d->round[q]++;
    int last = q + 1 == n;
    plat_monitor_lock(d->mon);
    while (d->turn != k * n + q)
        plat_monitor_wait(d->mon);
    int average = last && d->failed_round != k;
    plat_monitor_unlock(d->mon);
    if (average && d->dirty && r->status == VKT_OK)
        record_sum(d);
    average = average && r->status == VKT_OK;
    int submitted = r->status == VKT_OK && submit(d, r, k, average);
    plat_monitor_lock(d->mon);
    if (!submitted)
        d->failed_round = k;
    d->turn++;
    plat_monitor_broadcast(d->mon);
    plat_monitor_unlock(d->mon);
    /* what the missing work would have signalled (errors here: the device is gone, and
     * every wait on it fails anyway) */
    if (!submitted)
        gpu_timeline_signal(d->done[q], k + 1);
    if (last && (!submitted || !average))
        gpu_timeline_signal(d->avg_done, k + 1);
    if (submitted)
        trainer_step_finish(r, step);
}

/* Every replica waited for its own submission; the last one's held the average. */
static int device_exchange(reducer *rd, replica *r, uint64_t step)
{
    device_reducer *d = of(rd);
    (void)step;
    double t1 = plat_now();
    int fail = plat_barrier_wait(rd->t->barrier, r->status != VKT_OK);
    r->stats.wait_seconds += plat_now() - t1;
    /* the pending update (apply_pending) reads the average of this round */
    r->apply_wait = (gpu_sync){d->avg_done, d->round[r->index]};
    return fail;
}

static int device_go_on(reducer *rd, replica *r, int vote)
{
    (void)r;
    return !plat_barrier_wait(rd->t->barrier, vote);
}

static double device_mean_loss(const reducer *rd) { return reduce_local_loss(rd->t); }

static int device_batch_unused(const reducer *rd)
{
    (void)rd;
    return 0;
}

const reduce_ops reduce_device_ops = {
    .name = "device",
    .create = device_create,
    .destroy = device_destroy,
    .attach = device_attach,
    .start = device_start,
    .threads = device_threads,
    .step = device_step,
    .on_device = 1,
    .submit_only = 0,
    .exchange = device_exchange,
    .go_on = device_go_on,
    .applied = NULL,
    .mean_loss = device_mean_loss,
    .batch_unused = device_batch_unused,
};
