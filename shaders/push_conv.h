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

/* The implicit-GEMM convolution (conv_implicit.comp, the conv_implicit variant) and the
 * sum of its split weight gradient (conv_reduce.comp). Per group, a GEMM C[m, ncols] over
 * k; the passes: */
#define CONV_PASS_FORWARD 0u       /* y = conv(x, w) (+ bias, relu) */
#define CONV_PASS_WEIGHT 1u        /* dw (and db: a column of ones) from dy and x */
#define CONV_PASS_DATA 2u          /* dx from dy and w (the flipped kernel) */
struct push_conv_gemm {
    VKT_U32 n, c, h, w;            /* samples of this chunk, input channels and size */
    VKT_U32 oc, oh, ow;            /* output channels and size */
    VKT_U32 ph, pw;                /* padding */
    VKT_U32 groups, cg, og;        /* groups; input and output channels per group */
    VKT_U32 m, ncols, k;           /* one group's GEMM */
    VKT_U32 k_chunk;               /* the weight pass: k per split (workgroups z / groups) */
    VKT_U32 splits;                /* conv_reduce.comp: partial sums per output */
    VKT_U32 tile0;                 /* the first column tile of this dispatch */
    VKT_U32 b_off;                 /* binding 0, the gathered operand: x, or dy (data) */
    VKT_U32 a_off;                 /* binding 1, the other: w, or dy (weight) */
    VKT_U32 o_off;                 /* binding 2: y, dx, dw or the partial sums */
    VKT_U32 e_off;                 /* binding 3: the bias (forward), relu_y (CONV_MASK) */
    VKT_U32 d_off;                 /* binding 4: db (the weight pass) */
    VKT_U32 ldo;                   /* the weight pass: dw's row length, c / groups kh kw */
    VKT_U32 bias_col;              /* the weight pass: db's column of C, else ~0 */
    VKT_F32 beta, beta_b;          /* the output's, db's: 0 overwrites, else adds beta old */
    VKT_U32 flags;                 /* CONV_* below */
};
#define CONV_BIAS 1u               /* forward: add the bias */
#define CONV_RELU 2u               /* forward: relu after the bias */
#define CONV_MASK 4u               /* backward: dy where relu_y > 0, else 0 */
#define CONV_SPLIT 8u              /* weight pass: partial sums [split][oc][ncols] */
#define CONV_READ_OUT 16u          /* beta != 0 */
#define CONV_READ_DB 32u           /* beta_b != 0 */
#define CONV_VEC_OUT 64u           /* vec4 stores of an NCHW output (planes of 4k, aligned) */
#define CONV_BF16 128u             /* conv_implicit_lowp.comp: the operands are bf16, else fp16 */

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
VKT_PUSH_FITS(push_conv_gemm);
VKT_PUSH_FITS(push_pool);
#endif

#endif /* VKT_PUSH_CONV_H */
