/* The reference for `vkt bench gemm`: OpenBLAS cblas_sgemm on the host CPU, same sizes,
 * same timing rule (best of repeated runs after a warm-up). Thread count from
 * OPENBLAS_NUM_THREADS. Built only when OpenBLAS is installed (install-deps.sh --bench). */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(void)
{
    const int sizes[] = {256, 512, 1024, 2048};
    printf("%6s %12s %10s\n", "N", "seconds", "GFLOP/s");
    for (int si = 0; si < 4; si++) {
        int n = sizes[si];
        size_t e = (size_t)n * n;
        float *a = malloc(e * 4), *b = malloc(e * 4), *c = malloc(e * 4);
        if (!a || !b || !c)
            return 1;
        for (size_t i = 0; i < e; i++) {
            a[i] = (float)((i * 7919) % 1000) / 500.0f - 1.0f;
            b[i] = (float)((i * 104729) % 1000) / 500.0f - 1.0f;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f,
                    c, n);
        double best = 1e30, total = 0;
        for (int r = 0; r < 2 || total < 1.0; r++) {
            double t0 = now_s();
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n,
                        0.0f, c, n);
            double dt = now_s() - t0;
            total += dt;
            if (dt < best)
                best = dt;
        }
        printf("%6d %12.6f %10.2f\n", n, best, 2.0 * n * (double)n * n / best * 1e-9);
        if (n == 1024)
            printf("result: openblas_1024_gflops=%.2f\n", 2.0 * n * (double)n * n / best * 1e-9);
        free(a);
        free(b);
        free(c);
    }
    return 0;
}
