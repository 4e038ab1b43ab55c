/* exec_pipe_world.c - the pipeline executor across ranks (exec_pipe.h): each rank holds
 * one stage of one copy (pipe_world.c), so what the facade reads in one unpipelined
 * model's layout (parameters, the optimizer blob: checkpoints, evaluation, read_params)
 * is this rank's stage from its device and the other stages from host copies, which
 * pipe_exec_sync brings up to date after every fit and step: copy 0's ranks (0 .. P-1)
 * each pack their stage's parameters and moments, one allgatherv gives every rank all
 * of them, each unpacks them into the flat layout. The chief then evaluates and writes
 * checkpoints in today's format, as one process would. */
#include <stdlib.h>
#include <string.h>

#include "optim/optim.h"
#include "parallel/exec_pipe.h"

/* Floats of stage s's piece: its parameters (states too), then `moments` arrays over its
 * trained ones, in the order of the split's parameter list. */
static uint64_t piece_floats(const vkt_trainer *t, const graph_stage *gs, uint32_t moments)
{
    uint64_t all = 0, trained = 0;
    for (uint32_t j = 0; j < gs->n_params; j++) {
        graph_node_info p;
        graph_node_info_at(t->graph, gs->params[j], &p);
        all += p.count;
        trained += p.state ? 0 : p.count;
    }
    return all + moments * trained;
}

/* This rank's stage (copy 0) into its piece: parameters from the device, moments from
 * its optimizer's blob (hdr: its header, into the host blob's). */
static vkt_status pack(vkt_trainer *t, uint32_t s, uint32_t moments, float *out)
{
    pipe_exec *pe = pipe_exec_of(t);
    vkt_pipeline *p = pe->engine;
    const graph_stage *gs = &pipe_split(p)->stage[s];
    vkt_status fst = pipe_exec_flush(t); /* the moments after the update due (pipe_flush) */
    if (fst != VKT_OK)
        return fst;
    vkt_optimizer *o = pipe_optimizer(p, 0, s);
    uint64_t size = o ? vkt_optimizer_state_size(o) : 0, hdr = optim_state_header_size();
    char *sb = o ? malloc(size) : NULL;
    if (o && !sb)
        return trainer_fail(t, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    vkt_status st = o ? vkt_optimizer_read_state(o, sb, size) : VKT_OK;
    if (st != VKT_OK)
        trainer_fail(t, st, "stage %u: %s", s, vkt_context_errmsg(pipe_context(p, 0, s)));
    if (st == VKT_OK && o && pe->opt_host) { /* kind and step, over the whole model */
        memcpy(pe->opt_host, sb, hdr);
        optim_state_set_count(pe->opt_host, t->grad_count);
    }
    uint64_t at = 0, n_s = o ? vkt_optimizer_size(o) : 0;
    for (uint32_t j = 0; j < gs->n_params && st == VKT_OK; j++) {
        graph_node_info q;
        graph_node_info_at(t->graph, gs->params[j], &q);
        if ((st = pipe_read_param(p, 0, graph_node_at(t->graph, q.id), out + at, q.count)) !=
            VKT_OK)
            trainer_fail(t, st, "%s", vkt_pipeline_errmsg(p));
        at += q.count;
    }
    for (uint32_t a = 0; a < moments && st == VKT_OK; a++)
        for (uint32_t j = 0; j < gs->n_params && st == VKT_OK; j++) {
            graph_node_info q;
            uint64_t off = 0;
            graph_node_info_at(t->graph, gs->params[j], &q);
            if (q.state)
                continue;
            if (!o || vkt_model_param_offset(pipe_model(p, 0, s), gs->map[q.id], &off) != VKT_OK)
                st = trainer_fail(t, VKT_ERROR_INTERNAL, "stage %u holds no '%s'", s, q.name);
            else
                memcpy(out + at, sb + hdr + (a * n_s + off) * 4, q.count * 4);
            at += q.count;
        }
    free(sb);
    return st;
}

/* Stage s's piece into the host copies, in one unpipelined model's layout. */
static void unpack(vkt_trainer *t, uint32_t s, uint32_t moments, const float *in)
{
    pipe_exec *pe = pipe_exec_of(t);
    const graph_stage *gs = &pipe_split(pe->engine)->stage[s];
    uint64_t at = 0, hdr = optim_state_header_size(), N = t->grad_count;
    for (uint32_t j = 0; j < gs->n_params; j++) {
        graph_node_info q;
        graph_node_info_at(t->graph, gs->params[j], &q);
        memcpy(pe->host + pe->off[q.id], in + at, q.count * 4);
        at += q.count;
    }
    for (uint32_t a = 0; a < moments; a++)
        for (uint32_t j = 0; j < gs->n_params; j++) {
            graph_node_info q;
            graph_node_info_at(t->graph, gs->params[j], &q);
            if (q.state)
                continue;
            if (pe->opt_host)
                memcpy((char *)pe->opt_host + hdr + (a * N + pe->off[q.id]) * 4, in + at,
                       q.count * 4);
            at += q.count;
        }
}

vkt_status pipe_exec_sync(vkt_trainer *t)
{
    pipe_exec *pe = pipe_exec_of(t);
    vkt_pipeline *p = pe->engine;
    vkt_world *w = pipe_world(p);
    if (!w)
        return VKT_OK;
    pe->gen++;
    const graph_split *sp = pipe_split(p);
    uint32_t P = sp->n_stages, R = w->size;
    uint64_t bytes = pipe_layout_opt_size(t);
    if (!pe->opt_host || pe->opt_host_bytes != bytes) {
        free(pe->opt_host);
        pe->opt_host_bytes = 0;
        if (!(pe->opt_host = calloc(1, bytes)))
            return trainer_fail(t, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
        pe->opt_host_bytes = bytes;
    }
    uint32_t moments = (uint32_t)((bytes - optim_state_header_size()) /
                                  (t->grad_count ? t->grad_count * 4 : 1));
    uint64_t *counts = calloc(2 * (uint64_t)R, sizeof *counts), *displs = counts + R, total = 0;
    if (!counts)
        return trainer_fail(t, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    for (uint32_t r = 0; r < R; r++) { /* copy 0's ranks, stage by stage */
        displs[r] = total;
        counts[r] = r < P ? piece_floats(t, &sp->stage[r], moments) : 0;
        total += counts[r];
    }
    float *buf = malloc((total ? total : 1) * sizeof *buf);
    vkt_status st = buf ? VKT_OK : trainer_fail(t, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    /* a local failure cannot be voted on here (the others are in the collective): the
     * piece goes out as it is and the failure is this rank's */
    vkt_status local = st == VKT_OK && w->rank < P ? pack(t, w->rank, moments, buf + displs[w->rank])
                                                   : VKT_OK;
    if (st == VKT_OK &&
        (st = world_allgatherv_f32(w, buf, counts, displs, "the stages' parameters")) != VKT_OK)
        trainer_fail(t, st, "%s", vkt_world_errmsg(w));
    for (uint32_t s = 0; s < P && st == VKT_OK && local == VKT_OK; s++)
        unpack(t, s, moments, buf + displs[s]);
    free(buf);
    free(counts);
    if (st == VKT_OK) { /* async copies: the world's staleness, every rank's pushes (sync:
                           zeros, no collective) */
        if ((st = pipe_staleness_gather(p)) != VKT_OK)
            return trainer_fail(t, st, "%s", vkt_pipeline_errmsg(p));
        vkt_trainer_stats *ts = &t->stats;
        pipe_staleness(p, UINT32_MAX, &ts->staleness_mean, &ts->staleness_p99,
                       &ts->staleness_max, &ts->updates);
    }
    return st != VKT_OK ? st : local;
}

vkt_status pipe_world_predict(vkt_trainer *t, const vkt_feed *feeds, uint32_t n_feeds,
                              uint32_t rows, const vkt_tensor *output, float *out)
{
    return trainer_predict_chunks(t, feeds, n_feeds, rows, output, out, t->opt.batch);
}
