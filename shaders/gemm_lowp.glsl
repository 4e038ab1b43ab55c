/*
 * gemm_lowp.glsl - C[M,N] = alpha * op(A) * op(B) + beta * C for 16-bit A and B (fp16 or
 * bf16) with fp32 accumulation, C fp32 or of the inputs' type (rounded once, as
 * shaders/dtype.h rounds). Row-major; op() transposes per trans_a / trans_b. The host
 * plans the tiles (engine/kernels/gemm_lowp.c) and checks every shape. The transposes and
 * the types are push constants (GEMM_AB_BF16, GEMM_C_16): uniform branches in the staging
 * and the epilogue, outside the multiply-adds.
 *
 * One tiling for every variant; the including .comp says how fragments are multiplied:
 *   LOWP_FLOAT    gemm_half.comp: A and B read from 16-bit storage as uint16_t and widened
 *                 to fp32 exactly (GEMM_AB_BF16 says which type), fp32 shared memory and fp32
 *                 multiply-adds. Needs 16-bit storage only.
 *   LOWP_HALF     gemm_half_f16.comp: fp16 in shared memory; each output's products over
 *                 one K slab summed with fp16 multiply-adds, that sum added into fp32.
 *   LOWP_COOPMAT  gemm_coopmat_f16.comp / _bf16.comp (LOWP_ELEM float16_t / bfloat16_t):
 *                 fragments loaded from shared memory into cooperative matrices and
 *                 multiplied by the matrix instruction (VK_KHR_cooperative_matrix) into
 *                 fp32 accumulator matrices.
 * Only the multiplication differs, so lavapipe, which runs the first two, checks the
 * loads, staging, fragment indexing and epilogue the cooperative-matrix kernels share.
 * The fragment half (accumulators, multiply, store_fragments) is lowp_frag.glsl, shared
 * with the convolution on this tiling (conv_frag.glsl).
 *
 * A workgroup computes a BM x BN tile of C: (BM / WM) x (BN / WN) warps of SG lanes, warp
 * w taking the WM x WN block at rows (w % (BM / WM)) WM, columns (w / (BM / WM)) WN, as
 * (WM / TM) x (WN / TN) fragments of TM x TN. K goes in slabs of BK:
 *  - every thread loads its share of the BM x BK block of op(A) and the BK x BN block of
 *    op(B) in runs of 4 elements along whichever dimension is stored contiguously (a
 *    vector read where the host checked the alignment: GEMM_VEC_A / GEMM_VEC_B, else 4
 *    element reads), into registers, for the slab after the one being multiplied;
 *  - shared memory holds both blocks k-contiguous: As[m][k] and Bs[n][k], rows LDS apart
 *    (padded: 16 bytes for the matrix loads' alignment, else to spread the banks), twice
 *    (double-buffered, one barrier per slab). A fragment of op(A) is then a row-major
 *    TM x TK load and one of op(B) a column-major TK x TN load;
 *  - the registers go into the other buffer.
 * Epilogue: fragment element idx of a warp (row idx / TN, column idx % TN) belongs to lane
 * idx % SG (the cooperative path first stores the fragment into the warp's slice of
 * shared memory Cs); the lane writes alpha * acc + beta * C there. Outside [M, N] and past
 * K everything staged is zero and nothing is stored.
 */
#include "dtype.h"
#include "push.h"
#include "spec.h"

layout(local_size_x_id = SPEC_WG) in;
layout(constant_id = SPEC_LOWP_BM) const uint BM = 64;
layout(constant_id = SPEC_LOWP_BN) const uint BN = 64;
layout(constant_id = SPEC_LOWP_BK) const uint BK = 16;
layout(constant_id = SPEC_LOWP_WM) const uint WM = 32;
layout(constant_id = SPEC_LOWP_WN) const uint WN = 32;
layout(constant_id = SPEC_LOWP_TM) const uint TM = 16;
layout(constant_id = SPEC_LOWP_TN) const uint TN = 16;
layout(constant_id = SPEC_LOWP_TK) const uint TK = 16;
layout(constant_id = SPEC_LOWP_SG) const uint SG = 32;

const uint WARPS_M = BM / WM;
const uint THREADS = WARPS_M * (BN / WN) * SG;
const uint FM = WM / TM, FN = WN / TN; /* fragments per warp */
const uint PER_LANE = TM * TN / SG;    /* fragment elements per lane */
const uint LA = (BM * BK / 4u + THREADS - 1u) / THREADS; /* runs of A per thread, slab */
const uint LB = (BN * BK / 4u + THREADS - 1u) / THREADS;

layout(push_constant) uniform Push { push_gemm p; };

#if defined(LOWP_FLOAT)
#define SH_T float
#define REG4 vec4
#define LDS (BK + 1u)
layout(std430, binding = 0) readonly buffer Abuf { uint16_t A[]; };
layout(std430, binding = 0) readonly buffer A4buf { u16vec4 A4[]; };
layout(std430, binding = 1) readonly buffer Bbuf { uint16_t B[]; };
layout(std430, binding = 1) readonly buffer B4buf { u16vec4 B4[]; };
/* (16-bit values may only be loaded, stored and converted: widened as uint here) */
float widen(uint h)
{
    return (p.flags & GEMM_AB_BF16) != 0u ? dtype_bf16_value(h) : dtype_f16_value(h);
}
vec4 widen4(uvec4 v) { return vec4(widen(v.x), widen(v.y), widen(v.z), widen(v.w)); }
#define READ1(X, i) widen(uint(X[i]))
#define READ4(X4, i) widen4(uvec4(X4[(i) / 4u]))
#else
#if defined(LOWP_HALF)
#define LOWP_ELEM float16_t
#define LOWP_ELEM4 f16vec4
#define LDS (BK + 2u)
#else
#define LDS (BK + 8u)
#endif
#define SH_T LOWP_ELEM
#define REG4 LOWP_ELEM4
layout(std430, binding = 0) readonly buffer Abuf { LOWP_ELEM A[]; };
layout(std430, binding = 0) readonly buffer A4buf { LOWP_ELEM4 A4[]; };
layout(std430, binding = 1) readonly buffer Bbuf { LOWP_ELEM B[]; };
layout(std430, binding = 1) readonly buffer B4buf { LOWP_ELEM4 B4[]; };
#define READ1(X, i) X[i]
#define READ4(X4, i) X4[(i) / 4u]
#endif
layout(std430, binding = 2) buffer Cbuf { float C[]; };
layout(std430, binding = 2) buffer Chbuf { uint16_t Ch[]; };

shared SH_T As[2u * BM * LDS];
shared SH_T Bs[2u * BN * LDS];
#if defined(LOWP_COOPMAT)
shared float Cs[THREADS / SG * TM * TN];
#endif

/* Four consecutive elements of A at stored row r, columns c..c+3 (zero outside rows x
 * cols); the same for B. */
REG4 run_a(uint r, uint c, uint rows, uint cols)
{
    REG4 v = REG4(0.0);
    if (r >= rows)
        return v;
    uint i = p.a_off + r * p.lda + c;
    if ((p.flags & GEMM_VEC_A) != 0u)
        return c < cols ? READ4(A4, i) : v;
    [[unroll]] for (uint j = 0u; j < 4u; j++)
        if (c + j < cols)
            v[j] = READ1(A, i + j);
    return v;
}

REG4 run_b(uint r, uint c, uint rows, uint cols)
{
    REG4 v = REG4(0.0);
    if (r >= rows)
        return v;
    uint i = p.b_off + r * p.ldb + c;
    if ((p.flags & GEMM_VEC_B) != 0u)
        return c < cols ? READ4(B4, i) : v;
    [[unroll]] for (uint j = 0u; j < 4u; j++)
        if (c + j < cols)
            v[j] = READ1(B, i + j);
    return v;
}

REG4 ra[LA], rb[LB]; /* the next slab, in registers */

/* Slab k0 (k < kend) into ra, rb. Run e of a thread is run tid + e * THREADS of the
 * block, counted along the stored rows. */
void fetch(uint tid, uint row0, uint col0, uint k0, uint kend)
{
    [[unroll]] for (uint e = 0u; e < LA; e++) {
        uint q = tid + e * THREADS;
        if (q >= BM * BK / 4u)
            break;
        if (p.trans_a == 0u) /* A [M, K]: BK / 4 runs per row of the block */
            ra[e] = run_a(row0 + q / (BK / 4u), k0 + 4u * (q % (BK / 4u)), p.m, kend);
        else /* A [K, M]: BM / 4 runs per row */
            ra[e] = run_a(k0 + q / (BM / 4u), row0 + 4u * (q % (BM / 4u)), kend, p.m);
    }
    [[unroll]] for (uint e = 0u; e < LB; e++) {
        uint q = tid + e * THREADS;
        if (q >= BN * BK / 4u)
            break;
        if (p.trans_b == 0u) /* B [K, N] */
            rb[e] = run_b(k0 + q / (BN / 4u), col0 + 4u * (q % (BN / 4u)), kend, p.n);
        else /* B [N, K] */
            rb[e] = run_b(col0 + q / (BK / 4u), k0 + 4u * (q % (BK / 4u)), p.n, kend);
    }
}

/* ra, rb into shared buffer `buf`: As[m][k], Bs[n][k]. */
void stash(uint tid, uint buf)
{
    uint a0 = buf * BM * LDS, b0 = buf * BN * LDS;
    [[unroll]] for (uint e = 0u; e < LA; e++) {
        uint q = tid + e * THREADS;
        if (q >= BM * BK / 4u)
            break;
        if (p.trans_a == 0u) {
            uint m = q / (BK / 4u), k = 4u * (q % (BK / 4u));
            [[unroll]] for (uint j = 0u; j < 4u; j++)
                As[a0 + m * LDS + k + j] = ra[e][j];
        } else {
            uint k = q / (BM / 4u), m = 4u * (q % (BM / 4u));
            [[unroll]] for (uint j = 0u; j < 4u; j++)
                As[a0 + (m + j) * LDS + k] = ra[e][j];
        }
    }
    [[unroll]] for (uint e = 0u; e < LB; e++) {
        uint q = tid + e * THREADS;
        if (q >= BN * BK / 4u)
            break;
        if (p.trans_b == 0u) {
            uint k = q / (BN / 4u), n = 4u * (q % (BN / 4u));
            [[unroll]] for (uint j = 0u; j < 4u; j++)
                Bs[b0 + (n + j) * LDS + k] = rb[e][j];
        } else {
            uint n = q / (BK / 4u), k = 4u * (q % (BK / 4u));
            [[unroll]] for (uint j = 0u; j < 4u; j++)
                Bs[b0 + n * LDS + k + j] = rb[e][j];
        }
    }
}

/* C's element i as fp32; an output v (the fragment's sum) as alpha * v + beta * C. */
float read_c(uint i)
{
    if ((p.flags & GEMM_C_16) == 0u)
        return C[i];
    uint h = uint(Ch[i]);
    return (p.flags & GEMM_AB_BF16) != 0u ? dtype_bf16_value(h) : dtype_f16_value(h);
}

void store_c(uint r, uint c, float v)
{
    if (r >= p.m || c >= p.n)
        return;
    uint i = p.c_off + r * p.ldc + c;
    float o = p.alpha == 0.0 ? 0.0 : p.alpha * v;
    if ((p.flags & GEMM_READ_C) != 0u)
        o += p.beta * read_c(i);
    if ((p.flags & GEMM_C_16) == 0u)
        C[i] = o;
    else
        Ch[i] = uint16_t((p.flags & GEMM_AB_BF16) != 0u ? dtype_f32_to_bf16(floatBitsToUint(o))
                                                        : dtype_f32_to_f16(floatBitsToUint(o)));
}

#include "lowp_frag.glsl"

void main()
{
    uint tid = gl_LocalInvocationIndex;
#if defined(LOWP_COOPMAT)
    uint warp = gl_SubgroupID, lane = gl_SubgroupInvocationID;
#else
    uint warp = tid / SG, lane = tid % SG;
#endif
    uint wm0 = (warp % WARPS_M) * WM, wn0 = (warp / WARPS_M) * WN;
    uint row0 = gl_WorkGroupID.y * BM, col0 = gl_WorkGroupID.x * BN;

    zero_acc();
    fetch(tid, row0, col0, 0u, p.k);
    stash(tid, 0u);
    barrier();
    uint buf = 0u;
    for (uint k0 = 0u; k0 < p.k; k0 += BK) {
        bool more = k0 + BK < p.k;
        if (more)
            fetch(tid, row0, col0, k0 + BK, p.k);
        multiply(buf, wm0, wn0, lane);
        if (more)
            stash(tid, buf ^ 1u);
        barrier();
        buf ^= 1u;
    }
    store_fragments(warp, lane, row0 + wm0, col0 + wn0);
}
