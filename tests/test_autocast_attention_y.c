/* test_autocast_attention_y.c - causal attention's saved output y under autocast (fp16 /
 * bf16): where its backward reads y (the flash-style backward's D_i = rowsum(dy_i * y_i):
 * the gpu-style kernels, attention_lowp_flash on lavapipe), the forward keeps y rounded to
 * 16 bits (lp_y, OPF_SAVES_Y16) and the backward widens it exactly and hands it to the
 * unchanged kernel, so the fp32 y dies with its last forward reader. The cpu style
 * (attention_lowp_widen over attention_shuffle) saves the probabilities and never reads
 * y: no copy there, and the same checks hold with r(y) replaced by y.
 * Each case: x = P + Z (an activation) or P, y = causal_attention(x, heads, dropout), loss
 * sum(y * T), T exact in 16 bits (so dy = T), or (proj) z = linear(y, W) and loss
 * sum(z * T), W halves (so dy = T W^T, exact in 16 bits), where lp_y is the linear's 16-bit
 * x (y16_from). Checked:
 *  - y against the double forward of r(P) with the same dropout masks (seed, step, row 0)
 *    within test_attention's fp32 bound;
 *  - dP against the double backward of r(P) whose D is taken from the device's y rounded
 *    (D'_i = sum_c T_ic r(y_ic)): the flash backward's dS_ij = p_ij (dP_ij - D_i), so the
 *    reference is the exact-D backward (ka_ref_attention_backward) plus the rank-one
 *    change of D: dq_i -= s dD_i sum_j p_ij k_j, dk_j -= s sum_i p_ij dD_i q_i (s =
 *    1/sqrt(d), dD_i = D'_i - D_i, p the softmax weights without dropout; dv does not read
 *    D), within the fp32 bound;
 *  - dP against the exact-D backward within that bound plus one rounding of y in D:
 *    |dD_i| <= u sum_c |T_ic y_ic| (u = 2^-8 bf16, 2^-11 fp16), carried through the
 *    rank-one change by |p| and |k|, |q|; and where y is kept rounded the rounding shows
 *    (the distance from the exact-D backward exceeds the fp32 bound somewhere: on lavapipe
 *    up to about 10-25x in fp16, 85-280x in bf16);
 *  - central finite differences of the double loss at r(P) agree with dP within that bound;
 *  - the plan: lp_y is a 16-bit value of B T C elements exactly where the backward reads y,
 *    and with a proj linear after attention (as in the char LM) the fp32 y is dead before
 *    the first backward step; an fp32 model keeps no copy and y lives to the backward. */
#include "harness.h"
#include "graph/model.h"
#include "kernels/attention.h"
#include "kernels/ref.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NO 7 /* the proj's outputs */

typedef struct ycase {
    const char *name;
    uint32_t b, t, heads, d;
    float dropout;
    int direct; /* P itself the attention's input (else P + Z, an activation) */
    int proj;   /* z = linear(y, W), loss sum(z * T): lp_y is the linear's 16-bit x */
} ycase;

static const ycase k_cases[] = {
    {"b2 t13 3x5", 2, 13, 3, 5, 0.0f, 0, 0},
    {"b1 t37 2x8 dropout 0.3", 1, 37, 2, 8, 0.3f, 0, 0},
    {"b2 t9 1x32 dropout 0.1", 2, 9, 1, 32, 0.1f, 0, 0},
    {"b3 t21 2x6 on P", 3, 21, 2, 6, 0.0f, 1, 0},
    {"b2 t19 3x4 proj", 2, 19, 3, 4, 0.0f, 0, 1},
    {"b1 t26 2x8 dropout 0.2 proj", 1, 26, 2, 8, 0.2f, 0, 1},
};

/* Element c of q (which 0), k (1) or v (2) of head h at row r (= bb t + i) of qkv. */
static double at(const double *qkv, uint32_t hd, uint64_t r, uint32_t which, uint32_t h,
                 uint32_t d, uint32_t c)
{
    return qkv[r * 3 * hd + (uint64_t)which * hd + (uint64_t)h * d + c];
}

/* Whether the attention backward reads y (the kernel saves the row logsumexps). */
static int reads_y(vkt_context *ctx, uint32_t b, uint32_t t, uint32_t heads, uint32_t d)
{
    return ka_attention_lowp_fused(ctx) ||
           ka_attention_plan_for(ctx, b, t, heads, d).saved == KA_SAVED_LSE;
}

static double loss_of(const double *qkv, const double *T, double *y, const ycase *c,
                      uint64_t seed, uint64_t step)
{
    uint64_t ny = (uint64_t)c->b * c->t * c->heads * c->d;
    ka_ref_attention(qkv, y, c->b, c->t, c->heads, c->d, c->dropout, seed, 0, step);
    double l = 0;
    for (uint64_t i = 0; i < ny; i++)
        l += y[i] * T[i];
    return l;
}

static void run_case(vkt_context *ctx, const ycase *c, vkt_dtype type)
{
    char what[200];
    int gpu = ctx->profile.style == VKT_KERNELS_GPU;
    snprintf(what, sizeof what, "%s %s %s", c->name, vkt_dtype_name(type), gpu ? "gpu" : "cpu");
    vkt_graph *g = NULL;
    vkt_graph_options go = {13};
    if (!TH_OK(NULL, vkt_graph_create(&go, &g)))
        return;
    uint32_t C = c->heads * c->d, d = c->d, H = c->heads, tt = c->t;
    vkt_shape ps = {3, {c->b, c->t, 3 * C}};
    vkt_init uni = {VKT_INIT_UNIFORM, -2.0f, 2.0f, 0};
    vkt_tensor *p = vkt_param(g, "P", &ps, &uni), *zero = vkt_input(g, "Z", &ps);
    vkt_tensor *y = vkt_causal_attention(g, c->direct ? p : vkt_add(g, p, zero), c->heads,
                                         c->dropout);
    vkt_keep(g, y);
    vkt_shape ys = vkt_tensor_shape(y), zs = {3, {c->b, c->t, NO}}, wsh = {2, {C, NO}};
    vkt_tensor *w = c->proj ? vkt_param(g, "W", &wsh, &uni) : NULL;
    vkt_tensor *z = c->proj ? vkt_linear(g, y, w, NULL) : y;
    vkt_tensor *tg = vkt_input(g, "T", c->proj ? &zs : &ys);
    vkt_tensor *loss = vkt_sum(g, vkt_mul(g, z, tg), -1);
    vkt_model_options mo = {.precision = type};
    vkt_model *m = NULL;
    if (!TH_OK(ctx, vkt_model_create(ctx, g, loss, &mo, &m))) {
        TH_CHECK(0, "%s: %s", what, vkt_last_error());
        vkt_graph_destroy(g);
        return;
    }
    uint64_t np = (uint64_t)c->b * c->t * 3 * C, ny = (uint64_t)c->b * c->t * C;
    uint64_t nz = c->proj ? (uint64_t)c->b * c->t * NO : ny;
    const mnode *nd = &m->node[y->id];
    int copy = reads_y(ctx, c->b, c->t, H, d);
    TH_CHECK(copy ? nd->lp_y >= 0 && m->val[nd->lp_y].dtype == type &&
                        m->val[nd->lp_y].count == (ny * 2 + 3) / 4
                  : nd->lp_y < 0,
             "%s: y kept in 16 bits (%llu elements) exactly where the backward reads it (%d)",
             what, (unsigned long long)ny, copy);
    if (copy)
        TH_CHECK(c->proj ? nd->y16_from == (int32_t)z->id && m->node[z->id].lp_x == nd->lp_y
                         : nd->y16_from < 0,
                 "%s: lp_y %s", what, c->proj ? "is the proj's 16-bit x" : "is its own");
    uint64_t seed = m->t[y->id]->p.attention.seed, step = m->step;
    float *P = th_alloc_floats(np), *T = th_alloc_floats(nz), *Z = th_alloc_floats(np);
    float *Y = th_alloc_floats(ny), *got = th_alloc_floats(np), *W = th_alloc_floats(C * NO);
    th_fill_uniform(P, np, -2, 2);
    for (uint64_t i = 0; i < nz; i++)
        T[i] = (float)((int)(th_rand_u64() % 33) - 16) / 8.0f;
    for (uint32_t i = 0; i < C * NO; i++) /* halves in [-1, 1]: dy = T W^T exact in 16 bits */
        W[i] = (float)((int)(th_rand_u64() % 5) - 2) / 2.0f;
    memset(Z, 0, np * 4);
    TH_OK(ctx, vkt_model_write(m, p, P, np));
    if (w)
        TH_OK(ctx, vkt_model_write(m, w, W, (uint64_t)C * NO));
    TH_OK(ctx, vkt_model_set_input(m, tg, T, nz));
    if (!c->direct)
        TH_OK(ctx, vkt_model_set_input(m, zero, Z, np));
    if (!TH_OK(ctx, vkt_model_forward_backward(m)))
        TH_CHECK(0, "%s: %s", what, vkt_model_errmsg(m));
    TH_OK(ctx, vkt_model_read(m, y, Y, ny));
    TH_OK(ctx, vkt_model_read_grad(m, p, got, np));
    double *pr = calloc(np, 8), *td = calloc(ny, 8), *yw = calloc(ny, 8), *gw = calloc(np, 8);
    double *gr = calloc(np, 8), *tol = calloc(np, 8), *tu = calloc(np, 8);
    double *prob = calloc((uint64_t)c->b * H * tt * tt, 8);
    double *dD = calloc((uint64_t)c->b * H * tt, 8), *bD = calloc((uint64_t)c->b * H * tt, 8);
    for (uint64_t i = 0; i < np; i++)
        pr[i] = kdt_round(type, P[i]);
    for (uint64_t r = 0; r < (uint64_t)c->b * tt; r++) /* dy: T, or T W^T */
        for (uint32_t e = 0; e < C; e++) {
            double v = 0;
            for (uint32_t o = 0; o < NO && c->proj; o++)
                v += (double)T[r * NO + o] * W[(uint64_t)e * NO + o];
            td[r * C + e] = c->proj ? v : T[r * C + e];
        }
    ka_ref_attention(pr, yw, c->b, tt, H, d, c->dropout, seed, 0, step);
    ka_ref_attention_backward(pr, td, gw, c->b, tt, H, d, c->dropout, seed, 0, step);
    ka_ref_attention_probs(pr, prob, c->b, tt, H, d);
    /* y: test_attention's fp32 bound */
    uint64_t bad = 0;
    for (uint64_t i = 0; i < ny; i++)
        bad += !(fabs(Y[i] - yw[i]) <= 1e-4 * fabs(yw[i]) + 1e-5 * (1.0 + tt / 256.0));
    TH_CHECK(bad == 0, "%s: y, %llu of %llu outside the fp32 bound", what,
             (unsigned long long)bad, (unsigned long long)ny);
    /* dD_i: the device's D (from r(y), or y without a copy) less the exact one; bD its
     * one-rounding bound */
    const double u = type == VKT_DTYPE_BF16 ? 1.0 / 256 : 1.0 / 2048, s = 1.0 / sqrt(d);
    for (uint32_t bb = 0; bb < c->b; bb++)
        for (uint32_t h = 0; h < H; h++)
            for (uint32_t i = 0; i < tt; i++) {
                uint64_t r = (uint64_t)bb * tt + i, k = ((uint64_t)bb * H + h) * tt + i;
                for (uint32_t e = 0; e < d; e++) {
                    uint64_t q = r * C + (uint64_t)h * d + e;
                    double yd = copy ? kdt_round(type, Y[q]) : Y[q];
                    dD[k] += td[q] * (yd - yw[q]);
                    bD[k] += u * fabs(td[q] * Y[q]);
                }
            }
    /* gr: the exact-D backward plus the rank-one change; tol: the fp32 bound; tu: plus the
     * change's bound */
    memcpy(gr, gw, np * 8);
    for (uint64_t i = 0; i < np; i++)
        tol[i] = 1e-4 * fabs(gw[i]) + 2e-6 * (tt + 4), tu[i] = tol[i];
    for (uint32_t bb = 0; bb < c->b; bb++)
        for (uint32_t h = 0; h < H; h++)
            for (uint32_t i = 0; i < tt; i++) {
                uint64_t ri = (uint64_t)bb * tt + i, k = ((uint64_t)bb * H + h) * tt + i;
                const double *pi = prob + k * tt;
                for (uint32_t j = 0; j <= i; j++) {
                    uint64_t rj = (uint64_t)bb * tt + j;
                    for (uint32_t e = 0; e < d; e++) {
                        uint64_t dq = ri * 3 * C + (uint64_t)h * d + e, dk = rj * 3 * C + C +
                                                                          (uint64_t)h * d + e;
                        double kj = at(pr, C, rj, 1, h, d, e), qi = at(pr, C, ri, 0, h, d, e);
                        gr[dq] -= s * dD[k] * pi[j] * kj;
                        gr[dk] -= s * dD[k] * pi[j] * qi;
                        tu[dq] += s * bD[k] * pi[j] * fabs(kj);
                        tu[dk] += s * bD[k] * pi[j] * fabs(qi);
                    }
                }
            }
    uint64_t bad_r = 0, bad_u = 0;
    double shows = 0;
    for (uint64_t i = 0; i < np; i++) {
        bad_r += !(fabs(got[i] - gr[i]) <= tol[i]);
        bad_u += !(fabs(got[i] - gw[i]) <= tu[i]);
        shows = fmax(shows, fabs(got[i] - gw[i]) / tol[i]);
    }
    TH_CHECK(bad_r == 0, "%s: dP, %llu of %llu outside the fp32 bound of the backward whose D "
             "reads %s", what, (unsigned long long)bad_r, (unsigned long long)np,
             copy ? "r(y)" : "y");
    TH_CHECK(bad_u == 0, "%s: dP, %llu of %llu further from the exact-D backward than one "
             "16-bit rounding of y in D", what, (unsigned long long)bad_u,
             (unsigned long long)np);
    printf("%s: dP differs from the exact-D backward by up to %.3g of the fp32 bound\n", what,
           shows);
    if (copy)
        TH_CHECK(shows > 1.0, "%s: the rounded y shows in dq, dk (%.3g of the fp32 bound)",
                 what, shows);
    /* central differences of the double loss at r(P), h = 2^-10 */
    uint32_t fd_bad = 0;
    double *yt = calloc(ny, 8);
    for (int k = 0; k < 12; k++) {
        uint64_t e = th_rand_u64() % np;
        double keep = pr[e], hh = 1.0 / 1024;
        pr[e] = keep + hh;
        double lp = loss_of(pr, td, yt, c, seed, step);
        pr[e] = keep - hh;
        double lm = loss_of(pr, td, yt, c, seed, step);
        pr[e] = keep;
        double fd = (lp - lm) / (2 * hh);
        fd_bad += !(fabs(got[e] - fd) <= tu[e] + 1e-4 * fabs(fd) + 1e-5);
    }
    TH_CHECK(fd_bad == 0, "%s: %u of 12 finite differences outside the 16-bit bound", what,
             fd_bad);
    free(yt), free(pr), free(td), free(yw), free(gw), free(gr), free(tol), free(tu);
    free(prob), free(dD), free(bD), free(P), free(T), free(Z), free(Y), free(got), free(W);
    vkt_model_destroy(m);
    vkt_graph_destroy(g);
}

/* The char LM's pattern: x = P + Z, y = attention(x), z = linear(y, W), loss sum(z). Under
 * autocast, where the backward reads y, the fp32 y is dead before the backward (the proj
 * reads its own 16-bit x there); in fp32 no copy, and y lives to the backward. */
static void lifetimes(vkt_context *ctx, vkt_dtype type)
{
    char what[96];
    snprintf(what, sizeof what, "lifetimes %s %s", vkt_dtype_name(type),
             ctx->profile.style == VKT_KERNELS_GPU ? "gpu" : "cpu");
    vkt_graph *g = NULL;
    vkt_graph_options go = {17};
    if (!TH_OK(NULL, vkt_graph_create(&go, &g)))
        return;
    vkt_shape ps = {3, {2, 11, 3 * 12}}, ws = {2, {12, 7}};
    vkt_init uni = {VKT_INIT_UNIFORM, -1.0f, 1.0f, 0};
    vkt_tensor *p = vkt_param(g, "P", &ps, &uni), *zero = vkt_input(g, "Z", &ps);
    vkt_tensor *y = vkt_causal_attention(g, vkt_add(g, p, zero), 3, 0.0f);
    vkt_tensor *z = vkt_linear(g, y, vkt_param(g, "W", &ws, &uni), NULL);
    vkt_model *m = NULL;
    vkt_model_options mo = {.precision = type};
    if (TH_OK(ctx, vkt_model_create(ctx, g, vkt_sum(g, z, -1), &mo, &m))) {
        int copy = type != VKT_DTYPE_FP32 && reads_y(ctx, 2, 11, 3, 4);
        int read = type == VKT_DTYPE_FP32; /* by the fp32 linear's dW, and attention's D */
        const mval *yv = &m->val[model_root(m, m->node[y->id].val)];
        int32_t end = (int32_t)(m->n_fwd_steps * PLAN_PHASES);
        TH_CHECK((m->node[y->id].lp_y >= 0) == copy, "%s: a 16-bit y exactly where read (%d)",
                 what, copy);
        TH_CHECK(!copy || (m->node[y->id].y16_from == (int32_t)z->id &&
                           m->node[z->id].lp_x == m->node[y->id].lp_y),
                 "%s: lp_y is the proj's 16-bit x", what);
        TH_CHECK(read ? yv->last >= end : yv->last < end, "%s: the fp32 y %s the backward "
                 "(last use at position %d, the forward ends at %d)", what,
                 read ? "read by" : "dead before", yv->last, end);
        vkt_model_destroy(m);
    }
    vkt_graph_destroy(g);
}

int main(void)
{
    th_init("test_autocast_attention_y");
    static const char *const styles[] = {"cpu", "gpu"};
    for (int st = 0; st < 2; st++) {
        vkt_context *ctx = th_context_filter(styles[st]);
        for (int t = VKT_DTYPE_FP16; t <= VKT_DTYPE_BF16; t++) {
            for (size_t i = 0; i < sizeof k_cases / sizeof k_cases[0]; i++)
                run_case(ctx, &k_cases[i], (vkt_dtype)t);
            lifetimes(ctx, (vkt_dtype)t);
        }
        lifetimes(ctx, VKT_DTYPE_FP32);
        th_context_release(ctx);
    }
    return th_finish();
}
