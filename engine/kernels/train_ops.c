/* train_ops.c - dispatch of the training kernels (see train_ops.h). Sizes here are small
 * beside maxStorageBufferRange; gpu_dispatch refuses a binding past it with a message. */
#include "kernels/train_ops.h"
#include "kernels/kernel_util.h"
#include "activation.h"
#include "ctrl.h"
#include "dropout_hash.h"
#include "push.h"
#include "spec.h"
#include "axpby.spv.h"
#include "bias_act.spv.h"
#include "bias_act_backward.spv.h"
#include "block.spv.h"
#include "dropout.spv.h"
#include "mse.spv.h"
#include "sce.spv.h"
#include "sce_backward.spv.h"

#define S GPU_BIND_STORAGE

static const gpu_kernel k_bias_act = {
    "bias_act", spv_bias_act, sizeof spv_bias_act, 3, {S, S, S},
    sizeof(struct push_bias_act), SPEC_BIAS_ACT_COUNT};
static const gpu_kernel k_bias_act_backward = {
    "bias_act_backward", spv_bias_act_backward, sizeof spv_bias_act_backward, 4,
    {S, S, S, S}, sizeof(struct push_bias_act), SPEC_BIAS_ACT_BACKWARD_COUNT};
static const gpu_kernel k_sce = {
    "sce", spv_sce, sizeof spv_sce, 4, {S, S, S, S},
    sizeof(struct push_sce), SPEC_WG_ONLY_COUNT};
static const gpu_kernel k_sce_backward = {
    "sce_backward", spv_sce_backward, sizeof spv_sce_backward, 4, {S, S, S, S},
    sizeof(struct push_sce), SPEC_WG_ONLY_COUNT};
static const gpu_kernel k_mse = {
    "mse", spv_mse, sizeof spv_mse, 4, {S, S, S, S},
    sizeof(struct push_mse), SPEC_MSE_COUNT};
static const gpu_kernel k_axpby = {
    "axpby", spv_axpby, sizeof spv_axpby, 2, {S, S},
    sizeof(struct push_axpby), SPEC_AXPBY_COUNT};
static const gpu_kernel k_block = {
    "block", spv_block, sizeof spv_block, 2, {S, S},
    sizeof(struct push_block), SPEC_BLOCK_COUNT};
static const gpu_kernel k_dropout = {
    "dropout", spv_dropout, sizeof spv_dropout, 3, {S, S, S},
    sizeof(struct push_dropout), SPEC_WG_ONLY_COUNT};

/* Stream present, sizes non-zero and below 2^32 elements. */
static vkt_status check(vkt_stream *s, const char *fn, uint64_t n)
{
    if (!s)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "%s: stream is NULL", fn);
    if (n == 0)
        return err_fail(s->ctx->errmsg, VKT_ERROR_INVALID_ARGUMENT, "%s: no elements", fn);
    if (n > UINT32_MAX)
        return err_fail(s->ctx->errmsg, VKT_ERROR_LIMIT,
                        "%s: %llu elements; at most 2^32 - 1 are supported", fn,
                        (unsigned long long)n);
    return VKT_OK;
}

static vkt_status views_ok(vkt_context *ctx, const vkt_view *v, const uint64_t *count,
                           const char *const *names, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        vkt_status st = gpu_check_view(ctx, names[i], v[i], count[i]);
        if (st != VKT_OK)
            return st;
    }
    return VKT_OK;
}

/* Whether every view can be read as vec4s from its element 0. */
static int all_vec4(const vkt_context *ctx, const vkt_view *v, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        if (!ku_vec4_aligned(ctx, v[i]))
            return 0;
    return 1;
}

/* Grid-stride grids: ku_groups_1d keeps every thread within the loop budget. */
static uint32_t groups_1d(const vkt_context *ctx, uint64_t n)
{
    return ku_groups_1d(ctx, n, ku_workgroup_size(ctx));
}

/* The workgroup of the one-workgroup kernels (softmax-CE and MSE forward, whose sums
 * must not depend on timing): the usual size, doubled (up to 1024 and the device's
 * limit) while a thread would loop past the device's loop budget; idle threads of a
 * larger group cost time on lavapipe. Fails with VKT_ERROR_LIMIT if `per_item` loop
 * iterations for each of `items` still do not fit. */
static vkt_status single_group(vkt_context *ctx, const char *fn, uint64_t items,
                               uint64_t per_item, uint32_t *wg)
{
    uint32_t w = ku_workgroup_size(ctx), max = 1024;
    if (ctx->info.max_workgroup_invocations && max > ctx->info.max_workgroup_invocations)
        max = ctx->info.max_workgroup_invocations;
    uint64_t budget = ku_loop_budget(ctx) / 2;
    while ((items + w - 1) / w * per_item + 16 > budget && w * 2 <= max)
        w *= 2;
    *wg = w;
    uint64_t iterations = (items + w - 1) / w * per_item + 16;
    if (iterations > budget)
        return err_fail(ctx->errmsg, VKT_ERROR_LIMIT,
                        "%s: %llu rows of %llu loop iterations each are too many for this "
                        "device in one workgroup (its shader loops stop after %llu "
                        "iterations)", fn, (unsigned long long)items,
                        (unsigned long long)per_item, (unsigned long long)ku_loop_budget(ctx));
    return VKT_OK;
}

static vkt_status run(vkt_stream *s, const gpu_kernel *k, const uint32_t *spec, uint32_t n_spec,
                      const gpu_arg *args, const void *push, uint32_t groups)
{
    uint32_t g[3] = {groups, 1, 1};
    return gpu_dispatch(s, k, spec, n_spec, args, push, g);
}

int kt_act_grad_from_y(vkt_unary_op op, float alpha)
{
    return act_df_follows_from_y(op, alpha);
}

vkt_status kt_bias_act(vkt_stream *s, vkt_unary_op op, float alpha, vkt_view pre,
                       const vkt_view *bias, const vkt_view *y, uint32_t rows, uint32_t cols)
{
    uint64_t n = (uint64_t)rows * cols;
    vkt_status st = check(s, "kt_bias_act", n);
    if (st != VKT_OK)
        return st;
    vkt_context *ctx = s->ctx;
    vkt_view v[3] = {bias ? *bias : pre, pre, y ? *y : pre};
    uint64_t c[3] = {bias ? cols : n, n, n};
    const char *names[3] = {"bias", "pre", "y"};
    if ((st = views_ok(ctx, v, c, names, 3)) != VKT_OK)
        return st;
    struct push_bias_act p = {
        .rows = rows, .cols = cols, .alpha = alpha,
        .b_off = ku_shift(ctx, v[0], 0), .p_off = ku_shift(ctx, pre, 0),
        .y_off = ku_shift(ctx, v[2], 0)};
    /* The unused bindings alias `pre` as reads, so they add no hazards of their own. */
    gpu_arg args[3] = {ku_arg(v[0], 0, c[0], 0), ku_arg(pre, 0, n, 1),
                       ku_arg(v[2], 0, n, y != NULL)};
    int vec4 = cols % 4 == 0 && all_vec4(ctx, v, 3);
    uint32_t spec[SPEC_BIAS_ACT_COUNT] = {
        [SPEC_WG] = ku_workgroup_size(ctx), [SPEC_BIAS_ACT_OP] = (uint32_t)op,
        [SPEC_BIAS_ACT_HAS_BIAS] = bias != NULL, [SPEC_BIAS_ACT_SEPARATE_Y] = y != NULL,
        [SPEC_BIAS_ACT_VEC4] = (uint32_t)vec4};
    return run(s, &k_bias_act, spec, SPEC_BIAS_ACT_COUNT, args, &p,
               groups_1d(ctx, vec4 ? n / 4 : n));
}

vkt_status kt_bias_act_keep16(vkt_stream *s, vkt_unary_op op, float alpha, vkt_dtype type,
                              vkt_view y, const vkt_view *bias, vkt_view pre, uint32_t rows,
                              uint32_t cols)
{
    const char *fn = "kt_bias_act_keep16";
    uint64_t n = (uint64_t)rows * cols;
    vkt_status st = check(s, fn, n);
    if (st != VKT_OK)
        return st;
    vkt_context *ctx = s->ctx;
    if (vkt_dtype_size(type) != 2)
        return err_fail(ctx->errmsg, VKT_ERROR_INVALID_ARGUMENT,
                        "%s: the pre-activation's type must be fp16 or bf16 (got %d)", fn,
                        (int)type);
    if (pre.offset % 2 != 0)
        return err_fail(ctx->errmsg, VKT_ERROR_INVALID_ARGUMENT,
                        "%s: pre starts at 16-bit element %llu; an even offset (a 4-byte "
                        "boundary) is required", fn, (unsigned long long)pre.offset);
    vkt_view v[2] = {bias ? *bias : y, y};
    uint64_t c[2] = {bias ? cols : n, n};
    const char *names[2] = {"bias", "y"};
    char what[64];
    snprintf(what, sizeof what, "%s: pre", fn);
    if ((st = views_ok(ctx, v, c, names, 2)) != VKT_OK ||
        (st = ku_check_view16(ctx, what, pre, n + n % 2)) != VKT_OK)
        return st;
    struct push_bias_act p = {
        .rows = rows, .cols = cols, .alpha = alpha,
        .b_off = ku_shift(ctx, v[0], 0), .p_off = ku_shift16(ctx, pre),
        .y_off = ku_shift(ctx, y, 0)};
    gpu_arg args[3] = {ku_arg(v[0], 0, c[0], 0), ku_arg16(pre, n, 1), ku_arg(y, 0, n, 1)};
    uint32_t spec[SPEC_BIAS_ACT_COUNT] = {
        [SPEC_WG] = ku_workgroup_size(ctx), [SPEC_BIAS_ACT_OP] = (uint32_t)op,
        [SPEC_BIAS_ACT_HAS_BIAS] = bias != NULL, [SPEC_BIAS_ACT_SEPARATE_Y] = 1,
        [SPEC_BIAS_ACT_PRE16] = (uint32_t)type};
    return run(s, &k_bias_act, spec, SPEC_BIAS_ACT_COUNT, args, &p,
               groups_1d(ctx, (n + 1) / 2));
}

vkt_status kt_act_rebuild16(vkt_stream *s, vkt_unary_op op, float alpha, vkt_dtype type,
                            vkt_view pre, vkt_view y16, uint32_t rows, uint32_t cols)
{
    const char *fn = "kt_act_rebuild16";
    uint64_t n = (uint64_t)rows * cols;
    vkt_status st = check(s, fn, n);
    if (st != VKT_OK)
        return st;
    vkt_context *ctx = s->ctx;
    if (vkt_dtype_size(type) != 2)
        return err_fail(ctx->errmsg, VKT_ERROR_INVALID_ARGUMENT,
                        "%s: the type must be fp16 or bf16 (got %d)", fn, (int)type);
    if (pre.offset % 2 != 0 || y16.offset % 2 != 0)
        return err_fail(ctx->errmsg, VKT_ERROR_INVALID_ARGUMENT,
                        "%s: pre and y start at 16-bit elements %llu and %llu; even offsets "
                        "(4-byte boundaries) are required", fn,
                        (unsigned long long)pre.offset, (unsigned long long)y16.offset);
    char what[64], what_y[64];
    snprintf(what, sizeof what, "%s: pre", fn);
    snprintf(what_y, sizeof what_y, "%s: y", fn);
    if ((st = ku_check_view16(ctx, what, pre, n + n % 2)) != VKT_OK ||
        (st = ku_check_view16(ctx, what_y, y16, n + n % 2)) != VKT_OK)
        return st;
    struct push_bias_act p = {.rows = rows, .cols = cols, .alpha = alpha,
                              .p_off = ku_shift16(ctx, pre), .y_off = ku_shift16(ctx, y16)};
    /* binding 0 (the bias, unused) aliases pre as a read */
    gpu_arg args[3] = {ku_arg16(pre, n, 0), ku_arg16(pre, n, 0), ku_arg16(y16, n, 1)};
    uint32_t spec[SPEC_BIAS_ACT_COUNT] = {
        [SPEC_WG] = ku_workgroup_size(ctx), [SPEC_BIAS_ACT_OP] = (uint32_t)op,
        [SPEC_BIAS_ACT_PRE16] = (uint32_t)type, [SPEC_BIAS_ACT_FROM16] = 1};
    return run(s, &k_bias_act, spec, SPEC_BIAS_ACT_COUNT, args, &p,
               groups_1d(ctx, (n + 1) / 2));
}

/* The bias gradient's grid: `units` columns (or column quads), `rp` threads per unit
 * walking every rp-th row; rp grows until every thread stays within the loop budget. */
static vkt_status bias_grid(vkt_context *ctx, uint32_t rows, uint32_t units, uint32_t wg,
                            uint32_t *rp, uint32_t *groups)
{
    uint64_t budget = ku_loop_budget(ctx) / 2;
    for (uint32_t r = 4;; r *= 2) {
        uint32_t per_group = wg / r;
        uint64_t blocks = (units + per_group - 1) / per_group;
        uint64_t g = blocks < GPU_MAX_GROUPS ? blocks : GPU_MAX_GROUPS;
        uint64_t rounds = (blocks + g - 1) / g;
        if (rounds * ((rows + r - 1) / r + r + 2) <= budget) {
            *rp = r;
            *groups = (uint32_t)g;
            return VKT_OK;
        }
        if (r >= wg)
            return err_fail(ctx->errmsg, VKT_ERROR_LIMIT,
                            "kt_bias_act_backward: %u rows x %u columns are too many for this "
                            "device (its shader loops stop after %llu iterations)", rows,
                            units, (unsigned long long)ku_loop_budget(ctx));
    }
}

vkt_status kt_bias_act_backward(vkt_stream *s, vkt_unary_op op, float alpha, int from_y,
                                vkt_dtype v_type, vkt_view v, vkt_view dy, const vkt_view *dz,
                                float beta, const vkt_view *db, float beta_b, uint32_t rows,
                                uint32_t cols)
{
    uint64_t n = (uint64_t)rows * cols;
    vkt_status st = check(s, "kt_bias_act_backward", n);
    if (st != VKT_OK)
        return st;
    vkt_context *ctx = s->ctx;
    if (!dz && !db)
        return err_fail(ctx->errmsg, VKT_ERROR_INVALID_ARGUMENT,
                        "kt_bias_act_backward: neither dz nor db wanted");
    if (from_y && !kt_act_grad_from_y(op, alpha))
        return err_fail(ctx->errmsg, VKT_ERROR_INVALID_ARGUMENT,
                        "kt_bias_act_backward: the derivative of %s does not follow from "
                        "its output", vkt_unary_op_name(op));
    int v16 = v_type != VKT_DTYPE_FP32;
    if (v16 && (vkt_dtype_size(v_type) != 2 || from_y))
        return err_fail(ctx->errmsg, VKT_ERROR_INVALID_ARGUMENT,
                        "kt_bias_act_backward: v's type %d is not fp32, fp16 or bf16, or "
                        "a 16-bit v is an output (only pre-activations are kept in 16 bits)",
                        (int)v_type);
    /* vv[0] stands in for v in the fp32 checks when v is 16-bit (checked on its own). An
     * output not wanted (WRITE_DZ or HAS_BIAS off: never touched) is bound to the other
     * output, declared written: the shader's DZ and DB blocks are writable, and the
     * validation layer's synchronization check, not folding the specialization constants,
     * counts a write to whatever they are bound to; bound to dy they made false
     * read-after-write hazards with the next command reading dy. */
    vkt_view vv[4] = {v16 ? dy : v, dy, dz ? *dz : *db, db ? *db : *dz};
    uint64_t c[4] = {n, n, dz ? n : cols, db ? cols : n};
    const char *names[4] = {"v", "dy", "dz", "db"};
    if ((st = views_ok(ctx, vv, c, names, 4)) != VKT_OK ||
        (v16 && (st = ku_check_view16(ctx, "kt_bias_act_backward: v", v, n)) != VKT_OK))
        return st;
    struct push_bias_act p = {
        .rows = rows, .cols = cols, .alpha = alpha, .beta = beta, .beta_b = beta_b,
        .v_off = v16 ? ku_shift16(ctx, v) : ku_shift(ctx, v, 0), .dy_off = ku_shift(ctx, dy, 0),
        .dz_off = ku_shift(ctx, vv[2], 0), .db_off = ku_shift(ctx, vv[3], 0)};
    int in_place = dz && dz->buffer == dy.buffer && dz->offset == dy.offset;
    /* In place, dy's binding is the written one; declaring it read too would be the same
     * range, which one command may touch both ways. */
    gpu_arg args[4] = {v16 ? ku_arg16(v, n, 0) : ku_arg(v, 0, n, 0), ku_arg(dy, 0, n, in_place),
                       ku_arg(vv[2], 0, c[2], 1), ku_arg(vv[3], 0, c[3], 1)};
    uint32_t wg = ku_workgroup_size(ctx), rp = 1, groups = 1;
    int vec4 = !v16 && (db ? cols % 4 == 0 : n % 4 == 0) && all_vec4(ctx, vv, 4);
    if (db) {
        st = bias_grid(ctx, rows, vec4 ? cols / 4 : cols, wg, &rp, &groups);
        if (st != VKT_OK)
            return st;
    } else {
        groups = groups_1d(ctx, vec4 ? n / 4 : n);
    }
    uint32_t spec[SPEC_BIAS_ACT_BACKWARD_COUNT] = {
        [SPEC_WG] = wg, [SPEC_BIAS_ACT_BACKWARD_OP] = (uint32_t)op,
        [SPEC_BIAS_ACT_BACKWARD_HAS_BIAS] = db != NULL,
        [SPEC_BIAS_ACT_BACKWARD_FROM_Y] = from_y != 0,
        [SPEC_BIAS_ACT_BACKWARD_WRITE_DZ] = dz != NULL,
        [SPEC_BIAS_ACT_BACKWARD_VEC4] = (uint32_t)vec4,
        [SPEC_BIAS_ACT_BACKWARD_ACCUM] = beta != 0.0f, [SPEC_BIAS_ACT_BACKWARD_RP] = rp,
        [SPEC_BIAS_ACT_BACKWARD_V16] = v16 ? (uint32_t)v_type : 0};
    return run(s, &k_bias_act_backward, spec, SPEC_BIAS_ACT_BACKWARD_COUNT, args, &p, groups);
}

vkt_status kt_sce(vkt_stream *s, vkt_view z, vkt_view labels, vkt_view loss, int mode,
                  const vkt_view *pv, uint32_t rows, uint32_t cols)
{
    uint64_t n = (uint64_t)rows * cols;
    vkt_status st = check(s, "kt_sce", n);
    if (st != VKT_OK)
        return st;
    vkt_context *ctx = s->ctx;
    if (mode < 0 || mode > 2 || (mode && !pv))
        return err_fail(ctx->errmsg, VKT_ERROR_INVALID_ARGUMENT, "kt_sce: bad mode %d", mode);
    vkt_view v[4] = {z, labels, loss, mode ? *pv : loss};
    uint64_t c[4] = {n, rows, 1, mode ? n : 1};
    const char *names[4] = {"z", "labels", "loss", "p"};
    if ((st = views_ok(ctx, v, c, names, 4)) != VKT_OK)
        return st;
    struct push_sce p = {
        .rows = rows, .cols = cols, .mode = (uint32_t)mode, .scale = 1.0f / (float)rows,
        .z_off = ku_shift(ctx, z, 0), .l_off = ku_shift(ctx, labels, 0),
        .loss_off = ku_shift(ctx, loss, 0), .p_off = ku_shift(ctx, v[3], 0)};
    gpu_arg args[4] = {ku_arg(z, 0, n, 0), ku_arg(labels, 0, rows, 0), ku_arg(loss, 0, 1, 1),
                       ku_arg(v[3], 0, c[3], 1)};
    uint32_t spec[SPEC_WG_ONLY_COUNT];
    st = single_group(ctx, "kt_sce", rows, 3ull * cols + (mode ? cols : 0) + 1, &spec[SPEC_WG]);
    return st == VKT_OK ? run(s, &k_sce, spec, SPEC_WG_ONLY_COUNT, args, &p, 1) : st;
}

vkt_status kt_sce_backward(vkt_stream *s, vkt_view pv, vkt_view labels, vkt_view dl,
                           vkt_view dz, float beta, uint32_t rows, uint32_t cols)
{
    uint64_t n = (uint64_t)rows * cols;
    vkt_status st = check(s, "kt_sce_backward", n);
    if (st != VKT_OK)
        return st;
    vkt_context *ctx = s->ctx;
    vkt_view v[4] = {pv, labels, dl, dz};
    uint64_t c[4] = {n, rows, 1, n};
    const char *names[4] = {"p", "labels", "dl", "dz"};
    if ((st = views_ok(ctx, v, c, names, 4)) != VKT_OK)
        return st;
    struct push_sce p = {
        .rows = rows, .cols = cols, .scale = 1.0f / (float)rows, .beta = beta,
        .p_off = ku_shift(ctx, pv, 0), .l_off = ku_shift(ctx, labels, 0),
        .dl_off = ku_shift(ctx, dl, 0), .dz_off = ku_shift(ctx, dz, 0)};
    gpu_arg args[4] = {ku_arg(pv, 0, n, 0), ku_arg(labels, 0, rows, 0), ku_arg(dl, 0, 1, 0),
                       ku_arg(dz, 0, n, 1)};
    uint32_t spec[SPEC_WG_ONLY_COUNT] = {[SPEC_WG] = ku_workgroup_size(ctx)};
    return run(s, &k_sce_backward, spec, SPEC_WG_ONLY_COUNT, args, &p, groups_1d(ctx, n));
}

static vkt_status mse_run(vkt_stream *s, const char *fn, vkt_view a, vkt_view b, vkt_view l,
                          const vkt_view *d, float sign, float beta, uint64_t n)
{
    vkt_status st = check(s, fn, n);
    if (st != VKT_OK)
        return st;
    vkt_context *ctx = s->ctx;
    vkt_view v[4] = {a, b, l, d ? *d : l};
    uint64_t c[4] = {n, n, 1, d ? n : 1};
    const char *names[4] = {"a", "b", d ? "dl" : "loss", "d"};
    if ((st = views_ok(ctx, v, c, names, 4)) != VKT_OK)
        return st;
    struct push_mse p = {
        .n = (uint32_t)n, .scale = (d ? 2.0f : 1.0f) / (float)n, .sign = sign, .beta = beta,
        .a_off = ku_shift(ctx, a, 0), .b_off = ku_shift(ctx, b, 0),
        .l_off = ku_shift(ctx, l, 0), .d_off = ku_shift(ctx, v[3], 0)};
    /* forward: the loss is written through binding 3 (D); binding 2 (DL, readonly) is
     * bound to it too and never read */
    gpu_arg args[4] = {ku_arg(a, 0, n, 0), ku_arg(b, 0, n, 0), ku_arg(l, 0, 1, 0),
                       ku_arg(v[3], 0, c[3], 1)};
    uint32_t spec[SPEC_MSE_COUNT] = {[SPEC_WG] = ku_workgroup_size(ctx),
                                     [SPEC_MSE_BACKWARD] = d != NULL};
    if (!d && (st = single_group(ctx, fn, n, 1, &spec[SPEC_WG])) != VKT_OK)
        return st;
    return run(s, &k_mse, spec, SPEC_MSE_COUNT, args, &p, d ? groups_1d(ctx, n) : 1);
}

vkt_status kt_mse(vkt_stream *s, vkt_view a, vkt_view b, vkt_view loss, uint64_t n)
{
    return mse_run(s, "kt_mse", a, b, loss, NULL, 1.0f, 0.0f, n);
}

vkt_status kt_mse_backward(vkt_stream *s, vkt_view a, vkt_view b, vkt_view dl, vkt_view d,
                           float sign, float beta, uint64_t n)
{
    return mse_run(s, "kt_mse_backward", a, b, dl, &d, sign, beta, n);
}

vkt_status kt_axpby(vkt_stream *s, float alpha, vkt_view x, float beta, vkt_view y, uint64_t n)
{
    vkt_status st = check(s, "kt_axpby", n);
    if (st != VKT_OK)
        return st;
    vkt_context *ctx = s->ctx;
    vkt_view v[2] = {x, y};
    uint64_t c[2] = {n, n};
    const char *names[2] = {"x", "y"};
    if ((st = views_ok(ctx, v, c, names, 2)) != VKT_OK)
        return st;
    struct push_axpby p = {.n = (uint32_t)n, .alpha = alpha, .beta = beta,
                               .x_off = ku_shift(ctx, x, 0), .y_off = ku_shift(ctx, y, 0)};
    gpu_arg args[2] = {ku_arg(x, 0, n, 0), ku_arg(y, 0, n, 1)};
    int vec4 = n % 4 == 0 && all_vec4(ctx, v, 2);
    uint32_t spec[SPEC_AXPBY_COUNT] = {[SPEC_WG] = ku_workgroup_size(ctx),
                                       [SPEC_AXPBY_ACCUM] = beta != 0.0f,
                                       [SPEC_AXPBY_VEC4] = (uint32_t)vec4};
    return run(s, &k_axpby, spec, SPEC_AXPBY_COUNT, args, &p, groups_1d(ctx, vec4 ? n / 4 : n));
}

/* One block dispatch; x and y are bound from element x_first / y_first on. */
static vkt_status block_run(vkt_stream *s, uint32_t kind, vkt_view x, uint64_t x_first,
                            uint64_t x_count, vkt_view y, uint64_t y_first, uint64_t y_count,
                            struct push_block *p)
{
    vkt_context *ctx = s->ctx;
    vkt_view v[2] = {x, y};
    uint64_t c[2] = {x_first + x_count, y_first + y_count};
    const char *names[2] = {"x", "y"};
    vkt_status st = views_ok(ctx, v, c, names, 2);
    if (st != VKT_OK)
        return st;
    p->x_off = ku_shift(ctx, x, x_first);
    p->y_off = ku_shift(ctx, y, y_first);
    gpu_arg args[2] = {ku_arg(x, x_first, x_count, 0), ku_arg(y, y_first, y_count, 1)};
    uint32_t spec[SPEC_BLOCK_COUNT] = {[SPEC_WG] = ku_workgroup_size(ctx),
                                       [SPEC_BLOCK_KIND] = kind};
    return run(s, &k_block, spec, SPEC_BLOCK_COUNT, args, p, groups_1d(ctx, p->n));
}

vkt_status kt_slice(vkt_stream *s, vkt_view x, uint32_t src_row, uint32_t src_base, vkt_view y,
                    uint32_t dst_row, uint32_t dst_base, uint32_t rows, uint32_t len,
                    float alpha, float beta)
{
    uint64_t n = (uint64_t)rows * len;
    vkt_status st = check(s, "kt_slice", n);
    if (st != VKT_OK)
        return st;
    struct push_block p = {.n = (uint32_t)n, .d0 = len, .src_row = src_row,
                               .dst_row = dst_row, .alpha = alpha, .beta = beta};
    uint64_t xc = (uint64_t)(rows - 1) * src_row + len, yc = (uint64_t)(rows - 1) * dst_row + len;
    return block_run(s, 0, x, src_base, xc, y, dst_base, yc, &p);
}

vkt_status kt_broadcast(vkt_stream *s, vkt_view x, vkt_view y, uint32_t outer, uint32_t axis,
                        uint32_t inner, float alpha, float beta)
{
    uint64_t n = (uint64_t)outer * axis * inner;
    vkt_status st = check(s, "kt_broadcast", n);
    if (st != VKT_OK)
        return st;
    struct push_block p = {.n = (uint32_t)n, .d0 = axis, .d1 = inner, .alpha = alpha,
                               .beta = beta};
    return block_run(s, 1, x, 0, (uint64_t)outer * inner, y, 0, n, &p);
}

vkt_status kt_transpose(vkt_stream *s, vkt_view x, vkt_view y, uint32_t rows, uint32_t cols,
                        float alpha, float beta)
{
    uint64_t n = (uint64_t)rows * cols;
    vkt_status st = check(s, "kt_transpose", n);
    if (st != VKT_OK)
        return st;
    struct push_block p = {.n = (uint32_t)n, .d0 = rows, .d1 = cols, .alpha = alpha,
                               .beta = beta};
    return block_run(s, 2, x, 0, n, y, 0, n, &p);
}

vkt_status kt_dropout(vkt_stream *s, vkt_view x, vkt_view ctrl, vkt_view y, uint64_t n,
                      float pr, uint64_t seed, uint64_t i_off, uint64_t row_units, float beta)
{
    vkt_status st = check(s, "kt_dropout", n);
    if (st != VKT_OK)
        return st;
    vkt_context *ctx = s->ctx;
    vkt_view v[3] = {x, ctrl, y};
    uint64_t c[3] = {n, CTRL_KEY_WORDS, n};
    const char *names[3] = {"x", "ctrl", "y"};
    if ((st = views_ok(ctx, v, c, names, 3)) != VKT_OK)
        return st;
    struct push_dropout p = {
        .n = (uint32_t)n, .threshold = dropout_threshold(pr),
        .scale = (float)(1.0 / (1.0 - (double)pr)), .beta = beta,
        .seed_lo = (uint32_t)seed, .seed_hi = (uint32_t)(seed >> 32),
        .x_off = ku_shift(ctx, x, 0), .c_off = ku_shift(ctx, ctrl, 0),
        .y_off = ku_shift(ctx, y, 0), .i_off = (uint32_t)i_off,
        .row_units = (uint32_t)row_units};
    gpu_arg args[3] = {ku_arg(x, 0, n, 0), ku_arg(ctrl, 0, CTRL_KEY_WORDS, 0),
                       ku_arg(y, 0, n, 1)};
    uint32_t spec[SPEC_WG_ONLY_COUNT] = {[SPEC_WG] = ku_workgroup_size(ctx)};
    return run(s, &k_dropout, spec, SPEC_WG_ONLY_COUNT, args, &p, groups_1d(ctx, n));
}
