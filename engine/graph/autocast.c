/* autocast.c - the autocast rewrite (mixed precision), beside the fusion rewrite: in a
 * model compiled with precision fp16 or bf16 (vkt_model_options.precision), every matrix
 * product (an op flagged OPF_AUTOCAST: matmul, linear, linear_act, conv2d, conv_relu,
 * and causal_attention, whose one operand is qkv: OPF_AUTOCAST_X) computes in that type:
 * its forward rounds x (input 0) and w (input 1) into 16-bit copies (lp_x, lp_w) and runs
 * vkt_gemm's 16-bit path, accumulating in fp32 into its fp32 output; its backward rounds
 * the output's gradient (lp_dz) and takes dW = x^T dz and dX = dz w^T from the 16-bit
 * copies, again into fp32 (a product whose w is a parameter rounds it again for dX,
 * OPF_RECAST_W, so no 16-bit weight waits from the forward to the backward; attention:
 * qkv and dy rounded, scores, softmax statistics, y and dqkv fp32: kernels/attention_lowp.c).
 * Everything else (activations, norms, softmax, losses, reductions, gradients, parameters,
 * optimizer state) stays fp32. The backward reads the
 * 16-bit x, not the fp32 one, so a product's input no longer lives to the backward for the
 * product's sake. A norm (OPF_SAVES_X16: layer and RMS normalization) runs in fp32 but
 * keeps its input x for the backward as a 16-bit copy (lp_x, the autocast type), which its
 * backward widens exactly into its workspace before the fp32 kernel: the residual stream
 * that feeds the norms then lives to the backward in 2 bytes an element, its statistics
 * (mean, rstd) staying fp32 (the backward's x-hat is (r(x) - mean) rstd). Attention
 * (OPF_SAVES_Y16), where its backward reads y (the flash-style backward: D = rowsum(dy * y)),
 * keeps a 16-bit copy of y (lp_y) widened by the backward, so the fp32 y dies with its
 * last forward reader; D then comes from r(y), one rounding more (bounded and tested:
 * tests/test_autocast_attention_y.c). Where an autocast product reads y as its x in the
 * same type (the char LM's proj), lp_y is that product's lp_x (the same cast of the same
 * value, made by its forward and kept to the attention's backward); else the attention's
 * forward casts y itself. A fused linear+activation under autocast rounds its product's
 * output (plus bias) to the 16-bit type before the activation, y = f(widen(z16)), and keeps
 * z16 for its backward (kt_bias_act_keep16, as PyTorch's autocast does); a product that
 * reads that y as its x (OPF_REBUILD_X16: the MLP's fc2) rebuilds its 16-bit x for dW in
 * its backward, r(f(widen(z16))) by the same activation code (kt_act_rebuild16, lp_xb), bit
 * for bit the forward's lp_x, which then dies in the forward. */
#include "graph/layers.h"
#include "graph/model.h"
#include "kernels/gemm_lowp.h"

vkt_status model_autocast(vkt_model *m)
{
    if (m->precision == VKT_DTYPE_FP32)
        return VKT_OK;
    if (vkt_dtype_size(m->precision) != 2)
        return model_fail(m, VKT_ERROR_INVALID_ARGUMENT,
                          "precision %d is not a vkt_dtype (fp32 0, fp16 1, bf16 2)",
                          (int)m->precision);
    char why[256] = "";
    if (!kg_lowp_available(m->ctx, m->precision, why, sizeof why))
        return model_fail(m, VKT_ERROR_NO_DEVICE,
                          "precision %s: no %s matrix product runs on '%s' (it lacks %s)",
                          vkt_dtype_name(m->precision), vkt_dtype_name(m->precision),
                          m->ctx->profile.name, why);
    for (uint32_t i = 0; i < m->n; i++) {
        const vkt_tensor *t = m->t[i];
        if (!m->node[i].active || m->node[i].fused_into >= 0 ||
            !(GRAPH_DEF(t)->flags & OPF_AUTOCAST))
            continue;
        m->cast[i] = *t; /* the graph's node, or the fusion's: same inputs, op, shape */
        m->cast[i].dtype = m->precision;
        m->t[i] = &m->cast[i];
    }
    return VKT_OK;
}

int model_saves_x16(const vkt_model *m, uint32_t i)
{
    return m->precision != VKT_DTYPE_FP32 && m->training && m->node[i].needs_grad &&
           (GRAPH_DEF(m->t[i])->flags & OPF_SAVES_X16);
}

int model_saves_y16(const vkt_model *m, uint32_t i)
{
    const vkt_tensor *t = m->t[i];
    if (t->dtype == VKT_DTYPE_FP32 || !m->training || !m->node[i].needs_grad ||
        !(GRAPH_DEF(t)->flags & OPF_SAVES_Y16))
        return 0;
    uint32_t b, tt, h, d; /* the backward reads y where the kernel saves logsumexps */
    layer_attn_dims(t, &m->shape[t->in[0]->id], &b, &tt, &h, &d);
    return ka_attention_lowp_fused(m->ctx) ||
           ka_attention_plan_for(m->ctx, b, tt, h, d).saved == KA_SAVED_LSE;
}

/* The autocast product that takes attention i's output as its x (input 0) in the same
 * type, so that its 16-bit x is r(y) bit for bit (-1: none). */
static int32_t y16_reader(const vkt_model *m, uint32_t i)
{
    for (uint32_t j = 0; j < m->n; j++) {
        const vkt_tensor *u = m->t[j];
        uint32_t f = GRAPH_DEF(u)->flags;
        if (j != i && m->node[j].active && m->node[j].fused_into < 0 && (f & OPF_AUTOCAST) &&
            !(f & OPF_AUTOCAST_X) && u->dtype == m->t[i]->dtype && u->in[0]->id == i &&
            m->count[j] > 0)
            return (int32_t)j;
    }
    return -1;
}

int32_t model_x16_source(const vkt_model *m, uint32_t i)
{
    const vkt_tensor *t = m->t[i];
    if (t->dtype == VKT_DTYPE_FP32 || !(GRAPH_DEF(t)->flags & OPF_REBUILD_X16))
        return -1;
    uint32_t j = t->in[0]->id;
    int32_t z = m->node[j].aux;
    return m->t[j]->op == GOP_LINEAR_ACT && m->node[j].fused_into < 0 && z >= 0 &&
                   m->val[z].dtype == t->dtype
               ? (int32_t)j
               : -1;
}

vkt_status model_autocast_values(vkt_model *m, uint32_t i, int backward)
{
    const vkt_tensor *t = m->t[i];
    mnode *nd = &m->node[i];
    if (!backward && model_saves_x16(m, i)) { /* the norm's saved x (its tmp: op_norm.c) */
        nd->lp_x = model_new_typed(m, MS_ARENA, m->precision, m->count[t->in[0]->id]);
        return nd->lp_x >= 0 ? VKT_OK
                             : model_fail(m, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    }
    if (t->dtype == VKT_DTYPE_FP32)
        return VKT_OK;
    if (!backward) {
        int one = (GRAPH_DEF(t)->flags & OPF_AUTOCAST_X) != 0;
        if (nd->lp_x < 0) /* else made already as an attention's lp_y (below) */
            nd->lp_x = model_new_typed(m, MS_ARENA, t->dtype, m->count[t->in[0]->id]);
        if (!one)
            nd->lp_w = model_new_typed(m, MS_ARENA, t->dtype, m->count[t->in[1]->id]);
        if (model_saves_y16(m, i)) { /* attention's y for its backward (op_sequence.c) */
            nd->y16_from = y16_reader(m, i);
            nd->lp_y = model_new_typed(m, MS_ARENA, t->dtype, m->count[i]);
            if (nd->y16_from >= 0) /* the reader's 16-bit x, made before its turn */
                m->node[nd->y16_from].lp_x = nd->lp_y;
        }
        if (nd->lp_x < 0 || (!one && nd->lp_w < 0) || (model_saves_y16(m, i) && nd->lp_y < 0))
            return model_fail(m, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
        return VKT_OK;
    }
    int db = (GRAPH_DEF(t)->flags & OPF_AUTOCAST_DB) && t->n_in == 3 &&
             m->node[t->in[2]->id].needs_grad;
    int w_grad = !(GRAPH_DEF(t)->flags & OPF_AUTOCAST_X) && m->node[t->in[1]->id].needs_grad;
    if (!m->node[t->in[0]->id].needs_grad && !w_grad && !db)
        return VKT_OK; /* only a bias takes a gradient: no product in the backward */
    nd->lp_dz = model_new_typed(m, MS_ARENA, t->dtype, m->count[i]);
    if (w_grad && model_x16_source(m, i) >= 0) { /* dW's 16-bit x, rebuilt */
        nd->lp_xb = model_new_typed(m, MS_ARENA, t->dtype, m->count[t->in[0]->id]);
        if (nd->lp_xb < 0)
            return model_fail(m, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    }
    int recast = (GRAPH_DEF(t)->flags & OPF_RECAST_W) && t->in[1]->op == GOP_PARAM &&
                 m->node[t->in[0]->id].needs_grad; /* dX = dz w^T: w rounded again */
    if (recast)
        nd->lp_wb = model_new_typed(m, MS_ARENA, t->dtype, m->count[t->in[1]->id]);
    return nd->lp_dz >= 0 && (!recast || nd->lp_wb >= 0)
               ? VKT_OK
               : model_fail(m, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
}
