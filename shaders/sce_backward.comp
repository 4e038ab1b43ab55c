/*
 * Softmax cross-entropy backward: DZ[r, c] = (P[r, c] - (c == label_r)) * DL[0] * scale
 * (+ beta * DZ), P the probabilities the forward wrote (mode 1). Grid-stride.
 */
#version 450
#extension GL_GOOGLE_include_directive : require
#include "push.h"
#include "spec.h"

layout(local_size_x_id = SPEC_WG) in;

layout(push_constant) uniform Push { push_sce p; };
layout(std430, set = 0, binding = 0) readonly buffer P { float prob[]; };
layout(std430, set = 0, binding = 1) readonly buffer L { int labels[]; };
layout(std430, set = 0, binding = 2) readonly buffer DL { float dl[]; };
layout(std430, set = 0, binding = 3) buffer DZ { float dz[]; };

void main()
{
    uint n = p.rows * p.cols;
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    float g = dl[p.dl_off] * p.scale;
    for (uint i = gl_GlobalInvocationID.x; i < n; i += stride) {
        uint r = i / p.cols, c = i - r * p.cols;
        uint label = uint(clamp(labels[p.l_off + r], 0, int(p.cols) - 1));
        float v = (prob[p.p_off + i] - (c == label ? 1.0 : 0.0)) * g;
        dz[p.dz_off + i] = p.beta != 0.0 ? v + p.beta * dz[p.dz_off + i] : v;
    }
}
