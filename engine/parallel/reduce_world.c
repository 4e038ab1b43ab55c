/* reduce_world.c - the world reducer (reduce.h): synchronous data parallelism across
 * processes (docs/distributed.md), MPI around the host reducer's local sum. Within a rank
 * the replicas' threads sum their gradients, weighted by rows / global batch, into the
 * rank's comm buffer (each thread a contiguous chunk of each bucket, in replica order:
 * reduce_host_sum); replica 0's thread starts one in-place allreduce per bucket as soon as
 * the bucket is summed,
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
#include "parallel/exec.h" /* trainer_step_finish */
#include "parallel/reduce.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TAIL_LOSS 0
#define TAIL_STOP 1
#define TAIL_FAIL 2
#define FAILED 1.0f         /* a tail fail slot: this rank failed */
#define FAILED_DIVERGED 2.0f /*   ... because training diverged */

/* A parameter's gradient: `count` floats at `stage` in the flat gradient (and stage),
 * at `comm` in the comm buffer. */
typedef struct grad_range {
    uint64_t stage, comm, count;
} grad_range;

typedef struct world_reducer {
    reducer base;
    reducer *local;             /* the host reducer's sum of this rank's replicas */
    vkt_world *w;
    uint32_t rank, ranks;
    /* the gradients in the order the backward completes them, packed into the comm
     * buffer (the ranks' sum), cut into buckets; then the tail */
    float *comm;
    uint64_t comm_n, packed;    /* comm floats; of which gradients (<= grad_count) */
    grad_range *ranges;         /* in completion order */
    uint32_t n_ranges, cap_ranges;
    uint32_t *bucket_first;     /* bucket b: ranges [bucket_first[b], bucket_first[b+1]) */
    uint32_t *bucket_mark;      /*   and the step's mark after its last copy (not the last) */
    uint32_t n_buckets, cap_buckets;
    int layout_done;            /* replica 0's recording has laid the buckets out */
    world_req **bucket_req;
    int x_stop, x_fail;         /* the exchange's verdict for this step (under barriers) */
    vkt_status x_status;        /*   and the status the replicas return */
    char x_msg[VKT_ERRMSG_SIZE];
    float global_loss;          /* the world's mean loss of the last step */
    struct {                    /* per local replica: */
        replica *r;
        uint32_t rec_bucket;    /*   recording: the bucket being filled */
        uint64_t rec_fill;      /*   and its floats so far */
        int finished;           /*   running: its step has been waited for */
    } rep[TRAINER_MAX_REPLICAS];
} world_reducer;

static world_reducer *of(reducer *rd) { return (world_reducer *)rd; }

/* Replica 0's first recording: bucket b starts at range `first`. */
static int open_bucket(world_reducer *x, uint32_t first)
{
    if (x->n_buckets + 1 >= x->cap_buckets) {
        uint32_t cap = x->cap_buckets ? 2 * x->cap_buckets : 16;
        uint32_t *f = realloc(x->bucket_first, cap * sizeof *f);
        if (f)
            x->bucket_first = f;
        uint32_t *m = realloc(x->bucket_mark, cap * sizeof *m);
        if (m)
            x->bucket_mark = m;
        if (!f || !m)
            return 0;
        x->cap_buckets = cap;
    }
    x->bucket_first[x->n_buckets] = first;
    x->bucket_mark[x->n_buckets] = UINT32_MAX;
    x->n_buckets++;
    return 1;
}

/* Recording, after the copy of a gradient into the stage: the bucket it belongs to, and
 * a mark where a bucket is complete, so the host sums and sends it while the device goes
 * on with the backward. */
static vkt_status record_grad_out(vkt_stream *s, void *user, uint64_t offset, uint64_t count)
{
    replica *r = user;
    world_reducer *x = of(r->t->rd);
    vkt_status st = reduce_host_copy_out(r, s, offset, count);
    if (st != VKT_OK)
        return st;
    int lay = r->index == 0 && !x->layout_done;
    if (lay && x->n_buckets == 0 && !open_bucket(x, 0))
        return err_fail(NULL, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    if (lay) {
        if (x->n_ranges == x->cap_ranges) {
            uint32_t cap = x->cap_ranges ? 2 * x->cap_ranges : 64;
            grad_range *g = realloc(x->ranges, cap * sizeof *g);
            if (!g)
                return err_fail(NULL, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
            x->ranges = g;
            x->cap_ranges = cap;
        }
        x->ranges[x->n_ranges++] = (grad_range){offset, x->packed, count};
        x->packed += count;
    }
    x->rep[r->index].rec_fill += count;
    if (x->rep[r->index].rec_fill < reduce_bucket_limit(r->t, x->rep[r->index].rec_bucket))
        return VKT_OK;
    /* the bucket is complete: a mark (overlapping), then the next bucket */
    uint32_t mark = UINT32_MAX;
    st = x->base.overlap ? gpu_stream_mark(s, &mark) : VKT_OK;
    if (st != VKT_OK)
        return st;
    if (lay) {
        x->bucket_mark[x->n_buckets - 1] = mark;
        if (!open_bucket(x, x->n_ranges))
            return err_fail(NULL, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    }
    x->rep[r->index].rec_bucket++;
    x->rep[r->index].rec_fill = 0;
    return VKT_OK;
}

/* Epilogue of the recording: the last bucket (it may hold no gradient, only the tail)
 * ends with the step; replica 0's first recording allocates the comm buffer. */
static vkt_status close_layout(vkt_stream *s, void *user)
{
    (void)s;
    replica *r = user;
    world_reducer *x = of(r->t->rd);
    x->rep[r->index].rec_bucket = 0;
    x->rep[r->index].rec_fill = 0;
    if (r->index != 0 || x->layout_done)
        return VKT_OK;
    if (x->n_buckets == 0 && !open_bucket(x, 0))
        return err_fail(NULL, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    x->bucket_first[x->n_buckets] = x->n_ranges; /* the end of the last one */
    x->comm_n = x->packed + TAIL_FAIL + x->ranks;
    x->comm = calloc(x->comm_n, sizeof *x->comm);
    x->bucket_req = calloc(x->n_buckets, sizeof *x->bucket_req);
    if (!x->comm || !x->bucket_req)
        return err_fail(NULL, VKT_ERROR_OUT_OF_MEMORY, "out of host memory for the gradient "
                        "exchange (%llu floats)", (unsigned long long)x->comm_n);
    x->layout_done = 1;
    return VKT_OK;
}

static vkt_status world_attach(reducer *rd, replica *r)
{
    of(rd)->rep[r->index].r = r;
    vkt_status st = graph_model_on_grad_ready(r->model, record_grad_out, r);
    if (st == VKT_OK)
        st = graph_model_add_epilogue(r->model, close_layout, r);
    return st == VKT_OK ? VKT_OK : trainer_from_model(rd->t, r->model, st);
}

/* Comm range of bucket b's gradients (the tail not included). */
static void bucket_span(const world_reducer *x, uint32_t b, uint64_t *c0, uint64_t *c1)
{
    uint32_t f = x->bucket_first[b], l = x->bucket_first[b + 1];
    *c0 = f < x->n_ranges ? x->ranges[f].comm : x->packed;
    *c1 = l < x->n_ranges ? x->ranges[l].comm : x->packed;
}

/* Over comm [a, b) of the ranges from index `from` on: to_comm sums the replicas'
 * stages into comm (the local sum: weighted, replicas in index order), else copies comm
 * back into every stage. */
static void move_span(world_reducer *x, uint32_t from, uint64_t a, uint64_t b, int to_comm)
{
    for (uint32_t i = from; i < x->n_ranges && x->ranges[i].comm < b; i++) {
        const grad_range *g = &x->ranges[i];
        uint64_t lo = a > g->comm ? a : g->comm, hi = g->comm + g->count < b ? g->comm + g->count
                                                                             : b;
        if (lo >= hi)
            continue;
        uint64_t k = g->stage + (lo - g->comm); /* comm [lo, hi) is stage [k, k + hi - lo) */
        if (to_comm)
            reduce_host_sum(x->local, k, x->comm + lo, hi - lo);
        else
            reduce_host_scatter(x->local, k, x->comm + lo, hi - lo);
    }
}

static int barrier(vkt_trainer *t, int vote)
{
    return t->n_rep > 1 ? plat_barrier_wait(t->barrier, vote) : vote;
}

/* Replica 0's thread: the tail of this rank. */
static void fill_tail(world_reducer *x, int local_fail)
{
    const vkt_trainer *tr = x->base.t;
    float *tail = x->comm + x->packed;
    double loss = reduce_local_loss(tr);
    memset(tail, 0, (TAIL_FAIL + x->ranks) * sizeof *tail);
    tail[TAIL_LOSS] = local_fail ? 0.0f : (float)loss;
    tail[TAIL_STOP] = x->rank == 0 && tr->stop;
    int diverged = 0;
    for (uint32_t q = 0; q < tr->n_rep; q++)
        diverged |= tr->rep[q].status == VKT_ERROR_DIVERGED;
    tail[TAIL_FAIL + x->rank] = !local_fail ? 0.0f : diverged ? FAILED_DIVERGED : FAILED;
}

/* Replica 0's thread: the verdict from the summed tail (or a failed exchange). */
static void decide(world_reducer *x, vkt_status exchange, uint64_t step)
{
    const float *tail = x->comm + x->packed;
    x->x_fail = 0;
    x->x_stop = 0;
    x->x_status = VKT_OK;
    if (exchange != VKT_OK) {
        x->x_fail = 1;
        x->x_status = exchange;
        snprintf(x->x_msg, sizeof x->x_msg, "%s", vkt_world_errmsg(x->w));
        return;
    }
    for (uint32_t r = 0; r < x->ranks && !x->x_fail; r++)
        if (tail[TAIL_FAIL + r] > 0) {
            int diverged = tail[TAIL_FAIL + r] == FAILED_DIVERGED;
            x->x_fail = 1;
            x->x_status = r == x->rank  ? VKT_OK /* own: the replicas' */
                          : diverged    ? VKT_ERROR_DIVERGED
                                        : VKT_ERROR_REMOTE;
            snprintf(x->x_msg, sizeof x->x_msg, "rank %u %s at step %llu (its message is in "
                     "its output); every rank stopped there", r,
                     diverged ? "found training diverged" : "failed",
                     (unsigned long long)step + 1);
        }
    x->x_stop = tail[TAIL_STOP] > 0;
    x->global_loss = tail[TAIL_LOSS];
}

/* Replica 0's thread: requests of earlier buckets that are done are let go of; the
 * tests give MPI the progress Open MPI makes in no other thread. */
static void poke(world_reducer *x, uint32_t b)
{
    for (uint32_t j = 0; j < b; j++)
        if (x->bucket_req[j] && world_test(x->w, x->bucket_req[j]) != 0)
            x->bucket_req[j] = NULL; /* done, or failed: then the last wait reports it */
}

static vkt_status finish_buckets(world_reducer *x, vkt_status st)
{
    for (uint32_t b = 0; b < x->n_buckets; b++) {
        if (st == VKT_OK && x->bucket_req[b])
            st = world_wait(x->w, x->bucket_req[b]); /* on a timeout, abandoned there */
        else
            world_abandon(x->w, x->bucket_req[b]);
        x->bucket_req[b] = NULL;
    }
    return st;
}

/* Until the device passed bucket b's mark (without marks, or for the last bucket: the
 * whole step, and its loss checked). Polling with short sleeps, and MPI progress on
 * replica 0's thread. */
static void wait_for_bucket(world_reducer *x, replica *r, uint32_t b, uint64_t step)
{
    int *finished = &x->rep[r->index].finished;
    if (b == 0)
        *finished = 0;
    if (r->status != VKT_OK || *finished)
        return;
    if (b + 1 == x->n_buckets || x->bucket_mark[b] == UINT32_MAX) {
        trainer_step_finish(r, step);
        r->stats.step_seconds += plat_now() - r->submitted_at;
        *finished = 1;
        return;
    }
    for (uint32_t n = 0;; n++) {
        int passed = graph_model_mark_passed(r->model, x->bucket_mark[b]);
        if (passed < 0)
            replica_fail(r, VKT_ERROR_VULKAN, "%s", vkt_model_errmsg(r->model));
        if (passed != 0)
            return;
        if (r->index == 0)
            poke(x, b);
        world_backoff(x->w, n < 5 ? n : 5); /* at most 32 us */
    }
}

/* Bucket by bucket as the device completes them: this thread's chunk of the local sum,
 * then (replica 0) the bucket's allreduce, while the device computes the rest of the
 * backward. Returns the exchange's status on replica 0's thread; *local_fail: a replica
 * of this rank failed. */
static vkt_status sum_and_send(world_reducer *x, replica *r, uint64_t step, int *local_fail)
{
    vkt_trainer *t = r->t;
    vkt_status st = VKT_OK;
    double c = 0;
    *local_fail = 0;
    if (t->opt.check) /* check mode lays the buckets out in replica 0's first step */
        barrier(t, 0);
    for (uint32_t b = 0; b < x->n_buckets; b++) {
        wait_for_bucket(x, r, b, step);
        double w0 = plat_now();
        *local_fail |= barrier(t, r->status != VKT_OK);
        r->stats.wait_seconds += plat_now() - w0; /* for this rank's other replicas */
        uint64_t c0, c1;
        bucket_span(x, b, &c0, &c1);
        uint64_t len = c1 - c0;
        if (!*local_fail)
            move_span(x, x->bucket_first[b], c0 + len * r->index / t->n_rep,
                      c0 + len * (r->index + 1) / t->n_rep, 1);
        barrier(t, 0);
        if (r->index != 0)
            continue;
        double a = plat_now();
        if (b + 1 == x->n_buckets) {
            x->w->step = step + 1; /* messages count steps from 1 */
            fill_tail(x, *local_fail);
            c1 = x->comm_n;
        }
        if (st == VKT_OK)
            st = world_iallreduce_f32(x->w, x->comm + c0, c1 - c0, "the gradient allreduce",
                                      &x->bucket_req[b]);
        poke(x, b);
        c += plat_now() - a;
    }
    if (r->index == 0) {
        double a = plat_now();
        st = finish_buckets(x, st);
        double exposed = plat_now() - a; /* after the device finished the step */
        t->stats.comm_seconds += c + exposed;
        t->stats.comm_exposed_seconds += exposed;
        t->stats.comm_bytes += x->comm_n * sizeof(float);
    }
    return st;
}

/* After forward and backward (submitted only: the buckets are waited for here): the
 * local weighted sum into the comm buffer bucket by bucket, one allreduce per bucket
 * (replica 0's thread), the verdict (a failure anywhere, a stop asked by the chief), the
 * sum back into every stage. Returns 1 to stop (statuses set), 0 to apply. */
static int world_exchange(reducer *rd, replica *r, uint64_t step)
{
    world_reducer *x = of(rd);
    vkt_trainer *t = r->t;
    int local_fail;
    vkt_status st = sum_and_send(x, r, step, &local_fail);
    double t0 = plat_now();
    if (r->index == 0)
        decide(x, st, step);
    barrier(t, 0);
    if (x->x_fail) {
        if (r->index == 0 && x->x_status != VKT_OK && r->status == VKT_OK)
            replica_fail(r, x->x_status, "%s", x->x_msg);
        return 1;
    }
    if (x->x_stop)
        return 1;
    /* the world's sum back into every stage, a chunk per thread */
    move_span(x, 0, x->packed * r->index / t->n_rep, x->packed * (r->index + 1) / t->n_rep, 0);
    barrier(t, 0);
    if (r->index == 0) {
        t->avg_seconds += plat_now() - t0;
        t->avg_host_bytes += (uint64_t)t->n_rep * t->grad_count * 4; /* every stage read */
    }
    return 0;
}

/* Every check_identical steps: the parameters' hash, equal on every rank or a failure. */
static void world_applied(reducer *rd, replica *r, uint64_t step)
{
    world_reducer *x = of(rd);
    vkt_trainer *t = r->t;
    if (r->index != 0 || !t->opt.check_identical || (step + 1) % t->opt.check_identical != 0)
        return;
    float *p = malloc(t->param_count * sizeof *p);
    if (!p) {
        replica_fail(r, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
        return;
    }
    /* the update of this step first (its own thread): the parameters after it */
    vkt_status st = apply_flush_replica(r);
    if (st == VKT_OK)
        st = vkt_model_read_params(r->model, p, t->param_count);
    uint64_t h[2] = {0, 0};
    if (st == VKT_OK) {
        h[0] = trainer_hash(p, t->grad_count * sizeof *p);
        h[1] = ~h[0];
    } else {
        replica_fail(r, st, "%s", vkt_model_errmsg(r->model));
    }
    free(p);
    /* every rank reaches this at the same step: min and max of the hash in one call */
    st = world_allreduce_u64(x->w, h, 2, WORLD_MIN, "the parameter check");
    if (st != VKT_OK)
        replica_fail(r, st, "%s", vkt_world_errmsg(x->w));
    else if (h[0] != ~h[1] && r->status == VKT_OK)
        replica_fail(r, VKT_ERROR_INTERNAL, "the ranks' parameters differ after step %llu (a "
                     "device rounds differently? see docs/distributed.md)",
                     (unsigned long long)step + 1);
}

/* Across ranks the vote travels with the step's sums (the tail): every replica goes on
 * to the step, whose exchange decides. */
static int world_go_on(reducer *rd, replica *r, int vote)
{
    (void)rd;
    (void)r;
    (void)vote;
    return 1;
}

/* The replicas' threads sum their chunks of each bucket. */
static uint32_t world_threads(const reducer *rd) { return rd->t->n_rep; }

static double world_mean_loss(const reducer *rd)
{
    return ((const world_reducer *)rd)->global_loss;
}

static int world_batch_unused(const reducer *rd)
{
    const world_reducer *x = (const world_reducer *)rd;
    return x->x_stop && !x->x_fail;
}

void reduce_world_layout_of(const reducer *rd, reduce_world_layout *out)
{
    const world_reducer *x = (const world_reducer *)rd;
    *out = (reduce_world_layout){x->n_buckets, x->packed, x->base.overlap,
                                 x->n_buckets ? x->bucket_mark[0] : UINT32_MAX};
}

static void world_destroy(reducer *rd)
{
    world_reducer *x = of(rd);
    if (!x)
        return;
    if (x->local)
        x->local->ops->destroy(x->local);
    free(x->comm);
    free(x->ranges);
    free(x->bucket_first);
    free(x->bucket_mark);
    free(x->bucket_req);
    free(x);
}

static vkt_status world_create(vkt_trainer *t, vkt_world *w, reducer **out)
{
    world_reducer *x = calloc(1, sizeof *x);
    if (!x)
        return trainer_fail(t, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    x->base = (reducer){&reduce_world_ops, t, 0};
    x->w = w;
    x->rank = vkt_world_rank(w);
    x->ranks = vkt_world_size(w);
    vkt_status st = reduce_host_ops.create(t, NULL, &x->local);
    if (st != VKT_OK) {
        world_destroy(&x->base);
        return st;
    }
    *out = &x->base;
    return VKT_OK;
}

const reduce_ops reduce_world_ops = {
    .name = "world",
    .create = world_create,
    .destroy = world_destroy,
    .attach = world_attach,
    .start = NULL,
    .threads = world_threads,
    .submit_only = 1,
    .exchange = world_exchange,
    .go_on = world_go_on,
    .applied = world_applied,
    .mean_loss = world_mean_loss,
    .batch_unused = world_batch_unused,
};
