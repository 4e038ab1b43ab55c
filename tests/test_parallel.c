/* Data-parallel training on several logical devices of one physical device:
 *  - sync: N = 2, 3, 4 replicas on a global batch equal one replica on it (uneven
 *    splits too), and replicas hold bitwise-identical parameters after every step;
 *  - async with staleness bound 0 equals sync; bounds hold; staleness is measured;
 *  - failures (too many replicas, a device lost, bad data in one replica's rows) stop
 *    training with a clear message and no hang. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "platform/platform.h"
#include "parallel/trainer.h"

typedef struct net {
    vkt_graph *g;
    vkt_tensor *x, *y, *logits, *loss;
} net;

enum { F = 20, H = 16, C = 5 };

static net make_net(uint32_t batch)
{
    net n = {0};
    vkt_graph_options go = {.seed = 77};
    vkt_graph_create(&go, &n.g);
    vkt_shape xs = {2, {batch, F}}, w1 = {2, {F, H}}, b1 = {1, {H}}, w2 = {2, {H, C}},
              b2 = {1, {C}};
    vkt_init he = {.kind = VKT_INIT_HE}, gl = {.kind = VKT_INIT_GLOROT},
             small = {.kind = VKT_INIT_UNIFORM, .a = -0.1f, .b = 0.1f};
    n.x = vkt_input(n.g, "x", &xs);
    n.y = vkt_input_labels(n.g, "y", batch);
    vkt_tensor *h = vkt_relu(n.g, vkt_linear(n.g, n.x, vkt_param(n.g, "w1", &w1, &he),
                                             vkt_param(n.g, "b1", &b1, &small)));
    n.logits = vkt_linear(n.g, h, vkt_param(n.g, "w2", &w2, &gl), vkt_param(n.g, "b2", &b2, &small));
    n.loss = vkt_softmax_cross_entropy(n.g, n.logits, n.y);
    TH_CHECK(vkt_graph_status(n.g) == VKT_OK, "graph: %s", vkt_graph_errmsg(n.g));
    return n;
}

static vkt_trainer *make_trainer(net *n, uint32_t batch, uint32_t replicas,
                                 vkt_parallel_mode mode, int bounded, uint32_t s,
                                 const vkt_optimizer_options *oo)
{
    uint32_t dev[8] = {0};
    vkt_trainer_options o = {.batch = batch, .devices = dev, .device_count = replicas,
                             .mode = mode, .bounded_staleness = bounded, .staleness = s};
    o.optimizer = *oo;
    vkt_trainer *t = NULL;
    vkt_status st = vkt_trainer_create(th_instance, n->g, n->loss, &o, &t);
    TH_CHECK(st == VKT_OK, "trainer with %u replicas: %s (%s)", replicas, vkt_status_name(st),
             vkt_last_error());
    return t;
}

static void random_batch(float *x, int32_t *y, uint32_t rows)
{
    th_fill_uniform(x, (uint64_t)rows * F, -1, 1);
    for (uint32_t i = 0; i < rows; i++)
        y[i] = (int32_t)(th_rand_u64() % C);
}

/* N replicas vs one replica on the same global batches, five steps. */
static void test_sync_equivalence(uint32_t replicas, uint32_t batch)
{
    vkt_optimizer_options oo = {.kind = VKT_OPTIMIZER_SGD, .lr = 0.2f, .momentum = 0.9f};
    net n1 = make_net(batch), nn = make_net(batch);
    vkt_trainer *one = make_trainer(&n1, batch, 1, VKT_PARALLEL_SYNC, 0, 0, &oo);
    vkt_trainer *many = make_trainer(&nn, batch, replicas, VKT_PARALLEL_SYNC, 0, 0, &oo);
    if (!one || !many)
        goto done;
    uint64_t np = vkt_trainer_param_count(one);
    float *p1 = th_alloc_floats(np), *pn = th_alloc_floats(np), *pr = th_alloc_floats(np);
    float *x = th_alloc_floats((uint64_t)batch * F);
    int32_t *y = malloc(batch * sizeof *y);
    int identical = 1;
    double worst_loss = 0;
    for (int step = 0; step < 5; step++) {
        random_batch(x, y, batch);
        vkt_feed f1[2] = {{n1.x, x}, {n1.y, y}}, fn[2] = {{nn.x, x}, {nn.y, y}};
        float l1 = 0, ln = 0;
        TH_OK(NULL, vkt_trainer_step(one, f1, 2, &l1));
        TH_OK(NULL, vkt_trainer_step(many, fn, 2, &ln));
        double d = fabs((double)l1 - ln) / fmax(1e-6, fabs(l1));
        worst_loss = d > worst_loss ? d : worst_loss;
        /* Every replica's parameters are bitwise the same after every step. */
        vkt_trainer_read_replica_params(many, 0, pn, np);
        for (uint32_t r = 1; r < replicas; r++) {
            vkt_trainer_read_replica_params(many, r, pr, np);
            identical &= memcmp(pn, pr, np * 4) == 0;
        }
    }
    TH_CHECK(worst_loss < 1e-5, "%u replicas, batch %u: losses equal one replica's (rel %.2g)",
             replicas, batch, worst_loss);
    TH_CHECK(identical, "%u replicas stay bitwise identical every step", replicas);
    vkt_trainer_read_params(one, p1, np);
    vkt_trainer_read_params(many, pn, np);
    char what[96];
    snprintf(what, sizeof what, "%u replicas, batch %u: parameters after 5 steps", replicas,
             batch);
    th_compare(what, pn, p1, np, 1e-4f, 1e-5f);
    vkt_trainer_stats st;
    vkt_trainer_stats_get(many, &st);
    /* Each parameter's gradient is copied out on its own, right after the backward step
     * that completes it (w2 and b2 before the first layer's backward runs): 4 copies more
     * than one replica's step makes. That one copies only what the host cannot map (none
     * on lavapipe; the inputs, the loss and the kept logits where the arena is not mapped). */
    vkt_model_stats ms, ms1;
    vkt_model_stats_get(many->rep[0].model, &ms);
    vkt_model_stats_get(one->rep[0].model, &ms1);
    uint32_t staged = th_model_staged_copies(one->rep[0].model, 1);
    TH_CHECK(ms1.step_copies == staged, "one replica copies only what is not host-mapped: %u "
             "(%u expected)", ms1.step_copies, staged);
    /* Replicas sharing one VkDevice with timelines (VKT_SHARE_DEVICE=1 on lavapipe)
     * average there (reduce_device.c): no copy-out, nothing staged, no byte read. */
    const char *share = plat_getenv("VKT_SHARE_DEVICE");
    int on_device = replicas > 1 && share && strcmp(share, "1") == 0 &&
                    many->rep[0].ctx->timeline;
    TH_CHECK(st.reducer && strncmp(st.reducer, on_device ? "device" : "host", 4) == 0,
             "%u replicas: the %s reducer (%s)", replicas, on_device ? "device" : "host",
             st.reducer ? st.reducer : "none");
    uint32_t outs = on_device ? 0 : 4;
    TH_CHECK(ms.step_copies == staged + outs, "%u gradient copy-outs (%u copies, %u of them for "
             "unmapped memory)", outs, ms.step_copies, staged);
    uint64_t want_staged = on_device ? 0 : 2ull * replicas * np * 4;
    TH_CHECK(st.replicas == replicas && st.bytes_staged_per_step == want_staged,
             "stats: %u replicas, %llu bytes staged per step", st.replicas,
             (unsigned long long)st.bytes_staged_per_step);
    TH_CHECK(on_device ? st.average_host_bytes == 0 : st.average_host_bytes > 0,
             "%u replicas: %llu gradient bytes read by the host", replicas,
             (unsigned long long)st.average_host_bytes);
    free(p1);
    free(pn);
    free(pr);
    free(x);
    free(y);
done:
    vkt_trainer_destroy(one);
    vkt_trainer_destroy(many);
    vkt_graph_destroy(n1.g);
    vkt_graph_destroy(nn.g);
}

static vkt_dataset *synthetic(uint32_t count)
{
    float *x = th_alloc_floats((uint64_t)count * F);
    int32_t *y = malloc(count * sizeof *y);
    th_fill_uniform(x, (uint64_t)count * F, -1, 1);
    for (uint32_t i = 0; i < count; i++) /* a learnable rule: the largest of 5 features */
        for (int c = 0; c < C; c++)
            y[i] = c == 0 || x[i * F + c] > x[i * F + y[i]] ? c : y[i];
    vkt_dataset *d = NULL;
    TH_OK(NULL, vkt_dataset_create(count, F, C, x, y, &d));
    free(x);
    free(y);
    return d;
}

static void fit_params(vkt_parallel_mode mode, uint32_t replicas, int bounded, uint32_t s,
                       vkt_dataset *d, float *out, uint64_t np, vkt_trainer_stats *stats)
{
    vkt_optimizer_options oo = {.kind = VKT_OPTIMIZER_SGD, .lr = 0.1f};
    net n = make_net(12);
    vkt_trainer *t = make_trainer(&n, 12, replicas, mode, bounded, s, &oo);
    if (t) {
        TH_OK(NULL, vkt_trainer_fit(t, d, n.x, n.y, 30, 5, NULL, NULL));
        TH_OK(NULL, vkt_trainer_read_params(t, out, np));
        vkt_trainer_stats_get(t, stats);
    }
    vkt_trainer_destroy(t);
    vkt_graph_destroy(n.g);
}

static void test_async(void)
{
    vkt_dataset *d = synthetic(600);
    net probe = make_net(12);
    vkt_optimizer_options oo = {.kind = VKT_OPTIMIZER_SGD};
    vkt_trainer *t = make_trainer(&probe, 12, 1, VKT_PARALLEL_SYNC, 0, 0, &oo);
    uint64_t np = vkt_trainer_param_count(t);
    vkt_trainer_destroy(t);
    vkt_graph_destroy(probe.g);
    float *sync = th_alloc_floats(np), *as0 = th_alloc_floats(np), *as = th_alloc_floats(np);
    vkt_trainer_stats st;
    fit_params(VKT_PARALLEL_SYNC, 3, 0, 0, d, sync, np, &st);
    fit_params(VKT_PARALLEL_ASYNC, 3, 1, 0, d, as0, np, &st);
    th_compare("async with staleness bound 0 equals sync (3 replicas, 30 steps)", as0, sync, np,
               1e-4f, 1e-5f);
    TH_CHECK(st.updates == 90 && st.staleness_max <= 2,
             "bound 0: 90 updates, staleness at most N-1 = 2 (max %llu, mean %.2f)",
             (unsigned long long)st.staleness_max, st.staleness_mean);
    fit_params(VKT_PARALLEL_ASYNC, 3, 1, 1, d, as, np, &st);
    /* While a replica works on step k, each other replica has pushed at least k - s
     * updates and can push at most through step k + s: staleness <= (N-1)(2s+1). */
    TH_CHECK(st.updates == 90 && st.staleness_max <= 6,
             "bound 1: staleness at most (N-1)(2s+1) = 6 (max %llu)",
             (unsigned long long)st.staleness_max);
    fit_params(VKT_PARALLEL_ASYNC, 4, 0, 0, d, as, np, &st);
    TH_CHECK(st.updates == 120 && st.staleness_mean >= 0 && st.staleness_p99 <= st.staleness_max,
             "unbounded: %llu updates, staleness mean %.2f p99 %llu max %llu",
             (unsigned long long)st.updates, st.staleness_mean,
             (unsigned long long)st.staleness_p99, (unsigned long long)st.staleness_max);
    int finite = 1;
    for (uint64_t i = 0; i < np; i++)
        finite &= isfinite(as[i]);
    TH_CHECK(finite, "unbounded async parameters are finite");
    free(sync);
    free(as0);
    free(as);
    vkt_dataset_destroy(d);
}

/* Async fp16 replicas each judge their own scaler on their own thread; the progress
 * callback (replica 0's thread, where a checkpoint is saved) reads the world's summary
 * meanwhile (vkt_trainer_skipped, apply_scaler): the count never falls, both replicas'
 * first updates skip (from 2^40), and the last one seen is the final one. Under
 * ThreadSanitizer (test_parallel.tsan) the read must not race with the replicas' steps. */
typedef struct seen {
    vkt_trainer *t;
    uint64_t last, calls;
    int fell;
} seen;

static int skipped_progress(void *user, uint64_t step, uint64_t total, float loss)
{
    (void)step, (void)total, (void)loss;
    seen *s = user;
    uint64_t k = 0;
    float scale = 0;
    vkt_trainer_skipped(s->t, &k, &scale);
    s->fell |= k < s->last;
    s->last = k;
    s->calls++;
    return 0;
}

static void test_async_scaler_progress(void)
{
    vkt_dataset *d = synthetic(120);
    net n = make_net(12);
    uint32_t dev[2] = {0, 0};
    vkt_trainer_options o = {.batch = 12, .devices = dev, .device_count = 2,
                             .mode = VKT_PARALLEL_ASYNC, .precision = VKT_PRECISION_FP16,
                             .loss_scale = 1099511627776.0f /* 2^40 */};
    o.optimizer.kind = VKT_OPTIMIZER_ADAM;
    o.optimizer.lr = 0.01f;
    vkt_trainer *t = NULL;
    seen s = {0};
    if (TH_CHECK(vkt_trainer_create(th_instance, n.g, n.loss, &o, &t) == VKT_OK,
                 "async fp16 trainer: %s", vkt_last_error())) {
        s.t = t;
        TH_OK(NULL, vkt_trainer_fit(t, d, n.x, n.y, 20, 3, skipped_progress, &s));
        uint64_t k = 0;
        float scale = 0;
        vkt_trainer_skipped(t, &k, &scale);
        TH_CHECK(s.calls > 0 && !s.fell && k >= 2 && s.last <= k && scale < 1099511627776.0f,
                 "async fp16: the progress callback saw the skips grow (%llu calls, last "
                 "%llu, fell %d), %llu in all, scale %g", (unsigned long long)s.calls,
                 (unsigned long long)s.last, s.fell, (unsigned long long)k, (double)scale);
    }
    vkt_trainer_destroy(t);
    vkt_graph_destroy(n.g);
    vkt_dataset_destroy(d);
}

/* A replica slowed 4x gets fewer rows after calibration; the run still equals one
 * replica on the same batches, and replicas stay identical. */
static void test_balance(void)
{
    vkt_dataset *d = synthetic(240);
    vkt_optimizer_options oo = {.kind = VKT_OPTIMIZER_SGD, .lr = 0.1f, .momentum = 0.9f};
    net n1 = make_net(12), n2 = make_net(12);
    vkt_trainer *one = make_trainer(&n1, 12, 1, VKT_PARALLEL_SYNC, 0, 0, &oo);
    uint32_t dev[2] = {0, 0};
    vkt_trainer_options o = {.batch = 12, .devices = dev, .device_count = 2, .optimizer = oo,
                             .balance_after = 4, .slow_replica = 1, .slow_seconds = 0.03};
    vkt_trainer *two = NULL;
    TH_OK(NULL, vkt_trainer_create(th_instance, n2.g, n2.loss, &o, &two));
    if (one && two) {
        TH_OK(NULL, vkt_trainer_fit(one, d, n1.x, n1.y, 10, 3, NULL, NULL));
        TH_OK(NULL, vkt_trainer_fit(two, d, n2.x, n2.y, 10, 3, NULL, NULL));
        vkt_trainer_stats st;
        vkt_trainer_stats_get(two, &st);
        TH_CHECK(st.replica[1].rows < st.replica[0].rows &&
                     st.replica[0].rows + st.replica[1].rows == 12,
                 "the slowed replica gets fewer rows: %u and %u", st.replica[0].rows,
                 st.replica[1].rows);
        uint64_t np = vkt_trainer_param_count(one);
        float *a = th_alloc_floats(np), *b = th_alloc_floats(np), *c = th_alloc_floats(np);
        vkt_trainer_read_params(one, a, np);
        vkt_trainer_read_replica_params(two, 0, b, np);
        vkt_trainer_read_replica_params(two, 1, c, np);
        th_compare("balanced 2 replicas equal one replica after 10 steps", b, a, np, 1e-4f,
                   1e-5f);
        TH_CHECK(memcmp(b, c, np * 4) == 0, "balanced replicas stay bitwise identical");
        free(a);
        free(b);
        free(c);
    }
    vkt_trainer_destroy(one);
    vkt_trainer_destroy(two);
    vkt_graph_destroy(n1.g);
    vkt_graph_destroy(n2.g);
    vkt_dataset_destroy(d);
}

/* Linear scaling: 2 replicas at lr 0.05 with scale_lr take the steps of one replica at
 * lr 0.1; with a warmup of 4 steps the first step still uses lr 0.05. */
static void scaled_run(uint32_t replicas, float lr, int scale, uint32_t warmup, uint64_t steps,
                       vkt_dataset *d, float *out, uint64_t np)
{
    net n = make_net(12);
    uint32_t dev[2] = {0, 0};
    vkt_trainer_options o = {.batch = 12, .devices = dev, .device_count = replicas,
                             .scale_lr = scale, .scale_lr_warmup = warmup,
                             .optimizer = {.kind = VKT_OPTIMIZER_SGD, .lr = lr}};
    vkt_trainer *t = NULL;
    TH_OK(NULL, vkt_trainer_create(th_instance, n.g, n.loss, &o, &t));
    if (t) {
        TH_OK(NULL, vkt_trainer_fit(t, d, n.x, n.y, steps, 9, NULL, NULL));
        TH_OK(NULL, vkt_trainer_read_params(t, out, np));
    }
    vkt_trainer_destroy(t);
    vkt_graph_destroy(n.g);
}

static void test_lr_scaling(void)
{
    vkt_dataset *d = synthetic(120);
    uint64_t np = 432;
    float *a = th_alloc_floats(np), *b = th_alloc_floats(np);
    scaled_run(2, 0.05f, 1, 0, 5, d, a, np);
    scaled_run(1, 0.1f, 0, 0, 5, d, b, np);
    th_compare("2 replicas, lr 0.05 scaled = 1 replica, lr 0.1 (5 steps)", a, b, np, 1e-4f, 1e-5f);
    scaled_run(2, 0.05f, 1, 4, 1, d, a, np);
    scaled_run(1, 0.05f, 0, 0, 1, d, b, np);
    th_compare("with warmup, step 0 uses the base lr", a, b, np, 1e-4f, 1e-5f);
    scaled_run(2, 0.05f, 1, 4, 3, d, a, np);
    scaled_run(1, 0.05f, 0, 0, 3, d, b, np);
    double diff = 0;
    for (uint64_t i = 0; i < np; i++)
        diff += fabs((double)a[i] - b[i]);
    TH_CHECK(diff > 1e-4, "with warmup, later steps use a larger lr (sum |diff| %.3g)", diff);
    free(a);
    free(b);
    vkt_dataset_destroy(d);
}

static void test_failures(void)
{
    vkt_optimizer_options oo = {.kind = VKT_OPTIMIZER_SGD};
    net n = make_net(3);
    uint32_t dev[4] = {0, 0, 0, 0};
    vkt_trainer_options o = {.batch = 3, .devices = dev, .device_count = 4, .optimizer = oo};
    vkt_trainer *t = (vkt_trainer *)&o;
    TH_STATUS(NULL, vkt_trainer_create(th_instance, n.g, n.loss, &o, &t), VKT_ERROR_SHAPE);
    TH_CHECK(t == NULL && strstr(vkt_last_error(), "4 replicas cannot share a global batch of 3"),
             "more replicas than rows: %s", vkt_last_error());
    vkt_graph_destroy(n.g);

    /* Bad data in one replica's rows: that replica's error, named, for all. */
    n = make_net(12);
    t = make_trainer(&n, 12, 3, VKT_PARALLEL_SYNC, 0, 0, &oo);
    float x[12 * F];
    int32_t y[12];
    random_batch(x, y, 12);
    y[9] = 99; /* replica 2 holds rows 8..11 */
    vkt_feed f[2] = {{n.x, x}, {n.y, y}};
    TH_STATUS(NULL, vkt_trainer_step(t, f, 2, NULL), VKT_ERROR_INVALID_ARGUMENT);
    TH_CHECK(strstr(vkt_trainer_errmsg(t), "replica 2") && strstr(vkt_trainer_errmsg(t), "99"),
             "the failing replica and value are named: %s", vkt_trainer_errmsg(t));
    y[9] = 1;
    TH_OK(NULL, vkt_trainer_step(t, f, 2, NULL));

    /* A device lost in the middle of training, sync and async: a clear stop, no hang. */
    vkt_dataset *d = synthetic(120);
    for (int mode = 0; mode < 2; mode++) {
        vkt_trainer *tt = mode ? make_trainer(&n, 12, 3, VKT_PARALLEL_ASYNC, 0, 0, &oo) : t;
        plat_setenv("VKT_FAULT_INJECT", "vkQueueSubmit:10");
        vkt_status st = vkt_trainer_fit(tt, d, n.x, n.y, 50, 1, NULL, NULL);
        plat_setenv("VKT_FAULT_INJECT", NULL);
        printf("%s, device lost: %s\n", mode ? "async" : "sync", vkt_trainer_errmsg(tt));
        TH_CHECK(st == VKT_ERROR_DEVICE_LOST && strstr(vkt_trainer_errmsg(tt), "replica ") &&
                     strstr(vkt_trainer_errmsg(tt), "VK_ERROR_DEVICE_LOST"),
                 "%s: a lost device stops training: %s (%s)", mode ? "async" : "sync",
                 vkt_status_name(st), vkt_trainer_errmsg(tt));
        if (mode)
            vkt_trainer_destroy(tt);
    }
    TH_STATUS(NULL, vkt_trainer_step(t, f, 2, NULL), VKT_ERROR_DEVICE_LOST);
    vkt_dataset_destroy(d);
    vkt_trainer_destroy(t);
    vkt_graph_destroy(n.g);
}

int main(void)
{
    th_init("test_parallel");
    test_sync_equivalence(2, 12);
    test_sync_equivalence(3, 12);
    test_sync_equivalence(4, 12);
    test_sync_equivalence(3, 10); /* uneven: 3 + 3 + 4 rows */
    test_async();
    test_async_scaler_progress();
    test_balance();
    test_lr_scaling();
    test_failures();
    return th_finish();
}
