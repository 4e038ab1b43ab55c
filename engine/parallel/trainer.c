/* vkt_trainer, the facade (trainer.h): creation of the pieces exec_plan.c picks, feeding,
 * parameters, statistics. */
#include "parallel/exec.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

vkt_status trainer_fail(vkt_trainer *t, vkt_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    err_failv(t ? t->errmsg : NULL, st, fmt, ap);
    va_end(ap);
    return st;
}

/* With several replicas a replica's model names its replica, as replica_fail does: a
 * failure outside the replicas' threads (the async master's first read, the last write)
 * says which device failed too. */
vkt_status trainer_from_model(vkt_trainer *t, const vkt_model *m, vkt_status st)
{
    for (uint32_t i = 0; t && m && t->n_rep > 1 && i < t->n_rep; i++)
        if (t->rep[i].model == m)
            return trainer_fail(t, st, "replica %u: %s", t->rep[i].index, vkt_model_errmsg(m));
    return trainer_fail(t, st, "%s", m ? vkt_model_errmsg(m) : vkt_last_error());
}

vkt_status replica_fail(replica *r, vkt_status st, const char *fmt, ...)
{
    char msg[VKT_ERRMSG_SIZE - 32]; /* room for the "replica N: " prefix */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (r->t->n_rep > 1)
        snprintf(r->errmsg, sizeof r->errmsg, "replica %u: %s", r->index, msg);
    else
        snprintf(r->errmsg, sizeof r->errmsg, "%s", msg);
    err_fail(NULL, st, "%s", r->errmsg); /* the thread's last error too */
    r->status = st;
    return st;
}

static vkt_status select_devices(vkt_trainer *t, uint32_t *dev, uint32_t *n)
{
    if (t->opt.devices) {
        if (t->opt.device_count == 0 || t->opt.device_count > TRAINER_MAX_REPLICAS)
            return trainer_fail(t, VKT_ERROR_INVALID_ARGUMENT,
                                "vkt_trainer_create: device_count must be 1..%d",
                                TRAINER_MAX_REPLICAS);
        memcpy(dev, t->opt.devices, t->opt.device_count * sizeof *dev);
        *n = t->opt.device_count;
        for (uint32_t i = 0; i < *n; i++)
            if (dev[i] >= vkt_instance_device_count(t->inst))
                return trainer_fail(t, VKT_ERROR_NO_DEVICE,
                                    "device %u does not exist (%u device(s) present)", dev[i],
                                    vkt_instance_device_count(t->inst));
        return VKT_OK;
    }
    uint32_t count = vkt_instance_device_count(t->inst);
    if (trainer_world_device(t, count, &dev[0])) { /* a rank: one device of its host's */
        *n = 1;
        return VKT_OK;
    }
    vkt_status st = vkt_instance_select_devices(t->inst, dev, TRAINER_MAX_REPLICAS, n);
    return st == VKT_OK ? VKT_OK : trainer_fail(t, st, "%s", vkt_instance_errmsg(t->inst));
}

/* The executor the options name (the row is picked again once the ranks counted the
 * replicas), then its creation. *laid_out: the ranks agreed on the layout (so every rank
 * goes on to the agreement after creation, trainer_world_agree). */
static vkt_status create_all(vkt_trainer *t, int *laid_out)
{
    uint32_t dev[TRAINER_MAX_REPLICAS], n = 0;
    vkt_status st = select_devices(t, dev, &n);
    exec_facts f;
    exec_facts_of(t, 0, &f);
    t->exec = exec_plan_pick(&f)->exec;
    return t->exec->create(t, dev, n, st, laid_out);
}

vkt_status vkt_trainer_create(vkt_instance *inst, vkt_graph *graph, vkt_tensor *loss,
                              const vkt_trainer_options *options, vkt_trainer **out)
{
    if (!out)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "vkt_trainer_create: out is NULL");
    *out = NULL;
    if (!inst || !graph || !loss || !options)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT,
                        "vkt_trainer_create: instance, graph, loss and options are required");
    if (vkt_graph_status(graph) != VKT_OK)
        return err_fail(NULL, vkt_graph_status(graph), "%s", vkt_graph_errmsg(graph));
    if (options->batch == 0)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "vkt_trainer_create: batch is 0");
    vkt_trainer *t = calloc(1, sizeof *t);
    if (!t)
        return err_fail(NULL, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    t->inst = inst;
    t->graph = graph;
    t->loss = loss;
    t->opt = *options;
    t->optim = options->optimizer;
    trainer_world_join(t, options->world);
    int laid_out = 0;
    vkt_status st = create_all(t, &laid_out);
    if (st == VKT_OK) /* a shape past a device limit fails now, not at the first step */
        st = t->exec->record(t);
    /* collective: every rank created the same trainer, then the chief's parameters */
    if (laid_out)
        st = trainer_world_agree(t, st);
    if (st == VKT_OK) /* the divergence guard's reference: the parameters at the start */
        st = trainer_guard_start(t);
    if (st != VKT_OK) {
        char msg[VKT_ERRMSG_SIZE];
        memcpy(msg, t->errmsg, sizeof msg);
        vkt_trainer_destroy(t);
        return err_fail(NULL, st, "%s", msg);
    }
    t->stats.replicas = vkt_trainer_replicas(t);
    t->stats.bytes_staged_per_step = (t->rd && !t->rd->ops->on_device) ||
                                             (t->xc && !t->xc->ops->on_device)
                                         ? 2ull * t->n_rep * t->grad_count * 4 : 0;
    *out = t;
    return VKT_OK;
}

void vkt_trainer_destroy(vkt_trainer *t)
{
    if (!t)
        return;
    trainer_workers_stop(t);
    for (uint32_t i = 0; i < t->n_rep; i++) /* first: they live on the holders' contexts */
        for (uint32_t e = 0; e < t->rep[i].n_eval; e++)
            vkt_model_destroy(t->rep[i].eval[e].model);
    if (t->exec)
        t->exec->destroy(t);
    for (uint32_t i = 0; i < t->n_rep; i++) {
        vkt_loader_destroy(t->rep[i].loader);
        free(t->rep[i].x);
        free(t->rep[i].y);
    }
    free(t->rep);
    free(t);
}

const char *vkt_trainer_errmsg(const vkt_trainer *t)
{
    return t ? t->errmsg : "vkt_trainer_errmsg: trainer is NULL";
}

uint32_t vkt_trainer_replicas(const vkt_trainer *t)
{
    return t && t->exec ? t->exec->copies(t) : 0;
}
uint32_t vkt_trainer_world_replicas(const vkt_trainer *t) { return t ? t->world_rep : 0; }
uint64_t vkt_trainer_step_count(const vkt_trainer *t) { return t ? t->steps : 0; }

vkt_status trainer_precision_on(vkt_trainer *t, vkt_context *ctx, vkt_dtype *out)
{
    vkt_status st = vkt_context_precision(ctx, t->opt.precision, out, NULL, 0);
    return st == VKT_OK ? VKT_OK : trainer_fail(t, st, "%s", vkt_last_error());
}

vkt_status vkt_trainer_skipped(const vkt_trainer *t, uint64_t *skipped, float *scale)
{
    if (skipped)
        *skipped = 0;
    if (scale)
        *scale = 1.0f;
    if (!t || !t->rep)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT,
                        "vkt_trainer_skipped: not a created trainer");
    loss_scaler all = apply_scaler(t); /* sync: replica 0's; async: the replicas' summary */
    const loss_scaler *sc = &all;
    if (skipped)
        *skipped = sc->skipped;
    if (scale && sc->scaling)
        *scale = sc->scale;
    return VKT_OK;
}

vkt_status vkt_trainer_precision(const vkt_trainer *t, vkt_dtype *out, char *why,
                                 size_t why_size)
{
    vkt_context *ctx = t ? trainer_holder_context(t, 0) : NULL;
    if (!ctx)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT,
                        "vkt_trainer_precision: not a created trainer");
    return vkt_context_precision(ctx, t->opt.precision, out, why, why_size);
}

vkt_status trainer_row_bytes(char *errmsg, vkt_model *m, const vkt_tensor *input,
                             uint64_t *out)
{
    vkt_shape s;
    vkt_status st = vkt_model_shape(m, input, &s);
    if (st != VKT_OK)
        return err_fail(errmsg, st, "%s", vkt_model_errmsg(m));
    uint64_t n = 1;
    for (uint32_t d = 1; d < s.ndim; d++)
        n *= s.dims[d];
    *out = n * 4; /* fp32 and int32 alike */
    return VKT_OK;
}

vkt_status trainer_feed(char *errmsg, vkt_model *m, const vkt_feed *feeds, uint32_t n,
                        uint32_t row0, uint32_t rows, uint32_t pad_to)
{
    if (n && !feeds)
        return err_fail(errmsg, VKT_ERROR_INVALID_ARGUMENT, "feeds is NULL");
    /* every input (or labels) node the model computes from must be fed each step */
    vkt_status st = graph_model_check_fed(m, feeds, n, errmsg);
    for (uint32_t f = 0; st == VKT_OK && f < n; f++) {
        if (!feeds[f].tensor || !feeds[f].data)
            return err_fail(errmsg, VKT_ERROR_INVALID_ARGUMENT, "feed %u has no tensor or data",
                            f);
        uint64_t row = 0;
        if ((st = trainer_row_bytes(errmsg, m, feeds[f].tensor, &row)) != VKT_OK)
            return st;
        const char *src = (const char *)feeds[f].data + row0 * row;
        if (pad_to > rows) { /* evaluation's last chunk: pad with zero rows */
            char *buf = calloc(pad_to, row);
            if (!buf)
                return err_fail(errmsg, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
            memcpy(buf, src, rows * row);
            st = vkt_model_set_input(m, feeds[f].tensor, buf, pad_to * row / 4);
            free(buf);
        } else {
            st = vkt_model_set_input(m, feeds[f].tensor, src, rows * row / 4);
        }
        if (st != VKT_OK)
            return err_fail(errmsg, st, "%s", vkt_model_errmsg(m));
    }
    return st;
}

vkt_status vkt_trainer_step(vkt_trainer *t, const vkt_feed *feeds, uint32_t n_feeds,
                            float *out_loss)
{
    if (!t)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "vkt_trainer_step: trainer is NULL");
    if (t->xc) /* an exchange runs a whole fit */
        return trainer_fail(t, VKT_ERROR_STATE,
                            "vkt_trainer_step is synchronous: in async mode use vkt_trainer_fit");
    if (t->lost)
        return trainer_fail(t, VKT_ERROR_DEVICE_LOST, "%s", t->lost_msg);
    if (!t->step_checked) { /* the same data and position on every rank */
        vkt_status st = trainer_world_check_step(t, feeds, n_feeds);
        if (st != VKT_OK)
            return st;
        t->step_checked = 1;
    }
    double t0 = plat_now(), c0 = plat_cpu_time();
    t->feeds = feeds;
    t->n_feeds = n_feeds;
    t->stop = 0;
    vkt_status st = trainer_run_all(t, trainer_job_feeds);
    if (st == VKT_OK && t->exec->sync) /* every rank: the parts others hold, up to date */
        st = t->exec->sync(t);
    if (st != VKT_OK)
        return st;
    double loss = trainer_mean_loss(t);
    if (out_loss)
        *out_loss = (float)loss;
    t->steps++;
    t->stats.steps++;
    t->stats.step_seconds += plat_now() - t0;
    t->stats.host_cpu_seconds += plat_cpu_time() - c0;
    return VKT_OK;
}

vkt_status vkt_trainer_set_optimizer(vkt_trainer *t, const vkt_optimizer_options *o)
{
    if (!t || !o)
        return err_fail(t ? t->errmsg : NULL, VKT_ERROR_INVALID_ARGUMENT,
                        "vkt_trainer_set_optimizer: NULL argument");
    vkt_status st = t->exec->set_optimizer(t, o);
    if (st == VKT_OK)
        t->optim = *o;
    return st;
}

uint64_t vkt_trainer_param_count(const vkt_trainer *t) { return t ? t->param_count : 0; }

vkt_status vkt_trainer_read_replica_params(vkt_trainer *t, uint32_t replica, float *out,
                                           uint64_t count)
{
    if (!t)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "vkt_trainer_read_params: NULL");
    if (replica >= vkt_trainer_replicas(t))
        return trainer_fail(t, VKT_ERROR_INVALID_ARGUMENT, "replica %u of %u", replica,
                            vkt_trainer_replicas(t));
    return t->exec->read_flat(t, replica, out, count);
}

vkt_status vkt_trainer_read_params(vkt_trainer *t, float *out, uint64_t count)
{
    return vkt_trainer_read_replica_params(t, 0, out, count);
}

vkt_status vkt_trainer_write_params(vkt_trainer *t, const float *data, uint64_t count)
{
    if (!t)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "vkt_trainer_write_params: NULL");
    vkt_status st = t->exec->write_flat(t, data, count);
    if (st == VKT_OK) /* the caller's parameters: a new start for the divergence guard */
        trainer_guard_reset(t, data);
    return st;
}

vkt_status vkt_trainer_read(vkt_trainer *t, const vkt_tensor *param, float *out, uint64_t count)
{
    if (!t)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "vkt_trainer_read: NULL");
    return t->exec->read_param(t, param, out, count);
}

vkt_context *trainer_holder_context(const vkt_trainer *t, uint32_t i)
{
    return t->exec ? t->exec->holder(t, i) : NULL;
}

uint32_t trainer_flat_nodes(const vkt_trainer *t) { return t->exec->flat_nodes(t); }

vkt_status trainer_param_offset(const vkt_trainer *t, const vkt_tensor *param, uint64_t *off)
{
    return t->exec->param_offset(t, param, off);
}

vkt_status trainer_input_row_bytes(vkt_trainer *t, const vkt_tensor *input, uint64_t *out)
{
    return t->exec->input_row_bytes(t, input, out);
}

vkt_status vkt_trainer_stage_stats_get(vkt_trainer *t, uint32_t stage,
                                       vkt_pipeline_stage_stats *out)
{
    if (!t || !out)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "vkt_trainer_stage_stats_get: NULL "
                        "argument");
    if (!t->exec->stage_stats)
        return trainer_fail(t, VKT_ERROR_INVALID_ARGUMENT, "vkt_trainer_stage_stats_get: the "
                            "trainer has no pipeline stages (options.stages, micro_batches)");
    return t->exec->stage_stats(t, stage, out);
}

static void round_trips(const vkt_trainer *t, vkt_trainer_stats *out)
{
    vkt_context *ctx;
    for (uint32_t i = 0; (ctx = trainer_holder_context(t, i)) != NULL; i++) {
        gpu_counters c;
        gpu_context_counters(ctx, &c);
        out->holders++;
        out->submits += c.submits;
        out->fence_waits += c.fence_waits;
        out->sync_transfers += c.sync_transfers;
        out->exposed_seconds += c.idle_seconds;
    }
}

vkt_status vkt_trainer_stats_get(const vkt_trainer *t, vkt_trainer_stats *out)
{
    if (!t || !out)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "vkt_trainer_stats_get: NULL");
    *out = t->stats;
    out->average_seconds = t->avg_seconds;
    out->rank = t->rank;
    out->ranks = t->ranks;
    out->world_replicas = t->world_rep;
    for (uint32_t i = 0; i < t->n_rep && i < 64; i++) {
        out->replica[i] = t->rep[i].stats;
        out->replica[i].rows = t->rep[i].rows;
        if (t->rep[i].stats.data_wait_seconds > out->data_wait_seconds)
            out->data_wait_seconds = t->rep[i].stats.data_wait_seconds;
    }
    round_trips(t, out);
    out->average_threads = t->rd ? t->rd->ops->threads(t->rd) : 0;
    out->stage_cached = t->rep && t->rep[0].stage && !(t->rd && t->rd->ops->on_device)
                            ? gpu_buffer_host_cached(t->rep[0].stage) : -1;
    out->reducer = t->rd ? t->rd->ops->name : NULL;
    out->average_host_bytes = t->avg_host_bytes;
    out->exchange = t->xc ? t->xc->ops->name : NULL;
    if (t->mon) /* the replicas' threads count it during a fit */
        plat_monitor_lock(t->mon);
    out->exchange_host_bytes = t->xc_host_bytes;
    if (t->mon)
        plat_monitor_unlock(t->mon);
    return VKT_OK;
}
