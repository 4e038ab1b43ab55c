/*
 * op_impl.h - what the op entries (op_*.c) share: messages from shape rules, and the
 * views a recording takes of a node's inputs, output, gradients and arrays.
 */
#ifndef VKT_GRAPH_OP_IMPL_H
#define VKT_GRAPH_OP_IMPL_H

#include "graph/model.h"
#include "graph/ops_ref_util.h"
#include "kernels/train_ops.h"

/* Writes "<fn>: <message>" into msg; returns st. */
vkt_status op_bad(const vkt_tensor *t, char *msg, size_t size, vkt_status st, const char *fmt,
                  ...) __attribute__((format(printf, 5, 6)));
/* "a [2,3] and b [4,5]": inputs 0 and 1 by the names given. */
const char *op_two(const vkt_shape *const *in, const char *na, const char *nb, char *buf,
                   size_t size);
/* A per-channel vector [c] (gamma, beta, running statistics, a bias). */
vkt_status op_vec_ok(const vkt_tensor *t, const vkt_shape *v, uint32_t c, const char *what,
                     char *msg, size_t size);
/* Shape rules shared by several ops: the output is input 0's shape. */
vkt_status op_shape_same(const vkt_tensor *t, const vkt_shape *const *in, vkt_shape *out,
                         char *msg, size_t size);

/* ---- recording ---- */

static inline mnode *op_node(const op_rec *r) { return &r->m->node[r->t->id]; }
static inline const vkt_shape *op_in_shape(const vkt_model *m, const vkt_tensor *t, uint32_t k)
{
    return &m->shape[t->in[k]->id];
}
static inline vkt_view op_in_val(const vkt_model *m, const vkt_tensor *t, uint32_t k)
{
    return model_view(m, m->node[t->in[k]->id].val);
}
static inline vkt_view op_out_val(const op_rec *r) { return model_view(r->m, op_node(r)->val); }
/* The gradient of the recorded node's output. */
static inline vkt_view op_dy(const op_rec *r) { return model_view(r->m, op_node(r)->grad); }
/* Whether the backward writes input k's gradient. */
static inline int op_want(const vkt_model *m, const vkt_tensor *t, uint32_t k)
{
    const mnode *in = &m->node[t->in[k]->id];
    return in->needs_grad && in->grad >= 0;
}
static inline vkt_view op_dx(const vkt_model *m, const vkt_tensor *t, uint32_t k)
{
    return model_view(m, m->node[t->in[k]->id].grad);
}
/* Input k's gradient view into *v; returns v, or NULL when not wanted. */
static inline const vkt_view *op_dx_or_null(const vkt_model *m, const vkt_tensor *t,
                                            uint32_t k, vkt_view *v)
{
    if (!op_want(m, t, k))
        return NULL;
    *v = op_dx(m, t, k);
    return v;
}
/* 0 for the first contribution to input k's gradient (writes), 1 after (adds); the
 * flags are those of node `by`, the node whose backward step runs (a fused activation
 * runs its producer's). */
static inline float op_beta(const vkt_model *m, uint32_t by, uint32_t k)
{
    return m->node[by].acc[k] ? 1.0f : 0.0f;
}
/* A view of value v, or `fallback` when v does not exist (an array of size 0). */
static inline vkt_view op_view_or(const vkt_model *m, int32_t v, vkt_view fallback)
{
    return v >= 0 ? model_view(m, v) : fallback;
}
static inline vkt_view op_ctrl_step(const vkt_model *m) { return (vkt_view){m->ctrl, CTRL_STEP}; }

/* ---- the plan: what a backward reads (acc_list in model.h) ---- */

static inline int32_t op_in_value(const vkt_model *m, const vkt_tensor *t, uint32_t k)
{
    return m->node[t->in[k]->id].val;
}
/* Reads every input's value and, with OPF_AUX_SAVED, the aux array. */
void op_reads_inputs(const vkt_model *m, const vkt_tensor *t, acc_list *l);
/* op_product.c: the fp32 value v of shape s, seen as [rows, last dim], rounded into the
 * 16-bit value `to` of autocast op t (autocast.c; t->dtype the type). */
vkt_status op_cast16(const op_rec *r, const vkt_tensor *t, vkt_view v, const vkt_shape *s,
                     int32_t to);

/* Linear x w + b into dst, then activation op applied by the bias kernel: in place, or
 * into *y with dst keeping the pre-activation; lin is a linear or linear_act node
 * (op_product.c). */
vkt_status op_linear_act(const op_rec *r, const vkt_tensor *lin, vkt_unary_op op, float alpha,
                         vkt_view dst, const vkt_view *y);

#endif
