/* User errors and environment failures give a status and a clear message, never a
 * crash: missing loader, missing driver, out of memory, device limits, device loss,
 * NULL handles. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "harness.h"
#include "platform/platform.h"

#define HAS(msg, part) TH_CHECK(strstr((msg), (part)) != NULL, "message '%s' contains '%s'", \
                                (msg), (part))

static void test_missing_loader(void)
{
    vkt_instance_options o = {.loader_path = "/nonexistent/libvulkan.so.1"};
    vkt_instance *inst = (vkt_instance *)&o; /* must be reset to NULL */
    TH_STATUS(NULL, vkt_instance_create(&o, &inst), VKT_ERROR_NO_VULKAN);
    TH_CHECK(inst == NULL, "output is NULL on failure");
    HAS(vkt_last_error(), "/nonexistent/libvulkan.so.1");
#if defined(_WIN32)
    o.loader_path = "kernel32.dll"; /* a library, but not a Vulkan loader */
#else
    o.loader_path = "libc.so.6";
#endif
    TH_STATUS(NULL, vkt_instance_create(&o, &inst), VKT_ERROR_NO_VULKAN);
    HAS(vkt_last_error(), "vkGetInstanceProcAddr");
}

static void test_missing_driver(void)
{
    /* The loader finds no driver: the instance reports it instead of failing later.
     * Not under Wine (scripts/windows.sh sets VKT_TEST_WINE): its vulkan-1.dll hands over
     * to the host's loader, which read the environment when the process started. */
    if (plat_getenv("VKT_TEST_WINE")) {
        printf("test_missing_driver: skipped under Wine (the host's Vulkan loader does not see "
               "variables set at run time)\n");
        return;
    }
    plat_setenv("VK_DRIVER_FILES", "/nonexistent/icd.json");
    plat_setenv("VK_ICD_FILENAMES", "/nonexistent/icd.json");
    vkt_instance *inst = NULL;
    vkt_status st = vkt_instance_create(NULL, &inst);
    TH_CHECK(st == VKT_ERROR_NO_DEVICE, "no driver gives VKT_ERROR_NO_DEVICE, got %s (%s)",
             vkt_status_name(st), vkt_last_error());
    TH_CHECK(inst == NULL, "no instance is returned");
    HAS(vkt_last_error(), "driver");
    plat_setenv("VK_DRIVER_FILES", NULL);
    plat_setenv("VK_ICD_FILENAMES", NULL);
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
    plat_setenv("VKT_FAULT_INJECT", "vkAllocateMemory");
    TH_STATUS(ctx, vkt_buffer_create(ctx, 256ull << 20, VKT_MEMORY_DEVICE, &b),
              VKT_ERROR_OUT_OF_MEMORY);
    HAS(vkt_context_errmsg(ctx), "vkAllocateMemory");
    HAS(vkt_context_errmsg(ctx), "VK_ERROR_OUT_OF_DEVICE_MEMORY");
    plat_setenv("VKT_FAULT_INJECT", NULL);
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
    plat_setenv("VKT_FAULT_INJECT", "vkQueueSubmit");
    TH_STATUS(ctx, vkt_stream_run(s), VKT_ERROR_DEVICE_LOST);
    HAS(vkt_context_errmsg(ctx), "vkQueueSubmit failed: VK_ERROR_DEVICE_LOST");
    plat_setenv("VKT_FAULT_INJECT", "vkWaitForFences");
    TH_STATUS(ctx, vkt_stream_run(s), VKT_ERROR_DEVICE_LOST);
    HAS(vkt_context_errmsg(ctx), "vkWaitForFences failed: VK_ERROR_DEVICE_LOST");
    plat_setenv("VKT_FAULT_INJECT", NULL);
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

/* A message that wraps another message arrives whole: the formatter never reads the
 * buffer it is writing, whether the argument is the thread's last error or `buf` itself. */
static void test_message_chains(void)
{
    const vkt_status st = VKT_ERROR_FORMAT;
    err_fail(NULL, st, "vkt_model_create: tensor '%s' is too large", "ids");
    TH_CHECK(err_fail(NULL, st, "replica %u: %s", 0u, vkt_last_error()) == st, "status returned");
    TH_CHECK(strcmp(vkt_last_error(), "replica 0: vkt_model_create: tensor 'ids' is too large") == 0,
             "prefix over the last error: '%s'", vkt_last_error());
    char buf[VKT_ERRMSG_SIZE];
    err_fail(buf, st, "bad device list '%s'", "0,,x");
    err_fail(buf, st, "VKT_DEVICES: %s", vkt_last_error());
    TH_CHECK(strcmp(buf, "VKT_DEVICES: bad device list '0,,x'") == 0, "into buf: '%s'", buf);
    err_fail(buf, st, "outer: %s", buf); /* buf is the argument and the destination */
    TH_CHECK(strcmp(buf, "outer: VKT_DEVICES: bad device list '0,,x'") == 0, "buf aliases: '%s'",
             buf);
    TH_CHECK(strcmp(vkt_last_error(), buf) == 0, "last error equals buf: '%s'", vkt_last_error());
    err_fail(buf, st, "%s", vkt_last_error()); /* a copy of itself is itself */
    TH_CHECK(strcmp(buf, "outer: VKT_DEVICES: bad device list '0,,x'") == 0, "self copy: '%s'",
             buf);
    /* Ten levels, each checked whole; then past the size, truncated at the end only. */
    err_fail(NULL, st, "root");
    char want[VKT_ERRMSG_SIZE] = "root";
    for (int i = 0; i < 10; i++) {
        /* room for the prefix beside a full `want`, so nothing can be cut here (GCC's
         * -Wformat-truncation proves it at -O0, where it cannot see want's real length) */
        char next[VKT_ERRMSG_SIZE + 32];
        int len = snprintf(next, sizeof next, "level %d: %s", i, want);
        TH_CHECK(len > 0 && len < VKT_ERRMSG_SIZE, "level %d fits: %d bytes", i, len);
        memcpy(want, next, sizeof want);
        want[sizeof want - 1] = '\0';
        err_fail(i % 2 ? buf : NULL, st, "level %d: %s", i, i % 2 ? buf : vkt_last_error());
        if (i % 2 == 0)
            memcpy(buf, vkt_last_error(), sizeof buf);
        TH_CHECK(strcmp(vkt_last_error(), want) == 0, "level %d: '%s'", i, vkt_last_error());
    }
    for (int i = 0; i < 200; i++)
        err_fail(buf, st, "wrap %03d: %s", i, buf);
    TH_CHECK(strlen(buf) == VKT_ERRMSG_SIZE - 1, "a long chain fills the buffer");
    TH_CHECK(strncmp(buf, "wrap 199: wrap 198: wrap 197: ", 30) == 0, "newest prefix first: '%.40s'",
             buf);
    /* Through the public API: the environment's name once, the list whole. */
    plat_setenv("VKT_DEVICES", "0,,x");
    uint32_t sel[8], n = 0;
    TH_STATUS(NULL, vkt_instance_select_devices(th_instance, sel, 8, &n), VKT_ERROR_FORMAT);
    plat_setenv("VKT_DEVICES", NULL);
    const char *msg = vkt_instance_errmsg(th_instance);
    TH_CHECK(strncmp(msg, "VKT_DEVICES: bad device list '0,,x': expected a device index", 60) == 0,
             "VKT_DEVICES message intact: '%s'", msg);
    TH_CHECK(strstr(msg + 1, "VKT_DEVICES") == NULL, "VKT_DEVICES named once: '%s'", msg);
    TH_CHECK(strcmp(vkt_last_error(), msg) == 0, "last error equals the instance's");
}

int main(void)
{
    th_init("test_errors");
    test_missing_loader();
    test_missing_driver();
    test_message_chains();
    vkt_context *ctx = th_context(VKT_KERNELS_AUTO);
    test_out_of_memory(ctx);
    test_device_lost(ctx);
    test_storage_range_limit(ctx);
    test_null_handles(ctx);
    return th_finish();
}
