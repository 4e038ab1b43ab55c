/* attention_plan.c - the work decomposition of causal attention on a device profile
 * (attention.h): for each of the three dispatches the workgroup, the rows a workgroup
 * takes, the grid and the shared memory; what the forward saves; the backward's
 * workspace; the longest sequence the device's loop budget allows. Pure: no Vulkan
 * call, so a test plans for a stated device (tests/test_attention_plan.c). */
#include "kernels/attention.h"

/* attention.comp (attention_shuffle, attention_rows): blocks of 8 rows, one row per
 * lane; a workgroup of 8 lanes (one subgroup on lavapipe) or of 64 (8 blocks). */
#define ROWS_BLOCK 8u

/* attention_flash.comp. A row's d floats are spread over a lane group of `lanes` lanes,
 * each holding CPL = ceil(d / 4 / lanes) vec4 chunks of every row array (q and the
 * output in the forward; q, dy, dq in the dq pass; k, v, dk, dv in the dk/dv pass).
 * lanes: the fewest (a power of 2, at most 8 and the subgroup size) that leave a lane
 * at most 4 chunks (16 floats) of a row, so that the sums over the group (log2 lanes
 * shuffles per dot product) stay few against the 16 multiply-adds per row and staged
 * row. Rows per lane group: as many as 32 vec4 registers of row arrays allow (4, 2, 2
 * at d = 64 for the three passes), up to 4: each vec4 read from shared memory feeds
 * that many rows (a GPU reads about one vec4 of shared memory per lane for 4 to 8
 * multiply-adds). A workgroup aims at 64 rows and, on GPUs, at least 64 threads
 * (narrow heads: more lanes a row, then more rows). CPU devices (lavapipe, where the
 * flash kernel runs the sequences too long for attention_shuffle's loops) take one lane a
 * row: there the lanes of a group would repeat the row's exponentials and hash, and
 * threads cost nothing to leave out. The tile of staged rows aims at 64, halved
 * until two tiles of d floats per row (k and v, or q and dy) fit the shared memory
 * (d = 128 on a 48 KiB device: 32 rows, 33 KiB). */
#define FLASH_CH 4u        /* staged rows per online-softmax step: the shader's CH */
#define FLASH_MAX_LANES 8u /* the smallest subgroup a GPU compiles compute shaders for */
#define FLASH_CHUNKS 4u
#define FLASH_VEC4S 32u
#define FLASH_MAX_ROWS 4u
#define FLASH_BLOCK 64u
#define FLASH_MIN_THREADS 64u
#define FLASH_MAX_TILE 64u
/* Workgroups per compute unit the grid aims at: below it the rows per lane group halve
 * (down to 1), trading register reuse for more, smaller workgroups. */
#define FLASH_FILL 2u

static uint64_t ceil_div(uint64_t x, uint64_t y) { return (x + y - 1) / y; }

static void grid(ka_pass *ps, uint64_t workgroups)
{
    ps->workgroups = workgroups;
    uint64_t gx = workgroups < GPU_MAX_GROUPS ? workgroups : GPU_MAX_GROUPS;
    uint64_t gy = ceil_div(workgroups, gx);
    ps->groups[0] = (uint32_t)gx;
    ps->groups[1] = gy > UINT32_MAX ? UINT32_MAX : (uint32_t)gy; /* the dispatch refuses */
    ps->groups[2] = 1;
}

/* ---- attention.comp -------------------------------------------------------------------- */

/* Loop iterations one invocation runs for a row of t steps, counted as if no loop were
 * unrolled (lavapipe counts every back edge; unrolled loops have none, so this bounds
 * it): per step the fetch rounds of the 2 d floats of a row pair (shuffle variant,
 * scalar reads: the worst case), two loops over d and the loop overheads; then the last
 * pass over the probs row and the row loads and stores. */
static uint64_t rows_iterations(int shuffle, uint64_t t, uint32_t d)
{
    uint64_t rounds = shuffle ? (2ull * d + ROWS_BLOCK - 1) / ROWS_BLOCK : 0;
    return (t + 4) * (rounds + 2ull * d + 5) + 4ull * d + 64;
}

static void plan_rows(const gpu_profile *p, int shuffle, uint32_t b, uint32_t t,
                      uint32_t heads, uint32_t d, ka_plan *out)
{
    uint64_t bht = (uint64_t)b * heads * t;
    out->saved = KA_SAVED_PROBS;
    out->saved_elems = bht * t;
    out->workspace_elems = bht * t + bht; /* dP, then the row sums D */
    uint64_t fixed = rows_iterations(shuffle, 0, d);
    uint64_t per = rows_iterations(shuffle, 1, d) - fixed;
    out->max_t = p->loop_budget >= (1ull << 40) ? UINT32_MAX
                 : p->loop_budget <= fixed      ? 0
                                                : (uint32_t)((p->loop_budget - fixed) / per);
    for (int k = 0; k < 3; k++) {
        ka_pass *ps = &out->pass[k];
        ps->threads = shuffle ? ROWS_BLOCK : 8 * ROWS_BLOCK;
        ps->rows_per_block = ROWS_BLOCK;
        ps->blocks_per_head = (uint32_t)ceil_div(t, ROWS_BLOCK);
        ps->blocks = (uint64_t)b * heads * ps->blocks_per_head;
        ps->lanes = ps->rows = 1;
        grid(ps, ceil_div(ps->blocks, ps->threads / ROWS_BLOCK));
    }
}

/* ---- attention_flash.comp -------------------------------------------------------------- */

static uint32_t flash_shared(uint32_t tile, uint32_t nc)
{
    return tile * nc * 16u * 2u + tile * 4u * 2u; /* sa, sb (vec4s); sl, sd (floats) */
}

/* Loop iterations per invocation (lavapipe's budget; the loops over lanes, rows and
 * chunks are unrolled): per tile the staging loop, the lse / D staging (dk/dv pass), the
 * online steps and the loop overheads; a few outside. */
static uint64_t flash_iterations(const ka_pass *ps, uint32_t nc, uint64_t t)
{
    uint64_t per_tile = ceil_div((uint64_t)ps->tile * nc, ps->threads) +
                        ceil_div(ps->tile, ps->threads) + ps->tile / FLASH_CH + 2;
    return ceil_div(t, ps->tile) * per_tile + 16;
}

static void plan_flash_pass(const gpu_profile *p, uint32_t arrays, uint32_t b, uint32_t t,
                            uint32_t heads, uint32_t d, ka_pass *ps)
{
    int gpu = p->style == VKT_KERNELS_GPU;
    uint32_t nc = (d + 3) / 4, max_lanes = gpu ? FLASH_MAX_LANES : 1;
    while (max_lanes > 1 && max_lanes > p->subgroup_size)
        max_lanes /= 2;
    uint32_t lanes = 1;
    while (lanes < max_lanes && ceil_div(nc, lanes) > FLASH_CHUNKS)
        lanes *= 2;
    uint32_t cpl = (uint32_t)ceil_div(nc, lanes);
    uint32_t rows = FLASH_VEC4S / (arrays * cpl);
    rows = rows < 1 ? 1 : rows > FLASH_MAX_ROWS ? FLASH_MAX_ROWS : rows;
    uint32_t groups = FLASH_BLOCK / rows; /* lane groups per workgroup */
    /* GPUs, narrow heads: more lanes a row (fewer chunks each), else more rows a
     * workgroup (while t has them), up to 64 threads (two subgroups of 32, one of 64) */
    while (gpu && groups * lanes < FLASH_MIN_THREADS && lanes < max_lanes && lanes < nc)
        lanes *= 2;
    while (gpu && groups * lanes < FLASH_MIN_THREADS && groups * rows < t)
        groups *= 2;
    while (groups > 1 && groups * lanes > p->max_invocations)
        groups /= 2;
    uint64_t bh = (uint64_t)b * heads, want = (uint64_t)FLASH_FILL * p->compute_units;
    while (rows > 1 && bh * ceil_div(t, (uint64_t)rows * groups) < want)
        rows /= 2;
    uint32_t tile = FLASH_MAX_TILE;
    while (tile > FLASH_CH && flash_shared(tile, nc) > p->shared_memory)
        tile /= 2;
    ps->threads = groups * lanes;
    ps->lanes = lanes;
    ps->rows = rows;
    ps->rows_per_block = rows * groups;
    ps->blocks_per_head = (uint32_t)ceil_div(t, ps->rows_per_block);
    ps->blocks = bh * ps->blocks_per_head;
    ps->tile = tile;
    ps->shared_bytes = flash_shared(tile, nc);
    grid(ps, ps->blocks);
}

static void plan_flash(const gpu_profile *p, uint32_t b, uint32_t t, uint32_t heads,
                       uint32_t d, ka_plan *out)
{
    uint64_t bht = (uint64_t)b * heads * t;
    out->saved = KA_SAVED_LSE;
    out->saved_elems = bht;
    out->workspace_elems = bht; /* D */
    for (uint32_t k = 0; k < 3; k++)
        plan_flash_pass(p, 2 + k, b, t, heads, d, &out->pass[k]);
    uint32_t nc = (d + 3) / 4;
    if (flash_shared(out->pass[0].tile, nc) > p->shared_memory) {
        out->max_t = 0; /* not even the smallest tile fits */
        return;
    }
    if (p->loop_budget >= (1ull << 40)) {
        out->max_t = UINT32_MAX;
        return;
    }
    /* the longest t whose every pass stays within the budget (monotonic in t) */
    uint64_t lo = 0, hi = UINT32_MAX;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo + 1) / 2, worst = 0;
        for (int k = 0; k < 3; k++) {
            uint64_t it = flash_iterations(&out->pass[k], nc, mid);
            worst = it > worst ? it : worst;
        }
        if (worst <= p->loop_budget)
            lo = mid;
        else
            hi = mid - 1;
    }
    out->max_t = (uint32_t)lo;
}

ka_plan ka_attention_plan(const gpu_profile *p, gpu_variant variant, uint32_t b, uint32_t t,
                          uint32_t heads, uint32_t d)
{
    ka_plan plan = {.variant = variant};
    if (!p || b == 0 || t == 0 || heads == 0 || d == 0 || d > KA_MAX_D)
        return plan;
    switch (variant) {
    case GPU_V_ATTENTION_FLASH:
    case GPU_V_ATTENTION_LOWP_FLASH: /* the same tiles on 16-bit rows */
    case GPU_V_ATTENTION_LOWP_COOPMAT: /* their backward (the forward: attention_cm.c) */
    case GPU_V_ATTENTION_LOWP_FRAG:
        plan_flash(p, b, t, heads, d, &plan);
        break;
    case GPU_V_ATTENTION_SHUFFLE: plan_rows(p, 1, b, t, heads, d, &plan); break;
    case GPU_V_ATTENTION_ROWS: plan_rows(p, 0, b, t, heads, d, &plan); break;
    default: break;
    }
    return plan;
}
