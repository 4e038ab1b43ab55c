/* test_conv_lowp.c - convolution of 16-bit operands (kc_conv2d_lowp, kc_conv2d_backward_lowp)
 * against the double references (kc_ref_conv2d*), for every variant of the conv_lowp family
 * and both types, in parts (`--part`, harness.h):
 *   widen     conv_lowp_widen over each fp32 convolution (conv_im2col, the cpu style's;
 *             conv_implicit, the gpu style's);
 *   implicit  conv_lowp_implicit with its planned tiles and with a forced narrow tile and
 *             a split weight gradient;
 *   frag      conv_lowp_frag, the cooperative-matrix tiling with fp32 multiply-adds
 *             (conv_frag.comp), planned and with the weight gradient split: every device
 *             with 16-bit storage runs it, so lavapipe checks the gathers, staging, fragment
 *             indexing and stores conv_lowp_coopmat shares;
 *   coopmat   conv_lowp_coopmat where the device has cooperative matrices (Mesa 26's
 *             lavapipe: .ci/run sets VKT_TEST_LOWP_ROWS=conv_lowp_coopmat there, and the
 *             part then fails unless it ran); elsewhere it says it was skipped and why. Its
 *             fp16 runs conv_coopmat_f16 (the matrix instruction); bf16 conv_coopmat_bf16
 *             where the device has bf16 matrices, else conv_frag;
 *   plans     without a device: the variant chosen and the plans of the fragment tiling on
 *             stated devices (an H100's matrix shapes, lavapipe 26's 8x8x8);
 *   errors    an fp32 type, a short workspace, a view past its buffer.
 *
 * Tolerances, per output, from the precision (u = 2^-24, fp32's unit roundoff; p = 2^-11
 * for fp16, 2^-8 for bf16, half an ulp of the 16-bit type; K the terms summed: c/groups kh
 * kw for y, oc/groups kh kw for dx, n oh ow for dw and db; S the sum of |terms|, Q the sum
 * of their squares, both from the references on |x|, |w|, |dy| and their squares):
 *  (1) against the reference on the 16-bit values as stored: a product of two 16-bit
 *      values is exact in fp32 (11 + 11 or 8 + 8 significant bits), so only the K fp32
 *      additions and the bias err: |got - ref| <= (K + 2) u S;
 *  (2) against the reference on the unrounded fp32 inputs: each term carries the two
 *      roundings of its operands, relative errors of at most p each, independent and of
 *      variance at most p^2 / 3, so the sum's error has a standard deviation of at most
 *      p sqrt(2/3) sqrt(Q), which grows as sqrt(K) for inputs of one scale: |got - ref| <=
 *      6 p sqrt(2/3) sqrt(Q) + (K + 2) u S (the worst case, 2p S, grows as K);
 *  (3) and the rounding shows: the largest error against the unrounded reference is more
 *      than 4 times the largest against the stored values (a kernel that multiplied
 *      unrounded fp32 values, or ignored the 16-bit type, fails here or in (1)).
 * Geometries: strided, padded, dilated and grouped, with and without bias, 1x1, a K of
 * several hundred, a batch whose y plane is not a multiple of 4, a 16-bit view starting at
 * an odd element; dx added to (beta 1) and written over NaNs (beta 0); a fused relu's
 * mask. The cooperative-matrix kernel doubles the (K + 2) u S of (1): hardware may truncate
 * its sums (as test_gemm_lowp allows). */
#include "harness.h"
#include "gpu/gpu.h"
#include "lowp_case.h"
#include "kernels/conv.h"
#include "spec.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static vkt_context *ctx;
static vkt_stream *s;
static const char *label;
static double acc_ulps = 1.0; /* fp32 roundings per addition the kernel may make (above) */

/* An fp32 output and its initial contents. */
typedef struct t32 {
    th_buf b;
    uint64_t n;
    float *init;
} t32;

static t32 t32_new(uint64_t n, int nans)
{
    t32 y = {th_buf_create(ctx, n), n, th_alloc_floats(n)};
    th_fill_uniform(y.init, n, -1, 1);
    if (nans)
        for (uint64_t i = 0; i < n; i++)
            y.init[i] = NAN;
    th_buf_write(&y.b, y.init);
    return y;
}

static double *dalloc(uint64_t n)
{
    return calloc(n ? n : 1, sizeof(double));
}

static void absd(const double *x, double *out, uint64_t n, int square)
{
    for (uint64_t i = 0; i < n; i++)
        out[i] = square ? x[i] * x[i] : fabs(x[i]);
}

/* One output checked with (1), (2), (3) above. ref_s: from the stored values, ref_e: from
 * the exact ones; S, Q; `base`: what beta adds (or NULL). */
static void expect(const char *what, t32 *y, const double *ref_s, const double *ref_e,
                   const double *S, const double *Q, const double *base, uint64_t K, double p)
{
    float *got = th_alloc_floats(y->n);
    th_buf_read(&y->b, got);
    const double u = ldexp(1.0, -24), sig = p * sqrt(2.0 / 3.0);
    uint64_t bad1 = 0, bad2 = 0, first = 0;
    double max1 = 0.0, max2 = 0.0, detail[3] = {0, 0, 0};
    for (uint64_t i = 0; i < y->n; i++) {
        double b = base ? base[i] : 0.0;
        double tol1 = acc_ulps * (K + 2) * u * (S[i] + fabs(b)) + 1e-30;
        double e1 = fabs(got[i] - (ref_s[i] + b)), e2 = fabs(got[i] - (ref_e[i] + b));
        double tol2 = 6.0 * sig * sqrt(Q[i]) + tol1;
        if (!(e1 <= tol1) && !bad1++)
            first = i, detail[0] = got[i], detail[1] = ref_s[i] + b, detail[2] = tol1;
        if (!(e2 <= tol2))
            bad2++;
        max1 = e1 > max1 ? e1 : max1;
        max2 = e2 > max2 ? e2 : max2;
    }
    TH_CHECK(bad1 == 0, "%s %s: %llu outputs off the stored values' sum by more than (K+2)u S "
             "(first %llu: %.9g vs %.9g, tol %.3g)", label, what, (unsigned long long)bad1,
             (unsigned long long)first, detail[0], detail[1], detail[2]);
    TH_CHECK(bad2 == 0, "%s %s: %llu outputs off the fp32 inputs' sum by more than "
             "6 p sqrt(2/3) sqrt(Q) + (K+2)u S", label, what, (unsigned long long)bad2);
    TH_CHECK(max2 > 4.0 * max1 && max2 > 0.0, "%s %s: the 16-bit rounding does not show "
             "(largest error against the unrounded inputs %.3g, against the stored ones %.3g)",
             label, what, max2, max1);
    th_buf_guards_ok(&y->b, what);
    free(got);
}

typedef struct geom {
    kc_conv g;
    int bias, relu, odd;
} geom;

static void check(vkt_dtype t, const geom *ge)
{
    kc_conv g = ge->g;
    if (!TH_OK(NULL, kc_conv_init(&g, NULL, 0)))
        return;
    double p = t == VKT_DTYPE_FP16 ? ldexp(1.0, -11) : ldexp(1.0, -8);
    uint64_t nx = (uint64_t)g.n * g.c * g.h * g.w, ny = (uint64_t)g.n * g.oc * g.oh * g.ow;
    uint64_t nw = (uint64_t)g.oc * (g.c / g.groups) * g.kh * g.kw;
    uint64_t skip = ge->odd ? 1 : 0;
    th_half x = th_half_new(ctx, t, nx, skip, -1, 1), w = th_half_new(ctx, t, nw, skip, -1, 1);
    th_half dy = th_half_new(ctx, t, ny, skip, -1, 1);
    t32 bias = t32_new(g.oc, 0), y = t32_new(ny, 1), dx = t32_new(nx, 0), dw = t32_new(nw, 1);
    t32 db = t32_new(g.oc, 1);
    uint64_t wn = kc_conv_lowp_workspace_elems(ctx, &g);
    th_buf ws = th_buf_create(ctx, wn ? wn : 1);
    vkt_view vb = th_view(&bias.b), vy = th_view(&y.b), vdx = th_view(&dx.b);
    vkt_view vdw = th_view(&dw.b), vdb = th_view(&db.b);
    TH_OK(ctx, vkt_stream_reset(s));
    TH_OK(ctx, kc_conv2d_lowp(s, &g, t, th_half_view(&x), th_half_view(&w),
                              ge->bias ? &vb : NULL, ge->relu, vy, th_view(&ws), wn));
    TH_OK(ctx, kc_conv2d_backward_lowp(s, &g, t, th_half_view(&x), th_half_view(&w),
                                       th_half_view(&dy),
                                       ge->relu ? &vy : NULL, &vdx, 1.0f, &vdw, 0.0f,
                                       ge->bias ? &vdb : NULL, 0.0f, th_view(&ws), wn));
    if (!TH_OK(ctx, vkt_stream_run(s)))
        goto out;
    {
        double *bd = dalloc(g.oc), *bz = dalloc(g.oc);
        for (uint32_t o = 0; o < g.oc; o++)
            bd[o] = ge->bias ? bias.init[o] : 0.0;
        double *xa = dalloc(nx), *wa = dalloc(nw), *dya = dalloc(ny);
        double *ys = dalloc(ny), *ye = dalloc(ny), *yS = dalloc(ny), *yQ = dalloc(ny);
        kc_ref_conv2d(&g, x.stored, w.stored, bd, ys);
        kc_ref_conv2d(&g, x.exact, w.exact, bd, ye);
        absd(x.stored, xa, nx, 0), absd(w.stored, wa, nw, 0);
        kc_ref_conv2d(&g, xa, wa, bz, yS);
        absd(x.stored, xa, nx, 1), absd(w.stored, wa, nw, 1);
        kc_ref_conv2d(&g, xa, wa, bz, yQ);
        float *yg = th_alloc_floats(ny);
        th_buf_read(&y.b, yg);
        if (ge->relu) /* the references relu'd; tolerances as for the pre-activation */
            for (uint64_t i = 0; i < ny; i++) {
                ys[i] = ys[i] > 0 ? ys[i] : 0.0;
                ye[i] = ye[i] > 0 ? ye[i] : 0.0;
            }
        uint64_t k_y = (uint64_t)(g.c / g.groups) * g.kh * g.kw;
        uint64_t k_x = (uint64_t)(g.oc / g.groups) * g.kh * g.kw;
        uint64_t k_w = (uint64_t)g.n * g.oh * g.ow;
        expect("y", &y, ys, ye, yS, yQ, NULL, k_y, p);
        /* the backward: dy masked by the device's relu output */
        double *dys = dalloc(ny), *dye = dalloc(ny);
        for (uint64_t i = 0; i < ny; i++) {
            int on = !ge->relu || yg[i] > 0;
            dys[i] = on ? dy.stored[i] : 0.0, dye[i] = on ? dy.exact[i] : 0.0;
        }
        double *r[4][3]; /* [stored, exact, S, Q][dx, dw, db] */
        for (int a = 0; a < 4; a++)
            r[a][0] = dalloc(nx), r[a][1] = dalloc(nw), r[a][2] = dalloc(g.oc);
        kc_ref_conv2d_backward(&g, x.stored, w.stored, dys, r[0][0], r[0][1], r[0][2]);
        kc_ref_conv2d_backward(&g, x.exact, w.exact, dye, r[1][0], r[1][1], r[1][2]);
        for (int sq = 0; sq < 2; sq++) {
            absd(x.stored, xa, nx, sq), absd(w.stored, wa, nw, sq), absd(dys, dya, ny, sq);
            kc_ref_conv2d_backward(&g, xa, wa, dya, r[2 + sq][0], r[2 + sq][1], r[2 + sq][2]);
        }
        double *old = dalloc(nx);
        for (uint64_t i = 0; i < nx; i++)
            old[i] = dx.init[i];
        expect("dx (beta 1)", &dx, r[0][0], r[1][0], r[2][0], r[3][0], old, k_x, p);
        expect("dw", &dw, r[0][1], r[1][1], r[2][1], r[3][1], NULL, k_w, p);
        if (ge->bias) /* db sums 16-bit dy alone: exact products again */
            expect("db", &db, r[0][2], r[1][2], r[2][2], r[3][2], NULL, k_w, p);
        for (int a = 0; a < 4; a++)
            free(r[a][0]), free(r[a][1]), free(r[a][2]);
        free(old), free(dys), free(dye), free(yg), free(bd), free(bz), free(xa), free(wa);
        free(dya), free(ys), free(ye), free(yS), free(yQ);
    }
out:
    th_half_free(&x), th_half_free(&w), th_half_free(&dy);
    th_buf_destroy(&ws);
    th_buf_destroy(&bias.b), th_buf_destroy(&y.b), th_buf_destroy(&dx.b);
    th_buf_destroy(&dw.b), th_buf_destroy(&db.b);
    free(bias.init), free(y.init), free(dx.init), free(dw.init), free(db.init);
}

static const geom k_geoms[] = {
    /* strided, padded, dilated, grouped, bias; a 16-bit view at an odd element */
    {{.n = 3, .c = 4, .h = 11, .w = 9, .oc = 6, .kh = 3, .kw = 2, .stride_h = 2, .stride_w = 1,
      .pad_h = 1, .pad_w = 1, .dil_h = 1, .dil_w = 2, .groups = 2}, 1, 0, 1},
    /* 1x1, no bias, a fused relu */
    {{.n = 2, .c = 5, .h = 7, .w = 3, .oc = 7, .kh = 1, .kw = 1, .stride_h = 1, .stride_w = 1,
      .dil_h = 1, .dil_w = 1, .groups = 1}, 0, 1, 0},
    /* K = 37 * 9 = 333, planes of 4k, bias and relu */
    {{.n = 2, .c = 37, .h = 8, .w = 8, .oc = 13, .kh = 3, .kw = 3, .stride_h = 1, .stride_w = 1,
      .pad_h = 1, .pad_w = 1, .dil_h = 1, .dil_w = 1, .groups = 1}, 1, 1, 0},
};

static void check_all(const char *filter, const char *name, gpu_variant want, int force)
{
    vkt_context *c = th_context_filter(filter);
    if (!c)
        return;
    acc_ulps = want == GPU_V_CONV_LOWP_COOPMAT ? 2.0 : 1.0;
    ctx = c;
    s = th_stream(ctx, 0);
    TH_CHECK(ctx->kv[GPU_FAMILY_CONV_LOWP] == want, "%s: the filter chose %s", filter,
             gpu_variant_row_of(ctx->kv[GPU_FAMILY_CONV_LOWP])
                 ? gpu_variant_row_of(ctx->kv[GPU_FAMILY_CONV_LOWP])->name
                 : "none");
    if (force)
        kc_conv_implicit_force(0, 3); /* the narrowest tile row, about 3 splits */
    for (int t = 0; t < 2; t++) {
        vkt_dtype dt = t ? VKT_DTYPE_BF16 : VKT_DTYPE_FP16;
        for (size_t i = 0; i < sizeof k_geoms / sizeof k_geoms[0]; i++) {
            char buf[128];
            snprintf(buf, sizeof buf, "%s %s geometry %zu", name, vkt_dtype_name(dt), i);
            label = buf;
            check(dt, &k_geoms[i]);
        }
    }
    kc_conv_implicit_force(-1, 1);
    vkt_stream_destroy(s);
    th_context_release(ctx);
}

static void check_errors(void)
{
    vkt_context *c = th_context_filter("cpu");
    if (!c)
        return;
    ctx = c;
    s = th_stream(ctx, 0);
    kc_conv g = {.n = 1, .c = 2, .h = 5, .w = 5, .oc = 3, .kh = 3, .kw = 3, .stride_h = 1,
                 .stride_w = 1, .dil_h = 1, .dil_w = 1, .groups = 1};
    kc_conv_init(&g, NULL, 0);
    th_buf a = th_buf_create(ctx, 4096), ws = th_buf_create(ctx, 8192);
    vkt_view v = th_view(&a), y = {v.buffer, v.offset + 1024};
    uint64_t wn = kc_conv_lowp_workspace_elems(ctx, &g);
    TH_CHECK(wn > 0 && wn <= 8192, "workspace of the small convolution: %llu",
             (unsigned long long)wn);
    TH_STATUS(ctx, kc_conv2d_lowp(s, &g, VKT_DTYPE_FP32, v, v, NULL, 0, y, th_view(&ws), wn),
              VKT_ERROR_INVALID_ARGUMENT);
    TH_STATUS(ctx, kc_conv2d_lowp(s, &g, VKT_DTYPE_FP16, v, v, NULL, 0, y, th_view(&ws),
                                  wn - 1),
              VKT_ERROR_LIMIT);
    vkt_view past = {v.buffer, vkt_buffer_size(v.buffer) / 2 - 10}; /* 50 elements */
    TH_STATUS(ctx, kc_conv2d_lowp(s, &g, VKT_DTYPE_BF16, past, v, NULL, 0, y, th_view(&ws), wn),
              VKT_ERROR_INVALID_ARGUMENT);
    th_buf_destroy(&a), th_buf_destroy(&ws);
    vkt_stream_destroy(s);
    th_context_release(ctx);
}

/* conv_lowp_coopmat where the device runs it; else skipped, saying why (and failing when
 * VKT_TEST_LOWP_ROWS names it, or when anything but cooperative matrices is missing). */
static void check_coopmat(void)
{
    if (!lowp_coopmat_runs(GPU_V_CONV_LOWP_COOPMAT, "conv_coopmat_bf16",
                           "conv_frag (no bf16 matrices)"))
        return;
    check_all("conv_lowp_coopmat", "conv_lowp_coopmat", GPU_V_CONV_LOWP_COOPMAT, 0);
    check_all("conv_lowp_coopmat", "conv_lowp_coopmat (split)", GPU_V_CONV_LOWP_COOPMAT, 1);
}

/* ---- without a device ----------------------------------------------------------------- */

static const gpu_mat_shape k_h100_f16 = {16, 16, 16, GPU_COMPONENT_F16, GPU_COMPONENT_F16,
                                         GPU_COMPONENT_F32, GPU_COMPONENT_F32};
static const gpu_mat_shape k_h100_bf16 = {16, 16, 16, GPU_COMPONENT_BF16, GPU_COMPONENT_BF16,
                                          GPU_COMPONENT_F32, GPU_COMPONENT_F32};

/* The kernels' SPIR-V (the prebuilt modules too) against their descriptions, the choice
 * of conv_lowp_coopmat on stated devices and the fragment plans there: the tile fits, the
 * warps and the load assignment divide evenly, the grid covers C, the weight gradient
 * splits to fill the compute units. */
static void check_plans(void)
{
    uint32_t nk;
    const gpu_kernel *ks = kc_conv_frag_kernels(&nk);
    for (uint32_t i = 0; i < nk; i++) {
        char msg[VKT_ERRMSG_SIZE] = "";
        TH_CHECK(gpu_kernel_check(&ks[i], SPEC_CONV_FRAG_COUNT, msg) == VKT_OK,
                 "%s: the SPIR-V agrees with its description: %s", ks[i].name, msg);
    }
    gpu_profile h100, plain, lvp26;
    gpu_profile_stated(VKT_DEVICE_TYPE_DISCRETE_GPU, 132, 48 * 1024, 32, &h100);
    plain = h100;
    gpu_profile_add_mat(&h100, (gpu_mat_shape){16, 8, 16, 0, 0, 1, 1});
    gpu_profile_add_mat(&h100, k_h100_f16);
    gpu_profile_add_mat(&h100, (gpu_mat_shape){16, 8, 8, 0, 0, 1, 1});
    gpu_profile_add_mat(&h100, k_h100_bf16);
    h100.caps |= GPU_CAP_BFLOAT16;
    gpu_profile_stated(VKT_DEVICE_TYPE_CPU, 2, 32 * 1024, 8, &lvp26);
    gpu_profile_add_mat(&lvp26, (gpu_mat_shape){8, 8, 8, 0, 0, 1, 1});
    lowp_check_choice(GPU_FAMILY_CONV_LOWP, GPU_V_CONV_LOWP_COOPMAT, &h100, &plain,
                      GPU_V_CONV_LOWP_IMPLICIT, &lvp26, GPU_V_CONV_LOWP_WIDEN);
    /* the benchmark CNN's second convolution at batch 64 (16 -> 32 channels, 3x3 on 14x14),
     * a grouped one, and a 1x1 over many channels */
    kc_conv geo[3] = {
        {.n = 64, .c = 16, .h = 14, .w = 14, .oc = 32, .kh = 3, .kw = 3, .stride_h = 1,
         .stride_w = 1, .pad_h = 1, .pad_w = 1, .dil_h = 1, .dil_w = 1, .groups = 1},
        {.n = 8, .c = 64, .h = 9, .w = 7, .oc = 96, .kh = 3, .kw = 3, .stride_h = 2,
         .stride_w = 2, .pad_h = 1, .pad_w = 1, .dil_h = 1, .dil_w = 1, .groups = 4},
        {.n = 32, .c = 512, .h = 7, .w = 7, .oc = 512, .kh = 1, .kw = 1, .stride_h = 1,
         .stride_w = 1, .dil_h = 1, .dil_w = 1, .groups = 1}};
    const lowp_device devs[] = {
        {"H100 f16 16x16x16", &h100, gpu_mat_for(&h100, GPU_MAT_F16), 16, 32},
        {"H100 bf16", &h100, gpu_mat_for(&h100, GPU_MAT_BF16), 16, 32},
        {"H100 16x8x8", &h100, &(gpu_mat_shape){16, 8, 8, 0, 0, 1, 1}, 16, 32},
        {"lavapipe 26 8x8x8", &lvp26, gpu_mat_for(&lvp26, GPU_MAT_F16), 8, 8},
        {"conv_frag on a GPU", &plain, NULL, 16, 32},
        {"conv_frag on lavapipe", &lvp26, NULL, 8, 8}};
    for (size_t d = 0; d < sizeof devs / sizeof devs[0]; d++)
        for (int gi = 0; gi < 3; gi++) {
            kc_conv g = geo[gi];
            TH_OK(NULL, kc_conv_init(&g, NULL, 0));
            for (int pass = 0; pass < 3; pass++) {
                kc_conv_plan pl;
                int ok = kc_conv_frag_plan(devs[d].p, &g, g.n, pass, 1, 1, devs[d].mat, 0, &pl);
                if (!TH_CHECK(ok, "%s geometry %d pass %d: a plan", devs[d].name, gi, pass))
                    continue;
                TH_CHECK(pl.tm == devs[d].tm && pl.sg == devs[d].sg && pl.bm == 2 * pl.wm &&
                             pl.bn == 2 * pl.wn && pl.wm % pl.tm == 0 && pl.wn % pl.tn == 0 &&
                             pl.bk % pl.tk == 0 && pl.threads == 4 * pl.sg &&
                             pl.threads % pl.bk == 0 && pl.threads % pl.bn == 0 &&
                             (pl.bm * pl.bk) % pl.threads == 0 &&
                             (pl.bn * pl.bk) % pl.threads == 0 &&
                             pl.shared_bytes <= devs[d].p->shared_memory,
                         "%s geometry %d pass %d: tile %ux%ux%u, warps %ux%u, fragments "
                         "%ux%ux%u of %u lanes, %u threads, %u bytes", devs[d].name, gi, pass,
                         pl.bm, pl.bn, pl.bk, pl.wm, pl.wn, pl.tm, pl.tn, pl.tk, pl.sg,
                         pl.threads, pl.shared_bytes);
                TH_CHECK(pl.col_tiles * pl.bn >= pl.n && pl.row_tiles * pl.bm >= pl.m &&
                             pl.z == g.groups * pl.splits &&
                             (uint64_t)pl.k_chunk * pl.splits >= pl.k &&
                             (uint64_t)pl.k_chunk * (pl.splits - 1) < pl.k,
                         "%s geometry %d pass %d: the grid covers C and K (%llu x %u x %u, "
                         "%u splits of %u)", devs[d].name, gi, pass,
                         (unsigned long long)pl.col_tiles, pl.row_tiles, pl.z, pl.splits,
                         pl.k_chunk);
                if (pass == (int)CONV_PASS_WEIGHT && devs[d].p == &h100 && gi == 0)
                    TH_CHECK(pl.splits > 1 && kc_conv_plan_workgroups(&pl) >= 132,
                             "%s: the CNN's weight gradient (%llu x %llu, K %llu) splits to "
                             "fill 132 compute units: %u splits, %llu workgroups",
                             devs[d].name, (unsigned long long)pl.m, (unsigned long long)pl.n,
                             (unsigned long long)pl.k, pl.splits,
                             (unsigned long long)kc_conv_plan_workgroups(&pl));
            }
        }
}

int main(int argc, char **argv)
{
    th_init("test_conv_lowp");
    th_parts(argc, argv);
    th_seed(2211);
    if (th_part("plans"))
        check_plans();
    if (th_part("widen")) {
        check_all("cpu", "conv_lowp_widen over conv_im2col", GPU_V_CONV_LOWP_WIDEN, 0);
        check_all("gpu,conv_lowp_widen", "conv_lowp_widen over conv_implicit",
                  GPU_V_CONV_LOWP_WIDEN, 0);
    }
    if (th_part("implicit")) {
        check_all("gpu", "conv_lowp_implicit", GPU_V_CONV_LOWP_IMPLICIT, 0);
        check_all("gpu", "conv_lowp_implicit (narrow tile, split)", GPU_V_CONV_LOWP_IMPLICIT,
                  1);
    }
    if (th_part("frag")) {
        check_all("conv_lowp_frag", "conv_lowp_frag", GPU_V_CONV_LOWP_FRAG, 0);
        check_all("conv_lowp_frag", "conv_lowp_frag (split)", GPU_V_CONV_LOWP_FRAG, 1);
    }
    if (th_part("coopmat"))
        check_coopmat();
    if (th_part("errors"))
        check_errors();
    return th_finish();
}
