/* y[i] = x[i], i < n, as bits (NaN payloads and uint32 data survive); uvec4 loads and
 * stores where the push constants say so. */
#version 450
#extension GL_GOOGLE_include_directive : require
#include "push.h"
#include "common.glsl"
#include "spec.h"

layout(local_size_x_id = SPEC_WG) in;

layout(push_constant) uniform Push { push_fill p; };
layout(std430, set = 0, binding = 0) readonly buffer X { uint x[]; };
layout(std430, set = 0, binding = 0) readonly buffer X4 { uvec4 x4[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Y { uint y[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Y4 { uvec4 y4[]; };

void one(uint i) { y[p.y_off + i] = x[p.x_off + i]; }

void main()
{
    uint t = gl_GlobalInvocationID.x;
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (p.nvec == 0) {
        for (uint i = t; i < p.n; i += stride)
            one(i);
        return;
    }
    uint xb = (p.x_off + p.head) / 4, yb = (p.y_off + p.head) / 4;
    for (uint j = t; j < p.nvec; j += stride)
        y4[yb + j] = x4[xb + j];
    VKT_VEC4_EDGES(p, t, one);
}
