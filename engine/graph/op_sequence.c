/* op_sequence.c - the sequence ops of the character model (kernels: engine/kernels/norm.h
 * for the embedding, attention.h): embedding lookup of fp32 token ids, and causal
 * multi-head self-attention over qkv [B,T,3C], which saves for the backward what its
 * kernel variant needs (aux: the softmax weights [B,heads,T,T], or on GPUs the row
 * logsumexps [B,heads,T]; its backward then also reads the output) and takes its dropout
 * keys by global batch row. Under autocast (fp16 / bf16) qkv and dy are rounded to 16 bits
 * and attention_lowp runs (kernels/attention_lowp.c); where its backward reads y, y is
 * kept rounded (lp_y, OPF_SAVES_Y16: autocast.c; cast by the forward, or the 16-bit x of
 * the product that reads y) and the backward widens it exactly into its workspace, after
 * the kernel's elements, for D = rowsum(dy * r(y)). */
#include "graph/layers.h"
#include "graph/op_impl.h"
#include "kernels/cast.h"

/* ---- embedding ---- */

static vkt_status shape_embedding(const vkt_tensor *t, const vkt_shape *const *in,
                                  vkt_shape *out, char *msg, size_t size)
{
    const vkt_shape *ids = in[0], *tab = in[1];
    char si[GRAPH_SHAPE_STR], st[GRAPH_SHAPE_STR];
    if (tab->ndim != 2 || ids->ndim + 1 > VKT_MAX_DIMS)
        return op_bad(t, msg, size, VKT_ERROR_SHAPE,
                      "ids of at most %d dimensions and table[vocab,dim] expected: ids %s, "
                      "table %s", VKT_MAX_DIMS - 1, graph_shape_str(ids, si),
                      graph_shape_str(tab, st));
    *out = *ids;
    out->dims[out->ndim++] = tab->dims[1];
    return VKT_OK;
}

static vkt_status fwd_embedding(const op_rec *r)
{
    const vkt_model *m = r->m;
    const vkt_shape *tab = op_in_shape(m, r->t, 1);
    return kn_embedding(r->s, op_in_val(m, r->t, 0), op_in_val(m, r->t, 1), op_out_val(r),
                        (uint32_t)m->count[r->t->in[0]->id], tab->dims[0], tab->dims[1]);
}

static vkt_status bwd_embedding(const op_rec *r)
{
    const vkt_model *m = r->m;
    const vkt_shape *tab = op_in_shape(m, r->t, 1);
    if (!op_want(m, r->t, 1))
        return VKT_OK;
    return kn_embedding_backward(r->s, op_in_val(m, r->t, 0), op_dy(r), op_dx(m, r->t, 1),
                                 op_beta(m, r->t->id, 1), (uint32_t)m->count[r->t->in[0]->id],
                                 tab->dims[0], tab->dims[1]);
}

static void ref_embedding(const graph_ref_args *a)
{
    kn_ref_embedding(a->in[0], a->in[1], a->out, (uint32_t)graph_count(a->in_shape[0]),
                     a->in_shape[1]->dims[0], a->in_shape[1]->dims[1]);
}

static void ref_embedding_bwd(const graph_ref_args *a)
{
    if (a->din[1])
        kn_ref_embedding_backward(a->in[0], a->dout, a->din[1],
                                  (uint32_t)graph_count(a->in_shape[0]),
                                  a->in_shape[1]->dims[0], a->in_shape[1]->dims[1]);
}

static const char *const names_emb[] = {"ids", "table"};

const graph_op_def graph_op_embedding = {
    .name = "embedding", .fn = "vkt_embedding", .flags = OPF_IDS_IN0, .min_in = 2, .max_in = 2,
    .in_names = names_emb, .shape = shape_embedding, .forward = fwd_embedding,
    .backward = bwd_embedding, .backward_reads = op_reads_inputs,
    .ref_forward = ref_embedding, .ref_backward = ref_embedding_bwd, .grad_rtol = 1e-6,
};

/* ---- causal self-attention ---- */

static vkt_status shape_attention(const vkt_tensor *t, const vkt_shape *const *in,
                                  vkt_shape *out, char *msg, size_t size)
{
    const vkt_shape *q = in[0];
    uint32_t heads = t->p.attention.heads;
    char sq[GRAPH_SHAPE_STR];
    if (q->ndim != 3 || q->dims[2] % 3 || (q->dims[2] / 3) % heads)
        return op_bad(t, msg, size, VKT_ERROR_SHAPE,
                      "qkv[B,T,3C] with C a multiple of the %u heads expected: qkv %s", heads,
                      graph_shape_str(q, sq));
    *out = (vkt_shape){3, {q->dims[0], q->dims[1], q->dims[2] / 3}};
    return VKT_OK;
}

static vkt_status attention_arrays(vkt_model *m, const vkt_tensor *t, uint64_t *aux,
                                   uint64_t *tmp)
{
    uint32_t b, tt, h, d;
    layer_attn_dims(t, op_in_shape(m, t, 0), &b, &tt, &h, &d);
    int lp = t->dtype != VKT_DTYPE_FP32; /* autocast: the attention_lowp variant's arrays */
    *aux = lp ? ka_attention_lowp_saved_elems(m->ctx, b, tt, h, d)
              : ka_attention_saved_elems(m->ctx, b, tt, h, d);
    *tmp = lp ? ka_attention_lowp_workspace_elems(m->ctx, b, tt, h, d)
              : ka_attention_workspace_elems(m->ctx, b, tt, h, d);
    if (model_saves_y16(m, t->id)) /* then y widened, from a multiple of 4 elements */
        *tmp = (*tmp + 3) / 4 * 4 + m->count[t->id];
    return VKT_OK;
}

/* y [B*T, C] as the autocast backward reads it: the output, or its 16-bit copy lp_y
 * widened exactly into the workspace after the kernel's ws elements. */
static vkt_status saved_y(const op_rec *r, uint64_t ws, vkt_view *y)
{
    const vkt_model *m = r->m;
    const mnode *nd = op_node(r);
    *y = op_out_val(r);
    if (nd->lp_y < 0)
        return VKT_OK;
    uint32_t rows, cols;
    model_rows_cols(&m->shape[r->t->id], &rows, &cols);
    *y = model_view(m, nd->tmp);
    y->offset += (ws + 3) / 4 * 4;
    return kcast_matrix(r->s, m->val[nd->lp_y].dtype, model_view(m, nd->lp_y), cols,
                        VKT_DTYPE_FP32, *y, cols, rows, cols);
}

static vkt_status fwd_attention(const op_rec *r)
{
    const vkt_model *m = r->m;
    const vkt_tensor *t = r->t;
    uint32_t b, tt, h, d;
    layer_attn_dims(t, op_in_shape(m, t, 0), &b, &tt, &h, &d);
    vkt_view y = op_out_val(r), saved = op_view_or(m, op_node(r)->aux, y);
    float p_drop = r->training ? t->p.attention.dropout : 0.0f;
    /* sequences keyed from the control block's row base (one recorded step serves every
     * pipeline micro-batch) */
    uint64_t b_row = model_row_units(m, t->id, b);
    if (t->dtype == VKT_DTYPE_FP32)
        return ka_attention(r->s, op_in_val(m, t, 0), y, saved, op_ctrl_step(m), b, tt, h, d,
                            p_drop, t->p.attention.seed, 0, b_row);
    /* autocast: qkv rounded into lp_x, which the backward reads again */
    const mnode *nd = op_node(r);
    vkt_status st = op_cast16(r, t, op_in_val(m, t, 0), op_in_shape(m, t, 0), nd->lp_x);
    if (st == VKT_OK)
        st = ka_attention_lowp(r->s, t->dtype, model_view(m, nd->lp_x), y, saved,
                               op_ctrl_step(m), b, tt, h, d, p_drop, t->p.attention.seed, 0,
                               b_row);
    if (st == VKT_OK && nd->lp_y >= 0 && nd->y16_from < 0) /* y rounded for the backward */
        st = op_cast16(r, t, y, &m->shape[t->id], nd->lp_y); /* (else by its reader) */
    return st;
}

static vkt_status bwd_attention(const op_rec *r)
{
    const vkt_model *m = r->m;
    const vkt_tensor *t = r->t;
    const mnode *nd = op_node(r);
    uint32_t b, tt, h, d;
    layer_attn_dims(t, op_in_shape(m, t, 0), &b, &tt, &h, &d);
    if (!op_want(m, t, 0))
        return VKT_OK;
    vkt_view dy = op_dy(r);
    if (t->dtype == VKT_DTYPE_FP32)
        return ka_attention_backward(r->s, op_in_val(m, t, 0), op_out_val(r),
                                     op_view_or(m, nd->aux, dy), op_ctrl_step(m), dy,
                                     op_dx(m, t, 0), op_beta(m, t->id, 0),
                                     op_view_or(m, nd->tmp, dy), b, tt, h, d,
                                     t->p.attention.dropout, t->p.attention.seed, 0,
                                     model_row_units(m, t->id, b));
    /* autocast: dy rounded into lp_dz; the forward's 16-bit qkv (and y) */
    vkt_view y;
    vkt_status st = op_cast16(r, t, dy, &m->shape[t->id], nd->lp_dz);
    if (st == VKT_OK)
        st = saved_y(r, ka_attention_lowp_workspace_elems(m->ctx, b, tt, h, d), &y);
    return st != VKT_OK
               ? st
               : ka_attention_backward_lowp(r->s, t->dtype, model_view(m, nd->lp_x), y,
                                            op_view_or(m, nd->aux, dy),
                                            op_ctrl_step(m), model_view(m, nd->lp_dz),
                                            op_dx(m, t, 0), op_beta(m, t->id, 0),
                                            op_view_or(m, nd->tmp, dy), b, tt, h, d,
                                            t->p.attention.dropout, t->p.attention.seed, 0,
                                            model_row_units(m, t->id, b));
}

static void ref_attention(const graph_ref_args *a)
{
    const vkt_tensor *t = a->node;
    uint32_t b, tt, h, d;
    layer_attn_dims(t, a->in_shape[0], &b, &tt, &h, &d);
    ka_ref_attention(a->in[0], a->out, b, tt, h, d, a->training ? t->p.attention.dropout : 0.0f,
                     t->p.attention.seed,
                     graph_row_shift(a->batch_major, a->row_offset, a->batch, b), a->step);
}

static void ref_attention_bwd(const graph_ref_args *a)
{
    const vkt_tensor *t = a->node;
    uint32_t b, tt, h, d;
    layer_attn_dims(t, a->in_shape[0], &b, &tt, &h, &d);
    if (a->din[0])
        ka_ref_attention_backward(a->in[0], a->dout, a->din[0], b, tt, h, d,
                                  a->training ? t->p.attention.dropout : 0.0f,
                                  t->p.attention.seed,
                                  graph_row_shift(a->batch_major, a->row_offset, a->batch, b),
                                  a->step);
}

/* qkv and the saved array; where the kernel saves the row logsumexps, the output too
 * (D_i = dy_i . y_i). Autocast: the forward's 16-bit qkv instead of the fp32 one, the
 * 16-bit dy the backward rounds first, and the forward's 16-bit y (lp_y) for y. */
static void attention_reads(const vkt_model *m, const vkt_tensor *t, acc_list *l)
{
    uint32_t b, tt, h, d;
    layer_attn_dims(t, op_in_shape(m, t, 0), &b, &tt, &h, &d);
    const mnode *nd = &m->node[t->id];
    int lse = ka_attention_plan_for(m->ctx, b, tt, h, d).saved == KA_SAVED_LSE;
    if (t->dtype == VKT_DTYPE_FP32) {
        op_reads_inputs(m, t, l);
    } else {
        plan_add(l, nd->lp_dz, 1, 0);
        plan_add(l, nd->lp_x, 0, 0);
        plan_add(l, nd->aux, 0, 0);
        lse = lse || ka_attention_lowp_fused(m->ctx);
    }
    if (lse)
        plan_add(l, nd->lp_y >= 0 ? nd->lp_y : nd->val, 0, 0);
}

static const char *const names_qkv[] = {"qkv"};

static uint64_t *attention_seed(graph_params *p) { return &p->attention.seed; }

const graph_op_def graph_op_attention = {
    .name = "causal_attention", .fn = "vkt_causal_attention",
    .flags = OPF_AUX_SAVED | OPF_AUTOCAST | OPF_AUTOCAST_X | OPF_SAVES_Y16,
    .min_in = 1, .max_in = 1, .in_names = names_qkv, .shape = shape_attention,
    .arrays = attention_arrays, .forward = fwd_attention, .backward = bwd_attention,
    .backward_reads = attention_reads, .ref_forward = ref_attention,
    .ref_backward = ref_attention_bwd, .grad_rtol = 1e-5, .seed = attention_seed,
};
