#version 450
/*
 * gemm_gpu.comp - C[M,N] = alpha * op(A) * op(B) + beta * C, for GPUs: shared-memory
 * tiles with a register block per thread. Row-major; op() transposes per TRANS_A/B.
 *
 * A workgroup of TX x TY threads computes a BM x BN tile of C. For each slab of BK
 * values of k it stages the BM x BK block of op(A) and the BK x BN block of op(B) in
 * shared memory (loads coalesced along whichever dimension is contiguous in memory,
 * zero outside the matrices), then every thread accumulates a TM x TN register block,
 * TM = BM/TY rows and TN = BN/TX columns. A thread owns rows ty + TY*i and columns
 * tx + TX*j: neighbouring threads read neighbouring shared-memory words (no bank
 * conflicts) and write neighbouring columns of C (coalesced).
 * The host picks BM, BN, BK, TX, TY from the device's limits (engine/kernels/gemm.c).
 */
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#include "push.h"
#include "spec.h"

layout(constant_id = SPEC_GEMM_GPU_TRANS_A) const uint TRANS_A = 0; /* A is stored [K, M] */
layout(constant_id = SPEC_GEMM_GPU_TRANS_B) const uint TRANS_B = 0; /* B is stored [N, K] */
layout(constant_id = SPEC_GEMM_GPU_READ_C) const uint READ_C = 0;  /* beta != 0 */
layout(constant_id = SPEC_GEMM_GPU_BM) const uint BM = 64;
layout(constant_id = SPEC_GEMM_GPU_BN) const uint BN = 64;
layout(constant_id = SPEC_GEMM_GPU_BK) const uint BK = 16;
layout(local_size_x_id = SPEC_GEMM_GPU_TX, local_size_y_id = SPEC_GEMM_GPU_TY) in;

const uint TX = gl_WorkGroupSize.x;
const uint TY = gl_WorkGroupSize.y;
const uint TM = BM / TY;
const uint TN = BN / TX;
const uint THREADS = TX * TY;

layout(push_constant) uniform Push { push_gemm p; };
layout(std430, binding = 0) readonly buffer Abuf { float A[]; };
layout(std430, binding = 1) readonly buffer Bbuf { float B[]; };
layout(std430, binding = 2) buffer Cbuf { float C[]; };

shared float As[BK * BM]; /* As[kk * BM + m] = op(A)[row0 + m, k0 + kk] */
shared float Bs[BK * BN]; /* Bs[kk * BN + n] = op(B)[k0 + kk, col0 + n] */

void main() {
    uint tx = gl_LocalInvocationID.x, ty = gl_LocalInvocationID.y;
    uint tid = ty * TX + tx;
    uint row0 = gl_WorkGroupID.y * BM, col0 = gl_WorkGroupID.x * BN;

    float acc[TM * TN];
    [[unroll]] for (uint i = 0; i < TM * TN; i++)
        acc[i] = 0.0;

    for (uint k0 = 0; k0 < p.k; k0 += BK) {
        /* Stage op(A)[row0.., k0..]: consecutive threads take consecutive addresses. */
        for (uint e = tid; e < BM * BK; e += THREADS) {
            uint m, kk;
            if (TRANS_A == 0) { kk = e % BK; m = e / BK; }
            else              { m = e % BM; kk = e / BM; }
            uint i = row0 + m, k = k0 + kk;
            float v = 0.0;
            if (i < p.m && k < p.k)
                v = A[p.a_off + (TRANS_A == 0 ? i * p.lda + k : k * p.lda + i)];
            As[kk * BM + m] = v;
        }
        /* Stage op(B)[k0.., col0..]. */
        for (uint e = tid; e < BK * BN; e += THREADS) {
            uint n, kk;
            if (TRANS_B == 0) { n = e % BN; kk = e / BN; }
            else              { kk = e % BK; n = e / BK; }
            uint j = col0 + n, k = k0 + kk;
            float v = 0.0;
            if (j < p.n && k < p.k)
                v = B[p.b_off + (TRANS_B == 0 ? k * p.ldb + j : j * p.ldb + k)];
            Bs[kk * BN + n] = v;
        }
        barrier();

        [[unroll]] for (uint kk = 0; kk < BK; kk++) {
            float a[TM], b[TN];
            [[unroll]] for (uint i = 0; i < TM; i++)
                a[i] = As[kk * BM + ty + TY * i];
            [[unroll]] for (uint j = 0; j < TN; j++)
                b[j] = Bs[kk * BN + tx + TX * j];
            [[unroll]] for (uint i = 0; i < TM; i++)
                [[unroll]] for (uint j = 0; j < TN; j++)
                    acc[i * TN + j] = fma(a[i], b[j], acc[i * TN + j]);
        }
        barrier();
    }

    /* C = alpha * acc + beta * C inside [M, N]; alpha == 0 ignores A and B (as BLAS) */
    [[unroll]] for (uint i = 0; i < TM; i++) {
        uint r = row0 + ty + TY * i;
        [[unroll]] for (uint j = 0; j < TN; j++) {
            uint c = col0 + tx + TX * j;
            if (r < p.m && c < p.n) {
                uint idx = p.c_off + r * p.ldc + c;
                float v = p.alpha == 0.0 ? 0.0 : p.alpha * acc[i * TN + j];
                if (READ_C != 0)
                    v += p.beta * C[idx];
                C[idx] = v;
            }
        }
    }
}
