/* pipeline.c - model parallelism: a graph cut into stages (graph/stage.h), D data-parallel
 * copies of the P-stage pipeline (pipe.h), one context, model, optimizer and thread per
 * stage of each copy, micro-batches flowing through them. vkt_pipeline_* is this engine
 * with one copy; vkt_trainer with stages drives it too (trainer_pipe.c).
 *
 * Schedule: one-forward-one-backward (1F1B). Stage s (of P) runs
 *     F(0) .. F(w-1), then F(k) B(k-w) for k = w..m-1, then B(m-w) .. B(m-1),
 * w = min(P-1-s, m). Its bubble is GPipe's, (P-1)/(m+P-1) of the step with equal
 * stages, but a stage never holds more than P-s micro-batches in flight instead of m.
 * Here a stage's forward is recomputed by its backward (F only sends values), so the
 * in-flight state is the host copies of its received values: P-s micro-batches of them.
 *
 * Crossing values (edges, per copy) live in host memory: act[k] the value of micro-batch
 * k sent forward; grad[c][k] the gradient consumer stage c sends back (one slot per
 * consumer, summed by the sender in stage order, so the result does not depend on
 * timing). One monitor guards the flags of every copy; a failing stage sets `failed` and
 * wakes everybody, so one failure stops all P x D threads.
 *
 * The last stage's F(k) is its whole step (forward, loss, backward). Gradients of each
 * micro-batch are read to the host and summed in double with weight rows_k / batch;
 * after every context passed the barrier with no failure, each writes the sum over the
 * copies of its stage and runs its optimizer (recorded once into `apply`). */
#include "parallel/pipe.h"
#include "parallel/trainer.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct pedge {
    uint32_t node;        /* the full graph's id of the value */
    uint32_t from;        /* the stage that computes it */
    uint32_t n_to;        /* consumer stages */
    uint32_t to[GRAPH_MAX_STAGES];
    uint64_t elems;       /* per micro-batch */
    float *act;           /* [m][elems] */
    float *grad;          /* [n_to][m][elems] */
    uint8_t *ready;       /* [m]: act[k] written */
    uint32_t *pending;    /* [m]: consumers that have not sent grad[.][k] yet */
} pedge;

typedef struct pstage {
    struct vkt_pipeline *p;
    uint32_t index, copy, device;
    uint32_t row0;         /* the copy's first row of the global batch */
    graph_stage *gs;
    vkt_context *ctx;
    vkt_model *model;
    vkt_optimizer *opt;
    vkt_stream *apply;
    uint64_t n_params, n_train;
    double *gacc;          /* [n_train] the weighted sum over micro-batches */
    float *gtmp;           /* [n_params] */
    float *gsum;           /* scratch: a sent value's gradient summed over consumers */
    uint32_t *recv_edge, *recv_slot; /* per received value: its edge and consumer slot */
    uint32_t *send_edge;   /* per sent value: its edge */
    uint64_t *feed_row;    /* per fed input: elements per row */
    const void **feed_data; /* per fed input: the step's data */
    double loss;           /* last stage: the weighted loss of the step */
    double busy;
    uint64_t sent;
    vkt_status status;
    char errmsg[VKT_ERRMSG_SIZE];
    plat_thread *thread;
} pstage;

struct vkt_pipeline {
    vkt_instance *inst;
    vkt_graph *graph;
    pipe_options opt;
    vkt_optimizer_options optim;
    uint32_t P, D, m, mb;  /* stages, copies, micro-batches per copy, rows per micro-batch */
    uint32_t n_ctx;        /* P x D; context d * P + s is copy d's stage s */
    graph_split split;
    pstage *st;            /* [n_ctx] */
    pedge *edge;           /* every copy's edges, copy after copy */
    uint32_t n_edge;
    plat_monitor *mon;
    int failed;            /* under mon */
    int go;                /* under mon: the step's threads may start working */
    uint32_t expected, arrived; /* under mon: the step's end (arrive) */
    int votes;             /*   and whether any context voted to stop there */
    uint32_t first_failed; /* under mon: the context that failed first (n_ctx: none) */
    uint64_t steps, step;  /* public steps taken; the optimizers' step of this one */
    double step_seconds;
    char errmsg[VKT_ERRMSG_SIZE];
};

static pstage *ctx_of(vkt_pipeline *p, uint32_t copy, uint32_t stage)
{
    return &p->st[copy * p->P + stage];
}

static vkt_status pfail(vkt_pipeline *p, vkt_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static vkt_status pfail(vkt_pipeline *p, vkt_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    err_failv(p ? p->errmsg : NULL, st, fmt, ap);
    va_end(ap);
    return st;
}

/* "stage 1 (device 0)", or with copies "copy 1, stage 0 (device 2)". */
static void stage_name(const pstage *s, char *buf, size_t size)
{
    if (s->p->D > 1)
        snprintf(buf, size, "copy %u, stage %u (device %u)", s->copy, s->index, s->device);
    else
        snprintf(buf, size, "stage %u (device %u)", s->index, s->device);
}

/* A stage's failure, kept on the stage; the others are woken to stop. */
static vkt_status sfail(pstage *s, vkt_status st, const char *what, const char *msg)
{
    if (s->status == VKT_OK) {
        char name[64];
        stage_name(s, name, sizeof name);
        snprintf(s->errmsg, sizeof s->errmsg, "%s: %s: %s", name, what, msg);
        s->status = st;
    }
    plat_monitor_lock(s->p->mon);
    if (!s->p->failed)
        s->p->first_failed = (uint32_t)(s - s->p->st);
    s->p->failed = 1;
    plat_monitor_broadcast(s->p->mon);
    plat_monitor_unlock(s->p->mon);
    return st;
}

static vkt_status mfail(pstage *s, vkt_status st, const char *what)
{
    return sfail(s, st, what, vkt_model_errmsg(s->model));
}

/* ---- creation ---- */

/* One copy's edges, appended to p->edge; its stages' send and receive lists. */
static vkt_status make_copy_edges(vkt_pipeline *p, uint32_t c)
{
    uint32_t base = p->n_edge;
    for (uint32_t k = 0; k < p->P; k++) {
        pstage *s = ctx_of(p, c, k);
        graph_stage *gs = s->gs;
        s->send_edge = calloc(gs->n_send + 1, sizeof *s->send_edge);
        s->recv_edge = calloc(gs->n_recv + 1, sizeof *s->recv_edge);
        s->recv_slot = calloc(gs->n_recv + 1, sizeof *s->recv_slot);
        if (!s->send_edge || !s->recv_edge || !s->recv_slot)
            return pfail(p, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
        for (uint32_t j = 0; j < gs->n_send; j++) {
            pedge *e = &p->edge[p->n_edge];
            graph_node_info v;
            graph_node_info_at(p->graph, gs->send[j], &v);
            e->node = v.id;
            e->from = k;
            e->elems = v.count / p->split.batch * p->mb;
            s->send_edge[j] = p->n_edge++;
        }
    }
    for (uint32_t k = 0; k < p->P; k++) { /* consumers, in stage order */
        pstage *s = ctx_of(p, c, k);
        for (uint32_t j = 0; j < s->gs->n_recv; j++)
            for (uint32_t e = base; e < p->n_edge; e++)
                if (p->edge[e].node == s->gs->recv[j]) {
                    s->recv_edge[j] = e;
                    s->recv_slot[j] = p->edge[e].n_to;
                    p->edge[e].to[p->edge[e].n_to++] = k;
                }
    }
    return VKT_OK;
}

static vkt_status make_edges(vkt_pipeline *p)
{
    uint32_t cap = 0;
    for (uint32_t k = 0; k < p->P; k++)
        cap += p->split.stage[k].n_send;
    p->edge = calloc(cap ? (uint64_t)cap * p->D : 1, sizeof *p->edge);
    if (!p->edge)
        return pfail(p, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    for (uint32_t c = 0; c < p->D; c++) {
        vkt_status st = make_copy_edges(p, c);
        if (st != VKT_OK)
            return st;
    }
    for (uint32_t e = 0; e < p->n_edge; e++) {
        pedge *x = &p->edge[e];
        x->act = malloc(p->m * x->elems * sizeof *x->act);
        x->grad = malloc((uint64_t)x->n_to * p->m * x->elems * sizeof *x->grad);
        x->ready = calloc(p->m, 1);
        x->pending = calloc(p->m, sizeof *x->pending);
        if (!x->act || !x->grad || !x->ready || !x->pending)
            return pfail(p, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    }
    return VKT_OK;
}

static vkt_status record_apply(vkt_pipeline *p, pstage *s)
{
    vkt_view pv, gv;
    uint64_t n = 0;
    vkt_status st = graph_model_flat(s->model, &pv, &gv, &n);
    s->n_train = n;
    s->n_params = vkt_model_param_count(s->model);
    /* a stage without trainable parameters (the loss alone, say) has nothing to update */
    if (st == VKT_OK && n)
        st = vkt_optimizer_create(s->ctx, &p->optim, n, &s->opt);
    if (st == VKT_OK && n)
        st = vkt_stream_create(s->ctx, NULL, &s->apply);
    if (st == VKT_OK && n)
        st = vkt_optimizer_record(s->opt, s->apply, pv, gv);
    if (st != VKT_OK)
        return pfail(p, st, "stage %u: optimizer: %s", s->index, vkt_context_errmsg(s->ctx));
    uint64_t most_elems = 0;
    for (uint32_t j = 0; j < s->gs->n_send; j++)
        if (p->edge[s->send_edge[j]].elems > most_elems)
            most_elems = p->edge[s->send_edge[j]].elems;
    s->gacc = calloc(n ? n : 1, sizeof *s->gacc);
    s->gtmp = calloc(s->n_params ? s->n_params : 1, sizeof *s->gtmp);
    s->gsum = malloc((most_elems ? most_elems : 1) * sizeof *s->gsum);
    s->feed_row = calloc(s->gs->n_feed + 1, sizeof *s->feed_row);
    s->feed_data = calloc(s->gs->n_feed + 1, sizeof *s->feed_data);
    if (!s->gacc || !s->gtmp || !s->gsum || !s->feed_row || !s->feed_data)
        return pfail(p, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    for (uint32_t j = 0; j < s->gs->n_feed; j++) {
        graph_node_info x;
        graph_node_info_at(p->graph, s->gs->feed[j], &x);
        s->feed_row[j] = x.count / p->split.batch;
    }
    return VKT_OK;
}

static vkt_status create_stage(vkt_pipeline *p, pstage *s)
{
    char name[64];
    stage_name(s, name, sizeof name);
    vkt_context_options co = {.device_index = s->device, .kernels = p->opt.kernels};
    vkt_status st = vkt_context_create(p->inst, &co, &s->ctx);
    if (st != VKT_OK)
        return pfail(p, st, "%s: %s", name, vkt_last_error());
    graph_stage *gs = s->gs;
    const vkt_tensor **gin = malloc((gs->n_recv + 1) * sizeof *gin);
    if (!gin)
        return pfail(p, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    for (uint32_t j = 0; j < gs->n_recv; j++)
        gin[j] = gs->map[gs->recv[j]];
    vkt_model_options mo = {.batch = p->mb, .check = p->opt.check};
    st = graph_model_create(s->ctx, gs->g, gs->loss, &mo, gin, gs->n_recv, &s->model);
    free(gin);
    if (st != VKT_OK)
        return pfail(p, st, "%s: %s", name, vkt_last_error());
    return record_apply(p, s);
}

/* Sizes and counts, before the split (so they are named first). */
static vkt_status check_options(vkt_pipeline *p)
{
    const pipe_options *o = &p->opt;
    p->P = o->stages;
    p->D = o->copies ? o->copies : 1;
    p->m = o->micro_batches ? o->micro_batches : 1;
    if (p->P == 0 || p->P > VKT_MAX_STAGES)
        return pfail(p, VKT_ERROR_INVALID_ARGUMENT, "%s: %u stages; 1 to %d are supported",
                     o->fn, p->P, VKT_MAX_STAGES);
    if (o->batch == 0)
        return pfail(p, VKT_ERROR_INVALID_ARGUMENT, "%s: the batch is 0", o->fn);
    if (o->batch % (p->D * p->m) != 0) {
        if (p->D > 1)
            return pfail(p, VKT_ERROR_SHAPE, "%s: a batch of %u rows does not split into %u "
                         "copies x %u equal micro-batches", o->fn, o->batch, p->D, p->m);
        return pfail(p, VKT_ERROR_SHAPE, "%s: a batch of %u rows does not split into %u "
                     "equal micro-batches", o->fn, o->batch, p->m);
    }
    p->mb = o->batch / (p->D * p->m);
    p->n_ctx = p->P * p->D;
    if (!o->devices || o->n_devices == 0)
        return pfail(p, VKT_ERROR_INVALID_ARGUMENT, "%s: no device list", o->fn);
    if (p->optim.clip_norm > 0 && p->P > 1)
        return pfail(p, VKT_ERROR_INVALID_ARGUMENT, "%s: gradient clipping (a global norm "
                     "over every stage) is not supported in a pipeline yet", o->fn);
    return VKT_OK;
}

/* Context i: copy i / P, stage i mod P, on entry i of the device list (cycled). */
static vkt_status place_contexts(vkt_pipeline *p, const uint32_t *devices)
{
    uint32_t n = vkt_instance_device_count(p->inst);
    for (uint32_t i = 0; i < p->n_ctx; i++) {
        pstage *s = &p->st[i];
        s->p = p;
        s->index = i % p->P;
        s->copy = i / p->P;
        s->row0 = s->copy * p->m * p->mb;
        s->device = devices[i % p->opt.n_devices];
        s->gs = &p->split.stage[s->index];
        if (s->device >= n) {
            char name[64];
            stage_name(s, name, sizeof name);
            return pfail(p, VKT_ERROR_NO_DEVICE, "%s: device %u does not exist (%u device(s) "
                         "present)", name, s->device, n);
        }
    }
    return VKT_OK;
}

vkt_status pipe_create(vkt_instance *inst, vkt_graph *g, vkt_tensor *loss,
                       const pipe_options *o, vkt_pipeline **out)
{
    *out = NULL;
    vkt_pipeline *p = calloc(1, sizeof *p);
    if (!p)
        return err_fail(NULL, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    p->inst = inst;
    p->graph = g;
    p->opt = *o;
    p->optim = o->optimizer;
    vkt_status st = check_options(p);
    if (st == VKT_OK) {
        char msg[VKT_ERRMSG_SIZE];
        st = graph_split_stages(g, loss, p->P, &p->split, msg, sizeof msg);
        if (st != VKT_OK)
            pfail(p, st, "%s: %s", o->fn, msg);
    }
    if (st == VKT_OK) {
        p->st = calloc(p->n_ctx, sizeof *p->st);
        p->mon = plat_monitor_create();
        if (!p->st || !p->mon)
            st = pfail(p, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    }
    if (st == VKT_OK)
        st = place_contexts(p, o->devices);
    if (st == VKT_OK)
        st = make_edges(p);
    for (uint32_t i = 0; i < p->n_ctx && st == VKT_OK; i++)
        st = create_stage(p, &p->st[i]);
    if (st != VKT_OK) {
        err_fail(NULL, st, "%s", p->errmsg);
        vkt_pipeline_destroy(p);
        return st;
    }
    p->opt.devices = NULL; /* the caller's list: read at creation only */
    *out = p;
    return VKT_OK;
}

/* The public pipeline: one copy; stage s on options.devices[s], else on entry s mod the
 * length of VKT_DEVICES (else device 0). */
vkt_status vkt_pipeline_create(vkt_instance *inst, vkt_graph *g, vkt_tensor *loss,
                               const vkt_pipeline_options *options, vkt_pipeline **out)
{
    static const char fn[] = "vkt_pipeline_create";
    if (!out)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    if (!inst || !g || !loss || !options)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "%s: instance, graph, loss or "
                        "options is NULL", fn);
    if (options->batch == 0)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "%s: options.batch is 0", fn);
    uint32_t P = options->stages ? options->stages : graph_placed_stages(g);
    uint32_t list[VKT_MAX_STAGES] = {0}, count = 1;
    if (options->devices) {
        for (uint32_t k = 0; k < P && k < VKT_MAX_STAGES; k++)
            list[k] = options->devices[k];
        count = P < VKT_MAX_STAGES ? P : VKT_MAX_STAGES;
    } else if (vkt_instance_select_devices(inst, list, VKT_MAX_STAGES, &count) != VKT_OK) {
        return err_fail(NULL, VKT_ERROR_NO_DEVICE, "%s", vkt_instance_errmsg(inst));
    }
    pipe_options po = {.batch = options->batch, .micro_batches = options->micro_batches,
                       .stages = P, .copies = 1, .devices = list, .n_devices = count,
                       .optimizer = options->optimizer, .sequential = options->sequential,
                       .fn = fn};
    return pipe_create(inst, g, loss, &po, out);
}

void vkt_pipeline_destroy(vkt_pipeline *p)
{
    if (!p)
        return;
    for (uint32_t k = 0; p->st && k < p->n_ctx; k++) {
        pstage *s = &p->st[k];
        vkt_stream_destroy(s->apply);
        vkt_optimizer_destroy(s->opt);
        vkt_model_destroy(s->model);
        vkt_context_destroy(s->ctx);
        free(s->gacc);
        free(s->gtmp);
        free(s->gsum);
        free(s->recv_edge);
        free(s->recv_slot);
        free(s->send_edge);
        free(s->feed_row);
        free(s->feed_data);
    }
    for (uint32_t e = 0; p->edge && e < p->n_edge; e++) {
        free(p->edge[e].act);
        free(p->edge[e].grad);
        free(p->edge[e].ready);
        free(p->edge[e].pending);
    }
    free(p->edge);
    free(p->st);
    graph_split_free(&p->split);
    if (p->mon)
        plat_monitor_destroy(p->mon);
    free(p);
}

const char *vkt_pipeline_errmsg(const vkt_pipeline *p) { return p ? p->errmsg : "pipeline is NULL"; }
uint32_t vkt_pipeline_stages(const vkt_pipeline *p) { return p ? p->P : 0; }
double vkt_pipeline_step_seconds(const vkt_pipeline *p) { return p ? p->step_seconds : 0; }
uint32_t pipe_copies(const vkt_pipeline *p) { return p->D; }
const graph_split *pipe_split(const vkt_pipeline *p) { return &p->split; }
vkt_model *pipe_model(vkt_pipeline *p, uint32_t c, uint32_t s) { return ctx_of(p, c, s)->model; }
vkt_optimizer *pipe_optimizer(vkt_pipeline *p, uint32_t c, uint32_t s) { return ctx_of(p, c, s)->opt; }
vkt_context *pipe_context(vkt_pipeline *p, uint32_t c, uint32_t s) { return ctx_of(p, c, s)->ctx; }

/* ---- one step ---- */

/* Waits until every received value of micro-batch k is there (or a stage failed:
 * returns 0). */
static int wait_ready(pstage *s, uint32_t k)
{
    vkt_pipeline *p = s->p;
    const graph_stage *gs = s->gs;
    plat_monitor_lock(p->mon);
    for (;;) {
        int all = 1;
        for (uint32_t j = 0; j < gs->n_recv && all; j++)
            all = p->edge[s->recv_edge[j]].ready[k];
        if (all || p->failed)
            break;
        plat_monitor_wait(p->mon);
    }
    int ok = !p->failed;
    plat_monitor_unlock(p->mon);
    return ok;
}

static int wait_grads(pstage *s, uint32_t k)
{
    vkt_pipeline *p = s->p;
    const graph_stage *gs = s->gs;
    plat_monitor_lock(p->mon);
    for (;;) {
        int all = 1;
        for (uint32_t j = 0; j < gs->n_send && all; j++)
            all = p->edge[s->send_edge[j]].pending[k] == 0;
        if (all || p->failed)
            break;
        plat_monitor_wait(p->mon);
    }
    int ok = !p->failed;
    plat_monitor_unlock(p->mon);
    return ok;
}

/* The stage's inputs for micro-batch k: fed rows and received values. */
static vkt_status set_inputs(pstage *s, uint32_t k)
{
    vkt_pipeline *p = s->p;
    const graph_stage *gs = s->gs;
    uint64_t row = s->row0 + (uint64_t)k * p->mb; /* the micro-batch's first global row */
    for (uint32_t j = 0; j < gs->n_feed; j++) {
        uint64_t n = s->feed_row[j] * p->mb;
        const char *data = (const char *)s->feed_data[j] + row * s->feed_row[j] * 4; /* 4-byte elements */
        if (vkt_model_set_input(s->model, gs->map[gs->feed[j]], data, n) != VKT_OK)
            return mfail(s, VKT_ERROR_INVALID_ARGUMENT, "input");
    }
    for (uint32_t j = 0; j < gs->n_recv; j++) {
        const pedge *e = &p->edge[s->recv_edge[j]];
        vkt_status st = vkt_model_set_input(s->model, gs->map[gs->recv[j]],
                                            e->act + k * e->elems, e->elems);
        if (st != VKT_OK)
            return mfail(s, st, "received value");
    }
    return VKT_OK;
}

/* After a backward: gradients of received values back to their senders, and the
 * parameters' gradients into the weighted sum. */
static vkt_status after_backward(pstage *s, uint32_t k)
{
    vkt_pipeline *p = s->p;
    const graph_stage *gs = s->gs;
    for (uint32_t j = 0; j < gs->n_recv; j++) {
        pedge *e = &p->edge[s->recv_edge[j]];
        float *dst = e->grad + ((uint64_t)s->recv_slot[j] * p->m + k) * e->elems;
        vkt_status st = graph_model_read_input_grad(s->model, gs->map[gs->recv[j]], dst,
                                                    e->elems);
        if (st != VKT_OK)
            return mfail(s, st, "gradient of a received value");
        s->sent += e->elems * 4;
        plat_monitor_lock(p->mon);
        e->pending[k]--;
        plat_monitor_broadcast(p->mon);
        plat_monitor_unlock(p->mon);
    }
    vkt_status st = vkt_model_read_grads(s->model, s->gtmp, s->n_params);
    if (st != VKT_OK)
        return mfail(s, st, "gradients");
    double w = 1.0 / ((double)p->m * p->D); /* rows_k / batch: equal micro-batches */
    for (uint64_t i = 0; i < s->n_train; i++)
        s->gacc[i] += w * s->gtmp[i];
    return VKT_OK;
}

static vkt_status forward(pstage *s, uint32_t k)
{
    vkt_pipeline *p = s->p;
    const graph_stage *gs = s->gs;
    if (!wait_ready(s, k))
        return VKT_ERROR_STATE; /* another stage failed: its message is the one */
    vkt_status st = set_inputs(s, k);
    if (st != VKT_OK)
        return st;
    double t0 = plat_now();
    int last = s->index == p->P - 1;
    st = last ? vkt_model_forward_backward(s->model) : vkt_model_forward(s->model);
    s->busy += plat_now() - t0;
    if (st != VKT_OK)
        return mfail(s, st, last ? "forward and backward" : "forward");
    if (last) {
        float loss = 0;
        st = vkt_model_loss(s->model, &loss);
        if (st != VKT_OK)
            return mfail(s, st, "loss");
        s->loss += (double)loss / ((double)p->m * p->D);
        return after_backward(s, k);
    }
    for (uint32_t j = 0; j < gs->n_send; j++) {
        pedge *e = &p->edge[s->send_edge[j]];
        st = vkt_model_read(s->model, gs->map[gs->send[j]], e->act + k * e->elems, e->elems);
        if (st != VKT_OK)
            return mfail(s, st, "sending a value");
        s->sent += e->elems * 4;
        plat_monitor_lock(p->mon);
        e->ready[k] = 1;
        plat_monitor_broadcast(p->mon);
        plat_monitor_unlock(p->mon);
    }
    return VKT_OK;
}

static vkt_status backward(pstage *s, uint32_t k)
{
    vkt_pipeline *p = s->p;
    const graph_stage *gs = s->gs;
    if (s->index == p->P - 1)
        return VKT_OK; /* its forward did it */
    if (!wait_grads(s, k))
        return VKT_ERROR_STATE;
    vkt_status st = set_inputs(s, k);
    for (uint32_t j = 0; j < gs->n_send && st == VKT_OK; j++) {
        pedge *e = &p->edge[s->send_edge[j]];
        const float *g = e->grad + (uint64_t)k * e->elems; /* consumer 0's */
        if (e->n_to > 1) { /* consumers' contributions in stage order */
            for (uint64_t i = 0; i < e->elems; i++) {
                float sum = 0;
                for (uint32_t c = 0; c < e->n_to; c++)
                    sum += e->grad[((uint64_t)c * p->m + k) * e->elems + i];
                s->gsum[i] = sum;
            }
            g = s->gsum;
        }
        st = vkt_model_set_input(s->model, gs->send_grad[j], g, e->elems);
        if (st != VKT_OK)
            return mfail(s, st, "gradient of a sent value");
    }
    if (st != VKT_OK)
        return st;
    double t0 = plat_now();
    st = vkt_model_forward_backward(s->model);
    s->busy += plat_now() - t0;
    if (st != VKT_OK)
        return mfail(s, st, "forward and backward");
    return after_backward(s, k);
}

/* The gradient summed over the copies of the stage (in copy order, so every copy
 * writes the same bits) into the stage's model, then its optimizer. */
static vkt_status update(pstage *s)
{
    vkt_pipeline *p = s->p;
    if (!s->opt)
        return VKT_OK; /* no trainable parameters */
    for (uint64_t i = 0; i < s->n_train; i++) {
        double g = 0;
        for (uint32_t c = 0; c < p->D; c++)
            g += ctx_of(p, c, s->index)->gacc[i];
        s->gtmp[i] = (float)g;
    }
    for (uint64_t i = s->n_train; i < s->n_params; i++)
        s->gtmp[i] = 0.0f;
    double t0 = plat_now();
    vkt_status st = vkt_model_write_grads(s->model, s->gtmp, s->n_params);
    if (st != VKT_OK)
        return mfail(s, st, "writing gradients");
    st = vkt_optimizer_set_step(s->opt, p->step);
    if (st == VKT_OK)
        st = vkt_stream_run(s->apply);
    s->busy += plat_now() - t0;
    if (st != VKT_OK)
        return sfail(s, st, "optimizer", vkt_context_errmsg(s->ctx));
    return VKT_OK;
}

/* The end of a step for the contexts whose threads run (p->expected of them): each
 * arrives with its vote and waits for all; returns 1 if any voted to stop. (Not a
 * plat_barrier: when some threads could not start, fewer arrive.) */
static int arrive(vkt_pipeline *p, int vote)
{
    plat_monitor_lock(p->mon);
    p->votes |= vote != 0;
    p->arrived++;
    plat_monitor_broadcast(p->mon);
    while (p->arrived < p->expected)
        plat_monitor_wait(p->mon);
    int stop = p->votes;
    plat_monitor_unlock(p->mon);
    return stop;
}

/* 1F1B order for one stage of one copy (the header comment). */
static void stage_job(void *arg)
{
    pstage *s = arg;
    vkt_pipeline *p = s->p;
    uint32_t m = p->m, P = p->P;
    plat_monitor_lock(p->mon); /* until every thread of the step has started (or not) */
    while (!p->go)
        plat_monitor_wait(p->mon);
    plat_monitor_unlock(p->mon);
    uint32_t w = P - 1 - s->index < m ? P - 1 - s->index : m;
    vkt_status st = VKT_OK;
    for (uint32_t k = 0; k < w && st == VKT_OK; k++)
        st = forward(s, k);
    for (uint32_t k = w; k < m && st == VKT_OK; k++) {
        st = forward(s, k);
        if (st == VKT_OK)
            st = backward(s, k - w);
    }
    for (uint32_t k = m - w; k < m && st == VKT_OK; k++)
        st = backward(s, k);
    if (st != VKT_OK && s->status == VKT_OK)
        s->status = st; /* stopped by another stage's failure */
    /* Every context updates, or none does (and after arrive every gacc is final). */
    if (arrive(p, s->status != VKT_OK) == 0)
        update(s);
}

static vkt_status check_feeds(vkt_pipeline *p, const vkt_feed *feeds, uint32_t n)
{
    if (n && !feeds)
        return pfail(p, VKT_ERROR_INVALID_ARGUMENT, "%s: feeds is NULL", p->opt.fn);
    for (uint32_t i = 0; i < p->n_ctx; i++) {
        pstage *s = &p->st[i];
        for (uint32_t j = 0; j < s->gs->n_feed; j++) {
            const vkt_tensor *t = graph_node_at(p->graph, s->gs->feed[j]);
            s->feed_data[j] = NULL;
            for (uint32_t f = 0; f < n; f++)
                if (feeds[f].tensor == t)
                    s->feed_data[j] = feeds[f].data;
            if (!s->feed_data[j])
                return pfail(p, VKT_ERROR_INVALID_ARGUMENT, "input '%s' (read on stage %u) is "
                             "not fed: every step needs data for it", vkt_tensor_name(t),
                             s->index);
        }
    }
    return VKT_OK;
}

static void reset_step(vkt_pipeline *p)
{
    for (uint32_t e = 0; e < p->n_edge; e++) {
        memset(p->edge[e].ready, 0, p->m);
        for (uint32_t k = 0; k < p->m; k++)
            p->edge[e].pending[k] = p->edge[e].n_to;
    }
    p->failed = 0;
    p->first_failed = p->n_ctx;
    p->go = 0;
    p->arrived = 0;
    p->votes = 0;
    for (uint32_t i = 0; i < p->n_ctx; i++) {
        pstage *s = &p->st[i];
        memset(s->gacc, 0, s->n_train * sizeof *s->gacc);
        s->loss = 0;
        s->busy = 0;
        s->sent = 0;
        s->status = VKT_OK;
        s->errmsg[0] = 0;
    }
}

/* One stage at a time: each copy's forwards and backwards, then every update. */
static void run_sequential(vkt_pipeline *p)
{
    vkt_status r = VKT_OK;
    for (uint32_t c = 0; c < p->D && r == VKT_OK; c++)
        for (uint32_t k = 0; k < p->m && r == VKT_OK; k++) {
            for (uint32_t s = 0; s < p->P && r == VKT_OK; s++)
                r = forward(ctx_of(p, c, s), k);
            for (uint32_t s = p->P - 1; s-- > 0 && r == VKT_OK;)
                r = backward(ctx_of(p, c, s), k);
        }
    for (uint32_t i = 0; i < p->n_ctx && r == VKT_OK; i++)
        r = update(&p->st[i]);
}

static void run_threads(vkt_pipeline *p)
{
    uint32_t started = 0;
    for (; started < p->n_ctx; started++)
        if (plat_thread_start(&p->st[started].thread, stage_job, &p->st[started]) != 0)
            break;
    /* Contexts without a thread fail the step; the started ones stop at once (they see
     * `failed`) and only they arrive at the end. */
    for (uint32_t k = started; k < p->n_ctx; k++)
        sfail(&p->st[k], VKT_ERROR_INTERNAL, "thread", "could not start a thread");
    plat_monitor_lock(p->mon);
    p->expected = started;
    p->go = 1;
    plat_monitor_broadcast(p->mon);
    plat_monitor_unlock(p->mon);
    for (uint32_t k = 0; k < started; k++)
        plat_thread_join(p->st[k].thread);
}

vkt_status pipe_step(vkt_pipeline *p, const vkt_feed *feeds, uint32_t n, uint64_t step,
                     double *out_loss)
{
    vkt_status st = check_feeds(p, feeds, n);
    if (st != VKT_OK)
        return st;
    reset_step(p);
    p->step = step;
    double t0 = plat_now();
    if (p->opt.sequential)
        run_sequential(p);
    else
        run_threads(p);
    p->step_seconds = plat_now() - t0;
    /* The context that failed first (the others stopped because of it, or failed after). */
    if (p->first_failed < p->n_ctx && p->st[p->first_failed].errmsg[0])
        return pfail(p, p->st[p->first_failed].status, "%s", p->st[p->first_failed].errmsg);
    for (uint32_t k = 0; k < p->n_ctx; k++)
        if (p->st[k].errmsg[0])
            return pfail(p, p->st[k].status, "%s", p->st[k].errmsg);
    for (uint32_t k = 0; k < p->n_ctx; k++)
        if (p->st[k].status != VKT_OK)
            return pfail(p, p->st[k].status, "stage %u failed", p->st[k].index);
    double loss = 0;
    for (uint32_t c = 0; c < p->D; c++)
        loss += ctx_of(p, c, p->P - 1)->loss;
    if (out_loss)
        *out_loss = loss;
    return VKT_OK;
}

vkt_status vkt_pipeline_step(vkt_pipeline *p, const vkt_feed *feeds, uint32_t n, float *out_loss)
{
    if (!p)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "vkt_pipeline_step: pipeline is NULL");
    double loss = 0;
    vkt_status st = pipe_step(p, feeds, n, p->steps, &loss);
    if (st != VKT_OK) {
        char msg[VKT_ERRMSG_SIZE];
        memcpy(msg, p->errmsg, sizeof msg);
        return pfail(p, st, "vkt_pipeline_step: %.900s", msg);
    }
    p->steps++;
    if (out_loss)
        *out_loss = (float)loss;
    return VKT_OK;
}

/* ---- parameters ---- */

/* The stage holding parameter t of the full graph and t's id, or a message. */
static vkt_status param_stage(vkt_pipeline *p, const vkt_tensor *t, const char *fn,
                              uint32_t *out, uint32_t *id)
{
    int64_t i = graph_node_id(p->graph, t);
    graph_node_info in = {0};
    if (i >= 0)
        graph_node_info_at(p->graph, (uint32_t)i, &in);
    if (!in.param)
        return pfail(p, VKT_ERROR_INVALID_ARGUMENT, "%s: '%s' is not a parameter of the "
                     "pipeline's graph", fn, vkt_tensor_name(t));
    uint32_t s = i < p->split.nodes ? p->split.node_stage[i] : UINT32_MAX;
    if (s >= p->P)
        return pfail(p, VKT_ERROR_INVALID_ARGUMENT, "%s: parameter '%s' is not used by the "
                     "loss, so no stage holds it", fn, in.name);
    *out = s;
    *id = (uint32_t)i;
    return VKT_OK;
}

vkt_status pipe_read_param(vkt_pipeline *p, uint32_t copy, const vkt_tensor *t, float *out,
                           uint64_t count)
{
    uint32_t s = 0, id = 0;
    vkt_status st = param_stage(p, t, "read", &s, &id);
    if (st != VKT_OK)
        return st;
    pstage *x = ctx_of(p, copy, s);
    st = vkt_model_read(x->model, x->gs->map[id], out, count);
    return st == VKT_OK ? VKT_OK
                        : pfail(p, st, "stage %u: %s", s, vkt_model_errmsg(x->model));
}

vkt_status pipe_write_param(vkt_pipeline *p, const vkt_tensor *t, const float *data,
                            uint64_t count)
{
    uint32_t s = 0, id = 0;
    vkt_status st = param_stage(p, t, "write", &s, &id);
    for (uint32_t c = 0; st == VKT_OK && c < p->D; c++) {
        pstage *x = ctx_of(p, c, s);
        st = vkt_model_write(x->model, x->gs->map[id], data, count);
        if (st != VKT_OK)
            pfail(p, st, "stage %u: %s", s, vkt_model_errmsg(x->model));
    }
    return st;
}

vkt_status pipe_set_optimizer(vkt_pipeline *p, const vkt_optimizer_options *o)
{
    if (o->clip_norm > 0 && p->P > 1)
        return pfail(p, VKT_ERROR_INVALID_ARGUMENT, "gradient clipping (a global norm over "
                     "every stage) is not supported in a pipeline yet");
    for (uint32_t i = 0; i < p->n_ctx; i++) {
        if (!p->st[i].opt)
            continue;
        vkt_status st = vkt_optimizer_set_options(p->st[i].opt, o);
        if (st != VKT_OK)
            return pfail(p, st, "stage %u: %s", p->st[i].index,
                         vkt_context_errmsg(p->st[i].ctx));
    }
    p->optim = *o;
    return VKT_OK;
}

vkt_status vkt_pipeline_read(vkt_pipeline *p, const vkt_tensor *t, float *out, uint64_t count)
{
    if (!p || !t || !out)
        return err_fail(p ? p->errmsg : NULL, VKT_ERROR_INVALID_ARGUMENT,
                        "vkt_pipeline_read: NULL argument");
    vkt_status st = pipe_read_param(p, 0, t, out, count);
    if (st != VKT_OK) {
        char msg[VKT_ERRMSG_SIZE];
        memcpy(msg, p->errmsg, sizeof msg);
        pfail(p, st, "vkt_pipeline_read: %.900s", msg);
    }
    return st;
}

vkt_status vkt_pipeline_stage_stats_get(vkt_pipeline *p, uint32_t stage,
                                        vkt_pipeline_stage_stats *out)
{
    if (!p || !out)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "vkt_pipeline_stage_stats_get: NULL "
                        "argument");
    if (stage >= p->P)
        return pfail(p, VKT_ERROR_INVALID_ARGUMENT, "vkt_pipeline_stage_stats_get: stage %u of "
                     "%u", stage, p->P);
    pstage *s = &p->st[stage];
    vkt_model_stats ms;
    vkt_status st = vkt_model_stats_get(s->model, &ms);
    if (st != VKT_OK)
        return pfail(p, st, "stage %u: %s", stage, vkt_model_errmsg(s->model));
    memset(out, 0, sizeof *out);
    out->device = s->device;
    out->ops = s->gs->ops;
    out->param_bytes = ms.param_bytes;
    out->grad_bytes = ms.grad_bytes;
    out->optimizer_bytes = vkt_optimizer_state_size(s->opt);
    out->activation_bytes = ms.activation_bytes;
    out->sent_bytes = s->sent;
    out->busy_seconds = s->busy;
    vkt_memory_stats mem;
    if (vkt_context_memory_stats(s->ctx, &mem) == VKT_OK)
        out->device_bytes = mem.device_local_bytes;
    return VKT_OK;
}
