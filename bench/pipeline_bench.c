/* bench_pipeline: the pipeline engine (vkt_pipeline, docs/model_parallel.md) on MLPs of
 * hidden layers [batch, width] -> [batch, width] with relu, the loss on the last stage,
 * each configuration trained pipelined and sequentially (one stage at a time, the
 * reference); the configurations compared in one table row or group are built together
 * and take their steps in turn, so all see the same load of a shared machine; medians of
 * `steps` steps after 2 warm-ups. Three tables:
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
 *  4. Keeping activations: the table 1 configurations pipelined with recompute never
 *     (each sending stage keeps its micro-batches in flight: one forward per micro-batch)
 *     and always (its backward recomputes the forward: two), timed together; the step,
 *     samples per second, keep over recompute, stage 0's forwards per step, arenas and
 *     busy time (its device work: the compute the recomputation adds).
 *  5. Edges (docs/model_parallel.md "Device edges"): the table 1 configurations pipelined
 *     (a) on a VkDevice per stage (VKT_SHARE_DEVICE=0: values and gradients cross through
 *     host memory), (b) on one shared VkDevice with the host row forced (VKT_SHARE_DEVICE=1,
 *     VKT_PIPE_EDGES=host) and (c) on one shared VkDevice with the device row
 *     (VKT_PIPE_EDGES=device), the three timed together; the step, samples per second,
 *     c/b (same VkDevice and queues: what the host copies cost) and c/a, and the bytes
 *     sent per step, all stages summed, with those that went through host memory, and
 *     c's runs submitted while another of the same stage's runs was in flight (the
 *     stage stats' `overlapped`, all stages summed, per step; 0 on the host rows). The
 *     variables are set for each creation and the caller's values put back after, so a
 *     VKT_SHARE_DEVICE or VKT_PIPE_EDGES of the caller's applies to tables 1 to 4 only.
 *
 * Usage: bench_pipeline [--stages 2,3] [--micro 1,2,4,8] [--width 256] [--layers 6]
 *                       [--batch 256] [--steps 5] [--tp-stages 1,2,3,4] [--tp-micro 4,8]
 *                       [--tp-layers 12] [--splits 3,3/5,1/2,2,2/4,1,1] [--split-micro 4,8]
 *                       [--tables 12345]
 * Not a ctest: timings depend on the machine. On a CPU device (lavapipe) the stages share
 * the host's cores, so overlap is bounded by the cores free; lavapipe has one queue, so
 * stages sharing its VkDevice (table 5's b and c) submit to that one queue in turn. */
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

/* One configuration to time: an MLP whose stage s holds split[s] hidden layers [batch,
 * width], P stages, m micro-batches, pipelined or sequential; its medians when run. */
typedef struct job {
    uint32_t P, split[VKT_MAX_STAGES], m;
    int sequential;
    vkt_recompute recompute;
    /* VKT_SHARE_DEVICE and VKT_PIPE_EDGES while it is created ("": unset); share NULL:
     * the caller's environment as it is */
    const char *share, *edges;
    double step, busy_mean, busy[VKT_MAX_STAGES]; /* medians, seconds */
    uint64_t forwards0, activations0; /* stage 0's forwards per step, arena bytes */
    uint64_t sent, sent_host; /* last step, all stages: bytes sent, of those through host */
    uint64_t overlapped;      /* last step, all stages: runs submitted behind another */
    /* while running */
    vkt_graph *g;
    vkt_tensor *x, *y;
    vkt_pipeline *p;
    double *t, *b[VKT_MAX_STAGES];
} job;

typedef struct bench_cfg {
    uint32_t width, batch, steps;
} bench_cfg;

/* Median of n values (sorts them). */
static double median(double *v, uint32_t n)
{
    qsort(v, n, sizeof *v, cmp_double);
    return v[n / 2];
}

/* Sets (value "" or NULL: removes) an environment variable; setenv is POSIX, Windows has
 * _putenv_s (where "" removes it). The bench links the public API only. */
static void env_put(const char *name, const char *value)
{
#ifdef _WIN32
    _putenv_s(name, value ? value : "");
#else
    if (value && *value)
        setenv(name, value, 1);
    else
        unsetenv(name);
#endif
}

/* The variables a job sets while its pipeline is created (read by vkt_pipeline_create). */
static const char *const env_names[2] = {"VKT_SHARE_DEVICE", "VKT_PIPE_EDGES"};

/* Sets the job's values, the caller's copied into old[] (NULL: unset). Called between
 * creations, while no pipeline is stepping. */
static void env_push(const job *j, char *old[2])
{
    const char *want[2] = {j->share, j->edges};
    for (int k = 0; k < 2; k++) {
        const char *v = getenv(env_names[k]);
        old[k] = NULL;
        if (v && (old[k] = malloc(strlen(v) + 1)) != NULL)
            memcpy(old[k], v, strlen(v) + 1);
        env_put(env_names[k], want[k]);
    }
}

static void env_pop(char *old[2])
{
    for (int k = 0; k < 2; k++) {
        env_put(env_names[k], old[k]);
        free(old[k]);
    }
}

static int job_create(vkt_instance *inst, const bench_cfg *c, job *j)
{
    vkt_graph_options go = {.seed = 5};
    if (vkt_graph_create(&go, &j->g) != VKT_OK)
        return 1;
    vkt_shape xs = {2, {c->batch, c->width}}, ws = {2, {c->width, c->width}},
              bs = {1, {c->width}};
    vkt_init he = {.kind = VKT_INIT_HE};
    j->x = vkt_input(j->g, "x", &xs);
    j->y = vkt_input_labels(j->g, "y", c->batch);
    vkt_tensor *h = j->x;
    for (uint32_t s = 0; s < j->P; s++) {
        vkt_graph_set_stage(j->g, s);
        for (uint32_t l = 0; l < j->split[s]; l++)
            h = vkt_relu(j->g, vkt_linear(j->g, h, vkt_param(j->g, NULL, &ws, &he),
                                          vkt_param(j->g, NULL, &bs, NULL)));
    }
    vkt_tensor *loss = vkt_softmax_cross_entropy(j->g, h, j->y);
    uint32_t dev[VKT_MAX_STAGES] = {0}; /* every stage a context of device 0 */
    vkt_pipeline_options po = {.batch = c->batch, .micro_batches = j->m, .stages = j->P,
                               .devices = dev, .sequential = j->sequential,
                               .recompute = j->recompute};
    po.optimizer.lr = 0.01f;
    char *old[2];
    if (j->share)
        env_push(j, old);
    vkt_status st = vkt_pipeline_create(inst, j->g, loss, &po, &j->p);
    if (j->share)
        env_pop(old);
    if (st != VKT_OK) {
        fprintf(stderr, "bench_pipeline: %s\n", vkt_last_error());
        return 1;
    }
    j->t = calloc(c->steps, sizeof *j->t);
    for (uint32_t s = 0; s < j->P; s++)
        j->b[s] = calloc(c->steps, sizeof *j->b[s]);
    return 0;
}

static void job_destroy(job *j)
{
    for (uint32_t s = 0; s < j->P; s++)
        free(j->b[s]);
    free(j->t);
    vkt_pipeline_destroy(j->p);
    vkt_graph_destroy(j->g);
    j->p = NULL;
    j->g = NULL;
}

/* Times n jobs together: they take their steps in turn, job after job (2 warm-ups, then
 * c->steps timed), so that all see the same load of a shared machine and the ratios
 * between them hold even when the load changes; fills each job's medians. */
static int run_jobs(vkt_instance *inst, const bench_cfg *c, job *jobs, uint32_t n)
{
    int rc = 0;
    for (uint32_t k = 0; k < n && rc == 0; k++)
        rc = job_create(inst, c, &jobs[k]);
    float *xd = malloc((size_t)c->batch * c->width * sizeof *xd);
    int32_t *yd = malloc(c->batch * sizeof *yd);
    for (uint64_t i = 0; i < (uint64_t)c->batch * c->width; i++)
        xd[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
    for (uint32_t i = 0; i < c->batch; i++)
        yd[i] = (int32_t)(i % c->width);
    for (uint32_t i = 0; i < c->steps + 2 && rc == 0; i++)
        for (uint32_t k = 0; k < n && rc == 0; k++) {
            job *j = &jobs[k];
            vkt_feed f[2] = {{j->x, xd}, {j->y, yd}};
            if (vkt_pipeline_step(j->p, f, 2, NULL) != VKT_OK) {
                fprintf(stderr, "bench_pipeline: %s\n", vkt_pipeline_errmsg(j->p));
                rc = 1;
            }
            if (i < 2 || rc)
                continue;
            j->t[i - 2] = vkt_pipeline_step_seconds(j->p);
            j->sent = j->sent_host = j->overlapped = 0;
            for (uint32_t s = 0; s < j->P; s++) {
                vkt_pipeline_stage_stats ss;
                vkt_pipeline_stage_stats_get(j->p, s, &ss);
                j->b[s][i - 2] = ss.busy_seconds;
                j->sent += ss.sent_bytes;
                j->sent_host += ss.sent_host_bytes;
                j->overlapped += ss.overlapped;
                if (s == 0) {
                    j->forwards0 = ss.forwards;
                    j->activations0 = ss.activation_bytes;
                }
            }
        }
    for (uint32_t k = 0; k < n; k++) {
        job *j = &jobs[k];
        if (rc == 0) {
            j->step = median(j->t, c->steps);
            j->busy_mean = 0;
            for (uint32_t s = 0; s < j->P; s++) {
                j->busy[s] = median(j->b[s], c->steps);
                j->busy_mean += j->busy[s] / j->P;
            }
        }
        job_destroy(j);
    }
    free(xd);
    free(yd);
    return rc;
}

/* Whether P stages of `layers` layers at m micro-batches make a configuration: m divides
 * the batch, every stage gets a layer. */
static int fits(const bench_cfg *c, uint32_t P, uint32_t m, uint32_t layers)
{
    return m && c->batch % m == 0 && P && P <= layers && P <= VKT_MAX_STAGES;
}

/* The even split of `layers` layers over P stages: layer l on stage l * P / layers. */
static void even_split(uint32_t P, uint32_t layers, uint32_t *split)
{
    memset(split, 0, VKT_MAX_STAGES * sizeof *split);
    for (uint32_t l = 0; l < layers; l++)
        split[l * P / layers]++;
}

/* A pipelined job and its sequential reference at jobs[0] and jobs[1]. */
static void job_pair(job *jobs, uint32_t P, const uint32_t *split, uint32_t m)
{
    for (int k = 0; k < 2; k++) {
        memset(&jobs[k], 0, sizeof jobs[k]);
        jobs[k].P = P;
        memcpy(jobs[k].split, split, P * sizeof *split);
        jobs[k].m = m;
        jobs[k].sequential = k;
    }
}

static void print_busy(const job *j)
{
    for (uint32_t s = 0; s < j->P; s++)
        printf(" %.1f", j->busy[s] * 1e3);
    printf("\n");
}

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
            if (!fits(c, P, m, layers))
                continue;
            even_split(P, layers, split);
            job r[2];
            job_pair(r, P, split, m);
            if (run_jobs(inst, c, r, 2))
                return 1;
            printf("%2u %3u %12.2f %12.2f %8.2f %9.3f %8.3f ", P, m, r[0].step * 1e3,
                   r[1].step * 1e3, r[1].step / r[0].step, 1 - r[0].busy_mean / r[0].step,
                   (double)(P - 1) / (m + P - 1));
            print_busy(&r[0]);
        }
    return 0;
}

/* Table 2: samples per second of one model on each P of the list at each m; for one m,
 * every P pipelined and sequential is timed together (run_jobs). The "vs P=1" columns
 * are against the list's first P (1 by default). */
static int table_throughput(vkt_instance *inst, const bench_cfg *c, const uint32_t *stages,
                            uint32_t n_stages, const uint32_t *micro, uint32_t n_micro,
                            uint32_t layers)
{
    printf("\n2. Throughput: MLP %u x [%u, %u] layers split evenly over P stages, batch %u, "
           "median of %u steps\n", layers, c->batch, c->width, c->batch, c->steps);
    printf("%3s %2s %16s %16s %9s %12s %11s %7s  busy per stage (ms)\n", "m", "P",
           "pipelined smp/s", "sequential smp/s", "pipe/seq", "pipe vs P=1", "seq vs P=1",
           "ideal");
    for (uint32_t b = 0; b < n_micro; b++) {
        uint32_t m = micro[b], n = 0, split[VKT_MAX_STAGES];
        job r[2 * MAX_LIST];
        for (uint32_t a = 0; a < n_stages; a++) {
            uint32_t P = stages[a];
            if (!fits(c, P, m, layers))
                continue;
            even_split(P, layers, split);
            job_pair(&r[n], P, split, m);
            n += 2;
        }
        if (n == 0)
            continue;
        if (run_jobs(inst, c, r, n))
            return 1;
        double pipe1 = c->batch / r[0].step, seq1 = c->batch / r[1].step;
        for (uint32_t k = 0; k < n; k += 2) {
            double pipe = c->batch / r[k].step, seq = c->batch / r[k + 1].step;
            uint32_t P = r[k].P;
            /* ideal: on P separate devices as fast as this one, each stage busy
             * m/(m+P-1) of the step, so P m/(m+P-1) times one device's rate (against
             * the first row's; recomputation and transfers not counted) */
            double ideal = (double)P * m / (m + P - 1) / ((double)r[0].P * m / (m + r[0].P - 1));
            printf("%3u %2u %16.0f %16.0f %9.2f %12.2f %11.2f %7.2f ", m, P, pipe, seq,
                   pipe / seq, pipe / pipe1, seq / seq1, ideal);
            print_busy(&r[k]);
        }
    }
    return 0;
}

/* Table 3: a slow stage; for each m of --split-micro, every split of --splits pipelined and
 * sequential, timed together (run_jobs). */
static int table_uneven(vkt_instance *inst, const bench_cfg *c, uint32_t splits[][VKT_MAX_STAGES],
                        const uint32_t *split_p, uint32_t n_splits, const uint32_t *micro,
                        uint32_t n_micro)
{
    printf("\n3. A slow stage: MLP [%u, %u] layers, batch %u, median of %u steps; model = "
           "m * max(t_s) + sum(t_s) - max(t_s), t_s = busy_s / m\n", c->batch, c->width,
           c->batch, c->steps);
    printf("%-10s %3s %12s %12s %12s %10s  busy per stage (ms)\n", "split", "m",
           "pipelined ms", "sequential ms", "model ms", "step/model");
    for (uint32_t b = 0; b < n_micro; b++) {
        uint32_t m = micro[b];
        if (m == 0 || c->batch % m)
            continue;
        job r[2 * MAX_LIST];
        for (uint32_t k = 0; k < n_splits; k++)
            job_pair(&r[2 * k], split_p[k], splits[k], m);
        if (run_jobs(inst, c, r, 2 * n_splits))
            return 1;
        for (uint32_t k = 0; k < 2 * n_splits; k += 2) {
            const job *j = &r[k];
            double max = 0, sum = 0;
            for (uint32_t s = 0; s < j->P; s++) {
                double t = j->busy[s] / m;
                sum += t;
                max = t > max ? t : max;
            }
            double model = m * max + sum - max;
            char name[64] = "";
            for (uint32_t s = 0; s < j->P; s++)
                snprintf(name + strlen(name), sizeof name - strlen(name), "%s%u", s ? "," : "",
                         j->split[s]);
            printf("%-10s %3u %12.2f %12.2f %12.2f %10.2f ", name, m, j->step * 1e3,
                   r[k + 1].step * 1e3, model * 1e3, j->step / model);
            print_busy(j);
        }
    }
    return 0;
}

/* Table 4: keeping against recomputing (pipelined both), for each P and m. */
static int table_keep(vkt_instance *inst, const bench_cfg *c, const uint32_t *stages,
                      uint32_t n_stages, const uint32_t *micro, uint32_t n_micro,
                      uint32_t layers)
{
    printf("\n4. Keeping activations: MLP %u x [%u, %u] layers split evenly, batch %u, "
           "median of %u steps\n", layers, c->batch, c->width, c->batch, c->steps);
    printf("%2s %3s %9s %12s %10s %13s %9s %13s %14s %13s\n", "P", "m", "keep ms",
           "recompute ms", "keep smp/s", "recomp. smp/s", "keep/rec", "fwd 0 k/r",
           "arenas 0 MB k/r", "busy 0 ms k/r");
    for (uint32_t a = 0; a < n_stages; a++)
        for (uint32_t b = 0; b < n_micro; b++) {
            uint32_t P = stages[a], m = micro[b], split[VKT_MAX_STAGES];
            if (!fits(c, P, m, layers))
                continue;
            even_split(P, layers, split);
            job r[2];
            job_pair(r, P, split, m);
            r[0].sequential = r[1].sequential = 0;
            r[0].recompute = VKT_RECOMPUTE_NEVER;
            r[1].recompute = VKT_RECOMPUTE_ALWAYS;
            if (run_jobs(inst, c, r, 2))
                return 1;
            printf("%2u %3u %9.2f %12.2f %10.0f %13.0f %9.2f %6llu/%-6llu %6.2f/%-6.2f "
                   "%6.1f/%-6.1f\n", P, m, r[0].step * 1e3, r[1].step * 1e3,
                   c->batch / r[0].step, c->batch / r[1].step, r[1].step / r[0].step,
                   (unsigned long long)r[0].forwards0, (unsigned long long)r[1].forwards0,
                   r[0].activations0 / 1e6, r[1].activations0 / 1e6, r[0].busy[0] * 1e3,
                   r[1].busy[0] * 1e3);
        }
    return 0;
}

/* Table 5: edges through host memory on a VkDevice per stage (a), the host row on one
 * shared VkDevice (b), the device row on it (c); the three timed together, for each P, m. */
static int table_edges(vkt_instance *inst, const bench_cfg *c, const uint32_t *stages,
                       uint32_t n_stages, const uint32_t *micro, uint32_t n_micro,
                       uint32_t layers)
{
    static const char *const share[3] = {"0", "1", "1"}, *const edges[3] = {"", "host",
                                                                              "device"};
    printf("\n5. Edges: MLP %u x [%u, %u] layers split evenly, batch %u, median of %u steps; "
           "a: a VkDevice per stage, b: one shared, host row, c: one shared, device row\n",
           layers, c->batch, c->width, c->batch, c->steps);
    printf("%2s %3s %20s %23s %6s %6s %17s %17s %5s\n", "P", "m", "step ms a/b/c",
           "smp/s a/b/c", "c/b", "c/a", "sent MB a/b/c", "host MB a/b/c", "ovl c");
    for (uint32_t a = 0; a < n_stages; a++)
        for (uint32_t b = 0; b < n_micro; b++) {
            uint32_t P = stages[a], m = micro[b], split[VKT_MAX_STAGES];
            if (!fits(c, P, m, layers))
                continue;
            even_split(P, layers, split);
            job r[3];
            job_pair(r, P, split, m);
            r[2] = r[0];
            for (int k = 0; k < 3; k++) {
                r[k].sequential = 0;
                r[k].share = share[k];
                r[k].edges = edges[k];
            }
            if (run_jobs(inst, c, r, 3))
                return 1;
            double rate[3];
            for (int k = 0; k < 3; k++)
                rate[k] = c->batch / r[k].step;
            printf("%2u %3u %6.2f/%6.2f/%6.2f %7.0f/%7.0f/%7.0f %6.2f %6.2f "
                   "%5.2f/%5.2f/%5.2f %5.2f/%5.2f/%5.2f %5llu\n", P, m, r[0].step * 1e3,
                   r[1].step * 1e3, r[2].step * 1e3, rate[0], rate[1], rate[2],
                   rate[2] / rate[1], rate[2] / rate[0], r[0].sent / 1e6, r[1].sent / 1e6,
                   r[2].sent / 1e6, r[0].sent_host / 1e6, r[1].sent_host / 1e6,
                   r[2].sent_host / 1e6, (unsigned long long)r[2].overlapped);
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
    const char *tables = "12345";
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
    if (rc == 0 && strchr(tables, '4'))
        rc = table_keep(inst, &c, stages, n_stages, micro, n_micro, layers);
    if (rc == 0 && strchr(tables, '5'))
        rc = table_edges(inst, &c, stages, n_stages, micro, n_micro, layers);
    vkt_instance_destroy(inst);
    return rc;
}
