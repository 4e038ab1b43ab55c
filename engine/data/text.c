/* text.c - a character-level corpus: the bytes of a text file, a vocabulary of the
 * distinct bytes (sorted, so ids are stable for a given file), a training split and a
 * validation split (the last part of the text), and batches of random windows. */
#include "core/rand.h"
#include "data/data.h"
#include "platform/platform.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct vkt_text {
    uint8_t *ids;          /* [length]: token ids */
    uint64_t length, split; /* ids [0, split) train, [split, length) validation */
    uint32_t vocab;
    int16_t id_of[256];    /* byte -> id (-1: absent) */
    uint8_t byte_of[256];  /* id -> byte */
};

vkt_status vkt_text_load(const char *path, float val_fraction, vkt_text **out)
{
    if (out)
        *out = NULL;
    if (!path || !out)
        return data_fail(VKT_ERROR_INVALID_ARGUMENT, "vkt_text_load: NULL argument");
    if (!(val_fraction > 0.0f && val_fraction < 1.0f))
        return data_fail(VKT_ERROR_INVALID_ARGUMENT,
                             "vkt_text_load: val_fraction is %g; 0 < val_fraction < 1 expected",
                             val_fraction);
    void *data = NULL;
    size_t size = 0;
    if (plat_read_file(path, &data, &size) != 0)
        return data_fail(VKT_ERROR_IO, "cannot read '%s': %s", path, strerror(errno));
    vkt_text *t = calloc(1, sizeof *t);
    if (!t) {
        free(data);
        return data_fail(VKT_ERROR_OUT_OF_MEMORY, "out of host memory reading '%s'", path);
    }
    t->ids = data;
    t->length = size;
    t->split = (uint64_t)((double)size * (1.0 - val_fraction));
    /* Two windows of context 1 on each side at least: a text too short to split. */
    if (size < 4 || t->split < 2 || size - t->split < 2) {
        vkt_text_destroy(t);
        return data_fail(VKT_ERROR_FORMAT,
                             "'%s' has %zu bytes: too short for a training and a validation "
                             "part", path, size);
    }
    uint8_t seen[256] = {0};
    for (uint64_t i = 0; i < size; i++)
        seen[t->ids[i]] = 1;
    for (int c = 0; c < 256; c++) {
        t->id_of[c] = seen[c] ? (int16_t)t->vocab : -1;
        if (seen[c])
            t->byte_of[t->vocab++] = (uint8_t)c;
    }
    for (uint64_t i = 0; i < size; i++)
        t->ids[i] = (uint8_t)t->id_of[t->ids[i]];
    *out = t;
    return VKT_OK;
}

void vkt_text_destroy(vkt_text *t)
{
    if (!t)
        return;
    free(t->ids);
    free(t);
}

uint32_t vkt_text_vocab(const vkt_text *t) { return t ? t->vocab : 0; }

uint64_t vkt_text_length(const vkt_text *t, int split)
{
    if (!t)
        return 0;
    return split ? t->length - t->split : t->split;
}

int32_t vkt_text_encode(const vkt_text *t, unsigned char c) { return t ? t->id_of[c] : -1; }

unsigned char vkt_text_decode(const vkt_text *t, uint32_t id)
{
    return t && id < t->vocab ? t->byte_of[id] : '?';
}

const uint8_t *text_ids(const vkt_text *t, int split)
{
    return split ? t->ids + t->split : t->ids;
}

void text_window(const vkt_text *t, int split, uint64_t start, uint32_t context, float *ids,
                     int32_t *targets)
{
    const uint8_t *s = text_ids(t, split) + start;
    for (uint32_t i = 0; i < context; i++) {
        ids[i] = (float)s[i];
        targets[i] = s[i + 1];
    }
}

vkt_status vkt_text_batch(const vkt_text *t, int split, uint32_t batch, uint32_t context,
                          uint64_t *rng, float *ids, int32_t *targets)
{
    if (!t || !rng || !ids || !targets || batch == 0 || context == 0)
        return data_fail(VKT_ERROR_INVALID_ARGUMENT,
                             "vkt_text_batch: NULL argument or zero size");
    uint64_t n = vkt_text_length(t, split);
    if (n < (uint64_t)context + 1)
        return data_fail(VKT_ERROR_SHAPE,
                             "vkt_text_batch: the %s part has %llu characters; a window of "
                             "context %u needs %u", split ? "validation" : "training",
                             (unsigned long long)n, context, context + 1);
    for (uint32_t b = 0; b < batch; b++) {
        uint64_t start = core_splitmix64(rng) % (n - context);
        text_window(t, split, start, context, ids + (uint64_t)b * context,
                        targets + (uint64_t)b * context);
    }
    return VKT_OK;
}
