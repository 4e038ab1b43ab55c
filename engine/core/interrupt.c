/* vkt_interrupt_*: the public face of platform.h's termination requests. */
#include <errno.h>
#include <string.h>

#include "error.h"
#include "platform/platform.h"

vkt_status vkt_interrupt_install(void)
{
    if (plat_signals_catch() != 0)
        return err_fail(NULL, VKT_ERROR_INTERNAL, "cannot install the signal handlers: %s",
                        strerror(errno));
    return VKT_OK;
}

int vkt_interrupted(void) { return plat_signals_pending(); }

void vkt_interrupt_uninstall(void) { plat_signals_release(); }
