/* gemm.c - dispatch of C = alpha * op(A) * op(B) + beta * C, by the context's GEMM
 * variant (engine/gpu/variants.c) and the plan of gemm_plan.c: gemm_texel and
 * gemm_sampler run shaders/gemm_cpu.glsl, for CPU-type devices (texel-buffer reads,
 * subgroup shuffles, a 16x32 register tile per subgroup); gemm_tile runs
 * shaders/gemm_tile.comp (register-blocked tiles from double-buffered shared memory, vec4
 * loads, split-K summed by shaders/gemm_reduce.comp); gemm_shared runs
 * shaders/gemm_gpu.comp (shared-memory tiles, a register block per thread). All take
 * either operand transposed and any leading dimensions. bench/gemm_notes.md has the
 * measurements behind the CPU designs. */
#include "gpu/gpu.h"
#include "kernels/gemm.h"
#include "kernels/gemm_lowp.h"
#include "kernels/kernel_util.h"
#include "push.h"
#include "spec.h"
#include "gemm_cpu.spv.h"
#include "gemm_cpu_sampler.spv.h"
#include "gemm_gpu.spv.h"
#include "gemm_reduce.spv.h"
#include "gemm_tile.spv.h"

#include <stdio.h>
#include <string.h>

/* gemm_cpu.comp reads A, B and (when beta != 0) C through storage texel buffers: R32F
 * views, or RGBA32F views (4 floats per read) where the operand is 16-byte aligned. It
 * writes C through a storage buffer (binding 2) and reads it through binding 3. One
 * kernel per combination of view kinds, all with the same SPIR-V. Index: 4 vec4(A) +
 * 2 vec4(B) + vec4(C). gemm_cpu_sampler.comp, for devices without storage texel buffers
 * of these formats, reads A and B as uniform texel buffers and C through its storage
 * buffer. Index: 2 vec4(A) + vec4(B). */
#define SR GPU_BIND_STORAGE_TEXEL_R
#define S4 GPU_BIND_STORAGE_TEXEL_RGBA
#define GEMM_CPU_KERNEL(ta, tb, tc)                                                       \
    {"gemm_cpu", spv_gemm_cpu, sizeof spv_gemm_cpu, 4,                            \
     {ta, tb, GPU_BIND_STORAGE, tc}, sizeof(struct push_gemm), SPEC_GEMM_CPU_COUNT}
static const gpu_kernel k_cpu[8] = {
    GEMM_CPU_KERNEL(SR, SR, SR), GEMM_CPU_KERNEL(SR, SR, S4),
    GEMM_CPU_KERNEL(SR, S4, SR), GEMM_CPU_KERNEL(SR, S4, S4),
    GEMM_CPU_KERNEL(S4, SR, SR), GEMM_CPU_KERNEL(S4, SR, S4),
    GEMM_CPU_KERNEL(S4, S4, SR), GEMM_CPU_KERNEL(S4, S4, S4),
};
#define TR GPU_BIND_TEXEL_R
#define T4 GPU_BIND_TEXEL_RGBA
#define GEMM_SAMPLER_KERNEL(ta, tb)                                                       \
    {"gemm_cpu_sampler", spv_gemm_cpu_sampler, sizeof spv_gemm_cpu_sampler, 3,    \
     {ta, tb, GPU_BIND_STORAGE}, sizeof(struct push_gemm), SPEC_GEMM_CPU_COUNT}
static const gpu_kernel k_cpu_sampler[4] = {
    GEMM_SAMPLER_KERNEL(TR, TR), GEMM_SAMPLER_KERNEL(TR, T4),
    GEMM_SAMPLER_KERNEL(T4, TR), GEMM_SAMPLER_KERNEL(T4, T4),
};
#define S GPU_BIND_STORAGE
static const gpu_kernel k_gpu = {"gemm_gpu", spv_gemm_gpu, sizeof spv_gemm_gpu, 3, {S, S, S},
                                 sizeof(struct push_gemm), SPEC_GEMM_GPU_COUNT};
/* Bindings: A, B, C, the workspace of partial tiles (aliasing C, unused, without split). */
static const gpu_kernel k_tile = {"gemm_tile", spv_gemm_tile, sizeof spv_gemm_tile, 4,
                                  {S, S, S, S}, sizeof(struct push_gemm), SPEC_GEMM_TILE_COUNT};
static const gpu_kernel k_reduce = {"gemm_reduce", spv_gemm_reduce, sizeof spv_gemm_reduce, 2,
                                    {S, S}, sizeof(struct push_gemm_reduce),
                                    SPEC_GEMM_REDUCE_COUNT};

/* One matrix as stored: `rows` rows of `cols` elements, `ld` apart. */
typedef struct operand {
    const char *name, *ld_name;
    vkt_view v;
    uint32_t rows, cols, ld;
    uint64_t extent; /* elements from the first to one past the last: (rows-1)*ld + cols */
} operand;

static vkt_status check_operand(vkt_context *ctx, operand *o)
{
    if (o->ld == 0)
        o->ld = o->cols;
    if (o->ld < o->cols)
        return err_fail(ctx->errmsg, VKT_ERROR_SHAPE,
                        "vkt_gemm: %s is %u, less than the %u elements of a row of %s "
                        "(stored as [%u, %u])", o->ld_name, o->ld, o->cols, o->name, o->rows,
                        o->cols);
    o->extent = (uint64_t)(o->rows - 1) * o->ld + o->cols;
    char what[32];
    snprintf(what, sizeof what, "vkt_gemm: %s", o->name);
    vkt_status st = gpu_check_view(ctx, what, o->v, o->extent);
    if (st != VKT_OK)
        return st;
    /* The shaders index with 32-bit integers, from a binding start at most a few hundred
     * bytes before the view. */
    if (o->extent > (1ull << 31) - 1024)
        return err_fail(ctx->errmsg, VKT_ERROR_LIMIT,
                        "vkt_gemm: %s spans %llu elements; at most 2^31 are supported",
                        o->name, (unsigned long long)o->extent);
    return VKT_OK;
}

static int overlaps(const operand *x, const operand *y)
{
    return x->v.buffer == y->v.buffer && x->v.offset < y->v.offset + y->extent &&
           y->v.offset < x->v.offset + x->extent;
}

static vkt_status check(vkt_stream *s, const vkt_gemm_desc *d, operand *a, operand *b,
                        operand *c)
{
    if (!s)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "vkt_gemm: stream is NULL");
    vkt_context *ctx = s->ctx;
    if (!d)
        return err_fail(ctx->errmsg, VKT_ERROR_INVALID_ARGUMENT, "vkt_gemm: desc is NULL");
    if (d->m == 0 || d->n == 0 || d->k == 0)
        return err_fail(ctx->errmsg, VKT_ERROR_INVALID_ARGUMENT,
                        "vkt_gemm: M, N and K must be at least 1 (got M=%u N=%u K=%u)", d->m,
                        d->n, d->k);
    *a = (operand){"A", "lda", d->a, d->trans_a ? d->k : d->m, d->trans_a ? d->m : d->k, d->lda,
                   0};
    *b = (operand){"B", "ldb", d->b, d->trans_b ? d->n : d->k, d->trans_b ? d->k : d->n, d->ldb,
                   0};
    *c = (operand){"C", "ldc", d->c, d->m, d->n, d->ldc, 0};
    vkt_status st = check_operand(ctx, a);
    if (st == VKT_OK)
        st = check_operand(ctx, b);
    if (st == VKT_OK)
        st = check_operand(ctx, c);
    if (st != VKT_OK)
        return st;
    if (overlaps(c, a) || overlaps(c, b))
        return err_fail(ctx->errmsg, VKT_ERROR_INVALID_ARGUMENT,
                        "vkt_gemm: C (elements [%llu, %llu)) overlaps %s; the output must not "
                        "alias an input", (unsigned long long)c->v.offset,
                        (unsigned long long)(c->v.offset + c->extent),
                        overlaps(c, a) ? "A" : "B");
    return VKT_OK;
}

static gpu_arg arg(vkt_view v, uint64_t elements, int write)
{
    gpu_arg a = {v.buffer, v.offset * 4, elements * 4, write};
    return a;
}

/* RGBA32F views need a 16-byte aligned start, rows a multiple of 4 floats apart, and the
 * last vec4 (up to 3 floats past the matrix) inside the buffer. */
static int vec4_ok(const vkt_context *ctx, const operand *o)
{
    uint64_t rounded = (o->extent + 3) / 4 * 4;
    return gpu_arg_shift(ctx, o->v.offset * 4, GPU_BIND_TEXEL_RGBA) % 4 == 0 &&
           o->ld % 4 == 0 && o->v.offset + rounded <= o->v.buffer->size / 4;
}

/* The variants gemm_texel (sampler 0) and gemm_sampler (sampler 1: A and B through
 * uniform texel buffers, C through its storage buffer, for devices without storage texel
 * buffers of R32F / RGBA32F). */
static vkt_status dispatch_cpu(vkt_stream *s, const vkt_gemm_desc *d, const kg_plan *plan,
                               const operand *a, const operand *b, const operand *c,
                               int sampler)
{
    vkt_context *ctx = s->ctx;
    int tc = plan->transpose_c;
    if (tc) { /* C^T[N, M] = op(B)^T op(A)^T: B is the left operand, A the right */
        const operand *t = a;
        a = b, b = t;
    }
    int st = !sampler;
    int va = vec4_ok(ctx, a), vb = vec4_ok(ctx, b);
    /* vec4 stores (and reads) of C need its storage and texel bindings to start 16-byte
     * aligned relative to the view, ldc and N multiples of 4 */
    int vc = !tc && d->n % 4 == 0 && c->ld % 4 == 0 && vec4_ok(ctx, c) &&
             gpu_arg_shift(ctx, c->v.offset * 4, GPU_BIND_STORAGE) % 4 == 0;
    gpu_bind_type ta = st ? (va ? S4 : SR) : (va ? T4 : TR);
    gpu_bind_type tb = st ? (vb ? S4 : SR) : (vb ? T4 : TR);
    struct push_gemm push = {
        .m = tc ? d->n : d->m, .n = tc ? d->m : d->n, .k = d->k,
        .lda = a->ld, .ldb = b->ld, .ldc = c->ld,
        .a_off = gpu_arg_shift(ctx, a->v.offset * 4, ta),
        .b_off = gpu_arg_shift(ctx, b->v.offset * 4, tb),
        .c_off = gpu_arg_shift(ctx, c->v.offset * 4, GPU_BIND_STORAGE),
        .trans_a = tc ? !d->trans_b : d->trans_a != 0,
        .trans_b = tc ? !d->trans_a : d->trans_b != 0,
        .alpha = d->alpha, .beta = d->beta,
        .cr_off = gpu_arg_shift(ctx, c->v.offset * 4, vc ? S4 : SR),
    };
    /* binding 3 (gemm_cpu only): C again, read through a texel view when beta != 0, else
     * one element of it (unused, and no maxTexelBufferElements limit on C then) */
    int read_c = d->beta != 0.0f;
    gpu_arg args[4] = {arg(a->v, va ? (a->extent + 3) / 4 * 4 : a->extent, 0),
                       arg(b->v, vb ? (b->extent + 3) / 4 * 4 : b->extent, 0),
                       arg(c->v, c->extent, 1), arg(c->v, read_c ? c->extent : 1, 0)};
    uint32_t spec[SPEC_GEMM_CPU_COUNT] = {
        [SPEC_GEMM_CPU_TRANS_A] = push.trans_a, [SPEC_GEMM_CPU_TRANS_B] = push.trans_b,
        [SPEC_GEMM_CPU_VEC_A] = (uint32_t)va,   [SPEC_GEMM_CPU_VEC_B] = (uint32_t)vb,
        [SPEC_GEMM_CPU_READ_C] = (uint32_t)read_c, [SPEC_GEMM_CPU_VEC_C] = (uint32_t)vc,
        [SPEC_GEMM_CPU_TRANS_C] = (uint32_t)tc};
    const gpu_kernel *k = st ? &k_cpu[4 * va + 2 * vb + vc] : &k_cpu_sampler[2 * va + vb];
    return gpu_dispatch(s, k, spec, SPEC_GEMM_CPU_COUNT, args, &push, plan->groups);
}

/* gemm_shared: shaders/gemm_gpu.comp with the plan's tile. */
static vkt_status dispatch_shared(vkt_stream *s, const vkt_gemm_desc *d, const kg_plan *plan,
                                  const operand *a, const operand *b, const operand *c)
{
    vkt_context *ctx = s->ctx;
    struct push_gemm push = {
        .m = d->m, .n = d->n, .k = d->k,
        .lda = a->ld, .ldb = b->ld, .ldc = c->ld,
        .a_off = gpu_arg_shift(ctx, a->v.offset * 4, GPU_BIND_STORAGE),
        .b_off = gpu_arg_shift(ctx, b->v.offset * 4, GPU_BIND_STORAGE),
        .c_off = gpu_arg_shift(ctx, c->v.offset * 4, GPU_BIND_STORAGE),
        .trans_a = d->trans_a != 0, .trans_b = d->trans_b != 0,
        .alpha = d->alpha, .beta = d->beta,
    };
    gpu_arg args[3] = {arg(a->v, a->extent, 0), arg(b->v, b->extent, 0),
                       arg(c->v, c->extent, 1)};
    uint32_t spec[SPEC_GEMM_GPU_COUNT] = {
        [SPEC_GEMM_GPU_TRANS_A] = push.trans_a, [SPEC_GEMM_GPU_TRANS_B] = push.trans_b,
        [SPEC_GEMM_GPU_READ_C] = d->beta != 0.0f, [SPEC_GEMM_GPU_BM] = plan->bm,
        [SPEC_GEMM_GPU_BN] = plan->bn, [SPEC_GEMM_GPU_BK] = plan->bk,
        [SPEC_GEMM_GPU_TX] = plan->bn / plan->tn, [SPEC_GEMM_GPU_TY] = plan->bm / plan->tm};
    return gpu_dispatch(s, &k_gpu, spec, SPEC_GEMM_GPU_COUNT, args, &push, plan->groups);
}

/* An operand read as vec4s by gemm_tile: its rows (the stored contiguous dimension) a
 * multiple of 4 floats long and apart, from a 16-byte aligned binding. */
static int tile_vec4(const vkt_context *ctx, const operand *o)
{
    return o->cols % 4 == 0 && o->ld % 4 == 0 && ku_vec4_aligned(ctx, o->v);
}

/* The second dispatch of a split-K product: C = alpha * (sum of the partial tiles) +
 * beta * C. A grid-stride loop whose lanes each add `splits` values per output: within
 * the device's loop budget. */
static vkt_status dispatch_reduce(vkt_stream *s, const vkt_gemm_desc *d, const kg_plan *plan,
                                  vkt_buffer *ws, const operand *c)
{
    vkt_context *ctx = s->ctx;
    uint64_t mn = (uint64_t)d->m * d->n;
    uint32_t wg = ku_workgroup_size(ctx);
    uint64_t per_lane = ku_loop_budget(ctx) / 2 / (plan->splits + 1);
    uint64_t g = ku_groups_1d(ctx, mn, wg), need = (mn + wg * per_lane - 1) / (wg * per_lane);
    uint32_t groups[3] = {(uint32_t)(g > need ? g : need), 1, 1};
    if (groups[0] > GPU_MAX_GROUPS)
        groups[0] = GPU_MAX_GROUPS;
    struct push_gemm_reduce push = {
        .m = d->m, .n = d->n, .splits = plan->splits, .ldc = c->ld,
        .c_off = gpu_arg_shift(ctx, c->v.offset * 4, GPU_BIND_STORAGE), .w_off = 0,
        .alpha = d->alpha, .beta = d->beta};
    gpu_arg args[2] = {{ws, 0, plan->workspace * 4, 0}, arg(c->v, c->extent, 1)};
    uint32_t spec[SPEC_GEMM_REDUCE_COUNT] = {[SPEC_WG] = wg,
                                             [SPEC_GEMM_REDUCE_READ_C] = d->beta != 0.0f};
    return gpu_dispatch(s, &k_reduce, spec, SPEC_GEMM_REDUCE_COUNT, args, &push, groups);
}

/* gemm_tile: shaders/gemm_tile.comp with the plan's tile; with splits > 1 it writes the
 * partial tiles into the stream's scratch memory and dispatch_reduce sums them. Where
 * that memory cannot be had, or would take more than 1/64 of a context's memory limit
 * (vkt_context_options.memory_limit: a smaller device is being modelled, whose memory
 * the models plan to the byte), the product runs unsplit (slower, same result) unless
 * the device's loop budget needs the split. */
static vkt_status dispatch_tile(vkt_stream *s, const vkt_gemm_desc *d, kg_plan *plan,
                                const operand *a, const operand *b, const operand *c)
{
    vkt_context *ctx = s->ctx;
    vkt_buffer *ws = NULL;
    int needed = (uint64_t)(d->k + plan->bk - 1) / plan->bk > ku_loop_budget(ctx) / 4;
    if (plan->splits > 1) {
        char saved[VKT_ERRMSG_SIZE];
        memcpy(saved, ctx->errmsg, sizeof saved);
        vkt_status st = ctx->mem.limit && plan->workspace * 4 > ctx->mem.limit / 64 && !needed
                            ? VKT_ERROR_OUT_OF_MEMORY
                            : gpu_stream_scratch(s, plan->workspace * 4, &ws);
        if (st != VKT_OK && needed)
            return st;
        if (st != VKT_OK) {
            memcpy(ctx->errmsg, saved, sizeof saved);
            plan->splits = 1, plan->k_chunk = d->k, plan->groups[2] = 1, plan->workspace = 0;
        }
    }
    int split = plan->splits > 1;
    int vc = split ? d->n % 4 == 0
                   : d->n % 4 == 0 && c->ld % 4 == 0 && ku_vec4_aligned(ctx, c->v);
    struct push_gemm push = {
        .m = d->m, .n = d->n, .k = d->k,
        .lda = a->ld, .ldb = b->ld, .ldc = c->ld,
        .a_off = gpu_arg_shift(ctx, a->v.offset * 4, GPU_BIND_STORAGE),
        .b_off = gpu_arg_shift(ctx, b->v.offset * 4, GPU_BIND_STORAGE),
        .c_off = gpu_arg_shift(ctx, c->v.offset * 4, GPU_BIND_STORAGE),
        .trans_a = d->trans_a != 0, .trans_b = d->trans_b != 0,
        .alpha = d->alpha, .beta = d->beta, .k_chunk = plan->k_chunk, .w_off = 0,
        .flags = (tile_vec4(ctx, a) ? GEMM_VEC_A : 0) | (tile_vec4(ctx, b) ? GEMM_VEC_B : 0) |
                 (vc ? GEMM_VEC_C : 0) | (!split && d->beta != 0.0f ? GEMM_READ_C : 0) |
                 (split ? GEMM_SPLIT : 0)};
    /* split: C untouched here (one element bound, unused); else the workspace binding
     * aliases one element of C */
    gpu_arg args[4] = {arg(a->v, a->extent, 0), arg(b->v, b->extent, 0),
                       arg(c->v, split ? 1 : c->extent, !split),
                       split ? (gpu_arg){ws, 0, plan->workspace * 4, 1} : arg(c->v, 1, 0)};
    uint32_t spec[SPEC_GEMM_TILE_COUNT] = {
        [SPEC_WG] = plan->threads, [SPEC_GEMM_TILE_TRANS_A] = push.trans_a,
        [SPEC_GEMM_TILE_TRANS_B] = push.trans_b, [SPEC_GEMM_TILE_BM] = plan->bm,
        [SPEC_GEMM_TILE_BN] = plan->bn, [SPEC_GEMM_TILE_BK] = plan->bk,
        [SPEC_GEMM_TILE_TM] = plan->tm, [SPEC_GEMM_TILE_TN] = plan->tn};
    vkt_status st = gpu_dispatch(s, &k_tile, spec, SPEC_GEMM_TILE_COUNT, args, &push,
                                 plan->groups);
    return st == VKT_OK && split ? dispatch_reduce(s, d, plan, ws, c) : st;
}

vkt_status vkt_gemm(vkt_stream *stream, const vkt_gemm_desc *desc)
{
    /* 16-bit operands: gemm_lowp.c (its own variants, fp32 accumulation) */
    if (stream && desc && desc->m && desc->n && desc->k && kg_gemm_typed(desc))
        return kg_gemm_lowp(stream, desc);
    operand a, b, c;
    vkt_status st = check(stream, desc, &a, &b, &c);
    if (st != VKT_OK)
        return st;
    vkt_context *ctx = stream->ctx;
    gpu_variant v = ctx->kv[GPU_FAMILY_GEMM]; /* the context's choice (gpu/variants.c) */
    kg_plan plan = kg_gemm_plan(&ctx->profile, v, desc->m, desc->n, desc->k);
    if (plan.groups[0] > GPU_MAX_GROUPS || plan.groups[1] > GPU_MAX_GROUPS)
        return err_fail(ctx->errmsg, VKT_ERROR_LIMIT,
                        "vkt_gemm: M=%u N=%u needs %u x %u workgroups; at most %u along each "
                        "dimension", desc->m, desc->n, plan.groups[1], plan.groups[0],
                        GPU_MAX_GROUPS);
    switch (v) {
    case GPU_V_GEMM_TEXEL: return dispatch_cpu(stream, desc, &plan, &a, &b, &c, 0);
    case GPU_V_GEMM_SAMPLER: return dispatch_cpu(stream, desc, &plan, &a, &b, &c, 1);
    case GPU_V_GEMM_TILE: return dispatch_tile(stream, desc, &plan, &a, &b, &c);
    case GPU_V_GEMM_SHARED: return dispatch_shared(stream, desc, &plan, &a, &b, &c);
    default:
        return err_fail(ctx->errmsg, VKT_ERROR_LIMIT,
                        "vkt_gemm: no GEMM variant runs on '%s'", ctx->profile.name);
    }
}
