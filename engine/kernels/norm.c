/* norm.c - dispatch of layer, RMS and batch normalization, forward and backward (see
 * norm.h; shaders/layernorm*.comp, shaders/rmsnorm*.comp, shaders/batchnorm*.comp). */
#include "kernels/norm.h"

#include <math.h>
#include <stdio.h>

#include "kernels/kernel_util.h"
#include "push_norm.h"
#include "spec.h"
#include "batchnorm.spv.h"
#include "batchnorm_backward.spv.h"
#include "layernorm.spv.h"
#include "layernorm_backward.spv.h"
#include "rmsnorm.spv.h"
#include "rmsnorm_backward.spv.h"

#define S GPU_BIND_STORAGE

static const gpu_kernel k_layernorm = {
    "layernorm", spv_layernorm, sizeof spv_layernorm, 5, {S, S, S, S, S},
    sizeof(struct push_layernorm), SPEC_LAYERNORM_COUNT};
static const gpu_kernel k_layernorm_backward = {
    "layernorm_backward", spv_layernorm_backward, sizeof spv_layernorm_backward, 7,
    {S, S, S, S, S, S, S}, sizeof(struct push_layernorm), SPEC_LAYERNORM_BACKWARD_COUNT};
static const gpu_kernel k_rmsnorm = {
    "rmsnorm", spv_rmsnorm, sizeof spv_rmsnorm, 4, {S, S, S, S},
    sizeof(struct push_rmsnorm), SPEC_RMSNORM_COUNT};
static const gpu_kernel k_rmsnorm_backward = {
    "rmsnorm_backward", spv_rmsnorm_backward, sizeof spv_rmsnorm_backward, 6,
    {S, S, S, S, S, S}, sizeof(struct push_rmsnorm), SPEC_RMSNORM_BACKWARD_COUNT};
static const gpu_kernel k_batchnorm = {
    "batchnorm", spv_batchnorm, sizeof spv_batchnorm, 7, {S, S, S, S, S, S, S},
    sizeof(struct push_batchnorm), SPEC_BATCHNORM_COUNT};
static const gpu_kernel k_batchnorm_backward = {
    "batchnorm_backward", spv_batchnorm_backward, sizeof spv_batchnorm_backward, 7,
    {S, S, S, S, S, S, S}, sizeof(struct push_batchnorm), SPEC_BATCHNORM_BACKWARD_COUNT};

/* ---- argument checks -------------------------------------------------------------- */

/* One view argument: name, view, element count, whether the kernel writes it. */
typedef struct nv {
    const char *name;
    vkt_view v;
    uint64_t count;
    int write;
} nv;

static int overlap(const nv *a, const nv *b)
{
    return a->v.buffer == b->v.buffer && a->v.offset < b->v.offset + b->count &&
           b->v.offset < a->v.offset + a->count;
}

static int same(const nv *a, const nv *b)
{
    return a->v.buffer == b->v.buffer && a->v.offset == b->v.offset && a->count == b->count;
}

/* Every view inside its buffer; no written view overlapping another view, except the
 * pair (in_place[0], in_place[1]) (indices into v; -1: none) when they coincide. */
static vkt_status check_views(vkt_context *ctx, const char *fn, const nv *v, uint32_t n,
                              const int in_place[2])
{
    for (uint32_t i = 0; i < n; i++) {
        vkt_status st = gpu_check_view(ctx, v[i].name, v[i].v, v[i].count);
        if (st != VKT_OK) {
            char why[VKT_ERRMSG_SIZE];
            snprintf(why, sizeof why, "%s", ctx->errmsg);
            return err_fail(ctx->errmsg, st, "%s: %s", fn, why);
        }
    }
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t j = 0; j < n; j++) {
            if (i == j || !v[i].write || !overlap(&v[i], &v[j]) || (v[j].write && j < i))
                continue;
            int allowed = in_place && (((int)i == in_place[0] && (int)j == in_place[1]) ||
                                       ((int)j == in_place[0] && (int)i == in_place[1]));
            if (allowed && same(&v[i], &v[j]))
                continue;
            return err_fail(ctx->errmsg, VKT_ERROR_INVALID_ARGUMENT,
                            "%s: output %s overlaps %s%s", fn, v[i].name, v[j].name,
                            allowed ? " without coinciding with it" : "");
        }
    return VKT_OK;
}

static vkt_status check_stream(vkt_stream *s, const char *fn)
{
    if (!s)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "%s: stream is NULL", fn);
    return VKT_OK;
}

static vkt_status check_float(vkt_context *ctx, const char *fn, const char *what, float v,
                              int nonnegative)
{
    if (!isfinite(v) || (nonnegative && v < 0.0f))
        return err_fail(ctx->errmsg, VKT_ERROR_INVALID_ARGUMENT, "%s: %s = %g must be %s", fn,
                        what, (double)v, nonnegative ? "finite and >= 0" : "finite");
    return VKT_OK;
}

static int all_vec4(const vkt_context *ctx, const nv *v, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        if (!ku_vec4_aligned(ctx, v[i].v))
            return 0;
    return 1;
}

static uint32_t log2u(uint32_t t)
{
    uint32_t l = 0;
    while (t > 1) {
        t >>= 1;
        l++;
    }
    return l;
}

/* Workgroups of one role of a row-style kernel: `units` units, T threads each, wg / T
 * units per workgroup, at most `cap` workgroups looping over the blocks; every thread's
 * loop iterations (`per_block` for each block it takes) must stay within the budget. */
static vkt_status role_groups(vkt_context *ctx, const char *fn, uint64_t units, uint32_t t,
                              uint32_t wg, uint64_t per_block, uint32_t cap, uint32_t *groups)
{
    uint64_t per_group = wg / t, blocks = (units + per_group - 1) / per_group;
    uint64_t g = blocks < cap ? blocks : cap;
    uint64_t rounds = (blocks + g - 1) / g;
    if (rounds * per_block > ku_loop_budget(ctx))
        return err_fail(ctx->errmsg, VKT_ERROR_LIMIT,
                        "%s: %llu units of %llu loop iterations are too many for this device "
                        "(its shader loops stop after %llu iterations)", fn,
                        (unsigned long long)units, (unsigned long long)per_block,
                        (unsigned long long)ku_loop_budget(ctx));
    *groups = (uint32_t)(g ? g : 1);
    return VKT_OK;
}

/* A workgroup of wg threads holding `per_thread` bytes of shared memory each fits the
 * device. */
static vkt_status check_shared(vkt_context *ctx, const char *fn, uint32_t wg,
                               uint32_t per_thread)
{
    uint64_t shared = (uint64_t)per_thread * wg;
    if (ctx->info.max_shared_memory && shared > ctx->info.max_shared_memory)
        return err_fail(ctx->errmsg, VKT_ERROR_LIMIT,
                        "%s: a workgroup of %u threads needs %llu bytes of shared memory; the "
                        "device has %u", fn, wg, (unsigned long long)shared,
                        ctx->info.max_shared_memory);
    return VKT_OK;
}

/* The grid of a normalization backward that computes dx by rows and the per-column
 * gradients (dgamma, dbeta) by columns as two roles of one dispatch: threads per row (two
 * passes over it, pr) and per column (one pass over the rows, pc), the workgroup the
 * larger of the two plans' (checked against shared memory at shared_per_thread bytes),
 * and the row-role and column-role workgroup counts gr and gc (each within half the grid
 * limit when both roles run). */
typedef struct two_roles {
    ku_rows pr, pc;
    uint32_t wg, gr, gc;
} two_roles;

static vkt_status plan_two_roles(vkt_context *ctx, const char *fn, uint32_t rows,
                                 uint32_t units, int rows_role, int cols_role,
                                 uint32_t shared_per_thread, two_roles *g)
{
    vkt_status st;
    *g = (two_roles){{0, 1, 0}, {0, 1, 0}, 0, 0, 0};
    if (rows_role && (st = ku_plan_rows(ctx, fn, rows, units, 2, &g->pr)) != VKT_OK)
        return st;
    if (cols_role && (st = ku_plan_rows(ctx, fn, units, rows, 1, &g->pc)) != VKT_OK)
        return st;
    g->wg = g->pr.wg > g->pc.wg ? g->pr.wg : g->pc.wg;
    if ((st = check_shared(ctx, fn, g->wg, shared_per_thread)) != VKT_OK)
        return st;
    uint32_t cap = rows_role && cols_role ? GPU_MAX_GROUPS / 2 : GPU_MAX_GROUPS;
    const ku_rows *pr = &g->pr, *pc = &g->pc;
    if (rows_role && (st = role_groups(ctx, fn, rows, pr->t, g->wg,
                                       2ull * ((units + pr->t - 1) / pr->t) + log2u(pr->t) + 4,
                                       cap, &g->gr)) != VKT_OK)
        return st;
    if (cols_role && (st = role_groups(ctx, fn, units, pc->t, g->wg,
                                       (rows + pc->t - 1) / pc->t + log2u(pc->t) + 4, cap,
                                       &g->gc)) != VKT_OK)
        return st;
    return VKT_OK;
}

/* Every view of v within what one storage binding may span on this device (the kernels
 * bind each tensor whole): VKT_ERROR_LIMIT naming the argument, before the dispatch. */
static vkt_status check_bindable(vkt_context *ctx, const char *fn, const nv *v, uint32_t n)
{
    uint64_t most = ku_chunk_elements(ctx);
    for (uint32_t i = 0; i < n; i++)
        if (v[i].count > most)
            return err_fail(ctx->errmsg, VKT_ERROR_LIMIT,
                            "%s: %s spans %llu elements; one binding may span at most %llu on "
                            "this device (maxStorageBufferRange %llu bytes)", fn, v[i].name,
                            (unsigned long long)v[i].count, (unsigned long long)most,
                            (unsigned long long)ctx->info.max_storage_buffer_range);
    return VKT_OK;
}

/* The rows/cols check shared by the layernorm and rmsnorm calls. */
static vkt_status check_rows(vkt_context *ctx, const char *fn, uint32_t rows, uint32_t cols)
{
    if (rows == 0 || cols == 0)
        return err_fail(ctx->errmsg, VKT_ERROR_INVALID_ARGUMENT,
                        "%s: rows (%u) and cols (%u) must be at least 1", fn, rows, cols);
    if ((uint64_t)rows * cols > UINT32_MAX || rows > UINT32_MAX / 2)
        return err_fail(ctx->errmsg, VKT_ERROR_LIMIT,
                        "%s: %u x %u elements; at most 2^32 - 1 are supported", fn, rows, cols);
    return VKT_OK;
}

/* The plan of a forward row kernel (ku_plan_rows, two passes over a row) whose threads
 * each hold `shared_per_thread` bytes of shared memory. */
static vkt_status plan_rows_shared(vkt_context *ctx, const char *fn, uint32_t rows,
                                   uint32_t units, uint32_t shared_per_thread, ku_rows *plan)
{
    vkt_status st = ku_plan_rows(ctx, fn, rows, units, 2, plan);
    if (st != VKT_OK)
        return st;
    return check_shared(ctx, fn, plan->wg, shared_per_thread);
}

/* The checks every normalization backward starts with: at least one of the outputs out[]
 * (dx, dgamma, dbeta; rmsnorm has no dbeta) wanted, and their betas finite and >= 0. */
static vkt_status check_backward_outputs(vkt_context *ctx, const char *fn, const nv *out,
                                         uint32_t n_out, const float *beta)
{
    static const char *const names[3] = {"beta_x", "beta_g", "beta_b"};
    int any = 0;
    for (uint32_t i = 0; i < n_out; i++)
        any |= out[i].write;
    if (!any)
        return err_fail(ctx->errmsg, VKT_ERROR_INVALID_ARGUMENT, "%s: none of dx, dgamma%s "
                        "wanted", fn, n_out > 2 ? ", dbeta" : "");
    for (uint32_t i = 0; i < n_out; i++) {
        vkt_status st = check_float(ctx, fn, names[i], beta[i], 0);
        if (st != VKT_OK)
            return st;
    }
    return VKT_OK;
}

/* The views of a backward that are checked: the first `inputs` (read) and the wanted
 * outputs after them (an unwanted output's binding aliases dy as a read). Returns how many
 * were kept in used[]; *dx_at, when not NULL, is where v[inputs] (dx) landed. */
static uint32_t keep_used(const nv *v, uint32_t n, uint32_t inputs, nv *used, uint32_t *dx_at)
{
    uint32_t k = 0;
    for (uint32_t i = 0; i < n; i++)
        if (i < inputs || v[i].write) {
            if (i == inputs && dx_at)
                *dx_at = k;
            used[k++] = v[i];
        }
    return k;
}

/* The view of a backward output: the wanted one (count elements), or dy (n elements) read
 * in its place: left out of the checks, its binding adds no hazard. */
static nv out_view(const char *name, const vkt_view *want, vkt_view dy, uint64_t count,
                   uint64_t n)
{
    return (nv){name, want ? *want : dy, want ? count : n, want != NULL};
}

/* Each view bound in order, whole. */
static void bind_views(const nv *v, uint32_t n, gpu_arg *args)
{
    for (uint32_t i = 0; i < n; i++)
        args[i] = ku_arg(v[i].v, 0, v[i].count, v[i].write);
}

/* ---- layer and RMS normalization: the row kernels ------------------------------------ */

/* What the two row normalizations differ in besides their push constants. Their views:
 * forward x, the per-column parameters (gamma, beta; rmsnorm gamma only), y, the saved
 * statistics (stats [rows, 2] = (mean, rstd); rmsnorm rstd [rows]); backward x, gamma, the
 * statistics, dy, then the outputs dx, dgamma (, dbeta). The statistics are read one or
 * two floats a row, every other view as vec4s where all of those are aligned. */
typedef struct row_norm {
    const gpu_kernel *fwd, *bwd;
    uint32_t params;                 /* per-column parameters: 2 (layernorm) or 1 */
    uint32_t fwd_shared, bwd_shared; /* shared memory per thread, bytes */
    uint32_t fwd_spec, bwd_spec;     /* spec constants of each */
} row_norm;

/* shared memory: forward the row sums' tree (a vec4 a thread; rmsnorm a float), backward
 * the row sums and the column sums (two vec4s; rmsnorm one) */
static const row_norm rn_layernorm = {&k_layernorm, &k_layernorm_backward, 2, 16, 32,
                                      SPEC_LAYERNORM_COUNT, SPEC_LAYERNORM_BACKWARD_COUNT};
static const row_norm rn_rmsnorm = {&k_rmsnorm, &k_rmsnorm_backward, 1, 4, 16,
                                    SPEC_RMSNORM_COUNT, SPEC_RMSNORM_BACKWARD_COUNT};
_Static_assert(SPEC_RMSNORM_T == SPEC_LAYERNORM_T && SPEC_RMSNORM_VEC4 == SPEC_LAYERNORM_VEC4 &&
                   SPEC_RMSNORM_BACKWARD_TR == SPEC_LAYERNORM_BACKWARD_TR &&
                   SPEC_RMSNORM_BACKWARD_TC == SPEC_LAYERNORM_BACKWARD_TC &&
                   SPEC_RMSNORM_BACKWARD_VEC4 == SPEC_LAYERNORM_BACKWARD_VEC4 &&
                   SPEC_RMSNORM_BACKWARD_HAS_DX == SPEC_LAYERNORM_BACKWARD_HAS_DX &&
                   SPEC_RMSNORM_BACKWARD_HAS_DG == SPEC_LAYERNORM_BACKWARD_HAS_DG &&
                   SPEC_LAYERNORM_BACKWARD_HAS_DB >= SPEC_RMSNORM_BACKWARD_COUNT,
               "the row kernels' spec constants share their ids (layernorm's HAS_DB past "
               "rmsnorm's count: row_backward sets it for both, rmsnorm's dispatch drops it)");

/* Whether cols and the n views of v but the statistics (index `stats`) suit vec4s; and
 * each view's offset into its push-constant field off[i]. */
static int row_views(const vkt_context *ctx, const nv *v, uint32_t n, uint32_t stats,
                     uint32_t cols, uint32_t *const *off)
{
    nv vec_views[7];
    uint32_t k = 0;
    for (uint32_t i = 0; i < n; i++) {
        *off[i] = ku_shift(ctx, v[i].v, 0);
        if (i != stats)
            vec_views[k++] = v[i];
    }
    return cols % 4 == 0 && all_vec4(ctx, vec_views, k);
}

/* A row forward: views v as row_norm says (y may be x: each element is read, then
 * written), push the push constants with rows, cols and eps set, off[i] its field of
 * v[i]'s offset. */
static vkt_status row_forward(vkt_stream *s, const char *fn, const row_norm *k, const nv *v,
                              uint32_t rows, uint32_t cols, float eps, const void *push,
                              uint32_t *const *off)
{
    uint32_t n = k->params + 3;
    const int in_place[2] = {(int)n - 2, 0};
    vkt_status st = check_stream(s, fn);
    if (st != VKT_OK)
        return st;
    vkt_context *ctx = s->ctx;
    if ((st = check_rows(ctx, fn, rows, cols)) != VKT_OK ||
        (st = check_float(ctx, fn, "eps", eps, 1)) != VKT_OK ||
        (st = check_views(ctx, fn, v, n, in_place)) != VKT_OK ||
        (st = check_bindable(ctx, fn, v, n)) != VKT_OK)
        return st;
    int vec4 = row_views(ctx, v, n, n - 1, cols, off);
    ku_rows plan;
    if ((st = plan_rows_shared(ctx, fn, rows, vec4 ? cols / 4 : cols, k->fwd_shared, &plan)) !=
        VKT_OK)
        return st;
    gpu_arg args[5];
    bind_views(v, n, args);
    /* y == x: one binding written is enough (the same range both ways in one command). */
    args[0].write = same(&v[n - 2], &v[0]);
    uint32_t spec[SPEC_LAYERNORM_COUNT] = {[SPEC_WG] = plan.wg, [SPEC_LAYERNORM_T] = plan.t,
                                           [SPEC_LAYERNORM_VEC4] = (uint32_t)vec4};
    uint32_t groups[3] = {plan.groups, 1, 1};
    return gpu_dispatch(s, k->fwd, spec, k->fwd_spec, args, push, groups);
}

/* A row backward: views v as row_norm says, betas in the order of the outputs, push and
 * off as row_forward's; *row_groups (in push) receives the dx role's workgroups. */
static vkt_status row_backward(vkt_stream *s, const char *fn, const row_norm *k, const nv *v,
                               uint32_t rows, uint32_t cols, const float *beta,
                               const void *push, uint32_t *const *off, uint32_t *row_groups)
{
    uint32_t n = k->params + 5;
    vkt_status st = check_stream(s, fn);
    if (st != VKT_OK)
        return st;
    vkt_context *ctx = s->ctx;
    if ((st = check_rows(ctx, fn, rows, cols)) != VKT_OK ||
        (st = check_backward_outputs(ctx, fn, v + 4, n - 4, beta)) != VKT_OK)
        return st;
    nv used[7] = {{0}};
    uint32_t n_used = keep_used(v, n, 4, used, NULL);
    if ((st = check_views(ctx, fn, used, n_used, NULL)) != VKT_OK ||
        (st = check_bindable(ctx, fn, used, n_used)) != VKT_OK)
        return st;
    int vec4 = row_views(ctx, v, n, 2, cols, off);
    int has_db = n > 6 && v[6].write;
    two_roles g;
    if ((st = plan_two_roles(ctx, fn, rows, vec4 ? cols / 4 : cols, v[4].write,
                             v[5].write || has_db, k->bwd_shared, &g)) != VKT_OK)
        return st;
    *row_groups = g.gr;
    gpu_arg args[7];
    bind_views(v, n, args);
    uint32_t spec[SPEC_LAYERNORM_BACKWARD_COUNT] = {
        [SPEC_WG] = g.wg, [SPEC_LAYERNORM_BACKWARD_TR] = g.pr.t,
        [SPEC_LAYERNORM_BACKWARD_TC] = g.pc.t, [SPEC_LAYERNORM_BACKWARD_VEC4] = (uint32_t)vec4,
        [SPEC_LAYERNORM_BACKWARD_HAS_DX] = (uint32_t)v[4].write,
        [SPEC_LAYERNORM_BACKWARD_HAS_DG] = (uint32_t)v[5].write,
        [SPEC_LAYERNORM_BACKWARD_HAS_DB] = (uint32_t)has_db};
    uint32_t groups[3] = {g.gr + g.gc, 1, 1};
    return gpu_dispatch(s, k->bwd, spec, k->bwd_spec, args, push, groups);
}

vkt_status kn_layernorm(vkt_stream *s, vkt_view x, vkt_view gamma, vkt_view beta, vkt_view y,
                        vkt_view stats, uint32_t rows, uint32_t cols, float eps)
{
    uint64_t n = (uint64_t)rows * cols;
    nv v[5] = {{"x", x, n, 0}, {"gamma", gamma, cols, 0}, {"beta", beta, cols, 0},
               {"y", y, n, 1}, {"stats", stats, 2ull * rows, 1}};
    struct push_layernorm p = {.rows = rows, .cols = cols, .eps = eps};
    uint32_t *const off[5] = {&p.x_off, &p.g_off, &p.b_off, &p.y_off, &p.s_off};
    return row_forward(s, "kn_layernorm", &rn_layernorm, v, rows, cols, eps, &p, off);
}

uint64_t kn_layernorm_workspace_elems(uint32_t rows, uint32_t cols)
{
    (void)rows;
    (void)cols;
    return 0;
}

vkt_status kn_layernorm_backward(vkt_stream *s, vkt_view x, vkt_view gamma, vkt_view stats,
                                 vkt_view dy, const vkt_view *dx, float beta_x,
                                 const vkt_view *dgamma, float beta_g, const vkt_view *dbeta,
                                 float beta_b, vkt_view workspace, uint32_t rows,
                                 uint32_t cols)
{
    (void)workspace; /* kn_layernorm_workspace_elems is 0 */
    uint64_t n = (uint64_t)rows * cols;
    nv v[7] = {{"x", x, n, 0}, {"gamma", gamma, cols, 0}, {"stats", stats, 2ull * rows, 0},
               {"dy", dy, n, 0}, out_view("dx", dx, dy, n, n),
               out_view("dgamma", dgamma, dy, cols, n), out_view("dbeta", dbeta, dy, cols, n)};
    const float beta[3] = {beta_x, beta_g, beta_b};
    struct push_layernorm p = {.rows = rows, .cols = cols, .beta_x = beta_x, .beta_g = beta_g,
                               .beta_b = beta_b};
    uint32_t *const off[7] = {&p.x_off,  &p.g_off,  &p.s_off, &p.dy_off,
                              &p.dx_off, &p.dg_off, &p.db_off};
    return row_backward(s, "kn_layernorm_backward", &rn_layernorm, v, rows, cols, beta, &p, off,
                        &p.row_groups);
}

vkt_status kn_rmsnorm(vkt_stream *s, vkt_view x, vkt_view gamma, vkt_view y, vkt_view rstd,
                      uint32_t rows, uint32_t cols, float eps)
{
    uint64_t n = (uint64_t)rows * cols;
    nv v[4] = {{"x", x, n, 0}, {"gamma", gamma, cols, 0}, {"y", y, n, 1},
               {"rstd", rstd, rows, 1}};
    struct push_rmsnorm p = {.rows = rows, .cols = cols, .eps = eps};
    uint32_t *const off[4] = {&p.x_off, &p.g_off, &p.y_off, &p.r_off};
    return row_forward(s, "kn_rmsnorm", &rn_rmsnorm, v, rows, cols, eps, &p, off);
}

uint64_t kn_rmsnorm_workspace_elems(uint32_t rows, uint32_t cols)
{
    return kn_layernorm_workspace_elems(rows, cols); /* 0: none either */
}

vkt_status kn_rmsnorm_backward(vkt_stream *s, vkt_view x, vkt_view gamma, vkt_view rstd,
                               vkt_view dy, const vkt_view *dx, float beta_x,
                               const vkt_view *dgamma, float beta_g, vkt_view workspace,
                               uint32_t rows, uint32_t cols)
{
    (void)workspace; /* kn_rmsnorm_workspace_elems is 0 */
    uint64_t n = (uint64_t)rows * cols;
    nv v[6] = {{"x", x, n, 0}, {"gamma", gamma, cols, 0}, {"rstd", rstd, rows, 0},
               {"dy", dy, n, 0}, out_view("dx", dx, dy, n, n),
               out_view("dgamma", dgamma, dy, cols, n)};
    const float beta[2] = {beta_x, beta_g};
    struct push_rmsnorm p = {.rows = rows, .cols = cols, .beta_x = beta_x, .beta_g = beta_g};
    uint32_t *const off[6] = {&p.x_off, &p.g_off, &p.r_off, &p.dy_off, &p.dx_off, &p.dg_off};
    return row_backward(s, "kn_rmsnorm_backward", &rn_rmsnorm, v, rows, cols, beta, &p, off,
                        &p.row_groups);
}

/* ---- batch normalization ------------------------------------------------------------ */

static vkt_status check_bn_sizes(vkt_context *ctx, const char *fn, uint32_t n, uint32_t c,
                                 uint32_t hw)
{
    if (n == 0 || c == 0 || hw == 0)
        return err_fail(ctx->errmsg, VKT_ERROR_INVALID_ARGUMENT,
                        "%s: n (%u), c (%u) and hw (%u) must be at least 1", fn, n, c, hw);
    if ((uint64_t)n * c * hw > UINT32_MAX)
        return err_fail(ctx->errmsg, VKT_ERROR_LIMIT,
                        "%s: %u x %u x %u elements; at most 2^32 - 1 are supported", fn, n, c,
                        hw);
    return VKT_OK;
}

/* The grid of the batchnorm kernels: one workgroup per channel (up to GPU_MAX_GROUPS,
 * looping over the rest), the usual workgroup size doubled while a thread would walk
 * more than half the loop budget over `passes` passes of its share of a channel. */
static vkt_status bn_grid(vkt_context *ctx, const char *fn, uint64_t units, uint32_t c,
                          uint32_t passes, uint32_t *wg_out, uint32_t *groups)
{
    uint32_t max = 1024, wg = ku_workgroup_size(ctx);
    if (ctx->info.max_workgroup_invocations && max > ctx->info.max_workgroup_invocations)
        max = ctx->info.max_workgroup_invocations;
    /* shared memory: 16 bytes per thread (the forward's vec3 statistics) */
    while (ctx->info.max_shared_memory && 16ull * max > ctx->info.max_shared_memory)
        max /= 2;
    uint32_t g = c < GPU_MAX_GROUPS ? c : GPU_MAX_GROUPS;
    uint64_t rounds = (c + g - 1) / g, budget = ku_loop_budget(ctx) / 2;
    for (;;) {
        uint64_t it = rounds * (passes * ((units + wg - 1) / wg) + 2 * log2u(wg) + 4);
        if (it <= budget)
            break;
        if (wg * 2 > max)
            return err_fail(ctx->errmsg, VKT_ERROR_LIMIT,
                            "%s: channels of %llu elements are too long for this device (its "
                            "shader loops stop after %llu iterations)", fn,
                            (unsigned long long)units, (unsigned long long)ku_loop_budget(ctx));
        wg *= 2;
    }
    *wg_out = wg;
    *groups = g;
    return VKT_OK;
}

vkt_status kn_batchnorm(vkt_stream *s, vkt_view x, vkt_view gamma, vkt_view beta, vkt_view y,
                        vkt_view stats, vkt_view running_mean, vkt_view running_var,
                        uint32_t n, uint32_t c, uint32_t hw, float eps, float momentum,
                        int training)
{
    static const char fn[] = "kn_batchnorm";
    vkt_status st = check_stream(s, fn);
    if (st != VKT_OK)
        return st;
    vkt_context *ctx = s->ctx;
    if ((st = check_bn_sizes(ctx, fn, n, c, hw)) != VKT_OK ||
        (st = check_float(ctx, fn, "eps", eps, 1)) != VKT_OK ||
        (st = check_float(ctx, fn, "momentum", momentum, 0)) != VKT_OK)
        return st;
    if (training != KN_BN_EVAL && training != KN_BN_TRAIN && training != KN_BN_TRAIN_KEEP)
        return err_fail(ctx->errmsg, VKT_ERROR_INVALID_ARGUMENT, "%s: training is %d; 0, 1 "
                        "or 2 (KN_BN_EVAL, KN_BN_TRAIN, KN_BN_TRAIN_KEEP) expected", fn,
                        training);
    int update = training == KN_BN_TRAIN;
    training = training != KN_BN_EVAL;
    uint64_t total = (uint64_t)n * c * hw;
    /* In inference, stats is not checked and not bound: x stands in for it (read,
     * never accessed), and the running values are only read. */
    nv v[7] = {{"x", x, total, 0}, {"gamma", gamma, c, 0}, {"beta", beta, c, 0},
               {"y", y, total, 1}, {"running_mean", running_mean, c, update},
               {"running_var", running_var, c, update},
               {"stats", training ? stats : x, training ? 2ull * c : total, training}};
    const int in_place[2] = {3, 0};
    if ((st = check_views(ctx, fn, v, training ? 7 : 6, in_place)) != VKT_OK)
        return st;
    nv rows_data[2] = {v[0], v[3]};
    int vec4 = hw % 4 == 0 && all_vec4(ctx, rows_data, 2);
    uint32_t wg, groups;
    uint64_t units = (uint64_t)n * (vec4 ? hw / 4 : hw);
    if ((st = bn_grid(ctx, fn, units, c, training ? 2 : 1, &wg, &groups)) != VKT_OK)
        return st;
    uint64_t count = (uint64_t)n * hw;
    struct push_batchnorm p = {
        .n = n, .c = c, .hw = hw, .eps = eps, .momentum = momentum,
        .unbias = count > 1 ? (float)((double)count / (double)(count - 1)) : 1.0f,
        .x_off = ku_shift(ctx, x, 0), .g_off = ku_shift(ctx, gamma, 0),
        .b_off = ku_shift(ctx, beta, 0), .y_off = ku_shift(ctx, y, 0),
        .s_off = ku_shift(ctx, v[6].v, 0), .rm_off = ku_shift(ctx, running_mean, 0),
        .rv_off = ku_shift(ctx, running_var, 0), .update = (uint32_t)update};
    /* bindings: x, gamma, beta, y, stats, running_mean, running_var */
    static const uint32_t order[7] = {0, 1, 2, 3, 6, 4, 5};
    gpu_arg args[7];
    for (uint32_t i = 0; i < 7; i++)
        args[i] = ku_arg(v[order[i]].v, 0, v[order[i]].count, v[order[i]].write);
    args[0].write = same(&v[3], &v[0]); /* y == x: the range is written */
    uint32_t spec[SPEC_BATCHNORM_COUNT] = {[SPEC_WG] = wg,
                                           [SPEC_BATCHNORM_TRAIN] = (uint32_t)training,
                                           [SPEC_BATCHNORM_VEC4] = (uint32_t)vec4};
    uint32_t g[3] = {groups, 1, 1};
    return gpu_dispatch(s, &k_batchnorm, spec, SPEC_BATCHNORM_COUNT, args, &p, g);
}

uint64_t kn_batchnorm_workspace_elems(uint32_t n, uint32_t c, uint32_t hw)
{
    (void)n;
    (void)c;
    (void)hw;
    return 0;
}

vkt_status kn_batchnorm_backward(vkt_stream *s, vkt_view x, vkt_view gamma, vkt_view stats,
                                 vkt_view dy, const vkt_view *dx, float beta_x,
                                 const vkt_view *dgamma, float beta_g, const vkt_view *dbeta,
                                 float beta_b, vkt_view workspace, uint32_t n, uint32_t c,
                                 uint32_t hw)
{
    static const char fn[] = "kn_batchnorm_backward";
    (void)workspace; /* kn_batchnorm_workspace_elems is 0 */
    vkt_status st = check_stream(s, fn);
    if (st != VKT_OK)
        return st;
    vkt_context *ctx = s->ctx;
    uint64_t total = (uint64_t)n * c * hw;
    nv v[7] = {{"x", x, total, 0}, {"gamma", gamma, c, 0}, {"stats", stats, 2ull * c, 0},
               {"dy", dy, total, 0}, out_view("dx", dx, dy, total, total),
               out_view("dgamma", dgamma, dy, c, total), out_view("dbeta", dbeta, dy, c, total)};
    const float beta[3] = {beta_x, beta_g, beta_b};
    if ((st = check_bn_sizes(ctx, fn, n, c, hw)) != VKT_OK ||
        (st = check_backward_outputs(ctx, fn, v + 4, 3, beta)) != VKT_OK)
        return st;
    nv used[7];
    uint32_t dx_at = 0, n_used = keep_used(v, 7, 4, used, &dx_at);
    const int in_place[2] = {dx ? (int)dx_at : -1, 3}; /* dx may be dy */
    if ((st = check_views(ctx, fn, used, n_used, in_place)) != VKT_OK)
        return st;
    nv rows_data[3] = {v[0], v[3], v[4]};
    int vec4 = hw % 4 == 0 && all_vec4(ctx, rows_data, 3);
    uint32_t wg, groups;
    uint64_t units = (uint64_t)n * (vec4 ? hw / 4 : hw);
    if ((st = bn_grid(ctx, fn, units, c, dx ? 2 : 1, &wg, &groups)) != VKT_OK)
        return st;
    struct push_batchnorm p = {
        .n = n, .c = c, .hw = hw, .beta_x = beta_x, .beta_g = beta_g, .beta_b = beta_b,
        .x_off = ku_shift(ctx, x, 0), .g_off = ku_shift(ctx, gamma, 0),
        .s_off = ku_shift(ctx, stats, 0), .dy_off = ku_shift(ctx, dy, 0),
        .dx_off = ku_shift(ctx, v[4].v, 0), .dg_off = ku_shift(ctx, v[5].v, 0),
        .db_off = ku_shift(ctx, v[6].v, 0)};
    gpu_arg args[7];
    bind_views(v, 7, args);
    if (dx && same(&v[4], &v[3]))
        args[3].write = 1; /* in place: the range is bound both ways; mark both written */
    uint32_t spec[SPEC_BATCHNORM_BACKWARD_COUNT] = {
        [SPEC_WG] = wg, [SPEC_BATCHNORM_BACKWARD_VEC4] = (uint32_t)vec4,
        [SPEC_BATCHNORM_BACKWARD_HAS_DX] = dx != NULL,
        [SPEC_BATCHNORM_BACKWARD_HAS_DG] = dgamma != NULL,
        [SPEC_BATCHNORM_BACKWARD_HAS_DB] = dbeta != NULL};
    uint32_t g[3] = {groups, 1, 1};
    return gpu_dispatch(s, &k_batchnorm_backward, spec, SPEC_BATCHNORM_BACKWARD_COUNT, args, &p,
                        g);
}
