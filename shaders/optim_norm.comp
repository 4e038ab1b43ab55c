/*
 * First pass of clipping by global gradient norm: each workgroup writes the sum of
 * squares of its grid-stride share of one chunk of the gradient to
 * parts[part_off + workgroup] (the chunk's own range of the partials). The update pass
 * (optim_update.comp) adds all partials in a fixed order, so no float atomics and no
 * host round trip are needed, and every run gives the same bits.
 * vec4 loads for elements [head, head + 4 nvec) when nvec > 0.
 */
#version 450
#extension GL_GOOGLE_include_directive : require
#include "push.h"
#include "spec.h"

layout(local_size_x_id = SPEC_WG) in; /* a power of 2 */

layout(push_constant) uniform Push { push_optim p; };
layout(std430, set = 0, binding = 0) readonly buffer G { float grads[]; };
layout(std430, set = 0, binding = 0) readonly buffer G4 { vec4 grads4[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Parts { float parts[]; };

shared float red[gl_WorkGroupSize.x];

void main()
{
    uint tid = gl_LocalInvocationID.x, t = gl_GlobalInvocationID.x;
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    float acc = 0.0;
    if (p.nvec == 0u) {
        for (uint i = t; i < p.n; i += stride) {
            float g = grads[p.g_off + i];
            acc += g * g;
        }
    } else {
        vec4 acc4 = vec4(0.0);
        uint gb = (p.g_off + p.head) / 4u;
        for (uint j = t; j < p.nvec; j += stride) {
            vec4 g = grads4[gb + j];
            acc4 += g * g;
        }
        acc = (acc4.x + acc4.y) + (acc4.z + acc4.w);
        uint tail = p.n - p.head - 4u * p.nvec;
        uint e = t < p.head ? t : (t >= 4u && t - 4u < tail ? p.head + 4u * p.nvec + t - 4u
                                                             : 0xffffffffu);
        if (e != 0xffffffffu) {
            float g = grads[p.g_off + e];
            acc += g * g;
        }
    }
    red[tid] = acc;
    barrier();
    for (uint s = gl_WorkGroupSize.x / 2; s > 0; s >>= 1) {
        if (tid < s)
            red[tid] += red[tid + s];
        barrier();
    }
    if (tid == 0)
        parts[p.part_off + gl_WorkGroupID.x] = red[0];
}
