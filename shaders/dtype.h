/*
 * dtype.h - the element types of the low-precision kernels and their conversions, defined
 * once and included by both C (engine/kernels/dtype.c: vkt_convert and the CPU references)
 * and GLSL (shaders/gemm_lowp.glsl: the 16-bit outputs), like dropout_hash.h. The codes
 * are vkt_dtype's (include/vkt.h; dtype.c checks that at compile time).
 *
 * The conversions work on bit patterns (uint), so C and the shaders round exactly alike:
 *  - fp32 -> fp16 and fp32 -> bf16 round to nearest, ties to even; a finite value past
 *    the largest finite 16-bit value by at least half an ulp becomes infinity (fp16:
 *    |x| >= 65520; bf16: |x| >= 0x1.ffp127), fp16 flushes nothing (its subnormals are
 *    rounded like the rest), a NaN stays a NaN (quiet, with its sign and the top bits of
 *    its payload);
 *  - fp16 -> fp32 and bf16 -> fp32 are exact (every 16-bit value is an fp32 value); the
 *    shaders widen their 16-bit inputs this way too, not with a conversion a device may
 *    flush (fp16 subnormals).
 * A shader has no float-to-16-bit conversion with a rounding mode every device honours
 * (Vulkan lets OpFConvert round toward zero), hence the integer code.
 */
#ifndef VKT_DTYPE_H
#define VKT_DTYPE_H

#ifdef VULKAN /* defined by glslang when compiling for Vulkan */
#define VKT_DT_U32 uint
#define VKT_DT_FN
#define VKT_DT_AS_FLOAT(u) uintBitsToFloat(u)
#define VKT_DT_TO_FLOAT(u) float(u)
#else
#include <stdint.h>
#include <string.h>
#define VKT_DT_U32 uint32_t
#define VKT_DT_FN static inline
static inline float dtype_as_float_(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}
#define VKT_DT_AS_FLOAT(u) dtype_as_float_(u)
#define VKT_DT_TO_FLOAT(u) ((float)(u))
#endif

#define DTYPE_FP32 0u
#define DTYPE_FP16 1u
#define DTYPE_BF16 2u
#define DTYPE_COUNT 3u

/* fp32 bits -> fp16 bits (low 16 bits of the result), round to nearest even. */
VKT_DT_FN VKT_DT_U32 dtype_f32_to_f16(VKT_DT_U32 f)
{
    VKT_DT_U32 sign = (f >> 16) & 0x8000u, x = f & 0x7fffffffu;
    if (x > 0x7f800000u) /* NaN: quiet, the payload's top 9 bits kept */
        return sign | 0x7e00u | ((x >> 13) & 0x1ffu);
    if (x >= 0x477ff000u) /* 65520 and above (65504 + half an ulp, a tie to odd): inf */
        return sign | 0x7c00u;
    if (x >= 0x38800000u) { /* a normal fp16 (>= 2^-14): rebias 127 -> 15, round 13 bits */
        VKT_DT_U32 r = x - 0x38000000u;
        r += 0x0fffu + ((r >> 13) & 1u); /* a carry out of the mantissa bumps the exponent */
        return sign | (r >> 13);
    }
    if (x < 0x33000000u) /* below 2^-25 (half the smallest subnormal): zero */
        return sign;
    /* subnormal: value = m * 2^(e - 150), in units of 2^-24 that is m >> (126 - e) */
    VKT_DT_U32 e = x >> 23, m = (x & 0x7fffffu) | 0x800000u;
    VKT_DT_U32 shift = 126u - e; /* 14..24 */
    VKT_DT_U32 r = m >> shift, rem = m & ((1u << shift) - 1u), mid = 1u << (shift - 1u);
    if (rem > mid || (rem == mid && (r & 1u) != 0u))
        r += 1u;
    return sign | r;
}

/* fp32 bits -> bf16 bits (low 16 bits of the result), round to nearest even. */
VKT_DT_FN VKT_DT_U32 dtype_f32_to_bf16(VKT_DT_U32 f)
{
    if ((f & 0x7fffffffu) > 0x7f800000u) /* NaN: quiet */
        return (f >> 16) | 0x0040u;
    return (f + 0x7fffu + ((f >> 16) & 1u)) >> 16; /* overflow carries into inf */
}

/* The value of fp16 bits, exact: a subnormal m * 2^-24 by an fp32 multiplication (exact,
 * and a normal fp32, so no device flushes it), the rest by moving the fields. */
VKT_DT_FN float dtype_f16_value(VKT_DT_U32 h)
{
    VKT_DT_U32 e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    float mag = e == 0u ? VKT_DT_TO_FLOAT(m) * 5.9604644775390625e-8
                        : VKT_DT_AS_FLOAT(((e == 0x1fu ? 0xffu : e + 112u) << 23) | (m << 13));
    return (h & 0x8000u) != 0u ? -mag : mag;
}

/* The value of bf16 bits, exact. */
VKT_DT_FN float dtype_bf16_value(VKT_DT_U32 h)
{
    return VKT_DT_AS_FLOAT((h & 0xffffu) << 16);
}

#undef VKT_DT_U32
#undef VKT_DT_FN
#undef VKT_DT_AS_FLOAT
#undef VKT_DT_TO_FLOAT

#endif
