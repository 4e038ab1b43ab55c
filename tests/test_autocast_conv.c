/* test_autocast_conv.c - the autocast rewrite on convolutions (vkt_model_options.precision
 * fp16 / bf16): conv2d and its fused relu (conv_relu) run kc_conv2d_lowp on x and w rounded
 * to 16 bits, and the backward on dy rounded too, accumulating in fp32 into fp32 outputs
 * and gradients. As test_autocast.c does for products: a graph over a parameter P (or an
 * activation P + 0), weights W, bias b and exact targets T (multiples of 1/8), loss
 * sum(y * T), so the gradient reaching the convolution is T (times relu's mask from the
 * device's y), exact in 16 bits; the references are double convolutions of the rounded
 * operands (kdt_round: the kernels' rounding):
 *   y = conv(r(P), r(W)) + b, dW and dP from conv's backward on r(P), r(W) and T, db = sum T.
 * Tolerance per output: the 16-bit products are exact in fp32, so only the fp32 sums err:
 * (K + 4) 2^-24 S (K the terms, S the sum of their magnitudes, from the reference on |.|).
 * Each of y, dW and dP must also differ from the unrounded operands' result by more than
 * 4 such bounds somewhere (the rewrite did round). Geometries with stride, padding,
 * dilation, groups; both kernel styles (cpu: conv_lowp_widen over conv_im2col; gpu:
 * conv_lowp_implicit). The memory plan check runs on every recording (plan_check.c), so
 * the casts' values and the backward's reading the 16-bit x instead of the fp32 one are
 * covered by the plan. Last, the activation memory of a conv stack with fp32 and bf16. */
#include "harness.h"
#include "gpu/gpu.h"
#include "kernels/conv.h"
#include "kernels/ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define U32 5.9604644775390625e-8 /* 2^-24 */

typedef struct ccase {
    const char *name;
    uint32_t n, c, h, w, oc, kh, kw;
    vkt_conv2d_options o;
    int bias, relu, via_add;
} ccase;

static void fill_exact(float *x, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++)
        x[i] = (float)((int)(th_rand_u64() % 33) - 16) / 8.0f;
}

static double *dalloc(uint64_t n)
{
    return calloc(n ? n : 1, sizeof(double));
}

static void to_d(const float *x, double *out, uint64_t n, vkt_dtype t, int mode)
{
    for (uint64_t i = 0; i < n; i++) {
        double v = mode == 1 ? kdt_round(t, x[i]) : x[i];
        out[i] = mode == 2 ? fabs(kdt_round(t, x[i])) : v;
    }
}

/* got against want within (K + 4) u S; returns the largest |got - raw| / bound. */
static double compare(const char *what, const float *got, const double *want,
                      const double *raw, const double *S, uint64_t K, uint64_t n)
{
    double seen = 0;
    uint64_t bad = 0, first = 0;
    for (uint64_t i = 0; i < n; i++) {
        double tol = (K + 4) * U32 * S[i] + 1e-30, e = fabs(got[i] - want[i]);
        if (!(e <= tol) && !bad++)
            first = i;
        if (fabs(got[i] - raw[i]) / tol > seen)
            seen = fabs(got[i] - raw[i]) / tol;
    }
    TH_CHECK(bad == 0, "%s: %llu of %llu outside (K+4) 2^-24 S (first [%llu]: %.9g vs %.9g)",
             what, (unsigned long long)bad, (unsigned long long)n, (unsigned long long)first,
             bad ? got[first] : 0.0, bad ? want[first] : 0.0);
    return seen;
}

static void run_case(vkt_context *ctx, const ccase *c, vkt_dtype t)
{
    char what[200];
    snprintf(what, sizeof what, "%s %s %s", c->name, vkt_dtype_name(t),
             ctx->profile.style == VKT_KERNELS_CPU ? "cpu" : "gpu");
    vkt_graph *g = NULL;
    vkt_graph_options go = {7};
    if (!TH_OK(NULL, vkt_graph_create(&go, &g)))
        return;
    uint32_t groups = c->o.groups ? c->o.groups : 1;
    vkt_shape xs = {4, {c->n, c->c, c->h, c->w}};
    vkt_shape ws = {4, {c->oc, c->c / groups, c->kh, c->kw}}, bs = {1, {c->oc}};
    vkt_init uni = {VKT_INIT_UNIFORM, -1.0f, 1.0f, 0};
    vkt_tensor *p = vkt_param(g, "P", &xs, &uni), *w = vkt_param(g, "W", &ws, &uni);
    vkt_tensor *b = c->bias ? vkt_param(g, "b", &bs, &uni) : NULL, *zero = NULL, *x = p;
    if (c->via_add) {
        zero = vkt_input(g, "Z", &xs);
        x = vkt_add(g, p, zero);
    }
    vkt_tensor *y = vkt_conv2d(g, x, w, b, &c->o);
    if (c->relu)
        y = vkt_relu(g, y);
    vkt_keep(g, y);
    vkt_shape ys = vkt_tensor_shape(y);
    vkt_tensor *tt = vkt_input(g, "T", &ys);
    vkt_tensor *loss = vkt_sum(g, vkt_mul(g, y, tt), -1);
    vkt_model_options mo = {.precision = t};
    vkt_model *m = NULL;
    if (!TH_OK(ctx, vkt_model_create(ctx, g, loss, &mo, &m))) {
        TH_CHECK(0, "%s: %s", what, vkt_last_error());
        vkt_graph_destroy(g);
        return;
    }
    kc_conv k = {.n = c->n, .c = c->c, .h = c->h, .w = c->w, .oc = c->oc, .kh = c->kh,
                 .kw = c->kw, .stride_h = c->o.stride_h ? c->o.stride_h : 1,
                 .stride_w = c->o.stride_w ? c->o.stride_w : 1, .pad_h = c->o.pad_h,
                 .pad_w = c->o.pad_w, .dil_h = c->o.dilation_h ? c->o.dilation_h : 1,
                 .dil_w = c->o.dilation_w ? c->o.dilation_w : 1, .groups = groups};
    kc_conv_init(&k, NULL, 0);
    uint64_t nx = (uint64_t)k.n * k.c * k.h * k.w, nw = (uint64_t)k.oc * (k.c / groups) * k.kh * k.kw;
    uint64_t ny = (uint64_t)k.n * k.oc * k.oh * k.ow;
    float *P = th_alloc_floats(nx), *W = th_alloc_floats(nw), *B = th_alloc_floats(k.oc);
    float *T = th_alloc_floats(ny), *Z = th_alloc_floats(nx), *got = th_alloc_floats(nx + nw + ny);
    th_fill_uniform(P, nx, -1, 1);
    th_fill_uniform(W, nw, -1, 1);
    th_fill_uniform(B, k.oc, -1, 1);
    fill_exact(T, ny);
    memset(Z, 0, nx * 4);
    TH_OK(ctx, vkt_model_write(m, p, P, nx));
    TH_OK(ctx, vkt_model_write(m, w, W, nw));
    if (b)
        TH_OK(ctx, vkt_model_write(m, b, B, k.oc));
    TH_OK(ctx, vkt_model_set_input(m, tt, T, ny));
    if (zero)
        TH_OK(ctx, vkt_model_set_input(m, zero, Z, nx));
    if (!TH_OK(ctx, vkt_model_forward_backward(m)))
        TH_CHECK(0, "%s: %s", what, vkt_model_errmsg(m));

    double *pr = dalloc(nx), *pu = dalloc(nx), *pa = dalloc(nx);
    double *wr = dalloc(nw), *wu = dalloc(nw), *wa = dalloc(nw), *bd = dalloc(k.oc);
    double *bz = dalloc(k.oc), *want = dalloc(ny), *raw = dalloc(ny), *S = dalloc(ny);
    to_d(P, pr, nx, t, 1), to_d(P, pu, nx, t, 0), to_d(P, pa, nx, t, 2);
    to_d(W, wr, nw, t, 1), to_d(W, wu, nw, t, 0), to_d(W, wa, nw, t, 2);
    for (uint32_t o = 0; o < k.oc; o++)
        bd[o] = b ? B[o] : 0.0;
    kc_ref_conv2d(&k, pr, wr, bd, want);
    kc_ref_conv2d(&k, pu, wu, bd, raw);
    kc_ref_conv2d(&k, pa, wa, bz, S);
    for (uint64_t i = 0; i < ny; i++) {
        S[i] += fabs(bd[i / ((uint64_t)k.oh * k.ow) % k.oc]);
        if (c->relu)
            want[i] = want[i] > 0 ? want[i] : 0, raw[i] = raw[i] > 0 ? raw[i] : 0;
    }
    uint64_t ky = (uint64_t)(k.c / groups) * k.kh * k.kw, kx = (uint64_t)(k.oc / groups) * k.kh * k.kw;
    uint64_t kw_ = (uint64_t)k.n * k.oh * k.ow;
    char w_[240];
    TH_OK(ctx, vkt_model_read(m, y, got, ny));
    snprintf(w_, sizeof w_, "%s: y", what);
    double seen = compare(w_, got, want, raw, S, ky, ny);
    TH_CHECK(seen > 4, "%s: y within %.3g bounds of the unrounded convolution", what, seen);
    /* the gradient reaching the convolution: T, masked by the device's y */
    double *g1 = dalloc(ny), *ga = dalloc(ny);
    for (uint64_t i = 0; i < ny; i++) {
        g1[i] = c->relu && !(got[i] > 0) ? 0.0 : T[i];
        ga[i] = fabs(g1[i]);
    }
    double *dx[3] = {dalloc(nx), dalloc(nx), dalloc(nx)}, *dw[3] = {dalloc(nw), dalloc(nw), dalloc(nw)};
    double *db = dalloc(k.oc), *dba = dalloc(k.oc);
    kc_ref_conv2d_backward(&k, pr, wr, g1, dx[0], dw[0], db);
    kc_ref_conv2d_backward(&k, pu, wu, g1, dx[1], dw[1], NULL);
    kc_ref_conv2d_backward(&k, pa, wa, ga, dx[2], dw[2], dba);
    TH_OK(ctx, vkt_model_read_grad(m, w, got, nw));
    snprintf(w_, sizeof w_, "%s: dW", what);
    seen = compare(w_, got, dw[0], dw[1], dw[2], kw_, nw);
    TH_CHECK(seen > 4, "%s: dW within %.3g bounds of the unrounded gradient", what, seen);
    TH_OK(ctx, vkt_model_read_grad(m, p, got, nx));
    snprintf(w_, sizeof w_, "%s: dP", what);
    seen = compare(w_, got, dx[0], dx[1], dx[2], kx, nx);
    TH_CHECK(seen > 4, "%s: dP within %.3g bounds of the unrounded gradient", what, seen);
    if (b) {
        TH_OK(ctx, vkt_model_read_grad(m, b, got, k.oc));
        snprintf(w_, sizeof w_, "%s: db", what);
        compare(w_, got, db, db, dba, kw_, k.oc);
    }
    for (int i = 0; i < 3; i++)
        free(dx[i]), free(dw[i]);
    free(db), free(dba), free(g1), free(ga), free(pr), free(pu), free(pa), free(wr), free(wu);
    free(wa), free(bd), free(bz), free(want), free(raw), free(S);
    free(P), free(W), free(B), free(T), free(Z), free(got);
    vkt_model_destroy(m);
    vkt_graph_destroy(g);
}

static const ccase k_cases[] = {
    {"strided padded grouped + bias", 3, 4, 11, 9, 6, 3, 2,
     {.stride_h = 2, .pad_h = 1, .pad_w = 1, .dilation_w = 2, .groups = 2}, 1, 0, 0},
    {"relu fused, activation input", 2, 5, 8, 7, 7, 3, 3, {.pad_h = 1, .pad_w = 1}, 1, 1, 1},
    {"1x1 no bias, K 61", 2, 61, 5, 5, 9, 1, 1, {0}, 0, 0, 0},
};

/* Activation memory (vkt_model_stats) of a conv stack at fp32 and bf16, printed: the
 * 16-bit copies are added to the fp32 values, which stay (a fused relu's backward reads
 * its fp32 output for the mask, so the conv's input outlives the forward either way);
 * conv_lowp_widen (cpu style) also holds fp32 copies of x, w and dy in its workspace. */
static void memory(vkt_context *ctx)
{
    uint64_t arena[2] = {0, 0};
    for (int i = 0; i < 2; i++) {
        vkt_graph *g = NULL;
        vkt_graph_options go = {3};
        if (!TH_OK(NULL, vkt_graph_create(&go, &g)))
            return;
        vkt_shape xs = {4, {32, 1, 28, 28}}, w1s = {4, {16, 1, 3, 3}}, w2s = {4, {32, 16, 3, 3}};
        vkt_shape b1 = {1, {16}}, b2 = {1, {32}};
        vkt_init uni = {VKT_INIT_UNIFORM, -0.1f, 0.1f, 0};
        vkt_tensor *x = vkt_input(g, "x", &xs);
        vkt_conv2d_options o = {.pad_h = 1, .pad_w = 1};
        vkt_tensor *h = vkt_relu(g, vkt_conv2d(g, x, vkt_param(g, "w1", &w1s, &uni),
                                               vkt_param(g, "b1", &b1, &uni), &o));
        h = vkt_relu(g, vkt_conv2d(g, h, vkt_param(g, "w2", &w2s, &uni),
                                   vkt_param(g, "b2", &b2, &uni), &o));
        vkt_tensor *loss = vkt_sum(g, vkt_mul(g, h, h), -1);
        vkt_model_options mo = {.precision = i ? VKT_DTYPE_BF16 : VKT_DTYPE_FP32};
        vkt_model *m = NULL;
        if (TH_OK(ctx, vkt_model_create(ctx, g, loss, &mo, &m))) {
            vkt_model_stats st;
            if (TH_OK(ctx, vkt_model_stats_get(m, &st)))
                arena[i] = st.activation_bytes;
            vkt_model_destroy(m);
        }
        vkt_graph_destroy(g);
    }
    int gpu = ctx->profile.style == VKT_KERNELS_GPU;
    printf("conv stack arena (%s): fp32 %llu bytes, bf16 %llu bytes (%.3f)\n",
           gpu ? "gpu style" : "cpu style", (unsigned long long)arena[0],
           (unsigned long long)arena[1], arena[0] ? (double)arena[1] / (double)arena[0] : 0.0);
    TH_CHECK(arena[0] > 0 && arena[1] > 0, "both planned (fp32 %llu, bf16 %llu bytes)",
             (unsigned long long)arena[0], (unsigned long long)arena[1]);
}

int main(void)
{
    th_init("test_autocast_conv");
    th_seed(2212);
    const char *filters[2] = {"cpu", "gpu"};
    for (int f = 0; f < 2; f++) {
        vkt_context *ctx = th_context_filter(filters[f]);
        if (!ctx)
            continue;
        for (size_t i = 0; i < sizeof k_cases / sizeof k_cases[0]; i++) {
            run_case(ctx, &k_cases[i], VKT_DTYPE_FP16);
            run_case(ctx, &k_cases[i], VKT_DTYPE_BF16);
        }
        memory(ctx);
        th_context_release(ctx);
    }
    return th_finish();
}
