/* kernel_util.c - grid sizing, range splitting and shape helpers for the kernels. */
#include "kernels/kernel_util.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

uint32_t ku_workgroup_size(const vkt_context *ctx)
{
    return ctx->profile.wg;
}

uint64_t ku_loop_budget(const vkt_context *ctx)
{
    return ctx->profile.loop_budget;
}

uint32_t ku_groups(uint64_t items, uint32_t per_group, uint32_t max_groups)
{
    uint64_t g = (items + per_group - 1) / per_group;
    if (g > max_groups)
        g = max_groups;
    return g ? (uint32_t)g : 1;
}

uint32_t ku_max_groups_1d(const vkt_context *ctx)
{
    /* A CPU device runs a few workgroups at once; more only adds per-group overhead. */
    return ctx->profile.max_groups_1d;
}

uint32_t ku_groups_1d(const vkt_context *ctx, uint64_t items, uint32_t wg)
{
    uint64_t g = ku_groups(items, wg, ku_max_groups_1d(ctx));
    uint64_t per_thread = ku_loop_budget(ctx) / 2;
    uint64_t min_g = (items + (uint64_t)wg * per_thread - 1) / ((uint64_t)wg * per_thread);
    if (g < min_g)
        g = min_g;
    if (g > GPU_MAX_GROUPS)
        g = GPU_MAX_GROUPS;
    return g ? (uint32_t)g : 1;
}

/* Loop iterations of one row block for a thread: the passes over its share of the row,
 * the tree steps and the block loop itself. */
static uint64_t row_iterations(uint64_t len, uint32_t t, uint32_t passes)
{
    uint64_t it = (uint64_t)passes * ((len + t - 1) / t) + 1;
    for (uint32_t k = t; k > 1; k /= 2)
        it++;
    return it;
}

vkt_status ku_plan_rows(vkt_context *ctx, const char *fn, uint64_t rows, uint64_t len,
                        uint32_t passes, ku_rows *out)
{
    uint32_t wg = ku_workgroup_size(ctx);
    uint32_t max_wg = ctx->info.max_workgroup_invocations;
    if (max_wg == 0 || max_wg > 1024)
        max_wg = 1024;
    uint32_t t = 1;
    if (ctx->kv[GPU_FAMILY_ROWS] == GPU_V_ROWS_SPREAD) {
        /* Threads worth keeping busy at once; beyond that, more threads per row only
         * add tree steps. Each thread gets 8 elements of its row at least. */
        uint64_t each = rows * len / ctx->profile.busy_threads;
        uint64_t want = len / (each < 8 ? 8 : each);
        while (t * 2 <= wg && t * 2 <= want)
            t *= 2;
    } else {
        /* A CPU device runs a workgroup as SIMD loops on one core, where threads sharing
         * a row only add gathers and barriers: one thread per row measured fastest on
         * lavapipe ([4096,1024] column sums: 16 ms with 1 thread per output, 24 ms with
         * 2). Long rows still get several, none walking more than row_walk (16K)
         * elements. */
        while (t < wg && row_iterations(len, t, passes) > ctx->profile.row_walk)
            t *= 2;
    }
    /* Within the loop budget: half of it for one block, so a thread can take several. */
    uint64_t budget = ku_loop_budget(ctx);
    while (row_iterations(len, t, passes) > budget / 2 && t < max_wg)
        t *= 2;
    if (row_iterations(len, t, passes) > budget / 2)
        return err_fail(ctx->errmsg, VKT_ERROR_LIMIT,
                        "%s: rows of %llu elements are too long for this device (its shader "
                        "loops stop after %llu iterations)", fn, (unsigned long long)len,
                        (unsigned long long)budget);
    if (wg < t)
        wg = t;
    uint64_t per_group = wg / t, blocks = (rows + per_group - 1) / per_group;
    uint64_t groups = blocks < GPU_MAX_GROUPS ? blocks : GPU_MAX_GROUPS;
    uint64_t rounds = (blocks + groups - 1) / groups;
    if (rounds * row_iterations(len, t, passes) > budget)
        return err_fail(ctx->errmsg, VKT_ERROR_LIMIT,
                        "%s: %llu rows of %llu elements are too many for this device (its "
                        "shader loops stop after %llu iterations)", fn,
                        (unsigned long long)rows, (unsigned long long)len,
                        (unsigned long long)budget);
    out->wg = wg;
    out->t = t;
    out->groups = (uint32_t)(groups ? groups : 1);
    return VKT_OK;
}

uint64_t ku_chunk_elements(const vkt_context *ctx)
{
    uint64_t range = ctx->info.max_storage_buffer_range;
    uint64_t align = ctx->props.limits.minStorageBufferOffsetAlignment;
    uint64_t n = range > align ? (range - align) / 4 : 1;
    if (n > (1ull << 30)) /* keeps i + stride inside 32 bits in the shaders */
        n = 1ull << 30;
    return n;
}

uint32_t ku_vec4_split(const vkt_context *ctx, const vkt_view *views, uint32_t n_views,
                       uint64_t first, uint64_t count, uint32_t *head)
{
    *head = 0;
    uint32_t phase = 0;
    for (uint32_t i = 0; i < n_views; i++) {
        uint64_t bytes = (views[i].offset + first) * 4;
        uint32_t shift = gpu_arg_shift(ctx, bytes, GPU_BIND_STORAGE);
        if ((bytes - 4ull * shift) % 16 != 0)
            return 0; /* the descriptor start is not 16-byte aligned */
        if (i && shift % 4 != phase)
            return 0;
        phase = shift % 4;
    }
    uint32_t h = (4 - phase) % 4;
    if (count < h + 16) /* too short to bother */
        return 0;
    *head = h;
    return (uint32_t)((count - h) / 4);
}

int ku_vec4_aligned(const vkt_context *ctx, vkt_view v)
{
    uint32_t head;
    return ku_vec4_split(ctx, &v, 1, 0, 16, &head) > 0 && head == 0;
}

gpu_arg ku_arg(vkt_view v, uint64_t first, uint64_t count, int write)
{
    gpu_arg a = {v.buffer, (v.offset + first) * 4, count * 4, write};
    return a;
}

uint32_t ku_shift(const vkt_context *ctx, vkt_view v, uint64_t first)
{
    return gpu_arg_shift(ctx, (v.offset + first) * 4, GPU_BIND_STORAGE);
}

gpu_arg ku_arg16(vkt_view v, uint64_t count, int write)
{
    uint64_t first = v.offset * 2 / 4 * 4, end = (v.offset + count) * 2;
    gpu_arg a = {v.buffer, first, (end + 3) / 4 * 4 - first, write};
    return a;
}

uint32_t ku_shift16(const vkt_context *ctx, vkt_view v)
{
    return gpu_arg_shift_bytes(ctx, v.offset * 2 / 4 * 4, GPU_BIND_STORAGE) / 2 +
           (uint32_t)(v.offset % 2);
}

vkt_status ku_check_shape(char *errmsg, const char *fn, const char *what, const vkt_shape *s)
{
    if (!s)
        return err_fail(errmsg, VKT_ERROR_INVALID_ARGUMENT, "%s: %s is NULL", fn, what);
    if (s->ndim > VKT_MAX_DIMS)
        return err_fail(errmsg, VKT_ERROR_INVALID_ARGUMENT,
                        "%s: %s has %u dimensions; at most %d are supported", fn, what,
                        s->ndim, VKT_MAX_DIMS);
    for (uint32_t i = 0; i < s->ndim; i++)
        if (s->dims[i] == 0) {
            char buf[KU_SHAPE_STR];
            return err_fail(errmsg, VKT_ERROR_INVALID_ARGUMENT,
                            "%s: %s %s has a dimension of size 0", fn, what,
                            ku_shape_str(s, buf));
        }
    return VKT_OK;
}

uint64_t ku_shape_count(const vkt_shape *s)
{
    uint64_t n = 1;
    for (uint32_t i = 0; i < s->ndim && i < VKT_MAX_DIMS; i++)
        n *= s->dims[i];
    return n;
}

const char *ku_shape_str(const vkt_shape *s, char buf[KU_SHAPE_STR])
{
    int len = snprintf(buf, KU_SHAPE_STR, "[");
    uint32_t nd = s->ndim <= VKT_MAX_DIMS ? s->ndim : VKT_MAX_DIMS;
    for (uint32_t i = 0; i < nd && len > 0 && len < KU_SHAPE_STR; i++)
        len += snprintf(buf + len, KU_SHAPE_STR - (size_t)len, i ? ",%u" : "%u", s->dims[i]);
    if (len > 0 && len < KU_SHAPE_STR - 1)
        snprintf(buf + len, KU_SHAPE_STR - (size_t)len, "]");
    return buf;
}

vkt_status ku_fail_to(char *msg, size_t msg_size, vkt_status st, const char *fmt, ...)
{
    char buf[VKT_ERRMSG_SIZE];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (msg && msg_size)
        snprintf(msg, msg_size, "%s", buf);
    return err_fail(NULL, st, "%s", buf);
}

/* A view of 16-bit elements inside its buffer (gpu_check_view's for 4 bytes). */
vkt_status ku_check_view16(vkt_context *ctx, const char *what, vkt_view v, uint64_t count)
{
    if (!v.buffer)
        return err_fail(ctx->errmsg, VKT_ERROR_INVALID_ARGUMENT, "%s: buffer is NULL", what);
    if (v.buffer->ctx != ctx)
        return err_fail(ctx->errmsg, VKT_ERROR_INVALID_ARGUMENT,
                        "%s: the buffer belongs to another context", what);
    uint64_t elems = v.buffer->size / 2;
    if (v.offset > elems || count > elems - v.offset)
        return err_fail(ctx->errmsg, VKT_ERROR_INVALID_ARGUMENT,
                        "%s: 2-byte elements [%llu, %llu) lie outside its buffer of %llu such "
                        "elements", what, (unsigned long long)v.offset,
                        (unsigned long long)(v.offset + count), (unsigned long long)elems);
    return VKT_OK;
}
