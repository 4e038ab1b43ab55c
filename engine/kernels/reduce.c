/* reduce.c - dispatch of the axis reductions (shaders/reduce.comp). */
#include "gpu/gpu.h"
#include "kernels/kernel_util.h"
#include "push.h"
#include "spec.h"
#include "reduce.spv.h"

/* shaders/common.glsl uses these op codes. */
_Static_assert(VKT_REDUCE_SUM == 0 && VKT_REDUCE_MEAN == 1 && VKT_REDUCE_MAX == 2 &&
                   VKT_REDUCE_ARGMAX == 3,
               "reduce op codes differ from shaders/common.glsl");

static const gpu_kernel k_reduce = {
    "reduce", spv_reduce, sizeof spv_reduce, 2, {GPU_BIND_STORAGE, GPU_BIND_STORAGE},
    sizeof(struct push_reduce), SPEC_REDUCE_COUNT};

const char *vkt_reduce_op_name(vkt_reduce_op op)
{
    switch (op) {
    case VKT_REDUCE_SUM: return "sum";
    case VKT_REDUCE_MEAN: return "mean";
    case VKT_REDUCE_MAX: return "max";
    case VKT_REDUCE_ARGMAX: return "argmax";
    default: return "unknown";
    }
}

vkt_status vkt_reduce(vkt_stream *stream, vkt_reduce_op op, vkt_view x, const vkt_shape *shape,
                      uint32_t axis, vkt_view out)
{
    static const char fn[] = "vkt_reduce";
    if (!stream)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "%s: stream is NULL", fn);
    vkt_context *ctx = stream->ctx;
    if ((unsigned)op >= VKT_REDUCE_COUNT)
        return err_fail(ctx->errmsg, VKT_ERROR_INVALID_ARGUMENT, "%s: unknown op %d", fn,
                        (int)op);
    vkt_status st = ku_check_shape(ctx->errmsg, fn, "shape", shape);
    if (st != VKT_OK)
        return st;
    if (axis >= shape->ndim) {
        char buf[KU_SHAPE_STR];
        return err_fail(ctx->errmsg, VKT_ERROR_INVALID_ARGUMENT,
                        "%s: axis %u is out of range for shape %s (%u dimensions)", fn, axis,
                        ku_shape_str(shape, buf), shape->ndim);
    }
    uint64_t outer = 1, inner = 1, len = shape->dims[axis];
    for (uint32_t k = 0; k < axis; k++)
        outer *= shape->dims[k];
    for (uint32_t k = axis + 1; k < shape->ndim; k++)
        inner *= shape->dims[k];
    uint64_t n = outer * len * inner, nout = outer * inner;
    if (n > UINT32_MAX)
        return err_fail(ctx->errmsg, VKT_ERROR_LIMIT,
                        "%s: %llu elements; at most 2^32 - 1 are supported", fn,
                        (unsigned long long)n);
    if ((st = gpu_check_view(ctx, "x", x, n)) != VKT_OK ||
        (st = gpu_check_view(ctx, "out", out, nout)) != VKT_OK)
        return st;

    struct push_reduce push = {
        .op = (uint32_t)op, .outer = (uint32_t)outer, .axis = (uint32_t)len,
        .inner = (uint32_t)inner, .x_off = ku_shift(ctx, x, 0), .y_off = ku_shift(ctx, out, 0),
    };
    gpu_arg args[2] = {ku_arg(x, 0, n, 0), ku_arg(out, 0, nout, 1)};
    ku_rows plan; /* a row per output */
    if ((st = ku_plan_rows(ctx, fn, nout, len, 1, &plan)) != VKT_OK)
        return st;
    uint32_t spec[SPEC_REDUCE_COUNT] = {[SPEC_WG] = plan.wg, [SPEC_REDUCE_OP] = (uint32_t)op,
                                        [SPEC_REDUCE_T] = plan.t};
    uint32_t groups[3] = {plan.groups, 1, 1};
    return gpu_dispatch(stream, &k_reduce, spec, SPEC_REDUCE_COUNT, args, &push, groups);
}
