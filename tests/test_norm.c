/* Layer, RMS and batch normalization and embedding kernels (engine/kernels/norm.h):
 * (1) the double references' backward against central differences of their forward;
 * (2) the device forward and backward against the references on awkward shapes (1s,
 *     primes, rows past llvmpipe's loop budget for one thread), with guard elements
 *     around every output, tensors at odd offsets and again 16-byte aligned (the vec4
 *     paths), beta 0 over NaN-filled outputs and beta 1 accumulation, every subset of the
 *     optional outputs, running averages after two training steps, inference mode;
 * (3) the embedding backward with heavily repeated ids: bitwise the same on two runs;
 * (4) the error paths; (5) a shorter pass with the other kernel variant (the GPU
 *     variant's grids: several threads per row, trees in shared memory). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "kernels/norm.h"

static vkt_context *g_ctx;
static vkt_stream *g_s;
static int g_aligned; /* 1: tensors start 16-byte aligned; 0: at odd offsets */
static int g_quick;   /* 1: the shorter pass of the other kernel variant */
static float g_offset; /* added to the random x: a mean far from 0 tests the statistics'
                        * resistance to cancellation */

/* ---- device tensors with host copies ----------------------------------------------- */

typedef struct tb {
    th_buf b;
    float *h;
} tb;

/* Like th_buf_create, but element 0 at a 64-element boundary when g_aligned. */
static th_buf make_buf(uint64_t n)
{
    return g_aligned ? th_buf_create_at(g_ctx, n, 64) : th_buf_create(g_ctx, n);
}

static tb tb_new(uint64_t n, float lo, float hi)
{
    tb t = {make_buf(n), th_alloc_floats(n)};
    th_fill_uniform(t.h, n, lo, hi);
    th_buf_write(&t.b, t.h);
    return t;
}

/* A tensor filled with one value (NaN for outputs that beta 0 must not read). */
static tb tb_const(uint64_t n, float value)
{
    tb t = {make_buf(n), th_alloc_floats(n)};
    for (uint64_t i = 0; i < n; i++)
        t.h[i] = value;
    th_buf_write(&t.b, t.h);
    return t;
}

static void tb_free(tb *t)
{
    th_buf_destroy(&t->b);
    free(t->h);
}

static vkt_view tv(const tb *t) { return th_view(&t->b); }

static double *to_d(const float *f, uint64_t n)
{
    double *d = malloc((n ? n : 1) * sizeof *d);
    for (uint64_t i = 0; d && i < n; i++)
        d[i] = f[i];
    return d;
}

static double *zeros(uint64_t n) { return calloc(n ? n : 1, sizeof(double)); }

/* Reads t from the device into t->h, compares with `want`, checks the guards. */
static void expect(tb *t, const double *want, const char *what, float rtol, float atol)
{
    float *w = th_alloc_floats(t->b.n);
    for (uint64_t i = 0; i < t->b.n; i++)
        w[i] = (float)want[i];
    th_buf_read(&t->b, t->h);
    th_compare(what, t->h, w, t->b.n, rtol, atol);
    th_buf_guards_ok(&t->b, what);
    free(w);
}

/* Like expect, with a tolerance per element: |got - want| <= tol[i] + 1e-5 |want|. */
static void expect_tol(tb *t, const double *want, const double *tol, const char *what)
{
    th_buf_read(&t->b, t->h);
    uint64_t bad = 0, first = 0;
    for (uint64_t i = 0; i < t->b.n; i++) {
        double err = fabs(t->h[i] - want[i]);
        int ok = isnan(want[i]) ? isnan(t->h[i]) : err <= tol[i] + 1e-5 * fabs(want[i]);
        if (!ok && bad++ == 0)
            first = i;
    }
    if (bad)
        TH_CHECK(0, "%s: %llu of %llu elements differ; first at %llu: got %.9g want %.9g "
                 "(tolerance %.3g)", what, (unsigned long long)bad, (unsigned long long)t->b.n,
                 (unsigned long long)first, t->h[first], want[first], tol[first]);
    else
        TH_CHECK(1, "%s", what);
    th_buf_guards_ok(&t->b, what);
}

/* Tolerances of the backward outputs, from double statistics st (mean, rstd per row or
 * channel) of `sets` sets; element i of x belongs to set (i / inner) % sets.
 * dx: fp32 statistics perturb xhat by about 1e-7 |x| rstd and dx by rstd times that, so
 * a set with a tiny variance (large rstd, as happens among thousands of random 3-element
 * rows) is ill-conditioned: 5e-5 + 1e-6 rstd^2.
 * dgamma, dbeta: fp32 sums of many terms of both signs: 1e-6 + 1e-4 times the sum of the
 * terms' magnitudes (|dy xhat| and |dy|), per parameter p = param_of(i). */
typedef struct tols {
    double *dx, *dg, *db;
} tols;

static tols backward_tols(const float *x, const float *dy, const double *st, uint64_t n,
                          uint32_t sets, uint64_t inner, int per_column, uint32_t params)
{
    tols t = {zeros(n), zeros(params), zeros(params)};
    for (uint32_t k = 0; k < params; k++)
        t.dg[k] = t.db[k] = 1e-6;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t set = (i / inner) % sets;
        uint32_t k = per_column ? (uint32_t)(i % inner) : (uint32_t)set;
        double r = st[2 * set + 1], xhat = (x[i] - st[2 * set]) * r;
        t.dx[i] = 5e-5 + 1e-6 * r * r;
        t.dg[k] += 1e-4 * fabs(dy[i] * xhat);
        t.db[k] += 1e-4 * fabs((double)dy[i]);
    }
    return t;
}

static void tols_free(tols *t)
{
    free(t->dx);
    free(t->dg);
    free(t->db);
}

static void run(void)
{
    TH_OK(g_ctx, vkt_stream_run(g_s));
    TH_OK(g_ctx, vkt_stream_reset(g_s));
}

/* ---- (1) references against central differences ------------------------------------ */

/* L = sum w * y of a layernorm (kind 0), a training-mode batchnorm (kind 1) or an
 * rmsnorm (kind 2; bt unused). */
typedef struct fd_case {
    int kind;
    uint32_t a, b, c; /* rows, cols, - (kinds 0, 2) or n, c, hw (kind 1) */
    double eps;
    double *x, *g, *bt, *w;
} fd_case;

static uint64_t fd_elems(const fd_case *f)
{
    return (uint64_t)f->a * f->b * (f->kind == 1 ? f->c : 1);
}
static uint32_t fd_params(const fd_case *f) { return f->b; }

static double fd_loss(const fd_case *f)
{
    uint64_t n = fd_elems(f);
    double *y = zeros(n), *rm = zeros(f->b), *rv = zeros(f->b), l = 0;
    if (f->kind == 0)
        kn_ref_layernorm(f->x, f->g, f->bt, y, f->a, f->b, f->eps);
    else if (f->kind == 2)
        kn_ref_rmsnorm(f->x, f->g, y, NULL, f->a, f->b, f->eps);
    else
        kn_ref_batchnorm(f->x, f->g, f->bt, y, rm, rv, f->a, f->b, f->c, f->eps, 0.1, 1);
    for (uint64_t i = 0; i < n; i++)
        l += f->w[i] * y[i];
    free(y);
    free(rm);
    free(rv);
    return l;
}

/* Central differences of the loss in every element of p against the analytic gradient. */
static void fd_compare(fd_case *f, double *p, uint64_t n, const double *grad, const char *what)
{
    const double h = 1e-5;
    double worst = 0;
    uint64_t worst_at = 0;
    for (uint64_t i = 0; i < n; i++) {
        double keep = p[i];
        p[i] = keep + h;
        double lp = fd_loss(f);
        p[i] = keep - h;
        double lm = fd_loss(f);
        p[i] = keep;
        double num = (lp - lm) / (2 * h);
        double err = fabs(num - grad[i]) / (1.0 + fabs(grad[i]));
        if (err > worst || isnan(err)) {
            worst = isnan(err) ? INFINITY : err;
            worst_at = i;
        }
    }
    TH_CHECK(worst < 1e-6, "%s: analytic vs central differences differ by %.3g (relative) at %llu",
             what, worst, (unsigned long long)worst_at);
}

static void test_fd(void)
{
    /* layernorm [rows, cols], then batchnorm [n, c, hw], then rmsnorm [rows, cols] (one
     * column too: y = x / sqrt(x^2 + eps) * gamma) */
    const uint32_t cases[][4] = {{0, 3, 5, 1}, {0, 2, 8, 1}, {0, 1, 2, 1}, {0, 4, 3, 1},
                                 {1, 3, 2, 5}, {1, 2, 3, 1}, {1, 1, 2, 3}, {1, 4, 1, 2},
                                 {2, 3, 5, 1}, {2, 2, 8, 1}, {2, 1, 1, 1}, {2, 4, 3, 1},
                                 {2, 1, 7, 1}};
    for (unsigned k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        fd_case f = {(int)cases[k][0], cases[k][1], cases[k][2], cases[k][3], 1e-5, 0, 0, 0, 0};
        uint64_t n = fd_elems(&f);
        uint32_t np = fd_params(&f);
        f.x = zeros(n);
        f.w = zeros(n);
        f.g = zeros(np);
        f.bt = zeros(np);
        for (uint64_t i = 0; i < n; i++) {
            f.x[i] = th_rand_uniform(-2, 3);
            f.w[i] = th_rand_uniform(-1, 1);
        }
        for (uint32_t i = 0; i < np; i++) {
            f.g[i] = th_rand_uniform(0.5f, 1.5f);
            f.bt[i] = th_rand_uniform(-1, 1);
        }
        double *dx = zeros(n), *dg = zeros(np), *db = zeros(np);
        if (f.kind == 0)
            kn_ref_layernorm_backward(f.x, f.g, f.w, dx, dg, db, f.a, f.b, f.eps);
        else if (f.kind == 2)
            kn_ref_rmsnorm_backward(f.x, f.g, f.w, dx, dg, f.a, f.b, f.eps);
        else
            kn_ref_batchnorm_backward(f.x, f.g, f.w, dx, dg, db, f.a, f.b, f.c, f.eps);
        char what[96];
        const char *name = f.kind == 2 ? "rmsnorm" : f.kind ? "batchnorm" : "layernorm";
        snprintf(what, sizeof what, "%s ref %ux%ux%u dx", name, f.a, f.b, f.c);
        fd_compare(&f, f.x, n, dx, what);
        snprintf(what, sizeof what, "%s ref %ux%ux%u dgamma", name, f.a, f.b, f.c);
        fd_compare(&f, f.g, np, dg, what);
        if (f.kind != 2) { /* rmsnorm has no beta */
            snprintf(what, sizeof what, "%s ref %ux%ux%u dbeta", name, f.a, f.b, f.c);
            fd_compare(&f, f.bt, np, db, what);
        }
        /* accumulation: a second call adds the same again */
        double *dx2 = zeros(n);
        for (uint64_t i = 0; i < n; i++)
            dx2[i] = 1.0;
        if (f.kind == 0)
            kn_ref_layernorm_backward(f.x, f.g, f.w, dx2, NULL, NULL, f.a, f.b, f.eps);
        else if (f.kind == 2)
            kn_ref_rmsnorm_backward(f.x, f.g, f.w, dx2, NULL, f.a, f.b, f.eps);
        else
            kn_ref_batchnorm_backward(f.x, f.g, f.w, dx2, NULL, NULL, f.a, f.b, f.c, f.eps);
        int acc_ok = 1;
        for (uint64_t i = 0; i < n; i++)
            acc_ok &= fabs(dx2[i] - (1.0 + dx[i])) < 1e-12;
        TH_CHECK(acc_ok, "%s ref backward accumulates (+=) into dx", name);
        free(dx2);
        free(dx);
        free(dg);
        free(db);
        free(f.x);
        free(f.w);
        free(f.g);
        free(f.bt);
    }
    /* The running averages by hand: one channel of 1, 2, 3, 4 (mean 2.5, unbiased
     * variance 5/3), momentum 0.1, from (0, 1). */
    double x[4] = {1, 2, 3, 4}, g = 1, b = 0, y[4], rm = 0, rv = 1;
    kn_ref_batchnorm(x, &g, &b, y, &rm, &rv, 4, 1, 1, 0.0, 0.1, 1);
    TH_CHECK(fabs(rm - 0.25) < 1e-15 && fabs(rv - (0.9 + 0.1 * 5.0 / 3.0)) < 1e-15,
             "batchnorm ref running averages: got (%g, %g)", rm, rv);
    TH_CHECK(fabs(y[0] + 1.5 / sqrt(1.25)) < 1e-12, "batchnorm ref y[0] = %g", y[0]);
    /* rmsnorm by hand: the row (3, 4) has mean square 12.5; eps 0, gamma (1, 2):
     * rstd = 1 / sqrt(12.5), y = (3, 8) rstd (no mean subtracted, no beta). */
    double xr[2] = {3, 4}, gr[2] = {1, 2}, yr[2], rr;
    kn_ref_rmsnorm(xr, gr, yr, &rr, 1, 2, 0.0);
    double want_r = 1.0 / sqrt(12.5);
    TH_CHECK(fabs(rr - want_r) < 1e-15 && fabs(yr[0] - 3 * want_r) < 1e-15 &&
                 fabs(yr[1] - 8 * want_r) < 1e-15,
             "rmsnorm ref by hand: rstd %g, y (%g, %g)", rr, yr[0], yr[1]);
}

/* ---- (2) layer normalization on the device --------------------------------------- */

/* Per-row (mean, rstd) in double, for the stats output. */
static double *ln_stats(const float *x, uint32_t rows, uint32_t cols, double eps)
{
    double *st = zeros(2ull * rows);
    for (uint32_t r = 0; r < rows; r++) {
        const float *xr = x + (uint64_t)r * cols;
        double s = 0, q = 0;
        for (uint32_t c = 0; c < cols; c++)
            s += xr[c];
        double mean = s / cols;
        for (uint32_t c = 0; c < cols; c++)
            q += (xr[c] - mean) * (xr[c] - mean);
        st[2 * r] = mean;
        st[2 * r + 1] = 1.0 / sqrt(q / cols + eps);
    }
    return st;
}

static void test_layernorm_shape(uint32_t rows, uint32_t cols)
{
    const float eps = 1e-5f;
    uint64_t n = (uint64_t)rows * cols;
    char what[160];
    tb x = tb_new(n, g_offset - 2, g_offset + 3), g = tb_new(cols, 0.5f, 1.5f);
    tb b = tb_new(cols, -1, 1);
    tb y = tb_const(n, NAN), st = tb_const(2ull * rows, NAN);
    double *xd = to_d(x.h, n), *gd = to_d(g.h, cols), *bd = to_d(b.h, cols);
    double *yd = zeros(n), *std_ = ln_stats(x.h, rows, cols, eps);
    TH_OK(g_ctx, kn_layernorm(g_s, tv(&x), tv(&g), tv(&b), tv(&y), tv(&st), rows, cols, eps));
    run();
    kn_ref_layernorm(xd, gd, bd, yd, rows, cols, eps);
    snprintf(what, sizeof what, "layernorm %ux%u aligned %d: y", rows, cols, g_aligned);
    expect(&y, yd, what, 1e-4f, 2e-5f);
    snprintf(what, sizeof what, "layernorm %ux%u aligned %d: stats", rows, cols, g_aligned);
    expect(&st, std_, what, 1e-4f, 1e-5f);

    /* Backward from the device's stats, for every subset of the outputs: bit 0 dx,
     * bit 1 dgamma, bit 2 dbeta; beta 0 over NaN, then beta 1 over random values. */
    tb dy = tb_new(n, -1, 1);
    double *dyd = to_d(dy.h, n);
    tols tol = backward_tols(x.h, dy.h, std_, n, rows, cols, 1, cols);
    const int masks[] = {7, 1, 6, 2, 4, 5};
    unsigned n_masks = g_quick || n > 100000 ? 2 : 6;
    for (unsigned mi = 0; mi < n_masks; mi++) {
        int m = masks[mi];
        for (int beta = 0; beta < 2; beta++) {
            tb dx = beta ? tb_new(n, -1, 1) : tb_const(n, NAN);
            tb dg = beta ? tb_new(cols, -1, 1) : tb_const(cols, NAN);
            tb db = beta ? tb_new(cols, -1, 1) : tb_const(cols, NAN);
            /* the expected values: unwanted outputs keep their contents */
            double *dxd = beta || !(m & 1) ? to_d(dx.h, n) : zeros(n);
            double *dgd = beta || !(m & 2) ? to_d(dg.h, cols) : zeros(cols);
            double *dbd = beta || !(m & 4) ? to_d(db.h, cols) : zeros(cols);
            vkt_view dxv = tv(&dx), dgv = tv(&dg), dbv = tv(&db), ws = {NULL, 0};
            float bf = (float)beta;
            TH_OK(g_ctx, kn_layernorm_backward(g_s, tv(&x), tv(&g), tv(&st), tv(&dy),
                                               m & 1 ? &dxv : NULL, bf, m & 2 ? &dgv : NULL,
                                               bf, m & 4 ? &dbv : NULL, bf, ws, rows, cols));
            run();
            kn_ref_layernorm_backward(xd, gd, dyd, m & 1 ? dxd : NULL, m & 2 ? dgd : NULL,
                                      m & 4 ? dbd : NULL, rows, cols, eps);
            snprintf(what, sizeof what, "layernorm_backward %ux%u aligned %d mask %d beta %d: dx",
                     rows, cols, g_aligned, m, beta);
            expect_tol(&dx, dxd, tol.dx, what);
            snprintf(what, sizeof what, "layernorm_backward %ux%u aligned %d mask %d beta %d: "
                     "dgamma", rows, cols, g_aligned, m, beta);
            expect_tol(&dg, dgd, tol.dg, what);
            snprintf(what, sizeof what, "layernorm_backward %ux%u aligned %d mask %d beta %d: "
                     "dbeta", rows, cols, g_aligned, m, beta);
            expect_tol(&db, dbd, tol.db, what);
            tb_free(&dx);
            tb_free(&dg);
            tb_free(&db);
            free(dxd);
            free(dgd);
            free(dbd);
        }
    }
    free(dyd);
    tols_free(&tol);
    tb_free(&dy);

    /* In place: y over x itself. */
    if (n <= 100000) {
        TH_OK(g_ctx, kn_layernorm(g_s, tv(&x), tv(&g), tv(&b), tv(&x), tv(&st), rows, cols, eps));
        run();
        snprintf(what, sizeof what, "layernorm %ux%u aligned %d: in place", rows, cols,
                 g_aligned);
        expect(&x, yd, what, 1e-4f, 2e-5f);
    }
    free(xd);
    free(gd);
    free(bd);
    free(yd);
    free(std_);
    tb_free(&x);
    tb_free(&g);
    tb_free(&b);
    tb_free(&y);
    tb_free(&st);
}

static void test_layernorm(void)
{
    /* (2049, 64): the typical size, one more row; (3, 6007): long rows, several threads a
     * row on llvmpipe; (20011, 3): more rows than one thread may walk for a column sum. */
    const uint32_t full[][2] = {{1, 2},   {3, 5},     {2, 1},  {7, 64}, {2049, 64},
                                {5, 257}, {33, 4},    {1, 12}, {3, 6007},
                                {20011, 3}};
    const uint32_t quick[][2] = {{3, 5}, {5, 257}, {300, 5}, {3, 2000}, {33, 64}};
    if (g_quick)
        for (unsigned i = 0; i < sizeof quick / sizeof quick[0]; i++)
            test_layernorm_shape(quick[i][0], quick[i][1]);
    else
        for (unsigned i = 0; i < sizeof full / sizeof full[0]; i++)
            test_layernorm_shape(full[i][0], full[i][1]);
    g_offset = 10;
    test_layernorm_shape(33, 64);
    test_layernorm_shape(2, 3001);
    g_offset = 0;
}

/* ---- (2) RMS normalization on the device ----------------------------------------- */

/* Per-row (0, rstd) in double: the (mean, rstd) layout backward_tols reads, mean 0 as
 * RMSNorm subtracts none. */
static double *rms_stats(const float *x, uint32_t rows, uint32_t cols, double eps)
{
    double *st = zeros(2ull * rows);
    for (uint32_t r = 0; r < rows; r++) {
        double q = 0;
        for (uint32_t c = 0; c < cols; c++)
            q += (double)x[(uint64_t)r * cols + c] * x[(uint64_t)r * cols + c];
        st[2 * r + 1] = 1.0 / sqrt(q / cols + eps);
    }
    return st;
}

static void test_rmsnorm_shape(uint32_t rows, uint32_t cols)
{
    const float eps = 1e-5f;
    uint64_t n = (uint64_t)rows * cols;
    char what[160];
    tb x = tb_new(n, g_offset - 2, g_offset + 3), g = tb_new(cols, 0.5f, 1.5f);
    tb y = tb_const(n, NAN), rs = tb_const(rows, NAN);
    double *xd = to_d(x.h, n), *gd = to_d(g.h, cols), *yd = zeros(n), *rd = zeros(rows);
    double *st2 = rms_stats(x.h, rows, cols, eps);
    TH_OK(g_ctx, kn_rmsnorm(g_s, tv(&x), tv(&g), tv(&y), tv(&rs), rows, cols, eps));
    run();
    kn_ref_rmsnorm(xd, gd, yd, rd, rows, cols, eps);
    snprintf(what, sizeof what, "rmsnorm %ux%u aligned %d: y", rows, cols, g_aligned);
    expect(&y, yd, what, 1e-4f, 2e-5f);
    snprintf(what, sizeof what, "rmsnorm %ux%u aligned %d: rstd", rows, cols, g_aligned);
    expect(&rs, rd, what, 1e-4f, 1e-5f);

    /* Backward from the device's rstd, for every subset of the outputs: bit 0 dx, bit 1
     * dgamma; beta 0 over NaN, then beta 1 over random values. */
    tb dy = tb_new(n, -1, 1);
    double *dyd = to_d(dy.h, n);
    tols tol = backward_tols(x.h, dy.h, st2, n, rows, cols, 1, cols);
    const int masks[] = {3, 1, 2};
    unsigned n_masks = g_quick || n > 100000 ? 1 : 3;
    for (unsigned mi = 0; mi < n_masks; mi++) {
        int m = masks[mi];
        for (int beta = 0; beta < 2; beta++) {
            tb dx = beta ? tb_new(n, -1, 1) : tb_const(n, NAN);
            tb dg = beta ? tb_new(cols, -1, 1) : tb_const(cols, NAN);
            /* the expected values: an unwanted output keeps its contents */
            double *dxd = beta || !(m & 1) ? to_d(dx.h, n) : zeros(n);
            double *dgd = beta || !(m & 2) ? to_d(dg.h, cols) : zeros(cols);
            vkt_view dxv = tv(&dx), dgv = tv(&dg), ws = {NULL, 0};
            float bf = (float)beta;
            TH_OK(g_ctx, kn_rmsnorm_backward(g_s, tv(&x), tv(&g), tv(&rs), tv(&dy),
                                             m & 1 ? &dxv : NULL, bf, m & 2 ? &dgv : NULL, bf,
                                             ws, rows, cols));
            run();
            kn_ref_rmsnorm_backward(xd, gd, dyd, m & 1 ? dxd : NULL, m & 2 ? dgd : NULL, rows,
                                    cols, eps);
            snprintf(what, sizeof what, "rmsnorm_backward %ux%u aligned %d mask %d beta %d: dx",
                     rows, cols, g_aligned, m, beta);
            expect_tol(&dx, dxd, tol.dx, what);
            snprintf(what, sizeof what, "rmsnorm_backward %ux%u aligned %d mask %d beta %d: "
                     "dgamma", rows, cols, g_aligned, m, beta);
            expect_tol(&dg, dgd, tol.dg, what);
            tb_free(&dx);
            tb_free(&dg);
            free(dxd);
            free(dgd);
        }
    }
    free(dyd);
    tols_free(&tol);
    tb_free(&dy);

    /* In place: y over x itself. */
    if (n <= 100000) {
        TH_OK(g_ctx, kn_rmsnorm(g_s, tv(&x), tv(&g), tv(&x), tv(&rs), rows, cols, eps));
        run();
        snprintf(what, sizeof what, "rmsnorm %ux%u aligned %d: in place", rows, cols, g_aligned);
        expect(&x, yd, what, 1e-4f, 2e-5f);
    }
    free(xd);
    free(gd);
    free(yd);
    free(rd);
    free(st2);
    tb_free(&x);
    tb_free(&g);
    tb_free(&y);
    tb_free(&rs);
}

static void test_rmsnorm(void)
{
    /* rows 1, 3, 257, ... by cols 1, 7, 33, 1000, 4097 (none a multiple of 4: the scalar
     * paths), the typical [2049, 64] and [7, 64] (vec4 when aligned), [3, 6007] (several
     * threads a row on llvmpipe), [20011, 3] (more rows than one thread may walk for a
     * column sum), [257, 4096] (1M elements, vec4). */
    const uint32_t full[][2] = {{1, 1},    {3, 7},    {257, 33},  {1, 1000}, {3, 4097},
                                {257, 1},  {2049, 64}, {7, 64},   {33, 4},   {5, 1000},
                                {3, 6007}, {20011, 3}, {257, 4096}};
    const uint32_t quick[][2] = {{3, 7}, {257, 33}, {300, 5}, {3, 2000}, {33, 64}, {1, 4097}};
    if (g_quick)
        for (unsigned i = 0; i < sizeof quick / sizeof quick[0]; i++)
            test_rmsnorm_shape(quick[i][0], quick[i][1]);
    else
        for (unsigned i = 0; i < sizeof full / sizeof full[0]; i++)
            test_rmsnorm_shape(full[i][0], full[i][1]);
    /* a large common offset: every x^2 near 100, rstd near 0.1 */
    g_offset = 10;
    test_rmsnorm_shape(33, 64);
    g_offset = 0;
}

/* ---- (2) batch normalization on the device --------------------------------------- */

static double *bn_stats(const float *x, uint32_t n, uint32_t c, uint32_t hw, double eps)
{
    double *st = zeros(2ull * c);
    for (uint32_t ch = 0; ch < c; ch++) {
        double s = 0, q = 0, m = (double)n * hw;
        for (uint32_t i = 0; i < n; i++)
            for (uint32_t j = 0; j < hw; j++)
                s += x[((uint64_t)i * c + ch) * hw + j];
        double mean = s / m;
        for (uint32_t i = 0; i < n; i++)
            for (uint32_t j = 0; j < hw; j++) {
                double d = x[((uint64_t)i * c + ch) * hw + j] - mean;
                q += d * d;
            }
        st[2 * ch] = mean;
        st[2 * ch + 1] = 1.0 / sqrt(q / m + eps);
    }
    return st;
}

static void test_batchnorm_shape(uint32_t n, uint32_t c, uint32_t hw)
{
    const float eps = 1e-5f, mom = 0.1f;
    uint64_t total = (uint64_t)n * c * hw;
    char what[160];
    tb g = tb_new(c, 0.5f, 1.5f), b = tb_new(c, -1, 1);
    tb rm = tb_new(c, -0.5f, 0.5f), rv = tb_new(c, 0.5f, 2.0f);
    tb y = tb_const(total, NAN), st = tb_const(2ull * c, NAN);
    double *gd = to_d(g.h, c), *bd = to_d(b.h, c), *rmd = to_d(rm.h, c), *rvd = to_d(rv.h, c);
    double *yd = zeros(total);
    tb x = {make_buf(total), th_alloc_floats(total)};
    double *xd = NULL;
    /* two training steps on different batches: the running averages move twice */
    for (int step = 0; step < 2; step++) {
        th_fill_uniform(x.h, total, g_offset - 2.0f + step, g_offset + 3.0f);
        th_buf_write(&x.b, x.h);
        free(xd);
        xd = to_d(x.h, total);
        TH_OK(g_ctx, kn_batchnorm(g_s, tv(&x), tv(&g), tv(&b), tv(&y), tv(&st), tv(&rm),
                                  tv(&rv), n, c, hw, eps, mom, 1));
        run();
        kn_ref_batchnorm(xd, gd, bd, yd, rmd, rvd, n, c, hw, eps, mom, 1);
        double *sd = bn_stats(x.h, n, c, hw, eps);
        snprintf(what, sizeof what, "batchnorm %ux%ux%u aligned %d step %d: y", n, c, hw,
                 g_aligned, step);
        expect(&y, yd, what, 1e-4f, 5e-5f);
        snprintf(what, sizeof what, "batchnorm %ux%ux%u aligned %d step %d: stats", n, c, hw,
                 g_aligned, step);
        expect(&st, sd, what, 1e-4f, 1e-5f);
        snprintf(what, sizeof what, "batchnorm %ux%ux%u aligned %d step %d: running_mean", n,
                 c, hw, g_aligned, step);
        expect(&rm, rmd, what, 1e-4f, 1e-5f);
        snprintf(what, sizeof what, "batchnorm %ux%ux%u aligned %d step %d: running_var", n,
                 c, hw, g_aligned, step);
        expect(&rv, rvd, what, 1e-4f, 1e-5f);
        free(sd);
    }

    /* Backward (from the second step's stats): subsets and betas as for layernorm. */
    tb dy = tb_new(total, -1, 1);
    double *dyd = to_d(dy.h, total);
    double *bst = bn_stats(x.h, n, c, hw, eps);
    tols tol = backward_tols(x.h, dy.h, bst, total, c, hw, 0, c);
    const int masks[] = {7, 1, 6, 2, 4, 3};
    unsigned n_masks = g_quick || total > 100000 ? 2 : 6;
    for (unsigned mi = 0; mi < n_masks; mi++) {
        int m = masks[mi];
        for (int beta = 0; beta < 2; beta++) {
            tb dx = beta ? tb_new(total, -1, 1) : tb_const(total, NAN);
            tb dg = beta ? tb_new(c, -1, 1) : tb_const(c, NAN);
            tb db = beta ? tb_new(c, -1, 1) : tb_const(c, NAN);
            double *dxd = beta || !(m & 1) ? to_d(dx.h, total) : zeros(total);
            double *dgd = beta || !(m & 2) ? to_d(dg.h, c) : zeros(c);
            double *dbd = beta || !(m & 4) ? to_d(db.h, c) : zeros(c);
            vkt_view dxv = tv(&dx), dgv = tv(&dg), dbv = tv(&db), ws = {NULL, 0};
            float bf = (float)beta;
            TH_OK(g_ctx, kn_batchnorm_backward(g_s, tv(&x), tv(&g), tv(&st), tv(&dy),
                                               m & 1 ? &dxv : NULL, bf, m & 2 ? &dgv : NULL,
                                               bf, m & 4 ? &dbv : NULL, bf, ws, n, c, hw));
            run();
            kn_ref_batchnorm_backward(xd, gd, dyd, m & 1 ? dxd : NULL, m & 2 ? dgd : NULL,
                                      m & 4 ? dbd : NULL, n, c, hw, eps);
            snprintf(what, sizeof what, "batchnorm_backward %ux%ux%u aligned %d mask %d beta "
                     "%d: dx", n, c, hw, g_aligned, m, beta);
            expect_tol(&dx, dxd, tol.dx, what);
            snprintf(what, sizeof what, "batchnorm_backward %ux%ux%u aligned %d mask %d beta "
                     "%d: dgamma", n, c, hw, g_aligned, m, beta);
            expect_tol(&dg, dgd, tol.dg, what);
            snprintf(what, sizeof what, "batchnorm_backward %ux%ux%u aligned %d mask %d beta "
                     "%d: dbeta", n, c, hw, g_aligned, m, beta);
            expect_tol(&db, dbd, tol.db, what);
            tb_free(&dx);
            tb_free(&dg);
            tb_free(&db);
            free(dxd);
            free(dgd);
            free(dbd);
        }
    }
    /* In place: dx over dy itself. */
    {
        double *dxd = zeros(total);
        vkt_view dyv = tv(&dy), ws = {NULL, 0};
        TH_OK(g_ctx, kn_batchnorm_backward(g_s, tv(&x), tv(&g), tv(&st), dyv, &dyv, 0, NULL, 0,
                                           NULL, 0, ws, n, c, hw));
        run();
        kn_ref_batchnorm_backward(xd, gd, dyd, dxd, NULL, NULL, n, c, hw, eps);
        snprintf(what, sizeof what, "batchnorm_backward %ux%ux%u aligned %d: dx in place", n,
                 c, hw, g_aligned);
        expect_tol(&dy, dxd, tol.dx, what);
        free(dxd);
    }
    free(bst);
    tols_free(&tol);
    free(dyd);
    tb_free(&dy);

    /* Inference: y from the running values; stats and running values untouched (an
     * invalid stats view is fine: it is not used). */
    float *st_before = th_alloc_floats(2ull * c), *rm_before = th_alloc_floats(c);
    float *rv_before = th_alloc_floats(c);
    th_buf_read(&st.b, st_before);
    th_buf_read(&rm.b, rm_before);
    th_buf_read(&rv.b, rv_before);
    vkt_view no_stats = {NULL, 0};
    TH_OK(g_ctx, kn_batchnorm(g_s, tv(&x), tv(&g), tv(&b), tv(&y), no_stats, tv(&rm), tv(&rv),
                              n, c, hw, eps, mom, 0));
    run();
    double *rmd2 = to_d(rm_before, c), *rvd2 = to_d(rv_before, c);
    kn_ref_batchnorm(xd, gd, bd, yd, rmd2, rvd2, n, c, hw, eps, mom, 0);
    snprintf(what, sizeof what, "batchnorm inference %ux%ux%u aligned %d: y", n, c, hw,
             g_aligned);
    expect(&y, yd, what, 1e-4f, 5e-5f);
    /* the same call with stats given must leave it alone too */
    TH_OK(g_ctx, kn_batchnorm(g_s, tv(&x), tv(&g), tv(&b), tv(&y), tv(&st), tv(&rm), tv(&rv),
                              n, c, hw, eps, mom, 0));
    run();
    th_buf_read(&st.b, st.h);
    th_buf_read(&rm.b, rm.h);
    th_buf_read(&rv.b, rv.h);
    TH_CHECK(!memcmp(st.h, st_before, 8ull * c) && !memcmp(rm.h, rm_before, 4ull * c) &&
                 !memcmp(rv.h, rv_before, 4ull * c),
             "batchnorm inference %ux%ux%u: stats and running values untouched", n, c, hw);
    /* Training that keeps the running averages (a pipeline stage's first forward): y and
     * stats of the batch, the running values bit for bit as they were. */
    TH_OK(g_ctx, kn_batchnorm(g_s, tv(&x), tv(&g), tv(&b), tv(&y), tv(&st), tv(&rm), tv(&rv),
                              n, c, hw, eps, mom, KN_BN_TRAIN_KEEP));
    run();
    kn_ref_batchnorm(xd, gd, bd, yd, rmd2, rvd2, n, c, hw, eps, mom, KN_BN_TRAIN_KEEP);
    snprintf(what, sizeof what, "batchnorm training, running kept, %ux%ux%u aligned %d: y", n,
             c, hw, g_aligned);
    expect(&y, yd, what, 1e-4f, 5e-5f);
    double *sd_keep = bn_stats(x.h, n, c, hw, eps);
    snprintf(what, sizeof what, "batchnorm training, running kept, %ux%ux%u aligned %d: stats",
             n, c, hw, g_aligned);
    expect(&st, sd_keep, what, 1e-4f, 1e-5f);
    free(sd_keep);
    th_buf_read(&rm.b, rm.h);
    th_buf_read(&rv.b, rv.h);
    int ref_kept = 1;
    for (uint32_t ch = 0; ch < c; ch++)
        ref_kept &= rmd2[ch] == (double)rm_before[ch] && rvd2[ch] == (double)rv_before[ch];
    TH_CHECK(!memcmp(rm.h, rm_before, 4ull * c) && !memcmp(rv.h, rv_before, 4ull * c) &&
                 ref_kept,
             "batchnorm training with running kept %ux%ux%u: running values untouched (device "
             "and reference)", n, c, hw);
    free(st_before);
    free(rm_before);
    free(rv_before);
    free(rmd2);
    free(rvd2);
    free(xd);
    free(gd);
    free(bd);
    free(rmd);
    free(rvd);
    free(yd);
    tb_free(&x);
    tb_free(&g);
    tb_free(&b);
    tb_free(&rm);
    tb_free(&rv);
    tb_free(&y);
    tb_free(&st);
}

static void test_batchnorm(void)
{
    /* [n, c, hw]: a count of 1 per channel; [n, c] (hw 1); primes; hw a multiple of 4 (the
     * vec4 path when aligned); 64 x 4 x 196 near the typical size; one long channel that
     * needs a larger workgroup on llvmpipe. */
    const uint32_t full[][3] = {{1, 1, 1},  {1, 3, 1},   {2, 3, 5},    {4, 2, 1},
                                {3, 5, 7},  {5, 3, 64},  {64, 4, 196}, {2, 1, 350003},
                                {7, 11, 12}};
    const uint32_t quick[][3] = {{2, 3, 5}, {5, 3, 64}, {3, 2, 1001}};
    if (g_quick)
        for (unsigned i = 0; i < sizeof quick / sizeof quick[0]; i++)
            test_batchnorm_shape(quick[i][0], quick[i][1], quick[i][2]);
    else
        for (unsigned i = 0; i < sizeof full / sizeof full[0]; i++)
            test_batchnorm_shape(full[i][0], full[i][1], full[i][2]);
    g_offset = 10;
    test_batchnorm_shape(16, 3, 196);
    g_offset = 0;
}

/* ---- (2, 3) embedding -------------------------------------------------------------- */

/* ids drawn from the first `used` rows of the vocabulary (used < vocab leaves rows no id
 * touches, which beta 0 must zero). */
static void test_embedding_shape(uint32_t n, uint32_t vocab, uint32_t dim, uint32_t used)
{
    char what[160];
    uint64_t yn = (uint64_t)n * dim, tn = (uint64_t)vocab * dim;
    tb ids = {make_buf(n), th_alloc_floats(n)};
    for (uint32_t i = 0; i < n; i++)
        ids.h[i] = (float)(th_rand_u64() % used);
    th_buf_write(&ids.b, ids.h);
    tb table = tb_new(tn, -1, 1), y = tb_const(yn, NAN), dy = tb_new(yn, -1, 1);
    double *idd = to_d(ids.h, n), *td = to_d(table.h, tn), *yd = zeros(yn);
    double *dyd = to_d(dy.h, yn);
    TH_OK(g_ctx, kn_embedding(g_s, tv(&ids), tv(&table), tv(&y), n, vocab, dim));
    run();
    kn_ref_embedding(idd, td, yd, n, vocab, dim);
    snprintf(what, sizeof what, "embedding %u ids, [%u, %u] aligned %d: y", n, vocab, dim,
             g_aligned);
    expect(&y, yd, what, 0, 0); /* a copy: exact */

    /* beta 0 over NaN, twice into the same buffer: bitwise equal; then beta 1. */
    tb dt = tb_const(tn, NAN);
    double *dtd = zeros(tn);
    TH_OK(g_ctx, kn_embedding_backward(g_s, tv(&ids), tv(&dy), tv(&dt), 0.0f, n, vocab, dim));
    run();
    kn_ref_embedding_backward(idd, dyd, dtd, n, vocab, dim);
    snprintf(what, sizeof what, "embedding_backward %u ids, [%u, %u] aligned %d: beta 0", n,
             vocab, dim, g_aligned);
    /* sums of up to n terms of size 1 in fp32 */
    expect(&dt, dtd, what, 1e-5f, 1e-6f + 2e-7f * (float)n);
    int untouched_zero = 1;
    for (uint64_t v = used; v < vocab; v++)
        for (uint32_t d = 0; d < dim; d++)
            untouched_zero &= dt.h[v * dim + d] == 0.0f && !signbit(dt.h[v * dim + d]);
    TH_CHECK(untouched_zero, "%s: rows no id touches are +0", what);
    float *first = th_alloc_floats(tn);
    memcpy(first, dt.h, tn * 4);
    for (uint64_t i = 0; i < tn; i++)
        dt.h[i] = NAN;
    th_buf_write(&dt.b, dt.h);
    TH_OK(g_ctx, kn_embedding_backward(g_s, tv(&ids), tv(&dy), tv(&dt), 0.0f, n, vocab, dim));
    run();
    th_buf_read(&dt.b, dt.h);
    TH_CHECK(!memcmp(first, dt.h, tn * 4), "%s: two runs bitwise equal", what);
    free(first);

    th_fill_uniform(dt.h, tn, -1, 1);
    th_buf_write(&dt.b, dt.h);
    free(dtd);
    dtd = to_d(dt.h, tn);
    TH_OK(g_ctx, kn_embedding_backward(g_s, tv(&ids), tv(&dy), tv(&dt), 1.0f, n, vocab, dim));
    run();
    kn_ref_embedding_backward(idd, dyd, dtd, n, vocab, dim);
    snprintf(what, sizeof what, "embedding_backward %u ids, [%u, %u] aligned %d: beta 1", n,
             vocab, dim, g_aligned);
    expect(&dt, dtd, what, 1e-5f, 1e-6f + 2e-7f * (float)n);
    free(idd);
    free(td);
    free(yd);
    free(dyd);
    free(dtd);
    tb_free(&ids);
    tb_free(&table);
    tb_free(&y);
    tb_free(&dy);
    tb_free(&dt);
}

static void test_embedding(void)
{
    /* (n, vocab, dim, ids from the first `used` rows): 500 ids from a vocab of 3; the
     * typical size; dims that are not multiples of 4; a batch longer than one dispatch
     * may scan on llvmpipe (split into slices). */
    const uint32_t full[][4] = {{1, 1, 1, 1},      {7, 3, 5, 3},     {500, 3, 64, 3},
                                {500, 5, 13, 2},   {2048, 90, 64, 90}, {13, 17, 6, 17},
                                {16001, 5, 8, 5},  {3, 1000, 4, 1000}};
    const uint32_t quick[][4] = {{7, 3, 5, 3}, {500, 3, 64, 3}, {64, 90, 64, 50}};
    if (g_quick)
        for (unsigned i = 0; i < sizeof quick / sizeof quick[0]; i++)
            test_embedding_shape(quick[i][0], quick[i][1], quick[i][2], quick[i][3]);
    else
        for (unsigned i = 0; i < sizeof full / sizeof full[0]; i++)
            test_embedding_shape(full[i][0], full[i][1], full[i][2], full[i][3]);
}

/* ---- (4) error paths ---------------------------------------------------------------- */

/* The status is `want` and the context's message names the call and mentions `word`. */
static void expect_error(vkt_status got, vkt_status want, const char *fn, const char *word,
                         int line)
{
    const char *msg = vkt_context_errmsg(g_ctx);
    th_check(got == want && strstr(msg, fn) && strstr(msg, word), __FILE__, line,
             "%s: got %s (\"%s\"), expected %s mentioning \"%s\"", fn, vkt_status_name(got),
             msg, vkt_status_name(want), word);
}
#define EXPECT_ERROR(expr, want, fn, word) expect_error((expr), (want), (fn), (word), __LINE__)

static void test_errors(void)
{
    const vkt_status BAD = VKT_ERROR_INVALID_ARGUMENT;
    tb big = tb_const(4096, 0);
    vkt_buffer *small = NULL; /* 3 floats: too small for any argument below */
    TH_OK(g_ctx, vkt_buffer_create(g_ctx, 12, VKT_MEMORY_DEVICE, &small));
    vkt_view v = tv(&big), sm = {small, 0}, none = {NULL, 0};
    vkt_view w1 = {big.b.buffer, big.b.offset + 1000}, w2 = {big.b.buffer, big.b.offset + 2000};
    vkt_view w3 = {big.b.buffer, big.b.offset + 3000};

    /* layernorm: x, y [4, 8] in different parts of `big` */
    TH_STATUS(NULL, kn_layernorm(NULL, v, v, v, w1, w2, 4, 8, 1e-5f), BAD);
    EXPECT_ERROR(kn_layernorm(g_s, v, w3, w3, w1, w2, 0, 8, 1e-5f), BAD, "kn_layernorm", "rows");
    EXPECT_ERROR(kn_layernorm(g_s, v, w3, w3, w1, w2, 4, 0, 1e-5f), BAD, "kn_layernorm", "cols");
    EXPECT_ERROR(kn_layernorm(g_s, v, w3, w3, w1, w2, 4, 8, -1.0f), BAD, "kn_layernorm", "eps");
    EXPECT_ERROR(kn_layernorm(g_s, v, w3, w3, w1, w2, 4, 8, NAN), BAD, "kn_layernorm", "eps");
    EXPECT_ERROR(kn_layernorm(g_s, v, w3, w3, sm, w2, 4, 8, 1e-5f), BAD, "kn_layernorm", "y");
    EXPECT_ERROR(kn_layernorm(g_s, v, w3, w3, w1, sm, 4, 8, 1e-5f), BAD, "kn_layernorm",
                 "stats");
    EXPECT_ERROR(kn_layernorm(g_s, v, none, w3, w1, w2, 4, 8, 1e-5f), BAD, "kn_layernorm",
                 "gamma");
    EXPECT_ERROR(kn_layernorm(g_s, v, w3, w3, w1, w1, 4, 8, 1e-5f), BAD, "kn_layernorm",
                 "overlaps");
    vkt_view x_shift = {big.b.buffer, big.b.offset + 1};
    EXPECT_ERROR(kn_layernorm(g_s, v, w3, w3, x_shift, w2, 4, 8, 1e-5f), BAD, "kn_layernorm",
                 "overlaps");
    /* layernorm backward */
    EXPECT_ERROR(kn_layernorm_backward(g_s, v, w3, w2, w1, NULL, 0, NULL, 0, NULL, 0, none, 4, 8),
                 BAD, "kn_layernorm_backward", "none of");
    EXPECT_ERROR(kn_layernorm_backward(g_s, v, w3, w2, w1, &w1, 0, NULL, 0, NULL, 0, none, 4, 8),
                 BAD, "kn_layernorm_backward", "overlaps");
    EXPECT_ERROR(kn_layernorm_backward(g_s, v, w3, w2, w1, &sm, 0, NULL, 0, NULL, 0, none, 4, 8),
                 BAD, "kn_layernorm_backward", "dx");
    EXPECT_ERROR(kn_layernorm_backward(g_s, v, w3, w2, w1, NULL, 0, &sm, 0, NULL, 0, none, 4, 8),
                 BAD, "kn_layernorm_backward", "dgamma");
    vkt_view w4 = {big.b.buffer, big.b.offset + 3500};
    EXPECT_ERROR(kn_layernorm_backward(g_s, v, w3, w2, w1, NULL, 0, &w4, NAN, NULL, 0, none, 4,
                                       8),
                 BAD, "kn_layernorm_backward", "beta_g");
    EXPECT_ERROR(kn_layernorm_backward(g_s, v, w3, w2, w1, NULL, 0, &w4, 0, NULL, 0, none, 0, 8),
                 BAD, "kn_layernorm_backward", "rows");
    /* rmsnorm: x, y [4, 8], rstd [4] in different parts of `big` */
    TH_STATUS(NULL, kn_rmsnorm(NULL, v, w3, w1, w2, 4, 8, 1e-5f), BAD);
    EXPECT_ERROR(kn_rmsnorm(g_s, v, w3, w1, w2, 0, 8, 1e-5f), BAD, "kn_rmsnorm", "rows");
    EXPECT_ERROR(kn_rmsnorm(g_s, v, w3, w1, w2, 4, 0, 1e-5f), BAD, "kn_rmsnorm", "cols");
    EXPECT_ERROR(kn_rmsnorm(g_s, v, w3, w1, w2, 4, 8, -1.0f), BAD, "kn_rmsnorm", "eps");
    EXPECT_ERROR(kn_rmsnorm(g_s, v, w3, w1, w2, 4, 8, NAN), BAD, "kn_rmsnorm", "eps");
    EXPECT_ERROR(kn_rmsnorm(g_s, v, w3, sm, w2, 4, 8, 1e-5f), BAD, "kn_rmsnorm", "y");
    EXPECT_ERROR(kn_rmsnorm(g_s, v, w3, w1, sm, 4, 8, 1e-5f), BAD, "kn_rmsnorm", "rstd");
    EXPECT_ERROR(kn_rmsnorm(g_s, v, none, w1, w2, 4, 8, 1e-5f), BAD, "kn_rmsnorm", "gamma");
    EXPECT_ERROR(kn_rmsnorm(g_s, v, w3, w1, w1, 4, 8, 1e-5f), BAD, "kn_rmsnorm", "overlaps");
    EXPECT_ERROR(kn_rmsnorm(g_s, v, w3, x_shift, w2, 4, 8, 1e-5f), BAD, "kn_rmsnorm",
                 "overlaps");
    EXPECT_ERROR(kn_rmsnorm(g_s, v, w3, w1, w2, 70000, 70000, 1e-5f), VKT_ERROR_LIMIT,
                 "kn_rmsnorm", "2^32");
    /* x wider than one binding may span (maxStorageBufferRange): the calls name x. One
     * buffer holds x [rows, 4096] (also y and dy), rstd [rows] or stats [rows, 2] and
     * dgamma [4096]; it is never written or read (untouched pages), only checked. gamma
     * (and beta) is `big`. */
    {
        vkt_device_info info;
        TH_OK(g_ctx, vkt_context_device_info(g_ctx, &info));
        const uint32_t cols = 4096;
        uint64_t over = info.max_storage_buffer_range / 4 + cols; /* floats */
        uint32_t rows = (uint32_t)((over + cols - 1) / cols);
        uint64_t n = (uint64_t)rows * cols;
        vkt_buffer *wide = NULL;
        if (info.max_storage_buffer_range <= (1ull << 30) &&
            vkt_buffer_create(g_ctx, 4 * (n + 2ull * rows + cols), VKT_MEMORY_DEVICE,
                              &wide) == VKT_OK) {
            vkt_view wx = {wide, 0}, wr = {wide, n}, wg = {wide, n + 2ull * rows};
            EXPECT_ERROR(kn_rmsnorm(g_s, wx, v, wx, wr, rows, cols, 1e-5f), VKT_ERROR_LIMIT,
                         "kn_rmsnorm", "x spans");
            EXPECT_ERROR(kn_rmsnorm_backward(g_s, wx, v, wr, wx, NULL, 0, &wg, 0, none, rows,
                                             cols),
                         VKT_ERROR_LIMIT, "kn_rmsnorm_backward", "maxStorageBufferRange");
            EXPECT_ERROR(kn_layernorm(g_s, wx, v, v, wx, wr, rows, cols, 1e-5f),
                         VKT_ERROR_LIMIT, "kn_layernorm", "x spans");
            EXPECT_ERROR(kn_layernorm_backward(g_s, wx, v, wr, wx, NULL, 0, &wg, 0, NULL, 0,
                                               none, rows, cols),
                         VKT_ERROR_LIMIT, "kn_layernorm_backward", "maxStorageBufferRange");
            vkt_buffer_destroy(wide);
        } else {
            TH_CHECK(1, "rmsnorm, layernorm: maxStorageBufferRange %llu bytes: no tensor past "
                     "it made",
                     (unsigned long long)info.max_storage_buffer_range);
        }
    }
    /* rmsnorm backward: rstd at w2, dy at w1 */
    EXPECT_ERROR(kn_rmsnorm_backward(g_s, v, w3, w2, w1, NULL, 0, NULL, 0, none, 4, 8), BAD,
                 "kn_rmsnorm_backward", "none of");
    EXPECT_ERROR(kn_rmsnorm_backward(g_s, v, w3, w2, w1, &w1, 0, NULL, 0, none, 4, 8), BAD,
                 "kn_rmsnorm_backward", "overlaps");
    EXPECT_ERROR(kn_rmsnorm_backward(g_s, v, w3, w2, w1, &sm, 0, NULL, 0, none, 4, 8), BAD,
                 "kn_rmsnorm_backward", "dx");
    EXPECT_ERROR(kn_rmsnorm_backward(g_s, v, w3, w2, w1, NULL, 0, &sm, 0, none, 4, 8), BAD,
                 "kn_rmsnorm_backward", "dgamma");
    EXPECT_ERROR(kn_rmsnorm_backward(g_s, v, w3, sm, w1, NULL, 0, &w4, 0, none, 4, 8), BAD,
                 "kn_rmsnorm_backward", "rstd");
    EXPECT_ERROR(kn_rmsnorm_backward(g_s, v, w3, w2, w1, NULL, 0, &w4, NAN, none, 4, 8), BAD,
                 "kn_rmsnorm_backward", "beta_g");
    EXPECT_ERROR(kn_rmsnorm_backward(g_s, v, w3, w2, w1, &w4, INFINITY, NULL, 0, none, 4, 8),
                 BAD, "kn_rmsnorm_backward", "beta_x");
    EXPECT_ERROR(kn_rmsnorm_backward(g_s, v, w3, w2, w1, NULL, 0, &w4, 0, none, 4, 0), BAD,
                 "kn_rmsnorm_backward", "cols");
    TH_STATUS(NULL, kn_rmsnorm_backward(NULL, v, w3, w2, w1, NULL, 0, &w4, 0, none, 4, 8), BAD);
    /* batchnorm: x, y [2, 3, 5] */
    EXPECT_ERROR(kn_batchnorm(g_s, v, w3, w3, w1, w2, w4, w4, 0, 3, 5, 1e-5f, 0.1f, 1), BAD,
                 "kn_batchnorm", "n (0)");
    EXPECT_ERROR(kn_batchnorm(g_s, v, w3, w3, w1, w2, w4, w4, 2, 3, 0, 1e-5f, 0.1f, 1), BAD,
                 "kn_batchnorm", "hw (0)");
    EXPECT_ERROR(kn_batchnorm(g_s, v, w3, w3, w1, sm, w4, w2, 2, 3, 5, 1e-5f, 0.1f, 1), BAD,
                 "kn_batchnorm", "stats");
    EXPECT_ERROR(kn_batchnorm(g_s, v, w3, w3, w1, w2, none, w4, 2, 3, 5, 1e-5f, 0.1f, 0), BAD,
                 "kn_batchnorm", "running_mean");
    EXPECT_ERROR(kn_batchnorm(g_s, v, w3, w3, w1, w2, w4, w4, 2, 3, 5, 1e-5f, 0.1f, 1), BAD,
                 "kn_batchnorm", "overlaps");
    EXPECT_ERROR(kn_batchnorm(g_s, v, w3, w3, w1, w2, w4, w3, 2, 3, 5, 1e-5f, INFINITY, 1), BAD,
                 "kn_batchnorm", "momentum");
    EXPECT_ERROR(kn_batchnorm(g_s, sm, w3, w3, w1, w2, w4, w3, 2, 3, 5, 1e-5f, 0.1f, 1), BAD,
                 "kn_batchnorm", "x");
    EXPECT_ERROR(kn_batchnorm(g_s, v, w3, w3, w1, w2, w4, w3, 2, 3, 5, 1e-5f, 0.1f, 3), BAD,
                 "kn_batchnorm", "training is 3");
    EXPECT_ERROR(kn_batchnorm_backward(g_s, v, w3, w2, w1, NULL, 0, NULL, 0, NULL, 0, none, 2, 3,
                                       5),
                 BAD, "kn_batchnorm_backward", "none of");
    EXPECT_ERROR(kn_batchnorm_backward(g_s, v, w3, w2, w1, &sm, 0, NULL, 0, NULL, 0, none, 2, 3,
                                       5),
                 BAD, "kn_batchnorm_backward", "dx");
    EXPECT_ERROR(kn_batchnorm_backward(g_s, v, w3, w2, w1, &w2, 0, NULL, 0, NULL, 0, none, 2, 3,
                                       5),
                 BAD, "kn_batchnorm_backward", "overlaps");
    EXPECT_ERROR(kn_batchnorm_backward(g_s, v, w3, w2, w1, NULL, 0, &w4, 0, NULL, 0, none, 2, 0,
                                       5),
                 BAD, "kn_batchnorm_backward", "c (0)");
    /* embedding: ids [4], table [5, 6], y [4, 6] */
    EXPECT_ERROR(kn_embedding(g_s, v, w1, w2, 0, 5, 6), BAD, "kn_embedding", "n (0)");
    EXPECT_ERROR(kn_embedding(g_s, v, w1, w2, 4, 0, 6), BAD, "kn_embedding", "vocab (0)");
    EXPECT_ERROR(kn_embedding(g_s, v, w1, w2, 4, 5, 0), BAD, "kn_embedding", "dim (0)");
    EXPECT_ERROR(kn_embedding(g_s, v, sm, w2, 4, 5, 6), BAD, "kn_embedding", "table");
    EXPECT_ERROR(kn_embedding(g_s, v, w1, sm, 4, 5, 6), BAD, "kn_embedding", "y");
    EXPECT_ERROR(kn_embedding(g_s, v, w1, v, 4, 5, 6), BAD, "kn_embedding", "overlaps");
    EXPECT_ERROR(kn_embedding(g_s, v, w1, w2, 4, (1u << 24) + 1, 1), VKT_ERROR_LIMIT,
                 "kn_embedding", "2^24");
    EXPECT_ERROR(kn_embedding_backward(g_s, v, w1, w2, NAN, 4, 5, 6), BAD,
                 "kn_embedding_backward", "beta");
    EXPECT_ERROR(kn_embedding_backward(g_s, v, w1, sm, 0, 4, 5, 6), BAD,
                 "kn_embedding_backward", "dtable");
    EXPECT_ERROR(kn_embedding_backward(g_s, v, w1, w1, 0, 4, 5, 6), BAD,
                 "kn_embedding_backward", "overlaps");
    EXPECT_ERROR(kn_embedding_backward(g_s, sm, w1, w2, 0, 4, 5, 6), BAD,
                 "kn_embedding_backward", "ids");
    TH_STATUS(NULL, kn_embedding_backward(NULL, v, w1, w2, 0, 4, 5, 6), BAD);
    TH_CHECK(kn_layernorm_workspace_elems(2048, 64) == 0 &&
                 kn_rmsnorm_workspace_elems(2048, 64) == 0 &&
                 kn_batchnorm_workspace_elems(64, 16, 196) == 0,
             "no workspace needed");
    /* Nothing was recorded by the failed calls: the stream still runs. */
    run();
    tb_free(&big);
    vkt_buffer_destroy(small);
}

int main(void)
{
    th_init("test_norm");
    g_ctx = th_context(VKT_KERNELS_AUTO);
    g_s = th_stream(g_ctx, 0);
    test_fd();
    for (g_aligned = 0; g_aligned < 2; g_aligned++) {
        test_layernorm();
        test_rmsnorm();
        test_batchnorm();
        test_embedding();
    }
    g_aligned = 0;
    test_errors();
    /* The other kernel variant's grids, on the same device. */
    th_use_other_variant(&g_ctx, &g_s);
    g_quick = 1;
    for (g_aligned = 0; g_aligned < 2; g_aligned++) {
        test_layernorm();
        test_rmsnorm();
        test_batchnorm();
        test_embedding();
    }
    vkt_stream_destroy(g_s);
    return th_finish();
}
