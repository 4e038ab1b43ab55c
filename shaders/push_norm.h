/*
 * push_norm.h - push-constant layouts of the normalization and embedding kernels
 * (engine/kernels/norm.c, engine/kernels/embedding.c; shaders/layernorm*.comp,
 * rmsnorm*.comp, batchnorm*.comp, embedding*.comp). Same conventions as push.h: only
 * 4-byte scalars, so the std430 layout of GLSL and the C layout agree; at most 128 bytes
 * each (checked in C below). Offsets named *_off are element shifts from the start of
 * their binding (see gpu_arg_shift in engine/gpu/gpu.h).
 */
#ifndef VKT_PUSH_NORM_H
#define VKT_PUSH_NORM_H

#include "push.h" /* VKT_U32, VKT_F32 */

/* Layer normalization over the last axis of x[rows, cols]; stats[rows, 2] = (mean, rstd).
 * Forward: y = (x - mean) * rstd * gamma + beta. Backward (one dispatch, two roles by
 * workgroup): workgroups [0, row_groups) write dx row by row, the rest the column sums
 * dgamma = sum over rows of dy * xhat and dbeta = sum of dy. */
struct push_layernorm {
    VKT_U32 rows, cols;
    VKT_F32 eps;
    VKT_F32 beta_x, beta_g, beta_b;  /* backward: 0 writes, else out = new + beta * out */
    VKT_U32 row_groups;              /* backward: workgroups of the dx role */
    VKT_U32 x_off, g_off, b_off, y_off, s_off;
    VKT_U32 dy_off, dx_off, dg_off, db_off;
    VKT_U32 update;                  /* training: 1 moves the running averages, 0 not */
};

/* RMS normalization over the last axis of x[rows, cols]; rstd[rows] = 1 / sqrt(mean of
 * x^2 + eps). Forward: y = x * rstd * gamma. Backward (one dispatch, two roles by
 * workgroup, as layernorm's): workgroups [0, row_groups) write dx row by row, the rest
 * the column sums dgamma = sum over rows of dy * x * rstd. */
struct push_rmsnorm {
    VKT_U32 rows, cols;
    VKT_F32 eps;
    VKT_F32 beta_x, beta_g;          /* backward: 0 writes, else out = new + beta * out */
    VKT_U32 row_groups;              /* backward: workgroups of the dx role */
    VKT_U32 x_off, g_off, y_off, r_off;
    VKT_U32 dy_off, dx_off, dg_off;
};

/* Batch normalization of x[n, c, hw] per channel; one workgroup per channel.
 * stats[c, 2] = (mean, rstd) of the batch; running_mean/var[c] read-write. */
struct push_batchnorm {
    VKT_U32 n, c, hw;
    VKT_F32 eps, momentum;
    VKT_F32 unbias;                  /* count / (count - 1), 1 for a count of 1 */
    VKT_F32 beta_x, beta_g, beta_b;  /* backward */
    VKT_U32 x_off, g_off, b_off, y_off, s_off, rm_off, rv_off;
    VKT_U32 dy_off, dx_off, dg_off, db_off;
    VKT_U32 update;                  /* training: 1 moves the running averages, 0 not */
};

/* Embedding: forward y[n, dim] = table[ids[i]]; backward dtable[vocab, dim] = sum of the
 * rows dy[i] with ids[i] == v (+ beta * dtable) over positions [first, first + count). */
struct push_embedding {
    VKT_U32 n, vocab, dim;
    VKT_U32 first, count;            /* backward: the positions of this dispatch */
    VKT_F32 beta;
    VKT_U32 ids_off, t_off, y_off;   /* y_off: y forward, dy backward */
};

#ifndef VULKAN
VKT_PUSH_FITS(push_layernorm);
VKT_PUSH_FITS(push_rmsnorm);
VKT_PUSH_FITS(push_batchnorm);
VKT_PUSH_FITS(push_embedding);
#endif

#endif /* VKT_PUSH_NORM_H */
