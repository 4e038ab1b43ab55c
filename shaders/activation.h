/*
 * activation.h - the unary ops' functions and derivatives (the activations), defined once
 * and compiled both as GLSL (float: shaders/common.glsl includes it for unary*.comp and
 * bias_act*.comp) and as C (double: the CPU references engine/kernels/ref_unary.c,
 * ref_train_ops.c and the graph's reference), like push.h. The only primitive that
 * differs is tanh: the shaders use vkt_tanh (common.glsl: accurate near 0 in float), C
 * uses the C library's.
 *
 * GLSL: the op codes VKT_UNARY_* must be defined before this is included (common.glsl
 * defines them; engine/kernels/unary.c checks they equal vkt.h's enum). C: vkt.h's.
 */
#ifndef VKT_ACTIVATION_H
#define VKT_ACTIVATION_H

#ifdef VULKAN /* defined by glslang when compiling for Vulkan */
#define ACT_REAL float
#define ACT_OP uint
#define ACT_BOOL bool
#define ACT_FN
#define ACT_ABS abs
#define ACT_TANH vkt_tanh
#else
#include <math.h>
#include <stdint.h>

#include "vkt.h"
#define ACT_REAL double
#define ACT_OP uint32_t
#define ACT_BOOL int
#define ACT_FN static inline
#define ACT_ABS fabs
#define ACT_TANH tanh
#endif

#define ACT_GELU_K 0.7978845608028654 /* sqrt(2/pi) */
#define ACT_GELU_C 0.044715

/* sigmoid(x) = 1 / (1 + e^-x); exp(-x) overflowing to inf gives the right 0. */
ACT_FN ACT_REAL act_sigmoid(ACT_REAL x) { return 1.0 / (1.0 + exp(-x)); }

/* sigmoid'(x) = e / (1 + e)^2 with e = e^-|x|: no cancellation in 1 - sigmoid. */
ACT_FN ACT_REAL act_sigmoid_grad(ACT_REAL x)
{
    ACT_REAL e = exp(-ACT_ABS(x));
    ACT_REAL d = 1.0 + e;
    return e / (d * d);
}

/* GELU, tanh approximation: 0.5 x (1 + tanh(u)) = x * sigmoid(2u), u = k (x + c x^3). */
ACT_FN ACT_REAL act_gelu(ACT_REAL x)
{
    ACT_REAL u = ACT_GELU_K * (x + ACT_GELU_C * x * x * x);
    return x * act_sigmoid(2.0 * u);
}

ACT_FN ACT_REAL act_gelu_grad(ACT_REAL x)
{
    ACT_REAL x2 = x * x;
    ACT_REAL u = ACT_GELU_K * (x + ACT_GELU_C * x2 * x);
    ACT_REAL du = ACT_GELU_K * (1.0 + 3.0 * ACT_GELU_C * x2);
    return act_sigmoid(2.0 * u) + 2.0 * x * du * act_sigmoid_grad(2.0 * u);
}

/* SiLU: x sigmoid(x); its derivative sigmoid(x) (1 + x (1 - sigmoid(x))), with
 * 1 - sigmoid(x) = sigmoid(-x) so that no cancellation occurs for large x. */
ACT_FN ACT_REAL act_silu_grad(ACT_REAL x)
{
    return act_sigmoid(x) * (1.0 + x * act_sigmoid(-x));
}

/* f(x) of unary op `op` (alpha: SCALE's factor, LEAKY_RELU's slope). */
ACT_FN ACT_REAL act_f(ACT_OP op, ACT_REAL alpha, ACT_REAL x)
{
    switch (op) {
    case VKT_UNARY_SCALE: return alpha * x;
    case VKT_UNARY_RELU: return x < 0.0 ? 0.0 : x;
    case VKT_UNARY_LEAKY_RELU: return x > 0.0 ? x : alpha * x;
    case VKT_UNARY_GELU: return act_gelu(x);
    case VKT_UNARY_TANH: return ACT_TANH(x);
    case VKT_UNARY_SIGMOID: return act_sigmoid(x);
    case VKT_UNARY_EXP: return exp(x);
    case VKT_UNARY_SILU: return x * act_sigmoid(x);
    default: return log(x); /* VKT_UNARY_LOG */
    }
}

/* f'(x). */
ACT_FN ACT_REAL act_df(ACT_OP op, ACT_REAL alpha, ACT_REAL x)
{
    switch (op) {
    case VKT_UNARY_SCALE: return alpha;
    case VKT_UNARY_RELU: return x > 0.0 ? 1.0 : 0.0;
    case VKT_UNARY_LEAKY_RELU: return x > 0.0 ? 1.0 : alpha;
    case VKT_UNARY_GELU: return act_gelu_grad(x);
    case VKT_UNARY_TANH: {
        ACT_REAL e = exp(-2.0 * ACT_ABS(x)); /* 1 - tanh^2 = 4e / (1 + e)^2, e = e^-2|x| */
        ACT_REAL d = 1.0 + e;
        return 4.0 * e / (d * d);
    }
    case VKT_UNARY_SIGMOID: return act_sigmoid_grad(x);
    case VKT_UNARY_EXP: return exp(x);
    case VKT_UNARY_SILU: return act_silu_grad(x);
    default: return 1.0 / x; /* VKT_UNARY_LOG */
    }
}

/* Whether f' follows from the output y = f(x) (see act_df_from_y). */
ACT_FN ACT_BOOL act_df_follows_from_y(ACT_OP op, ACT_REAL alpha)
{
    return op == VKT_UNARY_SCALE || op == VKT_UNARY_RELU || op == VKT_UNARY_TANH ||
           op == VKT_UNARY_SIGMOID || (op == VKT_UNARY_LEAKY_RELU && alpha >= 0.0);
}

/* f' from the output y, for the ops act_df_follows_from_y accepts. */
ACT_FN ACT_REAL act_df_from_y(ACT_OP op, ACT_REAL alpha, ACT_REAL y)
{
    switch (op) {
    case VKT_UNARY_SCALE: return alpha;
    case VKT_UNARY_RELU: return y > 0.0 ? 1.0 : 0.0;
    case VKT_UNARY_LEAKY_RELU: return y > 0.0 ? 1.0 : alpha;
    case VKT_UNARY_TANH: return 1.0 - y * y;
    default: return y * (1.0 - y); /* VKT_UNARY_SIGMOID */
    }
}

#undef ACT_REAL
#undef ACT_OP
#undef ACT_BOOL
#undef ACT_FN
#undef ACT_ABS
#undef ACT_TANH

#endif
