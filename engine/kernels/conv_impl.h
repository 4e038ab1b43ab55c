/*
 * conv_impl.h - what conv.c (the entry points: argument checks, the choice of variant)
 * shares with the two variants' dispatch code: conv_im2col.c (im2col + the GEMM + col2im,
 * with a workspace) and conv_implicit.c (the implicit GEMM, no workspace). Internal to
 * engine/kernels.
 */
#ifndef VKT_KERNELS_CONV_IMPL_H
#define VKT_KERNELS_CONV_IMPL_H

#include "gpu/gpu.h"
#include "kernels/conv.h"

/* Workspace elements of conv_im2col beyond its two matrices: up to 3 before each to
 * align it. */
#define KC_WS_SLACK 8u

/* Derived sizes of a geometry. */
typedef struct kc_dims {
    uint64_t P;     /* output positions per plane: oh ow */
    uint64_t chw;   /* elements of one sample of x */
    uint64_t real;  /* c kh kw: the columns of the unfolding */
    uint64_t ckk;   /* the row stride of cols: c kh kw rounded up to a multiple of 4, so
                       that every row starts 16-byte aligned (vec4 stores and reads) */
    uint64_t cg;    /* input channels per group */
    uint64_t og;    /* output channels per group */
    uint64_t ckk_g; /* cg kh kw: one group's columns, and a row of the weight */
    uint64_t per;   /* conv_im2col's workspace elements per sample: P (oc + ckk) */
} kc_dims;

kc_dims kc_dims_of(const kc_conv *g);

/* A conv call's state after conv.c's checks. */
typedef struct kc_conv_call {
    vkt_stream *s;
    vkt_context *ctx;
    const char *fn;
    const kc_conv *g;
    kc_dims d;
    uint32_t nc;          /* samples per chunk */
    vkt_view rows, cols;  /* conv_im2col: the two workspace matrices (16-byte aligned) */
    vkt_dtype lp;         /* conv_implicit: the operands' type (x, w, dy; views in its
                             elements): fp32, or fp16 / bf16 (conv_lowp_implicit) */
    gpu_variant lv;       /* with fp16 / bf16: the conv_lowp variant (conv_lowp_implicit,
                             conv_lowp_coopmat or conv_lowp_frag: its kernel and tiling) */
} kc_conv_call;

/* A view a call checks: `count` elements of `size` bytes (4 or 2); v NULL: not used. */
typedef struct kc_named_view {
    const char *name;
    const vkt_view *v;
    uint64_t count;
    uint32_t size;
} kc_named_view;

/* conv.c: the stream and geometry present, the geometry as kc_conv_init leaves it,
 * tensors below 2^32 elements; then every view inside its buffer and none overlapping
 * the workspace, and the call's state (operands fp32). */
vkt_status kc_check_geometry(vkt_stream *s, const char *fn, const kc_conv *g);
vkt_status kc_begin_call(kc_conv_call *c, vkt_stream *s, const char *fn, const kc_conv *g,
                         const kc_named_view *v, int n, vkt_view ws, uint64_t ws_elems);

/* The backward's arguments, as kc_conv2d_backward_act takes them. */
typedef struct kc_conv_grads {
    vkt_view x, w, dy;
    const vkt_view *relu_y, *dx, *dw, *db;
    float beta_x, beta_w, beta_b;
} kc_conv_grads;

static inline vkt_view kc_at(vkt_view v, uint64_t elements)
{
    return (vkt_view){v.buffer, v.offset + elements};
}

/* conv_im2col.c: the chunks the workspace allows, then per chunk the dispatches. */
vkt_status kc_im2col_forward(kc_conv_call *c, vkt_view x, vkt_view w, const vkt_view *bias,
                             int relu, vkt_view y, vkt_view ws, uint64_t ws_elems);
vkt_status kc_im2col_backward(kc_conv_call *c, const kc_conv_grads *a, vkt_view ws,
                              uint64_t ws_elems);

/* conv_implicit.c: the whole batch (in chunks only where a tensor would pass one
 * binding), each pass one dispatch per 65535 column tiles, plus the sum of a split
 * weight gradient. */
vkt_status kc_implicit_forward(kc_conv_call *c, vkt_view x, vkt_view w, const vkt_view *bias,
                               int relu, vkt_view y);
vkt_status kc_implicit_backward(kc_conv_call *c, const kc_conv_grads *a);

#endif
