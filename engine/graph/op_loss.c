/* op_loss.c - softmax and log-softmax over the last axis, and the losses: softmax
 * cross-entropy (logits [..., C], integer labels [...]) and mean squared error, each a
 * scalar averaged over its rows. Softmax-CE as the loss of its logits' only use becomes
 * the fused op sce_grad (the model's rewrite, autodiff.c), which writes their gradient
 * during the forward; otherwise, when a gradient flows, it saves the probabilities (aux)
 * for its backward. */
#include "graph/op_impl.h"

#include <math.h>

/* ---- softmax ---- */

static const char *softmax_name(const vkt_tensor *t)
{
    return t->p.softmax.log ? "log_softmax" : "softmax";
}

static const char *softmax_fn(const vkt_tensor *t)
{
    return t->p.softmax.log ? "vkt_log_softmax" : "vkt_softmax";
}

static vkt_status shape_softmax(const vkt_tensor *t, const vkt_shape *const *in, vkt_shape *out,
                                char *msg, size_t size)
{
    if (in[0]->ndim == 0)
        return op_bad(t, msg, size, VKT_ERROR_SHAPE, "x is a scalar; softmax needs an axis");
    *out = *in[0];
    return VKT_OK;
}

static vkt_status fwd_softmax(const op_rec *r)
{
    uint32_t rows, cols;
    model_rows_cols(&r->m->shape[r->t->id], &rows, &cols);
    return vkt_softmax_rows(r->s, r->t->p.softmax.log, op_in_val(r->m, r->t, 0), op_out_val(r),
                            rows, cols);
}

static vkt_status bwd_softmax(const op_rec *r)
{
    vkt_model *m = r->m;
    const mnode *nd = op_node(r);
    uint32_t rows, cols;
    model_rows_cols(&m->shape[r->t->id], &rows, &cols);
    vkt_view dx = op_dx(m, r->t, 0);
    vkt_view target = nd->acc[0] ? model_view(m, nd->tmp) : dx;
    vkt_status st = vkt_softmax_rows_backward(r->s, r->t->p.softmax.log, model_view(m, nd->val),
                                              op_dy(r), target, rows, cols);
    if (st == VKT_OK && nd->acc[0])
        st = kt_axpby(r->s, 1.0f, target, 1.0f, dx, m->count[r->t->id]);
    return st;
}

static int always(const vkt_model *m, const vkt_tensor *t, uint32_t k)
{
    (void)m;
    (void)t;
    (void)k;
    return 1;
}

static void softmax_reads(const vkt_model *m, const vkt_tensor *t, acc_list *l)
{
    plan_add(l, m->node[t->id].val, 0, 0);
}

static void ref_softmax(const graph_ref_args *a)
{
    const vkt_shape *s = a->in_shape[0];
    uint64_t cols = s->dims[s->ndim - 1], rows = graph_count(s) / cols;
    int lg = a->node->p.softmax.log;
    for (uint64_t r = 0; r < rows; r++) {
        const double *x = a->in[0] + r * cols;
        double *y = a->out + r * cols;
        double m = x[0], sum = 0;
        for (uint64_t c = 1; c < cols; c++)
            m = x[c] > m ? x[c] : m;
        for (uint64_t c = 0; c < cols; c++)
            sum += exp(x[c] - m);
        for (uint64_t c = 0; c < cols; c++)
            y[c] = lg ? x[c] - m - log(sum) : exp(x[c] - m) / sum;
    }
}

/* Reads the forward output (a->out). */
static void ref_softmax_bwd(const graph_ref_args *a)
{
    if (!a->din[0])
        return;
    const vkt_shape *s = a->in_shape[0];
    uint64_t cols = s->dims[s->ndim - 1], rows = graph_count(s) / cols;
    int lg = a->node->p.softmax.log;
    for (uint64_t r = 0; r < rows; r++) {
        const double *y = a->out + r * cols, *dy = a->dout + r * cols;
        double *dx = a->din[0] + r * cols;
        double sum = 0;
        for (uint64_t c = 0; c < cols; c++)
            sum += lg ? dy[c] : dy[c] * y[c];
        for (uint64_t c = 0; c < cols; c++)
            dx[c] += lg ? dy[c] - exp(y[c]) * sum : y[c] * (dy[c] - sum);
    }
}

static const char *const names_x[] = {"x"};

const graph_op_def graph_op_softmax = {
    .name = "softmax", .fn = "vkt_softmax", .name_of = softmax_name, .fn_of = softmax_fn,
    .min_in = 1, .max_in = 1, .in_names = names_x,
    .shape = shape_softmax, .forward = fwd_softmax, .backward = bwd_softmax,
    .adds_via_tmp = always, .backward_reads = softmax_reads,
    .ref_forward = ref_softmax, .ref_backward = ref_softmax_bwd, .grad_rtol = 1e-5,
};

/* ---- softmax cross-entropy ---- */

/* logits [..., C] and labels of the leading shape [...]: one row per label. */
static vkt_status shape_sce(const vkt_tensor *t, const vkt_shape *const *in, vkt_shape *out,
                            char *msg, size_t size)
{
    const vkt_shape *z = in[0], *l = in[1];
    char buf[256];
    if (!t->in[1]->is_int)
        return op_bad(t, msg, size, VKT_ERROR_INVALID_ARGUMENT,
                      "labels ('%s') must be integer labels from vkt_input_labels",
                      t->in[1]->name);
    int ok = z->ndim >= 2 && l->ndim == z->ndim - 1;
    for (uint32_t k = 0; ok && k < l->ndim; k++)
        ok = l->dims[k] == z->dims[k];
    if (!ok)
        return op_bad(t, msg, size, VKT_ERROR_SHAPE, "logits[...,C] and labels[...] expected: %s",
                      op_two(in, "logits", "labels", buf, sizeof buf));
    *out = (vkt_shape){0, {0}};
    return VKT_OK;
}

/* The probabilities (aux) when a gradient will flow back through it: logits [rows, C]. */
static vkt_status sce_arrays(vkt_model *m, const vkt_tensor *t, uint64_t *aux, uint64_t *tmp)
{
    (void)tmp;
    const mnode *z = &m->node[t->in[0]->id];
    if (m->training && m->node[t->id].needs_grad && z->needs_grad)
        *aux = m->count[t->in[0]->id];
    return VKT_OK;
}

/* mode 0: the loss only; 1: also the probabilities (aux); 2: also the logits' gradient. */
static vkt_status sce_record(const op_rec *r, int mode, const vkt_view *p)
{
    uint32_t rows, cols;
    model_rows_cols(op_in_shape(r->m, r->t, 0), &rows, &cols);
    return kt_sce(r->s, op_in_val(r->m, r->t, 0), op_in_val(r->m, r->t, 1), op_out_val(r), mode,
                  p, rows, cols);
}

static vkt_status fwd_sce(const op_rec *r)
{
    const mnode *nd = op_node(r);
    if (!r->training || nd->aux < 0)
        return sce_record(r, 0, NULL);
    vkt_view p = model_view(r->m, nd->aux);
    return sce_record(r, 1, &p);
}

/* As the loss (dloss = 1) of its logits' only use: dz = (p - onehot) / rows, written. */
static vkt_status fwd_sce_grad(const op_rec *r)
{
    if (!r->training)
        return sce_record(r, 0, NULL);
    vkt_view dz = model_view(r->m, r->m->node[r->t->in[0]->id].grad);
    return sce_record(r, 2, &dz);
}

static vkt_status bwd_sce(const op_rec *r)
{
    uint32_t rows, cols;
    model_rows_cols(op_in_shape(r->m, r->t, 0), &rows, &cols);
    return kt_sce_backward(r->s, model_view(r->m, op_node(r)->aux), op_in_val(r->m, r->t, 1),
                           op_dy(r), op_dx(r->m, r->t, 0), op_beta(r->m, r->t->id, 0), rows,
                           cols);
}

static void sce_reads(const vkt_model *m, const vkt_tensor *t, acc_list *l)
{
    plan_add(l, m->node[t->id].aux, 0, 0);
    plan_add(l, op_in_value(m, t, 1), 0, 0);
}

/* A row's maximum m and sum of exp(z - m): log-sum-exp = m + log(sum). */
static void row_lse(const double *z, uint64_t cols, double *m, double *sum)
{
    *m = z[0];
    *sum = 0;
    for (uint64_t c = 1; c < cols; c++)
        *m = z[c] > *m ? z[c] : *m;
    for (uint64_t c = 0; c < cols; c++)
        *sum += exp(z[c] - *m);
}

static void ref_sce(const graph_ref_args *a)
{
    uint64_t rows = graph_count(a->in_shape[1]), cols = graph_count(a->in_shape[0]) / rows;
    double total = 0;
    for (uint64_t r = 0; r < rows; r++) {
        const double *z = a->in[0] + r * cols;
        double m, sum;
        row_lse(z, cols, &m, &sum);
        total += m + log(sum) - z[ref_label(a->in[1][r], cols)];
    }
    a->out[0] = total / (double)rows;
}

static void ref_sce_bwd(const graph_ref_args *a)
{
    if (!a->din[0])
        return;
    uint64_t rows = graph_count(a->in_shape[1]), cols = graph_count(a->in_shape[0]) / rows;
    double scale = a->dout[0] / (double)rows;
    for (uint64_t r = 0; r < rows; r++) {
        const double *z = a->in[0] + r * cols;
        double *dz = a->din[0] + r * cols;
        double m, sum;
        row_lse(z, cols, &m, &sum);
        uint64_t label = ref_label(a->in[1][r], cols);
        for (uint64_t c = 0; c < cols; c++)
            dz[c] += scale * (exp(z[c] - m) / sum - (c == label ? 1.0 : 0.0));
    }
}

static const char *const names_sce[] = {"logits", "labels"};

const graph_op_def graph_op_sce = {
    .name = "softmax_cross_entropy", .fn = "vkt_softmax_cross_entropy",
    .flags = OPF_LOSS | OPF_LABELS_IN1, .min_in = 2, .max_in = 2, .in_names = names_sce,
    .shape = shape_sce, .arrays = sce_arrays, .forward = fwd_sce, .backward = bwd_sce,
    .backward_reads = sce_reads, .loss_fused = GOP_SCE_GRAD,
    .ref_forward = ref_sce, .ref_backward = ref_sce_bwd, .grad_rtol = 1e-5,
};

/* The fused softmax-CE: the same loss and references; no backward step. */
const graph_op_def graph_op_sce_grad = {
    .name = "softmax_cross_entropy+grad", .fn = "vkt_softmax_cross_entropy",
    .flags = OPF_LOSS | OPF_LABELS_IN1 | OPF_FUSED | OPF_GRAD_IN_FORWARD, .min_in = 2,
    .max_in = 2, .in_names = names_sce, .shape = shape_sce, .forward = fwd_sce_grad,
    .ref_forward = ref_sce, .ref_backward = ref_sce_bwd, .grad_rtol = 1e-5,
};

/* ---- mean squared error ---- */

static vkt_status shape_mse(const vkt_tensor *t, const vkt_shape *const *in, vkt_shape *out,
                            char *msg, size_t size)
{
    char buf[256];
    if (!graph_shape_eq(in[0], in[1]))
        return op_bad(t, msg, size, VKT_ERROR_SHAPE, "shapes differ: %s",
                      op_two(in, "pred", "target", buf, sizeof buf));
    *out = (vkt_shape){0, {0}};
    return VKT_OK;
}

static vkt_status fwd_mse(const op_rec *r)
{
    return kt_mse(r->s, op_in_val(r->m, r->t, 0), op_in_val(r->m, r->t, 1), op_out_val(r),
                  r->m->count[r->t->in[0]->id]);
}

static vkt_status bwd_mse(const op_rec *r)
{
    const vkt_tensor *t = r->t;
    for (uint32_t k = 0; k < 2; k++) {
        if (!op_want(r->m, t, k))
            continue;
        vkt_status st = kt_mse_backward(r->s, op_in_val(r->m, t, 0), op_in_val(r->m, t, 1),
                                        op_dy(r), op_dx(r->m, t, k), k ? -1.0f : 1.0f,
                                        op_beta(r->m, t->id, k), r->m->count[t->in[0]->id]);
        if (st != VKT_OK)
            return st;
    }
    return VKT_OK;
}

static void mse_reads(const vkt_model *m, const vkt_tensor *t, acc_list *l)
{
    plan_add(l, op_in_value(m, t, 0), 0, 0);
    plan_add(l, op_in_value(m, t, 1), 0, 0);
}

static void ref_mse(const graph_ref_args *a)
{
    uint64_t n = graph_count(a->in_shape[0]);
    double s = 0;
    for (uint64_t i = 0; i < n; i++)
        s += (a->in[0][i] - a->in[1][i]) * (a->in[0][i] - a->in[1][i]);
    a->out[0] = s / (double)n;
}

static void ref_mse_bwd(const graph_ref_args *a)
{
    uint64_t n = graph_count(a->in_shape[0]);
    for (uint64_t i = 0; i < n; i++) {
        double g = a->dout[0] * 2.0 * (a->in[0][i] - a->in[1][i]) / (double)n;
        if (a->din[0])
            a->din[0][i] += g;
        if (a->din[1])
            a->din[1][i] -= g;
    }
}

static const char *const names_mse[] = {"pred", "target"};

const graph_op_def graph_op_mse = {
    .name = "mse", .fn = "vkt_mse", .flags = OPF_LOSS, .min_in = 2, .max_in = 2,
    .in_names = names_mse, .shape = shape_mse, .forward = fwd_mse, .backward = bwd_mse,
    .backward_reads = mse_reads, .ref_forward = ref_mse, .ref_backward = ref_mse_bwd,
    .grad_rtol = 1e-6,
};
