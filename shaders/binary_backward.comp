/*
 * Gradient of out = a (op) b with respect to operand WHICH (0 = a, 1 = b): for each
 * element of that operand, the sum over the positions it was broadcast to of
 * dy * d(out)/d(operand). Deterministic: T threads own one gradient element (T = 1: one
 * thread per element), each walks a fixed subset of the broadcast positions, and the
 * workgroup adds the T partial sums in a fixed tree. No atomics. Each thread's sum is
 * compensated (Kahan).
 *
 * The broadcast dims of the operand are those where its stride is 0 and out_dims > 1.
 * n counts gradient elements (the operand's shape).
 */
#version 450
#extension GL_GOOGLE_include_directive : require
#include "push.h"
#include "common.glsl"
#include "spec.h"

layout(local_size_x_id = SPEC_WG) in;
layout(constant_id = SPEC_BINARY_BACKWARD_OP) const uint OP = 0;
layout(constant_id = SPEC_BINARY_BACKWARD_WHICH) const uint WHICH = 0;
layout(constant_id = SPEC_BINARY_BACKWARD_T) const uint T = 1;

layout(push_constant) uniform Push { push_binary p; };
layout(std430, set = 0, binding = 0) readonly buffer A { float a[]; };
layout(std430, set = 0, binding = 1) readonly buffer B { float b[]; };
layout(std430, set = 0, binding = 2) readonly buffer DY { float dy[]; };
layout(std430, set = 0, binding = 3) writeonly buffer G { float g[]; };

shared float partial[gl_WorkGroupSize.x];

/* dy * d(a op b)/d(operand WHICH) at one position. */
float term(uint ai, uint bi, uint oi)
{
    float d = dy[p.dy_off + oi];
    switch (OP) {
    case VKT_BINARY_ADD: return d;
    case VKT_BINARY_SUB: return WHICH == 0 ? d : -d;
    case VKT_BINARY_MUL: return WHICH == 0 ? d * b[p.b_off + bi] : d * a[p.a_off + ai];
    default: {
        float bv = b[p.b_off + bi];
        if (WHICH == 0)
            return d / bv;
        return -d * (a[p.a_off + ai] / bv) / bv;
    }
    }
}

void main()
{
    uvec4 od = uvec4(p.out_dims0, p.out_dims1, p.out_dims2, p.out_dims3);
    uvec4 as = uvec4(p.a_str0, p.a_str1, p.a_str2, p.a_str3);
    uvec4 bs = uvec4(p.b_str0, p.b_str1, p.b_str2, p.b_str3);
    uvec4 ws = WHICH == 0 ? as : bs;
    uvec4 os = uvec4(od.y * od.z * od.w, od.z * od.w, od.w, 1u);
    bvec4 bc = bvec4(uvec4(equal(ws, uvec4(0))) & uvec4(greaterThan(od, uvec4(1))));
    uvec4 rd = mix(uvec4(1), od, bc); /* the broadcast (summed) dims */
    uvec4 gd = mix(od, uvec4(1), bc); /* the operand's own dims */
    uint nred = rd.x * rd.y * rd.z * rd.w;

    const uint per_group = gl_WorkGroupSize.x / T;
    uint tid = gl_LocalInvocationID.x;
    uint lane = tid % T, slot = tid / T;
    uint blocks = (p.n + per_group - 1) / per_group;
    /* Digits advance by carries: the gradient element over the blocks, the broadcast
     * position over the lanes. */
    uint e = gl_WorkGroupID.x * per_group + slot;
    uvec4 gc = vkt_digits(e, gd), gstep = vkt_digits(gl_NumWorkGroups.x * per_group, gd);
    uvec4 rc0 = vkt_digits(lane, rd), rstep = vkt_digits(T, rd);
    /* With a single summed dim k, each of the T-strided steps moves T along k. */
    uvec4 many = uvec4(greaterThan(rd, uvec4(1)));
    bool single = many.x + many.y + many.z + many.w <= 1;
    uvec4 pick = many; /* one-hot k (all 0 when nothing is summed) */
    uint step_a = T * (pick.x * as.x + pick.y * as.y + pick.z * as.z + pick.w * as.w);
    uint step_b = T * (pick.x * bs.x + pick.y * bs.y + pick.z * bs.z + pick.w * bs.w);
    uint step_o = T * (pick.x * os.x + pick.y * os.y + pick.z * os.z + pick.w * os.w);
    for (uint blk = gl_WorkGroupID.x; blk < blocks; blk += gl_NumWorkGroups.x) {
        float acc = 0.0;
        precise float comp = 0.0; /* Kahan compensation */
        if (e < p.n && single) {
            /* One summed dim: the positions advance by fixed strides. */
            uvec4 c = gc + rc0;
            uint ai = c.x * as.x + c.y * as.y + c.z * as.z + c.w * as.w;
            uint bi = c.x * bs.x + c.y * bs.y + c.z * bs.z + c.w * bs.w;
            uint oi = c.x * os.x + c.y * os.y + c.z * os.z + c.w * os.w;
            for (uint r = lane; r < nred; r += T) {
                precise float v = term(ai, bi, oi) - comp;
                precise float sum = acc + v;
                comp = (sum - acc) - v;
                acc = sum;
                ai += step_a;
                bi += step_b;
                oi += step_o;
            }
        } else if (e < p.n) {
            uvec4 rc = rc0;
            for (uint r = lane; r < nred; r += T) {
                uvec4 c = gc + rc;
                precise float v = term(c.x * as.x + c.y * as.y + c.z * as.z + c.w * as.w,
                                       c.x * bs.x + c.y * bs.y + c.z * bs.z + c.w * bs.w,
                                       c.x * os.x + c.y * os.y + c.z * os.z + c.w * os.w) -
                                  comp;
                precise float sum = acc + v;
                comp = (sum - acc) - v;
                acc = sum;
                rc = vkt_digits_add(rc, rstep, rd);
            }
        }
        if (T > 1) {
            partial[tid] = acc;
            barrier();
            for (uint s = T / 2; s > 0; s >>= 1) {
                if (lane < s)
                    partial[tid] += partial[tid + s];
                barrier();
            }
            acc = partial[tid];
            barrier(); /* everyone has read before the next block overwrites */
        }
        if (e < p.n && lane == 0)
            g[p.y_off + e] = acc; /* the operand is contiguous: its index is e */
        e += gl_NumWorkGroups.x * per_group;
        gc = vkt_digits_add(gc, gstep, gd);
    }
}
