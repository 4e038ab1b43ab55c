/* Training across ranks under ThreadSanitizer: the ranks are threads of this process
 * (tests/world_threads.c stands in for MPI), each with its own trainer on device 0 and
 * the same graph, so reduce_world.c, trainer_world.c and the parameter server of ps.c with
 * its communication thread run instrumented. Registered as test_ranks.tsan; any TSan
 * report fails it (halt_on_error). The rank threads only record; the checks run on the
 * main thread after they are joined (the harness's counters are not thread-safe).
 * Checks:
 *  - sync steps over 3 ranks (one bucket; then buckets of 40 floats, three allreduces in
 *    flight): every rank bitwise equal, and equal to one replica on the whole batch
 *    (1e-4 / 1e-5);
 *  - sync fit on a data set over 2 ranks: every rank bitwise equal;
 *  - async fit with staleness bound 0 over 2 ranks equals the sync fit; unbounded async
 *    over 3 ranks finishes with finite parameters, every update counted, and a
 *    checkpoint taken from the chief's callback during the run;
 *  - a failure on one rank stops every rank at that step, naming it, and the job goes on;
 *    a stop asked by the chief's callback ends an async run (bound 1) and a sync run on
 *    every rank;
 *  - 2 ranks x 2 replicas: sync steps and an async fit with bound 0;
 *  - the transport itself: every collective, two allreduces in flight completed out of
 *    order, a ring of messages, a message too large, receives posted ahead, a late rank
 *    named by a timeout;
 *  - pipeline stages across 2 ranks (pipe_world.c: a stage per rank, edges as messages):
 *    both ranks bitwise equal, and equal bit for bit to the 2-stage pipeline in one
 *    process; async copies of it on 4 ranks (pipe_async_world.c) hold one master, within
 *    1e-4 of the one-process async pipeline of 2 copies. */
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "parallel/world.h"
#include "platform/platform.h"
#include "world_threads.h"

enum { F = 20, H = 16, C = 5, BATCH = 12, MAX_RANKS = 4, STEPS = 4, FIT_STEPS = 6,
       ROWS = 48, FAIL_STEP = 2 };

typedef struct net {
    vkt_graph *g;
    vkt_tensor *x, *y, *loss;
} net;

/* What a rank thread leaves for the checks. */
typedef struct rank_out {
    vkt_status st; /* the first failure */
    char msg[600];
    uint64_t np;
    float *params, *params2; /* [np] each (what they hold depends on the case) */
    vkt_trainer_stats stats;
    vkt_status saved;        /* the chief's checkpoint from its callback */
    vkt_status failed;       /* the failure case: the failed step's status and message */
    int failed_at;
    char failed_msg[600];
} rank_out;

typedef struct job job;
typedef void (*rank_fn)(job *j, uint32_t rank, rank_out *out);

struct job {
    uint32_t ranks, replicas;
    uint32_t bucket_bytes, staleness;
    int overlap;
    uint32_t stages;         /* pipeline stages (0: none), 2 micro-batches */
    uint32_t copies;         /* alone with stages: the pipeline's copies (0: 1) */
    vkt_parallel_mode mode;  /* of rank_steps */
    vkt_world *worlds[MAX_RANKS];
    rank_out out[MAX_RANKS];
};

/* The same data for every rank, made on the main thread before they start. */
static float g_x[ROWS * F];
static int32_t g_y[ROWS];
static char g_ckpt[256];

static void note(rank_out *o, vkt_status st, const char *what, const char *msg)
{
    if (st != VKT_OK && o->st == VKT_OK) {
        o->st = st;
        snprintf(o->msg, sizeof o->msg, "%s: %s (%s)", what, vkt_status_name(st), msg);
    }
}

/* A rank thread's own check: the first that fails is its message. */
static void expect(rank_out *o, int cond, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void expect(rank_out *o, int cond, const char *fmt, ...)
{
    if (cond || o->st != VKT_OK)
        return;
    o->st = VKT_ERROR_INTERNAL;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(o->msg, sizeof o->msg, fmt, ap);
    va_end(ap);
}

static vkt_status make_net(net *n, uint32_t stages)
{
    vkt_graph_options go = {.seed = 77};
    *n = (net){0};
    vkt_status st = vkt_graph_create(&go, &n->g);
    if (st != VKT_OK)
        return st;
    vkt_shape xs = {2, {BATCH, F}}, w1 = {2, {F, H}}, b1 = {1, {H}}, w2 = {2, {H, C}},
              b2 = {1, {C}};
    vkt_init he = {.kind = VKT_INIT_HE}, gl = {.kind = VKT_INIT_GLOROT},
             small = {.kind = VKT_INIT_UNIFORM, .a = -0.1f, .b = 0.1f};
    n->x = vkt_input(n->g, "x", &xs);
    n->y = vkt_input_labels(n->g, "y", BATCH);
    vkt_tensor *h = vkt_relu(n->g, vkt_linear(n->g, n->x, vkt_param(n->g, "w1", &w1, &he),
                                              vkt_param(n->g, "b1", &b1, &small)));
    vkt_tensor *logits = vkt_linear(n->g, h, vkt_param(n->g, "w2", &w2, &gl),
                                    vkt_param(n->g, "b2", &b2, &small));
    n->loss = vkt_softmax_cross_entropy(n->g, logits, n->y);
    vkt_split_options so = {.stages = stages, .cost = VKT_SPLIT_COST_PARAMS};
    if (stages && vkt_graph_status(n->g) == VKT_OK) /* the same split on every rank */
        return vkt_graph_split(n->g, n->loss, &so, NULL);
    return vkt_graph_status(n->g);
}

static vkt_trainer *make_trainer(const job *j, net *n, vkt_world *w, vkt_parallel_mode mode,
                                 int bounded, rank_out *o)
{
    static const uint32_t dev[4] = {0, 0, 0, 0};
    vkt_trainer_options opt = {.batch = BATCH, .devices = dev,
                               .device_count = j->stages
                                                   ? (w ? 1 : j->stages * (j->copies ? j->copies : 1))
                                                   : w ? j->replicas : 1,
                               .world = w, .mode = mode,
                               .bounded_staleness = bounded, .staleness = j->staleness,
                               .check_identical = w && mode == VKT_PARALLEL_SYNC && !j->stages,
                               .bucket_bytes = j->bucket_bytes, .overlap = j->overlap,
                               .stages = j->stages, .micro_batches = j->stages ? 2 : 0};
    opt.optimizer = (vkt_optimizer_options){.kind = VKT_OPTIMIZER_SGD, .lr = 0.2f};
    vkt_trainer *t = NULL;
    vkt_status st = vkt_trainer_create(th_instance, n->g, n->loss, &opt, &t);
    note(o, st, "trainer", vkt_last_error());
    return t;
}

static void read_params(vkt_trainer *t, float **out, rank_out *o)
{
    o->np = vkt_trainer_param_count(t);
    *out = malloc(o->np * sizeof **out);
    if (!*out)
        note(o, VKT_ERROR_OUT_OF_MEMORY, "params", "out of memory");
    else
        note(o, vkt_trainer_read_params(t, *out, o->np), "read params", vkt_trainer_errmsg(t));
}

/* STEPS synchronous steps on the global batches of g_x, g_y (world NULL: the reference,
 * one replica alone). */
static void rank_steps(job *j, vkt_world *w, rank_out *o)
{
    net n;
    vkt_status st = make_net(&n, j->stages);
    note(o, st, "graph", vkt_last_error());
    vkt_trainer *t = st == VKT_OK ? make_trainer(j, &n, w, j->mode, 0, o) : NULL;
    for (int s = 0; t && s < STEPS && o->st == VKT_OK; s++) {
        vkt_feed f[2] = {{n.x, g_x + s * BATCH * F}, {n.y, g_y + s * BATCH}};
        note(o, vkt_trainer_step(t, f, 2, NULL), "step", vkt_trainer_errmsg(t));
    }
    if (t && o->st == VKT_OK) {
        read_params(t, &o->params, o);
        vkt_trainer_stats_get(t, &o->stats);
    }
    vkt_trainer_destroy(t);
    vkt_graph_destroy(n.g);
}

static void rank_sync_steps(job *j, uint32_t rank, rank_out *o)
{
    rank_steps(j, j->worlds[rank], o);
}

static int save_at_2(void *user, uint64_t step, uint64_t total, float loss)
{
    (void)total;
    (void)loss;
    void **u = user; /* {trainer, status} */
    if (step == 2)
        *(vkt_status *)u[1] = vkt_trainer_save(u[0], g_ckpt);
    return 0;
}

static int stop_at_3(void *user, uint64_t step, uint64_t total, float loss)
{
    (void)user;
    (void)total;
    (void)loss;
    return step == 3;
}

enum { CB_NONE, CB_SAVE, CB_STOP };

/* A fit of FIT_STEPS on the data set in `mode` (bounded: staleness j->staleness) into
 * *params; the chief's callback saves a checkpoint or stops the run. */
static void fit_once(job *j, vkt_world *w, const vkt_dataset *d, vkt_parallel_mode mode,
                     int bounded, int cb, float **params, rank_out *o)
{
    net n;
    vkt_status st = make_net(&n, j->stages);
    note(o, st, "graph", vkt_last_error());
    vkt_trainer *t = st == VKT_OK ? make_trainer(j, &n, w, mode, bounded, o) : NULL;
    if (t && o->st == VKT_OK) {
        void *u[2] = {t, &o->saved};
        vkt_progress_fn fn = cb == CB_SAVE ? save_at_2 : cb == CB_STOP ? stop_at_3 : NULL;
        note(o, vkt_trainer_fit(t, d, n.x, n.y, FIT_STEPS, 1, fn, u), "fit",
             vkt_trainer_errmsg(t));
    }
    if (t && o->st == VKT_OK) {
        read_params(t, params, o);
        vkt_trainer_stats_get(t, &o->stats);
    }
    vkt_trainer_destroy(t);
    vkt_graph_destroy(n.g);
}

static vkt_dataset *dataset(rank_out *o)
{
    vkt_dataset *d = NULL;
    note(o, vkt_dataset_create(ROWS, F, C, g_x, g_y, &d), "data set", vkt_last_error());
    return d;
}

/* Sync fit into params, then async with staleness bound 0 into params2. */
static void rank_sync_async(job *j, uint32_t rank, rank_out *o)
{
    vkt_dataset *d = dataset(o);
    if (d)
        fit_once(j, j->worlds[rank], d, VKT_PARALLEL_SYNC, 0, CB_NONE, &o->params, o);
    if (d && o->st == VKT_OK)
        fit_once(j, j->worlds[rank], d, VKT_PARALLEL_ASYNC, 1, CB_NONE, &o->params2, o);
    vkt_dataset_destroy(d);
}

/* Unbounded async; the chief checkpoints from its callback after step 2. */
static void rank_async_free(job *j, uint32_t rank, rank_out *o)
{
    vkt_dataset *d = dataset(o);
    if (d)
        fit_once(j, j->worlds[rank], d, VKT_PARALLEL_ASYNC, 0, CB_SAVE, &o->params, o);
    vkt_dataset_destroy(d);
}

/* Async with staleness bound j->staleness, stopped by the chief's callback after step
 * 3; then sync after a stop: the next fit goes on. */
static void rank_async_stop(job *j, uint32_t rank, rank_out *o)
{
    vkt_dataset *d = dataset(o);
    if (d)
        fit_once(j, j->worlds[rank], d, VKT_PARALLEL_ASYNC, 1, CB_STOP, &o->params, o);
    if (d && o->st == VKT_OK)
        fit_once(j, j->worlds[rank], d, VKT_PARALLEL_SYNC, 0, CB_STOP, &o->params2, o);
    vkt_dataset_destroy(d);
}

/* Sync steps where the last rank feeds a bad label (row BATCH-1 is its) at FAIL_STEP:
 * every rank stops there; then a good step on every rank. */
static void rank_sync_failure(job *j, uint32_t rank, rank_out *o)
{
    net n;
    vkt_status st = make_net(&n, j->stages);
    note(o, st, "graph", vkt_last_error());
    vkt_trainer *t = st == VKT_OK ? make_trainer(j, &n, j->worlds[rank], VKT_PARALLEL_SYNC, 0,
                                                 o) : NULL;
    int32_t y[BATCH];
    memcpy(y, g_y, sizeof y);
    vkt_feed f[2] = {{n.x, g_x}, {n.y, y}};
    o->failed_at = -1;
    for (int s = 0; t && s < STEPS && o->failed_at < 0; s++) {
        y[BATCH - 1] = s == FAIL_STEP && rank == j->ranks - 1 ? 99 : g_y[BATCH - 1];
        st = vkt_trainer_step(t, f, 2, NULL);
        if (st != VKT_OK) {
            o->failed = st;
            o->failed_at = s;
            snprintf(o->failed_msg, sizeof o->failed_msg, "%s", vkt_trainer_errmsg(t));
        }
    }
    y[BATCH - 1] = g_y[BATCH - 1];
    if (t) {
        note(o, vkt_trainer_step(t, f, 2, NULL), "the step after", vkt_trainer_errmsg(t));
        if (o->st == VKT_OK)
            read_params(t, &o->params, o);
    }
    vkt_trainer_destroy(t);
    vkt_graph_destroy(n.g);
}

/* Every collective of world.h, checked on each rank. */
static void transport_collectives(vkt_world *w, uint32_t rank, uint32_t R, rank_out *o)
{
    float f[3] = {rank + 1.0f, 0.5f, -(float)rank};
    expect(o, world_allreduce_f32(w, f, 3, "f32") == VKT_OK && f[0] == R * (R + 1) / 2.0f &&
                  f[1] == 0.5f * R && f[2] == -(R * (R - 1) / 2.0f),
           "rank %u: f32 sum %g %g %g", rank, f[0], f[1], f[2]);
    uint64_t u[2] = {rank + 10, 100 - rank};
    expect(o, world_allreduce_u64(w, u, 2, WORLD_MIN, "u64") == VKT_OK && u[0] == 10 &&
                  u[1] == 100 - (R - 1),
           "rank %u: u64 min %llu %llu", rank, (unsigned long long)u[0],
           (unsigned long long)u[1]);
    double d = rank;
    expect(o, world_allreduce_f64(w, &d, 1, WORLD_MAX, "f64") == VKT_OK && d == R - 1,
           "rank %u: f64 max %g", rank, d);
    float a = 1, b = (float)rank; /* two in flight, completed in the other order */
    world_req *ra = NULL, *rb = NULL;
    expect(o, world_iallreduce_f32(w, &a, 1, "a", &ra) == VKT_OK &&
                  world_iallreduce_f32(w, &b, 1, "b", &rb) == VKT_OK &&
                  world_wait(w, rb) == VKT_OK && world_wait(w, ra) == VKT_OK && a == R &&
                  b == R * (R - 1) / 2.0f,
           "rank %u: two allreduces in flight: %g %g", rank, a, b);
    char text[16];
    snprintf(text, sizeof text, rank ? "rank %u" : "chief", rank);
    expect(o, world_bcast(w, text, sizeof text, "bcast") == VKT_OK && !strcmp(text, "chief"),
           "rank %u: broadcast '%s'", rank, text);
    uint32_t me = rank * 7, all[MAX_RANKS] = {0};
    vkt_status st = world_gather(w, &me, sizeof me, rank ? NULL : all, "gather");
    for (uint32_t r = 0; r < R && rank == 0; r++)
        expect(o, st == VKT_OK && all[r] == r * 7, "gather: rank %u's %u", r, all[r]);
    float v[MAX_RANKS * (MAX_RANKS + 1) / 2];
    uint64_t counts[MAX_RANKS], displs[MAX_RANKS], at = 0;
    for (uint32_t r = 0; r < R; at += counts[r++]) {
        counts[r] = r + 1; /* rank r's piece: r + 1 floats */
        displs[r] = at;
        for (uint64_t i = 0; i < counts[r]; i++)
            v[at + i] = r == rank ? (float)r : -1.0f;
    }
    st = world_allgatherv_f32(w, v, counts, displs, "allgatherv");
    for (uint32_t r = 0; r < R; r++)
        for (uint64_t i = 0; i < counts[r]; i++)
            expect(o, st == VKT_OK && v[displs[r] + i] == (float)r,
                   "rank %u: allgatherv: piece %u holds %g", rank, r, v[displs[r] + i]);
    expect(o, world_barrier(w, "barrier") == VKT_OK, "rank %u: barrier", rank);
}

/* A ring of messages, then one too large for its receiver. */
static void transport_messages(vkt_world *w, uint32_t rank, uint32_t R, rank_out *o)
{
    uint32_t next = (rank + 1) % R, prev = (rank + R - 1) % R, payload[2] = {rank, rank};
    world_req *sr = NULL;
    expect(o, world_isend(w, next, 5, payload, 4, &sr) == VKT_OK && world_test(w, sr) == 1,
           "rank %u: send", rank);
    expect(o, world_isend(w, next, 6, payload, 8, &sr) == VKT_OK && world_wait(w, sr) == VKT_OK,
           "rank %u: send", rank);
    uint32_t got = UINT32_MAX, src = UINT32_MAX;
    uint64_t bytes = 0;
    double t0 = plat_now();
    while (src == UINT32_MAX && o->st == VKT_OK && plat_now() - t0 < 10) {
        expect(o, world_try_recv(w, 5, &got, sizeof got, &src, &bytes) == VKT_OK,
               "rank %u: receive: %s", rank, w->errmsg);
        plat_sleep(1e-4);
    }
    expect(o, src == prev && got == prev && bytes == 4, "rank %u: received %u from %u (%llu "
           "bytes)", rank, got, src, (unsigned long long)bytes);
    vkt_status st = VKT_OK;
    for (t0 = plat_now(); st == VKT_OK && o->st == VKT_OK && plat_now() - t0 < 10;
         plat_sleep(1e-4))
        st = world_try_recv(w, 6, &got, sizeof got, &src, &bytes);
    expect(o, st == VKT_ERROR_INTERNAL && strstr(w->errmsg, "exceeds"),
           "rank %u: a message too large: %s", rank, w->errmsg);
    /* Receives posted ahead (world_irecv): three messages of one tag from prev, matched
     * in the order sent, whichever completes first. */
    uint32_t in[3] = {0}, out[3] = {rank * 10, rank * 10 + 1, rank * 10 + 2};
    world_req *rr[3] = {NULL}, *ss[3] = {NULL};
    for (uint32_t k = 0; k < 3; k++)
        expect(o, world_irecv(w, prev, 9, &in[k], 4, &rr[k]) == VKT_OK, "rank %u: irecv: %s",
               rank, w->errmsg);
    for (uint32_t k = 0; k < 3; k++)
        expect(o, world_isend(w, next, 9, &out[k], 4, &ss[k]) == VKT_OK, "rank %u: send", rank);
    for (uint32_t k = 3; k-- > 0;)
        expect(o, world_wait(w, rr[k]) == VKT_OK && in[k] == prev * 10 + k,
               "rank %u: irecv %u got %u: %s", rank, k, in[k], w->errmsg);
    for (uint32_t k = 0; k < 3; k++)
        expect(o, world_wait(w, ss[k]) == VKT_OK, "rank %u: send done", rank);
}

/* The transport's checks; then the last rank misses a barrier, which the others' short
 * deadline turns into a timeout naming it. Every rank meets at a barrier first, and the
 * deadline is 2 s: the others then reach the late barrier together even on a loaded
 * machine (this test runs beside others), so only the absent rank is named. */
static void rank_transport(job *j, uint32_t rank, rank_out *o)
{
    vkt_world *w = j->worlds[rank];
    uint32_t R = j->ranks;
    transport_collectives(w, rank, R, o);
    transport_messages(w, rank, R, o);
    expect(o, world_barrier(w, "the transport's end") == VKT_OK, "rank %u: end barrier", rank);
    vkt_world_set_timeout(w, 2.0);
    if (rank + 1 == R)
        return;
    char want[64];
    snprintf(want, sizeof want, "rank(s) %u have not arrived", R - 1);
    w->step = 41;
    vkt_status st = world_barrier(w, "the late barrier");
    expect(o, st == VKT_ERROR_TIMEOUT && strstr(w->errmsg, want) &&
                  strstr(w->errmsg, "step 41: the late barrier did not complete"),
           "rank %u: a late rank: %s (%s)", rank, vkt_status_name(st), w->errmsg);
}

/* ---- the ranks' threads ---------------------------------------------------------- */

typedef struct rank_arg {
    job *j;
    rank_fn fn;
    uint32_t rank;
} rank_arg;

static void *rank_main(void *p)
{
    rank_arg *a = p;
    a->fn(a->j, a->rank, &a->j->out[a->rank]);
    return NULL;
}

/* Runs fn on `ranks` threads, each its own rank of one job; 0 when a thread or the
 * worlds could not be made. */
static int run_ranks(job *j, rank_fn fn, const char *name)
{
    double t0 = plat_now();
    pthread_t th[MAX_RANKS];
    rank_arg arg[MAX_RANKS];
    uint32_t started = 0;
    vkt_status st = world_threads_create(j->ranks, 60, j->worlds);
    if (!TH_CHECK(st == VKT_OK, "%s: worlds: %s", name, vkt_last_error()))
        return 0;
    for (uint32_t r = 0; r < j->ranks; r++) {
        arg[r] = (rank_arg){j, fn, r};
        if (pthread_create(&th[r], NULL, rank_main, &arg[r]) != 0)
            break;
        started++;
    }
    for (uint32_t r = 0; r < started; r++)
        pthread_join(th[r], NULL);
    for (uint32_t r = 0; r < j->ranks; r++)
        vkt_world_finalize(j->worlds[r]);
    printf("  %s: %u ranks x %u replicas, %.1f s\n", name, j->ranks, j->replicas,
           plat_now() - t0);
    int ok = TH_CHECK(started == j->ranks, "%s: %u of %u rank threads started", name, started,
                      j->ranks);
    for (uint32_t r = 0; r < j->ranks; r++)
        ok &= TH_CHECK(j->out[r].st == VKT_OK, "%s: rank %u: %s", name, r, j->out[r].msg);
    return ok;
}

static void job_free(job *j)
{
    for (uint32_t r = 0; r < j->ranks; r++) {
        free(j->out[r].params);
        free(j->out[r].params2);
    }
}

/* Every rank's params (second: params2) bitwise equal to rank 0's. */
static int all_equal(const job *j, int second)
{
    int same = 1;
    for (uint32_t r = 1; r < j->ranks; r++) {
        const float *a = second ? j->out[0].params2 : j->out[0].params;
        const float *b = second ? j->out[r].params2 : j->out[r].params;
        same &= j->out[r].np == j->out[0].np && memcmp(a, b, j->out[0].np * sizeof *a) == 0;
    }
    return same;
}

static void test_sync_steps(uint32_t ranks, uint32_t replicas, uint32_t bucket_bytes,
                            int overlap)
{
    job j = {.ranks = ranks, .replicas = replicas, .bucket_bytes = bucket_bytes,
             .overlap = overlap};
    char name[96];
    snprintf(name, sizeof name, "sync steps (bucket %u bytes, overlap %d)", bucket_bytes,
             overlap);
    if (run_ranks(&j, rank_sync_steps, name)) {
        TH_CHECK(all_equal(&j, 0), "%s: every rank bitwise equal after %d steps", name, STEPS);
        TH_CHECK(j.out[0].stats.ranks == ranks && j.out[0].stats.world_replicas ==
                     ranks * replicas && j.out[0].stats.comm_bytes > 0,
                 "%s: stats: %u ranks, %u replicas, %llu bytes exchanged", name,
                 j.out[0].stats.ranks, j.out[0].stats.world_replicas,
                 (unsigned long long)j.out[0].stats.comm_bytes);
        job one = {.replicas = 1};
        rank_steps(&one, NULL, &one.out[0]);
        if (TH_CHECK(one.out[0].st == VKT_OK, "reference: %s", one.out[0].msg))
            th_compare(name, j.out[0].params, one.out[0].params, one.out[0].np, 1e-4f, 1e-5f);
        free(one.out[0].params);
    }
    job_free(&j);
}

/* A stage per rank against the same pipeline in one process, bit for bit. */
static void test_pipeline_ranks(void)
{
    job j = {.ranks = 2, .replicas = 1, .stages = 2};
    if (run_ranks(&j, rank_sync_steps, "pipeline stages across ranks")) {
        TH_CHECK(all_equal(&j, 0), "pipeline: both ranks bitwise equal after %d steps", STEPS);
        job one = {.replicas = 1, .stages = 2};
        rank_steps(&one, NULL, &one.out[0]);
        TH_CHECK(one.out[0].st == VKT_OK && one.out[0].np == j.out[0].np &&
                     memcmp(one.out[0].params, j.out[0].params, j.out[0].np * 4) == 0,
                 "pipeline: the ranks' parameters equal one process's bit for bit (%s)",
                 one.out[0].msg);
        free(one.out[0].params);
    }
    job_free(&j);
}

/* Async pipeline copies across ranks (pipe_async_world.c): 2 copies of 2 stages on 4 rank
 * threads, each stage's master sharded over its 2 ranks; every stage's copies hold the
 * same master after the steps (both copies' parameters bitwise equal), within 1e-4 of the
 * one-process async pipeline of 2 copies, with every push counted. */
static void test_pipeline_async_ranks(void)
{
    job j = {.ranks = 4, .replicas = 1, .stages = 2, .mode = VKT_PARALLEL_ASYNC};
    if (run_ranks(&j, rank_sync_steps, "async pipeline copies across ranks")) {
        TH_CHECK(all_equal(&j, 0), "async pipeline: every rank holds the same parameters");
        job one = {.replicas = 1, .stages = 2, .copies = 2, .mode = VKT_PARALLEL_ASYNC};
        rank_steps(&one, NULL, &one.out[0]);
        TH_CHECK(one.out[0].st == VKT_OK && one.out[0].np == j.out[0].np, "one process: %s",
                 one.out[0].msg);
        if (one.out[0].st == VKT_OK && one.out[0].np == j.out[0].np)
            th_compare("async pipeline across ranks", j.out[0].params, one.out[0].params,
                       j.out[0].np, 1e-4f, 1e-5f);
        TH_CHECK(j.out[0].stats.updates == 2u * 2u * STEPS &&
                     j.out[0].stats.updates == one.out[0].stats.updates &&
                     j.out[0].stats.staleness_max == 1,
                 "async pipeline: %llu updates (want %u, one process %llu), staleness max %llu",
                 (unsigned long long)j.out[0].stats.updates, 4 * STEPS,
                 (unsigned long long)one.out[0].stats.updates,
                 (unsigned long long)j.out[0].stats.staleness_max);
        free(one.out[0].params);
    }
    job_free(&j);
}

static void test_sync_async(uint32_t ranks, uint32_t replicas)
{
    job j = {.ranks = ranks, .replicas = replicas};
    char name[96];
    snprintf(name, sizeof name, "sync fit, async fit bound 0 (%u x %u)", ranks, replicas);
    if (run_ranks(&j, rank_sync_async, name)) {
        TH_CHECK(all_equal(&j, 0), "%s: sync: every rank bitwise equal", name);
        TH_CHECK(all_equal(&j, 1), "%s: async: every rank holds the same master", name);
        th_compare(name, j.out[0].params2, j.out[0].params, j.out[0].np, 1e-4f, 1e-5f);
        uint64_t want = (uint64_t)ranks * replicas * FIT_STEPS;
        TH_CHECK(j.out[0].stats.updates == want && j.out[0].stats.staleness_max <=
                     (uint64_t)ranks * replicas - 1,
                 "%s: %llu updates (want %llu), staleness max %llu", name,
                 (unsigned long long)j.out[0].stats.updates, (unsigned long long)want,
                 (unsigned long long)j.out[0].stats.staleness_max);
    }
    job_free(&j);
}

static void test_transport(uint32_t ranks)
{
    job j = {.ranks = ranks, .replicas = 1};
    run_ranks(&j, rank_transport, "the transport");
}

static void test_sync_failure(uint32_t ranks)
{
    job j = {.ranks = ranks, .replicas = 1};
    const char *name = "a failure on the last rank";
    if (run_ranks(&j, rank_sync_failure, name)) {
        for (uint32_t r = 0; r < ranks; r++) {
            const rank_out *o = &j.out[r];
            if (r + 1 == ranks)
                TH_CHECK(o->failed_at == FAIL_STEP && o->failed == VKT_ERROR_INVALID_ARGUMENT &&
                             strstr(o->failed_msg, "99"),
                         "%s: rank %u has its own message at step %d: %s", name, r,
                         o->failed_at, o->failed_msg);
            else
                TH_CHECK(o->failed_at == FAIL_STEP && o->failed == VKT_ERROR_REMOTE &&
                             strstr(o->failed_msg, "rank") && strstr(o->failed_msg, "step 3"),
                         "%s: rank %u names it at step %d: %s", name, r, o->failed_at,
                         o->failed_msg);
        }
        TH_CHECK(all_equal(&j, 0), "%s: after it every rank still agrees", name);
    }
    job_free(&j);
}

static void test_async_stop(uint32_t ranks, uint32_t staleness)
{
    job j = {.ranks = ranks, .replicas = 1, .staleness = staleness};
    char name[96];
    snprintf(name, sizeof name, "stopped by the chief (async bound %u, then sync)", staleness);
    if (run_ranks(&j, rank_async_stop, name)) {
        TH_CHECK(all_equal(&j, 0), "%s: async: every rank holds the same master", name);
        TH_CHECK(all_equal(&j, 1), "%s: sync: every rank bitwise equal", name);
    }
    job_free(&j);
}

static void test_async_free(uint32_t ranks)
{
    job j = {.ranks = ranks, .replicas = 1};
    const char *name = "unbounded async fit";
    if (run_ranks(&j, rank_async_free, name)) {
        TH_CHECK(all_equal(&j, 0), "%s: every rank holds the same master", name);
        int finite = 1;
        for (uint64_t i = 0; i < j.out[0].np; i++)
            finite &= isfinite(j.out[0].params[i]);
        TH_CHECK(finite, "%s: parameters finite", name);
        TH_CHECK(j.out[0].stats.updates == (uint64_t)ranks * FIT_STEPS,
                 "%s: %llu updates of %u ranks x %d steps", name,
                 (unsigned long long)j.out[0].stats.updates, ranks, FIT_STEPS);
        TH_CHECK(j.out[0].saved == VKT_OK && access(g_ckpt, F_OK) == 0,
                 "%s: the chief's checkpoint from its callback: %s", name,
                 vkt_status_name(j.out[0].saved));
    }
    remove(g_ckpt);
    job_free(&j);
}

int main(void)
{
    th_init("tsan_ranks");
    /* Lavapipe's first compile lazily initializes LLVM's statics (uninstrumented
     * atomics, invisible to TSan): done here by a step of one replica, before the rank
     * threads compile at once, or TSan reports a race inside libLLVM. Ranks in
     * processes share no LLVM. */
    job warm = {.replicas = 1};
    rank_steps(&warm, NULL, &warm.out[0]);
    TH_CHECK(warm.out[0].st == VKT_OK, "one replica: %s", warm.out[0].msg);
    free(warm.out[0].params);
    th_seed(5);
    th_fill_uniform(g_x, ROWS * F, -1, 1);
    for (uint32_t i = 0; i < ROWS; i++)
        g_y[i] = (int32_t)(th_rand_u64() % C);
    snprintf(g_ckpt, sizeof g_ckpt, "%s/vkt-tsan-ranks-%u.vkt",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (unsigned)getpid());
    test_transport(3);
    test_sync_steps(3, 1, 0, 0);
    /* Buckets {w2, b2} {w1} {b1}: three allreduces in flight at once. After the step
     * (-1), not during the backward (1): the host would see the backward pass a bucket
     * through a Vulkan event that lavapipe sets and reads with uninstrumented atomics,
     * so TSan would take the staging buffer's reads for a race with the device's copy. */
    test_sync_steps(3, 1, 160, -1);
    test_sync_async(2, 1);
    test_async_free(3);
    test_sync_failure(3);
    test_async_stop(3, 1);
    test_sync_steps(2, 2, 0, 0);
    test_sync_async(2, 2);
    test_pipeline_ranks();
    test_pipeline_async_ranks();
    return th_finish();
}
