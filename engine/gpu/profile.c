/* profile.c - the kernel profile of a device: what it offers (compute units from the
 * vendor extensions that report them, subgroups, shared memory, float16, cooperative
 * matrices, host-visible device-local memory) and the tuning constants the kernels take
 * from it, in one place instead of a cpu/gpu ternary in each kernel. */
#include "gpu.h"

#include <stdio.h>
#include <string.h>

/* VK_KHR_cooperative_matrix: Debian 12's headers (1.3.239) predate it; only its name is
 * needed here. */
#define KHR_COOPERATIVE_MATRIX_NAME "VK_KHR_cooperative_matrix"

static int has_ext(const VkExtensionProperties *ext, uint32_t n, const char *name)
{
    for (uint32_t i = 0; i < n; i++)
        if (strcmp(ext[i].extensionName, name) == 0)
            return 1;
    return 0;
}

/* Compute units as the vendor extensions report them: AMD's active CU count (or engines x
 * arrays x CUs per array), NVIDIA's SM count, Arm's shader core count. 0: none listed. */
static void query_compute_units(VkPhysicalDevice phys, const VkExtensionProperties *ext,
                                uint32_t n, gpu_device_caps *caps)
{
    VkPhysicalDeviceShaderCoreProperties2AMD amd2 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_CORE_PROPERTIES_2_AMD};
    VkPhysicalDeviceShaderCorePropertiesAMD amd = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_CORE_PROPERTIES_AMD};
    VkPhysicalDeviceShaderSMBuiltinsPropertiesNV nv = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_SM_BUILTINS_PROPERTIES_NV};
    VkPhysicalDeviceShaderCoreBuiltinsPropertiesARM arm = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_CORE_BUILTINS_PROPERTIES_ARM};
    VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
    void **tail = &p2.pNext;
    int has_amd2 = has_ext(ext, n, VK_AMD_SHADER_CORE_PROPERTIES_2_EXTENSION_NAME);
    int has_amd = has_ext(ext, n, VK_AMD_SHADER_CORE_PROPERTIES_EXTENSION_NAME);
    int has_nv = has_ext(ext, n, VK_NV_SHADER_SM_BUILTINS_EXTENSION_NAME);
    int has_arm = has_ext(ext, n, VK_ARM_SHADER_CORE_BUILTINS_EXTENSION_NAME);
    if (has_amd2)
        *tail = &amd2, tail = &amd2.pNext;
    if (has_amd)
        *tail = &amd, tail = &amd.pNext;
    if (has_nv)
        *tail = &nv, tail = &nv.pNext;
    if (has_arm)
        *tail = &arm, tail = &arm.pNext;
    if (!has_amd2 && !has_amd && !has_nv && !has_arm)
        return;
    vkGetPhysicalDeviceProperties2(phys, &p2);
    if (has_amd2 && amd2.activeComputeUnitCount) {
        caps->compute_units = amd2.activeComputeUnitCount;
        caps->compute_units_from = VK_AMD_SHADER_CORE_PROPERTIES_2_EXTENSION_NAME;
    } else if (has_amd && amd.shaderEngineCount) {
        caps->compute_units = amd.shaderEngineCount * amd.shaderArraysPerEngineCount *
                              amd.computeUnitsPerShaderArray;
        caps->compute_units_from = VK_AMD_SHADER_CORE_PROPERTIES_EXTENSION_NAME;
    } else if (has_nv && nv.shaderSMCount) {
        caps->compute_units = nv.shaderSMCount;
        caps->compute_units_from = VK_NV_SHADER_SM_BUILTINS_EXTENSION_NAME;
    } else if (has_arm && arm.shaderCoreCount) {
        caps->compute_units = arm.shaderCoreCount;
        caps->compute_units_from = VK_ARM_SHADER_CORE_BUILTINS_EXTENSION_NAME;
    }
}

/* float16 arithmetic and 16-bit storage buffers (core features in 1.2; the KHR
 * extensions before). */
static int query_float16(VkPhysicalDevice phys, uint32_t api, const VkExtensionProperties *ext,
                         uint32_t n)
{
    if (api < VK_API_VERSION_1_2 &&
        !has_ext(ext, n, VK_KHR_SHADER_FLOAT16_INT8_EXTENSION_NAME))
        return 0;
    VkPhysicalDeviceShaderFloat16Int8Features f16 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES};
    VkPhysicalDevice16BitStorageFeatures s16 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES, .pNext = &f16};
    VkPhysicalDeviceFeatures2 f2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2,
                                    .pNext = &s16};
    vkGetPhysicalDeviceFeatures2(phys, &f2);
    return f16.shaderFloat16 && s16.storageBuffer16BitAccess;
}

/* A memory type both device-local and host-visible on a heap at least half the size of
 * the largest device-local heap (a unified or resizable-BAR device, not a 256 MiB
 * window). */
static int query_host_visible_device_local(VkPhysicalDevice phys)
{
    VkPhysicalDeviceMemoryProperties mem;
    vkGetPhysicalDeviceMemoryProperties(phys, &mem);
    VkDeviceSize largest = 0;
    for (uint32_t h = 0; h < mem.memoryHeapCount; h++)
        if ((mem.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) &&
            mem.memoryHeaps[h].size > largest)
            largest = mem.memoryHeaps[h].size;
    const VkMemoryPropertyFlags both =
        VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT | VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT;
    for (uint32_t t = 0; t < mem.memoryTypeCount; t++)
        if ((mem.memoryTypes[t].propertyFlags & both) == both &&
            mem.memoryHeaps[mem.memoryTypes[t].heapIndex].size * 2 >= largest)
            return 1;
    return 0;
}

static vkt_device_type type_of(VkPhysicalDeviceType t)
{
    switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return VKT_DEVICE_TYPE_INTEGRATED_GPU;
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return VKT_DEVICE_TYPE_DISCRETE_GPU;
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return VKT_DEVICE_TYPE_VIRTUAL_GPU;
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return VKT_DEVICE_TYPE_CPU;
    default: return VKT_DEVICE_TYPE_OTHER;
    }
}

void gpu_query_profile_caps(VkPhysicalDevice phys, const VkExtensionProperties *ext,
                            uint32_t n, gpu_device_caps *caps)
{
    VkPhysicalDeviceProperties base;
    vkGetPhysicalDeviceProperties(phys, &base);
    caps->type = type_of(base.deviceType);
    caps->shared_memory = base.limits.maxComputeSharedMemorySize;
    caps->max_invocations = base.limits.maxComputeWorkGroupInvocations;
    caps->llvmpipe = strstr(base.deviceName, "llvmpipe") != NULL;
    caps->cooperative_matrix = has_ext(ext, n, KHR_COOPERATIVE_MATRIX_NAME) ||
                               has_ext(ext, n, VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME);
    caps->float16 = query_float16(phys, base.apiVersion, ext, n);
    caps->host_visible_device_local = query_host_visible_device_local(phys);
    query_compute_units(phys, ext, n, caps);
}

const char *gpu_cap_name(uint32_t cap)
{
    switch (cap) {
    case GPU_CAP_SUBGROUP_BASIC: return "subgroup operations";
    case GPU_CAP_SUBGROUP_SHUFFLE: return "subgroup shuffles";
    case GPU_CAP_SUBGROUP_ARITHMETIC: return "subgroup arithmetic";
    case GPU_CAP_STORAGE_TEXEL: return "R32F/RGBA32F storage texel buffers";
    case GPU_CAP_FLOAT16: return "float16";
    case GPU_CAP_COOPERATIVE_MATRIX: return "cooperative matrices";
    case GPU_CAP_HOST_VISIBLE_DEVICE_LOCAL: return "host-visible device-local memory";
    default: return "?";
    }
}

static uint32_t caps_bits(const gpu_device_caps *c)
{
    uint32_t b = 0;
    int compute = (c->subgroup_stages & VK_SHADER_STAGE_COMPUTE_BIT) != 0;
    if (compute && (c->subgroup_operations & VK_SUBGROUP_FEATURE_BASIC_BIT)) {
        b |= GPU_CAP_SUBGROUP_BASIC;
        if (c->subgroup_operations & VK_SUBGROUP_FEATURE_SHUFFLE_BIT)
            b |= GPU_CAP_SUBGROUP_SHUFFLE;
        if (c->subgroup_operations & VK_SUBGROUP_FEATURE_ARITHMETIC_BIT)
            b |= GPU_CAP_SUBGROUP_ARITHMETIC;
    }
    if (c->storage_texel_r32 && c->storage_texel_rgba32)
        b |= GPU_CAP_STORAGE_TEXEL;
    if (c->float16)
        b |= GPU_CAP_FLOAT16;
    if (c->cooperative_matrix)
        b |= GPU_CAP_COOPERATIVE_MATRIX;
    if (c->host_visible_device_local)
        b |= GPU_CAP_HOST_VISIBLE_DEVICE_LOCAL;
    return b;
}

/* The tuning constants by style. CPU style (lavapipe: a workgroup is SIMD loops on one
 * core, each workgroup costs about 2 us besides its work): small workgroups, few of them,
 * several work items per lane. GPU style: wide workgroups, grids that fill the device,
 * one item per lane. The measurements behind each are beside their use. */
static void tune(gpu_profile *p)
{
    int gpu = p->style == VKT_KERNELS_GPU;
    p->wg = gpu ? 256 : 64;
    while (p->max_invocations && p->wg > p->max_invocations)
        p->wg /= 2;
    p->max_groups_1d = gpu ? GPU_MAX_GROUPS : 1024;
    p->grid_cap = gpu ? GPU_MAX_GROUPS : 32;
    p->row_walk = 16384;
    /* about 1024 threads resident per compute unit; at least 128K (the figure the row
     * kernels were tuned with) */
    p->busy_threads = (uint64_t)p->compute_units * 1024;
    if (p->busy_threads < 128 * 1024)
        p->busy_threads = 128 * 1024;
    p->conv_run = gpu ? 1 : 8;
    p->conv_move_run = gpu ? 4 : 16;
    p->pool_run = gpu ? 1 : 8;
    p->embedding_accumulators = gpu ? 1 : 16;
    p->optim_norm_groups = gpu ? 64 : 16;
    p->optim_update_groups = gpu ? p->max_groups_1d : 64;
}

void gpu_profile_make(const gpu_device_caps *caps, vkt_kernel_variant style, gpu_profile *out)
{
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%s", caps->name ? caps->name : "");
    out->type = caps->type;
    out->compute_units = caps->compute_units;
    out->compute_units_from = caps->compute_units_from;
    if (!out->compute_units) {
        out->compute_units_from = "default for the device type";
        switch (caps->type) {
        case VKT_DEVICE_TYPE_DISCRETE_GPU: out->compute_units = 32; break;
        case VKT_DEVICE_TYPE_CPU: out->compute_units = (uint32_t)plat_cpu_count(); break;
        default: out->compute_units = 8; break;
        }
    }
    out->subgroup_size = caps->subgroup_size ? caps->subgroup_size : 1;
    out->shared_memory = caps->shared_memory ? caps->shared_memory : 16384;
    out->max_invocations = caps->max_invocations ? caps->max_invocations : 128;
    out->caps = caps_bits(caps);
    /* Mesa's llvmpipe ends a shader's loops after 65535 iterations in all (gallivm's
     * loop limiter); a margin for the few iterations outside the main loops. Elsewhere no
     * limit (kept small enough for products with it). */
    out->loop_budget = caps->llvmpipe ? 60000 : 1ull << 40;
    if (style == VKT_KERNELS_AUTO)
        style = caps->type == VKT_DEVICE_TYPE_CPU ? VKT_KERNELS_CPU : VKT_KERNELS_GPU;
    out->style = style;
    tune(out);
}

void gpu_profile_stated(vkt_device_type type, uint32_t compute_units, uint32_t shared_memory,
                        uint32_t subgroup_size, gpu_profile *out)
{
    gpu_device_caps c;
    memset(&c, 0, sizeof c);
    c.name = "stated device";
    c.api_version = VK_API_VERSION_1_3;
    c.compute_queue = 1;
    c.subgroup_size = subgroup_size;
    c.subgroup_stages = VK_SHADER_STAGE_COMPUTE_BIT;
    c.subgroup_operations = VK_SUBGROUP_FEATURE_BASIC_BIT | VK_SUBGROUP_FEATURE_SHUFFLE_BIT |
                            VK_SUBGROUP_FEATURE_ARITHMETIC_BIT;
    c.storage_texel_r32 = c.storage_texel_rgba32 = 1;
    c.uniform_texel_r32 = c.uniform_texel_rgba32 = 1;
    c.type = type;
    c.shared_memory = shared_memory;
    c.max_invocations = 1024;
    c.compute_units = compute_units;
    c.compute_units_from = "stated";
    gpu_profile_make(&c, VKT_KERNELS_AUTO, out);
}
