/* binary.c - broadcasting rules and dispatch of the binary ops and their gradients
 * (shaders/binary.comp, shaders/binary_backward.comp). */
#include "gpu/gpu.h"
#include "kernels/kernel_util.h"
#include "push.h"
#include "spec.h"
#include "binary.spv.h"
#include "binary_backward.spv.h"

#include <stdio.h>

/* shaders/common.glsl uses these op codes. */
_Static_assert(VKT_BINARY_ADD == 0 && VKT_BINARY_SUB == 1 && VKT_BINARY_MUL == 2 &&
                   VKT_BINARY_DIV == 3,
               "binary op codes differ from shaders/common.glsl");

static const gpu_kernel k_binary = {
    "binary", spv_binary, sizeof spv_binary, 3,
    {GPU_BIND_STORAGE, GPU_BIND_STORAGE, GPU_BIND_STORAGE},
    sizeof(struct push_binary), SPEC_BINARY_COUNT};
static const gpu_kernel k_binary_backward = {
    "binary_backward", spv_binary_backward, sizeof spv_binary_backward, 4,
    {GPU_BIND_STORAGE, GPU_BIND_STORAGE, GPU_BIND_STORAGE, GPU_BIND_STORAGE},
    sizeof(struct push_binary), SPEC_BINARY_BACKWARD_COUNT};

const char *vkt_binary_op_name(vkt_binary_op op)
{
    switch (op) {
    case VKT_BINARY_ADD: return "add";
    case VKT_BINARY_SUB: return "sub";
    case VKT_BINARY_MUL: return "mul";
    case VKT_BINARY_DIV: return "div";
    default: return "unknown";
    }
}

vkt_status vkt_broadcast_shape(const vkt_shape *a, const vkt_shape *b, vkt_shape *out,
                               char *msg, size_t msg_size)
{
    char text[VKT_ERRMSG_SIZE], sa[KU_SHAPE_STR], sb[KU_SHAPE_STR];
    vkt_status st = VKT_OK;
    if (out)
        *out = (vkt_shape){0, {0}};
    if (!out) {
        st = err_fail(text, VKT_ERROR_INVALID_ARGUMENT, "vkt_broadcast_shape: out is NULL");
    } else if ((st = ku_check_shape(text, "vkt_broadcast_shape", "a", a)) == VKT_OK &&
               (st = ku_check_shape(text, "vkt_broadcast_shape", "b", b)) == VKT_OK) {
        uint32_t nd = a->ndim > b->ndim ? a->ndim : b->ndim;
        vkt_shape o = {nd, {0}};
        /* Align trailing dimensions: position k of out is a's k - (nd - a->ndim). */
        for (uint32_t k = 0; k < nd && st == VKT_OK; k++) {
            uint32_t da = k + a->ndim >= nd ? a->dims[k + a->ndim - nd] : 1;
            uint32_t db = k + b->ndim >= nd ? b->dims[k + b->ndim - nd] : 1;
            if (da != db && da != 1 && db != 1)
                st = err_fail(text, VKT_ERROR_SHAPE,
                              "shapes %s and %s do not broadcast: dimension %d (from the "
                              "end) has sizes %u and %u", ku_shape_str(a, sa),
                              ku_shape_str(b, sb), (int)k - (int)nd, da, db);
            o.dims[k] = da > db ? da : db;
        }
        if (st == VKT_OK)
            *out = o;
    }
    if (st != VKT_OK && msg && msg_size)
        snprintf(msg, msg_size, "%s", text);
    return st;
}

/* The iteration space of a broadcast: out dims and the operands' element strides (0
 * along broadcast dims), right-aligned into 4 dims, with adjacent dims merged wherever
 * both operands step through them contiguously (equal shapes become one dim). */
typedef struct bin_layout {
    uint32_t od[4], as[4], bs[4];
} bin_layout;

static void strides_of(const vkt_shape *s, uint64_t dims[4], uint64_t str[4])
{
    uint32_t pad = VKT_MAX_DIMS - s->ndim;
    for (uint32_t k = 0; k < 4; k++)
        dims[k] = k < pad ? 1 : s->dims[k - pad];
    uint64_t st = 1;
    for (int k = 3; k >= 0; k--) {
        str[k] = dims[k] == 1 ? 0 : st;
        st *= dims[k];
    }
}

static bin_layout layout_of(const vkt_shape *a, const vkt_shape *b)
{
    uint64_t ad[4], as[4], bd[4], bs[4];
    strides_of(a, ad, as);
    strides_of(b, bd, bs);
    uint64_t d[4], sa[4], sb[4];
    uint32_t cnt = 0;
    for (int k = 0; k < 4; k++) {
        uint64_t od = ad[k] > bd[k] ? ad[k] : bd[k];
        if (od == 1)
            continue;
        if (cnt && sa[cnt - 1] == as[k] * od && sb[cnt - 1] == bs[k] * od) {
            d[cnt - 1] *= od;
            sa[cnt - 1] = as[k];
            sb[cnt - 1] = bs[k];
        } else {
            d[cnt] = od;
            sa[cnt] = as[k];
            sb[cnt] = bs[k];
            cnt++;
        }
    }
    bin_layout l;
    for (uint32_t k = 0; k < 4; k++) {
        int src = (int)k - (int)(4 - cnt); /* right-align the merged dims */
        l.od[k] = src < 0 ? 1 : (uint32_t)d[src];
        l.as[k] = src < 0 ? 0 : (uint32_t)sa[src];
        l.bs[k] = src < 0 ? 0 : (uint32_t)sb[src];
    }
    return l;
}

static struct push_binary push_of(const bin_layout *l, vkt_binary_op op, int which)
{
    struct push_binary p = {
        .op = (uint32_t)op, .which = (uint32_t)which,
        .out_dims0 = l->od[0], .out_dims1 = l->od[1], .out_dims2 = l->od[2],
        .out_dims3 = l->od[3],
        .a_str0 = l->as[0], .a_str1 = l->as[1], .a_str2 = l->as[2], .a_str3 = l->as[3],
        .b_str0 = l->bs[0], .b_str1 = l->bs[1], .b_str2 = l->bs[2], .b_str3 = l->bs[3],
    };
    return p;
}

/* Checks stream, op and shapes; fills the broadcast shape and element counts. */
static vkt_status check(vkt_stream *s, const char *fn, vkt_binary_op op, const vkt_shape *as,
                        const vkt_shape *bs, vkt_shape *out, uint64_t *na, uint64_t *nb,
                        uint64_t *nout)
{
    if (!s)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "%s: stream is NULL", fn);
    vkt_context *ctx = s->ctx;
    if ((unsigned)op >= VKT_BINARY_COUNT)
        return err_fail(ctx->errmsg, VKT_ERROR_INVALID_ARGUMENT, "%s: unknown op %d", fn,
                        (int)op);
    vkt_status st = ku_check_shape(ctx->errmsg, fn, "a_shape", as);
    if (st == VKT_OK)
        st = ku_check_shape(ctx->errmsg, fn, "b_shape", bs);
    if (st != VKT_OK)
        return st;
    char msg[VKT_ERRMSG_SIZE];
    st = vkt_broadcast_shape(as, bs, out, msg, sizeof msg);
    if (st != VKT_OK)
        return err_fail(ctx->errmsg, st, "%s: %s", fn, msg);
    *na = ku_shape_count(as);
    *nb = ku_shape_count(bs);
    *nout = ku_shape_count(out);
    if (*nout > UINT32_MAX)
        return err_fail(ctx->errmsg, VKT_ERROR_LIMIT,
                        "%s: %llu output elements; at most 2^32 - 1 are supported", fn,
                        (unsigned long long)*nout);
    return VKT_OK;
}

vkt_status vkt_binary(vkt_stream *stream, vkt_binary_op op, vkt_view a, const vkt_shape *a_shape,
                      vkt_view b, const vkt_shape *b_shape, vkt_view out)
{
    vkt_shape os;
    uint64_t na = 0, nb = 0, nout = 0;
    vkt_status st = check(stream, "vkt_binary", op, a_shape, b_shape, &os, &na, &nb, &nout);
    if (st != VKT_OK)
        return st;
    vkt_context *ctx = stream->ctx;
    if ((st = gpu_check_view(ctx, "a", a, na)) != VKT_OK ||
        (st = gpu_check_view(ctx, "b", b, nb)) != VKT_OK ||
        (st = gpu_check_view(ctx, "out", out, nout)) != VKT_OK)
        return st;

    bin_layout l = layout_of(a_shape, b_shape);
    struct push_binary push = push_of(&l, op, 0);
    push.a_off = ku_shift(ctx, a, 0);
    push.b_off = ku_shift(ctx, b, 0);
    push.y_off = ku_shift(ctx, out, 0);
    push.n = (uint32_t)nout;
    /* One dimension where each operand steps by 1 or is a scalar: vec4s. */
    if (l.od[0] == 1 && l.od[1] == 1 && l.od[2] == 1 && l.as[3] <= 1 && l.bs[3] <= 1) {
        vkt_view views[3] = {out};
        uint32_t nv = 1;
        if (l.as[3] == 1)
            views[nv++] = a;
        if (l.bs[3] == 1)
            views[nv++] = b;
        push.nvec = ku_vec4_split(ctx, views, nv, 0, nout, &push.head);
    } else if (l.od[3] % 4 == 0 && l.as[3] <= 1 && l.bs[3] <= 1) {
        /* Several dims, the last a multiple of 4 where each operand steps by 1 or not at
         * all: vec4 units if the output and the stepping operands start 16-byte aligned. */
        push.units4 = ku_vec4_aligned(ctx, out) && (l.as[3] == 0 || ku_vec4_aligned(ctx, a)) &&
                      (l.bs[3] == 0 || ku_vec4_aligned(ctx, b));
    }
    gpu_arg args[3] = {ku_arg(a, 0, na, 0), ku_arg(b, 0, nb, 0), ku_arg(out, 0, nout, 1)};
    uint32_t wg = ku_workgroup_size(ctx);
    uint32_t same = push.nvec && l.as[3] == 1 && l.bs[3] == 1;
    uint32_t spec[SPEC_BINARY_COUNT] = {[SPEC_WG] = wg, [SPEC_BINARY_OP] = (uint32_t)op,
                                        [SPEC_BINARY_SAME_SHAPE] = same};
    uint64_t items = push.nvec ? push.nvec : push.units4 ? nout / 4 : nout;
    uint32_t groups[3] = {ku_groups_1d(ctx, items, wg), 1, 1};
    return gpu_dispatch(stream, &k_binary, spec, SPEC_BINARY_COUNT, args, &push, groups);
}

vkt_status vkt_binary_backward(vkt_stream *stream, vkt_binary_op op, int which, vkt_view a,
                               const vkt_shape *a_shape, vkt_view b, const vkt_shape *b_shape,
                               vkt_view dy, vkt_view grad)
{
    static const char fn[] = "vkt_binary_backward";
    vkt_shape os;
    uint64_t na = 0, nb = 0, nout = 0;
    vkt_status st = check(stream, fn, op, a_shape, b_shape, &os, &na, &nb, &nout);
    if (st != VKT_OK)
        return st;
    vkt_context *ctx = stream->ctx;
    if (which != 0 && which != 1)
        return err_fail(ctx->errmsg, VKT_ERROR_INVALID_ARGUMENT,
                        "%s: which is %d; 0 (a) or 1 (b) expected", fn, which);
    /* The operand values the gradient reads; a view it does not read may be {NULL, 0}
     * (dy is bound in its place). */
    int need_a = op == VKT_BINARY_MUL ? which == 1 : op == VKT_BINARY_DIV && which == 1;
    int need_b = op == VKT_BINARY_MUL || op == VKT_BINARY_DIV;
    uint64_t ngrad = which == 0 ? na : nb;
    if ((st = gpu_check_view(ctx, "dy", dy, nout)) != VKT_OK ||
        (st = gpu_check_view(ctx, "grad", grad, ngrad)) != VKT_OK)
        return st;
    if ((need_a || a.buffer) && (st = gpu_check_view(ctx, "a", a, na)) != VKT_OK)
        return st;
    if ((need_b || b.buffer) && (st = gpu_check_view(ctx, "b", b, nb)) != VKT_OK)
        return st;
    if (ngrad == nout && !(op == VKT_BINARY_DIV && which == 1)) {
        /* The operand was not broadcast (it has the output's shape): its gradient is
         * elementwise, and the forward kernels (with their vec4 paths) compute it. */
        if (op == VKT_BINARY_ADD || (op == VKT_BINARY_SUB && which == 0))
            return vkt_copy(stream, dy, grad, nout);
        if (op == VKT_BINARY_SUB)
            return vkt_unary(stream, VKT_UNARY_SCALE, -1.0f, dy, grad, nout);
        /* mul: dy * other; div (of a): dy / b */
        return which == 0 ? vkt_binary(stream, op, dy, &os, b, b_shape, grad)
                          : vkt_binary(stream, op, dy, &os, a, a_shape, grad);
    }
    if (!a.buffer) {
        a = dy;
        na = nout;
    }
    if (!b.buffer) {
        b = dy;
        nb = nout;
    }

    bin_layout l = layout_of(a_shape, b_shape);
    struct push_binary push = push_of(&l, op, which);
    push.a_off = ku_shift(ctx, a, 0);
    push.b_off = ku_shift(ctx, b, 0);
    push.dy_off = ku_shift(ctx, dy, 0);
    push.y_off = ku_shift(ctx, grad, 0);
    push.n = (uint32_t)ngrad;
    gpu_arg args[4] = {ku_arg(a, 0, na, 0), ku_arg(b, 0, nb, 0), ku_arg(dy, 0, nout, 0),
                       ku_arg(grad, 0, ngrad, 1)};
    /* Rows: each gradient element sums over its nout / ngrad broadcast positions. */
    ku_rows plan;
    if ((st = ku_plan_rows(ctx, fn, ngrad, nout / ngrad, 1, &plan)) != VKT_OK)
        return st;
    uint32_t spec[SPEC_BINARY_BACKWARD_COUNT] = {
        [SPEC_WG] = plan.wg, [SPEC_BINARY_BACKWARD_OP] = (uint32_t)op,
        [SPEC_BINARY_BACKWARD_WHICH] = (uint32_t)which, [SPEC_BINARY_BACKWARD_T] = plan.t};
    uint32_t groups[3] = {plan.groups, 1, 1};
    return gpu_dispatch(stream, &k_binary_backward, spec, SPEC_BINARY_BACKWARD_COUNT, args, &push,
                        groups);
}
