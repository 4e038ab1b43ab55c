/* The wall clock and the host name (POSIX): the time stamp and the host part of
 * TensorBoard event-file names. The executable's folder: where an installed vkt finds
 * its data. */
#include "platform.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#if defined(__APPLE__)
#include <mach-o/dyld.h>
#endif

double plat_wall_time(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void plat_hostname(char *buf, size_t size)
{
    if (!buf || size == 0)
        return;
    if (gethostname(buf, size) != 0 || buf[0] == '\0')
        snprintf(buf, size, "localhost");
    buf[size - 1] = '\0';
}

int plat_exe_dir(char *buf, size_t size)
{
    if (!buf || size == 0)
        return -1;
    buf[0] = '\0';
    char raw[PATH_MAX];
#if defined(__linux__)
    ssize_t n = readlink("/proc/self/exe", raw, sizeof raw - 1);
    if (n <= 0)
        return -1;
    raw[n] = '\0';
#elif defined(__APPLE__)
    uint32_t len = sizeof raw;
    if (_NSGetExecutablePath(raw, &len) != 0)
        return -1;
#else
    return -1; /* no portable POSIX way: callers fall back (VKT_DATA_DIR) */
#endif
    char *real = realpath(raw, NULL); /* symbolic links and ".." resolved */
    if (!real)
        return -1;
    char *slash = strrchr(real, '/');
    if (slash)
        *(slash == real ? slash + 1 : slash) = '\0';
    int fits = strlen(real) < size;
    if (fits)
        memcpy(buf, real, strlen(real) + 1);
    free(real);
    return fits ? 0 : -1;
}
