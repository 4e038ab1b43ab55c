/* graph.c - the graph object: nodes, sticky errors, names, leaves (inputs, labels,
 * parameters). The ops are built in ops_build.c. */
#include "graph/graph.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_SEED 0x5EEDF00Dull

vkt_status vkt_graph_create(const vkt_graph_options *options, vkt_graph **out)
{
    if (!out)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "vkt_graph_create: out is NULL");
    *out = NULL;
    vkt_graph *g = calloc(1, sizeof *g);
    if (!g)
        return err_fail(NULL, VKT_ERROR_OUT_OF_MEMORY, "vkt_graph_create: out of host memory");
    g->seed = options && options->seed ? options->seed : DEFAULT_SEED;
    *out = g;
    return VKT_OK;
}

void vkt_graph_destroy(vkt_graph *g)
{
    if (!g)
        return;
    for (uint32_t i = 0; i < g->count; i++) {
        vkt_tensor *t = g->nodes[i];
        if (t->in != t->in_inline)
            free(t->in);
        free(t);
    }
    free(g->nodes);
    free(g);
}

vkt_status vkt_graph_status(const vkt_graph *g)
{
    return g ? g->status : VKT_ERROR_INVALID_ARGUMENT;
}

const char *vkt_graph_errmsg(const vkt_graph *g)
{
    return g ? g->errmsg : "graph is NULL";
}

vkt_tensor *graph_fail(vkt_graph *g, vkt_status st, const char *fmt, ...)
{
    char text[VKT_ERRMSG_SIZE];
    va_list ap;
    va_start(ap, fmt);
    err_failv(text, st, fmt, ap); /* also the thread's last error */
    va_end(ap);
    if (g && g->status == VKT_OK) {
        g->status = st;
        snprintf(g->errmsg, sizeof g->errmsg, "%s", text);
    }
    return NULL;
}

int graph_check_inputs(vkt_graph *g, const char *fn, vkt_tensor *const *in, uint32_t n)
{
    if (!g) {
        err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "%s: graph is NULL", fn);
        return 0;
    }
    for (uint32_t k = 0; k < n; k++) {
        if (!in[k]) {
            /* A NULL from an earlier failed call is that call's error: keep it. */
            if (g->status == VKT_OK)
                graph_fail(g, VKT_ERROR_INVALID_ARGUMENT, "%s: input %u is NULL", fn, k);
            return 0;
        }
        if (in[k]->graph != g) {
            graph_fail(g, VKT_ERROR_INVALID_ARGUMENT,
                       "%s: input %u ('%s') belongs to another graph", fn, k, in[k]->name);
            return 0;
        }
    }
    return 1;
}

static int grow(vkt_graph *g)
{
    if (g->count < g->cap)
        return 1;
    uint32_t cap = g->cap ? 2 * g->cap : 64;
    vkt_tensor **p = realloc(g->nodes, cap * sizeof *p);
    if (!p)
        return 0;
    g->nodes = p;
    g->cap = cap;
    return 1;
}

vkt_tensor *graph_add(vkt_graph *g, const char *fn, const vkt_tensor *tmpl,
                      vkt_tensor *const *in, uint32_t n_in)
{
    if (!graph_check_inputs(g, fn, in, n_in))
        return NULL;
    if (n_in > GRAPH_MAX_INPUTS)
        return graph_fail(g, VKT_ERROR_INVALID_ARGUMENT, "%s: %u inputs; at most %d", fn,
                          n_in, GRAPH_MAX_INPUTS);
    vkt_tensor *t = calloc(1, sizeof *t);
    if (!t || !grow(g)) {
        free(t);
        return graph_fail(g, VKT_ERROR_OUT_OF_MEMORY, "%s: out of host memory", fn);
    }
    *t = *tmpl;
    t->graph = g;
    t->id = g->count;
    t->stage = g->stage;
    t->n_in = n_in;
    t->in = n_in <= 3 ? t->in_inline : malloc(n_in * sizeof *t->in);
    if (!t->in) {
        free(t);
        return graph_fail(g, VKT_ERROR_OUT_OF_MEMORY, "%s: out of host memory", fn);
    }
    const vkt_shape *shapes[GRAPH_MAX_INPUTS];
    for (uint32_t k = 0; k < n_in; k++) {
        t->in[k] = in[k];
        shapes[k] = &in[k]->shape;
    }
    if (n_in) { /* leaves come with their shape */
        char msg[VKT_ERRMSG_SIZE];
        vkt_status st = graph_infer_shape(t, shapes, &t->shape, msg, sizeof msg);
        if (st != VKT_OK) {
            if (t->in != t->in_inline)
                free(t->in);
            free(t);
            return graph_fail(g, st, "%s", msg);
        }
    }
    if (!t->name[0])
        snprintf(t->name, sizeof t->name, "%s#%u", graph_op_name(t), t->id);
    g->nodes[g->count++] = t;
    return t;
}

vkt_shape vkt_tensor_shape(const vkt_tensor *t)
{
    vkt_shape none = {0, {0}};
    return t ? t->shape : none;
}

const char *vkt_tensor_name(const vkt_tensor *t) { return t ? t->name : "(null)"; }

vkt_tensor *vkt_set_name(vkt_graph *g, vkt_tensor *t, const char *name)
{
    if (!graph_check_inputs(g, "vkt_set_name", &t, 1))
        return NULL;
    if (!name)
        return graph_fail(g, VKT_ERROR_INVALID_ARGUMENT, "vkt_set_name: name is NULL");
    snprintf(t->name, sizeof t->name, "%s", name);
    return t;
}

void graph_mark_needed(const vkt_graph *g, const vkt_tensor *t, uint8_t *needed)
{
    needed[t->id] = 1;
    for (uint32_t i = t->id + 1; i-- > 0;) /* inputs have smaller ids than their readers */
        for (uint32_t k = 0; needed[i] && k < g->nodes[i]->n_in; k++)
            needed[g->nodes[i]->in[k]->id] = 1;
}

vkt_tensor *vkt_graph_find(const vkt_graph *g, const char *name)
{
    if (!g || !name)
        return NULL;
    for (uint32_t i = 0; i < g->count; i++)
        if (strcmp(g->nodes[i]->name, name) == 0)
            return g->nodes[i];
    return NULL;
}

vkt_tensor *vkt_keep(vkt_graph *g, vkt_tensor *t)
{
    if (!graph_check_inputs(g, "vkt_keep", &t, 1))
        return NULL;
    t->keep = 1;
    return t;
}

/* Checks a leaf's shape: 0..4 dims (inputs 1..4), none of size 0. */
static int leaf_shape_ok(vkt_graph *g, const char *fn, const vkt_shape *s, uint32_t min_dims)
{
    if (!s) {
        graph_fail(g, VKT_ERROR_INVALID_ARGUMENT, "%s: shape is NULL", fn);
        return 0;
    }
    if (s->ndim < min_dims || s->ndim > VKT_MAX_DIMS) {
        graph_fail(g, VKT_ERROR_INVALID_ARGUMENT, "%s: %u dimensions; %u to %d expected", fn,
                   s->ndim, min_dims, VKT_MAX_DIMS);
        return 0;
    }
    for (uint32_t k = 0; k < s->ndim; k++)
        if (s->dims[k] == 0) {
            char buf[GRAPH_SHAPE_STR];
            graph_fail(g, VKT_ERROR_INVALID_ARGUMENT, "%s: shape %s has a dimension of 0", fn,
                       graph_shape_str(s, buf));
            return 0;
        }
    return 1;
}

static vkt_tensor *leaf(vkt_graph *g, const char *fn, graph_op op, const char *name,
                        const vkt_shape *shape)
{
    vkt_tensor tmpl;
    memset(&tmpl, 0, sizeof tmpl);
    tmpl.op = op;
    tmpl.shape = *shape;
    tmpl.is_int = op == GOP_LABELS;
    if (name)
        snprintf(tmpl.name, sizeof tmpl.name, "%s", name);
    return graph_add(g, fn, &tmpl, NULL, 0);
}

vkt_tensor *vkt_input(vkt_graph *g, const char *name, const vkt_shape *shape)
{
    if (!graph_check_inputs(g, "vkt_input", NULL, 0) ||
        !leaf_shape_ok(g, "vkt_input", shape, 1))
        return NULL;
    return leaf(g, "vkt_input", GOP_INPUT, name, shape);
}

vkt_tensor *vkt_input_labels(vkt_graph *g, const char *name, uint32_t batch)
{
    vkt_shape s = {1, {batch}};
    if (!graph_check_inputs(g, "vkt_input_labels", NULL, 0) ||
        !leaf_shape_ok(g, "vkt_input_labels", &s, 1))
        return NULL;
    return leaf(g, "vkt_input_labels", GOP_LABELS, name, &s);
}

vkt_tensor *vkt_input_labels_shape(vkt_graph *g, const char *name, const vkt_shape *shape)
{
    if (!graph_check_inputs(g, "vkt_input_labels_shape", NULL, 0) ||
        !leaf_shape_ok(g, "vkt_input_labels_shape", shape, 1))
        return NULL;
    return leaf(g, "vkt_input_labels_shape", GOP_LABELS, name, shape);
}

static vkt_tensor *param_leaf(vkt_graph *g, const char *fn, const char *name,
                              const vkt_shape *shape, const vkt_init *init, int state)
{
    if (!graph_check_inputs(g, fn, NULL, 0) || !leaf_shape_ok(g, fn, shape, 0))
        return NULL;
    if (init && (unsigned)init->kind >= VKT_INIT_COUNT)
        return graph_fail(g, VKT_ERROR_INVALID_ARGUMENT, "%s: unknown initializer %d", fn,
                          (int)init->kind);
    if (init && init->kind == VKT_INIT_NORMAL && !(init->b >= 0))
        return graph_fail(g, VKT_ERROR_INVALID_ARGUMENT,
                          "%s: the normal initializer's deviation (b) is %g", fn, init->b);
    vkt_tensor *t = leaf(g, fn, GOP_PARAM, name, shape);
    if (t && init)
        t->init = *init;
    if (t)
        t->state = state;
    return t;
}

vkt_tensor *vkt_param(vkt_graph *g, const char *name, const vkt_shape *shape,
                      const vkt_init *init)
{
    return param_leaf(g, "vkt_param", name, shape, init, 0);
}

vkt_tensor *vkt_state(vkt_graph *g, const char *name, const vkt_shape *shape,
                      const vkt_init *init)
{
    return param_leaf(g, "vkt_state", name, shape, init, 1);
}
