/* fuzz_file.h - the fuzz targets' input as a file path, for readers that take a path.
 * The bytes go into an in-memory file (memfd_create), reused across calls and reopened
 * through /proc/self/fd, so nothing touches the disk and each open starts at offset 0.
 * Falls back to a temporary file where memfd_create is missing. */
#ifndef VKT_FUZZ_FILE_H
#define VKT_FUZZ_FILE_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memfd_create */
#endif
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

/* Replaces the file's contents with data[0, size) and returns its path; aborts if the
 * file cannot be written (a harness failure, not a finding). */
static const char *fuzz_file(const uint8_t *data, size_t size)
{
    static int fd = -1;
    static char path[64];
    if (fd < 0) {
#ifdef MFD_CLOEXEC
        fd = memfd_create("vkt-fuzz", MFD_CLOEXEC);
#endif
        if (fd >= 0) {
            snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
        } else {
            snprintf(path, sizeof path, "/tmp/vkt-fuzz-XXXXXX");
            fd = mkstemp(path);
        }
        if (fd < 0) {
            perror("fuzz_file");
            abort();
        }
    }
    if (ftruncate(fd, 0) != 0) {
        perror("fuzz_file: ftruncate");
        abort();
    }
    for (size_t done = 0; done < size;) {
        ssize_t n = pwrite(fd, data + done, size - done, (off_t)done);
        if (n <= 0) {
            perror("fuzz_file: pwrite");
            abort();
        }
        done += (size_t)n;
    }
    return path;
}

#endif
