/* layers_model.c - the layer ops in a model: their aux and workspace arrays in the
 * activation arena (sized by the kernels, for the model's batch) and the recording of
 * their forward and backward. Every gradient output follows the model's write/add flags
 * (beta 0 for the first contribution, 1 after), which the kernels take directly. */
#include "graph/layers.h"
#include "graph/model.h"

#include <string.h>

typedef struct lrec {
    vkt_model *m;
    vkt_stream *s;
    const vkt_tensor *t;
    const mnode *nd;
} lrec;

static const vkt_shape *shape_in(const vkt_model *m, const vkt_tensor *t, uint32_t k)
{
    return &m->shape[t->in[k]->id];
}

static vkt_view val_in(const lrec *r, uint32_t k)
{
    return model_view(r->m, r->m->node[r->t->in[k]->id].val);
}

static int want(const lrec *r, uint32_t k)
{
    const mnode *in = &r->m->node[r->t->in[k]->id];
    return in->needs_grad && in->grad >= 0;
}

/* Input k's gradient view into *v; returns v, or NULL when not wanted. */
static const vkt_view *grad_in(const lrec *r, uint32_t k, vkt_view *v)
{
    if (!want(r, k))
        return NULL;
    *v = model_view(r->m, r->m->node[r->t->in[k]->id].grad);
    return v;
}

static float beta(const lrec *r, uint32_t k) { return r->nd->acc[k] ? 1.0f : 0.0f; }

/* A view of value v, or of `fallback` when v does not exist (a workspace of size 0). */
static vkt_view view_or(const vkt_model *m, int32_t v, vkt_view fallback)
{
    return v >= 0 ? model_view(m, v) : fallback;
}

static uint64_t max_binding_elems(const vkt_model *m)
{
    vkt_device_info info;
    if (vkt_context_device_info(m->ctx, &info) != VKT_OK)
        return UINT32_MAX;
    return info.max_storage_buffer_range / 4;
}

int layer_aux_saved(const vkt_tensor *t) { return t->op != GOP_CONV2D; }

static vkt_status conv_geom(vkt_model *m, const vkt_tensor *t, kc_conv *g)
{
    char msg[VKT_ERRMSG_SIZE];
    vkt_status st = layer_conv_geom(t, shape_in(m, t, 0), shape_in(m, t, 1), g, msg, sizeof msg);
    return st == VKT_OK ? VKT_OK : model_fail(m, st, "vkt_conv2d: %s", msg);
}

static vkt_status pool_geom(vkt_model *m, const vkt_tensor *t, kc_pool *p)
{
    char msg[VKT_ERRMSG_SIZE];
    vkt_status st = layer_pool_geom(t, shape_in(m, t, 0), p, msg, sizeof msg);
    return st == VKT_OK ? VKT_OK : model_fail(m, st, "%s: %s", graph_op_fn(t), msg);
}

/* conv2d's workspace (the same size forward and backward), or a limit error. */
static vkt_status conv_workspace(vkt_model *m, const vkt_tensor *t, uint64_t *out)
{
    kc_conv g;
    vkt_status st = conv_geom(m, t, &g);
    if (st != VKT_OK)
        return st;
    uint64_t max = max_binding_elems(m);
    *out = kc_conv_workspace_elems(&g, max);
    if (*out == 0)
        return model_fail(m, VKT_ERROR_LIMIT,
                          "vkt_conv2d: one sample's im2col columns (%u x %u x %u elements) "
                          "exceed the device's maxStorageBufferRange (%llu elements)",
                          g.oh * g.ow, g.c / g.groups, g.kh * g.kw, (unsigned long long)max);
    return VKT_OK;
}

static vkt_status new_value(vkt_model *m, uint64_t count, int32_t *out)
{
    *out = -1;
    if (count == 0)
        return VKT_OK;
    *out = model_new_value(m, MS_ARENA, count);
    return *out >= 0 ? VKT_OK : model_fail(m, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
}

/* Elements of node t's aux array and backward workspace at the model's shapes. */
static vkt_status array_sizes(vkt_model *m, const vkt_tensor *t, uint64_t *aux, uint64_t *tmp)
{
    uint32_t rows, cols, b, tt, h, d, c, hw;
    vkt_status st = VKT_OK;
    *aux = *tmp = 0;
    switch (t->op) {
    case GOP_CONV2D: /* the same workspace forward (im2col) and backward */
        if ((st = conv_workspace(m, t, aux)) == VKT_OK)
            *tmp = *aux;
        break;
    case GOP_POOL2D: {
        kc_pool p;
        if ((st = pool_geom(m, t, &p)) == VKT_OK)
            *aux = kc_pool_saved_elems(&p);
        break;
    }
    case GOP_LAYERNORM:
        model_rows_cols(shape_in(m, t, 0), &rows, &cols);
        *aux = 2ull * rows;
        *tmp = kn_layernorm_workspace_elems(rows, cols);
        break;
    case GOP_BATCHNORM:
        layer_bn_dims(shape_in(m, t, 0), &b, &c, &hw);
        *aux = 2ull * c;
        *tmp = kn_batchnorm_workspace_elems(b, c, hw);
        break;
    case GOP_ATTENTION:
        layer_attn_dims(t, shape_in(m, t, 0), &b, &tt, &h, &d);
        *aux = (uint64_t)b * h * tt * tt;
        *tmp = ka_attention_workspace_elems(b, tt, h, d);
        break;
    default: break;
    }
    return st;
}

vkt_status layer_make_aux_of(vkt_model *m, uint32_t op, uint32_t into)
{
    uint64_t aux, tmp;
    vkt_status st = array_sizes(m, m->g->nodes[op], &aux, &tmp);
    return st == VKT_OK ? new_value(m, aux, &m->node[into].aux) : st;
}

vkt_status layer_make_tmp_of(vkt_model *m, uint32_t op, uint32_t into)
{
    uint64_t aux, tmp;
    vkt_status st = array_sizes(m, m->g->nodes[op], &aux, &tmp);
    return st == VKT_OK ? new_value(m, tmp, &m->node[into].tmp) : st;
}

static vkt_status record_conv(vkt_model *m, vkt_stream *s, const vkt_tensor *conv,
                              const mnode *nd, int relu, int backward);

static vkt_view ctrl_step(const vkt_model *m) { return (vkt_view){m->ctrl, CTRL_STEP}; }

vkt_status layer_record_forward(vkt_model *m, vkt_stream *s, uint32_t node, int training)
{
    const vkt_tensor *t = m->g->nodes[node];
    lrec r = {m, s, t, &m->node[node]};
    vkt_view y = model_view(m, r.nd->val), aux = view_or(m, r.nd->aux, y);
    uint32_t rows, cols, b, tt, h, d, c, hw;
    vkt_status st;
    switch (t->op) {
    case GOP_CONV2D: return record_conv(m, s, t, r.nd, 0, 0);
    case GOP_POOL2D: {
        kc_pool p;
        if ((st = pool_geom(m, t, &p)) != VKT_OK)
            return st;
        return kc_pool2d(s, &p, val_in(&r, 0), y, r.nd->aux >= 0 ? &aux : NULL);
    }
    case GOP_LAYERNORM:
        model_rows_cols(shape_in(m, t, 0), &rows, &cols);
        return kn_layernorm(s, val_in(&r, 0), val_in(&r, 1), val_in(&r, 2), y, aux, rows, cols,
                            t->f0);
    case GOP_BATCHNORM:
        layer_bn_dims(shape_in(m, t, 0), &b, &c, &hw);
        return kn_batchnorm(s, val_in(&r, 0), val_in(&r, 1), val_in(&r, 2), y, aux,
                            val_in(&r, 3), val_in(&r, 4), b, c, hw, t->f0, t->f1, training);
    case GOP_EMBEDDING: {
        const vkt_shape *tab = shape_in(m, t, 1);
        return kn_embedding(s, val_in(&r, 0), val_in(&r, 1), y,
                            (uint32_t)m->count[t->in[0]->id], tab->dims[0], tab->dims[1]);
    }
    case GOP_ATTENTION:
        layer_attn_dims(t, shape_in(m, t, 0), &b, &tt, &h, &d);
        return ka_attention(s, val_in(&r, 0), y, aux, ctrl_step(m), b, tt, h, d,
                            training ? t->f0 : 0.0f, t->seed, model_row_shift(m, t->id, b));
    default:
        return model_fail(m, VKT_ERROR_INTERNAL, "internal error: op %s has no forward",
                          graph_op_name(t));
    }
}

vkt_status layer_record_backward(vkt_model *m, vkt_stream *s, uint32_t node)
{
    const vkt_tensor *t = m->g->nodes[node];
    lrec r = {m, s, t, &m->node[node]};
    vkt_view dy = model_view(m, r.nd->grad), aux = view_or(m, r.nd->aux, dy);
    vkt_view ws = view_or(m, r.nd->tmp, dy), g0, g1, g2;
    uint32_t rows, cols, b, tt, h, d, c, hw;
    vkt_status st;
    switch (t->op) {
    case GOP_CONV2D: return record_conv(m, s, t, r.nd, 0, 1);
    case GOP_POOL2D: {
        kc_pool p;
        if ((st = pool_geom(m, t, &p)) != VKT_OK)
            return st;
        if (!want(&r, 0))
            return VKT_OK;
        return kc_pool2d_backward(s, &p, r.nd->aux >= 0 ? &aux : NULL, dy, *grad_in(&r, 0, &g0),
                                  beta(&r, 0));
    }
    case GOP_LAYERNORM:
        model_rows_cols(shape_in(m, t, 0), &rows, &cols);
        return kn_layernorm_backward(s, val_in(&r, 0), val_in(&r, 1), aux, dy,
                                     grad_in(&r, 0, &g0), beta(&r, 0), grad_in(&r, 1, &g1),
                                     beta(&r, 1), grad_in(&r, 2, &g2), beta(&r, 2), ws, rows,
                                     cols);
    case GOP_BATCHNORM:
        layer_bn_dims(shape_in(m, t, 0), &b, &c, &hw);
        return kn_batchnorm_backward(s, val_in(&r, 0), val_in(&r, 1), aux, dy,
                                     grad_in(&r, 0, &g0), beta(&r, 0), grad_in(&r, 1, &g1),
                                     beta(&r, 1), grad_in(&r, 2, &g2), beta(&r, 2), ws, b, c,
                                     hw);
    case GOP_EMBEDDING: {
        const vkt_shape *tab = shape_in(m, t, 1);
        if (!want(&r, 1))
            return VKT_OK;
        return kn_embedding_backward(s, val_in(&r, 0), dy, *grad_in(&r, 1, &g1), beta(&r, 1),
                                     (uint32_t)m->count[t->in[0]->id], tab->dims[0],
                                     tab->dims[1]);
    }
    case GOP_ATTENTION:
        layer_attn_dims(t, shape_in(m, t, 0), &b, &tt, &h, &d);
        if (!want(&r, 0))
            return VKT_OK;
        return ka_attention_backward(s, val_in(&r, 0), aux, ctrl_step(m), dy,
                                     *grad_in(&r, 0, &g0), beta(&r, 0), ws, b, tt, h, d, t->f0,
                                     t->seed, model_row_shift(m, t->id, b));
    default:
        return model_fail(m, VKT_ERROR_INTERNAL, "internal error: op %s has no backward",
                          graph_op_name(t));
    }
}

/* A conv2d's forward or backward run by node `nd`: the conv's own node, or the relu it is
 * fused into (relu: applied in the conv's output move; the backward starts from the relu's
 * gradient, masked by its output). The arrays (aux, tmp) and gradient write/add flags are
 * nd's. */
static vkt_status record_conv(vkt_model *m, vkt_stream *s, const vkt_tensor *conv,
                              const mnode *nd, int relu, int backward)
{
    lrec r = {m, s, conv, nd};
    kc_conv g;
    vkt_status st = conv_geom(m, conv, &g);
    if (st != VKT_OK)
        return st;
    vkt_view y = model_view(m, nd->val), g0, g1, g2, bias = y;
    if (!backward) {
        if (conv->n_in == 3)
            bias = val_in(&r, 2);
        return kc_conv2d_act(s, &g, val_in(&r, 0), val_in(&r, 1), conv->n_in == 3 ? &bias : NULL,
                             relu, y, view_or(m, nd->aux, y),
                             nd->aux >= 0 ? m->val[nd->aux].count : 0);
    }
    vkt_view dy = model_view(m, nd->grad);
    const vkt_view *db = conv->n_in == 3 ? grad_in(&r, 2, &g2) : NULL;
    return kc_conv2d_backward_act(s, &g, val_in(&r, 0), val_in(&r, 1), dy, relu ? &y : NULL,
                                  grad_in(&r, 0, &g0), beta(&r, 0), grad_in(&r, 1, &g1),
                                  beta(&r, 1), db, beta(&r, 2), view_or(m, nd->tmp, dy),
                                  nd->tmp >= 0 ? m->val[nd->tmp].count : 0);
}

vkt_status layer_record_conv_relu(vkt_model *m, vkt_stream *s, uint32_t node, int backward)
{
    const mnode *nd = &m->node[node];
    return record_conv(m, s, m->g->nodes[nd->fused_from], nd, 1, backward);
}
