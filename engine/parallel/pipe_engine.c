/* pipe_engine.c - the pipeline engine (pipe_engine.h): creation of the P x D stage
 * contexts (each its sub-graph's model and optimizer), their parameters, statistics. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parallel/pipe_engine.h"
#include "parallel/share.h"

vkt_status pipe_fail(vkt_pipeline *p, vkt_status st, const char *fmt, ...)
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
vkt_status pipe_stage_fail(pstage *s, vkt_status st, const char *what, const char *msg)
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

vkt_status pipe_model_fail(pstage *s, vkt_status st, const char *what)
{
    return pipe_stage_fail(s, st, what, vkt_model_errmsg(s->cur ? s->cur : s->model));
}

/* ---- creation ---- */

vkt_status pipe_apply_record(vkt_pipeline *p, pstage *s)
{
    vkt_view pv, gv;
    uint64_t n = 0;
    vkt_status st = graph_model_flat(s->model, &pv, &gv, &n);
    if (st == VKT_OK && p->route->staged && !s->hsum) /* the host's sum, mapped */
        st = vkt_buffer_create(s->ctx, n * 4, VKT_MEMORY_HOST, &s->hsum);
    if (st == VKT_OK)
        st = s->apply ? vkt_stream_reset(s->apply) : vkt_stream_create(s->ctx, NULL, &s->apply);
    if (st == VKT_OK && p->route->staged) /* in the update's submission: no upload of its own */
        st = vkt_stream_copy(s->apply, s->hsum, 0, gv.buffer, gv.offset * 4, n * 4);
    if (st == VKT_OK)
        st = vkt_optimizer_record(s->opt, s->apply, pv, gv);
    if (st == VKT_OK) /* the stage's next run may follow it in one submission */
        st = gpu_stream_barrier_all(s->apply);
    s->apply_staged = st == VKT_OK ? p->route->staged : -1; /* -1: record it again */
    return st == VKT_OK ? VKT_OK : pipe_fail(p, st, "stage %u: optimizer: %s", s->index,
                                             vkt_context_errmsg(s->ctx));
}

static vkt_status record_apply(vkt_pipeline *p, pstage *s)
{
    vkt_view pv, gv;
    uint64_t n = 0;
    vkt_status st = graph_model_flat(s->model, &pv, &gv, &n);
    s->n_train = n;
    s->n_params = vkt_model_param_count(s->model);
    /* a stage without trainable parameters (the loss alone, say) has nothing to update */
    vkt_optimizer_options oo = pipe_stage_optim(p);
    if (st == VKT_OK && n)
        st = vkt_optimizer_create(s->ctx, &oo, n, &s->opt);
    if (st != VKT_OK)
        return pipe_fail(p, st, "stage %u: optimizer: %s", s->index, vkt_context_errmsg(s->ctx));
    if (n && (st = pipe_apply_record(p, s)) != VKT_OK)
        return st;
    uint64_t most_elems = 0;
    for (uint32_t j = 0; j < s->gs->n_send; j++)
        if (p->edge[s->send_edge[j]].elems > most_elems)
            most_elems = p->edge[s->send_edge[j]].elems;
    s->gacc = calloc(n ? n : 1, sizeof *s->gacc);
    s->gtmp = calloc(s->n_params ? s->n_params : 1, sizeof *s->gtmp);
    s->gsum = malloc((most_elems ? most_elems : 1) * sizeof *s->gsum);
    s->losses = calloc(p->m, sizeof *s->losses);
    s->feed_row = calloc(s->gs->n_feed + 1, sizeof *s->feed_row);
    s->feed_data = calloc(s->gs->n_feed + 1, sizeof *s->feed_data);
    if (!s->gacc || !s->gtmp || !s->gsum || !s->losses || !s->feed_row || !s->feed_data)
        return pipe_fail(p, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    for (uint32_t j = 0; j < s->gs->n_feed; j++) {
        graph_node_info x;
        graph_node_info_at(p->graph, s->gs->feed[j], &x);
        s->feed_row[j] = x.count / p->split.batch;
    }
    return VKT_OK;
}

/* AUTO's rule: keep when the K - 1 more arenas (the first model's activation bytes
 * each) take at most half of what the context's share of the device leaves free:
 * (K - 1) x arena <= (budget - allocated) / (2 x the pipeline's contexts on the device),
 * the budget being the context's memory limit (memory_limit, VKT_DEVICE_MEMORY_LIMIT),
 * else its largest device-local heap; allocated: the device-local bytes the context holds
 * already (the first model, its optimizer). */
static int keep_fits(vkt_pipeline *p, pstage *s, uint32_t K)
{
    vkt_model_stats ms;
    vkt_memory_stats mem;
    vkt_device_info di;
    if (vkt_model_stats_get(s->model, &ms) != VKT_OK ||
        vkt_context_memory_stats(s->ctx, &mem) != VKT_OK ||
        vkt_context_device_info(s->ctx, &di) != VKT_OK)
        return 0;
    uint64_t budget = mem.memory_limit;
    for (uint32_t h = 0; !budget && h < di.heap_count && h < VKT_MAX_HEAPS; h++)
        if (di.heap_device_local[h] && di.heap_size[h] > budget)
            budget = di.heap_size[h];
    uint32_t sharing = 0;
    for (uint32_t i = 0; i < p->n_ctx; i++)
        sharing += p->st[i].local && p->st[i].device == s->device;
    uint64_t free_bytes = budget > mem.device_local_bytes ? budget - mem.device_local_bytes : 0;
    return (double)(K - 1) * (double)ms.activation_bytes <=
           (double)free_bytes / (2.0 * (sharing ? sharing : 1));
}

/* The stage's way of running micro-batches (pipe_engine.h's pipe_keep): K = min(P - s, m)
 * slots to keep, or recompute (one model), by the option. The last stage's model runs whole
 * steps: one, or on the device row two where they fit (not under ALWAYS, which asks for
 * less memory), so that its next micro-batch goes to the device while one runs (its runs
 * are not waited for: pipe_sched.c). NEVER fails where the slots of a sending stage cannot
 * be allocated; AUTO then recomputes; the last stage then keeps one. */
static vkt_status pick_keep(vkt_pipeline *p, pstage *s, const vkt_model_options *mo,
                            const vkt_tensor *const *gin, const char *name)
{
    uint32_t K = p->P - s->index < p->m ? p->P - s->index : p->m;
    vkt_recompute r = p->opt.recompute;
    int last = s->index == p->P - 1;
    if (last)
        K = p->edges == &pipe_edges_device && p->m >= 2 && r != VKT_RECOMPUTE_ALWAYS &&
                    keep_fits(p, s, 2) ? 2 : 1;
    int keep = last || r == VKT_RECOMPUTE_NEVER ||
               (r == VKT_RECOMPUTE_AUTO && keep_fits(p, s, K));
    s->slot[0] = s->model;
    s->n_slots = 1;
    s->keep = pipe_keep_row(keep);
    vkt_model_options so = *mo;
    so.share_params = s->model;
    vkt_status st = VKT_OK;
    for (uint32_t j = 1; keep && j < K && st == VKT_OK; j++) {
        st = graph_model_create(s->ctx, s->gs->g, s->gs->loss, &so, gin, s->gs->n_recv,
                                GRAPH_MODEL_ACCUMULATE | GRAPH_MODEL_SHARE_GRADS, &s->slot[j]);
        if (st == VKT_OK)
            s->n_slots++;
    }
    if (st == VKT_OK || (r == VKT_RECOMPUTE_NEVER && !last)) {
        return st == VKT_OK ? VKT_OK
                            : pipe_fail(p, st, "%s: keeping the activations of %u micro-batches "
                                        "(recompute never; 'auto' or 'always' recomputes the "
                                        "forward instead): %s", name, K, vkt_last_error());
    }
    while (s->n_slots > 1) /* AUTO: what does not fit is recomputed */
        vkt_model_destroy(s->slot[--s->n_slots]);
    s->keep = pipe_keep_row(last); /* the last stage: its one model */
    p->errmsg[0] = 0;
    return VKT_OK;
}

/* Context j (share_pick's ctx). */
static vkt_context *stage_ctx(void *user, uint32_t j)
{
    return ((vkt_pipeline *)user)->st[j].ctx;
}

/* The context s shares its VkDevice with (NULL: its own): the first context before it on
 * its device, as replicas share (share.h, VKT_SHARE_DEVICE); across ranks each rank holds
 * one. Where every stage of a copy shares one, the edges stay on it (pipe_edges). */
static vkt_context *share_with(vkt_pipeline *p, const pstage *s)
{
    uint32_t dev[VKT_MAX_STAGES * VKT_MAX_REPLICAS];
    uint32_t i = (uint32_t)(s - p->st);
    if (p->world || p->n_ctx > sizeof dev / sizeof dev[0])
        return NULL;
    for (uint32_t j = 0; j < p->n_ctx; j++)
        dev[j] = p->st[j].device;
    return share_pick(dev, p->n_ctx, i, stage_ctx, p);
}

/* What each model of stage s is made with: its options and the inputs whose gradient
 * it sends back (*gin: to free). */
static vkt_status stage_options(vkt_pipeline *p, pstage *s, vkt_model_options *mo,
                                const vkt_tensor ***gin)
{
    const graph_stage *gs = s->gs;
    *gin = malloc((gs->n_recv + 1) * sizeof **gin);
    if (!*gin)
        return pipe_fail(p, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    for (uint32_t j = 0; j < gs->n_recv; j++)
        (*gin)[j] = gs->map[gs->recv[j]];
    *mo = (vkt_model_options){.batch = p->mb, .check = p->opt.check};
    return vkt_context_precision(s->ctx, p->opt.precision, &mo->precision, NULL, 0);
}

/* The stage's context (shared: share_with), its first model and its optimizer. */
static vkt_status create_stage(vkt_pipeline *p, pstage *s)
{
    char name[64];
    stage_name(s, name, sizeof name);
    vkt_context_options co = {.device_index = s->device, .kernels = p->opt.kernels};
    vkt_status st = gpu_context_create_shared(p->inst, &co, share_with(p, s), &s->ctx);
    if (st != VKT_OK)
        return pipe_fail(p, st, "%s: %s", name, vkt_last_error());
    vkt_model_options mo;
    const vkt_tensor **gin = NULL;
    st = stage_options(p, s, &mo, &gin);
    if (st == VKT_OK)
        st = graph_model_create(s->ctx, s->gs->g, s->gs->loss, &mo, gin, s->gs->n_recv,
                                GRAPH_MODEL_ACCUMULATE, &s->model);
    int no_host_memory = gin == NULL; /* stage_options' message is the pipeline's */
    free(gin);
    if (st != VKT_OK)
        return no_host_memory ? st : pipe_fail(p, st, "%s: %s", name, vkt_last_error());
    return record_apply(p, s);
}

/* After every stage's first model and the edges' buffers: its keeping slots, or
 * recompute (pick_keep). */
static vkt_status create_slots(vkt_pipeline *p, pstage *s)
{
    char name[64];
    stage_name(s, name, sizeof name);
    vkt_model_options mo;
    const vkt_tensor **gin = NULL;
    vkt_status st = stage_options(p, s, &mo, &gin);
    if (st == VKT_OK)
        st = pick_keep(p, s, &mo, gin, name);
    else if (gin)
        pipe_fail(p, st, "%s: %s", name, vkt_last_error());
    free(gin);
    return st;
}

/* Sizes and counts, before the split (so they are named first). */
static vkt_status check_options(vkt_pipeline *p)
{
    const pipe_options *o = &p->opt;
    p->P = o->stages;
    p->D = o->copies ? o->copies : 1;
    p->m = o->micro_batches ? o->micro_batches : 1;
    if ((unsigned)o->recompute > VKT_RECOMPUTE_NEVER)
        return pipe_fail(p, VKT_ERROR_INVALID_ARGUMENT, "%s: recompute %d is not AUTO, ALWAYS "
                         "or NEVER", o->fn, (int)o->recompute);
    if (p->P == 0 || p->P > VKT_MAX_STAGES)
        return pipe_fail(p, VKT_ERROR_INVALID_ARGUMENT, "%s: %u stages; 1 to %d are supported",
                         o->fn, p->P, VKT_MAX_STAGES);
    if (o->batch == 0)
        return pipe_fail(p, VKT_ERROR_INVALID_ARGUMENT, "%s: the batch is 0", o->fn);
    if (o->batch % (p->D * p->m) != 0) {
        if (p->D > 1)
            return pipe_fail(p, VKT_ERROR_SHAPE, "%s: a batch of %u rows does not split into %u "
                             "copies x %u equal micro-batches", o->fn, o->batch, p->D, p->m);
        return pipe_fail(p, VKT_ERROR_SHAPE, "%s: a batch of %u rows does not split into %u "
                         "equal micro-batches", o->fn, o->batch, p->m);
    }
    p->mb = o->batch / (p->D * p->m);
    p->n_ctx = p->P * p->D;
    if (!o->devices || o->n_devices == 0)
        return pipe_fail(p, VKT_ERROR_INVALID_ARGUMENT, "%s: no device list", o->fn);
    char why[320];
    if (share_refuse("stages", why, sizeof why))
        return pipe_fail(p, VKT_ERROR_INVALID_ARGUMENT, "%s", why);
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
        s->local = 1; /* across ranks: pipe_world_place keeps one */
        if (s->device >= n) {
            char name[64];
            stage_name(s, name, sizeof name);
            return pipe_fail(p, VKT_ERROR_NO_DEVICE, "%s: device %u does not exist (%u device(s) "
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
    p->world = o->world && o->world->size > 1 ? o->world : NULL;
    p->remote_failed = UINT32_MAX;
    p->scale = 1.0f;
    vkt_status st = check_options(p);
    if (st == VKT_OK) {
        char msg[VKT_ERRMSG_SIZE];
        st = graph_split_stages(g, loss, p->P, &p->split, msg, sizeof msg);
        if (st != VKT_OK)
            pipe_fail(p, st, "%s: %s", o->fn, msg);
    }
    if (st == VKT_OK) {
        p->st = calloc(p->n_ctx, sizeof *p->st);
        p->meets = calloc(p->D, sizeof *p->meets);
        p->mon = plat_monitor_create();
        if (!p->st || !p->meets || !p->mon)
            st = pipe_fail(p, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    }
    if (st == VKT_OK)
        st = place_contexts(p, o->devices);
    if (st == VKT_OK)
        st = pipe_edges_make(p);
    if (st == VKT_OK && p->world)
        st = pipe_world_place(p);
    p->route = pipe_route_pick(p); /* before the optimizers: their grad_scale */
    for (uint32_t i = 0; i < p->n_ctx && st == VKT_OK; i++)
        if (p->st[i].local)
            st = create_stage(p, &p->st[i]);
    if (st == VKT_OK) /* the row; the device row's buffers before the slots: what they
                         leave free decides keeping (keep_fits) */
        st = pipe_edges_start(p);
    for (uint32_t i = 0; i < p->n_ctx && st == VKT_OK; i++)
        if (p->st[i].local)
            st = create_slots(p, &p->st[i]);
    if (st == VKT_OK)
        st = pipe_edges_record(p); /* the device row's copies: on the slots */
    if (st == VKT_OK && p->opt.async)
        st = pipe_async_make(p); /* after the stages: their parameter counts */
    if (st == VKT_OK && p->opt.async && p->world)
        st = pipe_async_world_make(p);
    if (st != VKT_OK) {
        err_fail(NULL, st, "%s", p->errmsg);
        vkt_pipeline_destroy(p);
        return st;
    }
    p->opt.devices = NULL; /* the caller's list: read at creation only */
    *out = p;
    return VKT_OK;
}

void vkt_pipeline_destroy(vkt_pipeline *p)
{
    if (!p)
        return;
    for (uint32_t k = 0; p->st && k < p->n_ctx; k++) /* a failed wait leaves runs going */
        gpu_context_wait_idle(p->st[k].ctx);
    pipe_edges_free(p); /* the device row's buffers and copies: before their contexts */
    for (uint32_t k = 0; p->st && k < p->n_ctx; k++) {
        pstage *s = &p->st[k];
        vkt_stream_destroy(s->apply);
        vkt_buffer_destroy(s->hsum);
        vkt_optimizer_destroy(s->opt);
        for (uint32_t j = s->n_slots; j-- > 1;) /* the slots before the model they share */
            vkt_model_destroy(s->slot[j]);
        vkt_model_destroy(s->model);
        vkt_context_destroy(s->ctx);
        free(s->gacc);
        free(s->gtmp);
        free(s->gsum);
        free(s->losses);
        free(s->recv_edge);
        free(s->recv_slot);
        free(s->send_edge);
        free(s->feed_row);
        free(s->feed_data);
        pipe_world_free(s);
    }
    free(p->stage_train);
    pipe_async_free(p);
    pipe_async_world_free(p);
    free(p->st);
    free(p->meets);
    graph_split_free(&p->split);
    if (p->mon)
        plat_monitor_destroy(p->mon);
    free(p);
}

uint32_t pipe_copies(const vkt_pipeline *p) { return p->D; }
void pipe_set_stop(vkt_pipeline *p, int stop) { p->stop_vote = stop != 0; }
int pipe_stopped(const vkt_pipeline *p) { return p->stopped; }
int pipe_skipped(const vkt_pipeline *p) { return p->overflow; }

void pipe_set_scaler(vkt_pipeline *p, int guard, float scale)
{
    p->guard = guard != 0;
    p->scale = scale > 0 ? scale : 1.0f;
    for (uint32_t c = 0; c < p->D; c++) { /* the last stages' seed, in their control block */
        pstage *s = ctx_of(p, c, p->P - 1);
        for (uint32_t j = 0; s->local && j < s->n_slots; j++)
            graph_model_set_loss_scale(s->slot[j], p->scale);
    }
    p->route_status = pipe_route_set(p, 0); /* a failure fails the next steps */
}
vkt_world *pipe_world(const vkt_pipeline *p) { return p->world; }

int pipe_holds(const vkt_pipeline *p, uint32_t copy, uint32_t stage)
{
    return copy < p->D && stage < p->P && p->st[copy * p->P + stage].local;
}

uint32_t pipe_local_copy(const vkt_pipeline *p, uint32_t stage)
{
    for (uint32_t c = 0; c < p->D; c++)
        if (pipe_holds(p, c, stage))
            return c;
    return UINT32_MAX;
}
const graph_split *pipe_split(const vkt_pipeline *p) { return &p->split; }
vkt_model *pipe_model(vkt_pipeline *p, uint32_t c, uint32_t s) { return ctx_of(p, c, s)->model; }

uint32_t pipe_arenas(const vkt_pipeline *p, uint32_t c, uint32_t s)
{
    uint32_t n = p->st[c * p->P + s].n_slots;
    return n ? n : 1;
}
vkt_optimizer *pipe_optimizer(vkt_pipeline *p, uint32_t c, uint32_t s) { return ctx_of(p, c, s)->opt; }
vkt_context *pipe_context(vkt_pipeline *p, uint32_t c, uint32_t s) { return ctx_of(p, c, s)->ctx; }

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
        return pipe_fail(p, VKT_ERROR_INVALID_ARGUMENT, "%s: '%s' is not a parameter of the "
                         "pipeline's graph", fn, vkt_tensor_name(t));
    uint32_t s = i < p->split.nodes ? p->split.node_stage[i] : UINT32_MAX;
    if (s >= p->P)
        return pipe_fail(p, VKT_ERROR_INVALID_ARGUMENT, "%s: parameter '%s' is not used by the "
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
    if (st == VKT_OK)
        st = pipe_flush(p); /* the update due runs first */
    if (st != VKT_OK)
        return st;
    pstage *x = ctx_of(p, copy, s);
    if (!x->local)
        return pipe_fail(p, VKT_ERROR_INVALID_ARGUMENT, "read: copy %u's stage %u runs on rank "
                         "%u", copy, s, copy * p->P + s);
    st = vkt_model_read(x->model, x->gs->map[id], out, count);
    return st == VKT_OK ? VKT_OK
                        : pipe_fail(p, st, "stage %u: %s", s, vkt_model_errmsg(x->model));
}

vkt_status pipe_write_param(vkt_pipeline *p, const vkt_tensor *t, const float *data,
                            uint64_t count)
{
    uint32_t s = 0, id = 0;
    vkt_status st = param_stage(p, t, "write", &s, &id);
    if (st == VKT_OK)
        st = pipe_flush(p); /* else it would land on the values written */
    for (uint32_t c = 0; st == VKT_OK && c < p->D; c++) {
        pstage *x = ctx_of(p, c, s);
        if (!x->local)
            continue; /* its rank writes it */
        st = vkt_model_write(x->model, x->gs->map[id], data, count);
        if (st != VKT_OK)
            pipe_fail(p, st, "stage %u: %s", s, vkt_model_errmsg(x->model));
    }
    return st;
}

vkt_optimizer_options pipe_stage_optim(const vkt_pipeline *p)
{
    vkt_optimizer_options oo = p->optim;
    /* the pipeline clips by the norm over every stage (pipe_sched.c); a bad value (and a
     * bad grad_scale) still reaches the optimizer's checks */
    oo.clip_norm = oo.clip_norm > 0 ? 0.0f : oo.clip_norm;
    if (p->route->weight && oo.grad_scale >= 0) /* the device sum of m micro-batch means,
                                                   async: the copy's share 1 / D of it */
        oo.grad_scale = (float)((oo.grad_scale > 0 ? oo.grad_scale : 1.0) / p->m /
                                (p->route->share ? p->D : 1));
    return oo;
}

vkt_status pipe_route_set(vkt_pipeline *p, int force)
{
    const pipe_route *r = pipe_route_pick(p);
    if (r == p->route && !force)
        return VKT_OK;
    vkt_status fst = pipe_flush(p); /* a due update keeps the options it was agreed with */
    if (fst != VKT_OK)
        return fst;
    p->route = r; /* the update streams follow at the next step (pipe_apply_record) */
    vkt_optimizer_options oo = pipe_stage_optim(p);
    for (uint32_t i = 0; i < p->n_ctx; i++) {
        if (!p->st[i].opt)
            continue; /* no trainable parameters, or another rank's */
        vkt_status st = vkt_optimizer_set_options(p->st[i].opt, &oo);
        if (st != VKT_OK)
            return pipe_fail(p, st, "stage %u: %s", p->st[i].index,
                             vkt_context_errmsg(p->st[i].ctx));
    }
    return VKT_OK;
}

vkt_status pipe_set_optimizer(vkt_pipeline *p, const vkt_optimizer_options *o)
{
    vkt_optimizer_options was = p->optim;
    const pipe_route *route = p->route;
    p->optim = *o; /* clip_norm may change the route */
    vkt_status st = pipe_route_set(p, 1);
    if (st != VKT_OK) { /* refused: the options and route stay */
        p->optim = was;
        p->route = route;
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
        return pipe_fail(p, VKT_ERROR_INVALID_ARGUMENT, "vkt_pipeline_stage_stats_get: stage %u of "
                         "%u", stage, p->P);
    pstage *s = &p->st[stage];
    if (!s->local && p->world) /* the rank's own stage: the copy it holds */
        s = &p->st[p->here];
    if (s->index != stage)
        return pipe_fail(p, VKT_ERROR_INVALID_ARGUMENT, "vkt_pipeline_stage_stats_get: stage %u "
                         "runs on rank %u; this rank holds stage %u", stage, stage, s->index);
    vkt_model_stats ms;
    vkt_status st = vkt_model_stats_get(s->model, &ms);
    if (st != VKT_OK)
        return pipe_fail(p, st, "stage %u: %s", stage, vkt_model_errmsg(s->model));
    memset(out, 0, sizeof *out);
    out->device = s->device;
    out->ops = s->gs->ops;
    out->param_bytes = ms.param_bytes;
    out->grad_bytes = ms.grad_bytes;
    out->optimizer_bytes = vkt_optimizer_state_size(s->opt);
    out->activation_bytes = ms.activation_bytes * s->n_slots; /* the slots' arenas: equal */
    out->sent_bytes = s->sent;
    out->sent_host_bytes = s->host_sent;
    out->overlapped = s->overlapped;
    out->busy_seconds = s->busy;
    out->grad_reads = s->grad_reads;
    out->grad_writes = s->grad_writes;
    pipe_staleness(p, stage, &out->staleness_mean, &out->staleness_p99, &out->staleness_max,
                   &out->updates);
    out->forwards = s->forwards;
    out->kept = s->keep == pipe_keep_row(1) ? s->n_slots : 0;
    vkt_memory_stats mem;
    if (vkt_context_memory_stats(s->ctx, &mem) == VKT_OK)
        out->device_bytes = mem.device_local_bytes;
    return VKT_OK;
}
