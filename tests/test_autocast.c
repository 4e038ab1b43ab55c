/* test_autocast.c - mixed precision (vkt_model_options.precision fp16 / bf16): the autocast
 * rewrite runs every matrix product on operands rounded to 16 bits with fp32 accumulation
 * and keeps the rest fp32. Each case is a small graph over parameters P, W1 (and W2, b)
 * and exact 16-bit targets T1 (T2), loss sum(y1 * T1) [+ sum(y2 * T2)], so the gradient
 * reaching each product is T (times relu's mask), exactly representable: the device's
 * outputs and gradients then have a reference with no rounding ambiguity, computed in
 * double from the rounded operands (kdt_round, the kernels' own rounding):
 *   y1 = r(X) r(W1) (+ b), dW1 = r(X)^T T1, dX = T1 r(W1)^T (+ T2 r(W2)^T), db = sum T1.
 * Tolerance per output, from the precision of the accumulation: the 16-bit operands and
 * their products are exact in fp32, so only the fp32 sums err: (n + 4) 2^-24 S, S the sum
 * of the terms' magnitudes, n their count. The same outputs from the unrounded operands
 * differ by about 2^-11 (fp16) or 2^-8 (bf16) of S: each case also checks that it sees
 * that difference (a rewrite that did nothing would fail). Shapes are primes and 3-D;
 * X is a parameter (its values in the parameter buffer) or an activation (in the arena,
 * its gradient summed from two products: the second adds with beta 1); a linear with a
 * fused relu (linear_act). Both kernel styles: the CPU style's widening GEMM and the GPU
 * style's shared-memory tiling (gemm_f16_float / gemm_bf16_float on lavapipe). The memory
 * plan check runs on every recording (plan_check.c), so the casts' values are covered by
 * the plan. Check mode runs fp32; a precision outside vkt_dtype is refused.
 *
 * Precisions (vkt_precision): vkt_context_precision on lavapipe (fp16 and bf16 as asked;
 * auto fp32, no cooperative matrices), and auto's table on the same context with its
 * variants set as a device with bf16 or only fp16 cooperative matrices would have them; a
 * trainer in fp16 learns, says fp16, and its checkpoint (fp32 masters) resumes in fp32 and
 * bf16 with the same parameters bit for bit.
 *
 * Loss scaling (fp16) and skipping non-finite steps, forced: a start scale of 2^40 makes
 * the rounded gradients overflow; the first step is skipped with the parameters bit for
 * bit unchanged, the scale halves each skip until the gradients fit, then training
 * recovers (the loss falls) and the scale grows again every interval; a limit of 3 skips
 * in a row stops it with VKT_ERROR_DIVERGED; fp32 with nonfinite_skips skips a step fed
 * a NaN and goes on, without it stops as before. Pipeline stages and async replicas:
 * test_scaler_parallel.c. */
#include "harness.h"
#include "scaler_mlp.h"
#include "gpu/gpu.h"
#include "graph/model.h"
#include "kernels/ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define U32 5.9604644775390625e-8 /* 2^-24 */

typedef struct acase {
    const char *name;
    uint32_t lead[3], n_lead; /* X's leading dimensions (rows = their product) */
    uint32_t k, n;
    int bias, relu, via_add, second; /* second: y2 = matmul(X, W2), X 2-D */
} acase;

static vkt_shape shape_of(const uint32_t *lead, uint32_t n_lead, uint32_t last)
{
    vkt_shape s = {n_lead + 1, {0}};
    for (uint32_t d = 0; d < n_lead; d++)
        s.dims[d] = lead[d];
    s.dims[n_lead] = last;
    return s;
}

static void fill_exact(float *x, uint64_t n) /* multiples of 1/8 in [-2, 2]: exact in 16 bits */
{
    for (uint64_t i = 0; i < n; i++)
        x[i] = (float)((int)(th_rand_u64() % 33) - 16) / 8.0f;
}

/* Compares got against the reference `want` with per-element bounds `tol`; returns the
 * largest |got - unrounded| / tol seen (how visible the rounding is). */
static double compare(const char *what, const float *got, const double *want,
                      const double *unrounded, const double *tol, uint64_t n)
{
    double worst = 0, seen = 0;
    uint64_t bad = 0, first = 0;
    for (uint64_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - want[i]);
        if (!(e <= tol[i])) {
            if (!bad++)
                first = i;
        }
        if (e / tol[i] > worst)
            worst = e / tol[i];
        double u = fabs((double)got[i] - unrounded[i]) / tol[i];
        if (u > seen)
            seen = u;
    }
    TH_CHECK(bad == 0, "%s: %llu of %llu outside the bound (first [%llu]: %.9g vs %.9g, bound "
             "%.3g; worst %.3g of the bound)", what, (unsigned long long)bad,
             (unsigned long long)n, (unsigned long long)first, bad ? got[first] : 0.0,
             bad ? want[first] : 0.0, bad ? tol[first] : 0.0, worst);
    return seen;
}

/* C[m,n] = sum_p A(i,p) B(p,j) in double, and S = sum |A B|; A element (i,p) at
 * a[i * as_i + p * as_p], B (p,j) at b[p * bs_p + j * bs_j]. Adds into c and s. */
static void prod(uint32_t m, uint32_t n, uint32_t k, const float *a, uint32_t as_i,
                 uint32_t as_p, const float *b, uint32_t bs_p, uint32_t bs_j, double *c,
                 double *s)
{
    for (uint32_t i = 0; i < m; i++)
        for (uint32_t j = 0; j < n; j++) {
            double sum = 0, mag = 0;
            for (uint32_t p = 0; p < k; p++) {
                double t = (double)a[i * as_i + p * as_p] * b[p * bs_p + j * bs_j];
                sum += t;
                mag += fabs(t);
            }
            c[(uint64_t)i * n + j] += sum;
            s[(uint64_t)i * n + j] += mag;
        }
}

static void rounded(vkt_dtype t, const float *x, float *out, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++)
        out[i] = kdt_round(t, x[i]);
}

/* Runs case c at precision t on ctx; checks y1 and every gradient. */
static void run_case(vkt_context *ctx, const acase *c, vkt_dtype t)
{
    char what[160];
    uint32_t rows = 1;
    for (uint32_t d = 0; d < c->n_lead; d++)
        rows *= c->lead[d];
    const uint32_t k = c->k, n = c->n;
    vkt_graph *g = NULL;
    vkt_graph_options go = {7};
    if (vkt_graph_create(&go, &g) != VKT_OK) {
        TH_CHECK(0, "vkt_graph_create");
        return;
    }
    vkt_shape xs = shape_of(c->lead, c->n_lead, k), ys = shape_of(c->lead, c->n_lead, n);
    vkt_shape ws = {2, {k, n}}, bs = {1, {n}};
    vkt_init uni = {VKT_INIT_UNIFORM, -1.0f, 1.0f, 0};
    vkt_tensor *p = vkt_param(g, "P", &xs, &uni), *w1 = vkt_param(g, "W1", &ws, &uni);
    vkt_tensor *w2 = c->second ? vkt_param(g, "W2", &ws, &uni) : NULL;
    vkt_tensor *b = c->bias ? vkt_param(g, "b", &bs, &uni) : NULL;
    vkt_tensor *t1 = vkt_input(g, "T1", &ys), *t2 = c->second ? vkt_input(g, "T2", &ys) : NULL;
    vkt_tensor *x = p, *zero = NULL;
    if (c->via_add) { /* X in the arena */
        zero = vkt_input(g, "Z", &xs);
        x = vkt_add(g, p, zero);
    }
    vkt_tensor *y1 = c->second ? vkt_matmul(g, x, w1) : vkt_linear(g, x, w1, b);
    if (c->relu)
        y1 = vkt_relu(g, y1);
    vkt_keep(g, y1);
    vkt_tensor *loss = vkt_sum(g, vkt_mul(g, y1, t1), -1);
    if (c->second)
        loss = vkt_add(g, loss, vkt_sum(g, vkt_mul(g, vkt_matmul(g, x, w2), t2), -1));
    vkt_model_options mo = {.precision = t};
    vkt_model *m = NULL;
    snprintf(what, sizeof what, "%s %s", c->name, vkt_dtype_name(t));
    if (!TH_OK(ctx, vkt_model_create(ctx, g, loss, &mo, &m))) {
        TH_CHECK(0, "%s: %s", what, vkt_last_error());
        vkt_graph_destroy(g);
        return;
    }
    uint64_t nx = (uint64_t)rows * k, nw = (uint64_t)k * n, ny = (uint64_t)rows * n;
    float *P = th_alloc_floats(nx), *W1 = th_alloc_floats(nw), *W2 = th_alloc_floats(nw);
    float *B = th_alloc_floats(n), *T1 = th_alloc_floats(ny), *T2 = th_alloc_floats(ny);
    float *Z = th_alloc_floats(nx), *Pr = th_alloc_floats(nx), *W1r = th_alloc_floats(nw);
    float *W2r = th_alloc_floats(nw), *got = th_alloc_floats(nx > nw ? (nx > ny ? nx : ny)
                                                                      : (nw > ny ? nw : ny));
    th_fill_uniform(P, nx, -1, 1);
    th_fill_uniform(W1, nw, -1, 1);
    th_fill_uniform(W2, nw, -1, 1);
    th_fill_uniform(B, n, -1, 1);
    fill_exact(T1, ny);
    fill_exact(T2, ny);
    memset(Z, 0, nx * sizeof *Z);
    TH_OK(ctx, vkt_model_write(m, p, P, nx));
    TH_OK(ctx, vkt_model_write(m, w1, W1, nw));
    if (w2)
        TH_OK(ctx, vkt_model_write(m, w2, W2, nw));
    if (b)
        TH_OK(ctx, vkt_model_write(m, b, B, n));
    TH_OK(ctx, vkt_model_set_input(m, t1, T1, ny));
    if (t2)
        TH_OK(ctx, vkt_model_set_input(m, t2, T2, ny));
    if (zero)
        TH_OK(ctx, vkt_model_set_input(m, zero, Z, nx));
    if (!TH_OK(ctx, vkt_model_forward_backward(m)))
        TH_CHECK(0, "%s: %s", what, vkt_model_errmsg(m));
    rounded(t, P, Pr, nx);
    rounded(t, W1, W1r, nw);
    rounded(t, W2, W2r, nw);

    /* y1 = r(X) r(W1) + b (relu) */
    double *want = calloc(nx + nw + ny, sizeof *want), *mag = calloc(nx + nw + ny, sizeof *mag);
    double *raw = calloc(nx + nw + ny, sizeof *raw), *rmag = calloc(nx + nw + ny, sizeof *rmag);
    double *tol = calloc(nx + nw + ny, sizeof *tol);
    float *g1 = th_alloc_floats(ny);
    prod(rows, n, k, Pr, k, 1, W1r, n, 1, want, mag);
    prod(rows, n, k, P, k, 1, W1, n, 1, raw, rmag);
    for (uint64_t i = 0; i < ny; i++) {
        double bj = b ? B[i % n] : 0;
        want[i] += bj, raw[i] += bj, mag[i] += fabs(bj);
        if (c->relu)
            want[i] = want[i] > 0 ? want[i] : 0, raw[i] = raw[i] > 0 ? raw[i] : 0;
        tol[i] = (k + 4) * U32 * mag[i] + 1e-30;
    }
    TH_OK(ctx, vkt_model_read(m, y1, got, ny));
    char w[200];
    snprintf(w, sizeof w, "%s: y1", what);
    double seen = compare(w, got, want, raw, tol, ny);
    TH_CHECK(seen > 4, "%s: the output is within %.3g bounds of the unrounded product: the "
             "operands were not rounded to %s", what, seen, vkt_dtype_name(t));
    /* the gradient reaching y1's product: T1, times relu's mask from the device's y1 */
    for (uint64_t i = 0; i < ny; i++)
        g1[i] = c->relu && !(got[i] > 0) ? 0.0f : T1[i];

    /* dW1 = r(X)^T g1 (rows summed) */
    memset(want, 0, nw * sizeof *want), memset(mag, 0, nw * sizeof *mag);
    memset(raw, 0, nw * sizeof *raw), memset(rmag, 0, nw * sizeof *rmag);
    prod(k, n, rows, Pr, 1, k, g1, n, 1, want, mag);
    prod(k, n, rows, P, 1, k, g1, n, 1, raw, rmag);
    for (uint64_t i = 0; i < nw; i++)
        tol[i] = (rows + 4) * U32 * mag[i] + 1e-30;
    TH_OK(ctx, vkt_model_read_grad(m, w1, got, nw));
    snprintf(w, sizeof w, "%s: dW1", what);
    seen = compare(w, got, want, raw, tol, nw);
    TH_CHECK(seen > 4, "%s: dW1 is within %.3g bounds of the unrounded product", what, seen);
    if (w2) { /* dW2 = r(X)^T T2 */
        memset(want, 0, nw * sizeof *want), memset(mag, 0, nw * sizeof *mag);
        memset(raw, 0, nw * sizeof *raw), memset(rmag, 0, nw * sizeof *rmag);
        prod(k, n, rows, Pr, 1, k, T2, n, 1, want, mag);
        prod(k, n, rows, P, 1, k, T2, n, 1, raw, rmag);
        for (uint64_t i = 0; i < nw; i++)
            tol[i] = (rows + 4) * U32 * mag[i] + 1e-30;
        TH_OK(ctx, vkt_model_read_grad(m, w2, got, nw));
        snprintf(w, sizeof w, "%s: dW2", what);
        compare(w, got, want, raw, tol, nw);
    }
    /* dX = g1 r(W1)^T (+ T2 r(W2)^T), through the add when X is an activation */
    memset(want, 0, nx * sizeof *want), memset(mag, 0, nx * sizeof *mag);
    memset(raw, 0, nx * sizeof *raw), memset(rmag, 0, nx * sizeof *rmag);
    prod(rows, k, n, g1, n, 1, W1r, 1, n, want, mag);
    prod(rows, k, n, g1, n, 1, W1, 1, n, raw, rmag);
    if (w2) {
        prod(rows, k, n, T2, n, 1, W2r, 1, n, want, mag);
        prod(rows, k, n, T2, n, 1, W2, 1, n, raw, rmag);
    }
    for (uint64_t i = 0; i < nx; i++)
        tol[i] = ((w2 ? 2 : 1) * n + 6) * U32 * mag[i] + 1e-30;
    TH_OK(ctx, vkt_model_read_grad(m, p, got, nx));
    snprintf(w, sizeof w, "%s: dX", what);
    seen = compare(w, got, want, raw, tol, nx);
    TH_CHECK(seen > 4, "%s: dX is within %.3g bounds of the unrounded product", what, seen);
    if (b) { /* db = sum of g1's rows, fp32 (no product) */
        memset(want, 0, n * sizeof *want), memset(mag, 0, n * sizeof *mag);
        for (uint64_t i = 0; i < ny; i++)
            want[i % n] += g1[i], mag[i % n] += fabs(g1[i]);
        for (uint32_t j = 0; j < n; j++)
            tol[j] = (rows + 4) * U32 * mag[j] + 1e-30;
        TH_OK(ctx, vkt_model_read_grad(m, b, got, n));
        snprintf(w, sizeof w, "%s: db", what);
        compare(w, got, want, want, tol, n);
    }
    free(want), free(mag), free(raw), free(rmag), free(tol), free(g1);
    free(P), free(W1), free(W2), free(B), free(T1), free(T2), free(Z), free(Pr), free(W1r);
    free(W2r), free(got);
    vkt_model_destroy(m);
    vkt_graph_destroy(g);
}

static const acase k_cases[] = {
    {"linear 37x19 -> 23, bias", {37}, 1, 19, 23, 1, 0, 0, 0},
    {"linear [3,5,33] -> 7", {3, 5}, 2, 33, 7, 0, 0, 0, 0},
    {"linear+relu 29x17 -> 31, bias, x an activation", {29}, 1, 17, 31, 1, 1, 1, 0},
    {"matmul 17x29 x 29x13 twice, x an activation", {17}, 1, 29, 13, 0, 0, 1, 1},
};

/* The fused linear's saved pre-activation z (gelu cannot take f' from its output) is
 * kept in the product's 16-bit type (kt_bias_act_keep16), 2 bytes an element: that value
 * is 16-bit in the plan, the forward's y = gelu(r(z)) matches the reference from the
 * rounded operands (the product's output rounded before the activation, as PyTorch's
 * autocast does: where the fp32 sums' error could move r(z) by a step, either neighbour's
 * gelu is accepted), and the gradients match dz = round(T gelu'(round(z))) taken through the
 * rounded operands (db from the unrounded dz, fp32), within one 16-bit step of dz per
 * term (the device's fp32 gelu' may round dz the other way) plus the fp32 sums' error. */
static void gelu_keeps_z16(vkt_context *ctx, vkt_dtype t)
{
    const uint32_t rows = 37, k = 19, n = 61;
    char what[96];
    snprintf(what, sizeof what, "linear+gelu %ux%u -> %u, z kept in %s", rows, k, n,
             vkt_dtype_name(t));
    vkt_graph *g = NULL;
    vkt_graph_options go = {11};
    if (!TH_OK(ctx, vkt_graph_create(&go, &g)))
        return;
    vkt_shape xs = {2, {rows, k}}, ws = {2, {k, n}}, bs = {1, {n}}, ys = {2, {rows, n}};
    vkt_init uni = {VKT_INIT_UNIFORM, -1.0f, 1.0f, 0};
    vkt_tensor *x = vkt_param(g, "X", &xs, &uni), *w = vkt_param(g, "W", &ws, &uni);
    vkt_tensor *b = vkt_param(g, "b", &bs, &uni), *tt = vkt_input(g, "T", &ys);
    vkt_tensor *y = vkt_gelu(g, vkt_linear(g, x, w, b));
    vkt_keep(g, y);
    vkt_tensor *loss = vkt_sum(g, vkt_mul(g, y, tt), -1);
    vkt_model_options mo = {.precision = t};
    vkt_model *m = NULL;
    if (!TH_OK(ctx, vkt_model_create(ctx, g, loss, &mo, &m))) {
        vkt_graph_destroy(g);
        return;
    }
    uint32_t found = 0;
    for (uint32_t i = 0; i < m->n; i++)
        if (m->node[i].aux >= 0 && m->t[i]->op == GOP_LINEAR_ACT) {
            found++;
            TH_CHECK(m->val[m->node[i].aux].dtype == t &&
                         m->val[m->node[i].aux].count == ((uint64_t)rows * n * 2 + 3) / 4,
                     "%s: z is a value of type %d and %llu words", what,
                     (int)m->val[m->node[i].aux].dtype,
                     (unsigned long long)m->val[m->node[i].aux].count);
        }
    TH_CHECK(found == 1, "%s: %u fused linears save z", what, found);
    /* W a parameter: the backward rounds it again (lp_wb), the forward's copy dies there */
    const mnode *ln = &m->node[y->id];
    int32_t fwd_end = (int32_t)(m->n_fwd_steps * PLAN_PHASES);
    TH_CHECK(ln->lp_w >= 0 && ln->lp_wb >= 0 && m->val[ln->lp_wb].dtype == t &&
                 m->val[model_root(m, ln->lp_w)].last < fwd_end &&
                 m->val[model_root(m, ln->lp_wb)].first >= fwd_end,
             "%s: the 16-bit W of the forward dies in it, the backward rounds W again", what);
    uint64_t nx = (uint64_t)rows * k, nw = (uint64_t)k * n, ny = (uint64_t)rows * n;
    float *X = th_alloc_floats(nx), *W = th_alloc_floats(nw), *B = th_alloc_floats(n);
    float *T = th_alloc_floats(ny), *Xr = th_alloc_floats(nx), *Wr = th_alloc_floats(nw);
    float *dz = th_alloc_floats(ny), *got = th_alloc_floats(nx > nw ? (nx > ny ? nx : ny)
                                                                  : (nw > ny ? nw : ny));
    th_fill_uniform(X, nx, -1, 1);
    th_fill_uniform(W, nw, -1, 1);
    th_fill_uniform(B, n, -1, 1);
    fill_exact(T, ny);
    TH_OK(ctx, vkt_model_write(m, x, X, nx));
    TH_OK(ctx, vkt_model_write(m, w, W, nw));
    TH_OK(ctx, vkt_model_write(m, b, B, n));
    TH_OK(ctx, vkt_model_set_input(m, tt, T, ny));
    if (!TH_OK(ctx, vkt_model_forward_backward(m)))
        TH_CHECK(0, "%s: %s", what, vkt_model_errmsg(m));
    rounded(t, X, Xr, nx);
    rounded(t, W, Wr, nw);
    uint64_t most = nx > nw ? (nx > ny ? nx : ny) : (nw > ny ? nw : ny);
    double *want = calloc(most, sizeof *want), *mag = calloc(most, sizeof *mag);
    double *tol = calloc(most, sizeof *tol), *z = calloc(ny, sizeof *z);
    double *zmag = calloc(ny, sizeof *zmag), *dzmag = calloc(most, sizeof *dzmag);
    double *scratch = calloc(most, sizeof *scratch);
    TH_CHECK(want && mag && tol && z && zmag && dzmag && scratch, "out of memory");
    /* y = gelu(z), z = r(X) r(W) + b */
    prod(rows, n, k, Xr, k, 1, Wr, n, 1, z, zmag);
    double step = t == VKT_DTYPE_BF16 ? 1.0 / 128 : 1.0 / 1024; /* one 16-bit step, relative */
    for (uint64_t i = 0; i < ny; i++) {
        z[i] += B[i % n], zmag[i] += fabs(B[i % n]);
        float zr = kdt_round(t, (float)z[i]);
        double e = 1.2 * (k + 4) * U32 * zmag[i]; /* the device's fp32 sum, off by e at most */
        want[i] = kref_unary_f(VKT_UNARY_GELU, 0, zr);
        tol[i] = fabs((double)kref_unary_f(VKT_UNARY_GELU, 0, kdt_round(t, (float)(z[i] + e))) -
                      kref_unary_f(VKT_UNARY_GELU, 0, kdt_round(t, (float)(z[i] - e)))) +
                 1e-6 * fabs(want[i]) + 1e-7;
        double g = T[i] * (double)kref_unary_df(VKT_UNARY_GELU, 0, zr);
        scratch[i] = g; /* unrounded dz: db sums it */
        dz[i] = kdt_round(t, (float)g);
    }
    TH_OK(ctx, vkt_model_read(m, y, got, ny));
    char w2[160];
    snprintf(w2, sizeof w2, "%s: y", what);
    compare(w2, got, want, want, tol, ny);
    /* db = column sums of the unrounded dz (fp32, from the 16-bit z) */
    double *db = calloc(n, sizeof *db), *dbm = calloc(n, sizeof *dbm);
    for (uint64_t i = 0; i < ny; i++)
        db[i % n] += scratch[i], dbm[i % n] += fabs(scratch[i]);
    for (uint32_t j = 0; j < n; j++)
        tol[j] = (rows + 4) * U32 * dbm[j] + 1e-5 * dbm[j] + 1e-7;
    TH_OK(ctx, vkt_model_read_grad(m, b, got, n));
    snprintf(w2, sizeof w2, "%s: db", what);
    compare(w2, got, db, db, tol, n);
    /* dW = r(X)^T dz: each term within one step of dz */
    memset(want, 0, nw * sizeof *want), memset(mag, 0, nw * sizeof *mag);
    prod(k, n, rows, Xr, 1, k, dz, n, 1, want, mag);
    for (uint64_t i = 0; i < nw; i++)
        tol[i] = (rows + 4) * U32 * mag[i] + step * mag[i] + 1e-7;
    TH_OK(ctx, vkt_model_read_grad(m, w, got, nw));
    snprintf(w2, sizeof w2, "%s: dW", what);
    compare(w2, got, want, want, tol, nw);
    /* dX = dz r(W)^T */
    memset(want, 0, nx * sizeof *want), memset(mag, 0, nx * sizeof *mag);
    prod(rows, k, n, dz, n, 1, Wr, 1, n, want, mag);
    for (uint64_t i = 0; i < nx; i++)
        tol[i] = (n + 6) * U32 * mag[i] + step * mag[i] + 1e-7;
    TH_OK(ctx, vkt_model_read_grad(m, x, got, nx));
    snprintf(w2, sizeof w2, "%s: dX", what);
    compare(w2, got, want, want, tol, nx);
    free(db), free(dbm), free(want), free(mag), free(tol), free(z), free(zmag), free(dzmag);
    free(scratch), free(X), free(W), free(B), free(T), free(Xr), free(Wr), free(dz), free(got);
    vkt_model_destroy(m);
    vkt_graph_destroy(g);
}

/* An MLP, x -> linear+gelu (fc1) -> linear (fc2): fc2's backward rebuilds its 16-bit x
 * from fc1's 16-bit z (lp_xb, r(gelu(widen(z16)))), so the forward's 16-bit x dies in the
 * forward; its gradients are bit for bit those of the same model with fc2's x kept (an
 * identity scale between the two: fc2's x is then no fused activation's output and its
 * forward's 16-bit copy waits for the backward). */
static uint64_t mlp_rebuild_run(vkt_context *ctx, vkt_dtype t, int keep, float *out[5],
                                const float *const in[6])
{
    const uint32_t rows = 29, k = 13, h = 41, n = 7; /* odd counts: half words */
    char what[96];
    snprintf(what, sizeof what, "mlp %s, fc2's x %s", vkt_dtype_name(t),
             keep ? "kept" : "rebuilt");
    vkt_graph *g = NULL;
    vkt_graph_options go = {5};
    if (!TH_OK(ctx, vkt_graph_create(&go, &g)))
        return 0;
    vkt_shape xs = {2, {rows, k}}, w1s = {2, {k, h}}, b1s = {1, {h}}, w2s = {2, {h, n}};
    vkt_shape b2s = {1, {n}}, ys = {2, {rows, n}};
    vkt_init uni = {VKT_INIT_UNIFORM, -1.0f, 1.0f, 0};
    vkt_tensor *x = vkt_param(g, "X", &xs, &uni), *w1 = vkt_param(g, "W1", &w1s, &uni);
    vkt_tensor *b1 = vkt_param(g, "b1", &b1s, &uni), *w2 = vkt_param(g, "W2", &w2s, &uni);
    vkt_tensor *b2 = vkt_param(g, "b2", &b2s, &uni), *tt = vkt_input(g, "T", &ys);
    vkt_tensor *a = vkt_gelu(g, vkt_linear(g, x, w1, b1));
    vkt_tensor *y = vkt_linear(g, keep ? vkt_scale(g, a, 1.0f) : a, w2, b2);
    vkt_tensor *loss = vkt_sum(g, vkt_mul(g, y, tt), -1);
    vkt_model_options mo = {.precision = t};
    vkt_model *m = NULL;
    if (!TH_OK(ctx, vkt_model_create(ctx, g, loss, &mo, &m))) {
        vkt_graph_destroy(g);
        return 0;
    }
    const mnode *fc2 = &m->node[y->id];
    int32_t fwd_end = (int32_t)(m->n_fwd_steps * PLAN_PHASES);
    if (keep)
        TH_CHECK(fc2->lp_xb < 0 && fc2->lp_x >= 0 &&
                     m->val[model_root(m, fc2->lp_x)].last >= fwd_end,
                 "%s: the forward's 16-bit x lives to the backward", what);
    else
        TH_CHECK(fc2->lp_xb >= 0 && fc2->lp_x >= 0 && m->val[fc2->lp_xb].dtype == t &&
                     m->val[model_root(m, fc2->lp_x)].last < fwd_end &&
                     m->val[model_root(m, fc2->lp_xb)].first >= fwd_end,
                 "%s: the forward's 16-bit x dies in the forward, the backward rebuilds it",
                 what);
    vkt_tensor *p[5] = {x, w1, b1, w2, b2};
    const uint64_t cnt[6] = {rows * k, k * h, h, h * n, n, rows * n};
    for (int i = 0; i < 5; i++)
        TH_OK(ctx, vkt_model_write(m, p[i], in[i], cnt[i]));
    TH_OK(ctx, vkt_model_set_input(m, tt, in[5], cnt[5]));
    if (!TH_OK(ctx, vkt_model_forward_backward(m)))
        TH_CHECK(0, "%s: %s", what, vkt_model_errmsg(m));
    for (int i = 0; i < 5; i++)
        TH_OK(ctx, vkt_model_read_grad(m, p[i], out[i], cnt[i]));
    vkt_model_destroy(m);
    vkt_graph_destroy(g);
    return fwd_end > 0;
}

static void mlp_rebuilds_x16(vkt_context *ctx, vkt_dtype t)
{
    const uint64_t cnt[6] = {29 * 13, 13 * 41, 41, 41 * 7, 7, 29 * 7};
    float *in[6], *a[5], *b[5];
    for (int i = 0; i < 6; i++) {
        in[i] = th_alloc_floats(cnt[i]);
        th_fill_uniform(in[i], cnt[i], i == 2 ? -3 : -1.5f, i == 2 ? 3 : 1.5f);
    }
    for (int i = 0; i < 5; i++)
        a[i] = th_alloc_floats(cnt[i]), b[i] = th_alloc_floats(cnt[i]);
    const float *const *cin = (const float *const *)in;
    if (mlp_rebuild_run(ctx, t, 0, a, cin) && mlp_rebuild_run(ctx, t, 1, b, cin)) {
        const char *names[5] = {"dX", "dW1", "db1", "dW2", "db2"};
        for (int i = 0; i < 5; i++)
            TH_CHECK(memcmp(a[i], b[i], cnt[i] * sizeof(float)) == 0,
                     "mlp %s: %s with fc2's x rebuilt is bit for bit the kept x's",
                     vkt_dtype_name(t), names[i]);
    }
    for (int i = 0; i < 6; i++)
        free(in[i]);
    for (int i = 0; i < 5; i++)
        free(a[i]), free(b[i]);
}

/* Check mode compares with the fp32 reference: it runs the products in fp32. A precision
 * outside vkt_dtype is refused naming it. */
static void check_mode_and_errors(vkt_context *ctx)
{
    vkt_graph *g = NULL;
    vkt_graph_options go = {3};
    if (vkt_graph_create(&go, &g) != VKT_OK)
        return;
    vkt_shape xs = {2, {5, 7}}, ws = {2, {7, 3}};
    vkt_init uni = {VKT_INIT_UNIFORM, -1.0f, 1.0f, 0};
    vkt_tensor *x = vkt_input(g, "x", &xs), *w = vkt_param(g, "w", &ws, &uni);
    vkt_tensor *y = vkt_keep(g, vkt_matmul(g, x, w));
    vkt_tensor *loss = vkt_sum(g, y, -1);
    float X[35], W[21], Y[15];
    th_fill_uniform(X, 35, -1, 1);
    vkt_model_options mo = {.precision = VKT_DTYPE_FP16, .check = 1};
    vkt_model *m = NULL;
    if (TH_OK(ctx, vkt_model_create(ctx, g, loss, &mo, &m))) {
        TH_OK(ctx, vkt_model_set_input(m, x, X, 35));
        TH_OK(ctx, vkt_model_read(m, w, W, 21));
        TH_OK(ctx, vkt_model_forward_backward(m));
        TH_OK(ctx, vkt_model_read(m, y, Y, 15));
        double worst = 0;
        for (int i = 0; i < 5; i++)
            for (int j = 0; j < 3; j++) {
                double s = 0, mag = 0;
                for (int p = 0; p < 7; p++)
                    s += (double)X[i * 7 + p] * W[p * 3 + j],
                        mag += fabs((double)X[i * 7 + p] * W[p * 3 + j]);
                double e = fabs(Y[i * 3 + j] - s) / (11 * U32 * mag + 1e-30);
                worst = e > worst ? e : worst;
            }
        TH_CHECK(worst <= 1, "check mode: the product is fp32 (%.3g of the fp32 bound)", worst);
        vkt_model_destroy(m);
    }
    mo = (vkt_model_options){.precision = (vkt_dtype)7};
    TH_STATUS(ctx, vkt_model_create(ctx, g, loss, &mo, &m), VKT_ERROR_INVALID_ARGUMENT);
    TH_CHECK(strstr(vkt_last_error(), "precision 7") != NULL, "the message names it: %s",
             vkt_last_error());
    vkt_graph_destroy(g);
}

/* The dtype table through the public API. */
static void names(void)
{
    static const struct { const char *name; vkt_dtype t; size_t size; } rows[] = {
        {"fp32", VKT_DTYPE_FP32, 4}, {"F32", VKT_DTYPE_FP32, 4}, {"fp16", VKT_DTYPE_FP16, 2},
        {"F16", VKT_DTYPE_FP16, 2},  {"bf16", VKT_DTYPE_BF16, 2}, {"BF16", VKT_DTYPE_BF16, 2}};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        vkt_dtype t = VKT_DTYPE_COUNT;
        TH_CHECK(vkt_dtype_from_name(rows[i].name, &t) == VKT_OK && t == rows[i].t &&
                     vkt_dtype_size(t) == rows[i].size,
                 "vkt_dtype_from_name(%s)", rows[i].name);
    }
    vkt_dtype t = VKT_DTYPE_FP32;
    TH_CHECK(vkt_dtype_from_name("fp8", &t) == VKT_ERROR_INVALID_ARGUMENT &&
                 strstr(vkt_last_error(), "'fp8'") != NULL,
             "fp8 refused naming it: %s", vkt_last_error());
    TH_CHECK(vkt_dtype_from_name(NULL, &t) == VKT_ERROR_INVALID_ARGUMENT, "NULL refused");
}

static void precisions(vkt_context *ctx)
{
    static const struct { const char *name; vkt_precision p; } names[] = {
        {"fp32", VKT_PRECISION_FP32}, {"fp16", VKT_PRECISION_FP16},
        {"bf16", VKT_PRECISION_BF16}, {"auto", VKT_PRECISION_AUTO}};
    for (int i = 0; i < 4; i++) {
        vkt_precision p = VKT_PRECISION_COUNT;
        TH_CHECK(vkt_precision_from_name(names[i].name, &p) == VKT_OK && p == names[i].p &&
                     strcmp(vkt_precision_name(p), names[i].name) == 0,
                 "precision %s", names[i].name);
    }
    vkt_precision bad;
    TH_CHECK(vkt_precision_from_name("fp8", &bad) == VKT_ERROR_INVALID_ARGUMENT &&
                 strstr(vkt_last_error(), "'fp8'"), "fp8 refused: %s", vkt_last_error());
    vkt_dtype d = VKT_DTYPE_COUNT;
    char why[256];
    TH_OK(ctx, vkt_context_precision(ctx, VKT_PRECISION_FP16, &d, why, sizeof why));
    TH_CHECK(d == VKT_DTYPE_FP16 && strstr(why, "as asked"), "fp16: %d (%s)", (int)d, why);
    TH_OK(ctx, vkt_context_precision(ctx, VKT_PRECISION_BF16, &d, why, sizeof why));
    TH_CHECK(d == VKT_DTYPE_BF16, "bf16: %d (%s)", (int)d, why);
    TH_STATUS(ctx, vkt_context_precision(ctx, (vkt_precision)9, &d, why, sizeof why),
              VKT_ERROR_INVALID_ARGUMENT);
    /* auto: the context's variants decide (lavapipe: no cooperative matrices) */
    gpu_variant f16 = ctx->kv[GPU_FAMILY_GEMM_F16], bf16 = ctx->kv[GPU_FAMILY_GEMM_BF16];
    TH_OK(ctx, vkt_context_precision(ctx, VKT_PRECISION_AUTO, &d, why, sizeof why));
    if (f16 != GPU_V_GEMM_F16_COOPMAT && bf16 != GPU_V_GEMM_BF16_COOPMAT)
        TH_CHECK(d == VKT_DTYPE_FP32 && strstr(why, "no 16-bit product runs on cooperative"),
                 "auto without cooperative matrices: fp32 (%s)", why);
    ctx->kv[GPU_FAMILY_GEMM_BF16] = GPU_V_GEMM_BF16_COOPMAT; /* as a device with both has */
    ctx->kv[GPU_FAMILY_GEMM_F16] = GPU_V_GEMM_F16_COOPMAT;
    TH_OK(ctx, vkt_context_precision(ctx, VKT_PRECISION_AUTO, &d, why, sizeof why));
    TH_CHECK(d == VKT_DTYPE_BF16 && strstr(why, "bf16 products run on cooperative"),
             "auto with bf16 matrices: bf16 (%s)", why);
    ctx->kv[GPU_FAMILY_GEMM_BF16] = GPU_V_GEMM_BF16_FLOAT; /* fp16 matrices only */
    TH_OK(ctx, vkt_context_precision(ctx, VKT_PRECISION_AUTO, &d, why, sizeof why));
    TH_CHECK(d == VKT_DTYPE_FP16 && strstr(why, "loss scaling"), "auto with fp16 matrices "
             "only: fp16 (%s)", why);
    ctx->kv[GPU_FAMILY_GEMM_F16] = f16;
    ctx->kv[GPU_FAMILY_GEMM_BF16] = bf16;
}

/* A small MLP trained in fp16; its checkpoint resumes in fp32 and bf16. */
static vkt_trainer *trainer_in(scaler_mlp *n, vkt_precision p, vkt_dtype want)
{
    vkt_trainer_options o = {.batch = 16, .precision = p};
    o.optimizer.kind = VKT_OPTIMIZER_ADAM;
    o.optimizer.lr = 0.01f;
    vkt_trainer *t = NULL;
    if (!TH_CHECK(vkt_trainer_create(th_instance, n->g, n->loss, &o, &t) == VKT_OK,
                  "trainer %s: %s", vkt_precision_name(p), vkt_last_error()))
        return NULL;
    vkt_dtype d = VKT_DTYPE_COUNT;
    char why[256] = "";
    TH_CHECK(vkt_trainer_precision(t, &d, why, sizeof why) == VKT_OK && d == want,
             "the trainer says %s (%s), %s asked", vkt_dtype_name(d), why, vkt_dtype_name(want));
    return t;
}

static void trainer_resumes(void)
{
    scaler_mlp n;
    scaler_mlp_make(&n);
    vkt_feed f[2] = {{n.x, n.X}, {n.y, n.Y}};
    vkt_trainer *t = trainer_in(&n, VKT_PRECISION_FP16, VKT_DTYPE_FP16);
    if (!t) {
        vkt_graph_destroy(n.g);
        return;
    }
    float first = 0, last = 0;
    for (int s = 0; s < 30; s++)
        TH_OK(NULL, vkt_trainer_step(t, f, 2, s == 0 ? &first : &last));
    TH_CHECK(last < 0.5f * first, "fp16 training learns: loss %.4f -> %.4f", first, last);
    char dir[512], path[600];
    th_temp_dir("autocast", dir, sizeof dir);
    snprintf(path, sizeof path, "%s/ckpt", dir);
    TH_OK(NULL, vkt_trainer_save(t, path));
    uint64_t count = vkt_trainer_param_count(t); /* with the layout's alignment gaps */
    float *want = th_alloc_floats(count), *got = th_alloc_floats(count);
    TH_OK(NULL, vkt_trainer_read_params(t, want, count));
    static const vkt_precision again[] = {VKT_PRECISION_FP32, VKT_PRECISION_BF16};
    for (int i = 0; i < 2; i++) {
        vkt_trainer *u = trainer_in(&n, again[i], (vkt_dtype)again[i]);
        if (!u)
            continue;
        TH_OK(NULL, vkt_trainer_restore(u, path));
        TH_OK(NULL, vkt_trainer_read_params(u, got, count));
        TH_CHECK(memcmp(got, want, count * sizeof *got) == 0 &&
                     vkt_trainer_step_count(u) == 30,
                 "the fp16 run's checkpoint resumes in %s: the same fp32 masters, step 30",
                 vkt_precision_name(again[i]));
        float l = 0;
        TH_OK(NULL, vkt_trainer_step(u, f, 2, &l));
        TH_CHECK(l < 0.5f * first, "and trains on in %s: loss %.4f",
                 vkt_precision_name(again[i]), l);
        vkt_trainer_destroy(u);
    }
    free(want);
    free(got);
    vkt_trainer_destroy(t);
    th_remove_tree(dir);
    vkt_graph_destroy(n.g);
}

static vkt_trainer *scaled_trainer(scaler_mlp *n, vkt_precision p, float scale,
                                   uint32_t interval, uint32_t skips)
{
    vkt_trainer_options o = {.batch = 16, .precision = p, .loss_scale = scale,
                             .loss_scale_interval = interval, .nonfinite_skips = skips};
    o.optimizer.kind = VKT_OPTIMIZER_ADAM;
    o.optimizer.lr = 0.01f;
    vkt_trainer *t = NULL;
    TH_CHECK(vkt_trainer_create(th_instance, n->g, n->loss, &o, &t) == VKT_OK, "trainer: %s",
             vkt_last_error());
    return t;
}

static void scaler(void)
{
    scaler_mlp n;
    scaler_mlp_make(&n);
    vkt_feed f[2] = {{n.x, n.X}, {n.y, n.Y}}, fnan[2] = {{n.x, n.Xnan}, {n.y, n.Y}};
    vkt_trainer *t = scaled_trainer(&n, VKT_PRECISION_FP16, 1099511627776.0f /* 2^40 */, 4, 0);
    if (t) {
        uint64_t count = vkt_trainer_param_count(t), skipped = 0;
        float *before = th_alloc_floats(count), *after = th_alloc_floats(count), scale = 0;
        TH_OK(NULL, vkt_trainer_read_params(t, before, count));
        float loss = 0, first = 0;
        TH_OK(NULL, vkt_trainer_step(t, f, 2, &first));
        TH_OK(NULL, vkt_trainer_read_params(t, after, count));
        TH_OK(NULL, vkt_trainer_skipped(t, &skipped, &scale));
        TH_CHECK(skipped == 1 && scale == 549755813888.0f &&
                     memcmp(before, after, count * sizeof *after) == 0,
                 "2^40 overflows: the step skipped (%llu), never applied, the scale halved (%g)",
                 (unsigned long long)skipped, (double)scale);
        uint64_t s = 1;
        for (; s < 60 && skipped == s; s++) /* skips until the gradients fit */
            if (TH_OK(NULL, vkt_trainer_step(t, f, 2, &loss)))
                vkt_trainer_skipped(t, &skipped, &scale);
        TH_CHECK(skipped >= 10 && skipped < 32 && scale >= 1024.0f,
                 "halved to a scale that fits: %llu skipped, scale %g",
                 (unsigned long long)skipped, (double)scale);
        float fit = scale;
        for (int k = 0; k < 40; k++)
            TH_OK(NULL, vkt_trainer_step(t, f, 2, &loss));
        uint64_t total = 0;
        TH_OK(NULL, vkt_trainer_skipped(t, &total, &scale));
        TH_CHECK(loss < 0.5f * first, "it recovers and learns: loss %.4f -> %.4f", first, loss);
        TH_CHECK(total - skipped <= 11,
                 "then at most one overflow per growth (40 steps, interval 4): %llu more",
                 (unsigned long long)(total - skipped));
        TH_CHECK(scale >= fit / 2, "the scale keeps near where it fits: %g then %g", (double)fit,
                 (double)scale);
        printf("loss scaling from 2^40: %llu skipped to scale %g, then %llu more in 40 steps "
               "(interval 4), scale %g; loss %.4f -> %.4f\n", (unsigned long long)skipped,
               (double)fit, (unsigned long long)(total - skipped), (double)scale, first, loss);
        free(before);
        free(after);
        vkt_trainer_destroy(t);
    }
    /* two sync replicas: the update goes in with the next step's submission, so each
     * verdict comes a step late; they skip alike and recover */
    {
        uint32_t two[2] = {0, 0};
        vkt_trainer_options o = {.batch = 16, .precision = VKT_PRECISION_FP16,
                                 .loss_scale = 1099511627776.0f, .loss_scale_interval = 4,
                                 .devices = two, .device_count = 2};
        o.optimizer.kind = VKT_OPTIMIZER_ADAM;
        o.optimizer.lr = 0.01f;
        vkt_trainer *u = NULL;
        if (TH_CHECK(vkt_trainer_create(th_instance, n.g, n.loss, &o, &u) == VKT_OK,
                     "2 replicas: %s", vkt_last_error())) {
            uint64_t count = vkt_trainer_param_count(u), skipped = 0;
            float *before = th_alloc_floats(count), *after = th_alloc_floats(count);
            float first = 0, loss = 0, scale = 0;
            TH_OK(NULL, vkt_trainer_read_params(u, before, count));
            TH_OK(NULL, vkt_trainer_step(u, f, 2, &first));
            TH_OK(NULL, vkt_trainer_read_params(u, after, count)); /* runs the pending one */
            TH_OK(NULL, vkt_trainer_skipped(u, &skipped, &scale));
            TH_CHECK(skipped == 1 && !memcmp(before, after, count * sizeof *after),
                     "2 replicas: the overflowed step skipped (%llu), never applied",
                     (unsigned long long)skipped);
            for (int k = 0; k < 70; k++)
                TH_OK(NULL, vkt_trainer_step(u, f, 2, &loss));
            TH_OK(NULL, vkt_trainer_skipped(u, &skipped, &scale));
            TH_CHECK(skipped >= 10 && skipped < 50 && loss < 0.5f * first,
                     "2 replicas recover: %llu skipped, scale %g, loss %.4f -> %.4f",
                     (unsigned long long)skipped, (double)scale, first, loss);
            printf("2 sync replicas from 2^40: %llu skipped in 71 steps, scale %g, loss %.4f -> "
                   "%.4f\n", (unsigned long long)skipped, (double)scale, first, loss);
            free(before);
            free(after);
        }
        vkt_trainer_destroy(u);
    }
    /* the limit: 3 skips in a row allowed, the 4th stops training */
    t = scaled_trainer(&n, VKT_PRECISION_FP16, 1099511627776.0f, 0, 3);
    if (t) {
        vkt_status st = VKT_OK;
        int k = 0;
        for (; k < 6 && st == VKT_OK; k++)
            st = vkt_trainer_step(t, f, 2, NULL);
        TH_CHECK(st == VKT_ERROR_DIVERGED && k == 4 &&
                     strstr(vkt_trainer_errmsg(t), "4 steps in a row") &&
                     strstr(vkt_trainer_errmsg(t), "non-finite gradients"),
                 "the 4th skip in a row stops it (step %d, %s): %s", k, vkt_status_name(st),
                 vkt_trainer_errmsg(t));
        vkt_trainer_destroy(t);
    }
    /* fp32: a NaN step skipped with nonfinite_skips, fatal without */
    t = scaled_trainer(&n, VKT_PRECISION_FP32, 0, 0, 2);
    if (t)
        scaler_mlp_nan_step(t, &n, "one replica");
    vkt_trainer_destroy(t);
    t = scaled_trainer(&n, VKT_PRECISION_FP32, 0, 0, 0);
    if (t) {
        vkt_status st = vkt_trainer_step(t, fnan, 2, NULL);
        TH_CHECK(st == VKT_ERROR_DIVERGED && strstr(vkt_trainer_errmsg(t), "the loss is"),
                 "fp32 without skipping: a NaN loss stops training as before (%s: %s)",
                 vkt_status_name(st), vkt_trainer_errmsg(t));
        vkt_trainer_destroy(t);
    }
    vkt_graph_destroy(n.g);
}

int main(void)
{
    th_init("test_autocast");
    names();
    static const char *const styles[] = {"cpu", "gpu"};
    for (int st = 0; st < 2; st++) {
        vkt_context *ctx = th_context_filter(styles[st]);
        for (int t = VKT_DTYPE_FP16; t <= VKT_DTYPE_BF16; t++)
            for (size_t i = 0; i < sizeof k_cases / sizeof k_cases[0]; i++)
                run_case(ctx, &k_cases[i], (vkt_dtype)t);
        for (int t = VKT_DTYPE_FP16; t <= VKT_DTYPE_BF16; t++)
            gelu_keeps_z16(ctx, (vkt_dtype)t), mlp_rebuilds_x16(ctx, (vkt_dtype)t);
        if (st == 0) {
            check_mode_and_errors(ctx);
            precisions(ctx);
        }
        th_context_release(ctx);
    }
    trainer_resumes();
    scaler();
    return th_finish();
}
