/* test_split_step.c - the training step in two halves (graph_model_step_forward and
 * graph_model_step_backward, graph/runtime.h) and slot models (GRAPH_MODEL_SHARE_GRADS:
 * one parameter, state and gradient buffer, an activation arena each), what a pipeline
 * stage uses to keep its micro-batches' activations instead of recomputing them. On an
 * MLP, dropout, batch norm, layer norm, attention with dropout, and a conv net, in fp32
 * and autocast fp16 and bf16, with the CPU and the GPU kernels (planned as for 132
 * compute units), with random inputs a and b:
 *  - forward half then backward half, twice, equals the whole step twice bit for bit:
 *    the loss (read after the forward half), the gradients, and the parameters with the
 *    states (batch norm's running averages moved by the forward half);
 *  - an accumulating owner and a slot of it: forward a on the owner, forward b on the
 *    slot, backward b, backward a holds the gradient of whole steps a then b (rtol 2e-6:
 *    the adds come in the other order), and the same parameters and states;
 *  - the slot allocates two buffers fewer than an independent model (no parameters, no
 *    gradients), in vkt_context_memory_stats;
 *  - a backward half with no forward half before it, or with another run between, fails
 *    with VKT_ERROR_STATE. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/runtime.h" /* the halves, the slot flag */
#include "harness.h"
#include "platform/platform.h" /* plat_setenv: mingw has no setenv */

enum { MAX_FEEDS = 3 };

typedef struct scase {
    const char *name;
    vkt_graph *g;
    vkt_tensor *loss;
    vkt_tensor *feed[MAX_FEEDS];
    uint32_t n_feeds;
    uint32_t classes[MAX_FEEDS]; /* > 0: int32 labels drawn in [0, classes) */
} scase;

static scase begin(const char *name, uint64_t seed)
{
    scase c;
    memset(&c, 0, sizeof c);
    c.name = name;
    vkt_graph_options o = {.seed = seed};
    vkt_graph_create(&o, &c.g);
    return c;
}

static vkt_tensor *param(scase *c, const char *name, uint32_t nd, uint32_t d0, uint32_t d1,
                         uint32_t d2, uint32_t d3)
{
    vkt_shape s = {nd, {d0, d1, d2, d3}};
    vkt_init init = {VKT_INIT_UNIFORM, -0.6f, 0.6f, 0};
    return vkt_param(c->g, name, &s, &init);
}

static vkt_tensor *input(scase *c, const char *name, uint32_t nd, uint32_t d0, uint32_t d1,
                         uint32_t d2, uint32_t d3)
{
    vkt_shape s = {nd, {d0, d1, d2, d3}};
    return c->feed[c->n_feeds++] = vkt_input(c->g, name, &s);
}

static vkt_tensor *labels(scase *c, uint32_t batch, uint32_t classes)
{
    c->classes[c->n_feeds] = classes;
    return c->feed[c->n_feeds++] = vkt_input_labels(c->g, "y", batch);
}

/* ---- the cases ------------------------------------------------------------------ */

/* linear + relu (fused) -> linear -> softmax-CE (the loss fused with its gradient) */
static scase mlp(void)
{
    scase c = begin("mlp", 21);
    vkt_tensor *x = input(&c, "x", 2, 7, 13, 0, 0);
    vkt_tensor *h = vkt_relu(c.g, vkt_linear(c.g, x, param(&c, "w1", 2, 13, 19, 0, 0),
                                             param(&c, "b1", 1, 19, 0, 0, 0)));
    vkt_tensor *z = vkt_linear(c.g, h, param(&c, "w2", 2, 19, 5, 0, 0),
                               param(&c, "b2", 1, 5, 0, 0, 0));
    c.loss = vkt_softmax_cross_entropy(c.g, z, labels(&c, 7, 5));
    return c;
}

/* dropout between two linears, mse */
static scase dropout(void)
{
    scase c = begin("dropout", 22);
    vkt_tensor *x = input(&c, "x", 2, 9, 11, 0, 0);
    vkt_tensor *h = vkt_tanh(c.g, vkt_linear(c.g, x, param(&c, "w1", 2, 11, 17, 0, 0), NULL));
    h = vkt_dropout(c.g, h, 0.3f);
    vkt_tensor *z = vkt_linear(c.g, h, param(&c, "w2", 2, 17, 6, 0, 0),
                               param(&c, "b2", 1, 6, 0, 0, 0));
    c.loss = vkt_mse(c.g, z, input(&c, "t", 2, 9, 6, 0, 0));
    return c;
}

/* batch norm (its running averages are states the forward moves) */
static scase batch_norm(void)
{
    scase c = begin("batch norm", 23);
    vkt_tensor *x = input(&c, "x", 2, 10, 9, 0, 0);
    vkt_tensor *h = vkt_linear(c.g, x, param(&c, "w", 2, 9, 8, 0, 0), NULL);
    vkt_shape s8 = {1, {8}};
    vkt_init one = {VKT_INIT_CONSTANT, 1.0f, 0, 0};
    h = vkt_batch_norm(c.g, h, param(&c, "bn_g", 1, 8, 0, 0, 0), param(&c, "bn_b", 1, 8, 0, 0, 0),
                       vkt_state(c.g, "bn_mean", &s8, NULL), vkt_state(c.g, "bn_var", &s8, &one),
                       0, 0);
    vkt_tensor *z = vkt_linear(c.g, vkt_relu(c.g, h), param(&c, "w2", 2, 8, 4, 0, 0), NULL);
    c.loss = vkt_softmax_cross_entropy(c.g, z, labels(&c, 10, 4));
    return c;
}

/* layer norm and gelu */
static scase layer_norm(void)
{
    scase c = begin("layer norm", 24);
    vkt_tensor *x = input(&c, "x", 2, 6, 12, 0, 0);
    vkt_tensor *h = vkt_layer_norm(c.g, x, param(&c, "ln_g", 1, 12, 0, 0, 0),
                                   param(&c, "ln_b", 1, 12, 0, 0, 0), 0);
    h = vkt_gelu(c.g, vkt_linear(c.g, h, param(&c, "w", 2, 12, 10, 0, 0),
                                 param(&c, "b", 1, 10, 0, 0, 0)));
    c.loss = vkt_mse(c.g, h, input(&c, "t", 2, 6, 10, 0, 0));
    return c;
}

/* causal attention with dropout on its weights, over [B=3, T=5, C=8], 2 heads */
static scase attention(void)
{
    scase c = begin("attention with dropout", 25);
    vkt_tensor *x = input(&c, "x", 3, 3, 5, 8, 0);
    vkt_tensor *qkv = vkt_linear(c.g, x, param(&c, "wqkv", 2, 8, 24, 0, 0), NULL);
    vkt_tensor *a = vkt_causal_attention(c.g, qkv, 2, 0.25f);
    vkt_tensor *z = vkt_linear(c.g, a, param(&c, "wo", 2, 8, 8, 0, 0), NULL);
    c.loss = vkt_mse(c.g, z, input(&c, "t", 3, 3, 5, 8, 0));
    return c;
}

/* conv2d + relu (fused), pooled, linear */
static scase conv(void)
{
    scase c = begin("conv", 26);
    vkt_tensor *x = input(&c, "x", 4, 3, 2, 7, 6);
    vkt_tensor *h = vkt_relu(c.g, vkt_conv2d(c.g, x, param(&c, "k1", 4, 4, 2, 3, 3),
                                             param(&c, "kb1", 1, 4, 0, 0, 0), NULL));
    vkt_tensor *z = vkt_linear(c.g, vkt_global_avg_pool(c.g, h), param(&c, "w", 2, 4, 3, 0, 0),
                               NULL);
    c.loss = vkt_softmax_cross_entropy(c.g, z, labels(&c, 3, 3));
    return c;
}

/* ---- running ---------------------------------------------------------------------- */

typedef struct feeds {
    void *data[MAX_FEEDS];
    uint64_t n[MAX_FEEDS];
} feeds;

static feeds draw(const scase *c)
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
            if (c->classes[i])
                ((int32_t *)f.data[i])[j] = (int32_t)(th_rand_u64() % c->classes[i]);
            else
                ((float *)f.data[i])[j] = th_rand_uniform(-1, 1);
        }
    }
    return f;
}

static void feeds_free(const scase *c, feeds *f)
{
    for (uint32_t i = 0; i < c->n_feeds; i++)
        free(f->data[i]);
}

static void set_inputs(const scase *c, vkt_model *m, const feeds *f)
{
    for (uint32_t i = 0; i < c->n_feeds; i++)
        TH_OK(NULL, vkt_model_set_input(m, c->feed[i], f->data[i], f->n[i]));
}

/* The whole step on f; returns its loss. */
static float whole(const scase *c, vkt_model *m, const feeds *f, const char *what)
{
    set_inputs(c, m, f);
    float loss = 0;
    TH_CHECK(vkt_model_forward_backward(m) == VKT_OK, "%s: whole step: %s", what,
             vkt_model_errmsg(m));
    TH_OK(NULL, vkt_model_loss(m, &loss));
    return loss;
}

/* The forward half on f; returns the loss it computed. */
static float forward_half(const scase *c, vkt_model *m, const feeds *f, const char *what)
{
    set_inputs(c, m, f);
    float loss = 0;
    TH_CHECK(graph_model_step_forward(m) == VKT_OK, "%s: forward half: %s", what,
             vkt_model_errmsg(m));
    TH_OK(NULL, vkt_model_loss(m, &loss));
    return loss;
}

static void backward_half(vkt_model *m, const char *what)
{
    TH_CHECK(graph_model_step_backward(m) == VKT_OK, "%s: backward half: %s", what,
             vkt_model_errmsg(m));
}

static float *read_all(vkt_model *m, uint64_t n, int grads)
{
    float *x = th_alloc_floats(n);
    TH_OK(NULL, grads ? vkt_model_read_grads(m, x, n) : vkt_model_read_params(m, x, n));
    return x;
}

static void compare_models(const char *what, vkt_model *got, vkt_model *want, uint64_t n,
                           float rtol)
{
    char label[240];
    float *g = read_all(got, n, 1), *w = read_all(want, n, 1);
    snprintf(label, sizeof label, "%s: gradients", what);
    th_compare(label, g, w, n, rtol, rtol ? 1e-6f : 0);
    int nonzero = 0; /* a gradient was computed: not a test that cannot fail */
    for (uint64_t i = 0; i < n; i++)
        nonzero |= w[i] != 0;
    TH_CHECK(nonzero, "%s: the gradients are all zero", what);
    free(g), free(w);
    g = read_all(got, n, 0), w = read_all(want, n, 0);
    snprintf(label, sizeof label, "%s: parameters and states", what);
    th_compare(label, g, w, n, 0, 0);
    free(g), free(w);
}

/* Forward half + backward half, twice, against the whole step twice: bit for bit. */
static void halves(vkt_context *ctx, const scase *c, const vkt_model_options *o,
                   const char *what, const feeds *a, const feeds *b)
{
    vkt_model *ref = NULL, *m = NULL;
    vkt_status st = vkt_model_create(ctx, c->g, c->loss, o, &ref);
    if (st == VKT_OK)
        st = vkt_model_create(ctx, c->g, c->loss, o, &m);
    if (!TH_CHECK(st == VKT_OK, "%s: create: %s", what, vkt_last_error())) {
        vkt_model_destroy(ref);
        return;
    }
    uint64_t n = vkt_model_param_count(ref);
    char label[240];
    const feeds *f[2] = {a, b};
    for (int k = 0; k < 2; k++) {
        float lw = whole(c, ref, f[k], what), lh = forward_half(c, m, f[k], what);
        backward_half(m, what);
        TH_CHECK(memcmp(&lw, &lh, 4) == 0, "%s: step %d: loss %.9g after the forward half, "
                 "%.9g from the whole step", what, k, (double)lh, (double)lw);
    }
    TH_CHECK(vkt_model_step_index(m) == 2, "%s: the halves advanced the step index to %llu, "
             "not 2", what, (unsigned long long)vkt_model_step_index(m));
    snprintf(label, sizeof label, "%s: halves vs whole steps", what);
    compare_models(label, m, ref, n, 0);
    /* the backward half continues only the forward half right before it */
    TH_STATUS(NULL, graph_model_step_backward(m), VKT_ERROR_STATE);
    (void)forward_half(c, m, a, what);
    TH_OK(NULL, vkt_model_forward(m));
    TH_STATUS(NULL, graph_model_step_backward(m), VKT_ERROR_STATE);
    vkt_model_destroy(m);
    vkt_model_destroy(ref);
}

static uint32_t allocations(vkt_context *ctx)
{
    vkt_memory_stats ms;
    TH_OK(ctx, vkt_context_memory_stats(ctx, &ms));
    return ms.allocation_count;
}

/* An owner and a slot holding two steps in flight, against whole steps a then b. */
static void slots(vkt_context *ctx, const scase *c, const vkt_model_options *o,
                  const char *what, const feeds *a, const feeds *b)
{
    vkt_model *ref = NULL, *own = NULL, *slot = NULL, *alone = NULL;
    vkt_status st = graph_model_create(ctx, c->g, c->loss, o, NULL, 0, GRAPH_MODEL_ACCUMULATE,
                                       &ref);
    if (st == VKT_OK)
        st = graph_model_create(ctx, c->g, c->loss, o, NULL, 0, GRAPH_MODEL_ACCUMULATE, &own);
    uint32_t before = allocations(ctx);
    if (st == VKT_OK)
        st = graph_model_create(ctx, c->g, c->loss, o, NULL, 0, GRAPH_MODEL_ACCUMULATE, &alone);
    uint32_t mid = allocations(ctx);
    vkt_model_options so = *o;
    so.share_params = own;
    if (st == VKT_OK)
        st = graph_model_create(ctx, c->g, c->loss, &so, NULL, 0,
                                GRAPH_MODEL_ACCUMULATE | GRAPH_MODEL_SHARE_GRADS, &slot);
    uint32_t after = allocations(ctx);
    if (!TH_CHECK(st == VKT_OK, "%s: create: %s", what, vkt_last_error())) {
        vkt_model_destroy(ref), vkt_model_destroy(own), vkt_model_destroy(alone);
        return;
    }
    TH_CHECK(after - mid + 2 == mid - before, "%s: a slot model made %u allocations, an "
             "independent one %u: the slot must have no parameter or gradient buffer of its "
             "own", what, after - mid, mid - before);
    uint64_t n = vkt_model_param_count(ref);
    graph_model_zero_grads(ref);
    (void)whole(c, ref, a, what);
    (void)whole(c, ref, b, what);

    float *junk = th_alloc_floats(n); /* zeroing through the slot reaches the one buffer */
    th_fill_uniform(junk, n, -100, 100);
    TH_OK(NULL, vkt_model_write_grads(own, junk, n));
    free(junk);
    graph_model_zero_grads(slot);
    vkt_model_set_step_index(slot, 1); /* b is the second step: its dropout draws */
    (void)forward_half(c, own, a, what);
    (void)forward_half(c, slot, b, what);
    backward_half(slot, what);
    backward_half(own, what);
    char label[240];
    snprintf(label, sizeof label, "%s: slots (forward a, forward b, backward b, backward a) "
             "vs whole steps a, b", what);
    compare_models(label, own, ref, n, 2e-6f);
    vkt_model_destroy(slot);
    vkt_model_destroy(alone);
    vkt_model_destroy(own);
    vkt_model_destroy(ref);
}

static void run_case(vkt_context *ctx, const scase *c, vkt_dtype precision, const char *kernels)
{
    char what[160];
    snprintf(what, sizeof what, "%s (%s, %s kernels)", c->name, vkt_dtype_name(precision),
             kernels);
    vkt_model_options o = {.precision = precision};
    feeds a = draw(c), b = draw(c);
    halves(ctx, c, &o, what, &a, &b);
    slots(ctx, c, &o, what, &a, &b);
    feeds_free(c, &a), feeds_free(c, &b);
}

/* A slot needs a training owner with the same flags. */
static void refusals(vkt_context *ctx, const scase *c)
{
    vkt_model *own = NULL, *slot = NULL;
    TH_OK(NULL, graph_model_create(ctx, c->g, c->loss, NULL, NULL, 0, 0, &own));
    vkt_model_options so = {.share_params = own};
    TH_STATUS(NULL, graph_model_create(ctx, c->g, c->loss, NULL, NULL, 0,
                                       GRAPH_MODEL_SHARE_GRADS, &slot), VKT_ERROR_INVALID_ARGUMENT);
    TH_STATUS(NULL, graph_model_create(ctx, c->g, c->loss, &so, NULL, 0,
                                       GRAPH_MODEL_SHARE_GRADS | GRAPH_MODEL_ACCUMULATE, &slot),
              VKT_ERROR_INVALID_ARGUMENT);
    TH_CHECK(slot == NULL, "a refused slot model is NULL");
    vkt_model_destroy(own);
}

int main(void)
{
    th_init("test_split_step");
    scase (*const cases[])(void) = {mlp, dropout, batch_norm, layer_norm, attention, conv};
    enum { N_CASES = sizeof cases / sizeof cases[0] };
    scase built[N_CASES];
    for (uint32_t i = 0; i < N_CASES; i++) {
        built[i] = cases[i]();
        TH_CHECK(vkt_graph_status(built[i].g) == VKT_OK, "%s: graph: %s", built[i].name,
                 vkt_graph_errmsg(built[i].g));
    }
    static const vkt_dtype precisions[] = {VKT_DTYPE_FP32, VKT_DTYPE_FP16, VKT_DTYPE_BF16};
    vkt_context *cpu = th_context(VKT_KERNELS_CPU);
    refusals(cpu, &built[0]);
    for (uint32_t i = 0; i < N_CASES; i++)
        for (uint32_t p = 0; p < 3; p++)
            run_case(cpu, &built[i], precisions[p], "cpu");
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
