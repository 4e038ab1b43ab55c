/* Pipeline stages across processes (docs/distributed.md, "Pipeline stages across ranks"):
 * run under mpirun with R ranks, P = 2 stages, D = R / P copies; alone (one rank) it is
 * the pipeline in one process and every check still holds. Checks:
 *  - 10 steps of an MLP cut into 2 stages, 2 micro-batches, momentum: every rank's loss
 *    of every step equals, bit for bit, the same pipeline in one process (D copies on
 *    the device list), and so do the parameters after the steps (read on every rank);
 *    again with clipping by the global norm (the stages' squares summed across ranks),
 *    whose losses differ from the unclipped run's. Unclipped with 2 ranks (D = 1) the
 *    one-process reference takes the direct route (its optimizers scale the device sum by
 *    1/m in fp32, pipe_engine.h's pipe_route) and the ranks the host route (1/m in double,
 *    rounded to float): m = 2 makes that weight a power of two, exact either way, so the
 *    two routes must agree bit for bit (4 ranks, D = 2: both take the host route);
 *  - the chief's progress callback asks to stop after step 3 of a fit: every rank stops
 *    there (the stop travels in the next step's tail), and the next fit goes on from the
 *    data where it stopped: 3 + 7 steps equal 10 uninterrupted ones, bit for bit;
 *  - a checkpoint saved by the ranks (the chief writes it) restores into a plain trainer
 *    in one process with these parameters, bit for bit;
 *  - a rank's round trips per step are its stage's runs alone (2m on stage 0, m on the
 *    last; each stage's update goes ahead of its next run), besides staged transfers;
 *  - ranks that are not a multiple of the stages (P = R + 1) are refused on every rank,
 *    naming both numbers;
 *  - async mode equals the one-process async pipeline of as many copies: bit for bit
 *    with one copy (R = 2), within 1e-4 and with the same staleness figures with two
 *    (R = 4; test_async). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

enum { F = 12, H = 16, C = 4, BATCH = 16, STEPS = 10 };

typedef struct net {
    vkt_graph *g;
    vkt_tensor *x, *y, *loss;
} net;

static vkt_world *world;
static uint32_t R = 1, rank_;
static float g_clip;                /* the optimizers' clip_norm (0: none) */
static vkt_parallel_mode g_mode; /* async: one copy across ranks (test_async) */
static float g_unclipped[STEPS];    /* the losses of the run without clipping */
static int g_bn;                    /* batch norm after the first layer (states) */

/* x -> linear relu linear relu linear -> cross entropy, placed on `stages` stages by
 * parameter bytes (the same on every rank). */
static net make_net(uint32_t stages)
{
    net n = {0};
    vkt_graph_options go = {.seed = 31};
    vkt_graph_create(&go, &n.g);
    vkt_shape xs = {2, {BATCH, F}}, w1 = {2, {F, H}}, b = {1, {H}}, w2 = {2, {H, H}},
              w3 = {2, {H, C}}, b3 = {1, {C}};
    vkt_init he = {.kind = VKT_INIT_HE}, small = {.kind = VKT_INIT_UNIFORM, .a = -0.1f, .b = 0.1f};
    n.x = vkt_input(n.g, "x", &xs);
    n.y = vkt_input_labels(n.g, "y", BATCH);
    vkt_tensor *h = vkt_linear(n.g, n.x, vkt_param(n.g, "w1", &w1, &he),
                               vkt_param(n.g, "b1", &b, &small));
    if (g_bn) { /* running averages: states, each copy's own */
        vkt_init one = {.kind = VKT_INIT_CONSTANT, .a = 1};
        h = vkt_batch_norm(n.g, h, vkt_param(n.g, "gamma", &b, &one),
                           vkt_param(n.g, "beta", &b, &small), vkt_state(n.g, "rm", &b, NULL),
                           vkt_state(n.g, "rv", &b, &one), 0, 0.2f);
    }
    h = vkt_relu(n.g, h);
    h = vkt_relu(n.g, vkt_linear(n.g, h, vkt_param(n.g, "w2", &w2, &he),
                                 vkt_param(n.g, "b2", &b, &small)));
    vkt_tensor *z = vkt_linear(n.g, h, vkt_param(n.g, "w3", &w3, &he),
                               vkt_param(n.g, "b3", &b3, &small));
    n.loss = vkt_softmax_cross_entropy(n.g, z, n.y);
    vkt_split_options so = {.stages = stages, .cost = VKT_SPLIT_COST_PARAMS};
    TH_CHECK(vkt_graph_status(n.g) == VKT_OK &&
                 vkt_graph_split(n.g, n.loss, &so, NULL) == VKT_OK,
             "graph: %s %s", vkt_graph_errmsg(n.g), vkt_last_error());
    return n;
}

static vkt_trainer *make(net *n, uint32_t stages, vkt_world *w, uint32_t copies,
                         vkt_status *out_st)
{
    uint32_t dev[16] = {0};
    vkt_trainer_options o = {.batch = BATCH, .devices = dev,
                             .device_count = w ? 1 : stages * copies, .world = w,
                             .stages = stages, .micro_batches = 2, /* a power of 2: the header */
                             .mode = g_mode};
    o.optimizer = (vkt_optimizer_options){.kind = VKT_OPTIMIZER_SGD, .lr = 0.1f,
                                          .momentum = 0.9f, .clip_norm = g_clip};
    vkt_trainer *t = NULL;
    vkt_status st = vkt_trainer_create(th_instance, n->g, n->loss, &o, &t);
    if (out_st)
        *out_st = st;
    else
        TH_CHECK(st == VKT_OK, "rank %u: trainer: %s (%s)", rank_, vkt_status_name(st),
                 vkt_last_error());
    return t;
}

/* Step k's batch, the same on every rank. */
static void batch_of(uint32_t k, float *x, int32_t *y)
{
    th_seed(1000 + k);
    th_fill_uniform(x, (uint64_t)BATCH * F, -1, 1);
    for (uint32_t i = 0; i < BATCH; i++)
        y[i] = (int32_t)(th_rand_u64() % C);
}

static void run_steps(vkt_trainer *t, net *n, float *loss)
{
    float x[BATCH * F];
    int32_t y[BATCH];
    for (uint32_t k = 0; k < STEPS && t; k++) {
        batch_of(k, x, y);
        vkt_feed f[2] = {{n->x, x}, {n->y, y}};
        vkt_status st = vkt_trainer_step(t, f, 2, &loss[k]);
        TH_CHECK(st == VKT_OK, "rank %u: step %u: %s", rank_, k, vkt_trainer_errmsg(t));
    }
}

static float *params_of(vkt_trainer *t)
{
    uint64_t np = vkt_trainer_param_count(t);
    float *p = th_alloc_floats(np);
    TH_CHECK(vkt_trainer_read_params(t, p, np) == VKT_OK, "rank %u: read: %s", rank_,
             vkt_trainer_errmsg(t));
    return p;
}

static uint32_t copies(void) { return R % 2 == 0 ? R / 2 : 1; }

/* The ranks against one process: losses and parameters, bit for bit; then a checkpoint
 * of the ranks restored into a plain trainer. */
static void test_equal_to_one_process(float clip)
{
    g_clip = clip;
    net a = make_net(2), b = make_net(2);
    vkt_trainer *t = make(&a, 2, world, 1, NULL);
    vkt_trainer *ref = make(&b, 2, NULL, copies(), NULL);
    if (!t || !ref)
        return;
    TH_CHECK(vkt_trainer_world_replicas(t) == copies(), "rank %u: %u copies in the world",
             rank_, vkt_trainer_world_replicas(t));
    float lw[STEPS] = {0}, lr[STEPS] = {0};
    run_steps(t, &a, lw);
    run_steps(ref, &b, lr);
    for (uint32_t k = 0; k < STEPS; k++)
        TH_CHECK(lw[k] == lr[k], "rank %u: step %u: loss %.9g across ranks, %.9g in one process",
                 rank_, k, (double)lw[k], (double)lr[k]);
    TH_CHECK(lw[STEPS - 1] < lw[0], "rank %u: it trains (%g -> %g)", rank_, (double)lw[0],
             (double)lw[STEPS - 1]);
    double apart = 0;
    for (uint32_t k = 0; k < STEPS; k++) {
        double d = fabs((double)lw[k] - g_unclipped[k]) / fabs((double)g_unclipped[k] + 1e-30);
        apart = d > apart ? d : apart;
        if (clip == 0)
            g_unclipped[k] = lw[k];
    }
    TH_CHECK(clip == 0 || apart > 1e-3, "rank %u: clip %g: the losses stay within %.3g of the "
             "unclipped run's: the clipping did nothing", rank_, (double)clip, apart);
    uint64_t np = vkt_trainer_param_count(t);
    float *pw = params_of(t), *pr = params_of(ref);
    TH_CHECK(memcmp(pw, pr, np * 4) == 0, "rank %u: the parameters after %u steps equal one "
             "process's", rank_, STEPS);
    /* every rank calls save (each checks its copy); the chief alone writes */
    char path[64];
    snprintf(path, sizeof path, "/tmp/vkt_mpi_pipeline_%d.vkt", rank_ == 0 ? (int)getpid() : 0);
    if (world)
        vkt_world_broadcast(world, path, sizeof path);
    TH_CHECK(vkt_trainer_save(t, path) == VKT_OK, "rank %u: save: %s", rank_,
             vkt_trainer_errmsg(t));
    double done = 1; /* the file is written: every rank past the save */
    if (world)
        vkt_world_sum(world, &done, 1);
    if (rank_ == 0) {
        net c = make_net(1);
        vkt_trainer *plain = make(&c, 1, NULL, 1, NULL);
        TH_CHECK(plain && vkt_trainer_restore(plain, path) == VKT_OK, "restore: %s",
                 plain ? vkt_trainer_errmsg(plain) : "-");
        float *pp = plain ? params_of(plain) : NULL;
        TH_CHECK(pp && memcmp(pp, pw, np * 4) == 0, "the checkpoint of the ranks restores "
                 "their parameters in a plain trainer");
        free(pp);
        vkt_trainer_destroy(plain);
        vkt_graph_destroy(c.g);
        remove(path);
    }
    free(pw);
    free(pr);
    vkt_trainer_destroy(t);
    vkt_trainer_destroy(ref);
    vkt_graph_destroy(a.g);
    vkt_graph_destroy(b.g);
}

static vkt_dataset *synthetic(void)
{
    enum { N = 96 };
    float *x = th_alloc_floats(N * F);
    int32_t *y = malloc(N * sizeof *y);
    th_seed(9);
    th_fill_uniform(x, N * F, -1, 1);
    for (uint32_t i = 0; i < N; i++)
        y[i] = (int32_t)(th_rand_u64() % C);
    vkt_dataset *d = NULL;
    TH_CHECK(vkt_dataset_create(N, F, C, x, y, &d) == VKT_OK, "data: %s", vkt_last_error());
    free(x);
    free(y);
    return d;
}

static int stop_at_3(void *user, uint64_t step, uint64_t total, float loss)
{
    (void)total;
    ((float *)user)[step - 1] = loss;
    return step == 3;
}

static int record(void *user, uint64_t step, uint64_t total, float loss)
{
    (void)total;
    ((float *)user)[step - 1] = loss;
    return 0;
}

/* The chief stops a fit after step 3; every rank stops there and the next fit goes on. */
static void test_stop(void)
{
    vkt_dataset *d = synthetic();
    net a = make_net(2), b = make_net(2);
    vkt_trainer *t = make(&a, 2, world, 1, NULL), *ref = make(&b, 2, NULL, copies(), NULL);
    if (!t || !ref || !d)
        return;
    float lw[STEPS] = {0}, lr[STEPS] = {0};
    vkt_status st = vkt_trainer_fit(t, d, a.x, a.y, STEPS, 5, stop_at_3, lw);
    TH_CHECK(st == VKT_OK && vkt_trainer_step_count(t) == 3, "rank %u: stopped after step "
             "3: %s, %llu steps", rank_, vkt_status_name(st),
             (unsigned long long)vkt_trainer_step_count(t));
    st = vkt_trainer_fit(t, d, a.x, a.y, STEPS - 3, 5, record, lw);
    TH_CHECK(st == VKT_OK && vkt_trainer_step_count(t) == STEPS, "rank %u: the rest: %s",
             rank_, vkt_trainer_errmsg(t));
    st = vkt_trainer_fit(ref, d, b.x, b.y, STEPS, 5, record, lr);
    if (rank_ == 0) /* the callback runs on the chief only */
        for (uint32_t k = 0; k < STEPS; k++)
            TH_CHECK(lw[k] == lr[k], "step %u: loss %.9g (stopped at 3, then on), %.9g (one "
                     "fit)", k, (double)lw[k], (double)lr[k]);
    uint64_t np = vkt_trainer_param_count(t);
    float *pw = params_of(t), *pr = params_of(ref);
    TH_CHECK(memcmp(pw, pr, np * 4) == 0, "rank %u: the parameters equal one uninterrupted "
             "fit's", rank_);
    free(pw);
    free(pr);
    vkt_trainer_destroy(t);
    vkt_trainer_destroy(ref);
    vkt_graph_destroy(a.g);
    vkt_graph_destroy(b.g);
    vkt_dataset_destroy(d);
}

/* Round trips across ranks (the host route: the tail's sum over copies, then each stage's
 * update due, ahead of its next run in that run's submission, pipe_sched.c): per step a
 * rank's submissions and fence waits, besides its synchronous transfers (the gradient's
 * readback where device memory is staged), are its stage's runs alone: 2m on stage 0
 * (keeping: forward and backward halves; recomputing: the forward, then the whole step),
 * m on the last stage (its forward and backward); with the update a submission of its own
 * they were one more. Per step: a fit of 2k steps minus one of k (each fit's end syncs
 * the ranks once, pipe_exec_sync, which flushes the update due: that falls out). */
static void test_round_trips(void)
{
    enum { K = 4, M = 2 };
    if (!world)
        return;
    vkt_dataset *d = synthetic();
    net a = make_net(2);
    vkt_trainer *t = make(&a, 2, world, 1, NULL);
    if (!t || !d)
        return;
    double per[2][3] = {{0}}; /* fits of K and 2K steps: submits, waits, transfers */
    TH_OK(NULL, vkt_trainer_fit(t, d, a.x, a.y, 2, 5, NULL, NULL)); /* warm-up: recordings */
    for (int i = 0; i < 2; i++) {
        vkt_trainer_stats s0, s1;
        TH_OK(NULL, vkt_trainer_stats_get(t, &s0));
        vkt_status st = vkt_trainer_fit(t, d, a.x, a.y, K * (i + 1), 5, NULL, NULL);
        TH_CHECK(st == VKT_OK, "rank %u: fit: %s", rank_, vkt_trainer_errmsg(t));
        TH_OK(NULL, vkt_trainer_stats_get(t, &s1));
        per[i][0] = (double)(s1.submits - s0.submits);
        per[i][1] = (double)(s1.fence_waits - s0.fence_waits);
        per[i][2] = (double)(s1.sync_transfers - s0.sync_transfers);
    }
    double ds = (per[1][0] - per[0][0]) / K, df = (per[1][1] - per[0][1]) / K,
           dt = (per[1][2] - per[0][2]) / K;
    uint32_t stage = rank_ % 2, want = stage == 1 ? M : 2 * M;
    TH_CHECK(ds - dt == want && df - dt == want, "rank %u (stage %u): %.3g submissions, %.3g "
             "fence waits, %.3g transfers per step (expected %u + transfers)", rank_, stage, ds,
             df, dt, want);
    printf("measured: rank %u (stage %u of 2, m %u): %.3g submissions, %.3g fence waits, %.3g "
           "transfers per step\n", rank_, stage, M, ds, df, dt);
    vkt_trainer_destroy(t);
    vkt_graph_destroy(a.g);
    vkt_dataset_destroy(d);
}

/* P = R + 1 stages: refused on every rank, naming both numbers. */
static void test_uneven(void)
{
    if (!world)
        return;
    net n = make_net(R + 1);
    vkt_status st = VKT_OK;
    vkt_trainer *t = make(&n, R + 1, world, 1, &st);
    char want[96];
    snprintf(want, sizeof want, "%u ranks do not split into pipelines of %u stages", R, R + 1);
    TH_CHECK(!t && st == VKT_ERROR_INVALID_ARGUMENT && strstr(vkt_last_error(), want),
             "rank %u: %u ranks, %u stages: %s %s", rank_, R, R + 1, vkt_status_name(st),
             vkt_last_error());
    vkt_trainer_destroy(t);
    vkt_graph_destroy(n.g);
}

/* Async mode (pipe_async_world.c): each copy's stage pushes into its stage's master,
 * sharded over the stage's ranks, in the order the pushes arrive. With one copy (R = 2)
 * the run equals the one-process async pipeline of one copy bit for bit (losses,
 * parameters, the checkpoint restored in a plain trainer: test_equal_to_one_process).
 * With two (R = 4) the order of the pushes differs from run to run, so only the first
 * loss is bit for bit; every loss and parameter is within 1e-4 of the one-process async
 * pipeline of 2 copies, the run trains, and the staleness figures (every rank's pushes,
 * gathered) equal one process's exactly: STEPS x 2 stages x D pushes, each step's D
 * pushes into a master stale by 0 .. D - 1. Again with clipping (clip: each copy by the
 * norm over its own stages), whose losses differ from the unclipped run's; and with batch
 * norm, whose running averages (states) stay each copy's own, as in one process: the
 * parameters read on copy 0's ranks (copy 0's states included) compare as above. */
static void test_async(float clip, int bn)
{
    static float unclipped[STEPS];
    if (!world)
        return;
    g_mode = VKT_PARALLEL_ASYNC;
    if (copies() == 1 && clip == 0 && !bn)
        test_equal_to_one_process(0);
    g_clip = clip;
    g_bn = bn;
    net a = make_net(2), b = make_net(2);
    vkt_trainer *t = make(&a, 2, world, 1, NULL), *ref = make(&b, 2, NULL, copies(), NULL);
    g_mode = VKT_PARALLEL_SYNC;
    g_clip = 0;
    g_bn = 0;
    if (!t || !ref)
        return;
    float lw[STEPS] = {0}, lr[STEPS] = {0};
    run_steps(t, &a, lw);
    run_steps(ref, &b, lr);
    double apart = 0;
    for (uint32_t k = 0; k < STEPS; k++) {
        double d = fabs((double)lw[k] - lr[k]) / fabs((double)lr[k]);
        apart = d > apart ? d : apart;
    }
    double moved = 0; /* clipped: how far from the unclipped run */
    for (uint32_t k = 0; k < STEPS; k++) {
        double d = fabs((double)lw[k] - unclipped[k]) / fabs((double)unclipped[k] + 1e-30);
        moved = d > moved ? d : moved;
        if (clip == 0 && !bn)
            unclipped[k] = lw[k];
    }
    TH_CHECK(clip == 0 || bn || moved > 1e-3, "rank %u: async, clip %g: the losses stay within "
             "%.3g of the unclipped run's: the clipping did nothing", rank_, (double)clip,
             moved);
    TH_CHECK(lw[0] == lr[0] && apart < 1e-4 && lw[STEPS - 1] < lw[0],
             "rank %u: async, %u copies, clip %g: first loss %.9g (one process %.9g), losses "
             "within %.3g of one process's (want < 1e-4), %g -> %g", rank_, copies(),
             (double)clip, (double)lw[0],
             (double)lr[0], apart, (double)lw[0], (double)lw[STEPS - 1]);
    uint64_t np = vkt_trainer_param_count(t);
    float *pw = params_of(t), *pr = params_of(ref);
    double dp = 0;
    for (uint64_t i = 0; i < np; i++)
        dp = fabs((double)pw[i] - pr[i]) > dp ? fabs((double)pw[i] - pr[i]) : dp;
    /* with states a rank of copy c > 0 reads its own stage's from its device: copy c's
     * running averages (one process and the checkpoint give copy 0's) */
    TH_CHECK((bn && rank_ >= 2) || (copies() > 1 ? dp < 1e-4 : dp == 0),
             "rank %u: the parameters are %.3g from one process's", rank_, dp);
    if (rank_ == 0)
        printf("measured: async, %u copies across %u ranks, clip %g%s, against one process: "
               "losses within %.3g, parameters within %.3g\n", copies(), R, (double)clip,
               bn ? ", batch norm" : "", apart, dp);
    vkt_trainer_stats sw, sr;
    TH_CHECK(vkt_trainer_stats_get(t, &sw) == VKT_OK && vkt_trainer_stats_get(ref, &sr) == VKT_OK &&
                 sw.updates == (uint64_t)STEPS * 2 * copies() && sw.updates == sr.updates &&
                 sw.staleness_max == copies() - 1 && sw.staleness_max == sr.staleness_max &&
                 sw.staleness_mean == sr.staleness_mean && sw.staleness_p99 == sr.staleness_p99,
             "rank %u: staleness: %llu updates (want %u), mean %g max %llu p99 %llu; one "
             "process: %llu, %g, %llu, %llu", rank_, (unsigned long long)sw.updates,
             STEPS * 2 * copies(), sw.staleness_mean, (unsigned long long)sw.staleness_max,
             (unsigned long long)sw.staleness_p99, (unsigned long long)sr.updates,
             sr.staleness_mean, (unsigned long long)sr.staleness_max,
             (unsigned long long)sr.staleness_p99);
    free(pw);
    free(pr);
    vkt_trainer_destroy(t);
    vkt_trainer_destroy(ref);
    vkt_graph_destroy(a.g);
    vkt_graph_destroy(b.g);
}

int main(int argc, char **argv)
{
    int require = 0;
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--mpi") == 0)
            require = 1;
    vkt_world_options wo = {.timeout_seconds = 60, .require_launcher = require};
    vkt_world *w = NULL;
    if (vkt_world_init(&argc, &argv, &wo, &w) != VKT_OK) {
        fprintf(stderr, "test_mpi_pipeline: %s\n", vkt_last_error());
        return 1;
    }
    R = vkt_world_size(w);
    rank_ = vkt_world_rank(w);
    world = R > 1 ? w : NULL;
    th_init("test_mpi_pipeline");
    if (R % 2 != 0 && R > 1) {
        fprintf(stderr, "test_mpi_pipeline: run it on an even number of ranks\n");
        vkt_world_finalize(w);
        return 1;
    }
    test_equal_to_one_process(0);
    test_equal_to_one_process(0.3f);
    g_clip = 0;
    test_stop();
    test_round_trips();
    test_uneven();
    test_async(0, 0);
    test_async(0.3f, 0); /* each copy clipped by its own norm (pipe_world_squares' slots) */
    test_async(0, 1);    /* batch norm: each copy's running averages stay its own */
    int rc = th_finish();
    double bad = rc != 0;
    vkt_world_sum(w, &bad, 1); /* one rank's failure fails every rank's exit code */
    vkt_world_finalize(w);
    return bad > 0 ? 1 : 0;
}
