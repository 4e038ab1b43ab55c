/* ref_fill.c - CPU reference of fill and copy. */
#include "kernels/ref.h"

#include <string.h>

void kref_fill(float *y, uint64_t n, float value)
{
    for (uint64_t i = 0; i < n; i++)
        y[i] = value;
}

void kref_copy(const float *x, float *y, uint64_t n)
{
    if (n)
        memmove(y, x, n * sizeof *y);
}
