/* bench_pipeline: the pipeline engine (vkt_pipeline, docs/model_parallel.md) on MLPs of
 * hidden layers [batch, width] -> [batch, width] with relu, the loss on the last stage,
 * each configuration trained pipelined and sequentially (one stage at a time, the
 * reference) by two pipelines of one graph taking their steps in turn, so both see the
 * same load; medians of `steps` steps after 2 warm-ups. Three tables:
 *
 *  1. Bubble: `layers` layers split evenly over P stages (layer l on stage l * P /
 *     layers) at m micro-batches: the step time of both, each stage's busy time (its
 *     forwards, backwards and update: the device work its thread drives) and the
 *     measured bubble 1 - mean_s(busy_s) / step against the ideal (P-1)/(m+P-1).
 *  2. Throughput against the number of stages: one model of `tp_layers` layers (12:
 *     an even split for P = 1, 2, 3, 4) on P stages at m micro-batches; samples per
 *     second pipelined and sequential, and the pipelined rate over P = 1's.
 *  3. A slow stage: 6 layers split evenly over 2 and 3 stages (3,3 and 2,2,2) and with 2
 *     layers moved to stage 0 (5,1 and 4,1,1); each stage's busy time, the step, and the
 *     1F1B model of the step: the slowest stage works m micro-batches back to back, and
 *     the first micro-batch must reach it and the last leave it (fill and drain), so
 *       step ~ m * max_s(t_s) + (sum_s(t_s) - max_s(t_s)),  t_s = busy_s / m,
 *     the busy time per micro-batch (this t_s includes the stage's one update).
 *
 * Usage: bench_pipeline [--stages 2,3] [--micro 1,2,4,8] [--width 256] [--layers 6]
 *                       [--batch 256] [--steps 5] [--tp-stages 1,2,3,4] [--tp-micro 4,8]
 *                       [--tp-layers 12] [--splits 3,3/5,1/2,2,2/4,1,1] [--split-micro 4,8]
 *                       [--tables 123]
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

/* Median of n values (sorts them). */
static double median(double *v, uint32_t n)
{
    qsort(v, n, sizeof *v, cmp_double);
    return v[n / 2];
}

/* Trains an MLP whose stage s holds split[s] hidden layers [batch, width] (P stages) at m
 * micro-batches with two pipelines of the same graph, out[0] pipelined and out[1]
 * sequential, taking their steps in turn (after 2 warm-ups each) so that both see the
 * same load of a shared machine; out: the median step and busy times of each. */
static int run(vkt_instance *inst, uint32_t P, const uint32_t *split, uint32_t m,
               uint32_t width, uint32_t batch, uint32_t steps, run_result out[2])
{
    vkt_graph *g = NULL;
    vkt_graph_options go = {.seed = 5};
    vkt_graph_create(&go, &g);
    vkt_shape xs = {2, {batch, width}}, ws = {2, {width, width}}, bs = {1, {width}};
    vkt_init he = {.kind = VKT_INIT_HE};
    vkt_tensor *x = vkt_input(g, "x", &xs), *y = vkt_input_labels(g, "y", batch), *h = x;
    for (uint32_t s = 0; s < P; s++) {
        vkt_graph_set_stage(g, s);
        for (uint32_t l = 0; l < split[s]; l++)
            h = vkt_relu(g, vkt_linear(g, h, vkt_param(g, NULL, &ws, &he),
                                       vkt_param(g, NULL, &bs, NULL)));
    }
    vkt_tensor *loss = vkt_softmax_cross_entropy(g, h, y);
    uint32_t dev[VKT_MAX_STAGES] = {0};
    vkt_pipeline *p[2] = {NULL, NULL};
    float *xd = malloc((size_t)batch * width * sizeof *xd);
    int32_t *yd = malloc(batch * sizeof *yd);
    double *t[2], *busy[2][VKT_MAX_STAGES];
    int rc = 0;
    for (int k = 0; k < 2; k++) {
        vkt_pipeline_options po = {.batch = batch, .micro_batches = m, .stages = P,
                                   .devices = dev, .sequential = k};
        po.optimizer.lr = 0.01f;
        if (rc == 0 && vkt_pipeline_create(inst, g, loss, &po, &p[k]) != VKT_OK) {
            fprintf(stderr, "bench_pipeline: %s\n", vkt_last_error());
            rc = 1;
        }
        t[k] = calloc(steps, sizeof *t[k]);
        for (uint32_t s = 0; s < P; s++)
            busy[k][s] = calloc(steps, sizeof *busy[k][s]);
    }
    for (uint64_t i = 0; i < (uint64_t)batch * width; i++)
        xd[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
    for (uint32_t i = 0; i < batch; i++)
        yd[i] = (int32_t)(i % width);
    vkt_feed f[2] = {{x, xd}, {y, yd}};
    for (uint32_t i = 0; i < steps + 2 && rc == 0; i++)
        for (int k = 0; k < 2 && rc == 0; k++) {
            if (vkt_pipeline_step(p[k], f, 2, NULL) != VKT_OK) {
                fprintf(stderr, "bench_pipeline: %s\n", vkt_pipeline_errmsg(p[k]));
                rc = 1;
            }
            if (i < 2 || rc)
                continue;
            t[k][i - 2] = vkt_pipeline_step_seconds(p[k]);
            for (uint32_t s = 0; s < P; s++) {
                vkt_pipeline_stage_stats ss;
                vkt_pipeline_stage_stats_get(p[k], s, &ss);
                busy[k][s][i - 2] = ss.busy_seconds;
            }
        }
    for (int k = 0; k < 2; k++) {
        if (rc == 0) {
            out[k].step = median(t[k], steps);
            out[k].busy_mean = 0;
            for (uint32_t s = 0; s < P; s++) {
                out[k].busy[s] = median(busy[k][s], steps);
                out[k].busy_mean += out[k].busy[s] / P;
            }
        }
        for (uint32_t s = 0; s < P; s++)
            free(busy[k][s]);
        free(t[k]);
        vkt_pipeline_destroy(p[k]);
    }
    free(xd);
    free(yd);
    vkt_graph_destroy(g);
    return rc;
}

/* The model's even split of `layers` layers over P stages: layer l on stage l * P / layers. */
static void even_split(uint32_t P, uint32_t layers, uint32_t *split)
{
    memset(split, 0, VKT_MAX_STAGES * sizeof *split);
    for (uint32_t l = 0; l < layers; l++)
        split[l * P / layers]++;
}

typedef struct bench_cfg {
    uint32_t width, batch, steps;
} bench_cfg;

/* Table 1: the measured bubble against the ideal, for each P and m. */
static int table_bubble(vkt_instance *inst, const bench_cfg *c, const uint32_t *stages,
                        uint32_t n_stages, const uint32_t *micro, uint32_t n_micro,
                        uint32_t layers)
{
    printf("\n1. Bubble: MLP %u x [%u, %u] layers split evenly, batch %u, median of %u steps\n",
           layers, c->batch, c->width, c->batch, c->steps);
    printf("%2s %3s %12s %12s %8s %9s %8s  busy per stage (ms)\n", "P", "m", "pipelined ms",
           "sequential ms", "speedup", "bubble", "ideal");
    for (uint32_t a = 0; a < n_stages; a++)
        for (uint32_t b = 0; b < n_micro; b++) {
            uint32_t P = stages[a], m = micro[b], split[VKT_MAX_STAGES];
            if (m == 0 || c->batch % m || P == 0 || P > layers || P > VKT_MAX_STAGES)
                continue;
            even_split(P, layers, split);
            run_result r[2];
            if (run(inst, P, split, m, c->width, c->batch, c->steps, r))
                return 1;
            const run_result pr = r[0], sr = r[1];
            printf("%2u %3u %12.2f %12.2f %8.2f %9.3f %8.3f ", P, m, pr.step * 1e3,
                   sr.step * 1e3, sr.step / pr.step, 1 - pr.busy_mean / pr.step,
                   (double)(P - 1) / (m + P - 1));
            for (uint32_t s = 0; s < P; s++)
                printf(" %.1f", pr.busy[s] * 1e3);
            printf("\n");
        }
    return 0;
}

/* Table 2: samples per second of one model on P = 1, 2, ... stages at each m. */
static int table_throughput(vkt_instance *inst, const bench_cfg *c, const uint32_t *stages,
                            uint32_t n_stages, const uint32_t *micro, uint32_t n_micro,
                            uint32_t layers)
{
    printf("\n2. Throughput: MLP %u x [%u, %u] layers split evenly over P stages, batch %u, "
           "median of %u steps\n", layers, c->batch, c->width, c->batch, c->steps);
    printf("%3s %2s %16s %16s %10s %12s %12s %8s\n", "m", "P", "pipelined smp/s",
           "sequential smp/s", "pipe/seq", "pipe vs P=1", "seq vs P=1", "ideal");
    for (uint32_t b = 0; b < n_micro; b++) {
        double pipe1 = 0, seq1 = 0; /* the rates of this m's first row (P = 1 if listed) */
        for (uint32_t a = 0; a < n_stages; a++) {
            uint32_t P = stages[a], m = micro[b], split[VKT_MAX_STAGES];
            if (m == 0 || c->batch % m || P == 0 || P > layers || P > VKT_MAX_STAGES)
                continue;
            even_split(P, layers, split);
            run_result r[2];
            if (run(inst, P, split, m, c->width, c->batch, c->steps, r))
                return 1;
            const run_result pr = r[0], sr = r[1];
            double pipe = c->batch / pr.step, seq = c->batch / sr.step;
            if (pipe1 == 0) {
                pipe1 = pipe;
                seq1 = seq;
            }
            /* ideal: P stages on P separate devices of P = 1's speed, idle (P-1)/(m+P-1)
             * of the step (recomputation not counted) */
            printf("%3u %2u %16.0f %16.0f %10.2f %12.2f %12.2f %8.2f\n", m, P, pipe, seq,
                   pipe / seq, pipe / pipe1, seq / seq1, (double)P * m / (m + P - 1));
        }
    }
    return 0;
}

/* Table 3: a slow stage; each split of --splits at each m of --split-micro. */
static int table_uneven(vkt_instance *inst, const bench_cfg *c, uint32_t splits[][VKT_MAX_STAGES],
                        const uint32_t *split_p, uint32_t n_splits, const uint32_t *micro,
                        uint32_t n_micro)
{
    printf("\n3. A slow stage: MLP [%u, %u] layers, batch %u, median of %u steps; model = "
           "m * max(t_s) + sum(t_s) - max(t_s), t_s = busy_s / m\n", c->batch, c->width,
           c->batch, c->steps);
    printf("%-10s %3s %12s %12s %12s %10s  busy per stage (ms)\n", "split", "m",
           "pipelined ms", "sequential ms", "model ms", "step/model");
    for (uint32_t k = 0; k < n_splits; k++)
        for (uint32_t b = 0; b < n_micro; b++) {
            uint32_t P = split_p[k], m = micro[b];
            if (m == 0 || c->batch % m)
                continue;
            run_result r[2];
            if (run(inst, P, splits[k], m, c->width, c->batch, c->steps, r))
                return 1;
            const run_result pr = r[0], sr = r[1];
            double max = 0, sum = 0;
            for (uint32_t s = 0; s < P; s++) {
                double t = pr.busy[s] / m;
                sum += t;
                max = t > max ? t : max;
            }
            double model = m * max + sum - max;
            char name[64] = "";
            for (uint32_t s = 0; s < P; s++)
                snprintf(name + strlen(name), sizeof name - strlen(name), "%s%u", s ? "," : "",
                         splits[k][s]);
            printf("%-10s %3u %12.2f %12.2f %12.2f %10.2f ", name, m, pr.step * 1e3,
                   sr.step * 1e3, model * 1e3, pr.step / model);
            for (uint32_t s = 0; s < P; s++)
                printf(" %.1f", pr.busy[s] * 1e3);
            printf("\n");
        }
    return 0;
}

/* "2,2,2/4,1,1" -> splits {2,2,2}, {4,1,1} with their stage counts; 0 on a bad list. */
static uint32_t parse_splits(const char *s, uint32_t splits[][VKT_MAX_STAGES], uint32_t *p)
{
    uint32_t n = 0;
    while (*s && n < MAX_LIST) {
        uint32_t P = 0;
        while (*s && *s != '/') {
            if (P == VKT_MAX_STAGES)
                return 0;
            splits[n][P] = (uint32_t)strtoul(s, (char **)&s, 10);
            if (splits[n][P++] == 0)
                return 0;
            if (*s == ',')
                s++;
            else if (*s && *s != '/')
                return 0;
        }
        if (*s == '/')
            s++;
        p[n++] = P;
    }
    return n;
}

int main(int argc, char **argv)
{
    uint32_t stages[MAX_LIST] = {2, 3}, micro[MAX_LIST] = {1, 2, 4, 8};
    uint32_t tp_stages[MAX_LIST] = {1, 2, 3, 4}, tp_micro[MAX_LIST] = {4, 8};
    uint32_t split_micro[MAX_LIST] = {4, 8};
    uint32_t splits[MAX_LIST][VKT_MAX_STAGES] = {{3, 3}, {5, 1}, {2, 2, 2}, {4, 1, 1}};
    uint32_t split_p[MAX_LIST] = {2, 2, 3, 3};
    uint32_t n_stages = 2, n_micro = 4, n_tp_stages = 4, n_tp_micro = 2, n_split_micro = 2;
    uint32_t n_splits = 4, layers = 6, tp_layers = 12;
    const char *tables = "123";
    bench_cfg c = {.width = 256, .batch = 256, .steps = 5};
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *v = argv[i + 1];
        if (!strcmp(argv[i], "--stages"))
            n_stages = parse_list(v, stages);
        else if (!strcmp(argv[i], "--micro"))
            n_micro = parse_list(v, micro);
        else if (!strcmp(argv[i], "--width"))
            c.width = (uint32_t)atoi(v);
        else if (!strcmp(argv[i], "--layers"))
            layers = (uint32_t)atoi(v);
        else if (!strcmp(argv[i], "--batch"))
            c.batch = (uint32_t)atoi(v);
        else if (!strcmp(argv[i], "--steps"))
            c.steps = (uint32_t)atoi(v);
        else if (!strcmp(argv[i], "--tp-stages"))
            n_tp_stages = parse_list(v, tp_stages);
        else if (!strcmp(argv[i], "--tp-micro"))
            n_tp_micro = parse_list(v, tp_micro);
        else if (!strcmp(argv[i], "--tp-layers"))
            tp_layers = (uint32_t)atoi(v);
        else if (!strcmp(argv[i], "--splits")) {
            n_splits = parse_splits(v, splits, split_p);
            if (n_splits == 0) {
                fprintf(stderr, "bench_pipeline: --splits wants layers per stage, e.g. "
                                "2,2,2/4,1,1 (each at least 1, at most %u stages)\n",
                        VKT_MAX_STAGES);
                return 2;
            }
        } else if (!strcmp(argv[i], "--split-micro"))
            n_split_micro = parse_list(v, split_micro);
        else if (!strcmp(argv[i], "--tables"))
            tables = v;
        else {
            fprintf(stderr, "bench_pipeline: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (c.steps == 0 || layers == 0 || tp_layers == 0 || c.width == 0 || c.batch == 0) {
        fprintf(stderr, "bench_pipeline: steps, layers, width and batch must be > 0\n");
        return 2;
    }
    vkt_instance *inst = NULL;
    if (vkt_instance_create(NULL, &inst) != VKT_OK) {
        fprintf(stderr, "bench_pipeline: %s\n", vkt_last_error());
        return 1;
    }
    const char *lp = getenv("LP_NUM_THREADS");
    printf("bench_pipeline: every stage a context of device 0; LP_NUM_THREADS=%s\n",
           lp ? lp : "(unset)");
    int rc = 0;
    if (strchr(tables, '1'))
        rc = table_bubble(inst, &c, stages, n_stages, micro, n_micro, layers);
    if (rc == 0 && strchr(tables, '2'))
        rc = table_throughput(inst, &c, tp_stages, n_tp_stages, tp_micro, n_tp_micro,
                              tp_layers);
    if (rc == 0 && strchr(tables, '3'))
        rc = table_uneven(inst, &c, splits, split_p, n_splits, split_micro, n_split_micro);
    vkt_instance_destroy(inst);
    return rc;
}
