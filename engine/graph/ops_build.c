/* ops_build.c - the public op constructors: each fills a node template with its
 * parameters and lets graph_add check inputs and infer the shape. */
#include "graph/graph.h"

#include <string.h>

static vkt_tensor tmpl_of(graph_op op)
{
    vkt_tensor t;
    memset(&t, 0, sizeof t);
    t.op = op;
    return t;
}

static vkt_tensor *op1(vkt_graph *g, const char *fn, vkt_tensor *t, vkt_tensor *x)
{
    return graph_add(g, fn, t, &x, 1);
}

static vkt_tensor *op2(vkt_graph *g, const char *fn, graph_op op, vkt_tensor *a, vkt_tensor *b)
{
    vkt_tensor t = tmpl_of(op);
    vkt_tensor *in[2] = {a, b};
    return graph_add(g, fn, &t, in, 2);
}

vkt_tensor *vkt_matmul(vkt_graph *g, vkt_tensor *a, vkt_tensor *b)
{
    return op2(g, "vkt_matmul", GOP_MATMUL, a, b);
}

vkt_tensor *vkt_linear(vkt_graph *g, vkt_tensor *x, vkt_tensor *w, vkt_tensor *b)
{
    vkt_tensor t = tmpl_of(GOP_LINEAR);
    vkt_tensor *in[3] = {x, w, b};
    return graph_add(g, "vkt_linear", &t, in, b ? 3 : 2);
}

vkt_tensor *vkt_add(vkt_graph *g, vkt_tensor *a, vkt_tensor *b)
{
    return op2(g, "vkt_add", GOP_ADD, a, b);
}

vkt_tensor *vkt_sub(vkt_graph *g, vkt_tensor *a, vkt_tensor *b)
{
    return op2(g, "vkt_sub", GOP_SUB, a, b);
}

vkt_tensor *vkt_mul(vkt_graph *g, vkt_tensor *a, vkt_tensor *b)
{
    return op2(g, "vkt_mul", GOP_MUL, a, b);
}

vkt_tensor *vkt_scale(vkt_graph *g, vkt_tensor *x, float s)
{
    vkt_tensor t = tmpl_of(GOP_SCALE);
    t.p.scale.s = s;
    return op1(g, "vkt_scale", &t, x);
}

static vkt_tensor *act(vkt_graph *g, const char *fn, vkt_unary_op op, float alpha,
                       vkt_tensor *x)
{
    vkt_tensor t = tmpl_of(GOP_UNARY);
    t.p.unary.op = op;
    t.p.unary.alpha = alpha;
    return op1(g, fn, &t, x);
}

vkt_tensor *vkt_relu(vkt_graph *g, vkt_tensor *x)
{
    return act(g, "vkt_relu", VKT_UNARY_RELU, 0.0f, x);
}

vkt_tensor *vkt_leaky_relu(vkt_graph *g, vkt_tensor *x, float alpha)
{
    return act(g, "vkt_leaky_relu", VKT_UNARY_LEAKY_RELU, alpha, x);
}

vkt_tensor *vkt_gelu(vkt_graph *g, vkt_tensor *x)
{
    return act(g, "vkt_gelu", VKT_UNARY_GELU, 0.0f, x);
}

vkt_tensor *vkt_tanh(vkt_graph *g, vkt_tensor *x)
{
    return act(g, "vkt_tanh", VKT_UNARY_TANH, 0.0f, x);
}

vkt_tensor *vkt_sigmoid(vkt_graph *g, vkt_tensor *x)
{
    return act(g, "vkt_sigmoid", VKT_UNARY_SIGMOID, 0.0f, x);
}

vkt_tensor *vkt_silu(vkt_graph *g, vkt_tensor *x)
{
    return act(g, "vkt_silu", VKT_UNARY_SILU, 0.0f, x);
}

vkt_tensor *vkt_softmax(vkt_graph *g, vkt_tensor *x)
{
    vkt_tensor t = tmpl_of(GOP_SOFTMAX);
    return op1(g, "vkt_softmax", &t, x);
}

vkt_tensor *vkt_log_softmax(vkt_graph *g, vkt_tensor *x)
{
    vkt_tensor t = tmpl_of(GOP_SOFTMAX);
    t.p.softmax.log = 1;
    return op1(g, "vkt_log_softmax", &t, x);
}

vkt_tensor *vkt_softmax_cross_entropy(vkt_graph *g, vkt_tensor *logits, vkt_tensor *labels)
{
    return op2(g, "vkt_softmax_cross_entropy", GOP_SCE, logits, labels);
}

vkt_tensor *vkt_mse(vkt_graph *g, vkt_tensor *pred, vkt_tensor *target)
{
    return op2(g, "vkt_mse", GOP_MSE, pred, target);
}

vkt_tensor *vkt_sum(vkt_graph *g, vkt_tensor *x, int axis)
{
    vkt_tensor t = tmpl_of(GOP_SUM);
    t.p.reduce.axis = axis < 0 ? -1 : axis;
    return op1(g, "vkt_sum", &t, x);
}

vkt_tensor *vkt_mean(vkt_graph *g, vkt_tensor *x, int axis)
{
    vkt_tensor t = tmpl_of(GOP_MEAN);
    t.p.reduce.axis = axis < 0 ? -1 : axis;
    return op1(g, "vkt_mean", &t, x);
}

vkt_tensor *vkt_reshape(vkt_graph *g, vkt_tensor *x, const vkt_shape *shape)
{
    if (!shape) {
        if (graph_check_inputs(g, "vkt_reshape", &x, 1))
            graph_fail(g, VKT_ERROR_INVALID_ARGUMENT, "vkt_reshape: shape is NULL");
        return NULL;
    }
    vkt_tensor t = tmpl_of(GOP_RESHAPE);
    t.p.reshape.target = *shape;
    return op1(g, "vkt_reshape", &t, x);
}

vkt_tensor *vkt_transpose(vkt_graph *g, vkt_tensor *x)
{
    vkt_tensor t = tmpl_of(GOP_TRANSPOSE);
    return op1(g, "vkt_transpose", &t, x);
}

vkt_tensor *vkt_concat(vkt_graph *g, vkt_tensor *const *tensors, uint32_t n, uint32_t axis)
{
    if (!g || !tensors || n == 0) {
        if (graph_check_inputs(g, "vkt_concat", NULL, 0))
            graph_fail(g, VKT_ERROR_INVALID_ARGUMENT, "vkt_concat: no tensors given");
        return NULL;
    }
    vkt_tensor t = tmpl_of(GOP_CONCAT);
    t.p.concat.axis = axis;
    return graph_add(g, "vkt_concat", &t, tensors, n);
}

vkt_tensor *vkt_split(vkt_graph *g, vkt_tensor *x, uint32_t axis, const uint32_t *sizes,
                      uint32_t n, vkt_tensor **outs)
{
    if (outs)
        for (uint32_t i = 0; i < n; i++)
            outs[i] = NULL;
    if (!graph_check_inputs(g, "vkt_split", &x, 1))
        return NULL;
    if (!sizes || !outs || n == 0)
        return graph_fail(g, VKT_ERROR_INVALID_ARGUMENT, "vkt_split: sizes, outs or n missing");
    char sx[GRAPH_SHAPE_STR];
    uint64_t total = 0;
    for (uint32_t i = 0; i < n; i++)
        total += sizes[i];
    if (axis >= x->shape.ndim || total != x->shape.dims[axis])
        return graph_fail(g, VKT_ERROR_SHAPE,
                          "vkt_split: sizes summing to %llu do not split axis %u of x %s",
                          (unsigned long long)total, axis, graph_shape_str(&x->shape, sx));
    uint32_t start = 0;
    for (uint32_t i = 0; i < n; i++) {
        vkt_tensor t = tmpl_of(GOP_SLICE);
        t.p.slice.axis = axis;
        t.p.slice.start = start;
        t.p.slice.len = sizes[i];
        start += sizes[i];
        outs[i] = op1(g, "vkt_split", &t, x);
        if (!outs[i]) {
            for (uint32_t k = 0; k < n; k++)
                outs[k] = NULL;
            return NULL;
        }
    }
    return outs[0];
}

vkt_tensor *vkt_dropout(vkt_graph *g, vkt_tensor *x, float p)
{
    if (!graph_check_inputs(g, "vkt_dropout", &x, 1))
        return NULL;
    if (!(p >= 0.0f && p < 1.0f))
        return graph_fail(g, VKT_ERROR_INVALID_ARGUMENT,
                          "vkt_dropout: p is %g; 0 <= p < 1 expected", p);
    vkt_tensor t = tmpl_of(GOP_DROPOUT);
    t.p.dropout.p = p;
    /* Each dropout node its own stream of random numbers: seed from graph and position. */
    t.p.dropout.seed = g->seed ^ (0x9E3779B97F4A7C15ull * (uint64_t)(g->count + 1));
    return op1(g, "vkt_dropout", &t, x);
}
