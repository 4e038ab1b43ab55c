/* Fuzz target: train_args_parse, `vkt train`'s option parser (no Vulkan). The input is
 * split at NUL bytes into argv[1..]; at most 64 arguments. Messages go to stderr and
 * --help to stdout: scripts/fuzz.sh closes both (-close_fd_mask=3). A parse must return
 * 0, 2 or 3, and a success must leave the model-dependent fields set. */
#include <stdlib.h>
#include <string.h>

#include "train.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { MAX_ARGS = 64 };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *buf = malloc(size + 1); /* one copy, NUL-terminated: every argument ends */
    if (!buf)
        abort();
    memcpy(buf, data, size);
    buf[size] = '\0';
    char *argv[MAX_ARGS + 2] = {"train"};
    int argc = 1;
    for (size_t i = 0; i < size && argc <= MAX_ARGS; i += strlen(buf + i) + 1)
        argv[argc++] = buf + i;
    argv[argc] = NULL;
    train_args a;
    int rc = train_args_parse(argc, argv, &a);
    if (rc != 0 && rc != 2 && rc != 3)
        abort();
    if (rc == 0 && (!a.model || !a.optimizer || !a.schedule || a.batch == 0 || a.epochs == 0))
        abort();
    free(buf);
    return 0;
}
