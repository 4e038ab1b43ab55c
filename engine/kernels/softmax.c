/* softmax.c - dispatch of row softmax / log-softmax and their backward
 * (shaders/softmax.comp, shaders/softmax_backward.comp). */
#include "gpu/gpu.h"
#include "kernels/kernel_util.h"
#include "push.h"
#include "spec.h"
#include "softmax.spv.h"
#include "softmax_backward.spv.h"

static const gpu_kernel k_softmax = {
    "softmax", spv_softmax, sizeof spv_softmax, 2,
    {GPU_BIND_STORAGE, GPU_BIND_STORAGE}, sizeof(struct push_softmax), SPEC_SOFTMAX_COUNT};
static const gpu_kernel k_softmax_backward = {
    "softmax_backward", spv_softmax_backward, sizeof spv_softmax_backward, 3,
    {GPU_BIND_STORAGE, GPU_BIND_STORAGE, GPU_BIND_STORAGE},
    sizeof(struct push_softmax), SPEC_SOFTMAX_COUNT};

static vkt_status check(vkt_stream *s, const char *fn, uint32_t rows, uint32_t cols)
{
    if (!s)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "%s: stream is NULL", fn);
    if (rows == 0 || cols == 0)
        return err_fail(s->ctx->errmsg, VKT_ERROR_INVALID_ARGUMENT,
                        "%s: rows (%u) and cols (%u) must be at least 1", fn, rows, cols);
    if ((uint64_t)rows * cols > UINT32_MAX)
        return err_fail(s->ctx->errmsg, VKT_ERROR_LIMIT,
                        "%s: %u x %u elements; at most 2^32 - 1 are supported", fn, rows, cols);
    return VKT_OK;
}

/* The grid: T threads per row (two passes over it), wg / T rows per workgroup. */
static vkt_status grid(vkt_context *ctx, const char *fn, uint32_t rows, uint32_t cols,
                       uint32_t spec[SPEC_SOFTMAX_COUNT], uint32_t groups[3])
{
    ku_rows plan;
    vkt_status st = ku_plan_rows(ctx, fn, rows, cols, 2, &plan);
    spec[SPEC_WG] = plan.wg;
    spec[SPEC_SOFTMAX_T] = plan.t;
    groups[0] = plan.groups;
    groups[1] = groups[2] = 1;
    return st;
}

vkt_status vkt_softmax_rows(vkt_stream *stream, int log, vkt_view x, vkt_view y, uint32_t rows,
                       uint32_t cols)
{
    vkt_status st = check(stream, "vkt_softmax_rows", rows, cols);
    if (st != VKT_OK)
        return st;
    vkt_context *ctx = stream->ctx;
    uint64_t n = (uint64_t)rows * cols;
    if ((st = gpu_check_view(ctx, "x", x, n)) != VKT_OK ||
        (st = gpu_check_view(ctx, "y", y, n)) != VKT_OK)
        return st;
    struct push_softmax push = {
        .rows = rows, .cols = cols, .log = log != 0,
        .x_off = ku_shift(ctx, x, 0), .y_off = ku_shift(ctx, y, 0),
    };
    gpu_arg args[2] = {ku_arg(x, 0, n, 0), ku_arg(y, 0, n, 1)};
    uint32_t spec[SPEC_SOFTMAX_COUNT], groups[3];
    if ((st = grid(ctx, "vkt_softmax_rows", rows, cols, spec, groups)) != VKT_OK)
        return st;
    return gpu_dispatch(stream, &k_softmax, spec, SPEC_SOFTMAX_COUNT, args, &push, groups);
}

vkt_status vkt_softmax_rows_backward(vkt_stream *stream, int log, vkt_view y, vkt_view dy,
                                vkt_view dx, uint32_t rows, uint32_t cols)
{
    vkt_status st = check(stream, "vkt_softmax_rows_backward", rows, cols);
    if (st != VKT_OK)
        return st;
    vkt_context *ctx = stream->ctx;
    uint64_t n = (uint64_t)rows * cols;
    if ((st = gpu_check_view(ctx, "y", y, n)) != VKT_OK ||
        (st = gpu_check_view(ctx, "dy", dy, n)) != VKT_OK ||
        (st = gpu_check_view(ctx, "dx", dx, n)) != VKT_OK)
        return st;
    struct push_softmax push = {
        .rows = rows, .cols = cols, .log = log != 0, .y_off = ku_shift(ctx, y, 0),
        .dy_off = ku_shift(ctx, dy, 0), .dx_off = ku_shift(ctx, dx, 0),
    };
    gpu_arg args[3] = {ku_arg(y, 0, n, 0), ku_arg(dy, 0, n, 0), ku_arg(dx, 0, n, 1)};
    uint32_t spec[SPEC_SOFTMAX_COUNT], groups[3];
    if ((st = grid(ctx, "vkt_softmax_rows_backward", rows, cols, spec, groups)) != VKT_OK)
        return st;
    return gpu_dispatch(stream, &k_softmax_backward, spec, SPEC_SOFTMAX_COUNT, args, &push, groups);
}
