/* The system, POSIX side (platform.h): processors, memory, thread CPU time, the
 * environment, temporary folders. */
#include "platform.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

void *plat_aligned_alloc(size_t alignment, size_t bytes)
{
    void *p = NULL;
    return posix_memalign(&p, alignment < sizeof(void *) ? sizeof(void *) : alignment,
                          bytes ? bytes : 1) == 0 ? p : NULL;
}

void plat_aligned_free(void *p) { free(p); }

long plat_cpu_count(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? n : 1;
}

uint64_t plat_physical_memory(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGE_SIZE);
    return pages > 0 && size > 0 ? (uint64_t)pages * (uint64_t)size : 0;
}

double plat_thread_cpu_time(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0)
        return 0;
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int plat_setenv(const char *name, const char *value)
{
    if (!name || !*name || strchr(name, '='))
        return -1;
    return value ? setenv(name, value, 1) : unsetenv(name);
}

int plat_make_temp_dir(const char *prefix, char *buf, size_t size)
{
    if (!buf || size == 0)
        return -1;
    buf[0] = '\0';
    if (!prefix || strchr(prefix, '/'))
        return -1;
    const char *tmp = getenv("TMPDIR");
    if (!tmp || !*tmp)
        tmp = "/tmp";
    size_t len = strlen(tmp);
    while (len > 1 && tmp[len - 1] == '/')
        len--;
    int n = snprintf(buf, size, "%.*s/%sXXXXXX", (int)len, tmp, prefix);
    if (n < 0 || (size_t)n >= size || !mkdtemp(buf)) { /* mkdtemp: mode 0700 */
        buf[0] = '\0';
        return -1;
    }
    return 0;
}

int plat_remove_dir(const char *path) { return rmdir(path); }
