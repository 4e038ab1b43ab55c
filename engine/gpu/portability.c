/* Which instance and device extensions vktrain enables and which kernel paths a device
 * can run, decided by pure functions over lists (gpu_plan_instance, gpu_plan_device:
 * tested with faked lists in tests/test_portability.c), and the Vulkan queries that
 * fill those lists for a real device (gpu_query_device_caps).
 *
 * What the kernels rely on (the SPIR-V capabilities of shaders/, docs/portability.md):
 * Shader for all; ImageBuffer (storage texel buffers, R32F and RGBA32F) in gemm_cpu,
 * im2col, col2im, conv_move, conv_bias_grad, pool, pool_backward; SampledBuffer in
 * gemm_cpu_sampler; GroupNonUniform + GroupNonUniformShuffle in gemm_cpu,
 * gemm_cpu_sampler and attention. No Float64, Int64, Int16 or atomics: a device without
 * shaderFloat64 (Apple GPUs under MoltenVK) runs everything. The 16-bit GEMMs alone need
 * more (their variants say what: engine/gpu/variants.c): StorageBuffer16BitAccess
 * (gemm_half), Float16 too (gemm_half_f16), and CooperativeMatrixKHR with
 * VulkanMemoryModel (gemm_coopmat_f16; BFloat16TypeKHR and BFloat16CooperativeMatrixKHR
 * in gemm_coopmat_bf16); the plan enables each feature the device has. */
#include "gpu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int listed(const char *const *names, uint32_t n, const char *name)
{
    for (uint32_t i = 0; i < n; i++)
        if (names[i] && strcmp(names[i], name) == 0)
            return 1;
    return 0;
}

void gpu_plan_instance(const char *const *available, uint32_t n, int validation,
                       gpu_instance_plan *out)
{
    memset(out, 0, sizeof *out);
    /* the validation layer brings debug utils with it; the caller checked the layer */
    if (validation)
        out->extensions[out->extension_count++] = VK_EXT_DEBUG_UTILS_EXTENSION_NAME;
    if (validation >= 2)
        out->extensions[out->extension_count++] = VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME;
    /* Without this extension and flag, a loader since 1.3.216 hides portability
     * drivers (MoltenVK) from vkEnumeratePhysicalDevices. */
    if (listed(available, n, VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME)) {
        out->extensions[out->extension_count++] = VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME;
        out->flags |= VK_INSTANCE_CREATE_ENUMERATE_PORTABILITY_BIT_KHR;
        out->portability_enumeration = 1;
    }
}

vkt_status gpu_plan_device(const gpu_device_caps *caps, gpu_device_plan *out, char *errmsg)
{
    memset(out, 0, sizeof *out);
    const char *name = caps->name ? caps->name : "(unnamed)";
    if (caps->api_version < VK_API_VERSION_1_1)
        return err_fail(errmsg, VKT_ERROR_NO_DEVICE,
                        "device '%s' supports Vulkan %u.%u only; vktrain needs 1.1", name,
                        VK_API_VERSION_MAJOR(caps->api_version),
                        VK_API_VERSION_MINOR(caps->api_version));
    if (!caps->compute_queue)
        return err_fail(errmsg, VKT_ERROR_NO_DEVICE, "device '%s' has no compute queue", name);
    /* Mandatory in Vulkan; the CPU variant's GEMM reads through them when storage texel
     * buffers are missing, so there is no path without them. */
    if (!caps->uniform_texel_r32 || !caps->uniform_texel_rgba32)
        return err_fail(errmsg, VKT_ERROR_NO_DEVICE,
                        "device '%s' lacks uniform texel buffers of %s, which Vulkan makes "
                        "mandatory and vktrain's kernels read through", name,
                        !caps->uniform_texel_r32 ? "R32_SFLOAT" : "R32G32B32A32_SFLOAT");
    /* The spec requires enabling the subset when a device lists it (MoltenVK does). */
    if (listed(caps->extensions, caps->extension_count, GPU_PORTABILITY_SUBSET_NAME)) {
        out->extensions[out->extension_count++] = GPU_PORTABILITY_SUBSET_NAME;
        out->portability_subset = 1;
    }
    /* marks (mark.c) set events from the device; without them they wait for the fence */
    out->events = out->portability_subset ? caps->portability_events != 0 : 1;
    /* without both formats: gemm reads through uniform texel buffers; conv and pool
     * refuse with a message naming the missing formats */
    out->storage_texel = caps->storage_texel_r32 && caps->storage_texel_rgba32;
    /* without: gemm runs the shared-memory kernel; attention refuses with a message */
    out->subgroup_shuffle = (caps->subgroup_stages & VK_SHADER_STAGE_COMPUTE_BIT) &&
                            (caps->subgroup_operations & VK_SUBGROUP_FEATURE_BASIC_BIT) &&
                            (caps->subgroup_operations & VK_SUBGROUP_FEATURE_SHUFFLE_BIT);
    /* the 16-bit GEMMs' features, each where offered (the variants pick by them); the
     * caps count cooperative matrices only with the memory model and bfloat16 only with
     * its cooperative matrices */
    out->storage16 = caps->storage16;
    out->float16 = caps->float16;
    out->cooperative_matrix = caps->cooperative_matrix;
    out->memory_model = caps->cooperative_matrix;
    /* replicas sharing a VkDevice average on it, ordered by timelines; without them (a
     * Vulkan 1.1 device) through the host as on separate devices */
    out->timeline = caps->timeline && caps->api_version >= VK_API_VERSION_1_2;
    /* one host allocation imported into several devices (the host reducer's "import"
     * stages); without it each stage is memory of its own device */
    out->host_import = caps->host_import;
    if (out->host_import)
        out->extensions[out->extension_count++] = VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME;
    out->bfloat16 = caps->bfloat16 && caps->cooperative_matrix;
    if (out->cooperative_matrix)
        out->extensions[out->extension_count++] = GPU_KHR_COOPERATIVE_MATRIX_NAME;
    if (out->bfloat16)
        out->extensions[out->extension_count++] = GPU_KHR_SHADER_BFLOAT16_NAME;
    return VKT_OK;
}

static int buffer_format_has(VkPhysicalDevice phys, VkFormat f, VkFormatFeatureFlags bit)
{
    VkFormatProperties fp;
    vkGetPhysicalDeviceFormatProperties(phys, f, &fp);
    return (fp.bufferFeatures & bit) != 0;
}

static int has_compute_queue(VkPhysicalDevice phys)
{
    uint32_t n = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(phys, &n, NULL);
    VkQueueFamilyProperties *q = calloc(n ? n : 1, sizeof *q);
    if (!q)
        return 0;
    vkGetPhysicalDeviceQueueFamilyProperties(phys, &n, q);
    int found = 0;
    for (uint32_t i = 0; i < n; i++)
        found |= (q[i].queueFlags & VK_QUEUE_COMPUTE_BIT) != 0;
    free(q);
    return found;
}

vkt_status gpu_query_device_caps(VkPhysicalDevice phys, gpu_device_caps *caps, char *errmsg)
{
    memset(caps, 0, sizeof *caps);
    VkPhysicalDeviceProperties base;
    vkGetPhysicalDeviceProperties(phys, &base);
    snprintf(caps->name_buf, sizeof caps->name_buf, "%s", base.deviceName);
    caps->name = caps->name_buf;
    caps->api_version = base.apiVersion;
    caps->compute_queue = has_compute_queue(phys);
    caps->storage_texel_r32 = buffer_format_has(phys, VK_FORMAT_R32_SFLOAT,
                                                VK_FORMAT_FEATURE_STORAGE_TEXEL_BUFFER_BIT);
    caps->storage_texel_rgba32 = buffer_format_has(phys, VK_FORMAT_R32G32B32A32_SFLOAT,
                                                   VK_FORMAT_FEATURE_STORAGE_TEXEL_BUFFER_BIT);
    caps->uniform_texel_r32 = buffer_format_has(phys, VK_FORMAT_R32_SFLOAT,
                                                VK_FORMAT_FEATURE_UNIFORM_TEXEL_BUFFER_BIT);
    caps->uniform_texel_rgba32 = buffer_format_has(phys, VK_FORMAT_R32G32B32A32_SFLOAT,
                                                   VK_FORMAT_FEATURE_UNIFORM_TEXEL_BUFFER_BIT);
    if (base.apiVersion < VK_API_VERSION_1_1)
        return VKT_OK; /* the plan refuses it; the 1.1 queries below would be invalid */

    VkPhysicalDeviceSubgroupProperties sub = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
    VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2,
                                      .pNext = &sub};
    vkGetPhysicalDeviceProperties2(phys, &p2);
    caps->subgroup_size = sub.subgroupSize;
    caps->subgroup_stages = sub.supportedStages;
    caps->subgroup_operations = sub.supportedOperations;

    uint32_t n = 0;
    VkResult r = vkEnumerateDeviceExtensionProperties(phys, NULL, &n, NULL);
    VkExtensionProperties *p = n ? calloc(n, sizeof *p) : NULL;
    if (r == VK_SUCCESS && n && !p)
        return err_fail(errmsg, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    if (r == VK_SUCCESS && n)
        r = vkEnumerateDeviceExtensionProperties(phys, NULL, &n, p);
    if (r != VK_SUCCESS && r != VK_INCOMPLETE) {
        free(p);
        return err_fail(errmsg, gpu_status_of(r), "vkEnumerateDeviceExtensionProperties "
                        "failed on '%s': %s", caps->name, gpu_result_name(r));
    }
    /* only the names the plan looks at are kept (the caps own no heap memory) */
    for (uint32_t i = 0; i < n; i++)
        if (strcmp(p[i].extensionName, GPU_PORTABILITY_SUBSET_NAME) == 0)
            caps->extensions_buf[caps->extension_count++] = GPU_PORTABILITY_SUBSET_NAME;
    caps->extensions = caps->extensions_buf;
    gpu_query_profile_caps(phys, p, n, caps);
    free(p);

    if (caps->extension_count) {
        gpu_portability_subset_features f = {.sType = GPU_PORTABILITY_SUBSET_FEATURES_STYPE};
        VkPhysicalDeviceFeatures2 f2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2,
                                        .pNext = &f};
        vkGetPhysicalDeviceFeatures2(phys, &f2);
        caps->portability_events = f.events != VK_FALSE;
    }
    return VKT_OK;
}
