/* Fuzz target: idx_read on arbitrary bytes, plain or gzip (the reader sniffs the
 * gzip magic itself). A successful read must hold exactly prod(dims) bytes. */
#include "fuzz_file.h"

#include <stdlib.h>

#include "data/idx.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    idx_array idx;
    char msg[512];
    if (idx_read(fuzz_file(data, size), &idx, msg, sizeof msg) == VKT_OK) {
        uint64_t count = 1;
        for (uint32_t i = 0; i < idx.ndim; i++)
            count *= idx.dims[i];
        if (idx.ndim < 1 || idx.ndim > VKT_MAX_DIMS || count != idx.count || !idx.data)
            abort();
        volatile uint8_t sum = 0; /* touch every byte: ASan checks the buffer's size */
        for (uint64_t i = 0; i < idx.count; i++)
            sum += idx.data[i];
        (void)sum;
    }
    idx_free(&idx);
    return 0;
}
