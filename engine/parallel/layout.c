/* layout.c - a pipelined trainer's parameters and optimizer state in the layout one
 * unpipelined model of the whole graph would have (exec_pipe.h): the offsets, copy d's
 * values gathered from its stages and scattered back into every copy, and the stages'
 * optimizer moments as one model's blob. */
#include <stdlib.h>
#include <string.h>

#include "optim/optim.h"
#include "parallel/exec_pipe.h"

/* The flat layout of one unpipelined model, and the initial values of every parameter
 * (those no stage holds keep them). */
vkt_status pipe_layout_make(vkt_trainer *t)
{
    pipe_exec *pe = pipe_exec_of(t);
    const vkt_graph *g = t->graph;
    uint32_t nodes = graph_node_count(g);
    pe->nodes = nodes;
    pe->off = malloc((nodes ? nodes : 1) * sizeof *pe->off);
    if (!pe->off)
        return trainer_fail(t, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    graph_flat_layout(g, nodes, pe->off, &t->grad_count, &t->param_count);
    pe->host = calloc(t->param_count ? t->param_count : 1, sizeof *pe->host);
    if (!pe->host)
        return trainer_fail(t, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    for (uint32_t i = 0; i < nodes; i++)
        if (pe->off[i] != UINT64_MAX)
            graph_init_param_at(g, i, pe->host + pe->off[i]);
    return VKT_OK;
}

void pipe_layout_free(pipe_exec *pe)
{
    free(pe->off);
    free(pe->host);
}

/* ---- parameters in the unpipelined layout ---- */

uint32_t pipe_layout_nodes(const vkt_trainer *t) { return pipe_exec_of(t)->nodes; }

vkt_status pipe_layout_offset(const vkt_trainer *t, const vkt_tensor *p, uint64_t *off)
{
    const pipe_exec *pe = pipe_exec_of(t);
    *off = 0;
    int64_t id = graph_node_id(t->graph, p);
    if (id < 0 || id >= pe->nodes || pe->off[id] == UINT64_MAX)
        return VKT_ERROR_INVALID_ARGUMENT;
    *off = pe->off[id];
    return VKT_OK;
}

/* The copy of stage s this process holds, preferring `copy` (copies are equal), or
 * UINT32_MAX: another rank holds it (its values are in the host copies, as of the last
 * sync: exec_pipe_world.c). */
static uint32_t copy_here(const vkt_trainer *t, uint32_t copy, uint32_t s)
{
    const vkt_pipeline *p = pipe_exec_of(t)->engine;
    return pipe_holds(p, copy, s) ? copy : pipe_local_copy(p, s);
}

/* The stage holding parameter node id, or UINT32_MAX. */
static uint32_t held_by(const vkt_trainer *t, uint32_t id)
{
    const graph_split *sp = pipe_split(pipe_exec_of(t)->engine);
    return id < sp->nodes && sp->node_stage[id] < sp->n_stages ? sp->node_stage[id]
                                                                   : UINT32_MAX;
}

static vkt_status check_count(vkt_trainer *t, const char *fn, uint64_t count)
{
    if (count != t->param_count)
        return trainer_fail(t, VKT_ERROR_SHAPE, "%s: the model has %llu parameter values; "
                            "%llu given", fn, (unsigned long long)t->param_count,
                            (unsigned long long)count);
    return VKT_OK;
}

vkt_status pipe_layout_read(vkt_trainer *t, uint32_t copy, float *flat, uint64_t count)
{
    pipe_exec *pe = pipe_exec_of(t);
    vkt_status st = check_count(t, "vkt_trainer_read_params", count);
    if (st != VKT_OK)
        return st;
    if (t->live && pipe_world(pe->engine)) /* the host copies are as of the fit's start */
        return trainer_fail(t, VKT_ERROR_STATE, "with pipeline stages across ranks the "
                            "parameters are read (and checkpoints saved) after vkt_trainer_fit "
                            "returns, not from its progress callback: the other stages' "
                            "values are on their ranks until the fit ends");
    if (flat != pe->host) /* parameters no stage holds */
        memcpy(flat, pe->host, t->param_count * sizeof *flat);
    for (uint32_t i = 0; i < pe->nodes; i++) {
        graph_node_info p;
        if (pe->off[i] == UINT64_MAX || held_by(t, i) == UINT32_MAX)
            continue;
        uint32_t c = copy_here(t, copy, held_by(t, i));
        if (c == UINT32_MAX)
            continue; /* another rank's stage: the host copy */
        graph_node_info_at(t->graph, i, &p);
        st = pipe_read_param(pe->engine, c, graph_node_at(t->graph, i), flat + pe->off[i],
                             p.count);
        if (st != VKT_OK)
            return trainer_fail(t, st, "%s", vkt_pipeline_errmsg(pe->engine));
    }
    return VKT_OK;
}

vkt_status pipe_layout_write(vkt_trainer *t, const float *flat, uint64_t count)
{
    pipe_exec *pe = pipe_exec_of(t);
    if (!flat)
        return trainer_fail(t, VKT_ERROR_INVALID_ARGUMENT, "vkt_trainer_write_params: data is "
                            "NULL");
    vkt_status st = check_count(t, "vkt_trainer_write_params", count);
    if (st != VKT_OK)
        return st;
    if (flat != pe->host)
        memcpy(pe->host, flat, t->param_count * sizeof *flat);
    pe->gen++;
    for (uint32_t i = 0; i < pe->nodes; i++) {
        graph_node_info p;
        if (pe->off[i] == UINT64_MAX || held_by(t, i) == UINT32_MAX)
            continue;
        graph_node_info_at(t->graph, i, &p);
        st = pipe_write_param(pe->engine, graph_node_at(t->graph, i), flat + pe->off[i],
                              p.count);
        if (st != VKT_OK)
            return trainer_fail(t, st, "%s", vkt_pipeline_errmsg(pe->engine));
    }
    return VKT_OK;
}

vkt_status pipe_layout_read_param(vkt_trainer *t, const vkt_tensor *param, float *out,
                                  uint64_t count)
{
    pipe_exec *pe = pipe_exec_of(t);
    uint64_t off = 0;
    if (!out)
        return trainer_fail(t, VKT_ERROR_INVALID_ARGUMENT, "vkt_trainer_read: out is NULL");
    if (pipe_layout_offset(t, param, &off) != VKT_OK)
        return trainer_fail(t, VKT_ERROR_INVALID_ARGUMENT, "vkt_trainer_read: '%s' is not a "
                            "parameter of the trainer's graph", vkt_tensor_name(param));
    graph_node_info p;
    graph_node_info_at(t->graph, (uint32_t)graph_node_id(t->graph, param), &p);
    uint32_t c = held_by(t, p.id) == UINT32_MAX ? UINT32_MAX : copy_here(t, 0, held_by(t, p.id));
    if (c != UINT32_MAX) {
        vkt_status st = pipe_read_param(pe->engine, c, param, out, count);
        return st == VKT_OK ? st : trainer_fail(t, st, "%s", vkt_pipeline_errmsg(pe->engine));
    }
    if (count != p.count)
        return trainer_fail(t, VKT_ERROR_SHAPE, "vkt_trainer_read: '%s' has %llu values; %llu "
                            "asked", p.name, (unsigned long long)p.count,
                            (unsigned long long)count);
    memcpy(out, pe->host + off, count * sizeof *out);
    return VKT_OK;
}

vkt_status pipe_layout_load_eval(vkt_trainer *t, vkt_model *m)
{
    pipe_exec *pe = pipe_exec_of(t);
    uint32_t k = 0, world = pipe_world(pe->engine) != NULL;
    while (world && k < TRAINER_MAX_EVAL && pe->loaded[k].m && pe->loaded[k].m != m)
        k++; /* its slot (the trainer keeps its evaluation models until destroyed) */
    if (world && k < TRAINER_MAX_EVAL && pe->loaded[k].m == m && pe->loaded[k].gen == pe->gen)
        return VKT_OK; /* loaded since the parameters last changed */
    vkt_status st = pipe_layout_read(t, 0, pe->host, t->param_count);
    if (st == VKT_OK && (st = vkt_model_write_params(m, pe->host, t->param_count)) != VKT_OK)
        trainer_fail(t, st, "evaluation model: %s", vkt_model_errmsg(m));
    if (st == VKT_OK && world && k < TRAINER_MAX_EVAL) {
        pe->loaded[k].m = m;
        pe->loaded[k].gen = pe->gen;
    }
    return st;
}

/* ---- optimizer state: the stages' blobs <-> one unpipelined model's ---- */

/* Moment arrays of the optimizers (the same kind on every stage). */
static uint32_t moments(vkt_trainer *t)
{
    vkt_pipeline *p = pipe_exec_of(t)->engine;
    vkt_optimizer_options o = t->optim;
    for (uint32_t s = 0; s < pipe_split(p)->n_stages; s++) {
        uint32_t c = copy_here(t, 0, s);
        if (c != UINT32_MAX && pipe_optimizer(p, c, s)) { /* stages without parameters have none */
            vkt_optimizer_get_options(pipe_optimizer(p, c, s), &o);
            break;
        }
    }
    return optim_moments(&o);
}

uint64_t pipe_layout_opt_size(vkt_trainer *t)
{
    return optim_state_header_size() + (uint64_t)moments(t) * t->grad_count * 4;
}

/* Copies the moments of stage s's trainable parameters between its blob (n_s floats per
 * moment array) and the whole model's (N = grad_count per array); to_whole sets the way. */
static vkt_status move_moments(vkt_trainer *t, uint32_t s, char *stage_blob, char *whole,
                               int to_whole)
{
    pipe_exec *pe = pipe_exec_of(t);
    const graph_split *sp = pipe_split(pe->engine);
    const graph_stage *gs = &sp->stage[s];
    uint32_t c = copy_here(t, 0, s); /* the caller checked that there is one */
    vkt_model *m = pipe_model(pe->engine, c, s);
    uint64_t hdr = optim_state_header_size(), N = t->grad_count;
    uint64_t n_s = vkt_optimizer_size(pipe_optimizer(pe->engine, c, s));
    uint32_t k = moments(t);
    for (uint32_t j = 0; j < gs->n_params; j++) {
        graph_node_info p;
        graph_node_info_at(t->graph, gs->params[j], &p);
        uint64_t off_s = 0, off_w = pe->off[p.id], n = p.count;
        if (p.state)
            continue; /* states have no moments */
        if (vkt_model_param_offset(m, gs->map[p.id], &off_s) != VKT_OK)
            return trainer_fail(t, VKT_ERROR_INTERNAL, "stage %u holds no '%s'", s, p.name);
        for (uint32_t a = 0; a < k; a++) {
            char *ps = stage_blob + hdr + (a * n_s + off_s) * 4;
            char *pw = whole + hdr + (a * N + off_w) * 4;
            memcpy(to_whole ? pw : ps, to_whole ? ps : pw, n * 4);
        }
    }
    return VKT_OK;
}

vkt_status pipe_layout_read_opt(vkt_trainer *t, void *blob, uint64_t bytes)
{
    vkt_pipeline *p = pipe_exec_of(t)->engine;
    pipe_exec *pe = pipe_exec_of(t);
    uint32_t P = pipe_split(p)->n_stages;
    memset(blob, 0, bytes);
    vkt_status fst = pipe_exec_flush(t); /* the moments after the update due */
    if (fst != VKT_OK)
        return fst;
    if (pe->opt_host && pe->opt_host_bytes == bytes) /* across ranks: others' stages */
        memcpy(blob, pe->opt_host, bytes);
    vkt_status st = VKT_OK;
    int header = 0;
    for (uint32_t s = 0; s < P && st == VKT_OK; s++) {
        uint32_t c = copy_here(t, 0, s);
        vkt_optimizer *o = c == UINT32_MAX ? NULL : pipe_optimizer(p, c, s);
        if (!o)
            continue; /* no trainable parameters, or another rank's */
        uint64_t size = vkt_optimizer_state_size(o);
        char *sb = malloc(size);
        if (!sb)
            return trainer_fail(t, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
        if ((st = vkt_optimizer_read_state(o, sb, size)) != VKT_OK)
            trainer_fail(t, st, "stage %u: %s", s, vkt_context_errmsg(pipe_context(p, c, s)));
        if (st == VKT_OK && !header++) { /* the first header (kind, step) over N parameters */
            memcpy(blob, sb, optim_state_header_size());
            optim_state_set_count(blob, t->grad_count);
        }
        if (st == VKT_OK)
            st = move_moments(t, s, sb, blob, 1);
        free(sb);
    }
    return st;
}

vkt_status pipe_layout_write_opt(vkt_trainer *t, const char *path, const void *blob,
                                 uint64_t bytes)
{
    pipe_exec *pe = pipe_exec_of(t);
    vkt_pipeline *p = pipe_exec_of(t)->engine;
    uint32_t P = pipe_split(p)->n_stages, D = pipe_copies(p);
    vkt_status st = pipe_exec_flush(t); /* else the update due would land on them */
    for (uint32_t s = 0; s < P && st == VKT_OK; s++) {
        uint32_t c0 = copy_here(t, 0, s);
        vkt_optimizer *o = c0 == UINT32_MAX ? NULL : pipe_optimizer(p, c0, s);
        if (!o)
            continue; /* no trainable parameters, or another rank's (its rank writes it) */
        uint64_t size = vkt_optimizer_state_size(o);
        char *sb = calloc(1, size);
        if (!sb)
            return trainer_fail(t, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
        /* the file's header (kind, step) over this stage's parameters: each stage's
         * optimizer checks it before writing, and stage 0's check comes before any write */
        memcpy(sb, blob, optim_state_header_size());
        optim_state_set_count(sb, vkt_optimizer_size(o));
        st = move_moments(t, s, sb, (char *)blob, 0);
        for (uint32_t c = 0; c < D && st == VKT_OK; c++)
            if (pipe_holds(p, c, s) &&
                (st = vkt_optimizer_write_state(pipe_optimizer(p, c, s), sb, size)) != VKT_OK)
                trainer_fail(t, st, "checkpoint '%s': stage %u: %s", path, s,
                             vkt_context_errmsg(pipe_context(p, c, s)));
        free(sb);
    }
    if (st == VKT_OK && pe->opt_host && pe->opt_host_bytes == bytes) /* the others' stages */
        memcpy(pe->opt_host, blob, bytes);
    return st;
}
