/* Suballocation, alignment, reuse, host/device buffers and the staging path. */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "platform/platform.h"

static void test_suballocation(vkt_context *ctx)
{
    enum { N = 200 };
    vkt_buffer *b[N];
    vkt_memory_stats st0, st1, st2;
    TH_OK(ctx, vkt_context_memory_stats(ctx, &st0));
    for (int i = 0; i < N; i++)
        TH_OK(ctx, vkt_buffer_create(ctx, 1000 + 37 * (uint64_t)i, VKT_MEMORY_DEVICE, &b[i]));
    TH_OK(ctx, vkt_context_memory_stats(ctx, &st1));
    TH_CHECK(st1.block_count - st0.block_count <= 2,
             "%d small buffers share blocks: %u new vkAllocateMemory blocks", N,
             st1.block_count - st0.block_count);
    TH_CHECK(st1.allocation_count - st0.allocation_count == N, "%d live suballocations", N);
    /* Every buffer keeps its own contents: no two suballocations overlap. */
    for (int i = 0; i < N; i++) {
        uint32_t v = 0xA0000000u + (uint32_t)i;
        uint32_t *fill = malloc(vkt_buffer_size(b[i]));
        for (uint64_t j = 0; j < vkt_buffer_size(b[i]) / 4; j++)
            fill[j] = v;
        TH_OK(ctx, vkt_buffer_write(b[i], 0, fill, vkt_buffer_size(b[i]) / 4 * 4));
        free(fill);
    }
    int ok = 1;
    for (int i = 0; i < N; i++) {
        uint32_t first, last;
        uint64_t n = vkt_buffer_size(b[i]) / 4;
        vkt_buffer_read(b[i], 0, &first, 4);
        vkt_buffer_read(b[i], (n - 1) * 4, &last, 4);
        ok &= first == 0xA0000000u + (uint32_t)i && last == first;
    }
    TH_CHECK(ok, "no two suballocations overlap");
    /* Free every other buffer and allocate again: freed ranges are reused. */
    for (int i = 0; i < N; i += 2)
        vkt_buffer_destroy(b[i]);
    for (int i = 0; i < N; i += 2)
        TH_OK(ctx, vkt_buffer_create(ctx, 1000, VKT_MEMORY_DEVICE, &b[i]));
    TH_OK(ctx, vkt_context_memory_stats(ctx, &st2));
    TH_CHECK(st2.block_count == st1.block_count, "freed ranges are reused (blocks %u -> %u)",
             st1.block_count, st2.block_count);
    for (int i = 0; i < N; i++)
        vkt_buffer_destroy(b[i]);
    TH_OK(ctx, vkt_context_memory_stats(ctx, &st2));
    TH_CHECK(st2.allocation_count == st0.allocation_count && st2.bytes_in_use == st0.bytes_in_use,
             "all suballocations returned");
    TH_CHECK(st2.block_count == st0.block_count, "empty blocks are given back to the driver");
}

static void test_large_and_host(vkt_context *ctx)
{
    /* A buffer larger than a block gets a block of its own. */
    vkt_buffer *big = NULL, *host = NULL;
    uint64_t bytes = 80ull << 20;
    TH_OK(ctx, vkt_buffer_create(ctx, bytes, VKT_MEMORY_DEVICE, &big));
    TH_CHECK(vkt_buffer_map(big) == NULL, "device buffers are not mappable through the API");
    TH_OK(ctx, vkt_buffer_create(ctx, 4096, VKT_MEMORY_HOST, &host));
    float *p = vkt_buffer_map(host);
    TH_CHECK(p != NULL, "host buffers are mappable");
    if (p) {
        for (int i = 0; i < 1024; i++)
            p[i] = (float)i;
        float back[1024];
        TH_OK(ctx, vkt_buffer_read(host, 0, back, sizeof back));
        TH_CHECK(memcmp(back, p, sizeof back) == 0, "host buffer reads what was mapped");
    }
    vkt_buffer_destroy(big);
    vkt_buffer_destroy(host);
}

/* The same round trips through a context that always stages (the discrete-GPU path). */
static void test_round_trip(vkt_context *ctx, const char *what)
{
    uint64_t n = (20ull << 20) / 4 + 3; /* more than one 16 MiB staging chunk */
    float *x = th_alloc_floats(n), *y = th_alloc_floats(n);
    th_fill_uniform(x, n, -1, 1);
    vkt_buffer *b = NULL;
    TH_OK(ctx, vkt_buffer_create(ctx, (n + 5) * 4, VKT_MEMORY_DEVICE, &b));
    TH_OK(ctx, vkt_buffer_write(b, 20, x, n * 4));
    memset(y, 0, n * 4);
    TH_OK(ctx, vkt_buffer_read(b, 20, y, n * 4));
    TH_CHECK(memcmp(x, y, n * 4) == 0, "%s: 20 MiB round trip at a byte offset", what);
    TH_STATUS(ctx, vkt_buffer_write(b, 24, x, n * 4 + 4), VKT_ERROR_INVALID_ARGUMENT);
    TH_CHECK(strstr(vkt_context_errmsg(ctx), "outside the buffer") != NULL,
             "%s: out-of-range write names the problem: %s", what, vkt_context_errmsg(ctx));
    vkt_buffer_destroy(b);
    free(x);
    free(y);
}

/* A context capped at 8 MiB of device-local memory behaves as a device of that size: the
 * last block is cut to what is left, a request past it fails naming the limit, and freed
 * memory can be allocated again. */
static void test_limit(void)
{
    const uint64_t MiB = 1048576;
    vkt_context_options o = {.memory_limit = 8 * MiB};
    vkt_context *ctx = NULL;
    TH_OK(NULL, vkt_context_create(th_instance, &o, &ctx));
    if (!ctx)
        return;
    vkt_buffer *a = NULL, *b = NULL, *c = NULL;
    TH_OK(ctx, vkt_buffer_create(ctx, 3 * MiB, VKT_MEMORY_DEVICE, &a));
    TH_OK(ctx, vkt_buffer_create(ctx, 4 * MiB, VKT_MEMORY_DEVICE, &b));
    vkt_memory_stats ms;
    vkt_context_memory_stats(ctx, &ms);
    TH_CHECK(ms.memory_limit == 8 * MiB && ms.device_local_bytes <= 8 * MiB &&
             ms.device_local_bytes >= 7 * MiB, "7 MiB fit under the 8 MiB limit (%llu bytes "
             "allocated, limit %llu)", (unsigned long long)ms.device_local_bytes,
             (unsigned long long)ms.memory_limit);
    vkt_status st = vkt_buffer_create(ctx, 2 * MiB, VKT_MEMORY_DEVICE, &c);
    TH_CHECK(st == VKT_ERROR_OUT_OF_MEMORY && c == NULL &&
             strstr(vkt_context_errmsg(ctx), "limit") != NULL,
             "2 MiB more is refused with the limit named: %s (%s)", vkt_status_name(st),
             vkt_context_errmsg(ctx));
    vkt_buffer_destroy(b);
    TH_OK(ctx, vkt_buffer_create(ctx, 2 * MiB, VKT_MEMORY_DEVICE, &c));
    vkt_buffer_destroy(a);
    vkt_buffer_destroy(c);
    vkt_context_destroy(ctx);

    /* VKT_DEVICE_MEMORY_LIMIT when the options say nothing; a bad value is an error */
    plat_setenv("VKT_DEVICE_MEMORY_LIMIT", "1.5G");
    ctx = NULL;
    TH_OK(NULL, vkt_context_create(th_instance, NULL, &ctx));
    vkt_context_memory_stats(ctx, &ms);
    TH_CHECK(ms.memory_limit == 3 * 512 * MiB, "VKT_DEVICE_MEMORY_LIMIT=1.5G caps at %llu "
             "bytes", (unsigned long long)ms.memory_limit);
    vkt_context_destroy(ctx);
    const char *bad[] = {"lots", "12X", "0", "-5M", "1.5GB2"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        plat_setenv("VKT_DEVICE_MEMORY_LIMIT", bad[i]);
        ctx = NULL;
        st = vkt_context_create(th_instance, NULL, &ctx);
        TH_CHECK(st == VKT_ERROR_INVALID_ARGUMENT && !ctx &&
                 strstr(vkt_last_error(), "VKT_DEVICE_MEMORY_LIMIT") != NULL,
                 "VKT_DEVICE_MEMORY_LIMIT='%s' is refused: %s", bad[i], vkt_last_error());
        vkt_context_destroy(ctx);
    }
    plat_setenv("VKT_DEVICE_MEMORY_LIMIT", NULL);
}

int main(void)
{
    th_init("test_memory");
    vkt_context *ctx = th_context(VKT_KERNELS_AUTO);
    test_suballocation(ctx);
    test_large_and_host(ctx);
    test_round_trip(ctx, "direct");
    vkt_context_options o = {.force_staging = 1};
    vkt_context *staged = NULL;
    TH_OK(NULL, vkt_context_create(th_instance, &o, &staged));
    if (staged) {
        test_round_trip(staged, "staged");
        vkt_context_destroy(staged);
    }
    test_limit();
    return th_finish();
}
