/* trainer_pipe.c - model parallelism inside vkt_trainer: D data-parallel copies of a
 * P-stage pipeline (the engine of pipeline.c, pipe.h) behind the trainer's API.
 *
 * The trainer keeps one driving replica (rep[0]: the loader, the loss, the statistics;
 * no context of its own) and the engine's P x D contexts. Parameters and optimizer state
 * are seen through the layout one unpipelined model of the whole graph would have
 * (trainable parameters in node order, then states, each at a 16-element boundary:
 * make_values in graph/autodiff.c), so read_params, write_params and checkpoints are the
 * same bytes with or without stages, and a checkpoint restores with any stage count. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "optim/optim.h"
#include "parallel/exec.h"
#include "parallel/pipe.h"

int trainer_pipelined(const vkt_trainer *t)
{
    exec_facts f;
    exec_facts_of(t, 0, &f);
    return (f.has & EXEC_PIPELINED) != 0;
}

/* The flat layout of one unpipelined model, and the initial values of every parameter
 * (those no stage holds keep them). */
static vkt_status make_layout(vkt_trainer *t)
{
    const vkt_graph *g = t->graph;
    uint32_t nodes = graph_node_count(g);
    t->pipe_nodes = nodes;
    t->pipe_off = malloc((nodes ? nodes : 1) * sizeof *t->pipe_off);
    if (!t->pipe_off)
        return trainer_fail(t, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    graph_flat_layout(g, nodes, t->pipe_off, &t->grad_count, &t->param_count);
    t->pipe_host = calloc(t->param_count ? t->param_count : 1, sizeof *t->pipe_host);
    if (!t->pipe_host)
        return trainer_fail(t, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    for (uint32_t i = 0; i < nodes; i++)
        if (t->pipe_off[i] != UINT64_MAX)
            graph_init_param_at(g, i, t->pipe_host + t->pipe_off[i]);
    return VKT_OK;
}

vkt_status trainer_pipe_create(vkt_trainer *t, const uint32_t *dev, uint32_t n)
{
    exec_facts f; /* what the pipeline does not combine with (yet): exec_plan.c */
    exec_facts_of(t, 0, &f);
    vkt_status st = exec_plan_refuse(t, &f);
    if (st != VKT_OK)
        return st;
    t->row = exec_plan_pick(&f);
    uint32_t P = f.stages;
    uint32_t D = n >= P ? n / P : 1;
    if (n >= P && n % P != 0)
        return trainer_fail(t, VKT_ERROR_INVALID_ARGUMENT, "vkt_trainer_create: the device "
                            "list has %u entries; with %u stages it names P x D contexts (copy "
                            "d's stage s on entry d * P + s), so a multiple of %u", n, P, P);
    pipe_options po = {.batch = t->opt.batch, .micro_batches = t->opt.micro_batches,
                       .stages = P, .copies = D, .devices = dev, .n_devices = n,
                       .optimizer = t->optim, .kernels = t->opt.kernels, .check = t->opt.check,
                       .fn = "vkt_trainer_create"};
    st = pipe_create(t->inst, t->graph, t->loss, &po, &t->pipe);
    if (st != VKT_OK)
        return trainer_fail(t, st, "%s", vkt_last_error());
    if ((st = make_layout(t)) != VKT_OK)
        return st;
    if (!(t->rep = calloc(1, sizeof *t->rep)))
        return trainer_fail(t, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    t->n_rep = 1;
    t->world_rep = D;
    replica *r = &t->rep[0];
    r->t = t;
    r->rows = t->opt.batch;
    r->weight = 1.0f;
    /* every copy starts from the whole graph's initial values (and equal to each other) */
    return trainer_pipe_write_flat(t, t->pipe_host, t->param_count);
}

void trainer_pipe_step(replica *r, const vkt_feed *feeds, uint32_t n, uint64_t step)
{
    vkt_trainer *t = r->t;
    double loss = 0;
    vkt_status st = pipe_step(t->pipe, feeds, n, step, &loss);
    if (st != VKT_OK) {
        replica_fail(r, st, "%s", vkt_pipeline_errmsg(t->pipe));
        return;
    }
    r->loss = (float)loss;
    if (!isfinite(r->loss))
        replica_fail(r, VKT_ERROR_DIVERGED, "the loss is %g at step %llu: training diverged "
                     "(a smaller learning rate may help)", (double)r->loss,
                     (unsigned long long)step + 1);
}

/* ---- parameters in the unpipelined layout ---- */

uint32_t trainer_flat_nodes(const vkt_trainer *t)
{
    return t->pipe ? t->pipe_nodes : graph_model_nodes(t->rep[0].model);
}

vkt_status trainer_param_offset(const vkt_trainer *t, const vkt_tensor *p, uint64_t *off)
{
    if (!t->pipe)
        return vkt_model_param_offset(t->rep[0].model, p, off);
    *off = 0;
    int64_t id = graph_node_id(t->graph, p);
    if (id < 0 || id >= t->pipe_nodes || t->pipe_off[id] == UINT64_MAX)
        return VKT_ERROR_INVALID_ARGUMENT;
    *off = t->pipe_off[id];
    return VKT_OK;
}

/* The stage holding parameter node id, or UINT32_MAX. */
static uint32_t held_by(const vkt_trainer *t, uint32_t id)
{
    const graph_split *sp = pipe_split(t->pipe);
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

vkt_status trainer_pipe_read_flat(vkt_trainer *t, uint32_t copy, float *flat, uint64_t count)
{
    vkt_status st = check_count(t, "vkt_trainer_read_params", count);
    if (st != VKT_OK)
        return st;
    if (flat != t->pipe_host) /* parameters no stage holds */
        memcpy(flat, t->pipe_host, t->param_count * sizeof *flat);
    for (uint32_t i = 0; i < t->pipe_nodes; i++) {
        graph_node_info p;
        if (t->pipe_off[i] == UINT64_MAX || held_by(t, i) == UINT32_MAX)
            continue;
        graph_node_info_at(t->graph, i, &p);
        st = pipe_read_param(t->pipe, copy, graph_node_at(t->graph, i), flat + t->pipe_off[i],
                             p.count);
        if (st != VKT_OK)
            return trainer_fail(t, st, "%s", vkt_pipeline_errmsg(t->pipe));
    }
    return VKT_OK;
}

vkt_status trainer_pipe_write_flat(vkt_trainer *t, const float *flat, uint64_t count)
{
    vkt_status st = check_count(t, "vkt_trainer_write_params", count);
    if (st != VKT_OK)
        return st;
    if (flat != t->pipe_host)
        memcpy(t->pipe_host, flat, t->param_count * sizeof *flat);
    for (uint32_t i = 0; i < t->pipe_nodes; i++) {
        graph_node_info p;
        if (t->pipe_off[i] == UINT64_MAX || held_by(t, i) == UINT32_MAX)
            continue;
        graph_node_info_at(t->graph, i, &p);
        st = pipe_write_param(t->pipe, graph_node_at(t->graph, i), flat + t->pipe_off[i],
                              p.count);
        if (st != VKT_OK)
            return trainer_fail(t, st, "%s", vkt_pipeline_errmsg(t->pipe));
    }
    return VKT_OK;
}

vkt_status trainer_pipe_read(vkt_trainer *t, const vkt_tensor *param, float *out,
                             uint64_t count)
{
    uint64_t off = 0;
    if (trainer_param_offset(t, param, &off) != VKT_OK)
        return trainer_fail(t, VKT_ERROR_INVALID_ARGUMENT, "vkt_trainer_read: '%s' is not a "
                            "parameter of the trainer's graph", vkt_tensor_name(param));
    graph_node_info p;
    graph_node_info_at(t->graph, (uint32_t)graph_node_id(t->graph, param), &p);
    if (held_by(t, p.id) != UINT32_MAX) {
        vkt_status st = pipe_read_param(t->pipe, 0, param, out, count);
        return st == VKT_OK ? st : trainer_fail(t, st, "%s", vkt_pipeline_errmsg(t->pipe));
    }
    if (count != p.count)
        return trainer_fail(t, VKT_ERROR_SHAPE, "vkt_trainer_read: '%s' has %llu values; %llu "
                            "asked", p.name, (unsigned long long)p.count,
                            (unsigned long long)count);
    memcpy(out, t->pipe_host + off, count * sizeof *out);
    return VKT_OK;
}

vkt_status trainer_pipe_load_eval(vkt_trainer *t, vkt_model *m)
{
    vkt_status st = trainer_pipe_read_flat(t, 0, t->pipe_host, t->param_count);
    if (st == VKT_OK && (st = vkt_model_write_params(m, t->pipe_host, t->param_count)) != VKT_OK)
        trainer_fail(t, st, "evaluation model: %s", vkt_model_errmsg(m));
    return st;
}

/* ---- optimizer state: the stages' blobs <-> one unpipelined model's ---- */

/* Moment arrays of the optimizers (the same kind on every stage). */
static uint32_t moments(vkt_trainer *t)
{
    vkt_optimizer_options o = t->optim;
    for (uint32_t s = 0; s < pipe_split(t->pipe)->n_stages; s++)
        if (pipe_optimizer(t->pipe, 0, s)) { /* stages without parameters have none */
            vkt_optimizer_get_options(pipe_optimizer(t->pipe, 0, s), &o);
            break;
        }
    return optim_moments(&o);
}

uint64_t trainer_pipe_opt_size(vkt_trainer *t)
{
    return optim_state_header_size() + (uint64_t)moments(t) * t->grad_count * 4;
}

/* Copies the moments of stage s's trainable parameters between its blob (n_s floats per
 * moment array) and the whole model's (N = grad_count per array); to_whole sets the way. */
static vkt_status move_moments(vkt_trainer *t, uint32_t s, char *stage_blob, char *whole,
                               int to_whole)
{
    const graph_split *sp = pipe_split(t->pipe);
    const graph_stage *gs = &sp->stage[s];
    vkt_model *m = pipe_model(t->pipe, 0, s);
    uint64_t hdr = optim_state_header_size(), N = t->grad_count;
    uint64_t n_s = vkt_optimizer_size(pipe_optimizer(t->pipe, 0, s));
    uint32_t k = moments(t);
    for (uint32_t j = 0; j < gs->n_params; j++) {
        graph_node_info p;
        graph_node_info_at(t->graph, gs->params[j], &p);
        uint64_t off_s = 0, off_w = t->pipe_off[p.id], n = p.count;
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

vkt_status trainer_pipe_read_opt(vkt_trainer *t, void *blob, uint64_t bytes)
{
    uint32_t P = pipe_split(t->pipe)->n_stages;
    memset(blob, 0, bytes);
    vkt_status st = VKT_OK;
    int header = 0;
    for (uint32_t s = 0; s < P && st == VKT_OK; s++) {
        vkt_optimizer *o = pipe_optimizer(t->pipe, 0, s);
        if (!o)
            continue; /* no trainable parameters */
        uint64_t size = vkt_optimizer_state_size(o);
        char *sb = malloc(size);
        if (!sb)
            return trainer_fail(t, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
        if ((st = vkt_optimizer_read_state(o, sb, size)) != VKT_OK)
            trainer_fail(t, st, "stage %u: %s", s, vkt_context_errmsg(pipe_context(t->pipe, 0, s)));
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

vkt_status trainer_pipe_write_opt(vkt_trainer *t, const char *path, const void *blob,
                                  uint64_t bytes)
{
    (void)bytes; /* checked against trainer_pipe_opt_size by the caller */
    uint32_t P = pipe_split(t->pipe)->n_stages, D = pipe_copies(t->pipe);
    vkt_status st = VKT_OK;
    for (uint32_t s = 0; s < P && st == VKT_OK; s++) {
        vkt_optimizer *o = pipe_optimizer(t->pipe, 0, s);
        if (!o)
            continue; /* no trainable parameters */
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
            if ((st = vkt_optimizer_write_state(pipe_optimizer(t->pipe, c, s), sb, size)) != VKT_OK)
                trainer_fail(t, st, "checkpoint '%s': stage %u: %s", path, s,
                             vkt_context_errmsg(pipe_context(t->pipe, c, s)));
        free(sb);
    }
    return st;
}

/* ---- inputs ---- */

vkt_status trainer_input_row_bytes(vkt_trainer *t, const vkt_tensor *input, uint64_t *out)
{
    if (!t->pipe)
        return trainer_row_bytes(t->errmsg, t->rep[0].model, input, out);
    int64_t id = graph_node_id(t->graph, input);
    if (id < 0)
        return trainer_fail(t, VKT_ERROR_INVALID_ARGUMENT, "the input tensor does not belong "
                            "to the trainer's graph");
    graph_node_info in;
    graph_node_info_at(t->graph, (uint32_t)id, &in);
    *out = in.row_elems * 4;
    return VKT_OK;
}

/* ---- statistics ---- */

vkt_status vkt_trainer_stage_stats_get(vkt_trainer *t, uint32_t stage,
                                       vkt_pipeline_stage_stats *out)
{
    if (!t || !out)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "vkt_trainer_stage_stats_get: NULL "
                        "argument");
    if (!t->pipe)
        return trainer_fail(t, VKT_ERROR_INVALID_ARGUMENT, "vkt_trainer_stage_stats_get: the "
                            "trainer has no pipeline stages (options.stages, micro_batches)");
    vkt_status st = vkt_pipeline_stage_stats_get(t->pipe, stage, out);
    if (st != VKT_OK)
        trainer_fail(t, st, "%s", vkt_pipeline_errmsg(t->pipe));
    return st;
}
