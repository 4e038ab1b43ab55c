/* Fuzz target: vkt_text_load, then a few batches of windows from both splits. The
 * first byte picks the validation fraction (1..255)/256; the rest is the file. Every
 * id must be below the vocabulary and decode back to a byte that encodes to it. */
#include "fuzz_file.h"

#include <stdlib.h>

#include "data/data.h"
#include "vkt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    float frac = (float)(data[0] ? data[0] : 1) / 256.0f;
    vkt_text *t = NULL;
    if (vkt_text_load(fuzz_file(data + 1, size - 1), frac, &t) != VKT_OK)
        return 0;
    uint32_t vocab = vkt_text_vocab(t);
    if (vocab == 0 || vocab > 256)
        abort();
    for (int split = 0; split < 2; split++) {
        const uint8_t *ids = text_ids(t, split);
        uint64_t len = vkt_text_length(t, split);
        for (uint64_t i = 0; i < len; i++)
            if (ids[i] >= vocab || vkt_text_encode(t, vkt_text_decode(t, ids[i])) != ids[i])
                abort();
        enum { BATCH = 3, CONTEXT = 4 };
        float x[BATCH * CONTEXT];
        int32_t y[BATCH * CONTEXT];
        uint64_t rng = size;
        if (vkt_text_batch(t, split, BATCH, CONTEXT, &rng, x, y) == VKT_OK)
            for (int i = 0; i < BATCH * CONTEXT; i++)
                if (x[i] < 0 || x[i] >= (float)vocab || y[i] < 0 || (uint32_t)y[i] >= vocab)
                    abort();
    }
    vkt_text_destroy(t);
    return 0;
}
