/*
 * push.h - push-constant layouts, defined once and included by both C (engine/kernels)
 * and GLSL (the compute shaders). Only 4-byte scalars (VKT_U32, VKT_I32, VKT_F32), so the
 * std430 layout GLSL uses for push constants and the C layout agree on every offset.
 * Each struct must fit in 128 bytes (the minimum maxPushConstantsSize Vulkan guarantees);
 * C checks that at compile time below.
 *
 * Offsets named *_off are element shifts from the start of the binding (see
 * gpu_arg_shift in engine/gpu/gpu.h): the descriptor starts at an aligned address.
 */
#ifndef VKT_PUSH_H
#define VKT_PUSH_H

#ifdef VULKAN /* defined by glslang when compiling for Vulkan */
#define VKT_U32 uint
#define VKT_I32 int
#define VKT_F32 float
#else
#include <stdint.h>
#define VKT_U32 uint32_t
#define VKT_I32 int32_t
#define VKT_F32 float
#endif

/* GEMM: C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C. Row-major, leading dims. */
struct vkt_push_gemm {
    VKT_U32 m, n, k;
    VKT_U32 lda, ldb, ldc;
    VKT_U32 a_off, b_off, c_off;
    VKT_U32 trans_a, trans_b;
    VKT_F32 alpha, beta;
};

/* Unary elementwise and its derivative: y = f(x) / dx = dy * f'(x), n elements.
 * y_off is the output: y forward, dx backward. */
struct vkt_push_unary {
    VKT_U32 n;
    VKT_U32 op;
    VKT_F32 alpha;
    VKT_U32 x_off, y_off, dy_off;
};

/* Binary with broadcasting over 4 dims (outermost first). Strides are in elements and
 * 0 along broadcast dimensions. `out_dims` is the iteration space. y_off is the output:
 * out forward, grad backward; n counts the elements produced (out, or grad). */
struct vkt_push_binary {
    VKT_U32 op;
    VKT_U32 which;                 /* backward: 0 = gradient of a, 1 = of b */
    VKT_U32 out_dims0, out_dims1, out_dims2, out_dims3;
    VKT_U32 a_str0, a_str1, a_str2, a_str3;
    VKT_U32 b_str0, b_str1, b_str2, b_str3;
    VKT_U32 a_off, b_off, y_off, dy_off;
    VKT_U32 n;                     /* elements to produce */
};

/* Reduction of x viewed as [outer, axis, inner] along the middle dimension. */
struct vkt_push_reduce {
    VKT_U32 op;
    VKT_U32 outer, axis, inner;
    VKT_U32 x_off, y_off;
};

/* Row softmax / log-softmax over x[rows, cols] and its backward (reads y and dy,
 * writes dx). */
struct vkt_push_softmax {
    VKT_U32 rows, cols;
    VKT_U32 log;
    VKT_U32 x_off, y_off, dy_off, dx_off;
};

/* Fill (value) and copy (x to y), n elements. */
struct vkt_push_fill {
    VKT_U32 n;
    VKT_F32 value;
    VKT_U32 x_off, y_off;
};

#ifndef VULKAN
#define VKT_PUSH_FITS(s) _Static_assert(sizeof(struct s) <= 128, #s " exceeds 128 bytes")
VKT_PUSH_FITS(vkt_push_gemm);
VKT_PUSH_FITS(vkt_push_unary);
VKT_PUSH_FITS(vkt_push_binary);
VKT_PUSH_FITS(vkt_push_reduce);
VKT_PUSH_FITS(vkt_push_softmax);
VKT_PUSH_FITS(vkt_push_fill);
#endif

#endif /* VKT_PUSH_H */
