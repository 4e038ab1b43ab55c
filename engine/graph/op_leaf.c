/* op_leaf.c - the leaves: inputs, labels and parameters. They have no shape rule (they
 * come with their shape), no recording and no reference; the model places their values
 * (make_values in autodiff.c), and a parameter's gradient is the sum its uses write. */
#include "graph/op_impl.h"

static int rows_of_batch(const vkt_tensor *t, const uint8_t *batch_major)
{
    (void)t;
    (void)batch_major;
    return 1;
}

static int no_rows(const vkt_tensor *t, const uint8_t *batch_major)
{
    (void)t;
    (void)batch_major;
    return 0;
}

const graph_op_def graph_op_input = {
    .name = "input", .fn = "vkt_input", .flags = OPF_LEAF, .batch_major = rows_of_batch,
};

const graph_op_def graph_op_labels = {
    .name = "labels", .fn = "vkt_input_labels", .flags = OPF_LEAF,
    .batch_major = rows_of_batch,
};

const graph_op_def graph_op_param = {
    .name = "param", .fn = "vkt_param", .flags = OPF_LEAF, .batch_major = no_rows,
};
