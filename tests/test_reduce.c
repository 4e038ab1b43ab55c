/* test_reduce.c - sum, mean, max and argmax along every axis of awkward shapes against
 * the CPU reference: long axes, many short rows, strided axes, ties (first maximum),
 * NaN, and argument errors. Prints the time of a [1, 1000000, 1] sum. */
#include "harness.h"
#include "kernels/ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static vkt_context *ctx;
static vkt_stream *s;

static vkt_shape shp(uint32_t ndim, uint32_t d0, uint32_t d1, uint32_t d2, uint32_t d3)
{
    vkt_shape r = {ndim, {d0, d1, d2, d3}};
    return r;
}

static const char *str(const vkt_shape *sh, char *buf)
{
    int len = sprintf(buf, "[");
    for (uint32_t k = 0; k < sh->ndim; k++)
        len += sprintf(buf + len, k ? ",%u" : "%u", sh->dims[k]);
    sprintf(buf + len, "]");
    return buf;
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* kind 0: uniform; 1: few distinct values (many ties); 2: some NaN. */
static void fill(float *x, uint64_t n, int kind)
{
    th_fill_uniform(x, n, -1.0f, 1.0f);
    if (kind == 1)
        for (uint64_t i = 0; i < n; i++)
            x[i] = floorf(x[i] * 2.0f) * 0.5f; /* -1, -0.5, 0, 0.5 */
    if (kind == 2)
        for (uint64_t i = 0; i < n; i++)
            if (th_rand_u64() % 7 == 0)
                x[i] = NAN;
}

/* Every op along one axis of x (already on the device in bx). */
static void check_axis(const vkt_shape *sh, uint32_t axis, th_buf *bx, const float *x,
                       int kind)
{
    uint64_t n = 1, len = sh->dims[axis];
    for (uint32_t k = 0; k < sh->ndim; k++)
        n *= sh->dims[k];
    uint64_t nout = n / len;
    float *got = th_alloc_floats(nout), *want = th_alloc_floats(nout);
    th_buf bo = th_buf_create(ctx, nout);
    for (int op = 0; op < VKT_REDUCE_COUNT; op++) {
        if (kind == 2 && (op == VKT_REDUCE_SUM || op == VKT_REDUCE_MEAN))
            continue;
        TH_OK(ctx, vkt_stream_reset(s));
        TH_OK(ctx, vkt_reduce(s, op, th_view(bx), sh, axis, th_view(&bo)));
        TH_OK(ctx, vkt_stream_run(s));
        th_buf_read(&bo, got);
        kref_reduce(op, x, sh, axis, want);
        char what[160], sb[64];
        snprintf(what, sizeof what, "%s of %s along axis %u%s", vkt_reduce_op_name(op),
                 str(sh, sb), axis, kind == 1 ? " (ties)" : kind == 2 ? " (NaN)" : "");
        if (op == VKT_REDUCE_ARGMAX) {
            uint32_t *gi = (uint32_t *)got, *wi = (uint32_t *)want;
            uint64_t bad = 0, first = 0;
            for (uint64_t i = 0; i < nout; i++)
                if (gi[i] != wi[i] && bad++ == 0)
                    first = i;
            TH_CHECK(bad == 0, "%s: %llu of %llu differ; first at %llu: got %u want %u", what,
                     (unsigned long long)bad, (unsigned long long)nout,
                     (unsigned long long)first, gi[first], wi[first]);
        } else if (op == VKT_REDUCE_MAX) {
            th_compare(what, got, want, nout, 0, 0);
        } else {
            /* Compensated fp32 sums of uniform(-1, 1) on the device: the error stays
             * near an ulp of the partial sums, about sqrt(len) / 2 (measured 6e-5 at
             * len 1e6, where plain fp32 sums were 2e-3 off). */
            double tol = 1e-6 * sqrt((double)len);
            if (op == VKT_REDUCE_MEAN)
                tol /= (double)len;
            th_compare(what, got, want, nout, 1e-6f, (float)(tol + 1e-7));
        }
    }
    th_buf_guards_ok(&bo, "reduce out");
    th_buf_destroy(&bo);
    free(got), free(want);
}

static void check_shape(vkt_shape sh, int kind)
{
    uint64_t n = 1;
    for (uint32_t k = 0; k < sh.ndim; k++)
        n *= sh.dims[k];
    float *x = th_alloc_floats(n);
    fill(x, n, kind);
    th_buf bx = th_buf_create(ctx, n);
    th_buf_write(&bx, x);
    for (uint32_t axis = 0; axis < sh.ndim; axis++)
        check_axis(&sh, axis, &bx, x, kind);
    th_buf_destroy(&bx);
    free(x);
}

/* A sum over one axis of a million elements, timed (one workgroup tree, not one thread). */
static void time_long_sum(void)
{
    vkt_shape sh = shp(3, 1, 1000000, 1, 0);
    uint64_t n = 1000000;
    float *x = th_alloc_floats(n);
    fill(x, n, 0);
    th_buf bx = th_buf_create(ctx, n), bo = th_buf_create(ctx, 1);
    th_buf_write(&bx, x);
    TH_OK(ctx, vkt_stream_reset(s));
    TH_OK(ctx, vkt_reduce(s, VKT_REDUCE_SUM, th_view(&bx), &sh, 1, th_view(&bo)));
    TH_OK(ctx, vkt_stream_run(s)); /* warm-up: pipeline creation */
    double best = 1e9;
    for (int rep = 0; rep < 5; rep++) {
        double t0 = now();
        TH_OK(ctx, vkt_stream_run(s));
        double t = now() - t0;
        best = t < best ? t : best;
    }
    float got, want;
    th_buf_read(&bo, &got);
    kref_reduce(VKT_REDUCE_SUM, x, &sh, 1, &want);
    th_compare("sum of [1,1000000,1] along axis 1", &got, &want, 1, 1e-6f, 1e-3f);
    printf("sum of [1,1000000,1] along axis 1: %.3f ms per run (best of 5)\n", best * 1e3);
    th_buf_destroy(&bx), th_buf_destroy(&bo);
    free(x);
}

static void check_errors(void)
{
    th_buf b = th_buf_create(ctx, 60);
    vkt_view v = th_view(&b);
    vkt_shape sh = shp(2, 6, 10, 0, 0);
    TH_STATUS(ctx, vkt_reduce(s, VKT_REDUCE_SUM, v, &sh, 2, v), VKT_ERROR_INVALID_ARGUMENT);
    const char *m = vkt_context_errmsg(ctx);
    TH_CHECK(strstr(m, "axis 2") && strstr(m, "[6,10]"), "the message names axis and shape: %s",
             m);
    TH_STATUS(ctx, vkt_reduce(s, VKT_REDUCE_COUNT, v, &sh, 0, v), VKT_ERROR_INVALID_ARGUMENT);
    TH_STATUS(ctx, vkt_reduce(s, VKT_REDUCE_SUM, v, NULL, 0, v), VKT_ERROR_INVALID_ARGUMENT);
    vkt_shape scalar = shp(0, 0, 0, 0, 0), zero = shp(2, 6, 0, 0, 0), five = {5, {1, 1, 1, 1}};
    TH_STATUS(ctx, vkt_reduce(s, VKT_REDUCE_SUM, v, &scalar, 0, v), VKT_ERROR_INVALID_ARGUMENT);
    TH_STATUS(ctx, vkt_reduce(s, VKT_REDUCE_SUM, v, &zero, 0, v), VKT_ERROR_INVALID_ARGUMENT);
    TH_STATUS(ctx, vkt_reduce(s, VKT_REDUCE_SUM, v, &five, 0, v), VKT_ERROR_INVALID_ARGUMENT);
    TH_STATUS(NULL, vkt_reduce(NULL, VKT_REDUCE_SUM, v, &sh, 0, v), VKT_ERROR_INVALID_ARGUMENT);
    uint64_t total = vkt_buffer_size(b.buffer) / 4;
    vkt_view past = {b.buffer, total - 30};
    TH_STATUS(ctx, vkt_reduce(s, VKT_REDUCE_MAX, past, &sh, 1, v), VKT_ERROR_INVALID_ARGUMENT);
    vkt_view out_past = {b.buffer, total - 5};
    TH_STATUS(ctx, vkt_reduce(s, VKT_REDUCE_MAX, v, &sh, 1, out_past),
              VKT_ERROR_INVALID_ARGUMENT);
    th_buf_destroy(&b);
    for (int i = 0; i < VKT_REDUCE_COUNT; i++)
        TH_CHECK(strcmp(vkt_reduce_op_name((vkt_reduce_op)i), "unknown") != 0,
                 "reduce op %d has a name", i);
    TH_CHECK(strcmp(vkt_reduce_op_name(VKT_REDUCE_ARGMAX), "argmax") == 0, "argmax name");
    TH_CHECK(strcmp(vkt_reduce_op_name(VKT_REDUCE_COUNT), "unknown") == 0, "unknown op name");
}

int main(void)
{
    th_init("test_reduce");
    ctx = th_context(VKT_KERNELS_AUTO);
    s = th_stream(ctx, 0);
    vkt_shape shapes[] = {
        shp(1, 1, 0, 0, 0),          shp(1, 7, 0, 0, 0),         shp(1, 65, 0, 0, 0),
        shp(2, 13, 17, 0, 0),        shp(2, 64, 1, 0, 0),        shp(4, 3, 5, 7, 11),
        shp(2, 100003, 10, 0, 0),    /* many short rows; a short strided axis */
        shp(2, 2, 1000003, 0, 0),    /* long rows; a length-2 axis with a long inner */
        shp(3, 1, 1000003, 2, 0),    /* a long axis with a small inner stride */
        shp(2, 513, 129, 0, 0),      shp(3, 1, 1000000, 1, 0),
        shp(2, 1, 4500007, 0, 0),    /* rows longer than 64 threads can walk on lavapipe */
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        check_shape(shapes[i], 0);
    check_shape(shp(2, 37, 1001, 0, 0), 1);
    check_shape(shp(3, 5, 3000, 3, 0), 1);
    check_shape(shp(2, 29, 257, 0, 0), 2);
    time_long_sum();
    check_errors();
    th_use_other_variant(&ctx, &s); /* workgroup sizes and row splits differ */
    check_shape(shp(2, 13, 17, 0, 0), 0);
    check_shape(shp(3, 1, 100003, 2, 0), 0);
    check_shape(shp(2, 513, 129, 0, 0), 1);
    check_shape(shp(2, 10007, 3, 0, 0), 2);
    vkt_stream_destroy(s);
    return th_finish();
}
