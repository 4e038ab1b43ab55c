/* Compute pipelines, created lazily from embedded SPIR-V the first time a (kernel,
 * specialization constants) pair is dispatched, then kept for the context's life. Each
 * is checked against its shader first (gpu_kernel_check: bindings and constant ids). */
#include "gpu.h"

#include <stdlib.h>
#include <string.h>

static gpu_pipeline *find(vkt_context *ctx, const gpu_kernel *k, const uint32_t *spec,
                          uint32_t n_spec)
{
    for (gpu_pipeline *p = ctx->pipelines; p; p = p->next)
        if (p->kernel == k && p->n_spec == n_spec &&
            (n_spec == 0 || memcmp(p->spec, spec, n_spec * sizeof *spec) == 0))
            return p;
    return NULL;
}

static void destroy_one(vkt_context *ctx, gpu_pipeline *p)
{
    if (p->pipeline)
        vkDestroyPipeline(ctx->device, p->pipeline, NULL);
    if (p->layout)
        vkDestroyPipelineLayout(ctx->device, p->layout, NULL);
    if (p->set_layout)
        vkDestroyDescriptorSetLayout(ctx->device, p->set_layout, NULL);
    free(p);
}

static vkt_status create_layouts(vkt_context *ctx, const gpu_kernel *k, gpu_pipeline *p)
{
    VkDescriptorSetLayoutBinding b[GPU_MAX_BINDINGS];
    for (uint32_t i = 0; i < k->n_bindings; i++)
        b[i] = (VkDescriptorSetLayoutBinding){
            .binding = i,
            .descriptorType = gpu_descriptor_type((gpu_bind_type)k->bind[i]),
            .descriptorCount = 1,
            .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT};
    VkDescriptorSetLayoutCreateInfo li = {
        .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
        .bindingCount = k->n_bindings,
        .pBindings = b};
    GPU_CHECK(ctx, vkCreateDescriptorSetLayout(ctx->device, &li, NULL, &p->set_layout));
    VkPushConstantRange pr = {VK_SHADER_STAGE_COMPUTE_BIT, 0, k->push_bytes};
    VkPipelineLayoutCreateInfo pli = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
                                      .setLayoutCount = 1,
                                      .pSetLayouts = &p->set_layout,
                                      .pushConstantRangeCount = k->push_bytes ? 1 : 0,
                                      .pPushConstantRanges = &pr};
    GPU_CHECK(ctx, vkCreatePipelineLayout(ctx->device, &pli, NULL, &p->layout));
    return VKT_OK;
}

static vkt_status create_pipeline(vkt_context *ctx, const gpu_kernel *k, gpu_pipeline *p)
{
    VkShaderModuleCreateInfo mi = {.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
                                   .codeSize = k->spv_bytes,
                                   .pCode = k->spv};
    VkShaderModule module;
    GPU_CHECK(ctx, vkCreateShaderModule(ctx->device, &mi, NULL, &module));
    VkSpecializationMapEntry entries[GPU_MAX_SPEC];
    for (uint32_t i = 0; i < p->n_spec; i++)
        entries[i] = (VkSpecializationMapEntry){i, i * 4, 4};
    VkSpecializationInfo si = {p->n_spec, entries, p->n_spec * 4, p->spec};
    VkComputePipelineCreateInfo ci = {
        .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
        .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                  .stage = VK_SHADER_STAGE_COMPUTE_BIT,
                  .module = module,
                  .pName = "main",
                  .pSpecializationInfo = p->n_spec ? &si : NULL},
        .layout = p->layout};
    VkResult r = vkCreateComputePipelines(ctx->device, ctx->pipeline_cache, 1, &ci, NULL,
                                          &p->pipeline);
    vkDestroyShaderModule(ctx->device, module, NULL);
    if (r != VK_SUCCESS)
        return err_fail(ctx->errmsg, gpu_status_of(r),
                        "vkCreateComputePipelines failed for kernel '%s': %s", k->name,
                        gpu_result_name(r));
    return VKT_OK;
}

vkt_status gpu_pipeline_get(vkt_context *ctx, const gpu_kernel *k, const uint32_t *spec,
                            uint32_t n_spec, gpu_pipeline **out)
{
    VKT_ASSERT(ctx->errmsg, n_spec <= GPU_MAX_SPEC && k->push_bytes <= 128);
    gpu_pipeline *p = find(ctx, k, spec, n_spec);
    if (p) {
        *out = p;
        return VKT_OK;
    }
    vkt_status st = gpu_kernel_check(k, n_spec, ctx->errmsg);
    if (st != VKT_OK)
        return st;
    p = calloc(1, sizeof *p);
    if (!p)
        return err_fail(ctx->errmsg, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    p->kernel = k;
    p->writable = gpu_kernel_writable(k);
    p->n_spec = n_spec;
    if (n_spec)
        memcpy(p->spec, spec, n_spec * sizeof *spec);
    st = create_layouts(ctx, k, p);
    if (st == VKT_OK)
        st = create_pipeline(ctx, k, p);
    if (st != VKT_OK) {
        destroy_one(ctx, p);
        return st;
    }
    p->next = ctx->pipelines;
    ctx->pipelines = p;
    ctx->pipeline_count++;
    *out = p;
    return VKT_OK;
}

void gpu_pipelines_destroy(vkt_context *ctx)
{
    while (ctx->pipelines) {
        gpu_pipeline *p = ctx->pipelines;
        ctx->pipelines = p->next;
        destroy_one(ctx, p);
    }
    ctx->pipeline_count = 0;
}
