/* POSIX implementation of platform.h (Linux, macOS, other Unix). */
#include "platform.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

void *plat_dl_open(const char *path, char *why, size_t why_size)
{
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib && why && why_size) {
        const char *e = dlerror();
        snprintf(why, why_size, "%s", e ? e : "unknown dlopen error");
    }
    return lib;
}

void *plat_dl_symbol(void *lib, const char *name) { return lib ? dlsym(lib, name) : NULL; }

void plat_dl_close(void *lib)
{
    if (lib)
        dlclose(lib);
}

const char *plat_dl_vulkan_name(void)
{
#if defined(__APPLE__)
    return "libvulkan.1.dylib";
#else
    return "libvulkan.so.1";
#endif
}

double plat_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double plat_cpu_time(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

const char *plat_getenv(const char *name)
{
    const char *v = getenv(name);
    return (v && *v) ? v : NULL;
}

int plat_mkdirs(const char *path)
{
    char buf[4096];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof buf)
        return -1;
    memcpy(buf, path, n + 1);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            return -1;
        *p = '/';
    }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST)
        return -1;
    return 0;
}

int plat_read_file(const char *path, void **data, size_t *size)
{
    *data = NULL;
    *size = 0;
    FILE *f = fopen(path, "rb");
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

int plat_stdout_is_tty(void) { return isatty(STDOUT_FILENO); }

int plat_list_dir(const char *dir, char ***names, size_t *count)
{
    *names = NULL;
    *count = 0;
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    size_t n = 0, cap = 0;
    char **v = NULL;
    struct dirent *e;
    int rc = 0;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
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
        if (!(v[n] = strdup(e->d_name))) {
            rc = -1;
            break;
        }
        n++;
    }
    closedir(d);
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

int plat_remove_file(const char *path) { return unlink(path); }

int plat_file_stat(const char *path, uint64_t *size, int64_t *mtime_ns)
{
    struct stat sb;
    if (stat(path, &sb) != 0)
        return -1;
    if (size)
        *size = (uint64_t)sb.st_size;
#if defined(__APPLE__)
    struct timespec m = sb.st_mtimespec;
#else
    struct timespec m = sb.st_mtim;
#endif
    if (mtime_ns)
        *mtime_ns = (int64_t)m.tv_sec * 1000000000 + m.tv_nsec;
    return 0;
}

long plat_process_id(void) { return (long)getpid(); }

struct plat_file_lock {
    int fd;
};

/* The holder's note: the file's first line, read through our own descriptor. */
static void read_note(int fd, char *buf, size_t size)
{
    if (!buf || !size)
        return;
    ssize_t got = pread(fd, buf, size - 1, 0);
    buf[got > 0 ? got : 0] = '\0';
    buf[strcspn(buf, "\n")] = '\0';
}

int plat_file_lock_try(const char *path, const char *note, plat_file_lock **out, char *other,
                      size_t other_size)
{
    *out = NULL;
    if (other && other_size)
        other[0] = '\0';
    /* O_NOFOLLOW and a regular file only: the note is written by truncating the file,
     * which must never reach a device, a pipe or a file a planted link names */
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
    struct stat sb;
    if (fd >= 0 && (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode))) {
        close(fd);
        if (other && other_size)
            snprintf(other, other_size, "'%s' is not a regular file", path);
        return -1;
    }
    if (fd < 0) {
        if (other && other_size)
            snprintf(other, other_size, "%s", errno == ELOOP ? "it is a symbolic link, not a "
                     "regular file" : strerror(errno));
        return -1;
    }
    int r;
    while ((r = flock(fd, LOCK_EX | LOCK_NB)) != 0 && errno == EINTR)
        ;
    if (r != 0) {
        int busy = errno == EWOULDBLOCK;
        if (busy)
            read_note(fd, other, other_size);
        else if (other && other_size)
            snprintf(other, other_size, "%s", strerror(errno));
        close(fd);
        return busy ? 1 : -1;
    }
    plat_file_lock *l = malloc(sizeof *l);
    if (!l) {
        close(fd); /* closing the only descriptor releases the lock */
        if (other && other_size)
            snprintf(other, other_size, "out of host memory");
        return -1;
    }
    l->fd = fd;
    /* the note of a previous holder (perhaps killed) is replaced; a reader may see the
     * file empty for a moment, and then names no one */
    char line[512];
    int n = snprintf(line, sizeof line, "%s\n", note ? note : "");
    if (ftruncate(fd, 0) == 0 && n > 1 && (size_t)n < sizeof line &&
        pwrite(fd, line, (size_t)n, 0) != n) {
        /* best effort: the lock holds without a note */
    }
    *out = l;
    return 0;
}

void plat_file_unlock(plat_file_lock *lock)
{
    if (!lock)
        return;
    close(lock->fd); /* the only descriptor of this open file: the lock goes with it */
    free(lock);
}
