/*
 * Reduction of x viewed as [outer, axis, inner] along the middle dimension into
 * y[outer, inner] (uint32 indices for ARGMAX, floats otherwise, stored as bits).
 *
 * T threads (a power of 2 dividing the workgroup) own one output: each walks every T-th
 * element of its axis, then the workgroup combines the T partials in a tree in shared
 * memory. T = 1 gives one thread per output (many short rows); T = workgroup size one
 * workgroup per output (long axes). Workgroups loop over blocks of outputs.
 * Thread layout: for inner == 1 the T threads of an output are adjacent (they read
 * adjacent elements of a row); otherwise the outputs of a workgroup are adjacent (they
 * read adjacent elements along inner).
 * MAX and ARGMAX agree: NaN counts as the largest value, ties go to the first index.
 * Each thread's sum is compensated (Kahan), so long rows lose little to fp32.
 */
#version 450
#extension GL_GOOGLE_include_directive : require
#include "push.h"
#include "common.glsl"
#include "spec.h"

layout(local_size_x_id = SPEC_WG) in;
layout(constant_id = SPEC_REDUCE_OP) const uint OP = 0;
layout(constant_id = SPEC_REDUCE_T) const uint T = 1;

layout(push_constant) uniform Push { push_reduce p; };
layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Y { uint y[]; };

const bool IS_MAX = OP == VKT_REDUCE_MAX || OP == VKT_REDUCE_ARGMAX;
shared float sv[gl_WorkGroupSize.x];
shared uint si[gl_WorkGroupSize.x];

/* Whether (v, i) beats (w, j) for max/argmax. */
bool beats(float v, uint i, float w, uint j)
{
    bool vn = isnan(v), wn = isnan(w);
    if (vn || wn)
        return vn && (!wn || i < j);
    return v > w || (v == w && i < j);
}

void main()
{
    const uint per_group = gl_WorkGroupSize.x / T;
    uint tid = gl_LocalInvocationID.x;
    bool rows = p.inner == 1;
    uint lane = rows ? tid % T : tid / per_group;
    uint slot = rows ? tid / T : tid % per_group;
    uint pos_step = rows ? 1 : per_group; /* shared-memory distance between lanes */
    uint n_out = p.outer * p.inner;
    uint blocks = (n_out + per_group - 1) / per_group;
    for (uint blk = gl_WorkGroupID.x; blk < blocks; blk += gl_NumWorkGroups.x) {
        uint o = blk * per_group + slot;
        float acc = IS_MAX ? uintBitsToFloat(0xff800000u) : 0.0; /* -inf or 0 */
        precise float comp = 0.0; /* Kahan compensation of the sum */
        uint idx = 0xffffffffu;
        if (o < n_out) {
            uint oo = o / p.inner, oi = o - oo * p.inner;
            uint base = p.x_off + oo * p.axis * p.inner + oi;
            for (uint k = lane; k < p.axis; k += T) {
                float v = x[base + k * p.inner];
                if (IS_MAX) {
                    if (beats(v, k, acc, idx)) {
                        acc = v;
                        idx = k;
                    }
                } else {
                    precise float yk = v - comp;
                    precise float tk = acc + yk;
                    comp = (tk - acc) - yk;
                    acc = tk;
                }
            }
        }
        if (T > 1) {
            sv[tid] = acc;
            if (IS_MAX)
                si[tid] = idx;
            barrier();
            for (uint s = T / 2; s > 0; s >>= 1) {
                if (lane < s) {
                    uint other = tid + s * pos_step;
                    if (IS_MAX) {
                        if (beats(sv[other], si[other], sv[tid], si[tid])) {
                            sv[tid] = sv[other];
                            si[tid] = si[other];
                        }
                    } else {
                        sv[tid] += sv[other];
                    }
                }
                barrier();
            }
            acc = sv[tid];
            idx = IS_MAX ? si[tid] : 0;
            barrier(); /* everyone has read before the next block overwrites */
        }
        if (o < n_out && lane == 0) {
            if (OP == VKT_REDUCE_MEAN)
                acc /= float(p.axis);
            y[p.y_off + o] = OP == VKT_REDUCE_ARGMAX ? idx : floatBitsToUint(acc);
        }
    }
}
