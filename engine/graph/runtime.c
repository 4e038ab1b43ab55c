/* runtime.c - the walks over a graph and a model that the layers above need
 * (graph/runtime.h): nodes by id, the flat parameter layout, initial values, the
 * signature ranks compare, and the check that a step's feeds cover a model's inputs. */
#include <stdlib.h>
#include <string.h>

#include "core/hash.h"
#include "graph/model.h"

uint32_t graph_node_count(const vkt_graph *g) { return g ? g->count : 0; }

vkt_tensor *graph_node_at(const vkt_graph *g, uint32_t id)
{
    return g && id < g->count ? g->nodes[id] : NULL;
}

int64_t graph_node_id(const vkt_graph *g, const vkt_tensor *t)
{
    return t && g && t->graph == g && t->id < g->count ? (int64_t)t->id : -1;
}

void graph_node_info_at(const vkt_graph *g, uint32_t id, graph_node_info *out)
{
    const vkt_tensor *t = g->nodes[id];
    uint64_t row = 1;
    for (uint32_t d = 1; d < t->shape.ndim; d++)
        row *= t->shape.dims[d];
    *out = (graph_node_info){.id = t->id, .name = t->name, .shape = t->shape,
                             .count = graph_count(&t->shape), .row_elems = row,
                             .param = t->op == GOP_PARAM, .state = t->state != 0,
                             .fed = t->op == GOP_INPUT || t->op == GOP_LABELS,
                             .computed = t->n_in > 0};
}

uint32_t graph_placed_stages(const vkt_graph *g)
{
    uint32_t P = 1;
    for (uint32_t i = 0; g && i < g->count; i++)
        if (g->nodes[i]->n_in > 0 && g->nodes[i]->stage + 1 > P)
            P = g->nodes[i]->stage + 1;
    return P;
}

void graph_flat_layout(const vkt_graph *g, uint32_t nodes, uint64_t *off, uint64_t *trained,
                       uint64_t *total)
{
    uint64_t end = 0;
    for (int pass = 0; pass < 2; pass++) { /* trainable parameters, then states */
        for (uint32_t i = 0; i < nodes; i++) {
            const vkt_tensor *p = g->nodes[i];
            if (pass == 0)
                off[i] = UINT64_MAX;
            if (p->op != GOP_PARAM || (p->state != 0) != (pass == 1))
                continue;
            off[i] = end;
            end += (graph_count(&p->shape) + GRAPH_FLAT_ALIGN - 1) / GRAPH_FLAT_ALIGN *
                   GRAPH_FLAT_ALIGN;
        }
        if (pass == 0)
            *trained = end;
    }
    *total = end;
}

void graph_init_param_at(const vkt_graph *g, uint32_t id, float *out)
{
    graph_init_param(g->nodes[id], g->seed, out);
}

void graph_signature(const vkt_graph *g, uint64_t *ops_hash, uint64_t *params_hash)
{
    uint64_t params = CORE_FNV0, ops = CORE_FNV0;
    for (uint32_t i = 0; i < g->count; i++) {
        const vkt_tensor *n = g->nodes[i];
        uint32_t op = (uint32_t)n->op;
        ops = core_fnv(ops, &op, sizeof op);
        ops = core_fnv(ops, n->shape.dims, n->shape.ndim * sizeof n->shape.dims[0]);
        graph_params p = n->p; /* the op's settings; random seeds follow each rank's graph */
        uint64_t *seed = GRAPH_DEF(n)->seed ? GRAPH_DEF(n)->seed(&p) : NULL;
        if (seed)
            *seed = 0;
        ops = core_fnv(ops, &p, sizeof p);
        if (n->op != GOP_PARAM)
            continue;
        params = core_fnv(params, n->name, strlen(n->name) + 1);
        params = core_fnv(params, &n->shape.ndim, sizeof n->shape.ndim);
        params = core_fnv(params, n->shape.dims, n->shape.ndim * sizeof n->shape.dims[0]);
    }
    *ops_hash = ops;
    *params_hash = params;
}

uint32_t graph_model_nodes(const vkt_model *m) { return m ? m->n : 0; }

vkt_status graph_model_check_fed(const vkt_model *m, const vkt_feed *feeds, uint32_t n,
                                 char *errmsg)
{
    for (uint32_t id = 0; id < m->n; id++) {
        const vkt_tensor *node = m->g->nodes[id];
        if ((node->op != GOP_INPUT && node->op != GOP_LABELS) || !m->node[id].active)
            continue;
        int fed = 0;
        for (uint32_t f = 0; f < n && !fed; f++)
            fed = feeds[f].tensor == node;
        if (!fed)
            return err_fail(errmsg, VKT_ERROR_INVALID_ARGUMENT,
                            "input '%s' is not fed: every step needs data for it", node->name);
    }
    return VKT_OK;
}
