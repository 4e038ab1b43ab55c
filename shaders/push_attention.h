/*
 * push_attention.h - the push constants of the fused causal attention kernels
 * (shaders/attention*.comp, dispatched by engine/kernels/attention.c). Same conventions
 * as push.h: only 4-byte scalars, so C and the std430 push block agree on every offset;
 * at most 128 bytes (checked in C below). Offsets named *_off are element shifts from
 * the start of their binding (gpu_arg_shift).
 *
 * Shapes: qkv [b, t, 3 * heads * d], y and dy [b, t, heads * d]. What the forward saves
 * for the backward (at p_off) and the backward's workspace depend on the kernel:
 *   attention.comp (attention_shuffle, attention_rows): probs [b, heads, t, t]; workspace
 *     [b, heads, t, t] (dP) followed by [b, heads, t] (the row sums D_i). Work goes in
 *     blocks of 8 consecutive rows (queries, or keys in the last backward pass).
 *   attention_flash.comp: the row logsumexps [b, heads, t]; workspace D_i [b, heads, t].
 *     Work goes in blocks of rows_per_block rows (attention_plan.c).
 * A block covers consecutive rows of one (sequence, head); `blocks` = b * heads *
 * blocks_per_head.
 */
#ifndef VKT_PUSH_ATTENTION_H
#define VKT_PUSH_ATTENTION_H

#include "push.h" /* VKT_U32, VKT_F32 */

struct push_attention {
    VKT_U32 b, t, heads, d;
    VKT_U32 blocks_per_head;       /* ceil(t / rows of a block) */
    VKT_U32 blocks;                /* b * heads * blocks_per_head */
    VKT_F32 scale;                 /* 1 / sqrt(d) */
    VKT_F32 drop_scale;            /* 1 / (1 - p_drop) */
    VKT_U32 dropout;               /* 1: p_drop > 0 */
    VKT_U32 threshold;             /* dropout: kept iff hash >= threshold */
    VKT_U32 seed_lo, seed_hi;
    VKT_F32 beta;                  /* backward: dqkv = new + beta * dqkv (0: not read) */
    VKT_U32 qkv_off, y_off, p_off, c_off; /* y_off: y forward, dy backward (attention.comp),
                                      y in both (attention_flash.comp); p_off: saved */
    VKT_U32 dqkv_off, ws_off;
    VKT_U32 drop_off;              /* dropout: b0 * heads * t * t (mod 2^32), b0 the global
                                      index of sequence 0: added to the mask index */
    VKT_U32 dy_off;                /* attention_flash.comp's backward: dy */
    VKT_U32 drop_row;              /* dropout: heads * t * t times the sequences per row of
                                      the control block's row base (ctrl.h, CTRL_ROW0, read
                                      at run time), added to drop_off (0: not read) */
};

#ifndef VULKAN
VKT_PUSH_FITS(push_attention);
#endif

#endif /* VKT_PUSH_ATTENTION_H */
