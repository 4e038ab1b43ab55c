/*
 * push_reduce.h - the push constants of the replicas' gradient average on their shared
 * device (shaders/reduce_avg.comp, engine/kernels/reduce_avg.c). Same conventions as
 * push.h: 4-byte scalars (arrays of them: std430 strides them by 4, as C does), at most
 * 128 bytes (checked in C below); *_off are element shifts from the start of a binding.
 */
#ifndef VKT_PUSH_REDUCE_H
#define VKT_PUSH_REDUCE_H

#include "push.h" /* VKT_U32, VKT_F32 */

/* Gradients one dispatch sums: bindings 1..REDUCE_AVG_INPUTS (GPU_MAX_BINDINGS is 8;
 * binding 0 is the output). More replicas chain dispatches, each adding to the last. */
#define REDUCE_AVG_INPUTS 6

/* out[i] = ((s + w[0] g0[i]) + w[1] g1[i]) + ... over the k inputs bound, each product
 * and sum rounded to float in this order (no fused multiply-add), s = 0 or, when acc,
 * out[i] itself (the previous dispatch's partial sum): the host's scalar loop
 * `s = 0.0f; for q: s += w[q] * g[q][i];`, bit for bit. */
struct push_reduce_avg {
    VKT_U32 n;
    VKT_U32 k;                         /* inputs bound, 1..REDUCE_AVG_INPUTS */
    VKT_U32 acc;                       /* 1: start from out[i] */
    VKT_U32 out_off;
    VKT_U32 g_off[REDUCE_AVG_INPUTS];
    VKT_F32 w[REDUCE_AVG_INPUTS];
};

#ifndef VULKAN
_Static_assert(sizeof(struct push_reduce_avg) <= 128, "push_reduce_avg exceeds 128 bytes");
#endif

#endif
