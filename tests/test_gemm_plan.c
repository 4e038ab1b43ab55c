/* test_gemm_plan.c - the work decomposition of every GEMM and convolution GEMM of the
 * benchmark models on stated devices, without the devices (issue 20, item 8): the plan
 * vkt_gemm would dispatch (engine/kernels/gemm_plan.c) for each GEMM of a training step
 * of the MLP 784-256-128-10 at batch 1024, the char LM at width 384, 6 layers, 6 heads,
 * context 256, batch 64 (every layer has the same four products), and the CNN's
 * convolutions (kc_conv_gemms: the GEMMs conv.c records) at batch 64 and 512, on an
 * H100 (132 compute units, 48 KiB shared memory, subgroup 32), an RDNA3 card (96, 64
 * KiB, 64) and an Arc card (32, 64 KiB, 32). Each must fill the device: at least one
 * workgroup per compute unit, unless the whole product is too small to matter (fewer
 * multiply-adds than a 64x64 tile with K = 256 on every compute unit: about 8 us of one
 * unit's work at the plan's modelled rate, where a second dispatch to sum split partial
 * tiles costs about as much as it saves); and no workgroup
 * may walk a long K while compute units idle (the 4 ms conv1 weight gradient of the
 * H200 baseline: one workgroup over K = 50,176). The plans are also checked for
 * consistency (splits cover K in whole slabs, the workspace is what the splits need, the
 * tile fits the device's shared memory) and printed.
 * The same for the conv_implicit variant (kc_conv_implicit_plan, conv_plan.c): every pass
 * the CNN's training step runs (conv1: forward and weight gradient, its input needing no
 * gradient; conv2: forward, weight and data gradients) at batch 64 and 512 must get at
 * least one workgroup per compute unit, with no small-work exemption, and no workgroup
 * may walk more than 8192 of K while compute units idle. Printed beside each: its FLOPs,
 * the bytes it must move at least, and their ratio (the roofline note of
 * docs/performance.md). Both variants take the whole batch in one dispatch per GEMM: the
 * weight gradient's sum over n oh ow is never cut into chunks of samples (which would
 * run one after another) on a device whose bindings span 2^30 floats. */
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "gpu/gpu.h"
#include "kernels/conv.h"
#include "kernels/gemm.h"

typedef struct shape {
    const char *name;
    int ta, tb;
    uint32_t m, n, k;
} shape;

/* A linear [rows, in] -> [rows, out]: forward X W, weight gradient X^T dY, input gradient
 * dY W^T (how op_product.c records them). */
static uint32_t linear(shape *out, const char *name, uint32_t rows, uint32_t in, uint32_t o)
{
    out[0] = (shape){name, 0, 0, rows, o, in};
    out[1] = (shape){name, 1, 0, in, o, rows};
    out[2] = (shape){name, 0, 1, rows, in, o};
    return 3;
}

static uint32_t conv(shape *out, const char *name, uint32_t n, uint32_t c, uint32_t side,
                     uint32_t oc)
{
    kc_conv g = {.n = n, .c = c, .h = side, .w = side, .oc = oc, .kh = 3, .kw = 3,
                 .stride_h = 1, .stride_w = 1, .pad_h = 1, .pad_w = 1, .dil_h = 1, .dil_w = 1,
                 .groups = 1};
    if (!TH_OK(NULL, kc_conv_init(&g, NULL, 0)))
        return 0;
    kc_gemm gm[KC_GEMMS];
    kc_conv_gemms(&g, n, gm); /* the whole batch in one chunk */
    for (int i = 0; i < KC_GEMMS; i++)
        out[i] = (shape){name, gm[i].trans_a, gm[i].trans_b, (uint32_t)gm[i].m,
                         (uint32_t)gm[i].n, (uint32_t)gm[i].k};
    return KC_GEMMS;
}

static const char *const k_kind[3] = {"forward", "weight grad", "input grad"};

static void check_plans(const char *device, const gpu_profile *p, const char *model,
                        const shape *s, uint32_t n)
{
    gpu_variant chosen[GPU_FAMILY_COUNT];
    TH_OK(NULL, gpu_choose_variants(p, NULL, chosen, NULL));
    TH_CHECK(chosen[GPU_FAMILY_GEMM] == GPU_V_GEMM_TILE, "%s: gemm_tile is chosen", device);
    printf("%s, %s (%u compute units):\n", device, model, p->compute_units);
    for (uint32_t i = 0; i < n; i++) {
        kg_plan pl = kg_gemm_plan(p, chosen[GPU_FAMILY_GEMM], s[i].m, s[i].n, s[i].k);
        uint64_t wgs = kg_plan_workgroups(&pl);
        double macs = (double)s[i].m * s[i].n * s[i].k;
        int small = macs < (double)p->compute_units * 64 * 64 * 256;
        printf("  %-8s %-11s %6u x %5u x %5u  tile %3ux%-3u  grid %4u x %4u x %3u  "
               "= %6llu workgroups%s\n", s[i].name, k_kind[i % 3], s[i].m, s[i].n, s[i].k,
               pl.bm, pl.bn, pl.groups[0], pl.groups[1], pl.groups[2],
               (unsigned long long)wgs, small ? "  (small)" : "");
        TH_CHECK(small || wgs >= p->compute_units,
                 "%s %s %s %ux%ux%u: %llu workgroups fill %u compute units", device,
                 s[i].name, k_kind[i % 3], s[i].m, s[i].n, s[i].k, (unsigned long long)wgs,
                 p->compute_units);
        uint64_t tiles = (uint64_t)pl.groups[0] * pl.groups[1];
        TH_CHECK(pl.k_chunk <= 8192 || tiles >= p->compute_units,
                 "%s %s %ux%ux%u: no workgroup walks K = %u while compute units idle",
                 device, s[i].name, s[i].m, s[i].n, s[i].k, pl.k_chunk);
        /* consistency */
        TH_CHECK(pl.groups[2] == pl.splits && (uint64_t)pl.splits * pl.k_chunk >= s[i].k &&
                     (uint64_t)(pl.splits - 1) * pl.k_chunk < s[i].k &&
                     (pl.splits == 1 || pl.k_chunk % pl.bk == 0),
                 "%s %ux%ux%u: %u splits of %u cover K in whole slabs of %u", s[i].name,
                 s[i].m, s[i].n, s[i].k, pl.splits, pl.k_chunk, pl.bk);
        TH_CHECK(pl.workspace == (pl.splits > 1 ? (uint64_t)pl.splits * s[i].m * s[i].n : 0),
                 "%s: the workspace holds the partial tiles", s[i].name);
        TH_CHECK(pl.shared_bytes <= p->shared_memory && pl.threads <= p->max_invocations &&
                     pl.groups[0] * pl.bn >= s[i].n && pl.groups[1] * pl.bm >= s[i].m,
                 "%s: the tile fits the device and the grid covers C", s[i].name);
    }
}

/* conv_implicit's plans for the passes of one convolution layer (3x3, pad 1, with bias)
 * of the CNN; `data`: its input needs a gradient. */
static void check_conv_layer(const char *device, const gpu_profile *p, const char *name,
                             uint32_t n, uint32_t c, uint32_t side, uint32_t oc, int data)
{
    kc_conv g = {.n = n, .c = c, .h = side, .w = side, .oc = oc, .kh = 3, .kw = 3,
                 .stride_h = 1, .stride_w = 1, .pad_h = 1, .pad_w = 1, .dil_h = 1, .dil_w = 1,
                 .groups = 1};
    if (!TH_OK(NULL, kc_conv_init(&g, NULL, 0)))
        return;
    /* one chunk in both variants where a binding spans 2^30 floats (ku_chunk_elements) */
    TH_CHECK(kc_conv_workspace_elems(&g, 1u << 30) == kc_conv_workspace_elems(&g, UINT64_MAX),
             "%s batch %u: conv_im2col's workspace holds the whole batch", name, n);
    TH_CHECK((uint64_t)n * oc * side * side < (1u << 30) && (uint64_t)n * c * side * side <
             (1u << 30), "%s batch %u: conv_implicit binds the whole batch", name, n);
    const int passes[3] = {KC_GEMM_FORWARD, KC_GEMM_WEIGHT, KC_GEMM_DATA};
    double x = (double)n * c * side * side, y = (double)n * oc * side * side, w = oc * c * 9.0;
    for (int i = 0; i < (data ? 3 : 2); i++) {
        kc_conv_plan pl;
        int pass = passes[i];
        if (!TH_CHECK(kc_conv_implicit_plan(p, &g, n, pass, 1, 1, &pl), "%s %s: a plan",
                      device, name))
            continue;
        uint64_t wgs = kc_conv_plan_workgroups(&pl);
        double flops = 2.0 * (double)pl.m * pl.n * pl.k, bytes;
        if (pass == KC_GEMM_WEIGHT)
            flops = 2.0 * y * c * 9 + y; /* dw, and db: a sum */
        bytes = 4.0 * (x + y + w + (pass == KC_GEMM_WEIGHT ? oc : 0));
        printf("  %-6s %-11s %5llu x %6llu x %6llu  tile %3ux%-3u  grid %5llu x %u x %4u "
               "= %6llu workgroups  %7.1f MFLOP %6.2f MB %5.1f FLOP/B\n", name,
               k_kind[pass], (unsigned long long)pl.m, (unsigned long long)pl.n,
               (unsigned long long)pl.k, pl.bm, pl.bn, (unsigned long long)pl.col_tiles,
               pl.row_tiles, pl.z, (unsigned long long)wgs, flops / 1e6, bytes / 1e6,
               flops / bytes);
        TH_CHECK(wgs >= p->compute_units, "%s %s %s: %llu workgroups fill %u compute units",
                 device, name, k_kind[pass], (unsigned long long)wgs, p->compute_units);
        uint64_t tiles = pl.col_tiles * pl.row_tiles * g.groups;
        TH_CHECK(pl.k_chunk <= 8192 || tiles >= p->compute_units,
                 "%s %s %s: no workgroup walks K = %u while compute units idle", device,
                 name, k_kind[pass], pl.k_chunk);
        TH_CHECK((uint64_t)pl.splits * pl.k_chunk >= pl.k &&
                     (uint64_t)(pl.splits - 1) * pl.k_chunk < pl.k &&
                     (pl.splits == 1 || pl.k_chunk % pl.bk == 0) &&
                     pl.z == g.groups * pl.splits,
                 "%s %s: %u splits of %u cover K = %llu in whole slabs", name, k_kind[pass],
                 pl.splits, pl.k_chunk, (unsigned long long)pl.k);
        TH_CHECK(pl.workspace == (pl.splits > 1 ? (uint64_t)pl.splits * oc * pl.n : 0),
                 "%s %s: the workspace holds the partial sums", name, k_kind[pass]);
        TH_CHECK(pl.shared_bytes <= p->shared_memory && pl.threads <= p->max_invocations &&
                     pl.col_tiles * pl.bn >= pl.n && (uint64_t)pl.row_tiles * pl.bm >= pl.m,
                 "%s %s: the tile fits the device and the grid covers C", name,
                 k_kind[pass]);
    }
}

static void check_conv_plans(const char *device, const gpu_profile *p)
{
    gpu_variant chosen[GPU_FAMILY_COUNT];
    TH_OK(NULL, gpu_choose_variants(p, NULL, chosen, NULL));
    TH_CHECK(chosen[GPU_FAMILY_CONV] == GPU_V_CONV_IMPLICIT, "%s: conv_implicit is chosen",
             device);
    for (uint32_t b = 64; b <= 512; b *= 8) {
        printf("%s, CNN, batch %u, conv_implicit (%u compute units):\n", device, b,
               p->compute_units);
        check_conv_layer(device, p, "conv1", b, 1, 28, 16, 0);
        check_conv_layer(device, p, "conv2", b, 16, 14, 32, 1);
    }
}

/* conv_implicit's plan on devices it cannot fit, and the loop budget. */
static void check_conv_limits(void)
{
    kc_conv g = {.n = 512, .c = 16, .h = 14, .w = 14, .oc = 32, .kh = 3, .kw = 3,
                 .stride_h = 1, .stride_w = 1, .pad_h = 1, .pad_w = 1, .dil_h = 1, .dil_w = 1,
                 .groups = 1};
    TH_OK(NULL, kc_conv_init(&g, NULL, 0));
    gpu_profile p;
    kc_conv_plan pl;
    gpu_profile_stated(VKT_DEVICE_TYPE_DISCRETE_GPU, 132, 4096, 32, &p);
    TH_CHECK(!kc_conv_implicit_plan(&p, &g, g.n, KC_GEMM_FORWARD, 1, 1, &pl),
             "4 KiB of shared memory: no tile");
    /* an llvmpipe-like loop budget: the weight gradient (K = 100352) splits so that no
     * workgroup walks more than budget / 4 slabs, even on 2 compute units */
    gpu_profile_stated(VKT_DEVICE_TYPE_CPU, 2, 32768, 8, &p);
    p.loop_budget = 60000;
    TH_CHECK(kc_conv_implicit_plan(&p, &g, g.n, KC_GEMM_WEIGHT, 1, 1, &pl) &&
                 (pl.k_chunk + pl.bk - 1) / pl.bk <= p.loop_budget / 4,
             "a loop budget of 60000: K = %llu in splits of %u", (unsigned long long)pl.k,
             pl.k_chunk);
    p.loop_budget = 4 * 4; /* 4 slabs: the forward's K = 144 fits no tile (BK 8 to 32) */
    TH_CHECK(!kc_conv_implicit_plan(&p, &g, g.n, KC_GEMM_FORWARD, 1, 1, &pl),
             "a loop budget too small for the forward's K: no plan");
    /* the weight gradient's columns: dw (144) and db (1), either alone */
    gpu_profile_stated(VKT_DEVICE_TYPE_DISCRETE_GPU, 132, 48 * 1024, 32, &p);
    kc_conv_plan both, dw, db;
    TH_CHECK(kc_conv_implicit_plan(&p, &g, g.n, KC_GEMM_WEIGHT, 1, 1, &both) &&
                 kc_conv_implicit_plan(&p, &g, g.n, KC_GEMM_WEIGHT, 1, 0, &dw) &&
                 kc_conv_implicit_plan(&p, &g, g.n, KC_GEMM_WEIGHT, 0, 1, &db) &&
                 both.n == 145 && both.bias_col == 144 && dw.n == 144 &&
                 dw.bias_col == UINT32_MAX && db.n == 1 && db.bias_col == 0,
             "weight gradient columns: %llu (db at %u), %llu, %llu (db at %u)",
             (unsigned long long)both.n, both.bias_col, (unsigned long long)dw.n,
             (unsigned long long)db.n, db.bias_col);
}

int main(void)
{
    th_init_host("test_gemm_plan");
    shape mlp[9], lm[15], cnn64[9], cnn512[9];
    uint32_t nm = 0, nl = 0, c64 = 0, c512 = 0;
    nm += linear(mlp + nm, "fc1", 1024, 784, 256);
    nm += linear(mlp + nm, "fc2", 1024, 256, 128);
    nm += linear(mlp + nm, "fc3", 1024, 128, 10);
    const uint32_t rows = 64 * 256, c = 384, vocab = 65;
    nl += linear(lm + nl, "qkv", rows, c, 3 * c);
    nl += linear(lm + nl, "proj", rows, c, c);
    nl += linear(lm + nl, "fc", rows, c, 4 * c);
    nl += linear(lm + nl, "fc2", rows, 4 * c, c);
    nl += linear(lm + nl, "head", rows, c, vocab);
    c64 += conv(cnn64 + c64, "conv1", 64, 1, 28, 16);
    c64 += conv(cnn64 + c64, "conv2", 64, 16, 14, 32);
    c64 += linear(cnn64 + c64, "fc", 64, 32 * 7 * 7, 10);
    c512 += conv(cnn512 + c512, "conv1", 512, 1, 28, 16);
    c512 += conv(cnn512 + c512, "conv2", 512, 16, 14, 32);
    c512 += linear(cnn512 + c512, "fc", 512, 32 * 7 * 7, 10);

    struct {
        const char *name;
        uint32_t cus, shared, subgroup;
    } devs[] = {{"H100", 132, 48 * 1024, 32}, {"RX 7900 XTX", 96, 64 * 1024, 64},
                {"Arc A770", 32, 64 * 1024, 32}};
    for (size_t d = 0; d < sizeof devs / sizeof devs[0]; d++) {
        gpu_profile p;
        gpu_profile_stated(VKT_DEVICE_TYPE_DISCRETE_GPU, devs[d].cus, devs[d].shared,
                           devs[d].subgroup, &p);
        check_plans(devs[d].name, &p, "MLP 784-256-128-10, batch 1024", mlp, nm);
        check_plans(devs[d].name, &p, "char LM 384 wide, context 256, batch 64", lm, nl);
        check_plans(devs[d].name, &p, "CNN, batch 64", cnn64, c64);
        check_plans(devs[d].name, &p, "CNN, batch 512", cnn512, c512);
        check_conv_plans(devs[d].name, &p);
    }
    check_conv_limits();

    /* The two weight gradients that one workgroup walked: split on an H100. */
    gpu_profile h100;
    gpu_profile_stated(VKT_DEVICE_TYPE_DISCRETE_GPU, 132, 48 * 1024, 32, &h100);
    kg_plan a = kg_gemm_plan(&h100, GPU_V_GEMM_TILE, 384, 1536, 16384);
    kg_plan b = kg_gemm_plan(&h100, GPU_V_GEMM_TILE, 64, 192, 2048);
    TH_CHECK(a.splits > 1 && kg_plan_workgroups(&a) >= 132,
             "384x1536, K=16384: %u splits, %llu workgroups", a.splits,
             (unsigned long long)kg_plan_workgroups(&a));
    TH_CHECK(b.splits > 1 && kg_plan_workgroups(&b) >= 66,
             "64x192, K=2048: %u splits, %llu workgroups", b.splits,
             (unsigned long long)kg_plan_workgroups(&b));
    /* Large square products: the 128x128 tile, no split. */
    kg_plan sq = kg_gemm_plan(&h100, GPU_V_GEMM_TILE, 4096, 4096, 4096);
    TH_CHECK(sq.bm == 128 && sq.bn == 128 && sq.splits == 1,
             "4096^3: 128x128 tiles, no split (%ux%u, %u splits)", sq.bm, sq.bn, sq.splits);
    return th_finish();
}
