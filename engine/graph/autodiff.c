/* autodiff.c - what a model computes and in which order: the active nodes, which need
 * gradients (reverse-mode autodiff from the scalar loss), the fusion rewrite (m->t),
 * the schedule (forward by level, backward in reverse), the values (forward results,
 * gradients, saved and scratch arrays) and whether each gradient contribution writes or
 * adds (the first contribution to a gradient writes, later ones add: uses of a tensor
 * sum without a zero-fill; in an accumulating model every contribution to a parameter's
 * gradient adds, GRAPH_MODEL_ACCUMULATE). */
#include "graph/model.h"
#include "kernels/train_ops.h"

#include <stdlib.h>
#include <string.h>

static int is_leaf(const vkt_tensor *t) { return t->n_in == 0; }

static void mark_active(vkt_model *m)
{
    vkt_graph *g = m->g;
    int any = m->loss != NULL;
    for (uint32_t i = 0; i < m->n; i++)
        if (g->nodes[i]->keep) {
            m->node[i].active = 1;
            any = 1;
        }
    if (m->loss)
        m->node[m->loss->id].active = 1;
    for (uint32_t i = m->n; i-- > 0;) {
        if (!any)
            m->node[i].active = 1;
        if (!m->node[i].active)
            continue;
        for (uint32_t k = 0; k < g->nodes[i]->n_in; k++)
            m->node[g->nodes[i]->in[k]->id].active = 1;
    }
    for (uint32_t i = 0; i < m->n; i++) {
        const vkt_tensor *t = g->nodes[i];
        uint32_t level = 0;
        if (!m->node[i].active)
            continue;
        for (uint32_t k = 0; k < t->n_in; k++) {
            mnode *in = &m->node[t->in[k]->id];
            in->uses++;
            if (in->level + 1 > level)
                level = in->level + 1;
        }
        m->node[i].level = level;
    }
}

/* needs_grad = reaches the loss (through non-integer inputs) and depends on a param. */
static vkt_status mark_grads(vkt_model *m)
{
    vkt_graph *g = m->g;
    uint8_t *dep = calloc(m->n, 1), *reach = calloc(m->n, 1);
    if (!dep || !reach) {
        free(dep);
        free(reach);
        return model_fail(m, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    }
    for (uint32_t i = 0; i < m->n; i++) {
        const vkt_tensor *t = g->nodes[i];
        dep[i] = t->op == GOP_PARAM && !t->state; /* states are not trained */
        dep[i] |= m->grad_input && m->grad_input[i]; /* an input whose gradient is asked */
        for (uint32_t k = 0; k < t->n_in; k++)
            dep[i] |= dep[t->in[k]->id];
    }
    reach[m->loss->id] = 1;
    for (uint32_t i = m->loss->id + 1; i-- > 0;) {
        const vkt_tensor *t = g->nodes[i];
        if (!reach[i])
            continue;
        for (uint32_t k = 0; k < t->n_in; k++)
            if (!t->in[k]->is_int)
                reach[t->in[k]->id] = 1;
    }
    for (uint32_t i = 0; i < m->n; i++)
        m->node[i].needs_grad = m->node[i].active && reach[i] && dep[i];
    free(dep);
    free(reach);
    return VKT_OK;
}

/* A training model's loss whose input 0 is its only use and takes a gradient (softmax-CE
 * of the logits) becomes the table's loss_fused op in place, which writes that gradient in
 * its forward: the loss needs no backward step and no saved probabilities. */
static void rewrite_loss(vkt_model *m, vkt_tensor *f)
{
    /* fp16's backward starts from the loss scale in the control block (graph_model_set_
     * loss_scale), which only an unfused loss's backward reads */
    if (!m->training || !m->loss || m->t[m->loss->id] != m->loss ||
        m->precision == VKT_DTYPE_FP16)
        return;
    const graph_op_def *d = GRAPH_DEF(m->loss);
    const mnode *z = &m->node[m->loss->in[0]->id];
    if (!d->loss_fused || !z->needs_grad || z->uses != 1 || z->fused_into >= 0)
        return;
    if (m->accumulate && m->loss->in[0]->op == GOP_PARAM)
        return; /* the fused forward writes the gradient: accumulating, it must add */
    *f = *m->loss;
    f->op = d->loss_fused;
    m->t[m->loss->id] = f;
}

/* The fusion rewrite: a linear and the activation that is its only use, or a conv2d and
 * such a relu (applied in the conv's output move), become one fused node in the
 * activation's place (same id, name, shape), of op linear_act or conv_relu, with the
 * producer's inputs; the producer is absorbed (no value, no step). Then the loss (above).
 * Later passes read every node through m->t and see ordinary ops. */
static void rewrite_fusion(vkt_model *m)
{
    for (uint32_t i = 0; i < m->n; i++) {
        m->t[i] = m->g->nodes[i];
        m->node[i].fused_from = m->node[i].fused_into = -1;
        m->node[i].lp_x = m->node[i].lp_w = m->node[i].lp_dz = m->node[i].lp_wb =
            m->node[i].lp_y = m->node[i].y16_from = m->node[i].lp_xb = -1;
    }
    if (m->no_fusion)
        return;
    uint32_t n_fused = 0;
    for (uint32_t i = 0; i < m->n; i++) {
        const vkt_tensor *a = m->g->nodes[i];
        if (!m->node[i].active || a->n_in == 0)
            continue;
        const vkt_tensor *l = a->in[0];
        const graph_op_def *d = GRAPH_DEF(l);
        graph_params p;
        graph_op op = d->fuse_with ? d->fuse_with(l, a, &p) : GOP_COUNT;
        if (op == GOP_COUNT || m->node[l->id].uses != 1 || l->keep || l == m->loss)
            continue;
        vkt_tensor *f = &m->fused[n_fused++];
        *f = *a;          /* the use's id, name, shape, keep */
        f->op = op;
        f->n_in = l->n_in;
        f->in = l->in;    /* the producer's inputs, read only */
        f->p = p;
        m->t[i] = f;
        m->node[i].fused_from = (int32_t)l->id;
        m->node[l->id].fused_into = (int32_t)i;
    }
    rewrite_loss(m, &m->fused[n_fused]); /* at most one node per id: n_fused < n here */
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Forward order: by level (nodes of one level never depend on each other, so their
 * commands need no barrier between them), then by id. */
static vkt_status make_order(vkt_model *m)
{
    uint64_t *keys = malloc((m->n ? m->n : 1) * sizeof *keys);
    m->order = malloc((m->n ? m->n : 1) * sizeof *m->order);
    if (!keys || !m->order) {
        free(keys);
        return model_fail(m, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    }
    m->n_order = 0;
    for (uint32_t i = 0; i < m->n; i++)
        if (m->node[i].active)
            keys[m->n_order++] = (uint64_t)m->node[i].level << 32 | i;
    qsort(keys, m->n_order, sizeof *keys, cmp_u64);
    for (uint32_t i = 0; i < m->n_order; i++)
        m->order[i] = (uint32_t)keys[i];
    free(keys);
    return VKT_OK;
}

/* Node i's aux array (tmp 0) or backward workspace (tmp 1), sized by its op's entry. */
static vkt_status make_array(vkt_model *m, uint32_t i, int tmp)
{
    const vkt_tensor *t = m->t[i];
    const graph_op_def *d = GRAPH_DEF(t);
    uint64_t aux = 0, scratch = 0;
    if (!d->arrays)
        return VKT_OK;
    vkt_status st = d->arrays(m, t, &aux, &scratch);
    if (st != VKT_OK)
        return st;
    uint64_t count = tmp ? scratch : aux;
    int32_t *dst = tmp ? &m->node[i].tmp : &m->node[i].aux;
    *dst = -1;
    if (count == 0)
        return VKT_OK;
    *dst = !tmp && (d->flags & OPF_AUX_AUTOCAST) ? model_new_typed(m, MS_ARENA, t->dtype, count)
                                                 : model_new_value(m, MS_ARENA, count);
    return *dst >= 0 ? VKT_OK : model_fail(m, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
}

/* Forward values: parameters and inputs at fixed offsets over every such node of the
 * graph (id order: models sharing parameters agree), others in the arena. */
static vkt_status make_values(vkt_model *m)
{
    vkt_graph *g = m->g;
    /* Trainable parameters first, then states (vkt_state): the optimizer and gradient
     * averaging work on the first train_elems of the flat buffers only. The layout is
     * graph_flat_layout's, the one checkpoints and pipelines see. */
    uint64_t *off = malloc((m->n ? m->n : 1) * sizeof *off);
    if (!off)
        return model_fail(m, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    graph_flat_layout(g, m->n, off, &m->train_elems, &m->param_elems);
    for (int pass = 0; pass < 3; pass++) {
        for (uint32_t i = 0; i < m->n; i++) {
            mnode *nd = &m->node[i];
            const vkt_tensor *t = g->nodes[i];
            uint64_t c = m->count[i];
            int param = t->op == GOP_PARAM, input = t->op == GOP_INPUT || t->op == GOP_LABELS;
            if (pass == 0 && !(param && !t->state))
                continue;
            if (pass == 1 && !(param && t->state))
                continue;
            if (pass == 2 && !input)
                continue;
            nd->val = nd->grad = nd->aux = nd->tmp = -1;
            nd->val = model_new_value(m, param ? MS_PARAMS : MS_INPUTS, c);
            if (nd->val < 0) {
                free(off);
                return model_fail(m, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
            }
            m->val[nd->val].offset = param ? off[i] : m->input_elems;
            if (!param)
                m->input_elems += (c + ALIGN_ELEMS - 1) / ALIGN_ELEMS * ALIGN_ELEMS;
        }
    }
    free(off);
    for (uint32_t i = 0; i < m->n; i++) {
        const vkt_tensor *t = g->nodes[i];
        if (t->op != GOP_PARAM && t->op != GOP_INPUT && t->op != GOP_LABELS)
            m->node[i].val = m->node[i].grad = m->node[i].aux = m->node[i].tmp = -1;
    }
    for (uint32_t o = 0; o < m->n_order; o++) {
        uint32_t i = m->order[o];
        mnode *nd = &m->node[i];
        const vkt_tensor *t = m->t[i];
        if (is_leaf(t) || nd->fused_into >= 0)
            continue;
        nd->val = model_new_value(m, MS_ARENA, m->count[i]);
        if (nd->val < 0)
            return model_fail(m, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
        if (GRAPH_DEF(t)->flags & OPF_VIEW) /* a view: no copy */
            m->val[nd->val].alias = model_root(m, m->node[t->in[0]->id].val);
        vkt_status st = make_array(m, i, 0);
        if (st == VKT_OK)
            st = model_autocast_values(m, i, 0);
        if (st != VKT_OK)
            return st;
        if (m->g->nodes[i]->keep || m->g->nodes[i] == m->loss)
            m->val[model_root(m, nd->val)].kept = 1;
    }
    return VKT_OK;
}

/* Gradient values, in forward order so a reshape can view its input's gradient. */
static vkt_status make_grads(vkt_model *m)
{
    for (uint32_t o = 0; o < m->n_order; o++) {
        uint32_t i = m->order[o];
        mnode *nd = &m->node[i];
        const vkt_tensor *t = m->t[i];
        if (!nd->needs_grad || nd->fused_into >= 0)
            continue;
        if (m->g->nodes[i] == m->loss) {
            nd->grad = model_new_value(m, MS_CTRL, 1);
            if (nd->grad >= 0)
                m->val[nd->grad].offset = CTRL_ONE;
        } else if (t->op == GOP_PARAM) {
            nd->grad = model_new_value(m, MS_GRADS, m->count[i]);
            if (nd->grad >= 0)
                m->val[nd->grad].offset = m->val[nd->val].offset;
        } else {
            nd->grad = model_new_value(m, MS_ARENA, m->count[i]);
            const mnode *x = GRAPH_DEF(t)->flags & OPF_VIEW ? &m->node[t->in[0]->id] : NULL;
            if (nd->grad >= 0 && x && x->uses == 1 && x->grad >= 0)
                m->val[nd->grad].alias = model_root(m, x->grad);
        }
        if (nd->grad < 0)
            return model_fail(m, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
        if (t->op == GOP_INPUT) /* asked for (grad_input): readable after the step */
            m->val[model_root(m, nd->grad)].kept = 1;
        vkt_status st = make_array(m, i, 1);
        if (st == VKT_OK)
            st = model_autocast_values(m, i, 1);
        if (st != VKT_OK)
            return st;
    }
    return VKT_OK;
}

static int has_backward(const vkt_model *m, uint32_t i)
{
    const mnode *nd = &m->node[i];
    const vkt_tensor *t = m->t[i];
    if (!nd->needs_grad || is_leaf(t) || nd->fused_into >= 0 ||
        (GRAPH_DEF(t)->flags & OPF_GRAD_IN_FORWARD))
        return 0;
    if ((GRAPH_DEF(t)->flags & OPF_VIEW) && m->val[nd->grad].alias >= 0)
        return 0; /* its gradient is a view of its input's */
    return 1;
}

static vkt_status make_steps(vkt_model *m)
{
    m->steps = malloc((2 * m->n_order + 1) * sizeof *m->steps);
    if (!m->steps)
        return model_fail(m, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    for (uint32_t i = 0; i < m->n; i++)
        m->node[i].fpos = m->node[i].bpos = -1;
    m->n_steps = 0;
    for (uint32_t o = 0; o < m->n_order; o++) {
        uint32_t i = m->order[o];
        const vkt_tensor *t = m->t[i];
        if (is_leaf(t) || (GRAPH_DEF(t)->flags & OPF_VIEW) || m->node[i].fused_into >= 0)
            continue;
        m->node[i].fpos = (int32_t)m->n_steps;
        m->steps[m->n_steps++] = (mstep){i, 0};
    }
    m->n_fwd_steps = m->n_steps;
    if (!m->training)
        return VKT_OK;
    for (uint32_t o = m->n_order; o-- > 0;) {
        uint32_t i = m->order[o];
        if (!has_backward(m, i))
            continue;
        m->node[i].bpos = (int32_t)m->n_steps;
        m->steps[m->n_steps++] = (mstep){i, 1};
    }
    return VKT_OK;
}

/* Whether the backward of node i writes input k's gradient through a scratch array
 * and an add (ops whose kernels cannot add into their output). */
static int needs_tmp(const vkt_model *m, uint32_t i, uint32_t k)
{
    const vkt_tensor *t = m->t[i];
    const graph_op_def *d = GRAPH_DEF(t);
    return m->node[i].acc[k] && d->adds_via_tmp && d->adds_via_tmp(m, t, k);
}

uint32_t model_slot(const vkt_tensor *src, uint32_t j)
{
    int reverse = (GRAPH_DEF(src)->flags & OPF_SLOTS_REVERSED) != 0;
    return reverse ? src->n_in - 1 - j : j;
}

static vkt_status make_acc_flags(vkt_model *m)
{
    uint8_t *written = calloc(m->n_val ? m->n_val : 1, 1);
    if (!written)
        return model_fail(m, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    if (m->loss && (GRAPH_DEF(m->t[m->loss->id])->flags & OPF_GRAD_IN_FORWARD))
        written[model_root(m, m->node[m->loss->in[0]->id].grad)] = 1; /* by the forward */
    for (uint32_t v = 0; m->accumulate && v < m->n_val; v++)
        if (m->val[v].space == MS_GRADS) /* accumulating: every contribution adds */
            written[model_root(m, v)] = 1;
    for (uint32_t s = m->n_fwd_steps; s < m->n_steps; s++) {
        uint32_t i = m->steps[s].node;
        mnode *nd = &m->node[i];
        const vkt_tensor *src = m->t[i];
        uint64_t tmp = 0;
        for (uint32_t j = 0; j < src->n_in; j++) {
            uint32_t k = model_slot(src, j);
            const mnode *in = &m->node[src->in[k]->id];
            if (!in->needs_grad || in->grad < 0)
                continue;
            int32_t r = model_root(m, in->grad);
            nd->acc[k] = written[r];
            written[r] = 1;
            if (needs_tmp(m, i, k) && m->count[src->in[k]->id] > tmp)
                tmp = m->count[src->in[k]->id];
        }
        /* Fused linear + activation: dz in place over the activation's gradient, unless
         * that must stay readable (check mode, no reuse) or is not arena memory. */
        if (src->op == GOP_LINEAR_ACT &&
            (m->no_reuse || m->check || m->val[model_root(m, nd->grad)].space != MS_ARENA))
            tmp = m->count[i];
        if (tmp) {
            nd->tmp = model_new_value(m, MS_ARENA, tmp);
            if (nd->tmp < 0) {
                free(written);
                return model_fail(m, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
            }
        }
    }
    free(written);
    return VKT_OK;
}

vkt_status model_analyze(vkt_model *m)
{
    vkt_status st = VKT_OK;
    mark_active(m);
    if (m->training)
        st = mark_grads(m);
    rewrite_fusion(m);
    if (st == VKT_OK)
        st = model_autocast(m);
    if (st == VKT_OK)
        st = make_order(m);
    if (st == VKT_OK)
        st = make_values(m);
    if (st == VKT_OK && m->training)
        st = make_grads(m);
    if (st == VKT_OK)
        st = make_steps(m);
    if (st == VKT_OK && m->training)
        st = make_acc_flags(m);
    return st;
}
