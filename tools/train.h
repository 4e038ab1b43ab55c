/* train.h - `vkt train`'s options and the pieces its classifier run (cmd_train.c) and
 * its character-level language model run (cmd_train_lm.c) share. */
#ifndef VKT_TOOLS_TRAIN_H
#define VKT_TOOLS_TRAIN_H

#include "models.h"
#include "vkt.h"

typedef struct train_args {
    const char *data, *model, *optimizer, *schedule;
    uint32_t widths[8], n_widths;
    uint32_t epochs, batch, warmup;
    int epochs_given, batch_given;
    uint64_t max_steps, seed;
    float lr, momentum, weight_decay, clip, dropout;
    int quiet;
    uint32_t replicas, staleness, balance;
    int async, bounded, scale_lr;
    double slow_seconds;
    const char *logdir; /* summaries (train_log.h) */
    uint32_t log_every;
    const char *ckpt_dir;       /* --checkpoint-dir: resume from and save into */
    uint64_t save_every;        /* steps between checkpoints (0: not by steps) */
    double save_secs;           /* seconds between checkpoints (0: not by time) */
    uint32_t keep;              /* checkpoints kept */
    /* across processes (mpirun; docs/distributed.md) */
    vkt_world *world;
    double comm_timeout;        /* --comm-timeout: seconds a rank may be late */
    double bucket_mb;           /* --bucket-mb: gradient MiB per allreduce */
    uint32_t check_identical;   /* --check-identical N: compare the ranks every N steps */
    int overlap;                /* --overlap on|off|auto: 1, -1, 0 */
    /* charlm */
    const char *text;
    uint32_t context, width, layers, heads, sample;
    uint64_t eval_every;
    float temperature;
} train_args;

/* The optimizer of the options over `total` steps; 0 (message printed) if invalid. */
int train_optimizer_options(const train_args *a, uint64_t total, vkt_optimizer_options *o);
/* A trainer for the model with the options' replicas and parallel mode. */
vkt_status train_make_trainer(const train_args *a, vkt_instance *inst, const cli_model *m,
                              const vkt_optimizer_options *oo, vkt_trainer **out);
/* Prints each line of a checkpoint call's notes as "vkt: warning: <line><tail>". */
void train_warn_notes(const char *notes, const char *tail);
/* --model charlm (cmd_train_lm.c); returns the exit code. */
int train_charlm(const train_args *a, vkt_instance *inst);

#endif
