/* `vkt train`'s options: one table gives each option's name, type, range, default and
 * --help text; the parser and the usage text are both read from it, so they cannot drift.
 * Every number is parsed whole (nothing after it), finite and in range; a bad value is a
 * message naming the option and exit status 2. Calls no Vulkan: a fuzz target can link it
 * with cli_util.c. */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "train.h"

#define FIELD(f) .offset = offsetof(train_args, f), .size = sizeof(((train_args *)0)->f)
#define GIVEN(f) .given = offsetof(train_args, f) + 1 /* +1: 0 means none */
#define CHOICES(...) .choices = (const char *const[]){__VA_ARGS__, NULL}
#define VALUES(...) .values = (const int[]){__VA_ARGS__}

const train_option train_options[] = {
    {"--data", "DIR", TRAIN_OPT_STRING, FIELD(data),
     .help = "MNIST-style folder (train-images-idx3-ubyte[.gz], ...)",
     .def_note = "$VKT_DATA_DIR, else the shipped digits",
     .ranks = TRAIN_RANKS_OWN /* a path on each machine; the trainer compares the data */},
    {"--model", "NAME", TRAIN_OPT_CHOICE, FIELD(model), CHOICES("mlp", "cnn", "charlm"),
     .sdef = "mlp",
     .help = "the network (cnn: conv-relu-maxpool x2, linear; charlm: a character-level "
             "transformer on --text, see below)"},
    {"--hidden", "256,128", TRAIN_OPT_WIDTHS, FIELD(widths), .lo = 1, .hi = 65536,
     .help = "hidden widths of the MLP, up to 8 layers", .def_note = "256,128"},
    {"--epochs", "N", TRAIN_OPT_INT, FIELD(epochs), .lo = 1, .hi = 1000000, GIVEN(epochs_given),
     .help = "passes over the training set", .def_note = "10; cnn 12"},
    {"--steps", "N", TRAIN_OPT_INT, FIELD(max_steps), .lo = 1, .hi = 1e12,
     .help = "stop after N steps", .def_note = "from --epochs; charlm 3000"},
    {"--batch", "N", TRAIN_OPT_INT, FIELD(batch), .lo = 1, .hi = 2147483647.0,
     GIVEN(batch_given), .help = "global batch", .def_note = "128; cnn 64; charlm 32"},
    {"--optimizer", "NAME", TRAIN_OPT_CHOICE, FIELD(optimizer),
     CHOICES("sgd", "momentum", "nesterov", "adam", "adamw"), .help = "the update rule",
     .def_note = "momentum; charlm adamw"},
    {"--lr", "X", TRAIN_OPT_REAL, FIELD(lr), .lo = 0, .lo_open = 1, .hi = 1e6, .rdef = -1,
     .help = "learning rate", .def_note = "0.2, cnn 0.1; adam/adamw 0.001, charlm 0.003"},
    {"--momentum", "X", TRAIN_OPT_REAL, FIELD(momentum), .lo = 0, .hi = 1, .hi_open = 1,
     .rdef = 0.9, .help = "for momentum and nesterov"},
    {"--weight-decay", "X", TRAIN_OPT_REAL, FIELD(weight_decay), .lo = 0, .hi = 10,
     .help = "weight decay (decoupled for adamw)"},
    {"--clip", "X", TRAIN_OPT_REAL, FIELD(clip), .lo = 0, .hi = 1e9,
     .help = "clip gradients to global norm X (0: off)"},
    {"--dropout", "P", TRAIN_OPT_REAL, FIELD(dropout), .lo = 0, .hi = 1, .hi_open = 1,
     .help = "dropout after each hidden layer"},
    {"--schedule", "NAME", TRAIN_OPT_CHOICE, FIELD(schedule),
     CHOICES("constant", "step", "cosine"), .sdef = "cosine",
     .help = "learning rate schedule (cosine: warmup then cosine)"},
    {"--warmup", "N", TRAIN_OPT_INT, FIELD(warmup), .lo = 0, .hi = 4294967295.0,
     .help = "warmup steps for cosine and --scale-lr"},
    {"--seed", "N", TRAIN_OPT_INT, FIELD(seed), .lo = 0, .hi = 18446744073709551615.0,
     .idef = 1, .help = "initialization, shuffling and dropout seed"},
    {"--replicas", "N", TRAIN_OPT_INT, FIELD(replicas), .lo = 1, .hi = VKT_MAX_REPLICAS,
     .help = "data-parallel replicas", .def_note = "one per VKT_DEVICES entry",
     .ranks = TRAIN_RANKS_OWN /* per rank (docs/distributed.md) */},
    {"--mode", "sync|async", TRAIN_OPT_CHOICE, FIELD(async), CHOICES("sync", "async"),
     VALUES(0, 1), .sdef = "sync", .help = "averaged gradients, or lock-free updates"},
    {"--staleness", "S", TRAIN_OPT_INT, FIELD(staleness), .lo = 0, .hi = 4294967295.0,
     GIVEN(bounded), .help = "async: bound the staleness to S (0 equals sync)",
     .def_note = "unbounded"},
    {"--scale-lr", NULL, TRAIN_OPT_FLAG, FIELD(scale_lr),
     .help = "multiply the lr by the replica count (warmup: --warmup)"},
    {"--balance", "N", TRAIN_OPT_INT, FIELD(balance), .lo = 0, .hi = 4294967295.0,
     .help = "sync: after N steps split the batch by replica speed (0: never)"},
    {"--slow-replica-ms", "M", TRAIN_OPT_REAL, FIELD(slow_seconds), .lo = 0, .hi = 1e6,
     .scale = 1e-3, .help = "benchmarking: the last replica sleeps M ms per step"},
    {"--logdir", "DIR", TRAIN_OPT_STRING, FIELD(logdir),
     .help = "write TensorBoard summaries and a CSV of scalars to DIR",
     .ranks = TRAIN_RANKS_OWN /* the chief's */},
    {"--log-every", "N", TRAIN_OPT_INT, FIELD(log_every), .lo = 1, .hi = 4294967295.0,
     .idef = 10, .help = "summary interval in steps",
     .ranks = TRAIN_RANKS_OWN /* the chief's */},
    {"--checkpoint-dir", "D", TRAIN_OPT_STRING, FIELD(ckpt_dir),
     .help = "resume from the newest valid checkpoint in D (if any) and save checkpoints "
             "there (docs/checkpoint.md)",
     .ranks = TRAIN_RANKS_GIVEN /* the chief's; restoring is collective */},
    {"--save-every", "K", TRAIN_OPT_INT, FIELD(save_every), .lo = 0, .hi = 1e15,
     .help = "save a checkpoint every K steps (and at the end; 0: not by steps)",
     .ranks = TRAIN_RANKS_OWN /* the chief's: its decision reaches every rank */},
    {"--save-secs", "T", TRAIN_OPT_REAL, FIELD(save_secs), .lo = 0, .hi = 1e9, .rdef = 60,
     .help = "save a checkpoint every T seconds (0: not by time)",
     .ranks = TRAIN_RANKS_OWN /* the chief's: its decision reaches every rank */},
    {"--keep", "N", TRAIN_OPT_INT, FIELD(keep), .lo = 0, .hi = 1000000, .idef = 3,
     .help = "checkpoints kept in the folder (0: all)",
     .ranks = TRAIN_RANKS_OWN /* the chief's */},
    {"--max-growth", "X", TRAIN_OPT_REAL, FIELD(max_growth), .lo = 0, .hi = 1e30, .rdef = 10,
     .help = "divergence guard: a checkpoint whose parameters' RMS grew more than X times "
             "since the start of the run is not saved, and training stops (0: no limit)"},
    {"--precision", "fp32|fp16|bf16|auto", TRAIN_OPT_CHOICE, FIELD(precision),
     CHOICES("fp32", "fp16", "bf16", "auto"),
     VALUES(VKT_PRECISION_FP32, VKT_PRECISION_FP16, VKT_PRECISION_BF16, VKT_PRECISION_AUTO),
     .sdef = "fp32",
     .help = "the matrix products in 16 bits with fp32 accumulation, fp32 master weights and "
             "optimizer state (auto: the fastest the device supports; the start line says "
             "what was chosen and why)"},
    {"--skip-nonfinite", "N", TRAIN_OPT_INT, FIELD(skip_nonfinite), .lo = 0,
     .hi = 4294967295.0,
     .help = "skip a step whose gradients are not finite (never applied, counted at the end) "
             "instead of stopping, up to N in a row (0: only fp16's loss scaling skips, 32 in "
             "a row)"},
    {"--init-from", "FILE", TRAIN_OPT_STRING, FIELD(init_from),
     .help = "start from the weights of a safetensors file (F32, F16, BF16), each parameter "
             "by its name or through --init-map (docs/import.md); not applied when the run "
             "resumes from --checkpoint-dir",
     .ranks = TRAIN_RANKS_GIVEN /* the chief reads it; the values reach every rank */},
    {"--init-map", "FILE|torch", TRAIN_OPT_STRING, FIELD(init_map),
     .help = "the name map of --init-from: a file of 'PARAM TENSOR [transpose]' lines, or "
             "torch: PyTorch's names for this model (nn.Sequential for mlp and cnn, nanoGPT's "
             "for charlm)",
     .ranks = TRAIN_RANKS_GIVEN /* the chief reads it */},
    {"--quiet", NULL, TRAIN_OPT_FLAG, FIELD(quiet), .help = "no progress line",
     .ranks = TRAIN_RANKS_OWN /* the chief prints */},
    {"--pipeline", "P", TRAIN_OPT_INT, FIELD(pipeline), .lo = 1, .hi = VKT_MAX_STAGES,
     .idef = 1, .section = "model parallelism (docs/model_parallel.md)",
     .help = "split the model into P pipeline stages, balanced by measured op time (printed "
             "at start); each copy's stages on P consecutive VKT_DEVICES entries; under "
             "mpirun one stage per rank (the ranks a multiple of P)"},
    {"--micro-batches", "M", TRAIN_OPT_INT, FIELD(micro_batches), .lo = 1, .hi = 65536,
     GIVEN(micro_given), .help = "micro-batches per step flowing through the stages (the "
     "batch must divide by replicas x M)", .def_note = "4 with --pipeline, else 1"},
    {"--split", "auto|time|params", TRAIN_OPT_CHOICE, FIELD(split),
     CHOICES("auto", "time", "params"), VALUES(VKT_SPLIT_COST_AUTO, VKT_SPLIT_COST_TIME,
     VKT_SPLIT_COST_PARAMS), .sdef = "auto", .help = "what --pipeline balances: measured "
     "time, parameter bytes (auto: time where the whole model fits one device, parameter "
     "bytes under mpirun, where every rank must split alike)"},
    {"--recompute", "auto|always|never", TRAIN_OPT_CHOICE, FIELD(recompute),
     CHOICES("auto", "always", "never"), VALUES(VKT_RECOMPUTE_AUTO, VKT_RECOMPUTE_ALWAYS,
     VKT_RECOMPUTE_NEVER), .sdef = "auto", .help = "whether a stage keeps the activations "
     "of its micro-batches in flight (never: fail where they do not fit) or recomputes its "
     "forward in the backward (always; auto: keep where they fit the device)",
     .ranks = TRAIN_RANKS_OWN /* each rank's stage decides alone; the result is the same */},
    {"--comm-timeout", "S", TRAIN_OPT_REAL, FIELD(comm_timeout), .lo = 0.001, .hi = 1e6,
     .rdef = 60, .section = "across processes (mpirun -np R vkt train ...; docs/distributed.md)",
     .help = "a rank more than S seconds late ends the job, naming it (exit code 3)"},
    {"--bucket-mb", "X", TRAIN_OPT_REAL, FIELD(bucket_mb), .lo = 1.0 / 1024, .hi = 1024,
     .sync_only = 1,
     .rdef = 4, .help = "sync: gradient MiB per allreduce"},
    {"--check-identical", "N", TRAIN_OPT_INT, FIELD(check_identical), .lo = 0,
     .sync_only = 1,
     .hi = 1e9, .help = "sync: compare the ranks' parameters every N steps (0: never)"},
    {"--overlap", "on|off|auto", TRAIN_OPT_CHOICE, FIELD(overlap), CHOICES("auto", "on", "off"),
     .sync_only = 1,
     VALUES(0, 1, -1), .sdef = "auto",
     .help = "sync, in one process and across ranks: sum (and send) gradient buckets while "
             "the backward runs (auto: on for GPUs, off for CPU devices)",
     .ranks = TRAIN_RANKS_OWN /* the same collectives either way; auto differs by device */},
    {"--text", "FILE", TRAIN_OPT_STRING, FIELD(text), .section = "charlm only",
     .help = "training text; the last 10% is the validation part",
     .def_note = "the shipped Pride and Prejudice",
     .ranks = TRAIN_RANKS_OWN /* a path on each machine; its contents are compared */},
    {"--context", "N", TRAIN_OPT_INT, FIELD(context), .lo = 1, .hi = 1048576, .idef = 64,
     .help = "characters per window"},
    {"--width", "N", TRAIN_OPT_INT, FIELD(width), .lo = 1, .hi = 1048576, .idef = 64,
     .help = "model width"},
    {"--layers", "N", TRAIN_OPT_INT, FIELD(layers), .lo = 1, .hi = 1048576, .idef = 2,
     .help = "transformer blocks"},
    {"--heads", "N", TRAIN_OPT_INT, FIELD(heads), .lo = 1, .hi = 65536, .idef = 4,
     .help = "attention heads (must divide --width)"},
    {"--norm", "layer|rms", TRAIN_OPT_CHOICE, FIELD(rms_norm), CHOICES("layer", "rms"),
     VALUES(0, 1), .sdef = "layer", .help = "normalization of each block (rms: RMSNorm)"},
    {"--act", "gelu|silu", TRAIN_OPT_CHOICE, FIELD(silu), CHOICES("gelu", "silu"),
     VALUES(0, 1), .sdef = "gelu", .help = "activation of each block's MLP"},
    {"--eval-every", "N", TRAIN_OPT_INT, FIELD(eval_every), .lo = 0, .hi = 1e15, .idef = 500,
     .help = "validation loss every N steps (0: at the end only)",
     .ranks = TRAIN_RANKS_OWN /* the chief evaluates */},
    {"--sample", "N", TRAIN_OPT_INT, FIELD(sample), .lo = 0, .hi = 1000000, .idef = 200,
     .help = "characters sampled at the end",
     .ranks = TRAIN_RANKS_OWN /* the chief samples */},
    {"--temperature", "T", TRAIN_OPT_REAL, FIELD(temperature), .lo = 0, .hi = 100,
     .rdef = 0.8, .help = "sampling temperature (0: most likely)",
     .ranks = TRAIN_RANKS_OWN /* the chief samples */},
};
const size_t train_option_count = sizeof train_options / sizeof train_options[0];
_Static_assert(sizeof train_options / sizeof train_options[0] <= TRAIN_MAX_OPTIONS,
               "train_ranks.c exchanges at most TRAIN_MAX_OPTIONS options: raise it");

static void *field(train_args *a, const train_option *o)
{
    return (char *)a + o->offset;
}

static void set_int(train_args *a, const train_option *o, uint64_t v)
{
    if (o->size == sizeof(uint64_t))
        *(uint64_t *)field(a, o) = v;
    else
        *(uint32_t *)field(a, o) = (uint32_t)v;
}

static void set_real(train_args *a, const train_option *o, double v)
{
    if (o->size == sizeof(double))
        *(double *)field(a, o) = v;
    else
        *(float *)field(a, o) = (float)v;
}

static int choice_index(const train_option *o, const char *v)
{
    for (int i = 0; o->choices[i]; i++)
        if (strcmp(o->choices[i], v) == 0)
            return i;
    return -1;
}

static void set_choice(train_args *a, const train_option *o, int i)
{
    if (o->values)
        *(int *)field(a, o) = o->values[i];
    else
        *(const char **)field(a, o) = o->choices[i];
}

void train_args_defaults(train_args *a)
{
    memset(a, 0, sizeof *a);
    for (size_t i = 0; i < train_option_count; i++) {
        const train_option *o = &train_options[i];
        switch (o->type) {
        case TRAIN_OPT_INT: set_int(a, o, o->idef); break;
        case TRAIN_OPT_REAL: set_real(a, o, o->rdef); break;
        case TRAIN_OPT_CHOICE:
            if (o->sdef)
                set_choice(a, o, choice_index(o, o->sdef));
            break;
        default: break;
        }
    }
    a->widths[0] = 256, a->widths[1] = 128, a->n_widths = 2; /* --hidden's default */
}

const train_option *train_option_find(const char *name)
{
    for (size_t i = 0; i < train_option_count; i++)
        if (strcmp(train_options[i].name, name) == 0)
            return &train_options[i];
    return NULL;
}

/* A range as text: "1 to 64", "> 0 and <= 1e+06", "0 and < 1". */
static void range_text(const train_option *o, char *buf, size_t n)
{
    if (o->type == TRAIN_OPT_REAL && (o->lo_open || o->hi_open))
        snprintf(buf, n, "%s %g and %s %g", o->lo_open ? ">" : ">=", o->lo,
                 o->hi_open ? "<" : "<=", o->hi);
    else if (o->type == TRAIN_OPT_REAL)
        snprintf(buf, n, "%g to %g", o->lo, o->hi);
    else /* whole numbers, exactly */
        snprintf(buf, n, "%llu to %llu", (unsigned long long)o->lo,
                 o->hi >= 18446744073709551615.0 ? 18446744073709551615ull
                                                  : (unsigned long long)o->hi);
}

static int in_range(const train_option *o, double v)
{
    return (o->lo_open ? v > o->lo : v >= o->lo) && (o->hi_open ? v < o->hi : v <= o->hi);
}

void train_option_text(const train_args *a, const train_option *o, char *buf, size_t n)
{
    const void *f = (const char *)a + o->offset;
    if (o->ranks == TRAIN_RANKS_GIVEN) { /* a string option: only whether it is there */
        snprintf(buf, n, "%s", *(const char *const *)f ? "given" : "not given");
        return;
    }
    switch (o->type) {
    case TRAIN_OPT_FLAG: snprintf(buf, n, "%s", *(const int *)f ? "on" : "off"); return;
    case TRAIN_OPT_STRING: {
        const char *v = *(const char *const *)f;
        snprintf(buf, n, v ? "%s" : "(not given)", v ? v : "");
        return;
    }
    case TRAIN_OPT_CHOICE:
        if (!o->values) {
            const char *v = *(const char *const *)f;
            snprintf(buf, n, "%s", v ? v : "default");
            return;
        }
        for (int i = 0; o->choices[i]; i++)
            if (o->values[i] == *(const int *)f) {
                snprintf(buf, n, "%s", o->choices[i]);
                return;
            }
        snprintf(buf, n, "%d", *(const int *)f);
        return;
    case TRAIN_OPT_INT:
        snprintf(buf, n, "%llu", (unsigned long long)(o->size == sizeof(uint64_t)
                                                         ? *(const uint64_t *)f
                                                         : *(const uint32_t *)f));
        return;
    case TRAIN_OPT_REAL: {
        double x = o->size == sizeof(double) ? *(const double *)f : *(const float *)f;
        if (o->scale)
            x /= o->scale;
        if (!in_range(o, x)) /* a per-model default, chosen later (--lr's -1) */
            snprintf(buf, n, "default");
        else
            snprintf(buf, n, o->size == sizeof(double) ? "%.15g" : "%.7g", x);
        return;
    }
    case TRAIN_OPT_WIDTHS: {
        size_t len = 0;
        buf[0] = '\0';
        for (uint32_t i = 0; i < a->n_widths && len < n; i++)
            len += (size_t)snprintf(buf + len, n - len, "%s%u", i ? "," : "", a->widths[i]);
        return;
    }
    }
    snprintf(buf, n, "?");
}

uint64_t train_option_hash(const train_args *a, const train_option *o)
{
    const void *f = (const char *)a + o->offset;
    const char *str = NULL;
    uint64_t h = train_hash(0, o->name, strlen(o->name));
    if (o->ranks == TRAIN_RANKS_GIVEN)
        return train_hash(h, *(const char *const *)f ? "1" : "0", 1);
    switch (o->type) {
    case TRAIN_OPT_STRING: str = *(const char *const *)f; break;
    case TRAIN_OPT_CHOICE:
        if (!o->values)
            str = *(const char *const *)f;
        else
            h = train_hash(h, f, o->size);
        break;
    case TRAIN_OPT_WIDTHS:
        h = train_hash(h, &a->n_widths, sizeof a->n_widths);
        return train_hash(h, a->widths, a->n_widths * sizeof a->widths[0]);
    default: /* FLAG, INT, REAL: the field's bits, exactly */
        return train_hash(h, f, o->size);
    }
    if (str) /* a string, or a choice's name: its text; absent hashes apart from "" */
        return train_hash(train_hash(h, "+", 1), str, strlen(str));
    return h;
}

uint64_t train_hash(uint64_t h, const void *data, size_t n)
{
    const unsigned char *p = data;
    if (!h)
        h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

/* One option's value into a; returns 0 (message printed) if it is not valid. */
static int set_value(const train_option *o, const char *v, train_args *a)
{
    char range[96];
    range_text(o, range, sizeof range);
    switch (o->type) {
    case TRAIN_OPT_STRING:
        *(const char **)field(a, o) = v;
        return 1;
    case TRAIN_OPT_CHOICE: {
        int i = choice_index(o, v);
        if (i < 0) {
            fprintf(stderr, "vkt train: %s: unknown %s '%s' (accepted:", o->name, o->name + 2, v);
            for (int k = 0; o->choices[k]; k++)
                fprintf(stderr, "%s %s", k ? "," : "", o->choices[k]);
            fprintf(stderr, ")\n");
            return 0;
        }
        set_choice(a, o, i);
        return 1;
    }
    case TRAIN_OPT_INT: {
        uint64_t n;
        if (!cli_parse_uint(v, 0, UINT64_MAX, &n)) {
            fprintf(stderr, "vkt train: %s takes a whole number from %s, not '%s'\n", o->name,
                    range, v);
            return 0;
        }
        if ((double)n < o->lo || (double)n > o->hi) {
            fprintf(stderr, "vkt train: %s takes %s, not %s\n", o->name, range, v);
            return 0;
        }
        set_int(a, o, n);
        return 1;
    }
    case TRAIN_OPT_REAL: {
        char *end;
        errno = 0;
        double x = strtod(v, &end);
        if (end == v || *end != '\0' || errno == ERANGE || !isfinite(x) || *v == ' ' ||
            *v == '\t') {
            fprintf(stderr, "vkt train: %s takes a finite number %s%s, not '%s'\n", o->name,
                    o->lo_open || o->hi_open ? "" : "from ", range, v);
            return 0;
        }
        if (!in_range(o, x)) {
            fprintf(stderr, "vkt train: %s takes a number %s%s, not %s\n", o->name,
                    o->lo_open || o->hi_open ? "" : "from ", range, v);
            return 0;
        }
        set_real(a, o, o->scale ? x * o->scale : x);
        return 1;
    }
    case TRAIN_OPT_WIDTHS: {
        uint32_t w[8], n = 0;
        const char *s = v;
        char num[32];
        while (1) {
            size_t len = strcspn(s, ",");
            uint64_t x;
            if (n == 8 || len == 0 || len >= sizeof num)
                break;
            memcpy(num, s, len);
            num[len] = '\0';
            if (!cli_parse_uint(num, (uint64_t)o->lo, (uint64_t)o->hi, &x))
                break;
            w[n++] = (uint32_t)x;
            if (s[len] == '\0') {
                memcpy(a->widths, w, sizeof w);
                a->n_widths = n;
                return 1;
            }
            s += len + 1;
        }
        fprintf(stderr, "vkt train: %s takes 1 to 8 widths from %s separated by commas, such "
                "as 256,128, not '%s'\n", o->name, range, v);
        return 0;
    }
    case TRAIN_OPT_FLAG:
        break;
    }
    return 0;
}

/* A VKT_DEVICES list longer than the contexts the run makes (stages x copies) would leave
 * devices unused, silently: refused instead (README, "Devices and replicas"). A user who
 * lists devices means them to be used, and a leftover one is most often a typo or a
 * misread layout (copy d's stage s on entry d * P + s), which a warning in a long log
 * would let cost a device for the whole run. A shorter list repeats (VKT_DEVICES=0
 * --replicas 4: device 0 four times). Without --replicas or --pipeline the library makes
 * one replica per entry; a malformed list is left to the library's message. */
static int devices_all_used(const train_args *a)
{
    const char *env = getenv("VKT_DEVICES");
    uint32_t dev[VKT_MAX_REPLICAS], k = 0, P = a->pipeline ? a->pipeline : 1;
    if (!env || !*env || (!a->replicas && P < 2) ||
        vkt_parse_device_list(env, dev, VKT_MAX_REPLICAS, &k) != VKT_OK)
        return 1;
    uint32_t D = a->replicas ? a->replicas : k / P ? k / P : 1;
    if (k <= (uint64_t)D * P)
        return 1;
    if (!a->replicas)
        fprintf(stderr, "vkt train: VKT_DEVICES lists %u devices, not a multiple of --pipeline "
                "%u: %u cop%s of %u stages would leave %u unused; list a multiple of %u "
                "devices (copy d's stage s on entry d x %u + s), or give --replicas\n", k, P, D,
                D == 1 ? "y" : "ies", P, k - D * P, P, P);
    else if (P > 1)
        fprintf(stderr, "vkt train: VKT_DEVICES lists %u devices, more than the %u that "
                "--replicas %u x --pipeline %u use: %u would be left unused; list at most %u, "
                "or raise --replicas\n", k, D * P, D, P, k - D * P, D * P);
    else
        fprintf(stderr, "vkt train: VKT_DEVICES lists %u devices, more than --replicas %u "
                "uses: %u would be left unused; list at most %u, or raise --replicas (or leave "
                "it out: one replica per entry)\n", k, D, k - D, D);
    return 0;
}

/* The checks between options, and the defaults that depend on the model. */
static int finish(train_args *a)
{
    int cnn = strcmp(a->model, "cnn") == 0, lm = strcmp(a->model, "charlm") == 0;
    /* Defaults per model (measured on lavapipe: README, "Models"). */
    if (!a->optimizer)
        a->optimizer = lm ? "adamw" : "momentum";
    if (!a->batch_given)
        a->batch = cnn ? 64 : lm ? 32 : 128;
    if (!a->epochs_given)
        a->epochs = cnn ? 12 : 10;
    if (lm && !a->max_steps)
        a->max_steps = 3000;
    if (lm && a->width % a->heads) {
        fprintf(stderr, "vkt train: --heads (%u) must divide --width (%u)\n", a->heads,
                a->width);
        return 0;
    }
    if (lm && ((a->async && a->replicas > 1) || a->balance || a->slow_seconds > 0)) {
        fprintf(stderr, "vkt train: --model charlm trains with sync replicas (vkt_trainer_step): "
                "--mode async, --balance and --slow-replica-ms are not available for it\n");
        return 0;
    }
    if (!lm && a->lm_option) { /* else silently unused: --eval-every 10 on an MLP */
        fprintf(stderr, "vkt train: %s applies to --model charlm (not --model %s)\n",
                a->lm_option, a->model);
        return 0;
    }
    if (!a->micro_given)
        a->micro_batches = a->pipeline > 1 ? 4 : 1;
    if ((a->pipeline > 1 || a->micro_batches > 1) &&
        (a->scale_lr || a->balance || a->slow_seconds > 0)) {
        fprintf(stderr, "vkt train: --pipeline and --micro-batches train without --scale-lr, "
                "--balance or --slow-replica-ms\n");
        return 0;
    }
    if (a->init_map && !a->init_from) {
        fprintf(stderr, "vkt train: --init-map applies to --init-from\n");
        return 0;
    }
    /* The sync replicas' options (the table's sync_only): the reducer's buckets and
     * overlap (reduce_host.c, reduce_world.c) and the ranks' parameter hash
     * (reduce_world.c). Async copies differ by design and push without a reducer; pipeline
     * stages and micro-batches sum their gradients at the step's meeting (pipe_sched.c),
     * not in buckets, and are not compared: given there, these would be silently unused. */
    if (a->sync_option && (a->async || a->pipeline > 1 || a->micro_batches > 1)) {
        fprintf(stderr, "vkt train: %s applies to --mode sync without --pipeline or "
                "--micro-batches\n", a->sync_option);
        return 0;
    }
    if (a->bounded && !a->async) {
        fprintf(stderr, "vkt train: --staleness applies to --mode async\n");
        return 0;
    }
    return devices_all_used(a);
}

/* Whether `o` is in the table's "charlm only" section (a section runs from the option
 * that names it to the next that names one). */
static int charlm_only(const train_option *o)
{
    const char *section = NULL;
    for (size_t i = 0; i < train_option_count && &train_options[i] <= o; i++)
        if (train_options[i].section)
            section = train_options[i].section;
    return section && strcmp(section, "charlm only") == 0;
}

int train_args_parse(int argc, char **argv, train_args *a)
{
    train_args_defaults(a);
    for (int i = 1; i < argc; i++) {
        const char *k = argv[i];
        if (strcmp(k, "--help") == 0 || strcmp(k, "-h") == 0) {
            train_usage(stdout);
            return 3;
        }
        const train_option *o = train_option_find(k);
        if (!o) {
            fprintf(stderr, "vkt train: unknown option '%s' (--help lists them)\n", k);
            return 2;
        }
        if (o->given)
            *(int *)((char *)a + o->given - 1) = 1;
        if (!a->lm_option && charlm_only(o))
            a->lm_option = o->name;
        if (!a->sync_option && o->sync_only)
            a->sync_option = o->name;
        if (o->type == TRAIN_OPT_FLAG) {
            *(int *)field(a, o) = 1;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "vkt train: %s needs a value (%s)\n", k, o->arg);
            return 2;
        }
        if (!set_value(o, argv[++i], a))
            return 2;
    }
    return finish(a) ? 0 : 2;
}

/* Prints text from column `col`, wrapped before column 90, continuing at column `indent`. */
static void wrap_at(FILE *f, const char *text, int col, int indent)
{
    while (*text) {
        size_t word = strcspn(text, " ");
        if (col > indent && col + 1 + (int)word > 90) {
            fprintf(f, "\n%*s", indent, "");
            col = indent;
        } else if (col > indent) {
            fputc(' ', f);
            col++;
        }
        fprintf(f, "%.*s", (int)word, text);
        col += (int)word;
        text += word;
        while (*text == ' ')
            text++;
    }
}

static void wrap(FILE *f, const char *text, int col) { wrap_at(f, text, col, 22); }

void train_usage(FILE *f)
{
    fprintf(f, "usage: vkt train [options]\n");
    for (size_t i = 0; i < train_option_count; i++) {
        const train_option *o = &train_options[i];
        if (o->section)
            fprintf(f, "%s:\n", o->section);
        char head[64], text[512], def[96] = "";
        snprintf(head, sizeof head, "  %s%s%s", o->name, o->arg ? " " : "", o->arg ? o->arg : "");
        if (o->def_note)
            snprintf(def, sizeof def, " (default %s)", o->def_note);
        else if (o->type == TRAIN_OPT_INT)
            snprintf(def, sizeof def, " (default %llu)", (unsigned long long)o->idef);
        else if (o->type == TRAIN_OPT_REAL)
            snprintf(def, sizeof def, " (default %g)", o->rdef);
        else if (o->type == TRAIN_OPT_CHOICE && o->sdef)
            snprintf(def, sizeof def, " (default %s)", o->sdef);
        if (o->type == TRAIN_OPT_INT || o->type == TRAIN_OPT_REAL) {
            char range[96];
            range_text(o, range, sizeof range);
            snprintf(text, sizeof text, "%s; %s%s", o->help, range, def);
        } else if (o->type == TRAIN_OPT_CHOICE && !strchr(o->arg, '|')) {
            char list[128] = "";
            for (int k = 0; o->choices[k]; k++)
                snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", k ? "|" : "",
                         o->choices[k]);
            snprintf(text, sizeof text, "%s: %s%s", o->help, list, def);
        } else {
            snprintf(text, sizeof text, "%s%s", o->help, def);
        }
        fputs(head, f);
        int col = (int)strlen(head);
        if (col >= 21) {
            fprintf(f, "\n%22s", "");
            col = 22;
        } else {
            fprintf(f, "%*s", 22 - col, "");
            col = 22;
        }
        wrap(f, text, col);
        fputc('\n', f);
    }
    fprintf(f, "  --help              this text\n"
               "Numbers are whole (no trailing text), finite and in the range shown; a bad value "
               "exits with status 2.\n");
    /* Across ranks, from the table's `ranks` column: the options that may differ. */
    char own[1024] = "", given[256] = "";
    for (size_t i = 0; i < train_option_count; i++) {
        const train_option *o = &train_options[i];
        char *l = o->ranks == TRAIN_RANKS_OWN ? own : o->ranks == TRAIN_RANKS_GIVEN ? given : NULL;
        size_t cap = l == own ? sizeof own : sizeof given;
        if (l)
            snprintf(l + strlen(l), cap - strlen(l), "%s%s", *l ? ", " : "", o->name);
    }
    char text[1536];
    snprintf(text, sizeof text, "Under mpirun every rank takes the same options (compared at "
             "start-up: a difference exits with status 2, naming the option), except %s (each "
             "rank's own; the files' contents are compared) and %s (given on every rank or on "
             "none).", own, given);
    wrap_at(f, text, 0, 0);
    fputc('\n', f);
}
