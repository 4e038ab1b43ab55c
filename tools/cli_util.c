/* Small helpers shared by the vkt subcommands. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "platform/platform.h"

/* Where the shipped data is looked for, in order:
 *  1. $VKT_DATA_DIR (the digits only);
 *  2. <the executable's folder>/VKT_DATA_FROM_BIN (../share/vktrain as installed):
 *     an installed vkt, wherever the prefix was moved;
 *  3. the source tree it was built from (VKT_SOURCE_DATA), only when the executable runs
 *     from its build folder (VKT_BUILD_BIN_DIR): an installed copy never reads it;
 *  4. data/... under the current folder. */
#ifndef VKT_DATA_FROM_BIN
#define VKT_DATA_FROM_BIN "../share/vktrain"
#endif
#ifndef VKT_SOURCE_DATA
#define VKT_SOURCE_DATA "data"
#endif

/* "<dir>/<rel>" into buf if that exists; returns buf or NULL. */
static const char *existing(char *buf, size_t size, const char *dir, const char *rel)
{
    int n = snprintf(buf, size, "%s/%s", dir, rel);
    return n > 0 && (size_t)n < size && plat_file_stat(buf, NULL, NULL) == 0 ? buf : NULL;
}

/* The shipped file or folder `rel` ("mnist", "austen/...") by the order above, after
 * $VKT_DATA_DIR. */
static const char *shipped(char *buf, size_t size, const char *rel)
{
    char exe[4096], dir[4096 + 64];
    if (plat_exe_dir(exe, sizeof exe) == 0) {
        snprintf(dir, sizeof dir, "%s/%s", exe, VKT_DATA_FROM_BIN);
        if (existing(buf, size, dir, rel))
            return buf;
#ifdef VKT_BUILD_BIN_DIR
        /* Both spelled with symbolic links resolved (CMake's file(REAL_PATH), and
         * plat_exe_dir). */
        if (strcmp(VKT_BUILD_BIN_DIR, exe) == 0 && existing(buf, size, VKT_SOURCE_DATA, rel))
            return buf;
#endif
    }
    snprintf(buf, size, "data/%s", rel);
    return buf;
}

double cli_now(void) { return plat_now(); }

const char *cli_default_data_dir(void)
{
    const char *env = getenv("VKT_DATA_DIR");
    if (env && *env)
        return env;
    static char buf[8192];
    return shipped(buf, sizeof buf, "mnist");
}

const char *cli_default_text(void)
{
    static char buf[8192];
    return shipped(buf, sizeof buf, "austen/pride_and_prejudice.txt");
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
