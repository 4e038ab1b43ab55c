/* ops_ref.c - what the ops' CPU references share (each op's reference is in its table
 * entry, op_*.c): activations and their derivatives in double, broadcasting, axis
 * splits, dropout's factor and labels. */
#include "graph/graph.h"
#include "graph/ops_ref_util.h"
#include "activation.h"
#include "dropout_hash.h"

#include <math.h>
#include <string.h>

/* The formulas are shaders/activation.h, shared with the shaders. */
double graph_ref_act(vkt_unary_op op, double alpha, double x)
{
    return (unsigned)op < VKT_UNARY_COUNT ? act_f(op, alpha, x) : NAN;
}

double graph_ref_act_grad(vkt_unary_op op, double alpha, double x)
{
    return (unsigned)op < VKT_UNARY_COUNT ? act_df(op, alpha, x) : NAN;
}

ref_bcast ref_bcast_of(const vkt_shape *a, const vkt_shape *b)
{
    ref_bcast l;
    const vkt_shape *s[2] = {a, b};
    for (int o = 0; o < 2; o++) {
        uint32_t pad = VKT_MAX_DIMS - s[o]->ndim;
        uint64_t dims[4], st = 1;
        for (uint32_t k = 0; k < 4; k++)
            dims[k] = k < pad ? 1 : s[o]->dims[k - pad];
        for (int k = 3; k >= 0; k--) {
            l.str[o][k] = dims[k] == 1 ? 0 : st;
            st *= dims[k];
            if (o == 0 || dims[k] > l.dims[k])
                l.dims[k] = dims[k];
        }
    }
    return l;
}

void ref_axis_split(const vkt_shape *s, uint32_t axis, uint64_t *outer, uint64_t *len,
                    uint64_t *inner)
{
    *outer = *inner = 1;
    *len = s->dims[axis];
    for (uint32_t k = 0; k < axis; k++)
        *outer *= s->dims[k];
    for (uint32_t k = axis + 1; k < s->ndim; k++)
        *inner *= s->dims[k];
}

uint64_t ref_dropout_shift(const graph_ref_args *a, uint64_t n)
{
    return graph_row_shift(a->batch_major, a->row_offset, a->batch, n);
}

double ref_dropout_factor(const vkt_tensor *nd, uint64_t step, int training, uint64_t i)
{
    if (!training || nd->p.dropout.p == 0.0f)
        return 1.0;
    uint32_t key = dropout_key64(nd->p.dropout.seed, step);
    if (!dropout_kept(key, (uint32_t)i, dropout_threshold(nd->p.dropout.p)))
        return 0.0;
    return (double)(float)(1.0 / (1.0 - (double)nd->p.dropout.p)); /* the scale the device uses */
}

uint64_t ref_label(double v, uint64_t classes)
{
    if (!(v >= 0))
        return 0;
    uint64_t l = (uint64_t)v;
    return l < classes ? l : classes - 1; /* as the kernel clamps */
}
