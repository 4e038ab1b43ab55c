/*
 * Bias + activation over P[rows, cols]: P = P + b (b broadcast over rows, when HAS_BIAS),
 * Y = f(P). In place (Y is P, binding 2 unused) unless SEPARATE_Y keeps the
 * pre-activation in P for the backward. The activation is a unary op code of
 * common.glsl (SCALE with alpha 1 is the identity). Grid-stride over all elements, as
 * vec4s when VEC4 (every view 16-byte aligned, cols a multiple of 4: lavapipe pays per
 * invocation, so four elements each cost little more than one).
 * PRE16 (an autocast product's saved pre-activation, kernels/train_ops.h kt_bias_act_keep16):
 * Y holds the product on entry; P = r(Y + b), rounded to fp16 or bf16 (shaders/dtype.h),
 * and Y = f(widen(P)): the product's output is rounded to the 16-bit type before the
 * activation, as a 16-bit product output would be, so f sees exactly the value the
 * backward keeps. Two elements a 4-byte word, each word written whole by one thread (P's
 * offset, in 16-bit elements, is even; the half past an odd count is zero).
 * FROM16 (kt_act_rebuild16, with PRE16 the type): P holds such 16-bit pre-activations and
 * Y receives r(f(widen(P))) in the same type, the same act16 as PRE16's y before its
 * rounding, so it is bit for bit the 16-bit cast of that y (a following product's x,
 * rebuilt by its backward instead of kept).
 */
#version 450
#extension GL_GOOGLE_include_directive : require
#include "push.h"
#include "common.glsl"
#include "spec.h"
#include "dtype.h"

layout(local_size_x_id = SPEC_WG) in;
layout(constant_id = SPEC_BIAS_ACT_OP) const uint OP = 0;
layout(constant_id = SPEC_BIAS_ACT_HAS_BIAS) const bool HAS_BIAS = true;
layout(constant_id = SPEC_BIAS_ACT_SEPARATE_Y) const bool SEPARATE_Y = false;
layout(constant_id = SPEC_BIAS_ACT_VEC4) const bool VEC4 = false;
layout(constant_id = SPEC_BIAS_ACT_PRE16) const uint PRE16 = 0;
layout(constant_id = SPEC_BIAS_ACT_FROM16) const bool FROM16 = false;

layout(push_constant) uniform Push { push_bias_act p; };
layout(std430, set = 0, binding = 0) readonly buffer B { float b[]; };
layout(std430, set = 0, binding = 0) readonly buffer B4 { vec4 b4[]; };
layout(std430, set = 0, binding = 1) buffer P { float pre[]; };
layout(std430, set = 0, binding = 1) buffer P4 { vec4 pre4[]; };
layout(std430, set = 0, binding = 1) writeonly buffer P16 { uint pre16[]; }; /* PRE16 */
layout(std430, set = 0, binding = 1) readonly buffer P16R { uint pre16r[]; }; /* FROM16 */
layout(std430, set = 0, binding = 2) buffer Y { float y[]; };
layout(std430, set = 0, binding = 2) writeonly buffer Y4 { vec4 y4[]; };
layout(std430, set = 0, binding = 2) writeonly buffer Y16 { uint y16[]; }; /* FROM16 */

float f(float v) { return act_f(OP, p.alpha, v); }

/* fp32 bits rounded to the PRE16 type (low 16 bits). */
uint round16(float v)
{
    uint bits = floatBitsToUint(v);
    return (PRE16 == DTYPE_BF16 ? dtype_f32_to_bf16(bits) : dtype_f32_to_f16(bits)) & 0xffffu;
}

/* f of a 16-bit pre-activation, widened exactly: PRE16's y and FROM16's value. */
float act16(uint h)
{
    return f(PRE16 == DTYPE_BF16 ? dtype_bf16_value(h) : dtype_f16_value(h));
}

/* Elements 2j and 2j + 1 (PRE16): the product in Y plus the bias, rounded. */
uint keep16(uint j, uint n)
{
    uint w = 0u;
    for (uint k = 0u; k < 2u; k++) {
        uint i = 2u * j + k;
        if (i >= n)
            break;
        float v = y[p.y_off + i];
        if (HAS_BIAS)
            v += b[p.b_off + i % p.cols];
        uint h = round16(v);
        y[p.y_off + i] = act16(h);
        w |= h << (16u * k);
    }
    return w;
}

/* Elements 2j and 2j + 1 (FROM16): r(f(widen(P))). */
uint rebuild16(uint j, uint n)
{
    uint src = pre16r[p.p_off / 2u + j], w = 0u;
    for (uint k = 0u; k < 2u; k++) {
        if (2u * j + k >= n)
            break;
        w |= round16(act16((src >> (16u * k)) & 0xffffu)) << (16u * k);
    }
    return w;
}

void main()
{
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (FROM16) {
        uint n = p.rows * p.cols, words = (n + 1u) / 2u;
        for (uint j = gl_GlobalInvocationID.x; j < words; j += stride)
            y16[p.y_off / 2u + j] = rebuild16(j, n);
        return;
    }
    if (PRE16 != 0u) {
        uint n = p.rows * p.cols, words = (n + 1u) / 2u;
        for (uint j = gl_GlobalInvocationID.x; j < words; j += stride)
            pre16[p.p_off / 2u + j] = keep16(j, n);
        return;
    }
    if (VEC4) {
        uint n4 = p.rows * p.cols / 4, c4 = p.cols / 4;
        uint po = p.p_off / 4, bo = p.b_off / 4, yo = p.y_off / 4;
        for (uint j = gl_GlobalInvocationID.x; j < n4; j += stride) {
            vec4 v = pre4[po + j];
            if (HAS_BIAS)
                v += b4[bo + j % c4];
            vec4 r = vec4(f(v.x), f(v.y), f(v.z), f(v.w));
            if (SEPARATE_Y) {
                pre4[po + j] = v;
                y4[yo + j] = r;
            } else {
                pre4[po + j] = r;
            }
        }
        return;
    }
    uint n = p.rows * p.cols;
    for (uint i = gl_GlobalInvocationID.x; i < n; i += stride) {
        float v = pre[p.p_off + i];
        if (HAS_BIAS)
            v += b[p.b_off + i % p.cols];
        if (SEPARATE_Y) {
            pre[p.p_off + i] = v;
            y[p.y_off + i] = f(v);
        } else {
            pre[p.p_off + i] = f(v);
        }
    }
}
