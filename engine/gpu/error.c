/* VkResult names and statuses, call names for messages, fault injection. */
#include "gpu.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local char t_call_name[96];





const char *gpu_call_name_(const char *expr)
{
    size_t n = strcspn(expr, "( ");
    if (n >= sizeof t_call_name)
        n = sizeof t_call_name - 1;
    memcpy(t_call_name, expr, n);
    t_call_name[n] = '\0';
    return t_call_name;
}

const char *gpu_result_name(VkResult r)
{
    switch (r) {
#define R(x) case x: return #x;
    R(VK_SUCCESS) R(VK_NOT_READY) R(VK_TIMEOUT) R(VK_EVENT_SET) R(VK_EVENT_RESET)
    R(VK_INCOMPLETE) R(VK_ERROR_OUT_OF_HOST_MEMORY) R(VK_ERROR_OUT_OF_DEVICE_MEMORY)
    R(VK_ERROR_INITIALIZATION_FAILED) R(VK_ERROR_DEVICE_LOST) R(VK_ERROR_MEMORY_MAP_FAILED)
    R(VK_ERROR_LAYER_NOT_PRESENT) R(VK_ERROR_EXTENSION_NOT_PRESENT)
    R(VK_ERROR_FEATURE_NOT_PRESENT) R(VK_ERROR_INCOMPATIBLE_DRIVER) R(VK_ERROR_TOO_MANY_OBJECTS)
    R(VK_ERROR_FORMAT_NOT_SUPPORTED) R(VK_ERROR_FRAGMENTED_POOL) R(VK_ERROR_UNKNOWN)
    R(VK_ERROR_OUT_OF_POOL_MEMORY) R(VK_ERROR_INVALID_EXTERNAL_HANDLE) R(VK_ERROR_FRAGMENTATION)
    R(VK_PIPELINE_COMPILE_REQUIRED)
#undef R
    default: return "VK_RESULT_UNKNOWN";
    }
}

vkt_status gpu_status_of(VkResult r)
{
    switch (r) {
    case VK_SUCCESS: return VKT_OK;
    case VK_ERROR_OUT_OF_HOST_MEMORY:
    case VK_ERROR_OUT_OF_DEVICE_MEMORY:
    case VK_ERROR_OUT_OF_POOL_MEMORY:
    case VK_ERROR_FRAGMENTED_POOL:
    case VK_ERROR_FRAGMENTATION: return VKT_ERROR_OUT_OF_MEMORY;
    case VK_ERROR_DEVICE_LOST: return VKT_ERROR_DEVICE_LOST;
    case VK_ERROR_INCOMPATIBLE_DRIVER: return VKT_ERROR_NO_DEVICE;
    default: return VKT_ERROR_VULKAN;
    }
}

VkResult gpu_fault(const char *call)
{
    /* "call" fails every time; "call:N" lets N calls through (counted over the process,
     * all contexts together), then fails every later one. */
    static atomic_uint_fast64_t passed;
    const char *spec = plat_getenv("VKT_FAULT_INJECT");
    size_t n = strlen(call);
    if (!spec || strncmp(spec, call, n) != 0 || (spec[n] != '\0' && spec[n] != ':'))
        return VK_SUCCESS;
    if (spec[n] == ':' && atomic_fetch_add(&passed, 1) < strtoull(spec + n + 1, NULL, 10))
        return VK_SUCCESS;
    if (strcmp(call, "vkAllocateMemory") == 0)
        return VK_ERROR_OUT_OF_DEVICE_MEMORY;
    if (strcmp(call, "vkQueueSubmit") == 0 || strcmp(call, "vkWaitForFences") == 0)
        return VK_ERROR_DEVICE_LOST;
    if (strcmp(call, "vkGetMemoryHostPointerPropertiesEXT") == 0)
        return VK_ERROR_INVALID_EXTERNAL_HANDLE;
    return VK_ERROR_INITIALIZATION_FAILED;
}
