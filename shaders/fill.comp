/* y[i] = value, i < n; vec4 stores where the push constants say so. */
#version 450
#extension GL_GOOGLE_include_directive : require
#include "push.h"
#include "common.glsl"
#include "spec.h"

layout(local_size_x_id = SPEC_WG) in;

layout(push_constant) uniform Push { push_fill p; };
layout(std430, set = 0, binding = 0) writeonly buffer Y { float y[]; };
layout(std430, set = 0, binding = 0) writeonly buffer Y4 { vec4 y4[]; };

void one(uint i) { y[p.y_off + i] = p.value; }

void main()
{
    uint t = gl_GlobalInvocationID.x;
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (p.nvec == 0) {
        for (uint i = t; i < p.n; i += stride)
            one(i);
        return;
    }
    uint yb = (p.y_off + p.head) / 4;
    for (uint j = t; j < p.nvec; j += stride)
        y4[yb + j] = vec4(p.value);
    VKT_VEC4_EDGES(p, t, one);
}
