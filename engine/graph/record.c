/* record.c - recording a node's forward or backward into a stream: the op table's entry
 * does it (ops.h), for the node the model runs there (m->t: a fused node after the
 * fusion rewrite). */
#include "graph/model.h"

void model_rows_cols(const vkt_shape *s, uint32_t *rows, uint32_t *cols)
{
    uint64_t n = graph_count(s);
    *cols = s->ndim ? s->dims[s->ndim - 1] : 1;
    *rows = (uint32_t)(n / *cols);
}

void model_axis3(const vkt_shape *s, uint32_t axis, uint32_t *outer, uint32_t *len,
                 uint32_t *inner)
{
    *outer = *inner = 1;
    *len = s->dims[axis];
    for (uint32_t k = 0; k < axis; k++)
        *outer *= s->dims[k];
    for (uint32_t k = axis + 1; k < s->ndim; k++)
        *inner *= s->dims[k];
}

vkt_status model_record_forward(vkt_model *m, vkt_stream *s, uint32_t node, int training)
{
    const vkt_tensor *t = m->t[node];
    const graph_op_def *d = GRAPH_DEF(t);
    if (!d || !d->forward)
        return model_fail(m, VKT_ERROR_INTERNAL, "internal error: op %s has no forward",
                          graph_op_name(t));
    op_rec r = {m, s, t, training != 0, training == MODEL_FWD_TRAIN_KEEP_STATE};
    return d->forward(&r);
}

vkt_status model_record_backward(vkt_model *m, vkt_stream *s, uint32_t node)
{
    const vkt_tensor *t = m->t[node];
    const graph_op_def *d = GRAPH_DEF(t);
    if (!d || !d->backward)
        return model_fail(m, VKT_ERROR_INTERNAL, "internal error: op %s has no backward",
                          graph_op_name(t));
    op_rec r = {m, s, t, 1, 0};
    return d->backward(&r);
}
