/* The wall clock and the host name (POSIX): the time stamp and the host part of
 * TensorBoard event-file names. */
#include "platform.h"

#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

double vkt_wall_time(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void vkt_hostname(char *buf, size_t size)
{
    if (!buf || size == 0)
        return;
    if (gethostname(buf, size) != 0 || buf[0] == '\0')
        snprintf(buf, size, "localhost");
    buf[size - 1] = '\0';
}
