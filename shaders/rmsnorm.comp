/*
 * RMS normalization over the last axis (LLaMA-style; no mean subtracted, no beta):
 * x, y [rows, cols]; gamma [cols]; rstd [rows]. y = x * rstd * gamma with
 * rstd = 1 / sqrt(mean over the row of x^2 + eps). Two passes over x: the sum of squares,
 * then y (lavapipe's cost is per element loaded). The squares are all >= 0, so their fp32
 * sum has no cancellation to guard against (layernorm's shifted sums are not needed).
 *
 * T threads own a row (T a power of 2 dividing the workgroup; 1 for short rows on CPU
 * devices, where no barrier runs at all) and add their partial sums in a fixed tree in
 * shared memory, so results do not depend on timing. Workgroups loop over blocks of
 * wg / T rows. VEC4: every row is walked as vec4s (cols a multiple of 4, views 16-byte
 * aligned).
 */
#version 450
#extension GL_GOOGLE_include_directive : require
#include "push_norm.h"
#include "spec.h"

layout(local_size_x_id = SPEC_WG) in;
layout(constant_id = SPEC_RMSNORM_T) const uint T = 1;
layout(constant_id = SPEC_RMSNORM_VEC4) const bool VEC4 = false;

layout(push_constant) uniform Push { push_rmsnorm p; };
layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 0) readonly buffer X4 { vec4 x4[]; };
layout(std430, set = 0, binding = 1) readonly buffer G { float g[]; };
layout(std430, set = 0, binding = 1) readonly buffer G4 { vec4 g4[]; };
layout(std430, set = 0, binding = 2) writeonly buffer Y { float y[]; };
layout(std430, set = 0, binding = 2) writeonly buffer Y4 { vec4 y4[]; };
layout(std430, set = 0, binding = 3) writeonly buffer R { float rs[]; };

shared float red[gl_WorkGroupSize.x];

/* The sum of v over the T threads of a row, added in a fixed tree; the same for all of
 * them. Called by every thread of the workgroup (barriers need uniform control flow). */
float row_sum(float v, uint tid, uint lane)
{
    if (T == 1)
        return v;
    red[tid] = v;
    barrier();
    for (uint h = T / 2; h > 0; h >>= 1) {
        if (lane < h)
            red[tid] += red[tid + h];
        barrier();
    }
    float r = red[tid - lane];
    barrier(); /* all have read before the next use overwrites */
    return r;
}

void main()
{
    const uint per_group = gl_WorkGroupSize.x / T;
    uint tid = gl_LocalInvocationID.x;
    uint lane = tid % T, slot = tid / T;
    uint units = VEC4 ? p.cols / 4 : p.cols; /* loads per row */
    uint blocks = (p.rows + per_group - 1) / per_group;
    for (uint blk = gl_WorkGroupID.x; blk < blocks; blk += gl_NumWorkGroups.x) {
        uint row = blk * per_group + slot;
        bool live = row < p.rows;
        uint base = row * units; /* in loads */
        vec4 s = vec4(0.0); /* partial sums of squares (in .x if scalar) */
        if (live) {
            for (uint k = lane; k < units; k += T) {
                if (VEC4) {
                    vec4 v = x4[p.x_off / 4 + base + k];
                    s += v * v;
                } else {
                    float v = x[p.x_off + base + k];
                    s.x += v * v;
                }
            }
        }
        float all = row_sum((s.x + s.y) + (s.z + s.w), tid, lane);
        float rstd = 1.0 / sqrt(all / float(p.cols) + p.eps);
        if (!live)
            continue;
        for (uint k = lane; k < units; k += T) {
            if (VEC4)
                y4[p.y_off / 4 + base + k] =
                    x4[p.x_off / 4 + base + k] * rstd * g4[p.g_off / 4 + k];
            else
                y[p.y_off + base + k] = x[p.x_off + base + k] * rstd * g[p.g_off + k];
        }
        if (lane == 0)
            rs[p.r_off + row] = rstd;
    }
}
