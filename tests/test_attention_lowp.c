/* test_attention_lowp.c - causal attention of 16-bit q, k, v (ka_attention_lowp and its
 * backward, engine/kernels/attention_lowp.c) against the double references
 * (ka_ref_attention*), for every variant of the attention_lowp family and both types:
 * attention_lowp_flash planned for lavapipe (cpu style: one lane a row) and as for a GPU
 * (lane groups and shuffles), attention_lowp_widen over each fp32 attention
 * (attention_shuffle, attention_rows, attention_flash).
 *
 * Tolerances, from the precision (p = 2^-11 for fp16, 2^-8 for bf16: half an ulp, the
 * relative rounding of each 16-bit input; u = 2^-24):
 *  (1) against the reference on the 16-bit values as stored: the kernels widen them
 *      exactly and compute in fp32 as the fp32 attention does, so test_attention's fp32
 *      tolerances hold (y: 1e-4 relative + 1e-5 (1 + t/256); lse 1e-5; dqkv: 1e-4 relative
 *      + 2e-6 (t + 4));
 *  (2) y against the reference on the unrounded fp32 inputs, to first order in p: rounding
 *      v moves y_i by sum_j p_ij dv_j, at most p max_j |v_j|; rounding q and k moves each
 *      score by at most 2 p S_ij (S_ij = sum_c |q_ic k_jc| / sqrt(d)), each probability
 *      by p_ij (ds_ij - sum_k p_ik ds_ik), so y_i by at most 4 p max_j S_ij max_j |v_j -
 *      y_i|; the bound is (1.1 times, for the second order) their sum plus (1)'s;
 *  (3) the rounding shows: the largest error of y and of dqkv against the unrounded
 *      reference is more than 4 times the largest against the stored values (a kernel
 *      that read unrounded values, or the wrong 16-bit type, fails here or in (1)).
 * Shapes: t 7, 13, 37, 67 (off every block and tile), head widths 3, 5 (scalar rows), 8 and
 * 32, 1 to 3 heads, b 1 and 2, dropout on and off, 16-bit views starting at an odd element;
 * dqkv with beta 0 over NaNs and beta 1. The reference backward itself is checked against
 * central differences by test_attention. Errors: an fp32 type, a short saved array or
 * workspace, a view past its buffer. */
#include "harness.h"
#include "gpu/gpu.h"
#include "kernels/attention.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static vkt_context *ctx;
static vkt_stream *s;
static const char *label;

static double *dalloc(uint64_t n)
{
    return calloc(n ? n : 1, sizeof(double));
}

/* Reads n floats of b. */
static float *read_back(th_buf *b)
{
    float *got = th_alloc_floats(b->n);
    th_buf_read(b, got);
    return got;
}

/* The largest |got - want|. */
static double max_err(const float *got, const double *want, uint64_t n)
{
    double m = 0.0;
    for (uint64_t i = 0; i < n; i++) {
        double e = fabs(got[i] - want[i]);
        m = e > m ? e : m;
    }
    return m;
}

/* (1): got against want within rtol |want| + atol. */
static void expect_stored(const char *what, th_buf *b, const double *want, double rtol,
                          double atol)
{
    float *got = read_back(b), *w = th_alloc_floats(b->n);
    for (uint64_t i = 0; i < b->n; i++)
        w[i] = (float)want[i];
    char msg[200];
    snprintf(msg, sizeof msg, "%s %s (stored values)", label, what);
    th_compare(msg, got, w, b->n, (float)rtol, (float)atol);
    th_buf_guards_ok(b, what);
    free(got), free(w);
}

/* (2) for y: the first-order bound of the rounding of q, k and v. */
static void expect_y_exact(const float *got, const double *ye, const double *x, uint32_t b,
                           uint32_t t, uint32_t H, uint32_t d, double p, double tol1,
                           const char *what)
{
    uint64_t HD = (uint64_t)H * d, bad = 0;
    double worst = 0.0;
    for (uint32_t bb = 0; bb < b; bb++)
        for (uint32_t h = 0; h < H; h++)
            for (uint32_t i = 0; i < t; i++) {
                const double *q = x + ((uint64_t)bb * t + i) * 3 * HD + h * d;
                double smax = 0.0;
                for (uint32_t j = 0; j <= i; j++) {
                    const double *k = x + ((uint64_t)bb * t + j) * 3 * HD + HD + h * d;
                    double S = 0.0;
                    for (uint32_t c = 0; c < d; c++)
                        S += fabs(q[c] * k[c]);
                    S /= sqrt((double)d);
                    smax = S > smax ? S : smax;
                }
                for (uint32_t c = 0; c < d; c++) {
                    uint64_t o = ((uint64_t)bb * t + i) * HD + h * d + c;
                    double vmax = 0.0, spread = 0.0;
                    for (uint32_t j = 0; j <= i; j++) {
                        double v = x[((uint64_t)bb * t + j) * 3 * HD + 2 * HD + h * d + c];
                        vmax = fabs(v) > vmax ? fabs(v) : vmax;
                        double dv = fabs(v - ye[o]);
                        spread = dv > spread ? dv : spread;
                    }
                    double tol = 1.1 * (p * vmax + 4.0 * p * smax * spread) + tol1;
                    double e = fabs(got[o] - ye[o]);
                    if (!(e <= tol))
                        bad++;
                    worst = e / tol > worst ? e / tol : worst;
                }
            }
    TH_CHECK(bad == 0, "%s %s: %llu outputs off the unrounded inputs' attention by more than "
             "the first-order bound (worst at %.2f of it)", label, what,
             (unsigned long long)bad, worst);
}

/* (3) */
static void expect_rounding_shows(const char *what, const float *got, const double *rs,
                                  const double *re, uint64_t n)
{
    double e1 = max_err(got, rs, n), e2 = max_err(got, re, n);
    TH_CHECK(e2 > 4.0 * e1 && e2 > 0.0, "%s %s: the 16-bit rounding does not show (error "
             "against the unrounded inputs %.3g, against the stored ones %.3g)", label, what,
             e2, e1);
}

typedef struct shape {
    uint32_t b, t, heads, d;
    float p_drop;
} shape;

static void check(vkt_dtype type, shape sh, uint64_t skip)
{
    uint32_t b = sh.b, t = sh.t, H = sh.heads, d = sh.d;
    uint64_t nq = (uint64_t)b * t * 3 * H * d, ny = (uint64_t)b * t * H * d;
    uint64_t np = ka_attention_lowp_saved_elems(ctx, b, t, H, d);
    uint64_t nw = ka_attention_lowp_workspace_elems(ctx, b, t, H, d);
    if (!TH_CHECK(np > 0 && nw > 0, "%s: saved and workspace sizes (%llu, %llu)", label,
                  (unsigned long long)np, (unsigned long long)nw))
        return;
    double p = type == VKT_DTYPE_FP16 ? ldexp(1.0, -11) : ldexp(1.0, -8);
    uint64_t seed = 0xA77E10000ull + t, step = 5;
    th_half qkv = th_half_new(ctx, type, nq, skip, -2, 2);
    th_half dy = th_half_new(ctx, type, ny, skip, -1, 1);
    th_buf y = th_buf_create(ctx, ny), saved = th_buf_create(ctx, np);
    th_buf ws = th_buf_create(ctx, nw), dq = th_buf_create(ctx, nq), ctrl = th_buf_create(ctx, 2);
    uint32_t st2[2] = {(uint32_t)step, 0};
    TH_OK(ctx, vkt_buffer_write(ctrl.buffer, ctrl.offset * 4, st2, 8));
    float *init = th_alloc_floats(nq);
    for (uint64_t i = 0; i < nq; i++)
        init[i] = NAN;
    th_buf_write(&dq, init);
    char what[160];
    snprintf(what, sizeof what, "%s b=%u t=%u heads=%u d=%u p_drop=%.2f skip=%llu",
             vkt_dtype_name(type), b, t, H, d, (double)sh.p_drop, (unsigned long long)skip);
    TH_OK(ctx, vkt_stream_reset(s));
    TH_OK(ctx, ka_attention_lowp(s, type, th_half_view(&qkv), th_view(&y), th_view(&saved),
                                 th_view(&ctrl), b, t, H, d, sh.p_drop, seed, 0, 0));
    TH_OK(ctx, ka_attention_backward_lowp(s, type, th_half_view(&qkv), th_view(&y),
                                          th_view(&saved), th_view(&ctrl), th_half_view(&dy),
                                          th_view(&dq), 0.0f, th_view(&ws), b, t, H, d,
                                          sh.p_drop, seed, 0, 0));
    if (!TH_OK(ctx, vkt_stream_run(s)))
        goto out;
    {
        double *ys = dalloc(ny), *ye = dalloc(ny), *gs = dalloc(nq), *ge = dalloc(nq);
        ka_ref_attention(qkv.stored, ys, b, t, H, d, sh.p_drop, seed, 0, step);
        ka_ref_attention(qkv.exact, ye, b, t, H, d, sh.p_drop, seed, 0, step);
        ka_ref_attention_backward(qkv.stored, dy.stored, gs, b, t, H, d, sh.p_drop, seed, 0,
                                  step);
        ka_ref_attention_backward(qkv.exact, dy.exact, ge, b, t, H, d, sh.p_drop, seed, 0,
                                  step);
        char w2[200];
        double ytol = 1e-5 * (1.0 + t / 256.0), gtol = 2e-6 * (t + 4);
        snprintf(w2, sizeof w2, "y %s", what);
        expect_stored(w2, &y, ys, 1e-4, ytol);
        float *yg = read_back(&y), *gg = read_back(&dq);
        expect_y_exact(yg, ye, qkv.exact, b, t, H, d, p, 1e-4 + ytol, w2);
        expect_rounding_shows(w2, yg, ys, ye, ny);
        ka_plan pl = ka_attention_plan_for(ctx, b, t, H, d);
        if (ka_attention_lowp_saved_elems(ctx, b, t, H, d) == (uint64_t)b * H * t ||
            pl.saved == KA_SAVED_LSE) { /* the row logsumexps lead saved */
            double *lse = dalloc((uint64_t)b * H * t);
            float *sg = read_back(&saved);
            ka_ref_attention_lse(qkv.stored, lse, b, t, H, d);
            uint64_t bad = 0;
            for (uint64_t i = 0; i < (uint64_t)b * H * t; i++)
                bad += !(fabs(sg[i] - lse[i]) <= 1e-5 + 1e-5 * fabs(lse[i]));
            TH_CHECK(bad == 0, "%s lse %s: %llu rows off the reference", label, what,
                     (unsigned long long)bad);
            free(lse), free(sg);
        }
        snprintf(w2, sizeof w2, "dqkv (beta 0 over NaN) %s", what);
        expect_stored(w2, &dq, gs, 1e-4, gtol);
        expect_rounding_shows(w2, gg, gs, ge, nq);
        /* beta 1 adds to what is there */
        th_fill_uniform(init, nq, -1, 1);
        th_buf_write(&dq, init);
        for (uint64_t i = 0; i < nq; i++)
            gs[i] += init[i];
        TH_OK(ctx, vkt_stream_reset(s));
        TH_OK(ctx, ka_attention_backward_lowp(s, type, th_half_view(&qkv), th_view(&y),
                                              th_view(&saved), th_view(&ctrl), th_half_view(&dy),
                                              th_view(&dq), 1.0f, th_view(&ws), b, t, H, d,
                                              sh.p_drop, seed, 0, 0));
        if (TH_OK(ctx, vkt_stream_run(s))) {
            snprintf(w2, sizeof w2, "dqkv (beta 1) %s", what);
            expect_stored(w2, &dq, gs, 1e-4, gtol);
        }
        th_buf_guards_ok(&ws, "workspace");
        th_buf_guards_ok(&saved, "saved");
        free(ys), free(ye), free(gs), free(ge), free(yg), free(gg);
    }
out:
    free(init);
    th_half_free(&qkv), th_half_free(&dy);
    th_buf_destroy(&y), th_buf_destroy(&saved), th_buf_destroy(&ws), th_buf_destroy(&dq);
    th_buf_destroy(&ctrl);
}

/* An fp32 type, short arrays, a view past its buffer: clear errors naming the call. */
static void check_errors(void)
{
    const uint32_t b = 1, t = 5, H = 2, d = 4;
    uint64_t nq = (uint64_t)b * t * 3 * H * d, ny = (uint64_t)b * t * H * d;
    uint64_t np = ka_attention_lowp_saved_elems(ctx, b, t, H, d);
    uint64_t nw = ka_attention_lowp_workspace_elems(ctx, b, t, H, d);
    th_half qkv = th_half_new(ctx, VKT_DTYPE_FP16, nq, 0, -1, 1);
    th_half dy = th_half_new(ctx, VKT_DTYPE_FP16, ny, 0, -1, 1);
    th_buf y = th_buf_create(ctx, ny), saved = th_buf_create(ctx, np);
    th_buf ws = th_buf_create(ctx, nw), dq = th_buf_create(ctx, nq);
    /* views one element short of their buffers' ends (past the guards) */
    vkt_view small = {saved.buffer, saved.offset + saved.guard + 1};
    vkt_view wsmall = {ws.buffer, ws.offset + ws.guard + 1};
    vkt_view none = {NULL, 0}, q = th_half_view(&qkv), g = th_half_view(&dy);
    TH_OK(ctx, vkt_stream_reset(s));
    TH_STATUS(ctx, ka_attention_lowp(s, VKT_DTYPE_FP32, q, th_view(&y), th_view(&saved), none,
                                     b, t, H, d, 0.0f, 0, 0, 0),
              VKT_ERROR_INVALID_ARGUMENT);
    TH_CHECK(strstr(vkt_context_errmsg(ctx), "ka_attention_lowp") &&
                 strstr(vkt_context_errmsg(ctx), "not fp16 or bf16"),
             "%s: an fp32 type: %s", label, vkt_context_errmsg(ctx));
    TH_STATUS(ctx, ka_attention_lowp(s, VKT_DTYPE_FP16, q, th_view(&y), small, none,
                                     b, t, H, d, 0.0f, 0, 0, 0),
              VKT_ERROR_INVALID_ARGUMENT);
    TH_CHECK(strstr(vkt_context_errmsg(ctx), "saved"), "%s: a short saved array: %s", label,
             vkt_context_errmsg(ctx));
    TH_STATUS(ctx, ka_attention_backward_lowp(s, VKT_DTYPE_FP16, q, th_view(&y),
                                              th_view(&saved), none, g, th_view(&dq), 0.0f,
                                              wsmall, b, t, H, d, 0.0f, 0, 0, 0),
              VKT_ERROR_INVALID_ARGUMENT);
    TH_CHECK(strstr(vkt_context_errmsg(ctx), "workspace"), "%s: a short workspace: %s", label,
             vkt_context_errmsg(ctx));
    vkt_view past = {q.buffer, q.offset + 2 * nq + 4096};
    TH_STATUS(ctx, ka_attention_lowp(s, VKT_DTYPE_BF16, past, th_view(&y), th_view(&saved),
                                     none, b, t, H, d, 0.0f, 0, 0, 0),
              VKT_ERROR_INVALID_ARGUMENT);
    TH_CHECK(strstr(vkt_context_errmsg(ctx), "qkv"), "%s: qkv past its buffer: %s", label,
             vkt_context_errmsg(ctx));
    th_half_free(&qkv), th_half_free(&dy);
    th_buf_destroy(&y), th_buf_destroy(&saved), th_buf_destroy(&ws), th_buf_destroy(&dq);
}

int main(void)
{
    th_init("test_attention_lowp");
    /* filter, the variant it forces */
    const struct {
        const char *filter;
        gpu_variant v;
    } runs[] = {
        {"attention_lowp_flash", GPU_V_ATTENTION_LOWP_FLASH},
        {"gpu,attention_lowp_flash", GPU_V_ATTENTION_LOWP_FLASH},
        {"attention_lowp_widen,attention_shuffle", GPU_V_ATTENTION_LOWP_WIDEN},
        {"attention_lowp_widen,attention_rows", GPU_V_ATTENTION_LOWP_WIDEN},
        {"attention_lowp_widen,attention_flash", GPU_V_ATTENTION_LOWP_WIDEN},
    };
    const shape shapes[] = {{2, 7, 3, 3, 0.0f}, {1, 13, 2, 5, 0.25f}, {2, 67, 1, 8, 0.0f},
                            {1, 37, 2, 32, 0.1f}};
    for (size_t r = 0; r < sizeof runs / sizeof runs[0]; r++) {
        ctx = th_context_filter(runs[r].filter);
        label = runs[r].filter;
        if (!TH_CHECK(ctx->kv[GPU_FAMILY_ATTENTION_LOWP] == runs[r].v, "%s forced", label))
            continue;
        s = th_stream(ctx, 0);
        for (int ti = 0; ti < 2; ti++) {
            vkt_dtype type = ti ? VKT_DTYPE_BF16 : VKT_DTYPE_FP16;
            for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
                check(type, shapes[i], i % 2);
        }
        check_errors();
        vkt_stream_destroy(s);
        th_context_release(ctx);
        printf("  %s: checked\n", label);
    }
    return th_finish();
}
