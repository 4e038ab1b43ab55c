/* bench_pipeline: the pipeline bubble (vkt_pipeline, docs/model_parallel.md) against the
 * ideal (P-1)/(m+P-1). An MLP of `layers` hidden layers [batch, width] split evenly over
 * P stages (layer l on stage l * P / layers; the loss on the last), trained for `steps`
 * steps (after 2 warm-up steps) at m micro-batches, pipelined and sequential (one stage
 * at a time). For each (P, m) it prints the median step time of both, each stage's busy
 * time (its forwards, backwards and update: the device work driven by its thread), and
 * the measured bubble 1 - mean_s(busy_s) / step: the fraction of the step a stage waits.
 *
 * Usage: bench_pipeline [--stages 2,3] [--micro 1,2,4,8] [--width 256] [--layers 6]
 *                       [--batch 256] [--steps 5]
 * Not a ctest: timings depend on the machine. On a CPU device (lavapipe) the stages share
 * the host's cores, so overlap is bounded by the cores free. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vkt.h"

#define MAX_LIST 8

static uint32_t parse_list(const char *s, uint32_t *out)
{
    uint32_t n = 0;
    while (*s && n < MAX_LIST) {
        out[n++] = (uint32_t)strtoul(s, (char **)&s, 10);
        if (*s == ',')
            s++;
    }
    return n;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct run_result {
    double step, busy_mean, busy[VKT_MAX_STAGES];
} run_result;

static int run(vkt_instance *inst, uint32_t P, uint32_t m, int sequential, uint32_t width,
               uint32_t layers, uint32_t batch, uint32_t steps, run_result *out)
{
    vkt_graph *g = NULL;
    vkt_graph_options go = {.seed = 5};
    vkt_graph_create(&go, &g);
    vkt_shape xs = {2, {batch, width}}, ws = {2, {width, width}}, bs = {1, {width}};
    vkt_init he = {.kind = VKT_INIT_HE};
    vkt_tensor *x = vkt_input(g, "x", &xs), *y = vkt_input_labels(g, "y", batch), *h = x;
    for (uint32_t l = 0; l < layers; l++) {
        vkt_graph_set_stage(g, l * P / layers);
        h = vkt_relu(g, vkt_linear(g, h, vkt_param(g, NULL, &ws, &he), vkt_param(g, NULL, &bs, NULL)));
    }
    vkt_tensor *loss = vkt_softmax_cross_entropy(g, h, y);
    uint32_t dev[VKT_MAX_STAGES] = {0};
    vkt_pipeline_options po = {.batch = batch, .micro_batches = m, .stages = P, .devices = dev,
                               .sequential = sequential};
    po.optimizer.lr = 0.01f;
    vkt_pipeline *p = NULL;
    if (vkt_pipeline_create(inst, g, loss, &po, &p) != VKT_OK) {
        fprintf(stderr, "bench_pipeline: %s\n", vkt_last_error());
        vkt_graph_destroy(g);
        return 1;
    }
    float *xd = malloc((size_t)batch * width * sizeof *xd);
    int32_t *yd = malloc(batch * sizeof *yd);
    for (uint64_t i = 0; i < (uint64_t)batch * width; i++)
        xd[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
    for (uint32_t i = 0; i < batch; i++)
        yd[i] = (int32_t)(i % width);
    vkt_feed f[2] = {{x, xd}, {y, yd}};
    double *t = calloc(steps, sizeof *t), *busy[VKT_MAX_STAGES];
    int rc = 0;
    for (uint32_t s = 0; s < P; s++)
        busy[s] = calloc(steps, sizeof *busy[s]);
    for (uint32_t i = 0; i < steps + 2 && rc == 0; i++) {
        if (vkt_pipeline_step(p, f, 2, NULL) != VKT_OK) {
            fprintf(stderr, "bench_pipeline: %s\n", vkt_pipeline_errmsg(p));
            rc = 1;
        }
        if (i < 2 || rc)
            continue;
        t[i - 2] = vkt_pipeline_step_seconds(p);
        for (uint32_t s = 0; s < P; s++) {
            vkt_pipeline_stage_stats ss;
            vkt_pipeline_stage_stats_get(p, s, &ss);
            busy[s][i - 2] = ss.busy_seconds;
        }
    }
    if (rc == 0) {
        qsort(t, steps, sizeof *t, cmp_double);
        out->step = t[steps / 2];
        out->busy_mean = 0;
        for (uint32_t s = 0; s < P; s++) {
            qsort(busy[s], steps, sizeof *busy[s], cmp_double);
            out->busy[s] = busy[s][steps / 2];
            out->busy_mean += out->busy[s] / P;
        }
    }
    for (uint32_t s = 0; s < P; s++)
        free(busy[s]);
    free(t);
    free(xd);
    free(yd);
    vkt_pipeline_destroy(p);
    vkt_graph_destroy(g);
    return rc;
}

int main(int argc, char **argv)
{
    uint32_t stages[MAX_LIST] = {2, 3}, micro[MAX_LIST] = {1, 2, 4, 8};
    uint32_t n_stages = 2, n_micro = 4, width = 256, layers = 6, batch = 256, steps = 5;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--stages"))
            n_stages = parse_list(argv[i + 1], stages);
        else if (!strcmp(argv[i], "--micro"))
            n_micro = parse_list(argv[i + 1], micro);
        else if (!strcmp(argv[i], "--width"))
            width = (uint32_t)atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--layers"))
            layers = (uint32_t)atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--batch"))
            batch = (uint32_t)atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--steps"))
            steps = (uint32_t)atoi(argv[i + 1]);
        else {
            fprintf(stderr, "bench_pipeline: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (steps == 0 || layers == 0 || width == 0 || batch == 0) {
        fprintf(stderr, "bench_pipeline: steps, layers, width and batch must be > 0\n");
        return 2;
    }
    vkt_instance *inst = NULL;
    if (vkt_instance_create(NULL, &inst) != VKT_OK) {
        fprintf(stderr, "bench_pipeline: %s\n", vkt_last_error());
        return 1;
    }
    printf("MLP %u x [%u, %u] layers, batch %u, median of %u steps\n", layers, batch, width,
           batch, steps);
    printf("%2s %3s %12s %12s %8s %9s %8s  busy per stage (ms)\n", "P", "m", "pipelined ms",
           "sequential ms", "speedup", "bubble", "ideal");
    for (uint32_t a = 0; a < n_stages; a++)
        for (uint32_t b = 0; b < n_micro; b++) {
            uint32_t P = stages[a], m = micro[b];
            if (m == 0 || batch % m || P == 0 || P > layers || P > VKT_MAX_STAGES)
                continue;
            run_result pr, sr;
            if (run(inst, P, m, 0, width, layers, batch, steps, &pr) ||
                run(inst, P, m, 1, width, layers, batch, steps, &sr))
                return 1;
            printf("%2u %3u %12.2f %12.2f %8.2f %9.3f %8.3f ", P, m, pr.step * 1e3,
                   sr.step * 1e3, sr.step / pr.step, 1 - pr.busy_mean / pr.step,
                   (double)(P - 1) / (m + P - 1));
            for (uint32_t s = 0; s < P; s++)
                printf(" %.1f", pr.busy[s] * 1e3);
            printf("\n");
        }
    vkt_instance_destroy(inst);
    return 0;
}
