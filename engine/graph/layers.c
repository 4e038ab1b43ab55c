/* layers.c - the layer ops' constructors, shape rules and names: convolution, pooling,
 * layer and batch normalization, embedding and causal self-attention. Their kernels are
 * in engine/kernels (conv.h, norm.h, attention.h); compiling them into a model is
 * layers_model.c, their double references layers_ref.c. Geometry goes through the
 * kernels' own init functions, so the graph and the kernels agree on every size. */
#include "graph/layers.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int graph_is_layer_op(graph_op op) { return op >= GOP_CONV2D && op < GOP_COUNT; }

const char *graph_layer_op_name(const vkt_tensor *n)
{
    switch (n->op) {
    case GOP_CONV2D: return "conv2d";
    case GOP_POOL2D: return n->iop ? "max_pool2d" : "avg_pool2d";
    case GOP_LAYERNORM: return "layer_norm";
    case GOP_BATCHNORM: return "batch_norm";
    case GOP_EMBEDDING: return "embedding";
    case GOP_ATTENTION: return "causal_attention";
    default: return "unknown";
    }
}

const char *graph_layer_op_fn(const vkt_tensor *n)
{
    switch (n->op) {
    case GOP_CONV2D: return "vkt_conv2d";
    case GOP_POOL2D: return n->iop ? "vkt_max_pool2d" : "vkt_avg_pool2d";
    case GOP_LAYERNORM: return "vkt_layer_norm";
    case GOP_BATCHNORM: return "vkt_batch_norm";
    case GOP_EMBEDDING: return "vkt_embedding";
    case GOP_ATTENTION: return "vkt_causal_attention";
    default: return "unknown";
    }
}

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
    g->stride_h = t->ip[0];
    g->stride_w = t->ip[1];
    g->pad_h = t->ip[2];
    g->pad_w = t->ip[3];
    g->dil_h = t->ip[4];
    g->dil_w = t->ip[5];
    g->groups = t->ip[6];
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
    p->kh = p->kw = t->ip[0];
    p->stride_h = p->stride_w = t->ip[1];
    p->pad_h = p->pad_w = t->ip[2];
    p->max = (int)t->iop;
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
    *heads = t->iop;
    *d = qs->dims[2] / 3 / t->iop;
}

/* ---- shape rules ---- */

static vkt_status fail(char *msg, size_t size, vkt_status st, const vkt_tensor *n,
                       const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static vkt_status fail(char *msg, size_t size, vkt_status st, const vkt_tensor *n,
                       const char *fmt, ...)
{
    int len = snprintf(msg, size, "%s: ", graph_layer_op_fn(n));
    if (len < 0 || (size_t)len >= size)
        return st;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg + len, size - (size_t)len, fmt, ap);
    va_end(ap);
    return st;
}

/* A per-channel vector [c] (gamma, beta, running statistics, conv bias). */
static vkt_status vec_ok(const vkt_tensor *n, const vkt_shape *v, uint32_t c, const char *what,
                         char *msg, size_t size)
{
    char sv[GRAPH_SHAPE_STR];
    if (v->ndim != 1 || v->dims[0] != c)
        return fail(msg, size, VKT_ERROR_SHAPE, n, "%s %s does not match: [%u] expected", what,
                    graph_shape_str(v, sv), c);
    return VKT_OK;
}

static vkt_status rule_conv(const vkt_tensor *n, const vkt_shape *const *in, vkt_shape *out,
                            char *msg, size_t size)
{
    kc_conv g;
    char text[VKT_ERRMSG_SIZE];
    vkt_status st = layer_conv_geom(n, in[0], in[1], &g, text, sizeof text);
    if (st != VKT_OK)
        return fail(msg, size, st, n, "%s", text);
    if (n->n_in == 3 && (st = vec_ok(n, in[2], g.oc, "bias b", msg, size)) != VKT_OK)
        return st;
    *out = (vkt_shape){4, {g.n, g.oc, g.oh, g.ow}};
    return VKT_OK;
}

static vkt_status rule_pool(const vkt_tensor *n, const vkt_shape *const *in, vkt_shape *out,
                            char *msg, size_t size)
{
    kc_pool p;
    char text[VKT_ERRMSG_SIZE];
    vkt_status st = layer_pool_geom(n, in[0], &p, text, sizeof text);
    if (st != VKT_OK)
        return fail(msg, size, st, n, "%s", text);
    *out = (vkt_shape){4, {p.n, p.c, p.oh, p.ow}};
    return VKT_OK;
}

static vkt_status rule_norm(const vkt_tensor *n, const vkt_shape *const *in, vkt_shape *out,
                            char *msg, size_t size)
{
    const vkt_shape *x = in[0];
    char sx[GRAPH_SHAPE_STR];
    uint32_t c;
    if (n->op == GOP_LAYERNORM) {
        if (x->ndim < 1 || x->dims[x->ndim - 1] < 2)
            return fail(msg, size, VKT_ERROR_SHAPE, n,
                        "x %s: the last axis needs at least 2 elements", graph_shape_str(x, sx));
        c = x->dims[x->ndim - 1];
    } else {
        if (x->ndim < 2)
            return fail(msg, size, VKT_ERROR_SHAPE, n, "x[N,C] or x[N,C,H,W] expected: x %s",
                        graph_shape_str(x, sx));
        c = x->dims[1];
    }
    static const char *const names[] = {"gamma", "beta", "running_mean", "running_var"};
    for (uint32_t k = 1; k < n->n_in; k++) {
        vkt_status st = vec_ok(n, in[k], c, names[k - 1], msg, size);
        if (st != VKT_OK)
            return st;
    }
    *out = *x;
    return VKT_OK;
}

static vkt_status rule_embedding(const vkt_tensor *n, const vkt_shape *const *in,
                                 vkt_shape *out, char *msg, size_t size)
{
    const vkt_shape *ids = in[0], *tab = in[1];
    char si[GRAPH_SHAPE_STR], st[GRAPH_SHAPE_STR];
    if (tab->ndim != 2 || ids->ndim + 1 > VKT_MAX_DIMS)
        return fail(msg, size, VKT_ERROR_SHAPE, n,
                    "ids of at most %d dimensions and table[vocab,dim] expected: ids %s, "
                    "table %s", VKT_MAX_DIMS - 1, graph_shape_str(ids, si),
                    graph_shape_str(tab, st));
    *out = *ids;
    out->dims[out->ndim++] = tab->dims[1];
    return VKT_OK;
}

static vkt_status rule_attention(const vkt_tensor *n, const vkt_shape *const *in,
                                 vkt_shape *out, char *msg, size_t size)
{
    const vkt_shape *q = in[0];
    char sq[GRAPH_SHAPE_STR];
    if (q->ndim != 3 || q->dims[2] % 3 || (q->dims[2] / 3) % n->iop)
        return fail(msg, size, VKT_ERROR_SHAPE, n,
                    "qkv[B,T,3C] with C a multiple of the %u heads expected: qkv %s", n->iop,
                    graph_shape_str(q, sq));
    *out = (vkt_shape){3, {q->dims[0], q->dims[1], q->dims[2] / 3}};
    return VKT_OK;
}

vkt_status graph_layer_infer_shape(const vkt_tensor *n, const vkt_shape *const *in,
                                   vkt_shape *out, char *msg, size_t msg_size)
{
    switch (n->op) {
    case GOP_CONV2D: return rule_conv(n, in, out, msg, msg_size);
    case GOP_POOL2D: return rule_pool(n, in, out, msg, msg_size);
    case GOP_LAYERNORM:
    case GOP_BATCHNORM: return rule_norm(n, in, out, msg, msg_size);
    case GOP_EMBEDDING: return rule_embedding(n, in, out, msg, msg_size);
    case GOP_ATTENTION: return rule_attention(n, in, out, msg, msg_size);
    default:
        return fail(msg, msg_size, VKT_ERROR_INTERNAL, n, "op %d has no shape rule", (int)n->op);
    }
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
    const uint32_t ip[7] = {o->stride_h ? o->stride_h : 1, o->stride_w ? o->stride_w : 1,
                            o->pad_h, o->pad_w, o->dilation_h ? o->dilation_h : 1,
                            o->dilation_w ? o->dilation_w : 1, o->groups ? o->groups : 1};
    memcpy(t.ip, ip, sizeof ip);
    vkt_tensor *in[3] = {x, w, b};
    return graph_add(g, "vkt_conv2d", &t, in, b ? 3 : 2);
}

static vkt_tensor *pool(vkt_graph *g, const char *fn, int max, vkt_tensor *x, uint32_t kernel,
                        uint32_t stride, uint32_t padding)
{
    vkt_tensor t = tmpl_of(GOP_POOL2D);
    t.iop = (uint32_t)max;
    t.ip[0] = kernel;
    t.ip[1] = stride;
    t.ip[2] = padding;
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
    t.f0 = eps > 0.0f ? eps : 1e-5f;
    vkt_tensor *in[3] = {x, gamma, beta};
    return graph_add(g, "vkt_layer_norm", &t, in, 3);
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
    t.f0 = eps > 0.0f ? eps : 1e-5f;
    t.f1 = momentum > 0.0f ? momentum : 0.1f;
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
    t.iop = heads;
    t.f0 = dropout;
    t.seed = g->seed ^ (0x9E3779B97F4A7C15ull * (uint64_t)(g->count + 1));
    return graph_add(g, "vkt_causal_attention", &t, &qkv, 1);
}
