/* check.c - VKT_CHECK: after a run, every op is recomputed on the CPU reference from the
 * device's own values of its inputs (so an error does not spread to later ops) and
 * compared with the device's output; then every gradient, in the order the backward
 * completes them. The first difference fails the step with a message naming the op.
 * Check mode keeps the plan's memory reuse: every arena value is copied into a snapshot
 * buffer right after each step that writes it (run.c), and the check reads the copies;
 * only in-place gradients (a fused linear's dz over its activation's gradient) are off. */
#include "graph/model.h"
#include "kernels/train_ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct ck {
    vkt_model *m;
    float *host[MS_CTRL + 1]; /* host copies of each space's buffer */
    int training;
} ck;

static void ck_free(ck *c)
{
    for (int s = 0; s <= MS_CTRL; s++)
        if (s != MS_CTRL)
            free(c->host[s]);
}

static vkt_status read_space(ck *c, mspace s, vkt_buffer *b)
{
    if (!b)
        return VKT_OK;
    if (s == MS_CTRL) {
        c->host[s] = b->mapped;
        return VKT_OK;
    }
    c->host[s] = malloc(b->size);
    if (!c->host[s])
        return model_fail(c->m, VKT_ERROR_OUT_OF_MEMORY, "VKT_CHECK: out of host memory");
    vkt_status st = vkt_buffer_read(b, 0, c->host[s], b->size);
    return st == VKT_OK ? VKT_OK : model_ctx_fail(c->m, st);
}

/* The device's value v of node `id` as doubles (labels as integers). */
static double *device_doubles(const ck *c, int32_t v, uint32_t id)
{
    const vkt_model *m = c->m;
    int32_t root = model_root(m, v);
    const mval *r = &m->val[root];
    uint64_t n = m->count[id];
    double *out = malloc((n ? n : 1) * sizeof *out);
    if (!out)
        return NULL;
    const float *f = c->host[r->space] + (r->space == MS_ARENA ? m->snap_off[root] : r->offset);
    for (uint64_t i = 0; i < n; i++)
        out[i] = m->g->nodes[id]->is_int ? (double)((const int32_t *)f)[i] : (double)f[i];
    return out;
}

static const float *device_floats(const ck *c, int32_t v)
{
    int32_t root = model_root(c->m, v);
    const mval *r = &c->m->val[root];
    return c->host[r->space] + (r->space == MS_ARENA ? c->m->snap_off[root] : r->offset);
}

/* Arguments for node t's reference with the device's inputs (allocated; free_args). */
static int args_of(const ck *c, const vkt_tensor *t, graph_ref_args *a)
{
    const vkt_model *m = c->m;
    memset(a, 0, sizeof *a);
    a->node = t;
    a->n_in = t->n_in;
    a->out_shape = m->shape[t->id];
    a->step = m->step;
    a->training = c->training;
    a->row_offset = m->row_offset;
    a->batch = m->batch;
    a->batch_major = m->batch_major[t->id];
    for (uint32_t k = 0; k < t->n_in; k++) {
        uint32_t id = t->in[k]->id;
        a->in_shape[k] = &m->shape[id];
        const mnode *in = &m->node[id];
        a->in[k] = in->val >= 0 ? device_doubles(c, in->val, id) : NULL;
        if (!a->in[k])
            return 0;
    }
    return 1;
}

static void free_args(graph_ref_args *a)
{
    for (uint32_t k = 0; k < a->n_in; k++)
        free((void *)a->in[k]);
    a->n_in = 0;
}

/* Forward reference of node i (the op the model runs there, m->t) into `out`. */
static int ref_forward(const ck *c, uint32_t i, double *out)
{
    graph_ref_args a;
    int ok = args_of(c, c->m->t[i], &a);
    a.out = out;
    if (ok)
        graph_ref_forward(&a);
    free_args(&a);
    return ok;
}

/* |dev - ref| <= 1e-3 |ref| + 2e-3 rms(ref) + 1e-6 everywhere; else the first bad index. */
static int differs(const double *ref, const float *dev, uint64_t n, uint64_t *at)
{
    double ss = 0;
    for (uint64_t i = 0; i < n; i++)
        ss += ref[i] * ref[i];
    double rms = sqrt(ss / (double)(n ? n : 1));
    for (uint64_t i = 0; i < n; i++) {
        double err = fabs((double)dev[i] - ref[i]);
        if (!(err <= 1e-3 * fabs(ref[i]) + 2e-3 * rms + 1e-6)) {
            *at = i;
            return 1;
        }
    }
    return 0;
}

static vkt_status report(ck *c, const char *what, const vkt_tensor *t, const double *ref,
                         const float *dev, uint64_t n, uint64_t at)
{
    vkt_model *m = c->m;
    const mnode *nd = &m->node[t->id];
    char fused[128] = "";
    if (nd->fused_from >= 0)
        snprintf(fused, sizeof fused, ", fused with '%s'", m->g->nodes[nd->fused_from]->name);
    vkt_status st = model_fail(m, VKT_ERROR_INTERNAL,
                               "VKT_CHECK: %s of op '%s' (%s%s) differs from the CPU reference "
                               "at element %llu of %llu: device %.9g, reference %.9g", what,
                               t->name, graph_op_name(t), fused, (unsigned long long)at,
                               (unsigned long long)n, dev[at], ref[at]);
    fprintf(stderr, "vktrain: %s\n", m->errmsg);
    return st;
}

static vkt_status check_forward(ck *c)
{
    vkt_model *m = c->m;
    for (uint32_t s = 0; s < m->n_fwd_steps; s++) {
        uint32_t i = m->steps[s].node;
        uint64_t n = m->count[i];
        double *ref = malloc(n * sizeof *ref);
        if (!ref || !ref_forward(c, i, ref)) {
            free(ref);
            return model_fail(m, VKT_ERROR_OUT_OF_MEMORY, "VKT_CHECK: out of host memory");
        }
        const float *dev = device_floats(c, m->node[i].val);
        uint64_t at;
        vkt_status st = differs(ref, dev, n, &at)
                            ? report(c, "the output", m->t[i], ref, dev, n, at)
                            : VKT_OK;
        free(ref);
        if (st != VKT_OK)
            return st;
    }
    return VKT_OK;
}

/* Reference gradient of node t: the sum over its uses of each use's backward. */
static int ref_grad(const ck *c, uint32_t t, double *out)
{
    const vkt_model *m = c->m;
    memset(out, 0, m->count[t] * sizeof *out);
    for (uint32_t i = t + 1; i < m->n; i++) {
        const vkt_tensor *u = m->t[i]; /* absorbed producers are no use: their fused node is */
        const mnode *nd = &m->node[i];
        int uses = 0;
        for (uint32_t k = 0; k < u->n_in; k++)
            uses |= u->in[k]->id == t;
        if (!uses || !nd->needs_grad || nd->fused_into >= 0)
            continue;
        graph_ref_args a;
        double *dout = device_doubles(c, nd->grad, i);
        double *y = nd->val >= 0 ? device_doubles(c, nd->val, i) : NULL;
        int ok = args_of(c, u, &a) && dout;
        if (ok) {
            a.out = y;
            a.dout = dout;
            for (uint32_t k = 0; k < u->n_in; k++)
                a.din[k] = u->in[k]->id == t ? out : NULL;
            graph_ref_backward(&a);
        }
        free_args(&a);
        free(dout);
        free(y);
        if (!ok)
            return 0;
    }
    return 1;
}

/* Position in the schedule after which node i's gradient is complete. */
static int32_t done_pos(const vkt_model *m, uint32_t i, const int32_t *done)
{
    int32_t pos = -1;
    for (uint32_t u = i + 1; u < m->n; u++) {
        const vkt_tensor *t = m->t[u];
        const mnode *nd = &m->node[u];
        int uses = 0;
        for (uint32_t k = 0; k < t->n_in; k++)
            uses |= t->in[k]->id == i;
        if (!uses || !nd->needs_grad || nd->fused_into >= 0)
            continue;
        int32_t p = nd->bpos;
        if (GRAPH_DEF(t)->flags & OPF_GRAD_IN_FORWARD)
            p = nd->fpos;
        else if (p < 0)
            p = done[u]; /* a reshape viewing this gradient */
        if (p > pos)
            pos = p;
    }
    return pos;
}

static vkt_status check_grads(ck *c)
{
    vkt_model *m = c->m;
    int32_t *done = malloc(m->n * sizeof *done);
    uint64_t *keys = malloc(m->n * sizeof *keys);
    uint32_t n_keys = 0;
    vkt_status st = done && keys ? VKT_OK
                                 : model_fail(m, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    for (uint32_t o = m->n_order; st == VKT_OK && o-- > 0;) {
        uint32_t i = m->order[o];
        done[i] = done_pos(m, i, done);
        const mnode *nd = &m->node[i];
        if (nd->needs_grad && nd->grad >= 0 && m->g->nodes[i] != m->loss && done[i] >= 0)
            keys[n_keys++] = (uint64_t)done[i] << 32 | i;
    }
    for (uint32_t a = 1; a < n_keys; a++) /* insertion sort: by position, then node */
        for (uint32_t b = a; b > 0 && keys[b - 1] > keys[b]; b--) {
            uint64_t x = keys[b];
            keys[b] = keys[b - 1];
            keys[b - 1] = x;
        }
    for (uint32_t k = 0; k < n_keys && st == VKT_OK; k++) {
        uint32_t i = (uint32_t)keys[k];
        uint64_t n = m->count[i], at;
        double *ref = malloc(n * sizeof *ref);
        if (!ref || !ref_grad(c, i, ref)) {
            free(ref);
            st = model_fail(m, VKT_ERROR_OUT_OF_MEMORY, "VKT_CHECK: out of host memory");
            break;
        }
        const mval *g = &m->val[model_root(m, m->node[i].grad)];
        for (uint64_t j = 0; m->check_prior && g->space == MS_GRADS && j < n; j++)
            ref[j] += m->check_prior[g->offset + j]; /* accumulating: added to what was there */
        const float *dev = device_floats(c, m->node[i].grad);
        if (differs(ref, dev, n, &at))
            st = report(c, "the gradient written by the backward", m->t[i], ref, dev, n,
                        at);
        free(ref);
    }
    free(done);
    free(keys);
    return st;
}

vkt_status model_check(vkt_model *m, int training, int parts)
{
    int backward = (parts & MODEL_CHECK_BWD) != 0;
    ck c;
    memset(&c, 0, sizeof c);
    c.m = m;
    c.training = training;
    vkt_status st = read_space(&c, MS_ARENA, m->snap);
    if (st == VKT_OK)
        st = read_space(&c, MS_PARAMS, m->params);
    if (st == VKT_OK && backward)
        st = read_space(&c, MS_GRADS, m->grads);
    if (st == VKT_OK)
        st = read_space(&c, MS_INPUTS, m->inputs);
    if (st == VKT_OK)
        st = read_space(&c, MS_CTRL, m->ctrl);
    if (st == VKT_OK && (parts & MODEL_CHECK_FWD))
        st = check_forward(&c);
    if (st == VKT_OK && backward)
        st = check_grads(&c);
    ck_free(&c);
    return st;
}
