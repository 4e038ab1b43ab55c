/* ops_ref.c - CPU reference of every op's forward, in double: the definitions the
 * device kernels are checked against (tests, VKT_CHECK) and that the finite-difference
 * gradient checks differentiate. Backward is in ops_ref_bwd.c. */
#include "graph/graph.h"
#include "graph/ops_ref_util.h"
#include "activation.h"
#include "dropout_hash.h"

#include <math.h>
#include <string.h>

/* The formulas are shaders/activation.h, shared with the shaders. */
double graph_ref_act(vkt_unary_op op, double alpha, double x)
{
    return (unsigned)op <= VKT_UNARY_LOG ? act_f(op, alpha, x) : NAN;
}

double graph_ref_act_grad(vkt_unary_op op, double alpha, double x)
{
    return (unsigned)op <= VKT_UNARY_LOG ? act_df(op, alpha, x) : NAN;
}

ref_bcast ref_bcast_of(const vkt_shape *a, const vkt_shape *b)
{
    ref_bcast l;
    const vkt_shape *s[2] = {a, b};
    for (int o = 0; o < 2; o++) {
        uint32_t pad = VKT_MAX_DIMS - s[o]->ndim;
        uint64_t dims[4], st = 1;
        for (uint32_t k = 0; k < 4; k++)
            dims[k] = k < pad ? 1 : s[o]->dims[k - pad];
        for (int k = 3; k >= 0; k--) {
            l.str[o][k] = dims[k] == 1 ? 0 : st;
            st *= dims[k];
            if (o == 0 || dims[k] > l.dims[k])
                l.dims[k] = dims[k];
        }
    }
    return l;
}

void ref_axis_split(const vkt_shape *s, uint32_t axis, uint64_t *outer, uint64_t *len,
                    uint64_t *inner)
{
    *outer = *inner = 1;
    *len = s->dims[axis];
    for (uint32_t k = 0; k < axis; k++)
        *outer *= s->dims[k];
    for (uint32_t k = axis + 1; k < s->ndim; k++)
        *inner *= s->dims[k];
}

/* x [m, k] (a linear's x: [..., k], m the product of the leading dimensions), w [k, n]. */
static void fwd_matmul(const graph_ref_args *a, int bias)
{
    uint64_t k = a->in_shape[1]->dims[0], m = graph_count(a->in_shape[0]) / k;
    uint64_t n = a->in_shape[1]->dims[1];
    const double *x = a->in[0], *w = a->in[1];
    for (uint64_t i = 0; i < m; i++)
        for (uint64_t j = 0; j < n; j++) {
            double s = bias ? a->in[2][j] : 0.0;
            for (uint64_t p = 0; p < k; p++)
                s += x[i * k + p] * w[p * n + j];
            a->out[i * n + j] = s;
        }
}

static void fwd_binary(const graph_ref_args *a)
{
    ref_bcast l = ref_bcast_of(a->in_shape[0], a->in_shape[1]);
    uint64_t i = 0;
    REF_BCAST_LOOP(l, ai, bi) {
        double u = a->in[0][ai], v = a->in[1][bi];
        a->out[i++] = a->node->op == GOP_ADD ? u + v : a->node->op == GOP_SUB ? u - v : u * v;
    }
}

static void fwd_softmax(const graph_ref_args *a)
{
    const vkt_shape *s = a->in_shape[0];
    uint64_t cols = s->dims[s->ndim - 1], rows = graph_count(s) / cols;
    for (uint64_t r = 0; r < rows; r++) {
        const double *x = a->in[0] + r * cols;
        double *y = a->out + r * cols;
        double m = x[0], sum = 0;
        for (uint64_t c = 1; c < cols; c++)
            m = x[c] > m ? x[c] : m;
        for (uint64_t c = 0; c < cols; c++)
            sum += exp(x[c] - m);
        for (uint64_t c = 0; c < cols; c++)
            y[c] = a->node->iop ? x[c] - m - log(sum) : exp(x[c] - m) / sum;
    }
}

static void fwd_sce(const graph_ref_args *a)
{
    uint64_t rows = graph_count(a->in_shape[1]), cols = graph_count(a->in_shape[0]) / rows;
    double total = 0;
    for (uint64_t r = 0; r < rows; r++) {
        const double *z = a->in[0] + r * cols;
        double m = z[0], sum = 0;
        for (uint64_t c = 1; c < cols; c++)
            m = z[c] > m ? z[c] : m;
        for (uint64_t c = 0; c < cols; c++)
            sum += exp(z[c] - m);
        uint64_t label = ref_label(a->in[1][r], cols);
        total += m + log(sum) - z[label];
    }
    a->out[0] = total / (double)rows;
}

static void fwd_reduce(const graph_ref_args *a)
{
    const vkt_shape *s = a->in_shape[0];
    uint64_t outer = 1, len = graph_count(s), inner = 1;
    if (a->node->axis >= 0)
        ref_axis_split(s, (uint32_t)a->node->axis, &outer, &len, &inner);
    for (uint64_t o = 0; o < outer; o++)
        for (uint64_t i = 0; i < inner; i++) {
            double sum = 0;
            for (uint64_t k = 0; k < len; k++)
                sum += a->in[0][(o * len + k) * inner + i];
            a->out[o * inner + i] = a->node->op == GOP_MEAN ? sum / (double)len : sum;
        }
}

static void fwd_concat(const graph_ref_args *a)
{
    uint32_t axis = (uint32_t)a->node->axis;
    uint64_t outer, total, inner;
    ref_axis_split(&a->out_shape, axis, &outer, &total, &inner);
    uint64_t at = 0;
    for (uint32_t k = 0; k < a->n_in; k++) {
        uint64_t len = a->in_shape[k]->dims[axis];
        for (uint64_t o = 0; o < outer; o++)
            memcpy(a->out + (o * total + at) * inner, a->in[k] + o * len * inner,
                   len * inner * sizeof(double));
        at += len;
    }
}

static void fwd_slice(const graph_ref_args *a)
{
    uint64_t outer, total, inner;
    ref_axis_split(a->in_shape[0], (uint32_t)a->node->axis, &outer, &total, &inner);
    uint64_t len = a->node->len;
    for (uint64_t o = 0; o < outer; o++)
        memcpy(a->out + o * len * inner, a->in[0] + (o * total + a->node->start) * inner,
               len * inner * sizeof(double));
}

void graph_ref_forward(const graph_ref_args *a)
{
    const vkt_tensor *nd = a->node;
    uint64_t n = graph_count(&a->out_shape);
    const double *x = a->in[0];
    switch (nd->op) {
    case GOP_MATMUL: fwd_matmul(a, 0); break;
    case GOP_LINEAR: fwd_matmul(a, nd->n_in == 3); break;
    case GOP_ADD:
    case GOP_SUB:
    case GOP_MUL: fwd_binary(a); break;
    case GOP_SCALE:
        for (uint64_t i = 0; i < n; i++)
            a->out[i] = (double)nd->f0 * x[i];
        break;
    case GOP_UNARY:
        for (uint64_t i = 0; i < n; i++)
            a->out[i] = graph_ref_act((vkt_unary_op)nd->iop, nd->f0, x[i]);
        break;
    case GOP_SOFTMAX: fwd_softmax(a); break;
    case GOP_SCE: fwd_sce(a); break;
    case GOP_MSE: {
        uint64_t m = graph_count(a->in_shape[0]);
        double s = 0;
        for (uint64_t i = 0; i < m; i++)
            s += (x[i] - a->in[1][i]) * (x[i] - a->in[1][i]);
        a->out[0] = s / (double)m;
        break;
    }
    case GOP_SUM:
    case GOP_MEAN: fwd_reduce(a); break;
    case GOP_RESHAPE: memcpy(a->out, x, n * sizeof(double)); break;
    case GOP_TRANSPOSE: {
        uint64_t r = a->in_shape[0]->dims[0], c = a->in_shape[0]->dims[1];
        for (uint64_t i = 0; i < r; i++)
            for (uint64_t j = 0; j < c; j++)
                a->out[j * r + i] = x[i * c + j];
        break;
    }
    case GOP_CONCAT: fwd_concat(a); break;
    case GOP_SLICE: fwd_slice(a); break;
    case GOP_DROPOUT:
        for (uint64_t i = 0, o = ref_dropout_shift(a, n); i < n; i++)
            a->out[i] = x[i] * ref_dropout_factor(nd, a->step, a->training, o + i);
        break;
    default:
        if (graph_is_layer_op(nd->op))
            graph_layer_ref_forward(a);
        break; /* leaves have no forward */
    }
}

uint64_t ref_dropout_shift(const graph_ref_args *a, uint64_t n)
{
    return graph_row_shift(a->batch_major, a->row_offset, a->batch, n);
}

double ref_dropout_factor(const vkt_tensor *nd, uint64_t step, int training, uint64_t i)
{
    if (!training || nd->f0 == 0.0f)
        return 1.0;
    uint32_t key = dropout_key64(nd->seed, step);
    if (!dropout_kept(key, (uint32_t)i, dropout_threshold(nd->f0)))
        return 0.0;
    return (double)(float)(1.0 / (1.0 - (double)nd->f0)); /* the scale the device uses */
}

uint64_t ref_label(double v, uint64_t classes)
{
    if (!(v >= 0))
        return 0;
    uint64_t l = (uint64_t)v;
    return l < classes ? l : classes - 1; /* as the kernel clamps */
}
