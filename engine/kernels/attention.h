/*
 * attention.h - fused causal multi-head self-attention on the device (forward and
 * backward, shaders/attention.comp) and its double-precision references
 * (ref_attention.c). Same conventions as the rest of the kernel library: views count
 * float elements, each call records its dispatches into a stream (nothing runs until
 * the stream does), every argument is checked and a failure returns a status with the
 * context's message set.
 *
 * Shapes, for b sequences of t positions and `heads` heads of width d:
 *   qkv   [b, t, 3 * heads * d]  along the last axis q (heads * d), then k, then v;
 *                                head j uses columns j*d .. j*d+d-1 of each
 *   y, dy [b, t, heads * d]      head j's output in columns j*d ..
 *   probs [b, heads, t, t]       softmax probabilities before dropout (0 above the
 *                                diagonal), written by the forward for the backward
 *   ctrl  [2]                    the step, a uint64 (low word first) read by the device
 *                                at run time, so a recorded stream replayed every step
 *                                draws a new dropout mask; unused (may be a NULL
 *                                buffer) when p_drop is 0
 *
 * Dropout: element (bb, h, i, j) of the attention matrix is kept iff
 * dropout_kept(dropout_key64(seed, step),
 * (((b0 + bb) * heads + h) * t + i) * t + j, dropout_threshold(p_drop))
 * (shaders/dropout_hash.h, shared with the shaders; the index's low 32 bits);
 * kept values are scaled by 1 / (1 - p_drop). b0 is the global index of sequence 0
 * when these b sequences are part of a larger batch split over several models (0: the
 * whole batch), so the parts draw the masks the whole batch would.
 *
 * Limits: d <= KA_MAX_D; every tensor below 2^31 elements; on devices whose shader loops
 * stop early (lavapipe: 65535 iterations per invocation) t is bounded by
 * ka_attention_max_t(). Beyond them the calls fail with VKT_ERROR_LIMIT. The device
 * needs subgroup shuffles in compute shaders (every Vulkan 1.1 GPU driver and lavapipe).
 * Forward: 1 dispatch; backward: 2.
 */
#ifndef VKT_KERNELS_ATTENTION_H
#define VKT_KERNELS_ATTENTION_H

#include "gpu/gpu.h"

#define KA_MAX_D 64u

/* Causal scaled dot-product attention. For query i of head h: s_ij = q_i . k_j / sqrt(d)
 * for j <= i (j > i masked out), p_i = softmax_j(s_i), y_i = sum_j drop(p_ij) v_j.
 * Writes y and probs (p before dropout, entries j > i as 0). 0 <= p_drop < 1. */
vkt_status ka_attention(vkt_stream *s, vkt_view qkv, vkt_view y, vkt_view probs, vkt_view ctrl,
                        uint32_t b, uint32_t t, uint32_t heads, uint32_t d, float p_drop,
                        uint64_t seed, uint64_t b0);

/* Workspace elements the backward needs: dP [b, heads, t, t] and D [b, heads, t]. */
uint64_t ka_attention_workspace_elems(uint32_t b, uint32_t t, uint32_t heads, uint32_t d);

/* dqkv [b, t, 3 heads d] = gradient + beta * dqkv (beta 0 writes all of it without
 * reading it: old contents may be NaN) from dy [b, t, heads d], qkv and probs from the
 * forward, and the same ctrl step, seed and p_drop. Two dispatches: per query row (dP
 * into the workspace, dq), then per key row (dk, dv). */
vkt_status ka_attention_backward(vkt_stream *s, vkt_view qkv, vkt_view probs, vkt_view ctrl,
                                 vkt_view dy, vkt_view dqkv, float beta, vkt_view workspace,
                                 uint32_t b, uint32_t t, uint32_t heads, uint32_t d,
                                 float p_drop, uint64_t seed, uint64_t b0);

/* The largest t the kernels accept for head width d on the stream's device (UINT32_MAX
 * where shader loops are unbounded); 0 if d is 0 or above KA_MAX_D. */
uint32_t ka_attention_max_t(const vkt_context *ctx, uint32_t d);

/* ---- double references (ref_attention.c): direct definitions ---- */

/* y [b, t, heads d] (overwritten) from qkv, dropout drawn for `step`. */
void ka_ref_attention(const double *qkv, double *y, uint32_t b, uint32_t t, uint32_t heads,
                      uint32_t d, float p_drop, uint64_t seed, uint64_t b0, uint64_t step);
/* probs [b, heads, t, t] (overwritten): the causal softmax of the scores, 0 for j > i. */
void ka_ref_attention_probs(const double *qkv, double *probs, uint32_t b, uint32_t t,
                            uint32_t heads, uint32_t d);
/* dqkv += the gradient of sum(dy * y) with respect to qkv (same step's mask). */
void ka_ref_attention_backward(const double *qkv, const double *dy, double *dqkv, uint32_t b,
                               uint32_t t, uint32_t heads, uint32_t d, float p_drop,
                               uint64_t seed, uint64_t b0, uint64_t step);

#endif
