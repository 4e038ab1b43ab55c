/*
 * lowp_frag.glsl - the fragment half of the 16-bit tiling (gemm_lowp.glsl states it): a
 * warp's accumulators, the multiplication of one staged K slab into them, and the
 * epilogue that hands each output to store_c(row, column, value). Shared by the GEMM
 * (gemm_lowp.glsl) and the convolution (conv_frag.glsl), so the cooperative-matrix
 * kernels of both multiply and store exactly as their fp32-arithmetic twins, which
 * lavapipe runs.
 *
 * The includer defines BM, BN, BK, TM, TN, TK, SG, FM, FN, PER_LANE, LDS, LOWP_ELEM (with
 * LOWP_COOPMAT), the shared As [2][BM][LDS], Bs [2][BN][LDS] (k-contiguous rows) and, with
 * LOWP_COOPMAT, Cs [warps][TM TN], and void store_c(uint row, uint col, float v).
 */
#if defined(LOWP_COOPMAT)
#define ACC_T coopmat<float, gl_ScopeSubgroup, TM, TN, gl_MatrixUseAccumulator>
ACC_T acc[FM * FN];

void zero_acc()
{
    [[unroll]] for (uint f = 0u; f < FM * FN; f++)
        acc[f] = ACC_T(0.0);
}

/* The slab in shared buffer `buf` into the warp's accumulators. */
void multiply(uint buf, uint wm0, uint wn0, uint lane)
{
    uint a0 = buf * BM * LDS, b0 = buf * BN * LDS;
    coopmat<LOWP_ELEM, gl_ScopeSubgroup, TM, TK, gl_MatrixUseA> fa[FM];
    coopmat<LOWP_ELEM, gl_ScopeSubgroup, TK, TN, gl_MatrixUseB> fb;
    [[unroll]] for (uint kk = 0u; kk < BK; kk += TK) {
        [[unroll]] for (uint i = 0u; i < FM; i++)
            coopMatLoad(fa[i], As, a0 + (wm0 + i * TM) * LDS + kk, LDS,
                        gl_CooperativeMatrixLayoutRowMajor);
        [[unroll]] for (uint j = 0u; j < FN; j++) {
            coopMatLoad(fb, Bs, b0 + (wn0 + j * TN) * LDS + kk, LDS,
                        gl_CooperativeMatrixLayoutColumnMajor);
            [[unroll]] for (uint i = 0u; i < FM; i++)
                acc[i * FN + j] = coopMatMulAdd(fa[i], fb, acc[i * FN + j]);
        }
    }
}

/* Fragment f's element e of this lane (idx = e * SG + lane), through the warp's slice of
 * Cs. */
void store_fragments(uint warp, uint lane, uint r0, uint c0)
{
    uint base = warp * TM * TN;
    [[unroll]] for (uint i = 0u; i < FM; i++)
        [[unroll]] for (uint j = 0u; j < FN; j++) {
            coopMatStore(acc[i * FN + j], Cs, base, TN, gl_CooperativeMatrixLayoutRowMajor);
            subgroupMemoryBarrierShared();
            subgroupBarrier();
            [[unroll]] for (uint e = 0u; e < PER_LANE; e++) {
                uint idx = e * SG + lane;
                store_c(r0 + i * TM + idx / TN, c0 + j * TN + idx % TN, Cs[base + idx]);
            }
            subgroupMemoryBarrierShared();
            subgroupBarrier();
        }
}
#else
float acc[FM * FN * PER_LANE]; /* [fragment][element of this lane] */

void zero_acc()
{
    [[unroll]] for (uint f = 0u; f < FM * FN * PER_LANE; f++)
        acc[f] = 0.0;
}

void multiply(uint buf, uint wm0, uint wn0, uint lane)
{
    uint a0 = buf * BM * LDS, b0 = buf * BN * LDS;
    [[unroll]] for (uint i = 0u; i < FM; i++)
        [[unroll]] for (uint j = 0u; j < FN; j++)
            [[unroll]] for (uint e = 0u; e < PER_LANE; e++) {
                uint idx = e * SG + lane;
                uint ar = a0 + (wm0 + i * TM + idx / TN) * LDS;
                uint br = b0 + (wn0 + j * TN + idx % TN) * LDS;
#if defined(LOWP_HALF)
                float16_t s = float16_t(0.0);
                [[unroll]] for (uint kk = 0u; kk < BK; kk++)
                    s = fma(As[ar + kk], Bs[br + kk], s);
                acc[(i * FN + j) * PER_LANE + e] += float(s);
#else
                float s = acc[(i * FN + j) * PER_LANE + e];
                [[unroll]] for (uint kk = 0u; kk < BK; kk++)
                    s = fma(As[ar + kk], Bs[br + kk], s);
                acc[(i * FN + j) * PER_LANE + e] = s;
#endif
            }
}

void store_fragments(uint warp, uint lane, uint r0, uint c0)
{
    [[unroll]] for (uint i = 0u; i < FM; i++)
        [[unroll]] for (uint j = 0u; j < FN; j++)
            [[unroll]] for (uint e = 0u; e < PER_LANE; e++) {
                uint idx = e * SG + lane;
                store_c(r0 + i * TM + idx / TN, c0 + j * TN + idx % TN,
                        acc[(i * FN + j) * PER_LANE + e]);
            }
}
#endif
