/* shapes.c - shape rules of every op, op names, shape formatting. The same rule runs
 * when a graph is built and again when a model is compiled for another batch size. */
#include "graph/graph.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int graph_shape_eq(const vkt_shape *a, const vkt_shape *b)
{
    if (a->ndim != b->ndim)
        return 0;
    for (uint32_t i = 0; i < a->ndim; i++)
        if (a->dims[i] != b->dims[i])
            return 0;
    return 1;
}

const char *graph_op_name(const vkt_tensor *n)
{
    switch (n->op) {
    case GOP_INPUT: return "input";
    case GOP_LABELS: return "labels";
    case GOP_PARAM: return "param";
    case GOP_MATMUL: return "matmul";
    case GOP_LINEAR: return "linear";
    case GOP_ADD: return "add";
    case GOP_SUB: return "sub";
    case GOP_MUL: return "mul";
    case GOP_SCALE: return "scale";
    case GOP_UNARY: return vkt_unary_op_name((vkt_unary_op)n->iop);
    case GOP_SOFTMAX: return n->iop ? "log_softmax" : "softmax";
    case GOP_SCE: return "softmax_cross_entropy";
    case GOP_MSE: return "mse";
    case GOP_SUM: return "sum";
    case GOP_MEAN: return "mean";
    case GOP_RESHAPE: return "reshape";
    case GOP_TRANSPOSE: return "transpose";
    case GOP_CONCAT: return "concat";
    case GOP_SLICE: return "split";
    case GOP_DROPOUT: return "dropout";
    default: return graph_is_layer_op(n->op) ? graph_layer_op_name(n) : "unknown";
    }
}

const char *graph_op_fn(const vkt_tensor *n)
{
    static const char *const fns[GOP_COUNT] = {
        [GOP_INPUT] = "vkt_input", [GOP_LABELS] = "vkt_input_labels",
        [GOP_PARAM] = "vkt_param", [GOP_MATMUL] = "vkt_matmul", [GOP_LINEAR] = "vkt_linear",
        [GOP_ADD] = "vkt_add", [GOP_SUB] = "vkt_sub", [GOP_MUL] = "vkt_mul",
        [GOP_SCALE] = "vkt_scale", [GOP_UNARY] = "vkt_unary", [GOP_SOFTMAX] = "vkt_softmax",
        [GOP_SCE] = "vkt_softmax_cross_entropy", [GOP_MSE] = "vkt_mse", [GOP_SUM] = "vkt_sum",
        [GOP_MEAN] = "vkt_mean", [GOP_RESHAPE] = "vkt_reshape",
        [GOP_TRANSPOSE] = "vkt_transpose", [GOP_CONCAT] = "vkt_concat",
        [GOP_SLICE] = "vkt_split", [GOP_DROPOUT] = "vkt_dropout"};
    if (n->op == GOP_UNARY) {
        switch ((vkt_unary_op)n->iop) {
        case VKT_UNARY_RELU: return "vkt_relu";
        case VKT_UNARY_LEAKY_RELU: return "vkt_leaky_relu";
        case VKT_UNARY_GELU: return "vkt_gelu";
        case VKT_UNARY_TANH: return "vkt_tanh";
        case VKT_UNARY_SIGMOID: return "vkt_sigmoid";
        default: return "vkt_unary";
        }
    }
    if (n->op == GOP_SOFTMAX && n->iop)
        return "vkt_log_softmax";
    if (graph_is_layer_op(n->op))
        return graph_layer_op_fn(n);
    return (unsigned)n->op < GOP_COUNT ? fns[n->op] : "unknown";
}

typedef struct rule_ctx {
    const vkt_tensor *n;
    const vkt_shape *const *in;
    char *msg;
    size_t msg_size;
} rule_ctx;

static vkt_status bad(const rule_ctx *r, vkt_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static vkt_status bad(const rule_ctx *r, vkt_status st, const char *fmt, ...)
{
    int len = snprintf(r->msg, r->msg_size, "%s: ", graph_op_fn(r->n));
    if (len < 0 || (size_t)len >= r->msg_size)
        return st;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->msg + len, r->msg_size - (size_t)len, fmt, ap);
    va_end(ap);
    return st;
}

/* "a [2,3] and b [4,5]" for two inputs. */
static const char *two(const rule_ctx *r, const char *na, const char *nb, char *buf, size_t size)
{
    char sa[GRAPH_SHAPE_STR], sb[GRAPH_SHAPE_STR];
    snprintf(buf, size, "%s %s and %s %s", na, graph_shape_str(r->in[0], sa), nb,
             graph_shape_str(r->in[1], sb));
    return buf;
}

static vkt_status rule_matmul(const rule_ctx *r, vkt_shape *out)
{
    const vkt_shape *a = r->in[0], *b = r->in[1];
    char buf[256];
    if (a->ndim != 2 || b->ndim != 2)
        return bad(r, VKT_ERROR_SHAPE, "2-D operands expected: %s",
                    two(r, "a", "b", buf, sizeof buf));
    if (a->dims[1] != b->dims[0])
        return bad(r, VKT_ERROR_SHAPE, "inner dimensions differ (%u and %u): %s", a->dims[1],
                   b->dims[0], two(r, "a", "b", buf, sizeof buf));
    *out = (vkt_shape){2, {a->dims[0], b->dims[1]}};
    return VKT_OK;
}

/* x [..., in] (rows: every leading dimension), w [in, out], b [out] -> [..., out]. */
static vkt_status rule_linear(const rule_ctx *r, vkt_shape *out)
{
    const vkt_shape *x = r->in[0], *w = r->in[1];
    char buf[256], sb[GRAPH_SHAPE_STR];
    if (x->ndim < 2 || w->ndim != 2)
        return bad(r, VKT_ERROR_SHAPE, "x[...,in] (2-D or more) and w[in,out] expected: %s",
                   two(r, "x", "w", buf, sizeof buf));
    uint32_t in = x->dims[x->ndim - 1];
    if (in != w->dims[0])
        return bad(r, VKT_ERROR_SHAPE, "x has %u features but w expects %u: %s", in,
                   w->dims[0], two(r, "x", "w", buf, sizeof buf));
    if (r->n->n_in == 3) {
        const vkt_shape *b = r->in[2];
        if (b->ndim != 1 || b->dims[0] != w->dims[1])
            return bad(r, VKT_ERROR_SHAPE, "bias b %s does not match w %s: [%u] expected",
                       graph_shape_str(b, sb), graph_shape_str(w, buf), w->dims[1]);
    }
    *out = *x;
    out->dims[x->ndim - 1] = w->dims[1];
    return VKT_OK;
}

static vkt_status rule_binary(const rule_ctx *r, vkt_shape *out)
{
    char text[VKT_ERRMSG_SIZE];
    vkt_status st = vkt_broadcast_shape(r->in[0], r->in[1], out, text, sizeof text);
    if (st != VKT_OK)
        return bad(r, VKT_ERROR_SHAPE, "%s", text);
    return VKT_OK;
}

/* logits [..., C] and labels of the leading shape [...]: one row per label. */
static vkt_status rule_sce(const rule_ctx *r, vkt_shape *out)
{
    const vkt_shape *z = r->in[0], *l = r->in[1];
    char buf[256];
    if (!r->n->in[1]->is_int)
        return bad(r, VKT_ERROR_INVALID_ARGUMENT,
                   "labels ('%s') must be integer labels from vkt_input_labels",
                   r->n->in[1]->name);
    int ok = z->ndim >= 2 && l->ndim == z->ndim - 1;
    for (uint32_t k = 0; ok && k < l->ndim; k++)
        ok = l->dims[k] == z->dims[k];
    if (!ok)
        return bad(r, VKT_ERROR_SHAPE, "logits[...,C] and labels[...] expected: %s",
                   two(r, "logits", "labels", buf, sizeof buf));
    *out = (vkt_shape){0, {0}};
    return VKT_OK;
}

static vkt_status rule_mse(const rule_ctx *r, vkt_shape *out)
{
    char buf[256];
    if (!graph_shape_eq(r->in[0], r->in[1]))
        return bad(r, VKT_ERROR_SHAPE, "shapes differ: %s",
                   two(r, "pred", "target", buf, sizeof buf));
    *out = (vkt_shape){0, {0}};
    return VKT_OK;
}

static vkt_status rule_reduce(const rule_ctx *r, vkt_shape *out)
{
    const vkt_shape *x = r->in[0];
    char sx[GRAPH_SHAPE_STR];
    if (r->n->axis < 0) {
        *out = (vkt_shape){0, {0}};
        return VKT_OK;
    }
    if ((uint32_t)r->n->axis >= x->ndim)
        return bad(r, VKT_ERROR_SHAPE, "axis %d is out of range for x %s", r->n->axis,
                   graph_shape_str(x, sx));
    *out = (vkt_shape){0, {0}};
    for (uint32_t k = 0; k < x->ndim; k++)
        if (k != (uint32_t)r->n->axis)
            out->dims[out->ndim++] = x->dims[k];
    return VKT_OK;
}

static vkt_status rule_reshape(const rule_ctx *r, vkt_shape *out)
{
    const vkt_shape *x = r->in[0], *t = &r->n->target;
    char sx[GRAPH_SHAPE_STR], st[GRAPH_SHAPE_STR];
    if (t->ndim > VKT_MAX_DIMS)
        return bad(r, VKT_ERROR_INVALID_ARGUMENT, "target has %u dimensions; at most %d",
                   t->ndim, VKT_MAX_DIMS);
    uint64_t known = 1;
    int infer = -1;
    for (uint32_t k = 0; k < t->ndim; k++) {
        if (t->dims[k] == 0) {
            if (infer >= 0)
                return bad(r, VKT_ERROR_INVALID_ARGUMENT,
                           "target %s has more than one dimension of 0 (inferred)",
                           graph_shape_str(t, st));
            infer = (int)k;
        } else {
            known *= t->dims[k];
        }
    }
    uint64_t n = graph_count(x);
    *out = *t;
    if (infer >= 0) {
        if (n % known)
            return bad(r, VKT_ERROR_SHAPE, "x %s (%llu elements) cannot take target %s",
                       graph_shape_str(x, sx), (unsigned long long)n, graph_shape_str(t, st));
        out->dims[infer] = (uint32_t)(n / known);
    }
    if (graph_count(out) != n)
        return bad(r, VKT_ERROR_SHAPE, "x %s has %llu elements, target %s has %llu",
                   graph_shape_str(x, sx), (unsigned long long)n, graph_shape_str(t, st),
                   (unsigned long long)graph_count(out));
    return VKT_OK;
}

static vkt_status rule_transpose(const rule_ctx *r, vkt_shape *out)
{
    char sx[GRAPH_SHAPE_STR];
    if (r->in[0]->ndim != 2)
        return bad(r, VKT_ERROR_SHAPE, "x %s is not 2-D", graph_shape_str(r->in[0], sx));
    *out = (vkt_shape){2, {r->in[0]->dims[1], r->in[0]->dims[0]}};
    return VKT_OK;
}

static vkt_status rule_concat(const rule_ctx *r, vkt_shape *out)
{
    const vkt_shape *a = r->in[0];
    uint32_t axis = (uint32_t)r->n->axis;
    char s0[GRAPH_SHAPE_STR], sk[GRAPH_SHAPE_STR];
    if (axis >= a->ndim)
        return bad(r, VKT_ERROR_SHAPE, "axis %u is out of range for input 0 %s", axis,
                   graph_shape_str(a, s0));
    *out = *a;
    for (uint32_t k = 1; k < r->n->n_in; k++) {
        const vkt_shape *b = r->in[k];
        int ok = b->ndim == a->ndim;
        for (uint32_t d = 0; ok && d < a->ndim; d++)
            ok = d == axis || a->dims[d] == b->dims[d];
        if (!ok)
            return bad(r, VKT_ERROR_SHAPE,
                       "input 0 %s and input %u %s differ outside axis %u",
                       graph_shape_str(a, s0), k, graph_shape_str(b, sk), axis);
        out->dims[axis] += b->dims[axis];
    }
    return VKT_OK;
}

static vkt_status rule_slice(const rule_ctx *r, vkt_shape *out)
{
    const vkt_shape *x = r->in[0];
    uint32_t axis = (uint32_t)r->n->axis;
    char sx[GRAPH_SHAPE_STR];
    if (axis >= x->ndim)
        return bad(r, VKT_ERROR_SHAPE, "axis %u is out of range for x %s", axis,
                   graph_shape_str(x, sx));
    if (r->n->len == 0 || r->n->start + r->n->len > x->dims[axis])
        return bad(r, VKT_ERROR_SHAPE,
                   "part [%u, %u) along axis %u does not fit x %s", r->n->start,
                   r->n->start + r->n->len, axis, graph_shape_str(x, sx));
    *out = *x;
    out->dims[axis] = r->n->len;
    return VKT_OK;
}

vkt_status graph_infer_shape(const vkt_tensor *n, const vkt_shape *const *in, vkt_shape *out,
                             char *msg, size_t msg_size)
{
    rule_ctx r = {n, in, msg, msg_size};
    for (uint32_t k = 0; k < n->n_in; k++)
        if (n->in[k]->is_int && !(n->op == GOP_SCE && k == 1))
            return bad(&r, VKT_ERROR_INVALID_ARGUMENT,
                       "input %u ('%s') holds integer labels; only "
                       "vkt_softmax_cross_entropy takes them", k, n->in[k]->name);
    switch (n->op) {
    case GOP_MATMUL: return rule_matmul(&r, out);
    case GOP_LINEAR: return rule_linear(&r, out);
    case GOP_ADD:
    case GOP_SUB:
    case GOP_MUL: return rule_binary(&r, out);
    case GOP_SOFTMAX:
        if (in[0]->ndim == 0)
            return bad(&r, VKT_ERROR_SHAPE, "x is a scalar; softmax needs an axis");
        *out = *in[0];
        return VKT_OK;
    case GOP_SCALE:
    case GOP_UNARY:
    case GOP_DROPOUT: *out = *in[0]; return VKT_OK;
    case GOP_SCE: return rule_sce(&r, out);
    case GOP_MSE: return rule_mse(&r, out);
    case GOP_SUM:
    case GOP_MEAN: return rule_reduce(&r, out);
    case GOP_RESHAPE: return rule_reshape(&r, out);
    case GOP_TRANSPOSE: return rule_transpose(&r, out);
    case GOP_CONCAT: return rule_concat(&r, out);
    case GOP_SLICE: return rule_slice(&r, out);
    default:
        if (graph_is_layer_op(n->op))
            return graph_layer_infer_shape(n, in, out, msg, msg_size);
        return bad(&r, VKT_ERROR_INTERNAL, "op %d has no shape rule", (int)n->op);
    }
}

int graph_batch_major(const vkt_tensor *n, const uint8_t *batch_major)
{
    switch (n->op) {
    case GOP_INPUT:
    case GOP_LABELS: return 1;
    case GOP_PARAM:
    case GOP_SCE:
    case GOP_MSE:
    case GOP_TRANSPOSE: return 0; /* no batch rows, or not in row order */
    case GOP_SUM:
    case GOP_MEAN:
    case GOP_CONCAT:
    case GOP_SLICE:
        if (n->axis <= 0) /* summed over, or rows mixed with other rows */
            return 0;
        break;
    case GOP_MATMUL:
    case GOP_LINEAR: return batch_major[n->in[0]->id]; /* rows of the product follow a */
    default: break;
    }
    for (uint32_t k = 0; k < n->n_in; k++)
        if (batch_major[n->in[k]->id])
            return 1;
    return 0;
}

uint64_t graph_row_shift(int batch_major, uint32_t row_offset, uint32_t batch, uint64_t units)
{
    if (!batch_major || batch == 0 || units % batch != 0)
        return 0;
    return (uint64_t)row_offset * (units / batch);
}
