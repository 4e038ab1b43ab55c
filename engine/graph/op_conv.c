/* op_conv.c - conv2d and 2-D pooling (kernels: engine/kernels/conv.h). Geometry comes
 * from the kernels' own init functions (layer_conv_geom, layer_pool_geom in layers.c), so
 * the graph and the kernels agree on every size. conv2d's aux is its im2col workspace
 * (forward only, the same size serves the backward as tmp; none with conv_implicit); a
 * relu after a conv2d is fused into the conv's output move (autodiff.c), its derivative
 * taken from the output. A conv the autocast rewrite gave a 16-bit dtype (autocast.c)
 * rounds x and w into the node's lp_x and lp_w in its forward and dy into lp_dz in its
 * backward, and runs kc_conv2d_lowp on them (fp32 accumulation into the same fp32
 * outputs and gradients); its workspace is then kc_conv_lowp_workspace_elems'. */
#include "graph/layers.h"
#include "graph/op_impl.h"

#include <stdlib.h>

static uint64_t max_binding_elems(const vkt_model *m)
{
    vkt_device_info info;
    if (vkt_context_device_info(m->ctx, &info) != VKT_OK)
        return UINT32_MAX;
    return info.max_storage_buffer_range / 4;
}

/* ---- conv2d ---- */

static vkt_status shape_conv(const vkt_tensor *t, const vkt_shape *const *in, vkt_shape *out,
                             char *msg, size_t size)
{
    kc_conv g;
    char text[VKT_ERRMSG_SIZE];
    vkt_status st = layer_conv_geom(t, in[0], in[1], &g, text, sizeof text);
    if (st != VKT_OK)
        return op_bad(t, msg, size, st, "%s", text);
    if (t->n_in == 3 && (st = op_vec_ok(t, in[2], g.oc, "bias b", msg, size)) != VKT_OK)
        return st;
    *out = (vkt_shape){4, {g.n, g.oc, g.oh, g.ow}};
    return VKT_OK;
}

static vkt_status conv_geom(vkt_model *m, const vkt_tensor *t, kc_conv *g)
{
    char msg[VKT_ERRMSG_SIZE];
    vkt_status st = layer_conv_geom(t, op_in_shape(m, t, 0), op_in_shape(m, t, 1), g, msg,
                                    sizeof msg);
    return st == VKT_OK ? VKT_OK : model_fail(m, st, "vkt_conv2d: %s", msg);
}

/* The same workspace forward (im2col) and backward, or a limit error; none for the
 * conv_implicit variant. */
static vkt_status conv_arrays(vkt_model *m, const vkt_tensor *t, uint64_t *aux, uint64_t *tmp)
{
    kc_conv g;
    vkt_status st = conv_geom(m, t, &g);
    if (st != VKT_OK)
        return st;
    *aux = *tmp = 0;
    uint64_t max = max_binding_elems(m);
    if (t->dtype != VKT_DTYPE_FP32 && kc_conv_lowp_uses_workspace(m->ctx)) {
        *aux = *tmp = kc_conv_lowp_workspace_elems(m->ctx, &g);
        if (*aux == 0)
            return model_fail(m, VKT_ERROR_LIMIT,
                              "vkt_conv2d: one sample's im2col columns (%u x %u x %u "
                              "elements) exceed the device's maxStorageBufferRange",
                              g.oh * g.ow, g.c / g.groups, g.kh * g.kw);
        return VKT_OK;
    }
    if (!kc_conv_uses_workspace(m->ctx) || t->dtype != VKT_DTYPE_FP32) { /* conv_implicit: one sample's x and y bound */
        uint64_t x = (uint64_t)g.c * g.h * g.w, y = (uint64_t)g.oc * g.oh * g.ow;
        if (x > max || y > max)
            return model_fail(m, VKT_ERROR_LIMIT,
                              "vkt_conv2d: one sample's %s (%llu elements) exceeds the "
                              "device's maxStorageBufferRange (%llu elements)",
                              x > max ? "input" : "output",
                              (unsigned long long)(x > max ? x : y), (unsigned long long)max);
        return VKT_OK;
    }
    *aux = *tmp = kc_conv_workspace_elems(&g, max);
    if (*aux == 0)
        return model_fail(m, VKT_ERROR_LIMIT,
                          "vkt_conv2d: one sample's im2col columns (%u x %u x %u elements) "
                          "exceed the device's maxStorageBufferRange (%llu elements)",
                          g.oh * g.ow, g.c / g.groups, g.kh * g.kw, (unsigned long long)max);
    return VKT_OK;
}

/* The same for an autocast conv (16-bit operands): x and w rounded by the forward into
 * lp_x and lp_w, which the backward reads again, dy rounded into lp_dz. */
static vkt_status record_conv_lowp(const op_rec *r, const vkt_tensor *conv, const kc_conv *g,
                                   const mnode *nd, int relu, int backward)
{
    vkt_model *m = r->m;
    const mnode *cn = &m->node[conv->id];
    vkt_view y = model_view(m, nd->val), g0, g1, g2, bias = y;
    vkt_view x16 = model_view(m, cn->lp_x), w16 = model_view(m, cn->lp_w);
    vkt_status st = VKT_OK;
    if (!backward) {
        st = op_cast16(r, conv, op_in_val(m, conv, 0), op_in_shape(m, conv, 0), cn->lp_x);
        if (st == VKT_OK)
            st = op_cast16(r, conv, op_in_val(m, conv, 1), op_in_shape(m, conv, 1), cn->lp_w);
        if (conv->n_in == 3)
            bias = op_in_val(m, conv, 2);
        return st != VKT_OK ? st
                            : kc_conv2d_lowp(r->s, g, conv->dtype, x16, w16,
                                             conv->n_in == 3 ? &bias : NULL, relu, y,
                                             op_view_or(m, nd->aux, y),
                                             nd->aux >= 0 ? m->val[nd->aux].count : 0);
    }
    if (cn->lp_dz < 0) /* no gradient is wanted */
        return VKT_OK;
    st = op_cast16(r, conv, model_view(m, nd->grad), &m->shape[nd - m->node], cn->lp_dz);
    const vkt_view *db = conv->n_in == 3 ? op_dx_or_null(m, conv, 2, &g2) : NULL;
    const vkt_view *dx = op_dx_or_null(m, conv, 0, &g0), *dw = op_dx_or_null(m, conv, 1, &g1);
    if (st != VKT_OK || (!dx && !dw && !db))
        return st;
    uint32_t by = (uint32_t)(nd - m->node);
    return kc_conv2d_backward_lowp(r->s, g, conv->dtype, x16, w16, model_view(m, cn->lp_dz),
                                   relu ? &y : NULL, dx, op_beta(m, by, 0), dw,
                                   op_beta(m, by, 1), db, op_beta(m, by, 2),
                                   op_view_or(m, nd->tmp, y),
                                   nd->tmp >= 0 ? m->val[nd->tmp].count : 0);
}

/* A conv2d's forward or backward run by node `by`: the conv's own node, or the relu it is
 * fused into (relu applied in the output move; the backward starts from the relu's
 * gradient, masked by its output). The arrays and write/add flags are by's. */
static vkt_status record_conv(const op_rec *r, const vkt_tensor *conv, uint32_t by, int relu,
                              int backward)
{
    vkt_model *m = r->m;
    const mnode *nd = &m->node[by];
    kc_conv g;
    vkt_status st = conv_geom(m, conv, &g);
    if (st != VKT_OK)
        return st;
    vkt_view y = model_view(m, nd->val), g0, g1, g2, bias = y;
    if (conv->dtype != VKT_DTYPE_FP32)
        return record_conv_lowp(r, conv, &g, nd, relu, backward);
    if (!backward) {
        if (conv->n_in == 3)
            bias = op_in_val(m, conv, 2);
        return kc_conv2d_act(r->s, &g, op_in_val(m, conv, 0), op_in_val(m, conv, 1),
                             conv->n_in == 3 ? &bias : NULL, relu, y, op_view_or(m, nd->aux, y),
                             nd->aux >= 0 ? m->val[nd->aux].count : 0);
    }
    vkt_view dy = model_view(m, nd->grad);
    const vkt_view *db = conv->n_in == 3 ? op_dx_or_null(m, conv, 2, &g2) : NULL;
    return kc_conv2d_backward_act(r->s, &g, op_in_val(m, conv, 0), op_in_val(m, conv, 1), dy,
                                  relu ? &y : NULL, op_dx_or_null(m, conv, 0, &g0),
                                  op_beta(m, by, 0), op_dx_or_null(m, conv, 1, &g1),
                                  op_beta(m, by, 1), db, op_beta(m, by, 2),
                                  op_view_or(m, nd->tmp, dy),
                                  nd->tmp >= 0 ? m->val[nd->tmp].count : 0);
}

static vkt_status fwd_conv(const op_rec *r) { return record_conv(r, r->t, r->t->id, 0, 0); }
static vkt_status bwd_conv(const op_rec *r) { return record_conv(r, r->t, r->t->id, 0, 1); }

static vkt_status fwd_conv_relu(const op_rec *r) { return record_conv(r, r->t, r->t->id, 1, 0); }
static vkt_status bwd_conv_relu(const op_rec *r) { return record_conv(r, r->t, r->t->id, 1, 1); }

/* What the backward of conv t reads: its inputs, or (autocast) the forward's 16-bit x
 * and w and the 16-bit dy it rounds first (the fp32 x and w are not read again). */
static void conv_reads(const vkt_model *m, const vkt_tensor *t, acc_list *l)
{
    const mnode *cn = &m->node[t->id];
    if (t->dtype == VKT_DTYPE_FP32) {
        op_reads_inputs(m, t, l);
        return;
    }
    plan_add(l, cn->lp_dz, 1, 0);
    plan_add(l, cn->lp_x, 0, 0);
    plan_add(l, cn->lp_w, 0, 0);
}

/* conv2d + relu: one phase (chunks of samples interleave reading x and writing dx), the
 * relu's output read for the mask, the conv's inputs and gradients. */
static void conv_relu_access(const vkt_model *m, uint32_t i, acc_list *l)
{
    const mnode *nd = &m->node[i];
    const vkt_tensor *conv = m->t[i];
    plan_add(l, nd->grad, 0, 0);
    plan_add(l, nd->val, 0, 0);
    plan_add(l, nd->tmp, 1, 0);
    conv_reads(m, conv, l);
    for (uint32_t k = 0; k < conv->n_in; k++)
        plan_add(l, plan_in_grad(m, conv, k), 1, 0);
}

static void ref_conv(const graph_ref_args *a)
{
    const vkt_tensor *t = a->node;
    char msg[VKT_ERRMSG_SIZE];
    kc_conv g;
    if (layer_conv_geom(t, a->in_shape[0], a->in_shape[1], &g, msg, sizeof msg) == VKT_OK)
        kc_ref_conv2d(&g, a->in[0], a->in[1], t->n_in == 3 ? a->in[2] : NULL, a->out);
}

static void ref_conv_bwd(const graph_ref_args *a)
{
    const vkt_tensor *t = a->node;
    char msg[VKT_ERRMSG_SIZE];
    kc_conv g;
    if (layer_conv_geom(t, a->in_shape[0], a->in_shape[1], &g, msg, sizeof msg) == VKT_OK)
        kc_ref_conv2d_backward(&g, a->in[0], a->in[1], a->dout, a->din[0], a->din[1],
                               t->n_in == 3 ? a->din[2] : NULL);
}

/* A relu after a conv2d goes into the conv's output move. */
static graph_op conv_fuse(const vkt_tensor *t, const vkt_tensor *use, graph_params *p)
{
    if (use->op != GOP_UNARY || use->p.unary.op != VKT_UNARY_RELU)
        return GOP_COUNT;
    *p = t->p; /* the convolution's geometry; the relu is implied */
    return GOP_CONV_RELU;
}

static const char *const names_conv[] = {"x", "w", "b"};

const graph_op_def graph_op_conv2d = {
    .name = "conv2d", .fn = "vkt_conv2d", .min_in = 2, .max_in = 3, .in_names = names_conv,
    .flags = OPF_AUTOCAST | OPF_AUTOCAST_DB,
    .shape = shape_conv, .arrays = conv_arrays, .forward = fwd_conv, .backward = bwd_conv,
    .backward_reads = conv_reads, .fuse_with = conv_fuse,
    .ref_forward = ref_conv, .ref_backward = ref_conv_bwd, .grad_rtol = 1e-5,
};

/* ---- conv_relu: a conv2d and the relu that is its only use, fused by the rewrite ---- */

static void ref_conv_relu(const graph_ref_args *a)
{
    ref_conv(a);
    uint64_t n = graph_count(&a->out_shape);
    for (uint64_t i = 0; i < n; i++)
        a->out[i] = a->out[i] > 0 ? a->out[i] : 0.0;
}

/* The relu's mask from the conv's output, recomputed; then the conv's backward. */
static void ref_conv_relu_bwd(const graph_ref_args *a)
{
    uint64_t n = graph_count(&a->out_shape);
    double *z = malloc((n ? n : 1) * sizeof *z), *dz = malloc((n ? n : 1) * sizeof *dz);
    if (z && dz) {
        graph_ref_args b = *a;
        b.out = z;
        ref_conv(&b);
        for (uint64_t i = 0; i < n; i++)
            dz[i] = z[i] > 0 ? a->dout[i] : 0.0;
        b.dout = dz;
        ref_conv_bwd(&b);
    }
    free(z);
    free(dz);
}

static const char *conv_relu_name(const vkt_tensor *t)
{
    (void)t;
    return "conv2d+relu";
}

const graph_op_def graph_op_conv_relu = {
    .name = "conv_relu", .fn = "vkt_conv2d", .name_of = conv_relu_name,
    .flags = OPF_FUSED | OPF_AUTOCAST | OPF_AUTOCAST_DB, .min_in = 2, .max_in = 3,
    .in_names = names_conv, .shape = shape_conv, .arrays = conv_arrays,
    .forward = fwd_conv_relu, .backward = bwd_conv_relu, .backward_access = conv_relu_access,
    .ref_forward = ref_conv_relu, .ref_backward = ref_conv_relu_bwd, .grad_rtol = 1e-5,
};

/* ---- pooling: max saves the winning positions (aux) for its backward ---- */

static const char *pool_name(const vkt_tensor *t)
{
    return t->p.pool.max ? "max_pool2d" : "avg_pool2d";
}

static const char *pool_fn(const vkt_tensor *t)
{
    return t->p.pool.max ? "vkt_max_pool2d" : "vkt_avg_pool2d";
}

static vkt_status shape_pool(const vkt_tensor *t, const vkt_shape *const *in, vkt_shape *out,
                             char *msg, size_t size)
{
    kc_pool p;
    char text[VKT_ERRMSG_SIZE];
    vkt_status st = layer_pool_geom(t, in[0], &p, text, sizeof text);
    if (st != VKT_OK)
        return op_bad(t, msg, size, st, "%s", text);
    *out = (vkt_shape){4, {p.n, p.c, p.oh, p.ow}};
    return VKT_OK;
}

static vkt_status pool_geom(vkt_model *m, const vkt_tensor *t, kc_pool *p)
{
    char msg[VKT_ERRMSG_SIZE];
    vkt_status st = layer_pool_geom(t, op_in_shape(m, t, 0), p, msg, sizeof msg);
    return st == VKT_OK ? VKT_OK : model_fail(m, st, "%s: %s", graph_op_fn(t), msg);
}

static vkt_status pool_arrays(vkt_model *m, const vkt_tensor *t, uint64_t *aux, uint64_t *tmp)
{
    kc_pool p;
    vkt_status st = pool_geom(m, t, &p);
    *aux = st == VKT_OK ? kc_pool_saved_elems(&p) : 0;
    *tmp = 0;
    return st;
}

static vkt_status fwd_pool(const op_rec *r)
{
    const mnode *nd = op_node(r);
    kc_pool p;
    vkt_status st = pool_geom(r->m, r->t, &p);
    if (st != VKT_OK)
        return st;
    vkt_view y = op_out_val(r), aux = op_view_or(r->m, nd->aux, y);
    return kc_pool2d(r->s, &p, op_in_val(r->m, r->t, 0), y, nd->aux >= 0 ? &aux : NULL);
}

static vkt_status bwd_pool(const op_rec *r)
{
    const mnode *nd = op_node(r);
    kc_pool p;
    vkt_status st = pool_geom(r->m, r->t, &p);
    if (st != VKT_OK || !op_want(r->m, r->t, 0))
        return st;
    vkt_view dy = op_dy(r), aux = op_view_or(r->m, nd->aux, dy);
    return kc_pool2d_backward(r->s, &p, nd->aux >= 0 ? &aux : NULL, dy, op_dx(r->m, r->t, 0),
                              op_beta(r->m, r->t->id, 0));
}

static void ref_pool(const graph_ref_args *a)
{
    char msg[VKT_ERRMSG_SIZE];
    kc_pool p;
    if (layer_pool_geom(a->node, a->in_shape[0], &p, msg, sizeof msg) == VKT_OK)
        kc_ref_pool2d(&p, a->in[0], a->out);
}

static void ref_pool_bwd(const graph_ref_args *a)
{
    char msg[VKT_ERRMSG_SIZE];
    kc_pool p;
    if (a->din[0] && layer_pool_geom(a->node, a->in_shape[0], &p, msg, sizeof msg) == VKT_OK)
        kc_ref_pool2d_backward(&p, a->in[0], a->dout, a->din[0]);
}

static const char *const names_x[] = {"x"};

const graph_op_def graph_op_pool2d = {
    .name = "pool2d", .fn = "vkt_max_pool2d", .name_of = pool_name, .fn_of = pool_fn,
    .flags = OPF_AUX_SAVED, .min_in = 1, .max_in = 1, .in_names = names_x,
    .shape = shape_pool, .arrays = pool_arrays, .forward = fwd_pool, .backward = bwd_pool,
    .backward_reads = op_reads_inputs, .ref_forward = ref_pool, .ref_backward = ref_pool_bwd,
    .grad_rtol = 1e-5,
};
