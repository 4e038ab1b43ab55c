/*
 * push.h - push-constant layouts, defined once and included by both C (engine/kernels)
 * and GLSL (the compute shaders). Only 4-byte scalars (VKT_U32, VKT_I32, VKT_F32), so the
 * std430 layout GLSL uses for push constants and the C layout agree on every offset.
 * Each struct must fit in 128 bytes (the minimum maxPushConstantsSize Vulkan guarantees);
 * C checks that at compile time below.
 *
 * Offsets named *_off are element shifts from the start of the binding (see
 * gpu_arg_shift in engine/gpu/gpu.h): the descriptor starts at an aligned address.
 */
#ifndef VKT_PUSH_H
#define VKT_PUSH_H

#ifdef VULKAN /* defined by glslang when compiling for Vulkan */
#define VKT_U32 uint
#define VKT_I32 int
#define VKT_F32 float
#else
#include <stdint.h>
#define VKT_U32 uint32_t
#define VKT_I32 int32_t
#define VKT_F32 float
#endif

/* GEMM: C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C. Row-major, leading dims. */
struct push_gemm {
    VKT_U32 m, n, k;
    VKT_U32 lda, ldb, ldc;
    VKT_U32 a_off, b_off, c_off;
    VKT_U32 trans_a, trans_b;
    VKT_F32 alpha, beta;
    VKT_U32 cr_off; /* gemm_cpu: C's offset in its texel binding for reads (beta != 0) */
    VKT_U32 k_chunk; /* gemm_tile: K per split (workgroups z take [z k_chunk, ...)) */
    VKT_U32 w_off;   /* gemm_tile with GEMM_SPLIT: the workspace's offset in its binding */
    VKT_U32 flags;   /* gemm_tile, gemm_lowp: GEMM_* below (uniform branches, not specializations:
                        each specialization costs a compile, and these cost nothing) */
};
#define GEMM_VEC_A 1u  /* A read as vec4s: its contiguous dimension, lda, offset % 4 == 0 */
#define GEMM_VEC_B 2u
#define GEMM_VEC_C 4u  /* C (or the workspace) stored as vec4s */
#define GEMM_READ_C 8u /* beta != 0 */
#define GEMM_SPLIT 16u /* partial sums into the workspace (gemm_reduce.comp adds them) */
#define GEMM_AB_BF16 32u /* gemm_lowp.glsl: A and B are bf16 (else fp16) */
#define GEMM_C_16 64u    /* gemm_lowp.glsl: C is of the inputs' 16-bit type (else fp32) */

/* A matrix converted between element types (shaders/cast.comp): y[r][c] = x[r][c] for
 * r < rows, c < cols, rows ldx and ldy elements apart, offsets in elements of each side's
 * type; from, to: DTYPE_* (shaders/dtype.h). */
struct push_cast {
    VKT_U32 rows, cols, ldx, ldy;
    VKT_U32 x_off, y_off;
    VKT_U32 from, to;
};

/* The sum of a split-K GEMM's partial tiles (gemm_reduce.comp): C = alpha * sum over
 * splits of W[split][M][N] + beta * C. */
struct push_gemm_reduce {
    VKT_U32 m, n, splits;
    VKT_U32 ldc, c_off, w_off;
    VKT_F32 alpha, beta;
};

/* 1-D kernels go through vec4 loads and stores where every binding has the same
 * alignment phase: elements [0, head) and those after head + 4 * nvec one at a time, the
 * nvec vec4s in between at once. nvec = 0: all one at a time. */

/* Unary elementwise and its derivative: y = f(x) / dx = dy * f'(x), n elements.
 * y_off is the output: y forward, dx backward. */
struct push_unary {
    VKT_U32 n;
    VKT_U32 op;
    VKT_F32 alpha;
    VKT_U32 x_off, y_off, dy_off;
    VKT_U32 head, nvec;
};

/* Binary with broadcasting over 4 dims (outermost first). Strides are in elements and
 * 0 along broadcast dimensions. `out_dims` is the iteration space. y_off is the output:
 * out forward, grad backward; n counts the elements produced (out, or grad). */
struct push_binary {
    VKT_U32 op;
    VKT_U32 which;                 /* backward: 0 = gradient of a, 1 = of b */
    VKT_U32 out_dims0, out_dims1, out_dims2, out_dims3;
    VKT_U32 a_str0, a_str1, a_str2, a_str3;
    VKT_U32 b_str0, b_str1, b_str2, b_str3;
    VKT_U32 a_off, b_off, y_off, dy_off;
    VKT_U32 n;                     /* elements to produce */
    VKT_U32 head, nvec;            /* forward, one dim: the vec4 split (see above) */
    VKT_U32 units4;                /* forward, several dims: in units of 4 elements */
};

/* Reduction of x viewed as [outer, axis, inner] along the middle dimension. */
struct push_reduce {
    VKT_U32 op;
    VKT_U32 outer, axis, inner;
    VKT_U32 x_off, y_off;
};

/* Row softmax / log-softmax over x[rows, cols] and its backward (reads y and dy,
 * writes dx). */
struct push_softmax {
    VKT_U32 rows, cols;
    VKT_U32 log;
    VKT_U32 x_off, y_off, dy_off, dx_off;
};

/* Fill (value) and copy (x to y), n elements. */
struct push_fill {
    VKT_U32 n;
    VKT_F32 value;
    VKT_U32 x_off, y_off;
    VKT_U32 head, nvec;
};

/* Optimizer over one chunk of the flat parameter buffer: the update
 * (shaders/optim_update.comp) and the per-workgroup sums of squares of the gradient that
 * clipping by global norm needs (shaders/optim_norm.comp). The norm pass of a chunk
 * writes one partial per workgroup from part_off on; the update reads all n_parts
 * partials (of every chunk). The per-step values are in struct optim_step_hyper. */
struct push_optim {
    VKT_U32 n;                     /* elements of this chunk */
    VKT_U32 p_off, g_off, m_off, v_off, part_off;
    VKT_U32 n_parts;
    /* Update: when nvec > 0, the views share one phase mod 4 and elements
     * [head, head + 4 nvec) go as vec4s, the rest (< 4 each side) one by one. */
    VKT_U32 head, nvec;
};

/* Per-step hyperparameters of an optimizer. Not push constants (those are frozen when a
 * stream is recorded) but the contents of a small host-visible buffer the host rewrites
 * before every submission, read by shaders/optim_update.comp as a std430 block: only
 * 4-byte scalars, so C and GLSL agree on the layout. */
struct optim_step_hyper {
    VKT_F32 lr;                    /* this step's learning rate, schedule applied */
    VKT_F32 momentum;              /* SGD */
    VKT_F32 beta1, beta2, eps;     /* Adam, AdamW */
    VKT_F32 weight_decay;
    VKT_F32 step_size;             /* Adam: lr / (1 - beta1^t) */
    VKT_F32 rsqrt_bc2;             /* Adam: 1 / sqrt(1 - beta2^t) */
    VKT_F32 clip_norm;             /* 0: no clipping */
    VKT_F32 grad_scale;            /* gradients are multiplied by this first */
    VKT_U32 nesterov;
    VKT_U32 t;                     /* Adam's t = step + 1 (low 32 bits), for inspection */
};

/* ---- training kernels (engine/kernels/train_ops.c) ---- */

/* Bias + activation over [rows, cols] (the bias broadcast over rows) and its backward.
 * Forward: P = P + b; Y = f(P) (Y is P itself unless the pre-activation is kept).
 * Backward: DZ = f'(V) * DY (+ beta * DZ), V the pre-activation or, for activations whose
 * derivative follows from the output, Y; DB = column sums of DZ (+ beta_b * DB). */
struct push_bias_act {
    VKT_U32 rows, cols;
    VKT_F32 alpha;                 /* leaky slope / scale */
    VKT_F32 beta, beta_b;
    VKT_U32 b_off, p_off, y_off;   /* forward */
    VKT_U32 v_off, dy_off, dz_off, db_off; /* backward */
};

/* Softmax cross-entropy over logits[rows, cols] with int32 labels. Forward: loss[0] =
 * scale * sum of (logsumexp(z) - z[label]); with mode 1 also P = softmax, mode 2
 * P = (softmax - onehot) * scale (the gradient of the mean, written by the forward).
 * Backward: DZ = (P - onehot) * DL[0] * scale (+ beta * DZ). */
struct push_sce {
    VKT_U32 rows, cols;
    VKT_U32 mode;
    VKT_F32 scale, beta;
    VKT_U32 z_off, l_off, loss_off, p_off, dl_off, dz_off;
};

/* Mean squared error of a, b (n elements). Forward: loss[0] = sum (a - b)^2 / n.
 * Backward: D = sign * 2 (a - b) / n * DL[0] (+ beta * D). */
struct push_mse {
    VKT_U32 n;
    VKT_F32 scale, sign, beta;
    VKT_U32 a_off, b_off, l_off, d_off;
};

/* y = alpha * x + beta * y over n elements (beta == 0 does not read y). */
struct push_axpby {
    VKT_U32 n;
    VKT_F32 alpha, beta;
    VKT_U32 x_off, y_off;
};

/* Block copies y[dst] = alpha * x[src] + beta * y[dst] over n elements, three flavours
 * (a specialization constant): slice/concat (rows of `len` contiguous elements: src at
 * row * src_row + src_base + e, dst at row * dst_row + dst_base + e), broadcast
 * (y[o, a, i] from x[o, i] with d0 = axis length, d1 = inner) and transpose (x[d0, d1]
 * to y[d1, d0]). */
struct push_block {
    VKT_U32 n;
    VKT_U32 d0, d1;
    VKT_U32 src_row, src_base, dst_row, dst_base;
    VKT_F32 alpha, beta;
    VKT_U32 x_off, y_off;
};

/* Dropout: y = x * (hash(key(seed, step), idx0 + i) >= threshold ? scale : 0) (+ beta * y),
 * idx0 = i_off + row0 * row_units: the index in the whole batch of element 0 (low 32 bits;
 * the sums wrap modulo 2^32: dropout_hash.h). step (two uint32, low first) and row0 (the
 * global row of the run's batch row 0) are read from the control block (ctrl.h) at c_off
 * and c_off + CTRL_ROW0 - CTRL_STEP, so the recorded command buffer needs no change per
 * step or per micro-batch. row_units: elements per batch row (0: not keyed by rows). */
struct push_dropout {
    VKT_U32 n;
    VKT_U32 threshold;
    VKT_F32 scale, beta;
    VKT_U32 seed_lo, seed_hi;
    VKT_U32 x_off, c_off, y_off;
    VKT_U32 i_off, row_units;
};

#ifndef VULKAN
#define VKT_PUSH_FITS(s) _Static_assert(sizeof(struct s) <= 128, #s " exceeds 128 bytes")
VKT_PUSH_FITS(push_gemm);
VKT_PUSH_FITS(push_gemm_reduce);
VKT_PUSH_FITS(push_cast);
VKT_PUSH_FITS(push_unary);
VKT_PUSH_FITS(push_binary);
VKT_PUSH_FITS(push_reduce);
VKT_PUSH_FITS(push_softmax);
VKT_PUSH_FITS(push_fill);
VKT_PUSH_FITS(push_bias_act);
VKT_PUSH_FITS(push_sce);
VKT_PUSH_FITS(push_mse);
VKT_PUSH_FITS(push_axpby);
VKT_PUSH_FITS(push_block);
VKT_PUSH_FITS(push_dropout);
VKT_PUSH_FITS(push_optim);
VKT_PUSH_FITS(optim_step_hyper);
#endif

#endif /* VKT_PUSH_H */
