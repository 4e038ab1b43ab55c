/*
 * push_conv.h - push constants of the convolution and pooling kernels (engine/kernels/conv.c,
 * pool.c; shaders/im2col.comp, col2im.comp, conv_*.comp, pool*.comp). Same conventions as
 * push.h, whose scalar macros it uses: only 4-byte scalars, so C and GLSL (std430) agree on
 * every offset, at most 128 bytes (checked below), *_off are element shifts from the start
 * of a binding (gpu_arg_shift).
 */
#ifndef VKT_PUSH_CONV_H
#define VKT_PUSH_CONV_H

#include "push.h"

/* One chunk of `n` samples of a convolution. The workspace holds two matrices:
 *   rows [oc, n oh ow]   the GEMM's output (forward) or dy (backward), channel-major so
 *                        that both sides of the move to or from NCHW are contiguous
 *   cols [n oh ow, ckk]  the im2col unfolding (forward, dw) or dcols (dx); ckk is
 *                        c kh kw rounded up to a multiple of 4 (rows 16-byte aligned)
 * Kernel size, strides and dilations are specialization constants. */
struct push_conv {
    VKT_U32 n;                     /* samples of this chunk */
    VKT_U32 c, h, w;               /* input channels and size */
    VKT_U32 oc, oh, ow;            /* output channels and size */
    VKT_U32 ph, pw;                /* padding */
    VKT_U32 ckk;                   /* the row stride of cols */
    VKT_U32 t_off;                 /* the NCHW tensor: x, y, dy or dx of this chunk */
    VKT_U32 m_off;                 /* the workspace matrix: rows or cols */
    VKT_U32 b_off;                 /* bias (forward move) or db */
    VKT_F32 beta;                  /* dx, db: 0 overwrites, else adds beta * old */
    VKT_U32 plane;                 /* positions per plane: oh ow, or h w (col2im) */
    VKT_U32 run;                   /* per lane: rows (im2col), runs of 4 elements (col2im) */
};

/* Pooling over `planes` = n c images of h x w into oh x ow. Max pooling writes the winner's
 * position iy * w + ix per output to `saved` (uint32). kh, kw, strides: specialization
 * constants. */
struct push_pool {
    VKT_U32 planes;
    VKT_U32 h, w, oh, ow;
    VKT_U32 ph, pw;
    VKT_F32 scale;                 /* average: 1 / (kh kw) */
    VKT_F32 beta;                  /* backward: 0 overwrites dx, else adds beta * old */
    VKT_U32 x_off, y_off, s_off;   /* x or dx, y or dy, saved */
    VKT_U32 st_off;                /* saved through its texel view (backward) */
    VKT_U32 run;                   /* runs of 4 outputs per lane */
};

#ifndef VULKAN
VKT_PUSH_FITS(push_conv);
VKT_PUSH_FITS(push_pool);
#endif

#endif /* VKT_PUSH_CONV_H */
