/* Device memory: a few large vkAllocateMemory blocks per memory type, suballocated
 * first-fit with coalescing of freed ranges, so tensors never cost an allocation each. */
#include "gpu.h"

#include <stdlib.h>
#include <string.h>

#define MIB (1024ull * 1024ull)

static int type_has(const vkt_context *ctx, uint32_t i, VkMemoryPropertyFlags f)
{
    return (ctx->mem_props.memoryTypes[i].propertyFlags & f) == f;
}

uint32_t gpu_memory_type(const vkt_context *ctx, uint32_t type_bits, vkt_memory_kind kind)
{
    /* Preference lists, best first. DEVICE: device-local, then anything. HOST:
     * coherent + cached (fast host reads), then coherent. Lavapipe has one heap that is
     * both device-local and host-visible; discrete GPUs have separate ones. */
    static const VkMemoryPropertyFlags device_pref[] = {VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, 0};
    static const VkMemoryPropertyFlags host_pref[] = {
        VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT |
            VK_MEMORY_PROPERTY_HOST_CACHED_BIT,
        VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT};
    const VkMemoryPropertyFlags *pref = kind == VKT_MEMORY_HOST ? host_pref : device_pref;
    for (int p = 0; p < 2; p++)
        for (uint32_t i = 0; i < ctx->mem_props.memoryTypeCount; i++)
            if ((type_bits & (1u << i)) && type_has(ctx, i, pref[p]))
                return i;
    return UINT32_MAX;
}

static VkDeviceSize align_up(VkDeviceSize v, VkDeviceSize a) { return (v + a - 1) / a * a; }

static int type_is_local(const vkt_context *ctx, uint32_t type)
{
    uint32_t heap = ctx->mem_props.memoryTypes[type].heapIndex;
    return (ctx->mem_props.memoryHeaps[heap].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) != 0;
}

static double mib(uint64_t bytes) { return (double)bytes / (double)MIB; }

/* Device-local bytes still allocatable under the context's memory limit (UINT64_MAX:
 * no limit, or a type outside the device-local heaps, which the limit does not count). */
static uint64_t limit_room(const vkt_context *ctx, uint32_t type)
{
    if (!ctx->mem.limit || !type_is_local(ctx, type))
        return UINT64_MAX;
    return ctx->mem.local_bytes < ctx->mem.limit ? ctx->mem.limit - ctx->mem.local_bytes : 0;
}

static vkt_status block_create(vkt_context *ctx, VkDeviceSize size, uint32_t type,
                               gpu_block **out)
{
    uint32_t heap = ctx->mem_props.memoryTypes[type].heapIndex;
    VkDeviceSize heap_size = ctx->mem_props.memoryHeaps[heap].size;
    if (size > heap_size)
        return err_fail(ctx->errmsg, VKT_ERROR_OUT_OF_MEMORY,
                        "cannot allocate %llu bytes: memory heap %u of '%s' holds only %llu",
                        (unsigned long long)size, heap, ctx->info.name,
                        (unsigned long long)heap_size);
    if (size > ctx->info.max_allocation_size)
        return err_fail(ctx->errmsg, VKT_ERROR_LIMIT,
                        "cannot allocate %llu bytes in one block: maxMemoryAllocationSize of "
                        "'%s' is %llu", (unsigned long long)size, ctx->info.name,
                        (unsigned long long)ctx->info.max_allocation_size);
    gpu_block *b = calloc(1, sizeof *b);
    if (!b)
        return err_fail(ctx->errmsg, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    VkMemoryAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
                               .allocationSize = size, .memoryTypeIndex = type};
    VkResult r = gpu_fault("vkAllocateMemory");
    if (r == VK_SUCCESS)
        r = vkAllocateMemory(ctx->device, &ai, NULL, &b->memory);
    if (r != VK_SUCCESS) {
        free(b);
        return err_fail(ctx->errmsg, gpu_status_of(r),
                        "vkAllocateMemory of %llu bytes failed: %s", (unsigned long long)size,
                        gpu_result_name(r));
    }
    if (type_has(ctx, type, VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT |
                                VK_MEMORY_PROPERTY_HOST_COHERENT_BIT)) {
        r = vkMapMemory(ctx->device, b->memory, 0, VK_WHOLE_SIZE, 0, &b->mapped);
        if (r != VK_SUCCESS)
            b->mapped = NULL; /* usable through staging all the same */
    }
    b->size = size;
    b->type_index = type;
    b->free_cap = 8;
    b->free = malloc(b->free_cap * sizeof *b->free);
    if (!b->free) {
        vkFreeMemory(ctx->device, b->memory, NULL);
        free(b);
        return err_fail(ctx->errmsg, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    }
    b->free[0] = (gpu_free_range){0, size};
    b->free_count = 1;
    b->next = ctx->mem.blocks;
    ctx->mem.blocks = b;
    ctx->mem.device_bytes += size;
    if (type_is_local(ctx, type))
        ctx->mem.local_bytes += size;
    ctx->mem.block_count++;
    *out = b;
    return VKT_OK;
}

static void block_destroy(vkt_context *ctx, gpu_block *b)
{
    for (gpu_block **p = &ctx->mem.blocks; *p; p = &(*p)->next)
        if (*p == b) {
            *p = b->next;
            break;
        }
    if (b->mapped)
        vkUnmapMemory(ctx->device, b->memory);
    vkFreeMemory(ctx->device, b->memory, NULL);
    ctx->mem.device_bytes -= b->size;
    if (type_is_local(ctx, b->type_index))
        ctx->mem.local_bytes -= b->size;
    ctx->mem.block_count--;
    free(b->free);
    free(b);
}

/* First fit: the first free range that holds `size` bytes at `align`. */
static int block_take(gpu_block *b, VkDeviceSize size, VkDeviceSize align, VkDeviceSize *out)
{
    for (uint32_t i = 0; i < b->free_count; i++) {
        gpu_free_range *f = &b->free[i];
        VkDeviceSize start = align_up(f->offset, align);
        if (start + size > f->offset + f->size)
            continue;
        VkDeviceSize head = start - f->offset, tail = f->offset + f->size - (start + size);
        if (head && tail) { /* split into two free ranges */
            if (b->free_count == b->free_cap) {
                gpu_free_range *g = realloc(b->free, 2 * b->free_cap * sizeof *g);
                if (!g)
                    return 0;
                b->free = g;
                b->free_cap *= 2;
                f = &b->free[i];
            }
            memmove(&b->free[i + 2], &b->free[i + 1], (b->free_count - i - 1) * sizeof *f);
            b->free[i + 1] = (gpu_free_range){start + size, tail};
            f->size = head;
            b->free_count++;
        } else if (head) {
            f->size = head;
        } else if (tail) {
            f->offset = start + size;
            f->size = tail;
        } else {
            memmove(f, f + 1, (b->free_count - i - 1) * sizeof *f);
            b->free_count--;
        }
        *out = start;
        return 1;
    }
    return 0;
}

/* Returns [offset, offset+size) to the free list, merging with its neighbours. */
static int block_give(gpu_block *b, VkDeviceSize offset, VkDeviceSize size)
{
    uint32_t i = 0;
    while (i < b->free_count && b->free[i].offset < offset)
        i++;
    int merge_prev = i > 0 && b->free[i - 1].offset + b->free[i - 1].size == offset;
    int merge_next = i < b->free_count && offset + size == b->free[i].offset;
    if (merge_prev && merge_next) {
        b->free[i - 1].size += size + b->free[i].size;
        memmove(&b->free[i], &b->free[i + 1], (b->free_count - i - 1) * sizeof *b->free);
        b->free_count--;
    } else if (merge_prev) {
        b->free[i - 1].size += size;
    } else if (merge_next) {
        b->free[i].offset = offset;
        b->free[i].size += size;
    } else {
        if (b->free_count == b->free_cap) {
            gpu_free_range *g = realloc(b->free, 2 * b->free_cap * sizeof *g);
            if (!g)
                return 0; /* the range leaks until the block goes; never corrupts */
            b->free = g;
            b->free_cap *= 2;
        }
        memmove(&b->free[i + 1], &b->free[i], (b->free_count - i) * sizeof *b->free);
        b->free[i] = (gpu_free_range){offset, size};
        b->free_count++;
    }
    return 1;
}

vkt_status gpu_memory_alloc(vkt_context *ctx, const VkMemoryRequirements *req,
                            uint32_t type_index, gpu_alloc *out)
{
    memset(out, 0, sizeof *out);
    VkDeviceSize align = req->alignment ? req->alignment : 1;
    /* Keep distinct suballocations on separate nonCoherentAtomSize / granularity lines. */
    VkDeviceSize gran = ctx->props.limits.bufferImageGranularity;
    if (gran > align)
        align = gran;
    VkDeviceSize size = align_up(req->size, align);
    gpu_block *b = NULL;
    VkDeviceSize offset = 0;
    for (gpu_block *c = ctx->mem.blocks; c && !b; c = c->next)
        if (c->type_index == type_index && block_take(c, size, align, &offset))
            b = c;
    if (!b) {
        /* Large requests get a block of their own; small ones share block_size blocks. */
        VkDeviceSize bsize = size > ctx->mem.block_size / 2 ? size : ctx->mem.block_size;
        /* Under a memory limit the last block is cut to what is left, as on a device of
         * exactly that size; a request past it fails naming the limit. */
        uint64_t room = limit_room(ctx, type_index);
        if (size > room)
            return err_fail(ctx->errmsg, VKT_ERROR_OUT_OF_MEMORY,
                            "out of device memory on '%s': %.1f MiB asked for, %.1f MiB of "
                            "its %.1f MiB limit (memory_limit, VKT_DEVICE_MEMORY_LIMIT) "
                            "already allocated", ctx->info.name, mib(size),
                            mib(ctx->mem.local_bytes), mib(ctx->mem.limit));
        if (bsize > room)
            bsize = room;
        vkt_status st = block_create(ctx, bsize, type_index, &b);
        if (st != VKT_OK)
            return st;
        if (!block_take(b, size, align, &offset)) {
            block_destroy(ctx, b);
            return err_fail(ctx->errmsg, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
        }
    }
    b->used += size;
    b->live++;
    ctx->mem.bytes_in_use += size;
    ctx->mem.alloc_count++;
    *out = (gpu_alloc){b, offset, size};
    return VKT_OK;
}

void gpu_memory_free(vkt_context *ctx, gpu_alloc *a)
{
    gpu_block *b = a->block;
    if (!b)
        return;
    block_give(b, a->offset, a->size);
    b->used -= a->size;
    b->live--;
    ctx->mem.bytes_in_use -= a->size;
    ctx->mem.alloc_count--;
    if (b->live == 0)
        block_destroy(ctx, b); /* give empty blocks back to the driver at once */
    memset(a, 0, sizeof *a);
}

void gpu_memory_destroy(vkt_context *ctx)
{
    while (ctx->mem.blocks)
        block_destroy(ctx, ctx->mem.blocks);
}

vkt_status vkt_context_memory_stats(const vkt_context *ctx, vkt_memory_stats *out)
{
    if (!ctx || !out)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "vkt_context_memory_stats: NULL");
    out->device_bytes_allocated = ctx->mem.device_bytes;
    out->bytes_in_use = ctx->mem.bytes_in_use;
    out->block_count = ctx->mem.block_count;
    out->allocation_count = ctx->mem.alloc_count;
    out->pipeline_count = ctx->pipeline_count;
    out->device_local_bytes = ctx->mem.local_bytes;
    out->memory_limit = ctx->mem.limit;
    return VKT_OK;
}

VkDeviceSize gpu_default_block_size(const vkt_context *ctx)
{
    VkDeviceSize s = 64 * MIB;
    if (s > ctx->info.max_allocation_size)
        s = ctx->info.max_allocation_size;
    return s;
}
