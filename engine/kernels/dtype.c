/* dtype.c - the element types (vkt_dtype) on the host: names, sizes and vkt_convert, whose
 * rounding is shaders/dtype.h's, the same code the kernels' 16-bit outputs run. */
#include "core/error.h"
#include "kernels/dtype_table.h"
#include "dtype.h"

#include <string.h>

_Static_assert(VKT_DTYPE_FP32 == DTYPE_FP32 && VKT_DTYPE_FP16 == DTYPE_FP16 &&
                   VKT_DTYPE_BF16 == DTYPE_BF16 && VKT_DTYPE_COUNT == DTYPE_COUNT,
               "vkt_dtype and shaders/dtype.h agree");

/* The element types, one row each: everything the engine needs to know about a type
 * (its name, its size, the code shaders/dtype.h gives it, its name in safetensors files)
 * is here, so a new type is a row. */
static const kdt_info k_dtypes[VKT_DTYPE_COUNT] = {
    [VKT_DTYPE_FP32] = {"fp32", 4, "DTYPE_FP32", DTYPE_FP32, "F32"},
    [VKT_DTYPE_FP16] = {"fp16", 2, "DTYPE_FP16", DTYPE_FP16, "F16"},
    [VKT_DTYPE_BF16] = {"bf16", 2, "DTYPE_BF16", DTYPE_BF16, "BF16"},
};

const kdt_info *kdt_info_of(vkt_dtype dtype)
{
    return (unsigned)dtype < VKT_DTYPE_COUNT ? &k_dtypes[dtype] : NULL;
}

const char *vkt_dtype_name(vkt_dtype dtype)
{
    const kdt_info *d = kdt_info_of(dtype);
    return d ? d->name : "?";
}

size_t vkt_dtype_size(vkt_dtype dtype)
{
    const kdt_info *d = kdt_info_of(dtype);
    return d ? d->size : 0;
}

vkt_status vkt_dtype_from_name(const char *name, vkt_dtype *out)
{
    for (unsigned i = 0; name && i < VKT_DTYPE_COUNT; i++)
        if (strcmp(name, k_dtypes[i].name) == 0 || strcmp(name, k_dtypes[i].safetensors) == 0) {
            if (out)
                *out = (vkt_dtype)i;
            return VKT_OK;
        }
    return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT,
                    "'%s' is not an element type (fp32, fp16 or bf16)", name ? name : "(null)");
}

static uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* One element as fp32. */
static float load_float(vkt_dtype t, const void *src, size_t i)
{
    if (t == VKT_DTYPE_FP32)
        return ((const float *)src)[i];
    uint32_t h = ((const uint16_t *)src)[i];
    return t == VKT_DTYPE_FP16 ? dtype_f16_value(h) : dtype_bf16_value(h);
}

vkt_status vkt_convert(vkt_dtype from, const void *src, vkt_dtype to, void *dst, size_t n)
{
    if (vkt_dtype_size(from) == 0 || vkt_dtype_size(to) == 0)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT,
                        "vkt_convert: %s type %d is not a vkt_dtype (fp32 0, fp16 1, bf16 2)",
                        vkt_dtype_size(from) == 0 ? "source" : "destination",
                        vkt_dtype_size(from) == 0 ? (int)from : (int)to);
    if (n > 0 && (!src || !dst))
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "vkt_convert: %s is NULL",
                        !src ? "src" : "dst");
    if (from == to) {
        if (src != dst)
            memmove(dst, src, n * vkt_dtype_size(from));
        return VKT_OK;
    }
    /* Element i is read before element i is written and after every element before it
     * was: in place works when both sides have the same size (fp16 <-> bf16). */
    for (size_t i = 0; i < n; i++) {
        float v = load_float(from, src, i);
        uint32_t f = bits_of(v);
        if (to == VKT_DTYPE_FP32)
            ((float *)dst)[i] = v;
        else
            ((uint16_t *)dst)[i] =
                (uint16_t)(to == VKT_DTYPE_FP16 ? dtype_f32_to_f16(f) : dtype_f32_to_bf16(f));
    }
    return VKT_OK;
}

float kdt_to_float(vkt_dtype t, const void *src, size_t i)
{
    return load_float(t, src, i);
}

float kdt_round(vkt_dtype t, float x)
{
    uint32_t f = bits_of(x);
    if (t == VKT_DTYPE_FP16)
        return dtype_f16_value(dtype_f32_to_f16(f));
    if (t == VKT_DTYPE_BF16)
        return dtype_bf16_value(dtype_f32_to_bf16(f));
    return x;
}
