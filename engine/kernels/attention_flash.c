/* attention_flash.c - dispatch of shaders/attention_flash.comp, the variant
 * attention_flash (and of attention_flash_lowp.comp, attention_lowp_flash: 16-bit qkv and
 * dy, everything else alike): the forward saves the row logsumexps [b, heads, t]; the
 * backward runs by query blocks (dq and D_i = dy_i . y_i into the workspace [b, heads,
 * t]), then by key blocks (dk, dv). Lanes, rows, tile and grid of each pass come from the plan
 * (attention_plan.c). */
#include "kernels/attention_impl.h"
#include "kernels/kernel_util.h"
#include "spec.h"
#include "attention_flash.spv.h"
#include "attention_flash_lowp.spv.h"

#define S GPU_BIND_STORAGE

/* Bindings: 0 qkv, 1 y, 2 saved (lse), 3 ctrl, 4 dqkv, 5 workspace (D), 6 dy. */
static const gpu_kernel k_flash = {
    "attention_flash", spv_attention_flash, sizeof spv_attention_flash, 7,
    {S, S, S, S, S, S, S}, sizeof(struct push_attention), SPEC_FLASH_COUNT};
/* attention_lowp_flash: the same with bindings 0 (qkv) and 6 (dy) of 16-bit elements */
static const gpu_kernel k_flash_lowp = {
    "attention_flash_lowp", spv_attention_flash_lowp, sizeof spv_attention_flash_lowp, 7,
    {S, S, S, S, S, S, S}, sizeof(struct push_attention), SPEC_FLASH_LOWP_COUNT};

enum { PASS_FORWARD = 0, PASS_BACKWARD_Q = 1, PASS_BACKWARD_KV = 2 };

/* Records one pass. */
static vkt_status dispatch(vkt_stream *s, const ka_call *c, uint32_t pass)
{
    vkt_context *ctx = c->ctx;
    const ka_pass *ps = &c->plan.pass[pass];
    if (ps->blocks > UINT32_MAX || ps->groups[1] > GPU_MAX_GROUPS)
        return err_fail(ctx->errmsg, VKT_ERROR_LIMIT, "%s: %llu row blocks are too many",
                        c->fn, (unsigned long long)ps->blocks);
    /* Rows as vec4s: d a multiple of 4 (every row and head column then starts at a
     * multiple of 4) and element 0 of every fp32 row view aligned (the 16-bit qkv and dy
     * of attention_lowp_flash are read element by element). */
    int vec = c->d % 4 == 0;
    const int rows[4] = {KA_QKV, KA_Y, KA_DY, KA_DQKV};
    for (int i = 0; i < 4 && vec; i++)
        if (c->used[rows[i]] && ka_size(c, rows[i]) == 4 &&
            !ku_vec4_aligned(ctx, c->view[rows[i]]))
            vec = 0;
    struct push_attention p = ka_push(c, ps);
    gpu_arg args[KA_SLOTS];
    for (int i = 0; i < KA_SLOTS; i++)
        args[i] = ka_arg(c, i);
    if (pass == PASS_BACKWARD_KV)
        args[KA_WS].write = 0; /* reads the D that PASS 1 wrote */
    uint32_t spec[SPEC_FLASH_LOWP_COUNT] = {
        [SPEC_WG] = ps->threads, [SPEC_FLASH_PASS] = pass, [SPEC_FLASH_D] = c->d,
        [SPEC_FLASH_LANES] = ps->lanes, [SPEC_FLASH_ROWS] = ps->rows,
        [SPEC_FLASH_TILE] = ps->tile, [SPEC_FLASH_VEC] = (uint32_t)vec,
        [SPEC_FLASH_BF16] = c->lp == VKT_DTYPE_BF16};
    const gpu_kernel *k = c->lp == VKT_DTYPE_FP32 ? &k_flash : &k_flash_lowp;
    return gpu_dispatch(s, k, spec, k->n_spec, args, &p, ps->groups);
}

vkt_status ka_flash_forward(vkt_stream *s, const ka_call *c)
{
    return dispatch(s, c, PASS_FORWARD);
}

vkt_status ka_flash_backward(vkt_stream *s, const ka_call *c)
{
    vkt_status st = dispatch(s, c, PASS_BACKWARD_Q);
    return st == VKT_OK ? dispatch(s, c, PASS_BACKWARD_KV) : st;
}
