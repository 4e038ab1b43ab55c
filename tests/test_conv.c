/* Convolution and pooling kernels (engine/kernels/conv.h) on awkward geometries:
 * (a) the double reference backward against central differences of the reference forward
 *     (loss = sum of y * g for a random g, so the differences are exact up to rounding),
 * (b) the device forward against the reference, every output in guarded buffers,
 * (c) the device backward (dx, dw, db together and alone) against the reference, with
 *     beta 0 over NaN-filled outputs and beta 1 over random contents,
 * (d) the error paths: bad geometry, workspace too small, a sample too large.
 * Each convolution check runs for every conv variant, forced through the kernel filter:
 * conv_im2col with gemm_texel (the CPU style), conv_implicit (the GPU style), conv_im2col
 * with gemm_tile (a GPU that cannot run conv_implicit); conv_implicit also with every
 * tile row of its plan forced, its weight gradient split and not. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "gpu/gpu.h"
#include "kernels/conv.h"

static vkt_context *g_ctx;
static vkt_stream *g_s;

/* ---- buffers -------------------------------------------------------------------- */

/* A device tensor and its host copy (float for the device, double for the references). */
typedef struct tensor {
    th_buf b;
    uint64_t n;
    float *f;
    double *d;
} tensor;

/* 1: element 0 at a 64-element boundary (the kernels' vec4 paths); 0: th_buf's odd
 * offsets. */
static int g_aligned;

static th_buf new_buf(uint64_t n)
{
    return g_aligned ? th_buf_create_at(g_ctx, n, 64) : th_buf_create(g_ctx, n);
}

/* Uniform values in [lo, hi), on the device and the host. */
static tensor tensor_new(uint64_t n, float lo, float hi)
{
    tensor t = {new_buf(n), n, th_alloc_floats(n), calloc(n, sizeof(double))};
    th_fill_uniform(t.f, n, lo, hi);
    for (uint64_t i = 0; i < n; i++)
        t.d[i] = t.f[i];
    th_buf_write(&t.b, t.f);
    return t;
}

/* Copies the host doubles (as floats) to the device. */
static void tensor_upload(tensor *t)
{
    for (uint64_t i = 0; i < t->n; i++)
        t->f[i] = (float)t->d[i];
    th_buf_write(&t->b, t->f);
}

/* Fills the device copy with NaN: an output written with beta 0 must not read it. */
static void tensor_poison(tensor *t)
{
    float *nan_ = th_alloc_floats(t->n);
    for (uint64_t i = 0; i < t->n; i++)
        nan_[i] = NAN;
    th_buf_write(&t->b, nan_);
    free(nan_);
}

static void tensor_free(tensor *t)
{
    th_buf_destroy(&t->b);
    free(t->f);
    free(t->d);
}

/* The device contents against `want` (doubles), then the guards. */
static void expect(tensor *t, const double *want, const char *what, float rtol, float atol)
{
    float *got = th_alloc_floats(t->n), *w = th_alloc_floats(t->n);
    for (uint64_t i = 0; i < t->n; i++)
        w[i] = (float)want[i];
    th_buf_read(&t->b, got);
    th_compare(what, got, w, t->n, rtol, atol);
    th_buf_guards_ok(&t->b, what);
    free(got);
    free(w);
}

static void run(void)
{
    TH_OK(g_ctx, vkt_stream_run(g_s));
    TH_OK(g_ctx, vkt_stream_reset(g_s));
}

static vkt_view view(const tensor *t) { return th_view(&t->b); }

/* ---- convolution ------------------------------------------------------------------ */

typedef struct conv_case {
    const char *name;
    kc_conv g;
    int bias;
    uint64_t max_elems; /* 0: the whole batch fits; else the workspace limit (chunks) */
    int aligned;
} conv_case;

#define GEOM(n_, c_, h_, w_, oc_, kh_, kw_, sh_, sw_, ph_, pw_, dh_, dw_, gr_)            \
    {.n = n_, .c = c_, .h = h_, .w = w_, .oc = oc_, .kh = kh_, .kw = kw_, .stride_h = sh_, \
     .stride_w = sw_, .pad_h = ph_, .pad_w = pw_, .dil_h = dh_, .dil_w = dw_, .groups = gr_}

static const conv_case k_cases[] = {
    {"batch 1, 3x3 pad 1", GEOM(1, 3, 7, 9, 5, 3, 3, 1, 1, 1, 1, 1, 1, 1), 1, 0, 0},
    {"kh != kw, stride 2x1, pad 0x2, no bias", GEOM(3, 5, 11, 8, 4, 3, 2, 2, 1, 0, 2, 1, 1, 1),
     0, 0, 0},
    {"dilation 2, pad 2, groups 2", GEOM(2, 6, 9, 10, 4, 3, 3, 1, 1, 2, 2, 2, 2, 2), 1, 0, 0},
    {"depthwise x2, stride 2", GEOM(3, 7, 8, 7, 14, 3, 3, 2, 2, 1, 1, 1, 1, 7), 1, 0, 0},
    {"1x1, c 13 -> 1", GEOM(2, 13, 5, 3, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1), 1, 0, 0},
    {"5x5 stride 3 dilation 1x2", GEOM(1, 2, 13, 17, 3, 5, 5, 3, 3, 2, 1, 1, 2, 1), 0, 0, 0},
    /* 2 samples per chunk: chunks of 2, 2, 1 */
    {"chunked", GEOM(5, 2, 6, 5, 3, 2, 2, 1, 1, 0, 1, 1, 1, 1), 1, 2 * 30 * (3 + 8) + 8, 0},
    /* the MNIST CNN's second layer, smaller batch, aligned (vec4 moves and GEMM reads) */
    {"16 -> 32 3x3 on 14x14, aligned", GEOM(2, 16, 14, 14, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1), 1,
     0, 1},
    {"16 -> 32 3x3 on 14x14, odd offsets, chunked",
     GEOM(3, 16, 14, 14, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1), 1, 196 * (32 + 144) + 8, 0},
};

/* sum of y * gy over the reference forward */
static double conv_loss(const kc_conv *g, const double *x, const double *w, const double *b,
                        const double *gy, double *y, uint64_t ny)
{
    kc_ref_conv2d(g, x, w, b, y);
    double l = 0.0;
    for (uint64_t i = 0; i < ny; i++)
        l += y[i] * gy[i];
    return l;
}

/* Central differences of conv_loss along up to 12 random elements of v (one of x, w, b)
 * against the reference gradient `grad`. */
static void fd_check(const char *what, const kc_conv *g, double *x, double *w, double *b,
                     const double *gy, double *v, uint64_t n, const double *grad, uint64_t ny)
{
    double *y = calloc(ny, sizeof *y), eps = 1e-3, worst = 0.0;
    for (int k = 0; k < 12; k++) {
        uint64_t i = th_rand_u64() % n;
        double keep = v[i];
        v[i] = keep + eps;
        double lp = conv_loss(g, x, w, b, gy, y, ny);
        v[i] = keep - eps;
        double lm = conv_loss(g, x, w, b, gy, y, ny);
        v[i] = keep;
        double fd = (lp - lm) / (2 * eps), err = fabs(fd - grad[i]) / (1.0 + fabs(grad[i]));
        if (err > worst)
            worst = err;
    }
    TH_CHECK(worst < 1e-8, "%s: reference gradient vs central differences: rel err %.3g", what,
             worst);
    free(y);
}

typedef struct conv_data {
    kc_conv g;
    uint64_t nx, nw, ny, ws_elems;
    tensor x, w, b, y, gy, ws;
} conv_data;

static void conv_backward_case(const conv_case *cs, conv_data *t);

/* conv2d + relu fused (kc_conv2d_act, kc_conv2d_backward_act): the output is relu of the
 * reference forward (t->y.d); the backward equals the plain reference backward of dy
 * masked by the device's output > 0 (its sign decides near 0), with every gradient. */
static void conv_relu_case(const conv_case *cs, conv_data *t)
{
    const kc_conv *g = &t->g;
    tensor y = tensor_new(t->ny, 0, 0), dx = tensor_new(t->nx, 0, 0);
    tensor dw = tensor_new(t->nw, 0, 0), db = tensor_new(g->oc, 0, 0);
    tensor_poison(&y);
    vkt_view bv = view(&t->b), yv = view(&y), v[3] = {view(&dx), view(&dw), view(&db)};
    TH_OK(g_ctx, kc_conv2d_act(g_s, g, view(&t->x), view(&t->w), cs->bias ? &bv : NULL, 1, yv,
                               view(&t->ws), t->ws_elems));
    tensor *out[3] = {&dx, &dw, &db};
    for (int i = 0; i < 3; i++)
        tensor_poison(out[i]);
    TH_OK(g_ctx, kc_conv2d_backward_act(g_s, g, view(&t->x), view(&t->w), view(&t->gy), &yv,
                                        &v[0], 0.0f, &v[1], 0.0f, cs->bias ? &v[2] : NULL, 0.0f,
                                        view(&t->ws), t->ws_elems));
    run();
    double *want = calloc(t->ny, sizeof *want), *gy = calloc(t->ny, sizeof *gy);
    float *got = th_alloc_floats(t->ny);
    th_buf_read(&y.b, got);
    for (uint64_t i = 0; i < t->ny; i++) {
        want[i] = t->y.d[i] > 0 ? t->y.d[i] : 0.0;
        gy[i] = got[i] > 0.0f ? t->gy.d[i] : 0.0;
    }
    char what[160];
    snprintf(what, sizeof what, "conv + relu forward, %s", cs->name);
    expect(&y, want, what, 1e-4f, 1e-5f);
    kc_ref_conv2d_backward(g, t->x.d, t->w.d, gy, dx.d, dw.d, db.d);
    const char *names[3] = {"dx", "dw", "db"};
    for (int i = 0; i < (cs->bias ? 3 : 2); i++) {
        snprintf(what, sizeof what, "conv + relu backward %s, %s", names[i], cs->name);
        expect(out[i], out[i]->d, what, 1e-4f, 2e-5f);
    }
    free(want);
    free(gy);
    free(got);
    for (int i = 0; i < 3; i++)
        tensor_free(out[i]);
    tensor_free(&y);
}

static void conv_case_run(const conv_case *cs)
{
    conv_data t = {.g = cs->g};
    kc_conv *g = &t.g;
    char msg[256] = "";
    if (!TH_CHECK(kc_conv_init(g, msg, sizeof msg) == VKT_OK, "%s: init: %s", cs->name, msg))
        return;
    g_aligned = cs->aligned;
    t.nx = (uint64_t)g->n * g->c * g->h * g->w;
    t.nw = (uint64_t)g->oc * (g->c / g->groups) * g->kh * g->kw;
    t.ny = (uint64_t)g->n * g->oc * g->oh * g->ow;
    uint64_t full = kc_conv_workspace_elems(g, UINT64_MAX);
    t.ws_elems = kc_conv_workspace_elems(g, cs->max_elems ? cs->max_elems : UINT64_MAX);
    TH_CHECK(full > 0 && t.ws_elems > 0 && (cs->max_elems ? t.ws_elems < full : 1),
             "%s: workspace %llu of %llu", cs->name, (unsigned long long)t.ws_elems,
             (unsigned long long)full);
    t.x = tensor_new(t.nx, -1, 1);
    t.w = tensor_new(t.nw, -1, 1);
    t.b = tensor_new(g->oc, -1, 1);
    t.y = tensor_new(t.ny, 0, 0);
    t.gy = tensor_new(t.ny, -1, 1);
    t.ws = tensor_new(t.ws_elems, 0, 0);
    tensor_poison(&t.y);
    vkt_view bv = view(&t.b);
    TH_OK(g_ctx, kc_conv2d(g_s, g, view(&t.x), view(&t.w), cs->bias ? &bv : NULL, view(&t.y),
                           view(&t.ws), t.ws_elems));
    run();
    kc_ref_conv2d(g, t.x.d, t.w.d, cs->bias ? t.b.d : NULL, t.y.d);
    char what[160];
    snprintf(what, sizeof what, "conv forward, %s", cs->name);
    expect(&t.y, t.y.d, what, 1e-4f, 1e-5f);
    th_buf_guards_ok(&t.ws.b, "workspace");
    conv_relu_case(cs, &t);
    conv_backward_case(cs, &t);
    tensor *all[6] = {&t.x, &t.w, &t.b, &t.y, &t.gy, &t.ws};
    for (int i = 0; i < 6; i++)
        tensor_free(all[i]);
    g_aligned = 0;
}

/* Reference gradients (accumulated into zeros) and their finite-difference check. */
static void ref_grads(const conv_case *cs, conv_data *t, double *dx, double *dw, double *db)
{
    kc_ref_conv2d_backward(&t->g, t->x.d, t->w.d, t->gy.d, dx, dw, db);
    char what[160];
    double *b = cs->bias ? t->b.d : NULL;
    snprintf(what, sizeof what, "dx, %s", cs->name);
    fd_check(what, &t->g, t->x.d, t->w.d, b, t->gy.d, t->x.d, t->nx, dx, t->ny);
    snprintf(what, sizeof what, "dw, %s", cs->name);
    fd_check(what, &t->g, t->x.d, t->w.d, b, t->gy.d, t->w.d, t->nw, dw, t->ny);
    if (b) {
        snprintf(what, sizeof what, "db, %s", cs->name);
        fd_check(what, &t->g, t->x.d, t->w.d, b, t->gy.d, b, t->g.oc, db, t->ny);
    }
}

/* One device backward: `which` bits 1 dx, 2 dw, 4 db; beta 0 over NaN or beta 1 over
 * random contents (the reference starts from those). */
static void conv_backward_once(const conv_case *cs, conv_data *t, int which, float beta,
                               const double *rdx, const double *rdw, const double *rdb)
{
    const kc_conv *g = &t->g;
    tensor dx = tensor_new(t->nx, -1, 1), dw = tensor_new(t->nw, -1, 1);
    tensor db = tensor_new(g->oc, -1, 1);
    tensor *out[3] = {&dx, &dw, &db};
    const double *ref[3] = {rdx, rdw, rdb};
    for (int i = 0; i < 3; i++) {
        if (beta == 0.0f) {
            memset(out[i]->d, 0, out[i]->n * sizeof(double));
            tensor_poison(out[i]);
        }
        if (which >> i & 1)
            for (uint64_t k = 0; k < out[i]->n; k++)
                out[i]->d[k] += ref[i][k];
    }
    vkt_view v[3] = {view(&dx), view(&dw), view(&db)};
    TH_OK(g_ctx, kc_conv2d_backward(g_s, g, view(&t->x), view(&t->w), view(&t->gy),
                                    which & 1 ? &v[0] : NULL, beta, which & 2 ? &v[1] : NULL,
                                    beta, which & 4 ? &v[2] : NULL, beta, view(&t->ws),
                                    t->ws_elems));
    run();
    const char *names[3] = {"dx", "dw", "db"};
    for (int i = 0; i < 3; i++) {
        if (!(which >> i & 1))
            continue;
        char what[200];
        snprintf(what, sizeof what, "conv backward %s (set %d, beta %g), %s", names[i], which,
                 (double)beta, cs->name);
        /* dw and db sum over n oh ow terms of size ~1 */
        expect(out[i], out[i]->d, what, 1e-4f, 2e-5f);
    }
    for (int i = 0; i < 3; i++)
        tensor_free(out[i]);
}

static void conv_backward_case(const conv_case *cs, conv_data *t)
{
    const kc_conv *g = &t->g;
    double *dx = calloc(t->nx, sizeof *dx), *dw = calloc(t->nw, sizeof *dw);
    double *db = calloc(g->oc, sizeof *db);
    ref_grads(cs, t, dx, dw, db);
    int all = cs->bias ? 7 : 3;
    conv_backward_once(cs, t, all, 0.0f, dx, dw, db);
    conv_backward_once(cs, t, all, 1.0f, dx, dw, db);
    for (int which = 1; which <= 4; which *= 2) /* each alone */
        if (which & all)
            conv_backward_once(cs, t, which, which == 2 ? 1.0f : 0.0f, dx, dw, db);
    free(dx);
    free(dw);
    free(db);
}

/* ---- pooling ------------------------------------------------------------------------ */

typedef struct pool_case {
    const char *name;
    kc_pool p;
} pool_case;

#define POOL(max_, n_, c_, h_, w_, kh_, kw_, sh_, sw_, ph_, pw_)                          \
    {.n = n_, .c = c_, .h = h_, .w = w_, .kh = kh_, .kw = kw_, .stride_h = sh_,            \
     .stride_w = sw_, .pad_h = ph_, .pad_w = pw_, .max = max_}

static const pool_case k_pools[] = {
    {"max 3x3 stride 2 pad 1", POOL(1, 2, 3, 7, 9, 3, 3, 2, 2, 1, 1)},
    {"max 2x2 stride 2 (MNIST)", POOL(1, 3, 2, 10, 10, 2, 2, 2, 2, 0, 0)},
    {"max 2x3 stride 3x1 pad 1x1", POOL(1, 1, 5, 8, 7, 2, 3, 3, 1, 1, 1)},
    {"avg 3x2 stride 1x2 pad 1x1", POOL(0, 1, 5, 6, 7, 3, 2, 1, 2, 1, 1)},
    {"avg 2x2 stride 2 on 5x5", POOL(0, 2, 3, 5, 5, 2, 2, 2, 2, 0, 0)},
    {"avg 3x3 stride 2 pad 1", POOL(0, 3, 1, 9, 4, 3, 3, 2, 2, 1, 1)},
    /* stride > window: inputs no window covers */
    {"max 2x2 stride 3 pad 1", POOL(1, 2, 3, 10, 8, 2, 2, 3, 3, 1, 1)},
    {"avg 1x2 stride 2x3 pad 0x1", POOL(0, 1, 2, 7, 11, 1, 2, 2, 3, 0, 1)},
};

/* x: distinct values at least 0.01 apart (a random permutation), so that central
 * differences with a smaller step never cross a tie of max pooling. */
static void distinct_values(double *x, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++)
        x[i] = (double)i * 0.01 - (double)n * 0.005;
    for (uint64_t i = n - 1; i > 0; i--) {
        uint64_t j = th_rand_u64() % (i + 1);
        double t = x[i];
        x[i] = x[j];
        x[j] = t;
    }
}

static void pool_fd_check(const pool_case *pc, const kc_pool *p, double *x, uint64_t nx,
                          const double *gy, uint64_t ny, const double *dx)
{
    double *y = calloc(ny, sizeof *y), worst = 0.0, eps = 1e-3;
    for (uint64_t i = 0; i < nx; i++) {
        double keep = x[i], l[2] = {0, 0};
        for (int sgn = 0; sgn < 2; sgn++) {
            x[i] = keep + (sgn ? -eps : eps);
            kc_ref_pool2d(p, x, y);
            for (uint64_t k = 0; k < ny; k++)
                l[sgn] += y[k] * gy[k];
        }
        x[i] = keep;
        double err = fabs((l[0] - l[1]) / (2 * eps) - dx[i]) / (1.0 + fabs(dx[i]));
        if (err > worst)
            worst = err;
    }
    TH_CHECK(worst < 1e-8, "pool %s: reference gradient vs central differences: rel err %.3g",
             pc->name, worst);
    free(y);
}

/* The reference's winning positions (iy w + ix in each plane) as floats' bit patterns. */
static void ref_argmax(const kc_pool *p, const double *x, float *saved)
{
    for (uint64_t pl = 0; pl < (uint64_t)p->n * p->c; pl++)
        for (uint32_t oy = 0; oy < p->oh; oy++)
            for (uint32_t ox = 0; ox < p->ow; ox++) {
                uint32_t best = UINT32_MAX;
                for (uint32_t ky = 0; ky < p->kh; ky++)
                    for (uint32_t kx = 0; kx < p->kw; kx++) {
                        long iy = (long)oy * p->stride_h - p->pad_h + ky;
                        long ix = (long)ox * p->stride_w - p->pad_w + kx;
                        if (iy < 0 || iy >= (long)p->h || ix < 0 || ix >= (long)p->w)
                            continue;
                        uint32_t at = (uint32_t)(iy * p->w + ix);
                        if (best == UINT32_MAX ||
                            x[pl * p->h * p->w + at] > x[pl * p->h * p->w + best])
                            best = at;
                    }
                memcpy(&saved[(pl * p->oh + oy) * p->ow + ox], &best, 4);
            }
}

static void pool_device(const pool_case *pc, const kc_pool *p, tensor *x, const tensor *gy,
                        uint64_t ny, const char *tag)
{
    tensor y = tensor_new(ny, 0, 0), sv = tensor_new(ny, 0, 0), dx = tensor_new(x->n, -1, 1);
    tensor_poison(&y);
    vkt_view svv = view(&sv);
    TH_OK(g_ctx, kc_pool2d(g_s, p, view(x), view(&y), p->max ? &svv : NULL));
    run();
    kc_ref_pool2d(p, x->d, y.d);
    char what[160];
    snprintf(what, sizeof what, "pool forward %s, %s", tag, pc->name);
    expect(&y, y.d, what, 1e-5f, 1e-6f);
    if (p->max) {
        float *want = th_alloc_floats(ny), *got = th_alloc_floats(ny);
        ref_argmax(p, x->d, want);
        th_buf_read(&sv.b, got);
        TH_CHECK(memcmp(want, got, ny * 4) == 0, "pool saved positions %s, %s", tag, pc->name);
        th_buf_guards_ok(&sv.b, what);
        free(want);
        free(got);
    }
    for (int beta = 0; beta < 2; beta++) {
        if (!beta) {
            memset(dx.d, 0, dx.n * sizeof(double));
            tensor_poison(&dx);
        }
        TH_OK(g_ctx, kc_pool2d_backward(g_s, p, p->max ? &svv : NULL, view(gy), view(&dx),
                                        (float)beta));
        run();
        kc_ref_pool2d_backward(p, x->d, gy->d, dx.d);
        snprintf(what, sizeof what, "pool backward %s beta %d, %s", tag, beta, pc->name);
        expect(&dx, dx.d, what, 1e-5f, 1e-6f);
    }
    tensor_free(&y);
    tensor_free(&sv);
    tensor_free(&dx);
}

static void pool_case_run(const pool_case *pc)
{
    kc_pool p = pc->p;
    char msg[256] = "";
    if (!TH_CHECK(kc_pool_init(&p, msg, sizeof msg) == VKT_OK, "%s: %s", pc->name, msg))
        return;
    uint64_t nx = (uint64_t)p.n * p.c * p.h * p.w, ny = (uint64_t)p.n * p.c * p.oh * p.ow;
    TH_CHECK(kc_pool_saved_elems(&p) == (p.max ? ny : 0), "saved elements, %s", pc->name);
    tensor x = tensor_new(nx, -1, 1), gy = tensor_new(ny, -1, 1);
    distinct_values(x.d, nx);
    tensor_upload(&x);
    double *dx = calloc(nx, sizeof *dx);
    kc_ref_pool2d_backward(&p, x.d, gy.d, dx);
    pool_fd_check(pc, &p, x.d, nx, gy.d, ny, dx);
    free(dx);
    pool_device(pc, &p, &x, &gy, ny, "distinct");
    /* ties: values from {-1, 0, 1}, so most windows tie; the first position must win */
    for (uint64_t i = 0; i < nx; i++)
        x.d[i] = (double)(th_rand_u64() % 3) - 1.0;
    tensor_upload(&x);
    pool_device(pc, &p, &x, &gy, ny, "ties");
    tensor_free(&x);
    tensor_free(&gy);
}

/* ---- determinism --------------------------------------------------------------------- */

/* The same backward twice (dx, dw, db; several chunks; beta 1 so every element is read
 * and written) from the same starting contents gives bitwise the same results. */
static void test_deterministic(void)
{
    kc_conv g = GEOM(4, 6, 9, 11, 8, 3, 3, 1, 2, 1, 1, 1, 1, 2);
    TH_OK(g_ctx, kc_conv_init(&g, NULL, 0));
    uint64_t nx = 4 * 6 * 99, nw = 8 * 3 * 9, ny = (uint64_t)4 * 8 * g.oh * g.ow;
    /* less than half the batch's workspace: several chunks */
    uint64_t ws_elems = kc_conv_workspace_elems(&g, kc_conv_workspace_elems(&g, UINT64_MAX) / 2);
    tensor x = tensor_new(nx, -1, 1), w = tensor_new(nw, -1, 1), dy = tensor_new(ny, -1, 1);
    tensor ws = tensor_new(ws_elems, 0, 0);
    tensor out[3] = {tensor_new(nx, -1, 1), tensor_new(nw, -1, 1), tensor_new(8, -1, 1)};
    kc_conv_implicit_force(10, 3); /* conv_implicit: 16x16 tiles, the weight split 3 ways */
    float *first[3], *again[3];
    for (int run_ = 0; run_ < 2; run_++) {
        for (int i = 0; i < 3; i++)
            th_buf_write(&out[i].b, out[i].f); /* the same starting contents */
        vkt_view v[3] = {view(&out[0]), view(&out[1]), view(&out[2])};
        TH_OK(g_ctx, kc_conv2d_backward(g_s, &g, view(&x), view(&w), view(&dy), &v[0], 1.0f,
                                        &v[1], 1.0f, &v[2], 1.0f, view(&ws), ws_elems));
        run();
        for (int i = 0; i < 3; i++) {
            float **dst = run_ ? again : first;
            dst[i] = th_alloc_floats(out[i].n);
            th_buf_read(&out[i].b, dst[i]);
        }
    }
    kc_conv_implicit_force(-1, 1);
    for (int i = 0; i < 3; i++) {
        TH_CHECK(memcmp(first[i], again[i], out[i].n * 4) == 0,
                 "conv backward output %d is bitwise the same in two runs", i);
        free(first[i]);
        free(again[i]);
        tensor_free(&out[i]);
    }
    tensor *all[4] = {&x, &w, &dy, &ws};
    for (int i = 0; i < 4; i++)
        tensor_free(all[i]);
}

/* ---- error paths -------------------------------------------------------------------- */

static void expect_init(kc_conv g, vkt_status want, const char *word)
{
    char msg[256] = "";
    vkt_status st = kc_conv_init(&g, msg, sizeof msg);
    TH_CHECK(st == want && strstr(msg, word), "kc_conv_init: got %s \"%s\", want %s naming %s",
             vkt_status_name(st), msg, vkt_status_name(want), word);
}

static void test_conv_errors(void)
{
    kc_conv ok = GEOM(2, 4, 6, 6, 6, 3, 3, 1, 1, 1, 1, 1, 1, 2);
    kc_conv g = ok;
    g.stride_w = 0;
    expect_init(g, VKT_ERROR_INVALID_ARGUMENT, "stride_w");
    g = ok, g.dil_h = 0;
    expect_init(g, VKT_ERROR_INVALID_ARGUMENT, "dil_h");
    g = ok, g.oc = 0;
    expect_init(g, VKT_ERROR_INVALID_ARGUMENT, "oc");
    g = ok, g.groups = 3;
    expect_init(g, VKT_ERROR_SHAPE, "groups (3)");
    g = ok, g.oc = 5;
    expect_init(g, VKT_ERROR_SHAPE, "oc (5)");
    g = ok, g.kh = 5, g.dil_h = 2, g.pad_h = 0; /* spans 9 rows of 6 */
    expect_init(g, VKT_ERROR_SHAPE, "empty");
    TH_CHECK(kc_conv_init(NULL, NULL, 0) == VKT_ERROR_INVALID_ARGUMENT, "kc_conv_init(NULL)");

    g = ok;
    TH_OK(g_ctx, kc_conv_init(&g, NULL, 0));
    uint64_t per = 36 * (6 + 36), need = per + 8;
    TH_CHECK(kc_conv_workspace_elems(&g, need - 1) == 0, "workspace for less than a sample");
    TH_CHECK(kc_conv_workspace_elems(&g, need) == need, "workspace for one sample");
    TH_CHECK(kc_conv_workspace_elems(&g, UINT64_MAX) == 2 * per + 8, "workspace for all");
    tensor x = tensor_new(2 * 4 * 36, -1, 1), w = tensor_new(6 * 2 * 9, -1, 1);
    tensor y = tensor_new(2 * 6 * 36, 0, 0), ws = tensor_new(need, 0, 0);
    vkt_view xv = view(&x), wv = view(&w), yv = view(&y), wsv = view(&ws);
    if (kc_conv_uses_workspace(g_ctx)) {
        /* workspace too small for one sample */
        TH_STATUS(g_ctx, kc_conv2d(g_s, &g, xv, wv, NULL, yv, wsv, need - 1), VKT_ERROR_LIMIT);
        TH_CHECK(strstr(vkt_context_errmsg(g_ctx), "workspace") != NULL, "message: %s",
                 vkt_context_errmsg(g_ctx));
        TH_STATUS(g_ctx, kc_conv2d_backward(g_s, &g, xv, wv, yv, &xv, 0, NULL, 0, NULL, 0, wsv,
                                            need - 1), VKT_ERROR_LIMIT);
        /* one sample too large for max_elems: 4096 (64 + 576) elements over 2^20 */
        kc_conv big = GEOM(1, 64, 64, 64, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1);
        TH_OK(g_ctx, kc_conv_init(&big, NULL, 0));
        TH_CHECK(kc_conv_workspace_elems(&big, 1u << 20) == 0, "a sample over max_elems");
        tensor bx = tensor_new(64 * 4096, 0, 0), bw = tensor_new(64 * 64 * 9, 0, 0);
        tensor by = tensor_new(64 * 4096, 0, 0), bws = tensor_new(1u << 20, 0, 0);
        TH_STATUS(g_ctx, kc_conv2d(g_s, &big, view(&bx), view(&bw), NULL, view(&by),
                                   view(&bws), 1u << 20), VKT_ERROR_LIMIT);
        TH_CHECK(strstr(vkt_context_errmsg(g_ctx), "2621448") != NULL,
                 "message names the size: %s", vkt_context_errmsg(g_ctx));
        tensor *bigs[4] = {&bx, &bw, &by, &bws};
        for (int i = 0; i < 4; i++)
            tensor_free(bigs[i]);
    } else {
        /* conv_implicit: no workspace at all (the view is not used, 0 elements) */
        TH_OK(g_ctx, kc_conv2d(g_s, &g, xv, wv, NULL, yv, yv, 0));
        TH_OK(g_ctx, kc_conv2d_backward(g_s, &g, xv, wv, yv, NULL, 0, &wv, 0, NULL, 0, xv, 0));
        TH_OK(g_ctx, vkt_stream_reset(g_s));
    }
    /* a workspace larger than its buffer */
    TH_STATUS(g_ctx, kc_conv2d(g_s, &g, xv, wv, NULL, yv, wsv, need + 100),
              VKT_ERROR_INVALID_ARGUMENT);
    /* bad calls */
    TH_STATUS(g_ctx, kc_conv2d(NULL, &g, xv, wv, NULL, yv, wsv, need),
              VKT_ERROR_INVALID_ARGUMENT);
    kc_conv stale = g;
    stale.oh = 5;
    TH_STATUS(g_ctx, kc_conv2d(g_s, &stale, xv, wv, NULL, yv, wsv, need),
              VKT_ERROR_INVALID_ARGUMENT);
    TH_STATUS(g_ctx, kc_conv2d(g_s, &g, xv, wv, NULL, xv, wsv, need),
              VKT_ERROR_INVALID_ARGUMENT); /* y does not fit x's buffer */
    TH_STATUS(g_ctx, kc_conv2d(g_s, &g, xv, wv, NULL, yv, yv, need),
              VKT_ERROR_INVALID_ARGUMENT); /* workspace over y */
    TH_STATUS(g_ctx, kc_conv2d_backward(g_s, &g, xv, wv, yv, NULL, 0, NULL, 0, NULL, 0, wsv,
                                        need), VKT_ERROR_INVALID_ARGUMENT);
    tensor *all[4] = {&x, &w, &y, &ws};
    for (int i = 0; i < 4; i++)
        tensor_free(all[i]);
}

static void test_pool_errors(void)
{
    kc_pool p = POOL(1, 1, 2, 5, 5, 2, 2, 2, 2, 0, 0);
    char msg[256] = "";
    kc_pool q = p;
    q.pad_h = 2;
    TH_CHECK(kc_pool_init(&q, msg, sizeof msg) == VKT_ERROR_INVALID_ARGUMENT &&
             strstr(msg, "pad"), "pool pad > k / 2: %s", msg);
    q = p, q.stride_h = 0;
    TH_CHECK(kc_pool_init(&q, msg, sizeof msg) == VKT_ERROR_INVALID_ARGUMENT &&
             strstr(msg, "stride_h"), "pool stride 0: %s", msg);
    q = p, q.kw = 7;
    TH_CHECK(kc_pool_init(&q, msg, sizeof msg) == VKT_ERROR_SHAPE && strstr(msg, "window"),
             "pool window too large: %s", msg);
    TH_OK(g_ctx, kc_pool_init(&p, NULL, 0));
    tensor x = tensor_new(50, -1, 1), y = tensor_new(8, 0, 0);
    TH_STATUS(g_ctx, kc_pool2d(g_s, &p, view(&x), view(&y), NULL), VKT_ERROR_INVALID_ARGUMENT);
    TH_CHECK(strstr(vkt_context_errmsg(g_ctx), "saved") != NULL, "message: %s",
             vkt_context_errmsg(g_ctx));
    TH_STATUS(g_ctx, kc_pool2d(g_s, &p, view(&y), view(&y), NULL), VKT_ERROR_INVALID_ARGUMENT);
    p.max = 0;
    vkt_view tail = {y.b.buffer, y.b.offset + y.b.n + y.b.guard - 7}; /* 7 elements left */
    TH_STATUS(g_ctx, kc_pool2d(g_s, &p, view(&x), tail, NULL), VKT_ERROR_INVALID_ARGUMENT);
    TH_CHECK(strstr(vkt_context_errmsg(g_ctx), "kc_pool2d: y") != NULL, "message: %s",
             vkt_context_errmsg(g_ctx));
    TH_STATUS(g_ctx, kc_pool2d_backward(NULL, &p, NULL, view(&y), view(&x), 0),
              VKT_ERROR_INVALID_ARGUMENT);
    tensor_free(&x);
    tensor_free(&y);
}

/* conv_implicit with each tile row forced, the weight gradient unsplit and split 3 ways,
 * on a geometry off every tile size (groups 2 of 6 -> 20 channels, stride 2 and dilation
 * 2 on different axes, padding): forward with bias and relu, the fused backward, and the
 * plain backward adding to random contents (beta 1). */
static void test_implicit_tiles(void)
{
    static const conv_case cs = {"forced tiles", GEOM(5, 12, 11, 9, 40, 3, 3, 1, 2, 2, 1, 2, 1,
                                                      2), 1, 0, 1};
    uint32_t rows;
    const kc_conv_tile *t = kc_conv_tiles(&rows);
    for (uint32_t r = 0; r < rows; r++)
        for (uint32_t splits = 1; splits <= 3; splits += 2) {
            kc_conv_plan pl;
            kc_conv g = cs.g;
            TH_OK(NULL, kc_conv_init(&g, NULL, 0));
            TH_CHECK(kc_conv_plan_with(&g_ctx->profile, &g, g.n, KC_GEMM_WEIGHT, 1, 1, r,
                                       splits, &pl) && pl.splits == splits,
                     "tile %ux%u: the weight gradient splits %u ways", t[r].bm, t[r].bn,
                     splits);
            kc_conv_implicit_force((int)r, splits);
            conv_data d = {.g = g, .nx = (uint64_t)g.n * g.c * g.h * g.w,
                           .nw = (uint64_t)g.oc * (g.c / g.groups) * g.kh * g.kw,
                           .ny = (uint64_t)g.n * g.oc * g.oh * g.ow};
            g_aligned = (r + splits) % 2; /* vec4 stores on half of them */
            d.x = tensor_new(d.nx, -1, 1), d.w = tensor_new(d.nw, -1, 1);
            d.b = tensor_new(g.oc, -1, 1), d.y = tensor_new(d.ny, 0, 0);
            d.gy = tensor_new(d.ny, -1, 1), d.ws = tensor_new(1, 0, 0);
            kc_ref_conv2d(&g, d.x.d, d.w.d, d.b.d, d.y.d);
            char name[64];
            snprintf(name, sizeof name, "tile %ux%u, %u splits", t[r].bm, t[r].bn, splits);
            conv_case c = cs;
            c.name = name;
            conv_relu_case(&c, &d);
            double *dx = calloc(d.nx, sizeof *dx), *dw = calloc(d.nw, sizeof *dw);
            double *db = calloc(g.oc, sizeof *db);
            kc_ref_conv2d_backward(&g, d.x.d, d.w.d, d.gy.d, dx, dw, db);
            conv_backward_once(&c, &d, 7, 1.0f, dx, dw, db);
            free(dx), free(dw), free(db);
            tensor *all[6] = {&d.x, &d.w, &d.b, &d.y, &d.gy, &d.ws};
            for (int i = 0; i < 6; i++)
                tensor_free(all[i]);
        }
    kc_conv_implicit_force(-1, 1);
    g_aligned = 0;
}

/* Parts (`--part NAME`, harness.h): one per conv variant, named by its kernel filter
 * ("cpu", "gpu", "gpu,conv_im2col"); each compiles its own pipelines (counted below), slow
 * on lavapipe when no cache has them: ctest runs the parts as separate entries
 * (tests/CMakeLists.txt). */
int main(int argc, char **argv)
{
    th_init("test_conv");
    th_parts(argc, argv);
    /* every conv variant, forced: the GEMMs, work per lane and grids differ */
    static const struct {
        const char *filter;
        gpu_variant conv;
    } k_variants[] = {{"cpu", GPU_V_CONV_IM2COL},
                      {"gpu", GPU_V_CONV_IMPLICIT},
                      {"gpu,conv_im2col", GPU_V_CONV_IM2COL}};
    for (size_t v = 0; v < sizeof k_variants / sizeof k_variants[0]; v++) {
        if (!th_part(k_variants[v].filter))
            continue;
        g_ctx = th_context_filter(k_variants[v].filter);
        g_s = th_stream(g_ctx, 0);
        TH_CHECK(g_ctx->kv[GPU_FAMILY_CONV] == k_variants[v].conv, "%s: conv variant %s",
                 k_variants[v].filter, gpu_variant_row_of(g_ctx->kv[GPU_FAMILY_CONV])->name);
        for (size_t i = 0; i < sizeof k_cases / sizeof k_cases[0]; i++)
            conv_case_run(&k_cases[i]);
        if (v < 2) /* the pooling kernels: by style */
            for (g_aligned = 0; g_aligned < 2; g_aligned++) /* vec4 stores when aligned */
                for (size_t i = 0; i < sizeof k_pools / sizeof k_pools[0]; i++)
                    pool_case_run(&k_pools[i]);
        g_aligned = 0;
        if (g_ctx->kv[GPU_FAMILY_CONV] == GPU_V_CONV_IMPLICIT)
            test_implicit_tiles();
        test_deterministic();
        test_conv_errors();
        if (v < 2)
            test_pool_errors();
        vkt_stream_destroy(g_s);
        printf("  %s: checked, %u pipelines\n", k_variants[v].filter, g_ctx->pipeline_count);
        th_context_release(g_ctx); /* saves its pipeline cache now, not at the end */
    }
    return th_finish();
}
