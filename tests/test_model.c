/* Models: the memory plan reuses memory (peak below the total without reuse), a step
 * is recorded once and replayed (stream stats do not grow), independent branches get no
 * barrier between them, VKT_CHECK finds an injected wrong output and names the op, a
 * tiny MLP trained by a plain gradient step written here lowers its loss, evaluation
 * models share parameters, dropout is reproducible, the staging path agrees, a batch
 * split by rows over two models (row_offset) gives the whole batch's outputs and
 * gradients with dropout on, and an epilogue hook (how an optimizer plugs in) runs
 * inside the recorded step. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/gemm.h"
#include "kernels/train_ops.h"
#include "graph/model.h"
#include "harness.h"
#include "platform/platform.h"

static vkt_context *g_ctx;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct mlp {
    vkt_graph *g;
    vkt_tensor *x, *labels, *h1, *logits, *loss;
    vkt_tensor *w[3], *b[3];
} mlp;

/* in -> h1 -> h2 -> classes, relu (or gelu), optional dropout after h1. */
static mlp mlp_build(uint32_t batch, uint32_t in, uint32_t h1, uint32_t h2, uint32_t classes,
                     int gelu, float dropout, uint64_t seed)
{
    mlp n;
    memset(&n, 0, sizeof n);
    vkt_graph_options o = {.seed = seed};
    vkt_graph_create(&o, &n.g);
    vkt_shape xs = {2, {batch, in}};
    n.x = vkt_input(n.g, "x", &xs);
    n.labels = vkt_input_labels(n.g, "labels", batch);
    uint32_t dims[4] = {in, h1, h2, classes};
    vkt_tensor *h = n.x;
    for (int l = 0; l < 3; l++) {
        char name[8];
        vkt_shape ws = {2, {dims[l], dims[l + 1]}}, bs = {1, {dims[l + 1]}};
        snprintf(name, sizeof name, "w%d", l + 1);
        n.w[l] = vkt_param(n.g, name, &ws, &(vkt_init){.kind = l < 2 ? VKT_INIT_HE : VKT_INIT_GLOROT});
        snprintf(name, sizeof name, "b%d", l + 1);
        n.b[l] = vkt_param(n.g, name, &bs, NULL);
        h = vkt_linear(n.g, h, n.w[l], n.b[l]);
        if (l < 2) {
            h = gelu ? vkt_gelu(n.g, h) : vkt_relu(n.g, h);
            snprintf(name, sizeof name, "h%d", l + 1);
            vkt_set_name(n.g, h, name);
            if (l == 0)
                n.h1 = h;
            if (l == 0 && dropout > 0)
                h = vkt_dropout(n.g, h, dropout);
        }
    }
    n.logits = vkt_set_name(n.g, h, "logits");
    n.loss = vkt_softmax_cross_entropy(n.g, n.logits, n.labels);
    TH_CHECK(vkt_graph_status(n.g) == VKT_OK, "mlp builds: %s", vkt_graph_errmsg(n.g));
    return n;
}

/* A learnable batch: class = argmax of three fixed projections of x. */
static void make_batch(uint32_t batch, uint32_t in, uint32_t classes, float *x, int32_t *y)
{
    for (uint32_t i = 0; i < batch; i++) {
        float best = -1e30f;
        for (uint32_t k = 0; k < in; k++)
            x[i * in + k] = th_rand_uniform(-1, 1);
        for (uint32_t c = 0; c < classes; c++) {
            float s = 0;
            for (uint32_t k = 0; k < in; k++)
                s += x[i * in + k] * (float)(((k * 7 + c * 13) % 5) - 2);
            if (s > best) {
                best = s;
                y[i] = (int32_t)c;
            }
        }
    }
}

static vkt_model *model(vkt_graph *g, vkt_tensor *loss, const vkt_model_options *o)
{
    vkt_model *m = NULL;
    vkt_status st = vkt_model_create(g_ctx, g, loss, o, &m);
    TH_CHECK(st == VKT_OK, "model: %s", vkt_last_error());
    return m;
}

static void set_batch(vkt_model *m, const mlp *n, uint32_t batch, uint32_t in, uint32_t classes)
{
    float *x = th_alloc_floats((uint64_t)batch * in);
    int32_t *y = malloc(batch * sizeof *y);
    make_batch(batch, in, classes, x, y);
    TH_OK(g_ctx, vkt_model_set_input(m, n->x, x, (uint64_t)batch * in));
    TH_OK(g_ctx, vkt_model_set_input(m, n->labels, y, batch));
    free(x);
    free(y);
}

/* Dispatches beyond one per GEMM: a GEMM the context's plan splits over K takes a second
 * dispatch summing the partial tiles (kernels/gemm.h). Which ones split depends on the
 * variant and the device (none with the CPU style on lavapipe; the GPU style splits the
 * products whose tiles leave compute units idle). Shapes: {M, N, K}. */
static uint32_t split_gemms(const uint32_t (*shapes)[3], uint32_t n)
{
    uint32_t extra = 0;
    for (uint32_t i = 0; i < n; i++)
        extra += kg_gemm_plan(&g_ctx->profile, g_ctx->kv[GPU_FAMILY_GEMM], shapes[i][0],
                              shapes[i][1], shapes[i][2]).splits > 1;
    return extra;
}

/* vkt_model_plan_peak on the MLP below: the groups add up to the live bytes, which fit in
 * the arena, largest first; a smaller capacity gets the same first groups. The peak is in
 * the second layer's backward: the first layer's relu output (128 x 256, which its
 * backward reads again) is live, and gradients flow there. */
static void check_plan_peak(vkt_model *m, const vkt_model_stats *st)
{
    vkt_plan_peak pk, pk2;
    vkt_plan_group g[32], g2[2];
    TH_OK(g_ctx, vkt_model_plan_peak(m, &pk, g, 32));
    uint64_t sum = 0;
    int sorted = 1, relu_out = 0, grads = 0;
    for (uint32_t k = 0; k < pk.groups && k < 32; k++) {
        printf("  peak at %s of '%s': %-14s %-9s %s %u values %llu bytes\n",
               pk.backward ? "backward" : "forward", pk.name, g[k].op, g[k].role,
               vkt_dtype_name(g[k].dtype), g[k].values, (unsigned long long)g[k].bytes);
        sum += g[k].bytes;
        sorted &= k == 0 || g[k].bytes <= g[k - 1].bytes;
        relu_out |= strcmp(g[k].op, "linear+relu") == 0 && strcmp(g[k].role, "output") == 0 &&
                    g[k].dtype == VKT_DTYPE_FP32 && g[k].bytes >= 128 * 256 * 4;
        grads |= strcmp(g[k].role, "gradient") == 0;
    }
    TH_CHECK(pk.groups > 0 && pk.groups <= 32 && sum == pk.live_bytes && sorted,
             "%u groups, largest first, summing to the live %llu bytes (%llu)", pk.groups,
             (unsigned long long)pk.live_bytes, (unsigned long long)sum);
    TH_CHECK(pk.live_bytes <= st->activation_bytes && pk.name[0], "the peak (%llu bytes, at "
             "'%s') fits in the arena (%llu)", (unsigned long long)pk.live_bytes, pk.name,
             (unsigned long long)st->activation_bytes);
    TH_CHECK(relu_out && grads && pk.backward, "at a backward, the first relu output (128 x 256 "
             "fp32) and gradients are live at the peak");
    TH_OK(g_ctx, vkt_model_plan_peak(m, &pk2, g2, 2));
    TH_CHECK(pk2.groups == pk.groups && pk2.live_bytes == pk.live_bytes &&
                 memcmp(g2, g, sizeof g2) == 0, "capacity 2: the same two largest groups");
    TH_OK(g_ctx, vkt_model_plan_peak(m, &pk2, NULL, 0));
    TH_CHECK(pk2.groups == pk.groups, "capacity 0 counts the groups (%u)", pk2.groups);
    TH_CHECK(vkt_model_plan_peak(m, NULL, g, 32) == VKT_ERROR_INVALID_ARGUMENT &&
                 vkt_model_plan_peak(m, &pk2, NULL, 3) == VKT_ERROR_INVALID_ARGUMENT &&
                 vkt_model_plan_peak(NULL, &pk2, g, 32) == VKT_ERROR_INVALID_ARGUMENT,
             "NULL arguments: VKT_ERROR_INVALID_ARGUMENT");
}

/* The 784-256-128-10 MLP at batch 128: plan figures, dispatches, replay. */
static void test_plan_and_replay(void)
{
    mlp n = mlp_build(128, 784, 256, 128, 10, 0, 0, 1);
    vkt_model *m = model(n.g, n.loss, NULL);
    if (!m)
        return;
    vkt_model_stats st;
    TH_OK(g_ctx, vkt_model_stats_get(m, &st));
    printf("784-256-128-10 MLP, batch 128: %llu parameters; activations %llu bytes planned, "
           "%llu without reuse (%u values); %u dispatches, %u copies, %u barriers per step; "
           "forward alone %u dispatches\n", (unsigned long long)st.param_count,
           (unsigned long long)st.activation_bytes,
           (unsigned long long)st.activation_no_reuse_bytes, st.values, st.step_dispatches,
           st.step_copies, st.step_barriers, st.forward_dispatches);
    TH_CHECK(st.param_count >= 784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10,
             "the flat buffer holds every parameter");
    TH_CHECK(st.activation_bytes < st.activation_no_reuse_bytes,
             "the plan reuses memory: %llu < %llu bytes", (unsigned long long)st.activation_bytes,
             (unsigned long long)st.activation_no_reuse_bytes);
    /* 3 GEMMs + 2 bias/relu + 1 bias + 1 softmax-CE forward; 2 fused act/bias backward +
     * 1 bias gradient + 3 dW GEMMs + 2 dX GEMMs (no dX for the input); and a reduce for
     * each GEMM the plan splits. */
    static const uint32_t gemms[8][3] = {
        {128, 256, 784}, {128, 128, 256}, {128, 10, 128},  /* forward: X W */
        {784, 256, 128}, {256, 128, 128}, {128, 10, 128},  /* dW = X^T dZ */
        {128, 128, 10},  {128, 256, 128}};                 /* dX = dZ W^T */
    uint32_t fwd_split = split_gemms(gemms, 3), step_split = split_gemms(gemms, 8);
    TH_CHECK(st.step_dispatches == 15 + step_split, "%u dispatches per step (got %u; %u "
             "split GEMMs)", 15 + step_split, st.step_dispatches, step_split);
    TH_CHECK(st.forward_dispatches == 7 + fwd_split, "%u dispatches per forward (got %u)",
             7 + fwd_split, st.forward_dispatches);

    check_plan_peak(m, &st);

    set_batch(m, &n, 128, 784, 10);
    vkt_stream *s = NULL;
    TH_OK(g_ctx, graph_model_train_stream(m, &s));
    vkt_stream_stats before, after;
    TH_OK(g_ctx, vkt_model_forward_backward(m));
    TH_OK(g_ctx, vkt_stream_stats_get(s, &before));
    double t0 = now_s();
    for (int i = 0; i < 5; i++)
        TH_OK(g_ctx, vkt_model_forward_backward(m));
    double per_step = (now_s() - t0) / 5;
    TH_OK(g_ctx, vkt_stream_stats_get(s, &after));
    TH_CHECK(memcmp(&before, &after, sizeof before) == 0 && s->has_commands && !s->recording,
             "replayed, not re-recorded: %u/%u dispatches, %u/%u barriers",
             before.dispatches, after.dispatches, before.barriers, after.barriers);
    vkt_model_stats st2;
    TH_OK(g_ctx, vkt_model_stats_get(m, &st2));
    TH_CHECK(memcmp(&st, &st2, sizeof st) == 0, "model stats do not grow across steps");
    printf("  step time %.2f ms on this device\n", per_step * 1e3);
    vkt_model_destroy(m);
    vkt_graph_destroy(n.g);
}

/* k independent branches from one input, joined by a concat: the forward has the same
 * number of barriers for k = 1 and k = 4. *transfers: the barriers the memory adds where
 * the host cannot map it (model.h): after the inputs' upload from staging, before the
 * loss's copy into the control block. */
static uint32_t branch_barriers(int k, uint32_t *dispatches, uint32_t *transfers)
{
    vkt_graph *g = NULL;
    vkt_graph_create(NULL, &g);
    vkt_shape xs = {2, {16, 33}};
    vkt_tensor *x = vkt_input(g, "x", &xs), *parts[4];
    for (int i = 0; i < k; i++)
        parts[i] = i == 0 ? vkt_relu(g, x) : i == 1 ? vkt_tanh(g, x)
                   : i == 2 ? vkt_sigmoid(g, x) : vkt_gelu(g, x);
    vkt_tensor *loss = vkt_sum(g, vkt_concat(g, parts, (uint32_t)k, 0), -1);
    vkt_model_options o = {.forward_only = 1};
    vkt_model *m = model(g, loss, &o);
    vkt_model_stats st;
    memset(&st, 0, sizeof st);
    *transfers = 0;
    if (m) {
        TH_OK(g_ctx, vkt_model_stats_get(m, &st));
        *transfers = (uint32_t)(m->inputs_staged + m->loss_staged);
    }
    vkt_model_destroy(m);
    vkt_graph_destroy(g);
    *dispatches = st.forward_dispatches;
    return st.forward_barriers;
}

static void test_independent_branches(void)
{
    uint32_t d1, d4, x1, x4;
    uint32_t b1 = branch_barriers(1, &d1, &x1), b4 = branch_barriers(4, &d4, &x4);
    TH_CHECK(d4 == d1 + 6, "4 branches: 3 more activations, 3 more copies (%u vs %u)", d4, d1);
    TH_CHECK(x1 == x4 && b1 == b4 && b4 == 2 + x4, "no barrier between independent branches: "
             "%u barriers with 1 branch, %u with 4 (%u expected: before the concat, before the "
             "sum, and %u for staged memory)", b1, b4, 2 + x4, x4);
}

static void test_check_mode(void)
{
    mlp n = mlp_build(7, 19, 13, 11, 5, 1, 0.2f, 3);
    vkt_model_options o = {.check = 1};
    vkt_model *m = model(n.g, n.loss, &o);
    if (m) {
        /* The check reads snapshots taken as the step runs: the plan keeps reusing memory. */
        vkt_model_stats st;
        TH_OK(g_ctx, vkt_model_stats_get(m, &st));
        TH_CHECK(st.activation_bytes < st.activation_no_reuse_bytes,
                 "check mode reuses memory: %llu bytes planned, %llu without reuse",
                 (unsigned long long)st.activation_bytes,
                 (unsigned long long)st.activation_no_reuse_bytes);
        set_batch(m, &n, 7, 19, 5);
        for (int i = 0; i < 2; i++)
            TH_CHECK(vkt_model_forward_backward(m) == VKT_OK, "a clean step passes the check: %s",
                     vkt_model_errmsg(m));
        TH_CHECK(vkt_model_forward(m) == VKT_OK, "a clean evaluation passes: %s",
                 vkt_model_errmsg(m));
        vkt_model_destroy(m);
    }
    /* A wrong output of the (fused) first layer is found and named. */
    plat_setenv("VKT_CHECK", "1");
    m = model(n.g, n.loss, NULL);
    plat_setenv("VKT_CHECK", NULL);
    if (m) {
        TH_OK(g_ctx, graph_model_debug_corrupt(m, n.h1));
        set_batch(m, &n, 7, 19, 5);
        fprintf(stderr, "(the VKT_CHECK message below is expected)\n");
        vkt_status st = vkt_model_forward_backward(m);
        const char *msg = vkt_model_errmsg(m);
        TH_CHECK(st == VKT_ERROR_INTERNAL, "the corrupted step fails (%s)", vkt_status_name(st));
        TH_CHECK(strstr(msg, "VKT_CHECK") && strstr(msg, "'h1'") && strstr(msg, "gelu") &&
                     strstr(msg, "1234.5"),
                 "the message names the op and the wrong value: %s", msg);
        vkt_model_destroy(m);
    }
    /* Every recording checks the memory plan against what each op touches: a plan that
     * forgets one access of the (fused) first layer's steps is caught, naming the op. */
    m = model(n.g, n.loss, NULL);
    if (m) {
        TH_OK(g_ctx, graph_model_debug_drop_access(m, n.h1));
        set_batch(m, &n, 7, 19, 5);
        vkt_status st = vkt_model_forward_backward(m);
        const char *msg = vkt_model_errmsg(m);
        TH_CHECK(st == VKT_ERROR_INTERNAL, "a plan missing an access fails the recording (%s)",
                 vkt_status_name(st));
        TH_CHECK(strstr(msg, "memory plan does not cover") && strstr(msg, "'h1'"),
                 "the message names the op: %s", msg);
        vkt_model_destroy(m);
    }
    vkt_graph_destroy(n.g);
}

/* Training with w -= lr * g through the flat buffers, written here. */
static void test_training(void)
{
    enum { B = 32, IN = 8, C = 3 };
    mlp n = mlp_build(B, IN, 16, 16, C, 0, 0, 11);
    vkt_model *m = model(n.g, n.loss, NULL);
    if (!m)
        return;
    uint64_t np = vkt_model_param_count(m);
    float *p = th_alloc_floats(np), *gr = th_alloc_floats(np);
    float first = 0, last = 0, l = 0;
    th_seed(99);
    for (int step = 0; step < 150; step++) {
        set_batch(m, &n, B, IN, C);
        TH_OK(g_ctx, vkt_model_forward_backward(m));
        TH_OK(g_ctx, vkt_model_loss(m, &l));
        if (step == 0)
            first = l;
        if (step >= 140)
            last += l / 10;
        TH_OK(g_ctx, vkt_model_read_params(m, p, np));
        TH_OK(g_ctx, vkt_model_read_grads(m, gr, np));
        for (uint64_t i = 0; i < np; i++)
            p[i] -= 0.2f * gr[i];
        TH_OK(g_ctx, vkt_model_write_params(m, p, np));
    }
    TH_CHECK(last < 0.5f * first, "training lowers the loss: %.4f -> %.4f", first, last);
    printf("tiny MLP: loss %.4f -> %.4f in 150 steps\n", first, last);

    /* An evaluation model at another batch shares the parameters. */
    vkt_model_options eo = {.batch = 5, .forward_only = 1, .share_params = m};
    vkt_keep(n.g, n.logits); /* read by the evaluation model (made after this) */
    vkt_model *e = model(n.g, n.loss, &eo);
    if (e) {
        set_batch(e, &n, 5, IN, C);
        TH_OK(g_ctx, vkt_model_forward(e));
        float le = 0, logits[5 * C];
        TH_OK(g_ctx, vkt_model_loss(e, &le));
        TH_OK(g_ctx, vkt_model_read(e, n.logits, logits, 5 * C));
        TH_CHECK(le < first, "the evaluation model sees the trained parameters (%.4f)", le);
        TH_CHECK(vkt_model_param_count(e) == np, "same flat layout");
        vkt_shape ls;
        TH_OK(g_ctx, vkt_model_shape(e, n.logits, &ls));
        TH_CHECK(ls.ndim == 2 && ls.dims[0] == 5 && ls.dims[1] == C, "logits are [5,%d] there",
                 C);
        TH_CHECK(vkt_model_forward_backward(e) == VKT_ERROR_STATE,
                 "a forward-only model refuses a training step");
        vkt_model_destroy(e);
    }
    free(p);
    free(gr);
    vkt_model_destroy(m);
    vkt_graph_destroy(n.g);
}

static void run_steps(vkt_model *m, const mlp *n, int steps, float *losses, uint64_t seed)
{
    th_seed(seed);
    for (int i = 0; i < steps; i++) {
        set_batch(m, n, 9, 12, 4);
        TH_OK(g_ctx, vkt_model_forward_backward(m));
        TH_OK(g_ctx, vkt_model_loss(m, &losses[i]));
    }
}

static void test_dropout_and_staging(void)
{
    mlp a = mlp_build(9, 12, 10, 6, 4, 0, 0.5f, 21), b = mlp_build(9, 12, 10, 6, 4, 0, 0.5f, 21);
    vkt_model *ma = model(a.g, a.loss, NULL), *mb = model(b.g, b.loss, NULL);
    if (ma && mb) {
        float la[4], lb[4];
        run_steps(ma, &a, 4, la, 5);
        run_steps(mb, &b, 4, lb, 5);
        TH_CHECK(memcmp(la, lb, sizeof la) == 0, "same seed, same steps: identical losses");
        /* Same batch, other step: another dropout pattern; evaluation: no dropout. */
        float l0, l1, e0, e1;
        set_batch(ma, &a, 9, 12, 4);
        TH_OK(g_ctx, vkt_model_forward_backward(ma));
        TH_OK(g_ctx, vkt_model_loss(ma, &l0));
        TH_OK(g_ctx, vkt_model_forward_backward(ma));
        TH_OK(g_ctx, vkt_model_loss(ma, &l1));
        TH_OK(g_ctx, vkt_model_forward(ma));
        TH_OK(g_ctx, vkt_model_loss(ma, &e0));
        TH_OK(g_ctx, vkt_model_forward(ma));
        TH_OK(g_ctx, vkt_model_loss(ma, &e1));
        TH_CHECK(l0 != l1, "dropout differs between steps (%g, %g)", l0, l1);
        TH_CHECK(e0 == e1, "evaluation is deterministic (%g, %g)", e0, e1);
        TH_CHECK(vkt_model_step_index(ma) == 6, "6 steps counted");
    }
    vkt_model_destroy(ma);
    vkt_model_destroy(mb);
    vkt_graph_destroy(b.g);

    /* Through staging buffers (the discrete-GPU path): the same losses. */
    vkt_context_options co = {.force_staging = 1};
    vkt_context *sctx = NULL;
    TH_OK(NULL, vkt_context_create(th_instance, &co, &sctx));
    vkt_model *ms = NULL;
    TH_CHECK(vkt_model_create(sctx, a.g, a.loss, NULL, &ms) == VKT_OK, "staged model: %s",
             vkt_last_error());
    if (ms) {
        TH_CHECK(ms->inputs_staged && ms->loss_staged, "inputs and loss go through staging");
        mlp *pa = &a;
        vkt_model *plain = model(a.g, a.loss, NULL);
        float lp[3], ls[3];
        th_seed(8);
        for (int i = 0; i < 3; i++) {
            set_batch(plain, pa, 9, 12, 4);
            TH_OK(g_ctx, vkt_model_forward_backward(plain));
            TH_OK(g_ctx, vkt_model_loss(plain, &lp[i]));
        }
        th_seed(8);
        float *x = th_alloc_floats(9 * 12);
        int32_t y[9];
        for (int i = 0; i < 3; i++) {
            make_batch(9, 12, 4, x, y);
            TH_OK(sctx, vkt_model_set_input(ms, a.x, x, 9 * 12));
            TH_OK(sctx, vkt_model_set_input(ms, a.labels, y, 9));
            TH_OK(sctx, vkt_model_forward_backward(ms));
            TH_OK(sctx, vkt_model_loss(ms, &ls[i]));
        }
        TH_CHECK(memcmp(lp, ls, sizeof lp) == 0, "staged and direct give the same losses "
                 "(%g %g)", lp[2], ls[2]);
        int32_t bad[9] = {0, 1, 2, 3, 4, 0, 1, 2, 3};
        TH_CHECK(vkt_model_set_input(ms, a.labels, bad, 9) == VKT_ERROR_INVALID_ARGUMENT &&
                     strstr(vkt_model_errmsg(ms), "outside [0, 4)"),
                 "a label out of range is refused: %s", vkt_model_errmsg(ms));
        free(x);
        vkt_model_destroy(plain);
        vkt_model_destroy(ms);
    }
    vkt_context_destroy(sctx);
    vkt_graph_destroy(a.g);
}

/* ---- a batch split by rows (data parallelism): dropout keyed by the global row ---- */

typedef struct split_net {
    vkt_graph *g;
    vkt_tensor *x, *out, *loss;
    uint64_t row_in, row_out; /* elements per batch row of x and out */
} split_net;

/* x [b, 5] -> relu(linear 5->7) -> dropout 0.4 -> linear by the weight w2 [7, 3] after
 * its own dropout 0.3 (a parameter: the same mask in every part) -> out; the loss is
 * sum(out * out), a sum over rows, so the parts' gradients add up to the whole's. */
static split_net split_mlp(uint32_t b)
{
    split_net n = {0};
    vkt_graph_options o = {.seed = 41};
    vkt_graph_create(&o, &n.g);
    vkt_shape xs = {2, {b, 5}}, w1s = {2, {5, 7}}, b1s = {1, {7}}, w2s = {2, {7, 3}};
    n.x = vkt_input(n.g, "x", &xs);
    vkt_tensor *w1 = vkt_param(n.g, "w1", &w1s, &(vkt_init){.kind = VKT_INIT_HE});
    vkt_tensor *b1 = vkt_param(n.g, "b1", &b1s, &(vkt_init){.kind = VKT_INIT_UNIFORM,
                                                          .a = -0.5f, .b = 0.5f});
    vkt_tensor *w2 = vkt_param(n.g, "w2", &w2s, &(vkt_init){.kind = VKT_INIT_GLOROT});
    vkt_tensor *h = vkt_dropout(n.g, vkt_relu(n.g, vkt_linear(n.g, n.x, w1, b1)), 0.4f);
    n.out = vkt_keep(n.g, vkt_matmul(n.g, h, vkt_dropout(n.g, w2, 0.3f)));
    n.loss = vkt_sum(n.g, vkt_mul(n.g, n.out, n.out), -1);
    n.row_in = 5;
    n.row_out = 3;
    TH_CHECK(vkt_graph_status(n.g) == VKT_OK, "split mlp builds: %s", vkt_graph_errmsg(n.g));
    return n;
}

/* x [b, 5, 6] -> linear 6->18 -> causal attention (2 heads, dropout 0.3) -> dropout 0.2
 * on the [b, 5, 6] result -> out; loss sum(out * out). */
static split_net split_attention(uint32_t b)
{
    split_net n = {0};
    vkt_graph_options o = {.seed = 43};
    vkt_graph_create(&o, &n.g);
    vkt_shape xs = {3, {b, 5, 6}}, ws = {2, {6, 18}};
    n.x = vkt_input(n.g, "x", &xs);
    vkt_tensor *w = vkt_param(n.g, "wqkv", &ws, &(vkt_init){.kind = VKT_INIT_GLOROT});
    vkt_tensor *a = vkt_causal_attention(n.g, vkt_linear(n.g, n.x, w, NULL), 2, 0.3f);
    n.out = vkt_keep(n.g, vkt_dropout(n.g, a, 0.2f));
    n.loss = vkt_sum(n.g, vkt_mul(n.g, n.out, n.out), -1);
    n.row_in = n.row_out = 5 * 6;
    TH_CHECK(vkt_graph_status(n.g) == VKT_OK, "split attention builds: %s",
             vkt_graph_errmsg(n.g));
    return n;
}

/* One training step of `n` at rows [row0, row0 + rows) of the batch x, dropout step 7:
 * the output into out (those rows) and the flat gradient added into grad. The part
 * that starts past row 0 runs in check mode, so the CPU references of every op follow
 * the same global-row rule as the device. */
static void split_step(const split_net *n, const float *x, uint32_t row0, uint32_t rows,
                       float *out, float *grad, uint64_t n_grad)
{
    vkt_model_options o = {.batch = rows, .row_offset = row0, .check = row0 > 0};
    vkt_model *m = model(n->g, n->loss, &o);
    if (!m)
        return;
    float *g = th_alloc_floats(n_grad);
    vkt_model_set_step_index(m, 7);
    TH_OK(g_ctx, vkt_model_set_input(m, n->x, x + row0 * n->row_in, rows * n->row_in));
    vkt_status st = vkt_model_forward_backward(m);
    TH_CHECK(st == VKT_OK, "rows [%u, %u): step: %s", row0, row0 + rows, vkt_model_errmsg(m));
    TH_OK(g_ctx, vkt_model_read(m, n->out, out + row0 * n->row_out, rows * n->row_out));
    TH_CHECK(vkt_model_param_count(m) == n_grad, "same parameters at every batch");
    TH_OK(g_ctx, vkt_model_read_grads(m, g, n_grad));
    for (uint64_t i = 0; i < n_grad; i++)
        grad[i] += g[i];
    free(g);
    vkt_model_destroy(m);
}

/* The batch of B rows in one model, and split as [0, k) and [k, B) (row_offset k) in
 * two: the same outputs (the same dropout masks) and gradients that add up. */
static void check_split(split_net (*build)(uint32_t), const char *what)
{
    enum { B = 7, K = 3 };
    split_net n = build(B);
    vkt_model *probe = model(n.g, n.loss, NULL);
    uint64_t np = probe ? vkt_model_param_count(probe) : 0;
    vkt_model_destroy(probe);
    float *x = th_alloc_floats(B * n.row_in);
    float *whole = th_alloc_floats(B * n.row_out), *parts = th_alloc_floats(B * n.row_out);
    float *gw = calloc(np ? np : 1, sizeof *gw), *gp = calloc(np ? np : 1, sizeof *gp);
    th_fill_uniform(x, B * n.row_in, -1, 1);
    split_step(&n, x, 0, B, whole, gw, np);
    split_step(&n, x, 0, K, parts, gp, np);
    split_step(&n, x, K, B - K, parts, gp, np);
    char buf[128];
    snprintf(buf, sizeof buf, "%s: outputs of rows [0,%d) + [%d,%d) = the whole batch's", what,
             K, K, B);
    th_compare(buf, parts, whole, B * n.row_out, 1e-6f, 1e-6f);
    snprintf(buf, sizeof buf, "%s: gradients of the parts add up to the whole's", what);
    th_compare(buf, gp, gw, np, 1e-5f, 1e-6f);
    uint64_t zeros = 0;
    for (uint64_t i = K * n.row_out; i < B * n.row_out; i++)
        zeros += whole[i] == 0.0f;
    TH_CHECK(zeros > 0, "%s: dropout is on in the second part (%llu zeros)", what,
             (unsigned long long)zeros);
    /* Not vacuous: the second part keyed from row 0 draws other masks. */
    split_step(&n, x + K * n.row_in, 0, B - K, parts, gp, np);
    TH_CHECK(memcmp(parts, whole + K * n.row_out, (B - K) * n.row_out * sizeof *parts) != 0,
             "%s: rows [%d,%d) keyed from row 0 give another output", what, K, B);
    free(x);
    free(whole);
    free(parts);
    free(gw);
    free(gp);
    vkt_graph_destroy(n.g);
}

static void test_split_batch(void)
{
    check_split(split_mlp, "mlp with dropout");
    check_split(split_attention, "causal attention with dropout");
}

/* An epilogue recorded into the step: plain SGD over the flat buffers (one dispatch). */
typedef struct sgd_hook {
    vkt_model *m;
    float lr;
} sgd_hook;

static vkt_status sgd_record(vkt_stream *s, void *user)
{
    sgd_hook *h = user;
    vkt_view p, g;
    uint64_t n;
    vkt_status st = graph_model_flat(h->m, &p, &g, &n);
    return st == VKT_OK ? kt_axpby(s, -h->lr, g, 1.0f, p, n) : st;
}

static void test_epilogue(void)
{
    mlp a = mlp_build(9, 12, 10, 6, 4, 0, 0, 31);
    vkt_model *hooked = model(a.g, a.loss, NULL), *manual = model(a.g, a.loss, NULL);
    if (!hooked || !manual)
        return;
    sgd_hook h = {hooked, 0.1f};
    TH_OK(g_ctx, graph_model_add_epilogue(hooked, sgd_record, &h));
    uint64_t np = vkt_model_param_count(manual);
    float *p = th_alloc_floats(np), *gr = th_alloc_floats(np), *ph = th_alloc_floats(np);
    for (int step = 0; step < 4; step++) {
        uint64_t seed = 1000 + (uint64_t)step;
        th_seed(seed);
        set_batch(hooked, &a, 9, 12, 4);
        th_seed(seed);
        set_batch(manual, &a, 9, 12, 4);
        TH_OK(g_ctx, vkt_model_forward_backward(hooked));
        TH_OK(g_ctx, vkt_model_forward_backward(manual));
        TH_OK(g_ctx, vkt_model_read_params(manual, p, np));
        TH_OK(g_ctx, vkt_model_read_grads(manual, gr, np));
        for (uint64_t i = 0; i < np; i++)
            p[i] = -0.1f * gr[i] + p[i];
        TH_OK(g_ctx, vkt_model_write_params(manual, p, np));
    }
    TH_OK(g_ctx, vkt_model_read_params(hooked, ph, np));
    th_compare("SGD in the recorded step equals SGD on the host", ph, p, np, 1e-5f, 1e-6f);
    vkt_model_stats st;
    TH_OK(g_ctx, vkt_model_stats_get(hooked, &st));
    TH_CHECK(st.step_dispatches == 16, "the update is one more dispatch (%u)",
             st.step_dispatches);
    TH_CHECK(graph_model_add_epilogue(hooked, sgd_record, &h) == VKT_ERROR_STATE,
             "no epilogue after the first step");

    /* In check mode the epilogue runs after the check, from its own stream. */
    vkt_model_options co = {.check = 1};
    vkt_model *checked = model(a.g, a.loss, &co);
    if (checked) {
        sgd_hook hc = {checked, 0.1f};
        TH_OK(g_ctx, graph_model_add_epilogue(checked, sgd_record, &hc));
        TH_OK(g_ctx, vkt_model_write_params(checked, ph, np));
        TH_OK(g_ctx, vkt_model_write_params(manual, ph, np));
        th_seed(77);
        set_batch(checked, &a, 9, 12, 4);
        th_seed(77);
        set_batch(manual, &a, 9, 12, 4);
        TH_CHECK(vkt_model_forward_backward(checked) == VKT_OK, "checked step with an "
                 "epilogue: %s", vkt_model_errmsg(checked));
        TH_OK(g_ctx, vkt_model_forward_backward(manual));
        TH_OK(g_ctx, vkt_model_read_grads(manual, gr, np));
        for (uint64_t i = 0; i < np; i++)
            p[i] = -0.1f * gr[i] + ph[i];
        TH_OK(g_ctx, vkt_model_read_params(checked, ph, np));
        th_compare("the epilogue ran after the check", ph, p, np, 1e-5f, 1e-6f);
        vkt_model_destroy(checked);
    }
    free(p);
    free(gr);
    free(ph);
    vkt_model_destroy(hooked);
    vkt_model_destroy(manual);
    vkt_graph_destroy(a.g);
}

int main(void)
{
    /* This test turns check mode on where it wants it (check mode disables memory
     * reuse, which test_plan_and_replay measures). */
    plat_setenv("VKT_CHECK", NULL);
    th_init("test_model");
    g_ctx = th_context(VKT_KERNELS_AUTO);
    test_plan_and_replay();
    test_independent_branches();
    test_check_mode();
    test_training();
    test_dropout_and_staging();
    test_split_batch();
    test_epilogue();
    return th_finish();
}
