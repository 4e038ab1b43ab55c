/* Portability decisions (engine/gpu/portability.c) on faked extension and feature lists:
 * a MoltenVK-like loader and device, a lavapipe-like one, and devices vktrain refuses;
 * then the same decision on the real device against what its context uses, and marks on
 * a context without events (the fallback a portability-subset device may need). */
#include <string.h>

#include "gpu/gpu.h"
#include "harness.h"

static const char *const k_subset[] = {"VK_KHR_portability_subset"};

static void test_instance_plan(void)
{
    gpu_instance_plan p;
    const char *const moltenvk[] = {"VK_KHR_surface", "VK_EXT_metal_surface",
                                    "VK_KHR_portability_enumeration",
                                    "VK_KHR_get_physical_device_properties2"};
    gpu_plan_instance(moltenvk, 4, 0, &p);
    TH_CHECK(p.portability_enumeration && p.extension_count == 1 &&
                 strcmp(p.extensions[0], "VK_KHR_portability_enumeration") == 0,
             "a loader listing portability enumeration gets it enabled (%u extensions)",
             p.extension_count);
    TH_CHECK(p.flags & VK_INSTANCE_CREATE_ENUMERATE_PORTABILITY_BIT_KHR,
             "and the ENUMERATE_PORTABILITY instance flag");

    gpu_plan_instance(moltenvk, 4, 1, &p);
    TH_CHECK(p.extension_count == 2 &&
                 strcmp(p.extensions[0], VK_EXT_DEBUG_UTILS_EXTENSION_NAME) == 0 &&
                 strcmp(p.extensions[1], "VK_KHR_portability_enumeration") == 0,
             "validation adds debug utils beside portability enumeration");
    gpu_plan_instance(moltenvk, 4, 2, &p);
    TH_CHECK(p.extension_count == 3 &&
                 strcmp(p.extensions[0], VK_EXT_DEBUG_UTILS_EXTENSION_NAME) == 0 &&
                 strcmp(p.extensions[1], VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME) == 0 &&
                 strcmp(p.extensions[2], "VK_KHR_portability_enumeration") == 0,
             "synchronization validation adds validation features too");

    const char *const linux_loader[] = {"VK_KHR_surface", "VK_KHR_xlib_surface"};
    gpu_plan_instance(linux_loader, 2, 0, &p);
    TH_CHECK(p.extension_count == 0 && p.flags == 0 && !p.portability_enumeration,
             "a loader without it: nothing enabled, no flag (an unknown flag is invalid)");
    gpu_plan_instance(NULL, 0, 0, &p);
    TH_CHECK(p.extension_count == 0 && p.flags == 0, "an empty list: nothing enabled");
}

/* A conformant device with everything the kernels use, like lavapipe. */
static gpu_device_caps full_caps(void)
{
    gpu_device_caps c = {.name = "fake", .api_version = VK_API_VERSION_1_2,
                         .compute_queue = 1, .subgroup_size = 8,
                         .subgroup_stages = VK_SHADER_STAGE_COMPUTE_BIT,
                         .subgroup_operations = VK_SUBGROUP_FEATURE_BASIC_BIT |
                                                VK_SUBGROUP_FEATURE_SHUFFLE_BIT,
                         .storage_texel_r32 = 1, .storage_texel_rgba32 = 1,
                         .uniform_texel_r32 = 1, .uniform_texel_rgba32 = 1};
    return c;
}

static void test_device_plan(void)
{
    char msg[VKT_ERRMSG_SIZE];
    gpu_device_plan p;
    gpu_device_caps c = full_caps();
    TH_OK(NULL, gpu_plan_device(&c, &p, msg));
    TH_CHECK(p.extension_count == 0 && !p.portability_subset,
             "no portability subset listed: none enabled");
    TH_CHECK(p.events && p.storage_texel && p.subgroup_shuffle,
             "a full device runs every path (events %d, storage texel %d, shuffle %d)",
             p.events, p.storage_texel, p.subgroup_shuffle);

    /* MoltenVK on an Apple GPU of Metal's read-write tier 1: the subset listed, no
     * events, R32F but not RGBA32F read-write texel buffers, 32-lane subgroups */
    c = full_caps();
    c.name = "Apple M1 (fake)";
    c.extensions = k_subset;
    c.extension_count = 1;
    c.subgroup_size = 32;
    c.storage_texel_rgba32 = 0;
    c.portability_events = 0;
    TH_OK(NULL, gpu_plan_device(&c, &p, msg));
    TH_CHECK(p.portability_subset && p.extension_count == 1 &&
                 strcmp(p.extensions[0], "VK_KHR_portability_subset") == 0,
             "a listed portability subset is enabled, as the spec requires");
    TH_CHECK(!p.events, "the subset without `events`: marks fall back to the fence");
    TH_CHECK(!p.storage_texel, "RGBA32F missing: no storage texel path (uniform texels)");
    TH_CHECK(p.subgroup_shuffle, "shuffles still used");
    c.portability_events = 1;
    TH_OK(NULL, gpu_plan_device(&c, &p, msg));
    TH_CHECK(p.events, "the subset with `events`: events used");

    c = full_caps();
    c.subgroup_stages = VK_SHADER_STAGE_FRAGMENT_BIT;
    TH_OK(NULL, gpu_plan_device(&c, &p, msg));
    TH_CHECK(!p.subgroup_shuffle, "subgroups outside compute: no shuffle kernels");
    c = full_caps();
    c.subgroup_operations = VK_SUBGROUP_FEATURE_BASIC_BIT;
    TH_OK(NULL, gpu_plan_device(&c, &p, msg));
    TH_CHECK(!p.subgroup_shuffle, "basic subgroups without shuffle: no shuffle kernels");

    /* timeline semaphores (replicas averaging on their shared device): enabled where a
     * Vulkan 1.2 device offers the feature; else the host averages (not refused) */
    c = full_caps();
    TH_OK(NULL, gpu_plan_device(&c, &p, msg));
    TH_CHECK(!p.timeline, "no timelineSemaphore feature: none enabled");
    c.timeline = 1;
    TH_OK(NULL, gpu_plan_device(&c, &p, msg));
    TH_CHECK(p.timeline, "timelineSemaphore on a 1.2 device: enabled");
    c.api_version = VK_API_VERSION_1_1;
    TH_OK(NULL, gpu_plan_device(&c, &p, msg));
    TH_CHECK(!p.timeline, "a Vulkan 1.1 device: no timelines (core in 1.2), still planned");
    /* VK_EXT_external_memory_host: enabled where offered (its alignment carried) */
    c = full_caps();
    TH_OK(NULL, gpu_plan_device(&c, &p, msg));
    TH_CHECK(!p.host_import && p.extension_count == 0, "no host import offered: none enabled");
    c.host_import = 4096;
    TH_OK(NULL, gpu_plan_device(&c, &p, msg));
    TH_CHECK(p.host_import == 4096 && p.extension_count == 1 &&
                 strcmp(p.extensions[0], "VK_EXT_external_memory_host") == 0,
             "host import offered (alignment 4096): the extension enabled");

    /* refused, each with a message naming the device and what it lacks */
    c = full_caps();
    c.name = "old gpu";
    c.api_version = VK_API_VERSION_1_0;
    TH_STATUS(NULL, gpu_plan_device(&c, &p, msg), VKT_ERROR_NO_DEVICE);
    TH_CHECK(strstr(msg, "old gpu") && strstr(msg, "1.0") && strstr(msg, "needs 1.1"),
             "Vulkan 1.0 refused: %s", msg);
    c = full_caps();
    c.compute_queue = 0;
    TH_STATUS(NULL, gpu_plan_device(&c, &p, msg), VKT_ERROR_NO_DEVICE);
    TH_CHECK(strstr(msg, "no compute queue") != NULL, "no compute queue refused: %s", msg);
    c = full_caps();
    c.uniform_texel_rgba32 = 0;
    TH_STATUS(NULL, gpu_plan_device(&c, &p, msg), VKT_ERROR_NO_DEVICE);
    TH_CHECK(strstr(msg, "R32G32B32A32_SFLOAT") != NULL, "no RGBA32F uniform texels: %s", msg);
}

/* The real device: its queried lists give the plan its context runs with. */
static void test_real_device(void)
{
    vkt_context *ctx = th_context(VKT_KERNELS_AUTO);
    char msg[VKT_ERRMSG_SIZE];
    gpu_device_caps c;
    gpu_device_plan p;
    TH_OK(NULL, gpu_query_device_caps(ctx->phys, &c, msg));
    TH_CHECK(strcmp(c.name, ctx->info.name) == 0, "caps of '%s'", c.name);
    TH_CHECK(c.subgroup_size == ctx->info.subgroup_size, "subgroup size %u", c.subgroup_size);
    TH_OK(NULL, gpu_plan_device(&c, &p, msg));
    TH_CHECK(p.storage_texel == ctx->storage_texel && p.subgroup_shuffle ==
                 ctx->subgroup_shuffle && p.events == ctx->events && p.timeline == ctx->timeline &&
                 p.host_import == ctx->host_import,
             "the context uses the plan (texel %d, shuffle %d, events %d, timeline %d)",
             p.storage_texel, p.subgroup_shuffle, p.events, p.timeline);
    printf("# %s: portability subset %d, events %d, storage texel %d, shuffle %d, timeline %d\n",
           c.name, p.portability_subset, p.events, p.storage_texel, p.subgroup_shuffle,
           p.timeline);
}

/* Marks on a context that may not use events: recorded, submitted twice (the reset
 * must not touch events that were never made), passed once the fence is signalled. */
static void test_marks_without_events(void)
{
    for (int events = 1; events >= 0; events--) {
        vkt_context_options o = {.kernels = VKT_KERNELS_AUTO, .no_pipeline_cache_file = 1};
        vkt_context *ctx = NULL;
        TH_OK(NULL, vkt_context_create(th_instance, &o, &ctx));
        if (!ctx)
            return;
        ctx->events = events;
        vkt_buffer *b = NULL;
        TH_OK(ctx, vkt_buffer_create(ctx, 4096 * 4, VKT_MEMORY_DEVICE, &b));
        vkt_stream *s = NULL;
        TH_OK(ctx, vkt_stream_create(ctx, NULL, &s));
        if (!s || !b)
            return;
        vkt_view v = {b, 0};
        uint32_t m0 = 99, m1 = 99;
        TH_OK(ctx, vkt_fill(s, v, 4096, 1.0f));
        TH_OK(ctx, gpu_stream_mark(s, &m0));
        TH_OK(ctx, vkt_fill(s, v, 4096, 2.0f));
        TH_OK(ctx, gpu_stream_mark(s, &m1));
        TH_CHECK(m0 == 0 && m1 == 1, "marks numbered 0, 1 (got %u, %u)", m0, m1);
        for (int run = 0; run < 2; run++) { /* the second submission resets the marks */
            TH_OK(ctx, vkt_stream_submit(s));
            TH_OK(ctx, vkt_stream_wait(s));
            TH_CHECK(gpu_stream_mark_passed(s, 0) == 1 && gpu_stream_mark_passed(s, 1) == 1,
                     "events %d, run %d: both marks passed after the wait", events, run);
        }
        TH_CHECK(events ? s->mark_cap >= 2 : s->mark_cap == 0,
                 "events %d: %u events created", events, s->mark_cap);
        float got = 0;
        TH_OK(ctx, vkt_buffer_read(b, 4 * 4095, &got, 4));
        TH_CHECK(got == 2.0f, "the work around the marks ran: %g", (double)got);
        vkt_context_destroy(ctx);
    }
}

int main(void)
{
    th_init("test_portability");
    test_instance_plan();
    test_device_plan();
    test_real_device();
    test_marks_without_events();
    return th_finish();
}
