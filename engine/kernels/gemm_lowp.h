/*
 * gemm_lowp.h - the plan of a GEMM of 16-bit inputs (vkt_gemm with a_type and b_type fp16
 * or bf16): the tile, warps and fragment shape shaders/gemm_lowp.glsl runs with, a pure
 * function of the variant, the shape and the device profile (so a test plans for a
 * stated H100 without one). vkt_gemm (gemm_lowp.c) dispatches exactly what it says.
 */
#ifndef VKT_KERNELS_GEMM_LOWP_H
#define VKT_KERNELS_GEMM_LOWP_H

#include "gpu/gpu.h"

typedef struct kg_lowp_plan {
    gpu_variant variant;
    uint32_t bm, bn, bk;    /* C tile per workgroup, K slab */
    uint32_t wm, wn;        /* a warp's block of the tile */
    uint32_t tm, tn, tk;    /* fragment: TM x TK of A times TK x TN of B (cooperative: the
                               device's matrix shape) */
    uint32_t sg;            /* lanes per warp (cooperative: the subgroup size) */
    uint32_t threads;       /* (bm / wm) * (bn / wn) * sg */
    uint32_t groups[3];     /* x over N, y over M */
    uint32_t shared_bytes;  /* per workgroup */
    uint64_t slab_loops;    /* loop iterations an invocation runs per K slab, counting every
                               loop as not unrolled (the loop budget of llvmpipe) */
    int ok;                 /* 0: no tile fits the device (why says what) */
    const char *why;
} kg_lowp_plan;

/* The plan of C[M,N] = op(A) op(B) with 16-bit inputs by `variant` (a row of the GEMM_F16
 * or GEMM_BF16 family) on a device of profile p. Cooperative rows take the matrix shape
 * gpu_mat_for gives and 2 x 2 warps of 4 x 4 fragments (2 x 2 on CPU-style devices; fewer
 * while the tiles leave compute units idle or the shared memory is too small); the others
 * fixed 16 x 16 fragments, 2 x 2 warps of 1 fragment each (CPU style) or 2 x 2 (GPU
 * style). Pure. */
kg_lowp_plan kg_lowp_plan_make(const gpu_profile *p, gpu_variant variant, uint32_t m,
                               uint32_t n, uint32_t k);

/* 1 when the descriptor names a type other than fp32 (vkt_gemm then calls kg_gemm_lowp). */
int kg_gemm_typed(const vkt_gemm_desc *d);
/* vkt_gemm of typed operands: checks the type combination and the views (offsets and
 * leading dimensions in elements of each operand's type), records the dispatch. */
vkt_status kg_gemm_lowp(vkt_stream *s, const vkt_gemm_desc *d);
/* 1 when `ctx` runs 16-bit products of type t (fp16 or bf16: a variant of its family
 * runs on the device); else 0 and `why` says what the device lacks. */
int kg_lowp_available(const vkt_context *ctx, vkt_dtype t, char *why, size_t why_size);
/* The kernel a GEMM_F16 / GEMM_BF16 variant runs (NULL for other variants). */
const gpu_kernel *kg_lowp_kernel(gpu_variant v);

#endif
