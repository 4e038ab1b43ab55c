/* The embedding kernels (engine/kernels/embedding.c, declared in norm.h):
 * (1) the device lookup and backward against the references on awkward shapes (one id,
 *     vocabularies of 1 to 1000, dims not multiples of 4, a batch longer than one
 *     dispatch may scan on llvmpipe), with guard elements around every output, tensors at
 *     odd offsets and again 16-byte aligned, beta 0 over NaN-filled outputs (rows no id
 *     touches are +0) and beta 1 accumulation;
 * (2) the backward with heavily repeated ids: bitwise the same on two runs;
 * (3) the error paths; (4) a shorter pass with the other kernel variant. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "norm_case.h"

/* ---- (1, 2) lookup and backward ---------------------------------------------------- */

/* After a beta-0 backward into dt (read back into dt.h): the rows no id touches (from
 * `used` on) are +0, and a second run over NaN gives bitwise the same. */
static void check_beta0(tb *dt, const tb *ids, const tb *dy, uint32_t n, uint32_t vocab,
                        uint32_t dim, uint32_t used, const char *what)
{
    uint64_t tn = (uint64_t)vocab * dim;
    int untouched_zero = 1;
    for (uint64_t v = used; v < vocab; v++)
        for (uint32_t d = 0; d < dim; d++)
            untouched_zero &= dt->h[v * dim + d] == 0.0f && !signbit(dt->h[v * dim + d]);
    TH_CHECK(untouched_zero, "%s: rows no id touches are +0", what);
    float *first = th_alloc_floats(tn);
    memcpy(first, dt->h, tn * 4);
    for (uint64_t i = 0; i < tn; i++)
        dt->h[i] = NAN;
    th_buf_write(&dt->b, dt->h);
    TH_OK(g_ctx, kn_embedding_backward(g_s, tv(ids), tv(dy), tv(dt), 0.0f, n, vocab, dim));
    run();
    th_buf_read(&dt->b, dt->h);
    TH_CHECK(!memcmp(first, dt->h, tn * 4), "%s: two runs bitwise equal", what);
    free(first);
}

/* ids drawn from the first `used` rows of the vocabulary (used < vocab leaves rows no id
 * touches, which beta 0 must zero). */
static void test_embedding_shape(uint32_t n, uint32_t vocab, uint32_t dim, uint32_t used)
{
    char what[160];
    uint64_t yn = (uint64_t)n * dim, tn = (uint64_t)vocab * dim;
    tb ids = {make_buf(n), th_alloc_floats(n)};
    for (uint32_t i = 0; i < n; i++)
        ids.h[i] = (float)(th_rand_u64() % used);
    th_buf_write(&ids.b, ids.h);
    tb table = tb_new(tn, -1, 1), y = tb_const(yn, NAN), dy = tb_new(yn, -1, 1);
    double *idd = to_d(ids.h, n), *td = to_d(table.h, tn), *yd = zeros(yn);
    double *dyd = to_d(dy.h, yn);
    TH_OK(g_ctx, kn_embedding(g_s, tv(&ids), tv(&table), tv(&y), n, vocab, dim));
    run();
    kn_ref_embedding(idd, td, yd, n, vocab, dim);
    snprintf(what, sizeof what, "embedding %u ids, [%u, %u] aligned %d: y", n, vocab, dim,
             g_aligned);
    expect(&y, yd, 0, 0, "%s", what); /* a copy: exact */

    /* beta 0 over NaN, twice into the same buffer: bitwise equal; then beta 1. */
    tb dt = tb_const(tn, NAN);
    for (int beta = 0; beta < 2; beta++) {
        if (beta) {
            th_fill_uniform(dt.h, tn, -1, 1);
            th_buf_write(&dt.b, dt.h);
        }
        double *dtd = beta ? to_d(dt.h, tn) : zeros(tn);
        TH_OK(g_ctx, kn_embedding_backward(g_s, tv(&ids), tv(&dy), tv(&dt), (float)beta, n,
                                           vocab, dim));
        run();
        kn_ref_embedding_backward(idd, dyd, dtd, n, vocab, dim);
        snprintf(what, sizeof what, "embedding_backward %u ids, [%u, %u] aligned %d: beta %d",
                 n, vocab, dim, g_aligned, beta);
        /* sums of up to n terms of size 1 in fp32 */
        expect(&dt, dtd, 1e-5f, 1e-6f + 2e-7f * (float)n, "%s", what);
        free(dtd);
        if (!beta)
            check_beta0(&dt, &ids, &dy, n, vocab, dim, used, what);
    }
    free(idd);
    free(td);
    free(yd);
    free(dyd);
    tb_free(&ids);
    tb_free(&table);
    tb_free(&y);
    tb_free(&dy);
    tb_free(&dt);
}

static void test_embedding(void)
{
    /* (n, vocab, dim, ids from the first `used` rows): 500 ids from a vocab of 3; the
     * typical size; dims that are not multiples of 4; a batch longer than one dispatch
     * may scan on llvmpipe (split into slices). */
    const uint32_t full[][4] = {{1, 1, 1, 1},      {7, 3, 5, 3},     {500, 3, 64, 3},
                                {500, 5, 13, 2},   {2048, 90, 64, 90}, {13, 17, 6, 17},
                                {16001, 5, 8, 5},  {3, 1000, 4, 1000}};
    const uint32_t quick[][4] = {{7, 3, 5, 3}, {500, 3, 64, 3}, {64, 90, 64, 50}};
    if (g_quick)
        for (unsigned i = 0; i < sizeof quick / sizeof quick[0]; i++)
            test_embedding_shape(quick[i][0], quick[i][1], quick[i][2], quick[i][3]);
    else
        for (unsigned i = 0; i < sizeof full / sizeof full[0]; i++)
            test_embedding_shape(full[i][0], full[i][1], full[i][2], full[i][3]);
}

/* ---- (3) error paths ---------------------------------------------------------------- */

static void test_errors(void)
{
    const vkt_status BAD = VKT_ERROR_INVALID_ARGUMENT;
    tb big = tb_const(4096, 0);
    vkt_buffer *small = NULL; /* 3 floats: too small for any argument below */
    TH_OK(g_ctx, vkt_buffer_create(g_ctx, 12, VKT_MEMORY_DEVICE, &small));
    vkt_view v = tv(&big), sm = {small, 0};
    vkt_view w1 = {big.b.buffer, big.b.offset + 1000}, w2 = {big.b.buffer, big.b.offset + 2000};
    /* embedding: ids [4], table [5, 6], y [4, 6] */
    EXPECT_ERROR(kn_embedding(g_s, v, w1, w2, 0, 5, 6), BAD, "kn_embedding", "n (0)");
    EXPECT_ERROR(kn_embedding(g_s, v, w1, w2, 4, 0, 6), BAD, "kn_embedding", "vocab (0)");
    EXPECT_ERROR(kn_embedding(g_s, v, w1, w2, 4, 5, 0), BAD, "kn_embedding", "dim (0)");
    EXPECT_ERROR(kn_embedding(g_s, v, sm, w2, 4, 5, 6), BAD, "kn_embedding", "table");
    EXPECT_ERROR(kn_embedding(g_s, v, w1, sm, 4, 5, 6), BAD, "kn_embedding", "y");
    EXPECT_ERROR(kn_embedding(g_s, v, w1, v, 4, 5, 6), BAD, "kn_embedding", "overlaps");
    EXPECT_ERROR(kn_embedding(g_s, v, w1, w2, 4, (1u << 24) + 1, 1), VKT_ERROR_LIMIT,
                 "kn_embedding", "2^24");
    EXPECT_ERROR(kn_embedding_backward(g_s, v, w1, w2, NAN, 4, 5, 6), BAD,
                 "kn_embedding_backward", "beta");
    EXPECT_ERROR(kn_embedding_backward(g_s, v, w1, sm, 0, 4, 5, 6), BAD,
                 "kn_embedding_backward", "dtable");
    EXPECT_ERROR(kn_embedding_backward(g_s, v, w1, w1, 0, 4, 5, 6), BAD,
                 "kn_embedding_backward", "overlaps");
    EXPECT_ERROR(kn_embedding_backward(g_s, sm, w1, w2, 0, 4, 5, 6), BAD,
                 "kn_embedding_backward", "ids");
    TH_STATUS(NULL, kn_embedding_backward(NULL, v, w1, w2, 0, 4, 5, 6), BAD);
    /* Nothing was recorded by the failed calls: the stream still runs. */
    run();
    tb_free(&big);
    vkt_buffer_destroy(small);
}

int main(void)
{
    return norm_main("test_embedding", NULL, test_embedding, test_errors);
}
