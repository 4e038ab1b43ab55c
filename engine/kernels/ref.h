/*
 * ref.h - CPU references of every kernel, in plain C. Same argument order and meaning as
 * the Vulkan kernels in vkt.h, with host pointers in place of views. Tests compare the
 * device against these; VKT_CHECK (the graph's debug switch) will too.
 * Accumulation is in double where it is cheap, so the reference is the more exact side.
 */
#ifndef VKT_KERNELS_REF_H
#define VKT_KERNELS_REF_H

#include <stddef.h>
#include <stdint.h>

#include "vkt.h"

/* C[M,N] = alpha * op(A) * op(B) + beta * C (see vkt_gemm_desc). lda/ldb/ldc of 0 = packed. */
void kref_gemm(int trans_a, int trans_b, uint32_t m, uint32_t n, uint32_t k, float alpha,
                  const float *a, uint32_t lda, const float *b, uint32_t ldb, float beta,
                  float *c, uint32_t ldc);

/* The same product with the element types of vkt_gemm_desc (a_type == b_type, c_type fp32
 * or that type; 16-bit elements as uint16_t bit patterns): the inputs exactly as stored,
 * products summed in double, alpha * sum + beta * C in fp32, C rounded to its type as the
 * kernels round it (vkt_convert). */
void kref_gemm_typed(int trans_a, int trans_b, uint32_t m, uint32_t n, uint32_t k, float alpha,
                     vkt_dtype ab_type, const void *a, uint32_t lda, const void *b,
                     uint32_t ldb, float beta, vkt_dtype c_type, void *c, uint32_t ldc);
/* Element i of an array of type t, as a float (exact). */
float kdt_to_float(vkt_dtype t, const void *src, size_t i);
/* x rounded to type t and back (the nearest t value, ties to even), as a float. */
float kdt_round(vkt_dtype t, float x);

/* Scalar function and derivative of a unary op (the definitions the shaders follow). */
float kref_unary_f(vkt_unary_op op, float alpha, float x);
float kref_unary_df(vkt_unary_op op, float alpha, float x);
void kref_unary(vkt_unary_op op, float alpha, const float *x, float *y, uint64_t n);
void kref_unary_backward(vkt_unary_op op, float alpha, const float *x, const float *dy,
                            float *dx, uint64_t n);

void kref_binary(vkt_binary_op op, const float *a, const vkt_shape *a_shape, const float *b,
                    const vkt_shape *b_shape, float *out);
void kref_binary_backward(vkt_binary_op op, int which, const float *a,
                             const vkt_shape *a_shape, const float *b, const vkt_shape *b_shape,
                             const float *dy, float *grad);

/* out has shape with dims[axis] removed; ARGMAX writes uint32 indices into `out`. */
void kref_reduce(vkt_reduce_op op, const float *x, const vkt_shape *shape, uint32_t axis,
                    void *out);

void kref_softmax(int log, const float *x, float *y, uint32_t rows, uint32_t cols);
void kref_softmax_backward(int log, const float *y, const float *dy, float *dx,
                              uint32_t rows, uint32_t cols);

void kref_fill(float *y, uint64_t n, float value);
void kref_copy(const float *x, float *y, uint64_t n);

#endif
