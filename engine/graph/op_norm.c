/* op_norm.c - normalizations (kernels: engine/kernels/norm.h): layer normalization over
 * the last axis, and batch normalization over every axis but the channel (axis 1), which
 * in training also updates its running averages, two states, in place. Each saves its
 * per-row or per-channel (mean, rstd) in aux for the backward. Under autocast, layer and
 * RMS normalization keep their input for the backward in 16 bits (OPF_SAVES_X16,
 * autocast.c): the forward rounds x into lp_x, the backward widens it into the first
 * elements of its workspace and runs the fp32 kernel on that. */
#include "graph/layers.h"
#include "graph/op_impl.h"
#include "kernels/cast.h"

/* Workspace elements of norm t: the kernel's `ws`, then (a 16-bit saved x) x widened. */
static uint64_t norm_tmp(const vkt_model *m, const vkt_tensor *t, uint64_t ws)
{
    return ws + (model_saves_x16(m, t->id) ? m->count[t->in[0]->id] : 0);
}

/* The forward's 16-bit copy of x, where the norm keeps one: x [rows, cols] rounded. */
static vkt_status keep_x16(const op_rec *r, uint32_t rows, uint32_t cols)
{
    int32_t lp = op_node(r)->lp_x;
    return lp < 0 ? VKT_OK
                  : kcast_matrix(r->s, VKT_DTYPE_FP32, op_in_val(r->m, r->t, 0), cols,
                                 r->m->val[lp].dtype, model_view(r->m, lp), cols, rows, cols);
}

/* x as the backward reads it: the input's value, or its 16-bit copy widened exactly into
 * the workspace after the kernel's ws elements. */
static vkt_status saved_x(const op_rec *r, uint32_t rows, uint32_t cols, uint64_t ws,
                          vkt_view *x)
{
    const mnode *nd = op_node(r);
    *x = op_in_val(r->m, r->t, 0);
    if (nd->lp_x < 0)
        return VKT_OK;
    *x = model_view(r->m, nd->tmp);
    x->offset += ws;
    return kcast_matrix(r->s, r->m->val[nd->lp_x].dtype, model_view(r->m, nd->lp_x), cols,
                        VKT_DTYPE_FP32, *x, cols, rows, cols);
}

/* x's last axis (layer norm) or axis 1 (batch norm) against the per-channel inputs. */
static vkt_status shape_norm(const vkt_tensor *t, const vkt_shape *const *in, vkt_shape *out,
                             char *msg, size_t size)
{
    static const char *const names[] = {"gamma", "beta", "running_mean", "running_var"};
    const vkt_shape *x = in[0];
    char sx[GRAPH_SHAPE_STR];
    uint32_t c;
    if (t->op != GOP_BATCHNORM) { /* a variance needs two elements, a mean square one */
        if (x->ndim < 1 || x->dims[x->ndim - 1] < (t->op == GOP_LAYERNORM ? 2u : 1u))
            return op_bad(t, msg, size, VKT_ERROR_SHAPE,
                          "x %s: the last axis needs at least 2 elements",
                          graph_shape_str(x, sx));
        c = x->dims[x->ndim - 1];
    } else {
        if (x->ndim < 2)
            return op_bad(t, msg, size, VKT_ERROR_SHAPE, "x[N,C] or x[N,C,H,W] expected: x %s",
                          graph_shape_str(x, sx));
        c = x->dims[1];
    }
    for (uint32_t k = 1; k < t->n_in; k++) {
        vkt_status st = op_vec_ok(t, in[k], c, names[k - 1], msg, size);
        if (st != VKT_OK)
            return st;
    }
    *out = *x;
    return VKT_OK;
}

/* ---- layer normalization ---- */

static vkt_status layernorm_arrays(vkt_model *m, const vkt_tensor *t, uint64_t *aux,
                                   uint64_t *tmp)
{
    uint32_t rows, cols;
    model_rows_cols(op_in_shape(m, t, 0), &rows, &cols);
    *aux = 2ull * rows;
    *tmp = norm_tmp(m, t, kn_layernorm_workspace_elems(rows, cols));
    return VKT_OK;
}

static vkt_status fwd_layernorm(const op_rec *r)
{
    const vkt_model *m = r->m;
    uint32_t rows, cols;
    model_rows_cols(op_in_shape(m, r->t, 0), &rows, &cols);
    vkt_view y = op_out_val(r);
    vkt_status st = keep_x16(r, rows, cols);
    if (st != VKT_OK)
        return st;
    return kn_layernorm(r->s, op_in_val(m, r->t, 0), op_in_val(m, r->t, 1),
                        op_in_val(m, r->t, 2), y, op_view_or(m, op_node(r)->aux, y), rows, cols,
                        r->t->p.norm.eps);
}

static vkt_status bwd_layernorm(const op_rec *r)
{
    const vkt_model *m = r->m;
    const mnode *nd = op_node(r);
    const vkt_tensor *t = r->t;
    uint32_t rows, cols, id = t->id;
    model_rows_cols(op_in_shape(m, t, 0), &rows, &cols);
    vkt_view dy = op_dy(r), g0, g1, g2, x;
    vkt_status st = saved_x(r, rows, cols, kn_layernorm_workspace_elems(rows, cols), &x);
    if (st != VKT_OK)
        return st;
    return kn_layernorm_backward(r->s, x, op_in_val(m, t, 1),
                                 op_view_or(m, nd->aux, dy), dy, op_dx_or_null(m, t, 0, &g0),
                                 op_beta(m, id, 0), op_dx_or_null(m, t, 1, &g1),
                                 op_beta(m, id, 1), op_dx_or_null(m, t, 2, &g2),
                                 op_beta(m, id, 2), op_view_or(m, nd->tmp, dy), rows, cols);
}

static void rows_cols(const vkt_shape *s, uint32_t *rows, uint32_t *cols)
{
    *cols = s->dims[s->ndim - 1];
    *rows = (uint32_t)(graph_count(s) / *cols);
}

static void ref_layernorm(const graph_ref_args *a)
{
    uint32_t rows, cols;
    rows_cols(a->in_shape[0], &rows, &cols);
    kn_ref_layernorm(a->in[0], a->in[1], a->in[2], a->out, rows, cols, a->node->p.norm.eps);
}

static void ref_layernorm_bwd(const graph_ref_args *a)
{
    uint32_t rows, cols;
    rows_cols(a->in_shape[0], &rows, &cols);
    kn_ref_layernorm_backward(a->in[0], a->in[1], a->dout, a->din[0], a->din[1], a->din[2], rows,
                              cols, a->node->p.norm.eps);
}

static const char *const names_ln[] = {"x", "gamma", "beta"};

const graph_op_def graph_op_layernorm = {
    .name = "layer_norm", .fn = "vkt_layer_norm", .flags = OPF_AUX_SAVED | OPF_SAVES_X16,
    .min_in = 3, .max_in = 3, .in_names = names_ln, .shape = shape_norm,
    .arrays = layernorm_arrays, .forward = fwd_layernorm, .backward = bwd_layernorm,
    .backward_reads = op_reads_inputs, .ref_forward = ref_layernorm,
    .ref_backward = ref_layernorm_bwd, .grad_rtol = 1e-5,
};

/* ---- RMS normalization: aux holds 1/rms per row ---- */

static vkt_status rmsnorm_arrays(vkt_model *m, const vkt_tensor *t, uint64_t *aux,
                                 uint64_t *tmp)
{
    uint32_t rows, cols;
    model_rows_cols(op_in_shape(m, t, 0), &rows, &cols);
    *aux = rows;
    *tmp = norm_tmp(m, t, kn_rmsnorm_workspace_elems(rows, cols));
    return VKT_OK;
}

static vkt_status fwd_rmsnorm(const op_rec *r)
{
    const vkt_model *m = r->m;
    uint32_t rows, cols;
    model_rows_cols(op_in_shape(m, r->t, 0), &rows, &cols);
    vkt_view y = op_out_val(r);
    vkt_status st = keep_x16(r, rows, cols);
    if (st != VKT_OK)
        return st;
    return kn_rmsnorm(r->s, op_in_val(m, r->t, 0), op_in_val(m, r->t, 1), y,
                      op_view_or(m, op_node(r)->aux, y), rows, cols, r->t->p.norm.eps);
}

static vkt_status bwd_rmsnorm(const op_rec *r)
{
    const vkt_model *m = r->m;
    const mnode *nd = op_node(r);
    const vkt_tensor *t = r->t;
    uint32_t rows, cols, id = t->id;
    model_rows_cols(op_in_shape(m, t, 0), &rows, &cols);
    vkt_view dy = op_dy(r), g0, g1, x;
    if (!op_want(m, t, 0) && !op_want(m, t, 1))
        return VKT_OK;
    vkt_status st = saved_x(r, rows, cols, kn_rmsnorm_workspace_elems(rows, cols), &x);
    if (st != VKT_OK)
        return st;
    return kn_rmsnorm_backward(r->s, x, op_in_val(m, t, 1),
                               op_view_or(m, nd->aux, dy), dy, op_dx_or_null(m, t, 0, &g0),
                               op_beta(m, id, 0), op_dx_or_null(m, t, 1, &g1),
                               op_beta(m, id, 1), op_view_or(m, nd->tmp, dy), rows, cols);
}

static void ref_rmsnorm(const graph_ref_args *a)
{
    uint32_t rows, cols;
    rows_cols(a->in_shape[0], &rows, &cols);
    kn_ref_rmsnorm(a->in[0], a->in[1], a->out, NULL, rows, cols, a->node->p.norm.eps);
}

static void ref_rmsnorm_bwd(const graph_ref_args *a)
{
    uint32_t rows, cols;
    rows_cols(a->in_shape[0], &rows, &cols);
    kn_ref_rmsnorm_backward(a->in[0], a->in[1], a->dout, a->din[0], a->din[1], rows, cols,
                            a->node->p.norm.eps);
}

static const char *const names_rms[] = {"x", "gamma"};

const graph_op_def graph_op_rmsnorm = {
    .name = "rms_norm", .fn = "vkt_rms_norm", .flags = OPF_AUX_SAVED | OPF_SAVES_X16,
    .min_in = 2, .max_in = 2, .in_names = names_rms, .shape = shape_norm,
    .arrays = rmsnorm_arrays, .forward = fwd_rmsnorm, .backward = bwd_rmsnorm,
    .backward_reads = op_reads_inputs, .ref_forward = ref_rmsnorm,
    .ref_backward = ref_rmsnorm_bwd, .grad_rtol = 1e-5,
};

/* ---- batch normalization ---- */

static vkt_status batchnorm_arrays(vkt_model *m, const vkt_tensor *t, uint64_t *aux,
                                   uint64_t *tmp)
{
    uint32_t b, c, hw;
    layer_bn_dims(op_in_shape(m, t, 0), &b, &c, &hw);
    *aux = 2ull * c;
    *tmp = kn_batchnorm_workspace_elems(b, c, hw);
    return VKT_OK;
}

static vkt_status fwd_batchnorm(const op_rec *r)
{
    const vkt_model *m = r->m;
    const vkt_tensor *t = r->t;
    uint32_t b, c, hw;
    layer_bn_dims(op_in_shape(m, t, 0), &b, &c, &hw);
    vkt_view y = op_out_val(r);
    return kn_batchnorm(r->s, op_in_val(m, t, 0), op_in_val(m, t, 1), op_in_val(m, t, 2), y,
                        op_view_or(m, op_node(r)->aux, y), op_in_val(m, t, 3),
                        op_in_val(m, t, 4), b, c, hw, t->p.batchnorm.eps,
                        t->p.batchnorm.momentum,
                        !r->training ? KN_BN_EVAL
                        : r->keep_state ? KN_BN_TRAIN_KEEP : KN_BN_TRAIN);
}

static vkt_status bwd_batchnorm(const op_rec *r)
{
    const vkt_model *m = r->m;
    const mnode *nd = op_node(r);
    const vkt_tensor *t = r->t;
    uint32_t b, c, hw, id = t->id;
    layer_bn_dims(op_in_shape(m, t, 0), &b, &c, &hw);
    vkt_view dy = op_dy(r), g0, g1, g2;
    return kn_batchnorm_backward(r->s, op_in_val(m, t, 0), op_in_val(m, t, 1),
                                 op_view_or(m, nd->aux, dy), dy, op_dx_or_null(m, t, 0, &g0),
                                 op_beta(m, id, 0), op_dx_or_null(m, t, 1, &g1),
                                 op_beta(m, id, 1), op_dx_or_null(m, t, 2, &g2),
                                 op_beta(m, id, 2), op_view_or(m, nd->tmp, dy), b, c, hw);
}

/* The running averages are updated in place, like the device's states. */
static void ref_batchnorm(const graph_ref_args *a)
{
    uint32_t b, c, hw;
    layer_bn_dims(a->in_shape[0], &b, &c, &hw);
    kn_ref_batchnorm(a->in[0], a->in[1], a->in[2], a->out, (double *)a->in[3],
                     (double *)a->in[4], b, c, hw, a->node->p.batchnorm.eps,
                     a->node->p.batchnorm.momentum, a->training);
}

static void ref_batchnorm_bwd(const graph_ref_args *a)
{
    uint32_t b, c, hw;
    layer_bn_dims(a->in_shape[0], &b, &c, &hw);
    kn_ref_batchnorm_backward(a->in[0], a->in[1], a->dout, a->din[0], a->din[1], a->din[2], b, c,
                              hw, a->node->p.batchnorm.eps);
}

static const char *const names_bn[] = {"x", "gamma", "beta", "running_mean", "running_var"};

const graph_op_def graph_op_batchnorm = {
    .name = "batch_norm", .fn = "vkt_batch_norm", .flags = OPF_AUX_SAVED,
    .min_in = 5, .max_in = 5, .in_names = names_bn, .shape = shape_norm,
    .arrays = batchnorm_arrays, .forward = fwd_batchnorm, .backward = bwd_batchnorm,
    .backward_reads = op_reads_inputs, .ref_forward = ref_batchnorm,
    .ref_backward = ref_batchnorm_bwd, .grad_rtol = 1e-5,
};
