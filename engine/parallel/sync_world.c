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
 *   [fail + r] 1 when rank r failed this step (a replica's error)
 * so a failure or a stop needs no extra message, and every rank decides the same. */
#include "trainer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TAIL_LOSS 0
#define TAIL_STOP 1
#define TAIL_FAIL 2
#define FIRST_BUCKET_FLOATS (1u << 18) /* 1 MiB: the first bucket is small (as DDP's) */
#define DEFAULT_BUCKET_BYTES (4u << 20)

vkt_status sync_world_setup(vkt_trainer *t)
{
    uint64_t g = t->grad_count;
    t->comm_n = g + TAIL_FAIL + t->ranks;
    t->comm = calloc(t->comm_n, sizeof *t->comm);
    uint64_t per = (t->opt.bucket_bytes ? t->opt.bucket_bytes : DEFAULT_BUCKET_BYTES) / 4;
    per = per ? per : 1;
    uint32_t nb = 1;
    for (uint64_t end = FIRST_BUCKET_FLOATS < per ? FIRST_BUCKET_FLOATS : per; end < g;
         end += per)
        nb++;
    t->bucket_end = calloc(nb, sizeof *t->bucket_end);
    t->bucket_req = calloc(nb, sizeof *t->bucket_req);
    if (!t->comm || !t->bucket_end || !t->bucket_req)
        return trainer_fail(t, VKT_ERROR_OUT_OF_MEMORY, "out of host memory for the gradient "
                            "exchange");
    uint64_t end = FIRST_BUCKET_FLOATS < per ? FIRST_BUCKET_FLOATS : per;
    for (uint32_t b = 0; b < nb; b++, end += per)
        t->bucket_end[b] = end < g ? end : g;
    t->bucket_end[nb - 1] = t->comm_n; /* the tail travels with the last bucket */
    t->n_buckets = nb;
    return VKT_OK;
}

/* comm[i] = sum_q w_q * stage_q[i] over [c0, c1), replicas in index order. */
static void local_sum(vkt_trainer *t, uint64_t c0, uint64_t c1)
{
    float *comm = t->comm;
    for (uint64_t i = c0; i < c1; i++) {
        float s = 0.0f;
        for (uint32_t q = 0; q < t->n_rep; q++)
            s += t->rep[q].weight * t->rep[q].stage_host[i];
        comm[i] = s;
    }
}

static void barrier(vkt_trainer *t)
{
    if (t->n_rep > 1)
        vkt_barrier_wait(t->barrier, 0);
}

/* Replica 0's thread: the tail of this rank. */
static void fill_tail(vkt_trainer *t, int local_fail)
{
    float *tail = t->comm + t->grad_count;
    double loss = 0;
    for (uint32_t q = 0; q < t->n_rep; q++)
        loss += (double)t->rep[q].weight * t->rep[q].loss;
    memset(tail, 0, (TAIL_FAIL + t->ranks) * sizeof *tail);
    tail[TAIL_LOSS] = local_fail ? 0.0f : (float)loss;
    tail[TAIL_STOP] = t->rank == 0 && t->stop;
    tail[TAIL_FAIL + t->rank] = (float)local_fail;
}

/* Replica 0's thread: the verdict from the summed tail (or a failed exchange). */
static void decide(vkt_trainer *t, vkt_status exchange, uint64_t step)
{
    const float *tail = t->comm + t->grad_count;
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
            t->x_fail = 1;
            t->x_status = r == t->rank ? VKT_OK : VKT_ERROR_REMOTE; /* own: replicas' */
            snprintf(t->x_msg, sizeof t->x_msg, "rank %u failed at step %llu (its message is "
                     "in its output); every rank stopped there", r,
                     (unsigned long long)step + 1);
        }
    t->x_stop = tail[TAIL_STOP] > 0;
    t->global_loss = tail[TAIL_LOSS];
}

/* Replica 0's thread: sums of the buckets before b that are done are let go of; the
 * tests give MPI the progress Open MPI makes in no other thread. */
static void poke(vkt_trainer *t, uint32_t b)
{
    for (uint32_t j = 0; j < b; j++)
        if (t->bucket_req[j] && world_test(t->world, t->bucket_req[j]) != 0)
            t->bucket_req[j] = NULL; /* done, or failed: world_wait below reports it */
}

static vkt_status start_bucket(vkt_trainer *t, uint32_t b)
{
    uint64_t b0 = b ? t->bucket_end[b - 1] : 0;
    return world_iallreduce_f32(t->world, t->comm + b0, t->bucket_end[b] - b0,
                                "the gradient allreduce", &t->bucket_req[b]);
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

/* Bucket by bucket: this thread's chunk of the local sum, then (replica 0) the bucket's
 * allreduce. Returns the exchange's status on replica 0's thread. */
static vkt_status sum_and_send(replica *r, int local_fail)
{
    vkt_trainer *t = r->t;
    uint64_t g = t->grad_count;
    vkt_status st = VKT_OK;
    double c = 0;
    for (uint32_t b = 0; b < t->n_buckets; b++) {
        uint64_t b0 = b ? t->bucket_end[b - 1] : 0, b1 = t->bucket_end[b] < g ? t->bucket_end[b]
                                                                               : g;
        uint64_t len = b1 > b0 ? b1 - b0 : 0;
        if (!local_fail)
            local_sum(t, b0 + len * r->index / t->n_rep, b0 + len * (r->index + 1) / t->n_rep);
        barrier(t);
        if (r->index != 0)
            continue;
        double c0 = vkt_now();
        if (st == VKT_OK)
            st = start_bucket(t, b);
        poke(t, b);
        c += vkt_now() - c0;
    }
    if (r->index == 0) {
        double c0 = vkt_now();
        st = finish_buckets(t, st);
        t->stats.comm_seconds += c + vkt_now() - c0;
        t->stats.comm_bytes += t->comm_n * sizeof(float);
    }
    return st;
}

int sync_world_exchange(replica *r, uint64_t step)
{
    vkt_trainer *t = r->t;
    int local_fail = t->n_rep > 1 ? vkt_barrier_wait(t->barrier, r->status != VKT_OK)
                                  : r->status != VKT_OK;
    double t0 = vkt_now();
    if (r->index == 0) {
        t->world->step = step + 1; /* messages count steps from 1 */
        fill_tail(t, local_fail);
    }
    vkt_status st = sum_and_send(r, local_fail);
    if (r->index == 0)
        decide(t, st, step);
    barrier(t);
    if (t->x_fail) {
        if (r->index == 0 && t->x_status != VKT_OK && r->status == VKT_OK)
            replica_fail(r, t->x_status, "%s", t->x_msg);
        return 1;
    }
    if (t->x_stop)
        return 1;
    uint64_t g = t->grad_count; /* the sum back into every stage, chunk by chunk */
    uint64_t c0 = g * r->index / t->n_rep, c1 = g * (r->index + 1) / t->n_rep;
    for (uint32_t q = 0; q < t->n_rep; q++)
        memcpy(t->rep[q].stage_host + c0, t->comm + c0, (c1 - c0) * sizeof(float));
    barrier(t);
    if (r->index == 0)
        t->avg_seconds += vkt_now() - t0;
    return 0;
}

static uint64_t hash_floats(const float *p, uint64_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (uint64_t i = 0; i < n; i++) {
        uint32_t w;
        memcpy(&w, &p[i], sizeof w);
        h = (h ^ w) * 0x100000001b3ull;
    }
    return h;
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
        h[0] = hash_floats(p, t->grad_count);
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
