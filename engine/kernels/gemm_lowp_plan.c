/* gemm_lowp_plan.c - the tiles of the 16-bit GEMM (gemm_lowp.h). Pure: no Vulkan call. */
#include "kernels/gemm_lowp.h"

static uint32_t ceil_div(uint64_t x, uint64_t y) { return (uint32_t)((x + y - 1) / y); }

/* Shared memory of a tile (gemm_lowp.glsl): As and Bs twice, rows of bk + pad elements of
 * `elem` bytes, and for cooperative matrices a TM x TN fp32 slice per warp. */
static uint32_t shared_bytes(const kg_lowp_plan *t, int coop)
{
    uint32_t elem = coop || t->variant == GPU_V_GEMM_F16_HALF ? 2 : 4;
    uint32_t pad = coop ? 8 : t->variant == GPU_V_GEMM_F16_HALF ? 2 : 1;
    uint32_t warps = (t->bm / t->wm) * (t->bn / t->wn);
    return 2 * (t->bm + t->bn) * (t->bk + pad) * elem + (coop ? warps * t->tm * t->tn * 4 : 0);
}

/* Loop iterations per slab if the driver unrolls nothing: the staging loops (4 per run
 * and thread, loads and stores) and the multiply-adds (cooperative: one per fragment pair
 * and K step). */
static uint64_t slab_loops(const kg_lowp_plan *t, int coop)
{
    uint64_t runs = ceil_div((uint64_t)(t->bm + t->bn) * t->bk / 4, t->threads);
    uint64_t frags = (uint64_t)(t->wm / t->tm) * (t->wn / t->tn);
    uint64_t mul = coop ? frags * (t->bk / t->tk) : frags * (t->tm * t->tn / t->sg) * t->bk;
    return 8 * runs + mul + 1;
}

static void set_tile(kg_lowp_plan *t, uint32_t warps_m, uint32_t warps_n, uint32_t fm,
                     uint32_t fn)
{
    t->wm = fm * t->tm, t->wn = fn * t->tn;
    t->bm = warps_m * t->wm, t->bn = warps_n * t->wn;
    t->threads = warps_m * warps_n * t->sg;
}

kg_lowp_plan kg_lowp_plan_make(const gpu_profile *p, gpu_variant variant, uint32_t m,
                               uint32_t n, uint32_t k)
{
    kg_lowp_plan t = {.variant = variant, .ok = 1};
    int coop = variant == GPU_V_GEMM_F16_COOPMAT || variant == GPU_V_GEMM_BF16_COOPMAT;
    if (coop) {
        const gpu_mat_shape *s =
            gpu_mat_for(p, variant == GPU_V_GEMM_F16_COOPMAT ? GPU_MAT_F16 : GPU_MAT_BF16);
        if (!s) {
            t.ok = 0, t.why = "no cooperative-matrix shape for these inputs";
            return t;
        }
        t.tm = s->m, t.tn = s->n, t.tk = s->k, t.sg = p->subgroup_size;
        t.bk = t.tk >= 16 ? 2 * t.tk : 4 * t.tk; /* 32, or 64 for K = 32 */
        /* 4 x 4 fragments per warp (at most 64 x 64), 2 x 2 warps; smaller while the tiles
         * leave compute units idle or do not fit. A CPU-style device (Mesa 26's lavapipe,
         * which emulates the matrices: it compiles a 4 x 4 warp for half a minute) starts
         * at 2 x 2. */
        uint32_t f = p->style == VKT_KERNELS_CPU ? 2 : 4;
        while (f > 1 && f * t.tm > 64)
            f /= 2;
        set_tile(&t, 2, 2, f, f);
        while (f > 1 && ((uint64_t)ceil_div(m, t.bm) * ceil_div(n, t.bn) < p->compute_units ||
                         shared_bytes(&t, 1) > p->shared_memory ||
                         t.threads > p->max_invocations)) {
            f /= 2;
            set_tile(&t, 2, 2, f, f);
        }
        while (t.bk > t.tk && shared_bytes(&t, 1) > p->shared_memory)
            t.bk /= 2;
    } else {
        int cpu = p->style == VKT_KERNELS_CPU;
        t.tm = t.tn = 16, t.tk = 16, t.bk = 16;
        t.sg = cpu ? 16 : 32;
        set_tile(&t, 2, 2, cpu ? 1 : 2, cpu ? 1 : 2);
        if (t.threads > p->max_invocations) /* 64 always fits: the variants need it */
            set_tile(&t, 2, 2, 1, 1), t.sg = 16, t.threads = 64;
    }
    t.shared_bytes = shared_bytes(&t, coop);
    if (t.shared_bytes > p->shared_memory || t.threads > p->max_invocations) {
        t.ok = 0, t.why = "no tile fits the device's shared memory and workgroup size";
        return t;
    }
    t.slab_loops = slab_loops(&t, coop);
    t.groups[0] = ceil_div(n, t.bn);
    t.groups[1] = ceil_div(m, t.bm);
    t.groups[2] = 1;
    (void)k;
    return t;
}
