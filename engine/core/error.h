/* error.h - status names and error messages, shared by every layer (no Vulkan here). */
#ifndef VKT_CORE_ERROR_H
#define VKT_CORE_ERROR_H

#include <stdarg.h>

#include "vkt.h"

#define VKT_ERRMSG_SIZE 1024

/* Formats a message into `buf` (VKT_ERRMSG_SIZE bytes, may be NULL) and into the calling
 * thread's last-error slot; returns `status` so callers can `return err_fail(...)`. */
vkt_status err_fail(char *buf, vkt_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
vkt_status err_failv(char *buf, vkt_status status, const char *fmt, va_list ap);

#endif
