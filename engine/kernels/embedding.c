/* embedding.c - dispatch of the embedding lookup and its backward (see norm.h;
 * shaders/embedding.comp, shaders/embedding_backward.comp). */
#include "kernels/norm.h"

#include <math.h>
#include <stdio.h>

#include "kernels/kernel_util.h"
#include "push_norm.h"
#include "spec.h"
#include "embedding.spv.h"
#include "embedding_backward.spv.h"

#define S GPU_BIND_STORAGE

static const gpu_kernel k_embedding = {
    "embedding", spv_embedding, sizeof spv_embedding, 3, {S, S, S},
    sizeof(struct push_embedding), SPEC_EMBEDDING_COUNT};
static const gpu_kernel k_embedding_backward = {
    "embedding_backward", spv_embedding_backward, sizeof spv_embedding_backward, 3,
    {S, S, S}, sizeof(struct push_embedding), SPEC_EMBEDDING_BACKWARD_COUNT};

/* Largest vocabulary whose ids floats hold exactly (every integer up to 2^24). */
#define MAX_VOCAB (1u << 24)

/* Stream present; sizes non-zero, vocab within float precision, element counts within
 * 32 bits; views inside their buffers; the output `out` (index 2 of v) overlapping
 * neither input. */
static vkt_status check(vkt_stream *s, const char *fn, uint32_t n, uint32_t vocab,
                        uint32_t dim, const vkt_view v[3], const uint64_t count[3],
                        const char *const names[3])
{
    if (!s)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "%s: stream is NULL", fn);
    vkt_context *ctx = s->ctx;
    if (n == 0 || vocab == 0 || dim == 0)
        return err_fail(ctx->errmsg, VKT_ERROR_INVALID_ARGUMENT,
                        "%s: n (%u), vocab (%u) and dim (%u) must be at least 1", fn, n, vocab,
                        dim);
    if (vocab > MAX_VOCAB)
        return err_fail(ctx->errmsg, VKT_ERROR_LIMIT,
                        "%s: vocab %u exceeds 2^24, the largest whose ids floats hold exactly",
                        fn, vocab);
    if ((uint64_t)n * dim > UINT32_MAX || (uint64_t)vocab * dim > UINT32_MAX)
        return err_fail(ctx->errmsg, VKT_ERROR_LIMIT,
                        "%s: [%u, %u] or [%u, %u] has more than 2^32 - 1 elements", fn, n, dim,
                        vocab, dim);
    for (int i = 0; i < 3; i++) {
        vkt_status st = gpu_check_view(ctx, names[i], v[i], count[i]);
        if (st != VKT_OK) {
            char why[VKT_ERRMSG_SIZE];
            snprintf(why, sizeof why, "%s", ctx->errmsg);
            return err_fail(ctx->errmsg, st, "%s: %s", fn, why);
        }
    }
    for (int i = 0; i < 2; i++)
        if (v[i].buffer == v[2].buffer && v[i].offset < v[2].offset + count[2] &&
            v[2].offset < v[i].offset + count[i])
            return err_fail(ctx->errmsg, VKT_ERROR_INVALID_ARGUMENT,
                            "%s: output %s overlaps %s", fn, names[2], names[i]);
    return VKT_OK;
}

vkt_status kn_embedding(vkt_stream *s, vkt_view ids, vkt_view table, vkt_view y, uint32_t n,
                        uint32_t vocab, uint32_t dim)
{
    static const char fn[] = "kn_embedding";
    vkt_view v[3] = {ids, table, y};
    uint64_t count[3] = {n, (uint64_t)vocab * dim, (uint64_t)n * dim};
    static const char *const names[3] = {"ids", "table", "y"};
    vkt_status st = check(s, fn, n, vocab, dim, v, count, names);
    if (st != VKT_OK)
        return st;
    vkt_context *ctx = s->ctx;
    int vec4 = dim % 4 == 0 && ku_vec4_aligned(ctx, table) && ku_vec4_aligned(ctx, y);
    struct push_embedding p = {
        .n = n, .vocab = vocab, .dim = dim, .count = n, .ids_off = ku_shift(ctx, ids, 0),
        .t_off = ku_shift(ctx, table, 0), .y_off = ku_shift(ctx, y, 0)};
    gpu_arg args[3];
    for (int i = 0; i < 3; i++)
        args[i] = ku_arg(v[i], 0, count[i], i == 2);
    uint32_t wg = ku_workgroup_size(ctx);
    uint32_t spec[SPEC_EMBEDDING_COUNT] = {[SPEC_WG] = wg, [SPEC_EMBEDDING_VEC4] = (uint32_t)vec4};
    uint32_t groups[3] = {ku_groups_1d(ctx, vec4 ? count[2] / 4 : count[2], wg), 1, 1};
    return gpu_dispatch(s, &k_embedding, spec, SPEC_EMBEDDING_COUNT, args, &p, groups);
}

/* Accumulators (vec4s of dtable's columns) per thread of the backward: on CPU devices up
 * to 16 (a row of up to 64 columns per thread), so that few threads scan the ids; on GPUs
 * 1, for more threads. */
static uint32_t accumulators(const vkt_context *ctx, uint32_t quads)
{
    uint32_t a = ctx->profile.embedding_accumulators;
    return a < quads ? a : quads;
}

/* Whether a view's binding starts 16-byte aligned, so that the shader may read it as
 * vec4s from the binding's start (the view itself may start anywhere). */
static int binding_aligned16(const vkt_context *ctx, vkt_view v)
{
    uint64_t bytes = v.offset * 4;
    return (bytes - 4ull * gpu_arg_shift(ctx, bytes, GPU_BIND_STORAGE)) % 16 == 0;
}

vkt_status kn_embedding_backward(vkt_stream *s, vkt_view ids, vkt_view dy, vkt_view dtable,
                                 float beta, uint32_t n, uint32_t vocab, uint32_t dim)
{
    static const char fn[] = "kn_embedding_backward";
    vkt_view v[3] = {ids, dy, dtable};
    uint64_t count[3] = {n, (uint64_t)n * dim, (uint64_t)vocab * dim};
    static const char *const names[3] = {"ids", "dy", "dtable"};
    vkt_status st = check(s, fn, n, vocab, dim, v, count, names);
    if (st != VKT_OK)
        return st;
    vkt_context *ctx = s->ctx;
    if (!isfinite(beta))
        return err_fail(ctx->errmsg, VKT_ERROR_INVALID_ARGUMENT, "%s: beta = %g must be finite",
                        fn, (double)beta);
    int vec4 = dim % 4 == 0 && ku_vec4_aligned(ctx, dy) && ku_vec4_aligned(ctx, dtable);
    uint32_t quads = (dim + 3) / 4, a = accumulators(ctx, quads);
    uint64_t threads = (uint64_t)vocab * ((quads + a - 1) / a);
    uint32_t wg = ku_workgroup_size(ctx);
    uint64_t g = (threads + wg - 1) / wg;
    if (g > GPU_MAX_GROUPS)
        g = GPU_MAX_GROUPS;
    uint64_t rounds = (threads + g * wg - 1) / (g * wg);
    /* Loop iterations of a thread per position: the scan's compare and, when the id
     * matches (every time, at worst), the outer loop (the adds are unrolled). */
    uint64_t per_pos = 2;
    uint64_t budget = ku_loop_budget(ctx) / 2;
    /* besides: A to zero the accumulators, up to 5 A to store them */
    if (rounds * (per_pos + 6 * (uint64_t)a) + 16 > budget)
        return err_fail(ctx->errmsg, VKT_ERROR_LIMIT,
                        "%s: [%u, %u] is too large for this device (its shader loops stop "
                        "after %llu iterations)", fn, vocab, dim,
                        (unsigned long long)ku_loop_budget(ctx));
    /* Positions per dispatch: all of them unless a thread would loop past the budget;
     * then consecutive slices, the later ones adding (beta 1), which keeps the order of
     * every sum fixed. */
    uint64_t slice = (budget - 16) / rounds - 6 * (uint64_t)a;
    slice /= per_pos;
    if (slice > n)
        slice = n;
    struct push_embedding p = {
        .n = n, .vocab = vocab, .dim = dim, .ids_off = ku_shift(ctx, ids, 0),
        .t_off = ku_shift(ctx, dtable, 0), .y_off = ku_shift(ctx, dy, 0)};
    gpu_arg args[3];
    for (int i = 0; i < 3; i++)
        args[i] = ku_arg(v[i], 0, count[i], i == 2);
    uint32_t spec[SPEC_EMBEDDING_BACKWARD_COUNT] = {
        [SPEC_WG] = wg, [SPEC_EMBEDDING_BACKWARD_A] = a,
        [SPEC_EMBEDDING_BACKWARD_VEC4] = (uint32_t)vec4,
        [SPEC_EMBEDDING_BACKWARD_IDS4] = (uint32_t)binding_aligned16(ctx, ids)};
    uint32_t groups[3] = {(uint32_t)g, 1, 1};
    for (uint64_t first = 0; first < n; first += slice) {
        p.first = (uint32_t)first;
        p.count = (uint32_t)(n - first < slice ? n - first : slice);
        p.beta = first == 0 ? beta : 1.0f;
        st = gpu_dispatch(s, &k_embedding_backward, spec, SPEC_EMBEDDING_BACKWARD_COUNT, args, &p,
                          groups);
        if (st != VKT_OK)
            return st;
    }
    return VKT_OK;
}
