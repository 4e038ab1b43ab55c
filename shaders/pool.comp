/*
 * 2-D pooling forward over planes of h x w (p.planes = n c of them) into oh x ow: output
 * (oy, ox) looks at inputs (oy sh - ph + ky, ox sw - pw + kx), ky < KH, kx < KW, skipping
 * the padding. MAX: the largest value, the first in (ky, kx) order on ties, and its
 * position iy w + ix written to saved (uint32) for the backward. Average: the sum times
 * p.scale = 1 / (kh kw) (padding counts as zeros).
 *
 * Each lane takes p.run runs of 4 consecutive outputs, grid-stride (the first output
 * located with divisions, the next ones by counting), and stores each run as one vec4 /
 * uvec4 where VEC_Y / VEC_S say the binding allows (on lavapipe each storage store is a
 * loop over the lanes). x is read through a storage texel buffer (a vector gather there).
 */
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#include "push_conv.h"
#include "spec.h"

layout(local_size_x_id = SPEC_WG) in;
layout(constant_id = SPEC_POOL_KH) const uint KH = 2;
layout(constant_id = SPEC_POOL_KW) const uint KW = 2;
layout(constant_id = SPEC_POOL_SH) const uint SH = 2;
layout(constant_id = SPEC_POOL_SW) const uint SW = 2;
layout(constant_id = SPEC_POOL_MAX) const bool MAX = true;
layout(constant_id = SPEC_POOL_VEC_Y) const bool VEC_Y = false;
layout(constant_id = SPEC_POOL_VEC_S) const bool VEC_S = false;

layout(push_constant) uniform Push { push_pool p; };
layout(binding = 0, r32f) uniform readonly imageBuffer X;
layout(std430, set = 0, binding = 1) writeonly buffer Y { float y[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Y4 { vec4 y4[]; };
layout(std430, set = 0, binding = 2) writeonly buffer S { uint saved[]; };
layout(std430, set = 0, binding = 2) writeonly buffer S4 { uvec4 saved4[]; };

void main()
{
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    uint plane = p.oh * p.ow, total = p.planes * plane, quads = (total + 3) / 4;
    for (uint k0 = gl_GlobalInvocationID.x * p.run; k0 < quads; k0 += stride * p.run) {
        uint e0 = 4 * k0, pl = e0 / plane, q = e0 - pl * plane;
        uint oy = q / p.ow, ox = q - oy * p.ow;
        for (uint k = k0; k < min(k0 + p.run, quads); k++) {
            uint e = 4 * k;
            vec4 v;
            uvec4 arg;
            [[unroll]] for (uint i = 0; i < 4; i++) {
                /* past the end (a partial last run of 4): read in bounds, store nothing */
                uint xb = p.x_off + min(pl, p.planes - 1) * p.h * p.w;
                int iy0 = int(oy * SH) - int(p.ph), ix0 = int(ox * SW) - int(p.pw);
                float best = 0.0, sum = 0.0;
                uint win = 0xFFFFFFFFu;
                [[unroll]] for (uint ky = 0; ky < KH; ky++) {
                    int iy = iy0 + int(ky);
                    [[unroll]] for (uint kx = 0; kx < KW; kx++) {
                        int ix = ix0 + int(kx);
                        /* negative coordinates wrap to large unsigned values */
                        bool in_ = uint(iy) < p.h && uint(ix) < p.w;
                        uint at = in_ ? uint(iy) * p.w + uint(ix) : 0;
                        float x = imageLoad(X, int(xb + at)).x;
                        if (MAX) {
                            bool take = in_ && (win == 0xFFFFFFFFu || x > best);
                            best = take ? x : best;
                            win = take ? at : win;
                        } else {
                            sum += in_ ? x : 0.0;
                        }
                    }
                }
                v[i] = MAX ? best : sum * p.scale;
                arg[i] = win;
                /* the next output: one column on, wrapping rows and planes */
                if (++ox == p.ow) {
                    ox = 0;
                    if (++oy == p.oh) {
                        oy = 0;
                        pl++;
                    }
                }
            }
            if (VEC_Y) {
                y4[(p.y_off + e) / 4] = v;
            } else {
                [[unroll]] for (uint i = 0; i < 4; i++)
                    if (e + i < total)
                        y[p.y_off + e + i] = v[i];
            }
            if (MAX && VEC_S) {
                saved4[(p.s_off + e) / 4] = arg;
            } else if (MAX) {
                [[unroll]] for (uint i = 0; i < 4; i++)
                    if (e + i < total)
                        saved[p.s_off + e + i] = arg[i];
            }
        }
    }
}
