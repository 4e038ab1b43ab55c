/*
 * platform.h - the only OS-specific code: dynamic loading, clocks, files, directories,
 * environment. Everything above this layer is portable C11.
 */
#ifndef VKT_PLATFORM_H
#define VKT_PLATFORM_H

#include <stddef.h>
#include <stdint.h>

/* Dynamic libraries. On failure returns NULL and writes the system's reason to `why`. */
void *vkt_dl_open(const char *path, char *why, size_t why_size);
void *vkt_dl_symbol(void *lib, const char *name);
void vkt_dl_close(void *lib);
/* The platform's default name of the Vulkan loader ("libvulkan.so.1" on Linux). */
const char *vkt_dl_vulkan_name(void);

/* Monotonic clock in seconds; process CPU time in seconds. */
double vkt_now(void);
double vkt_cpu_time(void);

/* Environment variable or NULL. */
const char *vkt_getenv(const char *name);

/* Creates a directory and its parents (like mkdir -p). Returns 0 on success. */
int vkt_mkdirs(const char *path);

/* Reads a whole file into a malloc'd buffer; returns 0 on success. */
int vkt_read_file(const char *path, void **data, size_t *size);
/* Writes a file atomically: temporary file in the same directory, fsync, rename, fsync
 * of the directory. A crash at any moment leaves either the old or the new file. */
int vkt_write_file_atomic(const char *path, const void *data, size_t size);

/* Whether stdout is a terminal. */
int vkt_stdout_is_tty(void);

#endif /* VKT_PLATFORM_H */
