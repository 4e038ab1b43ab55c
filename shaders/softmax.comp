/*
 * Row softmax (or log-softmax when p.log) of x[rows, cols] into y. T threads own a row
 * (T a power of 2 dividing the workgroup; T = 1 for short rows). Pass 1 keeps an online
 * (max, sum of exp(x - max)) pair per thread, rescaled when the max grows, and the
 * workgroup merges the T pairs in a tree; pass 2 writes the outputs. A row of only -inf
 * gives NaN, as exp(x - max(x)) does. Each element is
 * read and written by the same thread, so y may equal x.
 */
#version 450
#extension GL_GOOGLE_include_directive : require
#include "push.h"
#include "spec.h"

layout(local_size_x_id = SPEC_WG) in;
layout(constant_id = SPEC_SOFTMAX_T) const uint T = 1;

layout(push_constant) uniform Push { push_softmax p; };
layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Y { float y[]; };

shared float sm[gl_WorkGroupSize.x];
shared float ss[gl_WorkGroupSize.x];

/* Merges (m2, s2) into (m, s); a pair with s == 0 holds no elements. */
void merge(inout float m, inout float s, float m2, float s2)
{
    if (s2 == 0.0)
        return;
    if (s == 0.0) {
        m = m2;
        s = s2;
        return;
    }
    float mx = max(m, m2);
    s = s * exp(m - mx) + s2 * exp(m2 - mx);
    m = mx;
}

void main()
{
    const uint per_group = gl_WorkGroupSize.x / T;
    uint tid = gl_LocalInvocationID.x;
    uint lane = tid % T, slot = tid / T;
    uint blocks = (p.rows + per_group - 1) / per_group;
    for (uint blk = gl_WorkGroupID.x; blk < blocks; blk += gl_NumWorkGroups.x) {
        uint row = blk * per_group + slot;
        bool live = row < p.rows;
        uint base = row * p.cols;
        float m = 0.0, s = 0.0;
        if (live) {
            for (uint k = lane; k < p.cols; k += T) {
                float v = x[p.x_off + base + k];
                if (v == uintBitsToFloat(0xff800000u))
                    continue; /* -inf adds exp(-inf) = 0; skipping keeps -inf - -inf out */
                if (s == 0.0) {
                    m = v;
                    s = 1.0;
                } else if (v > m) {
                    s = s * exp(m - v) + 1.0;
                    m = v;
                } else {
                    s += exp(v - m);
                }
            }
        }
        if (T > 1) {
            sm[tid] = m;
            ss[tid] = s;
            barrier();
            for (uint h = T / 2; h > 0; h >>= 1) {
                if (lane < h) {
                    float mm = sm[tid], sum = ss[tid];
                    merge(mm, sum, sm[tid + h], ss[tid + h]);
                    sm[tid] = mm;
                    ss[tid] = sum;
                }
                barrier();
            }
            m = sm[slot * T];
            s = ss[slot * T];
            barrier(); /* everyone has read before the next block overwrites */
        }
        if (live) {
            if (p.log != 0) {
                float ls = log(s); /* (x - m) - ls: x - m is exact for x near m */
                for (uint k = lane; k < p.cols; k += T)
                    y[p.y_off + base + k] = (x[p.x_off + base + k] - m) - ls;
            } else {
                float inv = 1.0 / s;
                for (uint k = lane; k < p.cols; k += T)
                    y[p.y_off + base + k] = exp(x[p.x_off + base + k] - m) * inv;
            }
        }
    }
}
