/* Evaluation: forward-only models sharing the training model's parameters, run over
 * any number of rows in fixed-size chunks (the last one padded). */
#include "parallel/exec.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The evaluation model computing `output` for `batch` rows where the executor keeps them
 * (exec_ops.eval_place), made on first use; loaded with the parameters first when it
 * does not share them. */
vkt_status trainer_eval_model(vkt_trainer *t, const vkt_tensor *output, uint32_t batch,
                              vkt_model **out)
{
    replica *r = &t->rep[0];
    vkt_status fst = t->exec->flush ? t->exec->flush(t) : VKT_OK; /* the parameters now */
    if (fst != VKT_OK)
        return fst;
    for (uint32_t i = 0; i < r->n_eval; i++)
        if (r->eval[i].output == output && r->eval[i].batch == batch) {
            *out = r->eval[i].model;
            return t->exec->eval_load ? t->exec->eval_load(t, *out) : VKT_OK;
        }
    if (r->n_eval == TRAINER_MAX_EVAL)
        return trainer_fail(t, VKT_ERROR_LIMIT,
                            "at most %d evaluation models (different outputs or batches)",
                            TRAINER_MAX_EVAL);
    if (graph_node_id(t->graph, output) < 0)
        return trainer_fail(t, VKT_ERROR_INVALID_ARGUMENT,
                            "the output tensor does not belong to the trainer's graph");
    vkt_keep(t->graph, (vkt_tensor *)output); /* computed and readable in eval models */
    vkt_context *ctx = NULL;
    vkt_model *share = NULL, *m = NULL;
    t->exec->eval_place(t, &ctx, &share);
    vkt_model_options mo = {.batch = batch, .forward_only = 1, .share_params = share};
    vkt_status st = trainer_precision_on(t, ctx, &mo.precision); /* as it trains */
    if (st != VKT_OK)
        return st;
    st = vkt_model_create(ctx, t->graph, NULL, &mo, &m);
    if (st != VKT_OK)
        return trainer_fail(t, st, "evaluation model: %s", vkt_last_error());
    r->eval[r->n_eval++] = (eval_model){output, batch, m};
    *out = m;
    return t->exec->eval_load ? t->exec->eval_load(t, m) : VKT_OK;
}

vkt_status vkt_trainer_predict(vkt_trainer *t, const vkt_feed *feeds, uint32_t n_feeds,
                               uint32_t rows, const vkt_tensor *output, float *out)
{
    if (!t || !out || !output)
        return err_fail(t ? t->errmsg : NULL, VKT_ERROR_INVALID_ARGUMENT,
                        "vkt_trainer_predict: NULL argument");
    int handled = 0; /* through the holders (a pipeline's stages) */
    if (t->exec->predict) {
        vkt_status ps = t->exec->predict(t, feeds, n_feeds, rows, output, out, &handled);
        if (handled)
            return ps;
    }
    return trainer_predict_chunks(t, feeds, n_feeds, rows, output, out, TRAINER_EVAL_BATCH);
}

vkt_status trainer_predict_chunks(vkt_trainer *t, const vkt_feed *feeds, uint32_t n_feeds,
                                  uint32_t rows, const vkt_tensor *output, float *out,
                                  uint32_t batch)
{
    vkt_model *m = NULL;
    vkt_status st = trainer_eval_model(t, output, batch, &m);
    uint64_t row_bytes = 0;
    if (st == VKT_OK)
        st = trainer_row_bytes(t->errmsg, m, output, &row_bytes);
    float *chunk = NULL;
    if (st == VKT_OK && !(chunk = malloc(batch * row_bytes)))
        st = trainer_fail(t, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    for (uint32_t row0 = 0; st == VKT_OK && row0 < rows; row0 += batch) {
        uint32_t n = rows - row0 < batch ? rows - row0 : batch;
        st = trainer_feed(t->errmsg, m, feeds, n_feeds, row0, n, batch);
        if (st == VKT_OK && (st = vkt_model_forward(m)) != VKT_OK)
            st = trainer_from_model(t, m, st);
        if (st == VKT_OK &&
            (st = vkt_model_read(m, output, chunk, batch * row_bytes / 4)) != VKT_OK)
            st = trainer_from_model(t, m, st);
        if (st == VKT_OK)
            memcpy((char *)out + (uint64_t)row0 * row_bytes, chunk, n * row_bytes);
    }
    free(chunk);
    return st;
}

double trainer_nll(const float *z, uint32_t classes, uint32_t label, uint32_t *argmax)
{
    uint32_t best = 0;
    for (uint32_t c = 1; c < classes; c++)
        best = z[c] > z[best] ? c : best;
    double sum = 0;
    for (uint32_t c = 0; c < classes; c++)
        sum += exp((double)z[c] - z[best]);
    if (argmax)
        *argmax = best;
    return log(sum) - ((double)z[label] - z[best]);
}

vkt_status vkt_trainer_evaluate(vkt_trainer *t, const vkt_dataset *data,
                                const vkt_tensor *input, const vkt_tensor *logits,
                                vkt_eval_result *out)
{
    if (!t || !data || !input || !logits || !out)
        return err_fail(t ? t->errmsg : NULL, VKT_ERROR_INVALID_ARGUMENT,
                        "vkt_trainer_evaluate: NULL argument");
    memset(out, 0, sizeof *out);
    uint32_t n = vkt_dataset_count(data), classes = vkt_dataset_classes(data);
    vkt_shape s = vkt_tensor_shape(logits);
    if (s.ndim != 2 || s.dims[1] != classes || classes == 0)
        return trainer_fail(t, VKT_ERROR_SHAPE,
                            "vkt_trainer_evaluate: logits must be [B, %u] for a data set of %u "
                            "classes", classes, classes);
    float *z = malloc((uint64_t)n * classes * sizeof *z);
    if (!z)
        return trainer_fail(t, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    vkt_feed feed = {input, vkt_dataset_x(data)};
    vkt_status st = vkt_trainer_predict(t, &feed, 1, n, logits, z);
    if (st == VKT_OK) {
        const int32_t *y = vkt_dataset_y(data);
        double loss = 0;
        uint32_t right = 0;
        for (uint32_t i = 0; i < n; i++) {
            uint32_t best;
            loss += trainer_nll(z + (uint64_t)i * classes, classes, (uint32_t)y[i], &best);
            right += best == (uint32_t)y[i];
        }
        out->loss = (float)(loss / n);
        out->accuracy = (float)right / (float)n;
        out->count = n;
    }
    free(z);
    return st;
}
