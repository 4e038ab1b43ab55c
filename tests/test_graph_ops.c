/* Graph ops. Part 1: the graph layer's kernels (engine/kernels/train_ops.h) against their fp32
 * references on awkward shapes, with guard elements around every output. Part 2: every
 * op of the graph API: (a) its CPU backward (double) against central differences of its
 * CPU forward, (b) the device forward and backward against the CPU reference, fused and
 * unfused, and (c) a step in VKT_CHECK mode, which must find nothing. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ctrl.h"
#include "kernels/train_ops.h"
#include "graph/graph.h"
#include "dtype.h"
#include "harness.h"
#include "op_case.h"

static vkt_context *g_ctx;

/* ---- part 1: kernels ---------------------------------------------------------- */

typedef struct kb {
    th_buf b;
    float *host;
} kb;

/* 1: buffers start 16-byte aligned (the kernels' vec4 paths); 0: at odd offsets. */
static int g_aligned;

static kb kb_new(uint64_t n, float lo, float hi)
{
    kb k = {g_aligned ? th_buf_create_at(g_ctx, n, 64) : th_buf_create(g_ctx, n),
            th_alloc_floats(n)};
    th_fill_uniform(k.host, n, lo, hi);
    th_buf_write(&k.b, k.host);
    return k;
}

static void kb_free(kb *k)
{
    th_buf_destroy(&k->b);
    free(k->host);
}

/* Reads the device result, checks guards, compares with `want`. */
static void kb_expect(kb *k, const float *want, const char *what, float rtol, float atol)
{
    float *got = th_alloc_floats(k->b.n);
    th_buf_read(&k->b, got);
    th_compare(what, got, want, k->b.n, rtol, atol);
    th_buf_guards_ok(&k->b, what);
    free(got);
}

static void run(vkt_stream *s)
{
    TH_OK(g_ctx, vkt_stream_run(s));
    TH_OK(g_ctx, vkt_stream_reset(s));
}

static const vkt_unary_op k_acts[] = {VKT_UNARY_SCALE, VKT_UNARY_RELU, VKT_UNARY_LEAKY_RELU,
                                      VKT_UNARY_GELU, VKT_UNARY_TANH, VKT_UNARY_SIGMOID,
                                      VKT_UNARY_SILU};

static void test_bias_act(vkt_stream *s)
{
    const uint32_t shapes[][2] = {{1, 1}, {1, 37}, {13, 7}, {64, 10}, {1, 4}, {13, 8},
                                  {64, 12}};
    for (unsigned si = 0; si < 7; si++)
        for (unsigned ai = 0; ai < sizeof k_acts / sizeof k_acts[0]; ai++)
            for (int mode = 0; mode < 4; mode++) { /* bit 0: bias, bit 1: separate y */
                uint32_t r = shapes[si][0], c = shapes[si][1];
                vkt_unary_op op = k_acts[ai];
                float alpha = op == VKT_UNARY_SCALE ? 1.0f : 0.1f;
                kb pre = kb_new((uint64_t)r * c, -3, 3), b = kb_new(c, -1, 1);
                kb y = kb_new((uint64_t)r * c, 0, 0);
                vkt_view bv = th_view(&b.b), yv = th_view(&y.b);
                TH_OK(g_ctx, kt_bias_act(s, op, alpha, th_view(&pre.b), mode & 1 ? &bv : NULL,
                                         mode & 2 ? &yv : NULL, r, c));
                run(s);
                kt_ref_bias_act(op, alpha, pre.host, mode & 1 ? b.host : NULL,
                                mode & 2 ? y.host : NULL, r, c);
                char what[96];
                snprintf(what, sizeof what, "bias_act %s %ux%u mode %d", vkt_unary_op_name(op),
                         r, c, mode);
                kb_expect(&pre, pre.host, what, 1e-5f, 1e-6f);
                if (mode & 2)
                    kb_expect(&y, y.host, what, 1e-5f, 1e-6f);
                kb_free(&pre);
                kb_free(&b);
                kb_free(&y);
            }
}

static void test_bias_act_backward(vkt_stream *s)
{
    /* The last two are taller than llvmpipe's loop budget of 65535 iterations. */
    const uint32_t shapes[][2] = {{1, 1}, {1, 29}, {17, 5}, {128, 10}, {1, 4}, {17, 8},
                                  {131, 264}, {3, 260}, {70001, 3}, {70001, 4}};
    for (unsigned si = 0; si < 10; si++)
        for (unsigned ai = 0; ai < sizeof k_acts / sizeof k_acts[0]; ai++)
            for (int mode = 0; mode < 8; mode++) { /* bits: from_y, beta 1, db */
                uint32_t r = shapes[si][0], c = shapes[si][1];
                vkt_unary_op op = k_acts[ai];
                int from_y = mode & 1;
                if ((from_y && !kt_act_grad_from_y(op, 0.1f)) || (r > 1000 && ai > 1))
                    continue;
                float alpha = op == VKT_UNARY_SCALE ? 0.5f : 0.1f, beta = mode & 2 ? 1.0f : 0.0f;
                kb v = kb_new((uint64_t)r * c, from_y ? 0.01f : -3.0f, from_y ? 0.99f : 3.0f);
                kb dy = kb_new((uint64_t)r * c, -1, 1), dz = kb_new((uint64_t)r * c, -1, 1);
                kb db = kb_new(c, -1, 1);
                vkt_view dzv = th_view(&dz.b), dbv = th_view(&db.b);
                TH_OK(g_ctx, kt_bias_act_backward(s, op, alpha, from_y, VKT_DTYPE_FP32, th_view(&v.b),
                                                  th_view(&dy.b), &dzv, beta,
                                                  mode & 4 ? &dbv : NULL, beta, r, c));
                run(s);
                kt_ref_bias_act_backward(op, alpha, from_y, v.host, dy.host, dz.host, beta,
                                         mode & 4 ? db.host : NULL, beta, r, c);
                char what[96];
                snprintf(what, sizeof what, "bias_act_backward %s %ux%u mode %d",
                         vkt_unary_op_name(op), r, c, mode);
                kb_expect(&dz, dz.host, what, 1e-5f, 1e-6f);
                /* a float sum of `rows` terms of size ~1: error grows with rows */
                kb_expect(&db, db.host, what, 1e-4f, 1e-5f + 3e-8f * (float)r);
                kb_free(&v);
                kb_free(&dy);
                kb_free(&dz);
                kb_free(&db);
            }
    /* In place over dy, bias gradient only. */
    kb y = kb_new(13 * 7, 0.01f, 0.99f), dy = kb_new(13 * 7, -1, 1), db = kb_new(7, 0, 0);
    vkt_view dyv = th_view(&dy.b), dbv = th_view(&db.b);
    TH_OK(g_ctx, kt_bias_act_backward(s, VKT_UNARY_SIGMOID, 0, 1, VKT_DTYPE_FP32, th_view(&y.b), dyv,
                                      &dyv, 0,
                                      &dbv, 0, 13, 7));
    run(s);
    kt_ref_bias_act_backward(VKT_UNARY_SIGMOID, 0, 1, y.host, dy.host, dy.host, 0, db.host, 0, 13,
                             7);
    kb_expect(&dy, dy.host, "bias_act_backward in place", 1e-5f, 1e-6f);
    kb_expect(&db, db.host, "bias_act_backward in place db", 1e-4f, 1e-5f);
    TH_OK(g_ctx, kt_bias_act_backward(s, VKT_UNARY_SCALE, 1, 1, VKT_DTYPE_FP32, dyv, dyv, NULL, 0,
                                      &dbv, 0, 13,
                                      7));
    run(s);
    kt_ref_bias_act_backward(VKT_UNARY_SCALE, 1, 1, dy.host, dy.host, NULL, 0, db.host, 0, 13, 7);
    kb_expect(&db, db.host, "bias gradient alone", 1e-4f, 1e-5f);
    kb_free(&y);
    kb_free(&dy);
    kb_free(&db);
}

/* kt_act_rebuild16 from kt_bias_act_keep16's 16-bit pre (at `skip`) into a fresh 16-bit
 * buffer at the same skip: bit for bit keep16's fp32 y (`y_gpu`) rounded to `type` (the
 * property a product's rebuilt 16-bit x relies on), its padding half zeroed and nothing
 * before it touched; and within one 16-bit rounding of the reference. */
static void check_rebuild16(vkt_stream *s, vkt_unary_op op, float alpha, vkt_dtype type,
                            th_half *pre, const float *y_gpu, uint32_t r, uint32_t c,
                            const char *what)
{
    uint64_t n = (uint64_t)r * c, skip = pre->skip, words = (skip + n + 1) / 2;
    th_half dst = th_half_new(g_ctx, type, n, skip, -1, 1);
    TH_OK(g_ctx, kt_act_rebuild16(s, op, alpha, type, th_half_view(pre), th_half_view(&dst),
                                  r, c));
    run(s);
    uint16_t *got = calloc(words * 2, 2), *want = calloc(n, 2), *pre_all = calloc(words * 2, 2);
    TH_CHECK(got && want && pre_all, "out of memory");
    th_buf_read(&dst.b, (float *)got);
    th_buf_read(&pre->b, (float *)pre_all); /* keep16's output */
    kt_ref_act_rebuild16(op, alpha, type, pre_all + skip, want, r, c);
    uint64_t bad = 0, far = 0;
    for (uint64_t i = 0; i < skip; i++)
        bad += got[i] != dst.bits[i];
    for (uint64_t i = 0; i < n; i++) {
        uint32_t bits;
        memcpy(&bits, &y_gpu[i], 4);
        uint16_t h = (uint16_t)(type == VKT_DTYPE_BF16 ? dtype_f32_to_bf16(bits)
                                                       : dtype_f32_to_f16(bits));
        bad += got[skip + i] != h;
        double g = type == VKT_DTYPE_BF16 ? dtype_bf16_value(got[skip + i])
                                          : dtype_f16_value(got[skip + i]);
        double w = type == VKT_DTYPE_BF16 ? dtype_bf16_value(want[i]) : dtype_f16_value(want[i]);
        far += fabs(g - w) > ldexp(fabs(w), type == VKT_DTYPE_BF16 ? -7 : -10) + 1e-7;
    }
    if ((skip + n) % 2)
        bad += got[skip + n] != 0;
    TH_CHECK(bad == 0, "%s rebuild16: %llu 16-bit elements differ from r(y)", what,
             (unsigned long long)bad);
    TH_CHECK(far == 0, "%s rebuild16: %llu elements past one rounding of the reference", what,
             (unsigned long long)far);
    th_buf_guards_ok(&dst.b, what);
    free(got);
    free(want);
    free(pre_all);
    th_half_free(&dst);
}

/* kt_bias_act_keep16: pre = r(product + b), its 16-bit bits exactly as the reference
 * rounds them (the same fp32 sum, the same integer rounding of shaders/dtype.h), and
 * y = f(widen(pre)) as the reference's (the activation of the rounded value); at an even
 * skip with its padding half zeroed and nothing before it touched; an odd offset refused.
 * kt_act_rebuild16 from that pre (check_rebuild16). Then kt_bias_act_backward reading those
 * 16 bits (and 16-bit values at odd offsets) against the fp32 reference on the widened
 * values. */
static void test_bias_act_keep16(vkt_stream *s)
{
    const uint32_t shapes[][2] = {{1, 1}, {1, 37}, {13, 7}, {64, 10}, {3, 260}, {70001, 3}};
    const vkt_unary_op ops[] = {VKT_UNARY_GELU, VKT_UNARY_SILU, VKT_UNARY_LEAKY_RELU,
                                VKT_UNARY_SCALE};
    const vkt_dtype types[] = {VKT_DTYPE_FP16, VKT_DTYPE_BF16};
    for (unsigned si = 0; si < 6; si++)
        for (unsigned oi = 0; oi < 4; oi++)
            for (int mode = 0; mode < 8; mode++) { /* bit 0: bias, bit 1: bf16, bit 2: skip 2 */
                uint32_t r = shapes[si][0], c = shapes[si][1];
                uint64_t n = (uint64_t)r * c, skip = mode & 4 ? 2 : 0;
                if (n > 1000 && oi > 0)
                    continue;
                vkt_unary_op op = ops[oi];
                vkt_dtype type = types[(mode >> 1) & 1];
                float alpha = op == VKT_UNARY_SCALE ? 1.0f : -0.1f;
                kb y = kb_new(n, -300, 300), b = kb_new(c, -1, 1);
                th_half pre = th_half_new(g_ctx, type, n, skip, -1, 1);
                vkt_view bv = th_view(&b.b);
                TH_OK(g_ctx, kt_bias_act_keep16(s, op, alpha, type, th_view(&y.b),
                                                mode & 1 ? &bv : NULL, th_half_view(&pre), r, c));
                run(s);
                uint16_t *want = calloc(n, 2);
                TH_CHECK(want != NULL, "out of memory");
                kt_ref_bias_act_keep16(op, alpha, type, y.host, mode & 1 ? b.host : NULL, want,
                                       r, c);
                char what[96];
                snprintf(what, sizeof what, "bias_act_keep16 %s %s %ux%u mode %d",
                         vkt_unary_op_name(op), vkt_dtype_name(type), r, c, mode);
                float *y_gpu = calloc(n, sizeof *y_gpu);
                TH_CHECK(y_gpu != NULL, "out of memory");
                th_buf_read(&y.b, y_gpu);
                kb_expect(&y, y.host, what, 1e-5f, 1e-6f);
                check_rebuild16(s, op, alpha, type, &pre, y_gpu, r, c, what);
                free(y_gpu);
                uint64_t words = (skip + n + 1) / 2;
                uint16_t *got = calloc(words * 2, 2);
                TH_CHECK(got != NULL, "out of memory");
                th_buf_read(&pre.b, (float *)got);
                uint64_t bad = 0;
                for (uint64_t i = 0; i < skip; i++)
                    bad += got[i] != pre.bits[i];
                for (uint64_t i = 0; i < n; i++)
                    bad += got[skip + i] != want[i];
                if ((skip + n) % 2)
                    bad += got[skip + n] != 0;
                TH_CHECK(bad == 0, "%s: %llu 16-bit elements differ", what,
                             (unsigned long long)bad);
                th_buf_guards_ok(&pre.b, what);
                free(got);
                free(want);
                kb_free(&y);
                kb_free(&b);
                th_half_free(&pre);
            }
    kb y = kb_new(12, -1, 1);
    th_half odd = th_half_new(g_ctx, VKT_DTYPE_BF16, 12, 1, -1, 1);
    TH_CHECK(kt_bias_act_keep16(s, VKT_UNARY_GELU, 0, VKT_DTYPE_BF16, th_view(&y.b), NULL,
                                th_half_view(&odd), 3, 4) == VKT_ERROR_INVALID_ARGUMENT,
             "an odd 16-bit offset is refused");
    TH_CHECK(kt_bias_act_keep16(s, VKT_UNARY_GELU, 0, VKT_DTYPE_FP32, th_view(&y.b), NULL,
                                th_view(&y.b), 3, 4) == VKT_ERROR_INVALID_ARGUMENT,
             "an fp32 pre-activation type is refused");
    TH_OK(g_ctx, vkt_stream_reset(s));
    kb_free(&y);
    th_half_free(&odd);

    const uint32_t bshapes[][2] = {{1, 1}, {1, 29}, {17, 5}, {131, 264}, {70001, 3}};
    for (unsigned si = 0; si < 5; si++)
        for (int mode = 0; mode < 16; mode++) { /* bits: bf16, odd skip, beta 1, db */
            uint32_t r = bshapes[si][0], c = bshapes[si][1];
            uint64_t n = (uint64_t)r * c;
            vkt_dtype type = mode & 1 ? VKT_DTYPE_BF16 : VKT_DTYPE_FP16;
            float beta = mode & 4 ? 1.0f : 0.0f;
            th_half v = th_half_new(g_ctx, type, n, mode & 2 ? 3 : 0, -3, 3);
            kb dy = kb_new(n, -1, 1), dz = kb_new(n, -1, 1), db = kb_new(c, -1, 1);
            vkt_view dzv = th_view(&dz.b), dbv = th_view(&db.b);
            TH_OK(g_ctx, kt_bias_act_backward(s, VKT_UNARY_GELU, 0, 0, type, th_half_view(&v),
                                              th_view(&dy.b), &dzv, beta,
                                              mode & 8 ? &dbv : NULL, beta, r, c));
            run(s);
            float *wide = th_alloc_floats(n);
            for (uint64_t i = 0; i < n; i++)
                wide[i] = (float)v.stored[i];
            kt_ref_bias_act_backward(VKT_UNARY_GELU, 0, 0, wide, dy.host, dz.host, beta,
                                     mode & 8 ? db.host : NULL, beta, r, c);
            char what[96];
            snprintf(what, sizeof what, "bias_act_backward 16-bit v %s %ux%u mode %d",
                     vkt_dtype_name(type), r, c, mode);
            kb_expect(&dz, dz.host, what, 1e-5f, 1e-6f);
            kb_expect(&db, db.host, what, 1e-4f, 1e-5f + 3e-8f * (float)r);
            free(wide);
            th_half_free(&v);
            kb_free(&dy);
            kb_free(&dz);
            kb_free(&db);
        }
}

static void test_sce(vkt_stream *s)
{
    const uint32_t shapes[][2] = {{1, 1}, {1, 10}, {7, 3}, {131, 10}, {5, 257}, {70001, 3}};
    for (unsigned si = 0; si < 6; si++)
        for (int mode = 0; mode < 3; mode++) {
            uint32_t r = shapes[si][0], c = shapes[si][1];
            kb z = kb_new((uint64_t)r * c, -8, 8), lab = kb_new(r, 0, 0);
            kb loss = kb_new(1, 0, 0), p = kb_new((uint64_t)r * c, 0, 0);
            int32_t *labels = (int32_t *)lab.host;
            for (uint32_t i = 0; i < r; i++)
                labels[i] = (int32_t)(th_rand_u64() % c);
            th_buf_write(&lab.b, lab.host);
            vkt_view pv = th_view(&p.b);
            TH_OK(g_ctx, kt_sce(s, th_view(&z.b), th_view(&lab.b), th_view(&loss.b), mode,
                                mode ? &pv : NULL, r, c));
            run(s);
            kt_ref_sce(z.host, labels, loss.host, mode, p.host, r, c);
            char what[64];
            snprintf(what, sizeof what, "sce %ux%u mode %d", r, c, mode);
            kb_expect(&loss, loss.host, what, 1e-5f, 1e-6f);
            if (mode)
                kb_expect(&p, p.host, what, 1e-5f, 1e-7f);
            /* backward from the probabilities */
            if (mode == 1) {
                kb dl = kb_new(1, 0.5f, 2.0f), dz = kb_new((uint64_t)r * c, -1, 1);
                for (int beta = 0; beta < 2; beta++) {
                    TH_OK(g_ctx, kt_sce_backward(s, th_view(&p.b), th_view(&lab.b),
                                                 th_view(&dl.b), th_view(&dz.b), (float)beta, r,
                                                 c));
                    run(s);
                    kt_ref_sce_backward(p.host, labels, dl.host, dz.host, (float)beta, r, c);
                    kb_expect(&dz, dz.host, "sce_backward", 1e-5f, 1e-6f);
                }
                kb_free(&dl);
                kb_free(&dz);
            }
            kb_free(&z);
            kb_free(&lab);
            kb_free(&loss);
            kb_free(&p);
        }
    /* One workgroup takes all rows: past the device's loop budget it refuses clearly. */
    vkt_device_info info;
    vkt_context_device_info(g_ctx, &info);
    if (strstr(info.name, "llvmpipe")) {
        kb z = kb_new(10001, 0, 1), lab = kb_new(1, 0, 0), loss = kb_new(1, 0, 0);
        TH_STATUS(g_ctx, kt_sce(s, th_view(&z.b), th_view(&lab.b), th_view(&loss.b), 0, NULL, 1,
                                10001), VKT_ERROR_LIMIT);
        TH_CHECK(strstr(vkt_context_errmsg(g_ctx), "kt_sce"), "the message names the kernel: %s",
                 vkt_context_errmsg(g_ctx));
        TH_OK(g_ctx, vkt_stream_reset(s));
        kb_free(&z);
        kb_free(&lab);
        kb_free(&loss);
    }
}

static void test_mse(vkt_stream *s)
{
    const uint64_t sizes[] = {1, 7, 1031};
    for (unsigned si = 0; si < 3; si++) {
        uint64_t n = sizes[si];
        kb a = kb_new(n, -2, 2), b = kb_new(n, -2, 2), l = kb_new(1, 0, 0);
        kb dl = kb_new(1, 0.5f, 1.5f), d = kb_new(n, -1, 1);
        TH_OK(g_ctx, kt_mse(s, th_view(&a.b), th_view(&b.b), th_view(&l.b), n));
        run(s);
        kt_ref_mse(a.host, b.host, l.host, n);
        kb_expect(&l, l.host, "mse", 1e-5f, 1e-7f);
        for (int beta = 0; beta < 2; beta++) {
            float sign = beta ? -1.0f : 1.0f;
            TH_OK(g_ctx, kt_mse_backward(s, th_view(&a.b), th_view(&b.b), th_view(&dl.b),
                                         th_view(&d.b), sign, (float)beta, n));
            run(s);
            kt_ref_mse_backward(a.host, b.host, dl.host, d.host, sign, (float)beta, n);
            kb_expect(&d, d.host, "mse_backward", 1e-5f, 1e-7f);
        }
        kb_free(&a);
        kb_free(&b);
        kb_free(&l);
        kb_free(&dl);
        kb_free(&d);
    }
}

static void test_copies(vkt_stream *s)
{
    /* axpby, beta 0 on a NaN-filled output must not read it */
    const uint64_t sizes[3] = {1009, 1012, 4};
    for (int k = 0; k < 3; k++) {
        uint64_t n = sizes[k];
        kb x = kb_new(n, -1, 1), y = kb_new(n, 0, 0);
        for (uint64_t i = 0; i < n; i++)
            y.host[i] = NAN;
        th_buf_write(&y.b, y.host);
        TH_OK(g_ctx, kt_axpby(s, -2.5f, th_view(&x.b), 0.0f, th_view(&y.b), n));
        TH_OK(g_ctx, kt_axpby(s, 1.0f, th_view(&x.b), 1.0f, th_view(&y.b), n));
        run(s);
        for (uint64_t i = 0; i < n; i++)
            y.host[i] = (float)(-2.5 * x.host[i] + x.host[i]);
        kb_expect(&y, y.host, "axpby", 1e-6f, 1e-7f);
        kb_free(&x);
        kb_free(&y);
    }
    /* slice/concat blocks: [5, 11] rows, columns [3, 3+4) into a [5, 4] destination and back */
    for (int beta = 0; beta < 2; beta++) {
        kb src = kb_new(55, -1, 1), dst = kb_new(20, -1, 1);
        TH_OK(g_ctx, kt_slice(s, th_view(&src.b), 11, 3, th_view(&dst.b), 4, 0, 5, 4, 1.5f,
                              (float)beta));
        run(s);
        kt_ref_slice(src.host, 11, 3, dst.host, 4, 0, 5, 4, 1.5f, (float)beta);
        kb_expect(&dst, dst.host, "slice", 1e-6f, 1e-7f);
        TH_OK(g_ctx, kt_slice(s, th_view(&dst.b), 4, 0, th_view(&src.b), 11, 6, 5, 4, 1.0f,
                              (float)beta));
        run(s);
        kt_ref_slice(dst.host, 4, 0, src.host, 11, 6, 5, 4, 1.0f, (float)beta);
        kb_expect(&src, src.host, "slice back", 1e-6f, 1e-7f);
        kb_free(&src);
        kb_free(&dst);
    }
    /* broadcast [3, 1, 7] -> [3, 5, 7]; transpose [13, 1] and [7, 9] */
    for (int beta = 0; beta < 2; beta++) {
        kb bx = kb_new(21, -1, 1), by = kb_new(105, -1, 1);
        TH_OK(g_ctx, kt_broadcast(s, th_view(&bx.b), th_view(&by.b), 3, 5, 7, 0.2f, (float)beta));
        run(s);
        kt_ref_broadcast(bx.host, by.host, 3, 5, 7, 0.2f, (float)beta);
        kb_expect(&by, by.host, "broadcast", 1e-6f, 1e-7f);
        kb_free(&bx);
        kb_free(&by);
        const uint32_t tshape[][2] = {{13, 1}, {7, 9}, {1, 1}};
        for (unsigned t = 0; t < 3; t++) {
            uint32_t r = tshape[t][0], c = tshape[t][1];
            kb tx = kb_new((uint64_t)r * c, -1, 1), ty = kb_new((uint64_t)r * c, -1, 1);
            TH_OK(g_ctx, kt_transpose(s, th_view(&tx.b), th_view(&ty.b), r, c, 1.0f,
                                      (float)beta));
            run(s);
            kt_ref_transpose(tx.host, ty.host, r, c, 1.0f, (float)beta);
            kb_expect(&ty, ty.host, "transpose", 1e-6f, 1e-7f);
            kb_free(&tx);
            kb_free(&ty);
        }
    }
}

/* The elements [k, N) of x as a view of their own (a part of a split batch). */
static vkt_view tail_view(const kb *x, uint64_t k)
{
    vkt_view v = th_view(&x->b);
    v.offset += k;
    return v;
}

static void test_dropout_kernel(vkt_stream *s)
{
    enum { N = 100003, K = 40001 };
    kb x = kb_new(N, 0.5f, 1.5f), y = kb_new(N, -1, 1), ctrl = kb_new(CTRL_KEY_WORDS, 0, 0);
    float p = 0.3f;
    uint64_t seed = 0x1234567890ull;
    enum { CASES = 6 };
    const uint64_t steps[CASES] = {0, 5, 0x300000007ull, 5, 9, 11};
    /* the global index of element 0, i_off + row0 * row_units (row0 read from ctrl, as a
     * pipeline stage's micro-batch row base): the whole batch, a later part, one past
     * 2^32, one that wraps 2^32 inside the tensor; then a row base alone, and a row base
     * whose product wraps 2^32 inside the tensor */
    const uint64_t offs[CASES] = {0, 777, 0x500000003ull, 0xFFFFFF00ull, 0, 5};
    const uint32_t row0s[CASES] = {0, 3, 0, 0, 37, 2};
    const uint64_t units[CASES] = {0, 1000, 0, 1, 2711, 0x7FFFFF80ull};
    for (int k = 0; k < CASES; k++) {
        uint32_t words[CTRL_KEY_WORDS] = {0};
        words[0] = (uint32_t)steps[k];
        words[1] = (uint32_t)(steps[k] >> 32);
        words[CTRL_ROW0 - CTRL_STEP] = row0s[k];
        uint64_t st = steps[k], off = offs[k] + row0s[k] * units[k];
        TH_OK(g_ctx, vkt_buffer_write(ctrl.b.buffer, ctrl.b.offset * 4, words, sizeof words));
        TH_OK(g_ctx, kt_dropout(s, th_view(&x.b), th_view(&ctrl.b), th_view(&y.b), N, p, seed,
                                offs[k], units[k], 0.0f));
        run(s);
        kt_ref_dropout(x.host, st, y.host, N, p, seed, off, 0.0f);
        char what[96];
        snprintf(what, sizeof what, "dropout matches its C reference (offset %llu)",
                 (unsigned long long)off);
        kb_expect(&y, y.host, what, 1e-6f, 0);
        uint64_t zeros = 0;
        for (uint64_t i = 0; i < N; i++)
            zeros += y.host[i] == 0.0f;
        double frac = (double)zeros / N;
        TH_CHECK(fabs(frac - p) < 0.01, "dropout zeroes %.4f of the elements, p = %.2f", frac, p);
    }
    /* The batch split at element K into two dispatches, the second keyed from K, gives
     * the whole batch's output (step 5 still in ctrl); keyed from 0 it would not. */
    float *whole = th_alloc_floats(N);
    kt_ref_dropout(x.host, 5, whole, N, p, seed, 0, 0.0f);
    uint32_t words[CTRL_KEY_WORDS] = {5, 0};
    TH_OK(g_ctx, vkt_buffer_write(ctrl.b.buffer, ctrl.b.offset * 4, words, sizeof words));
    TH_OK(g_ctx, kt_dropout(s, th_view(&x.b), th_view(&ctrl.b), th_view(&y.b), K, p, seed, 0,
                            0, 0.0f));
    TH_OK(g_ctx, kt_dropout(s, tail_view(&x, K), th_view(&ctrl.b), tail_view(&y, K), N - K, p,
                            seed, K, 0, 0.0f));
    run(s);
    kb_expect(&y, whole, "dropout in two parts keyed by the global index", 0, 0);
    kt_ref_dropout(x.host + K, 5, y.host, N - K, p, seed, 0, 0.0f);
    TH_CHECK(memcmp(y.host, whole + K, (N - K) * sizeof *whole) != 0,
             "the second part keyed from 0 draws another mask");
    free(whole);
    kb_free(&x);
    kb_free(&y);
    kb_free(&ctrl);
}

/* ---- part 2: ops through graphs (tests/op_case.h) ---------------------------- */

static void ops_matmul_linear(void)
{
    op_case c = begin("matmul [7,13]x[13,5]");
    finish(&c, vkt_matmul(c.g, P(&c, 2, 7, 13, 0), P(&c, 2, 13, 5, 0)));
    run_case(&c);
    c = begin("matmul [1,3]x[3,1]");
    finish(&c, vkt_matmul(c.g, P(&c, 2, 1, 3, 0), P(&c, 2, 3, 1, 0)));
    run_case(&c);
    c = begin("linear [7,13] -> 11");
    finish(&c, vkt_linear(c.g, P(&c, 2, 7, 13, 0), P(&c, 2, 13, 11, 0), P(&c, 1, 11, 0, 0)));
    run_case(&c);
    c = begin("linear without bias, batch 1");
    finish(&c, vkt_linear(c.g, P(&c, 2, 1, 5, 0), P(&c, 2, 5, 3, 0), NULL));
    run_case(&c);
    static const char *names[] = {"relu", "leaky_relu 0.1", "leaky_relu -0.2", "gelu", "tanh",
                                  "sigmoid", "silu"};
    for (int a = 0; a < 14; a++) {
        /* odd widths (scalar kernels), then multiples of 4 (vec4 kernels) */
        uint32_t rows = a < 7 ? 11 : 9, in = a < 7 ? 7 : 8, out = a < 7 ? 13 : 12;
        char name[64];
        snprintf(name, sizeof name, "linear + %s [%u,%u] -> %u", names[a % 7], rows, in, out);
        c = begin(name);
        vkt_tensor *z = vkt_linear(c.g, P(&c, 2, rows, in, 0), P(&c, 2, in, out, 0),
                                   a == 2 ? NULL : P(&c, 1, out, 0, 0));
        vkt_tensor *y = a % 7 == 0   ? vkt_relu(c.g, z)
                        : a % 7 == 1 ? vkt_leaky_relu(c.g, z, 0.1f)
                        : a % 7 == 2 ? vkt_leaky_relu(c.g, z, -0.2f)
                        : a % 7 == 3 ? vkt_gelu(c.g, z)
                        : a % 7 == 4 ? vkt_tanh(c.g, z)
                        : a % 7 == 5 ? vkt_sigmoid(c.g, z)
                                     : vkt_silu(c.g, z);
        finish(&c, y);
        run_case(&c);
    }
}

static void ops_elementwise(void)
{
    static const uint32_t shapes[][2][4] = {
        /* ndim a, dims a..., then ndim b, dims b... */
        {{2, 7, 5, 0}, {1, 5, 0, 0}},
        {{2, 7, 1, 0}, {2, 1, 5, 0}},
        {{3, 3, 1, 5}, {2, 4, 1, 0}},
        {{2, 3, 7, 0}, {2, 3, 7, 0}},
        {{0, 0, 0, 0}, {2, 2, 3, 0}},
    };
    for (int op = 0; op < 3; op++)
        for (int si = 0; si < 5; si++) {
            char name[64];
            snprintf(name, sizeof name, "%s broadcast case %d", op == 0 ? "add" : op == 1 ? "sub" : "mul",
                     si);
            op_case c = begin(name);
            const uint32_t *a = shapes[si][0], *b = shapes[si][1];
            vkt_tensor *x = P(&c, a[0], a[1], a[2], a[3]), *w = P(&c, b[0], b[1], b[2], b[3]);
            finish(&c, op == 0 ? vkt_add(c.g, x, w) : op == 1 ? vkt_sub(c.g, x, w)
                                                              : vkt_mul(c.g, x, w));
            run_case(&c);
        }
    op_case c = begin("scale");
    finish(&c, vkt_scale(c.g, P(&c, 2, 7, 13, 0), -1.75f));
    run_case(&c);
    c = begin("scale [5,8], a tensor used twice (vec4 add into)");
    vkt_tensor *q = vkt_tanh(c.g, P(&c, 2, 5, 8, 0));
    finish(&c, vkt_add(c.g, vkt_scale(c.g, q, 3.0f), vkt_sigmoid(c.g, q)));
    run_case(&c);
    static const char *names[] = {"relu", "leaky_relu", "gelu", "tanh", "sigmoid", "silu"};
    for (int a = 0; a < 6; a++) {
        char name[64];
        snprintf(name, sizeof name, "%s [7,13]", names[a]);
        c = begin(name);
        vkt_tensor *x = P(&c, 2, 7, 13, 0);
        vkt_tensor *y = a == 0   ? vkt_relu(c.g, x)
                        : a == 1 ? vkt_leaky_relu(c.g, x, 0.05f)
                        : a == 2 ? vkt_gelu(c.g, x)
                        : a == 3 ? vkt_tanh(c.g, x)
                        : a == 4 ? vkt_sigmoid(c.g, x)
                                 : vkt_silu(c.g, x);
        finish(&c, y);
        run_case(&c);
    }
}

static void ops_softmax_losses(void)
{
    op_case c = begin("softmax [5,3,7]");
    finish(&c, vkt_softmax(c.g, vkt_scale(c.g, P(&c, 3, 5, 3, 7), 3.0f)));
    run_case(&c);
    c = begin("log_softmax [7,13]");
    finish(&c, vkt_log_softmax(c.g, vkt_scale(c.g, P(&c, 2, 7, 13, 0), 3.0f)));
    run_case(&c);
    c = begin("log_softmax batch 1");
    finish(&c, vkt_log_softmax(c.g, P(&c, 2, 1, 2, 0)));
    run_case(&c);
    c = begin("softmax_cross_entropy [7,11]");
    vkt_tensor *z = vkt_scale(c.g, P(&c, 2, 7, 11, 0), 4.0f);
    finish(&c, vkt_softmax_cross_entropy(c.g, z, labels(&c, 7, 11)));
    run_case(&c);
    c = begin("softmax_cross_entropy [6,5] as the loss (fused: writes dz)");
    z = vkt_scale(c.g, P(&c, 2, 6, 5, 0), 3.0f);
    finish_loss(&c, vkt_softmax_cross_entropy(c.g, z, labels(&c, 6, 5)));
    run_case(&c);
    c = begin("softmax_cross_entropy [4,3] as the loss of a parameter (fused: writes dW)");
    finish_loss(&c, vkt_softmax_cross_entropy(c.g, P(&c, 2, 4, 3, 0), labels(&c, 4, 3)));
    run_case(&c);
    c = begin("softmax_cross_entropy batch 1");
    finish(&c, vkt_softmax_cross_entropy(c.g, P(&c, 2, 1, 3, 0), labels(&c, 1, 3)));
    run_case(&c);
    c = begin("mse [7,3]");
    finish(&c, vkt_mse(c.g, P(&c, 2, 7, 3, 0), P(&c, 2, 7, 3, 0)));
    run_case(&c);
}

static void ops_shapes(void)
{
    for (int axis = -1; axis < 3; axis++)
        for (int mean = 0; mean < 2; mean++) {
            char name[64];
            snprintf(name, sizeof name, "%s axis %d of [5,7,3]", mean ? "mean" : "sum", axis);
            op_case c = begin(name);
            vkt_tensor *x = P(&c, 3, 5, 7, 3);
            finish(&c, mean ? vkt_mean(c.g, x, axis) : vkt_sum(c.g, x, axis));
            run_case(&c);
        }
    op_case c = begin("reshape [6,35] -> [0,5,7]");
    vkt_shape to = {3, {0, 5, 7}};
    finish(&c, vkt_reshape(c.g, P(&c, 2, 6, 35, 0), &to));
    run_case(&c);
    c = begin("reshape of a tensor used twice");
    vkt_tensor *x = vkt_tanh(c.g, P(&c, 2, 4, 6, 0));
    vkt_shape flat = {1, {24}}, back = {2, {4, 6}};
    finish(&c, vkt_add(c.g, vkt_reshape(c.g, vkt_sigmoid(c.g, vkt_reshape(c.g, x, &flat)), &back),
                       x));
    run_case(&c);
    c = begin("transpose [7,13]");
    finish(&c, vkt_transpose(c.g, P(&c, 2, 7, 13, 0)));
    run_case(&c);
    for (uint32_t axis = 0; axis < 2; axis++) {
        char name[64];
        snprintf(name, sizeof name, "concat axis %u", axis);
        c = begin(name);
        vkt_tensor *parts[3] = {P(&c, 2, axis ? 5 : 2, axis ? 2 : 5, 0),
                                P(&c, 2, axis ? 5 : 3, axis ? 3 : 5, 0),
                                P(&c, 2, axis ? 5 : 1, axis ? 1 : 5, 0)};
        finish(&c, vkt_concat(c.g, parts, 3, axis));
        run_case(&c);
    }
    c = begin("split [7,12] axis 1 into 5,4,3");
    vkt_tensor *outs[3];
    uint32_t sizes[3] = {5, 4, 3};
    vkt_split(c.g, P(&c, 2, 7, 12, 0), 1, sizes, 3, outs);
    vkt_tensor *keep[2] = {outs[2], outs[0]}; /* the middle part unused: its gradient is 0 */
    finish(&c, vkt_concat(c.g, keep, 2, 1));
    run_case(&c);
    c = begin("split axis 0 of [6,5]");
    uint32_t rows[2] = {2, 4};
    vkt_split(c.g, vkt_tanh(c.g, P(&c, 2, 6, 5, 0)), 0, rows, 2, outs);
    finish(&c, vkt_add(c.g, vkt_sum(c.g, outs[0], 0), vkt_mean(c.g, outs[1], 0)));
    run_case(&c);
    c = begin("dropout 0.3 [7,13]");
    finish(&c, vkt_dropout(c.g, P(&c, 2, 7, 13, 0), 0.3f));
    run_case(&c);
}

int main(void)
{
    th_init("test_graph_ops");
    g_ctx = th_context(VKT_KERNELS_AUTO);
    oc_set_context(g_ctx);
    vkt_stream *s = th_stream(g_ctx, 0);
    for (g_aligned = 0; g_aligned < 2; g_aligned++) {
        test_bias_act(s);
        test_bias_act_backward(s);
        test_bias_act_keep16(s);
        test_sce(s);
        test_mse(s);
        test_copies(s);
        test_dropout_kernel(s);
    }
    vkt_stream_destroy(s);
    ops_matmul_linear();
    ops_elementwise();
    ops_softmax_losses();
    ops_shapes();
    return th_finish();
}
