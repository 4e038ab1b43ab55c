/* layers.c - the layer ops' constructors (convolution, pooling, layer and batch
 * normalization, embedding, causal self-attention) and their geometry from shapes. Their
 * op table entries are op_conv.c, op_norm.c and op_sequence.c; their kernels are in
 * engine/kernels (conv.h, norm.h, attention.h). Geometry goes through the kernels' own
 * init functions, so the graph and the kernels agree on every size. */
#include "graph/layers.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* ---- geometry shared with the model and the references ---- */

vkt_status layer_conv_geom(const vkt_tensor *t, const vkt_shape *xs, const vkt_shape *ws,
                           kc_conv *g, char *msg, size_t msg_size)
{
    char sx[GRAPH_SHAPE_STR], sw[GRAPH_SHAPE_STR];
    if (xs->ndim != 4 || ws->ndim != 4) {
        snprintf(msg, msg_size, "x[N,C,H,W] and w[OC,C/groups,KH,KW] expected: x %s and w %s",
                 graph_shape_str(xs, sx), graph_shape_str(ws, sw));
        return VKT_ERROR_SHAPE;
    }
    memset(g, 0, sizeof *g);
    g->n = xs->dims[0];
    g->c = xs->dims[1];
    g->h = xs->dims[2];
    g->w = xs->dims[3];
    g->oc = ws->dims[0];
    g->kh = ws->dims[2];
    g->kw = ws->dims[3];
    g->stride_h = t->p.conv.stride_h;
    g->stride_w = t->p.conv.stride_w;
    g->pad_h = t->p.conv.pad_h;
    g->pad_w = t->p.conv.pad_w;
    g->dil_h = t->p.conv.dil_h;
    g->dil_w = t->p.conv.dil_w;
    g->groups = t->p.conv.groups;
    if (g->groups && g->c % g->groups == 0 && ws->dims[1] != g->c / g->groups) {
        snprintf(msg, msg_size, "w %s has %u input channels per group; x %s with %u groups "
                 "needs %u", graph_shape_str(ws, sw), ws->dims[1], graph_shape_str(xs, sx),
                 g->groups, g->c / g->groups);
        return VKT_ERROR_SHAPE;
    }
    return kc_conv_init(g, msg, msg_size);
}

vkt_status layer_pool_geom(const vkt_tensor *t, const vkt_shape *xs, kc_pool *p, char *msg,
                           size_t msg_size)
{
    char sx[GRAPH_SHAPE_STR];
    if (xs->ndim != 4) {
        snprintf(msg, msg_size, "x[N,C,H,W] expected: x %s", graph_shape_str(xs, sx));
        return VKT_ERROR_SHAPE;
    }
    memset(p, 0, sizeof *p);
    p->n = xs->dims[0];
    p->c = xs->dims[1];
    p->h = xs->dims[2];
    p->w = xs->dims[3];
    p->kh = p->kw = t->p.pool.kernel;
    p->stride_h = p->stride_w = t->p.pool.stride;
    p->pad_h = p->pad_w = t->p.pool.pad;
    p->max = t->p.pool.max;
    return kc_pool_init(p, msg, msg_size);
}

void layer_bn_dims(const vkt_shape *xs, uint32_t *n, uint32_t *c, uint32_t *hw)
{
    *n = xs->dims[0];
    *c = xs->ndim > 1 ? xs->dims[1] : 1;
    *hw = 1;
    for (uint32_t k = 2; k < xs->ndim; k++)
        *hw *= xs->dims[k];
}

void layer_attn_dims(const vkt_tensor *t, const vkt_shape *qs, uint32_t *b, uint32_t *tt,
                     uint32_t *heads, uint32_t *d)
{
    *b = qs->dims[0];
    *tt = qs->dims[1];
    *heads = t->p.attention.heads;
    *d = qs->dims[2] / 3 / t->p.attention.heads;
}

/* ---- constructors ---- */

static vkt_tensor tmpl_of(graph_op op)
{
    vkt_tensor t;
    memset(&t, 0, sizeof t);
    t.op = op;
    return t;
}

vkt_tensor *vkt_conv2d(vkt_graph *g, vkt_tensor *x, vkt_tensor *w, vkt_tensor *b,
                       const vkt_conv2d_options *o)
{
    vkt_conv2d_options d = {0};
    if (!o)
        o = &d;
    vkt_tensor t = tmpl_of(GOP_CONV2D);
    t.p.conv.stride_h = o->stride_h ? o->stride_h : 1;
    t.p.conv.stride_w = o->stride_w ? o->stride_w : 1;
    t.p.conv.pad_h = o->pad_h;
    t.p.conv.pad_w = o->pad_w;
    t.p.conv.dil_h = o->dilation_h ? o->dilation_h : 1;
    t.p.conv.dil_w = o->dilation_w ? o->dilation_w : 1;
    t.p.conv.groups = o->groups ? o->groups : 1;
    vkt_tensor *in[3] = {x, w, b};
    return graph_add(g, "vkt_conv2d", &t, in, b ? 3 : 2);
}

static vkt_tensor *pool(vkt_graph *g, const char *fn, int max, vkt_tensor *x, uint32_t kernel,
                        uint32_t stride, uint32_t padding)
{
    vkt_tensor t = tmpl_of(GOP_POOL2D);
    t.p.pool.max = max;
    t.p.pool.kernel = kernel;
    t.p.pool.stride = stride;
    t.p.pool.pad = padding;
    return graph_add(g, fn, &t, &x, 1);
}

vkt_tensor *vkt_max_pool2d(vkt_graph *g, vkt_tensor *x, uint32_t kernel, uint32_t stride,
                           uint32_t padding)
{
    return pool(g, "vkt_max_pool2d", 1, x, kernel, stride, padding);
}

vkt_tensor *vkt_avg_pool2d(vkt_graph *g, vkt_tensor *x, uint32_t kernel, uint32_t stride,
                           uint32_t padding)
{
    return pool(g, "vkt_avg_pool2d", 0, x, kernel, stride, padding);
}

vkt_tensor *vkt_global_avg_pool(vkt_graph *g, vkt_tensor *x)
{
    if (!graph_check_inputs(g, "vkt_global_avg_pool", &x, 1))
        return NULL;
    if (x->shape.ndim != 4) {
        char sx[GRAPH_SHAPE_STR];
        return graph_fail(g, VKT_ERROR_SHAPE, "vkt_global_avg_pool: x[N,C,H,W] expected: x %s",
                          graph_shape_str(&x->shape, sx));
    }
    /* [N,C,H,W] -> [N,C,H*W] -> mean over the last axis; the batch stays inferred. */
    vkt_shape s = {3, {0, x->shape.dims[1], x->shape.dims[2] * x->shape.dims[3]}};
    return vkt_mean(g, vkt_reshape(g, x, &s), 2);
}

vkt_tensor *vkt_layer_norm(vkt_graph *g, vkt_tensor *x, vkt_tensor *gamma, vkt_tensor *beta,
                           float eps)
{
    if (!(eps >= 0.0f))
        return graph_fail(g, VKT_ERROR_INVALID_ARGUMENT, "vkt_layer_norm: eps is %g", eps);
    vkt_tensor t = tmpl_of(GOP_LAYERNORM);
    t.p.norm.eps = eps > 0.0f ? eps : 1e-5f;
    vkt_tensor *in[3] = {x, gamma, beta};
    return graph_add(g, "vkt_layer_norm", &t, in, 3);
}

vkt_tensor *vkt_rms_norm(vkt_graph *g, vkt_tensor *x, vkt_tensor *gamma, float eps)
{
    if (!(eps >= 0.0f))
        return graph_fail(g, VKT_ERROR_INVALID_ARGUMENT, "vkt_rms_norm: eps is %g", eps);
    vkt_tensor t = tmpl_of(GOP_RMSNORM);
    t.p.norm.eps = eps > 0.0f ? eps : 1e-5f;
    vkt_tensor *in[2] = {x, gamma};
    return graph_add(g, "vkt_rms_norm", &t, in, 2);
}

vkt_tensor *vkt_batch_norm(vkt_graph *g, vkt_tensor *x, vkt_tensor *gamma, vkt_tensor *beta,
                           vkt_tensor *running_mean, vkt_tensor *running_var, float eps,
                           float momentum)
{
    vkt_tensor *in[5] = {x, gamma, beta, running_mean, running_var};
    if (!graph_check_inputs(g, "vkt_batch_norm", in, 5))
        return NULL;
    if (!(eps >= 0.0f) || !(momentum >= 0.0f && momentum <= 1.0f))
        return graph_fail(g, VKT_ERROR_INVALID_ARGUMENT,
                          "vkt_batch_norm: eps %g, momentum %g: eps >= 0 and 0 <= momentum <= 1 "
                          "expected", eps, momentum);
    for (int k = 3; k < 5; k++)
        if (in[k]->op != GOP_PARAM || !in[k]->state)
            return graph_fail(g, VKT_ERROR_INVALID_ARGUMENT,
                              "vkt_batch_norm: %s ('%s') must be a vkt_state",
                              k == 3 ? "running_mean" : "running_var", in[k]->name);
    vkt_tensor t = tmpl_of(GOP_BATCHNORM);
    t.p.batchnorm.eps = eps > 0.0f ? eps : 1e-5f;
    t.p.batchnorm.momentum = momentum > 0.0f ? momentum : 0.1f;
    return graph_add(g, "vkt_batch_norm", &t, in, 5);
}

vkt_tensor *vkt_embedding(vkt_graph *g, vkt_tensor *ids, vkt_tensor *table)
{
    vkt_tensor t = tmpl_of(GOP_EMBEDDING);
    vkt_tensor *in[2] = {ids, table};
    if (!graph_check_inputs(g, "vkt_embedding", in, 2))
        return NULL;
    if (ids->op != GOP_INPUT)
        return graph_fail(g, VKT_ERROR_INVALID_ARGUMENT,
                          "vkt_embedding: ids ('%s') must be a vkt_input of token ids",
                          ids->name);
    return graph_add(g, "vkt_embedding", &t, in, 2);
}

vkt_tensor *vkt_causal_attention(vkt_graph *g, vkt_tensor *qkv, uint32_t heads, float dropout)
{
    if (!graph_check_inputs(g, "vkt_causal_attention", &qkv, 1))
        return NULL;
    if (heads == 0 || !(dropout >= 0.0f && dropout < 1.0f))
        return graph_fail(g, VKT_ERROR_INVALID_ARGUMENT,
                          "vkt_causal_attention: heads %u, dropout %g: heads >= 1 and "
                          "0 <= dropout < 1 expected", heads, dropout);
    vkt_tensor t = tmpl_of(GOP_ATTENTION);
    t.p.attention.heads = heads;
    t.p.attention.dropout = dropout;
    t.p.attention.seed = g->seed ^ (0x9E3779B97F4A7C15ull * (uint64_t)(g->count + 1));
    return graph_add(g, "vkt_causal_attention", &t, &qkv, 1);
}
