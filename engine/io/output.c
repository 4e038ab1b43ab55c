/* output.c - the rule every file vktrain writes for the user follows (README, "Outputs
 * never clobber"; vkt_file_write in vkt.h): never an input of the same command, never a
 * checkpoint, never a folder or a block device; a device or a pipe is written in place,
 * a regular file replaced whole (engine/platform: plat_write_file). */
#include "io/output.h"

#include <string.h>

#include "core/error.h"
#include "io/checkpoint.h"
#include "platform/platform.h"

/* Whether the regular file `path` starts with a checkpoint's magic. */
static int is_checkpoint(const char *path)
{
    char head[sizeof CKPT_MAGIC];
    return plat_read_head(path, head, sizeof head) == (long)sizeof head &&
           memcmp(head, CKPT_MAGIC, sizeof head) == 0;
}

vkt_status io_output_check(const char *path, const char *const *inputs, size_t n_inputs,
                           char *errmsg)
{
    if (!path || !*path)
        return err_fail(errmsg, VKT_ERROR_INVALID_ARGUMENT, "no output file named");
    for (size_t i = 0; inputs && i < n_inputs; i++) {
        if (!inputs[i] || !plat_same_file(path, inputs[i]))
            continue;
        if (strcmp(path, inputs[i]) == 0)
            return err_fail(errmsg, VKT_ERROR_INVALID_ARGUMENT,
                            "the output '%s' is an input of this command: an output never "
                            "replaces an input; choose another file", path);
        return err_fail(errmsg, VKT_ERROR_INVALID_ARGUMENT,
                        "the output '%s' is the same file as the input '%s': an output never "
                        "replaces an input; choose another file", path, inputs[i]);
    }
    plat_file_kind k = plat_file_kind_of(path);
    if (k == PLAT_KIND_FILE && is_checkpoint(path))
        return err_fail(errmsg, VKT_ERROR_INVALID_ARGUMENT,
                        "the output '%s' is a vktrain checkpoint: an output never replaces "
                        "one; choose another file", path);
    if (k == PLAT_KIND_DIR || k == PLAT_KIND_BLOCK || k == PLAT_KIND_OTHER)
        return err_fail(errmsg, VKT_ERROR_INVALID_ARGUMENT,
                        "the output '%s' is %s, which is never replaced: name a regular file "
                        "(replaced whole), a character device such as /dev/null or a pipe "
                        "(written in place)", path, plat_file_kind_name(k));
    return VKT_OK;
}

vkt_status io_output_write(const char *path, const void *data, size_t size,
                           const char *const *inputs, size_t n_inputs, char *errmsg)
{
    vkt_status st = io_output_check(path, inputs, n_inputs, errmsg);
    if (st != VKT_OK)
        return st;
    char why[VKT_ERRMSG_SIZE];
    if (plat_write_file(path, data, size, PLAT_WRITE_STREAM, why, sizeof why) != 0)
        return err_fail(errmsg, VKT_ERROR_IO, "%s", why);
    return VKT_OK;
}

vkt_status vkt_file_write(const char *path, const void *data, size_t size,
                          const char *const *inputs, size_t n_inputs)
{
    if (!data && size)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "vkt_file_write: data is NULL");
    return io_output_write(path, data, size, inputs, n_inputs, NULL);
}
