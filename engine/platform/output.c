/* Files written for the user, the part both systems share (platform.h, "Output files"):
 * the names of what a path can be, and the one message refusing what is never replaced.
 * The system calls are in output_posix.c and output_win32.c. */
#include "platform.h"

#include <stdarg.h>
#include <stdio.h>

#if defined(_WIN32)
#define NULL_DEVICE "NUL"
#else
#define NULL_DEVICE "/dev/null"
#endif

int plat_why(char *why, size_t why_size, const char *fmt, ...)
{
    if (why && why_size) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, why_size, fmt, ap);
        va_end(ap);
    }
    return -1;
}

const char *plat_file_kind_name(plat_file_kind k)
{
    switch (k) {
    case PLAT_KIND_NONE: return "nothing";
    case PLAT_KIND_FILE: return "a regular file";
    case PLAT_KIND_DIR: return "a folder";
    case PLAT_KIND_CHAR: return "a character device";
    case PLAT_KIND_PIPE: return "a pipe";
    case PLAT_KIND_BLOCK: return "a block device";
    case PLAT_KIND_OTHER: break;
    }
    return "neither a regular file nor a folder";
}

int plat_write_refused(const char *path, plat_file_kind k, int flags, char *why,
                       size_t why_size)
{
    return plat_why(why, why_size, "'%s' is %s, which is never replaced: %s", path,
                    plat_file_kind_name(k),
                    flags & PLAT_WRITE_STREAM ? "name a regular file, a character device such "
                                                "as " NULL_DEVICE ", or a pipe"
                                              : "this file is written only as a regular file");
}
