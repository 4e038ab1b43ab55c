/* The collective parts of a trainer across processes: the replica layout over the ranks,
 * the check that every rank built the same model with the same options, the chief's
 * initial parameters to every rank. Each is one small collective that every rank reaches
 * whatever happened locally before it, so a rank that failed makes the others fail
 * (VKT_ERROR_REMOTE naming it) instead of leaving them waiting. */
#include "parallel/exec.h" /* the executor's read_flat and write_flat */

#include "core/hash.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int trainer_is_chief(const vkt_trainer *t) { return !t->world || t->rank == 0; }

void trainer_world_join(vkt_trainer *t, vkt_world *w)
{
    t->rank = 0;
    t->ranks = 1;
    if (w && vkt_world_size(w) > 1) {
        t->world = w;
        t->rank = vkt_world_rank(w);
        t->ranks = vkt_world_size(w);
    }
}

int trainer_world_device(const vkt_trainer *t, uint32_t count, uint32_t *dev)
{
    if (!t->world || plat_getenv("VKT_DEVICES") || count == 0)
        return 0;
    *dev = t->world->local_rank % count; /* ranks sharing a host spread over its GPUs */
    return 1;
}

/* Ranks that reported a failure in slots [0, ranks) of a MIN-reduced vector (0 there);
 * the first into *first. */
static int any_failed(const uint64_t *v, uint32_t ranks, uint32_t *first)
{
    for (uint32_t r = 0; r < ranks; r++)
        if (v[r] == 0) {
            *first = r;
            return 1;
        }
    return 0;
}

/* One allreduce MIN over [alive flags (ranks) | values | ~values]: the flags say who
 * failed, min and max of every value say whether the ranks agree (max = ~min(~x)). */
static vkt_status agree_vector(vkt_trainer *t, vkt_status local, const uint64_t *val,
                               uint32_t n, uint64_t *lo, uint64_t *hi, const char *what)
{
    uint32_t R = t->ranks;
    uint64_t *v = malloc((R + 2 * (size_t)n) * sizeof *v);
    if (!v)
        return trainer_fail(t, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    for (uint32_t r = 0; r < R; r++)
        v[r] = r == t->rank ? local == VKT_OK : 1;
    for (uint32_t i = 0; i < n; i++) {
        v[R + i] = val[i];
        v[R + n + i] = ~val[i];
    }
    char keep[VKT_ERRMSG_SIZE];
    memcpy(keep, t->errmsg, sizeof keep);
    vkt_status st = world_allreduce_u64(t->world, v, R + 2 * (uint64_t)n, WORLD_MIN, what);
    if (st != VKT_OK) {
        free(v);
        return trainer_fail(t, st, "%s", vkt_world_errmsg(t->world));
    }
    uint32_t bad;
    if (any_failed(v, R, &bad)) {
        free(v);
        if (local != VKT_OK) { /* this rank's own message stays */
            memcpy(t->errmsg, keep, sizeof keep);
            return local;
        }
        return trainer_fail(t, VKT_ERROR_REMOTE, "rank %u failed during %s (its message is in "
                            "its output)", bad, what);
    }
    for (uint32_t i = 0; i < n; i++) {
        lo[i] = v[R + i];
        hi[i] = ~v[R + n + i];
    }
    free(v);
    return VKT_OK;
}

vkt_status trainer_world_layout(vkt_trainer *t, uint32_t n_local, vkt_status local)
{
    if (!t->world)
        return local;
    uint32_t R = t->ranks;
    uint64_t *count = calloc(R, sizeof *count), *lo = calloc(R, sizeof *lo),
             *hi = calloc(R, sizeof *hi);
    vkt_status st = count && lo && hi ? VKT_OK
                                      : trainer_fail(t, VKT_ERROR_OUT_OF_MEMORY, "out of memory");
    /* slot r holds rank r's count on rank r and 0 elsewhere: the max is every count */
    if (st == VKT_OK) {
        count[t->rank] = n_local;
        st = agree_vector(t, local, count, R, lo, hi, "trainer creation (replica layout)");
    }
    if (st == VKT_OK) {
        t->world_rep = 0;
        t->rep_base = 0;
        for (uint32_t r = 0; r < R; r++) {
            if (r < t->rank)
                t->rep_base += (uint32_t)hi[r];
            t->world_rep += (uint32_t)hi[r];
        }
        if (t->world_rep > 1u << 20)
            st = trainer_fail(t, VKT_ERROR_INVALID_ARGUMENT, "%u replicas over %u ranks: too "
                              "many", t->world_rep, R);
    }
    free(count);
    free(lo);
    free(hi);
    return st;
}

/* The facts every rank must share: everything that shapes the collectives of a step or
 * what their sums mean. Each is a number (shown in the message), a float's bits (shown as
 * the float) or a hash (not shown), with the name the message gives it. */
enum { SIG_PARAMS, SIG_COUNT, SIG_BATCH, SIG_GRAPH, SIG_MODE, SIG_OPTIMIZER, SIG_NESTEROV,
       SIG_LR, SIG_MOMENTUM, SIG_WEIGHT_DECAY, SIG_CLIP, SIG_BETA1, SIG_BETA2, SIG_EPS,
       SIG_GRAD_SCALE, SIG_SCHEDULE, SIG_STEP_SIZE, SIG_GAMMA, SIG_WARMUP, SIG_TOTAL,
       SIG_MIN_LR, SIG_STALENESS, SIG_BUCKET, SIG_SCALE_LR, SIG_SCALE_WARMUP, SIG_CHECK,
       SIG_GUARD, SIG_PRECISION, SIG_LOSS_SCALE, SIG_SCALE_INTERVAL, SIG_SKIPS, SIG_STAGES,
       SIG_MICRO, SIG_SPLIT, SIG_N };
enum { SHOW_HASH, SHOW_NUMBER, SHOW_FLOAT, SHOW_OPTIMIZER, SHOW_SCHEDULE };
static const struct {
    const char *name;
    int show;
} sig_fact[SIG_N] = {
    [SIG_PARAMS] = {"the model's parameters (names and shapes)", SHOW_HASH},
    [SIG_COUNT] = {"the number of parameters", SHOW_NUMBER},
    [SIG_BATCH] = {"the global batch (--batch)", SHOW_NUMBER},
    [SIG_GRAPH] = {"the model's ops and shapes", SHOW_HASH},
    [SIG_MODE] = {"the parallel mode (--mode)", SHOW_NUMBER},
    [SIG_OPTIMIZER] = {"the optimizer (--optimizer)", SHOW_OPTIMIZER},
    [SIG_NESTEROV] = {"Nesterov momentum (--optimizer nesterov)", SHOW_NUMBER},
    [SIG_LR] = {"the learning rate (--lr)", SHOW_FLOAT},
    [SIG_MOMENTUM] = {"the momentum (--momentum)", SHOW_FLOAT},
    [SIG_WEIGHT_DECAY] = {"the weight decay (--weight-decay)", SHOW_FLOAT},
    [SIG_CLIP] = {"gradient clipping (--clip)", SHOW_FLOAT},
    [SIG_BETA1] = {"Adam's beta1", SHOW_FLOAT},
    [SIG_BETA2] = {"Adam's beta2", SHOW_FLOAT},
    [SIG_EPS] = {"Adam's eps", SHOW_FLOAT},
    [SIG_GRAD_SCALE] = {"the optimizer's grad_scale", SHOW_FLOAT},
    [SIG_SCHEDULE] = {"the learning-rate schedule (--schedule)", SHOW_SCHEDULE},
    [SIG_STEP_SIZE] = {"the step schedule's step_size (--steps, --epochs)", SHOW_NUMBER},
    [SIG_GAMMA] = {"the step schedule's gamma", SHOW_FLOAT},
    [SIG_WARMUP] = {"the warmup steps (--warmup)", SHOW_NUMBER},
    [SIG_TOTAL] = {"the schedule's total steps (--steps, --epochs)", SHOW_NUMBER},
    [SIG_MIN_LR] = {"the schedule's min_lr", SHOW_FLOAT},
    [SIG_STALENESS] = {"the staleness bound (--staleness; 18446744073709551615: none)",
                       SHOW_NUMBER},
    [SIG_BUCKET] = {"the bucket size in bytes (--bucket-mb)", SHOW_NUMBER},
    [SIG_SCALE_LR] = {"learning-rate scaling (--scale-lr)", SHOW_NUMBER},
    [SIG_SCALE_WARMUP] = {"the learning-rate scaling's warmup (--warmup)", SHOW_NUMBER},
    [SIG_CHECK] = {"the parameter check's interval (check_identical, --check-identical)",
                   SHOW_NUMBER},
    [SIG_GUARD] = {"the divergence guard's limit (--max-growth)", SHOW_FLOAT},
    [SIG_PRECISION] = {"the precision (--precision: fp32 0, fp16 1, bf16 2, auto 3)",
                       SHOW_NUMBER},
    [SIG_LOSS_SCALE] = {"fp16's initial loss scale (loss_scale)", SHOW_FLOAT},
    [SIG_SCALE_INTERVAL] = {"the loss scale's growth interval (loss_scale_interval)",
                            SHOW_NUMBER},
    [SIG_SKIPS] = {"the non-finite steps skipped in a row (--skip-nonfinite)", SHOW_NUMBER},
    [SIG_STAGES] = {"the pipeline stages (--pipeline)", SHOW_NUMBER},
    [SIG_MICRO] = {"the micro-batches (--micro-batches)", SHOW_NUMBER},
    [SIG_SPLIT] = {"the split of the model into stages (--split)", SHOW_HASH},
};

static uint64_t float_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static void signature(const vkt_trainer *t, uint64_t *sig)
{
    uint64_t params, ops;
    graph_signature(t->graph, &ops, &params);
    const vkt_optimizer_options *o = &t->optim;
    sig[SIG_PARAMS] = params;
    sig[SIG_COUNT] = t->param_count;
    sig[SIG_GRAPH] = ops;
    sig[SIG_BATCH] = t->opt.batch;
    sig[SIG_MODE] = (uint64_t)t->opt.mode;
    sig[SIG_OPTIMIZER] = (uint64_t)o->kind;
    sig[SIG_NESTEROV] = (uint64_t)o->nesterov;
    sig[SIG_LR] = float_bits(o->lr);
    sig[SIG_MOMENTUM] = float_bits(o->momentum);
    sig[SIG_WEIGHT_DECAY] = float_bits(o->weight_decay);
    sig[SIG_CLIP] = float_bits(o->clip_norm);
    sig[SIG_BETA1] = float_bits(o->beta1);
    sig[SIG_BETA2] = float_bits(o->beta2);
    sig[SIG_EPS] = float_bits(o->eps);
    sig[SIG_GRAD_SCALE] = float_bits(o->grad_scale);
    sig[SIG_SCHEDULE] = (uint64_t)o->schedule;
    sig[SIG_STEP_SIZE] = o->step_size;
    sig[SIG_GAMMA] = float_bits(o->gamma);
    sig[SIG_WARMUP] = o->warmup_steps;
    sig[SIG_TOTAL] = o->total_steps;
    sig[SIG_MIN_LR] = float_bits(o->min_lr);
    sig[SIG_STALENESS] = t->opt.bounded_staleness ? t->opt.staleness : UINT64_MAX;
    sig[SIG_BUCKET] = t->opt.bucket_bytes;
    sig[SIG_SCALE_LR] = (uint64_t)t->opt.scale_lr;
    sig[SIG_SCALE_WARMUP] = t->opt.scale_lr_warmup;
    sig[SIG_CHECK] = t->opt.check_identical;
    /* every rank's save checks its own copy: the same rule everywhere */
    sig[SIG_GUARD] = float_bits(t->opt.divergence_growth);
    sig[SIG_PRECISION] = (uint64_t)t->opt.precision;
    sig[SIG_LOSS_SCALE] = float_bits(t->opt.loss_scale);
    sig[SIG_SCALE_INTERVAL] = t->opt.loss_scale_interval;
    sig[SIG_SKIPS] = t->opt.nonfinite_skips;
    sig[SIG_STAGES] = t->opt.stages;
    sig[SIG_MICRO] = t->opt.micro_batches;
    sig[SIG_SPLIT] = t->split_hash; /* 0 without stages */
}

/* The first fact on which the ranks differ, or -1. */
static int first_difference(const uint64_t *lo, const uint64_t *hi, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        if (lo[i] != hi[i])
            return (int)i;
    return -1;
}

/* "the ranks disagree on WHAT (LO on some ranks, HI on others)": numbers as numbers, a
 * float's bits as the float, a hash without values. */
static vkt_status refuse_difference(vkt_trainer *t, const char *what, uint64_t lo, uint64_t hi,
                                    int show)
{
    char values[96] = "";
    if (show == SHOW_OPTIMIZER || show == SHOW_SCHEDULE) {
        const char *a = show == SHOW_OPTIMIZER ? vkt_optimizer_kind_name((vkt_optimizer_kind)lo)
                                               : vkt_schedule_kind_name((vkt_schedule_kind)lo);
        const char *b = show == SHOW_OPTIMIZER ? vkt_optimizer_kind_name((vkt_optimizer_kind)hi)
                                               : vkt_schedule_kind_name((vkt_schedule_kind)hi);
        snprintf(values, sizeof values, " (%s on some ranks, %s on others)", a, b);
    } else if (show == SHOW_NUMBER)
        snprintf(values, sizeof values, " (%llu on some ranks, %llu on others)",
                 (unsigned long long)lo, (unsigned long long)hi);
    else if (show == SHOW_FLOAT) {
        float f[2];
        uint32_t u[2] = {(uint32_t)lo, (uint32_t)hi};
        memcpy(f, u, sizeof f);
        snprintf(values, sizeof values, " (%.7g on some ranks, %.7g on others)", (double)f[0],
                 (double)f[1]);
    }
    return trainer_fail(t, VKT_ERROR_INVALID_ARGUMENT, "the ranks disagree on %s%s: start "
                        "every rank with the same command and data", what, values);
}

/* The chief's parameters (and states) into every replica (or stage) of every rank, in
 * one unpipelined model's layout (the executor's read_flat and write_flat). */
static vkt_status broadcast_params(vkt_trainer *t)
{
    float *p = malloc((t->param_count ? t->param_count : 1) * sizeof *p);
    if (!p)
        return trainer_fail(t, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    vkt_status st = t->exec->read_flat(t, 0, p, t->param_count);
    /* a local failure here cannot be voted on (the collective below is under way on the
     * others): the deadline ends it */
    if (st == VKT_OK &&
        (st = world_bcast(t->world, p, t->param_count * sizeof *p, "the initial parameters")) !=
            VKT_OK)
        trainer_fail(t, st, "%s", vkt_world_errmsg(t->world));
    if (st == VKT_OK)
        st = t->exec->write_flat(t, p, t->param_count);
    free(p);
    return st;
}

vkt_status trainer_world_agree(vkt_trainer *t, vkt_status local)
{
    if (!t->world)
        return local;
    uint64_t sig[SIG_N] = {0}, lo[SIG_N], hi[SIG_N];
    if (local == VKT_OK)
        signature(t, sig);
    vkt_status st = agree_vector(t, local, sig, SIG_N, lo, hi, "trainer creation");
    if (st != VKT_OK)
        return st;
    int d = first_difference(lo, hi, SIG_N);
    if (d >= 0)
        return refuse_difference(t, sig_fact[d].name, lo[d], hi[d], sig_fact[d].show);
    return broadcast_params(t);
}

uint64_t trainer_hash(const void *data, size_t n) { return core_fnv_words(CORE_FNV0, data, n); }

/* A data set's fingerprint: its size and a hash of every sample and label. */
static uint64_t data_hash(const vkt_dataset *d)
{
    uint32_t n = vkt_dataset_count(d), f = vkt_dataset_features(d);
    uint64_t h = core_fnv(core_fnv(CORE_FNV0, &n, sizeof n), &f, sizeof f);
    const float *x = vkt_dataset_x(d);
    const int32_t *y = vkt_dataset_y(d);
    if (x)
        h = core_fnv_words(h, x, (size_t)n * f * sizeof *x);
    if (y)
        h = core_fnv_words(h, y, (size_t)n * sizeof *y);
    return h;
}

vkt_status trainer_world_check_fit(vkt_trainer *t, vkt_status local, uint64_t steps)
{
    enum { F_DATA, F_SEED, F_STEPS, F_POSITION, F_N };
    static const char *const name[F_N] = {"the training data (--data)", "the seed (--seed)",
                                          "the number of steps (--steps, --epochs)",
                                          "the step count restored from a checkpoint"};
    uint64_t v[F_N] = {0}, lo[F_N], hi[F_N];
    if (!t->world)
        return local;
    if (local == VKT_OK) {
        v[F_DATA] = data_hash(t->data);
        v[F_SEED] = t->seed;
        v[F_STEPS] = steps;
        v[F_POSITION] = t->steps;
    }
    vkt_status st = agree_vector(t, local, v, F_N, lo, hi, "the start of training");
    if (st != VKT_OK)
        return st;
    int d = first_difference(lo, hi, F_N);
    return d < 0 ? VKT_OK
                 : refuse_difference(t, name[d], lo[d], hi[d],
                                     d == F_DATA ? SHOW_HASH : SHOW_NUMBER);
}

vkt_status trainer_world_check_step(vkt_trainer *t, const vkt_feed *feeds, uint32_t n_feeds)
{
    enum { S_FEEDS, S_DATA, S_POSITION, S_N };
    static const char *const name[S_N] = {
        "the number of feeds of vkt_trainer_step",
        "the first step's global batch (vkt_trainer_step's feeds: the data or the seed that "
        "draws them differ)",
        "the step count (a checkpoint restored on some ranks only?)"};
    uint64_t v[S_N] = {n_feeds, CORE_FNV0, t->steps}, lo[S_N], hi[S_N];
    if (!t->world)
        return VKT_OK;
    vkt_status local = n_feeds && !feeds ? trainer_fail(t, VKT_ERROR_INVALID_ARGUMENT,
                                                        "vkt_trainer_step: feeds is NULL")
                                         : VKT_OK;
    /* every rank feeds the whole global batch: `batch` rows of each input */
    for (uint32_t i = 0; local == VKT_OK && i < n_feeds; i++) {
        uint64_t row = 0;
        local = trainer_input_row_bytes(t, feeds[i].tensor, &row);
        if (local == VKT_OK && !feeds[i].data)
            local = trainer_fail(t, VKT_ERROR_INVALID_ARGUMENT, "vkt_trainer_step: feed %u's "
                                 "data is NULL", i);
        if (local == VKT_OK)
            v[S_DATA] = core_fnv_words(v[S_DATA], feeds[i].data, row * t->opt.batch);
    }
    vkt_status st = agree_vector(t, local, v, S_N, lo, hi, "the first step");
    if (st != VKT_OK)
        return st;
    int d = first_difference(lo, hi, S_N);
    return d < 0 ? VKT_OK
                 : refuse_difference(t, name[d], lo[d], hi[d],
                                     d == S_DATA ? SHOW_HASH : SHOW_NUMBER);
}

vkt_status trainer_world_bcast(vkt_trainer *t, void *buf, uint64_t n)
{
    vkt_status st = world_bcast(t->world, buf, n, "a checkpoint from the chief");
    return st == VKT_OK ? st : trainer_fail(t, st, "%s", vkt_world_errmsg(t->world));
}
