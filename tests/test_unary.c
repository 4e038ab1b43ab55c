/* test_unary.c - unary elementwise ops and their derivatives against the CPU reference,
 * a finite-difference check of every derivative, in-place use, ranges longer than one
 * binding, and argument errors. First, shaders/activation.h's list against its math:
 * every row's function and derivative against formulas written here apart from it, and
 * its dfy column (f' from the output) against the derivative. */
#include "harness.h"
#include "activation.h"
#include "kernels/ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static vkt_context *ctx;
static vkt_stream *s;

static float op_alpha(vkt_unary_op op)
{
    return op == VKT_UNARY_SCALE ? -0.37f : op == VKT_UNARY_LEAKY_RELU ? 0.1f : 0.0f;
}

/* Inputs inside the op's domain and where fp32 results stay finite. */
static void op_inputs(vkt_unary_op op, float *x, uint64_t n)
{
    switch (op) {
    case VKT_UNARY_LOG: th_fill_uniform(x, n, 0.01f, 50.0f); break;
    case VKT_UNARY_EXP: th_fill_uniform(x, n, -20.0f, 20.0f); break;
    default: th_fill_uniform(x, n, -8.0f, 8.0f); break;
    }
}

/* Forward and backward of one op on n elements against the reference. */
static void check_op(vkt_unary_op op, uint64_t n)
{
    const char *name = vkt_unary_op_name(op);
    float alpha = op_alpha(op);
    float *x = th_alloc_floats(n), *dy = th_alloc_floats(n);
    float *y = th_alloc_floats(n), *dx = th_alloc_floats(n);
    float *y_ref = th_alloc_floats(n), *dx_ref = th_alloc_floats(n);
    op_inputs(op, x, n);
    th_fill_uniform(dy, n, -1.0f, 1.0f);
    th_buf bx = th_buf_create(ctx, n), bdy = th_buf_create(ctx, n);
    th_buf by = th_buf_create(ctx, n), bdx = th_buf_create(ctx, n);
    th_buf_write(&bx, x);
    th_buf_write(&bdy, dy);
    TH_OK(ctx, vkt_stream_reset(s));
    TH_OK(ctx, vkt_unary(s, op, alpha, th_view(&bx), th_view(&by), n));
    TH_OK(ctx, vkt_unary_backward(s, op, alpha, th_view(&bx), th_view(&bdy), th_view(&bdx), n));
    TH_OK(ctx, vkt_stream_run(s));
    th_buf_read(&by, y);
    th_buf_read(&bdx, dx);
    kref_unary(op, alpha, x, y_ref, n);
    kref_unary_backward(op, alpha, x, dy, dx_ref, n);
    char what[96];
    snprintf(what, sizeof what, "%s forward, n=%llu", name, (unsigned long long)n);
    th_compare(what, y, y_ref, n, 1e-5f, 1e-6f);
    snprintf(what, sizeof what, "%s backward, n=%llu", name, (unsigned long long)n);
    th_compare(what, dx, dx_ref, n, 1e-5f, 1e-6f);
    th_buf_guards_ok(&by, "unary y");
    th_buf_guards_ok(&bdx, "unary dx");
    th_buf_destroy(&bx);
    th_buf_destroy(&bdy);
    th_buf_destroy(&by);
    th_buf_destroy(&bdx);
    free(x), free(dy), free(y), free(dx), free(y_ref), free(dx_ref);
}

/* The device derivative against a centred finite difference of the reference function,
 * taken in double, away from kinks (relu and leaky relu at 0). */
static void check_gradient(vkt_unary_op op)
{
    enum { N = 257 };
    float alpha = op_alpha(op);
    float x[N], dy[N], dx[N], fd[N];
    op_inputs(op, x, N);
    if (op == VKT_UNARY_EXP)
        th_fill_uniform(x, N, -5.0f, 5.0f);
    th_fill_uniform(dy, N, -1.0f, 1.0f);
    for (int i = 0; i < N; i++) {
        double h = 1e-2 * fmax(1.0, fabs(x[i])) * (op == VKT_UNARY_LOG ? fmin(1.0, x[i]) : 1.0);
        if ((op == VKT_UNARY_RELU || op == VKT_UNARY_LEAKY_RELU) && fabs(x[i]) < 4 * h)
            x[i] = x[i] < 0 ? x[i] - 0.5f : x[i] + 0.5f;
        double xp = x[i] + h, xm = x[i] - h;
        double d = ((double)kref_unary_f(op, alpha, (float)xp) -
                    (double)kref_unary_f(op, alpha, (float)xm)) /
                   ((double)(float)xp - (double)(float)xm);
        fd[i] = (float)(dy[i] * d);
    }
    th_buf bx = th_buf_create(ctx, N), bdy = th_buf_create(ctx, N), bdx = th_buf_create(ctx, N);
    th_buf_write(&bx, x);
    th_buf_write(&bdy, dy);
    TH_OK(ctx, vkt_stream_reset(s));
    TH_OK(ctx, vkt_unary_backward(s, op, alpha, th_view(&bx), th_view(&bdy), th_view(&bdx), N));
    TH_OK(ctx, vkt_stream_run(s));
    th_buf_read(&bdx, dx);
    char what[96];
    snprintf(what, sizeof what, "%s derivative vs finite difference", vkt_unary_op_name(op));
    th_compare(what, dx, fd, N, 2e-3f, 2e-4f);
    th_buf_destroy(&bx);
    th_buf_destroy(&bdy);
    th_buf_destroy(&bdx);
}

/* y = f(x) with y and x the same view. */
static void check_in_place(void)
{
    enum { N = 1031 };
    float x[N], got[N], want[N];
    th_fill_uniform(x, N, -3.0f, 3.0f);
    kref_unary(VKT_UNARY_GELU, 0.0f, x, want, N);
    th_buf b = th_buf_create(ctx, N);
    th_buf_write(&b, x);
    TH_OK(ctx, vkt_stream_reset(s));
    TH_OK(ctx, vkt_unary(s, VKT_UNARY_GELU, 0.0f, th_view(&b), th_view(&b), N));
    TH_OK(ctx, vkt_stream_run(s));
    th_buf_read(&b, got);
    th_compare("gelu in place", got, want, N, 1e-5f, 1e-6f);
    th_buf_guards_ok(&b, "in-place");
    th_buf_destroy(&b);
}

/* More elements than one storage binding may span: the kernel splits the range. */
static void check_long_range(void)
{
    vkt_device_info info;
    TH_OK(ctx, vkt_context_device_info(ctx, &info));
    uint64_t n = info.max_storage_buffer_range / 4 + 4099;
    if (n > (64ull << 20)) {
        printf("skipping the long-range test: maxStorageBufferRange is %llu bytes\n",
               (unsigned long long)info.max_storage_buffer_range);
        return;
    }
    float *x = th_alloc_floats(n), *y = th_alloc_floats(n);
    for (uint64_t i = 0; i < n; i++)
        x[i] = (float)(i % 1000003) - 500000.0f;
    th_buf bx = th_buf_create(ctx, n), by = th_buf_create(ctx, n);
    th_buf_write(&bx, x);
    TH_OK(ctx, vkt_stream_reset(s));
    TH_OK(ctx, vkt_unary(s, VKT_UNARY_SCALE, 0.5f, th_view(&bx), th_view(&by), n));
    TH_OK(ctx, vkt_stream_run(s));
    vkt_stream_stats st;
    TH_OK(ctx, vkt_stream_stats_get(s, &st));
    TH_CHECK(st.dispatches >= 2, "a range past maxStorageBufferRange takes >= 2 dispatches "
             "(got %u)", st.dispatches);
    th_buf_read(&by, y);
    uint64_t bad = 0;
    for (uint64_t i = 0; i < n; i++)
        bad += y[i] != 0.5f * x[i];
    TH_CHECK(bad == 0, "scale over %llu elements: %llu wrong", (unsigned long long)n,
             (unsigned long long)bad);
    th_buf_guards_ok(&by, "long range");
    th_buf_destroy(&bx);
    th_buf_destroy(&by);
    free(x), free(y);
}

/* Every alignment phase of x, dy and dx modulo 4 elements (vec4 body with single-element
 * edges where the phases agree, single elements otherwise); nothing outside the output
 * range may change. */
static void check_phases(void)
{
    enum { N = 1001, PAD = 24, TOTAL = N + 2 * PAD };
    static float x[TOTAL], dy[TOTAL], got[TOTAL], want[TOTAL];
    vkt_buffer *bx, *bdy, *bo;
    TH_OK(ctx, vkt_buffer_create(ctx, TOTAL * 4, VKT_MEMORY_DEVICE, &bx));
    TH_OK(ctx, vkt_buffer_create(ctx, TOTAL * 4, VKT_MEMORY_DEVICE, &bdy));
    TH_OK(ctx, vkt_buffer_create(ctx, TOTAL * 4, VKT_MEMORY_DEVICE, &bo));
    th_fill_uniform(x, TOTAL, -4.0f, 4.0f);
    th_fill_uniform(dy, TOTAL, -1.0f, 1.0f);
    TH_OK(ctx, vkt_buffer_write(bx, 0, x, sizeof x));
    TH_OK(ctx, vkt_buffer_write(bdy, 0, dy, sizeof dy));
    for (int px = 0; px < 4; px++)
        for (int po = 0; po < 4; po++)
            for (int back = 0; back < 2; back++) {
                uint64_t n = N - (uint64_t)(px + po);
                vkt_view vx = {bx, PAD + px}, vdy = {bdy, PAD + (back ? po : px)};
                vkt_view vo = {bo, PAD + po};
                for (int i = 0; i < TOTAL; i++)
                    want[i] = -777.0f;
                TH_OK(ctx, vkt_buffer_write(bo, 0, want, sizeof want));
                TH_OK(ctx, vkt_stream_reset(s));
                if (back)
                    TH_OK(ctx, vkt_unary_backward(s, VKT_UNARY_TANH, 0, vx, vdy, vo, n));
                else
                    TH_OK(ctx, vkt_unary(s, VKT_UNARY_TANH, 0, vx, vo, n));
                TH_OK(ctx, vkt_stream_run(s));
                TH_OK(ctx, vkt_buffer_read(bo, 0, got, sizeof got));
                if (back)
                    kref_unary_backward(VKT_UNARY_TANH, 0, x + PAD + px, dy + vdy.offset,
                                           want + PAD + po, n);
                else
                    kref_unary(VKT_UNARY_TANH, 0, x + PAD + px, want + PAD + po, n);
                char what[96];
                snprintf(what, sizeof what, "tanh%s with x at phase %d, output at phase %d",
                         back ? " backward" : "", px, po);
                th_compare(what, got, want, TOTAL, 1e-5f, 1e-6f);
            }
    vkt_buffer_destroy(bx);
    vkt_buffer_destroy(bdy);
    vkt_buffer_destroy(bo);
}

static void check_errors(void)
{
    th_buf b = th_buf_create(ctx, 16);
    vkt_view v = th_view(&b);
    TH_STATUS(ctx, vkt_unary(s, VKT_UNARY_RELU, 0, v, v, 0), VKT_ERROR_INVALID_ARGUMENT);
    TH_STATUS(ctx, vkt_unary(s, VKT_UNARY_COUNT, 0, v, v, 16), VKT_ERROR_INVALID_ARGUMENT);
    TH_STATUS(ctx, vkt_unary(s, (vkt_unary_op)-1, 0, v, v, 16), VKT_ERROR_INVALID_ARGUMENT);
    TH_STATUS(NULL, vkt_unary(NULL, VKT_UNARY_RELU, 0, v, v, 16), VKT_ERROR_INVALID_ARGUMENT);
    uint64_t total = vkt_buffer_size(b.buffer) / 4;
    vkt_view past = {b.buffer, total - 8};
    TH_STATUS(ctx, vkt_unary(s, VKT_UNARY_RELU, 0, v, past, 16), VKT_ERROR_INVALID_ARGUMENT);
    TH_CHECK(strstr(vkt_context_errmsg(ctx), "y") != NULL, "the message names y: %s",
             vkt_context_errmsg(ctx));
    TH_STATUS(ctx, vkt_unary_backward(s, VKT_UNARY_TANH, 0, v, past, v, 16),
              VKT_ERROR_INVALID_ARGUMENT);
    vkt_view none = {NULL, 0};
    TH_STATUS(ctx, vkt_unary_backward(s, VKT_UNARY_TANH, 0, none, v, v, 16),
              VKT_ERROR_INVALID_ARGUMENT);
    th_buf_destroy(&b);
}

/* Each activation by its textbook definition, in double, written apart from
 * shaders/activation.h (gelu: the tanh approximation). *df: its derivative. 0 when the
 * name is not one this test knows: a row added to the list needs its formula here. */
static int own_formula(const char *name, double a, double x, double *f, double *df)
{
    double sg = 1.0 / (1.0 + exp(-x)), th = tanh(x);
    double k = sqrt(2.0 / M_PI), u = k * (x + 0.044715 * x * x * x);
    double du = k * (1.0 + 3.0 * 0.044715 * x * x), tu = tanh(u);
    static const char *const names[] = {"scale", "relu", "leaky_relu", "gelu", "tanh",
                                        "sigmoid", "exp", "log", "silu"};
    const double fs[] = {a * x, x > 0 ? x : 0, x > 0 ? x : a * x, 0.5 * x * (1 + tu), th,
                         sg, exp(x), log(x), x * sg};
    const double dfs[] = {a, x > 0 ? 1 : 0, x > 0 ? 1 : a,
                          0.5 * (1 + tu) + 0.5 * x * (1 - tu * tu) * du, 1 - th * th,
                          sg * (1 - sg), exp(x), 1 / x, sg + x * sg * (1 - sg)};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(name, names[i]) == 0) {
            *f = fs[i], *df = dfs[i];
            return 1;
        }
    return 0;
}

static int close_to(double got, double want, double rtol)
{
    return fabs(got - want) <= rtol * fmax(1.0, fabs(want));
}

/* shaders/activation.h's rows (through the list's own macro) against own_formula: f and
 * f' of act_f / act_df (the math the shaders and references share) at points across the
 * op's domain, and where the dfy column says f' follows from y, act_df_from_y(f(x)). */
static void check_list_math(void)
{
    uint32_t rows = 0;
#define ROW(NAME, value, name, fn, fuses, dfy)                                              \
    TH_CHECK(VKT_UNARY_##NAME == value && strcmp(vkt_unary_op_name(value), #name) == 0,     \
             "row " #name ": vkt_unary_op_name(%d) is %s", value, vkt_unary_op_name(value)); \
    rows++;
    ACT_LIST(ROW)
#undef ROW
    TH_CHECK(rows == VKT_UNARY_COUNT, "the list has %u rows, vkt.h %d ops", rows,
             VKT_UNARY_COUNT);
    for (int op = 0; op < VKT_UNARY_COUNT; op++) {
        const char *name = vkt_unary_op_name((vkt_unary_op)op);
        double f = 0, df = 0;
        if (!TH_CHECK(own_formula(name, 1.0, 1.0, &f, &df),
                      "activation %s has a formula in test_unary.c to check its math", name))
            continue;
        static const double alphas[] = {0.3, -0.37};
        uint32_t bad_f = 0, bad_df = 0, bad_y = 0, from_y = 0;
        for (int ai = 0; ai < 2; ai++)
            for (int i = 0; i < 401; i++) {
                double a = alphas[ai], x = -10.0 + 0.05 * i + 0.0123;
                if (op == VKT_UNARY_LOG)
                    x = 0.01 + 0.125 * i;
                own_formula(name, a, x, &f, &df);
                bad_f += !close_to(act_f((uint32_t)op, a, x), f, 1e-12);
                bad_df += !close_to(act_df((uint32_t)op, a, x), df, 1e-9);
                if (act_df_follows_from_y((uint32_t)op, a)) {
                    from_y++;
                    bad_y += !close_to(act_df_from_y((uint32_t)op, a, f), df, 1e-9);
                }
            }
        TH_CHECK(bad_f == 0, "%s: act_f agrees with its formula (%u of 802 points differ)",
                 name, bad_f);
        TH_CHECK(bad_df == 0, "%s: act_df agrees with its derivative (%u differ)", name,
                 bad_df);
        TH_CHECK(bad_y == 0, "%s: the dfy column's f' from y agrees with f' (%u of %u differ)",
                 name, bad_y, from_y);
    }
    /* the columns of the list as the metadata reads them */
    TH_CHECK(act_df_follows_from_y(VKT_UNARY_LEAKY_RELU, 0.1) &&
                 !act_df_follows_from_y(VKT_UNARY_LEAKY_RELU, -0.1) &&
                 !act_df_follows_from_y(VKT_UNARY_GELU, 0.0),
             "dfy: leaky relu from y only with a slope >= 0, gelu never");
    TH_CHECK(isnan(act_f(VKT_UNARY_COUNT, 1.0, 2.0)) && isnan(act_df(VKT_UNARY_COUNT, 1.0, 2.0)),
             "an op outside the list computes NaN, not another op's formula");
}

static void check_names(void)
{
    for (int i = 0; i < VKT_UNARY_COUNT; i++) {
        const char *n = vkt_unary_op_name((vkt_unary_op)i);
        TH_CHECK(n && strcmp(n, "unknown") != 0, "unary op %d has a name", i);
        for (int j = 0; j < i; j++)
            TH_CHECK(strcmp(n, vkt_unary_op_name((vkt_unary_op)j)) != 0,
                     "unary op names %d and %d differ", i, j);
    }
    TH_CHECK(strcmp(vkt_unary_op_name(VKT_UNARY_COUNT), "unknown") == 0, "unknown op name");
    TH_CHECK(strcmp(vkt_unary_op_name(VKT_UNARY_GELU), "gelu") == 0, "gelu is named gelu");
}

int main(void)
{
    th_init("test_unary");
    ctx = th_context(VKT_KERNELS_AUTO);
    s = th_stream(ctx, 0);
    check_names();
    check_list_math();
    static const uint64_t sizes[] = {1, 2, 7, 63, 64, 65, 257, 1009, 65537};
    for (int op = 0; op < VKT_UNARY_COUNT; op++) {
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
            check_op((vkt_unary_op)op, sizes[i]);
        check_gradient((vkt_unary_op)op);
    }
    check_op(VKT_UNARY_GELU, (1u << 20) + 3);
    check_op(VKT_UNARY_LOG, 1000003);
    check_in_place();
    check_phases();
    check_long_range();
    check_errors();
    th_use_other_variant(&ctx, &s); /* workgroup sizes and row splits differ */
    check_op(VKT_UNARY_TANH, 1);
    check_op(VKT_UNARY_SIGMOID, 1009);
    check_op(VKT_UNARY_GELU, 100003);
    check_gradient(VKT_UNARY_GELU);
    vkt_stream_destroy(s);
    return th_finish();
}
