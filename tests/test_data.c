/* Data sets and loaders: seeded per-epoch permutations that visit every sample once,
 * exact resumption from a position, partial batches, the shipped MNIST digits, and
 * clear errors. */
#include <stdio.h>
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

/* Prefetching loaders give the same batches in the same order as synchronous ones:
 * across epochs, with partial batches, after seeks (prepared batches discarded), with
 * the position counting batches delivered; destroying one while its thread works; many
 * at once. */
static int same_next(vkt_loader *a, vkt_loader *b, uint32_t n)
{
    float xa[64], xb[64];
    int32_t ya[16], yb[16];
    uint32_t ra = 0, rb = 0;
    vkt_status sa = vkt_loader_next(a, xa, ya, &ra), sb = vkt_loader_next(b, xb, yb, &rb);
    return sa == VKT_OK && sb == VKT_OK && ra == rb && ra <= n &&
           memcmp(xa, xb, ra * 4 * sizeof *xa) == 0 && memcmp(ya, yb, ra * sizeof *ya) == 0;
}

static int same_position(vkt_loader *a, vkt_loader *b)
{
    uint64_t ea, ia, eb, ib;
    vkt_loader_position(a, &ea, &ia);
    vkt_loader_position(b, &eb, &ib);
    return ea == eb && ia == ib;
}

static void test_prefetch(void)
{
    enum { N = 103, F = 4, B = 16 };
    vkt_dataset *d = make_counting(N, F);
    for (int partial = 0; partial < 2; partial++)
        for (uint32_t ahead = 1; ahead <= 4; ahead += 3) {
            vkt_loader *s = NULL, *p = NULL;
            vkt_loader_options o = {.batch = B, .seed = 9, .keep_partial = partial};
            TH_OK(NULL, vkt_loader_create(d, &o, &s));
            o.prefetch = ahead;
            TH_OK(NULL, vkt_loader_create(d, &o, &p));
            int ok = 1, pos = 1;
            for (int b = 0; b < 40; b++) { /* several epochs */
                ok &= same_next(s, p, B);
                pos &= same_position(s, p);
            }
            TH_CHECK(ok && pos, "prefetch %u (partial %d): same batches and positions over "
                     "epochs", ahead, partial);
            for (volatile uint32_t spin = 0; spin < 3000000; spin++) /* let it prepare ahead: */
                ;                                              /* the position stays put */
            pos = same_position(s, p);
            uint64_t e, i;
            vkt_loader_position(p, &e, &i);
            TH_CHECK(pos, "position counts delivered batches, got (%llu, %llu)",
                     (unsigned long long)e, (unsigned long long)i);
            /* seeks: backwards, forwards, to an epoch's end, then on */
            const uint64_t to[4][2] = {{0, 1}, {5, 2}, {3, N / B}, {0, 0}};
            ok = 1;
            for (int k = 0; k < 4; k++) {
                TH_OK(NULL, vkt_loader_seek(s, to[k][0], to[k][1]));
                TH_OK(NULL, vkt_loader_seek(p, to[k][0], to[k][1]));
                ok &= same_position(s, p);
                for (int b = 0; b < 9; b++)
                    ok &= same_next(s, p, B);
                ok &= same_position(s, p);
            }
            TH_CHECK(ok, "prefetch %u (partial %d): seeks discard prepared batches", ahead,
                     partial);
            TH_STATUS(NULL, vkt_loader_seek(p, 0, 99), VKT_ERROR_INVALID_ARGUMENT);
            TH_CHECK(vkt_loader_wait_seconds(p) >= 0 && vkt_loader_wait_seconds(s) == 0,
                     "wait seconds counted");
            vkt_loader_destroy(s);
            vkt_loader_destroy(p);
        }

    /* Destroyed at once, mid-preparation, after one batch, after a seek. */
    vkt_dataset *big = make_counting(20000, F);
    for (int k = 0; k < 20; k++) {
        vkt_loader *p = NULL;
        vkt_loader_options o = {.batch = 16, .seed = (uint64_t)k, .prefetch = 3};
        TH_OK(NULL, vkt_loader_create(big, &o, &p));
        float x[64];
        int32_t y[16];
        if (k % 3 >= 1)
            TH_OK(NULL, vkt_loader_next(p, x, y, NULL));
        if (k % 3 == 2)
            TH_OK(NULL, vkt_loader_seek(p, 7, 3));
        vkt_loader_destroy(p);
    }

    /* Many loaders at once, consumed in turns. */
    enum { M = 24 };
    vkt_loader *many[M], *ref = NULL;
    vkt_loader_options o = {.batch = B, .seed = 5};
    TH_OK(NULL, vkt_loader_create(d, &o, &ref));
    o.prefetch = 2;
    for (int k = 0; k < M; k++)
        TH_OK(NULL, vkt_loader_create(d, &o, &many[k]));
    int ok = 1;
    for (int b = 0; b < 20; b++) {
        float xr[B * F], x[B * F];
        int32_t yr[B], y[B];
        uint32_t rr, rows;
        TH_OK(NULL, vkt_loader_next(ref, xr, yr, &rr));
        for (int k = 0; k < M; k++) {
            ok &= vkt_loader_next(many[k], x, y, &rows) == VKT_OK && rows == rr &&
                  memcmp(x, xr, sizeof x) == 0 && memcmp(y, yr, sizeof y) == 0;
        }
    }
    TH_CHECK(ok, "%d prefetching loaders all give the synchronous order", M);
    for (int k = 0; k < M; k++)
        vkt_loader_destroy(many[k]);
    vkt_loader_destroy(ref);
    vkt_dataset_destroy(big);
    vkt_dataset_destroy(d);
}

static char g_tmp[512]; /* the temporary folder (th_temp_dir) */

static const char *write_tmp(const char *name, const void *data, size_t size)
{
    static char path[4][640];
    static int k;
    char *p = path[k++ % 4];
    snprintf(p, sizeof path[0], "%s/%s", g_tmp, name);
    FILE *f = fopen(p, "wb");
    if (f) {
        fwrite(data, 1, size, f);
        fclose(f);
    }
    return p;
}

static void expect_error(const char *path, vkt_status got, const char *a, const char *b)
{
    const char *m = vkt_last_error();
    TH_CHECK(got == VKT_ERROR_FORMAT && strstr(m, path) && strstr(m, a) && (!b || strstr(m, b)),
             "error names the file, '%s'%s%s: %s", a, b ? " and " : "", b ? b : "", m);
    remove(path);
}

/* CSV cells that cannot train are refused by file, line and column; a NUL byte refuses
 * the file instead of ending it early; a UTF-8 byte-order mark is skipped. */
static void test_csv_cells(void)
{
    vkt_dataset *d = NULL;
    const char nul[] = "x,label\n1,0\n2\0,1\n3,0\n4,1\n";
    const char *p = write_tmp("nul_byte.csv", nul, /* "nul.csv" is a device on Windows */ sizeof nul - 1);
    expect_error(p, vkt_dataset_load_csv(p, "label", &d), "line 3", "NUL byte at offset 13");
    const char nul_row_end[] = "x,label\n1,0\n2,1\0\n3,0\n4,1\n"; /* once: 2 rows, no word */
    p = write_tmp("nul2.csv", nul_row_end, sizeof nul_row_end - 1);
    expect_error(p, vkt_dataset_load_csv(p, "label", &d), "line 3", "NUL byte at offset 15");
    const char nul_header[] = "x,la\0bel\n1,0\n";
    p = write_tmp("nulh.csv", nul_header, sizeof nul_header - 1);
    expect_error(p, vkt_dataset_load_csv(p, "label", &d), "line 1", "NUL byte");
    static const struct {
        const char *cell, *why;
    } bad[] = {
        {"nan", "is not a finite number"},   {"NaN", "is not a finite number"},
        {"-nan", "is not a finite number"},  {"inf", "is not a finite number"},
        {"-Infinity", "is not a finite number"}, {"1e39", "is out of float range"},
        {"-1e39", "is out of float range"},  {"3.5e38", "is out of float range"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char text[128], want[64];
        int n = snprintf(text, sizeof text, "x,label,y\n1,0,2\n3,1,%s\n", bad[i].cell);
        p = write_tmp("cell.csv", text, (size_t)n);
        snprintf(want, sizeof want, "column 'y': '%s' %s", bad[i].cell, bad[i].why);
        expect_error(p, vkt_dataset_load_csv(p, "label", &d), "line 3", want);
    }
    /* The edges of float range and an underflow to zero are numbers. */
    const char edge[] = "x,label\n3.4e38,0\n-3.4e38,1\n1e-50,0\n";
    p = write_tmp("edge.csv", edge, sizeof edge - 1);
    if (TH_OK(NULL, vkt_dataset_load_csv(p, "label", &d))) {
        const float *x = vkt_dataset_x(d);
        TH_CHECK(vkt_dataset_count(d) == 3 && x[0] == 3.4e38f && x[1] == -3.4e38f && x[2] == 0.0f,
                 "3.4e38, -3.4e38 and 1e-50 are kept");
        vkt_dataset_destroy(d);
    }
    remove(p);
    /* A byte-order mark before the label's name, then before a feature's. */
    const char bom[] = "\xEF\xBB\xBFlabel,x\r\n1,2.5\r\n0,-1\r\n";
    p = write_tmp("bom.csv", bom, sizeof bom - 1);
    if (TH_OK(NULL, vkt_dataset_load_csv(p, "label", &d))) {
        TH_CHECK(vkt_dataset_count(d) == 2 && vkt_dataset_x(d)[0] == 2.5f &&
                 vkt_dataset_y(d)[0] == 1, "a byte-order mark before the label column is skipped");
        vkt_dataset_destroy(d);
    }
    remove(p);
    const char bom_x[] = "\xEF\xBB\xBFx,label\nabc,1\n";
    p = write_tmp("bomx.csv", bom_x, sizeof bom_x - 1);
    expect_error(p, vkt_dataset_load_csv(p, "label", &d), "line 2", "column 'x': 'abc'");
    TH_CHECK(d == NULL, "no data set on failure");
}

static void test_readers(void)
{
    const char good[] = "a, label ,b\r\n1.5,2,-3\n\n0,0,1e3\n";
    const char *p = write_tmp("good.csv", good, sizeof good - 1);
    vkt_dataset *d = NULL;
    if (TH_OK(NULL, vkt_dataset_load_csv(p, "label", &d))) {
        const float *x = vkt_dataset_x(d);
        const int32_t *y = vkt_dataset_y(d);
        TH_CHECK(vkt_dataset_count(d) == 2 && vkt_dataset_features(d) == 2 &&
                 vkt_dataset_classes(d) == 3 && x[0] == 1.5f && x[1] == -3.0f && x[2] == 0 &&
                 x[3] == 1000.0f && y[0] == 2 && y[1] == 0, "CSV features and labels");
        vkt_dataset_destroy(d);
    }
    remove(p);
    const char bad_num[] = "x,y,label\n1,2,0\n3,abc,1\n";
    p = write_tmp("num.csv", bad_num, sizeof bad_num - 1);
    expect_error(p, vkt_dataset_load_csv(p, "label", &d), "line 3", "'abc' is not a number");
    const char bad_label[] = "x,label\n1,0\n2,1.5\n";
    p = write_tmp("lab.csv", bad_label, sizeof bad_label - 1);
    expect_error(p, vkt_dataset_load_csv(p, "label", &d), "line 3", "'1.5' is not a label");
    p = write_tmp("nolabel.csv", "x,y\n1,2\n", 8);
    expect_error(p, vkt_dataset_load_csv(p, "label", &d), "line 1", "no label column 'label'");
    const char ragged[] = "x,y,label\n1,2,0\n3,1\n";
    p = write_tmp("ragged.csv", ragged, sizeof ragged - 1);
    expect_error(p, vkt_dataset_load_csv(p, "label", &d), "line 3", "2 fields, expected 3");
    p = write_tmp("empty.csv", "", 0);
    expect_error(p, vkt_dataset_load_csv(p, "label", &d), "is empty", NULL);
    p = write_tmp("header.csv", "x,label\n", 8);
    expect_error(p, vkt_dataset_load_csv(p, "label", &d), "no data rows", NULL);
    TH_CHECK(d == NULL, "no data set on failure");
    TH_STATUS(NULL, vkt_dataset_load_csv("/nonexistent.csv", "label", &d), VKT_ERROR_IO);
    test_csv_cells();

    const unsigned char bytes[5] = {1, 2, 0xff, 0x10, 7};
    uint32_t *tok = NULL;
    uint64_t n = 0;
    p = write_tmp("tok.bin", bytes, 5);
    if (TH_OK(NULL, vkt_dataset_load_tokens(p, 1, &tok, &n)))
        TH_CHECK(n == 5 && tok[2] == 255 && tok[4] == 7, "uint8 tokens");
    free(tok);
    p = write_tmp("tok16.bin", bytes, 4);
    if (TH_OK(NULL, vkt_dataset_load_tokens(p, 2, &tok, &n)))
        TH_CHECK(n == 2 && tok[0] == 0x0201 && tok[1] == 0x10ff, "uint16 tokens, little endian");
    free(tok);
    remove(p);
    p = write_tmp("tok.bin", bytes, 5);
    expect_error(p, vkt_dataset_load_tokens(p, 2, &tok, &n), "offset 4", "2-byte uint16");
    TH_CHECK(tok == NULL && n == 0, "no tokens on failure");
    p = write_tmp("tok0.bin", "", 0);
    expect_error(p, vkt_dataset_load_tokens(p, 1, &tok, &n), "is empty", "uint8");
    TH_STATUS(NULL, vkt_dataset_load_tokens("/tmp", 3, &tok, &n), VKT_ERROR_INVALID_ARGUMENT);
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
    th_temp_dir("test_data", g_tmp, sizeof g_tmp);
    test_epochs();
    test_prefetch();
    test_readers();
    test_errors();
    test_mnist();
    th_remove_tree(g_tmp);
    return th_finish();
}
