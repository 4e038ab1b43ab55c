/* Describing physical devices, and choosing them from an index list ("0,0,1"). */
#include "gpu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *vkt_device_type_name(vkt_device_type t)
{
    switch (t) {
    case VKT_DEVICE_TYPE_INTEGRATED_GPU: return "integrated-gpu";
    case VKT_DEVICE_TYPE_DISCRETE_GPU: return "discrete-gpu";
    case VKT_DEVICE_TYPE_VIRTUAL_GPU: return "virtual-gpu";
    case VKT_DEVICE_TYPE_CPU: return "cpu";
    default: return "other";
    }
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

static void describe_queues(VkPhysicalDevice phys, vkt_device_info *info)
{
    uint32_t n = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(phys, &n, NULL);
    VkQueueFamilyProperties *q = calloc(n ? n : 1, sizeof *q);
    if (!q)
        return;
    vkGetPhysicalDeviceQueueFamilyProperties(phys, &n, q);
    for (uint32_t i = 0; i < n; i++) {
        if (!(q[i].queueFlags & VK_QUEUE_COMPUTE_BIT))
            continue;
        if (!(q[i].queueFlags & VK_QUEUE_GRAPHICS_BIT))
            info->compute_only_queue = 1;
        if (q[i].timestampValidBits > 0)
            info->timestamps = 1;
    }
    free(q);
    uint32_t family = 0;
    if (!gpu_pick_queue_family(phys, &family, &info->compute_queues))
        info->compute_queues = 0;
}

/* What a context on the device would enable (gpu_plan_device): timelines, host import. */
static void describe_plan(VkPhysicalDevice phys, vkt_device_info *info)
{
    gpu_device_caps caps;
    gpu_device_plan plan;
    char errmsg[VKT_ERRMSG_SIZE];
    if (gpu_query_device_caps(phys, &caps, errmsg) != VKT_OK ||
        gpu_plan_device(&caps, &plan, errmsg) != VKT_OK)
        return; /* a device no context can use: neither */
    info->timeline_semaphores = plan.timeline;
    info->host_import = plan.host_import != 0;
}

/* Each of the n devices' group and the group's size (infos[i].group, .group_size). */
static void describe_groups(VkInstance instance, const VkPhysicalDevice *devices, uint32_t n,
                            vkt_device_info *infos)
{
    uint32_t g = 0;
    if (vkEnumeratePhysicalDeviceGroups(instance, &g, NULL) != VK_SUCCESS || g == 0)
        return;
    VkPhysicalDeviceGroupProperties *gp = calloc(g, sizeof *gp);
    if (!gp)
        return;
    for (uint32_t k = 0; k < g; k++)
        gp[k].sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_GROUP_PROPERTIES;
    VkResult r = vkEnumeratePhysicalDeviceGroups(instance, &g, gp);
    for (uint32_t k = 0; (r == VK_SUCCESS || r == VK_INCOMPLETE) && k < g; k++)
        for (uint32_t j = 0; j < gp[k].physicalDeviceCount; j++)
            for (uint32_t i = 0; i < n; i++)
                if (devices[i] == gp[k].physicalDevices[j]) {
                    infos[i].group = k;
                    infos[i].group_size = gp[k].physicalDeviceCount;
                }
    free(gp);
}

static void describe_device(VkPhysicalDevice phys, vkt_device_info *info)
{
    memset(info, 0, sizeof *info);
    VkPhysicalDeviceProperties base;
    vkGetPhysicalDeviceProperties(phys, &base);

    VkPhysicalDeviceSubgroupProperties sub = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
    VkPhysicalDeviceDriverProperties drv = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES};
    VkPhysicalDeviceMaintenance3Properties m3 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES, .pNext = &sub};
    VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2,
                                      .pNext = &m3};
    if (base.apiVersion >= VK_API_VERSION_1_2)
        sub.pNext = &drv; /* driver properties are core in 1.2 */
    if (base.apiVersion >= VK_API_VERSION_1_1)
        vkGetPhysicalDeviceProperties2(phys, &p2);
    else
        p2.properties = base;

    const VkPhysicalDeviceProperties *p = &p2.properties;
    snprintf(info->name, sizeof info->name, "%s", p->deviceName);
    snprintf(info->driver_name, sizeof info->driver_name, "%s", drv.driverName);
    snprintf(info->driver_info, sizeof info->driver_info, "%s", drv.driverInfo);
    info->vendor_id = p->vendorID;
    info->device_id = p->deviceID;
    info->type = type_of(p->deviceType);
    info->api_version = p->apiVersion;
    info->subgroup_size = sub.subgroupSize ? sub.subgroupSize : 1;
    info->max_storage_buffer_range = p->limits.maxStorageBufferRange;
    info->max_shared_memory = p->limits.maxComputeSharedMemorySize;
    info->max_workgroup_invocations = p->limits.maxComputeWorkGroupInvocations;
    info->max_allocation_size = m3.maxMemoryAllocationSize ? m3.maxMemoryAllocationSize
                                                           : (uint64_t)1 << 30;

    VkPhysicalDeviceMemoryProperties mem;
    vkGetPhysicalDeviceMemoryProperties(phys, &mem);
    info->heap_count = mem.memoryHeapCount < VKT_MAX_HEAPS ? mem.memoryHeapCount : VKT_MAX_HEAPS;
    for (uint32_t i = 0; i < info->heap_count; i++) {
        info->heap_size[i] = mem.memoryHeaps[i].size;
        info->heap_device_local[i] =
            (mem.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) != 0;
    }
    describe_queues(phys, info);
    describe_plan(phys, info);
}

void gpu_describe_devices(VkInstance instance, const VkPhysicalDevice *devices, uint32_t n,
                          vkt_device_info *infos)
{
    for (uint32_t i = 0; i < n; i++)
        describe_device(devices[i], &infos[i]);
    describe_groups(instance, devices, n, infos);
}

vkt_status vkt_instance_select_devices(vkt_instance *inst, uint32_t *indices, uint32_t capacity,
                                       uint32_t *out_count)
{
    if (out_count)
        *out_count = 0;
    if (!inst || !indices || !out_count || capacity == 0)
        return err_fail(inst ? inst->errmsg : NULL, VKT_ERROR_INVALID_ARGUMENT,
                        "vkt_instance_select_devices: NULL argument or zero capacity");
    const char *env = plat_getenv("VKT_DEVICES");
    if (!env) {
        indices[0] = 0;
        *out_count = 1;
        return VKT_OK;
    }
    uint32_t n = 0;
    vkt_status st = vkt_parse_device_list(env, indices, capacity, &n);
    if (st != VKT_OK)
        return err_fail(inst->errmsg, st, "VKT_DEVICES: %s", vkt_last_error());
    for (uint32_t i = 0; i < n; i++)
        if (indices[i] >= inst->device_count)
            return err_fail(inst->errmsg, VKT_ERROR_NO_DEVICE,
                            "VKT_DEVICES='%s' names device %u but only %u device(s) exist", env,
                            indices[i], inst->device_count);
    *out_count = n;
    return VKT_OK;
}

vkt_status vkt_instance_device_kernels(vkt_instance *inst, uint32_t index,
                                       vkt_kernel_variant kernels, char *out, size_t out_size)
{
    if (out && out_size)
        out[0] = '\0';
    if (!inst || !out || out_size == 0)
        return err_fail(inst ? inst->errmsg : NULL, VKT_ERROR_INVALID_ARGUMENT,
                        "vkt_instance_device_kernels: NULL argument or zero size");
    if (index >= inst->device_count)
        return err_fail(inst->errmsg, VKT_ERROR_NO_DEVICE,
                        "device index %u out of range: %u device(s) present", index,
                        inst->device_count);
    gpu_device_caps caps;
    gpu_profile profile;
    gpu_variant chosen[GPU_FAMILY_COUNT];
    vkt_status st = gpu_query_device_caps(inst->devices[index], &caps, inst->errmsg);
    if (st == VKT_OK)
        st = gpu_kernel_setup(&caps, kernels, NULL, &profile, chosen, inst->errmsg);
    if (st == VKT_OK)
        gpu_kernel_report(&profile, chosen, out, out_size);
    return st;
}
