/* test_binary.c - broadcasting binary ops and their gradients against the CPU reference
 * over awkward shape pairs, a finite-difference check of the gradients, in-place use,
 * omitted operand views, broadcast-shape rules and argument errors. */
#include "harness.h"
#include "kernels/ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static vkt_context *ctx;
static vkt_stream *s;

static vkt_shape shp(uint32_t ndim, uint32_t d0, uint32_t d1, uint32_t d2, uint32_t d3)
{
    vkt_shape r = {ndim, {d0, d1, d2, d3}};
    return r;
}

static uint64_t count(const vkt_shape *sh)
{
    uint64_t n = 1;
    for (uint32_t k = 0; k < sh->ndim; k++)
        n *= sh->dims[k];
    return n;
}

static const char *str(const vkt_shape *sh, char *buf)
{
    int len = sprintf(buf, "[");
    for (uint32_t k = 0; k < sh->ndim; k++)
        len += sprintf(buf + len, k ? ",%u" : "%u", sh->dims[k]);
    sprintf(buf + len, "]");
    return buf;
}

/* Operand values: b of div stays away from 0. */
static void inputs(vkt_binary_op op, float *a, uint64_t na, float *b, uint64_t nb)
{
    th_fill_uniform(a, na, -1.0f, 1.0f);
    th_fill_uniform(b, nb, -1.0f, 1.0f);
    if (op == VKT_BINARY_DIV)
        for (uint64_t i = 0; i < nb; i++)
            b[i] = b[i] < 0 ? b[i] - 0.5f : b[i] + 0.5f;
}

/* Forward and both gradients of every op for one shape pair. */
static void check_pair(vkt_shape as, vkt_shape bs)
{
    vkt_shape os;
    char msg[256], sa[64], sb[64];
    TH_OK(NULL, vkt_broadcast_shape(&as, &bs, &os, msg, sizeof msg));
    uint64_t na = count(&as), nb = count(&bs), no = count(&os);
    float *a = th_alloc_floats(na), *b = th_alloc_floats(nb), *dy = th_alloc_floats(no);
    float *out = th_alloc_floats(no), *want = th_alloc_floats(no);
    float *ga = th_alloc_floats(na), *gb = th_alloc_floats(nb);
    float *ga_ref = th_alloc_floats(na), *gb_ref = th_alloc_floats(nb);
    th_buf ba = th_buf_create(ctx, na), bb = th_buf_create(ctx, nb), bdy = th_buf_create(ctx, no);
    th_buf bo = th_buf_create(ctx, no), bga = th_buf_create(ctx, na), bgb = th_buf_create(ctx, nb);
    for (int op = 0; op < VKT_BINARY_COUNT; op++) {
        inputs((vkt_binary_op)op, a, na, b, nb);
        th_fill_uniform(dy, no, -1.0f, 1.0f);
        th_buf_write(&ba, a);
        th_buf_write(&bb, b);
        th_buf_write(&bdy, dy);
        TH_OK(ctx, vkt_stream_reset(s));
        TH_OK(ctx, vkt_binary(s, op, th_view(&ba), &as, th_view(&bb), &bs, th_view(&bo)));
        TH_OK(ctx, vkt_binary_backward(s, op, 0, th_view(&ba), &as, th_view(&bb), &bs,
                                       th_view(&bdy), th_view(&bga)));
        TH_OK(ctx, vkt_binary_backward(s, op, 1, th_view(&ba), &as, th_view(&bb), &bs,
                                       th_view(&bdy), th_view(&bgb)));
        TH_OK(ctx, vkt_stream_run(s));
        th_buf_read(&bo, out);
        th_buf_read(&bga, ga);
        th_buf_read(&bgb, gb);
        kref_binary(op, a, &as, b, &bs, want);
        kref_binary_backward(op, 0, a, &as, b, &bs, dy, ga_ref);
        kref_binary_backward(op, 1, a, &as, b, &bs, dy, gb_ref);
        char what[160];
        const char *name = vkt_binary_op_name(op);
        snprintf(what, sizeof what, "%s %s with %s", name, str(&as, sa), str(&bs, sb));
        th_compare(what, out, want, no, op == VKT_BINARY_DIV ? 4e-7f : 1e-7f, 1e-12f);
        /* A gradient element sums no / n terms of magnitude <= 4 (compensated sums on
         * the device: the error stays near the last rounding, measured <= 2e-7 relative). */
        double ra = (double)no / na, rb = (double)no / nb;
        snprintf(what, sizeof what, "%s grad a, %s with %s", name, sa, sb);
        th_compare(what, ga, ga_ref, na, 2e-6f, (float)(1e-6 * sqrt(ra)));
        snprintf(what, sizeof what, "%s grad b, %s with %s", name, sa, sb);
        th_compare(what, gb, gb_ref, nb, 2e-6f, (float)(1e-6 * sqrt(rb)));
    }
    th_buf_guards_ok(&bo, "binary out");
    th_buf_guards_ok(&bga, "binary grad a");
    th_buf_guards_ok(&bgb, "binary grad b");
    th_buf_destroy(&ba), th_buf_destroy(&bb), th_buf_destroy(&bdy);
    th_buf_destroy(&bo), th_buf_destroy(&bga), th_buf_destroy(&bgb);
    free(a), free(b), free(dy), free(out), free(want);
    free(ga), free(gb), free(ga_ref), free(gb_ref);
}

/* L = sum(dy * (a op b)) from the reference, in double. */
static double loss(vkt_binary_op op, const float *a, const vkt_shape *as, const float *b,
                   const vkt_shape *bs, const float *dy, float *out, uint64_t no)
{
    kref_binary(op, a, as, b, bs, out);
    double l = 0;
    for (uint64_t i = 0; i < no; i++)
        l += (double)dy[i] * out[i];
    return l;
}

/* The device gradients against centred finite differences of kref_binary. */
static void check_gradient(vkt_shape as, vkt_shape bs)
{
    vkt_shape os;
    TH_OK(NULL, vkt_broadcast_shape(&as, &bs, &os, NULL, 0));
    uint64_t na = count(&as), nb = count(&bs), no = count(&os);
    float *a = th_alloc_floats(na), *b = th_alloc_floats(nb), *dy = th_alloc_floats(no);
    float *out = th_alloc_floats(no), *g = th_alloc_floats(na > nb ? na : nb);
    float *fd = th_alloc_floats(na > nb ? na : nb);
    th_buf ba = th_buf_create(ctx, na), bb = th_buf_create(ctx, nb), bdy = th_buf_create(ctx, no);
    th_buf bga = th_buf_create(ctx, na), bgb = th_buf_create(ctx, nb);
    for (int op = 0; op < VKT_BINARY_COUNT; op++) {
        inputs((vkt_binary_op)op, a, na, b, nb);
        th_fill_uniform(dy, no, -1.0f, 1.0f);
        th_buf_write(&ba, a);
        th_buf_write(&bb, b);
        th_buf_write(&bdy, dy);
        TH_OK(ctx, vkt_stream_reset(s));
        TH_OK(ctx, vkt_binary_backward(s, op, 0, th_view(&ba), &as, th_view(&bb), &bs,
                                       th_view(&bdy), th_view(&bga)));
        TH_OK(ctx, vkt_binary_backward(s, op, 1, th_view(&ba), &as, th_view(&bb), &bs,
                                       th_view(&bdy), th_view(&bgb)));
        TH_OK(ctx, vkt_stream_run(s));
        for (int which = 0; which < 2; which++) {
            float *v = which ? b : a;
            uint64_t nv = which ? nb : na;
            th_buf_read(which ? &bgb : &bga, g);
            for (uint64_t j = 0; j < nv; j++) {
                float keep = v[j];
                float h = 1e-2f;
                v[j] = keep + h;
                double lp = loss(op, a, &as, b, &bs, dy, out, no);
                double xp = v[j];
                v[j] = keep - h;
                double lm = loss(op, a, &as, b, &bs, dy, out, no);
                double xm = v[j];
                v[j] = keep;
                fd[j] = (float)((lp - lm) / (xp - xm));
            }
            char what[256], sa[64], sb[64];
            snprintf(what, sizeof what, "%s grad %c vs finite difference, %s with %s",
                     vkt_binary_op_name(op), which ? 'b' : 'a', str(&as, sa), str(&bs, sb));
            th_compare(what, g, fd, nv, 2e-3f, 5e-4f);
        }
    }
    th_buf_destroy(&ba), th_buf_destroy(&bb), th_buf_destroy(&bdy);
    th_buf_destroy(&bga), th_buf_destroy(&bgb);
    free(a), free(b), free(dy), free(out), free(g), free(fd);
}

/* out = a + b written over a (gradient accumulation), and gradients that do not read
 * the operand values given {NULL, 0} views. */
static void check_in_place_and_null_views(void)
{
    vkt_shape sh = shp(2, 3, 1001, 0, 0);
    uint64_t n = count(&sh);
    float *a = th_alloc_floats(n), *b = th_alloc_floats(n), *got = th_alloc_floats(n);
    float *want = th_alloc_floats(n);
    th_fill_uniform(a, n, -1, 1);
    th_fill_uniform(b, n, -1, 1);
    kref_binary(VKT_BINARY_ADD, a, &sh, b, &sh, want);
    th_buf ba = th_buf_create(ctx, n), bb = th_buf_create(ctx, n), bg = th_buf_create(ctx, n);
    th_buf_write(&ba, a);
    th_buf_write(&bb, b);
    TH_OK(ctx, vkt_stream_reset(s));
    TH_OK(ctx, vkt_binary(s, VKT_BINARY_ADD, th_view(&ba), &sh, th_view(&bb), &sh, th_view(&ba)));
    TH_OK(ctx, vkt_stream_run(s));
    th_buf_read(&ba, got);
    th_compare("add in place (out = a)", got, want, n, 0, 0);
    th_buf_guards_ok(&ba, "in place");

    /* d(a - b)/db = -dy, over a [1] operand: the sum of -dy. */
    vkt_shape one = shp(1, 1, 0, 0, 0);
    vkt_view none = {NULL, 0};
    TH_OK(ctx, vkt_stream_reset(s));
    TH_OK(ctx, vkt_binary_backward(s, VKT_BINARY_SUB, 1, none, &sh, none, &one, th_view(&bb),
                                   th_view(&bg)));
    TH_OK(ctx, vkt_stream_run(s));
    float g[1], g_ref[1];
    TH_OK(ctx, vkt_buffer_read(bg.buffer, bg.offset * 4, g, 4));
    float dummy[1] = {1.0f};
    kref_binary_backward(VKT_BINARY_SUB, 1, b, &sh, dummy, &one, b, g_ref);
    th_compare("sub grad b with NULL operand views", g, g_ref, 1, 1e-5f, 1e-4f);
    /* mul's gradient of a reads b: a NULL b is refused. */
    TH_STATUS(ctx, vkt_binary_backward(s, VKT_BINARY_MUL, 0, th_view(&ba), &sh, none, &sh,
                                       th_view(&bb), th_view(&bg)), VKT_ERROR_INVALID_ARGUMENT);
    th_buf_destroy(&ba), th_buf_destroy(&bb), th_buf_destroy(&bg);
    free(a), free(b), free(got), free(want);
}

/* Shapes that take the vec4 paths where the alignment allows, at every alignment phase
 * of a, b and out; nothing outside out may change. */
static void check_phases(void)
{
    enum { N = 203, PAD = 8, TOTAL = N + 2 * PAD };
    float a[TOTAL], b[TOTAL], got[TOTAL], want[TOTAL];
    vkt_buffer *ba, *bb, *bo;
    TH_OK(ctx, vkt_buffer_create(ctx, TOTAL * 4, VKT_MEMORY_DEVICE, &ba));
    TH_OK(ctx, vkt_buffer_create(ctx, TOTAL * 4, VKT_MEMORY_DEVICE, &bb));
    TH_OK(ctx, vkt_buffer_create(ctx, TOTAL * 4, VKT_MEMORY_DEVICE, &bo));
    th_fill_uniform(a, TOTAL, -1.0f, 1.0f);
    th_fill_uniform(b, TOTAL, 0.5f, 1.5f);
    TH_OK(ctx, vkt_buffer_write(ba, 0, a, sizeof a));
    TH_OK(ctx, vkt_buffer_write(bb, 0, b, sizeof b));
    /* (a, b): equal, b scalar, a scalar (one dim); then several dims whose last is a
     * multiple of 4 (vec4 units where aligned): a row, a column and a row broadcast. */
    const vkt_shape forms[][2] = {
        {shp(1, N - 6, 0, 0, 0), shp(1, N - 6, 0, 0, 0)},
        {shp(1, N - 6, 0, 0, 0), shp(0, 0, 0, 0, 0)},
        {shp(0, 0, 0, 0, 0), shp(1, N - 6, 0, 0, 0)},
        {shp(2, 16, 12, 0, 0), shp(1, 12, 0, 0, 0)},
        {shp(2, 16, 1, 0, 0), shp(2, 1, 12, 0, 0)},
        {shp(3, 2, 1, 24, 0), shp(3, 2, 4, 24, 0)},
        {shp(2, 4, 48, 0, 0), shp(2, 4, 1, 0, 0)},
    };
    for (int pa = 0; pa < 4; pa++)
        for (int pb = 0; pb < 4; pb++)
            for (int po = 0; po < 4; po++)
                for (int form = 0; form < (int)(sizeof forms / sizeof forms[0]); form++) {
                    const vkt_shape *as = &forms[form][0], *bs = &forms[form][1];
                    vkt_view va = {ba, PAD + pa}, vb = {bb, PAD + pb}, vo = {bo, PAD + po};
                    for (int i = 0; i < TOTAL; i++)
                        want[i] = -777.0f;
                    TH_OK(ctx, vkt_buffer_write(bo, 0, want, sizeof want));
                    TH_OK(ctx, vkt_stream_reset(s));
                    TH_OK(ctx, vkt_binary(s, VKT_BINARY_DIV, va, as, vb, bs, vo));
                    TH_OK(ctx, vkt_stream_run(s));
                    TH_OK(ctx, vkt_buffer_read(bo, 0, got, sizeof got));
                    kref_binary(VKT_BINARY_DIV, a + PAD + pa, as, b + PAD + pb, bs,
                                   want + PAD + po);
                    char what[96];
                    snprintf(what, sizeof what, "div form %d at phases a %d, b %d, out %d", form,
                             pa, pb, po);
                    th_compare(what, got, want, TOTAL, 4e-7f, 1e-12f);
                }
    vkt_buffer_destroy(ba);
    vkt_buffer_destroy(bb);
    vkt_buffer_destroy(bo);
}

static void check_broadcast_rules(void)
{
    struct { vkt_shape a, b, want; } ok[] = {
        {shp(3, 3, 1, 5, 0), shp(2, 4, 1, 0, 0), shp(3, 3, 4, 5, 0)},
        {shp(0, 0, 0, 0, 0), shp(2, 2, 3, 0, 0), shp(2, 2, 3, 0, 0)},
        {shp(2, 7, 1, 0, 0), shp(2, 1, 11, 0, 0), shp(2, 7, 11, 0, 0)},
        {shp(4, 2, 1, 4, 1), shp(3, 3, 1, 5, 0), shp(4, 2, 3, 4, 5)},
        {shp(1, 1, 0, 0, 0), shp(0, 0, 0, 0, 0), shp(1, 1, 0, 0, 0)},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        vkt_shape o;
        char sa[64], sb[64];
        TH_OK(NULL, vkt_broadcast_shape(&ok[i].a, &ok[i].b, &o, NULL, 0));
        TH_CHECK(o.ndim == ok[i].want.ndim &&
                     memcmp(o.dims, ok[i].want.dims, o.ndim * sizeof o.dims[0]) == 0,
                 "broadcast of %s and %s", str(&ok[i].a, sa), str(&ok[i].b, sb));
    }
    vkt_shape a = shp(2, 3, 2, 0, 0), b = shp(1, 4, 0, 0, 0), o;
    char msg[256] = "";
    TH_STATUS(NULL, vkt_broadcast_shape(&a, &b, &o, msg, sizeof msg), VKT_ERROR_SHAPE);
    TH_CHECK(strstr(msg, "[3,2]") && strstr(msg, "[4]"), "the message names both shapes: %s",
             msg);
    TH_CHECK(o.ndim == 0, "the output shape is cleared on failure");
    char tiny[8];
    TH_STATUS(NULL, vkt_broadcast_shape(&a, &b, &o, tiny, sizeof tiny), VKT_ERROR_SHAPE);
    TH_CHECK(strlen(tiny) < sizeof tiny, "a short message buffer is not overrun");
    vkt_shape five = {5, {1, 1, 1, 1}};
    TH_STATUS(NULL, vkt_broadcast_shape(&five, &b, &o, NULL, 0), VKT_ERROR_INVALID_ARGUMENT);
    vkt_shape zero = shp(2, 3, 0, 0, 0);
    TH_STATUS(NULL, vkt_broadcast_shape(&zero, &b, &o, NULL, 0), VKT_ERROR_INVALID_ARGUMENT);
    TH_STATUS(NULL, vkt_broadcast_shape(NULL, &b, &o, NULL, 0), VKT_ERROR_INVALID_ARGUMENT);
}

static void check_errors(void)
{
    th_buf buf = th_buf_create(ctx, 64);
    vkt_view v = th_view(&buf);
    vkt_shape a = shp(2, 3, 2, 0, 0), b = shp(1, 4, 0, 0, 0), ok = shp(1, 2, 0, 0, 0);
    TH_STATUS(ctx, vkt_binary(s, VKT_BINARY_ADD, v, &a, v, &b, v), VKT_ERROR_SHAPE);
    const char *m = vkt_context_errmsg(ctx);
    TH_CHECK(strstr(m, "[3,2]") && strstr(m, "[4]"), "the message names both shapes: %s", m);
    TH_STATUS(ctx, vkt_binary_backward(s, VKT_BINARY_MUL, 0, v, &a, v, &b, v, v),
              VKT_ERROR_SHAPE);
    TH_STATUS(ctx, vkt_binary(s, VKT_BINARY_COUNT, v, &a, v, &ok, v),
              VKT_ERROR_INVALID_ARGUMENT);
    TH_STATUS(ctx, vkt_binary(s, VKT_BINARY_ADD, v, NULL, v, &ok, v),
              VKT_ERROR_INVALID_ARGUMENT);
    TH_STATUS(ctx, vkt_binary_backward(s, VKT_BINARY_MUL, 2, v, &a, v, &ok, v, v),
              VKT_ERROR_INVALID_ARGUMENT);
    TH_STATUS(NULL, vkt_binary(NULL, VKT_BINARY_ADD, v, &a, v, &ok, v),
              VKT_ERROR_INVALID_ARGUMENT);
    /* Views past the end of the buffer. */
    uint64_t total = vkt_buffer_size(buf.buffer) / 4;
    vkt_view past = {buf.buffer, total - 5};
    TH_STATUS(ctx, vkt_binary(s, VKT_BINARY_ADD, past, &a, v, &ok, v),
              VKT_ERROR_INVALID_ARGUMENT);
    TH_STATUS(ctx, vkt_binary(s, VKT_BINARY_ADD, v, &a, v, &ok, past),
              VKT_ERROR_INVALID_ARGUMENT);
    TH_STATUS(ctx, vkt_binary_backward(s, VKT_BINARY_ADD, 0, v, &a, v, &ok, v, past),
              VKT_ERROR_INVALID_ARGUMENT);
    th_buf_destroy(&buf);
    for (int i = 0; i < VKT_BINARY_COUNT; i++)
        TH_CHECK(strcmp(vkt_binary_op_name((vkt_binary_op)i), "unknown") != 0,
                 "binary op %d has a name", i);
    TH_CHECK(strcmp(vkt_binary_op_name(VKT_BINARY_DIV), "div") == 0, "div is named div");
    TH_CHECK(strcmp(vkt_binary_op_name(VKT_BINARY_COUNT), "unknown") == 0, "unknown op name");
}

int main(void)
{
    th_init("test_binary");
    ctx = th_context(VKT_KERNELS_AUTO);
    s = th_stream(ctx, 0);
    check_broadcast_rules();
    struct { vkt_shape a, b; } pairs[] = {
        {shp(0, 0, 0, 0, 0), shp(2, 37, 5, 0, 0)},   /* scalar with tensor */
        {shp(2, 5, 7, 0, 0), shp(1, 1, 0, 0, 0)},    /* tensor with [1] */
        {shp(3, 3, 1, 5, 0), shp(2, 4, 1, 0, 0)},
        {shp(2, 7, 1, 0, 0), shp(2, 1, 11, 0, 0)},
        {shp(2, 13, 17, 0, 0), shp(2, 13, 17, 0, 0)}, /* equal shapes */
        {shp(1, 1, 0, 0, 0), shp(1, 1, 0, 0, 0)},
        {shp(4, 2, 3, 4, 5), shp(3, 3, 1, 5, 0)},     /* rank 4 */
        {shp(4, 2, 1, 4, 1), shp(4, 1, 3, 1, 5)},
        {shp(4, 3, 1, 1, 7), shp(4, 3, 2, 5, 7)},
        {shp(2, 67, 33, 0, 0), shp(1, 33, 0, 0, 0)},  /* bias */
        {shp(2, 1, 65, 0, 0), shp(2, 257, 1, 0, 0)},
        {shp(2, 1100, 1000, 0, 0), shp(1, 1000, 0, 0, 0)}, /* > 1M elements */
        {shp(1, 1048583, 0, 0, 0), shp(1, 1048583, 0, 0, 0)},
        {shp(3, 1024, 1, 1031, 0), shp(1, 1, 0, 0, 0)},
        {shp(3, 100, 50, 200, 0), shp(3, 1, 50, 1, 0)}, /* b's gradient sums 2 dims */
    };
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++)
        check_pair(pairs[i].a, pairs[i].b);
    check_gradient(shp(3, 3, 1, 5, 0), shp(2, 4, 1, 0, 0));
    check_gradient(shp(2, 7, 1, 0, 0), shp(2, 1, 11, 0, 0));
    check_gradient(shp(0, 0, 0, 0, 0), shp(2, 5, 7, 0, 0));
    check_gradient(shp(4, 2, 1, 4, 1), shp(4, 1, 3, 1, 5));
    check_gradient(shp(2, 6, 9, 0, 0), shp(2, 6, 9, 0, 0));
    check_in_place_and_null_views();
    check_phases();
    check_errors();
    th_use_other_variant(&ctx, &s); /* workgroup sizes and row splits differ */
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++)
        if (i % 3 == 0 || i + 1 == sizeof pairs / sizeof pairs[0])
            check_pair(pairs[i].a, pairs[i].b);
    vkt_stream_destroy(s);
    return th_finish();
}
