/* Internal definitions of the data layer (host side; knows nothing of Vulkan). */
#ifndef VKT_DATA_DATA_H
#define VKT_DATA_DATA_H

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
    uint64_t epoch, taken; /* position: epoch, batches delivered from it */
    double wait_seconds;   /* vkt_loader_next waiting for a prefetched batch */
    struct prefetch *pf;   /* background preparation (prefetch.c), or NULL */
};

/* Permutation of an epoch, a function of (seed, epoch) only. */
void loader_permutation(const vkt_loader *l, uint64_t epoch, uint32_t *perm);
/* Gathers batch `index` of the epoch whose order is perm; returns its rows. */
uint32_t loader_gather(const vkt_loader *l, const uint32_t *perm, uint64_t index, float *x,
                       int32_t *y);

/* prefetch.c: a thread preparing the batches after position (epoch, index) into a
 * ring of `ahead` buffers. Start returns 0 on success (else the loader stays
 * synchronous). Next copies out the oldest prepared batch, waiting if none is ready,
 * and advances l->epoch/taken; seek discards prepared batches. */
int prefetch_start(vkt_loader *l, uint32_t ahead);
void prefetch_stop(vkt_loader *l);
uint32_t prefetch_next(vkt_loader *l, float *x, int32_t *y);
void prefetch_seek(vkt_loader *l, uint64_t epoch, uint64_t index);
/* Stops preparing (after the batch in hand) until the next vkt_loader_next or seek, so
 * the data set is not read while the caller is away (the trainer between fits). */
void loader_pause(vkt_loader *l);
void prefetch_position(const vkt_loader *l, uint64_t *epoch, uint64_t *index, double *wait);

/* Sets the thread's last error (vkt_last_error) and returns status. */
vkt_status data_fail(vkt_status status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* text.c: the token ids of a split (0 train, 1 validation), and the window of `context`
 * ids starting at `start` with its next-token targets. */
const uint8_t *text_ids(const vkt_text *t, int split);
void text_window(const vkt_text *t, int split, uint64_t start, uint32_t context, float *ids,
                     int32_t *targets);

#endif
