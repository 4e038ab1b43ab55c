/* Fuzz target: ckpt_parse, the checkpoint reader. Each input is parsed twice: as the
 * file it is, and with a correct header (magic, version, sizes, both CRCs) put in front
 * of its payload (the bytes after a header if the input starts with the magic, else all
 * of them), so that the checksums do not stop the fuzzer from reaching the sections.
 * A parsed checkpoint's tensors are read whole: ASan checks they lie inside the file. */
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "io/checkpoint.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void le32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void check(void *file, size_t size)
{
    ckpt k;
    char why[512];
    if (ckpt_parse(file, size, &k, why, sizeof why) != VKT_OK)
        return; /* ckpt_parse freed the file */
    for (uint32_t i = 0; i < k.n_tensors; i++) {
        const ckpt_tensor *t = &k.tensors[i];
        float *v = malloc(t->count ? t->count * sizeof *v : 1);
        if (!v)
            abort();
        ckpt_read_f32s(t->data, v, t->count);
        free(v);
    }
    volatile unsigned char sum = 0;
    for (uint64_t i = 0; i < k.opt_bytes; i++)
        sum += k.opt_state[i];
    (void)sum;
    ckpt_free(&k);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    void *file = malloc(size ? size : 1);
    if (!file)
        abort();
    memcpy(file, data, size);
    check(file, size);

    size_t skip = size >= CKPT_HEADER_BYTES && memcmp(data, CKPT_MAGIC, 8) == 0
                      ? CKPT_HEADER_BYTES : 0;
    size_t payload = size - skip;
    unsigned char *f = malloc(CKPT_HEADER_BYTES + payload);
    if (!f)
        abort();
    memset(f, 0, CKPT_HEADER_BYTES);
    memcpy(f, CKPT_MAGIC, 8);
    le32(f + 8, CKPT_VERSION);
    le32(f + 12, CKPT_HEADER_BYTES);
    le32(f + 16, (uint32_t)payload);
    le32(f + 20, (uint32_t)((uint64_t)payload >> 32));
    memcpy(f + CKPT_HEADER_BYTES, data + skip, payload);
    le32(f + 24, (uint32_t)crc32(0L, f + CKPT_HEADER_BYTES, (uInt)payload));
    le32(f + 28, (uint32_t)crc32(0L, f, 28));
    check(f, CKPT_HEADER_BYTES + payload);
    return 0;
}
