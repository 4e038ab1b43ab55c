/* ops_ref_bwd.c - CPU reference of every op's backward, in double. Each adds its
 * contribution into din[k] (where non-NULL), so uses of one tensor sum. The forward
 * output (a->out) must hold the forward result: softmax reads it. */
#include "graph/graph.h"
#include "graph/ops_ref_util.h"

#include <math.h>

static void bwd_matmul(const graph_ref_args *a, int bias)
{
    uint64_t k = a->in_shape[1]->dims[0], m = graph_count(a->in_shape[0]) / k;
    uint64_t n = a->in_shape[1]->dims[1];
    const double *x = a->in[0], *w = a->in[1], *dy = a->dout;
    if (a->din[0]) /* dx = dy w^T */
        for (uint64_t i = 0; i < m; i++)
            for (uint64_t p = 0; p < k; p++) {
                double s = 0;
                for (uint64_t j = 0; j < n; j++)
                    s += dy[i * n + j] * w[p * n + j];
                a->din[0][i * k + p] += s;
            }
    if (a->din[1]) /* dw = x^T dy */
        for (uint64_t p = 0; p < k; p++)
            for (uint64_t j = 0; j < n; j++) {
                double s = 0;
                for (uint64_t i = 0; i < m; i++)
                    s += x[i * k + p] * dy[i * n + j];
                a->din[1][p * n + j] += s;
            }
    if (bias && a->din[2])
        for (uint64_t j = 0; j < n; j++) {
            double s = 0;
            for (uint64_t i = 0; i < m; i++)
                s += dy[i * n + j];
            a->din[2][j] += s;
        }
}

static void bwd_binary(const graph_ref_args *a)
{
    ref_bcast l = ref_bcast_of(a->in_shape[0], a->in_shape[1]);
    graph_op op = a->node->op;
    uint64_t i = 0;
    REF_BCAST_LOOP(l, ai, bi) {
        double d = a->dout[i++];
        if (a->din[0])
            a->din[0][ai] += op == GOP_MUL ? d * a->in[1][bi] : d;
        if (a->din[1])
            a->din[1][bi] += op == GOP_MUL ? d * a->in[0][ai] : op == GOP_SUB ? -d : d;
    }
}

static void bwd_softmax(const graph_ref_args *a)
{
    const vkt_shape *s = a->in_shape[0];
    uint64_t cols = s->dims[s->ndim - 1], rows = graph_count(s) / cols;
    for (uint64_t r = 0; r < rows; r++) {
        const double *y = a->out + r * cols, *dy = a->dout + r * cols;
        double *dx = a->din[0] + r * cols;
        double sum = 0;
        for (uint64_t c = 0; c < cols; c++)
            sum += a->node->iop ? dy[c] : dy[c] * y[c];
        for (uint64_t c = 0; c < cols; c++)
            dx[c] += a->node->iop ? dy[c] - exp(y[c]) * sum : y[c] * (dy[c] - sum);
    }
}

static void bwd_sce(const graph_ref_args *a)
{
    uint64_t rows = graph_count(a->in_shape[1]), cols = graph_count(a->in_shape[0]) / rows;
    double scale = a->dout[0] / (double)rows;
    for (uint64_t r = 0; r < rows; r++) {
        const double *z = a->in[0] + r * cols;
        double *dz = a->din[0] + r * cols;
        double m = z[0], sum = 0;
        for (uint64_t c = 1; c < cols; c++)
            m = z[c] > m ? z[c] : m;
        for (uint64_t c = 0; c < cols; c++)
            sum += exp(z[c] - m);
        uint64_t label = ref_label(a->in[1][r], cols);
        for (uint64_t c = 0; c < cols; c++)
            dz[c] += scale * (exp(z[c] - m) / sum - (c == label ? 1.0 : 0.0));
    }
}

static void bwd_reduce(const graph_ref_args *a)
{
    const vkt_shape *s = a->in_shape[0];
    uint64_t outer = 1, len = graph_count(s), inner = 1;
    if (a->node->axis >= 0)
        ref_axis_split(s, (uint32_t)a->node->axis, &outer, &len, &inner);
    double scale = a->node->op == GOP_MEAN ? 1.0 / (double)len : 1.0;
    for (uint64_t o = 0; o < outer; o++)
        for (uint64_t k = 0; k < len; k++)
            for (uint64_t i = 0; i < inner; i++)
                a->din[0][(o * len + k) * inner + i] += scale * a->dout[o * inner + i];
}

static void bwd_concat(const graph_ref_args *a)
{
    uint32_t axis = (uint32_t)a->node->axis;
    uint64_t outer, total, inner;
    ref_axis_split(&a->out_shape, axis, &outer, &total, &inner);
    uint64_t at = 0;
    for (uint32_t k = 0; k < a->n_in; k++) {
        uint64_t len = a->in_shape[k]->dims[axis];
        if (a->din[k])
            for (uint64_t o = 0; o < outer; o++)
                for (uint64_t e = 0; e < len * inner; e++)
                    a->din[k][o * len * inner + e] += a->dout[(o * total + at) * inner + e];
        at += len;
    }
}

static void bwd_slice(const graph_ref_args *a)
{
    uint64_t outer, total, inner;
    ref_axis_split(a->in_shape[0], (uint32_t)a->node->axis, &outer, &total, &inner);
    uint64_t len = a->node->len;
    for (uint64_t o = 0; o < outer; o++)
        for (uint64_t e = 0; e < len * inner; e++)
            a->din[0][(o * total + a->node->start) * inner + e] += a->dout[o * len * inner + e];
}

void graph_ref_backward(const graph_ref_args *a)
{
    const vkt_tensor *nd = a->node;
    const double *x = a->in[0], *dy = a->dout;
    double *dx = a->din[0];
    uint64_t n = graph_count(&a->out_shape), nx = a->n_in ? graph_count(a->in_shape[0]) : 0;
    switch (nd->op) {
    case GOP_MATMUL: bwd_matmul(a, 0); break;
    case GOP_LINEAR: bwd_matmul(a, nd->n_in == 3); break;
    case GOP_ADD:
    case GOP_SUB:
    case GOP_MUL: bwd_binary(a); break;
    case GOP_SCALE:
        if (dx)
            for (uint64_t i = 0; i < n; i++)
                dx[i] += (double)nd->f0 * dy[i];
        break;
    case GOP_UNARY:
        if (dx)
            for (uint64_t i = 0; i < n; i++)
                dx[i] += dy[i] * graph_ref_act_grad((vkt_unary_op)nd->iop, nd->f0, x[i]);
        break;
    case GOP_SOFTMAX:
        if (dx)
            bwd_softmax(a);
        break;
    case GOP_SCE:
        if (dx)
            bwd_sce(a);
        break;
    case GOP_MSE:
        for (uint64_t i = 0; i < nx; i++) {
            double g = dy[0] * 2.0 * (x[i] - a->in[1][i]) / (double)nx;
            if (dx)
                dx[i] += g;
            if (a->din[1])
                a->din[1][i] -= g;
        }
        break;
    case GOP_SUM:
    case GOP_MEAN:
        if (dx)
            bwd_reduce(a);
        break;
    case GOP_RESHAPE:
        if (dx)
            for (uint64_t i = 0; i < n; i++)
                dx[i] += dy[i];
        break;
    case GOP_TRANSPOSE:
        if (dx) {
            uint64_t r = a->in_shape[0]->dims[0], c = a->in_shape[0]->dims[1];
            for (uint64_t i = 0; i < r; i++)
                for (uint64_t j = 0; j < c; j++)
                    dx[i * c + j] += dy[j * r + i];
        }
        break;
    case GOP_CONCAT: bwd_concat(a); break;
    case GOP_SLICE:
        if (dx)
            bwd_slice(a);
        break;
    case GOP_DROPOUT:
        if (dx)
            for (uint64_t i = 0, o = ref_dropout_shift(a, n); i < n; i++)
                dx[i] += dy[i] * ref_dropout_factor(nd, a->step, a->training, o + i);
        break;
    default:
        if (graph_is_layer_op(nd->op))
            graph_layer_ref_backward(a);
        break;
    }
}
