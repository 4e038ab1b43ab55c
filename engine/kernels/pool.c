/* pool.c - dispatch of 2-D max and average pooling (conv.h): shaders/pool.comp (forward:
 * y, and for max the winner's position per output) and shaders/pool_backward.comp (dx
 * gathered over the windows that contain each input element). One dispatch per call
 * unless a tensor is wider than one storage binding may be; then per chunk of planes. */
#include "kernels/conv.h"

#include <stdio.h>

#include "kernels/kernel_util.h"
#include "push_conv.h"
#include "spec.h"
#include "pool.spv.h"
#include "pool_backward.spv.h"

/* x and dy are read through R32F storage texel buffers (a vector gather on lavapipe), the
 * outputs written through storage buffers. `saved` (uint32) is read through a storage
 * buffer on GPUs, whose texel reads might flush the denormal patterns small positions
 * are, and through an R32F texel view on CPU devices (plain loads there). */
#define S GPU_BIND_STORAGE
#define SR GPU_BIND_STORAGE_TEXEL_R
static const gpu_kernel k_pool = {"pool", spv_pool, sizeof spv_pool, 3, {SR, S, S},
                                  sizeof(struct push_pool), SPEC_POOL_COUNT};
/* The backward binds `saved` twice: as a storage buffer and as an R32F texel view. */
static const gpu_kernel k_pool_backward = {
    "pool_backward", spv_pool_backward, sizeof spv_pool_backward, 4, {S, SR, S, SR},
    sizeof(struct push_pool), SPEC_POOL_BACKWARD_COUNT};

vkt_status kc_pool_init(kc_pool *p, char *msg, size_t msg_size)
{
    if (!p)
        return ku_fail_to(msg, msg_size, VKT_ERROR_INVALID_ARGUMENT, "kc_pool_init: p is NULL");
    const char *names[] = {"n", "c", "h", "w", "kh", "kw", "stride_h", "stride_w"};
    const uint32_t vals[] = {p->n, p->c, p->h, p->w, p->kh, p->kw, p->stride_h, p->stride_w};
    for (unsigned i = 0; i < sizeof vals / sizeof vals[0]; i++)
        if (vals[i] == 0)
            return ku_fail_to(msg, msg_size, VKT_ERROR_INVALID_ARGUMENT,
                             "kc_pool_init: %s is 0; it must be at least 1", names[i]);
    /* pad <= k / 2 keeps a real input in every window (max pooling always has a winner) */
    if (p->pad_h > p->kh / 2 || p->pad_w > p->kw / 2)
        return ku_fail_to(msg, msg_size, VKT_ERROR_INVALID_ARGUMENT,
                         "kc_pool_init: padding %u x %u is more than half the window %u x %u "
                         "(pad_h <= kh / 2 and pad_w <= kw / 2 are required)", p->pad_h,
                         p->pad_w, p->kh, p->kw);
    if ((uint64_t)p->h + 2ull * p->pad_h >= (1ull << 31) ||
        (uint64_t)p->w + 2ull * p->pad_w >= (1ull << 31))
        return ku_fail_to(msg, msg_size, VKT_ERROR_INVALID_ARGUMENT,
                         "kc_pool_init: h %u x w %u are too large (below 2^31 required)", p->h,
                         p->w);
    if ((uint64_t)p->h + 2ull * p->pad_h < p->kh || (uint64_t)p->w + 2ull * p->pad_w < p->kw)
        return ku_fail_to(msg, msg_size, VKT_ERROR_SHAPE,
                         "kc_pool_init: the window %u x %u is larger than the padded input "
                         "%llu x %llu (h %u + 2 pad_h %u, w %u + 2 pad_w %u)", p->kh, p->kw,
                         (unsigned long long)p->h + 2ull * p->pad_h,
                         (unsigned long long)p->w + 2ull * p->pad_w, p->h, p->pad_h, p->w,
                         p->pad_w);
    p->oh = (p->h + 2 * p->pad_h - p->kh) / p->stride_h + 1;
    p->ow = (p->w + 2 * p->pad_w - p->kw) / p->stride_w + 1;
    return VKT_OK;
}

uint64_t kc_pool_saved_elems(const kc_pool *p)
{
    return p && p->max ? (uint64_t)p->n * p->c * p->oh * p->ow : 0;
}

/* Stream and geometry present, geometry as kc_pool_init leaves it, the views inside
 * their buffers: x-sized (x, or dx for the backward), y-sized (y or dy), saved (max). */
static vkt_status check(vkt_stream *s, const char *fn, const kc_pool *p, vkt_view xs,
                        vkt_view ys, const vkt_view *saved, int back)
{
    if (!s)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "%s: stream is NULL", fn);
    vkt_context *ctx = s->ctx;
    if (!p)
        return err_fail(ctx->errmsg, VKT_ERROR_INVALID_ARGUMENT, "%s: p is NULL", fn);
    if (!ctx->storage_texel) /* mandatory in Vulkan */
        return err_fail(ctx->errmsg, VKT_ERROR_LIMIT,
                        "%s: the device lacks R32F storage texel buffers", fn);
    kc_pool copy = *p;
    char msg[VKT_ERRMSG_SIZE];
    vkt_status st = kc_pool_init(&copy, msg, sizeof msg);
    if (st != VKT_OK)
        return err_fail(ctx->errmsg, st, "%s: %s", fn, msg);
    if (copy.oh != p->oh || copy.ow != p->ow)
        return err_fail(ctx->errmsg, VKT_ERROR_INVALID_ARGUMENT,
                        "%s: p->oh, p->ow (%u, %u) do not match the geometry (%u, %u); set "
                        "them with kc_pool_init", fn, p->oh, p->ow, copy.oh, copy.ow);
    uint64_t planes = (uint64_t)p->n * p->c;
    uint64_t nx = planes * p->h * p->w, ny = planes * p->oh * p->ow;
    if (nx > UINT32_MAX)
        return err_fail(ctx->errmsg, VKT_ERROR_LIMIT,
                        "%s: x has %llu elements; at most 2^32 - 1 are supported", fn,
                        (unsigned long long)nx);
    if (p->max && !saved)
        return err_fail(ctx->errmsg, VKT_ERROR_INVALID_ARGUMENT,
                        "%s: max pooling needs `saved` (kc_pool_saved_elems elements)", fn);
    char what[64];
    snprintf(what, sizeof what, "%s: %s", fn, back ? "dx" : "x");
    if ((st = gpu_check_view(ctx, what, xs, nx)) != VKT_OK)
        return st;
    snprintf(what, sizeof what, "%s: %s", fn, back ? "dy" : "y");
    if ((st = gpu_check_view(ctx, what, ys, ny)) != VKT_OK)
        return st;
    snprintf(what, sizeof what, "%s: saved", fn);
    if (p->max && (st = gpu_check_view(ctx, what, *saved, ny)) != VKT_OK)
        return st;
    return VKT_OK;
}

/* The grid for `items` lanes of `inner` loop iterations each (grid-stride), within the
 * device's loop budget and the profile's grid_cap (32 in the CPU style: lavapipe spends
 * about 2 us on each workgroup besides its work, see conv.c, so few groups whose lanes
 * loop). */
static vkt_status grid(vkt_context *ctx, const char *fn, uint64_t items, uint64_t inner,
                       uint32_t wg, uint32_t groups[3])
{
    uint64_t g = ku_groups_1d(ctx, items, wg);
    if (g > ctx->profile.grid_cap)
        g = ctx->profile.grid_cap;
    uint64_t per_lane = ku_loop_budget(ctx) / 2 / (inner + 1);
    uint64_t need = per_lane ? (items + wg * per_lane - 1) / (wg * per_lane) : UINT64_MAX;
    if (need > GPU_MAX_GROUPS)
        return err_fail(ctx->errmsg, VKT_ERROR_LIMIT,
                        "%s: %llu work items of %llu loop iterations each are too many for "
                        "this device (its shader loops stop after %llu iterations)", fn,
                        (unsigned long long)items, (unsigned long long)inner,
                        (unsigned long long)ku_loop_budget(ctx));
    groups[0] = (uint32_t)(g > need ? g : need);
    groups[1] = groups[2] = 1;
    return VKT_OK;
}

/* Records the kernel over the planes in chunks that keep every binding within the
 * device's limits. xs: x (forward, read) or dx (backward, written); ys: y (forward,
 * written) or dy (backward, read). One lane per `run` runs of 4 outputs (y forward, dx
 * backward). */
static vkt_status run(vkt_stream *s, const char *fn, const kc_pool *p, vkt_view xs,
                      vkt_view ys, const vkt_view *saved, float beta, int back)
{
    vkt_context *ctx = s->ctx;
    uint64_t planes = (uint64_t)p->n * p->c, in = (uint64_t)p->h * p->w;
    uint64_t out = (uint64_t)p->oh * p->ow, wide = in > out ? in : out;
    uint64_t limit = ku_chunk_elements(ctx);
    if (limit > ctx->props.limits.maxTexelBufferElements)
        limit = ctx->props.limits.maxTexelBufferElements;
    if (wide > limit)
        return err_fail(ctx->errmsg, VKT_ERROR_LIMIT,
                        "%s: one plane of %llu elements is more than one binding may hold "
                        "(%llu)", fn, (unsigned long long)wide, (unsigned long long)limit);
    uint64_t per = limit / wide;
    uint32_t wg = ku_workgroup_size(ctx), run = ctx->profile.pool_run;
    int saved_texel = p->max && ctx->kv[GPU_FAMILY_POOL] == GPU_V_POOL_TEXEL;
    uint64_t taps = (uint64_t)p->kh * (p->kw + 1) * 4 * run + run;
    for (uint64_t p0 = 0; p0 < planes; p0 += per) {
        uint64_t pc = planes - p0 < per ? planes - p0 : per;
        vkt_view x = {xs.buffer, xs.offset + p0 * in}, y = {ys.buffer, ys.offset + p0 * out};
        /* Average pooling has no `saved`: its bindings alias y (never touched then). */
        vkt_view sv = p->max ? (vkt_view){saved->buffer, saved->offset + p0 * out} : y;
        uint64_t nx = pc * in, ny = pc * out, n = back ? nx : ny, quads = (n + 3) / 4;
        struct push_pool push = {
            .planes = (uint32_t)pc, .h = p->h, .w = p->w, .oh = p->oh, .ow = p->ow,
            .ph = p->pad_h, .pw = p->pad_w, .scale = (float)(1.0 / ((double)p->kh * p->kw)),
            .beta = beta, .x_off = gpu_arg_shift(ctx, x.offset * 4, back ? S : SR),
            .y_off = gpu_arg_shift(ctx, y.offset * 4, back ? SR : S),
            .s_off = ku_shift(ctx, sv, 0), .st_off = gpu_arg_shift(ctx, sv.offset * 4, SR),
            .run = run};
        uint32_t groups[3];
        vkt_status st = grid(ctx, fn, (quads + run - 1) / run, taps, wg, groups);
        if (st != VKT_OK)
            return st;
        gpu_arg args[4] = {ku_arg(x, 0, nx, back), ku_arg(y, 0, ny, !back),
                           ku_arg(sv, 0, ny, !back && p->max), ku_arg(sv, 0, ny, 0)};
        int vec_main = n % 4 == 0 && ku_vec4_aligned(ctx, back ? x : y);
        int vec_saved = n % 4 == 0 && ku_vec4_aligned(ctx, sv);
        /* pool.comp and pool_backward.comp share constants 0-5 (the window), then differ */
        _Static_assert(SPEC_POOL_COUNT == SPEC_POOL_BACKWARD_COUNT, "pool constants");
        uint32_t spec[SPEC_POOL_COUNT] = {
            [SPEC_WG] = wg, [SPEC_POOL_KH] = p->kh, [SPEC_POOL_KW] = p->kw,
            [SPEC_POOL_SH] = p->stride_h, [SPEC_POOL_SW] = p->stride_w,
            [SPEC_POOL_MAX] = (uint32_t)(p->max != 0)};
        if (back) {
            spec[SPEC_POOL_BACKWARD_VEC4] = (uint32_t)vec_main;
            spec[SPEC_POOL_BACKWARD_SAVED_TEXEL] = (uint32_t)saved_texel;
        } else {
            spec[SPEC_POOL_VEC_Y] = (uint32_t)vec_main;
            spec[SPEC_POOL_VEC_S] = (uint32_t)vec_saved;
        }
        st = gpu_dispatch(s, back ? &k_pool_backward : &k_pool, spec, SPEC_POOL_COUNT, args,
                          &push, groups);
        if (st != VKT_OK)
            return st;
    }
    return VKT_OK;
}

vkt_status kc_pool2d(vkt_stream *s, const kc_pool *p, vkt_view x, vkt_view y,
                     const vkt_view *saved)
{
    vkt_status st = check(s, "kc_pool2d", p, x, y, saved, 0);
    if (st != VKT_OK)
        return st;
    return run(s, "kc_pool2d", p, x, y, saved, 0.0f, 0);
}

vkt_status kc_pool2d_backward(vkt_stream *s, const kc_pool *p, const vkt_view *saved,
                              vkt_view dy, vkt_view dx, float beta)
{
    vkt_status st = check(s, "kc_pool2d_backward", p, dx, dy, saved, 1);
    if (st != VKT_OK)
        return st;
    return run(s, "kc_pool2d_backward", p, dx, dy, saved, beta, 1);
}
