/* ref_conv.c - double-precision references of convolution and pooling (conv.h), written
 * from the definitions: every output position walks its window directly (no im2col), and
 * the backward passes scatter each output gradient along the same window (+=). The device
 * code gathers instead; the two meet only in the tests. */
#include "kernels/conv.h"

#include <stdlib.h>

/* Input coordinate of kernel tap k at output position o, or -1 when it falls in the
 * padding before the start (the caller checks the far end). */
static long tap(uint32_t o, uint32_t k, uint32_t stride, uint32_t pad, uint32_t dil)
{
    long v = (long)o * stride - (long)pad + (long)k * dil;
    return v < 0 ? -1 : v;
}

/* What one term of the convolution does: y[yi] gets x[xi] * w[wi]. */
typedef struct taps {
    const double *x, *w, *dy;
    double *y, *dx, *dw;
} taps;
typedef void (*tap_fn)(taps *t, uint64_t xi, uint64_t wi, uint64_t yi);

static void fwd_term(taps *t, uint64_t xi, uint64_t wi, uint64_t yi)
{
    t->y[yi] += t->x[xi] * t->w[wi];
}
static void dx_term(taps *t, uint64_t xi, uint64_t wi, uint64_t yi)
{
    t->dx[xi] += t->dy[yi] * t->w[wi];
}
static void dw_term(taps *t, uint64_t xi, uint64_t wi, uint64_t yi)
{
    t->dw[wi] += t->dy[yi] * t->x[xi];
}

/* The terms of output (b, o, oy, ox): input channels of o's group, window taps inside
 * the image. */
static void output_terms(const kc_conv *g, uint32_t b, uint32_t o, uint32_t oy, uint32_t ox,
                         tap_fn f, taps *t)
{
    uint32_t cg = g->c / g->groups, og = g->oc / g->groups;
    uint64_t yi = (((uint64_t)b * g->oc + o) * g->oh + oy) * g->ow + ox;
    for (uint32_t ci = 0; ci < cg; ci++) {
        uint64_t plane = (uint64_t)b * g->c + o / og * cg + ci; /* x[b, channel] */
        for (uint32_t ky = 0; ky < g->kh; ky++) {
            long iy = tap(oy, ky, g->stride_h, g->pad_h, g->dil_h);
            if (iy < 0 || iy >= (long)g->h)
                continue;
            for (uint32_t kx = 0; kx < g->kw; kx++) {
                long ix = tap(ox, kx, g->stride_w, g->pad_w, g->dil_w);
                if (ix < 0 || ix >= (long)g->w)
                    continue;
                uint64_t xi = (plane * g->h + (uint64_t)iy) * g->w + (uint64_t)ix;
                uint64_t wi = (((uint64_t)o * cg + ci) * g->kh + ky) * g->kw + kx;
                f(t, xi, wi, yi);
            }
        }
    }
}

/* Every term of the convolution, output by output. */
static void all_terms(const kc_conv *g, tap_fn f, taps *t)
{
    for (uint32_t b = 0; b < g->n; b++)
        for (uint32_t o = 0; o < g->oc; o++)
            for (uint32_t oy = 0; oy < g->oh; oy++)
                for (uint32_t ox = 0; ox < g->ow; ox++)
                    output_terms(g, b, o, oy, ox, f, t);
}

void kc_ref_conv2d(const kc_conv *g, const double *x, const double *w, const double *bias,
                   double *y)
{
    uint64_t plane = (uint64_t)g->oh * g->ow;
    for (uint64_t i = 0; i < (uint64_t)g->n * g->oc * plane; i++)
        y[i] = bias ? bias[i / plane % g->oc] : 0.0;
    taps t = {.x = x, .w = w, .y = y};
    all_terms(g, fwd_term, &t);
}

void kc_ref_conv2d_backward(const kc_conv *g, const double *x, const double *w,
                            const double *dy, double *dx, double *dw, double *db)
{
    uint64_t plane = (uint64_t)g->oh * g->ow;
    if (db)
        for (uint64_t i = 0; i < (uint64_t)g->n * g->oc * plane; i++)
            db[i / plane % g->oc] += dy[i];
    taps t = {.x = x, .w = w, .dy = dy, .dx = dx, .dw = dw};
    if (dx)
        all_terms(g, dx_term, &t);
    if (dw)
        all_terms(g, dw_term, &t);
}

/* The real (not padded) input positions of output (oy, ox) of plane `pl`, in (ky, kx)
 * order, into idx (room for kh kw); returns how many. */
static uint32_t window(const kc_pool *p, uint64_t pl, uint32_t oy, uint32_t ox, uint64_t *idx)
{
    uint32_t count = 0;
    for (uint32_t ky = 0; ky < p->kh; ky++) {
        long iy = (long)oy * p->stride_h - (long)p->pad_h + ky;
        for (uint32_t kx = 0; kx < p->kw; kx++) {
            long ix = (long)ox * p->stride_w - (long)p->pad_w + kx;
            if (iy >= 0 && iy < (long)p->h && ix >= 0 && ix < (long)p->w)
                idx[count++] = (pl * p->h + (uint64_t)iy) * p->w + (uint64_t)ix;
        }
    }
    return count;
}

/* The first largest input of a window (max pooling). */
static uint64_t window_max(const double *x, const uint64_t *idx, uint32_t count)
{
    uint64_t best = idx[0];
    for (uint32_t i = 1; i < count; i++)
        if (x[idx[i]] > x[best])
            best = idx[i];
    return best;
}

/* Calls f for each output of the pooling with its window (a scratch of kh kw indices). */
static void for_each_window(const kc_pool *p, const double *x, const double *dy, double *out,
                            void (*f)(const kc_pool *, const double *, const double *, double *,
                                      uint64_t, const uint64_t *, uint32_t))
{
    uint64_t *idx = malloc((size_t)p->kh * p->kw * sizeof *idx);
    if (!idx)
        return;
    uint64_t planes = (uint64_t)p->n * p->c;
    for (uint64_t pl = 0; pl < planes; pl++)
        for (uint32_t oy = 0; oy < p->oh; oy++)
            for (uint32_t ox = 0; ox < p->ow; ox++) {
                uint32_t count = window(p, pl, oy, ox, idx);
                f(p, x, dy, out, (pl * p->oh + oy) * p->ow + ox, idx, count);
            }
    free(idx);
}

/* y[yi] from its window: the maximum, or the sum over kh kw (padding counts as zeros). */
static void pool_fwd(const kc_pool *p, const double *x, const double *dy, double *y,
                     uint64_t yi, const uint64_t *idx, uint32_t count)
{
    (void)dy;
    if (p->max && count) { /* kc_pool_init's pad <= k / 2 leaves no window empty */
        y[yi] = x[window_max(x, idx, count)];
        return;
    }
    double sum = 0.0;
    for (uint32_t i = 0; i < count; i++)
        sum += x[idx[i]];
    y[yi] = sum / ((double)p->kh * p->kw);
}

/* dy[yi] back to its window: all to the maximum, or an equal share of 1 / (kh kw) to each
 * real position. */
static void pool_bwd(const kc_pool *p, const double *x, const double *dy, double *dx,
                     uint64_t yi, const uint64_t *idx, uint32_t count)
{
    if (p->max && count) {
        dx[window_max(x, idx, count)] += dy[yi];
        return;
    }
    for (uint32_t i = 0; i < count; i++)
        dx[idx[i]] += dy[yi] / ((double)p->kh * p->kw);
}

void kc_ref_pool2d(const kc_pool *p, const double *x, double *y)
{
    for_each_window(p, x, NULL, y, pool_fwd);
}

void kc_ref_pool2d_backward(const kc_pool *p, const double *x, const double *dy, double *dx)
{
    for_each_window(p, x, dy, dx, pool_bwd);
}
