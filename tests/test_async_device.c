/* Async replicas on one device's master (exchange_device.c): the device listed twice (or
 * three times) with VKT_SHARE_DEVICE=1, so the replicas share one VkDevice, against the
 * same replicas on a VkDevice each (VKT_SHARE_DEVICE=0: the host master,
 * exchange_master.c):
 *  - the row: the "device" exchange where the device has timelines, else the host's;
 *  - no parameter byte through the host during a fit (exchange_host_bytes 0, nothing
 *    staged, no staged transfer) where the host master moves 2 x params per update; one
 *    submission and one fence wait per update, and one each for the master's begin and
 *    end;
 *  - staleness bound 0 ends where the host master does (both sync's semantics), within
 *    fp32 rounding, with the same staleness statistics ((N-1)/2 on average);
 *  - unbounded and bound 1: every update sees every update submitted before it
 *    (staleness 0), the updates counted;
 *  - the MLP's loss falls over 300 steps as with the host master;
 *  - the same with the master's users ordered by a timeline (VKT_EXCHANGE_TIMELINE=1, as
 *    on a device with a queue per replica; on one queue the queue's order is used);
 *  - fp16 loss scaling: the skips are counted, training goes on, and a checkpoint saved
 *    in the progress callback (the master read on the device) restores. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "gpu/gpu.h"
#include "platform/platform.h"

typedef struct net {
    vkt_graph *g;
    vkt_tensor *x, *y, *logits, *loss;
} net;

enum { F = 20, H = 16, C = 5, BATCH = 12 };

static int g_timeline; /* the device has timelines: sharing replicas take the device row */

static net make_net(void)
{
    net n = {0};
    vkt_graph_options go = {.seed = 77};
    vkt_graph_create(&go, &n.g);
    vkt_shape xs = {2, {BATCH, F}}, w1 = {2, {F, H}}, b1 = {1, {H}}, w2 = {2, {H, C}},
              b2 = {1, {C}};
    vkt_init he = {.kind = VKT_INIT_HE}, gl = {.kind = VKT_INIT_GLOROT},
             small = {.kind = VKT_INIT_UNIFORM, .a = -0.1f, .b = 0.1f};
    n.x = vkt_input(n.g, "x", &xs);
    n.y = vkt_input_labels(n.g, "y", BATCH);
    vkt_tensor *h = vkt_relu(n.g, vkt_linear(n.g, n.x, vkt_param(n.g, "w1", &w1, &he),
                                             vkt_param(n.g, "b1", &b1, &small)));
    n.logits = vkt_linear(n.g, h, vkt_param(n.g, "w2", &w2, &gl),
                          vkt_param(n.g, "b2", &b2, &small));
    n.loss = vkt_softmax_cross_entropy(n.g, n.logits, n.y);
    TH_CHECK(vkt_graph_status(n.g) == VKT_OK, "graph: %s", vkt_graph_errmsg(n.g));
    return n;
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

typedef struct setup {
    uint32_t replicas;
    int shared;                /* VKT_SHARE_DEVICE=1 */
    int bounded;
    uint32_t staleness;
    vkt_precision precision;
    float loss_scale;
} setup;

/* The device listed `replicas` times, async, SGD with momentum (each replica its own). */
static vkt_trainer *make(net *n, const setup *s)
{
    uint32_t dev[4] = {0};
    vkt_trainer_options o = {.batch = BATCH, .devices = dev, .device_count = s->replicas,
                             .mode = VKT_PARALLEL_ASYNC, .bounded_staleness = s->bounded,
                             .staleness = s->staleness, .precision = s->precision,
                             .loss_scale = s->loss_scale};
    o.optimizer = (vkt_optimizer_options){.kind = VKT_OPTIMIZER_SGD, .lr = 0.1f,
                                          .momentum = 0.9f};
    plat_setenv("VKT_SHARE_DEVICE", s->shared ? "1" : "0");
    vkt_trainer *t = NULL;
    vkt_status st = vkt_trainer_create(th_instance, n->g, n->loss, &o, &t);
    plat_setenv("VKT_SHARE_DEVICE", NULL);
    TH_CHECK(st == VKT_OK, "%u async replicas (%s): %s (%s)", s->replicas,
             s->shared ? "shared" : "a device each", vkt_status_name(st), vkt_last_error());
    return t;
}

static const char *want_exchange(int shared) { return shared && g_timeline ? "device" : "master"; }

typedef struct result {
    float *p;
    vkt_trainer_stats before, after;
    float loss0, loss1;        /* evaluated before and after the fit */
} result;

/* One fit of `steps` from the graph's seed: its parameters and statistics. */
static void fit(const setup *s, const vkt_dataset *d, uint64_t steps, result *out)
{
    net n = make_net();
    vkt_trainer *t = make(&n, s);
    memset(out, 0, sizeof *out);
    if (t) {
        uint64_t np = vkt_trainer_param_count(t);
        vkt_eval_result e;
        TH_OK(NULL, vkt_trainer_evaluate(t, d, n.x, n.logits, &e));
        out->loss0 = e.loss;
        TH_OK(NULL, vkt_trainer_stats_get(t, &out->before));
        vkt_status st = vkt_trainer_fit(t, d, n.x, n.y, steps, 5, NULL, NULL);
        TH_CHECK(st == VKT_OK, "fit: %s", vkt_trainer_errmsg(t));
        TH_OK(NULL, vkt_trainer_stats_get(t, &out->after));
        out->p = th_alloc_floats(np);
        TH_OK(NULL, vkt_trainer_read_params(t, out->p, np));
        TH_OK(NULL, vkt_trainer_evaluate(t, d, n.x, n.logits, &e));
        out->loss1 = e.loss;
        const char *x = out->after.exchange;
        TH_CHECK(x && strcmp(x, want_exchange(s->shared)) == 0, "%u replicas, %s: the %s "
                 "exchange (%s)", s->replicas, s->shared ? "shared" : "a device each",
                 want_exchange(s->shared), x ? x : "none");
    }
    vkt_trainer_destroy(t);
    vkt_graph_destroy(n.g);
}

static void test_no_host(const vkt_dataset *d, uint64_t np)
{
    const uint64_t steps = 20;
    result dv, hm;
    setup s = {.replicas = 2, .shared = 1};
    fit(&s, d, steps, &dv);
    s.shared = 0;
    fit(&s, d, steps, &hm);
    if (!dv.p || !hm.p)
        goto done;
    const vkt_trainer_stats *a = &dv.before, *b = &dv.after;
    uint64_t np_bytes = np * 4;
    uint64_t moved = b->exchange_host_bytes - a->exchange_host_bytes;
    uint64_t host_moved = hm.after.exchange_host_bytes - hm.before.exchange_host_bytes;
    TH_CHECK(host_moved == 2 * (2 * steps) * np_bytes && host_moved > 0, "the host master "
             "moves 2 x params per update: %llu bytes over %llu updates",
             (unsigned long long)host_moved, (unsigned long long)(2 * steps));
    if (!g_timeline) {
        printf("no timelines: replicas sharing the device keep the host master\n");
        goto done;
    }
    uint64_t S = b->submits - a->submits, W = b->fence_waits - a->fence_waits;
    printf("device master, %llu updates: %llu parameter bytes through the host, %llu "
           "submits, %llu fence waits, %llu staged transfers\n",
           (unsigned long long)(2 * steps), (unsigned long long)moved, (unsigned long long)S,
           (unsigned long long)W, (unsigned long long)(b->sync_transfers - a->sync_transfers));
    TH_CHECK(moved == 0 && b->bytes_staged_per_step == 0 &&
                 b->sync_transfers == a->sync_transfers,
             "device master: no parameter byte through the host (%llu moved, %llu staged per "
             "step, %llu staged transfers)", (unsigned long long)moved,
             (unsigned long long)b->bytes_staged_per_step,
             (unsigned long long)(b->sync_transfers - a->sync_transfers));
    /* each update one submission and one wait; the master's begin and end one each */
    TH_CHECK(S == 2 * steps + 2 && W == 2 * steps + 2, "device master: %llu submits and %llu "
             "waits for %llu updates (expected %llu each)", (unsigned long long)S,
             (unsigned long long)W, (unsigned long long)(2 * steps),
             (unsigned long long)(2 * steps + 2));
done:
    free(dv.p);
    free(hm.p);
}

static void test_bound0(const vkt_dataset *d, uint64_t np)
{
    const uint64_t steps = 30;
    result dv, hm;
    setup s = {.replicas = 3, .shared = 1, .bounded = 1, .staleness = 0};
    fit(&s, d, steps, &dv);
    s.shared = 0;
    fit(&s, d, steps, &hm);
    if (dv.p && hm.p)
        th_compare("bound 0, 3 replicas, 30 steps: the device master ends where the host "
                   "master does", dv.p, hm.p, np, 1e-5f, 1e-6f);
    const vkt_trainer_stats *a = &dv.after, *b = &hm.after;
    printf("bound 0: staleness mean %.3f max %llu (device), %.3f max %llu (host)\n",
           a->staleness_mean, (unsigned long long)a->staleness_max, b->staleness_mean,
           (unsigned long long)b->staleness_max);
    TH_CHECK(a->updates == 3 * steps && a->staleness_mean == 1.0 && a->staleness_max == 2 &&
                 b->updates == a->updates && b->staleness_mean == a->staleness_mean,
             "bound 0: %llu updates, each its place in the round: mean %.3f (host %.3f), max "
             "%llu", (unsigned long long)a->updates, a->staleness_mean, b->staleness_mean,
             (unsigned long long)a->staleness_max);
    free(dv.p);
    free(hm.p);
}

static void test_unbounded(const vkt_dataset *d)
{
    for (int bounded = 0; bounded < 2; bounded++) {
        result dv;
        setup s = {.replicas = 2, .shared = 1, .bounded = bounded, .staleness = 1};
        fit(&s, d, 25, &dv);
        const vkt_trainer_stats *a = &dv.after;
        int dev = g_timeline;
        TH_CHECK(a->updates == 50 && (!dev || (a->staleness_max == 0 && a->staleness_mean == 0)),
                 "%s: %llu updates, staleness mean %.3f max %llu (the device master: every "
                 "update sees the ones submitted before it, so the exchange records 0: by "
                 "construction, not measured)", bounded ? "bound 1" : "unbounded",
                 (unsigned long long)a->updates, a->staleness_mean,
                 (unsigned long long)a->staleness_max);
        free(dv.p);
    }
}

static void test_converges(const vkt_dataset *d)
{
    result dv, hm;
    setup s = {.replicas = 2, .shared = 1};
    fit(&s, d, 300, &dv);
    s.shared = 0;
    fit(&s, d, 300, &hm);
    printf("300 steps, 2 replicas: loss %.4f -> %.4f (device master), %.4f -> %.4f (host)\n",
           dv.loss0, dv.loss1, hm.loss0, hm.loss1);
    /* unbounded async: the order of the updates (the threads') moves the end by tens of
     * percent between runs, with either master */
    TH_CHECK(dv.loss1 < 0.35f * dv.loss0 && hm.loss1 < 0.35f * hm.loss0 &&
                 dv.loss1 < 2.0f * hm.loss1 + 0.1f,
             "the loss falls with the device master as with the host's: %.4f -> %.4f (host "
             "%.4f -> %.4f)", dv.loss0, dv.loss1, hm.loss0, hm.loss1);
    free(dv.p);
    free(hm.p);
}

typedef struct saver {
    vkt_trainer *t;
    const char *path;
    uint64_t at, step;         /* when to save; the step the checkpoint records */
    vkt_status st;
    int saved;
} saver;

static int save_at(void *user, uint64_t step, uint64_t total, float loss)
{
    (void)total, (void)loss;
    saver *s = user;
    if (step == s->at) {
        s->st = vkt_trainer_save(s->t, s->path);
        s->step = vkt_trainer_checkpoint_step(s->t);
        s->saved = 1;
    }
    return 0;
}

/* fp16 from a scale of 2^24: the first updates overflow and are skipped (each replica's
 * own scaler: apply_scaler); the skipped update adds nothing to the master. */
static void test_fp16_checkpoint(const vkt_dataset *d, uint64_t np)
{
    char dir[256], path[320];
    th_temp_dir("async_device", dir, sizeof dir);
    snprintf(path, sizeof path, "%s/mid.vkt", dir);
    net n = make_net();
    setup s = {.replicas = 2, .shared = 1, .precision = VKT_PRECISION_FP16,
               .loss_scale = 16777216.0f};
    vkt_trainer *t = make(&n, &s);
    float *p0 = th_alloc_floats(np), *p1 = th_alloc_floats(np);
    if (!t)
        goto done;
    TH_OK(NULL, vkt_trainer_read_params(t, p0, np));
    saver sv = {t, path, 30, 0, VKT_OK, 0};
    vkt_status st = vkt_trainer_fit(t, d, n.x, n.y, 40, 3, save_at, &sv);
    TH_CHECK(st == VKT_OK, "fp16 fit: %s", vkt_trainer_errmsg(t));
    uint64_t skipped = 0;
    float scale = 0;
    vkt_trainer_skipped(t, &skipped, &scale);
    vkt_trainer_stats ts;
    vkt_trainer_stats_get(t, &ts);
    TH_OK(NULL, vkt_trainer_read_params(t, p1, np));
    int finite = 1, moved = 0;
    for (uint64_t i = 0; i < np; i++) {
        finite &= isfinite(p1[i]);
        moved |= p1[i] != p0[i];
    }
    TH_CHECK(ts.exchange && strcmp(ts.exchange, want_exchange(1)) == 0 && skipped >= 2 &&
                 scale < 16777216.0f && finite && moved,
             "fp16 on the %s master: %llu updates skipped, scale %g, parameters finite %d and "
             "moved %d", ts.exchange ? ts.exchange : "-", (unsigned long long)skipped,
             (double)scale, finite, moved);
    TH_CHECK(sv.saved && sv.st == VKT_OK, "a checkpoint saved in the progress callback: %s",
             vkt_trainer_errmsg(t));
    /* It restores, and holds the master of its step: finite, moved from the start. */
    vkt_trainer *r = make(&n, &s);
    if (r && sv.saved && sv.st == VKT_OK) {
        TH_OK(NULL, vkt_trainer_restore(r, path));
        TH_OK(NULL, vkt_trainer_read_params(r, p1, np));
        finite = 1, moved = 0;
        for (uint64_t i = 0; i < np; i++) {
            finite &= isfinite(p1[i]);
            moved |= p1[i] != p0[i];
        }
        TH_CHECK(finite && moved && sv.step > 0 && vkt_trainer_checkpoint_step(r) == sv.step,
                 "the checkpoint of step %llu restores (step %llu): finite %d, moved %d",
                 (unsigned long long)sv.step, (unsigned long long)vkt_trainer_checkpoint_step(r),
                 finite, moved);
    }
    vkt_trainer_destroy(r);
done:
    th_remove_tree(dir);
    free(p0);
    free(p1);
    vkt_trainer_destroy(t);
    vkt_graph_destroy(n.g);
}

int main(void)
{
    th_init("test_async_device");
    g_timeline = th_context(VKT_KERNELS_AUTO)->timeline;
    printf("timelines %s: async replicas on one device keep the master %s\n",
           g_timeline ? "offered" : "not offered", g_timeline ? "there" : "on the host");
    vkt_dataset *d = synthetic(600);
    net probe = make_net();
    setup one = {.replicas = 2};
    vkt_trainer *t = make(&probe, &one);
    uint64_t np = t ? vkt_trainer_param_count(t) : 0;
    vkt_trainer_destroy(t);
    vkt_graph_destroy(probe.g);
    if (np) {
        test_no_host(d, np);
        test_bound0(d, np);
        /* the order by the timeline, as on a device with a queue per replica */
        plat_setenv("VKT_EXCHANGE_TIMELINE", "1");
        printf("ordered by the timeline (VKT_EXCHANGE_TIMELINE=1):\n");
        test_no_host(d, np);
        test_bound0(d, np);
        plat_setenv("VKT_EXCHANGE_TIMELINE", NULL);
        test_unbounded(d);
        test_converges(d);
        test_fp16_checkpoint(d, np);
    }
    vkt_dataset_destroy(d);
    return th_finish();
}
