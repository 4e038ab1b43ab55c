/* vkt_interrupt_*: the public face of platform.h's termination requests. */
#include <errno.h>
#include <string.h>

#include "error.h"
#include "platform/platform.h"

vkt_status vkt_interrupt_install(void)
{
    if (vkt_signals_catch() != 0)
        return vkt_fail(NULL, VKT_ERROR_INTERNAL, "cannot install the signal handlers: %s",
                        strerror(errno));
    return VKT_OK;
}

int vkt_interrupted(void) { return vkt_signals_pending(); }

void vkt_interrupt_uninstall(void) { vkt_signals_release(); }
