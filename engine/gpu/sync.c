/* sync.c - timeline semaphores (gpu.h): what orders the queues of one VkDevice without
 * the host. Replicas sharing a device (gpu_context_create_shared) signal one each as
 * their step's gradients are complete, and the average waits for all of them
 * (parallel/reduce_device.c). Created only where the device plan enabled them. */
#include "gpu.h"

#include <stdlib.h>

vkt_status gpu_timeline_create(vkt_context *ctx, uint64_t initial, gpu_timeline **out)
{
    *out = NULL;
    if (!ctx->timeline)
        return err_fail(ctx->errmsg, VKT_ERROR_STATE, "device '%s': no timeline "
                        "semaphores (Vulkan 1.2's timelineSemaphore)", ctx->info.name);
    gpu_timeline *t = calloc(1, sizeof *t);
    if (!t)
        return err_fail(ctx->errmsg, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    VkSemaphoreTypeCreateInfo ti = {.sType = VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO,
                                    .semaphoreType = VK_SEMAPHORE_TYPE_TIMELINE,
                                    .initialValue = initial};
    VkSemaphoreCreateInfo si = {.sType = VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO, .pNext = &ti};
    VkResult r = vkCreateSemaphore(ctx->device, &si, NULL, &t->sem);
    if (r != VK_SUCCESS) {
        free(t);
        return err_fail(ctx->errmsg, gpu_status_of(r), "vkCreateSemaphore failed: %s",
                        gpu_result_name(r));
    }
    t->ctx = ctx;
    t->next = ctx->timelines;
    if (ctx->timelines)
        ctx->timelines->prev = t;
    ctx->timelines = t;
    *out = t;
    return VKT_OK;
}

void gpu_timeline_destroy(gpu_timeline *t)
{
    if (!t)
        return;
    vkt_context *ctx = t->ctx;
    if (t->prev)
        t->prev->next = t->next;
    else
        ctx->timelines = t->next;
    if (t->next)
        t->next->prev = t->prev;
    vkDestroySemaphore(ctx->device, t->sem, NULL);
    free(t);
}

vkt_status gpu_timeline_signal(gpu_timeline *t, uint64_t value)
{
    VkSemaphoreSignalInfo si = {.sType = VK_STRUCTURE_TYPE_SEMAPHORE_SIGNAL_INFO,
                                .semaphore = t->sem,
                                .value = value};
    GPU_CHECK(t->ctx, vkSignalSemaphore(t->ctx->device, &si));
    return VKT_OK;
}

uint64_t gpu_timeline_value(gpu_timeline *t)
{
    uint64_t v = 0;
    return vkGetSemaphoreCounterValue(t->ctx->device, t->sem, &v) == VK_SUCCESS ? v : UINT64_MAX;
}
