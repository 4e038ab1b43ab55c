/* variants.c - the kernel variants: one row per variant with what it needs of a device,
 * the kernel filter ($VKT_KERNELS) and each family's choice for a profile. Adding a
 * variant: its id in gpu.h's GPU_VARIANTS, a row here, its shader, and the case in its
 * family's dispatch (engine/kernels/, engine/optim/) that runs it. */
#include "gpu.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CPU GPU_STYLE_CPU
#define GPU GPU_STYLE_GPU
#define SHUFFLE (GPU_CAP_SUBGROUP_BASIC | GPU_CAP_SUBGROUP_SHUFFLE)
#define TEXEL GPU_CAP_STORAGE_TEXEL
#define S16 GPU_CAP_STORAGE16
#define COOPMAT GPU_CAP_COOPERATIVE_MATRIX

/* In order of preference within a family: the first row that suits the style and runs
 * on the device is chosen. Every family ends with a row for both styles that any
 * conformant device runs, so a style never leaves a family without a kernel; but the
 * 16-bit GEMMs', convolutions' and attention's, which need 16-bit storage buffers (a
 * device without them computes in fp32 only, and vkt_gemm, kc_conv2d_lowp and
 * ka_attention_lowp say so). */
static const gpu_variant_row k_rows[GPU_VARIANT_COUNT] = {
    [GPU_V_GEMM_TEXEL] = {GPU_FAMILY_GEMM, "gemm_texel", CPU, SHUFFLE | TEXEL, 8, 0, 32,
                          "a 16x32 register tile per 8-lane subgroup, operands through "
                          "storage texel buffers, shuffles (gemm_cpu.comp)"},
    [GPU_V_GEMM_SAMPLER] = {GPU_FAMILY_GEMM, "gemm_sampler", CPU, SHUFFLE, 8, 0, 32,
                            "gemm_texel reading A and B through uniform texel buffers "
                            "(gemm_cpu_sampler.comp)"},
    [GPU_V_GEMM_TILE] = {GPU_FAMILY_GEMM, "gemm_tile", GPU, 0, 1, 16896, 256,
                         "register-blocked tiles (up to 128x128, 8x8 per thread) from "
                         "double-buffered shared memory, vec4 loads, split-K when the tiles "
                         "leave compute units idle (gemm_tile.comp, gemm_reduce.comp)"},
    [GPU_V_GEMM_SHARED] = {GPU_FAMILY_GEMM, "gemm_shared", CPU | GPU, 0, 1, 4096, 64,
                           "shared-memory tiles, a register block per thread "
                           "(gemm_gpu.comp)"},
    /* 16-bit inputs, fp32 accumulation (kernels/gemm_lowp.c): one tiling for all, the
     * cooperative-matrix rows multiplying fragments with the matrix instruction, the
     * others with fp32 (or fp16) multiply-adds. gemm_f16_half computes in fp16 and is
     * chosen only by name: its partial sums overflow at 65504 (README, "Kernels"). */
    [GPU_V_GEMM_F16_COOPMAT] = {GPU_FAMILY_GEMM_F16, "gemm_f16_coopmat", GPU,
                                S16 | GPU_CAP_FLOAT16 | COOPMAT, 1,
                                0, 0, "fragments of A and B staged in shared memory, "
                                "multiplied on VK_KHR_cooperative_matrix, fp32 accumulators "
                                "(gemm_coopmat_f16.comp)", GPU_MAT_F16},
    [GPU_V_GEMM_F16_WIDEN] = {GPU_FAMILY_GEMM_F16, "gemm_f16_widen", CPU, S16, 1, 0, 64,
                              "A and B widened exactly to fp32 in the stream's scratch memory "
                              "(cast.comp), the context's fp32 GEMM, a 16-bit C rounded back: "
                              "lavapipe's fast path"},
    [GPU_V_GEMM_F16_FLOAT] = {GPU_FAMILY_GEMM_F16, "gemm_f16_float", CPU | GPU, S16, 1, 0, 64,
                              "the same tiles, fp16 read from 16-bit storage, fp32 "
                              "multiply-adds (gemm_half.comp)"},
    [GPU_V_GEMM_F16_HALF] = {GPU_FAMILY_GEMM_F16, "gemm_f16_half", 0,
                             S16 | GPU_CAP_FLOAT16, 1, 0, 64,
                             "the same tiles, fp16 multiply-adds over each K slab added into "
                             "fp32 (gemm_half_f16.comp); by name only"},
    [GPU_V_GEMM_BF16_COOPMAT] = {GPU_FAMILY_GEMM_BF16, "gemm_bf16_coopmat", GPU,
                                 S16 | GPU_CAP_FLOAT16 | COOPMAT | GPU_CAP_BFLOAT16, 1, 0, 0,
                                 "gemm_f16_coopmat's kernel on bfloat16 matrices "
                                 "(VK_KHR_shader_bfloat16; gemm_coopmat_bf16.comp)",
                                 GPU_MAT_BF16},
    [GPU_V_GEMM_BF16_WIDEN] = {GPU_FAMILY_GEMM_BF16, "gemm_bf16_widen", CPU, S16, 1, 0, 64,
                               "gemm_f16_widen for bf16"},
    [GPU_V_GEMM_BF16_FLOAT] = {GPU_FAMILY_GEMM_BF16, "gemm_bf16_float", CPU | GPU, S16, 1, 0,
                               64, "the same tiles, bf16 read from 16-bit storage as fp32, "
                               "fp32 multiply-adds (gemm_half.comp)"},
    [GPU_V_CONV_IMPLICIT] = {GPU_FAMILY_CONV, "conv_implicit", GPU, 0, 1, 5120, 16,
                             "implicit GEMM: the im2col gather inside register-blocked "
                             "tile loads from NCHW, bias and relu in the stores, the weight "
                             "gradient split-K (conv_implicit.comp, conv_reduce.comp)"},
    [GPU_V_CONV_IM2COL] = {GPU_FAMILY_CONV, "conv_im2col", CPU | GPU, TEXEL, 1, 0, 64,
                           "im2col into GEMMs, col2im, texel reads (im2col.comp, "
                           "col2im.comp, conv_move.comp)"},
    /* 16-bit x, w and dy, fp32 accumulation, bias, relu mask and outputs (kernels/conv_lowp.c):
     * conv_implicit's gathers on the 16-bit GEMM's warp tiling with cooperative matrices,
     * conv_implicit's tiles loading 16-bit operands, or (lavapipe's) the operands widened
     * into the workspace and the context's fp32 convolution. conv_lowp_frag is the
     * cooperative-matrix row's kernel with fp32 multiply-adds for the matrix instruction,
     * chosen only by name: lavapipe without cooperative matrices checks that tiling. */
    [GPU_V_CONV_LOWP_COOPMAT] = {GPU_FAMILY_CONV_LOWP, "conv_lowp_coopmat", GPU,
                                 S16 | GPU_CAP_FLOAT16 | COOPMAT, 1, 0, 0,
                                 "conv_implicit's gathers on gemm_f16_coopmat's warp tiles, "
                                 "fragments multiplied on VK_KHR_cooperative_matrix into fp32 "
                                 "(conv_coopmat_f16.comp; bf16: conv_coopmat_bf16.comp where "
                                 "the device has bf16 matrices, else conv_frag.comp)",
                                 GPU_MAT_F16},
    [GPU_V_CONV_LOWP_IMPLICIT] = {GPU_FAMILY_CONV_LOWP, "conv_lowp_implicit", GPU, S16, 1,
                                  5120, 16, "conv_implicit's implicit GEMM with x, w and dy "
                                  "read from 16-bit storage, widened exactly as loaded, fp32 "
                                  "multiply-adds (conv_implicit_lowp.comp)"},
    [GPU_V_CONV_LOWP_WIDEN] = {GPU_FAMILY_CONV_LOWP, "conv_lowp_widen", CPU | GPU, S16, 1, 0,
                               64, "x, w and dy widened exactly to fp32 in the workspace "
                               "(cast.comp), the context's fp32 convolution: lavapipe's"},
    [GPU_V_CONV_LOWP_FRAG] = {GPU_FAMILY_CONV_LOWP, "conv_lowp_frag", 0, S16, 1, 0, 32,
                              "conv_lowp_coopmat's tiles with fp32 multiply-adds for the "
                              "matrix instruction (conv_frag.comp); by name only"},
    [GPU_V_ATTENTION_SHUFFLE] = {GPU_FAMILY_ATTENTION, "attention_shuffle", CPU, SHUFFLE, 8,
                                 0, 8, "8 query rows per 8-lane workgroup, row pairs "
                                 "through subgroup shuffles (attention.comp)"},
    [GPU_V_ATTENTION_FLASH] = {GPU_FAMILY_ATTENTION, "attention_flash", GPU, SHUFFLE, 1,
                               16384, 64, "query (key) blocks per workgroup, key (query) "
                               "tiles through shared memory, online softmax, rows split "
                               "over lane groups; saves the row logsumexps, no t x t array "
                               "(attention_flash.comp)"},
    [GPU_V_ATTENTION_ROWS] = {GPU_FAMILY_ATTENTION, "attention_rows", CPU | GPU, SHUFFLE, 1,
                              0, 64, "one query row per lane, 64-lane workgroups "
                              "(attention.comp)"},
    /* 16-bit q, k, v and dy, fp32 scores, softmax statistics, sums, y and gradients
     * (kernels/attention_lowp.c): attention_flash's tiles loading 16-bit rows, or
     * (lavapipe's) the rows widened into fp32 copies and the context's fp32 attention.
     * attention_lowp_coopmat: the forward's two products and the backward's five on
     * cooperative matrices (attention_frag.glsl, attention_frag_bwd.glsl);
     * attention_lowp_frag is it with fp32 multiply-adds for the matrix instruction, chosen
     * only by name: lavapipe without cooperative matrices checks that tiling. */
    [GPU_V_ATTENTION_LOWP_COOPMAT] = {GPU_FAMILY_ATTENTION_LOWP, "attention_lowp_coopmat",
                                      GPU, S16 | SHUFFLE | GPU_CAP_FLOAT16 | COOPMAT, 1,
                                      16384, 64, "forward: S = Q K^T and P V on "
                                      "VK_KHR_cooperative_matrix into fp32, online softmax "
                                      "in fp32, P rounded to the 16-bit type "
                                      "(attention_coopmat_f16.comp; bf16: "
                                      "attention_coopmat_bf16.comp where the device has bf16 "
                                      "matrices, else attention_frag.comp); backward: P "
                                      "recomputed from the saved lse, S, dP = dO V^T, dQ "
                                      "+= dS K by query blocks, S^T, dP^T, dK += dS^T Q, dV "
                                      "+= P^T dO by key blocks on the matrices, dS and P "
                                      "rounded to the 16-bit type "
                                      "(attention_coopmat_bwd_f16.comp, _bf16; else "
                                      "attention_frag_bwd.comp)",
                                      GPU_MAT_F16},
    [GPU_V_ATTENTION_LOWP_FLASH] = {GPU_FAMILY_ATTENTION_LOWP, "attention_lowp_flash", GPU,
                                    S16 | SHUFFLE, 1, 16384, 64, "attention_flash with qkv "
                                    "and dy read from 16-bit storage, widened exactly as "
                                    "loaded (attention_flash_lowp.comp)"},
    [GPU_V_ATTENTION_LOWP_WIDEN] = {GPU_FAMILY_ATTENTION_LOWP, "attention_lowp_widen",
                                    CPU | GPU, S16 | SHUFFLE, 1, 0, 64, "qkv and dy widened "
                                    "exactly to fp32 (cast.comp), the context's fp32 "
                                    "attention: lavapipe's"},
    [GPU_V_ATTENTION_LOWP_FRAG] = {GPU_FAMILY_ATTENTION_LOWP, "attention_lowp_frag", 0,
                                   S16 | SHUFFLE, 1, 16384, 64, "attention_lowp_coopmat's "
                                   "forward and backward tiles with fp32 multiply-adds for "
                                   "the matrix instruction (attention_frag.comp, "
                                   "attention_frag_bwd.comp); by name only"},
    [GPU_V_ROWS_THREAD] = {GPU_FAMILY_ROWS, "rows_thread", CPU, 0, 1, 0, 64,
                           "one thread per row unless the row is long"},
    [GPU_V_ROWS_SPREAD] = {GPU_FAMILY_ROWS, "rows_spread", CPU | GPU, 0, 1, 0, 64,
                           "threads per row to fill the device, tree sums in shared memory"},
    [GPU_V_ELEMENTWISE_VEC4] = {GPU_FAMILY_ELEMENTWISE, "elementwise_vec4", CPU | GPU, 0, 1,
                                0, 64, "grid-stride loops, vec4 bodies where aligned"},
    [GPU_V_POOL_TEXEL] = {GPU_FAMILY_POOL, "pool_texel", CPU, TEXEL, 1, 0, 64,
                          "runs of outputs per lane, the argmax read as texels"},
    [GPU_V_POOL_STORAGE] = {GPU_FAMILY_POOL, "pool_storage", CPU | GPU, TEXEL, 1, 0, 64,
                            "one run per lane, the argmax through a storage buffer"},
    [GPU_V_EMBEDDING_ROWS] = {GPU_FAMILY_EMBEDDING, "embedding_rows", CPU | GPU, 0, 1, 0, 64,
                              "a gather; the backward scans ids per column block"},
    [GPU_V_OPTIMIZER_FLAT] = {GPU_FAMILY_OPTIMIZER, "optimizer_flat", CPU | GPU, 0, 1, 0, 64,
                              "one pass over the flat parameters (a norm pass first when "
                              "clipping)"},
};

#undef CPU
#undef GPU
#undef S16
#undef COOPMAT

const gpu_variant_row *gpu_variant_row_of(gpu_variant v)
{
    return (unsigned)v < GPU_VARIANT_COUNT ? &k_rows[v] : NULL;
}

const char *gpu_family_name(gpu_family f)
{
#define NAME(ID, name) [GPU_FAMILY_##ID] = name,
    static const char *const names[GPU_FAMILY_COUNT] = {GPU_FAMILIES(NAME)};
#undef NAME
    return (unsigned)f < GPU_FAMILY_COUNT ? names[f] : "?";
}

/* The capability bits whose absence already explains a missing shape. */
#define COOP_NEEDS(row) ((row)->needs & (GPU_CAP_COOPERATIVE_MATRIX | GPU_CAP_BFLOAT16))

int gpu_variant_runs(const gpu_variant_row *row, const gpu_profile *p, char *why,
                     size_t why_size)
{
    char buf[256] = "";
    size_t len = 0;
#define LACKS(...) \
    (len += (size_t)snprintf(buf + len, len < sizeof buf ? sizeof buf - len : 0, __VA_ARGS__))
    uint32_t missing = row->needs & ~p->caps;
    for (uint32_t bit = 1; bit < (1u << GPU_CAP_COUNT); bit <<= 1)
        if (missing & bit)
            LACKS("%s%s", len ? ", " : "", gpu_cap_name(bit));
    if (p->subgroup_size < row->min_subgroup)
        LACKS("%ssubgroups of %u lanes (it has %u)", len ? ", " : "", row->min_subgroup,
              p->subgroup_size);
    if (p->shared_memory < row->min_shared)
        LACKS("%s%u bytes of shared memory (it has %u)", len ? ", " : "", row->min_shared,
              p->shared_memory);
    if (p->max_invocations < row->min_invocations)
        LACKS("%sworkgroups of %u invocations (it allows %u)", len ? ", " : "",
              row->min_invocations, p->max_invocations);
    if (row->mat != GPU_MAT_NONE && (p->caps & COOP_NEEDS(row)) == COOP_NEEDS(row) &&
        !gpu_mat_for(p, row->mat))
        LACKS("%sa cooperative-matrix shape %s x %s + f32 -> f32 of subgroup scope with "
              "sides of 8, 16 or 32 (and m x n a multiple of its %u lanes)",
              len ? ", " : "", row->mat == GPU_MAT_F16 ? "f16" : "bf16",
              row->mat == GPU_MAT_F16 ? "f16" : "bf16", p->subgroup_size);
#undef LACKS
    if (why && why_size)
        snprintf(why, why_size, "%s", buf);
    return len == 0;
}

static int variant_named(const char *name, size_t n)
{
    for (int v = 0; v < GPU_VARIANT_COUNT; v++)
        if (strlen(k_rows[v].name) == n && strncmp(k_rows[v].name, name, n) == 0)
            return v;
    return -1;
}

/* "cpu, gpu, or a kernel variant: gemm_texel, ..." into buf. */
static const char *accepted(char *buf, size_t size)
{
    size_t len = (size_t)snprintf(buf, size, "cpu, gpu, or a kernel variant:");
    for (int v = 0; v < GPU_VARIANT_COUNT && len < size; v++)
        len += (size_t)snprintf(buf + len, size - len, "%s %s", v ? "," : "", k_rows[v].name);
    return buf;
}

vkt_status gpu_filter_parse(const char *text, const char *source, gpu_filter *out,
                            char *errmsg)
{
    out->style = VKT_KERNELS_AUTO;
    for (int f = 0; f < GPU_FAMILY_COUNT; f++)
        out->forced[f] = GPU_V_NONE;
    char list[1024];
    for (const char *p = text; p && *p;) {
        while (*p == ',' || isspace((unsigned char)*p))
            p++;
        const char *end = p;
        while (*end && *end != ',')
            end++;
        size_t n = (size_t)(end - p);
        while (n && isspace((unsigned char)p[n - 1]))
            n--;
        if (n == 0)
            break;
        vkt_kernel_variant style = n == 3 && strncmp(p, "cpu", 3) == 0   ? VKT_KERNELS_CPU
                                   : n == 3 && strncmp(p, "gpu", 3) == 0 ? VKT_KERNELS_GPU
                                                                          : VKT_KERNELS_AUTO;
        int v = style == VKT_KERNELS_AUTO ? variant_named(p, n) : -1;
        if (style == VKT_KERNELS_AUTO && v < 0)
            return err_fail(errmsg, VKT_ERROR_INVALID_ARGUMENT,
                            "%s='%s': unknown kernel variant '%.*s' (accepted: %s; or unset "
                            "for the device's own)", source, text, (int)n, p,
                            accepted(list, sizeof list));
        if (style != VKT_KERNELS_AUTO) {
            if (out->style != VKT_KERNELS_AUTO && out->style != style)
                return err_fail(errmsg, VKT_ERROR_INVALID_ARGUMENT,
                                "%s='%s': names both styles, cpu and gpu", source, text);
            out->style = style;
        } else {
            gpu_family f = k_rows[v].family;
            if (out->forced[f] != GPU_V_NONE && out->forced[f] != v)
                return err_fail(errmsg, VKT_ERROR_INVALID_ARGUMENT,
                                "%s='%s': names two %s variants, %s and %s", source, text,
                                gpu_family_name(f), k_rows[out->forced[f]].name,
                                k_rows[v].name);
            out->forced[f] = v;
        }
        p = end;
    }
    return VKT_OK;
}

vkt_status gpu_resolve_style(vkt_kernel_variant asked, const gpu_filter *f,
                             vkt_kernel_variant *out, char *errmsg)
{
    if (asked != VKT_KERNELS_AUTO && asked != VKT_KERNELS_CPU && asked != VKT_KERNELS_GPU)
        return err_fail(errmsg, VKT_ERROR_INVALID_ARGUMENT,
                        "kernels = %d: not a vkt_kernel_variant", (int)asked);
    if (asked != VKT_KERNELS_AUTO && f->style != VKT_KERNELS_AUTO && f->style != asked)
        return err_fail(errmsg, VKT_ERROR_INVALID_ARGUMENT,
                        "the kernel filter asks for the %s style, the context options for %s",
                        f->style == VKT_KERNELS_CPU ? "cpu" : "gpu",
                        asked == VKT_KERNELS_CPU ? "cpu" : "gpu");
    *out = asked != VKT_KERNELS_AUTO ? asked : f->style;
    return VKT_OK;
}

vkt_status gpu_choose_variants(const gpu_profile *p, const gpu_filter *f,
                               gpu_variant out[GPU_FAMILY_COUNT], char *errmsg)
{
    uint32_t style = p->style == VKT_KERNELS_CPU ? GPU_STYLE_CPU : GPU_STYLE_GPU;
    for (int fam = 0; fam < GPU_FAMILY_COUNT; fam++) {
        out[fam] = GPU_V_NONE;
        if (f && f->forced[fam] != GPU_V_NONE) {
            const gpu_variant_row *row = &k_rows[f->forced[fam]];
            char why[256];
            if (!gpu_variant_runs(row, p, why, sizeof why))
                return err_fail(errmsg, VKT_ERROR_NO_DEVICE,
                                "kernel variant %s was asked for, but '%s' lacks what it "
                                "needs: %s", row->name, p->name, why);
            out[fam] = (gpu_variant)f->forced[fam];
            continue;
        }
        for (int v = 0; v < GPU_VARIANT_COUNT && out[fam] == GPU_V_NONE; v++)
            if ((int)k_rows[v].family == fam && (k_rows[v].styles & style) &&
                gpu_variant_runs(&k_rows[v], p, NULL, 0))
                out[fam] = (gpu_variant)v;
    }
    return VKT_OK;
}

vkt_status gpu_kernel_setup(const gpu_device_caps *caps, vkt_kernel_variant asked,
                            const char *filter, gpu_profile *profile,
                            gpu_variant chosen[GPU_FAMILY_COUNT], char *errmsg)
{
    int from_env = filter == NULL;
    const char *source = from_env ? "VKT_KERNELS" : "kernel_variants";
    if (from_env)
        filter = plat_getenv("VKT_KERNELS");
    gpu_filter f;
    vkt_kernel_variant style = VKT_KERNELS_AUTO;
    vkt_status st = gpu_filter_parse(filter, source, &f, errmsg);
    if (st == VKT_OK && from_env && asked != VKT_KERNELS_AUTO)
        f.style = VKT_KERNELS_AUTO; /* a style asked for in code beats the environment's */
    if (st == VKT_OK)
        st = gpu_resolve_style(asked, &f, &style, errmsg);
    /* $VKT_COMPUTE_UNITS: plan as for a device with that many (e.g. 132, an H100's SMs, on
     * lavapipe, so that its grids and splits run in CI) */
    gpu_device_caps c = *caps;
    const char *cus = plat_getenv("VKT_COMPUTE_UNITS");
    if (st == VKT_OK && cus && *cus) {
        char *end = NULL;
        unsigned long v = strtoul(cus, &end, 10);
        if (!isdigit((unsigned char)*cus) || *end || v < 1 || v > 65536)
            return err_fail(errmsg, VKT_ERROR_INVALID_ARGUMENT,
                            "VKT_COMPUTE_UNITS='%s': not a count of compute units (1 to 65536)",
                            cus);
        c.compute_units = (uint32_t)v;
        c.compute_units_from = "VKT_COMPUTE_UNITS";
    }
    if (st != VKT_OK)
        return st;
    gpu_profile_make(&c, style, profile);
    return gpu_choose_variants(profile, &f, chosen, errmsg);
}

/* ---- the report (vkt devices) ---------------------------------------------------------- */

void gpu_kernel_report(const gpu_profile *p, const gpu_variant chosen[GPU_FAMILY_COUNT],
                       char *out, size_t size)
{
    size_t len = 0;
#define PUT(...) \
    (len += (size_t)snprintf(out + len, len < size ? size - len : 0, __VA_ARGS__))
    PUT("kernel style            %s\n", p->style == VKT_KERNELS_CPU ? "cpu" : "gpu");
    PUT("compute units           %u (%s)\n", p->compute_units, p->compute_units_from);
    PUT("subgroup size           %u\n", p->subgroup_size);
    PUT("shared memory           %u bytes\n", p->shared_memory);
    PUT("workgroup invocations   %u\n", p->max_invocations);
    PUT("capabilities            ");
    const char *sep = "";
    for (uint32_t bit = 1; bit < (1u << GPU_CAP_COUNT); bit <<= 1)
        if (p->caps & bit) {
            PUT("%s%s", sep, gpu_cap_name(bit));
            sep = ", ";
        }
    PUT("%s\n", *sep ? "" : "none");
    PUT("16-bit types            fp16 storage %s, fp16 arithmetic %s, bf16 type %s\n",
        p->caps & GPU_CAP_STORAGE16 ? "yes" : "no", p->caps & GPU_CAP_FLOAT16 ? "yes" : "no",
        p->caps & GPU_CAP_BFLOAT16 ? "yes" : "no");
    PUT("cooperative matrices    ");
    for (uint32_t i = 0; i < p->mat_count; i++) {
        const gpu_mat_shape *m = &p->mats[i];
        PUT("%s%s x %s + %s -> %s %ux%ux%u", i ? ", " : "", gpu_component_name(m->a),
            gpu_component_name(m->b), gpu_component_name(m->c), gpu_component_name(m->r),
            m->m, m->n, m->k);
    }
    PUT("%s\n", p->mat_count ? "" : "none");
    PUT("tuning                  workgroup %u, 1-D grid cap %u, conv/pool grid cap %u\n",
        p->wg, p->max_groups_1d, p->grid_cap);
    for (int f = 0; f < GPU_FAMILY_COUNT; f++) {
        const gpu_variant_row *row = gpu_variant_row_of(chosen[f]);
        PUT("%-23s %s\n", gpu_family_name((gpu_family)f), row ? row->name : "(none runs)");
    }
#undef PUT
    if (size && len >= size)
        out[size - 1] = '\0';
}
