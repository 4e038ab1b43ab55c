/*
 * gemm_cpu.glsl - C[M,N] = alpha * op(A) * op(B) + beta * C, for CPU-type devices
 * (lavapipe: each invocation is one lane of an 8-wide SIMD vector, a subgroup is one
 * vector). Row-major; op() transposes per TRANS_A / TRANS_B. Included by gemm_cpu.comp
 * (A, B and C read through storage texel buffers) and gemm_cpu_sampler.comp (A and B
 * through uniform texel buffers: for devices without storage texel buffers of R32F /
 * RGBA32F, which the Vulkan spec requires, so in practice never). Both write C through
 * a storage buffer.
 *
 * One workgroup = one subgroup of 8 lanes computes a 16x32 tile of C. Lane l owns
 * columns col0+4l .. col0+4l+3 of all 16 rows: 16 vec4 accumulators. Per 4 values of k:
 *  - B: 4 vec4 texel reads per lane. Across the subgroup one read covers 32
 *    contiguous floats of a row of B, or (TRANS_B) a 4x4 block of Bt per lane.
 *  - A: each lane reads one vec4 per 8 rows, so the subgroup holds the 16x4 block of
 *    A; subgroupShuffle with a constant lane index turns each value into a splat (one
 *    vector permute on lavapipe, whereas subgroupBroadcast is a loop over lanes there).
 *  - 16 x 4 vec4 multiply-adds per lane.
 * No shared memory and no barrier(): on lavapipe shared-memory loads run one lane at a
 * time and barriers are coroutine switches. imageLoad from a storage texel buffer is
 * an inlined vector gather on lavapipe; texelFetch from a uniform texel buffer is a
 * call that spills every live register, which is why the storage kind comes first.
 * See bench/gemm_notes.md for the measurements behind these choices.
 *
 * With VEC_A / VEC_B the host bound an RGBA32F view (one read = 4 floats along a row)
 * because that operand's offset and leading dimension are multiples of 4; otherwise an
 * R32F view and 4 scalar reads. With VEC_C each lane stores (and, with READ_C, loads) a
 * vec4 of C per row: a storage-buffer store is a loop over the lanes on lavapipe, one
 * loop for a vec4 where 4 floats are 4 loops (a texel store is a loop per component,
 * so no better); the host sets it when C's offset and ldc are multiples of 4 and N is
 * too (no vec4 straddles the edge). C is read, when beta != 0, through binding 3: a
 * texel view of C (RGBA32F with VEC_C), whose loads are gathers, not lane loops.
 * TRANS_C stores the transpose: the host computes C^T = op(B)^T op(A)^T that way when
 * N is much narrower than the 32 columns of a tile (M and N swap, so do A and B).
 * Rows / columns past M / N are clamped on read and dropped on store; in the last,
 * partial k-step the values past K are zeroed, so garbage never reaches a kept output.
 */
#extension GL_EXT_control_flow_attributes : require
#extension GL_EXT_samplerless_texture_functions : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#include "push.h"
#include "spec.h"

layout(local_size_x = 8) in;

layout(constant_id = SPEC_GEMM_CPU_TRANS_A) const uint TRANS_A = 0; /* A is stored [K, M] */
layout(constant_id = SPEC_GEMM_CPU_TRANS_B) const uint TRANS_B = 0; /* B is stored [N, K] */
layout(constant_id = SPEC_GEMM_CPU_VEC_A) const uint VEC_A = 0;   /* A is bound as RGBA32F */
layout(constant_id = SPEC_GEMM_CPU_VEC_B) const uint VEC_B = 0;   /* B is bound as RGBA32F */
layout(constant_id = SPEC_GEMM_CPU_READ_C) const uint READ_C = 0;  /* beta != 0 */
layout(constant_id = SPEC_GEMM_CPU_VEC_C) const uint VEC_C = 0;
layout(constant_id = SPEC_GEMM_CPU_TRANS_C) const uint TRANS_C = 0;

layout(push_constant) uniform Push { push_gemm p; };

#if GEMM_STORAGE_TEXEL
/* Each operand is declared in both formats at the same binding; the specialization
 * constants pick the one that matches the view the host bound, the other is unused
 * (lavapipe has no shaderStorageImageReadWithoutFormat, so the format must be named). */
layout(binding = 0, r32f) uniform readonly imageBuffer A1;
layout(binding = 0, rgba32f) uniform readonly imageBuffer A4;
layout(binding = 1, r32f) uniform readonly imageBuffer B1;
layout(binding = 1, rgba32f) uniform readonly imageBuffer B4;
/* C once more, for reading it when beta != 0 */
layout(binding = 3, r32f) uniform readonly imageBuffer Cr1;
layout(binding = 3, rgba32f) uniform readonly imageBuffer Cr4;
#define LOAD_A1(i) imageLoad(A1, int(i)).x
#define LOAD_A4(i) imageLoad(A4, int(i))
#define LOAD_B1(i) imageLoad(B1, int(i)).x
#define LOAD_B4(i) imageLoad(B4, int(i))
#define LOAD_C1(i) imageLoad(Cr1, int(i)).x
#define LOAD_C4(i) imageLoad(Cr4, int(i))
#else
/* textureBuffer, not samplerBuffer: a uniform texel buffer is an image without a sampler
 * (SPIR-V's OpTypeSampledImage of a buffer is deprecated; spirv-val in the validation
 * layer 1.4.309 warns of it), read with texelFetch (GL_EXT_samplerless_texture_functions) */
layout(binding = 0) uniform textureBuffer A;
layout(binding = 1) uniform textureBuffer B;
#define LOAD_A1(i) texelFetch(A, int(i)).x
#define LOAD_A4(i) texelFetch(A, int(i))
#define LOAD_B1(i) texelFetch(B, int(i)).x
#define LOAD_B4(i) texelFetch(B, int(i))
#define LOAD_C1(i) C[i]
#define LOAD_C4(i) C4[i]
#endif
/* C as floats, and as vec4s where VEC_C says that the view, ldc and N allow it */
layout(std430, binding = 2) buffer Cbuf { float C[]; };
layout(std430, binding = 2) buffer Cbuf4 { vec4 C4[]; };

#define TM 16 /* rows of the tile */
#define TN 32 /* columns of the tile, 4 per lane */

/* Floats row+start .. row+start+3 of A (element indices). With VEC_A the caller passes a
 * start that is a multiple of 4 and whose vec4 lies inside the binding. Without it,
 * `clamp` limits each index to row+last (edges only: loop-invariant or in the tail). */
vec4 fetch_a(uint row, uint start, uint last, bool clamp) {
    if (VEC_A != 0)
        return LOAD_A4((row + start) >> 2);
    vec4 v;
    [[unroll]] for (uint c = 0; c < 4; c++)
        v[c] = LOAD_A1(row + (clamp ? min(start + c, last) : start + c));
    return v;
}
vec4 fetch_b(uint row, uint start, uint last, bool clamp) {
    if (VEC_B != 0)
        return LOAD_B4((row + start) >> 2);
    vec4 v;
    [[unroll]] for (uint c = 0; c < 4; c++)
        v[c] = LOAD_B1(row + (clamp ? min(start + c, last) : start + c));
    return v;
}

vec4 acc[TM]; /* acc[r] = C[row0 + r, col0 + 4*lane .. +3] */
uint lane;
/* Loop-invariant values, computed once in main(): inside the k-loop every push-constant
 * read would be reloaded after each texel fetch call (uniform texel variant). */
uint K, lda, ldb, m_last, n_last, a_off, b_off;
/* Where this lane reads. Along k (A, Bt): the element starting its row, per 8 rows of A
 * or per column c of Bt. Across k (At, B): the column inside the row. */
uint a_base[TM / 8];
uint b_base[4];

/* Accumulates k .. k+3. In the `tail` step k+3 may pass K: those terms are zeroed. */
void kstep(uint k, bool tail) {
    /* A: av[h] holds rows row0+8h .. +7 x k .. k+3, spread over the lanes */
    vec4 av[TM / 8];
    [[unroll]] for (uint h = 0; h < TM / 8; h++) {
        if (TRANS_A == 0) {
            /* lane l: A[row0+8h+l, k .. k+3] */
            av[h] = fetch_a(a_base[h], k, K - 1, tail);
        } else {
            /* lane l: At[k + l/2, row0+8h+4(l%2) .. +3] */
            uint kr = k + (lane >> 1);
            if (tail)
                kr = min(kr, K - 1);
            av[h] = fetch_a(a_off + kr * lda, a_base[h], m_last, true);
        }
    }
    /* B: bv[kk] = B[k+kk, col0+4l .. +3] */
    vec4 bv[4];
    if (TRANS_B == 0) {
        [[unroll]] for (uint kk = 0; kk < 4; kk++) {
            uint kr = tail ? min(k + kk, K - 1) : k + kk;
            bv[kk] = fetch_b(b_off + kr * ldb, b_base[0], n_last, true);
        }
    } else {
        vec4 t[4]; /* t[c] = Bt[col0+4l+c, k .. k+3] */
        [[unroll]] for (uint c = 0; c < 4; c++)
            t[c] = fetch_b(b_base[c], k, K - 1, tail);
        [[unroll]] for (uint kk = 0; kk < 4; kk++)
            bv[kk] = vec4(t[0][kk], t[1][kk], t[2][kk], t[3][kk]);
    }
    if (tail) {
        [[unroll]] for (uint kk = 0; kk < 4; kk++)
            if (k + kk >= K)
                bv[kk] = vec4(0.0);
    }
    /* 16 rows x 4 k multiply-adds */
    [[unroll]] for (uint r = 0; r < TM; r++) {
        [[unroll]] for (uint kk = 0; kk < 4; kk++) {
            /* A[row0+r, k+kk] is component `comp` of av[r/8] in lane `src` */
            uint src = TRANS_A == 0 ? (r & 7) : 2 * kk + ((r >> 2) & 1);
            uint comp = TRANS_A == 0 ? kk : (r & 3);
            float a = subgroupShuffle(av[r >> 3][comp], src);
            if (tail && k + kk >= K)
                a = 0.0;
            acc[r] += a * bv[kk];
        }
    }
}

/* C = alpha * acc + beta * C inside [M, N]; alpha == 0 ignores A and B (as BLAS). */
void store_c(uint row0, uint j0) {
    uint M = p.m, N = p.n, ldc = p.ldc, c_off = p.c_off;
    /* C's texel binding (reads) may start elsewhere than its storage binding (writes) */
    uint cr_off = GEMM_STORAGE_TEXEL != 0 ? p.cr_off : c_off;
    float alpha = p.alpha, beta = p.beta;
    if (VEC_C != 0) {
        /* offsets, ldc, N and j0 are multiples of 4: the lane's vec4 is in or out whole */
        [[unroll]] for (uint r = 0; r < TM; r++) {
            uint i = row0 + r, at = i * ldc + j0;
            if (i < M && j0 < N) {
                vec4 v = alpha == 0.0 ? vec4(0.0) : alpha * acc[r];
                if (READ_C != 0)
                    v += beta * LOAD_C4((cr_off + at) >> 2);
                C4[(c_off + at) >> 2] = v;
            }
        }
        return;
    }
    [[unroll]] for (uint r = 0; r < TM; r++) {
        [[unroll]] for (uint c = 0; c < 4; c++) {
            uint i = row0 + r, j = j0 + c;
            uint at = TRANS_C != 0 ? j * ldc + i : i * ldc + j;
            if (i < M && j < N) {
                float v = alpha == 0.0 ? 0.0 : alpha * acc[r][c];
                if (READ_C != 0)
                    v += beta * LOAD_C1(cr_off + at);
                C[c_off + at] = v;
            }
        }
    }
}

void main() {
    lane = gl_SubgroupInvocationID;
    uint row0 = gl_WorkGroupID.y * TM;
    uint col0 = gl_WorkGroupID.x * TN;
    K = p.k, lda = p.lda, ldb = p.ldb, m_last = p.m - 1, n_last = p.n - 1;
    a_off = p.a_off, b_off = p.b_off;
    /* Rows / columns past M / N read the last one instead (dropped on store). With vec4
     * reads the start is clamped to the last vec4 (its other floats are dropped too). */
    [[unroll]] for (uint h = 0; h < TM / 8; h++) {
        if (TRANS_A == 0) {
            a_base[h] = a_off + min(row0 + 8 * h + lane, m_last) * lda;
        } else {
            uint i = row0 + 8 * h + 4 * (lane & 1);
            a_base[h] = VEC_A != 0 ? min(i, m_last & ~3u) : i;
        }
    }
    if (TRANS_B == 0) {
        uint j = col0 + 4 * lane;
        b_base[0] = VEC_B != 0 ? min(j, n_last & ~3u) : j;
    } else {
        [[unroll]] for (uint c = 0; c < 4; c++)
            b_base[c] = b_off + min(col0 + 4 * lane + c, n_last) * ldb;
    }
    [[unroll]] for (uint r = 0; r < TM; r++)
        acc[r] = vec4(0.0);

    /* Two steps per iteration: lavapipe blends every loop-carried accumulator with the
     * loop's execution mask once per iteration, so that cost is paid per 8 k. The last
     * 1..7 values of k take one or two masked steps. */
    uint k = 0;
    for (; k + 8 <= K; k += 8) {
        kstep(k, false);
        kstep(k + 4, false);
    }
    for (; k < K; k += 4)
        kstep(k, true);

    store_c(row0, col0 + 4 * lane);
}
