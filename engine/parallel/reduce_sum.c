/* The host sum of sync data parallelism (reduce_sum.h): blocks of a few KiB summed in an
 * accumulator that stays in L1, source by source, with loops the compiler vectorizes
 * (restrict pointers, no dependence across elements); and a pool of threads that takes
 * chunks of a job from a shared counter. Compiled with -ffp-contract=off (CMakeLists.txt):
 * a fused multiply-add would round differently from the scalar loop. */
#include "reduce_sum.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "platform/platform.h"

#define BLOCK 1024u /* accumulator elements: 4 KiB */

/* The first source: acc = 0 + w g. The "0 +" is the scalar loop's `s = 0.0f; s += w g`,
 * which turns a product of -0 into +0; w g alone would keep -0. */
static void sum_first(float *restrict acc, const float *restrict g, float w, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        acc[i] = 0.0f + w * g[i];
}

static void sum_add(float *restrict acc, const float *restrict g, float w, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        acc[i] += w * g[i];
}

/* In place, 2 to 4 sources (the in-process trainer's usual case): the sum kept in a
 * register and written back into each source, one load and one store per element and
 * source, as a copy of the same bytes; the same order and rounding as sum_first/sum_add.
 * restrict: the sources are distinct arrays (each element is read before it is written). */
static void in_place2(float *restrict a, float *restrict b, const float *w, uint64_t n)
{
    const float wa = w[0], wb = w[1];
    for (uint64_t i = 0; i < n; i++) {
        float s = 0.0f + wa * a[i];
        s += wb * b[i];
        a[i] = b[i] = s;
    }
}

static void in_place3(float *restrict a, float *restrict b, float *restrict c, const float *w,
                      uint64_t n)
{
    const float wa = w[0], wb = w[1], wc = w[2];
    for (uint64_t i = 0; i < n; i++) {
        float s = 0.0f + wa * a[i];
        s += wb * b[i];
        s += wc * c[i];
        a[i] = b[i] = c[i] = s;
    }
}

static void in_place4(float *restrict a, float *restrict b, float *restrict c,
                      float *restrict d, const float *w, uint64_t n)
{
    const float wa = w[0], wb = w[1], wc = w[2], wd = w[3];
    for (uint64_t i = 0; i < n; i++) {
        float s = 0.0f + wa * a[i];
        s += wb * b[i];
        s += wc * c[i];
        s += wd * d[i];
        a[i] = b[i] = c[i] = d[i] = s;
    }
}

/* 1 when dst is exactly the sources (the sum written back in place) and they are 2 to 4
 * distinct arrays. */
static int in_place_few(float *const *dst, uint32_t n_dst, const float *const *src,
                        uint32_t n_src)
{
    if (n_dst != n_src || n_src < 2 || n_src > 4)
        return 0;
    for (uint32_t q = 0; q < n_src; q++) {
        if (dst[q] != src[q])
            return 0;
        for (uint32_t p = 0; p < q; p++)
            if (src[p] == src[q])
                return 0;
    }
    return 1;
}

void reduce_sum(float *const *dst, uint32_t n_dst, const float *const *src, const float *w,
                uint32_t n_src, uint64_t n)
{
    if (in_place_few(dst, n_dst, src, n_src)) {
        if (n_src == 2)
            in_place2(dst[0], dst[1], w, n);
        else if (n_src == 3)
            in_place3(dst[0], dst[1], dst[2], w, n);
        else
            in_place4(dst[0], dst[1], dst[2], dst[3], w, n);
        return;
    }
    float acc[BLOCK];
    for (uint64_t b = 0; b < n; b += BLOCK) {
        uint32_t len = n - b < BLOCK ? (uint32_t)(n - b) : BLOCK;
        if (n_src == 0)
            memset(acc, 0, len * sizeof *acc);
        else
            sum_first(acc, src[0] + b, w[0], len);
        for (uint32_t q = 1; q < n_src; q++)
            sum_add(acc, src[q] + b, w[q], len);
        for (uint32_t d = 0; d < n_dst; d++) /* every source of the block is read */
            memcpy(dst[d] + b, acc, len * sizeof *acc);
    }
}

uint32_t reduce_pool_size(uint64_t bytes, long cores)
{
    uint64_t want = (bytes + REDUCE_THREAD_BYTES - 1) / REDUCE_THREAD_BYTES;
    uint64_t cap = cores < 1 ? 1 : (uint64_t)cores;
    cap = cap < REDUCE_MAX_THREADS ? cap : REDUCE_MAX_THREADS;
    return (uint32_t)(want < 1 ? 1 : want < cap ? want : cap);
}

/* ---- the pool ---- */

struct reduce_pool {
    uint32_t callers, helpers;
    plat_thread **threads;
    plat_monitor *mon;
    /* under mon: the job caller 0 handed to the helpers, how many participants finished */
    reduce_range_fn fn;
    void *user;
    uint64_t n, gen;
    uint32_t finished;
    int quit;
    atomic_uint_fast64_t next; /* the next chunk to take; reset by caller 0 between jobs */
};

/* Chunks of the job until none is left, then counted as finished. */
static void take_chunks(reduce_pool *p, reduce_range_fn fn, void *user, uint64_t n)
{
    for (;;) {
        uint64_t c = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed);
        if (c >= (n + REDUCE_CHUNK - 1) / REDUCE_CHUNK)
            break;
        uint64_t begin = c * REDUCE_CHUNK;
        fn(user, begin, n - begin < REDUCE_CHUNK ? n : begin + REDUCE_CHUNK);
    }
    plat_monitor_lock(p->mon);
    p->finished++;
    plat_monitor_broadcast(p->mon);
    plat_monitor_unlock(p->mon);
}

static void helper(void *arg)
{
    reduce_pool *p = arg;
    uint64_t seen = 0;
    for (;;) {
        plat_monitor_lock(p->mon);
        while (!p->quit && p->gen == seen)
            plat_monitor_wait(p->mon);
        if (p->quit) {
            plat_monitor_unlock(p->mon);
            return;
        }
        seen = p->gen;
        reduce_range_fn fn = p->fn;
        void *user = p->user;
        uint64_t n = p->n;
        plat_monitor_unlock(p->mon);
        take_chunks(p, fn, user, n);
    }
}

vkt_status reduce_pool_create(uint32_t callers, uint32_t helpers, reduce_pool **out)
{
    *out = NULL;
    reduce_pool *p = calloc(1, sizeof *p);
    if (!p)
        return VKT_ERROR_OUT_OF_MEMORY;
    p->callers = callers ? callers : 1;
    p->mon = plat_monitor_create();
    p->threads = helpers ? calloc(helpers, sizeof *p->threads) : NULL;
    atomic_init(&p->next, 0);
    if (!p->mon || (helpers && !p->threads)) {
        reduce_pool_destroy(p);
        return VKT_ERROR_OUT_OF_MEMORY;
    }
    for (; p->helpers < helpers; p->helpers++)
        if (plat_thread_start(&p->threads[p->helpers], helper, p) != 0) {
            reduce_pool_destroy(p);
            return VKT_ERROR_OUT_OF_MEMORY;
        }
    *out = p;
    return VKT_OK;
}

void reduce_pool_destroy(reduce_pool *p)
{
    if (!p)
        return;
    if (p->mon) {
        plat_monitor_lock(p->mon);
        p->quit = 1;
        plat_monitor_broadcast(p->mon);
        plat_monitor_unlock(p->mon);
    }
    for (uint32_t i = 0; i < p->helpers; i++)
        plat_thread_join(p->threads[i]);
    free(p->threads);
    plat_monitor_destroy(p->mon);
    free(p);
}

uint32_t reduce_pool_threads(const reduce_pool *p) { return p ? p->callers + p->helpers : 0; }
uint32_t reduce_pool_callers(const reduce_pool *p) { return p ? p->callers : 0; }

void reduce_pool_run(reduce_pool *p, uint32_t caller, reduce_range_fn fn, void *user,
                     uint64_t n)
{
    if (caller == 0 && p->helpers) {
        plat_monitor_lock(p->mon);
        p->fn = fn;
        p->user = user;
        p->n = n;
        p->gen++;
        plat_monitor_broadcast(p->mon);
        plat_monitor_unlock(p->mon);
    }
    take_chunks(p, fn, user, n);
    if (caller != 0)
        return;
    /* every participant has taken its last chunk (and found none after it): the job is
     * done and nobody reads the counter until the next job */
    plat_monitor_lock(p->mon);
    while (p->finished < p->callers + p->helpers)
        plat_monitor_wait(p->mon);
    p->finished = 0;
    atomic_store_explicit(&p->next, 0, memory_order_relaxed);
    plat_monitor_unlock(p->mon);
}
