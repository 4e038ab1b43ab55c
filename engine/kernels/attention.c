/* attention.c - dispatch of the fused causal attention kernels (see attention.h and
 * shaders/attention.comp for the algorithm). One shader, three passes picked by a
 * specialization constant; all take the same six bindings. */
#include "kernels/attention.h"

#include <math.h>
#include <stdio.h>

#include "kernels/kernel_util.h"
#include "dropout_hash.h"
#include "push_attention.h"
#include "spec.h"
#include "attention.spv.h"

#define S GPU_BIND_STORAGE

/* Bindings: 0 qkv, 1 y / dy, 2 probs, 3 ctrl, 4 dqkv, 5 workspace. */
static const gpu_kernel k_attention = {
    "attention", spv_attention, sizeof spv_attention, 6, {S, S, S, S, S, S},
    sizeof(struct push_attention), SPEC_ATTENTION_COUNT};

enum { PASS_FORWARD = 0, PASS_BACKWARD_Q = 1, PASS_BACKWARD_KV = 2 };
enum { ROWS_PER_BLOCK = 8 };

/* Whether the context runs the variant attention_shuffle (CPU style, 8-lane or wider
 * subgroups with shuffles: a workgroup of 8 is one subgroup) or attention_rows. */
static int shuffle_variant(const vkt_context *ctx)
{
    return ctx->kv[GPU_FAMILY_ATTENTION] == GPU_V_ATTENTION_SHUFFLE;
}

/* The shader declares subgroup shuffles (SPIR-V capabilities are per module), so every
 * device that runs it must have them in compute shaders: both variants need them. */
static int shuffle_supported(const vkt_context *ctx)
{
    return ctx->kv[GPU_FAMILY_ATTENTION] != GPU_V_NONE; /* both rows need shuffles */
}

/* Loop iterations one invocation may run for one row of t steps, counted as if no loop
 * were unrolled (lavapipe counts every back edge; unrolled loops have none, so this is
 * an upper bound): per step the fetch rounds of the 2 d floats of a row pair (shuffle
 * variant, scalar reads: the worst case), two loops over d and the loop overheads; then
 * the last pass over the probs row and the row loads and stores. */
static uint64_t iterations(const vkt_context *ctx, uint64_t t, uint32_t d)
{
    uint64_t rounds = shuffle_variant(ctx) ? (2ull * d + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK
                                           : 0;
    return (t + 4) * (rounds + 2ull * d + 5) + 4ull * d + 64;
}

uint32_t ka_attention_max_t(const vkt_context *ctx, uint32_t d)
{
    if (!ctx || d == 0 || d > KA_MAX_D)
        return 0;
    uint64_t budget = ku_loop_budget(ctx);
    if (budget >= (1ull << 40))
        return UINT32_MAX;
    uint64_t fixed = iterations(ctx, 0, d), per = iterations(ctx, 1, d) - fixed;
    return budget <= fixed ? 0 : (uint32_t)((budget - fixed) / per);
}

uint64_t ka_attention_workspace_elems(uint32_t b, uint32_t t, uint32_t heads, uint32_t d)
{
    (void)d;
    uint64_t rows = (uint64_t)b * heads * t;
    return rows * t + rows;
}

/* A dispatch being prepared: the sizes, views and what the shader is specialized on. */
typedef struct call {
    const char *fn;
    vkt_context *ctx;
    uint32_t b, t, heads, d;
    float p_drop;
    uint64_t b0;            /* dropout: the global index of sequence 0 */
    vkt_view view[6];       /* per binding; unused ones alias qkv (as reads) */
    uint64_t count[6];
    int used[6], write[6];
} call;

static const char *const k_names[6] = {"qkv", "y", "probs", "ctrl", "dqkv", "workspace"};

static int overlap(const call *c, int x, int y)
{
    const vkt_view *a = &c->view[x], *b = &c->view[y];
    return a->buffer == b->buffer && a->offset < b->offset + c->count[y] &&
           b->offset < a->offset + c->count[x];
}

/* Sizes, limits, views, and outputs that alias something else. */
static vkt_status check(vkt_stream *s, call *c)
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
    if (c->d > KA_MAX_D)
        return err_fail(ctx->errmsg, VKT_ERROR_LIMIT,
                        "%s: head width d = %u; at most %u is supported", c->fn, c->d, KA_MAX_D);
    uint32_t max_t = ka_attention_max_t(ctx, c->d);
    if (c->t > max_t)
        return err_fail(ctx->errmsg, VKT_ERROR_LIMIT,
                        "%s: t = %u positions with d = %u exceed what this device runs (its "
                        "shader loops stop after %llu iterations): at most t = %u", c->fn, c->t,
                        c->d, (unsigned long long)ku_loop_budget(ctx), max_t);
    if (!shuffle_supported(ctx))
        return err_fail(ctx->errmsg, VKT_ERROR_LIMIT,
                        "%s: the device has no subgroup shuffles in compute shaders", c->fn);
    /* 32-bit indices in the shader, from a binding start a little before each view. */
    for (int i = 0; i < 6; i++)
        if (c->count[i] > (1ull << 31) - 1024)
            return err_fail(ctx->errmsg, VKT_ERROR_LIMIT,
                            "%s: %s has %llu elements; at most 2^31 - 1024 are supported",
                            c->fn, k_names[i], (unsigned long long)c->count[i]);
    for (int i = 0; i < 6; i++) {
        char what[64];
        snprintf(what, sizeof what, "%s: %s", c->fn, k_names[i]);
        vkt_status st = gpu_check_view(ctx, what, c->view[i], c->count[i]);
        if (st != VKT_OK)
            return st;
    }
    for (int x = 0; x < 6; x++)
        for (int y = 0; y < 6; y++)
            if (x != y && c->write[x] && c->used[y] && overlap(c, x, y))
                return err_fail(ctx->errmsg, VKT_ERROR_INVALID_ARGUMENT,
                                "%s: %s (elements [%llu, %llu)) overlaps %s; an output must "
                                "not alias another argument", c->fn, k_names[x],
                                (unsigned long long)c->view[x].offset,
                                (unsigned long long)(c->view[x].offset + c->count[x]),
                                k_names[y]);
    return VKT_OK;
}

static int vec4_ok(const call *c, const int *which, int n)
{
    for (int i = 0; i < n; i++)
        if (!ku_vec4_aligned(c->ctx, c->view[which[i]]))
            return 0;
    return 1;
}

/* Records one pass. */
static vkt_status dispatch(vkt_stream *s, const call *c, uint32_t pass, float beta,
                           uint64_t seed)
{
    vkt_context *ctx = c->ctx;
    uint32_t bph = (c->t + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK;
    uint64_t blocks = (uint64_t)c->b * c->heads * bph;
    int shuffle = shuffle_variant(ctx);
    uint32_t wg = shuffle ? ROWS_PER_BLOCK : 8 * ROWS_PER_BLOCK;
    uint64_t groups = (blocks + wg / ROWS_PER_BLOCK - 1) / (wg / ROWS_PER_BLOCK);
    uint64_t gx = groups < GPU_MAX_GROUPS ? groups : GPU_MAX_GROUPS;
    uint64_t gy = (groups + gx - 1) / gx;
    if (blocks > UINT32_MAX || gy > GPU_MAX_GROUPS)
        return err_fail(ctx->errmsg, VKT_ERROR_LIMIT, "%s: %llu row blocks are too many",
                        c->fn, (unsigned long long)blocks);
    /* Row vectors (qkv, y / dy, dqkv) as vec4s: d a multiple of 4 (then every row and
     * head column starts at a multiple of 4) and the views' element 0 aligned. */
    const int rows_fwd[2] = {0, 1}, rows_bwd[3] = {0, 1, 4}, mats[2] = {2, 5};
    int vec = c->d % 4 == 0 &&
              (pass == PASS_FORWARD ? vec4_ok(c, rows_fwd, 2) : vec4_ok(c, rows_bwd, 3));
    /* probs / dP rows as vec4s: t a multiple of 4 and the views aligned (PASS 2 reads
     * them one element per lane). */
    int vec_t = c->t % 4 == 0 && vec4_ok(c, mats, pass == PASS_FORWARD ? 1 : 2);
    struct push_attention p = {
        .b = c->b, .t = c->t, .heads = c->heads, .d = c->d, .blocks_per_head = bph,
        .blocks = (uint32_t)blocks, .scale = (float)(1.0 / sqrt((double)c->d)),
        .drop_scale = (float)(1.0 / (1.0 - (double)c->p_drop)),
        .dropout = c->p_drop > 0.0f, .threshold = dropout_threshold(c->p_drop),
        .seed_lo = (uint32_t)seed, .seed_hi = (uint32_t)(seed >> 32), .beta = beta,
        .qkv_off = ku_shift(ctx, c->view[0], 0), .y_off = ku_shift(ctx, c->view[1], 0),
        .p_off = ku_shift(ctx, c->view[2], 0), .c_off = ku_shift(ctx, c->view[3], 0),
        .dqkv_off = ku_shift(ctx, c->view[4], 0), .ws_off = ku_shift(ctx, c->view[5], 0),
        /* sequence bb keyed as b0 + bb: its mask indices move by b0 heads t t (mod 2^32) */
        .drop_off = (uint32_t)(c->b0 * c->heads * c->t * c->t)};
    gpu_arg args[6];
    for (int i = 0; i < 6; i++)
        args[i] = ku_arg(c->view[i], 0, c->count[i], c->write[i]);
    /* PASS 2 only reads the workspace that PASS 1 wrote. */
    if (pass == PASS_BACKWARD_KV)
        args[5].write = 0;
    uint32_t spec[SPEC_ATTENTION_COUNT] = {
        [SPEC_WG] = wg, [SPEC_ATTENTION_PASS] = pass, [SPEC_ATTENTION_D] = c->d,
        [SPEC_ATTENTION_SHUFFLE] = (uint32_t)shuffle, [SPEC_ATTENTION_VEC] = (uint32_t)vec,
        [SPEC_ATTENTION_VEC_T] = (uint32_t)vec_t};
    uint32_t g[3] = {(uint32_t)gx, (uint32_t)gy, 1};
    return gpu_dispatch(s, &k_attention, spec, SPEC_ATTENTION_COUNT, args, &p, g);
}

/* Fills the sizes shared by both directions; bindings not used alias qkv as reads. */
static void setup(call *c, const char *fn, vkt_view qkv, vkt_view probs, vkt_view ctrl,
                  uint32_t b, uint32_t t, uint32_t heads, uint32_t d, float p_drop)
{
    *c = (call){.fn = fn, .b = b, .t = t, .heads = heads, .d = d, .p_drop = p_drop};
    uint64_t rows = (uint64_t)b * t;
    for (int i = 0; i < 6; i++) {
        c->view[i] = qkv;
        c->count[i] = rows * 3 * heads * d;
    }
    c->used[0] = c->used[1] = c->used[2] = 1;
    c->view[2] = probs;
    c->count[2] = (uint64_t)b * heads * t * t;
    if (p_drop != 0.0f || ctrl.buffer) {
        c->view[3] = ctrl;
        c->count[3] = 2;
        c->used[3] = 1;
    }
}

vkt_status ka_attention(vkt_stream *s, vkt_view qkv, vkt_view y, vkt_view probs, vkt_view ctrl,
                        uint32_t b, uint32_t t, uint32_t heads, uint32_t d, float p_drop,
                        uint64_t seed, uint64_t b0)
{
    call c;
    setup(&c, "ka_attention", qkv, probs, ctrl, b, t, heads, d, p_drop);
    c.b0 = b0;
    c.view[1] = y;
    c.count[1] = (uint64_t)b * t * heads * d;
    c.write[1] = c.write[2] = 1;
    vkt_status st = check(s, &c);
    return st != VKT_OK ? st : dispatch(s, &c, PASS_FORWARD, 0.0f, seed);
}

vkt_status ka_attention_backward(vkt_stream *s, vkt_view qkv, vkt_view probs, vkt_view ctrl,
                                 vkt_view dy, vkt_view dqkv, float beta, vkt_view workspace,
                                 uint32_t b, uint32_t t, uint32_t heads, uint32_t d,
                                 float p_drop, uint64_t seed, uint64_t b0)
{
    call c;
    setup(&c, "ka_attention_backward", qkv, probs, ctrl, b, t, heads, d, p_drop);
    c.b0 = b0;
    c.view[1] = dy;
    c.count[1] = (uint64_t)b * t * heads * d;
    c.view[4] = dqkv;
    c.view[5] = workspace;
    c.count[5] = ka_attention_workspace_elems(b, t, heads, d);
    c.used[4] = c.used[5] = c.write[4] = c.write[5] = 1;
    vkt_status st = check(s, &c);
    if (st == VKT_OK && !isfinite(beta))
        st = err_fail(c.ctx->errmsg, VKT_ERROR_INVALID_ARGUMENT,
                      "ka_attention_backward: beta is %g", (double)beta);
    if (st == VKT_OK)
        st = dispatch(s, &c, PASS_BACKWARD_Q, beta, seed);
    return st == VKT_OK ? dispatch(s, &c, PASS_BACKWARD_KV, beta, seed) : st;
}
