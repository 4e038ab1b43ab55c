/* Small helpers shared by the vkt subcommands. */
#include <errno.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>

#include "cli.h"

#ifndef VKT_DEFAULT_DATA_DIR
#define VKT_DEFAULT_DATA_DIR "data/mnist"
#endif
#ifndef VKT_DEFAULT_TEXT
#define VKT_DEFAULT_TEXT "data/austen/pride_and_prejudice.txt"
#endif

double cli_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

const char *cli_default_data_dir(void)
{
    const char *env = getenv("VKT_DATA_DIR");
    if (env && *env)
        return env;
    struct stat st;
    return stat(VKT_DEFAULT_DATA_DIR, &st) == 0 ? VKT_DEFAULT_DATA_DIR : "data/mnist";
}

const char *cli_default_text(void)
{
    struct stat st;
    return stat(VKT_DEFAULT_TEXT, &st) == 0 ? VKT_DEFAULT_TEXT
                                            : "data/austen/pride_and_prejudice.txt";
}

int cli_parse_double(const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end != '\0' || errno == ERANGE || !(v >= lo && v <= hi))
        return 0;
    *out = v;
    return 1;
}

int cli_parse_uint(const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
    if (*s < '0' || *s > '9')
        return 0;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end != '\0' || errno == ERANGE || v < lo || v > hi)
        return 0;
    *out = v;
    return 1;
}
