/* Win32 part of platform.h's termination requests (the POSIX side: signals_posix.c): a
 * console control handler (SetConsoleCtrlHandler) that records Ctrl-C as SIGINT and
 * Ctrl-Break, closing the console, logoff and shutdown as SIGTERM. The handler runs on a
 * thread of its own that Windows starts, so only an atomic store is shared. A second
 * request ends the process at once with status 128 + n, as on POSIX. Closing the console,
 * logoff and shutdown end the process when the handler returns whatever it does (Windows'
 * rule): those give the program only until then. */
#if defined(_WIN32)
#include "platform.h"

#include <signal.h>
#include <stdatomic.h>
#include <windows.h>

static atomic_int pending;   /* the first request's signal number, 0 before it */
static atomic_int installed; /* 1 while the handler is in place */

static BOOL WINAPI on_control(DWORD type)
{
    int sig = type == CTRL_C_EVENT ? SIGINT : SIGTERM;
    int none = 0;
    if (!atomic_compare_exchange_strong(&pending, &none, sig))
        ExitProcess(128 + (UINT)sig); /* the second request */
    return TRUE;                      /* handled: no default termination */
}

int plat_signals_catch(void)
{
    if (atomic_load(&installed))
        return 0;
    if (!SetConsoleCtrlHandler(on_control, TRUE))
        return -1;
    atomic_store(&installed, 1);
    return 0;
}

int plat_signals_pending(void) { return atomic_load(&pending); }

void plat_signals_release(void)
{
    if (!atomic_exchange(&installed, 0))
        return;
    SetConsoleCtrlHandler(on_control, FALSE);
    atomic_store(&pending, 0);
}
#endif /* _WIN32 */
