/* precision.c - what a training precision (vkt_precision: fp32, fp16, bf16, auto) means on
 * a context: vkt_context_precision. auto walks one table, fastest first: a 16-bit type is
 * chosen where the context's GEMM of that type runs on cooperative matrices (tensor cores
 * or their like), since elsewhere a 16-bit product is fp32 arithmetic plus casts (lavapipe:
 * gemm_f16_widen) and no faster than fp32. */
#include "gpu/gpu.h"
#include "kernels/gemm_lowp.h"

#include <stdio.h>
#include <string.h>

static const char *const k_names[VKT_PRECISION_COUNT] = {
    [VKT_PRECISION_FP32] = "fp32", [VKT_PRECISION_FP16] = "fp16",
    [VKT_PRECISION_BF16] = "bf16", [VKT_PRECISION_AUTO] = "auto"};

_Static_assert((int)VKT_PRECISION_FP32 == (int)VKT_DTYPE_FP32 &&
                   (int)VKT_PRECISION_FP16 == (int)VKT_DTYPE_FP16 &&
                   (int)VKT_PRECISION_BF16 == (int)VKT_DTYPE_BF16,
               "a fixed precision is its vkt_dtype");

/* auto's candidates, fastest first. */
static const struct {
    vkt_dtype dtype;
    gpu_family family;
    gpu_variant variant;
    const char *why;
} k_auto[] = {
    {VKT_DTYPE_BF16, GPU_FAMILY_GEMM_BF16, GPU_V_GEMM_BF16_COOPMAT,
     "its bf16 products run on cooperative matrices (fp32's range: no loss scaling)"},
    {VKT_DTYPE_FP16, GPU_FAMILY_GEMM_F16, GPU_V_GEMM_F16_COOPMAT,
     "its fp16 products run on cooperative matrices (bf16's do not; fp16 takes dynamic "
     "loss scaling)"},
};

const char *vkt_precision_name(vkt_precision p)
{
    return (unsigned)p < VKT_PRECISION_COUNT ? k_names[p] : "?";
}

vkt_status vkt_precision_from_name(const char *name, vkt_precision *out)
{
    for (unsigned i = 0; name && i < VKT_PRECISION_COUNT; i++)
        if (strcmp(name, k_names[i]) == 0) {
            if (out)
                *out = (vkt_precision)i;
            return VKT_OK;
        }
    return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT,
                    "'%s' is not a precision (fp32, fp16, bf16 or auto)", name ? name : "(null)");
}

vkt_status vkt_context_precision(vkt_context *ctx, vkt_precision p, vkt_dtype *out, char *why,
                                 size_t why_size)
{
    char scratch[8];
    if (!why || why_size == 0)
        why = scratch, why_size = sizeof scratch;
    why[0] = '\0';
    if (out)
        *out = VKT_DTYPE_FP32;
    if (!ctx || !out)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT,
                        "vkt_context_precision: context and out are required");
    if ((unsigned)p >= VKT_PRECISION_COUNT)
        return err_fail(ctx->errmsg, VKT_ERROR_INVALID_ARGUMENT,
                        "precision %d is not a vkt_precision (fp32 0, fp16 1, bf16 2, auto 3)",
                        (int)p);
    if (p == VKT_PRECISION_FP32) {
        snprintf(why, why_size, "as asked");
        return VKT_OK;
    }
    if (p != VKT_PRECISION_AUTO) {
        vkt_dtype t = (vkt_dtype)p;
        char lacks[256] = "";
        if (!kg_lowp_available(ctx, t, lacks, sizeof lacks))
            return err_fail(ctx->errmsg, VKT_ERROR_NO_DEVICE,
                            "precision %s: no %s matrix product runs on '%s' (it lacks %s)",
                            vkt_dtype_name(t), vkt_dtype_name(t), ctx->profile.name, lacks);
        *out = t;
        snprintf(why, why_size, "as asked; products: %s",
                 gpu_variant_row_of(ctx->kv[t == VKT_DTYPE_FP16 ? GPU_FAMILY_GEMM_F16
                                                                : GPU_FAMILY_GEMM_BF16])->name);
        return VKT_OK;
    }
    for (size_t i = 0; i < sizeof k_auto / sizeof k_auto[0]; i++)
        if (ctx->kv[k_auto[i].family] == k_auto[i].variant) {
            *out = k_auto[i].dtype;
            snprintf(why, why_size, "auto: %s", k_auto[i].why);
            return VKT_OK;
        }
    gpu_variant f16 = ctx->kv[GPU_FAMILY_GEMM_F16];
    snprintf(why, why_size,
             "auto: no 16-bit product runs on cooperative matrices on '%s' (fp16: %s), so "
             "16-bit operands would only add casts to fp32 arithmetic", ctx->profile.name,
             f16 == GPU_V_NONE ? "none" : gpu_variant_row_of(f16)->name);
    return VKT_OK;
}
