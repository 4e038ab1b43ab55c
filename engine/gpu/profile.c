/* profile.c - the kernel profile of a device: what it offers (compute units from the
 * vendor extensions that report them, subgroups, shared memory, float16, cooperative
 * matrices, host-visible device-local memory) and the tuning constants the kernels take
 * from it, in one place instead of a cpu/gpu ternary in each kernel. */
#include "gpu.h"

#include <stdio.h>
#include <string.h>

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

/* The 16-bit and cooperative-matrix features: 16-bit storage buffers (core in 1.1),
 * float16 arithmetic, timeline semaphores and the Vulkan memory model (core in 1.2: older devices count as
 * lacking them, so no extension has to be enabled for them), VK_KHR_cooperative_matrix
 * and VK_KHR_shader_bfloat16 where listed. A cooperative-matrix shader declares the
 * VulkanMemoryModel capability (its scopes), so cooperative matrices count only with
 * the memory model. */
static void query_features(VkPhysicalDevice phys, uint32_t api, const VkExtensionProperties *ext,
                           uint32_t n, gpu_device_caps *caps)
{
    int has_cm = has_ext(ext, n, GPU_KHR_COOPERATIVE_MATRIX_NAME);
    int has_bf = has_ext(ext, n, GPU_KHR_SHADER_BFLOAT16_NAME);
    int v12 = api >= VK_API_VERSION_1_2;
    gpu_bfloat16_features bf = {.sType = GPU_SHADER_BFLOAT16_FEATURES_STYPE};
    gpu_cooperative_matrix_features cm = {.sType = GPU_COOPERATIVE_MATRIX_FEATURES_STYPE};
    VkPhysicalDeviceVulkanMemoryModelFeatures mm = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES};
    VkPhysicalDeviceShaderFloat16Int8Features f16 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES};
    VkPhysicalDevice16BitStorageFeatures s16 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES};
    VkPhysicalDeviceTimelineSemaphoreFeatures tl = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_TIMELINE_SEMAPHORE_FEATURES};
    VkPhysicalDeviceFeatures2 f2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2,
                                    .pNext = &s16};
    void **tail = &s16.pNext;
    if (v12) {
        *tail = &f16, tail = &f16.pNext;
        *tail = &mm, tail = &mm.pNext;
        *tail = &tl, tail = &tl.pNext;
    }
    if (has_cm)
        *tail = &cm, tail = &cm.pNext;
    if (has_bf)
        *tail = &bf, tail = &bf.pNext;
    vkGetPhysicalDeviceFeatures2(phys, &f2);
    caps->storage16 = s16.storageBuffer16BitAccess != VK_FALSE;
    caps->float16 = f16.shaderFloat16 != VK_FALSE;
    caps->timeline = tl.timelineSemaphore != VK_FALSE;
    caps->cooperative_matrix = has_cm && cm.cooperativeMatrix && mm.vulkanMemoryModel;
    caps->bfloat16 = has_bf && bf.shaderBFloat16Type && bf.shaderBFloat16CooperativeMatrix;
}

/* The cooperative-matrix shapes of subgroup scope (the loader resolves the query's
 * pointer; volk, generated from older headers, has none). */
static void query_mats(VkPhysicalDevice phys, gpu_device_caps *caps)
{
    gpu_pfn_cooperative_matrix_properties get = NULL;
    VkInstance inst = volkGetLoadedInstance();
    if (inst)
        get = (gpu_pfn_cooperative_matrix_properties)vkGetInstanceProcAddr(
            inst, "vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR");
    uint32_t n = 0;
    if (!get || get(phys, &n, NULL) != VK_SUCCESS || n == 0) {
        caps->cooperative_matrix = 0;
        return;
    }
    gpu_cooperative_matrix_properties props[64];
    if (n > 64)
        n = 64;
    for (uint32_t i = 0; i < n; i++)
        props[i] = (gpu_cooperative_matrix_properties){
            .sType = GPU_COOPERATIVE_MATRIX_PROPERTIES_STYPE};
    VkResult r = get(phys, &n, props);
    if (r != VK_SUCCESS && r != VK_INCOMPLETE)
        n = 0;
    for (uint32_t i = 0; i < n && caps->mat_count < GPU_MAX_MAT_SHAPES; i++)
        if (props[i].scope == GPU_SCOPE_SUBGROUP)
            caps->mats[caps->mat_count++] = (gpu_mat_shape){
                props[i].MSize, props[i].NSize, props[i].KSize, props[i].AType,
                props[i].BType, props[i].CType, props[i].ResultType};
    if (caps->mat_count == 0)
        caps->cooperative_matrix = 0;
}

/* A memory type both device-local and host-visible over the device's memory
 * (gpu_memory_type_spans_heap: a unified or resizable-BAR device, not a 256 MiB
 * window). */
static int query_host_visible_device_local(VkPhysicalDevice phys)
{
    VkPhysicalDeviceMemoryProperties mem;
    vkGetPhysicalDeviceMemoryProperties(phys, &mem);
    const VkMemoryPropertyFlags both =
        VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT | VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT;
    for (uint32_t t = 0; t < mem.memoryTypeCount; t++)
        if ((mem.memoryTypes[t].propertyFlags & both) == both &&
            gpu_memory_type_spans_heap(&mem, t))
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
    query_features(phys, base.apiVersion, ext, n, caps);
    if (caps->cooperative_matrix)
        query_mats(phys, caps);
    caps->host_visible_device_local = query_host_visible_device_local(phys);
    query_compute_units(phys, ext, n, caps);
    if (has_ext(ext, n, VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME)) {
        VkPhysicalDeviceExternalMemoryHostPropertiesEXT hp = {
            .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_EXTERNAL_MEMORY_HOST_PROPERTIES_EXT};
        VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2,
                                          .pNext = &hp};
        vkGetPhysicalDeviceProperties2(phys, &p2);
        caps->host_import = (uint32_t)hp.minImportedHostPointerAlignment;
    }
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
    case GPU_CAP_STORAGE16: return "16-bit storage";
    case GPU_CAP_BFLOAT16: return "bfloat16";
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
    if (c->storage16)
        b |= GPU_CAP_STORAGE16;
    if (c->float16)
        b |= GPU_CAP_FLOAT16;
    if (c->cooperative_matrix)
        b |= GPU_CAP_COOPERATIVE_MATRIX;
    if (c->bfloat16)
        b |= GPU_CAP_BFLOAT16;
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
    if (caps->cooperative_matrix) {
        out->mat_count = caps->mat_count;
        memcpy(out->mats, caps->mats, sizeof out->mats);
    }
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
    c.storage16 = c.float16 = 1;
    gpu_profile_make(&c, VKT_KERNELS_AUTO, out);
}

void gpu_profile_add_mat(gpu_profile *p, gpu_mat_shape shape)
{
    if (p->mat_count < GPU_MAX_MAT_SHAPES)
        p->mats[p->mat_count++] = shape;
    p->caps |= GPU_CAP_COOPERATIVE_MATRIX;
}

static int side_ok(uint32_t x) { return x == 8 || x == 16 || x == 32; }

const gpu_mat_shape *gpu_mat_for(const gpu_profile *p, gpu_mat_type type)
{
    if (type == GPU_MAT_NONE || !(p->caps & GPU_CAP_COOPERATIVE_MATRIX) ||
        (type == GPU_MAT_BF16 && !(p->caps & GPU_CAP_BFLOAT16)))
        return NULL;
    uint32_t in = type == GPU_MAT_F16 ? GPU_COMPONENT_F16 : GPU_COMPONENT_BF16;
    const gpu_mat_shape *best = NULL;
    for (uint32_t i = 0; i < p->mat_count; i++) {
        const gpu_mat_shape *s = &p->mats[i];
        if (s->a != in || s->b != in || s->c != GPU_COMPONENT_F32 || s->r != GPU_COMPONENT_F32 ||
            !side_ok(s->m) || !side_ok(s->n) || !side_ok(s->k) ||
            (s->m * s->n) % p->subgroup_size != 0)
            continue;
        if (!best || s->m * s->n * s->k > best->m * best->n * best->k)
            best = s;
    }
    return best;
}

const char *gpu_component_name(uint32_t component)
{
    static const char *const names[] = {"f16", "f32", "f64", "s8", "s16", "s32", "s64",
                                        "u8",  "u16", "u32", "u64"};
    if (component < sizeof names / sizeof names[0])
        return names[component];
    return component == GPU_COMPONENT_BF16 ? "bf16" : "other";
}
