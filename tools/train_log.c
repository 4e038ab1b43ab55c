/* The summaries of vkt train (train_log.h). */
#include "train_log.h"

#include <stdio.h>

#include "cli.h"

int train_log_open(train_log *l, const char *logdir, uint32_t every, uint32_t batch,
                   uint32_t replicas, int scale_lr, uint32_t scale_lr_warmup,
                   const vkt_optimizer_options *opt, double t0, int quiet)
{
    *l = (train_log){.every = every ? every : 1, .batch = batch, .replicas = replicas,
                     .scale_lr = scale_lr, .scale_lr_warmup = scale_lr_warmup, .opt = *opt,
                     .last_time = t0};
    if (!logdir)
        return 1;
    vkt_status st = vkt_summary_create(logdir, &l->w);
    if (st != VKT_OK) {
        cli_fail("cannot write summaries", st, vkt_last_error());
        return 0;
    }
    if (!quiet)
        printf("summaries every %u steps: %s and %s\n", l->every,
               vkt_summary_event_path(l->w), vkt_summary_csv_path(l->w));
    return 1;
}

/* Reports the writer's error once and turns summaries off. */
static void check(train_log *l, vkt_status st)
{
    if (st == VKT_OK || !l->w)
        return;
    cli_fail("summaries stopped", st, vkt_summary_errmsg(l->w));
    vkt_summary_destroy(l->w);
    l->w = NULL;
}

static void scalar(train_log *l, const char *tag, uint64_t step, double value)
{
    if (l->w)
        check(l, vkt_summary_scalar(l->w, tag, step, (float)value));
}

/* The learning rate of update number `update` (0 = the first), as the trainer sets it. */
static double learning_rate(const train_log *l, uint64_t update)
{
    double lr = vkt_schedule_lr(&l->opt, update);
    if (l->scale_lr && l->replicas > 1) {
        double ramp = l->scale_lr_warmup ? (double)update / l->scale_lr_warmup : 1.0;
        lr *= 1.0 + (l->replicas - 1) * (ramp < 1.0 ? ramp : 1.0);
    }
    return lr;
}

void train_log_step(train_log *l, uint64_t step, uint64_t total, float loss, double now)
{
    if (!l->w)
        return;
    l->loss_sum += loss;
    if (step % l->every != 0 && step != total)
        return;
    uint64_t n = step - l->last_step;
    scalar(l, "train/loss", step, n ? l->loss_sum / (double)n : loss);
    scalar(l, "train/learning_rate", step, learning_rate(l, step - 1));
    if (now > l->last_time)
        scalar(l, "train/samples_per_second", step,
               (double)n * l->batch / (now - l->last_time));
    if (l->w)
        check(l, vkt_summary_flush(l->w));
    l->last_step = step;
    l->last_time = now;
    l->loss_sum = 0;
}

void train_log_eval(train_log *l, uint64_t step, const vkt_eval_result *ev)
{
    scalar(l, "test/accuracy", step, ev->accuracy);
    scalar(l, "test/loss", step, ev->loss);
    if (l->w)
        check(l, vkt_summary_flush(l->w));
}

void train_log_async(train_log *l, uint64_t step, const vkt_trainer_stats *st)
{
    if (st->updates == 0)
        return;
    scalar(l, "async/staleness_mean", step, st->staleness_mean);
    scalar(l, "async/staleness_max", step, (double)st->staleness_max);
    if (l->w)
        check(l, vkt_summary_flush(l->w));
}

void train_log_close(train_log *l)
{
    if (l->w)
        check(l, vkt_summary_flush(l->w));
    vkt_summary_destroy(l->w);
    l->w = NULL;
}
