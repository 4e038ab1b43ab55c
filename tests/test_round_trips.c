/* Host round trips (issue 21): what a training step costs the host in queue submissions
 * (S), blocking fence waits (F) and synchronous staged transfers (T), counted by the gpu
 * layer (gpu_context_counters) and summed by vkt_trainer_stats over the holders.
 *  - the counters themselves: a stream run is 1 S + 1 F, a wait with nothing submitted
 *    is free, a staged buffer write or read is 1 T (+ 1 S + 1 F) per 16 MiB chunk, and
 *    the device's idle time counts from a wait to the next submission unless disarmed;
 *  - the counts per holder and step, derived from the code (each figure's comment names
 *    where the round trips happen). With the host's access to device buffers mapped
 *    (lavapipe's default) / staged (a discrete GPU, or VKT_MEMORY_PROFILE=staging|
 *    unmapped|rebar: ctest runs this under each):
 *      one replica (fit, vkt_trainer_step): 1 S, 1 F / the same;
 *      N = 2, 3 sync replicas: 1 S, 1 F (the previous step's update goes in the step's
 *        submission, apply.h; it was 2 S, 2 F with the update a submission of its own) /
 *        the same (the staging is host memory);
 *      N = 2 async replicas, per update: 1 S, 1 F / the same (the pull opens the step's
 *        submission; it was 2 S, 2 F, 1 T staged, a transfer of its own); sharing one
 *        VkDevice (VKT_SHARE_DEVICE=1) the master is on it: the same per update, no
 *        parameter byte through the host, per run 2 S, 2 F, 0 T (its begin and end);
 *      a P = 2 pipeline of m micro-batches, per step over both stages, with plain SGD:
 *        3m S and F / the same, 0 T (a stage sums its micro-batches on its device and its
 *        optimizer applies that sum there, ahead of the stage's first run of the next
 *        step in its submission: grad_reads and grad_writes 0; it was 3m + 2 with each
 *        stage's update a submission of its own); with clipping or fp16 (the host route)
 *        3m S and F / 3m + 2, 2 T (the sum read back once, 1 T per stage where staged;
 *        the host's decision written into host-visible memory, whose copy into the
 *        gradient and the update go ahead of the stage's next run as plain SGD's:
 *        grad_reads and grad_writes 1; it was 3m + 2 / 3m + 6, 4 T with the upload and
 *        the update two round trips of their own, and before the device sum m reads,
 *        5m + 4 S and F, 2m + 2 T); the same per copy with 2 copies (D = 2: the copies'
 *        sums meet on the host), per holder 3m / P / (3m + 2) / P, 2 / P T.
 *    Per step = the difference between a fit of 2k steps and one of k steps, so what a
 *    run costs once (async's master read and write-back) falls out; that per-run part is
 *    checked too;
 *  - the sync replicas' staging is in host-cached memory wherever the device offers a
 *    host-visible cached type (reported by vkt_trainer_stats);
 *  - the update a sync step leaves pending runs before anything reads the parameters:
 *    a read after a run costs one submission and one wait per replica (the flush), or
 *    per stage of a pipeline (its due update, on either route), a second read none; a
 *    checkpoint saved from fit's progress callback (which flushes replica 0 alone) holds
 *    the same bytes as one saved after a fit of as many steps, and the run goes on to the
 *    same parameters, bitwise, on every replica. */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "gpu/gpu.h"
#include "platform/platform.h"

enum { F = 12, H = 16, C = 5, BATCH = 12, K = 4 };

/* ---- the counters ------------------------------------------------------------------ */

static gpu_counters counters(vkt_context *ctx)
{
    gpu_counters c;
    gpu_context_counters(ctx, &c);
    return c;
}

/* Whether this process's contexts reach device buffers through staged copies (the
 * memory profile, or a device without mapped device memory): one written and counted. */
static int g_staged;
static int g_cached; /* a host-visible coherent cached memory type is offered */
static int g_timeline; /* the device has timeline semaphores */
static int g_import; /* VKT_HOST_IMPORT=1 and the device imports host memory */
static int g_share;  /* VKT_SHARE_DEVICE=1 (replicas on one device share its VkDevice) and
                        the device has timelines: sync replicas average on it */

static void probe_memory(void)
{
    vkt_context *ctx = th_context(VKT_KERNELS_AUTO);
    vkt_buffer *b = NULL;
    float x = 1.0f;
    TH_OK(ctx, vkt_buffer_create(ctx, 4096, VKT_MEMORY_DEVICE, &b));
    gpu_counters c0 = counters(ctx);
    TH_OK(ctx, vkt_buffer_write(b, 0, &x, sizeof x));
    g_staged = counters(ctx).sync_transfers > c0.sync_transfers;
    const VkMemoryPropertyFlags host = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT |
                                       VK_MEMORY_PROPERTY_HOST_COHERENT_BIT |
                                       VK_MEMORY_PROPERTY_HOST_CACHED_BIT;
    for (uint32_t v = 0; v < ctx->mem.type_count; v++)
        g_cached |= (ctx->mem.types[v].flags & host) == host;
    vkt_buffer_destroy(b);
    const char *share = plat_getenv("VKT_SHARE_DEVICE");
    g_timeline = ctx->timeline;
    g_share = share && strcmp(share, "1") == 0 && ctx->timeline;
    const char *imp = plat_getenv("VKT_HOST_IMPORT");
    g_import = imp && strcmp(imp, "1") == 0 && ctx->host_import;
    printf("replicas on one device average %s\n", g_share ? "on it" : "through the host");
    printf("memory profile %s: device buffers %s, a host-cached type %s\n",
           vkt_memory_profile_name(vkt_context_memory_profile(ctx)),
           g_staged ? "staged" : "mapped", g_cached ? "offered" : "not offered");
}

static void test_counters(void)
{
    vkt_context *ctx = th_context(VKT_KERNELS_AUTO);
    vkt_stream *s = th_stream(ctx, 0);
    vkt_buffer *a = NULL, *b = NULL;
    TH_OK(ctx, vkt_buffer_create(ctx, 4096, VKT_MEMORY_DEVICE, &a));
    TH_OK(ctx, vkt_buffer_create(ctx, 4096, VKT_MEMORY_DEVICE, &b));
    TH_OK(ctx, vkt_stream_copy(s, a, 0, b, 0, 4096));
    gpu_counters c0 = counters(ctx);
    TH_OK(ctx, vkt_stream_run(s));
    gpu_counters c1 = counters(ctx);
    TH_CHECK(c1.submits == c0.submits + 1 && c1.fence_waits == c0.fence_waits + 1,
             "a run: 1 submit and 1 wait (%llu, %llu)",
             (unsigned long long)(c1.submits - c0.submits),
             (unsigned long long)(c1.fence_waits - c0.fence_waits));
    TH_OK(ctx, vkt_stream_wait(s));
    gpu_counters c2 = counters(ctx);
    TH_CHECK(c2.fence_waits == c1.fence_waits && c2.submits == c1.submits,
             "a wait with nothing submitted is no round trip");
    /* The idle time: from the wait that emptied the queue to the next submission. */
    plat_sleep(0.004);
    TH_OK(ctx, vkt_stream_submit(s));
    gpu_counters c3 = counters(ctx);
    TH_CHECK(c3.idle_seconds - c2.idle_seconds >= 0.0039,
             "4 ms asleep between a wait and a submission count as idle (%.4f s)",
             c3.idle_seconds - c2.idle_seconds);
    TH_OK(ctx, vkt_stream_reset(s)); /* waits for it: a round trip */
    gpu_counters c4 = counters(ctx);
    TH_CHECK(c4.fence_waits == c3.fence_waits + 1, "reset after a submit waits once");
    gpu_context_idle_disarm(ctx);
    plat_sleep(0.004);
    TH_OK(ctx, vkt_stream_copy(s, a, 0, b, 0, 4096));
    TH_OK(ctx, vkt_stream_run(s));
    gpu_counters c5 = counters(ctx);
    TH_CHECK(c5.idle_seconds == c4.idle_seconds, "disarmed: the time before the next "
             "submission is not idle time (%.6f s counted)", c5.idle_seconds - c4.idle_seconds);
    TH_CHECK(c5.sync_transfers == 0, "stream copies are no staged transfer (%llu)",
             (unsigned long long)c5.sync_transfers);
    /* Two streams in one submission (gpu_stream_submit_after): one submit; waiting for
     * the carried stream waits for the carrier, once; the carried stream's writes come
     * first (its closing barrier orders the carrier's copy after its fill). */
    vkt_stream *u = th_stream(ctx, 0);
    vkt_view av = {a, 0};
    TH_OK(ctx, vkt_stream_reset(s));
    TH_OK(ctx, vkt_fill(u, av, 1024, 2.5f));
    TH_OK(ctx, gpu_stream_barrier_all(u));
    TH_OK(ctx, vkt_stream_copy(s, a, 0, b, 0, 4096));
    for (int round = 0; round < 2; round++) { /* the second: both replayed */
        gpu_counters d0 = counters(ctx);
        TH_OK(ctx, gpu_stream_submit_after(s, &u, 1));
        gpu_counters d1 = counters(ctx);
        TH_OK(ctx, vkt_stream_wait(u)); /* waits for s */
        gpu_counters d2 = counters(ctx);
        TH_OK(ctx, vkt_stream_wait(s)); /* already over */
        gpu_counters d3 = counters(ctx);
        TH_CHECK(d1.submits - d0.submits == 1 && d2.fence_waits - d1.fence_waits == 1 &&
                     d3.fence_waits == d2.fence_waits,
                 "two streams in one submission: %llu submits, %llu + %llu waits (1, 1 + 0)",
                 (unsigned long long)(d1.submits - d0.submits),
                 (unsigned long long)(d2.fence_waits - d1.fence_waits),
                 (unsigned long long)(d3.fence_waits - d2.fence_waits));
        float got[1024];
        TH_OK(ctx, vkt_buffer_read(b, 0, got, sizeof got));
        int same = 1;
        for (int i = 0; i < 1024; i++)
            same &= got[i] == 2.5f;
        TH_CHECK(same, "the carrier's copy saw the carried stream's fill (%g)", (double)got[0]);
        float zero[1024] = {0};
        TH_OK(ctx, vkt_buffer_write(a, 0, zero, sizeof zero));
        TH_OK(ctx, vkt_buffer_write(b, 0, zero, sizeof zero));
    }
    vkt_stream_destroy(u);
    vkt_stream_destroy(s); /* th_finish destroys the context */

    /* Forced staging: a device buffer's host access is a staged copy per 16 MiB chunk. */
    vkt_context_options o = {.force_staging = 1};
    TH_OK(NULL, vkt_context_create(th_instance, &o, &ctx));
    if (!ctx)
        return;
    const uint64_t bytes = 40ull << 20; /* 3 chunks: 16 + 16 + 8 MiB */
    char *host = malloc(bytes);
    vkt_buffer *big = NULL, *hb = NULL;
    TH_OK(ctx, vkt_buffer_create(ctx, bytes, VKT_MEMORY_DEVICE, &big));
    TH_OK(ctx, vkt_buffer_create(ctx, 4096, VKT_MEMORY_HOST, &hb));
    if (host && big && hb) {
        memset(host, 7, bytes);
        c0 = counters(ctx);
        TH_OK(ctx, vkt_buffer_write(big, 0, host, bytes));
        TH_OK(ctx, vkt_buffer_read(big, 0, host, bytes));
        c1 = counters(ctx);
        TH_CHECK(c1.sync_transfers - c0.sync_transfers == 6 &&
                     c1.transfer_bytes - c0.transfer_bytes == 2 * bytes,
                 "40 MiB written and read through staging: 6 transfers of 80 MiB (%llu, %llu "
                 "bytes)", (unsigned long long)(c1.sync_transfers - c0.sync_transfers),
                 (unsigned long long)(c1.transfer_bytes - c0.transfer_bytes));
        TH_CHECK(c1.submits - c0.submits == 6 && c1.fence_waits - c0.fence_waits == 6,
                 "each transfer is a submit and a wait (%llu, %llu)",
                 (unsigned long long)(c1.submits - c0.submits),
                 (unsigned long long)(c1.fence_waits - c0.fence_waits));
        TH_OK(ctx, vkt_buffer_write(hb, 0, host, 4096));
        c2 = counters(ctx);
        TH_CHECK(c2.sync_transfers == c1.sync_transfers && c2.submits == c1.submits,
                 "a host buffer is written through its mapping, staging forced or not");
    }
    free(host);
    vkt_context_destroy(ctx);
}

/* ---- trainers ------------------------------------------------------------------------ */

typedef struct net {
    vkt_graph *g;
    vkt_tensor *x, *y, *loss;
} net;

/* x [B,F] -> relu(linear) (stage 0) -> linear + cross-entropy (stage `s1`). */
static net make_net(uint32_t s1)
{
    net n = {0};
    vkt_graph_options go = {.seed = 21};
    vkt_graph_create(&go, &n.g);
    vkt_shape xs = {2, {BATCH, F}}, w1 = {2, {F, H}}, b1 = {1, {H}}, w2 = {2, {H, C}},
              b2 = {1, {C}};
    vkt_init he = {.kind = VKT_INIT_HE}, small = {.kind = VKT_INIT_UNIFORM, .a = -0.1f, .b = 0.1f};
    n.x = vkt_input(n.g, "x", &xs);
    n.y = vkt_input_labels(n.g, "y", BATCH);
    vkt_tensor *h = vkt_relu(n.g, vkt_linear(n.g, n.x, vkt_param(n.g, "w1", &w1, &he),
                                             vkt_param(n.g, "b1", &b1, &small)));
    vkt_graph_set_stage(n.g, s1);
    vkt_tensor *z = vkt_linear(n.g, h, vkt_param(n.g, "w2", &w2, &he),
                               vkt_param(n.g, "b2", &b2, &small));
    n.loss = vkt_softmax_cross_entropy(n.g, z, n.y);
    TH_CHECK(vkt_graph_status(n.g) == VKT_OK, "graph: %s", vkt_graph_errmsg(n.g));
    return n;
}

static vkt_dataset *synthetic(uint32_t count)
{
    float *x = th_alloc_floats((uint64_t)count * F);
    int32_t *y = malloc(count * sizeof *y);
    th_fill_uniform(x, (uint64_t)count * F, -1, 1);
    for (uint32_t i = 0; i < count; i++)
        y[i] = (int32_t)(th_rand_u64() % C);
    vkt_dataset *d = NULL;
    TH_OK(NULL, vkt_dataset_create(count, F, C, x, y, &d));
    free(x);
    free(y);
    return d;
}

/* One configuration: its expected round trips per holder and step (per update in async
 * mode) and per run, and why. */
typedef struct config {
    const char *what;
    uint32_t replicas, stages, micro;
    vkt_parallel_mode mode;
    int use_step;              /* vkt_trainer_step instead of fit */
    double s, f, t;            /* per holder and step, device buffers mapped */
    double staged;             /*   and what staged device access adds to each of them */
    double per_run;            /* transfers (each a submit and a wait) a fit costs once,
                                  whatever its steps, where device access is staged */
    int exposes;               /* 1: the devices wait for the host inside a step */
    float clip;                /* the optimizer's clip_norm (pipelines: by the global norm) */
    vkt_precision precision;   /* fp16: loss scaling, the skips' guard */
    vkt_recompute recompute;   /* pipelines: keep activations or recompute the forward */
} config;

static const config configs[] = {
    /* trainer.c:trainer_forward_backward: graph_model_step_submit (the step with the
     * update as its epilogue) and graph_model_step_wait; inputs and the loss travel
     * inside the step where they are not mapped (graph/model.c: inputs_staged). */
    {"1 replica, fit", 1, 1, 1, VKT_PARALLEL_SYNC, 0, 1, 1, 0, 0, 0, 1, 0, 0, 0},
    /* vkt_trainer_step: the same step, one submission per call, so nothing is exposed
     * (the time between calls is the caller's). */
    {"1 replica, vkt_trainer_step", 1, 1, 1, VKT_PARALLEL_SYNC, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0},
    /* exec_replicas.c:replicas_step: the previous step's update (apply.c's stream) and
     * this step's forward and backward (gradients copied into the host staging) in one
     * submission (apply_submit_step), then the host reducer's average. Inside a fit the
     * devices wait while the host averages; across vkt_trainer_step calls that time is
     * between the calls (the caller's), so nothing is exposed. */
    {"2 sync replicas, fit", 2, 1, 1, VKT_PARALLEL_SYNC, 0, 1, 1, 0, 0, 0, 1, 0, 0, 0},
    {"3 sync replicas, fit", 3, 1, 1, VKT_PARALLEL_SYNC, 0, 1, 1, 0, 0, 0, 1, 0, 0, 0},
    {"2 sync replicas, vkt_trainer_step", 2, 1, 1, VKT_PARALLEL_SYNC, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0},
    /* exchange_master.c:one_update: the pull (the master into the replica's host-visible
     * upload buffer, whose copy into the parameters opens the step's submission:
     * exchange.h; it was a staged transfer of its own where the parameters are not
     * mapped) and trainer_forward_backward. Per run: the master's begin reads replica 0's
     * parameters, its end writes the master into each replica: 1 + 2 transfers where
     * staged. */
    {"2 async replicas, fit", 2, 1, 1, VKT_PARALLEL_ASYNC, 0, 1, 1, 0, 0, 3, 1, 0, 0, 0},
};

/* pipe_sched.c, per step over the two stages: a non-last stage runs m forwards and m
 * backwards (keeping its activations: the step's two halves, graph_model_step_forward and
 * _backward; recomputing: graph_model_forward_train and the whole step, which runs the
 * forward again: 2m forwards, vkt_pipeline_stage_stats.forwards), the last stage m
 * forward-backwards: 2m + m, either way. Sent values and input gradients travel inside
 * the steps, and the zeroing of the gradient sum. Each stage's update (apply) goes ahead
 * of the stage's first run of the next step, in its submission, on both routes
 * (pipe_route.ahead: + 0). Where the host's sum is needed (copies, clipping by the global
 * norm, fp16's loss scale and guard: the host route, pipe_engine.h's pipe_route) each
 * stage reads its sum back (vkt_model_read_grads) after its last micro-batch, and update
 * writes the host's result into the stage's host-visible hsum, copied into the gradient
 * by the update itself: grad_reads and grad_writes 1, and where device access is staged
 * one transfer per stage (the read; `add` in test_config); otherwise (plain SGD, one copy:
 * the direct route) the optimizer applies the sum where it is: 0 reads, 0 writes, no
 * transfer. Per copy: c->replicas copies (holders P x D) each do the same. */
static int pipeline_host_route(const config *c)
{
    return c->clip > 0 || c->precision == VKT_PRECISION_FP16 || c->replicas > 1;
}
static double pipeline_per_step(const config *c) /* one copy's stages */
{
    return 3.0 * c->micro;
}

typedef struct delta {
    double s, f, t, exposed, wall;
    uint64_t steps;
    uint64_t host_bytes; /* gradient bytes the host read to average */
    uint64_t xc_bytes;   /* async: parameter bytes the host moved to exchange them */
} delta;

/* A fit (or a vkt_trainer_step loop) of n steps: the stats' differences. */
static delta run(vkt_trainer *tr, const config *c, const net *n, const vkt_dataset *d,
                 uint64_t steps)
{
    vkt_trainer_stats s0, s1;
    TH_OK(NULL, vkt_trainer_stats_get(tr, &s0));
    double t0 = plat_now();
    if (c->use_step) {
        float x[BATCH * F];
        int32_t y[BATCH];
        for (uint64_t k = 0; k < steps; k++) {
            th_fill_uniform(x, BATCH * F, -1, 1);
            for (uint32_t i = 0; i < BATCH; i++)
                y[i] = (int32_t)(th_rand_u64() % C);
            vkt_feed f[2] = {{n->x, x}, {n->y, y}};
            TH_OK(NULL, vkt_trainer_step(tr, f, 2, NULL));
        }
    } else {
        vkt_status st = vkt_trainer_fit(tr, d, n->x, n->y, steps, 5, NULL, NULL);
        TH_CHECK(st == VKT_OK, "%s: fit: %s", c->what, vkt_trainer_errmsg(tr));
    }
    double wall = plat_now() - t0;
    TH_OK(NULL, vkt_trainer_stats_get(tr, &s1));
    return (delta){(double)(s1.submits - s0.submits), (double)(s1.fence_waits - s0.fence_waits),
                   (double)(s1.sync_transfers - s0.sync_transfers),
                   s1.exposed_seconds - s0.exposed_seconds, wall, steps,
                   s1.average_host_bytes - s0.average_host_bytes,
                   s1.exchange_host_bytes - s0.exchange_host_bytes};
}

static void test_config(const config *c, const vkt_dataset *d)
{
    net n = make_net(c->stages > 1 ? 1 : 0);
    uint32_t dev[8] = {0};
    vkt_trainer_options o = {.batch = BATCH, .devices = dev, .device_count = c->replicas,
                             .mode = c->mode, .stages = c->stages,
                             .micro_batches = c->micro, .precision = c->precision,
                             .recompute = c->recompute};
    o.optimizer = (vkt_optimizer_options){.kind = VKT_OPTIMIZER_SGD, .lr = 0.05f,
                                          .momentum = 0.9f, .clip_norm = c->clip};
    if (c->stages > 1)
        o.device_count = c->stages * c->replicas; /* copy d's stage s: entry d P + s */
    vkt_trainer *tr = NULL;
    vkt_status st = vkt_trainer_create(th_instance, n.g, n.loss, &o, &tr);
    TH_CHECK(st == VKT_OK, "%s: create: %s", c->what, vkt_last_error());
    if (!tr) {
        vkt_graph_destroy(n.g);
        return;
    }
    vkt_trainer_stats s;
    vkt_trainer_stats_get(tr, &s);
    uint32_t holders = c->stages > 1 ? c->stages * c->replicas : c->replicas;
    TH_CHECK(s.holders == holders, "%s: %u holders (%u)", c->what, holders, s.holders);
    run(tr, c, &n, d, 2); /* warm-up: first recordings and allocations */
    delta a = run(tr, c, &n, d, K), b = run(tr, c, &n, d, 2 * K);
    /* per holder and step (async: per update, every replica makes `steps` of them) */
    double per = (double)holders * K;
    double ds = (b.s - a.s) / per, df = (b.f - a.f) / per, dt = (b.t - a.t) / per;
    int host = c->stages > 1 && pipeline_host_route(c); /* a stage's reads and writes */
    double add = g_staged ? c->stages > 1 ? 1.0 * host : c->staged : 0;
    double ws = (c->stages > 1 ? pipeline_per_step(c) / c->stages : c->s) + add;
    double wf = (c->stages > 1 ? pipeline_per_step(c) / c->stages : c->f) + add;
    double wt = c->t + add;
    TH_CHECK(ds == ws && df == wf && dt == wt,
             "%s: %.3g submits, %.3g fence waits, %.3g transfers per holder and step "
             "(expected %.3g, %.3g, %.3g)", c->what, ds, df, dt, ws, wf, wt);
    for (uint32_t k = 0; c->stages > 1 && k < c->stages; k++) { /* once, after the last */
        vkt_pipeline_stage_stats ps;
        TH_OK(NULL, vkt_trainer_stage_stats_get(tr, k, &ps));
        TH_CHECK(ps.grad_reads == (uint64_t)host && ps.grad_writes == (uint64_t)host,
                 "%s: stage %u read its gradient back %llu times and wrote it %llu times in a "
                 "step (expected %d)", c->what, k, (unsigned long long)ps.grad_reads,
                 (unsigned long long)ps.grad_writes, host);
        /* forwards per step: m where the stage keeps its activations (and on the last
         * stage, whose forward is its whole step), 2m where it recomputes; AUTO keeps
         * where they fit (lavapipe's heap: always here, but the rule is the engine's) */
        uint32_t K = c->stages - k < c->micro ? c->stages - k : c->micro;
        int last = k == c->stages - 1, keeps = last || c->recompute == VKT_RECOMPUTE_NEVER ||
                                                   (c->recompute == VKT_RECOMPUTE_AUTO && ps.kept);
        uint64_t want = keeps ? c->micro : 2ull * c->micro;
        if (last && c->micro >= 2 && c->recompute != VKT_RECOMPUTE_ALWAYS && ps.sent_bytes &&
            !ps.sent_host_bytes) /* the device row: the last stage's second model */
            K = 2;
        TH_CHECK(ps.forwards == want && ps.kept == (keeps ? K : 0),
                 "%s: stage %u ran its forward %llu times in a step, keeping %u micro-batches "
                 "(expected %llu, %u)", c->what, k, (unsigned long long)ps.forwards, ps.kept,
                 (unsigned long long)want, keeps ? K : 0);
        if (k == 0)
            printf("  %s: stage 0 ran %llu forwards per step for %u micro-batches (%s)\n",
                   c->what, (unsigned long long)ps.forwards, c->micro,
                   keeps ? "kept" : "recomputed");
    }
    double run_s = a.s - ds * per, run_f = a.f - df * per, run_t = a.t - dt * per;
    double want_run = g_staged ? c->per_run : 0, want_sf = want_run;
    /* Async replicas sharing one VkDevice keep the master there (exchange_device.c): per
     * run, its begin (replica 0's parameters into it) and its end (it into every replica)
     * are one device submission and one wait each, whatever the memory; no transfer. */
    int async_dev = g_share && c->mode == VKT_PARALLEL_ASYNC && c->replicas > 1;
    if (async_dev) {
        want_run = 0;
        want_sf = 2;
    }
    TH_CHECK(run_s == want_sf && run_f == want_sf && run_t == want_run,
             "%s: %.3g submits, %.3g waits and %.3g transfers per run besides the steps "
             "(expected %.3g, %.3g, %.3g)", c->what, run_s, run_f, run_t, want_sf, want_sf,
             want_run);
    if (c->mode == VKT_PARALLEL_ASYNC && c->replicas > 1) {
        const char *want = async_dev ? "device" : "master";
        TH_CHECK(s.exchange && strcmp(s.exchange, want) == 0 &&
                     (async_dev ? b.xc_bytes == 0 : b.xc_bytes > 0),
                 "%s: the %s exchange (%s), %llu parameter bytes through the host", c->what,
                 want, s.exchange ? s.exchange : "none", (unsigned long long)b.xc_bytes);
    }
    /* The sync replicas' staging: host-cached wherever the device offers it. */
    /* Sync replicas sharing one VkDevice (VKT_SHARE_DEVICE=1; lavapipe has timelines)
     * average there: no host staging, no gradient byte read by the host; on a device each,
     * the host reads every replica's gradient each step. */
    int on_device = g_share && c->replicas > 1 && c->stages == 1;
    if (c->mode == VKT_PARALLEL_SYNC && c->replicas > 1 && c->stages == 1) {
        const char *want = on_device ? "device" : g_import ? "host-import" : "host";
        TH_CHECK(s.reducer && strcmp(s.reducer, want) == 0, "%s: the %s reducer (%s)", c->what,
                 want, s.reducer ? s.reducer : "none");
        TH_CHECK(on_device ? b.host_bytes == 0 && a.host_bytes == 0
                           : b.host_bytes == 2 * a.host_bytes && a.host_bytes > 0,
                 "%s: %llu gradient bytes read by the host over %u steps", c->what,
                 (unsigned long long)a.host_bytes, K);
    }
    int want_cached = c->replicas > 1 && c->stages == 1 && !on_device ? g_cached : -1;
    if (c->mode == VKT_PARALLEL_SYNC)
        TH_CHECK(s.stage_cached == want_cached, "%s: stage_cached %d (expected %d)", c->what,
                 s.stage_cached, want_cached);
    /* Exposed time: within the run's wall time on every holder; nothing where a run is
     * one submission (vkt_trainer_step of one replica); something where the host sits
     * between two submissions of a step. */
    int bounded = b.exposed >= 0 && b.exposed <= holders * b.wall;
    TH_CHECK(bounded, "%s: exposed %.4f s within %u holders x %.4f s", c->what, b.exposed,
             holders, b.wall);
    if (c->exposes && c->replicas > 1 && c->stages == 1 && c->mode == VKT_PARALLEL_SYNC)
        TH_CHECK(b.exposed > 0, "%s: the devices wait while the host averages (%.6f s)",
                 c->what, b.exposed);
    if (!c->exposes)
        TH_CHECK(b.exposed == 0, "%s: nothing exposed (%.6f s)", c->what, b.exposed);
    /* A read of the parameters runs the pending updates first: one submission and one
     * wait per replica of a sync run (besides the read's own transfers where staged),
     * none for a second read. */
    uint32_t flushes = c->replicas > 1 && c->mode == VKT_PARALLEL_SYNC ? c->replicas : 0;
    if (c->stages > 1) /* the due updates, one per stage of every copy, either route */
        flushes = c->stages * c->replicas;
    /* On the device row a stage's runs go in without a wait (pipe_edge_device.c) and a
     * non-last stage's stream is waited for when it replays: where the step's first run,
     * which carried the update, did not replay within the step (keeping: m <= K, slot 0's
     * forward half runs once; recomputing: m = 1), its wait comes with the flush, which
     * must not resubmit the update's commands before that run is over: one more wait, no
     * submission (without the flush it comes at the next step's replay). */
    uint32_t carried = 0;
    for (uint32_t k = 0; flushes && c->stages > 1 && k + 1 < c->stages; k++) {
        vkt_pipeline_stage_stats ps;
        TH_OK(NULL, vkt_trainer_stage_stats_get(tr, k, &ps));
        int device_row = ps.sent_bytes && !ps.sent_host_bytes;
        carried += (device_row && (ps.kept ? c->micro <= ps.kept : c->micro < 2)) *
                   c->replicas; /* every copy alike */
    }
    uint64_t np = vkt_trainer_param_count(tr);
    float *p = malloc(np * sizeof *p);
    for (int again = 0; again < 2; again++) {
        vkt_trainer_stats r0, r1;
        TH_OK(NULL, vkt_trainer_stats_get(tr, &r0));
        TH_OK(NULL, vkt_trainer_read_params(tr, p, np));
        TH_OK(NULL, vkt_trainer_stats_get(tr, &r1));
        uint64_t tr_ = r1.sync_transfers - r0.sync_transfers;
        uint64_t fs = r1.submits - r0.submits - tr_, ff = r1.fence_waits - r0.fence_waits - tr_;
        uint32_t want = again ? 0 : flushes, want_f = again ? 0 : flushes + carried;
        TH_CHECK(fs == want && ff == want_f, "%s: read_params %s: %llu submits, %llu waits "
                 "besides its transfers (expected %u, %u)", c->what, again ? "again" : "after "
                 "the run", (unsigned long long)fs, (unsigned long long)ff, want, want_f);
    }
    free(p);
    vkt_trainer_destroy(tr);
    vkt_graph_destroy(n.g);
}

/* ---- the pending update: flushed before a save from the progress callback ---------- */

typedef struct saver {
    vkt_trainer *t;
    uint64_t at;
    const char *path;
    vkt_status st;
} saver;

static int save_at(void *user, uint64_t step, uint64_t total, float loss)
{
    (void)total;
    (void)loss;
    saver *s = user;
    if (step == s->at)
        s->st = vkt_trainer_save(s->t, s->path);
    return 0;
}

static vkt_trainer *sync2_with(const net *n, int overlap, uint32_t bucket_bytes)
{
    uint32_t dev[2] = {0, 0};
    vkt_trainer_options o = {.batch = BATCH, .devices = dev, .device_count = 2,
                             .mode = VKT_PARALLEL_SYNC, .overlap = overlap,
                             .bucket_bytes = bucket_bytes};
    o.optimizer = (vkt_optimizer_options){.kind = VKT_OPTIMIZER_ADAM, .lr = 0.01f};
    vkt_trainer *t = NULL;
    TH_CHECK(vkt_trainer_create(th_instance, n->g, n->loss, &o, &t) == VKT_OK, "create: %s",
             vkt_last_error());
    return t;
}

static vkt_trainer *sync2(const net *n) { return sync2_with(n, 0, 0); }

/* In one process with overlap forced on and buckets of 16 floats (each closes after the
 * gradient that fills it: 4 buckets of the MLP's, the last empty): the host sums each
 * bucket as the devices pass its mark; the same bits as summing after the step, and
 * still one submission and one wait per step. */
static void test_overlap(const vkt_dataset *d)
{
    net n = make_net(0);
    float *p[2] = {NULL, NULL}, *q = NULL;
    uint64_t np = 0;
    for (int on = 0; on < 2; on++) {
        vkt_trainer *t = sync2_with(&n, on ? 1 : -1, 64);
        if (!t)
            break;
        np = vkt_trainer_param_count(t);
        p[on] = malloc(np * 4);
        q = realloc(q, np * 4);
        TH_OK(NULL, vkt_trainer_fit(t, d, n.x, n.y, 2, 5, NULL, NULL)); /* warm-up */
        vkt_trainer_stats s0, s1;
        TH_OK(NULL, vkt_trainer_stats_get(t, &s0));
        TH_OK(NULL, vkt_trainer_fit(t, d, n.x, n.y, 4, 5, NULL, NULL));
        TH_OK(NULL, vkt_trainer_stats_get(t, &s1));
        TH_CHECK(s1.submits - s0.submits == 8 && s1.fence_waits - s0.fence_waits == 8,
                 "overlap %s: 4 steps of 2 replicas, %llu submits and %llu waits (8, 8)",
                 on ? "on" : "off", (unsigned long long)(s1.submits - s0.submits),
                 (unsigned long long)(s1.fence_waits - s0.fence_waits));
        TH_OK(NULL, vkt_trainer_read_replica_params(t, 0, p[on], np));
        TH_OK(NULL, vkt_trainer_read_replica_params(t, 1, q, np));
        TH_CHECK(memcmp(p[on], q, np * 4) == 0, "overlap %s: the replicas identical",
                 on ? "on" : "off");
        vkt_trainer_destroy(t);
    }
    TH_CHECK(p[0] && p[1] && memcmp(p[0], p[1], np * 4) == 0, "bucket by bucket as the "
             "devices pass their marks: the same bits as the sum after the step");
    free(p[0]);
    free(p[1]);
    free(q);
    vkt_graph_destroy(n.g);
}

static void *file_bytes(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *b = malloc(n > 0 ? (size_t)n : 1);
    *size = b && n > 0 && fread(b, 1, (size_t)n, f) == (size_t)n ? (size_t)n : 0;
    fclose(f);
    return b;
}

static void test_flush_from_callback(const vkt_dataset *d)
{
    char dir[512], live[600], after[600];
    th_temp_dir("round_trips", dir, sizeof dir);
    snprintf(live, sizeof live, "%s/live.vkt", dir);
    snprintf(after, sizeof after, "%s/after.vkt", dir);
    net n = make_net(0);
    vkt_trainer *a = sync2(&n), *b = sync2(&n);
    if (!a || !b)
        return;
    /* a: 6 steps with a save from the callback after step 3; b: 3 steps, a save, 3 more */
    saver s = {a, 3, live, VKT_ERROR_INTERNAL};
    TH_OK(NULL, vkt_trainer_fit(a, d, n.x, n.y, 6, 5, save_at, &s));
    TH_CHECK(s.st == VKT_OK, "the save from the callback: %s", vkt_trainer_errmsg(a));
    TH_OK(NULL, vkt_trainer_fit(b, d, n.x, n.y, 3, 5, NULL, NULL));
    TH_OK(NULL, vkt_trainer_save(b, after));
    TH_OK(NULL, vkt_trainer_fit(b, d, n.x, n.y, 3, 5, NULL, NULL));
    size_t n1 = 0, n2 = 0;
    void *x = file_bytes(live, &n1), *y = file_bytes(after, &n2);
    TH_CHECK(n1 > 0 && n1 == n2 && memcmp(x, y, n1) == 0,
             "a checkpoint saved from the callback at step 3 (%zu bytes) equals one saved "
             "after a fit of 3 steps (%zu bytes)", n1, n2);
    free(x);
    free(y);
    uint64_t np = vkt_trainer_param_count(a);
    float *pa0 = malloc(np * 4), *pa1 = malloc(np * 4), *pb0 = malloc(np * 4);
    TH_OK(NULL, vkt_trainer_read_replica_params(a, 0, pa0, np));
    TH_OK(NULL, vkt_trainer_read_replica_params(a, 1, pa1, np));
    TH_OK(NULL, vkt_trainer_read_replica_params(b, 0, pb0, np));
    TH_CHECK(memcmp(pa0, pa1, np * 4) == 0, "after the live save the replicas stay identical");
    TH_CHECK(memcmp(pa0, pb0, np * 4) == 0, "a run with a save from the callback ends where "
             "one with a save between two fits does, bitwise");
    free(pa0);
    free(pa1);
    free(pb0);
    th_remove_tree(dir);
    vkt_trainer_destroy(a);
    vkt_trainer_destroy(b);
    vkt_graph_destroy(n.g);
}

/* ---- one VkDevice for several contexts (gpu_context_create_shared) -------------------- */

typedef struct filler {
    vkt_context *ctx;
    float value;
    int ok;
} filler;

/* 50 runs of a fill and a copy on its own context, read back and checked each time. */
static void fill_many(void *user)
{
    filler *f = user;
    vkt_buffer *a = NULL, *b = NULL;
    vkt_stream *s = NULL;
    f->ok = vkt_buffer_create(f->ctx, 4096, VKT_MEMORY_DEVICE, &a) == VKT_OK &&
            vkt_buffer_create(f->ctx, 4096, VKT_MEMORY_DEVICE, &b) == VKT_OK &&
            vkt_stream_create(f->ctx, NULL, &s) == VKT_OK;
    for (int k = 0; f->ok && k < 50; k++) {
        float got[1024];
        vkt_view av = {a, 0};
        f->ok = vkt_stream_reset(s) == VKT_OK &&
                vkt_fill(s, av, 1024, f->value + (float)k) == VKT_OK &&
                vkt_stream_copy(s, a, 0, b, 0, 4096) == VKT_OK && vkt_stream_run(s) == VKT_OK &&
                vkt_buffer_read(b, 0, got, sizeof got) == VKT_OK;
        for (int i = 0; f->ok && i < 1024; i++)
            f->ok = got[i] == f->value + (float)k;
    }
    vkt_stream_destroy(s);
    vkt_buffer_destroy(a);
    vkt_buffer_destroy(b);
}

static void test_shared_device(const vkt_dataset *d)
{
    vkt_context *c0 = NULL, *c1 = NULL, *c2 = NULL;
    vkt_context_options o = {0};
    TH_OK(NULL, vkt_context_create(th_instance, &o, &c0));
    TH_OK(NULL, gpu_context_create_shared(th_instance, &o, c0, &c1));
    TH_OK(NULL, vkt_context_create(th_instance, &o, &c2));
    if (!c0 || !c1 || !c2)
        return;
    TH_CHECK(gpu_context_same_device(c0, c1) && !gpu_context_same_device(c0, c2),
             "a shared context is on its first one's VkDevice, a plain one on its own");
    printf("the compute family offers %u queue(s)\n", gpu_context_queue_count(c0));
    /* two threads submitting at once to their contexts on one device (one queue on
     * lavapipe: its lock) */
    filler f0 = {c0, 1.0f, 0}, f1 = {c1, 1000.0f, 0};
    plat_thread *th = NULL;
    TH_CHECK(plat_thread_start(&th, fill_many, &f1) == 0, "a thread");
    fill_many(&f0);
    if (th)
        plat_thread_join(th);
    TH_CHECK(f0.ok && f1.ok, "two contexts on one VkDevice, from two threads at once: every "
             "run's result right (%d, %d)", f0.ok, f1.ok);
    vkt_context_destroy(c0); /* the device lives on with c1 */
    filler f2 = {c1, 7.0f, 0};
    fill_many(&f2);
    TH_CHECK(f2.ok, "the second context works after the first is destroyed");
    vkt_context_destroy(c1);
    vkt_context_destroy(c2);

    /* a trainer's replicas on one VkDevice (averaging there where it has timelines) train
     * to the same bits as on a device each (averaged by the host), 2 and 3 of them */
    net n = make_net(0);
    for (uint32_t reps = 2; reps <= 3; reps++) {
        float *p[2] = {NULL, NULL};
        uint64_t np = 0;
        const char *red[2] = {NULL, NULL};
        for (int shared = 0; shared < 2; shared++) {
            plat_setenv("VKT_SHARE_DEVICE", shared ? "1" : "0");
            uint32_t dev[3] = {0, 0, 0};
            vkt_trainer_options o = {.batch = BATCH, .devices = dev, .device_count = reps,
                                     .mode = VKT_PARALLEL_SYNC};
            o.optimizer = (vkt_optimizer_options){.kind = VKT_OPTIMIZER_ADAM, .lr = 0.01f};
            vkt_trainer *t = NULL;
            TH_CHECK(vkt_trainer_create(th_instance, n.g, n.loss, &o, &t) == VKT_OK,
                     "create: %s", vkt_last_error());
            if (!t)
                break;
            np = vkt_trainer_param_count(t);
            p[shared] = malloc(np * 4);
            TH_OK(NULL, vkt_trainer_fit(t, d, n.x, n.y, 5, 5, NULL, NULL));
            vkt_trainer_stats st;
            TH_OK(NULL, vkt_trainer_stats_get(t, &st));
            red[shared] = st.reducer;
            TH_OK(NULL, vkt_trainer_read_params(t, p[shared], np));
            vkt_trainer_destroy(t);
        }
        TH_CHECK(red[0] && strncmp(red[0], "host", 4) == 0 && red[1] &&
                 strncmp(red[1], g_timeline ? "device" : "host", 4) == 0,
                 "%u replicas: averaged by the %s, then by the %s", reps, red[0] ? red[0] : "-",
                 red[1] ? red[1] : "-");
        TH_CHECK(p[0] && p[1] && memcmp(p[0], p[1], np * 4) == 0, "%u sync replicas sharing "
                 "one VkDevice end where %u on a device each do, bitwise", reps, reps);
        free(p[0]);
        free(p[1]);
    }
    /* A lost device under the device reducer (the first fault injection of this process,
     * so its count starts at 0; a fit of 2 sharing replicas submits exactly twice a step,
     * replica 0 first): the 7th submission passes, the 8th (replica 1's, the one carrying
     * the average) fails; later, every submission of a step fails. Either way the fit
     * stops with the replica named and nothing waits forever (the host raises the
     * timelines the missing work would have). */
    if (g_timeline) {
        plat_setenv("VKT_SHARE_DEVICE", "1");
        const char *inject[2] = {"vkQueueSubmit:7", "vkQueueSubmit:14"};
        for (int k = 0; k < 2; k++) {
            vkt_trainer *t = sync2(&n);
            if (!t)
                break;
            plat_setenv("VKT_FAULT_INJECT", inject[k]);
            vkt_status st = vkt_trainer_fit(t, d, n.x, n.y, 8, 5, NULL, NULL);
            plat_setenv("VKT_FAULT_INJECT", NULL);
            printf("device reducer, %s: %s\n", inject[k], vkt_trainer_errmsg(t));
            TH_CHECK(st == VKT_ERROR_DEVICE_LOST && strstr(vkt_trainer_errmsg(t), "replica ") &&
                         strstr(vkt_trainer_errmsg(t), "VK_ERROR_DEVICE_LOST"),
                     "device reducer, %s: the fit stops, naming the replica: %s (%s)", inject[k],
                     vkt_status_name(st), vkt_trainer_errmsg(t));
            vkt_trainer_destroy(t); /* waits for its queue: returns (no wait left hanging) */
        }
    }
    plat_setenv("VKT_SHARE_DEVICE", "yes");
    uint32_t dev[2] = {0, 0};
    vkt_trainer_options to = {.batch = BATCH, .devices = dev, .device_count = 2};
    to.optimizer = (vkt_optimizer_options){.kind = VKT_OPTIMIZER_SGD, .lr = 0.05f};
    vkt_trainer *bad = NULL;
    vkt_status st = vkt_trainer_create(th_instance, n.g, n.loss, &to, &bad);
    TH_CHECK(st == VKT_ERROR_INVALID_ARGUMENT && strstr(vkt_last_error(), "VKT_SHARE_DEVICE='yes'"),
             "a bad VKT_SHARE_DEVICE is refused, named (%s)", vkt_last_error());
    vkt_trainer_destroy(bad);
    plat_setenv("VKT_SHARE_DEVICE", NULL);
    vkt_graph_destroy(n.g);
}

/* One host allocation imported into two logical devices (VK_EXT_external_memory_host):
 * each device writes its half, the host reads both; a misaligned range is refused. Then
 * sync replicas on a device each whose stages are that allocation's regions
 * (VKT_HOST_IMPORT=1) train to the bits of a buffer each, with the same round trips. */
static void test_host_import(const vkt_dataset *d)
{
    vkt_context *c[2] = {NULL, NULL};
    vkt_context_options o = {0};
    TH_OK(NULL, vkt_context_create(th_instance, &o, &c[0]));
    TH_OK(NULL, vkt_context_create(th_instance, &o, &c[1]));
    if (!c[0] || !c[1] || !c[0]->host_import) {
        printf("host memory import: not offered, skipped\n");
        vkt_context_destroy(c[0]);
        vkt_context_destroy(c[1]);
        return;
    }
    uint64_t a = c[0]->host_import > c[1]->host_import ? c[0]->host_import : c[1]->host_import;
    float *host = plat_aligned_alloc(a, 2 * a);
    vkt_buffer *b[2] = {NULL, NULL};
    for (int i = 0; host && i < 2; i++) {
        TH_OK(c[i], gpu_buffer_import_host(c[i], (char *)host + i * a, a, &b[i]));
        vkt_stream *s = th_stream(c[i], 0);
        if (b[i]) {
            TH_OK(c[i], vkt_fill(s, (vkt_view){b[i], 0}, a / 4, 1.0f + (float)i));
            TH_OK(c[i], vkt_stream_run(s));
        }
        vkt_stream_destroy(s);
    }
    int ok = host != NULL;
    for (uint64_t i = 0; ok && i < a / 2; i++)
        ok = host[i] == (i < a / 4 ? 1.0f : 2.0f);
    TH_CHECK(ok, "one host allocation imported into two VkDevices: each wrote its half");
    vkt_buffer *bad = NULL;
    if (host)
        TH_STATUS(c[0], gpu_buffer_import_host(c[0], (char *)host + 4, a, &bad),
                  VKT_ERROR_INVALID_ARGUMENT);
    for (int i = 0; i < 2; i++) {
        vkt_buffer_destroy(b[i]);
        vkt_context_destroy(c[i]);
    }
    plat_aligned_free(host);

    net n = make_net(0);
    plat_setenv("VKT_SHARE_DEVICE", "0");
    for (uint32_t reps = 2; reps <= 3; reps++) {
        float *p[2] = {NULL, NULL};
        uint64_t np = 0, trips[2][4] = {{0}};
        const char *red[2] = {NULL, NULL};
        for (int imp = 0; imp < 2; imp++) {
            plat_setenv("VKT_HOST_IMPORT", imp ? "1" : "0");
            uint32_t dev[3] = {0, 0, 0};
            vkt_trainer_options to = {.batch = BATCH, .devices = dev, .device_count = reps};
            to.optimizer = (vkt_optimizer_options){.kind = VKT_OPTIMIZER_ADAM, .lr = 0.01f};
            vkt_trainer *t = NULL;
            TH_CHECK(vkt_trainer_create(th_instance, n.g, n.loss, &to, &t) == VKT_OK,
                     "create: %s", vkt_last_error());
            if (!t)
                break;
            np = vkt_trainer_param_count(t);
            p[imp] = malloc(np * 4);
            vkt_trainer_stats s0, s1;
            TH_OK(NULL, vkt_trainer_stats_get(t, &s0));
            TH_OK(NULL, vkt_trainer_fit(t, d, n.x, n.y, 5, 5, NULL, NULL));
            TH_OK(NULL, vkt_trainer_stats_get(t, &s1));
            red[imp] = s1.reducer;
            trips[imp][0] = s1.submits - s0.submits;
            trips[imp][1] = s1.fence_waits - s0.fence_waits;
            trips[imp][2] = s1.sync_transfers - s0.sync_transfers;
            trips[imp][3] = s1.average_host_bytes - s0.average_host_bytes;
            TH_OK(NULL, vkt_trainer_read_params(t, p[imp], np));
            vkt_trainer_destroy(t);
        }
        TH_CHECK(red[0] && strcmp(red[0], "host") == 0 && red[1] &&
                 strcmp(red[1], "host-import") == 0, "%u replicas: the %s, then the %s reducer",
                 reps, red[0] ? red[0] : "-", red[1] ? red[1] : "-");
        TH_CHECK(p[0] && p[1] && memcmp(p[0], p[1], np * 4) == 0, "%u replicas: stages in one "
                 "imported host allocation train to the bits of a buffer each", reps);
        TH_CHECK(memcmp(trips[0], trips[1], sizeof trips[0]) == 0 && trips[1][3] > 0,
                 "%u replicas: the same round trips and host bytes (%llu submits, %llu waits, "
                 "%llu transfers, %llu bytes; imported: %llu, %llu, %llu, %llu)", reps,
                 (unsigned long long)trips[0][0], (unsigned long long)trips[0][1],
                 (unsigned long long)trips[0][2], (unsigned long long)trips[0][3],
                 (unsigned long long)trips[1][0], (unsigned long long)trips[1][1],
                 (unsigned long long)trips[1][2], (unsigned long long)trips[1][3]);
        free(p[0]);
        free(p[1]);
    }
    plat_setenv("VKT_HOST_IMPORT", "yes");
    uint32_t dev[2] = {0, 0};
    vkt_trainer_options to = {.batch = BATCH, .devices = dev, .device_count = 2};
    to.optimizer = (vkt_optimizer_options){.kind = VKT_OPTIMIZER_SGD, .lr = 0.05f};
    vkt_trainer *badt = NULL;
    vkt_status st = vkt_trainer_create(th_instance, n.g, n.loss, &to, &badt);
    TH_CHECK(st == VKT_ERROR_INVALID_ARGUMENT && strstr(vkt_last_error(), "VKT_HOST_IMPORT='yes'"),
             "a bad VKT_HOST_IMPORT is refused, named (%s)", vkt_last_error());
    vkt_trainer_destroy(badt);
    plat_setenv("VKT_HOST_IMPORT", NULL);
    plat_setenv("VKT_SHARE_DEVICE", NULL);
    vkt_graph_destroy(n.g);
}

int main(void)
{
    th_init("test_round_trips");
    probe_memory();
    test_counters();
    vkt_dataset *d = synthetic(240);
    for (size_t i = 0; i < sizeof configs / sizeof *configs; i++)
        test_config(&configs[i], d);
    for (uint32_t m = 2; m <= 4; m += 2) { /* plain SGD: the direct route */
        char what[64];
        snprintf(what, sizeof what, "2 pipeline stages, %u micro-batches, fit", m);
        config c = {what, 1, 2, m, VKT_PARALLEL_SYNC, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0};
        test_config(&c, d);
    }
    /* the host route: clipping by the global norm; fp16 (loss scale, guard); copies */
    config clipped = {"2 pipeline stages, 4 micro-batches, clipping, fit", 1, 2, 4,
                      VKT_PARALLEL_SYNC, 0, 0, 0, 0, 0, 0, 1, 1.0f, 0, 0};
    test_config(&clipped, d);
    config half = {"2 pipeline stages, 4 micro-batches, fp16, fit", 1, 2, 4,
                   VKT_PARALLEL_SYNC, 0, 0, 0, 0, 0, 0, 1, 0, VKT_PRECISION_FP16, 0};
    test_config(&half, d);
    /* the host route with 2 copies of the 2 stages (the copies' sums meet on the host) */
    config copies = {"2 copies of 2 pipeline stages, 2 micro-batches, fit", 2, 2, 2,
                     VKT_PARALLEL_SYNC, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0};
    test_config(&copies, d);
    /* keeping the activations (NEVER recomputes: m forwards per step on stage 0) against
     * recomputing them (ALWAYS: 2m), with the same round trips */
    config kept = {"2 pipeline stages, 4 micro-batches, recompute never, fit", 1, 2, 4,
                   VKT_PARALLEL_SYNC, 0, 0, 0, 0, 0, 0, 1, 0, 0, VKT_RECOMPUTE_NEVER};
    test_config(&kept, d);
    config recomputed = {"2 pipeline stages, 4 micro-batches, recompute always, fit", 1, 2, 4,
                         VKT_PARALLEL_SYNC, 0, 0, 0, 0, 0, 0, 1, 0, 0, VKT_RECOMPUTE_ALWAYS};
    test_config(&recomputed, d);
    test_flush_from_callback(d);
    test_overlap(d);
    const char *env = plat_getenv("VKT_SHARE_DEVICE"); /* restored after the test */
    char keep[16] = "";
    if (env)
        snprintf(keep, sizeof keep, "%s", env);
    test_shared_device(d);
    test_host_import(d);
    plat_setenv("VKT_SHARE_DEVICE", env ? keep : NULL);
    vkt_dataset_destroy(d);
    return th_finish();
}
