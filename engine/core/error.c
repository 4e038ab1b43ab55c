/* Status names and the per-thread last error. */
#include "error.h"

#include <stdio.h>
#include <string.h>

static _Thread_local char t_last_error[VKT_ERRMSG_SIZE];

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
    case VKT_ERROR_TIMEOUT: return "VKT_ERROR_TIMEOUT";
    case VKT_ERROR_REMOTE: return "VKT_ERROR_REMOTE";
    case VKT_ERROR_DIVERGED: return "VKT_ERROR_DIVERGED";
    }
    return "VKT_ERROR_UNKNOWN";
}

const char *vkt_last_error(void) { return t_last_error; }

/* Formats into a private buffer first: an argument may point into the last-error slot or
 * into `buf` itself (err_fail(buf, st, "prefix: %s", vkt_last_error()), or a message that
 * wraps `buf`), and vsnprintf must never read the bytes it is writing. */
vkt_status err_failv(char *buf, vkt_status status, const char *fmt, va_list ap)
{
    char msg[VKT_ERRMSG_SIZE];
    vsnprintf(msg, sizeof msg, fmt, ap);
    memcpy(t_last_error, msg, sizeof msg);
    if (buf && buf != t_last_error)
        memcpy(buf, msg, sizeof msg);
    return status;
}

vkt_status err_fail(char *buf, vkt_status status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    err_failv(buf, status, fmt, ap);
    va_end(ap);
    return status;
}
