/* Layer, RMS and batch normalization kernels (engine/kernels/norm.h; the embedding's are
 * test_embedding.c's, the helpers both share norm_case.c's):
 * (1) the double references' backward against central differences of their forward;
 * (2) the device forward and backward against the references on awkward shapes (1s,
 *     primes, rows past llvmpipe's loop budget for one thread), with guard elements
 *     around every output, tensors at odd offsets and again 16-byte aligned (the vec4
 *     paths), beta 0 over NaN-filled outputs and beta 1 accumulation, every subset of the
 *     optional outputs, running averages after two training steps, inference mode;
 * (3) the error paths; (4) a shorter pass with the other kernel variant (the GPU
 *     variant's grids: several threads per row, trees in shared memory). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "norm_case.h"

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

/* The reference backward of the loss (dy = w) into dx, dgamma, dbeta (NULL: not wanted;
 * rmsnorm has no dbeta). */
static void fd_backward(const fd_case *f, double *dx, double *dg, double *db)
{
    if (f->kind == 0)
        kn_ref_layernorm_backward(f->x, f->g, f->w, dx, dg, db, f->a, f->b, f->eps);
    else if (f->kind == 2)
        kn_ref_rmsnorm_backward(f->x, f->g, f->w, dx, dg, f->a, f->b, f->eps);
    else
        kn_ref_batchnorm_backward(f->x, f->g, f->w, dx, dg, db, f->a, f->b, f->c, f->eps);
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
        fd_backward(&f, dx, dg, db);
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
        fd_backward(&f, dx2, NULL, NULL);
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

/* ---- (2) layer and RMS normalization on the device -------------------------------- */

/* Per-row (mean, rstd) in double into st [rows, 2]: layernorm's stats (centred), and the
 * layout backward_tols reads (rmsnorm: mean 0, as it subtracts none). */
static void row_stats(const double *x, uint32_t rows, uint32_t cols, double eps, int centred,
                      double *st)
{
    for (uint32_t r = 0; r < rows; r++) {
        const double *xr = x + (uint64_t)r * cols;
        double s = 0, q = 0;
        if (centred)
            for (uint32_t c = 0; c < cols; c++)
                s += xr[c];
        double mean = s / cols;
        for (uint32_t c = 0; c < cols; c++)
            q += (xr[c] - mean) * (xr[c] - mean);
        st[2 * r] = mean;
        st[2 * r + 1] = 1.0 / sqrt(q / cols + eps);
    }
}

/* The inputs of a layernorm, rmsnorm (st: rstd) or batchnorm backward (dims: rows, cols
 * or n, c, hw), for check_backward_subsets. */
typedef struct norm_inputs {
    const tb *x, *g, *st, *dy;
    const double *xd, *gd, *dyd;
    uint32_t dims[3];
    float eps;
} norm_inputs;

static vkt_status layernorm_forward(vkt_view x, vkt_view g, vkt_view b, vkt_view y,
                                    vkt_view st, uint32_t rows, uint32_t cols, float eps)
{
    return kn_layernorm(g_s, x, g, b, y, st, rows, cols, eps);
}

static void layernorm_reference(const double *xd, const double *gd, const double *bd,
                                double *yd, double *st, uint32_t rows, uint32_t cols, float eps)
{
    kn_ref_layernorm(xd, gd, bd, yd, rows, cols, eps);
    row_stats(xd, rows, cols, eps, 1, st);
}

static void layernorm_backward_call(const void *data, const vkt_view *const out[3],
                                    float beta, double *const want[3])
{
    const norm_inputs *in = data;
    uint32_t rows = in->dims[0], cols = in->dims[1];
    TH_OK(g_ctx, kn_layernorm_backward(g_s, tv(in->x), tv(in->g), tv(in->st), tv(in->dy),
                                       out[0], beta, out[1], beta, out[2], beta,
                                       (vkt_view){NULL, 0}, rows, cols));
    run();
    kn_ref_layernorm_backward(in->xd, in->gd, in->dyd, want[0], want[1], want[2], rows, cols,
                              in->eps);
}

static vkt_status rmsnorm_forward(vkt_view x, vkt_view g, vkt_view b, vkt_view y,
                                  vkt_view rstd, uint32_t rows, uint32_t cols, float eps)
{
    (void)b; /* none */
    return kn_rmsnorm(g_s, x, g, y, rstd, rows, cols, eps);
}

static void rmsnorm_reference(const double *xd, const double *gd, const double *bd,
                              double *yd, double *rstd, uint32_t rows, uint32_t cols, float eps)
{
    (void)bd;
    kn_ref_rmsnorm(xd, gd, yd, rstd, rows, cols, eps);
}

static void rmsnorm_backward_call(const void *data, const vkt_view *const out[3], float beta,
                                  double *const want[3])
{
    const norm_inputs *in = data;
    uint32_t rows = in->dims[0], cols = in->dims[1];
    TH_OK(g_ctx, kn_rmsnorm_backward(g_s, tv(in->x), tv(in->g), tv(in->st), tv(in->dy),
                                     out[0], beta, out[1], beta, (vkt_view){NULL, 0}, rows,
                                     cols));
    run();
    kn_ref_rmsnorm_backward(in->xd, in->gd, in->dyd, want[0], want[1], rows, cols, in->eps);
}

/* What the tests of the two row normalizations differ in: layernorm centres the rows, adds
 * beta [cols] and saves (mean, rstd) a row ("stats"); rmsnorm none of that, rstd a row. */
typedef struct row_kind {
    const char *name, *saved;
    int centred;
    uint32_t saved_per_row, outputs;
    const int *masks; /* the backward's output subsets: bit 0 dx, 1 dgamma, 2 dbeta */
    unsigned n_masks, n_short; /* how many of them: all, and in the short passes */
    vkt_status (*forward)(vkt_view x, vkt_view g, vkt_view b, vkt_view y, vkt_view saved,
                          uint32_t rows, uint32_t cols, float eps);
    void (*reference)(const double *xd, const double *gd, const double *bd, double *yd,
                      double *saved, uint32_t rows, uint32_t cols, float eps);
    void (*backward)(const void *data, const vkt_view *const out[3], float beta,
                     double *const want[3]);
    /* [rows, cols] shapes: full, quick (the other variant's pass), offset (g_offset 10) */
    const uint32_t (*full)[2], (*quick)[2], (*offset)[2];
    unsigned n_full, n_quick, n_offset;
} row_kind;

#define N_OF(a) (unsigned)(sizeof a / sizeof a[0])
/* layernorm: (2049, 64) the typical size, one more row; (3, 6007) long rows, several
 * threads a row on llvmpipe; (20011, 3) more rows than one thread may walk for a column
 * sum. rmsnorm: rows 1, 3, 257, ... by cols 1, 7, 33, 1000, 4097 (none a multiple of 4:
 * the scalar paths), the typical [2049, 64] and [7, 64] (vec4 when aligned), [3, 6007],
 * [20011, 3], [257, 4096] (1M elements, vec4). */
static const uint32_t ln_full[][2] = {{1, 2},  {3, 5},  {2, 1},    {7, 64},  {2049, 64},
                                      {5, 257}, {33, 4}, {1, 12}, {3, 6007}, {20011, 3}};
static const uint32_t ln_quick[][2] = {{3, 5}, {5, 257}, {300, 5}, {3, 2000}, {33, 64}};
static const uint32_t ln_offset[][2] = {{33, 64}, {2, 3001}};
static const uint32_t rms_full[][2] = {{1, 1},    {3, 7},     {257, 33},  {1, 1000}, {3, 4097},
                                       {257, 1},  {2049, 64}, {7, 64},    {33, 4},   {5, 1000},
                                       {3, 6007}, {20011, 3}, {257, 4096}};
static const uint32_t rms_quick[][2] = {{3, 7},    {257, 33}, {300, 5},
                                        {3, 2000}, {33, 64},  {1, 4097}};
static const uint32_t rms_offset[][2] = {{33, 64}};
static const int ln_masks[] = {7, 1, 6, 2, 4, 5}, rms_masks[] = {3, 1, 2};

static const row_kind rk_layernorm = {
    "layernorm", "stats", 1, 2, 3, ln_masks, 6, 2, layernorm_forward, layernorm_reference,
    layernorm_backward_call, ln_full, ln_quick, ln_offset, N_OF(ln_full), N_OF(ln_quick),
    N_OF(ln_offset)};
static const row_kind rk_rmsnorm = {
    "rmsnorm", "rstd", 0, 1, 2, rms_masks, 3, 1, rmsnorm_forward, rmsnorm_reference,
    rmsnorm_backward_call, rms_full, rms_quick, rms_offset, N_OF(rms_full), N_OF(rms_quick),
    N_OF(rms_offset)};

/* The forward (also in place, y over x), then the backward from the device's statistics
 * for the kind's subsets of its outputs, on x [rows, cols]. */
static void test_row_shape(const row_kind *k, uint32_t rows, uint32_t cols)
{
    const float eps = 1e-5f;
    uint64_t n = (uint64_t)rows * cols, ns = (uint64_t)k->saved_per_row * rows;
    char label[96], blabel[112];
    snprintf(label, sizeof label, "%s %ux%u aligned %d", k->name, rows, cols, g_aligned);
    snprintf(blabel, sizeof blabel, "%s_backward %ux%u aligned %d", k->name, rows, cols,
             g_aligned);
    tb x = tb_new(n, g_offset - 2, g_offset + 3), g = tb_new(cols, 0.5f, 1.5f);
    tb b = k->centred ? tb_new(cols, -1, 1) : g; /* rmsnorm: no beta (g stands, unread) */
    tb y = tb_const(n, NAN), st = tb_const(ns, NAN);
    double *xd = to_d(x.h, n), *gd = to_d(g.h, cols), *bd = to_d(b.h, cols);
    double *yd = zeros(n), *sd = zeros(ns), *tst = zeros(2ull * rows);
    row_stats(xd, rows, cols, eps, k->centred, tst);
    TH_OK(g_ctx, k->forward(tv(&x), tv(&g), tv(&b), tv(&y), tv(&st), rows, cols, eps));
    run();
    k->reference(xd, gd, bd, yd, sd, rows, cols, eps);
    expect(&y, yd, 1e-4f, 2e-5f, "%s: y", label);
    expect(&st, sd, 1e-4f, 1e-5f, "%s: %s", label, k->saved);

    tb dy = tb_new(n, -1, 1);
    double *dyd = to_d(dy.h, n);
    tols tol = backward_tols(x.h, dy.h, tst, n, rows, cols, 1, cols);
    norm_inputs in = {&x, &g, &st, &dy, xd, gd, dyd, {rows, cols, 1}, eps};
    backward_case bc = {blabel, n, cols, k->outputs, &tol, k->backward, &in};
    check_backward_subsets(&bc, k->masks, g_quick || n > 100000 ? k->n_short : k->n_masks);
    free(dyd);
    tols_free(&tol);
    tb_free(&dy);

    if (n <= 100000) {
        TH_OK(g_ctx, k->forward(tv(&x), tv(&g), tv(&b), tv(&x), tv(&st), rows, cols, eps));
        run();
        expect(&x, yd, 1e-4f, 2e-5f, "%s: in place", label);
    }
    free(xd);
    free(gd);
    free(bd);
    free(yd);
    free(sd);
    free(tst);
    tb_free(&x);
    tb_free(&g);
    if (k->centred)
        tb_free(&b);
    tb_free(&y);
    tb_free(&st);
}

/* Every shape of the kind's list (the short one in the quick pass), then its shapes with
 * a large common offset (g_offset 10: a mean far from 0, or every x^2 near 100). */
static void test_rows(const row_kind *k)
{
    const uint32_t(*shapes)[2] = g_quick ? k->quick : k->full;
    for (unsigned i = 0; i < (g_quick ? k->n_quick : k->n_full); i++)
        test_row_shape(k, shapes[i][0], shapes[i][1]);
    g_offset = 10;
    for (unsigned i = 0; i < k->n_offset; i++)
        test_row_shape(k, k->offset[i][0], k->offset[i][1]);
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

static void batchnorm_backward_call(const void *data, const vkt_view *const out[3],
                                    float beta, double *const want[3])
{
    const norm_inputs *in = data;
    uint32_t n = in->dims[0], c = in->dims[1], hw = in->dims[2];
    TH_OK(g_ctx, kn_batchnorm_backward(g_s, tv(in->x), tv(in->g), tv(in->st), tv(in->dy),
                                       out[0], beta, out[1], beta, out[2], beta,
                                       (vkt_view){NULL, 0}, n, c, hw));
    run();
    kn_ref_batchnorm_backward(in->xd, in->gd, in->dyd, want[0], want[1], want[2], n, c, hw,
                              in->eps);
}

static void test_batchnorm_shape(uint32_t n, uint32_t c, uint32_t hw)
{
    const float eps = 1e-5f, mom = 0.1f;
    uint64_t total = (uint64_t)n * c * hw;
    char label[64];
    snprintf(label, sizeof label, "%ux%ux%u aligned %d", n, c, hw, g_aligned);
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
        expect(&y, yd, 1e-4f, 5e-5f, "batchnorm %s step %d: y", label, step);
        expect(&st, sd, 1e-4f, 1e-5f, "batchnorm %s step %d: stats", label, step);
        expect(&rm, rmd, 1e-4f, 1e-5f, "batchnorm %s step %d: running_mean", label, step);
        expect(&rv, rvd, 1e-4f, 1e-5f, "batchnorm %s step %d: running_var", label, step);
        free(sd);
    }

    /* Backward (from the second step's stats): subsets and betas as for layernorm. */
    tb dy = tb_new(total, -1, 1);
    double *dyd = to_d(dy.h, total);
    double *bst = bn_stats(x.h, n, c, hw, eps);
    tols tol = backward_tols(x.h, dy.h, bst, total, c, hw, 0, c);
    const int masks[] = {7, 1, 6, 2, 4, 3};
    norm_inputs in = {&x, &g, &st, &dy, xd, gd, dyd, {n, c, hw}, eps};
    char blabel[96];
    snprintf(blabel, sizeof blabel, "batchnorm_backward %s", label);
    backward_case bc = {blabel, total, c, 3, &tol, batchnorm_backward_call, &in};
    check_backward_subsets(&bc, masks, g_quick || total > 100000 ? 2 : 6);
    /* In place: dx over dy itself. */
    {
        double *dxd = zeros(total);
        vkt_view dyv = tv(&dy), ws = {NULL, 0};
        TH_OK(g_ctx, kn_batchnorm_backward(g_s, tv(&x), tv(&g), tv(&st), dyv, &dyv, 0, NULL, 0,
                                           NULL, 0, ws, n, c, hw));
        run();
        kn_ref_batchnorm_backward(xd, gd, dyd, dxd, NULL, NULL, n, c, hw, eps);
        expect_tol(&dy, dxd, tol.dx, "batchnorm_backward %s: dx in place", label);
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
    expect(&y, yd, 1e-4f, 5e-5f, "batchnorm inference %s: y", label);
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
    expect(&y, yd, 1e-4f, 5e-5f, "batchnorm training, running kept, %s: y", label);
    double *sd_keep = bn_stats(x.h, n, c, hw, eps);
    expect(&st, sd_keep, 1e-4f, 1e-5f, "batchnorm training, running kept, %s: stats", label);
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

/* ---- (3) error paths ---------------------------------------------------------------- */

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
    TH_CHECK(kn_layernorm_workspace_elems(2048, 64) == 0 &&
                 kn_rmsnorm_workspace_elems(2048, 64) == 0 &&
                 kn_batchnorm_workspace_elems(64, 16, 196) == 0,
             "no workspace needed");
    /* Nothing was recorded by the failed calls: the stream still runs. */
    run();
    tb_free(&big);
    vkt_buffer_destroy(small);
}

static void test_device(void)
{
    test_rows(&rk_layernorm);
    test_rows(&rk_rmsnorm);
    test_batchnorm();
}

int main(void)
{
    return norm_main("test_norm", test_fd, test_device, test_errors);
}
