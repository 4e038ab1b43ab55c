/* Async copies of a pipeline inside vkt_trainer (options.stages with mode async,
 * docs/async.md "Pipeline stages"), P = 2 stages on contexts of one device:
 *  - one copy: async trains bitwise as sync (losses and parameters), plain and clipped;
 *  - 2 copies, bounded (no push lost) with plain SGD: the pushes of a step add up to the
 *    averaged update, so the losses follow sync's within float rounding;
 *  - 2 copies, Adam (each copy's moments its own): the loss on a learnable task falls as
 *    sync's does (the last 10 steps' mean at most 15% above sync's, below half the first
 *    step's) while the parameters differ from sync's; 90% of every parameter tensor's
 *    elements changed;
 *    staleness reported: P x D pushes per step, half of them after the other copy's
 *    (mean 0.5, max 1), per stage too;
 *  - 2 copies with clipping: each copy clips its own share (a step moves the parameters
 *    by more than lr x clip, sync's limit, and at most 2 lr x clip);
 *  - 2 copies in fp16 (loss scaling, the guarded host route): finite, falling losses; from
 *    a scale of 2^40 every copy skips (the parameters stay) for as many first steps as
 *    sync's pipeline, then trains. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

enum { F = 12, H = 16, C = 5, BATCH = 24, STEPS = 40 };

typedef struct net {
    vkt_graph *g;
    vkt_tensor *x, *y, *loss;
} net;

/* x [B,F] -> relu(linear) on stage 0 -> relu(linear) -> linear + CE on stage 1. */
static net make_net(void)
{
    net n = {0};
    vkt_graph_options go = {.seed = 91};
    vkt_graph_create(&go, &n.g);
    vkt_shape xs = {2, {BATCH, F}}, w1 = {2, {F, H}}, b = {1, {H}}, w2 = {2, {H, H}},
              w3 = {2, {H, C}}, b3 = {1, {C}};
    vkt_init he = {.kind = VKT_INIT_HE}, small = {.kind = VKT_INIT_UNIFORM, .a = -0.1f, .b = 0.1f};
    n.x = vkt_input(n.g, "x", &xs);
    n.y = vkt_input_labels(n.g, "y", BATCH);
    vkt_graph_set_stage(n.g, 0);
    vkt_tensor *h1 = vkt_relu(n.g, vkt_linear(n.g, n.x, vkt_param(n.g, "w1", &w1, &he),
                                              vkt_param(n.g, "b1", &b, &small)));
    vkt_graph_set_stage(n.g, 1);
    vkt_tensor *h2 = vkt_relu(n.g, vkt_linear(n.g, h1, vkt_param(n.g, "w2", &w2, &he),
                                              vkt_param(n.g, "b2", &b, &small)));
    vkt_tensor *z = vkt_linear(n.g, h2, vkt_param(n.g, "w3", &w3, &he),
                               vkt_param(n.g, "b3", &b3, &small));
    n.loss = vkt_softmax_cross_entropy(n.g, z, n.y);
    TH_CHECK(vkt_graph_status(n.g) == VKT_OK, "graph: %s", vkt_graph_errmsg(n.g));
    return n;
}

static vkt_trainer *make_trainer(net *n, uint32_t D, vkt_parallel_mode mode, int bounded,
                                 const vkt_optimizer_options *oo, vkt_precision prec)
{
    uint32_t dev[8] = {0};
    vkt_trainer_options to = {.batch = BATCH, .devices = dev, .device_count = 2 * D,
                              .optimizer = *oo, .stages = 2, .micro_batches = 2, .mode = mode,
                              .bounded_staleness = bounded, .precision = prec};
    vkt_trainer *t = NULL;
    vkt_status st = vkt_trainer_create(th_instance, n->g, n->loss, &to, &t);
    TH_CHECK(st == VKT_OK, "trainer 2x%u, mode %d: %s", D, (int)mode, vkt_last_error());
    return t;
}

/* Batch k of a fixed learnable sequence: labels from a fixed linear teacher. */
static void batch_of(uint32_t k, float *x, int32_t *y)
{
    float teach[F * C];
    th_seed(5);
    th_fill_uniform(teach, F * C, -1, 1);
    th_seed(2000 + k);
    th_fill_uniform(x, (uint64_t)BATCH * F, -1, 1);
    for (uint32_t i = 0; i < BATCH; i++) {
        float best = -1e30f;
        for (uint32_t c = 0; c < C; c++) {
            float v = 0;
            for (uint32_t f = 0; f < F; f++)
                v += x[i * F + f] * teach[f * C + c];
            if (v > best) {
                best = v;
                y[i] = (int32_t)c;
            }
        }
    }
}

/* Steps [k0, k0 + steps) of the sequence; losses into out[0 ..]. */
static int run_steps_from(vkt_trainer *t, net *n, uint32_t k0, uint32_t steps, float *out)
{
    float x[BATCH * F];
    int32_t y[BATCH];
    for (uint32_t k = k0; k < k0 + steps; k++) {
        batch_of(k, x, y);
        vkt_feed f[2] = {{n->x, x}, {n->y, y}};
        if (!TH_CHECK(vkt_trainer_step(t, f, 2, &out[k - k0]) == VKT_OK, "step %u: %s", k,
                      vkt_trainer_errmsg(t)))
            return 0;
    }
    return 1;
}

static int run_steps(vkt_trainer *t, net *n, uint32_t steps, float *out)
{
    return run_steps_from(t, n, 0, steps, out);
}

static float *params_of(vkt_trainer *t)
{
    uint64_t np = vkt_trainer_param_count(t);
    float *p = malloc(np * sizeof *p);
    if (p && vkt_trainer_read_params(t, p, np) != VKT_OK) {
        TH_CHECK(0, "read_params: %s", vkt_trainer_errmsg(t));
        free(p);
        return NULL;
    }
    return p;
}

/* One copy: async is the sync engine, bit for bit (the push takes the new values where
 * the master still holds the seed). */
static void test_one_copy(float clip)
{
    vkt_optimizer_options oo = {.kind = VKT_OPTIMIZER_SGD, .lr = 0.1f, .momentum = 0.9f,
                                .clip_norm = clip};
    net a = make_net(), b = make_net();
    vkt_trainer *ts = make_trainer(&a, 1, VKT_PARALLEL_SYNC, 0, &oo, VKT_PRECISION_FP32);
    vkt_trainer *ta = make_trainer(&b, 1, VKT_PARALLEL_ASYNC, 0, &oo, VKT_PRECISION_FP32);
    float ls[STEPS], la[STEPS];
    if (ts && ta && run_steps(ts, &a, STEPS, ls) && run_steps(ta, &b, STEPS, la)) {
        float *ps = params_of(ts), *pa = params_of(ta);
        uint64_t np = vkt_trainer_param_count(ts);
        TH_CHECK(ps && pa && memcmp(ls, la, sizeof ls) == 0 &&
                     memcmp(ps, pa, np * sizeof *ps) == 0,
                 "clip %g: one async copy equals sync bitwise (losses %s, parameters %s)",
                 (double)clip, memcmp(ls, la, sizeof ls) ? "differ" : "equal",
                 ps && pa && memcmp(ps, pa, np * sizeof *ps) ? "differ" : "equal");
        vkt_trainer_stats s;
        TH_OK(NULL, vkt_trainer_stats_get(ta, &s));
        TH_CHECK(s.updates == 2 * STEPS && s.staleness_max == 0,
                 "one copy: %llu updates (want %u), staleness max %llu",
                 (unsigned long long)s.updates, 2 * STEPS, (unsigned long long)s.staleness_max);
        free(ps);
        free(pa);
    }
    vkt_trainer_destroy(ts);
    vkt_trainer_destroy(ta);
    vkt_graph_destroy(a.g);
    vkt_graph_destroy(b.g);
}

static double mean_of(const float *v, uint32_t k0, uint32_t k1)
{
    double s = 0;
    for (uint32_t k = k0; k < k1; k++)
        s += v[k];
    return s / (k1 - k0);
}

/* 2 copies against 2 sync copies on the same batches. */
static void test_two_copies(void)
{
    /* plain SGD, bounded (no push lost): the pushes sum to the averaged update */
    vkt_optimizer_options sgd = {.kind = VKT_OPTIMIZER_SGD, .lr = 0.1f};
    net a = make_net(), b = make_net();
    vkt_trainer *ts = make_trainer(&a, 2, VKT_PARALLEL_SYNC, 0, &sgd, VKT_PRECISION_FP32);
    vkt_trainer *ta = make_trainer(&b, 2, VKT_PARALLEL_ASYNC, 1, &sgd, VKT_PRECISION_FP32);
    float ls[STEPS], la[STEPS];
    if (ts && ta && run_steps(ts, &a, STEPS, ls) && run_steps(ta, &b, STEPS, la)) {
        double worst = 0;
        for (uint32_t k = 0; k < STEPS; k++)
            worst = fmax(worst, fabs((double)la[k] - ls[k]) / fabs((double)ls[k]));
        TH_CHECK(worst <= 1e-4, "SGD, bounded: async losses within %.3g of sync's", worst);
        printf("  2 copies, SGD, bounded: worst loss difference %.3g relative\n", worst);
    }
    vkt_trainer_destroy(ts);
    vkt_trainer_destroy(ta);
    /* Adam: each copy's moments are its own, so async differs from sync, and trains */
    vkt_optimizer_options adam = {.kind = VKT_OPTIMIZER_ADAM, .lr = 0.01f};
    ts = make_trainer(&a, 2, VKT_PARALLEL_SYNC, 0, &adam, VKT_PRECISION_FP32);
    ta = make_trainer(&b, 2, VKT_PARALLEL_ASYNC, 0, &adam, VKT_PRECISION_FP32);
    const char *names[] = {"w1", "b1", "w2", "b2", "w3", "b3"};
    float *before[6] = {0};
    uint64_t count[6] = {0};
    for (uint32_t i = 0; ta && i < 6; i++) { /* each parameter tensor before training */
        vkt_shape sh = vkt_tensor_shape(vkt_graph_find(b.g, names[i]));
        count[i] = 1;
        for (uint32_t d = 0; d < sh.ndim; d++)
            count[i] *= sh.dims[d];
        before[i] = malloc(count[i] * sizeof *before[i]);
        TH_OK(NULL, vkt_trainer_read(ta, vkt_graph_find(b.g, names[i]), before[i], count[i]));
    }
    if (ta && ts && run_steps(ts, &a, STEPS, ls) && run_steps(ta, &b, STEPS, la)) {
        double ms = mean_of(ls, STEPS - 10, STEPS), ma = mean_of(la, STEPS - 10, STEPS);
        TH_CHECK(ma < 0.5 * la[0] && ms < 0.5 * ls[0] && ma <= 1.15 * ms,
                 "Adam: async's last 10 losses %.4f (first %.4f), sync's %.4f (first %.4f)",
                 ma, (double)la[0], ms, (double)ls[0]);
        printf("  2 copies, Adam: loss %.4f -> %.4f async, %.4f -> %.4f sync\n",
               (double)la[0], ma, (double)ls[0], ms);
        float *ps = params_of(ts), *pa = params_of(ta);
        uint64_t np = vkt_trainer_param_count(ta);
        TH_CHECK(ps && pa && memcmp(ps, pa, np * sizeof *ps) != 0,
                 "Adam: async's parameters are not sync's (each copy's moments)");
        for (uint32_t i = 0; i < 6; i++) { /* every tensor, most of its elements */
            float *now = malloc(count[i] * sizeof *now);
            TH_OK(NULL, vkt_trainer_read(ta, vkt_graph_find(b.g, names[i]), now, count[i]));
            uint64_t moved = 0;
            for (uint64_t k = 0; k < count[i]; k++)
                moved += now[k] != before[i][k];
            TH_CHECK(moved * 10 >= count[i] * 9, "%s: %llu of %llu elements changed", names[i],
                     (unsigned long long)moved, (unsigned long long)count[i]);
            free(now);
        }
        vkt_trainer_stats s;
        TH_OK(NULL, vkt_trainer_stats_get(ta, &s));
        TH_CHECK(s.updates == 2 * 2 * STEPS && s.staleness_mean == 0.5 &&
                     s.staleness_max == 1 && s.staleness_p99 == 1,
                 "staleness: %llu updates (want %u), mean %g, p99 %llu, max %llu",
                 (unsigned long long)s.updates, 4 * STEPS, s.staleness_mean,
                 (unsigned long long)s.staleness_p99, (unsigned long long)s.staleness_max);
        for (uint32_t st = 0; st < 2; st++) {
            vkt_pipeline_stage_stats ss;
            TH_OK(NULL, vkt_trainer_stage_stats_get(ta, st, &ss));
            TH_CHECK(ss.updates == 2 * STEPS && ss.staleness_mean == 0.5 &&
                         ss.staleness_max == 1,
                     "stage %u: %llu updates, staleness mean %g max %llu", st,
                     (unsigned long long)ss.updates, ss.staleness_mean,
                     (unsigned long long)ss.staleness_max);
        }
        free(ps);
        free(pa);
    }
    for (uint32_t i = 0; i < 6; i++)
        free(before[i]);
    vkt_trainer_destroy(ts);
    vkt_trainer_destroy(ta);
    vkt_graph_destroy(a.g);
    vkt_graph_destroy(b.g);
}

/* Clipping: each copy clips its own share by the norm over its stages (as an async
 * replica's optimizer clips its own), so one plain-SGD step moves the parameters by more
 * than lr x clip (sync's bound) and at most 2 lr x clip. */
static void test_clipping(void)
{
    const float lr = 0.1f, clip = 1e-3f;
    vkt_optimizer_options oo = {.kind = VKT_OPTIMIZER_SGD, .lr = lr, .clip_norm = clip};
    net n = make_net();
    vkt_trainer *t = make_trainer(&n, 2, VKT_PARALLEL_ASYNC, 1, &oo, VKT_PRECISION_FP32);
    float *p0 = t ? params_of(t) : NULL, loss[1];
    if (p0 && run_steps(t, &n, 1, loss)) {
        float *p1 = params_of(t);
        double sq = 0;
        for (uint64_t i = 0; p1 && i < vkt_trainer_param_count(t); i++)
            sq += ((double)p1[i] - p0[i]) * ((double)p1[i] - p0[i]);
        double moved = sqrt(sq);
        TH_CHECK(moved > 1.01 * lr * clip && moved <= 2 * lr * clip * 1.001,
                 "clipped per copy: the step moved %g (want in (%g, %g])", moved,
                 (double)(lr * clip), (double)(2 * lr * clip));
        printf("  2 copies, clip %g: one step moved the parameters by %.3g (lr x clip %.3g)\n",
               (double)clip, moved, (double)(lr * clip));
        free(p1);
    }
    free(p0);
    vkt_trainer_destroy(t);
    vkt_graph_destroy(n.g);
}

/* fp16: the shared loss scale seeds every copy's backward, each copy's sum is judged
 * and unscaled on the host (the async host route). */
static void test_fp16(void)
{
    vkt_optimizer_options oo = {.kind = VKT_OPTIMIZER_ADAM, .lr = 0.01f};
    net n = make_net();
    vkt_trainer *t = make_trainer(&n, 2, VKT_PARALLEL_ASYNC, 0, &oo, VKT_PRECISION_FP16);
    float l[STEPS];
    if (t && run_steps(t, &n, STEPS, l)) {
        int finite = 1;
        for (uint32_t k = 0; k < STEPS; k++)
            finite &= isfinite(l[k]) != 0;
        double last = mean_of(l, STEPS - 10, STEPS);
        TH_CHECK(finite && last < 0.5 * l[0], "fp16: loss %g -> %g (finite %d)", (double)l[0],
                 last, finite);
        printf("  2 copies, fp16: loss %.4f -> %.4f\n", (double)l[0], last);
    }
    vkt_trainer_destroy(t);
    vkt_graph_destroy(n.g);
}

/* fp16 from a loss scale of 2^40: the gradients overflow, every copy skips its update
 * (the parameters stay), the shared scale halves each step, as sync's verdicts; once it
 * is low enough both train. The run of skips at the start equals sync's. */
static void test_fp16_skips(void)
{
    enum { RUN = 30 };
    vkt_optimizer_options oo = {.kind = VKT_OPTIMIZER_SGD, .lr = 0.1f, .momentum = 0.9f};
    uint64_t first_run[2] = {0, 0}, skipped[2] = {0, 0};
    float l[2][RUN], scale[2] = {0, 0};
    for (int async = 0; async < 2; async++) {
        net n = make_net();
        uint32_t dev[4] = {0};
        vkt_trainer_options to = {.batch = BATCH, .devices = dev, .device_count = 4,
                                  .optimizer = oo, .stages = 2, .micro_batches = 2,
                                  .mode = async ? VKT_PARALLEL_ASYNC : VKT_PARALLEL_SYNC,
                                  .precision = VKT_PRECISION_FP16, .loss_scale = 1099511627776.0f,
                                  .loss_scale_interval = 4};
        vkt_trainer *t = NULL;
        TH_CHECK(vkt_trainer_create(th_instance, n.g, n.loss, &to, &t) == VKT_OK,
                 "fp16 from 2^40: %s", vkt_last_error());
        float *p0 = t ? params_of(t) : NULL;
        for (uint32_t k = 0; p0 && k < RUN; k++) {
            if (!run_steps_from(t, &n, k, 1, &l[async][k]))
                break;
            TH_OK(NULL, vkt_trainer_skipped(t, &skipped[async], &scale[async]));
            first_run[async] += skipped[async] == k + 1;
            if (k == 0) {
                float *p1 = params_of(t);
                TH_CHECK(p1 && memcmp(p0, p1, vkt_trainer_param_count(t) * sizeof *p1) == 0,
                         "mode %d: the skipped first step left every parameter", async);
                free(p1);
            }
        }
        free(p0);
        vkt_trainer_destroy(t);
        vkt_graph_destroy(n.g);
    }
    TH_CHECK(first_run[1] >= 1 && first_run[1] == first_run[0] && isfinite(l[1][RUN - 1]) &&
                 l[1][RUN - 1] < l[1][0],
             "fp16 from 2^40: async skipped its first %llu steps (sync %llu), loss %g -> %g",
             (unsigned long long)first_run[1], (unsigned long long)first_run[0],
             (double)l[1][0], (double)l[1][RUN - 1]);
    printf("  2 copies, fp16 from 2^40: first %llu steps skipped (sync %llu); %llu skips in "
           "all (sync %llu), scale %g (%g), loss %.4f -> %.4f\n",
           (unsigned long long)first_run[1], (unsigned long long)first_run[0],
           (unsigned long long)skipped[1], (unsigned long long)skipped[0], (double)scale[1],
           (double)scale[0], (double)l[1][0], (double)l[1][RUN - 1]);
}

int main(void)
{
    th_init("test_pipeline_async");
    test_one_copy(0.0f);
    test_one_copy(0.05f);
    test_two_copies();
    test_clipping();
    test_fp16();
    test_fp16_skips();
    return th_finish();
}
