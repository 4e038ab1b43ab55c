/* Autodiff: gradients of tensors used several times are summed (a node used twice by
 * one op, diamonds, tied weights, every "add into" path of the backward), parameters
 * the loss does not reach get zero, other batch sizes, and graph-building errors: a
 * shape mismatch names the op and both shapes, NULL propagates, the first error sticks. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph.h"
#include "harness.h"

static vkt_context *g_ctx;

typedef struct gcase {
    const char *name;
    vkt_graph *g;
    vkt_tensor *params[48], *inputs[4];
    uint32_t n_params, n_inputs;
    vkt_tensor *loss;
} gcase;

static gcase begin(const char *name)
{
    gcase c;
    memset(&c, 0, sizeof c);
    c.name = name;
    vkt_graph_options o = {.seed = 5};
    vkt_graph_create(&o, &c.g);
    return c;
}

static vkt_tensor *P(gcase *c, uint32_t nd, uint32_t d0, uint32_t d1)
{
    vkt_shape s = {nd, {d0, d1}};
    char name[16];
    snprintf(name, sizeof name, "p%u", c->n_params);
    vkt_init init = {VKT_INIT_UNIFORM, -1.0f, 1.0f, 300 + c->n_params};
    return c->params[c->n_params++] = vkt_param(c->g, name, &s, &init);
}

static vkt_tensor *X(gcase *c, uint32_t d0, uint32_t d1)
{
    vkt_shape s = {2, {d0, d1}};
    char name[16];
    snprintf(name, sizeof name, "x%u", c->n_inputs);
    return c->inputs[c->n_inputs++] = vkt_input(c->g, name, &s);
}

static uint64_t count_at(const graph_ref *r, const vkt_tensor *t) { return r->count[t->id]; }

/* The same step without memory reuse gives bitwise the same gradients: the memory plan
 * never lets two values that are alive at once share memory. */
static void same_without_reuse(gcase *c, vkt_model *m, uint32_t batch)
{
    vkt_model_options o = {.batch = batch, .no_memory_reuse = 1};
    vkt_model *plain = NULL;
    if (!TH_CHECK(vkt_model_create(g_ctx, c->g, c->loss, &o, &plain) == VKT_OK, "%s: %s",
                  c->name, vkt_last_error()))
        return;
    for (uint32_t i = 0; i < c->n_inputs; i++) {
        vkt_shape s = vkt_tensor_shape(c->inputs[i]);
        uint64_t n = graph_count(&s) / s.dims[0] * vkt_model_batch(m);
        float *x = th_alloc_floats(n);
        TH_OK(g_ctx, vkt_model_read(m, c->inputs[i], x, n));
        TH_OK(g_ctx, vkt_model_set_input(plain, c->inputs[i], x, n));
        free(x);
    }
    TH_OK(g_ctx, vkt_model_forward_backward(plain));
    uint64_t np = vkt_model_param_count(m);
    float *a = th_alloc_floats(np), *b = th_alloc_floats(np);
    TH_OK(g_ctx, vkt_model_read_grads(m, a, np));
    TH_OK(g_ctx, vkt_model_read_grads(plain, b, np));
    vkt_model_stats sa, sb;
    TH_OK(g_ctx, vkt_model_stats_get(m, &sa));
    TH_OK(g_ctx, vkt_model_stats_get(plain, &sb));
    TH_CHECK(memcmp(a, b, np * 4) == 0, "%s: planned (%llu bytes) and unplanned (%llu bytes) "
             "memory give the same gradients", c->name, (unsigned long long)sa.activation_bytes,
             (unsigned long long)sb.activation_bytes);
    free(a);
    free(b);
    vkt_model_destroy(plain);
}

/* Device step at `batch` (0: as built) against the double reference: loss and every
 * parameter's gradient. */
static void run_case(gcase *c, uint32_t batch)
{
    graph_ref ref;
    char msg[VKT_ERRMSG_SIZE];
    if (!TH_CHECK(vkt_graph_status(c->g) == VKT_OK, "%s: graph: %s", c->name,
                  vkt_graph_errmsg(c->g)) ||
        !TH_CHECK(graph_ref_init(&ref, c->g, batch, msg, sizeof msg) == VKT_OK, "%s: %s",
                  c->name, msg)) {
        vkt_graph_destroy(c->g);
        return;
    }
    vkt_model_options o = {.batch = batch};
    vkt_model *m = NULL;
    vkt_status st = vkt_model_create(g_ctx, c->g, c->loss, &o, &m);
    if (TH_CHECK(st == VKT_OK, "%s: model: %s", c->name, vkt_last_error())) {
        for (uint32_t i = 0; i < c->n_inputs; i++) {
            uint64_t n = count_at(&ref, c->inputs[i]);
            float *x = th_alloc_floats(n);
            th_fill_uniform(x, n, -1, 1);
            graph_ref_set(&ref, c->inputs[i], x);
            TH_OK(g_ctx, vkt_model_set_input(m, c->inputs[i], x, n));
            free(x);
        }
        graph_ref_run_forward(&ref);
        graph_ref_run_backward(&ref, c->loss);
        st = vkt_model_forward_backward(m);
        TH_CHECK(st == VKT_OK, "%s: step: %s", c->name, vkt_model_errmsg(m));
        float loss = 0;
        TH_OK(g_ctx, vkt_model_loss(m, &loss));
        double want = ref.val[c->loss->id][0];
        TH_CHECK(fabs(loss - want) <= 1e-4 * (1 + fabs(want)), "%s: loss %.7g, reference %.7g",
                 c->name, loss, want);
        for (uint32_t p = 0; p < c->n_params; p++) {
            uint64_t n = count_at(&ref, c->params[p]);
            float *got = th_alloc_floats(n), *w = th_alloc_floats(n);
            TH_OK(g_ctx, vkt_model_read_grad(m, c->params[p], got, n));
            for (uint64_t e = 0; e < n; e++)
                w[e] = (float)ref.grad[c->params[p]->id][e];
            char what[128];
            snprintf(what, sizeof what, "%s: gradient of %s", c->name, c->params[p]->name);
            th_compare(what, got, w, n, 1e-4f, 1e-5f);
            free(got);
            free(w);
        }
        same_without_reuse(c, m, batch);
    }
    vkt_model_destroy(m);
    graph_ref_free(&ref);
    vkt_graph_destroy(c->g);
}

static void test_used_twice(void)
{
    gcase c = begin("mul(p, p)");
    vkt_tensor *p = P(&c, 2, 5, 7);
    c.loss = vkt_sum(c.g, vkt_mul(c.g, p, p), -1); /* d/dp sum p^2 = 2p */
    run_case(&c, 0);

    c = begin("matmul(w, w)");
    vkt_tensor *w = P(&c, 2, 6, 6);
    c.loss = vkt_sum(c.g, vkt_mul(c.g, vkt_matmul(c.g, w, w), X(&c, 6, 6)), -1);
    run_case(&c, 0);

    c = begin("add(h, h) after tanh");
    vkt_tensor *h = vkt_tanh(c.g, P(&c, 2, 3, 4));
    c.loss = vkt_mean(c.g, vkt_mul(c.g, vkt_add(c.g, h, h), X(&c, 3, 4)), -1);
    run_case(&c, 0);
}

static void test_diamond(void)
{
    gcase c = begin("diamond: relu(h) * sigmoid(h), h = linear");
    vkt_tensor *x = X(&c, 9, 5);
    vkt_tensor *h = vkt_linear(c.g, x, P(&c, 2, 5, 7), P(&c, 1, 7, 0));
    vkt_tensor *a = vkt_relu(c.g, h), *b = vkt_sigmoid(c.g, h);
    c.loss = vkt_sum(c.g, vkt_mul(c.g, vkt_mul(c.g, a, b), X(&c, 9, 7)), -1);
    run_case(&c, 0);

    c = begin("diamond over a parameter, four uses of every kind");
    vkt_tensor *big = P(&c, 2, 5, 7), *s = P(&c, 1, 7, 0);
    vkt_tensor *u1 = vkt_add(c.g, big, s);              /* s broadcast: reduced gradient */
    vkt_tensor *u2 = vkt_mul(c.g, big, s);              /* both through a scratch add */
    vkt_tensor *u3 = vkt_softmax(c.g, big);        /* scratch add */
    vkt_tensor *u4 = vkt_sub(c.g, vkt_scale(c.g, big, 0.5f), vkt_transpose(c.g,
                             vkt_transpose(c.g, big)));
    vkt_tensor *all[4] = {u1, u2, u3, u4};
    vkt_tensor *cat = vkt_concat(c.g, all, 4, 0);
    c.loss = vkt_sum(c.g, vkt_mul(c.g, cat, X(&c, 20, 7)), -1);
    run_case(&c, 0);
}

static void test_tied_weights(void)
{
    gcase c = begin("tied weights: one w and b in two fused linears, x used twice");
    vkt_tensor *x = X(&c, 11, 6);
    vkt_tensor *w = P(&c, 2, 6, 6), *b = P(&c, 1, 6, 0);
    vkt_tensor *h1 = vkt_gelu(c.g, vkt_linear(c.g, x, w, b));
    vkt_tensor *h2 = vkt_tanh(c.g, vkt_linear(c.g, h1, w, b));
    vkt_tensor *h3 = vkt_relu(c.g, vkt_linear(c.g, vkt_add(c.g, h2, h1), w, NULL));
    c.loss = vkt_softmax_cross_entropy(c.g, h3, NULL); /* NULL labels: an error */
    TH_CHECK(c.loss == NULL && vkt_graph_status(c.g) == VKT_ERROR_INVALID_ARGUMENT,
             "NULL labels give NULL and an error");
    vkt_graph_destroy(c.g);

    c = begin("tied weights: one w and b in two fused linears, h1 used twice");
    x = X(&c, 11, 6);
    w = P(&c, 2, 6, 6);
    b = P(&c, 1, 6, 0);
    h1 = vkt_gelu(c.g, vkt_linear(c.g, x, w, b));
    h2 = vkt_tanh(c.g, vkt_linear(c.g, h1, w, b));
    h3 = vkt_leaky_relu(c.g, vkt_linear(c.g, vkt_add(c.g, h2, h1), w, NULL), 0.2f);
    c.loss = vkt_mse(c.g, h3, X(&c, 11, 6));
    run_case(&c, 0);
}

static void test_unreached_and_batch(void)
{
    gcase c = begin("a parameter the loss does not reach");
    vkt_tensor *used = P(&c, 2, 3, 4), *unused = P(&c, 2, 3, 4);
    vkt_keep(c.g, vkt_relu(c.g, unused)); /* computed, but not part of the loss */
    c.loss = vkt_sum(c.g, vkt_mul(c.g, used, X(&c, 3, 4)), -1);
    run_case(&c, 0); /* the reference gradient of `unused` is 0, so the device's must be */

    c = begin("batch 3 of a graph built at batch 8, reshape with 0");
    vkt_tensor *x = X(&c, 8, 12);
    vkt_shape s3 = {3, {0, 3, 4}}, s2 = {2, {0, 12}};
    vkt_tensor *r = vkt_reshape(c.g, vkt_tanh(c.g, x), &s3);
    vkt_tensor *back = vkt_reshape(c.g, vkt_softmax(c.g, r), &s2);
    vkt_tensor *h = vkt_linear(c.g, back, P(&c, 2, 12, 5), P(&c, 1, 5, 0));
    c.loss = vkt_mean(c.g, vkt_sigmoid(c.g, h), -1);
    run_case(&c, 3);

    /* A reshape to a fixed batch does not fit another batch: the error names it. */
    vkt_graph *g = NULL;
    vkt_graph_create(NULL, &g);
    vkt_shape xs = {2, {4, 6}}, fixed = {1, {24}};
    vkt_tensor *loss = vkt_sum(g, vkt_reshape(g, vkt_input(g, "x", &xs), &fixed), -1);
    vkt_model_options o = {.batch = 5};
    vkt_model *m = NULL;
    vkt_status st = vkt_model_create(g_ctx, g, loss, &o, &m);
    TH_CHECK(st == VKT_ERROR_SHAPE && m == NULL, "batch 5 with a fixed reshape fails (%s)",
             vkt_status_name(st));
    TH_CHECK(strstr(vkt_last_error(), "vkt_reshape") && strstr(vkt_last_error(), "[5,6]") &&
                 strstr(vkt_last_error(), "[24]"),
             "the message names the op and both shapes: %s", vkt_last_error());
    vkt_graph_destroy(g);
}

static int has(const char *msg, const char *a, const char *b, const char *c)
{
    return strstr(msg, a) && strstr(msg, b) && strstr(msg, c);
}

static void test_shape_errors(void)
{
    vkt_graph *g = NULL;
    TH_CHECK(vkt_graph_create(NULL, &g) == VKT_OK, "graph");
    vkt_shape s45 = {2, {4, 5}}, s67 = {2, {6, 7}}, s34 = {2, {3, 4}}, s5 = {1, {5}};
    vkt_tensor *a = vkt_param(g, "a", &s45, NULL), *b = vkt_param(g, "b", &s67, NULL);
    TH_CHECK(vkt_matmul(g, a, b) == NULL, "matmul of [4,5] and [6,7] is NULL");
    TH_CHECK(vkt_graph_status(g) == VKT_ERROR_SHAPE, "status VKT_ERROR_SHAPE");
    const char *first = vkt_graph_errmsg(g);
    TH_CHECK(has(first, "vkt_matmul", "[4,5]", "[6,7]"), "message: %s", first);
    char kept[VKT_ERRMSG_SIZE];
    snprintf(kept, sizeof kept, "%s", first);
    /* Later errors do not replace the first; NULL propagates through a chain. */
    vkt_tensor *c = vkt_param(g, "c", &s34, NULL);
    TH_CHECK(vkt_add(g, c, vkt_param(g, "d", &s5, NULL)) == NULL, "add [3,4] + [5] is NULL");
    TH_CHECK(has(vkt_last_error(), "vkt_add", "[3,4]", "[5]"),
             "the thread's last error names add and both shapes: %s", vkt_last_error());
    vkt_tensor *chain = vkt_relu(g, vkt_sum(g, vkt_tanh(g, vkt_matmul(g, a, b)), -1));
    TH_CHECK(chain == NULL, "NULL propagates through relu(sum(tanh(NULL)))");
    TH_CHECK(strcmp(vkt_graph_errmsg(g), kept) == 0, "the first error sticks: %s",
             vkt_graph_errmsg(g));
    vkt_model *m = NULL;
    vkt_status st = vkt_model_create(g_ctx, g, chain, NULL, &m);
    TH_CHECK(st == VKT_ERROR_SHAPE && !m && strstr(vkt_last_error(), "vkt_matmul"),
             "no model from a failed graph: %s (%s)", vkt_status_name(st), vkt_last_error());
    vkt_graph_destroy(g);

    struct {
        const char *op, *sa, *sb;
    } cases[] = {{"vkt_linear", "[2,3]", "[4,5]"}, {"vkt_mse", "[2,3]", "[3,2]"},
                 {"vkt_concat", "[2,3]", "[4,5]"}, {"vkt_softmax_cross_entropy", "[2,3]", "[5]"},
                 {"vkt_mul", "[2,3]", "[4,5]"}};
    for (unsigned k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        vkt_graph_create(NULL, &g);
        vkt_shape s23 = {2, {2, 3}}, s32 = {2, {3, 2}};
        vkt_tensor *x = vkt_input(g, "x", &s23), *w = vkt_param(g, "w", &s45, NULL);
        vkt_tensor *r = NULL;
        if (k == 0)
            r = vkt_linear(g, x, w, NULL);
        else if (k == 1)
            r = vkt_mse(g, x, vkt_param(g, "t", &s32, NULL));
        else if (k == 2) {
            vkt_tensor *two[2] = {x, w};
            r = vkt_concat(g, two, 2, 1);
        } else if (k == 3)
            r = vkt_softmax_cross_entropy(g, x, vkt_input_labels(g, "l", 5));
        else
            r = vkt_mul(g, x, w);
        TH_CHECK(r == NULL && vkt_graph_status(g) == VKT_ERROR_SHAPE &&
                     has(vkt_graph_errmsg(g), cases[k].op, cases[k].sa, cases[k].sb),
                 "%s: %s", cases[k].op, vkt_graph_errmsg(g));
        vkt_graph_destroy(g);
    }

    /* Other argument errors. */
    vkt_graph_create(NULL, &g);
    vkt_tensor *x = vkt_input(g, "x", &s45);
    TH_CHECK(vkt_relu(NULL, x) == NULL, "a NULL graph gives NULL");
    TH_CHECK(vkt_relu(g, NULL) == NULL && vkt_graph_status(g) == VKT_ERROR_INVALID_ARGUMENT &&
                 strstr(vkt_graph_errmsg(g), "vkt_relu"),
             "a NULL input names the op: %s", vkt_graph_errmsg(g));
    vkt_graph_destroy(g);
    vkt_graph_create(NULL, &g);
    vkt_graph *other = NULL;
    vkt_graph_create(NULL, &other);
    x = vkt_input(g, "x", &s45);
    vkt_tensor *y = vkt_input(other, "y", &s45);
    TH_CHECK(vkt_add(g, x, y) == NULL && strstr(vkt_graph_errmsg(g), "another graph"),
             "mixing graphs: %s", vkt_graph_errmsg(g));
    vkt_graph_destroy(other);
    vkt_graph_destroy(g);
    vkt_graph_create(NULL, &g);
    x = vkt_input(g, "x", &s45);
    vkt_tensor *labels = vkt_input_labels(g, "labels", 4);
    TH_CHECK(vkt_relu(g, labels) == NULL && strstr(vkt_graph_errmsg(g), "integer"),
             "labels into relu: %s", vkt_graph_errmsg(g));
    vkt_graph_destroy(g);
    vkt_graph_create(NULL, &g);
    x = vkt_input(g, "x", &s45);
    TH_CHECK(vkt_dropout(g, x, 1.0f) == NULL && strstr(vkt_graph_errmsg(g), "vkt_dropout"),
             "dropout p = 1: %s", vkt_graph_errmsg(g));
    vkt_graph_destroy(g);
    vkt_graph_create(NULL, &g);
    x = vkt_input(g, "x", &s45);
    st = vkt_model_create(g_ctx, g, vkt_relu(g, x), NULL, &m);
    TH_CHECK(st == VKT_ERROR_INVALID_ARGUMENT && strstr(vkt_last_error(), "scalar"),
             "a non-scalar loss: %s", vkt_last_error());
    vkt_graph_destroy(g);
    vkt_graph_destroy(NULL);
    vkt_model_destroy(NULL);
}

/* Random graphs of [6,8] tensors over every kind of op (fused and unfused linears,
 * broadcasts, splits, views, dropout), each tensor used any number of times: the device
 * against the reference, and the planned memory against none reused. */
static vkt_tensor *random_op(gcase *c, vkt_tensor **pool, uint32_t n)
{
    vkt_graph *g = c->g;
    vkt_tensor *a = pool[n - 1 - th_rand_u64() % (n < 3 ? n : 3)]; /* mostly recent */
    vkt_tensor *b = pool[th_rand_u64() % n];
    vkt_shape flat = {1, {48}}, back = {2, {6, 8}};
    uint32_t sizes[2] = {3, 5};
    vkt_tensor *parts[2];
    switch (th_rand_u64() % 15) {
    case 0: return vkt_add(g, a, b);
    case 1: return vkt_sub(g, a, b);
    case 2: return vkt_mul(g, a, vkt_tanh(g, b));
    case 3: return vkt_tanh(g, a);
    case 4: return vkt_sigmoid(g, a);
    case 5: return vkt_relu(g, vkt_linear(g, a, P(c, 2, 8, 8), P(c, 1, 8, 0)));
    case 6: return vkt_gelu(g, vkt_linear(g, a, P(c, 2, 8, 8), P(c, 1, 8, 0)));
    case 7: return vkt_scale(g, a, -0.75f);
    case 8: return vkt_softmax(g, a);
    case 9: return vkt_transpose(g, vkt_transpose(g, a));
    case 10: return vkt_reshape(g, vkt_tanh(g, vkt_reshape(g, a, &flat)), &back);
    case 11:
        vkt_split(g, a, 1, sizes, 2, parts);
        return vkt_concat(g, (vkt_tensor *[]){parts[1], vkt_sigmoid(g, parts[0])}, 2, 1);
    case 12: return vkt_dropout(g, a, 0.25f);
    case 13: return vkt_leaky_relu(g, vkt_linear(g, a, P(c, 2, 8, 8), NULL), -0.1f);
    default: /* a weight made of another tensor: b^T b / 8 */
        return vkt_add(g, vkt_linear(g, a, vkt_scale(g, vkt_matmul(g, vkt_transpose(g, b), b),
                                                      0.125f), NULL), P(c, 1, 8, 0));
    }
}

static void test_random_graphs(void)
{
    th_seed(4242);
    for (int k = 0; k < 24; k++) {
        char name[32];
        snprintf(name, sizeof name, "random graph %d", k);
        gcase c = begin(name);
        vkt_tensor *pool[32];
        uint32_t n = 0;
        pool[n++] = X(&c, 6, 8);
        pool[n++] = vkt_tanh(c.g, P(&c, 2, 6, 8));
        uint32_t ops = 4 + (uint32_t)(th_rand_u64() % 10);
        for (uint32_t i = 0; i < ops && c.n_params < 40; i++) {
            vkt_tensor *t = random_op(&c, pool, n);
            pool[n++] = t;
        }
        vkt_tensor *other = pool[1 + th_rand_u64() % (n - 1)];
        c.loss = vkt_sum(c.g, vkt_mul(c.g, vkt_add(c.g, pool[n - 1], other), X(&c, 6, 8)), -1);
        run_case(&c, 0);
    }
}

int main(void)
{
    th_init("test_autodiff");
    g_ctx = th_context(VKT_KERNELS_AUTO);
    test_used_twice();
    test_diamond();
    test_tied_weights();
    test_unreached_and_batch();
    test_shape_errors();
    test_random_graphs();
    return th_finish();
}
