/* The host gradient sum of sync data parallelism (engine/parallel/reduce_sum.h):
 *  - reduce_sum is bitwise equal to the scalar loop the trainer used before (s = 0.0f;
 *    for q: s += w[q] * g[q][i]; written to every replica), on lengths around its blocks
 *    and the pool's chunks (1 to 1 MiB + 5 elements), 1 to 7 sources with uneven weights
 *    (rows / batch, as the trainer's), sources at misaligned addresses, in place (the
 *    in-process trainer) or into a separate destination (across ranks), values whose sum
 *    depends on the order (so a reordered sum would be caught: checked), -0 products;
 *    nothing outside the destinations is written;
 *  - the pool: 1 to 3 calling threads and 0 to 3 helpers run jobs one after another
 *    (the counter starts over each time), every element summed once, bitwise as above;
 *  - the pool's size follows the bytes and the cores. */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "parallel/reduce_sum.h"
#include "platform/platform.h"

#define MAX_SRC 7

/* The trainer's loop before reduce_sum (sync.c:reduce_chunk at 29f8103), with the
 * destinations separate from the sources. */
static void old_loop(float *const *dst, uint32_t n_dst, const float *const *src,
                     const float *w, uint32_t n_src, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++) {
        float s = 0.0f;
        for (uint32_t q = 0; q < n_src; q++)
            s += w[q] * src[q][i];
        for (uint32_t d = 0; d < n_dst; d++)
            dst[d][i] = s;
    }
}

/* Gradient-like values over many magnitudes and both signs, with zeros and negative
 * zeros (so products of -0 occur), rounding differently when reordered. */
static void fill(float *x, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++) {
        uint64_t r = th_rand_u64();
        float v = th_rand_uniform(-1.0f, 1.0f) * ldexpf(1.0f, (int)(r % 40) - 30);
        x[i] = r % 61 == 0 ? -0.0f : r % 67 == 0 ? 0.0f : v;
    }
}

/* Weights rows_q / batch of an uneven split, as trainer.c computes them. */
static void weights(float *w, uint32_t n_src, uint32_t batch)
{
    uint32_t left = batch;
    for (uint32_t q = 0; q < n_src; q++) {
        uint32_t rows = q + 1 < n_src ? batch / n_src + (q % 2 ? 1 : 0) : left;
        left -= rows;
        w[q] = (float)rows / (float)batch;
    }
}

/* n floats at `misalign` floats past the start of an allocation, GUARD guard values
 * on both sides. */
enum { GUARD = 16 };
#define GUARD_VALUE 12345.0f

static float *guarded(size_t n, uint32_t misalign, float **base)
{
    size_t total = n + misalign + 2 * (size_t)GUARD;
    *base = calloc(total, sizeof **base);
    if (!*base)
        return NULL;
    for (size_t i = 0; i < total; i++)
        (*base)[i] = GUARD_VALUE;
    return *base + GUARD + misalign;
}

static int guards_hold(const float *x, size_t n)
{
    int ok = 1;
    for (size_t i = 1; i <= GUARD; i++)
        ok &= x[-(ptrdiff_t)i] == GUARD_VALUE && x[n - 1 + i] == GUARD_VALUE;
    return ok;
}

/* One case: the sources at `misalign` floats past an aligned start; the sum written
 * back into every source (in place) or into one separate destination. */
static void check_case(size_t n, uint32_t n_src, uint32_t misalign, int in_place)
{
    float *base[MAX_SRC + 1] = {0}, *g[MAX_SRC + 1], w[MAX_SRC];
    const float *src[MAX_SRC], *refsrc[MAX_SRC];
    float *ref[MAX_SRC] = {0}, *want = malloc(n * sizeof *want);
    int ok = want != NULL;
    for (uint32_t q = 0; q <= n_src; q++) { /* g[n_src]: the separate destination */
        g[q] = guarded(n, misalign, &base[q]);
        ok &= g[q] != NULL;
    }
    for (uint32_t q = 0; ok && q < n_src; q++) {
        fill(g[q], n);
        ref[q] = malloc(n * sizeof *ref[q]);
        ok &= ref[q] != NULL;
        if (ok)
            memcpy(ref[q], g[q], n * sizeof *ref[q]);
        src[q] = g[q];
        refsrc[q] = ref[q];
    }
    TH_CHECK(ok, "memory for %zu x %u floats", n, n_src);
    if (ok) {
        weights(w, n_src, 1000 + n_src);
        old_loop(&want, 1, refsrc, w, n_src, n);
        if (in_place)
            reduce_sum(g, n_src, src, w, n_src, n);
        else
            reduce_sum(&g[n_src], 1, src, w, n_src, n);
        uint64_t bad = 0, first_bad = n;
        uint32_t q0 = in_place ? 0 : n_src, q1 = in_place ? n_src : n_src + 1;
        for (uint32_t q = q0; q < q1; q++)
            for (size_t i = 0; i < n; i++)
                if (memcmp(&g[q][i], &want[i], sizeof want[i]) != 0 && bad++ == 0)
                    first_bad = i;
        TH_CHECK(bad == 0, "%zu elements, %u sources, misaligned by %u, %s: bitwise equal to "
                 "the scalar loop (%llu differ, first at %llu)", n, n_src, misalign,
                 in_place ? "in place" : "separate destination", (unsigned long long)bad,
                 (unsigned long long)first_bad);
        int guards = 1;
        for (uint32_t q = 0; q <= n_src; q++)
            guards &= guards_hold(g[q], n);
        if (!in_place) /* the sources stay as they were */
            for (uint32_t q = 0; q < n_src; q++)
                guards &= memcmp(g[q], ref[q], n * sizeof *ref[q]) == 0;
        TH_CHECK(guards, "%zu elements, %u sources: nothing written outside the destinations",
                 n, n_src);
    }
    for (uint32_t q = 0; q <= n_src; q++)
        free(base[q]);
    for (uint32_t q = 0; q < n_src; q++)
        free(ref[q]);
    free(want);
}

/* The data discriminates the order: the same sum in reverse source order differs
 * somewhere, so a reduce_sum that reordered would fail the cases above. */
static void check_order_matters(void)
{
    enum { N = 4096, S = 3 };
    float *g[S], w[S];
    for (uint32_t q = 0; q < S; q++) {
        g[q] = malloc(N * sizeof *g[q]);
        fill(g[q], N);
    }
    weights(w, S, 1003);
    uint64_t differ = 0;
    for (uint32_t i = 0; i < N; i++) {
        float fwd = 0.0f, rev = 0.0f;
        for (uint32_t q = 0; q < S; q++)
            fwd += w[q] * g[q][i];
        for (uint32_t q = S; q-- > 0;)
            rev += w[q] * g[q][i];
        differ += memcmp(&fwd, &rev, sizeof fwd) != 0;
    }
    TH_CHECK(differ > 0, "the test data round differently in another order (%llu of %d)",
             (unsigned long long)differ, N);
    for (uint32_t q = 0; q < S; q++)
        free(g[q]);
}

/* ---- the pool ---- */

typedef struct pool_job {
    float *stage[MAX_SRC];
    float w[MAX_SRC];
    uint32_t n_src;
    uint64_t n;
    unsigned char *seen; /* chunks' elements summed, to catch an element summed twice */
    int twice;
} pool_job;

static void job_range(void *user, uint64_t begin, uint64_t end)
{
    pool_job *j = user;
    float *dst[MAX_SRC];
    for (uint32_t q = 0; q < j->n_src; q++)
        dst[q] = j->stage[q] + begin;
    reduce_sum(dst, j->n_src, (const float *const *)dst, j->w, j->n_src, end - begin);
    for (uint64_t i = begin; i < end; i++) { /* chunks are disjoint: no race on seen[] */
        if (j->seen[i])
            j->twice = 1;
        j->seen[i] = 1;
    }
}

typedef struct caller_arg {
    reduce_pool *pool;
    uint32_t index;
    pool_job *jobs;
    uint32_t n_jobs;
    plat_barrier *barrier;
} caller_arg;

static void caller_thread(void *arg)
{
    caller_arg *a = arg;
    for (uint32_t k = 0; k < a->n_jobs; k++) {
        plat_barrier_wait(a->barrier, 0); /* a job starts after every caller left the last */
        reduce_pool_run(a->pool, a->index, job_range, &a->jobs[k], a->jobs[k].n);
    }
}

static void check_pool(uint32_t callers, uint32_t helpers)
{
    static const uint64_t sizes[3] = {(1u << 20) + 5, 3, 3 * REDUCE_CHUNK};
    enum { JOBS = 3, SRC = 3 };
    pool_job jobs[JOBS];
    float *want[JOBS] = {0};
    memset(jobs, 0, sizeof jobs);
    int ok = 1;
    for (uint32_t k = 0; k < JOBS; k++) {
        pool_job *j = &jobs[k];
        j->n_src = SRC;
        j->n = sizes[k];
        weights(j->w, SRC, 997 + k);
        j->seen = calloc(j->n, 1);
        want[k] = malloc(j->n * sizeof *want[k]);
        ok &= j->seen && want[k];
        const float *src[SRC];
        for (uint32_t q = 0; ok && q < SRC; q++) {
            j->stage[q] = malloc(j->n * sizeof *j->stage[q]);
            ok &= j->stage[q] != NULL;
            if (ok)
                fill(j->stage[q], j->n);
            src[q] = j->stage[q];
        }
        if (ok)
            old_loop(&want[k], 1, src, j->w, SRC, j->n);
    }
    reduce_pool *pool = NULL;
    ok = ok && reduce_pool_create(callers, helpers, &pool) == VKT_OK;
    TH_CHECK(ok, "pool of %u callers and %u helpers created", callers, helpers);
    if (ok) {
        TH_CHECK(reduce_pool_threads(pool) == callers + helpers &&
                     reduce_pool_callers(pool) == callers,
                 "the pool counts %u threads", callers + helpers);
        plat_barrier *barrier = plat_barrier_create(callers);
        caller_arg args[4];
        plat_thread *threads[4] = {0};
        for (uint32_t c = 0; c < callers; c++) {
            args[c] = (caller_arg){pool, c, jobs, JOBS, barrier};
            if (c > 0)
                plat_thread_start(&threads[c], caller_thread, &args[c]);
        }
        caller_thread(&args[0]);
        for (uint32_t c = 1; c < callers; c++)
            plat_thread_join(threads[c]);
        plat_barrier_destroy(barrier);
        for (uint32_t k = 0; k < JOBS; k++) {
            pool_job *j = &jobs[k];
            uint64_t missing = 0, bad = 0;
            for (uint64_t i = 0; i < j->n; i++) {
                missing += !j->seen[i];
                for (uint32_t q = 0; q < SRC; q++)
                    bad += memcmp(&j->stage[q][i], &want[k][i], sizeof(float)) != 0;
            }
            TH_CHECK(!missing && !j->twice && !bad,
                     "pool %u+%u, job %u (%llu elements): every element summed once (%llu "
                     "missed%s), bitwise equal to the scalar loop (%llu differ)", callers,
                     helpers, k, (unsigned long long)j->n, (unsigned long long)missing,
                     j->twice ? ", some twice" : "", (unsigned long long)bad);
        }
    }
    reduce_pool_destroy(pool);
    for (uint32_t k = 0; k < JOBS; k++) {
        for (uint32_t q = 0; q < SRC; q++)
            free(jobs[k].stage[q]);
        free(jobs[k].seen);
        free(want[k]);
    }
}

static void check_pool_size(void)
{
    TH_CHECK(reduce_pool_size(1, 16) == 1, "a tiny sum: 1 thread");
    TH_CHECK(reduce_pool_size(REDUCE_THREAD_BYTES + 1, 16) == 2, "just over one thread's bytes: 2");
    TH_CHECK(reduce_pool_size(64ull << 20, 16) == REDUCE_MAX_THREADS, "a large sum: the cap");
    TH_CHECK(reduce_pool_size(64ull << 20, 2) == 2, "a large sum on 2 cores: 2");
    TH_CHECK(reduce_pool_size(64ull << 20, 0) == 1, "no core count: 1");
    /* bench parallel's MLP, 2 replicas: 2 x 2 x 235152 x 4 bytes = 3.76 MB */
    TH_CHECK(reduce_pool_size(2ull * 2 * 235152 * 4, 16) == REDUCE_MAX_THREADS &&
                 reduce_pool_size(2ull * 2 * 235152 * 4, 2) == 2,
             "the MLP's sum takes the cap on 16 cores, both on 2");
}

int main(void)
{
    th_init_host("test_reduce_host");
    check_order_matters();
    static const size_t lengths[] = {1, 3, 1023, 1024, 1025, 4097, REDUCE_CHUNK - 1,
                                       REDUCE_CHUNK + 1, (1u << 20) + 5};
    for (size_t l = 0; l < sizeof lengths / sizeof *lengths; l++)
        for (uint32_t n_src = 2; n_src <= 4; n_src++)
            check_case(lengths[l], n_src, (uint32_t)(l % 4), (int)(l % 2 == 0));
    check_case(4097, 1, 1, 1);   /* one source: 0 + w g */
    check_case(4097, 7, 3, 0);   /* 7 sources */
    check_case(1025, 3, 0, 0);
    check_case(1025, 3, 0, 1);
    check_pool_size();
    for (uint32_t callers = 1; callers <= 3; callers++)
        for (uint32_t helpers = 0; helpers <= 3; helpers += callers == 2 ? 1 : 3)
            check_pool(callers, helpers);
    return th_finish();
}
