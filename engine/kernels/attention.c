/* attention.c - the causal attention calls (attention.h): arguments checked once for
 * every variant, the plan (attention_plan.c) of the context's variant, and the table
 * that hands the call to its kernel's dispatch code (attention_rows.c,
 * attention_flash.c). */
#include "kernels/attention.h"

#include <math.h>
#include <stdio.h>

#include "kernels/attention_impl.h"
#include "kernels/kernel_util.h"
#include "ctrl.h"
#include "dropout_hash.h"

/* One row per attention variant: its dispatch code. */
typedef struct ka_impl {
    gpu_variant variant;
    vkt_status (*forward)(vkt_stream *s, const ka_call *c);
    vkt_status (*backward)(vkt_stream *s, const ka_call *c);
} ka_impl;

static const ka_impl k_impls[] = {
    {GPU_V_ATTENTION_SHUFFLE, ka_rows_forward, ka_rows_backward},
    {GPU_V_ATTENTION_FLASH, ka_flash_forward, ka_flash_backward},
    {GPU_V_ATTENTION_ROWS, ka_rows_forward, ka_rows_backward},
    {GPU_V_ATTENTION_LOWP_FLASH, ka_flash_forward, ka_flash_backward},
    {GPU_V_ATTENTION_LOWP_COOPMAT, ka_cm_forward, ka_cm_backward},
    {GPU_V_ATTENTION_LOWP_FRAG, ka_cm_forward, ka_cm_backward},
};

static const ka_impl *impl_of(gpu_variant v)
{
    for (size_t i = 0; i < sizeof k_impls / sizeof k_impls[0]; i++)
        if (k_impls[i].variant == v)
            return &k_impls[i];
    return NULL;
}

/* Whether the device runs attention_flash (the fallback for long sequences). */
static int flash_runs(const vkt_context *ctx)
{
    return gpu_variant_runs(gpu_variant_row_of(GPU_V_ATTENTION_FLASH), &ctx->profile, NULL, 0);
}

ka_plan ka_attention_plan_for(const vkt_context *ctx, uint32_t b, uint32_t t, uint32_t heads,
                              uint32_t d)
{
    if (!ctx)
        return (ka_plan){.variant = GPU_V_NONE};
    gpu_variant v = ctx->kv[GPU_FAMILY_ATTENTION];
    ka_plan plan = ka_attention_plan(&ctx->profile, v, b, t, heads, d);
    if (impl_of(v) && t > plan.max_t && v != GPU_V_ATTENTION_FLASH && flash_runs(ctx)) {
        ka_plan flash = ka_attention_plan(&ctx->profile, GPU_V_ATTENTION_FLASH, b, t, heads, d);
        if (flash.max_t > plan.max_t)
            return flash;
    }
    return plan;
}

static ka_plan plan_of(const vkt_context *ctx, uint32_t b, uint32_t t, uint32_t heads,
                       uint32_t d)
{
    return ka_attention_plan_for(ctx, b, t, heads, d);
}

/* A call's plan: the fp32 one, or the fused attention_lowp variant's (a 16-bit call
 * reaches ka_check only in those: attention_lowp.c), whose tiles are attention_flash's. */
static ka_plan call_plan(const ka_call *c)
{
    if (c->lp == VKT_DTYPE_FP32)
        return plan_of(c->ctx, c->b, c->t, c->heads, c->d);
    return ka_attention_plan(&c->ctx->profile, c->ctx->kv[GPU_FAMILY_ATTENTION_LOWP], c->b,
                             c->t, c->heads, c->d);
}

uint64_t ka_attention_saved_elems(const vkt_context *ctx, uint32_t b, uint32_t t,
                                  uint32_t heads, uint32_t d)
{
    return ctx ? plan_of(ctx, b, t, heads, d).saved_elems : 0;
}

uint64_t ka_attention_workspace_elems(const vkt_context *ctx, uint32_t b, uint32_t t,
                                      uint32_t heads, uint32_t d)
{
    return ctx ? plan_of(ctx, b, t, heads, d).workspace_elems : 0;
}

uint32_t ka_attention_max_t(const vkt_context *ctx, uint32_t d)
{
    if (!ctx || !impl_of(ctx->kv[GPU_FAMILY_ATTENTION]))
        return 0;
    /* planned for a long sequence: the workgroups long sequences get */
    const uint32_t t = 1u << 20;
    uint32_t own = ka_attention_plan(&ctx->profile, ctx->kv[GPU_FAMILY_ATTENTION], 1, t, 1, d).max_t;
    uint32_t flash = flash_runs(ctx)
                         ? ka_attention_plan(&ctx->profile, GPU_V_ATTENTION_FLASH, 1, t, 1, d).max_t
                         : 0;
    return own > flash ? own : flash;
}

static const char *const k_names[KA_SLOTS] = {"qkv", "y", "saved", "ctrl", "dqkv",
                                              "workspace", "dy"};

uint32_t ka_size(const ka_call *c, int slot)
{
    int narrow = slot == KA_QKV || slot == KA_DY || !c->used[slot];
    return c->lp != VKT_DTYPE_FP32 && narrow ? 2 : 4;
}

/* Whether two slots' views share bytes. */
static int overlap(const ka_call *c, int x, int y)
{
    const vkt_view *a = &c->view[x], *b = &c->view[y];
    uint64_t sa = ka_size(c, x), sb = ka_size(c, y);
    return a->buffer == b->buffer && a->offset * sa < (b->offset + c->count[y]) * sb &&
           b->offset * sb < (a->offset + c->count[x]) * sa;
}

/* Sizes, limits, views, and outputs that alias something else. */
vkt_status ka_check(vkt_stream *s, ka_call *c)
{
    if (!s)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "%s: stream is NULL", c->fn);
    vkt_context *ctx = c->ctx = s->ctx;
    if (c->b == 0 || c->t == 0 || c->heads == 0 || c->d == 0)
        return err_fail(ctx->errmsg, VKT_ERROR_INVALID_ARGUMENT,
                        "%s: b, t, heads and d must be at least 1 (got b=%u t=%u heads=%u d=%u)",
                        c->fn, c->b, c->t, c->heads, c->d);
    if (!(c->p_drop >= 0.0f && c->p_drop < 1.0f))
        return err_fail(ctx->errmsg, VKT_ERROR_INVALID_ARGUMENT,
                        "%s: p_drop is %g; it must lie in [0, 1)", c->fn, (double)c->p_drop);
    if (!isfinite(c->beta))
        return err_fail(ctx->errmsg, VKT_ERROR_INVALID_ARGUMENT, "%s: beta is %g", c->fn,
                        (double)c->beta);
    if (c->d > KA_MAX_D)
        return err_fail(ctx->errmsg, VKT_ERROR_LIMIT,
                        "%s: head width d = %u; at most %u is supported", c->fn, c->d, KA_MAX_D);
    c->plan = call_plan(c);
    if (!impl_of(c->plan.variant))
        return err_fail(ctx->errmsg, VKT_ERROR_LIMIT,
                        "%s: the device has no subgroup shuffles in compute shaders", c->fn);
    if (c->t > c->plan.max_t)
        return err_fail(ctx->errmsg, VKT_ERROR_LIMIT,
                        "%s: t = %u positions with d = %u exceed what this device runs (its "
                        "shader loops stop after %llu iterations): at most t = %u", c->fn, c->t,
                        c->d, (unsigned long long)ku_loop_budget(ctx),
                        c->lp == VKT_DTYPE_FP32 ? ka_attention_max_t(ctx, c->d) : c->plan.max_t);
    if (c->used[KA_WS] && c->plan.saved == KA_SAVED_PROBS) {
        /* the probs variants' backward does not read y (a model may reuse its memory) */
        c->view[KA_Y] = c->view[KA_QKV];
        c->count[KA_Y] = c->count[KA_QKV];
        c->used[KA_Y] = 0;
    }
    c->count[KA_SAVED] = c->plan.saved_elems;
    if (c->used[KA_WS])
        c->count[KA_WS] = c->plan.workspace_elems;
    /* 32-bit indices in the shaders, from a binding start a little before each view. */
    for (int i = 0; i < KA_SLOTS; i++)
        if (c->count[i] > (1ull << 31) - 1024)
            return err_fail(ctx->errmsg, VKT_ERROR_LIMIT,
                            "%s: %s has %llu elements; at most 2^31 - 1024 are supported",
                            c->fn, k_names[i], (unsigned long long)c->count[i]);
    for (int i = 0; i < KA_SLOTS; i++) {
        char what[64];
        snprintf(what, sizeof what, "%s: %s", c->fn, k_names[i]);
        vkt_status st = ka_size(c, i) == 2 ? ku_check_view16(ctx, what, c->view[i], c->count[i])
                                           : gpu_check_view(ctx, what, c->view[i], c->count[i]);
        if (st != VKT_OK)
            return st;
    }
    for (int x = 0; x < KA_SLOTS; x++)
        for (int y = 0; y < KA_SLOTS; y++)
            if (x != y && c->write[x] && c->used[y] && overlap(c, x, y))
                return err_fail(ctx->errmsg, VKT_ERROR_INVALID_ARGUMENT,
                                "%s: %s (elements [%llu, %llu)) overlaps %s; an output must "
                                "not alias another argument", c->fn, k_names[x],
                                (unsigned long long)c->view[x].offset,
                                (unsigned long long)(c->view[x].offset + c->count[x]),
                                k_names[y]);
    return VKT_OK;
}

void ka_setup(ka_call *c, const char *fn, vkt_view qkv, vkt_view y, vkt_view saved,
              vkt_view ctrl, uint32_t b, uint32_t t, uint32_t heads, uint32_t d, float p_drop,
              uint64_t seed, uint64_t b0, uint64_t b_row)
{
    *c = (ka_call){.fn = fn, .b = b, .t = t, .heads = heads, .d = d, .p_drop = p_drop,
                   .seed = seed, .b0 = b0, .b_row = b_row};
    uint64_t rows = (uint64_t)b * t;
    for (int i = 0; i < KA_SLOTS; i++) {
        c->view[i] = qkv;
        c->count[i] = rows * 3 * heads * d;
    }
    c->used[KA_QKV] = c->used[KA_Y] = c->used[KA_SAVED] = 1;
    c->write[KA_Y] = c->write[KA_SAVED] = 1;
    c->view[KA_Y] = y;
    c->count[KA_Y] = rows * heads * d;
    c->view[KA_SAVED] = saved;
    if (p_drop != 0.0f || ctrl.buffer) {
        c->view[KA_CTRL] = ctrl;
        c->count[KA_CTRL] = b_row ? CTRL_KEY_WORDS : 2; /* the step, then the row base */
        c->used[KA_CTRL] = 1;
    }
}

void ka_setup_backward(ka_call *c, vkt_view dy, vkt_view dqkv, float beta, vkt_view workspace)
{
    c->beta = beta;
    c->view[KA_DY] = dy;
    c->count[KA_DY] = c->count[KA_Y];
    c->view[KA_DQKV] = dqkv;
    c->view[KA_WS] = workspace;
    c->used[KA_DY] = c->used[KA_DQKV] = c->used[KA_WS] = 1;
    c->write[KA_DQKV] = c->write[KA_WS] = 1;
    c->write[KA_Y] = c->write[KA_SAVED] = 0;
}

vkt_status ka_run(vkt_stream *s, const ka_call *c, int backward)
{
    const ka_impl *im = impl_of(c->plan.variant);
    return backward ? im->backward(s, c) : im->forward(s, c);
}

/* Elements (of the slot's size) between the slot's aligned binding start and its view. */
static uint32_t shift(const ka_call *c, int slot)
{
    uint32_t size = ka_size(c, slot);
    return gpu_arg_shift_bytes(c->ctx, c->view[slot].offset * size, GPU_BIND_STORAGE) / size;
}

struct push_attention ka_push(const ka_call *c, const ka_pass *pass)
{
    return (struct push_attention){
        .b = c->b, .t = c->t, .heads = c->heads, .d = c->d,
        .blocks_per_head = pass->blocks_per_head, .blocks = (uint32_t)pass->blocks,
        .scale = (float)(1.0 / sqrt((double)c->d)),
        .drop_scale = (float)(1.0 / (1.0 - (double)c->p_drop)),
        .dropout = c->p_drop > 0.0f, .threshold = dropout_threshold(c->p_drop),
        .seed_lo = (uint32_t)c->seed, .seed_hi = (uint32_t)(c->seed >> 32), .beta = c->beta,
        .qkv_off = shift(c, KA_QKV), .y_off = shift(c, KA_Y), .p_off = shift(c, KA_SAVED),
        .c_off = shift(c, KA_CTRL), .dqkv_off = shift(c, KA_DQKV), .ws_off = shift(c, KA_WS),
        .dy_off = shift(c, KA_DY),
        /* sequence bb keyed as b0 + row0 b_row + bb (row0 read from ctrl): its mask
         * indices move by that times heads t t (mod 2^32) */
        .drop_off = (uint32_t)(c->b0 * c->heads * c->t * c->t),
        .drop_row = (uint32_t)(c->b_row * c->heads * c->t * c->t)};
}

gpu_arg ka_arg(const ka_call *c, int slot)
{
    uint64_t size = ka_size(c, slot);
    return (gpu_arg){c->view[slot].buffer, c->view[slot].offset * size, c->count[slot] * size,
                     c->write[slot]};
}

vkt_status ka_attention(vkt_stream *s, vkt_view qkv, vkt_view y, vkt_view saved, vkt_view ctrl,
                        uint32_t b, uint32_t t, uint32_t heads, uint32_t d, float p_drop,
                        uint64_t seed, uint64_t b0, uint64_t b_row)
{
    ka_call c;
    ka_setup(&c, "ka_attention", qkv, y, saved, ctrl, b, t, heads, d, p_drop, seed, b0, b_row);
    vkt_status st = ka_check(s, &c);
    return st != VKT_OK ? st : ka_run(s, &c, 0);
}

vkt_status ka_attention_backward(vkt_stream *s, vkt_view qkv, vkt_view y, vkt_view saved,
                                 vkt_view ctrl, vkt_view dy, vkt_view dqkv, float beta,
                                 vkt_view workspace, uint32_t b, uint32_t t, uint32_t heads,
                                 uint32_t d, float p_drop, uint64_t seed, uint64_t b0, uint64_t b_row)
{
    ka_call c;
    ka_setup(&c, "ka_attention_backward", qkv, y, saved, ctrl, b, t, heads, d, p_drop, seed,
             b0, b_row);
    ka_setup_backward(&c, dy, dqkv, beta, workspace);
    vkt_status st = ka_check(s, &c);
    return st != VKT_OK ? st : ka_run(s, &c, 1);
}
