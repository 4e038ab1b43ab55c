/* conv_lowp.c - 2-D convolution of 16-bit operands (conv.h: kc_conv2d_lowp and its
 * backward) in the context's conv_lowp variant (engine/gpu/variants.c):
 *  - conv_lowp_coopmat, conv_lowp_frag: conv_implicit.c's passes on conv_frag.glsl's warp
 *    tiles (shaders/conv_coopmat_*.comp, the matrix instruction; conv_frag.comp, fp32
 *    multiply-adds);
 *  - conv_lowp_implicit: conv_implicit.c's passes with x, w and dy bound as 16-bit
 *    elements (shaders/conv_implicit_lowp.comp widens them exactly as it loads them);
 *  - conv_lowp_widen: x, w and dy widened exactly into the workspace by
 *    shaders/cast.comp, then the context's fp32 convolution (conv.c) on the copies; the
 *    variant lavapipe runs, as gemm_f16_widen is its 16-bit GEMM.
 * Either way the products are exact (a 16-bit value times a 16-bit value fits fp32's
 * mantissa) and accumulate in fp32; bias, relu_y and every output are fp32. */
#include "kernels/cast.h"
#include "kernels/conv_impl.h"
#include "kernels/kernel_util.h"

static uint64_t up4(uint64_t n)
{
    return (n + 3) / 4 * 4;
}

static gpu_variant lowp_variant(const vkt_context *ctx)
{
    return ctx ? ctx->kv[GPU_FAMILY_CONV_LOWP] : GPU_V_NONE;
}

/* The variants that run conv_implicit.c's passes on the 16-bit operands as stored. */
static int implicit(gpu_variant v)
{
    return v == GPU_V_CONV_LOWP_IMPLICIT || v == GPU_V_CONV_LOWP_COOPMAT ||
           v == GPU_V_CONV_LOWP_FRAG;
}

int kc_conv_lowp_uses_workspace(const vkt_context *ctx)
{
    return !implicit(lowp_variant(ctx));
}

/* The fp32 convolution's workspace inside conv_lowp_widen's: chunks of what one binding
 * holds. */
static uint64_t inner_elems(const vkt_context *ctx, const kc_conv *g)
{
    return kc_conv_uses_workspace(ctx) ? kc_conv_workspace_elems(g, ku_chunk_elements(ctx)) : 0;
}

uint64_t kc_conv_lowp_workspace_elems(const vkt_context *ctx, const kc_conv *g)
{
    if (!ctx || !g || g->oh == 0 || g->ow == 0 || g->groups == 0 || g->n == 0 ||
        !kc_conv_lowp_uses_workspace(ctx))
        return 0;
    uint64_t inner = inner_elems(ctx, g);
    if (kc_conv_uses_workspace(ctx) && inner == 0)
        return 0;
    kc_dims d = kc_dims_of(g);
    return up4(inner) + up4(g->n * d.chw) + up4(g->oc * d.ckk_g) +
           up4((uint64_t)g->n * g->oc * d.P);
}

/* The operand type and the variant, or why not. */
static vkt_status check_lowp(vkt_stream *s, const char *fn, const kc_conv *g, vkt_dtype t)
{
    vkt_status st = kc_check_geometry(s, fn, g);
    if (st != VKT_OK)
        return st;
    vkt_context *ctx = s->ctx;
    if (t != VKT_DTYPE_FP16 && t != VKT_DTYPE_BF16)
        return err_fail(ctx->errmsg, VKT_ERROR_INVALID_ARGUMENT,
                        "%s: the operands' type %d is not fp16 or bf16", fn, (int)t);
    if (lowp_variant(ctx) == GPU_V_NONE) {
        char why[256] = "";
        gpu_variant_runs(gpu_variant_row_of(GPU_V_CONV_LOWP_WIDEN), &ctx->profile, why,
                         sizeof why);
        return err_fail(ctx->errmsg, VKT_ERROR_NO_DEVICE,
                        "%s: no %s convolution runs on '%s' (it lacks %s)", fn,
                        vkt_dtype_name(t), ctx->profile.name, why);
    }
    return VKT_OK;
}

/* The workspace of conv_lowp_widen: the fp32 convolution's own first, then the widened
 * x, w and dy, each 16-byte aligned from the workspace's start. */
typedef struct widened {
    vkt_view inner, x, w, dy;
    uint64_t inner_elems;
} widened;

static widened widen_layout(const kc_conv_call *c, vkt_view ws)
{
    const kc_conv *g = c->g;
    widened o;
    o.inner = ws;
    o.inner_elems = inner_elems(c->ctx, g);
    o.x = kc_at(ws, up4(o.inner_elems));
    o.w = kc_at(o.x, up4(g->n * c->d.chw));
    o.dy = kc_at(o.w, up4(g->oc * c->d.ckk_g));
    return o;
}

static vkt_status widen(kc_conv_call *c, vkt_dtype t, vkt_view from, vkt_view to, uint64_t rows,
                        uint64_t cols)
{
    return kcast_matrix(c->s, t, from, (uint32_t)cols, VKT_DTYPE_FP32, to, (uint32_t)cols,
                        (uint32_t)rows, (uint32_t)cols);
}

vkt_status kc_conv2d_lowp(vkt_stream *s, const kc_conv *g, vkt_dtype t, vkt_view x, vkt_view w,
                          const vkt_view *bias, int relu, vkt_view y, vkt_view workspace,
                          uint64_t workspace_elems)
{
    const char *fn = "kc_conv2d_lowp";
    vkt_status st = check_lowp(s, fn, g, t);
    if (st != VKT_OK)
        return st;
    kc_dims d = kc_dims_of(g);
    uint64_t need = kc_conv_lowp_workspace_elems(s->ctx, g);
    kc_named_view v[4] = {{"x", &x, g->n * d.chw, 2},
                          {"w", &w, g->oc * d.ckk_g, 2},
                          {"bias", bias, g->oc, 4},
                          {"y", &y, (uint64_t)g->n * g->oc * d.P, 4}};
    kc_conv_call c;
    if ((st = kc_begin_call(&c, s, fn, g, v, 4, workspace, need)) != VKT_OK)
        return st;
    if (workspace_elems < need)
        return err_fail(s->ctx->errmsg, VKT_ERROR_LIMIT,
                        "%s: the workspace has %llu elements; conv_lowp_widen needs %llu "
                        "(kc_conv_lowp_workspace_elems)", fn,
                        (unsigned long long)workspace_elems, (unsigned long long)need);
    if (implicit(lowp_variant(s->ctx))) {
        c.lp = t;
        c.lv = lowp_variant(s->ctx);
        return kc_implicit_forward(&c, x, w, bias, relu, y);
    }
    widened o = widen_layout(&c, workspace);
    st = widen(&c, t, x, o.x, (uint64_t)g->n * g->c, (uint64_t)g->h * g->w);
    if (st == VKT_OK)
        st = widen(&c, t, w, o.w, g->oc, d.ckk_g);
    if (st == VKT_OK)
        st = kc_conv2d_act(s, g, o.x, o.w, bias, relu, y, o.inner, o.inner_elems);
    return st;
}

vkt_status kc_conv2d_backward_lowp(vkt_stream *s, const kc_conv *g, vkt_dtype t, vkt_view x,
                                   vkt_view w, vkt_view dy, const vkt_view *relu_y,
                                   const vkt_view *dx, float beta_x, const vkt_view *dw,
                                   float beta_w, const vkt_view *db, float beta_b,
                                   vkt_view workspace, uint64_t workspace_elems)
{
    const char *fn = "kc_conv2d_backward_lowp";
    vkt_status st = check_lowp(s, fn, g, t);
    if (st != VKT_OK)
        return st;
    if (!dx && !dw && !db)
        return err_fail(s->ctx->errmsg, VKT_ERROR_INVALID_ARGUMENT,
                        "%s: none of dx, dw, db is wanted", fn);
    kc_dims d = kc_dims_of(g);
    uint64_t nx = g->n * d.chw, nw = g->oc * d.ckk_g, ny = (uint64_t)g->n * g->oc * d.P;
    uint64_t need = kc_conv_lowp_workspace_elems(s->ctx, g);
    kc_named_view v[7] = {{"x", &x, nx, 2},  {"w", &w, nw, 2},  {"dy", &dy, ny, 2},
                          {"dx", dx, nx, 4}, {"dw", dw, nw, 4}, {"db", db, g->oc, 4},
                          {"relu_y", relu_y, ny, 4}};
    kc_conv_call c;
    if ((st = kc_begin_call(&c, s, fn, g, v, 7, workspace, need)) != VKT_OK)
        return st;
    if (workspace_elems < need)
        return err_fail(s->ctx->errmsg, VKT_ERROR_LIMIT,
                        "%s: the workspace has %llu elements; conv_lowp_widen needs %llu "
                        "(kc_conv_lowp_workspace_elems)", fn,
                        (unsigned long long)workspace_elems, (unsigned long long)need);
    if (implicit(lowp_variant(s->ctx))) {
        c.lp = t;
        c.lv = lowp_variant(s->ctx);
        kc_conv_grads a = {.x = x, .w = w, .dy = dy, .relu_y = relu_y, .dx = dx, .dw = dw,
                           .db = db, .beta_x = beta_x, .beta_w = beta_w, .beta_b = beta_b};
        return kc_implicit_backward(&c, &a);
    }
    widened o = widen_layout(&c, workspace);
    st = widen(&c, t, dy, o.dy, (uint64_t)g->n * g->oc, d.P);
    if (st == VKT_OK && (dw || db)) /* x is read by the weight pass only, w by the data pass */
        st = widen(&c, t, x, o.x, (uint64_t)g->n * g->c, (uint64_t)g->h * g->w);
    if (st == VKT_OK && dx)
        st = widen(&c, t, w, o.w, g->oc, d.ckk_g);
    if (st == VKT_OK)
        st = kc_conv2d_backward_act(s, g, o.x, o.w, o.dy, relu_y, dx, beta_x, dw, beta_w, db,
                                    beta_b, o.inner, o.inner_elems);
    return st;
}
