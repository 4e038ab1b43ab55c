/* plan.c - the activation memory plan. Every arena value lives from the first dispatch
 * that touches it to the last (kept values to the end); values whose lifetimes do not
 * overlap may share memory. Positions count dispatches within steps (PLAN_PHASES per
 * step), so the activation a linear's backward reads first can make room for the input
 * gradient it writes last. Offsets are assigned greedily, largest value first, each at
 * the lowest offset where it overlaps no placed value that is alive at the same time
 * (the "greedy by size" heuristic of TFLite's arena planner). The peak is reported
 * beside the total without reuse. */
#include "graph/layers.h"
#include "graph/model.h"

#include <stdlib.h>

#define PLAN_PHASES 3 /* positions per step: a linear's backward has three dispatches */

/* An access list being built: value, write flag, and the phase of the step (the
 * dispatch within it) that makes the access. */
typedef struct acc_list {
    int32_t *vals;
    int *writes, *phases;
    uint32_t n, cap;
} acc_list;

static void add(acc_list *l, int32_t v, int w, int phase)
{
    if (v >= 0 && l->n < l->cap) {
        l->vals[l->n] = v;
        l->writes[l->n] = w;
        l->phases[l->n] = phase;
        l->n++;
    }
}

static int32_t in_val(const vkt_model *m, const vkt_tensor *t, uint32_t k)
{
    return m->node[t->in[k]->id].val;
}

static int32_t in_grad(const vkt_model *m, const vkt_tensor *t, uint32_t k)
{
    const mnode *in = &m->node[t->in[k]->id];
    return in->needs_grad ? in->grad : -1;
}

/* Backward of a matmul or a linear, alone or fused with its activation (record_bwd.c):
 * phase 0 the bias/activation kernel (dz, the bias gradient), 1 dW = X^T dz,
 * 2 dX = dz W^T. */
static void product_backward(const vkt_model *m, uint32_t i, acc_list *l)
{
    const mnode *nd = &m->node[i];
    const vkt_tensor *lin = nd->fused_from >= 0 ? m->g->nodes[nd->fused_from] : m->g->nodes[i];
    int32_t dz = nd->tmp >= 0 ? nd->tmp : nd->grad;
    add(l, nd->grad, 0, 0);
    if (nd->fused_from >= 0)
        add(l, nd->aux >= 0 ? nd->aux : nd->val, 0, 0);
    for (int ph = 0; ph < 3; ph++)
        add(l, dz, ph == 0 && nd->tmp >= 0, ph);
    if (lin->n_in == 3)
        add(l, in_grad(m, lin, 2), 1, 0);
    add(l, in_val(m, lin, 0), 0, 1);
    add(l, in_grad(m, lin, 1), 1, 1);
    add(l, in_val(m, lin, 1), 0, 2);
    add(l, in_grad(m, lin, 0), 1, 2);
}

/* Backward of every other op: one phase. */
static void op_backward(const vkt_model *m, uint32_t i, acc_list *l)
{
    const vkt_tensor *t = m->g->nodes[i];
    const mnode *nd = &m->node[i];
    add(l, nd->grad, 0, 0);
    switch (t->op) {
    case GOP_MUL:
    case GOP_MSE:
        add(l, in_val(m, t, 0), 0, 0);
        add(l, in_val(m, t, 1), 0, 0);
        break;
    case GOP_UNARY: add(l, in_val(m, t, 0), 0, 0); break;
    case GOP_SOFTMAX: add(l, nd->val, 0, 0); break;
    case GOP_SCE:
        add(l, nd->aux, 0, 0);
        add(l, in_val(m, t, 1), 0, 0);
        break;
    default:
        if (graph_is_layer_op(t->op)) { /* reads every input, and its saved array */
            for (uint32_t k = 0; k < t->n_in; k++)
                add(l, in_val(m, t, k), 0, 0);
            if (layer_aux_saved(t))
                add(l, nd->aux, 0, 0);
        }
        break;
    }
    for (uint32_t k = 0; k < t->n_in; k++)
        add(l, in_grad(m, t, k), 1, 0);
    add(l, nd->tmp, 1, 0);
}

uint32_t model_step_access(const vkt_model *m, const mstep *s, int32_t *vals, int *writes,
                           int *phases, uint32_t cap)
{
    acc_list l = {vals, writes, phases, 0, cap};
    uint32_t i = s->node;
    const vkt_tensor *t = m->g->nodes[i];
    const mnode *nd = &m->node[i];
    if (!s->backward) {
        const vkt_tensor *src = nd->fused_from >= 0 ? m->g->nodes[nd->fused_from] : t;
        for (uint32_t k = 0; k < src->n_in; k++)
            add(&l, in_val(m, src, k), 0, 0);
        add(&l, nd->val, 1, 0);
        add(&l, nd->aux, 1, 0);
        if (nd->sce_grad_fwd)
            add(&l, m->node[t->in[0]->id].grad, 1, 0);
    } else if (nd->fused_from >= 0 && m->g->nodes[nd->fused_from]->op == GOP_CONV2D) {
        /* conv2d + relu: one phase (chunks of samples interleave reading x and writing
         * dx), the relu's output read for the mask, the conv's inputs and gradients */
        const vkt_tensor *conv = m->g->nodes[nd->fused_from];
        add(&l, nd->grad, 0, 0);
        add(&l, nd->val, 0, 0);
        add(&l, nd->tmp, 1, 0);
        for (uint32_t k = 0; k < conv->n_in; k++) {
            add(&l, in_val(m, conv, k), 0, 0);
            add(&l, in_grad(m, conv, k), 1, 0);
        }
    } else if (t->op == GOP_LINEAR || t->op == GOP_MATMUL || nd->fused_from >= 0) {
        product_backward(m, i, &l);
    } else {
        op_backward(m, i, &l);
    }
    return l.n;
}

typedef struct placed {
    uint64_t offset, size;
    int32_t first, last;
} placed;

static int by_offset(const void *a, const void *b)
{
    uint64_t x = ((const placed *)a)->offset, y = ((const placed *)b)->offset;
    return x < y ? -1 : x > y;
}

/* A value to place: sorted by size (largest first), then first use, then index. */
typedef struct root_key {
    uint64_t count;
    int32_t first, v;
} root_key;

static int by_size(const void *a, const void *b)
{
    const root_key *x = a, *y = b;
    if (x->count != y->count)
        return x->count > y->count ? -1 : 1;
    if (x->first != y->first)
        return x->first < y->first ? -1 : 1;
    return x->v < y->v ? -1 : x->v > y->v;
}

static uint64_t aligned(uint64_t n) { return (n + ALIGN_ELEMS - 1) / ALIGN_ELEMS * ALIGN_ELEMS; }

/* Lowest offset for `size` elements clear of the placed values alive with it. */
static uint64_t fit(placed *busy, uint32_t n_busy, uint64_t size)
{
    qsort(busy, n_busy, sizeof *busy, by_offset);
    uint64_t at = 0;
    for (uint32_t i = 0; i < n_busy; i++) {
        if (busy[i].offset >= at + size)
            break;
        if (busy[i].offset + busy[i].size > at)
            at = busy[i].offset + busy[i].size;
    }
    return at;
}

static void liveness(vkt_model *m)
{
    for (uint32_t v = 0; v < m->n_val; v++) {
        m->val[v].first = INT32_MAX;
        m->val[v].last = -1;
    }
    enum { CAP = GRAPH_MAX_INPUTS * 2 + 16 };
    int32_t vals[CAP];
    int writes[CAP], phases[CAP];
    for (uint32_t s = 0; s < m->n_steps; s++) {
        uint32_t n = model_step_access(m, &m->steps[s], vals, writes, phases, CAP);
        for (uint32_t a = 0; a < n; a++) {
            mval *r = &m->val[model_root(m, vals[a])];
            int32_t pos = (int32_t)(s * PLAN_PHASES) + phases[a];
            if (pos < r->first)
                r->first = pos;
            if (pos > r->last)
                r->last = pos;
        }
    }
    for (uint32_t v = 0; v < m->n_val; v++) {
        mval *r = &m->val[v];
        if (r->alias >= 0 || r->space != MS_ARENA || r->first == INT32_MAX)
            continue;
        if (r->kept)
            r->last = (int32_t)(m->n_steps * PLAN_PHASES);
    }
}

vkt_status model_plan(vkt_model *m)
{
    liveness(m);
    root_key *roots = malloc((m->n_val ? m->n_val : 1) * sizeof *roots);
    placed *done = malloc((m->n_val ? m->n_val : 1) * sizeof *done);
    placed *busy = malloc((m->n_val ? m->n_val : 1) * sizeof *busy);
    if (!roots || !done || !busy) {
        free(roots);
        free(done);
        free(busy);
        return model_fail(m, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    }
    uint32_t n_roots = 0;
    for (uint32_t v = 0; v < m->n_val; v++) {
        const mval *r = &m->val[v];
        if (r->alias < 0 && r->space == MS_ARENA && r->first != INT32_MAX)
            roots[n_roots++] = (root_key){r->count, r->first, (int32_t)v};
    }
    qsort(roots, n_roots, sizeof *roots, by_size);
    m->arena_elems = m->no_reuse_elems = 0;
    for (uint32_t k = 0; k < n_roots; k++) {
        mval *r = &m->val[roots[k].v];
        uint64_t size = aligned(r->count);
        uint32_t n_busy = 0;
        for (uint32_t j = 0; j < k; j++)
            if (done[j].first <= r->last && r->first <= done[j].last)
                busy[n_busy++] = done[j];
        r->offset = m->no_reuse ? m->no_reuse_elems : fit(busy, n_busy, size);
        done[k] = (placed){r->offset, size, r->first, r->last};
        m->no_reuse_elems += size;
        if (r->offset + size > m->arena_elems)
            m->arena_elems = r->offset + size;
    }
    m->arena_values = n_roots;
    free(roots);
    free(done);
    free(busy);
    return VKT_OK;
}
