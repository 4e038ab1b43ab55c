/* The transport of a build without MPI (VKT_MPI=OFF, and the ThreadSanitizer library,
 * since Open MPI is not TSan-instrumented): always one rank. Collectives leave the data
 * as it is (the sum, minimum, maximum or broadcast over one rank), a gather copies, and
 * there is no other rank to send to. See world.h. */
#include "world.h"

#include <stdlib.h>
#include <string.h>

vkt_status world_tp_init(vkt_world *w, int *argc, char ***argv, int require_launcher)
{
    (void)argc;
    (void)argv;
    w->rank = w->local_rank = 0;
    w->size = w->local_size = 1;
    w->launched = 0;
    w->impl = NULL;
    if (require_launcher)
        return err_fail(w->errmsg, VKT_ERROR_STATE,
                        "world init: this vktrain was built without MPI (VKT_MPI=OFF): it "
                        "cannot join a job of several processes; rebuild with -DVKT_MPI=ON");
    return VKT_OK;
}

void world_tp_finalize(vkt_world *w) { (void)w; }

vkt_status world_tp_keepalive(vkt_world *w, int on)
{
    (void)w;
    (void)on;
    return VKT_OK; /* one rank: nobody waits */
}

void world_tp_abort(vkt_world *w, int code)
{
    (void)w;
    exit(code);
}

vkt_status world_iallreduce_f32(vkt_world *w, float *data, uint64_t n, const char *what,
                                world_req **out)
{
    (void)n;
    if (!out)
        return err_fail(w->errmsg, VKT_ERROR_INVALID_ARGUMENT, "%s: out is NULL", what);
    *out = NULL;
    (void)data;
    return VKT_OK;
}

int world_test(vkt_world *w, world_req *req)
{
    (void)w;
    (void)req;
    return 1;
}

void world_abandon(vkt_world *w, world_req *req)
{
    (void)w;
    (void)req;
}

vkt_status world_wait(vkt_world *w, world_req *req)
{
    (void)w;
    (void)req;
    return VKT_OK;
}

vkt_status world_allreduce_u64(vkt_world *w, uint64_t *data, uint64_t n, world_op op,
                               const char *what)
{
    (void)w;
    (void)data;
    (void)n;
    (void)op;
    (void)what;
    return VKT_OK;
}

vkt_status world_allreduce_f64(vkt_world *w, double *data, uint64_t n, world_op op,
                               const char *what)
{
    (void)w;
    (void)data;
    (void)n;
    (void)op;
    (void)what;
    return VKT_OK;
}

vkt_status world_bcast(vkt_world *w, void *data, uint64_t bytes, const char *what)
{
    (void)w;
    (void)data;
    (void)bytes;
    (void)what;
    return VKT_OK;
}

vkt_status world_gather(vkt_world *w, const void *send, uint64_t bytes, void *recv,
                        const char *what)
{
    if (bytes && (!send || !recv))
        return err_fail(w->errmsg, VKT_ERROR_INVALID_ARGUMENT, "%s: a buffer is NULL", what);
    if (bytes && recv != send)
        memmove(recv, send, bytes);
    return VKT_OK;
}

vkt_status world_allgatherv_f32(vkt_world *w, float *data, const uint64_t *counts,
                                const uint64_t *displs, const char *what)
{
    (void)w;
    (void)data;
    (void)counts;
    (void)displs;
    (void)what;
    return VKT_OK;
}

vkt_status world_barrier(vkt_world *w, const char *what)
{
    (void)w;
    (void)what;
    return VKT_OK;
}

vkt_status world_isend(vkt_world *w, uint32_t dst, int tag, const void *buf, uint64_t bytes,
                       world_req **out)
{
    (void)dst;
    (void)tag;
    (void)buf;
    (void)bytes;
    if (out)
        *out = NULL;
    return err_fail(w->errmsg, VKT_ERROR_STATE, "send: no other rank (a one-rank world)");
}

vkt_status world_irecv(vkt_world *w, uint32_t src, int tag, void *buf, uint64_t bytes,
                       world_req **out)
{
    (void)src;
    (void)tag;
    (void)buf;
    (void)bytes;
    if (out)
        *out = NULL;
    return err_fail(w->errmsg, VKT_ERROR_STATE, "receive: no other rank (a one-rank world)");
}

vkt_status world_try_recv(vkt_world *w, int tag, void *buf, uint64_t cap, uint32_t *out_src,
                          uint64_t *out_bytes)
{
    (void)tag;
    (void)buf;
    (void)cap;
    if (out_src)
        *out_src = UINT32_MAX;
    if (out_bytes)
        *out_bytes = 0;
    return err_fail(w->errmsg, VKT_ERROR_STATE, "receive: no other rank (a one-rank world)");
}

vkt_status world_allreduce_f32_plain(vkt_world *w, float *data, uint64_t n)
{
    (void)w;
    (void)data;
    (void)n;
    return VKT_OK;
}

int world_mpi_initialized(void) { return 0; }
int world_built_with_mpi(void) { return 0; }

void world_set_max_piece(vkt_world *w, uint64_t bytes)
{
    (void)w;
    (void)bytes;
}
