/* dx[i] = dy[i] * f'(x[i]), i < n; the op is a specialization constant. vec4s where
 * the push constants say so (see unary.comp). */
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
layout(std430, set = 0, binding = 1) readonly buffer DY { float dy[]; };
layout(std430, set = 0, binding = 1) readonly buffer DY4 { vec4 dy4[]; };
layout(std430, set = 0, binding = 2) writeonly buffer DX { float dx[]; };
layout(std430, set = 0, binding = 2) writeonly buffer DX4 { vec4 dx4[]; };

float df(float v) { return act_df(OP, p.alpha, v); }

void one(uint i) { dx[p.y_off + i] = dy[p.dy_off + i] * df(x[p.x_off + i]); }

void main()
{
    uint t = gl_GlobalInvocationID.x;
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (p.nvec == 0) {
        for (uint i = t; i < p.n; i += stride)
            one(i);
        return;
    }
    uint xb = (p.x_off + p.head) / 4, db = (p.dy_off + p.head) / 4;
    uint yb = (p.y_off + p.head) / 4;
    for (uint j = t; j < p.nvec; j += stride) {
        vec4 v = x4[xb + j];
        dx4[yb + j] = dy4[db + j] * vec4(df(v.x), df(v.y), df(v.z), df(v.w));
    }
    VKT_VEC4_EDGES(p, t, one);
}
