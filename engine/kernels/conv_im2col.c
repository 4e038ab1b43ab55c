/* conv_im2col.c - the conv_im2col variant of 2-D convolution (conv.h, entry points and
 * checks in conv.c): im2col (shaders/im2col.comp), the tuned GEMM (vkt_gemm, one per
 * group), the move into NCHW with the bias (shaders/conv_move.comp); backward: dy into
 * the workspace (conv_move.comp), the bias gradient (conv_bias_grad.comp), dw and dcols
 * by GEMM, dx by gathering dcols (col2im.comp). The variant lavapipe runs (CPU style),
 * and the fallback of GPU-style devices that cannot run conv_implicit.
 *
 * Workspace of a chunk of nc samples, R = nc oh ow rows, each matrix starting 16 bytes
 * aligned (so the GEMM and the move read and write vec4s where widths allow):
 *   rows [oc, R]        channel-major: the GEMM writes y's rows there (forward), the
 *                       backward moves dy there; both sides of the move are contiguous
 *                       along a plane, and W rows_g^T / rows_g^T W are plain GEMMs
 *   cols [R, ckk]       im2col (forward, dw), then dcols (dx) in the same place; ckk is
 *                       c kh kw rounded up to a multiple of 4 (every row 16-byte aligned)
 * Chunks are whole samples: the whole batch when the workspace allows. */
#include <stdio.h>

#include "kernels/conv_impl.h"
#include "kernels/kernel_util.h"
#include "push_conv.h"
#include "spec.h"
#include "col2im.spv.h"
#include "conv_bias_grad.spv.h"
#include "conv_move.spv.h"
#include "im2col.spv.h"

/* Inputs are read through storage texel buffers (R32F, or RGBA32F where a view is 16-byte
 * aligned), outputs written through storage buffers: on lavapipe a texel read is a vector
 * gather where a storage-buffer access is a loop over the lanes. */
#define S GPU_BIND_STORAGE
#define SR GPU_BIND_STORAGE_TEXEL_R
#define S4 GPU_BIND_STORAGE_TEXEL_RGBA
#define CONV_KERNEL(name, n_bind, b0, count)                                              \
    {#name, spv_##name, sizeof spv_##name, n_bind, {b0, S, S},                    \
     sizeof(struct push_conv), count}
static const gpu_kernel k_im2col = CONV_KERNEL(im2col, 2, SR, SPEC_IM2COL_COUNT);
static const gpu_kernel k_col2im = CONV_KERNEL(col2im, 2, SR, SPEC_COL2IM_COUNT);
static const gpu_kernel k_move[2] = {CONV_KERNEL(conv_move, 3, SR, SPEC_CONV_MOVE_COUNT),
                                     CONV_KERNEL(conv_move, 3, S4, SPEC_CONV_MOVE_COUNT)};
static const gpu_kernel k_bias_grad[2] = {
    CONV_KERNEL(conv_bias_grad, 2, SR, SPEC_CONV_BIAS_GRAD_COUNT),
    CONV_KERNEL(conv_bias_grad, 2, S4, SPEC_CONV_BIAS_GRAD_COUNT)};

/* Workspace elements beyond the two matrices: up to 3 before each to align it. */

/* Rows or columns one vkt_gemm call may have along a dimension its grid spans: the CPU
 * kernel's 16-row tiles times the workgroup-count limit every device supports. */
#define GEMM_MAX_SPAN (16ull * GPU_MAX_GROUPS)

/* Samples per chunk: as many as the workspace holds, and as keep every binding of a
 * chunk within what the device allows. Fails with VKT_ERROR_LIMIT when not even one
 * sample fits. */
static vkt_status plan_chunks(kc_conv_call *c, uint64_t ws_elems)
{
    const kc_conv *g = c->g;
    const kc_dims *d = &c->d;
    uint64_t nc = ws_elems >= d->per + KC_WS_SLACK ? (ws_elems - KC_WS_SLACK) / d->per : 0;
    if (nc == 0)
        return err_fail(c->ctx->errmsg, VKT_ERROR_LIMIT,
                        "%s: one sample needs %llu workspace elements (oh ow (oc + c kh kw "
                        "rounded up to 4) + %u = %llu (%u + %llu) + %u), but the workspace "
                        "has %llu (see kc_conv_workspace_elems)", c->fn,
                        (unsigned long long)(d->per + KC_WS_SLACK), KC_WS_SLACK,
                        (unsigned long long)d->P, g->oc, (unsigned long long)d->ckk, KC_WS_SLACK,
                        (unsigned long long)ws_elems);
    /* Storage bindings, and the R32F texel views of the inputs */
    uint64_t limit = ku_chunk_elements(c->ctx);
    if (limit > c->ctx->props.limits.maxTexelBufferElements)
        limit = c->ctx->props.limits.maxTexelBufferElements;
    uint64_t widest = d->chw, sizes[2] = {g->oc * d->P, d->P * d->ckk};
    const char *what = "x";
    for (int i = 0; i < 2; i++)
        if (sizes[i] > widest) {
            widest = sizes[i];
            what = i ? "the im2col matrix" : "y";
        }
    if (widest > limit)
        return err_fail(c->ctx->errmsg, VKT_ERROR_LIMIT,
                        "%s: one sample's %s spans %llu elements, more than one binding may "
                        "(%llu, from maxStorageBufferRange %llu bytes and "
                        "maxTexelBufferElements %u)", c->fn, what, (unsigned long long)widest,
                        (unsigned long long)limit,
                        (unsigned long long)c->ctx->info.max_storage_buffer_range,
                        c->ctx->props.limits.maxTexelBufferElements);
    if (nc > limit / widest)
        nc = limit / widest;
    c->nc = (uint32_t)(nc < g->n ? nc : g->n);
    return VKT_OK;
}

/* The workspace matrices for chunks of c->nc samples, each from a 16-byte boundary. */
static void place_workspace(kc_conv_call *c, vkt_view ws)
{
    uint64_t rows = (ws.offset + 3) / 4 * 4;
    uint64_t cols = (rows + (uint64_t)c->nc * c->d.P * c->g->oc + 3) / 4 * 4;
    c->rows = (vkt_view){ws.buffer, rows};
    c->cols = (vkt_view){ws.buffer, cols};
}

/* ---- dispatches ---------------------------------------------------------------------- */

/* Workgroups of `wg` lanes for a grid-stride loop over `items`, each taking `inner` loop
 * iterations: as ku_groups_1d, at most the profile's grid_cap, and enough that no lane
 * loops past the budget. grid_cap is 32 in the CPU style: lavapipe spends about 2 us on
 * each workgroup besides its work (LP_NUM_THREADS=1; col2im of the MNIST CNN's second
 * layer: 3.47 ms with 784 groups, 1.85 ms with 32, 1.78 with 2), so few groups, each
 * lane looping; 32 keeps that many worker threads busy. */
static vkt_status grid_1d(kc_conv_call *c, uint64_t items, uint64_t inner, uint32_t wg,
                          uint32_t groups[3])
{
    uint64_t g = ku_groups_1d(c->ctx, items, wg);
    if (g > c->ctx->profile.grid_cap)
        g = c->ctx->profile.grid_cap;
    uint64_t per_lane = ku_loop_budget(c->ctx) / 2 / (inner + 1);
    uint64_t need = per_lane ? (items + wg * per_lane - 1) / (wg * per_lane) : UINT64_MAX;
    if (need > GPU_MAX_GROUPS)
        return err_fail(c->ctx->errmsg, VKT_ERROR_LIMIT,
                        "%s: %llu work items of %llu loop iterations each are too many for "
                        "this device (its shader loops stop after %llu iterations)", c->fn,
                        (unsigned long long)items, (unsigned long long)inner,
                        (unsigned long long)ku_loop_budget(c->ctx));
    groups[0] = (uint32_t)(g > need ? g : need);
    groups[1] = groups[2] = 1;
    return VKT_OK;
}

/* Work items per lane on CPU devices: locating an item costs vector divisions there
 * (im2col of the c = 1 layer of the MNIST CNN: 0.83 ms with 8 rows per lane, 1.05 with
 * 2); 1 on GPUs, where more lanes are better. */
static uint32_t run_of(const kc_conv_call *c)
{
    return c->ctx->profile.conv_run;
}

/* The element shift of a view bound as `type`. */
static uint32_t shift(const kc_conv_call *c, vkt_view v, gpu_bind_type type)
{
    return gpu_arg_shift(c->ctx, v.offset * 4, type);
}

/* Whether a view can be bound as RGBA32F texels from its element 0 (16-byte aligned). */
static int texel4_ok(const kc_conv_call *c, vkt_view v)
{
    return shift(c, v, S4) % 4 == 0;
}

/* Push constants of a chunk of nc samples. */
static struct push_conv conv_push(const kc_conv_call *c, uint32_t nc)
{
    const kc_conv *g = c->g;
    return (struct push_conv){
        .n = nc, .c = g->c, .h = g->h, .w = g->w, .oc = g->oc, .oh = g->oh, .ow = g->ow,
        .ph = g->pad_h, .pw = g->pad_w, .ckk = (uint32_t)c->d.ckk};
}

/* cols [nc P, ckk] from the chunk's x (x_chunk: its first sample): one lane per `run`
 * rows. */
static vkt_status im2col(kc_conv_call *c, vkt_view x_chunk, uint32_t nc)
{
    const kc_conv *g = c->g;
    struct push_conv p = conv_push(c, nc);
    p.plane = (uint32_t)c->d.P;
    p.t_off = shift(c, x_chunk, SR);
    p.m_off = shift(c, c->cols, S);
    uint64_t rows = nc * c->d.P;
    uint32_t wg = ku_workgroup_size(c->ctx), groups[3];
    p.run = run_of(c);
    vkt_status st = grid_1d(c, (rows + p.run - 1) / p.run, p.run * (g->c / 4 + 2), wg, groups);
    if (st != VKT_OK)
        return st;
    uint32_t spec[SPEC_IM2COL_COUNT] = {
        [SPEC_WG] = wg,           [SPEC_CONV_KH] = g->kh,   [SPEC_CONV_KW] = g->kw,
        [SPEC_CONV_SH] = g->stride_h, [SPEC_CONV_SW] = g->stride_w,
        [SPEC_CONV_DH] = g->dil_h, [SPEC_CONV_DW] = g->dil_w, [SPEC_IM2COL_C] = g->c};
    gpu_arg args[2] = {ku_arg(x_chunk, 0, nc * c->d.chw, 0),
                       ku_arg(c->cols, 0, rows * c->d.ckk, 1)};
    return gpu_dispatch(c->s, &k_im2col, spec, SPEC_IM2COL_COUNT, args, &p, groups);
}

/* dx of the chunk (dx_chunk: its first sample) gathered from dcols in cols, dx = sum +
 * beta dx: one lane per `run` runs of 4 elements of dx. */
static vkt_status col2im(kc_conv_call *c, vkt_view dx_chunk, uint32_t nc, float beta)
{
    const kc_conv *g = c->g;
    struct push_conv p = conv_push(c, nc);
    p.plane = g->h * g->w;
    p.beta = beta;
    p.t_off = shift(c, dx_chunk, S);
    p.m_off = shift(c, c->cols, SR);
    p.run = run_of(c);
    uint64_t n = nc * c->d.chw, quads = (n + 3) / 4;
    int vec4 = n % 4 == 0 && ku_vec4_aligned(c->ctx, dx_chunk);
    uint32_t wg = ku_workgroup_size(c->ctx), groups[3];
    vkt_status st = grid_1d(c, (quads + p.run - 1) / p.run,
                            p.run * (4ull * g->kh * (g->kw + 1) + 1), wg, groups);
    if (st != VKT_OK)
        return st;
    uint32_t spec[SPEC_COL2IM_COUNT] = {
        [SPEC_WG] = wg,           [SPEC_CONV_KH] = g->kh,   [SPEC_CONV_KW] = g->kw,
        [SPEC_CONV_SH] = g->stride_h, [SPEC_CONV_SW] = g->stride_w,
        [SPEC_CONV_DH] = g->dil_h, [SPEC_CONV_DW] = g->dil_w, [SPEC_COL2IM_VEC4] = (uint32_t)vec4};
    gpu_arg args[2] = {ku_arg(c->cols, 0, nc * c->d.P * c->d.ckk, 0),
                       ku_arg(dx_chunk, 0, n, 1)};
    return gpu_dispatch(c->s, &k_col2im, spec, SPEC_COL2IM_COUNT, args, &p, groups);
}

/* Between the chunk's NCHW tensor t (y or dy, t_chunk: its first sample) and rows:
 * dir 0 y = rows + bias, dir 1 rows = dy. One lane per run of `run` positions of a
 * plane: 16 on CPU devices (the divisions locating a run are vector divisions there,
 * paid once per run), 4 on GPUs (neighbouring lanes, neighbouring vec4s). */
static vkt_status move(kc_conv_call *c, int dir, vkt_view t_chunk, uint32_t nc,
                       const vkt_view *bias, int relu)
{
    const kc_conv *g = c->g;
    struct push_conv p = conv_push(c, nc);
    p.plane = (uint32_t)c->d.P;
    uint64_t n = (uint64_t)nc * g->oc * c->d.P;
    vkt_view src = dir == 0 ? c->rows : t_chunk, dst = dir == 0 ? t_chunk : c->rows;
    int quad = c->d.P % 4 == 0;
    int vec_in = quad && texel4_ok(c, src), vec_out = quad && ku_vec4_aligned(c->ctx, dst);
    uint32_t in_off = shift(c, src, vec_in ? S4 : SR), out_off = shift(c, dst, S);
    p.m_off = dir == 0 ? in_off : out_off;
    p.t_off = dir == 0 ? out_off : in_off;
    uint32_t run = c->ctx->profile.conv_move_run;
    uint64_t runs = (c->d.P + run - 1) / run; /* per plane */
    /* Binding 2: the bias (dir 0), the relu's output y (dir 1 with relu: `bias` is its
     * chunk), else the destination (never read then). */
    vkt_view bv = bias ? *bias : dst;
    uint64_t nb = !bias ? 1 : dir == 0 ? g->oc : n;
    p.b_off = shift(c, bv, S);
    uint32_t wg = ku_workgroup_size(c->ctx), groups[3];
    vkt_status st = grid_1d(c, (uint64_t)nc * g->oc * runs, run, wg, groups);
    if (st != VKT_OK)
        return st;
    gpu_arg args[3] = {ku_arg(src, 0, n, 0), ku_arg(dst, 0, n, 1), ku_arg(bv, 0, nb, 0)};
    /* The mask y as vec4s: planes of a multiple of 4 from a 16-byte aligned start. */
    int vec_y = dir == 1 && relu && quad && bias && ku_vec4_aligned(c->ctx, bv);
    uint32_t spec[SPEC_CONV_MOVE_COUNT] = {
        [SPEC_WG] = wg, [SPEC_CONV_MOVE_DIR] = (uint32_t)dir,
        [SPEC_CONV_MOVE_HAS_BIAS] = dir == 0 && bias, [SPEC_CONV_MOVE_QUAD] = (uint32_t)quad,
        [SPEC_CONV_MOVE_VEC_IN] = (uint32_t)vec_in, [SPEC_CONV_MOVE_VEC_OUT] = (uint32_t)vec_out,
        [SPEC_CONV_MOVE_RUN] = run, [SPEC_CONV_MOVE_RELU] = (uint32_t)relu,
        [SPEC_CONV_MOVE_VEC_Y] = (uint32_t)vec_y};
    return gpu_dispatch(c->s, &k_move[vec_in], spec, SPEC_CONV_MOVE_COUNT, args, &p, groups);
}

/* db = row sums of rows [oc, R] + beta db. Lanes per channel: 64, doubled while a lane
 * would loop past the budget. */
static vkt_status bias_grad(kc_conv_call *c, uint32_t nc, vkt_view db, float beta)
{
    const kc_conv *g = c->g;
    struct push_conv p = conv_push(c, nc);
    p.beta = beta;
    p.plane = (uint32_t)c->d.P;
    uint64_t R = nc * c->d.P, budget = ku_loop_budget(c->ctx) / 2;
    int vec_in = R % 4 == 0; /* rows starts 16-byte aligned, so does each row then */
    p.m_off = shift(c, c->rows, vec_in ? S4 : SR);
    p.b_off = shift(c, db, S);
    uint64_t units = vec_in ? R / 4 : R;
    uint32_t max_wg = c->ctx->info.max_workgroup_invocations;
    if (max_wg == 0 || max_wg > 1024)
        max_wg = 1024;
    uint32_t wg = 64, steps = 6;
    while ((units + wg - 1) / wg + steps + 2 > budget && wg * 2 <= max_wg)
        wg *= 2, steps++;
    uint64_t rounds = (g->oc + GPU_MAX_GROUPS - 1) / GPU_MAX_GROUPS;
    if (rounds * ((units + wg - 1) / wg + steps + 2) > budget)
        return err_fail(c->ctx->errmsg, VKT_ERROR_LIMIT,
                        "%s: bias gradient over %llu positions is too long for this device "
                        "(its shader loops stop after %llu iterations)", c->fn,
                        (unsigned long long)R, (unsigned long long)ku_loop_budget(c->ctx));
    gpu_arg args[2] = {ku_arg(c->rows, 0, g->oc * R, 0), ku_arg(db, 0, g->oc, 1)};
    uint32_t spec[SPEC_CONV_BIAS_GRAD_COUNT] = {[SPEC_WG] = wg,
                                                [SPEC_CONV_BIAS_GRAD_VEC_IN] = (uint32_t)vec_in};
    uint32_t groups[3] = {g->oc < GPU_MAX_GROUPS ? g->oc : GPU_MAX_GROUPS, 1, 1};
    return gpu_dispatch(c->s, &k_bias_grad[vec_in], spec, SPEC_CONV_BIAS_GRAD_COUNT, args, &p,
                        groups);
}

static vkt_status gemm(kc_conv_call *c, int ta, int tb, uint64_t m, uint64_t n, uint64_t k,
                       vkt_view a, uint64_t lda, vkt_view b, uint64_t ldb, float beta,
                       vkt_view cv, uint64_t ldc)
{
    vkt_gemm_desc d = {
        .trans_a = ta, .trans_b = tb, .m = (uint32_t)m, .n = (uint32_t)n, .k = (uint32_t)k,
        .alpha = 1.0f, .beta = beta, .a = a, .lda = (uint32_t)lda, .b = b,
        .ldb = (uint32_t)ldb, .c = cv, .ldc = (uint32_t)ldc};
    return vkt_gemm(c->s, &d);
}

/* Forward GEMMs of one chunk (R rows): rows_g [og, R] = W_g [og, ckk_g] cols_g^T, cols_g
 * being group g's columns of cols [R, ckk] (kc_conv_gemms). Split along R to fit the
 * GEMM's grid. */
static vkt_status forward_gemms(kc_conv_call *c, uint32_t nc, vkt_view w)
{
    const kc_dims *d = &c->d;
    kc_gemm s[KC_GEMMS];
    kc_conv_gemms(c->g, nc, s);
    const kc_gemm *f = &s[KC_GEMM_FORWARD];
    uint64_t R = f->n;
    for (uint32_t gi = 0; gi < c->g->groups; gi++)
        for (uint64_t r0 = 0; r0 < R; r0 += GEMM_MAX_SPAN) {
            uint64_t rn = R - r0 < GEMM_MAX_SPAN ? R - r0 : GEMM_MAX_SPAN;
            vkt_status st = gemm(c, f->trans_a, f->trans_b, f->m, rn, f->k,
                                 kc_at(w, gi * d->og * d->ckk_g),
                                 d->ckk_g, kc_at(c->cols, r0 * d->ckk + gi * d->ckk_g), d->ckk,
                                 0.0f, kc_at(c->rows, gi * d->og * R + r0), R);
            if (st != VKT_OK)
                return st;
        }
    return VKT_OK;
}

/* dw_g [og, ckk_g] = rows_g [og, R] cols_g [R, ckk_g] + beta_w dw_g; the sum over R is
 * split so that the GEMM's k-loop stays within the device's loop budget (the pieces after
 * the first add). */
static vkt_status weight_gemms(kc_conv_call *c, uint32_t nc, vkt_view dw, float beta_w)
{
    const kc_dims *d = &c->d;
    kc_gemm s[KC_GEMMS];
    kc_conv_gemms(c->g, nc, s);
    const kc_gemm *f = &s[KC_GEMM_WEIGHT];
    uint64_t R = f->k, kmax = ku_loop_budget(c->ctx) / 2;
    if (kmax > UINT32_MAX)
        kmax = UINT32_MAX;
    for (uint32_t gi = 0; gi < c->g->groups; gi++)
        for (uint64_t k0 = 0; k0 < R; k0 += kmax) {
            uint64_t kn = R - k0 < kmax ? R - k0 : kmax;
            vkt_status st = gemm(c, f->trans_a, f->trans_b, f->m, f->n, kn,
                                 kc_at(c->rows, gi * d->og * R + k0),
                                 R, kc_at(c->cols, k0 * d->ckk + gi * d->ckk_g), d->ckk,
                                 k0 == 0 ? beta_w : 1.0f, kc_at(dw, gi * d->og * d->ckk_g),
                                 d->ckk_g);
            if (st != VKT_OK)
                return st;
        }
    return VKT_OK;
}

/* dcols_g [R, ckk_g] = rows_g^T W_g, into group g's columns of cols (kc_conv_gemms). */
static vkt_status dcols_gemms(kc_conv_call *c, uint32_t nc, vkt_view w)
{
    const kc_dims *d = &c->d;
    kc_gemm s[KC_GEMMS];
    kc_conv_gemms(c->g, nc, s);
    const kc_gemm *f = &s[KC_GEMM_DATA];
    uint64_t R = f->m;
    for (uint32_t gi = 0; gi < c->g->groups; gi++)
        for (uint64_t r0 = 0; r0 < R; r0 += GEMM_MAX_SPAN) {
            uint64_t rn = R - r0 < GEMM_MAX_SPAN ? R - r0 : GEMM_MAX_SPAN;
            vkt_status st = gemm(c, f->trans_a, f->trans_b, rn, f->n, f->k,
                                 kc_at(c->rows, gi * d->og * R + r0),
                                 R, kc_at(w, gi * d->og * d->ckk_g), d->ckk_g, 0.0f,
                                 kc_at(c->cols, r0 * d->ckk + gi * d->ckk_g), d->ckk);
            if (st != VKT_OK)
                return st;
        }
    return VKT_OK;
}

/* The backward of one chunk of nc samples from n0; `first` for the first chunk (the
 * only one whose dw and db use their beta: later chunks add). */
static vkt_status backward_chunk(kc_conv_call *c, uint32_t n0, uint32_t nc, int first,
                                 vkt_view x, vkt_view w, vkt_view dy, const vkt_view *relu_y,
                                 const vkt_view *dx, float beta_x, const vkt_view *dw,
                                 float beta_w, const vkt_view *db, float beta_b)
{
    const kc_conv *g = c->g;
    const kc_dims *d = &c->d;
    uint64_t at_y = (uint64_t)n0 * g->oc * d->P;
    vkt_view y_chunk = relu_y ? kc_at(*relu_y, at_y) : dy;
    vkt_status st = move(c, 1, kc_at(dy, at_y), nc, relu_y ? &y_chunk : NULL, relu_y != NULL);
    if (st == VKT_OK && db)
        st = bias_grad(c, nc, *db, first ? beta_b : 1.0f);
    if (st == VKT_OK && dw) {
        st = im2col(c, kc_at(x, n0 * d->chw), nc);
        if (st == VKT_OK)
            st = weight_gemms(c, nc, *dw, first ? beta_w : 1.0f);
    }
    if (st == VKT_OK && dx) {
        st = dcols_gemms(c, nc, w);
        if (st == VKT_OK)
            st = col2im(c, kc_at(*dx, n0 * d->chw), nc, beta_x);
    }
    return st;
}

/* The workspace's chunks and matrices for a call whose views conv.c checked. */
static vkt_status begin(kc_conv_call *c, vkt_view ws, uint64_t ws_elems)
{
    if (!c->ctx->storage_texel) /* mandatory in Vulkan; the GEMM checks too */
        return err_fail(c->ctx->errmsg, VKT_ERROR_LIMIT,
                        "%s: the device lacks R32F / RGBA32F storage texel buffers", c->fn);
    vkt_status st = plan_chunks(c, ws_elems);
    if (st == VKT_OK)
        place_workspace(c, ws);
    return st;
}

vkt_status kc_im2col_forward(kc_conv_call *c, vkt_view x, vkt_view w, const vkt_view *bias,
                             int relu, vkt_view y, vkt_view ws, uint64_t ws_elems)
{
    const kc_conv *g = c->g;
    const kc_dims *d = &c->d;
    vkt_status st = begin(c, ws, ws_elems);
    for (uint32_t n0 = 0; st == VKT_OK && n0 < g->n; n0 += c->nc) {
        uint32_t nc = g->n - n0 < c->nc ? g->n - n0 : c->nc;
        if ((st = im2col(c, kc_at(x, n0 * d->chw), nc)) != VKT_OK ||
            (st = forward_gemms(c, nc, w)) != VKT_OK)
            return st;
        st = move(c, 0, kc_at(y, (uint64_t)n0 * g->oc * d->P), nc, bias, relu);
    }
    return st;
}

vkt_status kc_im2col_backward(kc_conv_call *c, const kc_conv_grads *a, vkt_view ws,
                              uint64_t ws_elems)
{
    const kc_conv *g = c->g;
    vkt_status st = begin(c, ws, ws_elems);
    for (uint32_t n0 = 0; st == VKT_OK && n0 < g->n; n0 += c->nc) {
        uint32_t nc = g->n - n0 < c->nc ? g->n - n0 : c->nc;
        st = backward_chunk(c, n0, nc, n0 == 0, a->x, a->w, a->dy, a->relu_y, a->dx,
                            a->beta_x, a->dw, a->beta_w, a->db, a->beta_b);
    }
    return st;
}
