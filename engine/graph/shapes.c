/* shapes.c - shape comparison, and where a node's elements sit in a split global batch.
 * Each op's shape rule is its entry in the op table (ops.h); graph_infer_shape (ops.c)
 * runs it when a graph is built and again when a model is compiled for another batch. */
#include "graph/graph.h"

int graph_shape_eq(const vkt_shape *a, const vkt_shape *b)
{
    if (a->ndim != b->ndim)
        return 0;
    for (uint32_t i = 0; i < a->ndim; i++)
        if (a->dims[i] != b->dims[i])
            return 0;
    return 1;
}

uint64_t graph_row_shift(int batch_major, uint32_t row_offset, uint32_t batch, uint64_t units)
{
    if (!batch_major || batch == 0 || units % batch != 0)
        return 0;
    return (uint64_t)row_offset * (units / batch);
}
