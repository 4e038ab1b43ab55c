/* Marks: points of a recorded stream that the host sees the device pass while the rest
 * of the submission still runs (gpu.h). A mark is a memory barrier from every earlier
 * compute and transfer write to host reads, then vkCmdSetEvent; the host polls the event
 * (vkGetEventStatus), and the fence once the event is not set, so a lost device or a
 * finished submission never leaves it waiting. Events are created as marks are first
 * recorded and kept across recordings; the host resets them before each submission.
 * On a device without events (a portability-subset device, MoltenVK, may lack them:
 * ctx->events), a mark is the barrier alone and counts as passed when the fence is
 * signalled: the results are the same, only the overlap is lost. */
#include "gpu.h"

#include <stdlib.h>

#define MARK_STAGES (VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT)

vkt_status gpu_stream_mark(vkt_stream *s, uint32_t *out_index)
{
    vkt_context *ctx = s->ctx;
    vkt_status st = gpu_stream_begin(s);
    if (st != VKT_OK)
        return st;
    if (ctx->events && s->mark_count == s->mark_cap) {
        uint32_t cap = s->mark_cap ? 2 * s->mark_cap : 8;
        VkEvent *e = realloc(s->marks, cap * sizeof *e);
        if (!e)
            return err_fail(ctx->errmsg, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
        s->marks = e;
        for (; s->mark_cap < cap; s->mark_cap++) {
            VkEventCreateInfo ei = {.sType = VK_STRUCTURE_TYPE_EVENT_CREATE_INFO};
            VkResult r = vkCreateEvent(ctx->device, &ei, NULL, &s->marks[s->mark_cap]);
            if (r != VK_SUCCESS)
                return err_fail(ctx->errmsg, gpu_status_of(r), "vkCreateEvent failed: %s",
                                gpu_result_name(r));
        }
    }
    /* the host reads what earlier commands wrote (staging copies) once it sees the mark */
    VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                          .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT |
                                           VK_ACCESS_TRANSFER_WRITE_BIT,
                          .dstAccessMask = VK_ACCESS_HOST_READ_BIT};
    vkCmdPipelineBarrier(s->cmd, MARK_STAGES, VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, NULL,
                         0, NULL);
    if (ctx->events)
        vkCmdSetEvent(s->cmd, s->marks[s->mark_count], MARK_STAGES);
    s->stats.barriers++;
    s->has_commands = 1;
    *out_index = s->mark_count++;
    return VKT_OK;
}

int gpu_stream_mark_passed(vkt_stream *s, uint32_t index)
{
    vkt_context *ctx = s->ctx;
    if (!s->submitted)
        return 1;
    if (ctx->events && index < s->mark_count) {
        VkResult r = vkGetEventStatus(ctx->device, s->marks[index]);
        if (r == VK_EVENT_SET)
            return 1;
        if (r != VK_EVENT_RESET) {
            err_fail(ctx->errmsg, gpu_status_of(r), "vkGetEventStatus failed: %s",
                     gpu_result_name(r));
            return -1;
        }
    }
    VkResult r = vkGetFenceStatus(ctx->device, s->fence);
    if (r == VK_SUCCESS)
        return 1;
    if (r == VK_NOT_READY)
        return 0;
    err_fail(ctx->errmsg, gpu_status_of(r), "vkGetFenceStatus failed: %s", gpu_result_name(r));
    return -1;
}

vkt_status gpu_stream_marks_reset(vkt_stream *s)
{
    for (uint32_t i = 0; s->ctx->events && i < s->mark_count; i++)
        GPU_CHECK(s->ctx, vkResetEvent(s->ctx->device, s->marks[i]));
    return VKT_OK;
}

void gpu_stream_marks_destroy(vkt_stream *s)
{
    for (uint32_t i = 0; i < s->mark_cap; i++)
        if (s->marks[i])
            vkDestroyEvent(s->ctx->device, s->marks[i], NULL);
    free(s->marks);
    s->marks = NULL;
    s->mark_count = s->mark_cap = 0;
}
