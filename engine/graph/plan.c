/* plan.c - the activation memory plan. Every arena value lives from the first dispatch
 * that touches it to the last (kept values to the end); values whose lifetimes do not
 * overlap may share memory. Positions count dispatches within steps (PLAN_PHASES per
 * step), so the activation a linear's backward reads first can make room for the input
 * gradient it writes last. Offsets come from a walk over positions that frees the values
 * dead before each position and places those born there, largest first, in the smallest
 * free block that fits (best fit; a treap of free blocks, neighbours merged), or at the
 * top: O(n log n) in the values, 15 ms for a 64,000-op chain. Small graphs (at most
 * PLAN_GREEDY_MAX values) are also planned greedily by size and keep the smaller peak.
 * The peak is reported beside the total without reuse. */
#include "graph/model.h"

#include <stdlib.h>

void plan_add(acc_list *l, int32_t v, int w, int phase)
{
    if (v < 0)
        return;
    if (l->n >= l->cap) {
        l->overflow = 1;
        return;
    }
    l->vals[l->n] = v;
    l->writes[l->n] = w;
    l->phases[l->n] = phase;
    l->n++;
}

int32_t plan_in_grad(const vkt_model *m, const vkt_tensor *t, uint32_t k)
{
    const mnode *in = &m->node[t->in[k]->id];
    return in->needs_grad ? in->grad : -1;
}

void plan_generic_backward(const vkt_model *m, uint32_t i, acc_list *l)
{
    const vkt_tensor *t = m->t[i];
    const mnode *nd = &m->node[i];
    const graph_op_def *d = GRAPH_DEF(t);
    plan_add(l, nd->grad, 0, 0);
    if (d->backward_reads)
        d->backward_reads(m, t, l);
    for (uint32_t k = 0; k < t->n_in; k++)
        plan_add(l, plan_in_grad(m, t, k), 1, 0);
    plan_add(l, nd->tmp, 1, 0);
}

uint32_t model_step_access(const vkt_model *m, const mstep *s, int32_t *vals, int *writes,
                           int *phases, uint32_t cap, int *overflow)
{
    acc_list l = {vals, writes, phases, 0, cap, 0};
    uint32_t i = s->node;
    const vkt_tensor *t = m->t[i];
    const mnode *nd = &m->node[i];
    if (!s->backward) {
        for (uint32_t k = 0; k < t->n_in; k++)
            plan_add(&l, m->node[t->in[k]->id].val, 0, 0);
        plan_add(&l, nd->val, 1, 0);
        plan_add(&l, nd->aux, 1, 0);
        plan_add(&l, nd->lp_x, 1, 0); /* an autocast product's casts (autocast.c) */
        plan_add(&l, nd->lp_w, 1, 0);
        plan_add(&l, nd->y16_from < 0 ? nd->lp_y : -1, 1, 0); /* else its reader's */
        if (GRAPH_DEF(t)->flags & OPF_GRAD_IN_FORWARD)
            plan_add(&l, m->node[t->in[0]->id].grad, 1, 0);
    } else if (GRAPH_DEF(t)->backward_access) {
        GRAPH_DEF(t)->backward_access(m, i, &l);
    } else {
        plan_generic_backward(m, i, &l);
    }
    if (overflow)
        *overflow = l.overflow;
    return l.n;
}

/* ---- the allocator: best fit over a free list, values taken in time order ----
 * The arena is a row of blocks in address order (a doubly linked list), each used by one
 * value or free; free neighbours merge at once. Free blocks are also kept in a treap
 * keyed by (size, offset), so the smallest free block that fits (lowest offset among
 * equals) is found in O(log n). When none fits, the value goes at the top, over the
 * last block when that one is free, and the arena grows. */

typedef struct block {
    uint64_t offset, size;
    int32_t prev, next;        /* address order (-1: none) */
    int32_t left, right;       /* treap children, free blocks only */
    uint32_t prio;
    int free;
} block;

typedef struct arena_sim {
    block *b;
    uint32_t n_blocks;
    int32_t spare;             /* a chain of unused block slots through .next */
    int32_t root, tail;        /* treap root, last block in address order */
    uint64_t top;              /* end of the last block: the arena's size so far */
    uint32_t seed;
} arena_sim;

static int key_less(const block *x, uint64_t size, uint64_t offset)
{
    return x->size != size ? x->size < size : x->offset < offset;
}

/* Splits treap t into keys < (size, offset) and the rest. */
static void split(block *b, int32_t t, uint64_t size, uint64_t offset, int32_t *lo, int32_t *hi)
{
    if (t < 0) {
        *lo = *hi = -1;
    } else if (key_less(&b[t], size, offset)) {
        split(b, b[t].right, size, offset, &b[t].right, hi);
        *lo = t;
    } else {
        split(b, b[t].left, size, offset, lo, &b[t].left);
        *hi = t;
    }
}

static int32_t merge(block *b, int32_t x, int32_t y)
{
    if (x < 0 || y < 0)
        return x < 0 ? y : x;
    if (b[x].prio > b[y].prio) {
        b[x].right = merge(b, b[x].right, y);
        return x;
    }
    b[y].left = merge(b, x, b[y].left);
    return y;
}

static void free_insert(arena_sim *a, int32_t k)
{
    int32_t lo, hi;
    a->seed = a->seed * 1664525u + 1013904223u;
    a->b[k] = (block){a->b[k].offset, a->b[k].size, a->b[k].prev, a->b[k].next, -1, -1,
                      a->seed, 1};
    split(a->b, a->root, a->b[k].size, a->b[k].offset, &lo, &hi);
    a->root = merge(a->b, merge(a->b, lo, k), hi);
}

static void free_remove(arena_sim *a, int32_t k)
{
    int32_t lo, mid, hi;
    split(a->b, a->root, a->b[k].size, a->b[k].offset, &lo, &mid);
    split(a->b, mid, a->b[k].size, a->b[k].offset + 1, &mid, &hi); /* mid: k alone */
    a->root = merge(a->b, lo, hi);
    a->b[k].free = 0;
}

/* The smallest free block of at least `size` elements (-1: none). */
static int32_t best_fit(const arena_sim *a, uint64_t size)
{
    int32_t t = a->root, found = -1;
    while (t >= 0) {
        if (a->b[t].size >= size) {
            found = t;
            t = a->b[t].left;
        } else {
            t = a->b[t].right;
        }
    }
    return found;
}

static int32_t new_block(arena_sim *a, uint64_t offset, uint64_t size)
{
    int32_t k = a->spare;
    a->spare = a->b[k].next;
    a->b[k] = (block){offset, size, -1, -1, -1, -1, 0, 0};
    return k;
}

/* Links block k into the address order after block `after` (-1: at the front). */
static void link_after(arena_sim *a, int32_t k, int32_t after)
{
    int32_t next = after >= 0 ? a->b[after].next : -1;
    a->b[k].prev = after;
    a->b[k].next = next;
    if (after >= 0)
        a->b[after].next = k;
    if (next >= 0)
        a->b[next].prev = k;
    else
        a->tail = k;
}

static void unlink_block(arena_sim *a, int32_t k)
{
    int32_t p = a->b[k].prev, n = a->b[k].next;
    if (p >= 0)
        a->b[p].next = n;
    if (n >= 0)
        a->b[n].prev = p;
    else
        a->tail = p;
    a->b[k].next = a->spare;
    a->spare = k;
}

/* Places `size` elements; returns the block that holds them. */
static int32_t sim_alloc(arena_sim *a, uint64_t size)
{
    int32_t k = best_fit(a, size);
    if (k >= 0) {
        free_remove(a, k);
        if (a->b[k].size > size) { /* the rest stays free after it */
            int32_t rest = new_block(a, a->b[k].offset + size, a->b[k].size - size);
            a->b[k].size = size;
            link_after(a, rest, k);
            free_insert(a, rest);
        }
        return k;
    }
    if (a->tail >= 0 && a->b[a->tail].free) { /* grow the free last block */
        k = a->tail;
        free_remove(a, k);
        a->b[k].size = size;
    } else {
        k = new_block(a, a->top, size);
        link_after(a, k, a->tail);
    }
    if (a->b[k].offset + size > a->top)
        a->top = a->b[k].offset + size;
    return k;
}

static void sim_free(arena_sim *a, int32_t k)
{
    int32_t p = a->b[k].prev, n = a->b[k].next;
    if (p >= 0 && a->b[p].free) { /* merge into the free block before */
        free_remove(a, p);
        a->b[p].size += a->b[k].size;
        unlink_block(a, k);
        k = p;
    }
    if (n >= 0 && a->b[n].free) { /* absorb the free block after */
        free_remove(a, n);
        a->b[k].size += a->b[n].size;
        unlink_block(a, n);
    }
    free_insert(a, k);
}

/* A value to place, in the order of allocation: first use, then largest, then index. */
typedef struct root_key {
    uint64_t count;
    int32_t first, v;
} root_key;

static int by_first(const void *a, const void *b)
{
    const root_key *x = a, *y = b;
    if (x->first != y->first)
        return x->first < y->first ? -1 : 1;
    if (x->count != y->count)
        return x->count > y->count ? -1 : 1;
    return x->v < y->v ? -1 : x->v > y->v;
}

/* Values in the order their memory is given back: last use, then index. */
typedef struct end_key {
    int32_t last, v;
} end_key;

static int by_last(const void *a, const void *b)
{
    const end_key *x = a, *y = b;
    if (x->last != y->last)
        return x->last < y->last ? -1 : 1;
    return x->v < y->v ? -1 : x->v > y->v;
}

static uint64_t aligned(uint64_t n) { return (n + ALIGN_ELEMS - 1) / ALIGN_ELEMS * ALIGN_ELEMS; }

static vkt_status liveness(vkt_model *m)
{
    for (uint32_t v = 0; v < m->n_val; v++) {
        m->val[v].first = INT32_MAX;
        m->val[v].last = -1;
    }
    enum { CAP = GRAPH_MAX_INPUTS * 2 + 16 };
    int32_t vals[CAP];
    int writes[CAP], phases[CAP];
    for (uint32_t s = 0; s < m->n_steps; s++) {
        int overflow;
        uint32_t n = model_step_access(m, &m->steps[s], vals, writes, phases, CAP, &overflow);
        if (overflow)
            return model_fail(m, VKT_ERROR_INTERNAL,
                              "internal error: step %u (op '%s') makes more than %d accesses",
                              s, m->t[m->steps[s].node]->name, CAP);
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
    return VKT_OK;
}

/* ---- greedy by size, for small graphs ----
 * Largest value first, each at the lowest offset clear of the placed values alive with
 * it (TFLite's arena planner). It packs a few large values tighter than the walk in time
 * (the MLP's and CNN's arenas are 19% and 8% smaller) but costs O(n^2 log n), so it only
 * runs on graphs of at most PLAN_GREEDY_MAX values, where it takes a few milliseconds. */
#define PLAN_GREEDY_MAX 1024

typedef struct placed {
    uint64_t offset, size;
    int32_t first, last;
} placed;

static int by_offset(const void *a, const void *b)
{
    uint64_t x = ((const placed *)a)->offset, y = ((const placed *)b)->offset;
    return x < y ? -1 : x > y;
}

static int by_size(const void *a, const void *b)
{
    const root_key *x = a, *y = b;
    if (x->count != y->count)
        return x->count > y->count ? -1 : 1;
    return by_first(a, b);
}

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

/* Places the roots (sorted here by size) into done[k] and returns the peak. */
static uint64_t greedy_by_size(const vkt_model *m, root_key *roots, uint32_t n, placed *done,
                               placed *busy)
{
    qsort(roots, n, sizeof *roots, by_size);
    uint64_t peak = 0;
    for (uint32_t k = 0; k < n; k++) {
        const mval *r = &m->val[roots[k].v];
        uint32_t n_busy = 0;
        for (uint32_t j = 0; j < k; j++)
            if (done[j].first <= r->last && r->first <= done[j].last)
                busy[n_busy++] = done[j];
        uint64_t size = aligned(r->count);
        done[k] = (placed){fit(busy, n_busy, size), size, r->first, r->last};
        if (done[k].offset + size > peak)
            peak = done[k].offset + size;
    }
    return peak;
}

/* Where greedy by size packs tighter than the walk in time, its offsets replace the walk's. */
static vkt_status try_greedy(vkt_model *m, root_key *roots, uint32_t n)
{
    placed *done = malloc((n ? n : 1) * sizeof *done), *busy = malloc((n ? n : 1) * sizeof *busy);
    if (!done || !busy) {
        free(done);
        free(busy);
        return model_fail(m, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    }
    uint64_t peak = greedy_by_size(m, roots, n, done, busy);
    if (peak < m->arena_elems) {
        for (uint32_t k = 0; k < n; k++)
            m->val[roots[k].v].offset = done[k].offset;
        m->arena_elems = peak;
    }
    free(done);
    free(busy);
    return VKT_OK;
}

/* Offsets of the n roots (sorted by first use): a walk over positions that gives back
 * the memory of values dead before each position, then places the values born there. */
static void place(vkt_model *m, const root_key *roots, const end_key *ends, uint32_t n,
                  arena_sim *a, int32_t *holder)
{
    uint32_t e = 0;
    for (uint32_t k = 0; k < n; k++) {
        mval *r = &m->val[roots[k].v];
        while (!m->no_reuse && e < n && ends[e].last < r->first) {
            sim_free(a, holder[ends[e].v]);
            e++;
        }
        uint64_t size = aligned(r->count);
        if (m->no_reuse) {
            r->offset = m->no_reuse_elems;
        } else {
            holder[roots[k].v] = sim_alloc(a, size);
            r->offset = a->b[holder[roots[k].v]].offset;
        }
        m->no_reuse_elems += size;
        if (r->offset + size > m->arena_elems)
            m->arena_elems = r->offset + size;
    }
}

vkt_status model_plan(vkt_model *m)
{
    vkt_status lst = liveness(m);
    if (lst != VKT_OK)
        return lst;
    size_t n_val = m->n_val ? m->n_val : 1;
    root_key *roots = malloc(n_val * sizeof *roots);
    end_key *ends = malloc(n_val * sizeof *ends);
    int32_t *holder = malloc(n_val * sizeof *holder);
    arena_sim a = {malloc((2 * n_val + 1) * sizeof *a.b), 0, 0, -1, -1, 0, 12345u};
    if (!roots || !ends || !holder || !a.b) {
        free(roots);
        free(ends);
        free(holder);
        free(a.b);
        return model_fail(m, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    }
    for (size_t k = 0; k < 2 * n_val + 1; k++) /* every slot spare: one used per split */
        a.b[k].next = k + 1 < 2 * n_val + 1 ? (int32_t)(k + 1) : -1;
    uint32_t n_roots = 0;
    for (uint32_t v = 0; v < m->n_val; v++) {
        const mval *r = &m->val[v];
        if (r->alias < 0 && r->space == MS_ARENA && r->first != INT32_MAX) {
            roots[n_roots] = (root_key){r->count, r->first, (int32_t)v};
            ends[n_roots++] = (end_key){r->last, (int32_t)v};
        }
    }
    qsort(roots, n_roots, sizeof *roots, by_first);
    qsort(ends, n_roots, sizeof *ends, by_last);
    m->arena_elems = m->no_reuse_elems = 0;
    place(m, roots, ends, n_roots, &a, holder);
    m->arena_values = n_roots;
    vkt_status st = VKT_OK;
    if (!m->no_reuse && n_roots <= PLAN_GREEDY_MAX)
        st = try_greedy(m, roots, n_roots);
    free(roots);
    free(ends);
    free(holder);
    free(a.b);
    return st;
}
