/* exec_pipe_eval.c - evaluation of a pipelined trainer (exec_pipe.h) through its stages: stage s
 * runs a forward-only model of its sub-graph on copy 0's stage s context, sharing that
 * stage's training parameters; the values it sends are read back and fed to the stages
 * that receive them, a micro-batch of rows at a time. No stage ever holds the whole
 * model, so what trains split also evaluates split. */
#include <stdlib.h>
#include <string.h>

#include "parallel/exec_pipe.h"

typedef struct pipe_eval {
    const vkt_tensor *output; /* of the full graph */
    uint32_t last;            /* the stage computing it */
    uint32_t batch;           /* rows per chunk */
    uint8_t *need;            /* per node of the full graph: output depends on it */
    vkt_model *m[VKT_MAX_STAGES];
} pipe_eval;

void pipe_exec_eval_free(vkt_trainer *t)
{
    pipe_exec *pe = pipe_exec_of(t);
    for (uint32_t e = 0; pe->eval && e < pe->n_eval; e++) {
        for (uint32_t s = 0; s <= pe->eval[e].last; s++)
            vkt_model_destroy(pe->eval[e].m[s]);
        free(pe->eval[e].need);
    }
    free(pe->eval);
    pe->eval = NULL;
    pe->n_eval = 0;
}

/* The chain for `output` (made on first use); NULL with *st VKT_OK when the stages do not
 * compute it. */
static pipe_eval *chain(vkt_trainer *t, const vkt_tensor *output, vkt_status *st)
{
    pipe_exec *pe = pipe_exec_of(t);
    const graph_split *sp = pipe_split(pe->engine);
    *st = VKT_OK;
    int64_t id = graph_node_id(t->graph, output);
    graph_node_info out;
    if (id < 0 || id >= pe->nodes)
        return NULL;
    graph_node_info_at(t->graph, (uint32_t)id, &out);
    if (!out.computed || sp->node_stage[id] == UINT32_MAX)
        return NULL;
    for (uint32_t e = 0; e < pe->n_eval; e++)
        if (pe->eval[e].output == output)
            return &pe->eval[e];
    if (!pe->eval && !(pe->eval = calloc(TRAINER_MAX_EVAL, sizeof *pe->eval))) {
        *st = trainer_fail(t, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
        return NULL;
    }
    if (pe->n_eval == TRAINER_MAX_EVAL) {
        *st = trainer_fail(t, VKT_ERROR_LIMIT, "at most %d evaluation outputs",
                           TRAINER_MAX_EVAL);
        return NULL;
    }
    pipe_eval *e = &pe->eval[pe->n_eval];
    memset(e, 0, sizeof *e);
    e->output = output;
    e->last = sp->node_stage[id];
    if (!(e->need = calloc(pe->nodes, 1))) {
        *st = trainer_fail(t, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
        return NULL;
    }
    graph_mark_needed(t->graph, output, e->need);
    /* one micro-batch of one copy: the rows each stage's training already holds */
    uint32_t D = pipe_copies(pe->engine), m = t->opt.micro_batches ? t->opt.micro_batches : 1;
    e->batch = t->opt.batch / D / m ? t->opt.batch / D / m : 1;
    vkt_keep(sp->stage[e->last].g, sp->stage[e->last].map[id]);
    for (uint32_t s = 0; s <= e->last && *st == VKT_OK; s++) {
        vkt_model_options mo = {.batch = e->batch, .forward_only = 1,
                                .share_params = pipe_model(pe->engine, 0, s)};
        *st = trainer_precision_on(t, pipe_context(pe->engine, 0, s), &mo.precision);
        if (*st != VKT_OK)
            break;
        *st = vkt_model_create(pipe_context(pe->engine, 0, s), sp->stage[s].g, NULL, &mo,
                               &e->m[s]);
        if (*st != VKT_OK)
            trainer_fail(t, *st, "evaluation model of stage %u: %s", s, vkt_last_error());
    }
    if (*st != VKT_OK) {
        for (uint32_t s = 0; s <= e->last; s++)
            vkt_model_destroy(e->m[s]);
        free(e->need);
        return NULL;
    }
    pe->n_eval++;
    return e;
}

/* Rows [row0, row0 + n) of `data` (row_bytes each) into input x of model m, zero-padded to
 * the model's batch. */
static vkt_status put_rows(vkt_trainer *t, vkt_model *m, const vkt_tensor *x, const void *data,
                           uint64_t row_bytes, uint32_t row0, uint32_t n, uint32_t batch,
                           char *buf)
{
    memset(buf + (uint64_t)n * row_bytes, 0, (uint64_t)(batch - n) * row_bytes);
    memcpy(buf, (const char *)data + (uint64_t)row0 * row_bytes, (uint64_t)n * row_bytes);
    vkt_status st = vkt_model_set_input(m, x, buf, (uint64_t)batch * row_bytes / 4);
    return st == VKT_OK ? st : trainer_from_model(t, m, st);
}

/* Stage s's inputs for one chunk: the program's feeds it reads, and the values it receives
 * read from the stages that computed them. */
static vkt_status feed_stage(vkt_trainer *t, pipe_eval *e, uint32_t s, const vkt_feed *feeds,
                             uint32_t n_feeds, uint32_t row0, uint32_t n, char *buf)
{
    const graph_split *sp = pipe_split(pipe_exec_of(t)->engine);
    const graph_stage *gs = &sp->stage[s];
    vkt_status st = VKT_OK;
    for (uint32_t k = 0; k < gs->n_feed && st == VKT_OK; k++) {
        uint32_t id = gs->feed[k];
        const vkt_tensor *x = graph_node_at(t->graph, id);
        if (!e->need[id])
            continue; /* labels of the loss */
        const vkt_feed *f = NULL;
        for (uint32_t i = 0; i < n_feeds && !f; i++)
            f = feeds[i].tensor == x ? &feeds[i] : NULL;
        if (!f || !f->data)
            return trainer_fail(t, VKT_ERROR_INVALID_ARGUMENT, "input '%s' is not fed: "
                                "stage %u reads it", vkt_tensor_name(x), s);
        uint64_t row = 0;
        st = trainer_row_bytes(t->errmsg, e->m[s], gs->map[id], &row);
        if (st == VKT_OK)
            st = put_rows(t, e->m[s], gs->map[id], f->data, row, row0, n, e->batch, buf);
    }
    for (uint32_t k = 0; k < gs->n_recv && st == VKT_OK; k++) {
        uint32_t id = gs->recv[k], from = sp->node_stage[id];
        if (!e->need[id])
            continue;
        const vkt_tensor *v = sp->stage[from].map[id];
        uint64_t row = 0;
        st = trainer_row_bytes(t->errmsg, e->m[from], v, &row);
        if (st == VKT_OK &&
            (st = vkt_model_read(e->m[from], v, (float *)buf, e->batch * row / 4)) != VKT_OK)
            st = trainer_from_model(t, e->m[from], st);
        if (st == VKT_OK && (st = vkt_model_set_input(e->m[s], gs->map[id], buf,
                                                      e->batch * row / 4)) != VKT_OK)
            st = trainer_from_model(t, e->m[s], st);
    }
    return st;
}

/* The largest row of any value a chunk moves (feeds, received values, the output). */
static uint64_t max_row_bytes(const vkt_trainer *t)
{
    uint64_t most = 4;
    for (uint32_t i = 0; i < pipe_exec_of(t)->nodes; i++) {
        graph_node_info in;
        graph_node_info_at(t->graph, i, &in);
        most = 4 * in.row_elems > most ? 4 * in.row_elems : most;
    }
    return most;
}

vkt_status pipe_exec_predict(vkt_trainer *t, const vkt_feed *feeds, uint32_t n_feeds,
                             uint32_t rows, const vkt_tensor *output, float *out, int *handled)
{
    vkt_status st = VKT_OK;
    if (pipe_world(pipe_exec_of(t)->engine)) { /* across ranks the stages are not all here: */
        *handled = 1;                           /* the whole graph, on the synced copies */
        return pipe_world_predict(t, feeds, n_feeds, rows, output, out);
    }
    if ((st = pipe_exec_flush(t)) != VKT_OK) { /* the stages' parameters now */
        *handled = 1;
        return st;
    }
    pipe_eval *e = chain(t, output, &st);
    *handled = e != NULL || st != VKT_OK;
    if (!e)
        return st;
    if (n_feeds && !feeds)
        return trainer_fail(t, VKT_ERROR_INVALID_ARGUMENT, "feeds is NULL");
    const graph_stage *last = &pipe_split(pipe_exec_of(t)->engine)->stage[e->last];
    const vkt_tensor *y = last->map[graph_node_id(t->graph, output)];
    uint64_t out_row = 0;
    st = trainer_row_bytes(t->errmsg, e->m[e->last], y, &out_row);
    char *buf = st == VKT_OK ? malloc((uint64_t)e->batch * max_row_bytes(t)) : NULL;
    if (st == VKT_OK && !buf)
        st = trainer_fail(t, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    for (uint32_t row0 = 0; st == VKT_OK && row0 < rows; row0 += e->batch) {
        uint32_t n = rows - row0 < e->batch ? rows - row0 : e->batch;
        for (uint32_t s = 0; s <= e->last && st == VKT_OK; s++) {
            st = feed_stage(t, e, s, feeds, n_feeds, row0, n, buf);
            if (st == VKT_OK && (st = vkt_model_forward(e->m[s])) != VKT_OK)
                st = trainer_from_model(t, e->m[s], st);
        }
        if (st == VKT_OK && (st = vkt_model_read(e->m[e->last], y, (float *)buf,
                                                 e->batch * out_row / 4)) != VKT_OK)
            st = trainer_from_model(t, e->m[e->last], st);
        if (st == VKT_OK)
            memcpy((char *)out + (uint64_t)row0 * out_row, buf, (uint64_t)n * out_row);
    }
    free(buf);
    return st;
}
