/* Win32 part of platform.h's termination requests (the POSIX side: signals_posix.c): a
 * console control handler (SetConsoleCtrlHandler) that records Ctrl-C as SIGINT, closing
 * the console (the counterpart of POSIX's hang-up) as PLAT_SIGHUP, and Ctrl-Break, logoff
 * and shutdown as SIGTERM. The handler runs on a thread of its own that Windows starts, so
 * only an atomic store is shared. A second request ends the process at once with status
 * 128 + n, as on POSIX. Closing the console, logoff and shutdown end the process as soon
 * as the handler returns, whatever it returns (Windows' rule): for those the handler does
 * not return, so the program's main thread saves and exits by itself (its exit ends this
 * thread too); Windows still ends the process after its own grace time (5 s for a closed
 * console, longer at logoff or shutdown). */
#if defined(_WIN32)
#include "platform.h"

#include <signal.h>
#include <stdatomic.h>
#include <windows.h>

static atomic_int pending;   /* the first request's signal number, 0 before it */
static atomic_int installed; /* 1 while the handler is in place */

static BOOL WINAPI on_control(DWORD type)
{
    int sig = type == CTRL_C_EVENT ? SIGINT : type == CTRL_CLOSE_EVENT ? PLAT_SIGHUP : SIGTERM;
    int none = 0;
    if (!atomic_compare_exchange_strong(&pending, &none, sig))
        ExitProcess(128 + (UINT)sig); /* the second request */
    if (type == CTRL_CLOSE_EVENT || type == CTRL_LOGOFF_EVENT || type == CTRL_SHUTDOWN_EVENT)
        Sleep(INFINITE); /* returning would end the process now: let the program save */
    return TRUE;         /* handled: no default termination */
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

void plat_signals_note_start(void) {} /* no library replaces a console handler */

int plat_signals_pending(void) { return atomic_load(&pending); }

const char *plat_signal_name(int sig)
{
    return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : sig == PLAT_SIGHUP
                                                                         ? "SIGHUP"
                                                                         : "a signal";
}

void plat_signals_release(void)
{
    if (!atomic_exchange(&installed, 0))
        return;
    SetConsoleCtrlHandler(on_control, FALSE);
    atomic_store(&pending, 0);
}
#endif /* _WIN32 */
