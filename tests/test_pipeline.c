/* Model parallelism (vkt_pipeline) on several contexts of one device:
 *  - placement: vkt_graph_set_stage / vkt_tensor_set_stage and their errors; every
 *    placement rule of graph/stage.h refused with a message naming the tensor;
 *  - a 3-layer MLP on 2 and 3 stages, with 1, 2, 4 and 6 micro-batches, pipelined and
 *    sequential, equals one unpipelined model (vkt_trainer, 1 replica) on the same global
 *    batches: losses within 1e-5 relative over 50 steps, parameters at the end;
 *  - a value read by two later stages (a skip connection from stage 0 to stages 1 and 2)
 *    sends its gradients back from both;
 *  - each stage holds only its own parameters (bytes per stage);
 *  - dropout on 2 stages (m = 1, 4) and attention dropout (m = 4) equal one unsplit
 *    model, batch norm on 2 stages equals 1 stage with the same 4 micro-batches (losses,
 *    parameters, running averages after 10 steps), whether the sending stage keeps its
 *    activations (recompute never) or runs its forward twice (recompute always);
 *  - keeping equals recomputing on those nets, and on the MLP over 3 stages; the stats
 *    say so: forwards per step m against 2m, kept min(P - s, m) against 0, activation
 *    bytes K times one arena, and more device memory (vkt_memory_stats);
 *  - under a device memory limit that leaves no room for a second arena, recompute auto
 *    recomputes (kept 0) and never fails with VKT_ERROR_OUT_OF_MEMORY naming the option. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "parallel/pipe.h" /* white box: pipe_context */
#include "parallel/trainer.h"
#include "platform/platform.h" /* plat_setenv */

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
    expect_refused(&n, VKT_MAX_STAGES + 1, 1, NULL, VKT_ERROR_INVALID_ARGUMENT, "stages; 1 to",
                   "too many stages");
    vkt_graph_destroy(n.g);
    /* clipping runs over every stage (test_equivalence); a bad norm is still refused */
    n = make_net(0, 1, 2, 0);
    vkt_optimizer_options clip = {.kind = VKT_OPTIMIZER_SGD, .lr = 0.1f, .clip_norm = -1};
    expect_refused(&n, 3, 1, &clip, VKT_ERROR_INVALID_ARGUMENT, "clip_norm", "clip_norm -1");
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
 * against one unpipelined model on the same batches. With clip > 0 both clip by the
 * global norm (the pipeline over every stage's squares, the model in its optimizer), and
 * a third, unclipped model shows that the clipping changed the training. */
static void test_equivalence(uint32_t s0, uint32_t s1, uint32_t s2, uint32_t stages, uint32_t m,
                             int skip, int sequential, float clip, vkt_recompute rc)
{
    vkt_optimizer_options oo = {.kind = VKT_OPTIMIZER_SGD, .lr = 0.1f, .momentum = 0.9f,
                                .clip_norm = clip};
    net a = make_net(0, 0, 0, skip), b = make_net(s0, s1, s2, skip);
    uint32_t dev[VKT_MAX_STAGES] = {0};
    vkt_trainer_options to = {.batch = BATCH, .devices = dev, .device_count = 1, .optimizer = oo};
    vkt_pipeline_options po = {.batch = BATCH, .micro_batches = m, .stages = stages,
                               .devices = dev, .optimizer = oo, .sequential = sequential,
                               .recompute = rc};
    vkt_trainer *t = NULL, *u = NULL;
    vkt_pipeline *p = NULL;
    vkt_status st = vkt_trainer_create(th_instance, a.g, a.loss, &to, &t);
    TH_CHECK(st == VKT_OK, "trainer: %s", vkt_last_error());
    vkt_trainer_options uo = to;
    uo.optimizer.clip_norm = 0;
    if (clip > 0)
        TH_OK(NULL, vkt_trainer_create(th_instance, a.g, a.loss, &uo, &u));
    double unclipped = 0; /* the largest relative loss difference to the unclipped model */
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
        float lu = 0;
        if (u && vkt_trainer_step(u, fa, 2, &lu) == VKT_OK &&
            fabs((double)la - lu) / fmax(fabs((double)lu), 1e-30) > unclipped)
            unclipped = fabs((double)la - lu) / fmax(fabs((double)lu), 1e-30);
        st = vkt_pipeline_step(p, fb, 2, &lb);
        TH_CHECK(st == VKT_OK, "pipeline step %d: %s", step, vkt_pipeline_errmsg(p));
        if (st != VKT_OK)
            break;
        double rel = fabs((double)la - lb) / fmax(fabs((double)la), 1e-30);
        if (rel > worst)
            worst = rel;
    }
    TH_CHECK(worst <= 1e-5, "%u stages (%u,%u,%u%s), m %u%s, clip %g: worst loss difference "
             "%.3g relative", stages, s0, s1, s2, skip ? ", skip" : "", m,
             sequential ? ", sequential" : "", clip, worst);
    TH_CHECK(clip == 0 || unclipped > 1e-3, "clip %g: the clipped losses stay within %.3g of "
             "the unclipped ones: the clipping did nothing", clip, unclipped);
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
    printf("  %u stages (%u,%u,%u%s), m %u%s, clip %g%s: worst loss difference %.3g "
           "relative over %d steps (%.3g from the unclipped model)\n", stages, s0, s1, s2,
           skip ? ", skip" : "", m, sequential ? ", sequential" : "", clip,
           rc == VKT_RECOMPUTE_ALWAYS ? ", recompute always"
                                      : rc == VKT_RECOMPUTE_NEVER ? ", recompute never" : "",
           worst, STEPS, unclipped);
    free(x);
    free(y);
    vkt_pipeline_destroy(p);
    vkt_trainer_destroy(t);
    vkt_trainer_destroy(u);
    vkt_graph_destroy(a.g);
    vkt_graph_destroy(b.g);
}

/* ---- dropout and batch norm across stages ----
 * A sending stage runs a training forward for micro-batch k and recomputes it with the
 * backward: both must draw the masks one model draws for those global rows at that step,
 * and batch norm's running averages must move once per micro-batch. */

enum { XSTEPS = 10, XMAX = 12 };

typedef struct xnet {
    vkt_graph *g;
    vkt_tensor *x, *y, *loss;
    vkt_tensor *t[XMAX]; /* parameters and states compared at the end */
    int state[XMAX];     /* t[k] is a state (a running average) */
    uint32_t n;
} xnet;

/* One of the two things compared: a trainer (one unsplit model) or a pipeline. */
typedef struct runner {
    vkt_trainer *t;
    vkt_pipeline *p;
} runner;

static vkt_status runner_step(runner *r, const vkt_feed *f, float *loss)
{
    return r->t ? vkt_trainer_step(r->t, f, 2, loss) : vkt_pipeline_step(r->p, f, 2, loss);
}

static vkt_status runner_read(runner *r, const vkt_tensor *t, float *out, uint64_t n)
{
    return r->t ? vkt_trainer_read(r->t, t, out, n) : vkt_pipeline_read(r->p, t, out, n);
}

static const char *runner_errmsg(const runner *r)
{
    return r->t ? vkt_trainer_errmsg(r->t) : vkt_pipeline_errmsg(r->p);
}

static vkt_tensor *xparam(xnet *n, const char *name, uint32_t d0, uint32_t d1, int state,
                          float value)
{
    vkt_shape s = d1 ? (vkt_shape){2, {d0, d1}} : (vkt_shape){1, {d0}};
    vkt_init he = {.kind = VKT_INIT_HE}, c = {.kind = VKT_INIT_CONSTANT, .a = value};
    vkt_tensor *t = state ? vkt_state(n->g, name, &s, &c)
                          : vkt_param(n->g, name, &s, d1 ? &he : &c);
    n->state[n->n] = state;
    n->t[n->n++] = t;
    return t;
}

/* x [B,F] -> linear, relu, dropout 0.5 on stage 0 -> linear, dropout 0.3 on stage s1 ->
 * linear + CE on s1 (dropout on the sending stage and on the last one). */
static xnet make_dropout_net(uint32_t s1)
{
    xnet n = {0};
    vkt_graph_options go = {.seed = 41};
    vkt_graph_create(&go, &n.g);
    vkt_shape xs = {2, {BATCH, F}};
    n.x = vkt_input(n.g, "x", &xs);
    n.y = vkt_input_labels(n.g, "y", BATCH);
    vkt_tensor *h = vkt_relu(n.g, vkt_linear(n.g, n.x, xparam(&n, "w1", F, H, 0, 0),
                                             xparam(&n, "b1", H, 0, 0, 0.05f)));
    h = vkt_dropout(n.g, h, 0.5f);
    vkt_graph_set_stage(n.g, s1);
    h = vkt_dropout(n.g, vkt_linear(n.g, h, xparam(&n, "w2", H, H, 0, 0),
                                    xparam(&n, "b2", H, 0, 0, 0.05f)), 0.3f);
    vkt_tensor *z = vkt_linear(n.g, vkt_relu(n.g, h), xparam(&n, "w3", H, C, 0, 0),
                               xparam(&n, "b3", C, 0, 0, 0));
    n.loss = vkt_softmax_cross_entropy(n.g, z, n.y);
    TH_CHECK(vkt_graph_status(n.g) == VKT_OK, "graph: %s", vkt_graph_errmsg(n.g));
    return n;
}

/* x [B,TT,F] -> linear to qkv, attention with dropout 0.3 on stage 0 -> the rows
 * flattened, linear + CE on stage s1. */
enum { TT = 4, AW = 8 };
static xnet make_attention_net(uint32_t s1)
{
    xnet n = {0};
    vkt_graph_options go = {.seed = 47};
    vkt_graph_create(&go, &n.g);
    vkt_shape xs = {3, {BATCH, TT, F}}, flat = {2, {0, TT * AW}}; /* 0: the batch */
    n.x = vkt_input(n.g, "x", &xs);
    n.y = vkt_input_labels(n.g, "y", BATCH);
    vkt_tensor *h = vkt_linear(n.g, n.x, xparam(&n, "wqkv", F, 3 * AW, 0, 0),
                               xparam(&n, "bqkv", 3 * AW, 0, 0, 0.05f));
    h = vkt_causal_attention(n.g, h, 2, 0.3f);
    vkt_graph_set_stage(n.g, s1);
    vkt_tensor *z = vkt_linear(n.g, vkt_reshape(n.g, h, &flat),
                               xparam(&n, "wo", TT * AW, C, 0, 0), xparam(&n, "bo", C, 0, 0, 0));
    n.loss = vkt_softmax_cross_entropy(n.g, z, n.y);
    TH_CHECK(vkt_graph_status(n.g) == VKT_OK, "graph: %s", vkt_graph_errmsg(n.g));
    return n;
}

/* x [B,F] -> linear, batch norm, relu on stage 0 -> linear, batch norm, relu, linear + CE
 * on stage s1. The running averages are states, compared like the parameters. */
static xnet make_bn_net(uint32_t s1)
{
    xnet n = {0};
    vkt_graph_options go = {.seed = 43};
    vkt_graph_create(&go, &n.g);
    vkt_shape xs = {2, {BATCH, F}};
    n.x = vkt_input(n.g, "x", &xs);
    n.y = vkt_input_labels(n.g, "y", BATCH);
    vkt_tensor *h = vkt_matmul(n.g, n.x, xparam(&n, "w1", F, H, 0, 0));
    h = vkt_relu(n.g, vkt_batch_norm(n.g, h, xparam(&n, "g1", H, 0, 0, 1),
                                     xparam(&n, "be1", H, 0, 0, 0), xparam(&n, "rm1", H, 0, 1, 0),
                                     xparam(&n, "rv1", H, 0, 1, 1), 0, 0.2f));
    vkt_graph_set_stage(n.g, s1);
    h = vkt_matmul(n.g, h, xparam(&n, "w2", H, H, 0, 0));
    h = vkt_relu(n.g, vkt_batch_norm(n.g, h, xparam(&n, "g2", H, 0, 0, 1),
                                     xparam(&n, "be2", H, 0, 0, 0), xparam(&n, "rm2", H, 0, 1, 0),
                                     xparam(&n, "rv2", H, 0, 1, 1), 0, 0.2f));
    vkt_tensor *z = vkt_linear(n.g, h, xparam(&n, "w3", H, C, 0, 0),
                               xparam(&n, "b3", C, 0, 0, 0));
    n.loss = vkt_softmax_cross_entropy(n.g, z, n.y);
    TH_CHECK(vkt_graph_status(n.g) == VKT_OK, "graph: %s", vkt_graph_errmsg(n.g));
    return n;
}

static vkt_status make_runner(xnet *n, uint32_t stages, uint32_t m, vkt_recompute rc,
                              runner *r)
{
    vkt_optimizer_options oo = {.kind = VKT_OPTIMIZER_SGD, .lr = 0.1f, .momentum = 0.9f};
    uint32_t dev[VKT_MAX_STAGES] = {0};
    memset(r, 0, sizeof *r);
    if (!stages) { /* one unsplit model */
        vkt_trainer_options to = {.batch = BATCH, .devices = dev, .device_count = 1,
                                  .optimizer = oo};
        return vkt_trainer_create(th_instance, n->g, n->loss, &to, &r->t);
    }
    vkt_pipeline_options po = {.batch = BATCH, .micro_batches = m, .stages = stages,
                               .devices = dev, .optimizer = oo, .recompute = rc};
    return vkt_pipeline_create(th_instance, n->g, n->loss, &po, &r->p);
}

static void free_runner(runner *r)
{
    vkt_pipeline_destroy(r->p);
    vkt_trainer_destroy(r->t);
}

/* XSTEPS steps of a and b on the same batches: losses within 1e-5 relative, then every
 * compared tensor; states must have left their constant start (0 or 1), so the check
 * compares something. */
static void compare_runs(const char *what, xnet *na, runner *a, xnet *nb, runner *b)
{
    vkt_shape xs = vkt_tensor_shape(na->x);
    uint32_t tt = xs.ndim == 3 ? xs.dims[1] : 1; /* attention's sequences: TT rows each */
    float *x = th_alloc_floats(BATCH * F * tt);
    int32_t *y = malloc(BATCH * sizeof *y);
    double worst = 0;
    vkt_status st = VKT_OK;
    for (int step = 0; step < XSTEPS && st == VKT_OK; step++) {
        random_batch(x, y);
        th_fill_uniform(x, (uint64_t)BATCH * F * tt, -1, 1);
        vkt_feed fa[2] = {{na->x, x}, {na->y, y}}, fb[2] = {{nb->y, y}, {nb->x, x}};
        float la = 0, lb = 0;
        st = runner_step(a, fa, &la);
        TH_CHECK(st == VKT_OK, "%s: step %d: %s", what, step, runner_errmsg(a));
        if (st == VKT_OK)
            st = runner_step(b, fb, &lb);
        TH_CHECK(st == VKT_OK, "%s: step %d: %s", what, step, runner_errmsg(b));
        double rel = fabs((double)la - lb) / fmax(fabs((double)la), 1e-30);
        worst = fmax(worst, rel);
    }
    TH_CHECK(st == VKT_OK && worst <= 1e-5, "%s: worst loss difference %.3g relative", what,
             worst);
    for (uint32_t k = 0; k < na->n && st == VKT_OK; k++) {
        vkt_shape sh = vkt_tensor_shape(na->t[k]);
        uint64_t cnt = sh.ndim == 2 ? (uint64_t)sh.dims[0] * sh.dims[1] : sh.dims[0];
        float *pa = th_alloc_floats(cnt), *pb = th_alloc_floats(cnt);
        TH_CHECK(runner_read(a, na->t[k], pa, cnt) == VKT_OK, "read: %s", runner_errmsg(a));
        TH_CHECK(runner_read(b, nb->t[k], pb, cnt) == VKT_OK, "read: %s", runner_errmsg(b));
        char name[96];
        snprintf(name, sizeof name, "%s: %s", what, vkt_tensor_name(na->t[k]));
        th_compare(name, pb, pa, cnt, 1e-4f, 1e-5f);
        if (na->state[k]) {
            int moved = 0;
            for (uint64_t i = 0; i < cnt; i++)
                moved |= pa[i] != 0.0f && pa[i] != 1.0f;
            TH_CHECK(moved, "%s: %s moved during training", what, vkt_tensor_name(na->t[k]));
        }
        free(pa);
        free(pb);
    }
    printf("  %s: worst loss difference %.3g relative over %d steps\n", what, worst, XSTEPS);
    free(x);
    free(y);
}

static const char *rc_name(vkt_recompute rc)
{
    return rc == VKT_RECOMPUTE_ALWAYS ? "recompute always" : "recompute never";
}

/* Dropout on both stages of a 2-stage pipeline (m = 1 and 4) equals one unsplit model:
 * the masks of micro-batch k are those of its global rows, in every forward of it.
 * attention: attention dropout on the sending stage instead. */
static void test_dropout_stages(uint32_t m, int attention, vkt_recompute rc)
{
    xnet a = attention ? make_attention_net(0) : make_dropout_net(0);
    xnet b = attention ? make_attention_net(1) : make_dropout_net(1);
    runner ra, rb;
    TH_CHECK(make_runner(&a, 0, 0, rc, &ra) == VKT_OK, "trainer: %s", vkt_last_error());
    TH_CHECK(make_runner(&b, 2, m, rc, &rb) == VKT_OK, "pipeline with dropout, m %u: %s", m,
             vkt_last_error());
    char what[96];
    snprintf(what, sizeof what, "%sdropout, 2 stages, m %u, %s vs one model",
             attention ? "attention " : "", m, rc_name(rc));
    if (ra.t && rb.p)
        compare_runs(what, &a, &ra, &b, &rb);
    free_runner(&ra);
    free_runner(&rb);
    vkt_graph_destroy(a.g);
    vkt_graph_destroy(b.g);
}

/* Batch norm, 2 stages and 4 micro-batches, equals 1 stage with the same micro-batches:
 * statistics per micro-batch, and running averages moved once per micro-batch (by the
 * kept forward, or by the recomputation in the backward and not by the forward before). */
static void test_batchnorm_stages(vkt_recompute rc)
{
    xnet a = make_bn_net(0), b = make_bn_net(1);
    runner ra, rb;
    TH_CHECK(make_runner(&a, 1, 4, rc, &ra) == VKT_OK, "1 stage: %s", vkt_last_error());
    TH_CHECK(make_runner(&b, 2, 4, rc, &rb) == VKT_OK, "2 stages with batch norm: %s",
             vkt_last_error());
    char what[96];
    snprintf(what, sizeof what, "batch norm, 2 stages vs 1, m 4, %s", rc_name(rc));
    if (ra.p && rb.p)
        compare_runs(what, &a, &ra, &b, &rb);
    free_runner(&ra);
    free_runner(&rb);
    vkt_graph_destroy(a.g);
    vkt_graph_destroy(b.g);
}

/* Stage s of P with m micro-batches keeping (kept K = min(P - s, m), m forwards a step)
 * or recomputing (kept 0, 2m forwards; the last stage keeps its one, or two on the device
 * row (VKT_SHARE_DEVICE=1: no byte sent through the host) where it keeps and m >= 2). */
static void check_keep_stats(const char *what, vkt_pipeline *p, uint32_t P, uint32_t m,
                             int keep, vkt_pipeline_stage_stats *first)
{
    for (uint32_t k = 0; k < P; k++) {
        vkt_pipeline_stage_stats ss;
        TH_OK(NULL, vkt_pipeline_stage_stats_get(p, k, &ss));
        uint32_t K = P - k < m ? P - k : m, kept = keep || k == P - 1 ? K : 0;
        if (k == P - 1 && keep && m >= 2 && ss.sent_bytes && !ss.sent_host_bytes)
            kept = 2;
        uint64_t fw = keep || k == P - 1 ? m : 2ull * m;
        TH_CHECK(ss.kept == kept && ss.forwards == fw, "%s: stage %u keeps %u micro-batches "
                 "and ran %llu forwards a step (expected %u, %llu)", what, k, ss.kept,
                 (unsigned long long)ss.forwards, kept, (unsigned long long)fw);
        if (k == 0)
            *first = ss;
    }
}

/* The same pipeline keeping and recomputing, on the same batches: equal losses and
 * parameters (compare_runs' tolerances), the stats above, and stage 0's memory: K arenas
 * against one, and more device memory held. */
static void test_keep_vs_recompute(xnet (*make)(uint32_t), const char *name, uint32_t m)
{
    xnet a = make(1), b = make(1);
    runner rk, rr;
    TH_CHECK(make_runner(&a, 2, m, VKT_RECOMPUTE_NEVER, &rk) == VKT_OK, "%s keeping: %s", name,
             vkt_last_error());
    TH_CHECK(make_runner(&b, 2, m, VKT_RECOMPUTE_ALWAYS, &rr) == VKT_OK, "%s recomputing: %s",
             name, vkt_last_error());
    char what[96];
    snprintf(what, sizeof what, "%s, 2 stages, m %u: keep vs recompute", name, m);
    if (rk.p && rr.p) {
        compare_runs(what, &b, &rr, &a, &rk);
        vkt_pipeline_stage_stats k0, r0;
        check_keep_stats(what, rk.p, 2, m, 1, &k0);
        check_keep_stats(what, rr.p, 2, m, 0, &r0);
        uint32_t K = m < 2 ? m : 2;
        vkt_memory_stats mk, mr; /* suballocations: blocks of 64 MiB hold both */
        TH_OK(NULL, vkt_context_memory_stats(pipe_context(rk.p, 0, 0), &mk));
        TH_OK(NULL, vkt_context_memory_stats(pipe_context(rr.p, 0, 0), &mr));
        TH_CHECK(k0.activation_bytes == K * r0.activation_bytes &&
                     mk.bytes_in_use >= mr.bytes_in_use + (K - 1) * r0.activation_bytes,
                 "%s: stage 0 keeping holds %llu activation bytes (%u arenas) and %llu bytes "
                 "in use; recomputing %llu and %llu", what,
                 (unsigned long long)k0.activation_bytes, K,
                 (unsigned long long)mk.bytes_in_use, (unsigned long long)r0.activation_bytes,
                 (unsigned long long)mr.bytes_in_use);
    }
    free_runner(&rk);
    free_runner(&rr);
    vkt_graph_destroy(a.g);
    vkt_graph_destroy(b.g);
}

/* A stage 0 whose arena A (128 MiB: x [64, 8] -> 262144 wide relu -> stage 1, 2
 * micro-batches) is larger than a memory block's slack, under VKT_DEVICE_MEMORY_LIMIT set
 * between the device bytes D recomputing holds and what a second arena needs at least
 * (the bytes in use U + A): auto recomputes, never fails naming the option. */
static void test_keep_memory_limit(void)
{
    enum { XB = 64, XF = 8, XW = 262144 };
    vkt_graph_options go = {.seed = 5};
    vkt_graph *g = NULL;
    vkt_graph_create(&go, &g);
    vkt_shape xs = {2, {XB, XF}}, ws = {2, {XF, XW}}, w2s = {2, {XW, C}};
    vkt_init he = {.kind = VKT_INIT_HE};
    vkt_tensor *x = vkt_input(g, "x", &xs), *y = vkt_input_labels(g, "y", XB);
    vkt_tensor *h = vkt_relu(g, vkt_matmul(g, x, vkt_param(g, "w1", &ws, &he)));
    vkt_graph_set_stage(g, 1);
    vkt_tensor *loss = vkt_softmax_cross_entropy(g, vkt_matmul(g, h, vkt_param(g, "w2", &w2s,
                                                                               &he)), y);
    uint32_t dev[2] = {0, 0};
    vkt_pipeline_options po = {.batch = XB, .micro_batches = 2, .stages = 2, .devices = dev,
                               .recompute = VKT_RECOMPUTE_ALWAYS};
    vkt_pipeline *p = NULL;
    vkt_pipeline_stage_stats ss = {0};
    vkt_memory_stats ms = {0};
    TH_CHECK(vkt_pipeline_create(th_instance, g, loss, &po, &p) == VKT_OK, "wide: %s",
             vkt_last_error());
    if (p) {
        TH_OK(NULL, vkt_pipeline_stage_stats_get(p, 0, &ss));
        TH_OK(NULL, vkt_context_memory_stats(pipe_context(p, 0, 0), &ms));
    }
    vkt_pipeline_destroy(p);
    uint64_t need = ms.bytes_in_use + ss.activation_bytes; /* at least, for a second arena */
    TH_CHECK(ss.device_bytes < need, "wide: stage 0 holds %llu device bytes, %llu in use, an "
             "arena of %llu: no limit lies between", (unsigned long long)ss.device_bytes,
             (unsigned long long)ms.bytes_in_use, (unsigned long long)ss.activation_bytes);
    const char *was = plat_getenv("VKT_DEVICE_MEMORY_LIMIT");
    char keep_env[64] = "", limit[32];
    if (was)
        snprintf(keep_env, sizeof keep_env, "%s", was);
    snprintf(limit, sizeof limit, "%llu", (unsigned long long)(ss.device_bytes +
                                                                (need - ss.device_bytes) / 2));
    plat_setenv("VKT_DEVICE_MEMORY_LIMIT", limit);
    po.recompute = VKT_RECOMPUTE_AUTO;
    p = NULL;
    vkt_status st = vkt_pipeline_create(th_instance, g, loss, &po, &p);
    TH_CHECK(st == VKT_OK, "auto under a limit of %s bytes: %s", limit, vkt_last_error());
    vkt_pipeline_stage_stats sa = {0};
    if (p)
        TH_OK(NULL, vkt_pipeline_stage_stats_get(p, 0, &sa));
    TH_CHECK(p && sa.kept == 0 && sa.activation_bytes == ss.activation_bytes,
             "auto under a limit of %s bytes (stage 0: %llu device bytes, an arena of %llu) "
             "keeps %u micro-batches: it must recompute", limit,
             (unsigned long long)ss.device_bytes, (unsigned long long)ss.activation_bytes,
             sa.kept);
    vkt_pipeline_destroy(p);
    po.recompute = VKT_RECOMPUTE_NEVER;
    p = NULL;
    st = vkt_pipeline_create(th_instance, g, loss, &po, &p);
    TH_CHECK(st == VKT_ERROR_OUT_OF_MEMORY && !p && strstr(vkt_last_error(), "recompute never"),
             "never under a limit of %s bytes: %s, '%s'", limit, vkt_status_name(st),
             vkt_last_error());
    printf("  a limit of %s bytes: auto recomputes; never: %s\n", limit, vkt_last_error());
    vkt_pipeline_destroy(p);
    plat_setenv("VKT_DEVICE_MEMORY_LIMIT", was ? keep_env : NULL);
    po.recompute = (vkt_recompute)7;
    TH_CHECK(vkt_pipeline_create(th_instance, g, loss, &po, &p) == VKT_ERROR_INVALID_ARGUMENT &&
                 strstr(vkt_last_error(), "recompute"),
             "recompute 7: %s", vkt_last_error());
    vkt_graph_destroy(g);
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
    const vkt_recompute A = VKT_RECOMPUTE_AUTO, ALW = VKT_RECOMPUTE_ALWAYS,
                        NEV = VKT_RECOMPUTE_NEVER;
    test_equivalence(0, 0, 0, 1, 1, 0, 0, 0, A);
    test_equivalence(0, 0, 0, 1, 4, 0, 0, 0, A);
    test_equivalence(0, 1, 1, 2, 1, 0, 0, 0, A);
    test_equivalence(0, 1, 1, 2, 4, 0, 0, 0, A);
    test_equivalence(0, 0, 1, 2, 6, 0, 0, 0, A);
    test_equivalence(0, 1, 2, 3, 2, 0, 0, 0, A);
    test_equivalence(0, 1, 2, 3, 4, 0, 1, 0, A);
    test_equivalence(0, 1, 2, 3, 3, 1, 0, 0, A);
    test_equivalence(0, 1, 2, 3, 4, 0, 0, 0, NEV);
    test_equivalence(0, 1, 2, 3, 4, 0, 0, 0, ALW);
    test_equivalence(0, 1, 2, 3, 3, 1, 0, 0, ALW);
    test_equivalence(0, 0, 0, 1, 4, 0, 0, 0.05f, A);
    test_equivalence(0, 1, 2, 3, 2, 0, 0, 0.05f, A);
    test_equivalence(0, 1, 2, 3, 4, 0, 1, 0.05f, A);
    test_equivalence(0, 1, 2, 3, 4, 0, 1, 0.05f, ALW);
    for (int r = 0; r < 2; r++) {
        vkt_recompute rc = r ? ALW : NEV;
        test_dropout_stages(1, 0, rc);
        test_dropout_stages(4, 0, rc);
        test_dropout_stages(4, 1, rc);
        test_batchnorm_stages(rc);
    }
    test_keep_vs_recompute(make_dropout_net, "dropout", 4);
    test_keep_vs_recompute(make_attention_net, "attention dropout", 4);
    test_keep_vs_recompute(make_bn_net, "batch norm", 4);
    test_keep_vs_recompute(make_dropout_net, "dropout", 1);
    test_keep_memory_limit();
    return th_finish();
}
