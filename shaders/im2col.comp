/*
 * im2col: unfolds a chunk of n samples of x [n, c, h, w] into cols [n oh ow, ckk]
 * (ckk = c kh kw rounded up to a multiple of 4, the row stride): row r = (sample, oy,
 * ox), column (ci, ky, kx) holds x[sample, ci, oy sh - ph + ky dh, ox sw - pw + kx dw],
 * or 0 where that falls in the padding; the columns past c kh kw are zeros. The GEMM
 * takes a group's columns as a slice (leading dimension ckk), so one dispatch serves
 * every group.
 *
 * Each lane takes p.run consecutive rows (locating the first costs vector divisions on
 * lavapipe; the next ones follow by counting). A row is written as vec4s, 4 channels
 * (4 kh kw values, a multiple of 4) at a time, then the last TAIL = C % 4 channels
 * padded with zeros to whole vec4s: rows start 16-byte aligned (the host aligns cols and
 * ckk is a multiple of 4), and on lavapipe a storage-buffer store is a loop over the
 * lanes, one per vec4 instead of one per float. x is read through a storage texel buffer
 * (imageLoad: a vector gather on lavapipe, where a storage-buffer load is another lane
 * loop). The kernel size, strides, dilations and the channel count C are specialization
 * constants, so the taps unroll with every (channel, ky, kx) of a vec4 known at compile
 * time and no code is left for a case that does not occur (on lavapipe an unused block
 * of 4 channels alone doubled the time of the c = 1 layer).
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
layout(constant_id = SPEC_IM2COL_C) const uint C = 1;
const uint TAIL = C % 4;

layout(push_constant) uniform Push { push_conv p; };
layout(binding = 0, r32f) uniform readonly imageBuffer X;
layout(std430, set = 0, binding = 1) writeonly buffer Cols { vec4 cols4[]; };

const uint KK = KH * KW;

/* Value of tap t (0 <= t < KK) of the channel plane starting at cb in x, for the output
 * position whose window starts at (iy0, ix0). t is a compile-time constant after
 * unrolling, so are ky and kx. */
float tap(uint cb, int iy0, int ix0, uint t)
{
    uint ky = t / KW, kx = t - ky * KW;
    int iy = iy0 + int(ky * DH), ix = ix0 + int(kx * DW);
    /* negative coordinates wrap to large unsigned values */
    bool in_ = uint(iy) < p.h && uint(ix) < p.w;
    float v = imageLoad(X, int(in_ ? cb + uint(iy) * p.w + uint(ix) : cb)).x;
    return in_ ? v : 0.0;
}

void main()
{
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    uint rows = p.n * p.plane, hw = p.h * p.w, blocks = C / 4;
    for (uint r0 = gl_GlobalInvocationID.x * p.run; r0 < rows; r0 += stride * p.run) {
        uint smp = r0 / p.plane, q = r0 - smp * p.plane;
        uint oy = q / p.ow, ox = q - oy * p.ow;
        for (uint r = r0; r < min(r0 + p.run, rows); r++) {
            int iy0 = int(oy * SH) - int(p.ph), ix0 = int(ox * SW) - int(p.pw);
            uint xs = p.t_off + smp * p.c * hw, out4 = p.m_off / 4 + r * (p.ckk / 4);
            /* 4 channels = KK vec4s; value 4 j + e is tap (4 j + e) % KK of channel
             * (4 j + e) / KK of the block */
            for (uint b = 0; b < blocks; b++) {
                uint cb = xs + 4 * b * hw;
                [[unroll]] for (uint j = 0; j < KK; j++) {
                    vec4 v;
                    [[unroll]] for (uint e = 0; e < 4; e++)
                        v[e] = tap(cb + (4 * j + e) / KK * hw, iy0, ix0, (4 * j + e) % KK);
                    cols4[out4 + b * KK + j] = v;
                }
            }
            if (TAIL > 0) {
                uint cb = xs + 4 * blocks * hw;
                [[unroll]] for (uint j = 0; j < (TAIL * KK + 3) / 4; j++) {
                    vec4 v;
                    [[unroll]] for (uint e = 0; e < 4; e++)
                        v[e] = 4 * j + e < TAIL * KK
                                   ? tap(cb + (4 * j + e) / KK * hw, iy0, ix0, (4 * j + e) % KK)
                                   : 0.0;
                    cols4[out4 + blocks * KK + j] = v;
                }
            }
            /* the next row: one column on, wrapping output rows and samples */
            if (++ox == p.ow) {
                ox = 0;
                if (++oy == p.oh) {
                    oy = 0;
                    smp++;
                }
            }
        }
    }
}
