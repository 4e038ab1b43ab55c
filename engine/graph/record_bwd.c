/* record_bwd.c - recording each op's backward: the gradients of its inputs from the
 * gradient of its output. A contribution writes the input's gradient (beta 0) if it is
 * the first, else adds to it (beta 1): GEMMs with beta = 1 and the graph kernels do that
 * in the same dispatch; the few kernels that cannot add write a scratch array that one
 * more dispatch adds. Matrix products use vkt_gemm's transposes (dW = X^T dY,
 * dX = dY W^T); linear + activation computes dz and the bias gradient in one dispatch,
 * in place over the activation's gradient. */
#include "graph/model.h"
#include "kernels/train_ops.h"
#include "graph/layers.h"

#include <string.h>

typedef struct brec {
    vkt_model *m;
    vkt_stream *s;
    const vkt_tensor *t;
    const mnode *nd;
    vkt_view dy;
} brec;

static const vkt_tensor *in_node(const vkt_tensor *t, uint32_t k) { return t->in[k]; }

static int want(const brec *b, const vkt_tensor *src, uint32_t k)
{
    const mnode *in = &b->m->node[in_node(src, k)->id];
    return in->needs_grad && in->grad >= 0;
}

static vkt_view dgrad(const brec *b, const vkt_tensor *src, uint32_t k)
{
    return model_view(b->m, b->m->node[in_node(src, k)->id].grad);
}

static vkt_view val(const brec *b, const vkt_tensor *src, uint32_t k)
{
    return model_view(b->m, b->m->node[in_node(src, k)->id].val);
}

static float beta(const brec *b, uint32_t k) { return b->nd->acc[k] ? 1.0f : 0.0f; }

static const vkt_shape *shp(const brec *b, const vkt_tensor *src, uint32_t k)
{
    return &b->m->shape[in_node(src, k)->id];
}

/* C[M,N] (+)= op(A) * op(B): gemm_nt with B stored [N,K] (trans_b), gemm_tn with A stored
 * [K,M] (trans_a); beta_c 1 adds into C (a gradient's later contributions). */
static vkt_status gemm_t(vkt_stream *s, int trans_a, int trans_b, vkt_view a, vkt_view b,
                         vkt_view c, uint32_t m, uint32_t k, uint32_t n, float beta_c)
{
    vkt_gemm_desc d = {.trans_a = trans_a, .trans_b = trans_b, .m = m, .n = n, .k = k,
                       .alpha = 1.0f, .beta = beta_c, .a = a, .b = b, .c = c};
    return vkt_gemm(s, &d);
}

#define gemm_nt(s, a, bt, c, m, k, n, beta) gemm_t(s, 0, 1, a, bt, c, m, k, n, beta)
#define gemm_tn(s, at, b, c, m, k, n, beta) gemm_t(s, 1, 0, at, b, c, m, k, n, beta)

/* Gradients of a product x[M,K] w[K,N] from dz[M,N]. */
static vkt_status matmul_grads(const brec *b, const vkt_tensor *src, vkt_view dz)
{
    uint32_t m, k, n = shp(b, src, 1)->dims[1];
    model_rows_cols(shp(b, src, 0), &m, &k); /* a linear's x [..., k]: leading dims are rows */
    vkt_status st = VKT_OK;
    /* Slots in reverse, the order the write/add flags were given in (model_slot): for
     * matmul(w, w) dW writes, then dX adds; and X is read before dX is written, so the
     * plan may give dX the memory of X. */
    if (want(b, src, 1)) /* dW = X^T dZ */
        st = gemm_tn(b->s, val(b, src, 0), dz, dgrad(b, src, 1), k, m, n, beta(b, 1));
    if (st == VKT_OK && want(b, src, 0)) /* dX = dZ W^T */
        st = gemm_nt(b->s, dz, val(b, src, 1), dgrad(b, src, 0), m, n, k, beta(b, 0));
    return st;
}

/* Linear alone (bias gradient = column sums of dy) or fused with its activation (dz and
 * the bias gradient in one dispatch). */
static vkt_status bwd_linear(const brec *b)
{
    vkt_model *m = b->m;
    const vkt_tensor *lin = b->nd->fused_from >= 0 ? m->g->nodes[b->nd->fused_from] : b->t;
    uint32_t rows = (uint32_t)(m->count[lin->in[0]->id] / shp(b, lin, 1)->dims[0]);
    uint32_t cols = shp(b, lin, 1)->dims[1];
    int bias = lin->n_in == 3 && want(b, lin, 2);
    vkt_view db = bias ? dgrad(b, lin, 2) : b->dy;
    vkt_view dz = b->dy;
    vkt_status st = VKT_OK;
    if (b->nd->fused_from >= 0) {
        vkt_unary_op op = (vkt_unary_op)b->t->iop;
        int from_y = b->nd->aux < 0;
        vkt_view v = model_view(m, from_y ? b->nd->val : b->nd->aux);
        if (b->nd->tmp >= 0)
            dz = model_view(m, b->nd->tmp);
        st = kt_bias_act_backward(b->s, op, b->t->f0, from_y, v, b->dy, &dz, 0.0f,
                                  bias ? &db : NULL, beta(b, 2), rows, cols);
    } else if (bias) {
        st = kt_bias_act_backward(b->s, VKT_UNARY_SCALE, 1.0f, 1, b->dy, b->dy, NULL, 0.0f, &db,
                                  beta(b, 2), rows, cols);
    }
    return st == VKT_OK ? matmul_grads(b, lin, dz) : st;
}

static vkt_status bwd_binary(const brec *b)
{
    vkt_model *m = b->m;
    const vkt_tensor *t = b->t;
    vkt_binary_op op = t->op == GOP_ADD ? VKT_BINARY_ADD
                       : t->op == GOP_SUB ? VKT_BINARY_SUB : VKT_BINARY_MUL;
    uint64_t n = m->count[t->id];
    for (uint32_t k = 0; k < 2; k++) {
        if (!want(b, t, k))
            continue;
        vkt_view dx = dgrad(b, t, k);
        vkt_status st;
        if (op != VKT_BINARY_MUL && graph_shape_eq(shp(b, t, k), &m->shape[t->id])) {
            float sign = op == VKT_BINARY_SUB && k == 1 ? -1.0f : 1.0f;
            st = kt_axpby(b->s, sign, b->dy, beta(b, k), dx, n);
        } else {
            vkt_view target = b->nd->acc[k] ? model_view(m, b->nd->tmp) : dx;
            vkt_view none = {NULL, 0};
            int mul = op == VKT_BINARY_MUL;
            st = vkt_binary_backward(b->s, op, (int)k, mul ? val(b, t, 0) : none, shp(b, t, 0),
                                     mul ? val(b, t, 1) : none, shp(b, t, 1), b->dy, target);
            if (st == VKT_OK && b->nd->acc[k])
                st = kt_axpby(b->s, 1.0f, target, 1.0f, dx, m->count[t->in[k]->id]);
        }
        if (st != VKT_OK)
            return st;
    }
    return VKT_OK;
}

static vkt_status bwd_softmax(const brec *b)
{
    vkt_model *m = b->m;
    uint32_t rows, cols;
    model_rows_cols(&m->shape[b->t->id], &rows, &cols);
    vkt_view dx = dgrad(b, b->t, 0);
    vkt_view target = b->nd->acc[0] ? model_view(m, b->nd->tmp) : dx;
    vkt_status st = vkt_softmax_rows_backward(b->s, (int)b->t->iop, model_view(m, b->nd->val), b->dy,
                                         target, rows, cols);
    if (st == VKT_OK && b->nd->acc[0])
        st = kt_axpby(b->s, 1.0f, target, 1.0f, dx, m->count[b->t->id]);
    return st;
}

static vkt_status bwd_reduce(const brec *b)
{
    const vkt_shape *xs = shp(b, b->t, 0);
    uint32_t outer = 1, len = (uint32_t)graph_count(xs), inner = 1;
    if (b->t->axis >= 0 && xs->ndim > 0)
        model_axis3(xs, (uint32_t)b->t->axis, &outer, &len, &inner);
    float alpha = b->t->op == GOP_MEAN ? 1.0f / (float)len : 1.0f;
    return kt_broadcast(b->s, b->dy, dgrad(b, b->t, 0), outer, len, inner, alpha, beta(b, 0));
}

static vkt_status bwd_concat(const brec *b)
{
    uint32_t axis = (uint32_t)b->t->axis, outer, total, inner;
    model_axis3(&b->m->shape[b->t->id], axis, &outer, &total, &inner);
    uint32_t at = 0;
    for (uint32_t k = 0; k < b->t->n_in; k++) {
        uint32_t len = shp(b, b->t, k)->dims[axis];
        if (want(b, b->t, k)) {
            vkt_status st = kt_slice(b->s, b->dy, total * inner, at * inner, dgrad(b, b->t, k),
                                     len * inner, 0, outer, len * inner, 1.0f, beta(b, k));
            if (st != VKT_OK)
                return st;
        }
        at += len;
    }
    return VKT_OK;
}

static vkt_status bwd_slice(const brec *b)
{
    uint32_t axis = (uint32_t)b->t->axis, outer, total, inner, len = b->t->len;
    const vkt_shape *xs = shp(b, b->t, 0);
    model_axis3(xs, axis, &outer, &total, &inner);
    vkt_view dx = dgrad(b, b->t, 0);
    vkt_status st = VKT_OK;
    if (!b->nd->acc[0]) /* the first contribution: the rest of dx is zero */
        st = vkt_fill(b->s, dx, graph_count(xs), 0.0f);
    if (st == VKT_OK)
        st = kt_slice(b->s, b->dy, len * inner, 0, dx, total * inner, b->t->start * inner, outer,
                      len * inner, 1.0f, 1.0f);
    return st;
}

vkt_status model_record_backward(vkt_model *m, vkt_stream *s, uint32_t node)
{
    const mnode *nd = &m->node[node];
    brec b = {m, s, m->g->nodes[node], nd, model_view(m, nd->grad)};
    const vkt_tensor *t = b.t;
    uint64_t n = m->count[node];
    uint32_t rows, cols;
    switch (t->op) {
    case GOP_MATMUL: return matmul_grads(&b, t, b.dy);
    case GOP_LINEAR: return bwd_linear(&b);
    case GOP_ADD:
    case GOP_SUB:
    case GOP_MUL: return bwd_binary(&b);
    case GOP_SCALE: return kt_axpby(s, t->f0, b.dy, beta(&b, 0), dgrad(&b, t, 0), n);
    case GOP_UNARY:
        if (nd->fused_from >= 0 && m->g->nodes[nd->fused_from]->op == GOP_CONV2D)
            return layer_record_conv_relu(m, s, node, 1);
        if (nd->fused_from >= 0)
            return bwd_linear(&b);
        {
            vkt_view dx = dgrad(&b, t, 0);
            return kt_bias_act_backward(s, (vkt_unary_op)t->iop, t->f0, 0, val(&b, t, 0), b.dy,
                                        &dx, beta(&b, 0), NULL, 0.0f, 1, (uint32_t)n);
        }
    case GOP_SOFTMAX: return bwd_softmax(&b);
    case GOP_SCE:
        model_rows_cols(shp(&b, t, 0), &rows, &cols);
        return kt_sce_backward(s, model_view(m, nd->aux), val(&b, t, 1), b.dy, dgrad(&b, t, 0),
                               beta(&b, 0), rows, cols);
    case GOP_MSE:
        for (uint32_t k = 0; k < 2; k++) {
            if (!want(&b, t, k))
                continue;
            vkt_status st = kt_mse_backward(s, val(&b, t, 0), val(&b, t, 1), b.dy,
                                            dgrad(&b, t, k), k ? -1.0f : 1.0f, beta(&b, k),
                                            m->count[t->in[0]->id]);
            if (st != VKT_OK)
                return st;
        }
        return VKT_OK;
    case GOP_SUM:
    case GOP_MEAN: return bwd_reduce(&b);
    case GOP_RESHAPE: return kt_axpby(s, 1.0f, b.dy, beta(&b, 0), dgrad(&b, t, 0), n);
    case GOP_TRANSPOSE: {
        const vkt_shape *xs = shp(&b, t, 0);
        return kt_transpose(s, b.dy, dgrad(&b, t, 0), xs->dims[1], xs->dims[0], 1.0f,
                            beta(&b, 0));
    }
    case GOP_CONCAT: return bwd_concat(&b);
    case GOP_SLICE: return bwd_slice(&b);
    case GOP_DROPOUT:
        return kt_dropout(s, b.dy, (vkt_view){m->ctrl, CTRL_STEP}, dgrad(&b, t, 0), n, t->f0,
                          t->seed, model_row_shift(m, node, n), beta(&b, 0));
    default:
        if (graph_is_layer_op(t->op))
            return layer_record_backward(m, s, node);
        return model_fail(m, VKT_ERROR_INTERNAL, "internal error: op %s has no backward",
                          graph_op_name(t));
    }
}
