/* vkt train --model charlm: a character-level transformer on a text (default: the shipped
 * Pride and Prejudice). Each step trains on `batch` random windows of `context`
 * characters; the validation loss (nats per character) is measured every --eval-every
 * steps on evenly spread windows of the last 10% of the text, and over all of it at the
 * end; then it samples --sample characters. Ends with
 *   result: val_loss=<v> train_loss=<t> steps=<n> samples_per_s=<s> seconds=<t> ...
 * Batches come from a generator seeded by (seed, step), so a run resumed from a
 * checkpoint sees the same batches as an uninterrupted one. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "platform/platform.h"
#include "train.h"
#include "train_log.h"

#define LM_VAL_FRACTION 0.1f
#define LM_EVAL_WINDOWS 128 /* windows for the periodic validation loss */
#define SAMPLE_PIECE 64     /* characters sampled between two looks for a signal */

typedef struct lm_run {
    const train_args *a;
    vkt_text *text;
    cli_model m;
    vkt_trainer *tr;
    float *ids;
    int32_t *targets;
    int sig; /* a signal stopped training (the chief's, on every rank) */
} lm_run;

/* The generator state of a step's batches: a hash of the seed and the step (splitmix64's
 * finalizer on each), so different seeds give unrelated batch sequences. */
static uint64_t mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Validation (split 1) or training (split 0) loss over up to `windows` windows. */
static int eval_loss(lm_run *r, int split, uint32_t windows, float *loss)
{
    vkt_status st = vkt_trainer_evaluate_text(r->tr, r->text, split, r->m.input, r->m.logits,
                                              r->a->context, windows, loss);
    return st == VKT_OK || !cli_fail("evaluation failed", st, vkt_trainer_errmsg(r->tr));
}

static int save(lm_run *r)
{
    char notes[CLI_NOTES_SIZE];
    vkt_status st = vkt_checkpoint_save_dir_v2(r->tr, r->a->ckpt_dir, r->a->keep, notes,
                                               sizeof notes);
    train_warn_notes(notes, "");
    return st == VKT_OK || !cli_fail("cannot save a checkpoint", st, vkt_trainer_errmsg(r->tr));
}

/* Steps from the trainer's count to `total`, with progress and periodic validation. */
static int train_steps(lm_run *r, uint64_t total, train_log *log, double *train_seconds)
{
    const train_args *a = r->a;
    int tty = plat_stdout_is_tty();
    double t0 = cli_now(), last = 0, last_save = t0;
    uint64_t first = vkt_trainer_step_count(r->tr);
    for (uint64_t step = first + 1; step <= total; step++) {
        uint64_t rng = mix(mix(a->seed) ^ step); /* this step's batches */
        vkt_status st = vkt_text_batch(r->text, 0, a->batch, a->context, &rng, r->ids,
                                       r->targets);
        vkt_feed feeds[2] = {{r->m.input, r->ids}, {r->m.labels, r->targets}};
        float loss = 0;
        if (st != VKT_OK)
            return !cli_fail("cannot make a batch", st, vkt_last_error());
        if ((st = vkt_trainer_step(r->tr, feeds, 2, &loss)) != VKT_OK)
            return !cli_fail("training failed", st, vkt_trainer_errmsg(r->tr));
        double now = cli_now();
        train_log_step(log, step, total, loss, now);
        if (!a->quiet && (step == total || now - last >= (tty ? 0.1 : 5.0))) {
            last = now;
            printf("%sstep %llu/%llu  loss %.4f  %.0f samples/s  %.1fs%s", tty ? "\r" : "",
                   (unsigned long long)step, (unsigned long long)total, loss,
                   (double)(step - first) * a->batch / (now - t0), now - t0,
                   tty ? (step == total ? "\n" : "   ") : "\n");
            fflush(stdout);
        }
        /* A signal: stop after this step, every rank at the chief's step (a broadcast
         * per step across ranks); run() saves the final checkpoint. Whether a checkpoint
         * is due travels with it: every rank checks what a save would hold (the
         * divergence guard), so all must save at the same steps, and by time only the
         * chief's clock counts. */
        int due = a->ckpt_dir && step != total &&
                  ((a->save_every && step % a->save_every == 0) ||
                   (a->save_secs > 0 && now - last_save >= a->save_secs));
        if ((r->sig = train_interrupt_agree(a, &due)) != 0)
            break;
        if (a->eval_every && step % a->eval_every == 0 && step != total &&
            vkt_world_is_chief(a->world)) { /* across ranks the chief evaluates */
            float val;
            if (!eval_loss(r, 1, LM_EVAL_WINDOWS, &val))
                return 0;
            if (!a->quiet)
                printf("%sstep %llu: val_loss=%.4f (%u windows)\n", tty ? "\n" : "",
                       (unsigned long long)step, val, LM_EVAL_WINDOWS);
        }
        if (due) {
            if (!save(r))
                return 0;
            last_save = cli_now();
        }
    }
    *train_seconds = cli_now() - t0;
    return r->sig >= 0;
}

/* --sample characters into out (NUL-terminated), SAMPLE_PIECE at a time, each piece
 * prompted with the characters before it (from the same start the library uses: a line
 * break, else the first character of the vocabulary), so that the model sees the same
 * windows as in one call; each piece draws from its own seed. Stops early with *sig set
 * when a signal asks to stop (out then holds what was sampled). */
static vkt_status sample(lm_run *r, char *out, int *sig)
{
    const train_args *a = r->a;
    uint32_t ctx = a->context, done = 0;
    char *prompt = malloc((size_t)ctx + 1);
    if (!prompt)
        return VKT_ERROR_OUT_OF_MEMORY;
    int32_t nl = vkt_text_encode(r->text, '\n');
    char start = (char)vkt_text_decode(r->text, nl >= 0 ? (uint32_t)nl : 0);
    vkt_status st = VKT_OK;
    out[0] = '\0';
    while (st == VKT_OK && done < a->sample && !(*sig = vkt_interrupted())) {
        uint32_t n = a->sample - done < SAMPLE_PIECE ? a->sample - done : SAMPLE_PIECE;
        /* the start character, then what was sampled: the last ctx characters of it */
        uint32_t have = done + 1, keep = have < ctx ? have : ctx;
        for (uint32_t i = 0; i < keep; i++) {
            uint32_t k = have - keep + i; /* 0: the start character */
            prompt[i] = k ? out[k - 1] : start;
        }
        prompt[keep] = '\0';
        uint64_t seed = done ? mix(a->seed ^ done) : a->seed;
        st = vkt_trainer_sample_text(r->tr, r->text, r->m.input, r->m.logits, ctx, prompt, n,
                                     a->temperature, seed, out + done);
        done += st == VKT_OK ? n : 0;
    }
    free(prompt);
    return st;
}

/* A hash of the file's bytes, so that ranks can check they hold the same text (0 if it
 * cannot be read again: every rank then differs from a readable chief's). */
static uint64_t file_hash(const char *path)
{
    FILE *f = fopen(path, "rb");
    unsigned char buf[65536];
    uint64_t h = 0;
    size_t n;
    if (!f)
        return 0;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0)
        h = train_hash(h, buf, n);
    fclose(f);
    return h;
}

static int run(lm_run *r, vkt_instance *inst)
{
    const train_args *a = r->a;
    double t_start = cli_now();
    const char *path = a->text ? a->text : cli_default_text();
    vkt_status st = vkt_text_load(path, LM_VAL_FRACTION, &r->text);
    if (st != VKT_OK)
        return cli_fail("cannot load the text", st, vkt_last_error());
    /* Across ranks: the same text (the seed and every other option are compared at
     * start-up), since each rank draws the global batch from it. */
    int rc = vkt_world_size(a->world) > 1
                 ? train_ranks_same(a, "the contents of --text", file_hash(path)) : 0;
    if (rc)
        return rc;
    if (vkt_text_length(r->text, 1) <= a->context) {
        fprintf(stderr, "vkt: '%s': the validation part (the last 10%%, %llu characters) is "
                "shorter than a window of --context %u plus one\n", path,
                (unsigned long long)vkt_text_length(r->text, 1), a->context);
        return 2;
    }
    cli_lm_shape shape = {vkt_text_vocab(r->text), a->context, a->width, a->layers, a->heads,
                          a->dropout, a->rms_norm, a->silu};
    uint64_t total = a->max_steps;
    vkt_optimizer_options oo;
    if (!train_optimizer_options(a, total, &oo))
        return 2;
    if (oo.schedule == VKT_SCHEDULE_WARMUP_COSINE && a->warmup == 0)
        oo.warmup_steps = total / 20; /* a short warmup: Adam's early steps are large */
    if ((st = cli_build_charlm(&r->m, a->batch, &shape, a->seed)) != VKT_OK)
        return r->m.graph ? cli_fail("cannot build the model", st, vkt_graph_errmsg(r->m.graph))
                          : 1; /* refused before building: the builder said why */
    if ((st = train_make_trainer(a, inst, &r->m, &oo, &r->tr)) != VKT_OK)
        return cli_fail("cannot create the trainer", st, vkt_last_error());
    uint64_t rows = (uint64_t)a->batch * a->context;
    r->ids = malloc(rows * sizeof *r->ids);
    r->targets = malloc(rows * sizeof *r->targets);
    if (!r->ids || !r->targets)
        return cli_fail("out of host memory", VKT_ERROR_OUT_OF_MEMORY, "");
    int found = 0;
    if (a->ckpt_dir) {
        uint64_t step = 0;
        char notes[CLI_NOTES_SIZE];
        st = vkt_checkpoint_restore_latest(r->tr, a->ckpt_dir, &found, &step, notes,
                                           sizeof notes);
        train_warn_notes(notes, "; trying an older checkpoint");
        if (st != VKT_OK)
            return cli_fail("cannot resume from the checkpoints", st, vkt_trainer_errmsg(r->tr));
        if (found && vkt_world_is_chief(a->world))
            printf("resumed from step %llu\n", (unsigned long long)step);
        if (found && step >= total && vkt_world_is_chief(a->world))
            printf("nothing to train: the checkpoint is at step %llu of %llu\n",
                   (unsigned long long)step, (unsigned long long)total);
    }
    cli_torch_model tm = {.model = "charlm", .layers = a->layers, .rms_norm = a->rms_norm};
    if (!train_init_from(a, r->tr, &tm, found))
        return 1;
    vkt_device_info info;
    vkt_instance_device_info(inst, 0, &info);
    uint32_t replicas = vkt_trainer_world_replicas(r->tr);
    const char *mode = replicas > 1 && a->async ? "async" : "sync";
    char prec[320];
    if (!a->quiet)
        printf("training charlm (%u layers, %u heads, width %u, context %u, vocabulary %u) on "
               "%llu characters (%llu validation), batch %u, %llu steps, %u replica(s) %s, "
               "device: %s, %s\n", a->layers, a->heads, a->width, a->context, shape.vocab,
               (unsigned long long)vkt_text_length(r->text, 0),
               (unsigned long long)vkt_text_length(r->text, 1), a->batch,
               (unsigned long long)total, replicas,
               train_mode_text(r->tr, replicas, a->async), info.name,
               train_precision_text(r->tr, prec, sizeof prec));
    train_log log = {0};
    double seconds = 0;
    uint64_t first = vkt_trainer_step_count(r->tr);
    int ok = train_log_open(&log, a->logdir, a->log_every, a->batch, replicas, a->scale_lr,
                            a->warmup, &oo, cli_now(), a->quiet);
    log.last_step = first; /* a resumed run's first summary averages its own steps */
    ok = ok && train_steps(r, total, &log, &seconds);
    train_log_close(&log);
    if (ok)
        train_chief_alone(a); /* the last collective: the others wait in finalize */
    if (!ok || (a->ckpt_dir && !save(r)))
        return 1;
    /* with no checkpoint saved, the divergence guard looks at the end (every rank) */
    if (!r->sig && !a->ckpt_dir && (st = vkt_trainer_check_divergence(r->tr)) != VKT_OK)
        return cli_fail("training failed", st, vkt_trainer_errmsg(r->tr));
    uint64_t done = vkt_trainer_step_count(r->tr);
    if (r->sig)
        return train_interrupted(a, r->sig, done,
                                 plat_stdout_is_tty() && !a->quiet && done != total);
    if (!vkt_world_is_chief(a->world)) /* the chief evaluates, samples and reports */
        return 0;
    /* The end is the chief's alone and may take long (a long --sample): a first signal
     * stops it between pieces, the checkpoint of the last step being saved above. */
    float val = 0, trn = 0;
    int sig = 0;
    if (!eval_loss(r, 1, 0, &val))
        return 1;
    if (!(sig = vkt_interrupted()) && !eval_loss(r, 0, 1000, &trn))
        return 1;
    char *text = sig ? NULL : malloc((size_t)a->sample + 1);
    if (!sig && !text)
        return cli_fail("out of host memory", VKT_ERROR_OUT_OF_MEMORY, "");
    if (!sig && (st = sample(r, text, &sig)) == VKT_OK && !sig)
        printf("sample (temperature %.2f):\n%s\n", a->temperature, text);
    free(text);
    if (sig)
        return train_interrupted(a, sig, done, 0);
    if (st != VKT_OK)
        return cli_fail("sampling failed", st, vkt_trainer_errmsg(r->tr));
    train_print_stages(a, r->tr);
    uint64_t steps = vkt_trainer_step_count(r->tr) - first;
    train_print_skipped(r->tr, a->async);
    printf("result: val_loss=%.4f train_loss=%.4f steps=%llu samples_per_s=%.1f seconds=%.1f "
           "replicas=%u mode=%s", val, trn, (unsigned long long)vkt_trainer_step_count(r->tr),
           seconds > 0 ? (double)steps * a->batch / seconds : 0.0, cli_now() - t_start,
           replicas, mode);
    train_print_result_tail(a);
    printf("\n");
    return 0;
}

int train_charlm(const train_args *a, vkt_instance *inst)
{
    lm_run r = {.a = a};
    int rc = run(&r, inst);
    vkt_trainer_destroy(r.tr);
    vkt_graph_destroy(r.m.graph);
    vkt_text_destroy(r.text);
    free(r.ids);
    free(r.targets);
    return rc;
}
