/*
 * Layer normalization over the last axis: x, y [rows, cols]; gamma, beta [cols];
 * stats [rows, 2] = (mean, rstd). y = (x - mean) * rstd * gamma + beta with
 * rstd = 1 / sqrt(var + eps), var the biased variance of the row. Two passes over x: the
 * statistics in one (see below), then y; lavapipe's cost is per element loaded.
 *
 * T threads own a row (T a power of 2 dividing the workgroup; 1 for short rows on CPU
 * devices) and merge their statistics in a fixed tree in shared memory, so results do not
 * depend on timing. Workgroups loop over blocks of wg / T rows. VEC4: every row is
 * walked as vec4s (cols a multiple of 4, views 16-byte aligned): lavapipe pays per loop
 * iteration, so four elements cost little more than one.
 */
#version 450
#extension GL_GOOGLE_include_directive : require
#include "push_norm.h"
#include "spec.h"

layout(local_size_x_id = SPEC_WG) in;
layout(constant_id = SPEC_LAYERNORM_T) const uint T = 1;
layout(constant_id = SPEC_LAYERNORM_VEC4) const bool VEC4 = false;

layout(push_constant) uniform Push { push_layernorm p; };
layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 0) readonly buffer X4 { vec4 x4[]; };
layout(std430, set = 0, binding = 1) readonly buffer G { float g[]; };
layout(std430, set = 0, binding = 1) readonly buffer G4 { vec4 g4[]; };
layout(std430, set = 0, binding = 2) readonly buffer B { float b[]; };
layout(std430, set = 0, binding = 2) readonly buffer B4 { vec4 b4[]; };
layout(std430, set = 0, binding = 3) writeonly buffer Y { float y[]; };
layout(std430, set = 0, binding = 3) writeonly buffer Y4 { vec4 y4[]; };
layout(std430, set = 0, binding = 4) writeonly buffer S { float st[]; };

shared vec3 red[gl_WorkGroupSize.x];

/* Merges the statistics (count, mean, M2 = sum of squared deviations) of two disjoint
 * sets (Chan et al.'s pairwise update). */
vec3 merge(vec3 a, vec3 b)
{
    if (b.x == 0.0)
        return a;
    if (a.x == 0.0)
        return b;
    float n = a.x + b.x, delta = b.y - a.y;
    return vec3(n, a.y + delta * (b.x / n), a.z + b.z + delta * delta * (a.x * (b.x / n)));
}

/* The statistics of a row from those of its T threads, merged in a fixed tree; the same
 * for all of them. Called by every thread of the workgroup (barriers need uniform control
 * flow). */
vec3 row_stats(vec3 v, uint tid, uint lane)
{
    if (T == 1)
        return v;
    red[tid] = v;
    barrier();
    for (uint h = T / 2; h > 0; h >>= 1) {
        if (lane < h)
            red[tid] = merge(red[tid], red[tid + h]);
        barrier();
    }
    vec3 r = red[tid - lane];
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
    /* this thread's loads of a row: lane, lane + T, ... */
    uint mine = lane < units ? (units - lane + T - 1) / T : 0;
    float m = float(mine * (VEC4 ? 4 : 1));
    for (uint blk = gl_WorkGroupID.x; blk < blocks; blk += gl_NumWorkGroups.x) {
        uint row = blk * per_group + slot;
        bool live = row < p.rows;
        uint base = row * units; /* in loads */
        /* One pass: the deviations from the thread's first element k0 and their squares
         * give its mean k0 + s1 / m and M2 = s2 - s1^2 / m with little cancellation (k0
         * is a value of the same row); the threads' statistics then merge exactly. */
        vec3 own = vec3(0.0);
        if (live && mine > 0) {
            float k0 = x[p.x_off + (base + lane) * (VEC4 ? 4 : 1)], s1 = 0.0, s2 = 0.0;
            for (uint k = lane; k < units; k += T) {
                if (VEC4) {
                    vec4 d = x4[p.x_off / 4 + base + k] - k0;
                    s1 += (d.x + d.y) + (d.z + d.w);
                    s2 += dot(d, d);
                } else {
                    float d = x[p.x_off + base + k] - k0;
                    s1 += d;
                    s2 += d * d;
                }
            }
            own = vec3(m, k0 + s1 / m, max(s2 - s1 * (s1 / m), 0.0));
        }
        vec3 all = row_stats(own, tid, lane);
        float mean = all.y;
        float rstd = 1.0 / sqrt(all.z / float(p.cols) + p.eps);
        if (live) {
            for (uint k = lane; k < units; k += T) {
                if (VEC4)
                    y4[p.y_off / 4 + base + k] =
                        (x4[p.x_off / 4 + base + k] - mean) * rstd * g4[p.g_off / 4 + k] +
                        b4[p.b_off / 4 + k];
                else
                    y[p.y_off + base + k] =
                        (x[p.x_off + base + k] - mean) * rstd * g[p.g_off + k] + b[p.b_off + k];
            }
            if (lane == 0) {
                st[p.s_off + 2 * row] = mean;
                st[p.s_off + 2 * row + 1] = rstd;
            }
        }
    }
}
