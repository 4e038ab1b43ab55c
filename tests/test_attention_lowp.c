/* test_attention_lowp.c - causal attention of 16-bit q, k, v (ka_attention_lowp and its
 * backward, engine/kernels/attention_lowp.c) against the double references
 * (ka_ref_attention*), for every variant of the attention_lowp family and both types, in
 * parts (`--part`, harness.h):
 *   flash    attention_lowp_flash planned for lavapipe (cpu style: one lane a row) and as
 *            for a GPU (lane groups and shuffles);
 *   widen    attention_lowp_widen over each fp32 attention (attention_shuffle,
 *            attention_rows, attention_flash);
 *   frag     attention_lowp_frag, the cooperative-matrix tiling of the forward and the
 *            backward with fp32 multiply-adds (attention_frag.comp,
 *            attention_frag_bwd.comp): every device with 16-bit storage runs it, so
 *            lavapipe checks the staging, fragment indexing, softmax, masks, dropout and
 *            stores attention_lowp_coopmat shares;
 *   coopmat  attention_lowp_coopmat where the device has cooperative matrices (Mesa 26's
 *            lavapipe: .ci/run sets VKT_TEST_LOWP_ROWS=attention_lowp_coopmat there, and
 *            the part then fails unless it ran); elsewhere it says it was skipped and why.
 *            Its fp16 runs attention_coopmat_f16 and attention_coopmat_bwd_f16 (the
 *            matrix instruction); bf16 attention_coopmat_bf16 and _bwd_bf16 where the
 *            device has bf16 matrices, else attention_frag and attention_frag_bwd;
 *   plans    without a device: the variant chosen and the fragment plans on stated
 *            devices (an H100's matrix shapes, lavapipe 26's 8x8x8), and the kernels'
 *            SPIR-V against their descriptions.
 * Each device part ends with the errors (an fp32 type, short arrays, a view past its
 * buffer).
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
 *  (1') frag and coopmat round the probabilities multiplying v to the 16-bit type (the
 *      matrix instruction's operand): y moves by at most sum_j |dP_ij| |v_j| / l_i <=
 *      2p max |v| drop_scale (2p: a rounding of the device's conversion toward zero
 *      would be covered too), added to y's tolerances; the backward reads that y through
 *      D_i = dy_i . y_i, whose error E_i = dy_i . (y_i - ref) is measured, and moves dq_i
 *      by at most |E_i| max |k| / sqrt(d) and dk_j by at most sum_i p_ij |E_i| max |q| /
 *      sqrt(d) <= t max E max |q| / sqrt(d): 4 t max E / sqrt(d) (|q|, |k| <= 2) is added
 *      to dqkv's. Their backward also rounds dS_ij = p_ij (f_ij dP_ij - D_i) and f_ij p_ij
 *      (f_ij the dropout factor, at most drop_scale; dP_ij = dy_i . v_j) to the 16-bit
 *      type, the matrix operands: per element, 2p sum_j |dS_ij| |k_jc| / sqrt(d) is added
 *      to dq_ic's tolerance, 2p sum_i |dS_ij| |q_ic| / sqrt(d) to dk_jc's and 2p sum_i
 *      f_ij p_ij |dy_ic| to dv_jc's, |dS_ij| bounded by p_ij (drop_scale |dP_ij| + |D_i|)
 *      from the reference (fp16: plus 2^-24 for each subnormal operand);
 *  (3) the rounding shows: the largest error of y and of dqkv against the unrounded
 *      reference is more than 4 times the largest against the stored values (a kernel
 *      that read unrounded values, or the wrong 16-bit type, fails here or in (1)); not
 *      for frag and coopmat, whose (1') errors are of the inputs' rounding's size (the
 *      wrong type still fails (1)).
 * Shapes: t 7, 13, 29, 37, 67 (off every block and tile), head widths 3, 5 (scalar rows),
 * 8, 20 (padded to 24 by the fragment tiling) and 32, 1 to 3 heads, b 1 and 2, dropout on and off, 16-bit views starting at an odd element;
 * dqkv with beta 0 over NaNs and beta 1. The reference backward itself is checked against
 * central differences by test_attention; each kernel's dqkv too, here, along one direction
 * (expect_directional: central differences of the double forward on the stored values).
 * Errors: an fp32 type, a short saved array or workspace, a view past its buffer. */
#include "harness.h"
#include "gpu/gpu.h"
#include "lowp_case.h"
#include "kernels/attention.h"
#include "ctrl.h"
#include "spec.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static vkt_context *ctx;
static vkt_stream *s;
static const char *label;
static int rounds_p; /* the variant rounds the probabilities (1') */

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

/* (1') of the backward: tol [b t, 3 H d] += each gradient's bound from the rounding of dS
 * and of the dropped probabilities (x: the stored inputs, ys: the reference's y). */
static void add_operand_bounds(double *tol, const double *x, const double *dy,
                               const double *ys, uint32_t b, uint32_t t, uint32_t H,
                               uint32_t d, float p_drop, double p, double sub)
{
    uint64_t HD = (uint64_t)H * d;
    double *probs = dalloc((uint64_t)b * H * t * t), f = 1.0 / (1.0 - p_drop);
    double scale = 1.0 / sqrt((double)d);
    ka_ref_attention_probs(x, probs, b, t, H, d);
    for (uint32_t bb = 0; bb < b; bb++)
        for (uint32_t h = 0; h < H; h++)
            for (uint32_t i = 0; i < t; i++) {
                uint64_t ri = (uint64_t)bb * t + i;
                const double *q = x + ri * 3 * HD + h * d, *gy = dy + ri * HD + h * d;
                double di = 0.0;
                for (uint32_t c = 0; c < d; c++)
                    di += gy[c] * ys[ri * HD + h * d + c];
                for (uint32_t j = 0; j <= i; j++) {
                    uint64_t rj = (uint64_t)bb * t + j;
                    const double *k = x + rj * 3 * HD + HD + h * d, *v = k + HD;
                    double pr = probs[(((uint64_t)bb * H + h) * t + i) * t + j], dp = 0.0;
                    for (uint32_t c = 0; c < d; c++)
                        dp += gy[c] * v[c];
                    double ds = pr * (f * fabs(dp) + fabs(di));
                    for (uint32_t c = 0; c < d; c++) {
                        tol[ri * 3 * HD + h * d + c] += (2 * p * ds + sub) * scale * fabs(k[c]);
                        tol[rj * 3 * HD + HD + h * d + c] +=
                            (2 * p * ds + sub) * scale * fabs(q[c]);
                        tol[rj * 3 * HD + 2 * HD + h * d + c] +=
                            (2 * p * f * pr + sub) * fabs(gy[c]);
                    }
                }
            }
    free(probs);
}

/* got within rtol |want| + tol[i] of want, element by element */
static void expect_within(const char *what, th_buf *b, const double *want, double rtol,
                          const double *tol)
{
    float *got = read_back(b);
    uint64_t bad = 0, first = 0;
    double worst = 0.0;
    for (uint64_t i = 0; i < b->n; i++) {
        double lim = rtol * fabs(want[i]) + tol[i], e = fabs(got[i] - want[i]);
        if (!(e <= lim) && bad++ == 0)
            first = i;
        worst = e / lim > worst ? e / lim : worst;
    }
    TH_CHECK(bad == 0, "%s %s (stored values, operands rounded): %llu of %llu off; first at "
             "%llu: got %.9g want %.9g (worst at %.2f of its tolerance)", label, what,
             (unsigned long long)bad, (unsigned long long)b->n, (unsigned long long)first,
             got[bad ? first : 0], want[bad ? first : 0], worst);
    th_buf_guards_ok(b, what);
    free(got);
}

/* The kernel's gradient g (beta 0) against central differences of the double forward on
 * the stored values, L(x) = sum dy . y(x), along e = sign of the reference's gradient:
 * |g . e - (L(x + h e) - L(x - h e)) / 2h| within sum_i tol_i + 1e-4 sum_i |gs_i| (tol:
 * each element's tolerance; h = 2^-14 in double, truncation O(h^2 nq^1.5)). Independent of
 * the reference backward: g is the derivative of the attention the kernel computes. */
static void expect_directional(const char *what, const float *g, const double *gs,
                               const double *tol, const double *x, const double *dy,
                               uint32_t b, uint32_t t, uint32_t H, uint32_t d, float p_drop,
                               uint64_t seed, uint64_t b0, uint64_t step)
{
    uint64_t nq = (uint64_t)b * t * 3 * H * d, ny = (uint64_t)b * t * H * d;
    double *xp = dalloc(nq), *yp = dalloc(ny), h = ldexp(1.0, -14), l[2] = {0, 0};
    double ge = 0.0, lim = 0.0;
    for (int side = 0; side < 2; side++) {
        for (uint64_t i = 0; i < nq; i++)
            xp[i] = x[i] + (side ? -h : h) * (gs[i] < 0 ? -1.0 : 1.0);
        ka_ref_attention(xp, yp, b, t, H, d, p_drop, seed, b0, step);
        for (uint64_t i = 0; i < ny; i++)
            l[side] += dy[i] * yp[i];
    }
    for (uint64_t i = 0; i < nq; i++) {
        ge += g[i] * (gs[i] < 0 ? -1.0 : 1.0);
        lim += tol[i] + 1e-4 * fabs(gs[i]);
    }
    double fd = (l[0] - l[1]) / (2 * h);
    TH_CHECK(fabs(ge - fd) <= lim, "%s %s: g . e %.9g against central differences %.9g "
             "(within %.3g)", label, what, ge, fd, lim);
    free(xp), free(yp);
}

/* frag and coopmat: the forward and both backward passes of the call run on the fragment
 * tiling (a plan for each), not attention_lowp_flash's passes */
static void expect_fragment_plans(vkt_dtype type, uint32_t b, uint32_t t, uint32_t H,
                                  uint32_t d)
{
    const gpu_profile *pf = &ctx->profile;
    const gpu_mat_shape *m = NULL;
    if (ctx->kv[GPU_FAMILY_ATTENTION_LOWP] == GPU_V_ATTENTION_LOWP_COOPMAT &&
        (type == VKT_DTYPE_FP16 || (pf->caps & GPU_CAP_BFLOAT16)))
        m = gpu_mat_for(pf, type == VKT_DTYPE_FP16 ? GPU_MAT_F16 : GPU_MAT_BF16);
    ka_frag_plan pl;
    for (uint32_t pass = 0; pass < 3; pass++)
        TH_CHECK(ka_frag_plan_pass(pf, m, pass, b, t, H, d, &pl), "%s %s t=%u d=%u: pass %u "
                 "has a fragment plan", label, vkt_dtype_name(type), t, d, pass);
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
    th_buf ws = th_buf_create(ctx, nw), dq = th_buf_create(ctx, nq), ctrl = th_buf_create(ctx, CTRL_KEY_WORDS);
    /* with dropout: sequences keyed from b0 3 plus the control block's row base 5 times
     * b_row 2 (the pipeline's micro-batches), so the reference's b0 is 13 */
    uint64_t b0 = sh.p_drop > 0.0f ? 3 : 0, b_row = sh.p_drop > 0.0f ? 2 : 0, row0 = 5;
    uint32_t st2[CTRL_KEY_WORDS] = {(uint32_t)step, 0};
    st2[CTRL_ROW0 - CTRL_STEP] = (uint32_t)row0;
    uint64_t rb0 = b0 + row0 * b_row;
    TH_OK(ctx, vkt_buffer_write(ctrl.buffer, ctrl.offset * 4, st2, sizeof st2));
    float *init = th_alloc_floats(nq);
    for (uint64_t i = 0; i < nq; i++)
        init[i] = NAN;
    th_buf_write(&dq, init);
    char what[160];
    snprintf(what, sizeof what, "%s b=%u t=%u heads=%u d=%u p_drop=%.2f skip=%llu",
             vkt_dtype_name(type), b, t, H, d, (double)sh.p_drop, (unsigned long long)skip);
    TH_OK(ctx, vkt_stream_reset(s));
    TH_OK(ctx, ka_attention_lowp(s, type, th_half_view(&qkv), th_view(&y), th_view(&saved),
                                 th_view(&ctrl), b, t, H, d, sh.p_drop, seed, b0, b_row));
    TH_OK(ctx, ka_attention_backward_lowp(s, type, th_half_view(&qkv), th_view(&y),
                                          th_view(&saved), th_view(&ctrl), th_half_view(&dy),
                                          th_view(&dq), 0.0f, th_view(&ws), b, t, H, d,
                                          sh.p_drop, seed, b0, b_row));
    if (!TH_OK(ctx, vkt_stream_run(s)))
        goto out;
    {
        double *ys = dalloc(ny), *ye = dalloc(ny), *gs = dalloc(nq), *ge = dalloc(nq);
        ka_ref_attention(qkv.stored, ys, b, t, H, d, sh.p_drop, seed, rb0, step);
        ka_ref_attention(qkv.exact, ye, b, t, H, d, sh.p_drop, seed, rb0, step);
        ka_ref_attention_backward(qkv.stored, dy.stored, gs, b, t, H, d, sh.p_drop, seed, rb0,
                                  step);
        ka_ref_attention_backward(qkv.exact, dy.exact, ge, b, t, H, d, sh.p_drop, seed, rb0,
                                  step);
        char w2[200];
        double ytol = 1e-5 * (1.0 + t / 256.0), gtol = 2e-6 * (t + 4);
        float *yg = read_back(&y), *gg = read_back(&dq);
        if (rounds_p) { /* (1') */
            double vmax = 0.0, emax = 0.0;
            for (uint64_t r = 0; r < (uint64_t)b * t; r++)
                for (uint64_t c = 0; c < 3ull * H * d; c++)
                    if (c >= 2ull * H * d && fabs(qkv.stored[r * 3 * H * d + c]) > vmax)
                        vmax = fabs(qkv.stored[r * 3 * H * d + c]);
            for (uint64_t r = 0; r < (uint64_t)b * t; r++)
                for (uint32_t h = 0; h < H; h++) {
                    double e = 0.0;
                    for (uint32_t c = 0; c < d; c++) {
                        uint64_t o = r * H * d + (uint64_t)h * d + c;
                        e += dy.stored[o] * (yg[o] - ys[o]);
                    }
                    emax = fabs(e) > emax ? fabs(e) : emax;
                }
            ytol += 2.0 * p * vmax / (1.0 - sh.p_drop);
            gtol += 4.0 * t * emax / sqrt((double)d);
            expect_fragment_plans(type, b, t, H, d);
        }
        snprintf(w2, sizeof w2, "y %s", what);
        expect_stored(w2, &y, ys, 1e-4, ytol);
        expect_y_exact(yg, ye, qkv.exact, b, t, H, d, p, 1e-4 + ytol, w2);
        if (!rounds_p) /* (1') outweighs the inputs' rounding in (3)'s ratio */
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
        double *gt = dalloc(nq);
        for (uint64_t i = 0; i < nq; i++)
            gt[i] = gtol;
        if (rounds_p)
            add_operand_bounds(gt, qkv.stored, dy.stored, ys, b, t, H, d, sh.p_drop, p,
                               type == VKT_DTYPE_FP16 ? ldexp(1.0, -24) : 0.0);
        snprintf(w2, sizeof w2, "dqkv (beta 0 over NaN) %s", what);
        if (rounds_p)
            expect_within(w2, &dq, gs, 1e-4, gt);
        else
            expect_stored(w2, &dq, gs, 1e-4, gtol);
        if (!rounds_p)
            expect_rounding_shows(w2, gg, gs, ge, nq);
        expect_directional(w2, gg, gs, gt, qkv.stored, dy.stored, b, t, H, d, sh.p_drop, seed,
                           rb0, step);
        /* beta 1 adds to what is there */
        th_fill_uniform(init, nq, -1, 1);
        th_buf_write(&dq, init);
        for (uint64_t i = 0; i < nq; i++)
            gs[i] += init[i];
        TH_OK(ctx, vkt_stream_reset(s));
        TH_OK(ctx, ka_attention_backward_lowp(s, type, th_half_view(&qkv), th_view(&y),
                                              th_view(&saved), th_view(&ctrl), th_half_view(&dy),
                                              th_view(&dq), 1.0f, th_view(&ws), b, t, H, d,
                                              sh.p_drop, seed, b0, b_row));
        if (TH_OK(ctx, vkt_stream_run(s))) {
            snprintf(w2, sizeof w2, "dqkv (beta 1) %s", what);
            if (rounds_p)
                expect_within(w2, &dq, gs, 1e-4, gt);
            else
                expect_stored(w2, &dq, gs, 1e-4, gtol);
        }
        free(gt);
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

/* The control block's row base (a pipeline micro-batch's, a replica's row_offset: row0
 * b_row sequences read at run time, shaders/ctrl.h) keys the dropout masks as the same
 * offset given as b0 does: the forward's y bit for bit equal either way. */
static void check_row_base(vkt_dtype type)
{
    const uint32_t b = 2, t = 13, H = 2, d = 8;
    const float pd = 0.3f;
    uint64_t nq = (uint64_t)b * t * 3 * H * d, ny = (uint64_t)b * t * H * d;
    uint64_t np = ka_attention_lowp_saved_elems(ctx, b, t, H, d), seed = 0xB0B0ull;
    th_half qkv = th_half_new(ctx, type, nq, 0, -2, 2);
    th_buf y1 = th_buf_create(ctx, ny), y2 = th_buf_create(ctx, ny);
    th_buf saved = th_buf_create(ctx, np), ctrl = th_buf_create(ctx, CTRL_KEY_WORDS);
    uint32_t words[CTRL_KEY_WORDS] = {0};
    words[CTRL_STEP] = 7;
    words[CTRL_ROW0 - CTRL_STEP] = 3; /* row0 3, b_row 2: sequences from 6 on */
    TH_OK(ctx, vkt_buffer_write(ctrl.buffer, ctrl.offset * 4, words, sizeof words));
    TH_OK(ctx, vkt_stream_reset(s));
    TH_OK(ctx, ka_attention_lowp(s, type, th_half_view(&qkv), th_view(&y1), th_view(&saved),
                                 th_view(&ctrl), b, t, H, d, pd, seed, 6, 0));
    TH_OK(ctx, vkt_stream_run(s));
    TH_OK(ctx, vkt_stream_reset(s));
    TH_OK(ctx, ka_attention_lowp(s, type, th_half_view(&qkv), th_view(&y2), th_view(&saved),
                                 th_view(&ctrl), b, t, H, d, pd, seed, 0, 2));
    TH_OK(ctx, vkt_stream_run(s));
    float *a = th_alloc_floats(ny), *c = th_alloc_floats(ny);
    th_buf_read(&y1, a);
    th_buf_read(&y2, c);
    TH_CHECK(!memcmp(a, c, ny * sizeof *a), "%s %s: y with b0 6 equals y with the control "
             "block's row base 3 x b_row 2 (dropout %.1f)", label, vkt_dtype_name(type),
             (double)pd);
    free(a), free(c);
    th_half_free(&qkv);
    th_buf_destroy(&y1), th_buf_destroy(&y2), th_buf_destroy(&saved), th_buf_destroy(&ctrl);
}

/* Every shape and both types on the variant the filter forces. */
static void check_run(const char *filter, gpu_variant v)
{
    ctx = th_context_filter(filter);
    label = filter;
    rounds_p = v == GPU_V_ATTENTION_LOWP_COOPMAT || v == GPU_V_ATTENTION_LOWP_FRAG;
    const shape shapes[] = {{2, 7, 3, 3, 0.0f}, {1, 13, 2, 5, 0.25f}, {2, 67, 1, 8, 0.0f},
                            {1, 37, 2, 32, 0.1f}, {1, 29, 1, 20, 0.0f}};
    if (TH_CHECK(ctx->kv[GPU_FAMILY_ATTENTION_LOWP] == v, "%s forced", label)) {
        s = th_stream(ctx, 0);
        for (int ti = 0; ti < 2; ti++) {
            vkt_dtype type = ti ? VKT_DTYPE_BF16 : VKT_DTYPE_FP16;
            for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
                check(type, shapes[i], i % 2);
            check_row_base(type);
        }
        check_errors();
        vkt_stream_destroy(s);
        printf("  %s: checked\n", label);
    }
    th_context_release(ctx);
}

/* attention_lowp_coopmat where the device runs it; else skipped, saying why (and failing
 * when VKT_TEST_LOWP_ROWS names it, or when anything but cooperative matrices is
 * missing). */
static void check_coopmat(void)
{
    if (lowp_coopmat_runs(GPU_V_ATTENTION_LOWP_COOPMAT, "attention_coopmat_bf16",
                          "attention_frag (no bf16 matrices)"))
        check_run("attention_lowp_coopmat", GPU_V_ATTENTION_LOWP_COOPMAT);
}

/* ---- without a device ----------------------------------------------------------------- */

/* The kernels' SPIR-V (the prebuilt modules too) against their descriptions; the choice
 * of attention_lowp_coopmat on stated devices; the fragment plans there: the fragments
 * divide the warps' rows, the padded width and the key tile, the tile fits, the grid
 * covers every row block. */
static void check_plans(void)
{
    uint32_t nk;
    const gpu_kernel *ks = ka_frag_kernels(&nk);
    for (uint32_t i = 0; i < nk; i++) {
        char msg[VKT_ERRMSG_SIZE] = "";
        TH_CHECK(gpu_kernel_check(&ks[i], ks[i].n_spec, msg) == VKT_OK,
                 "%s: the SPIR-V agrees with its description: %s", ks[i].name, msg);
    }
    gpu_profile h100, plain, lvp26;
    gpu_profile_stated(VKT_DEVICE_TYPE_DISCRETE_GPU, 132, 48 * 1024, 32, &h100);
    plain = h100;
    gpu_profile_add_mat(&h100, (gpu_mat_shape){16, 8, 16, 0, 0, 1, 1});
    gpu_profile_add_mat(&h100, (gpu_mat_shape){16, 16, 16, GPU_COMPONENT_F16, GPU_COMPONENT_F16,
                                                GPU_COMPONENT_F32, GPU_COMPONENT_F32});
    gpu_profile_add_mat(&h100, (gpu_mat_shape){16, 16, 16, GPU_COMPONENT_BF16,
                                                GPU_COMPONENT_BF16, GPU_COMPONENT_F32,
                                                GPU_COMPONENT_F32});
    h100.caps |= GPU_CAP_BFLOAT16;
    gpu_profile_stated(VKT_DEVICE_TYPE_CPU, 2, 32 * 1024, 8, &lvp26);
    gpu_profile_add_mat(&lvp26, (gpu_mat_shape){8, 8, 8, 0, 0, 1, 1});
    lvp26.loop_budget = 60000; /* llvmpipe's (profile.c) */
    lowp_check_choice(GPU_FAMILY_ATTENTION_LOWP, GPU_V_ATTENTION_LOWP_COOPMAT, &h100, &plain,
                      GPU_V_ATTENTION_LOWP_FLASH, &lvp26, GPU_V_ATTENTION_LOWP_WIDEN);
    const lowp_device devs[] = {
        {"H100 f16 16x16x16", &h100, gpu_mat_for(&h100, GPU_MAT_F16), 16, 32},
        {"H100 16x8x16", &h100, &(gpu_mat_shape){16, 8, 16, 0, 0, 1, 1}, 16, 32},
        {"lavapipe 26 8x8x8", &lvp26, gpu_mat_for(&lvp26, GPU_MAT_F16), 8, 8},
        {"attention_frag", &lvp26, NULL, 8, 8}};
    const uint32_t dims[][4] = {{64, 1024, 12, 64}, {1, 7, 1, 3}, {2, 67, 3, 128},
                                {8, 256, 4, 20}};
    for (size_t k = 0; k < sizeof devs / sizeof devs[0]; k++)
        for (size_t i = 0; i < sizeof dims / sizeof dims[0] * 3; i++) {
            uint32_t pass = (uint32_t)(i % 3); /* the forward, the backward's two passes */
            uint32_t b = dims[i / 3][0], t = dims[i / 3][1], H = dims[i / 3][2];
            uint32_t d = dims[i / 3][3];
            ka_frag_plan pl;
            int ok = ka_frag_plan_pass(devs[k].p, devs[k].mat, pass, b, t, H, d, &pl);
            if (devs[k].p == &lvp26 && t == 1024) {
                /* lavapipe's loop budget: that call runs attention_lowp_flash's */
                TH_CHECK(!ok, "%s b=%u t=%u d=%u pass %u: no plan past the loop budget",
                         devs[k].name, b, t, d, pass);
                continue;
            }
            if (!TH_CHECK(ok, "%s b=%u t=%u heads=%u d=%u pass %u: a plan", devs[k].name, b, t,
                          H, d, pass))
                continue;
            uint32_t q = pl.tn > pl.tk ? pl.tn : pl.tk;
            TH_CHECK(pl.tm == devs[k].tm && pl.sg == devs[k].sg && pl.bm == pl.warps * pl.tm &&
                         pl.threads == pl.warps * pl.sg && pl.threads >= pl.bm &&
                         (pl.tm * pl.tn) % pl.sg == 0 && pl.dp >= d && pl.dp < d + q &&
                         pl.dp % pl.tn == 0 && pl.dp % pl.tk == 0 && pl.bn % pl.tn == 0 &&
                         pl.bn % pl.tk == 0 && pl.shared_bytes <= devs[k].p->shared_memory &&
                         pl.threads <= devs[k].p->max_invocations,
                     "%s b=%u t=%u d=%u pass %u: %u warps of %u lanes, fragments %ux%ux%u, %u "
                     "rows, tiles of %u, width %u, %u bytes", devs[k].name, b, t, d, pass,
                     pl.warps, pl.sg,
                     pl.tm, pl.tn, pl.tk, pl.bm, pl.bn, pl.dp, pl.shared_bytes);
            TH_CHECK((uint64_t)pl.blocks_per_head * pl.bm >= t &&
                         (uint64_t)(pl.blocks_per_head - 1) * pl.bm < t &&
                         pl.blocks == (uint64_t)b * H * pl.blocks_per_head &&
                         (uint64_t)pl.groups[0] * pl.groups[1] >= pl.blocks,
                     "%s b=%u t=%u d=%u pass %u: the grid covers the %llu blocks (%u x %u)",
                     devs[k].name, b, t, d, pass, (unsigned long long)pl.blocks, pl.groups[0],
                     pl.groups[1]);
        }
    /* the character LM's attention on the H100: 4 warps of 16 rows */
    ka_frag_plan pl;
    TH_CHECK(ka_frag_plan_make(&h100, gpu_mat_for(&h100, GPU_MAT_F16), 64, 1024, 12, 64, &pl) &&
                 pl.warps == 4 && pl.bm == 64,
             "H100 b=64 t=1024 d=64: 4 warps, 64 rows a workgroup (%u, %u)", pl.warps, pl.bm);
    /* its backward: two warps of 16 rows (the 4-warp tiles pass 48 KiB of shared memory) */
    for (uint32_t pass = 1; pass < 3; pass++)
        TH_CHECK(ka_frag_plan_pass(&h100, gpu_mat_for(&h100, GPU_MAT_F16), pass, 64, 1024, 12,
                                   64, &pl) && pl.warps == 2 && pl.bm == 32 && pl.bn == 32,
                 "H100 b=64 t=1024 d=64 backward pass %u: 2 warps, 32 rows, tiles of 32 (%u, "
                 "%u, %u; %u bytes)", pass, pl.warps, pl.bm, pl.bn, pl.shared_bytes);
}

int main(int argc, char **argv)
{
    th_init("test_attention_lowp");
    th_parts(argc, argv);
    if (th_part("plans"))
        check_plans();
    if (th_part("flash")) {
        check_run("attention_lowp_flash", GPU_V_ATTENTION_LOWP_FLASH);
        check_run("gpu,attention_lowp_flash", GPU_V_ATTENTION_LOWP_FLASH);
    }
    if (th_part("widen")) {
        check_run("attention_lowp_widen,attention_shuffle", GPU_V_ATTENTION_LOWP_WIDEN);
        check_run("attention_lowp_widen,attention_rows", GPU_V_ATTENTION_LOWP_WIDEN);
        check_run("attention_lowp_widen,attention_flash", GPU_V_ATTENTION_LOWP_WIDEN);
    }
    if (th_part("frag"))
        check_run("attention_lowp_frag", GPU_V_ATTENTION_LOWP_FRAG);
    if (th_part("coopmat"))
        check_coopmat();
    return th_finish();
}
