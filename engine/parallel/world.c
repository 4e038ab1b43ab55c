/* The world's public functions and what every transport shares: options, accessors,
 * the poll backoff, the collectives built from the nonblocking primitives, and the
 * allreduce benchmark. The transport itself (world_mpi.c or world_none.c) sits behind
 * world.h; this file never sees <mpi.h>. */
#include "world.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "platform/platform.h"

#define WORLD_DEFAULT_TIMEOUT 60.0
#define WORLD_DEFAULT_POLL_MAX_US 200u

vkt_status vkt_world_init(int *argc, char ***argv, const vkt_world_options *options,
                          vkt_world **out_world)
{
    if (!out_world)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "vkt_world_init: out_world is NULL");
    *out_world = NULL;
    vkt_world_options o = options ? *options : (vkt_world_options){0};
    /* !(x >= 0) also catches NaN. */
    if (!(o.timeout_seconds >= 0) || isinf(o.timeout_seconds))
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT,
                        "vkt_world_init: timeout_seconds must be finite and >= 0, got %g",
                        o.timeout_seconds);
    vkt_world *w = calloc(1, sizeof *w);
    if (!w)
        return err_fail(NULL, VKT_ERROR_OUT_OF_MEMORY, "vkt_world_init: out of host memory");
    w->timeout = o.timeout_seconds > 0 ? o.timeout_seconds : WORLD_DEFAULT_TIMEOUT;
    w->poll_max_us = o.poll_max_us ? o.poll_max_us : WORLD_DEFAULT_POLL_MAX_US;
    w->size = w->local_size = 1;
    vkt_status st = world_tp_init(w, argc, argv, o.require_launcher);
    if (st != VKT_OK) {
        /* The transport left its message in w->errmsg; keep it as the thread's error. */
        err_fail(NULL, st, "%s", w->errmsg);
        free(w);
        return st;
    }
    *out_world = w;
    return VKT_OK;
}

void vkt_world_finalize(vkt_world *world)
{
    if (!world)
        return;
    world_tp_finalize(world);
    free(world);
}

uint32_t vkt_world_rank(const vkt_world *world) { return world ? world->rank : 0; }
uint32_t vkt_world_size(const vkt_world *world) { return world ? world->size : 1; }
uint32_t vkt_world_local_rank(const vkt_world *world) { return world ? world->local_rank : 0; }
uint32_t vkt_world_local_size(const vkt_world *world) { return world ? world->local_size : 1; }
int vkt_world_is_chief(const vkt_world *world) { return world ? world->rank == 0 : 1; }

const char *vkt_world_errmsg(const vkt_world *world)
{
    return world ? world->errmsg : "vkt_world_errmsg: world is NULL";
}

void vkt_world_set_timeout(vkt_world *world, double seconds)
{
    if (world && seconds > 0 && !isinf(seconds))
        world->timeout = seconds;
}

vkt_status vkt_world_broadcast(vkt_world *world, void *data, uint64_t bytes)
{
    if (bytes && !data)
        return err_fail(world ? world->errmsg : NULL, VKT_ERROR_INVALID_ARGUMENT,
                        "vkt_world_broadcast: data is NULL");
    if (!world)
        return VKT_OK; /* one rank: the data is already everywhere */
    return world_bcast(world, data, bytes, "broadcast");
}

vkt_status vkt_world_sum(vkt_world *world, double *values, uint32_t n)
{
    if (n && !values)
        return err_fail(world ? world->errmsg : NULL, VKT_ERROR_INVALID_ARGUMENT,
                        "vkt_world_sum: values is NULL");
    if (!world)
        return VKT_OK;
    return world_allreduce_f64(world, values, n, WORLD_SUM, "sum");
}

vkt_status vkt_world_keepalive(vkt_world *world, int on)
{
    return world ? world_tp_keepalive(world, on) : VKT_OK;
}

void vkt_world_abort(vkt_world *world, int code, const char *message)
{
    fprintf(stderr, "vkt: rank %u: %s\n", vkt_world_rank(world),
            message && *message ? message : "aborted");
    /* MPI_Abort kills the process without flushing stdio: whatever the application
     * printed before (a progress line, a result) would be lost. */
    fflush(stdout);
    fflush(stderr);
    if (world)
        world_tp_abort(world, code);
    exit(code);
}

void world_backoff(const vkt_world *w, uint32_t n)
{
    uint32_t cap = w && w->poll_max_us ? w->poll_max_us : WORLD_DEFAULT_POLL_MAX_US;
    uint32_t us = n >= 31 ? cap : 1u << n;
    plat_sleep((double)(us < cap ? us : cap) * 1e-6);
}

vkt_status world_allreduce_f32(vkt_world *w, float *data, uint64_t n, const char *what)
{
    world_req *req = NULL;
    vkt_status st = world_iallreduce_f32(w, data, n, what, &req);
    return st == VKT_OK ? world_wait(w, req) : st;
}

/* ---- the allreduce benchmark ------------------------------------------------------ */

/* One timed in-place sum of n floats, through vktrain's path or plain MPI; the ranks
 * first meet at a barrier so each rank times the collective, not the others' lag. */
static vkt_status bench_once(vkt_world *w, float *data, uint64_t n, int plain,
                             double *seconds)
{
    vkt_status st = world_barrier(w, "benchmark barrier");
    if (st != VKT_OK)
        return st;
    double t0 = plat_now();
    st = plain ? world_allreduce_f32_plain(w, data, n)
               : world_allreduce_f32(w, data, n, "benchmark allreduce");
    *seconds += plat_now() - t0;
    return st;
}

vkt_status vkt_world_bench_allreduce(vkt_world *world, uint64_t bytes, uint32_t iters,
                                     double *out_vkt_seconds, double *out_mpi_seconds)
{
    char *msg = world ? world->errmsg : NULL;
    if (!out_vkt_seconds || !out_mpi_seconds)
        return err_fail(msg, VKT_ERROR_INVALID_ARGUMENT,
                        "vkt_world_bench_allreduce: an output is NULL");
    *out_vkt_seconds = *out_mpi_seconds = 0;
    if (bytes < 4 || bytes % 4 || iters == 0)
        return err_fail(msg, VKT_ERROR_INVALID_ARGUMENT,
                        "vkt_world_bench_allreduce: bytes must be a positive multiple of 4 "
                        "and iters > 0 (got %llu bytes, %u iters)",
                        (unsigned long long)bytes, iters);
    if (!world)
        return VKT_OK; /* one rank: nothing to time */
    uint64_t n = bytes / 4;
    /* Zeros: the sums stay zero, so no value ever becomes denormal or infinite and the
     * reduction's arithmetic costs the same every iteration. */
    float *data = calloc(n, sizeof *data);
    if (!data)
        return err_fail(msg, VKT_ERROR_OUT_OF_MEMORY,
                        "vkt_world_bench_allreduce: cannot allocate %llu bytes",
                        (unsigned long long)bytes);
    double t[2] = {0, 0}, warm = 0;
    vkt_status st = VKT_OK;
    /* Warm-up: connections, first touch of the pages, the collective's own buffers. */
    for (int i = 0; i < 2 && st == VKT_OK; i++) {
        st = bench_once(world, data, n, 0, &warm);
        if (st == VKT_OK)
            st = bench_once(world, data, n, 1, &warm);
    }
    /* Alternating, so a slow phase of a loaded machine hits both paths alike. */
    for (uint32_t i = 0; i < iters && st == VKT_OK; i++) {
        st = bench_once(world, data, n, 0, &t[0]);
        if (st == VKT_OK)
            st = bench_once(world, data, n, 1, &t[1]);
    }
    free(data);
    if (st != VKT_OK)
        return st;
    t[0] /= iters;
    t[1] /= iters;
    st = world_allreduce_f64(world, t, 2, WORLD_MAX, "benchmark result");
    if (st == VKT_OK) {
        *out_vkt_seconds = t[0];
        *out_mpi_seconds = t[1];
    }
    return st;
}

vkt_status world_check_send(vkt_world *w, uint32_t dst, int tag, const void *buf,
                            uint64_t bytes, world_req **out)
{
    if (!out)
        return err_fail(w->errmsg, VKT_ERROR_INVALID_ARGUMENT, "send: out is NULL");
    *out = NULL;
    if (dst >= w->size || tag < 0 || (bytes && !buf))
        return err_fail(w->errmsg, VKT_ERROR_INVALID_ARGUMENT,
                        "send: bad destination %u (of %u ranks), tag %d or buffer", dst,
                        w->size, tag);
    return VKT_OK;
}
