/*
 * attention_frag_bwd.glsl - the backward of attention_frag.glsl's fused causal attention
 * (attention_flash.glsl's PASS 1 and 2: P recomputed from the saved row logsumexps, no
 * [t, t] array stored) with its five products on warps of TM x TN fragments, so that they
 * run on cooperative matrices. Host: engine/kernels/attention_cm.c (ka_cm_backward), plan:
 * ka_frag_plan there (pass 1 and 2).
 *
 * The including .comp says how fragments are multiplied, as attention_frag.glsl:
 *   LOWP_FLOAT    attention_frag_bwd.comp: fp32 shared memory and multiply-adds, each lane
 *                 the fragment elements idx = e SG + lane; lavapipe runs it;
 *   LOWP_COOPMAT  attention_coopmat_bwd_f16.comp / _bf16.comp: the matrix instruction
 *                 into fp32 accumulators.
 * Staging, masks, dropout, the element-wise step and the stores are the same text.
 *
 * A workgroup of WARPS warps of SG lanes takes BM = WARPS TM rows of one (sequence, head),
 * warp w rows w TM .. w TM + TM - 1 ("the block"); the other side comes in tiles of BN rows
 * ("the tile"). Rs [2][BM][LD] holds the block's two row sets, Ts [2][BN][LD] the tile's
 * (16-bit values, exact; D padded with zeros to DP). Per tile: Ss[x] = Rs[x] Ts[x]^T (fp32,
 * K = DP) for x = 0, 1; an element-wise step writes the 16-bit operands Ps[x] [BM][BN];
 * then Acc[x] [BM][DP] += Ps[x] Ts[x] (K = BN), fp32 accumulators in shared memory as the
 * forward's Os (the matrix kernel loads them into accumulator fragments and stores them
 * back per tile; kept in registers across the tiles, the twin's per-lane arrays live over
 * every barrier and llvmpipe's coroutine split took minutes to compile one pipeline).
 *
 *   PASS 1 (by query blocks): Rs = Q, dO; Ts = K, V of key tiles j < the block's end.
 *          D_i = dO_i . y_i (fp32) into the workspace [b, H, t] first. S = Q K^T, dP =
 *          dO V^T; dS_ij = P_ij (drop_ij dP_ij - D_i), P_ij = exp(S_ij / sqrt(D) - lse_i)
 *          (0 for j > i); Ps[0] = dS; dQ += dS K. dq = dQ / sqrt(D).
 *   PASS 2 (by key blocks; after PASS 1, whose D it reads): Rs = K, V; Ts = Q, dO of query
 *          tiles i >= the block's first key, with their lse and D. Ss[0] = K Q^T = S^T,
 *          Ss[1] = V dO^T = dP^T; Ps[0] = dS^T, Ps[1] = drop(P)^T; dK += dS^T Q, dV +=
 *          drop(P)^T dO. dk = dK / sqrt(D), dv = dV.
 * drop(P)_ij = P_ij drop_scale where kept, else 0, and drop_ij the same factor: the masks of
 * attention_frag.glsl's forward (the control block's step and row base, ctrl.h).
 *
 * The rounding beyond the fp32 backward's: dS and drop(P) rounded to the 16-bit type (the
 * matrix instruction's operands; nearest even by dtype.h, so both kernels multiply the same
 * values): dq_i moves by at most 2^-11 (fp16; bf16 2^-8) sum_j |dS_ij| |k_j| / sqrt(D), dk_j
 * by as much with q_i, dv_j by that times sum_i drop(P)_ij |dO_i| (fp16 dS below 2^-14 is
 * subnormal: an absolute 2^-25 each). Every output is summed in a fixed order: no atomics.
 */
#include "attention_frag_common.glsl"

layout(constant_id = SPEC_ATTN_BWD_PASS) const uint PASS = 1;
const uint NX = PASS;                /* operands and accumulators: 1 (dQ), 2 (dK, dV) */
/* attention_flash's bindings: 0 qkv (16-bit); 1 y; 2 saved (lse); 3 ctrl; 4 dqkv;
 * 5 workspace (D); 6 dy (16-bit) */
layout(std430, set = 0, binding = 0) readonly buffer QKV { uint16_t qkv16[]; };
layout(std430, set = 0, binding = 1) readonly buffer Y { float y[]; };
layout(std430, set = 0, binding = 2) readonly buffer L { float lse[]; };
layout(std430, set = 0, binding = 3) readonly buffer C { uint ctrl[]; };
layout(std430, set = 0, binding = 4) buffer G { float dqkv[]; };
layout(std430, set = 0, binding = 5) buffer WS { float ws[]; };
layout(std430, set = 0, binding = 6) readonly buffer DY { uint16_t dy16[]; };

shared SH_T Rs[2 * BM * LD];
shared SH_T Ts[2 * BN * LD];
shared SH_T Ps[NX * BM * LDP];
shared float Ss[2 * BM * BN];
shared float Acc[NX * BM * DP];
const uint NR = (2u - PASS) * BM + (PASS - 1u) * BN;
shared float rl[NR], rd[NR]; /* lse and D: the block's rows (pass 1), the tile's (2) */

/* Element c of row `row` of source src (0 q, 1 k, 2 v of qkv; 3 dy), 0 past t and D. */
float load(uint seq, uint hcol, uint row, uint c, uint src)
{
    if (row >= p.t || c >= D)
        return 0.0;
    uint HD = p.heads * D;
    if (src == 3u)
        return widen(uint(dy16[p.dy_off + (seq + row) * HD + hcol + c]));
    return widen(uint(qkv16[p.qkv_off + (seq + row) * 3u * HD + src * HD + hcol + c]));
}

/* Rows r0 .. r0 + n - 1 of source src into set x of Rs (tile 0) or Ts (tile 1). */
void stage(uint tid, uint seq, uint hcol, uint r0, uint n, uint src, uint tile, uint x)
{
    for (uint e = tid; e < n * DP; e += THREADS) {
        uint r = e / DP, c = e - r * DP;
        float v = load(seq, hcol, r0 + r, c, src);
        if (tile == 0u)
            Rs[x * BM * LD + r * LD + c] = SH_T(v);
        else
            Ts[x * BN * LD + r * LD + c] = SH_T(v);
    }
}

#if defined(LOWP_COOPMAT)
/* Ss[x] [warp's TM rows][BN] = Rs[x] Ts[x]^T */
void scores(uint warp, uint lane, uint x)
{
    uint a0 = x * BM * LD + warp * TM * LD, b0 = x * BN * LD;
    ACC_T acc[FS];
    [[unroll]] for (uint j = 0u; j < FS; j++)
        acc[j] = ACC_T(0.0);
    A_T fa;
    B_T fb;
    [[unroll]] for (uint kk = 0u; kk < DP; kk += TK) {
        coopMatLoad(fa, Rs, a0 + kk, LD, gl_CooperativeMatrixLayoutRowMajor);
        [[unroll]] for (uint j = 0u; j < FS; j++) {
            coopMatLoad(fb, Ts, b0 + j * TN * LD + kk, LD, gl_CooperativeMatrixLayoutColumnMajor);
            acc[j] = coopMatMulAdd(fa, fb, acc[j]);
        }
    }
    [[unroll]] for (uint j = 0u; j < FS; j++)
        coopMatStore(acc[j], Ss, x * BM * BN + warp * TM * BN + j * TN, BN,
                     gl_CooperativeMatrixLayoutRowMajor);
}

/* Acc[x] [warp's TM rows][DP] += Ps[x] Ts[x] */
void accumulate(uint warp, uint lane, uint x)
{
    uint c0 = x * BM * DP + warp * TM * DP, a0 = x * BM * LDP + warp * TM * LDP,
         b0 = x * BN * LD;
    ACC_T acc[FO];
    [[unroll]] for (uint j = 0u; j < FO; j++)
        coopMatLoad(acc[j], Acc, c0 + j * TN, DP, gl_CooperativeMatrixLayoutRowMajor);
    A_T fa;
    B_T fb;
    [[unroll]] for (uint kk = 0u; kk < BN; kk += TK) {
        coopMatLoad(fa, Ps, a0 + kk, LDP, gl_CooperativeMatrixLayoutRowMajor);
        [[unroll]] for (uint j = 0u; j < FO; j++) {
            coopMatLoad(fb, Ts, b0 + kk * LD + j * TN, LD, gl_CooperativeMatrixLayoutRowMajor);
            acc[j] = coopMatMulAdd(fa, fb, acc[j]);
        }
    }
    [[unroll]] for (uint j = 0u; j < FO; j++)
        coopMatStore(acc[j], Acc, c0 + j * TN, DP, gl_CooperativeMatrixLayoutRowMajor);
}
#else
/* The same products element by element: lane `lane` of the warp owns elements idx =
 * e SG + lane (row idx / TN, column idx % TN) of every fragment. The loops stay rolled
 * (unrolled, the shader's coroutine split in llvmpipe took minutes per pipeline). */
void scores(uint warp, uint lane, uint x)
{
    for (uint j = 0u; j < FS; j++)
        for (uint e = 0u; e < PER_LANE; e++) {
            uint idx = e * SG + lane, r = warp * TM + idx / TN, c = j * TN + idx % TN;
            uint a = x * BM * LD + r * LD, b = x * BN * LD + c * LD;
            float s = 0.0;
            for (uint k = 0u; k < DP; k++)
                s = fma(Rs[a + k], Ts[b + k], s);
            Ss[x * BM * BN + r * BN + c] = s;
        }
}

void accumulate(uint warp, uint lane, uint x)
{
    for (uint j = 0u; j < FO; j++)
        for (uint e = 0u; e < PER_LANE; e++) {
            uint idx = e * SG + lane, r = warp * TM + idx / TN, c = j * TN + idx % TN;
            uint a = x * BM * LDP + r * LDP, b = x * BN * LD + c, o = x * BM * DP + r * DP + c;
            float s = Acc[o];
            for (uint k = 0u; k < BN; k++)
                s = fma(Ps[a + k], Ts[b + k * LD], s);
            Acc[o] = s;
        }
}
#endif

/* Acc[x] times mul into column block blk (0 q, 1 k, 2 v) of dqkv's rows r0 .. (nothing
 * past t and D): new + beta old (beta 0 never reads the old value: it may be NaN). */
void store(uint tid, uint seq, uint hcol, uint r0, uint x, uint blk, float mul)
{
    uint HD = p.heads * D;
    for (uint e = tid; e < BM * D; e += THREADS) {
        uint r = e / D, c = e - r * D, row = r0 + r;
        if (row < p.t) {
            uint o = p.dqkv_off + (seq + row) * 3u * HD + blk * HD + hcol + c;
            float v = Acc[x * BM * DP + r * DP + c] * mul;
            dqkv[o] = p.beta != 0.0 ? v + p.beta * dqkv[o] : v;
        }
    }
}

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
    /* heaviest blocks first: the last query blocks (1), the first key blocks (2) */
    uint bh = group % nbh, blk = group / nbh;
    if (PASS == 1u)
        blk = p.blocks_per_head - 1u - blk;
    uint bb = bh / H, h = bh - bb * H, seq = bb * t, hcol = h * D, plane = bh * t;
    uint r0 = blk * BM;
    bool drop = p.dropout != 0u;
    uint drop_key = drop ? dropout_key(ctrl[p.c_off], ctrl[p.c_off + 1u], p.seed_lo, p.seed_hi)
                         : 0u;
    uint drop_base = p.drop_off; /* as attention_frag.glsl's forward keys it */
    if (drop && p.drop_row != 0u)
        drop_base += ctrl[p.c_off + uint(CTRL_ROW0 - CTRL_STEP)] * p.drop_row;

    /* the block's rows: Q, dO (1) or K, V (2) */
    stage(tid, seq, hcol, r0, BM, PASS == 1u ? 0u : 1u, 0u, 0u);
    stage(tid, seq, hcol, r0, BM, PASS == 1u ? 3u : 2u, 0u, 1u);
    for (uint e = tid; e < NX * BM * DP; e += THREADS)
        Acc[e] = 0.0;
    if (PASS == 1u && tid < BM) { /* the block's lse and D_i = dO_i . y_i (SG >= TM) */
        uint row = r0 + tid;
        float l = 0.0, dd = 0.0;
        if (row < t) {
            l = lse[p.p_off + plane + row];
            for (uint c = 0u; c < D; c++)
                dd += load(seq, hcol, row, c, 3u) * y[p.y_off + (seq + row) * HD + hcol + c];
            ws[p.ws_off + plane + row] = dd;
        }
        rl[tid] = l;
        rd[tid] = dd;
    }
    /* pass 1: key tiles below the block's end; pass 2: query tiles from its first key */
    uint lo = PASS == 1u ? 0u : r0, hi = PASS == 1u ? min(t, r0 + BM) : t;
    for (uint i0 = lo; i0 < hi; i0 += BN) {
        barrier();
        stage(tid, seq, hcol, i0, BN, PASS == 1u ? 1u : 0u, 1u, 0u);
        stage(tid, seq, hcol, i0, BN, PASS == 1u ? 2u : 3u, 1u, 1u);
        if (PASS == 2u) /* BN may pass the threads (one warp of 8 lanes, tiles of 16) */
            for (uint r = tid; r < BN; r += THREADS) {
                uint row = i0 + r;
                rl[r] = row < t ? lse[p.p_off + plane + row] : 0.0;
                rd[r] = row < t ? ws[p.ws_off + plane + row] : 0.0;
            }
        barrier();
        scores(warp, lane, 0u);
        scores(warp, lane, 1u);
        barrier();
        for (uint e = tid; e < BM * BN; e += THREADS) {
            uint r = e / BN, k = e - r * BN;
            /* query i, key j of the element, and where the query's lse and D are */
            uint i = PASS == 1u ? r0 + r : i0 + k, j = PASS == 1u ? i0 + k : r0 + r;
            uint qs = PASS == 1u ? r : k;
            bool on = j <= i && i < t;
            float pr = on ? exp(Ss[e] * p.scale - rl[qs]) : 0.0;
            float f = 1.0; /* drop_ij: drop_scale where kept, else 0 */
            if (drop)
                f = on && dropout_kept(drop_key, drop_base + (plane + i) * t + j, p.threshold)
                        ? p.drop_scale : 0.0;
            Ps[r * LDP + k] = SH_T(round16(pr * (Ss[BM * BN + e] * f - rd[qs])));
            if (PASS == 2u)
                Ps[BM * LDP + r * LDP + k] = SH_T(round16(pr * f));
        }
        barrier();
        accumulate(warp, lane, 0u);
        if (PASS == 2u)
            accumulate(warp, lane, 1u);
    }
    barrier();
    if (PASS == 1u) {
        store(tid, seq, hcol, r0, 0u, 0u, p.scale);
    } else {
        store(tid, seq, hcol, r0, 0u, 1u, p.scale);
        store(tid, seq, hcol, r0, 1u, 2u, 1.0);
    }
}
