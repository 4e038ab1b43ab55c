/* test_autocast_attention.c - the autocast rewrite on causal attention
 * (vkt_model_options.precision fp16 / bf16): causal_attention runs ka_attention_lowp on qkv
 * rounded to 16 bits, and its backward on dy rounded too, with fp32 scores, softmax
 * statistics, sums, output and gradient. A graph over a parameter P [B, T, 3C] (or an
 * activation P + 0), y = causal_attention(P), exact targets Tg (multiples of 1/8) and the
 * loss sum(y * Tg), so the gradient reaching the attention is Tg, exact in 16 bits; the
 * references are the double attention of the rounded P (kdt_round, the kernels' rounding):
 *   y = attention(r(P)), dP = attention's backward at r(P) with dy = Tg.
 * Tolerances: the kernels widen the 16-bit values exactly and compute as the fp32
 * attention does, so test_attention's fp32 bounds hold (y: 1e-4 relative + 1e-5 (1 +
 * t/256); dP: 1e-4 relative + 2e-6 (t + 4)). y and dP must also differ from the unrounded
 * P's result by more than 4 times their largest error (the rewrite did round). dP here in
 * the cpu style only: the gpu style's backward also reads y rounded to 16 bits (for D =
 * rowsum(dy * y)), whose reference is test_autocast_attention_y's. Odd T and
 * head widths, an activation input, both kernel styles (cpu:
 * attention_lowp_widen over attention_shuffle; gpu: attention_lowp_flash). The memory plan
 * check runs on every recording (plan_check.c): the backward reading the 16-bit qkv and
 * dy instead of the fp32 values is covered by the plan. */
#include "harness.h"
#include "gpu/gpu.h"
#include "kernels/attention.h"
#include "kernels/ref.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct acase {
    const char *name;
    uint32_t b, t, heads, d;
    float dropout; /* 0 here: test_attention_lowp checks the 16-bit kernels' masks */
    int via_add;
} acase;

static double *dalloc(uint64_t n)
{
    return calloc(n ? n : 1, sizeof(double));
}

/* got against want (rtol |want| + atol); returns max |got - raw| / max |got - want|. */
static double compare(const char *what, const float *got, const double *want,
                      const double *raw, uint64_t n, double rtol, double atol)
{
    uint64_t bad = 0, first = 0;
    double e_want = 0.0, e_raw = 0.0;
    for (uint64_t i = 0; i < n; i++) {
        double e = fabs(got[i] - want[i]), r = fabs(got[i] - raw[i]);
        if (!(e <= atol + rtol * fabs(want[i])) && !bad++)
            first = i;
        e_want = e > e_want ? e : e_want;
        e_raw = r > e_raw ? r : e_raw;
    }
    TH_CHECK(bad == 0, "%s: %llu of %llu off the rounded operands' reference (first [%llu]: "
             "%.9g vs %.9g)", what, (unsigned long long)bad, (unsigned long long)n,
             (unsigned long long)first, bad ? got[first] : 0.0, bad ? want[first] : 0.0);
    return e_raw / (e_want > 0.0 ? e_want : 1e-30);
}

static void run_case(vkt_context *ctx, const acase *c, vkt_dtype type)
{
    char what[200];
    int gpu = ctx->profile.style == VKT_KERNELS_GPU;
    snprintf(what, sizeof what, "%s %s %s", c->name, vkt_dtype_name(type), gpu ? "gpu" : "cpu");
    vkt_graph *g = NULL;
    vkt_graph_options go = {11};
    if (!TH_OK(NULL, vkt_graph_create(&go, &g)))
        return;
    uint32_t C = c->heads * c->d;
    vkt_shape ps = {3, {c->b, c->t, 3 * C}};
    vkt_init uni = {VKT_INIT_UNIFORM, -2.0f, 2.0f, 0};
    vkt_tensor *p = vkt_param(g, "P", &ps, &uni), *x = p, *zero = NULL;
    if (c->via_add) {
        zero = vkt_input(g, "Z", &ps);
        x = vkt_add(g, p, zero);
    }
    vkt_tensor *y = vkt_causal_attention(g, x, c->heads, c->dropout);
    vkt_keep(g, y);
    vkt_shape ys = vkt_tensor_shape(y);
    vkt_tensor *tg = vkt_input(g, "T", &ys);
    vkt_tensor *loss = vkt_sum(g, vkt_mul(g, y, tg), -1);
    vkt_model_options mo = {.precision = type};
    vkt_model *m = NULL;
    if (!TH_OK(ctx, vkt_model_create(ctx, g, loss, &mo, &m))) {
        TH_CHECK(0, "%s: %s", what, vkt_last_error());
        vkt_graph_destroy(g);
        return;
    }
    uint64_t np = (uint64_t)c->b * c->t * 3 * C, ny = (uint64_t)c->b * c->t * C;
    float *P = th_alloc_floats(np), *T = th_alloc_floats(ny), *Z = th_alloc_floats(np);
    float *got = th_alloc_floats(np);
    th_fill_uniform(P, np, -2, 2);
    for (uint64_t i = 0; i < ny; i++)
        T[i] = (float)((int)(th_rand_u64() % 33) - 16) / 8.0f;
    memset(Z, 0, np * 4);
    TH_OK(ctx, vkt_model_write(m, p, P, np));
    TH_OK(ctx, vkt_model_set_input(m, tg, T, ny));
    if (zero)
        TH_OK(ctx, vkt_model_set_input(m, zero, Z, np));
    if (!TH_OK(ctx, vkt_model_forward_backward(m)))
        TH_CHECK(0, "%s: %s", what, vkt_model_errmsg(m));
    double *pr = dalloc(np), *pu = dalloc(np), *dyd = dalloc(ny);
    for (uint64_t i = 0; i < np; i++)
        pr[i] = kdt_round(type, P[i]), pu[i] = P[i];
    for (uint64_t i = 0; i < ny; i++)
        dyd[i] = T[i];
    double *want = dalloc(ny), *raw = dalloc(ny), *gw = dalloc(np), *gr = dalloc(np);
    ka_ref_attention(pr, want, c->b, c->t, c->heads, c->d, 0.0f, 0, 0, 0);
    ka_ref_attention(pu, raw, c->b, c->t, c->heads, c->d, 0.0f, 0, 0, 0);
    ka_ref_attention_backward(pr, dyd, gw, c->b, c->t, c->heads, c->d, 0.0f, 0, 0, 0);
    ka_ref_attention_backward(pu, dyd, gr, c->b, c->t, c->heads, c->d, 0.0f, 0, 0, 0);
    char w2[240];
    TH_OK(ctx, vkt_model_read(m, y, got, ny));
    snprintf(w2, sizeof w2, "%s y", what);
    double shows = compare(w2, got, want, raw, ny, 1e-4, 1e-5 * (1.0 + c->t / 256.0));
    TH_CHECK(shows > 4.0, "%s: the rounding shows (%.3g)", w2, shows);
    /* gpu style: the backward's D reads y rounded too (lp_y), which this reference lacks;
     * test_autocast_attention_y checks that dP against the backward of r(P) and r(y) */
    if (!gpu) {
        TH_OK(ctx, vkt_model_read_grad(m, p, got, np));
        snprintf(w2, sizeof w2, "%s dP", what);
        shows = compare(w2, got, gw, gr, np, 1e-4, 2e-6 * (c->t + 4));
        TH_CHECK(shows > 4.0, "%s: the rounding shows (%.3g)", w2, shows);
    }
    free(pr), free(pu), free(dyd), free(want), free(raw), free(gw), free(gr);
    free(P), free(T), free(Z), free(got);
    vkt_model_destroy(m);
    vkt_graph_destroy(g);
}

int main(void)
{
    th_init("test_autocast_attention");
    const acase cases[] = {
        {"b2 t13 3x5", 2, 13, 3, 5, 0.0f, 0},
        {"b1 t37 2x8 via add", 1, 37, 2, 8, 0.0f, 1},
        {"b2 t9 1x32", 2, 9, 1, 32, 0.0f, 0},
    };
    const char *filters[2] = {"cpu", "gpu"};
    for (int f = 0; f < 2; f++) {
        vkt_context *ctx = th_context_filter(filters[f]);
        gpu_variant want = f ? GPU_V_ATTENTION_LOWP_FLASH : GPU_V_ATTENTION_LOWP_WIDEN;
        TH_CHECK(ctx->kv[GPU_FAMILY_ATTENTION_LOWP] == want, "%s style: %s", filters[f],
                 gpu_variant_row_of(want)->name);
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
            for (int ti = 0; ti < 2; ti++)
                run_case(ctx, &cases[i], ti ? VKT_DTYPE_BF16 : VKT_DTYPE_FP16);
        th_context_release(ctx);
    }
    return th_finish();
}
