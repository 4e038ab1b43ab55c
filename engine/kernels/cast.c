/* cast.c - dispatch of shaders/cast.comp (cast.h). */
#include "kernels/cast.h"
#include "kernels/kernel_util.h"
#include "dtype.h"
#include "push.h"
#include "spec.h"
#include "cast.spv.h"

static const gpu_kernel k_cast = {
    "cast", spv_cast, sizeof spv_cast, 2, {GPU_BIND_STORAGE, GPU_BIND_STORAGE},
    sizeof(struct push_cast), SPEC_WG_ONLY_COUNT};

static gpu_arg band_arg(vkt_view v, uint32_t size, uint64_t first, uint64_t count, int write)
{
    return (gpu_arg){v.buffer, (v.offset + first) * size, count * size, write};
}

vkt_status kcast_matrix(vkt_stream *s, vkt_dtype from, vkt_view x, uint32_t ldx, vkt_dtype to,
                        vkt_view y, uint32_t ldy, uint32_t rows, uint32_t cols)
{
    vkt_context *ctx = s->ctx;
    uint32_t xs = (uint32_t)vkt_dtype_size(from), ys = (uint32_t)vkt_dtype_size(to);
    uint32_t wg = ku_workgroup_size(ctx), spec[SPEC_WG_ONLY_COUNT] = {[SPEC_WG] = wg};
    /* bands of rows whose bindings stay within a binding's range on both sides */
    uint64_t limit = ku_chunk_elements(ctx) * 4; /* bytes */
    uint64_t row_bytes = (uint64_t)(ldx * xs > ldy * ys ? ldx * xs : ldy * ys);
    uint64_t band = row_bytes ? limit / row_bytes : rows;
    if (band == 0)
        return err_fail(ctx->errmsg, VKT_ERROR_LIMIT,
                        "cast: a row of %llu bytes is longer than a storage binding may be",
                        (unsigned long long)row_bytes);
    for (uint64_t r0 = 0; r0 < rows; r0 += band) {
        uint32_t n = (uint32_t)(rows - r0 < band ? rows - r0 : band);
        uint64_t xfirst = r0 * ldx, xcount = (uint64_t)(n - 1) * ldx + cols;
        uint64_t yfirst = r0 * ldy, ycount = (uint64_t)(n - 1) * ldy + cols;
        struct push_cast push = {
            .rows = n, .cols = cols, .ldx = ldx, .ldy = ldy,
            .x_off = gpu_arg_shift_bytes(ctx, (x.offset + xfirst) * xs, GPU_BIND_STORAGE) / xs,
            .y_off = gpu_arg_shift_bytes(ctx, (y.offset + yfirst) * ys, GPU_BIND_STORAGE) / ys,
            .from = (uint32_t)from, .to = (uint32_t)to};
        gpu_arg args[2] = {band_arg(x, xs, xfirst, xcount, 0), band_arg(y, ys, yfirst, ycount, 1)};
        uint32_t groups[3] = {ku_groups_1d(ctx, (uint64_t)n * cols, wg), 1, 1};
        vkt_status st = gpu_dispatch(s, &k_cast, spec, SPEC_WG_ONLY_COUNT, args, &push, groups);
        if (st != VKT_OK)
            return st;
    }
    return VKT_OK;
}
