/* Buffers: one VkBuffer each over a suballocation of a large memory block. Host reads
 * and writes go straight through the mapping when the memory is host-visible and
 * coherent (lavapipe, integrated GPUs), else through a staging buffer and a copy. */
#include "gpu.h"

#include <stdlib.h>
#include <string.h>

#define STAGING_CHUNK (16ull * 1024 * 1024)

static void link_buffer(vkt_context *ctx, vkt_buffer *b)
{
    b->next = ctx->buffers;
    if (ctx->buffers)
        ctx->buffers->prev = b;
    ctx->buffers = b;
}

static void unlink_buffer(vkt_context *ctx, vkt_buffer *b)
{
    if (b->prev)
        b->prev->next = b->next;
    else if (ctx->buffers == b)
        ctx->buffers = b->next;
    if (b->next)
        b->next->prev = b->prev;
    b->prev = b->next = NULL;
}

vkt_status vkt_buffer_create(vkt_context *ctx, uint64_t bytes, vkt_memory_kind kind,
                             vkt_buffer **out)
{
    if (!out)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "vkt_buffer_create: out is NULL");
    *out = NULL;
    if (!ctx)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "vkt_buffer_create: context is NULL");
    if (kind != VKT_MEMORY_DEVICE && kind != VKT_MEMORY_HOST)
        return err_fail(ctx->errmsg, VKT_ERROR_INVALID_ARGUMENT,
                        "vkt_buffer_create: unknown memory kind %d", (int)kind);
    return gpu_buffer_create(ctx, bytes, kind == VKT_MEMORY_HOST ? GPU_USE_HOST : GPU_USE_DEVICE,
                             out);
}

/* Memory for b in the first of the use's types whose heap can take it: a full heap (a
 * device-local host-visible window, say) passes the buffer on to the next type, but never
 * from device-local memory to host memory (a device buffer there would be slow, and would
 * escape the memory limit). */
static vkt_status bind_memory(vkt_context *ctx, vkt_buffer *b, gpu_memory_use use)
{
    VkMemoryRequirements req;
    vkGetBufferMemoryRequirements(ctx->device, b->buffer, &req);
    uint32_t types[GPU_MAX_MEM_TYPES];
    uint32_t n = gpu_memory_types_for(ctx, req.memoryTypeBits, use, types, GPU_MAX_MEM_TYPES);
    if (n == 0)
        return err_fail(ctx->errmsg, VKT_ERROR_NO_DEVICE,
                        "device '%s' has no %s memory type for buffers", ctx->info.name,
                        use == GPU_USE_HOST ? "host-visible coherent" : "usable");
    const VkMemoryPropertyFlags local = VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT;
    VkMemoryPropertyFlags first = ctx->mem.types[types[0]].flags & local;
    vkt_status st = VKT_ERROR_OUT_OF_MEMORY;
    for (uint32_t i = 0; i < n && st == VKT_ERROR_OUT_OF_MEMORY; i++)
        if (i == 0 || (ctx->mem.types[types[i]].flags & local) == first)
            st = gpu_memory_alloc(ctx, &req, types[i], &b->alloc);
    if (st != VKT_OK)
        return st;
    VkResult r = vkBindBufferMemory(ctx->device, b->buffer, b->alloc.block->memory,
                                    b->alloc.offset);
    if (r != VK_SUCCESS)
        return err_fail(ctx->errmsg, gpu_status_of(r), "vkBindBufferMemory failed: %s",
                        gpu_result_name(r));
    return VKT_OK;
}

vkt_status gpu_buffer_create(vkt_context *ctx, uint64_t bytes, gpu_memory_use use,
                             vkt_buffer **out)
{
    *out = NULL;
    if (bytes == 0)
        return err_fail(ctx->errmsg, VKT_ERROR_INVALID_ARGUMENT,
                        "vkt_buffer_create: size is 0 bytes");
    /* Refuse what no heap can hold before asking the driver. */
    uint64_t largest = 0;
    for (uint32_t i = 0; i < ctx->mem_props.memoryHeapCount; i++)
        if (ctx->mem_props.memoryHeaps[i].size > largest)
            largest = ctx->mem_props.memoryHeaps[i].size;
    if (bytes > largest)
        return err_fail(ctx->errmsg, VKT_ERROR_OUT_OF_MEMORY,
                        "cannot create a buffer of %llu bytes: the largest memory heap of '%s' "
                        "holds %llu bytes", (unsigned long long)bytes, ctx->info.name,
                        (unsigned long long)largest);

    vkt_buffer *b = calloc(1, sizeof *b);
    if (!b)
        return err_fail(ctx->errmsg, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    b->ctx = ctx;
    b->size = bytes;
    b->kind = use == GPU_USE_HOST ? VKT_MEMORY_HOST : VKT_MEMORY_DEVICE;
    VkBufferCreateInfo bi = {
        .sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
        .size = bytes,
        .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_UNIFORM_TEXEL_BUFFER_BIT |
                 VK_BUFFER_USAGE_STORAGE_TEXEL_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                 VK_BUFFER_USAGE_TRANSFER_DST_BIT,
        .sharingMode = VK_SHARING_MODE_EXCLUSIVE,
    };
    VkResult r = vkCreateBuffer(ctx->device, &bi, NULL, &b->buffer);
    if (r != VK_SUCCESS) {
        free(b);
        return err_fail(ctx->errmsg, gpu_status_of(r), "vkCreateBuffer of %llu bytes failed: %s",
                        (unsigned long long)bytes, gpu_result_name(r));
    }
    vkt_status st = bind_memory(ctx, b, use);
    if (st != VKT_OK) {
        gpu_memory_free(ctx, &b->alloc);
        vkDestroyBuffer(ctx->device, b->buffer, NULL);
        free(b);
        return st;
    }
    if (b->alloc.block->mapped)
        b->mapped = (char *)b->alloc.block->mapped + b->alloc.offset;
    link_buffer(ctx, b);
    *out = b;
    return VKT_OK;
}

void vkt_buffer_destroy(vkt_buffer *b)
{
    if (!b)
        return;
    vkt_context *ctx = b->ctx;
    if (ctx->staging == b)
        ctx->staging = NULL;
    unlink_buffer(ctx, b);
    vkDestroyBuffer(ctx->device, b->buffer, NULL);
    if (b->imported)
        vkFreeMemory(ctx->device, b->imported, NULL);
    gpu_memory_free(ctx, &b->alloc);
    free(b);
}

uint64_t vkt_buffer_size(const vkt_buffer *b) { return b ? b->size : 0; }

void *vkt_buffer_map(vkt_buffer *b)
{
    return (b && b->kind == VKT_MEMORY_HOST) ? b->mapped : NULL;
}

int gpu_buffer_host_cached(const vkt_buffer *b)
{
    if (b->imported) /* the host's own memory */
        return 1;
    const gpu_mem_type *t = &b->ctx->mem.types[b->alloc.block->type_index];
    return (t->flags & VK_MEMORY_PROPERTY_HOST_CACHED_BIT) != 0;
}

static vkt_status check_range(vkt_buffer *b, uint64_t offset, const void *data, uint64_t bytes,
                              const char *fn)
{
    if (!b)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "%s: buffer is NULL", fn);
    if (!data && bytes)
        return err_fail(b->ctx->errmsg, VKT_ERROR_INVALID_ARGUMENT, "%s: data is NULL", fn);
    if (offset > b->size || bytes > b->size - offset)
        return err_fail(b->ctx->errmsg, VKT_ERROR_INVALID_ARGUMENT,
                        "%s: bytes [%llu, %llu) outside the buffer of %llu bytes", fn,
                        (unsigned long long)offset, (unsigned long long)(offset + bytes),
                        (unsigned long long)b->size);
    return VKT_OK;
}

/* The context's staging buffer and transfer stream, made on first use. */
static vkt_status staging_get(vkt_context *ctx, vkt_buffer **out)
{
    if (!ctx->transfer) {
        vkt_status st = vkt_stream_create(ctx, NULL, &ctx->transfer);
        if (st != VKT_OK)
            return st;
    }
    if (!ctx->staging) {
        vkt_status st = vkt_buffer_create(ctx, STAGING_CHUNK, VKT_MEMORY_HOST, &ctx->staging);
        if (st != VKT_OK)
            return st;
        if (!ctx->staging->mapped)
            return err_fail(ctx->errmsg, VKT_ERROR_VULKAN, "staging memory could not be mapped");
    }
    *out = ctx->staging;
    return VKT_OK;
}

static vkt_status staged_copy(vkt_buffer *b, uint64_t offset, void *host, uint64_t bytes,
                              int to_device)
{
    vkt_context *ctx = b->ctx;
    vkt_buffer *stg = NULL;
    vkt_status st = staging_get(ctx, &stg);
    for (uint64_t done = 0; st == VKT_OK && done < bytes; done += STAGING_CHUNK) {
        uint64_t n = bytes - done < STAGING_CHUNK ? bytes - done : STAGING_CHUNK;
        if (to_device)
            memcpy(stg->mapped, (char *)host + done, n);
        st = vkt_stream_reset(ctx->transfer);
        if (st == VKT_OK)
            st = to_device ? vkt_stream_copy(ctx->transfer, stg, 0, b, offset + done, n)
                           : vkt_stream_copy(ctx->transfer, b, offset + done, stg, 0, n);
        if (st == VKT_OK)
            st = vkt_stream_run(ctx->transfer);
        if (st == VKT_OK)
            gpu_count_transfer(ctx, n);
        if (st == VKT_OK && !to_device)
            memcpy((char *)host + done, stg->mapped, n);
    }
    return st;
}

vkt_status vkt_buffer_write(vkt_buffer *b, uint64_t offset, const void *data, uint64_t bytes)
{
    vkt_status st = check_range(b, offset, data, bytes, "vkt_buffer_write");
    if (st != VKT_OK || bytes == 0)
        return st;
    if (b->mapped && (b->kind == VKT_MEMORY_HOST || !b->ctx->force_staging)) {
        memcpy((char *)b->mapped + offset, data, bytes);
        return VKT_OK;
    }
    return staged_copy(b, offset, (void *)data, bytes, 1);
}

vkt_status vkt_buffer_read(vkt_buffer *b, uint64_t offset, void *data, uint64_t bytes)
{
    vkt_status st = check_range(b, offset, data, bytes, "vkt_buffer_read");
    if (st != VKT_OK || bytes == 0)
        return st;
    if (b->mapped && (b->kind == VKT_MEMORY_HOST || !b->ctx->force_staging)) {
        memcpy(data, (char *)b->mapped + offset, bytes);
        return VKT_OK;
    }
    return staged_copy(b, offset, data, bytes, 0);
}

/* The memory type for an import: one of the pointer's types the buffer can use,
 * host-visible first. */
static int import_type(const vkt_context *ctx, uint32_t bits, uint32_t *out)
{
    for (int pass = 0; pass < 2; pass++)
        for (uint32_t i = 0; i < ctx->mem_props.memoryTypeCount; i++) {
            VkMemoryPropertyFlags f = ctx->mem_props.memoryTypes[i].propertyFlags;
            if ((bits >> i & 1) && (pass || (f & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT))) {
                *out = i;
                return 1;
            }
        }
    return 0;
}

vkt_status gpu_buffer_import_host(vkt_context *ctx, void *ptr, uint64_t bytes, vkt_buffer **out)
{
    *out = NULL;
    uint64_t a = ctx->host_import;
    if (!a)
        return err_fail(ctx->errmsg, VKT_ERROR_STATE, "device '%s' cannot import host memory "
                        "(VK_EXT_external_memory_host)", ctx->info.name);
    if (!ptr || !bytes || (uintptr_t)ptr % a || bytes % a)
        return err_fail(ctx->errmsg, VKT_ERROR_INVALID_ARGUMENT, "gpu_buffer_import_host: %llu "
                        "bytes at %p: both must be non-zero multiples of the device's %llu",
                        (unsigned long long)bytes, ptr, (unsigned long long)a);
    const VkExternalMemoryHandleTypeFlagBits h =
        VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT;
    vkt_buffer *b = calloc(1, sizeof *b);
    if (!b)
        return err_fail(ctx->errmsg, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    b->ctx = ctx;
    b->size = bytes;
    b->kind = VKT_MEMORY_HOST;
    b->mapped = ptr;
    VkExternalMemoryBufferCreateInfo ext = {
        .sType = VK_STRUCTURE_TYPE_EXTERNAL_MEMORY_BUFFER_CREATE_INFO, .handleTypes = h};
    VkBufferCreateInfo bi = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
                             .pNext = &ext,
                             .size = bytes,
                             .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT |
                                      VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                                      VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                             .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
    VkResult r = vkCreateBuffer(ctx->device, &bi, NULL, &b->buffer);
    VkMemoryHostPointerPropertiesEXT hp = {
        .sType = VK_STRUCTURE_TYPE_MEMORY_HOST_POINTER_PROPERTIES_EXT};
    if (r == VK_SUCCESS) /* VKT_FAULT_INJECT: a pointer no memory type imports */
        r = gpu_fault("vkGetMemoryHostPointerPropertiesEXT");
    if (r == VK_SUCCESS)
        r = vkGetMemoryHostPointerPropertiesEXT(ctx->device, h, ptr, &hp);
    VkMemoryRequirements req = {0};
    uint32_t type = 0;
    if (r == VK_SUCCESS) {
        vkGetBufferMemoryRequirements(ctx->device, b->buffer, &req);
        if (!import_type(ctx, hp.memoryTypeBits & req.memoryTypeBits, &type))
            r = VK_ERROR_INVALID_EXTERNAL_HANDLE;
    }
    VkImportMemoryHostPointerInfoEXT imp = {
        .sType = VK_STRUCTURE_TYPE_IMPORT_MEMORY_HOST_POINTER_INFO_EXT,
        .handleType = h, .pHostPointer = ptr};
    VkMemoryAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, .pNext = &imp,
                               .allocationSize = bytes, .memoryTypeIndex = type};
    if (r == VK_SUCCESS)
        r = vkAllocateMemory(ctx->device, &ai, NULL, &b->imported);
    if (r == VK_SUCCESS)
        r = vkBindBufferMemory(ctx->device, b->buffer, b->imported, 0);
    if (r != VK_SUCCESS) {
        if (b->buffer)
            vkDestroyBuffer(ctx->device, b->buffer, NULL);
        if (b->imported)
            vkFreeMemory(ctx->device, b->imported, NULL);
        free(b);
        return err_fail(ctx->errmsg, gpu_status_of(r), "importing %llu bytes of host memory "
                        "into device '%s' failed: %s", (unsigned long long)bytes,
                        ctx->info.name, gpu_result_name(r));
    }
    link_buffer(ctx, b);
    *out = b;
    return VKT_OK;
}
