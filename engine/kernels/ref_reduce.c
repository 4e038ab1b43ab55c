/* ref_reduce.c - CPU reference of the axis reductions. Sums in double. MAX and ARGMAX
 * follow the shader: NaN is the largest value, ties go to the first index. */
#include "kernels/ref.h"

#include <math.h>
#include <string.h>

void kref_reduce(vkt_reduce_op op, const float *x, const vkt_shape *shape, uint32_t axis,
                    void *out)
{
    uint64_t outer = 1, inner = 1, len = shape->dims[axis];
    for (uint32_t k = 0; k < axis; k++)
        outer *= shape->dims[k];
    for (uint32_t k = axis + 1; k < shape->ndim; k++)
        inner *= shape->dims[k];
    float *yf = out;
    uint32_t *yi = out;
    for (uint64_t o = 0; o < outer; o++)
        for (uint64_t i = 0; i < inner; i++) {
            const float *row = x + o * len * inner + i;
            uint64_t at = o * inner + i;
            if (op == VKT_REDUCE_SUM || op == VKT_REDUCE_MEAN) {
                double s = 0;
                for (uint64_t k = 0; k < len; k++)
                    s += row[k * inner];
                yf[at] = (float)(op == VKT_REDUCE_MEAN ? s / (double)len : s);
                continue;
            }
            uint64_t best = 0;
            for (uint64_t k = 1; k < len; k++) {
                float v = row[k * inner], w = row[best * inner];
                if (!isnan(w) && (isnan(v) || v > w))
                    best = k;
            }
            if (op == VKT_REDUCE_ARGMAX)
                yi[at] = (uint32_t)best;
            else
                yf[at] = row[best * inner];
        }
}
