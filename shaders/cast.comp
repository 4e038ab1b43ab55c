#version 450
/*
 * cast.comp - a matrix converted between fp32, fp16 and bf16 (kernels/cast.c): y[r][c] =
 * x[r][c] for r < rows, c < cols, nothing else of y touched. To 16 bits rounds to nearest
 * even and widening is exact, both as shaders/dtype.h defines them (vkt_convert on the
 * host runs the same code); the same type on both sides copies the bits. One element per
 * thread and iteration of a grid-stride loop.
 */
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_shader_16bit_storage : require
#include "dtype.h"
#include "push.h"
#include "spec.h"

layout(local_size_x_id = SPEC_WG) in;

layout(push_constant) uniform Push { push_cast p; };
layout(std430, binding = 0) readonly buffer X { uint x[]; };
layout(std430, binding = 0) readonly buffer X16 { uint16_t x16[]; };
layout(std430, binding = 1) writeonly buffer Y { uint y[]; };
layout(std430, binding = 1) writeonly buffer Y16 { uint16_t y16[]; };

void main()
{
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    uint n = p.rows * p.cols;
    for (uint i = gl_GlobalInvocationID.x; i < n; i += stride) {
        uint r = i / p.cols, c = i - r * p.cols;
        uint xi = p.x_off + r * p.ldx + c, yi = p.y_off + r * p.ldy + c;
        /* the value as fp32 bits (or the 16 bits themselves when both sides are 16-bit of
           one type) */
        uint v;
        if (p.from == DTYPE_FP32) {
            v = x[xi];
        } else {
            uint h = uint(x16[xi]);
            if (p.to == p.from) {
                y16[yi] = uint16_t(h);
                continue;
            }
            v = floatBitsToUint(p.from == DTYPE_BF16 ? dtype_bf16_value(h) : dtype_f16_value(h));
        }
        if (p.to == DTYPE_FP32)
            y[yi] = v;
        else
            y16[yi] = uint16_t(p.to == DTYPE_BF16 ? dtype_f32_to_bf16(v) : dtype_f32_to_f16(v));
    }
}
