/*
 * Batch normalization forward over x, y [n, c, hw] (NCHW with hw = h * w); gamma, beta,
 * running_mean, running_var [c]; stats [c, 2] = (mean, rstd).
 *
 * One workgroup per channel (workgroups loop over channels when c is large): its threads
 * walk every wg-th of the channel's n * hw elements. TRAIN: one pass for the batch
 * statistics (each thread's count, mean and sum of squared deviations, merged pairwise in
 * a fixed tree in shared memory, so the results do not depend on timing); thread 0 writes
 * stats and, when p.update is set, moves the running averages (running_var gets the
 * unbiased variance, var * unbias; a pipeline stage's first forward leaves them, its
 * recomputation moves them); a second pass normalizes. Two passes over x in all: lavapipe's cost is
 * per element loaded. Not TRAIN (inference): y from running_mean/var, nothing
 * else written. VEC4: elements go in fours (hw a multiple of 4, x and y 16-byte aligned).
 * Each element is read and written by the same thread after the sums: y may equal x.
 */
#version 450
#extension GL_GOOGLE_include_directive : require
#include "push_norm.h"
#include "spec.h"

layout(local_size_x_id = SPEC_WG) in;
layout(constant_id = SPEC_BATCHNORM_TRAIN) const bool TRAIN = true;
layout(constant_id = SPEC_BATCHNORM_VEC4) const bool VEC4 = false;

layout(push_constant) uniform Push { push_batchnorm p; };
layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 0) readonly buffer X4 { vec4 x4[]; };
layout(std430, set = 0, binding = 1) readonly buffer G { float g[]; };
layout(std430, set = 0, binding = 2) readonly buffer B { float b[]; };
layout(std430, set = 0, binding = 3) writeonly buffer Y { float y[]; };
layout(std430, set = 0, binding = 3) writeonly buffer Y4 { vec4 y4[]; };
layout(std430, set = 0, binding = 4) writeonly buffer S { float st[]; };
layout(std430, set = 0, binding = 5) buffer RM { float rm[]; };
layout(std430, set = 0, binding = 6) buffer RV { float rv[]; };

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

/* The statistics of the whole workgroup's elements, merged in a fixed tree; every thread
 * gets them. */
vec3 group_stats(vec3 v)
{
    uint tid = gl_LocalInvocationID.x;
    red[tid] = v;
    barrier();
    for (uint h = gl_WorkGroupSize.x / 2; h > 0; h >>= 1) {
        if (tid < h)
            red[tid] = merge(red[tid], red[tid + h]);
        barrier();
    }
    vec3 r = red[0];
    barrier(); /* all have read before the next use overwrites */
    return r;
}

/* The element walk of a thread: units (floats, or vec4s) k = tid, tid + wg, ... of a
 * channel, k = i * hwu + r for sample i and position r, at (i * c + ch) * hwu + r. The
 * (i, r) pair advances by (wg / hwu, wg % hwu) with a carry: no division per element. */
#define WALK(ch, body)                                                                  \
    {                                                                                   \
        uint hwu = VEC4 ? p.hw / 4 : p.hw, count = p.n * hwu;                           \
        uint wg = gl_WorkGroupSize.x, sq = wg / hwu, sr = wg % hwu;                     \
        uint tid = gl_LocalInvocationID.x, r = tid % hwu;                               \
        uint a = ((tid / hwu) * p.c + (ch)) * hwu + r;                                  \
        uint step = sq * p.c * hwu + sr, wrap = (p.c - 1) * hwu;                        \
        for (uint k = tid; k < count; k += wg) {                                        \
            body;                                                                       \
            r += sr;                                                                    \
            a += step;                                                                  \
            if (r >= hwu) {                                                             \
                r -= hwu;                                                               \
                a += wrap;                                                              \
            }                                                                           \
        }                                                                               \
    }

void main()
{
    float inv_count = 1.0 / float(p.n * p.hw);
    for (uint ch = gl_WorkGroupID.x; ch < p.c; ch += gl_NumWorkGroups.x) {
        float mean, rstd;
        if (TRAIN) {
            /* One pass: each thread sums the deviations d from its own first element K
             * and their squares, so its mean K + S1 / m and M2 = S2 - S1^2 / m lose little
             * to cancellation (K is a sample of the same channel: |K - mean| is about a
             * standard deviation); the threads' statistics then merge exactly. */
            uint hwu = VEC4 ? p.hw / 4 : p.hw, tid = gl_LocalInvocationID.x;
            uint units = p.n * hwu, wg = gl_WorkGroupSize.x;
            uint mine = tid < units ? (units - tid + wg - 1) / wg : 0; /* loads of this thread */
            float k0 = 0.0, s1 = 0.0, s2 = 0.0;
            if (mine > 0) /* the first element of this thread: sample tid / hwu */
                k0 = x[p.x_off + (((tid / hwu) * p.c + ch) * hwu + tid % hwu) * (VEC4 ? 4 : 1)];
            if (VEC4)
                WALK(ch, {
                    vec4 d = x4[p.x_off / 4 + a] - k0;
                    s1 += (d.x + d.y) + (d.z + d.w);
                    s2 += dot(d, d);
                })
            else
                WALK(ch, {
                    float d = x[p.x_off + a] - k0;
                    s1 += d;
                    s2 += d * d;
                })
            float m = float(mine * (VEC4 ? 4 : 1));
            vec3 own = m > 0.0 ? vec3(m, k0 + s1 / m, max(s2 - s1 * (s1 / m), 0.0)) : vec3(0.0);
            vec3 all = group_stats(own);
            mean = all.y;
            float var = all.z * inv_count;
            rstd = 1.0 / sqrt(var + p.eps);
            if (tid == 0) {
                st[p.s_off + 2 * ch] = mean;
                st[p.s_off + 2 * ch + 1] = rstd;
                float mo = p.momentum;
                if (p.update != 0u) {
                    rm[p.rm_off + ch] = (1.0 - mo) * rm[p.rm_off + ch] + mo * mean;
                    rv[p.rv_off + ch] = (1.0 - mo) * rv[p.rv_off + ch] + mo * (var * p.unbias);
                }
            }
        } else {
            mean = rm[p.rm_off + ch];
            rstd = 1.0 / sqrt(rv[p.rv_off + ch] + p.eps);
        }
        /* y = x * scale + shift with scale = rstd * gamma, shift = beta - mean * scale
         * would save a subtraction but lose digits for large means: keep (x - mean). */
        float gs = rstd * g[p.g_off + ch], sh = b[p.b_off + ch];
        if (VEC4)
            WALK(ch, { y4[p.y_off / 4 + a] = (x4[p.x_off / 4 + a] - mean) * gs + sh; })
        else
            WALK(ch, { y[p.y_off + a] = (x[p.x_off + a] - mean) * gs + sh; })
    }
}
