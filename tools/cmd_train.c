/* vkt train: trains a model on an MNIST-style data set and prints the result line
 *   result: test_accuracy=<a> test_loss=<l> steps=<n> samples_per_s=<s> seconds=<t>
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "models.h"
#include "platform/platform.h"
#include "train.h"
#include "train_log.h"

int train_optimizer_options(const train_args *a, uint64_t total, vkt_optimizer_options *o)
{
    memset(o, 0, sizeof *o);
    const char *n = a->optimizer;
    if (strcmp(n, "sgd") == 0) o->kind = VKT_OPTIMIZER_SGD;
    else if (strcmp(n, "momentum") == 0 || strcmp(n, "nesterov") == 0) {
        o->kind = VKT_OPTIMIZER_SGD;
        o->momentum = a->momentum;
        o->nesterov = strcmp(n, "nesterov") == 0;
    } else if (strcmp(n, "adam") == 0) o->kind = VKT_OPTIMIZER_ADAM;
    else if (strcmp(n, "adamw") == 0) o->kind = VKT_OPTIMIZER_ADAMW;
    else {
        fprintf(stderr, "vkt train: unknown optimizer '%s'\n", n);
        return 0;
    }
    int adam = o->kind != VKT_OPTIMIZER_SGD;
    int cnn = strcmp(a->model, "cnn") == 0, lm = strcmp(a->model, "charlm") == 0;
    o->lr = a->lr >= 0 ? a->lr : lm ? 0.003f : adam ? 0.001f : cnn ? 0.1f : 0.2f;
    o->weight_decay = a->weight_decay;
    o->clip_norm = a->clip;
    if (strcmp(a->schedule, "step") == 0) {
        o->schedule = VKT_SCHEDULE_STEP;
        o->step_size = total / 3 ? total / 3 : 1;
        o->gamma = 0.1f;
    } else if (strcmp(a->schedule, "cosine") == 0) {
        o->schedule = VKT_SCHEDULE_WARMUP_COSINE;
        o->warmup_steps = a->warmup;
        o->total_steps = total;
    } else if (strcmp(a->schedule, "constant") != 0) {
        fprintf(stderr, "vkt train: unknown schedule '%s'\n", a->schedule);
        return 0;
    }
    return 1;
}

typedef struct progress {
    int tty, quiet;
    double t0, last;
    uint32_t batch, per_epoch;
    vkt_trainer *tr;
    const vkt_dataset *test;
    const cli_model *m;
    train_log *log;
    uint64_t step0;             /* steps restored from a checkpoint */
    const train_args *a;
    double last_save;
    uint64_t saved_step;        /* the step of the last checkpoint written */
    int save_failed;
} progress;

void train_warn_notes(const char *notes, const char *tail)
{
    for (const char *line = notes; line && *line;) {
        size_t n = strcspn(line, "\n");
        fprintf(stderr, "vkt: warning: %.*s%s\n", (int)n, line, tail);
        line += n + (line[n] == '\n');
    }
}

int train_interrupt_agree(const train_args *a, int *flag)
{
    int v[2] = {vkt_interrupted(), flag ? *flag : 0};
    vkt_status st;
    if (vkt_world_size(a->world) > 1 &&
        (st = vkt_world_broadcast(a->world, v, sizeof v)) != VKT_OK) {
        cli_fail("cannot learn whether the chief was interrupted", st,
                 vkt_world_errmsg(a->world));
        return -1;
    }
    if (flag)
        *flag = v[1];
    return v[0];
}

void train_chief_alone(const train_args *a)
{
    vkt_status st;
    if (vkt_world_size(a->world) > 1 && vkt_world_is_chief(a->world) &&
        (st = vkt_world_keepalive(a->world, 1)) != VKT_OK) /* then the deadline applies */
        fprintf(stderr, "vkt: rank 0: warning: %s: the other ranks wait for the end %g s at "
                "most\n", vkt_world_errmsg(a->world), a->comm_timeout);
}

int train_interrupted(const train_args *a, int sig, uint64_t step, int newline)
{
    if (!vkt_world_is_chief(a->world))
        return 128 + sig;
    fflush(stdout);
    if (newline) /* the progress line was left open on the terminal */
        printf("\n");
    fflush(stdout);
    const char *name = plat_signal_name(sig);
    if (a->ckpt_dir)
        fprintf(stderr, "vkt: interrupted (%s) at step %llu: saved checkpoint %s/ckpt-%llu.vkt\n",
                name, (unsigned long long)step, a->ckpt_dir, (unsigned long long)step);
    else
        fprintf(stderr, "vkt: interrupted (%s) at step %llu: no checkpoint saved (no "
                "--checkpoint-dir)\n", name, (unsigned long long)step);
    return 128 + sig;
}

/* A checkpoint into --checkpoint-dir; returns 0 (and says why) if it failed. Corrupt
 * checkpoints that retention moved aside are reported on stderr. */
static int save_checkpoint(progress *p, uint64_t step)
{
    char notes[CLI_NOTES_SIZE];
    vkt_status st = vkt_checkpoint_save_dir_v2(p->tr, p->a->ckpt_dir, p->a->keep, notes,
                                               sizeof notes);
    train_warn_notes(notes, "");
    if (st != VKT_OK) {
        cli_fail("cannot save a checkpoint", st, vkt_trainer_errmsg(p->tr));
        p->save_failed = 1;
        return 0;
    }
    p->last_save = cli_now();
    p->saved_step = step;
    return 1;
}

/* Pipeline stages across ranks: the chief holds its stage only until the fit returns, so
 * the checkpoints and evaluations are at the end (docs/distributed.md). */
static int stages_across_ranks(const train_args *a)
{
    return vkt_world_size(a->world) > 1 && (a->pipeline > 1 || a->micro_batches > 1);
}

/* Called after every global step: the progress line, in place on a terminal, and a
 * test evaluation after every epoch (as plain lines when not on a terminal). */
static int on_step(void *user, uint64_t step, uint64_t total, float loss)
{
    progress *p = user;
    double now = cli_now();
    int final = step == total;
    const train_args *a = p->a;
    /* Ctrl-C, SIGTERM or SIGHUP: stop after this step (every rank stops with the chief,
     * whose callback this is); run() saves the final checkpoint. */
    int stop = vkt_interrupted() != 0;
    int inside = !stages_across_ranks(a);
    if (a->ckpt_dir && !final && !stop && inside &&
        ((a->save_every && step % a->save_every == 0) ||
         (a->save_secs > 0 && now - p->last_save >= a->save_secs)) &&
        !save_checkpoint(p, step))
        return 1; /* stop: training on without checkpoints would lose work silently */
    if (!p->quiet && (final || now - p->last >= (p->tty ? 0.1 : 2.0))) {
        p->last = now;
        printf("%sstep %llu/%llu  loss %.4f  %.0f samples/s  %.1fs%s", p->tty ? "\r" : "",
               (unsigned long long)step, (unsigned long long)total, loss,
               (double)(step - p->step0) * p->batch / (now - p->t0), now - p->t0,
               p->tty ? (final ? "\n" : "   ") : "\n");
        fflush(stdout);
    }
    train_log_step(p->log, step, total, loss, now);
    if (stop)
        return 1;
    int show = !p->quiet && !p->tty;
    if ((show || p->log->w) && step % p->per_epoch == 0 && !final && inside) {
        vkt_eval_result ev;
        if (vkt_trainer_evaluate(p->tr, p->test, p->m->input, p->m->logits, &ev) == VKT_OK) {
            if (show)
                printf("epoch %llu: test_accuracy=%.4f test_loss=%.4f\n",
                       (unsigned long long)(step / p->per_epoch), ev.accuracy, ev.loss);
            train_log_eval(p->log, step, &ev);
        }
    }
    return 0;
}

static void print_parallel_stats(vkt_trainer *tr, const train_args *a)
{
    vkt_trainer_stats st;
    if (vkt_trainer_stats_get(tr, &st) != VKT_OK || st.world_replicas < 2 || a->quiet)
        return;
    /* pipeline copies: one engine runs every copy's stages (replica[0]: the whole batch);
     * per-stage figures follow (train_print_stages) */
    int piped = a->pipeline > 1 || a->micro_batches > 1;
    const vkt_replica_stats *all = &st.replica[0];
    if (piped)
        printf("copies: %u of the %u-stage pipeline, %u rows each a step; %llu steps, %.2f ms "
               "per step for all of them together\n", st.world_replicas,
               a->pipeline > 1 ? a->pipeline : 1, a->batch / st.world_replicas,
               (unsigned long long)all->steps,
               all->steps ? 1e3 * all->step_seconds / all->steps : 0);
    for (uint32_t r = 0; r < st.replicas && !piped; r++)
        printf("replica %u: %u rows, %llu steps, %.2f ms per step on the device, %.2f ms per "
               "step waiting\n", r, st.replica[r].rows, (unsigned long long)st.replica[r].steps,
               st.replica[r].steps ? 1e3 * st.replica[r].step_seconds / st.replica[r].steps : 0,
               st.replica[r].steps ? 1e3 * st.replica[r].wait_seconds / st.replica[r].steps : 0);
    if (!a->async && !piped)
        printf("averaging: %.3f ms per step on the host, %.2f MB staged per step\n",
               st.steps ? 1e3 * st.average_seconds / st.steps : 0,
               (double)st.bytes_staged_per_step / 1e6);
    else if (a->async) /* sync copies sum inside the pipeline's step (per stage, below) */
        printf("async: %llu updates, staleness mean %.2f p99 %llu max %llu\n",
               (unsigned long long)st.updates, st.staleness_mean,
               (unsigned long long)st.staleness_p99, (unsigned long long)st.staleness_max);
    if (st.ranks > 1 && st.steps && !a->async) /* waits include waiting for slower ranks */
        printf("ranks: %u, %u replicas in all; allreduce: %.3f ms per step, %.3f ms of it "
               "after the device finished the step, %.2f MB per step\n", st.ranks,
               st.world_replicas, 1e3 * st.comm_seconds / st.steps,
               1e3 * st.comm_exposed_seconds / st.steps, (double)st.comm_bytes / st.steps / 1e6);
    else if (st.ranks > 1 && st.steps && piped) /* async copies (pipe_async_world.c) */
        printf("ranks: %u, %u copies in all; each stage's master sharded over the stage's %u "
               "ranks\n", st.ranks, st.world_replicas, st.world_replicas);
    else if (st.ranks > 1 && st.steps)
        printf("ranks: %u, %u replicas in all; waiting for the parameter servers: %.3f ms "
               "per update, %.2f MB sent per update; %.4f MB through the host per update "
               "(pulled and pushed; parameters %.4f MB)\n", st.ranks, st.world_replicas,
               1e3 * st.comm_seconds / st.steps / st.replicas,
               (double)st.comm_bytes / st.steps / st.replicas / 1e6,
               (double)st.exchange_host_bytes / st.steps / st.replicas / 1e6,
               4e-6 * (double)vkt_trainer_param_count(tr));
}

void train_print_stages(const train_args *a, vkt_trainer *tr)
{
    vkt_pipeline_stage_stats ss;
    if (a->quiet || (a->pipeline < 2 && a->micro_batches < 2))
        return;
    for (uint32_t s = 0; vkt_trainer_stage_stats_get(tr, s, &ss) == VKT_OK; s++) {
        char keep[64]; /* --recompute's choice: kept micro-batches, or recomputed */
        if (ss.kept)
            snprintf(keep, sizeof keep, "keeps %u micro-batch(es)", ss.kept);
        else
            snprintf(keep, sizeof keep, "recomputes its forward");
        printf("stage %u (device %u): %u ops; device memory %.2f MB (parameters %.2f, "
               "gradients %.2f, optimizer %.2f, activations %.2f); %s; %.1f ms busy, %llu "
               "forwards and %.2f MB sent (%.2f MB through the host) in the last step\n", s,
               ss.device, ss.ops, ss.device_bytes / 1e6, ss.param_bytes / 1e6,
               ss.grad_bytes / 1e6, ss.optimizer_bytes / 1e6, ss.activation_bytes / 1e6, keep,
               1e3 * ss.busy_seconds, (unsigned long long)ss.forwards, ss.sent_bytes / 1e6,
               ss.sent_host_bytes / 1e6);
    }
}

void train_print_result_tail(const train_args *a)
{
    if (a->pipeline > 1 || a->micro_batches > 1)
        printf(" stages=%u micro_batches=%u", a->pipeline, a->micro_batches);
    if (vkt_world_size(a->world) > 1)
        printf(" ranks=%u", vkt_world_size(a->world));
}

/* --pipeline: the model's ops split over P stages (vkt_graph_split), timed on the first
 * device at one micro-batch, and the split printed. */
static vkt_status split_stages(const train_args *a, vkt_instance *inst, const cli_model *m,
                               uint32_t device, uint32_t rows)
{
    vkt_context_options co = {.device_index = device};
    vkt_context *ctx = NULL;
    /* across ranks every rank splits alone and the trainer refuses splits that differ:
     * `auto` balances parameter bytes there, the same on every rank (times vary) */
    vkt_split_cost cost = (vkt_split_cost)a->split;
    if (cost == VKT_SPLIT_COST_AUTO && vkt_world_size(a->world) > 1)
        cost = VKT_SPLIT_COST_PARAMS;
    if (cost != VKT_SPLIT_COST_PARAMS && vkt_context_create(inst, &co, &ctx) != VKT_OK)
        ctx = NULL; /* timed nowhere: parameter bytes, and the report says why */
    vkt_split_options so = {.stages = a->pipeline, .cost = cost, .context = ctx,
                            .batch = rows, .recompute = (vkt_recompute)a->recompute};
    vkt_split_report r;
    vkt_status st = vkt_graph_split(m->graph, m->loss, &so, &r);
    vkt_context_destroy(ctx);
    if (st != VKT_OK || !vkt_world_is_chief(a->world))
        return st;
    int time = r.cost == VKT_SPLIT_COST_TIME;
    printf("pipeline: %u stages x %u micro-batches of %u rows, split by %s%s%s%s; largest "
           "stage %.2fx the mean\n", r.stages, a->micro_batches, rows,
           !time ? "parameter bytes"
           : a->recompute == VKT_RECOMPUTE_ALWAYS
               ? "measured time (forward + backward, and the forward again on every stage "
                 "but the last: --recompute always)"
               : "measured time (forward + backward)",
           r.note[0] ? " (" : "", r.note, r.note[0] ? ")" : "", r.imbalance);
    for (uint32_t s = 0; s < r.stages; s++) {
        const vkt_split_stage *g = &r.stage[s];
        char cost[32];
        if (time)
            snprintf(cost, sizeof cost, "%.0f us", g->cost);
        else
            snprintf(cost, sizeof cost, "%.2f MB", g->cost / 1e6);
        printf("  stage %u: %3u ops, %s .. %s: %s; parameters %.2f MB, sends %.2f MB\n", s,
               g->ops, g->first, g->last, cost, g->param_bytes / 1e6, g->send_bytes / 1e6);
    }
    fflush(stdout);
    return VKT_OK;
}

vkt_status train_make_trainer(const train_args *a, vkt_instance *inst, const cli_model *m,
                              const vkt_optimizer_options *oo, vkt_trainer **out)
{
    uint32_t dev[VKT_MAX_REPLICAS * VKT_MAX_STAGES], n = 0, P = a->pipeline;
    vkt_trainer_options to = {.batch = a->batch, .mode = a->async ? VKT_PARALLEL_ASYNC
                                                                   : VKT_PARALLEL_SYNC,
                              .bounded_staleness = a->bounded, .staleness = a->staleness,
                              .scale_lr = a->scale_lr, .scale_lr_warmup = a->warmup,
                              .slow_seconds = a->slow_seconds, .balance_after = a->balance,
                              .world = a->world,
                              .bucket_bytes = (uint32_t)(a->bucket_mb * 1048576.0),
                              .check_identical = a->check_identical,
                              .overlap = a->overlap,
                              .stages = P, .micro_batches = a->micro_batches,
                              .recompute = (vkt_recompute)a->recompute,
                              .divergence_growth = a->max_growth > 0 ? a->max_growth : -1,
                              .precision = (vkt_precision)a->precision,
                              .nonfinite_skips = a->skip_nonfinite};
    to.optimizer = *oo;
    if (a->replicas || P > 1) {
        /* --replicas D: the VKT_DEVICES list repeated to D entries; with --pipeline P,
         * D copies of P stages (D: --replicas, else the list's length / P, at least 1),
         * copy d's stage s on entry d * P + s */
        uint32_t sel[VKT_MAX_REPLICAS * VKT_MAX_STAGES], k = 0;
        vkt_status st = vkt_instance_select_devices(inst, sel, VKT_MAX_REPLICAS, &k);
        if (st != VKT_OK)
            return st; /* the message is the thread's last error */
        uint32_t D = a->replicas ? a->replicas : k / P ? k / P : 1;
        for (n = 0; n < D * P; n++)
            dev[n] = sel[n % k];
        to.devices = dev;
        to.device_count = n;
        /* (a batch that does not divide into D x m is refused by vkt_trainer_create);
         * across ranks a rank holds one stage of one of R / P copies, whatever D is */
        uint32_t copies = vkt_world_size(a->world) > 1 ? vkt_world_size(a->world) / P : D;
        uint32_t rows = a->batch / (copies ? copies : 1) / a->micro_batches;
        if (P > 1 && (st = split_stages(a, inst, m, dev[0], rows ? rows : 1)) != VKT_OK)
            return st;
    }
    if (a->slow_seconds > 0) /* the last replica of the last rank */
        to.slow_replica = UINT32_MAX;
    return vkt_trainer_create(inst, m->graph, m->loss, &to, out);
}

const char *train_precision_text(const vkt_trainer *tr, char *buf, size_t size)
{
    vkt_dtype d = VKT_DTYPE_FP32;
    char why[256] = "";
    if (vkt_trainer_precision(tr, &d, why, sizeof why) != VKT_OK)
        snprintf(why, sizeof why, "%s", vkt_last_error());
    snprintf(buf, size, "precision %s (%s)", vkt_dtype_name(d), why);
    return buf;
}

const char *train_mode_text(const vkt_trainer *tr, uint32_t replicas, int async)
{
    vkt_trainer_stats st;
    if (replicas < 2 || !async)
        return "sync";
    if (vkt_trainer_stats_get(tr, &st) == VKT_OK && st.exchange &&
        strcmp(st.exchange, "device") == 0)
        return "async on their shared device's master";
    return "async";
}

void train_print_skipped(const vkt_trainer *tr, int async)
{
    uint64_t skipped = 0;
    float scale = 1.0f;
    if (vkt_trainer_skipped(tr, &skipped, &scale) != VKT_OK || (skipped == 0 && scale == 1.0f))
        return;
    uint32_t replicas = vkt_trainer_world_replicas(tr);
    if (async && replicas > 1) /* each replica its own scaler: the sum, the smallest scale */
        printf("skipped %llu of %llu updates of %u async replicas (non-finite gradients, never "
               "applied); loss scale %g (the smallest)\n", (unsigned long long)skipped,
               (unsigned long long)vkt_trainer_step_count(tr) * replicas, replicas,
               (double)scale);
    else
        printf("skipped %llu of %llu steps (non-finite gradients, never applied); loss scale "
               "%g\n", (unsigned long long)skipped,
               (unsigned long long)vkt_trainer_step_count(tr), (double)scale);
}

/* --checkpoint-dir: restores the newest valid checkpoint, if there is one. Corrupt newer
 * files are reported on stderr. Returns 0 (message printed) on failure. */
static int resume(const train_args *a, vkt_trainer *tr, uint64_t *step)
{
    char notes[CLI_NOTES_SIZE];
    int found = 0;
    vkt_status st = vkt_checkpoint_restore_latest(tr, a->ckpt_dir, &found, step, notes,
                                                  sizeof notes);
    train_warn_notes(notes, "; trying an older checkpoint");
    if (st != VKT_OK) {
        cli_fail("cannot resume from the checkpoints", st, vkt_trainer_errmsg(tr));
        return 0;
    }
    if (found && vkt_world_is_chief(a->world))
        printf("resumed from step %llu\n", (unsigned long long)*step);
    fflush(stdout);
    return 1;
}

static int run(const train_args *a, vkt_instance *inst)
{
    double t_start = cli_now();
    vkt_dataset *train = NULL, *test = NULL;
    const char *dir = a->data ? a->data : cli_default_data_dir();
    vkt_status st = vkt_dataset_load_mnist(dir, &train, &test);
    if (st != VKT_OK)
        return cli_fail("cannot load the data set", st, vkt_last_error());
    uint32_t per_epoch = vkt_dataset_count(train) / a->batch;
    if (per_epoch == 0) {
        fprintf(stderr, "vkt: '%s' has %u training samples, fewer than one batch of %u: use a "
                "smaller --batch\n", dir, vkt_dataset_count(train), a->batch);
        vkt_dataset_destroy(train);
        vkt_dataset_destroy(test);
        return 1;
    }
    uint64_t total = a->max_steps ? a->max_steps : (uint64_t)a->epochs * per_epoch;
    cli_model m = {0};
    train_log log = {0};
    vkt_trainer *tr = NULL;
    int rc = 1;
    vkt_optimizer_options oo;
    if (!train_optimizer_options(a, total, &oo)) {
        rc = 2;
        goto done;
    }
    if (strcmp(a->model, "cnn") == 0 && !cli_image_side(vkt_dataset_features(train))) {
        fprintf(stderr, "vkt: the cnn model needs square images of at least 4x4 pixels; "
                "'%s' has %u features per sample\n", dir, vkt_dataset_features(train));
        goto done;
    }
    if (strcmp(a->model, "cnn") == 0)
        st = cli_build_cnn(&m, a->batch, vkt_dataset_features(train),
                           vkt_dataset_classes(train), a->seed);
    else
        st = cli_build_mlp(&m, a->batch, vkt_dataset_features(train),
                           vkt_dataset_classes(train), a->widths, a->n_widths, a->dropout,
                           a->seed);
    if (st != VKT_OK) {
        cli_fail("cannot build the model", st, vkt_graph_errmsg(m.graph));
        goto done;
    }
    if ((st = train_make_trainer(a, inst, &m, &oo, &tr)) != VKT_OK) {
        rc = cli_fail("cannot create the trainer", st, vkt_last_error());
        goto done;
    }
    vkt_device_info info;
    vkt_instance_device_info(inst, 0, &info);
    uint32_t replicas = vkt_trainer_world_replicas(tr), ranks = vkt_world_size(a->world);
    const char *mode = replicas > 1 && a->async ? "async" : "sync";
    char prec[320];
    if (!a->quiet)
        printf("training %s on %u samples (%u test), batch %u, %llu steps, %u replica(s) %s%s, "
               "device: %s, %s\n", a->model, vkt_dataset_count(train), vkt_dataset_count(test),
               a->batch, (unsigned long long)total, replicas,
               train_mode_text(tr, replicas, a->async),
               ranks > 1 ? " over several ranks" : "", info.name,
               train_precision_text(tr, prec, sizeof prec));
    double t0 = cli_now();
    if (!train_log_open(&log, a->logdir, a->log_every, a->batch, replicas, a->scale_lr,
                        a->warmup, &oo, t0, a->quiet))
        goto done;
    progress p = {.tty = plat_stdout_is_tty(), .quiet = a->quiet, .t0 = t0,
                  .batch = a->batch, .per_epoch = per_epoch, .tr = tr, .test = test, .m = &m,
                  .log = &log, .a = a, .last_save = t0, .saved_step = UINT64_MAX};
    if (a->ckpt_dir && !resume(a, tr, &p.step0))
        goto done;
    if (a->ckpt_dir && p.step0)
        p.saved_step = p.step0;
    log.last_step = p.step0; /* a resumed run's first summary averages its own steps */
    cli_torch_model tm = {.model = a->model, .n_widths = a->n_widths, .dropout = a->dropout > 0};
    if (!train_init_from(a, tr, &tm, p.step0 != 0))
        goto done;
    if (p.step0 >= total && vkt_world_is_chief(a->world)) /* then evaluates and reports */
        printf("nothing to train: the checkpoint is at step %llu of %llu\n",
               (unsigned long long)p.step0, (unsigned long long)total);
    /* a warning, not progress: printed with --quiet too */
    if (a->ckpt_dir && (a->save_every || a->save_secs > 0) && stages_across_ranks(a) &&
        vkt_world_is_chief(a->world))
        fprintf(stderr, "vkt: warning: --save-every / --save-secs: with pipeline stages across "
                "ranks the checkpoint is saved at the end of the run and on a signal only "
                "(docs/distributed.md)\n");
    if (total > p.step0)
        st = vkt_trainer_fit(tr, train, m.input, m.labels, total - p.step0, a->seed, on_step,
                             &p);
    if (st != VKT_OK) {
        char what[64];
        snprintf(what, sizeof what, "training failed at step %llu",
                 (unsigned long long)vkt_trainer_step_count(tr) + 1);
        /* a save the divergence guard refused also ends fit: its message is out already */
        rc = p.save_failed && st == VKT_ERROR_DIVERGED ? 1
                                                       : cli_fail(what, st, vkt_trainer_errmsg(tr));
        goto done;
    }
    /* Stopped by a signal: the chief's request, known to every rank (collective),
     * so that all of them save (the chief alone writes) and exit alike, with 128 + n; a
     * failed save of the chief's stops every rank alike too. */
    int save_failed = p.save_failed;
    int sig = train_interrupt_agree(a, &save_failed);
    if (save_failed && !p.save_failed)
        cli_fail("stopped", VKT_ERROR_REMOTE, "the chief (rank 0) could not save a checkpoint "
                 "(its message is in its output)");
    if (sig < 0 || save_failed)
        goto done;
    train_chief_alone(a); /* the last collective: the others wait in finalize */
    if (a->ckpt_dir && p.saved_step != vkt_trainer_step_count(tr) &&
        !save_checkpoint(&p, vkt_trainer_step_count(tr)))
        goto done;
    if (sig) {
        rc = train_interrupted(a, sig, vkt_trainer_step_count(tr),
                               p.tty && !a->quiet && vkt_trainer_step_count(tr) != total);
        goto done;
    }
    /* with no checkpoint saved, the divergence guard looks at the end (every rank) */
    if (!a->ckpt_dir && (st = vkt_trainer_check_divergence(tr)) != VKT_OK) {
        rc = cli_fail("training failed", st, vkt_trainer_errmsg(tr));
        goto done;
    }
    if (!vkt_world_is_chief(a->world)) { /* the chief evaluates and reports */
        rc = 0;
        goto done;
    }
    vkt_trainer_stats ts;
    vkt_trainer_stats_get(tr, &ts);
    vkt_eval_result ev;
    if ((st = vkt_trainer_evaluate(tr, test, m.input, m.logits, &ev)) != VKT_OK) {
        cli_fail("evaluation failed", st, vkt_trainer_errmsg(tr));
        goto done;
    }
    if ((sig = vkt_interrupted()) != 0) { /* during the evaluation: the last step is saved */
        rc = train_interrupted(a, sig, vkt_trainer_step_count(tr), 0);
        goto done;
    }
    train_log_eval(&log, vkt_trainer_step_count(tr), &ev);
    if (replicas > 1 && a->async)
        train_log_async(&log, vkt_trainer_step_count(tr), &ts);
    print_parallel_stats(tr, a);
    train_print_stages(a, tr);
    if (!a->quiet && ts.step_seconds > 0) /* the loader's prefetch thread hides loading */
        printf("data wait: %.1f%% of step time\n",
               100.0 * ts.data_wait_seconds / ts.step_seconds);
    train_print_skipped(tr, a->async && a->pipeline <= 1); /* a pipeline: one scaler */
    printf("result: test_accuracy=%.4f test_loss=%.4f steps=%llu samples_per_s=%.1f "
           "seconds=%.1f replicas=%u mode=%s", ev.accuracy, ev.loss,
           (unsigned long long)vkt_trainer_step_count(tr),
           ts.step_seconds > 0 ? (double)ts.steps * a->batch / ts.step_seconds : 0.0, /* this
                                                                                         run's */
           cli_now() - t_start,
           replicas, mode);
    train_print_result_tail(a);
    if (replicas > 1 && a->async)
        printf(" staleness_mean=%.2f staleness_max=%llu", ts.staleness_mean,
               (unsigned long long)ts.staleness_max);
    printf("\n");
    rc = 0;
done:
    train_log_close(&log);
    vkt_trainer_destroy(tr);
    vkt_graph_destroy(m.graph);
    vkt_dataset_destroy(train);
    vkt_dataset_destroy(test);
    return rc;
}

int cmd_train(int argc, char **argv)
{
    train_args a;
    int rc = train_args_parse(argc, argv, &a);
    if (rc)
        return rc == 3 ? 0 : rc; /* 3: --help was printed */
    /* Under mpirun (or srun) one rank of a job; otherwise alone, with no MPI call. */
    vkt_world_options wo = {.timeout_seconds = a.comm_timeout};
    vkt_status st = vkt_world_init(NULL, NULL, &wo, &a.world);
    if (st != VKT_OK)
        return cli_fail("cannot join the MPI job", st, vkt_last_error());
    uint32_t ranks = vkt_world_size(a.world);
    cli_set_rank(vkt_world_rank(a.world), ranks);
    /* Before any other collective: every rank takes the same options, or every rank
     * stops here with status 2, the difference named. */
    if ((rc = train_ranks_agree(&a)) == 0 && ranks > 1 && strcmp(a.model, "charlm") == 0 &&
        a.async) {
        fprintf(stderr, "vkt: rank %u: --model charlm trains with sync replicas: --mode async "
                "is not available for it\n", vkt_world_rank(a.world));
        vkt_world_finalize(a.world);
        return 2;
    }
    if (!vkt_world_is_chief(a.world)) { /* the chief alone prints and writes summaries */
        a.quiet = 1;
        a.logdir = NULL;
    }
    /* One run per checkpoint folder, locked for the whole run by the chief, the only rank
     * that touches it; a second run stops here, before it reads or writes anything. */
    vkt_checkpoint_lock *lock = NULL;
    if (!rc && a.ckpt_dir && vkt_world_is_chief(a.world) &&
        (st = vkt_checkpoint_dir_lock(a.ckpt_dir, &lock)) != VKT_OK)
        rc = cli_fail("cannot use the checkpoint folder", st, vkt_last_error());
    /* The first Ctrl-C, SIGTERM or SIGHUP (a closed terminal or ssh session) stops
     * training after the current step, with a final checkpoint; a second ends the process
     * at once. */
    if (!rc && (st = vkt_interrupt_install()) != VKT_OK)
        rc = cli_fail("cannot catch Ctrl-C", st, vkt_last_error());
    vkt_instance *inst = rc ? NULL : cli_instance();
    if (!rc)
        rc = !inst ? 1 : strcmp(a.model, "charlm") == 0 ? train_charlm(&a, inst) : run(&a, inst);
    fflush(stdout);
    /* Training is over and saved: a signal from now on acts at once, as without the
     * handlers. (When mpirun ends a job it sends SIGTERM, then SIGKILL a second later,
     * and exits without waiting for the ranks: a rank that took the SIGTERM as a request
     * to stop would outlive the SIGTERM, and then be dying while mpirun exits.) */
    vkt_interrupt_uninstall();
    vkt_checkpoint_dir_unlock(lock);
    /* A rank that failed ends the job at once: the others may be waiting for it in a
     * collective (a failure inside a training step already stopped them all at that step,
     * each with its message). */
    if (rc != 0 && rc < 128 && ranks > 1 && /* 128 + n: interrupted, every rank alike */
        !train_ranks_refused()) {              /* or ranks that disagree: every one knows */
        /* A rank that only learnt of another's failure (VKT_ERROR_REMOTE) gives the failing
         * rank time to print its own message before the job is torn down. */
        if (cli_last_failure() == VKT_ERROR_REMOTE)
            plat_sleep(2);
        vkt_world_abort(a.world, rc, "stopping every rank of the job");
    }
    vkt_instance_destroy(inst);
    vkt_world_finalize(a.world);
    return rc;
}
