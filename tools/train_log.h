/* train_log.h - the summaries `vkt train --logdir DIR` writes (tools/train_log.c): the
 * chief's scalars every N steps to a TensorBoard event file and a CSV file (vkt.h,
 * "Summaries"). Tags:
 *   train/loss                 mean batch loss over the steps since the last record
 *   train/learning_rate        of the step's update (schedule, and --scale-lr's factor)
 *   train/samples_per_second   global samples per wall second since the last record
 *   test/accuracy, test/loss   at every epoch's end and at the end of training
 *   async/staleness_mean, async/staleness_max   at the end of an async run (the trainer
 *                              computes staleness once its replicas have stopped)
 * A write failure is reported once on stderr; training goes on without summaries. */
#ifndef VKT_TRAIN_LOG_H
#define VKT_TRAIN_LOG_H

#include "vkt.h"

typedef struct train_log {
    vkt_summary *w;                 /* NULL: no summaries */
    uint32_t every;                 /* record every N steps (and the last) */
    uint32_t batch, replicas, scale_lr_warmup;
    int scale_lr;
    vkt_optimizer_options opt;
    uint64_t last_step;             /* step of the last record */
    double last_time, loss_sum;     /* monotonic seconds at it; losses since */
} train_log;

/* Opens the writer in logdir (NULL: summaries off; returns 1). Returns 0 after
 * printing the error. `t0` is the monotonic time training starts. */
int train_log_open(train_log *l, const char *logdir, uint32_t every, uint32_t batch,
                   uint32_t replicas, int scale_lr, uint32_t scale_lr_warmup,
                   const vkt_optimizer_options *opt, double t0, int quiet);
/* After every step (1 = the first); writes when step % every == 0 or step == total. */
void train_log_step(train_log *l, uint64_t step, uint64_t total, float loss, double now);
void train_log_eval(train_log *l, uint64_t step, const vkt_eval_result *ev);
void train_log_async(train_log *l, uint64_t step, const vkt_trainer_stats *st);
void train_log_close(train_log *l);

#endif
