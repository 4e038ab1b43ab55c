/* Child processes, Win32 side (platform.h; the POSIX side is process_posix.c). */
#if defined(_WIN32)
#include "platform.h"

#include <stdlib.h>
#include <string.h>
#include <windows.h>

struct plat_process {
    HANDLE process;
    DWORD pid;
};

/* Appends one argument to the command line `cmd` (capacity `cap`, length *len) quoted the
 * way the C runtime's parser reads it back: inside double quotes, a quote is preceded by
 * a backslash, and backslashes are doubled only where a quote follows them. Returns 0 if
 * it fits. */
static int append_arg(char *cmd, size_t cap, size_t *len, const char *arg)
{
    size_t n = *len;
#define PUT(c)                                                                            \
    do {                                                                                  \
        if (n + 1 >= cap)                                                                 \
            return -1;                                                                    \
        cmd[n++] = (c);                                                                   \
    } while (0)
    if (n)
        PUT(' ');
    PUT('"');
    for (const char *s = arg;; s++) {
        size_t slashes = 0;
        while (*s == '\\') {
            slashes++;
            s++;
        }
        if (!*s || *s == '"') { /* backslashes before a quote (the closing one too) */
            for (size_t i = 0; i < slashes * 2; i++)
                PUT('\\');
            if (!*s)
                break;
            PUT('\\');
            PUT('"');
        } else {
            for (size_t i = 0; i < slashes; i++)
                PUT('\\');
            PUT(*s);
        }
    }
    PUT('"');
#undef PUT
    cmd[n] = '\0';
    *len = n;
    return 0;
}

static wchar_t *widen(const char *s)
{
    int n = MultiByteToWideChar(CP_UTF8, 0, s, -1, NULL, 0);
    wchar_t *w = n > 0 ? malloc((size_t)n * sizeof *w) : NULL;
    if (w && MultiByteToWideChar(CP_UTF8, 0, s, -1, w, n) != n) {
        free(w);
        w = NULL;
    }
    return w;
}

int plat_process_start(const char *const *argv, plat_process **out)
{
    *out = NULL;
    if (!argv || !argv[0])
        return -1;
    char cmd[32768]; /* CreateProcessW's limit */
    size_t len = 0;
    cmd[0] = '\0';
    for (size_t i = 0; argv[i]; i++)
        if (append_arg(cmd, sizeof cmd, &len, argv[i]) != 0)
            return -1;
    wchar_t *wapp = widen(argv[0]), *wcmd = widen(cmd);
    plat_process *p = malloc(sizeof *p);
    STARTUPINFOW si;
    PROCESS_INFORMATION pi;
    memset(&si, 0, sizeof si);
    si.cb = sizeof si;
    BOOL ok = wapp && wcmd && p &&
              CreateProcessW(wapp, wcmd, NULL, NULL, TRUE, 0, NULL, NULL, &si, &pi);
    free(wapp);
    free(wcmd);
    if (!ok) {
        free(p);
        return -1;
    }
    CloseHandle(pi.hThread);
    p->process = pi.hProcess;
    p->pid = pi.dwProcessId;
    *out = p;
    return 0;
}

long plat_process_pid(const plat_process *p) { return p ? (long)p->pid : -1; }

/* 128 + 9, as a POSIX parent sees a child ended by SIGKILL. */
#define KILLED_STATUS 137

int plat_process_kill(plat_process *p)
{
    return p && TerminateProcess(p->process, KILLED_STATUS) ? 0 : -1;
}

int plat_process_wait(plat_process *p)
{
    if (!p)
        return -1;
    DWORD code = 0;
    int rc = WaitForSingleObject(p->process, INFINITE) == WAIT_OBJECT_0 &&
                     GetExitCodeProcess(p->process, &code)
                 ? (int)code
                 : -1;
    CloseHandle(p->process);
    free(p);
    return rc;
}
#endif /* _WIN32 */
