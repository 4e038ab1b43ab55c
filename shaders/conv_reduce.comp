#version 450
/*
 * conv_reduce.comp - the second dispatch of a split weight gradient (conv_implicit.comp,
 * WEIGHT with CONV_SPLIT): for every output (o, n) of C [oc, ncols], the partial sums
 * W[split][o][n] added in order split = 0, 1, ... (deterministic, no atomics), into
 * db[o] when n is the bias column, else dw[o, n] (row length ldo); each adds beta times
 * its old value when CONV_READ_OUT / CONV_READ_DB. A grid-stride loop, one output per
 * thread and iteration.
 */
#extension GL_GOOGLE_include_directive : require
#include "push_conv.h"
#include "spec.h"

layout(local_size_x_id = SPEC_WG) in;

layout(push_constant) uniform Push { push_conv_gemm p; };
layout(std430, binding = 0) readonly buffer Wbuf { float W[]; }; /* the partial sums */
layout(std430, binding = 1) buffer Obuf { float O[]; };          /* dw */
layout(std430, binding = 2) buffer Dbuf { float D[]; };          /* db */

void main()
{
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    uint total = p.oc * p.ncols;
    for (uint i = gl_GlobalInvocationID.x; i < total; i += stride) {
        float s = 0.0;
        for (uint z = 0; z < p.splits; z++)
            s += W[p.a_off + z * total + i];
        uint o = i / p.ncols, n = i - o * p.ncols;
        if (n == p.bias_col) {
            uint at = p.d_off + o;
            D[at] = (p.flags & CONV_READ_DB) != 0u ? s + p.beta_b * D[at] : s;
        } else {
            uint at = p.o_off + o * p.ldo + n;
            O[at] = (p.flags & CONV_READ_OUT) != 0u ? s + p.beta * O[at] : s;
        }
    }
}
