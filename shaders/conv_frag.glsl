/*
 * conv_frag.glsl - the implicit-GEMM convolution (conv_implicit.glsl's three passes, the
 * same GEMMs per group and the same gathers: conv_gather.glsl) on the 16-bit GEMM's tiling
 * (gemm_lowp.glsl: warps of TM x TN fragments, k-contiguous 16-bit or fp32 staging,
 * lowp_frag.glsl's multiplication and epilogue), so that it runs on cooperative matrices.
 * Host: engine/kernels/conv_implicit.c, plan: kc_conv_frag_plan (conv_plan.c).
 *
 * The including .comp says how fragments are multiplied:
 *   LOWP_FLOAT    conv_frag.comp (conv_lowp_frag; conv_lowp_coopmat's bf16 where the device
 *                 has no bf16 matrices): fp32 shared memory and multiply-adds. Needs
 *                 16-bit storage only, so lavapipe runs it.
 *   LOWP_COOPMAT  conv_coopmat_f16.comp / _bf16.comp (LOWP_ELEM float16_t / bfloat16_t):
 *                 the matrix instruction of VK_KHR_cooperative_matrix, fp32 accumulators.
 * Everything else (the gathers, the staging, the fragment indexing, the stores) is the
 * same text, so the kernel lavapipe runs checks all of it but the matrix instruction.
 *
 * A workgroup of THREADS = 4 SG threads, 2 x 2 warps, computes a BM x BN tile of C. K
 * goes in slabs of BK: every thread gathers LA elements of A and LB of B of the slab
 * after the one being multiplied into registers (conv_gather.glsl's fetch: A with k the
 * fast index, B with n the fast index in FORWARD and DATA, k in WEIGHT; the operands are
 * widened exactly to fp32 as read), then stores them into the other half of the
 * double-buffered shared memory, k-contiguous: As[m][k], Bs[n][k], rows LDS apart (as
 * gemm_lowp.glsl: a fragment of A is then a row-major TM x TK load, one of B column-major),
 * narrowed back to the 16-bit type for the matrix instruction (exact: the values came
 * from it). The plan guarantees THREADS a multiple of BK and of BN and BM BK, BN BK
 * multiples of THREADS (the load assignment). Every output goes through store_c: + bias
 * and relu (FORWARD), the NCHW column (FORWARD, DATA), dw, db or the split's partial sums
 * (WEIGHT), beta times the old value.
 */
#extension GL_EXT_control_flow_attributes : require
#include "dtype.h"
#include "push_conv.h"
#include "spec.h"

layout(local_size_x_id = SPEC_WG) in;
layout(constant_id = SPEC_CONV_KH) const uint KH = 3;
layout(constant_id = SPEC_CONV_KW) const uint KW = 3;
layout(constant_id = SPEC_CONV_SH) const uint SH = 1;
layout(constant_id = SPEC_CONV_SW) const uint SW = 1;
layout(constant_id = SPEC_CONV_DH) const uint DH = 1;
layout(constant_id = SPEC_CONV_DW) const uint DW = 1;
layout(constant_id = SPEC_CONV_FRAG_PASS) const uint PASS = 0;
layout(constant_id = SPEC_CONV_FRAG_BM) const uint BM = 32;
layout(constant_id = SPEC_CONV_FRAG_BN) const uint BN = 32;
layout(constant_id = SPEC_CONV_FRAG_BK) const uint BK = 32;
layout(constant_id = SPEC_CONV_FRAG_TM) const uint TM = 8;
layout(constant_id = SPEC_CONV_FRAG_TN) const uint TN = 8;
layout(constant_id = SPEC_CONV_FRAG_TK) const uint TK = 8;
layout(constant_id = SPEC_CONV_FRAG_SG) const uint SG = 8;

const uint KK = KH * KW;
const uint WM = BM / 2u, WN = BN / 2u; /* 2 x 2 warps */
const uint WARPS_M = 2u;
const uint THREADS = WARPS_M * (BN / WN) * SG;
const uint FM = WM / TM, FN = WN / TN; /* fragments per warp */
const uint PER_LANE = TM * TN / SG;    /* fragment elements per lane */
const uint LA = BM * BK / THREADS;     /* gathers per thread and slab */
const uint LB = BN * BK / THREADS;
const bool B_BY_N = PASS != CONV_PASS_WEIGHT; /* B's fast index: n, else k */
const uint NONE = 0xffffffffu;

layout(push_constant) uniform Push { push_conv_gemm p; };
/* x, w, dy as stored (fp16 or bf16: CONV_BF16), widened exactly to fp32 */
layout(std430, binding = 0) readonly buffer Gbuf { uint16_t G16[]; }; /* x, or dy (DATA) */
layout(std430, binding = 1) readonly buffer Abuf { uint16_t A16[]; }; /* w, or dy (WEIGHT) */
float widen(uint h)
{
    return (p.flags & CONV_BF16) != 0u ? dtype_bf16_value(h) : dtype_f16_value(h);
}
#define G_AT(i) widen(uint(G16[i]))
#define A_AT(i) widen(uint(A16[i]))
layout(std430, binding = 2) buffer Obuf { float O[]; };         /* y, dx, dw, partials */
layout(std430, binding = 3) readonly buffer Ebuf { float E[]; }; /* bias or relu_y */
layout(std430, binding = 4) buffer Dbuf { float D[]; };         /* db */

#if defined(LOWP_COOPMAT)
#define SH_T LOWP_ELEM
#define LDS (BK + 8u)
#else
#define SH_T float
#define LDS (BK + 1u)
#endif
shared SH_T As[2u * BM * LDS];
shared SH_T Bs[2u * BN * LDS];
#if defined(LOWP_COOPMAT)
shared float Cs[THREADS / SG * TM * TN];
#endif

float ra[LA], rb[LB]; /* the next slab, in registers */
uint g_gi, g_split;   /* this workgroup's group and split of K */

#include "conv_gather.glsl"

/* ra, rb into shared buffer `buf`: As[m][k], Bs[n][k] (the element order of fetch). */
void stash(uint tid, uint buf)
{
    uint a0 = buf * BM * LDS, b0 = buf * BN * LDS;
    [[unroll]] for (uint e = 0u; e < LA; e++) {
        uint q = tid + e * THREADS;
        As[a0 + (q / BK) * LDS + q % BK] = SH_T(ra[e]);
    }
    [[unroll]] for (uint e = 0u; e < LB; e++) {
        uint q = tid + e * THREADS;
        uint n = B_BY_N ? q % BN : q / BK, kk = B_BY_N ? q / BN : q % BK;
        Bs[b0 + n * LDS + kk] = SH_T(rb[e]);
    }
}

/* Output (row, col) of this group's C, v its sum over the split's K, into y, dx, dw, db
 * or the partial sums. */
void store_c(uint row, uint col, float v)
{
    if (row >= p.m || col >= p.ncols)
        return;
    uint gi = g_gi;
    if (PASS == CONV_PASS_WEIGHT) {
        uint o = gi * p.og + row;
        if ((p.flags & CONV_SPLIT) != 0u) {
            O[p.o_off + (g_split * p.oc + o) * p.ncols + col] = v;
        } else if (col == p.bias_col) {
            uint at = p.d_off + o;
            D[at] = (p.flags & CONV_READ_DB) != 0u ? v + p.beta_b * D[at] : v;
        } else {
            uint at = p.o_off + o * p.ldo + col;
            O[at] = (p.flags & CONV_READ_OUT) != 0u ? v + p.beta * O[at] : v;
        }
        return;
    }
    uint plane; /* the output channel's plane: y (s, o) or dx (s, ci) minus the sample */
    if (PASS == CONV_PASS_FORWARD) {
        uint o = gi * p.og + row;
        plane = o * p.oh * p.ow;
        if ((p.flags & CONV_BIAS) != 0u)
            v += E[p.e_off + o];
        if ((p.flags & CONV_RELU) != 0u)
            v = max(v, 0.0);
    } else {
        plane = (gi * p.cg + row) * p.h * p.w;
    }
    uint at = p.o_off + out_column(col) + plane;
    O[at] = (p.flags & CONV_READ_OUT) != 0u ? v + p.beta * O[at] : v;
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
    uint gi = gl_WorkGroupID.z % p.groups;
    g_gi = gi;
    g_split = gl_WorkGroupID.z / p.groups;
    uint wm0 = (warp % WARPS_M) * WM, wn0 = (warp / WARPS_M) * WN;
    uint row0 = gl_WorkGroupID.y * BM, col0 = (gl_WorkGroupID.x + p.tile0) * BN;
    uint kbeg = g_split * p.k_chunk;
    uint kend = min(p.k, kbeg + p.k_chunk);
    if (B_BY_N)
        locate_column(col0 + tid % BN, gi);

    zero_acc();
    fetch(tid, row0, col0, kbeg, kend, gi);
    stash(tid, 0u);
    barrier();
    uint buf = 0u;
    for (uint k0 = kbeg; k0 < kend; k0 += BK) {
        bool more = k0 + BK < kend;
        if (more)
            fetch(tid, row0, col0, k0 + BK, kend, gi);
        multiply(buf, wm0, wn0, lane);
        if (more)
            stash(tid, buf ^ 1u);
        barrier();
        buf ^= 1u;
    }
    store_fragments(warp, lane, row0 + wm0, col0 + wn0);
}
