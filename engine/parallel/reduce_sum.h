/*
 * reduce_sum.h - the host sum of synchronous data parallelism (reduce_sum.c): the
 * weighted sum of the replicas' gradients, vectorizable and bitwise equal to the scalar
 * loop it replaced, and a pool of host threads sized to the cores that splits it.
 *
 * The sum of element i is ((0 + w_0 g_0[i]) + w_1 g_1[i]) + ... in source order, each
 * product and addition rounded to float, whatever the vector width or the thread that
 * computes it: reduce_sum.c is compiled with -ffp-contract=off, so no multiply-add is
 * fused, and the order runs over sources, never across elements. Replicas therefore get
 * the same bits as from `s = 0.0f; for q: s += w[q] * g[q][i];` (tests/test_reduce_host.c).
 */
#ifndef VKT_PARALLEL_REDUCE_SUM_H
#define VKT_PARALLEL_REDUCE_SUM_H

#include <stdint.h>

#include "vkt.h"

#define REDUCE_CHUNK 16384u      /* elements a pool thread takes at a time (64 KiB) */
#define REDUCE_THREAD_BYTES (256u << 10) /* bytes moved (read + written) per pool thread */
#define REDUCE_MAX_THREADS 8u    /* beyond this a host's memory bandwidth is spent */

/* dst[d][i] = sum over q in order of w[q] * src[q][i], for i < n and every d < n_dst;
 * each destination is written once per element, after every source was read, so a
 * destination may be one of the sources (the sum written back in place). */
void reduce_sum(float *const *dst, uint32_t n_dst, const float *const *src, const float *w,
                uint32_t n_src, uint64_t n);

/* The pool's size for a sum moving `bytes` (reads and writes) on a host with `cores`:
 * one thread per REDUCE_THREAD_BYTES, at most the cores and REDUCE_MAX_THREADS, at
 * least 1. */
uint32_t reduce_pool_size(uint64_t bytes, long cores);

/* A job: fn over element ranges [begin, end) that cover [0, n) once, chunk by chunk. */
typedef void (*reduce_range_fn)(void *user, uint64_t begin, uint64_t end);

typedef struct reduce_pool reduce_pool;

/* A pool of `callers` outside threads (callers 0 .. callers-1: e.g. the replicas'
 * threads, already awake at a barrier) and `helpers` threads of its own. */
vkt_status reduce_pool_create(uint32_t callers, uint32_t helpers, reduce_pool **out);
void reduce_pool_destroy(reduce_pool *p);
uint32_t reduce_pool_threads(const reduce_pool *p); /* callers + helpers; 0 for NULL */
uint32_t reduce_pool_callers(const reduce_pool *p);

/* One job, called by each of the `callers` threads with the same arguments, and by no
 * other thread; every caller of a job returns before any calls for the next. Caller 0
 * wakes the helpers, and returns when the whole job is done and the pool ready for the
 * next; the others return when no chunk is left to take. */
void reduce_pool_run(reduce_pool *p, uint32_t caller, reduce_range_fn fn, void *user,
                     uint64_t n);

#endif
