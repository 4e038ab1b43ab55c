/* attention_lowp.c - causal attention of 16-bit q, k, v (attention.h: ka_attention_lowp
 * and its backward) in the context's attention_lowp variant (engine/gpu/variants.c):
 *  - attention_lowp_coopmat, attention_lowp_frag: the forward's and the backward's
 *    products on warps of fragments (attention_cm.c, shaders/attention_frag.glsl and
 *    attention_frag_bwd.glsl: the matrix instruction, or fp32 multiply-adds);
 *  - attention_lowp_flash: attention_flash.c's passes with qkv and dy bound as 16-bit
 *    elements (shaders/attention_flash_lowp.comp widens them exactly as it loads them);
 *  - attention_lowp_widen: qkv widened exactly into the tail of the saved array and dy
 *    into the tail of the workspace by shaders/cast.comp, then the context's fp32
 *    attention (attention.c) on the copies; the variant lavapipe runs, as conv_lowp_widen
 *    is its 16-bit convolution.
 * Every score, softmax statistic (row maximum, sum, logsumexp), sum, y and gradient is
 * fp32: only the inputs were rounded, and in coopmat and frag the matrix instruction's
 * operands: the probabilities multiplying v (forward), dS and the dropped probabilities
 * (backward), rounded to the 16-bit type. */
#include "kernels/attention_impl.h"
#include "kernels/cast.h"
#include "kernels/kernel_util.h"

#include <stdio.h>

static uint64_t up4(uint64_t n)
{
    return (n + 3) / 4 * 4;
}

static gpu_variant lowp_variant(const vkt_context *ctx)
{
    return ctx ? ctx->kv[GPU_FAMILY_ATTENTION_LOWP] : GPU_V_NONE;
}

/* The variants that run attention_flash.c's passes (the forward of coopmat and frag:
 * attention_cm.c) on the 16-bit rows as stored. */
static int fused(gpu_variant v)
{
    return v == GPU_V_ATTENTION_LOWP_FLASH || v == GPU_V_ATTENTION_LOWP_COOPMAT ||
           v == GPU_V_ATTENTION_LOWP_FRAG;
}

int ka_attention_lowp_fused(const vkt_context *ctx)
{
    return fused(lowp_variant(ctx));
}

/* The fp32 arrays of the call: attention_lowp_flash's own (its plan is attention_flash's),
 * or the fp32 attention's followed by the widened copy (widen: qkv in saved, dy in the
 * workspace). */
static uint64_t elems(const vkt_context *ctx, uint32_t b, uint32_t t, uint32_t heads,
                      uint32_t d, int workspace)
{
    gpu_variant v = lowp_variant(ctx);
    if (fused(v)) {
        ka_plan p = ka_attention_plan(&ctx->profile, v, b, t, heads, d);
        return workspace ? p.workspace_elems : p.saved_elems;
    }
    if (v != GPU_V_ATTENTION_LOWP_WIDEN)
        return 0;
    ka_plan p = ka_attention_plan_for(ctx, b, t, heads, d);
    uint64_t own = workspace ? p.workspace_elems : p.saved_elems;
    if (own == 0)
        return 0;
    return up4(own) + (uint64_t)b * t * heads * d * (workspace ? 1 : 3);
}

uint64_t ka_attention_lowp_saved_elems(const vkt_context *ctx, uint32_t b, uint32_t t,
                                       uint32_t heads, uint32_t d)
{
    return elems(ctx, b, t, heads, d, 0);
}

uint64_t ka_attention_lowp_workspace_elems(const vkt_context *ctx, uint32_t b, uint32_t t,
                                           uint32_t heads, uint32_t d)
{
    return elems(ctx, b, t, heads, d, 1);
}

/* The type and the variant, or why not. */
static vkt_status check_lowp(vkt_stream *s, const char *fn, vkt_dtype type)
{
    if (!s)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "%s: stream is NULL", fn);
    vkt_context *ctx = s->ctx;
    if (type != VKT_DTYPE_FP16 && type != VKT_DTYPE_BF16)
        return err_fail(ctx->errmsg, VKT_ERROR_INVALID_ARGUMENT,
                        "%s: the type of qkv and dy, %d, is not fp16 or bf16", fn, (int)type);
    if (lowp_variant(ctx) == GPU_V_NONE) {
        char why[256] = "";
        gpu_variant_runs(gpu_variant_row_of(GPU_V_ATTENTION_LOWP_WIDEN), &ctx->profile, why,
                         sizeof why);
        return err_fail(ctx->errmsg, VKT_ERROR_NO_DEVICE,
                        "%s: no %s attention runs on '%s' (it lacks %s)", fn,
                        vkt_dtype_name(type), ctx->profile.name, why);
    }
    return VKT_OK;
}

/* Widens the 16-bit `n16` [rows, cols] into the tail of `big` (an fp32 array of `total`
 * elements whose first `head` belong to the fp32 call): checked here, since kcast_matrix
 * trusts its views. *out: the copy. */
static vkt_status widen(vkt_stream *s, const char *fn, const char *name, vkt_dtype type,
                        vkt_view n16, vkt_view big, const char *big_name, uint64_t head,
                        uint64_t total, uint64_t rows, uint64_t cols, vkt_view *out)
{
    vkt_context *ctx = s->ctx;
    char what[96];
    snprintf(what, sizeof what, "%s: %s", fn, name);
    vkt_status st = ku_check_view16(ctx, what, n16, rows * cols);
    snprintf(what, sizeof what, "%s: %s", fn, big_name);
    if (st == VKT_OK)
        st = gpu_check_view(ctx, what, big, total);
    if (st != VKT_OK)
        return st;
    *out = (vkt_view){big.buffer, big.offset + up4(head)};
    uint64_t a0 = n16.offset * 2, a1 = a0 + rows * cols * 2, b0 = out->offset * 4,
             b1 = b0 + rows * cols * 4;
    if (n16.buffer == big.buffer && a0 < b1 && b0 < a1)
        return err_fail(ctx->errmsg, VKT_ERROR_INVALID_ARGUMENT,
                        "%s: %s overlaps %s; an output must not alias another argument", fn,
                        big_name, name);
    if (rows * cols > UINT32_MAX || cols > UINT32_MAX)
        return err_fail(ctx->errmsg, VKT_ERROR_LIMIT, "%s: %s has %llu elements; at most "
                        "2^32 - 1 are supported", fn, name, (unsigned long long)(rows * cols));
    return kcast_matrix(s, type, n16, (uint32_t)cols, VKT_DTYPE_FP32, *out, (uint32_t)cols,
                        (uint32_t)rows, (uint32_t)cols);
}

vkt_status ka_attention_lowp(vkt_stream *s, vkt_dtype type, vkt_view qkv, vkt_view y,
                             vkt_view saved, vkt_view ctrl, uint32_t b, uint32_t t,
                             uint32_t heads, uint32_t d, float p_drop, uint64_t seed,
                             uint64_t b0, uint64_t b_row)
{
    const char *fn = "ka_attention_lowp";
    vkt_status st = check_lowp(s, fn, type);
    if (st != VKT_OK)
        return st;
    if (fused(lowp_variant(s->ctx))) {
        ka_call c;
        ka_setup(&c, fn, qkv, y, saved, ctrl, b, t, heads, d, p_drop, seed, b0, b_row);
        c.lp = type;
        st = ka_check(s, &c);
        return st != VKT_OK ? st : ka_run(s, &c, 0);
    }
    uint64_t head = ka_attention_saved_elems(s->ctx, b, t, heads, d);
    uint64_t total = ka_attention_lowp_saved_elems(s->ctx, b, t, heads, d);
    if (total == 0) /* b, t, heads or d 0, or d too wide: ka_attention says which */
        return ka_attention(s, qkv, y, saved, ctrl, b, t, heads, d, p_drop, seed, b0, b_row);
    vkt_view wide;
    st = widen(s, fn, "qkv", type, qkv, saved, "saved", head, total, (uint64_t)b * t,
               3ull * heads * d, &wide);
    return st != VKT_OK ? st
                        : ka_attention(s, wide, y, saved, ctrl, b, t, heads, d, p_drop, seed, b0, b_row);
}

vkt_status ka_attention_backward_lowp(vkt_stream *s, vkt_dtype type, vkt_view qkv, vkt_view y,
                                      vkt_view saved, vkt_view ctrl, vkt_view dy,
                                      vkt_view dqkv, float beta, vkt_view workspace,
                                      uint32_t b, uint32_t t, uint32_t heads, uint32_t d,
                                      float p_drop, uint64_t seed, uint64_t b0, uint64_t b_row)
{
    const char *fn = "ka_attention_backward_lowp";
    vkt_status st = check_lowp(s, fn, type);
    if (st != VKT_OK)
        return st;
    if (fused(lowp_variant(s->ctx))) {
        ka_call c;
        ka_setup(&c, fn, qkv, y, saved, ctrl, b, t, heads, d, p_drop, seed, b0, b_row);
        ka_setup_backward(&c, dy, dqkv, beta, workspace);
        c.lp = type;
        st = ka_check(s, &c);
        return st != VKT_OK ? st : ka_run(s, &c, 1);
    }
    uint64_t total = ka_attention_lowp_workspace_elems(s->ctx, b, t, heads, d);
    if (total == 0)
        return ka_attention_backward(s, qkv, y, saved, ctrl, dy, dqkv, beta, workspace, b, t,
                                     heads, d, p_drop, seed, b0, b_row);
    /* qkv's fp32 copy is the forward's, in saved's tail; the 16-bit qkv is checked only */
    uint64_t rows = (uint64_t)b * t, hd = (uint64_t)heads * d;
    char what[96];
    snprintf(what, sizeof what, "%s: qkv", fn);
    if ((st = ku_check_view16(s->ctx, what, qkv, rows * 3 * hd)) != VKT_OK)
        return st;
    snprintf(what, sizeof what, "%s: saved", fn);
    uint64_t head = ka_attention_saved_elems(s->ctx, b, t, heads, d);
    if ((st = gpu_check_view(s->ctx, what, saved,
                             ka_attention_lowp_saved_elems(s->ctx, b, t, heads, d))) != VKT_OK)
        return st;
    vkt_view wide_qkv = {saved.buffer, saved.offset + up4(head)}, wide_dy;
    st = widen(s, fn, "dy", type, dy, workspace, "workspace",
               ka_attention_workspace_elems(s->ctx, b, t, heads, d), total, rows, hd, &wide_dy);
    return st != VKT_OK ? st
                        : ka_attention_backward(s, wide_qkv, y, saved, ctrl, wide_dy, dqkv, beta,
                                                workspace, b, t, heads, d, p_drop, seed, b0, b_row);
}
