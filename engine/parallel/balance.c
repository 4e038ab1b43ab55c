/* Splitting the global batch in proportion to each replica's measured speed (sync), so a
 * mixed set of devices is not held back by the slowest. Each replica's model is compiled
 * for a fixed number of rows, so a new split rebuilds the models whose rows change; the
 * parameters (equal on every replica) and the optimizers (state kept) carry over. */
#include "parallel/exec.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Largest-remainder rounding of batch * speed[i] / sum, every replica at least 1 row. */
static void proportional_rows(const double *speed, uint32_t n, uint32_t batch, uint32_t *rows)
{
    double sum = 0, share[TRAINER_MAX_REPLICAS];
    for (uint32_t i = 0; i < n; i++)
        sum += speed[i];
    uint32_t given = 0;
    for (uint32_t i = 0; i < n; i++) {
        share[i] = (double)(batch - n) * speed[i] / sum; /* n rows are given below */
        rows[i] = 1 + (uint32_t)floor(share[i]);
        share[i] -= floor(share[i]);
        given += rows[i];
    }
    while (given < batch) { /* the largest remainders get the rows left */
        uint32_t best = 0;
        for (uint32_t i = 1; i < n; i++)
            best = share[i] > share[best] ? i : best;
        rows[best]++;
        share[best] = -1;
        given++;
    }
}

static vkt_status rebuild(vkt_trainer *t, replica *r, uint32_t rows, const float *params)
{
    for (uint32_t e = 0; e < r->n_eval; e++) /* they share the old model's parameters */
        vkt_model_destroy(r->eval[e].model);
    r->n_eval = 0;
    vkt_model_destroy(r->model);
    r->model = NULL;
    r->rows = rows;
    r->weight = (float)rows / (float)t->opt.batch;
    vkt_model_options mo = {.batch = rows, .check = t->opt.check, .row_offset = r->row0};
    vkt_status st = trainer_precision_on(t, r->ctx, &mo.precision);
    if (st != VKT_OK)
        return st;
    st = vkt_model_create(r->ctx, t->graph, t->loss, &mo, &r->model);
    if (st != VKT_OK)
        return trainer_fail(t, st, "replica %u: %s", r->index, vkt_last_error());
    if ((st = vkt_model_write_params(r->model, params, t->param_count)) != VKT_OK)
        return trainer_from_model(t, r->model, st);
    return exec_replica_attach(t, r);
}

vkt_status trainer_balance(vkt_trainer *t)
{
    vkt_status fst = apply_flush(t); /* the models are read, then rebuilt */
    if (fst != VKT_OK)
        return fst;
    double speed[TRAINER_MAX_REPLICAS];
    uint32_t rows[TRAINER_MAX_REPLICAS];
    for (uint32_t i = 0; i < t->n_rep; i++) {
        const replica *r = &t->rep[i];
        double per_step = r->stats.steps ? r->stats.step_seconds / r->stats.steps : 0;
        speed[i] = per_step > 0 ? r->rows / per_step : 1.0; /* rows per second */
    }
    proportional_rows(speed, t->n_rep, t->opt.batch, rows);
    t->balanced = 1;
    int same = 1;
    for (uint32_t i = 0; i < t->n_rep; i++)
        same &= rows[i] == t->rep[i].rows;
    if (same)
        return VKT_OK;
    float *params = malloc(t->param_count * sizeof *params);
    if (!params)
        return trainer_fail(t, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    vkt_status st = vkt_model_read_params(t->rep[0].model, params, t->param_count);
    if (st != VKT_OK)
        st = trainer_from_model(t, t->rep[0].model, st);
    uint32_t row0 = 0;
    for (uint32_t i = 0; st == VKT_OK && i < t->n_rep; i++) {
        replica *r = &t->rep[i];
        int moved = r->row0 != row0; /* dropout masks are keyed by the global row */
        r->row0 = row0;
        row0 += rows[i];
        if (rows[i] != r->rows || moved)
            st = rebuild(t, r, rows[i], params);
    }
    free(params);
    return st;
}
