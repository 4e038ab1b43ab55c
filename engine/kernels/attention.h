/*
 * attention.h - fused causal multi-head self-attention on the device (forward and
 * backward) and its double-precision references (ref_attention.c). Three kernel
 * variants (engine/gpu/variants.c): attention_flash (GPUs: shaders/attention_flash.comp,
 * tiles in shared memory, online softmax, attention_flash.c), attention_shuffle and
 * attention_rows (CPU devices, and any device with shuffles: shaders/attention.comp, one
 * row per lane, attention_rows.c); the plan (attention_plan.c) says what each dispatches
 * and allocates. Same conventions as the rest of the kernel library: views count
 * float elements, each call records its dispatches into a stream (nothing runs until
 * the stream does), every argument is checked and a failure returns a status with the
 * context's message set.
 *
 * Shapes, for b sequences of t positions and `heads` heads of width d:
 *   qkv   [b, t, 3 * heads * d]  along the last axis q (heads * d), then k, then v;
 *                                head j uses columns j*d .. j*d+d-1 of each
 *   y, dy [b, t, heads * d]      head j's output in columns j*d ..
 *   saved                        what the forward writes for the backward; the context's
 *                                variant decides (ka_attention_plan): probs [b, heads, t,
 *                                t], the softmax probabilities before dropout (0 above the
 *                                diagonal), for attention_shuffle and attention_rows; the
 *                                row logsumexps lse [b, heads, t] for attention_flash,
 *                                which stores no [t, t] array anywhere
 *   ctrl  [2]                    the step, a uint64 (low word first) read by the device
 *                                at run time, so a recorded stream replayed every step
 *                                draws a new dropout mask; unused (may be a NULL
 *                                buffer) when p_drop is 0. With b_row > 0, a control
 *                                block of CTRL_KEY_WORDS (shaders/ctrl.h): the row base
 *                                row0 at CTRL_ROW0 is read at run time too
 *
 * Dropout: element (bb, h, i, j) of the attention matrix is kept iff
 * dropout_kept(dropout_key64(seed, step),
 * (((b0 + row0 b_row + bb) * heads + h) * t + i) * t + j, dropout_threshold(p_drop))
 * (shaders/dropout_hash.h, shared with the shaders; the index's low 32 bits), on every
 * variant; kept values are scaled by 1 / (1 - p_drop). b0 is the global index of
 * sequence 0 when these b sequences are part of a larger batch split over several
 * models (0: the whole batch), so the parts draw the masks the whole batch would; row0
 * b_row moves it by the control block's row base at run time (a pipeline stage's
 * micro-batch, one recorded step for all; b_row 0: none).
 *
 * Limits: d <= KA_MAX_D; every tensor below 2^31 elements; on devices whose shader loops
 * stop early (lavapipe: 65535 iterations per invocation) t is bounded by
 * ka_attention_max_t() (the probs variants' own bound is lower: longer sequences run
 * attention_flash, ka_attention_plan_for). Beyond them the calls fail with
 * VKT_ERROR_LIMIT. The device
 * needs subgroup shuffles in compute shaders (every Vulkan 1.1 GPU driver and lavapipe).
 * Forward: 1 dispatch; backward: 2.
 */
#ifndef VKT_KERNELS_ATTENTION_H
#define VKT_KERNELS_ATTENTION_H

#include "gpu/gpu.h"

#define KA_MAX_D 128u

/* What the forward saves for the backward. */
typedef enum ka_saved {
    KA_SAVED_PROBS, /* probs [b, heads, t, t] (attention_shuffle, attention_rows) */
    KA_SAVED_LSE    /* lse [b, heads, t]: log sum_{j <= i} exp(s_ij) (attention_flash) */
} ka_saved;

/* One dispatch of an attention call: its workgroups and what each takes. */
typedef struct ka_pass {
    uint32_t threads;         /* per workgroup */
    uint32_t rows_per_block;  /* consecutive rows of one (sequence, head) per block:
                                 queries, or keys in the backward's second pass */
    uint32_t blocks_per_head; /* ceil(t / rows_per_block) */
    uint64_t blocks;          /* b * heads * blocks_per_head */
    uint64_t workgroups;      /* flash: one per block; attention.comp: threads / 8 blocks
                                 per workgroup of the rows variant */
    uint32_t groups[3];       /* the grid: x * y >= workgroups (x at most GPU_MAX_GROUPS) */
    uint32_t lanes, rows;     /* flash: lanes sharing a row; rows per lane group */
    uint32_t tile;            /* flash: rows of a shared-memory tile (keys, or queries) */
    uint32_t shared_bytes;    /* per workgroup */
} ka_pass;

/* The work decomposition of one attention call (attention_plan.c). */
typedef struct ka_plan {
    gpu_variant variant;
    ka_saved saved;
    uint64_t saved_elems;     /* written by the forward, read by the backward */
    uint64_t workspace_elems; /* the backward's: dP and D (probs variants), D (flash) */
    uint32_t max_t;           /* the longest sequence the device's loop budget allows
                                 these workgroups (UINT32_MAX where loops are unbounded;
                                 plans for longer t have no fewer threads); 0: d
                                 unsupported */
    ka_pass pass[3];          /* forward; backward by query rows; backward by key rows */
} ka_plan;

/* The plan of attention on b sequences of t positions, heads of width d, with the given
 * variant on a device of profile p. attention_flash: lanes per row and rows per lane
 * group from d (registers), the tile from the shared memory, fewer rows per workgroup
 * while the grid leaves compute units idle (attention_plan.c explains each). Pure: no
 * Vulkan call, so a test plans for a stated device. A variant outside the attention
 * family, or b, t, heads or d of 0, gives a plan of zeros. */
ka_plan ka_attention_plan(const gpu_profile *p, gpu_variant variant, uint32_t b, uint32_t t,
                          uint32_t heads, uint32_t d);

/* The plan the calls below follow on ctx: its attention variant's, except where that
 * variant's loops cannot take t on the device (lavapipe's loop budget: the probs
 * variants walk every key per lane) and attention_flash runs there and can: then
 * attention_flash's. A plan of zeros when the family has no variant on the device. */
ka_plan ka_attention_plan_for(const vkt_context *ctx, uint32_t b, uint32_t t, uint32_t heads,
                              uint32_t d);

/* The element counts the calls take (ka_attention_plan_for): the forward's saved array
 * and the backward's workspace. */
uint64_t ka_attention_saved_elems(const vkt_context *ctx, uint32_t b, uint32_t t,
                                  uint32_t heads, uint32_t d);
uint64_t ka_attention_workspace_elems(const vkt_context *ctx, uint32_t b, uint32_t t,
                                      uint32_t heads, uint32_t d);

/* Causal scaled dot-product attention. For query i of head h: s_ij = q_i . k_j / sqrt(d)
 * for j <= i (j > i masked out), p_i = softmax_j(s_i), y_i = sum_j drop(p_ij) v_j.
 * Writes y and saved (ka_attention_saved_elems elements). 0 <= p_drop < 1. */
vkt_status ka_attention(vkt_stream *s, vkt_view qkv, vkt_view y, vkt_view saved, vkt_view ctrl,
                        uint32_t b, uint32_t t, uint32_t heads, uint32_t d, float p_drop,
                        uint64_t seed, uint64_t b0, uint64_t b_row);

/* dqkv [b, t, 3 heads d] = gradient + beta * dqkv (beta 0 writes all of it without
 * reading it: old contents may be NaN) from dy [b, t, heads d], and qkv, y and saved
 * from the forward with the same ctrl step, seed and p_drop (the probs variants neither
 * read nor check y: a NULL view will do there). Two dispatches: per query row (dq; the probs variants also dP into the
 * workspace, flash the row sums D_i = dy_i . y_i), then per key row (dk, dv). */
vkt_status ka_attention_backward(vkt_stream *s, vkt_view qkv, vkt_view y, vkt_view saved,
                                 vkt_view ctrl, vkt_view dy, vkt_view dqkv, float beta,
                                 vkt_view workspace, uint32_t b, uint32_t t, uint32_t heads,
                                 uint32_t d, float p_drop, uint64_t seed, uint64_t b0, uint64_t b_row);

/* The largest t the calls accept for head width d on the context's device (UINT32_MAX
 * where shader loops are unbounded); 0 if d is 0 or above KA_MAX_D. */
uint32_t ka_attention_max_t(const vkt_context *ctx, uint32_t d);

/* ---- 16-bit q, k, v (attention_lowp.c; mixed precision) ----
 * The same attention with qkv and dy fp16 or bf16 (views in 2-byte elements), y, saved,
 * ctrl, dqkv and the workspace fp32 (4-byte elements): the products of the rounded inputs
 * sum in fp32 and the softmax statistics are fp32, in the context's attention_lowp
 * variant. What saved and the workspace hold is the variant's (attention_lowp_flash:
 * attention_flash's; attention_lowp_widen: the context's fp32 attention's, then fp32
 * copies of qkv and dy); size them with these two. 0 when no variant runs or a size is
 * unsupported. */
uint64_t ka_attention_lowp_saved_elems(const vkt_context *ctx, uint32_t b, uint32_t t,
                                       uint32_t heads, uint32_t d);
uint64_t ka_attention_lowp_workspace_elems(const vkt_context *ctx, uint32_t b, uint32_t t,
                                           uint32_t heads, uint32_t d);
/* VKT_ERROR_INVALID_ARGUMENT for a type other than fp16 / bf16, VKT_ERROR_NO_DEVICE naming
 * what the device lacks when it has no 16-bit storage; otherwise as ka_attention. */
vkt_status ka_attention_lowp(vkt_stream *s, vkt_dtype type, vkt_view qkv, vkt_view y,
                             vkt_view saved, vkt_view ctrl, uint32_t b, uint32_t t,
                             uint32_t heads, uint32_t d, float p_drop, uint64_t seed,
                             uint64_t b0, uint64_t b_row);
vkt_status ka_attention_backward_lowp(vkt_stream *s, vkt_dtype type, vkt_view qkv, vkt_view y,
                                      vkt_view saved, vkt_view ctrl, vkt_view dy,
                                      vkt_view dqkv, float beta, vkt_view workspace,
                                      uint32_t b, uint32_t t, uint32_t heads, uint32_t d,
                                      float p_drop, uint64_t seed, uint64_t b0, uint64_t b_row);

/* 1 when the context's attention_lowp variant is a fused one (attention_lowp_coopmat,
 * _frag, _flash): its saved array holds the row logsumexps [b, heads, t] first. */
int ka_attention_lowp_fused(const vkt_context *ctx);

/* ---- attention_lowp_coopmat / _frag's fragment plans (attention_cm.c) ----
 * The plan of shaders/attention_frag.glsl for fragments of the cooperative-matrix shape
 * `mat` (NULL: attention_frag.comp's fp32 arithmetic on 8 x 8 x 8 fragments, 8-lane
 * warps): warps of the device's subgroup size (4, fewer while the shared memory or the
 * invocations do not fit or the blocks leave compute units idle), each TM query rows;
 * keys in tiles of BN = 2 max(TN, TK) (the backward: max(TN, TK) where that alone fits one
 * warp); the head width padded to DP, a multiple of
 * max(TN, TK). 0 when nothing fits (or the loops pass the loop budget): the call then
 * runs attention_lowp_flash's forward (the backward: ka_frag_plan_pass). Pure. */
typedef struct ka_frag_plan {
    uint32_t tm, tn, tk, sg;   /* the fragments; lanes per warp */
    uint32_t warps, bm, bn, dp, threads, shared_bytes;
    uint32_t blocks_per_head;  /* ceil(t / bm) */
    uint64_t blocks;           /* b heads blocks_per_head: one workgroup each */
    uint32_t groups[3];
} ka_frag_plan;
struct gpu_mat_shape; /* gpu/gpu.h */
struct gpu_kernel;    /* gpu/gpu.h */
int ka_frag_plan_make(const struct gpu_profile *p, const struct gpu_mat_shape *mat,
                      uint32_t b, uint32_t t, uint32_t heads, uint32_t d, ka_frag_plan *out);
/* The same for pass 0 (the forward: ka_frag_plan_make), or 1 and 2, attention_frag_bwd.glsl's
 * backward by query blocks (BM query rows, key tiles of BN: dq) and by key blocks (BM key
 * rows, query tiles of BN: dk, dv), whose shared arrays differ. Pure. */
int ka_frag_plan_pass(const struct gpu_profile *p, const struct gpu_mat_shape *mat,
                      uint32_t pass, uint32_t b, uint32_t t, uint32_t heads, uint32_t d,
                      ka_frag_plan *out);
/* attention_frag.glsl's kernels (attention_frag, attention_coopmat_f16, _bf16) and
 * attention_frag_bwd.glsl's (attention_frag_bwd, attention_coopmat_bwd_f16, _bf16), for
 * the tests' check of their SPIR-V against these descriptions. */
const struct gpu_kernel *ka_frag_kernels(uint32_t *count);

/* ---- double references (ref_attention.c): direct definitions ---- */

/* y [b, t, heads d] (overwritten) from qkv, dropout drawn for `step`. */
void ka_ref_attention(const double *qkv, double *y, uint32_t b, uint32_t t, uint32_t heads,
                      uint32_t d, float p_drop, uint64_t seed, uint64_t b0, uint64_t step);
/* probs [b, heads, t, t] (overwritten): the causal softmax of the scores, 0 for j > i. */
void ka_ref_attention_probs(const double *qkv, double *probs, uint32_t b, uint32_t t,
                            uint32_t heads, uint32_t d);
/* lse [b, heads, t] (overwritten): log sum_{j <= i} exp(s_ij), s_ij = q_i . k_j / sqrt(d). */
void ka_ref_attention_lse(const double *qkv, double *lse, uint32_t b, uint32_t t,
                          uint32_t heads, uint32_t d);
/* dqkv += the gradient of sum(dy * y) with respect to qkv (same step's mask). */
void ka_ref_attention_backward(const double *qkv, const double *dy, double *dqkv, uint32_t b,
                               uint32_t t, uint32_t heads, uint32_t d, float p_drop,
                               uint64_t seed, uint64_t b0, uint64_t step);

#endif
