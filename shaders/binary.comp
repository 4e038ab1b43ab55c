/*
 * out = a (op) b with broadcasting. The iteration space is out_dims (4 dims, outermost
 * first, padded with 1s; the dispatch code merges dims where it can, so equal shapes and
 * scalar operands arrive as one dimension). a_str/b_str are element strides, 0 along
 * broadcast dims. Three paths, chosen by the push constants:
 *  - one dimension, strides 0 or 1: nvec > 0: vec4 body with single-element edges,
 *    else one element at a time;
 *  - units4 != 0: several dims, all in units of 4 elements along the last one (its size a
 *    multiple of 4, strides there 0 or 1, every view 16-byte aligned);
 *  - otherwise one element at a time, anywhere.
 * Threads step through the grid with a fixed stride; their coordinates advance digit by
 * digit with carries, so there is no integer division per element.
 * The vec4 and single-element loads of one binding sit in separate if/else branches on
 * purpose: written as `c ? b4[i] : vec4(b[j])`, Mesa 22.3 lavapipe returned a wrong element.
 */
#version 450
#extension GL_GOOGLE_include_directive : require
#include "push.h"
#include "common.glsl"
#include "spec.h"

layout(local_size_x_id = SPEC_WG) in;
layout(constant_id = SPEC_BINARY_OP) const uint OP = 0;
/* Same-shape operands on the vec4 path (nvec > 0, both strides 1), known when the
 * pipeline is made: no per-element branch between vec4 and broadcast loads (lavapipe
 * runs both sides of such a branch on every iteration). */
layout(constant_id = SPEC_BINARY_SAME_SHAPE) const bool SAME_SHAPE = false;

layout(push_constant) uniform Push { push_binary p; };
layout(std430, set = 0, binding = 0) readonly buffer A { float a[]; };
layout(std430, set = 0, binding = 0) readonly buffer A4 { vec4 a4[]; };
layout(std430, set = 0, binding = 1) readonly buffer B { float b[]; };
layout(std430, set = 0, binding = 1) readonly buffer B4 { vec4 b4[]; };
layout(std430, set = 0, binding = 2) writeonly buffer Y { float y[]; };
layout(std430, set = 0, binding = 2) writeonly buffer Y4 { vec4 y4[]; };

float apply(float u, float v)
{
    switch (OP) {
    case VKT_BINARY_ADD: return u + v;
    case VKT_BINARY_SUB: return u - v;
    case VKT_BINARY_MUL: return u * v;
    default: return u / v;
    }
}

vec4 apply(vec4 u, vec4 v)
{
    switch (OP) {
    case VKT_BINARY_ADD: return u + v;
    case VKT_BINARY_SUB: return u - v;
    case VKT_BINARY_MUL: return u * v;
    default: return u / v;
    }
}

/* Element i of a one-dimensional iteration space (strides 0 or 1). Indices of the form
 * offset + i let lavapipe load whole SIMD rows instead of gathering lane by lane. */
void one(uint i)
{
    float u, v;
    if (p.a_str3 != 0)
        u = a[p.a_off + i];
    else
        u = a[p.a_off];
    if (p.b_str3 != 0)
        v = b[p.b_off + i];
    else
        v = b[p.b_off];
    y[p.y_off + i] = apply(u, v);
}

void main()
{
    uint t = gl_GlobalInvocationID.x;
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (SAME_SHAPE) {
        uint ab = (p.a_off + p.head) / 4, bb = (p.b_off + p.head) / 4;
        uint yb = (p.y_off + p.head) / 4;
        for (uint j = t; j < p.nvec; j += stride)
            y4[yb + j] = apply(a4[ab + j], b4[bb + j]);
        VKT_VEC4_EDGES(p, t, one);
        return;
    }
    if (p.nvec > 0) {
        uint ab = (p.a_off + p.head) / 4, bb = (p.b_off + p.head) / 4;
        uint yb = (p.y_off + p.head) / 4;
        for (uint j = t; j < p.nvec; j += stride) {
            vec4 u, v;
            if (p.a_str3 == 1)
                u = a4[ab + j];
            else
                u = vec4(a[p.a_off]);
            if (p.b_str3 == 1)
                v = b4[bb + j];
            else
                v = vec4(b[p.b_off]);
            y4[yb + j] = apply(u, v);
        }
        VKT_VEC4_EDGES(p, t, one);
        return;
    }
    if (p.out_dims0 == 1 && p.out_dims1 == 1 && p.out_dims2 == 1 && p.a_str3 <= 1 &&
        p.b_str3 <= 1) {
        for (uint i = t; i < p.n; i += stride)
            one(i);
        return;
    }

    uvec4 od = uvec4(p.out_dims0, p.out_dims1, p.out_dims2, p.out_dims3);
    uvec4 as = uvec4(p.a_str0, p.a_str1, p.a_str2, p.a_str3);
    uvec4 bs = uvec4(p.b_str0, p.b_str1, p.b_str2, p.b_str3);
    bool v4 = p.units4 != 0;
    uint w = v4 ? od.w / 4 : od.w; /* the last dim in units */
    uvec4 ud = uvec4(od.xyz, w);
    uint n = v4 ? p.n / 4 : p.n;
    uvec4 c = vkt_digits(t, ud), step = vkt_digits(stride, ud);
    for (uint i = t; i < n; i += stride) {
        uint ai = c.x * as.x + c.y * as.y + c.z * as.z;
        uint bi = c.x * bs.x + c.y * bs.y + c.z * bs.z;
        if (v4) {
            /* An operand with stride 1 along the last dim loads a vec4 (its other
             * strides are multiples of 4); one with stride 0 a single element. */
            vec4 u, v;
            if (as.w == 1)
                u = a4[(p.a_off + ai) / 4 + c.w];
            else
                u = vec4(a[p.a_off + ai]);
            if (bs.w == 1)
                v = b4[(p.b_off + bi) / 4 + c.w];
            else
                v = vec4(b[p.b_off + bi]);
            y4[p.y_off / 4 + i] = apply(u, v);
        } else {
            y[p.y_off + i] = apply(a[p.a_off + ai + c.w * as.w], b[p.b_off + bi + c.w * bs.w]);
        }
        c = vkt_digits_add(c, step, ud);
    }
}
