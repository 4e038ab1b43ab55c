/* op_shape.c - reductions and moves: sum and mean (over one axis, or all), reshape (a
 * view), 2-D transpose, concat and slice (the parts of vkt_split). A shape seen as
 * [outer, len, inner] around its axis makes every move one strided copy. */
#include "graph/op_impl.h"

#include <string.h>

/* Rows mixed with other rows (axis 0) or summed over (every axis): no batch rows. */
static int rows_unless_axis0(int32_t axis, const vkt_tensor *t, const uint8_t *batch_major)
{
    if (axis <= 0)
        return 0;
    for (uint32_t k = 0; k < t->n_in; k++)
        if (batch_major[t->in[k]->id])
            return 1;
    return 0;
}

/* ---- sum, mean ---- */

static vkt_status shape_reduce(const vkt_tensor *t, const vkt_shape *const *in, vkt_shape *out,
                               char *msg, size_t size)
{
    const vkt_shape *x = in[0];
    int32_t axis = t->p.reduce.axis;
    char sx[GRAPH_SHAPE_STR];
    *out = (vkt_shape){0, {0}};
    if (axis < 0)
        return VKT_OK;
    if ((uint32_t)axis >= x->ndim)
        return op_bad(t, msg, size, VKT_ERROR_SHAPE, "axis %d is out of range for x %s", axis,
                      graph_shape_str(x, sx));
    for (uint32_t k = 0; k < x->ndim; k++)
        if (k != (uint32_t)axis)
            out->dims[out->ndim++] = x->dims[k];
    return VKT_OK;
}

static int reduce_rows(const vkt_tensor *t, const uint8_t *batch_major)
{
    return rows_unless_axis0(t->p.reduce.axis, t, batch_major);
}

static vkt_status fwd_reduce(const op_rec *r)
{
    const vkt_shape *xs = op_in_shape(r->m, r->t, 0);
    vkt_reduce_op op = r->t->op == GOP_MEAN ? VKT_REDUCE_MEAN : VKT_REDUCE_SUM;
    if (r->t->p.reduce.axis < 0 || xs->ndim == 0) {
        vkt_shape all = {1, {(uint32_t)graph_count(xs)}};
        return vkt_reduce(r->s, op, op_in_val(r->m, r->t, 0), &all, 0, op_out_val(r));
    }
    return vkt_reduce(r->s, op, op_in_val(r->m, r->t, 0), xs, (uint32_t)r->t->p.reduce.axis,
                      op_out_val(r));
}

static vkt_status bwd_reduce(const op_rec *r)
{
    const vkt_shape *xs = op_in_shape(r->m, r->t, 0);
    uint32_t outer = 1, len = (uint32_t)graph_count(xs), inner = 1;
    if (r->t->p.reduce.axis >= 0 && xs->ndim > 0)
        model_axis3(xs, (uint32_t)r->t->p.reduce.axis, &outer, &len, &inner);
    float alpha = r->t->op == GOP_MEAN ? 1.0f / (float)len : 1.0f;
    return kt_broadcast(r->s, op_dy(r), op_dx(r->m, r->t, 0), outer, len, inner, alpha,
                        op_beta(r->m, r->t->id, 0));
}

static void ref_reduce(const graph_ref_args *a)
{
    const vkt_shape *s = a->in_shape[0];
    uint64_t outer = 1, len = graph_count(s), inner = 1;
    if (a->node->p.reduce.axis >= 0)
        ref_axis_split(s, (uint32_t)a->node->p.reduce.axis, &outer, &len, &inner);
    for (uint64_t o = 0; o < outer; o++)
        for (uint64_t i = 0; i < inner; i++) {
            double sum = 0;
            for (uint64_t k = 0; k < len; k++)
                sum += a->in[0][(o * len + k) * inner + i];
            a->out[o * inner + i] = a->node->op == GOP_MEAN ? sum / (double)len : sum;
        }
}

static void ref_reduce_bwd(const graph_ref_args *a)
{
    if (!a->din[0])
        return;
    const vkt_shape *s = a->in_shape[0];
    uint64_t outer = 1, len = graph_count(s), inner = 1;
    if (a->node->p.reduce.axis >= 0)
        ref_axis_split(s, (uint32_t)a->node->p.reduce.axis, &outer, &len, &inner);
    double scale = a->node->op == GOP_MEAN ? 1.0 / (double)len : 1.0;
    for (uint64_t o = 0; o < outer; o++)
        for (uint64_t k = 0; k < len; k++)
            for (uint64_t i = 0; i < inner; i++)
                a->din[0][(o * len + k) * inner + i] += scale * a->dout[o * inner + i];
}

static const char *const names_x[] = {"x"};

#define REDUCE_ENTRY(nm, f)                                                                 \
    {.name = nm, .fn = f, .min_in = 1, .max_in = 1, .in_names = names_x,                    \
     .shape = shape_reduce, .batch_major = reduce_rows, .forward = fwd_reduce,              \
     .backward = bwd_reduce, .ref_forward = ref_reduce, .ref_backward = ref_reduce_bwd,     \
     .grad_rtol = 1e-6}

const graph_op_def graph_op_sum = REDUCE_ENTRY("sum", "vkt_sum");
const graph_op_def graph_op_mean = REDUCE_ENTRY("mean", "vkt_mean");

/* ---- reshape: a view of its input; its gradient a view of the input's where that is
 * the input's only use, else one copy ---- */

static vkt_status shape_reshape(const vkt_tensor *t, const vkt_shape *const *in, vkt_shape *out,
                                char *msg, size_t size)
{
    const vkt_shape *x = in[0], *tg = &t->p.reshape.target;
    char sx[GRAPH_SHAPE_STR], st[GRAPH_SHAPE_STR];
    if (tg->ndim > VKT_MAX_DIMS)
        return op_bad(t, msg, size, VKT_ERROR_INVALID_ARGUMENT,
                      "target has %u dimensions; at most %d", tg->ndim, VKT_MAX_DIMS);
    uint64_t known = 1;
    int infer = -1;
    for (uint32_t k = 0; k < tg->ndim; k++) {
        if (tg->dims[k] == 0) {
            if (infer >= 0)
                return op_bad(t, msg, size, VKT_ERROR_INVALID_ARGUMENT,
                              "target %s has more than one dimension of 0 (inferred)",
                              graph_shape_str(tg, st));
            infer = (int)k;
        } else {
            known *= tg->dims[k];
        }
    }
    uint64_t n = graph_count(x);
    *out = *tg;
    if (infer >= 0) {
        if (n % known)
            return op_bad(t, msg, size, VKT_ERROR_SHAPE,
                          "x %s (%llu elements) cannot take target %s", graph_shape_str(x, sx),
                          (unsigned long long)n, graph_shape_str(tg, st));
        out->dims[infer] = (uint32_t)(n / known);
    }
    if (graph_count(out) != n)
        return op_bad(t, msg, size, VKT_ERROR_SHAPE, "x %s has %llu elements, target %s has %llu",
                      graph_shape_str(x, sx), (unsigned long long)n, graph_shape_str(tg, st),
                      (unsigned long long)graph_count(out));
    return VKT_OK;
}

static vkt_status bwd_reshape(const op_rec *r)
{
    return kt_axpby(r->s, 1.0f, op_dy(r), op_beta(r->m, r->t->id, 0), op_dx(r->m, r->t, 0),
                    r->m->count[r->t->id]);
}

static void ref_copy(const graph_ref_args *a)
{
    memcpy(a->out, a->in[0], graph_count(&a->out_shape) * sizeof(double));
}

static void ref_copy_bwd(const graph_ref_args *a)
{
    uint64_t n = graph_count(&a->out_shape);
    if (a->din[0])
        for (uint64_t i = 0; i < n; i++)
            a->din[0][i] += a->dout[i];
}

const graph_op_def graph_op_reshape = {
    .name = "reshape", .fn = "vkt_reshape", .flags = OPF_VIEW, .min_in = 1, .max_in = 1,
    .in_names = names_x, .shape = shape_reshape, .backward = bwd_reshape,
    .ref_forward = ref_copy, .ref_backward = ref_copy_bwd, .grad_rtol = 1e-6,
};

/* ---- transpose ---- */

static vkt_status shape_transpose(const vkt_tensor *t, const vkt_shape *const *in,
                                  vkt_shape *out, char *msg, size_t size)
{
    char sx[GRAPH_SHAPE_STR];
    if (in[0]->ndim != 2)
        return op_bad(t, msg, size, VKT_ERROR_SHAPE, "x %s is not 2-D",
                      graph_shape_str(in[0], sx));
    *out = (vkt_shape){2, {in[0]->dims[1], in[0]->dims[0]}};
    return VKT_OK;
}

static vkt_status fwd_transpose(const op_rec *r)
{
    const vkt_shape *xs = op_in_shape(r->m, r->t, 0);
    return kt_transpose(r->s, op_in_val(r->m, r->t, 0), op_out_val(r), xs->dims[0], xs->dims[1],
                        1.0f, 0.0f);
}

static vkt_status bwd_transpose(const op_rec *r)
{
    const vkt_shape *xs = op_in_shape(r->m, r->t, 0);
    return kt_transpose(r->s, op_dy(r), op_dx(r->m, r->t, 0), xs->dims[1], xs->dims[0], 1.0f,
                        op_beta(r->m, r->t->id, 0));
}

static void ref_transpose(const graph_ref_args *a)
{
    uint64_t rows = a->in_shape[0]->dims[0], cols = a->in_shape[0]->dims[1];
    for (uint64_t i = 0; i < rows; i++)
        for (uint64_t j = 0; j < cols; j++)
            a->out[j * rows + i] = a->in[0][i * cols + j];
}

static void ref_transpose_bwd(const graph_ref_args *a)
{
    if (!a->din[0])
        return;
    uint64_t rows = a->in_shape[0]->dims[0], cols = a->in_shape[0]->dims[1];
    for (uint64_t i = 0; i < rows; i++)
        for (uint64_t j = 0; j < cols; j++)
            a->din[0][i * cols + j] += a->dout[j * rows + i];
}

const graph_op_def graph_op_transpose = {
    .name = "transpose", .fn = "vkt_transpose", .flags = OPF_NO_BATCH_ROWS, .min_in = 1,
    .max_in = 1, .in_names = names_x, .shape = shape_transpose, .forward = fwd_transpose,
    .backward = bwd_transpose, .ref_forward = ref_transpose, .ref_backward = ref_transpose_bwd,
    .grad_rtol = 1e-6,
};

/* ---- concat ---- */

static vkt_status shape_concat(const vkt_tensor *t, const vkt_shape *const *in, vkt_shape *out,
                               char *msg, size_t size)
{
    const vkt_shape *a = in[0];
    uint32_t axis = t->p.concat.axis;
    char s0[GRAPH_SHAPE_STR], sk[GRAPH_SHAPE_STR];
    if (axis >= a->ndim)
        return op_bad(t, msg, size, VKT_ERROR_SHAPE, "axis %u is out of range for input 0 %s",
                      axis, graph_shape_str(a, s0));
    *out = *a;
    for (uint32_t k = 1; k < t->n_in; k++) {
        const vkt_shape *b = in[k];
        int ok = b->ndim == a->ndim;
        for (uint32_t d = 0; ok && d < a->ndim; d++)
            ok = d == axis || a->dims[d] == b->dims[d];
        if (!ok)
            return op_bad(t, msg, size, VKT_ERROR_SHAPE,
                          "input 0 %s and input %u %s differ outside axis %u",
                          graph_shape_str(a, s0), k, graph_shape_str(b, sk), axis);
        out->dims[axis] += b->dims[axis];
    }
    return VKT_OK;
}

static int concat_rows(const vkt_tensor *t, const uint8_t *batch_major)
{
    return rows_unless_axis0((int32_t)t->p.concat.axis, t, batch_major);
}

static vkt_status fwd_concat(const op_rec *r)
{
    uint32_t axis = r->t->p.concat.axis, outer, total, inner, at = 0;
    model_axis3(&r->m->shape[r->t->id], axis, &outer, &total, &inner);
    for (uint32_t k = 0; k < r->t->n_in; k++) {
        uint32_t len = op_in_shape(r->m, r->t, k)->dims[axis];
        vkt_status st = kt_slice(r->s, op_in_val(r->m, r->t, k), len * inner, 0, op_out_val(r),
                                 total * inner, at * inner, outer, len * inner, 1.0f, 0.0f);
        if (st != VKT_OK)
            return st;
        at += len;
    }
    return VKT_OK;
}

static vkt_status bwd_concat(const op_rec *r)
{
    uint32_t axis = r->t->p.concat.axis, outer, total, inner, at = 0;
    model_axis3(&r->m->shape[r->t->id], axis, &outer, &total, &inner);
    for (uint32_t k = 0; k < r->t->n_in; k++) {
        uint32_t len = op_in_shape(r->m, r->t, k)->dims[axis];
        if (op_want(r->m, r->t, k)) {
            vkt_status st = kt_slice(r->s, op_dy(r), total * inner, at * inner,
                                     op_dx(r->m, r->t, k), len * inner, 0, outer, len * inner,
                                     1.0f, op_beta(r->m, r->t->id, k));
            if (st != VKT_OK)
                return st;
        }
        at += len;
    }
    return VKT_OK;
}

static void ref_concat(const graph_ref_args *a)
{
    uint32_t axis = a->node->p.concat.axis;
    uint64_t outer, total, inner, at = 0;
    ref_axis_split(&a->out_shape, axis, &outer, &total, &inner);
    for (uint32_t k = 0; k < a->n_in; k++) {
        uint64_t len = a->in_shape[k]->dims[axis];
        for (uint64_t o = 0; o < outer; o++)
            memcpy(a->out + (o * total + at) * inner, a->in[k] + o * len * inner,
                   len * inner * sizeof(double));
        at += len;
    }
}

static void ref_concat_bwd(const graph_ref_args *a)
{
    uint32_t axis = a->node->p.concat.axis;
    uint64_t outer, total, inner, at = 0;
    ref_axis_split(&a->out_shape, axis, &outer, &total, &inner);
    for (uint32_t k = 0; k < a->n_in; k++) {
        uint64_t len = a->in_shape[k]->dims[axis];
        if (a->din[k])
            for (uint64_t o = 0; o < outer; o++)
                for (uint64_t e = 0; e < len * inner; e++)
                    a->din[k][o * len * inner + e] += a->dout[(o * total + at) * inner + e];
        at += len;
    }
}

const graph_op_def graph_op_concat = {
    .name = "concat", .fn = "vkt_concat", .min_in = 1, .max_in = GRAPH_MAX_INPUTS,
    .shape = shape_concat, .batch_major = concat_rows, .forward = fwd_concat,
    .backward = bwd_concat, .ref_forward = ref_concat, .ref_backward = ref_concat_bwd,
    .grad_rtol = 1e-6,
};

/* ---- slice: [start, start + len) along axis ---- */

static vkt_status shape_slice(const vkt_tensor *t, const vkt_shape *const *in, vkt_shape *out,
                              char *msg, size_t size)
{
    const vkt_shape *x = in[0];
    uint32_t axis = t->p.slice.axis, start = t->p.slice.start, len = t->p.slice.len;
    char sx[GRAPH_SHAPE_STR];
    if (axis >= x->ndim)
        return op_bad(t, msg, size, VKT_ERROR_SHAPE, "axis %u is out of range for x %s", axis,
                      graph_shape_str(x, sx));
    if (len == 0 || start + len > x->dims[axis])
        return op_bad(t, msg, size, VKT_ERROR_SHAPE,
                      "part [%u, %u) along axis %u does not fit x %s", start, start + len, axis,
                      graph_shape_str(x, sx));
    *out = *x;
    out->dims[axis] = len;
    return VKT_OK;
}

static int slice_rows(const vkt_tensor *t, const uint8_t *batch_major)
{
    return rows_unless_axis0((int32_t)t->p.slice.axis, t, batch_major);
}

static vkt_status fwd_slice(const op_rec *r)
{
    uint32_t outer, total, inner, len = r->t->p.slice.len;
    model_axis3(op_in_shape(r->m, r->t, 0), r->t->p.slice.axis, &outer, &total, &inner);
    return kt_slice(r->s, op_in_val(r->m, r->t, 0), total * inner, r->t->p.slice.start * inner,
                    op_out_val(r), len * inner, 0, outer, len * inner, 1.0f, 0.0f);
}

static vkt_status bwd_slice(const op_rec *r)
{
    uint32_t outer, total, inner, len = r->t->p.slice.len;
    const vkt_shape *xs = op_in_shape(r->m, r->t, 0);
    model_axis3(xs, r->t->p.slice.axis, &outer, &total, &inner);
    vkt_view dx = op_dx(r->m, r->t, 0);
    vkt_status st = VKT_OK;
    if (!op_node(r)->acc[0]) /* the first contribution: the rest of dx is zero */
        st = vkt_fill(r->s, dx, graph_count(xs), 0.0f);
    if (st == VKT_OK)
        st = kt_slice(r->s, op_dy(r), len * inner, 0, dx, total * inner,
                      r->t->p.slice.start * inner, outer, len * inner, 1.0f, 1.0f);
    return st;
}

static void ref_slice(const graph_ref_args *a)
{
    uint64_t outer, total, inner, len = a->node->p.slice.len, start = a->node->p.slice.start;
    ref_axis_split(a->in_shape[0], a->node->p.slice.axis, &outer, &total, &inner);
    for (uint64_t o = 0; o < outer; o++)
        memcpy(a->out + o * len * inner, a->in[0] + (o * total + start) * inner,
               len * inner * sizeof(double));
}

static void ref_slice_bwd(const graph_ref_args *a)
{
    if (!a->din[0])
        return;
    uint64_t outer, total, inner, len = a->node->p.slice.len, start = a->node->p.slice.start;
    ref_axis_split(a->in_shape[0], a->node->p.slice.axis, &outer, &total, &inner);
    for (uint64_t o = 0; o < outer; o++)
        for (uint64_t e = 0; e < len * inner; e++)
            a->din[0][(o * total + start) * inner + e] += a->dout[o * len * inner + e];
}

const graph_op_def graph_op_slice = {
    .name = "split", .fn = "vkt_split", .min_in = 1, .max_in = 1, .in_names = names_x,
    .shape = shape_slice, .batch_major = slice_rows, .forward = fwd_slice, .backward = bwd_slice,
    .ref_forward = ref_slice, .ref_backward = ref_slice_bwd, .grad_rtol = 1e-6,
};
