/*
 * 2-D pooling backward as a gather: dx[iy, ix] of a plane sums, over the windows that
 * contain it (ky, kx order), the window's dy: MAX only where saved (the forward's winner)
 * is this position, average times p.scale = 1 / (kh kw). When windows do not overlap
 * (stride >= window, as the usual 2x2 stride 2) the one window is found directly. One
 * invocation per dx element, fixed order: deterministic, no atomics. beta 0 writes dx
 * without reading it, otherwise dx = sum + beta dx.
 *
 * Each lane takes p.run runs of 4 consecutive elements of dx, grid-stride, each run
 * stored as one vec4 with VEC4 (dx 16-byte aligned, its size a multiple of 4). dy is read
 * through a storage texel buffer (a vector gather on lavapipe). saved (uint32) is read
 * through a storage buffer, or with SAVED_TEXEL through an R32F texel view whose bits are
 * taken as they are: on lavapipe a texel read is a plain load (a gather, where a
 * storage-buffer load is a loop over the lanes: 4x faster here); GPUs might flush the
 * denormal patterns that small positions are, so they use the storage buffer.
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
layout(constant_id = SPEC_POOL_BACKWARD_VEC4) const bool VEC4 = false;
layout(constant_id = SPEC_POOL_BACKWARD_SAVED_TEXEL) const bool SAVED_TEXEL = false;

layout(push_constant) uniform Push { push_pool p; };
layout(std430, set = 0, binding = 0) buffer DX { float dx[]; };
layout(std430, set = 0, binding = 0) buffer DX4 { vec4 dx4[]; };
layout(binding = 1, r32f) uniform readonly imageBuffer DY;
/* saved twice: a storage buffer, and an R32F texel view whose bits are the uint32 */
layout(std430, set = 0, binding = 2) readonly buffer S { uint saved[]; };
layout(binding = 3, r32f) uniform readonly imageBuffer ST;

/* Windows that do not overlap (stride >= window): at most one contains an input. */
const bool TILED = SH >= KH && SW >= KW;

/* Whether output o (in the plane's outputs from ob) sends its gradient to input (iy, ix)
 * that lies in its window: max pooling only to the window's winner. */
bool sends(uint o, uint iy, uint ix)
{
    if (!MAX)
        return true;
    if (SAVED_TEXEL)
        return floatBitsToUint(imageLoad(ST, int(p.st_off + o)).x) == iy * p.w + ix;
    return saved[p.s_off + o] == iy * p.w + ix;
}

/* The gradient of input (iy, ix) of plane pl. */
float gather(uint pl, uint iy, uint ix)
{
    uint ob = min(pl, p.planes - 1) * (p.oh * p.ow);
    if (TILED) { /* the one window: oy = (iy + ph) / sh, if its row ky = the rest is < kh */
        uint ty = iy + p.ph, tx = ix + p.pw, oy = ty / SH, ox = tx / SW;
        bool in_ = ty - oy * SH < KH && oy < p.oh && tx - ox * SW < KW && ox < p.ow;
        uint o = ob + (in_ ? oy * p.ow + ox : 0);
        in_ = in_ && sends(o, iy, ix);
        float g = imageLoad(DY, int(p.y_off + o)).x;
        return in_ ? (MAX ? g : g * p.scale) : 0.0;
    }
    float sum = 0.0;
    [[unroll]] for (uint ky = 0; ky < KH; ky++) {
        int ty = int(iy + p.ph) - int(ky); /* = oy sh */
        uint oy = uint(ty) / SH;
        bool yin = ty >= 0 && oy * SH == uint(ty) && oy < p.oh;
        [[unroll]] for (uint kx = 0; kx < KW; kx++) {
            int tx = int(ix + p.pw) - int(kx);
            uint ox = uint(tx) / SW;
            bool in_ = yin && tx >= 0 && ox * SW == uint(tx) && ox < p.ow;
            uint o = ob + (in_ ? oy * p.ow + ox : 0);
            in_ = in_ && sends(o, iy, ix);
            float g = imageLoad(DY, int(p.y_off + o)).x;
            sum += in_ ? g : 0.0;
        }
    }
    return MAX ? sum : sum * p.scale;
}

void main()
{
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    uint plane = p.h * p.w, total = p.planes * plane, quads = (total + 3) / 4;
    for (uint k0 = gl_GlobalInvocationID.x * p.run; k0 < quads; k0 += stride * p.run) {
        uint e0 = 4 * k0, pl = e0 / plane, q = e0 - pl * plane;
        uint iy = q / p.w, ix = q - iy * p.w;
        for (uint k = k0; k < min(k0 + p.run, quads); k++) {
            uint e = 4 * k;
            vec4 s;
            [[unroll]] for (uint i = 0; i < 4; i++) {
                s[i] = gather(pl, iy, ix);
                /* the next element: one column on, wrapping rows and planes */
                if (++ix == p.w) {
                    ix = 0;
                    if (++iy == p.h) {
                        iy = 0;
                        pl++;
                    }
                }
            }
            if (VEC4) {
                uint at = (p.x_off + e) / 4;
                dx4[at] = p.beta != 0.0 ? s + p.beta * dx4[at] : s;
            } else {
                [[unroll]] for (uint i = 0; i < 4; i++) {
                    uint at = p.x_off + e + i;
                    if (e + i < total)
                        dx[at] = p.beta != 0.0 ? s[i] + p.beta * dx[at] : s[i];
                }
            }
        }
    }
}
