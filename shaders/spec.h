/*
 * spec.h - the specialization constants of every shader, by name, with their count:
 * defined once and included by both GLSL (layout(constant_id = SPEC_..._NAME) in the
 * shader) and C (the dispatch code fills `uint32_t spec[SPEC_..._COUNT]` with designated
 * initializers, [SPEC_..._NAME] = value, and its gpu_kernel says SPEC_..._COUNT), like
 * push.h. A constant id at or past its count is then a compile error in C, and
 * gpu_kernel_check (engine/gpu/spirv.c) fails a pipeline whose constants are not exactly
 * the shader's constant_ids 0..count-1. Plain macros: both preprocessors read them.
 *
 * Adding a constant: a name here (the next id, and the count one more), the
 * layout(constant_id = ...) declaration in the shader, the value at the dispatch.
 */
#ifndef VKT_SPEC_H
#define VKT_SPEC_H

/* The workgroup size (layout(local_size_x_id = SPEC_WG) in): constant 0 of every shader
 * whose workgroup the host sizes (all but the GEMMs). */
#define SPEC_WG 0

/* Shaders with no constant but the workgroup size: fill.comp, copy.comp (kernels/fill.c),
 * cast.comp (kernels/cast.c),
 * dropout.comp, sce.comp, sce_backward.comp (kernels/train_ops.c), optim_norm.comp
 * (optim/update.c). */
#define SPEC_WG_ONLY_COUNT 1

/* attention.comp (kernels/attention.c) */
#define SPEC_ATTENTION_PASS 1     /* 0 forward, 1 backward by query rows, 2 by key rows */
#define SPEC_ATTENTION_D 2        /* head size */
#define SPEC_ATTENTION_SHUFFLE 3  /* row pairs through subgroupShuffle */
#define SPEC_ATTENTION_VEC 4      /* qkv, y / dy, dqkv as vec4s */
#define SPEC_ATTENTION_VEC_T 5    /* probs and workspace as vec4s */
#define SPEC_ATTENTION_COUNT 6

/* attention_flash.comp (kernels/attention_flash.c; tiles planned by attention_plan.c) */
#define SPEC_FLASH_PASS 1         /* 0 forward, 1 backward dq (+ D), 2 backward dk, dv */
#define SPEC_FLASH_D 2            /* head size */
#define SPEC_FLASH_LANES 3        /* lanes sharing a row: 1, 2, 4 or 8 */
#define SPEC_FLASH_ROWS 4         /* rows per lane group */
#define SPEC_FLASH_TILE 5         /* rows of a shared-memory tile (keys, or queries) */
#define SPEC_FLASH_VEC 6          /* qkv, y, dy and dqkv rows as vec4s */
#define SPEC_FLASH_COUNT 7
#define SPEC_FLASH_BF16 7         /* attention_flash_lowp.comp: qkv and dy bf16 (else fp16) */
#define SPEC_FLASH_LOWP_COUNT 8

/* attention_frag.glsl: attention_frag.comp, attention_coopmat_f16.comp,
 * attention_coopmat_bf16.comp (kernels/attention_cm.c, plan ka_frag_plan): a workgroup of
 * WARPS warps of SG lanes takes WARPS TM query rows; keys in tiles of BN; rows padded from
 * D to DP; fragments TM x TN, multiplying TM x TK by TK x TN (the cooperative-matrix shape) */
#define SPEC_ATTN_FRAG_D 1
#define SPEC_ATTN_FRAG_DP 2
#define SPEC_ATTN_FRAG_BN 3
#define SPEC_ATTN_FRAG_TM 4
#define SPEC_ATTN_FRAG_TN 5
#define SPEC_ATTN_FRAG_TK 6
#define SPEC_ATTN_FRAG_SG 7
#define SPEC_ATTN_FRAG_WARPS 8
#define SPEC_ATTN_FRAG_BF16 9
#define SPEC_ATTN_FRAG_COUNT 10
/* attention_frag_bwd.glsl (attention_frag_bwd.comp, attention_coopmat_bwd_f16.comp, _bf16):
 * the ten above and the pass, 1 (by query blocks: dq, D) or 2 (by key blocks: dk, dv) */
#define SPEC_ATTN_BWD_PASS 10
#define SPEC_ATTN_BWD_COUNT 11

/* axpby.comp (kernels/train_ops.c) */
#define SPEC_AXPBY_ACCUM 1        /* beta != 0 */
#define SPEC_AXPBY_VEC4 2
#define SPEC_AXPBY_COUNT 3

/* batchnorm.comp (kernels/norm.c) */
#define SPEC_BATCHNORM_TRAIN 1
#define SPEC_BATCHNORM_VEC4 2
#define SPEC_BATCHNORM_COUNT 3

/* batchnorm_backward.comp (kernels/norm.c) */
#define SPEC_BATCHNORM_BACKWARD_VEC4 1
#define SPEC_BATCHNORM_BACKWARD_HAS_DX 2
#define SPEC_BATCHNORM_BACKWARD_HAS_DG 3
#define SPEC_BATCHNORM_BACKWARD_HAS_DB 4
#define SPEC_BATCHNORM_BACKWARD_COUNT 5

/* bias_act.comp (kernels/train_ops.c) */
#define SPEC_BIAS_ACT_OP 1        /* vkt_unary_op */
#define SPEC_BIAS_ACT_HAS_BIAS 2
#define SPEC_BIAS_ACT_SEPARATE_Y 3
#define SPEC_BIAS_ACT_VEC4 4
#define SPEC_BIAS_ACT_PRE16 5     /* 0, or the dtype.h code of a 16-bit pre-activation */
#define SPEC_BIAS_ACT_FROM16 6    /* kt_act_rebuild16: y = r(f(widen(pre))), 16 bits */
#define SPEC_BIAS_ACT_COUNT 7

/* bias_act_backward.comp (kernels/train_ops.c) */
#define SPEC_BIAS_ACT_BACKWARD_OP 1
#define SPEC_BIAS_ACT_BACKWARD_HAS_BIAS 2
#define SPEC_BIAS_ACT_BACKWARD_FROM_Y 3
#define SPEC_BIAS_ACT_BACKWARD_WRITE_DZ 4
#define SPEC_BIAS_ACT_BACKWARD_VEC4 5
#define SPEC_BIAS_ACT_BACKWARD_ACCUM 6  /* beta != 0 */
#define SPEC_BIAS_ACT_BACKWARD_RP 7     /* row phases of the VEC4 bias path */
#define SPEC_BIAS_ACT_BACKWARD_V16 8    /* 0, or the dtype.h code of a 16-bit V */
#define SPEC_BIAS_ACT_BACKWARD_COUNT 9

/* binary.comp (kernels/binary.c) */
#define SPEC_BINARY_OP 1          /* vkt_binary_op */
#define SPEC_BINARY_SAME_SHAPE 2
#define SPEC_BINARY_COUNT 3

/* binary_backward.comp (kernels/binary.c) */
#define SPEC_BINARY_BACKWARD_OP 1
#define SPEC_BINARY_BACKWARD_WHICH 2    /* 0: gradient of a, 1: of b */
#define SPEC_BINARY_BACKWARD_T 3        /* threads per gradient element, a power of 2 */
#define SPEC_BINARY_BACKWARD_COUNT 4

/* block.comp (kernels/train_ops.c) */
#define SPEC_BLOCK_KIND 1         /* 0 slice, 1 broadcast, 2 transpose */
#define SPEC_BLOCK_COUNT 2

/* im2col.comp and col2im.comp (kernels/conv.c): the window's geometry, then one each */
#define SPEC_CONV_KH 1
#define SPEC_CONV_KW 2
#define SPEC_CONV_SH 3
#define SPEC_CONV_SW 4
#define SPEC_CONV_DH 5
#define SPEC_CONV_DW 6
#define SPEC_IM2COL_C 7           /* input channels */
#define SPEC_IM2COL_COUNT 8
#define SPEC_COL2IM_VEC4 7
#define SPEC_COL2IM_COUNT 8

/* conv_implicit.comp (kernels/conv_implicit.c): the window as above (SPEC_CONV_KH..DW),
 * then the pass (CONV_PASS_*, push_conv.h) and the tile: BM x BN of C per workgroup of
 * (BM / TM) x (BN / TN) threads, K in slabs of BK */
#define SPEC_CONV_IMPLICIT_PASS 7
#define SPEC_CONV_IMPLICIT_BM 8
#define SPEC_CONV_IMPLICIT_BN 9
#define SPEC_CONV_IMPLICIT_BK 10
#define SPEC_CONV_IMPLICIT_TM 11
#define SPEC_CONV_IMPLICIT_TN 12
#define SPEC_CONV_IMPLICIT_COUNT 13

/* conv_frag.glsl: conv_frag.comp, conv_coopmat_f16.comp, conv_coopmat_bf16.comp
 * (kernels/conv_implicit.c, the plan kc_conv_frag_plan): the window (SPEC_CONV_KH..DW),
 * the pass and BM, BN, BK at conv_implicit's places, then gemm_lowp.glsl's fragments: a
 * workgroup of 2 x 2 warps of SG lanes, each warp BM / 2 x BN / 2 of C as fragments of
 * TM x TN, multiplying TM x TK by TK x TN at a time (the cooperative-matrix shape) */
#define SPEC_CONV_FRAG_PASS 7
#define SPEC_CONV_FRAG_BM 8
#define SPEC_CONV_FRAG_BN 9
#define SPEC_CONV_FRAG_BK 10
#define SPEC_CONV_FRAG_TM 11
#define SPEC_CONV_FRAG_TN 12
#define SPEC_CONV_FRAG_TK 13
#define SPEC_CONV_FRAG_SG 14
#define SPEC_CONV_FRAG_COUNT 15

/* conv_reduce.comp (kernels/conv_implicit.c): the workgroup only */
#define SPEC_CONV_REDUCE_COUNT 1

/* conv_bias_grad.comp (kernels/conv.c) */
#define SPEC_CONV_BIAS_GRAD_VEC_IN 1
#define SPEC_CONV_BIAS_GRAD_COUNT 2

/* conv_move.comp (kernels/conv.c) */
#define SPEC_CONV_MOVE_DIR 1      /* 0: y = rows + bias, 1: rows = dy */
#define SPEC_CONV_MOVE_HAS_BIAS 2
#define SPEC_CONV_MOVE_QUAD 3
#define SPEC_CONV_MOVE_VEC_IN 4
#define SPEC_CONV_MOVE_VEC_OUT 5
#define SPEC_CONV_MOVE_RUN 6
#define SPEC_CONV_MOVE_RELU 7
#define SPEC_CONV_MOVE_VEC_Y 8
#define SPEC_CONV_MOVE_COUNT 9

/* embedding.comp (kernels/embedding.c) */
#define SPEC_EMBEDDING_VEC4 1
#define SPEC_EMBEDDING_COUNT 2

/* embedding_backward.comp (kernels/embedding.c) */
#define SPEC_EMBEDDING_BACKWARD_A 1
#define SPEC_EMBEDDING_BACKWARD_VEC4 2
#define SPEC_EMBEDDING_BACKWARD_IDS4 3
#define SPEC_EMBEDDING_BACKWARD_COUNT 4

/* gemm_cpu.glsl: gemm_cpu.comp and gemm_cpu_sampler.comp (kernels/gemm.c); fixed
 * workgroup */
#define SPEC_GEMM_CPU_TRANS_A 0   /* A is stored [K, M] */
#define SPEC_GEMM_CPU_TRANS_B 1   /* B is stored [N, K] */
#define SPEC_GEMM_CPU_VEC_A 2     /* A is bound as RGBA32F */
#define SPEC_GEMM_CPU_VEC_B 3     /* B is bound as RGBA32F */
#define SPEC_GEMM_CPU_READ_C 4    /* beta != 0 */
#define SPEC_GEMM_CPU_VEC_C 5     /* vec4 stores; C read as RGBA32F */
#define SPEC_GEMM_CPU_TRANS_C 6   /* store C[j, i] (the host swapped A, B) */
#define SPEC_GEMM_CPU_COUNT 7

/* gemm_gpu.comp (kernels/gemm.c): the workgroup is TX x TY */
#define SPEC_GEMM_GPU_TRANS_A 0
#define SPEC_GEMM_GPU_TRANS_B 1
#define SPEC_GEMM_GPU_READ_C 2
#define SPEC_GEMM_GPU_BM 3
#define SPEC_GEMM_GPU_BN 4
#define SPEC_GEMM_GPU_BK 5
#define SPEC_GEMM_GPU_TX 6
#define SPEC_GEMM_GPU_TY 7
#define SPEC_GEMM_GPU_COUNT 8

/* gemm_tile.comp (kernels/gemm.c): the workgroup is SPEC_WG = (BM / TM) x (BN / TN) */
#define SPEC_GEMM_TILE_TRANS_A 1
#define SPEC_GEMM_TILE_TRANS_B 2
#define SPEC_GEMM_TILE_BM 3
#define SPEC_GEMM_TILE_BN 4
#define SPEC_GEMM_TILE_BK 5
#define SPEC_GEMM_TILE_TM 6
#define SPEC_GEMM_TILE_TN 7
#define SPEC_GEMM_TILE_COUNT 8

/* gemm_lowp.glsl: gemm_half.comp, gemm_half_f16.comp, gemm_coopmat_f16.comp and
 * gemm_coopmat_bf16.comp (kernels/gemm_lowp.c). The workgroup is SPEC_WG = (BM / WM) x
 * (BN / WN) warps of SG lanes; a warp computes WM x WN of the BM x BN tile as fragments of
 * TM x TN, multiplying TM x TK by TK x TN at a time (the cooperative-matrix shape). The
 * transposes and element types are push constants (push.h: trans_a, trans_b, GEMM_*):
 * one pipeline per tile, not one per combination (lavapipe compiles each for seconds). */
#define SPEC_LOWP_BM 1
#define SPEC_LOWP_BN 2
#define SPEC_LOWP_BK 3
#define SPEC_LOWP_WM 4
#define SPEC_LOWP_WN 5
#define SPEC_LOWP_TM 6
#define SPEC_LOWP_TN 7
#define SPEC_LOWP_TK 8
#define SPEC_LOWP_SG 9 /* lanes per warp: the subgroup size for cooperative matrices */
#define SPEC_LOWP_COUNT 10

/* gemm_reduce.comp (kernels/gemm.c) */
#define SPEC_GEMM_REDUCE_READ_C 1
#define SPEC_GEMM_REDUCE_COUNT 2

/* layernorm.comp (kernels/norm.c) */
#define SPEC_LAYERNORM_T 1        /* threads per row */
#define SPEC_LAYERNORM_VEC4 2
#define SPEC_LAYERNORM_COUNT 3

/* layernorm_backward.comp (kernels/norm.c) */
#define SPEC_LAYERNORM_BACKWARD_TR 1    /* threads per row (dx) */
#define SPEC_LAYERNORM_BACKWARD_TC 2    /* threads per column (dgamma, dbeta) */
#define SPEC_LAYERNORM_BACKWARD_VEC4 3
#define SPEC_LAYERNORM_BACKWARD_HAS_DX 4
#define SPEC_LAYERNORM_BACKWARD_HAS_DG 5
#define SPEC_LAYERNORM_BACKWARD_HAS_DB 6
#define SPEC_LAYERNORM_BACKWARD_COUNT 7

/* mse.comp (kernels/train_ops.c) */
#define SPEC_MSE_BACKWARD 1
#define SPEC_MSE_COUNT 2

/* optim_update.comp (optim/update.c) */
#define SPEC_OPTIM_UPDATE_KIND 1      /* vkt_optimizer_kind */
#define SPEC_OPTIM_UPDATE_MOMENTUM 2  /* SGD keeps a velocity in m */
#define SPEC_OPTIM_UPDATE_CLIP 3      /* the norm pass ran before */
#define SPEC_OPTIM_UPDATE_GUARD 4     /* the norm pass ran; skip the update if not finite */
#define SPEC_OPTIM_UPDATE_COUNT 5

/* pool.comp and pool_backward.comp (kernels/pool.c): the window, then one pair each */
#define SPEC_POOL_KH 1
#define SPEC_POOL_KW 2
#define SPEC_POOL_SH 3
#define SPEC_POOL_SW 4
#define SPEC_POOL_MAX 5
#define SPEC_POOL_VEC_Y 6
#define SPEC_POOL_VEC_S 7
#define SPEC_POOL_COUNT 8
#define SPEC_POOL_BACKWARD_VEC4 6
#define SPEC_POOL_BACKWARD_SAVED_TEXEL 7
#define SPEC_POOL_BACKWARD_COUNT 8

/* reduce.comp (kernels/reduce.c) */
#define SPEC_REDUCE_OP 1          /* vkt_reduce_op */
#define SPEC_REDUCE_T 2           /* threads per row */
#define SPEC_REDUCE_COUNT 3

/* rmsnorm.comp (kernels/norm.c) */
#define SPEC_RMSNORM_T 1
#define SPEC_RMSNORM_VEC4 2
#define SPEC_RMSNORM_COUNT 3

/* rmsnorm_backward.comp (kernels/norm.c) */
#define SPEC_RMSNORM_BACKWARD_TR 1
#define SPEC_RMSNORM_BACKWARD_TC 2
#define SPEC_RMSNORM_BACKWARD_VEC4 3
#define SPEC_RMSNORM_BACKWARD_HAS_DX 4
#define SPEC_RMSNORM_BACKWARD_HAS_DG 5
#define SPEC_RMSNORM_BACKWARD_COUNT 6

/* softmax.comp and softmax_backward.comp (kernels/softmax.c) */
#define SPEC_SOFTMAX_T 1          /* threads per row */
#define SPEC_SOFTMAX_COUNT 2

/* unary.comp and unary_backward.comp (kernels/unary.c) */
#define SPEC_UNARY_OP 1           /* vkt_unary_op */
#define SPEC_UNARY_COUNT 2

#endif
