/* vkt bench parallel: data-parallel training of the 784-256-128-10 MLP (relu, softmax
 * cross-entropy, SGD with momentum, global batch 128) on the shipped digits, in one run:
 *
 *  1. throughput: samples/s for 1, 2 and 4 replicas in sync and async mode. The replicas
 *     are one device listed N times (each its own logical device and host thread). Each
 *     configuration gets a fresh trainer, a short warm-up fit, then a timed fit of
 *     --steps global steps (steps * batch samples in either mode: async replicas each
 *     make --steps updates on their share of the batch). Every round runs every
 *     configuration and the fastest of --rounds rounds is reported, so a passing load
 *     on a shared machine falls on all configurations alike and is mostly filtered out.
 *     Per replica and step also: the host round trips (submissions, fence waits, staged
 *     transfers) and the exposed time, the device waiting for the host (the
 *     vkt_trainer_stats differences across the timed fit);
 *  2. the bandwidth of the sync averaging: bytes the host reduction reads and writes per
 *     step (every replica's staged gradient read once, the average written back into
 *     every stage: 2 * N * params * 4) over the averaging time per step from
 *     vkt_trainer_stats, next to a plain memcpy moving the same bytes and a
 *     single-threaded loop doing the same reduction, both timed in this run;
 *  3. waiting: per-replica time per step spent waiting (barriers, staleness gates) with
 *     and without one replica slowed by --slow-ms per step (options.slow_replica /
 *     slow_seconds), in sync, async, and async with a staleness bound.
 *
 *  4. sync replicas sharing one VkDevice (the device reducer) or a VkDevice each;
 *  5. async replicas sharing one VkDevice (the master on it) or a VkDevice each.
 *
 * Last line: result: sync4_samples_per_s=<x> async4_samples_per_s=<y> avg_gbps=<z>
 *                    memcpy_gbps=<w> avg2_vs_memcpy=<r2> avg4_vs_memcpy=<r4>
 *                    sync2_fence_waits_per_step=<f> sync2_exposed_ms=<e>
 *                    async4_shared_samples_per_s=<a>
 * (avg_gbps and memcpy_gbps with 4 replicas; r2, r4 the averaging's GB/s over the memcpy's
 * with 2 and 4; the last two per replica and step, 2 sync replicas)
 * On a CPU device (lavapipe) every replica shares the same cores: the figures show the
 * overheads of data parallelism, not a speedup. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "models.h"
#include "platform/platform.h"

#define MAX_REP 4

typedef struct bench_args {
    const char *data;
    uint64_t steps, warmup;
    uint32_t batch;
    double slow_ms;
    uint32_t staleness;
    uint32_t rounds;
} bench_args;

/* One configuration and what it measured (the timed fit only, warm-up excluded). */
typedef struct par_run {
    const char *label;
    vkt_parallel_mode mode;
    uint32_t n;
    int slowed, bounded;
    uint32_t staleness;
    double seconds;                          /* wall time of the timed fit */
    uint64_t steps;                          /* global steps it took */
    double avg_seconds;                      /* sync averaging, summed */
    double busy[MAX_REP], wait[MAX_REP];     /* per replica, seconds summed */
    uint64_t rep_steps[MAX_REP];
    uint64_t staged_per_step, params;
    double stale_mean;
    uint64_t stale_max;
    /* per holder (replica) and step: host round trips and the devices' exposed wait */
    double submits, fence_waits, transfers, exposed_s;
    uint32_t avg_threads;                    /* sync: host threads summing */
    int stage_cached;                        /* the staging's memory is host-cached */
    int shared;                              /* VKT_SHARE_DEVICE=1: one VkDevice */
    int import;                              /* VKT_HOST_IMPORT=1: staging imported */
    const char *reducer;                     /* who averaged (vkt_trainer_stats) */
    double host_mb;                          /* gradient MB the host read per step */
    const char *exchange;                    /* async: where the master is */
    double xc_mb;                            /*   parameter MB the host moved per step */
} par_run;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: vkt bench parallel [options]\n"
            "  --steps N      timed global steps per configuration (default 100)\n"
            "  --batch B      global batch (default 128; at least 4: 4 replicas share it)\n"
            "  --warmup N     untimed steps first, on the same trainer (default 10)\n"
            "  --slow-ms M    the slowed replica sleeps M ms before each step (default 5)\n"
            "  --staleness S  the bound of the bounded async rows (default 1)\n"
            "  --rounds R     run every configuration R times, report the fastest (default 3)\n"
            "  --data DIR     MNIST-style folder (default: $VKT_DATA_DIR, else the shipped\n"
            "                 digits)\n"
            "Set LP_NUM_THREADS (lavapipe's thread count) for stable figures.\n");
}

/* Returns 0, 2 on a usage error (printed), 3 after --help. */
static int parse_args(int argc, char **argv, bench_args *a)
{
    *a = (bench_args){.steps = 100, .warmup = 10, .batch = 128, .slow_ms = 5.0,
                      .staleness = 1, .rounds = 3};
    for (int i = 0; i < argc; i++) {
        const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
        int ok = 1;
        if (strcmp(k, "--help") == 0 || strcmp(k, "-h") == 0) {
            usage(stdout);
            return 3;
        }
        if (!v) {
            fprintf(stderr, "vkt bench parallel: %s needs a value\n", k);
            usage(stderr);
            return 2;
        }
        if (strcmp(k, "--steps") == 0) {
            a->steps = strtoull(v, &end, 10);
            ok = a->steps > 0 && a->steps <= 1000000;
        } else if (strcmp(k, "--batch") == 0) {
            unsigned long b = strtoul(v, &end, 10);
            ok = b >= MAX_REP && b <= 65536;
            a->batch = (uint32_t)b;
        } else if (strcmp(k, "--warmup") == 0) {
            a->warmup = strtoull(v, &end, 10);
            ok = a->warmup <= 1000000;
        } else if (strcmp(k, "--slow-ms") == 0) {
            a->slow_ms = strtod(v, &end);
            ok = a->slow_ms > 0 && a->slow_ms <= 10000;
        } else if (strcmp(k, "--staleness") == 0) {
            unsigned long s = strtoul(v, &end, 10);
            ok = s <= 1000;
            a->staleness = (uint32_t)s;
        } else if (strcmp(k, "--rounds") == 0) {
            unsigned long n = strtoul(v, &end, 10);
            ok = n >= 1 && n <= 100;
            a->rounds = (uint32_t)n;
        } else if (strcmp(k, "--data") == 0) {
            a->data = v;
        } else {
            fprintf(stderr, "vkt bench parallel: unknown option '%s'\n", k);
            usage(stderr);
            return 2;
        }
        if (end && (end == v || *end != '\0' || *v == '-'))
            ok = 0;
        if (!ok) {
            fprintf(stderr, "vkt bench parallel: bad value '%s' for %s\n", v, k);
            usage(stderr);
            return 2;
        }
        i++;
    }
    return 0;
}

/* Creates the trainer of one configuration, fits the warm-up, then the timed steps;
 * fills the measured part of r. Prints its own error; returns 0 or 1. */
static int run_one(vkt_instance *inst, const cli_model *m, const vkt_dataset *train,
                   uint32_t device, const bench_args *a, par_run *r)
{
    uint32_t dev[MAX_REP];
    for (uint32_t i = 0; i < r->n; i++)
        dev[i] = device;
    vkt_trainer_options to = {.batch = a->batch, .devices = dev, .device_count = r->n,
                              .mode = r->mode, .bounded_staleness = r->bounded,
                              .staleness = r->staleness, .slow_replica = r->n - 1,
                              .slow_seconds = r->slowed ? a->slow_ms * 1e-3 : 0};
    to.optimizer = (vkt_optimizer_options){.kind = VKT_OPTIMIZER_SGD, .lr = 0.05f,
                                           .momentum = 0.9f};
    vkt_trainer *tr = NULL;
    /* the replicas share one VkDevice (read at creation; the rows without: one each) */
    const char *env = plat_getenv("VKT_SHARE_DEVICE");
    char keep[16] = "";
    if (env)
        snprintf(keep, sizeof keep, "%s", env);
    const char *ienv = plat_getenv("VKT_HOST_IMPORT");
    char ikeep[16] = "";
    if (ienv)
        snprintf(ikeep, sizeof ikeep, "%s", ienv);
    plat_setenv("VKT_SHARE_DEVICE", r->shared ? "1" : "0");
    plat_setenv("VKT_HOST_IMPORT", r->import ? "1" : "0");
    vkt_status st = vkt_trainer_create(inst, m->graph, m->loss, &to, &tr);
    plat_setenv("VKT_SHARE_DEVICE", env ? keep : NULL);
    plat_setenv("VKT_HOST_IMPORT", ienv ? ikeep : NULL);
    if (st != VKT_OK)
        return cli_fail("bench parallel: cannot create the trainer", st, vkt_last_error());
    const uint64_t seed = 1;
    vkt_trainer_stats s0, s1;
    if (a->warmup)
        st = vkt_trainer_fit(tr, train, m->input, m->labels, a->warmup, seed, NULL, NULL);
    if (st == VKT_OK)
        st = vkt_trainer_stats_get(tr, &s0);
    double t0 = cli_now();
    if (st == VKT_OK)
        st = vkt_trainer_fit(tr, train, m->input, m->labels, a->steps, seed, NULL, NULL);
    r->seconds = cli_now() - t0;
    if (st == VKT_OK)
        st = vkt_trainer_stats_get(tr, &s1);
    if (st != VKT_OK) {
        cli_fail("bench parallel: training failed", st, vkt_trainer_errmsg(tr));
        vkt_trainer_destroy(tr);
        return 1;
    }
    r->steps = s1.steps - s0.steps;
    r->avg_seconds = s1.average_seconds - s0.average_seconds;
    for (uint32_t i = 0; i < r->n; i++) {
        r->busy[i] = s1.replica[i].step_seconds - s0.replica[i].step_seconds;
        r->wait[i] = s1.replica[i].wait_seconds - s0.replica[i].wait_seconds;
        r->rep_steps[i] = s1.replica[i].steps - s0.replica[i].steps;
    }
    r->staged_per_step = s1.bytes_staged_per_step;
    r->avg_threads = s1.average_threads;
    r->stage_cached = s1.stage_cached;
    r->reducer = s1.reducer;
    r->host_mb = r->steps ? (double)(s1.average_host_bytes - s0.average_host_bytes) / 1e6 /
                                (double)r->steps : 0;
    r->exchange = s1.exchange;
    r->xc_mb = r->steps ? (double)(s1.exchange_host_bytes - s0.exchange_host_bytes) / 1e6 /
                              (double)r->steps : 0;
    double per = (double)s1.holders * (double)r->steps; /* holder-steps of the timed fit */
    if (per > 0) {
        r->submits = (double)(s1.submits - s0.submits) / per;
        r->fence_waits = (double)(s1.fence_waits - s0.fence_waits) / per;
        r->transfers = (double)(s1.sync_transfers - s0.sync_transfers) / per;
        r->exposed_s = (s1.exposed_seconds - s0.exposed_seconds) / per;
    }
    r->params = vkt_trainer_param_count(tr);
    r->stale_mean = s1.staleness_mean; /* async statistics are per fit call */
    r->stale_max = s1.staleness_max;
    vkt_trainer_destroy(tr);
    return 0;
}

static double per_step_ms(double seconds, uint64_t steps)
{
    return steps ? 1e3 * seconds / (double)steps : 0;
}

static double samples_per_s(const par_run *r, uint32_t batch)
{
    return r->seconds > 0 ? (double)r->steps * batch / r->seconds : 0;
}

static double mean_of(const double *v, const uint64_t *steps, uint32_t from, uint32_t to)
{
    double sum = 0;
    for (uint32_t i = from; i < to; i++)
        sum += per_step_ms(v[i], steps[i]);
    return to > from ? sum / (to - from) : 0;
}

/* ---- host references: memcpy and a single-threaded reduction of the same bytes ---- */

static volatile float g_sink;

/* Seconds per copy of `bytes` (mean of the timed repetitions after one untimed). */
static double time_memcpy(size_t bytes)
{
    char *src = malloc(bytes), *dst = malloc(bytes);
    if (!src || !dst) {
        free(src);
        free(dst);
        return 0;
    }
    memset(src, 1, bytes);
    memcpy(dst, src, bytes);
    int reps = 0;
    double t0 = cli_now(), t = 0;
    while (reps < 20 || t < 0.2) {
        memcpy(dst, src, bytes);
        src[(size_t)reps % bytes] = (char)reps; /* each copy differs: nothing to elide */
        reps++;
        t = cli_now() - t0;
    }
    g_sink = (float)dst[bytes / 2];
    free(src);
    free(dst);
    return t / reps;
}

/* Seconds per reduction of n arrays of `count` floats, the trainer's reduction done by
 * one thread: s = sum_q w_q * a_q[i], then a_q[i] = s for every q. */
static double time_sum(uint32_t n, uint64_t count)
{
    float *arr[MAX_REP] = {0};
    int ok = 1;
    for (uint32_t q = 0; q < n; q++) {
        arr[q] = malloc(count * sizeof(float));
        ok &= arr[q] != NULL;
        for (uint64_t i = 0; ok && i < count; i++)
            arr[q][i] = (float)((i + q) % 17) * 0.01f;
    }
    double per = 0;
    if (ok) {
        const float w = 1.0f / (float)n;
        int reps = 0;
        double t0 = 0, t = 0;
        for (reps = -1; reps < 20 || t < 0.2; reps++) { /* rep -1: untimed */
            if (reps == 0)
                t0 = cli_now();
            for (uint64_t i = 0; i < count; i++) {
                float s = 0.0f;
                for (uint32_t q = 0; q < n; q++)
                    s += w * arr[q][i];
                for (uint32_t q = 0; q < n; q++)
                    arr[q][i] = s;
            }
            if (reps >= 0)
                t = cli_now() - t0;
        }
        g_sink = arr[0][count / 2];
        per = t / reps;
    }
    for (uint32_t q = 0; q < n; q++)
        free(arr[q]);
    return per;
}

static double gbps(double bytes, double seconds)
{
    return seconds > 0 ? bytes / seconds * 1e-9 : 0;
}

/* ---- the tables -------------------------------------------------------------------- */

static void print_throughput(const par_run *runs, uint32_t count, uint32_t batch)
{
    printf("\n1. throughput: %s\n", "global batch split across the replicas, one device "
                                    "listed N times");
    printf("%-6s %8s %8s %10s %9s %7s %10s %10s %10s %9s %9s %14s %9s\n", "mode", "replicas",
           "rows/rep", "samples/s", "ms/step", "vs 1", "busy ms", "wait ms", "avg ms",
           "MB staged", "exposed", "S/F/T", "stale");
    double base = 0;
    for (uint32_t k = 0; k < count; k++) {
        const par_run *r = &runs[k];
        double sps = samples_per_s(r, batch);
        if (r->n == 1)
            base = sps;
        char stale[32] = "-";
        if (r->mode == VKT_PARALLEL_ASYNC && r->n > 1)
            snprintf(stale, sizeof stale, "%.2f/%llu", r->stale_mean,
                     (unsigned long long)r->stale_max);
        char avg[32] = "-";
        if (r->mode == VKT_PARALLEL_SYNC && r->n > 1)
            snprintf(avg, sizeof avg, "%.3f", per_step_ms(r->avg_seconds, r->steps));
        char trips[48];
        snprintf(trips, sizeof trips, "%.2f/%.2f/%.2f", r->submits, r->fence_waits,
                 r->transfers);
        printf("%-6s %8u %8u %10.0f %9.2f %6.2fx %10.2f %10.2f %10s %9.2f %9.3f %14s %9s\n",
               r->mode == VKT_PARALLEL_SYNC ? "sync" : "async", r->n, batch / r->n, sps,
               per_step_ms(r->seconds, r->steps), base > 0 ? sps / base : 0,
               mean_of(r->busy, r->rep_steps, 0, r->n), mean_of(r->wait, r->rep_steps, 0, r->n),
               avg, (double)r->staged_per_step / 1e6, 1e3 * r->exposed_s, trips, stale);
    }
    printf("(busy/wait ms: per replica and step, mean over the replicas; avg ms: sync "
           "averaging on the host per step;\n exposed: ms per replica and step its device "
           "waited for the host, from the wait for its last submission to its next one;\n"
           " S/F/T: host round trips per replica and step: queue submissions, fence waits, "
           "synchronous staged transfers;\n stale: async staleness mean/max in master "
           "updates; with 1 replica both modes run the same single-replica step)\n");
}

static void print_wait_table(const par_run *runs, uint32_t count, uint32_t batch,
                             const bench_args *a)
{
    printf("\n3. waiting for the slowest replica: the last replica sleeps %.1f ms before each "
           "step when slowed\n", a->slow_ms);
    printf("%-14s %8s %6s %10s %9s %31s %9s %9s\n", "mode", "replicas", "slowed", "samples/s",
           "ms/step", "wait ms/step, replica 0..N-1", "fast", "slow");
    for (uint32_t k = 0; k < count; k++) {
        const par_run *r = &runs[k];
        char per[64] = "", *p = per;
        for (uint32_t i = 0; i < r->n; i++)
            p += snprintf(p, sizeof per - (size_t)(p - per), "%s%.2f", i ? " " : "",
                          per_step_ms(r->wait[i], r->rep_steps[i]));
        char slowed[16];
        snprintf(slowed, sizeof slowed, r->slowed ? "+%gms" : "no", a->slow_ms);
        printf("%-14s %8u %6s %10.0f %9.2f %31s %9.2f %9.2f\n", r->label, r->n, slowed,
               samples_per_s(r, batch), per_step_ms(r->seconds, r->steps), per,
               mean_of(r->wait, r->rep_steps, 0, r->n - 1),
               per_step_ms(r->wait[r->n - 1], r->rep_steps[r->n - 1]));
    }
    printf("(fast: mean wait of the replicas that are not slowed; slow: the slowed one's; "
           "async waits only at a staleness bound)\n");
}

/* Sync replicas on one device listed twice and 4 times, each on a VkDevice of its own
 * (host reducer) and sharing one (VKT_SHARE_DEVICE=1: the device reducer where it has
 * timelines): who averages, and what the host reads for it. */
static void print_shared(const par_run *runs, uint32_t count, uint32_t batch, double base)
{
    printf("\n4. sync replicas sharing one VkDevice (VKT_SHARE_DEVICE=1) or a VkDevice each\n");
    printf("%-12s %8s %11s %10s %9s %7s %10s %9s %14s %12s\n", "VkDevice", "replicas",
           "reducer", "samples/s", "ms/step", "vs 1", "busy ms", "exposed", "S/F/T",
           "host MB read");
    for (uint32_t k = 0; k < count; k++) {
        const par_run *r = &runs[k];
        double sps = samples_per_s(r, batch);
        char trips[48];
        snprintf(trips, sizeof trips, "%.2f/%.2f/%.2f", r->submits, r->fence_waits,
                 r->transfers);
        printf("%-12s %8u %11s %10.0f %9.2f %6.2fx %10.2f %9.3f %14s %12.3f\n",
               r->shared ? "shared" : "one each", r->n, r->reducer ? r->reducer : "-", sps,
               per_step_ms(r->seconds, r->steps), base > 0 ? sps / base : 0,
               mean_of(r->busy, r->rep_steps, 0, r->n), 1e3 * r->exposed_s, trips, r->host_mb);
    }
    printf("(reducer: who averages, the host's threads (host-import: the staging in one host "
           "allocation every device\n imported, VKT_HOST_IMPORT=1) or a kernel on the shared "
           "device ordered by timelines;\n host MB read: gradient bytes the host read per step to "
           "average them; on lavapipe one queue serves\n every replica sharing the device, so "
           "they take turns: no concurrency, the path is what is measured)\n");
}

/* Async replicas on one device listed twice and 4 times, each on a VkDevice of its own
 * (the host master) and sharing one (VKT_SHARE_DEVICE=1: the master on the device where
 * it has timelines): where the master is, and the parameter bytes the host moves for it. */
static void print_async_shared(const par_run *runs, uint32_t count, uint32_t batch, double base)
{
    printf("\n5. async replicas sharing one VkDevice (VKT_SHARE_DEVICE=1) or a VkDevice each\n");
    printf("%-12s %8s %9s %10s %9s %7s %10s %9s %14s %10s %13s\n", "VkDevice", "replicas",
           "master", "samples/s", "ms/step", "vs 1", "busy ms", "wait ms", "S/F/T", "stale",
           "host MB moved");
    for (uint32_t k = 0; k < count; k++) {
        const par_run *r = &runs[k];
        double sps = samples_per_s(r, batch);
        char trips[48], stale[32];
        snprintf(trips, sizeof trips, "%.2f/%.2f/%.2f", r->submits, r->fence_waits,
                 r->transfers);
        snprintf(stale, sizeof stale, "%.2f/%llu", r->stale_mean,
                 (unsigned long long)r->stale_max);
        printf("%-12s %8u %9s %10.0f %9.2f %6.2fx %10.2f %9.2f %14s %10s %13.3f\n",
               r->shared ? "shared" : "one each", r->n, r->exchange ? r->exchange : "-", sps,
               per_step_ms(r->seconds, r->steps), base > 0 ? sps / base : 0,
               mean_of(r->busy, r->rep_steps, 0, r->n), mean_of(r->wait, r->rep_steps, 0, r->n),
               trips, stale, r->xc_mb);
    }
    printf("(master: the host's (relaxed atomics; each update pulls it into an upload buffer "
           "and pushes the\n change read from a host stage) or a buffer on the shared device "
           "(the pull and the push inside\n the step's submission, ordered by a timeline); "
           "host MB moved: parameter bytes the host copied\n per step for it; S/F/T per update, "
           "the device master's begin and end included (one each a fit))\n");
}

/* The configurations, in the order each round runs them: 0-5 throughput, 6-9 the rest
 * of the waiting table, 10-11 sync replicas sharing one VkDevice, 12 two on a VkDevice
 * each with their staging imported, 13-14 async replicas sharing one VkDevice. */
#define N_CONF 15
static par_run conf_of(int k, uint32_t staleness, char *bounded_label)
{
    static const uint32_t ns[3] = {1, 2, 4};
    if (k >= 13)
        return (par_run){.label = "async", .mode = VKT_PARALLEL_ASYNC, .n = k == 13 ? 2 : 4,
                         .shared = 1};
    if (k == 12)
        return (par_run){.label = "sync", .mode = VKT_PARALLEL_SYNC, .n = 2, .import = 1};
    if (k >= 10)
        return (par_run){.label = "sync", .mode = VKT_PARALLEL_SYNC, .n = k == 10 ? 2 : 4,
                         .shared = 1};
    if (k < 6)
        return (par_run){.label = k < 3 ? "sync" : "async",
                         .mode = k < 3 ? VKT_PARALLEL_SYNC : VKT_PARALLEL_ASYNC,
                         .n = ns[k % 3]};
    par_run r = {.n = 4, .mode = VKT_PARALLEL_ASYNC, .label = "async", .staleness = staleness};
    if (k == 6)
        r.mode = VKT_PARALLEL_SYNC, r.label = "sync", r.slowed = 1;
    else if (k == 7)
        r.slowed = 1;
    else
        r.bounded = 1, r.label = bounded_label, r.slowed = k == 9;
    return r;
}

/* Host references of one round: seconds per memcpy of 2 and 4 stages, per one-thread
 * reduction of 2 and 4 arrays, per memcpy of 64 MiB; the lowest over the rounds kept. */
typedef struct host_refs {
    double copy[MAX_REP + 1], sum[MAX_REP + 1], big;
} host_refs;
#define BIG_COPY ((size_t)64 << 20) /* 64 MiB: twice the L3 of the machine measured */

static void measure_refs(host_refs *h, uint64_t params, int first)
{
    for (uint32_t n = 2; n <= MAX_REP; n *= 2) {
        double c = time_memcpy((size_t)n * params * 4), s = time_sum(n, params);
        h->copy[n] = first || c < h->copy[n] ? c : h->copy[n];
        h->sum[n] = first || s < h->sum[n] ? s : h->sum[n];
    }
    double b = time_memcpy(BIG_COPY);
    h->big = first || b < h->big ? b : h->big;
}

/* avg_gbps / memcpy_gbps: [n] for n = 2 and 4 replicas. */
static void print_averaging(const par_run *thr, uint32_t n_thr, const host_refs *h,
                            double *avg_gbps, double *memcpy_gbps)
{
    printf("\n2. averaging bandwidth: the sync reduction reads every replica's staged "
           "gradient and writes the average\n   back into every stage: 2 x replicas x %llu "
           "params x 4 bytes per step (read + write counted, for all rows)\n",
           (unsigned long long)thr[0].params);
    for (uint32_t k = 0; k < n_thr; k++)
        if (thr[k].mode == VKT_PARALLEL_SYNC && thr[k].n == 2)
            printf("   the stages are in %s memory\n",
                   thr[k].stage_cached > 0 ? "host-cached" : "uncached (slow host reads)");
    printf("%-44s %10s %10s %8s\n", "what", "MB/step", "ms", "GB/s");
    for (uint32_t k = 0; k < n_thr; k++) {
        const par_run *r = &thr[k];
        if (r->mode != VKT_PARALLEL_SYNC || r->n < 2)
            continue;
        double bytes = 2.0 * r->n * (double)r->params * 4;
        double avg_s = r->steps ? r->avg_seconds / (double)r->steps : 0;
        char what[64];
        snprintf(what, sizeof what, "sync averaging, %u replicas (%u threads)", r->n,
                 r->avg_threads);
        printf("%-44s %10.2f %10.3f %8.2f\n", what, bytes / 1e6, avg_s * 1e3, gbps(bytes, avg_s));
        snprintf(what, sizeof what, "memcpy of %u stages (1 thread)", r->n);
        printf("%-44s %10.2f %10.3f %8.2f\n", what, bytes / 1e6, h->copy[r->n] * 1e3,
               gbps(bytes, h->copy[r->n]));
        snprintf(what, sizeof what, "sum of %u arrays, written back (1 thread)", r->n);
        printf("%-44s %10.2f %10.3f %8.2f\n", what, bytes / 1e6, h->sum[r->n] * 1e3,
               gbps(bytes, h->sum[r->n]));
        avg_gbps[r->n] = gbps(bytes, avg_s);
        memcpy_gbps[r->n] = gbps(bytes, h->copy[r->n]);
    }
    printf("%-44s %10.2f %10.3f %8.2f\n", "memcpy of 64 MiB, beyond L3 (1 thread)",
           2.0 * (double)BIG_COPY / 1e6, h->big * 1e3, gbps(2.0 * (double)BIG_COPY, h->big));
    printf("(averaging ms: from the release of the first barrier to the release of the "
           "second, as replica 0 sees it:\n thread wake-ups included; the same bytes also "
           "cross host <-> device each step: 'MB staged' above)\n");
}

static int bench(const bench_args *a, vkt_instance *inst)
{
    uint32_t sel[VKT_MAX_REPLICAS], n_sel = 0;
    vkt_status st = vkt_instance_select_devices(inst, sel, VKT_MAX_REPLICAS, &n_sel);
    if (st != VKT_OK)
        return cli_fail("bench parallel: cannot select a device", st, vkt_last_error());
    uint32_t device = sel[0];
    vkt_device_info info;
    vkt_instance_device_info(inst, device, &info);
    const char *threads = getenv("LP_NUM_THREADS");
    printf("device: %s (device %u listed 1, 2 and 4 times), %ld host CPUs online, "
           "LP_NUM_THREADS=%s\n", info.name, device, plat_cpu_count(),
           threads ? threads : "unset (lavapipe picks; set it for stable figures)");
    if (info.type == VKT_DEVICE_TYPE_CPU)
        printf("note: a CPU device: every replica shares the same cores, so more replicas "
               "cannot be faster in total\n");

    vkt_dataset *train = NULL, *test = NULL;
    const char *dir = a->data ? a->data : cli_default_data_dir();
    st = vkt_dataset_load_mnist(dir, &train, &test);
    if (st != VKT_OK)
        return cli_fail("bench parallel: cannot load the data set", st, vkt_last_error());
    cli_model m = {0};
    const uint32_t widths[2] = {256, 128};
    int rc = 1;
    st = cli_build_mlp(&m, a->batch, vkt_dataset_features(train), vkt_dataset_classes(train),
                       widths, 2, 0.0f, 1);
    if (st != VKT_OK) {
        cli_fail("bench parallel: cannot build the model", st, vkt_graph_errmsg(m.graph));
        goto done;
    }
    printf("model: MLP %u-256-128-%u, batch %u, SGD momentum; %u training samples from %s\n"
           "each row: a fresh trainer, %llu warm-up + %llu timed steps; the fastest of %u "
           "rounds (every round runs every row)\n", vkt_dataset_features(train),
           vkt_dataset_classes(train), a->batch, vkt_dataset_count(train), dir,
           (unsigned long long)a->warmup, (unsigned long long)a->steps, a->rounds);
    fflush(stdout);

    char bounded_label[32];
    snprintf(bounded_label, sizeof bounded_label, "async s<=%u", a->staleness);
    par_run best[N_CONF];
    host_refs refs = {{0}, {0}, 0};
    for (uint32_t round = 0; round < a->rounds; round++) {
        for (int k = 0; k < N_CONF; k++) {
            par_run r = conf_of(k, a->staleness, bounded_label);
            if (run_one(inst, &m, train, device, a, &r))
                goto done;
            if (round == 0 || samples_per_s(&r, a->batch) > samples_per_s(&best[k], a->batch))
                best[k] = r;
            if (k == 5)
                measure_refs(&refs, r.params, round == 0);
        }
    }

    print_throughput(best, 6, a->batch);
    double avg[MAX_REP + 1] = {0}, copy[MAX_REP + 1] = {0}, ratio[MAX_REP + 1] = {0};
    print_averaging(best, 6, &refs, avg, copy);
    for (uint32_t n = 2; n <= MAX_REP; n *= 2)
        ratio[n] = copy[n] > 0 ? avg[n] / copy[n] : 0;
    printf("sync averaging vs a memcpy of the same bytes: %.2fx with 2 replicas, %.2fx with 4 "
           "(goal on a GPU host: 0.8x)\n", ratio[2], ratio[4]);
    /* the waiting table: not slowed (throughput rows), slowed, for each kind */
    par_run wt[6] = {best[2], best[6], best[5], best[7], best[8], best[9]};
    print_wait_table(wt, 6, a->batch, a);
    par_run sh[5] = {best[1], best[12], best[10], best[2], best[11]};
    print_shared(sh, 5, a->batch, samples_per_s(&best[0], a->batch));
    par_run as[4] = {best[4], best[13], best[5], best[14]};
    print_async_shared(as, 4, a->batch, samples_per_s(&best[0], a->batch));
    printf("result: sync4_samples_per_s=%.1f async4_samples_per_s=%.1f avg_gbps=%.2f "
           "memcpy_gbps=%.2f avg2_vs_memcpy=%.3f avg4_vs_memcpy=%.3f "
           "sync2_fence_waits_per_step=%.2f sync2_exposed_ms=%.3f "
           "async4_shared_samples_per_s=%.1f\n",
           samples_per_s(&best[2], a->batch), samples_per_s(&best[5], a->batch), avg[4], copy[4],
           ratio[2], ratio[4], best[1].fence_waits, 1e3 * best[1].exposed_s,
           samples_per_s(&best[14], a->batch));
    rc = 0;
done:
    vkt_graph_destroy(m.graph);
    vkt_dataset_destroy(train);
    vkt_dataset_destroy(test);
    return rc;
}

int cmd_bench_parallel(int argc, char **argv)
{
    bench_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc)
        return rc == 3 ? 0 : rc;
    vkt_instance *inst = cli_instance();
    if (!inst)
        return 1;
    rc = bench(&a, inst);
    vkt_instance_destroy(inst);
    return rc;
}
