/* train.h - `vkt train`'s options and the pieces its classifier run (cmd_train.c) and
 * its character-level language model run (cmd_train_lm.c) share. */
#ifndef VKT_TOOLS_TRAIN_H
#define VKT_TOOLS_TRAIN_H

#include <stddef.h>
#include <stdio.h>

#include "models.h"
#include "torch_map.h"
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
    float max_growth;           /* --max-growth: the divergence guard's limit (0: none) */
    int precision;              /* --precision: a vkt_precision */
    uint32_t skip_nonfinite;    /* --skip-nonfinite N: skipped steps in a row allowed */
    const char *init_from;      /* --init-from: a safetensors file to start from */
    const char *init_map;       /* --init-map: its name map, a file or "torch" */
    /* across processes (mpirun; docs/distributed.md) */
    vkt_world *world;
    double comm_timeout;        /* --comm-timeout: seconds a rank may be late */
    double bucket_mb;           /* --bucket-mb: gradient MiB per allreduce */
    uint32_t check_identical;   /* --check-identical N: compare the ranks every N steps */
    int overlap;                /* --overlap on|off|auto: 1, -1, 0 */
    const char *sync_option;    /* the first option given that sync replicas alone use */
    /* model parallelism (docs/model_parallel.md) */
    uint32_t pipeline;          /* --pipeline P: stages, split automatically */
    uint32_t micro_batches;     /* --micro-batches m */
    int micro_given;
    const char *lm_option; /* the first "charlm only" option given (NULL: none) */
    int split;                  /* --split auto|time|params: a vkt_split_cost */
    int recompute;              /* --recompute auto|always|never: a vkt_recompute */
    /* charlm */
    const char *text;
    uint32_t context, width, layers, heads, sample;
    int rms_norm;               /* --norm rms: RMSNorm instead of layer normalization */
    int silu;                   /* --act silu: SiLU instead of GELU in the MLPs */
    uint64_t eval_every;
    float temperature;
} train_args;

/* The kinds of option in train_options.c's table. */
typedef enum train_option_type {
    TRAIN_OPT_FLAG,   /* no value: sets an int field to 1 */
    TRAIN_OPT_STRING, /* a const char * field */
    TRAIN_OPT_CHOICE, /* one of choices: the name into a const char * field, or values[i]
                       * into an int field */
    TRAIN_OPT_INT,    /* a whole number in [lo, hi] into a uint32_t or uint64_t field */
    TRAIN_OPT_REAL,   /* a finite number in the range into a float or double field */
    TRAIN_OPT_WIDTHS  /* 1 to 8 whole numbers in [lo, hi], comma-separated: --hidden */
} train_option_type;

/* What each option's value must be across the ranks of an MPI job (train_ranks.c compares
 * them at start-up, before any other collective, and names the option that differs). The
 * default, 0, is SAME: an option added to the table is compared unless it says otherwise. */
typedef enum train_ranks {
    TRAIN_RANKS_SAME = 0, /* the same value on every rank (it shapes the collectives or
                           * what they mean) */
    TRAIN_RANKS_GIVEN,    /* a path only the chief uses: given on every rank or on none
                           * (whether it is given changes the collectives) */
    TRAIN_RANKS_OWN       /* each rank's own: may differ (chief-only output, a per-rank
                           * setting, or a path whose contents are compared where read) */
} train_ranks;

/* One `vkt train` option: parsing and --help both come from the table of these. */
typedef struct train_option {
    const char *name;           /* "--lr" */
    const char *arg;            /* the value's name in --help ("X"); NULL for a flag */
    train_option_type type;
    size_t offset, size;        /* the train_args field it sets */
    double lo, hi;              /* the range of INT, REAL and WIDTHS values */
    int lo_open, hi_open;       /* REAL: the bound itself excluded */
    double scale;               /* REAL: stored as value * scale (0: as given) */
    uint64_t idef;              /* INT default */
    double rdef;                /* REAL default (may lie outside the range: "per model") */
    const char *sdef;           /* CHOICE default (NULL: chosen after parsing) */
    const char *const *choices; /* CHOICE: the accepted names, NULL-terminated */
    const int *values;          /* CHOICE: the int stored for each name (NULL: the name) */
    size_t given;               /* offset + 1 of an int field set to 1 when given; 0: none */
    const char *section;        /* a heading printed before this option in --help */
    const char *help;           /* --help text; the range and default are appended */
    const char *def_note;       /* the default as text, where it is not the field's value */
    train_ranks ranks;          /* across ranks: compared (SAME, the default), or not */
    int sync_only;              /* used by sync replicas alone: refused with async copies,
                                   stages or micro-batches (train_options.c, finish) */
} train_option;

/* The most options the table may hold (train_ranks.c's fixed-size exchange). */
#define TRAIN_MAX_OPTIONS 96

extern const train_option train_options[];
extern const size_t train_option_count;

/* The option named `name` ("--lr"), or NULL. */
const train_option *train_option_find(const char *name);
/* Every field at its table default. */
void train_args_defaults(train_args *a);
/* Parses argv[1..argc-1] into a, then applies the per-model defaults (charlm, cnn) and the
 * checks between options. Returns 0 on success, 2 on a usage error (a message naming the
 * option printed on stderr), 3 after --help (printed on stdout). */
int train_args_parse(int argc, char **argv, train_args *a);
/* The --help text, generated from the table. */
void train_usage(FILE *f);
/* An option's value in `a` as the user would type it ("256,128", "0.9", "cosine", "on"; a
 * string option "(not given)" when absent; a per-model default "default"); for a GIVEN
 * option only "given" or "not given". */
void train_option_text(const train_args *a, const train_option *o, char *buf, size_t n);
/* A hash of the option's name and its value's exact bits in `a` (of whether it is given,
 * for a GIVEN option): equal hashes, equal values. */
uint64_t train_option_hash(const train_args *a, const train_option *o);
/* FNV-1a over n bytes, continuing from h (0: start afresh). */
uint64_t train_hash(uint64_t h, const void *data, size_t n);

/* train_ranks.c, under mpirun (nothing to do in one process): */
/* Every rank's SAME and GIVEN options compared with the chief's (two small collectives,
 * before any other). Returns 0 if they agree; 2 if not, every rank knowing it (the chief
 * and each rank that differs have named the options); 1 if the exchange failed (message
 * printed). */
int train_ranks_agree(const train_args *a);
/* One fact every rank must share (e.g. a hash of the --text file), compared with the
 * chief's; `what` names it ("the contents of --text"). Returns as train_ranks_agree. */
int train_ranks_same(const train_args *a, const char *what, uint64_t value);
/* 1 once train_ranks_agree or train_ranks_same returned 2: every rank stops alike, so
 * none needs to end the job for the others (vkt_world_abort). */
int train_ranks_refused(void);

/* The optimizer of the options over `total` steps; 0 (message printed) if invalid. */
int train_optimizer_options(const train_args *a, uint64_t total, vkt_optimizer_options *o);
/* A trainer for the model with the options' replicas and parallel mode. */
/* "precision fp16 (as asked (products: gemm_f16_widen))": what the trainer's matrix products
 * run in and why (vkt_trainer_precision), for the start line. */
const char *train_precision_text(const vkt_trainer *tr, char *buf, size_t size);
/* "skipped 20 of 200 steps (non-finite gradients); loss scale 1048576", before the result
 * line, when a step was skipped or the loss is scaled (fp16); async replicas: "of N
 * updates of R async replicas", the replicas' skips summed and the smallest scale. */
void train_print_skipped(const vkt_trainer *tr, int async);
/* The start line's mode: "sync", "async", or "async on their shared device's master"
 * (the device exchange: replicas sharing one VkDevice, VKT_SHARE_DEVICE). */
const char *train_mode_text(const vkt_trainer *tr, uint32_t replicas, int async);
vkt_status train_make_trainer(const train_args *a, vkt_instance *inst, const cli_model *m,
                              const vkt_optimizer_options *oo, vkt_trainer **out);
/* With --pipeline or --micro-batches (and not --quiet): each stage's ops, device memory
 * and last step, one line per stage. */
void train_print_stages(const train_args *a, vkt_trainer *tr);
/* The result line's " stages=P micro_batches=M" and " ranks=R", where they apply. */
void train_print_result_tail(const train_args *a);
/* Prints each line of a checkpoint call's notes as "vkt: warning: <line><tail>". */
void train_warn_notes(const char *notes, const char *tail);
/* After training stopped: the signal number of a Ctrl-C, SIGTERM or SIGHUP
 * (vkt_interrupted), the chief's on every rank (a broadcast, so collective across ranks);
 * 0 if none; -1 (message printed) if the ranks could not agree. *flag (may be NULL)
 * travels with it: the chief's value on every rank. */
int train_interrupt_agree(const train_args *a, int *flag);
/* On the chief of several ranks, after the last collective of the run: its heartbeats go
 * on (vkt_world_keepalive) while it saves, evaluates and reports alone, so the others
 * wait for it in finalize however long that takes. */
void train_chief_alone(const train_args *a);
/* The chief prints "vkt: interrupted (SIGINT) at step N: saved checkpoint D/ckpt-N.vkt"
 * (or that none was saved without --checkpoint-dir), after a newline if `newline`.
 * Returns the exit status, 128 + sig. */
int train_interrupted(const train_args *a, int sig, uint64_t step, int newline);
/* train_import.c: --init-from (with --init-map) into the trainer, unless the run
 * `resumed` from a checkpoint (then only a note). Returns 0 (message printed) on failure. */
int train_init_from(const train_args *a, vkt_trainer *tr, const cli_torch_model *tm, int resumed);
/* --model charlm (cmd_train_lm.c); returns the exit code. */
int train_charlm(const train_args *a, vkt_instance *inst);

#endif
