/* vkt bench layers: the device time of every op's forward and backward in one training
 * step of the CNN (`vkt train --model cnn`) and of the character transformer (`--model
 * charlm`), at their example sizes or those given (--batch; the transformer's --width,
 * --layers, --heads, --context: bench/gpu.sh times the attention at long contexts and
 * wide heads so), from vkt_model_profile, beside the measured wall time of a whole step
 * (vkt_model_forward_backward; no optimizer) and the planned memory (vkt_model_stats).
 * --plan-only prints the planned memory alone, without running a step: what a shape too
 * slow to run here (the char LM at batch 64 on lavapipe) would take, with the
 * kernel variants the device (or VKT_KERNELS) chooses. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "models.h"

#define MAX_STEPS 512

typedef struct layers_args {
    uint32_t runs, steps;
    int cnn, lm;
    uint32_t batch;        /* 0: the model's example batch (CNN 64, char LM 32) */
    cli_lm_shape lm_shape; /* vocab 75: the shipped text's characters */
    vkt_dtype precision;   /* --precision: the models' autocast type (fp32: none) */
    int plan_only;         /* --plan-only: the memory line, no step run */
} layers_args;

/* Random inputs: pixels in [0,1) or token ids < vocab, labels < classes. */
static vkt_status feed_random(vkt_model *m, const cli_model *cm, uint32_t classes, int ids)
{
    vkt_shape xs, ls;
    vkt_status st = vkt_model_shape(m, cm->input, &xs);
    if (st == VKT_OK)
        st = vkt_model_shape(m, cm->labels, &ls);
    if (st != VKT_OK)
        return st;
    uint64_t nx = 1, nl = 1, rng = 12345;
    for (uint32_t d = 0; d < xs.ndim; d++)
        nx *= xs.dims[d];
    for (uint32_t d = 0; d < ls.ndim; d++)
        nl *= ls.dims[d];
    float *x = malloc(nx * sizeof *x);
    int32_t *l = malloc(nl * sizeof *l);
    if (!x || !l) {
        free(x);
        free(l);
        return VKT_ERROR_OUT_OF_MEMORY;
    }
    for (uint64_t i = 0; i < nx; i++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = ids ? (float)((rng >> 33) % classes) : (float)(rng >> 40) / 16777216.0f;
    }
    for (uint64_t i = 0; i < nl; i++)
        l[i] = (int32_t)(i * 7 % classes);
    st = vkt_model_set_input(m, cm->input, x, nx);
    if (st == VKT_OK)
        st = vkt_model_set_input(m, cm->labels, l, nl);
    free(x);
    free(l);
    return st;
}

static void print_table(const char *title, const vkt_op_timing *t, uint32_t n, double wall_ms)
{
    double fwd = 0, bwd = 0;
    for (uint32_t k = 0; k < n; k++)
        *(t[k].backward ? &bwd : &fwd) += t[k].microseconds / 1e3;
    printf("%s: step %.2f ms wall (forward + backward, no optimizer); device time of the ops "
           "%.2f ms: forward %.2f, backward %.2f\n", title, wall_ms, fwd + bwd, fwd, bwd);
    printf("  %-22s %-26s %11s %11s %10s\n", "op", "tensor", "forward_ms", "backward_ms",
           "dispatches");
    for (uint32_t k = 0; k < n; k++) {
        if (t[k].backward)
            continue;
        double b = 0;
        uint32_t disp = t[k].dispatches;
        for (uint32_t j = 0; j < n; j++)
            if (t[j].backward && strcmp(t[j].name, t[k].name) == 0) {
                b += t[j].microseconds / 1e3;
                disp += t[j].dispatches;
            }
        printf("  %-22s %-26s %11.3f %11.3f %10u\n", t[k].op, t[k].name, t[k].microseconds / 1e3,
               b, disp);
    }
    fflush(stdout);
}

/* --plan-only: what the arena holds at its peak, by op, role and type (vkt_model_plan_peak). */
static int print_peak(vkt_model *m)
{
    vkt_plan_peak pk;
    vkt_plan_group g[64];
    vkt_status st = vkt_model_plan_peak(m, &pk, g, 64);
    if (st != VKT_OK)
        return cli_fail("plan peak", st, vkt_model_errmsg(m));
    printf("  peak: %.2f MB live at the %s of '%s', by op, role and type:\n",
           pk.live_bytes / 1e6, pk.backward ? "backward" : "forward", pk.name);
    uint64_t rest = 0;
    for (uint32_t k = 0; k < pk.groups; k++) {
        if (k < 64)
            printf("    %-26s %-10s %-5s %5u values %10.2f MB\n", g[k].op, g[k].role,
                   vkt_dtype_name(g[k].dtype), g[k].values, g[k].bytes / 1e6);
        else
            rest++;
    }
    if (rest)
        printf("    (%llu smaller groups)\n", (unsigned long long)rest);
    return 0;
}

static int bench_model(vkt_instance *inst, const char *title, cli_model *cm, uint32_t classes,
                       int ids, const layers_args *a)
{
    vkt_context *ctx = NULL;
    vkt_model *m = NULL;
    vkt_op_timing *t = calloc(MAX_STEPS, sizeof *t);
    uint32_t n = 0;
    int rc = 1;
    vkt_context_options co = {0};
    vkt_status st = t ? vkt_context_create(inst, &co, &ctx) : VKT_ERROR_OUT_OF_MEMORY;
    if (st == VKT_OK)
        st = vkt_model_create(ctx, cm->graph, cm->loss,
                              &(vkt_model_options){.precision = a->precision}, &m);
    if (st == VKT_OK)
        st = feed_random(m, cm, classes, ids);
    double t0 = 0;
    for (uint32_t i = 0; st == VKT_OK && !a->plan_only && i <= a->steps; i++) {
        if (i == 1)
            t0 = cli_now(); /* the first step records the command buffer */
        st = vkt_model_forward_backward(m);
    }
    double wall_ms = (cli_now() - t0) * 1e3 / a->steps;
    vkt_model_stats ms = {0};
    if (st == VKT_OK)
        st = vkt_model_stats_get(m, &ms);
    if (st == VKT_OK && !a->plan_only)
        st = vkt_model_profile(m, a->runs, t, MAX_STEPS, &n);
    if (st == VKT_OK) {
        if (a->plan_only)
            printf("%s: planned, not run\n", title);
        else
            print_table(title, t, n, wall_ms);
        printf("  memory: parameters %.2f MB, activations %.2f MB planned (%.2f MB without "
               "reuse); %u dispatches per step\n", ms.param_bytes / 1e6,
               ms.activation_bytes / 1e6, ms.activation_no_reuse_bytes / 1e6,
               ms.step_dispatches);
        rc = a->plan_only ? print_peak(m) : 0;
    } else {
        cli_fail(title, st, m ? vkt_model_errmsg(m) : vkt_last_error());
    }
    vkt_model_destroy(m);
    vkt_context_destroy(ctx);
    free(t);
    return rc;
}

static int layers_usage(void)
{
    fprintf(stderr, "usage: vkt bench layers [--model cnn|charlm] [--runs N] [--steps N] "
            "[--batch B]\n"
            "                        [--precision fp32|fp16|bf16] [--plan-only]\n"
            "                        [--width N] [--layers N] [--heads N] [--context N] "
            "(charlm)\n");
    return 2;
}

int cmd_bench_layers(int argc, char **argv)
{
    layers_args a = {.runs = 6, .steps = 10, .cnn = 1, .lm = 1,
                     .lm_shape = {75, 64, 64, 2, 4, 0.0f, 0, 0}};
    int lm_opt = 0;
    for (int i = 0; i < argc; i++) {
        uint64_t n = 0;
        const char *o = argv[i];
        /* the transformer's shape: each option's field and bound */
        struct {
            const char *name;
            uint32_t *field;
            uint64_t hi;
        } const dims[] = {{"--width", &a.lm_shape.width, 65536},
                          {"--layers", &a.lm_shape.layers, 4096},
                          {"--heads", &a.lm_shape.heads, 65536},
                          {"--context", &a.lm_shape.context, 1048576}};
        size_t d = 0;
        while (d < sizeof dims / sizeof dims[0] && strcmp(o, dims[d].name) != 0)
            d++;
        if (d < sizeof dims / sizeof dims[0]) {
            if (i + 1 >= argc || !cli_parse_uint(argv[i + 1], 1, dims[d].hi, &n)) {
                fprintf(stderr, "vkt bench layers: %s takes a whole number from 1 to %llu\n",
                        o, (unsigned long long)dims[d].hi);
                return 2;
            }
            *dims[d].field = (uint32_t)n, i++, lm_opt = 1;
        } else if (strcmp(o, "--batch") == 0) {
            if (i + 1 >= argc || !cli_parse_uint(argv[i + 1], 1, 1u << 20, &n)) {
                fprintf(stderr, "vkt bench layers: --batch takes a whole number from 1 to "
                        "1048576\n");
                return 2;
            }
            a.batch = (uint32_t)n, i++;
        } else if (strcmp(o, "--runs") == 0 && i + 1 < argc &&
                   cli_parse_uint(argv[i + 1], 1, 1000000, &n))
            a.runs = (uint32_t)n, i++;
        else if (strcmp(o, "--steps") == 0 && i + 1 < argc &&
                 cli_parse_uint(argv[i + 1], 1, 1000000000, &n))
            a.steps = (uint32_t)n, i++;
        else if (strcmp(o, "--precision") == 0) {
            if (i + 1 >= argc || vkt_dtype_from_name(argv[i + 1], &a.precision) != VKT_OK) {
                fprintf(stderr, "vkt bench layers: --precision takes fp32, fp16 or bf16\n");
                return 2;
            }
            i++;
        } else if (strcmp(o, "--plan-only") == 0) {
            a.plan_only = 1;
        } else if (strcmp(o, "--model") == 0 && i + 1 < argc) {
            const char *v = argv[++i];
            a.cnn = strcmp(v, "cnn") == 0;
            a.lm = strcmp(v, "charlm") == 0;
        } else {
            return layers_usage();
        }
    }
    if (a.runs < 2 || a.steps == 0 || (!a.cnn && !a.lm)) {
        fprintf(stderr, "vkt bench layers: --runs >= 2, --steps >= 1, --model cnn or charlm\n");
        return 2;
    }
    if (lm_opt && a.cnn) {
        fprintf(stderr, "vkt bench layers: --width, --layers, --heads and --context shape the "
                "char LM: add --model charlm\n");
        return 2;
    }
    if (a.lm && a.lm_shape.width % a.lm_shape.heads) {
        fprintf(stderr, "vkt bench layers: --heads (%u) must divide --width (%u)\n",
                a.lm_shape.heads, a.lm_shape.width);
        return 2;
    }
    vkt_instance *inst = cli_instance();
    if (!inst)
        return 1;
    int rc = 0;
    cli_model cm = {0};
    char title[160];
    if (a.cnn) {
        uint32_t b = a.batch ? a.batch : 64;
        vkt_status st = cli_build_cnn(&cm, b, 784, 10, 1);
        snprintf(title, sizeof title, "cnn (batch %u, 28x28)", b);
        rc |= st != VKT_OK ? cli_fail("cnn", st, vkt_graph_errmsg(cm.graph))
                           : bench_model(inst, title, &cm, 10, 0, &a);
        vkt_graph_destroy(cm.graph);
    }
    if (a.lm) {
        const cli_lm_shape *s = &a.lm_shape;
        uint32_t b = a.batch ? a.batch : 32;
        memset(&cm, 0, sizeof cm);
        vkt_status st = cli_build_charlm(&cm, b, s, 1);
        snprintf(title, sizeof title, "charlm (batch %u, context %u, width %u, %u layer%s, "
                 "%u heads)", b, s->context, s->width, s->layers, s->layers == 1 ? "" : "s",
                 s->heads);
        rc |= st != VKT_OK ? cli_fail("charlm", st, cm.graph ? vkt_graph_errmsg(cm.graph)
                                                              : vkt_last_error())
                           : bench_model(inst, title, &cm, s->vocab, 1, &a);
        vkt_graph_destroy(cm.graph);
    }
    vkt_instance_destroy(inst);
    return rc;
}
