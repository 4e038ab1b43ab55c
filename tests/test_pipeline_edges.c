/* Device edges between pipeline stages (pipe_engine.h's pipe_edges rows,
 * docs/model_parallel.md): the stages of a copy sharing one VkDevice keep the values and
 * gradients that cross them in device buffers, copied inside their runs and ordered by
 * timelines; stages on VkDevices of their own that import host memory (the import row)
 * copy them inside their runs into and out of one host allocation every side imported.
 * Every case runs the same steps on contexts sharing one VkDevice (VKT_SHARE_DEVICE=1)
 * with VKT_PIPE_EDGES=host and =device, and on a VkDevice per stage (VKT_SHARE_DEVICE=0)
 * with the host row and with VKT_PIPE_EDGES=import (lavapipe imports: separate VkDevices
 * on its one physical device), and asserts:
 *  - the losses of every step and every parameter at the end equal bit for bit (the
 *    copies are exact; the gradients of a value read by two stages sum in stage order
 *    from consumer 0's, as the host row sums);
 *  - the same sent_bytes; sent_host_bytes (bytes the host copied) 0 on the device and
 *    import rows, all of them on the host's; the import row's received values written on
 *    the device into the input's own buffer, as the device row's;
 *  - the device row submits a stage's runs without waiting (no_wait) and copies its fed
 *    rows and control words in on the device: a keeping stage submits 2m - 1 of its 2m
 *    runs of a step while another slot's run is in flight (`overlapped`, counted at
 *    submission: deterministic), the last stage m - 1 of m with two models, none with
 *    one, a recomputing stage (one model) none;
 * on: a 3-stage MLP with a skip connection (a value read by stages 1 and 2) at m 1 and 3,
 * keeping and recomputing; a 4-stage MLP whose first value is read by the 3 others (a sum
 * of three gradients, where the order shows) at m 2 keeping and m 4 recomputing; dropout and batch norm on 2 stages at m 4, keeping and
 * recomputing (running averages compared too); 3 stages x 2 copies in a trainer (the host
 * route: the copies' sums meet on the host) with clipping, on all three rows. The update
 * ahead of the stage's next run against the same pipeline flushed after every step (the
 * update a submission of its own): every net above on the direct route, and the skip MLP
 * on the host route (2 copies; clipping; fp16 with a skipped step; all three), on the
 * host and device rows: the same losses and parameters bit for bit, one submission and
 * one fence wait fewer per context and applied step; a skipped step changes no parameter
 * and leaves nothing due. And:
 * VKT_PIPE_EDGES=device where the stages do not share one VkDevice, or in check mode, and
 * VKT_PIPE_EDGES=import where they share one, or in check mode, fail with
 * VKT_ERROR_INVALID_ARGUMENT saying why, and where an import fails with its message; a bad
 * value, or a bad VKT_SHARE_DEVICE, is refused naming it; check mode alone takes the
 * host row. Run under the memory profiles too (the received inputs in staging). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "gpu/gpu.h"           /* white box: the round-trip counters */
#include "parallel/pipe.h"     /* white box: the stages' models and sub-graphs */
#include "platform/platform.h" /* plat_setenv */

enum { F = 12, H = 16, C = 5, BATCH = 12, STEPS = 6 };

typedef struct net {
    vkt_graph *g;
    vkt_tensor *x, *y, *loss;
    vkt_tensor *p[8];
    uint32_t n_p;
} net;

static vkt_tensor *param(net *n, const char *name, vkt_shape s, float a)
{
    vkt_init u = {.kind = VKT_INIT_UNIFORM, .a = -a, .b = a};
    vkt_tensor *t = vkt_param(n->g, name, &s, &u);
    n->p[n->n_p++] = t;
    return t;
}

/* A graph with the inputs x [B,F] and labels y [B], its ops from stage 0 on. */
static net net_begin(uint64_t seed)
{
    net n = {0};
    vkt_graph_options go = {.seed = seed};
    vkt_graph_create(&go, &n.g);
    vkt_shape xs = {2, {BATCH, F}};
    n.x = vkt_input(n.g, "x", &xs);
    n.y = vkt_input_labels(n.g, "y", BATCH);
    return n;
}

/* Its loss: softmax cross-entropy of the logits z against y. */
static net net_end(net n, vkt_tensor *z)
{
    n.loss = vkt_softmax_cross_entropy(n.g, z, n.y);
    TH_CHECK(vkt_graph_status(n.g) == VKT_OK, "graph: %s", vkt_graph_errmsg(n.g));
    return n;
}

/* x [B,F] -> relu(linear) on stage 0 -> relu(linear) on 1 -> (+ h1) linear + CE on 2: h1
 * is read on stages 1 and 2. */
static net make_skip(void)
{
    net n = net_begin(7);
    vkt_tensor *h1 = vkt_relu(n.g, vkt_linear(n.g, n.x, param(&n, "w1", (vkt_shape){2, {F, H}}, 0.4f),
                                              param(&n, "b1", (vkt_shape){1, {H}}, 0.1f)));
    vkt_graph_set_stage(n.g, 1);
    vkt_tensor *h2 = vkt_relu(n.g, vkt_linear(n.g, h1, param(&n, "w2", (vkt_shape){2, {H, H}}, 0.4f),
                                              param(&n, "b2", (vkt_shape){1, {H}}, 0.1f)));
    vkt_graph_set_stage(n.g, 2);
    vkt_tensor *z = vkt_linear(n.g, vkt_add(n.g, h2, h1),
                               param(&n, "w3", (vkt_shape){2, {H, C}}, 0.4f),
                               param(&n, "b3", (vkt_shape){1, {C}}, 0.1f));
    return net_end(n, z);
}

/* 4 stages, h1 (stage 0) read on stages 1, 2 and 3: three consumers' gradients summed,
 * where float addition's order shows (two terms commute). */
static net make_skip3(void)
{
    net n = net_begin(5);
    vkt_tensor *h1 = vkt_relu(n.g, vkt_linear(n.g, n.x, param(&n, "w1", (vkt_shape){2, {F, H}}, 0.4f),
                                              param(&n, "b1", (vkt_shape){1, {H}}, 0.1f)));
    vkt_graph_set_stage(n.g, 1);
    vkt_tensor *h2 = vkt_relu(n.g, vkt_matmul(n.g, h1, param(&n, "w2", (vkt_shape){2, {H, H}}, 0.4f)));
    vkt_graph_set_stage(n.g, 2);
    vkt_tensor *h3 = vkt_relu(n.g, vkt_matmul(n.g, vkt_add(n.g, h2, h1),
                                              param(&n, "w3", (vkt_shape){2, {H, H}}, 0.4f)));
    vkt_graph_set_stage(n.g, 3);
    vkt_tensor *z = vkt_matmul(n.g, vkt_add(n.g, h3, h1), param(&n, "w4", (vkt_shape){2, {H, C}}, 0.4f));
    return net_end(n, z);
}

/* dropout after a batch-normalized layer on stage 0, its value on to stage 1. */
static net make_dropout_bn(void)
{
    net n = net_begin(11);
    vkt_tensor *h = vkt_matmul(n.g, n.x, param(&n, "w1", (vkt_shape){2, {F, H}}, 0.4f));
    vkt_shape hs = {1, {H}};
    vkt_init zero = {.kind = VKT_INIT_CONSTANT, .a = 0}, one = {.kind = VKT_INIT_CONSTANT, .a = 1};
    n.p[n.n_p++] = vkt_state(n.g, "rm", &hs, &zero); /* running averages: compared too */
    n.p[n.n_p++] = vkt_state(n.g, "rv", &hs, &one);
    h = vkt_batch_norm(n.g, h, param(&n, "gamma", hs, 1.0f), param(&n, "beta", hs, 0.1f),
                       n.p[n.n_p - 2], n.p[n.n_p - 1], 1e-5f, 0.2f);
    h = vkt_dropout(n.g, vkt_relu(n.g, h), 0.25f);
    vkt_graph_set_stage(n.g, 1);
    vkt_tensor *z = vkt_linear(n.g, h, param(&n, "w2", (vkt_shape){2, {H, C}}, 0.4f),
                               param(&n, "b2", (vkt_shape){1, {C}}, 0.1f));
    return net_end(n, z);
}

/* What one run leaves: the losses, the parameters, the stats of its stages. */
typedef struct outcome {
    int ok;
    float loss[STEPS];
    float *params[8];
    uint64_t sent[VKT_MAX_STAGES], host[VKT_MAX_STAGES], overlapped[VKT_MAX_STAGES];
    uint32_t kept[VKT_MAX_STAGES];
    /* over the steps, per stage: submissions, fence waits, staged transfers (the gpu
     * layer's counters of its context); whether it has an optimizer (parameters) */
    uint64_t submits[VKT_MAX_STAGES], waits[VKT_MAX_STAGES], transfers[VKT_MAX_STAGES];
    int updates[VKT_MAX_STAGES]; /* per context: the steps whose update went ahead of a run */
    uint32_t stages, m;
    int keep; /* not recompute always (the last stage's second model: never then) */
    char *moments[VKT_MAX_STAGES]; /* run_host: each context's optimizer state at the end */
    uint64_t moment_bytes[VKT_MAX_STAGES];
} outcome;

static uint64_t count_of(const vkt_tensor *t)
{
    vkt_shape s = vkt_tensor_shape(t);
    uint64_t c = 1;
    for (uint32_t i = 0; i < s.ndim; i++)
        c *= s.dims[i];
    return c;
}

static void outcome_free(outcome *o)
{
    for (uint32_t i = 0; i < 8; i++)
        free(o->params[i]);
    for (uint32_t i = 0; i < VKT_MAX_STAGES; i++)
        free(o->moments[i]);
}

static void batch_data(uint32_t step, float *x, int32_t *y)
{
    for (uint32_t i = 0; i < BATCH * F; i++)
        x[i] = sinf(0.37f * (float)(i + 13 * step)) + 0.25f * cosf(1.3f * (float)i);
    for (uint32_t r = 0; r < BATCH; r++)
        y[r] = (int32_t)((r * 3 + step) % C);
}

static void set_env(const char *share, const char *edges)
{
    plat_setenv("VKT_SHARE_DEVICE", share);
    plat_setenv("VKT_PIPE_EDGES", edges);
}

/* The counters of the P x D contexts, context i = copy i / P's stage i % P. */
static void count(vkt_pipeline *p, uint32_t P, uint32_t D, gpu_counters *c)
{
    for (uint32_t i = 0; i < P * D; i++)
        gpu_context_counters(pipe_context(p, i / P, i % P), &c[i]);
}

/* STEPS steps of a P-stage pipeline on device 0 (every stage), m micro-batches; flush:
 * each step's update (due after it: the direct route) run at once, a submission of its
 * own, as before it went ahead of the stage's next run (pipe_flush). */
static outcome run_pipeline_flush(net *n, uint32_t P, uint32_t m, vkt_recompute r,
                                  const char *share, const char *edges, int flush)
{
    outcome o = {0};
    set_env(share, edges);
    uint32_t dev[VKT_MAX_STAGES] = {0};
    vkt_pipeline_options po = {.batch = BATCH, .micro_batches = m, .stages = P, .devices = dev,
                               .recompute = r};
    po.optimizer.kind = VKT_OPTIMIZER_ADAM;
    po.optimizer.lr = 0.01f;
    vkt_pipeline *p = NULL;
    if (!TH_CHECK(vkt_pipeline_create(th_instance, n->g, n->loss, &po, &p) == VKT_OK,
                  "pipeline (share %s, edges %s): %s", share, edges, vkt_last_error()))
        return o;
    float x[BATCH * F];
    int32_t y[BATCH];
    vkt_feed f[2] = {{n->x, x}, {n->y, y}};
    o.ok = 1;
    gpu_counters c0[VKT_MAX_STAGES], c1[VKT_MAX_STAGES];
    count(p, P, 1, c0);
    for (uint32_t k = 0; k < STEPS && o.ok; k++) {
        batch_data(k, x, y);
        o.ok = TH_CHECK(vkt_pipeline_step(p, f, 2, &o.loss[k]) == VKT_OK, "step %u: %s", k,
                        vkt_pipeline_errmsg(p));
        if (flush && o.ok)
            o.ok = TH_CHECK(pipe_flush(p) == VKT_OK, "flush: %s", vkt_pipeline_errmsg(p));
    }
    count(p, P, 1, c1);
    for (uint32_t s = 0; s < P; s++) {
        o.submits[s] = c1[s].submits - c0[s].submits;
        o.waits[s] = c1[s].fence_waits - c0[s].fence_waits;
        o.transfers[s] = c1[s].sync_transfers - c0[s].sync_transfers;
        o.updates[s] = pipe_optimizer(p, 0, s) ? STEPS : 0; /* ahead unless flushed */
    }
    for (uint32_t i = 0; i < n->n_p && o.ok; i++) {
        uint64_t c = count_of(n->p[i]);
        o.params[i] = calloc(c, sizeof(float));
        o.ok = TH_CHECK(vkt_pipeline_read(p, n->p[i], o.params[i], c) == VKT_OK, "read %s: %s",
                        vkt_tensor_name(n->p[i]), vkt_pipeline_errmsg(p));
    }
    o.stages = P;
    o.m = m;
    o.keep = r != VKT_RECOMPUTE_ALWAYS;
    for (uint32_t s = 0; s < P && o.ok; s++) {
        vkt_pipeline_stage_stats ss;
        o.ok = TH_OK(NULL, vkt_pipeline_stage_stats_get(p, s, &ss));
        o.sent[s] = ss.sent_bytes;
        o.host[s] = ss.sent_host_bytes;
        o.overlapped[s] = ss.overlapped;
        o.kept[s] = ss.kept;
    }
    /* the device row writes a stage's received values into the input's own buffer, never
     * into staging (under every memory profile): its run's staged copy leaves them alone */
    const graph_split *sp = pipe_split(p);
    int on_device = !strcmp(edges, "device") || !strcmp(edges, "import");
    for (uint32_t s = 1; s < P && o.ok && on_device; s++)
        for (uint32_t j = 0; j < sp->stage[s].n_recv; j++) {
            vkt_tensor *t = sp->stage[s].map[sp->stage[s].recv[j]];
            vkt_view in = {0}, val = {0};
            vkt_model *x = pipe_model(p, 0, s);
            TH_CHECK(graph_model_input_view(x, t, &in) == VKT_OK &&
                         graph_model_value_view(x, t, &val) == VKT_OK && in.buffer == val.buffer &&
                         in.offset == val.offset,
                     "stage %u: received value %u is written at buffer %p +%llu, the input is at "
                     "%p +%llu", s, j, (void *)in.buffer, (unsigned long long)in.offset,
                     (void *)val.buffer, (unsigned long long)val.offset);
        }
    vkt_pipeline_destroy(p);
    return o;
}

static outcome run_pipeline(net *n, uint32_t P, uint32_t m, vkt_recompute r, const char *share,
                            const char *edges)
{
    return run_pipeline_flush(n, P, m, r, share, edges, 0);
}

/* Which row b took: through the host, the device row, the import row. */
enum { ROW_DEVICE, ROW_HOST, ROW_IMPORT };

/* b equals a bit for bit (losses, parameters, bytes sent); row: whether b's edges went
 * through the host (sent_host_bytes = sent_bytes), else none did. */
static void expect_same(const net *n, const outcome *a, const outcome *b, int row,
                        const char *what)
{
    int host_row = row == ROW_HOST;
    if (!a->ok || !b->ok)
        return;
    TH_CHECK(memcmp(a->loss, b->loss, sizeof a->loss) == 0, "%s: losses differ (%.9g vs %.9g "
             "at the last step)", what, (double)a->loss[STEPS - 1], (double)b->loss[STEPS - 1]);
    for (uint32_t i = 0; i < n->n_p; i++)
        TH_CHECK(memcmp(a->params[i], b->params[i], count_of(n->p[i]) * 4) == 0,
                 "%s: parameter %s differs", what, vkt_tensor_name(n->p[i]));
    uint64_t total = 0, overlapped = 0;
    for (uint32_t s = 0; s < b->stages; s++) {
        TH_CHECK(a->sent[s] == b->sent[s] && b->sent[s] > 0 && (s || b->sent[s]),
                 "%s: stage %u sent %llu bytes, the reference %llu", what, s,
                 (unsigned long long)b->sent[s], (unsigned long long)a->sent[s]);
        TH_CHECK(b->host[s] == (host_row ? b->sent[s] : 0), "%s: stage %u sent %llu of %llu "
                 "bytes through the host", what, s, (unsigned long long)b->host[s],
                 (unsigned long long)b->sent[s]);
        /* the device row submits without waiting and the host writes nothing into a
         * stage's models during a step: a keeping stage's runs alternate slots, and all of
         * its 2m but the first go in while another slot's run is in flight; the last
         * stage with two models m - 1 of its m; one model (recomputing, or a last stage
         * with one): counted 0 (a replay of its stream waits for that stream's last run) */
        int last = s + 1 == b->stages;
        /* the import row waits for each run (its fence orders the receiver's): none */
        uint64_t want = row != ROW_DEVICE || b->kept[s] < 2 ? 0 : last ? b->m - 1 : 2 * b->m - 1;
        TH_CHECK(!last || b->kept[s] == (row == ROW_DEVICE && b->m >= 2 && b->keep ? 2u : 1u),
                 "%s: the last stage keeps %u micro-batches", what, b->kept[s]);
        TH_CHECK(b->overlapped[s] == want, "%s: stage %u: %llu runs submitted with another in "
                 "flight; %llu expected", what, s, (unsigned long long)b->overlapped[s],
                 (unsigned long long)want);
        overlapped += b->overlapped[s];
        total += b->sent[s];
    }
    printf("  %s: the same %d losses (last %.6f) and parameters; %llu bytes sent, %s; %llu "
           "runs a step submitted behind another\n", what, STEPS, (double)b->loss[STEPS - 1],
           (unsigned long long)total, host_row ? "all copied by the host" : "none copied by the host",
           (unsigned long long)overlapped);
}

/* Per context of b (the update ahead) against a (flushed after every step): exactly one
 * submission and one fence wait fewer per step whose update went ahead (b.updates), the
 * same transfers. */
static void expect_fewer(const outcome *a, const outcome *b, const char *what)
{
    for (uint32_t i = 0; a->ok && b->ok && i < b->stages; i++) {
        uint64_t fewer = (uint64_t)b->updates[i];
        TH_CHECK(a->submits[i] == b->submits[i] + fewer && a->waits[i] == b->waits[i] + fewer &&
                     a->transfers[i] == b->transfers[i],
                 "%s: context %u: %llu submissions, %llu fence waits, %llu transfers in %d "
                 "steps; with the update on its own %llu, %llu, %llu (%llu fewer expected)",
                 what, i, (unsigned long long)b->submits[i], (unsigned long long)b->waits[i],
                 (unsigned long long)b->transfers[i], STEPS, (unsigned long long)a->submits[i],
                 (unsigned long long)a->waits[i], (unsigned long long)a->transfers[i],
                 (unsigned long long)fewer);
    }
}

/* The update ahead of the stage's next run (b) against a submission of its own after each
 * step (a, flushed): the same losses and parameters bit for bit (the same kernel on the
 * same gradient), and per stage with parameters one submission and one fence wait fewer
 * a step, the same transfers. */
static void expect_ahead(const net *n, const outcome *a, const outcome *b, int row,
                         const char *what)
{
    expect_same(n, a, b, row, what);
    expect_fewer(a, b, what);
    for (uint32_t s = 0; a->ok && b->ok && s < b->stages; s++) {
        printf("    stage %u: %.3g submissions and %.3g fence waits a step (%.3g and %.3g with "
               "the update on its own)\n", s, (double)b->submits[s] / STEPS,
               (double)b->waits[s] / STEPS, (double)a->submits[s] / STEPS,
               (double)a->waits[s] / STEPS);
    }
}

/* The host route (pipe_engine.h's pipe_route): copies whose sums meet on the host,
 * clipping by the global norm, fp16's loss scale and guard, with one step (skip) whose
 * scale overflows the gradients, so the guard skips it. */
typedef struct hostcase {
    const char *name;
    uint32_t copies;
    float clip;
    int fp16;
    int skip; /* the step whose gradients overflow (-1: none) */
} hostcase;

/* STEPS steps of h's pipeline (engine white box: pipe_create, pipe_step) on device 0, its
 * P x D contexts alike; flush: each step's update at once, as run_pipeline_flush. Around
 * the skipped step, in both: the parameters read before it (which flushes the update
 * due) and after it: the same bits, and the read after it submits nothing (the skip left
 * nothing due). Per context: submissions, waits, transfers over the steps, and updates:
 * the steps whose update went ahead of a run (applied, not flushed by that read). */
static outcome run_host(net *n, uint32_t P, uint32_t m, const hostcase *h, const char *share,
                        const char *edges, int flush)
{
    outcome o = {0};
    set_env(share, edges);
    uint32_t D = h->copies, dev[VKT_MAX_STAGES] = {0};
    pipe_options po = {.batch = BATCH, .micro_batches = m, .stages = P, .copies = D,
                       .devices = dev, .n_devices = P * D, .recompute = VKT_RECOMPUTE_NEVER,
                       .precision = h->fp16 ? VKT_PRECISION_FP16 : VKT_PRECISION_FP32,
                       .fn = "test"};
    po.optimizer.kind = VKT_OPTIMIZER_ADAM;
    po.optimizer.lr = 0.01f;
    po.optimizer.clip_norm = h->clip;
    vkt_pipeline *p = NULL;
    if (!TH_CHECK(pipe_create(th_instance, n->g, n->loss, &po, &p) == VKT_OK,
                  "%s (share %s, edges %s): %s", h->name, share, edges, vkt_last_error()))
        return o;
    float x[BATCH * F];
    int32_t y[BATCH];
    vkt_feed f[2] = {{n->x, x}, {n->y, y}};
    uint64_t c1 = count_of(n->p[0]);
    float *w[2] = {calloc(c1, 4), calloc(c1, 4)};
    o.ok = w[0] && w[1];
    gpu_counters a[VKT_MAX_STAGES], b[VKT_MAX_STAGES];
    count(p, P, D, a);
    uint32_t applied = 0;
    for (uint32_t k = 0; k < STEPS && o.ok; k++) {
        batch_data(k, x, y);
        int skip = (int)k == h->skip;
        if (h->fp16) /* the skipped step's scale overflows fp32 in the backward */
            pipe_set_scaler(p, 1, skip ? 3e38f : 1024.0f);
        if (skip) /* flushes the update due (ahead: one submission of its own) */
            o.ok = TH_OK(NULL, pipe_read_param(p, D - 1, n->p[0], w[0], c1));
        double loss = 0;
        o.ok = o.ok && TH_CHECK(pipe_step(p, f, 2, k, &loss) == VKT_OK, "%s step %u: %s",
                                h->name, k, vkt_pipeline_errmsg(p));
        o.loss[k] = (float)loss;
        o.ok = o.ok && TH_CHECK(pipe_skipped(p) == skip, "%s step %u: skipped %d", h->name, k,
                                pipe_skipped(p));
        applied += !skip && !flush && (int)k + 1 != h->skip;
        if (flush && o.ok)
            o.ok = TH_CHECK(pipe_flush(p) == VKT_OK, "flush: %s", vkt_pipeline_errmsg(p));
        if (skip && o.ok) { /* every context: nothing due, so nothing submitted but reads */
            gpu_counters r0[VKT_MAX_STAGES], r1[VKT_MAX_STAGES];
            count(p, P, D, r0);
            o.ok = TH_OK(NULL, pipe_read_param(p, D - 1, n->p[0], w[1], c1));
            count(p, P, D, r1);
            uint64_t sub = 0, t = 0;
            for (uint32_t i = 0; i < P * D; i++) {
                sub += r1[i].submits - r0[i].submits;
                t += r1[i].sync_transfers - r0[i].sync_transfers;
            }
            TH_CHECK(sub == t && memcmp(w[0], w[1], c1 * 4) == 0,
                     "%s, %s: the skipped step updated w1 (%d) or left an update due (%llu "
                     "submissions for a read of %llu transfers)", h->name, flush ? "flushed" :
                     "ahead", memcmp(w[0], w[1], c1 * 4) != 0, (unsigned long long)sub,
                     (unsigned long long)t);
        }
    }
    count(p, P, D, b);
    for (uint32_t i = 0; i < P * D; i++) {
        o.submits[i] = b[i].submits - a[i].submits;
        o.waits[i] = b[i].fence_waits - a[i].fence_waits;
        o.transfers[i] = b[i].sync_transfers - a[i].sync_transfers;
        o.updates[i] = pipe_optimizer(p, i / P, i % P) ? (int)applied : 0;
    }
    for (uint32_t i = 0; i < n->n_p && o.ok; i++) { /* the last copy's: all are alike */
        uint64_t c = count_of(n->p[i]);
        o.params[i] = calloc(c, sizeof(float));
        o.ok = TH_CHECK(pipe_read_param(p, D - 1, n->p[i], o.params[i], c) == VKT_OK,
                        "read %s: %s", vkt_tensor_name(n->p[i]), vkt_pipeline_errmsg(p));
    }
    for (uint32_t i = 0; i < P * D && o.ok; i++) { /* after the reads' flush: Adam's moments
                                                      and step count */
        vkt_optimizer *opt = pipe_optimizer(p, i / P, i % P);
        o.moment_bytes[i] = opt ? vkt_optimizer_state_size(opt) : 0;
        o.moments[i] = opt ? malloc(o.moment_bytes[i]) : NULL;
        if (opt)
            o.ok = o.moments[i] && TH_OK(NULL, vkt_optimizer_read_state(opt, o.moments[i],
                                                                        o.moment_bytes[i]));
    }
    o.stages = P * D; /* contexts */
    o.m = m;
    free(w[0]);
    free(w[1]);
    vkt_pipeline_destroy(p);
    return o;
}

/* h's pipeline with the update ahead (b) against the same flushed after every step (a):
 * the same losses, parameters and optimizer states (moments, step) bit for bit; per
 * context with parameters exactly one submission and one fence wait fewer per step whose
 * update went ahead, the same transfers. */
static void host_ahead(net *n, uint32_t P, uint32_t m, const hostcase *h, const char *share,
                       const char *edges, const char *row)
{
    outcome a = run_host(n, P, m, h, share, edges, 1), b = run_host(n, P, m, h, share, edges, 0);
    if (a.ok && b.ok) {
        TH_CHECK(memcmp(a.loss, b.loss, sizeof a.loss) == 0, "%s, %s row: losses differ (%.9g "
                 "vs %.9g at the last step)", h->name, row, (double)a.loss[STEPS - 1],
                 (double)b.loss[STEPS - 1]);
        for (uint32_t i = 0; i < n->n_p; i++)
            TH_CHECK(memcmp(a.params[i], b.params[i], count_of(n->p[i]) * 4) == 0,
                     "%s, %s row: parameter %s differs", h->name, row, vkt_tensor_name(n->p[i]));
        for (uint32_t i = 0; i < b.stages; i++)
            TH_CHECK(a.moment_bytes[i] == b.moment_bytes[i] &&
                         (!a.moments[i] ||
                          memcmp(a.moments[i], b.moments[i], a.moment_bytes[i]) == 0),
                     "%s, %s row: context %u: the optimizer's state differs", h->name, row, i);
        char what[160];
        snprintf(what, sizeof what, "%s, %s row", h->name, row);
        expect_fewer(&a, &b, what);
        printf("  host route, %s (%u stages, m %u), %s row: the update ahead = flushed, %d "
               "losses (last %.6f), parameters and optimizer states; context 0: %.3g "
               "submissions and %.3g fence waits a step (%.3g and %.3g flushed)\n", h->name, P,
               m, row, STEPS, (double)b.loss[STEPS - 1], (double)b.submits[0] / STEPS,
               (double)b.waits[0] / STEPS, (double)a.submits[0] / STEPS,
               (double)a.waits[0] / STEPS);
    }
    outcome_free(&a);
    outcome_free(&b);
}

static void host_route(net *n)
{
    static const hostcase cases[] = {
        {"2 copies", 2, 0, 0, -1},
        {"clipping", 1, 0.05f, 0, -1},
        {"fp16, step 2 skipped", 1, 0, 1, 2},
        {"2 copies, clipping, fp16, step 3 skipped", 2, 0.05f, 1, 3},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        uint32_t m = cases[i].copies > 1 ? 2 : 3; /* BATCH rows into D x m micro-batches */
        host_ahead(n, 3, m, &cases[i], "0", "", "host");
        host_ahead(n, 3, m, &cases[i], "1", "device", "device");
    }
}

/* "NAME, P stages, m M, keep|recompute: ROW" into buf[n]; returns buf. */
static const char *label(char *buf, size_t n, const char *name, uint32_t P, uint32_t m,
                         vkt_recompute r, const char *row)
{
    snprintf(buf, n, "%s, %u stages, m %u, %s: %s", name, P, m,
             r == VKT_RECOMPUTE_ALWAYS ? "recompute" : "keep", row);
    return buf;
}

/* One net at (P, m, recompute): device row = host row on the shared device = host row on a
 * device per stage = import row on a device per stage. */
static void compare_rows(net *n, uint32_t P, uint32_t m, vkt_recompute r, const char *name)
{
    char what[128];
    outcome own = run_pipeline(n, P, m, r, "0", "");
    outcome host = run_pipeline(n, P, m, r, "1", "host");
    outcome dev = run_pipeline(n, P, m, r, "1", "device");
    outcome dflt = run_pipeline(n, P, m, r, "1", ""); /* unset: device, as it fits */
    outcome imp = run_pipeline(n, P, m, r, "0", "import");
    outcome own_f = run_pipeline_flush(n, P, m, r, "0", "", 1);
    outcome dev_f = run_pipeline_flush(n, P, m, r, "1", "device", 1);
#define WHAT(row) label(what, sizeof what, name, P, m, r, row)
    expect_ahead(n, &own_f, &own, ROW_HOST, WHAT("host row, the update ahead"));
    expect_ahead(n, &dev_f, &dev, ROW_DEVICE, WHAT("device row, the update ahead"));
    outcome_free(&own_f);
    outcome_free(&dev_f);
    expect_same(n, &own, &host, ROW_HOST, WHAT("host row, shared device"));
    expect_same(n, &own, &dev, ROW_DEVICE, WHAT("device row"));
    expect_same(n, &own, &dflt, ROW_DEVICE, WHAT("unset picks the device row"));
    expect_same(n, &own, &imp, ROW_IMPORT, WHAT("import row, a VkDevice each"));
#undef WHAT
    outcome_free(&imp);
    outcome_free(&own);
    outcome_free(&host);
    outcome_free(&dev);
    outcome_free(&dflt);
}

/* 3 stages x 2 copies in a trainer, clipping by the global norm (the host route). */
static void trainer_copies(net *n)
{
    float loss[3][STEPS];
    float *w[3] = {NULL, NULL, NULL};
    uint64_t count = count_of(n->p[0]);
    const char *rows[3] = {"host", "device", "import"};
    for (int i = 0; i < 3; i++) {
        set_env(i == 2 ? "0" : "1", rows[i]); /* import: a VkDevice per context */
        uint32_t dev[6] = {0};
        vkt_trainer_options to = {.batch = BATCH, .devices = dev, .device_count = 6,
                                  .stages = 3, .micro_batches = 2};
        to.optimizer.kind = VKT_OPTIMIZER_SGD;
        to.optimizer.lr = 0.1f;
        to.optimizer.clip_norm = 0.5f;
        vkt_trainer *t = NULL;
        if (!TH_CHECK(vkt_trainer_create(th_instance, n->g, n->loss, &to, &t) == VKT_OK,
                      "trainer 3x2 (%s edges): %s", rows[i], vkt_last_error()))
            continue;
        float x[BATCH * F];
        int32_t y[BATCH];
        vkt_feed f[2] = {{n->x, x}, {n->y, y}};
        for (uint32_t k = 0; k < STEPS; k++) {
            batch_data(k, x, y);
            TH_CHECK(vkt_trainer_step(t, f, 2, &loss[i][k]) == VKT_OK, "3x2 step %u: %s", k,
                     vkt_trainer_errmsg(t));
        }
        w[i] = calloc(count, sizeof(float));
        TH_OK(NULL, vkt_trainer_read(t, n->p[0], w[i], count));
        vkt_pipeline_stage_stats ss;
        TH_OK(NULL, vkt_trainer_stage_stats_get(t, 0, &ss));
        TH_CHECK(ss.sent_bytes > 0 && ss.sent_host_bytes == (i ? 0 : ss.sent_bytes),
                 "3x2 (%s edges): stage 0 sent %llu bytes, %llu through the host", rows[i],
                 (unsigned long long)ss.sent_bytes, (unsigned long long)ss.sent_host_bytes);
        vkt_trainer_destroy(t);
    }
    for (int i = 1; i < 3 && w[0]; i++)
        if (w[i]) {
            TH_CHECK(memcmp(loss[0], loss[i], sizeof loss[0]) == 0 &&
                         memcmp(w[0], w[i], count * 4) == 0,
                     "3x2 with clipping: the %s row's losses or w1 differ from the host row's",
                     rows[i]);
            printf("  3 stages x 2 copies, clipped: %s row = host row over %d steps (last "
                   "loss %.6f)\n", rows[i], STEPS, (double)loss[i][STEPS - 1]);
        }
    for (int i = 0; i < 3; i++)
        free(w[i]);
}

static void refusals(net *n)
{
    uint32_t dev[3] = {0, 0, 0};
    vkt_pipeline_options po = {.batch = BATCH, .micro_batches = 2, .stages = 3, .devices = dev};
    vkt_pipeline *p = NULL;
    set_env("0", "device");
    vkt_status st = vkt_pipeline_create(th_instance, n->g, n->loss, &po, &p);
    TH_CHECK(st == VKT_ERROR_INVALID_ARGUMENT && !p && strstr(vkt_last_error(), "VKT_PIPE_EDGES") &&
                 strstr(vkt_last_error(), "share one VkDevice"),
             "device edges without a shared VkDevice: %s, '%s'", vkt_status_name(st),
             vkt_last_error());
    printf("  VKT_SHARE_DEVICE=0 VKT_PIPE_EDGES=device: %s\n", vkt_last_error());
    set_env("1", "import"); /* one VkDevice: the device row's case */
    st = vkt_pipeline_create(th_instance, n->g, n->loss, &po, &p);
    TH_CHECK(st == VKT_ERROR_INVALID_ARGUMENT && !p &&
                 strstr(vkt_last_error(), "VKT_PIPE_EDGES=import") &&
                 strstr(vkt_last_error(), "share one VkDevice"),
             "import edges on a shared VkDevice: %s, '%s'", vkt_status_name(st),
             vkt_last_error());
    printf("  VKT_SHARE_DEVICE=1 VKT_PIPE_EDGES=import: %s\n", vkt_last_error());
    /* a host pointer a device does not import (VKT_FAULT_INJECT: the 4th import fails,
     * after three made): creation fails with the import's message, the imports made are
     * freed (the validation layer and the sanitizers run this too) */
    plat_setenv("VKT_FAULT_INJECT", "vkGetMemoryHostPointerPropertiesEXT:3");
    set_env("0", "import");
    st = vkt_pipeline_create(th_instance, n->g, n->loss, &po, &p);
    TH_CHECK(st == VKT_ERROR_VULKAN && !p && strstr(vkt_last_error(), "import edges") &&
                 strstr(vkt_last_error(), "VK_ERROR_INVALID_EXTERNAL_HANDLE"),
             "import edges, a pointer not imported: %s, '%s'", vkt_status_name(st),
             vkt_last_error());
    printf("  VKT_PIPE_EDGES=import, an import failing: %s\n", vkt_last_error());
    plat_setenv("VKT_FAULT_INJECT", NULL);
    set_env("1", "sideways");
    st = vkt_pipeline_create(th_instance, n->g, n->loss, &po, &p);
    TH_CHECK(st == VKT_ERROR_INVALID_ARGUMENT && !p && strstr(vkt_last_error(), "sideways") &&
                 strstr(vkt_last_error(), "import"),
             "VKT_PIPE_EDGES=sideways: %s, '%s'", vkt_status_name(st), vkt_last_error());
    set_env("yes", "");
    st = vkt_pipeline_create(th_instance, n->g, n->loss, &po, &p);
    TH_CHECK(st == VKT_ERROR_INVALID_ARGUMENT && !p && strstr(vkt_last_error(), "VKT_SHARE_DEVICE='yes'"),
             "VKT_SHARE_DEVICE=yes: %s, '%s'", vkt_status_name(st), vkt_last_error());
    /* a label out of range: refused before the step on every row (the device row checks
     * the fed rows when it writes them for the step's copies), the same message; a good
     * step after it trains */
    const char *rows[3] = {"host", "device", "import"};
    for (int i = 0; i < 3; i++) {
        set_env(i == 2 ? "0" : "1", rows[i]);
        p = NULL;
        if (!TH_CHECK(vkt_pipeline_create(th_instance, n->g, n->loss, &po, &p) == VKT_OK,
                      "%s row: %s", rows[i], vkt_last_error()))
            continue;
        float x[BATCH * F];
        int32_t y[BATCH];
        vkt_feed f[2] = {{n->x, x}, {n->y, y}};
        batch_data(0, x, y);
        y[BATCH - 1] = C; /* one past the classes */
        st = vkt_pipeline_step(p, f, 2, NULL);
        TH_CHECK(st == VKT_ERROR_INVALID_ARGUMENT && strstr(vkt_pipeline_errmsg(p), "label 5 at "
                 "position 5") && strstr(vkt_pipeline_errmsg(p), "outside [0, 5)"),
                 "%s row, a bad label: %s, '%s'", rows[i], vkt_status_name(st),
                 vkt_pipeline_errmsg(p));
        printf("  %s row, label %d: %s\n", rows[i], C, vkt_pipeline_errmsg(p));
        batch_data(0, x, y);
        float loss = 0;
        TH_CHECK(vkt_pipeline_step(p, f, 2, &loss) == VKT_OK && loss > 0, "%s row: the step "
                 "after a refused one: %s", rows[i], vkt_pipeline_errmsg(p));
        vkt_pipeline_destroy(p);
    }
    /* check mode runs a step's parts on their own: the host row, asked or not */
    plat_setenv("VKT_CHECK", "1");
    set_env("1", "device");
    st = vkt_pipeline_create(th_instance, n->g, n->loss, &po, &p);
    TH_CHECK(st == VKT_ERROR_INVALID_ARGUMENT && !p && strstr(vkt_last_error(), "check mode"),
             "check mode with VKT_PIPE_EDGES=device: %s, '%s'", vkt_status_name(st),
             vkt_last_error());
    set_env("0", "import");
    st = vkt_pipeline_create(th_instance, n->g, n->loss, &po, &p);
    TH_CHECK(st == VKT_ERROR_INVALID_ARGUMENT && !p && strstr(vkt_last_error(), "check mode") &&
                 strstr(vkt_last_error(), "VKT_PIPE_EDGES=import"),
             "check mode with VKT_PIPE_EDGES=import: %s, '%s'", vkt_status_name(st),
             vkt_last_error());
    set_env("1", "");
    st = vkt_pipeline_create(th_instance, n->g, n->loss, &po, &p);
    if (TH_CHECK(st == VKT_OK, "check mode, shared device: %s", vkt_last_error())) {
        float x[BATCH * F];
        int32_t y[BATCH];
        vkt_feed f[2] = {{n->x, x}, {n->y, y}};
        batch_data(0, x, y);
        vkt_pipeline_stage_stats ss = {0};
        TH_OK(NULL, vkt_pipeline_step(p, f, 2, NULL));
        TH_OK(NULL, vkt_pipeline_stage_stats_get(p, 0, &ss));
        TH_CHECK(ss.sent_bytes > 0 && ss.sent_host_bytes == ss.sent_bytes,
                 "check mode: %llu of %llu bytes through the host",
                 (unsigned long long)ss.sent_host_bytes, (unsigned long long)ss.sent_bytes);
    }
    vkt_pipeline_destroy(p);
    plat_setenv("VKT_CHECK", NULL);
}

int main(void)
{
    th_init("test_pipeline_edges");
    char share[64] = "", edges[64] = ""; /* the caller's, put back at the end */
    const char *v = plat_getenv("VKT_SHARE_DEVICE");
    snprintf(share, sizeof share, "%s", v ? v : "");
    v = plat_getenv("VKT_PIPE_EDGES");
    snprintf(edges, sizeof edges, "%s", v ? v : "");
    net skip = make_skip();
    compare_rows(&skip, 3, 1, VKT_RECOMPUTE_NEVER, "skip MLP");
    compare_rows(&skip, 3, 3, VKT_RECOMPUTE_NEVER, "skip MLP");
    compare_rows(&skip, 3, 3, VKT_RECOMPUTE_ALWAYS, "skip MLP");
    refusals(&skip);
    net skip3 = make_skip3();
    compare_rows(&skip3, 4, 2, VKT_RECOMPUTE_NEVER, "h1 read by 3 stages");
    compare_rows(&skip3, 4, 4, VKT_RECOMPUTE_ALWAYS, "h1 read by 3 stages");
    vkt_graph_destroy(skip3.g);
    net bn = make_dropout_bn();
    compare_rows(&bn, 2, 4, VKT_RECOMPUTE_NEVER, "batch norm + dropout");
    compare_rows(&bn, 2, 4, VKT_RECOMPUTE_ALWAYS, "batch norm + dropout");
    trainer_copies(&skip);
    host_route(&skip);
    vkt_graph_destroy(skip.g);
    vkt_graph_destroy(bn.g);
    set_env(share[0] ? share : NULL, edges[0] ? edges : NULL);
    return th_finish();
}
