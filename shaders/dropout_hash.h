/*
 * dropout_hash.h - the counter-based hash of dropout, defined once and included by both C
 * (engine/kernels: dispatch and CPU references; engine/graph: the graph's reference) and
 * GLSL (shaders/dropout.comp, attention.comp), like push.h. Element idx of a dropout map
 * is kept when
 *     dropout_hash32(key + dropout_hash32(idx)) >= threshold,   threshold = p * 2^32,
 * key = a hash chain of the step (high word first) and the node's seed (high word first),
 * idx the element's index in the whole (global) batch modulo 2^32: the shaders add a uint
 * offset to a uint local index, and both wrap the same way. Kept elements are scaled by
 * 1 / (1 - p).
 */
#ifndef VKT_DROPOUT_HASH_H
#define VKT_DROPOUT_HASH_H

#ifdef VULKAN /* defined by glslang when compiling for Vulkan */
#define VKT_DH_U32 uint
#define VKT_DH_BOOL bool
#define VKT_DH_FN
#else
#include <stdint.h>
#define VKT_DH_U32 uint32_t
#define VKT_DH_BOOL int
#define VKT_DH_FN static inline
#endif

/* "lowbias32" integer finalizer (Chris Wellons' hash-prospector). */
VKT_DH_FN VKT_DH_U32 dropout_hash32(VKT_DH_U32 x)
{
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

/* The per-step key of a dropout node: the step and the seed, each as two words. */
VKT_DH_FN VKT_DH_U32 dropout_key(VKT_DH_U32 step_lo, VKT_DH_U32 step_hi, VKT_DH_U32 seed_lo,
                                 VKT_DH_U32 seed_hi)
{
    VKT_DH_U32 k = dropout_hash32(step_hi);
    k = dropout_hash32(k ^ step_lo);
    k = dropout_hash32(k ^ seed_hi);
    return dropout_hash32(k ^ seed_lo);
}

/* Whether element idx (global index, modulo 2^32) is kept. */
VKT_DH_FN VKT_DH_BOOL dropout_kept(VKT_DH_U32 key, VKT_DH_U32 idx, VKT_DH_U32 threshold)
{
    return dropout_hash32(key + dropout_hash32(idx)) >= threshold;
}

#ifndef VULKAN
/* C conveniences: the key from 64-bit seed and step, and the threshold of probability p
 * (the shaders read it from their push constants). */
static inline uint32_t dropout_key64(uint64_t seed, uint64_t step)
{
    return dropout_key((uint32_t)step, (uint32_t)(step >> 32), (uint32_t)seed,
                       (uint32_t)(seed >> 32));
}

static inline uint32_t dropout_threshold(float p)
{
    double t = (double)p * 4294967296.0;
    return t >= 4294967295.0 ? 4294967295u : (uint32_t)t;
}
#endif

#undef VKT_DH_U32
#undef VKT_DH_BOOL
#undef VKT_DH_FN

#endif
