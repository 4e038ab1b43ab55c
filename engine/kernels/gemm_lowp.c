/* gemm_lowp.c - vkt_gemm of 16-bit inputs (a_type == b_type, fp16 or bf16) with fp32
 * accumulation, C fp32 or of the inputs' type: the checks of the element types and views,
 * and the dispatch of the family's variant (gemm_f16 / gemm_bf16: engine/gpu/variants.c)
 * with the plan of gemm_lowp_plan.c. Every variant but the widening ones runs
 * shaders/gemm_lowp.glsl: gemm_half.comp (fp32 multiply-adds), gemm_half_f16.comp (fp16
 * ones) or the cooperative-matrix modules gemm_coopmat_f16 / _bf16 (prebuilt:
 * docs/toolchain.md). gemm_f16_widen and gemm_bf16_widen (lavapipe's: its fp32 GEMM is
 * a hundred times faster there than a shared-memory tiling) widen A and B into scratch
 * memory and run the context's fp32 GEMM. */
#include "gpu/gpu.h"
#include "kernels/cast.h"
#include "kernels/gemm.h"
#include "kernels/gemm_lowp.h"
#include "kernels/kernel_util.h"
#include "push.h"
#include "spec.h"
#include "gemm_coopmat_bf16.spv.h"
#include "gemm_coopmat_f16.spv.h"
#include "gemm_half.spv.h"
#include "gemm_half_f16.spv.h"

#include <stdio.h>

/* Bindings: A, B, C (each also read as vectors or 16-bit words: aliases in the shader). */
#define S GPU_BIND_STORAGE
#define LOWP_KERNEL(name) \
    {#name, spv_##name, sizeof spv_##name, 3, {S, S, S}, sizeof(struct push_gemm), SPEC_LOWP_COUNT}
static const gpu_kernel k_half = LOWP_KERNEL(gemm_half);
static const gpu_kernel k_half_f16 = LOWP_KERNEL(gemm_half_f16);
static const gpu_kernel k_coopmat_f16 = LOWP_KERNEL(gemm_coopmat_f16);
static const gpu_kernel k_coopmat_bf16 = LOWP_KERNEL(gemm_coopmat_bf16);
#undef S

const gpu_kernel *kg_lowp_kernel(gpu_variant v)
{
    switch (v) {
    case GPU_V_GEMM_F16_FLOAT:
    case GPU_V_GEMM_BF16_FLOAT: return &k_half;
    case GPU_V_GEMM_F16_HALF: return &k_half_f16;
    case GPU_V_GEMM_F16_COOPMAT: return &k_coopmat_f16;
    case GPU_V_GEMM_BF16_COOPMAT: return &k_coopmat_bf16;
    default: return NULL;
    }
}

int kg_lowp_available(const vkt_context *ctx, vkt_dtype t, char *why, size_t why_size)
{
    gpu_family fam = t == VKT_DTYPE_FP16 ? GPU_FAMILY_GEMM_F16 : GPU_FAMILY_GEMM_BF16;
    if (t != VKT_DTYPE_FP16 && t != VKT_DTYPE_BF16) {
        snprintf(why, why_size, "a 16-bit type (%s is not one)", vkt_dtype_name(t));
        return 0;
    }
    if (ctx->kv[fam] != GPU_V_NONE)
        return 1;
    gpu_variant_runs(gpu_variant_row_of(fam == GPU_FAMILY_GEMM_F16 ? GPU_V_GEMM_F16_FLOAT
                                                                   : GPU_V_GEMM_BF16_FLOAT),
                     &ctx->profile, why, why_size);
    return 0;
}

/* One matrix as stored: `rows` rows of `cols` elements of `size` bytes, `ld` apart. */
typedef struct lp_operand {
    const char *name, *ld_name;
    vkt_view v;
    uint32_t rows, cols, ld, size;
    uint64_t extent; /* elements from the first to one past the last */
} lp_operand;

static vkt_status check_operand(vkt_context *ctx, lp_operand *o)
{
    if (o->ld == 0)
        o->ld = o->cols;
    if (o->ld < o->cols)
        return err_fail(ctx->errmsg, VKT_ERROR_SHAPE,
                        "vkt_gemm: %s is %u, less than the %u elements of a row of %s "
                        "(stored as [%u, %u])", o->ld_name, o->ld, o->cols, o->name, o->rows,
                        o->cols);
    o->extent = (uint64_t)(o->rows - 1) * o->ld + o->cols;
    if (!o->v.buffer)
        return err_fail(ctx->errmsg, VKT_ERROR_INVALID_ARGUMENT, "vkt_gemm: %s's buffer is NULL",
                        o->name);
    if (o->v.buffer->ctx != ctx)
        return err_fail(ctx->errmsg, VKT_ERROR_INVALID_ARGUMENT,
                        "vkt_gemm: %s's buffer belongs to another context", o->name);
    uint64_t elems = o->v.buffer->size / o->size;
    if (o->v.offset > elems || o->extent > elems - o->v.offset)
        return err_fail(ctx->errmsg, VKT_ERROR_INVALID_ARGUMENT,
                        "vkt_gemm: %s: %u-byte elements [%llu, %llu) lie outside its buffer of "
                        "%llu such elements", o->name, o->size,
                        (unsigned long long)o->v.offset,
                        (unsigned long long)(o->v.offset + o->extent), (unsigned long long)elems);
    /* The shader indexes with 32-bit integers from a binding start a few hundred bytes
     * before the view. */
    if (o->extent > (1ull << 31) - 1024)
        return err_fail(ctx->errmsg, VKT_ERROR_LIMIT,
                        "vkt_gemm: %s spans %llu elements; at most 2^31 are supported",
                        o->name, (unsigned long long)o->extent);
    return VKT_OK;
}

static int lp_overlaps(const lp_operand *x, const lp_operand *y)
{
    uint64_t x0 = x->v.offset * x->size, x1 = x0 + x->extent * x->size;
    uint64_t y0 = y->v.offset * y->size, y1 = y0 + y->extent * y->size;
    return x->v.buffer == y->v.buffer && x0 < y1 && y0 < x1;
}

/* Whether the shader may read the operand 4 elements (8 bytes) at a time along its rows:
 * rows a multiple of 4 long and apart, the view 4 elements past an 8-byte aligned binding
 * start. */
static int vec_ok(const vkt_context *ctx, const lp_operand *o)
{
    uint64_t ob = o->v.offset * o->size;
    uint32_t shift = gpu_arg_shift_bytes(ctx, ob, GPU_BIND_STORAGE);
    return o->cols % 4 == 0 && o->ld % 4 == 0 && (ob - shift) % 8 == 0 &&
           (shift / o->size) % 4 == 0;
}

static gpu_arg lp_arg(const lp_operand *o, int write)
{
    return (gpu_arg){o->v.buffer, o->v.offset * o->size, o->extent * o->size, write};
}

static uint32_t lp_shift(const vkt_context *ctx, const lp_operand *o)
{
    return gpu_arg_shift_bytes(ctx, o->v.offset * o->size, GPU_BIND_STORAGE) / o->size;
}

int kg_gemm_typed(const vkt_gemm_desc *d)
{
    return d->a_type != VKT_DTYPE_FP32 || d->b_type != VKT_DTYPE_FP32 ||
           d->c_type != VKT_DTYPE_FP32;
}

/* The element types: A and B the same 16-bit type, C fp32 or that type. */
static vkt_status check_types(vkt_context *ctx, const vkt_gemm_desc *d)
{
    const vkt_dtype t[3] = {d->a_type, d->b_type, d->c_type};
    for (int i = 0; i < 3; i++)
        if (vkt_dtype_size(t[i]) == 0)
            return err_fail(ctx->errmsg, VKT_ERROR_INVALID_ARGUMENT,
                            "vkt_gemm: %c_type = %d is not a vkt_dtype", "abc"[i], (int)t[i]);
    if (d->a_type != d->b_type || d->a_type == VKT_DTYPE_FP32 ||
        (d->c_type != VKT_DTYPE_FP32 && d->c_type != d->a_type))
        return err_fail(ctx->errmsg, VKT_ERROR_INVALID_ARGUMENT,
                        "vkt_gemm: A %s, B %s, C %s: not a supported combination (A and B both "
                        "fp32, fp16 or bf16; C fp32 or the inputs' type)",
                        vkt_dtype_name(d->a_type), vkt_dtype_name(d->b_type),
                        vkt_dtype_name(d->c_type));
    return VKT_OK;
}

/* The widening variants: A and B (and a 16-bit C that beta reads) widened exactly into the
 * stream's scratch memory, the context's fp32 GEMM on them, a 16-bit C rounded back (only
 * its M x N elements: the padding between rows stays as it was). Each widened operand
 * keeps its leading dimension and starts 16 bytes aligned. The fp32 GEMM may take the
 * same scratch buffer for split-K partial tiles, which it writes from the buffer's start
 * (gemm.c, dispatch_tile, asks for its plan's workspace and gets the stream's largest
 * scratch buffer): the widened operands go after that much. */
static vkt_status dispatch_widen(vkt_stream *s, const vkt_gemm_desc *d, const lp_operand *a,
                                 const lp_operand *b, const lp_operand *c)
{
    vkt_context *ctx = s->ctx;
    int c16 = d->c_type != VKT_DTYPE_FP32;
    kg_plan inner = kg_gemm_plan(&ctx->profile, ctx->kv[GPU_FAMILY_GEMM], d->m, d->n, d->k);
    uint64_t oa = (inner.workspace + 3) / 4 * 4; /* floats */
    uint64_t ob = oa + (a->extent + 3) / 4 * 4, oc = ob + (b->extent + 3) / 4 * 4;
    uint64_t end = oc + (c16 ? c->extent : 0);
    vkt_buffer *ws = NULL;
    vkt_status st = gpu_stream_scratch(s, end * 4, &ws);
    if (st == VKT_OK)
        st = kcast_matrix(s, d->a_type, a->v, a->ld, VKT_DTYPE_FP32, (vkt_view){ws, oa}, a->ld,
                          a->rows, a->cols);
    if (st == VKT_OK)
        st = kcast_matrix(s, d->b_type, b->v, b->ld, VKT_DTYPE_FP32, (vkt_view){ws, ob}, b->ld,
                          b->rows, b->cols);
    vkt_view cv = c16 ? (vkt_view){ws, oc} : c->v;
    if (st == VKT_OK && c16 && d->beta != 0.0f)
        st = kcast_matrix(s, d->c_type, c->v, c->ld, VKT_DTYPE_FP32, cv, c->ld, c->rows,
                          c->cols);
    vkt_gemm_desc f = *d;
    f.a = (vkt_view){ws, oa}, f.b = (vkt_view){ws, ob}, f.c = cv;
    f.lda = a->ld, f.ldb = b->ld, f.ldc = c->ld;
    f.a_type = f.b_type = f.c_type = VKT_DTYPE_FP32;
    if (st == VKT_OK)
        st = vkt_gemm(s, &f);
    if (st == VKT_OK && c16)
        st = kcast_matrix(s, VKT_DTYPE_FP32, cv, c->ld, d->c_type, c->v, c->ld, c->rows,
                          c->cols);
    return st;
}

vkt_status kg_gemm_lowp(vkt_stream *s, const vkt_gemm_desc *d)
{
    vkt_context *ctx = s->ctx;
    vkt_status st = check_types(ctx, d);
    if (st != VKT_OK)
        return st;
    uint32_t ab = (uint32_t)vkt_dtype_size(d->a_type), cs = (uint32_t)vkt_dtype_size(d->c_type);
    lp_operand a = {"A", "lda", d->a, d->trans_a ? d->k : d->m, d->trans_a ? d->m : d->k,
                    d->lda, ab, 0};
    lp_operand b = {"B", "ldb", d->b, d->trans_b ? d->n : d->k, d->trans_b ? d->k : d->n,
                    d->ldb, ab, 0};
    lp_operand c = {"C", "ldc", d->c, d->m, d->n, d->ldc, cs, 0};
    st = check_operand(ctx, &a);
    if (st == VKT_OK)
        st = check_operand(ctx, &b);
    if (st == VKT_OK)
        st = check_operand(ctx, &c);
    if (st != VKT_OK)
        return st;
    if (lp_overlaps(&c, &a) || lp_overlaps(&c, &b))
        return err_fail(ctx->errmsg, VKT_ERROR_INVALID_ARGUMENT,
                        "vkt_gemm: C overlaps %s; the output must not alias an input",
                        lp_overlaps(&c, &a) ? "A" : "B");
    gpu_family fam = d->a_type == VKT_DTYPE_FP16 ? GPU_FAMILY_GEMM_F16 : GPU_FAMILY_GEMM_BF16;
    gpu_variant v = ctx->kv[fam];
    if (v == GPU_V_GEMM_F16_WIDEN || v == GPU_V_GEMM_BF16_WIDEN)
        return dispatch_widen(s, d, &a, &b, &c);
    const gpu_kernel *k = kg_lowp_kernel(v);
    if (!k) {
        char why[256] = "";
        gpu_variant_runs(gpu_variant_row_of(fam == GPU_FAMILY_GEMM_F16 ? GPU_V_GEMM_F16_FLOAT
                                                                       : GPU_V_GEMM_BF16_FLOAT),
                         &ctx->profile, why, sizeof why);
        return err_fail(ctx->errmsg, VKT_ERROR_NO_DEVICE,
                        "vkt_gemm: no %s GEMM runs on '%s' (it lacks %s)",
                        vkt_dtype_name(d->a_type), ctx->profile.name, why);
    }
    kg_lowp_plan plan = kg_lowp_plan_make(&ctx->profile, v, d->m, d->n, d->k);
    if (!plan.ok)
        return err_fail(ctx->errmsg, VKT_ERROR_LIMIT, "vkt_gemm: %s on '%s': %s",
                        gpu_variant_row_of(v)->name, ctx->profile.name, plan.why);
    /* A device whose shader loops stop early (llvmpipe: 65535 iterations per invocation)
     * takes K in chunks of at most `per` slabs, one dispatch each, the later ones adding
     * into the fp32 C (beta 1): K = 2048 runs 64 slabs of gemm_bf16_float's 32-wide tiles,
     * each about 1,400 iterations, past 65535 in one pass. A 16-bit C cannot take partial
     * sums without rounding each: refused. */
    uint64_t slabs = (d->k + plan.bk - 1) / plan.bk, per = ku_loop_budget(ctx) / plan.slab_loops;
    if (slabs > per && (d->c_type != VKT_DTYPE_FP32 || per == 0))
        return err_fail(ctx->errmsg, VKT_ERROR_LIMIT,
                        "vkt_gemm: K=%u takes %llu slabs of %u, past what one invocation of %s "
                        "may loop on '%s' (%llu iterations), and a %s C cannot add up the "
                        "parts; split K into several products", d->k, (unsigned long long)slabs,
                        plan.bk, gpu_variant_row_of(v)->name, ctx->profile.name,
                        (unsigned long long)ku_loop_budget(ctx), vkt_dtype_name(d->c_type));
    uint32_t k_part = slabs > per ? (uint32_t)(per * plan.bk) : d->k;
    if (plan.groups[0] > GPU_MAX_GROUPS || plan.groups[1] > GPU_MAX_GROUPS)
        return err_fail(ctx->errmsg, VKT_ERROR_LIMIT,
                        "vkt_gemm: M=%u N=%u needs %u x %u workgroups; at most %u along each "
                        "dimension", d->m, d->n, plan.groups[1], plan.groups[0], GPU_MAX_GROUPS);
    struct push_gemm push = {
        .m = d->m, .n = d->n, .k = d->k,
        .lda = a.ld, .ldb = b.ld, .ldc = c.ld,
        .a_off = lp_shift(ctx, &a), .b_off = lp_shift(ctx, &b), .c_off = lp_shift(ctx, &c),
        .trans_a = d->trans_a != 0, .trans_b = d->trans_b != 0,
        .alpha = d->alpha, .beta = d->beta, .k_chunk = d->k,
        .flags = (vec_ok(ctx, &a) ? GEMM_VEC_A : 0) | (vec_ok(ctx, &b) ? GEMM_VEC_B : 0) |
                 (d->beta != 0.0f ? GEMM_READ_C : 0) |
                 (d->a_type == VKT_DTYPE_BF16 ? GEMM_AB_BF16 : 0) |
                 (d->c_type != VKT_DTYPE_FP32 ? GEMM_C_16 : 0)};
    gpu_arg args[3] = {lp_arg(&a, 0), lp_arg(&b, 0), lp_arg(&c, 1)};
    uint32_t spec[SPEC_LOWP_COUNT] = {
        [SPEC_WG] = plan.threads, [SPEC_LOWP_BM] = plan.bm, [SPEC_LOWP_BN] = plan.bn,
        [SPEC_LOWP_BK] = plan.bk, [SPEC_LOWP_WM] = plan.wm, [SPEC_LOWP_WN] = plan.wn,
        [SPEC_LOWP_TM] = plan.tm, [SPEC_LOWP_TN] = plan.tn, [SPEC_LOWP_TK] = plan.tk,
        [SPEC_LOWP_SG] = plan.sg};
    /* K's chunks: A's columns (rows when transposed) and B's rows (columns) from k0 on;
     * k_part is a multiple of the slab, itself a multiple of 4, so the 4-element loads
     * stay aligned */
    st = VKT_OK;
    for (uint32_t k0 = 0; k0 < d->k && st == VKT_OK; k0 += k_part) {
        struct push_gemm part = push;
        part.k = part.k_chunk = d->k - k0 < k_part ? d->k - k0 : k_part;
        part.a_off += d->trans_a ? k0 * a.ld : k0;
        part.b_off += d->trans_b ? k0 : k0 * b.ld;
        if (k0 > 0) {
            part.beta = 1.0f;
            part.flags |= GEMM_READ_C;
        }
        st = gpu_dispatch(s, k, spec, SPEC_LOWP_COUNT, args, &part, plan.groups);
    }
    return st;
}
