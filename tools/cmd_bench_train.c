/* vkt bench train: one training step of the 784-256-128-10 MLP (relu, softmax
 * cross-entropy, SGD) through vkt_trainer_step, against the same step's matrix products
 * alone through vkt_gemm, recorded into one stream and replayed; their ratio is how
 * close a step is to the GEMM limit (issue 3, item 10: at most 1.5).
 *
 * The products are those engine/graph/record_fwd.c and record_bwd.c record for this
 * model, in the same order, with the same transposes and beta, reading and writing the
 * same dataflow so the stream puts barriers where the step has them:
 *   forward   Z_l[B,d_l+1]  = A_l[B,d_l] W_l[d_l,d_l+1]           (A_0 = X, A_l = H_l)
 *   backward  dW_l[d_l,d_l+1] = A_l^T dZ_l        (trans_a, beta 0: every W is used once)
 *             dA_l[B,d_l]   = dZ_l W_l^T          (trans_b; not for l = 0: X needs none)
 * Bias, activations, the loss and the optimizer are what the step adds to them.
 * Timed steps and GEMM-only runs alternate in rounds, so a load on the machine falls on
 * both alike. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "platform/platform.h"

#define N_LAYERS 3
#define MAX_GEMMS (3 * N_LAYERS - 1) /* forward, dW, and dA but for the input */
#define ROUNDS 10

static const uint32_t k_dims[N_LAYERS + 1] = {784, 256, 128, 10};

static double wall_s(void) { return plat_now(); }

/* CPU time of the calling thread: vktrain's own host work inside a call, without the
 * lavapipe threads that execute the kernels. */
static double thread_cpu_s(void) { return plat_thread_cpu_time(); }

/* CPU time of the whole process (every thread, lavapipe's included). */
static double process_cpu_s(void) { return plat_cpu_time(); }

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static float rnd01(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)((g_rng >> 40) * (1.0 / 16777216.0));
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, uint32_t n)
{
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static double mean(const double *v, uint32_t n)
{
    double sum = 0;
    for (uint32_t i = 0; i < n; i++)
        sum += v[i];
    return sum / n;
}

static double best(const double *v, uint32_t n)
{
    double b = v[0];
    for (uint32_t i = 1; i < n; i++)
        b = v[i] < b ? v[i] : b;
    return b;
}

/* ---- the training step -------------------------------------------------------------- */

typedef struct net {
    vkt_graph *graph;
    vkt_tensor *x, *labels, *loss;
} net;

static vkt_status net_build(net *n, uint32_t batch)
{
    vkt_graph_options go = {.seed = 1};
    vkt_status st = vkt_graph_create(&go, &n->graph);
    if (st != VKT_OK)
        return st;
    vkt_shape xs = {2, {batch, k_dims[0]}};
    n->x = vkt_input(n->graph, "x", &xs);
    n->labels = vkt_input_labels(n->graph, "labels", batch);
    vkt_tensor *h = n->x;
    for (int l = 0; l < N_LAYERS; l++) {
        vkt_shape ws = {2, {k_dims[l], k_dims[l + 1]}}, bs = {1, {k_dims[l + 1]}};
        vkt_init he = {.kind = VKT_INIT_HE};
        h = vkt_linear(n->graph, h, vkt_param(n->graph, "w", &ws, &he),
                       vkt_param(n->graph, "b", &bs, NULL));
        if (l + 1 < N_LAYERS)
            h = vkt_relu(n->graph, h);
    }
    n->loss = vkt_softmax_cross_entropy(n->graph, h, n->labels);
    return vkt_graph_status(n->graph);
}

/* ---- the same step's GEMMs alone -------------------------------------------------- */

typedef struct gemm_only {
    vkt_buffer *params, *grads, *acts;  /* W_l, dW_l; X, Z_l (= H_l+1), dA_l */
    vkt_gemm_desc d[MAX_GEMMS];
    char name[MAX_GEMMS][32];
    uint32_t n;
    vkt_stream *plain, *stamped;        /* the same GEMMs; the second with timestamps */
} gemm_only;

static uint64_t align16(uint64_t n) { return (n + 15) / 16 * 16; }

/* Random values scaled by 1/sqrt(fan-in) keep the chained products finite. */
static vkt_status fill_random(vkt_buffer *b, uint64_t elems, float scale)
{
    float *h = malloc(elems * 4);
    if (!h)
        return VKT_ERROR_OUT_OF_MEMORY;
    for (uint64_t i = 0; i < elems; i++)
        h[i] = (rnd01() * 2.0f - 1.0f) * scale;
    vkt_status st = vkt_buffer_write(b, 0, h, elems * 4);
    free(h);
    return st;
}

static void add_gemm(gemm_only *g, const char *name, int ta, int tb, uint32_t m, uint32_t n,
                     uint32_t k, vkt_view a, vkt_view b, vkt_view c)
{
    vkt_gemm_desc *d = &g->d[g->n];
    memset(d, 0, sizeof *d);
    d->trans_a = ta;
    d->trans_b = tb;
    d->m = m;
    d->n = n;
    d->k = k;
    d->alpha = 1.0f;
    d->beta = 0.0f;
    d->a = a;
    d->b = b;
    d->c = c;
    snprintf(g->name[g->n], sizeof g->name[0], "%s", name);
    g->n++;
}

/* Lays out the buffers like the model (16-element aligned views) and lists the GEMMs. */
static vkt_status gemm_only_create(vkt_context *ctx, uint32_t batch, gemm_only *g)
{
    uint64_t w_off[N_LAYERS], w_end = 0;
    uint64_t z_off[N_LAYERS], da_off[N_LAYERS], a_end = align16((uint64_t)batch * k_dims[0]);
    for (int l = 0; l < N_LAYERS; l++) {
        w_off[l] = w_end;
        w_end += align16((uint64_t)k_dims[l] * k_dims[l + 1]);
        z_off[l] = a_end;
        a_end += align16((uint64_t)batch * k_dims[l + 1]);
    }
    for (int l = 1; l < N_LAYERS; l++) {
        da_off[l] = a_end;
        a_end += align16((uint64_t)batch * k_dims[l]);
    }
    vkt_status st = vkt_buffer_create(ctx, w_end * 4, VKT_MEMORY_DEVICE, &g->params);
    if (st == VKT_OK)
        st = vkt_buffer_create(ctx, w_end * 4, VKT_MEMORY_DEVICE, &g->grads);
    if (st == VKT_OK)
        st = vkt_buffer_create(ctx, a_end * 4, VKT_MEMORY_DEVICE, &g->acts);
    if (st == VKT_OK)
        st = fill_random(g->params, w_end, 0.05f);
    if (st == VKT_OK)
        st = fill_random(g->acts, a_end, 1.0f);
    if (st != VKT_OK)
        return st;
    char name[32];
    for (int l = 0; l < N_LAYERS; l++) { /* Z_l = A_l W_l */
        vkt_view a = {g->acts, l ? z_off[l - 1] : 0};
        snprintf(name, sizeof name, "fwd%d  A%d·W%d", l + 1, l, l + 1);
        add_gemm(g, name, 0, 0, batch, k_dims[l + 1], k_dims[l], a,
                 (vkt_view){g->params, w_off[l]}, (vkt_view){g->acts, z_off[l]});
    }
    for (int l = N_LAYERS - 1; l >= 0; l--) {
        /* dZ_l: the loss gradient over the logits (written where Z_l was read), else the
         * activation's backward in place over dA_l+1. */
        vkt_view dz = {g->acts, l == N_LAYERS - 1 ? z_off[l] : da_off[l + 1]};
        vkt_view a = {g->acts, l ? z_off[l - 1] : 0};
        snprintf(name, sizeof name, "dW%d   A%d^T·dZ%d", l + 1, l, l + 1);
        add_gemm(g, name, 1, 0, k_dims[l], k_dims[l + 1], batch, a, dz,
                 (vkt_view){g->grads, w_off[l]});
        if (l == 0)
            break;
        snprintf(name, sizeof name, "dA%d   dZ%d·W%d^T", l, l + 1, l + 1);
        add_gemm(g, name, 0, 1, batch, k_dims[l], k_dims[l + 1], dz,
                 (vkt_view){g->params, w_off[l]}, (vkt_view){g->acts, da_off[l]});
    }
    vkt_stream_options so = {.timestamps = 1};
    st = vkt_stream_create(ctx, NULL, &g->plain);
    if (st == VKT_OK)
        st = vkt_stream_create(ctx, &so, &g->stamped);
    for (uint32_t i = 0; i < g->n && st == VKT_OK; i++)
        if ((st = vkt_gemm(g->plain, &g->d[i])) == VKT_OK)
            st = vkt_gemm(g->stamped, &g->d[i]);
    return st;
}

static void gemm_only_destroy(gemm_only *g)
{
    vkt_stream_destroy(g->plain);
    vkt_stream_destroy(g->stamped);
    vkt_buffer_destroy(g->params);
    vkt_buffer_destroy(g->grads);
    vkt_buffer_destroy(g->acts);
}

/* ---- measurement ---------------------------------------------------------------- */

typedef struct bench_cfg {
    uint32_t batch, steps, warmup;
    int per_gemm;
} bench_cfg;

typedef struct samples {
    double *step, *step_thread, *gemm, *gemm_thread, *gemm_process;
    uint32_t n;
} samples;

typedef struct feeder {
    vkt_feed feeds[2];
    float *x;       /* [n_batches * batch, 784] */
    int32_t *y;     /* [n_batches * batch] */
    uint32_t n_batches, next, batch;
} feeder;

#define FEED_BATCHES 8 /* random batches cycled through, as a loader would change them */

static vkt_status feeder_init(feeder *f, const net *n, uint32_t batch)
{
    uint64_t rows = (uint64_t)FEED_BATCHES * batch;
    f->x = malloc(rows * k_dims[0] * 4);
    f->y = malloc(rows * 4);
    if (!f->x || !f->y)
        return VKT_ERROR_OUT_OF_MEMORY;
    for (uint64_t i = 0; i < rows * k_dims[0]; i++)
        f->x[i] = rnd01();
    for (uint64_t i = 0; i < rows; i++)
        f->y[i] = (int32_t)(rnd01() * (float)k_dims[N_LAYERS]) % (int32_t)k_dims[N_LAYERS];
    f->feeds[0].tensor = n->x;
    f->feeds[1].tensor = n->labels;
    f->n_batches = FEED_BATCHES;
    f->batch = batch;
    return VKT_OK;
}

static vkt_status feeder_step(feeder *f, vkt_trainer *t, float *loss)
{
    uint64_t row = (uint64_t)f->next * f->batch;
    f->feeds[0].data = f->x + row * k_dims[0];
    f->feeds[1].data = f->y + row;
    f->next = (f->next + 1) % f->n_batches;
    return vkt_trainer_step(t, f->feeds, 2, loss);
}

/* Runs `count` steps and GEMM-only replays, timing each (when s is not NULL). The loss
 * of the first step ever goes to loss[0], of the latest to loss[1]. */
static vkt_status run_some(vkt_trainer *t, feeder *f, gemm_only *g, uint32_t count, samples *s,
                           float loss[2])
{
    vkt_status st = VKT_OK;
    for (uint32_t i = 0; i < count && st == VKT_OK; i++) {
        double w0 = wall_s(), c0 = thread_cpu_s();
        st = feeder_step(f, t, &loss[1]);
        if (st == VKT_OK && vkt_trainer_step_count(t) == 1)
            loss[0] = loss[1];
        if (s && st == VKT_OK) {
            s->step[s->n + i] = wall_s() - w0;
            s->step_thread[s->n + i] = thread_cpu_s() - c0;
        }
    }
    if (st != VKT_OK)
        return st;
    for (uint32_t i = 0; i < count && st == VKT_OK; i++) {
        double w0 = wall_s(), c0 = thread_cpu_s(), p0 = process_cpu_s();
        st = vkt_stream_run(g->plain);
        if (s && st == VKT_OK) {
            s->gemm[s->n + i] = wall_s() - w0;
            s->gemm_thread[s->n + i] = thread_cpu_s() - c0;
            s->gemm_process[s->n + i] = process_cpu_s() - p0;
        }
    }
    if (s)
        s->n += count;
    return st;
}

/* Median GPU time of each GEMM by timestamps over `runs` replays. */
static vkt_status per_gemm_times(gemm_only *g, uint32_t runs, double *us)
{
    double *v = malloc((size_t)runs * MAX_GEMMS * sizeof *v);
    if (!v)
        return VKT_ERROR_OUT_OF_MEMORY;
    vkt_status st = vkt_stream_run(g->stamped); /* warm-up */
    for (uint32_t r = 0; r < runs && st == VKT_OK; r++) {
        vkt_timing t[MAX_GEMMS];
        uint32_t n = 0;
        st = vkt_stream_run(g->stamped);
        if (st == VKT_OK)
            st = vkt_stream_timings(g->stamped, t, MAX_GEMMS, &n);
        for (uint32_t i = 0; i < n && i < g->n; i++)
            v[(size_t)i * runs + r] = t[i].microseconds;
    }
    for (uint32_t i = 0; i < g->n && st == VKT_OK; i++)
        us[i] = median(v + (size_t)i * runs, runs);
    free(v);
    return st;
}

static void print_per_gemm(const gemm_only *g, const double *us)
{
    double sum = 0;
    printf("\n%-18s %2s %2s %5s %5s %5s %10s %9s\n", "GEMM (GPU time)", "ta", "tb", "M", "N",
           "K", "us", "GFLOP/s");
    for (uint32_t i = 0; i < g->n; i++) {
        const vkt_gemm_desc *d = &g->d[i];
        printf("%-18s %2d %2d %5u %5u %5u %10.1f %9.2f\n", g->name[i], d->trans_a, d->trans_b,
               d->m, d->n, d->k, us[i], 2.0 * d->m * d->n * d->k / us[i] * 1e-3);
        sum += us[i];
    }
    printf("%-18s %29s %10.1f\n\n", "sum", "", sum);
}

typedef struct figures {
    double step_med, step_best, gemm_med, gemm_best;
    double step_cpu, step_thread, gemm_cpu, gemm_thread; /* ms per step or run */
    uint32_t dispatches;
    float loss[2]; /* first and last step */
} figures;

static void print_table(const bench_cfg *c, const gemm_only *g, const figures *f)
{
    printf("%-14s %9s %10s %11s %12s %14s\n", "", "best ms", "median ms", "dispatches",
           "host CPU ms", "caller CPU ms");
    printf("%-14s %9.3f %10.3f %11u %12.3f %14.3f\n", "training step", f->step_best,
           f->step_med, f->dispatches, f->step_cpu, f->step_thread);
    printf("%-14s %9.3f %10.3f %11u %12.3f %14.3f\n", "GEMMs only", f->gemm_best, f->gemm_med,
           g->n, f->gemm_cpu, f->gemm_thread);
    printf("%-14s %9.3f %10.3f %11s %12.3f   (goal: <= 1.5)\n", "ratio",
           f->step_best / f->gemm_best, f->step_med / f->gemm_med, "",
           f->step_cpu / f->gemm_cpu);
    printf("samples/s: %.0f (best step), %.0f (median step); loss %.4f -> %.4f over %u steps\n",
           c->batch / f->step_best * 1e3, c->batch / f->step_med * 1e3, f->loss[0], f->loss[1],
           c->warmup + c->steps);
    printf("best: the fastest of the timed steps (or replays), the figure a load on the "
           "machine disturbs least;\nhost CPU: process CPU time per step, lavapipe's threads "
           "included, mean (vkt_trainer_stats); caller CPU: the calling thread's, median\n");
}

static vkt_status measure(const bench_cfg *c, vkt_trainer *t, feeder *f, gemm_only *g,
                          figures *out)
{
    samples s = {0};
    size_t bytes = (size_t)c->steps * sizeof(double);
    double *all = malloc(5 * bytes);
    if (!all)
        return VKT_ERROR_OUT_OF_MEMORY;
    s.step = all;
    s.step_thread = all + c->steps;
    s.gemm = all + 2 * (size_t)c->steps;
    s.gemm_thread = all + 3 * (size_t)c->steps;
    s.gemm_process = all + 4 * (size_t)c->steps;
    vkt_status st = run_some(t, f, g, c->warmup, NULL, out->loss);
    vkt_trainer_stats before, after;
    if (st == VKT_OK)
        st = vkt_trainer_stats_get(t, &before);
    for (uint32_t r = 0; r < ROUNDS && st == VKT_OK; r++) {
        uint32_t count = c->steps * (r + 1) / ROUNDS - c->steps * r / ROUNDS;
        st = run_some(t, f, g, count, &s, out->loss);
    }
    if (st == VKT_OK)
        st = vkt_trainer_stats_get(t, &after);
    if (st == VKT_OK) {
        double steps = (double)(after.steps - before.steps);
        out->step_cpu = (after.host_cpu_seconds - before.host_cpu_seconds) / steps * 1e3;
        out->dispatches = after.step_dispatches;
        out->step_best = best(s.step, s.n) * 1e3;
        out->gemm_best = best(s.gemm, s.n) * 1e3;
        out->step_med = median(s.step, s.n) * 1e3;
        out->gemm_med = median(s.gemm, s.n) * 1e3;
        out->step_thread = median(s.step_thread, s.n) * 1e3;
        out->gemm_thread = median(s.gemm_thread, s.n) * 1e3;
        out->gemm_cpu = mean(s.gemm_process, s.n) * 1e3;
    }
    free(all);
    return st;
}

/* ---- the command -------------------------------------------------------------------- */

static int parse_u32(const char *text, uint32_t lo, uint32_t *out)
{
    char *end;
    unsigned long v = strtoul(text, &end, 10);
    if (end == text || *end || v < lo || v > 1000000)
        return 0;
    *out = (uint32_t)v;
    return 1;
}

static int usage(void)
{
    fprintf(stderr, "usage: vkt bench train [--steps N] [--warmup N] [--batch B] [--gemms]\n"
                    "  --steps N   timed steps (and as many GEMM-only replays), >= %d; "
                    "default 300\n"
                    "  --warmup N  untimed steps first; default 20\n"
                    "  --batch B   rows per step; default 128\n"
                    "  --gemms     also the GPU time of each GEMM (timestamps)\n", ROUNDS);
    return 2;
}

static int parse_args(int argc, char **argv, bench_cfg *c)
{
    *c = (bench_cfg){.batch = 128, .steps = 300, .warmup = 20};
    for (int i = 0; i < argc; i++) {
        int more = i + 1 < argc;
        if (strcmp(argv[i], "--steps") == 0 && more) {
            if (!parse_u32(argv[++i], ROUNDS, &c->steps))
                return 0;
        } else if (strcmp(argv[i], "--warmup") == 0 && more) {
            if (!parse_u32(argv[++i], 0, &c->warmup))
                return 0;
        } else if (strcmp(argv[i], "--batch") == 0 && more) {
            if (!parse_u32(argv[++i], 1, &c->batch))
                return 0;
        } else if (strcmp(argv[i], "--gemms") == 0) {
            c->per_gemm = 1;
        } else {
            return 0;
        }
    }
    return 1;
}

/* One replica on the first device of the device list (VKT_DEVICES): the trainer owns its
 * context; the GEMM-only stream gets a context of its own on the same device. */
static int open_gemm_context(vkt_instance *inst, uint32_t *device, vkt_context **ctx)
{
    uint32_t dev[VKT_MAX_REPLICAS], n_dev = 0;
    vkt_status st = vkt_instance_select_devices(inst, dev, VKT_MAX_REPLICAS, &n_dev);
    if (st != VKT_OK)
        return cli_fail("bench train: devices", st, vkt_instance_errmsg(inst));
    *device = dev[0];
    vkt_context_options co = {.device_index = dev[0]};
    st = vkt_context_create(inst, &co, ctx);
    if (st != VKT_OK)
        return cli_fail("bench train: cannot create a context", st, vkt_last_error());
    return 0;
}

static void print_header(vkt_context *ctx, const bench_cfg *c)
{
    vkt_device_info info;
    vkt_context_device_info(ctx, &info);
    const char *threads = getenv("LP_NUM_THREADS");
    printf("device: %s (%s kernels)%s%s\n", info.name,
           vkt_context_kernel_variant(ctx) == VKT_KERNELS_CPU ? "cpu" : "gpu",
           threads ? ", LP_NUM_THREADS=" : "", threads ? threads : "");
    printf("model: %u-%u-%u-%u relu, softmax cross-entropy, batch %u, SGD lr 0.1, one "
           "replica; %u timed steps after %u warm-up, in %d rounds alternating with GEMM-only "
           "replays\n",
           k_dims[0], k_dims[1], k_dims[2], k_dims[3], c->batch, c->steps, c->warmup, ROUNDS);
}

static int bench_run(vkt_instance *inst, uint32_t device, vkt_context *ctx, const bench_cfg *c)
{
    net n = {0};
    feeder f = {0};
    gemm_only g = {0};
    vkt_trainer *t = NULL;
    figures fig = {0};
    double us[MAX_GEMMS];
    vkt_status st = net_build(&n, c->batch);
    if (st != VKT_OK) {
        vkt_graph_destroy(n.graph);
        return cli_fail("bench train: graph", st, vkt_last_error());
    }
    vkt_trainer_options to = {.batch = c->batch,
                              .optimizer = {.kind = VKT_OPTIMIZER_SGD, .lr = 0.1f},
                              .devices = &device, .device_count = 1};
    int rc = 0;
    if ((st = vkt_trainer_create(inst, n.graph, n.loss, &to, &t)) != VKT_OK)
        rc = cli_fail("bench train: trainer", st, vkt_last_error());
    if (rc == 0 && (st = feeder_init(&f, &n, c->batch)) != VKT_OK)
        rc = cli_fail("bench train", st, "out of host memory");
    if (rc == 0 && (st = gemm_only_create(ctx, c->batch, &g)) != VKT_OK)
        rc = cli_fail("bench train: GEMM-only stream", st, vkt_context_errmsg(ctx));
    if (rc == 0 && (st = measure(c, t, &f, &g, &fig)) != VKT_OK)
        rc = cli_fail("bench train", st, vkt_trainer_errmsg(t)[0] ? vkt_trainer_errmsg(t)
                                         : vkt_context_errmsg(ctx));
    if (rc == 0 && c->per_gemm && (st = per_gemm_times(&g, c->steps, us)) != VKT_OK)
        rc = cli_fail("bench train: GEMM timestamps", st, vkt_context_errmsg(ctx));
    if (rc == 0 && c->per_gemm)
        print_per_gemm(&g, us);
    if (rc == 0) {
        print_table(c, &g, &fig);
        printf("result: step_ms=%.3f gemm_ms=%.3f ratio=%.3f\n", fig.step_best, fig.gemm_best,
               fig.step_best / fig.gemm_best);
    }
    gemm_only_destroy(&g);
    free(f.x);
    free(f.y);
    vkt_trainer_destroy(t);
    vkt_graph_destroy(n.graph);
    return rc;
}

int cmd_bench_train(int argc, char **argv)
{
    bench_cfg c;
    if (!parse_args(argc, argv, &c))
        return usage();
    vkt_instance *inst = cli_instance();
    if (!inst)
        return 1;
    vkt_context *ctx = NULL;
    uint32_t device = 0;
    int rc = open_gemm_context(inst, &device, &ctx);
    if (rc == 0) {
        print_header(ctx, &c);
        fflush(stdout);
        rc = bench_run(inst, device, ctx, &c);
    }
    vkt_context_destroy(ctx);
    vkt_instance_destroy(inst);
    return rc;
}
