/* op_product.c - matrix products: matmul a [M,K] b [K,N] and linear x [..., in] w [in,out]
 * + b [out] (every leading dimension of x a row). The forward is one GEMM, then the bias
 * kernel adds b and applies a fused activation (autodiff.c fuses a linear into the
 * activation that is its only use). The backward uses vkt_gemm's transposes, dW = X^T dZ
 * and dX = dZ W^T; with an activation fused, dz and the bias gradient come from one
 * dispatch, in place over the activation's gradient. A product the autocast rewrite gave
 * a 16-bit dtype (autocast.c) rounds its operands into the node's lp_x, lp_w and lp_dz
 * first and runs the GEMM on those, accumulating in fp32 into the same fp32 outputs. */
#include "graph/op_impl.h"
#include "kernels/cast.h"
#include "activation.h"

#include <stdlib.h>
#include <string.h>

/* ---- shapes ---- */

static vkt_status shape_matmul(const vkt_tensor *t, const vkt_shape *const *in, vkt_shape *out,
                               char *msg, size_t size)
{
    const vkt_shape *a = in[0], *b = in[1];
    char buf[256];
    if (a->ndim != 2 || b->ndim != 2)
        return op_bad(t, msg, size, VKT_ERROR_SHAPE, "2-D operands expected: %s",
                      op_two(in, "a", "b", buf, sizeof buf));
    if (a->dims[1] != b->dims[0])
        return op_bad(t, msg, size, VKT_ERROR_SHAPE, "inner dimensions differ (%u and %u): %s",
                      a->dims[1], b->dims[0], op_two(in, "a", "b", buf, sizeof buf));
    *out = (vkt_shape){2, {a->dims[0], b->dims[1]}};
    return VKT_OK;
}

static vkt_status shape_linear(const vkt_tensor *t, const vkt_shape *const *in, vkt_shape *out,
                               char *msg, size_t size)
{
    const vkt_shape *x = in[0], *w = in[1];
    char buf[256], sb[GRAPH_SHAPE_STR];
    if (x->ndim < 2 || w->ndim != 2)
        return op_bad(t, msg, size, VKT_ERROR_SHAPE,
                      "x[...,in] (2-D or more) and w[in,out] expected: %s",
                      op_two(in, "x", "w", buf, sizeof buf));
    uint32_t n_in = x->dims[x->ndim - 1];
    if (n_in != w->dims[0])
        return op_bad(t, msg, size, VKT_ERROR_SHAPE, "x has %u features but w expects %u: %s",
                      n_in, w->dims[0], op_two(in, "x", "w", buf, sizeof buf));
    if (t->n_in == 3) {
        const vkt_shape *b = in[2];
        if (b->ndim != 1 || b->dims[0] != w->dims[1])
            return op_bad(t, msg, size, VKT_ERROR_SHAPE,
                          "bias b %s does not match w %s: [%u] expected",
                          graph_shape_str(b, sb), graph_shape_str(w, buf), w->dims[1]);
    }
    *out = *x;
    out->dims[x->ndim - 1] = w->dims[1];
    return VKT_OK;
}

/* The rows of a product follow a's. */
static int rows_of_a(const vkt_tensor *t, const uint8_t *batch_major)
{
    return batch_major[t->in[0]->id];
}

/* ---- forward ---- */

/* C[M,N] (+)= op(A) * op(B): trans_b with B stored [N,K], trans_a with A stored [K,M];
 * beta 1 adds into C (a gradient's later contributions). A and B of type ab (fp32, or an
 * autocast product's 16-bit type), C fp32. */
static vkt_status gemm(vkt_stream *s, vkt_dtype ab, int trans_a, int trans_b, vkt_view a,
                       vkt_view b, vkt_view c, uint32_t m, uint32_t k, uint32_t n, float beta)
{
    vkt_gemm_desc d = {.trans_a = trans_a, .trans_b = trans_b, .m = m, .n = n, .k = k,
                       .alpha = 1.0f, .beta = beta, .a = a, .b = b, .c = c,
                       .a_type = ab, .b_type = ab};
    return vkt_gemm(s, &d);
}

vkt_status op_cast16(const op_rec *r, const vkt_tensor *t, vkt_view v, const vkt_shape *s,
                     int32_t to)
{
    uint32_t rows, cols;
    model_rows_cols(s, &rows, &cols);
    return kcast_matrix(r->s, VKT_DTYPE_FP32, v, cols, t->dtype, model_view(r->m, to), cols,
                        rows, cols);
}

/* The operands of product t's forward: its inputs' values, or (autocast) their 16-bit
 * copies, made here. */
static vkt_status operands(const op_rec *r, const vkt_tensor *t, vkt_view *x, vkt_view *w)
{
    const vkt_model *m = r->m;
    const mnode *nd = &m->node[t->id];
    *x = op_in_val(m, t, 0);
    *w = op_in_val(m, t, 1);
    if (t->dtype == VKT_DTYPE_FP32)
        return VKT_OK;
    vkt_status st = op_cast16(r, t, *x, op_in_shape(m, t, 0), nd->lp_x);
    if (st == VKT_OK)
        st = op_cast16(r, t, *w, op_in_shape(m, t, 1), nd->lp_w);
    *x = model_view(m, nd->lp_x);
    *w = model_view(m, nd->lp_w);
    return st;
}

static vkt_status fwd_matmul(const op_rec *r)
{
    const vkt_tensor *t = r->t;
    const vkt_shape *as = op_in_shape(r->m, t, 0), *bs = op_in_shape(r->m, t, 1);
    vkt_view a, b;
    vkt_status st = operands(r, t, &a, &b);
    return st != VKT_OK ? st
                        : gemm(r->s, t->dtype, 0, 0, a, b, op_out_val(r), as->dims[0],
                               as->dims[1], bs->dims[1], 0.0f);
}

vkt_status op_linear_act(const op_rec *r, const vkt_tensor *lin, vkt_unary_op op, float alpha,
                         vkt_view dst, const vkt_view *y)
{
    const vkt_model *m = r->m;
    uint32_t rows, k, cols = op_in_shape(m, lin, 1)->dims[1];
    model_rows_cols(op_in_shape(m, lin, 0), &rows, &k); /* x [..., k]: leading dims are rows */
    vkt_view x, w;
    vkt_status st = operands(r, lin, &x, &w);
    if (st == VKT_OK)
        st = gemm(r->s, lin->dtype, 0, 0, x, w, dst, rows, k, cols, 0.0f);
    if (st != VKT_OK)
        return st;
    int bias = lin->n_in == 3;
    if (!bias && op == VKT_UNARY_SCALE && alpha == 1.0f && !y)
        return VKT_OK; /* nothing to add, nothing to apply */
    vkt_view b = bias ? op_in_val(m, lin, 2) : dst;
    return kt_bias_act(r->s, op, alpha, dst, bias ? &b : NULL, y, rows, cols);
}

static vkt_status fwd_linear(const op_rec *r)
{
    return op_linear_act(r, r->t, VKT_UNARY_SCALE, 1.0f, op_out_val(r), NULL);
}

/* ---- backward ---- */

/* Gradients of a product x[M,K] w[K,N] from dz[M,N], with the write/add flags of the
 * step's node `by`. Slots go in reverse, the order the flags were given in (model_slot):
 * for matmul(w, w) dW writes, then dX adds; and X is read before dX is written, so the
 * plan may give dX the memory of X. */
static vkt_status product_grads(const op_rec *r, const vkt_tensor *src, vkt_view dz)
{
    const vkt_model *m = r->m;
    uint32_t by = r->t->id;
    const mnode *nd = &m->node[src->id];
    uint32_t rows, k, n = op_in_shape(m, src, 1)->dims[1];
    model_rows_cols(op_in_shape(m, src, 0), &rows, &k);
    vkt_view x = op_in_val(m, src, 0), w = op_in_val(m, src, 1);
    vkt_status st = VKT_OK;
    if (src->dtype != VKT_DTYPE_FP32 && (op_want(m, src, 0) || op_want(m, src, 1))) {
        /* autocast: the forward's 16-bit x and w, and dz rounded [rows, n] */
        st = op_cast16(r, src, dz, &m->shape[src->id], nd->lp_dz);
        dz = model_view(m, nd->lp_dz);
        x = model_view(m, nd->lp_x);
        w = model_view(m, nd->lp_w);
    }
    int32_t from = nd->lp_xb >= 0 ? model_x16_source(m, src->id) : -1;
    if (st == VKT_OK && op_want(m, src, 1) && from >= 0) { /* x rebuilt: r(f(widen(z16))) */
        const vkt_tensor *u = m->t[from];
        st = kt_act_rebuild16(r->s, u->p.unary.op, u->p.unary.alpha, src->dtype,
                              model_view(m, m->node[from].aux), model_view(m, nd->lp_xb),
                              rows, k);
        x = model_view(m, nd->lp_xb);
    }
    if (st == VKT_OK && op_want(m, src, 1)) /* dW = X^T dZ */
        st = gemm(r->s, src->dtype, 1, 0, x, dz, op_dx(m, src, 1), k, rows, n,
                  op_beta(m, by, 1));
    if (st == VKT_OK && op_want(m, src, 0) && nd->lp_wb >= 0) { /* w rounded again */
        st = op_cast16(r, src, op_in_val(m, src, 1), op_in_shape(m, src, 1), nd->lp_wb);
        w = model_view(m, nd->lp_wb);
    }
    if (st == VKT_OK && op_want(m, src, 0)) /* dX = dZ W^T */
        st = gemm(r->s, src->dtype, 0, 1, dz, w, op_dx(m, src, 0), rows, n, k,
                  op_beta(m, by, 0));
    return st;
}

static vkt_status bwd_matmul(const op_rec *r) { return product_grads(r, r->t, op_dy(r)); }

/* A linear alone, or fused with its activation (r->t a linear_act node: the linear's
 * inputs, the activation in p.unary). */
static vkt_status bwd_linear(const op_rec *r)
{
    vkt_model *m = r->m;
    const mnode *nd = op_node(r);
    const vkt_tensor *lin = r->t;
    uint32_t rows = (uint32_t)(m->count[lin->in[0]->id] / op_in_shape(m, lin, 1)->dims[0]);
    uint32_t cols = op_in_shape(m, lin, 1)->dims[1];
    int bias = lin->n_in == 3 && op_want(m, lin, 2);
    vkt_view dy = op_dy(r), db = bias ? op_dx(m, lin, 2) : dy, dz = dy;
    float beta_b = op_beta(m, r->t->id, 2);
    vkt_status st = VKT_OK;
    if (lin->op == GOP_LINEAR_ACT) {
        vkt_unary_op op = r->t->p.unary.op;
        int from_y = nd->aux < 0;
        vkt_view v = model_view(m, from_y ? nd->val : nd->aux);
        if (nd->tmp >= 0)
            dz = model_view(m, nd->tmp);
        vkt_dtype vt = from_y ? VKT_DTYPE_FP32 : m->val[nd->aux].dtype;
        st = kt_bias_act_backward(r->s, op, r->t->p.unary.alpha, from_y, vt, v, dy, &dz, 0.0f,
                                  bias ? &db : NULL, beta_b, rows, cols);
    } else if (bias) {
        st = kt_bias_act_backward(r->s, VKT_UNARY_SCALE, 1.0f, 1, VKT_DTYPE_FP32, dy, dy, NULL,
                                  0.0f, &db, beta_b, rows, cols);
    }
    return st == VKT_OK ? product_grads(r, lin, dz) : st;
}

/* The backward's three dispatches (the plan's phases): 0 the bias/activation kernel (dz,
 * the bias gradient), 1 dW = X^T dz, 2 dX = dz W^T. */
static void product_access(const vkt_model *m, uint32_t i, acc_list *l)
{
    const mnode *nd = &m->node[i];
    const vkt_tensor *lin = m->t[i];
    int fused = lin->op == GOP_LINEAR_ACT;
    int32_t dz = nd->tmp >= 0 ? nd->tmp : nd->grad;
    plan_add(l, nd->grad, 0, 0);
    if (fused)
        plan_add(l, nd->aux >= 0 ? nd->aux : nd->val, 0, 0);
    /* dz: written by phase 0 when an activation is fused (into tmp, or in place over the
     * activation's gradient), then read by the two products */
    for (int ph = 0; ph < 3; ph++)
        plan_add(l, dz, ph == 0 && (nd->tmp >= 0 || fused), ph);
    if (lin->n_in == 3)
        plan_add(l, plan_in_grad(m, lin, 2), 1, 0);
    /* autocast: dz rounded at the end of phase 0 and read by both products, which read
     * the forward's 16-bit x and w instead of the fp32 values */
    plan_add(l, nd->lp_dz, 1, 0);
    for (int ph = 1; ph < 3; ph++)
        plan_add(l, nd->lp_dz, 0, ph);
    if (nd->lp_xb >= 0) { /* x rebuilt from its producer's 16-bit z before dW */
        plan_add(l, nd->lp_xb, 1, 1);
        plan_add(l, m->node[lin->in[0]->id].aux, 0, 1);
    }
    plan_add(l, nd->lp_xb >= 0 ? nd->lp_xb : nd->lp_x >= 0 ? nd->lp_x : op_in_value(m, lin, 0),
             0, 1);
    plan_add(l, plan_in_grad(m, lin, 1), 1, 1);
    plan_add(l, nd->lp_wb, 1, 2); /* a parameter w rounded again before dX (no arena value) */
    plan_add(l, nd->lp_wb >= 0 ? nd->lp_wb : nd->lp_w >= 0 ? nd->lp_w : op_in_value(m, lin, 1),
             0, 2);
    plan_add(l, plan_in_grad(m, lin, 0), 1, 2);
}

/* ---- references ---- */

/* x [m, k] (a linear's x: [..., k], m the product of the leading dimensions), w [k, n]. */
static void ref_product(const graph_ref_args *a, int bias)
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

static void ref_product_backward(const graph_ref_args *a, int bias)
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

static void ref_matmul(const graph_ref_args *a) { ref_product(a, 0); }
static void ref_linear(const graph_ref_args *a) { ref_product(a, a->node->n_in == 3); }
static void ref_matmul_bwd(const graph_ref_args *a) { ref_product_backward(a, 0); }
static void ref_linear_bwd(const graph_ref_args *a)
{
    ref_product_backward(a, a->node->n_in == 3);
}

/* Which activations a linear absorbs, and the fused op's name (shaders/activation.h's
 * list: the bias kernel applies them after it). */
#define FUSES(NAME, value, name, fn, fuses, dfy) [value] = fuses,
static const int k_fuses[VKT_UNARY_COUNT] = {ACT_LIST(FUSES)};
#undef FUSES
#define FUSED_NAME(NAME, value, name, fn, fuses, dfy) [value] = "linear+" #name,
static const char *const k_fused_names[VKT_UNARY_COUNT] = {ACT_LIST(FUSED_NAME)};
#undef FUSED_NAME

static graph_op linear_fuse(const vkt_tensor *t, const vkt_tensor *use, graph_params *p)
{
    (void)t;
    if (use->op != GOP_UNARY || (unsigned)use->p.unary.op >= VKT_UNARY_COUNT ||
        !k_fuses[use->p.unary.op])
        return GOP_COUNT;
    *p = use->p;
    return GOP_LINEAR_ACT;
}

static const char *const names_ab[] = {"a", "b"};
static const char *const names_xwb[] = {"x", "w", "b"};

const graph_op_def graph_op_matmul = {
    .name = "matmul", .fn = "vkt_matmul",
    .flags = OPF_SLOTS_REVERSED | OPF_AUTOCAST | OPF_RECAST_W | OPF_REBUILD_X16,
    .min_in = 2, .max_in = 2, .in_names = names_ab,
    .shape = shape_matmul, .batch_major = rows_of_a,
    .forward = fwd_matmul, .backward = bwd_matmul, .backward_access = product_access,
    .ref_forward = ref_matmul, .ref_backward = ref_matmul_bwd, .grad_rtol = 1e-6,
};

const graph_op_def graph_op_linear = {
    .name = "linear", .fn = "vkt_linear",
    .flags = OPF_SLOTS_REVERSED | OPF_AUTOCAST | OPF_RECAST_W | OPF_REBUILD_X16,
    .min_in = 2, .max_in = 3, .in_names = names_xwb,
    .shape = shape_linear, .batch_major = rows_of_a,
    .forward = fwd_linear, .backward = bwd_linear, .backward_access = product_access,
    .fuse_with = linear_fuse, .ref_forward = ref_linear, .ref_backward = ref_linear_bwd,
    .grad_rtol = 1e-6,
};

/* ---- linear_act: a linear and its activation, fused by the model's rewrite ---- */

static const char *linear_act_name(const vkt_tensor *t)
{
    unsigned op = t->p.unary.op;
    return op < VKT_UNARY_COUNT && k_fuses[op] ? k_fused_names[op] : "linear_act";
}

/* The pre-activation z is saved (aux) where the backward cannot take f' from the output
 * y (gelu, silu, leaky relu with a negative slope); an autocast product saves it in its
 * 16-bit type (OPF_AUX_AUTOCAST), as a 16-bit product output would be. */
static vkt_status linear_act_arrays(vkt_model *m, const vkt_tensor *t, uint64_t *aux,
                                    uint64_t *tmp)
{
    *tmp = 0;
    *aux = m->training && m->node[t->id].needs_grad &&
                   !kt_act_grad_from_y(t->p.unary.op, t->p.unary.alpha)
               ? m->count[t->id]
               : 0;
    return VKT_OK;
}

/* A 16-bit pre-activation (an autocast product's aux, autodiff.c's make_array): the
 * product goes into y, and one kernel adds the bias, applies f in place and keeps the
 * rounded sum (kt_bias_act_keep16), so the saved z costs 2 bytes an element. */
static vkt_status linear_act_keep16(const op_rec *r, vkt_view y, int32_t aux)
{
    const vkt_model *m = r->m;
    const vkt_tensor *lin = r->t;
    uint32_t rows, k, cols = op_in_shape(m, lin, 1)->dims[1];
    model_rows_cols(op_in_shape(m, lin, 0), &rows, &k);
    vkt_view x, w;
    vkt_status st = operands(r, lin, &x, &w);
    if (st == VKT_OK)
        st = gemm(r->s, lin->dtype, 0, 0, x, w, y, rows, k, cols, 0.0f);
    if (st != VKT_OK)
        return st;
    vkt_view b = lin->n_in == 3 ? op_in_val(m, lin, 2) : y;
    return kt_bias_act_keep16(r->s, lin->p.unary.op, lin->p.unary.alpha, m->val[aux].dtype, y,
                              lin->n_in == 3 ? &b : NULL, model_view(m, aux), rows, cols);
}

static vkt_status fwd_linear_act(const op_rec *r)
{
    const mnode *nd = op_node(r);
    vkt_view y = op_out_val(r);
    vkt_unary_op op = r->t->p.unary.op;
    float alpha = r->t->p.unary.alpha;
    if (nd->aux >= 0 && r->m->val[nd->aux].dtype != VKT_DTYPE_FP32)
        return linear_act_keep16(r, y, nd->aux);
    if (nd->aux >= 0)
        return op_linear_act(r, r->t, op, alpha, model_view(r->m, nd->aux), &y);
    return op_linear_act(r, r->t, op, alpha, y, NULL);
}

/* z = x w + b, then y = f(z). */
static void ref_linear_act(const graph_ref_args *a)
{
    ref_product(a, a->node->n_in == 3);
    uint64_t n = graph_count(&a->out_shape);
    for (uint64_t i = 0; i < n; i++)
        a->out[i] = graph_ref_act(a->node->p.unary.op, a->node->p.unary.alpha, a->out[i]);
}

/* dz = dy f'(z) with z recomputed, then the linear's backward from dz. */
static void ref_linear_act_bwd(const graph_ref_args *a)
{
    uint64_t n = graph_count(&a->out_shape);
    double *z = malloc((n ? n : 1) * sizeof *z), *dz = malloc((n ? n : 1) * sizeof *dz);
    if (z && dz) {
        graph_ref_args b = *a;
        b.out = z;
        ref_product(&b, a->node->n_in == 3);
        for (uint64_t i = 0; i < n; i++)
            dz[i] = a->dout[i] * graph_ref_act_grad(a->node->p.unary.op, a->node->p.unary.alpha,
                                                    z[i]);
        b.dout = dz;
        ref_product_backward(&b, a->node->n_in == 3);
    }
    free(z);
    free(dz);
}

const graph_op_def graph_op_linear_act = {
    .name = "linear_act", .fn = "vkt_linear", .name_of = linear_act_name,
    .flags = OPF_SLOTS_REVERSED | OPF_FUSED | OPF_AUTOCAST | OPF_AUX_AUTOCAST | OPF_RECAST_W |
             OPF_REBUILD_X16,
    .min_in = 2, .max_in = 3, .in_names = names_xwb,
    .shape = shape_linear, .batch_major = rows_of_a, .arrays = linear_act_arrays,
    .forward = fwd_linear_act, .backward = bwd_linear, .backward_access = product_access,
    .ref_forward = ref_linear_act, .ref_backward = ref_linear_act_bwd, .grad_rtol = 1e-5,
};
