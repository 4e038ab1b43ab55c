/* ref_binary.c - CPU reference of the broadcasting binary ops and their gradients.
 * Shapes must broadcast (the Vulkan entry points check; the reference trusts). */
#include "kernels/ref.h"

#include <stdlib.h>
#include <string.h>

/* A shape right-aligned into 4 dims (leading 1s) and its row-major strides, with 0 along
 * dimensions of size 1 so that they broadcast. */
typedef struct ref_layout {
    uint64_t dims[4], str[4];
} ref_layout;

static ref_layout layout_of(const vkt_shape *s)
{
    ref_layout l;
    uint32_t pad = VKT_MAX_DIMS - s->ndim;
    for (uint32_t k = 0; k < 4; k++)
        l.dims[k] = k < pad ? 1 : s->dims[k - pad];
    uint64_t st = 1;
    for (int k = 3; k >= 0; k--) {
        l.str[k] = l.dims[k] == 1 ? 0 : st;
        st *= l.dims[k];
    }
    return l;
}

static ref_layout out_layout(const ref_layout *a, const ref_layout *b)
{
    ref_layout o;
    for (int k = 0; k < 4; k++)
        o.dims[k] = a->dims[k] > b->dims[k] ? a->dims[k] : b->dims[k];
    uint64_t st = 1;
    for (int k = 3; k >= 0; k--) {
        o.str[k] = st;
        st *= o.dims[k];
    }
    return o;
}

static double apply(vkt_binary_op op, double u, double v)
{
    switch (op) {
    case VKT_BINARY_ADD: return u + v;
    case VKT_BINARY_SUB: return u - v;
    case VKT_BINARY_MUL: return u * v;
    default: return u / v;
    }
}

/* dy * d(u op v)/d(operand which) */
static double grad_term(vkt_binary_op op, int which, double u, double v, double d)
{
    switch (op) {
    case VKT_BINARY_ADD: return d;
    case VKT_BINARY_SUB: return which == 0 ? d : -d;
    case VKT_BINARY_MUL: return which == 0 ? d * v : d * u;
    default: return which == 0 ? d / v : -d * (u / v) / v;
    }
}

void kref_binary(vkt_binary_op op, const float *a, const vkt_shape *a_shape, const float *b,
                    const vkt_shape *b_shape, float *out)
{
    ref_layout la = layout_of(a_shape), lb = layout_of(b_shape), lo = out_layout(&la, &lb);
    uint64_t i = 0;
    for (uint64_t c0 = 0; c0 < lo.dims[0]; c0++)
        for (uint64_t c1 = 0; c1 < lo.dims[1]; c1++)
            for (uint64_t c2 = 0; c2 < lo.dims[2]; c2++)
                for (uint64_t c3 = 0; c3 < lo.dims[3]; c3++) {
                    uint64_t ai = c0 * la.str[0] + c1 * la.str[1] + c2 * la.str[2] +
                                  c3 * la.str[3];
                    uint64_t bi = c0 * lb.str[0] + c1 * lb.str[1] + c2 * lb.str[2] +
                                  c3 * lb.str[3];
                    /* One float operation, rounded once, as on the device. */
                    out[i++] = (float)apply(op, a[ai], b[bi]);
                }
}

void kref_binary_backward(vkt_binary_op op, int which, const float *a,
                             const vkt_shape *a_shape, const float *b, const vkt_shape *b_shape,
                             const float *dy, float *grad)
{
    ref_layout la = layout_of(a_shape), lb = layout_of(b_shape), lo = out_layout(&la, &lb);
    const ref_layout *lw = which == 0 ? &la : &lb;
    uint64_t n = 1;
    for (int k = 0; k < 4; k++)
        n *= lw->dims[k];
    /* Accumulate in double in a scratch array, then round once. */
    double acc_small[64];
    double *acc = acc_small;
    double *heap = NULL;
    if (n > 64) {
        heap = calloc(n, sizeof *heap);
        if (!heap) {
            memset(grad, 0xff, n * sizeof *grad); /* NaN: an unusable result is visible */
            return;
        }
        acc = heap;
    } else {
        memset(acc_small, 0, sizeof acc_small);
    }
    uint64_t i = 0;
    for (uint64_t c0 = 0; c0 < lo.dims[0]; c0++)
        for (uint64_t c1 = 0; c1 < lo.dims[1]; c1++)
            for (uint64_t c2 = 0; c2 < lo.dims[2]; c2++)
                for (uint64_t c3 = 0; c3 < lo.dims[3]; c3++, i++) {
                    uint64_t ai = c0 * la.str[0] + c1 * la.str[1] + c2 * la.str[2] +
                                  c3 * la.str[3];
                    uint64_t bi = c0 * lb.str[0] + c1 * lb.str[1] + c2 * lb.str[2] +
                                  c3 * lb.str[3];
                    acc[which == 0 ? ai : bi] += grad_term(op, which, a[ai], b[bi], dy[i]);
                }
    for (uint64_t k = 0; k < n; k++)
        grad[k] = (float)acc[k];
    free(heap);
}
