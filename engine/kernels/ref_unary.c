/* ref_unary.c - CPU reference of the unary ops and their derivatives, in double. The
 * formulas are those of shaders/common.glsl. */
#include "kernels/ref.h"

#include <math.h>

#define GELU_K 0.7978845608028654 /* sqrt(2/pi) */
#define GELU_C 0.044715

static double sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

/* sigmoid'(x) = e / (1 + e)^2, e = e^-|x| */
static double sigmoid_grad(double x)
{
    double e = exp(-fabs(x));
    return e / ((1.0 + e) * (1.0 + e));
}

float vkt_ref_unary_f(vkt_unary_op op, float alpha, float xf)
{
    double x = xf;
    switch (op) {
    case VKT_UNARY_SCALE: return (float)((double)alpha * x);
    case VKT_UNARY_RELU: return x < 0 ? 0.0f : xf;
    case VKT_UNARY_LEAKY_RELU: return x > 0 ? xf : (float)((double)alpha * x);
    case VKT_UNARY_GELU: /* 0.5 x (1 + tanh(u)) = x sigmoid(2u), u = k (x + c x^3) */
        return (float)(x * sigmoid(2.0 * GELU_K * (x + GELU_C * x * x * x)));
    case VKT_UNARY_TANH: return (float)tanh(x);
    case VKT_UNARY_SIGMOID: return (float)sigmoid(x);
    case VKT_UNARY_EXP: return (float)exp(x);
    case VKT_UNARY_LOG: return (float)log(x);
    default: return NAN;
    }
}

float vkt_ref_unary_df(vkt_unary_op op, float alpha, float xf)
{
    double x = xf;
    switch (op) {
    case VKT_UNARY_SCALE: return alpha;
    case VKT_UNARY_RELU: return x > 0 ? 1.0f : 0.0f;
    case VKT_UNARY_LEAKY_RELU: return x > 0 ? 1.0f : alpha;
    case VKT_UNARY_GELU: {
        double u = GELU_K * (x + GELU_C * x * x * x);
        double du = GELU_K * (1.0 + 3.0 * GELU_C * x * x);
        return (float)(sigmoid(2.0 * u) + 2.0 * x * du * sigmoid_grad(2.0 * u));
    }
    case VKT_UNARY_TANH: {
        double e = exp(-2.0 * fabs(x)); /* 1 - tanh^2 = 4e / (1 + e)^2 */
        return (float)(4.0 * e / ((1.0 + e) * (1.0 + e)));
    }
    case VKT_UNARY_SIGMOID: return (float)sigmoid_grad(x);
    case VKT_UNARY_EXP: return (float)exp(x);
    case VKT_UNARY_LOG: return (float)(1.0 / x);
    default: return NAN;
    }
}

void vkt_ref_unary(vkt_unary_op op, float alpha, const float *x, float *y, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++)
        y[i] = vkt_ref_unary_f(op, alpha, x[i]);
}

void vkt_ref_unary_backward(vkt_unary_op op, float alpha, const float *x, const float *dy,
                            float *dx, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++)
        dx[i] = (float)((double)dy[i] * (double)vkt_ref_unary_df(op, alpha, x[i]));
}
