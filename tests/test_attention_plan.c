/* test_attention_plan.c - the work decomposition of causal attention on stated devices,
 * without the devices (issue 20, item 8; beside test_gemm_plan.c): the plan
 * ka_attention_plan (engine/kernels/attention_plan.c) gives the variant the device
 * chooses, attention_flash, for the attention of the char LM at width 384, 6 heads,
 * context 256, batch 64 (head size 64), the same width split in heads of 32, 48, 96 and
 * 128, longer contexts (1024 at batch 8 with 12 heads, 2048 at batch 4 with 8 heads of 128
 * and at batch 1 with 4 heads of 64), and the default char LM (width 64, 4 heads, context
 * 64, batch 32), on an H100 (132 compute units, 48 KiB shared memory, subgroup 32), an
 * RDNA3 card (96, 64 KiB, 64) and an Arc card (32, 64 KiB, 32). Every pass (the forward,
 * the backward by query blocks, by key blocks) must fill the device: at least one
 * workgroup per compute unit, unless the pass is too small to matter (fewer multiply-adds
 * than a 64x64x256 product on every compute unit, as in test_gemm_plan.c). Each plan is
 * also checked for what the shader assumes: lane groups of 1, 2, 4 or 8 lanes inside the
 * smallest subgroup, row arrays within 32 vec4 registers a lane, the staged tile within
 * the shared memory and a multiple of the 4-row online step, blocks and grid covering
 * every row, and device memory of b heads t floats for the saved logsumexps and for the
 * workspace (no t x t array). The plans are printed. */
#include <stdio.h>

#include "harness.h"
#include "gpu/gpu.h"
#include "kernels/attention.h"

typedef struct shape {
    const char *name;
    uint32_t b, t, heads, d;
} shape;

static const char *const k_pass[3] = {"forward", "dq (+D)", "dk, dv"};

static void check_plan(const char *device, const gpu_profile *p, const shape *s)
{
    gpu_variant chosen[GPU_FAMILY_COUNT];
    TH_OK(NULL, gpu_choose_variants(p, NULL, chosen, NULL));
    TH_CHECK(chosen[GPU_FAMILY_ATTENTION] == GPU_V_ATTENTION_FLASH,
             "%s: attention_flash is chosen", device);
    ka_plan pl = ka_attention_plan(p, chosen[GPU_FAMILY_ATTENTION], s->b, s->t, s->heads, s->d);
    uint64_t bht = (uint64_t)s->b * s->heads * s->t;
    TH_CHECK(pl.saved == KA_SAVED_LSE && pl.saved_elems == bht && pl.workspace_elems == bht,
             "%s %s: saves %llu and works in %llu floats (b heads t = %llu)", device, s->name,
             (unsigned long long)pl.saved_elems, (unsigned long long)pl.workspace_elems,
             (unsigned long long)bht);
    TH_CHECK(pl.max_t >= s->t, "%s %s: t = %u within the plan's limit %u", device, s->name,
             s->t, pl.max_t);
    /* multiply-adds of the causal scores of one product (q k^T): each pass does 2 to 4 */
    double macs = (double)s->b * s->heads * s->t * (s->t + 1) / 2.0 * s->d;
    int small = macs < (double)p->compute_units * 64 * 64 * 256;
    uint32_t nc = (s->d + 3) / 4, max_lanes = p->subgroup_size < 8 ? p->subgroup_size : 8;
    for (int k = 0; k < 3; k++) {
        const ka_pass *ps = &pl.pass[k];
        uint32_t cpl = (nc + ps->lanes - 1) / ps->lanes, arrays = 2 + (uint32_t)k;
        printf("  %-9s %-28s %-8s %3u threads, %u lanes x %u rows, %3u rows a block, tile "
               "%2u (%5u bytes), grid %5u x %u = %6llu workgroups%s\n", device, s->name,
               k_pass[k], ps->threads, ps->lanes, ps->rows, ps->rows_per_block, ps->tile,
               ps->shared_bytes, ps->groups[0], ps->groups[1],
               (unsigned long long)ps->workgroups, small ? "  (small)" : "");
        TH_CHECK(small || ps->workgroups >= p->compute_units,
                 "%s %s %s: %llu workgroups fill %u compute units", device, s->name, k_pass[k],
                 (unsigned long long)ps->workgroups, p->compute_units);
        TH_CHECK(ps->lanes >= 1 && ps->lanes <= max_lanes && (ps->lanes & (ps->lanes - 1)) == 0 &&
                     ps->threads % ps->lanes == 0 && ps->threads <= p->max_invocations &&
                     ps->threads >= 32,
                 "%s %s %s: %u lanes a row (subgroup %u), %u threads", device, s->name,
                 k_pass[k], ps->lanes, p->subgroup_size, ps->threads);
        TH_CHECK(arrays * ps->rows * cpl <= 32 && cpl <= 4 && ps->rows >= 1,
                 "%s %s %s: %u row arrays of %u rows x %u vec4s a lane", device, s->name,
                 k_pass[k], arrays, ps->rows, cpl);
        TH_CHECK(ps->shared_bytes <= p->shared_memory && ps->tile % 4 == 0 && ps->tile >= 16,
                 "%s %s %s: a tile of %u rows, %u bytes of %u", device, s->name, k_pass[k],
                 ps->tile, ps->shared_bytes, p->shared_memory);
        TH_CHECK(ps->rows_per_block == ps->rows * (ps->threads / ps->lanes) &&
                     (uint64_t)ps->blocks_per_head * ps->rows_per_block >= s->t &&
                     (uint64_t)(ps->blocks_per_head - 1) * ps->rows_per_block < s->t &&
                     ps->blocks == (uint64_t)s->b * s->heads * ps->blocks_per_head &&
                     ps->workgroups == ps->blocks &&
                     (uint64_t)ps->groups[0] * ps->groups[1] >= ps->workgroups &&
                     ps->groups[0] <= GPU_MAX_GROUPS && ps->groups[1] <= GPU_MAX_GROUPS,
                 "%s %s %s: the blocks and the grid cover every row", device, s->name,
                 k_pass[k]);
    }
}

int main(void)
{
    th_init_host("test_attention_plan");
    const shape shapes[] = {
        {"char LM 384/6, ctx 256, b 64", 64, 256, 6, 64},
        {"width 384/12 heads (d 32)", 64, 256, 12, 32},
        {"width 384/8 heads (d 48)", 64, 256, 8, 48},
        {"width 384/4 heads (d 96)", 64, 256, 4, 96},
        {"width 384/3 heads (d 128)", 64, 256, 3, 128},
        {"ctx 1024, b 8, 12 heads", 8, 1024, 12, 64},
        {"ctx 2048, b 4, 8 heads d 128", 4, 2048, 8, 128},
        {"ctx 2048, b 1, 4 heads", 1, 2048, 4, 64},
        {"default char LM 64/4 ctx 64", 32, 64, 4, 16},
    };
    struct {
        const char *name;
        uint32_t cus, shared, subgroup;
    } devs[] = {{"H100", 132, 48 * 1024, 32}, {"RX 7900 XTX", 96, 64 * 1024, 64},
                {"Arc A770", 32, 64 * 1024, 32}};
    for (size_t d = 0; d < sizeof devs / sizeof devs[0]; d++) {
        gpu_profile p;
        gpu_profile_stated(VKT_DEVICE_TYPE_DISCRETE_GPU, devs[d].cus, devs[d].shared,
                           devs[d].subgroup, &p);
        printf("%s (%u compute units, %u bytes of shared memory, subgroup %u):\n", devs[d].name,
               p.compute_units, p.shared_memory, p.subgroup_size);
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
            check_plan(devs[d].name, &p, &shapes[i]);
    }

    /* The char LM on the H100: every pass in whole workgroups of 64 rows (no fewer rows
     * per lane than the registers allow: the grid is full already), head size 64 over 4
     * lanes, 64-row tiles (two of 64 x 64 floats: 33 KiB). */
    gpu_profile h100;
    gpu_profile_stated(VKT_DEVICE_TYPE_DISCRETE_GPU, 132, 48 * 1024, 32, &h100);
    ka_plan lm = ka_attention_plan(&h100, GPU_V_ATTENTION_FLASH, 64, 256, 6, 64);
    TH_CHECK(lm.pass[0].rows == 4 && lm.pass[1].rows == 2 && lm.pass[2].rows == 2 &&
                 lm.pass[0].rows_per_block == 64 && lm.pass[2].rows_per_block == 64 &&
                 lm.pass[0].lanes == 4 && lm.pass[0].tile == 64 &&
                 lm.pass[0].workgroups == 64 * 6 * 4,
             "char LM on an H100: 4 / 2 / 2 rows a lane group, 64-row blocks and tiles, 1536 "
             "workgroups a pass (%u / %u / %u rows, %u lanes, tile %u, %llu workgroups)",
             lm.pass[0].rows, lm.pass[1].rows, lm.pass[2].rows, lm.pass[0].lanes,
             lm.pass[0].tile, (unsigned long long)lm.pass[0].workgroups);
    /* Head size 128 on 48 KiB: 32-row tiles; on 64 KiB still 32 (64 rows would need 65 KiB). */
    ka_plan wide = ka_attention_plan(&h100, GPU_V_ATTENTION_FLASH, 4, 2048, 8, 128);
    TH_CHECK(wide.pass[0].tile == 32 && wide.pass[0].lanes == 8,
             "d 128 on an H100: 32-row tiles, 8 lanes a row (%u, %u)", wide.pass[0].tile,
             wide.pass[0].lanes);
    /* A small grid: fewer rows per lane group until the device is full. */
    ka_plan few = ka_attention_plan(&h100, GPU_V_ATTENTION_FLASH, 1, 2048, 4, 64);
    TH_CHECK(few.pass[0].rows < 4 && few.pass[0].workgroups >= 132,
             "b 1, 4 heads, ctx 2048 on an H100: %u rows a lane group, %llu workgroups",
             few.pass[0].rows, (unsigned long long)few.pass[0].workgroups);
    /* Subgroups of 4 (some mobile GPUs): lane groups of at most 4. */
    gpu_profile narrow;
    gpu_profile_stated(VKT_DEVICE_TYPE_INTEGRATED_GPU, 8, 32 * 1024, 4, &narrow);
    ka_plan n4 = ka_attention_plan(&narrow, GPU_V_ATTENTION_FLASH, 8, 256, 4, 128);
    TH_CHECK(n4.pass[0].lanes == 4 && n4.pass[0].shared_bytes <= 32 * 1024,
             "subgroups of 4, d 128: %u lanes a row, %u bytes of shared memory",
             n4.pass[0].lanes, n4.pass[0].shared_bytes);
    /* Outside the family, or empty sizes: a plan of zeros. */
    ka_plan none = ka_attention_plan(&h100, GPU_V_GEMM_TILE, 1, 1, 1, 1);
    ka_plan empty = ka_attention_plan(&h100, GPU_V_ATTENTION_FLASH, 1, 0, 1, 64);
    TH_CHECK(none.max_t == 0 && none.pass[0].workgroups == 0 && empty.max_t == 0 &&
                 empty.saved_elems == 0,
             "no plan for a GEMM variant or t = 0");
    return th_finish();
}
