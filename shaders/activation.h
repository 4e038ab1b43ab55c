/*
 * activation.h - the unary ops (the activations): one list, ACT_LIST, and each one's
 * function and derivative, defined once and compiled both as GLSL (float:
 * shaders/common.glsl includes it for unary*.comp and bias_act*.comp) and as C (double:
 * the CPU references engine/kernels/ref_unary.c, ref_train_ops.c and the graph's
 * reference), like push.h. The only primitive that differs is tanh: the shaders use
 * vkt_tanh (common.glsl: accurate near 0 in float), C uses the C library's.
 *
 * From the list come the GLSL op codes (VKT_UNARY_*), the switches over ops below
 * (act_f, act_df, act_df_follows_from_y, act_df_from_y) and, in C, the names and
 * metadata tables of the kernels and the graph (vkt_unary_op_name, the graph's
 * constructor names, which activations a linear absorbs and the fused op's name). vkt.h's
 * enum vkt_unary_op, the public contract (C standard headers only, so it cannot include
 * this), is checked against the list at compile time.
 *
 * Adding an activation: its value in vkt.h's enum, a row here, and its math,
 * act_f_<name>(alpha, x) and act_df_<name>(alpha, x) (and act_dfy_<name>(alpha, y) unless
 * its dfy is NO). A row without its math fails to build: in C an undeclared function
 * (-Werror), in GLSL "no matching overloaded function". The switches have no default, so
 * no op silently computes another's formula. tests/test_unary.c compares the math of
 * every row with formulas of its own, and the dfy column with the derivative.
 */
#ifndef VKT_ACTIVATION_H
#define VKT_ACTIVATION_H

/* One row per activation:
 *   X(NAME, value, name, fn, fuses, dfy)
 * NAME   the op is VKT_UNARY_<NAME> (vkt.h)
 * value  its code: vkt.h's value, the shaders' spec constant
 * name   vkt_unary_op_name; its math is act_f_<name>, act_df_<name> (act_dfy_<name>)
 * fn     the graph constructor (vkt_unary: none of its own; the graph uses vkt_scale etc.)
 * fuses  1 if a linear absorbs it (the fused op linear_act applies it in bias_act.comp)
 * dfy    whether f'(x) follows from the output y = f(x), so the backward need not keep
 *        the input: NO, YES, or ALPHA_NONNEG (when alpha >= 0) */
#define ACT_LIST(X)                                               \
    X(SCALE, 0, scale, vkt_unary, 0, YES)                         \
    X(RELU, 1, relu, vkt_relu, 1, YES)                            \
    X(LEAKY_RELU, 2, leaky_relu, vkt_leaky_relu, 1, ALPHA_NONNEG) \
    X(GELU, 3, gelu, vkt_gelu, 1, NO)                             \
    X(TANH, 4, tanh, vkt_tanh, 1, YES)                            \
    X(SIGMOID, 5, sigmoid, vkt_sigmoid, 1, YES)                   \
    X(EXP, 6, exp, vkt_unary, 0, NO)                              \
    X(LOG, 7, log, vkt_unary, 0, NO)                              \
    X(SILU, 8, silu, vkt_silu, 1, NO)

#ifdef VULKAN /* defined by glslang when compiling for Vulkan */
#define ACT_REAL float
#define ACT_OP uint
#define ACT_BOOL bool
#define ACT_TRUE true
#define ACT_FALSE false
#define ACT_FN
#define ACT_ABS abs
#define ACT_TANH vkt_tanh
#define ACT_NAN uintBitsToFloat(0x7fc00000u)
#define ACT_UNUSED(v)
/* the op codes, equal to vkt.h's by construction */
#define ACT_CODE(NAME, value, name, fn, fuses, dfy) const uint VKT_UNARY_##NAME = uint(value);
ACT_LIST(ACT_CODE)
#undef ACT_CODE
#else
#include <math.h>
#include <stdint.h>

#include "vkt.h"
#define ACT_REAL double
#define ACT_OP uint32_t
#define ACT_BOOL int
#define ACT_TRUE 1
#define ACT_FALSE 0
#define ACT_FN static inline
#define ACT_ABS fabs
#define ACT_TANH tanh
#define ACT_NAN NAN
#define ACT_UNUSED(v) (void)(v)
/* vkt.h's enum against the list: each row's value, no row twice, no value left out */
#define ACT_SAME_CODE(NAME, value, name, fn, fuses, dfy)                                    \
    _Static_assert(VKT_UNARY_##NAME == value,                                             \
                   "vkt.h's VKT_UNARY_" #NAME " differs from its row in shaders/activation.h");
ACT_LIST(ACT_SAME_CODE)
#undef ACT_SAME_CODE
#define ACT_ROW(NAME, value, name, fn, fuses, dfy) ACT_ROW_##NAME,
enum act_row { ACT_LIST(ACT_ROW) ACT_ROWS };
#undef ACT_ROW
_Static_assert((int)ACT_ROWS == (int)VKT_UNARY_COUNT,
               "vkt.h's vkt_unary_op and the rows of shaders/activation.h differ in number");
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

/* ---- the math of each row: f, f' and (dfy not NO) f' from y --------------------------- */

/* scale: alpha x (alpha: the factor) */
ACT_FN ACT_REAL act_f_scale(ACT_REAL alpha, ACT_REAL x) { return alpha * x; }
ACT_FN ACT_REAL act_df_scale(ACT_REAL alpha, ACT_REAL x) { ACT_UNUSED(x); return alpha; }
ACT_FN ACT_REAL act_dfy_scale(ACT_REAL alpha, ACT_REAL y) { ACT_UNUSED(y); return alpha; }

ACT_FN ACT_REAL act_f_relu(ACT_REAL alpha, ACT_REAL x)
{
    ACT_UNUSED(alpha);
    return x < 0.0 ? 0.0 : x;
}
ACT_FN ACT_REAL act_df_relu(ACT_REAL alpha, ACT_REAL x)
{
    ACT_UNUSED(alpha);
    return x > 0.0 ? 1.0 : 0.0;
}
ACT_FN ACT_REAL act_dfy_relu(ACT_REAL alpha, ACT_REAL y)
{
    ACT_UNUSED(alpha);
    return y > 0.0 ? 1.0 : 0.0;
}

/* leaky relu: x > 0 ? x : alpha x (alpha: the slope); f' from y needs alpha >= 0 */
ACT_FN ACT_REAL act_f_leaky_relu(ACT_REAL alpha, ACT_REAL x) { return x > 0.0 ? x : alpha * x; }
ACT_FN ACT_REAL act_df_leaky_relu(ACT_REAL alpha, ACT_REAL x) { return x > 0.0 ? 1.0 : alpha; }
ACT_FN ACT_REAL act_dfy_leaky_relu(ACT_REAL alpha, ACT_REAL y) { return y > 0.0 ? 1.0 : alpha; }

/* GELU, tanh approximation: 0.5 x (1 + tanh(u)) = x * sigmoid(2u), u = k (x + c x^3). */
ACT_FN ACT_REAL act_f_gelu(ACT_REAL alpha, ACT_REAL x)
{
    ACT_UNUSED(alpha);
    ACT_REAL u = ACT_GELU_K * (x + ACT_GELU_C * x * x * x);
    return x * act_sigmoid(2.0 * u);
}

ACT_FN ACT_REAL act_df_gelu(ACT_REAL alpha, ACT_REAL x)
{
    ACT_UNUSED(alpha);
    ACT_REAL x2 = x * x;
    ACT_REAL u = ACT_GELU_K * (x + ACT_GELU_C * x2 * x);
    ACT_REAL du = ACT_GELU_K * (1.0 + 3.0 * ACT_GELU_C * x2);
    return act_sigmoid(2.0 * u) + 2.0 * x * du * act_sigmoid_grad(2.0 * u);
}

ACT_FN ACT_REAL act_f_tanh(ACT_REAL alpha, ACT_REAL x) { ACT_UNUSED(alpha); return ACT_TANH(x); }

/* 1 - tanh^2 = 4e / (1 + e)^2, e = e^-2|x|: no cancellation for large |x| */
ACT_FN ACT_REAL act_df_tanh(ACT_REAL alpha, ACT_REAL x)
{
    ACT_UNUSED(alpha);
    ACT_REAL e = exp(-2.0 * ACT_ABS(x));
    ACT_REAL d = 1.0 + e;
    return 4.0 * e / (d * d);
}

ACT_FN ACT_REAL act_dfy_tanh(ACT_REAL alpha, ACT_REAL y) { ACT_UNUSED(alpha); return 1.0 - y * y; }

ACT_FN ACT_REAL act_f_sigmoid(ACT_REAL alpha, ACT_REAL x)
{
    ACT_UNUSED(alpha);
    return act_sigmoid(x);
}
ACT_FN ACT_REAL act_df_sigmoid(ACT_REAL alpha, ACT_REAL x)
{
    ACT_UNUSED(alpha);
    return act_sigmoid_grad(x);
}
ACT_FN ACT_REAL act_dfy_sigmoid(ACT_REAL alpha, ACT_REAL y)
{
    ACT_UNUSED(alpha);
    return y * (1.0 - y);
}

ACT_FN ACT_REAL act_f_exp(ACT_REAL alpha, ACT_REAL x) { ACT_UNUSED(alpha); return exp(x); }
ACT_FN ACT_REAL act_df_exp(ACT_REAL alpha, ACT_REAL x) { ACT_UNUSED(alpha); return exp(x); }

ACT_FN ACT_REAL act_f_log(ACT_REAL alpha, ACT_REAL x) { ACT_UNUSED(alpha); return log(x); }
ACT_FN ACT_REAL act_df_log(ACT_REAL alpha, ACT_REAL x) { ACT_UNUSED(alpha); return 1.0 / x; }

/* SiLU: x sigmoid(x); its derivative sigmoid(x) (1 + x (1 - sigmoid(x))), with
 * 1 - sigmoid(x) = sigmoid(-x) so that no cancellation occurs for large x. */
ACT_FN ACT_REAL act_f_silu(ACT_REAL alpha, ACT_REAL x)
{
    ACT_UNUSED(alpha);
    return x * act_sigmoid(x);
}
ACT_FN ACT_REAL act_df_silu(ACT_REAL alpha, ACT_REAL x)
{
    ACT_UNUSED(alpha);
    return act_sigmoid(x) * (1.0 + x * act_sigmoid(-x));
}

/* ---- the switches over ops, generated from the list ---------------------------------- */

/* Past the last case: an op outside the list (the callers check the range first). */

/* f(x) of unary op `op` (alpha: SCALE's factor, LEAKY_RELU's slope). */
ACT_FN ACT_REAL act_f(ACT_OP op, ACT_REAL alpha, ACT_REAL x)
{
    switch (op) {
#define ACT_CASE(NAME, value, name, fn, fuses, dfy) \
    case VKT_UNARY_##NAME: return act_f_##name(alpha, x);
        ACT_LIST(ACT_CASE)
#undef ACT_CASE
    }
    return ACT_NAN;
}

/* f'(x). */
ACT_FN ACT_REAL act_df(ACT_OP op, ACT_REAL alpha, ACT_REAL x)
{
    switch (op) {
#define ACT_CASE(NAME, value, name, fn, fuses, dfy) \
    case VKT_UNARY_##NAME: return act_df_##name(alpha, x);
        ACT_LIST(ACT_CASE)
#undef ACT_CASE
    }
    return ACT_NAN;
}

/* The dfy column: whether f' follows from y, and f' from y where it does. */
#define ACT_DFY_OK_NO(alpha) ACT_FALSE
#define ACT_DFY_OK_YES(alpha) ACT_TRUE
#define ACT_DFY_OK_ALPHA_NONNEG(alpha) (alpha >= 0.0)
#define ACT_DFY_NO(name, alpha, y) ACT_NAN
#define ACT_DFY_YES(name, alpha, y) act_dfy_##name(alpha, y)
#define ACT_DFY_ALPHA_NONNEG(name, alpha, y) act_dfy_##name(alpha, y)

/* Whether f' follows from the output y = f(x) (see act_df_from_y). */
ACT_FN ACT_BOOL act_df_follows_from_y(ACT_OP op, ACT_REAL alpha)
{
    switch (op) {
#define ACT_CASE(NAME, value, name, fn, fuses, dfy) \
    case VKT_UNARY_##NAME: return ACT_DFY_OK_##dfy(alpha);
        ACT_LIST(ACT_CASE)
#undef ACT_CASE
    }
    return ACT_FALSE;
}

/* f' from the output y, for the ops act_df_follows_from_y accepts (NaN for the others). */
ACT_FN ACT_REAL act_df_from_y(ACT_OP op, ACT_REAL alpha, ACT_REAL y)
{
    switch (op) {
#define ACT_CASE(NAME, value, name, fn, fuses, dfy) \
    case VKT_UNARY_##NAME: return ACT_DFY_##dfy(name, alpha, y);
        ACT_LIST(ACT_CASE)
#undef ACT_CASE
    }
    return ACT_NAN;
}

#undef ACT_REAL
#undef ACT_OP
#undef ACT_BOOL
#undef ACT_TRUE
#undef ACT_FALSE
#undef ACT_FN
#undef ACT_ABS
#undef ACT_TANH
#undef ACT_NAN
#undef ACT_UNUSED
#undef ACT_DFY_OK_NO
#undef ACT_DFY_OK_YES
#undef ACT_DFY_OK_ALPHA_NONNEG
#undef ACT_DFY_NO
#undef ACT_DFY_YES
#undef ACT_DFY_ALPHA_NONNEG

#endif
