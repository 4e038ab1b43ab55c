/* stage.c - placing ops on pipeline stages (vkt_graph_set_stage, vkt_tensor_set_stage)
 * and cutting a placed graph into one sub-graph per stage (stage.h says the rules and
 * what a stage's sub-graph holds). */
#include "graph/stage.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

vkt_status vkt_graph_set_stage(vkt_graph *g, uint32_t stage)
{
    if (!g)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "vkt_graph_set_stage: graph is NULL");
    if (stage >= VKT_MAX_STAGES)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "vkt_graph_set_stage: stage %u "
                        "is out of range (0..%d)", stage, VKT_MAX_STAGES - 1);
    g->stage = stage;
    return VKT_OK;
}

uint32_t vkt_graph_stage(const vkt_graph *g) { return g ? g->stage : 0; }

vkt_status vkt_tensor_set_stage(vkt_tensor *t, uint32_t stage)
{
    if (!t)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "vkt_tensor_set_stage: tensor is "
                        "NULL");
    if (stage >= VKT_MAX_STAGES)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "vkt_tensor_set_stage: stage %u is "
                        "out of range (0..%d)", stage, VKT_MAX_STAGES - 1);
    t->stage = stage;
    return VKT_OK;
}

uint32_t vkt_tensor_stage(const vkt_tensor *t) { return t ? t->stage : 0; }

/* ---- the split ---- */

static vkt_status fail(char *msg, size_t size, vkt_status st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static vkt_status fail(char *msg, size_t size, vkt_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, size, fmt, ap);
    va_end(ap);
    err_fail(NULL, st, "%s", msg); /* the thread's last error too */
    return st;
}

static int is_leaf(const vkt_tensor *t) { return t->n_in == 0; }

void graph_split_free(graph_split *s)
{
    if (!s)
        return;
    for (uint32_t k = 0; s->stage && k < s->n_stages; k++) {
        graph_stage *st = &s->stage[k];
        vkt_graph_destroy(st->g);
        free(st->map);
        free(st->recv);
        free(st->send);
        free(st->send_grad);
        free(st->feed);
        free(st->params);
    }
    free(s->stage);
    free(s->node_stage);
    memset(s, 0, sizeof *s);
}

/* Stage of every node (UINT32_MAX: unused), with the placement rules checked. */
static vkt_status place(graph_split *s, const vkt_tensor *loss, const uint8_t *active,
                        char *msg, size_t size)
{
    const vkt_graph *g = s->g;
    uint32_t P = s->n_stages;
    for (uint32_t i = 0; i < g->count; i++)
        s->node_stage[i] = UINT32_MAX;
    /* ops first: their stage is their own */
    for (uint32_t i = 0; i < g->count; i++) {
        const vkt_tensor *t = g->nodes[i];
        if (!active[i] || is_leaf(t))
            continue;
        if (t->stage >= P)
            return fail(msg, size, VKT_ERROR_INVALID_ARGUMENT, "op '%s' (%s) is on stage %u; "
                        "the pipeline has %u stage(s) (0..%u)", t->name, graph_op_name(t),
                        t->stage, P, P - 1);
        s->node_stage[i] = t->stage;
        s->stage[t->stage].ops++;
    }
    /* edges and leaves */
    for (uint32_t i = 0; i < g->count; i++) {
        const vkt_tensor *t = g->nodes[i];
        if (!active[i] || is_leaf(t))
            continue;
        for (uint32_t k = 0; k < t->n_in; k++) {
            const vkt_tensor *in = t->in[k];
            uint32_t *ps = &s->node_stage[in->id];
            if (!is_leaf(in)) {
                if (*ps > t->stage)
                    return fail(msg, size, VKT_ERROR_INVALID_ARGUMENT, "op '%s' on stage %u "
                                "reads '%s' from stage %u: values must flow to higher stages",
                                t->name, t->stage, in->name, *ps);
            } else if (in->op == GOP_PARAM) {
                if (*ps != UINT32_MAX && *ps != t->stage)
                    return fail(msg, size, VKT_ERROR_INVALID_ARGUMENT, "parameter '%s' is read "
                                "on stages %u and %u; a parameter lives on one stage (place "
                                "the ops that share it together)", in->name, *ps, t->stage);
                *ps = t->stage;
            } else if (*ps == UINT32_MAX || t->stage < *ps) {
                *ps = t->stage; /* inputs are fed to every reader; this is the first */
            }
        }
    }
    if (loss->stage != P - 1)
        return fail(msg, size, VKT_ERROR_INVALID_ARGUMENT, "the loss '%s' is on stage %u; it "
                    "must be on the last stage (%u)", loss->name, loss->stage, P - 1);
    for (uint32_t k = 0; k < P; k++)
        if (s->stage[k].ops == 0)
            return fail(msg, size, VKT_ERROR_INVALID_ARGUMENT, "stage %u of %u holds no op the "
                        "loss depends on", k, P);
    return VKT_OK;
}

/* A crossing value must be [batch, ...] and batch-major, so micro-batches are rows. */
static vkt_status check_crossing(const graph_split *s, const vkt_tensor *t,
                                 const uint8_t *batch_major, char *msg, size_t size)
{
    if (t->is_int || !batch_major[t->id] || t->shape.ndim == 0 ||
        t->shape.dims[0] != s->batch) {
        char buf[GRAPH_SHAPE_STR];
        return fail(msg, size, VKT_ERROR_INVALID_ARGUMENT, "'%s' %s crosses from stage %u to a later "
                    "stage but is not laid out by batch rows [%u, ...]: cut the stages "
                    "elsewhere", t->name, graph_shape_str(&t->shape, buf), t->stage, s->batch);
    }
    return VKT_OK;
}

static int push(uint32_t **list, uint32_t *n, uint32_t cap, uint32_t v)
{
    if (!*list && !(*list = malloc((cap ? cap : 1) * sizeof **list)))
        return 0;
    (*list)[(*n)++] = v;
    return 1;
}

/* The copy of node t in stage k's sub-graph, with its inputs mapped (received values
 * become inputs of the sub-graph, made on first use). */
static vkt_status copy_node(graph_split *s, uint32_t k, const vkt_tensor *t, int sent,
                            char *msg, size_t size)
{
    graph_stage *st = &s->stage[k];
    uint32_t cap = s->g->count;
    vkt_tensor tmpl = *t;
    vkt_tensor *in[GRAPH_MAX_INPUTS];
    for (uint32_t j = 0; j < t->n_in; j++) {
        const vkt_tensor *x = t->in[j];
        if (!st->map[x->id]) { /* a value of an earlier stage: received */
            vkt_tensor r;
            memset(&r, 0, sizeof r);
            r.op = GOP_INPUT;
            r.shape = x->shape;
            snprintf(r.name, sizeof r.name, "%s", x->name);
            st->map[x->id] = graph_add(st->g, "vkt_input", &r, NULL, 0);
            if (!st->map[x->id] || !push(&st->recv, &st->n_recv, cap, x->id))
                break;
        }
        in[j] = st->map[x->id];
    }
    if (st->g->status == VKT_OK) {
        if (t->op == GOP_PARAM) /* the same initial values as in the whole graph */
            tmpl.init.seed = graph_init_seed(t, s->g->seed);
        tmpl.keep = t->keep || sent;
        st->map[t->id] = graph_add(st->g, graph_op_fn(t), &tmpl, in, t->n_in);
    }
    if (st->g->status != VKT_OK)
        return fail(msg, size, st->g->status, "stage %u: %s", k, st->g->errmsg);
    return VKT_OK;
}

/* Stage k's surrogate loss: sum over sent values of sum(out * grad). */
static vkt_status surrogate(graph_split *s, uint32_t k, char *msg, size_t size)
{
    graph_stage *st = &s->stage[k];
    vkt_graph *sg = st->g;
    st->send_grad = calloc(st->n_send ? st->n_send : 1, sizeof *st->send_grad);
    if (!st->send_grad)
        return fail(msg, size, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    vkt_tensor *total = NULL;
    for (uint32_t j = 0; j < st->n_send; j++) {
        vkt_tensor *out = st->map[st->send[j]];
        char name[GRAPH_NAME_SIZE];
        snprintf(name, sizeof name, "%.50s:grad", out->name);
        vkt_shape shape = out->shape;
        st->send_grad[j] = vkt_input(sg, name, &shape);
        vkt_tensor *term = vkt_sum(sg, vkt_mul(sg, out, st->send_grad[j]), -1);
        total = total ? vkt_add(sg, total, term) : term;
    }
    st->loss = total;
    if (sg->status != VKT_OK)
        return fail(msg, size, sg->status, "stage %u: surrogate loss: %s", k, sg->errmsg);
    return VKT_OK;
}

static vkt_status build(graph_split *s, const vkt_tensor *loss, const uint8_t *active,
                        const uint8_t *batch_major, char *msg, size_t size)
{
    const vkt_graph *g = s->g;
    uint32_t P = s->n_stages, cap = g->count;
    for (uint32_t k = 0; k < P; k++) {
        graph_stage *st = &s->stage[k];
        vkt_graph_options go = {.seed = g->seed};
        if (vkt_graph_create(&go, &st->g) != VKT_OK ||
            !(st->map = calloc(cap, sizeof *st->map)))
            return fail(msg, size, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    }
    for (uint32_t i = 0; i < g->count; i++) {
        const vkt_tensor *t = g->nodes[i];
        if (!active[i])
            continue;
        if (is_leaf(t)) {
            /* a leaf goes to every stage whose ops read it (a parameter: one) */
            for (uint32_t k = 0; k < P; k++) {
                int read = 0;
                for (uint32_t u = i + 1; u < g->count && !read; u++)
                    if (active[u] && !is_leaf(g->nodes[u]) && g->nodes[u]->stage == k)
                        for (uint32_t j = 0; j < g->nodes[u]->n_in; j++)
                            read |= g->nodes[u]->in[j] == t;
                if (!read)
                    continue;
                graph_stage *st = &s->stage[k];
                vkt_status r = copy_node(s, k, t, 0, msg, size);
                if (r != VKT_OK)
                    return r;
                int ok = t->op == GOP_PARAM ? push(&st->params, &st->n_params, cap, i)
                                            : push(&st->feed, &st->n_feed, cap, i);
                if (!ok)
                    return fail(msg, size, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
            }
            continue;
        }
        /* an op: sent when an op of a later stage reads it */
        uint32_t k = t->stage;
        int sent = 0;
        for (uint32_t u = i + 1; u < g->count; u++)
            if (active[u] && !is_leaf(g->nodes[u]) && g->nodes[u]->stage > k)
                for (uint32_t j = 0; j < g->nodes[u]->n_in; j++)
                    sent |= g->nodes[u]->in[j] == t;
        if (sent) {
            vkt_status r = check_crossing(s, t, batch_major, msg, size);
            if (r != VKT_OK)
                return r;
            if (!push(&s->stage[k].send, &s->stage[k].n_send, cap, i))
                return fail(msg, size, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
        }
        vkt_status r = copy_node(s, k, t, sent, msg, size);
        if (r != VKT_OK)
            return r;
    }
    for (uint32_t k = 0; k + 1 < P; k++) {
        vkt_status r = surrogate(s, k, msg, size);
        if (r != VKT_OK)
            return r;
    }
    s->stage[P - 1].loss = s->stage[P - 1].map[loss->id];
    return VKT_OK;
}

vkt_status graph_split_stages(const vkt_graph *g, const vkt_tensor *loss, uint32_t n_stages,
                              graph_split *out, char *msg, size_t size)
{
    if (out)
        memset(out, 0, sizeof *out);
    if (!g || !loss || !out)
        return fail(msg, size, VKT_ERROR_INVALID_ARGUMENT, "graph_split_stages: NULL argument");
    if (g->status != VKT_OK)
        return fail(msg, size, g->status, "the graph has an error: %s", g->errmsg);
    if (loss->graph != g || graph_count(&loss->shape) != 1)
        return fail(msg, size, VKT_ERROR_INVALID_ARGUMENT, "the loss is not a scalar of this "
                    "graph");
    if (n_stages == 0 || n_stages > GRAPH_MAX_STAGES)
        return fail(msg, size, VKT_ERROR_INVALID_ARGUMENT, "%u stages; 1 to %d are supported",
                    n_stages, GRAPH_MAX_STAGES);
    graph_split *s = out;
    s->g = g;
    s->n_stages = n_stages;
    s->nodes = g->count;
    s->batch = 1;
    for (uint32_t i = 0; i < g->count; i++)
        if (g->nodes[i]->op == GOP_INPUT || g->nodes[i]->op == GOP_LABELS) {
            s->batch = g->nodes[i]->shape.dims[0];
            break;
        }
    uint8_t *active = calloc(g->count, 1), *batch_major = calloc(g->count, 1);
    s->stage = calloc(n_stages, sizeof *s->stage);
    s->node_stage = calloc(g->count, sizeof *s->node_stage);
    vkt_status st = VKT_OK;
    if (!active || !batch_major || !s->stage || !s->node_stage)
        st = fail(msg, size, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    if (st == VKT_OK) {
        graph_mark_needed(g, loss, active);
        for (uint32_t i = 0; i < g->count; i++)
            batch_major[i] = (uint8_t)graph_batch_major(g->nodes[i], batch_major);
        st = place(s, loss, active, msg, size);
    }
    if (st == VKT_OK)
        st = build(s, loss, active, batch_major, msg, size);
    free(active);
    free(batch_major);
    if (st != VKT_OK)
        graph_split_free(s);
    return st;
}
