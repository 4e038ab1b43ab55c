/*
 * Backward of layer normalization (layernorm.comp) from the saved stats [rows, 2] =
 * (mean, rstd). With xhat = (x - mean) * rstd and g = dy * gamma, per row:
 *   dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
 * and per column: dgamma = sum over rows of dy * xhat, dbeta = sum over rows of dy.
 * Outputs: out = new (beta 0, old contents not read) or new + beta * out.
 *
 * One dispatch, two roles chosen by workgroup (uniform within a workgroup, so the
 * barriers below are legal): workgroups [0, row_groups) take rows for dx, TR threads per
 * row; the others take columns (or column quads when VEC4) for dgamma and dbeta, TC
 * threads per column walking every TC-th row, the columns of a workgroup adjacent so
 * that its loads of a row are contiguous. Partial sums meet in a fixed tree in shared
 * memory: the results do not depend on timing. No float atomics.
 */
#version 450
#extension GL_GOOGLE_include_directive : require
#include "push_norm.h"
#include "spec.h"

layout(local_size_x_id = SPEC_WG) in;
layout(constant_id = SPEC_LAYERNORM_BACKWARD_TR) const uint TR = 1;
layout(constant_id = SPEC_LAYERNORM_BACKWARD_TC) const uint TC = 1;
layout(constant_id = SPEC_LAYERNORM_BACKWARD_VEC4) const bool VEC4 = false;
layout(constant_id = SPEC_LAYERNORM_BACKWARD_HAS_DX) const bool HAS_DX = true;
layout(constant_id = SPEC_LAYERNORM_BACKWARD_HAS_DG) const bool HAS_DG = true;
layout(constant_id = SPEC_LAYERNORM_BACKWARD_HAS_DB) const bool HAS_DB = true;

layout(push_constant) uniform Push { push_layernorm p; };
layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 0) readonly buffer X4 { vec4 x4[]; };
layout(std430, set = 0, binding = 1) readonly buffer G { float g[]; };
layout(std430, set = 0, binding = 1) readonly buffer G4 { vec4 g4[]; };
layout(std430, set = 0, binding = 2) readonly buffer S { float st[]; };
layout(std430, set = 0, binding = 3) readonly buffer DY { float dy[]; };
layout(std430, set = 0, binding = 3) readonly buffer DY4 { vec4 dy4[]; };
layout(std430, set = 0, binding = 4) buffer DX { float dx[]; };
layout(std430, set = 0, binding = 4) buffer DX4 { vec4 dx4[]; };
layout(std430, set = 0, binding = 5) buffer DG { float dg[]; };
layout(std430, set = 0, binding = 5) buffer DG4 { vec4 dg4[]; };
layout(std430, set = 0, binding = 6) buffer DB { float db[]; };
layout(std430, set = 0, binding = 6) buffer DB4 { vec4 db4[]; };

shared vec4 ra[gl_WorkGroupSize.x];
shared vec4 rb[gl_WorkGroupSize.x];

/* Sums (a, b) over the n threads tid = first + i * stride (i < n, n a power of 2) in a
 * fixed tree; every one of them gets the totals. Called by the whole workgroup. */
void group_sums(inout vec4 a, inout vec4 b, uint tid, uint i, uint n, uint stride)
{
    if (n == 1)
        return;
    ra[tid] = a;
    rb[tid] = b;
    barrier();
    for (uint h = n / 2; h > 0; h >>= 1) {
        if (i < h) {
            ra[tid] += ra[tid + h * stride];
            rb[tid] += rb[tid + h * stride];
        }
        barrier();
    }
    a = ra[tid - i * stride];
    b = rb[tid - i * stride];
    barrier(); /* all have read before the next use overwrites */
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
        float mean = 0.0, rstd = 0.0;
        vec4 sg = vec4(0.0), sgx = vec4(0.0); /* sums of g and g * xhat (in .x if scalar) */
        if (live) {
            mean = st[p.s_off + 2 * row];
            rstd = st[p.s_off + 2 * row + 1];
            for (uint k = lane; k < units; k += TR) {
                if (VEC4) {
                    vec4 xh = (x4[p.x_off / 4 + base + k] - mean) * rstd;
                    vec4 gg = dy4[p.dy_off / 4 + base + k] * g4[p.g_off / 4 + k];
                    sg += gg;
                    sgx += gg * xh;
                } else {
                    float xh = (x[p.x_off + base + k] - mean) * rstd;
                    float gg = dy[p.dy_off + base + k] * g[p.g_off + k];
                    sg.x += gg;
                    sgx.x += gg * xh;
                }
            }
        }
        group_sums(sg, sgx, tid, lane, TR, 1);
        float mg = ((sg.x + sg.y) + (sg.z + sg.w)) * inv_cols;
        float mgx = ((sgx.x + sgx.y) + (sgx.z + sgx.w)) * inv_cols;
        if (!live)
            continue;
        for (uint k = lane; k < units; k += TR) {
            if (VEC4) {
                uint i = base + k;
                vec4 xh = (x4[p.x_off / 4 + i] - mean) * rstd;
                vec4 gg = dy4[p.dy_off / 4 + i] * g4[p.g_off / 4 + k];
                vec4 v = rstd * (gg - mg - xh * mgx);
                dx4[p.dx_off / 4 + i] = p.beta_x != 0.0 ? v + p.beta_x * dx4[p.dx_off / 4 + i] : v;
            } else {
                uint i = base + k;
                float xh = (x[p.x_off + i] - mean) * rstd;
                float gg = dy[p.dy_off + i] * g[p.g_off + k];
                float v = rstd * (gg - mg - xh * mgx);
                dx[p.dx_off + i] = p.beta_x != 0.0 ? v + p.beta_x * dx[p.dx_off + i] : v;
            }
        }
    }
}

/* dgamma, dbeta of the column blocks of workgroup `wid` of `ngroups` (column role). */
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
        vec4 sgx = vec4(0.0), sd = vec4(0.0); /* sums of dy * xhat and of dy */
        if (live) {
            for (uint r = lane; r < p.rows; r += TC) {
                float mean = st[p.s_off + 2 * r], rstd = st[p.s_off + 2 * r + 1];
                uint i = r * units + u;
                if (VEC4) {
                    vec4 d = dy4[p.dy_off / 4 + i];
                    sgx += d * ((x4[p.x_off / 4 + i] - mean) * rstd);
                    sd += d;
                } else {
                    float d = dy[p.dy_off + i];
                    sgx.x += d * ((x[p.x_off + i] - mean) * rstd);
                    sd.x += d;
                }
            }
        }
        group_sums(sgx, sd, tid, lane, TC, per_group);
        if (!live || lane != 0)
            continue;
        if (VEC4) {
            uint ig = p.dg_off / 4 + u, ib = p.db_off / 4 + u;
            if (HAS_DG)
                dg4[ig] = p.beta_g != 0.0 ? sgx + p.beta_g * dg4[ig] : sgx;
            if (HAS_DB)
                db4[ib] = p.beta_b != 0.0 ? sd + p.beta_b * db4[ib] : sd;
        } else {
            if (HAS_DG)
                dg[p.dg_off + u] = p.beta_g != 0.0 ? sgx.x + p.beta_g * dg[p.dg_off + u] : sgx.x;
            if (HAS_DB)
                db[p.db_off + u] = p.beta_b != 0.0 ? sd.x + p.beta_b * db[p.db_off + u] : sd.x;
        }
    }
}

void main()
{
    uint wid = gl_WorkGroupID.x, rg = p.row_groups;
    if (HAS_DX && wid < rg)
        rows_role(wid, rg);
    else if (HAS_DG || HAS_DB)
        cols_role(wid - rg, gl_NumWorkGroups.x - rg);
}
