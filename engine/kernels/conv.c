/* conv.c - 2-D convolution (conv.h): the geometry, the argument checks, and the choice
 * between the context's conv variant (engine/gpu/variants.c): conv_implicit
 * (conv_implicit.c: an implicit GEMM, the im2col gather inside its tile loads, no
 * workspace; GPU style) or conv_im2col (conv_im2col.c: im2col into a workspace, the
 * tuned GEMM, col2im; lavapipe, and GPU-style devices that cannot run conv_implicit). */
#include "kernels/conv.h"

#include <stdio.h>

#include "kernels/conv_impl.h"
#include "kernels/kernel_util.h"

/* ---- geometry ------------------------------------------------------------------ */

/* Output length along one axis, or 0 when the dilated kernel does not fit the padded
 * input. 64-bit: a huge padding must not wrap. */
static uint64_t out_len(uint32_t in, uint32_t pad, uint32_t k, uint32_t dil, uint32_t stride)
{
    uint64_t padded = (uint64_t)in + 2ull * pad, span = (uint64_t)dil * (k - 1) + 1;
    return padded < span ? 0 : (padded - span) / stride + 1;
}

vkt_status kc_conv_init(kc_conv *g, char *msg, size_t msg_size)
{
    if (!g)
        return ku_fail_to(msg, msg_size, VKT_ERROR_INVALID_ARGUMENT, "kc_conv_init: g is NULL");
    const char *names[] = {"n", "c", "h", "w", "oc", "kh", "kw", "stride_h", "stride_w",
                           "dil_h", "dil_w", "groups"};
    const uint32_t vals[] = {g->n, g->c, g->h, g->w, g->oc, g->kh, g->kw, g->stride_h,
                             g->stride_w, g->dil_h, g->dil_w, g->groups};
    for (unsigned i = 0; i < sizeof vals / sizeof vals[0]; i++)
        if (vals[i] == 0)
            return ku_fail_to(msg, msg_size, VKT_ERROR_INVALID_ARGUMENT,
                             "kc_conv_init: %s is 0; it must be at least 1", names[i]);
    if (g->c % g->groups || g->oc % g->groups)
        return ku_fail_to(msg, msg_size, VKT_ERROR_SHAPE,
                         "kc_conv_init: groups (%u) must divide c (%u) and oc (%u)", g->groups,
                         g->c, g->oc);
    /* The shaders compute input coordinates in 32-bit signed integers. */
    if ((uint64_t)g->h + 2ull * g->pad_h + (uint64_t)g->dil_h * g->kh >= (1ull << 31) ||
        (uint64_t)g->w + 2ull * g->pad_w + (uint64_t)g->dil_w * g->kw >= (1ull << 31))
        return ku_fail_to(msg, msg_size, VKT_ERROR_INVALID_ARGUMENT,
                         "kc_conv_init: h %u, w %u with pad %u x %u and dilated kernel "
                         "%u x %u are too large (padded sizes must stay below 2^31)", g->h,
                         g->w, g->pad_h, g->pad_w, g->dil_h * (g->kh - 1) + 1,
                         g->dil_w * (g->kw - 1) + 1);
    uint64_t oh = out_len(g->h, g->pad_h, g->kh, g->dil_h, g->stride_h);
    uint64_t ow = out_len(g->w, g->pad_w, g->kw, g->dil_w, g->stride_w);
    if (oh == 0 || ow == 0)
        return ku_fail_to(msg, msg_size, VKT_ERROR_SHAPE,
                         "kc_conv_init: the kernel %ux%u dilated by %ux%u spans %llux%llu, "
                         "more than the padded input %llux%llu (h %u + 2 pad_h %u, w %u + 2 "
                         "pad_w %u): the output would be empty", g->kh, g->kw, g->dil_h,
                         g->dil_w, (unsigned long long)g->dil_h * (g->kh - 1) + 1,
                         (unsigned long long)g->dil_w * (g->kw - 1) + 1,
                         (unsigned long long)g->h + 2ull * g->pad_h,
                         (unsigned long long)g->w + 2ull * g->pad_w, g->h, g->pad_h, g->w,
                         g->pad_w);
    g->oh = (uint32_t)oh;
    g->ow = (uint32_t)ow;
    return VKT_OK;
}

kc_dims kc_dims_of(const kc_conv *g)
{
    kc_dims d;
    d.P = (uint64_t)g->oh * g->ow;
    d.chw = (uint64_t)g->c * g->h * g->w;
    d.real = (uint64_t)g->c * g->kh * g->kw;
    d.ckk = (d.real + 3) / 4 * 4;
    d.cg = g->c / g->groups;
    d.og = g->oc / g->groups;
    d.ckk_g = d.cg * g->kh * g->kw;
    d.per = d.P * (g->oc + d.ckk);
    return d;
}

uint64_t kc_conv_workspace_elems(const kc_conv *g, uint64_t max_elems)
{
    if (!g || g->oh == 0 || g->ow == 0 || g->groups == 0 || g->n == 0)
        return 0;
    kc_dims d = kc_dims_of(g);
    if (max_elems < d.per + KC_WS_SLACK)
        return 0;
    uint64_t nc = (max_elems - KC_WS_SLACK) / d.per;
    if (nc > g->n)
        nc = g->n;
    return nc * d.per + KC_WS_SLACK;
}

/* ---- argument checks --------------------------------------------------------------- */

/* Whether na elements of `sa` bytes at a and nb of 4 bytes at b share memory. */
static int overlap(vkt_view a, uint64_t na, uint32_t sa, vkt_view b, uint64_t nb)
{
    uint64_t a0 = a.offset * sa, a1 = a0 + na * sa, b0 = b.offset * 4, b1 = b0 + nb * 4;
    return a.buffer == b.buffer && a0 < b1 && b0 < a1;
}

/* Stream and geometry present, the geometry as kc_conv_init leaves it, tensors below
 * 2^32 elements. */
vkt_status kc_check_geometry(vkt_stream *s, const char *fn, const kc_conv *g)
{
    if (!s)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "%s: stream is NULL", fn);
    vkt_context *ctx = s->ctx;
    if (!g)
        return err_fail(ctx->errmsg, VKT_ERROR_INVALID_ARGUMENT, "%s: g is NULL", fn);
    kc_conv copy = *g;
    char msg[VKT_ERRMSG_SIZE];
    vkt_status st = kc_conv_init(&copy, msg, sizeof msg);
    if (st != VKT_OK)
        return err_fail(ctx->errmsg, st, "%s: %s", fn, msg);
    if (copy.oh != g->oh || copy.ow != g->ow)
        return err_fail(ctx->errmsg, VKT_ERROR_INVALID_ARGUMENT,
                        "%s: g->oh, g->ow (%u, %u) do not match the geometry (%u, %u); set "
                        "them with kc_conv_init", fn, g->oh, g->ow, copy.oh, copy.ow);
    kc_dims d = kc_dims_of(g);
    uint64_t counts[3] = {g->n * d.chw, (uint64_t)g->n * g->oc * d.P, g->oc * d.ckk_g};
    const char *names[3] = {"x", "y", "w"};
    for (int i = 0; i < 3; i++)
        if (counts[i] > UINT32_MAX)
            return err_fail(ctx->errmsg, VKT_ERROR_LIMIT,
                            "%s: %s has %llu elements; at most 2^32 - 1 are supported", fn,
                            names[i], (unsigned long long)counts[i]);
    return VKT_OK;
}

/* Every view inside its buffer; none overlapping the workspace. */
static vkt_status check_views(kc_conv_call *c, const kc_named_view *v, int n, vkt_view ws,
                              uint64_t ws_elems)
{
    char what[64];
    vkt_status st = VKT_OK;
    snprintf(what, sizeof what, "%s: workspace", c->fn);
    if (ws_elems > 0 && (st = gpu_check_view(c->ctx, what, ws, ws_elems)) != VKT_OK)
        return st;
    for (int i = 0; i < n; i++) {
        if (!v[i].v)
            continue;
        snprintf(what, sizeof what, "%s: %s", c->fn, v[i].name);
        uint32_t size = v[i].size;
        st = size == 2 ? ku_check_view16(c->ctx, what, *v[i].v, v[i].count)
                       : gpu_check_view(c->ctx, what, *v[i].v, v[i].count);
        if (st != VKT_OK)
            return st;
        if (overlap(*v[i].v, v[i].count, size, ws, ws_elems))
            return err_fail(c->ctx->errmsg, VKT_ERROR_INVALID_ARGUMENT,
                            "%s: %s overlaps the workspace", c->fn, v[i].name);
    }
    return VKT_OK;
}

void kc_conv_gemms(const kc_conv *g, uint32_t nc, kc_gemm out[KC_GEMMS])
{
    kc_dims d = kc_dims_of(g);
    uint64_t R = (uint64_t)nc * d.P;
    out[KC_GEMM_FORWARD] = (kc_gemm){0, 1, d.og, R, d.ckk_g};
    out[KC_GEMM_WEIGHT] = (kc_gemm){0, 0, d.og, d.ckk_g, R};
    out[KC_GEMM_DATA] = (kc_gemm){1, 0, R, d.ckk_g, d.og};
}

/* The context's variant runs conv_implicit.c. */
static int implicit(const vkt_context *ctx)
{
    return ctx->kv[GPU_FAMILY_CONV] == GPU_V_CONV_IMPLICIT;
}

int kc_conv_uses_workspace(const vkt_context *ctx)
{
    return !ctx || !implicit(ctx);
}

vkt_status kc_begin_call(kc_conv_call *c, vkt_stream *s, const char *fn, const kc_conv *g,
                         const kc_named_view *v, int n, vkt_view ws, uint64_t ws_elems)
{
    *c = (kc_conv_call){.s = s, .ctx = s->ctx, .fn = fn, .g = g, .d = kc_dims_of(g),
                        .lp = VKT_DTYPE_FP32, .lv = GPU_V_NONE};
    return check_views(c, v, n, ws, ws_elems);
}

vkt_status kc_conv2d(vkt_stream *s, const kc_conv *g, vkt_view x, vkt_view w,
                     const vkt_view *bias, vkt_view y, vkt_view workspace,
                     uint64_t workspace_elems)
{
    return kc_conv2d_act(s, g, x, w, bias, 0, y, workspace, workspace_elems);
}

vkt_status kc_conv2d_act(vkt_stream *s, const kc_conv *g, vkt_view x, vkt_view w,
                         const vkt_view *bias, int relu, vkt_view y, vkt_view workspace,
                         uint64_t workspace_elems)
{
    kc_conv_call c;
    vkt_status st = kc_check_geometry(s, "kc_conv2d", g);
    if (st != VKT_OK)
        return st;
    kc_dims d = kc_dims_of(g);
    kc_named_view v[4] = {{"x", &x, g->n * d.chw, 4},
                          {"w", &w, g->oc * d.ckk_g, 4},
                          {"bias", bias, g->oc, 4},
                          {"y", &y, (uint64_t)g->n * g->oc * d.P, 4}};
    if ((st = kc_begin_call(&c, s, "kc_conv2d", g, v, 4, workspace, workspace_elems)) != VKT_OK)
        return st;
    if (implicit(s->ctx))
        return kc_implicit_forward(&c, x, w, bias, relu, y);
    return kc_im2col_forward(&c, x, w, bias, relu, y, workspace, workspace_elems);
}

vkt_status kc_conv2d_backward(vkt_stream *s, const kc_conv *g, vkt_view x, vkt_view w,
                              vkt_view dy, const vkt_view *dx, float beta_x,
                              const vkt_view *dw, float beta_w, const vkt_view *db,
                              float beta_b, vkt_view workspace, uint64_t workspace_elems)
{
    return kc_conv2d_backward_act(s, g, x, w, dy, NULL, dx, beta_x, dw, beta_w, db, beta_b,
                                  workspace, workspace_elems);
}

vkt_status kc_conv2d_backward_act(vkt_stream *s, const kc_conv *g, vkt_view x, vkt_view w,
                                  vkt_view dy, const vkt_view *relu_y, const vkt_view *dx,
                                  float beta_x, const vkt_view *dw, float beta_w,
                                  const vkt_view *db, float beta_b, vkt_view workspace,
                                  uint64_t workspace_elems)
{
    const char *fn = "kc_conv2d_backward";
    kc_conv_call c;
    vkt_status st = kc_check_geometry(s, fn, g);
    if (st != VKT_OK)
        return st;
    if (!dx && !dw && !db)
        return err_fail(s->ctx->errmsg, VKT_ERROR_INVALID_ARGUMENT,
                        "%s: none of dx, dw, db is wanted", fn);
    kc_dims d = kc_dims_of(g);
    uint64_t nx = g->n * d.chw, nw = g->oc * d.ckk_g, ny = (uint64_t)g->n * g->oc * d.P;
    kc_named_view v[7] = {{"x", &x, nx, 4},  {"w", &w, nw, 4},  {"dy", &dy, ny, 4},
                          {"dx", dx, nx, 4}, {"dw", dw, nw, 4}, {"db", db, g->oc, 4},
                          {"relu_y", relu_y, ny, 4}};
    if ((st = kc_begin_call(&c, s, fn, g, v, 7, workspace, workspace_elems)) != VKT_OK)
        return st;
    kc_conv_grads a = {.x = x, .w = w, .dy = dy, .relu_y = relu_y, .dx = dx, .dw = dw,
                       .db = db, .beta_x = beta_x, .beta_w = beta_w, .beta_b = beta_b};
    if (implicit(s->ctx))
        return kc_implicit_backward(&c, &a);
    return kc_im2col_backward(&c, &a, workspace, workspace_elems);
}
