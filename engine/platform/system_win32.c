/* The system, Win32 side (platform.h; the POSIX side is system_posix.c). */
#if defined(_WIN32)
#include "platform.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <windows.h>

void *plat_aligned_alloc(size_t alignment, size_t bytes)
{
    return _aligned_malloc(bytes ? bytes : 1, alignment);
}

void plat_aligned_free(void *p) { _aligned_free(p); }

long plat_cpu_count(void)
{
    DWORD n = GetActiveProcessorCount(ALL_PROCESSOR_GROUPS);
    return n > 0 ? (long)n : 1;
}

uint64_t plat_physical_memory(void)
{
    MEMORYSTATUSEX m;
    m.dwLength = sizeof m;
    return GlobalMemoryStatusEx(&m) ? (uint64_t)m.ullTotalPhys : 0;
}

/* FILETIME: 100 ns units. */
static uint64_t ticks(FILETIME f) { return ((uint64_t)f.dwHighDateTime << 32) | f.dwLowDateTime; }

double plat_thread_cpu_time(void)
{
    FILETIME created, ended, kernel, user;
    if (!GetThreadTimes(GetCurrentThread(), &created, &ended, &kernel, &user))
        return 0;
    return (double)(ticks(kernel) + ticks(user)) * 1e-7;
}

int plat_setenv(const char *name, const char *value)
{
    if (!name || !*name || strchr(name, '='))
        return -1;
    /* The C runtime's copy (getenv) and the process's block (GetEnvironmentVariable, which
     * other DLLs such as vulkan-1.dll read): an empty value removes the variable from
     * both through _putenv_s, so "" cannot be kept as a value, as Windows has none. */
    if (_putenv_s(name, value ? value : "") != 0)
        return -1;
    return SetEnvironmentVariableA(name, value && *value ? value : NULL) ||
                   (!value && GetLastError() == ERROR_ENVVAR_NOT_FOUND)
               ? 0
               : -1;
}

/* UTF-16 to UTF-8 into buf; returns 0 if it fits. */
static int narrow(const wchar_t *w, char *buf, size_t size)
{
    int n = WideCharToMultiByte(CP_UTF8, 0, w, -1, buf, (int)size, NULL, NULL);
    return n > 0 ? 0 : -1;
}

int plat_make_temp_dir(const char *prefix, char *buf, size_t size)
{
    if (!buf || size == 0)
        return -1;
    buf[0] = '\0';
    if (!prefix || strchr(prefix, '/') || strchr(prefix, '\\'))
        return -1;
    wchar_t base[MAX_PATH + 1];
    DWORD n = GetTempPathW(MAX_PATH + 1, base); /* ends with a backslash */
    char dir[4 * (MAX_PATH + 1)];
    if (n == 0 || n > MAX_PATH || narrow(base, dir, sizeof dir) != 0)
        return -1;
    /* Names from the process id, a counter and the clock, tried until one is new. */
    static volatile LONG counter;
    for (int attempt = 0; attempt < 100; attempt++) {
        LARGE_INTEGER t;
        QueryPerformanceCounter(&t);
        unsigned long r = (unsigned long)GetCurrentProcessId() * 2654435761u ^
                          (unsigned long)InterlockedIncrement(&counter) * 40503u ^
                          (unsigned long)t.QuadPart;
        int len = snprintf(buf, size, "%s%s%08lx", dir, prefix, r & 0xfffffffful);
        if (len < 0 || (size_t)len >= size)
            break;
        int wn = MultiByteToWideChar(CP_UTF8, 0, buf, -1, NULL, 0);
        wchar_t *w = wn > 0 ? malloc((size_t)wn * sizeof *w) : NULL;
        if (!w || MultiByteToWideChar(CP_UTF8, 0, buf, -1, w, wn) != wn) {
            free(w);
            break;
        }
        /* NULL security attributes: the folder inherits the temporary folder's access
         * list, which on Windows is the user's own profile folder. */
        BOOL made = CreateDirectoryW(w, NULL);
        DWORD e = made ? 0 : GetLastError();
        free(w);
        if (made)
            return 0;
        if (e != ERROR_ALREADY_EXISTS)
            break;
    }
    buf[0] = '\0';
    return -1;
}

int plat_remove_dir(const char *path)
{
    int wn = MultiByteToWideChar(CP_UTF8, 0, path, -1, NULL, 0);
    wchar_t *w = wn > 0 ? malloc((size_t)wn * sizeof *w) : NULL;
    int ok = w && MultiByteToWideChar(CP_UTF8, 0, path, -1, w, wn) == wn &&
             RemoveDirectoryW(w);
    free(w);
    return ok ? 0 : -1;
}
#endif /* _WIN32 */
