/* reduce_host.c - the host reducer (reduce.h): synchronous data parallelism within one
 * process. Every replica's step copies each gradient into the replica's host-visible
 * stage right after the backward completes it; a pool of host threads sized to the cores
 * then averages them (chunks of the gradient, the vectorized sum of reduce_sum.h), and
 * every replica applies the same update. Also the local sum the world reducer wraps.
 *
 * With overlap (reducer.overlap: GPU kernels by default, vkt_trainer_options.overlap) the
 * gradients are cut into buckets in the order the backward completes them (bucket_bytes,
 * as across ranks), the recorded step holds a mark after each complete bucket, and the
 * step is only submitted: the threads sum bucket b as soon as every replica's device has
 * passed its mark, while the devices compute the layers before it. Each element is
 * summed in the same replica order either way, so the average has the same bits. */
#include <stdlib.h>
#include <string.h>

#include "parallel/exec.h" /* trainer_step_finish */
#include "parallel/reduce.h"
#include "parallel/reduce_sum.h"

/* A gradient in completion order: `count` floats at `stage` in the flat gradient, at
 * `packed` in the concatenation of all of them. */
typedef struct hrange {
    uint64_t stage, packed, count;
} hrange;

typedef struct host_reducer host_reducer;
typedef struct bucket_job { /* a bucket's sum, as the pool's callers see it */
    host_reducer *h;
    uint32_t bucket;
} bucket_job;

struct host_reducer {
    reducer base;
    reduce_pool *pool;         /* the threads that sum (replica threads 0..callers-1 and
                                  helpers), made at start */
    /* overlap: laid out by replica 0's first recording (at creation, exec_ops.record) */
    hrange *ranges;
    uint32_t n_ranges, cap_ranges;
    uint64_t packed;
    uint32_t *first, *mark;    /* bucket b: ranges [first[b], first[b+1]), then mark[b]
                                  (UINT32_MAX: none, the step's end) */
    bucket_job *job;
    uint32_t n_buckets, cap_buckets;
    int laid_out;
    /* the import variant: one host allocation, a region of `region` bytes per replica
     * (its gradient copy-outs) and the last, avg, for the average they all read */
    char *host, *avg;
    uint64_t region;
    struct {
        uint32_t bucket;       /* recording: the bucket being filled, and its floats */
        uint64_t fill;
        int finished;          /* running: the replica's step has been waited for */
    } rep[TRAINER_MAX_REPLICAS];
};

static host_reducer *of(reducer *rd) { return (host_reducer *)rd; }

vkt_status reduce_host_copy_out(replica *r, vkt_stream *s, uint64_t offset, uint64_t count)
{
    vkt_view p, g;
    uint64_t n;
    vkt_status st = graph_model_flat(r->model, &p, &g, &n);
    if (st == VKT_OK)
        st = vkt_stream_copy(s, g.buffer, offset * 4, r->stage, offset * 4, count * 4);
    return st;
}

static int open_bucket(host_reducer *h)
{
    if (h->n_buckets + 1 >= h->cap_buckets) {
        uint32_t cap = h->cap_buckets ? 2 * h->cap_buckets : 16;
        uint32_t *f = realloc(h->first, cap * sizeof *f);
        if (f)
            h->first = f;
        uint32_t *m = realloc(h->mark, cap * sizeof *m);
        if (m)
            h->mark = m;
        if (!f || !m)
            return 0;
        h->cap_buckets = cap;
    }
    h->first[h->n_buckets] = h->n_ranges;
    h->mark[h->n_buckets] = UINT32_MAX;
    h->n_buckets++;
    return 1;
}

/* Recorded right after the backward step that completes a parameter's gradient: that
 * gradient into the replica's staging buffer, so on devices that overlap independent
 * commands the copy runs while earlier layers' backward still computes; with overlap, a
 * mark where a bucket is complete. Replica 0's first recording lays the buckets out;
 * every replica's recording cuts the same ones (the same gradients, in the same order). */
static vkt_status record_grad_out(vkt_stream *s, void *user, uint64_t offset, uint64_t count)
{
    replica *r = user;
    host_reducer *h = of(r->t->rd);
    vkt_status st = reduce_host_copy_out(r, s, offset, count);
    if (st != VKT_OK || !h->base.overlap)
        return st;
    int lay = r->index == 0 && !h->laid_out;
    if (lay && h->n_buckets == 0 && !open_bucket(h))
        return err_fail(NULL, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    if (lay) {
        if (h->n_ranges == h->cap_ranges) {
            uint32_t cap = h->cap_ranges ? 2 * h->cap_ranges : 64;
            hrange *g = realloc(h->ranges, cap * sizeof *g);
            if (!g)
                return err_fail(NULL, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
            h->ranges = g;
            h->cap_ranges = cap;
        }
        h->ranges[h->n_ranges++] = (hrange){offset, h->packed, count};
        h->packed += count;
    }
    h->rep[r->index].fill += count;
    if (h->rep[r->index].fill < reduce_bucket_limit(r->t, h->rep[r->index].bucket))
        return VKT_OK;
    uint32_t mark = UINT32_MAX; /* the bucket is complete */
    if ((st = gpu_stream_mark(s, &mark)) != VKT_OK)
        return st;
    if (lay) {
        h->mark[h->n_buckets - 1] = mark;
        if (!open_bucket(h))
            return err_fail(NULL, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    }
    h->rep[r->index].bucket++;
    h->rep[r->index].fill = 0;
    return VKT_OK;
}

/* The end of a recording: replica 0's first closes the layout (the last bucket ends with
 * the step); every replica's next recording starts at bucket 0. */
static vkt_status close_layout(vkt_stream *s, void *user)
{
    (void)s;
    replica *r = user;
    host_reducer *h = of(r->t->rd);
    h->rep[r->index].bucket = 0;
    h->rep[r->index].fill = 0;
    if (r->index != 0 || h->laid_out || !h->base.overlap)
        return VKT_OK;
    if (h->n_buckets == 0 && !open_bucket(h))
        return err_fail(NULL, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    h->first[h->n_buckets] = h->n_ranges;
    if (!(h->job = calloc(h->n_buckets, sizeof *h->job)))
        return err_fail(NULL, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    for (uint32_t b = 0; b < h->n_buckets; b++)
        h->job[b] = (bucket_job){h, b};
    h->laid_out = 1;
    return VKT_OK;
}

static vkt_status host_attach(reducer *rd, replica *r)
{
    vkt_status st = graph_model_on_grad_ready(r->model, record_grad_out, r);
    if (st == VKT_OK)
        st = graph_model_add_epilogue(r->model, close_layout, r);
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
    /* the import variant: written once, into the region every replica's update reads */
    float *avg = t->rd && t->rd->ops == &reduce_host_import_ops
                     ? (float *)((host_reducer *)t->rd)->avg + c0 : NULL;
    reduce_sum(avg ? &avg : stage, avg ? 1 : t->n_rep, (const float *const *)stage, w,
               t->n_rep, c1 - c0);
}

/* Elements [c0, c1) of bucket b (in the packed order): the stage ranges they cover, each
 * averaged as reduce_chunk does. */
static void bucket_chunk(void *user, uint64_t c0, uint64_t c1)
{
    const bucket_job *j = user;
    const host_reducer *h = j->h;
    uint32_t f = h->first[j->bucket], l = h->first[j->bucket + 1];
    uint64_t base = h->ranges[f].packed, a = base + c0, b = base + c1;
    for (uint32_t i = f; i < l && h->ranges[i].packed < b; i++) {
        const hrange *g = &h->ranges[i];
        uint64_t lo = a > g->packed ? a : g->packed;
        uint64_t hi = g->packed + g->count < b ? g->packed + g->count : b;
        if (lo < hi)
            reduce_chunk(h->base.t, g->stage + (lo - g->packed), g->stage + (hi - g->packed));
    }
}

static uint64_t bucket_len(const host_reducer *h, uint32_t b)
{
    uint32_t f = h->first[b], l = h->first[b + 1];
    uint64_t end = l < h->n_ranges ? h->ranges[l].packed : h->packed;
    return f < h->n_ranges ? end - h->ranges[f].packed : 0;
}

/* Until the device passed bucket b's mark (for the last bucket: the whole step, waited
 * for and its loss checked). */
static void wait_for_bucket(host_reducer *h, replica *r, uint32_t b, uint64_t step)
{
    int *finished = &h->rep[r->index].finished;
    if (b == 0)
        *finished = 0;
    if (r->status != VKT_OK || *finished)
        return;
    if (b + 1 == h->n_buckets || h->mark[b] == UINT32_MAX) {
        trainer_step_finish(r, step);
        r->stats.step_seconds += plat_now() - r->submitted_at;
        *finished = 1;
        return;
    }
    for (uint32_t n = 0;; n++) {
        int passed = graph_model_mark_passed(r->model, h->mark[b]);
        if (passed < 0)
            replica_fail(r, VKT_ERROR_VULKAN, "%s", vkt_model_errmsg(r->model));
        if (passed != 0)
            return;
        world_backoff(NULL, n < 5 ? n : 5); /* at most 32 us */
    }
}

/* With overlap (the step only submitted): bucket by bucket, as every replica's device
 * passes its mark, the pool's sum of it; the step's end (its fence, the loss) with the
 * last. Every replica reaches every barrier; 1 when any failed. */
static int exchange_buckets(host_reducer *h, replica *r, uint64_t step)
{
    vkt_trainer *t = h->base.t;
    int fail = 0;
    for (uint32_t b = 0; b < h->n_buckets; b++) {
        wait_for_bucket(h, r, b, step);
        double w0 = plat_now();
        fail |= plat_barrier_wait(t->barrier, r->status != VKT_OK);
        double w1 = plat_now();
        r->stats.wait_seconds += w1 - w0;
        if (!fail && r->index < reduce_pool_callers(h->pool))
            reduce_pool_run(h->pool, r->index, bucket_chunk, &h->job[b], bucket_len(h, b));
        plat_barrier_wait(t->barrier, 0);
        if (r->index == 0)
            t->avg_seconds += plat_now() - w1;
    }
    if (!fail && r->index == 0) /* every stage read once */
        t->avg_host_bytes += (uint64_t)t->n_rep * t->grad_count * 4;
    return fail;
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
    vkt_trainer *t = rd->t;
    if (rd->overlap) { /* the step was only submitted */
        if (t->opt.check) /* check mode: replica 0's first step lays the buckets out */
            plat_barrier_wait(t->barrier, 0);
        if (of(rd)->n_buckets > 0)
            return exchange_buckets(of(rd), r, step);
        if (r->status == VKT_OK) { /* nothing laid out (no gradient recorded): after the step */
            trainer_step_finish(r, step);
            r->stats.step_seconds += plat_now() - r->submitted_at;
        }
    }
    reduce_pool *pool = ((host_reducer *)rd)->pool;
    double t1 = plat_now();
    if (plat_barrier_wait(t->barrier, r->status != VKT_OK))
        return 1;
    double t2 = plat_now();
    r->stats.wait_seconds += t2 - t1;
    if (r->index < reduce_pool_callers(pool)) /* the states have no gradient */
        reduce_pool_run(pool, r->index, reduce_chunk, t, t->grad_count);
    plat_barrier_wait(t->barrier, 0);
    if (r->index == 0) {
        t->avg_seconds += plat_now() - t2;
        t->avg_host_bytes += (uint64_t)t->n_rep * t->grad_count * 4; /* every stage read */
    }
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

/* VKT_HOST_IMPORT: 1 the stages in one imported host allocation where every replica's
 * device can import host memory; 0, unset or empty: a host buffer per replica. -1: bad. */
static int import_mode(void)
{
    const char *v = plat_getenv("VKT_HOST_IMPORT");
    if (!v || !*v)
        return 0;
    return strcmp(v, "1") == 0 ? 1 : strcmp(v, "0") == 0 ? 0 : -1;
}

static vkt_status host_create(vkt_trainer *t, vkt_world *w, reducer **out)
{
    (void)w;
    int mode = import_mode();
    if (mode < 0)
        return trainer_fail(t, VKT_ERROR_INVALID_ARGUMENT, "VKT_HOST_IMPORT='%s': 1 (the "
                            "replicas' staging in one host allocation imported into every "
                            "device) or 0 (a buffer each)", plat_getenv("VKT_HOST_IMPORT"));
    for (uint32_t q = 0; q < t->n_rep && mode; q++) /* the contexts exist (exec_replicas.c) */
        mode = t->rep[q].ctx && t->rep[q].ctx->host_import;
    host_reducer *h = calloc(1, sizeof *h);
    if (!h)
        return trainer_fail(t, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    h->base = (reducer){mode ? &reduce_host_import_ops : &reduce_host_ops, t, 0};
    *out = &h->base;
    return VKT_OK;
}

/* Replica r's region of the one allocation (made at replica 0's call: every region the
 * largest alignment of the devices, rounded up), imported into r's context. */
static vkt_status import_stage(reducer *rd, replica *r, uint64_t bytes)
{
    host_reducer *h = of(rd);
    vkt_trainer *t = rd->t;
    if (!h->host) {
        uint64_t a = 1;
        for (uint32_t q = 0; q < t->n_rep; q++)
            a = t->rep[q].ctx->host_import > a ? t->rep[q].ctx->host_import : a;
        h->region = (bytes + a - 1) / a * a;
        uint64_t total = h->region * (t->n_rep + 1);
        if (!(h->host = plat_aligned_alloc(a, total)))
            return trainer_fail(t, VKT_ERROR_OUT_OF_MEMORY, "out of host memory (%llu bytes "
                                "of staging)", (unsigned long long)total);
        h->avg = h->host + h->region * t->n_rep;
        memset(h->avg, 0, h->region); /* alignment gaps: never summed, copied in as zeros */
    }
    vkt_status st = gpu_buffer_import_host(r->ctx, h->host + h->region * r->index, h->region,
                                           &r->stage);
    if (st == VKT_OK)
        st = gpu_buffer_import_host(r->ctx, h->avg, h->region, &r->avg_in);
    return st == VKT_OK ? st : trainer_fail(t, st, "replica %u: %s", r->index,
                                            vkt_context_errmsg(r->ctx));
}

static void host_destroy(reducer *rd)
{
    host_reducer *h = of(rd);
    reduce_pool_destroy(h->pool);
    free(h->ranges);
    free(h->first);
    free(h->mark);
    free(h->job);
    plat_aligned_free(h->host); /* after the contexts (replicas_destroy): every import gone */
    free(h);
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

const reduce_ops reduce_host_import_ops = {
    .name = "host-import",
    .create = host_create,
    .destroy = host_destroy,
    .attach = host_attach,
    .start = host_start,
    .threads = host_threads,
    .make_stage = import_stage,
    .submit_only = 0,
    .exchange = host_exchange,
    .go_on = host_go_on,
    .applied = NULL,
    .mean_loss = host_mean_loss,
    .batch_unused = host_batch_unused,
};
