/* test_accumulate.c - models compiled with GRAPH_MODEL_ACCUMULATE (graph/runtime.h): every
 * backward adds into the parameters' gradients, so two training steps leave the sum of
 * their gradients, and graph_model_zero_grads makes the next step start from zero. For
 * every kind of op that owns a parameter gradient (linear and the fused linear + act,
 * matmul with a parameter, a weight used twice, conv2d and the fused conv + relu, grouped
 * and strided conv, layer / rms / batch norm scales and shifts, embeddings, broadcast
 * biases and scales, a K large enough for a split-K GEMM) on awkward shapes, in fp32 and
 * autocast fp16 and bf16, with the CPU and the GPU kernels (planned as for 132 compute
 * units: tiles and K splits): with random inputs a, b, c,
 *  - an accumulating model whose gradient buffer holds garbage, zeroed, then stepped on a
 *    and b, holds g(a) + g(b) from an ordinary model (its steps read one by one);
 *  - zeroed again and stepped on c: g(c) (the zeroing runs once per request);
 *  - stepped on a without zeroing: g(c) + g(a);
 *  - check mode (VKT_CHECK's CPU reference of every op) passes on an accumulating model's
 *    second step, whose reference adds the gradients that were there before. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/model.h" /* white box: graph_model_create's flags */
#include "harness.h"
#include "platform/platform.h" /* plat_setenv: mingw has no setenv */

enum { MAX_FEEDS = 4 };

typedef struct acase {
    const char *name;
    vkt_graph *g;
    vkt_tensor *loss;
    vkt_tensor *feed[MAX_FEEDS];
    uint32_t n_feeds;
    uint32_t vocab[MAX_FEEDS]; /* > 0: ids or labels drawn in [0, vocab) */
    int labels[MAX_FEEDS];     /* int32 labels (else floats) */
} acase;

static acase begin(const char *name, uint64_t seed)
{
    acase c;
    memset(&c, 0, sizeof c);
    c.name = name;
    vkt_graph_options o = {.seed = seed};
    vkt_graph_create(&o, &c.g);
    return c;
}

static vkt_tensor *param(acase *c, const char *name, uint32_t nd, uint32_t d0, uint32_t d1,
                         uint32_t d2, uint32_t d3)
{
    vkt_shape s = {nd, {d0, d1, d2, d3}};
    vkt_init init = {VKT_INIT_UNIFORM, -0.6f, 0.6f, 0};
    return vkt_param(c->g, name, &s, &init);
}

static vkt_tensor *input(acase *c, const char *name, uint32_t nd, uint32_t d0, uint32_t d1,
                         uint32_t d2, uint32_t d3, uint32_t vocab)
{
    vkt_shape s = {nd, {d0, d1, d2, d3}};
    c->vocab[c->n_feeds] = vocab;
    return c->feed[c->n_feeds++] = vkt_input(c->g, name, &s);
}

static vkt_tensor *labels(acase *c, uint32_t batch, uint32_t classes)
{
    c->vocab[c->n_feeds] = classes;
    c->labels[c->n_feeds] = 1;
    return c->feed[c->n_feeds++] = vkt_input_labels(c->g, "y", batch);
}

/* ---- the cases ------------------------------------------------------------------ */

/* linear + relu (fused linear_act) -> linear with bias -> softmax-CE */
static acase mlp(void)
{
    acase c = begin("linear, linear+relu", 11);
    vkt_tensor *x = input(&c, "x", 2, 7, 13, 0, 0, 0);
    vkt_tensor *h = vkt_relu(c.g, vkt_linear(c.g, x, param(&c, "w1", 2, 13, 19, 0, 0),
                                             param(&c, "b1", 1, 19, 0, 0, 0)));
    vkt_tensor *z = vkt_linear(c.g, h, param(&c, "w2", 2, 19, 5, 0, 0),
                               param(&c, "b2", 1, 5, 0, 0, 0));
    c.loss = vkt_softmax_cross_entropy(c.g, z, labels(&c, 7, 5));
    return c;
}

/* matmul with a parameter, a broadcast bias and scale (binary ops' gradients of a
 * parameter), a weight used twice (tied), mse */
static acase products(void)
{
    acase c = begin("matmul, tied weight, broadcast add and mul", 12);
    vkt_tensor *x = input(&c, "x", 2, 9, 11, 0, 0, 0);
    vkt_tensor *w = param(&c, "w", 2, 11, 6, 0, 0);
    vkt_tensor *h = vkt_tanh(c.g, vkt_add(c.g, vkt_matmul(c.g, x, w),
                                          param(&c, "bias", 1, 6, 0, 0, 0)));
    h = vkt_mul(c.g, h, param(&c, "scale", 1, 6, 0, 0, 0));
    vkt_tensor *back = vkt_matmul(c.g, h, vkt_transpose(c.g, w)); /* [9,11]: w again */
    c.loss = vkt_mse(c.g, back, input(&c, "t", 2, 9, 11, 0, 0, 0));
    return c;
}

/* dW = X^T dZ over 300 rows: a long K (split where the plan splits) */
static acase long_k(void)
{
    acase c = begin("linear over 300 rows (split K)", 13);
    vkt_tensor *x = input(&c, "x", 2, 300, 24, 0, 0, 0);
    vkt_tensor *z = vkt_linear(c.g, x, param(&c, "w", 2, 24, 10, 0, 0),
                               param(&c, "b", 1, 10, 0, 0, 0));
    c.loss = vkt_softmax_cross_entropy(c.g, vkt_gelu(c.g, z), labels(&c, 300, 10));
    return c;
}

/* conv2d + relu (fused conv_relu, bias), a strided padded grouped conv without bias,
 * global pooling, linear */
static acase convs(void)
{
    acase c = begin("conv2d, conv+relu, grouped strided conv", 14);
    vkt_tensor *x = input(&c, "x", 4, 3, 2, 7, 6, 0);
    vkt_tensor *h = vkt_relu(c.g, vkt_conv2d(c.g, x, param(&c, "k1", 4, 4, 2, 3, 3),
                                             param(&c, "kb1", 1, 4, 0, 0, 0), NULL));
    vkt_conv2d_options o = {.stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1, .groups = 2};
    h = vkt_conv2d(c.g, h, param(&c, "k2", 4, 6, 2, 3, 2), NULL, &o);
    vkt_tensor *z = vkt_linear(c.g, vkt_global_avg_pool(c.g, h), param(&c, "w", 2, 6, 3, 0, 0),
                               NULL);
    c.loss = vkt_softmax_cross_entropy(c.g, z, labels(&c, 3, 3));
    return c;
}

/* layer norm (gamma, beta), rms norm (gamma), batch norm (gamma, beta; its running
 * statistics are states, not trained) */
static acase norms(void)
{
    acase c = begin("layer, rms and batch norm", 15);
    vkt_tensor *x = input(&c, "x", 2, 10, 9, 0, 0, 0);
    vkt_tensor *h = vkt_layer_norm(c.g, x, param(&c, "ln_g", 1, 9, 0, 0, 0),
                                   param(&c, "ln_b", 1, 9, 0, 0, 0), 0);
    h = vkt_rms_norm(c.g, vkt_tanh(c.g, h), param(&c, "rms_g", 1, 9, 0, 0, 0), 0);
    vkt_shape s9 = {1, {9}};
    vkt_init one = {VKT_INIT_CONSTANT, 1.0f, 0, 0};
    h = vkt_batch_norm(c.g, h, param(&c, "bn_g", 1, 9, 0, 0, 0), param(&c, "bn_b", 1, 9, 0, 0, 0),
                       vkt_state(c.g, "bn_mean", &s9, NULL), vkt_state(c.g, "bn_var", &s9, &one),
                       0, 0);
    c.loss = vkt_mse(c.g, h, input(&c, "t", 2, 10, 9, 0, 0, 0));
    return c;
}

/* an embedding with repeated ids (rows summed into one row of the table's gradient) */
static acase embed(void)
{
    acase c = begin("embedding", 16);
    vkt_tensor *ids = input(&c, "ids", 2, 5, 6, 0, 0, 7); /* 30 ids over 7 rows */
    vkt_tensor *e = vkt_embedding(c.g, ids, param(&c, "table", 2, 7, 5, 0, 0));
    vkt_shape flat = {2, {5, 30}};
    vkt_tensor *z = vkt_linear(c.g, vkt_reshape(c.g, e, &flat), param(&c, "w", 2, 30, 4, 0, 0),
                               NULL);
    c.loss = vkt_softmax_cross_entropy(c.g, z, labels(&c, 5, 4));
    return c;
}

/* ---- running ---------------------------------------------------------------------- */

typedef struct feeds {
    void *data[MAX_FEEDS];
    uint64_t n[MAX_FEEDS];
} feeds;

static feeds draw(const acase *c)
{
    feeds f;
    for (uint32_t i = 0; i < c->n_feeds; i++) {
        vkt_shape s = vkt_tensor_shape(c->feed[i]);
        uint64_t n = 1;
        for (uint32_t d = 0; d < s.ndim; d++)
            n *= s.dims[d];
        f.data[i] = malloc(n * 4);
        f.n[i] = n;
        for (uint64_t j = 0; j < n; j++) {
            uint32_t v = c->vocab[i] ? (uint32_t)(th_rand_u64() % c->vocab[i]) : 0;
            if (c->labels[i])
                ((int32_t *)f.data[i])[j] = (int32_t)v;
            else
                ((float *)f.data[i])[j] = c->vocab[i] ? (float)v : th_rand_uniform(-1, 1);
        }
    }
    return f;
}

static void feeds_free(const acase *c, feeds *f)
{
    for (uint32_t i = 0; i < c->n_feeds; i++)
        free(f->data[i]);
}

static void step(const acase *c, vkt_model *m, const feeds *f, const char *what)
{
    for (uint32_t i = 0; i < c->n_feeds; i++)
        TH_OK(NULL, vkt_model_set_input(m, c->feed[i], f->data[i], f->n[i]));
    vkt_status st = vkt_model_forward_backward(m);
    TH_CHECK(st == VKT_OK, "%s: %s: step: %s", c->name, what, vkt_model_errmsg(m));
}

static float *grads(vkt_model *m, uint64_t n)
{
    float *g = th_alloc_floats(n);
    TH_OK(NULL, vkt_model_read_grads(m, g, n));
    return g;
}

/* The sum in double of a and b, rounded (the device adds in fp32: one rounding). */
static float *sum2(const float *a, const float *b, uint64_t n)
{
    float *s = th_alloc_floats(n);
    for (uint64_t i = 0; i < n; i++)
        s[i] = (float)((double)a[i] + (double)b[i]);
    return s;
}

static void run_case(vkt_context *ctx, const acase *c, vkt_dtype precision, const char *kernels)
{
    char what[160];
    snprintf(what, sizeof what, "%s (%s, %s kernels)", c->name, vkt_dtype_name(precision),
             kernels);
    vkt_model_options o = {.precision = precision};
    vkt_model *plain = NULL, *acc = NULL;
    vkt_status st = graph_model_create(ctx, c->g, c->loss, &o, NULL, 0, 0, &plain);
    if (st == VKT_OK)
        st = graph_model_create(ctx, c->g, c->loss, &o, NULL, 0, GRAPH_MODEL_ACCUMULATE, &acc);
    if (!TH_CHECK(st == VKT_OK, "%s: create: %s", what, vkt_last_error())) {
        vkt_model_destroy(plain);
        return;
    }
    vkt_model_stats ms;
    TH_OK(NULL, vkt_model_stats_get(plain, &ms));
    uint64_t n = ms.param_count; /* states included: their gradients stay 0 */
    feeds a = draw(c), b = draw(c), cc = draw(c);
    step(c, plain, &a, "plain a");
    float *ga = grads(plain, n);
    step(c, plain, &b, "plain b");
    float *gb = grads(plain, n);
    step(c, plain, &cc, "plain c");
    float *gc = grads(plain, n);

    float *junk = th_alloc_floats(n);
    th_fill_uniform(junk, n, -100, 100);
    TH_OK(NULL, vkt_model_write_grads(acc, junk, n));
    graph_model_zero_grads(acc);
    step(c, acc, &a, "accumulating a");
    float *g1 = grads(acc, n);
    char label[200];
    snprintf(label, sizeof label, "%s: zeroed, then a: g(a)", what);
    th_compare(label, g1, ga, n, 0, 0); /* the first step writes over zeros: bitwise */
    step(c, acc, &b, "accumulating b");
    float *g2 = grads(acc, n), *want = sum2(ga, gb, n);
    snprintf(label, sizeof label, "%s: a then b: g(a) + g(b)", what);
    th_compare(label, g2, want, n, 2e-6f, 1e-6f);
    free(want);
    int moved = 0; /* the second step added something: not a test that cannot fail */
    for (uint64_t i = 0; i < n; i++)
        moved |= g2[i] != g1[i];
    TH_CHECK(moved, "%s: the second step changed the gradients", what);

    graph_model_zero_grads(acc);
    step(c, acc, &cc, "accumulating c");
    float *g3 = grads(acc, n);
    snprintf(label, sizeof label, "%s: zeroed again, then c: g(c)", what);
    th_compare(label, g3, gc, n, 0, 0);
    step(c, acc, &a, "accumulating a, not zeroed");
    float *g4 = grads(acc, n);
    want = sum2(gc, ga, n);
    snprintf(label, sizeof label, "%s: c then a: g(c) + g(a)", what);
    th_compare(label, g4, want, n, 2e-6f, 1e-6f);
    free(want);

    free(junk);
    free(ga), free(gb), free(gc), free(g1), free(g2), free(g3), free(g4);
    feeds_free(c, &a), feeds_free(c, &b), feeds_free(c, &cc);
    vkt_model_destroy(plain);
    vkt_model_destroy(acc);
}

/* Check mode: each step's device gradients against the CPU reference plus what the
 * buffer held before the step. */
static void check_mode(vkt_context *ctx, const acase *c)
{
    vkt_model_options o = {.check = 1};
    vkt_model *m = NULL;
    if (!TH_CHECK(graph_model_create(ctx, c->g, c->loss, &o, NULL, 0, GRAPH_MODEL_ACCUMULATE,
                                     &m) == VKT_OK, "%s: check mode: %s", c->name,
                  vkt_last_error()))
        return;
    feeds a = draw(c), b = draw(c);
    step(c, m, &a, "check mode a");
    step(c, m, &b, "check mode b, added");
    graph_model_zero_grads(m);
    step(c, m, &a, "check mode a, zeroed");
    feeds_free(c, &a), feeds_free(c, &b);
    vkt_model_destroy(m);
}

int main(void)
{
    th_init("test_accumulate");
    acase (*const cases[])(void) = {mlp, products, long_k, convs, norms, embed};
    enum { N_CASES = sizeof cases / sizeof cases[0] };
    acase built[N_CASES];
    for (uint32_t i = 0; i < N_CASES; i++) {
        built[i] = cases[i]();
        TH_CHECK(vkt_graph_status(built[i].g) == VKT_OK, "%s: graph: %s", built[i].name,
                 vkt_graph_errmsg(built[i].g));
    }
    static const vkt_dtype precisions[] = {VKT_DTYPE_FP32, VKT_DTYPE_FP16, VKT_DTYPE_BF16};
    vkt_context *cpu = th_context(VKT_KERNELS_CPU);
    for (uint32_t i = 0; i < N_CASES; i++) {
        for (uint32_t p = 0; p < 3; p++)
            run_case(cpu, &built[i], precisions[p], "cpu");
        check_mode(cpu, &built[i]);
    }
    if (!getenv("VKT_COMPUTE_UNITS")) /* plan the GPU kernels as for an H100 */
        plat_setenv("VKT_COMPUTE_UNITS", "132");
    vkt_context *gpu = th_context(VKT_KERNELS_GPU);
    for (uint32_t i = 0; i < N_CASES; i++)
        for (uint32_t p = 0; p < 3; p++)
            run_case(gpu, &built[i], precisions[p], "gpu");
    for (uint32_t i = 0; i < N_CASES; i++)
        vkt_graph_destroy(built[i].g);
    return th_finish();
}
