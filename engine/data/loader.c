/* Batches in a seeded random order, a new permutation every epoch. The permutation of
 * epoch e depends only on (seed, e), so a position (epoch, batches taken) is enough to
 * resume exactly. */
#include "core/rand.h"
#include "data.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

vkt_status data_fail(vkt_status status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    err_failv(NULL, status, fmt, ap);
    va_end(ap);
    return status;
}

/* Fisher-Yates over the identity, driven by (seed, epoch). */
void loader_permutation(const vkt_loader *l, uint64_t epoch, uint32_t *perm)
{
    uint32_t n = l->data->count;
    for (uint32_t i = 0; i < n; i++)
        perm[i] = i;
    if (!l->shuffle)
        return;
    uint64_t state = l->seed ^ (epoch * 0xD1B54A32D192ED03ull);
    for (uint32_t i = n - 1; i > 0; i--) {
        uint32_t j = (uint32_t)(core_splitmix64(&state) % ((uint64_t)i + 1));
        uint32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

static void make_permutation(vkt_loader *l)
{
    loader_permutation(l, l->epoch, l->perm);
}

uint32_t loader_gather(const vkt_loader *l, const uint32_t *perm, uint64_t index, float *x,
                       int32_t *y)
{
    const vkt_dataset *d = l->data;
    uint64_t first = index * l->batch;
    uint32_t rows = (uint32_t)(d->count - first < l->batch ? d->count - first : l->batch);
    for (uint32_t r = 0; r < rows; r++) {
        uint32_t s = perm[first + r];
        memcpy(x + (uint64_t)r * d->features, d->x + (uint64_t)s * d->features,
               d->features * sizeof *x);
        if (y)
            y[r] = d->y[s];
    }
    return rows;
}

vkt_status vkt_loader_create(const vkt_dataset *data, const vkt_loader_options *o,
                             vkt_loader **out)
{
    if (!out)
        return data_fail(VKT_ERROR_INVALID_ARGUMENT, "vkt_loader_create: out is NULL");
    *out = NULL;
    if (!data || !o)
        return data_fail(VKT_ERROR_INVALID_ARGUMENT,
                             "vkt_loader_create: data set and options are required");
    if (o->batch == 0 || (o->batch > data->count && !o->keep_partial))
        return data_fail(VKT_ERROR_SHAPE,
                             "vkt_loader_create: batch %u does not fit a data set of %u samples",
                             o->batch, data->count);
    vkt_loader *l = calloc(1, sizeof *l);
    if (l)
        l->perm = malloc(data->count * sizeof *l->perm);
    if (!l || !l->perm) {
        free(l);
        return data_fail(VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    }
    l->data = data;
    l->batch = o->batch;
    l->seed = o->seed;
    l->shuffle = !o->no_shuffle;
    l->keep_partial = o->keep_partial;
    make_permutation(l);
    if (o->prefetch)
        (void)prefetch_start(l, o->prefetch); /* on failure: synchronous, same batches */
    *out = l;
    return VKT_OK;
}

void vkt_loader_destroy(vkt_loader *l)
{
    if (!l)
        return;
    prefetch_stop(l);
    free(l->perm);
    free(l);
}

uint32_t vkt_loader_batches_per_epoch(const vkt_loader *l)
{
    if (!l)
        return 0;
    uint32_t n = l->data->count;
    return l->keep_partial ? (n + l->batch - 1) / l->batch : n / l->batch;
}

vkt_status vkt_loader_next(vkt_loader *l, float *x, int32_t *y, uint32_t *out_rows)
{
    if (out_rows)
        *out_rows = 0;
    if (!l || !x)
        return data_fail(VKT_ERROR_INVALID_ARGUMENT, "vkt_loader_next: NULL argument");
    uint32_t rows;
    if (l->pf) {
        rows = prefetch_next(l, x, y);
    } else {
        if (l->taken >= vkt_loader_batches_per_epoch(l)) {
            l->epoch++;
            l->taken = 0;
            make_permutation(l);
        }
        rows = loader_gather(l, l->perm, l->taken, x, y);
        l->taken++;
    }
    if (out_rows)
        *out_rows = rows;
    return VKT_OK;
}

void vkt_loader_position(const vkt_loader *l, uint64_t *epoch, uint64_t *batch_index)
{
    uint64_t e = 0, b = 0;
    if (l && l->pf) {
        prefetch_position(l, &e, &b, NULL);
    } else if (l) {
        e = l->epoch;
        b = l->taken;
    }
    if (epoch)
        *epoch = e;
    if (batch_index)
        *batch_index = b;
}

double vkt_loader_wait_seconds(const vkt_loader *l)
{
    double w = 0;
    if (l && l->pf)
        prefetch_position(l, NULL, NULL, &w);
    else if (l)
        w = l->wait_seconds;
    return w;
}

vkt_status vkt_loader_seek(vkt_loader *l, uint64_t epoch, uint64_t batch_index)
{
    if (!l)
        return data_fail(VKT_ERROR_INVALID_ARGUMENT, "vkt_loader_seek: loader is NULL");
    if (batch_index > vkt_loader_batches_per_epoch(l))
        return data_fail(VKT_ERROR_INVALID_ARGUMENT,
                             "vkt_loader_seek: batch %llu past the %u batches of an epoch",
                             (unsigned long long)batch_index, vkt_loader_batches_per_epoch(l));
    if (l->pf) {
        prefetch_seek(l, epoch, batch_index);
        return VKT_OK;
    }
    l->epoch = epoch;
    l->taken = batch_index;
    make_permutation(l);
    return VKT_OK;
}
