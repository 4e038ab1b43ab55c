/* Contexts: a logical device and a compute queue each. The same physical device may back
 * several contexts (one per replica), each with its own VkDevice, or sharing one
 * (gpu_context_create_shared: gpu_device, gpu.h). */
#include "gpu.h"

#include <stdlib.h>
#include <string.h>

/* A compute-only family where the device has one (it runs beside graphics work),
 * else the first family with compute. */
int gpu_pick_queue_family(VkPhysicalDevice phys, uint32_t *out, uint32_t *count)
{
    uint32_t n = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(phys, &n, NULL);
    VkQueueFamilyProperties *q = calloc(n ? n : 1, sizeof *q);
    if (!q)
        return 0;
    vkGetPhysicalDeviceQueueFamilyProperties(phys, &n, q);
    int found = 0;
    for (uint32_t i = 0; i < n && !found; i++)
        if ((q[i].queueFlags & VK_QUEUE_COMPUTE_BIT) && !(q[i].queueFlags & VK_QUEUE_GRAPHICS_BIT))
            *out = i, *count = q[i].queueCount, found = 1;
    for (uint32_t i = 0; i < n && !found; i++)
        if (q[i].queueFlags & VK_QUEUE_COMPUTE_BIT)
            *out = i, *count = q[i].queueCount, found = 1;
    free(q);
    return found;
}

/* "512M", "1.5G", "65536": bytes, with an optional binary suffix K, M, G or T (an "iB" or
 * "B" after it is accepted). Returns 0 for anything else, or for a size < 1 byte. */
int gpu_parse_bytes(const char *s, uint64_t *out)
{
    char *end = NULL;
    double v = s ? strtod(s, &end) : 0;
    if (!s || end == s || !(v >= 1))
        return 0;
    static const char units[] = "KMGT";
    const char *u = *end ? strchr(units, *end >= 'a' ? *end - 32 : *end) : NULL;
    if (*end && !u)
        return 0;
    if (u) {
        for (const char *k = units; k <= u; k++)
            v *= 1024.0;
        end++;
        if (strcmp(end, "iB") == 0 || strcmp(end, "B") == 0)
            end += strlen(end);
    }
    if (*end || v > 1.8e19)
        return 0;
    *out = (uint64_t)v;
    return 1;
}

/* The asked profile, else $VKT_MEMORY_PROFILE (unset or empty: auto). */
static vkt_status resolve_memory_profile(vkt_memory_profile asked, vkt_memory_profile *out)
{
    const char *env = plat_getenv("VKT_MEMORY_PROFILE");
    *out = asked;
    if (asked != VKT_MEMORY_PROFILE_AUTO) {
        if (!gpu_memory_profile_row_of(asked))
            return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT,
                            "vkt_context_options.memory: unknown memory profile %d", (int)asked);
        return VKT_OK;
    }
    if (env && *env && !gpu_memory_profile_parse(env, out))
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT,
                        "VKT_MEMORY_PROFILE='%s': unknown memory profile (accepted: auto, "
                        "staging, unmapped, rebar)", env);
    return VKT_OK;
}

/* The asked limit, else $VKT_DEVICE_MEMORY_LIMIT (unset or empty: none). */
static vkt_status resolve_memory_limit(uint64_t asked, uint64_t *out)
{
    const char *env = plat_getenv("VKT_DEVICE_MEMORY_LIMIT");
    *out = asked;
    if (asked || !env || !*env)
        return VKT_OK;
    if (!gpu_parse_bytes(env, out))
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT,
                        "VKT_DEVICE_MEMORY_LIMIT='%s': not a size (bytes, or a number with K, "
                        "M, G or T: '512M', '1.5G')", env);
    return VKT_OK;
}

/* The plan's extensions and features enabled: 16-bit storage, float16, the memory model,
 * cooperative matrices and bfloat16 where the device has them (the 16-bit GEMMs); with
 * VK_KHR_portability_subset (MoltenVK) its features chained with only what vktrain uses
 * (events, for marks) requested. */
static vkt_status create_device(vkt_context *ctx, const gpu_device_plan *plan)
{
    uint32_t queues = 0;
    if (!gpu_pick_queue_family(ctx->phys, &ctx->queue_family, &queues))
        return err_fail(ctx->errmsg, VKT_ERROR_NO_DEVICE, "device '%s' has no compute queue",
                        ctx->info.name);
    queues = queues < 1 ? 1 : queues > GPU_MAX_QUEUES ? GPU_MAX_QUEUES : queues;
    float prio[GPU_MAX_QUEUES];
    for (uint32_t i = 0; i < GPU_MAX_QUEUES; i++)
        prio[i] = 1.0f;
    VkDeviceQueueCreateInfo qi = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
                                  .queueFamilyIndex = ctx->queue_family,
                                  .queueCount = queues,
                                  .pQueuePriorities = prio};
    gpu_portability_subset_features subset = {.sType = GPU_PORTABILITY_SUBSET_FEATURES_STYPE,
                                               .events = plan->events ? VK_TRUE : VK_FALSE};
    VkPhysicalDevice16BitStorageFeatures s16 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES,
        .storageBuffer16BitAccess = VK_TRUE};
    VkPhysicalDeviceShaderFloat16Int8Features f16 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES,
        .shaderFloat16 = VK_TRUE};
    VkPhysicalDeviceVulkanMemoryModelFeatures mm = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES,
        .vulkanMemoryModel = VK_TRUE};
    gpu_cooperative_matrix_features cm = {.sType = GPU_COOPERATIVE_MATRIX_FEATURES_STYPE,
                                          .cooperativeMatrix = VK_TRUE};
    VkPhysicalDeviceTimelineSemaphoreFeatures tl = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_TIMELINE_SEMAPHORE_FEATURES,
        .timelineSemaphore = VK_TRUE};
    gpu_bfloat16_features bf = {.sType = GPU_SHADER_BFLOAT16_FEATURES_STYPE,
                                .shaderBFloat16Type = VK_TRUE,
                                .shaderBFloat16CooperativeMatrix = VK_TRUE};
    void *chain = NULL;
#define CHAIN(on, s) if (on) (s).pNext = chain, chain = &(s)
    CHAIN(plan->portability_subset, subset);
    CHAIN(plan->storage16, s16);
    CHAIN(plan->float16, f16);
    CHAIN(plan->memory_model, mm);
    CHAIN(plan->cooperative_matrix, cm);
    CHAIN(plan->bfloat16, bf);
    CHAIN(plan->timeline, tl);
#undef CHAIN
    VkDeviceCreateInfo di = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
                             .pNext = chain,
                             .queueCreateInfoCount = 1,
                             .pQueueCreateInfos = &qi,
                             .enabledExtensionCount = plan->extension_count,
                             .ppEnabledExtensionNames = plan->extensions};
    gpu_device *d = calloc(1, sizeof *d);
    if (!d)
        return err_fail(ctx->errmsg, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    ctx->dev = d;
    d->refs = 1;
    d->queue_count = queues;
    GPU_CHECK(ctx, vkCreateDevice(ctx->phys, &di, NULL, &d->device));
    for (uint32_t i = 0; i < queues; i++) {
        vkGetDeviceQueue(d->device, ctx->queue_family, i, &d->queues[i]);
        if (!(d->locks[i] = plat_monitor_create()))
            return err_fail(ctx->errmsg, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    }
    return VKT_OK;
}

/* The context's queue on its device (the next one, round robin), and its command pool. */
static vkt_status take_queue(vkt_context *ctx)
{
    gpu_device *d = ctx->dev;
    uint32_t q = d->next_queue++ % d->queue_count;
    ctx->device = d->device;
    ctx->queue = d->queues[q];
    ctx->queue_lock = d->locks[q];
    VkCommandPoolCreateInfo pi = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                  .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
                                  .queueFamilyIndex = ctx->queue_family};
    GPU_CHECK(ctx, vkCreateCommandPool(ctx->device, &pi, NULL, &ctx->cmd_pool));
    return VKT_OK;
}

/* A context holds its device: the last one destroys it. */
static void release_device(vkt_context *ctx)
{
    gpu_device *d = ctx->dev;
    if (!d || --d->refs > 0)
        return;
    if (d->device)
        vkDestroyDevice(d->device, NULL);
    for (uint32_t i = 0; i < GPU_MAX_QUEUES; i++)
        plat_monitor_destroy(d->locks[i]);
    free(d);
}

vkt_status vkt_context_create(vkt_instance *inst, const vkt_context_options *options,
                              vkt_context **out)
{
    return gpu_context_create_shared(inst, options, NULL, out);
}

int gpu_context_same_device(const vkt_context *a, const vkt_context *b)
{
    return a && b && a->dev == b->dev;
}

uint32_t gpu_context_queue_count(const vkt_context *ctx) { return ctx->dev->queue_count; }

vkt_status gpu_context_create_shared(vkt_instance *inst, const vkt_context_options *options,
                                     vkt_context *share_with, vkt_context **out)
{
    if (!out)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "vkt_context_create: out is NULL");
    *out = NULL;
    if (!inst)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "vkt_context_create: instance is NULL");
    vkt_context_options o = {0};
    if (options)
        o = *options;
    if (o.device_index >= inst->device_count)
        return err_fail(inst->errmsg, VKT_ERROR_NO_DEVICE,
                        "device index %u out of range: %u device(s) present", o.device_index,
                        inst->device_count);
    if (share_with && share_with->phys != inst->devices[o.device_index])
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "gpu_context_create_shared: device "
                        "%u is not the physical device of the context to share", o.device_index);
    uint64_t limit = 0;
    vkt_memory_profile profile = VKT_MEMORY_PROFILE_AUTO;
    vkt_status vs = resolve_memory_limit(o.memory_limit, &limit);
    if (vs == VKT_OK)
        vs = resolve_memory_profile(o.memory, &profile);
    if (vs != VKT_OK)
        return vs;
    vkt_context *ctx = calloc(1, sizeof *ctx);
    if (!ctx)
        return err_fail(NULL, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    ctx->inst = inst;
    ctx->phys = inst->devices[o.device_index];
    ctx->info = inst->infos[o.device_index];
    vkGetPhysicalDeviceProperties(ctx->phys, &ctx->props);
    vkGetPhysicalDeviceMemoryProperties(ctx->phys, &ctx->mem_props);
    ctx->memory_profile = profile;
    ctx->force_staging = o.force_staging || gpu_memory_profile_row_of(profile)->staging;
    ctx->mem.block_size = o.block_size ? o.block_size : gpu_default_block_size(ctx);
    ctx->mem.limit = limit;

    gpu_device_caps caps;
    gpu_device_plan plan;
    vkt_status st = gpu_memory_types_init(ctx, profile);
    if (st == VKT_OK)
        st = gpu_query_device_caps(ctx->phys, &caps, ctx->errmsg);
    /* The kernel profile and each family's variant, decided once here. */
    if (st == VKT_OK)
        st = gpu_kernel_setup(&caps, o.kernels, o.kernel_variants, &ctx->profile, ctx->kv,
                              ctx->errmsg);
    ctx->variant = ctx->profile.style;
    if (st == VKT_OK)
        st = gpu_plan_device(&caps, &plan, ctx->errmsg);
    if (st == VKT_OK) {
        ctx->storage_texel = plan.storage_texel;
        ctx->subgroup_shuffle = plan.subgroup_shuffle;
        ctx->events = plan.events;
        /* the instance's API version (1.1 with an older loader) may leave them unloaded */
        ctx->timeline = plan.timeline && vkSignalSemaphore && vkGetSemaphoreCounterValue;
        ctx->host_import = vkGetMemoryHostPointerPropertiesEXT ? plan.host_import : 0;
        if (share_with) { /* the same physical device and plan: its VkDevice */
            ctx->dev = share_with->dev;
            ctx->dev->refs++;
        } else {
            st = create_device(ctx, &plan);
        }
    }
    if (st == VKT_OK && ctx->dev)
        st = take_queue(ctx);
    if (st == VKT_OK)
        st = gpu_pipeline_cache_open(ctx, !o.no_pipeline_cache_file);
    if (st != VKT_OK) {
        char msg[VKT_ERRMSG_SIZE];
        memcpy(msg, ctx->errmsg, sizeof msg);
        vkt_context_destroy(ctx);
        return err_fail(NULL, st, "%s", msg);
    }
    *out = ctx;
    return VKT_OK;
}

void gpu_context_wait_idle(vkt_context *ctx)
{
    if (!ctx || !ctx->queue) /* its own work (others may share the device: not DeviceWaitIdle) */
        return;
    plat_monitor_lock(ctx->queue_lock);
    vkQueueWaitIdle(ctx->queue);
    plat_monitor_unlock(ctx->queue_lock);
}

void vkt_context_destroy(vkt_context *ctx)
{
    if (!ctx)
        return;
    gpu_context_wait_idle(ctx);
    while (ctx->streams)
        vkt_stream_destroy(ctx->streams);
    while (ctx->buffers)
        vkt_buffer_destroy(ctx->buffers);
    while (ctx->timelines)
        gpu_timeline_destroy(ctx->timelines);
    ctx->transfer = NULL;
    ctx->staging = NULL;
    if (ctx->device) {
        gpu_pipeline_cache_close(ctx); /* saves while the pipeline count is known */
        gpu_pipelines_destroy(ctx);
        gpu_memory_destroy(ctx);
        if (ctx->cmd_pool)
            vkDestroyCommandPool(ctx->device, ctx->cmd_pool, NULL);
    }
    release_device(ctx);
    free(ctx);
}

const char *vkt_context_errmsg(const vkt_context *ctx)
{
    return ctx ? ctx->errmsg : "vkt_context_errmsg: context is NULL";
}

vkt_status vkt_context_device_info(const vkt_context *ctx, vkt_device_info *out)
{
    if (!ctx || !out)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "vkt_context_device_info: NULL");
    *out = ctx->info;
    return VKT_OK;
}

vkt_kernel_variant vkt_context_kernel_variant(const vkt_context *ctx)
{
    return ctx ? ctx->variant : VKT_KERNELS_AUTO;
}
