/* Host-side data sets: samples of fp32 features and int32 labels. */
#include "data.h"

#include <stdlib.h>
#include <string.h>

#include "idx.h"

vkt_status vkt_dataset_create(uint32_t count, uint32_t features, uint32_t classes,
                              const float *x, const int32_t *y, vkt_dataset **out)
{
    if (!out)
        return data_fail(VKT_ERROR_INVALID_ARGUMENT, "vkt_dataset_create: out is NULL");
    *out = NULL;
    if (!x || count == 0 || features == 0)
        return data_fail(VKT_ERROR_INVALID_ARGUMENT,
                             "vkt_dataset_create: need samples (count %u, features %u, x %s)",
                             count, features, x ? "given" : "NULL");
    for (uint32_t i = 0; y && i < count; i++)
        if (y[i] < 0 || (uint32_t)y[i] >= classes)
            return data_fail(VKT_ERROR_FORMAT,
                                 "vkt_dataset_create: label %d of sample %u is outside "
                                 "[0, %u)", y[i], i, classes);
    vkt_dataset *d = calloc(1, sizeof *d);
    uint64_t n = (uint64_t)count * features;
    if (d) {
        d->x = malloc(n * sizeof *d->x);
        d->y = calloc(count, sizeof *d->y);
    }
    if (!d || !d->x || !d->y) {
        vkt_dataset_destroy(d);
        return data_fail(VKT_ERROR_OUT_OF_MEMORY, "out of host memory for %u samples",
                             count);
    }
    memcpy(d->x, x, n * sizeof *d->x);
    if (y)
        memcpy(d->y, y, count * sizeof *d->y);
    d->count = count;
    d->features = features;
    d->classes = y ? classes : 0;
    *out = d;
    return VKT_OK;
}

static vkt_status from_split(const mnist_split *s, vkt_dataset **out)
{
    return vkt_dataset_create(s->count, s->rows * s->cols, VKT_MNIST_CLASSES, s->images,
                              s->labels, out);
}

vkt_status vkt_dataset_load_mnist(const char *dir, vkt_dataset **train, vkt_dataset **test)
{
    if (train)
        *train = NULL;
    if (test)
        *test = NULL;
    if (!dir || !train || !test)
        return data_fail(VKT_ERROR_INVALID_ARGUMENT, "vkt_dataset_load_mnist: NULL argument");
    mnist_data m;
    char msg[1024];
    vkt_status st = mnist_load(dir, &m, msg, sizeof msg);
    if (st != VKT_OK)
        return data_fail(st, "%s", msg);
    st = from_split(&m.train, train);
    if (st == VKT_OK)
        st = from_split(&m.test, test);
    mnist_free(&m);
    if (st != VKT_OK) {
        vkt_dataset_destroy(*train);
        *train = NULL;
    }
    return st;
}

void vkt_dataset_destroy(vkt_dataset *d)
{
    if (!d)
        return;
    free(d->x);
    free(d->y);
    free(d);
}

uint32_t vkt_dataset_count(const vkt_dataset *d) { return d ? d->count : 0; }
uint32_t vkt_dataset_features(const vkt_dataset *d) { return d ? d->features : 0; }
uint32_t vkt_dataset_classes(const vkt_dataset *d) { return d ? d->classes : 0; }
const float *vkt_dataset_x(const vkt_dataset *d) { return d ? d->x : NULL; }
const int32_t *vkt_dataset_y(const vkt_dataset *d) { return d ? d->y : NULL; }
