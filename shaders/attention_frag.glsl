/*
 * attention_frag.glsl - the forward of fused causal attention (attention_flash.glsl's
 * PASS 0: online softmax over tiles of keys, no [t, t] array stored) with both products,
 * S = Q K^T and O += P V, on warps of TM x TN fragments, so that they run on cooperative
 * matrices. Host: engine/kernels/attention_cm.c, plan: ka_frag_plan there. The backward
 * is attention_frag_bwd.glsl's (or attention_flash_lowp.comp's where its tiles do not
 * fit); both read the lse written here.
 *
 * The including .comp says how fragments are multiplied:
 *   LOWP_FLOAT    attention_frag.comp (attention_lowp_frag; attention_lowp_coopmat's bf16
 *                 where the device has no bf16 matrices): fp32 shared memory and
 *                 multiply-adds, each lane the fragment elements idx = e SG + lane. Needs
 *                 16-bit storage only, so lavapipe runs it.
 *   LOWP_COOPMAT  attention_coopmat_f16.comp / _bf16.comp (LOWP_ELEM float16_t /
 *                 bfloat16_t): VK_KHR_cooperative_matrix's multiply-add, fp32 accumulators.
 * Everything else (staging, masks, the softmax, the stores) is the same text, so the
 * kernel lavapipe runs checks all of it but the matrix instruction.
 *
 * A workgroup of WARPS warps of SG lanes takes BM = WARPS TM query rows of one (sequence,
 * head); warp w owns rows w TM .. w TM + TM - 1. Q [BM][DP] is staged once (16-bit values,
 * exact; D padded with zeros to DP, a multiple of TK and TN); per tile of BN keys: K and V
 * [BN][DP] staged; S = Q K^T (fp32 accumulators, K = DP) into Ss [BM][BN]; one thread per
 * row scales S by 1 / sqrt(D), masks j > i, updates the running max m and sum l of
 * exp(s - m) (fp32), rescales its row of the output Os [BM][DP] (fp32, shared) by
 * exp(m_old - m_new) and writes P = drop(exp(s - m)) rounded to the 16-bit type (round to
 * nearest even by dtype.h, so both kernels multiply the same P) into Ps [BM][BN]; then
 * Os += P V (accumulators loaded from and stored back to Os, K = BN). At the end y =
 * Os / l and lse = m + log(l) [b, H, t], attention_flash's saved array. The only rounding
 * beyond the fp32 attention's is P's: y moves by at most 2^-11 (fp16; bf16 2^-8) times
 * sum_j P_ij |v_j| / l_i <= max_j |v_j| (dropout: times drop_scale).
 *
 * Shared rows are LD = DP + PAD apart (coopmat: PAD 8, rows 16-byte aligned as the
 * matrix loads want); A fragments (Q, P) are row-major loads, K column-major (B = K^T),
 * V row-major.
 */
#include "attention_frag_common.glsl"
/* 0 qkv (16-bit); 1 y; 2 saved (lse); 3 ctrl; the others are the backward's */
layout(std430, set = 0, binding = 0) readonly buffer QKV { uint16_t qkv16[]; };
layout(std430, set = 0, binding = 1) buffer Y { float y[]; };
layout(std430, set = 0, binding = 2) buffer L { float lse[]; };
layout(std430, set = 0, binding = 3) readonly buffer C { uint ctrl[]; };

shared SH_T Qs[BM * LD];
shared SH_T Ks[BN * LD];
shared SH_T Vs[BN * LD];
shared SH_T Ps[BM * LDP];
shared float Ss[BM * BN];
shared float Os[BM * DP];
shared float m_row[BM], l_row[BM];

/* rows r0 .. r0 + n - 1 of qkv block `blk` (0 q, 1 k, 2 v) into dst [n][LD], zeros past
 * row t - 1 and column D - 1 */
void stage(uint tid, uint seq, uint hcol, uint r0, uint n, uint blk, uint which)
{
    uint HD = p.heads * D;
    for (uint e = tid; e < n * DP; e += THREADS) {
        uint r = e / DP, c = e - r * DP, row = r0 + r;
        float v = 0.0;
        if (row < p.t && c < D)
            v = widen(uint(qkv16[p.qkv_off + (seq + row) * 3u * HD + blk * HD + hcol + c]));
        if (which == 0u)
            Qs[r * LD + c] = SH_T(v);
        else if (which == 1u)
            Ks[r * LD + c] = SH_T(v);
        else
            Vs[r * LD + c] = SH_T(v);
    }
}

#if defined(LOWP_COOPMAT)
/* Ss [warp's TM rows][BN] = Q K^T */
void s_product(uint warp, uint lane)
{
    ACC_T acc[FS];
    [[unroll]] for (uint j = 0u; j < FS; j++)
        acc[j] = ACC_T(0.0);
    A_T fa;
    B_T fb;
    [[unroll]] for (uint kk = 0u; kk < DP; kk += TK) {
        coopMatLoad(fa, Qs, warp * TM * LD + kk, LD, gl_CooperativeMatrixLayoutRowMajor);
        [[unroll]] for (uint j = 0u; j < FS; j++) {
            coopMatLoad(fb, Ks, j * TN * LD + kk, LD, gl_CooperativeMatrixLayoutColumnMajor);
            acc[j] = coopMatMulAdd(fa, fb, acc[j]);
        }
    }
    [[unroll]] for (uint j = 0u; j < FS; j++)
        coopMatStore(acc[j], Ss, warp * TM * BN + j * TN, BN, gl_CooperativeMatrixLayoutRowMajor);
}

/* Os [warp's TM rows][DP] += P V */
void o_product(uint warp, uint lane)
{
    ACC_T acc[FO];
    [[unroll]] for (uint j = 0u; j < FO; j++)
        coopMatLoad(acc[j], Os, warp * TM * DP + j * TN, DP, gl_CooperativeMatrixLayoutRowMajor);
    A_T fa;
    B_T fb;
    [[unroll]] for (uint kk = 0u; kk < BN; kk += TK) {
        coopMatLoad(fa, Ps, warp * TM * LDP + kk, LDP, gl_CooperativeMatrixLayoutRowMajor);
        [[unroll]] for (uint j = 0u; j < FO; j++) {
            coopMatLoad(fb, Vs, kk * LD + j * TN, LD, gl_CooperativeMatrixLayoutRowMajor);
            acc[j] = coopMatMulAdd(fa, fb, acc[j]);
        }
    }
    [[unroll]] for (uint j = 0u; j < FO; j++)
        coopMatStore(acc[j], Os, warp * TM * DP + j * TN, DP, gl_CooperativeMatrixLayoutRowMajor);
}
#else
/* The same products element by element: lane `lane` of the warp owns elements idx =
 * e SG + lane (row idx / TN, column idx % TN) of every fragment. */
void s_product(uint warp, uint lane)
{
    [[unroll]] for (uint j = 0u; j < FS; j++)
        [[unroll]] for (uint e = 0u; e < PER_LANE; e++) {
            uint idx = e * SG + lane, r = warp * TM + idx / TN, c = j * TN + idx % TN;
            float s = 0.0;
            for (uint k = 0u; k < DP; k++)
                s = fma(Qs[r * LD + k], Ks[c * LD + k], s);
            Ss[r * BN + c] = s;
        }
}

void o_product(uint warp, uint lane)
{
    [[unroll]] for (uint j = 0u; j < FO; j++)
        [[unroll]] for (uint e = 0u; e < PER_LANE; e++) {
            uint idx = e * SG + lane, r = warp * TM + idx / TN, c = j * TN + idx % TN;
            float s = Os[r * DP + c];
            for (uint k = 0u; k < BN; k++)
                s = fma(Ps[r * LDP + k], Vs[k * LD + c], s);
            Os[r * DP + c] = s;
        }
}
#endif

void main()
{
    uint group = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    if (group >= p.blocks)
        return; /* the whole workgroup leaves together */
    uint tid = gl_LocalInvocationIndex;
#if defined(LOWP_COOPMAT)
    uint warp = gl_SubgroupID, lane = gl_SubgroupInvocationID;
#else
    uint warp = tid / SG, lane = tid % SG;
#endif
    uint t = p.t, H = p.heads, HD = H * D, nbh = p.b * H;
    /* heaviest blocks (the last query rows) first */
    uint bh = group % nbh, blk = p.blocks_per_head - 1u - group / nbh;
    uint bb = bh / H, h = bh - bb * H, seq = bb * t, hcol = h * D, plane = bh * t;
    uint r0 = blk * BM;
    bool drop = p.dropout != 0u;
    uint drop_key = drop ? dropout_key(ctrl[p.c_off], ctrl[p.c_off + 1u], p.seed_lo, p.seed_hi)
                         : 0u;
    /* the mask index of element 0: drop_off, plus the control block's row base times
     * drop_row (read at run time: a pipeline micro-batch's, a replica's rows), as
     * attention_flash keys it, so that its backward draws the same masks */
    uint drop_base = p.drop_off;
    if (drop && p.drop_row != 0u)
        drop_base += ctrl[p.c_off + uint(CTRL_ROW0 - CTRL_STEP)] * p.drop_row;

    stage(tid, seq, hcol, r0, BM, 0u, 0u);
    for (uint e = tid; e < BM * DP; e += THREADS)
        Os[e] = 0.0;
    if (tid < BM) {
        m_row[tid] = -3.0e38;
        l_row[tid] = 0.0;
    }
    uint kend = min(t, r0 + BM); /* keys the block's rows see */
    for (uint j0 = 0u; j0 < kend; j0 += BN) {
        barrier();
        stage(tid, seq, hcol, j0, BN, 1u, 1u);
        stage(tid, seq, hcol, j0, BN, 2u, 2u);
        barrier();
        s_product(warp, lane);
        barrier();
        if (tid < BM) { /* row tid's online softmax step */
            uint row = r0 + tid;
            float mo = m_row[tid], mn = mo;
            for (uint k = 0u; k < BN; k++) {
                uint j = j0 + k;
                if (j <= row && j < t)
                    mn = max(mn, Ss[tid * BN + k] * p.scale);
            }
            float corr = exp(mo - mn), sum = 0.0;
            for (uint k = 0u; k < BN; k++) {
                uint j = j0 + k;
                float e = j <= row && j < t ? exp(Ss[tid * BN + k] * p.scale - mn) : 0.0;
                sum += e;
                float w = drop ? (dropout_kept(drop_key, drop_base + (plane + row) * t + j,
                                               p.threshold) ? e * p.drop_scale : 0.0)
                               : e;
                Ps[tid * LDP + k] = SH_T(round16(w));
            }
            l_row[tid] = l_row[tid] * corr + sum;
            m_row[tid] = mn;
            for (uint c = 0u; c < DP; c++)
                Os[tid * DP + c] *= corr;
        }
        barrier();
        o_product(warp, lane);
    }
    barrier();
    for (uint e = tid; e < BM * D; e += THREADS) {
        uint r = e / D, c = e - r * D, row = r0 + r;
        if (row < t)
            y[p.y_off + (seq + row) * HD + hcol + c] = Os[r * DP + c] / l_row[r];
    }
    if (tid < BM && r0 + tid < t)
        lse[p.p_off + plane + r0 + tid] = m_row[tid] + log(l_row[tid]);
}
