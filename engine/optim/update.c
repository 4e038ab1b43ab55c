/* update.c - recording an optimizer update into a stream: with clipping, the gradient
 * norm pass (shaders/optim_norm.comp), then the update of all parameters
 * (shaders/optim_update.comp). One dispatch each per chunk of at most
 * ku_chunk_elements, so any n fits maxStorageBufferRange (one chunk holds 2^25 - 4
 * elements under lavapipe's 128 MiB). */
#include "optim/optim.h"

#include "gpu/gpu.h"
#include "kernels/kernel_util.h"
#include "spec.h"

#include <math.h>
#include "optim_norm.spv.h"
#include "optim_update.spv.h"

/* shaders/optim_update.comp uses these codes for KIND. */
_Static_assert(VKT_OPTIMIZER_SGD == 0 && VKT_OPTIMIZER_ADAM == 1 && VKT_OPTIMIZER_ADAMW == 2,
               "optimizer kinds differ from shaders/optim_update.comp");

static const gpu_kernel k_norm = {
    "optim_norm", spv_optim_norm, sizeof spv_optim_norm, 2,
    {GPU_BIND_STORAGE, GPU_BIND_STORAGE}, sizeof(struct push_optim), SPEC_WG_ONLY_COUNT};
static const gpu_kernel k_update = {
    "optim_update", spv_optim_update, sizeof spv_optim_update, 6,
    {GPU_BIND_STORAGE, GPU_BIND_STORAGE, GPU_BIND_STORAGE, GPU_BIND_STORAGE, GPU_BIND_STORAGE,
     GPU_BIND_STORAGE},
    sizeof(struct push_optim), SPEC_OPTIM_UPDATE_COUNT};

static uint64_t chunk_count(const vkt_optimizer *opt, uint64_t first)
{
    return opt->n - first < opt->chunk ? opt->n - first : opt->chunk;
}

/* The vec4 split of `count` elements whose bindings start at element shifts off[0..k):
 * possible when all share one phase mod 4. Sets head (elements before the first vec4)
 * and returns the number of vec4s (0: element by element). */
static uint32_t vec4_split(const uint32_t *off, uint32_t k, uint64_t count, uint32_t *head)
{
    *head = 0;
    for (uint32_t i = 1; i < k; i++)
        if (off[i] % 4 != off[0] % 4)
            return 0;
    uint32_t h = (4 - off[0] % 4) % 4;
    if (count < (uint64_t)h + 4)
        return 0;
    *head = h;
    return (uint32_t)((count - h) / 4);
}

/* Workgroups of a grid-stride pass over `count` elements (a quarter as many vec4s). */
static uint32_t grid(const vkt_optimizer *opt, uint64_t count, uint32_t nvec, uint32_t cap)
{
    return ku_groups(nvec ? nvec : count, opt->wg, cap);
}

/* Sums of squares of every chunk of the gradient into parts[0, n_parts). */
static vkt_status record_norm(vkt_optimizer *opt, vkt_stream *s, vkt_view grads)
{
    vkt_context *ctx = opt->ctx;
    vkt_view parts = {opt->parts, 0};
    uint32_t part = 0, spec[SPEC_WG_ONLY_COUNT] = {[SPEC_WG] = opt->wg};
    for (uint64_t first = 0; first < opt->n; first += opt->chunk) {
        uint64_t count = chunk_count(opt, first);
        uint32_t groups = ku_groups(count, opt->wg, opt->norm_groups);
        struct push_optim push = {.n = (uint32_t)count,
                                      .g_off = ku_shift(ctx, grads, first),
                                      .part_off = ku_shift(ctx, parts, part)};
        push.nvec = vec4_split(&push.g_off, 1, count, &push.head);
        gpu_arg args[2] = {ku_arg(grads, first, count, 0), ku_arg(parts, part, groups, 1)};
        uint32_t g3[3] = {groups, 1, 1};
        vkt_status st = gpu_dispatch(s, &k_norm, spec, SPEC_WG_ONLY_COUNT, args, &push, g3);
        if (st != VKT_OK)
            return st;
        part += groups;
    }
    VKT_ASSERT(ctx->errmsg, part == opt->n_parts);
    return VKT_OK;
}

static vkt_status record_update(vkt_optimizer *opt, vkt_stream *s, vkt_view params,
                                vkt_view grads, int clip)
{
    vkt_context *ctx = opt->ctx;
    uint32_t spec[SPEC_OPTIM_UPDATE_COUNT] = {
        [SPEC_WG] = opt->wg, [SPEC_OPTIM_UPDATE_KIND] = (uint32_t)opt->o.kind,
        [SPEC_OPTIM_UPDATE_MOMENTUM] = opt->n_moments == 1,
        [SPEC_OPTIM_UPDATE_CLIP] = (uint32_t)clip,
        [SPEC_OPTIM_UPDATE_GUARD] = (uint32_t)opt->guard};
    int norm = clip || opt->guard; /* the partials were written */
    vkt_view state = {opt->state, 0};
    for (uint64_t first = 0; first < opt->n; first += opt->chunk) {
        uint64_t count = chunk_count(opt, first);
        /* m: SGD's velocity or Adam's first moment; v: Adam's second moment. Where the
         * kind keeps less, the binding points at what exists and the kernel never
         * touches it. */
        uint64_t m_first = opt->n_moments ? first : 0, m_count = opt->n_moments ? count : 1;
        uint64_t v_first = opt->n_moments == 2 ? opt->v_offset + first : m_first;
        struct push_optim push = {
            .n = (uint32_t)count,
            .p_off = ku_shift(ctx, params, first),
            .g_off = ku_shift(ctx, grads, first),
            .m_off = ku_shift(ctx, state, m_first),
            .v_off = ku_shift(ctx, state, v_first),
            .n_parts = norm ? opt->n_parts : 0,
        };
        const uint32_t offs[4] = {push.p_off, push.g_off, push.m_off, push.v_off};
        push.nvec = vec4_split(offs, 2 + opt->n_moments, count, &push.head);
        gpu_arg args[6] = {
            ku_arg(params, first, count, 1),
            ku_arg(grads, first, count, 0),
            ku_arg(state, m_first, m_count, opt->n_moments > 0),
            ku_arg(state, v_first, m_count, opt->n_moments == 2),
            {opt->hyper, 0, sizeof(struct optim_step_hyper), 0},
            ku_arg((vkt_view){opt->parts, 0}, 0, norm ? opt->n_parts : 1, 0),
        };
        uint32_t g3[3] = {grid(opt, count, push.nvec, opt->update_groups), 1, 1};
        vkt_status st = gpu_dispatch(s, &k_update, spec, SPEC_OPTIM_UPDATE_COUNT, args, &push, g3);
        if (st != VKT_OK)
            return st;
    }
    return VKT_OK;
}

vkt_status vkt_optimizer_record(vkt_optimizer *opt, vkt_stream *stream, vkt_view params,
                                vkt_view grads)
{
    static const char fn[] = "vkt_optimizer_record";
    if (!opt)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "%s: optimizer is NULL", fn);
    vkt_context *ctx = opt->ctx;
    if (!stream)
        return err_fail(ctx->errmsg, VKT_ERROR_INVALID_ARGUMENT, "%s: stream is NULL", fn);
    if (stream->ctx != ctx)
        return err_fail(ctx->errmsg, VKT_ERROR_INVALID_ARGUMENT,
                        "%s: the stream belongs to another context than the optimizer", fn);
    vkt_status st = gpu_check_view(ctx, "vkt_optimizer_record: params", params, opt->n);
    if (st == VKT_OK)
        st = gpu_check_view(ctx, "vkt_optimizer_record: grads", grads, opt->n);
    if (st != VKT_OK)
        return st;
    if (params.buffer == grads.buffer && params.offset < grads.offset + opt->n &&
        grads.offset < params.offset + opt->n)
        return err_fail(ctx->errmsg, VKT_ERROR_INVALID_ARGUMENT,
                        "%s: params (elements [%llu, %llu)) and grads (elements [%llu, %llu)) "
                        "overlap", fn, (unsigned long long)params.offset,
                        (unsigned long long)(params.offset + opt->n),
                        (unsigned long long)grads.offset,
                        (unsigned long long)(grads.offset + opt->n));
    int clip = opt->o.clip_norm > 0.0f;
    if ((clip || opt->guard) && (st = record_norm(opt, stream, grads)) != VKT_OK)
        return st;
    if ((st = record_update(opt, stream, params, grads, clip)) != VKT_OK)
        return st;
    if (!clip)
        opt->recorded_without_clip = 1;
    return VKT_OK;
}

vkt_status optim_guard_nonfinite(vkt_optimizer *opt)
{
    if (opt->guard)
        return VKT_OK;
    vkt_buffer *parts = NULL;
    vkt_status st = vkt_buffer_create(opt->ctx, (uint64_t)(opt->n_parts ? opt->n_parts : 1) * 4,
                                      VKT_MEMORY_HOST, &parts);
    if (st != VKT_OK)
        return st;
    const float *map = vkt_buffer_map(parts);
    if (!map) {
        vkt_buffer_destroy(parts);
        return err_fail(opt->ctx->errmsg, VKT_ERROR_INTERNAL,
                        "optimizer: host-visible memory without a mapping");
    }
    vkt_buffer_destroy(opt->parts);
    opt->parts = parts;
    opt->parts_map = map;
    opt->guard = 1;
    return VKT_OK;
}

int optim_skipped(const vkt_optimizer *opt)
{
    if (!opt || !opt->guard)
        return 0;
    float sum = 0.0f; /* as the kernel adds them: in order, in fp32 */
    for (uint32_t i = 0; i < opt->n_parts; i++)
        sum += opt->parts_map[i];
    return isnan(sum) || isinf(sum);
}
