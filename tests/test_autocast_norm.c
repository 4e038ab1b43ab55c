/* test_autocast_norm.c - layer and RMS normalization under autocast (fp16 / bf16): they
 * compute in fp32 but keep their input x for the backward as a 16-bit copy (lp_x,
 * OPF_SAVES_X16), which the backward widens exactly and hands to the fp32 kernel with the
 * fp32 statistics the forward saved. Each case is x = P + Q (an activation, Q zero), y =
 * norm(x) with gamma (and beta), loss sum(y * T), T exact in 16 bits, on awkward shapes,
 * both kernel styles and both types. Checked:
 *  - the plan: lp_x is a 16-bit value of rows x cols elements, and the fp32 x is dead
 *    before the first backward step (the residual stream's saving); an fp32 model keeps
 *    no copy;
 *  - y against the double forward of the unrounded x, within the fp32 sums' error;
 *  - dx (dP), dgamma, dbeta against the double backward with x-hat = (r(x) - mean) rstd
 *    (RMS: r(x) rstd), mean and rstd from the unrounded x: within E = (cols + 8) 2^-24 of
 *    the terms' magnitudes (the fp32 statistics and sums), and the difference from the
 *    unrounded backward within one 16-bit rounding of x (2^-11 fp16, 2^-8 bf16, relative)
 *    and visible (a backward that read the fp32 x would not show it);
 *  - a central finite difference of the double loss for a sample of x and gamma elements
 *    agrees with the device's gradient within that 16-bit bound. */
#include "harness.h"
#include "graph/model.h"
#include "kernels/ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define U32 5.9604644775390625e-8 /* 2^-24 */

typedef struct ncase {
    const char *name;
    uint32_t lead[2], n_lead, cols;
    int rms;
} ncase;

static const ncase k_cases[] = {
    {"layer_norm 37x19", {37}, 1, 19, 0},
    {"layer_norm [3,5,33]", {3, 5}, 2, 33, 0},
    {"rms_norm 29x23", {29}, 1, 23, 1},
};

/* The double forward of one row and, from xr (the rounded x) with x's statistics, its
 * backward: dx, and adds dy * xh into dg and dy into db. Returns the row's loss. */
static double row_ref(const ncase *c, const float *x, const float *xr, const float *gm,
                      const float *bt, const float *dy, double *dx, double *dg, double *db,
                      double *xh_out, double *rstd_out)
{
    uint32_t n = c->cols;
    double mean = 0, var = 0, loss = 0;
    for (uint32_t j = 0; j < n; j++)
        mean += x[j];
    mean = c->rms ? 0 : mean / n;
    for (uint32_t j = 0; j < n; j++)
        var += (x[j] - mean) * (x[j] - mean);
    double rstd = 1 / sqrt(var / n + 1e-5);
    for (uint32_t j = 0; j < n; j++)
        loss += ((x[j] - mean) * rstd * gm[j] + (c->rms ? 0 : bt[j])) * dy[j];
    double mg = 0, mgx = 0;
    for (uint32_t j = 0; j < n; j++) {
        xh_out[j] = (xr[j] - mean) * rstd;
        mg += dy[j] * gm[j] / n;
        mgx += dy[j] * gm[j] * xh_out[j] / n;
    }
    for (uint32_t j = 0; j < n; j++) {
        dx[j] = rstd * (dy[j] * gm[j] - (c->rms ? 0 : mg) - xh_out[j] * mgx);
        dg[j] += dy[j] * xh_out[j];
        db[j] += dy[j];
    }
    *rstd_out = rstd;
    return loss;
}

static double loss_ref(const ncase *c, uint32_t rows, const float *x, const float *gm,
                       const float *bt, const float *T)
{
    uint32_t n = c->cols;
    double *s = calloc(5 * (size_t)n, sizeof *s), l = 0, r;
    for (uint32_t i = 0; s && i < rows; i++)
        l += row_ref(c, x + (size_t)i * n, x + (size_t)i * n, gm, bt, T + (size_t)i * n, s,
                     s + n, s + 2 * n, s + 3 * n, &r);
    free(s);
    return l;
}

/* Counts the elements outside |got - want| <= tol; *seen: the largest |got - other| / tol. */
static uint64_t outside(const float *got, const double *want, const double *tol, uint64_t n,
                        const double *other, double *seen)
{
    uint64_t bad = 0;
    for (uint64_t i = 0; i < n; i++) {
        bad += !(fabs(got[i] - want[i]) <= tol[i]);
        if (other && fabs(got[i] - other[i]) / tol[i] > *seen)
            *seen = fabs(got[i] - other[i]) / tol[i];
    }
    return bad;
}

static void run_case(vkt_context *ctx, const ncase *c, vkt_dtype t)
{
    char what[128];
    snprintf(what, sizeof what, "%s in %s", c->name, vkt_dtype_name(t));
    uint32_t rows = 1, n = c->cols;
    for (uint32_t d = 0; d < c->n_lead; d++)
        rows *= c->lead[d];
    uint64_t nx = (uint64_t)rows * n;
    vkt_graph *g = NULL;
    vkt_graph_options go = {5};
    if (!TH_OK(ctx, vkt_graph_create(&go, &g)))
        return;
    vkt_shape xs = {c->n_lead + 1, {c->lead[0], c->lead[1]}}, cs = {1, {n}};
    xs.dims[c->n_lead] = n;
    vkt_init uni = {VKT_INIT_UNIFORM, -1.0f, 1.0f, 0};
    vkt_tensor *p = vkt_param(g, "P", &xs, &uni), *q = vkt_param(g, "Q", &xs, &uni);
    vkt_tensor *gm = vkt_param(g, "gamma", &cs, &uni), *bt = c->rms ? NULL
                                                                     : vkt_param(g, "beta", &cs, &uni);
    vkt_tensor *tt = vkt_input(g, "T", &xs), *x = vkt_add(g, p, q);
    vkt_tensor *y = c->rms ? vkt_rms_norm(g, x, gm, 0) : vkt_layer_norm(g, x, gm, bt, 0);
    vkt_keep(g, y);
    vkt_tensor *loss = vkt_sum(g, vkt_mul(g, y, tt), -1);
    vkt_model *m = NULL;
    if (!TH_OK(ctx, vkt_model_create(ctx, g, loss, &(vkt_model_options){.precision = t}, &m))) {
        vkt_graph_destroy(g);
        return;
    }
    const mnode *nd = &m->node[y->id];
    const mval *xv = &m->val[model_root(m, m->node[x->id].val)];
    TH_CHECK(nd->lp_x >= 0 && m->val[nd->lp_x].dtype == t &&
                 m->val[nd->lp_x].count == (nx * 2 + 3) / 4,
             "%s: x kept as a 16-bit value of %llu elements", what, (unsigned long long)nx);
    TH_CHECK(xv->last < (int32_t)(m->n_fwd_steps * PLAN_PHASES), "%s: the fp32 x is dead "
             "before the backward (last use at position %d, the forward ends at %u)", what,
             xv->last, m->n_fwd_steps * PLAN_PHASES);
    float *X = th_alloc_floats(nx), *Z = th_alloc_floats(nx), *T = th_alloc_floats(nx);
    float *Xr = th_alloc_floats(nx), *G = th_alloc_floats(n), *B = th_alloc_floats(n);
    float *got = th_alloc_floats(nx);
    th_fill_uniform(X, nx, -2.0f, 3.0f);
    th_fill_uniform(G, n, -1.5f, 1.5f);
    th_fill_uniform(B, n, -1.0f, 1.0f);
    for (uint64_t i = 0; i < nx; i++) /* multiples of 1/8 in [-2, 2]: exact in 16 bits */
        T[i] = (float)((int)(th_rand_u64() % 33) - 16) / 8.0f, Xr[i] = kdt_round(t, X[i]);
    TH_OK(ctx, vkt_model_write(m, p, X, nx));
    memset(Z, 0, nx * sizeof *Z);
    TH_OK(ctx, vkt_model_write(m, q, Z, nx)); /* zeros: x = P exactly */
    TH_OK(ctx, vkt_model_write(m, gm, G, n));
    if (bt)
        TH_OK(ctx, vkt_model_write(m, bt, B, n));
    TH_OK(ctx, vkt_model_set_input(m, tt, T, nx));
    if (!TH_OK(ctx, vkt_model_forward_backward(m)))
        TH_CHECK(0, "%s: %s", what, vkt_model_errmsg(m));
    /* references: rounded (r) and unrounded (u) x-hat in the backward */
    double *dxr = calloc(nx, sizeof *dxr), *dxu = calloc(nx, sizeof *dxu);
    double *tx = calloc(nx, sizeof *tx), *tu = calloc(nx, sizeof *tu);
    double *yw = calloc(nx, sizeof *yw), *ty = calloc(nx, sizeof *ty);
    double *dgr = calloc(n, sizeof *dgr), *dgu = calloc(n, sizeof *dgu), *db = calloc(n, 8);
    double *db2 = calloc(n, 8), *tg = calloc(n, 8), *tgu = calloc(n, 8), *tb = calloc(n, 8);
    double *xh = calloc(n, 8), *xhu = calloc(n, 8);
    const double E = (n + 8) * U32, u = t == VKT_DTYPE_BF16 ? 1.0 / 256 : 1.0 / 2048;
    for (uint32_t i = 0; i < rows; i++) {
        const float *xi = X + (size_t)i * n, *di = T + (size_t)i * n;
        double rstd, mg = 0, mgx = 0, mgux = 0;
        row_ref(c, xi, Xr + (size_t)i * n, G, B, di, dxr + (size_t)i * n, dgr, db, xh, &rstd);
        row_ref(c, xi, xi, G, B, di, dxu + (size_t)i * n, dgu, db2, xhu, &rstd);
        double mx = 0; /* mean |x|: the scale of the fp32 mean's error */
        for (uint32_t j = 0; j < n; j++)
            mx += fabs(xi[j]) / n;
        for (uint32_t j = 0; j < n; j++) {
            double a = (fabs(xi[j]) + 2 * mx) * rstd; /* bounds |x-hat|'s terms */
            mg += fabs(di[j] * G[j]) / n;
            mgx += fabs(di[j] * G[j]) * a / n;
            mgux += fabs(di[j] * G[j]) * fabs(xi[j]) * rstd * u / n;
        }
        for (uint32_t j = 0; j < n; j++) {
            size_t k = (size_t)i * n + j;
            double a = (fabs(xi[j]) + 2 * mx) * rstd, gj = fabs(T[k] * G[j]);
            yw[k] = xhu[j] * G[j] + (c->rms ? 0 : B[j]);
            ty[k] = 4 * E * (a * fabs(G[j]) + fabs(B[j])) + 1e-7;
            tx[k] = 4 * E * rstd * (gj + mg + 2 * a * mgx) + 1e-6 * fabs(dxr[k]) + 1e-7;
            /* one 16-bit rounding of x moves x-hat_j by at most d = |x_j| rstd u and
             * mean(g x-hat) by at most mgux = mean |g| d */
            double d = fabs(xi[j]) * rstd * u;
            tu[k] = tx[k] + rstd * (d * (mgx + mgux) + a * mgux);
            tg[j] += 4 * E * fabs(T[k]) * a;
            tgu[j] += fabs(T[k]) * fabs(xi[j]) * rstd * u;
            tb[j] += (rows + 4) * U32 * fabs(T[k]);
        }
    }
    for (uint32_t j = 0; j < n; j++)
        tg[j] += 1e-7, tgu[j] += tg[j], tb[j] += 1e-7;
    double seen = 0, seen_g = 0;
    TH_OK(ctx, vkt_model_read(m, y, got, nx));
    uint64_t bad = outside(got, yw, ty, nx, NULL, NULL);
    TH_CHECK(bad == 0, "%s: y, %llu of %llu outside the fp32 bound", what,
             (unsigned long long)bad, (unsigned long long)nx);
    TH_OK(ctx, vkt_model_read_grad(m, p, got, nx));
    bad = outside(got, dxr, tx, nx, dxu, &seen);
    TH_CHECK(bad == 0, "%s: dx, %llu of %llu outside E of the backward from r(x)", what,
             (unsigned long long)bad, (unsigned long long)nx);
    bad = outside(got, dxu, tu, nx, NULL, NULL);
    TH_CHECK(bad == 0, "%s: dx, %llu of %llu further from the unrounded backward than one "
             "16-bit rounding of x", what, (unsigned long long)bad, (unsigned long long)nx);
    float *fd_dx = th_alloc_floats(nx);
    memcpy(fd_dx, got, nx * sizeof *got);
    TH_OK(ctx, vkt_model_read_grad(m, gm, got, n));
    bad = outside(got, dgr, tg, n, dgu, &seen_g);
    TH_CHECK(bad == 0, "%s: dgamma, %llu of %u outside E of the backward from r(x)", what,
             (unsigned long long)bad, n);
    bad = outside(got, dgu, tgu, n, NULL, NULL);
    TH_CHECK(bad == 0, "%s: dgamma, %llu of %u further from the unrounded backward than one "
             "16-bit rounding of x", what, (unsigned long long)bad, n);
    printf("%s: dx, dgamma differ from the unrounded backward by up to %.3g, %.3g of the "
           "fp32 bound\n", what, seen, seen_g);
    TH_CHECK(seen > 1 || seen_g > 1, "%s: the 16-bit x is visible in the gradients (largest "
             "difference from the unrounded backward %.3g, %.3g of the fp32 bound)", what,
             seen, seen_g);
    if (bt) {
        float *gb = th_alloc_floats(n);
        TH_OK(ctx, vkt_model_read_grad(m, bt, gb, n));
        bad = outside(gb, db, tb, n, NULL, NULL);
        TH_CHECK(bad == 0, "%s: dbeta, %llu of %u outside the fp32 bound", what,
                 (unsigned long long)bad, n);
        free(gb);
    }
    /* central differences of the double loss, h = 2^-10: error O(h^2) */
    uint32_t fd_bad = 0;
    for (int s = 0; s < 12; s++) {
        int on_g = s >= 8;
        uint64_t k = on_g ? th_rand_u64() % n : th_rand_u64() % nx;
        float *v = on_g ? G : X, keep = v[k];
        const double h = 1.0 / 1024;
        v[k] = keep + (float)h;
        double lp = loss_ref(c, rows, X, G, B, T);
        v[k] = keep - (float)h;
        double lm = loss_ref(c, rows, X, G, B, T);
        v[k] = keep;
        double fd = (lp - lm) / (2 * h), dev = on_g ? got[k] : fd_dx[k];
        double tol = (on_g ? tgu[k] : tu[k]) + 1e-4 * fabs(fd) + 1e-6;
        fd_bad += !(fabs(dev - fd) <= tol);
    }
    TH_CHECK(fd_bad == 0, "%s: %u of 12 finite differences outside the 16-bit bound", what,
             fd_bad);
    free(fd_dx), free(dxr), free(dxu), free(tx), free(tu), free(yw), free(ty), free(dgr);
    free(dgu), free(db), free(db2), free(tg), free(tgu), free(tb), free(xh), free(xhu);
    free(X), free(Z), free(T), free(Xr), free(G), free(B), free(got);
    vkt_model_destroy(m);
    vkt_graph_destroy(g);
}

/* In fp32 no norm keeps a copy, and x lives to the backward. */
static void fp32_keeps_x(vkt_context *ctx)
{
    vkt_graph *g = NULL;
    vkt_graph_options go = {5};
    if (!TH_OK(ctx, vkt_graph_create(&go, &g)))
        return;
    vkt_shape xs = {2, {7, 9}}, cs = {1, {9}};
    vkt_init uni = {VKT_INIT_UNIFORM, -1.0f, 1.0f, 0};
    vkt_tensor *p = vkt_param(g, "P", &xs, &uni), *x = vkt_add(g, p, p);
    vkt_tensor *y = vkt_layer_norm(g, x, vkt_param(g, "g", &cs, &uni),
                                   vkt_param(g, "b", &cs, &uni), 0);
    vkt_model *m = NULL;
    if (TH_OK(ctx, vkt_model_create(ctx, g, vkt_sum(g, y, -1), NULL, &m))) {
        const mval *xv = &m->val[model_root(m, m->node[x->id].val)];
        TH_CHECK(m->node[y->id].lp_x < 0 && xv->last >= (int32_t)(m->n_fwd_steps * PLAN_PHASES),
                 "fp32: no 16-bit copy, x read by the norm's backward");
        vkt_model_destroy(m);
    }
    vkt_graph_destroy(g);
}

int main(void)
{
    th_init("test_autocast_norm");
    static const char *const styles[] = {"cpu", "gpu"};
    for (int st = 0; st < 2; st++) {
        vkt_context *ctx = th_context_filter(styles[st]);
        for (int t = VKT_DTYPE_FP16; t <= VKT_DTYPE_BF16; t++)
            for (size_t i = 0; i < sizeof k_cases / sizeof k_cases[0]; i++)
                run_case(ctx, &k_cases[i], (vkt_dtype)t);
        if (st == 0)
            fp32_keeps_x(ctx);
        th_context_release(ctx);
    }
    return th_finish();
}
