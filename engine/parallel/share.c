/* share.c - share.h: contexts on one physical device sharing one VkDevice. */
#include <stdio.h>
#include <string.h>

#include "parallel/share.h"
#include "platform/platform.h"

int share_mode(void)
{
    const char *v = plat_getenv("VKT_SHARE_DEVICE");
    if (!v || !*v)
        return 2;
    return strcmp(v, "1") == 0 ? 1 : strcmp(v, "0") == 0 ? 0 : -1;
}

int share_refuse(const char *what, char *why, size_t n)
{
    if (share_mode() >= 0)
        return 0;
    return snprintf(why, n, "VKT_SHARE_DEVICE='%s': 1 (%s on one device share its VkDevice), "
                    "0 (never) or unset (where it has a queue for each)",
                    plat_getenv("VKT_SHARE_DEVICE"), what) >= 0;
}

vkt_context *share_pick(const uint32_t *dev, uint32_t n, uint32_t i,
                        vkt_context *(*ctx)(void *user, uint32_t j), void *user)
{
    int mode = share_mode();
    uint32_t on_device = 0, first = UINT32_MAX;
    for (uint32_t k = 0; k < n; k++)
        if (dev[k] == dev[i]) {
            on_device++;
            first = first == UINT32_MAX ? k : first;
        }
    if (mode <= 0 || first >= i)
        return NULL;
    vkt_context *c = ctx(user, first);
    return mode == 1 || gpu_context_queue_count(c) >= on_device ? c : NULL;
}
