/* split_auto.c - vkt_graph_split: the ops the loss depends on, in build order, cut into
 * P consecutive groups balanced by a cost per op (measured device time, or parameter
 * bytes), with the fewest bytes crossing among near-best splits. vkt.h states the rules;
 * stage.c checks the placement again when the pipeline is made. */
#include "graph/stage.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The ops of the loss's path and what each cut between them costs or forbids. A cut j
 * (1 <= j < n) puts ops [0, j) on earlier stages than ops [j, n). */
typedef struct split_plan {
    const vkt_graph *g;
    uint32_t n;            /* ops the loss depends on */
    uint32_t *node;        /* op k -> node id */
    uint32_t *pos;         /* node id -> op index (UINT32_MAX: not such an op) */
    double *cost;          /* per op */
    double *redo;          /* per op: its forward time, added on every stage but the last
                              where stages recompute their forward with the backward
                              (zeroed where they keep their activations) */
    uint64_t *params;      /* per op: bytes of the parameters it is the first to read */
    uint64_t *out_bytes;   /* per op: bytes of its value (sent when a cut crosses it) */
    uint32_t *last_reader; /* per op: index of the last op reading it (0: none) */
    uint8_t *cut_ok;       /* per cut j */
    double *cross;         /* per cut j: bytes crossing it */
    uint32_t batch;
} split_plan;

static void plan_free(split_plan *p)
{
    free(p->node);
    free(p->pos);
    free(p->cost);
    free(p->redo);
    free(p->params);
    free(p->out_bytes);
    free(p->last_reader);
    free(p->cut_ok);
    free(p->cross);
}

static uint64_t tensor_bytes(const vkt_tensor *t) { return graph_count(&t->shape) * 4; }

/* The path's ops, the cuts each parameter or non-row-major value forbids, and the bytes
 * each allowed cut sends. */
static vkt_status plan_make(split_plan *p, const vkt_graph *g, const vkt_tensor *loss)
{
    uint32_t N = g->count;
    uint8_t *active = calloc(N ? N : 1, 1), *rows = calloc(N ? N : 1, 1);
    int32_t *forbid = calloc(N + 2, sizeof *forbid);
    double *cross_diff = calloc(N + 2, sizeof *cross_diff);
    uint32_t *first = malloc((N ? N : 1) * sizeof *first), *last = calloc(N ? N : 1, sizeof *last);
    p->g = g;
    p->node = malloc((N ? N : 1) * sizeof *p->node);
    p->pos = malloc((N ? N : 1) * sizeof *p->pos);
    p->cost = calloc(N ? N : 1, sizeof *p->cost);
    p->redo = calloc(N ? N : 1, sizeof *p->redo);
    p->params = calloc(N ? N : 1, sizeof *p->params);
    p->out_bytes = calloc(N ? N : 1, sizeof *p->out_bytes);
    p->last_reader = calloc(N ? N : 1, sizeof *p->last_reader);
    p->cut_ok = calloc(N + 1, 1);
    p->cross = calloc(N + 1, sizeof *p->cross);
    vkt_status st = VKT_OK;
    if (!active || !rows || !forbid || !cross_diff || !first || !last || !p->node || !p->pos ||
        !p->cost || !p->redo || !p->params || !p->out_bytes || !p->last_reader || !p->cut_ok || !p->cross)
        st = err_fail(NULL, VKT_ERROR_OUT_OF_MEMORY, "vkt_graph_split: out of host memory");
    for (uint32_t i = 0; st == VKT_OK && i < N; i++)
        if (g->nodes[i]->op == GOP_INPUT || g->nodes[i]->op == GOP_LABELS) {
            p->batch = g->nodes[i]->shape.dims[0];
            break;
        }
    if (st == VKT_OK) {
        graph_mark_needed(g, loss, active);
        for (uint32_t i = 0; i < N; i++) {
            rows[i] = (uint8_t)graph_batch_major(g->nodes[i], rows);
            p->pos[i] = UINT32_MAX;
            first[i] = UINT32_MAX;
            if (active[i] && g->nodes[i]->n_in) {
                p->pos[i] = p->n;
                p->node[p->n++] = i;
            }
        }
        /* first and last reader (op index) of every node */
        for (uint32_t k = 0; k < p->n; k++) {
            const vkt_tensor *t = g->nodes[p->node[k]];
            for (uint32_t j = 0; j < t->n_in; j++) {
                uint32_t v = t->in[j]->id;
                if (first[v] == UINT32_MAX)
                    first[v] = k;
                last[v] = k;
            }
        }
        for (uint32_t i = 0; i < N; i++) {
            const vkt_tensor *t = g->nodes[i];
            if (!active[i] || first[i] == UINT32_MAX)
                continue;
            if (t->op == GOP_PARAM) { /* every reader on one stage: no cut in (first, last] */
                p->params[first[i]] += tensor_bytes(t);
                forbid[first[i] + 1]++;
                forbid[last[i] + 1]--;
            } else if (t->n_in) { /* an op's value crosses cuts (pos, last] */
                uint32_t a = p->pos[i];
                p->out_bytes[a] = tensor_bytes(t);
                p->last_reader[a] = last[i];
                if (last[i] <= a)
                    continue;
                int by_rows = !t->is_int && rows[i] && t->shape.ndim && t->shape.dims[0] == p->batch;
                if (!by_rows) {
                    forbid[a + 1]++;
                    forbid[last[i] + 1]--;
                }
                cross_diff[a + 1] += (double)tensor_bytes(t);
                cross_diff[last[i] + 1] -= (double)tensor_bytes(t);
            }
        }
        int32_t f = 0;
        double c = 0;
        for (uint32_t j = 0; j <= p->n; j++) {
            f += forbid[j];
            c += cross_diff[j];
            p->cut_ok[j] = (uint8_t)(j > 0 && j < p->n && f == 0);
            p->cross[j] = c;
        }
    }
    free(active);
    free(rows);
    free(forbid);
    free(cross_diff);
    free(first);
    free(last);
    return st;
}

/* Per-op device time, forward plus backward, of the whole training model on ctx (unfused,
 * so every step is one op of the graph). Returns VKT_OK with the costs set, or a status
 * with the reason in note. */
static vkt_status measure(split_plan *p, vkt_graph *g, vkt_tensor *loss,
                          const vkt_split_options *o, char *note, size_t note_size)
{
    vkt_model_options mo = {.batch = o->batch, .no_fusion = 1};
    vkt_model *m = NULL;
    vkt_op_timing *t = NULL;
    uint32_t n = 0, runs = o->runs ? o->runs : 3;
    vkt_status st = vkt_model_create(o->context, g, loss, &mo, &m);
    if (st != VKT_OK) {
        snprintf(note, note_size, "the whole model could not be timed on one device (%s: %s)",
                 vkt_status_name(st), vkt_last_error());
        return st;
    }
    vkt_op_timing probe;
    vkt_model_profile(m, 1, &probe, 0, &n); /* too small: only the step count */
    if (!(t = calloc(n ? n : 1, sizeof *t)))
        st = VKT_ERROR_OUT_OF_MEMORY;
    /* each step's fastest of `runs` timed runs (after a warm-up each): on a busy machine
     * the minimum is the time the work takes, the rest is other work's */
    double *fastest = st == VKT_OK ? malloc((n ? n : 1) * sizeof *fastest) : NULL;
    if (st == VKT_OK && !fastest)
        st = VKT_ERROR_OUT_OF_MEMORY;
    for (uint32_t r = 0; st == VKT_OK && r < runs; r++) {
        st = vkt_model_profile(m, 2, t, n, &n);
        for (uint32_t k = 0; st == VKT_OK && k < n; k++)
            fastest[k] = r == 0 || t[k].microseconds < fastest[k] ? t[k].microseconds
                                                                  : fastest[k];
    }
    if (st != VKT_OK)
        snprintf(note, note_size, "profiling the whole model failed (%s: %s)",
                 vkt_status_name(st), vkt_model_errmsg(m));
    for (uint32_t k = 0; st == VKT_OK && k < n; k++) {
        const vkt_tensor *x = vkt_graph_find(g, t[k].name);
        if (x && p->pos[x->id] != UINT32_MAX) {
            p->cost[p->pos[x->id]] += fastest[k];
            if (!t[k].backward)
                p->redo[p->pos[x->id]] += fastest[k];
        }
    }
    free(fastest);
    free(t);
    vkt_model_destroy(m);
    return st;
}

/* Whether the split charges every stage but the last its forwards twice. The split comes
 * before the pipeline's memory decision, so `auto` (keep where the activations fit, the
 * usual case) and `never` count each forward once; only `always` counts the recomputed
 * forward, run again with the backward. */
static int split_redoes(vkt_recompute r) { return r == VKT_RECOMPUTE_ALWAYS; }

/* Ops [i, j) as one stage: their cost, and their forwards again unless it is the last
 * (rpre is 0 throughout when the stages keep their activations). */
static double seg_cost(const double *pre, const double *rpre, uint32_t i, uint32_t j, int last)
{
    return pre[j] - pre[i] + (last ? 0 : rpre[j] - rpre[i]);
}

/* The split: first the smallest achievable largest-group cost (best[k][j]: ops [0, j) in
 * k groups), then, with groups allowed up to (1 + tol) times it, the fewest crossing
 * bytes (bytes[k][j]). cut[] gets the P - 1 cuts. Returns 0 when no split exists. */
int graph_split_choose(const graph_split_costs *p, uint32_t P, double tol, uint32_t *cut)
{
    uint32_t n = p->n;
    size_t cells = (size_t)(P + 1) * (n + 1);
    double *pre = malloc((n + 1) * sizeof *pre), *best = malloc(cells * sizeof *best);
    double *rpre = malloc((n + 1) * sizeof *rpre);
    double *bytes = malloc(cells * sizeof *bytes);
    uint32_t *from = malloc(cells * sizeof *from);
    int ok = pre && rpre && best && bytes && from;
    const double INF = 1e300;
#define AT(a, k, j) (a)[(size_t)(k) * (n + 1) + (j)]
    if (ok) {
        pre[0] = rpre[0] = 0;
        for (uint32_t k = 0; k < n; k++) {
            pre[k + 1] = pre[k] + p->cost[k];
            rpre[k + 1] = rpre[k] + (p->redo ? p->redo[k] : 0);
        }
        for (size_t c = 0; c < cells; c++)
            best[c] = bytes[c] = INF;
        AT(best, 0, 0) = 0;
        for (uint32_t k = 1; k <= P; k++)
            for (uint32_t j = k; j <= n; j++)
                for (uint32_t i = k - 1; i < j; i++) {
                    if (AT(best, k - 1, i) >= INF || (i > 0 && !p->cut_ok[i]))
                        continue;
                    double v = AT(best, k - 1, i), seg = seg_cost(pre, rpre, i, j, k == P);
                    v = v > seg ? v : seg;
                    if (v < AT(best, k, j))
                        AT(best, k, j) = v;
                }
        ok = AT(best, P, n) < INF;
    }
    if (ok) {
        double limit = AT(best, P, n) * (1 + tol) + 1e-9 * (pre[n] + rpre[n]);
        AT(bytes, 0, 0) = 0;
        for (uint32_t k = 1; k <= P; k++)
            for (uint32_t j = k; j <= n; j++)
                for (uint32_t i = k - 1; i < j; i++) {
                    if (AT(bytes, k - 1, i) >= INF || (i > 0 && !p->cut_ok[i]) ||
                        seg_cost(pre, rpre, i, j, k == P) > limit)
                        continue;
                    double v = AT(bytes, k - 1, i) + (i > 0 ? p->cross[i] : 0);
                    if (v < AT(bytes, k, j)) {
                        AT(bytes, k, j) = v;
                        AT(from, k, j) = i;
                    }
                }
        uint32_t j = n;
        for (uint32_t k = P; k > 1; k--)
            j = cut[k - 2] = AT(from, k, j);
    }
#undef AT
    free(pre);
    free(rpre);
    free(best);
    free(bytes);
    free(from);
    return ok;
}

static void report(const split_plan *p, const uint32_t *stage_of, uint32_t P,
                   vkt_split_report *r)
{
    double total = 0, worst = 0;
    for (uint32_t k = 0; k < p->n; k++) {
        vkt_split_stage *s = &r->stage[stage_of[k]];
        const char *name = p->g->nodes[p->node[k]]->name;
        if (s->ops++ == 0)
            snprintf(s->first, sizeof s->first, "%s", name);
        snprintf(s->last, sizeof s->last, "%s", name);
        s->cost += p->cost[k] + (stage_of[k] + 1 < P ? p->redo[k] : 0);
        s->param_bytes += p->params[k];
        if (stage_of[p->last_reader[k]] > stage_of[k])
            s->send_bytes += p->out_bytes[k];
    }
    for (uint32_t s = 0; s < P; s++) {
        worst = r->stage[s].cost > worst ? r->stage[s].cost : worst;
        total += r->stage[s].cost;
    }
    r->stages = P;
    r->imbalance = total > 0 ? worst / (total / P) : 1;
}

static vkt_status check_args(const vkt_graph *g, const vkt_tensor *loss,
                             const vkt_split_options *o)
{
    if (!g || !loss || !o)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "vkt_graph_split: NULL argument");
    if (g->status != VKT_OK)
        return err_fail(NULL, g->status, "vkt_graph_split: the graph has an error: %s",
                        g->errmsg);
    if (loss->graph != g || graph_count(&loss->shape) != 1 || !loss->n_in)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "vkt_graph_split: the loss is not a "
                        "scalar op of this graph");
    if (o->stages == 0 || o->stages > VKT_MAX_STAGES)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "vkt_graph_split: %u stages; 1 to %d "
                        "are supported", o->stages, VKT_MAX_STAGES);
    if (o->cost > VKT_SPLIT_COST_PARAMS || o->tolerance < 0 || o->tolerance > 10)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "vkt_graph_split: unknown cost %d or "
                        "tolerance %g outside 0..10", (int)o->cost, o->tolerance);
    if ((unsigned)o->recompute > VKT_RECOMPUTE_NEVER)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "vkt_graph_split: unknown recompute "
                        "%d (auto, always or never)", (int)o->recompute);
    if (o->cost == VKT_SPLIT_COST_TIME && !o->context)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "vkt_graph_split: timing the ops "
                        "(VKT_SPLIT_COST_TIME) needs a context");
    return VKT_OK;
}

/* Enough ops for the stages. */
static vkt_status check_ops(const split_plan *p, uint32_t P)
{
    if (p->n < P)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "vkt_graph_split: %u stages but the "
                        "loss depends on only %u op(s)", P, p->n);
    return VKT_OK;
}

vkt_status vkt_graph_split(vkt_graph *g, vkt_tensor *loss, const vkt_split_options *o,
                           vkt_split_report *out)
{
    vkt_status st = check_args(g, loss, o);
    if (st != VKT_OK)
        return st;
    vkt_split_report r;
    memset(&r, 0, sizeof r);
    split_plan p;
    memset(&p, 0, sizeof p);
    uint32_t P = o->stages, cut[VKT_MAX_STAGES], *stage_of = NULL;
    st = plan_make(&p, g, loss);
    if (st == VKT_OK)
        st = check_ops(&p, P);
    r.cost = VKT_SPLIT_COST_PARAMS;
    if (st == VKT_OK && o->cost != VKT_SPLIT_COST_PARAMS && !o->context)
        snprintf(r.note, sizeof r.note, "no device to time the ops on");
    if (st == VKT_OK && o->cost != VKT_SPLIT_COST_PARAMS && o->context) {
        vkt_status ms = measure(&p, g, loss, o, r.note, sizeof r.note);
        if (ms == VKT_OK)
            r.cost = VKT_SPLIT_COST_TIME;
        else if (o->cost == VKT_SPLIT_COST_TIME)
            st = err_fail(NULL, ms, "vkt_graph_split: %s", r.note);
        else { /* partly measured: start again from parameter bytes */
            memset(p.cost, 0, p.n * sizeof *p.cost);
            memset(p.redo, 0, p.n * sizeof *p.redo);
        }
    }
    if (st == VKT_OK && r.cost == VKT_SPLIT_COST_PARAMS)
        for (uint32_t k = 0; k < p.n; k++)
            p.cost[k] = (double)p.params[k];
    if (st == VKT_OK && !(stage_of = calloc(p.n, sizeof *stage_of)))
        st = err_fail(NULL, VKT_ERROR_OUT_OF_MEMORY, "vkt_graph_split: out of host memory");
    /* stages that keep their activations run each forward once (split_redoes) */
    if (st == VKT_OK && !split_redoes(o->recompute))
        memset(p.redo, 0, p.n * sizeof *p.redo);
    graph_split_costs costs = {.n = p.n, .cost = p.cost, .redo = p.redo, .cut_ok = p.cut_ok,
                               .cross = p.cross};
    if (st == VKT_OK && !graph_split_choose(&costs, P, o->tolerance > 0 ? o->tolerance : 0.05,
                                            cut))
        st = err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "vkt_graph_split: no way to cut the "
                      "%u op(s) into %u stages: every cut would split the readers of one "
                      "parameter or a value not laid out by batch rows", p.n, P);
    if (st == VKT_OK) {
        for (uint32_t k = 0, s = 0; k < p.n; k++) {
            while (s + 1 < P && k >= cut[s])
                s++;
            stage_of[k] = s;
        }
        for (uint32_t k = 0; k < p.n; k++)
            g->nodes[p.node[k]]->stage = stage_of[k];
        report(&p, stage_of, P, &r);
        if (out)
            *out = r;
    }
    free(stage_of);
    plan_free(&p);
    return st;
}
