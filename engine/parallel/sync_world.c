/* Synchronous data parallelism across processes (docs/distributed.md). Within a rank the
 * replicas' threads sum their gradients, weighted by rows / global batch, into the rank's
 * comm buffer (each thread a contiguous chunk of each bucket, in replica order); replica
 * 0's thread starts one in-place allreduce per bucket as soon as the bucket is summed,
 * so the network carries bucket b while the threads sum bucket b+1; the ranks' sum is
 * the global average, identical bits on every rank (MPI gives every rank the same
 * result), copied back into every stage, and every replica applies it.
 *
 * comm layout: [0, grad_count) the gradient, then the tail summed with it:
 *   [loss] the world's mean loss (each rank adds sum_q w_q loss_q)
 *   [stop] > 0 when the chief's progress callback asked to stop after the previous step
 *   [fail + r] 1 when rank r failed this step (a replica's error), 2 when it found
 *              training diverged (VKT_ERROR_DIVERGED on every rank)
 * so a failure or a stop needs no extra message, and every rank decides the same. */
#include "trainer.h"
#include "reduce_sum.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TAIL_LOSS 0
#define TAIL_STOP 1
#define TAIL_FAIL 2
#define FAILED 1.0f         /* a tail fail slot: this rank failed */
#define FAILED_DIVERGED 2.0f /*   ... because training diverged */
#define FIRST_BUCKET_FLOATS (1u << 18) /* 1 MiB: the first bucket is small (as DDP's) */
#define DEFAULT_BUCKET_BYTES (4u << 20)

static uint64_t bucket_limit(const vkt_trainer *t, uint32_t b)
{
    uint64_t per = (t->opt.bucket_bytes ? t->opt.bucket_bytes : DEFAULT_BUCKET_BYTES) / 4;
    per = per ? per : 1;
    return b == 0 && FIRST_BUCKET_FLOATS < per ? FIRST_BUCKET_FLOATS : per;
}

/* Replica 0's first recording: bucket b starts at range `first`. */
static int open_bucket(vkt_trainer *t, uint32_t first)
{
    if (t->n_buckets + 1 >= t->cap_buckets) {
        uint32_t cap = t->cap_buckets ? 2 * t->cap_buckets : 16;
        uint32_t *f = realloc(t->bucket_first, cap * sizeof *f);
        if (f)
            t->bucket_first = f;
        uint32_t *m = realloc(t->bucket_mark, cap * sizeof *m);
        if (m)
            t->bucket_mark = m;
        if (!f || !m)
            return 0;
        t->cap_buckets = cap;
    }
    t->bucket_first[t->n_buckets] = first;
    t->bucket_mark[t->n_buckets] = UINT32_MAX;
    t->n_buckets++;
    return 1;
}

vkt_status sync_world_on_grad(replica *r, vkt_stream *s, uint64_t offset, uint64_t count)
{
    vkt_trainer *t = r->t;
    int lay = r->index == 0 && !t->layout_done;
    if (lay && t->n_buckets == 0 && !open_bucket(t, 0))
        return err_fail(NULL, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    if (lay) {
        if (t->n_ranges == t->cap_ranges) {
            uint32_t cap = t->cap_ranges ? 2 * t->cap_ranges : 64;
            grad_range *g = realloc(t->ranges, cap * sizeof *g);
            if (!g)
                return err_fail(NULL, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
            t->ranges = g;
            t->cap_ranges = cap;
        }
        t->ranges[t->n_ranges++] = (grad_range){offset, t->packed, count};
        t->packed += count;
    }
    r->rec_fill += count;
    if (r->rec_fill < bucket_limit(t, r->rec_bucket))
        return VKT_OK;
    /* the bucket is complete: a mark (overlapping), then the next bucket */
    uint32_t mark = UINT32_MAX;
    vkt_status st = t->overlap ? gpu_stream_mark(s, &mark) : VKT_OK;
    if (st != VKT_OK)
        return st;
    if (lay) {
        t->bucket_mark[t->n_buckets - 1] = mark;
        if (!open_bucket(t, t->n_ranges))
            return err_fail(NULL, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    }
    r->rec_bucket++;
    r->rec_fill = 0;
    return VKT_OK;
}

/* Epilogue of the recording: the last bucket (it may hold no gradient, only the tail)
 * ends with the step; replica 0's first recording allocates the comm buffer. */
static vkt_status close_layout(vkt_stream *s, void *user)
{
    (void)s;
    replica *r = user;
    vkt_trainer *t = r->t;
    r->rec_bucket = 0;
    r->rec_fill = 0;
    if (r->index != 0 || t->layout_done)
        return VKT_OK;
    if (t->n_buckets == 0 && !open_bucket(t, 0))
        return err_fail(NULL, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    t->bucket_first[t->n_buckets] = t->n_ranges; /* the end of the last one */
    t->comm_n = t->packed + TAIL_FAIL + t->ranks;
    t->comm = calloc(t->comm_n, sizeof *t->comm);
    t->bucket_req = calloc(t->n_buckets, sizeof *t->bucket_req);
    if (!t->comm || !t->bucket_req)
        return err_fail(NULL, VKT_ERROR_OUT_OF_MEMORY, "out of host memory for the gradient "
                        "exchange (%llu floats)", (unsigned long long)t->comm_n);
    t->layout_done = 1;
    return VKT_OK;
}

vkt_status sync_world_setup_replica(vkt_trainer *t, replica *r)
{
    (void)t;
    return graph_model_add_epilogue(r->model, close_layout, r);
}

/* Comm range of bucket b's gradients (the tail not included). */
static void bucket_span(const vkt_trainer *t, uint32_t b, uint64_t *c0, uint64_t *c1)
{
    uint32_t f = t->bucket_first[b], l = t->bucket_first[b + 1];
    *c0 = f < t->n_ranges ? t->ranges[f].comm : t->packed;
    *c1 = l < t->n_ranges ? t->ranges[l].comm : t->packed;
}

/* Over comm [a, b) of the ranges from index `from` on: to_comm sums the replicas'
 * stages into comm (weighted, replicas in index order), else copies comm back into
 * every stage. */
static void move_span(vkt_trainer *t, uint32_t from, uint64_t a, uint64_t b, int to_comm)
{
    for (uint32_t i = from; i < t->n_ranges && t->ranges[i].comm < b; i++) {
        const grad_range *g = &t->ranges[i];
        uint64_t lo = a > g->comm ? a : g->comm, hi = g->comm + g->count < b ? g->comm + g->count
                                                                             : b;
        if (lo >= hi)
            continue;
        uint64_t k = g->stage + (lo - g->comm); /* comm [lo, hi) is stage [k, k + hi - lo) */
        if (to_comm) {
            const float *src[TRAINER_MAX_REPLICAS];
            float w[TRAINER_MAX_REPLICAS], *dst = t->comm + lo;
            for (uint32_t q = 0; q < t->n_rep; q++) {
                src[q] = t->rep[q].stage_host + k;
                w[q] = t->rep[q].weight;
            }
            reduce_sum(&dst, 1, src, w, t->n_rep, hi - lo);
        } else {
            for (uint32_t q = 0; q < t->n_rep; q++)
                memcpy(t->rep[q].stage_host + k, t->comm + lo, (hi - lo) * sizeof *t->comm);
        }
    }
}

static int barrier(vkt_trainer *t, int vote)
{
    return t->n_rep > 1 ? plat_barrier_wait(t->barrier, vote) : vote;
}

/* Replica 0's thread: the tail of this rank. */
static void fill_tail(vkt_trainer *t, int local_fail)
{
    float *tail = t->comm + t->packed;
    double loss = 0;
    for (uint32_t q = 0; q < t->n_rep; q++)
        loss += (double)t->rep[q].weight * t->rep[q].loss;
    memset(tail, 0, (TAIL_FAIL + t->ranks) * sizeof *tail);
    tail[TAIL_LOSS] = local_fail ? 0.0f : (float)loss;
    tail[TAIL_STOP] = t->rank == 0 && t->stop;
    int diverged = 0;
    for (uint32_t q = 0; q < t->n_rep; q++)
        diverged |= t->rep[q].status == VKT_ERROR_DIVERGED;
    tail[TAIL_FAIL + t->rank] = !local_fail ? 0.0f : diverged ? FAILED_DIVERGED : FAILED;
}

/* Replica 0's thread: the verdict from the summed tail (or a failed exchange). */
static void decide(vkt_trainer *t, vkt_status exchange, uint64_t step)
{
    const float *tail = t->comm + t->packed;
    t->x_fail = 0;
    t->x_stop = 0;
    t->x_status = VKT_OK;
    if (exchange != VKT_OK) {
        t->x_fail = 1;
        t->x_status = exchange;
        snprintf(t->x_msg, sizeof t->x_msg, "%s", vkt_world_errmsg(t->world));
        return;
    }
    for (uint32_t r = 0; r < t->ranks && !t->x_fail; r++)
        if (tail[TAIL_FAIL + r] > 0) {
            int diverged = tail[TAIL_FAIL + r] == FAILED_DIVERGED;
            t->x_fail = 1;
            t->x_status = r == t->rank  ? VKT_OK /* own: the replicas' */
                          : diverged    ? VKT_ERROR_DIVERGED
                                        : VKT_ERROR_REMOTE;
            snprintf(t->x_msg, sizeof t->x_msg, "rank %u %s at step %llu (its message is in "
                     "its output); every rank stopped there", r,
                     diverged ? "found training diverged" : "failed",
                     (unsigned long long)step + 1);
        }
    t->x_stop = tail[TAIL_STOP] > 0;
    t->global_loss = tail[TAIL_LOSS];
}

/* Replica 0's thread: requests of earlier buckets that are done are let go of; the
 * tests give MPI the progress Open MPI makes in no other thread. */
static void poke(vkt_trainer *t, uint32_t b)
{
    for (uint32_t j = 0; j < b; j++)
        if (t->bucket_req[j] && world_test(t->world, t->bucket_req[j]) != 0)
            t->bucket_req[j] = NULL; /* done, or failed: then the last wait reports it */
}

static vkt_status finish_buckets(vkt_trainer *t, vkt_status st)
{
    for (uint32_t b = 0; b < t->n_buckets; b++) {
        if (st == VKT_OK && t->bucket_req[b])
            st = world_wait(t->world, t->bucket_req[b]);
        t->bucket_req[b] = NULL;
    }
    return st;
}

/* Until the device passed bucket b's mark (without marks, or for the last bucket: the
 * whole step, and its loss checked). Polling with short sleeps, and MPI progress on
 * replica 0's thread. */
static void wait_for_bucket(replica *r, uint32_t b, uint64_t step)
{
    vkt_trainer *t = r->t;
    if (b == 0)
        r->finished = 0;
    if (r->status != VKT_OK || r->finished)
        return;
    if (b + 1 == t->n_buckets || t->bucket_mark[b] == UINT32_MAX) {
        trainer_step_finish(r, step);
        r->stats.step_seconds += plat_now() - r->submitted_at;
        r->finished = 1;
        return;
    }
    for (uint32_t n = 0;; n++) {
        int passed = graph_model_mark_passed(r->model, t->bucket_mark[b]);
        if (passed < 0)
            replica_fail(r, VKT_ERROR_VULKAN, "%s", vkt_model_errmsg(r->model));
        if (passed != 0)
            return;
        if (r->index == 0)
            poke(t, b);
        world_backoff(t->world, n < 5 ? n : 5); /* at most 32 us */
    }
}

/* Bucket by bucket as the device completes them: this thread's chunk of the local sum,
 * then (replica 0) the bucket's allreduce, while the device computes the rest of the
 * backward. Returns the exchange's status on replica 0's thread; *local_fail: a replica
 * of this rank failed. */
static vkt_status sum_and_send(replica *r, uint64_t step, int *local_fail)
{
    vkt_trainer *t = r->t;
    vkt_status st = VKT_OK;
    double c = 0;
    *local_fail = 0;
    if (t->opt.check) /* check mode lays the buckets out in replica 0's first step */
        barrier(t, 0);
    for (uint32_t b = 0; b < t->n_buckets; b++) {
        wait_for_bucket(r, b, step);
        double w0 = plat_now();
        *local_fail |= barrier(t, r->status != VKT_OK);
        r->stats.wait_seconds += plat_now() - w0; /* for this rank's other replicas */
        uint64_t c0, c1;
        bucket_span(t, b, &c0, &c1);
        uint64_t len = c1 - c0;
        if (!*local_fail)
            move_span(t, t->bucket_first[b], c0 + len * r->index / t->n_rep,
                      c0 + len * (r->index + 1) / t->n_rep, 1);
        barrier(t, 0);
        if (r->index != 0)
            continue;
        double a = plat_now();
        if (b + 1 == t->n_buckets) {
            t->world->step = step + 1; /* messages count steps from 1 */
            fill_tail(t, *local_fail);
            c1 = t->comm_n;
        }
        if (st == VKT_OK)
            st = world_iallreduce_f32(t->world, t->comm + c0, c1 - c0, "the gradient allreduce",
                                      &t->bucket_req[b]);
        poke(t, b);
        c += plat_now() - a;
    }
    if (r->index == 0) {
        double a = plat_now();
        st = finish_buckets(t, st);
        double exposed = plat_now() - a; /* after the device finished the step */
        t->stats.comm_seconds += c + exposed;
        t->stats.comm_exposed_seconds += exposed;
        t->stats.comm_bytes += t->comm_n * sizeof(float);
    }
    return st;
}

int sync_world_exchange(replica *r, uint64_t step)
{
    vkt_trainer *t = r->t;
    int local_fail;
    vkt_status st = sum_and_send(r, step, &local_fail);
    double t0 = plat_now();
    if (r->index == 0)
        decide(t, st, step);
    barrier(t, 0);
    if (t->x_fail) {
        if (r->index == 0 && t->x_status != VKT_OK && r->status == VKT_OK)
            replica_fail(r, t->x_status, "%s", t->x_msg);
        return 1;
    }
    if (t->x_stop)
        return 1;
    /* the world's sum back into every stage, a chunk per thread */
    move_span(t, 0, t->packed * r->index / t->n_rep, t->packed * (r->index + 1) / t->n_rep, 0);
    barrier(t, 0);
    if (r->index == 0)
        t->avg_seconds += plat_now() - t0;
    return 0;
}

void sync_world_check_identical(replica *r, uint64_t step)
{
    vkt_trainer *t = r->t;
    if (r->index != 0 || !t->world || !t->opt.check_identical ||
        (step + 1) % t->opt.check_identical != 0)
        return;
    float *p = malloc(t->param_count * sizeof *p);
    if (!p) {
        replica_fail(r, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
        return;
    }
    vkt_status st = vkt_model_read_params(r->model, p, t->param_count);
    uint64_t h[2] = {0, 0};
    if (st == VKT_OK) {
        h[0] = trainer_hash(p, t->grad_count * sizeof *p);
        h[1] = ~h[0];
    } else {
        replica_fail(r, st, "%s", vkt_model_errmsg(r->model));
    }
    free(p);
    /* every rank reaches this at the same step: min and max of the hash in one call */
    st = world_allreduce_u64(t->world, h, 2, WORLD_MIN, "the parameter check");
    if (st != VKT_OK)
        replica_fail(r, st, "%s", vkt_world_errmsg(t->world));
    else if (h[0] != ~h[1] && r->status == VKT_OK)
        replica_fail(r, VKT_ERROR_INTERNAL, "the ranks' parameters differ after step %llu (a "
                     "device rounds differently? see docs/distributed.md)",
                     (unsigned long long)step + 1);
}
