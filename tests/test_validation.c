/* The validation pass is real: with the Khronos layer on, an invalid Vulkan call is
 * reported and counted (so a suite run under VKT_VALIDATION=1 that counts zero
 * messages means the layer saw none, not that it was absent), and so is a hazard between
 * two commands with no barrier when its synchronization check is on (VKT_VALIDATION=sync). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/gpu.h"
#include "harness.h"

/* Two fills of one range recorded with no barrier between them: a write-after-write
 * hazard, reported only when the synchronization check is on (level 2). Returns the
 * instance's message count after recording them. */
static uint64_t hazard_messages(int level)
{
    vkt_instance_options o = {.enable_validation = level, .quiet_validation = 1};
    vkt_instance *inst = NULL;
    if (!TH_CHECK(vkt_instance_create(&o, &inst) == VKT_OK, "instance at level %d: %s", level,
                  vkt_last_error()))
        return 0;
    vkt_context *ctx = NULL;
    vkt_buffer *b = NULL;
    vkt_stream *s = NULL;
    uint64_t n = 0;
    if (TH_OK(NULL, vkt_context_create(inst, NULL, &ctx)) &&
        TH_OK(ctx, vkt_buffer_create(ctx, 256, VKT_MEMORY_DEVICE, &b)) &&
        TH_OK(ctx, vkt_stream_create(ctx, NULL, &s)) && TH_OK(ctx, gpu_stream_begin(s))) {
        /* straight into the command buffer: the stream would put a barrier between */
        vkCmdFillBuffer(s->cmd, b->buffer, 0, 256, 0);
        vkCmdFillBuffer(s->cmd, b->buffer, 0, 256, 1);
        n = vkt_instance_validation_count(inst);
    }
    vkt_stream_destroy(s);
    vkt_buffer_destroy(b);
    vkt_context_destroy(ctx);
    vkt_instance_destroy(inst);
    return n;
}

/* VKT_VALIDATION's values: 2 is sync's level (the hazard reported with no option asking
 * for it), a value it does not know is refused naming it rather than read as 1 (a typo of
 * "sync" would drop the check unseen). `env` is the value ctest set, put back after. */
static void env_values(const char *env)
{
    char saved[64] = "";
    if (env)
        snprintf(saved, sizeof saved, "%s", env);
    setenv("VKT_VALIDATION", "2", 1);
    uint64_t two = hazard_messages(0);
    TH_CHECK(two >= 1, "VKT_VALIDATION=2 reports the hazard as sync does (%llu)",
             (unsigned long long)two);
    const char *bad[] = {"syn", "yes", "3"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        setenv("VKT_VALIDATION", bad[i], 1);
        vkt_instance *inst = NULL;
        char want[64];
        snprintf(want, sizeof want, "VKT_VALIDATION='%s'", bad[i]);
        vkt_status st = vkt_instance_create(NULL, &inst);
        TH_CHECK(st == VKT_ERROR_INVALID_ARGUMENT && !inst &&
                     strstr(vkt_last_error(), want) != NULL,
                 "VKT_VALIDATION=%s refused naming it (%s: %s)", bad[i],
                 vkt_status_name(st), vkt_last_error());
        vkt_instance_destroy(inst);
    }
    if (env)
        setenv("VKT_VALIDATION", saved, 1);
    else
        unsetenv("VKT_VALIDATION");
}

int main(void)
{
    th_init("test_validation");
    uint64_t plain = hazard_messages(1), sync = hazard_messages(2);
    const char *env = getenv("VKT_VALIDATION"); /* "sync" turns the check on for level 1 too */
    TH_CHECK(plain == 0 || (env && strcmp(env, "sync") == 0),
             "without the synchronization check the hazard is not reported (%llu)",
             (unsigned long long)plain);
    TH_CHECK(sync >= 1, "with it (enable_validation 2, VKT_VALIDATION=sync) it is (%llu)",
             (unsigned long long)sync);
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
    env_values(env);
    return th_finish();
}
