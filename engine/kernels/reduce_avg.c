/* reduce_avg.c - the replicas' gradient average on their shared device (train_ops.h,
 * shaders/reduce_avg.comp) and its CPU reference, the host's scalar loop. */
#include "kernels/kernel_util.h"
#include "kernels/train_ops.h"
#include "push_reduce.h"
#include "spec.h"
#include "reduce_avg.spv.h"

#define S GPU_BIND_STORAGE

static const gpu_kernel k_reduce_avg = {
    "reduce_avg", spv_reduce_avg, sizeof spv_reduce_avg, 1 + REDUCE_AVG_INPUTS,
    {S, S, S, S, S, S, S}, sizeof(struct push_reduce_avg), SPEC_WG_ONLY_COUNT};

void kref_weighted_sum(float *out, const float *const *g, const float *w, uint32_t k,
                       uint64_t n)
{
    for (uint64_t i = 0; i < n; i++) {
        float s = 0.0f;
        for (uint32_t q = 0; q < k; q++)
            s += w[q] * g[q][i];
        out[i] = s;
    }
}

vkt_status kt_reduce_avg(vkt_stream *s, vkt_view out, const vkt_view *g, const float *w,
                         uint32_t k, uint64_t n)
{
    if (!s || !g || !w)
        return err_fail(s ? s->ctx->errmsg : NULL, VKT_ERROR_INVALID_ARGUMENT,
                        "kt_reduce_avg: NULL argument");
    vkt_context *ctx = s->ctx;
    if (k == 0 || n == 0 || n > UINT32_MAX)
        return err_fail(ctx->errmsg, VKT_ERROR_INVALID_ARGUMENT, "kt_reduce_avg: %u inputs "
                        "of %llu elements (at least 1 each, below 2^32)", k,
                        (unsigned long long)n);
    vkt_status st = gpu_check_view(ctx, "out", out, n);
    for (uint32_t q = 0; q < k && st == VKT_OK; q++)
        st = gpu_check_view(ctx, "g", g[q], n);
    uint32_t wg = ku_workgroup_size(ctx);
    uint32_t spec[SPEC_WG_ONLY_COUNT] = {[SPEC_WG] = wg};
    uint32_t groups[3] = {ku_groups_1d(ctx, n, wg), 1, 1};
    for (uint32_t q0 = 0; q0 < k && st == VKT_OK; q0 += REDUCE_AVG_INPUTS) {
        uint32_t m = k - q0 < REDUCE_AVG_INPUTS ? k - q0 : REDUCE_AVG_INPUTS;
        struct push_reduce_avg p = {.n = (uint32_t)n, .k = m, .acc = q0 > 0,
                                    .out_off = ku_shift(ctx, out, 0)};
        gpu_arg args[1 + REDUCE_AVG_INPUTS];
        args[0] = ku_arg(out, 0, n, 1);
        for (uint32_t j = 0; j < REDUCE_AVG_INPUTS; j++) { /* unused slots: input 0 again */
            uint32_t q = q0 + (j < m ? j : 0);
            args[1 + j] = ku_arg(g[q], 0, n, 0);
            p.g_off[j] = ku_shift(ctx, g[q], 0);
            p.w[j] = j < m ? w[q] : 0.0f;
        }
        st = gpu_dispatch(s, &k_reduce_avg, spec, SPEC_WG_ONLY_COUNT, args, &p, groups);
    }
    return st;
}
