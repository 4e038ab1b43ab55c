/*
 * Backward of bias + activation over [rows, cols]:
 *   DZ = f'(V) * DY (+ beta * DZ)           (when WRITE_DZ)
 *   DB = column sums of f'(V) * DY (+ beta_b * DB)   (when HAS_BIAS)
 * V is the pre-activation, or the output Y when FROM_Y (relu, leaky relu with alpha >= 0,
 * tanh, sigmoid and the identity have derivatives that follow from the output). DZ may be
 * DY itself (in place: each element is read, then written, by one thread).
 * Layouts: without bias, a grid-stride loop over all elements (vec4s when VEC4: views
 * 16-byte aligned, counts multiples of 4). With bias, a workgroup owns WG/RP units (a
 * column, or a quad of columns when VEC4): the RP threads of a unit walk every RP-th row,
 * then add their partial sums in a fixed order in shared memory (deterministic). RP is
 * chosen on the host so that no thread loops past the device's loop budget.
 * V16: V is stored in fp16 or bf16, two elements a 4-byte word (an autocast product's
 * saved pre-activation), widened exactly (shaders/dtype.h); never with VEC4.
 */
#version 450
#extension GL_GOOGLE_include_directive : require
#include "push.h"
#include "common.glsl"
#include "spec.h"
#include "dtype.h"

layout(local_size_x_id = SPEC_WG) in;
layout(constant_id = SPEC_BIAS_ACT_BACKWARD_OP) const uint OP = 0;
layout(constant_id = SPEC_BIAS_ACT_BACKWARD_HAS_BIAS) const bool HAS_BIAS = true;
layout(constant_id = SPEC_BIAS_ACT_BACKWARD_FROM_Y) const bool FROM_Y = false;
layout(constant_id = SPEC_BIAS_ACT_BACKWARD_WRITE_DZ) const bool WRITE_DZ = true;
layout(constant_id = SPEC_BIAS_ACT_BACKWARD_VEC4) const bool VEC4 = false;
layout(constant_id = SPEC_BIAS_ACT_BACKWARD_ACCUM) const bool ACCUM = false;   /* beta != 0 */
layout(constant_id = SPEC_BIAS_ACT_BACKWARD_RP) const uint RP = 4;
layout(constant_id = SPEC_BIAS_ACT_BACKWARD_V16) const uint V16 = 0;

layout(push_constant) uniform Push { push_bias_act p; };
layout(std430, set = 0, binding = 0) readonly buffer V { float v[]; };
layout(std430, set = 0, binding = 0) readonly buffer V4 { vec4 v4[]; };
layout(std430, set = 0, binding = 0) readonly buffer V16W { uint v16[]; };
layout(std430, set = 0, binding = 1) readonly buffer DY { float dy[]; };
layout(std430, set = 0, binding = 1) readonly buffer DY4 { vec4 dy4[]; };
layout(std430, set = 0, binding = 2) buffer DZ { float dz[]; };
layout(std430, set = 0, binding = 2) buffer DZ4 { vec4 dz4[]; };
layout(std430, set = 0, binding = 3) buffer DB { float db[]; };
layout(std430, set = 0, binding = 3) buffer DB4 { vec4 db4[]; };

shared vec4 part[gl_WorkGroupSize.x];

float d(float x) { return FROM_Y ? act_df_from_y(OP, p.alpha, x) : act_df(OP, p.alpha, x); }

float v_at(uint i)
{
    if (V16 == 0u)
        return v[p.v_off + i];
    uint e = p.v_off + i, w = v16[e / 2u], h = (e & 1u) != 0u ? w >> 16 : w & 0xffffu;
    return V16 == DTYPE_BF16 ? dtype_bf16_value(h) : dtype_f16_value(h);
}

float dz_at(uint i)
{
    float g = dy[p.dy_off + i] * d(v_at(i));
    if (WRITE_DZ)
        dz[p.dz_off + i] = ACCUM ? g + p.beta * dz[p.dz_off + i] : g;
    return g;
}

vec4 dz4_at(uint j)
{
    vec4 x = v4[p.v_off / 4 + j];
    vec4 g = dy4[p.dy_off / 4 + j] * vec4(d(x.x), d(x.y), d(x.z), d(x.w));
    if (WRITE_DZ)
        dz4[p.dz_off / 4 + j] = ACCUM ? g + p.beta * dz4[p.dz_off / 4 + j] : g;
    return g;
}

void main()
{
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (!HAS_BIAS) {
        if (VEC4) {
            uint n4 = p.rows * p.cols / 4;
            for (uint j = gl_GlobalInvocationID.x; j < n4; j += stride)
                dz4_at(j);
        } else {
            uint n = p.rows * p.cols;
            for (uint i = gl_GlobalInvocationID.x; i < n; i += stride)
                dz_at(i);
        }
        return;
    }
    /* A unit is a column (or a quad of columns, VEC4); RP threads share a unit. */
    const uint per_group = gl_WorkGroupSize.x / RP;
    uint tid = gl_LocalInvocationID.x, q = tid % per_group, phase = tid / per_group;
    uint units = VEC4 ? p.cols / 4 : p.cols, blocks = (units + per_group - 1) / per_group;
    for (uint blk = gl_WorkGroupID.x; blk < blocks; blk += gl_NumWorkGroups.x) {
        uint u = blk * per_group + q;
        vec4 s = vec4(0.0);
        if (u < units)
            for (uint r = phase; r < p.rows; r += RP) {
                if (VEC4)
                    s += dz4_at(r * units + u);
                else
                    s.x += dz_at(r * units + u);
            }
        part[tid] = s;
        barrier();
        if (phase == 0 && u < units) {
            for (uint k = 1; k < RP; k++)
                s += part[tid + k * per_group];
            if (VEC4) {
                uint o = p.db_off / 4 + u;
                db4[o] = p.beta_b != 0.0 ? s + p.beta_b * db4[o] : s;
            } else {
                uint o = p.db_off + u;
                db[o] = p.beta_b != 0.0 ? s.x + p.beta_b * db[o] : s.x;
            }
        }
        barrier();
    }
}
