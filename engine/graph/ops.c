/* ops.c - the op table (generated from GRAPH_OPS, see ops.h) and the dispatch through
 * it: names, shape rules, batch rows, and the CPU reference of any node. */
#include "graph/op_impl.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define GRAPH_OP_ENTRY(id, name) [GOP_##id] = &graph_op_##name,
static const graph_op_def *const table[] = {GRAPH_OPS(GRAPH_OP_ENTRY)};
#undef GRAPH_OP_ENTRY
_Static_assert(sizeof table / sizeof table[0] == GOP_COUNT,
               "the op table has one entry per op of GRAPH_OPS");

const graph_op_def *graph_op_def_of(graph_op op)
{
    return (unsigned)op < GOP_COUNT ? table[op] : NULL;
}

const char *graph_op_name(const vkt_tensor *n)
{
    const graph_op_def *d = GRAPH_DEF(n);
    if (!d)
        return "unknown";
    return d->name_of ? d->name_of(n) : d->name;
}

const char *graph_op_fn(const vkt_tensor *n)
{
    const graph_op_def *d = GRAPH_DEF(n);
    if (!d)
        return "unknown";
    return d->fn_of ? d->fn_of(n) : d->fn;
}

vkt_status op_bad(const vkt_tensor *t, char *msg, size_t size, vkt_status st, const char *fmt,
                  ...)
{
    int len = snprintf(msg, size, "%s: ", graph_op_fn(t));
    if (len < 0 || (size_t)len >= size)
        return st;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg + len, size - (size_t)len, fmt, ap);
    va_end(ap);
    return st;
}

const char *op_two(const vkt_shape *const *in, const char *na, const char *nb, char *buf,
                   size_t size)
{
    char sa[GRAPH_SHAPE_STR], sb[GRAPH_SHAPE_STR];
    snprintf(buf, size, "%s %s and %s %s", na, graph_shape_str(in[0], sa), nb,
             graph_shape_str(in[1], sb));
    return buf;
}

vkt_status op_vec_ok(const vkt_tensor *t, const vkt_shape *v, uint32_t c, const char *what,
                     char *msg, size_t size)
{
    char sv[GRAPH_SHAPE_STR];
    if (v->ndim != 1 || v->dims[0] != c)
        return op_bad(t, msg, size, VKT_ERROR_SHAPE, "%s %s does not match: [%u] expected",
                      what, graph_shape_str(v, sv), c);
    return VKT_OK;
}

vkt_status op_shape_same(const vkt_tensor *t, const vkt_shape *const *in, vkt_shape *out,
                         char *msg, size_t size)
{
    (void)t;
    (void)msg;
    (void)size;
    *out = *in[0];
    return VKT_OK;
}

vkt_status graph_infer_shape(const vkt_tensor *n, const vkt_shape *const *in, vkt_shape *out,
                             char *msg, size_t msg_size)
{
    const graph_op_def *d = GRAPH_DEF(n);
    if (!d || !d->shape)
        return op_bad(n, msg, msg_size, VKT_ERROR_INTERNAL, "op %d has no shape rule",
                      (int)n->op);
    for (uint32_t k = 0; k < n->n_in; k++)
        if (n->in[k]->is_int && !((d->flags & OPF_LABELS_IN1) && k == 1))
            return op_bad(n, msg, msg_size, VKT_ERROR_INVALID_ARGUMENT,
                          "input %u ('%s') holds integer labels; only "
                          "vkt_softmax_cross_entropy takes them", k, n->in[k]->name);
    return d->shape(n, in, out, msg, msg_size);
}

int graph_batch_major(const vkt_tensor *n, const uint8_t *batch_major)
{
    const graph_op_def *d = GRAPH_DEF(n);
    if (d->batch_major)
        return d->batch_major(n, batch_major);
    if (d->flags & (OPF_LOSS | OPF_NO_BATCH_ROWS))
        return 0;
    for (uint32_t k = 0; k < n->n_in; k++)
        if (batch_major[n->in[k]->id])
            return 1;
    return 0;
}

void graph_ref_forward(const graph_ref_args *a)
{
    const graph_op_def *d = GRAPH_DEF(a->node);
    if (d->ref_forward) /* leaves have none */
        d->ref_forward(a);
}

void graph_ref_backward(const graph_ref_args *a)
{
    const graph_op_def *d = GRAPH_DEF(a->node);
    if (d->ref_backward)
        d->ref_backward(a);
}

void op_reads_inputs(const vkt_model *m, const vkt_tensor *t, acc_list *l)
{
    int32_t lp_x = GRAPH_DEF(t)->flags & OPF_SAVES_X16 ? m->node[t->id].lp_x : -1;
    for (uint32_t k = 0; k < t->n_in; k++) /* a norm's 16-bit x in place of x */
        plan_add(l, k == 0 && lp_x >= 0 ? lp_x : op_in_value(m, t, k), 0, 0);
    if (GRAPH_DEF(t)->flags & OPF_AUX_SAVED)
        plan_add(l, m->node[t->id].aux, 0, 0);
}
