/* The transport over MPI: the only file that includes <mpi.h>. A process that no MPI
 * launcher started is a one-rank world here too, and then no MPI function is called
 * except MPI_Initialized (a query that MPI allows at any time, so that an application
 * which initialised MPI itself is seen). Every wait is a nonblocking operation polled
 * with MPI_Test and world_backoff against a deadline; heartbeats on a communicator of
 * their own let a timed-out rank name the ranks that did not arrive, and beats sent
 * while waiting name those that stopped answering inside a collective. See world.h. */
#include "world.h"

#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "platform/platform.h"

#define HB_TAG 1
#define HB_RING 4                     /* heartbeat send slots per destination */
#define BCAST_PIECE (256ull << 20)    /* broadcast pieces, bytes */
#define NONCHIEF_GRACE 2.0            /* seconds: the chief's message comes first */
#define LATE_LISTED 16                /* late ranks named in a message, at most */
/* Beats: a waiting rank re-sends its {sequence, step} every timeout / 4 seconds, within
 * these bounds; a peer silent for more than timeout / 2 has stopped answering. */
#define BEAT_MIN 0.01
#define BEAT_MAX 0.5
/* A wait polls without sleeping for as long as its payload takes at SPIN_BYTES_PER_S,
 * at least SPIN_MIN seconds; then it sleeps between polls. See world_wait. */
#define SPIN_BYTES_PER_S 250e6
#define SPIN_MIN 50e-6

typedef struct hb_slot {
    uint64_t msg[2];                  /* {sequence, step} */
    MPI_Request req;
} hb_slot;

struct world_impl {
    int own_init;                     /* we called MPI_Init_thread: we finalize */
    MPI_Comm coll, p2p, hb;           /* duplicates of MPI_COMM_WORLD */
    int comms;                        /* how many of them exist (in that order) */
    uint64_t piece_bytes;             /* world_set_max_piece; 0: defaults */
    /* Open MPI's choice of the nonblocking allreduce's algorithm (see nbc_choose) */
    int mpit;                         /* MPI_T_init_thread succeeded */
    int nbc_tuned;                    /* 1: we set the algorithm per call */
    int nbc_alg;                      /* its current value */
    MPI_T_cvar_handle nbc_cvar;
    /* Heartbeats: the chief's peers are every other rank, a non-chief's the chief. */
    uint64_t seq;                     /* collectives this rank has started */
    int hb_off;                       /* 1 after an MPI error on them: advisory, stop */
    uint64_t arrivals;                /* heartbeats of peers that reached our collective */
    double next_beat;                 /* plat_now() from which the next beat is due */
    uint32_t n_peers;
    MPI_Request *hb_recv;             /* [n_peers] one preposted receive each */
    uint64_t (*hb_in)[2];             /* [n_peers] their buffers */
    uint64_t *last_seq, *last_step;   /* [n_peers] the newest heartbeat seen */
    double *last_heard;               /* [n_peers] plat_now() of their newest message */
    hb_slot (*hb_out)[HB_RING];       /* [n_peers] send rings */
    uint32_t *hb_next;                /* [n_peers] next slot of each ring */
    int *hb_index;                    /* [n_peers] MPI_Testsome's output */
};

struct world_req {
    const char *what;                 /* for messages */
    uint64_t bytes;                   /* payload, for the spin window */
    void *scratch;                    /* freed with the request (e.g. count arrays) */
    int n;                            /* MPI requests */
    MPI_Request reqs[];
};

/* ---- small helpers ------------------------------------------------------------- */

static int launched_by_env(void)
{
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK") || getenv("PMI_RANK") ||
           getenv("PMI_SIZE");
}

/* An MPI error return as VKT_ERROR_INTERNAL with MPI's own words. */
static vkt_status mpi_fail(vkt_world *w, int rc, const char *call, const char *what)
{
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS)
        snprintf(text, sizeof text, "MPI error %d", rc);
    return err_fail(w->errmsg, VKT_ERROR_INTERNAL, "step %llu: %s: %s failed: %s",
                    (unsigned long long)w->step, what, call, text);
}

static uint32_t peer_rank(const vkt_world *w, uint32_t i) { return w->rank == 0 ? i + 1 : 0; }

/* Elements per piece: INT_MAX (MPI counts are int) or less through the test knob. */
static uint64_t piece_elems(const vkt_world *w, uint64_t elem_bytes, uint64_t cap_bytes)
{
    uint64_t bytes = w->impl->piece_bytes ? w->impl->piece_bytes : cap_bytes;
    uint64_t n = bytes / elem_bytes;
    if (n > INT_MAX)
        n = INT_MAX;
    return n ? n : 1;
}

static world_req *req_new(vkt_world *w, int n, const char *what)
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

static void req_free(world_req *r)
{
    if (r)
        free(r->scratch);
    free(r);
}

/* ---- heartbeats ---------------------------------------------------------------- */

static vkt_status hb_post(vkt_world *w, uint32_t i)
{
    struct world_impl *m = w->impl;
    int rc = MPI_Irecv(m->hb_in[i], 2, MPI_UINT64_T, (int)peer_rank(w, i), HB_TAG, m->hb,
                       &m->hb_recv[i]);
    return rc == MPI_SUCCESS ? VKT_OK : mpi_fail(w, rc, "MPI_Irecv", "heartbeat");
}

static void hb_free(struct world_impl *m)
{
    free(m->hb_recv);
    free(m->hb_in);
    free(m->last_seq);
    free(m->last_step);
    free(m->last_heard);
    free(m->hb_out);
    free(m->hb_next);
    free(m->hb_index);
    m->hb_recv = NULL;
    m->hb_in = NULL;
    m->last_seq = m->last_step = NULL;
    m->last_heard = NULL;
    m->hb_out = NULL;
    m->hb_next = NULL;
    m->hb_index = NULL;
    m->n_peers = 0;
}

static vkt_status hb_start(vkt_world *w)
{
    struct world_impl *m = w->impl;
    m->n_peers = w->size == 1 ? 0 : w->rank == 0 ? w->size - 1 : 1;
    if (!m->n_peers)
        return VKT_OK;
    uint32_t n = m->n_peers;
    m->hb_recv = malloc(n * sizeof *m->hb_recv);
    m->hb_in = calloc(n, sizeof *m->hb_in);
    m->last_seq = calloc(n, sizeof *m->last_seq);
    m->last_step = calloc(n, sizeof *m->last_step);
    m->last_heard = calloc(n, sizeof *m->last_heard);
    m->hb_out = calloc(n, sizeof *m->hb_out);
    m->hb_next = calloc(n, sizeof *m->hb_next);
    m->hb_index = calloc(n, sizeof *m->hb_index);
    if (!m->hb_recv || !m->hb_in || !m->last_seq || !m->last_step || !m->last_heard ||
        !m->hb_out || !m->hb_next || !m->hb_index) {
        hb_free(m);
        return err_fail(w->errmsg, VKT_ERROR_OUT_OF_MEMORY, "world: out of host memory "
                        "for the heartbeats of %u ranks", w->size);
    }
    double now = plat_now(); /* silence is counted from the start */
    for (uint32_t i = 0; i < n; i++) {
        m->hb_recv[i] = MPI_REQUEST_NULL;
        m->last_heard[i] = now;
        for (int s = 0; s < HB_RING; s++)
            m->hb_out[i][s].req = MPI_REQUEST_NULL;
    }
    for (uint32_t i = 0; i < n; i++) {
        vkt_status st = hb_post(w, i);
        if (st != VKT_OK)
            return st;
    }
    return VKT_OK;
}

/* Takes in every heartbeat and beat that has arrived and posts the receive again.
 * Messages between two ranks arrive in the order sent (MPI's non-overtaking rule), and
 * a beat repeats the sequence of the heartbeat before it, so a sequence never goes back;
 * still, only a newer or equal one is taken, and a peer counts as an arrival once, when
 * its sequence first reaches ours: the beats of a peer waiting with us do not. Heartbeats
 * are advisory: after an MPI error on them they stop, and the job goes on. */
static void hb_poll(vkt_world *w)
{
    struct world_impl *m = w->impl;
    if (!m || !m->n_peers || m->hb_off)
        return;
    for (;;) {
        int done = 0;
        int rc = MPI_Testsome((int)m->n_peers, m->hb_recv, &done, m->hb_index,
                              MPI_STATUSES_IGNORE);
        if (rc != MPI_SUCCESS) {
            m->hb_off = 1;
            return;
        }
        if (done == MPI_UNDEFINED || done == 0)
            return;
        double now = plat_now();
        for (int k = 0; k < done; k++) {
            uint32_t i = (uint32_t)m->hb_index[k];
            uint64_t seq = m->hb_in[i][0];
            m->last_heard[i] = now;
            if (seq >= m->last_seq[i]) {
                m->arrivals += m->last_seq[i] < m->seq && seq >= m->seq;
                m->last_seq[i] = seq;
                m->last_step[i] = m->hb_in[i][1];
            }
            if (hb_post(w, i) != VKT_OK) {
                m->hb_off = 1;
                return;
            }
        }
    }
}

/* Seconds between beats: timeout / 4 within [BEAT_MIN, BEAT_MAX]. */
static double beat_interval(const vkt_world *w)
{
    double s = w->timeout / 4;
    return s < BEAT_MIN ? BEAT_MIN : s > BEAT_MAX ? BEAT_MAX : s;
}

/* {sequence, step} to the chief (from the chief to every rank). A slot whose previous
 * send has not completed is skipped: heartbeats are advisory and must never make a
 * collective wait. */
static void hb_out(vkt_world *w)
{
    struct world_impl *m = w->impl;
    if (!m->n_peers || m->hb_off)
        return;
    m->next_beat = plat_now() + beat_interval(w);
    for (uint32_t i = 0; i < m->n_peers; i++) {
        hb_slot *s = &m->hb_out[i][m->hb_next[i]];
        int free_slot = 1;
        if (s->req != MPI_REQUEST_NULL &&
            MPI_Test(&s->req, &free_slot, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
            m->hb_off = 1;
            return;
        }
        if (!free_slot)
            continue;
        s->msg[0] = m->seq;
        s->msg[1] = w->step;
        if (MPI_Isend(s->msg, 2, MPI_UINT64_T, (int)peer_rank(w, i), HB_TAG, m->hb,
                      &s->req) != MPI_SUCCESS) {
            m->hb_off = 1;
            return;
        }
        m->hb_next[i] = (m->hb_next[i] + 1) % HB_RING;
    }
}

/* Before each collective: the heartbeat of its new sequence. */
static void hb_send(vkt_world *w)
{
    w->impl->seq++;
    hb_out(w);
    hb_poll(w);
}

/* On every poll of a wait (`now` is the poll's clock): once a beat interval has passed
 * since the last heartbeat or beat, a beat, i.e. the same {sequence, step} again. Its
 * receiver records when it last heard from this rank; a rank stopped inside a collective
 * sends none. A short wait costs one comparison. */
static void hb_tick(vkt_world *w, double now)
{
    struct world_impl *m = w->impl;
    if (m && now >= m->next_beat)
        hb_out(w);
}

/* Cancels the preposted receives and lets go of the sends. A small send completes
 * locally at once (eager), so one still pending is freed, not waited for: its peer
 * may have cancelled the receive that would match it. Its buffer is then left
 * allocated, since MPI may still read it. */
static void hb_stop(vkt_world *w)
{
    struct world_impl *m = w->impl;
    int pending = 0;
    for (uint32_t i = 0; i < m->n_peers; i++) {
        if (m->hb_recv[i] != MPI_REQUEST_NULL) {
            MPI_Cancel(&m->hb_recv[i]);
            MPI_Wait(&m->hb_recv[i], MPI_STATUS_IGNORE);
        }
        for (int s = 0; s < HB_RING; s++) {
            MPI_Request *r = &m->hb_out[i][s].req;
            int done = 0;
            if (*r != MPI_REQUEST_NULL && MPI_Test(r, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS &&
                !done) {
                MPI_Request_free(r);
                pending = 1;
            }
        }
    }
    if (pending)
        m->hb_out = NULL; /* not freed: see above */
    hb_free(m);
}

/* Appends ", x" (or "x" first) to a list; stops quietly when the buffer is full. */
static void list_add(char *buf, size_t cap, const char *item)
{
    size_t len = strlen(buf);
    if (len + 1 < cap)
        snprintf(buf + len, cap - len, "%s%s", len ? ", " : "", item);
}

/* The peers to be named: behind (silent = 0), whose last heartbeat is behind this
 * rank's own sequence: they have not reached this collective; or silent (silent = 1),
 * from which nothing has come for more than timeout / 2: they stopped answering. Lists
 * their ranks, steps and (silent) seconds since heard; returns how many. */
static uint32_t list_peers(vkt_world *w, int silent, double now, char *ranks, char *steps,
                           char *ages, size_t cap)
{
    struct world_impl *m = w->impl;
    char item[32];
    uint32_t n = 0;
    for (uint32_t i = 0; i < m->n_peers; i++) {
        double age = now - m->last_heard[i];
        if (silent ? age <= w->timeout / 2 : m->last_seq[i] >= m->seq)
            continue;
        if (n++ >= LATE_LISTED)
            continue;
        snprintf(item, sizeof item, "%u", peer_rank(w, i));
        list_add(ranks, cap, item);
        if (m->last_seq[i])
            snprintf(item, sizeof item, "%llu", (unsigned long long)m->last_step[i]);
        else
            snprintf(item, sizeof item, "none");
        list_add(steps, cap, item);
        snprintf(item, sizeof item, "%.1f", age);
        list_add(ages, cap, item);
    }
    if (n > LATE_LISTED) {
        snprintf(item, sizeof item, "... (%u in all)", n);
        list_add(ranks, cap, item);
    }
    return n;
}

/* The watchdog's message: first the peers that have not reached this collective; when
 * every one has, those that stopped answering inside it (a rank stopped or hung after
 * its heartbeat went out sends no beats). */
static vkt_status timeout_fail(vkt_world *w, const char *what, double limit)
{
    hb_poll(w);
    char ranks[512] = "", steps[512] = "", ages[512] = "";
    unsigned long long step = (unsigned long long)w->step;
    if (list_peers(w, 0, plat_now(), ranks, steps, ages, sizeof ranks))
        return err_fail(w->errmsg, VKT_ERROR_TIMEOUT,
                        "step %llu: %s did not complete in %g s: rank(s) %s have not arrived "
                        "(last seen at step(s) %s)", step, what, limit, ranks, steps);
    if (list_peers(w, 1, plat_now(), ranks, steps, ages, sizeof ranks))
        return err_fail(w->errmsg, VKT_ERROR_TIMEOUT,
                        "step %llu: %s did not complete in %g s: rank(s) %s stopped answering "
                        "(last heard %s s ago, at step(s) %s)", step, what, limit, ranks, ages,
                        steps);
    if (w->rank != 0)
        return err_fail(w->errmsg, VKT_ERROR_TIMEOUT,
                        "step %llu: %s did not complete in %g s: the chief (rank 0) names the "
                        "late ranks", step, what, limit);
    return err_fail(w->errmsg, VKT_ERROR_TIMEOUT,
                    "step %llu: %s did not complete in %g s: every rank has arrived, but the "
                    "transport made no progress", step, what, limit);
}

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

static void nbc_setup(vkt_world *w)
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

static void nbc_free(struct world_impl *m)
{
    if (m->nbc_tuned)
        MPI_T_cvar_handle_free(&m->nbc_cvar);
    if (m->mpit)
        MPI_T_finalize();
    m->nbc_tuned = m->mpit = 0;
}

/* ---- init and finalize --------------------------------------------------------- */

static vkt_status comm_dup(vkt_world *w, MPI_Comm *out)
{
    int rc = MPI_Comm_dup(MPI_COMM_WORLD, out);
    if (rc != MPI_SUCCESS)
        return mpi_fail(w, rc, "MPI_Comm_dup", "world init");
    w->impl->comms++;
    /* Errors on our communicators come back as return codes, not as an abort. */
    rc = MPI_Comm_set_errhandler(*out, MPI_ERRORS_RETURN);
    return rc == MPI_SUCCESS ? VKT_OK : mpi_fail(w, rc, "MPI_Comm_set_errhandler", "world init");
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
        return mpi_fail(w, rc, "MPI_Comm_split_type", "world init");
    w->rank = (uint32_t)rank;
    w->size = (uint32_t)size;
    w->local_rank = (uint32_t)lrank;
    w->local_size = (uint32_t)lsize;
    nbc_setup(w);
    return hb_start(w);
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
        hb_stop(w);
        free_comms(w->impl);
        nbc_free(w->impl);
        free(w->impl);
        w->impl = NULL;
    }
    return st;
}

void world_tp_finalize(vkt_world *w)
{
    struct world_impl *m = w->impl;
    if (!m)
        return;
    /* Every rank gets here before anything is freed, so no heartbeat or collective of
     * a peer can still be aimed at what we free. */
    vkt_status st = world_barrier(w, "finalize");
    if (st != VKT_OK) {
        /* MPI_Finalize would hang on the missing ranks: leave MPI as it is, say so. The
         * state is left allocated on purpose: MPI may still write into the heartbeat
         * buffers and the barrier's request. */
        fprintf(stderr, "vkt: rank %u: %s (MPI is not finalized)\n", w->rank, w->errmsg);
        w->impl = NULL;
        return;
    }
    hb_stop(w);
    free_comms(m);
    nbc_free(m);
    if (m->own_init)
        MPI_Finalize();
    free(m);
    w->impl = NULL;
}

void world_tp_abort(vkt_world *w, int code)
{
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
    hb_poll(w);
    if (rc != MPI_SUCCESS) {
        mpi_fail(w, rc, "MPI_Testall", req->what);
        req_free(req);
        return -1;
    }
    if (done)
        req_free(req);
    return done ? 1 : 0;
}

int world_test(vkt_world *w, world_req *req)
{
    if (!req)
        return 1;
    int r = req_test(w, req);
    if (r == 0)
        hb_tick(w, plat_now()); /* a caller polling in a loop is waiting too */
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
        hb_tick(w, now);
        if (waited > limit) {
            w->comm_seconds += waited;
            /* The request stays in flight: MPI cannot cancel a collective. */
            return timeout_fail(w, req->what, limit);
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
    uint64_t piece = piece_elems(w, elem, (uint64_t)INT_MAX * elem);
    world_req *req = req_new(w, (int)((n + piece - 1) / piece), what);
    if (!req)
        return VKT_ERROR_OUT_OF_MEMORY;
    hb_send(w);
    for (int p = 0; p < req->n; p++) {
        uint64_t off = (uint64_t)p * piece, len = n - off < piece ? n - off : piece;
        nbc_choose(w, len * elem);
        int rc = MPI_Iallreduce(MPI_IN_PLACE, (char *)data + off * elem, (int)len, type, op,
                                w->impl->coll, &req->reqs[p]);
        if (rc != MPI_SUCCESS) {
            /* Pieces already started cannot be cancelled; the job is to end. */
            req_free(req);
            return mpi_fail(w, rc, "MPI_Iallreduce", what);
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
    uint64_t piece = piece_elems(w, 1, BCAST_PIECE);
    world_req *req = req_new(w, (int)((bytes + piece - 1) / piece), what);
    if (!req)
        return VKT_ERROR_OUT_OF_MEMORY;
    hb_send(w);
    for (int p = 0; p < req->n; p++) {
        uint64_t off = (uint64_t)p * piece, len = bytes - off < piece ? bytes - off : piece;
        int rc = MPI_Ibcast((char *)data + off, (int)len, MPI_BYTE, (int)root, w->impl->coll,
                            &req->reqs[p]);
        if (rc != MPI_SUCCESS) {
            req_free(req);
            return mpi_fail(w, rc, "MPI_Ibcast", what);
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
    world_req *req = req_new(w, 1, what);
    if (!req)
        return VKT_ERROR_OUT_OF_MEMORY;
    hb_send(w);
    int rc = MPI_Igather(send, (int)len, MPI_BYTE, recv, (int)len, MPI_BYTE, 0, w->impl->coll,
                         &req->reqs[0]);
    if (rc != MPI_SUCCESS) {
        req_free(req);
        return mpi_fail(w, rc, "MPI_Igather", what);
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
    uint64_t piece = piece_elems(w, 1, INT_MAX);
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
    uint64_t piece = piece_elems(w, sizeof(float), (uint64_t)INT_MAX * sizeof(float));
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
    world_req *req = req_new(w, 1, what);
    if (!req) {
        free(v);
        return VKT_ERROR_OUT_OF_MEMORY;
    }
    req->scratch = v; /* MPI reads the counts until the operation completes */
    hb_send(w);
    int rc = MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data, v, v + w->size,
                             MPI_FLOAT, w->impl->coll, &req->reqs[0]);
    if (rc != MPI_SUCCESS) {
        req_free(req);
        return mpi_fail(w, rc, "MPI_Iallgatherv", what);
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
    world_req *req = req_new(w, 1, what);
    if (!req)
        return VKT_ERROR_OUT_OF_MEMORY;
    hb_send(w);
    int rc = MPI_Ibarrier(w->impl->coll, &req->reqs[0]);
    if (rc != MPI_SUCCESS) {
        req_free(req);
        return mpi_fail(w, rc, "MPI_Ibarrier", what);
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
            return mpi_fail(w, rc, "MPI_Allreduce", "plain allreduce");
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
    world_req *req = req_new(w, 1, "send");
    if (!req)
        return VKT_ERROR_OUT_OF_MEMORY;
    int rc = MPI_Isend(buf, (int)bytes, MPI_BYTE, (int)dst, tag, w->impl->p2p, &req->reqs[0]);
    if (rc != MPI_SUCCESS) {
        req_free(req);
        return mpi_fail(w, rc, "MPI_Isend", "send");
    }
    req->bytes = bytes;
    w->comm_bytes += bytes;
    *out = req;
    return VKT_OK;
}

/* Receives a matched message without blocking inside MPI (a large one arrives in
 * pieces only as the sender makes progress). */
static vkt_status mrecv(vkt_world *w, MPI_Message *msg, void *buf, int count)
{
    world_req *req = req_new(w, 1, "receive");
    if (!req)
        return VKT_ERROR_OUT_OF_MEMORY;
    req->bytes = (uint64_t)count;
    int rc = MPI_Imrecv(buf, count, MPI_BYTE, msg, &req->reqs[0]);
    if (rc != MPI_SUCCESS) {
        req_free(req);
        return mpi_fail(w, rc, "MPI_Imrecv", "receive");
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
    hb_poll(w);
    hb_tick(w, plat_now()); /* the parameter server's ranks wait here */
    int rc = MPI_Improbe(MPI_ANY_SOURCE, tag, w->impl->p2p, &flag, &msg, &status);
    if (rc != MPI_SUCCESS)
        return mpi_fail(w, rc, "MPI_Improbe", "receive");
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
