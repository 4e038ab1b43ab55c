/*
 * vkt/distributed.h - the world: one job across processes and machines (MPI).
 * A trainer takes a world (vkt_trainer_options.world; vkt/training.h). Part of vkt.h,
 * readable alone.
 * The conventions of every part (statuses, messages, NULL options, ...): vkt/base.h.
 */
#ifndef VKT_DISTRIBUTED_H
#define VKT_DISTRIBUTED_H

#include "base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------------ */
/* World: one training job across processes and machines (MPI; docs/distributed.md) */
/* ------------------------------------------------------------------------------ */
/*
 * `mpirun -np R prog` (or `srun`) starts R processes, the ranks; rank 0 is the chief.
 * Every rank calls the collective functions (marked "collective") in the same order with
 * the same arguments. Built without MPI (VKT_MPI=OFF), or started without an MPI
 * launcher, the world is one rank and makes no MPI call. One thread at a time may use a
 * world (MPI_THREAD_SERIALIZED); the trainer uses it from its own threads during a run.
 * Every wait is a nonblocking operation polled with a short sleep, against a deadline:
 * a rank that does not take part in time gives VKT_ERROR_TIMEOUT naming the late ranks.
 */
typedef struct vkt_world vkt_world;

typedef struct vkt_world_options {
    double timeout_seconds;  /* a collective still incomplete after this: VKT_ERROR_TIMEOUT
                                naming the late ranks (0: 60) */
    uint32_t poll_max_us;    /* longest sleep between polls while waiting (0: 200) */
    int require_launcher;    /* 1: VKT_ERROR_STATE unless started by an MPI launcher */
} vkt_world_options;

/* MPI_Init_thread(MPI_THREAD_SERIALIZED) when started by an MPI launcher (Open MPI,
 * PMIx or PMI environment); a one-rank world otherwise. Call once per process, before
 * threads that use it. argc/argv may be NULL. */
VKT_API vkt_status vkt_world_init(int *argc, char ***argv, const vkt_world_options *options,
                                  vkt_world **out_world /* OUT */);
/* Collective; after every trainer using the world is destroyed. NULL: no-op. The ranks
 * wait there for each other: a rank other than the chief waits for the chief for as long
 * as the chief answers, and gives up (saying so on stderr, leaving MPI unfinalized, so
 * that the launcher ends the job) after timeout_seconds (+ 2 s) without a word from it. */
VKT_API void vkt_world_finalize(vkt_world *world);
/* For work a rank does alone while the others wait for it, typically the chief's final
 * save, evaluation and report while the others wait in vkt_world_finalize: with on = 1 a
 * thread of the world sends this rank's heartbeats (every timeout / 4 s, at most 0.5 s)
 * until vkt_world_keepalive(world, 0), vkt_world_finalize or vkt_world_abort, so that the
 * waiting ranks know it is alive however long the work takes. Make no other call on the
 * world in between (one thread at a time). VKT_OK in a one-rank world. */
VKT_API vkt_status vkt_world_keepalive(vkt_world *world, int on);
/* NULL stands for a one-rank world in these. */
VKT_API uint32_t vkt_world_rank(const vkt_world *world);
VKT_API uint32_t vkt_world_size(const vkt_world *world);
VKT_API uint32_t vkt_world_local_rank(const vkt_world *world); /* among this host's ranks */
VKT_API uint32_t vkt_world_local_size(const vkt_world *world);
VKT_API int vkt_world_is_chief(const vkt_world *world);        /* rank 0 */
VKT_API const char *vkt_world_errmsg(const vkt_world *world);
/* The time limit of every wait from now on (seconds > 0). */
VKT_API void vkt_world_set_timeout(vkt_world *world, double seconds);
/* Collective: `bytes` of data from rank 0 to every rank. */
VKT_API vkt_status vkt_world_broadcast(vkt_world *world, void *data, uint64_t bytes);
/* Collective: element-wise sum over the ranks, in place. */
VKT_API vkt_status vkt_world_sum(vkt_world *world, double *values, uint32_t n);
/* Ends every rank of the job: writes "vkt: rank R: <message>" to stderr, then MPI_Abort
 * with `code` (exit(code) in a one-rank world). For an application after an error that
 * the other ranks cannot see (they may be waiting in a collective); the library itself
 * never calls it. */
VKT_API void vkt_world_abort(vkt_world *world, int code, const char *message);
/* Benchmark (collective): `iters` in-place sums of `bytes` of floats through vktrain's
 * path (nonblocking allreduce, polled) and through a plain blocking MPI_Allreduce on the
 * same bytes, alternating; the mean seconds of each (the slowest rank's). */
VKT_API vkt_status vkt_world_bench_allreduce(vkt_world *world, uint64_t bytes, uint32_t iters,
                                             double *out_vkt_seconds /* OUT */,
                                             double *out_mpi_seconds /* OUT */);

#ifdef __cplusplus
}
#endif

#endif /* VKT_DISTRIBUTED_H */
