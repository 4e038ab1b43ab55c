/* The memory plan at scale: a 20,000-op chain is planned in well under a second, and an
 * independent checker over the plan finds no two values that are alive at the same
 * position and share memory (nor one past the arena's end), on the chain, on a branchy
 * graph and on the CLI's three models. The checker recomputes the lifetimes from
 * model_step_access itself and sweeps the values by offset with a segment tree over
 * positions, so it is O(n log n) as well and owes nothing to plan.c's allocator.
 *
 * `test_plan bench [ops...]` prints the planning time per chain size instead (bench/plan.sh)
 * and the arena of the CLI's models. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "graph/model.h"
#include "harness.h"
#include "platform/platform.h"
/* The vkt command's model builders, compiled in so the figures are those of vkt train. */
#include "../tools/models.c"

#define POS_PER_STEP 3 /* plan.c's PLAN_PHASES: positions per step */

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size);
    if (!p) {
        fprintf(stderr, "test_plan: out of host memory\n");
        exit(1);
    }
    return p;
}

static vkt_context *g_ctx;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A chain of `ops` ops: (linear, relu) pairs of width 8 at batch 4, then softmax-CE. */
static vkt_graph *chain(uint32_t ops, vkt_tensor **loss)
{
    vkt_graph *g = NULL;
    vkt_graph_options go = {.seed = 1};
    vkt_graph_create(&go, &g);
    vkt_shape xs = {2, {4, 8}}, ws = {2, {8, 8}}, bs = {1, {8}};
    vkt_tensor *h = vkt_input(g, "x", &xs);
    vkt_tensor *labels = vkt_input_labels(g, "labels", 4);
    for (uint32_t i = 0; i + 1 < ops; i += 2) {
        vkt_tensor *w = vkt_param(g, "w", &ws, NULL), *b = vkt_param(g, "b", &bs, NULL);
        h = vkt_relu(g, vkt_linear(g, h, w, b));
    }
    *loss = vkt_softmax_cross_entropy(g, h, labels);
    return g;
}

/* ---- the independent checker ---- */

/* Range add, range max over positions [0, n). */
typedef struct segtree {
    int32_t *max, *add;
    uint32_t n;
} segtree;

static void seg_add(segtree *t, uint32_t node, uint32_t lo, uint32_t hi, uint32_t a, uint32_t b,
                    int32_t d)
{
    if (b < lo || hi < a)
        return;
    if (a <= lo && hi <= b) {
        t->max[node] += d;
        t->add[node] += d;
        return;
    }
    uint32_t mid = lo + (hi - lo) / 2;
    seg_add(t, 2 * node, lo, mid, a, b, d);
    seg_add(t, 2 * node + 1, mid + 1, hi, a, b, d);
    int32_t l = t->max[2 * node], r = t->max[2 * node + 1];
    t->max[node] = t->add[node] + (l > r ? l : r);
}

static int32_t seg_max(const segtree *t, uint32_t node, uint32_t lo, uint32_t hi, uint32_t a,
                       uint32_t b)
{
    if (b < lo || hi < a)
        return INT32_MIN;
    if (a <= lo && hi <= b)
        return t->max[node];
    uint32_t mid = lo + (hi - lo) / 2;
    int32_t l = seg_max(t, 2 * node, lo, mid, a, b), r = seg_max(t, 2 * node + 1, mid + 1, hi, a, b);
    return t->add[node] + (l > r ? l : r);
}

typedef struct span {
    uint64_t at;  /* offset where it starts or ends */
    int start;    /* 0: the range ends here (sorted first), 1: it starts */
    int32_t v;
} span;

static int by_at(const void *a, const void *b)
{
    const span *x = a, *y = b;
    if (x->at != y->at)
        return x->at < y->at ? -1 : 1;
    return x->start - y->start;
}

/* Returns the number of violations found; reports the first few when `report`. */
static uint32_t check_plan(const vkt_model *m, const char *what, int report)
{
    int32_t *first = xcalloc(m->n_val, sizeof *first), *last = xcalloc(m->n_val, sizeof *last);
    for (uint32_t v = 0; v < m->n_val; v++) {
        first[v] = INT32_MAX;
        last[v] = -1;
    }
    enum { CAP = GRAPH_MAX_INPUTS * 2 + 16 };
    int32_t vals[CAP];
    int writes[CAP], phases[CAP];
    uint32_t overflows = 0;
    for (uint32_t s = 0; s < m->n_steps; s++) {
        int overflow = 0;
        uint32_t n = model_step_access(m, &m->steps[s], vals, writes, phases, CAP, &overflow);
        overflows += overflow != 0; /* an access list cut short: a planning bug */
        for (uint32_t a = 0; a < n; a++) {
            int32_t r = model_root(m, vals[a]), pos = (int32_t)(s * POS_PER_STEP) + phases[a];
            first[r] = pos < first[r] ? pos : first[r];
            last[r] = pos > last[r] ? pos : last[r];
        }
    }
    uint32_t end = m->n_steps * POS_PER_STEP, bad = 0, n_spans = 0;
    span *sp = xcalloc(2 * (size_t)m->n_val, sizeof *sp);
    for (uint32_t v = 0; v < m->n_val; v++) {
        const mval *r = &m->val[v];
        if (r->alias >= 0 || r->space != MS_ARENA || first[v] == INT32_MAX)
            continue;
        if (r->kept)
            last[v] = (int32_t)end;
        uint64_t size = (r->count + ALIGN_ELEMS - 1) / ALIGN_ELEMS * ALIGN_ELEMS;
        if ((r->offset % ALIGN_ELEMS || r->offset + size > m->arena_elems) && bad++ < 5 && report)
            TH_CHECK(0, "%s: value %u at [%llu, +%llu) past the arena (%llu) or unaligned", what,
                     v, (unsigned long long)r->offset, (unsigned long long)size,
                     (unsigned long long)m->arena_elems);
        sp[n_spans++] = (span){r->offset, 1, (int32_t)v};
        sp[n_spans++] = (span){r->offset + size, 0, (int32_t)v};
    }
    qsort(sp, n_spans, sizeof *sp, by_at);
    segtree t = {xcalloc(4 * (size_t)(end + 1), sizeof(int32_t)),
                 xcalloc(4 * (size_t)(end + 1), sizeof(int32_t)), end + 1};
    for (uint32_t k = 0; k < n_spans; k++) {
        int32_t v = sp[k].v;
        uint32_t a = (uint32_t)first[v], b = (uint32_t)last[v];
        if (sp[k].start && seg_max(&t, 1, 0, t.n - 1, a, b) > 0 && bad++ < 5 && report)
            TH_CHECK(0, "%s: value %d (offset %llu, positions %u-%u) shares memory with a value "
                     "alive at the same time", what, v, (unsigned long long)sp[k].at, a, b);
        seg_add(&t, 1, 0, t.n - 1, a, b, sp[k].start ? 1 : -1);
    }
    free(t.max);
    free(t.add);
    free(sp);
    free(first);
    free(last);
    return bad + overflows;
}

/* ---- tests ---- */

static vkt_model *create(vkt_graph *g, vkt_tensor *loss, double *create_s)
{
    vkt_model *m = NULL;
    double t0 = now_s();
    vkt_status st = vkt_model_create(g_ctx, g, loss, NULL, &m);
    if (create_s)
        *create_s = now_s() - t0;
    TH_CHECK(st == VKT_OK, "model: %s", vkt_last_error());
    return st == VKT_OK ? m : NULL;
}

/* Plans the model again (the plan is recomputed from scratch) and times it. */
static double replan(vkt_model *m)
{
    double t0 = now_s();
    vkt_status st = model_plan(m);
    double dt = now_s() - t0;
    TH_CHECK(st == VKT_OK, "model_plan: %s", m->errmsg);
    return dt;
}

static void test_chain_20k(void)
{
    vkt_tensor *loss;
    vkt_graph *g = chain(20000, &loss);
    vkt_model *m = create(g, loss, NULL);
    if (m) {
        double dt = replan(m);
        printf("20000-op chain: %u arena values, planned in %.3f s, arena %llu bytes (no reuse "
               "%llu)\n", m->arena_values, dt, (unsigned long long)m->arena_elems * 4,
               (unsigned long long)m->no_reuse_elems * 4);
        TH_CHECK(dt < 0.5, "planning a 20000-op chain took %.3f s", dt);
        TH_CHECK(m->arena_elems < m->no_reuse_elems, "the chain's plan reuses no memory");
        TH_CHECK(check_plan(m, "chain", 1) == 0, "chain plan invalid");
    }
    vkt_model_destroy(m);
    vkt_graph_destroy(g);
}

/* The CLI's models at vkt train's default sizes (MNIST's 784 features, 10 classes;
 * charlm on a 65-character vocabulary). */
static uint32_t cli_models(cli_model *out, const char **names)
{
    static const uint32_t widths[] = {256, 128};
    cli_lm_shape lm = {65, 64, 64, 2, 4, 0.1f, 0, 0};
    names[0] = "mlp";
    names[1] = "cnn";
    names[2] = "charlm";
    memset(out, 0, 3 * sizeof *out);
    cli_build_mlp(&out[0], 128, 784, 10, widths, 2, 0, 1);
    cli_build_cnn(&out[1], 64, 784, 10, 1);
    cli_build_charlm(&out[2], 32, &lm, 1);
    return 3;
}

static void test_cli_models(void)
{
    cli_model cm[3];
    const char *names[3];
    uint32_t n = cli_models(cm, names);
    for (uint32_t i = 0; i < n; i++) {
        vkt_model *m = create(cm[i].graph, cm[i].loss, NULL);
        if (m) {
            printf("%s: arena %llu bytes (no reuse %llu), %u values\n", names[i],
                   (unsigned long long)m->arena_elems * 4,
                   (unsigned long long)m->no_reuse_elems * 4, m->arena_values);
            TH_CHECK(check_plan(m, names[i], 1) == 0, "%s plan invalid", names[i]);
        }
        vkt_model_destroy(m);
        vkt_graph_destroy(cm[i].graph);
    }
}

/* The checker itself: two values moved onto each other are found. */
static void test_checker_finds_overlap(void)
{
    vkt_tensor *loss;
    vkt_graph *g = chain(8, &loss);
    vkt_model *m = create(g, loss, NULL);
    if (m) {
        int32_t a = m->node[m->loss->in[0]->id].val, b = m->node[m->loss->id].val;
        a = model_root(m, a);
        b = model_root(m, b);
        uint64_t keep = m->val[b].offset;
        m->val[b].offset = m->val[a].offset;
        TH_CHECK(check_plan(m, "overlap", 0) > 0,
                 "the checker missed two live values at one offset");
        m->val[b].offset = keep;
    }
    vkt_model_destroy(m);
    vkt_graph_destroy(g);
}

static int bench(int argc, char **argv)
{
    static const uint32_t def[] = {1000, 4000, 16000, 64000};
    uint32_t sizes[16], n = 0;
    for (int i = 2; i < argc && n < 16; i++)
        sizes[n++] = (uint32_t)strtoul(argv[i], NULL, 10);
    if (n == 0)
        for (n = 0; n < 4; n++)
            sizes[n] = def[n];
    printf("%8s %8s %8s %12s %12s %14s\n", "ops", "nodes", "values", "plan_s", "create_s",
           "arena_bytes");
    for (uint32_t i = 0; i < n; i++) {
        vkt_tensor *loss;
        vkt_graph *g = chain(sizes[i], &loss);
        double create_s = 0;
        vkt_model *m = create(g, loss, &create_s);
        if (!m)
            return 1;
        double best = replan(m);
        for (int r = 0; r < 2 && best < 1.0; r++) {
            double dt = replan(m);
            best = dt < best ? dt : best;
        }
        printf("%8u %8u %8u %12.5f %12.3f %14llu\n", sizes[i], m->n, m->arena_values, best,
               create_s, (unsigned long long)m->arena_elems * 4);
        fflush(stdout);
        vkt_model_destroy(m);
        vkt_graph_destroy(g);
    }
    cli_model cm[3];
    const char *names[3];
    uint32_t k = cli_models(cm, names);
    for (uint32_t i = 0; i < k; i++) {
        vkt_model *m = create(cm[i].graph, cm[i].loss, NULL);
        if (m)
            printf("model %-7s activation_bytes %llu (no reuse %llu)\n", names[i],
                   (unsigned long long)m->arena_elems * 4,
                   (unsigned long long)m->no_reuse_elems * 4);
        vkt_model_destroy(m);
        vkt_graph_destroy(cm[i].graph);
    }
    return 0;
}

int main(int argc, char **argv)
{
    plat_setenv("VKT_CHECK", NULL); /* check mode turns reuse off: the plan would be trivial */
    th_init("test_plan");
    g_ctx = th_context(VKT_KERNELS_AUTO);
    if (argc >= 2 && strcmp(argv[1], "bench") == 0) {
        int rc = bench(argc, argv);
        return rc ? rc : th_finish();
    }
    test_checker_finds_overlap();
    test_cli_models();
    test_chain_20k();
    return th_finish();
}
