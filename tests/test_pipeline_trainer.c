/* Model parallelism inside vkt_trainer (options.stages, options.micro_batches), on
 * several contexts of one device:
 *  - P x D = 2x2, 3x1 and 1x2 (D data-parallel copies of a P-stage pipeline) equal the
 *    unpipelined single-replica trainer on the same global batches: losses within 1e-5
 *    relative over 50 steps, parameters at the end through read_params (the same flat
 *    layout); the copies stay bitwise identical; write_params reaches every copy; fit,
 *    predict and evaluate work;
 *  - what the engine does not combine with is refused at create, each with a message;
 *    check mode reaches the stages' models;
 *  - checkpoints: a run saved with 2 stages resumes with 1 and 3 stages and with 2
 *    data-parallel replicas (no stages), and continues with the losses of the run that
 *    was not interrupted (Adam: both moments and the step travel);
 *  - a device lost on a stage in the middle of fit stops the run with
 *    VKT_ERROR_DEVICE_LOST naming the stage, no hang; later calls are refused; the
 *    checkpoint saved before it restores. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "platform/platform.h"

enum { F = 12, H = 16, C = 5, BATCH = 12, STEPS = 50 };

typedef struct net {
    vkt_graph *g;
    vkt_tensor *x, *y, *z, *loss;
} net;

/* x [B,F] -> relu(linear) on stage s0 -> relu(linear) on s1 -> linear + CE on s2. */
static net make_net(uint32_t s0, uint32_t s1, uint32_t s2)
{
    net n = {0};
    vkt_graph_options go = {.seed = 77};
    vkt_graph_create(&go, &n.g);
    vkt_shape xs = {2, {BATCH, F}}, w1 = {2, {F, H}}, b = {1, {H}}, w2 = {2, {H, H}},
              w3 = {2, {H, C}}, b3 = {1, {C}};
    vkt_init he = {.kind = VKT_INIT_HE}, small = {.kind = VKT_INIT_UNIFORM, .a = -0.1f, .b = 0.1f};
    n.x = vkt_input(n.g, "x", &xs);
    n.y = vkt_input_labels(n.g, "y", BATCH);
    vkt_graph_set_stage(n.g, s0);
    vkt_tensor *h1 = vkt_relu(n.g, vkt_linear(n.g, n.x, vkt_param(n.g, "w1", &w1, &he),
                                              vkt_param(n.g, "b1", &b, &small)));
    vkt_graph_set_stage(n.g, s1);
    vkt_tensor *h2 = vkt_relu(n.g, vkt_linear(n.g, h1, vkt_param(n.g, "w2", &w2, &he),
                                              vkt_param(n.g, "b2", &b, &small)));
    vkt_graph_set_stage(n.g, s2);
    n.z = vkt_linear(n.g, h2, vkt_param(n.g, "w3", &w3, &he), vkt_param(n.g, "b3", &b3, &small));
    n.loss = vkt_softmax_cross_entropy(n.g, n.z, n.y);
    TH_CHECK(vkt_graph_status(n.g) == VKT_OK, "graph: %s", vkt_graph_errmsg(n.g));
    return n;
}

/* A placement for P stages: the three layers over stages 0..P-1. */
static net make_placed(uint32_t P)
{
    return P >= 3 ? make_net(0, 1, 2) : P == 2 ? make_net(0, 1, 1) : make_net(0, 0, 0);
}

static vkt_trainer *make_trainer(net *n, uint32_t P, uint32_t D, uint32_t m,
                                 const vkt_optimizer_options *oo)
{
    uint32_t dev[64] = {0};
    vkt_trainer_options to = {.batch = BATCH, .devices = dev, .device_count = P * D,
                              .optimizer = *oo, .stages = P, .micro_batches = m};
    vkt_trainer *t = NULL;
    vkt_status st = vkt_trainer_create(th_instance, n->g, n->loss, &to, &t);
    TH_CHECK(st == VKT_OK, "trainer %ux%u, m %u: %s", P, D, m, vkt_last_error());
    return t;
}

/* Batch k of a fixed sequence: the same data for every run. */
static void batch_of(uint32_t k, float *x, int32_t *y)
{
    th_seed(1000 + k);
    th_fill_uniform(x, (uint64_t)BATCH * F, -1, 1);
    for (uint32_t i = 0; i < BATCH; i++)
        y[i] = (int32_t)(th_rand_u64() % C);
}

/* Steps [k0, k1) of the sequence; losses into out[k]. */
static int run_steps(vkt_trainer *t, net *n, uint32_t k0, uint32_t k1, float *out)
{
    float x[BATCH * F];
    int32_t y[BATCH];
    for (uint32_t k = k0; k < k1; k++) {
        batch_of(k, x, y);
        vkt_feed f[2] = {{n->x, x}, {n->y, y}};
        if (!TH_CHECK(vkt_trainer_step(t, f, 2, &out[k]) == VKT_OK, "step %u: %s", k,
                      vkt_trainer_errmsg(t)))
            return 0;
    }
    return 1;
}

static double worst_rel(const float *a, const float *b, uint32_t k0, uint32_t k1)
{
    double worst = 0;
    for (uint32_t k = k0; k < k1; k++) {
        double rel = fabs((double)a[k] - b[k]) / fmax(fabs((double)a[k]), 1e-30);
        worst = rel > worst ? rel : worst;
    }
    return worst;
}

static void test_equivalence(uint32_t P, uint32_t D, uint32_t m)
{
    vkt_optimizer_options oo = {.kind = VKT_OPTIMIZER_SGD, .lr = 0.1f, .momentum = 0.9f};
    net a = make_net(0, 0, 0), b = make_placed(P);
    vkt_trainer *ta = make_trainer(&a, 1, 1, 1, &oo), *tb = make_trainer(&b, P, D, m, &oo);
    float la[STEPS], lb[STEPS];
    if (!ta || !tb || !run_steps(ta, &a, 0, STEPS, la) || !run_steps(tb, &b, 0, STEPS, lb))
        goto out;
    double worst = worst_rel(la, lb, 0, STEPS);
    TH_CHECK(worst <= 1e-5, "%ux%u, m %u: worst loss difference %.3g relative", P, D, m, worst);
    TH_CHECK(vkt_trainer_replicas(tb) == D && vkt_trainer_world_replicas(tb) == D,
             "replicas %u, world %u (want %u)", vkt_trainer_replicas(tb),
             vkt_trainer_world_replicas(tb), D);
    uint64_t np = vkt_trainer_param_count(ta);
    TH_CHECK(vkt_trainer_param_count(tb) == np, "flat layout: %llu values, unpipelined %llu",
             (unsigned long long)vkt_trainer_param_count(tb), (unsigned long long)np);
    float *pa = th_alloc_floats(np), *pb = th_alloc_floats(np), *pc = th_alloc_floats(np);
    TH_OK(NULL, vkt_trainer_read_params(ta, pa, np));
    TH_CHECK(vkt_trainer_read_params(tb, pb, np) == VKT_OK, "read: %s", vkt_trainer_errmsg(tb));
    th_compare("final parameters", pb, pa, np, 1e-4f, 1e-5f);
    for (uint32_t d = 1; d < D; d++) { /* every copy holds the same bits */
        TH_CHECK(vkt_trainer_read_replica_params(tb, d, pc, np) == VKT_OK, "read copy %u", d);
        TH_CHECK(memcmp(pb, pc, np * sizeof *pb) == 0, "copy %u differs from copy 0", d);
    }
    /* one tensor, and the same evaluation as the unpipelined model */
    vkt_tensor *w2a = vkt_graph_find(a.g, "w2"), *w2b = vkt_graph_find(b.g, "w2");
    TH_CHECK(vkt_trainer_read(tb, w2b, pc, H * H) == VKT_OK, "read w2: %s", vkt_trainer_errmsg(tb));
    TH_OK(NULL, vkt_trainer_read(ta, w2a, pa, H * H));
    th_compare("w2", pc, pa, H * H, 1e-4f, 1e-5f);
    float x[BATCH * F];
    int32_t y[BATCH];
    batch_of(999, x, y);
    vkt_feed fa = {a.x, x}, fb = {b.x, x};
    float za[BATCH * C], zb[BATCH * C];
    TH_OK(NULL, vkt_trainer_predict(ta, &fa, 1, BATCH, a.z, za));
    TH_CHECK(vkt_trainer_predict(tb, &fb, 1, BATCH, b.z, zb) == VKT_OK, "predict: %s",
             vkt_trainer_errmsg(tb));
    th_compare("predict", zb, za, BATCH * C, 1e-4f, 1e-5f);
    /* write_params: the unpipelined model's parameters into every copy */
    TH_OK(NULL, vkt_trainer_read_params(ta, pa, np));
    TH_CHECK(vkt_trainer_write_params(tb, pa, np) == VKT_OK, "write: %s", vkt_trainer_errmsg(tb));
    for (uint32_t d = 0; d < D; d++) {
        TH_CHECK(vkt_trainer_read_replica_params(tb, d, pc, np) == VKT_OK, "read copy %u", d);
        TH_CHECK(memcmp(pa, pc, np * sizeof *pa) == 0, "copy %u after write_params", d);
    }
    TH_CHECK(vkt_trainer_write_params(tb, pa, np - 1) == VKT_ERROR_SHAPE, "a short write");
    printf("  %ux%u (stages x copies), m %u: worst loss difference %.3g relative over %d "
           "steps\n", P, D, m, worst, STEPS);
    free(pa);
    free(pb);
    free(pc);
out:
    vkt_trainer_destroy(ta);
    vkt_trainer_destroy(tb);
    vkt_graph_destroy(a.g);
    vkt_graph_destroy(b.g);
}

static vkt_dataset *synthetic(uint32_t count)
{
    th_seed(5);
    float *x = th_alloc_floats((uint64_t)count * F);
    int32_t *y = malloc(count * sizeof *y);
    th_fill_uniform(x, (uint64_t)count * F, -1, 1);
    for (uint32_t i = 0; i < count; i++) /* the largest of the first C features */
        for (int c = 0; c < C; c++)
            y[i] = c == 0 || x[i * F + c] > x[i * F + y[i]] ? c : y[i];
    vkt_dataset *d = NULL;
    TH_OK(NULL, vkt_dataset_create(count, F, C, x, y, &d));
    free(x);
    free(y);
    return d;
}

typedef struct progress {
    float loss[64];
    uint64_t last;
    vkt_trainer *t;
    const char *dir;   /* save a checkpoint here at step save_at, */
    uint64_t save_at;  /*   then inject a lost device (fault) */
    const char *fault;
} progress;

static int on_step(void *user, uint64_t step, uint64_t total, float loss)
{
    (void)total;
    progress *p = user;
    if (step <= 64)
        p->loss[step - 1] = loss;
    p->last = step;
    if (p->dir && step == p->save_at) {
        TH_CHECK(vkt_checkpoint_save_dir(p->t, p->dir, 3) == VKT_OK, "save: %s",
                 vkt_trainer_errmsg(p->t));
        plat_setenv("VKT_FAULT_INJECT", p->fault);
    }
    return 0;
}

/* fit and evaluate: 2 stages x 2 copies against one replica, same data set and seed. */
static void test_fit(void)
{
    vkt_optimizer_options oo = {.kind = VKT_OPTIMIZER_SGD, .lr = 0.1f};
    vkt_dataset *d = synthetic(120);
    net a = make_net(0, 0, 0), b = make_net(0, 1, 1);
    vkt_trainer *ta = make_trainer(&a, 1, 1, 1, &oo), *tb = make_trainer(&b, 2, 2, 3, &oo);
    progress pa = {0}, pb = {0};
    if (ta && tb) {
        TH_OK(NULL, vkt_trainer_fit(ta, d, a.x, a.y, 20, 3, on_step, &pa));
        TH_CHECK(vkt_trainer_fit(tb, d, b.x, b.y, 20, 3, on_step, &pb) == VKT_OK, "fit: %s",
                 vkt_trainer_errmsg(tb));
        double worst = worst_rel(pa.loss, pb.loss, 0, 20);
        TH_CHECK(pb.last == 20 && worst <= 1e-5, "fit 2x2: %llu steps, worst %.3g",
                 (unsigned long long)pb.last, worst);
        vkt_eval_result ea, eb;
        TH_OK(NULL, vkt_trainer_evaluate(ta, d, a.x, a.z, &ea));
        TH_CHECK(vkt_trainer_evaluate(tb, d, b.x, b.z, &eb) == VKT_OK, "evaluate: %s",
                 vkt_trainer_errmsg(tb));
        TH_CHECK(fabsf(ea.loss - eb.loss) <= 1e-4f * ea.loss && ea.accuracy == eb.accuracy,
                 "evaluate: loss %g vs %g, accuracy %g vs %g", eb.loss, ea.loss, eb.accuracy,
                 ea.accuracy);
        vkt_trainer_stats s;
        TH_OK(NULL, vkt_trainer_stats_get(tb, &s));
        TH_CHECK(s.steps == 20 && s.replicas == 2 && vkt_trainer_step_count(tb) == 20,
                 "stats: %llu steps, %u replicas", (unsigned long long)s.steps, s.replicas);
        printf("  fit 2x2, m 3: worst loss difference %.3g over 20 steps; evaluate %.6f / %.6f\n",
               worst, eb.loss, ea.loss);
    }
    vkt_trainer_destroy(ta);
    vkt_trainer_destroy(tb);
    vkt_graph_destroy(a.g);
    vkt_graph_destroy(b.g);
    vkt_dataset_destroy(d);
}

static void expect_refused(vkt_trainer_options to, net *n, const char *needle, const char *what)
{
    vkt_trainer *t = NULL;
    vkt_status st = vkt_trainer_create(th_instance, n->g, n->loss, &to, &t);
    TH_CHECK(st != VKT_OK && !t && strstr(vkt_last_error(), needle), "%s: %s, '%s' (want '%s')",
             what, vkt_status_name(st), vkt_last_error(), needle);
    vkt_trainer_destroy(t);
}

static void test_refused(void)
{
    net n = make_net(0, 1, 1);
    uint32_t dev[8] = {0};
    vkt_trainer_options base = {.batch = BATCH, .devices = dev, .device_count = 2};
    vkt_trainer_options o = base;
    o.mode = (vkt_parallel_mode)7; /* async mode trains: test_pipeline_async.c */
    expect_refused(o, &n, "unknown parallel mode 7", "mode 7");
    o = base;
    o.bounded_staleness = 1; /* sync */
    expect_refused(o, &n, "a staleness bound applies to async mode only", "sync, a bound");
    o = base;
    o.scale_lr = 1;
    expect_refused(o, &n, "scale_lr", "scale_lr");
    o = base;
    o.balance_after = 3;
    expect_refused(o, &n, "balance_after", "balance");
    o = base;
    o.device_count = 3;
    expect_refused(o, &n, "a multiple of 2", "3 devices for 2 stages");
    o = base;
    o.device_count = 4;
    o.micro_batches = 4; /* 2 copies x 4 micro-batches of 12 rows */
    expect_refused(o, &n, "does not split into 2 copies x 4", "uneven split");
    o = base;
    o.stages = 3;
    expect_refused(o, &n, "must be on the last stage (2)", "3 stages, the loss on stage 1");
    /* stages 0: from the placement (2 here); an unplaced graph trains as before */
    o = base;
    o.device_count = 1;
    vkt_trainer *t = NULL;
    TH_OK(NULL, vkt_trainer_create(th_instance, n.g, n.loss, &o, &t));
    vkt_optimizer_options clip = {.kind = VKT_OPTIMIZER_SGD, .lr = 0.1f, .clip_norm = 1};
    TH_CHECK(t && vkt_trainer_set_optimizer(t, &clip) == VKT_OK,
             "set_optimizer with clipping (over every stage): %s", t ? vkt_trainer_errmsg(t) : "");
    clip.clip_norm = -1;
    TH_CHECK(t && vkt_trainer_set_optimizer(t, &clip) == VKT_ERROR_INVALID_ARGUMENT &&
                 strstr(vkt_trainer_errmsg(t), "clip_norm"),
             "set_optimizer with clip_norm -1: %s", t ? vkt_trainer_errmsg(t) : "");
    float x[BATCH * F] = {0};
    vkt_feed only_x = {n.x, x};
    TH_CHECK(t && vkt_trainer_step(t, &only_x, 1, NULL) == VKT_ERROR_INVALID_ARGUMENT &&
                 strstr(vkt_trainer_errmsg(t), "'y'"),
             "labels not fed: %s", t ? vkt_trainer_errmsg(t) : "");
    vkt_trainer_destroy(t);
    /* check mode (every op against its CPU reference) reaches every stage's model */
    o = base;
    o.check = 1;
    o.micro_batches = 2;
    t = NULL;
    float loss = 0;
    int32_t y[BATCH];
    batch_of(3, x, y);
    vkt_feed f[2] = {{n.x, x}, {n.y, y}};
    TH_CHECK(vkt_trainer_create(th_instance, n.g, n.loss, &o, &t) == VKT_OK &&
                 vkt_trainer_step(t, f, 2, &loss) == VKT_OK && loss > 0,
             "check mode with 2 stages: %s", t ? vkt_trainer_errmsg(t) : vkt_last_error());
    vkt_trainer_destroy(t);
    vkt_graph_destroy(n.g);
}

/* Saved after K steps with 2 stages; resumed with 1, 3 stages and with 2 replicas. */
static void test_checkpoint_resume(const char *dir)
{
    enum { K = 10, N = 25 };
    vkt_optimizer_options oo = {.kind = VKT_OPTIMIZER_ADAM, .lr = 0.01f};
    net s2 = make_placed(2);
    vkt_trainer *t = make_trainer(&s2, 2, 1, 2, &oo);
    float ref[N], got[N];
    char path[512];
    snprintf(path, sizeof path, "%s/two-stages.vkt", dir);
    if (!t || !run_steps(t, &s2, 0, K, ref))
        goto out;
    TH_CHECK(vkt_trainer_save(t, path) == VKT_OK, "save: %s", vkt_trainer_errmsg(t));
    run_steps(t, &s2, K, N, ref); /* the uninterrupted run */
    struct { uint32_t P, D, m; } as[] = {{1, 1, 1}, {3, 1, 2}, {1, 2, 1}, {2, 2, 1}};
    for (uint32_t i = 0; i < sizeof as / sizeof as[0]; i++) {
        net n = make_placed(as[i].P);
        vkt_trainer *r = make_trainer(&n, as[i].P, as[i].D, as[i].m, &oo);
        vkt_status st = r ? vkt_trainer_restore(r, path) : VKT_ERROR_INTERNAL;
        TH_CHECK(st == VKT_OK && vkt_trainer_step_count(r) == K, "restore into %ux%u: %s", as[i].P,
                 as[i].D, r ? vkt_trainer_errmsg(r) : "");
        if (st == VKT_OK && run_steps(r, &n, K, N, got)) {
            double worst = worst_rel(ref, got, K, N);
            TH_CHECK(worst <= 1e-5, "resumed with %u stages x %u: worst %.3g relative",
                     as[i].P, as[i].D, worst);
            printf("  saved with 2 stages, resumed with %u stage(s) x %u: worst loss "
                   "difference %.3g over %d steps\n", as[i].P, as[i].D, worst, N - K);
        }
        vkt_trainer_destroy(r);
        vkt_graph_destroy(n.g);
    }
    /* another optimizer: refused, naming it, and the trainer unchanged */
    vkt_optimizer_options sgd = {.kind = VKT_OPTIMIZER_SGD, .lr = 0.1f, .momentum = 0.9f};
    net n = make_placed(3);
    vkt_trainer *r = make_trainer(&n, 3, 1, 1, &sgd);
    TH_CHECK(r && vkt_trainer_restore(r, path) == VKT_ERROR_SHAPE &&
                 vkt_trainer_step_count(r) == 0,
             "restore with another optimizer: %s", r ? vkt_trainer_errmsg(r) : "");
    vkt_trainer_destroy(r);
    vkt_graph_destroy(n.g);
out:
    plat_remove_file(path);
    vkt_trainer_destroy(t);
    vkt_graph_destroy(s2.g);
}

/* A device lost mid-run on a stage: a clean stop, and the last checkpoint restores. */
static void test_device_lost(const char *dir, uint32_t D)
{
    vkt_optimizer_options oo = {.kind = VKT_OPTIMIZER_SGD, .lr = 0.1f};
    vkt_dataset *d = synthetic(120);
    net n = make_placed(2);
    vkt_trainer *t = make_trainer(&n, 2, D, 2, &oo);
    char ckdir[512];
    snprintf(ckdir, sizeof ckdir, "%s/lost%u", dir, D);
    /* after step 6: a checkpoint, then every submission past the next 5 fails (the count
     * is over the process: a second run fails at its first submission) */
    progress p = {.t = t, .dir = ckdir, .save_at = 6, .fault = "vkQueueSubmit:5"};
    vkt_status st = t ? vkt_trainer_fit(t, d, n.x, n.y, 20, 1, on_step, &p) : VKT_OK;
    plat_setenv("VKT_FAULT_INJECT", NULL);
    const char *msg = t ? vkt_trainer_errmsg(t) : "";
    TH_CHECK(st == VKT_ERROR_DEVICE_LOST && strstr(msg, "stage ") &&
                 (D == 1 || strstr(msg, "copy ")) && strstr(msg, "VK_ERROR_DEVICE_LOST") &&
                 p.last == 6,
             "a lost stage device stops fit: %s after step %llu (%s)", vkt_status_name(st),
             (unsigned long long)p.last, msg);
    printf("  2 stages x %u: device lost after step %llu: %s\n", D, (unsigned long long)p.last,
           msg);
    if (t) {
        float x[BATCH * F] = {0};
        int32_t y[BATCH] = {0};
        vkt_feed f[2] = {{n.x, x}, {n.y, y}};
        TH_STATUS(NULL, vkt_trainer_step(t, f, 2, NULL), VKT_ERROR_DEVICE_LOST);
        TH_CHECK(vkt_checkpoint_save_dir(t, ckdir, 3) == VKT_ERROR_DEVICE_LOST,
                 "saving after the loss is refused (the last checkpoint stays)");
    }
    vkt_trainer_destroy(t);
    /* the checkpoint of step 6 restores into a new trainer and training goes on */
    vkt_trainer *r = make_trainer(&n, 2, D, 2, &oo);
    int found = 0;
    uint64_t step = 0;
    TH_CHECK(r && vkt_checkpoint_restore_latest(r, ckdir, &found, &step, NULL, 0) == VKT_OK &&
                 found && step == 6,
             "restore the last checkpoint: found %d, step %llu: %s", found,
             (unsigned long long)step, r ? vkt_trainer_errmsg(r) : "");
    progress q = {0};
    TH_CHECK(r && vkt_trainer_fit(r, d, n.x, n.y, 4, 1, on_step, &q) == VKT_OK && q.last == 10,
             "fit after the restore: %s", r ? vkt_trainer_errmsg(r) : "");
    vkt_trainer_destroy(r);
    vkt_graph_destroy(n.g);
    vkt_dataset_destroy(d);
    th_remove_tree(ckdir);
    TH_CHECK(plat_file_stat(ckdir, NULL, NULL) != 0, "%s removed", ckdir);
}

int main(void)
{
    th_init("test_pipeline_trainer");
    char dir[400];
    th_temp_dir("pipe_trainer", dir, sizeof dir);
    test_refused();
    test_equivalence(2, 2, 2);
    test_equivalence(3, 1, 3);
    test_equivalence(1, 2, 2);
    test_fit();
    test_checkpoint_resume(dir);
    test_device_lost(dir, 1);
    test_device_lost(dir, 2);
    plat_remove_dir(dir);
    return th_finish();
}
