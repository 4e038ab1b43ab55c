/*
 * Block copies y[dst(e)] = alpha * x[src(e)] + beta * y[dst(e)] for e < n, beta == 0
 * not reading y. KIND (specialization constant) picks the index maps:
 *   0 slice/concat: rows of d0 contiguous elements; src = row * src_row + src_base + col,
 *                   dst = row * dst_row + dst_base + col
 *   1 broadcast:    y viewed as [outer, d0, d1] from x [outer, d1] (a reduction's
 *                   backward): src = (e / (d0 * d1)) * d1 + e % d1, dst = e
 *   2 transpose:    y[d1, d0] from x[d0, d1]: dst = e = j * d0 + i, src = i * d1 + j
 * Grid-stride over the destination elements.
 */
#version 450
#extension GL_GOOGLE_include_directive : require
#include "push.h"
#include "spec.h"

layout(local_size_x_id = SPEC_WG) in;
layout(constant_id = SPEC_BLOCK_KIND) const uint KIND = 0;

layout(push_constant) uniform Push { push_block p; };
layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 1) buffer Y { float y[]; };

void main()
{
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint e = gl_GlobalInvocationID.x; e < p.n; e += stride) {
        uint src, dst;
        if (KIND == 0) {
            uint row = e / p.d0, col = e - row * p.d0;
            src = row * p.src_row + p.src_base + col;
            dst = row * p.dst_row + p.dst_base + col;
        } else if (KIND == 1) {
            uint plane = p.d0 * p.d1;
            src = (e / plane) * p.d1 + e % p.d1;
            dst = e;
        } else {
            uint j = e / p.d0, i = e - j * p.d0;
            src = i * p.d1 + j;
            dst = e;
        }
        float v = p.alpha * x[p.x_off + src];
        y[p.y_off + dst] = p.beta != 0.0 ? v + p.beta * y[p.y_off + dst] : v;
    }
}
