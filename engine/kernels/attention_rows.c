/* attention_rows.c - dispatch of shaders/attention.comp, the variants attention_shuffle
 * (CPU devices: 8-lane workgroups, row pairs through subgroup shuffles) and
 * attention_rows (one query row per lane, 64-lane workgroups). One shader, three passes
 * picked by a specialization constant; all take the same six bindings. The forward
 * saves the probabilities [b, heads, t, t]; the backward's workspace is dP [b, heads, t,
 * t] and D [b, heads, t]. */
#include "kernels/attention_impl.h"
#include "kernels/kernel_util.h"
#include "spec.h"
#include "attention.spv.h"

#define S GPU_BIND_STORAGE

/* Bindings: 0 qkv, 1 y / dy, 2 probs, 3 ctrl, 4 dqkv, 5 workspace. */
static const gpu_kernel k_attention = {
    "attention", spv_attention, sizeof spv_attention, 6, {S, S, S, S, S, S},
    sizeof(struct push_attention), SPEC_ATTENTION_COUNT};

enum { PASS_FORWARD = 0, PASS_BACKWARD_Q = 1, PASS_BACKWARD_KV = 2 };

static int vec4_ok(const ka_call *c, const int *slots, int n)
{
    for (int i = 0; i < n; i++)
        if (!ku_vec4_aligned(c->ctx, c->view[slots[i]]))
            return 0;
    return 1;
}

/* Records one pass. */
static vkt_status dispatch(vkt_stream *s, const ka_call *c, uint32_t pass)
{
    vkt_context *ctx = c->ctx;
    const ka_pass *ps = &c->plan.pass[pass];
    if (ps->blocks > UINT32_MAX || ps->groups[1] > GPU_MAX_GROUPS)
        return err_fail(ctx->errmsg, VKT_ERROR_LIMIT, "%s: %llu row blocks are too many",
                        c->fn, (unsigned long long)ps->blocks);
    int shuffle = c->plan.variant == GPU_V_ATTENTION_SHUFFLE;
    int backward = pass != PASS_FORWARD;
    /* Row vectors (qkv, y / dy, dqkv) as vec4s: d a multiple of 4 (then every row and
     * head column starts at a multiple of 4) and the views' element 0 aligned. */
    const int rows_fwd[2] = {KA_QKV, KA_Y}, rows_bwd[3] = {KA_QKV, KA_DY, KA_DQKV};
    const int mats[2] = {KA_SAVED, KA_WS};
    int vec = c->d % 4 == 0 && (backward ? vec4_ok(c, rows_bwd, 3) : vec4_ok(c, rows_fwd, 2));
    /* probs / dP rows as vec4s: t a multiple of 4 and the views aligned (PASS 2 reads
     * them one element per lane). */
    int vec_t = c->t % 4 == 0 && vec4_ok(c, mats, backward ? 2 : 1);
    struct push_attention p = ka_push(c, ps);
    if (backward)
        p.y_off = p.dy_off; /* binding 1 is dy */
    const int slot[6] = {KA_QKV, backward ? KA_DY : KA_Y, KA_SAVED, KA_CTRL, KA_DQKV, KA_WS};
    gpu_arg args[6];
    for (int i = 0; i < 6; i++)
        args[i] = ka_arg(c, slot[i]);
    /* PASS 2 only reads the workspace that PASS 1 wrote. */
    if (pass == PASS_BACKWARD_KV)
        args[5].write = 0;
    uint32_t spec[SPEC_ATTENTION_COUNT] = {
        [SPEC_WG] = ps->threads, [SPEC_ATTENTION_PASS] = pass, [SPEC_ATTENTION_D] = c->d,
        [SPEC_ATTENTION_SHUFFLE] = (uint32_t)shuffle, [SPEC_ATTENTION_VEC] = (uint32_t)vec,
        [SPEC_ATTENTION_VEC_T] = (uint32_t)vec_t};
    return gpu_dispatch(s, &k_attention, spec, SPEC_ATTENTION_COUNT, args, &p, ps->groups);
}

vkt_status ka_rows_forward(vkt_stream *s, const ka_call *c)
{
    return dispatch(s, c, PASS_FORWARD);
}

vkt_status ka_rows_backward(vkt_stream *s, const ka_call *c)
{
    vkt_status st = dispatch(s, c, PASS_BACKWARD_Q);
    return st == VKT_OK ? dispatch(s, c, PASS_BACKWARD_KV) : st;
}
