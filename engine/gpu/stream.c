/* Streams: one command buffer holding many commands, recorded once and replayable.
 * A barrier is recorded only where a command touches bytes an earlier command of the
 * stream wrote (or writes bytes one read) since the last barrier. */
#include "gpu.h"

#include <stdlib.h>
#include <string.h>

#define QUERY_CAP 8192 /* timestamps: two per dispatch */

/* Every barrier covers compute shaders and transfers on both sides: streams mix them. */
#define ALL_STAGES (VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT)
#define ALL_WRITES (VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT)
#define ALL_ACCESS (VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT | \
                    VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT)

static void link_stream(vkt_context *ctx, vkt_stream *s)
{
    s->next = ctx->streams;
    if (ctx->streams)
        ctx->streams->prev = s;
    ctx->streams = s;
}

static void unlink_stream(vkt_context *ctx, vkt_stream *s)
{
    if (s->prev)
        s->prev->next = s->next;
    else if (ctx->streams == s)
        ctx->streams = s->next;
    if (s->next)
        s->next->prev = s->prev;
    s->prev = s->next = NULL;
}

vkt_status vkt_stream_create(vkt_context *ctx, const vkt_stream_options *options,
                             vkt_stream **out)
{
    if (!out)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "vkt_stream_create: out is NULL");
    *out = NULL;
    if (!ctx)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "vkt_stream_create: context is NULL");
    vkt_stream *s = calloc(1, sizeof *s);
    if (!s)
        return err_fail(ctx->errmsg, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    s->ctx = ctx;
    link_stream(ctx, s);
    VkCommandBufferAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                      .commandPool = ctx->cmd_pool,
                                      .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                      .commandBufferCount = 1};
    VkFenceCreateInfo fi = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    VkResult r = vkAllocateCommandBuffers(ctx->device, &ai, &s->cmd);
    if (r == VK_SUCCESS)
        r = vkCreateFence(ctx->device, &fi, NULL, &s->fence);
    if (r == VK_SUCCESS && options && options->timestamps) {
        if (!ctx->info.timestamps) {
            vkt_stream_destroy(s);
            return err_fail(ctx->errmsg, VKT_ERROR_LIMIT,
                            "device '%s' has no timestamps on its compute queue",
                            ctx->info.name);
        }
        VkQueryPoolCreateInfo qi = {.sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO,
                                    .queryType = VK_QUERY_TYPE_TIMESTAMP,
                                    .queryCount = QUERY_CAP};
        r = vkCreateQueryPool(ctx->device, &qi, NULL, &s->queries);
        s->query_cap = QUERY_CAP;
        s->query_names = calloc(QUERY_CAP / 2, sizeof *s->query_names);
        if (r == VK_SUCCESS && !s->query_names)
            r = VK_ERROR_OUT_OF_HOST_MEMORY;
    }
    if (r != VK_SUCCESS) {
        vkt_stream_destroy(s);
        return err_fail(ctx->errmsg, gpu_status_of(r), "creating a stream failed: %s",
                        gpu_result_name(r));
    }
    *out = s;
    return VKT_OK;
}

/* ---- round trips ---- */

void gpu_context_counters(const vkt_context *ctx, gpu_counters *out)
{
    vkt_context *c = (vkt_context *)ctx; /* atomic loads of a const object's fields */
    *out = (gpu_counters){
        .submits = atomic_load_explicit(&c->n_submits, memory_order_relaxed),
        .fence_waits = atomic_load_explicit(&c->n_fence_waits, memory_order_relaxed),
        .sync_transfers = atomic_load_explicit(&c->n_transfers, memory_order_relaxed),
        .transfer_bytes = atomic_load_explicit(&c->n_transfer_bytes, memory_order_relaxed),
        .idle_seconds = 1e-9 * (double)atomic_load_explicit(&c->idle_ns, memory_order_relaxed)};
}

void gpu_context_idle_disarm(vkt_context *ctx) { ctx->idle_since = 0; }

void gpu_count_transfer(vkt_context *ctx, uint64_t bytes)
{
    atomic_fetch_add_explicit(&ctx->n_transfers, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&ctx->n_transfer_bytes, bytes, memory_order_relaxed);
}

/* A submission went in: if none was pending, the device waited for the host since the
 * wait that emptied it. */
static void count_submit(vkt_context *ctx)
{
    atomic_fetch_add_explicit(&ctx->n_submits, 1, memory_order_relaxed);
    if (ctx->in_flight++ == 0 && ctx->idle_since > 0) {
        double idle = plat_now() - ctx->idle_since;
        if (idle > 0)
            atomic_fetch_add_explicit(&ctx->idle_ns, (uint64_t)(idle * 1e9),
                                      memory_order_relaxed);
    }
}

/* A submission is over (waited for: `counted`, or dropped with its stream). */
static void count_done(vkt_context *ctx, int counted)
{
    if (counted)
        atomic_fetch_add_explicit(&ctx->n_fence_waits, 1, memory_order_relaxed);
    if (ctx->in_flight > 0 && --ctx->in_flight == 0)
        ctx->idle_since = plat_now();
}

static void release_recording(vkt_stream *s)
{
    VkDevice dev = s->ctx->device;
    for (uint32_t i = 0; i < s->view_count; i++)
        vkDestroyBufferView(dev, s->views[i], NULL);
    s->view_count = 0;
    for (uint32_t i = 0; i < s->pool_count; i++)
        vkDestroyDescriptorPool(dev, s->pools[i], NULL);
    s->pool_count = 0;
    s->sets_in_pool = 0;
    s->pending_reads.count = s->pending_writes.count = 0;
    s->query_count = 0;
    memset(&s->stats, 0, sizeof s->stats);
    s->has_commands = 0;
    s->completed = 0;
    s->mark_count = 0;
    /* no command refers to the scratch buffers any more: keep the largest */
    for (uint32_t i = 0; i + 1 < s->scratch_count; i++)
        vkt_buffer_destroy(s->scratch[i]);
    if (s->scratch_count > 1) {
        s->scratch[0] = s->scratch[s->scratch_count - 1];
        s->scratch_count = 1;
    }
}

vkt_status gpu_stream_scratch(vkt_stream *s, uint64_t bytes, vkt_buffer **out)
{
    *out = NULL;
    if (s->scratch_count && vkt_buffer_size(s->scratch[s->scratch_count - 1]) >= bytes) {
        *out = s->scratch[s->scratch_count - 1];
        return VKT_OK;
    }
    if (s->scratch_count == s->scratch_cap) {
        uint32_t cap = s->scratch_cap ? 2 * s->scratch_cap : 4;
        vkt_buffer **grown = realloc(s->scratch, cap * sizeof *grown);
        if (!grown)
            return err_fail(s->ctx->errmsg, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
        s->scratch = grown;
        s->scratch_cap = cap;
    }
    const uint64_t mib = 1ull << 20; /* whole MiB: a few sizes, not one per GEMM */
    vkt_status st = vkt_buffer_create(s->ctx, (bytes + mib - 1) / mib * mib, VKT_MEMORY_DEVICE,
                                      out);
    if (st == VKT_OK)
        s->scratch[s->scratch_count++] = *out;
    return st;
}

/* The submission that carried other streams' command buffers is over: they are free. */
static void release_carried(vkt_stream *s)
{
    for (uint32_t i = 0; i < s->n_carried; i++)
        s->carried[i]->carrier = NULL;
    s->n_carried = 0;
}

void vkt_stream_destroy(vkt_stream *s)
{
    if (!s)
        return;
    vkt_context *ctx = s->ctx;
    if (s->carrier) /* its command buffer is in another stream's submission */
        vkt_stream_wait(s->carrier);
    if (s->submitted) {
        vkWaitForFences(ctx->device, 1, &s->fence, VK_TRUE, UINT64_MAX);
        s->submitted = 0;
        count_done(ctx, 0);
    }
    release_carried(s);
    if (ctx->transfer == s)
        ctx->transfer = NULL;
    unlink_stream(ctx, s);
    release_recording(s);
    for (uint32_t i = 0; i < s->scratch_count; i++)
        vkt_buffer_destroy(s->scratch[i]);
    free(s->scratch);
    free(s->views);
    free(s->pools);
    free(s->pending_reads.items);
    free(s->pending_writes.items);
    free(s->query_names);
    gpu_stream_marks_destroy(s);
    if (s->queries)
        vkDestroyQueryPool(ctx->device, s->queries, NULL);
    if (s->fence)
        vkDestroyFence(ctx->device, s->fence, NULL);
    if (s->cmd)
        vkFreeCommandBuffers(ctx->device, ctx->cmd_pool, 1, &s->cmd);
    free(s);
}

vkt_status gpu_stream_begin(vkt_stream *s)
{
    vkt_context *ctx = s->ctx;
    if (s->recording)
        return VKT_OK;
    if (s->has_commands)
        return err_fail(ctx->errmsg, VKT_ERROR_STATE,
                        "the stream was already submitted: call vkt_stream_reset before "
                        "recording new commands");
    VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    GPU_CHECK(ctx, vkBeginCommandBuffer(s->cmd, &bi));
    if (s->queries)
        vkCmdResetQueryPool(s->cmd, s->queries, 0, s->query_cap);
    s->recording = 1;
    return VKT_OK;
}

static int overlaps(const gpu_range *a, const gpu_range *b)
{
    return a->buffer == b->buffer && a->begin < b->end && b->begin < a->end;
}

static int conflicts(const gpu_range_list *l, const gpu_range *r)
{
    for (uint32_t i = 0; i < l->count; i++)
        if (overlaps(&l->items[i], r))
            return 1;
    return 0;
}

static int list_add(gpu_range_list *l, const gpu_range *r)
{
    /* Merge with an identical or adjacent range of the same buffer to keep lists short. */
    for (uint32_t i = 0; i < l->count; i++) {
        gpu_range *x = &l->items[i];
        if (x->buffer == r->buffer && r->begin <= x->end && x->begin <= r->end) {
            if (r->begin < x->begin)
                x->begin = r->begin;
            if (r->end > x->end)
                x->end = r->end;
            return 1;
        }
    }
    if (l->count == l->cap) {
        uint32_t cap = l->cap ? 2 * l->cap : 16;
        gpu_range *g = realloc(l->items, cap * sizeof *g);
        if (!g)
            return 0;
        l->items = g;
        l->cap = cap;
    }
    l->items[l->count++] = *r;
    return 1;
}

/* A barrier making every write since the last barrier available and visible to later
 * compute and transfer commands (one buffer memory barrier per written range), and
 * ordering them after every earlier read (execution dependency). */
static vkt_status record_barrier(vkt_stream *s)
{
    uint32_t n = s->pending_writes.count;
    VkBufferMemoryBarrier stack[16], *bb = n <= 16 ? stack : malloc(n * sizeof *bb);
    if (!bb)
        return err_fail(s->ctx->errmsg, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    for (uint32_t i = 0; i < n; i++) {
        const gpu_range *r = &s->pending_writes.items[i];
        bb[i] = (VkBufferMemoryBarrier){.sType = VK_STRUCTURE_TYPE_BUFFER_MEMORY_BARRIER,
                                        .srcAccessMask = ALL_WRITES,
                                        .dstAccessMask = ALL_ACCESS,
                                        .srcQueueFamilyIndex = VK_QUEUE_FAMILY_IGNORED,
                                        .dstQueueFamilyIndex = VK_QUEUE_FAMILY_IGNORED,
                                        .buffer = r->buffer,
                                        .offset = r->begin,
                                        .size = r->end - r->begin};
    }
    vkCmdPipelineBarrier(s->cmd, ALL_STAGES, ALL_STAGES, 0, 0, NULL, n, n ? bb : NULL, 0, NULL);
    if (bb != stack)
        free(bb);
    s->stats.barriers++;
    s->pending_reads.count = s->pending_writes.count = 0;
    return VKT_OK;
}

vkt_status gpu_stream_access(vkt_stream *s, const gpu_range *ranges, const int *writes,
                             uint32_t n)
{
    return gpu_stream_access_reach(s, ranges, writes, ranges, writes, n);
}

vkt_status gpu_stream_access_reach(vkt_stream *s, const gpu_range *declared,
                                   const int *declared_writes, const gpu_range *ranges,
                                   const int *writes, uint32_t n)
{
    if (s->observe)
        s->observe(s->observe_user, declared, declared_writes, n);
    int hazard = 0;
    for (uint32_t i = 0; i < n && !hazard; i++)
        hazard = conflicts(&s->pending_writes, &ranges[i]) ||
                 (writes[i] && conflicts(&s->pending_reads, &ranges[i]));
    if (hazard) {
        vkt_status st = record_barrier(s);
        if (st != VKT_OK)
            return st;
    }
    for (uint32_t i = 0; i < n; i++)
        if (!list_add(writes[i] ? &s->pending_writes : &s->pending_reads, &ranges[i]))
            return err_fail(s->ctx->errmsg, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    return VKT_OK;
}

vkt_status vkt_stream_copy(vkt_stream *s, vkt_buffer *src, uint64_t src_offset, vkt_buffer *dst,
                           uint64_t dst_offset, uint64_t bytes)
{
    if (!s)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "vkt_stream_copy: stream is NULL");
    vkt_context *ctx = s->ctx;
    if (!src || !dst)
        return err_fail(ctx->errmsg, VKT_ERROR_INVALID_ARGUMENT, "vkt_stream_copy: NULL buffer");
    if (bytes == 0)
        return VKT_OK;
    if (src_offset > src->size || bytes > src->size - src_offset || dst_offset > dst->size ||
        bytes > dst->size - dst_offset)
        return err_fail(ctx->errmsg, VKT_ERROR_INVALID_ARGUMENT,
                        "vkt_stream_copy: %llu bytes from offset %llu of a %llu-byte buffer to "
                        "offset %llu of a %llu-byte buffer do not fit",
                        (unsigned long long)bytes, (unsigned long long)src_offset,
                        (unsigned long long)src->size, (unsigned long long)dst_offset,
                        (unsigned long long)dst->size);
    if (src == dst && src_offset < dst_offset + bytes && dst_offset < src_offset + bytes)
        return err_fail(ctx->errmsg, VKT_ERROR_INVALID_ARGUMENT,
                        "vkt_stream_copy: source and destination ranges overlap");
    vkt_status st = gpu_stream_begin(s);
    if (st != VKT_OK)
        return st;
    gpu_range r[2] = {{src->buffer, src_offset, src_offset + bytes},
                      {dst->buffer, dst_offset, dst_offset + bytes}};
    int w[2] = {0, 1};
    st = gpu_stream_access(s, r, w, 2);
    if (st != VKT_OK)
        return st;
    VkBufferCopy region = {src_offset, dst_offset, bytes};
    vkCmdCopyBuffer(s->cmd, src->buffer, dst->buffer, 1, &region);
    s->stats.copies++;
    s->has_commands = 1;
    return VKT_OK;
}

vkt_status gpu_stream_fill_zero(vkt_stream *s, vkt_buffer *b, uint64_t offset, uint64_t bytes)
{
    vkt_context *ctx = s->ctx;
    if (bytes == 0)
        return VKT_OK;
    if (offset % 4 || bytes % 4 || offset > b->size || bytes > b->size - offset)
        return err_fail(ctx->errmsg, VKT_ERROR_INVALID_ARGUMENT, "gpu_stream_fill_zero: %llu "
                        "bytes at offset %llu of a %llu-byte buffer (4-byte units)",
                        (unsigned long long)bytes, (unsigned long long)offset,
                        (unsigned long long)b->size);
    vkt_status st = gpu_stream_begin(s);
    if (st != VKT_OK)
        return st;
    gpu_range r = {b->buffer, offset, offset + bytes};
    int w = 1;
    st = gpu_stream_access(s, &r, &w, 1);
    if (st != VKT_OK)
        return st;
    vkCmdFillBuffer(s->cmd, b->buffer, offset, bytes, 0);
    s->has_commands = 1;
    return VKT_OK;
}

/* Last command of every recording: device writes made visible to the host, which
 * reads results through mapped memory after the fence. */
static vkt_status end_recording(vkt_stream *s)
{
    vkt_context *ctx = s->ctx;
    VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                          .srcAccessMask = ALL_WRITES,
                          .dstAccessMask = VK_ACCESS_HOST_READ_BIT};
    vkCmdPipelineBarrier(s->cmd, ALL_STAGES, VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, NULL, 0,
                         NULL);
    GPU_CHECK(ctx, vkEndCommandBuffer(s->cmd));
    s->recording = 0;
    s->has_commands = 1;
    return VKT_OK;
}

vkt_status vkt_stream_wait(vkt_stream *s)
{
    if (!s)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "vkt_stream_wait: stream is NULL");
    if (s->carrier) /* its command buffer went in another stream's submission */
        return vkt_stream_wait(s->carrier);
    if (!s->submitted)
        return VKT_OK;
    vkt_context *ctx = s->ctx;
    VkResult r = vkWaitForFences(ctx->device, 1, &s->fence, VK_TRUE, UINT64_MAX);
    s->submitted = 0; /* whatever the outcome, the submission is over */
    release_carried(s);
    count_done(ctx, 1);
    if (r == VK_SUCCESS)
        r = gpu_fault("vkWaitForFences");
    if (r != VK_SUCCESS)
        return err_fail(ctx->errmsg, gpu_status_of(r), "vkWaitForFences failed: %s",
                        gpu_result_name(r));
    s->completed = 1;
    return VKT_OK;
}

/* A stream's recording ended and the stream free to go into a submission: 1, or 0 when
 * it has nothing recorded. */
static int ready_to_submit(vkt_stream *s, vkt_status *st)
{
    *st = vkt_stream_wait(s); /* a replay waits for the previous run */
    if (*st != VKT_OK || (!s->recording && !s->has_commands))
        return 0;
    if (s->recording && (*st = end_recording(s)) != VKT_OK)
        return 0;
    return 1;
}

/* The streams of a submission that have commands, in order, into cmd/carried (k so
 * far); 0 on an error (st). */
static int gather(vkt_stream *s, vkt_stream *const *list, uint32_t n, VkCommandBuffer *cmd,
                  vkt_stream **carried, uint32_t *k, vkt_status *st)
{
    for (uint32_t i = 0; i < n; i++) {
        if (!list[i] || list[i] == s || list[i]->ctx != s->ctx)
            continue;
        if (ready_to_submit(list[i], st))
            carried[*k] = list[i], cmd[(*k)++] = list[i]->cmd;
        else if (*st != VKT_OK)
            return 0;
    }
    return 1;
}

vkt_status gpu_stream_submit_after(vkt_stream *s, vkt_stream *const *before, uint32_t n)
{
    return gpu_stream_submit_ext(s, before, n, NULL, 0, NULL);
}

vkt_status gpu_stream_submit_ext(vkt_stream *s, vkt_stream *const *before, uint32_t n,
                                 vkt_stream *const *after, uint32_t n_after,
                                 const gpu_submit_sync *sync)
{
    if (!s)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "vkt_stream_submit: stream is NULL");
    vkt_context *ctx = s->ctx;
    if (n + n_after > GPU_MAX_CARRIED)
        return err_fail(ctx->errmsg, VKT_ERROR_INTERNAL, "gpu_stream_submit_ext: %u streams "
                        "carried (at most %d)", n + n_after, GPU_MAX_CARRIED);
    if (sync && (sync->n_wait > GPU_MAX_SYNC || sync->n_signal > GPU_MAX_SYNC || !ctx->timeline))
        return err_fail(ctx->errmsg, VKT_ERROR_INTERNAL, "gpu_stream_submit_ext: %u waits and "
                        "%u signals (at most %d each, and timelines enabled: %d)", sync->n_wait,
                        sync->n_signal, GPU_MAX_SYNC, ctx->timeline);
    VkCommandBuffer cmd[GPU_MAX_CARRIED]; /* gather's scratch; `order` is submitted */
    vkt_stream *carried[GPU_MAX_CARRIED];
    uint32_t k = 0, k_before;
    vkt_status st = VKT_OK;
    if (!gather(s, before, n, cmd, carried, &k, &st))
        return st;
    k_before = k;
    int own = ready_to_submit(s, &st);
    if (st != VKT_OK)
        return st;
    VkCommandBuffer own_cmd = s->cmd;
    if (!gather(s, after, n_after, cmd, carried, &k, &st))
        return st;
    /* order: before[0..k_before), s (when it has commands), after[..] */
    VkCommandBuffer order[GPU_MAX_CARRIED + 1];
    uint32_t m = 0;
    for (uint32_t i = 0; i < k_before; i++)
        order[m++] = carried[i]->cmd;
    if (own)
        order[m++] = own_cmd;
    for (uint32_t i = k_before; i < k; i++)
        order[m++] = carried[i]->cmd;
    if (!own && !sync) { /* nothing of s's: the carried ones alone, as before */
        for (uint32_t i = 0; st == VKT_OK && i < k; i++)
            st = vkt_stream_run(carried[i]);
        return st;
    }
    if (!own) /* s is the fence's owner: an empty recording carries it */
        return err_fail(ctx->errmsg, VKT_ERROR_INTERNAL, "gpu_stream_submit_ext: an ordered "
                        "submission whose stream recorded nothing");
    if ((st = gpu_stream_marks_reset(s)) != VKT_OK)
        return st;
    GPU_CHECK(ctx, vkResetFences(ctx->device, 1, &s->fence));
    VkSemaphore wsem[GPU_MAX_SYNC], ssem[GPU_MAX_SYNC];
    uint64_t wval[GPU_MAX_SYNC], sval[GPU_MAX_SYNC];
    VkPipelineStageFlags wstage[GPU_MAX_SYNC];
    uint32_t nw = sync ? sync->n_wait : 0, ns = sync ? sync->n_signal : 0;
    for (uint32_t i = 0; i < nw; i++) {
        wsem[i] = sync->wait[i].t->sem;
        wval[i] = sync->wait[i].value;
        wstage[i] = VK_PIPELINE_STAGE_ALL_COMMANDS_BIT;
    }
    for (uint32_t i = 0; i < ns; i++) {
        ssem[i] = sync->signal[i].t->sem;
        sval[i] = sync->signal[i].value;
    }
    VkTimelineSemaphoreSubmitInfo ti = {.sType = VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO,
                                        .waitSemaphoreValueCount = nw,
                                        .pWaitSemaphoreValues = wval,
                                        .signalSemaphoreValueCount = ns,
                                        .pSignalSemaphoreValues = sval};
    VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO,
                       .pNext = sync ? &ti : NULL,
                       .waitSemaphoreCount = nw,
                       .pWaitSemaphores = wsem,
                       .pWaitDstStageMask = wstage,
                       .commandBufferCount = m,
                       .pCommandBuffers = order,
                       .signalSemaphoreCount = ns,
                       .pSignalSemaphores = ssem};
    VkResult r = gpu_fault("vkQueueSubmit");
    if (r == VK_SUCCESS) { /* the queue may be shared with other contexts (gpu_device) */
        plat_monitor_lock(ctx->queue_lock);
        r = vkQueueSubmit(ctx->queue, 1, &si, s->fence);
        plat_monitor_unlock(ctx->queue_lock);
    }
    if (r != VK_SUCCESS)
        return err_fail(ctx->errmsg, gpu_status_of(r), "vkQueueSubmit failed: %s",
                        gpu_result_name(r));
    s->submitted = 1;
    for (uint32_t i = 0; i < k; i++) {
        carried[i]->carrier = s;
        carried[i]->completed = 0;
        s->carried[s->n_carried++] = carried[i];
    }
    count_submit(ctx);
    return VKT_OK;
}

vkt_status vkt_stream_submit(vkt_stream *s) { return gpu_stream_submit_after(s, NULL, 0); }

vkt_status gpu_stream_barrier_all(vkt_stream *s)
{
    vkt_status st = gpu_stream_begin(s);
    if (st != VKT_OK)
        return st;
    VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                          .srcAccessMask = ALL_WRITES,
                          .dstAccessMask = ALL_ACCESS};
    vkCmdPipelineBarrier(s->cmd, ALL_STAGES, ALL_STAGES, 0, 1, &mb, 0, NULL, 0, NULL);
    s->stats.barriers++;
    s->pending_reads.count = s->pending_writes.count = 0;
    s->has_commands = 1;
    return VKT_OK;
}

vkt_status vkt_stream_run(vkt_stream *s)
{
    vkt_status st = vkt_stream_submit(s);
    return st == VKT_OK ? vkt_stream_wait(s) : st;
}

vkt_status vkt_stream_reset(vkt_stream *s)
{
    if (!s)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "vkt_stream_reset: stream is NULL");
    vkt_status st = vkt_stream_wait(s);
    if (st != VKT_OK)
        return st;
    if (s->recording) {
        vkEndCommandBuffer(s->cmd);
        s->recording = 0;
    }
    GPU_CHECK(s->ctx, vkResetCommandBuffer(s->cmd, 0));
    release_recording(s);
    return VKT_OK;
}

vkt_status vkt_stream_stats_get(const vkt_stream *s, vkt_stream_stats *out)
{
    if (!s || !out)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "vkt_stream_stats_get: NULL");
    *out = s->stats;
    return VKT_OK;
}

vkt_status vkt_stream_timings(vkt_stream *s, vkt_timing *out, uint32_t capacity,
                              uint32_t *out_count)
{
    if (out_count)
        *out_count = 0;
    if (!s || !out_count || (!out && capacity))
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "vkt_stream_timings: NULL argument");
    vkt_context *ctx = s->ctx;
    if (!s->queries)
        return err_fail(ctx->errmsg, VKT_ERROR_STATE,
                        "vkt_stream_timings: the stream was created without timestamps");
    if (s->submitted || !s->completed)
        return err_fail(ctx->errmsg, VKT_ERROR_STATE,
                        "vkt_stream_timings: run the stream (and wait) first");
    uint32_t n = s->query_count / 2;
    if (n > capacity)
        n = capacity;
    if (n == 0)
        return VKT_OK;
    uint64_t *ticks = malloc(2 * n * sizeof *ticks);
    if (!ticks)
        return err_fail(ctx->errmsg, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    VkResult r = vkGetQueryPoolResults(ctx->device, s->queries, 0, 2 * n, 2 * n * sizeof *ticks,
                                       ticks, sizeof *ticks,
                                       VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT);
    if (r != VK_SUCCESS) {
        free(ticks);
        return err_fail(ctx->errmsg, gpu_status_of(r), "vkGetQueryPoolResults failed: %s",
                        gpu_result_name(r));
    }
    double ns = ctx->props.limits.timestampPeriod;
    for (uint32_t i = 0; i < n; i++)
        out[i] = (vkt_timing){s->query_names[i], (double)(ticks[2 * i + 1] - ticks[2 * i]) * ns
                                                     * 1e-3};
    free(ticks);
    *out_count = n;
    return VKT_OK;
}
