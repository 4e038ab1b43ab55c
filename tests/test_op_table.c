/* test_op_table.c - walks the op table (engine/graph/ops.h) and fails when an op is
 * incompletely defined or has no test: every op that is not a leaf needs a shape rule, a
 * forward (views excepted), a backward (or a forward that writes its input's gradient,
 * OPF_GRAD_IN_FORWARD), a CPU reference of both and a finite-difference
 * tolerance, and every op and every variant a graph can build (each activation,
 * log-softmax, max and average pooling), and each fused op the model's rewrite makes
 * (linear_act, conv_relu, softmax-CE as the loss), must appear in a case of tests/test_graph_ops.c or
 * test_layers.c. Those cases run the reference's gradient check and the device against
 * the reference (tests/op_case.c) and record what they built into the files of
 * $VKT_OP_COVERAGE_DIR (ctest runs them first, as a fixture). A planted gap (a coverage
 * list without one op) must be caught: the walk can fail. */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph.h"
#include "harness.h"

#define MAX_SEEN 4096

typedef struct seen {
    char table[MAX_SEEN][48], variant[MAX_SEEN][48];
    uint32_t n;
} seen;

static int covered(const seen *s, const char *table, const char *variant)
{
    for (uint32_t i = 0; i < s->n; i++)
        if (strcmp(s->table[i], table) == 0 && (!variant || strcmp(s->variant[i], variant) == 0))
            return 1;
    return 0;
}

static void read_coverage(seen *s, const char *dir)
{
    DIR *d = opendir(dir);
    if (!TH_CHECK(d != NULL, "cannot open the coverage folder %s", dir))
        return;
    struct dirent *e;
    uint32_t files = 0;
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        if (len < 5 || strcmp(e->d_name + len - 4, ".ops") != 0)
            continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        FILE *f = fopen(path, "r");
        if (!TH_CHECK(f != NULL, "cannot read %s", path))
            continue;
        files++;
        char t[48], v[48];
        while (s->n < MAX_SEEN && fscanf(f, "op %47s %47s\n", t, v) == 2) {
            if (covered(s, t, v))
                continue;
            strcpy(s->table[s->n], t);
            strcpy(s->variant[s->n], v);
            s->n++;
        }
        fclose(f);
    }
    closedir(d);
    TH_CHECK(files >= 2, "coverage files from test_graph_ops and test_layers: %u found in %s",
             files, dir);
}

/* Every variant of op `op` that a graph can build, by name, into names; returns how many. */
static uint32_t variants(graph_op op, const char **names, uint32_t cap)
{
    vkt_tensor t;
    memset(&t, 0, sizeof t);
    t.op = op;
    uint32_t n = 0;
    if (op == GOP_UNARY) {
        for (int u = 0; u < VKT_UNARY_COUNT && n < cap; u++) {
            t.p.unary.op = (vkt_unary_op)u;
            if (strcmp(graph_op_fn(&t), "vkt_unary") != 0) /* has a graph builder */
                names[n++] = graph_op_name(&t);
        }
    } else if (op == GOP_SOFTMAX || op == GOP_POOL2D) {
        for (int k = 0; k < 2; k++) {
            if (op == GOP_SOFTMAX)
                t.p.softmax.log = k;
            else
                t.p.pool.max = k;
            names[n++] = graph_op_name(&t);
        }
    } else {
        names[n++] = NULL; /* any variant (a fused op is named after its activation) */
    }
    return n;
}

/* Walks the table against the coverage; returns the problems found (each reported when
 * `report`). */
static uint32_t walk(const seen *s, int report)
{
    uint32_t bad = 0;
    for (int op = 0; op < GOP_COUNT; op++) {
        const graph_op_def *d = graph_op_def_of((graph_op)op);
        if (!d || !d->name || !d->fn || strncmp(d->fn, "vkt_", 4) != 0) {
            bad++;
            if (report)
                TH_CHECK(0, "op %d: no entry, name or vkt_ function", op);
            continue;
        }
        for (int other = 0; other < op; other++)
            if (strcmp(graph_op_def_of((graph_op)other)->name, d->name) == 0 && ++bad && report)
                TH_CHECK(0, "ops %d and %d share the name %s", other, op, d->name);
        if (d->flags & OPF_LEAF) {
            if ((d->shape || d->forward || d->backward) && ++bad && report)
                TH_CHECK(0, "%s: a leaf with a shape rule or recording", d->name);
            continue;
        }
        int grad = d->backward || (d->flags & OPF_GRAD_IN_FORWARD);
        int whole = d->shape && (d->forward || (d->flags & OPF_VIEW)) && grad &&
                    d->ref_forward && d->ref_backward && d->grad_rtol > 0 && d->min_in >= 1 &&
                    (d->max_in >= d->min_in);
        if (!whole && ++bad && report)
            TH_CHECK(0, "%s: incomplete entry (shape, forward, backward, references, "
                     "gradient tolerance, input counts)", d->name);
        const char *names[VKT_UNARY_COUNT + 2];
        uint32_t n = variants((graph_op)op, names, VKT_UNARY_COUNT + 2);
        for (uint32_t k = 0; k < n; k++)
            if (!covered(s, d->name, names[k]) && ++bad && report)
                TH_CHECK(0, "%s (%s): no case in test_graph_ops.c or test_layers.c checks it "
                         "against its reference and its gradient", d->name,
                         names[k] ? names[k] : "any variant");
    }
    return bad;
}

int main(void)
{
    th_init_host("test_op_table");
    const char *dir = getenv("VKT_OP_COVERAGE_DIR");
    if (!TH_CHECK(dir && *dir, "VKT_OP_COVERAGE_DIR is not set (run through ctest)"))
        return th_finish();
    static seen s;
    read_coverage(&s, dir);
    uint32_t bad = walk(&s, 1);
    TH_CHECK(bad == 0, "op table: %d ops, %u problems", GOP_COUNT, bad);

    /* The walk can fail: without the RMSNorm and SiLU cases it names both. */
    static seen planted;
    for (uint32_t i = 0; i < s.n; i++)
        if (strcmp(s.table[i], "rms_norm") != 0 && strcmp(s.variant[i], "silu") != 0) {
            strcpy(planted.table[planted.n], s.table[i]);
            strcpy(planted.variant[planted.n], s.variant[i]);
            planted.n++;
        }
    TH_CHECK(walk(&planted, 0) == 2, "a coverage list without rms_norm and silu: %u problems, "
             "2 expected", walk(&planted, 0));
    return th_finish();
}
