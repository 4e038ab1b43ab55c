/*
 * Moves between a chunk's NCHW tensor [n, oc, P] (P = oh ow) and the workspace matrix
 * rows [oc, R] (R = n P, channel-major: row o holds every position of every sample of
 * this chunk for channel o):
 *   DIR 0 (forward):  y[s, o, q] = rows[o, s P + q] (+ bias[o] when HAS_BIAS), then
 *                     max(., 0) when RELU (a relu fused into the convolution)
 *   DIR 1 (backward): rows[o, s P + q] = dy[s, o, q], times (y[s, o, q] > 0) when RELU
 *                     (dy is then the relu output's gradient, y that output, in binding 2)
 * Both sides are contiguous along the P positions of a (sample, channel) plane. Each lane
 * takes a run of RUN consecutive positions of one plane, so the divisions that locate it
 * are paid once per run. Binding 0 is the source, read
 * through a storage texel buffer (a vector gather on lavapipe; RGBA32F with VEC_IN),
 * binding 1 the destination, a storage buffer (every store is a loop over the lanes on
 * lavapipe, one per vec4 with VEC_OUT). QUAD (P a multiple of 4): positions go 4 at a
 * time (vec4s where VEC_IN / VEC_OUT allow).
 */
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#include "push_conv.h"
#include "spec.h"

layout(local_size_x_id = SPEC_WG) in;
layout(constant_id = SPEC_CONV_MOVE_DIR) const uint DIR = 0;
layout(constant_id = SPEC_CONV_MOVE_HAS_BIAS) const bool HAS_BIAS = false;
layout(constant_id = SPEC_CONV_MOVE_QUAD) const bool QUAD = false;
layout(constant_id = SPEC_CONV_MOVE_VEC_IN) const bool VEC_IN = false;
layout(constant_id = SPEC_CONV_MOVE_VEC_OUT) const bool VEC_OUT = false;
layout(constant_id = SPEC_CONV_MOVE_RUN) const uint RUN = 16;
layout(constant_id = SPEC_CONV_MOVE_RELU) const bool RELU = false;
layout(constant_id = SPEC_CONV_MOVE_VEC_Y) const bool VEC_Y = false;

layout(push_constant) uniform Push { push_conv p; };
layout(binding = 0, r32f) uniform readonly imageBuffer Src1;
layout(binding = 0, rgba32f) uniform readonly imageBuffer Src4;
layout(std430, set = 0, binding = 1) writeonly buffer Dst { float dst[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Dst4 { vec4 dst4[]; };
layout(std430, set = 0, binding = 2) readonly buffer B { float bias[]; }; /* or y (DIR 1) */
layout(std430, set = 0, binding = 2) readonly buffer B4 { vec4 y4[]; };

vec4 load4(uint at)
{
    if (VEC_IN)
        return imageLoad(Src4, int(at / 4));
    vec4 v;
    [[unroll]] for (uint i = 0; i < 4; i++)
        v[i] = imageLoad(Src1, int(at + i)).x;
    return v;
}

void store4(uint at, vec4 v)
{
    if (VEC_OUT) {
        dst4[at / 4] = v;
    } else {
        [[unroll]] for (uint i = 0; i < 4; i++)
            dst[at + i] = v[i];
    }
}

void main()
{
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    uint runs = (p.plane + RUN - 1) / RUN, planes = p.n * p.oc, R = p.n * p.plane;
    for (uint lane = gl_GlobalInvocationID.x; lane < planes * runs; lane += stride) {
        /* planes in destination order: (s, o) forward, (o, s) backward */
        uint pl = lane / runs, q0 = (lane - pl * runs) * RUN;
        uint hi = pl / (DIR == 0 ? p.oc : p.n), lo = pl - hi * (DIR == 0 ? p.oc : p.n);
        uint s = DIR == 0 ? hi : lo, o = DIR == 0 ? lo : hi;
        uint nchw = p.t_off + (s * p.oc + o) * p.plane, mat = p.m_off + o * R + s * p.plane;
        uint src = DIR == 0 ? mat : nchw, dest = DIR == 0 ? nchw : mat;
        float b = DIR == 0 && HAS_BIAS ? bias[p.b_off + o] : 0.0;
        uint yq = p.b_off + (s * p.oc + o) * p.plane; /* DIR 1 with RELU: y's plane */
        uint end = min(q0 + RUN, p.plane);
        if (QUAD) {
            for (uint q = q0; q < end; q += 4) {
                vec4 v = load4(src + q) + b;
                if (RELU && DIR == 0)
                    v = max(v, vec4(0.0));
                if (RELU && DIR == 1) {
                    vec4 y = VEC_Y ? y4[(yq + q) / 4]
                                   : vec4(bias[yq + q], bias[yq + q + 1], bias[yq + q + 2],
                                          bias[yq + q + 3]);
                    v = mix(vec4(0.0), v, greaterThan(y, vec4(0.0)));
                }
                store4(dest + q, v);
            }
        } else {
            for (uint q = q0; q < end; q++) {
                float v = imageLoad(Src1, int(src + q)).x + b;
                if (RELU)
                    v = DIR == 0 ? max(v, 0.0) : (bias[yq + q] > 0.0 ? v : 0.0);
                dst[dest + q] = v;
            }
        }
    }
}
