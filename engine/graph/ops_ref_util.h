/* ops_ref_util.h - helpers shared by the forward and backward CPU references. */
#ifndef VKT_GRAPH_OPS_REF_UTIL_H
#define VKT_GRAPH_OPS_REF_UTIL_H

#include "graph/graph.h"

/* Two shapes broadcast against each other, right-aligned into 4 dims: the broadcast
 * dims and each operand's element strides (0 along its dims of size 1). */
typedef struct ref_bcast {
    uint64_t dims[4];
    uint64_t str[2][4];
} ref_bcast;

ref_bcast ref_bcast_of(const vkt_shape *a, const vkt_shape *b);

/* Loops over the broadcast shape in row-major order; ai and bi are the operands'
 * element indices. */
#define REF_BCAST_LOOP(l, ai, bi)                                                       \
    for (uint64_t c0 = 0; c0 < (l).dims[0]; c0++)                                      \
        for (uint64_t c1 = 0; c1 < (l).dims[1]; c1++)                                  \
            for (uint64_t c2 = 0; c2 < (l).dims[2]; c2++)                              \
                for (uint64_t c3 = 0, ai = 0, bi = 0;                                  \
                     c3 < (l).dims[3] &&                                               \
                     ((ai = c0 * (l).str[0][0] + c1 * (l).str[0][1] + c2 * (l).str[0][2] + \
                            c3 * (l).str[0][3]),                                       \
                      (bi = c0 * (l).str[1][0] + c1 * (l).str[1][1] + c2 * (l).str[1][2] + \
                            c3 * (l).str[1][3]),                                       \
                      1);                                                              \
                     c3++)

/* A shape seen as [outer, dims[axis], inner]. */
void ref_axis_split(const vkt_shape *s, uint32_t axis, uint64_t *outer, uint64_t *len,
                    uint64_t *inner);

/* The global index of the first of a dropout node's n elements (graph_row_shift). */
uint64_t ref_dropout_shift(const graph_ref_args *a, uint64_t n);
/* Dropout's factor for element i (its index in the global batch): 0, or the scale
 * 1/(1-p) (as fp32, like the device); 1 when not training. */
double ref_dropout_factor(const vkt_tensor *nd, uint64_t step, int training, uint64_t i);

/* A label as an index, clamped into [0, classes) as the kernel does. */
uint64_t ref_label(double v, uint64_t classes);

#endif
