/*
 * Backward of row softmax / log-softmax from the forward output y and dy:
 *   softmax:     dx = y * (dy - sum(dy * y))
 *   log-softmax: dx = dy - exp(y) * sum(dy)
 * T threads own a row (see softmax.comp); each thread's part of the row sum is
 * compensated (Kahan), the parts meet in a tree in shared memory. Each
 * element is read and written by the same thread, so dx may equal dy.
 */
#version 450
#extension GL_GOOGLE_include_directive : require
#include "push.h"
#include "spec.h"

layout(local_size_x_id = SPEC_WG) in;
layout(constant_id = SPEC_SOFTMAX_T) const uint T = 1;

layout(push_constant) uniform Push { push_softmax p; };
layout(std430, set = 0, binding = 0) readonly buffer Yb { float y[]; };
layout(std430, set = 0, binding = 1) readonly buffer DY { float dy[]; };
layout(std430, set = 0, binding = 2) writeonly buffer DX { float dx[]; };

shared float partial[gl_WorkGroupSize.x];

void main()
{
    const uint per_group = gl_WorkGroupSize.x / T;
    uint tid = gl_LocalInvocationID.x;
    uint lane = tid % T, slot = tid / T;
    bool lg = p.log != 0;
    uint blocks = (p.rows + per_group - 1) / per_group;
    for (uint blk = gl_WorkGroupID.x; blk < blocks; blk += gl_NumWorkGroups.x) {
        uint row = blk * per_group + slot;
        bool live = row < p.rows;
        uint base = row * p.cols;
        float acc = 0.0;
        precise float comp = 0.0; /* Kahan compensation */
        if (live) {
            for (uint k = lane; k < p.cols; k += T) {
                float d = dy[p.dy_off + base + k];
                precise float v = (lg ? d : d * y[p.y_off + base + k]) - comp;
                precise float sum = acc + v;
                comp = (sum - acc) - v;
                acc = sum;
            }
        }
        if (T > 1) {
            partial[tid] = acc;
            barrier();
            for (uint h = T / 2; h > 0; h >>= 1) {
                if (lane < h)
                    partial[tid] += partial[tid + h];
                barrier();
            }
            acc = partial[slot * T];
            barrier(); /* everyone has read before the next block overwrites */
        }
        if (live) {
            for (uint k = lane; k < p.cols; k += T) {
                float yv = y[p.y_off + base + k], d = dy[p.dy_off + base + k];
                dx[p.dx_off + base + k] = lg ? d - exp(yv) * acc : yv * (d - acc);
            }
        }
    }
}
