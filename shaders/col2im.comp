/*
 * col2im as a gather: dx[sample, ci, iy, ix] = sum of the dcols entries that im2col
 * would have filled from that input element, i.e. of dcols[(sample, oy, ox), (ci, ky, kx)]
 * over the taps with oy sh - ph + ky dh = iy and ox sw - pw + kx dw = ix, in (ky, kx)
 * order. Each output is written by one invocation in a fixed order: deterministic, no
 * atomics. beta 0 writes dx without reading it; otherwise dx = sum + beta dx.
 *
 * Each lane takes p.run runs of 4 consecutive elements of the chunk's dx (n c h w of
 * them, p.plane = h w per plane), grid-stride: the first element is located with
 * divisions (vector divisions on lavapipe), the next ones by counting. With VEC4 (dx
 * 16-byte aligned, n c h w a multiple of 4) each run of 4 is stored as one vec4 (one
 * lane loop on lavapipe instead of four). dcols [n oh ow, ckk] is read through a storage
 * texel buffer (a vector gather on lavapipe). Kernel size, strides and dilations are
 * specialization constants (divisions by them become multiplications).
 */
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#include "push_conv.h"
#include "spec.h"

layout(local_size_x_id = SPEC_WG) in;
layout(constant_id = SPEC_CONV_KH) const uint KH = 3;
layout(constant_id = SPEC_CONV_KW) const uint KW = 3;
layout(constant_id = SPEC_CONV_SH) const uint SH = 1;
layout(constant_id = SPEC_CONV_SW) const uint SW = 1;
layout(constant_id = SPEC_CONV_DH) const uint DH = 1;
layout(constant_id = SPEC_CONV_DW) const uint DW = 1;
layout(constant_id = SPEC_COL2IM_VEC4) const bool VEC4 = false;

layout(push_constant) uniform Push { push_conv p; };
layout(binding = 0, r32f) uniform readonly imageBuffer Cols;
layout(std430, set = 0, binding = 1) buffer DX { float dx[]; };
layout(std430, set = 0, binding = 1) buffer DX4 { vec4 dx4[]; };

/* The sum for input (iy, ix) of the channel whose first dcols column in the sample's
 * first row is `base`. */
float gather(uint base, uint iy, uint ix)
{
    float sum = 0.0;
    [[unroll]] for (uint ky = 0; ky < KH; ky++) {
        int ty = int(iy + p.ph) - int(ky * DH); /* = oy sh */
        uint oy = uint(ty) / SH;
        bool yin = ty >= 0 && oy * SH == uint(ty) && oy < p.oh;
        [[unroll]] for (uint kx = 0; kx < KW; kx++) {
            int tx = int(ix + p.pw) - int(kx * DW);
            uint ox = uint(tx) / SW;
            bool in_ = yin && tx >= 0 && ox * SW == uint(tx) && ox < p.ow;
            uint at = in_ ? base + (oy * p.ow + ox) * p.ckk + ky * KW + kx : 0;
            float v = imageLoad(Cols, int(at)).x;
            sum += in_ ? v : 0.0;
        }
    }
    return sum;
}

void main()
{
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    uint total = p.n * p.c * p.plane, quads = (total + 3) / 4;
    uint srow = (p.oh * p.ow) * p.ckk, KK = KH * KW;
    for (uint k0 = gl_GlobalInvocationID.x * p.run; k0 < quads; k0 += stride * p.run) {
        uint e0 = 4 * k0, pl = e0 / p.plane, q = e0 - pl * p.plane;
        uint smp = pl / p.c, ci = pl - smp * p.c;
        uint iy = q / p.w, ix = q - iy * p.w;
        for (uint k = k0; k < min(k0 + p.run, quads); k++) {
            uint e = 4 * k;
            vec4 s;
            [[unroll]] for (uint i = 0; i < 4; i++) {
                uint sm = min(smp, p.n - 1); /* past the end (a partial last run): in bounds */
                s[i] = gather(p.m_off + sm * srow + ci * KK, iy, ix);
                /* the next element: one column on, wrapping rows, channels, samples */
                if (++ix == p.w) {
                    ix = 0;
                    if (++iy == p.h) {
                        iy = 0;
                        if (++ci == p.c) {
                            ci = 0;
                            smp++;
                        }
                    }
                }
            }
            if (VEC4) {
                uint at = (p.t_off + e) / 4;
                dx4[at] = p.beta != 0.0 ? s + p.beta * dx4[at] : s;
            } else {
                [[unroll]] for (uint i = 0; i < 4; i++) {
                    uint at = p.t_off + e + i;
                    if (e + i < total)
                        dx[at] = p.beta != 0.0 ? s[i] + p.beta * dx[at] : s[i];
                }
            }
        }
    }
}
