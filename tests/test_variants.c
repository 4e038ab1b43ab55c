/* test_variants.c - the kernel variants' table (engine/gpu/variants.c) and the device
 * profile (engine/gpu/profile.c).
 * (a) Every row lavapipe can run (its requirements met by the device: subgroups of 8
 *     with shuffles, storage texel buffers, 16-bit storage, float16; no cooperative
 *     matrices: test_gemm_lowp.c checks those rows' choice and, on Mesa 26, runs them) is forced
 *     through the kernel filter and its family's kernels are checked against the CPU
 *     references on random inputs of awkward shapes. A family without a check here, or a
 *     row lavapipe runs that no check ran, fails.
 * (b) The choice on stated devices (an H100, an RDNA3 card, an Arc card, lavapipe without
 *     shuffles or texel formats): each family gets a row, the one that suits its style.
 * (c) The filter: styles, variant names, an unknown term, two variants of one family, a
 *     variant the device cannot run, a style against the options' style. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "gpu/gpu.h"
#include "kernels/attention.h"
#include "kernels/conv.h"
#include "kernels/norm.h"
#include "kernels/ref.h"
#include "optim/optim.h"

static vkt_context *ctx;
static vkt_stream *s;
static const char *row_name;

/* A guarded device tensor with a random host copy (float) and a double copy. */
typedef struct tens {
    th_buf b;
    uint64_t n;
    float *f;
    double *d;
} tens;

static tens tens_new(uint64_t n, float lo, float hi)
{
    tens t = {th_buf_create(ctx, n), n, th_alloc_floats(n), calloc(n, sizeof(double))};
    th_fill_uniform(t.f, n, lo, hi);
    for (uint64_t i = 0; i < n; i++)
        t.d[i] = t.f[i];
    th_buf_write(&t.b, t.f);
    return t;
}

static void tens_free(tens *t)
{
    th_buf_destroy(&t->b);
    free(t->f);
    free(t->d);
}

/* The device tensor against `want` (double, n elements), and its guards. */
static void expect(const char *what, tens *t, const double *want, float rtol, float atol)
{
    float *got = th_alloc_floats(t->n), *w = th_alloc_floats(t->n);
    th_buf_read(&t->b, got);
    for (uint64_t i = 0; i < t->n; i++)
        w[i] = (float)want[i];
    char name[160];
    snprintf(name, sizeof name, "%s: %s", row_name, what);
    th_compare(name, got, w, t->n, rtol, atol);
    th_buf_guards_ok(&t->b, name);
    free(got);
    free(w);
}

static int run(void)
{
    return TH_OK(ctx, vkt_stream_run(s));
}

/* ---- one check per family -------------------------------------------------------------- */

/* Four transposes x beta 0, 1 and another value, shapes off every tile size. */
static void check_gemm(void)
{
    static const uint32_t shapes[][3] = {{1, 1, 1}, {37, 19, 53}, {65, 130, 7}, {128, 10, 300},
                                         {3, 200, 513}};
    static const float betas[3] = {0.0f, 1.0f, -0.75f};
    for (uint32_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int t = 0; t < 4; t++)
            for (int bi = 0; bi < 3; bi++) {
                uint32_t m = shapes[i][0], n = shapes[i][1], k = shapes[i][2];
                int ta = t >> 1, tb = t & 1;
                tens a = tens_new((uint64_t)m * k, -1, 1), b = tens_new((uint64_t)k * n, -1, 1);
                tens c = tens_new((uint64_t)m * n, -1, 1);
                float *want = th_alloc_floats(c.n);
                memcpy(want, c.f, c.n * 4);
                vkt_gemm_desc d = {.trans_a = ta, .trans_b = tb, .m = m, .n = n, .k = k,
                                   .alpha = 1.25f, .beta = betas[bi], .a = th_view(&a.b),
                                   .b = th_view(&b.b), .c = th_view(&c.b)};
                TH_OK(ctx, vkt_stream_reset(s));
                if (TH_OK(ctx, vkt_gemm(s, &d)) && run()) {
                    kref_gemm(ta, tb, m, n, k, 1.25f, a.f, 0, b.f, 0, betas[bi], want, 0);
                    for (uint64_t e = 0; e < c.n; e++)
                        c.d[e] = want[e];
                    char what[96];
                    snprintf(what, sizeof what, "gemm ta=%d tb=%d %ux%ux%u beta=%g", ta, tb, m,
                             n, k, (double)betas[bi]);
                    expect(what, &c, c.d, 1e-5f, 1e-6f * (float)k + 1e-6f);
                }
                free(want);
                tens_free(&a), tens_free(&b), tens_free(&c);
            }
}

/* 16-bit inputs (the family's type), C fp32 and 16-bit, four transposes; the thorough
 * checks and the tolerances' derivation are test_gemm_lowp.c's. */
static void check_gemm16(vkt_dtype t)
{
    static const uint32_t shapes[][3] = {{1, 1, 1}, {37, 19, 53}, {65, 34, 17}};
    for (uint32_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int tr = 0; tr < 4; tr++) {
            uint32_t m = shapes[i][0], n = shapes[i][1], k = shapes[i][2];
            int ta = tr >> 1, tb = tr & 1;
            vkt_dtype ct = tr == 3 ? t : VKT_DTYPE_FP32;
            uint64_t na = (uint64_t)m * k, nb = (uint64_t)k * n, nc = (uint64_t)m * n;
            uint16_t *h = malloc((na + nb) * 2), *c16 = malloc(nc * 2);
            float *f = th_alloc_floats(na + nb), *want = th_alloc_floats(nc);
            float *got = th_alloc_floats(nc);
            th_fill_uniform(f, na + nb, -1, 1);
            vkt_convert(VKT_DTYPE_FP32, f, t, h, na + nb);
            th_buf ab = th_buf_create(ctx, (na + nb + 1) / 2), cb = th_buf_create(ctx, nc);
            TH_OK(ctx, vkt_buffer_write(ab.buffer, ab.offset * 4, h, (na + nb) * 2));
            vkt_gemm_desc d = {.trans_a = ta, .trans_b = tb, .m = m, .n = n, .k = k,
                               .alpha = 1.25f, .a = {ab.buffer, ab.offset * 2},
                               .b = {ab.buffer, ab.offset * 2 + na}, .c = th_view(&cb),
                               .a_type = t, .b_type = t, .c_type = ct};
            if (ct != VKT_DTYPE_FP32)
                d.c.offset *= 2;
            TH_OK(ctx, vkt_stream_reset(s));
            if (TH_OK(ctx, vkt_gemm(s, &d)) && run()) {
                kref_gemm_typed(ta, tb, m, n, k, 1.25f, t, h, 0, h + na, 0, 0.0f,
                                VKT_DTYPE_FP32, want, 0);
                if (ct == VKT_DTYPE_FP32) {
                    th_buf_read(&cb, got);
                } else {
                    TH_OK(ctx, vkt_buffer_read(cb.buffer, d.c.offset * 2, c16, nc * 2));
                    vkt_convert(ct, c16, VKT_DTYPE_FP32, got, nc);
                }
                char what[96];
                snprintf(what, sizeof what, "%s: gemm %s->%s ta=%d tb=%d %ux%ux%u", row_name,
                         vkt_dtype_name(t), vkt_dtype_name(ct), ta, tb, m, n, k);
                /* |a|, |b| <= 1: fp16 arithmetic's 17 * 2^-11 per unit of K bounds all */
                th_compare(what, got, want, nc, ct == VKT_DTYPE_FP32 ? 1e-5f : 1.0f / 128,
                           17.0f / 2048 * (float)k);
                th_buf_guards_ok(&cb, what);
            }
            th_buf_destroy(&ab), th_buf_destroy(&cb);
            free(h), free(c16), free(f), free(want), free(got);
        }
}

static void check_gemm_f16(void) { check_gemm16(VKT_DTYPE_FP16); }
static void check_gemm_bf16(void) { check_gemm16(VKT_DTYPE_BF16); }

/* A strided, padded, grouped convolution with a bias: forward, then dx, dw, db. */
static void check_conv(void)
{
    kc_conv g = {.n = 3, .c = 4, .h = 11, .w = 9, .oc = 6, .kh = 3, .kw = 2, .stride_h = 2,
                 .stride_w = 1, .pad_h = 1, .pad_w = 1, .dil_h = 1, .dil_w = 2, .groups = 2};
    if (!TH_OK(NULL, kc_conv_init(&g, NULL, 0)))
        return;
    uint64_t nx = (uint64_t)g.n * g.c * g.h * g.w, ny = (uint64_t)g.n * g.oc * g.oh * g.ow;
    uint64_t nw = (uint64_t)g.oc * (g.c / g.groups) * g.kh * g.kw;
    tens x = tens_new(nx, -1, 1), w = tens_new(nw, -1, 1), bias = tens_new(g.oc, -1, 1);
    tens y = tens_new(ny, -1, 1), dy = tens_new(ny, -1, 1), dx = tens_new(nx, -1, 1);
    tens dw = tens_new(nw, -1, 1), db = tens_new(g.oc, -1, 1);
    uint64_t wn = kc_conv_workspace_elems(&g, 1u << 24);
    tens ws = tens_new(wn, 0, 0);
    vkt_view vb = th_view(&bias.b), vdx = th_view(&dx.b), vdw = th_view(&dw.b);
    vkt_view vdb = th_view(&db.b);
    TH_OK(ctx, vkt_stream_reset(s));
    TH_OK(ctx, kc_conv2d(s, &g, th_view(&x.b), th_view(&w.b), &vb, th_view(&y.b),
                         th_view(&ws.b), wn));
    TH_OK(ctx, kc_conv2d_backward(s, &g, th_view(&x.b), th_view(&w.b), th_view(&dy.b), &vdx,
                                  0.0f, &vdw, 0.0f, &vdb, 0.0f, th_view(&ws.b), wn));
    if (run()) {
        double *ry = calloc(ny, sizeof *ry), *rdx = calloc(nx, sizeof *rdx);
        double *rdw = calloc(nw, sizeof *rdw), *rdb = calloc(g.oc, sizeof *rdb);
        kc_ref_conv2d(&g, x.d, w.d, bias.d, ry);
        kc_ref_conv2d_backward(&g, x.d, w.d, dy.d, rdx, rdw, rdb);
        expect("conv2d y", &y, ry, 1e-5f, 1e-5f);
        expect("conv2d dx", &dx, rdx, 1e-5f, 1e-5f);
        expect("conv2d dw", &dw, rdw, 1e-5f, 1e-4f);
        expect("conv2d db", &db, rdb, 1e-5f, 1e-4f);
        free(ry), free(rdx), free(rdw), free(rdb);
    }
    tens_free(&x), tens_free(&w), tens_free(&bias), tens_free(&y), tens_free(&dy);
    tens_free(&dx), tens_free(&dw), tens_free(&db), tens_free(&ws);
}

/* A 16-bit copy of t (rounded to type dt) in a buffer of its own; t.d becomes the
 * rounded values (what the reference multiplies). */
static th_buf round16(tens *t, vkt_dtype dt)
{
    th_buf b = th_buf_create(ctx, (t->n + 1) / 2);
    uint16_t *bits = calloc(t->n + 1, 2);
    float *back = th_alloc_floats(t->n);
    vkt_convert(VKT_DTYPE_FP32, t->f, dt, bits, t->n);
    vkt_convert(dt, bits, VKT_DTYPE_FP32, back, t->n);
    for (uint64_t i = 0; i < t->n; i++)
        t->d[i] = back[i];
    th_buf_write(&b, (const float *)bits);
    free(bits);
    free(back);
    return b;
}

static vkt_view view16(const th_buf *b)
{
    vkt_view v = th_view(b);
    return (vkt_view){v.buffer, v.offset * 2};
}

/* check_conv's convolution on fp16 x, w, dy: the products of the 16-bit values are exact
 * in fp32, so only the sums' roundings remain (test_conv_lowp.c states the bounds; here a
 * plain (K + 2) 2^-24 relative to outputs of magnitude about sqrt(K)). */
static void check_conv_lowp(void)
{
    kc_conv g = {.n = 3, .c = 4, .h = 11, .w = 9, .oc = 6, .kh = 3, .kw = 2, .stride_h = 2,
                 .stride_w = 1, .pad_h = 1, .pad_w = 1, .dil_h = 1, .dil_w = 2, .groups = 2};
    if (!TH_OK(NULL, kc_conv_init(&g, NULL, 0)))
        return;
    uint64_t nx = (uint64_t)g.n * g.c * g.h * g.w, ny = (uint64_t)g.n * g.oc * g.oh * g.ow;
    uint64_t nw = (uint64_t)g.oc * (g.c / g.groups) * g.kh * g.kw;
    tens x = tens_new(nx, -1, 1), w = tens_new(nw, -1, 1), bias = tens_new(g.oc, -1, 1);
    tens y = tens_new(ny, -1, 1), dy = tens_new(ny, -1, 1), dx = tens_new(nx, -1, 1);
    tens dw = tens_new(nw, -1, 1), db = tens_new(g.oc, -1, 1);
    th_buf x16 = round16(&x, VKT_DTYPE_FP16), w16 = round16(&w, VKT_DTYPE_FP16);
    th_buf dy16 = round16(&dy, VKT_DTYPE_FP16);
    uint64_t wn = kc_conv_lowp_workspace_elems(ctx, &g);
    tens ws = tens_new(wn ? wn : 1, 0, 0);
    vkt_view vb = th_view(&bias.b), vdx = th_view(&dx.b), vdw = th_view(&dw.b);
    vkt_view vdb = th_view(&db.b);
    TH_OK(ctx, vkt_stream_reset(s));
    TH_OK(ctx, kc_conv2d_lowp(s, &g, VKT_DTYPE_FP16, view16(&x16), view16(&w16), &vb,
                              0, th_view(&y.b), th_view(&ws.b), wn));
    TH_OK(ctx, kc_conv2d_backward_lowp(s, &g, VKT_DTYPE_FP16, view16(&x16), view16(&w16),
                                       view16(&dy16), NULL, &vdx, 0.0f, &vdw, 0.0f, &vdb,
                                       0.0f, th_view(&ws.b), wn));
    if (run()) {
        double *ry = calloc(ny, sizeof *ry), *rdx = calloc(nx, sizeof *rdx);
        double *rdw = calloc(nw, sizeof *rdw), *rdb = calloc(g.oc, sizeof *rdb);
        kc_ref_conv2d(&g, x.d, w.d, bias.d, ry);
        kc_ref_conv2d_backward(&g, x.d, w.d, dy.d, rdx, rdw, rdb);
        float k_w = (float)(ny / g.oc + 2) * 0x1p-24f;
        expect("conv2d fp16 y", &y, ry, 1e-5f, 1e-5f);
        expect("conv2d fp16 dx", &dx, rdx, 1e-5f, 1e-5f);
        expect("conv2d fp16 dw", &dw, rdw, k_w, 8.0f * k_w);
        expect("conv2d fp16 db", &db, rdb, k_w, 8.0f * k_w);
        free(ry), free(rdx), free(rdw), free(rdb);
    }
    th_buf_destroy(&x16), th_buf_destroy(&w16), th_buf_destroy(&dy16);
    tens_free(&x), tens_free(&w), tens_free(&bias), tens_free(&y), tens_free(&dy);
    tens_free(&dx), tens_free(&dw), tens_free(&db), tens_free(&ws);
}

/* Causal attention without dropout, t and d off the row blocks and tiles: y, what the
 * variant saves (probs or the row logsumexps), dqkv. */
static void check_attention(void)
{
    const uint32_t b = 2, t = 13, heads = 3, d = 6;
    uint64_t nq = (uint64_t)b * t * 3 * heads * d, ny = (uint64_t)b * t * heads * d;
    uint64_t np = ka_attention_saved_elems(ctx, b, t, heads, d);
    uint64_t nw = ka_attention_workspace_elems(ctx, b, t, heads, d);
    int lse = ka_attention_plan_for(ctx, b, t, heads, d).saved == KA_SAVED_LSE;
    tens qkv = tens_new(nq, -1, 1), y = tens_new(ny, 0, 0), saved = tens_new(np, 0, 0);
    tens dy = tens_new(ny, -1, 1), dqkv = tens_new(nq, 0, 0), ws = tens_new(nw, 0, 0);
    vkt_view none = {NULL, 0};
    TH_OK(ctx, vkt_stream_reset(s));
    TH_OK(ctx, ka_attention(s, th_view(&qkv.b), th_view(&y.b), th_view(&saved.b), none, b, t,
                            heads, d, 0.0f, 0, 0, 0));
    TH_OK(ctx, ka_attention_backward(s, th_view(&qkv.b), th_view(&y.b), th_view(&saved.b), none,
                                     th_view(&dy.b), th_view(&dqkv.b), 0.0f, th_view(&ws.b), b,
                                     t, heads, d, 0.0f, 0, 0, 0));
    if (run()) {
        double *ry = calloc(ny, sizeof *ry), *rp = calloc(np, sizeof *rp);
        double *rdq = calloc(nq, sizeof *rdq);
        ka_ref_attention(qkv.d, ry, b, t, heads, d, 0.0f, 0, 0, 0);
        if (lse)
            ka_ref_attention_lse(qkv.d, rp, b, t, heads, d);
        else
            ka_ref_attention_probs(qkv.d, rp, b, t, heads, d);
        ka_ref_attention_backward(qkv.d, dy.d, rdq, b, t, heads, d, 0.0f, 0, 0, 0);
        expect("attention y", &y, ry, 1e-4f, 1e-5f);
        expect(lse ? "attention lse" : "attention probs", &saved, rp, 1e-4f, 1e-6f);
        expect("attention dqkv", &dqkv, rdq, 1e-4f, 1e-5f);
        free(ry), free(rp), free(rdq);
    }
    tens_free(&qkv), tens_free(&y), tens_free(&saved), tens_free(&dy), tens_free(&dqkv);
    tens_free(&ws);
}

/* check_attention on fp16 q, k, v and dy: the kernels widen the 16-bit values exactly and
 * compute in fp32, so the fp32 tolerances hold against the reference on the rounded values
 * (test_attention_lowp.c states the bounds against the unrounded ones). */
static void check_attention_lowp(void)
{
    const uint32_t b = 2, t = 13, heads = 3, d = 6;
    uint64_t nq = (uint64_t)b * t * 3 * heads * d, ny = (uint64_t)b * t * heads * d;
    uint64_t np = ka_attention_lowp_saved_elems(ctx, b, t, heads, d);
    uint64_t nw = ka_attention_lowp_workspace_elems(ctx, b, t, heads, d);
    tens qkv = tens_new(nq, -1, 1), y = tens_new(ny, 0, 0), saved = tens_new(np, 0, 0);
    tens dy = tens_new(ny, -1, 1), dqkv = tens_new(nq, 0, 0), ws = tens_new(nw, 0, 0);
    th_buf q16 = round16(&qkv, VKT_DTYPE_FP16), dy16 = round16(&dy, VKT_DTYPE_FP16);
    vkt_view none = {NULL, 0};
    TH_OK(ctx, vkt_stream_reset(s));
    TH_OK(ctx, ka_attention_lowp(s, VKT_DTYPE_FP16, view16(&q16), th_view(&y.b),
                                 th_view(&saved.b), none, b, t, heads, d, 0.0f, 0, 0, 0));
    TH_OK(ctx, ka_attention_backward_lowp(s, VKT_DTYPE_FP16, view16(&q16), th_view(&y.b),
                                          th_view(&saved.b), none, view16(&dy16),
                                          th_view(&dqkv.b), 0.0f, th_view(&ws.b), b, t, heads,
                                          d, 0.0f, 0, 0, 0));
    if (run()) {
        double *ry = calloc(ny, sizeof *ry), *rdq = calloc(nq, sizeof *rdq);
        ka_ref_attention(qkv.d, ry, b, t, heads, d, 0.0f, 0, 0, 0);
        ka_ref_attention_backward(qkv.d, dy.d, rdq, b, t, heads, d, 0.0f, 0, 0, 0);
        /* coopmat and frag round the probabilities multiplying v to fp16 (README, "16-bit
         * attention"): y moves by at most 2 2^-11 max |v| (|v| <= 1), the backward's D_i =
         * dy_i . y_i by d times that (|dy| <= 1), dq and dk by 4 t / sqrt(d) times D's
         * (test_attention_lowp.c (1')) */
        gpu_variant lv = ctx->kv[GPU_FAMILY_ATTENTION_LOWP];
        int rp = lv == GPU_V_ATTENTION_LOWP_COOPMAT || lv == GPU_V_ATTENTION_LOWP_FRAG;
        float ya = rp ? 1e-5f + 0x1p-10f : 1e-5f;
        float ga = rp ? 1e-5f + 4.0f * t * d * 0x1p-10f / sqrtf((float)d) : 1e-5f;
        expect("attention fp16 y", &y, ry, 1e-4f, ya);
        expect("attention fp16 dqkv", &dqkv, rdq, 1e-4f, ga);
        free(ry), free(rdq);
    }
    th_buf_destroy(&q16), th_buf_destroy(&dy16);
    tens_free(&qkv), tens_free(&y), tens_free(&saved), tens_free(&dy), tens_free(&dqkv);
    tens_free(&ws);
}

/* Rows: a sum along the middle axis, a log-softmax and its backward, a layer norm. */
static void check_rows(void)
{
    const vkt_shape sh = {3, {5, 301, 7}};
    const uint32_t rows = 37, cols = 1031, lr = 19, lc = 131;
    tens x = tens_new(5 * 301 * 7, -1, 1), sum = tens_new(5 * 7, 0, 0);
    tens sx = tens_new((uint64_t)rows * cols, -4, 4), sy = tens_new((uint64_t)rows * cols, 0, 0);
    tens sdy = tens_new((uint64_t)rows * cols, -1, 1), sdx = tens_new((uint64_t)rows * cols, 0, 0);
    tens lx = tens_new((uint64_t)lr * lc, -2, 2), gam = tens_new(lc, 0.5f, 1.5f);
    tens bet = tens_new(lc, -1, 1), ly = tens_new((uint64_t)lr * lc, 0, 0);
    tens st = tens_new(2 * lr, 0, 0);
    TH_OK(ctx, vkt_stream_reset(s));
    TH_OK(ctx, vkt_reduce(s, VKT_REDUCE_SUM, th_view(&x.b), &sh, 1, th_view(&sum.b)));
    TH_OK(ctx, vkt_softmax_rows(s, 1, th_view(&sx.b), th_view(&sy.b), rows, cols));
    TH_OK(ctx, vkt_softmax_rows_backward(s, 1, th_view(&sy.b), th_view(&sdy.b),
                                         th_view(&sdx.b), rows, cols));
    TH_OK(ctx, kn_layernorm(s, th_view(&lx.b), th_view(&gam.b), th_view(&bet.b),
                            th_view(&ly.b), th_view(&st.b), lr, lc, 1e-5f));
    if (run()) {
        float *f = th_alloc_floats(sx.n), *f2 = th_alloc_floats(sx.n);
        double *dd = calloc(sx.n, sizeof *dd);
        kref_reduce(VKT_REDUCE_SUM, x.f, &sh, 1, f);
        for (uint64_t i = 0; i < sum.n; i++)
            dd[i] = f[i];
        expect("reduce sum", &sum, dd, 1e-5f, 1e-5f);
        kref_softmax(1, sx.f, f, rows, cols);
        for (uint64_t i = 0; i < sy.n; i++)
            dd[i] = f[i];
        expect("log_softmax", &sy, dd, 1e-5f, 1e-5f);
        kref_softmax_backward(1, f, sdy.f, f2, rows, cols);
        for (uint64_t i = 0; i < sdx.n; i++)
            dd[i] = f2[i];
        expect("log_softmax backward", &sdx, dd, 1e-4f, 1e-5f);
        kn_ref_layernorm(lx.d, gam.d, bet.d, dd, lr, lc, 1e-5);
        expect("layernorm", &ly, dd, 1e-4f, 1e-5f);
        free(f), free(f2), free(dd);
    }
    tens_free(&x), tens_free(&sum), tens_free(&sx), tens_free(&sy), tens_free(&sdy);
    tens_free(&sdx), tens_free(&lx), tens_free(&gam), tens_free(&bet), tens_free(&ly);
    tens_free(&st);
}

/* A unary op and its derivative, a broadcast binary op and its gradient. */
static void check_elementwise(void)
{
    const uint64_t n = 1031;
    const vkt_shape as = {3, {7, 1, 13}}, bs = {2, {5, 13}}; /* out [7, 5, 13] */
    tens x = tens_new(n, -4, 4), y = tens_new(n, 0, 0), dy = tens_new(n, -1, 1);
    tens dx = tens_new(n, 0, 0), a = tens_new(7 * 13, -1, 1), b = tens_new(5 * 13, -1, 1);
    tens o = tens_new(7 * 5 * 13, 0, 0), od = tens_new(7 * 5 * 13, -1, 1);
    tens gb = tens_new(5 * 13, 0, 0);
    TH_OK(ctx, vkt_stream_reset(s));
    TH_OK(ctx, vkt_unary(s, VKT_UNARY_GELU, 0.0f, th_view(&x.b), th_view(&y.b), n));
    TH_OK(ctx, vkt_unary_backward(s, VKT_UNARY_GELU, 0.0f, th_view(&x.b), th_view(&dy.b),
                                  th_view(&dx.b), n));
    TH_OK(ctx, vkt_binary(s, VKT_BINARY_MUL, th_view(&a.b), &as, th_view(&b.b), &bs,
                          th_view(&o.b)));
    TH_OK(ctx, vkt_binary_backward(s, VKT_BINARY_MUL, 1, th_view(&a.b), &as, th_view(&b.b), &bs,
                                   th_view(&od.b), th_view(&gb.b)));
    if (run()) {
        float *f = th_alloc_floats(n);
        double *dd = calloc(n, sizeof *dd); /* n > o.n */
        kref_unary(VKT_UNARY_GELU, 0.0f, x.f, f, n);
        for (uint64_t i = 0; i < n; i++)
            dd[i] = f[i];
        expect("gelu", &y, dd, 1e-5f, 1e-6f);
        kref_unary_backward(VKT_UNARY_GELU, 0.0f, x.f, dy.f, f, n);
        for (uint64_t i = 0; i < n; i++)
            dd[i] = f[i];
        expect("gelu backward", &dx, dd, 1e-5f, 1e-6f);
        kref_binary(VKT_BINARY_MUL, a.f, &as, b.f, &bs, f);
        for (uint64_t i = 0; i < o.n; i++)
            dd[i] = f[i];
        expect("mul broadcast", &o, dd, 1e-6f, 1e-7f);
        kref_binary_backward(VKT_BINARY_MUL, 1, a.f, &as, b.f, &bs, od.f, f);
        for (uint64_t i = 0; i < gb.n; i++)
            dd[i] = f[i];
        expect("mul gradient of b", &gb, dd, 1e-5f, 1e-6f);
        free(f), free(dd);
    }
    tens_free(&x), tens_free(&y), tens_free(&dy), tens_free(&dx), tens_free(&a);
    tens_free(&b), tens_free(&o), tens_free(&od), tens_free(&gb);
}

/* Max pooling (strided, padded) and average pooling, forward and backward. */
static void check_pool(void)
{
    for (int max = 0; max < 2; max++) {
        kc_pool p = {.n = 2, .c = 3, .h = 11, .w = 10, .kh = 3, .kw = 2, .stride_h = 2,
                     .stride_w = 3, .pad_h = 1, .pad_w = 1, .max = max};
        if (!TH_OK(NULL, kc_pool_init(&p, NULL, 0)))
            return;
        uint64_t nx = (uint64_t)p.n * p.c * p.h * p.w, ny = (uint64_t)p.n * p.c * p.oh * p.ow;
        tens x = tens_new(nx, -1, 1), y = tens_new(ny, 0, 0), dy = tens_new(ny, -1, 1);
        tens dx = tens_new(nx, 0, 0), sv = tens_new(ny, 0, 0);
        vkt_view vs = th_view(&sv.b);
        TH_OK(ctx, vkt_stream_reset(s));
        TH_OK(ctx, kc_pool2d(s, &p, th_view(&x.b), th_view(&y.b), max ? &vs : NULL));
        TH_OK(ctx, kc_pool2d_backward(s, &p, max ? &vs : NULL, th_view(&dy.b), th_view(&dx.b),
                                      0.0f));
        if (run()) {
            double *ry = calloc(ny, sizeof *ry), *rdx = calloc(nx, sizeof *rdx);
            kc_ref_pool2d(&p, x.d, ry);
            kc_ref_pool2d_backward(&p, x.d, dy.d, rdx);
            expect(max ? "max pool y" : "average pool y", &y, ry, 1e-6f, 1e-6f);
            expect(max ? "max pool dx" : "average pool dx", &dx, rdx, 1e-5f, 1e-6f);
            free(ry), free(rdx);
        }
        tens_free(&x), tens_free(&y), tens_free(&dy), tens_free(&dx), tens_free(&sv);
    }
}

/* A lookup with repeated ids, and the backward that sums them. */
static void check_embedding(void)
{
    const uint32_t n = 37, vocab = 11, dim = 13;
    tens ids = tens_new(n, 0, 0), table = tens_new((uint64_t)vocab * dim, -1, 1);
    tens y = tens_new((uint64_t)n * dim, 0, 0), dy = tens_new((uint64_t)n * dim, -1, 1);
    tens dt = tens_new((uint64_t)vocab * dim, 0, 0);
    for (uint32_t i = 0; i < n; i++)
        ids.f[i] = (float)(ids.d[i] = (double)(th_rand_u64() % vocab));
    th_buf_write(&ids.b, ids.f);
    TH_OK(ctx, vkt_stream_reset(s));
    TH_OK(ctx, kn_embedding(s, th_view(&ids.b), th_view(&table.b), th_view(&y.b), n, vocab, dim));
    TH_OK(ctx, kn_embedding_backward(s, th_view(&ids.b), th_view(&dy.b), th_view(&dt.b), 0.0f,
                                     n, vocab, dim));
    if (run()) {
        double *ry = calloc(y.n, sizeof *ry), *rdt = calloc(dt.n, sizeof *rdt);
        kn_ref_embedding(ids.d, table.d, ry, n, vocab, dim);
        kn_ref_embedding_backward(ids.d, dy.d, rdt, n, vocab, dim);
        expect("embedding y", &y, ry, 0, 0);
        expect("embedding dtable", &dt, rdt, 1e-5f, 1e-6f);
        free(ry), free(rdt);
    }
    tens_free(&ids), tens_free(&table), tens_free(&y), tens_free(&dy), tens_free(&dt);
}

/* Three AdamW steps with clipping over an odd number of parameters. */
static void check_optimizer(void)
{
    const uint64_t n = 1031;
    vkt_optimizer_options o = {.kind = VKT_OPTIMIZER_ADAMW, .lr = 0.01f, .weight_decay = 0.1f,
                               .clip_norm = 0.5f};
    vkt_optimizer_options r;
    vkt_optimizer *opt = NULL;
    if (!TH_OK(ctx, vkt_optimizer_create(ctx, &o, n, &opt)) ||
        !TH_CHECK(optim_resolve(NULL, "test", &o, &r) == VKT_OK, "options resolve"))
        return;
    tens p = tens_new(n, -1, 1), g = tens_new(n, -1, 1);
    float *rp = th_alloc_floats(n), *rm = calloc(n, 4), *rv = calloc(n, 4);
    memcpy(rp, p.f, n * 4);
    vkt_stream *os = th_stream(ctx, 0);
    TH_OK(ctx, vkt_optimizer_record(opt, os, th_view(&p.b), th_view(&g.b)));
    for (uint64_t step = 0; step < 3; step++) {
        th_fill_uniform(g.f, n, -1, 1);
        th_buf_write(&g.b, g.f);
        TH_OK(ctx, vkt_optimizer_set_step(opt, step));
        TH_OK(ctx, vkt_stream_run(os));
        optim_ref_step(&r, step, rp, g.f, rm, rv, n);
    }
    for (uint64_t i = 0; i < n; i++)
        p.d[i] = rp[i];
    expect("adamw, 3 steps", &p, p.d, 2e-6f, 1e-6f);
    vkt_stream_destroy(os);
    vkt_optimizer_destroy(opt);
    tens_free(&p), tens_free(&g);
    free(rp), free(rm), free(rv);
}

typedef void (*family_check)(void);
static const family_check k_checks[GPU_FAMILY_COUNT] = {
    [GPU_FAMILY_GEMM] = check_gemm,           [GPU_FAMILY_CONV] = check_conv,
    [GPU_FAMILY_CONV_LOWP] = check_conv_lowp,
    [GPU_FAMILY_GEMM_F16] = check_gemm_f16,   [GPU_FAMILY_GEMM_BF16] = check_gemm_bf16,
    [GPU_FAMILY_ATTENTION] = check_attention, [GPU_FAMILY_ROWS] = check_rows,
    [GPU_FAMILY_ATTENTION_LOWP] = check_attention_lowp,
    [GPU_FAMILY_ELEMENTWISE] = check_elementwise, [GPU_FAMILY_POOL] = check_pool,
    [GPU_FAMILY_EMBEDDING] = check_embedding, [GPU_FAMILY_OPTIMIZER] = check_optimizer,
};

/* (a): every row lavapipe runs, forced, against the references. */
/* (a) runs in K_SHARDS parts, "shard0" to "shard3" (`--part`, harness.h; tests/CMakeLists.txt
 * lists the same): shard k checks the rows v with v % K_SHARDS == k, so that a new row is in
 * one of them. Each row compiles its family's pipelines, nearly all of the time when no
 * cache has them. */
#define K_SHARDS 4

static void check_every_row(void)
{
    int shard_ran[K_SHARDS] = {0}, any = 0;
    for (int k = 0; k < K_SHARDS; k++) {
        char part[16];
        snprintf(part, sizeof part, "shard%d", k);
        any |= shard_ran[k] = th_part(part);
    }
    if (!any)
        return;
    vkt_context *probe = th_context(VKT_KERNELS_AUTO);
    uint32_t ran = 0, cooperative = 0, rows = 0;
    for (int v = 0; v < GPU_VARIANT_COUNT; v++) {
        const gpu_variant_row *row = gpu_variant_row_of((gpu_variant)v);
        char why[256];
        if (!shard_ran[v % K_SHARDS])
            continue;
        rows++;
        if (!TH_CHECK(k_checks[row->family], "family %s has a check in test_variants.c",
                      gpu_family_name(row->family)))
            continue;
        if (!gpu_variant_runs(row, &probe->profile, why, sizeof why)) {
            printf("  %s: not on this device (it lacks %s)\n", row->name, why);
            /* lavapipe lacks only what Mesa 22 has no support for */
            TH_CHECK(row->needs & GPU_CAP_COOPERATIVE_MATRIX,
                     "lavapipe runs %s (it lacks %s)", row->name, why);
            cooperative += (row->needs & GPU_CAP_COOPERATIVE_MATRIX) != 0;
            continue;
        }
        ctx = th_context_filter(row->name);
        TH_CHECK(ctx->kv[row->family] == (gpu_variant)v, "%s forced: the context runs it",
                 row->name);
        s = th_stream(ctx, 0);
        row_name = row->name;
        k_checks[row->family]();
        vkt_stream_destroy(s);
        th_context_release(ctx);
        ran++;
        printf("  %s: checked (%s)\n", row->name, gpu_family_name(row->family));
    }
    TH_CHECK(rows > 0 && ran + cooperative + 1 >= rows, "%u of %u variants ran on lavapipe "
             "(%u need cooperative matrices)", ran, rows, cooperative);
}

/* ---- (b) stated devices ------------------------------------------------------------------ */

static const char *chosen_name(const gpu_variant *c, gpu_family f)
{
    const gpu_variant_row *row = gpu_variant_row_of(c[f]);
    return row ? row->name : "(none)";
}

static void check_stated(void)
{
    struct {
        const char *name;
        vkt_device_type type;
        uint32_t cus, shared, subgroup;
    } devs[] = {
        {"H100", VKT_DEVICE_TYPE_DISCRETE_GPU, 132, 48 * 1024, 32},
        {"RX 7900 XTX", VKT_DEVICE_TYPE_DISCRETE_GPU, 96, 64 * 1024, 64},
        {"Arc A770", VKT_DEVICE_TYPE_DISCRETE_GPU, 32, 64 * 1024, 32},
        {"a laptop iGPU", VKT_DEVICE_TYPE_INTEGRATED_GPU, 6, 32 * 1024, 16},
    };
    for (size_t i = 0; i < sizeof devs / sizeof devs[0]; i++) {
        gpu_profile p;
        gpu_variant c[GPU_FAMILY_COUNT];
        gpu_profile_stated(devs[i].type, devs[i].cus, devs[i].shared, devs[i].subgroup, &p);
        TH_CHECK(p.compute_units == devs[i].cus && p.shared_memory == devs[i].shared &&
                     p.subgroup_size == devs[i].subgroup && p.style == VKT_KERNELS_GPU,
                 "%s: the stated profile (%u CUs, %u bytes shared, subgroup %u, gpu style)",
                 devs[i].name, p.compute_units, p.shared_memory, p.subgroup_size);
        TH_CHECK(p.wg == 256 && p.max_groups_1d == GPU_MAX_GROUPS && p.conv_run == 1,
                 "%s: GPU tuning (workgroup %u)", devs[i].name, p.wg);
        TH_OK(NULL, gpu_choose_variants(&p, NULL, c, NULL));
        for (int f = 0; f < GPU_FAMILY_COUNT; f++) {
            const gpu_variant_row *row = gpu_variant_row_of(c[f]);
            TH_CHECK(row && (row->styles & GPU_STYLE_GPU),
                     "%s: %s runs a GPU-style variant (%s)", devs[i].name,
                     gpu_family_name((gpu_family)f), chosen_name(c, (gpu_family)f));
        }
        TH_CHECK(c[GPU_FAMILY_ROWS] == GPU_V_ROWS_SPREAD &&
                     c[GPU_FAMILY_ATTENTION] == GPU_V_ATTENTION_FLASH &&
                     c[GPU_FAMILY_CONV] == GPU_V_CONV_IMPLICIT,
                 "%s: rows spread over threads, attention through shared-memory tiles (%s), "
                 "conv implicit (%s)", devs[i].name, chosen_name(c, GPU_FAMILY_ATTENTION),
                 chosen_name(c, GPU_FAMILY_CONV));
        /* conv_implicit's row needs what its smallest tile does: every device it runs on
         * has a tile (conv_plan.c), and a GPU without it falls back to conv_im2col */
        uint32_t rows, least_shared = UINT32_MAX, least_threads = UINT32_MAX;
        const kc_conv_tile *t = kc_conv_tiles(&rows);
        for (uint32_t r = 0; r < rows; r++) {
            if (kc_conv_tile_shared(&t[r]) < least_shared)
                least_shared = kc_conv_tile_shared(&t[r]);
            if (kc_conv_tile_threads(&t[r]) < least_threads)
                least_threads = kc_conv_tile_threads(&t[r]);
        }
        const gpu_variant_row *ci = gpu_variant_row_of(GPU_V_CONV_IMPLICIT);
        TH_CHECK(ci->min_shared == least_shared && ci->min_invocations == least_threads,
                 "conv_implicit needs %u bytes, %u invocations: its smallest tile's (%u, %u)",
                 ci->min_shared, ci->min_invocations, least_shared, least_threads);
        gpu_profile small = p;
        small.shared_memory = least_shared - 4;
        TH_OK(NULL, gpu_choose_variants(&small, NULL, c, NULL));
        TH_CHECK(c[GPU_FAMILY_CONV] == GPU_V_CONV_IM2COL,
                 "%s with %u bytes of shared memory: conv_im2col (%s)", devs[i].name,
                 small.shared_memory, chosen_name(c, GPU_FAMILY_CONV));
        /* the 16-bit convolution: conv_implicit's tiles, and the same fallback */
        const gpu_variant_row *li = gpu_variant_row_of(GPU_V_CONV_LOWP_IMPLICIT);
        TH_CHECK(li->min_shared == ci->min_shared && li->min_invocations == ci->min_invocations,
                 "conv_lowp_implicit needs what conv_implicit does");
        TH_CHECK(c[GPU_FAMILY_CONV_LOWP] == GPU_V_CONV_LOWP_WIDEN,
                 "%s with %u bytes of shared memory: conv_lowp_widen (%s)", devs[i].name,
                 small.shared_memory, chosen_name(c, GPU_FAMILY_CONV_LOWP));
        TH_CHECK(c[GPU_FAMILY_ATTENTION_LOWP] == GPU_V_ATTENTION_LOWP_WIDEN,
                 "%s with %u bytes of shared memory: attention_lowp_widen (%s)", devs[i].name,
                 small.shared_memory, chosen_name(c, GPU_FAMILY_ATTENTION_LOWP));
        TH_OK(NULL, gpu_choose_variants(&p, NULL, c, NULL));
        TH_CHECK(c[GPU_FAMILY_ATTENTION_LOWP] == GPU_V_ATTENTION_LOWP_FLASH,
                 "%s: attention_lowp_flash (%s)", devs[i].name,
                 chosen_name(c, GPU_FAMILY_ATTENTION_LOWP));
        TH_CHECK(c[GPU_FAMILY_CONV_LOWP] == GPU_V_CONV_LOWP_IMPLICIT,
                 "%s: conv_lowp_implicit (%s)", devs[i].name,
                 chosen_name(c, GPU_FAMILY_CONV_LOWP));
    }

    /* A CPU device like lavapipe: the CPU rows; without shuffles or storage texel formats
     * the families fall back to rows any device runs, or to none (attention). */
    gpu_profile p;
    gpu_variant c[GPU_FAMILY_COUNT];
    gpu_profile_stated(VKT_DEVICE_TYPE_CPU, 2, 32768, 8, &p);
    TH_CHECK(p.style == VKT_KERNELS_CPU && p.wg == 64 && p.grid_cap == 32 && p.conv_run == 8,
             "a CPU device: CPU style and tuning (workgroup %u, grid cap %u)", p.wg,
             p.grid_cap);
    TH_OK(NULL, gpu_choose_variants(&p, NULL, c, NULL));
    TH_CHECK(c[GPU_FAMILY_GEMM] == GPU_V_GEMM_TEXEL && c[GPU_FAMILY_ROWS] == GPU_V_ROWS_THREAD &&
                 c[GPU_FAMILY_ATTENTION] == GPU_V_ATTENTION_SHUFFLE &&
                 c[GPU_FAMILY_POOL] == GPU_V_POOL_TEXEL &&
                 ((p.caps & GPU_CAP_STORAGE16) == 0 ||
                  (c[GPU_FAMILY_CONV_LOWP] == GPU_V_CONV_LOWP_WIDEN &&
                   c[GPU_FAMILY_ATTENTION_LOWP] == GPU_V_ATTENTION_LOWP_WIDEN)),
             "a CPU device: gemm %s, rows %s, attention %s, pool %s",
             chosen_name(c, GPU_FAMILY_GEMM), chosen_name(c, GPU_FAMILY_ROWS),
             chosen_name(c, GPU_FAMILY_ATTENTION), chosen_name(c, GPU_FAMILY_POOL));
    p.caps &= ~GPU_CAP_STORAGE_TEXEL;
    TH_OK(NULL, gpu_choose_variants(&p, NULL, c, NULL));
    TH_CHECK(c[GPU_FAMILY_GEMM] == GPU_V_GEMM_SAMPLER && c[GPU_FAMILY_CONV] == GPU_V_NONE,
             "no storage texel formats: gemm_sampler (%s), no conv (%s)",
             chosen_name(c, GPU_FAMILY_GEMM), chosen_name(c, GPU_FAMILY_CONV));
    p.caps &= ~GPU_CAP_SUBGROUP_SHUFFLE;
    TH_OK(NULL, gpu_choose_variants(&p, NULL, c, NULL));
    TH_CHECK(c[GPU_FAMILY_GEMM] == GPU_V_GEMM_SHARED && c[GPU_FAMILY_ATTENTION] == GPU_V_NONE,
             "no shuffles either: gemm_shared (%s), no attention (%s)",
             chosen_name(c, GPU_FAMILY_GEMM), chosen_name(c, GPU_FAMILY_ATTENTION));
}

/* ---- (c) the filter ------------------------------------------------------------------- */

static int msg_has(const char *msg, const char *needle)
{
    return TH_CHECK(strstr(msg, needle) != NULL, "the message names '%s': %s", needle, msg);
}

static void check_filter(void)
{
    char msg[VKT_ERRMSG_SIZE];
    gpu_filter f;
    TH_OK(NULL, gpu_filter_parse(" gpu , gemm_shared,rows_thread ", "VKT_KERNELS", &f, msg));
    TH_CHECK(f.style == VKT_KERNELS_GPU && f.forced[GPU_FAMILY_GEMM] == GPU_V_GEMM_SHARED &&
                 f.forced[GPU_FAMILY_ROWS] == GPU_V_ROWS_THREAD &&
                 f.forced[GPU_FAMILY_POOL] == GPU_V_NONE,
             "a style and two variants parse");
    TH_OK(NULL, gpu_filter_parse(NULL, "VKT_KERNELS", &f, msg));
    TH_CHECK(f.style == VKT_KERNELS_AUTO, "no filter: no style");
    TH_STATUS(NULL, gpu_filter_parse("gpu,tpu", "VKT_KERNELS", &f, msg),
              VKT_ERROR_INVALID_ARGUMENT);
    msg_has(msg, "VKT_KERNELS='gpu,tpu'"), msg_has(msg, "'tpu'"), msg_has(msg, "cpu, gpu");
    msg_has(msg, "gemm_texel");
    TH_STATUS(NULL, gpu_filter_parse("gemm_texel,gemm_shared", "VKT_KERNELS", &f, msg),
              VKT_ERROR_INVALID_ARGUMENT);
    msg_has(msg, "two gemm variants");
    TH_STATUS(NULL, gpu_filter_parse("cpu,gpu", "VKT_KERNELS", &f, msg),
              VKT_ERROR_INVALID_ARGUMENT);

    /* through a context: forced, refused, and the style against the options' */
    vkt_context *c = th_context_filter("gpu,gemm_texel");
    TH_CHECK(c->variant == VKT_KERNELS_GPU && c->kv[GPU_FAMILY_GEMM] == GPU_V_GEMM_TEXEL &&
                 c->kv[GPU_FAMILY_ROWS] == GPU_V_ROWS_SPREAD,
             "gpu,gemm_texel: GPU style, the CPU GEMM forced");
    vkt_context_options o;
    memset(&o, 0, sizeof o);
    o.kernels = VKT_KERNELS_CPU;
    o.kernel_variants = "gpu";
    vkt_context *bad = NULL;
    TH_STATUS(NULL, vkt_context_create(th_instance, &o, &bad), VKT_ERROR_INVALID_ARGUMENT);
    msg_has(vkt_last_error(), "cpu");
    o.kernel_variants = "bogus";
    TH_STATUS(NULL, vkt_context_create(th_instance, &o, &bad), VKT_ERROR_INVALID_ARGUMENT);
    msg_has(vkt_last_error(), "kernel_variants='bogus'");
    /* an environment style yields to the options' (as VKT_KERNELS=cpu|gpu always did) */
    plat_setenv("VKT_KERNELS", "cpu,pool_storage");
    c = th_context(VKT_KERNELS_GPU);
    TH_CHECK(c->variant == VKT_KERNELS_GPU && c->kv[GPU_FAMILY_POOL] == GPU_V_POOL_STORAGE,
             "VKT_KERNELS=cpu,pool_storage under an asked GPU style: gpu, pool_storage");
    plat_setenv("VKT_KERNELS", NULL);

    /* $VKT_COMPUTE_UNITS: the profile's compute units; not a count: refused, named */
    plat_setenv("VKT_COMPUTE_UNITS", "132");
    c = th_context(VKT_KERNELS_GPU);
    TH_CHECK(c->profile.compute_units == 132 &&
                 strcmp(c->profile.compute_units_from, "VKT_COMPUTE_UNITS") == 0,
             "VKT_COMPUTE_UNITS=132: %u compute units (%s)", c->profile.compute_units,
             c->profile.compute_units_from);
    plat_setenv("VKT_COMPUTE_UNITS", "12x");
    memset(&o, 0, sizeof o);
    TH_STATUS(NULL, vkt_context_create(th_instance, &o, &bad), VKT_ERROR_INVALID_ARGUMENT);
    msg_has(vkt_last_error(), "VKT_COMPUTE_UNITS='12x'");
    plat_setenv("VKT_COMPUTE_UNITS", NULL);

    /* a variant the device cannot run: what it lacks, named */
    gpu_profile p;
    gpu_variant chosen[GPU_FAMILY_COUNT];
    gpu_profile_stated(VKT_DEVICE_TYPE_DISCRETE_GPU, 80, 48 * 1024, 4, &p);
    TH_OK(NULL, gpu_filter_parse("gemm_texel", "VKT_KERNELS", &f, msg));
    TH_STATUS(NULL, gpu_choose_variants(&p, &f, chosen, msg), VKT_ERROR_NO_DEVICE);
    msg_has(msg, "gemm_texel"), msg_has(msg, "subgroups of 8 lanes (it has 4)");

    char text[2048];
    TH_OK(NULL, vkt_instance_device_kernels(th_instance, 0, VKT_KERNELS_AUTO, text, sizeof text));
    msg_has(text, "compute units"), msg_has(text, "gemm "), msg_has(text, "optimizer ");
    TH_STATUS(NULL, vkt_instance_device_kernels(th_instance, 99, VKT_KERNELS_AUTO, text, 64),
              VKT_ERROR_NO_DEVICE);
}

/* Parts (`--part NAME`, harness.h): "table" ((b) and (c), no kernel runs), "shard0" to
 * "shard3" ((a)). */
int main(int argc, char **argv)
{
    th_init("test_variants");
    th_parts(argc, argv);
    if (th_part("table")) {
        check_filter();
        check_stated();
    }
    check_every_row();
    return th_finish();
}
