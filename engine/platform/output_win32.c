/* Files written for the user, Win32 side (platform.h, "Output files"; the POSIX side is
 * output_posix.c). What a name is comes from GetFileType on a handle: FILE_TYPE_DISK is a
 * file (replaced through a temporary file and MoveFileExW), FILE_TYPE_CHAR (NUL, CON) and
 * FILE_TYPE_PIPE are written in place. Paths are UTF-8 here and UTF-16 at the calls. */
#if defined(_WIN32)
#include "platform.h"

#include <errno.h>
#include <fcntl.h>
#include <io.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <wchar.h>
#include <windows.h>

#define SHARE_ALL (FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE)
#define WPATH_UNITS 32768 /* the longest Win32 path, in UTF-16 units */

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

/* The system's message for `code`, without the trailing line break. */
static const char *message(DWORD code, char *buf, size_t size)
{
    DWORD n = FormatMessageA(FORMAT_MESSAGE_FROM_SYSTEM | FORMAT_MESSAGE_IGNORE_INSERTS, NULL,
                             code, 0, buf, (DWORD)size, NULL);
    if (n == 0)
        snprintf(buf, size, "Win32 error %lu", (unsigned long)code);
    buf[strcspn(buf, "\r\n")] = '\0';
    return buf;
}

/* A named pipe (\\.\pipe\name): looked at without opening it, since opening one connects
 * to its server. */
static int is_pipe_name(const char *p)
{
    return (p[0] == '\\' || p[0] == '/') && (p[1] == '\\' || p[1] == '/') && p[2] == '.' &&
           (p[3] == '\\' || p[3] == '/') && _strnicmp(p + 4, "pipe", 4) == 0 &&
           (p[8] == '\\' || p[8] == '/');
}

int plat_final_path(const char *path, char *buf, size_t size)
{
    return snprintf(buf, size, "%s", path) < (int)size ? 0 : -1;
}

plat_file_kind plat_file_kind_of(const char *path)
{
    if (is_pipe_name(path))
        return PLAT_KIND_PIPE;
    wchar_t *w = widen(path);
    if (!w)
        return PLAT_KIND_NONE;
    DWORD attr = GetFileAttributesW(w);
    plat_file_kind k = PLAT_KIND_NONE;
    if (attr != INVALID_FILE_ATTRIBUTES && (attr & FILE_ATTRIBUTE_DIRECTORY)) {
        k = PLAT_KIND_DIR;
    } else {
        HANDLE h = CreateFileW(w, 0, SHARE_ALL, NULL, OPEN_EXISTING, 0, NULL);
        if (h != INVALID_HANDLE_VALUE) {
            DWORD t = GetFileType(h);
            k = t == FILE_TYPE_DISK ? PLAT_KIND_FILE : t == FILE_TYPE_CHAR ? PLAT_KIND_CHAR
                : t == FILE_TYPE_PIPE ? PLAT_KIND_PIPE : PLAT_KIND_OTHER;
            CloseHandle(h);
        }
    }
    free(w);
    return k;
}

int plat_file_identity(const char *path, plat_file_id *id)
{
    if (is_pipe_name(path))
        return -1;
    wchar_t *w = widen(path);
    HANDLE h = w ? CreateFileW(w, 0, SHARE_ALL, NULL, OPEN_EXISTING, FILE_FLAG_BACKUP_SEMANTICS,
                               NULL)
                 : INVALID_HANDLE_VALUE;
    free(w);
    if (h == INVALID_HANDLE_VALUE)
        return -1;
    BY_HANDLE_FILE_INFORMATION fi;
    int ok = GetFileInformationByHandle(h, &fi) != 0;
    CloseHandle(h);
    if (!ok)
        return -1;
    id->volume = fi.dwVolumeSerialNumber;
    id->index = ((uint64_t)fi.nFileIndexHigh << 32) | fi.nFileIndexLow;
    return 0;
}

int plat_same_file(const char *a, const char *b)
{
    plat_file_id x, y;
    return plat_file_identity(a, &x) == 0 && plat_file_identity(b, &y) == 0 &&
           x.volume == y.volume && x.index == y.index;
}

long plat_read_head(const char *path, void *buf, size_t n)
{
    wchar_t *w = widen(path);
    HANDLE h = w ? CreateFileW(w, GENERIC_READ, SHARE_ALL, NULL, OPEN_EXISTING, 0, NULL)
                 : INVALID_HANDLE_VALUE;
    free(w);
    if (h == INVALID_HANDLE_VALUE)
        return -1;
    size_t got = 0;
    int ok = 1;
    while (ok && got < n) {
        DWORD chunk = n - got > (1u << 30) ? (1u << 30) : (DWORD)(n - got), r = 0;
        ok = ReadFile(h, (char *)buf + got, chunk, &r, NULL) != 0;
        if (ok && r == 0)
            break;
        got += r;
    }
    CloseHandle(h);
    return ok ? (long)got : -1;
}

FILE *plat_create_new(const char *path)
{
    wchar_t *w = widen(path);
    HANDLE h = w ? CreateFileW(w, GENERIC_WRITE, FILE_SHARE_READ, NULL, CREATE_NEW,
                               FILE_ATTRIBUTE_NORMAL, NULL)
                 : INVALID_HANDLE_VALUE;
    free(w);
    if (h == INVALID_HANDLE_VALUE) {
        DWORD e = GetLastError();
        errno = e == ERROR_FILE_EXISTS || e == ERROR_ALREADY_EXISTS ? EEXIST
                : e == ERROR_PATH_NOT_FOUND || e == ERROR_FILE_NOT_FOUND ? ENOENT
                : e == ERROR_ACCESS_DENIED ? EACCES : EIO;
        return NULL;
    }
    int fd = _open_osfhandle((intptr_t)h, _O_WRONLY | _O_BINARY);
    if (fd < 0) {
        CloseHandle(h);
        errno = EIO;
        return NULL;
    }
    FILE *f = _fdopen(fd, "wb");
    if (!f)
        _close(fd); /* closes the handle too */
    return f;
}

static int write_all(HANDLE h, const void *data, size_t size)
{
    const unsigned char *p = data;
    while (size) {
        DWORD chunk = size > (1u << 30) ? (1u << 30) : (DWORD)size, wrote = 0;
        if (!WriteFile(h, p, chunk, &wrote, NULL))
            return -1;
        if (wrote == 0) {
            SetLastError(ERROR_WRITE_FAULT);
            return -1;
        }
        p += wrote;
        size -= wrote;
    }
    return 0;
}

/* "<folder of target>\.<at most PLAT_TEMP_PREFIX units of its name>.<pid>.<n>.tmp" into
 * buf (WPATH_UNITS units), never half a surrogate pair. */
static int temp_name(const wchar_t *target, wchar_t *buf)
{
    static atomic_uint counter;
    unsigned id = atomic_fetch_add(&counter, 1);
    const wchar_t *base = target;
    for (const wchar_t *c = target; *c; c++)
        if (*c == L'\\' || *c == L'/')
            base = c + 1;
    size_t keep = wcslen(base);
    if (keep > PLAT_TEMP_PREFIX) {
        keep = PLAT_TEMP_PREFIX;
        if (base[keep - 1] >= 0xD800 && base[keep - 1] <= 0xDBFF)
            keep--; /* a high surrogate: its pair would be cut */
    }
    int n = swprintf(buf, WPATH_UNITS, L"%.*ls.%.*ls.%lu.%u.tmp", (int)(base - target), target,
                     (int)keep, base, (unsigned long)GetCurrentProcessId(), id);
    return n > 0 ? 0 : -1;
}

/* A new or regular file: the temporary file, flushed, moved over target with
 * MOVEFILE_WRITE_THROUGH (returns once the rename is on the disk: the counterpart of
 * POSIX's fsync of the folder). */
static int replace(const char *path, const wchar_t *target, const void *data, size_t size,
                   char *why, size_t why_size)
{
    char msg[256];
    wchar_t *tmp = malloc(WPATH_UNITS * sizeof *tmp);
    if (!tmp || temp_name(target, tmp) != 0) {
        free(tmp);
        return plat_why(why, why_size, "cannot write '%s': the name is too long", path);
    }
    HANDLE h = CreateFileW(tmp, GENERIC_WRITE, 0, NULL, CREATE_NEW, FILE_ATTRIBUTE_NORMAL, NULL);
    if (h == INVALID_HANDLE_VALUE) {
        DWORD e = GetLastError();
        free(tmp);
        return plat_why(why, why_size, "cannot write '%s': %s", path, message(e, msg, sizeof msg));
    }
    DWORD e = 0;
    if (write_all(h, data, size) != 0 || !FlushFileBuffers(h))
        e = GetLastError();
    if (!CloseHandle(h) && !e)
        e = GetLastError();
    if (!e && !MoveFileExW(tmp, target, MOVEFILE_REPLACE_EXISTING | MOVEFILE_WRITE_THROUGH))
        e = GetLastError();
    if (e)
        DeleteFileW(tmp);
    free(tmp);
    return e ? plat_why(why, why_size, "cannot write '%s': %s", path, message(e, msg, sizeof msg)) : 0;
}

int plat_write_file(const char *path, const void *data, size_t size, int flags, char *why,
                    size_t why_size)
{
    char msg[256];
    if (!path || !*path)
        return plat_why(why, why_size, "no file name");
    wchar_t *w = widen(path);
    if (!w)
        return plat_why(why, why_size, "cannot write '%s': not a valid UTF-8 name", path);
    int rc;
    DWORD attr = GetFileAttributesW(w);
    HANDLE h = INVALID_HANDLE_VALUE;
    if (attr != INVALID_FILE_ATTRIBUTES && (attr & FILE_ATTRIBUTE_DIRECTORY)) {
        rc = plat_write_refused(path, PLAT_KIND_DIR, flags, why, why_size);
    } else if ((h = CreateFileW(w, GENERIC_WRITE, SHARE_ALL, NULL, OPEN_EXISTING, 0, NULL)) ==
               INVALID_HANDLE_VALUE) {
        rc = replace(path, w, data, size, why, why_size); /* new, or reported by the rename */
    } else if (GetFileType(h) == FILE_TYPE_DISK) {
        /* the file a link or junction leads to is the one replaced */
        wchar_t *final = malloc(WPATH_UNITS * sizeof *final);
        DWORD n = final ? GetFinalPathNameByHandleW(h, final, WPATH_UNITS, 0) : 0;
        CloseHandle(h);
        rc = replace(path, n > 0 && n < WPATH_UNITS ? final : w, data, size, why, why_size);
        free(final);
    } else if (flags & PLAT_WRITE_STREAM) { /* NUL, CON, a named pipe: in place */
        DWORD e = write_all(h, data, size) == 0 ? 0 : GetLastError();
        CloseHandle(h);
        rc = e ? plat_why(why, why_size, "cannot write '%s': %s", path, message(e, msg, sizeof msg))
               : 0;
    } else {
        DWORD t = GetFileType(h);
        CloseHandle(h);
        rc = plat_write_refused(path, t == FILE_TYPE_CHAR ? PLAT_KIND_CHAR : t == FILE_TYPE_PIPE
                                ? PLAT_KIND_PIPE : PLAT_KIND_OTHER, flags, why, why_size);
    }
    free(w);
    return rc;
}

int plat_write_file_atomic(const char *path, const void *data, size_t size)
{
    return plat_write_file(path, data, size, 0, NULL, 0);
}
#endif /* _WIN32 */
