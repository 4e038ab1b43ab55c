#version 450
/*
 * gemm_reduce.comp - the second dispatch of a split-K GEMM (gemm_tile.comp with SPLIT):
 * C[r, c] = alpha * sum over z of W[z][r][c] + beta * C[r, c], the splits added in order
 * 0, 1, ... so the result does not depend on the schedule (deterministic, no atomics).
 * alpha == 0 ignores the sums (as BLAS); READ_C: beta != 0. One output per thread and
 * iteration of a grid-stride loop over M x N.
 */
#extension GL_GOOGLE_include_directive : require
#include "push.h"
#include "spec.h"

layout(local_size_x_id = SPEC_WG) in;
layout(constant_id = SPEC_GEMM_REDUCE_READ_C) const uint READ_C = 0;

layout(push_constant) uniform Push { push_gemm_reduce p; };
layout(std430, binding = 0) readonly buffer Wbuf { float W[]; };
layout(std430, binding = 1) buffer Cbuf { float C[]; };

void main()
{
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    uint mn = p.m * p.n;
    for (uint i = gl_GlobalInvocationID.x; i < mn; i += stride) {
        float s = 0.0;
        for (uint z = 0; z < p.splits; z++)
            s += W[p.w_off + z * mn + i];
        uint r = i / p.n, c = i - r * p.n;
        uint o = p.c_off + r * p.ldc + c;
        float v = p.alpha == 0.0 ? 0.0 : p.alpha * s;
        C[o] = READ_C != 0 ? v + p.beta * C[o] : v;
    }
}
