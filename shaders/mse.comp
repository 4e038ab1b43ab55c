/*
 * Mean squared error. Forward (one workgroup; fixed reduction tree, so deterministic):
 * loss[0] = scale * sum (a - b)^2, scale = 1/n. Backward (BACKWARD): D = sign * scale *
 * (a - b) * DL[0] (+ beta * D), scale = 2/n, sign +1 for pred and -1 for target.
 * Binding 2 is DL (backward, read; forward: unused, the host binds the loss), binding 3
 * the output: D (backward) or the loss (forward). Binding 2 is readonly so that the
 * validation layer's synchronization check, which takes a writable block as written
 * whatever the specialization constants say, sees the backward's DL as the read it is.
 */
#version 450
#extension GL_GOOGLE_include_directive : require
#include "push.h"
#include "spec.h"

layout(local_size_x_id = SPEC_WG) in;
layout(constant_id = SPEC_MSE_BACKWARD) const bool BACKWARD = false;

layout(push_constant) uniform Push { push_mse p; };
layout(std430, set = 0, binding = 0) readonly buffer A { float a[]; };
layout(std430, set = 0, binding = 1) readonly buffer B { float b[]; };
layout(std430, set = 0, binding = 2) readonly buffer DL { float l[]; };
layout(std430, set = 0, binding = 3) buffer D { float d[]; };

shared float part[gl_WorkGroupSize.x];

void main()
{
    uint tid = gl_GlobalInvocationID.x;
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (BACKWARD) {
        float g = p.sign * p.scale * l[p.l_off];
        for (uint i = tid; i < p.n; i += stride) {
            float v = (a[p.a_off + i] - b[p.b_off + i]) * g;
            d[p.d_off + i] = p.beta != 0.0 ? v + p.beta * d[p.d_off + i] : v;
        }
        return;
    }
    /* Forward: one workgroup, so the global id is the local one. */
    float acc = 0.0;
    for (uint i = tid; i < p.n; i += gl_WorkGroupSize.x) {
        float e = a[p.a_off + i] - b[p.b_off + i];
        acc += e * e;
    }
    part[tid] = acc;
    barrier();
    for (uint h = gl_WorkGroupSize.x / 2; h > 0; h >>= 1) {
        if (tid < h)
            part[tid] += part[tid + h];
        barrier();
    }
    if (tid == 0)
        d[p.d_off] = part[0] * p.scale;
}
