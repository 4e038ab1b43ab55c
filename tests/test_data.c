/* Data sets and loaders: seeded per-epoch permutations that visit every sample once,
 * exact resumption from a position, partial batches, the shipped MNIST digits, and
 * clear errors. */
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static vkt_dataset *make_counting(uint32_t n, uint32_t f)
{
    float *x = th_alloc_floats((uint64_t)n * f);
    int32_t *y = malloc(n * sizeof *y);
    for (uint32_t i = 0; i < n; i++) {
        for (uint32_t j = 0; j < f; j++)
            x[i * f + j] = (float)i + 0.001f * (float)j;
        y[i] = (int32_t)(i % 7);
    }
    vkt_dataset *d = NULL;
    TH_OK(NULL, vkt_dataset_create(n, f, 7, x, y, &d));
    free(x);
    free(y);
    return d;
}

static void test_epochs(void)
{
    enum { N = 103, F = 3, B = 10 };
    vkt_dataset *d = make_counting(N, F);
    vkt_loader *l = NULL;
    vkt_loader_options o = {.batch = B, .seed = 42};
    TH_OK(NULL, vkt_loader_create(d, &o, &l));
    TH_CHECK(vkt_loader_batches_per_epoch(l) == N / B, "partial batch dropped by default");
    float x[B * F];
    int32_t y[B];
    uint32_t rows, first_order[N / B * B], second_order[N / B * B];
    for (int epoch = 0; epoch < 2; epoch++) {
        int seen[N] = {0}, ok = 1;
        for (uint32_t b = 0; b < N / B; b++) {
            TH_OK(NULL, vkt_loader_next(l, x, y, &rows));
            ok &= rows == B;
            for (uint32_t r = 0; r < B; r++) {
                uint32_t s = (uint32_t)x[r * F];
                ok &= s < N && y[r] == (int32_t)(s % 7) && x[r * F + 2] == (float)s + 0.002f;
                if (s < N)
                    seen[s]++;
                (epoch ? second_order : first_order)[b * B + r] = s;
            }
        }
        int once = 1;
        for (uint32_t s = 0; s < N; s++)
            once &= seen[s] <= 1;
        TH_CHECK(ok, "epoch %d: rows and labels belong together", epoch);
        TH_CHECK(once, "epoch %d: no sample twice", epoch);
    }
    TH_CHECK(memcmp(first_order, second_order, sizeof first_order) != 0,
             "a new permutation every epoch");
    uint64_t e, bi;
    vkt_loader_position(l, &e, &bi);
    TH_CHECK(e == 1 && bi == N / B, "position after two epochs is (1, %d), got (%llu, %llu)",
             N / B, (unsigned long long)e, (unsigned long long)bi);
    /* Same seed: same order; seek to a position: the same batch as an unbroken run. */
    vkt_loader *l2 = NULL;
    TH_OK(NULL, vkt_loader_create(d, &o, &l2));
    TH_OK(NULL, vkt_loader_seek(l2, 1, 3));
    TH_OK(NULL, vkt_loader_next(l2, x, y, &rows));
    TH_CHECK((uint32_t)x[0] == second_order[3 * B] && (uint32_t)x[(B - 1) * F] ==
             second_order[4 * B - 1], "seek(1, 3) gives epoch 1's fourth batch");
    TH_STATUS(NULL, vkt_loader_seek(l2, 0, 99), VKT_ERROR_INVALID_ARGUMENT);
    vkt_loader_destroy(l2);
    vkt_loader_destroy(l);

    /* Partial batches kept; no shuffle keeps the stored order. */
    o = (vkt_loader_options){.batch = B, .no_shuffle = 1, .keep_partial = 1};
    TH_OK(NULL, vkt_loader_create(d, &o, &l));
    TH_CHECK(vkt_loader_batches_per_epoch(l) == N / B + 1, "partial batch kept");
    for (uint32_t b = 0; b <= N / B; b++)
        TH_OK(NULL, vkt_loader_next(l, x, y, &rows));
    TH_CHECK(rows == N % B && (uint32_t)x[0] == N / B * B, "last batch holds the %d left", N % B);
    vkt_loader_destroy(l);
    vkt_dataset_destroy(d);
}

static void test_errors(void)
{
    float x[4] = {0};
    int32_t bad[2] = {0, 3};
    vkt_dataset *d = (vkt_dataset *)x;
    TH_STATUS(NULL, vkt_dataset_create(2, 2, 3, x, bad, &d), VKT_ERROR_FORMAT);
    TH_CHECK(d == NULL && strstr(vkt_last_error(), "sample 1") != NULL,
             "bad label is named: %s", vkt_last_error());
    TH_STATUS(NULL, vkt_dataset_create(0, 2, 3, x, NULL, &d), VKT_ERROR_INVALID_ARGUMENT);
    TH_OK(NULL, vkt_dataset_create(2, 2, 0, x, NULL, &d));
    vkt_loader *l = NULL;
    vkt_loader_options o = {.batch = 3};
    TH_STATUS(NULL, vkt_loader_create(d, &o, &l), VKT_ERROR_SHAPE);
    TH_CHECK(strstr(vkt_last_error(), "batch 3") != NULL, "message names the batch: %s",
             vkt_last_error());
    vkt_dataset_destroy(d);
    vkt_dataset_destroy(NULL);
    vkt_loader_destroy(NULL);
    vkt_dataset *tr = NULL, *te = NULL;
    TH_STATUS(NULL, vkt_dataset_load_mnist("/nonexistent-dir", &tr, &te), VKT_ERROR_IO);
    TH_CHECK(tr == NULL && te == NULL && strstr(vkt_last_error(), "/nonexistent-dir"),
             "missing folder is named: %s", vkt_last_error());
}

static void test_mnist(void)
{
    const char *dir = getenv("VKT_DATA_DIR");
    if (!dir)
        dir = "data/mnist";
    vkt_dataset *tr = NULL, *te = NULL;
    if (!TH_OK(NULL, vkt_dataset_load_mnist(dir, &tr, &te)))
        return;
    TH_CHECK(vkt_dataset_count(tr) == 8000 && vkt_dataset_count(te) == 2000,
             "8000 train and 2000 test digits");
    TH_CHECK(vkt_dataset_features(tr) == 784 && vkt_dataset_classes(tr) == 10, "28x28, 10 classes");
    const float *x = vkt_dataset_x(te);
    float lo = 1, hi = 0;
    for (uint64_t i = 0; i < 2000ull * 784; i++) {
        lo = x[i] < lo ? x[i] : lo;
        hi = x[i] > hi ? x[i] : hi;
    }
    TH_CHECK(lo == 0.0f && hi == 1.0f, "pixels span [0, 1]");
    vkt_dataset_destroy(tr);
    vkt_dataset_destroy(te);
}

int main(void)
{
    th_init("test_data");
    test_epochs();
    test_errors();
    test_mnist();
    return th_finish();
}
