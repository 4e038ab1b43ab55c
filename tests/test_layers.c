/* Layer ops through graphs (tests/op_case.h): conv2d, pooling, layer and batch
 * normalization, embedding, causal attention, N-D linear and cross-entropy, and a small
 * CNN and transformer end to end: each checked against the double reference by finite
 * differences, on the device fused and unfused, and in VKT_CHECK mode. Then evaluation
 * mode (batch norm's running averages), token id checks and the errors of bad shapes
 * and device limits. The attention cases and the transformer run again on every other
 * attention variant (attention_flash among them), and a model's arena for attention at
 * context 2048 shows which variants keep a [T,T] array. The kernels' own tests are
 * test_conv.c, test_norm.c and test_attention.c. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/gpu.h"
#include "graph/graph.h"
#include "harness.h"
#include "kernels/attention.h"
#include "kernels/conv.h"
#include "platform/platform.h"
#include "op_case.h"

static vkt_context *g_ctx;

static void conv_cases(void)
{
    op_case c = begin("conv2d [2,3,7,6] * [4,3,3,2] + b, pad 1");
    vkt_conv2d_options pad1 = {.pad_h = 1, .pad_w = 1};
    finish(&c, vkt_conv2d(c.g, P4(&c, 2, 3, 7, 6), P4(&c, 4, 3, 3, 2), P(&c, 1, 4, 0, 0), &pad1));
    run_case(&c);
    c = begin("conv2d stride 2, dilation 2, groups 2, no bias");
    vkt_conv2d_options o = {.stride_h = 2, .stride_w = 2, .pad_h = 2, .pad_w = 1,
                            .dilation_h = 2, .dilation_w = 2, .groups = 2};
    finish(&c, vkt_conv2d(c.g, P4(&c, 3, 4, 9, 8), P4(&c, 6, 2, 3, 3), NULL, &o));
    run_case(&c);
    c = begin("conv2d depthwise [1,5,6,6], 3x3");
    vkt_conv2d_options dw = {.pad_h = 1, .pad_w = 1, .groups = 5};
    finish(&c, vkt_conv2d(c.g, P4(&c, 1, 5, 6, 6), P4(&c, 5, 1, 3, 3), P(&c, 1, 5, 0, 0), &dw));
    run_case(&c);
    c = begin("conv2d input used twice (gradient accumulates)");
    vkt_tensor *x = P4(&c, 2, 2, 5, 5);
    vkt_tensor *y = vkt_conv2d(c.g, x, P4(&c, 2, 2, 3, 3), NULL, &pad1);
    finish(&c, vkt_add(c.g, y, vkt_tanh(c.g, x)));
    run_case(&c);
}

static void pool_cases(void)
{
    for (int max = 0; max < 2; max++) {
        char name[64];
        snprintf(name, sizeof name, "%s_pool2d [2,3,7,7] k3 s2 p1", max ? "max" : "avg");
        op_case c = begin(name);
        vkt_tensor *x = P4(&c, 2, 3, 7, 7);
        finish(&c, max ? vkt_max_pool2d(c.g, x, 3, 2, 1) : vkt_avg_pool2d(c.g, x, 3, 2, 1));
        run_case(&c);
        snprintf(name, sizeof name, "%s_pool2d [1,2,6,5] k2 s2", max ? "max" : "avg");
        c = begin(name);
        x = P4(&c, 1, 2, 6, 5);
        finish(&c, max ? vkt_max_pool2d(c.g, x, 2, 2, 0) : vkt_avg_pool2d(c.g, x, 2, 2, 0));
        run_case(&c);
    }
    op_case c = begin("global_avg_pool [3,4,5,3]");
    finish(&c, vkt_global_avg_pool(c.g, P4(&c, 3, 4, 5, 3)));
    run_case(&c);
}

static vkt_tensor *state(op_case *c, const char *name, uint32_t n, float value)
{
    vkt_shape s = {1, {n}};
    vkt_init init = {VKT_INIT_CONSTANT, value, 0, 0};
    return vkt_state(c->g, name, &s, &init);
}

static void norm_cases(void)
{
    op_case c = begin("layer_norm [2,5,7]");
    finish(&c, vkt_layer_norm(c.g, P(&c, 3, 2, 5, 7), P(&c, 1, 7, 0, 0), P(&c, 1, 7, 0, 0), 0));
    run_case(&c);
    c = begin("layer_norm [3,2] (two features)");
    finish(&c, vkt_layer_norm(c.g, P(&c, 2, 3, 2, 0), P(&c, 1, 2, 0, 0), P(&c, 1, 2, 0, 0), 1e-3f));
    run_case(&c);
    c = begin("rms_norm [2,5,7]");
    finish(&c, vkt_rms_norm(c.g, P(&c, 3, 2, 5, 7), P(&c, 1, 7, 0, 0), 0));
    run_case(&c);
    c = begin("rms_norm [4,1] (one feature), [3,8] (vec4 rows)");
    vkt_tensor *r1 = vkt_rms_norm(c.g, P(&c, 2, 4, 1, 0), P(&c, 1, 1, 0, 0), 1e-3f);
    finish(&c, vkt_add(c.g, vkt_sum(c.g, r1, -1),
                       vkt_sum(c.g, vkt_rms_norm(c.g, P(&c, 2, 3, 8, 0), P(&c, 1, 8, 0, 0), 0), -1)));
    run_case(&c);
    c = begin("batch_norm [5,3,4,3]");
    finish(&c, vkt_batch_norm(c.g, P4(&c, 5, 3, 4, 3), P(&c, 1, 3, 0, 0), P(&c, 1, 3, 0, 0),
                              state(&c, "rm", 3, 0), state(&c, "rv", 3, 1), 0, 0));
    run_case(&c);
    c = begin("batch_norm [6,4]");
    finish(&c, vkt_batch_norm(c.g, P(&c, 2, 6, 4, 0), P(&c, 1, 4, 0, 0), P(&c, 1, 4, 0, 0),
                              state(&c, "rm", 4, 0), state(&c, "rv", 4, 1), 1e-3f, 0.2f));
    run_case(&c);
}

static void embedding_case(void)
{
    op_case c = begin("embedding ids [3,5] (repeats) from [7,6]");
    float ids[15] = {0, 3, 3, 6, 1, 3, 3, 3, 0, 2, 6, 6, 5, 4, 3};
    vkt_shape is = {2, {3, 5}};
    finish(&c, vkt_embedding(c.g, oc_input(&c, "ids", &is, ids), P(&c, 2, 7, 6, 0)));
    run_case(&c);
}

static void attention_cases(void)
{
    op_case c;
    static const uint32_t shapes[][4] = {{2, 5, 2, 3}, {1, 7, 3, 2}, {2, 1, 1, 4}, {1, 9, 1, 5}};
    for (int k = 0; k < 4; k++) {
        for (int d = 0; d < 2; d++) {
            const uint32_t *s = shapes[k];
            char name[96];
            snprintf(name, sizeof name, "causal_attention b %u t %u heads %u d %u dropout %s",
                     s[0], s[1], s[2], s[3], d ? "0.25" : "0");
            c = begin(name);
            finish(&c, vkt_causal_attention(c.g, P(&c, 3, s[0], s[1], 3 * s[2] * s[3]), s[2],
                                            d ? 0.25f : 0.0f));
            run_case(&c);
        }
    }
}

static void sequence_cases(void)
{
    op_case c = begin("linear on [2,3,5] -> [2,3,4], with gelu");
    finish(&c, vkt_gelu(c.g, vkt_linear(c.g, P(&c, 3, 2, 3, 5), P(&c, 2, 5, 4, 0),
                                        P(&c, 1, 4, 0, 0))));
    run_case(&c);
    c = begin("softmax_cross_entropy logits [2,3,5], labels [2,3]");
    vkt_shape ls = {2, {2, 3}};
    finish(&c, vkt_softmax_cross_entropy(c.g, vkt_scale(c.g, P(&c, 3, 2, 3, 5), 3.0f),
                                         labels_shape(&c, &ls, 5)));
    run_case(&c);
}

/* A transformer block and a CNN, small enough for the finite differences. */
static void transformer_case(void)
{
    op_case c = begin("transformer: embedding + positions, ln, attention, gelu MLP, residuals");
    float ids[12] = {1, 4, 4, 0, 2, 3, 3, 3, 1, 0, 4, 2};
    vkt_shape is = {2, {2, 6}};
    vkt_tensor *x = vkt_embedding(c.g, oc_input(&c, "ids", &is, ids), P(&c, 2, 5, 4, 0));
    x = vkt_add(c.g, x, P(&c, 2, 6, 4, 0));
    vkt_tensor *h = vkt_layer_norm(c.g, x, P(&c, 1, 4, 0, 0), P(&c, 1, 4, 0, 0), 0);
    h = vkt_causal_attention(c.g, vkt_linear(c.g, h, P(&c, 2, 4, 12, 0), NULL), 2, 0.0f);
    x = vkt_add(c.g, x, h);
    h = vkt_gelu(c.g, vkt_linear(c.g, x, P(&c, 2, 4, 8, 0), P(&c, 1, 8, 0, 0)));
    finish(&c, vkt_add(c.g, x, vkt_linear(c.g, h, P(&c, 2, 8, 4, 0), NULL)));
    run_case(&c);
}

static void cnn_case(void)
{
    op_case c = begin("cnn: conv relu maxpool, conv relu avgpool, linear");
    vkt_conv2d_options pad1 = {.pad_h = 1, .pad_w = 1};
    vkt_tensor *y = vkt_conv2d(c.g, P4(&c, 2, 1, 8, 8), P4(&c, 3, 1, 3, 3), P(&c, 1, 3, 0, 0),
                               &pad1);
    y = vkt_max_pool2d(c.g, vkt_relu(c.g, y), 2, 2, 0);
    y = vkt_conv2d(c.g, y, P4(&c, 4, 3, 3, 3), P(&c, 1, 4, 0, 0), &pad1);
    y = vkt_avg_pool2d(c.g, vkt_relu(c.g, y), 2, 2, 0);
    vkt_shape flat = {2, {0, 16}};
    finish(&c, vkt_linear(c.g, vkt_reshape(c.g, y, &flat), P(&c, 2, 16, 3, 0), NULL));
    run_case(&c);
}

/* Evaluation uses the running averages; a training step updates them as the reference
 * does. */
static void batch_norm_modes(void)
{
    vkt_graph *g = NULL;
    vkt_graph_options go = {.seed = 5};
    TH_CHECK(vkt_graph_create(&go, &g) == VKT_OK, "graph");
    vkt_shape xs = {2, {8, 3}}, cs = {1, {3}};
    vkt_init ones = {VKT_INIT_CONSTANT, 1, 0, 0}, zero = {VKT_INIT_ZEROS, 0, 0, 0};
    vkt_tensor *x = vkt_input(g, "x", &xs);
    vkt_tensor *rm = vkt_state(g, "rm", &cs, &zero), *rv = vkt_state(g, "rv", &cs, &ones);
    vkt_tensor *y = vkt_batch_norm(g, x, vkt_param(g, "gamma", &cs, &ones),
                                   vkt_param(g, "beta", &cs, &zero), rm, rv, 0, 0.5f);
    vkt_tensor *loss = vkt_sum(g, vkt_keep(g, y), -1);
    vkt_model *m = NULL;
    TH_OK(g_ctx, vkt_model_create(g_ctx, g, loss, NULL, &m));
    float xd[24], yd[24], rmd[3], rvd[3];
    th_fill_uniform(xd, 24, -2, 3);
    TH_OK(g_ctx, vkt_model_set_input(m, x, xd, 24));
    TH_OK(g_ctx, vkt_model_forward_backward(m));
    TH_OK(g_ctx, vkt_model_read(m, rm, rmd, 3));
    TH_OK(g_ctx, vkt_model_read(m, rv, rvd, 3));
    for (int ch = 0; ch < 3; ch++) { /* running = 0.5 old + 0.5 batch (unbiased variance) */
        double mean = 0, var = 0;
        for (int i = 0; i < 8; i++)
            mean += xd[i * 3 + ch] / 8.0;
        for (int i = 0; i < 8; i++)
            var += (xd[i * 3 + ch] - mean) * (xd[i * 3 + ch] - mean) / 7.0;
        TH_CHECK(fabs(rmd[ch] - 0.5 * mean) < 1e-5 && fabs(rvd[ch] - (0.5 + 0.5 * var)) < 1e-4,
                 "batch_norm running averages of channel %d: %g %g, expected %g %g", ch, rmd[ch],
                 rvd[ch], 0.5 * mean, 0.5 + 0.5 * var);
    }
    /* Profiling replays training forwards but leaves the running averages as they were. */
    vkt_op_timing prof[16];
    uint32_t n_prof = 0;
    float rm2[3], rv2[3];
    TH_OK(g_ctx, vkt_model_profile(m, 3, prof, 16, &n_prof));
    TH_OK(g_ctx, vkt_model_read(m, rm, rm2, 3));
    TH_OK(g_ctx, vkt_model_read(m, rv, rv2, 3));
    TH_CHECK(n_prof >= 2 && memcmp(rm2, rmd, sizeof rm2) == 0 && memcmp(rv2, rvd, sizeof rv2) == 0,
             "vkt_model_profile (%u steps) keeps the running averages", n_prof);
    TH_OK(g_ctx, vkt_model_forward(m)); /* evaluation: (x - rm) / sqrt(rv + eps) */
    TH_OK(g_ctx, vkt_model_read(m, y, yd, 24));
    double worst = 0;
    for (int i = 0; i < 24; i++) {
        double want = (xd[i] - rmd[i % 3]) / sqrt(rvd[i % 3] + 1e-5);
        worst = fmax(worst, fabs(yd[i] - want));
    }
    TH_CHECK(worst < 1e-4, "batch_norm evaluation uses the running averages (max error %g)",
             worst);
    vkt_model_destroy(m);
    vkt_graph_destroy(g);
}

/* Async replicas pull the whole master copy, which would overwrite each replica's running
 * averages: refused with a message; sync replicas train such a graph. */
static void states_and_replicas(void)
{
    vkt_graph *g = NULL;
    TH_CHECK(vkt_graph_create(NULL, &g) == VKT_OK, "graph");
    vkt_shape xs = {2, {8, 3}}, cs = {1, {3}};
    vkt_init ones = {VKT_INIT_CONSTANT, 1, 0, 0};
    vkt_tensor *x = vkt_input(g, "x", &xs);
    vkt_tensor *y = vkt_batch_norm(g, x, vkt_param(g, "gamma", &cs, &ones),
                                   vkt_param(g, "beta", &cs, NULL), vkt_state(g, "rm", &cs, NULL),
                                   vkt_state(g, "rv", &cs, &ones), 0, 0);
    vkt_tensor *loss = vkt_sum(g, vkt_mul(g, y, y), -1);
    uint32_t devices[2] = {0, 0};
    vkt_trainer_options o = {.batch = 8, .devices = devices, .device_count = 2,
                             .mode = VKT_PARALLEL_ASYNC};
    vkt_trainer *t = NULL;
    vkt_status st = vkt_trainer_create(th_instance, g, loss, &o, &t);
    TH_CHECK(st == VKT_ERROR_INVALID_ARGUMENT && strstr(vkt_last_error(), "state 'r") &&
                 strstr(vkt_last_error(), "sync"),
             "async replicas refuse a graph with states: %s: %s", vkt_status_name(st),
             vkt_last_error());
    vkt_trainer_destroy(t);
    t = NULL;
    o.mode = VKT_PARALLEL_SYNC;
    TH_CHECK(vkt_trainer_create(th_instance, g, loss, &o, &t) == VKT_OK,
             "sync replicas take a graph with states: %s", vkt_last_error());
    float xd[24];
    th_fill_uniform(xd, 24, -1, 1);
    vkt_feed feed = {x, xd};
    float l = 0;
    TH_CHECK(t && vkt_trainer_step(t, &feed, 1, &l) == VKT_OK && l > 0,
             "a sync step with batch norm: loss %g", l);
    /* A checkpoint carries the states (the running averages) with the parameters. */
    char dir[512], path[600];
    th_temp_dir("test_layers", dir, sizeof dir);
    snprintf(path, sizeof path, "%s/states.vkt", dir);
    uint64_t n = t ? vkt_trainer_param_count(t) : 0;
    float *before = calloc(n + 1, sizeof *before), *after = calloc(n + 1, sizeof *after);
    vkt_trainer *t2 = NULL;
    o.device_count = 1;
    TH_CHECK(t && vkt_trainer_save(t, path) == VKT_OK &&
                 vkt_trainer_read_params(t, before, n) == VKT_OK &&
                 vkt_trainer_create(th_instance, g, loss, &o, &t2) == VKT_OK &&
                 vkt_trainer_restore(t2, path) == VKT_OK &&
                 vkt_trainer_read_params(t2, after, n) == VKT_OK,
             "save and restore with states: %s", vkt_last_error());
    int moved = 0, same = 1;
    for (uint64_t i = 0; i < n; i++) {
        same &= before[i] == after[i];
        moved |= before[i] != 0.0f && before[i] != 1.0f; /* running averages left 0 and 1 */
    }
    TH_CHECK(same && moved, "restored parameters and states equal the saved ones (%llu floats)",
             (unsigned long long)n);
    th_remove_tree(dir);
    free(before);
    free(after);
    vkt_trainer_destroy(t2);
    vkt_trainer_destroy(t);
    vkt_graph_destroy(g);
}

static void token_ids_checked(void)
{
    vkt_graph *g = NULL;
    TH_CHECK(vkt_graph_create(NULL, &g) == VKT_OK, "graph");
    vkt_shape is = {2, {2, 3}}, ts = {2, {4, 5}};
    vkt_tensor *ids = vkt_input(g, "ids", &is);
    vkt_tensor *e = vkt_embedding(g, ids, vkt_param(g, "table", &ts, NULL));
    vkt_model *m = NULL;
    TH_OK(g_ctx, vkt_model_create(g_ctx, g, vkt_sum(g, e, -1), NULL, &m));
    float bad[3][6] = {{0, 1, 2, 3, 4, 0}, {0, 1, -1, 0, 0, 0}, {0, 1.5f, 0, 0, 0, 0}};
    for (int k = 0; k < 3; k++) {
        vkt_status st = vkt_model_set_input(m, ids, bad[k], 6);
        TH_CHECK(st == VKT_ERROR_INVALID_ARGUMENT && strstr(vkt_model_errmsg(m), "token id"),
                 "a bad token id is refused: %s", vkt_model_errmsg(m));
    }
    float good[6] = {0, 1, 2, 3, 3, 0};
    TH_OK(g_ctx, vkt_model_set_input(m, ids, good, 6));
    vkt_model_destroy(m);
    vkt_graph_destroy(g);
    /* Ids feeding two tables are checked against the smaller one. */
    TH_CHECK(vkt_graph_create(NULL, &g) == VKT_OK, "graph");
    vkt_shape big = {2, {9, 5}};
    ids = vkt_input(g, "ids", &is);
    vkt_tensor *two = vkt_add(g, vkt_embedding(g, ids, vkt_param(g, "big", &big, NULL)),
                              vkt_embedding(g, ids, vkt_param(g, "small", &ts, NULL)));
    TH_OK(g_ctx, vkt_model_create(g_ctx, g, vkt_sum(g, two, -1), NULL, &m));
    float six[6] = {0, 1, 2, 6, 0, 0};
    TH_CHECK(vkt_model_set_input(m, ids, six, 6) == VKT_ERROR_INVALID_ARGUMENT &&
                 strstr(vkt_model_errmsg(m), "[0, 4)"),
             "ids of two tables: checked against the smaller (%s)", vkt_model_errmsg(m));
    vkt_model_destroy(m);
    vkt_graph_destroy(g);
}

/* Builds y = f(x) on a fresh graph and expects the graph to record `want` with `text` in
 * its message. */
#define EXPECT_GRAPH_ERROR(want, text, build)                                                 \
    do {                                                                                      \
        vkt_graph *g = NULL;                                                                  \
        vkt_graph_create(NULL, &g);                                                           \
        build;                                                                                \
        TH_CHECK(vkt_graph_status(g) == (want) && strstr(vkt_graph_errmsg(g), text),          \
                 "%s: got %s: %s", #build, vkt_status_name(vkt_graph_status(g)),              \
                 vkt_graph_errmsg(g));                                                        \
        vkt_graph_destroy(g);                                                                 \
    } while (0)

static vkt_tensor *param_of(vkt_graph *g, uint32_t nd, uint32_t a, uint32_t b, uint32_t c,
                            uint32_t d)
{
    vkt_shape s = {nd, {a, b, c, d}};
    return vkt_param(g, NULL, &s, NULL);
}

static void errors(void)
{
    EXPECT_GRAPH_ERROR(VKT_ERROR_SHAPE, "input channels",
                       vkt_conv2d(g, param_of(g, 4, 1, 3, 5, 5), param_of(g, 4, 2, 2, 3, 3), NULL,
                                  NULL));
    vkt_conv2d_options groups = {.groups = 2};
    EXPECT_GRAPH_ERROR(VKT_ERROR_SHAPE, "vkt_conv2d",
                       vkt_conv2d(g, param_of(g, 4, 1, 3, 5, 5), param_of(g, 4, 2, 1, 3, 3), NULL,
                                  &groups));
    EXPECT_GRAPH_ERROR(VKT_ERROR_SHAPE, "vkt_conv2d",
                       vkt_conv2d(g, param_of(g, 4, 1, 1, 2, 2), param_of(g, 4, 1, 1, 3, 3), NULL,
                                  NULL));
    EXPECT_GRAPH_ERROR(VKT_ERROR_SHAPE, "bias",
                       vkt_conv2d(g, param_of(g, 4, 1, 1, 5, 5), param_of(g, 4, 2, 1, 3, 3),
                                  param_of(g, 1, 3, 0, 0, 0), NULL));
    EXPECT_GRAPH_ERROR(VKT_ERROR_SHAPE, "x[N,C,H,W]",
                       vkt_max_pool2d(g, param_of(g, 2, 4, 4, 0, 0), 2, 2, 0));
    EXPECT_GRAPH_ERROR(VKT_ERROR_SHAPE, "gamma",
                       vkt_layer_norm(g, param_of(g, 2, 4, 6, 0, 0), param_of(g, 1, 5, 0, 0, 0),
                                      param_of(g, 1, 6, 0, 0, 0), 0));
    EXPECT_GRAPH_ERROR(VKT_ERROR_INVALID_ARGUMENT, "vkt_state",
                       vkt_batch_norm(g, param_of(g, 2, 4, 3, 0, 0), param_of(g, 1, 3, 0, 0, 0),
                                      param_of(g, 1, 3, 0, 0, 0), param_of(g, 1, 3, 0, 0, 0),
                                      param_of(g, 1, 3, 0, 0, 0), 0, 0));
    EXPECT_GRAPH_ERROR(VKT_ERROR_INVALID_ARGUMENT, "vkt_input",
                       vkt_embedding(g, param_of(g, 1, 4, 0, 0, 0), param_of(g, 2, 5, 3, 0, 0)));
    EXPECT_GRAPH_ERROR(VKT_ERROR_SHAPE, "heads",
                       vkt_causal_attention(g, param_of(g, 3, 2, 4, 18, 0), 4, 0.0f));
    EXPECT_GRAPH_ERROR(VKT_ERROR_INVALID_ARGUMENT, "dropout",
                       vkt_causal_attention(g, param_of(g, 3, 2, 4, 12, 0), 2, 1.0f));
    EXPECT_GRAPH_ERROR(VKT_ERROR_SHAPE, "labels[...]",
                       vkt_softmax_cross_entropy(
                           g, param_of(g, 3, 2, 3, 5, 0),
                           vkt_input_labels_shape(g, "l", &(vkt_shape){2, {3, 2}})));

    /* One sample's im2col columns (conv_im2col; conv_implicit: its input) past
     * maxStorageBufferRange: refused when the model is made, before any memory is
     * allocated. */
    vkt_device_info info;
    TH_OK(g_ctx, vkt_context_device_info(g_ctx, &info));
    uint64_t limit = info.max_storage_buffer_range / 4;
    uint32_t side = 8, taps = kc_conv_uses_workspace(g_ctx) ? 9 : 1;
    while ((uint64_t)side * side * 64 * taps <= limit)
        side *= 2;
    vkt_graph *g = NULL;
    vkt_graph_create(NULL, &g);
    vkt_conv2d_options pad1 = {.pad_h = 1, .pad_w = 1};
    vkt_tensor *y = vkt_conv2d(g, vkt_input(g, "x", &(vkt_shape){4, {1, 64, side, side}}),
                               param_of(g, 4, 1, 64, 3, 3), NULL, &pad1);
    vkt_model *m = NULL;
    vkt_status st = vkt_model_create(g_ctx, g, vkt_sum(g, y, -1), NULL, &m);
    TH_CHECK(st == VKT_ERROR_LIMIT && strstr(vkt_last_error(), "maxStorageBufferRange"),
             "conv2d past the device limit ([1,64,%u,%u]): %s: %s", side, side,
             vkt_status_name(st), vkt_last_error());
    vkt_model_destroy(m);
    vkt_graph_destroy(g);
}

/* The attention cases and the transformer once more on every other attention variant,
 * forced (the device's own ran above); and what a model asks of the arena for attention
 * at context 512 and 2048: attention_flash (also what the probs variants hand sequences
 * too long for their loops to) keeps no [T,T] array (aux and workspace [B,heads,T]); the
 * probs variants keep [B,heads,T,T] twice over. */
static void attention_variants(void)
{
    vkt_context *probe = th_context(VKT_KERNELS_AUTO);
    for (int v = 0; v < GPU_VARIANT_COUNT; v++) {
        const gpu_variant_row *row = gpu_variant_row_of((gpu_variant)v);
        if (row->family != GPU_FAMILY_ATTENTION ||
            !gpu_variant_runs(row, &probe->profile, NULL, 0))
            continue;
        vkt_context *ctx = th_context_filter(row->name);
        if ((gpu_variant)v != probe->kv[GPU_FAMILY_ATTENTION]) {
            printf("  attention cases on %s\n", row->name);
            oc_set_context(ctx);
            attention_cases();
            transformer_case();
        }
        if (v == GPU_V_ATTENTION_FLASH && probe->variant != VKT_KERNELS_GPU) {
            /* as a GPU plans it: lane groups and their shuffles */
            printf("  attention cases on gpu,%s\n", row->name);
            oc_set_context(th_context_filter("gpu,attention_flash"));
            attention_cases();
            transformer_case();
        }
        for (uint32_t t = 512; t <= 2048; t *= 4) {
            const uint32_t b = 1, heads = 2, c = 64;
            vkt_graph *g = NULL;
            vkt_graph_create(NULL, &g);
            vkt_tensor *y = vkt_causal_attention(g, param_of(g, 3, b, t, 3 * c, 0), heads, 0.1f);
            vkt_model *m = NULL;
            vkt_model_stats st;
            /* lavapipe: the probs variants' loops take t = 512 but not 2048 (flash runs) */
            ka_plan pl = ka_attention_plan_for(ctx, b, t, heads, c / heads);
            TH_CHECK(t > 512 || pl.variant == (gpu_variant)v, "%s runs t = %u", row->name, t);
            if (TH_OK(ctx, vkt_model_create(ctx, g, vkt_sum(g, y, -1), NULL, &m)) &&
                TH_OK(ctx, vkt_model_stats_get(m, &st))) {
                uint64_t tt = 4ull * b * heads * t * t, row_bytes = 4ull * b * t * c;
                int lse = pl.saved == KA_SAVED_LSE;
                printf("  %s, t = %u (%s): arena without reuse %llu bytes\n", row->name, t,
                       gpu_variant_row_of(pl.variant)->name,
                       (unsigned long long)st.activation_no_reuse_bytes);
                TH_CHECK(lse ? st.activation_no_reuse_bytes < 16 * row_bytes
                             : st.activation_no_reuse_bytes > 2 * tt,
                         "%s, attention [%u,%u,%u] with %u heads (%s): the arena without reuse "
                         "is %llu bytes (B T C floats: %llu bytes, B heads T T: %llu)",
                         row->name, b, t, 3 * c, heads, gpu_variant_row_of(pl.variant)->name,
                         (unsigned long long)st.activation_no_reuse_bytes,
                         (unsigned long long)row_bytes, (unsigned long long)tt);
            }
            vkt_model_destroy(m);
            vkt_graph_destroy(g);
        }
    }
    oc_set_context(g_ctx);
}

int main(void)
{
    th_init("test_layers");
    g_ctx = th_context(VKT_KERNELS_AUTO);
    oc_set_context(g_ctx);
    conv_cases();
    pool_cases();
    norm_cases();
    embedding_case();
    attention_cases();
    sequence_cases();
    transformer_case();
    cnn_case();
    attention_variants();
    batch_norm_modes();
    states_and_replicas();
    token_ids_checked();
    errors();
    return th_finish();
}
