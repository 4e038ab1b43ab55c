/*
 * world.h - the transport across processes, behind one interface. world_mpi*.c (with
 * their private world_mpi.h) are the only files that include <mpi.h> (built when
 * VKT_MPI is on); world_none.c is the
 * one-rank stand-in (VKT_MPI off). Both are also used by a process not started by an
 * MPI launcher: then the world has one rank and no MPI call is made.
 *
 * Rules every implementation keeps:
 *  - One thread at a time calls these (MPI_THREAD_SERIALIZED); the caller arranges it.
 *  - Nothing blocks inside MPI: every operation is started nonblocking and polled
 *    (MPI_Test, then a sleep doubling from 1 us to poll_max_us), so a waiting rank leaves
 *    the cores to a CPU device such as lavapipe and progress is made (Open MPI 4.1 has
 *    no progress thread).
 *  - Every wait has a deadline of `timeout` seconds from its start. Before each
 *    collective a rank sends a small heartbeat {sequence, step} to the chief (the chief
 *    to every rank) on a communicator of its own; on a timeout the chief names the ranks
 *    whose last heartbeat is behind its own, a non-chief names the chief when the chief
 *    is behind. VKT_ERROR_TIMEOUT with "step S: <what> did not complete in T s: rank(s)
 *    2, 5 have not arrived (last seen at steps 41, 39)". A non-chief waits 2 s longer
 *    than the chief before it gives up, so the chief's message (which names ranks) comes
 *    first.
 *  - A rank stopped or hung inside a collective, after its heartbeat, is named too: a
 *    rank polling a wait (world_wait, world_test, world_try_recv) re-sends its {sequence,
 *    step} as a beat every timeout / 4 seconds (0.01 to 0.5 s) on the same path, and the
 *    receiver notes when it last heard from each peer. When no peer is behind, the
 *    timeout names the peers silent for more than timeout / 2: "rank(s) 2 stopped
 *    answering (last heard 3.0 s ago, at step(s) 41)". A short wait costs a clock
 *    comparison per poll; beats never move a peer's sequence back or count as arrivals.
 *  - Collectives run on a duplicate of MPI_COMM_WORLD (never the application's), point
 *    to point messages on another, heartbeats on a third.
 *  - Counts above INT_MAX elements are split into pieces.
 * Errors go into w->errmsg (and the thread's last error) and are returned.
 */
#ifndef VKT_PARALLEL_WORLD_H
#define VKT_PARALLEL_WORLD_H

#include <stdint.h>

#include "core/error.h"
#include "vkt.h"

typedef enum world_op { WORLD_SUM, WORLD_MIN, WORLD_MAX } world_op;

struct world_impl; /* the transport's own state */

struct vkt_world {
    uint32_t rank, size;            /* this process, the number of processes */
    uint32_t local_rank, local_size;/* among the processes of this host */
    int launched;                   /* 1: MPI is initialised (started by a launcher) */
    double timeout;                 /* seconds, every wait */
    uint32_t poll_max_us;           /* longest sleep between polls */
    uint64_t step;                  /* the caller's current step, for heartbeats and messages */
    double comm_seconds;            /* time spent waiting in collectives and receives */
    uint64_t comm_bytes;            /* bytes handed to MPI (payloads, not heartbeats) */
    char errmsg[VKT_ERRMSG_SIZE];
    struct world_impl *impl;
};

/* A nonblocking operation in flight. */
typedef struct world_req world_req;

/* Fills rank, size, local_rank, local_size, launched; MPI_Init_thread when an MPI
 * launcher started the process (OMPI_COMM_WORLD_SIZE, PMIX_RANK, PMI_RANK or PMI_SIZE in
 * the environment), otherwise a one-rank world (VKT_ERROR_STATE if require_launcher).
 * VKT_MPI off: always one rank (VKT_ERROR_STATE if require_launcher). */
vkt_status world_tp_init(vkt_world *w, int *argc, char ***argv, int require_launcher);
/* Cancels what is pending, frees the communicators, MPI_Finalize (collective). The
 * barrier before it: on a non-chief its deadline counts from the chief's last message, so
 * a chief that works alone at the end (saves, evaluates) while beating is waited for. */
void world_tp_finalize(vkt_world *w);
/* MPI_Abort(code) when launched, else exit(code). Does not return. */
void world_tp_abort(vkt_world *w, int code);
/* on: a thread of the transport sends this rank's beats (world_mpi_beat.c) until off
 * (or finalize, or abort, which stop it first), while the caller makes no other call on
 * the world; a non-chief rank waiting in finalize keeps waiting for as long as the
 * chief's beats come. Nothing to do in one rank. */
vkt_status world_tp_keepalive(vkt_world *w, int on);

/* Nonblocking in-place sum of n floats over the ranks; *out is NULL when nothing is to
 * be done (one rank). Complete with world_wait or world_test. `what` ("gradient
 * allreduce") is kept for messages. */
vkt_status world_iallreduce_f32(vkt_world *w, float *data, uint64_t n, const char *what,
                                world_req **out);
/* 1 when the request has completed (it is then freed), 0 when still in flight, -1 on an
 * MPI error (message in w->errmsg, request freed). NULL: 1. */
int world_test(vkt_world *w, world_req *req);
/* Polls until done (then frees it) or the deadline (VKT_ERROR_TIMEOUT; the request is
 * left in flight, as world_abandon leaves it: the job is to be aborted). NULL: VKT_OK. */
vkt_status world_wait(vkt_world *w, world_req *req);
/* A request given up on after a failure, never to be waited for: left in flight (MPI
 * cannot cancel a collective and may still write into its buffers) and kept reachable
 * until the process ends. NULL: nothing. */
void world_abandon(vkt_world *w, world_req *req);

/* Collectives, complete on return (started nonblocking, waited with world_wait). */
vkt_status world_allreduce_f32(vkt_world *w, float *data, uint64_t n, const char *what);
vkt_status world_allreduce_u64(vkt_world *w, uint64_t *data, uint64_t n, world_op op,
                               const char *what);
vkt_status world_allreduce_f64(vkt_world *w, double *data, uint64_t n, world_op op,
                               const char *what);
/* `bytes` from rank 0 to every rank, in pieces of at most 256 MiB. */
vkt_status world_bcast(vkt_world *w, void *data, uint64_t bytes, const char *what);
/* Every rank's `bytes` of send into recv on rank 0 (size * bytes, rank order); recv may
 * be NULL on other ranks. */
vkt_status world_gather(vkt_world *w, const void *send, uint64_t bytes, void *recv,
                        const char *what);
/* Every rank's piece of floats (counts[r] floats at offset displs[r] of data) gathered
 * into data on every rank, in place: rank r's own piece is already in place. */
vkt_status world_allgatherv_f32(vkt_world *w, float *data, const uint64_t *counts,
                                const uint64_t *displs, const char *what);
vkt_status world_barrier(vkt_world *w, const char *what);

/* Point to point, for the asynchronous parameter server: messages of a tag between
 * ranks on a communicator of their own. Sends are nonblocking (the buffer must stay
 * untouched until world_test says done). world_try_recv receives one message of `tag`
 * from any rank if one has arrived (MPI_Improbe + MPI_Mrecv): *out_src its sender, else
 * *out_src = UINT32_MAX; a message larger than cap bytes is VKT_ERROR_INTERNAL. */
vkt_status world_isend(vkt_world *w, uint32_t dst, int tag, const void *buf, uint64_t bytes,
                       world_req **out);
vkt_status world_try_recv(vkt_world *w, int tag, void *buf, uint64_t cap, uint32_t *out_src,
                          uint64_t *out_bytes);
/* A receive posted ahead (the pipeline's edges across ranks: exec_pipe_world.c): the
 * next message of `tag` from rank src, of exactly `bytes` bytes, into buf (untouched by
 * the caller until complete). Complete with world_test or world_wait, whose deadline and
 * heartbeats name a silent sender. Between one pair of ranks, messages of one tag arrive
 * in the order they were sent, so receives posted in order match sends made in order. */
vkt_status world_irecv(vkt_world *w, uint32_t src, int tag, void *buf, uint64_t bytes,
                       world_req **out);

/* The plain blocking MPI_Allreduce (SUM, in place) of the allreduce benchmark's
 * reference; no deadline. One rank: nothing. */
vkt_status world_allreduce_f32_plain(vkt_world *w, float *data, uint64_t n);

/* world.c: the arguments of world_isend (and of world_irecv: dst is the source), checked
 * alike by every transport (*out NULL first). */
vkt_status world_check_send(vkt_world *w, uint32_t dst, int tag, const void *buf,
                            uint64_t bytes, world_req **out);

/* world.c: sleeps for the n-th poll of a wait: 1 us doubling up to poll_max_us. */
void world_backoff(const vkt_world *w, uint32_t n);

/* Whether MPI_Initialized says MPI is initialised in this process (0 in a build
 * without MPI): tests check that an unlaunched process made no MPI_Init. */
int world_mpi_initialized(void);
/* 1 in a build with MPI (world_mpi.c), 0 without (world_none.c). */
int world_built_with_mpi(void);
/* Tests: split every collective into pieces of at most `bytes` (0: the defaults, i.e.
 * INT_MAX elements, and 256 MiB for broadcasts), so the piece paths can be exercised
 * on small buffers. Same value on every rank. */
void world_set_max_piece(vkt_world *w, uint64_t bytes);

#endif
