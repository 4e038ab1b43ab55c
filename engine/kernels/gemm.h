/*
 * gemm.h - how a GEMM is cut into work for a device: the plan of one vkt_gemm call
 * (variant, tile, grid, split-K), a pure function of the shape and the device profile,
 * so that a test can compute the dispatch grid every GEMM of a model gets on a stated
 * device (an H100: 132 compute units, 48 KiB shared memory, subgroup 32) without it.
 * vkt_gemm (gemm.c) dispatches exactly what the plan says.
 */
#ifndef VKT_KERNELS_GEMM_H
#define VKT_KERNELS_GEMM_H

#include "gpu/gpu.h"

/* One tile shape of gemm_tile.comp: a workgroup of (bm / tm) x (bn / tn) threads
 * computes a bm x bn tile of C, each thread tm x tn outputs, walking K in slabs of bk
 * staged in double-buffered shared memory. */
typedef struct kg_tile {
    uint32_t bm, bn, bk, tm, tn;
    float efficiency; /* throughput relative to the 128x128 tile: a smaller tile moves
                         more bytes per flop (gemm_plan.c) */
} kg_tile;

typedef struct kg_plan {
    gpu_variant variant;       /* the context's GEMM variant */
    uint32_t bm, bn, bk;       /* C tile per workgroup and K slab (gemm_shared, gemm_tile) */
    uint32_t tm, tn;           /* outputs per thread: rows, columns */
    uint32_t threads;          /* per workgroup */
    uint32_t groups[3];        /* the GEMM dispatch: x over N, y over M, z over K splits */
    uint32_t splits;           /* split-K: partial tiles summed by a second dispatch; 1: none */
    uint32_t k_chunk;          /* K per split (a multiple of bk), K when splits is 1 */
    uint64_t workspace;        /* floats of partial tiles: splits * M * N (0 without) */
    uint32_t shared_bytes;     /* per workgroup */
    int transpose_c;           /* gemm_texel / gemm_sampler: C^T = op(B)^T op(A)^T */
} kg_plan;

/* The plan of C[M,N] = op(A) op(B) (+ beta C) with the given variant on a device of
 * profile p. gemm_tile: the tile row and split factor of least modelled time (gemm_plan.c
 * explains the model); splits whenever the tiles alone leave compute units idle and K is
 * long enough, and always when one workgroup walking K would pass the device's loop
 * budget. Pure. */
kg_plan kg_gemm_plan(const gpu_profile *p, gpu_variant variant, uint32_t m, uint32_t n,
                     uint32_t k);

/* Workgroups of the plan's GEMM dispatch: groups[0] * groups[1] * groups[2]. */
uint64_t kg_plan_workgroups(const kg_plan *plan);

/* The tile rows of gemm_tile, largest first; *count receives how many. */
const kg_tile *kg_tile_rows(uint32_t *count);

#endif
