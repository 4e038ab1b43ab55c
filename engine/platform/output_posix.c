/* Files written for the user, POSIX side (platform.h, "Output files"): what a path names
 * (links followed), its identity, files created only when new, and plat_write_file, which
 * replaces a regular file through a temporary file and a rename but writes into a device
 * or a pipe in place and refuses anything else. */
#include "platform.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#define PATH_BYTES 4096

/* Follows `path` while its last component is a symbolic link, into buf: the name that a
 * rename must replace so that the link keeps pointing where it did. A link to a missing
 * file gives the missing file's name (created there, as a shell's `>` would). Returns 0,
 * or -1 with errno (ELOOP after 40 links, ENAMETOOLONG). */
static int follow_links(const char *path, char *buf, size_t size)
{
    if (snprintf(buf, size, "%s", path) >= (int)size) {
        errno = ENAMETOOLONG;
        return -1;
    }
    for (int hops = 0;; hops++) {
        struct stat sb;
        if (lstat(buf, &sb) != 0 || !S_ISLNK(sb.st_mode))
            return 0; /* missing (created here) or not a link */
        if (hops == 40) {
            errno = ELOOP;
            return -1;
        }
        char link[PATH_BYTES];
        ssize_t n = readlink(buf, link, sizeof link - 1);
        if (n < 0)
            return -1;
        link[n] = '\0';
        char next[PATH_BYTES];
        const char *slash = strrchr(buf, '/');
        int w = link[0] == '/' || !slash
                    ? snprintf(next, sizeof next, "%s", link)
                    : snprintf(next, sizeof next, "%.*s/%s", (int)(slash - buf), buf, link);
        if (w < 0 || (size_t)w >= sizeof next || (size_t)w >= size) {
            errno = ENAMETOOLONG;
            return -1;
        }
        memcpy(buf, next, (size_t)w + 1);
    }
}

int plat_final_path(const char *path, char *buf, size_t size)
{
    return follow_links(path, buf, size);
}

plat_file_kind plat_file_kind_of(const char *path)
{
    struct stat sb;
    if (stat(path, &sb) != 0)
        return PLAT_KIND_NONE;
    return S_ISREG(sb.st_mode)    ? PLAT_KIND_FILE
           : S_ISDIR(sb.st_mode)  ? PLAT_KIND_DIR
           : S_ISCHR(sb.st_mode)  ? PLAT_KIND_CHAR
           : S_ISFIFO(sb.st_mode) ? PLAT_KIND_PIPE
           : S_ISBLK(sb.st_mode)  ? PLAT_KIND_BLOCK
                                  : PLAT_KIND_OTHER;
}

int plat_file_identity(const char *path, plat_file_id *id)
{
    struct stat sb;
    if (stat(path, &sb) != 0)
        return -1;
    id->volume = (uint64_t)sb.st_dev;
    id->index = (uint64_t)sb.st_ino;
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
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return -1;
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, (char *)buf + got, n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            close(fd);
            return -1;
        }
        if (r == 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    return (long)got;
}

FILE *plat_create_new(const char *path)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0)
        return NULL;
    FILE *f = fdopen(fd, "wb");
    if (!f) {
        int e = errno;
        close(fd);
        unlink(path);
        errno = e;
    }
    return f;
}

/* Data on stable storage. On macOS fsync only hands it to the drive, whose cache can
 * still lose it at a power cut; F_FULLFSYNC flushes that cache too (some file systems
 * refuse it: then fsync). */
static int flush_fd(int fd)
{
#if defined(__APPLE__)
    if (fcntl(fd, F_FULLFSYNC) == 0)
        return 0;
#endif
    return fsync(fd);
}

static int fsync_dir_of(const char *path)
{
    char dir[PATH_BYTES];
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == path)
        snprintf(dir, sizeof dir, "/");
    else
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    int fd = open(dir, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int r = flush_fd(fd);
    close(fd);
    return r;
}

static int write_all(int fd, const void *data, size_t size)
{
    const unsigned char *p = data;
    while (size) {
        ssize_t w = write(fd, p, size);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            if (w == 0)
                errno = EIO;
            return -1;
        }
        p += w;
        size -= (size_t)w;
    }
    return 0;
}

/* The temporary file's name for `target`, in its folder: "." + the first bytes of the
 * name (at most PLAT_TEMP_PREFIX, never half a UTF-8 character) + ".<pid>.<n>.tmp", so it
 * fits whatever the final name's length. Unique per process and call: threads writing the
 * same path never share one. */
static int temp_name(const char *target, char *buf, size_t size)
{
    static atomic_uint counter;
    unsigned id = atomic_fetch_add(&counter, 1);
    const char *slash = strrchr(target, '/'), *base = slash ? slash + 1 : target;
    size_t keep = strlen(base);
    if (keep > PLAT_TEMP_PREFIX) {
        keep = PLAT_TEMP_PREFIX;
        while (keep > 0 && ((unsigned char)base[keep] & 0xC0) == 0x80)
            keep--; /* base[keep] continues a character: cut before that character */
    }
    int n = snprintf(buf, size, "%.*s.%.*s.%ld.%u.tmp", (int)(base - target), target,
                     (int)keep, base, (long)getpid(), id);
    return n > 0 && (size_t)n < size ? 0 : -1;
}

/* A new or regular file: the temporary file, flushed, renamed over target, the folder
 * flushed. `old` (NULL if none): the file replaced, whose permission bits are kept. */
static int replace(const char *path, const char *target, const struct stat *old,
                   const void *data, size_t size, char *why, size_t why_size)
{
    char tmp[PATH_BYTES + 64];
    if (temp_name(target, tmp, sizeof tmp) != 0)
        return plat_why(why, why_size, "cannot write '%s': %s", path, strerror(ENAMETOOLONG));
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0)
        return plat_why(why, why_size, "cannot write '%s': %s", path, strerror(errno));
    int e = 0;
    if (old && fchmod(fd, old->st_mode & 0777) != 0)
        e = errno;
    if (!e && write_all(fd, data, size) != 0)
        e = errno;
    if (!e && flush_fd(fd) != 0)
        e = errno;
    if (close(fd) != 0 && !e)
        e = errno;
    if (!e && rename(tmp, target) != 0)
        e = errno;
    if (e) {
        unlink(tmp);
        return plat_why(why, why_size, "cannot write '%s': %s", path, strerror(e));
    }
    if (fsync_dir_of(target) != 0)
        return plat_why(why, why_size, "cannot flush the folder of '%s': %s", path, strerror(errno));
    return 0;
}

/* A character device or a pipe: opened for writing (neither created nor truncated) and
 * written in place. */
static int stream(const char *path, const void *data, size_t size, char *why, size_t why_size)
{
    int fd = open(path, O_WRONLY | O_NOCTTY | O_CLOEXEC);
    if (fd < 0)
        return plat_why(why, why_size, "cannot open '%s' for writing: %s", path, strerror(errno));
    struct stat sb;
    int e = fstat(fd, &sb) != 0 ? errno : 0;
    if (!e && !S_ISCHR(sb.st_mode) && !S_ISFIFO(sb.st_mode)) {
        close(fd); /* replaced since it was looked at: written by no rule */
        return plat_why(why, why_size, "'%s' changed while it was being opened", path);
    }
    if (!e && write_all(fd, data, size) != 0)
        e = errno;
    if (close(fd) != 0 && !e)
        e = errno;
    return e ? plat_why(why, why_size, "cannot write '%s': %s", path, strerror(e)) : 0;
}

int plat_write_file(const char *path, const void *data, size_t size, int flags, char *why,
                    size_t why_size)
{
    char target[PATH_BYTES];
    if (!path || !*path)
        return plat_why(why, why_size, "no file name");
    if (follow_links(path, target, sizeof target) != 0)
        return plat_why(why, why_size, "cannot write '%s': %s", path, strerror(errno));
    struct stat sb;
    if (stat(target, &sb) != 0) {
        if (errno != ENOENT)
            return plat_why(why, why_size, "cannot write '%s': %s", path, strerror(errno));
        return replace(path, target, NULL, data, size, why, why_size);
    }
    if (S_ISREG(sb.st_mode))
        return replace(path, target, &sb, data, size, why, why_size);
    plat_file_kind k = plat_file_kind_of(target);
    if ((k == PLAT_KIND_CHAR || k == PLAT_KIND_PIPE) && (flags & PLAT_WRITE_STREAM))
        return stream(path, data, size, why, why_size);
    return plat_write_refused(path, k, flags, why, why_size);
}

int plat_write_file_atomic(const char *path, const void *data, size_t size)
{
    return plat_write_file(path, data, size, 0, NULL, 0);
}
