/*
 * sync.h - part of the gpu layer (included by gpu.h, at its end): what lets contexts work
 * together without the host. Timeline semaphores order the queues of one VkDevice
 * (replicas sharing it: parallel/reduce_device.c); host memory imported into several
 * VkDevices (VK_EXT_external_memory_host) lets each write where the host reads.
 */
#ifndef VKT_GPU_SYNC_H
#define VKT_GPU_SYNC_H

/* ---- timelines (sync.c): queues of one VkDevice ordered without the host ------ */

/* A timeline semaphore (Vulkan 1.2; ctx->timeline): a counter a submission raises when it
 * completes, which a submission on any queue of its VkDevice can wait for. Destroyed with
 * its context, or before. */
typedef struct gpu_timeline {
    vkt_context *ctx;
    VkSemaphore sem;
    struct gpu_timeline *prev, *next;
} gpu_timeline;
vkt_status gpu_timeline_create(vkt_context *ctx, uint64_t initial, gpu_timeline **out);
void gpu_timeline_destroy(gpu_timeline *t);
/* The host raises it: what a failed submission would have signalled (no wait hangs). */
vkt_status gpu_timeline_signal(gpu_timeline *t, uint64_t value);
/* Its value now (vkGetSemaphoreCounterValue); UINT64_MAX on an error. */
uint64_t gpu_timeline_value(gpu_timeline *t);
/* A timeline and a value to wait for (at least) or to signal. */
typedef struct gpu_sync {
    gpu_timeline *t;
    uint64_t value;
} gpu_sync;
#define GPU_MAX_SYNC 32
/* What one submission (one batch) waits for before any of its command buffers runs, and
 * signals once all of them completed. A wait must never come before its signal is
 * submitted on the same queue (one queue runs in order: it would never start). */
typedef struct gpu_submit_sync {
    const gpu_sync *wait;
    uint32_t n_wait;
    const gpu_sync *signal;
    uint32_t n_signal;
} gpu_submit_sync;

/* The same with after[0..n_after) run after s's commands (their recordings start where s's
 * ends: s must end with gpu_stream_barrier_all for them to see its writes; at most
 * GPU_MAX_CARRIED before and after together) and the batch ordered by `sync` (NULL:
 * none; needs ctx->timeline). A failed submission signals nothing. */
vkt_status gpu_stream_submit_ext(vkt_stream *s, vkt_stream *const *before, uint32_t n,
                                 vkt_stream *const *after, uint32_t n_after,
                                 const gpu_submit_sync *sync);
/* A buffer over `bytes` of host memory at `ptr`, imported (VK_EXT_external_memory_host,
 * handle type HOST_ALLOCATION: no driver or device UUID must match, so any devices can
 * import one allocation): the device reads and writes the host's memory itself, with no
 * staging. ptr and bytes multiples of ctx->host_import (the device's alignment); the
 * memory must outlive the buffer; host and device accesses ordered by fences as for any
 * host-visible buffer. A HOST buffer: vkt_buffer_map returns ptr. VKT_ERROR_STATE where
 * the device cannot import (ctx->host_import 0), INVALID_ARGUMENT for a misaligned range. */
vkt_status gpu_buffer_import_host(vkt_context *ctx, void *ptr, uint64_t bytes, vkt_buffer **out);

#endif /* VKT_GPU_SYNC_H */
