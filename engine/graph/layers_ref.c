/* layers_ref.c - the double references of the layer ops, as graph_ref_forward and
 * graph_ref_backward call them: thin adapters to the kernels' own references (direct
 * definitions, independent of the device algorithms). */
#include "graph/layers.h"

#include <stdio.h>

void graph_layer_ref_forward(const graph_ref_args *a)
{
    const vkt_tensor *t = a->node;
    char msg[VKT_ERRMSG_SIZE];
    uint32_t rows, cols, b, tt, h, d, c, hw;
    switch (t->op) {
    case GOP_CONV2D: {
        kc_conv g;
        if (layer_conv_geom(t, a->in_shape[0], a->in_shape[1], &g, msg, sizeof msg) == VKT_OK)
            kc_ref_conv2d(&g, a->in[0], a->in[1], t->n_in == 3 ? a->in[2] : NULL, a->out);
        break;
    }
    case GOP_POOL2D: {
        kc_pool p;
        if (layer_pool_geom(t, a->in_shape[0], &p, msg, sizeof msg) == VKT_OK)
            kc_ref_pool2d(&p, a->in[0], a->out);
        break;
    }
    case GOP_LAYERNORM:
        cols = a->in_shape[0]->dims[a->in_shape[0]->ndim - 1];
        rows = (uint32_t)(graph_count(a->in_shape[0]) / cols);
        kn_ref_layernorm(a->in[0], a->in[1], a->in[2], a->out, rows, cols, t->f0);
        break;
    case GOP_BATCHNORM:
        layer_bn_dims(a->in_shape[0], &b, &c, &hw);
        /* The running averages are updated in place, like the device's parameters. */
        kn_ref_batchnorm(a->in[0], a->in[1], a->in[2], a->out, (double *)a->in[3],
                         (double *)a->in[4], b, c, hw, t->f0, t->f1, a->training);
        break;
    case GOP_EMBEDDING:
        kn_ref_embedding(a->in[0], a->in[1], a->out, (uint32_t)graph_count(a->in_shape[0]),
                         a->in_shape[1]->dims[0], a->in_shape[1]->dims[1]);
        break;
    case GOP_ATTENTION:
        layer_attn_dims(t, a->in_shape[0], &b, &tt, &h, &d);
        ka_ref_attention(a->in[0], a->out, b, tt, h, d, a->training ? t->f0 : 0.0f, t->seed,
                         graph_row_shift(a->batch_major, a->row_offset, a->batch, b), a->step);
        break;
    default: break;
    }
}

void graph_layer_ref_backward(const graph_ref_args *a)
{
    const vkt_tensor *t = a->node;
    char msg[VKT_ERRMSG_SIZE];
    uint32_t rows, cols, b, tt, h, d, c, hw;
    switch (t->op) {
    case GOP_CONV2D: {
        kc_conv g;
        if (layer_conv_geom(t, a->in_shape[0], a->in_shape[1], &g, msg, sizeof msg) == VKT_OK)
            kc_ref_conv2d_backward(&g, a->in[0], a->in[1], a->dout, a->din[0], a->din[1],
                                   t->n_in == 3 ? a->din[2] : NULL);
        break;
    }
    case GOP_POOL2D: {
        kc_pool p;
        if (a->din[0] && layer_pool_geom(t, a->in_shape[0], &p, msg, sizeof msg) == VKT_OK)
            kc_ref_pool2d_backward(&p, a->in[0], a->dout, a->din[0]);
        break;
    }
    case GOP_LAYERNORM:
        cols = a->in_shape[0]->dims[a->in_shape[0]->ndim - 1];
        rows = (uint32_t)(graph_count(a->in_shape[0]) / cols);
        kn_ref_layernorm_backward(a->in[0], a->in[1], a->dout, a->din[0], a->din[1], a->din[2],
                                  rows, cols, t->f0);
        break;
    case GOP_BATCHNORM:
        layer_bn_dims(a->in_shape[0], &b, &c, &hw);
        kn_ref_batchnorm_backward(a->in[0], a->in[1], a->dout, a->din[0], a->din[1], a->din[2], b,
                                  c, hw, t->f0);
        break;
    case GOP_EMBEDDING:
        if (a->din[1])
            kn_ref_embedding_backward(a->in[0], a->dout, a->din[1],
                                      (uint32_t)graph_count(a->in_shape[0]),
                                      a->in_shape[1]->dims[0], a->in_shape[1]->dims[1]);
        break;
    case GOP_ATTENTION:
        layer_attn_dims(t, a->in_shape[0], &b, &tt, &h, &d);
        if (a->din[0])
            ka_ref_attention_backward(a->in[0], a->dout, a->din[0], b, tt, h, d,
                                      a->training ? t->f0 : 0.0f, t->seed,
                                      graph_row_shift(a->batch_major, a->row_offset, a->batch,
                                                      b),
                                      a->step);
        break;
    default: break;
    }
}
