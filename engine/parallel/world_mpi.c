/* The transport over MPI (world_mpi.h lists its files): helpers, init and finalize, and
 * waiting. A process that no MPI launcher started is a one-rank world here too, and then no
 * MPI function is called except MPI_Initialized (a query that MPI allows at any time, so
 * that an application which initialised MPI itself is seen). Every wait is a nonblocking
 * operation polled with MPI_Test and world_backoff against a deadline; heartbeats on a
 * communicator of their own (world_mpi_beat.c) let a timed-out rank name the ranks that
 * did not arrive, and beats sent while waiting name those that stopped answering inside a
 * collective. See world.h. */
#include "world_mpi.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "platform/platform.h"

/* ---- small helpers ------------------------------------------------------------- */

static int launched_by_env(void)
{
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK") || getenv("PMI_RANK") ||
           getenv("PMI_SIZE");
}

/* An MPI error return as VKT_ERROR_INTERNAL with MPI's own words. */
vkt_status wmpi_fail(vkt_world *w, int rc, const char *call, const char *what)
{
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS)
        snprintf(text, sizeof text, "MPI error %d", rc);
    return err_fail(w->errmsg, VKT_ERROR_INTERNAL, "step %llu: %s: %s failed: %s",
                    (unsigned long long)w->step, what, call, text);
}

uint32_t wmpi_peer_rank(const vkt_world *w, uint32_t i) { return w->rank == 0 ? i + 1 : 0; }

/* Elements per piece: INT_MAX (MPI counts are int) or less through the test knob. */
uint64_t wmpi_piece_elems(const vkt_world *w, uint64_t elem_bytes, uint64_t cap_bytes)
{
    uint64_t bytes = w->impl->piece_bytes ? w->impl->piece_bytes : cap_bytes;
    uint64_t n = bytes / elem_bytes;
    if (n > INT_MAX)
        n = INT_MAX;
    return n ? n : 1;
}

world_req *wmpi_req_new(vkt_world *w, int n, const char *what)
{
    world_req *r = calloc(1, sizeof *r + (size_t)n * sizeof(MPI_Request));
    if (!r) {
        err_fail(w->errmsg, VKT_ERROR_OUT_OF_MEMORY, "%s: out of host memory", what);
        return NULL;
    }
    r->what = what;
    r->n = n;
    for (int i = 0; i < n; i++)
        r->reqs[i] = MPI_REQUEST_NULL;
    return r;
}

/* What MPI may still write into after a wait gave up (a collective cannot be cancelled,
 * and MPI_Finalize would hang on the missing ranks): kept, reachable, until the process
 * ends, neither freed under MPI nor dropped (which the leak checker rightly reports).
 * Only the one MPI-calling thread at a time gets here. */
static world_req *stranded_reqs;
static struct world_impl *stranded_impl;

void world_abandon(vkt_world *w, world_req *r)
{
    (void)w;
    if (!r)
        return;
    r->next = stranded_reqs;
    stranded_reqs = r;
}

void wmpi_req_free(world_req *r)
{
    if (r)
        free(r->scratch);
    free(r);
}


/* ---- init and finalize --------------------------------------------------------- */

static vkt_status comm_dup(vkt_world *w, MPI_Comm *out)
{
    int rc = MPI_Comm_dup(MPI_COMM_WORLD, out);
    if (rc != MPI_SUCCESS)
        return wmpi_fail(w, rc, "MPI_Comm_dup", "world init");
    w->impl->comms++;
    /* Errors on our communicators come back as return codes, not as an abort. */
    rc = MPI_Comm_set_errhandler(*out, MPI_ERRORS_RETURN);
    return rc == MPI_SUCCESS ? VKT_OK : wmpi_fail(w, rc, "MPI_Comm_set_errhandler", "world init");
}

/* Ranks, the host's ranks (MPI_COMM_TYPE_SHARED), the three communicators. */
static vkt_status setup_comms(vkt_world *w)
{
    struct world_impl *m = w->impl;
    vkt_status st = comm_dup(w, &m->coll);
    if (st == VKT_OK)
        st = comm_dup(w, &m->p2p);
    if (st == VKT_OK)
        st = comm_dup(w, &m->hb);
    if (st != VKT_OK)
        return st;
    int rank = 0, size = 1, lrank = 0, lsize = 1;
    MPI_Comm local = MPI_COMM_NULL;
    int rc = MPI_Comm_rank(m->coll, &rank);
    if (rc == MPI_SUCCESS)
        rc = MPI_Comm_size(m->coll, &size);
    if (rc == MPI_SUCCESS)
        rc = MPI_Comm_split_type(m->coll, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local);
    if (rc == MPI_SUCCESS)
        rc = MPI_Comm_rank(local, &lrank);
    if (rc == MPI_SUCCESS)
        rc = MPI_Comm_size(local, &lsize);
    if (local != MPI_COMM_NULL)
        MPI_Comm_free(&local);
    if (rc != MPI_SUCCESS)
        return wmpi_fail(w, rc, "MPI_Comm_split_type", "world init");
    w->rank = (uint32_t)rank;
    w->size = (uint32_t)size;
    w->local_rank = (uint32_t)lrank;
    w->local_size = (uint32_t)lsize;
    wmpi_nbc_setup(w);
    return wmpi_hb_start(w);
}

static const char *thread_level_name(int level)
{
    switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
    }
    return "an unknown thread level";
}

/* MPI already initialised by the application, or by us now. */
static vkt_status start_mpi(vkt_world *w, int *argc, char ***argv, int already)
{
    int provided = MPI_THREAD_SINGLE;
    if (already) {
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (finalized)
            return err_fail(w->errmsg, VKT_ERROR_STATE,
                            "world init: the application has already finalized MPI");
        MPI_Query_thread(&provided);
    } else {
        int rc = MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided);
        if (rc != MPI_SUCCESS)
            return err_fail(w->errmsg, VKT_ERROR_INTERNAL,
                            "world init: MPI_Init_thread failed (error %d)", rc);
        w->impl->own_init = 1;
    }
    w->launched = 1;
    /* The trainer calls MPI from its own threads, one at a time. */
    if (provided < MPI_THREAD_SERIALIZED)
        return err_fail(w->errmsg, VKT_ERROR_STATE,
                        "world init: MPI provides %s; vktrain needs MPI_THREAD_SERIALIZED "
                        "(one thread at a time, from any thread)", thread_level_name(provided));
    return setup_comms(w);
}

static void free_comms(struct world_impl *m)
{
    MPI_Comm *c[3] = {&m->coll, &m->p2p, &m->hb};
    for (int i = 0; i < m->comms; i++)
        MPI_Comm_free(c[i]);
    m->comms = 0;
}

vkt_status world_tp_init(vkt_world *w, int *argc, char ***argv, int require_launcher)
{
    w->rank = w->local_rank = 0;
    w->size = w->local_size = 1;
    w->launched = 0;
    w->impl = NULL;
    int already = 0;
    MPI_Initialized(&already);
    if (!already && !launched_by_env()) {
        if (require_launcher)
            return err_fail(w->errmsg, VKT_ERROR_STATE,
                            "world init: not started by an MPI launcher (mpirun, srun: none of "
                            "OMPI_COMM_WORLD_SIZE, PMIX_RANK, PMI_RANK, PMI_SIZE is set)");
        return VKT_OK; /* one rank; no MPI call */
    }
    w->impl = calloc(1, sizeof *w->impl);
    if (!w->impl)
        return err_fail(w->errmsg, VKT_ERROR_OUT_OF_MEMORY, "world init: out of host memory");
    vkt_status st = start_mpi(w, argc, argv, already);
    if (st != VKT_OK) {
        /* MPI stays initialised: finalizing is collective and the other ranks may not
         * get here. The caller reports the error and exits (mpirun then ends the job). */
        wmpi_hb_stop(w);
        free_comms(w->impl);
        wmpi_nbc_free(w->impl);
        free(w->impl);
        w->impl = NULL;
    }
    return st;
}

/* ---- keepalive ------------------------------------------------------------------ */

/* The keepalive thread: the rank's beats, and the peers' taken in, while the application
 * works alone. It is the only thread calling MPI meanwhile (MPI_THREAD_SERIALIZED). */
static void keepalive_main(void *arg)
{
    vkt_world *w = arg;
    struct world_impl *m = w->impl;
    while (!atomic_load(&m->keepalive_stop)) {
        wmpi_hb_poll(w);
        wmpi_hb_tick(w, plat_now());
        plat_sleep(KEEPALIVE_POLL);
    }
}

static void keepalive_stop(vkt_world *w)
{
    struct world_impl *m = w ? w->impl : NULL;
    if (!m || !m->keepalive)
        return;
    atomic_store(&m->keepalive_stop, 1);
    plat_thread_join(m->keepalive);
    m->keepalive = NULL;
}

vkt_status world_tp_keepalive(vkt_world *w, int on)
{
    struct world_impl *m = w->impl;
    if (!m || !m->n_peers || !on) {
        keepalive_stop(w);
        return VKT_OK;
    }
    if (m->keepalive)
        return VKT_OK;
    atomic_store(&m->keepalive_stop, 0);
    wmpi_hb_tick(w, m->next_beat); /* one beat now: the silence is counted from here */
    if (plat_thread_start(&m->keepalive, keepalive_main, w) != 0) {
        m->keepalive = NULL;
        return err_fail(w->errmsg, VKT_ERROR_INTERNAL, "keepalive: cannot start a thread");
    }
    return VKT_OK;
}

void world_tp_finalize(vkt_world *w)
{
    struct world_impl *m = w->impl;
    if (!m)
        return;
    keepalive_stop(w);
    /* Every rank gets here before anything is freed, so no heartbeat or collective of
     * a peer can still be aimed at what we free. A non-chief waits for the chief for as
     * long as the chief answers (it may be saving and evaluating alone, beating with
     * world_tp_keepalive), and gives up after the deadline of silence. */
    m->follow_chief = w->rank != 0;
    vkt_status st = world_barrier(w, "finalize");
    m->follow_chief = 0;
    if (st != VKT_OK) {
        /* MPI_Finalize would hang on the missing ranks: leave MPI as it is, say so. The
         * state is left allocated on purpose: MPI may still write into the heartbeat
         * buffers and the barrier's request. */
        fprintf(stderr, "vkt: rank %u: %s (MPI is not finalized)\n", w->rank, w->errmsg);
        m->stranded_next = stranded_impl;
        stranded_impl = m;
        w->impl = NULL;
        return;
    }
    wmpi_hb_stop(w);
    free_comms(m);
    wmpi_nbc_free(m);
    if (m->own_init)
        MPI_Finalize();
    free(m);
    w->impl = NULL;
}

void world_tp_abort(vkt_world *w, int code)
{
    keepalive_stop(w); /* one thread calls MPI at a time */
    if (w && w->launched)
        MPI_Abort(MPI_COMM_WORLD, code);
    exit(code);
}

int world_mpi_initialized(void)
{
    int flag = 0;
    MPI_Initialized(&flag);
    return flag;
}

int world_built_with_mpi(void) { return 1; }

void world_set_max_piece(vkt_world *w, uint64_t bytes)
{
    if (w && w->impl)
        w->impl->piece_bytes = bytes;
}


/* ---- waiting ------------------------------------------------------------------- */

/* 1: done (req freed), 0: in flight, -1: MPI error (message set, req freed). */
static int req_test(vkt_world *w, world_req *req)
{
    int done = 0;
    int rc = MPI_Testall(req->n, req->reqs, &done, MPI_STATUSES_IGNORE);
    wmpi_hb_poll(w);
    if (rc != MPI_SUCCESS) {
        wmpi_fail(w, rc, "MPI_Testall", req->what);
        wmpi_req_free(req);
        return -1;
    }
    if (done)
        wmpi_req_free(req);
    return done ? 1 : 0;
}

int world_test(vkt_world *w, world_req *req)
{
    if (!req)
        return 1;
    int r = req_test(w, req);
    if (r == 0)
        wmpi_hb_tick(w, plat_now()); /* a caller polling in a loop is waiting too */
    return r;
}

vkt_status world_wait(vkt_world *w, world_req *req)
{
    if (!req)
        return VKT_OK;
    double limit = w->timeout + (w->rank ? NONCHIEF_GRACE : 0.0);
    /* Open MPI has no progress thread: data moves only inside our polls, a few
     * fragments per MPI_Test (32 KiB each over shared memory). Sleeping between polls
     * while the transfer runs caps its bandwidth at fragments per sleep (measured: 10x
     * slower at 1 MiB, since even a 1 us nanosleep lasts ~60 us). So a wait polls back
     * to back for as long as the payload would take at 250 MB/s (a loaded machine's
     * pace; Open MPI itself yields the core inside MPI_Test when idle if
     * mpi_yield_when_idle is on, as it is when oversubscribed). Past that it is waiting
     * for a late rank, and sleeps between polls leave the cores to the devices. The
     * heartbeat of a late peer reaching this collective (seen by the chief for every
     * rank, by the others for the chief) starts the back-to-back window again, since
     * the transfer can begin only then. */
    struct world_impl *m = w->impl;
    double spin = (double)req->bytes / SPIN_BYTES_PER_S;
    if (spin < SPIN_MIN)
        spin = SPIN_MIN;
    double t0 = plat_now(), spin_from = t0;
    uint64_t arrivals = m->arrivals;
    for (uint32_t i = 0;;) {
        int r = req_test(w, req);
        double now = plat_now(), waited = now - t0;
        if (r != 0) {
            w->comm_seconds += waited;
            return r > 0 ? VKT_OK : VKT_ERROR_INTERNAL;
        }
        wmpi_hb_tick(w, now);
        /* finalize on a non-chief: late only once the chief has been silent that long */
        double since = m->follow_chief && m->last_heard[0] > t0 ? now - m->last_heard[0]
                                                                : waited;
        if (since > limit) {
            w->comm_seconds += waited;
            /* The request stays in flight: MPI cannot cancel a collective. */
            world_abandon(w, req);
            return m->follow_chief ? wmpi_silence_fail(w, req->what, limit, waited)
                                   : wmpi_timeout_fail(w, req->what, limit);
        }
        if (m->arrivals != arrivals) {
            arrivals = m->arrivals;
            spin_from = now;
            i = 0;
        }
        if (now - spin_from >= spin)
            world_backoff(w, i++);
    }
}

