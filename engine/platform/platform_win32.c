/* Win32 implementation of platform.h's files, directories, loading, clocks and host
 * (the POSIX side: platform_posix.c and host_posix.c). Paths are UTF-8 in the engine and
 * UTF-16 at the system calls; '/' and '\' both separate (the Win32 calls accept either). */
#if defined(_WIN32)
#include "platform.h"

#include <io.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <windows.h>

/* A UTF-8 path as a malloc'd UTF-16 string (NULL on failure). */
static wchar_t *widen(const char *s)
{
    int n = MultiByteToWideChar(CP_UTF8, 0, s, -1, NULL, 0);
    if (n <= 0)
        return NULL;
    wchar_t *w = malloc((size_t)n * sizeof *w);
    if (w && MultiByteToWideChar(CP_UTF8, 0, s, -1, w, n) != n) {
        free(w);
        return NULL;
    }
    return w;
}

/* UTF-16 to UTF-8 into buf (always terminated when size > 0); returns 0 if it fits. */
static int narrow(const wchar_t *w, char *buf, size_t size)
{
    if (!size)
        return -1;
    int n = WideCharToMultiByte(CP_UTF8, 0, w, -1, buf, (int)size, NULL, NULL);
    if (n <= 0) {
        buf[0] = '\0';
        return -1;
    }
    return 0;
}

/* The system's message for `code` into buf, without the trailing line break. */
static void system_message(DWORD code, char *buf, size_t size)
{
    if (!buf || !size)
        return;
    DWORD n = FormatMessageA(FORMAT_MESSAGE_FROM_SYSTEM | FORMAT_MESSAGE_IGNORE_INSERTS, NULL,
                             code, 0, buf, (DWORD)size, NULL);
    if (n == 0)
        snprintf(buf, size, "Win32 error %lu", (unsigned long)code);
    buf[strcspn(buf, "\r\n")] = '\0';
}

void *plat_dl_open(const char *path, char *why, size_t why_size)
{
    wchar_t *w = widen(path);
    HMODULE lib = w ? LoadLibraryW(w) : NULL;
    free(w);
    if (!lib)
        system_message(GetLastError(), why, why_size);
    return (void *)lib;
}

void *plat_dl_symbol(void *lib, const char *name)
{
    /* FARPROC to void * through a union: ISO C has no cast between them. */
    union {
        FARPROC f;
        void *p;
    } u;
    u.f = lib ? GetProcAddress((HMODULE)lib, name) : NULL;
    return u.p;
}

void plat_dl_close(void *lib)
{
    if (lib)
        FreeLibrary((HMODULE)lib);
}

const char *plat_dl_vulkan_name(void) { return "vulkan-1.dll"; }

double plat_now(void)
{
    static LARGE_INTEGER freq; /* constant after boot; a race writes the same value */
    LARGE_INTEGER t;
    if (!freq.QuadPart)
        QueryPerformanceFrequency(&freq);
    QueryPerformanceCounter(&t);
    return (double)t.QuadPart / (double)freq.QuadPart;
}

/* FILETIME: 100 ns units. */
static uint64_t ticks(FILETIME f) { return ((uint64_t)f.dwHighDateTime << 32) | f.dwLowDateTime; }

double plat_cpu_time(void)
{
    FILETIME created, ended, kernel, user;
    if (!GetProcessTimes(GetCurrentProcess(), &created, &ended, &kernel, &user))
        return 0;
    return (double)(ticks(kernel) + ticks(user)) * 1e-7;
}

/* 100 ns ticks from 1601-01-01 (FILETIME's epoch) to 1970-01-01. */
#define EPOCH_1601_TO_1970 116444736000000000ULL

double plat_wall_time(void)
{
    FILETIME f;
    GetSystemTimePreciseAsFileTime(&f);
    return (double)(ticks(f) - EPOCH_1601_TO_1970) * 1e-7;
}

void plat_hostname(char *buf, size_t size)
{
    if (!buf || size == 0)
        return;
    wchar_t w[MAX_COMPUTERNAME_LENGTH + 1];
    DWORD n = MAX_COMPUTERNAME_LENGTH + 1;
    if (!GetComputerNameW(w, &n) || narrow(w, buf, size) != 0 || buf[0] == '\0')
        snprintf(buf, size, "localhost");
    buf[size - 1] = '\0';
}

int plat_exe_dir(char *buf, size_t size)
{
    if (!buf || size == 0)
        return -1;
    buf[0] = '\0';
    wchar_t w[32768]; /* the longest Win32 path */
    DWORD n = GetModuleFileNameW(NULL, w, sizeof w / sizeof w[0]);
    if (n == 0 || n >= sizeof w / sizeof w[0])
        return -1;
    while (n > 0 && w[n - 1] != L'\\' && w[n - 1] != L'/')
        n--;
    if (n == 0)
        return -1;
    w[n - 1] = L'\0';
    return narrow(w, buf, size);
}

const char *plat_getenv(const char *name)
{
    const char *v = getenv(name);
    return (v && *v) ? v : NULL;
}

static int is_sep(char c) { return c == '/' || c == '\\'; }

static int make_dir(const char *path)
{
    wchar_t *w = widen(path);
    if (!w)
        return -1;
    int ok = CreateDirectoryW(w, NULL) || GetLastError() == ERROR_ALREADY_EXISTS;
    free(w);
    return ok ? 0 : -1;
}

int plat_mkdirs(const char *path)
{
    char buf[4096];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof buf)
        return -1;
    memcpy(buf, path, n + 1);
    /* Skip a drive ("C:\") or the server and share of a UNC path ("\\host\share\"). */
    char *p = buf + 1;
    if (n >= 2 && buf[1] == ':')
        p = buf + 3 <= buf + n ? buf + 3 : buf + n;
    else if (is_sep(buf[0]) && is_sep(buf[1])) {
        int seps = 0;
        for (p = buf + 2; *p && seps < 2; p++)
            seps += is_sep(*p);
    }
    for (; *p; p++) {
        if (!is_sep(*p))
            continue;
        char c = *p;
        *p = '\0';
        if (make_dir(buf) != 0)
            return -1;
        *p = c;
    }
    return make_dir(buf);
}

int plat_read_file(const char *path, void **data, size_t *size)
{
    *data = NULL;
    *size = 0;
    wchar_t *w = widen(path); /* fopen would read the name in the ANSI code page */
    FILE *f = w ? _wfopen(w, L"rb") : NULL;
    free(w);
    if (!f)
        return -1;
    size_t cap = 1 << 16, len = 0;
    unsigned char *buf = malloc(cap);
    while (buf) {
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (len < cap)
            break;
        unsigned char *bigger = realloc(buf, cap * 2);
        if (!bigger) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = bigger;
        cap *= 2;
    }
    int err = ferror(f);
    fclose(f);
    if (!buf || err) {
        free(buf);
        return -1;
    }
    *data = buf;
    *size = len;
    return 0;
}

int plat_stdout_is_tty(void) { return _isatty(_fileno(stdout)); }

int plat_list_dir(const char *dir, char ***names, size_t *count)
{
    *names = NULL;
    *count = 0;
    char pattern[4096];
    if (snprintf(pattern, sizeof pattern, "%s\\*", dir) >= (int)sizeof pattern)
        return -1;
    wchar_t *w = widen(pattern);
    if (!w)
        return -1;
    WIN32_FIND_DATAW e;
    HANDLE h = FindFirstFileW(w, &e);
    free(w);
    if (h == INVALID_HANDLE_VALUE)
        return GetLastError() == ERROR_FILE_NOT_FOUND ? 0 : -1; /* an empty folder */
    size_t n = 0, cap = 0;
    char **v = NULL;
    int rc = 0;
    do {
        if (wcscmp(e.cFileName, L".") == 0 || wcscmp(e.cFileName, L"..") == 0)
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            char **nv = realloc(v, cap * sizeof *v);
            if (!nv) {
                rc = -1;
                break;
            }
            v = nv;
        }
        char name[MAX_PATH * 4];
        if (narrow(e.cFileName, name, sizeof name) != 0 || !(v[n] = _strdup(name))) {
            rc = -1;
            break;
        }
        n++;
    } while (FindNextFileW(h, &e));
    FindClose(h);
    if (rc != 0) {
        plat_free_names(v, n);
        return rc;
    }
    *names = v;
    *count = n;
    return 0;
}

void plat_free_names(char **names, size_t count)
{
    for (size_t i = 0; i < count; i++)
        free(names[i]);
    free(names);
}

int plat_remove_file(const char *path)
{
    wchar_t *w = widen(path);
    int ok = w && DeleteFileW(w);
    free(w);
    return ok ? 0 : -1;
}

int plat_file_stat(const char *path, uint64_t *size, int64_t *mtime_ns)
{
    wchar_t *w = widen(path);
    WIN32_FILE_ATTRIBUTE_DATA a;
    int ok = w && GetFileAttributesExW(w, GetFileExInfoStandard, &a);
    free(w);
    if (!ok)
        return -1;
    if (size)
        *size = ((uint64_t)a.nFileSizeHigh << 32) | a.nFileSizeLow;
    if (mtime_ns)
        *mtime_ns = ((int64_t)ticks(a.ftLastWriteTime) - (int64_t)EPOCH_1601_TO_1970) * 100;
    return 0;
}

long plat_process_id(void) { return (long)GetCurrentProcessId(); }

/* LockFileEx locks are mandatory for the byte range they cover: the lock takes one byte
 * far beyond any note, so other processes can still read the note at offset 0. */
#define LOCK_OFFSET_HIGH 0x40000000u

struct plat_file_lock {
    HANDLE h;
};

static void read_note(HANDLE h, char *buf, size_t size)
{
    if (!buf || !size)
        return;
    OVERLAPPED at = {0};
    DWORD got = 0;
    if (!ReadFile(h, buf, (DWORD)(size - 1), &got, &at))
        got = 0;
    buf[got] = '\0';
    buf[strcspn(buf, "\r\n")] = '\0';
}

int plat_file_lock_try(const char *path, const char *note, plat_file_lock **out, char *other,
                      size_t other_size)
{
    *out = NULL;
    if (other && other_size)
        other[0] = '\0';
    wchar_t *w = widen(path);
    HANDLE h = w ? CreateFileW(w, GENERIC_READ | GENERIC_WRITE,
                               FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE, NULL,
                               OPEN_ALWAYS, FILE_ATTRIBUTE_NORMAL, NULL)
                 : INVALID_HANDLE_VALUE;
    free(w);
    if (h == INVALID_HANDLE_VALUE) {
        system_message(GetLastError(), other, other_size);
        return -1;
    }
    OVERLAPPED at = {0};
    at.OffsetHigh = LOCK_OFFSET_HIGH;
    if (!LockFileEx(h, LOCKFILE_EXCLUSIVE_LOCK | LOCKFILE_FAIL_IMMEDIATELY, 0, 1, 0, &at)) {
        DWORD e = GetLastError();
        int busy = e == ERROR_LOCK_VIOLATION || e == ERROR_IO_PENDING;
        if (busy)
            read_note(h, other, other_size);
        else
            system_message(e, other, other_size);
        CloseHandle(h);
        return busy ? 1 : -1;
    }
    plat_file_lock *l = malloc(sizeof *l);
    if (!l) {
        CloseHandle(h); /* closing the handle releases the lock */
        if (other && other_size)
            snprintf(other, other_size, "out of host memory");
        return -1;
    }
    l->h = h;
    /* The previous holder's note replaced (best effort, as on POSIX). */
    char line[512];
    int n = snprintf(line, sizeof line, "%s\n", note ? note : "");
    DWORD wrote;
    OVERLAPPED start = {0};
    if (n > 1 && (size_t)n < sizeof line && SetFilePointer(h, 0, NULL, FILE_BEGIN) == 0 &&
        SetEndOfFile(h))
        WriteFile(h, line, (DWORD)n, &wrote, &start);
    *out = l;
    return 0;
}

void plat_file_unlock(plat_file_lock *lock)
{
    if (!lock)
        return;
    CloseHandle(lock->h); /* the lock goes with the handle */
    free(lock);
}
#endif /* _WIN32 */
