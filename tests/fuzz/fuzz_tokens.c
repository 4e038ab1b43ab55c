/* Fuzz target: vkt_dataset_load_tokens. The first byte picks uint8 (even) or uint16
 * (odd) tokens; the rest is the file. Every token must fit its width. */
#include "fuzz_file.h"

#include <stdlib.h>

#include "vkt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    uint32_t width = (data[0] & 1) + 1;
    uint32_t *tok = NULL;
    uint64_t n = 0;
    if (vkt_dataset_load_tokens(fuzz_file(data + 1, size - 1), width, &tok, &n) == VKT_OK) {
        if (!tok || n != (size - 1) / width)
            abort();
        for (uint64_t i = 0; i < n; i++)
            if (tok[i] >> (8 * width))
                abort();
    } else if (tok || n) {
        abort();
    }
    free(tok);
    return 0;
}
