/* A loader's background thread: prepares the batches after the delivered position into
 * a ring of buffers (gather by the epoch's seeded permutation, the same as the
 * synchronous path), so vkt_loader_next only copies a ready batch out.
 *
 * Under the monitor: head/count of the ring, the producer's position (p_epoch, p_taken:
 * the next batch to prepare), busy (the producer is filling a slot outside the lock),
 * quit, and the loader's delivered position and wait time. Outside it the producer owns
 * l->perm and the slot it fills; the consumer owns the head slot it copies out (still
 * counted, so the producer does not reuse it). Seek waits until the producer is not
 * busy, then resets the ring and the producer's position. */
#include "data.h"

#include <stdlib.h>
#include <string.h>

#include "platform/platform.h"

struct prefetch {
    plat_thread *thread;
    plat_monitor *mon;
    uint32_t slots, head, count;
    float *x;      /* [slots, batch, features] */
    int32_t *y;    /* [slots, batch] */
    uint32_t *rows;
    uint64_t *slot_epoch, *slot_index;
    uint64_t p_epoch, p_taken;
    int busy, quit, paused;
};

static void produce(void *arg)
{
    vkt_loader *l = arg;
    struct prefetch *p = l->pf;
    uint64_t stride = (uint64_t)l->batch * l->data->features;
    uint32_t per_epoch = vkt_loader_batches_per_epoch(l);
    plat_monitor_lock(p->mon);
    for (;;) {
        while (!p->quit && (p->count == p->slots || p->paused))
            plat_monitor_wait(p->mon);
        if (p->quit)
            break;
        int new_epoch = 0;
        if (p->p_taken >= per_epoch) {
            p->p_epoch++;
            p->p_taken = 0;
            new_epoch = 1;
        }
        uint32_t slot = (p->head + p->count) % p->slots;
        uint64_t epoch = p->p_epoch, index = p->p_taken;
        p->busy = 1;
        plat_monitor_unlock(p->mon);
        if (new_epoch)
            loader_permutation(l, epoch, l->perm);
        uint32_t rows = loader_gather(l, l->perm, index, p->x + slot * stride,
                                      p->y + (uint64_t)slot * l->batch);
        plat_monitor_lock(p->mon);
        p->busy = 0;
        p->rows[slot] = rows;
        p->slot_epoch[slot] = epoch;
        p->slot_index[slot] = index;
        p->count++;
        p->p_taken++;
        plat_monitor_broadcast(p->mon);
    }
    plat_monitor_unlock(p->mon);
}

static void free_prefetch(struct prefetch *p)
{
    if (!p)
        return;
    plat_monitor_destroy(p->mon);
    free(p->x);
    free(p->y);
    free(p->rows);
    free(p->slot_epoch);
    free(p->slot_index);
    free(p);
}

int prefetch_start(vkt_loader *l, uint32_t ahead)
{
    uint32_t slots = ahead < 2 ? 2 : ahead;
    uint64_t stride = (uint64_t)l->batch * l->data->features;
    struct prefetch *p = calloc(1, sizeof *p);
    if (!p)
        return -1;
    p->slots = slots;
    p->mon = plat_monitor_create();
    p->x = malloc(slots * stride * sizeof *p->x);
    p->y = malloc((uint64_t)slots * l->batch * sizeof *p->y);
    p->rows = calloc(slots, sizeof *p->rows);
    p->slot_epoch = calloc(slots, sizeof *p->slot_epoch);
    p->slot_index = calloc(slots, sizeof *p->slot_index);
    if (!p->mon || !p->x || !p->y || !p->rows || !p->slot_epoch || !p->slot_index) {
        free_prefetch(p);
        return -1;
    }
    p->p_epoch = l->epoch; /* l->perm already holds this epoch's order */
    p->p_taken = l->taken;
    l->pf = p;
    if (plat_thread_start(&p->thread, produce, l) != 0) {
        l->pf = NULL;
        free_prefetch(p);
        return -1;
    }
    return 0;
}

void prefetch_stop(vkt_loader *l)
{
    struct prefetch *p = l->pf;
    if (!p)
        return;
    plat_monitor_lock(p->mon);
    p->quit = 1;
    plat_monitor_broadcast(p->mon);
    plat_monitor_unlock(p->mon);
    plat_thread_join(p->thread);
    l->pf = NULL;
    free_prefetch(p);
}

uint32_t prefetch_next(vkt_loader *l, float *x, int32_t *y)
{
    struct prefetch *p = l->pf;
    uint64_t stride = (uint64_t)l->batch * l->data->features;
    plat_monitor_lock(p->mon);
    if (p->paused) {
        p->paused = 0;
        plat_monitor_broadcast(p->mon);
    }
    if (p->count == 0) {
        double t0 = plat_now();
        while (p->count == 0)
            plat_monitor_wait(p->mon);
        l->wait_seconds += plat_now() - t0;
    }
    uint32_t slot = p->head, rows = p->rows[slot];
    plat_monitor_unlock(p->mon);
    memcpy(x, p->x + slot * stride, (uint64_t)rows * l->data->features * sizeof *x);
    if (y)
        memcpy(y, p->y + (uint64_t)slot * l->batch, rows * sizeof *y);
    plat_monitor_lock(p->mon);
    l->epoch = p->slot_epoch[slot];
    l->taken = p->slot_index[slot] + 1;
    p->head = (p->head + 1) % p->slots;
    p->count--;
    plat_monitor_broadcast(p->mon);
    plat_monitor_unlock(p->mon);
    return rows;
}

void prefetch_seek(vkt_loader *l, uint64_t epoch, uint64_t index)
{
    struct prefetch *p = l->pf;
    plat_monitor_lock(p->mon);
    while (p->busy)
        plat_monitor_wait(p->mon);
    p->head = p->count = 0; /* prepared batches are discarded */
    p->paused = 0;
    p->p_epoch = l->epoch = epoch;
    p->p_taken = l->taken = index;
    loader_permutation(l, epoch, l->perm);
    plat_monitor_broadcast(p->mon);
    plat_monitor_unlock(p->mon);
}

void prefetch_position(const vkt_loader *l, uint64_t *epoch, uint64_t *index, double *wait)
{
    struct prefetch *p = l->pf;
    plat_monitor_lock(p->mon);
    if (epoch)
        *epoch = l->epoch;
    if (index)
        *index = l->taken;
    if (wait)
        *wait = l->wait_seconds;
    plat_monitor_unlock(p->mon);
}

void loader_pause(vkt_loader *l)
{
    struct prefetch *p = l ? l->pf : NULL;
    if (!p)
        return;
    plat_monitor_lock(p->mon);
    p->paused = 1;
    while (p->busy)
        plat_monitor_wait(p->mon);
    plat_monitor_unlock(p->mon);
}
