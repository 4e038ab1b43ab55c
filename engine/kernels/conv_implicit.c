/* conv_implicit.c - the conv_implicit variant of 2-D convolution (conv.h; entry points and
 * checks in conv.c): each pass is one implicit GEMM, shaders/conv_implicit.comp, with the
 * tile and split of its plan (conv_plan.c); on 16-bit operands conv_implicit_lowp.comp
 * (conv_lowp_implicit), or the warp tiling of conv_frag.glsl with the plan of
 * kc_conv_frag_plan: conv_coopmat_f16 / _bf16 (conv_lowp_coopmat, prebuilt:
 * docs/toolchain.md) or conv_frag (conv_lowp_frag, and conv_lowp_coopmat's bf16 where the
 * device has no bf16 matrices). A split weight gradient's partial sums go to
 * the stream's scratch memory and shaders/conv_reduce.comp adds them. No workspace: the
 * shader gathers x (or dy) inside its tile loads. Where a tensor of the whole batch would
 * pass what one binding may span, the batch goes in chunks of samples (the weight
 * gradient adding each chunk's sum). */
#include <string.h>

#include "kernels/conv_impl.h"
#include "kernels/kernel_util.h"
#include "push_conv.h"
#include "spec.h"
#include "conv_implicit.spv.h"
#include "conv_implicit_lowp.spv.h"
#include "conv_reduce.spv.h"
#include "conv_coopmat_bf16.spv.h"
#include "conv_coopmat_f16.spv.h"
#include "conv_frag.spv.h"

#define S GPU_BIND_STORAGE
/* Bindings: the gathered operand (x, or dy for dx), the other (w, or dy for dw), the
 * output (y, dx, dw or the partial sums), the bias or relu's output, db. */
static const gpu_kernel k_implicit = {"conv_implicit", spv_conv_implicit,
                                      sizeof spv_conv_implicit, 5, {S, S, S, S, S},
                                      sizeof(struct push_conv_gemm), SPEC_CONV_IMPLICIT_COUNT};
/* The same with bindings 0 and 1 of 16-bit elements (conv_lowp_implicit). */
static const gpu_kernel k_implicit_lowp = {"conv_implicit_lowp", spv_conv_implicit_lowp,
                                           sizeof spv_conv_implicit_lowp, 5, {S, S, S, S, S},
                                           sizeof(struct push_conv_gemm),
                                           SPEC_CONV_IMPLICIT_COUNT};
/* conv_frag.glsl's warp tiling, the same bindings (the operands 16-bit). */
#define FRAG_KERNEL(name)                                                                    \
    {#name, spv_##name, sizeof spv_##name, 5, {S, S, S, S, S}, sizeof(struct push_conv_gemm), \
     SPEC_CONV_FRAG_COUNT}
_Static_assert(SPEC_CONV_FRAG_PASS == SPEC_CONV_IMPLICIT_PASS &&
                   SPEC_CONV_FRAG_BM == SPEC_CONV_IMPLICIT_BM &&
                   SPEC_CONV_FRAG_COUNT >= SPEC_CONV_IMPLICIT_COUNT,
               "the pass and tile where conv_implicit's are; spec[] holds both");
static const gpu_kernel k_frag_kernels[3] = {
    FRAG_KERNEL(conv_frag), FRAG_KERNEL(conv_coopmat_f16), FRAG_KERNEL(conv_coopmat_bf16)};
#undef FRAG_KERNEL
#define k_frag k_frag_kernels[0]
#define k_coopmat_f16 k_frag_kernels[1]
#define k_coopmat_bf16 k_frag_kernels[2]

const gpu_kernel *kc_conv_frag_kernels(uint32_t *count)
{
    *count = 3;
    return k_frag_kernels;
}
/* Bindings: the partial sums, dw, db. */
static const gpu_kernel k_reduce = {"conv_reduce", spv_conv_reduce, sizeof spv_conv_reduce, 3,
                                    {S, S, S}, sizeof(struct push_conv_gemm),
                                    SPEC_CONV_REDUCE_COUNT};

static int g_force_tile = -1;
static uint32_t g_force_splits = 1;

void kc_conv_implicit_force(int tile, uint32_t splits)
{
    g_force_tile = tile;
    g_force_splits = splits;
}

/* One pass over a chunk: its tensors as bound. A NULL view is not used by the pass. */
typedef struct pass_io {
    int pass;
    uint32_t nc;
    vkt_view gather, other, out; /* bindings 0, 1, 2 */
    uint64_t n_gather, n_other, n_out;
    const vkt_view *aux;         /* binding 3: bias (n_aux = oc) or relu_y (as gather) */
    uint64_t n_aux;
    const vkt_view *db;          /* binding 4 (the weight pass) */
    int want_dw;
    float beta, beta_b;
    uint32_t flags;
} pass_io;

static uint32_t shift(const kc_conv_call *c, vkt_view v)
{
    return gpu_arg_shift(c->ctx, v.offset * 4, GPU_BIND_STORAGE);
}

/* Bytes of an operand element (bindings 0 and 1: x, w, dy): 4, or 2 (conv_lowp_implicit). */
static uint32_t op_size(const kc_conv_call *c)
{
    return (uint32_t)vkt_dtype_size(c->lp);
}

/* An operand's shift and binding, in elements of its type. */
static uint32_t op_shift(const kc_conv_call *c, vkt_view v)
{
    uint32_t sz = op_size(c);
    return gpu_arg_shift_bytes(c->ctx, v.offset * sz, GPU_BIND_STORAGE) / sz;
}

static gpu_arg op_arg(const kc_conv_call *c, vkt_view v, uint64_t count)
{
    uint32_t sz = op_size(c);
    return (gpu_arg){v.buffer, v.offset * sz, count * sz, 0};
}

/* An unused binding: 4 bytes at (or just before) the gathered operand (never accessed). */
static gpu_arg unused_arg(const kc_conv_call *c, vkt_view gather)
{
    return (gpu_arg){gather.buffer, gather.offset * op_size(c) / 4 * 4, 4, 0};
}

/* The cooperative-matrix shape of conv_frag.glsl's tiling for this call, NULL for the
 * fp32-arithmetic kernel (conv_frag.comp); *k: the kernel. */
static const gpu_mat_shape *frag_kernel(const kc_conv_call *c, const gpu_kernel **k)
{
    const gpu_profile *p = &c->ctx->profile;
    if (c->lv == GPU_V_CONV_LOWP_COOPMAT) {
        int bf = c->lp == VKT_DTYPE_BF16;
        const gpu_mat_shape *m = gpu_mat_for(p, bf ? GPU_MAT_BF16 : GPU_MAT_F16);
        if (m && (!bf || (p->caps & GPU_CAP_BFLOAT16))) {
            *k = bf ? &k_coopmat_bf16 : &k_coopmat_f16;
            return m;
        }
    }
    *k = &k_frag;
    return NULL;
}

static int frag_tiling(const kc_conv_call *c)
{
    return c->lv == GPU_V_CONV_LOWP_COOPMAT || c->lv == GPU_V_CONV_LOWP_FRAG;
}

/* The plan of a pass (or the tests' forced tile), VKT_ERROR_LIMIT when none fits. */
static vkt_status plan(kc_conv_call *c, const pass_io *io, kc_conv_plan *pl)
{
    const gpu_profile *p = &c->ctx->profile;
    int want_db = io->db != NULL;
    if (frag_tiling(c)) {
        const gpu_kernel *k;
        const gpu_mat_shape *mat = frag_kernel(c, &k);
        if (!kc_conv_frag_plan(p, c->g, io->nc, io->pass, io->want_dw, want_db, mat,
                               g_force_tile >= 0 ? g_force_splits : 0, pl))
            return err_fail(c->ctx->errmsg, VKT_ERROR_LIMIT,
                            "%s: no tile of %s fits '%s' for this convolution (%u bytes of "
                            "shared memory, %u invocations per workgroup, its shader loops "
                            "stop after %llu iterations)", c->fn, k->name, p->name,
                            p->shared_memory, p->max_invocations,
                            (unsigned long long)p->loop_budget);
        return VKT_OK;
    }
    int ok = g_force_tile >= 0
                 ? kc_conv_plan_with(p, c->g, io->nc, io->pass, io->want_dw, want_db,
                                     (uint32_t)g_force_tile, g_force_splits, pl)
                 : kc_conv_implicit_plan(p, c->g, io->nc, io->pass, io->want_dw, want_db, pl);
    if (!ok)
        return err_fail(c->ctx->errmsg, VKT_ERROR_LIMIT,
                        "%s: no tile of conv_implicit fits '%s' for this convolution (%u "
                        "bytes of shared memory, %u invocations per workgroup, its shader "
                        "loops stop after %llu iterations)", c->fn, p->name,
                        p->shared_memory, p->max_invocations,
                        (unsigned long long)p->loop_budget);
    return VKT_OK;
}

/* The partial sums' memory: the stream's scratch. Where it cannot be had, or would take
 * more than 1/64 of a context's memory limit (as vkt_gemm: a smaller device is being
 * modelled, whose memory the models plan to the byte), the pass runs unsplit (slower,
 * the same result) unless the loop budget needs the split. */
static vkt_status split_memory(kc_conv_call *c, const pass_io *io, kc_conv_plan *pl,
                               vkt_buffer **ws)
{
    *ws = NULL;
    if (pl->splits <= 1)
        return VKT_OK;
    kc_conv_plan one;
    const gpu_kernel *k;
    int needed = frag_tiling(c)
                     ? !kc_conv_frag_plan(&c->ctx->profile, c->g, io->nc, io->pass,
                                          io->want_dw, io->db != NULL, frag_kernel(c, &k), 1,
                                          &one) ||
                           one.splits > 1
                     : !kc_conv_plan_with(&c->ctx->profile, c->g, io->nc, io->pass,
                                          io->want_dw, io->db != NULL, pl->tile, 1, &one) ||
                           one.splits > 1;
    char saved[VKT_ERRMSG_SIZE];
    memcpy(saved, c->ctx->errmsg, sizeof saved);
    uint64_t limit = c->ctx->mem.limit;
    vkt_status st = limit && pl->workspace * 4 > limit / 64 && !needed
                        ? VKT_ERROR_OUT_OF_MEMORY
                        : gpu_stream_scratch(c->s, pl->workspace * 4, ws);
    if (st == VKT_OK || needed)
        return st;
    memcpy(c->ctx->errmsg, saved, sizeof saved);
    *pl = one;
    return VKT_OK;
}

/* The sum of the partial sums into dw and db. A grid-stride loop whose lanes each add
 * `splits` values per output: within the device's loop budget. */
static vkt_status reduce(kc_conv_call *c, const pass_io *io, const kc_conv_plan *pl,
                         vkt_buffer *ws, struct push_conv_gemm push)
{
    uint64_t total = (uint64_t)c->g->oc * pl->n;
    uint32_t wg = ku_workgroup_size(c->ctx);
    uint64_t per_lane = ku_loop_budget(c->ctx) / 2 / (pl->splits + 1);
    uint64_t g = ku_groups_1d(c->ctx, total, wg), need = (total + wg * per_lane - 1) /
                                                          (wg * per_lane);
    uint32_t groups[3] = {(uint32_t)(g > need ? g : need), 1, 1};
    if (groups[0] > GPU_MAX_GROUPS)
        groups[0] = GPU_MAX_GROUPS;
    push.splits = pl->splits;
    push.a_off = 0;
    const vkt_view *dw = io->want_dw ? &io->out : io->db; /* dw unwanted: never written */
    const vkt_view *db = io->db ? io->db : &io->out;      /* db unwanted: never written */
    gpu_arg args[3] = {{ws, 0, pl->workspace * 4, 0},
                       ku_arg(*dw, 0, io->want_dw ? io->n_out : c->g->oc, io->want_dw),
                       ku_arg(*db, 0, io->db ? c->g->oc : 1, io->db != NULL)};
    push.o_off = shift(c, *dw);
    push.d_off = shift(c, *db);
    uint32_t spec[SPEC_CONV_REDUCE_COUNT] = {[SPEC_WG] = wg};
    return gpu_dispatch(c->s, &k_reduce, spec, SPEC_CONV_REDUCE_COUNT, args, &push, groups);
}

/* vec4 stores of an NCHW output: planes a multiple of 4 long from a 16-byte aligned
 * start (4 adjacent columns of C are then adjacent in one plane). */
static int vec_out(const kc_conv_call *c, const pass_io *io)
{
    const kc_conv *g = c->g;
    uint64_t plane = io->pass == (int)CONV_PASS_FORWARD ? c->d.P : (uint64_t)g->h * g->w;
    return io->pass != (int)CONV_PASS_WEIGHT && plane % 4 == 0 &&
           ku_vec4_aligned(c->ctx, io->out);
}

static vkt_status run_pass(kc_conv_call *c, const pass_io *io)
{
    const kc_conv *g = c->g;
    kc_conv_plan pl;
    vkt_buffer *ws;
    vkt_status st = plan(c, io, &pl);
    if (st == VKT_OK)
        st = split_memory(c, io, &pl, &ws);
    if (st != VKT_OK)
        return st;
    int split = pl.splits > 1;
    struct push_conv_gemm push = {
        .n = io->nc, .c = g->c, .h = g->h, .w = g->w, .oc = g->oc, .oh = g->oh, .ow = g->ow,
        .ph = g->pad_h, .pw = g->pad_w, .groups = g->groups, .cg = (uint32_t)c->d.cg,
        .og = (uint32_t)c->d.og, .m = (uint32_t)pl.m,
        .ncols = (uint32_t)pl.n, .k = (uint32_t)pl.k, .k_chunk = pl.k_chunk,
        .splits = pl.splits, .b_off = op_shift(c, io->gather),
        .a_off = op_shift(c, io->other),
        .o_off = split ? 0 : shift(c, io->out), .e_off = io->aux ? shift(c, *io->aux) : 0,
        .d_off = io->db ? shift(c, *io->db) : 0, .ldo = (uint32_t)c->d.ckk_g,
        .bias_col = pl.bias_col, .beta = io->beta, .beta_b = io->beta_b,
        .flags = io->flags | (split ? CONV_SPLIT : 0) | (vec_out(c, io) ? CONV_VEC_OUT : 0) |
                 (io->beta != 0.0f ? CONV_READ_OUT : 0) |
                 (io->beta_b != 0.0f ? CONV_READ_DB : 0) |
                 (c->lp == VKT_DTYPE_BF16 ? CONV_BF16 : 0)};
    /* An unused binding 3 (E, readonly) aliases the gathered operand's first bytes; an
     * unused binding 4 (db: a writable block, which the stream orders as written,
     * gpu_kernel_writable) the output, written anyway. Neither is accessed. */
    gpu_arg out = split ? (gpu_arg){ws, 0, pl.workspace * 4, 1}
                        : ku_arg(io->out, 0, io->n_out, 1);
    gpu_arg args[5] = {
        op_arg(c, io->gather, io->n_gather), op_arg(c, io->other, io->n_other), out,
        io->aux ? ku_arg(*io->aux, 0, io->n_aux, 0) : unused_arg(c, io->gather),
        io->db && !split ? ku_arg(*io->db, 0, g->oc, 1) : out};
    const gpu_kernel *k = c->lp == VKT_DTYPE_FP32 ? &k_implicit : &k_implicit_lowp;
    /* the window and the pass at the same places in both kernels' constants */
    uint32_t spec[SPEC_CONV_FRAG_COUNT] = {
        [SPEC_WG] = pl.threads, [SPEC_CONV_KH] = g->kh, [SPEC_CONV_KW] = g->kw,
        [SPEC_CONV_SH] = g->stride_h, [SPEC_CONV_SW] = g->stride_w, [SPEC_CONV_DH] = g->dil_h,
        [SPEC_CONV_DW] = g->dil_w, [SPEC_CONV_IMPLICIT_PASS] = (uint32_t)io->pass,
        [SPEC_CONV_IMPLICIT_BM] = pl.bm, [SPEC_CONV_IMPLICIT_BN] = pl.bn,
        [SPEC_CONV_IMPLICIT_BK] = pl.bk, [SPEC_CONV_IMPLICIT_TM] = pl.tm,
        [SPEC_CONV_IMPLICIT_TN] = pl.tn};
    if (frag_tiling(c)) {
        frag_kernel(c, &k);
        spec[SPEC_CONV_FRAG_BM] = pl.bm, spec[SPEC_CONV_FRAG_BN] = pl.bn;
        spec[SPEC_CONV_FRAG_BK] = pl.bk, spec[SPEC_CONV_FRAG_TM] = pl.tm;
        spec[SPEC_CONV_FRAG_TN] = pl.tn, spec[SPEC_CONV_FRAG_TK] = pl.tk;
        spec[SPEC_CONV_FRAG_SG] = pl.sg;
    }
    for (uint64_t t0 = 0; t0 < pl.col_tiles; t0 += GPU_MAX_GROUPS) {
        uint64_t left = pl.col_tiles - t0;
        uint32_t groups[3] = {(uint32_t)(left < GPU_MAX_GROUPS ? left : GPU_MAX_GROUPS),
                              pl.row_tiles, pl.z};
        push.tile0 = (uint32_t)t0;
        if ((st = gpu_dispatch(c->s, k, spec, k->n_spec, args, &push, groups)) != VKT_OK)
            return st;
    }
    return split ? reduce(c, io, &pl, ws, push) : VKT_OK;
}

/* Samples per chunk: the whole batch unless a chunk's x or y would pass one binding
 * (ku_chunk_elements: maxStorageBufferRange, and 2^30 so the shader's indices stay in
 * 32 bits); VKT_ERROR_LIMIT naming the sizes when one sample or the weight does. */
static vkt_status plan_chunks(kc_conv_call *c)
{
    const kc_conv *g = c->g;
    uint64_t limit = ku_chunk_elements(c->ctx), ny = g->oc * c->d.P;
    uint64_t widest = c->d.chw > ny ? c->d.chw : ny, nw = g->oc * c->d.ckk_g;
    if (widest > limit || nw > limit)
        return err_fail(c->ctx->errmsg, VKT_ERROR_LIMIT,
                        "%s: one sample's %s (%llu elements) is more than one binding may "
                        "span (%llu, from maxStorageBufferRange %llu bytes)", c->fn,
                        nw > widest ? "weight" : ny > c->d.chw ? "y" : "x",
                        (unsigned long long)(nw > widest ? nw : widest),
                        (unsigned long long)limit,
                        (unsigned long long)c->ctx->info.max_storage_buffer_range);
    uint64_t nc = limit / widest;
    c->nc = (uint32_t)(nc < g->n ? nc : g->n);
    return VKT_OK;
}

vkt_status kc_implicit_forward(kc_conv_call *c, vkt_view x, vkt_view w, const vkt_view *bias,
                               int relu, vkt_view y)
{
    const kc_conv *g = c->g;
    const kc_dims *d = &c->d;
    vkt_status st = plan_chunks(c);
    for (uint32_t n0 = 0; st == VKT_OK && n0 < g->n; n0 += c->nc) {
        uint32_t nc = g->n - n0 < c->nc ? g->n - n0 : c->nc;
        pass_io io = {.pass = CONV_PASS_FORWARD, .nc = nc, .gather = kc_at(x, n0 * d->chw),
                      .other = w, .out = kc_at(y, (uint64_t)n0 * g->oc * d->P),
                      .n_gather = nc * d->chw, .n_other = g->oc * d->ckk_g,
                      .n_out = (uint64_t)nc * g->oc * d->P, .aux = bias, .n_aux = g->oc,
                      .flags = (bias ? CONV_BIAS : 0) | (relu ? CONV_RELU : 0)};
        st = run_pass(c, &io);
    }
    return st;
}

/* The backward of one chunk of nc samples from n0; `first` for the first chunk (the only
 * one whose dw and db use their beta: later chunks add). */
static vkt_status backward_chunk(kc_conv_call *c, const kc_conv_grads *a, uint32_t n0,
                                 uint32_t nc, int first)
{
    const kc_conv *g = c->g;
    const kc_dims *d = &c->d;
    uint64_t ny = (uint64_t)nc * g->oc * d->P, nx = nc * d->chw;
    vkt_view dy = kc_at(a->dy, (uint64_t)n0 * g->oc * d->P), mask = dy;
    if (a->relu_y)
        mask = kc_at(*a->relu_y, (uint64_t)n0 * g->oc * d->P);
    uint32_t masked = a->relu_y ? CONV_MASK : 0;
    vkt_status st = VKT_OK;
    if (a->dx) {
        pass_io io = {.pass = CONV_PASS_DATA, .nc = nc, .gather = dy, .other = a->w,
                      .out = kc_at(*a->dx, n0 * d->chw), .n_gather = ny,
                      .n_other = g->oc * d->ckk_g, .n_out = nx,
                      .aux = a->relu_y ? &mask : NULL, .n_aux = ny, .beta = a->beta_x,
                      .flags = masked};
        st = run_pass(c, &io);
    }
    if (st == VKT_OK && (a->dw || a->db)) {
        vkt_view db = a->db ? *a->db : dy;
        pass_io io = {.pass = CONV_PASS_WEIGHT, .nc = nc, .gather = kc_at(a->x, n0 * d->chw),
                      .other = dy, .out = a->dw ? *a->dw : db, .n_gather = nx,
                      .n_other = ny, .n_out = a->dw ? g->oc * d->ckk_g : g->oc,
                      .aux = a->relu_y ? &mask : NULL, .n_aux = ny,
                      .db = a->db ? &db : NULL, .want_dw = a->dw != NULL,
                      .beta = a->dw ? (first ? a->beta_w : 1.0f) : 0.0f,
                      .beta_b = a->db ? (first ? a->beta_b : 1.0f) : 0.0f, .flags = masked};
        st = run_pass(c, &io);
    }
    return st;
}

vkt_status kc_implicit_backward(kc_conv_call *c, const kc_conv_grads *a)
{
    const kc_conv *g = c->g;
    vkt_status st = plan_chunks(c);
    for (uint32_t n0 = 0; st == VKT_OK && n0 < g->n; n0 += c->nc) {
        uint32_t nc = g->n - n0 < c->nc ? g->n - n0 : c->nc;
        st = backward_chunk(c, a, n0, nc, n0 == 0);
    }
    return st;
}
