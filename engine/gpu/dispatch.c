/* Recording a compute dispatch: descriptor set, binding alignment and limits, automatic
 * barriers, optional timestamps. */
#include "gpu.h"

#include <stdlib.h>
#include <string.h>

#define SETS_PER_POOL 256

VkDescriptorType gpu_descriptor_type(gpu_bind_type type)
{
    switch (type) {
    case GPU_BIND_STORAGE: return VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    case GPU_BIND_TEXEL_R:
    case GPU_BIND_TEXEL_RGBA: return VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER;
    default: return VK_DESCRIPTOR_TYPE_STORAGE_TEXEL_BUFFER;
    }
}

static VkDeviceSize binding_alignment(const vkt_context *ctx, gpu_bind_type type)
{
    VkDeviceSize a = type == GPU_BIND_STORAGE ? ctx->props.limits.minStorageBufferOffsetAlignment
                                              : ctx->props.limits.minTexelBufferOffsetAlignment;
    return a ? a : 1;
}

uint32_t gpu_arg_shift(const vkt_context *ctx, uint64_t offset_bytes, gpu_bind_type type)
{
    VkDeviceSize a = binding_alignment(ctx, type);
    return (uint32_t)((offset_bytes % a) / 4);
}

uint32_t gpu_arg_shift_bytes(const vkt_context *ctx, uint64_t offset_bytes, gpu_bind_type type)
{
    return (uint32_t)(offset_bytes % binding_alignment(ctx, type));
}

vkt_status gpu_check_view(vkt_context *ctx, const char *what, vkt_view v, uint64_t count)
{
    if (!v.buffer)
        return err_fail(ctx->errmsg, VKT_ERROR_INVALID_ARGUMENT, "%s: buffer is NULL", what);
    if (v.buffer->ctx->device != ctx->device) /* contexts sharing a VkDevice share buffers */
        return err_fail(ctx->errmsg, VKT_ERROR_INVALID_ARGUMENT,
                        "%s: the buffer belongs to another context's device", what);
    uint64_t elems = v.buffer->size / 4;
    if (v.offset > elems || count > elems - v.offset)
        return err_fail(ctx->errmsg, VKT_ERROR_INVALID_ARGUMENT,
                        "%s: elements [%llu, %llu) lie outside its buffer of %llu elements", what,
                        (unsigned long long)v.offset, (unsigned long long)(v.offset + count),
                        (unsigned long long)elems);
    return VKT_OK;
}

static vkt_status new_pool(vkt_stream *s)
{
    vkt_context *ctx = s->ctx;
    if (s->pool_count == s->pool_cap) {
        uint32_t cap = s->pool_cap ? 2 * s->pool_cap : 4;
        VkDescriptorPool *p = realloc(s->pools, cap * sizeof *p);
        if (!p)
            return err_fail(ctx->errmsg, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
        s->pools = p;
        s->pool_cap = cap;
    }
    VkDescriptorPoolSize sizes[3] = {
        {VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, SETS_PER_POOL * GPU_MAX_BINDINGS},
        {VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER, SETS_PER_POOL * GPU_MAX_BINDINGS},
        {VK_DESCRIPTOR_TYPE_STORAGE_TEXEL_BUFFER, SETS_PER_POOL * GPU_MAX_BINDINGS}};
    VkDescriptorPoolCreateInfo pi = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO,
                                     .maxSets = SETS_PER_POOL,
                                     .poolSizeCount = 3,
                                     .pPoolSizes = sizes};
    GPU_CHECK(ctx, vkCreateDescriptorPool(ctx->device, &pi, NULL, &s->pools[s->pool_count]));
    s->pool_count++;
    s->sets_in_pool = 0;
    return VKT_OK;
}

static vkt_status alloc_set(vkt_stream *s, VkDescriptorSetLayout layout, VkDescriptorSet *out)
{
    if (s->pool_count == 0 || s->sets_in_pool == SETS_PER_POOL) {
        vkt_status st = new_pool(s);
        if (st != VKT_OK)
            return st;
    }
    VkDescriptorSetAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
                                      .descriptorPool = s->pools[s->pool_count - 1],
                                      .descriptorSetCount = 1,
                                      .pSetLayouts = &layout};
    GPU_CHECK(s->ctx, vkAllocateDescriptorSets(s->ctx->device, &ai, out));
    s->sets_in_pool++;
    return VKT_OK;
}

static vkt_status add_view(vkt_stream *s, const VkBufferViewCreateInfo *vi, VkBufferView *out)
{
    vkt_context *ctx = s->ctx;
    if (s->view_count == s->view_cap) {
        uint32_t cap = s->view_cap ? 2 * s->view_cap : 16;
        VkBufferView *v = realloc(s->views, cap * sizeof *v);
        if (!v)
            return err_fail(ctx->errmsg, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
        s->views = v;
        s->view_cap = cap;
    }
    GPU_CHECK(ctx, vkCreateBufferView(ctx->device, vi, NULL, out));
    s->views[s->view_count++] = *out;
    return VKT_OK;
}

/* Checks one binding against the device's limits; fills its descriptor write and the
 * bytes the descriptor reaches (*reach): from the offset aligned down to the device's
 * binding alignment, and for a texel view to the end rounded up to whole texels. */
static vkt_status bind_arg(vkt_stream *s, const gpu_kernel *k, uint32_t i, const gpu_arg *a,
                           VkDescriptorBufferInfo *bi, VkBufferView *view, gpu_range *reach)
{
    vkt_context *ctx = s->ctx;
    gpu_bind_type type = (gpu_bind_type)k->bind[i];
    if (!a->buf || a->buf->ctx->device != ctx->device)
        return err_fail(ctx->errmsg, VKT_ERROR_INVALID_ARGUMENT,
                        "%s: binding %u has no buffer of this context's device", k->name, i);
    if (a->offset > a->buf->size || a->bytes > a->buf->size - a->offset)
        return err_fail(ctx->errmsg, VKT_ERROR_INVALID_ARGUMENT,
                        "%s: binding %u spans bytes [%llu, %llu) of a %llu-byte buffer", k->name,
                        i, (unsigned long long)a->offset,
                        (unsigned long long)(a->offset + a->bytes),
                        (unsigned long long)a->buf->size);
    VkDeviceSize start = a->offset - a->offset % binding_alignment(ctx, type);
    VkDeviceSize range = a->offset + (a->bytes ? a->bytes : 4) - start;
    if (range > a->buf->size - start)
        range = a->buf->size - start;
    if (type == GPU_BIND_STORAGE) {
        if (range > ctx->props.limits.maxStorageBufferRange)
            return err_fail(ctx->errmsg, VKT_ERROR_LIMIT,
                            "%s: binding %u spans %llu bytes, more than the device's "
                            "maxStorageBufferRange of %u bytes", k->name, i,
                            (unsigned long long)range, ctx->props.limits.maxStorageBufferRange);
        *bi = (VkDescriptorBufferInfo){a->buf->buffer, start, range};
        *reach = (gpu_range){a->buf->buffer, start, start + range};
        return VKT_OK;
    }
    int rgba = type == GPU_BIND_TEXEL_RGBA || type == GPU_BIND_STORAGE_TEXEL_RGBA;
    if (type == GPU_BIND_STORAGE_TEXEL_R || type == GPU_BIND_STORAGE_TEXEL_RGBA)
        VKT_ASSERT(ctx->errmsg, ctx->storage_texel); /* kernels check before choosing it */
    uint32_t texel = rgba ? 16 : 4;
    range = (range + texel - 1) / texel * texel;
    if (range > a->buf->size - start)
        range = (a->buf->size - start) / texel * texel;
    if (range / texel > ctx->props.limits.maxTexelBufferElements)
        return err_fail(ctx->errmsg, VKT_ERROR_LIMIT,
                        "%s: binding %u spans %llu texels, more than the device's "
                        "maxTexelBufferElements of %u", k->name, i,
                        (unsigned long long)(range / texel),
                        ctx->props.limits.maxTexelBufferElements);
    VkBufferViewCreateInfo vi = {.sType = VK_STRUCTURE_TYPE_BUFFER_VIEW_CREATE_INFO,
                                 .buffer = a->buf->buffer,
                                 .format = rgba ? VK_FORMAT_R32G32B32A32_SFLOAT
                                                : VK_FORMAT_R32_SFLOAT,
                                 .offset = start,
                                 .range = range};
    *reach = (gpu_range){a->buf->buffer, start, start + range};
    return add_view(s, &vi, view);
}

static void write_timestamp(vkt_stream *s, const char *name, int after)
{
    if (!s->queries || s->query_count + 2 - after > s->query_cap)
        return;
    if (!after)
        s->query_names[s->query_count / 2] = name;
    vkCmdWriteTimestamp(s->cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, s->queries,
                        s->query_count++);
}

vkt_status gpu_dispatch(vkt_stream *s, const gpu_kernel *k, const uint32_t *spec,
                        uint32_t n_spec, const gpu_arg *args, const void *push,
                        const uint32_t groups[3])
{
    vkt_context *ctx = s->ctx;
    VKT_ASSERT(ctx->errmsg, k->n_bindings <= GPU_MAX_BINDINGS && n_spec <= GPU_MAX_SPEC);
    for (int d = 0; d < 3; d++)
        if (groups[d] == 0 || groups[d] > ctx->props.limits.maxComputeWorkGroupCount[d])
            return err_fail(ctx->errmsg, VKT_ERROR_LIMIT,
                            "%s: %u workgroups in dimension %d (device allows 1..%u)", k->name,
                            groups[d], d, ctx->props.limits.maxComputeWorkGroupCount[d]);
    gpu_pipeline *p;
    vkt_status st = gpu_stream_begin(s);
    if (st == VKT_OK)
        st = gpu_pipeline_get(ctx, k, spec, n_spec, &p);
    if (st != VKT_OK)
        return st;

    VkDescriptorBufferInfo infos[GPU_MAX_BINDINGS];
    VkBufferView views[GPU_MAX_BINDINGS];
    VkWriteDescriptorSet writes[GPU_MAX_BINDINGS];
    gpu_range ranges[GPU_MAX_BINDINGS], reach[GPU_MAX_BINDINGS];
    int wflags[GPU_MAX_BINDINGS], twrite[GPU_MAX_BINDINGS];
    VkDescriptorSet set;
    if ((st = alloc_set(s, p->set_layout, &set)) != VKT_OK)
        return st;
    for (uint32_t i = 0; i < k->n_bindings; i++) {
        if ((st = bind_arg(s, k, i, &args[i], &infos[i], &views[i], &reach[i])) != VKT_OK)
            return st;
        int storage = k->bind[i] == GPU_BIND_STORAGE;
        writes[i] = (VkWriteDescriptorSet){
            .sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
            .dstSet = set,
            .dstBinding = i,
            .descriptorCount = 1,
            .descriptorType = gpu_descriptor_type((gpu_bind_type)k->bind[i]),
            .pBufferInfo = storage ? &infos[i] : NULL,
            .pTexelBufferView = storage ? NULL : &views[i]};
        ranges[i] = (gpu_range){args[i].buf->buffer, args[i].offset,
                                args[i].offset + (args[i].bytes ? args[i].bytes : 4)};
        wflags[i] = args[i].write;
        twrite[i] = args[i].write || (p->writable >> i & 1);
    }
    vkUpdateDescriptorSets(ctx->device, k->n_bindings, writes, 0, NULL);
    /* Barriers follow what each descriptor can reach (its aligned-down start, a texel
     * view's whole texels) and what the shader can write (a binding it does not declare
     * readonly counts as written, whatever the specialization constants select): that is
     * the model of the validation layer's synchronization check, which cannot know which
     * of those bytes a kernel touches. The stream's observer (the memory plan's check)
     * still sees the declared bytes and flags. README, "Tests". */
    if ((st = gpu_stream_access_reach(s, ranges, wflags, reach, twrite, k->n_bindings)) != VKT_OK)
        return st;

    vkCmdBindPipeline(s->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, p->pipeline);
    vkCmdBindDescriptorSets(s->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, p->layout, 0, 1, &set, 0,
                            NULL);
    if (k->push_bytes)
        vkCmdPushConstants(s->cmd, p->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, k->push_bytes,
                           push);
    write_timestamp(s, k->name, 0);
    vkCmdDispatch(s->cmd, groups[0], groups[1], groups[2]);
    write_timestamp(s, k->name, 1);
    s->stats.dispatches++;
    s->has_commands = 1;
    return VKT_OK;
}
