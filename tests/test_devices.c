/* Instance, device list, device-list parsing and selection, several logical devices
 * on one physical device. */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "platform/platform.h"

static void test_parse(void)
{
    uint32_t idx[8], n = 99;
    TH_OK(NULL, vkt_parse_device_list("0", idx, 8, &n));
    TH_CHECK(n == 1 && idx[0] == 0, "'0' parses to [0], got n=%u", n);
    TH_OK(NULL, vkt_parse_device_list(" 1 , 0,0 ,3", idx, 8, &n));
    TH_CHECK(n == 4 && idx[0] == 1 && idx[1] == 0 && idx[2] == 0 && idx[3] == 3,
             "' 1 , 0,0 ,3' parses to [1,0,0,3]");
    TH_STATUS(NULL, vkt_parse_device_list("", idx, 8, &n), VKT_ERROR_FORMAT);
    TH_CHECK(n == 0, "count is 0 after a failed parse");
    TH_STATUS(NULL, vkt_parse_device_list("0,", idx, 8, &n), VKT_ERROR_FORMAT);
    TH_STATUS(NULL, vkt_parse_device_list("a", idx, 8, &n), VKT_ERROR_FORMAT);
    TH_STATUS(NULL, vkt_parse_device_list("0;1", idx, 8, &n), VKT_ERROR_FORMAT);
    TH_CHECK(strstr(vkt_last_error(), "0;1") != NULL, "message quotes the bad list: %s",
             vkt_last_error());
    TH_STATUS(NULL, vkt_parse_device_list("0,0,0", idx, 2, &n), VKT_ERROR_LIMIT);
    TH_STATUS(NULL, vkt_parse_device_list(NULL, idx, 2, &n), VKT_ERROR_INVALID_ARGUMENT);
}

static void test_list(void)
{
    uint32_t n = vkt_instance_device_count(th_instance);
    TH_CHECK(n >= 1, "at least one device, got %u", n);
    for (uint32_t i = 0; i < n; i++) {
        vkt_device_info d;
        TH_OK(NULL, vkt_instance_device_info(th_instance, i, &d));
        TH_CHECK(d.name[0] != '\0', "device %u has a name", i);
        TH_CHECK(d.subgroup_size >= 1 && d.subgroup_size <= 128, "subgroup size %u plausible",
                 d.subgroup_size);
        TH_CHECK(d.max_storage_buffer_range >= 1u << 27 || d.max_storage_buffer_range >= 1u << 16,
                 "maxStorageBufferRange %llu", (unsigned long long)d.max_storage_buffer_range);
        TH_CHECK(d.heap_count >= 1 && d.heap_size[0] > 0, "device %u has a memory heap", i);
        TH_CHECK(d.max_shared_memory >= 16384, "shared memory %u >= 16 KiB (Vulkan minimum)",
                 d.max_shared_memory);
        TH_CHECK(strcmp(vkt_device_type_name(d.type), "") != 0, "type has a name");
        /* the ways of placing replicas: every usable device has a compute queue; the
         * groups partition the devices (each group's size is the number of devices
         * naming it) */
        TH_CHECK(d.compute_queues >= 1, "device %u: %u compute queue(s)", i, d.compute_queues);
        TH_CHECK(d.group_size >= 1 && d.group < n, "device %u: group %u of size %u", i,
                 d.group, d.group_size);
        uint32_t members = 0;
        for (uint32_t j = 0; j < n; j++) {
            vkt_device_info e;
            TH_OK(NULL, vkt_instance_device_info(th_instance, j, &e));
            members += e.group == d.group;
        }
        TH_CHECK(members == d.group_size, "device %u's group %u: %u devices name it, size %u",
                 i, d.group, members, d.group_size);
        if (strstr(d.name, "llvmpipe")) /* Mesa's lavapipe: Vulkan 1.3, the extension, alone */
            TH_CHECK(d.timeline_semaphores && d.host_import && d.group_size == 1,
                     "lavapipe: timelines %d, host import %d, group size %u",
                     d.timeline_semaphores, d.host_import, d.group_size);
    }
    vkt_device_info d;
    TH_STATUS(NULL, vkt_instance_device_info(th_instance, n, &d), VKT_ERROR_NO_DEVICE);
    TH_CHECK(strstr(vkt_instance_errmsg(th_instance), "out of range") != NULL,
             "message says out of range: %s", vkt_instance_errmsg(th_instance));
}

static void test_select(void)
{
    uint32_t idx[8], n = 0;
    plat_setenv("VKT_DEVICES", NULL);
    TH_OK(NULL, vkt_instance_select_devices(th_instance, idx, 8, &n));
    TH_CHECK(n == 1 && idx[0] == 0, "default selection is device 0");
    plat_setenv("VKT_DEVICES", "0,0,0");
    TH_OK(NULL, vkt_instance_select_devices(th_instance, idx, 8, &n));
    TH_CHECK(n == 3 && idx[2] == 0, "VKT_DEVICES=0,0,0 selects device 0 three times");
    plat_setenv("VKT_DEVICES", "0,9");
    TH_STATUS(NULL, vkt_instance_select_devices(th_instance, idx, 8, &n), VKT_ERROR_NO_DEVICE);
    TH_CHECK(strstr(vkt_instance_errmsg(th_instance), "VKT_DEVICES") != NULL,
             "message names VKT_DEVICES: %s", vkt_instance_errmsg(th_instance));
    plat_setenv("VKT_DEVICES", "x");
    TH_STATUS(NULL, vkt_instance_select_devices(th_instance, idx, 8, &n), VKT_ERROR_FORMAT);
    plat_setenv("VKT_DEVICES", NULL);
}

/* Each entry of "0,0,0" is its own logical device with its own queue: work submitted to
 * one context completes independently of the others, and buffers are separate. */
static void test_replica_contexts(void)
{
    enum { R = 3, N = 1000 };
    vkt_context *ctx[R];
    vkt_buffer *buf[R];
    vkt_stream *s[R];
    for (int r = 0; r < R; r++) {
        ctx[r] = th_context(VKT_KERNELS_AUTO);
        TH_OK(ctx[r], vkt_buffer_create(ctx[r], N * 4, VKT_MEMORY_DEVICE, &buf[r]));
        s[r] = th_stream(ctx[r], 0);
        TH_OK(ctx[r], vkt_fill(s[r], (vkt_view){buf[r], 0}, N, (float)(r + 1)));
    }
    for (int r = 0; r < R; r++)
        TH_OK(ctx[r], vkt_stream_submit(s[r]));
    for (int r = R - 1; r >= 0; r--)
        TH_OK(ctx[r], vkt_stream_wait(s[r]));
    for (int r = 0; r < R; r++) {
        float host[N];
        TH_OK(ctx[r], vkt_buffer_read(buf[r], 0, host, sizeof host));
        int ok = 1;
        for (int i = 0; i < N; i++)
            ok &= host[i] == (float)(r + 1);
        TH_CHECK(ok, "replica %d holds its own value", r);
    }
    /* A buffer of one context cannot be used in another's stream. */
    TH_STATUS(ctx[0], vkt_fill(s[0], (vkt_view){buf[1], 0}, N, 0.0f),
              VKT_ERROR_INVALID_ARGUMENT);
    TH_CHECK(strstr(vkt_context_errmsg(ctx[0]), "another context") != NULL,
             "message says another context: %s", vkt_context_errmsg(ctx[0]));
}

static void test_variant(void)
{
    vkt_context *c = th_context(VKT_KERNELS_GPU);
    TH_CHECK(vkt_context_kernel_variant(c) == VKT_KERNELS_GPU, "GPU variant can be forced");
    c = th_context(VKT_KERNELS_CPU);
    TH_CHECK(vkt_context_kernel_variant(c) == VKT_KERNELS_CPU, "CPU variant can be forced");
    plat_setenv("VKT_KERNELS", "gpu");
    c = th_context(VKT_KERNELS_AUTO);
    TH_CHECK(vkt_context_kernel_variant(c) == VKT_KERNELS_GPU, "VKT_KERNELS=gpu is honoured");
    plat_setenv("VKT_KERNELS", NULL);
    vkt_device_info d;
    vkt_context_device_info(c, &d);
    c = th_context(VKT_KERNELS_AUTO);
    TH_CHECK(vkt_context_kernel_variant(c) ==
                 (d.type == VKT_DEVICE_TYPE_CPU ? VKT_KERNELS_CPU : VKT_KERNELS_GPU),
             "AUTO picks the CPU variant on CPU devices and the GPU variant on GPUs");
}

int main(void)
{
    th_init("test_devices");
    test_parse();
    test_list();
    test_select();
    test_replica_contexts();
    test_variant();
    return th_finish();
}
