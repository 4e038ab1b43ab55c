/* Fuzz target: vkt_dataset_load_csv with label column "label". A loaded dataset's
 * features must all be finite and its labels within its class count. */
#include "fuzz_file.h"

#include <math.h>
#include <stdlib.h>

#include "vkt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    vkt_dataset *d = NULL;
    if (vkt_dataset_load_csv(fuzz_file(data, size), "label", &d) == VKT_OK) {
        uint32_t n = vkt_dataset_count(d), f = vkt_dataset_features(d);
        uint32_t classes = vkt_dataset_classes(d);
        const float *x = vkt_dataset_x(d);
        const int32_t *y = vkt_dataset_y(d);
        if (!n || !f || !classes || !x || !y)
            abort();
        for (uint64_t i = 0; i < (uint64_t)n * f; i++)
            if (!isfinite(x[i]))
                abort();
        for (uint32_t i = 0; i < n; i++)
            if (y[i] < 0 || (uint32_t)y[i] >= classes)
                abort();
    }
    vkt_dataset_destroy(d);
    return 0;
}
