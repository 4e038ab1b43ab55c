/* The weighted average of replicas' gradients on their shared device (push_reduce.h):
 * out[i] = ((s + w0 g0[i]) + w1 g1[i]) + ..., s = 0 or out[i] (acc), in source order and
 * `precise` (no contraction into a fused multiply-add), so every element has the bits of
 * the host's sum (parallel/reduce_sum.h) whatever the grid. Grid-stride over n. */
#version 450
#extension GL_GOOGLE_include_directive : require
#include "push_reduce.h"
#include "spec.h"

layout(local_size_x_id = SPEC_WG) in;

layout(push_constant) uniform Push { push_reduce_avg p; };
layout(std430, set = 0, binding = 0) buffer O { float o[]; };
layout(std430, set = 0, binding = 1) readonly buffer G0 { float g0[]; };
layout(std430, set = 0, binding = 2) readonly buffer G1 { float g1[]; };
layout(std430, set = 0, binding = 3) readonly buffer G2 { float g2[]; };
layout(std430, set = 0, binding = 4) readonly buffer G3 { float g3[]; };
layout(std430, set = 0, binding = 5) readonly buffer G4 { float g4[]; };
layout(std430, set = 0, binding = 6) readonly buffer G5 { float g5[]; };

void main()
{
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint i = gl_GlobalInvocationID.x; i < p.n; i += stride) {
        precise float s = p.acc != 0u ? o[p.out_off + i] : 0.0;
        precise float t;
        t = p.w[0] * g0[p.g_off[0] + i];
        s = s + t;
        if (p.k > 1u) {
            t = p.w[1] * g1[p.g_off[1] + i];
            s = s + t;
        }
        if (p.k > 2u) {
            t = p.w[2] * g2[p.g_off[2] + i];
            s = s + t;
        }
        if (p.k > 3u) {
            t = p.w[3] * g3[p.g_off[3] + i];
            s = s + t;
        }
        if (p.k > 4u) {
            t = p.w[4] * g4[p.g_off[4] + i];
            s = s + t;
        }
        if (p.k > 5u) {
            t = p.w[5] * g5[p.g_off[5] + i];
            s = s + t;
        }
        o[p.out_off + i] = s;
    }
}
