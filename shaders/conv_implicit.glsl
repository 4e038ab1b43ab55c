/*
 * conv_implicit.glsl - 2-D convolution as an implicit GEMM, for GPUs (the conv_implicit
 * variant, conv_implicit.comp; on 16-bit operands conv_lowp_implicit,
 * conv_implicit_lowp.comp; host: engine/kernels/conv_implicit.c, plan: conv_plan.c). The
 * im2col gather happens inside the tile loads, straight from the NCHW tensors: no
 * unfolded matrix is written or read. One shader, three passes (PASS, CONV_PASS_* in
 * push_conv.h), each a GEMM per group gi = gl_WorkGroupID.z % groups, with cg = c /
 * groups input and og = oc / groups output channels, KK = KH KW taps t = (ky, kx),
 * P = oh ow, HW = h w:
 *
 *   FORWARD  y[s, gi og + o, q] = sum over (ci, t) of w[gi og + o, ci, t] x[s, gi cg + ci,
 *            oy SH - ph + ky DH, ox SW - pw + kx DW] (0 in the padding), q = (oy, ox);
 *            M = og, N = n P, K = cg KK. Epilogue: + bias, relu (CONV_BIAS, CONV_RELU).
 *   WEIGHT   dw[gi og + o, (ci, t)] = sum over (s, q) of dy[s, gi og + o, q] x[s, gi cg +
 *            ci, (the same window)]; M = og, N = cg KK, K = n P. Column bias_col of C is
 *            the bias gradient (that column of the gathered operand is all ones), so dy
 *            is read once for both. K is split over gl_WorkGroupID.z / groups when the
 *            tiles alone are too few (CONV_SPLIT: raw partial sums into the workspace
 *            [split][oc][ncols], conv_reduce.comp adds them in order: deterministic).
 *   DATA     dx[s, gi cg + ci, (iy, ix)] = sum over (o, t) of w[gi og + o, ci, t] dy[s,
 *            gi og + o, oy, ox] where oy SH - ph + ky DH = iy and ox SW - pw + kx DW = ix
 *            (the transposed convolution: a tap whose oy would not be a whole, in-range
 *            output row reads 0); M = cg, N = n HW, K = og KK. Every dx element is one
 *            output of C: written once, no atomics.
 *   With CONV_MASK, dy is read as (relu_y > 0 ? dy : 0): the backward of a fused relu.
 *   Outputs with CONV_READ_OUT add beta times their old value (dx, dw; db: beta_b).
 *
 * The tile machinery is gemm_tile.comp's: a workgroup of TX x TY threads (TX = BN / TN,
 * TY = BM / TM) computes a BM x BN tile of C, each thread TM x TN outputs (rows
 * g 4 TY + 4 ty + i, columns h 4 TX + 4 tx + j), walking K in slabs of BK staged
 * k-major in double-buffered shared memory (As[k][m], Bs[k][n], rows padded by 4 floats):
 * the next slab is loaded into registers while the current one is multiplied. The loads
 * are scalar gathers, assigned so that no runtime division is paid per element:
 *   A (w, or dy in WEIGHT) with k the fast index: thread tid loads k = tid % BK of each
 *     of its rows (THREADS is a multiple of BK), consecutive threads consecutive
 *     addresses;
 *   B in FORWARD and DATA with n the fast index: thread tid always loads column
 *     tid % BN (THREADS is a multiple of BN), whose position (sample, oy, ox or iy, ix)
 *     it locates once per tile; per element only the tap (ci or o, ky, kx) is derived,
 *     by divisions by the specialization constants KK and KW;
 *   B in WEIGHT with k the fast index: the thread's k (= tid % BK, the same for its A
 *     and B loads) is located once per slab (two divisions), its columns (ci, ky, kx)
 *     once per tile.
 * Outside [M, N] and past the split's K everything staged is zero and nothing is stored.
 * The gathers and the output columns (locate_column, locate_k, load_a, load_b, fetch,
 * out_column) are conv_gather.glsl's, shared with the fragment tiling of conv_frag.glsl.
 */
#extension GL_EXT_control_flow_attributes : require
#include "push_conv.h"
#include "spec.h"

layout(local_size_x_id = SPEC_WG) in;
layout(constant_id = SPEC_CONV_KH) const uint KH = 3;
layout(constant_id = SPEC_CONV_KW) const uint KW = 3;
layout(constant_id = SPEC_CONV_SH) const uint SH = 1;
layout(constant_id = SPEC_CONV_SW) const uint SW = 1;
layout(constant_id = SPEC_CONV_DH) const uint DH = 1;
layout(constant_id = SPEC_CONV_DW) const uint DW = 1;
layout(constant_id = SPEC_CONV_IMPLICIT_PASS) const uint PASS = 0;
layout(constant_id = SPEC_CONV_IMPLICIT_BM) const uint BM = 64;
layout(constant_id = SPEC_CONV_IMPLICIT_BN) const uint BN = 64;
layout(constant_id = SPEC_CONV_IMPLICIT_BK) const uint BK = 16;
layout(constant_id = SPEC_CONV_IMPLICIT_TM) const uint TM = 4;
layout(constant_id = SPEC_CONV_IMPLICIT_TN) const uint TN = 4;

const uint KK = KH * KW;
const uint TX = BN / TN;
const uint TY = BM / TM;
const uint THREADS = TX * TY;
const uint SA = (BM + 4u) / 4u; /* vec4s per k-row of As */
const uint SB = (BN + 4u) / 4u;
const uint LA = BM * BK / THREADS; /* loads of A per thread and slab */
const uint LB = BN * BK / THREADS;
const bool B_BY_N = PASS != CONV_PASS_WEIGHT; /* B's fast index: n, else k */
const uint NONE = 0xffffffffu;

layout(push_constant) uniform Push { push_conv_gemm p; };
#ifdef CONV_LOWP
/* 16-bit operands (conv_implicit_lowp.comp): fp16 or bf16 (CONV_BF16), widened exactly */
#include "dtype.h"
layout(std430, binding = 0) readonly buffer Gbuf { uint16_t G16[]; }; /* x, or dy (DATA) */
layout(std430, binding = 1) readonly buffer Abuf { uint16_t A16[]; }; /* w, or dy (WEIGHT) */
float widen(uint h)
{
    return (p.flags & CONV_BF16) != 0u ? dtype_bf16_value(h) : dtype_f16_value(h);
}
#define G_AT(i) widen(uint(G16[i]))
#define A_AT(i) widen(uint(A16[i]))
#else
layout(std430, binding = 0) readonly buffer Gbuf { float G[]; }; /* x, or dy (DATA) */
layout(std430, binding = 1) readonly buffer Abuf { float A[]; }; /* w, or dy (WEIGHT) */
#define G_AT(i) G[i]
#define A_AT(i) A[i]
#endif
layout(std430, binding = 2) buffer Obuf { float O[]; };         /* y, dx, dw, partials */
layout(std430, binding = 2) buffer O4buf { vec4 O4[]; };
layout(std430, binding = 3) readonly buffer Ebuf { float E[]; }; /* bias or relu_y */
layout(std430, binding = 4) buffer Dbuf { float D[]; };         /* db */

shared vec4 As[2 * BK * SA];
shared vec4 Bs[2 * BK * SB];

float ra[LA], rb[LB]; /* the next slab, in registers */

/* FORWARD, DATA: the tensor index of each of the thread's output columns, or NONE */
uint ocol[TN];

#include "conv_gather.glsl"

/* ra, rb into shared buffer `buf`, k-major. */
void stash(uint tid, uint buf)
{
    uint a0 = buf * BK * SA, b0 = buf * BK * SB;
    [[unroll]] for (uint e = 0; e < LA; e++) {
        uint q = tid + e * THREADS, m = q / BK, kk = q % BK;
        As[a0 + kk * SA + m / 4u][m % 4u] = ra[e];
    }
    [[unroll]] for (uint e = 0; e < LB; e++) {
        uint q = tid + e * THREADS;
        uint n = B_BY_N ? q % BN : q / BK, kk = B_BY_N ? q / BN : q % BK;
        Bs[b0 + kk * SB + n / 4u][n % 4u] = rb[e];
    }
}

/* Row `row` of C, columns col..col+3 (h: the thread's column group), into the output. */
void store(uint row, uint col, uint h, vec4 v, uint gi, uint split)
{
    if (row >= p.m)
        return;
    uint cg = p.cg, og = p.og;
    if (PASS == CONV_PASS_WEIGHT) {
        uint o = gi * og + row;
        [[unroll]] for (uint j = 0; j < 4u; j++) {
            uint n = col + j;
            if (n >= p.ncols)
                continue;
            if ((p.flags & CONV_SPLIT) != 0u) {
                O[p.o_off + (split * p.oc + o) * p.ncols + n] = v[j];
            } else if (n == p.bias_col) {
                uint at = p.d_off + o;
                D[at] = (p.flags & CONV_READ_DB) != 0u ? v[j] + p.beta_b * D[at] : v[j];
            } else {
                uint at = p.o_off + o * p.ldo + n;
                O[at] = (p.flags & CONV_READ_OUT) != 0u ? v[j] + p.beta * O[at] : v[j];
            }
        }
        return;
    }
    uint plane; /* the output channel's plane: y (s, o) or dx (s, ci) minus the sample */
    if (PASS == CONV_PASS_FORWARD) {
        uint o = gi * og + row;
        plane = o * p.oh * p.ow;
        if ((p.flags & CONV_BIAS) != 0u)
            v += E[p.e_off + o];
        if ((p.flags & CONV_RELU) != 0u)
            v = max(v, vec4(0.0));
    } else {
        plane = (gi * cg + row) * p.h * p.w;
    }
    if ((p.flags & CONV_VEC_OUT) != 0u) { /* planes of 4k: the 4 columns are adjacent */
        if (ocol[4u * h] == NONE)
            return;
        uint at = (p.o_off + ocol[4u * h] + plane) / 4u;
        O4[at] = (p.flags & CONV_READ_OUT) != 0u ? v + p.beta * O4[at] : v;
        return;
    }
    [[unroll]] for (uint j = 0; j < 4u; j++) {
        if (ocol[4u * h + j] == NONE)
            continue;
        uint at = p.o_off + ocol[4u * h + j] + plane;
        O[at] = (p.flags & CONV_READ_OUT) != 0u ? v[j] + p.beta * O[at] : v[j];
    }
}

void main()
{
    uint tid = gl_LocalInvocationID.x, tx = tid % TX, ty = tid / TX;
    uint gi = gl_WorkGroupID.z % p.groups, split = gl_WorkGroupID.z / p.groups;
    uint row0 = gl_WorkGroupID.y * BM, col0 = (gl_WorkGroupID.x + p.tile0) * BN;
    uint kbeg = split * p.k_chunk;
    uint kend = min(p.k, kbeg + p.k_chunk);
    if (B_BY_N)
        locate_column(col0 + tid % BN, gi);

    vec4 acc[TM * TN / 4u]; /* acc[i * TN / 4 + h]: row i of the thread, column group h */
    [[unroll]] for (uint i = 0; i < TM * TN / 4u; i++)
        acc[i] = vec4(0.0);

    fetch(tid, row0, col0, kbeg, kend, gi);
    stash(tid, 0u);
    barrier();
    uint buf = 0u;
    for (uint k0 = kbeg; k0 < kend; k0 += BK) {
        bool more = k0 + BK < kend;
        if (more)
            fetch(tid, row0, col0, k0 + BK, kend, gi);
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

    [[unroll]] for (uint h = 0; h < TN / 4u; h++)
        [[unroll]] for (uint j = 0; j < 4u; j++)
            ocol[4u * h + j] = PASS == CONV_PASS_WEIGHT
                                   ? NONE
                                   : out_column(col0 + h * 4u * TX + 4u * tx + j);
    [[unroll]] for (uint g = 0; g < TM / 4u; g++)
        [[unroll]] for (uint i = 0; i < 4u; i++)
            [[unroll]] for (uint h = 0; h < TN / 4u; h++)
                store(row0 + g * 4u * TY + 4u * ty + i, col0 + h * 4u * TX + 4u * tx, h,
                      acc[(g * 4u + i) * (TN / 4u) + h], gi, split);
}
