/*
 * layers.h - the layer ops' geometry from shapes (layers.c), shared by their op table
 * entries (op_conv.c, op_norm.c, op_sequence.c) and references. The kernels are
 * engine/kernels/conv.h, norm.h and attention.h.
 */
#ifndef VKT_GRAPH_LAYERS_H
#define VKT_GRAPH_LAYERS_H

#include "graph/graph.h"
#include "kernels/attention.h"
#include "kernels/conv.h"
#include "kernels/norm.h"

/* Geometry of a conv2d or pool node from its input shapes (kc_conv_init, kc_pool_init
 * validate); messages go to msg. */
vkt_status layer_conv_geom(const vkt_tensor *t, const vkt_shape *xs, const vkt_shape *ws,
                           kc_conv *g, char *msg, size_t msg_size);
vkt_status layer_pool_geom(const vkt_tensor *t, const vkt_shape *xs, kc_pool *p, char *msg,
                           size_t msg_size);
/* Batch normalization's x [N,C,...] as n, c and hw (the product of the rest). */
void layer_bn_dims(const vkt_shape *xs, uint32_t *n, uint32_t *c, uint32_t *hw);
/* Attention's qkv [B,T,3C] as b, t, heads, d = C / heads. */
void layer_attn_dims(const vkt_tensor *t, const vkt_shape *qs, uint32_t *b, uint32_t *tt,
                     uint32_t *heads, uint32_t *d);

#endif
