/* test_softmax.c - row softmax and log-softmax and their backward against the CPU
 * reference: one-column rows, long rows, many short rows, large offsets (stability),
 * -inf entries, in-place use, a finite-difference check of the backward, and errors. */
#include "harness.h"
#include "kernels/ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static vkt_context *ctx;
static vkt_stream *s;

/* Inputs: uniform(-5, 5), every third row shifted by +1000 (exp would overflow without
 * subtracting the row max); with `masked`, some entries -inf (never a whole row). */
static void inputs(float *x, uint32_t rows, uint32_t cols, int masked)
{
    th_fill_uniform(x, (uint64_t)rows * cols, -5.0f, 5.0f);
    for (uint32_t r = 0; r < rows; r += 3)
        for (uint32_t k = 0; k < cols; k++)
            x[(uint64_t)r * cols + k] += 1000.0f;
    if (masked)
        for (uint64_t i = 0; i < (uint64_t)rows * cols; i++)
            if (i % cols != 0 && th_rand_u64() % 4 == 0)
                x[i] = -INFINITY;
}

static void check(uint32_t rows, uint32_t cols, int masked)
{
    uint64_t n = (uint64_t)rows * cols;
    float *x = th_alloc_floats(n), *dy = th_alloc_floats(n), *y = th_alloc_floats(n);
    float *want = th_alloc_floats(n), *dx = th_alloc_floats(n), *dx_want = th_alloc_floats(n);
    th_buf bx = th_buf_create(ctx, n), by = th_buf_create(ctx, n);
    th_buf bdy = th_buf_create(ctx, n), bdx = th_buf_create(ctx, n);
    for (int lg = 0; lg < 2; lg++) {
        inputs(x, rows, cols, masked);
        th_fill_uniform(dy, n, -1.0f, 1.0f);
        th_buf_write(&bx, x);
        th_buf_write(&bdy, dy);
        TH_OK(ctx, vkt_stream_reset(s));
        TH_OK(ctx, vkt_softmax_rows(s, lg, th_view(&bx), th_view(&by), rows, cols));
        TH_OK(ctx, vkt_stream_run(s));
        th_buf_read(&by, y);
        kref_softmax(lg, x, want, rows, cols);
        char what[128];
        const char *name = lg ? "log_softmax" : "softmax";
        const char *tag = masked ? " (with -inf)" : "";
        snprintf(what, sizeof what, "%s %ux%u%s", name, rows, cols, tag);
        /* softmax: relative accuracy of exp; log_softmax: absolute, of x - max - log(s). */
        th_compare(what, y, want, n, lg ? 1e-6f : 1e-5f, lg ? 1e-5f : 1e-9f);
        th_buf_guards_ok(&by, "softmax y");

        /* The backward from the reference's y, so that it is checked on its own. */
        th_buf_write(&by, want);
        TH_OK(ctx, vkt_stream_reset(s));
        TH_OK(ctx, vkt_softmax_rows_backward(s, lg, th_view(&by), th_view(&bdy), th_view(&bdx), rows,
                                        cols));
        TH_OK(ctx, vkt_stream_run(s));
        th_buf_read(&bdx, dx);
        kref_softmax_backward(lg, want, dy, dx_want, rows, cols);
        snprintf(what, sizeof what, "%s backward %ux%u%s", name, rows, cols, tag);
        /* The row sum is fp32 on the device. */
        float atol = (float)(4e-7 * sqrt((double)cols) * (lg ? 1.0 : 0.1) + 1e-7);
        th_compare(what, dx, dx_want, n, 1e-5f, atol);
        th_buf_guards_ok(&bdx, "softmax dx");
    }
    th_buf_destroy(&bx), th_buf_destroy(&by), th_buf_destroy(&bdy), th_buf_destroy(&bdx);
    free(x), free(dy), free(y), free(want), free(dx), free(dx_want);
}

/* The backward against a centred finite difference of L = sum(dy * softmax(x)) taken
 * from the reference, in double. */
static void check_gradient(int lg, uint32_t rows, uint32_t cols)
{
    uint64_t n = (uint64_t)rows * cols;
    float *x = th_alloc_floats(n), *dy = th_alloc_floats(n);
    float *dx = th_alloc_floats(n), *fd = th_alloc_floats(n), *t = th_alloc_floats(n);
    th_fill_uniform(x, n, -2.0f, 2.0f);
    th_fill_uniform(dy, n, -1.0f, 1.0f);
    th_buf bx = th_buf_create(ctx, n), by = th_buf_create(ctx, n), bdy = th_buf_create(ctx, n);
    th_buf bdx = th_buf_create(ctx, n);
    th_buf_write(&bx, x);
    th_buf_write(&bdy, dy);
    TH_OK(ctx, vkt_stream_reset(s));
    TH_OK(ctx, vkt_softmax_rows(s, lg, th_view(&bx), th_view(&by), rows, cols));
    TH_OK(ctx, vkt_softmax_rows_backward(s, lg, th_view(&by), th_view(&bdy), th_view(&bdx), rows,
                                    cols));
    TH_OK(ctx, vkt_stream_run(s));
    th_buf_read(&bdx, dx);
    for (uint64_t j = 0; j < n; j++) {
        float keep = x[j];
        double l[2], at[2];
        for (int side = 0; side < 2; side++) {
            x[j] = keep + (side ? -1e-2f : 1e-2f);
            at[side] = x[j];
            kref_softmax(lg, x, t, rows, cols);
            l[side] = 0;
            for (uint64_t i = 0; i < n; i++)
                l[side] += (double)dy[i] * t[i];
        }
        x[j] = keep;
        fd[j] = (float)((l[0] - l[1]) / (at[0] - at[1]));
    }
    char what[96];
    snprintf(what, sizeof what, "%s backward vs finite difference %ux%u",
             lg ? "log_softmax" : "softmax", rows, cols);
    th_compare(what, dx, fd, n, 2e-3f, 5e-4f);
    th_buf_destroy(&bx), th_buf_destroy(&by), th_buf_destroy(&bdy), th_buf_destroy(&bdx);
    free(x), free(dy), free(dx), free(fd), free(t);
}

/* y = softmax(x) over x itself, dx = backward over dy itself. */
static void check_in_place(void)
{
    enum { R = 9, C = 301, N = R * C };
    static float x[N], dy[N], got[N], want[N], dwant[N];
    th_fill_uniform(x, N, -3.0f, 3.0f);
    th_fill_uniform(dy, N, -1.0f, 1.0f);
    kref_softmax(0, x, want, R, C);
    kref_softmax_backward(0, want, dy, dwant, R, C);
    th_buf bx = th_buf_create(ctx, N), bdy = th_buf_create(ctx, N);
    th_buf_write(&bx, x);
    th_buf_write(&bdy, dy);
    TH_OK(ctx, vkt_stream_reset(s));
    TH_OK(ctx, vkt_softmax_rows(s, 0, th_view(&bx), th_view(&bx), R, C));
    TH_OK(ctx, vkt_softmax_rows_backward(s, 0, th_view(&bx), th_view(&bdy), th_view(&bdy), R, C));
    TH_OK(ctx, vkt_stream_run(s));
    th_buf_read(&bx, got);
    th_compare("softmax in place", got, want, N, 2e-5f, 1e-9f);
    th_buf_read(&bdy, got);
    th_compare("softmax backward in place", got, dwant, N, 1e-4f, 1e-6f);
    th_buf_guards_ok(&bx, "in place y");
    th_buf_guards_ok(&bdy, "in place dx");
    th_buf_destroy(&bx), th_buf_destroy(&bdy);
}

static void check_errors(void)
{
    th_buf b = th_buf_create(ctx, 64);
    vkt_view v = th_view(&b);
    TH_STATUS(ctx, vkt_softmax_rows(s, 0, v, v, 0, 8), VKT_ERROR_INVALID_ARGUMENT);
    TH_STATUS(ctx, vkt_softmax_rows(s, 0, v, v, 8, 0), VKT_ERROR_INVALID_ARGUMENT);
    TH_STATUS(ctx, vkt_softmax_rows_backward(s, 1, v, v, v, 0, 8), VKT_ERROR_INVALID_ARGUMENT);
    TH_STATUS(NULL, vkt_softmax_rows(NULL, 0, v, v, 8, 8), VKT_ERROR_INVALID_ARGUMENT);
    TH_STATUS(ctx, vkt_softmax_rows(s, 0, v, v, 0x10000, 0x10000), VKT_ERROR_LIMIT);
    uint64_t total = vkt_buffer_size(b.buffer) / 4;
    vkt_view past = {b.buffer, total - 40};
    TH_STATUS(ctx, vkt_softmax_rows(s, 0, past, v, 8, 8), VKT_ERROR_INVALID_ARGUMENT);
    TH_STATUS(ctx, vkt_softmax_rows(s, 0, v, past, 8, 8), VKT_ERROR_INVALID_ARGUMENT);
    TH_STATUS(ctx, vkt_softmax_rows_backward(s, 0, v, v, past, 8, 8), VKT_ERROR_INVALID_ARGUMENT);
    th_buf_destroy(&b);
}

int main(void)
{
    th_init("test_softmax");
    ctx = th_context(VKT_KERNELS_AUTO);
    s = th_stream(ctx, 0);
    static const uint32_t cases[][2] = {
        {1, 1}, {5, 1}, {1, 7}, {3, 2}, {7, 64}, {2, 65}, {37, 129}, {1000, 10},
        {100003, 3}, {3, 50000}, {1, 1000003}, {300, 1031},
        {1, 2500009}, /* longer than 64 threads can walk on lavapipe: a larger workgroup */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check(cases[i][0], cases[i][1], 0);
    check(17, 33, 1);
    check(3, 5000, 1);
    for (int lg = 0; lg < 2; lg++) {
        check_gradient(lg, 3, 7);
        check_gradient(lg, 2, 1);
        check_gradient(lg, 1, 130);
    }
    check_in_place();
    check_errors();
    th_use_other_variant(&ctx, &s); /* workgroup sizes and row splits differ */
    check(1, 1, 0);
    check(37, 129, 0);
    check(3, 50000, 1);
    check(1000, 10, 0);
    check_gradient(1, 3, 7);
    vkt_stream_destroy(s);
    return th_finish();
}
