/*
 * layers.h - the layer ops inside the graph layer: geometry from shapes (layers.c),
 * compilation into a model (layers_model.c: the saved and scratch arrays, recording) and
 * the double references (layers_ref.c). The kernels are engine/kernels/conv.h, norm.h
 * and attention.h.
 *
 * Arrays per node (mnode): aux is written by the forward: conv2d's im2col workspace
 * (scratch, forward only), max pooling's winning positions, the normalizations' (mean,
 * rstd) statistics, attention's softmax weights, read again by the backward except for
 * conv2d's. tmp is the backward's workspace.
 */
#ifndef VKT_GRAPH_LAYERS_H
#define VKT_GRAPH_LAYERS_H

#include "graph/graph.h"
#include "kernels/attention.h"
#include "kernels/conv.h"
#include "kernels/norm.h"

struct vkt_model;

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

/* Whether the backward reads the forward's aux array. */
int layer_aux_saved(const vkt_tensor *t);
/* Creates the aux array (after the forward value) and, for a training model whose node
 * needs a gradient, the backward workspace tmp of layer op `op`, in node `into`: the op
 * itself, or the relu a conv2d is fused into (which then runs the conv's step). */
vkt_status layer_make_aux_of(struct vkt_model *m, uint32_t op, uint32_t into);
vkt_status layer_make_tmp_of(struct vkt_model *m, uint32_t op, uint32_t into);
vkt_status layer_record_forward(struct vkt_model *m, vkt_stream *s, uint32_t node, int training);
vkt_status layer_record_backward(struct vkt_model *m, vkt_stream *s, uint32_t node);
/* A relu node with a conv2d fused into it: the conv's forward (relu applied) or backward. */
vkt_status layer_record_conv_relu(struct vkt_model *m, vkt_stream *s, uint32_t node,
                                  int backward);

#endif
