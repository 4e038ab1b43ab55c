/* record_fwd.c - recording each op's forward into a stream: which kernel, on which
 * views. Linear + activation is one GEMM and one fused bias/activation dispatch;
 * softmax cross-entropy as the loss also writes its logits' gradient here. */
#include "graph/model.h"
#include "kernels/train_ops.h"
#include "graph/layers.h"

#include <string.h>

void model_rows_cols(const vkt_shape *s, uint32_t *rows, uint32_t *cols)
{
    uint64_t n = graph_count(s);
    *cols = s->ndim ? s->dims[s->ndim - 1] : 1;
    *rows = (uint32_t)(n / *cols);
}

typedef struct rec {
    vkt_model *m;
    vkt_stream *s;
    const vkt_tensor *t;
    int training;
} rec;

static vkt_view in_val(const rec *r, const vkt_tensor *t, uint32_t k)
{
    return model_view(r->m, r->m->node[t->in[k]->id].val);
}

static vkt_view out_val(const rec *r) { return model_view(r->m, r->m->node[r->t->id].val); }

static const vkt_shape *in_shape(const rec *r, const vkt_tensor *t, uint32_t k)
{
    return &r->m->shape[t->in[k]->id];
}

/* C[M,N] = A[M,K] * B[K,N] with packed operands. */
static vkt_status gemm(vkt_stream *s, vkt_view a, vkt_view b, vkt_view c, uint32_t m,
                       uint32_t k, uint32_t n)
{
    vkt_gemm_desc d;
    memset(&d, 0, sizeof d);
    d.m = m;
    d.n = n;
    d.k = k;
    d.alpha = 1.0f;
    d.a = a;
    d.b = b;
    d.c = c;
    return vkt_gemm(s, &d);
}

/* Linear (x w + b) into `dst`, then f applied by the bias kernel: in place, or into y
 * with dst keeping the pre-activation. */
static vkt_status linear_act(const rec *r, const vkt_tensor *lin, vkt_unary_op op, float alpha,
                             vkt_view dst, const vkt_view *y)
{
    const vkt_shape *ws = in_shape(r, lin, 1);
    uint32_t rows, k, cols = ws->dims[1];
    model_rows_cols(in_shape(r, lin, 0), &rows, &k); /* x [..., k]: leading dims are rows */
    vkt_status st = gemm(r->s, in_val(r, lin, 0), in_val(r, lin, 1), dst, rows, k, cols);
    if (st != VKT_OK)
        return st;
    int bias = lin->n_in == 3;
    if (!bias && op == VKT_UNARY_SCALE && alpha == 1.0f && !y)
        return VKT_OK; /* nothing to add, nothing to apply */
    vkt_view b = bias ? in_val(r, lin, 2) : dst;
    return kt_bias_act(r->s, op, alpha, dst, bias ? &b : NULL, y, rows, cols);
}

static vkt_status fwd_unary(const rec *r)
{
    const mnode *nd = &r->m->node[r->t->id];
    vkt_unary_op op = (vkt_unary_op)r->t->iop;
    if (nd->fused_from >= 0 && r->m->g->nodes[nd->fused_from]->op == GOP_CONV2D)
        return layer_record_conv_relu(r->m, r->s, r->t->id, 0);
    if (nd->fused_from >= 0) {
        const vkt_tensor *lin = r->m->g->nodes[nd->fused_from];
        vkt_view y = out_val(r);
        if (nd->aux >= 0)
            return linear_act(r, lin, op, r->t->f0, model_view(r->m, nd->aux), &y);
        return linear_act(r, lin, op, r->t->f0, y, NULL);
    }
    return vkt_unary(r->s, op, r->t->f0, in_val(r, r->t, 0), out_val(r), r->m->count[r->t->id]);
}

static vkt_status fwd_sce(const rec *r)
{
    const mnode *nd = &r->m->node[r->t->id];
    uint32_t rows, cols;
    model_rows_cols(in_shape(r, r->t, 0), &rows, &cols);
    int mode = 0;
    vkt_view p = out_val(r);
    if (r->training && nd->sce_grad_fwd) {
        mode = 2;
        p = model_view(r->m, r->m->node[r->t->in[0]->id].grad);
    } else if (r->training && nd->aux >= 0) {
        mode = 1;
        p = model_view(r->m, nd->aux);
    }
    return kt_sce(r->s, in_val(r, r->t, 0), in_val(r, r->t, 1), out_val(r), mode,
                  mode ? &p : NULL, rows, cols);
}

static vkt_status fwd_reduce(const rec *r)
{
    const vkt_shape *xs = in_shape(r, r->t, 0);
    vkt_reduce_op op = r->t->op == GOP_MEAN ? VKT_REDUCE_MEAN : VKT_REDUCE_SUM;
    if (r->t->axis < 0 || xs->ndim == 0) {
        vkt_shape all = {1, {(uint32_t)graph_count(xs)}};
        return vkt_reduce(r->s, op, in_val(r, r->t, 0), &all, 0, out_val(r));
    }
    return vkt_reduce(r->s, op, in_val(r, r->t, 0), xs, (uint32_t)r->t->axis, out_val(r));
}

void model_axis3(const vkt_shape *s, uint32_t axis, uint32_t *outer, uint32_t *len,
                  uint32_t *inner)
{
    *outer = *inner = 1;
    *len = s->dims[axis];
    for (uint32_t k = 0; k < axis; k++)
        *outer *= s->dims[k];
    for (uint32_t k = axis + 1; k < s->ndim; k++)
        *inner *= s->dims[k];
}

static vkt_status fwd_concat(const rec *r)
{
    uint32_t axis = (uint32_t)r->t->axis, outer, total, inner;
    model_axis3(&r->m->shape[r->t->id], axis, &outer, &total, &inner);
    uint32_t at = 0;
    for (uint32_t k = 0; k < r->t->n_in; k++) {
        uint32_t len = in_shape(r, r->t, k)->dims[axis];
        vkt_status st = kt_slice(r->s, in_val(r, r->t, k), len * inner, 0, out_val(r),
                                 total * inner, at * inner, outer, len * inner, 1.0f, 0.0f);
        if (st != VKT_OK)
            return st;
        at += len;
    }
    return VKT_OK;
}

static vkt_status fwd_slice(const rec *r)
{
    uint32_t axis = (uint32_t)r->t->axis, outer, total, inner, len = r->t->len;
    model_axis3(in_shape(r, r->t, 0), axis, &outer, &total, &inner);
    return kt_slice(r->s, in_val(r, r->t, 0), total * inner, r->t->start * inner, out_val(r),
                    len * inner, 0, outer, len * inner, 1.0f, 0.0f);
}

vkt_status model_record_forward(vkt_model *m, vkt_stream *s, uint32_t node, int training)
{
    rec r = {m, s, m->g->nodes[node], training};
    const vkt_tensor *t = r.t;
    uint64_t n = m->count[node];
    uint32_t rows, cols;
    switch (t->op) {
    case GOP_MATMUL: {
        const vkt_shape *as = in_shape(&r, t, 0), *bs = in_shape(&r, t, 1);
        return gemm(s, in_val(&r, t, 0), in_val(&r, t, 1), out_val(&r), as->dims[0],
                    as->dims[1], bs->dims[1]);
    }
    case GOP_LINEAR: return linear_act(&r, t, VKT_UNARY_SCALE, 1.0f, out_val(&r), NULL);
    case GOP_ADD:
    case GOP_SUB:
    case GOP_MUL: {
        vkt_binary_op op = t->op == GOP_ADD   ? VKT_BINARY_ADD
                           : t->op == GOP_SUB ? VKT_BINARY_SUB
                                              : VKT_BINARY_MUL;
        return vkt_binary(s, op, in_val(&r, t, 0), in_shape(&r, t, 0), in_val(&r, t, 1),
                          in_shape(&r, t, 1), out_val(&r));
    }
    case GOP_SCALE: return kt_axpby(s, t->f0, in_val(&r, t, 0), 0.0f, out_val(&r), n);
    case GOP_UNARY: return fwd_unary(&r);
    case GOP_SOFTMAX:
        model_rows_cols(&m->shape[node], &rows, &cols);
        return vkt_softmax_rows(s, (int)t->iop, in_val(&r, t, 0), out_val(&r), rows, cols);
    case GOP_SCE: return fwd_sce(&r);
    case GOP_MSE:
        return kt_mse(s, in_val(&r, t, 0), in_val(&r, t, 1), out_val(&r),
                      m->count[t->in[0]->id]);
    case GOP_SUM:
    case GOP_MEAN: return fwd_reduce(&r);
    case GOP_TRANSPOSE: {
        const vkt_shape *xs = in_shape(&r, t, 0);
        return kt_transpose(s, in_val(&r, t, 0), out_val(&r), xs->dims[0], xs->dims[1], 1.0f,
                            0.0f);
    }
    case GOP_CONCAT: return fwd_concat(&r);
    case GOP_SLICE: return fwd_slice(&r);
    case GOP_DROPOUT:
        if (!training || t->f0 == 0.0f) /* evaluation: the identity */
            return kt_axpby(s, 1.0f, in_val(&r, t, 0), 0.0f, out_val(&r), n);
        return kt_dropout(s, in_val(&r, t, 0), (vkt_view){m->ctrl, CTRL_STEP}, out_val(&r), n,
                          t->f0, t->seed, model_row_shift(m, node, n), 0.0f);
    default:
        if (graph_is_layer_op(t->op))
            return layer_record_forward(m, s, node, training);
        return model_fail(m, VKT_ERROR_INTERNAL, "internal error: op %s has no forward",
                          graph_op_name(t));
    }
}
