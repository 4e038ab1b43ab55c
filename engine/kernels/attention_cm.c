/* attention_cm.c - the attention_lowp_coopmat and attention_lowp_frag variants: the
 * forward (shaders/attention_frag.glsl: S = Q K^T and P V on warps of fragments) and the
 * backward (attention_frag_bwd.glsl: pass 1 by query blocks, S, dP = dO V^T and dQ += dS K;
 * pass 2 by key blocks, S^T, dP^T, dK += dS^T Q and dV += drop(P)^T dO); the matrix
 * instruction of VK_KHR_cooperative_matrix in attention_coopmat[_bwd]_f16 / _bf16,
 * prebuilt: docs/toolchain.md; fp32 multiply-adds in attention_frag[_bwd]. They read and
 * write y, the row logsumexps and the row sums D_i exactly where attention_flash's passes
 * do, so their saved array and workspace are attention_lowp_flash's, and a call the
 * tiling cannot take (no tile fits the device, or its loops would pass the loop budget)
 * runs attention_lowp_flash's instead. */
#include "kernels/attention_impl.h"
#include "kernels/kernel_util.h"
#include "spec.h"
#include "attention_coopmat_bf16.spv.h"
#include "attention_coopmat_f16.spv.h"
#include "attention_coopmat_bwd_bf16.spv.h"
#include "attention_coopmat_bwd_f16.spv.h"
#include "attention_frag.spv.h"
#include "attention_frag_bwd.spv.h"

#define S GPU_BIND_STORAGE

/* Bindings as attention_flash's: 0 qkv 16-bit, 1 y, 2 saved, 3 ctrl (the forward's four);
 * 4 dqkv, 5 workspace (D), 6 dy 16-bit. Per direction: fp32 arithmetic, fp16 matrices,
 * bf16 matrices. */
#define FRAG_KERNEL(name)                                                                  \
    {#name, spv_##name, sizeof spv_##name, 4, {S, S, S, S}, sizeof(struct push_attention), \
     SPEC_ATTN_FRAG_COUNT}
#define BWD_KERNEL(name)                                                                  \
    {#name, spv_##name, sizeof spv_##name, 7, {S, S, S, S, S, S, S},                      \
     sizeof(struct push_attention), SPEC_ATTN_BWD_COUNT}
static const gpu_kernel k_kernels[6] = {
    FRAG_KERNEL(attention_frag), FRAG_KERNEL(attention_coopmat_f16),
    FRAG_KERNEL(attention_coopmat_bf16), BWD_KERNEL(attention_frag_bwd),
    BWD_KERNEL(attention_coopmat_bwd_f16), BWD_KERNEL(attention_coopmat_bwd_bf16)};
#undef FRAG_KERNEL
#undef BWD_KERNEL
_Static_assert(SPEC_ATTN_BWD_PASS == SPEC_ATTN_FRAG_COUNT,
               "the backward's constants are the forward's and the pass");

const gpu_kernel *ka_frag_kernels(uint32_t *count)
{
    *count = 6;
    return k_kernels;
}

static uint32_t up(uint32_t x, uint32_t m) { return (x + m - 1) / m * m; }
static uint64_t cdiv(uint64_t x, uint64_t y) { return (x + y - 1) / y; }

/* Shared bytes of attention_frag.glsl's arrays (pass 0) or attention_frag_bwd.glsl's
 * (pass 1: NX = 1, 2: NX = 2); PAD 8 elements with matrices, else 1. */
static uint32_t shared_bytes(const ka_frag_plan *pl, int coop, uint32_t pass)
{
    uint32_t el = coop ? 2 : 4, pad = coop ? 8 : 1, ld = pl->dp + pad, ldp = pl->bn + pad;
    if (pass == 0)
        return (pl->bm + 2 * pl->bn) * ld * el + pl->bm * ldp * el +
               (pl->bm * pl->bn + pl->bm * pl->dp + 2 * pl->bm) * 4;
    return (2 * pl->bm + 2 * pl->bn) * ld * el + pass * pl->bm * ldp * el +
           (2 * pl->bm * pl->bn + pass * pl->bm * pl->dp + 2 * (pass == 1 ? pl->bm : pl->bn)) *
               4;
}

/* Loop iterations of one invocation, counting every loop that is not unrolled as the
 * fp32-arithmetic kernel has them (the matrix kernel has fewer): per key tile the two
 * stagings, the products' inner loops, the softmax row's three; then Q, Os and y. */
static uint64_t iterations(const ka_frag_plan *pl, uint32_t t, uint32_t d, uint32_t pass)
{
    uint64_t per_lane = (uint64_t)pl->tm * pl->tn / pl->sg;
    if (pass != 0) { /* per tile two stagings, two score products, the element-wise step,
                      * pass accumulations; then the block's stagings, zeros, D and stores */
        uint64_t bwd = 2 * cdiv((uint64_t)pl->bn * pl->dp, pl->threads) +
                       2 * (pl->bn / pl->tn) * per_lane * pl->dp +
                       cdiv((uint64_t)pl->bm * pl->bn, pl->threads) +
                       pass * (pl->dp / pl->tn) * per_lane * pl->bn + 4;
        return cdiv(t, pl->bn) * bwd + 2 * cdiv((uint64_t)pl->bm * pl->dp, pl->threads) +
               cdiv((uint64_t)pass * pl->bm * pl->dp, pl->threads) + d +
               pass * cdiv((uint64_t)pl->bm * d, pl->threads) + 4;
    }
    uint64_t tile = 2 * cdiv((uint64_t)pl->bn * pl->dp, pl->threads) +
                    (pl->bn / pl->tn) * per_lane * pl->dp +
                    (pl->dp / pl->tn) * per_lane * pl->bn + 2 * pl->bn + pl->dp + 4;
    return cdiv(t, pl->bn) * tile + 2 * cdiv((uint64_t)pl->bm * pl->dp, pl->threads) +
           cdiv((uint64_t)pl->bm * d, pl->threads) + 4;
}

int ka_frag_plan_make(const gpu_profile *p, const gpu_mat_shape *mat, uint32_t b, uint32_t t,
                      uint32_t heads, uint32_t d, ka_frag_plan *out)
{
    return ka_frag_plan_pass(p, mat, 0, b, t, heads, d, out);
}

int ka_frag_plan_pass(const gpu_profile *p, const gpu_mat_shape *mat, uint32_t pass,
                      uint32_t b, uint32_t t, uint32_t heads, uint32_t d, ka_frag_plan *out)
{
    ka_frag_plan pl = {0};
    if (!p || pass > 2 || b == 0 || t == 0 || heads == 0 || d == 0 || d > KA_MAX_D)
        return 0;
    int coop = mat != NULL;
    if (coop)
        pl.tm = mat->m, pl.tn = mat->n, pl.tk = mat->k, pl.sg = p->subgroup_size;
    else
        pl.tm = pl.tn = pl.tk = 8, pl.sg = 8;
    /* a fragment's elements spread evenly over the lanes, and a thread per query row */
    if (pl.sg == 0 || pl.tm == 0 || pl.tn == 0 || pl.tk == 0 || pl.tm * pl.tn % pl.sg ||
        pl.sg < pl.tm)
        return 0;
    uint32_t q = pl.tn > pl.tk ? pl.tn : pl.tk;
    if (q % pl.tn || q % pl.tk)
        return 0;
    pl.dp = up(d, q);   /* the padded head width: a multiple of TK (Q K^T) and TN (P V) */
    /* tiles of BN = 2q rows (keys, or the backward's queries by key blocks): a multiple of
     * TN (S) and TK (P V); the backward, whose shared arrays are larger, also q where 2q
     * does not fit at one warp (a head width of 128 in 48 KiB) */
    for (uint32_t half = 0; half < (pass ? 2u : 1u); half++) {
        pl.bn = (2u >> half) * q;
        for (pl.warps = 4; pl.warps >= 1; pl.warps /= 2) {
            pl.bm = pl.warps * pl.tm;
            pl.threads = pl.warps * pl.sg;
            pl.shared_bytes = shared_bytes(&pl, coop, pass);
            /* fewer, smaller workgroups while the grid leaves compute units idle */
            uint64_t blocks = (uint64_t)b * heads * cdiv(t, pl.bm);
            int idle = pl.warps > 1 && blocks < p->compute_units;
            if (pl.shared_bytes <= p->shared_memory && pl.threads <= p->max_invocations &&
                !idle)
                break;
        }
        if (pl.warps != 0)
            break;
    }
    if (pl.warps == 0 || pl.shared_bytes > p->shared_memory ||
        pl.threads > p->max_invocations || iterations(&pl, t, d, pass) > p->loop_budget)
        return 0;
    pl.blocks_per_head = (uint32_t)cdiv(t, pl.bm);
    pl.blocks = (uint64_t)b * heads * pl.blocks_per_head;
    uint64_t gx = pl.blocks < GPU_MAX_GROUPS ? pl.blocks : GPU_MAX_GROUPS;
    uint64_t gy = cdiv(pl.blocks, gx);
    if (gy > GPU_MAX_GROUPS)
        return 0;
    pl.groups[0] = (uint32_t)gx, pl.groups[1] = (uint32_t)gy, pl.groups[2] = 1;
    *out = pl;
    return 1;
}

/* The kernel of the call in a direction and its matrix shape (NULL: attention_frag[_bwd],
 * fp32 arithmetic). */
static const gpu_mat_shape *kernel_of(const ka_call *c, int backward, const gpu_kernel **k)
{
    const gpu_kernel *ks = &k_kernels[backward ? 3 : 0];
    const gpu_profile *p = &c->ctx->profile;
    if (c->plan.variant == GPU_V_ATTENTION_LOWP_COOPMAT) {
        int bf = c->lp == VKT_DTYPE_BF16;
        const gpu_mat_shape *m = gpu_mat_for(p, bf ? GPU_MAT_BF16 : GPU_MAT_F16);
        if (m && (!bf || (p->caps & GPU_CAP_BFLOAT16))) {
            *k = &ks[bf ? 2 : 1];
            return m;
        }
    }
    *k = &ks[0];
    return NULL;
}

/* Records pass `pass` (0 forward, 1 and 2 backward) on the plan's grid. */
static vkt_status dispatch(vkt_stream *s, const ka_call *c, const gpu_kernel *k,
                           const ka_frag_plan *pl, uint32_t pass)
{
    ka_pass ps = c->plan.pass[pass];
    ps.blocks_per_head = pl->blocks_per_head;
    ps.blocks = pl->blocks;
    struct push_attention push = ka_push(c, &ps);
    gpu_arg args[KA_SLOTS];
    for (uint32_t i = 0; i < k->n_bindings; i++)
        args[i] = ka_arg(c, (int)i);
    if (pass == 2)
        args[KA_WS].write = 0; /* reads the D that pass 1 wrote */
    uint32_t spec[SPEC_ATTN_BWD_COUNT] = {
        [SPEC_WG] = pl->threads, [SPEC_ATTN_FRAG_D] = c->d, [SPEC_ATTN_FRAG_DP] = pl->dp,
        [SPEC_ATTN_FRAG_BN] = pl->bn, [SPEC_ATTN_FRAG_TM] = pl->tm, [SPEC_ATTN_FRAG_TN] = pl->tn,
        [SPEC_ATTN_FRAG_TK] = pl->tk, [SPEC_ATTN_FRAG_SG] = pl->sg,
        [SPEC_ATTN_FRAG_WARPS] = pl->warps, [SPEC_ATTN_FRAG_BF16] = c->lp == VKT_DTYPE_BF16,
        [SPEC_ATTN_BWD_PASS] = pass}; /* the forward's kernels take the first ten */
    return gpu_dispatch(s, k, spec, k->n_spec, args, &push, pl->groups);
}

vkt_status ka_cm_forward(vkt_stream *s, const ka_call *c)
{
    const gpu_kernel *k;
    const gpu_mat_shape *mat = kernel_of(c, 0, &k);
    ka_frag_plan pl;
    if (!ka_frag_plan_make(&c->ctx->profile, mat, c->b, c->t, c->heads, c->d, &pl))
        return ka_flash_forward(s, c);
    return dispatch(s, c, k, &pl, 0);
}

/* Each pass on the fragments where its plan exists, else attention_lowp_flash's (both keep
 * D in the workspace and read the same lse): both passes, or neither. */
vkt_status ka_cm_backward(vkt_stream *s, const ka_call *c)
{
    const gpu_kernel *k;
    const gpu_mat_shape *mat = kernel_of(c, 1, &k);
    ka_frag_plan p1, p2;
    if (!ka_frag_plan_pass(&c->ctx->profile, mat, 1, c->b, c->t, c->heads, c->d, &p1) ||
        !ka_frag_plan_pass(&c->ctx->profile, mat, 2, c->b, c->t, c->heads, c->d, &p2))
        return ka_flash_backward(s, c);
    vkt_status st = dispatch(s, c, k, &p1, 1);
    return st == VKT_OK ? dispatch(s, c, k, &p2, 2) : st;
}
