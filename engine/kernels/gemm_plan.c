/* gemm_plan.c - the work decomposition of a GEMM on a device profile (gemm.h): which
 * tile, how many workgroups, whether K is split. Pure: no Vulkan call, so a test plans
 * for a stated device. */
#include "kernels/gemm.h"

/* gemm_tile's tile rows, largest first. 256 threads each (a multiple of every subgroup
 * size, 8 to 64). bk keeps each thread's share of a slab a whole number of vec4 loads:
 * (bm + bn) * bk / 4 is a multiple of 256. Efficiency: a workgroup reads (bm + bn) bk
 * floats from L2 / device memory per 2 bm bn bk flops, bm bn / (2 (bm + bn)) flops per
 * byte: 32 for 128x128, 21 for 128x64, 16 for 64x64. At an H100's fp32 rate (67
 * TFLOP/s) a 64x64 tile needs 4 TB/s of L2 traffic, about what L2 delivers, so the
 * smaller tiles are taken to run in proportion to their intensity (docs/performance.md,
 * "Roofline: GEMM"). */
static const kg_tile k_tiles[] = {
    {128, 128, 8, 8, 8, 1.0f},
    {128, 64, 16, 8, 4, 0.67f},
    {64, 128, 16, 4, 8, 0.67f},
    {64, 64, 16, 4, 4, 0.5f},
};
#define N_TILES (sizeof k_tiles / sizeof k_tiles[0])

const kg_tile *kg_tile_rows(uint32_t *count)
{
    *count = (uint32_t)N_TILES;
    return k_tiles;
}

/* The model (assumptions, not measurements of a particular card): a compute unit
 * keeps 2 of these 256-thread workgroups resident (registers: about 128 per thread for
 * 8x8) and retires 128 fp32 FMAs per clock, 64 per resident workgroup; it moves about 4
 * floats of device memory per clock (an H100: 3.35 TB/s over 132 SMs at 1.75 GHz is
 * 3.6); a second, dependent dispatch costs about 4000 clocks (2 us). */
#define RESIDENT 2u
#define FMA_PER_SLOT 64.0
#define FLOATS_PER_CU 4.0
#define DISPATCH_CLOCKS 4000.0
#define MIN_SPLIT_K 64u                 /* K per split at least */
#define MAX_SPLITS 256u
#define MAX_WORKSPACE (16ull << 20)     /* floats of partial tiles: 64 MiB */

static uint32_t ceil_div(uint64_t x, uint64_t y) { return (uint32_t)((x + y - 1) / y); }

static uint32_t tile_shared(const kg_tile *t)
{
    /* two buffers of As [bk][bm + 4] and Bs [bk][bn + 4] (gemm_tile.comp) */
    return 2u * t->bk * (t->bm + 4 + t->bn + 4) * 4u;
}

/* Modelled clocks of the tile row with `splits` (already a count that divides K into
 * non-empty chunks). */
static double cost(const gpu_profile *p, const kg_tile *t, uint32_t m, uint32_t n,
                   uint32_t splits, uint32_t chunk)
{
    uint64_t tiles = (uint64_t)ceil_div(m, t->bm) * ceil_div(n, t->bn);
    uint64_t slots = (uint64_t)p->compute_units * RESIDENT;
    uint64_t waves = (tiles * splits + slots - 1) / slots;
    double gemm = (double)waves * t->bm * t->bn * chunk / (t->efficiency * FMA_PER_SLOT);
    if (splits == 1)
        return gemm;
    /* partials written, read back, C written */
    double floats = (2.0 * splits + 1.0) * (double)m * n;
    return gemm + floats / (FLOATS_PER_CU * p->compute_units) + DISPATCH_CLOCKS;
}

static void plan_tile(const gpu_profile *p, uint32_t m, uint32_t n, uint32_t k, kg_plan *out)
{
    double best = -1.0;
    for (uint32_t r = 0; r < N_TILES; r++) {
        const kg_tile *t = &k_tiles[r];
        uint32_t threads = (t->bm / t->tm) * (t->bn / t->tn);
        if (tile_shared(t) > p->shared_memory || threads > p->max_invocations)
            continue;
        uint32_t slabs = ceil_div(k, t->bk);
        /* Loop budget (llvmpipe): a workgroup walks at most budget / 4 slabs. */
        uint64_t walk = p->loop_budget / 4;
        uint32_t min_splits = slabs > walk ? ceil_div(slabs, walk) : 1;
        uint32_t max_splits = k / MIN_SPLIT_K;
        if (max_splits > MAX_SPLITS)
            max_splits = MAX_SPLITS;
        if ((uint64_t)m * n * max_splits > MAX_WORKSPACE)
            max_splits = (uint32_t)(MAX_WORKSPACE / ((uint64_t)m * n));
        if (max_splits < min_splits)
            max_splits = min_splits;
        for (uint32_t s = min_splits; s <= max_splits || s == min_splits; s++) {
            uint32_t per = ceil_div(slabs, s);  /* slabs per split */
            uint32_t splits = ceil_div(slabs, per); /* every split non-empty */
            if (splits != s)
                continue;
            double c = cost(p, t, m, n, splits, per * t->bk);
            if (best < 0 || c < best) {
                best = c;
                out->bm = t->bm, out->bn = t->bn, out->bk = t->bk;
                out->tm = t->tm, out->tn = t->tn, out->threads = threads;
                out->splits = splits;
                out->k_chunk = splits > 1 ? per * t->bk : k;
                out->shared_bytes = tile_shared(t);
            }
            if (s >= max_splits)
                break;
        }
    }
    out->groups[0] = ceil_div(n, out->bn);
    out->groups[1] = ceil_div(m, out->bm);
    out->groups[2] = out->splits;
    out->workspace = out->splits > 1 ? (uint64_t)out->splits * m * n : 0;
}

/* gemm_shared (gemm_gpu.comp): 128x128 tiles with 8x8 outputs per thread feed large
 * products; 64x64 tiles with 4x4 per thread keep enough workgroups in flight for
 * smaller ones. Devices that allow fewer than 256 invocations get 64 threads with 8x8
 * each. Both staging buffers take (BM + BN) * BK floats: 8 KiB, halved in BK until they
 * fit the device's shared memory. */
static void plan_shared(const gpu_profile *p, uint32_t m, uint32_t n, uint32_t k, kg_plan *out)
{
    uint32_t inv = p->max_invocations, tx = 8, ty = 8;
    out->bm = out->bn = 64, out->bk = 16;
    if (inv >= 256)
        tx = ty = 16;
    if (inv >= 256 && m >= 128 && n >= 128 && (uint64_t)m * n >= 512 * 512)
        out->bm = out->bn = 128, out->bk = 8;
    while (out->bk > 1 && (out->bm + out->bn) * out->bk * 4 > p->shared_memory)
        out->bk /= 2;
    out->tm = out->bm / ty, out->tn = out->bn / tx, out->threads = tx * ty;
    out->shared_bytes = (out->bm + out->bn) * out->bk * 4;
    out->groups[0] = ceil_div(n, out->bn);
    out->groups[1] = ceil_div(m, out->bm);
    out->groups[2] = 1;
    out->splits = 1, out->k_chunk = k;
}

/* gemm_texel / gemm_sampler (gemm_cpu.glsl): a 16x32 tile of C per 8-lane workgroup.
 * Computing C^T = op(B)^T op(A)^T (stored transposed) pays when N is narrow: N = 10 fills
 * 10 of a tile's 32 columns but 10 of its 16 rows. Only when it saves at least a third
 * of the padded work, as the transposed store writes one float at a time. */
static void plan_texel(uint32_t m, uint32_t n, uint32_t k, kg_plan *out)
{
    uint64_t padded = (uint64_t)ceil_div(m, 16) * 16 * ceil_div(n, 32) * 32;
    uint64_t padded_t = (uint64_t)ceil_div(n, 16) * 16 * ceil_div(m, 32) * 32;
    out->transpose_c = 3 * padded_t <= 2 * padded;
    uint32_t rows = out->transpose_c ? n : m, cols = out->transpose_c ? m : n;
    out->bm = 16, out->bn = 32, out->bk = 4, out->tm = 16, out->tn = 4, out->threads = 8;
    out->groups[0] = ceil_div(cols, 32);
    out->groups[1] = ceil_div(rows, 16);
    out->groups[2] = 1;
    out->splits = 1, out->k_chunk = k;
}

kg_plan kg_gemm_plan(const gpu_profile *p, gpu_variant variant, uint32_t m, uint32_t n,
                     uint32_t k)
{
    kg_plan plan = {.variant = variant, .splits = 1, .k_chunk = k};
    switch (variant) {
    case GPU_V_GEMM_TEXEL:
    case GPU_V_GEMM_SAMPLER: plan_texel(m, n, k, &plan); break;
    case GPU_V_GEMM_TILE: plan_tile(p, m, n, k, &plan); break;
    case GPU_V_GEMM_SHARED: plan_shared(p, m, n, k, &plan); break;
    default: break;
    }
    return plan;
}

uint64_t kg_plan_workgroups(const kg_plan *plan)
{
    return (uint64_t)plan->groups[0] * plan->groups[1] * plan->groups[2];
}
