/*
 * world_threads.h - a transport test double (engine/parallel/world.h) whose ranks are
 * threads of one process, so the logic across ranks (reduce_world.c, trainer_world.c,
 * ps.c and its communication thread) runs under ThreadSanitizer without MPI (Open MPI is
 * not TSan-instrumented). Linked instead of world_mpi.c / world_none.c into the
 * vktrain_tsan_ranks library (tests/CMakeLists.txt).
 *
 * The n worlds of one job share a hub:
 *  - a collective is matched by its sequence number on each rank (MPI's rule: every rank
 *    calls the collectives in the same order); each rank deposits a pointer to its
 *    buffer, the last to arrive computes the result (floats summed in rank order, so
 *    every rank gets identical bits) and writes it into every rank's buffer. A buffer
 *    touched by its owner between the start and the completion of its operation is
 *    therefore a data race that TSan reports, as the MPI standard forbids it.
 *  - a message is copied into the destination's mailbox at the send (which completes at
 *    once); world_try_recv takes the oldest message of a tag.
 *  - every wait has the world's deadline: a bug ends in VKT_ERROR_TIMEOUT naming the
 *    ranks that have not arrived, not in a hang.
 * A world made by vkt_world_init (world_tp_init) is a one-rank job of its own.
 */
#ifndef VKT_TESTS_WORLD_THREADS_H
#define VKT_TESTS_WORLD_THREADS_H

#include <stdint.h>

#include "vkt.h"

/* The n worlds of one job: out[r] is rank r's, for one thread at a time, each ended with
 * vkt_world_finalize (the hub goes with the last). timeout: seconds for every wait (0:
 * 60). On failure nothing is created and out[] is NULL. */
vkt_status world_threads_create(uint32_t n, double timeout, vkt_world **out /* OUT: n */);

#endif
