/* plan_peak.c - what the memory plan holds at its peak: the position in the step where
 * the live arena values sum to most, and those values grouped by the op of the node that
 * owns them, their role there (output, gradient, saved for the backward, scratch, an
 * autocast product's 16-bit copies) and their element type (vkt_model_plan_peak). The
 * arena can be larger than that sum where the allocator leaves gaps. */
#include "graph/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A node's values by role: the field and the name the breakdown prints. */
static const struct {
    size_t field;
    const char *role;
} roles[] = {
    {offsetof(mnode, val), "output"},   {offsetof(mnode, grad), "gradient"},
    {offsetof(mnode, aux), "saved"},    {offsetof(mnode, tmp), "scratch"},
    {offsetof(mnode, lp_x), "16-bit x"}, {offsetof(mnode, lp_w), "16-bit w"},
    {offsetof(mnode, lp_dz), "16-bit dy"}, {offsetof(mnode, lp_wb), "16-bit w again"},
    {offsetof(mnode, lp_xb), "16-bit x again"},
    {offsetof(mnode, lp_y), "16-bit y"},
};
#define N_ROLES (sizeof roles / sizeof roles[0])

static int32_t role_value(const mnode *nd, size_t r)
{
    return *(const int32_t *)((const char *)nd + roles[r].field);
}

static uint64_t aligned4(uint64_t n) { return (n + ALIGN_ELEMS - 1) / ALIGN_ELEMS * ALIGN_ELEMS * 4; }

static int by_bytes(const void *a, const void *b)
{
    const vkt_plan_group *x = a, *y = b;
    if (x->bytes != y->bytes)
        return x->bytes > y->bytes ? -1 : 1;
    int c = strcmp(x->op, y->op);
    return c ? c : strcmp(x->role, y->role);
}

/* The position where the live roots sum to most (the first such). */
static int32_t peak_position(const vkt_model *m, uint64_t *live)
{
    int32_t n_pos = (int32_t)(m->n_steps * PLAN_PHASES) + 2;
    int64_t *delta = calloc((size_t)n_pos, sizeof *delta);
    if (!delta)
        return -1;
    for (uint32_t v = 0; v < m->n_val; v++) {
        const mval *r = &m->val[v];
        if (r->alias >= 0 || r->space != MS_ARENA || r->first == INT32_MAX)
            continue;
        delta[r->first] += (int64_t)aligned4(r->count);
        delta[r->last + 1] -= (int64_t)aligned4(r->count);
    }
    int64_t sum = 0, best = -1;
    int32_t at = 0;
    for (int32_t p = 0; p < n_pos; p++) {
        sum += delta[p];
        if (sum > best)
            best = sum, at = p;
    }
    free(delta);
    *live = (uint64_t)best;
    return at;
}

/* Adds root v's bytes to its group in g[0..*n) (a new one if none matches). */
static vkt_status add_to_group(vkt_plan_group *g, uint32_t *n, uint32_t cap, const char *op,
                               const char *role, vkt_dtype dtype, uint64_t bytes)
{
    uint32_t k = 0;
    while (k < *n && !(g[k].dtype == dtype && strcmp(g[k].op, op) == 0 &&
                       strcmp(g[k].role, role) == 0))
        k++;
    if (k == *n) {
        if (k == cap)
            return VKT_ERROR_INTERNAL;
        g[k] = (vkt_plan_group){.dtype = dtype};
        snprintf(g[k].op, sizeof g[k].op, "%s", op);
        snprintf(g[k].role, sizeof g[k].role, "%s", role);
        (*n)++;
    }
    g[k].values++;
    g[k].bytes += bytes;
    return VKT_OK;
}

vkt_status vkt_model_plan_peak(vkt_model *m, vkt_plan_peak *peak, vkt_plan_group *out,
                               uint32_t capacity)
{
    if (!m || !peak || (!out && capacity))
        return err_fail(m ? m->errmsg : NULL, VKT_ERROR_INVALID_ARGUMENT,
                        "vkt_model_plan_peak: NULL argument");
    memset(peak, 0, sizeof *peak);
    int32_t at = m->n_steps ? peak_position(m, &peak->live_bytes) : -1;
    if (m->n_steps && at < 0)
        return err_fail(m->errmsg, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    uint32_t cap = m->n * (uint32_t)N_ROLES + 1; /* at most one group per node and role */
    vkt_plan_group *g = malloc(cap * sizeof *g);
    uint8_t *seen = calloc(m->n_val ? m->n_val : 1, 1);
    if (!g || !seen) {
        free(g);
        free(seen);
        return err_fail(m->errmsg, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    }
    uint32_t n = 0;
    vkt_status st = VKT_OK;
    for (uint32_t i = 0; i < m->n && at >= 0 && st == VKT_OK; i++) {
        for (size_t r = 0; r < N_ROLES && st == VKT_OK; r++) {
            int32_t v = role_value(&m->node[i], r);
            if (v < 0 || model_root(m, v) != v || seen[v])
                continue; /* an alias counts where its storage's own value does */
            const mval *x = &m->val[v];
            if (x->space != MS_ARENA || x->first > at || x->last < at)
                continue;
            seen[v] = 1;
            st = add_to_group(g, &n, cap, graph_op_name(m->t[i]), roles[r].role, x->dtype,
                              aligned4(x->count));
        }
    }
    for (uint32_t v = 0; v < m->n_val && at >= 0 && st == VKT_OK; v++) {
        const mval *x = &m->val[v]; /* any root no node field names */
        if (!seen[v] && x->alias < 0 && x->space == MS_ARENA && x->first <= at && x->last >= at)
            st = add_to_group(g, &n, cap, "other", "other", x->dtype, aligned4(x->count));
    }
    if (st == VKT_OK) {
        qsort(g, n, sizeof *g, by_bytes);
        if (out && capacity) /* capacity 0 may pass NULL: no memcpy from or to NULL */
            memcpy(out, g, (n < capacity ? n : capacity) * sizeof *g);
        peak->groups = n;
        if (at >= 0) {
            const mstep *s = &m->steps[(uint32_t)at / PLAN_PHASES < m->n_steps
                                           ? (uint32_t)at / PLAN_PHASES : m->n_steps - 1];
            peak->backward = s->backward;
            snprintf(peak->name, sizeof peak->name, "%s", m->t[s->node]->name);
        }
    } else {
        err_fail(m->errmsg, st, "internal error: vkt_model_plan_peak: more groups than nodes "
                 "and roles");
    }
    free(g);
    free(seen);
    return st;
}
