/*
 * Softmax cross-entropy forward over logits Z[rows, cols] with int32 labels L, in one
 * workgroup (the work is rows * cols, small beside the matrix products around it):
 * each thread takes rows tid, tid + WG, ...; per row the max, sum of exp(z - max), and
 * loss_r = max + log(sum) - z[label]; the workgroup sums the losses in a fixed tree,
 * so the result does not depend on timing, and loss[0] = scale * total.
 * mode 1 also writes P = softmax(z) (the backward's input); mode 2 writes
 * P = (softmax(z) - onehot(label)) * scale: the gradient of the mean loss, so the
 * backward needs no dispatch. Labels outside [0, cols) are clamped (the host checks).
 */
#version 450
#extension GL_GOOGLE_include_directive : require
#include "push.h"
#include "spec.h"

layout(local_size_x_id = SPEC_WG) in;

layout(push_constant) uniform Push { push_sce p; };
layout(std430, set = 0, binding = 0) readonly buffer Z { float z[]; };
layout(std430, set = 0, binding = 1) readonly buffer L { int labels[]; };
layout(std430, set = 0, binding = 2) writeonly buffer LOSS { float loss[]; };
layout(std430, set = 0, binding = 3) writeonly buffer P { float prob[]; };

shared float part[gl_WorkGroupSize.x];

void main()
{
    uint tid = gl_LocalInvocationID.x;
    float acc = 0.0;
    for (uint r = tid; r < p.rows; r += gl_WorkGroupSize.x) {
        uint base = p.z_off + r * p.cols;
        float m = z[base];
        for (uint c = 1; c < p.cols; c++)
            m = max(m, z[base + c]);
        float s = 0.0;
        for (uint c = 0; c < p.cols; c++)
            s += exp(z[base + c] - m);
        uint label = uint(clamp(labels[p.l_off + r], 0, int(p.cols) - 1));
        acc += (m + log(s)) - z[base + label];
        if (p.mode != 0) {
            float inv = 1.0 / s;
            uint out_base = p.p_off + r * p.cols;
            for (uint c = 0; c < p.cols; c++) {
                float q = exp(z[base + c] - m) * inv;
                prob[out_base + c] = p.mode == 2 ? (q - (c == label ? 1.0 : 0.0)) * p.scale : q;
            }
        }
    }
    part[tid] = acc;
    barrier();
    for (uint h = gl_WorkGroupSize.x / 2; h > 0; h >>= 1) {
        if (tid < h)
            part[tid] += part[tid + h];
        barrier();
    }
    if (tid == 0)
        loss[p.loss_off] = part[0] * p.scale;
}
