/* Model parallelism (vkt_pipeline) on several contexts of one device:
 *  - placement: vkt_graph_set_stage / vkt_tensor_set_stage and their errors; every
 *    placement rule of graph/stage.h refused with a message naming the tensor;
 *  - a 3-layer MLP on 2 and 3 stages, with 1, 2, 4 and 6 micro-batches, pipelined and
 *    sequential, equals one unpipelined model (vkt_trainer, 1 replica) on the same global
 *    batches: losses within 1e-5 relative over 50 steps, parameters at the end;
 *  - a value read by two later stages (a skip connection from stage 0 to stages 1 and 2)
 *    sends its gradients back from both;
 *  - each stage holds only its own parameters (bytes per stage). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "parallel/trainer.h"

enum { F = 12, H = 16, C = 5, BATCH = 12, STEPS = 50 };

typedef struct net {
    vkt_graph *g;
    vkt_tensor *x, *y, *loss, *w[3];
} net;

/* x [B,F] -> relu(linear) on stage s0 -> relu(linear) on s1 -> linear + CE on s2; with
 * skip, the second layer's input is added to its output (h1 read on s1 and s2). */
static net make_net(uint32_t s0, uint32_t s1, uint32_t s2, int skip)
{
    net n = {0};
    vkt_graph_options go = {.seed = 99};
    vkt_graph_create(&go, &n.g);
    vkt_shape xs = {2, {BATCH, F}}, w1 = {2, {F, H}}, b = {1, {H}}, w2 = {2, {H, H}},
              w3 = {2, {H, C}}, b3 = {1, {C}};
    vkt_init he = {.kind = VKT_INIT_HE}, small = {.kind = VKT_INIT_UNIFORM, .a = -0.1f, .b = 0.1f};
    n.x = vkt_input(n.g, "x", &xs);
    n.y = vkt_input_labels(n.g, "y", BATCH);
    vkt_graph_set_stage(n.g, s0);
    n.w[0] = vkt_param(n.g, "w1", &w1, &he);
    vkt_tensor *h1 = vkt_relu(n.g, vkt_linear(n.g, n.x, n.w[0], vkt_param(n.g, "b1", &b, &small)));
    vkt_graph_set_stage(n.g, s1);
    n.w[1] = vkt_param(n.g, "w2", &w2, &he);
    vkt_tensor *h2 = vkt_relu(n.g, vkt_linear(n.g, h1, n.w[1], vkt_param(n.g, "b2", &b, &small)));
    vkt_graph_set_stage(n.g, s2);
    if (skip)
        h2 = vkt_add(n.g, h2, h1);
    n.w[2] = vkt_param(n.g, "w3", &w3, &he);
    vkt_tensor *z = vkt_linear(n.g, h2, n.w[2], vkt_param(n.g, "b3", &b3, &small));
    n.loss = vkt_softmax_cross_entropy(n.g, z, n.y);
    TH_CHECK(vkt_graph_status(n.g) == VKT_OK, "graph: %s", vkt_graph_errmsg(n.g));
    return n;
}

static void test_placement_api(void)
{
    vkt_graph *g = NULL;
    vkt_graph_create(NULL, &g);
    TH_CHECK(vkt_graph_stage(g) == 0, "default stage %u", vkt_graph_stage(g));
    vkt_shape s = {2, {4, 3}};
    vkt_tensor *a = vkt_input(g, "a", &s);
    TH_CHECK(vkt_graph_set_stage(g, 2) == VKT_OK, "set_stage 2");
    vkt_tensor *b = vkt_relu(g, a);
    TH_CHECK(vkt_tensor_stage(a) == 0 && vkt_tensor_stage(b) == 2, "stages %u %u",
             vkt_tensor_stage(a), vkt_tensor_stage(b));
    vkt_status st = vkt_graph_set_stage(g, VKT_MAX_STAGES);
    TH_CHECK(st == VKT_ERROR_INVALID_ARGUMENT && strstr(vkt_last_error(), "out of range"),
             "stage %d: %s (%s)", VKT_MAX_STAGES, vkt_status_name(st), vkt_last_error());
    TH_CHECK(vkt_graph_stage(g) == 2 && vkt_graph_status(g) == VKT_OK,
             "a refused stage changes nothing");
    TH_CHECK(vkt_graph_set_stage(NULL, 0) == VKT_ERROR_INVALID_ARGUMENT, "NULL graph");
    TH_CHECK(vkt_tensor_set_stage(b, 1) == VKT_OK && vkt_tensor_stage(b) == 1, "move");
    TH_CHECK(vkt_tensor_set_stage(b, 99) == VKT_ERROR_INVALID_ARGUMENT &&
                 vkt_tensor_stage(b) == 1, "move out of range");
    TH_CHECK(vkt_tensor_set_stage(NULL, 0) == VKT_ERROR_INVALID_ARGUMENT, "NULL tensor");
    vkt_graph_destroy(g);
}

static vkt_status try_create(net *n, uint32_t stages, uint32_t m, const vkt_optimizer_options *oo,
                             vkt_pipeline **out)
{
    uint32_t dev[VKT_MAX_STAGES] = {0};
    vkt_pipeline_options po = {.batch = BATCH, .micro_batches = m, .stages = stages,
                               .devices = dev};
    if (oo)
        po.optimizer = *oo;
    return vkt_pipeline_create(th_instance, n->g, n->loss, &po, out);
}

static void expect_refused(net *n, uint32_t stages, uint32_t m, const vkt_optimizer_options *oo,
                           vkt_status want, const char *needle, const char *what)
{
    vkt_pipeline *p = NULL;
    vkt_status st = try_create(n, stages, m, oo, &p);
    TH_CHECK(st == want && !p && strstr(vkt_last_error(), needle), "%s: %s, '%s' (want %s "
             "with '%s')", what, vkt_status_name(st), vkt_last_error(), vkt_status_name(want),
             needle);
    vkt_pipeline_destroy(p);
}

static void test_placement_errors(void)
{
    net n = make_net(0, 2, 2, 0);
    expect_refused(&n, 2, 1, NULL, VKT_ERROR_INVALID_ARGUMENT, "is on stage 2; the pipeline "
                   "has 2 stage(s)", "op beyond the stages");
    vkt_graph_destroy(n.g);
    n = make_net(1, 0, 1, 0);
    expect_refused(&n, 2, 1, NULL, VKT_ERROR_INVALID_ARGUMENT, "must flow to higher stages",
                   "backward edge");
    vkt_graph_destroy(n.g);
    n = make_net(0, 1, 0, 0);
    expect_refused(&n, 2, 1, NULL, VKT_ERROR_INVALID_ARGUMENT, "must flow to higher stages",
                   "loss before its input");
    vkt_graph_destroy(n.g);
    n = make_net(0, 0, 0, 0);
    expect_refused(&n, 2, 1, NULL, VKT_ERROR_INVALID_ARGUMENT, "must be on the last stage",
                   "loss on stage 0 of 2");
    vkt_graph_destroy(n.g);
    n = make_net(0, 2, 2, 0);
    expect_refused(&n, 3, 1, NULL, VKT_ERROR_INVALID_ARGUMENT, "stage 1 of 3 holds no op",
                   "empty stage");
    expect_refused(&n, 3, 5, NULL, VKT_ERROR_SHAPE, "12 rows does not split into 5",
                   "uneven micro-batches");
    vkt_optimizer_options clip = {.kind = VKT_OPTIMIZER_SGD, .lr = 0.1f, .clip_norm = 1};
    expect_refused(&n, 3, 1, &clip, VKT_ERROR_INVALID_ARGUMENT, "clipping", "clip_norm");
    expect_refused(&n, VKT_MAX_STAGES + 1, 1, NULL, VKT_ERROR_INVALID_ARGUMENT, "stages; 1 to",
                   "too many stages");
    vkt_graph_destroy(n.g);

    /* a parameter read on two stages */
    vkt_graph *g = NULL;
    vkt_graph_create(NULL, &g);
    vkt_shape xs = {2, {BATCH, H}}, ws = {2, {H, H}};
    vkt_tensor *x = vkt_input(g, "x", &xs), *w = vkt_param(g, "shared", &ws, NULL);
    vkt_tensor *h = vkt_matmul(g, x, w);
    vkt_graph_set_stage(g, 1);
    vkt_tensor *loss = vkt_mean(g, vkt_matmul(g, h, w), -1);
    net s = {.g = g, .loss = loss};
    expect_refused(&s, 2, 1, NULL, VKT_ERROR_INVALID_ARGUMENT, "parameter 'shared' is read on "
                   "stages 0 and 1", "shared parameter");
    /* dropout (its forward would run twice) */
    vkt_graph_destroy(g);
    vkt_graph_create(NULL, &g);
    x = vkt_input(g, "x", &xs);
    h = vkt_dropout(g, vkt_matmul(g, x, vkt_param(g, "w", &ws, NULL)), 0.5f);
    vkt_graph_set_stage(g, 1);
    loss = vkt_mean(g, h, -1);
    s = (net){.g = g, .loss = loss};
    expect_refused(&s, 2, 1, NULL, VKT_ERROR_INVALID_ARGUMENT, "dropout is not supported",
                   "dropout");
    /* a crossing value that is not [batch, ...] rows */
    vkt_graph_destroy(g);
    vkt_graph_create(NULL, &g);
    x = vkt_input(g, "x", &xs);
    h = vkt_sum(g, vkt_matmul(g, x, vkt_param(g, "w", &ws, NULL)), 0);
    vkt_graph_set_stage(g, 1);
    loss = vkt_mean(g, h, -1);
    s = (net){.g = g, .loss = loss};
    expect_refused(&s, 2, 1, NULL, VKT_ERROR_INVALID_ARGUMENT, "not laid out by batch rows",
                   "crossing reduction");
    vkt_graph_destroy(g);
}

static void random_batch(float *x, int32_t *y)
{
    th_fill_uniform(x, (uint64_t)BATCH * F, -1, 1);
    for (uint32_t i = 0; i < BATCH; i++)
        y[i] = (int32_t)(th_rand_u64() % C);
}

/* STEPS steps of a pipeline (placement s0, s1, s2 on `stages` stages, m micro-batches)
 * against one unpipelined model on the same batches. */
static void test_equivalence(uint32_t s0, uint32_t s1, uint32_t s2, uint32_t stages, uint32_t m,
                             int skip, int sequential)
{
    vkt_optimizer_options oo = {.kind = VKT_OPTIMIZER_SGD, .lr = 0.1f, .momentum = 0.9f};
    net a = make_net(0, 0, 0, skip), b = make_net(s0, s1, s2, skip);
    uint32_t dev[VKT_MAX_STAGES] = {0};
    vkt_trainer_options to = {.batch = BATCH, .devices = dev, .device_count = 1, .optimizer = oo};
    vkt_pipeline_options po = {.batch = BATCH, .micro_batches = m, .stages = stages,
                               .devices = dev, .optimizer = oo, .sequential = sequential};
    vkt_trainer *t = NULL;
    vkt_pipeline *p = NULL;
    vkt_status st = vkt_trainer_create(th_instance, a.g, a.loss, &to, &t);
    TH_CHECK(st == VKT_OK, "trainer: %s", vkt_last_error());
    st = vkt_pipeline_create(th_instance, b.g, b.loss, &po, &p);
    TH_CHECK(st == VKT_OK, "pipeline (%u stages, m %u): %s", stages, m, vkt_last_error());
    float *x = th_alloc_floats(BATCH * F);
    int32_t *y = malloc(BATCH * sizeof *y);
    double worst = 0;
    for (int step = 0; t && p && step < STEPS; step++) {
        random_batch(x, y);
        vkt_feed fa[2] = {{a.x, x}, {a.y, y}}, fb[2] = {{b.y, y}, {b.x, x}};
        float la = 0, lb = 0;
        st = vkt_trainer_step(t, fa, 2, &la);
        TH_CHECK(st == VKT_OK, "trainer step: %s", vkt_trainer_errmsg(t));
        st = vkt_pipeline_step(p, fb, 2, &lb);
        TH_CHECK(st == VKT_OK, "pipeline step %d: %s", step, vkt_pipeline_errmsg(p));
        if (st != VKT_OK)
            break;
        double rel = fabs((double)la - lb) / fmax(fabs((double)la), 1e-30);
        if (rel > worst)
            worst = rel;
    }
    TH_CHECK(worst <= 1e-5, "%u stages (%u,%u,%u%s), m %u%s: worst loss difference %.3g "
             "relative", stages, s0, s1, s2, skip ? ", skip" : "", m,
             sequential ? ", sequential" : "", worst);
    for (int k = 0; t && p && k < 3; k++) {
        vkt_shape sh = vkt_tensor_shape(a.w[k]);
        uint64_t cnt = (uint64_t)sh.dims[0] * sh.dims[1];
        float *pa = th_alloc_floats(cnt), *pb = th_alloc_floats(cnt);
        TH_CHECK(vkt_trainer_read(t, a.w[k], pa, cnt) == VKT_OK, "read");
        TH_CHECK(vkt_pipeline_read(p, b.w[k], pb, cnt) == VKT_OK, "pipeline read: %s",
                 vkt_pipeline_errmsg(p));
        th_compare(vkt_tensor_name(a.w[k]), pb, pa, cnt, 1e-4f, 1e-5f);
        free(pa);
        free(pb);
    }
    if (p && stages > 1) { /* each stage holds its own parameters only */
        uint64_t total = 0;
        for (uint32_t k = 0; k < stages; k++) {
            vkt_pipeline_stage_stats ss;
            TH_CHECK(vkt_pipeline_stage_stats_get(p, k, &ss) == VKT_OK, "stats");
            TH_CHECK(ss.param_bytes > 0 && ss.param_bytes < vkt_trainer_param_count(t) * 4 &&
                         ss.grad_bytes == ss.param_bytes && ss.ops > 0 && ss.sent_bytes > 0,
                     "stage %u: %llu param bytes of %llu", k,
                     (unsigned long long)ss.param_bytes,
                     (unsigned long long)vkt_trainer_param_count(t) * 4);
            total += ss.param_bytes;
        }
        TH_CHECK(total >= vkt_trainer_param_count(t) * 4, "stages hold %llu bytes, the model "
                 "%llu", (unsigned long long)total,
                 (unsigned long long)vkt_trainer_param_count(t) * 4);
    }
    printf("  %u stages (%u,%u,%u%s), m %u%s: worst loss difference %.3g relative over %d "
           "steps\n", stages, s0, s1, s2, skip ? ", skip" : "", m,
           sequential ? ", sequential" : "", worst, STEPS);
    free(x);
    free(y);
    vkt_pipeline_destroy(p);
    vkt_trainer_destroy(t);
    vkt_graph_destroy(a.g);
    vkt_graph_destroy(b.g);
}

static void test_step_errors(void)
{
    net n = make_net(0, 1, 1, 0);
    vkt_pipeline *p = NULL;
    TH_CHECK(try_create(&n, 2, 2, NULL, &p) == VKT_OK, "create: %s", vkt_last_error());
    float x[BATCH * F] = {0};
    int32_t y[BATCH] = {0};
    vkt_feed only_x[1] = {{n.x, x}};
    vkt_status st = vkt_pipeline_step(p, only_x, 1, NULL);
    TH_CHECK(st == VKT_ERROR_INVALID_ARGUMENT && strstr(vkt_pipeline_errmsg(p), "'y'"),
             "missing labels: %s", vkt_pipeline_errmsg(p));
    y[3] = C + 7; /* a label out of range fails inside the last stage's thread */
    vkt_feed fb[2] = {{n.x, x}, {n.y, y}};
    st = vkt_pipeline_step(p, fb, 2, NULL);
    TH_CHECK(st != VKT_OK && strstr(vkt_pipeline_errmsg(p), "stage 1"),
             "bad label: %s (%s)", vkt_status_name(st), vkt_pipeline_errmsg(p));
    y[3] = 0;
    float loss = -1;
    st = vkt_pipeline_step(p, fb, 2, &loss);
    TH_CHECK(st == VKT_OK && loss > 0, "a good step after a failed one: %s",
             vkt_pipeline_errmsg(p));
    TH_CHECK(vkt_pipeline_read(p, n.x, x, 1) == VKT_ERROR_INVALID_ARGUMENT, "read an input");
    vkt_pipeline_destroy(p);
    vkt_graph_destroy(n.g);
}

int main(void)
{
    th_init("test_pipeline");
    th_seed(13);
    test_placement_api();
    test_placement_errors();
    test_step_errors();
    test_equivalence(0, 0, 0, 1, 1, 0, 0);
    test_equivalence(0, 0, 0, 1, 4, 0, 0);
    test_equivalence(0, 1, 1, 2, 1, 0, 0);
    test_equivalence(0, 1, 1, 2, 4, 0, 0);
    test_equivalence(0, 0, 1, 2, 6, 0, 0);
    test_equivalence(0, 1, 2, 3, 2, 0, 0);
    test_equivalence(0, 1, 2, 3, 4, 0, 1);
    test_equivalence(0, 1, 2, 3, 3, 1, 0);
    return th_finish();
}
