/*
 * train_ops.h - the kernels of training graphs beyond the op library of vkt.h: fused
 * bias + activation, the losses (softmax cross-entropy, MSE), axpby, block moves (slice,
 * broadcast, transpose) and dropout, with their fp32 CPU references (ref_train_ops.c).
 * The graph layer (engine/graph) records them. Same conventions as the rest of the kernel
 * library: views count elements, each call records one dispatch into a stream, and
 * `beta` 0 overwrites an output without reading it while 1 adds to it (how gradients of
 * tensors used several times are summed). The shaders are shaders/bias_act*.comp, sce*.comp, mse.comp,
 * axpby.comp, block.comp and dropout.comp.
 */
#ifndef VKT_KERNELS_TRAIN_OPS_H
#define VKT_KERNELS_TRAIN_OPS_H

#include "gpu/gpu.h"

/* pre[rows, cols] += bias (broadcast over rows; bias may be NULL); then y = f(pre), in
 * place when y is NULL (pre then holds y), else into y with pre keeping the
 * pre-activation. f is a unary op (SCALE with alpha 1: no activation). */
vkt_status kt_bias_act(vkt_stream *s, vkt_unary_op op, float alpha, vkt_view pre,
                       const vkt_view *bias, const vkt_view *y, uint32_t rows, uint32_t cols);
/* An autocast product's bias and activation, keeping its pre-activation in 16 bits:
 * y[rows, cols] holds the product; pre = y + bias rounded to `type` (fp16 or bf16, as
 * vkt_convert rounds) and y = f(widen(pre)) in fp32 (the product's output rounded to the
 * 16-bit type before the activation, as in PyTorch's autocast), `pre` a view of 16-bit
 * elements at an even offset; with an odd count the 16 bits after it (the rest of its last
 * 4-byte word) are zeroed. */
vkt_status kt_bias_act_keep16(vkt_stream *s, vkt_unary_op op, float alpha, vkt_dtype type,
                              vkt_view y, const vkt_view *bias, vkt_view pre, uint32_t rows,
                              uint32_t cols);
/* y16 = r(f(widen(pre))) in `type`: kt_bias_act_keep16's y rounded to `type`, bit for bit
 * (the same activation code on the same value), from its 16-bit pre; both views of 16-bit
 * elements at even offsets. A product's 16-bit x rebuilt by its backward. */
vkt_status kt_act_rebuild16(vkt_stream *s, vkt_unary_op op, float alpha, vkt_dtype type,
                            vkt_view pre, vkt_view y16, uint32_t rows, uint32_t cols);
/* dz = f'(.) * dy (+ beta dz) and db = column sums of it (+ beta_b db). `v` is the
 * pre-activation, or the output y when from_y (relu, leaky relu with alpha >= 0, tanh,
 * sigmoid, scale), stored as `v_type` (fp32, or kt_bias_act_keep16's 16 bits: a view of
 * 16-bit elements, widened exactly). dz may be NULL (only db wanted) or equal dy (in
 * place, beta 0); db may be NULL (no bias). */
vkt_status kt_bias_act_backward(vkt_stream *s, vkt_unary_op op, float alpha, int from_y,
                                vkt_dtype v_type, vkt_view v, vkt_view dy, const vkt_view *dz,
                                float beta, const vkt_view *db, float beta_b, uint32_t rows,
                                uint32_t cols);
/* Whether f' can be computed from the output (see kt_bias_act_backward). */
int kt_act_grad_from_y(vkt_unary_op op, float alpha);

/* Softmax cross-entropy forward: loss[0] = mean over rows of logsumexp(z) - z[label].
 * mode 0: nothing else; 1: p = softmax(z); 2: p = (softmax(z) - onehot) / rows, the
 * gradient of the loss. p may be NULL for mode 0. */
vkt_status kt_sce(vkt_stream *s, vkt_view z, vkt_view labels, vkt_view loss, int mode,
                  const vkt_view *p, uint32_t rows, uint32_t cols);
/* dz = (p - onehot) * dl[0] / rows (+ beta dz), p from kt_sce mode 1. */
vkt_status kt_sce_backward(vkt_stream *s, vkt_view p, vkt_view labels, vkt_view dl,
                           vkt_view dz, float beta, uint32_t rows, uint32_t cols);

/* loss[0] = mean (a - b)^2 over n elements. */
vkt_status kt_mse(vkt_stream *s, vkt_view a, vkt_view b, vkt_view loss, uint64_t n);
/* d = sign * 2 (a - b) / n * dl[0] (+ beta d). */
vkt_status kt_mse_backward(vkt_stream *s, vkt_view a, vkt_view b, vkt_view dl, vkt_view d,
                           float sign, float beta, uint64_t n);

/* y = alpha x + beta y, n elements. */
vkt_status kt_axpby(vkt_stream *s, float alpha, vkt_view x, float beta, vkt_view y, uint64_t n);
/* rows of len contiguous elements: y[r * dst_row + dst_base + c] (op)=
 * alpha x[r * src_row + src_base + c]. Only the touched ranges are bound, so copies into
 * disjoint parts of one tensor need no barrier between them. */
vkt_status kt_slice(vkt_stream *s, vkt_view x, uint32_t src_row, uint32_t src_base, vkt_view y,
                    uint32_t dst_row, uint32_t dst_base, uint32_t rows, uint32_t len,
                    float alpha, float beta);
/* y[o, a, i] = alpha x[o, i] (+ beta y): the backward of a sum or mean along an axis. */
vkt_status kt_broadcast(vkt_stream *s, vkt_view x, vkt_view y, uint32_t outer, uint32_t axis,
                        uint32_t inner, float alpha, float beta);
/* y[cols, rows] = alpha x[rows, cols]^T (+ beta y). */
vkt_status kt_transpose(vkt_stream *s, vkt_view x, vkt_view y, uint32_t rows, uint32_t cols,
                        float alpha, float beta);
/* y = x * dropout factor (+ beta y). ctrl views a control block at CTRL_STEP
 * (shaders/ctrl.h, CTRL_KEY_WORDS words): the step, the uint64 there (low word first),
 * and row0, the uint32 at CTRL_ROW0, are read by the device at run time. Element i draws
 * the mask of index i_off + row0 * row_units + i (its index in the whole batch, low 32
 * bits: shaders/dropout_hash.h). */
vkt_status kt_dropout(vkt_stream *s, vkt_view x, vkt_view ctrl, vkt_view y, uint64_t n,
                      float p, uint64_t seed, uint64_t i_off, uint64_t row_units, float beta);

/* ---- fp32 references (ref_train_ops.c), same arguments with host pointers ---- */

void kt_ref_bias_act(vkt_unary_op op, float alpha, float *pre, const float *bias, float *y,
                     uint32_t rows, uint32_t cols);
/* pre16: the 16-bit bits of each pre-activation (kt_bias_act_keep16), y updated. */
void kt_ref_bias_act_keep16(vkt_unary_op op, float alpha, vkt_dtype type, float *y,
                            const float *bias, uint16_t *pre16, uint32_t rows, uint32_t cols);
void kt_ref_act_rebuild16(vkt_unary_op op, float alpha, vkt_dtype type, const uint16_t *pre16,
                          uint16_t *y16, uint32_t rows, uint32_t cols);
void kt_ref_bias_act_backward(vkt_unary_op op, float alpha, int from_y, const float *v,
                              const float *dy, float *dz, float beta, float *db, float beta_b,
                              uint32_t rows, uint32_t cols);
void kt_ref_sce(const float *z, const int32_t *labels, float *loss, int mode, float *p,
                uint32_t rows, uint32_t cols);
void kt_ref_sce_backward(const float *p, const int32_t *labels, const float *dl, float *dz,
                         float beta, uint32_t rows, uint32_t cols);
void kt_ref_mse(const float *a, const float *b, float *loss, uint64_t n);
void kt_ref_mse_backward(const float *a, const float *b, const float *dl, float *d, float sign,
                         float beta, uint64_t n);
void kt_ref_slice(const float *x, uint32_t src_row, uint32_t src_base, float *y,
                  uint32_t dst_row, uint32_t dst_base, uint32_t rows, uint32_t len,
                  float alpha, float beta);
void kt_ref_broadcast(const float *x, float *y, uint32_t outer, uint32_t axis, uint32_t inner,
                      float alpha, float beta);
void kt_ref_transpose(const float *x, float *y, uint32_t rows, uint32_t cols, float alpha,
                      float beta);
void kt_ref_dropout(const float *x, uint64_t step, float *y, uint64_t n, float p, uint64_t seed,
                    uint64_t i_off, float beta);

/* The replicas' gradient average on their shared device (reduce_avg.c): out[i] = the
 * sum over q < k in order of w[q] * g[q][i], each product and sum rounded to float
 * (shaders/push_reduce.h): the bits of the host's sum (parallel/reduce_sum.h). Views of
 * buffers of any context on the stream's VkDevice; n elements each; out distinct from
 * the inputs. One dispatch per REDUCE_AVG_INPUTS inputs. */
vkt_status kt_reduce_avg(vkt_stream *s, vkt_view out, const vkt_view *g, const float *w,
                         uint32_t k, uint64_t n);
/* Its CPU reference: `s = 0.0f; for q: s += w[q] * g[q][i]; out[i] = s;`. */
void kref_weighted_sum(float *out, const float *const *g, const float *w, uint32_t k,
                       uint64_t n);

#endif
