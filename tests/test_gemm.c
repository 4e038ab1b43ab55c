/* test_gemm.c - vkt_gemm against kref_gemm, for every GEMM variant of the kernel table
 * (gemm_texel: texel reads and subgroup shuffles, gemm_sampler: its uniform-texel
 * fallback, gemm_tile: register-blocked tiles with vec4 loads and split-K, gemm_shared:
 * shared-memory tiles), and all four transpose combinations: shapes that are 1, prime or
 * off every tile size, packed and padded leading dimensions, 16-byte aligned and
 * unaligned views (the vec4 and scalar reads and stores), alpha and beta (beta == 0 must
 * ignore a C full of NaN, beta != 0 must read it), narrow N (the CPU kernel computes C^T
 * there), the GEMMs of an MLP training step, a product with over a million outputs, two
 * dependent products in one stream; guard elements and padding columns must stay
 * untouched. Then the errors. gemm_tile runs again planned for many compute units, so
 * that K is split on small shapes, until every tile row has run split and unsplit; a
 * split product is bitwise repeatable. */
#include "harness.h"
#include "gpu/gpu.h" /* the kernel variants' table */
#include "kernels/gemm.h"
#include "kernels/ref.h"
#include "platform/platform.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static vkt_context *ctx;
static vkt_stream *s;
static const char *variant_name;
static uint32_t tile_seen[8][2]; /* gemm_tile cases run per tile row, unsplit and split */

/* Notes which gemm_tile tile row and split the product gets (the plan vkt_gemm follows). */
static void note_tile(uint32_t m, uint32_t n, uint32_t k)
{
    if (ctx->kv[GPU_FAMILY_GEMM] != GPU_V_GEMM_TILE)
        return;
    kg_plan pl = kg_gemm_plan(&ctx->profile, GPU_V_GEMM_TILE, m, n, k);
    uint32_t rows;
    const kg_tile *t = kg_tile_rows(&rows);
    for (uint32_t r = 0; r < rows && r < 8; r++)
        if (t[r].bm == pl.bm && t[r].bn == pl.bn)
            tile_seen[r][pl.splits > 1]++;
}

/* How a case lays out its operands. */
enum ld_mode { LD_PACKED, LD_PAD3, LD_ROUND4 };  /* ld = 0, row + 3, row rounded up to 4, +4 */
enum align_mode { AL_HARNESS, AL_16, AL_16_PLUS1 }; /* harness offset, 16-byte, 16-byte + 4 */

typedef struct gcase {
    int ta, tb;
    uint32_t m, n, k;
    float alpha, beta;
    enum ld_mode ld_a, ld_b, ld_c;
    enum align_mode align;
} gcase;

/* A matrix of `rows` x `cols` in a guarded device buffer, with a host copy of the whole
 * buffer region (slack and padding included). */
typedef struct mat {
    th_buf buf;
    uint32_t rows, cols, ld; /* ld as passed to vkt_gemm (0 = packed) */
    uint64_t skip;           /* elements between the th_buf start and the view */
    float *host;             /* buf.n elements */
} mat;

static uint32_t pick_ld(uint32_t cols, enum ld_mode mode)
{
    switch (mode) {
    case LD_PACKED: return 0;
    case LD_PAD3: return cols + 3;
    default: return (cols + 3) / 4 * 4 + 4;
    }
}

static mat mat_create(uint32_t rows, uint32_t cols, enum ld_mode ld_mode,
                      enum align_mode align, int fill_nan)
{
    mat x = {.rows = rows, .cols = cols, .ld = pick_ld(cols, ld_mode)};
    uint32_t ld = x.ld ? x.ld : cols;
    uint64_t extent = (uint64_t)(rows - 1) * ld + cols;
    x.buf = th_buf_create(ctx, extent + 8);
    if (align != AL_HARNESS) {
        uint64_t start = (x.buf.offset + 3) / 4 * 4; /* 16-byte aligned element */
        x.skip = start - x.buf.offset + (align == AL_16_PLUS1 ? 1 : 0);
    }
    x.host = th_alloc_floats(x.buf.n);
    th_fill_uniform(x.host, x.buf.n, -1.0f, 1.0f);
    if (fill_nan)
        for (uint64_t i = 0; i < x.buf.n; i++)
            x.host[i] = NAN;
    th_buf_write(&x.buf, x.host);
    return x;
}

static vkt_view mat_view(const mat *x)
{
    vkt_view v = th_view(&x->buf);
    v.offset += x->skip;
    return v;
}

static void mat_destroy(mat *x)
{
    th_buf_destroy(&x->buf);
    free(x->host);
}

/* Records one product into the stream (after a reset), runs it, compares all of C's
 * region (so padding and slack must be unchanged too) and its guards. */
static void run_case(const gcase *c)
{
    mat a = mat_create(c->ta ? c->k : c->m, c->ta ? c->m : c->k, c->ld_a, c->align, 0);
    mat b = mat_create(c->tb ? c->n : c->k, c->tb ? c->k : c->n, c->ld_b, c->align, 0);
    mat cc = mat_create(c->m, c->n, c->ld_c, c->align, c->beta == 0.0f);
    vkt_gemm_desc d = {.trans_a = c->ta, .trans_b = c->tb, .m = c->m, .n = c->n, .k = c->k,
                       .alpha = c->alpha, .beta = c->beta,
                       .a = mat_view(&a), .lda = a.ld,
                       .b = mat_view(&b), .ldb = b.ld,
                       .c = mat_view(&cc), .ldc = cc.ld};
    char what[160];
    snprintf(what, sizeof what,
             "%s gemm ta=%d tb=%d M=%u N=%u K=%u alpha=%g beta=%g lda=%u ldb=%u ldc=%u align=%d",
             variant_name, c->ta, c->tb, c->m, c->n, c->k, c->alpha, c->beta, a.ld, b.ld, cc.ld,
             (int)c->align);
    note_tile(c->m, c->n, c->k);
    TH_OK(ctx, vkt_stream_reset(s));
    int ok = TH_OK(ctx, vkt_gemm(s, &d));
    ok = ok && TH_OK(ctx, vkt_stream_run(s));
    if (ok) {
        float *got = th_alloc_floats(cc.buf.n);
        th_buf_read(&cc.buf, got);
        kref_gemm(c->ta, c->tb, c->m, c->n, c->k, c->alpha, a.host + a.skip, a.ld,
                     b.host + b.skip, b.ld, c->beta, cc.host + cc.skip, cc.ld);
        th_compare(what, got, cc.host, cc.buf.n, 1e-5f, 1e-6f * (float)c->k + 1e-6f);
        th_buf_guards_ok(&cc.buf, what);
        free(got);
    }
    mat_destroy(&a), mat_destroy(&b), mat_destroy(&cc);
}

/* Many shapes x the four transpose combinations; layouts and scalars vary by case. */
static void check_shapes(void)
{
    static const uint32_t shapes[][3] = {
        {1, 1, 1},   {7, 13, 5},  {31, 17, 29}, {65, 33, 127}, {100, 1, 300},
        {1, 257, 64}, {16, 32, 8}, {33, 65, 4},  {17, 31, 9},   {64, 64, 64},
    };
    static const float scalars[][2] = {{1.0f, 0.0f}, {0.5f, 0.25f}, {-1.5f, 1.0f}};
    for (uint32_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (uint32_t t = 0; t < 4; t++) {
            gcase c = {.ta = (int)(t >> 1), .tb = (int)(t & 1),
                       .m = shapes[i][0], .n = shapes[i][1], .k = shapes[i][2],
                       .alpha = scalars[(i + t) % 3][0], .beta = scalars[(i + t) % 3][1],
                       .ld_a = (enum ld_mode)((i + t) % 3),
                       .ld_b = (enum ld_mode)((i + t + 1) % 3),
                       .ld_c = (enum ld_mode)((i + t + 2) % 3),
                       .align = (enum align_mode)((i + 2 * t) % 3)};
            run_case(&c);
        }
}

/* 16-byte aligned operands with leading dimensions a multiple of 4: the CPU kernel's
 * vec4 reads, for every transpose combination, with a k-tail and without. */
static void check_vec4_layouts(void)
{
    static const uint32_t shapes[][3] = {{20, 31, 11}, {48, 40, 36}, {5, 70, 6}};
    for (uint32_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (uint32_t t = 0; t < 4; t++) {
            gcase c = {.ta = (int)(t >> 1), .tb = (int)(t & 1),
                       .m = shapes[i][0], .n = shapes[i][1], .k = shapes[i][2],
                       .alpha = 1.25f, .beta = (t & 1) ? 0.0f : -0.5f,
                       .ld_a = LD_ROUND4, .ld_b = LD_ROUND4, .ld_c = LD_ROUND4,
                       .align = AL_16};
            run_case(&c);
        }
}

/* N much narrower than the CPU kernel's 32-column tile: it computes C^T = op(B)^T op(A)^T
 * and stores it transposed (scalar stores, beta read through the same indices). */
static void check_narrow(void)
{
    static const uint32_t shapes[][3] = {
        {128, 10, 128}, {64, 1, 9}, {100, 3, 33}, {48, 12, 20}, {200, 7, 1}, {33, 2, 70},
    };
    static const float betas[3] = {0.0f, 1.0f, -0.75f};
    for (uint32_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (uint32_t t = 0; t < 4; t++) {
            gcase c = {.ta = (int)(t >> 1), .tb = (int)(t & 1),
                       .m = shapes[i][0], .n = shapes[i][1], .k = shapes[i][2],
                       .alpha = 0.5f, .beta = betas[(i + t) % 3],
                       .ld_a = (enum ld_mode)((i + t) % 3), .ld_b = (enum ld_mode)(t % 3),
                       .ld_c = (enum ld_mode)((i + 2 * t) % 3),
                       .align = (enum align_mode)((i + t) % 3)};
            run_case(&c);
        }
}

/* The GEMMs of a training step of a 784-256-128-10 MLP with batch 128, as `vkt bench
 * gemm --mlp` times them: forward X W, weight gradients X^T dY (also accumulated, beta 1),
 * input gradients dY W^T. Packed, 16-byte aligned: vec4 reads and stores of C. */
static void check_mlp(void)
{
    static const struct { int ta, tb; uint32_t m, n, k; float beta; } g[] = {
        {0, 0, 128, 256, 784, 0.0f}, {0, 0, 128, 10, 128, 0.0f}, {1, 0, 128, 10, 128, 0.0f},
        {0, 1, 128, 128, 10, 0.0f},  {0, 1, 128, 256, 128, 0.0f}, {1, 0, 784, 256, 128, 1.0f},
        {1, 0, 256, 128, 128, 1.0f},
    };
    for (uint32_t i = 0; i < sizeof g / sizeof g[0]; i++) {
        gcase c = {.ta = g[i].ta, .tb = g[i].tb, .m = g[i].m, .n = g[i].n, .k = g[i].k,
                   .alpha = 1.0f, .beta = g[i].beta, .ld_a = LD_PACKED, .ld_b = LD_PACKED,
                   .ld_c = LD_PACKED, .align = AL_16};
        run_case(&c);
    }
}

/* More than a million outputs (many workgroups in both grid dimensions). */
static void check_large(int ta, int tb)
{
    gcase c = {.ta = ta, .tb = tb, .m = 1031, .n = 1029, .k = 64, .alpha = 1.0f, .beta = 0.5f,
               .ld_a = LD_PACKED, .ld_b = LD_PAD3, .ld_c = LD_ROUND4, .align = AL_16};
    run_case(&c);
}

/* E = (A * B) * D in one stream: the second product reads what the first wrote. */
static void check_chain(void)
{
    const uint32_t m = 37, k = 23, n = 41, p = 19;
    mat a = mat_create(m, k, LD_PACKED, AL_HARNESS, 0);
    mat b = mat_create(k, n, LD_PACKED, AL_HARNESS, 0);
    mat c = mat_create(m, n, LD_PACKED, AL_HARNESS, 1);
    mat dm = mat_create(n, p, LD_PACKED, AL_HARNESS, 0);
    mat e = mat_create(m, p, LD_PACKED, AL_HARNESS, 1);
    vkt_gemm_desc d1 = {.m = m, .n = n, .k = k, .alpha = 1.0f, .a = mat_view(&a),
                        .b = mat_view(&b), .c = mat_view(&c)};
    vkt_gemm_desc d2 = {.m = m, .n = p, .k = n, .alpha = 1.0f, .a = mat_view(&c),
                        .b = mat_view(&dm), .c = mat_view(&e)};
    TH_OK(ctx, vkt_stream_reset(s));
    TH_OK(ctx, vkt_gemm(s, &d1));
    TH_OK(ctx, vkt_gemm(s, &d2));
    if (TH_OK(ctx, vkt_stream_run(s))) {
        kref_gemm(0, 0, m, n, k, 1.0f, a.host + a.skip, 0, b.host + b.skip, 0, 0.0f,
                     c.host + c.skip, 0);
        kref_gemm(0, 0, m, p, n, 1.0f, c.host + c.skip, 0, dm.host + dm.skip, 0, 0.0f,
                     e.host + e.skip, 0);
        float *got = th_alloc_floats(e.buf.n);
        th_buf_read(&e.buf, got);
        char what[64];
        snprintf(what, sizeof what, "%s chain of two products", variant_name);
        th_compare(what, got, e.host, e.buf.n, 1e-4f, 1e-4f);
        free(got);
    }
    mat_destroy(&a), mat_destroy(&b), mat_destroy(&c), mat_destroy(&dm), mat_destroy(&e);
}

static int errmsg_has(const char *needle)
{
    return TH_CHECK(strstr(vkt_context_errmsg(ctx), needle) != NULL,
                    "the message names '%s': %s", needle, vkt_context_errmsg(ctx));
}

static void check_errors(void)
{
    th_buf buf = th_buf_create(ctx, 4096);
    vkt_view v = th_view(&buf);
    vkt_gemm_desc ok = {.m = 8, .n = 8, .k = 8, .alpha = 1.0f, .a = v,
                        .b = {buf.buffer, buf.offset + 64}, .c = {buf.buffer, buf.offset + 128}};
    vkt_gemm_desc d;

    TH_STATUS(NULL, vkt_gemm(NULL, &ok), VKT_ERROR_INVALID_ARGUMENT);
    TH_STATUS(ctx, vkt_gemm(s, NULL), VKT_ERROR_INVALID_ARGUMENT);
    d = ok, d.k = 0;
    TH_STATUS(ctx, vkt_gemm(s, &d), VKT_ERROR_INVALID_ARGUMENT);

    d = ok, d.lda = 7; /* A is [8, 8]: rows of 8 */
    TH_STATUS(ctx, vkt_gemm(s, &d), VKT_ERROR_SHAPE);
    errmsg_has("lda");
    d = ok, d.trans_a = 1, d.m = 9, d.lda = 8; /* A stored [K, M] = [8, 9] */
    TH_STATUS(ctx, vkt_gemm(s, &d), VKT_ERROR_SHAPE);
    errmsg_has("lda");
    d = ok, d.trans_b = 1, d.k = 9, d.ldb = 8; /* B stored [N, K] = [8, 9] */
    TH_STATUS(ctx, vkt_gemm(s, &d), VKT_ERROR_SHAPE);
    errmsg_has("ldb");
    d = ok, d.ldc = 4;
    TH_STATUS(ctx, vkt_gemm(s, &d), VKT_ERROR_SHAPE);
    errmsg_has("ldc");

    uint64_t total = vkt_buffer_size(buf.buffer) / 4;
    d = ok, d.b.offset = total - 60; /* B needs 64 elements */
    TH_STATUS(ctx, vkt_gemm(s, &d), VKT_ERROR_INVALID_ARGUMENT);
    errmsg_has("outside");
    d = ok, d.c.offset = total - 8, d.ldc = 100; /* rows 100 apart run past the end */
    TH_STATUS(ctx, vkt_gemm(s, &d), VKT_ERROR_INVALID_ARGUMENT);
    d = ok, d.a.buffer = NULL;
    TH_STATUS(ctx, vkt_gemm(s, &d), VKT_ERROR_INVALID_ARGUMENT);
    d = ok, d.c.offset = ok.a.offset + 60; /* C overlaps the end of A */
    TH_STATUS(ctx, vkt_gemm(s, &d), VKT_ERROR_INVALID_ARGUMENT);
    errmsg_has("overlaps");

    /* After the refusals the stream still records and runs. */
    TH_OK(ctx, vkt_stream_reset(s));
    TH_OK(ctx, vkt_gemm(s, &ok));
    TH_OK(ctx, vkt_stream_run(s));
    th_buf_destroy(&buf);
}

/* Every GEMM variant lavapipe runs, forced through the kernel filter. gemm_sampler is
 * for devices without storage texel buffers of R32F / RGBA32F (which the Vulkan spec
 * requires, so no device takes it by itself): A and B read as uniform texel buffers, C
 * as a storage buffer. */
static void run_variant_setup(const char *name)
{
    ctx = th_context_filter(name);
    s = th_stream(ctx, 0);
    variant_name = name;
}

static void run_checks(void)
{
    check_shapes();
    check_vec4_layouts();
    check_narrow();
    check_mlp();
    check_large(0, 0);
    check_large(1, 1);
    check_chain();
    check_errors();
}

static void run_variant(const char *name)
{
    run_variant_setup(name);
    run_checks();
    vkt_stream_destroy(s);
    s = NULL;
    th_context_release(ctx);
}

/* More shapes, planned for 1, 2, 16 and 1024 compute units, until every tile row of
 * gemm_tile has run split and unsplit (the plan picks the row; a few compute units
 * favour the rectangular ones and no split). */
static void split_every_tile(void)
{
    static const uint32_t ms[] = {40, 64, 100, 130, 250}, ns[] = {40, 128, 200, 260, 33};
    static const uint32_t cus[] = {1, 2, 16, 1024};
    uint32_t rows;
    const kg_tile *t = kg_tile_rows(&rows);
    for (uint32_t x = 0; x < 4 * 5 * 5; x++) {
        uint32_t u = x / 25, i = x / 5 % 5, j = x % 5;
        ctx->profile.compute_units = cus[u];
        kg_plan q = kg_gemm_plan(&ctx->profile, GPU_V_GEMM_TILE, ms[i], ns[j], 700);
        for (uint32_t r = 0; r < rows && r < 8; r++) {
            if (t[r].bm != q.bm || t[r].bn != q.bn || tile_seen[r][q.splits > 1])
                continue;
            gcase c = {.ta = (int)(i & 1), .tb = (int)(j & 1), .m = ms[i], .n = ns[j],
                       .k = 700, .alpha = 1.5f, .beta = (i + j) % 2 ? 0.0f : -2.0f,
                       .ld_a = LD_PACKED, .ld_b = LD_ROUND4, .ld_c = LD_PAD3,
                       .align = (enum align_mode)(j % 3)};
            run_case(&c);
        }
    }
    ctx->profile.compute_units = 1024;
}

/* Split-K: gemm_tile planned as for a device of 1024 compute units, where the tiles of
 * these small products leave most idle, so K is split into partial tiles (the stream's
 * scratch memory) that a second dispatch sums in a fixed order. The same checks as every
 * variant, then: a split product is two dispatches, and its result is bitwise the same
 * when run again. */
static void run_split(void)
{
    run_variant_setup("gemm_tile");
    ctx->profile.compute_units = 1024;
    variant_name = "gemm_tile split-K";
    kg_plan pl = kg_gemm_plan(&ctx->profile, GPU_V_GEMM_TILE, 100, 1, 300);
    TH_CHECK(pl.splits > 1, "100x1x300 splits K on 1024 compute units (%u splits)", pl.splits);
    pl = kg_gemm_plan(&ctx->profile, GPU_V_GEMM_TILE, 784, 256, 128);
    TH_CHECK(pl.splits > 1, "784x256x128 splits K (%u splits)", pl.splits);
    run_checks();
    split_every_tile();

    const uint32_t m = 37, n = 29, k = 1000;
    mat a = mat_create(k, m, LD_PACKED, AL_HARNESS, 0), b = mat_create(k, n, LD_PAD3, AL_16, 0);
    mat c = mat_create(m, n, LD_PACKED, AL_HARNESS, 0);
    vkt_gemm_desc d = {.trans_a = 1, .m = m, .n = n, .k = k, .alpha = 0.5f, .beta = 1.0f,
                       .a = mat_view(&a), .lda = a.ld, .b = mat_view(&b), .ldb = b.ld,
                       .c = mat_view(&c), .ldc = c.ld};
    float *first = th_alloc_floats(c.buf.n), *again = th_alloc_floats(c.buf.n);
    TH_OK(ctx, vkt_stream_reset(s));
    TH_OK(ctx, vkt_gemm(s, &d));
    vkt_stream_stats st = {0};
    vkt_stream_stats_get(s, &st);
    TH_CHECK(st.dispatches == 2, "a split product records 2 dispatches (%u)", st.dispatches);
    TH_OK(ctx, vkt_stream_run(s));
    th_buf_read(&c.buf, first);
    th_buf_write(&c.buf, c.host);
    TH_OK(ctx, vkt_stream_run(s));
    th_buf_read(&c.buf, again);
    TH_CHECK(memcmp(first, again, c.buf.n * 4) == 0, "split-K repeats bitwise");
    free(first), free(again);
    mat_destroy(&a), mat_destroy(&b), mat_destroy(&c);
    vkt_stream_destroy(s);
    s = NULL;
    th_context_release(ctx);
}

int main(void)
{
    th_init("test_gemm");
    vkt_context *probe = th_context(VKT_KERNELS_CPU);
    TH_CHECK(probe->storage_texel, "lavapipe supports storage texel buffers of R32F and "
                                   "RGBA32F (mandatory in Vulkan)");
    for (int v = 0; v < GPU_VARIANT_COUNT; v++) {
        const gpu_variant_row *row = gpu_variant_row_of((gpu_variant)v);
        if (row->family == GPU_FAMILY_GEMM &&
            TH_CHECK(gpu_variant_runs(row, &probe->profile, NULL, 0),
                     "lavapipe runs GEMM variant %s", row->name))
        {
            double t0 = plat_now();
            run_variant(row->name);
            printf("  %s: %.1f s\n", row->name, plat_now() - t0);
        }
    }
    run_split();
    uint32_t rows;
    const kg_tile *t = kg_tile_rows(&rows);
    for (uint32_t r = 0; r < rows && r < 8; r++)
        TH_CHECK(tile_seen[r][0] && tile_seen[r][1],
                 "gemm_tile's %ux%u tile ran unsplit (%u cases) and split (%u)", t[r].bm,
                 t[r].bn, tile_seen[r][0], tile_seen[r][1]);
    return th_finish();
}
