/* trainer_checkpoint.c - saving a trainer into a checkpoint file and restoring it
 * (docs/checkpoint.md; the file's format: engine/io/checkpoint*.c). Saving reads replica 0 (the chief); restoring validates the
 * whole file and its match with the model before it changes anything, then writes every
 * replica. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "io/checkpoint.h"
#include "parallel/exec.h"
#include "platform/platform.h"

/* The parameter nodes of replica 0's model (with stages: of the whole graph). */
static uint32_t model_params(vkt_trainer *t)
{
    uint32_t n = 0, nodes = trainer_flat_nodes(t);
    for (uint32_t id = 0; id < nodes; id++) {
        graph_node_info p;
        graph_node_info_at(t->graph, id, &p);
        n += p.param != 0;
    }
    return n;
}

/* Node id when it is a parameter of the flat layout: its facts and offset. */
static int flat_param(vkt_trainer *t, uint32_t id, graph_node_info *p, uint64_t *off)
{
    graph_node_info_at(t->graph, id, p);
    return p->param && trainer_param_offset(t, graph_node_at(t->graph, id), off) == VKT_OK;
}

static vkt_status check_trainer(vkt_trainer *t, const char *fn, const char *path)
{
    if (!t || !path)
        return err_fail(t ? t->errmsg : NULL, VKT_ERROR_INVALID_ARGUMENT,
                        "%s: trainer and path are required", fn);
    if (!ckpt_host_little_endian())
        return trainer_fail(t, VKT_ERROR_INTERNAL,
                            "%s: checkpoints need a little-endian host", fn);
    if (t->lost)
        return trainer_fail(t, VKT_ERROR_DEVICE_LOST, "%s", t->lost_msg);
    return VKT_OK;
}

vkt_status trainer_read_flat(vkt_trainer *t, float *flat)
{
    if (t->live && t->xc) /* async: the shared parameters (across ranks: every shard) */
        return t->xc->ops->snapshot(t->xc, flat);
    /* copy 0's (stages: in one unpipelined model's layout) */
    return t->exec->read_flat(t, 0, flat, t->param_count);
}

/* What a checkpoint saved now would hold, read back from the device once: the flat
 * parameters and the optimizer blob. */
typedef struct snapshot {
    float *flat;
    void *opt;
    uint64_t opt_bytes;
} snapshot;

static void snapshot_free(snapshot *s)
{
    free(s->flat);
    free(s->opt);
}

static vkt_status take_snapshot(vkt_trainer *t, snapshot *s)
{
    s->flat = malloc((t->param_count ? t->param_count : 1) * sizeof *s->flat);
    s->opt_bytes = t->exec->opt_size(t);
    s->opt = malloc(s->opt_bytes ? s->opt_bytes : 1);
    vkt_status st = s->flat && s->opt ? VKT_OK : trainer_fail(t, VKT_ERROR_OUT_OF_MEMORY,
                                                              "out of host memory");
    if (st == VKT_OK)
        st = trainer_read_flat(t, s->flat);
    if (st == VKT_OK)
        st = t->exec->read_opt(t, s->opt, s->opt_bytes);
    return st;
}

/* A diverged model is never saved: it would replace the good checkpoints (and retention
 * would then delete them). Refused inside fit's progress callback, it also ends the run
 * (trainer_progress), on every rank. */
static vkt_status guard_snapshot(vkt_trainer *t, const snapshot *s)
{
    char why[VKT_ERRMSG_SIZE - 256];
    if (trainer_guard_check(t, s->flat, s->opt, s->opt_bytes, t->guard_rms, t->guard_step,
                            why, sizeof why) == VKT_OK)
        return VKT_OK;
    snprintf(t->guard_msg, sizeof t->guard_msg, "training diverged by step %llu: %s",
             (unsigned long long)vkt_trainer_checkpoint_step(t), why);
    t->guard_tripped = t->live;
    return trainer_fail(t, VKT_ERROR_DIVERGED, "%s; not saved (a smaller learning rate or "
                        "gradient clipping may help)", t->guard_msg);
}

vkt_status trainer_ckpt_check(vkt_trainer *t)
{
    snapshot s = {0};
    vkt_status st = take_snapshot(t, &s);
    if (st == VKT_OK)
        st = guard_snapshot(t, &s);
    snapshot_free(&s);
    return st;
}

static void encode_meta(vkt_trainer *t, ckpt_buf *b)
{
    size_t at = ckpt_begin_section(b, "META");
    ckpt_put_u64(b, t->live ? t->live_steps : t->steps);
    ckpt_put_u64(b, t->exec->dropout_step(t)); /* the dropout step index */
    ckpt_put_u32(b, t->n_rep);
    ckpt_put_u32(b, (uint32_t)t->opt.mode);
    ckpt_put_u32(b, t->opt.batch);
    ckpt_put_u32(b, 0);
    ckpt_end_section(b, at);

    at = ckpt_begin_section(b, "DATA");
    uint64_t epoch = 0, index = 0, seed = t->seed;
    uint32_t has = 0;
    if (t->rep[0].loader) {
        vkt_loader_position(t->rep[0].loader, &epoch, &index);
        has = 1;
    } else if (t->resume_pending) { /* restored, not trained since */
        epoch = t->resume_epoch;
        index = t->resume_batch;
        seed = t->resume_seed;
        has = 1;
    }
    ckpt_put_u32(b, has);
    ckpt_put_u32(b, 0);
    ckpt_put_u64(b, epoch);
    ckpt_put_u64(b, index);
    ckpt_put_u64(b, seed);
    ckpt_end_section(b, at);
}

static void encode(vkt_trainer *t, const snapshot *s, ckpt_buf *b)
{
    ckpt_begin(b);
    encode_meta(t, b);
    uint32_t n = model_params(t);
    size_t at = ckpt_begin_section(b, "PARM");
    ckpt_put_u32(b, n);
    ckpt_put_u32(b, 0);
    for (uint32_t id = 0; id < trainer_flat_nodes(t); id++) {
        graph_node_info p;
        uint64_t off = 0;
        if (!flat_param(t, id, &p, &off))
            continue;
        uint32_t len = (uint32_t)strlen(p.name);
        ckpt_put_u32(b, len);
        ckpt_put_bytes(b, p.name, len);
        ckpt_put_u32(b, p.shape.ndim);
        for (uint32_t d = 0; d < p.shape.ndim; d++)
            ckpt_put_u32(b, p.shape.dims[d]);
        ckpt_put_u64(b, p.count);
        ckpt_put_f32s(b, s->flat + off, p.count);
    }
    ckpt_end_section(b, at);
    at = ckpt_begin_section(b, "OPTM");
    ckpt_put_bytes(b, s->opt, s->opt_bytes);
    ckpt_end_section(b, at);
    at = ckpt_begin_section(b, "NORM"); /* the guard's reference travels with the run */
    ckpt_put_f64(b, t->guard_rms);
    ckpt_put_u64(b, t->guard_step);
    ckpt_end_section(b, at);
    loss_scaler all = apply_scaler(t); /* sync: replica 0's; async: the replicas' summary */
    const loss_scaler *sc = &all;
    if (sc->guard) { /* the scaler and skip counts go on with the run */
        at = ckpt_begin_section(b, "SCAL");
        ckpt_put_u32(b, (uint32_t)sc->scaling);
        ckpt_put_u32(b, 0);
        ckpt_put_f64(b, sc->scale);
        ckpt_put_u32(b, sc->clean);
        ckpt_put_u32(b, sc->in_a_row);
        ckpt_put_u64(b, sc->skipped);
        ckpt_end_section(b, at);
    }
    ckpt_finish(b);
}

vkt_status vkt_trainer_save(vkt_trainer *t, const char *path)
{
    vkt_status st = check_trainer(t, "vkt_trainer_save", path);
    snapshot s = {0};
    /* every rank checks its own copy (the same bits in sync mode, so the same verdict);
     * across ranks the chief alone writes */
    if (st == VKT_OK && (st = take_snapshot(t, &s)) == VKT_OK)
        st = guard_snapshot(t, &s);
    ckpt_buf b = {0};
    if (st == VKT_OK && trainer_is_chief(t)) {
        encode(t, &s, &b);
        char why[VKT_ERRMSG_SIZE];
        /* a regular file, replaced whole (a device or a pipe is refused, never replaced) */
        if (b.oom)
            st = trainer_fail(t, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
        else if (plat_write_file(path, b.p, b.n, 0, why, sizeof why) != 0)
            st = trainer_fail(t, VKT_ERROR_IO, "vkt_trainer_save: %s", why);
    }
    free(b.p);
    snapshot_free(&s);
    return st;
}

static void shape_text(const vkt_shape *s, char *buf, size_t size)
{
    size_t n = (size_t)snprintf(buf, size, "[");
    for (uint32_t d = 0; d < s->ndim && n < size; d++)
        n += (size_t)snprintf(buf + n, size - n, "%s%u", d ? "," : "", s->dims[d]);
    if (n < size)
        snprintf(buf + n, size - n, "]");
}

/* Every parameter of the model, by name and shape, in the checkpoint and nothing else;
 * builds the flat parameter array. */
static vkt_status match_params(vkt_trainer *t, const char *path, const ckpt *k, float *flat)
{
    uint32_t n = model_params(t);
    for (uint32_t id = 0; id < trainer_flat_nodes(t); id++) {
        graph_node_info p;
        uint64_t off = 0;
        if (!flat_param(t, id, &p, &off))
            continue;
        const ckpt_tensor *c = NULL;
        for (uint32_t i = 0; i < k->n_tensors && !c; i++)
            if (strcmp(k->tensors[i].name, p.name) == 0)
                c = &k->tensors[i];
        if (!c)
            return trainer_fail(t, VKT_ERROR_SHAPE, "checkpoint '%s' does not match the model: "
                                "it has no parameter '%s' (a different model?)", path,
                                p.name);
        if (c->shape.ndim != p.shape.ndim ||
            memcmp(c->shape.dims, p.shape.dims, p.shape.ndim * sizeof(uint32_t)) != 0) {
            char a[64], m[64];
            shape_text(&c->shape, a, sizeof a);
            shape_text(&p.shape, m, sizeof m);
            return trainer_fail(t, VKT_ERROR_SHAPE, "checkpoint '%s' does not match the model: "
                                "parameter '%s' has shape %s in the checkpoint and %s in the "
                                "model", path, p.name, a, m);
        }
        ckpt_read_f32s(c->data, flat + off, c->count);
    }
    if (k->n_tensors != n)
        return trainer_fail(t, VKT_ERROR_SHAPE, "checkpoint '%s' does not match the model: it "
                            "holds %u parameter tensors, the model %u", path, k->n_tensors, n);
    return VKT_OK;
}

/* The optimizer state into every replica; the first write checks the blob's header
 * (kind, size) before anything changes. */
static vkt_status restore_optimizer(vkt_trainer *t, const char *path, const ckpt *k)
{
    uint64_t want = t->exec->opt_size(t);
    if (k->opt_bytes != want)
        return trainer_fail(t, VKT_ERROR_SHAPE, "checkpoint '%s' does not match the trainer: "
                            "its optimizer state takes %llu bytes, this optimizer's %llu (a "
                            "different optimizer?)", path, (unsigned long long)k->opt_bytes,
                            (unsigned long long)want);
    void *blob = malloc(want);
    if (!blob)
        return trainer_fail(t, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    memcpy(blob, k->opt_state, want);
    vkt_status st = t->exec->write_opt(t, path, blob, want);
    free(blob);
    return st;
}

static void restore_position(vkt_trainer *t, const ckpt *k)
{
    t->steps = k->step;
    t->step_checked = 0; /* across ranks the next vkt_trainer_step compares again */
    t->exec->set_position(t, k->step, k->dropout_step);
    for (uint32_t i = 0; i < t->n_rep; i++) {
        replica *r = &t->rep[i];
        /* loaders are made again by the next fit, at the saved position */
        vkt_loader_destroy(r->loader);
        free(r->x);
        free(r->y);
        r->loader = NULL;
        r->x = NULL;
        r->y = NULL;
    }
    /* a position counts batches of the saved global batch: kept only for that batch */
    t->resume_pending = k->has_loader && k->batch == t->opt.batch;
    t->resume_epoch = k->epoch;
    t->resume_batch = k->batch_index;
    t->resume_seed = k->seed;
}

/* The guard on a parsed checkpoint (its parameters matched into flat): measured against
 * the reference it carries, or (older files) the trainer's own. */
static vkt_status guard_restored(vkt_trainer *t, const char *path, const ckpt *k,
                                 const float *flat)
{
    char why[VKT_ERRMSG_SIZE - 128];
    if (trainer_guard_check(t, flat, k->opt_state, k->opt_bytes,
                            k->has_norm ? k->norm_rms : t->guard_rms,
                            k->has_norm ? k->norm_step : t->guard_step, why,
                            sizeof why) == VKT_OK)
        return VKT_OK;
    return trainer_fail(t, VKT_ERROR_DIVERGED, "checkpoint '%s' (step %llu) holds a diverged "
                        "model: %s", path, (unsigned long long)k->step, why);
}

vkt_status trainer_ckpt_usable(void *user, const char *path, const ckpt *k, char *msg)
{
    vkt_trainer *t = user;
    float *flat = calloc(t->param_count ? t->param_count : 1, sizeof *flat);
    vkt_status st = flat ? match_params(t, path, k, flat)
                         : trainer_fail(t, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    if (st == VKT_OK)
        st = guard_restored(t, path, k, flat);
    if (st != VKT_OK)
        snprintf(msg, VKT_ERRMSG_SIZE, "%s", t->errmsg);
    free(flat);
    return st;
}

vkt_status trainer_ckpt_restore(vkt_trainer *t, const char *path, const ckpt *k)
{
    float *flat = calloc(t->param_count ? t->param_count : 1, sizeof *flat);
    if (!flat)
        return trainer_fail(t, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    vkt_status st = match_params(t, path, k, flat);
    if (st == VKT_OK)
        st = guard_restored(t, path, k, flat);
    if (st == VKT_OK)
        st = restore_optimizer(t, path, k);
    if (st == VKT_OK)
        st = t->exec->write_flat(t, flat, t->param_count);
    free(flat);
    if (st == VKT_OK) {
        restore_position(t, k);
        if (k->has_norm) { /* the run it came from goes on: its reference too */
            t->guard_rms = k->norm_rms;
            t->guard_step = k->norm_step;
        }
        t->guard_tripped = 0;
        apply_restore_scaler(t, k);
    }
    return st;
}

/* Across ranks: the chief's outcome of reading (st, found, its parsed checkpoint and
 * path) to every rank, which parses the same bytes; so no rank but the chief reads the
 * folder and every rank restores the same bits (collective). */
vkt_status trainer_ckpt_share(vkt_trainer *t, vkt_status st, int *found, ckpt *k,
                              char *path, size_t path_size)
{
    if (!t->world)
        return st;
    uint64_t head[3] = {(uint64_t)st, (uint64_t)*found, *found ? k->file_size : 0};
    vkt_status cst = trainer_world_bcast(t, head, sizeof head);
    if (cst == VKT_OK)
        cst = trainer_world_bcast(t, path, path_size);
    if (cst != VKT_OK) {
        if (t->rank == 0 && *found)
            ckpt_free(k);
        return cst;
    }
    if (head[0] != VKT_OK)
        return t->rank == 0 ? st
                            : trainer_fail(t, VKT_ERROR_REMOTE, "the chief (rank 0) could not "
                                           "restore a checkpoint (its message is in its "
                                           "output)");
    *found = (int)head[1];
    if (!*found)
        return VKT_OK;
    void *bytes = t->rank == 0 ? k->file : malloc(head[2] ? head[2] : 1);
    if (!bytes)
        return trainer_fail(t, VKT_ERROR_OUT_OF_MEMORY, "out of host memory for a checkpoint "
                            "of %llu bytes", (unsigned long long)head[2]);
    if ((cst = trainer_world_bcast(t, bytes, head[2])) != VKT_OK) {
        if (t->rank != 0)
            free(bytes);
        return cst;
    }
    if (t->rank == 0)
        return VKT_OK;
    char why[512];
    if (ckpt_parse(bytes, head[2], k, why, sizeof why) != VKT_OK) /* takes the bytes */
        return trainer_fail(t, VKT_ERROR_FORMAT, "checkpoint '%s' from the chief is corrupt "
                            "here: %s", path, why);
    return VKT_OK;
}

vkt_status vkt_trainer_restore(vkt_trainer *t, const char *path)
{
    vkt_status st = check_trainer(t, "vkt_trainer_restore", path);
    if (st != VKT_OK)
        return st;
    ckpt k = {0};
    int found = 1;
    char where[CKPT_PATH_SIZE];
    snprintf(where, sizeof where, "%s", path);
    if (trainer_is_chief(t))
        st = ckpt_load(path, &k, t->errmsg);
    if ((st = trainer_ckpt_share(t, st, &found, &k, where, sizeof where)) != VKT_OK)
        return st;
    st = trainer_ckpt_restore(t, where, &k);
    ckpt_free(&k);
    return st;
}

vkt_status vkt_trainer_check_divergence(vkt_trainer *t)
{
    if (!t)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT,
                        "vkt_trainer_check_divergence: trainer is NULL");
    if (t->lost)
        return trainer_fail(t, VKT_ERROR_DEVICE_LOST, "%s", t->lost_msg);
    vkt_status st = trainer_ckpt_check(t);
    return st == VKT_ERROR_DIVERGED ? trainer_fail(t, st, "%s (a smaller learning rate or "
                                                   "gradient clipping may help)", t->guard_msg)
                                    : st;
}

uint64_t vkt_trainer_checkpoint_step(const vkt_trainer *t)
{
    return t ? (t->live ? t->live_steps : t->steps) : 0;
}
