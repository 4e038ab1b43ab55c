/* User errors and environment failures give a status and a clear message, never a
 * crash: missing loader, missing driver, out of memory, device limits, device loss,
 * NULL handles. */
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define HAS(msg, part) TH_CHECK(strstr((msg), (part)) != NULL, "message '%s' contains '%s'", \
                                (msg), (part))

static void test_missing_loader(void)
{
    vkt_instance_options o = {.loader_path = "/nonexistent/libvulkan.so.1"};
    vkt_instance *inst = (vkt_instance *)&o; /* must be reset to NULL */
    TH_STATUS(NULL, vkt_instance_create(&o, &inst), VKT_ERROR_NO_VULKAN);
    TH_CHECK(inst == NULL, "output is NULL on failure");
    HAS(vkt_last_error(), "/nonexistent/libvulkan.so.1");
    o.loader_path = "libc.so.6"; /* a library, but not a Vulkan loader */
    TH_STATUS(NULL, vkt_instance_create(&o, &inst), VKT_ERROR_NO_VULKAN);
    HAS(vkt_last_error(), "vkGetInstanceProcAddr");
}

static void test_missing_driver(void)
{
    /* The loader finds no driver: the instance reports it instead of failing later. */
    setenv("VK_DRIVER_FILES", "/nonexistent/icd.json", 1);
    setenv("VK_ICD_FILENAMES", "/nonexistent/icd.json", 1);
    vkt_instance *inst = NULL;
    vkt_status st = vkt_instance_create(NULL, &inst);
    TH_CHECK(st == VKT_ERROR_NO_DEVICE, "no driver gives VKT_ERROR_NO_DEVICE, got %s (%s)",
             vkt_status_name(st), vkt_last_error());
    TH_CHECK(inst == NULL, "no instance is returned");
    HAS(vkt_last_error(), "driver");
    unsetenv("VK_DRIVER_FILES");
    unsetenv("VK_ICD_FILENAMES");
    vkt_instance_destroy(inst);
}

static void test_out_of_memory(vkt_context *ctx)
{
    vkt_buffer *b = (vkt_buffer *)ctx;
    TH_STATUS(ctx, vkt_buffer_create(ctx, 1ull << 42, VKT_MEMORY_DEVICE, &b),
              VKT_ERROR_OUT_OF_MEMORY);
    TH_CHECK(b == NULL, "no buffer on failure");
    HAS(vkt_context_errmsg(ctx), "4398046511104 bytes");
    /* The driver itself running out (injected): the message names the call and result. */
    setenv("VKT_FAULT_INJECT", "vkAllocateMemory", 1);
    TH_STATUS(ctx, vkt_buffer_create(ctx, 256ull << 20, VKT_MEMORY_DEVICE, &b),
              VKT_ERROR_OUT_OF_MEMORY);
    HAS(vkt_context_errmsg(ctx), "vkAllocateMemory");
    HAS(vkt_context_errmsg(ctx), "VK_ERROR_OUT_OF_DEVICE_MEMORY");
    unsetenv("VKT_FAULT_INJECT");
    TH_STATUS(ctx, vkt_buffer_create(ctx, 0, VKT_MEMORY_DEVICE, &b), VKT_ERROR_INVALID_ARGUMENT);
    TH_STATUS(ctx, vkt_buffer_create(ctx, 16, (vkt_memory_kind)7, &b),
              VKT_ERROR_INVALID_ARGUMENT);
    /* After failures the context still works. */
    TH_OK(ctx, vkt_buffer_create(ctx, 1024, VKT_MEMORY_DEVICE, &b));
    vkt_buffer_destroy(b);
}

static void test_device_lost(vkt_context *ctx)
{
    vkt_buffer *b = NULL;
    TH_OK(ctx, vkt_buffer_create(ctx, 4096, VKT_MEMORY_DEVICE, &b));
    vkt_stream *s = th_stream(ctx, 0);
    TH_OK(ctx, vkt_fill(s, (vkt_view){b, 0}, 1024, 1.0f));
    setenv("VKT_FAULT_INJECT", "vkQueueSubmit", 1);
    TH_STATUS(ctx, vkt_stream_run(s), VKT_ERROR_DEVICE_LOST);
    HAS(vkt_context_errmsg(ctx), "vkQueueSubmit failed: VK_ERROR_DEVICE_LOST");
    setenv("VKT_FAULT_INJECT", "vkWaitForFences", 1);
    TH_STATUS(ctx, vkt_stream_run(s), VKT_ERROR_DEVICE_LOST);
    HAS(vkt_context_errmsg(ctx), "vkWaitForFences failed: VK_ERROR_DEVICE_LOST");
    unsetenv("VKT_FAULT_INJECT");
    TH_OK(ctx, vkt_stream_run(s)); /* nothing was left pending: the stream still runs */
    vkt_stream_destroy(s);
    vkt_buffer_destroy(b);
}

static void test_storage_range_limit(vkt_context *ctx)
{
    vkt_device_info info;
    vkt_context_device_info(ctx, &info);
    uint64_t limit = info.max_storage_buffer_range;
    if (limit > (512ull << 20)) {
        TH_CHECK(1, "maxStorageBufferRange is %llu: limit test skipped",
                 (unsigned long long)limit);
        return;
    }
    /* A softmax whose rows span more than one binding may: refused, naming the limit. */
    uint64_t cols = 4096, rows = limit / (cols * 4) + 1;
    vkt_buffer *b = NULL;
    TH_OK(ctx, vkt_buffer_create(ctx, rows * cols * 4, VKT_MEMORY_DEVICE, &b));
    vkt_stream *s = th_stream(ctx, 0);
    vkt_status st = vkt_softmax_rows(s, 0, (vkt_view){b, 0}, (vkt_view){b, 0}, (uint32_t)rows,
                                (uint32_t)cols);
    TH_CHECK(st == VKT_ERROR_LIMIT, "binding beyond maxStorageBufferRange: %s (%s)",
             vkt_status_name(st), vkt_context_errmsg(ctx));
    HAS(vkt_context_errmsg(ctx), "maxStorageBufferRange");
    /* 1-D kernels split the range instead: fill of the whole buffer works. */
    vkt_stream_reset(s);
    TH_OK(ctx, vkt_fill(s, (vkt_view){b, 0}, rows * cols, 2.0f));
    TH_OK(ctx, vkt_stream_run(s));
    float last = 0;
    vkt_buffer_read(b, (rows * cols - 1) * 4, &last, 4);
    TH_CHECK(last == 2.0f, "fill beyond one binding's range reaches the last element");
    vkt_stream_destroy(s);
    vkt_buffer_destroy(b);
}

static void test_null_handles(vkt_context *ctx)
{
    vkt_instance_destroy(NULL);
    vkt_context_destroy(NULL);
    vkt_buffer_destroy(NULL);
    vkt_stream_destroy(NULL);
    TH_CHECK(1, "destroy(NULL) is a no-op for every handle");
    TH_STATUS(NULL, vkt_instance_create(NULL, NULL), VKT_ERROR_INVALID_ARGUMENT);
    vkt_context *c = NULL;
    TH_STATUS(NULL, vkt_context_create(NULL, NULL, &c), VKT_ERROR_INVALID_ARGUMENT);
    vkt_context_options o = {.device_index = 999};
    TH_STATUS(NULL, vkt_context_create(th_instance, &o, &c), VKT_ERROR_NO_DEVICE);
    HAS(vkt_last_error(), "999");
    TH_STATUS(NULL, vkt_stream_run(NULL), VKT_ERROR_INVALID_ARGUMENT);
    TH_STATUS(NULL, vkt_buffer_write(NULL, 0, "x", 1), VKT_ERROR_INVALID_ARGUMENT);
    vkt_stream *s = th_stream(ctx, 0);
    TH_STATUS(ctx, vkt_fill(s, (vkt_view){NULL, 0}, 4, 0.0f), VKT_ERROR_INVALID_ARGUMENT);
    TH_STATUS(ctx, vkt_gemm(s, NULL), VKT_ERROR_INVALID_ARGUMENT);
    TH_STATUS(NULL, vkt_gemm(NULL, NULL), VKT_ERROR_INVALID_ARGUMENT);
    TH_CHECK(strcmp(vkt_status_name((vkt_status)12345), "VKT_ERROR_UNKNOWN") == 0,
             "unknown status has a name");
    vkt_stream_destroy(s);
}

int main(void)
{
    th_init("test_errors");
    test_missing_loader();
    test_missing_driver();
    vkt_context *ctx = th_context(VKT_KERNELS_AUTO);
    test_out_of_memory(ctx);
    test_device_lost(ctx);
    test_storage_range_limit(ctx);
    test_null_handles(ctx);
    return th_finish();
}
