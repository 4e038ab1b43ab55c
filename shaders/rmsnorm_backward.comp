/*
 * Backward of RMS normalization (rmsnorm.comp) from the saved rstd [rows]. With
 * xhat = x * rstd and g = dy * gamma, per row (cols elements):
 *   dx = rstd * (g - xhat * mean(g * xhat))
 * (the layernorm formula without the mean(g) term: no mean was subtracted), and per
 * column: dgamma = sum over rows of dy * xhat. No dbeta: RMSNorm has no beta.
 * Outputs: out = new (beta 0, old contents not read) or new + beta * out.
 *
 * One dispatch, two roles chosen by workgroup (uniform within a workgroup, so the
 * barriers below are legal), laid out as layernorm_backward.comp: workgroups
 * [0, row_groups) take rows for dx, TR threads per row; the others take columns (or
 * column quads when VEC4) for dgamma, TC threads per column walking every TC-th row, the
 * columns of a workgroup adjacent so that its loads of a row are contiguous. Partial sums
 * meet in a fixed tree in shared memory: the results do not depend on timing. No float
 * atomics.
 */
#version 450
#extension GL_GOOGLE_include_directive : require
#include "push_norm.h"
#include "spec.h"

layout(local_size_x_id = SPEC_WG) in;
layout(constant_id = SPEC_RMSNORM_BACKWARD_TR) const uint TR = 1;
layout(constant_id = SPEC_RMSNORM_BACKWARD_TC) const uint TC = 1;
layout(constant_id = SPEC_RMSNORM_BACKWARD_VEC4) const bool VEC4 = false;
layout(constant_id = SPEC_RMSNORM_BACKWARD_HAS_DX) const bool HAS_DX = true;
layout(constant_id = SPEC_RMSNORM_BACKWARD_HAS_DG) const bool HAS_DG = true;

layout(push_constant) uniform Push { push_rmsnorm p; };
layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 0) readonly buffer X4 { vec4 x4[]; };
layout(std430, set = 0, binding = 1) readonly buffer G { float g[]; };
layout(std430, set = 0, binding = 1) readonly buffer G4 { vec4 g4[]; };
layout(std430, set = 0, binding = 2) readonly buffer R { float rs[]; };
layout(std430, set = 0, binding = 3) readonly buffer DY { float dy[]; };
layout(std430, set = 0, binding = 3) readonly buffer DY4 { vec4 dy4[]; };
layout(std430, set = 0, binding = 4) buffer DX { float dx[]; };
layout(std430, set = 0, binding = 4) buffer DX4 { vec4 dx4[]; };
layout(std430, set = 0, binding = 5) buffer DG { float dg[]; };
layout(std430, set = 0, binding = 5) buffer DG4 { vec4 dg4[]; };

shared vec4 red[gl_WorkGroupSize.x];

/* Sums a over the n threads tid = first + i * stride (i < n, n a power of 2) in a fixed
 * tree; every one of them gets the total. Called by the whole workgroup. */
vec4 group_sum(vec4 a, uint tid, uint i, uint n, uint stride)
{
    if (n == 1)
        return a;
    red[tid] = a;
    barrier();
    for (uint h = n / 2; h > 0; h >>= 1) {
        if (i < h)
            red[tid] += red[tid + h * stride];
        barrier();
    }
    a = red[tid - i * stride];
    barrier(); /* all have read before the next use overwrites */
    return a;
}

/* dx of the rows of workgroup `wid` of `ngroups` (row role). */
void rows_role(uint wid, uint ngroups)
{
    const uint per_group = gl_WorkGroupSize.x / TR;
    uint tid = gl_LocalInvocationID.x;
    uint lane = tid % TR, slot = tid / TR;
    uint units = VEC4 ? p.cols / 4 : p.cols;
    uint blocks = (p.rows + per_group - 1) / per_group;
    float inv_cols = 1.0 / float(p.cols);
    for (uint blk = wid; blk < blocks; blk += ngroups) {
        uint row = blk * per_group + slot;
        bool live = row < p.rows;
        uint base = row * units;
        float rstd = 0.0;
        vec4 sgx = vec4(0.0); /* sum of g * xhat (in .x if scalar) */
        if (live) {
            rstd = rs[p.r_off + row];
            for (uint k = lane; k < units; k += TR) {
                if (VEC4)
                    sgx += dy4[p.dy_off / 4 + base + k] * g4[p.g_off / 4 + k] *
                           (x4[p.x_off / 4 + base + k] * rstd);
                else
                    sgx.x += dy[p.dy_off + base + k] * g[p.g_off + k] *
                             (x[p.x_off + base + k] * rstd);
            }
        }
        sgx = group_sum(sgx, tid, lane, TR, 1);
        float mgx = ((sgx.x + sgx.y) + (sgx.z + sgx.w)) * inv_cols;
        if (!live)
            continue;
        for (uint k = lane; k < units; k += TR) {
            uint i = base + k;
            if (VEC4) {
                vec4 xh = x4[p.x_off / 4 + i] * rstd;
                vec4 v = rstd * (dy4[p.dy_off / 4 + i] * g4[p.g_off / 4 + k] - xh * mgx);
                dx4[p.dx_off / 4 + i] = p.beta_x != 0.0 ? v + p.beta_x * dx4[p.dx_off / 4 + i] : v;
            } else {
                float xh = x[p.x_off + i] * rstd;
                float v = rstd * (dy[p.dy_off + i] * g[p.g_off + k] - xh * mgx);
                dx[p.dx_off + i] = p.beta_x != 0.0 ? v + p.beta_x * dx[p.dx_off + i] : v;
            }
        }
    }
}

/* dgamma of the column blocks of workgroup `wid` of `ngroups` (column role). */
void cols_role(uint wid, uint ngroups)
{
    const uint per_group = gl_WorkGroupSize.x / TC;
    uint tid = gl_LocalInvocationID.x;
    uint slot = tid % per_group, lane = tid / per_group;
    uint units = VEC4 ? p.cols / 4 : p.cols;
    uint blocks = (units + per_group - 1) / per_group;
    for (uint blk = wid; blk < blocks; blk += ngroups) {
        uint u = blk * per_group + slot;
        bool live = u < units;
        vec4 sgx = vec4(0.0); /* sum of dy * xhat */
        if (live) {
            for (uint r = lane; r < p.rows; r += TC) {
                float rstd = rs[p.r_off + r];
                uint i = r * units + u;
                if (VEC4)
                    sgx += dy4[p.dy_off / 4 + i] * (x4[p.x_off / 4 + i] * rstd);
                else
                    sgx.x += dy[p.dy_off + i] * (x[p.x_off + i] * rstd);
            }
        }
        sgx = group_sum(sgx, tid, lane, TC, per_group);
        if (!live || lane != 0)
            continue;
        if (VEC4) {
            uint ig = p.dg_off / 4 + u;
            dg4[ig] = p.beta_g != 0.0 ? sgx + p.beta_g * dg4[ig] : sgx;
        } else {
            dg[p.dg_off + u] = p.beta_g != 0.0 ? sgx.x + p.beta_g * dg[p.dg_off + u] : sgx.x;
        }
    }
}

void main()
{
    uint wid = gl_WorkGroupID.x, rg = p.row_groups;
    if (HAS_DX && wid < rg)
        rows_role(wid, rg);
    else if (HAS_DG)
        cols_role(wid - rg, gl_NumWorkGroups.x - rg);
}
