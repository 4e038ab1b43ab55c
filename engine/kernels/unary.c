/* unary.c - dispatch of the unary elementwise ops and their derivatives
 * (shaders/unary.comp, shaders/unary_backward.comp). */
#include "gpu/gpu.h"
#include "kernels/kernel_util.h"
#include "activation.h"
#include "push.h"
#include "spec.h"
#include "unary.spv.h"
#include "unary_backward.spv.h"

static const gpu_kernel k_unary = {
    "unary", spv_unary, sizeof spv_unary, 2,
    {GPU_BIND_STORAGE, GPU_BIND_STORAGE}, sizeof(struct push_unary), SPEC_UNARY_COUNT};
static const gpu_kernel k_unary_backward = {
    "unary_backward", spv_unary_backward, sizeof spv_unary_backward, 3,
    {GPU_BIND_STORAGE, GPU_BIND_STORAGE, GPU_BIND_STORAGE},
    sizeof(struct push_unary), SPEC_UNARY_COUNT};

/* The names of shaders/activation.h's list, by value. */
#define NAME_OF(NAME, value, name, fn, fuses, dfy) [value] = #name,
static const char *const k_names[VKT_UNARY_COUNT] = {ACT_LIST(NAME_OF)};
#undef NAME_OF

const char *vkt_unary_op_name(vkt_unary_op op)
{
    return (unsigned)op < VKT_UNARY_COUNT ? k_names[op] : "unknown";
}

/* Checks shared by forward and backward; dy may be NULL (forward). */
static vkt_status check(vkt_stream *s, const char *fn, vkt_unary_op op, vkt_view x,
                        const vkt_view *dy, vkt_view out, const char *out_name, uint64_t n)
{
    if (!s)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "%s: stream is NULL", fn);
    vkt_context *ctx = s->ctx;
    if ((unsigned)op >= VKT_UNARY_COUNT)
        return err_fail(ctx->errmsg, VKT_ERROR_INVALID_ARGUMENT, "%s: unknown op %d", fn,
                        (int)op);
    if (n == 0)
        return err_fail(ctx->errmsg, VKT_ERROR_INVALID_ARGUMENT, "%s: n is 0", fn);
    vkt_status st = gpu_check_view(ctx, "x", x, n);
    if (st == VKT_OK && dy)
        st = gpu_check_view(ctx, "dy", *dy, n);
    if (st == VKT_OK)
        st = gpu_check_view(ctx, out_name, out, n);
    return st;
}

/* One dispatch per chunk of at most ku_chunk_elements, so any n fits the bindings. */
static vkt_status run(vkt_stream *s, const gpu_kernel *k, vkt_unary_op op, float alpha,
                      vkt_view x, const vkt_view *dy, vkt_view out, uint64_t n)
{
    vkt_context *ctx = s->ctx;
    uint32_t wg = ku_workgroup_size(ctx);
    uint32_t spec[SPEC_UNARY_COUNT] = {[SPEC_WG] = wg, [SPEC_UNARY_OP] = (uint32_t)op};
    uint64_t chunk = ku_chunk_elements(ctx);
    for (uint64_t first = 0; first < n; first += chunk) {
        uint64_t count = n - first < chunk ? n - first : chunk;
        vkt_view views[3] = {x, out, dy ? *dy : x};
        uint32_t head, nvec = ku_vec4_split(ctx, views, 3, first, count, &head);
        struct push_unary push = {
            .n = (uint32_t)count,
            .head = head,
            .nvec = nvec,
            .op = (uint32_t)op,
            .alpha = alpha,
            .x_off = ku_shift(ctx, x, first),
            .y_off = ku_shift(ctx, out, first),
            .dy_off = dy ? ku_shift(ctx, *dy, first) : 0,
        };
        gpu_arg args[3];
        uint32_t na = 0;
        args[na++] = ku_arg(x, first, count, 0);
        if (dy)
            args[na++] = ku_arg(*dy, first, count, 0);
        args[na++] = ku_arg(out, first, count, 1);
        uint32_t groups[3] = {ku_groups_1d(ctx, nvec ? nvec : count, wg), 1, 1};
        vkt_status st = gpu_dispatch(s, k, spec, SPEC_UNARY_COUNT, args, &push, groups);
        if (st != VKT_OK)
            return st;
    }
    return VKT_OK;
}

vkt_status vkt_unary(vkt_stream *stream, vkt_unary_op op, float alpha, vkt_view x,
                     vkt_view y, uint64_t n)
{
    vkt_status st = check(stream, "vkt_unary", op, x, NULL, y, "y", n);
    if (st != VKT_OK)
        return st;
    return run(stream, &k_unary, op, alpha, x, NULL, y, n);
}

vkt_status vkt_unary_backward(vkt_stream *stream, vkt_unary_op op, float alpha, vkt_view x,
                              vkt_view dy, vkt_view dx, uint64_t n)
{
    vkt_status st = check(stream, "vkt_unary_backward", op, x, &dy, dx, "dx", n);
    if (st != VKT_OK)
        return st;
    return run(stream, &k_unary_backward, op, alpha, x, &dy, dx, n);
}
