/* ref_softmax.c - CPU reference of row softmax / log-softmax and their backward, in
 * double, stable (the row max is subtracted). */
#include "kernels/ref.h"

#include <math.h>

void kref_softmax(int log_, const float *x, float *y, uint32_t rows, uint32_t cols)
{
    for (uint64_t r = 0; r < rows; r++) {
        const float *xr = x + r * cols;
        float *yr = y + r * cols;
        double m = xr[0];
        for (uint32_t k = 1; k < cols; k++)
            if (xr[k] > m || isnan(xr[k]))
                m = xr[k];
        double s = 0;
        for (uint32_t k = 0; k < cols; k++)
            s += exp(xr[k] - m);
        double shift = m + log(s);
        for (uint32_t k = 0; k < cols; k++)
            yr[k] = (float)(log_ ? xr[k] - shift : exp(xr[k] - m) / s);
    }
}

void kref_softmax_backward(int log_, const float *y, const float *dy, float *dx,
                              uint32_t rows, uint32_t cols)
{
    for (uint64_t r = 0; r < rows; r++) {
        const float *yr = y + r * cols, *dyr = dy + r * cols;
        float *dxr = dx + r * cols;
        double s = 0;
        for (uint32_t k = 0; k < cols; k++)
            s += log_ ? (double)dyr[k] : (double)dyr[k] * yr[k];
        for (uint32_t k = 0; k < cols; k++)
            dxr[k] = (float)(log_ ? dyr[k] - exp(yr[k]) * s : yr[k] * (dyr[k] - s));
    }
}
