/* fill.c - dispatch of fill and copy (shaders/fill.comp, shaders/copy.comp). Both split
 * long ranges into one dispatch per binding-sized chunk. */
#include "gpu/gpu.h"
#include "kernels/kernel_util.h"
#include "push.h"
#include "spec.h"
#include "copy.spv.h"
#include "fill.spv.h"

static const gpu_kernel k_fill = {
    "fill", spv_fill, sizeof spv_fill, 1, {GPU_BIND_STORAGE},
    sizeof(struct push_fill), SPEC_WG_ONLY_COUNT};
static const gpu_kernel k_copy = {
    "copy", spv_copy, sizeof spv_copy, 2, {GPU_BIND_STORAGE, GPU_BIND_STORAGE},
    sizeof(struct push_fill), SPEC_WG_ONLY_COUNT};

/* x may be NULL (fill). */
static vkt_status run(vkt_stream *s, const gpu_kernel *k, const vkt_view *x, vkt_view y,
                      uint64_t n, float value)
{
    vkt_context *ctx = s->ctx;
    uint32_t wg = ku_workgroup_size(ctx), spec[SPEC_WG_ONLY_COUNT] = {[SPEC_WG] = wg};
    uint64_t chunk = ku_chunk_elements(ctx);
    for (uint64_t first = 0; first < n; first += chunk) {
        uint64_t count = n - first < chunk ? n - first : chunk;
        vkt_view views[2] = {y, x ? *x : y};
        uint32_t head, nvec = ku_vec4_split(ctx, views, 2, first, count, &head);
        struct push_fill push = {
            .n = (uint32_t)count,
            .head = head,
            .nvec = nvec,
            .value = value,
            .x_off = x ? ku_shift(ctx, *x, first) : 0,
            .y_off = ku_shift(ctx, y, first),
        };
        gpu_arg args[2];
        uint32_t na = 0;
        if (x)
            args[na++] = ku_arg(*x, first, count, 0);
        args[na++] = ku_arg(y, first, count, 1);
        uint32_t groups[3] = {ku_groups_1d(ctx, nvec ? nvec : count, wg), 1, 1};
        vkt_status st = gpu_dispatch(s, k, spec, SPEC_WG_ONLY_COUNT, args, &push, groups);
        if (st != VKT_OK)
            return st;
    }
    return VKT_OK;
}

vkt_status vkt_fill(vkt_stream *stream, vkt_view y, uint64_t n, float value)
{
    if (!stream)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "vkt_fill: stream is NULL");
    vkt_context *ctx = stream->ctx;
    if (n == 0)
        return err_fail(ctx->errmsg, VKT_ERROR_INVALID_ARGUMENT, "vkt_fill: n is 0");
    vkt_status st = gpu_check_view(ctx, "y", y, n);
    if (st != VKT_OK)
        return st;
    return run(stream, &k_fill, NULL, y, n, value);
}

vkt_status vkt_copy(vkt_stream *stream, vkt_view x, vkt_view y, uint64_t n)
{
    if (!stream)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "vkt_copy: stream is NULL");
    vkt_context *ctx = stream->ctx;
    if (n == 0)
        return err_fail(ctx->errmsg, VKT_ERROR_INVALID_ARGUMENT, "vkt_copy: n is 0");
    vkt_status st = gpu_check_view(ctx, "x", x, n);
    if (st == VKT_OK)
        st = gpu_check_view(ctx, "y", y, n);
    if (st != VKT_OK)
        return st;
    if (x.buffer == y.buffer && x.offset == y.offset)
        return VKT_OK; /* a copy onto itself changes nothing */
    if (x.buffer == y.buffer && x.offset < y.offset + n && y.offset < x.offset + n)
        return err_fail(ctx->errmsg, VKT_ERROR_INVALID_ARGUMENT,
                        "vkt_copy: the ranges overlap (x at element %llu, y at element %llu, "
                        "%llu elements)", (unsigned long long)x.offset,
                        (unsigned long long)y.offset, (unsigned long long)n);
    return run(stream, &k_copy, &x, y, n, 0.0f);
}
