/* test_fill.c - fill and copy: awkward lengths, a range longer than one storage binding
 * (split into several dispatches), bit-exact copies, overlap and argument errors. */
#include "harness.h"
#include "kernels/ref.h"

#include <stdlib.h>
#include <string.h>

static vkt_context *ctx;
static vkt_stream *s;

static void check(uint64_t n)
{
    float *x = th_alloc_floats(n), *got = th_alloc_floats(n), *want = th_alloc_floats(n);
    th_fill_uniform(x, n, -10.0f, 10.0f);
    if (n > 3) {
        uint32_t odd[3] = {0x7FC01234u, 0x00000001u, 0xFF800000u}; /* NaN payload, denormal, -inf */
        memcpy(x, odd, sizeof odd);
    }
    th_buf bf = th_buf_create(ctx, n), bx = th_buf_create(ctx, n), bc = th_buf_create(ctx, n);
    th_buf_write(&bx, x);
    TH_OK(ctx, vkt_stream_reset(s));
    TH_OK(ctx, vkt_fill(s, th_view(&bf), n, -2.5f));
    TH_OK(ctx, vkt_copy(s, th_view(&bx), th_view(&bc), n));
    TH_OK(ctx, vkt_stream_run(s));
    char what[64];
    th_buf_read(&bf, got);
    kref_fill(want, n, -2.5f);
    snprintf(what, sizeof what, "fill n=%llu", (unsigned long long)n);
    th_compare(what, got, want, n, 0, 0);
    th_buf_read(&bc, got);
    kref_copy(x, want, n);
    TH_CHECK(memcmp(got, want, n * 4) == 0, "copy n=%llu is bit-exact", (unsigned long long)n);
    th_buf_guards_ok(&bf, "fill");
    th_buf_guards_ok(&bc, "copy");
    th_buf_destroy(&bf), th_buf_destroy(&bx), th_buf_destroy(&bc);
    free(x), free(got), free(want);
}

/* More elements than one binding may span: several dispatches, same results. */
static void check_long_range(void)
{
    vkt_device_info info;
    TH_OK(ctx, vkt_context_device_info(ctx, &info));
    uint64_t n = info.max_storage_buffer_range / 4 + 1001;
    if (n > (64ull << 20)) {
        printf("skipping the long-range test: maxStorageBufferRange is %llu bytes\n",
               (unsigned long long)info.max_storage_buffer_range);
        return;
    }
    float *x = th_alloc_floats(n), *got = th_alloc_floats(n);
    for (uint64_t i = 0; i < n; i++)
        x[i] = (float)i;
    th_buf bx = th_buf_create(ctx, n), by = th_buf_create(ctx, n);
    th_buf_write(&bx, x);
    TH_OK(ctx, vkt_stream_reset(s));
    TH_OK(ctx, vkt_copy(s, th_view(&bx), th_view(&by), n));
    TH_OK(ctx, vkt_fill(s, th_view(&bx), n, 7.0f));
    TH_OK(ctx, vkt_stream_run(s));
    vkt_stream_stats st;
    TH_OK(ctx, vkt_stream_stats_get(s, &st));
    TH_CHECK(st.dispatches == 4, "copy and fill of %llu elements take 2 dispatches each (got "
             "%u in all)", (unsigned long long)n, st.dispatches);
    th_buf_read(&by, got);
    TH_CHECK(memcmp(got, x, n * 4) == 0, "copy of %llu elements", (unsigned long long)n);
    th_buf_read(&bx, got);
    uint64_t bad = 0;
    for (uint64_t i = 0; i < n; i++)
        bad += got[i] != 7.0f;
    TH_CHECK(bad == 0, "fill of %llu elements: %llu wrong", (unsigned long long)n,
             (unsigned long long)bad);
    th_buf_guards_ok(&bx, "long fill");
    th_buf_guards_ok(&by, "long copy");
    th_buf_destroy(&bx), th_buf_destroy(&by);
    free(x), free(got);
}

/* Every alignment phase of x and y modulo 4 elements; nothing outside y may change. */
static void check_phases(void)
{
    enum { N = 777, PAD = 24, TOTAL = N + 2 * PAD };
    static float x[TOTAL], got[TOTAL], want[TOTAL];
    vkt_buffer *bx, *by;
    TH_OK(ctx, vkt_buffer_create(ctx, TOTAL * 4, VKT_MEMORY_DEVICE, &bx));
    TH_OK(ctx, vkt_buffer_create(ctx, TOTAL * 4, VKT_MEMORY_DEVICE, &by));
    th_fill_uniform(x, TOTAL, -4.0f, 4.0f);
    TH_OK(ctx, vkt_buffer_write(bx, 0, x, sizeof x));
    for (int px = 0; px < 4; px++)
        for (int py = 0; py < 4; py++)
            for (uint64_t n = N - 19; n <= N - 16; n++) {
                vkt_view vx = {bx, PAD + px}, vy = {by, PAD + py};
                for (int i = 0; i < TOTAL; i++)
                    want[i] = -777.0f;
                TH_OK(ctx, vkt_buffer_write(by, 0, want, sizeof want));
                TH_OK(ctx, vkt_stream_reset(s));
                TH_OK(ctx, vkt_copy(s, vx, vy, n));
                TH_OK(ctx, vkt_stream_run(s));
                TH_OK(ctx, vkt_buffer_read(by, 0, got, sizeof got));
                memcpy(want + PAD + py, x + PAD + px, n * 4);
                char what[96];
                snprintf(what, sizeof what, "copy of %llu from phase %d to phase %d",
                         (unsigned long long)n, px, py);
                th_compare(what, got, want, TOTAL, 0, 0);
                if (px == 0) {
                    TH_OK(ctx, vkt_stream_reset(s));
                    TH_OK(ctx, vkt_fill(s, vy, n, 3.0f));
                    TH_OK(ctx, vkt_stream_run(s));
                    TH_OK(ctx, vkt_buffer_read(by, 0, got, sizeof got));
                    kref_fill(want + PAD + py, n, 3.0f);
                    snprintf(what, sizeof what, "fill of %llu at phase %d",
                             (unsigned long long)n, py);
                    th_compare(what, got, want, TOTAL, 0, 0);
                }
            }
    vkt_buffer_destroy(bx);
    vkt_buffer_destroy(by);
}

static void check_errors(void)
{
    th_buf b = th_buf_create(ctx, 100);
    vkt_view v = th_view(&b), v10 = {b.buffer, b.offset + 10};
    TH_STATUS(ctx, vkt_fill(s, v, 0, 1.0f), VKT_ERROR_INVALID_ARGUMENT);
    TH_STATUS(ctx, vkt_copy(s, v, v10, 0), VKT_ERROR_INVALID_ARGUMENT);
    TH_STATUS(NULL, vkt_fill(NULL, v, 10, 1.0f), VKT_ERROR_INVALID_ARGUMENT);
    TH_STATUS(NULL, vkt_copy(NULL, v, v10, 10), VKT_ERROR_INVALID_ARGUMENT);
    TH_STATUS(ctx, vkt_copy(s, v, v10, 11), VKT_ERROR_INVALID_ARGUMENT);
    TH_CHECK(strstr(vkt_context_errmsg(ctx), "overlap") != NULL, "the message says overlap: %s",
             vkt_context_errmsg(ctx));
    TH_STATUS(ctx, vkt_copy(s, v10, v, 11), VKT_ERROR_INVALID_ARGUMENT);
    uint64_t total = vkt_buffer_size(b.buffer) / 4;
    vkt_view past = {b.buffer, total - 50};
    TH_STATUS(ctx, vkt_fill(s, past, 51, 1.0f), VKT_ERROR_INVALID_ARGUMENT);
    TH_STATUS(ctx, vkt_copy(s, past, v, 51), VKT_ERROR_INVALID_ARGUMENT);
    TH_STATUS(ctx, vkt_copy(s, v, past, 51), VKT_ERROR_INVALID_ARGUMENT);
    vkt_view none = {NULL, 0};
    TH_STATUS(ctx, vkt_fill(s, none, 1, 1.0f), VKT_ERROR_INVALID_ARGUMENT);

    /* Adjacent ranges do not overlap; a copy onto itself is a no-op. */
    float x[100], got[100];
    th_fill_uniform(x, 100, -1, 1);
    th_buf_write(&b, x);
    TH_OK(ctx, vkt_stream_reset(s));
    TH_OK(ctx, vkt_copy(s, v, v10, 10));
    TH_OK(ctx, vkt_copy(s, v, v, 100));
    TH_OK(ctx, vkt_stream_run(s));
    th_buf_read(&b, got);
    memcpy(x + 10, x, 10 * sizeof x[0]);
    th_compare("copy into the adjacent range", got, x, 100, 0, 0);
    th_buf_destroy(&b);
}

int main(void)
{
    th_init("test_fill");
    ctx = th_context(VKT_KERNELS_AUTO);
    s = th_stream(ctx, 0);
    static const uint64_t sizes[] = {1, 2, 3, 7, 63, 64, 65, 1009, 65536, 1000003};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        check(sizes[i]);
    check_phases();
    check_long_range();
    check_errors();
    th_use_other_variant(&ctx, &s); /* workgroup sizes and row splits differ */
    check(1);
    check(65);
    check(1000003);
    vkt_stream_destroy(s);
    return th_finish();
}
