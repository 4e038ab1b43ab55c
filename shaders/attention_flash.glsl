/*
 * attention_flash.glsl - fused causal multi-head self-attention for GPUs, forward and
 * backward, with the softmax taken online over tiles of keys in shared memory: no
 * [t, t] array is ever stored (dispatch: engine/kernels/attention_flash.c; tiles and grid:
 * engine/kernels/attention_plan.c). The pass is the specialization constant PASS:
 *
 *   PASS 0 (forward; a workgroup per block of query rows): for each tile of keys
 *          (TILE rows of k and v staged in shared memory), scores s_ij = q_i . k_j /
 *          sqrt(D) for j <= i, a running max m_i and sum l_i of exp(s_ij - m_i), and an
 *          accumulator of drop(exp(s_ij - m_i)) v_j rescaled by exp(m_old - m_new) when
 *          the max grows. y_i = acc / l_i; saved: lse_i = m_i + log(l_i) [b, H, t].
 *   PASS 1 (backward by query rows): D_i = dy_i . y_i (= sum_j p_ij dP_ij, dropout
 *          included) into the workspace [b, H, t]; then over key tiles p_ij =
 *          exp(s_ij - lse_i), dP_ij = (dy_i . v_j) drop_ij, dS_ij = p_ij (dP_ij - D_i),
 *          dq_i = sum_j dS_ij k_j / sqrt(D).
 *   PASS 2 (backward by key rows; after PASS 1, whose D it reads): over tiles of the
 *          queries i >= the block's first key (q / sqrt(D), dy, lse and D staged),
 *          dk_j = sum_i dS_ij q_i / sqrt(D), dv_j = sum_i drop(p_ij) dy_i.
 *
 * Every output element is written by one invocation that summed its terms in a fixed
 * order: no atomics, bitwise the same result on every run.
 *
 * Layout of the work: LANES consecutive lanes (a lane group, inside one subgroup) share
 * ROWS rows: lane g of the group holds vec4 chunks g, g + LANES, g + 2 LANES, ... of each
 * row's D values (CPL chunks) in registers: q and the output accumulator (PASS 0), q, dy
 * and dq (PASS 1), k, v, dk and dv (PASS 2). A dot product of a row with a staged row is
 * LANES partial sums added by subgroupShuffleXor (commutative adds: every lane of the
 * group gets the bitwise same sum). Per staged row a lane reads CPL vec4s from shared
 * memory and does ROWS * 4 * CPL multiply-adds per dot product or accumulation, the
 * groups of a subgroup reading the same vec4s (a broadcast) and the lanes of a group
 * neighbouring ones (no bank conflicts). A workgroup is ROWS * (threads / LANES) rows.
 * Blocks are numbered so that the heaviest ones (the last query blocks, the first key
 * blocks, which see the most of the causal triangle) start first.
 *
 * Lane identity: gl_SubgroupID * gl_SubgroupSize + gl_SubgroupInvocationID, so that a
 * lane group never straddles two subgroups whatever the driver's lane order; LANES is at
 * most 8, the smallest subgroup a GPU compiles a compute shader for (Intel), and at most
 * the device's subgroup size (the plan).
 *
 * ATTN_LOWP (attention_flash_lowp.comp, the attention_lowp_flash variant): qkv and dy are
 * fp16 or bf16 (BF16) in 16-bit storage, widened exactly to fp32 as they are loaded
 * (shaders/dtype.h); y, lse, D, dqkv and all arithmetic stay fp32, as above.
 *
 * VEC: D % 4 == 0 and the qkv, y, dy, dqkv views read as vec4s; else rows are read one
 * float at a time and padded with zeros to CPL * 4 floats (any D up to 128). Rows past
 * t are computed on a clamped row (uniform control flow for the barriers and shuffles)
 * and store nothing. Dropout: element idx = (bh t + i) t + j is kept iff
 * dropout_kept(key, drop_off + idx, threshold), the key chained from the step in ctrl
 * and the seed: exactly attention.comp's and the CPU reference's masks.
 */
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#include "ctrl.h"
#include "dropout_hash.h"
#include "push_attention.h"
#include "spec.h"

layout(local_size_x_id = SPEC_WG) in;
layout(constant_id = SPEC_FLASH_PASS) const uint PASS = 0;
layout(constant_id = SPEC_FLASH_D) const uint D = 64;
layout(constant_id = SPEC_FLASH_LANES) const uint LANES = 4;
layout(constant_id = SPEC_FLASH_ROWS) const uint ROWS = 4;
layout(constant_id = SPEC_FLASH_TILE) const uint TILE = 64;
layout(constant_id = SPEC_FLASH_VEC) const bool VEC = false;

const uint NC = (D + 3u) / 4u;             /* vec4 chunks of a row */
const uint CPL = (NC + LANES - 1u) / LANES; /* chunks per lane */
const uint CH = 4u;                         /* staged rows per online step (TILE % CH == 0) */
const uint NT = gl_WorkGroupSize.x;
const uint BLOCK = ROWS * (NT / LANES);     /* rows of a workgroup */

layout(push_constant) uniform Push { push_attention p; };

/* 0 qkv; 1 y; 2 saved (lse); 3 ctrl; 4 dqkv; 5 workspace (D); 6 dy. Bindings a pass does
 * not use are bound by the host to a range it reads anyway. */
#ifdef ATTN_LOWP
#include "dtype.h"
layout(constant_id = SPEC_FLASH_BF16) const bool BF16 = false;
layout(std430, set = 0, binding = 0) readonly buffer QKV { uint16_t qkv16[]; };
layout(std430, set = 0, binding = 6) readonly buffer DY { uint16_t dy16[]; };
#else
layout(std430, set = 0, binding = 0) readonly buffer QKV { float qkv[]; };
layout(std430, set = 0, binding = 0) readonly buffer QKV4 { vec4 qkv4[]; };
#endif
layout(std430, set = 0, binding = 1) buffer Y { float y[]; };
layout(std430, set = 0, binding = 1) buffer Y4 { vec4 y4[]; };
layout(std430, set = 0, binding = 2) buffer L { float lse[]; };
layout(std430, set = 0, binding = 3) readonly buffer C { uint ctrl[]; };
layout(std430, set = 0, binding = 4) buffer G { float dqkv[]; };
layout(std430, set = 0, binding = 4) buffer G4 { vec4 dqkv4[]; };
layout(std430, set = 0, binding = 5) buffer WS { float ws[]; };
#ifndef ATTN_LOWP
layout(std430, set = 0, binding = 6) readonly buffer DY { float dy[]; };
layout(std430, set = 0, binding = 6) readonly buffer DY4 { vec4 dy4[]; };
#endif

/* The staged tile: TILE rows of NC vec4s each (k and v; or q / sqrt(D) and dy), and for
 * PASS 2 the staged queries' lse and D. */
shared vec4 sa[TILE * NC];
shared vec4 sb[TILE * NC];
shared float sl[TILE];
shared float sd[TILE];

uint lane;       /* g: 0 .. LANES - 1 */
uint drop_key;

uint drop_base; /* the mask index of element 0: drop_off + the row base's (drop_row) */
bool kept(uint idx) { return dropout_kept(drop_key, drop_base + idx, p.threshold); }

/* The mask index of element 0 from the push constants and the control block's row base. */
uint drop_base_of()
{
    uint row0 = p.drop_row != 0u ? ctrl[p.c_off + uint(CTRL_ROW0 - CTRL_STEP)] : 0u;
    return p.drop_off + row0 * p.drop_row;
}

/* The sum over the lane group. */
float group_sum(float x)
{
    [[unroll]] for (uint o = 1u; o < LANES; o <<= 1u)
        x += subgroupShuffleXor(x, o);
    return x;
}

/* Chunk c (floats 4c..4c+3, zero past D) of the row starting at element o of binding
 * `which` (0 qkv, 1 y, 2 dy); with VEC, o % 4 == 0. */
vec4 chunk(uint which, uint o, uint c)
{
#ifdef ATTN_LOWP
    if (which != 1u) { /* 16-bit qkv or dy: element by element, widened exactly */
        vec4 h = vec4(0.0);
        [[unroll]] for (uint e = 0u; e < 4u; e++)
            if (4u * c + e < D) {
                uint i = o + 4u * c + e, u = which == 0u ? uint(qkv16[i]) : uint(dy16[i]);
                h[e] = BF16 ? dtype_bf16_value(u) : dtype_f16_value(u);
            }
        return h;
    }
    if (VEC)
        return y4[o / 4u + c];
    vec4 v = vec4(0.0);
    [[unroll]] for (uint e = 0u; e < 4u; e++)
        if (4u * c + e < D)
            v[e] = y[o + 4u * c + e];
    return v;
#else
    if (VEC) {
        uint i = o / 4u + c;
        return which == 0u ? qkv4[i] : which == 1u ? y4[i] : dy4[i];
    }
    vec4 v = vec4(0.0);
    [[unroll]] for (uint e = 0u; e < 4u; e++)
        if (4u * c + e < D) {
            uint i = o + 4u * c + e;
            v[e] = which == 0u ? qkv[i] : which == 1u ? y[i] : dy[i];
        }
    return v;
#endif
}

/* Stores vec4 chunk c of a row at element o of dqkv (or y when TO_Y): v * mul, plus beta
 * times the old value when beta != 0 (beta 0 never reads it: it may be NaN). */
void put(bool to_y, uint o, uint c, vec4 v, float mul, float beta)
{
    v *= mul;
    if (VEC) {
        uint i = o / 4u + c;
        if (to_y)
            y4[i] = v;
        else
            dqkv4[i] = beta != 0.0 ? v + beta * dqkv4[i] : v;
        return;
    }
    [[unroll]] for (uint e = 0u; e < 4u; e++)
        if (4u * c + e < D) {
            uint i = o + 4u * c + e;
            if (to_y)
                y[i] = v[e];
            else
                dqkv[i] = beta != 0.0 ? v[e] + beta * dqkv[i] : v[e];
        }
}

/* Stages rows r0 .. r0 + TILE - 1 of one (sequence, head) in sa and sb: from qkv column
 * block a (0 q, 1 k, 2 v) into sa scaled by sa_mul, and from qkv block b (or dy when
 * b == 3) into sb; zeros past row t - 1. For PASS 2 also lse and D of those rows. */
void stage(uint tid, uint seq, uint hcol, uint r0, uint a, float sa_mul, uint b, uint plane)
{
    uint t = p.t, HD = p.heads * D;
    for (uint e = tid; e < TILE * NC; e += NT) {
        uint r = e / NC, c = e - r * NC, row = r0 + r;
        vec4 va = vec4(0.0), vb = vec4(0.0);
        if (row < t) {
            uint base = p.qkv_off + hcol + (seq + row) * 3u * HD;
            va = chunk(0u, base + a * HD, c) * sa_mul;
            vb = b == 3u ? chunk(2u, p.dy_off + hcol + (seq + row) * HD, c)
                         : chunk(0u, base + b * HD, c);
        }
        sa[e] = va;
        sb[e] = vb;
    }
    if (PASS == 2u)
        for (uint r = tid; r < TILE; r += NT) {
            uint row = r0 + r;
            sl[r] = row < t ? lse[p.p_off + plane + row] : 0.0;
            sd[r] = row < t ? ws[p.ws_off + plane + row] : 0.0;
        }
}

/* Loads this lane's chunks of a row (element offset o of binding which) into dst[a]. */
#define LOAD_LANE_ROW(dst, a, which, o, mul)                                        \
    [[unroll]] for (uint u_ = 0u; u_ < CPL; u_++) {                                 \
        uint c_ = u_ * LANES + lane;                                                \
        dst[a][u_] = c_ < NC ? chunk(which, o, c_) * (mul) : vec4(0.0);             \
    }

/* s[a][k] = (this lane's chunks of x[a]) . (staged row j of arr), summed over the group */
#define DOTS(s, x, arr, j0)                                                         \
    [[unroll]] for (uint k_ = 0u; k_ < CH; k_++) {                                  \
        [[unroll]] for (uint a_ = 0u; a_ < ROWS; a_++)                              \
            s[a_][k_] = 0.0;                                                        \
        [[unroll]] for (uint u_ = 0u; u_ < CPL; u_++) {                             \
            uint c_ = u_ * LANES + lane;                                            \
            if (c_ < NC) {                                                          \
                vec4 w_ = arr[((j0) + k_) * NC + c_];                               \
                [[unroll]] for (uint a_ = 0u; a_ < ROWS; a_++)                      \
                    s[a_][k_] += dot(x[a_][u_], w_);                                \
            }                                                                       \
        }                                                                           \
        [[unroll]] for (uint a_ = 0u; a_ < ROWS; a_++)                              \
            s[a_][k_] = group_sum(s[a_][k_]);                                       \
    }

/* acc[a] += sum_k f[a][k] * (staged row j0 + k of arr), this lane's chunks */
#define ACCUMULATE(acc, f, arr, j0)                                                 \
    [[unroll]] for (uint k_ = 0u; k_ < CH; k_++)                                    \
        [[unroll]] for (uint u_ = 0u; u_ < CPL; u_++) {                             \
            uint c_ = u_ * LANES + lane;                                            \
            if (c_ < NC) {                                                          \
                vec4 w_ = arr[((j0) + k_) * NC + c_];                               \
                [[unroll]] for (uint a_ = 0u; a_ < ROWS; a_++)                      \
                    acc[a_][u_] += f[a_][k_] * w_;                                  \
            }                                                                       \
        }

void main()
{
    uint group = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    if (group >= p.blocks)
        return; /* the whole workgroup leaves together */
    uint tid = gl_SubgroupID * gl_SubgroupSize + gl_SubgroupInvocationID;
    lane = tid % LANES;
    uint t = p.t, H = p.heads, HD = H * D, nbh = p.b * H;
    /* heaviest blocks first: block index major, (sequence, head) minor */
    uint bh = group % nbh, blk = group / nbh;
    if (PASS != 2u)
        blk = p.blocks_per_head - 1u - blk;
    uint bb = bh / H, h = bh - bb * H, seq = bb * t, hcol = h * D, plane = bh * t;
    uint r0 = blk * BLOCK;                       /* first row of the block */
    uint first = r0 + (tid / LANES) * ROWS;      /* this lane group's first row */
    bool drop = p.dropout != 0u;
    if (drop) {
        drop_key = dropout_key(ctrl[p.c_off], ctrl[p.c_off + 1u], p.seed_lo, p.seed_hi);
        drop_base = drop_base_of();
    }

    if (PASS == 0u) {
        vec4 q[ROWS][CPL], acc[ROWS][CPL];
        float m[ROWS], l[ROWS];
        [[unroll]] for (uint a = 0u; a < ROWS; a++) {
            uint rc = min(first + a, t - 1u);
            LOAD_LANE_ROW(q, a, 0u, p.qkv_off + hcol + (seq + rc) * 3u * HD, p.scale);
            [[unroll]] for (uint u = 0u; u < CPL; u++)
                acc[a][u] = vec4(0.0);
            m[a] = -3.0e38;
            l[a] = 0.0;
        }
        uint kend = min(t, r0 + BLOCK);          /* keys the block's rows see */
        for (uint j0 = 0u; j0 < kend; j0 += TILE) {
            barrier();
            stage(tid, seq, hcol, j0, 1u, 1.0, 2u, plane);
            barrier();
            uint jn = min(TILE, kend - j0);
            for (uint jc = 0u; jc < jn; jc += CH) {
                float s[ROWS][CH], w[ROWS][CH];
                DOTS(s, q, sa, jc);
                [[unroll]] for (uint a = 0u; a < ROWS; a++) {
                    uint row = first + a;
                    float mn = m[a];
                    [[unroll]] for (uint k = 0u; k < CH; k++)
                        if (j0 + jc + k <= row && jc + k < jn)
                            mn = max(mn, s[a][k]);
                    float corr = exp(m[a] - mn), sum = 0.0;
                    [[unroll]] for (uint k = 0u; k < CH; k++) {
                        uint j = j0 + jc + k;
                        float e = j <= row && jc + k < jn ? exp(s[a][k] - mn) : 0.0;
                        sum += e;
                        w[a][k] = drop ? (kept((plane + row) * t + j) ? e * p.drop_scale : 0.0)
                                       : e;
                    }
                    l[a] = l[a] * corr + sum;
                    m[a] = mn;
                    [[unroll]] for (uint u = 0u; u < CPL; u++)
                        acc[a][u] *= corr;
                }
                ACCUMULATE(acc, w, sb, jc);
            }
        }
        [[unroll]] for (uint a = 0u; a < ROWS; a++) {
            uint row = first + a;
            if (row < t) {
                [[unroll]] for (uint u = 0u; u < CPL; u++) {
                    uint c = u * LANES + lane;
                    if (c < NC)
                        put(true, p.y_off + hcol + (seq + row) * HD, c, acc[a][u], 1.0 / l[a],
                            0.0);
                }
                if (lane == 0u)
                    lse[p.p_off + plane + row] = m[a] + log(l[a]);
            }
        }
    } else if (PASS == 1u) {
        vec4 q[ROWS][CPL], gy[ROWS][CPL], dq[ROWS][CPL];
        float ls[ROWS], dd[ROWS];
        [[unroll]] for (uint a = 0u; a < ROWS; a++) {
            uint row = first + a, rc = min(row, t - 1u);
            LOAD_LANE_ROW(q, a, 0u, p.qkv_off + hcol + (seq + rc) * 3u * HD, p.scale);
            LOAD_LANE_ROW(gy, a, 2u, p.dy_off + hcol + (seq + rc) * HD, 1.0);
            float part = 0.0;
            [[unroll]] for (uint u = 0u; u < CPL; u++) {
                uint c = u * LANES + lane;
                if (c < NC)
                    part += dot(gy[a][u], chunk(1u, p.y_off + hcol + (seq + rc) * HD, c));
                dq[a][u] = vec4(0.0);
            }
            dd[a] = group_sum(part);
            ls[a] = lse[p.p_off + plane + rc];
            if (row < t && lane == 0u)
                ws[p.ws_off + plane + row] = dd[a];
        }
        uint kend = min(t, r0 + BLOCK);
        for (uint j0 = 0u; j0 < kend; j0 += TILE) {
            barrier();
            stage(tid, seq, hcol, j0, 1u, 1.0, 2u, plane);
            barrier();
            uint jn = min(TILE, kend - j0);
            for (uint jc = 0u; jc < jn; jc += CH) {
                float s[ROWS][CH], dp[ROWS][CH];
                DOTS(s, q, sa, jc);
                DOTS(dp, gy, sb, jc);
                [[unroll]] for (uint a = 0u; a < ROWS; a++) {
                    uint row = first + a;
                    [[unroll]] for (uint k = 0u; k < CH; k++) {
                        uint j = j0 + jc + k;
                        bool on = j <= row && jc + k < jn;
                        float pr = on ? exp(s[a][k] - ls[a]) : 0.0;
                        float dpm = dp[a][k];
                        if (drop)
                            dpm = on && kept((plane + row) * t + j) ? dpm * p.drop_scale : 0.0;
                        s[a][k] = pr * (dpm - dd[a]); /* dS */
                    }
                }
                ACCUMULATE(dq, s, sa, jc);
            }
        }
        [[unroll]] for (uint a = 0u; a < ROWS; a++) {
            uint row = first + a;
            if (row < t)
                [[unroll]] for (uint u = 0u; u < CPL; u++) {
                    uint c = u * LANES + lane;
                    if (c < NC)
                        put(false, p.dqkv_off + hcol + (seq + row) * 3u * HD, c, dq[a][u],
                            p.scale, p.beta);
                }
        }
    } else {
        vec4 k[ROWS][CPL], v[ROWS][CPL], dk[ROWS][CPL], dv[ROWS][CPL];
        [[unroll]] for (uint a = 0u; a < ROWS; a++) {
            uint rc = min(first + a, t - 1u);
            uint base = p.qkv_off + hcol + (seq + rc) * 3u * HD;
            LOAD_LANE_ROW(k, a, 0u, base + HD, 1.0);
            LOAD_LANE_ROW(v, a, 0u, base + 2u * HD, 1.0);
            [[unroll]] for (uint u = 0u; u < CPL; u++) {
                dk[a][u] = vec4(0.0);
                dv[a][u] = vec4(0.0);
            }
        }
        /* the queries that see any key of the block: r0 .. t - 1 */
        for (uint i0 = r0; i0 < t; i0 += TILE) {
            barrier();
            stage(tid, seq, hcol, i0, 0u, p.scale, 3u, plane);
            barrier();
            uint in_ = min(TILE, t - i0);
            for (uint ic = 0u; ic < in_; ic += CH) {
                float s[ROWS][CH], dp[ROWS][CH], pd[ROWS][CH];
                DOTS(s, k, sa, ic);
                DOTS(dp, v, sb, ic);
                [[unroll]] for (uint a = 0u; a < ROWS; a++) {
                    uint key = first + a;
                    [[unroll]] for (uint c = 0u; c < CH; c++) {
                        uint i = i0 + ic + c;
                        bool on = i >= key && ic + c < in_;
                        float pr = on ? exp(s[a][c] - sl[ic + c]) : 0.0;
                        float dpm = dp[a][c], pdv = pr;
                        if (drop) {
                            bool keep = on && kept((plane + i) * t + key);
                            dpm = keep ? dpm * p.drop_scale : 0.0;
                            pdv = keep ? pr * p.drop_scale : 0.0;
                        }
                        pd[a][c] = pdv;
                        s[a][c] = pr * (dpm - sd[ic + c]); /* dS */
                    }
                }
                ACCUMULATE(dk, s, sa, ic);
                ACCUMULATE(dv, pd, sb, ic);
            }
        }
        [[unroll]] for (uint a = 0u; a < ROWS; a++) {
            uint key = first + a;
            if (key < t)
                [[unroll]] for (uint u = 0u; u < CPL; u++) {
                    uint c = u * LANES + lane;
                    if (c < NC) {
                        uint o = p.dqkv_off + hcol + (seq + key) * 3u * HD + HD;
                        put(false, o, c, dk[a][u], 1.0, p.beta);
                        put(false, o + HD, c, dv[a][u], 1.0, p.beta);
                    }
                }
        }
    }
}
