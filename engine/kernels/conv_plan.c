/* conv_plan.c - the work decomposition of the conv_implicit variant (conv.h): for each
 * pass of a convolution, the tile of shaders/conv_implicit.comp, the grid, and for the
 * weight gradient the split of its long sum over n oh ow. Pure: no Vulkan call, so a
 * test plans every convolution of a model for a stated device (an H100) without it. */
#include "kernels/conv.h"

#include "gpu/gpu.h"

/* The tile rows, largest first: BM x BN of C per workgroup of (BM / TM) x (BN / TN)
 * threads, K in slabs of BK. The shader's load assignment needs THREADS a multiple of
 * BK and of BN, and BM BK and BN BK multiples of THREADS (each thread loads whole
 * columns); TM and TN are 4 or 8 (vec4 reads of shared memory). The narrow rows are for
 * convolutions, whose M is a group's channels (16 or 32 in the benchmark CNN, fewer with
 * groups) while N is every output position of the batch; the small square ones for the
 * weight gradient, whose C is the size of the weight and whose K is the long dimension.
 * Efficiency, relative to 8x8 per thread: per k a thread reads TN / 4 vec4s of Bs (its
 * own) and TM / 4 of As (the same for its row of threads: broadcasts) for TM TN
 * multiply-adds, 0.5 bytes of shared-memory traffic per multiply-add with 8x8, 0.75 with
 * 8x4, 1 with 4x4, where shared memory delivers about 1 byte per multiply-add slot (128
 * bytes per clock on an SM): 4x4 runs at that limit. */
static const kc_conv_tile k_tiles[] = {
    {128, 128, 8, 8, 8, 1.0f},  /* 256 threads */
    {64, 128, 16, 4, 8, 0.8f},  /* 256 */
    {128, 64, 16, 8, 4, 0.8f},  /* 256 */
    {64, 64, 16, 4, 4, 0.6f},   /* 256 */
    {32, 128, 16, 4, 4, 0.6f},  /* 256 */
    {32, 64, 16, 4, 4, 0.6f},   /* 128 */
    {16, 128, 16, 4, 4, 0.6f},  /* 128 */
    {16, 64, 16, 4, 4, 0.6f},   /* 64 */
    {32, 32, 32, 4, 4, 0.6f},   /* 64 */
    {16, 32, 32, 4, 4, 0.6f},   /* 32 */
    {16, 16, 16, 4, 4, 0.6f},   /* 16 */
};
#define N_TILES (sizeof k_tiles / sizeof k_tiles[0])

const kc_conv_tile *kc_conv_tiles(uint32_t *count)
{
    *count = (uint32_t)N_TILES;
    return k_tiles;
}

uint32_t kc_conv_tile_threads(const kc_conv_tile *t)
{
    return (t->bm / t->tm) * (t->bn / t->tn);
}

uint32_t kc_conv_tile_shared(const kc_conv_tile *t)
{
    /* two buffers of As [BK][BM + 4] and Bs [BK][BN + 4] floats (conv_implicit.comp) */
    return 2u * t->bk * (t->bm + 4 + t->bn + 4) * 4u;
}

/* The model (assumptions, not measurements of a particular card): a compute unit
 * issues 128 fp32 lane-instructions per clock, as 128 / subgroup instructions of whole
 * subgroups (an H100: 4 of 32 lanes), and needs 256 threads' worth of subgroups resident
 * to hide its latencies (fewer issue proportionally less; a workgroup of 16 threads
 * fills half of its subgroup's lanes). An instruction is a multiply-add or one step of a
 * gather: each element a tile stages costs about 12 (its tap's coordinates, the bounds,
 * the address, the load, the store into shared memory: the gathers are what separates
 * this from a plain GEMM, and why tiny tiles lose). Its load units deliver 32 floats per
 * clock (scalar loads, mostly hits in the L1 cache: a window's taps overlap) and device
 * memory about 4 floats per clock (an H100: 3.35 TB/s over 132 SMs at 1.75 GHz is 3.6).
 * It keeps up to 1024 threads resident (at most 16 workgroups). A second, dependent
 * dispatch costs about 4000 clocks (2 us). Those resident share the compute unit's
 * rates; the busiest compute unit's work is the time. */
#define ISSUE_PER_CU 128.0
#define BUSY_THREADS 256.0
#define GATHER_INSTR 12.0
#define LOADS_PER_CU 32.0
#define FLOATS_PER_CU 4.0
#define RESIDENT_THREADS 1024u
#define MAX_RESIDENT 16u
#define DISPATCH_CLOCKS 4000.0
#define MIN_SPLIT_K 64u                 /* K per split at least */
#define MAX_SPLITS 4096u
#define MAX_WORKSPACE (16ull << 20)     /* floats of partial sums: 64 MiB */
#define MAX_Z 65535u                    /* workgroups along z: groups x splits */

static uint64_t ceil_div(uint64_t x, uint64_t y) { return (x + y - 1) / y; }
static uint64_t min_u64(uint64_t a, uint64_t b) { return a < b ? a : b; }

/* One group's GEMM of a pass, and the floats the pass must move at least (its inputs
 * once, its output once). */
static void pass_shape(const kc_conv *g, uint32_t nc, int pass, int want_dw, int want_db,
                       kc_conv_plan *pl, double *unique)
{
    uint64_t kk = (uint64_t)g->kh * g->kw, cg = g->c / g->groups, og = g->oc / g->groups;
    uint64_t P = (uint64_t)g->oh * g->ow, HW = (uint64_t)g->h * g->w;
    double x = (double)nc * g->c * HW, y = (double)nc * g->oc * P, w = (double)g->oc * cg * kk;
    pl->pass = pass;
    pl->bias_col = UINT32_MAX;
    if (pass == (int)CONV_PASS_FORWARD) {
        pl->m = og, pl->n = nc * P, pl->k = cg * kk;
        *unique = x + w + y;
    } else if (pass == (int)CONV_PASS_DATA) {
        pl->m = cg, pl->n = nc * HW, pl->k = og * kk;
        *unique = y + w + x;
    } else {
        pl->m = og, pl->n = (want_dw ? cg * kk : 0) + (want_db ? 1 : 0), pl->k = nc * P;
        if (want_db)
            pl->bias_col = (uint32_t)(pl->n - 1);
        *unique = y + x + w;
    }
}

/* Modelled clocks of tile t with `splits` of `chunk` along K (pl: the pass's shape). */
static double cost(const gpu_profile *p, const kc_conv_tile *t, const kc_conv_plan *pl,
                   uint32_t groups, uint32_t splits, uint64_t chunk, double unique,
                   double *gemm_clocks)
{
    uint32_t threads = kc_conv_tile_threads(t), sg = p->subgroup_size ? p->subgroup_size : 1;
    uint64_t warps = ceil_div(threads, sg), resident = RESIDENT_THREADS / (warps * sg);
    resident = resident < 1 ? 1 : resident > MAX_RESIDENT ? MAX_RESIDENT : resident;
    uint64_t tiles = ceil_div(pl->m, t->bm) * ceil_div(pl->n, t->bn) * groups;
    uint64_t per_cu = ceil_div(tiles * splits, p->compute_units);
    uint64_t active = min_u64(per_cu, resident), waves = ceil_div(per_cu, resident);
    /* subgroup instructions per clock of the compute unit, shared by its subgroups; a
     * workgroup's share in lane-instructions */
    double w = (double)(active * warps), busy = w * sg / BUSY_THREADS;
    double issue = ISSUE_PER_CU / sg * (busy < 1.0 ? busy : 1.0) * threads / w;
    double ld = LOADS_PER_CU / (double)active;
    ld = ld < threads ? ld : threads;
    /* every thread runs its gathers' code, in range or not; only real rows load */
    double instr = (double)t->bm * t->bn * chunk / t->efficiency +
                   (double)(t->bm + t->bn) * chunk * GATHER_INSTR;
    double loads = (double)(min_u64(t->bm, pl->m) + min_u64(t->bn, pl->n)) * chunk;
    double wg = instr / issue > loads / ld ? instr / issue : loads / ld;
    double c = (double)waves * wg, dram = unique / (FLOATS_PER_CU * p->compute_units);
    *gemm_clocks = c;
    if (dram > c)
        c = dram;
    if (splits > 1) /* partials written and read back, the outputs written */
        c += (2.0 * splits + 1.0) * (double)pl->m * pl->n * groups /
                 (FLOATS_PER_CU * p->compute_units) +
             DISPATCH_CLOCKS;
    return c;
}

static int tile_fits(const gpu_profile *p, const kc_conv_tile *t)
{
    return kc_conv_tile_shared(t) <= p->shared_memory &&
           kc_conv_tile_threads(t) <= p->max_invocations;
}

/* Splits the loop budget needs (llvmpipe ends a shader's loops after about 65535
 * iterations: a workgroup walks at most `walk` slabs of bk, budget / 4 for conv_implicit's
 * tiles), and the most the pass allows (the weight pass only: the others' K is c kh kw or
 * oc kh kw, short). */
static void split_range_walk(uint32_t bk, uint64_t walk, const kc_conv_plan *pl,
                             uint32_t groups, uint32_t *lo, uint32_t *hi)
{
    uint64_t slabs = ceil_div(pl->k, bk);
    uint64_t need = slabs > walk ? ceil_div(slabs, walk) : 1, most = 1;
    if (pl->pass == (int)CONV_PASS_WEIGHT) {
        most = pl->k / MIN_SPLIT_K;
        most = min_u64(most, MAX_SPLITS);
        most = min_u64(most, MAX_Z / groups);
        uint64_t outputs = pl->m * pl->n * groups;
        most = min_u64(most, MAX_WORKSPACE / (outputs ? outputs : 1));
        if (most < need && need <= MAX_Z / groups)
            most = need;
    }
    *lo = (uint32_t)(need > UINT32_MAX ? UINT32_MAX : need);
    *hi = (uint32_t)(most < 1 ? 1 : most);
}

static void split_range(const gpu_profile *p, const kc_conv_tile *t, const kc_conv_plan *pl,
                        uint32_t groups, uint32_t *lo, uint32_t *hi)
{
    split_range_walk(t->bk, p->loop_budget / 4, pl, groups, lo, hi);
}

int kc_conv_plan_with(const gpu_profile *p, const kc_conv *g, uint32_t nc, int pass,
                      int want_dw, int want_db, uint32_t tile, uint32_t splits,
                      kc_conv_plan *out)
{
    kc_conv_plan pl = {0};
    double unique;
    pass_shape(g, nc, pass, want_dw, want_db, &pl, &unique);
    if (tile >= N_TILES || pl.n == 0)
        return 0;
    const kc_conv_tile *t = &k_tiles[tile];
    uint32_t lo, hi;
    split_range(p, t, &pl, g->groups, &lo, &hi);
    if (!tile_fits(p, t) || lo > hi)
        return 0;
    splits = splits < lo ? lo : splits > hi ? hi : splits;
    uint64_t slabs = ceil_div(pl.k, t->bk), per = ceil_div(slabs, splits);
    pl.splits = (uint32_t)ceil_div(slabs, per); /* every split non-empty */
    pl.k_chunk = pl.splits > 1 ? (uint32_t)(per * t->bk) : (uint32_t)pl.k;
    pl.tile = tile;
    pl.bm = t->bm, pl.bn = t->bn, pl.bk = t->bk, pl.tm = t->tm, pl.tn = t->tn;
    pl.threads = kc_conv_tile_threads(t);
    pl.shared_bytes = kc_conv_tile_shared(t);
    pl.col_tiles = ceil_div(pl.n, t->bn);
    pl.row_tiles = (uint32_t)ceil_div(pl.m, t->bm);
    pl.z = g->groups * pl.splits;
    pl.workspace = pl.splits > 1 ? (uint64_t)pl.splits * g->oc * pl.n : 0;
    pl.clocks = cost(p, t, &pl, g->groups, pl.splits, per * t->bk, unique, &pl.gemm_clocks);
    *out = pl;
    return 1;
}

uint64_t kc_conv_plan_workgroups(const kc_conv_plan *pl)
{
    return pl->col_tiles * pl->row_tiles * pl->z;
}

/* Whether plan a beats plan b. One that fills the device (a workgroup per compute unit)
 * beats one that does not unless that one is modelled 10% faster: the model's rates are
 * rough, and idle compute units are certain. Otherwise clearly less modelled time (by
 * 2%); as fast within that, fewer workgroups (less per-tile work locating columns and
 * storing), then less time in the multiply-adds and gathers. */
static int better(const gpu_profile *p, const kc_conv_plan *a, const kc_conv_plan *b)
{
    uint64_t wa = kc_conv_plan_workgroups(a), wb = kc_conv_plan_workgroups(b);
    int fa = wa >= p->compute_units, fb = wb >= p->compute_units;
    if (fa != fb)
        return fa ? !(b->clocks < 0.9 * a->clocks) : a->clocks < 0.9 * b->clocks;
    if (a->clocks < 0.98 * b->clocks)
        return 1;
    if (b->clocks < 0.98 * a->clocks)
        return 0;
    if (wa != wb)
        return wa < wb;
    return a->gemm_clocks < b->gemm_clocks;
}

int kc_conv_implicit_plan(const gpu_profile *p, const kc_conv *g, uint32_t nc, int pass,
                          int want_dw, int want_db, kc_conv_plan *out)
{
    int found = 0;
    for (uint32_t r = 0; r < N_TILES; r++) {
        kc_conv_plan probe;
        if (!kc_conv_plan_with(p, g, nc, pass, want_dw, want_db, r, 1, &probe))
            continue;
        uint32_t lo, hi;
        split_range(p, &k_tiles[r], &probe, g->groups, &lo, &hi);
        /* split counts 1, 2, ... growing by an eighth: about 70 candidates up to 4096 */
        for (uint32_t s = lo; s <= hi; s += s / 8 > 1 ? s / 8 : 1) {
            kc_conv_plan c;
            if (kc_conv_plan_with(p, g, nc, pass, want_dw, want_db, r, s, &c) &&
                (!found || better(p, &c, out)))
                *out = c, found = 1;
        }
    }
    return found;
}

/* ---- conv_frag.glsl's tiling: conv_lowp_frag, conv_lowp_coopmat --------------------- */

/* Shared memory of a fragment tile: As and Bs twice, rows of bk + pad elements (16-bit
 * padded by 8 for the matrix loads' alignment, or fp32 padded by 1), and for cooperative
 * matrices a TM x TN fp32 slice per warp (conv_frag.glsl). */
static uint32_t frag_shared(const kc_conv_plan *t, int coop)
{
    uint32_t warps = (t->bm / t->wm) * (t->bn / t->wn);
    return coop ? 2 * (t->bm + t->bn) * (t->bk + 8) * 2 + warps * t->tm * t->tn * 4
                : 2 * (t->bm + t->bn) * (t->bk + 1) * 4;
}

/* Loop iterations an invocation runs per slab if nothing is unrolled: the gathers and
 * their stores into shared memory, the multiplication (cooperative: one per fragment pair
 * and K step; else per fragment element and k). */
static uint64_t frag_slab_loops(const kc_conv_plan *t, int coop)
{
    uint64_t loads = ((uint64_t)t->bm + t->bn) * t->bk / t->threads;
    uint64_t frags = (uint64_t)(t->wm / t->tm) * (t->wn / t->tn);
    uint64_t mul = coop ? frags * (t->bk / t->tk) : frags * (t->tm * t->tn / t->sg) * t->bk;
    return 2 * loads + mul + 1;
}

/* 2 x 2 warps of f x f fragments. */
static void frag_tile(kc_conv_plan *t, uint32_t f)
{
    t->wm = f * t->tm, t->wn = f * t->tn;
    t->bm = 2 * t->wm, t->bn = 2 * t->wn;
    t->threads = 4 * t->sg;
}

/* The device takes the tile, and the load assignment divides evenly (conv_gather.glsl's
 * fetch: each thread a fixed k of A, a fixed column or k of B). */
static int frag_fits(const gpu_profile *p, const kc_conv_plan *t, int coop)
{
    return t->threads % t->bk == 0 && t->threads % t->bn == 0 &&
           (t->bm * t->bk) % t->threads == 0 && (t->bn * t->bk) % t->threads == 0 &&
           (t->tm * t->tn) % t->sg == 0 && t->threads <= p->max_invocations &&
           frag_shared(t, coop) <= p->shared_memory;
}

int kc_conv_frag_plan(const gpu_profile *p, const kc_conv *g, uint32_t nc, int pass,
                      int want_dw, int want_db, const gpu_mat_shape *mat, uint32_t splits,
                      kc_conv_plan *out)
{
    kc_conv_plan pl = {0};
    double unique;
    pass_shape(g, nc, pass, want_dw, want_db, &pl, &unique);
    if (pl.n == 0)
        return 0;
    int coop = mat != NULL, cpu = p->style == VKT_KERNELS_CPU;
    if (coop)
        pl.tm = mat->m, pl.tn = mat->n, pl.tk = mat->k, pl.sg = p->subgroup_size;
    else
        pl.tm = pl.tn = pl.tk = cpu ? 8 : 16, pl.sg = cpu ? 8 : 32;
    if (pl.sg == 0)
        return 0;
    pl.bk = pl.tk >= 16 ? 2 * pl.tk : 4 * pl.tk;
    uint32_t f = cpu ? 2 : 4;
    while (f > 1 && (f * pl.tm > 64 || f * pl.tn > 64))
        f /= 2;
    frag_tile(&pl, f);
    while (f > 1 && (ceil_div(pl.m, pl.bm) * ceil_div(pl.n, pl.bn) * g->groups <
                         p->compute_units ||
                     !frag_fits(p, &pl, coop))) {
        f /= 2;
        frag_tile(&pl, f);
    }
    while (pl.bk > pl.tk && !frag_fits(p, &pl, coop))
        pl.bk /= 2;
    if (!frag_fits(p, &pl, coop))
        return 0;
    uint64_t walk = p->loop_budget / frag_slab_loops(&pl, coop);
    if (walk == 0)
        return 0;
    uint32_t lo, hi;
    split_range_walk(pl.bk, walk, &pl, g->groups, &lo, &hi);
    if (lo > hi)
        return 0;
    uint64_t tiles = ceil_div(pl.m, pl.bm) * ceil_div(pl.n, pl.bn) * g->groups;
    uint64_t want = splits              ? splits
                    : tiles < p->compute_units ? ceil_div(p->compute_units, tiles)
                                               : 1;
    want = want < lo ? lo : want > hi ? hi : want;
    uint64_t slabs = ceil_div(pl.k, pl.bk), per = ceil_div(slabs, want);
    pl.splits = (uint32_t)ceil_div(slabs, per); /* every split non-empty */
    pl.k_chunk = pl.splits > 1 ? (uint32_t)(per * pl.bk) : (uint32_t)pl.k;
    pl.tile = UINT32_MAX; /* no row of kc_conv_tiles */
    pl.shared_bytes = frag_shared(&pl, coop);
    pl.col_tiles = ceil_div(pl.n, pl.bn);
    pl.row_tiles = (uint32_t)ceil_div(pl.m, pl.bm);
    pl.z = g->groups * pl.splits;
    pl.workspace = pl.splits > 1 ? (uint64_t)pl.splits * g->oc * pl.n : 0;
    *out = pl;
    return 1;
}
