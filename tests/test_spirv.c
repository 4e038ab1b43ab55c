/* test_spirv.c - pipelines are checked against their shader's SPIR-V (engine/gpu/spirv.c,
 * gpu_kernel_check): every kernel of the library passes (the other tests create them
 * all); here deliberately mismatched descriptions of real shaders must fail, with a
 * message naming the shader and what differs, and no pipeline made. */
#include "harness.h"
#include "gpu/gpu.h"
#include "push.h"
#include "push_conv.h"
#include "spec.h"
#include "bias_act.spv.h"
#include "gemm_cpu.spv.h"
#include "mse.spv.h"
#include "pool_backward.spv.h"

#include <string.h>

#define S GPU_BIND_STORAGE

static const gpu_kernel k_bias_act = {
    "bias_act", spv_bias_act, sizeof spv_bias_act, 3, {S, S, S},
    sizeof(struct push_bias_act), SPEC_BIAS_ACT_COUNT};

/* gpu_kernel_check(k, n_spec) fails with VKT_ERROR_INTERNAL and a message holding `a`
 * and `b` (b may be NULL). */
static void expect_mismatch(const char *what, const gpu_kernel *k, uint32_t n_spec,
                            const char *a, const char *b)
{
    char msg[VKT_ERRMSG_SIZE] = "";
    vkt_status st = gpu_kernel_check(k, n_spec, msg);
    TH_CHECK(st == VKT_ERROR_INTERNAL, "%s: VKT_ERROR_INTERNAL expected, got %s (%s)", what,
             vkt_status_name(st), msg);
    TH_CHECK(strstr(msg, a) && (!b || strstr(msg, b)), "%s: the message names '%s'%s%s: %s",
             what, a, b ? " and " : "", b ? b : "", msg);
    printf("  %s: %s\n", what, msg);
}

static void check_descriptions(void)
{
    char msg[VKT_ERRMSG_SIZE] = "";
    TH_CHECK(gpu_kernel_check(&k_bias_act, SPEC_BIAS_ACT_COUNT, msg) == VKT_OK,
             "bias_act as the library describes it: %s", msg);

    gpu_kernel k = k_bias_act;
    k.n_bindings = 2;
    expect_mismatch("a binding too few", &k, k.n_spec, "'bias_act'", "declares binding 2");
    k = k_bias_act;
    k.n_bindings = 4;
    k.bind[3] = S;
    expect_mismatch("a binding too many", &k, k.n_spec, "'bias_act'", "has no binding 3");
    k = k_bias_act;
    k.bind[1] = GPU_BIND_TEXEL_R;
    expect_mismatch("a binding of another kind", &k, k.n_spec, "binding 1 is described as a "
                    "uniform texel buffer", "declares a storage buffer");
    /* the counts in the messages follow shaders/spec.h's SPEC_BIAS_ACT_COUNT */
    char ids[64], gives[64], fewer[64];
    snprintf(ids, sizeof ids, "constant_id 0-%d", SPEC_BIAS_ACT_COUNT - 1);
    snprintf(gives, sizeof gives, "gives specialization constants 0-%d", SPEC_BIAS_ACT_COUNT);
    snprintf(fewer, sizeof fewer, "the dispatch gives %d", SPEC_BIAS_ACT_COUNT - 1);
    k = k_bias_act;
    k.n_spec = SPEC_BIAS_ACT_COUNT - 1;
    expect_mismatch("a constant too few", &k, k.n_spec, "'bias_act'", ids);
    k = k_bias_act;
    k.n_spec = SPEC_BIAS_ACT_COUNT + 1;
    expect_mismatch("a constant too many", &k, k.n_spec, gives, NULL);
    expect_mismatch("a dispatch giving fewer than described", &k_bias_act,
                    SPEC_BIAS_ACT_COUNT - 1, fewer, NULL);

    /* Texel formats: gemm_cpu declares r32f and rgba32f views of A, B and the C it reads
     * (binding 3); C (binding 2) is a storage buffer. */
    gpu_kernel g = {"gemm_cpu", spv_gemm_cpu, sizeof spv_gemm_cpu, 4,
                    {GPU_BIND_STORAGE_TEXEL_R, GPU_BIND_STORAGE_TEXEL_RGBA, S,
                     GPU_BIND_STORAGE_TEXEL_R},
                    sizeof(struct push_gemm), SPEC_GEMM_CPU_COUNT};
    TH_CHECK(gpu_kernel_check(&g, SPEC_GEMM_CPU_COUNT, msg) == VKT_OK,
             "gemm_cpu with r32f A and rgba32f B: %s", msg);
    g.bind[2] = GPU_BIND_STORAGE_TEXEL_R;
    expect_mismatch("a storage buffer described as a texel buffer", &g, g.n_spec,
                    "'gemm_cpu': binding 2", "declares a storage buffer");
    g.bind[2] = S;
    g.bind[0] = GPU_BIND_TEXEL_RGBA;
    expect_mismatch("a storage texel buffer described as a uniform one", &g, g.n_spec,
                    "binding 0", "storage texel buffer");

    /* pool_backward binds `saved` twice: storage (1) and r32f texels (3). */
    gpu_kernel p = {"pool_backward", spv_pool_backward, sizeof spv_pool_backward, 4,
                    {S, GPU_BIND_STORAGE_TEXEL_R, S, GPU_BIND_STORAGE_TEXEL_R},
                    sizeof(struct push_pool), SPEC_POOL_BACKWARD_COUNT};
    TH_CHECK(gpu_kernel_check(&p, SPEC_POOL_BACKWARD_COUNT, msg) == VKT_OK,
             "pool_backward as described: %s", msg);
    p.bind[3] = GPU_BIND_STORAGE_TEXEL_RGBA;
    expect_mismatch("a texel format", &p, p.n_spec, "'pool_backward': binding 3",
                    "rgba32f");

    static const uint32_t junk[8] = {0xdeadbeef, 1, 2, 3, 4, 5, 6, 7};
    gpu_kernel bad = {"junk", junk, sizeof junk, 1, {S}, 0, 0};
    expect_mismatch("not SPIR-V", &bad, 0, "'junk'", "cannot read its SPIR-V");
    uint32_t cut[64];
    memcpy(cut, spv_bias_act, sizeof cut);
    cut[5] = 0xffff0000u | (cut[5] & 0xffffu); /* an instruction longer than the module */
    gpu_kernel trunc = k_bias_act;
    trunc.spv = cut;
    trunc.spv_bytes = sizeof cut;
    expect_mismatch("a truncated module", &trunc, trunc.n_spec, "truncated", NULL);
}

/* Through pipeline creation: the mismatch is an error of the call, no pipeline is made,
 * and the right description still works afterwards. */
static void check_pipeline(void)
{
    vkt_context *ctx = th_context(VKT_KERNELS_AUTO);
    uint32_t spec[SPEC_BIAS_ACT_COUNT] = {[SPEC_WG] = 64, [SPEC_BIAS_ACT_OP] = VKT_UNARY_RELU};
    gpu_kernel k = k_bias_act;
    k.n_bindings = 2;
    uint32_t before = ctx->pipeline_count;
    gpu_pipeline *p = NULL;
    TH_STATUS(ctx, gpu_pipeline_get(ctx, &k, spec, SPEC_BIAS_ACT_COUNT, &p),
              VKT_ERROR_INTERNAL);
    TH_CHECK(strstr(vkt_context_errmsg(ctx), "shader 'bias_act'"),
             "the context's message names the shader: %s", vkt_context_errmsg(ctx));
    TH_CHECK(ctx->pipeline_count == before, "no pipeline made (%u, %u before)",
             ctx->pipeline_count, before);
    TH_STATUS(ctx, gpu_pipeline_get(ctx, &k_bias_act, spec, SPEC_BIAS_ACT_COUNT - 1, &p),
              VKT_ERROR_INTERNAL);
    TH_OK(ctx, gpu_pipeline_get(ctx, &k_bias_act, spec, SPEC_BIAS_ACT_COUNT, &p));
    TH_CHECK(p && ctx->pipeline_count == before + 1, "the right description makes one");
}

/* The bindings a shader may write (gpu_kernel_writable): what the stream orders as written
 * whatever a dispatch declares, as the validation layer's synchronization check does. */
static void check_writable(void)
{
    uint32_t w = gpu_kernel_writable(&k_bias_act);
    TH_CHECK(w == 0x6u, "bias_act: b readonly, pre and y writable (mask 0x%x)", w);
    gpu_kernel g = {"gemm_cpu", spv_gemm_cpu, sizeof spv_gemm_cpu, 4,
                    {GPU_BIND_STORAGE_TEXEL_R, GPU_BIND_STORAGE_TEXEL_RGBA, S,
                     GPU_BIND_STORAGE_TEXEL_R},
                    sizeof(struct push_gemm), SPEC_GEMM_CPU_COUNT};
    w = gpu_kernel_writable(&g);
    TH_CHECK(w == 0x4u, "gemm_cpu: readonly texel views of A, B and C, C's storage buffer "
             "written (mask 0x%x)", w);
    gpu_kernel m = {"mse", spv_mse, sizeof spv_mse, 4, {S, S, S, S}, sizeof(struct push_mse),
                    SPEC_MSE_COUNT};
    w = gpu_kernel_writable(&m);
    TH_CHECK(w == 0x8u, "mse: only binding 3 (D, or the forward's loss) written (mask 0x%x)",
             w);
    static const uint32_t junk[8] = {0xdeadbeef, 1, 2, 3, 4, 5, 6, 7};
    gpu_kernel bad = {"junk", junk, sizeof junk, 3, {S, S, S}, 0, 0};
    w = gpu_kernel_writable(&bad);
    TH_CHECK(w == 0x7u, "unreadable SPIR-V: every binding counts as written (mask 0x%x)", w);
}

int main(void)
{
    th_init("test_spirv");
    check_descriptions();
    check_writable();
    check_pipeline();
    return th_finish();
}
