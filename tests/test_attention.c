/* Fused causal attention (engine/kernels/attention.h), every variant of the family
 * (attention_shuffle, attention_flash, attention_rows) forced in turn through the kernel
 * filter. (1) The double reference backward against central differences of a random
 * weighted sum of the reference forward, with and without dropout (a fixed step fixes
 * the mask); the parts of a split batch (keyed from their first sequence's global index
 * b0) give the whole batch's results; the reference lse against the reference probs.
 * (2) The device forward (y, and what the variant saves: probs or the row logsumexps)
 * and backward (beta 0 over NaN, beta 1 over random values) against the references on
 * awkward shapes: t 1, t off every block and tile, head widths 3 to 128 (32, 48, 64, 96,
 * 128 among them), several heads, dropout on and off, with guard elements around every
 * tensor, both with views that can be read as vec4s and with odd offsets, with b0 0 and
 * not (once where the mask index wraps 2^32); one case at t = 2048 where the device's
 * loop budget allows. (3) Dropout: the mask read off the device is exactly the hash's,
 * masks change with the step read at run time by a replayed stream, results are bitwise
 * repeatable. (4) Error paths and the limits; what each variant asks of device memory
 * (attention_flash: O(b heads t), no t x t array). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dropout_hash.h"
#include "ctrl.h"
#include "harness.h"
#include "kernels/attention.h"

static vkt_context *g_ctx;
static int g_aligned; /* 1: tensors start 16-byte aligned (the vec4 paths); 0: odd offsets */

/* ---- device tensors with a host copy ---------------------------------------------- */

typedef struct tb {
    th_buf b;
    float *h;
} tb;

static tb tb_new(uint64_t n, float lo, float hi)
{
    tb x = {th_buf_create_at(g_ctx, n, g_aligned ? 64 : 67), th_alloc_floats(n)};
    th_fill_uniform(x.h, n, lo, hi);
    th_buf_write(&x.b, x.h);
    return x;
}

static void tb_free(tb *x)
{
    th_buf_destroy(&x->b);
    free(x->h);
}

static void run(vkt_stream *s)
{
    TH_OK(g_ctx, vkt_stream_run(s));
    TH_OK(g_ctx, vkt_stream_reset(s));
}

static void set_step(tb *ctrl, uint64_t step)
{
    uint32_t w[2] = {(uint32_t)step, (uint32_t)(step >> 32)};
    TH_OK(g_ctx, vkt_buffer_write(ctrl->b.buffer, ctrl->b.offset * 4, w, 8));
}

static double *to_double(const float *x, uint64_t n)
{
    double *d = malloc((n ? n : 1) * sizeof *d);
    for (uint64_t i = 0; d && i < n; i++)
        d[i] = x[i];
    return d;
}

/* Device result vs a double reference; checks the guards too. */
static int expect(tb *x, const double *want, const char *what, float rtol, float atol)
{
    float *got = th_alloc_floats(x->b.n), *w = th_alloc_floats(x->b.n);
    for (uint64_t i = 0; i < x->b.n; i++)
        w[i] = (float)want[i];
    th_buf_read(&x->b, got);
    int ok = th_compare(what, got, w, x->b.n, rtol, atol);
    ok &= th_buf_guards_ok(&x->b, what);
    free(got);
    free(w);
    return ok;
}

/* ---- (1) reference backward vs central differences ------------------------------ */

static double weighted_forward(const double *qkv, const double *w, double *y, uint32_t b,
                               uint32_t t, uint32_t h, uint32_t d, float pd, uint64_t seed,
                               uint64_t b0, uint64_t step)
{
    ka_ref_attention(qkv, y, b, t, h, d, pd, seed, b0, step);
    double l = 0.0;
    for (uint64_t i = 0; i < (uint64_t)b * t * h * d; i++)
        l += w[i] * y[i];
    return l;
}

static void test_ref_gradients(void)
{
    const uint32_t shapes[][4] = {{1, 1, 1, 2}, {2, 5, 3, 3}, {1, 7, 1, 4}, {2, 6, 2, 5}};
    for (unsigned si = 0; si < 4; si++)
        for (int dropout = 0; dropout < 2; dropout++) {
            uint32_t b = shapes[si][0], t = shapes[si][1], h = shapes[si][2], d = shapes[si][3];
            float pd = dropout ? 0.3f : 0.0f;
            uint64_t seed = 77 + si, step = 12345, n = (uint64_t)b * t * 3 * h * d;
            uint64_t b0 = si * 3; /* sequences at an offset in a split batch */
            uint64_t ny = (uint64_t)b * t * h * d;
            double *x = malloc(n * sizeof *x), *g = calloc(n, sizeof *g);
            double *w = malloc(ny * sizeof *w), *y = malloc(ny * sizeof *y);
            for (uint64_t i = 0; i < n; i++)
                x[i] = th_rand_uniform(-2, 2);
            for (uint64_t i = 0; i < ny; i++)
                w[i] = th_rand_uniform(-1, 1);
            ka_ref_attention_backward(x, w, g, b, t, h, d, pd, seed, b0, step);
            double worst = 0.0, eps = 1e-5;
            for (uint64_t i = 0; i < n; i++) {
                double keep = x[i];
                x[i] = keep + eps;
                double lp = weighted_forward(x, w, y, b, t, h, d, pd, seed, b0, step);
                x[i] = keep - eps;
                double lm = weighted_forward(x, w, y, b, t, h, d, pd, seed, b0, step);
                x[i] = keep;
                double fd = (lp - lm) / (2 * eps), err = fabs(fd - g[i]) / (1e-6 + fabs(fd));
                if (err > worst)
                    worst = err;
            }
            TH_CHECK(worst < 1e-5, "reference backward vs central differences, b=%u t=%u "
                     "heads=%u d=%u p_drop=%.1f: worst relative error %.2e", b, t, h, d,
                     (double)pd, worst);
            free(x);
            free(g);
            free(w);
            free(y);
        }
    /* The gradient check is not vacuous: dropout changes the gradient. */
    uint64_t n = 2 * 5 * 3 * 2 * 3, ny = 2 * 5 * 2 * 3;
    double *x = malloc(n * sizeof *x), *g0 = calloc(n, sizeof *g0), *g1 = calloc(n, sizeof *g1);
    double *w = malloc(ny * sizeof *w);
    for (uint64_t i = 0; i < n; i++)
        x[i] = th_rand_uniform(-2, 2);
    for (uint64_t i = 0; i < ny; i++)
        w[i] = th_rand_uniform(-1, 1);
    ka_ref_attention_backward(x, w, g0, 2, 5, 2, 3, 0.0f, 1, 0, 1);
    ka_ref_attention_backward(x, w, g1, 2, 5, 2, 3, 0.5f, 1, 0, 1);
    double diff = 0.0;
    for (uint64_t i = 0; i < n; i++)
        diff += fabs(g0[i] - g1[i]);
    TH_CHECK(diff > 1e-3, "dropout changes the reference gradient (%.3g)", diff);
    free(x);
    free(g0);
    free(g1);
    free(w);
}

/* A batch of 5 sequences split as [0, 2) with b0 = 0 and [2, 5) with b0 = 2: the parts'
 * outputs and gradients are exactly the whole batch's rows (the same masks), and a part
 * keyed from 0 instead draws other masks. */
static void test_ref_split(void)
{
    enum { B = 5, K = 2, T = 6, H = 2, D = 3 };
    const uint64_t rq = (uint64_t)T * 3 * H * D, ry = (uint64_t)T * H * D; /* per sequence */
    double *x = malloc(B * rq * sizeof *x), *dy = malloc(B * ry * sizeof *dy);
    double *y = malloc(B * ry * sizeof *y), *yp = malloc(B * ry * sizeof *yp);
    double *g = calloc(B * rq, sizeof *g), *gp = calloc(B * rq, sizeof *gp);
    for (uint64_t i = 0; i < B * rq; i++)
        x[i] = th_rand_uniform(-2, 2);
    for (uint64_t i = 0; i < B * ry; i++)
        dy[i] = th_rand_uniform(-1, 1);
    ka_ref_attention(x, y, B, T, H, D, 0.4f, 9, 0, 3);
    ka_ref_attention_backward(x, dy, g, B, T, H, D, 0.4f, 9, 0, 3);
    ka_ref_attention(x, yp, K, T, H, D, 0.4f, 9, 0, 3);
    ka_ref_attention(x + K * rq, yp + K * ry, B - K, T, H, D, 0.4f, 9, K, 3);
    ka_ref_attention_backward(x, dy, gp, K, T, H, D, 0.4f, 9, 0, 3);
    ka_ref_attention_backward(x + K * rq, dy + K * ry, gp + K * rq, B - K, T, H, D, 0.4f, 9, K,
                              3);
    TH_CHECK(memcmp(y, yp, B * ry * sizeof *y) == 0 && memcmp(g, gp, B * rq * sizeof *g) == 0,
             "reference: the parts of a split batch (b0 0 and %d) give the whole batch's y and "
             "gradient", K);
    ka_ref_attention(x + K * rq, yp + K * ry, B - K, T, H, D, 0.4f, 9, 0, 3);
    TH_CHECK(memcmp(y + K * ry, yp + K * ry, (B - K) * ry * sizeof *y) != 0,
             "reference: the second part keyed from sequence 0 draws other masks");
    free(x);
    free(dy);
    free(y);
    free(yp);
    free(g);
    free(gp);
}

/* The reference lse is the log of the softmax's denominator: exp(s_ij - lse_i) is p_ij. */
static void test_ref_lse(void)
{
    enum { B = 2, T = 7, H = 3, D = 5 };
    uint64_t nq = (uint64_t)B * T * 3 * H * D;
    double *x = malloc(nq * sizeof *x), *probs = malloc((uint64_t)B * H * T * T * sizeof *probs);
    double *lse = malloc((uint64_t)B * H * T * sizeof *lse), worst = 0.0;
    for (uint64_t i = 0; i < nq; i++)
        x[i] = th_rand_uniform(-3, 3);
    ka_ref_attention_probs(x, probs, B, T, H, D);
    ka_ref_attention_lse(x, lse, B, T, H, D);
    for (uint32_t bb = 0; bb < B; bb++)
        for (uint32_t h = 0; h < H; h++)
            for (uint32_t i = 0; i < T; i++)
                for (uint32_t j = 0; j <= i; j++) {
                    double s = 0.0;
                    for (uint32_t c = 0; c < D; c++)
                        s += x[((uint64_t)bb * T + i) * 3 * H * D + h * D + c] *
                             x[((uint64_t)bb * T + j) * 3 * H * D + H * D + h * D + c];
                    uint64_t row = ((uint64_t)bb * H + h) * T + i;
                    double err = fabs(exp(s / sqrt((double)D) - lse[row]) - probs[row * T + j]);
                    worst = err > worst ? err : worst;
                }
    TH_CHECK(worst < 1e-12, "reference: exp(s - lse) is the softmax (worst %.2e)", worst);
    free(x);
    free(probs);
    free(lse);
}

/* ---- (2) device vs reference ------------------------------------------------------ */

typedef struct shape {
    uint32_t b, t, heads, d;
} shape;

static const char *g_variant; /* the attention row forced in g_ctx */

/* What the variant saves, against the reference (probs, or the row logsumexps). */
static void expect_saved(tb *saved, const double *xq, shape sh, const char *what)
{
    uint64_t n = ka_attention_saved_elems(g_ctx, sh.b, sh.t, sh.heads, sh.d);
    double *r = malloc(n * sizeof *r);
    char w[200];
    if (ka_attention_plan_for(g_ctx, sh.b, sh.t, sh.heads, sh.d).saved == KA_SAVED_LSE) {
        TH_CHECK(n == (uint64_t)sh.b * sh.heads * sh.t, "lse: b heads t elements");
        ka_ref_attention_lse(xq, r, sh.b, sh.t, sh.heads, sh.d);
        snprintf(w, sizeof w, "attention lse %s", what);
        expect(saved, r, w, 1e-5f, 1e-5f);
    } else {
        TH_CHECK(n == (uint64_t)sh.b * sh.heads * sh.t * sh.t, "probs: b heads t t elements");
        ka_ref_attention_probs(xq, r, sh.b, sh.t, sh.heads, sh.d);
        snprintf(w, sizeof w, "attention probs %s", what);
        expect(saved, r, w, 1e-4f, 1e-6f);
    }
    free(r);
}

/* Forward, then backward with beta 0 (dqkv full of NaN) and beta 1 (random dqkv); the
 * sequences are keyed for dropout as the global ones from b0 on. row0 > 0: b0 reaches the
 * device as the control block's row base row0 (read at run time, as a pipeline stage's
 * micro-batch) times b_row 2, plus the rest as the call's b0. */
static void check_case_rows(vkt_stream *s, shape sh, float pd, uint64_t step, uint64_t b0,
                            uint32_t row0)
{
    uint32_t b = sh.b, t = sh.t, H = sh.heads, d = sh.d;
    uint64_t nq = (uint64_t)b * t * 3 * H * d, ny = (uint64_t)b * t * H * d;
    uint64_t np = ka_attention_saved_elems(g_ctx, b, t, H, d);
    uint64_t nw = ka_attention_workspace_elems(g_ctx, b, t, H, d);
    uint64_t seed = 0xA77E000000ull + t;
    tb qkv = tb_new(nq, -2, 2), y = tb_new(ny, -1, 1), saved = tb_new(np, -1, 1);
    tb ctrl = tb_new(CTRL_KEY_WORDS, 0, 0), dy = tb_new(ny, -1, 1), dqkv = tb_new(nq, -1, 1);
    tb ws = tb_new(nw, -1, 1);
    set_step(&ctrl, step);
    TH_OK(g_ctx, vkt_buffer_write(ctrl.b.buffer, (ctrl.b.offset + CTRL_ROW0 - CTRL_STEP) * 4,
                                  &row0, 4));
    uint64_t b_row = row0 ? 2 : 0, b_fix = b0 - b_row * row0; /* b0 = b_fix + row0 b_row */
    char what[160];
    snprintf(what, sizeof what, "b=%u t=%u heads=%u d=%u p_drop=%.2f b0=%llu (row base %u) "
             "aligned=%d %s", b, t, H, d, (double)pd, (unsigned long long)b0, row0, g_aligned,
             g_variant);
    TH_OK(g_ctx, ka_attention(s, th_view(&qkv.b), th_view(&y.b), th_view(&saved.b),
                              th_view(&ctrl.b), b, t, H, d, pd, seed, b_fix, b_row));
    run(s);
    double *xq = to_double(qkv.h, nq), *xdy = to_double(dy.h, ny);
    double *ry = malloc(ny * sizeof *ry), *rg = calloc(nq, sizeof *rg);
    ka_ref_attention(xq, ry, b, t, H, d, pd, seed, b0, step);
    char w2[200];
    snprintf(w2, sizeof w2, "attention y %s", what);
    /* a long row sums t terms of size ~1 */
    expect(&y, ry, w2, 1e-4f, 1e-5f * (1.0f + (float)t / 256.0f));
    expect_saved(&saved, xq, sh, what);

    /* beta 0: old contents are NaN and must not leak into the result */
    for (uint64_t i = 0; i < nq; i++)
        dqkv.h[i] = NAN;
    th_buf_write(&dqkv.b, dqkv.h);
    TH_OK(g_ctx, ka_attention_backward(s, th_view(&qkv.b), th_view(&y.b), th_view(&saved.b),
                                       th_view(&ctrl.b), th_view(&dy.b), th_view(&dqkv.b), 0.0f,
                                       th_view(&ws.b), b, t, H, d, pd, seed, b_fix, b_row));
    run(s);
    ka_ref_attention_backward(xq, xdy, rg, b, t, H, d, pd, seed, b0, step);
    /* a gradient element sums up to 2 t products of size ~1 */
    float atol = 2e-6f * (float)(t + 4);
    snprintf(w2, sizeof w2, "attention backward beta 0 %s", what);
    expect(&dqkv, rg, w2, 1e-4f, atol);
    th_buf_guards_ok(&ws.b, "attention workspace");
    /* beta 1 adds to what is there */
    th_fill_uniform(dqkv.h, nq, -1, 1);
    th_buf_write(&dqkv.b, dqkv.h);
    for (uint64_t i = 0; i < nq; i++)
        rg[i] += dqkv.h[i];
    TH_OK(g_ctx, ka_attention_backward(s, th_view(&qkv.b), th_view(&y.b), th_view(&saved.b),
                                       th_view(&ctrl.b), th_view(&dy.b), th_view(&dqkv.b), 1.0f,
                                       th_view(&ws.b), b, t, H, d, pd, seed, b_fix, b_row));
    run(s);
    snprintf(w2, sizeof w2, "attention backward beta 1 %s", what);
    expect(&dqkv, rg, w2, 1e-4f, atol);
    free(xq);
    free(xdy);
    free(ry);
    free(rg);
    tb_free(&qkv);
    tb_free(&y);
    tb_free(&saved);
    tb_free(&ctrl);
    tb_free(&dy);
    tb_free(&dqkv);
    tb_free(&ws);
}

static void check_case(vkt_stream *s, shape sh, float pd, uint64_t step, uint64_t b0)
{
    check_case_rows(s, sh, pd, step, b0, 0);
}

/* Each head width compiles its own pipelines, slowly on lavapipe: the odd-offset (scalar
 * read) views run the small widths only, and not for the GPU-planned flash run (how rows
 * are read does not depend on the lanes). */
static int g_gpu_flash;

static void test_device(vkt_stream *s)
{
    if (g_gpu_flash && !g_aligned)
        return;
    /* t 1 and 7 (one partial block), 12 (t % 4 == 0), 13, 67 and 100 (off the 8-row
     * blocks, the flash blocks and tiles); d 3 and 5 (no vec4 rows), 4, 8, 16, and the
     * head sizes of real models 32, 48, 64, 96, 128 (t off every tile); heads 1 to 3, b 1
     * and 2 */
    const shape shapes[] = {{2, 7, 3, 3}, {2, 12, 3, 4}, {2, 67, 1, 8}, {1, 1, 1, 3},
                            {1, 7, 1, 16}, {1, 13, 2, 5}, {1, 100, 2, 32}, {2, 9, 1, 48},
                            {1, 70, 3, 64}, {1, 37, 2, 96}, {1, 67, 2, 128}};
    for (unsigned i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        if (shapes[i].d > 16 && !g_aligned)
            continue; /* their scalar-read pipelines alone take seconds to compile */
        check_case(s, shapes[i], 0.0f, 0, 0);
        check_case(s, shapes[i], 0.25f, 3 + i, 0);
        /* part of a split batch: from sequence 5 on, and where b0 heads t t wraps 2^32 */
        if (shapes[i].d <= 16 || i % 2)
            check_case(s, shapes[i], 0.25f, 3 + i, i % 2 ? 5 : 3000000000ull);
        /* the same offsets through the control block's row base (read at run time) */
        if (i < 3)
            check_case_rows(s, shapes[i], 0.25f, 3 + i, i % 2 ? 5 : 3000000001ull,
                            i % 2 ? 2 : 1500000000u);
    }
    /* the typical size of a small character-level transformer */
    if (g_aligned)
        check_case(s, (shape){32, 64, 4, 16}, 0.1f, 0x100000005ull, 0);
}

/* ---- (3) dropout -------------------------------------------------------------------- */

/* q = k = 0 makes p_ij = 1 / (i + 1); v_j = e_j (d = t) makes y_i[c] = mask_ic / (1 - p)
 * / (i + 1) for c <= i: the device's mask can be read off y. */
static void test_dropout_mask(vkt_stream *s)
{
    enum { B = 4, T = 32, H = 4 };
    const float pd = 0.3f;
    const uint64_t seed = 99;
    uint64_t nq = (uint64_t)B * T * 3 * H * T, ny = (uint64_t)B * T * H * T;
    tb qkv = tb_new(nq, 0, 0), y = tb_new(ny, 0, 0);
    tb saved = tb_new(ka_attention_saved_elems(g_ctx, B, T, H, T), 0, 0), ctrl = tb_new(2, 0, 0);
    for (uint64_t r = 0; r < (uint64_t)B * T; r++)
        for (uint32_t h = 0; h < H; h++)
            for (uint32_t c = 0; c < T; c++)
                qkv.h[r * 3 * H * T + 2 * H * T + h * T + c] = c == r % T ? 1.0f : 0.0f;
    th_buf_write(&qkv.b, qkv.h);
    /* One recorded stream, replayed with a new step in ctrl each time. */
    TH_OK(g_ctx, ka_attention(s, th_view(&qkv.b), th_view(&y.b), th_view(&saved.b),
                              th_view(&ctrl.b), B, T, H, T, pd, seed, 0, 0));
    const uint64_t steps[3] = {7, 8, 7};
    float *got[3];
    for (int k = 0; k < 3; k++) {
        set_step(&ctrl, steps[k]);
        TH_OK(g_ctx, vkt_stream_run(s));
        got[k] = th_alloc_floats(ny);
        th_buf_read(&y.b, got[k]);
        uint32_t key = dropout_key64(seed, steps[k]), thr = dropout_threshold(pd);
        uint64_t kept = 0, total = 0, wrong = 0;
        for (uint32_t bb = 0; bb < B; bb++)
            for (uint32_t h = 0; h < H; h++)
                for (uint32_t i = 0; i < T; i++)
                    for (uint32_t j = 0; j < T; j++) {
                        float v = got[k][((uint64_t)bb * T + i) * H * T + h * T + j];
                        float full = (float)(1.0 / (1.0 - pd) / (i + 1));
                        int on = j <= i && fabsf(v - full) < 1e-5f * full;
                        if (!on && v != 0.0f && !(j <= i && fabsf(v) < 1e-7f))
                            wrong++; /* neither kept nor dropped */
                        if (j > i)
                            continue;
                        uint32_t idx = (uint32_t)((((uint64_t)bb * H + h) * T + i) * T + j);
                        wrong += on != dropout_kept(key, idx, thr);
                        kept += on;
                        total++;
                    }
        double frac = (double)kept / (double)total;
        TH_CHECK(wrong == 0, "%s dropout step %llu: %llu attention weights differ from the mask",
                 g_variant, (unsigned long long)steps[k], (unsigned long long)wrong);
        TH_CHECK(fabs(frac - (1.0 - pd)) < 0.025, "dropout keeps %.4f of %llu weights, p = %.2f",
                 frac, (unsigned long long)total, (double)pd);
    }
    uint64_t differ = 0;
    for (uint64_t i = 0; i < ny; i++)
        differ += got[0][i] != got[1][i];
    TH_CHECK(differ > ny / 10, "steps 7 and 8 give different masks (%llu of %llu outputs differ)",
             (unsigned long long)differ, (unsigned long long)ny);
    TH_CHECK(memcmp(got[0], got[2], ny * 4) == 0, "step 7 again gives bitwise the same output");
    TH_OK(g_ctx, vkt_stream_reset(s));
    for (int k = 0; k < 3; k++)
        free(got[k]);
    tb_free(&qkv);
    tb_free(&y);
    tb_free(&saved);
    tb_free(&ctrl);
}

/* Same inputs, same step: bitwise the same y, saved array and dqkv on every run. */
static void test_repeatable(vkt_stream *s)
{
    const uint32_t b = 3, t = 21, H = 2, d = 8;
    uint64_t nq = (uint64_t)b * t * 3 * H * d, ny = (uint64_t)b * t * H * d;
    tb qkv = tb_new(nq, -2, 2), y = tb_new(ny, 0, 0);
    tb saved = tb_new(ka_attention_saved_elems(g_ctx, b, t, H, d), 0, 0);
    tb ctrl = tb_new(2, 0, 0), dy = tb_new(ny, -1, 1), dqkv = tb_new(nq, 0, 0);
    tb ws = tb_new(ka_attention_workspace_elems(g_ctx, b, t, H, d), 0, 0);
    set_step(&ctrl, 41);
    float *first = NULL;
    uint64_t n_out = ny + nq + saved.b.n;
    for (int k = 0; k < 3; k++) {
        TH_OK(g_ctx, ka_attention(s, th_view(&qkv.b), th_view(&y.b), th_view(&saved.b),
                                  th_view(&ctrl.b), b, t, H, d, 0.2f, 5, 0, 0));
        TH_OK(g_ctx, ka_attention_backward(s, th_view(&qkv.b), th_view(&y.b), th_view(&saved.b),
                                           th_view(&ctrl.b), th_view(&dy.b), th_view(&dqkv.b),
                                           0.0f, th_view(&ws.b), b, t, H, d, 0.2f, 5, 0, 0));
        run(s);
        float *out = th_alloc_floats(n_out);
        th_buf_read(&y.b, out);
        th_buf_read(&dqkv.b, out + ny);
        th_buf_read(&saved.b, out + ny + nq);
        if (!first)
            first = out;
        else {
            TH_CHECK(memcmp(first, out, n_out * 4) == 0, "%s: run %d is bitwise the same as "
                     "run 0", g_variant, k);
            free(out);
        }
    }
    free(first);
    tb_free(&qkv);
    tb_free(&y);
    tb_free(&saved);
    tb_free(&ctrl);
    tb_free(&dy);
    tb_free(&dqkv);
    tb_free(&ws);
}

/* ---- (4) errors, limits and memory ------------------------------------------------- */

/* The longest sequence the variant's own kernel takes (lavapipe's loop budget bounds the
 * probs variants), and context 2048: where the variant cannot take it, the calls run
 * attention_flash (ka_attention_plan_for), and compute the right thing either way. */
static void test_max_t(vkt_stream *s, gpu_variant v)
{
    uint32_t own = ka_attention_plan(&g_ctx->profile, v, 1, 1u << 20, 1, 32).max_t;
    TH_CHECK(own >= 256, "%s: at least 256 positions with d = 32 (max %u)", g_variant, own);
    if (own < 2048) {
        ka_plan pl = ka_attention_plan_for(g_ctx, 1, own, 1, 32);
        TH_CHECK(pl.variant == v, "%s runs t = %u itself", g_variant, own);
        check_case(s, (shape){1, own, 1, 32}, 0.1f, 77, 0);
    }
    ka_plan pl = ka_attention_plan_for(g_ctx, 1, 2048, 1, 32);
    TH_CHECK(pl.variant == (own >= 2048 ? v : GPU_V_ATTENTION_FLASH) && pl.max_t >= 2048 &&
                 ka_attention_max_t(g_ctx, 32) >= 2048,
             "%s, t = 2048 (its own kernel takes %u): runs %s", g_variant, own,
             gpu_variant_row_of(pl.variant)->name);
    if (pl.variant == v) /* else the same kernel and plan as attention_flash's own run */
        check_case(s, (shape){1, 2048, 1, 32}, 0.1f, 78, 0);
}

/* What the calls ask of device memory: attention_flash saves and works in O(b heads t)
 * (no t x t array, whatever t), the probs variants in O(b heads t t). */
static void test_memory(gpu_variant v)
{
    const uint32_t b = 64, H = 6, d = 64;
    for (uint32_t t = 64; t <= 2048; t *= 32) {
        uint64_t saved = ka_attention_saved_elems(g_ctx, b, t, H, d);
        uint64_t ws = ka_attention_workspace_elems(g_ctx, b, t, H, d);
        uint64_t bht = (uint64_t)b * H * t;
        ka_plan pl = ka_attention_plan_for(g_ctx, b, t, H, d);
        if (v == GPU_V_ATTENTION_FLASH || t == 64)
            TH_CHECK(pl.variant == v, "%s at t %u: its own kernel", g_variant, t);
        if (pl.saved == KA_SAVED_LSE)
            TH_CHECK(saved == bht && ws == bht,
                     "%s at b %u t %u heads %u d %u: saves %llu and works in %llu elements, "
                     "b heads t = %llu each (qkv alone is %llu)", g_variant, b, t, H, d,
                     (unsigned long long)saved, (unsigned long long)ws, (unsigned long long)bht,
                     (unsigned long long)(bht * 3 * d));
        else
            TH_CHECK(saved == bht * t && ws == bht * t + bht,
                     "%s at t %u: saves the probabilities (%llu) and works in dP and D (%llu)",
                     g_variant, t, (unsigned long long)saved, (unsigned long long)ws);
    }
}

static void test_errors(vkt_stream *s)
{
    const uint32_t b = 2, t = 5, H = 2, d = 4;
    uint64_t nq = (uint64_t)b * t * 3 * H * d, ny = (uint64_t)b * t * H * d;
    tb qkv = tb_new(nq, -1, 1), y = tb_new(ny, 0, 0);
    tb saved = tb_new(ka_attention_saved_elems(g_ctx, b, t, H, d), 0, 0);
    tb ctrl = tb_new(2, 0, 0), dqkv = tb_new(nq, 0, 0), dy = tb_new(ny, 0, 0);
    tb ws = tb_new(ka_attention_workspace_elems(g_ctx, b, t, H, d), 0, 0);
    vkt_view q = th_view(&qkv.b), yv = th_view(&y.b), pv = th_view(&saved.b);
    vkt_view cv = th_view(&ctrl.b), gv = th_view(&dqkv.b), wv = th_view(&ws.b);
    vkt_view dv = th_view(&dy.b);
    vkt_view none = {NULL, 0};
#define FWD_FAILS(want, ...)                                                                \
    do {                                                                                    \
        TH_STATUS(g_ctx, ka_attention(__VA_ARGS__, 0), want);                                  \
        TH_CHECK(strstr(vkt_context_errmsg(g_ctx), "ka_attention"), "message: %s",          \
                 vkt_context_errmsg(g_ctx));                                                \
    } while (0)
#define BWD_FAILS(want, ...)                                                                \
    do {                                                                                    \
        TH_STATUS(g_ctx, ka_attention_backward(__VA_ARGS__, 0), want);                         \
        TH_CHECK(strstr(vkt_context_errmsg(g_ctx), "ka_attention_backward"), "message: %s", \
                 vkt_context_errmsg(g_ctx));                                                \
    } while (0)
    TH_STATUS(NULL, ka_attention(NULL, q, yv, pv, cv, b, t, H, d, 0, 1, 0, 0),
              VKT_ERROR_INVALID_ARGUMENT);
    FWD_FAILS(VKT_ERROR_INVALID_ARGUMENT, s, q, yv, pv, cv, 0, t, H, d, 0, 1, 0);
    FWD_FAILS(VKT_ERROR_INVALID_ARGUMENT, s, q, yv, pv, cv, b, 0, H, d, 0, 1, 0);
    FWD_FAILS(VKT_ERROR_INVALID_ARGUMENT, s, q, yv, pv, cv, b, t, 0, d, 0, 1, 0);
    FWD_FAILS(VKT_ERROR_INVALID_ARGUMENT, s, q, yv, pv, cv, b, t, H, 0, 0, 1, 0);
    FWD_FAILS(VKT_ERROR_INVALID_ARGUMENT, s, q, yv, pv, cv, b, t, H, d, 1.0f, 1, 0);
    FWD_FAILS(VKT_ERROR_INVALID_ARGUMENT, s, q, yv, pv, cv, b, t, H, d, -0.1f, 1, 0);
    FWD_FAILS(VKT_ERROR_INVALID_ARGUMENT, s, q, yv, pv, cv, b, t, H, d, NAN, 1, 0);
    FWD_FAILS(VKT_ERROR_LIMIT, s, q, yv, pv, cv, b, t, H, KA_MAX_D + 1, 0, 1, 0);
    uint32_t mt = ka_attention_max_t(g_ctx, d);
    if (mt < UINT32_MAX) {
        FWD_FAILS(VKT_ERROR_LIMIT, s, q, yv, pv, cv, 1, mt + 1, 1, d, 0, 1, 0);
        TH_CHECK(strstr(vkt_context_errmsg(g_ctx), "at most t ="), "message: %s",
                 vkt_context_errmsg(g_ctx));
    }
    /* views too small for the sizes (past the guard elements too) */
    FWD_FAILS(VKT_ERROR_INVALID_ARGUMENT, s, q, yv, pv, cv, b, 4 * t, H, d, 0, 1, 0);
    FWD_FAILS(VKT_ERROR_INVALID_ARGUMENT, s, q, yv, pv, cv, b, t, H, d + 8, 0, 1, 0);
    /* dropout needs ctrl; without dropout it may be absent */
    FWD_FAILS(VKT_ERROR_INVALID_ARGUMENT, s, q, yv, pv, none, b, t, H, d, 0.5f, 1, 0);
    TH_OK(g_ctx, ka_attention(s, q, yv, pv, none, b, t, H, d, 0, 1, 0, 0));
    /* an output over an input */
    vkt_view over = {qkv.b.buffer, qkv.b.offset + 3};
    FWD_FAILS(VKT_ERROR_INVALID_ARGUMENT, s, q, over, pv, cv, b, t, H, d, 0, 1, 0);
    TH_CHECK(strstr(vkt_context_errmsg(g_ctx), "overlaps"), "message: %s",
             vkt_context_errmsg(g_ctx));
    /* the workspace over saved, dqkv over qkv, dqkv over y */
    BWD_FAILS(VKT_ERROR_INVALID_ARGUMENT, s, q, yv, pv, cv, dv, gv, 0, pv, b, t, H, d, 0, 1, 0);
    BWD_FAILS(VKT_ERROR_INVALID_ARGUMENT, s, q, yv, pv, cv, dv, q, 0, wv, b, t, H, d, 0, 1, 0);
    /* y under dqkv: flash reads y (an error), the probs variants neither read nor check it */
    vkt_view y_in_dqkv = {dqkv.b.buffer, dqkv.b.offset};
    if (ka_attention_plan_for(g_ctx, b, t, H, d).saved == KA_SAVED_LSE) {
        BWD_FAILS(VKT_ERROR_INVALID_ARGUMENT, s, q, y_in_dqkv, pv, cv, dv, gv, 0, wv, b, t, H, d,
                  0, 1, 0);
        TH_CHECK(strstr(vkt_context_errmsg(g_ctx), "overlaps y"), "message: %s",
                 vkt_context_errmsg(g_ctx));
    } else {
        TH_OK(g_ctx, ka_attention_backward(s, q, y_in_dqkv, pv, cv, dv, gv, 0, wv, b, t, H, d, 0,
                                           1, 0, 0));
        TH_OK(g_ctx, vkt_stream_reset(s));
    }
    BWD_FAILS(VKT_ERROR_INVALID_ARGUMENT, s, q, yv, pv, cv, dv, gv, NAN, wv, b, t, H, d, 0, 1, 0);
    BWD_FAILS(VKT_ERROR_INVALID_ARGUMENT, s, q, yv, pv, cv, dv, gv, 0, wv, b, t, H, d, 2.0f, 1,
              0);
    BWD_FAILS(VKT_ERROR_LIMIT, s, q, yv, pv, cv, dv, gv, 0, wv, b, t, H, KA_MAX_D + 1, 0, 1, 0);
    vkt_view short_ws = {ws.b.buffer, ws.b.offset + ws.b.guard + 2}; /* past the buffer */
    BWD_FAILS(VKT_ERROR_INVALID_ARGUMENT, s, q, yv, pv, cv, dv, gv, 0, short_ws, b, t, H, d, 0,
              1, 0);
    TH_OK(g_ctx, ka_attention_backward(s, q, yv, pv, cv, dv, gv, 0, wv, b, t, H, d, 0.5f, 1, 0, 0));
    TH_OK(g_ctx, vkt_stream_reset(s));
    TH_CHECK(ka_attention_max_t(g_ctx, 0) == 0 && ka_attention_max_t(g_ctx, KA_MAX_D + 1) == 0,
             "no t for unsupported widths");
#undef FWD_FAILS
#undef BWD_FAILS
    tb_free(&qkv);
    tb_free(&y);
    tb_free(&saved);
    tb_free(&ctrl);
    tb_free(&dqkv);
    tb_free(&dy);
    tb_free(&ws);
}

/* Parts (`--part NAME`, harness.h): "reference" (the double references), and one per
 * variant and style, named by its kernel filter ("attention_shuffle", "attention_flash",
 * "gpu,attention_flash", "attention_rows"). Each variant compiles its own pipelines (about
 * 50 to 90 each, counted below), slow on lavapipe when no cache has them: ctest runs the
 * parts as separate entries (tests/CMakeLists.txt). */
int main(int argc, char **argv)
{
    th_init("test_attention");
    th_parts(argc, argv);
    if (th_part("reference")) {
        test_ref_gradients();
        test_ref_split();
        test_ref_lse();
    }
    vkt_context *probe = th_context(VKT_KERNELS_AUTO);
    uint32_t offered = 0; /* variants and styles the device runs, whichever part runs */
    for (int v = 0; v < GPU_VARIANT_COUNT; v++) {
        const gpu_variant_row *row = gpu_variant_row_of((gpu_variant)v);
        if (row->family != GPU_FAMILY_ATTENTION)
            continue;
        char why[256];
        if (!TH_CHECK(gpu_variant_runs(row, &probe->profile, why, sizeof why),
                      "the device runs %s (it lacks %s)", row->name, why))
            continue;
        /* attention_flash plans by style: on lavapipe's own (cpu) one lane a row; under
         * the gpu style lane groups of 2 to 8 with their shuffles, as on a GPU */
        for (int gpu = 0; gpu < 1 + (v == GPU_V_ATTENTION_FLASH); gpu++) {
            char filter[64];
            snprintf(filter, sizeof filter, "%s%s", gpu ? "gpu," : "", row->name);
            offered++;
            if (!th_part(filter))
                continue;
            g_variant = row->name;
            g_ctx = th_context_filter(filter);
            TH_CHECK(g_ctx->kv[GPU_FAMILY_ATTENTION] == (gpu_variant)v, "%s forced", filter);
            if (gpu)
                TH_CHECK(ka_attention_plan_for(g_ctx, 1, 70, 3, 64).pass[0].lanes == 4 &&
                             ka_attention_plan_for(g_ctx, 1, 67, 2, 128).pass[2].lanes == 8,
                         "%s: head size 64 over 4 lanes, 128 over 8", filter);
            vkt_stream *s = th_stream(g_ctx, 0);
            g_gpu_flash = gpu;
            for (g_aligned = 1; g_aligned >= 0; g_aligned--)
                test_device(s);
            test_dropout_mask(s);
            test_repeatable(s);
            g_aligned = 0; /* the scalar reads: the most loop iterations */
            test_max_t(s, (gpu_variant)v);
            test_memory((gpu_variant)v);
            test_errors(s);
            vkt_stream_destroy(s);
            printf("  %s: checked, %u pipelines\n", filter, g_ctx->pipeline_count);
            th_context_release(g_ctx); /* saves its pipeline cache now, not at the end */
        }
    }
    TH_CHECK(offered == 4, "%u attention variants and styles run here", offered);
    return th_finish();
}
