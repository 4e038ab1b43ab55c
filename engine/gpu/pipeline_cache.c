/* The VkPipelineCache, kept in a file under the user's cache directory so later runs
 * skip shader compilation. The file is keyed by vendor, device and the driver's cache
 * UUID; a file whose header does not match the device is ignored, never trusted. */
#include "gpu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cache_dir(char *out, size_t size)
{
    const char *d = plat_getenv("VKT_CACHE_DIR");
    if (d)
        return snprintf(out, size, "%s", d) < (int)size;
    d = plat_getenv("XDG_CACHE_HOME");
    if (d)
        return snprintf(out, size, "%s/vktrain", d) < (int)size;
    d = plat_getenv("HOME");
    if (d)
        return snprintf(out, size, "%s/.cache/vktrain", d) < (int)size;
    return 0;
}

/* Header of VK_PIPELINE_CACHE_HEADER_VERSION_ONE: length, version, vendor, device, UUID. */
static int header_matches(const vkt_context *ctx, const unsigned char *data, size_t size)
{
    if (size < 16 + VK_UUID_SIZE)
        return 0;
    uint32_t f[4];
    memcpy(f, data, sizeof f);
    return f[0] >= 16 + VK_UUID_SIZE && f[1] == VK_PIPELINE_CACHE_HEADER_VERSION_ONE &&
           f[2] == ctx->props.vendorID && f[3] == ctx->props.deviceID &&
           memcmp(data + 16, ctx->props.pipelineCacheUUID, VK_UUID_SIZE) == 0;
}

vkt_status gpu_pipeline_cache_open(vkt_context *ctx, int use_file)
{
    void *data = NULL;
    size_t size = 0;
    char dir[900];
    ctx->cache_path[0] = '\0';
    if (use_file && cache_dir(dir, sizeof dir)) {
        char uuid[2 * VK_UUID_SIZE + 1];
        for (unsigned i = 0; i < VK_UUID_SIZE; i++)
            snprintf(uuid + 2 * i, 3, "%02x", ctx->props.pipelineCacheUUID[i]);
        snprintf(ctx->cache_path, sizeof ctx->cache_path, "%s/pipelines-%04x-%04x-%s.bin", dir,
                 ctx->props.vendorID, ctx->props.deviceID, uuid);
        if (plat_read_file(ctx->cache_path, &data, &size) == 0 &&
            !header_matches(ctx, data, size)) {
            free(data); /* stale or corrupt: start empty, overwrite on close */
            data = NULL;
            size = 0;
        }
    }
    VkPipelineCacheCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO,
                                    .initialDataSize = size,
                                    .pInitialData = data};
    VkResult r = vkCreatePipelineCache(ctx->device, &ci, NULL, &ctx->pipeline_cache);
    if (r != VK_SUCCESS && data) { /* the driver refused the data: start empty */
        ci.initialDataSize = 0;
        ci.pInitialData = NULL;
        r = vkCreatePipelineCache(ctx->device, &ci, NULL, &ctx->pipeline_cache);
    }
    free(data);
    if (r != VK_SUCCESS)
        return err_fail(ctx->errmsg, gpu_status_of(r), "vkCreatePipelineCache failed: %s",
                        gpu_result_name(r));
    return VKT_OK;
}

/* Saves the cache if this context created pipelines. Failures to save are not errors:
 * the cache only makes start-up faster. */
void gpu_pipeline_cache_close(vkt_context *ctx)
{
    if (!ctx->pipeline_cache)
        return;
    size_t size = 0;
    if (ctx->cache_path[0] && ctx->pipeline_count > 0 &&
        vkGetPipelineCacheData(ctx->device, ctx->pipeline_cache, &size, NULL) == VK_SUCCESS &&
        size > 0) {
        void *data = malloc(size);
        if (data &&
            vkGetPipelineCacheData(ctx->device, ctx->pipeline_cache, &size, data) == VK_SUCCESS) {
            char dir[1024];
            snprintf(dir, sizeof dir, "%s", ctx->cache_path);
            char *slash = strrchr(dir, '/');
            if (slash)
                *slash = '\0';
            if (plat_mkdirs(dir) == 0)
                plat_write_file_atomic(ctx->cache_path, data, size);
        }
        free(data);
    }
    vkDestroyPipelineCache(ctx->device, ctx->pipeline_cache, NULL);
    ctx->pipeline_cache = VK_NULL_HANDLE;
}
