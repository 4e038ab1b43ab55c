/* device_list.c - the text of a device list ("0,0,1": VKT_DEVICES, --devices) parsed
 * into indices (vkt_parse_device_list, include/vkt/base.h). No Vulkan here, so that the
 * command line's option parser links without it (the fuzz target train_options). */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>

#include "core/error.h"

vkt_status vkt_parse_device_list(const char *text, uint32_t *indices, uint32_t capacity,
                                 uint32_t *out_count)
{
    if (out_count)
        *out_count = 0;
    if (!text || !indices || !out_count)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "vkt_parse_device_list: NULL argument");
    uint32_t n = 0;
    const char *p = text;
    for (;;) {
        while (isspace((unsigned char)*p))
            p++;
        if (!isdigit((unsigned char)*p))
            return err_fail(NULL, VKT_ERROR_FORMAT,
                            "bad device list '%s': expected a device index at position %d "
                            "(format: comma-separated indices such as 0,0,1)",
                            text, (int)(p - text));
        char *end;
        errno = 0;
        unsigned long v = strtoul(p, &end, 10);
        if (v > 1023 || errno == ERANGE) /* the digits as typed: strtoul clamps past ULONG_MAX */
            return err_fail(NULL, VKT_ERROR_FORMAT,
                            "bad device list '%s': index %.*s too large (at most 1023)", text,
                            (int)(end - p), p);
        if (n == capacity)
            return err_fail(NULL, VKT_ERROR_LIMIT, "device list '%s' has more than %u entries",
                            text, capacity);
        indices[n++] = (uint32_t)v;
        p = end;
        while (isspace((unsigned char)*p))
            p++;
        if (*p == '\0')
            break;
        if (*p != ',')
            return err_fail(NULL, VKT_ERROR_FORMAT,
                            "bad device list '%s': unexpected '%c' at position %d", text, *p,
                            (int)(p - text));
        p++;
    }
    *out_count = n;
    return VKT_OK;
}
