/* vkt_trainer_fit: training on a data set, in either mode: the data loop of the sync
 * replicas (and of the pipeline's driver), the exchange's jobs for async replicas. */
#include "parallel/exec.h"

#include <stdlib.h>
#include <string.h>

#include "data/data.h"

/* The prefetch threads stop reading the data set when a fit returns (the caller may
 * free it before the next fit); the next batch taken resumes them. */
static void pause_loaders(vkt_trainer *t)
{
    for (uint32_t i = 0; i < t->n_rep; i++)
        loader_pause(t->rep[i].loader);
}

static vkt_status ensure_loader(replica *r)
{
    vkt_trainer *t = r->t;
    if (r->loader)
        return VKT_OK;
    uint32_t f = vkt_dataset_features(t->data);
    /* batches prepared ahead in the background while the device computes */
    vkt_loader_options lo = {.batch = t->opt.batch, .seed = t->seed, .prefetch = 3};
    vkt_status st = vkt_loader_create(t->data, &lo, &r->loader);
    if (st != VKT_OK)
        return replica_fail(r, st, "%s", vkt_last_error());
    if (t->resume_pending && t->resume_seed == t->seed && /* restored from a checkpoint */
        (st = vkt_loader_seek(r->loader, t->resume_epoch, t->resume_batch)) != VKT_OK)
        return replica_fail(r, st, "%s", vkt_last_error());
    r->x = malloc((uint64_t)t->opt.batch * f * sizeof *r->x);
    r->y = malloc(t->opt.batch * sizeof *r->y);
    if (!r->x || !r->y)
        return replica_fail(r, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    return VKT_OK;
}

int trainer_progress(replica *r, uint64_t k, float loss)
{
    vkt_trainer *t = r->t;
    t->live = 1; /* a checkpoint saved from the callback records this step */
    t->live_steps = t->steps + k + 1;
    int stop = t->progress(t->progress_user, t->steps + k + 1, t->steps + t->run_steps, loss);
    t->live = 0;
    if (!t->guard_tripped)
        return stop != 0;
    t->guard_tripped = 0; /* the guard refused a save: training diverged */
    replica_fail(r, VKT_ERROR_DIVERGED, "%s; a checkpoint of it was refused and training "
                 "stopped (a smaller learning rate or gradient clipping may help)",
                 t->guard_msg);
    return 1;
}

vkt_status trainer_next_batch(replica *r)
{
    vkt_trainer *t = r->t;
    uint32_t rows;
    vkt_status st = ensure_loader(r);
    double t0 = plat_now();
    if (st == VKT_OK)
        vkt_loader_position(r->loader, &r->batch_epoch, &r->batch_index);
    if (st == VKT_OK && (st = vkt_loader_next(r->loader, r->x, r->y, &rows)) != VKT_OK)
        return replica_fail(r, st, "%s", vkt_last_error());
    r->stats.data_wait_seconds += plat_now() - t0; /* waiting + copying the ready batch */
    vkt_feed feeds[2] = {{t->in_x, r->x}, {t->in_y, r->y}};
    if (st == VKT_OK) { /* the replica's rows into its model (a pipeline keeps them) */
        t->exec->feed(r, feeds, 2);
        st = r->status;
    }
    return st;
}

double trainer_mean_loss(const vkt_trainer *t)
{
    return t->rd ? t->rd->ops->mean_loss(t->rd) : reduce_local_loss(t);
}

void trainer_job_feeds(replica *r)
{
    vkt_trainer *t = r->t;
    t->exec->feed(r, t->feeds, t->n_feeds);
    t->exec->step(r, t->steps);
}

/* Replicas agree before every step whether to take it: a failure anywhere or a stop
 * asked by the progress callback ends the run for all at the same step. */
static int agree_to_go_on(replica *r)
{
    vkt_trainer *t = r->t;
    int vote = r->status != VKT_OK || (r->index == 0 && t->stop);
    if (t->vote_in_step) /* the step's tail carries the stop: every rank stops there */
        return r->status == VKT_OK;
    return t->rd ? t->rd->ops->go_on(t->rd, r, vote) : !vote;
}

void trainer_job_steps(replica *r)
{
    vkt_trainer *t = r->t;
    for (uint64_t k = 0; k < t->run_steps && agree_to_go_on(r); k++) {
        trainer_next_batch(r);
        if (t->exec->step(r, t->steps + k)) {
            if (t->rd && t->rd->ops->batch_unused(t->rd)) /* a stop before the step */
                trainer_unread_batch(r);
            break;
        }
        if (r->index != 0)
            continue;
        t->stats.steps++;
        if (t->progress && trainer_is_chief(t)) /* across ranks: the chief alone */
            t->stop = trainer_progress(r, k, (float)trainer_mean_loss(t));
    }
}

/* An async replica's job: its exchange's. */
static void job_exchange(replica *r) { r->t->xc->ops->job(r->t->xc, r); }

void trainer_unread_batch(replica *r)
{
    if (r->loader && vkt_loader_seek(r->loader, r->batch_epoch, r->batch_index) != VKT_OK)
        replica_fail(r, VKT_ERROR_INTERNAL, "cannot put the data position back: %s",
                     vkt_last_error());
}

static vkt_status check_data(vkt_trainer *t, const vkt_dataset *data, const vkt_tensor *input,
                             const vkt_tensor *labels)
{
    if (!data || !input || !labels)
        return trainer_fail(t, VKT_ERROR_INVALID_ARGUMENT,
                            "vkt_trainer_fit: data set, input and labels are required");
    uint64_t row = 0;
    vkt_status st = trainer_input_row_bytes(t, input, &row);
    if (st != VKT_OK)
        return st;
    if (row / 4 != vkt_dataset_features(data))
        return trainer_fail(t, VKT_ERROR_SHAPE,
                            "vkt_trainer_fit: input '%s' takes %llu features per row but the "
                            "data set has %u", vkt_tensor_name(input),
                            (unsigned long long)(row / 4), vkt_dataset_features(data));
    if (vkt_dataset_count(data) < t->opt.batch)
        return trainer_fail(t, VKT_ERROR_SHAPE,
                            "vkt_trainer_fit: the data set has %u samples, fewer than the batch "
                            "of %u", vkt_dataset_count(data), t->opt.batch);
    return VKT_OK;
}

vkt_status vkt_trainer_fit(vkt_trainer *t, const vkt_dataset *data, const vkt_tensor *input,
                           const vkt_tensor *labels, uint64_t steps, uint64_t seed,
                           vkt_progress_fn progress, void *user)
{
    if (!t)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "vkt_trainer_fit: trainer is NULL");
    vkt_status st = t->lost ? trainer_fail(t, VKT_ERROR_DEVICE_LOST, "%s", t->lost_msg)
                            : check_data(t, data, input, labels);
    const vkt_dataset *was = t->data; /* every rank: the same data, the same position */
    uint64_t was_seed = t->seed;
    t->data = data;
    t->seed = seed;
    st = trainer_world_check_fit(t, st, steps);
    t->data = was;
    t->seed = was_seed;
    if (st != VKT_OK)
        return st;
    if (t->data != data || t->seed != seed) /* a new data stream: new loaders */
        for (uint32_t i = 0; i < t->n_rep; i++) {
            vkt_loader_destroy(t->rep[i].loader);
            t->rep[i].loader = NULL;
        }
    t->data = data;
    t->seed = seed;
    t->in_x = input;
    t->in_y = labels;
    t->run_steps = steps;
    t->progress = progress;
    t->progress_user = user;
    t->stop = 0;
    double t0 = plat_now(), c0 = plat_cpu_time();
    uint64_t done0 = t->rep[0].stats.steps;
    exchange *x = t->xc; /* async replicas */
    if (x && (st = x->ops->begin(x)) != VKT_OK)
        return st;
    uint64_t calibrate = t->opt.balance_after;
    if (t->row->balances && calibrate && !t->balanced && steps > calibrate) {
        t->run_steps = calibrate; /* measure, re-split, then the rest */
        st = trainer_run_all(t, trainer_job_steps);
        t->steps += t->rep[0].stats.steps - done0;
        done0 = t->rep[0].stats.steps;
        t->run_steps = steps - calibrate;
        if (st == VKT_OK && !t->stop)
            st = trainer_balance(t);
        if (st != VKT_OK || t->stop) {
            pause_loaders(t);
            t->stats.step_seconds += plat_now() - t0;
            return st;
        }
    }
    st = trainer_run_all(t, x ? job_exchange : trainer_job_steps);
    pause_loaders(t);
    t->resume_pending = 0; /* a restored data position applies to this run's loaders */
    if (x) {
        vkt_status end = x->ops->end(x);
        if (st == VKT_OK)
            st = end;
        t->stats.steps += t->rep[0].stats.steps - done0;
    }
    t->steps += t->rep[0].stats.steps - done0;
    if (st == VKT_OK && t->exec->sync) /* every rank: the parts others hold, up to date */
        st = t->exec->sync(t);
    t->stats.step_seconds += plat_now() - t0;
    t->stats.host_cpu_seconds += plat_cpu_time() - c0;
    return st;
}
