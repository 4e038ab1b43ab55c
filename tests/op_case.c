/* op_case.c - see op_case.h. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "graph/model.h"
#include "op_case.h"

static vkt_context *g_ctx;

static void record_fused(const vkt_model *m);

void oc_set_context(vkt_context *ctx) { g_ctx = ctx; }

op_case begin(const char *name)
{
    op_case c;
    memset(&c, 0, sizeof c);
    c.name = name;
    c.rtol = 1e-4f;
    c.atol = 1e-5f;
    vkt_graph_options o = {.seed = 77};
    TH_CHECK(vkt_graph_create(&o, &c.g) == VKT_OK, "graph create");
    return c;
}

vkt_tensor *P(op_case *c, uint32_t nd, uint32_t d0, uint32_t d1, uint32_t d2)
{
    vkt_shape s = {nd, {d0, d1, d2}};
    char name[16];
    snprintf(name, sizeof name, "p%u", c->n_params);
    vkt_init init = {VKT_INIT_UNIFORM, -1.0f, 1.0f, 1000 + c->n_params};
    return c->params[c->n_params++] = vkt_param(c->g, name, &s, &init);
}

vkt_tensor *P4(op_case *c, uint32_t d0, uint32_t d1, uint32_t d2, uint32_t d3)
{
    vkt_shape s = {4, {d0, d1, d2, d3}};
    char name[16];
    snprintf(name, sizeof name, "p%u", c->n_params);
    vkt_init init = {VKT_INIT_UNIFORM, -1.0f, 1.0f, 1000 + c->n_params};
    return c->params[c->n_params++] = vkt_param(c->g, name, &s, &init);
}

vkt_tensor *labels_shape(op_case *c, const vkt_shape *s, uint32_t classes)
{
    uint64_t n = graph_count(s);
    for (uint64_t i = 0; i < n && i < 64; i++)
        c->labels_data[i] = (int32_t)(th_rand_u64() % classes);
    return c->labels = vkt_input_labels_shape(c->g, "labels", s);
}

vkt_tensor *oc_input(op_case *c, const char *name, const vkt_shape *s, const float *data)
{
    uint64_t n = graph_count(s);
    float *copy = malloc(n * sizeof *copy);
    memcpy(copy, data, n * sizeof *copy);
    c->input_data[c->n_inputs] = copy;
    return c->inputs[c->n_inputs++] = vkt_input(c->g, name, s);
}

vkt_tensor *labels(op_case *c, uint32_t batch, uint32_t classes)
{
    for (uint32_t i = 0; i < batch; i++)
        c->labels_data[i] = (int32_t)(th_rand_u64() % classes);
    return c->labels = vkt_input_labels(c->g, "labels", batch);
}

/* loss = sum(y * r), r random: every output element gets its own weight. */
void finish(op_case *c, vkt_tensor *y)
{
    c->y = vkt_keep(c->g, y);
    vkt_shape s = vkt_tensor_shape(y);
    if (s.ndim == 0)
        s = (vkt_shape){1, {1}};
    c->r = vkt_input(c->g, "r", &s);
    c->loss = vkt_sum(c->g, vkt_mul(c->g, y, c->r), -1);
    TH_CHECK(vkt_graph_status(c->g) == VKT_OK, "%s: graph builds: %s", c->name,
             vkt_graph_errmsg(c->g));
}

void finish_loss(op_case *c, vkt_tensor *loss)
{
    c->y = c->loss = loss;
    c->r = NULL;
    TH_CHECK(vkt_graph_status(c->g) == VKT_OK, "%s: graph builds: %s", c->name,
             vkt_graph_errmsg(c->g));
}

static uint64_t count_of(const vkt_tensor *t)
{
    vkt_shape s = vkt_tensor_shape(t);
    return graph_count(&s);
}

/* The case's finite-difference tolerance: the loosest of its ops' (the op table's
 * grad_rtol; the loss's sum and product included). */
static double grad_rtol(const op_case *c)
{
    double tol = 0;
    for (uint32_t i = 0; i < c->g->count; i++) {
        const graph_op_def *d = GRAPH_DEF(c->g->nodes[i]);
        if (d->grad_rtol > tol)
            tol = d->grad_rtol;
    }
    return tol;
}

/* (a) central differences of the double reference against its backward. */
static void fd_check(op_case *c, graph_ref *ref)
{
    const double h = 1e-5, rtol = grad_rtol(c);
    double worst = 0;
    int ok = 1;
    for (uint32_t p = 0; p < c->n_params && ok; p++) {
        uint32_t id = c->params[p]->id;
        for (uint64_t e = 0; e < ref->count[id] && ok; e++) {
            double v = ref->val[id][e];
            ref->val[id][e] = v + h;
            graph_ref_run_forward(ref);
            double lp = ref->val[c->loss->id][0];
            ref->val[id][e] = v - h;
            graph_ref_run_forward(ref);
            double lm = ref->val[c->loss->id][0];
            ref->val[id][e] = v;
            double fd = (lp - lm) / (2 * h), an = ref->grad[id][e];
            double err = fabs(fd - an);
            if (err > worst)
                worst = err;
            ok = err <= rtol * (1.0 + fabs(an));
            if (!ok)
                TH_CHECK(0, "%s: d loss / d %s[%llu]: finite difference %.10g, backward %.10g",
                         c->name, c->params[p]->name, (unsigned long long)e, fd, an);
        }
    }
    graph_ref_run_forward(ref);
    if (ok)
        TH_CHECK(1, "%s: gradient check (max error %.2g, tolerance %.0e)", c->name, worst, rtol);
}

static void compare_d(const char *what, const float *got, const double *want, uint64_t n,
                      float rtol, float atol)
{
    float *w = th_alloc_floats(n);
    for (uint64_t i = 0; i < n; i++)
        w[i] = (float)want[i];
    th_compare(what, got, w, n, rtol, atol);
    free(w);
}

/* (b) one device step against the reference; (c) options.check on the same case. */
static void device_check(op_case *c, graph_ref *ref, const float *r, int no_fusion, int check)
{
    vkt_model_options o = {.no_fusion = no_fusion, .check = check};
    vkt_model *m = NULL;
    vkt_status st = vkt_model_create(g_ctx, c->g, c->loss, &o, &m);
    if (!TH_CHECK(st == VKT_OK, "%s: model: %s", c->name, vkt_last_error()))
        return;
    if (c->r)
        TH_OK(g_ctx, vkt_model_set_input(m, c->r, r, count_of(c->r)));
    if (c->labels)
        TH_OK(g_ctx, vkt_model_set_input(m, c->labels, c->labels_data, count_of(c->labels)));
    for (uint32_t k = 0; k < c->n_inputs; k++)
        TH_OK(g_ctx, vkt_model_set_input(m, c->inputs[k], c->input_data[k],
                                         count_of(c->inputs[k])));
    if (!no_fusion && !check)
        record_fused(m);
    st = vkt_model_forward_backward(m);
    char what[128];
    snprintf(what, sizeof what, "%s%s%s", c->name, no_fusion ? " (unfused)" : "",
             check ? " (VKT_CHECK)" : "");
    if (TH_CHECK(st == VKT_OK, "%s: step: %s", what, vkt_model_errmsg(m)) && !check) {
        uint64_t n = count_of(c->y);
        float *y = th_alloc_floats(n);
        TH_OK(g_ctx, vkt_model_read(m, c->y, y, n));
        char w2[256];
        snprintf(w2, sizeof w2, "%s: forward", what);
        compare_d(w2, y, ref->val[c->y->id], n, c->rtol, c->atol);
        free(y);
        for (uint32_t p = 0; p < c->n_params; p++) {
            uint64_t np = count_of(c->params[p]);
            float *gp = th_alloc_floats(np);
            TH_OK(g_ctx, vkt_model_read_grad(m, c->params[p], gp, np));
            snprintf(w2, sizeof w2, "%s: gradient of %s", what, c->params[p]->name);
            compare_d(w2, gp, ref->grad[c->params[p]->id], np, c->rtol, c->atol);
            free(gp);
        }
    }
    vkt_model_destroy(m);
}

/* Appends the ops (and activations) of case c to the file named by VKT_OP_COVERAGE, one
 * "op <name>" line each, for test_op_table: the file is emptied by the first case of a
 * run. Ops are recorded by their table name and variant name (graph_op_name). */
static void record_nodes(const vkt_tensor *const *nodes, uint32_t n)
{
    static int started;
    const char *path = getenv("VKT_OP_COVERAGE");
    if (!path || !*path)
        return;
    FILE *f = fopen(path, started ? "a" : "w");
    if (!TH_CHECK(f != NULL, "cannot write op coverage to %s", path))
        return;
    started = 1;
    for (uint32_t i = 0; i < n; i++)
        if (nodes[i])
            fprintf(f, "op %s %s\n", GRAPH_DEF(nodes[i])->name, graph_op_name(nodes[i]));
    fclose(f);
}

static void record_coverage(const op_case *c)
{
    record_nodes((const vkt_tensor *const *)c->g->nodes, c->g->count);
}

/* The fused nodes a model made (linear_act, conv_relu): checked by the fused device step. */
static void record_fused(const vkt_model *m)
{
    for (uint32_t i = 0; i < m->n; i++)
        if (m->node[i].active && (GRAPH_DEF(m->t[i])->flags & OPF_FUSED))
            record_nodes(&m->t[i], 1);
}

void run_case(op_case *c)
{
    graph_ref ref;
    char msg[VKT_ERRMSG_SIZE];
    if (!TH_CHECK(graph_ref_init(&ref, c->g, 0, msg, sizeof msg) == VKT_OK, "%s: %s", c->name,
                  msg)) {
        vkt_graph_destroy(c->g);
        return;
    }
    float *r = NULL;
    if (c->r) {
        uint64_t nr = count_of(c->r);
        r = th_alloc_floats(nr);
        th_fill_uniform(r, nr, -1, 1);
        graph_ref_set(&ref, c->r, r);
    }
    if (c->labels)
        graph_ref_set(&ref, c->labels, (const float *)c->labels_data);
    for (uint32_t k = 0; k < c->n_inputs; k++)
        graph_ref_set(&ref, c->inputs[k], c->input_data[k]);
    graph_ref_run_forward(&ref);
    graph_ref_run_backward(&ref, c->loss);
    record_coverage(c);
    fd_check(c, &ref);
    device_check(c, &ref, r, 0, 0);
    device_check(c, &ref, r, 1, 0);
    device_check(c, &ref, r, 0, 1);
    free(r);
    graph_ref_free(&ref);
    vkt_graph_destroy(c->g);
    for (uint32_t k = 0; k < c->n_inputs; k++)
        free(c->input_data[k]);
}

