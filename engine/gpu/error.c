/* Status names, the per-thread last error, and VkResult names. */
#include "gpu.h"

#include <stdio.h>
#include <string.h>

static _Thread_local char t_last_error[VKT_ERRMSG_SIZE];
static _Thread_local char t_call_name[96];

const char *vkt_status_name(vkt_status status)
{
    switch (status) {
    case VKT_OK: return "VKT_OK";
    case VKT_ERROR_INVALID_ARGUMENT: return "VKT_ERROR_INVALID_ARGUMENT";
    case VKT_ERROR_SHAPE: return "VKT_ERROR_SHAPE";
    case VKT_ERROR_NO_VULKAN: return "VKT_ERROR_NO_VULKAN";
    case VKT_ERROR_NO_DEVICE: return "VKT_ERROR_NO_DEVICE";
    case VKT_ERROR_OUT_OF_MEMORY: return "VKT_ERROR_OUT_OF_MEMORY";
    case VKT_ERROR_LIMIT: return "VKT_ERROR_LIMIT";
    case VKT_ERROR_VULKAN: return "VKT_ERROR_VULKAN";
    case VKT_ERROR_DEVICE_LOST: return "VKT_ERROR_DEVICE_LOST";
    case VKT_ERROR_STATE: return "VKT_ERROR_STATE";
    case VKT_ERROR_IO: return "VKT_ERROR_IO";
    case VKT_ERROR_FORMAT: return "VKT_ERROR_FORMAT";
    case VKT_ERROR_INTERNAL: return "VKT_ERROR_INTERNAL";
    }
    return "VKT_ERROR_UNKNOWN";
}

const char *vkt_last_error(void) { return t_last_error; }

vkt_status vkt_failv(char *buf, vkt_status status, const char *fmt, va_list ap)
{
    vsnprintf(t_last_error, sizeof t_last_error, fmt, ap);
    if (buf && buf != t_last_error)
        memcpy(buf, t_last_error, sizeof t_last_error);
    return status;
}

vkt_status vkt_fail(char *buf, vkt_status status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vkt_failv(buf, status, fmt, ap);
    va_end(ap);
    return status;
}

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
    const char *spec = vkt_getenv("VKT_FAULT_INJECT");
    if (!spec || strcmp(spec, call) != 0)
        return VK_SUCCESS;
    if (strcmp(call, "vkAllocateMemory") == 0)
        return VK_ERROR_OUT_OF_DEVICE_MEMORY;
    if (strcmp(call, "vkQueueSubmit") == 0 || strcmp(call, "vkWaitForFences") == 0)
        return VK_ERROR_DEVICE_LOST;
    return VK_ERROR_INITIALIZATION_FAILED;
}
