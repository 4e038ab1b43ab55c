/*
 * reduce.h - gradient reducers of synchronous data parallelism: after every replica's
 * forward and backward, the weighted average of the gradients of every replica of the
 * world (w_q = rows_q / global batch) into each replica's host-visible stage, the same
 * bits for all, so every replica applies the same update (apply.h) and they stay
 * bitwise identical. exec_plan.c picks one for sync training with several replicas:
 *   host  (reduce_host.c): this process's replicas; each replica's step copies its
 *         gradient into its stage as the backward completes it, then a pool of host
 *         threads sized to the cores (the first replica threads, and helpers where the
 *         cores outnumber them: reduce_sum.h) sums chunks of it in replica order and
 *         writes the sum back into every stage;
 *   world (reduce_world.c): MPI around the host reducer's sum: the local sum goes into the
 *         comm buffer bucket by bucket as the device completes them, one allreduce per
 *         bucket overlapping the rest of the backward, a tail carrying the loss, the stop
 *         and the failures, and the ranks' sum back into every stage;
 *   device (reduce_device.c): replicas of this process sharing one VkDevice (VKT_SHARE_
 *         DEVICE): the average is a kernel on that device, ordered by timelines after
 *         every replica's backward, and each update reads it there: no host in the path.
 * One replica alone needs no reducer: its update is the end of its own step.
 */
#ifndef VKT_PARALLEL_REDUCE_H
#define VKT_PARALLEL_REDUCE_H

#include "parallel/trainer.h"

typedef struct reducer reducer;

typedef struct reduce_ops {
    const char *name;
    /* w: the world (NULL for a reducer of one process) */
    vkt_status (*create)(vkt_trainer *t, vkt_world *w, reducer **out);
    void (*destroy)(reducer *rd);
    /* A replica's model (again after balancing rebuilt it): the recording hooks that copy
     * its gradients out as the backward completes them. */
    vkt_status (*attach)(reducer *rd, replica *r);
    /* Once every replica of the process exists (their count, the gradient's length):
     * what the averaging needs (NULL: nothing). */
    vkt_status (*start)(reducer *rd);
    /* The host threads that average (vkt_trainer_stats.average_threads). */
    uint32_t (*threads)(const reducer *rd);
    /* The replica's step in place of the executor's (NULL: the executor's), called by
     * every replica whatever its status (a failed replica still takes its turn). */
    void (*step)(reducer *rd, replica *r, uint64_t step);
    /* Replica r's host staging of `bytes` (NULL: a host buffer of its context): the
     * host reducer's import variant gives each a region of one host allocation. */
    vkt_status (*make_stage)(reducer *rd, replica *r, uint64_t bytes);
    /* 1: the average never leaves the device: no host staging (the reducer points each
     * replica's stage at the device buffer its update reads). */
    int on_device;
    /* 1: the replica's step is only submitted before exchange, which waits for it
     * bucket by bucket (so does the host reducer's when reducer.overlap is set); 0: the
     * step is done (waited for) first. */
    int submit_only;
    /* After the replica's step: the average into its stage. Every replica of the process
     * calls it; returns 1 to stop (a failure anywhere, or the chief's stop: statuses
     * set), 0 to apply the average. */
    int (*exchange)(reducer *rd, replica *r, uint64_t step);
    /* Before each step of a fit: whether every replica goes on, from each one's vote to
     * stop (a failure, or the progress callback's stop on replica 0). */
    int (*go_on)(reducer *rd, replica *r, int vote);
    /* After replica r applied step's average (NULL: nothing). */
    void (*applied)(reducer *rd, replica *r, uint64_t step);
    /* The last step's mean loss over the world's global batch. */
    double (*mean_loss)(const reducer *rd);
    /* After exchange returned 1: 1 when the step's batch went unused (a stop: fit puts
     * it back so a resumed run reads it again). */
    int (*batch_unused)(const reducer *rd);
} reduce_ops;

struct reducer {
    const reduce_ops *ops;
    vkt_trainer *t;
    int overlap;               /* marks after gradient buckets: the host works while the
                                  backward goes on (both reducers) */
};

extern const reduce_ops reduce_host_ops;
/* The host reducer with its replicas' stages in one host allocation imported into every
 * replica's device (VK_EXT_external_memory_host, VKT_HOST_IMPORT=1): each device writes its
 * gradient copy-outs straight into the memory the threads sum, and the sum is written
 * once, into a last region every device imported too (replica.avg_in), which each update
 * reads; the same sum, the same bits. host_create picks it where every context imports. */
extern const reduce_ops reduce_host_import_ops;
extern const reduce_ops reduce_world_ops;
extern const reduce_ops reduce_device_ops;

/* Floats in gradient bucket b (both reducers cut the gradients, in the order the backward
 * completes them, into buckets closed by a mark when they overlap): options.bucket_bytes
 * (0: 4 MiB), the first bucket at most 1 MiB (as PyTorch DDP's), so the host starts
 * early. */
#define REDUCE_FIRST_BUCKET_FLOATS (1u << 18)
#define REDUCE_DEFAULT_BUCKET_BYTES (4u << 20)
static inline uint64_t reduce_bucket_limit(const vkt_trainer *t, uint32_t b)
{
    uint64_t per = (t->opt.bucket_bytes ? t->opt.bucket_bytes : REDUCE_DEFAULT_BUCKET_BYTES) / 4;
    per = per ? per : 1;
    return b == 0 && REDUCE_FIRST_BUCKET_FLOATS < per ? REDUCE_FIRST_BUCKET_FLOATS : per;
}

/* The host reducer's local sum, which the world reducer wraps (local: a host reducer of
 * this process's replicas). sum: dst[i] = the replicas' stages' element at + i, weighted
 * and summed in replica order; scatter: src back into every replica's stage at `at`. */
void reduce_host_sum(const reducer *local, uint64_t at, float *dst, uint64_t n);
void reduce_host_scatter(const reducer *local, uint64_t at, const float *src, uint64_t n);
/* Recording (the host reducer's hook): gradient elements [offset, offset + count) into
 * the replica's stage. */
vkt_status reduce_host_copy_out(replica *r, vkt_stream *s, uint64_t offset, uint64_t count);
/* The weighted mean of this process's replicas' losses. */
double reduce_local_loss(const vkt_trainer *t);

/* The world reducer's bucket layout (for tests): buckets, gradient floats packed into the
 * comm buffer, whether marks overlap, and bucket 0's mark (UINT32_MAX: none). */
typedef struct reduce_world_layout {
    uint32_t buckets;
    uint64_t packed;
    int overlap;
    uint32_t first_mark;
} reduce_world_layout;
void reduce_world_layout_of(const reducer *rd, reduce_world_layout *out);

#endif
