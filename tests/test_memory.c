/* Suballocation, alignment, reuse, host/device buffers, the staging path, and the memory
 * profiles (the memory types chosen for each use, on this device and on a discrete GPU's
 * types given by hand). */
#include <stdlib.h>
#include <string.h>

#include "gpu/gpu.h"
#include "harness.h"
#include "platform/platform.h"

/* A context whose device memory the host does not map directly (a discrete GPU, or a
 * forced VKT_MEMORY_PROFILE) makes its staging buffer on the first read or write and keeps
 * it: one write first, so the counts below see only the buffers under test. */
static void warm_staging(vkt_context *ctx)
{
    vkt_buffer *b = NULL;
    uint32_t v = 7;
    TH_OK(ctx, vkt_buffer_create(ctx, 4, VKT_MEMORY_DEVICE, &b));
    TH_OK(ctx, vkt_buffer_write(b, 0, &v, 4));
    TH_CHECK((ctx->staging != NULL) == (!b->mapped || ctx->force_staging),
             "a staging buffer exactly where device memory is not written directly");
    vkt_buffer_destroy(b);
}

static void test_suballocation(vkt_context *ctx)
{
    enum { N = 200 };
    vkt_buffer *b[N];
    vkt_memory_stats st0, st1, st2;
    warm_staging(ctx);
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

/* The memory profiles on this device: each forced through the options, every use's
 * buffer mapped or not as the profile says, host memory apart from device memory where
 * the profile separates them (and not counted as device-local), and the round trips. */
static int has_flags(VkMemoryPropertyFlags f, VkMemoryPropertyFlags want)
{
    return (f & want) == want;
}

/* AUTO's rule stated from the device's own types: device-local host-visible coherent
 * memory over at least half of the largest device-local heap. */
static int device_offers_rebar(const vkt_context *ctx)
{
    const VkPhysicalDeviceMemoryProperties *mp = &ctx->mem_props;
    VkDeviceSize largest = 0;
    for (uint32_t h = 0; h < mp->memoryHeapCount; h++)
        if ((mp->memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) &&
            mp->memoryHeaps[h].size > largest)
            largest = mp->memoryHeaps[h].size;
    for (uint32_t i = 0; i < mp->memoryTypeCount; i++)
        if (has_flags(mp->memoryTypes[i].propertyFlags,
                      VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT | VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT |
                          VK_MEMORY_PROPERTY_HOST_COHERENT_BIT) &&
            mp->memoryHeaps[mp->memoryTypes[i].heapIndex].size * 2 >= largest)
            return 1;
    return 0;
}

static void test_profile(vkt_memory_profile p)
{
    const char *name = vkt_memory_profile_name(p);
    vkt_context_options o = {.memory = p};
    vkt_context *ctx = NULL;
    vkt_status st = vkt_context_create(th_instance, &o, &ctx);
    if (p == VKT_MEMORY_PROFILE_REBAR && st == VKT_ERROR_NO_DEVICE) {
        TH_CHECK(strstr(vkt_last_error(), "device-local and host-visible") != NULL,
                 "rebar refused, naming what the device lacks: %s", vkt_last_error());
        return;
    }
    TH_OK(NULL, st);
    if (!ctx)
        return;
    /* AUTO defers to VKT_MEMORY_PROFILE (the suite runs this program under each) */
    vkt_memory_profile asked = p;
    p = vkt_context_memory_profile(ctx);
    TH_CHECK(asked == VKT_MEMORY_PROFILE_AUTO || p == asked,
             "%s: the profile asked for is in effect", name);
    name = vkt_memory_profile_name(p);
    vkt_buffer *dev = NULL, *host = NULL, *shared = NULL;
    vkt_memory_stats m0, m1;
    TH_OK(ctx, vkt_buffer_create(ctx, 4096, VKT_MEMORY_DEVICE, &dev));
    TH_OK(ctx, gpu_buffer_create(ctx, 4096, GPU_USE_SHARED, &shared));
    TH_OK(ctx, vkt_context_memory_stats(ctx, &m0));
    TH_OK(ctx, vkt_buffer_create(ctx, 4096, VKT_MEMORY_HOST, &host));
    TH_OK(ctx, vkt_context_memory_stats(ctx, &m1));
    if (dev && host && shared) {
        TH_CHECK(host->mapped && vkt_buffer_map(host) == host->mapped && !vkt_buffer_map(dev) &&
                     !vkt_buffer_map(shared),
                 "%s: host buffers are mapped, and only they through the API", name);
        if (p == VKT_MEMORY_PROFILE_UNMAPPED || p == VKT_MEMORY_PROFILE_REBAR)
            TH_CHECK(!dev->mapped, "%s: device memory is not mapped", name);
        if (p != VKT_MEMORY_PROFILE_AUTO) { /* forced: host memory apart, as on a discrete GPU */
            TH_CHECK(dev->alloc.block != host->alloc.block,
                     "%s: host memory in blocks of its own", name);
            TH_CHECK(m1.device_local_bytes == m0.device_local_bytes,
                     "%s: host memory is not counted as device-local (%llu -> %llu bytes)", name,
                     (unsigned long long)m0.device_local_bytes,
                     (unsigned long long)m1.device_local_bytes);
        }
        int want_shared = p == VKT_MEMORY_PROFILE_REBAR ||
                          (p != VKT_MEMORY_PROFILE_UNMAPPED && device_offers_rebar(ctx));
        TH_CHECK((shared->mapped != NULL) == want_shared, "%s: activations and inputs %s",
                 name, want_shared ? "in device-local host-visible memory"
                                   : "in device memory the host does not map");
        if (p == VKT_MEMORY_PROFILE_REBAR) {
            VkMemoryPropertyFlags f = ctx->mem.types[shared->alloc.block->type_index].flags;
            TH_CHECK(has_flags(f, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT |
                                      VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT) &&
                         shared->alloc.block != dev->alloc.block &&
                         shared->alloc.block != host->alloc.block,
                     "rebar: device-local host-visible memory, apart from both others");
        }
        TH_CHECK(ctx->force_staging == (p == VKT_MEMORY_PROFILE_STAGING),
                 "%s: staging copies %s", name, ctx->force_staging ? "forced" : "not forced");
    }
    vkt_buffer_destroy(dev);
    vkt_buffer_destroy(host);
    vkt_buffer_destroy(shared);
    char what[64];
    snprintf(what, sizeof what, "profile %s", name);
    test_round_trip(ctx, what);
    test_suballocation(ctx);
    vkt_context_destroy(ctx);
}

/* VKT_MEMORY_PROFILE when the options say nothing; the options win over it; bad values
 * are refused, naming the variable or the option. */
static void test_profile_choice(void)
{
    const char *saved = plat_getenv("VKT_MEMORY_PROFILE");
    char keep[32] = "";
    if (saved)
        snprintf(keep, sizeof keep, "%s", saved);
    vkt_context *ctx = NULL;
    plat_setenv("VKT_MEMORY_PROFILE", "unmapped");
    TH_OK(NULL, vkt_context_create(th_instance, NULL, &ctx));
    TH_CHECK(vkt_context_memory_profile(ctx) == VKT_MEMORY_PROFILE_UNMAPPED,
             "VKT_MEMORY_PROFILE=unmapped is taken");
    vkt_context_destroy(ctx);
    vkt_context_options o = {.memory = VKT_MEMORY_PROFILE_STAGING};
    ctx = NULL;
    TH_OK(NULL, vkt_context_create(th_instance, &o, &ctx));
    TH_CHECK(vkt_context_memory_profile(ctx) == VKT_MEMORY_PROFILE_STAGING,
             "the options win over VKT_MEMORY_PROFILE");
    vkt_context_destroy(ctx);
    const char *bad[] = {"fast", "Unmapped", "rebar2"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        plat_setenv("VKT_MEMORY_PROFILE", bad[i]);
        ctx = NULL;
        vkt_status st = vkt_context_create(th_instance, NULL, &ctx);
        TH_CHECK(st == VKT_ERROR_INVALID_ARGUMENT && !ctx &&
                     strstr(vkt_last_error(), "VKT_MEMORY_PROFILE") &&
                     strstr(vkt_last_error(), bad[i]),
                 "VKT_MEMORY_PROFILE='%s' is refused: %s", bad[i], vkt_last_error());
    }
    plat_setenv("VKT_MEMORY_PROFILE", saved ? keep : NULL);
    o.memory = (vkt_memory_profile)9;
    ctx = NULL;
    TH_STATUS(NULL, vkt_context_create(th_instance, &o, &ctx), VKT_ERROR_INVALID_ARGUMENT);
    TH_CHECK(!ctx && strstr(vkt_last_error(), "unknown memory profile 9"),
             "an unknown profile in the options is refused: %s", vkt_last_error());
    TH_CHECK(strcmp(vkt_memory_profile_name(VKT_MEMORY_PROFILE_REBAR), "rebar") == 0 &&
                 strcmp(vkt_memory_profile_name((vkt_memory_profile)9), "?") == 0,
             "profile names");
}

/* The choice on memory types given by hand (no device needed): a discrete GPU as NVIDIA's
 * driver reports one with resizable BAR (the H200: type 4 device-local host-visible over
 * the whole device heap), the same GPU without it (type 4 in a 256 MiB window), and one
 * with no device-local host-visible type at all. */
enum { DL = 1, HV = 2, HC = 4, CA = 8 };
typedef struct fake_device {
    const char *name;
    uint32_t n_types, n_heaps;
    uint32_t flags[5], heap[5];
    uint64_t heap_size[3];
    int heap_local[3];
} fake_device;

static uint32_t pick(vkt_context *ctx, gpu_memory_use use)
{
    uint32_t t[GPU_MAX_MEM_TYPES];
    uint32_t n = gpu_memory_types_for(ctx, 0xFFFFFFFFu, use, t, GPU_MAX_MEM_TYPES);
    return n ? ctx->mem.types[t[0]].index : UINT32_MAX;
}

static vkt_context *fake_context(const fake_device *d)
{
    vkt_context *ctx = calloc(1, sizeof *ctx);
    snprintf(ctx->info.name, sizeof ctx->info.name, "%s", d->name);
    ctx->mem_props.memoryTypeCount = d->n_types;
    ctx->mem_props.memoryHeapCount = d->n_heaps;
    for (uint32_t i = 0; i < d->n_types; i++)
        ctx->mem_props.memoryTypes[i] = (VkMemoryType){d->flags[i], d->heap[i]};
    for (uint32_t h = 0; h < d->n_heaps; h++)
        ctx->mem_props.memoryHeaps[h] = (VkMemoryHeap){
            d->heap_size[h], d->heap_local[h] ? VK_MEMORY_HEAP_DEVICE_LOCAL_BIT : 0};
    return ctx;
}

static void test_profiles_by_hand(void)
{
    const uint64_t GiB = 1ull << 30;
    /* types: none, device, host, host cached, device + host */
    const fake_device bar = {"rebar GPU", 5, 2, {0, DL, HV | HC, HV | HC | CA, DL | HV | HC},
                             {1, 0, 1, 1, 0}, {141 * GiB, 64 * GiB}, {1, 0}};
    fake_device window = bar;
    window.name = "BAR-window GPU";
    window.n_heaps = 3;
    window.heap[4] = 2;
    window.heap_size[2] = 256ull << 20;
    window.heap_local[2] = 1;
    fake_device plain = bar;
    plain.name = "plain GPU";
    plain.n_types = 4;
    /* {device, host, shared} memory type per profile (auto, staging, unmapped, rebar) */
    static const uint32_t want_bar[4][3] = {{1, 3, 4}, {1, 3, 4}, {1, 3, 1}, {1, 3, 4}};
    static const uint32_t want_window[4][3] = {{1, 3, 1}, {1, 3, 1}, {1, 3, 1}, {9, 9, 9}};
    static const uint32_t want_plain[4][3] = {{1, 3, 1}, {1, 3, 1}, {1, 3, 1}, {9, 9, 9}};
    const fake_device *devs[3] = {&bar, &window, &plain};
    const uint32_t(*wants[3])[3] = {want_bar, want_window, want_plain};
    for (int d = 0; d < 3; d++)
        for (int p = 0; p < 4; p++) {
            vkt_context *ctx = fake_context(devs[d]);
            vkt_status st = gpu_memory_types_init(ctx, (vkt_memory_profile)p);
            const uint32_t *w = wants[d][p];
            if (w[0] == 9) {
                TH_CHECK(st == VKT_ERROR_NO_DEVICE && strstr(ctx->errmsg, devs[d]->name) &&
                             strstr(ctx->errmsg, "rebar"),
                         "rebar on a GPU without device-local host-visible memory over its "
                         "heap is refused: %s", ctx->errmsg);
            } else {
                uint32_t got[3] = {pick(ctx, GPU_USE_DEVICE), pick(ctx, GPU_USE_HOST),
                                   pick(ctx, GPU_USE_SHARED)};
                TH_CHECK(st == VKT_OK && memcmp(got, w, sizeof got) == 0,
                         "%s, profile %s: device/host/shared buffers in types %u/%u/%u "
                         "(expected %u/%u/%u)", devs[d]->name,
                         vkt_memory_profile_name((vkt_memory_profile)p), got[0], got[1],
                         got[2], w[0], w[1], w[2]);
            }
            free(ctx);
        }
}

/* The one rule for memory over the whole device (the profile's host-visible
 * device-local capability and the memory profiles' placement): a type's heap at least
 * half the largest device-local heap. */
static void test_spans_heap(void)
{
    VkPhysicalDeviceMemoryProperties mp = {0};
    mp.memoryHeapCount = 3;
    mp.memoryHeaps[0] = (VkMemoryHeap){80ull << 30, VK_MEMORY_HEAP_DEVICE_LOCAL_BIT};
    mp.memoryHeaps[1] = (VkMemoryHeap){256ull << 20, VK_MEMORY_HEAP_DEVICE_LOCAL_BIT};
    mp.memoryHeaps[2] = (VkMemoryHeap){40ull << 30, VK_MEMORY_HEAP_DEVICE_LOCAL_BIT};
    mp.memoryTypeCount = 3;
    for (uint32_t t = 0; t < 3; t++)
        mp.memoryTypes[t] = (VkMemoryType){DL | HV | HC, t};
    TH_CHECK(gpu_memory_type_spans_heap(&mp, 0), "a type on the largest heap spans it");
    TH_CHECK(!gpu_memory_type_spans_heap(&mp, 1), "a 256 MiB window beside 80 GiB does not");
    TH_CHECK(gpu_memory_type_spans_heap(&mp, 2), "a heap of exactly half the largest does");
    mp.memoryHeaps[2].size--;
    TH_CHECK(!gpu_memory_type_spans_heap(&mp, 2), "one byte less than half does not");
}

int main(void)
{
    th_init("test_memory");
    test_spans_heap();
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
    test_profile_choice();
    for (int p = VKT_MEMORY_PROFILE_AUTO; p <= VKT_MEMORY_PROFILE_REBAR; p++)
        test_profile((vkt_memory_profile)p);
    test_profiles_by_hand();
    return th_finish();
}
