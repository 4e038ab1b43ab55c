/* y[i] = f(x[i]), i < n; the op is a specialization constant. Grid-stride loops: vec4s
 * when the push constants say so (nvec > 0), single elements for the rest. */
#version 450
#extension GL_GOOGLE_include_directive : require
#include "push.h"
#include "common.glsl"
#include "spec.h"

layout(local_size_x_id = SPEC_WG) in;
layout(constant_id = SPEC_UNARY_OP) const uint OP = 0;

layout(push_constant) uniform Push { push_unary p; };
layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 0) readonly buffer X4 { vec4 x4[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Y { float y[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Y4 { vec4 y4[]; };

float f(float v) { return act_f(OP, p.alpha, v); }

void one(uint i) { y[p.y_off + i] = f(x[p.x_off + i]); }

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
    for (uint j = t; j < p.nvec; j += stride) {
        vec4 v = x4[xb + j];
        y4[yb + j] = vec4(f(v.x), f(v.y), f(v.z), f(v.w));
    }
    VKT_VEC4_EDGES(p, t, one);
}
