/* ref_unary.c - CPU reference of the unary ops and their derivatives, in double. The
 * formulas are shaders/activation.h, which the shaders compile too. */
#include "kernels/ref.h"
#include "activation.h"

#include <math.h>

float kref_unary_f(vkt_unary_op op, float alpha, float x)
{
    return (unsigned)op < VKT_UNARY_COUNT ? (float)act_f(op, alpha, x) : NAN;
}

float kref_unary_df(vkt_unary_op op, float alpha, float x)
{
    return (unsigned)op < VKT_UNARY_COUNT ? (float)act_df(op, alpha, x) : NAN;
}

void kref_unary(vkt_unary_op op, float alpha, const float *x, float *y, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++)
        y[i] = kref_unary_f(op, alpha, x[i]);
}

void kref_unary_backward(vkt_unary_op op, float alpha, const float *x, const float *dy,
                            float *dx, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++)
        dx[i] = (float)((double)dy[i] * (double)kref_unary_df(op, alpha, x[i]));
}
