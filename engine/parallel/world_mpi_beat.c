/* Heartbeats of the MPI transport (world_mpi.h): before each collective a rank sends its
 * {sequence, step} to its peers on a communicator of its own, and re-sends it while it
 * waits, so a rank that times out can name the ranks that did not arrive and those that
 * stopped answering. */
#include "world_mpi.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "platform/platform.h"

/* ---- heartbeats ---------------------------------------------------------------- */

static vkt_status hb_post(vkt_world *w, uint32_t i)
{
    struct world_impl *m = w->impl;
    int rc = MPI_Irecv(m->hb_in[i], 2, MPI_UINT64_T, (int)wmpi_peer_rank(w, i), HB_TAG, m->hb,
                       &m->hb_recv[i]);
    return rc == MPI_SUCCESS ? VKT_OK : wmpi_fail(w, rc, "MPI_Irecv", "heartbeat");
}

void wmpi_hb_free(struct world_impl *m)
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

vkt_status wmpi_hb_start(vkt_world *w)
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
        wmpi_hb_free(m);
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
void wmpi_hb_poll(vkt_world *w)
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
        if (MPI_Isend(s->msg, 2, MPI_UINT64_T, (int)wmpi_peer_rank(w, i), HB_TAG, m->hb,
                      &s->req) != MPI_SUCCESS) {
            m->hb_off = 1;
            return;
        }
        m->hb_next[i] = (m->hb_next[i] + 1) % HB_RING;
    }
}

/* Before each collective: the heartbeat of its new sequence. */
void wmpi_hb_send(vkt_world *w)
{
    w->impl->seq++;
    hb_out(w);
    wmpi_hb_poll(w);
}

/* On every poll of a wait (`now` is the poll's clock): once a beat interval has passed
 * since the last heartbeat or beat, a beat, i.e. the same {sequence, step} again. Its
 * receiver records when it last heard from this rank; a rank stopped inside a collective
 * sends none. A short wait costs one comparison. */
void wmpi_hb_tick(vkt_world *w, double now)
{
    struct world_impl *m = w->impl;
    if (m && now >= m->next_beat)
        hb_out(w);
}

/* Cancels the preposted receives and lets go of the sends. A small send completes
 * locally at once (eager), so one still pending is freed, not waited for: its peer
 * may have cancelled the receive that would match it. Its buffer is then left
 * allocated, since MPI may still read it. */
void wmpi_hb_stop(vkt_world *w)
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
    wmpi_hb_free(m);
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
        snprintf(item, sizeof item, "%u", wmpi_peer_rank(w, i));
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
vkt_status wmpi_timeout_fail(vkt_world *w, const char *what, double limit)
{
    wmpi_hb_poll(w);
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


/* A non-chief waiting in finalize for a chief silent for longer than `limit`. */
vkt_status wmpi_silence_fail(vkt_world *w, const char *what, double limit, double waited)
{
    return err_fail(w->errmsg, VKT_ERROR_TIMEOUT,
                    "step %llu: %s did not complete: the chief (rank 0) has been silent for "
                    "%g s (waited %.0f s in all): it stopped answering before it finished",
                    (unsigned long long)w->step, what, limit, waited);
}
