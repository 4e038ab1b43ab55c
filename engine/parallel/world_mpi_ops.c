/* Collectives and point to point of the MPI transport (world_mpi.h), each a nonblocking
 * operation waited on with world_wait; large payloads go in pieces (MPI counts are ints). */
#include "world_mpi.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "platform/platform.h"

/* ---- the nonblocking allreduce's algorithm ---------------------------------------- */

/* Open MPI 4.1's libnbc runs every in-place MPI_Iallreduce as a binomial reduce to one
 * rank followed by a broadcast (nbc_iallreduce.c: `inplace` selects NBC_ARED_BINOMIAL),
 * whatever the size: each byte crosses the tree twice, in sequence, where the blocking
 * MPI_Allreduce of coll/tuned uses a ring or recursive halving. Measured at 2 ranks,
 * 1 MiB: 0.5x the blocking call. So from NBC_LARGE bytes on we ask libnbc for its ring
 * through the MPI_T control variable (standard MPI-3 tools interface; the variable's
 * name is Open MPI's, and where it does not exist nothing is changed), and for its
 * default below, where the binomial tree's fewer rounds win. Every rank makes the same
 * choice for the same call, as the variable's scope (MPI_T_SCOPE_ALL) requires. A user
 * who sets OMPI_MCA_coll_libnbc_iallreduce_algorithm keeps that setting. */
#define NBC_LARGE (64u << 10)
#define NBC_RING 1

void wmpi_nbc_setup(vkt_world *w)
{
    struct world_impl *m = w->impl;
    int provided = 0, index = -1, count = 0, value = 0;
    if (getenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm"))
        return;
    if (MPI_T_init_thread(MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
        return;
    m->mpit = 1;
    if (MPI_T_cvar_get_index("coll_libnbc_iallreduce_algorithm", &index) != MPI_SUCCESS ||
        MPI_T_cvar_handle_alloc(index, NULL, &m->nbc_cvar, &count) != MPI_SUCCESS)
        return;
    if (count == 1 && MPI_T_cvar_read(m->nbc_cvar, &value) == MPI_SUCCESS && value == 0) {
        m->nbc_tuned = 1;
        m->nbc_alg = 0;
    } else {
        MPI_T_cvar_handle_free(&m->nbc_cvar);
    }
}

static void nbc_choose(vkt_world *w, uint64_t bytes)
{
    struct world_impl *m = w->impl;
    int alg = bytes >= NBC_LARGE ? NBC_RING : 0;
    if (m->nbc_tuned && alg != m->nbc_alg && MPI_T_cvar_write(m->nbc_cvar, &alg) == MPI_SUCCESS)
        m->nbc_alg = alg;
}

void wmpi_nbc_free(struct world_impl *m)
{
    if (m->nbc_tuned)
        MPI_T_cvar_handle_free(&m->nbc_cvar);
    if (m->mpit)
        MPI_T_finalize();
    m->nbc_tuned = m->mpit = 0;
}


/* ---- collectives --------------------------------------------------------------- */

/* Starts an in-place reduction of n elements in pieces of at most INT_MAX. */
static vkt_status iallreduce(vkt_world *w, void *data, uint64_t n, MPI_Datatype type,
                             uint64_t elem, MPI_Op op, const char *what, world_req **out)
{
    *out = NULL;
    if (n && !data)
        return err_fail(w->errmsg, VKT_ERROR_INVALID_ARGUMENT, "%s: data is NULL", what);
    if (w->size == 1 || n == 0)
        return VKT_OK;
    uint64_t piece = wmpi_piece_elems(w, elem, (uint64_t)INT_MAX * elem);
    world_req *req = wmpi_req_new(w, (int)((n + piece - 1) / piece), what);
    if (!req)
        return VKT_ERROR_OUT_OF_MEMORY;
    wmpi_hb_send(w);
    for (int p = 0; p < req->n; p++) {
        uint64_t off = (uint64_t)p * piece, len = n - off < piece ? n - off : piece;
        nbc_choose(w, len * elem);
        int rc = MPI_Iallreduce(MPI_IN_PLACE, (char *)data + off * elem, (int)len, type, op,
                                w->impl->coll, &req->reqs[p]);
        if (rc != MPI_SUCCESS) {
            /* Pieces already started cannot be cancelled; the job is to end. */
            wmpi_req_free(req);
            return wmpi_fail(w, rc, "MPI_Iallreduce", what);
        }
    }
    req->bytes = n * elem;
    w->comm_bytes += n * elem;
    *out = req;
    return VKT_OK;
}

static MPI_Op mpi_op(world_op op)
{
    return op == WORLD_MIN ? MPI_MIN : op == WORLD_MAX ? MPI_MAX : MPI_SUM;
}

vkt_status world_iallreduce_f32(vkt_world *w, float *data, uint64_t n, const char *what,
                                world_req **out)
{
    return iallreduce(w, data, n, MPI_FLOAT, sizeof(float), MPI_SUM, what, out);
}

vkt_status world_allreduce_u64(vkt_world *w, uint64_t *data, uint64_t n, world_op op,
                               const char *what)
{
    world_req *req = NULL;
    vkt_status st = iallreduce(w, data, n, MPI_UINT64_T, sizeof(uint64_t), mpi_op(op), what,
                               &req);
    return st == VKT_OK ? world_wait(w, req) : st;
}

vkt_status world_allreduce_f64(vkt_world *w, double *data, uint64_t n, world_op op,
                               const char *what)
{
    world_req *req = NULL;
    vkt_status st = iallreduce(w, data, n, MPI_DOUBLE, sizeof(double), mpi_op(op), what, &req);
    return st == VKT_OK ? world_wait(w, req) : st;
}

/* `bytes` from `root` to every rank, every piece in flight at once, then waited. */
static vkt_status bcast_from(vkt_world *w, void *data, uint64_t bytes, uint32_t root,
                             const char *what)
{
    if (bytes && !data)
        return err_fail(w->errmsg, VKT_ERROR_INVALID_ARGUMENT, "%s: data is NULL", what);
    if (w->size == 1 || bytes == 0)
        return VKT_OK;
    uint64_t piece = wmpi_piece_elems(w, 1, BCAST_PIECE);
    world_req *req = wmpi_req_new(w, (int)((bytes + piece - 1) / piece), what);
    if (!req)
        return VKT_ERROR_OUT_OF_MEMORY;
    wmpi_hb_send(w);
    for (int p = 0; p < req->n; p++) {
        uint64_t off = (uint64_t)p * piece, len = bytes - off < piece ? bytes - off : piece;
        int rc = MPI_Ibcast((char *)data + off, (int)len, MPI_BYTE, (int)root, w->impl->coll,
                            &req->reqs[p]);
        if (rc != MPI_SUCCESS) {
            wmpi_req_free(req);
            return wmpi_fail(w, rc, "MPI_Ibcast", what);
        }
    }
    req->bytes = bytes;
    w->comm_bytes += bytes;
    return world_wait(w, req);
}

vkt_status world_bcast(vkt_world *w, void *data, uint64_t bytes, const char *what)
{
    return bcast_from(w, data, bytes, 0, what);
}

/* One MPI_Igather of `len` bytes per rank, waited. */
static vkt_status gather_piece(vkt_world *w, const void *send, uint64_t len, void *recv,
                               const char *what)
{
    world_req *req = wmpi_req_new(w, 1, what);
    if (!req)
        return VKT_ERROR_OUT_OF_MEMORY;
    wmpi_hb_send(w);
    int rc = MPI_Igather(send, (int)len, MPI_BYTE, recv, (int)len, MPI_BYTE, 0, w->impl->coll,
                         &req->reqs[0]);
    if (rc != MPI_SUCCESS) {
        wmpi_req_free(req);
        return wmpi_fail(w, rc, "MPI_Igather", what);
    }
    req->bytes = len * w->size;
    w->comm_bytes += len;
    return world_wait(w, req);
}

vkt_status world_gather(vkt_world *w, const void *send, uint64_t bytes, void *recv,
                        const char *what)
{
    if ((bytes && !send) || (w->rank == 0 && bytes && !recv))
        return err_fail(w->errmsg, VKT_ERROR_INVALID_ARGUMENT, "%s: a buffer is NULL", what);
    if (w->size == 1 || bytes == 0) {
        if (bytes && recv != send)
            memmove(recv, send, bytes);
        return VKT_OK;
    }
    uint64_t piece = wmpi_piece_elems(w, 1, INT_MAX);
    if (bytes <= piece)
        return gather_piece(w, send, bytes, recv, what);
    /* Larger: piece by piece through a staging buffer on the chief, whose pieces are
     * then moved to their places in rank-major `recv`. */
    char *tmp = NULL;
    if (w->rank == 0 && !(tmp = malloc(piece * w->size)))
        return err_fail(w->errmsg, VKT_ERROR_OUT_OF_MEMORY, "%s: out of host memory", what);
    vkt_status st = VKT_OK;
    for (uint64_t off = 0; off < bytes && st == VKT_OK; off += piece) {
        uint64_t len = bytes - off < piece ? bytes - off : piece;
        st = gather_piece(w, (const char *)send + off, len, tmp, what);
        for (uint32_t r = 0; tmp && st == VKT_OK && r < w->size; r++)
            memcpy((char *)recv + r * bytes + off, tmp + r * len, len);
    }
    free(tmp);
    return st;
}

/* Counts and offsets as MPI's ints, when every one fits in a piece; else NULL. */
static int *int_layout(const vkt_world *w, const uint64_t *counts, const uint64_t *displs)
{
    uint64_t piece = wmpi_piece_elems(w, sizeof(float), (uint64_t)INT_MAX * sizeof(float));
    for (uint32_t r = 0; r < w->size; r++)
        if (counts[r] > piece || displs[r] > INT_MAX)
            return NULL;
    int *v = malloc(2 * w->size * sizeof *v);
    for (uint32_t r = 0; v && r < w->size; r++) {
        v[r] = (int)counts[r];
        v[w->size + r] = (int)displs[r];
    }
    return v;
}

vkt_status world_allgatherv_f32(vkt_world *w, float *data, const uint64_t *counts,
                                const uint64_t *displs, const char *what)
{
    if (!data || !counts || !displs)
        return err_fail(w->errmsg, VKT_ERROR_INVALID_ARGUMENT, "%s: an argument is NULL", what);
    if (w->size == 1)
        return VKT_OK;
    int *v = int_layout(w, counts, displs);
    if (!v) {
        /* A piece beyond MPI's int counts: every rank broadcasts its own in pieces. */
        vkt_status st = VKT_OK;
        for (uint32_t r = 0; r < w->size && st == VKT_OK; r++)
            st = bcast_from(w, data + displs[r], counts[r] * sizeof(float), r, what);
        return st;
    }
    world_req *req = wmpi_req_new(w, 1, what);
    if (!req) {
        free(v);
        return VKT_ERROR_OUT_OF_MEMORY;
    }
    req->scratch = v; /* MPI reads the counts until the operation completes */
    wmpi_hb_send(w);
    int rc = MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data, v, v + w->size,
                             MPI_FLOAT, w->impl->coll, &req->reqs[0]);
    if (rc != MPI_SUCCESS) {
        wmpi_req_free(req);
        return wmpi_fail(w, rc, "MPI_Iallgatherv", what);
    }
    for (uint32_t r = 0; r < w->size; r++)
        req->bytes += counts[r] * sizeof(float);
    w->comm_bytes += counts[w->rank] * sizeof(float);
    return world_wait(w, req);
}

vkt_status world_barrier(vkt_world *w, const char *what)
{
    if (w->size == 1)
        return VKT_OK;
    world_req *req = wmpi_req_new(w, 1, what);
    if (!req)
        return VKT_ERROR_OUT_OF_MEMORY;
    wmpi_hb_send(w);
    int rc = MPI_Ibarrier(w->impl->coll, &req->reqs[0]);
    if (rc != MPI_SUCCESS) {
        wmpi_req_free(req);
        return wmpi_fail(w, rc, "MPI_Ibarrier", what);
    }
    return world_wait(w, req);
}

vkt_status world_allreduce_f32_plain(vkt_world *w, float *data, uint64_t n)
{
    if (w->size == 1)
        return VKT_OK;
    for (uint64_t off = 0; off < n; off += INT_MAX) {
        uint64_t len = n - off < INT_MAX ? n - off : INT_MAX;
        int rc = MPI_Allreduce(MPI_IN_PLACE, data + off, (int)len, MPI_FLOAT, MPI_SUM,
                               w->impl->coll);
        if (rc != MPI_SUCCESS)
            return wmpi_fail(w, rc, "MPI_Allreduce", "plain allreduce");
    }
    return VKT_OK;
}

/* ---- point to point ------------------------------------------------------------ */

static vkt_status need_peers(vkt_world *w, const char *what)
{
    return w->launched ? VKT_OK
                       : err_fail(w->errmsg, VKT_ERROR_STATE,
                                  "%s: no other rank (the process was not started by an MPI "
                                  "launcher)", what);
}

vkt_status world_isend(vkt_world *w, uint32_t dst, int tag, const void *buf, uint64_t bytes,
                       world_req **out)
{
    vkt_status st = world_check_send(w, dst, tag, buf, bytes, out);
    if (st == VKT_OK)
        st = need_peers(w, "send");
    if (st != VKT_OK)
        return st;
    if (bytes > INT_MAX)
        return err_fail(w->errmsg, VKT_ERROR_LIMIT,
                        "send: %llu bytes in one message; at most %d", (unsigned long long)bytes,
                        INT_MAX);
    world_req *req = wmpi_req_new(w, 1, "send");
    if (!req)
        return VKT_ERROR_OUT_OF_MEMORY;
    int rc = MPI_Isend(buf, (int)bytes, MPI_BYTE, (int)dst, tag, w->impl->p2p, &req->reqs[0]);
    if (rc != MPI_SUCCESS) {
        wmpi_req_free(req);
        return wmpi_fail(w, rc, "MPI_Isend", "send");
    }
    req->bytes = bytes;
    w->comm_bytes += bytes;
    *out = req;
    return VKT_OK;
}

vkt_status world_irecv(vkt_world *w, uint32_t src, int tag, void *buf, uint64_t bytes,
                       world_req **out)
{
    vkt_status st = world_check_send(w, src, tag, buf, bytes, out);
    if (st == VKT_OK)
        st = need_peers(w, "receive");
    if (st != VKT_OK)
        return st;
    if (bytes > INT_MAX)
        return err_fail(w->errmsg, VKT_ERROR_LIMIT,
                        "receive: %llu bytes in one message; at most %d",
                        (unsigned long long)bytes, INT_MAX);
    world_req *req = wmpi_req_new(w, 1, "receive");
    if (!req)
        return VKT_ERROR_OUT_OF_MEMORY;
    int rc = MPI_Irecv(buf, (int)bytes, MPI_BYTE, (int)src, tag, w->impl->p2p, &req->reqs[0]);
    if (rc != MPI_SUCCESS) {
        wmpi_req_free(req);
        return wmpi_fail(w, rc, "MPI_Irecv", "receive");
    }
    req->bytes = bytes;
    *out = req;
    return VKT_OK;
}

/* Receives a matched message without blocking inside MPI (a large one arrives in
 * pieces only as the sender makes progress). */
static vkt_status mrecv(vkt_world *w, MPI_Message *msg, void *buf, int count)
{
    world_req *req = wmpi_req_new(w, 1, "receive");
    if (!req)
        return VKT_ERROR_OUT_OF_MEMORY;
    req->bytes = (uint64_t)count;
    int rc = MPI_Imrecv(buf, count, MPI_BYTE, msg, &req->reqs[0]);
    if (rc != MPI_SUCCESS) {
        wmpi_req_free(req);
        return wmpi_fail(w, rc, "MPI_Imrecv", "receive");
    }
    return world_wait(w, req);
}

vkt_status world_try_recv(vkt_world *w, int tag, void *buf, uint64_t cap, uint32_t *out_src,
                          uint64_t *out_bytes)
{
    if (!out_src || !out_bytes || (cap && !buf))
        return err_fail(w->errmsg, VKT_ERROR_INVALID_ARGUMENT, "receive: an argument is NULL");
    *out_src = UINT32_MAX;
    *out_bytes = 0;
    vkt_status st = need_peers(w, "receive");
    if (st != VKT_OK)
        return st;
    int flag = 0, count = 0;
    MPI_Message msg;
    MPI_Status status;
    wmpi_hb_poll(w);
    wmpi_hb_tick(w, plat_now()); /* the parameter server's ranks wait here */
    int rc = MPI_Improbe(MPI_ANY_SOURCE, tag, w->impl->p2p, &flag, &msg, &status);
    if (rc != MPI_SUCCESS)
        return wmpi_fail(w, rc, "MPI_Improbe", "receive");
    if (!flag)
        return VKT_OK;
    MPI_Get_count(&status, MPI_BYTE, &count);
    if ((uint64_t)count > cap) {
        /* A matched message must be received: into a scratch buffer, then reported. */
        void *tmp = malloc((size_t)count);
        st = tmp ? mrecv(w, &msg, tmp, count) : VKT_ERROR_OUT_OF_MEMORY;
        free(tmp);
        return err_fail(w->errmsg, VKT_ERROR_INTERNAL,
                        "receive: a message of %d bytes (tag %d) from rank %d exceeds the "
                        "buffer of %llu bytes%s", count, tag, status.MPI_SOURCE,
                        (unsigned long long)cap, st == VKT_OK ? "" : " (and was lost)");
    }
    st = mrecv(w, &msg, buf, count);
    if (st == VKT_OK) {
        *out_src = (uint32_t)status.MPI_SOURCE;
        *out_bytes = (uint64_t)count;
    }
    return st;
}

