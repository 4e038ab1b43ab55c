/*
 * Bias gradient of a convolution chunk: db[o] = sum of row o of rows [oc, R] (dy in
 * channel-major layout), + beta db[o] when beta != 0. One workgroup per channel: each
 * lane sums every WG-th vec4 (VEC_IN: R a multiple of 4, rows read as RGBA32F texels)
 * or float of the row in order, then a fixed tree combines the lanes, so the result
 * does not depend on timing. Rows are read through a storage texel buffer (a vector
 * gather on lavapipe). The host picks WG so that no lane loops past the device's loop
 * budget.
 */
#version 450
#extension GL_GOOGLE_include_directive : require
#include "push_conv.h"
#include "spec.h"

layout(local_size_x_id = SPEC_WG) in;
layout(constant_id = SPEC_CONV_BIAS_GRAD_VEC_IN) const bool VEC_IN = false;

layout(push_constant) uniform Push { push_conv p; };
layout(binding = 0, r32f) uniform readonly imageBuffer M1;
layout(binding = 0, rgba32f) uniform readonly imageBuffer M4;
layout(std430, set = 0, binding = 1) buffer DB { float db[]; };

shared float part[gl_WorkGroupSize.x];

void main()
{
    uint lane = gl_LocalInvocationID.x, wg = gl_WorkGroupSize.x;
    uint R = p.n * p.plane;
    for (uint o = gl_WorkGroupID.x; o < p.oc; o += gl_NumWorkGroups.x) {
        uint base = p.m_off + o * R;
        float sum = 0.0;
        if (VEC_IN) {
            vec4 s4 = vec4(0.0);
            for (uint i = lane; i < R / 4; i += wg)
                s4 += imageLoad(M4, int(base / 4 + i));
            sum = (s4.x + s4.y) + (s4.z + s4.w);
        } else {
            for (uint i = lane; i < R; i += wg)
                sum += imageLoad(M1, int(base + i)).x;
        }
        part[lane] = sum;
        barrier();
        for (uint half_ = wg / 2; half_ > 0; half_ /= 2) {
            if (lane < half_)
                part[lane] += part[lane + half_];
            barrier();
        }
        if (lane == 0) {
            uint at = p.b_off + o;
            db[at] = p.beta != 0.0 ? part[0] + p.beta * db[at] : part[0];
        }
        barrier();
    }
}
