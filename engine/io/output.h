/* output.h - the rule by which files are written for the user (engine/io/output.c; the
 * public face is vkt_file_write). */
#ifndef VKT_IO_OUTPUT_H
#define VKT_IO_OUTPUT_H

#include <stddef.h>

#include "vkt.h"

/* Whether `path` may be written as an output: VKT_ERROR_INVALID_ARGUMENT, naming the
 * file, if it is the same file (by identity, links followed) as one of `inputs` (n_inputs
 * paths, NULL entries skipped; may be NULL), an existing vktrain checkpoint, a folder, a
 * block device or a socket. Messages in errmsg (VKT_ERRMSG_SIZE, may be NULL) and the
 * thread's last error. */
vkt_status io_output_check(const char *path, const char *const *inputs, size_t n_inputs,
                           char *errmsg);
/* io_output_check, then plat_write_file(path, ..., PLAT_WRITE_STREAM): a regular file
 * replaced whole, a device or a pipe written in place. A failed write: VKT_ERROR_IO. */
vkt_status io_output_write(const char *path, const void *data, size_t size,
                           const char *const *inputs, size_t n_inputs, char *errmsg);

#endif
