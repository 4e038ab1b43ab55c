/* test_gemm_lowp.c - vkt_gemm with 16-bit inputs (fp16, bf16) and fp32 accumulation, C
 * fp32 or 16-bit, against kref_gemm_typed, for every variant of the gemm_f16 and gemm_bf16
 * families the device runs (lavapipe of Mesa 22: gemm_f16_widen, gemm_f16_float,
 * gemm_f16_half, gemm_bf16_widen, gemm_bf16_float; Mesa 26's lavapipe through scripts/shader-toolchain.sh --run also
 * gemm_f16_coopmat: .ci/run sets VKT_TEST_LOWP_ROWS=gemm_f16_coopmat there, which runs
 * only the variants it names and fails unless each of them ran).
 *
 * Tolerances, per output, from the precision (S = sum over k of |a_ik b_kj| of the inputs
 * as stored, u = 2^-24 fp32's unit roundoff): the inputs are exact in fp32 and so are
 * their products (11 + 11 or 8 + 8 significant bits <= 24), so an fp32 accumulation errs
 * only in its K additions and the epilogue's two operations: (K + 2) u (|alpha| S + |beta
 * C|). The cooperative-matrix hardware may truncate instead of rounding: 2u there. fp16
 * arithmetic (gemm_f16_half) rounds each product and each partial sum of a K slab (BK = 16)
 * to fp16 (u16 = 2^-11) before adding the slab's sum in fp32: (BK + 1) u16 S + (K / BK + 2)
 * u S, plus 2^-24 per slab where partial sums turn fp16-subnormal. A 16-bit C adds its
 * rounding, half an ulp: 2^-11 |c| for fp16 (2^-25 absolute below 2^-14), 2^-8 |c| for
 * bf16. The error against the unrounded fp32 inputs is larger (each input's rounding:
 * 2^-11 or 2^-8 relative per factor); vkt_convert's tests hold that rounding.
 *
 * Shapes of 1, primes and off every tile, all four transposes, packed and padded leading
 * dimensions, aligned views (vector reads) and views one element off (element reads),
 * alpha and beta (beta 0 must ignore a C of NaNs), bf16 inputs of magnitude 2^40 (past
 * fp16's range), a K long enough to take hundreds of slabs; guard elements and padding stay
 * untouched. The widening variants also over a gemm_tile that splits K into the scratch
 * buffer holding the widened operands; the device's casts (kcast_matrix) bit for bit
 * against vkt_convert on every 16-bit pattern. Without a device: the kernels' SPIR-V against their C descriptions, the
 * choice on stated devices with and without cooperative matrices, the plans for them, the
 * errors. */
#include "harness.h"
#include "gpu/gpu.h"
#include "kernels/cast.h"
#include "kernels/gemm.h"
#include "kernels/gemm_lowp.h"
#include "kernels/kernel_util.h"
#include "kernels/ref.h"
#include "platform/platform.h"
#include "spec.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static vkt_context *ctx;
static vkt_stream *s;
static const char *row_name;
static gpu_variant row_v;

/* A matrix region in a guarded device buffer: `n` elements of `size` bytes from element
 * `skip` of the buffer region (so the view is skip elements past th_buf's start), the host
 * copy of the whole region. */
typedef struct lmat {
    th_buf buf;
    uint32_t size;
    uint64_t skip, n;
    uint32_t rows, cols, ld; /* ld as given to vkt_gemm (0: packed) */
    unsigned char *host;
} lmat;

static vkt_view lmat_view(const lmat *x)
{
    vkt_view v = th_view(&x->buf);
    v.offset = v.offset * 4 / x->size + x->skip;
    return v;
}

/* Random values in [-scale, scale], rounded to the type; `nan_fill`: all NaN. */
static lmat lmat_new(vkt_dtype t, uint32_t rows, uint32_t cols, uint32_t ld, int aligned,
                     float scale, int nan_fill)
{
    lmat x = {.size = (uint32_t)vkt_dtype_size(t), .rows = rows, .cols = cols, .ld = ld};
    uint32_t l = ld ? ld : cols;
    x.skip = aligned ? 0 : 1;
    x.n = x.skip + (uint64_t)(rows - 1) * l + cols + 5;
    uint64_t floats = (x.n * x.size + 3) / 4;
    x.buf = aligned ? th_buf_create_at(ctx, floats, 64) : th_buf_create(ctx, floats);
    x.host = calloc(floats, 4);
    float *f = th_alloc_floats(x.n);
    for (uint64_t i = 0; i < x.n; i++)
        f[i] = nan_fill ? NAN : th_rand_uniform(-scale, scale);
    vkt_convert(VKT_DTYPE_FP32, f, t, x.host, x.n);
    free(f);
    th_buf_write(&x.buf, (const float *)x.host);
    return x;
}

static void lmat_free(lmat *x)
{
    th_buf_destroy(&x->buf);
    free(x->host);
}

typedef struct lcase {
    int ta, tb;
    uint32_t m, n, k;
    float alpha, beta;
    int pad, aligned;
    vkt_dtype c_type;
    float scale; /* inputs in [-scale, scale] */
} lcase;

/* The tolerance of output (i, j) (see the top): S and |beta C| given. */
static double tolerance(vkt_dtype t, const lcase *c, double sum_abs, double beta_c, double want)
{
    const double u = ldexp(1.0, -24);
    double err;
    if (row_v == GPU_V_GEMM_F16_HALF) {
        double slabs = ceil(c->k / 16.0);
        err = 17.0 * ldexp(1.0, -11) * fabs(c->alpha) * sum_abs +
              (slabs + 2) * u * (fabs(c->alpha) * sum_abs + beta_c) +
              fabs(c->alpha) * slabs * ldexp(1.0, -24);
    } else {
        double coop = row_v == GPU_V_GEMM_F16_COOPMAT || row_v == GPU_V_GEMM_BF16_COOPMAT;
        err = (c->k + 2.0) * (coop ? 2 : 1) * u * (fabs(c->alpha) * sum_abs + beta_c);
    }
    if (c->c_type == VKT_DTYPE_FP16)
        err += fmax(ldexp(fabs(want), -11), ldexp(1.0, -25));
    else if (c->c_type == VKT_DTYPE_BF16)
        err += ldexp(fabs(want), -8) + ldexp(1.0, -133);
    (void)t;
    return err + u * fabs(want);
}

static void run_case(vkt_dtype t, const lcase *c)
{
    uint32_t lda_c = c->ta ? c->m : c->k, ldb_c = c->tb ? c->k : c->n;
    lmat a = lmat_new(t, c->ta ? c->k : c->m, lda_c, c->pad ? lda_c + 3 : 0, c->aligned,
                      c->scale, 0);
    lmat b = lmat_new(t, c->tb ? c->n : c->k, ldb_c, c->pad ? ldb_c + 1 : 0, c->aligned,
                      c->scale, 0);
    lmat cc = lmat_new(c->c_type, c->m, c->n, c->pad ? c->n + 2 : 0, c->aligned, 1.0f,
                       c->beta == 0.0f);
    vkt_gemm_desc d = {.trans_a = c->ta, .trans_b = c->tb, .m = c->m, .n = c->n, .k = c->k,
                       .alpha = c->alpha, .beta = c->beta, .a = lmat_view(&a), .lda = a.ld,
                       .b = lmat_view(&b), .ldb = b.ld, .c = lmat_view(&cc), .ldc = cc.ld,
                       .a_type = t, .b_type = t, .c_type = c->c_type};
    char what[200];
    snprintf(what, sizeof what, "%s %s->%s ta=%d tb=%d M=%u N=%u K=%u alpha=%g beta=%g pad=%d "
             "aligned=%d", row_name, vkt_dtype_name(t), vkt_dtype_name(c->c_type), c->ta, c->tb,
             c->m, c->n, c->k, c->alpha, c->beta, c->pad, c->aligned);
    TH_OK(ctx, vkt_stream_reset(s));
    int ok = TH_OK(ctx, vkt_gemm(s, &d));
    ok = ok && TH_OK(ctx, vkt_stream_run(s));
    if (ok) {
        uint64_t floats = (cc.n * cc.size + 3) / 4;
        unsigned char *got = calloc(floats, 4);
        th_buf_read(&cc.buf, (float *)got);
        /* the reference, unrounded (fp32 C), and S = the same product of |A| and |B| */
        uint32_t ldc = cc.ld ? cc.ld : c->n;
        float *want = th_alloc_floats((uint64_t)c->m * c->n);
        float *absum = th_alloc_floats((uint64_t)c->m * c->n);
        float *abs_a = th_alloc_floats(a.n), *abs_b = th_alloc_floats(b.n);
        for (uint64_t i = 0; i < a.n; i++)
            abs_a[i] = fabsf(kdt_to_float(t, a.host, i));
        for (uint64_t i = 0; i < b.n; i++)
            abs_b[i] = fabsf(kdt_to_float(t, b.host, i));
        for (uint32_t i = 0; i < c->m; i++)
            for (uint32_t j = 0; j < c->n; j++)
                want[(uint64_t)i * c->n + j] =
                    kdt_to_float(c->c_type, cc.host, cc.skip + (uint64_t)i * ldc + j);
        kref_gemm_typed(c->ta, c->tb, c->m, c->n, c->k, c->alpha, t,
                        a.host + a.skip * a.size, a.ld, b.host + b.skip * b.size, b.ld,
                        c->beta, VKT_DTYPE_FP32, want, c->n);
        kref_gemm(c->ta, c->tb, c->m, c->n, c->k, 1.0f, abs_a + a.skip, a.ld, abs_b + b.skip,
                  b.ld, 0.0f, absum, c->n);
        uint64_t bad = 0, first = 0;
        double worst = 0;
        for (uint64_t e = 0; e < cc.n; e++) {
            int64_t off = (int64_t)e - (int64_t)cc.skip;
            uint32_t i = off >= 0 ? (uint32_t)(off / ldc) : 0, j = off >= 0 ? (uint32_t)(off % ldc) : 0;
            int inside = off >= 0 && i < c->m && j < c->n;
            if (!inside) { /* untouched, bit for bit */
                if (memcmp(got + e * cc.size, cc.host + e * cc.size, cc.size) != 0 && !bad++)
                    first = e;
                continue;
            }
            double w = want[(uint64_t)i * c->n + j];
            double beta_c = c->beta != 0.0f
                                ? fabs(c->beta * kdt_to_float(c->c_type, cc.host, e)) : 0.0;
            double tol = tolerance(t, c, absum[(uint64_t)i * c->n + j], beta_c, w);
            double g = kdt_to_float(c->c_type, got, e);
            double err = fabs(g - w);
            if (!(err <= tol) && !bad++)
                first = e;
            if (tol > 0 && err / tol > worst)
                worst = err / tol;
        }
        TH_CHECK(bad == 0, "%s: %llu wrong (first at element %llu of the region), worst error "
                 "%.2f of its tolerance", what, (unsigned long long)bad,
                 (unsigned long long)first, worst);
        th_buf_guards_ok(&cc.buf, what);
        free(got), free(want), free(absum), free(abs_a), free(abs_b);
    }
    lmat_free(&a), lmat_free(&b), lmat_free(&cc);
}

/* The cases every variant runs. */
static void check_row(vkt_dtype t)
{
    static const uint32_t shapes[][3] = {
        {1, 1, 1}, {7, 5, 3}, {33, 17, 19}, {64, 64, 64}, {65, 31, 130}, {3, 97, 41},
        {40, 36, 48},
    };
    static const float scalars[][2] = {{1.0f, 0.0f}, {0.5f, 0.25f}, {-1.5f, 1.0f}};
    uint32_t ns = sizeof shapes / sizeof shapes[0];
    for (uint32_t i = 0; i < ns; i++)
        for (uint32_t tr = 0; tr < 4; tr++) {
            uint32_t v = i * 4 + tr;
            lcase c = {.ta = (int)(tr >> 1), .tb = (int)(tr & 1), .m = shapes[i][0],
                       .n = shapes[i][1], .k = shapes[i][2], .alpha = scalars[v % 3][0],
                       .beta = scalars[v % 3][1], .pad = (int)(v % 2),
                       .aligned = (int)((v / 2) % 2 == 0) || shapes[i][2] == 64,
                       .c_type = v % 3 == 2 ? t : VKT_DTYPE_FP32, .scale = 1.0f};
            if (shapes[i][0] == 64) /* packed and aligned: every vector path */
                c.pad = 0, c.aligned = 1;
            run_case(t, &c);
        }
    /* a long K: hundreds of slabs, accumulated in fp32 */
    lcase longk = {.m = 9, .n = 20, .k = 3001, .alpha = 1.0f, .beta = 0.0f, .aligned = 1,
                   .c_type = VKT_DTYPE_FP32, .scale = 1.0f};
    run_case(t, &longk);
    lcase longk16 = longk;
    longk16.ta = 1, longk16.c_type = t, longk16.beta = -1.0f;
    run_case(t, &longk16);
    if (t == VKT_DTYPE_BF16) { /* past fp16's range: products of 2^80 */
        lcase wide = {.m = 17, .n = 9, .k = 33, .alpha = 1.0f, .beta = 0.5f, .aligned = 1,
                      .c_type = VKT_DTYPE_FP32, .scale = 0x1p40f};
        run_case(t, &wide);
        wide.c_type = VKT_DTYPE_BF16, wide.tb = 1;
        run_case(t, &wide);
    }
}

/* Products of 256 x 256 = 65536, past fp16's 65504: an fp32 accumulation sums 16 of them
 * exactly (1048576); fp16 arithmetic (gemm_f16_half) overflows to infinity, the reason it
 * is chosen only by name (README, "Kernels"). */
static void check_fp16_range(void)
{
    uint16_t h[32];
    float f = 256.0f, c = 0;
    for (int i = 0; i < 32; i++)
        vkt_convert(VKT_DTYPE_FP32, &f, VKT_DTYPE_FP16, &h[i], 1);
    th_buf buf = th_buf_create_at(ctx, 64, 64);
    TH_OK(ctx, vkt_buffer_write(buf.buffer, buf.offset * 4, h, sizeof h));
    vkt_gemm_desc d = {.m = 1, .n = 1, .k = 16, .alpha = 1.0f, .a = {buf.buffer, buf.offset * 2},
                       .b = {buf.buffer, buf.offset * 2 + 16}, .c = {buf.buffer, buf.offset + 32},
                       .a_type = VKT_DTYPE_FP16, .b_type = VKT_DTYPE_FP16};
    TH_OK(ctx, vkt_stream_reset(s));
    if (TH_OK(ctx, vkt_gemm(s, &d)) && TH_OK(ctx, vkt_stream_run(s))) {
        TH_OK(ctx, vkt_buffer_read(buf.buffer, (buf.offset + 32) * 4, &c, 4));
        if (row_v == GPU_V_GEMM_F16_HALF)
            TH_CHECK(isinf(c), "%s: 16 products of 65536 in fp16 arithmetic: inf (%g)",
                     row_name, (double)c);
        else
            TH_CHECK(c == 1048576.0f, "%s: 16 products of 65536 in fp32: 1048576 (%g)",
                     row_name, (double)c);
    }
    th_buf_destroy(&buf);
}

/* Each row of the two families the device runs, forced; with VKT_TEST_LOWP_ROWS only the
 * rows it names, each of which must run. */
static void check_rows(void)
{
    vkt_context *probe = th_context(VKT_KERNELS_AUTO);
    const char *only = getenv("VKT_TEST_LOWP_ROWS");
    for (int v = 0; v < GPU_VARIANT_COUNT; v++) {
        const gpu_variant_row *row = gpu_variant_row_of((gpu_variant)v);
        if (row->family != GPU_FAMILY_GEMM_F16 && row->family != GPU_FAMILY_GEMM_BF16)
            continue;
        char why[256];
        int required = only && strstr(only, row->name);
        if (only && !required)
            continue;
        if (!gpu_variant_runs(row, &probe->profile, why, sizeof why)) {
            printf("  %s: not on this device (it lacks %s)\n", row->name, why);
            TH_CHECK(!required, "%s is required (VKT_TEST_LOWP_ROWS) but '%s' lacks %s",
                     row->name, probe->profile.name, why);
            TH_CHECK(row->needs & GPU_CAP_COOPERATIVE_MATRIX,
                     "%s: only the cooperative-matrix rows may be missing (it lacks %s)",
                     row->name, why);
            continue;
        }
        ctx = th_context_filter(row->name);
        TH_CHECK(ctx->kv[row->family] == (gpu_variant)v, "%s forced: the context runs it",
                 row->name);
        s = th_stream(ctx, 0);
        row_name = row->name, row_v = (gpu_variant)v;
        check_row(row->family == GPU_FAMILY_GEMM_F16 ? VKT_DTYPE_FP16 : VKT_DTYPE_BF16);
        if (row->family == GPU_FAMILY_GEMM_F16)
            check_fp16_range();
        vkt_stream_destroy(s);
        printf("  %s: checked\n", row->name);
    }
}

/* K = 2048 (the char LM's weight gradients at batch 64, context 32) on the gpu style's
 * tiles, which on lavapipe take more slabs than one invocation may loop: the product runs
 * as several dispatches over chunks of K adding into the fp32 C, within the same bound as
 * one pass (the bound grows with K, not with the chunks); a 16-bit C at that K is refused
 * with VKT_ERROR_LIMIT naming the reason. */
static void check_long_k(void)
{
    const char *names[2] = {"gpu,gemm_f16_float", "gpu,gemm_bf16_float"};
    for (int i = 0; i < 2; i++) {
        vkt_dtype t = i ? VKT_DTYPE_BF16 : VKT_DTYPE_FP16;
        ctx = th_context_filter(names[i]);
        gpu_family fam = i ? GPU_FAMILY_GEMM_BF16 : GPU_FAMILY_GEMM_F16;
        row_v = ctx->kv[fam];
        row_name = names[i];
        s = th_stream(ctx, 0);
        kg_lowp_plan pl = kg_lowp_plan_make(&ctx->profile, row_v, 64, 192, 2048);
        uint64_t slabs = (2048 + pl.bk - 1) / pl.bk;
        int splits = slabs * pl.slab_loops > ku_loop_budget(ctx);
        printf("  %s K=2048: %llu slabs of %llu loop iterations, budget %llu: %s\n", names[i],
               (unsigned long long)slabs, (unsigned long long)pl.slab_loops,
               (unsigned long long)ku_loop_budget(ctx), splits ? "split" : "one pass");
        lcase c = {.ta = 1, .m = 64, .n = 192, .k = 2048, .alpha = 1.0f, .beta = 0.0f,
                   .aligned = 1, .c_type = VKT_DTYPE_FP32, .scale = 1.0f};
        run_case(t, &c); /* dW = X^T dZ */
        c.ta = 0, c.tb = 1, c.beta = 1.0f, c.pad = 1, c.aligned = 0, c.k = 2047;
        run_case(t, &c); /* odd K, padded, added to C */
        if (splits) {
            lmat a = lmat_new(t, 2048, 64, 0, 1, 1.0f, 0), b = lmat_new(t, 2048, 192, 0, 1, 1.0f, 0);
            lmat cc = lmat_new(t, 64, 192, 0, 1, 1.0f, 0);
            vkt_gemm_desc d = {.trans_a = 1, .m = 64, .n = 192, .k = 2048, .alpha = 1.0f,
                               .a = lmat_view(&a), .b = lmat_view(&b), .c = lmat_view(&cc),
                               .a_type = t, .b_type = t, .c_type = t};
            TH_OK(ctx, vkt_stream_reset(s));
            TH_STATUS(ctx, vkt_gemm(s, &d), VKT_ERROR_LIMIT);
            TH_CHECK(strstr(vkt_context_errmsg(ctx), "cannot add up the parts") != NULL,
                     "%s: a 16-bit C at K=2048: %s", names[i], vkt_context_errmsg(ctx));
            lmat_free(&a), lmat_free(&b), lmat_free(&cc);
        }
        TH_CHECK(splits || ku_loop_budget(ctx) >= (1ull << 40),
                 "%s: on a device with a loop budget, K=2048 splits (else the case tests "
                 "nothing new)", names[i]);
        vkt_stream_destroy(s);
    }
}

/* gemm_f16_widen under the GPU style's fp32 GEMM planned for 132 compute units: gemm_tile
 * splits K and takes the stream's scratch memory for its partial tiles, the same buffer
 * that holds the widened operands (gemm_lowp.c places them after the partial tiles). */
static void check_widen_split(void)
{
    plat_setenv("VKT_COMPUTE_UNITS", "132");
    ctx = th_context_filter("gpu,gemm_tile,gemm_f16_widen,gemm_bf16_widen");
    plat_setenv("VKT_COMPUTE_UNITS", NULL);
    s = th_stream(ctx, 0);
    static const uint32_t shapes[][3] = {{64, 48, 3001}, {9, 20, 700}, {130, 70, 513}};
    uint32_t split = 0;
    for (uint32_t i = 0; i < 3; i++)
        for (int bf = 0; bf < 2; bf++) {
            row_v = bf ? GPU_V_GEMM_BF16_WIDEN : GPU_V_GEMM_F16_WIDEN;
            row_name = bf ? "gemm_bf16_widen over a split gemm_tile"
                          : "gemm_f16_widen over a split gemm_tile";
            lcase c = {.ta = (int)i % 2, .tb = bf, .m = shapes[i][0], .n = shapes[i][1],
                       .k = shapes[i][2], .alpha = 1.0f, .beta = i == 1 ? 0.5f : 0.0f,
                       .aligned = (int)i != 2, .pad = (int)i == 2,
                       .c_type = bf ? VKT_DTYPE_BF16 : VKT_DTYPE_FP32, .scale = 1.0f};
            split += kg_gemm_plan(&ctx->profile, GPU_V_GEMM_TILE, c.m, c.n, c.k).splits > 1;
            run_case(bf ? VKT_DTYPE_BF16 : VKT_DTYPE_FP16, &c);
        }
    TH_CHECK(split >= 4, "gemm_tile split K under %u of the 6 widened products", split);
    vkt_stream_destroy(s);
}

/* The device's conversions (kcast_matrix, the widening variants' first step) against
 * vkt_convert, bit for bit: every fp16 and every bf16 pattern as a 256 x 256 matrix with
 * padded rows, widened to fp32, narrowed back, and converted to the other 16-bit type;
 * 65536 fp32 values (every exponent, ties) narrowed to both. The padding stays as it was. */
static void check_cast(void)
{
    ctx = th_context(VKT_KERNELS_AUTO);
    s = th_stream(ctx, 0);
    const uint32_t rows = 256, cols = 256, ld = 259, n = (rows - 1) * ld + cols;
    uint32_t *f32 = calloc(n, 4), *back32 = calloc(n, 4);
    uint16_t *h = calloc(n, 2), *got = calloc(n, 2), *want = calloc(n, 2);
    for (uint32_t i = 0; i < n; i++)
        f32[i] = (uint32_t)th_rand_u64();
    th_buf x = th_buf_create(ctx, n), y = th_buf_create(ctx, n);
    for (int t = 0; t < 2; t++) {
        vkt_dtype ht = t ? VKT_DTYPE_BF16 : VKT_DTYPE_FP16, other = t ? VKT_DTYPE_FP16 : VKT_DTYPE_BF16;
        for (uint32_t r = 0; r < rows; r++)
            for (uint32_t c = 0; c < cols; c++)
                h[r * ld + c] = (uint16_t)(r * cols + c);
        for (uint32_t i = 0; i < n; i++) /* the fp32 inputs: a random exponent each, some ties */
            f32[i] = (f32[i] & 0x807fffffu) | ((i * 7u) % 255u) << 23 | (i % 3 ? 0u : 0x8000u);
        /* 16 -> 32 */
        TH_OK(ctx, vkt_buffer_write(x.buffer, x.offset * 4, h, n * 2));
        TH_OK(ctx, vkt_buffer_write(y.buffer, y.offset * 4, f32, n * 4));
        TH_OK(ctx, vkt_stream_reset(s));
        vkt_view xv = {x.buffer, x.offset * 2}, yv = th_view(&y);
        TH_OK(ctx, kcast_matrix(s, ht, xv, ld, VKT_DTYPE_FP32, yv, ld, rows, cols));
        TH_OK(ctx, vkt_stream_run(s));
        TH_OK(ctx, vkt_buffer_read(y.buffer, y.offset * 4, back32, n * 4));
        uint32_t bad = 0;
        for (uint32_t i = 0; i < n; i++) {
            uint32_t w = f32[i];
            if (i % ld < cols)
                vkt_convert(ht, &h[i], VKT_DTYPE_FP32, &w, 1);
            bad += back32[i] != w;
        }
        TH_CHECK(bad == 0, "cast %s -> fp32 of all 65536 patterns, padding kept: %u differ",
                 vkt_dtype_name(ht), bad);
        /* 32 -> 16: the widened patterns back, and the random fp32 values */
        for (int src = 0; src < 2; src++) {
            const uint32_t *in = src ? f32 : back32;
            TH_OK(ctx, vkt_buffer_write(y.buffer, y.offset * 4, in, n * 4));
            TH_OK(ctx, vkt_buffer_write(x.buffer, x.offset * 4, h, n * 2));
            TH_OK(ctx, vkt_stream_reset(s));
            TH_OK(ctx, kcast_matrix(s, VKT_DTYPE_FP32, yv, ld, ht, xv, ld, rows, cols));
            TH_OK(ctx, vkt_stream_run(s));
            TH_OK(ctx, vkt_buffer_read(x.buffer, x.offset * 4, got, n * 2));
            bad = 0;
            for (uint32_t i = 0; i < n; i++) {
                uint16_t w = h[i];
                if (i % ld < cols)
                    vkt_convert(VKT_DTYPE_FP32, &in[i], ht, &w, 1);
                bad += got[i] != w;
            }
            TH_CHECK(bad == 0, "cast fp32 -> %s of %s: %u differ from vkt_convert",
                     vkt_dtype_name(ht), src ? "65536 fp32 values" : "the widened patterns", bad);
        }
        /* 16 -> the other 16 */
        TH_OK(ctx, vkt_buffer_write(x.buffer, x.offset * 4, h, n * 2));
        TH_OK(ctx, vkt_buffer_write(y.buffer, y.offset * 4, h, n * 2));
        TH_OK(ctx, vkt_stream_reset(s));
        vkt_view y16 = {y.buffer, y.offset * 2};
        TH_OK(ctx, kcast_matrix(s, ht, xv, ld, other, y16, ld, rows, cols));
        TH_OK(ctx, vkt_stream_run(s));
        TH_OK(ctx, vkt_buffer_read(y.buffer, y.offset * 4, got, n * 2));
        memcpy(want, h, n * 2);
        for (uint32_t i = 0; i < n; i++)
            if (i % ld < cols)
                vkt_convert(ht, &h[i], other, &want[i], 1);
        TH_CHECK(memcmp(got, want, n * 2) == 0, "cast %s -> %s: as vkt_convert",
                 vkt_dtype_name(ht), vkt_dtype_name(other));
    }
    th_buf_guards_ok(&x, "cast x"), th_buf_guards_ok(&y, "cast y");
    th_buf_destroy(&x), th_buf_destroy(&y);
    free(f32), free(back32), free(h), free(got), free(want);
    vkt_stream_destroy(s);
}

/* Bad element types and views are refused with messages naming them. */
static void check_errors(void)
{
    ctx = th_context(VKT_KERNELS_AUTO);
    s = th_stream(ctx, 0);
    th_buf buf = th_buf_create_at(ctx, 1024, 64);
    vkt_view v = th_view(&buf);
    vkt_gemm_desc d = {.m = 4, .n = 4, .k = 4, .alpha = 1.0f, .a = {v.buffer, 128},
                       .b = {v.buffer, 256}, .c = {v.buffer, 512}, .a_type = VKT_DTYPE_FP16,
                       .b_type = VKT_DTYPE_FP16, .c_type = VKT_DTYPE_FP32};
    struct {
        vkt_dtype a, b, c;
        const char *msg;
    } bad[] = {
        {VKT_DTYPE_FP16, VKT_DTYPE_BF16, VKT_DTYPE_FP32, "A fp16, B bf16, C fp32: not a supported"},
        {VKT_DTYPE_FP32, VKT_DTYPE_FP32, VKT_DTYPE_FP16, "A fp32, B fp32, C fp16"},
        {VKT_DTYPE_FP16, VKT_DTYPE_FP16, VKT_DTYPE_BF16, "A fp16, B fp16, C bf16"},
        {VKT_DTYPE_FP16, (vkt_dtype)9, VKT_DTYPE_FP32, "b_type = 9 is not a vkt_dtype"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        vkt_gemm_desc e = d;
        e.a_type = bad[i].a, e.b_type = bad[i].b, e.c_type = bad[i].c;
        TH_STATUS(ctx, vkt_gemm(s, &e), VKT_ERROR_INVALID_ARGUMENT);
        TH_CHECK(strstr(vkt_context_errmsg(ctx), bad[i].msg) != NULL, "message names '%s': %s",
                 bad[i].msg, vkt_context_errmsg(ctx));
    }
    /* 16-bit elements count in 2 bytes: the buffer holds 2 * (64 + 1024 + 67) of them */
    uint64_t halves = vkt_buffer_size(v.buffer) / 2;
    vkt_gemm_desc e = d;
    e.a.offset = halves - 15; /* 16 elements from there: one too many */
    TH_STATUS(ctx, vkt_gemm(s, &e), VKT_ERROR_INVALID_ARGUMENT);
    TH_CHECK(strstr(vkt_context_errmsg(ctx), "2-byte elements") != NULL,
             "a view past the buffer, in 2-byte elements: %s", vkt_context_errmsg(ctx));
    e.a.offset = 600;                /* bytes [1200, 1232) */
    e.c = (vkt_view){v.buffer, 296}; /* fp32: bytes [1184, 1248) */
    TH_STATUS(ctx, vkt_gemm(s, &e), VKT_ERROR_INVALID_ARGUMENT);
    TH_CHECK(strstr(vkt_context_errmsg(ctx), "C overlaps A") != NULL, "C over A: %s",
             vkt_context_errmsg(ctx));
    e = d;
    e.lda = 3;
    TH_STATUS(ctx, vkt_gemm(s, &e), VKT_ERROR_SHAPE);
    /* a 16-bit product on a device whose filter leaves no cooperative matrices to force */
    vkt_context *forced = NULL;
    vkt_context_options o = {.kernel_variants = "gemm_f16_coopmat"};
    vkt_status st = vkt_context_create(th_instance, &o, &forced);
    if (!(ctx->profile.caps & GPU_CAP_COOPERATIVE_MATRIX)) {
        TH_CHECK(st == VKT_ERROR_NO_DEVICE && strstr(vkt_last_error(), "cooperative matrices"),
                 "gemm_f16_coopmat forced where the device has no cooperative matrices: %s "
                 "(%s)", vkt_status_name(st), vkt_last_error());
    }
    vkt_context_destroy(forced);
    th_buf_destroy(&buf);
    vkt_stream_destroy(s);
}

/* ---- without a device ----------------------------------------------------------------- */

/* Each kernel's SPIR-V (the prebuilt cooperative-matrix modules too) declares the bindings
 * and specialization constants its C description gives. */
static void check_spirv(void)
{
    static const gpu_variant vs[] = {GPU_V_GEMM_F16_FLOAT, GPU_V_GEMM_F16_HALF,
                                     GPU_V_GEMM_F16_COOPMAT, GPU_V_GEMM_BF16_COOPMAT};
    for (size_t i = 0; i < sizeof vs / sizeof vs[0]; i++) {
        const gpu_kernel *k = kg_lowp_kernel(vs[i]);
        char msg[VKT_ERRMSG_SIZE] = "";
        TH_CHECK(k && gpu_kernel_check(k, SPEC_LOWP_COUNT, msg) == VKT_OK,
                 "%s: the SPIR-V agrees with its description: %s", k ? k->name : "?", msg);
        gpu_kernel wrong = *k;
        wrong.n_spec = SPEC_LOWP_COUNT - 1;
        TH_CHECK(gpu_kernel_check(&wrong, SPEC_LOWP_COUNT - 1, msg) == VKT_ERROR_INTERNAL,
                 "%s: one constant fewer is refused", k->name);
    }
}

static const char *chosen(const gpu_variant c[GPU_FAMILY_COUNT], gpu_family f)
{
    const gpu_variant_row *row = gpu_variant_row_of(c[f]);
    return row ? row->name : "(none)";
}

static const gpu_mat_shape k_h100_f16 = {16, 16, 16, GPU_COMPONENT_F16, GPU_COMPONENT_F16,
                                         GPU_COMPONENT_F32, GPU_COMPONENT_F32};
static const gpu_mat_shape k_h100_bf16 = {16, 16, 16, GPU_COMPONENT_BF16, GPU_COMPONENT_BF16,
                                          GPU_COMPONENT_F32, GPU_COMPONENT_F32};

/* The variants chosen on stated devices, with and without what the cooperative-matrix
 * rows need, and the plans there. */
static void check_stated(void)
{
    gpu_profile h100, plain, nobf, lvp26;
    gpu_variant c[GPU_FAMILY_COUNT];
    /* an H100 / H200: f16 x f16 + f32 at 16x16x16, 16x8x16, 16x8x8; bf16 at 16x16x16 */
    gpu_profile_stated(VKT_DEVICE_TYPE_DISCRETE_GPU, 132, 48 * 1024, 32, &h100);
    plain = h100;
    gpu_profile_add_mat(&h100, (gpu_mat_shape){16, 8, 16, 0, 0, 1, 1});
    gpu_profile_add_mat(&h100, k_h100_f16);
    gpu_profile_add_mat(&h100, (gpu_mat_shape){16, 8, 8, 0, 0, 1, 1});
    gpu_profile_add_mat(&h100, (gpu_mat_shape){16, 16, 16, 0, 0, 0, 0}); /* f16 accumulators */
    nobf = h100;
    gpu_profile_add_mat(&h100, k_h100_bf16);
    h100.caps |= GPU_CAP_BFLOAT16;
    TH_OK(NULL, gpu_choose_variants(&h100, NULL, c, NULL));
    TH_CHECK(c[GPU_FAMILY_GEMM_F16] == GPU_V_GEMM_F16_COOPMAT &&
                 c[GPU_FAMILY_GEMM_BF16] == GPU_V_GEMM_BF16_COOPMAT,
             "H100 with cooperative matrices: %s, %s", chosen(c, GPU_FAMILY_GEMM_F16),
             chosen(c, GPU_FAMILY_GEMM_BF16));
    const gpu_mat_shape *m = gpu_mat_for(&h100, GPU_MAT_F16);
    TH_CHECK(m && m->m == 16 && m->n == 16 && m->k == 16 && m->c == GPU_COMPONENT_F32,
             "H100: the f16 shape used is 16x16x16 with fp32 accumulators");
    TH_OK(NULL, gpu_choose_variants(&nobf, NULL, c, NULL));
    TH_CHECK(c[GPU_FAMILY_GEMM_F16] == GPU_V_GEMM_F16_COOPMAT &&
                 c[GPU_FAMILY_GEMM_BF16] == GPU_V_GEMM_BF16_FLOAT,
             "without VK_KHR_shader_bfloat16: %s, %s", chosen(c, GPU_FAMILY_GEMM_F16),
             chosen(c, GPU_FAMILY_GEMM_BF16));
    TH_OK(NULL, gpu_choose_variants(&plain, NULL, c, NULL));
    TH_CHECK(c[GPU_FAMILY_GEMM_F16] == GPU_V_GEMM_F16_FLOAT &&
                 c[GPU_FAMILY_GEMM_BF16] == GPU_V_GEMM_BF16_FLOAT,
             "without cooperative matrices: %s, %s", chosen(c, GPU_FAMILY_GEMM_F16),
             chosen(c, GPU_FAMILY_GEMM_BF16));
    char why[256];
    TH_CHECK(!gpu_variant_runs(gpu_variant_row_of(GPU_V_GEMM_F16_COOPMAT), &plain, why,
                               sizeof why) && strstr(why, "cooperative matrices"),
             "gemm_f16_coopmat without them: lacks '%s'", why);
    /* only f16 accumulators, or sides the shader does not take: no usable shape */
    gpu_profile f16acc = plain;
    gpu_profile_add_mat(&f16acc, (gpu_mat_shape){16, 16, 16, 0, 0, 0, 0});
    gpu_profile_add_mat(&f16acc, (gpu_mat_shape){12, 16, 16, 0, 0, 1, 1});
    TH_CHECK(!gpu_variant_runs(gpu_variant_row_of(GPU_V_GEMM_F16_COOPMAT), &f16acc, why,
                               sizeof why) && strstr(why, "f16 x f16 + f32 -> f32"),
             "only f16 accumulators and a 12-row shape: lacks '%s'", why);
    /* Mesa 26's lavapipe: 8x8x8, subgroups of 8, CPU style */
    gpu_profile_stated(VKT_DEVICE_TYPE_CPU, 2, 32 * 1024, 8, &lvp26);
    gpu_profile_add_mat(&lvp26, (gpu_mat_shape){8, 8, 8, 0, 0, 1, 1});
    TH_OK(NULL, gpu_choose_variants(&lvp26, NULL, c, NULL));
    TH_CHECK(c[GPU_FAMILY_GEMM_F16] == GPU_V_GEMM_F16_WIDEN,
             "lavapipe 26 (CPU style) runs gemm_f16_widen unless told: %s",
             chosen(c, GPU_FAMILY_GEMM_F16));
    TH_CHECK(gpu_variant_runs(gpu_variant_row_of(GPU_V_GEMM_F16_COOPMAT), &lvp26, NULL, 0),
             "lavapipe 26 can run gemm_f16_coopmat (8x8x8)");
    /* the plans: the tile fits, the warps cover it, the fragments the warps */
    struct {
        const char *name;
        const gpu_profile *p;
        gpu_variant v;
        uint32_t m, n, k, bm, tm;
    } plans[] = {
        {"H100 8192^3 f16", &h100, GPU_V_GEMM_F16_COOPMAT, 8192, 8192, 8192, 128, 16},
        {"H100 8192^3 bf16", &h100, GPU_V_GEMM_BF16_COOPMAT, 8192, 8192, 8192, 128, 16},
        {"H100 384x1536 K=16384", &h100, GPU_V_GEMM_F16_COOPMAT, 384, 1536, 16384, 64, 16},
        {"H100 64x192", &h100, GPU_V_GEMM_BF16_COOPMAT, 64, 192, 2048, 32, 16},
        {"lavapipe 26 100x60", &lvp26, GPU_V_GEMM_F16_COOPMAT, 100, 60, 70, 32, 8},
        {"H100 no coopmat", &plain, GPU_V_GEMM_F16_FLOAT, 1024, 1024, 1024, 64, 16},
        {"lavapipe 26 float", &lvp26, GPU_V_GEMM_F16_FLOAT, 100, 60, 70, 32, 16},
    };
    for (size_t i = 0; i < sizeof plans / sizeof plans[0]; i++) {
        kg_lowp_plan pl = kg_lowp_plan_make(plans[i].p, plans[i].v, plans[i].m, plans[i].n,
                                            plans[i].k);
        TH_CHECK(pl.ok && pl.bm == plans[i].bm && pl.tm == plans[i].tm,
                 "%s: tile %ux%u (want %u), fragment %ux%ux%u (want %u)", plans[i].name, pl.bm,
                 pl.bn, plans[i].bm, pl.tm, pl.tn, pl.tk, plans[i].tm);
        TH_CHECK(pl.shared_bytes <= plans[i].p->shared_memory &&
                     pl.threads <= plans[i].p->max_invocations && pl.bm % pl.wm == 0 &&
                     pl.bn % pl.wn == 0 && pl.wm % pl.tm == 0 && pl.wn % pl.tn == 0 &&
                     pl.bk % pl.tk == 0 && pl.bk % 4 == 0 && (pl.tm * pl.tn) % pl.sg == 0 &&
                     pl.threads == (pl.bm / pl.wm) * (pl.bn / pl.wn) * pl.sg,
                 "%s: %u bytes shared, %u threads, warps %ux%u of %u lanes, slab %u",
                 plans[i].name, pl.shared_bytes, pl.threads, pl.wm, pl.wn, pl.sg, pl.bk);
        TH_CHECK(pl.groups[0] == (plans[i].n + pl.bn - 1) / pl.bn &&
                     pl.groups[1] == (plans[i].m + pl.bm - 1) / pl.bm,
                 "%s: the grid covers C (%u x %u)", plans[i].name, pl.groups[1], pl.groups[0]);
    }
}

int main(void)
{
    th_init("test_gemm_lowp");
    check_spirv();
    check_stated();
    check_errors();
    check_cast();
    check_rows();
    check_widen_split();
    check_long_k();
    return th_finish();
}
