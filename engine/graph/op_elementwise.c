/* op_elementwise.c - element by element: add, sub and mul (broadcasting), scale, the
 * activations (vkt_unary) and dropout. An activation fused with the linear or conv2d
 * before it is a node of its own op (linear_act, conv_relu: op_product.c, op_conv.c). */
#include "graph/op_impl.h"
#include "activation.h"

#include <string.h>

/* ---- add, sub, mul ---- */

static vkt_binary_op binary_of(const vkt_tensor *t)
{
    return t->op == GOP_ADD ? VKT_BINARY_ADD : t->op == GOP_SUB ? VKT_BINARY_SUB : VKT_BINARY_MUL;
}

static vkt_status shape_binary(const vkt_tensor *t, const vkt_shape *const *in, vkt_shape *out,
                               char *msg, size_t size)
{
    char text[VKT_ERRMSG_SIZE];
    vkt_status st = vkt_broadcast_shape(in[0], in[1], out, text, sizeof text);
    return st == VKT_OK ? VKT_OK : op_bad(t, msg, size, VKT_ERROR_SHAPE, "%s", text);
}

static vkt_status fwd_binary(const op_rec *r)
{
    const vkt_tensor *t = r->t;
    return vkt_binary(r->s, binary_of(t), op_in_val(r->m, t, 0), op_in_shape(r->m, t, 0),
                      op_in_val(r->m, t, 1), op_in_shape(r->m, t, 1), op_out_val(r));
}

static vkt_status bwd_binary(const op_rec *r)
{
    vkt_model *m = r->m;
    const vkt_tensor *t = r->t;
    const mnode *nd = op_node(r);
    vkt_binary_op op = binary_of(t);
    vkt_view dy = op_dy(r);
    uint64_t n = m->count[t->id];
    for (uint32_t k = 0; k < 2; k++) {
        if (!op_want(m, t, k))
            continue;
        vkt_view dx = op_dx(m, t, k);
        vkt_status st;
        if (op != VKT_BINARY_MUL && graph_shape_eq(op_in_shape(m, t, k), &m->shape[t->id])) {
            float sign = op == VKT_BINARY_SUB && k == 1 ? -1.0f : 1.0f;
            st = kt_axpby(r->s, sign, dy, op_beta(m, t->id, k), dx, n);
        } else {
            vkt_view target = nd->acc[k] ? model_view(m, nd->tmp) : dx;
            vkt_view none = {NULL, 0};
            int mul = op == VKT_BINARY_MUL;
            st = vkt_binary_backward(r->s, op, (int)k, mul ? op_in_val(m, t, 0) : none,
                                     op_in_shape(m, t, 0), mul ? op_in_val(m, t, 1) : none,
                                     op_in_shape(m, t, 1), dy, target);
            if (st == VKT_OK && nd->acc[k])
                st = kt_axpby(r->s, 1.0f, target, 1.0f, dx, m->count[t->in[k]->id]);
        }
        if (st != VKT_OK)
            return st;
    }
    return VKT_OK;
}

/* A reduced (broadcast) input's later contribution goes through scratch and an add. */
static int binary_tmp(const vkt_model *m, const vkt_tensor *t, uint32_t k)
{
    return t->op == GOP_MUL || !graph_shape_eq(&m->shape[t->in[k]->id], &m->shape[t->id]);
}

static void mul_reads(const vkt_model *m, const vkt_tensor *t, acc_list *l)
{
    plan_add(l, op_in_value(m, t, 0), 0, 0);
    plan_add(l, op_in_value(m, t, 1), 0, 0);
}

static void ref_binary(const graph_ref_args *a)
{
    ref_bcast l = ref_bcast_of(a->in_shape[0], a->in_shape[1]);
    graph_op op = a->node->op;
    uint64_t i = 0;
    REF_BCAST_LOOP(l, ai, bi) {
        double u = a->in[0][ai], v = a->in[1][bi];
        a->out[i++] = op == GOP_ADD ? u + v : op == GOP_SUB ? u - v : u * v;
    }
}

static void ref_binary_bwd(const graph_ref_args *a)
{
    ref_bcast l = ref_bcast_of(a->in_shape[0], a->in_shape[1]);
    graph_op op = a->node->op;
    uint64_t i = 0;
    REF_BCAST_LOOP(l, ai, bi) {
        double d = a->dout[i++];
        if (a->din[0])
            a->din[0][ai] += op == GOP_MUL ? d * a->in[1][bi] : d;
        if (a->din[1])
            a->din[1][bi] += op == GOP_MUL ? d * a->in[0][ai] : op == GOP_SUB ? -d : d;
    }
}

static const char *const names_ab[] = {"a", "b"};

#define BINARY_ENTRY(nm, f)                                                                 \
    {.name = nm, .fn = f, .min_in = 2, .max_in = 2, .in_names = names_ab,                   \
     .shape = shape_binary, .forward = fwd_binary, .backward = bwd_binary,                 \
     .adds_via_tmp = binary_tmp, .ref_forward = ref_binary, .ref_backward = ref_binary_bwd, \
     .grad_rtol = 1e-6}

const graph_op_def graph_op_add = BINARY_ENTRY("add", "vkt_add");
const graph_op_def graph_op_sub = BINARY_ENTRY("sub", "vkt_sub");
const graph_op_def graph_op_mul = {
    .name = "mul", .fn = "vkt_mul", .min_in = 2, .max_in = 2, .in_names = names_ab,
    .shape = shape_binary, .forward = fwd_binary, .backward = bwd_binary,
    .adds_via_tmp = binary_tmp, .backward_reads = mul_reads, .ref_forward = ref_binary,
    .ref_backward = ref_binary_bwd, .grad_rtol = 1e-6,
};

/* ---- scale ---- */

static vkt_status fwd_scale(const op_rec *r)
{
    return kt_axpby(r->s, r->t->p.scale.s, op_in_val(r->m, r->t, 0), 0.0f, op_out_val(r),
                    r->m->count[r->t->id]);
}

static vkt_status bwd_scale(const op_rec *r)
{
    return kt_axpby(r->s, r->t->p.scale.s, op_dy(r), op_beta(r->m, r->t->id, 0),
                    op_dx(r->m, r->t, 0), r->m->count[r->t->id]);
}

static void ref_scale(const graph_ref_args *a)
{
    uint64_t n = graph_count(&a->out_shape);
    for (uint64_t i = 0; i < n; i++)
        a->out[i] = (double)a->node->p.scale.s * a->in[0][i];
}

static void ref_scale_bwd(const graph_ref_args *a)
{
    uint64_t n = graph_count(&a->out_shape);
    if (a->din[0])
        for (uint64_t i = 0; i < n; i++)
            a->din[0][i] += (double)a->node->p.scale.s * a->dout[i];
}

static const char *const names_x[] = {"x"};

const graph_op_def graph_op_scale = {
    .name = "scale", .fn = "vkt_scale", .min_in = 1, .max_in = 1, .in_names = names_x,
    .shape = op_shape_same, .forward = fwd_scale, .backward = bwd_scale,
    .ref_forward = ref_scale, .ref_backward = ref_scale_bwd, .grad_rtol = 1e-6,
};

/* ---- activations ---- */

static const char *unary_name(const vkt_tensor *t) { return vkt_unary_op_name(t->p.unary.op); }

/* The graph constructor of each activation (shaders/activation.h's list). */
#define FN_OF(NAME, value, name, fn, fuses, dfy) [value] = #fn,
static const char *const k_unary_fns[VKT_UNARY_COUNT] = {ACT_LIST(FN_OF)};
#undef FN_OF

static const char *unary_fn(const vkt_tensor *t)
{
    return (unsigned)t->p.unary.op < VKT_UNARY_COUNT ? k_unary_fns[t->p.unary.op] : "vkt_unary";
}

static vkt_status fwd_unary(const op_rec *r)
{
    const vkt_tensor *t = r->t;
    return vkt_unary(r->s, t->p.unary.op, t->p.unary.alpha, op_in_val(r->m, t, 0),
                     op_out_val(r), r->m->count[t->id]);
}

static vkt_status bwd_unary(const op_rec *r)
{
    const vkt_tensor *t = r->t;
    vkt_view dx = op_dx(r->m, t, 0);
    return kt_bias_act_backward(r->s, t->p.unary.op, t->p.unary.alpha, 0, VKT_DTYPE_FP32,
                                op_in_val(r->m, t, 0), op_dy(r), &dx,
                                op_beta(r->m, t->id, 0), NULL, 0.0f, 1,
                                (uint32_t)r->m->count[t->id]);
}

static void unary_reads(const vkt_model *m, const vkt_tensor *t, acc_list *l)
{
    plan_add(l, op_in_value(m, t, 0), 0, 0);
}

static void ref_unary(const graph_ref_args *a)
{
    uint64_t n = graph_count(&a->out_shape);
    for (uint64_t i = 0; i < n; i++)
        a->out[i] = graph_ref_act(a->node->p.unary.op, a->node->p.unary.alpha, a->in[0][i]);
}

static void ref_unary_bwd(const graph_ref_args *a)
{
    uint64_t n = graph_count(&a->out_shape);
    if (a->din[0])
        for (uint64_t i = 0; i < n; i++)
            a->din[0][i] += a->dout[i] * graph_ref_act_grad(a->node->p.unary.op,
                                                            a->node->p.unary.alpha, a->in[0][i]);
}

const graph_op_def graph_op_unary = {
    .name = "unary", .fn = "vkt_unary", .name_of = unary_name, .fn_of = unary_fn,
    .min_in = 1, .max_in = 1, .in_names = names_x,
    .shape = op_shape_same, .forward = fwd_unary, .backward = bwd_unary,
    .backward_reads = unary_reads, .ref_forward = ref_unary, .ref_backward = ref_unary_bwd,
    .grad_rtol = 1e-5,
};

/* ---- dropout ---- */

static vkt_status fwd_dropout(const op_rec *r)
{
    const vkt_tensor *t = r->t;
    uint64_t n = r->m->count[t->id];
    if (!r->training || t->p.dropout.p == 0.0f) /* evaluation: the identity */
        return kt_axpby(r->s, 1.0f, op_in_val(r->m, t, 0), 0.0f, op_out_val(r), n);
    return kt_dropout(r->s, op_in_val(r->m, t, 0), op_ctrl_step(r->m), op_out_val(r), n,
                      t->p.dropout.p, t->p.dropout.seed, 0, model_row_units(r->m, t->id, n),
                      0.0f);
}

static vkt_status bwd_dropout(const op_rec *r)
{
    const vkt_tensor *t = r->t;
    uint64_t n = r->m->count[t->id];
    return kt_dropout(r->s, op_dy(r), op_ctrl_step(r->m), op_dx(r->m, t, 0), n, t->p.dropout.p,
                      t->p.dropout.seed, 0, model_row_units(r->m, t->id, n),
                      op_beta(r->m, t->id, 0));
}

static void ref_dropout(const graph_ref_args *a)
{
    uint64_t n = graph_count(&a->out_shape);
    for (uint64_t i = 0, o = ref_dropout_shift(a, n); i < n; i++)
        a->out[i] = a->in[0][i] * ref_dropout_factor(a->node, a->step, a->training, o + i);
}

static void ref_dropout_bwd(const graph_ref_args *a)
{
    uint64_t n = graph_count(&a->out_shape);
    if (a->din[0])
        for (uint64_t i = 0, o = ref_dropout_shift(a, n); i < n; i++)
            a->din[0][i] += a->dout[i] * ref_dropout_factor(a->node, a->step, a->training, o + i);
}

static uint64_t *dropout_seed(graph_params *p) { return &p->dropout.seed; }

const graph_op_def graph_op_dropout = {
    .name = "dropout", .fn = "vkt_dropout", .min_in = 1, .max_in = 1, .in_names = names_x,
    .shape = op_shape_same, .forward = fwd_dropout, .backward = bwd_dropout,
    .seed = dropout_seed,
    .ref_forward = ref_dropout, .ref_backward = ref_dropout_bwd, .grad_rtol = 1e-6,
};
