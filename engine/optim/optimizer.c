/* optimizer.c - the optimizer object: creation (state, hyperparameter and partial-sum
 * buffers), per-step hyperparameters, option changes, and state for checkpoints. */
#include "optim/optim.h"

#include "gpu/gpu.h"
#include "kernels/kernel_util.h"

#include <stdlib.h>
#include <string.h>

_Static_assert(sizeof(struct optim_step_hyper) == 12 * 4,
               "struct optim_step_hyper must hold 4-byte scalars only (std430 = C layout)");

/* Writes the hyperparameters of `step` where the kernel reads them. The memory is
 * host-coherent and the next vkQueueSubmit makes host writes visible to the device. */
static void write_hyper(vkt_optimizer *opt, uint64_t step)
{
    struct optim_step_hyper h;
    optim_hyper(&opt->o, step, &h);
    memcpy(opt->hyper_map, &h, sizeof h);
    opt->step = step;
}

/* Chunks, workgroup size and partial sums: fixed by n and the device, so a later
 * recording at any offset finds the partial-sum buffer the right size. */
static void plan(vkt_optimizer *opt)
{
    vkt_context *ctx = opt->ctx;
    opt->wg = ku_workgroup_size(ctx);
    opt->chunk = ku_chunk_elements(ctx);
    /* Every update invocation adds all partials of the norm pass, so they are few. On a
     * CPU device (lavapipe) a few workgroups per core is best: each invocation of the
     * update starts by reading the hyperparameters and adding the partials, so more
     * invocations only add that (Adam on 235k parameters, one lavapipe thread: 64
     * groups 1.8x faster than 1024). */
    opt->norm_groups = ctx->profile.optim_norm_groups;
    opt->update_groups = ctx->profile.optim_update_groups;
    opt->n_parts = 0;
    for (uint64_t first = 0; first < opt->n; first += opt->chunk) {
        uint64_t count = opt->n - first < opt->chunk ? opt->n - first : opt->chunk;
        opt->n_parts += ku_groups(count, opt->wg, opt->norm_groups);
    }
}

/* Moments start at 0: one fill (split into bindings the device accepts), run now. */
static vkt_status zero_state(vkt_optimizer *opt)
{
    vkt_stream *s = NULL;
    vkt_status st = vkt_stream_create(opt->ctx, NULL, &s);
    if (st == VKT_OK)
        st = vkt_fill(s, (vkt_view){opt->state, 0}, vkt_buffer_size(opt->state) / 4, 0.0f);
    if (st == VKT_OK)
        st = vkt_stream_run(s);
    vkt_stream_destroy(s);
    return st;
}

vkt_status vkt_optimizer_create(vkt_context *ctx, const vkt_optimizer_options *options,
                                uint64_t n_params, vkt_optimizer **out)
{
    static const char fn[] = "vkt_optimizer_create";
    if (!out)
        return err_fail(ctx ? ctx->errmsg : NULL, VKT_ERROR_INVALID_ARGUMENT, "%s: out is NULL",
                        fn);
    *out = NULL;
    if (!ctx)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "%s: context is NULL", fn);
    if (n_params == 0)
        return err_fail(ctx->errmsg, VKT_ERROR_INVALID_ARGUMENT, "%s: n_params is 0", fn);
    vkt_optimizer_options o;
    vkt_status st = optim_resolve(ctx->errmsg, fn, options, &o);
    if (st != VKT_OK)
        return st;
    uint32_t n_moments = optim_moments(&o);
    if (n_params > UINT64_MAX / 8 / (n_moments ? n_moments : 1))
        return err_fail(ctx->errmsg, VKT_ERROR_OUT_OF_MEMORY, "%s: %llu parameters are too many",
                        fn, (unsigned long long)n_params);

    vkt_optimizer *opt = calloc(1, sizeof *opt);
    if (!opt)
        return err_fail(ctx->errmsg, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    opt->ctx = ctx;
    opt->o = o;
    opt->n = n_params;
    opt->n_moments = n_moments;
    plan(opt);
    opt->v_offset = (n_params + 3) / 4 * 4;
    uint64_t state_elems = n_moments == 2 ? opt->v_offset + n_params : n_moments ? n_params : 1;
    st = vkt_buffer_create(ctx, state_elems * 4, VKT_MEMORY_DEVICE, &opt->state);
    if (st == VKT_OK)
        st = vkt_buffer_create(ctx, sizeof(struct optim_step_hyper), VKT_MEMORY_HOST,
                               &opt->hyper);
    if (st == VKT_OK)
        st = vkt_buffer_create(ctx, (uint64_t)(opt->n_parts ? opt->n_parts : 1) * 4,
                               VKT_MEMORY_DEVICE, &opt->parts);
    if (st == VKT_OK && !(opt->hyper_map = vkt_buffer_map(opt->hyper)))
        st = err_fail(ctx->errmsg, VKT_ERROR_INTERNAL,
                      "%s: the host-visible hyperparameter buffer has no mapping", fn);
    if (st == VKT_OK && n_moments) /* moments start at 0 */
        st = zero_state(opt);
    if (st != VKT_OK) {
        vkt_optimizer_destroy(opt);
        return st;
    }
    write_hyper(opt, 0);
    *out = opt;
    return VKT_OK;
}

void vkt_optimizer_destroy(vkt_optimizer *opt)
{
    if (!opt)
        return;
    vkt_buffer_destroy(opt->parts);
    vkt_buffer_destroy(opt->hyper);
    vkt_buffer_destroy(opt->state);
    free(opt);
}

vkt_status vkt_optimizer_set_step(vkt_optimizer *opt, uint64_t step)
{
    if (!opt)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, 
                        "vkt_optimizer_set_step: optimizer is NULL");
    write_hyper(opt, step);
    return VKT_OK;
}

uint64_t vkt_optimizer_step(const vkt_optimizer *opt) { return opt ? opt->step : 0; }

uint64_t vkt_optimizer_size(const vkt_optimizer *opt) { return opt ? opt->n : 0; }

vkt_status vkt_optimizer_set_options(vkt_optimizer *opt, const vkt_optimizer_options *options)
{
    static const char fn[] = "vkt_optimizer_set_options";
    if (!opt)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "%s: optimizer is NULL", fn);
    char *errmsg = opt->ctx->errmsg;
    vkt_optimizer_options o;
    vkt_status st = optim_resolve(errmsg, fn, options, &o);
    if (st != VKT_OK)
        return st;
    if (o.kind != opt->o.kind)
        return err_fail(errmsg, VKT_ERROR_INVALID_ARGUMENT,
                        "%s: the optimizer is %s and cannot become %s; create a new one", fn,
                        vkt_optimizer_kind_name(opt->o.kind), vkt_optimizer_kind_name(o.kind));
    if (optim_moments(&o) > opt->n_moments)
        return err_fail(errmsg, VKT_ERROR_STATE,
                        "%s: this SGD optimizer was created without momentum and keeps no "
                        "velocity; create it with momentum > 0 to use momentum", fn);
    if (o.clip_norm > 0.0f && opt->recorded_without_clip)
        return err_fail(errmsg, VKT_ERROR_STATE,
                        "%s: clipping was off when the update was recorded, so the gradient "
                        "norm pass is missing; record the update again (after "
                        "vkt_stream_reset) to turn clipping on", fn);
    opt->o = o;
    write_hyper(opt, opt->step);
    return VKT_OK;
}

vkt_status vkt_optimizer_get_options(const vkt_optimizer *opt, vkt_optimizer_options *out)
{
    if (!opt || !out)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT,
                        "vkt_optimizer_get_options: %s is NULL", opt ? "out" : "optimizer");
    *out = opt->o;
    return VKT_OK;
}

/* ---- state ------------------------------------------------------------------- */

#define STATE_MAGIC "VKTOPTM"  /* 8 bytes with the NUL */
#define STATE_VERSION 1u

/* The state blob: this header (host byte order), then the moments as floats. */
typedef struct state_header {
    char magic[8];
    uint32_t version;
    uint32_t kind;
    uint64_t n_params;
    uint32_t n_moments;
    uint32_t reserved;
    uint64_t step;
} state_header;

uint64_t vkt_optimizer_state_size(const vkt_optimizer *opt)
{
    if (!opt)
        return 0;
    return sizeof(state_header) + (uint64_t)opt->n_moments * opt->n * 4;
}

uint64_t optim_state_header_size(void) { return sizeof(state_header); }

void optim_state_set_count(void *blob, uint64_t n)
{
    state_header h;
    memcpy(&h, blob, sizeof h);
    h.n_params = n;
    memcpy(blob, &h, sizeof h);
}

static vkt_status check_size(vkt_optimizer *opt, const char *fn, const void *host,
                             uint64_t bytes)
{
    if (!host)
        return err_fail(opt->ctx->errmsg, VKT_ERROR_INVALID_ARGUMENT, "%s: host is NULL", fn);
    if (bytes != vkt_optimizer_state_size(opt))
        return err_fail(opt->ctx->errmsg, VKT_ERROR_SHAPE,
                        "%s: %llu bytes given; the state of this optimizer takes %llu "
                        "(vkt_optimizer_state_size)", fn, (unsigned long long)bytes,
                        (unsigned long long)vkt_optimizer_state_size(opt));
    return VKT_OK;
}

vkt_status vkt_optimizer_read_state(vkt_optimizer *opt, void *host, uint64_t bytes)
{
    static const char fn[] = "vkt_optimizer_read_state";
    if (!opt)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "%s: optimizer is NULL", fn);
    vkt_status st = check_size(opt, fn, host, bytes);
    if (st != VKT_OK)
        return st;
    state_header h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, STATE_MAGIC, sizeof h.magic);
    h.version = STATE_VERSION;
    h.kind = (uint32_t)opt->o.kind;
    h.n_params = opt->n;
    h.n_moments = opt->n_moments;
    h.step = opt->step;
    memcpy(host, &h, sizeof h);
    char *at = (char *)host + sizeof h;
    if (opt->n_moments)
        st = vkt_buffer_read(opt->state, 0, at, opt->n * 4);
    if (st == VKT_OK && opt->n_moments == 2)
        st = vkt_buffer_read(opt->state, opt->v_offset * 4, at + opt->n * 4, opt->n * 4);
    return st;
}

vkt_status vkt_optimizer_write_state(vkt_optimizer *opt, const void *host, uint64_t bytes)
{
    static const char fn[] = "vkt_optimizer_write_state";
    if (!opt)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "%s: optimizer is NULL", fn);
    char *errmsg = opt->ctx->errmsg;
    if (host && bytes >= sizeof(state_header)) { /* say what differs before the size */
        state_header h;
        memcpy(&h, host, sizeof h);
        if (memcmp(h.magic, STATE_MAGIC, sizeof h.magic) != 0 || h.version != STATE_VERSION)
            return err_fail(errmsg, VKT_ERROR_FORMAT,
                            "%s: not an optimizer state of this version (bad header)", fn);
        if (h.kind != (uint32_t)opt->o.kind || h.n_moments != opt->n_moments)
            return err_fail(errmsg, VKT_ERROR_SHAPE,
                            "%s: the state is of %s with %u moment arrays; this optimizer is "
                            "%s with %u", fn, vkt_optimizer_kind_name((vkt_optimizer_kind)h.kind),
                            h.n_moments, vkt_optimizer_kind_name(opt->o.kind), opt->n_moments);
        if (h.n_params != opt->n)
            return err_fail(errmsg, VKT_ERROR_SHAPE,
                            "%s: the state is of %llu parameters; this optimizer has %llu", fn,
                            (unsigned long long)h.n_params, (unsigned long long)opt->n);
    }
    vkt_status st = check_size(opt, fn, host, bytes);
    if (st != VKT_OK)
        return st;
    state_header h;
    memcpy(&h, host, sizeof h);
    const char *at = (const char *)host + sizeof h;
    if (opt->n_moments)
        st = vkt_buffer_write(opt->state, 0, at, opt->n * 4);
    if (st == VKT_OK && opt->n_moments == 2)
        st = vkt_buffer_write(opt->state, opt->v_offset * 4, at + opt->n * 4, opt->n * 4);
    if (st != VKT_OK)
        return st;
    write_hyper(opt, h.step);
    return VKT_OK;
}
