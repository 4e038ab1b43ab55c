/* Training across processes (run under mpirun with R ranks; alone it is a one-rank world
 * and every check still holds): argv "--replicas M" gives each rank M replicas on device
 * 0. Checks:
 *  - R ranks x M replicas equal one replica on the concatenated batch (losses relative
 *    1e-5 over 20 steps, parameters within 1e-4/1e-5), plain SGD and momentum, with an
 *    uneven split; every rank holds bitwise the chief's parameters after every step;
 *  - world_replicas = R x M; the progress callback runs on the chief only;
 *  - async: the parameter server's host bytes, 2 x params per update of this rank;
 *  - ranks that disagree on the options are refused, naming the difference;
 *  - a failure on one rank stops every rank at the same step, naming it; the job goes on;
 *  - a stop asked by the chief's callback stops every rank after the same step, and the
 *    next fit continues the data where it stopped (equal to an uninterrupted run);
 *  - a checkpoint restored on every rank from the chief's file alone;
 *  - the divergence guard: a save refused in the chief's callback (a finite blow-up) ends
 *    the fit on every rank with VKT_ERROR_DIVERGED, the others naming rank 0; a save after
 *    it is refused on every rank (each checks its own, identical copy); the chief's
 *    folder keeps the last sound checkpoint; no rank waits for another. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "parallel/reduce.h"

typedef struct net {
    vkt_graph *g;
    vkt_tensor *x, *y, *logits, *loss;
} net;

enum { F = 20, H = 16, C = 5 };

static vkt_world *world;
static uint32_t R, M = 1, rank_;

static uint64_t graph_seed = 77;

static net make_net(uint32_t batch, float dropout)
{
    net n = {0};
    vkt_graph_options go = {.seed = graph_seed};
    vkt_graph_create(&go, &n.g);
    vkt_shape xs = {2, {batch, F}}, w1 = {2, {F, H}}, b1 = {1, {H}}, w2 = {2, {H, C}},
              b2 = {1, {C}};
    vkt_init he = {.kind = VKT_INIT_HE}, gl = {.kind = VKT_INIT_GLOROT},
             small = {.kind = VKT_INIT_UNIFORM, .a = -0.1f, .b = 0.1f};
    n.x = vkt_input(n.g, "x", &xs);
    n.y = vkt_input_labels(n.g, "y", batch);
    vkt_tensor *h = vkt_relu(n.g, vkt_linear(n.g, n.x, vkt_param(n.g, "w1", &w1, &he),
                                             vkt_param(n.g, "b1", &b1, &small)));
    if (dropout > 0)
        h = vkt_dropout(n.g, h, dropout);
    n.logits = vkt_linear(n.g, h, vkt_param(n.g, "w2", &w2, &gl),
                          vkt_param(n.g, "b2", &b2, &small));
    n.loss = vkt_softmax_cross_entropy(n.g, n.logits, n.y);
    TH_CHECK(vkt_graph_status(n.g) == VKT_OK, "graph: %s", vkt_graph_errmsg(n.g));
    return n;
}

/* A trainer of this rank (world) or alone (w NULL, one replica). */
static uint32_t bucket_bytes; /* 0: the default (one bucket for these small models) */
static int overlap;           /* 1: marks after buckets (off by default on lavapipe) */
static int check_every = -1;  /* check_identical (-1: every step across ranks) */
static uint32_t stages;       /* model-parallel stages (0: none) */

static vkt_trainer *make(net *n, uint32_t batch, vkt_world *w, uint32_t replicas,
                         const vkt_optimizer_options *oo, vkt_status *out_st)
{
    uint32_t dev[8] = {0};
    vkt_trainer_options o = {.batch = batch, .devices = dev, .device_count = replicas,
                             .world = w, .check_identical = w ? 1 : 0,
                             .bucket_bytes = bucket_bytes, .overlap = overlap,
                             .stages = stages};
    if (check_every >= 0)
        o.check_identical = (uint32_t)check_every;
    o.optimizer = *oo;
    vkt_trainer *t = NULL;
    vkt_status st = vkt_trainer_create(th_instance, n->g, n->loss, &o, &t);
    if (out_st)
        *out_st = st;
    else
        TH_CHECK(st == VKT_OK, "rank %u: trainer: %s (%s)", rank_, vkt_status_name(st),
                 vkt_last_error());
    return t;
}

static void random_batch(float *x, int32_t *y, uint32_t rows)
{
    th_fill_uniform(x, (uint64_t)rows * F, -1, 1);
    for (uint32_t i = 0; i < rows; i++)
        y[i] = (int32_t)(th_rand_u64() % C);
}

/* Every rank's parameters equal the chief's, bit for bit. */
static int same_as_chief(vkt_trainer *t)
{
    uint64_t np = vkt_trainer_param_count(t);
    float *mine = th_alloc_floats(np), *chief = th_alloc_floats(np);
    vkt_trainer_read_params(t, mine, np);
    memcpy(chief, mine, np * 4);
    vkt_world_broadcast(world, chief, np * 4);
    double differ = memcmp(mine, chief, np * 4) != 0;
    vkt_world_sum(world, &differ, 1);
    free(mine);
    free(chief);
    return differ == 0;
}

static void test_equivalence(uint32_t batch, int momentum, float dropout)
{
    vkt_optimizer_options oo = {.kind = VKT_OPTIMIZER_SGD, .lr = 0.2f,
                                .momentum = momentum ? 0.9f : 0.0f};
    net nw = make_net(batch, dropout), n1 = make_net(batch, dropout);
    vkt_trainer *many = make(&nw, batch, world, M, &oo, NULL);
    vkt_trainer *one = rank_ == 0 ? make(&n1, batch, NULL, 1, &oo, NULL) : NULL;
    if (!many || (rank_ == 0 && !one))
        goto done;
    TH_CHECK(vkt_trainer_world_replicas(many) == R * M, "world replicas %u = %u x %u",
             vkt_trainer_world_replicas(many), R, M);
    reduce_world_layout lay = {0};
    if (bucket_bytes && R > 1) /* the exchange works on buckets as the backward ends them */
        reduce_world_layout_of(many->rd, &lay);
    if (bucket_bytes && R > 1)
        TH_CHECK(lay.buckets == 3 && lay.packed == F * H + H + H * C + C &&
                     lay.overlap == (overlap > 0) &&
                     (lay.first_mark != UINT32_MAX) == (overlap > 0),
                 "%u buckets of %llu gradients, overlap %d", lay.buckets,
                 (unsigned long long)lay.packed, lay.overlap);
    float *x = th_alloc_floats((uint64_t)batch * F);
    int32_t *y = malloc(batch * sizeof *y);
    double worst = 0;
    int identical = 1;
    th_seed(1234); /* the same batches on every rank */
    for (int step = 0; step < 20; step++) {
        random_batch(x, y, batch);
        vkt_feed fw[2] = {{nw.x, x}, {nw.y, y}}, f1[2] = {{n1.x, x}, {n1.y, y}};
        float lw = 0, l1 = 0;
        TH_OK(NULL, vkt_trainer_step(many, fw, 2, &lw));
        if (one) {
            TH_OK(NULL, vkt_trainer_step(one, f1, 2, &l1));
            double d = fabs((double)l1 - lw) / fmax(1e-6, fabs(l1));
            worst = d > worst ? d : worst;
        }
        identical &= same_as_chief(many);
    }
    TH_CHECK(identical, "%u ranks x %u replicas: every rank bitwise equal to the chief after "
             "every step", R, M);
    if (one) {
        TH_CHECK(worst < 1e-5, "%u x %u, batch %u, %s%s: losses equal one replica's (rel %.2g)",
                 R, M, batch, momentum ? "momentum" : "sgd", dropout > 0 ? ", dropout" : "",
                 worst);
        uint64_t np = vkt_trainer_param_count(one);
        float *p1 = th_alloc_floats(np), *pw = th_alloc_floats(np);
        vkt_trainer_read_params(one, p1, np);
        vkt_trainer_read_params(many, pw, np);
        char what[128];
        snprintf(what, sizeof what, "%u x %u, batch %u: parameters after 20 steps", R, M, batch);
        th_compare(what, pw, p1, np, 1e-4f, 1e-5f);
        free(p1);
        free(pw);
    }
    vkt_trainer_stats st;
    vkt_trainer_stats_get(many, &st);
    TH_CHECK(st.ranks == R && st.rank == rank_ && (R == 1 || st.comm_bytes > 0),
             "stats: rank %u of %u, %llu bytes to MPI", st.rank, st.ranks,
             (unsigned long long)st.comm_bytes);
    free(x);
    free(y);
done:
    vkt_trainer_destroy(many);
    vkt_trainer_destroy(one);
    vkt_graph_destroy(nw.g);
    vkt_graph_destroy(n1.g);
}

/* Ranks whose graphs initialize differently (another seed on each): after creation every
 * rank holds the chief's initial parameters. */
static void test_initial_broadcast(void)
{
    graph_seed = 1000 + rank_;
    net n = make_net(12, 0);
    graph_seed = 77;
    vkt_optimizer_options oo = {.kind = VKT_OPTIMIZER_SGD, .lr = 0.1f};
    vkt_trainer *t = make(&n, 12, world, M, &oo, NULL);
    if (t) {
        TH_CHECK(same_as_chief(t), "rank %u: the chief's initial parameters everywhere",
                 rank_);
        if (rank_ == 0 && R > 1) { /* and they are not the others' own */
            net other = (graph_seed = 1001, make_net(12, 0));
            graph_seed = 77;
            vkt_trainer *o = make(&other, 12, NULL, 1, &oo, NULL);
            uint64_t np = vkt_trainer_param_count(t);
            float *a = th_alloc_floats(np), *b = th_alloc_floats(np);
            vkt_trainer_read_params(t, a, np);
            vkt_trainer_read_params(o, b, np);
            TH_CHECK(memcmp(a, b, np * 4) != 0, "rank 1's own initialization differs");
            free(a);
            free(b);
            vkt_trainer_destroy(o);
            vkt_graph_destroy(other.g);
        }
    }
    vkt_trainer_destroy(t);
    vkt_graph_destroy(n.g);
}

/* Options that differ between ranks: refused on every rank, naming the difference. */
static void test_mismatch(void)
{
    if (R < 2)
        return;
    uint32_t batch = rank_ == R - 1 ? 16 : 12;
    net n = make_net(batch, 0);
    vkt_optimizer_options oo = {.kind = VKT_OPTIMIZER_SGD, .lr = 0.1f};
    vkt_status st;
    vkt_trainer *t = make(&n, batch, world, M, &oo, &st);
    TH_CHECK(!t && st == VKT_ERROR_INVALID_ARGUMENT &&
                 strstr(vkt_last_error(), "disagree on the global batch") &&
                 strstr(vkt_last_error(), "12") && strstr(vkt_last_error(), "16"),
             "rank %u: a different batch is refused: %s", rank_, vkt_last_error());
    vkt_trainer_destroy(t);
    vkt_graph_destroy(n.g);

    n = make_net(12, 0);
    oo.lr = rank_ == 0 ? 0.1f : 0.2f;
    t = make(&n, 12, world, M, &oo, &st);
    TH_CHECK(!t && st == VKT_ERROR_INVALID_ARGUMENT &&
                 strstr(vkt_last_error(), "learning rate"),
             "rank %u: a different learning rate is refused: %s", rank_, vkt_last_error());
    vkt_trainer_destroy(t);
    vkt_graph_destroy(n.g);
    oo.lr = 0.1f;

    /* Each option that shapes the collectives or their meaning, named with both values. */
    static const struct {
        const char *what, *text;
    } named[] = {
        {"check_identical", "the parameter check's interval (check_identical, "
                            "--check-identical) (0 on some ranks, 1 on others)"},
        {"momentum", "the momentum (--momentum) (0.8 on some ranks, 0.9 on others)"},
        {"total_steps", "the schedule's total steps (--steps, --epochs) (100 on some ranks, "
                        "120 on others)"},
        {"schedule", "the learning-rate schedule (--schedule) (step on some ranks, "
                     "warmup_cosine on others)"},
    };
    for (int k = 0; k < 4; k++) {
        int other = rank_ == R - 1; /* the last rank differs */
        vkt_optimizer_options o2 = oo;
        check_every = k == 0 ? !other : -1;
        if (k == 1)
            o2.momentum = other ? 0.8f : 0.9f;
        if (k == 2 || k == 3) {
            o2.schedule = VKT_SCHEDULE_WARMUP_COSINE;
            o2.total_steps = other ? 120 : 100;
        }
        if (k == 3) {
            o2.total_steps = 100;
            if (other) {
                o2.schedule = VKT_SCHEDULE_STEP;
                o2.total_steps = 0;
                o2.step_size = 10;
            }
        }
        n = make_net(12, 0);
        t = make(&n, 12, world, M, &o2, &st);
        check_every = -1;
        TH_CHECK(!t && st == VKT_ERROR_INVALID_ARGUMENT &&
                     strstr(vkt_last_error(), named[k].text),
                 "rank %u: a different %s is refused, naming it: %s", rank_, named[k].what,
                 vkt_last_error());
        vkt_trainer_destroy(t);
        vkt_graph_destroy(n.g);
    }

    /* Stages asked on one rank only (this net is not placed: its stages fail there, and
     * across ranks a stage count that differs would be named): the others learn it at
     * once instead of waiting for it until the deadline. Stages across ranks that work:
     * test_mpi_pipeline.c. */
    stages = rank_ == 0 ? 2 : 0;
    n = make_net(12, 0);
    t = make(&n, 12, world, M, &oo, &st);
    stages = 0;
    TH_CHECK(!t && (rank_ == 0 ? st == VKT_ERROR_INVALID_ARGUMENT &&
                                     strstr(vkt_last_error(), "stage")
                               : st == VKT_ERROR_REMOTE && strstr(vkt_last_error(), "rank 0")),
             "rank %u: stages on the chief alone: %s %s", rank_, vkt_status_name(st),
             vkt_last_error());
    vkt_trainer_destroy(t);
    vkt_graph_destroy(n.g);

    /* vkt_trainer_step's first batch drawn with another seed on the last rank: refused
     * before the step, on every rank; the same batch everywhere then trains. */
    n = make_net(12, 0);
    t = make(&n, 12, world, M, &oo, NULL);
    if (t) {
        float x[12 * F];
        int32_t y[12];
        th_seed(rank_ == R - 1 ? 5 : 4);
        random_batch(x, y, 12);
        vkt_feed f[2] = {{n.x, x}, {n.y, y}};
        st = vkt_trainer_step(t, f, 2, NULL);
        TH_CHECK(st == VKT_ERROR_INVALID_ARGUMENT &&
                     strstr(vkt_last_error(), "the first step's global batch") &&
                     vkt_trainer_step_count(t) == 0,
                 "rank %u: another first batch on one rank is refused: %s", rank_,
                 vkt_last_error());
        th_seed(4);
        random_batch(x, y, 12);
        TH_OK(NULL, vkt_trainer_step(t, f, 2, NULL));
    }
    vkt_trainer_destroy(t);
    vkt_graph_destroy(n.g);
}

/* Bad labels in the last rank's rows at the 3rd step: every rank stops at that step. */
static void test_failure(void)
{
    if (R < 2)
        return;
    uint32_t batch = 12;
    net n = make_net(batch, 0);
    vkt_optimizer_options oo = {.kind = VKT_OPTIMIZER_SGD, .lr = 0.1f};
    vkt_trainer *t = make(&n, batch, world, M, &oo, NULL);
    if (!t)
        goto done;
    float x[12 * F];
    int32_t y[12];
    th_seed(99);
    random_batch(x, y, batch);
    vkt_feed f[2] = {{n.x, x}, {n.y, y}};
    vkt_status st = VKT_OK;
    int step = 0;
    for (; step < 5 && st == VKT_OK; step++) {
        y[11] = step == 2 && rank_ == R - 1 ? 99 : 1; /* row 11 is on the last rank */
        st = vkt_trainer_step(t, f, 2, NULL);
    }
    TH_CHECK(step == 3 && vkt_trainer_step_count(t) == 2, "rank %u stopped at step %d (%llu "
             "taken)", rank_, step, (unsigned long long)vkt_trainer_step_count(t));
    if (rank_ == R - 1)
        TH_CHECK(st == VKT_ERROR_INVALID_ARGUMENT && strstr(vkt_trainer_errmsg(t), "99"),
                 "the failing rank has its own message: %s", vkt_trainer_errmsg(t));
    else
        TH_CHECK(st == VKT_ERROR_REMOTE && strstr(vkt_trainer_errmsg(t), "rank") &&
                     strstr(vkt_trainer_errmsg(t), "step 3"),
                 "rank %u names the failing rank and step: %s", rank_, vkt_trainer_errmsg(t));
    y[11] = 1;
    TH_OK(NULL, vkt_trainer_step(t, f, 2, NULL)); /* the job goes on */
    TH_CHECK(same_as_chief(t), "after the failure the ranks still agree");
done:
    vkt_trainer_destroy(t);
    vkt_graph_destroy(n.g);
}

static vkt_dataset *synthetic(uint32_t count)
{
    float *x = th_alloc_floats((uint64_t)count * F);
    int32_t *y = malloc(count * sizeof *y);
    th_seed(5);
    random_batch(x, y, count);
    vkt_dataset *d = NULL;
    TH_OK(NULL, vkt_dataset_create(count, F, C, x, y, &d));
    free(x);
    free(y);
    return d;
}

typedef struct stopper {
    uint64_t at, calls;
} stopper;

static int stop_at(void *user, uint64_t step, uint64_t total, float loss)
{
    (void)total;
    (void)loss;
    stopper *s = user;
    s->calls++;
    return step == s->at;
}

/* fit 7 steps stopped by the chief's callback after step 3, then 4 more, equals an
 * uninterrupted fit of 7 (the data position went back for the step not taken). */
static void test_stop_and_resume(void)
{
    vkt_dataset *d = synthetic(60);
    vkt_optimizer_options oo = {.kind = VKT_OPTIMIZER_SGD, .lr = 0.1f, .momentum = 0.9f};
    net a = make_net(12, 0), b = make_net(12, 0), c = make_net(12, 0);
    vkt_trainer *ta = make(&a, 12, world, M, &oo, NULL), *tb = make(&b, 12, world, M, &oo, NULL);
    if (!ta || !tb)
        goto done;
    stopper s = {.at = 3};
    TH_OK(NULL, vkt_trainer_fit(ta, d, a.x, a.y, 7, 1, stop_at, &s));
    TH_CHECK(vkt_trainer_step_count(ta) == 3, "rank %u stopped after step 3 (%llu)", rank_,
             (unsigned long long)vkt_trainer_step_count(ta));
    TH_CHECK(rank_ == 0 ? s.calls == 3 : s.calls == 0,
             "rank %u: the callback ran %llu times (the chief's only)", rank_,
             (unsigned long long)s.calls);
    TH_OK(NULL, vkt_trainer_fit(ta, d, a.x, a.y, 4, 1, NULL, NULL));
    TH_OK(NULL, vkt_trainer_fit(tb, d, b.x, b.y, 7, 1, NULL, NULL));
    uint64_t np = vkt_trainer_param_count(ta);
    float *pa = th_alloc_floats(np), *pb = th_alloc_floats(np), *pc = th_alloc_floats(np);
    vkt_trainer_read_params(ta, pa, np);
    vkt_trainer_read_params(tb, pb, np);
    TH_CHECK(memcmp(pa, pb, np * 4) == 0, "rank %u: 3 + 4 steps equal 7 bitwise", rank_);

    /* A checkpoint: the chief writes it; every rank restores it, the others passing a
     * path that does not exist for them (only the chief reads). */
    char path[256];
    snprintf(path, sizeof path, "%s/vkt-test-mpi-%u.vkt", getenv("TMPDIR") ? getenv("TMPDIR")
                                                                             : "/tmp",
             (unsigned)getpid());
    vkt_world_broadcast(world, path, sizeof path);
    TH_OK(NULL, vkt_trainer_save(ta, path));
    vkt_trainer *tc = make(&c, 12, world, M, &oo, NULL);
    if (tc) {
        TH_OK(NULL, vkt_trainer_restore(tc, rank_ == 0 ? path : "/nonexistent/elsewhere.vkt"));
        vkt_trainer_read_params(tc, pc, np);
        TH_CHECK(memcmp(pa, pc, np * 4) == 0 && vkt_trainer_step_count(tc) == 7,
                 "rank %u: restored from the chief's file", rank_);
        /* the restored data position continues the same sequence on every rank */
        TH_OK(NULL, vkt_trainer_fit(tc, d, c.x, c.y, 2, 1, NULL, NULL));
        TH_OK(NULL, vkt_trainer_fit(ta, d, a.x, a.y, 2, 1, NULL, NULL));
        vkt_trainer_read_params(tc, pc, np);
        vkt_trainer_read_params(ta, pa, np);
        TH_CHECK(memcmp(pa, pc, np * 4) == 0, "rank %u: the restored run continues the same",
                 rank_);
    }
    vkt_world_sum(world, (double[]){0}, 1); /* everyone restored before the file goes */
    if (rank_ == 0)
        remove(path);
    vkt_trainer_destroy(tc);
    /* a different seed on one rank: refused at the start of fit */
    if (R > 1) {
        vkt_status st = vkt_trainer_fit(tb, d, b.x, b.y, 1, rank_ == 0 ? 1 : 2, NULL, NULL);
        TH_CHECK(st == VKT_ERROR_INVALID_ARGUMENT && strstr(vkt_trainer_errmsg(tb), "seed"),
                 "rank %u: a different seed is refused: %s", rank_, vkt_trainer_errmsg(tb));
    }
    free(pa);
    free(pb);
    free(pc);
done:
    vkt_trainer_destroy(ta);
    vkt_trainer_destroy(tb);
    vkt_graph_destroy(a.g);
    vkt_graph_destroy(b.g);
    vkt_graph_destroy(c.g);
    vkt_dataset_destroy(d);
}

typedef struct saver {
    vkt_trainer *t;
    const char *path;
    vkt_status st;
    uint64_t at;
} saver;

static int save_at(void *user, uint64_t step, uint64_t total, float loss)
{
    (void)total;
    (void)loss;
    saver *s = user;
    if (step == s->at)
        s->st = vkt_trainer_save(s->t, s->path);
    return 0;
}

/* Async across ranks (the sharded parameter server): staleness bound 0 equals sync with
 * plain SGD; bounds 1 and 2 hold over the world's G replicas; every update counted, and
 * its host bytes (a pull and a push of the whole vector); a
 * checkpoint taken from the chief's callback during the run holds the live master. */
static void test_async(void)
{
    vkt_dataset *d = synthetic(96);
    vkt_optimizer_options oo = {.kind = VKT_OPTIMIZER_SGD, .lr = 0.1f};
    uint32_t dev[8] = {0};
    net a = make_net(12, 0), b = make_net(12, 0);
    vkt_trainer *sync = make(&a, 12, world, M, &oo, NULL), *as = NULL;
    vkt_trainer_options o = {.batch = 12, .devices = dev, .device_count = M, .world = world,
                             .mode = VKT_PARALLEL_ASYNC, .bounded_staleness = 1,
                             .staleness = 0, .optimizer = oo};
    TH_OK(NULL, vkt_trainer_create(th_instance, b.g, b.loss, &o, &as));
    if (!sync || !as)
        goto done;
    TH_OK(NULL, vkt_trainer_fit(sync, d, a.x, a.y, 30, 1, NULL, NULL));
    TH_OK(NULL, vkt_trainer_fit(as, d, b.x, b.y, 30, 1, NULL, NULL));
    uint64_t np = vkt_trainer_param_count(as);
    float *ps = th_alloc_floats(np), *pa = th_alloc_floats(np);
    vkt_trainer_read_params(sync, ps, np);
    vkt_trainer_read_params(as, pa, np);
    char what[96];
    snprintf(what, sizeof what, "rank %u: async bound 0 over %u x %u equals sync", rank_, R, M);
    th_compare(what, pa, ps, np, 1e-4f, 1e-5f);
    TH_CHECK(same_as_chief(as), "after an async fit every rank holds the same master");
    vkt_trainer_destroy(as);
    as = NULL;
    uint32_t G = R * M;
    for (uint32_t sb = 1; sb <= 2; sb++) {
        o.staleness = sb;
        TH_OK(NULL, vkt_trainer_create(th_instance, b.g, b.loss, &o, &as));
        if (!as)
            break;
        char path[256];
        snprintf(path, sizeof path, "%s/vkt-test-mpi-async-%u.vkt",
                 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (unsigned)getpid());
        vkt_world_broadcast(world, path, sizeof path);
        saver sv = {.t = as, .path = path, .at = 10};
        TH_OK(NULL, vkt_trainer_fit(as, d, b.x, b.y, 20, 1, save_at, &sv));
        vkt_trainer_stats st;
        vkt_trainer_stats_get(as, &st);
        TH_CHECK(G == 1 || /* one replica in all: plain training, no updates to count */
                     (st.updates == (uint64_t)G * 20 && st.staleness_max <= (G - 1) * (2 * sb + 1)),
                 "bound %u over %u replicas: %llu updates, staleness mean %.2f max %llu", sb, G,
                 (unsigned long long)st.updates, st.staleness_mean,
                 (unsigned long long)st.staleness_max);
        /* this rank's host bytes: each of its M replicas pulls and pushes the whole
         * vector (every shard's slice) at each of its 20 updates */
        uint64_t want = G == 1 ? 0 : (uint64_t)M * 20 * 2 * np * 4;
        const char *want_xc = R > 1 ? "ps" : "master"; /* one rank: the host master */
        TH_CHECK(G == 1 || (!strcmp(st.exchange ? st.exchange : "", want_xc) &&
                            st.exchange_host_bytes == want),
                 "rank %u, bound %u: exchange %s moved %llu host bytes, 2 x %llu params x "
                 "4 x %u replicas x 20 = %llu", rank_, sb, st.exchange ? st.exchange : "none",
                 (unsigned long long)st.exchange_host_bytes, (unsigned long long)np, M,
                 (unsigned long long)want);
        TH_CHECK(sv.st == VKT_OK, "rank %u: a checkpoint from the callback during an async "
                 "run: %s", rank_, vkt_trainer_errmsg(as));
        if (sb == 1) { /* the snapshot is a whole master: restored, it is finite */
            TH_OK(NULL, vkt_trainer_restore(as, path));
            vkt_trainer_read_params(as, pa, np);
            int finite = 1;
            for (uint64_t i = 0; i < np; i++)
                finite &= isfinite(pa[i]);
            TH_CHECK(finite && vkt_trainer_step_count(as) == 10,
                     "the async checkpoint restores (step %llu)",
                     (unsigned long long)vkt_trainer_step_count(as));
        }
        vkt_world_sum(world, (double[]){0}, 1);
        if (rank_ == 0)
            remove(path);
        vkt_trainer_destroy(as);
        as = NULL;
    }
    free(ps);
    free(pa);
done:
    vkt_trainer_destroy(sync);
    vkt_trainer_destroy(as);
    vkt_graph_destroy(a.g);
    vkt_graph_destroy(b.g);
    vkt_dataset_destroy(d);
}

typedef struct dir_saver {
    vkt_trainer *t;
    const char *dir;
    vkt_status st;
} dir_saver;

static int save_dir_each(void *user, uint64_t step, uint64_t total, float loss)
{
    (void)step;
    (void)total;
    (void)loss;
    dir_saver *s = user;
    vkt_status st = vkt_checkpoint_save_dir(s->t, s->dir, 1);
    s->st = s->st != VKT_OK ? s->st : st;
    return 0; /* the guard ends the run by itself */
}

static void test_divergence(void)
{
    vkt_dataset *d = synthetic(60);
    vkt_optimizer_options oo = {.kind = VKT_OPTIMIZER_SGD, .lr = 0.1f, .momentum = 0.9f};
    net a = make_net(12, 0);
    vkt_trainer *t = make(&a, 12, world, M, &oo, NULL);
    char dir[256];
    snprintf(dir, sizeof dir, "%s/vkt-test-mpi-div-%u", getenv("TMPDIR") ? getenv("TMPDIR")
                                                                        : "/tmp",
             (unsigned)getpid());
    vkt_world_broadcast(world, dir, sizeof dir);
    if (!t)
        goto done;
    dir_saver s = {.t = t, .dir = dir};
    TH_OK(NULL, vkt_trainer_fit(t, d, a.x, a.y, 3, 1, save_dir_each, &s));
    TH_CHECK(s.st == VKT_OK, "rank %u: healthy saves: %s", rank_, vkt_trainer_errmsg(t));
    oo.lr = 40; /* on every rank alike */
    TH_OK(NULL, vkt_trainer_set_optimizer(t, &oo));
    vkt_status st = vkt_trainer_fit(t, d, a.x, a.y, 10, 1, save_dir_each, &s);
    const char *msg = vkt_trainer_errmsg(t);
    TH_CHECK(st == VKT_ERROR_DIVERGED && vkt_trainer_step_count(t) == 4 &&
                 (rank_ == 0 ? strstr(msg, "training diverged by step 4: the parameters' RMS")
                             : strstr(msg, "rank 0 found training diverged at step 5")),
             "rank %u: fit %s at step %llu: %s", rank_, vkt_status_name(st),
             (unsigned long long)vkt_trainer_step_count(t), msg);
    TH_STATUS(NULL, vkt_checkpoint_save_dir(t, dir, 1), VKT_ERROR_DIVERGED);
    TH_CHECK(strstr(vkt_trainer_errmsg(t), "training diverged by step 4: "),
             "rank %u: a save after it: %s", rank_, vkt_trainer_errmsg(t));
    if (rank_ == 0) {
        char p3[300], p4[300];
        snprintf(p3, sizeof p3, "%s/ckpt-3.vkt", dir);
        snprintf(p4, sizeof p4, "%s/ckpt-4.vkt", dir);
        TH_CHECK(plat_file_stat(p3, NULL, NULL) == 0 && plat_file_stat(p4, NULL, NULL) != 0,
                 "the chief's folder keeps ckpt-3 alone");
    }
done:
    vkt_world_sum(world, (double[]){0}, 1); /* every rank done before the folder goes */
    if (rank_ == 0)
        th_remove_tree(dir);
    vkt_trainer_destroy(t);
    vkt_graph_destroy(a.g);
    vkt_dataset_destroy(d);
}

int main(int argc, char **argv)
{
    int require = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--replicas") == 0 && i + 1 < argc)
            M = (uint32_t)atoi(argv[++i]);
        else if (strcmp(argv[i], "--mpi") == 0)
            require = 1;
    }
    vkt_world_options wo = {.timeout_seconds = 60, .require_launcher = require};
    if (vkt_world_init(&argc, &argv, &wo, &world) != VKT_OK) {
        fprintf(stderr, "test_mpi_trainer: %s\n", vkt_last_error());
        return 1;
    }
    R = vkt_world_size(world);
    rank_ = vkt_world_rank(world);
    th_init("test_mpi_trainer");
    test_equivalence(12, 0, 0);
    test_equivalence(10 + R, 1, 0); /* uneven rows */
    test_equivalence(13, 0, 0.3f);  /* dropout masks keyed by the global row */
    bucket_bytes = 160; /* 40 floats: buckets {w2, b2} {w1} {b1} in the backward's order */
    overlap = 1;        /* each sent as the backward completes it */
    test_equivalence(12, 1, 0);
    overlap = -1;       /* after the step */
    test_equivalence(12, 1, 0);
    bucket_bytes = 0;
    overlap = 0;
    test_initial_broadcast();
    test_mismatch();
    test_failure();
    test_stop_and_resume();
    test_async();
    test_divergence();
    int rc = th_finish();
    double bad = rc != 0;
    vkt_world_sum(world, &bad, 1); /* one rank's failure fails every rank's exit code */
    vkt_world_finalize(world);
    return bad > 0 ? 1 : 0;
}
