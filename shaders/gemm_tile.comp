#version 450
/*
 * gemm_tile.comp - C[M,N] = alpha * op(A) * op(B) + beta * C for GPUs: register-blocked
 * tiles fed from double-buffered shared memory with vec4 loads, and split-K. Row-major;
 * op() transposes per TRANS_A / TRANS_B. The host plans tile and grid
 * (engine/kernels/gemm_plan.c) and dispatches (engine/kernels/gemm.c).
 *
 * A workgroup of TX x TY threads (TX = BN / TN, TY = BM / TM; 256) computes a BM x BN
 * tile of C over K range [z * k_chunk, min(K, (z + 1) * k_chunk)), z = the workgroup's
 * index along the grid's third dimension. Per slab of BK values of k:
 *  - each thread loads its share of the BM x BK block of op(A) and the BK x BN block of
 *    op(B) from device memory as vec4s (4 consecutive floats along whichever dimension
 *    is contiguous: GEMM_VEC_A / GEMM_VEC_B when that dimension is a multiple of 4 and
 *    the binding 16-byte aligned, else 4 scalar loads) into registers, for the slab after the one
 *    being multiplied (so the loads' latency hides behind the multiply-adds);
 *  - the multiply-adds read the current slab from shared memory, k-major: As[k][m],
 *    Bs[k][n], so a thread's 4 consecutive rows (columns) are one vec4 read;
 *  - the registers go into the other shared buffer; one barrier per slab.
 * Thread (tx, ty) owns rows g * 4 TY + 4 ty + i (g < TM / 4, i < 4) and columns
 * h * 4 TX + 4 tx + j: per k it reads TM / 4 + TN / 4 vec4s for TM * TN multiply-adds;
 * neighbouring threads read neighbouring vec4s of Bs (no bank conflicts) and threads of
 * one row read the same vec4 of As (a broadcast). As and Bs rows are padded by 4 floats
 * so the transposed stores (op(A) from an untransposed A, op(B) from a transposed B)
 * spread over the banks.
 *
 * GEMM_SPLIT: the raw sums go to the workspace W[z][M][N] (packed), and gemm_reduce.comp
 * adds the splits in order and applies alpha and beta: deterministic, no atomics.
 * Otherwise C = alpha * acc + beta * C here (alpha == 0 ignores A and B, as BLAS;
 * GEMM_READ_C: beta != 0). The flags are push constants, uniform branches outside the
 * multiply-adds: specializing on them would multiply the pipelines to compile.
 * Outside [M, N] and past K everything staged is zero and nothing is stored.
 */
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#include "push.h"
#include "spec.h"

layout(local_size_x_id = SPEC_WG) in;
layout(constant_id = SPEC_GEMM_TILE_TRANS_A) const uint TRANS_A = 0; /* A stored [K, M] */
layout(constant_id = SPEC_GEMM_TILE_TRANS_B) const uint TRANS_B = 0; /* B stored [N, K] */
layout(constant_id = SPEC_GEMM_TILE_BM) const uint BM = 128;
layout(constant_id = SPEC_GEMM_TILE_BN) const uint BN = 128;
layout(constant_id = SPEC_GEMM_TILE_BK) const uint BK = 8;
layout(constant_id = SPEC_GEMM_TILE_TM) const uint TM = 8;
layout(constant_id = SPEC_GEMM_TILE_TN) const uint TN = 8;

const uint TX = BN / TN;
const uint TY = BM / TM;
const uint THREADS = TX * TY;
const uint SA = (BM + 4u) / 4u;       /* vec4s per k-row of As */
const uint SB = (BN + 4u) / 4u;
const uint LA = BM * BK / 4u / THREADS; /* vec4 loads of A per thread and slab */
const uint LB = BN * BK / 4u / THREADS;

layout(push_constant) uniform Push { push_gemm p; };
/* Each operand as floats and as vec4s at the same binding; the vec4 view is used only
 * where the host checked the alignment. */
layout(std430, binding = 0) readonly buffer Abuf { float A[]; };
layout(std430, binding = 0) readonly buffer A4buf { vec4 A4[]; };
layout(std430, binding = 1) readonly buffer Bbuf { float B[]; };
layout(std430, binding = 1) readonly buffer B4buf { vec4 B4[]; };
layout(std430, binding = 2) buffer Cbuf { float C[]; };
layout(std430, binding = 2) buffer C4buf { vec4 C4[]; };
layout(std430, binding = 3) writeonly buffer Wbuf { float W[]; };
layout(std430, binding = 3) writeonly buffer W4buf { vec4 W4[]; };

shared vec4 As[2 * BK * SA];
shared vec4 Bs[2 * BK * SB];

/* Four consecutive floats of a row-major matrix X (leading dimension ld, binding shift
 * off) at row r, columns c..c+3, zero outside [rows, cols). */
vec4 load_a(uint r, uint c, uint rows, uint cols)
{
    if (r >= rows)
        return vec4(0.0);
    uint i = p.a_off + r * p.lda + c;
    if ((p.flags & GEMM_VEC_A) != 0)
        return c < cols ? A4[i / 4u] : vec4(0.0);
    vec4 v = vec4(0.0);
    [[unroll]] for (uint j = 0; j < 4u; j++)
        if (c + j < cols)
            v[j] = A[i + j];
    return v;
}

vec4 load_b(uint r, uint c, uint rows, uint cols)
{
    if (r >= rows)
        return vec4(0.0);
    uint i = p.b_off + r * p.ldb + c;
    if ((p.flags & GEMM_VEC_B) != 0)
        return c < cols ? B4[i / 4u] : vec4(0.0);
    vec4 v = vec4(0.0);
    [[unroll]] for (uint j = 0; j < 4u; j++)
        if (c + j < cols)
            v[j] = B[i + j];
    return v;
}

vec4 ra[LA], rb[LB]; /* the next slab, in registers */

/* Slab k0 (k < kend) into ra, rb. Load e of a thread is vec4 number tid + e * THREADS of
 * the block, counted along the stored rows. */
void fetch(uint tid, uint row0, uint col0, uint k0, uint kend)
{
    [[unroll]] for (uint e = 0; e < LA; e++) {
        uint q = tid + e * THREADS;
        if (TRANS_A == 0) /* A [M, K]: BK / 4 vec4s per row of the block */
            ra[e] = load_a(row0 + q / (BK / 4u), k0 + 4u * (q % (BK / 4u)), p.m, kend);
        else /* A [K, M]: BM / 4 vec4s per row */
            ra[e] = load_a(k0 + q / (BM / 4u), row0 + 4u * (q % (BM / 4u)), kend, p.m);
    }
    [[unroll]] for (uint e = 0; e < LB; e++) {
        uint q = tid + e * THREADS;
        if (TRANS_B == 0) /* B [K, N] */
            rb[e] = load_b(k0 + q / (BN / 4u), col0 + 4u * (q % (BN / 4u)), kend, p.n);
        else /* B [N, K] */
            rb[e] = load_b(col0 + q / (BK / 4u), k0 + 4u * (q % (BK / 4u)), p.n, kend);
    }
}

/* ra, rb into shared buffer `buf`, k-major. */
void stash(uint tid, uint buf)
{
    uint a0 = buf * BK * SA, b0 = buf * BK * SB;
    [[unroll]] for (uint e = 0; e < LA; e++) {
        uint q = tid + e * THREADS;
        if (TRANS_A == 0) {
            uint m = q / (BK / 4u), kk = 4u * (q % (BK / 4u));
            [[unroll]] for (uint j = 0; j < 4u; j++)
                As[a0 + (kk + j) * SA + m / 4u][m % 4u] = ra[e][j];
        } else {
            As[a0 + (q / (BM / 4u)) * SA + q % (BM / 4u)] = ra[e];
        }
    }
    [[unroll]] for (uint e = 0; e < LB; e++) {
        uint q = tid + e * THREADS;
        if (TRANS_B == 0) {
            Bs[b0 + (q / (BN / 4u)) * SB + q % (BN / 4u)] = rb[e];
        } else {
            uint n = q / (BK / 4u), kk = 4u * (q % (BK / 4u));
            [[unroll]] for (uint j = 0; j < 4u; j++)
                Bs[b0 + (kk + j) * SB + n / 4u][n % 4u] = rb[e][j];
        }
    }
}

/* One output vec4 (columns c..c+3 of row r, all inside N with GEMM_VEC_C): C or the
 * workspace. */
void store(uint r, uint c, vec4 v)
{
    if (r >= p.m || c >= p.n)
        return;
    if ((p.flags & GEMM_SPLIT) != 0) {
        uint w = p.w_off + (gl_WorkGroupID.z * p.m + r) * p.n + c;
        if ((p.flags & GEMM_VEC_C) != 0) {
            W4[w / 4u] = v;
        } else {
            [[unroll]] for (uint j = 0; j < 4u; j++)
                if (c + j < p.n)
                    W[w + j] = v[j];
        }
        return;
    }
    uint i = p.c_off + r * p.ldc + c;
    vec4 o = p.alpha == 0.0 ? vec4(0.0) : p.alpha * v;
    if ((p.flags & GEMM_VEC_C) != 0) {
        if ((p.flags & GEMM_READ_C) != 0)
            o += p.beta * C4[i / 4u];
        C4[i / 4u] = o;
    } else {
        [[unroll]] for (uint j = 0; j < 4u; j++)
            if (c + j < p.n)
                C[i + j] = (p.flags & GEMM_READ_C) != 0 ? o[j] + p.beta * C[i + j] : o[j];
    }
}

void main()
{
    uint tid = gl_LocalInvocationID.x, tx = tid % TX, ty = tid / TX;
    uint row0 = gl_WorkGroupID.y * BM, col0 = gl_WorkGroupID.x * BN;
    uint kbeg = gl_WorkGroupID.z * p.k_chunk;
    uint kend = min(p.k, kbeg + p.k_chunk);

    vec4 acc[TM * TN / 4u]; /* acc[i * TN / 4 + h]: row i of the thread, column group h */
    [[unroll]] for (uint i = 0; i < TM * TN / 4u; i++)
        acc[i] = vec4(0.0);

    fetch(tid, row0, col0, kbeg, kend);
    stash(tid, 0u);
    barrier();
    uint buf = 0u;
    for (uint k0 = kbeg; k0 < kend; k0 += BK) {
        bool more = k0 + BK < kend;
        if (more)
            fetch(tid, row0, col0, k0 + BK, kend);
        uint a0 = buf * BK * SA, b0 = buf * BK * SB;
        [[unroll]] for (uint kk = 0; kk < BK; kk++) {
            vec4 a[TM / 4u], b[TN / 4u];
            [[unroll]] for (uint g = 0; g < TM / 4u; g++)
                a[g] = As[a0 + kk * SA + g * TY + ty];
            [[unroll]] for (uint h = 0; h < TN / 4u; h++)
                b[h] = Bs[b0 + kk * SB + h * TX + tx];
            [[unroll]] for (uint g = 0; g < TM / 4u; g++)
                [[unroll]] for (uint i = 0; i < 4u; i++)
                    [[unroll]] for (uint h = 0; h < TN / 4u; h++)
                        acc[(g * 4u + i) * (TN / 4u) + h] =
                            fma(vec4(a[g][i]), b[h], acc[(g * 4u + i) * (TN / 4u) + h]);
        }
        if (more)
            stash(tid, buf ^ 1u);
        barrier();
        buf ^= 1u;
    }

    [[unroll]] for (uint g = 0; g < TM / 4u; g++)
        [[unroll]] for (uint i = 0; i < 4u; i++)
            [[unroll]] for (uint h = 0; h < TN / 4u; h++)
                store(row0 + g * 4u * TY + 4u * ty + i, col0 + h * 4u * TX + 4u * tx,
                      acc[(g * 4u + i) * (TN / 4u) + h]);
}
