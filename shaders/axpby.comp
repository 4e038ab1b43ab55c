/* y = alpha * x + beta * y over n elements; without ACCUM (beta == 0) y is not read (it
 * may hold anything, NaN included). Grid-stride, as vec4s when VEC4 (both views 16-byte
 * aligned, n a multiple of 4). */
#version 450
#extension GL_GOOGLE_include_directive : require
#include "push.h"
#include "spec.h"

layout(local_size_x_id = SPEC_WG) in;
layout(constant_id = SPEC_AXPBY_ACCUM) const bool ACCUM = false;
layout(constant_id = SPEC_AXPBY_VEC4) const bool VEC4 = false;

layout(push_constant) uniform Push { push_axpby p; };
layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 0) readonly buffer X4 { vec4 x4[]; };
layout(std430, set = 0, binding = 1) buffer Y { float y[]; };
layout(std430, set = 0, binding = 1) buffer Y4 { vec4 y4[]; };

void main()
{
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (VEC4) {
        uint xo = p.x_off / 4, yo = p.y_off / 4;
        for (uint j = gl_GlobalInvocationID.x; j < p.n / 4; j += stride) {
            vec4 v = p.alpha * x4[xo + j];
            y4[yo + j] = ACCUM ? v + p.beta * y4[yo + j] : v;
        }
        return;
    }
    for (uint i = gl_GlobalInvocationID.x; i < p.n; i += stride) {
        float v = p.alpha * x[p.x_off + i];
        y[p.y_off + i] = ACCUM ? v + p.beta * y[p.y_off + i] : v;
    }
}
