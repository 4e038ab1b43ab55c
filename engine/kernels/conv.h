/*
 * conv.h - 2-D convolution and pooling on NCHW tensors (forward and backward), with
 * double-precision references that follow the direct definitions.
 *
 * Convolution runs in the context's conv variant (engine/gpu/variants.c):
 *  - conv_im2col (CPU style, and GPU-style devices that cannot run the next): a chunk of
 *    samples is unfolded into the workspace as cols [rows = samples * oh * ow, c * kh * kw]
 *    (zeros where the window hangs over the padding), one GEMM per group (vkt_gemm)
 *    multiplies the weight by it, and one dispatch moves the product into y, adding the
 *    bias. The backward re-makes cols for dw = dy_rows^T cols, computes dcols = dy_rows W
 *    and gathers dcols back into dx (each input element sums the column entries it
 *    produced, in a fixed order).
 *  - conv_implicit (GPU style): each pass is one implicit GEMM (shaders/conv_implicit.comp)
 *    that gathers its operands from the NCHW tensors inside its tile loads: no workspace.
 *    The forward fuses bias and relu into its stores; the weight gradient (with the bias
 *    gradient as one more column) splits its sum over n oh ow across workgroups when its
 *    tiles are too few (the partial sums added in a fixed order by a second dispatch);
 *    the data gradient is the transposed convolution, each dx element one output.
 * Both are deterministic (no atomics). Views count elements; `beta` 0 overwrites an output
 * without reading it, 1 adds to it. Dispatch code: conv.c (checks, the variant),
 * conv_im2col.c, conv_implicit.c (plan: conv_plan.c) and pool.c; references: ref_conv.c.
 */
#ifndef VKT_KERNELS_CONV_H
#define VKT_KERNELS_CONV_H

#include <stddef.h>
#include <stdint.h>

#include "push_conv.h"
#include "vkt.h"

struct gpu_profile;   /* gpu/gpu.h */
struct gpu_mat_shape; /* gpu/gpu.h */
struct gpu_kernel;    /* gpu/gpu.h */

/* NCHW convolution. x [n, c, h, w], weight [oc, c / groups, kh, kw] (PyTorch's layout),
 * bias [oc], y [n, oc, oh, ow], oh = (h + 2 pad_h - dil_h (kh - 1) - 1) / stride_h + 1 (same
 * for ow). */
typedef struct kc_conv {
    uint32_t n, c, h, w;
    uint32_t oc, kh, kw;
    uint32_t stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, groups;
    uint32_t oh, ow; /* set by kc_conv_init */
} kc_conv;

/* Validates (non-zero sizes, strides, dilations, groups dividing c and oc, output >= 1) and
 * sets oh, ow. On failure writes a message (naming the bad field and values) into msg (may be
 * NULL) and returns VKT_ERROR_SHAPE or VKT_ERROR_INVALID_ARGUMENT. */
vkt_status kc_conv_init(kc_conv *g, char *msg, size_t msg_size);

/* Whether the context's conv variant uses a workspace (conv_im2col); conv_implicit needs
 * none, and ignores the workspace arguments (a view and 0 elements will do). */
int kc_conv_uses_workspace(const vkt_context *ctx);

/* Elements of the workspace kc_conv2d and kc_conv2d_backward need, when it may hold at most
 * max_elems (the caller passes the device's maxStorageBufferRange / 4 or less); 0 when even one
 * sample does not fit (the calls then fail with VKT_ERROR_LIMIT and a message naming the sizes
 * and the limit). Per sample: oh ow (oc + c kh kw rounded up to a multiple of 4) elements; plus
 * 8 to align the two matrices to 16 bytes. The whole batch when it fits, else as many samples
 * as fit (the calls then loop over chunks of samples). */
uint64_t kc_conv_workspace_elems(const kc_conv *g, uint64_t max_elems);

/* conv_im2col: the GEMMs of one chunk of `nc` samples, per group (kc_conv2d and the
 * backward record exactly these through vkt_gemm): [KC_GEMM_FORWARD] rows_g [og, R] =
 * W_g [og, ckk_g] cols_g^T, [KC_GEMM_WEIGHT] dW_g [og, ckk_g] += rows_g cols_g [R, ckk_g]
 * (K = R, the long sum split by vkt_gemm's plan), [KC_GEMM_DATA] dcols_g [R, ckk_g] =
 * rows_g^T W_g;
 * og = oc / groups, ckk_g = c / groups * kh * kw, R = nc oh ow. A GEMM along more rows
 * than one grid spans is recorded as several (R in pieces). Pure: a test plans them for
 * a stated device. */
typedef struct kc_gemm {
    int trans_a, trans_b;
    uint64_t m, n, k;
} kc_gemm;
enum {
    KC_GEMM_FORWARD = CONV_PASS_FORWARD,
    KC_GEMM_WEIGHT = CONV_PASS_WEIGHT,
    KC_GEMM_DATA = CONV_PASS_DATA,
    KC_GEMMS
};
void kc_conv_gemms(const kc_conv *g, uint32_t nc, kc_gemm out[KC_GEMMS]);

/* conv_implicit: the work decomposition of each pass (conv_plan.c). Pure, so a test plans
 * every convolution of a model for a stated device (an H100) without it.
 * The tile rows of shaders/conv_implicit.comp: a workgroup of (bm / tm) x (bn / tn)
 * threads computes bm x bn of C, walking K in slabs of bk. */
typedef struct kc_conv_tile {
    uint32_t bm, bn, bk, tm, tn;
    float efficiency; /* multiply-adds per lane and clock relative to 8x8 per thread */
} kc_conv_tile;
const kc_conv_tile *kc_conv_tiles(uint32_t *count);
uint32_t kc_conv_tile_threads(const kc_conv_tile *t);
uint32_t kc_conv_tile_shared(const kc_conv_tile *t); /* bytes per workgroup */

/* A pass (KC_GEMM_*) as a GEMM per group, C [m, n] over k: forward m = oc / groups,
 * n = nc oh ow, k = c / groups kh kw; weight gradient m = oc / groups, n = the wanted
 * columns (c / groups kh kw of dw, and db's column), k = nc oh ow; data gradient
 * m = c / groups, n = nc h w, k = oc / groups kh kw. */
typedef struct kc_conv_plan {
    int pass;
    uint64_t m, n, k;
    uint32_t bias_col;        /* the weight gradient: db's column, else UINT32_MAX */
    uint32_t tile;            /* its row in kc_conv_tiles */
    uint32_t bm, bn, bk, tm, tn, threads, shared_bytes;
    uint32_t wm, wn, tk, sg;  /* kc_conv_frag_plan: a warp's block (bm / 2 x bn / 2), the
                                 fragments' K, lanes per warp */
    uint64_t col_tiles;       /* workgroups along n (x; dispatched 65535 at a time) */
    uint32_t row_tiles;       /* along m (y) */
    uint32_t z;               /* along z: groups x splits */
    uint32_t splits, k_chunk; /* the weight gradient's K split (k per split), else 1, k */
    uint64_t workspace;       /* floats of partial sums: splits oc n (0 without a split) */
    double clocks;            /* modelled time, and the part in multiply-adds and loads */
    double gemm_clocks;
} kc_conv_plan;

/* The plan of least modelled time for `pass` over a chunk of nc samples on a device of
 * profile p (conv_plan.c states the model); want_dw, want_db: the weight gradient's
 * columns. 0 when no tile fits the device or its loop budget. */
int kc_conv_implicit_plan(const struct gpu_profile *p, const kc_conv *g, uint32_t nc,
                          int pass, int want_dw, int want_db, kc_conv_plan *out);
/* The plan with tile row `tile` and about `splits` splits (clamped to what the pass, the
 * loop budget and the workspace limit allow; rounded so every split is non-empty); 0 when
 * the tile does not fit the device. */
int kc_conv_plan_with(const struct gpu_profile *p, const kc_conv *g, uint32_t nc, int pass,
                      int want_dw, int want_db, uint32_t tile, uint32_t splits,
                      kc_conv_plan *out);
uint64_t kc_conv_plan_workgroups(const kc_conv_plan *pl);
/* The plan of conv_frag.glsl's tiling (conv_lowp_frag, conv_lowp_coopmat) for `pass`:
 * fragments of the cooperative-matrix shape `mat` (NULL: the fp32-arithmetic twin without
 * one, 8 x 8 x 8 on 8-lane warps for the CPU style, 16 x 16 x 16 on 32 for the GPU's),
 * 2 x 2 warps of the subgroup size, each of 4 x 4 fragments (2 x 2 for the CPU style) up
 * to 64 x 64, fewer while the tiles leave compute units idle, do not fit the device or
 * break the load assignment (THREADS a multiple of BK and BN); K in slabs of 2 TK (4 TK
 * for TK < 16). The weight gradient splits K as conv_implicit's does, into about as many
 * parts as fill the compute units (`splits` > 0: about that many, the tests'), within the
 * loop budget. 0 when nothing fits (or a pass other than the weight gradient would run
 * past the loop budget). */
/* conv_frag.glsl's kernels (conv_frag, conv_coopmat_f16, conv_coopmat_bf16), for the
 * tests' check of their SPIR-V against these descriptions. */
const struct gpu_kernel *kc_conv_frag_kernels(uint32_t *count);
int kc_conv_frag_plan(const struct gpu_profile *p, const kc_conv *g, uint32_t nc, int pass,
                      int want_dw, int want_db, const struct gpu_mat_shape *mat,
                      uint32_t splits, kc_conv_plan *out);
/* Tests: every conv_implicit dispatch after this uses tile row `tile` and about `splits`
 * splits (kc_conv_plan_with); tile < 0 returns to the planned choice. */
void kc_conv_implicit_force(int tile, uint32_t splits);

/* y = conv(x, w) + bias (bias may be NULL). workspace: kc_conv_workspace_elems elements
 * (scratch: its contents are not needed afterwards; it must not overlap the tensors).
 * Records 2 + groups dispatches per chunk of samples. */
vkt_status kc_conv2d(vkt_stream *s, const kc_conv *g, vkt_view x, vkt_view w, const vkt_view *bias,
                     vkt_view y, vkt_view workspace, uint64_t workspace_elems);

/* The same with a relu fused into the output move when relu is nonzero:
 * y = max(conv(x, w) + bias, 0). */
vkt_status kc_conv2d_act(vkt_stream *s, const kc_conv *g, vkt_view x, vkt_view w,
                         const vkt_view *bias, int relu, vkt_view y, vkt_view workspace,
                         uint64_t workspace_elems);

/* Gradients from dy [n, oc, oh, ow]: dx, dw, db each optional (NULL: not wanted, but at least
 * one must be); each is written (beta 0: old contents ignored, may be NaN) or added to (beta 1).
 * Per chunk: the move of dy, the bias gradient (db), im2col and a GEMM per group (dw), a GEMM
 * per group and the gather (dx). */
vkt_status kc_conv2d_backward(vkt_stream *s, const kc_conv *g, vkt_view x, vkt_view w, vkt_view dy,
                              const vkt_view *dx, float beta_x, const vkt_view *dw, float beta_w,
                              const vkt_view *db, float beta_b, vkt_view workspace,
                              uint64_t workspace_elems);
/* The backward of kc_conv2d_act with a relu (relu_y non-NULL): dy is the gradient of the
 * relu's output relu_y [n, oc, oh, ow], masked by relu_y > 0 as it is moved (the relu's
 * derivative from its output). relu_y NULL: kc_conv2d_backward. */
vkt_status kc_conv2d_backward_act(vkt_stream *s, const kc_conv *g, vkt_view x, vkt_view w,
                                  vkt_view dy, const vkt_view *relu_y, const vkt_view *dx,
                                  float beta_x, const vkt_view *dw, float beta_w,
                                  const vkt_view *db, float beta_b, vkt_view workspace,
                                  uint64_t workspace_elems);

/* Convolution of 16-bit operands with fp32 accumulation (conv_lowp.c), in the context's
 * conv_lowp variant (conv_lowp_implicit: conv_implicit's passes loading 16-bit x, w and
 * dy; conv_lowp_widen: the operands widened exactly into the workspace, then the fp32
 * convolution above). x, w and dy are of type t (fp16 or bf16; their views count 2-byte
 * elements), bias, relu_y, y, dx, dw and db are fp32 (views in floats), each output the
 * exact products of the 16-bit values summed in fp32. The workspace: fp32 elements,
 * kc_conv_lowp_workspace_elems of them (0 for conv_lowp_implicit: any view will do). A
 * device without 16-bit storage runs no variant: VKT_ERROR_NO_DEVICE naming what it
 * lacks. */
int kc_conv_lowp_uses_workspace(const vkt_context *ctx);
uint64_t kc_conv_lowp_workspace_elems(const vkt_context *ctx, const kc_conv *g);
vkt_status kc_conv2d_lowp(vkt_stream *s, const kc_conv *g, vkt_dtype t, vkt_view x, vkt_view w,
                          const vkt_view *bias, int relu, vkt_view y, vkt_view workspace,
                          uint64_t workspace_elems);
vkt_status kc_conv2d_backward_lowp(vkt_stream *s, const kc_conv *g, vkt_dtype t, vkt_view x,
                                   vkt_view w, vkt_view dy, const vkt_view *relu_y,
                                   const vkt_view *dx, float beta_x, const vkt_view *dw,
                                   float beta_w, const vkt_view *db, float beta_b,
                                   vkt_view workspace, uint64_t workspace_elems);

/* 2-D pooling on NCHW: x [n, c, h, w] -> y [n, c, oh, ow], oh = (h + 2 pad_h - kh) / stride_h
 * + 1. Max: padded positions never win; ties go to the first position in (ky, kx) scan order.
 * Average: divides by kh * kw (padding counts as zeros, PyTorch's count_include_pad default).
 * Requires pad <= k / 2. */
typedef struct kc_pool {
    uint32_t n, c, h, w, kh, kw, stride_h, stride_w, pad_h, pad_w;
    int max;         /* 1 max pooling, 0 average */
    uint32_t oh, ow; /* set by kc_pool_init */
} kc_pool;

/* Validates as kc_conv_init does (non-zero sizes and strides, pad <= k / 2, output >= 1) and
 * sets oh, ow. */
vkt_status kc_pool_init(kc_pool *p, char *msg, size_t msg_size);
/* Elements the forward saves for the backward: max: the winning input position of each output
 * (n c oh ow, stored as uint32 in the float buffer: iy * w + ix inside its plane); average: 0. */
uint64_t kc_pool_saved_elems(const kc_pool *p);
/* y from x; max pooling also writes `saved` (required there, ignored for average). One
 * dispatch. */
vkt_status kc_pool2d(vkt_stream *s, const kc_pool *p, vkt_view x, vkt_view y,
                     const vkt_view *saved);
/* dx (beta 0 writes, 1 adds) from dy; `saved` from the forward (max only, else NULL). One
 * dispatch (a gather: deterministic). */
vkt_status kc_pool2d_backward(vkt_stream *s, const kc_pool *p, const vkt_view *saved, vkt_view dy,
                              vkt_view dx, float beta);

/* Double references (direct definitions, not im2col). Backward outputs accumulate (+=); any
 * may be NULL. */
void kc_ref_conv2d(const kc_conv *g, const double *x, const double *w, const double *bias,
                   double *y);
void kc_ref_conv2d_backward(const kc_conv *g, const double *x, const double *w, const double *dy,
                            double *dx, double *dw, double *db);
void kc_ref_pool2d(const kc_pool *p, const double *x, double *y);
void kc_ref_pool2d_backward(const kc_pool *p, const double *x, const double *dy, double *dx);

#endif
