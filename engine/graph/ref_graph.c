/* ref_graph.c - the CPU reference of a whole graph, in double: forward over every node
 * in order, backward from a scalar loss. Tests compare models against it and
 * differentiate it by central differences. */
#include "graph/graph.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void graph_ref_free(graph_ref *r)
{
    if (!r)
        return;
    for (uint32_t i = 0; i < r->n; i++) {
        if (r->val)
            free(r->val[i]);
        if (r->grad)
            free(r->grad[i]);
    }
    free(r->val);
    free(r->grad);
    free(r->shape);
    free(r->count);
    free(r->batch_major);
    memset(r, 0, sizeof *r);
}

vkt_status graph_ref_init(graph_ref *r, const vkt_graph *g, uint32_t batch, char *msg,
                          size_t msg_size)
{
    memset(r, 0, sizeof *r);
    if (g->status != VKT_OK) {
        snprintf(msg, msg_size, "%s", g->errmsg);
        return g->status;
    }
    r->g = g;
    r->n = g->count;
    r->training = 1;
    r->shape = calloc(r->n, sizeof *r->shape);
    r->count = calloc(r->n, sizeof *r->count);
    r->val = calloc(r->n, sizeof *r->val);
    r->grad = calloc(r->n, sizeof *r->grad);
    r->batch_major = calloc(r->n, sizeof *r->batch_major);
    r->batch = batch;
    if (!r->shape || !r->count || !r->val || !r->grad || !r->batch_major) {
        graph_ref_free(r);
        snprintf(msg, msg_size, "out of host memory");
        return VKT_ERROR_OUT_OF_MEMORY;
    }
    for (uint32_t i = 0; i < r->n; i++) {
        const vkt_tensor *t = g->nodes[i];
        r->batch_major[i] = (uint8_t)graph_batch_major(t, r->batch_major);
        if (t->op == GOP_INPUT || t->op == GOP_LABELS || t->op == GOP_PARAM) {
            if (t->op != GOP_PARAM && r->batch == 0)
                r->batch = t->shape.dims[0]; /* the first input's, as models do */
            r->shape[i] = t->shape;
            if (t->op != GOP_PARAM && batch)
                r->shape[i].dims[0] = batch;
        } else {
            const vkt_shape *in[GRAPH_MAX_INPUTS];
            for (uint32_t k = 0; k < t->n_in; k++)
                in[k] = &r->shape[t->in[k]->id];
            vkt_status st = graph_infer_shape(t, in, &r->shape[i], msg, msg_size);
            if (st != VKT_OK) {
                graph_ref_free(r);
                return st;
            }
        }
        r->count[i] = graph_count(&r->shape[i]);
        r->val[i] = calloc(r->count[i], sizeof(double));
        r->grad[i] = calloc(r->count[i], sizeof(double));
        if (!r->val[i] || !r->grad[i]) {
            graph_ref_free(r);
            snprintf(msg, msg_size, "out of host memory");
            return VKT_ERROR_OUT_OF_MEMORY;
        }
        if (t->op == GOP_PARAM) {
            float *init = malloc(r->count[i] * sizeof *init);
            if (!init) {
                graph_ref_free(r);
                snprintf(msg, msg_size, "out of host memory");
                return VKT_ERROR_OUT_OF_MEMORY;
            }
            graph_init_param(t, g->seed, init);
            for (uint64_t e = 0; e < r->count[i]; e++)
                r->val[i][e] = init[e];
            free(init);
        }
    }
    return VKT_OK;
}

void graph_ref_set(graph_ref *r, const vkt_tensor *t, const float *data)
{
    for (uint64_t e = 0; e < r->count[t->id]; e++)
        r->val[t->id][e] = t->is_int ? (double)((const int32_t *)data)[e] : (double)data[e];
}

static graph_ref_args args_of(const graph_ref *r, const vkt_tensor *t)
{
    graph_ref_args a;
    memset(&a, 0, sizeof a);
    a.node = t;
    a.n_in = t->n_in;
    a.out_shape = r->shape[t->id];
    a.out = r->val[t->id];
    a.dout = r->grad[t->id];
    a.step = r->step;
    a.training = r->training;
    a.row_offset = r->row_offset;
    a.batch = r->batch;
    a.batch_major = r->batch_major[t->id];
    for (uint32_t k = 0; k < t->n_in; k++) {
        uint32_t id = t->in[k]->id;
        a.in_shape[k] = &r->shape[id];
        a.in[k] = r->val[id];
        a.din[k] = t->in[k]->is_int ? NULL : r->grad[id];
    }
    return a;
}

void graph_ref_run_forward(graph_ref *r)
{
    for (uint32_t i = 0; i < r->n; i++) {
        const vkt_tensor *t = r->g->nodes[i];
        if (t->n_in == 0)
            continue;
        graph_ref_args a = args_of(r, t);
        graph_ref_forward(&a);
    }
}

void graph_ref_run_backward(graph_ref *r, const vkt_tensor *loss)
{
    for (uint32_t i = 0; i < r->n; i++)
        memset(r->grad[i], 0, r->count[i] * sizeof(double));
    r->grad[loss->id][0] = 1.0;
    for (uint32_t i = loss->id + 1; i-- > 0;) {
        const vkt_tensor *t = r->g->nodes[i];
        if (t->n_in == 0)
            continue;
        graph_ref_args a = args_of(r, t);
        graph_ref_backward(&a);
    }
}
