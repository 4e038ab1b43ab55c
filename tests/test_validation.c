/* The validation pass is real: with the Khronos layer on, an invalid Vulkan call is
 * reported and counted (so a suite run under VKT_VALIDATION=1 that counts zero
 * messages means the layer saw none, not that it was absent). */
#include <string.h>

#include "gpu/gpu.h"
#include "harness.h"

int main(void)
{
    th_init("test_validation");
    vkt_instance_options o = {.enable_validation = 1, .quiet_validation = 1};
    vkt_instance *inst = NULL;
    vkt_status st = vkt_instance_create(&o, &inst);
    if (!TH_CHECK(st == VKT_OK, "instance with validation: %s", vkt_last_error()))
        return th_finish();
    vkt_context *ctx = NULL;
    TH_OK(NULL, vkt_context_create(inst, NULL, &ctx));
    TH_CHECK(vkt_instance_validation_count(inst) == 0, "a clean start reports nothing");
    /* Deliberately invalid: a buffer of size 0 (VUID-VkBufferCreateInfo-size-00912). */
    VkBufferCreateInfo bi = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
                             .size = 0,
                             .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT};
    VkBuffer b = VK_NULL_HANDLE;
    vkCreateBuffer(ctx->device, &bi, NULL, &b);
    TH_CHECK(vkt_instance_validation_count(inst) >= 1,
             "the invalid call was reported (%llu messages)",
             (unsigned long long)vkt_instance_validation_count(inst));
    if (b)
        vkDestroyBuffer(ctx->device, b, NULL);
    vkt_context_destroy(ctx);
    vkt_instance_destroy(inst);
    return th_finish();
}
