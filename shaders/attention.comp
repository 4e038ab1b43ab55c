/*
 * Fused causal multi-head self-attention: the forward and the two backward passes,
 * picked by the specialization constant PASS (dispatch: engine/kernels/attention.c).
 *
 * Shapes (push_attention.h): qkv [b, t, 3 H D] (q, k, v of head h in columns h D.., then
 * H D + h D.., then 2 H D + h D..), y / dy [b, t, H D], probs [b, H, t, t], workspace:
 * dP [b, H, t, t] then the row sums D_i [b, H, t].
 *
 *   PASS 0 (forward, one query row i per lane): s_ij = q_i . k_j / sqrt(D) for j <= i,
 *          online softmax (running max m, sum l, accumulator of drop(e_ij) v_j, rescaled
 *          when m grows); the raw scores go to probs, and a last pass over the row turns
 *          them into p_ij = exp(s_ij - m) / l (0 for j > i). y_i = acc / l.
 *   PASS 1 (backward, query rows): dP_ij = (dy_i . v_j) mask_ij / (1 - p_drop) into the
 *          workspace, D_i = sum_j p_ij dP_ij, dq_i = sum_j p_ij (dP_ij - D_i) k_j / sqrt(D)
 *          computed as (sum_j p_ij dP_ij k_j - D_i sum_j p_ij k_j) / sqrt(D) so that one
 *          walk over the keys suffices.
 *   PASS 2 (backward, key rows j): dS_ij = p_ij (dP_ij - D_i), dk_j = sum_{i>=j} dS_ij q_i
 *          / sqrt(D), dv_j = sum_{i>=j} drop(p_ij) dy_i.
 *
 * Work goes in blocks of 8 consecutive rows of one (sequence, head), one row per lane.
 * Every lane of a block walks the same keys (queries in PASS 2), so the row it needs
 * from qkv / dy at each step (k_j and v_j, or q_i and dy_i: 2 D floats) is the same for
 * all 8 lanes. SHUFFLE (lavapipe: a workgroup of 8 is one subgroup, one SIMD vector):
 * lane l loads chunk l of that pair (one vec4 with VEC) and subgroupShuffle with a
 * constant lane hands every value to all lanes, one storage load per lane instead of
 * 2 D / 4 (a storage load is a loop over the lanes there). Without SHUFFLE every lane
 * loads the pair itself (any device). The loops over keys / queries are uniform in a
 * block (bounds from the block, not the lane), as subgroupShuffle needs; lanes past
 * row t - 1 compute on a clamped row and store nothing.
 *
 * VEC: D % 4 == 0 and the qkv, y / dy and dqkv views read as vec4s. VEC_T: t % 4 == 0
 * and probs / workspace views read as vec4s, so a lane loads and stores 4 keys of its
 * probs / dP row at once. Dropout (push constant `dropout`) keeps element
 * idx = (bh t + i) t + j iff dropout_kept(key, drop_off + idx, threshold) (dropout_hash.h),
 * with the key chained from the step (read from ctrl at run time) and the seed;
 * drop_off = b0 H t t moves sequence bb to the global b0 + bb
 * (uint arithmetic: modulo 2^32, as the C references).
 * All sums run in a fixed order in one invocation: results are bitwise reproducible.
 */
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#include "ctrl.h"
#include "dropout_hash.h"
#include "push_attention.h"
#include "spec.h"

layout(local_size_x_id = SPEC_WG) in;
layout(constant_id = SPEC_ATTENTION_PASS) const uint PASS = 0;
layout(constant_id = SPEC_ATTENTION_D) const uint D = 16;
layout(constant_id = SPEC_ATTENTION_SHUFFLE) const bool SHUFFLE = false;
layout(constant_id = SPEC_ATTENTION_VEC) const bool VEC = false;
layout(constant_id = SPEC_ATTENTION_VEC_T) const bool VEC_T = false;

/* SHUFFLE: the row pair in chunks of W floats, 8 chunks (one per lane) per round */
const uint W = VEC ? 4u : 1u;
const uint NCH = 2u * D / W;
const uint ROUNDS = SHUFFLE ? (NCH + 7u) / 8u : 1u;

layout(push_constant) uniform Push { push_attention p; };

/* 0: qkv; 1: y (forward) / dy; 2: probs; 3: ctrl; 4: dqkv; 5: workspace. Bindings a
 * pass does not use are bound by the host to a range it reads anyway. */
layout(std430, set = 0, binding = 0) readonly buffer QKV { float qkv[]; };
layout(std430, set = 0, binding = 0) readonly buffer QKV4 { vec4 qkv4[]; };
layout(std430, set = 0, binding = 1) buffer Y { float y[]; };
layout(std430, set = 0, binding = 1) buffer Y4 { vec4 y4[]; };
layout(std430, set = 0, binding = 2) buffer P { float probs[]; };
layout(std430, set = 0, binding = 2) buffer P4 { vec4 probs4[]; };
layout(std430, set = 0, binding = 3) readonly buffer C { uint ctrl[]; };
layout(std430, set = 0, binding = 4) buffer G { float dqkv[]; };
layout(std430, set = 0, binding = 4) buffer G4 { vec4 dqkv4[]; };
layout(std430, set = 0, binding = 5) buffer WS { float ws[]; };
layout(std430, set = 0, binding = 5) buffer WS4 { vec4 ws4[]; };

uint lane;
bool drop;
uint drop_key;
vec4 buf[ROUNDS]; /* SHUFFLE: this lane's chunks of the current row pair */
uint pair_a, pair_b; /* without SHUFFLE: where the pair starts */

uint drop_base; /* the mask index of element 0: drop_off + the row base's (drop_row) */
bool kept(uint idx) { return dropout_kept(drop_key, drop_base + idx, p.threshold); }

/* The mask index of element 0 from the push constants and the control block's row base. */
uint drop_base_of()
{
    uint row0 = p.drop_row != 0u ? ctrl[p.c_off + uint(CTRL_ROW0 - CTRL_STEP)] : 0u;
    return p.drop_off + row0 * p.drop_row;
}

/* Chunk c of the pair (a[0..D), b[0..D)): element offsets a and b are in qkv, except b
 * in dy for PASS 2. */
vec4 chunk(uint c, uint a, uint b)
{
    const uint half_ = D / W;
    bool second = c >= half_;
    uint e = (second ? b : a) + (second ? c - half_ : c) * W;
    bool from_y = PASS == 2u && second;
    if (VEC)
        return from_y ? y4[e / 4u] : qkv4[e / 4u];
    return vec4(from_y ? y[e] : qkv[e], 0.0, 0.0, 0.0);
}

/* SHUFFLE: loads the pair into buf, lane l holding chunks l, l + 8, ... Otherwise only
 * notes where it is: get() reads it from memory (GPUs cache it). */
void fetch(uint a, uint b)
{
    pair_a = a;
    pair_b = b;
    if (SHUFFLE)
        [[unroll]] for (uint r = 0u; r < ROUNDS; r++)
            buf[r] = chunk(min(8u * r + lane, NCH - 1u), a, b);
}

/* Element e (< 2 D) of the fetched pair. e is a constant once the loops around are
 * unrolled, and so is the lane a shuffle reads (lavapipe then emits a splat). */
float get(uint e)
{
    if (SHUFFLE) {
        uint c = e / W;
        return subgroupShuffle(buf[c / 8u], c % 8u)[e % W];
    }
    if (e < D)
        return qkv[pair_a + e];
    return PASS == 2u ? y[pair_b + e - D] : qkv[pair_b + e - D];
}

/* D floats of a row from element offset o (VEC: o % 4 == 0). */
#define LOAD_ROW(arr, arr4, o, dst, mul)                                             \
    do {                                                                            \
        if (VEC) {                                                                  \
            [[unroll]] for (uint c4 = 0u; c4 < D / 4u; c4++) {                      \
                vec4 v4_ = arr4[(o) / 4u + c4] * (mul);                             \
                [[unroll]] for (uint k_ = 0u; k_ < 4u; k_++)                        \
                    dst[4u * c4 + k_] = v4_[k_];                                    \
            }                                                                       \
        } else {                                                                    \
            [[unroll]] for (uint c_ = 0u; c_ < D; c_++)                             \
                dst[c_] = arr[(o) + c_] * (mul);                                    \
        }                                                                           \
    } while (false)

/* arr[o + c] = src[c] * mul (+ beta * arr[o + c] when beta != 0). */
#define STORE_ROW(arr, arr4, o, src, mul, beta)                                      \
    do {                                                                            \
        if (VEC) {                                                                  \
            [[unroll]] for (uint c4 = 0u; c4 < D / 4u; c4++) {                      \
                vec4 v4_;                                                           \
                [[unroll]] for (uint k_ = 0u; k_ < 4u; k_++)                        \
                    v4_[k_] = src[4u * c4 + k_] * (mul);                            \
                uint at_ = (o) / 4u + c4;                                           \
                arr4[at_] = (beta) != 0.0 ? v4_ + (beta) * arr4[at_] : v4_;         \
            }                                                                       \
        } else {                                                                    \
            [[unroll]] for (uint c_ = 0u; c_ < D; c_++) {                           \
                float v_ = src[c_] * (mul);                                         \
                arr[(o) + c_] = (beta) != 0.0 ? v_ + (beta) * arr[(o) + c_] : v_;   \
            }                                                                       \
        }                                                                           \
    } while (false)

void main()
{
    uint group = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    uint block;
    if (SHUFFLE) { /* the host sets a workgroup of 8: one subgroup */
        lane = gl_SubgroupInvocationID;
        block = group;
    } else {
        lane = gl_LocalInvocationID.x % 8u;
        block = group * (gl_WorkGroupSize.x / 8u) + gl_LocalInvocationID.x / 8u;
    }
    if (block >= p.blocks)
        return; /* the whole block leaves together */
    uint t = p.t, H = p.heads, HD = H * D;
    uint bh = block / p.blocks_per_head;        /* bb * H + h */
    uint r0 = (block - bh * p.blocks_per_head) * 8u;
    uint row = r0 + lane;                       /* query (PASS 0, 1) or key (PASS 2) */
    bool valid = row < t;
    uint rc = min(row, t - 1u);
    uint bb = bh / H, h = bh - bb * H;
    uint seq = bb * t;                          /* first row of this sequence in qkv / y */
    uint qcol = p.qkv_off + h * D;              /* q of position r at qcol + (seq + r) 3 HD */
    uint ycol = p.y_off + h * D;
    uint plane = bh * t;                        /* first probs row of this head */
    drop = p.dropout != 0u;
    if (drop) {
        uint step_lo = ctrl[p.c_off], step_hi = ctrl[p.c_off + 1u];
        drop_key = dropout_key(step_lo, step_hi, p.seed_lo, p.seed_hi);
        drop_base = drop_base_of();
    }

    if (PASS == 0u) {
        float q[D], acc[D];
        LOAD_ROW(qkv, qkv4, qcol + (seq + rc) * 3u * HD, q, p.scale);
        [[unroll]] for (uint c = 0u; c < D; c++)
            acc[c] = 0.0;
        float m = -3.0e38, l = 0.0;             /* running max and sum of exp(s - m) */
        uint jend = min(r0 + 8u, t);            /* keys any lane of the block needs */
        uint prow = p.p_off + (plane + rc) * t; /* this lane's probs row */
        for (uint jq = 0u; jq < (jend + 3u) / 4u; jq++) {
            vec4 sq = vec4(0.0);
            [[unroll]] for (uint u = 0u; u < 4u; u++) {
                uint j = 4u * jq + u;
                if (j < jend) { /* uniform in the block */
                    uint kat = qcol + (seq + j) * 3u * HD + HD;
                    fetch(kat, kat + HD);
                    float s = 0.0;
                    [[unroll]] for (uint c = 0u; c < D; c++)
                        s += q[c] * get(c);
                    bool on = j <= row;
                    float mn = on ? max(m, s) : m;
                    float corr = exp(m - mn);
                    float e = on ? exp(s - mn) : 0.0;
                    float w = e;
                    if (drop)
                        w = kept((plane + row) * t + j) ? e * p.drop_scale : 0.0;
                    l = l * corr + e;
                    [[unroll]] for (uint c = 0u; c < D; c++)
                        acc[c] = acc[c] * corr + w * get(D + c);
                    m = mn;
                    sq[u] = s;
                    if (!VEC_T && valid && on)
                        probs[prow + j] = s;
                }
            }
            if (VEC_T && valid) /* t % 4 == 0: the quad lies inside the row */
                probs4[prow / 4u + jq] = sq;
        }
        if (!valid)
            return;
        float inv = 1.0 / l;
        for (uint jq = 0u; jq < (t + 3u) / 4u; jq++) {
            vec4 pv = vec4(0.0);
            if (4u * jq <= row) {
                vec4 sq = vec4(0.0);
                if (VEC_T) {
                    sq = probs4[prow / 4u + jq];
                } else {
                    [[unroll]] for (uint u = 0u; u < 4u; u++)
                        if (4u * jq + u <= row)
                            sq[u] = probs[prow + 4u * jq + u];
                }
                [[unroll]] for (uint u = 0u; u < 4u; u++)
                    pv[u] = 4u * jq + u <= row ? exp(sq[u] - m) * inv : 0.0;
            }
            if (VEC_T) {
                probs4[prow / 4u + jq] = pv;
            } else {
                [[unroll]] for (uint u = 0u; u < 4u; u++)
                    if (4u * jq + u < t)
                        probs[prow + 4u * jq + u] = pv[u];
            }
        }
        STORE_ROW(y, y4, ycol + (seq + row) * HD, acc, inv, 0.0);
    } else if (PASS == 1u) {
        float dy[D], ga[D], gb[D];              /* ga = sum p dP k, gb = sum p k */
        LOAD_ROW(y, y4, ycol + (seq + rc) * HD, dy, 1.0);
        [[unroll]] for (uint c = 0u; c < D; c++) {
            ga[c] = 0.0;
            gb[c] = 0.0;
        }
        float dsum = 0.0;                       /* D_i = sum_j p_ij dP_ij */
        uint jend = min(r0 + 8u, t);
        uint prow = (plane + rc) * t;           /* probs / dP row, without offsets */
        for (uint jq = 0u; jq < (jend + 3u) / 4u; jq++) {
            vec4 pq = vec4(0.0), dq = vec4(0.0);
            if (VEC_T && valid)
                pq = probs4[(p.p_off + prow) / 4u + jq];
            [[unroll]] for (uint u = 0u; u < 4u; u++) {
                uint j = 4u * jq + u;
                if (j < jend) { /* uniform in the block */
                    uint kat = qcol + (seq + j) * 3u * HD + HD;
                    fetch(kat, kat + HD);
                    float dpv = 0.0;
                    [[unroll]] for (uint c = 0u; c < D; c++)
                        dpv += dy[c] * get(D + c);
                    bool on = valid && j <= row;
                    float pij = 0.0;
                    if (on)
                        pij = VEC_T ? pq[u] : probs[p.p_off + prow + j];
                    float dp = on ? dpv : 0.0;
                    if (drop)
                        dp = on && kept((plane + row) * t + j) ? dpv * p.drop_scale : 0.0;
                    float pd = pij * dp;
                    dsum += pd;
                    [[unroll]] for (uint c = 0u; c < D; c++) {
                        float kc = get(c);
                        ga[c] += pd * kc;
                        gb[c] += pij * kc;
                    }
                    dq[u] = dp;
                    if (!VEC_T && on)
                        ws[p.ws_off + prow + j] = dp;
                }
            }
            if (VEC_T && valid)
                ws4[(p.ws_off + prow) / 4u + jq] = dq;
        }
        if (!valid)
            return;
        [[unroll]] for (uint c = 0u; c < D; c++)
            ga[c] -= dsum * gb[c];
        STORE_ROW(dqkv, dqkv4, p.dqkv_off + h * D + (seq + row) * 3u * HD, ga, p.scale, p.beta);
        ws[p.ws_off + p.b * H * t * t + plane + row] = dsum;
    } else {
        float dk[D], dv[D];
        [[unroll]] for (uint c = 0u; c < D; c++) {
            dk[c] = 0.0;
            dv[c] = 0.0;
        }
        uint dbase = p.ws_off + p.b * H * t * t + plane; /* D_i of this head */
        for (uint i = r0; i < t; i++) { /* queries that see any key of the block */
            fetch(qcol + (seq + i) * 3u * HD, ycol + (seq + i) * HD);
            bool on = valid && i >= row;
            uint at = (plane + i) * t + row;
            float pij = 0.0, dp = 0.0;
            if (on) {
                pij = probs[p.p_off + at];
                dp = ws[p.ws_off + at];
            }
            float ds = pij * (dp - ws[dbase + i]);
            float pd = pij;
            if (drop)
                pd = on && kept(at) ? pij * p.drop_scale : 0.0;
            [[unroll]] for (uint c = 0u; c < D; c++) {
                dk[c] += ds * get(c);
                dv[c] += pd * get(D + c);
            }
        }
        if (!valid)
            return;
        uint o = p.dqkv_off + h * D + (seq + row) * 3u * HD + HD;
        STORE_ROW(dqkv, dqkv4, o, dk, p.scale, p.beta);
        STORE_ROW(dqkv, dqkv4, o + HD, dv, 1.0, p.beta);
    }
}
