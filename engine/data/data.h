/* Internal definitions of the data layer (host side; knows nothing of Vulkan). */
#ifndef VKT_DATA_H
#define VKT_DATA_H

#include <stdint.h>

#include "vkt.h"

struct vkt_dataset {
    uint32_t count, features, classes;
    float *x;   /* [count, features] */
    int32_t *y; /* [count] */
};

struct vkt_loader {
    const vkt_dataset *data;
    uint32_t batch;
    uint64_t seed;
    int shuffle, keep_partial;
    uint32_t *perm;        /* [count]: this epoch's order */
    uint64_t epoch, taken; /* position: epoch, batches taken in it */
};

/* Sets the thread's last error (vkt_last_error) and returns status. */
vkt_status vkt_data_fail(vkt_status status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
