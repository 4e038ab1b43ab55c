/*
 * Backward of training-mode batch normalization (batchnorm.comp) over x, dy, dx
 * [n, c, hw]; gamma, dgamma, dbeta [c]; stats [c, 2] = (mean, rstd) of the forward.
 * With xhat = (x - mean) * rstd and m = n * hw elements per channel:
 *   dbeta = sum dy, dgamma = sum dy * xhat,
 *   dx = gamma * rstd * (dy - dbeta / m - xhat * dgamma / m)
 * (the sums taken before any accumulation into dgamma and dbeta). Outputs: new (beta 0,
 * old contents not read) or new + beta * out.
 *
 * One workgroup per channel (looping over channels when c is large): its threads walk
 * every wg-th element of the channel for the two sums, combined in a fixed tree in shared
 * memory (results independent of timing); thread 0 writes dgamma and dbeta; then every
 * thread writes dx for its elements. VEC4: elements in fours (hw a multiple of 4, x, dy
 * and dx 16-byte aligned).
 */
#version 450
#extension GL_GOOGLE_include_directive : require
#include "push_norm.h"
#include "spec.h"

layout(local_size_x_id = SPEC_WG) in;
layout(constant_id = SPEC_BATCHNORM_BACKWARD_VEC4) const bool VEC4 = false;
layout(constant_id = SPEC_BATCHNORM_BACKWARD_HAS_DX) const bool HAS_DX = true;
layout(constant_id = SPEC_BATCHNORM_BACKWARD_HAS_DG) const bool HAS_DG = true;
layout(constant_id = SPEC_BATCHNORM_BACKWARD_HAS_DB) const bool HAS_DB = true;

layout(push_constant) uniform Push { push_batchnorm p; };
layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 0) readonly buffer X4 { vec4 x4[]; };
layout(std430, set = 0, binding = 1) readonly buffer G { float g[]; };
layout(std430, set = 0, binding = 2) readonly buffer S { float st[]; };
layout(std430, set = 0, binding = 3) readonly buffer DY { float dy[]; };
layout(std430, set = 0, binding = 3) readonly buffer DY4 { vec4 dy4[]; };
layout(std430, set = 0, binding = 4) buffer DX { float dx[]; };
layout(std430, set = 0, binding = 4) buffer DX4 { vec4 dx4[]; };
layout(std430, set = 0, binding = 5) buffer DG { float dg[]; };
layout(std430, set = 0, binding = 6) buffer DB { float db[]; };

shared vec2 red[gl_WorkGroupSize.x];

/* Sums of v over the workgroup in a fixed tree; every thread gets them. */
vec2 group_sum(vec2 v)
{
    uint tid = gl_LocalInvocationID.x;
    red[tid] = v;
    barrier();
    for (uint h = gl_WorkGroupSize.x / 2; h > 0; h >>= 1) {
        if (tid < h)
            red[tid] += red[tid + h];
        barrier();
    }
    vec2 r = red[0];
    barrier(); /* all have read before the next use overwrites */
    return r;
}

/* The element walk of batchnorm.comp: units k = tid, tid + wg, ... of channel ch, at
 * (i * c + ch) * hwu + r with k = i * hwu + r, (i, r) advanced without divisions. */
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
        float mean = st[p.s_off + 2 * ch], rstd = st[p.s_off + 2 * ch + 1];
        vec2 s = vec2(0.0); /* (sum of dy, sum of dy * xhat) */
        if (VEC4) {
            vec4 sd = vec4(0.0), sdx = vec4(0.0);
            WALK(ch, {
                vec4 d = dy4[p.dy_off / 4 + a];
                sd += d;
                sdx += d * ((x4[p.x_off / 4 + a] - mean) * rstd);
            })
            s = vec2((sd.x + sd.y) + (sd.z + sd.w), (sdx.x + sdx.y) + (sdx.z + sdx.w));
        } else {
            WALK(ch, {
                float d = dy[p.dy_off + a];
                s += vec2(d, d * ((x[p.x_off + a] - mean) * rstd));
            })
        }
        s = group_sum(s);
        if (gl_LocalInvocationID.x == 0) {
            if (HAS_DG)
                dg[p.dg_off + ch] = p.beta_g != 0.0 ? s.y + p.beta_g * dg[p.dg_off + ch] : s.y;
            if (HAS_DB)
                db[p.db_off + ch] = p.beta_b != 0.0 ? s.x + p.beta_b * db[p.db_off + ch] : s.x;
        }
        if (!HAS_DX)
            continue;
        float gs = g[p.g_off + ch] * rstd, md = s.x * inv_count, mdx = s.y * inv_count;
        float bx = p.beta_x;
        if (VEC4)
            WALK(ch, {
                vec4 v = gs * (dy4[p.dy_off / 4 + a] - md -
                               (x4[p.x_off / 4 + a] - mean) * rstd * mdx);
                dx4[p.dx_off / 4 + a] = bx != 0.0 ? v + bx * dx4[p.dx_off / 4 + a] : v;
            })
        else
            WALK(ch, {
                float v = gs * (dy[p.dy_off + a] - md - (x[p.x_off + a] - mean) * rstd * mdx);
                dx[p.dx_off + a] = bx != 0.0 ? v + bx * dx[p.dx_off + a] : v;
            })
    }
}
