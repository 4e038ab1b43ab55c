/* ref_gemm.c - CPU reference of C = alpha * op(A) * op(B) + beta * C, row-major,
 * accumulated in double. Same conventions as vkt_gemm: a leading dimension of 0 means
 * packed, beta == 0 ignores C's contents, alpha == 0 ignores A and B. */
#include "kernels/ref.h"

void kref_gemm(int trans_a, int trans_b, uint32_t m, uint32_t n, uint32_t k, float alpha,
                  const float *a, uint32_t lda, const float *b, uint32_t ldb, float beta,
                  float *c, uint32_t ldc)
{
    if (lda == 0)
        lda = trans_a ? m : k;
    if (ldb == 0)
        ldb = trans_b ? k : n;
    if (ldc == 0)
        ldc = n;
    for (uint32_t i = 0; i < m; i++) {
        for (uint32_t j = 0; j < n; j++) {
            double sum = 0.0;
            if (alpha != 0.0f) {
                for (uint32_t p = 0; p < k; p++) {
                    /* op(A)[i, p] and op(B)[p, j] */
                    double av = trans_a ? a[(uint64_t)p * lda + i] : a[(uint64_t)i * lda + p];
                    double bv = trans_b ? b[(uint64_t)j * ldb + p] : b[(uint64_t)p * ldb + j];
                    sum += av * bv;
                }
            }
            float *out = &c[(uint64_t)i * ldc + j];
            double v = (double)alpha * sum;
            if (beta != 0.0f)
                v += (double)beta * *out;
            *out = (float)v;
        }
    }
}

void kref_gemm_typed(int trans_a, int trans_b, uint32_t m, uint32_t n, uint32_t k, float alpha,
                     vkt_dtype ab_type, const void *a, uint32_t lda, const void *b,
                     uint32_t ldb, float beta, vkt_dtype c_type, void *c, uint32_t ldc)
{
    if (lda == 0)
        lda = trans_a ? m : k;
    if (ldb == 0)
        ldb = trans_b ? k : n;
    if (ldc == 0)
        ldc = n;
    for (uint32_t i = 0; i < m; i++) {
        for (uint32_t j = 0; j < n; j++) {
            double sum = 0.0;
            if (alpha != 0.0f) {
                for (uint32_t p = 0; p < k; p++) {
                    uint64_t ia = trans_a ? (uint64_t)p * lda + i : (uint64_t)i * lda + p;
                    uint64_t ib = trans_b ? (uint64_t)j * ldb + p : (uint64_t)p * ldb + j;
                    sum += (double)kdt_to_float(ab_type, a, ia) * kdt_to_float(ab_type, b, ib);
                }
            }
            uint64_t ic = (uint64_t)i * ldc + j;
            double v = (double)alpha * sum;
            if (beta != 0.0f)
                v += (double)beta * kdt_to_float(c_type, c, ic);
            float f = (float)v;
            if (c_type == VKT_DTYPE_FP32)
                ((float *)c)[ic] = f;
            else
                vkt_convert(VKT_DTYPE_FP32, &f, c_type, (uint16_t *)c + ic, 1);
        }
    }
}
