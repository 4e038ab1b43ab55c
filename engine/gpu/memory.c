/* Device memory: a few large vkAllocateMemory blocks per memory type, suballocated
 * first-fit with coalescing of freed ranges, so tensors never cost an allocation each.
 * Which types a buffer may take: the memory profile's list of types and each use's
 * preferences, two tables below (docs/memory.md). */
#include "gpu.h"

#include <stdlib.h>
#include <string.h>

#define MIB (1024ull * 1024ull)

#define DL VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT
#define HV VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT
#define HC VK_MEMORY_PROPERTY_HOST_COHERENT_BIT
#define CACHED VK_MEMORY_PROPERTY_HOST_CACHED_BIT
#define HOST_BITS (HV | HC | CACHED)

/* The profiles (vkt.h), one row each: whether host access to device buffers always goes
 * through staging copies, what becomes of device-local host-visible memory types (KEEP
 * them, HIDE their host side, NEED one), and whether host buffers get memory apart from
 * the device's on unified memory (as a discrete GPU has it: not counted as device-local). */
static const gpu_memory_profile_row profiles[] = {
    {VKT_MEMORY_PROFILE_AUTO, "auto", 0, GPU_DH_KEEP, 0},
    {VKT_MEMORY_PROFILE_STAGING, "staging", 1, GPU_DH_KEEP, 1},
    {VKT_MEMORY_PROFILE_UNMAPPED, "unmapped", 0, GPU_DH_HIDE, 1},
    {VKT_MEMORY_PROFILE_REBAR, "rebar", 0, GPU_DH_NEED, 1},
};
#define N_PROFILES (sizeof profiles / sizeof *profiles)

const gpu_memory_profile_row *gpu_memory_profile_row_of(vkt_memory_profile profile)
{
    for (size_t i = 0; i < N_PROFILES; i++)
        if (profiles[i].profile == profile)
            return &profiles[i];
    return NULL;
}

int gpu_memory_profile_parse(const char *name, vkt_memory_profile *out)
{
    for (size_t i = 0; name && i < N_PROFILES; i++)
        if (strcmp(profiles[i].name, name) == 0) {
            *out = profiles[i].profile;
            return 1;
        }
    return 0;
}

const char *vkt_memory_profile_name(vkt_memory_profile profile)
{
    const gpu_memory_profile_row *r = gpu_memory_profile_row_of(profile);
    return r ? r->name : "?";
}

vkt_memory_profile vkt_context_memory_profile(const vkt_context *ctx)
{
    return ctx ? ctx->memory_profile : VKT_MEMORY_PROFILE_AUTO;
}

static int has(VkMemoryPropertyFlags flags, VkMemoryPropertyFlags want)
{
    return (flags & want) == want;
}

static int heap_is_local(const VkPhysicalDeviceMemoryProperties *mp, uint32_t type)
{
    return (mp->memoryHeaps[mp->memoryTypes[type].heapIndex].flags &
            VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) != 0;
}

static void add_type(gpu_memory *mem, uint32_t index, VkMemoryPropertyFlags flags, int local)
{
    mem->types[mem->type_count++] = (gpu_mem_type){index, flags, local};
}

static VkDeviceSize largest_local_heap(const VkPhysicalDeviceMemoryProperties *mp)
{
    VkDeviceSize best = 0;
    for (uint32_t h = 0; h < mp->memoryHeapCount; h++)
        if ((mp->memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) &&
            mp->memoryHeaps[h].size > best)
            best = mp->memoryHeaps[h].size;
    return best;
}

int gpu_memory_type_spans_heap(const VkPhysicalDeviceMemoryProperties *mp, uint32_t type)
{
    return mp->memoryHeaps[mp->memoryTypes[type].heapIndex].size * 2 >= largest_local_heap(mp);
}

/* A device-local host-visible type `t` (flags f) under a profile. A discrete device (the
 * host has memory types of its own) keeps it, or its device side alone (HIDE). Unified
 * memory (lavapipe) under a forced profile becomes what a discrete GPU has: the type as
 * it is (KEEP) or its device side alone, a host type apart (cached if t is; not counted
 * as device-local), and for NEED (rebar) a device-local host-visible uncached type. */
static void add_device_host(gpu_memory *mem, uint32_t t, VkMemoryPropertyFlags f, int local,
                            const gpu_memory_profile_row *row, int discrete)
{
    int hide = row->device_host == GPU_DH_HIDE || (row->device_host == GPU_DH_NEED && !discrete);
    add_type(mem, t, hide ? f & ~HOST_BITS : f, local);
    if (row->host_apart && !discrete)
        add_type(mem, t, f & ~DL, 0);
    if (row->device_host == GPU_DH_NEED && !discrete)
        add_type(mem, t, f & ~CACHED, local);
}

vkt_status gpu_memory_types_init(vkt_context *ctx, vkt_memory_profile profile)
{
    const VkPhysicalDeviceMemoryProperties *mp = &ctx->mem_props;
    const gpu_memory_profile_row *row = gpu_memory_profile_row_of(profile);
    if (!row)
        return err_fail(ctx->errmsg, VKT_ERROR_INVALID_ARGUMENT, "unknown memory profile %d",
                        (int)profile);
    int discrete = 0, rebar = 0;
    for (uint32_t i = 0; i < mp->memoryTypeCount; i++) {
        VkMemoryPropertyFlags f = mp->memoryTypes[i].propertyFlags;
        discrete |= has(f, HV) && !(f & DL);
        rebar |= has(f, DL | HV | HC) && gpu_memory_type_spans_heap(mp, i);
    }
    if (row->device_host == GPU_DH_NEED && !rebar)
        return err_fail(ctx->errmsg, VKT_ERROR_NO_DEVICE,
                        "memory profile '%s': device '%s' has no memory type that is both "
                        "device-local and host-visible over its device memory heap", row->name,
                        ctx->info.name);
    ctx->mem.type_count = 0;
    for (uint32_t i = 0; i < mp->memoryTypeCount; i++) {
        VkMemoryPropertyFlags f = mp->memoryTypes[i].propertyFlags;
        int local = heap_is_local(mp, i);
        if (has(f, DL | HV))
            add_device_host(&ctx->mem, i, f, local, row, discrete);
        else
            add_type(&ctx->mem, i, f, local);
    }
    return VKT_OK;
}

/* Preferences per use, best first: a type qualifies with every `want` flag and no `avoid`
 * flag. HOST takes memory apart from the device's first; SHARED takes device-local host-
 * visible memory only over the whole device heap (a 256 MiB window would fill, then fail). */
typedef struct pref {
    VkMemoryPropertyFlags want, avoid;
    int whole_heap;
} pref;
static const struct {
    pref p[4];
    uint32_t n;
} uses[GPU_USE_COUNT] = {
    [GPU_USE_DEVICE] = {{{DL, 0, 0}, {0, 0, 0}}, 2},
    [GPU_USE_HOST] = {{{HV | HC | CACHED, DL, 0}, {HV | HC, DL, 0}, {HV | HC | CACHED, 0, 0},
                       {HV | HC, 0, 0}}, 4},
    [GPU_USE_SHARED] = {{{DL | HV | HC, 0, 1}, {DL, 0, 0}, {0, 0, 0}}, 3},
};

uint32_t gpu_memory_types_for(const vkt_context *ctx, uint32_t type_bits, gpu_memory_use use,
                              uint32_t *out, uint32_t cap)
{
    uint64_t taken[(GPU_MAX_MEM_TYPES + 63) / 64] = {0};
    uint32_t n = 0;
    for (uint32_t k = 0; k < uses[use].n; k++) {
        const pref *p = &uses[use].p[k];
        for (uint32_t v = 0; v < ctx->mem.type_count && n < cap; v++) {
            const gpu_mem_type *t = &ctx->mem.types[v];
            if (!(type_bits & (1u << t->index)) || !has(t->flags, p->want) ||
                (t->flags & p->avoid) || (taken[v / 64] >> (v % 64) & 1) ||
                (p->whole_heap && !gpu_memory_type_spans_heap(&ctx->mem_props, t->index)))
                continue;
            taken[v / 64] |= 1ull << (v % 64);
            out[n++] = v;
        }
    }
    return n;
}

static VkDeviceSize align_up(VkDeviceSize v, VkDeviceSize a) { return (v + a - 1) / a * a; }

static int type_is_local(const vkt_context *ctx, uint32_t type)
{
    return ctx->mem.types[type].local;
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
    const gpu_mem_type *mt = &ctx->mem.types[type];
    uint32_t heap = ctx->mem_props.memoryTypes[mt->index].heapIndex;
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
                               .allocationSize = size, .memoryTypeIndex = mt->index};
    VkResult r = gpu_fault("vkAllocateMemory");
    if (r == VK_SUCCESS)
        r = vkAllocateMemory(ctx->device, &ai, NULL, &b->memory);
    if (r != VK_SUCCESS) {
        free(b);
        return err_fail(ctx->errmsg, gpu_status_of(r),
                        "vkAllocateMemory of %llu bytes failed: %s", (unsigned long long)size,
                        gpu_result_name(r));
    }
    if (has(mt->flags, HV | HC)) {
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
