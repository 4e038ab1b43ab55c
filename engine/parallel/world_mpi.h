/* world_mpi.h - private to the MPI transport (world_mpi*.c, the only files that include
 * <mpi.h>): the world's MPI state, a request, and the functions the transport's files
 * share. world_mpi.c: helpers, init and finalize, waiting; world_mpi_beat.c: heartbeats
 * and the timeout's message; world_mpi_ops.c: collectives and point to point. */
#ifndef VKT_PARALLEL_WORLD_MPI_H
#define VKT_PARALLEL_WORLD_MPI_H

#include <mpi.h>
#include <stdatomic.h>

#include "platform/platform.h"
#include "world.h"

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
#define KEEPALIVE_POLL 0.01           /* seconds between the keepalive thread's polls */

typedef struct hb_slot {
    uint64_t msg[2];                  /* {sequence, step} */
    MPI_Request req;
} hb_slot;

struct world_impl {
    int own_init;                     /* we called MPI_Init_thread: we finalize */
    struct world_impl *stranded_next; /* world_tp_finalize gave up: kept (world_mpi.c) */
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
    /* vkt_world_keepalive: a thread beating while the application works alone */
    plat_thread *keepalive;
    atomic_int keepalive_stop;
    int follow_chief;                 /* finalize on a non-chief: the deadline runs from
                                         the chief's last message (world_wait) */
};

struct world_req {
    const char *what;                 /* for messages */
    uint64_t bytes;                   /* payload, for the spin window */
    void *scratch;                    /* freed with the request (e.g. count arrays) */
    struct world_req *next;           /* the stranded list (world_mpi.c), else NULL */
    int n;                            /* MPI requests */
    MPI_Request reqs[];
};


/* world_mpi.c */
/* An MPI call's failure as a status with a message naming the call and `what`. */
vkt_status wmpi_fail(vkt_world *w, int rc, const char *call, const char *what);
/* The rank of peer i: the chief's peers are every other rank, a non-chief's the chief. */
uint32_t wmpi_peer_rank(const vkt_world *w, uint32_t i);
/* Elements of elem_bytes per piece of a large operation (MPI counts are ints). */
uint64_t wmpi_piece_elems(const vkt_world *w, uint64_t elem_bytes, uint64_t cap_bytes);
world_req *wmpi_req_new(vkt_world *w, int n, const char *what);
void wmpi_req_free(world_req *r);

/* world_mpi_beat.c */
vkt_status wmpi_hb_start(vkt_world *w);
void wmpi_hb_stop(vkt_world *w);
void wmpi_hb_free(struct world_impl *m);
void wmpi_hb_poll(vkt_world *w);
/* This rank's heartbeat for its next collective, to every peer. */
void wmpi_hb_send(vkt_world *w);
/* While waiting: poll the peers, and beat when a beat is due. */
void wmpi_hb_tick(vkt_world *w, double now);
/* The deadline passed: VKT_ERROR_TIMEOUT naming the ranks that did not arrive or stopped
 * answering. */
vkt_status wmpi_timeout_fail(vkt_world *w, const char *what, double limit);
/* Finalize on a non-chief: the chief silent for longer than `limit`. */
vkt_status wmpi_silence_fail(vkt_world *w, const char *what, double limit, double waited);

/* world_mpi_ops.c */
void wmpi_nbc_setup(vkt_world *w);
void wmpi_nbc_free(struct world_impl *m);

#endif
