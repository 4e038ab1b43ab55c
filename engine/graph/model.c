/* model.c - compiling a graph for a context: shapes at the model's batch, analysis
 * (autodiff.c), the memory plan (plan.c), and one flat buffer per category: parameters
 * (initialized here), gradients, the activation arena, inputs, and the control block. */
#include "graph/model.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

vkt_status model_fail(vkt_model *m, vkt_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    err_failv(m ? m->errmsg : NULL, st, fmt, ap);
    va_end(ap);
    return st;
}

vkt_status model_ctx_fail(vkt_model *m, vkt_status st)
{
    return model_fail(m, st, "%s", m->ctx->errmsg);
}

int32_t model_new_value(vkt_model *m, mspace space, uint64_t count)
{
    if (m->n_val == m->cap_val) {
        uint32_t cap = m->cap_val ? 2 * m->cap_val : 64;
        mval *v = realloc(m->val, cap * sizeof *v);
        if (!v)
            return -1;
        m->val = v;
        m->cap_val = cap;
    }
    m->val[m->n_val] = (mval){space, 0, count, -1, 0, 0, 0, VKT_DTYPE_FP32};
    return (int32_t)m->n_val++;
}

int32_t model_new_typed(vkt_model *m, mspace space, vkt_dtype dtype, uint64_t elems)
{
    int32_t v = model_new_value(m, space, (elems * vkt_dtype_size(dtype) + 3) / 4);
    if (v >= 0)
        m->val[v].dtype = dtype;
    return v;
}

int32_t model_root(const vkt_model *m, int32_t v)
{
    while (v >= 0 && m->val[v].alias >= 0)
        v = m->val[v].alias;
    return v;
}

vkt_view model_view(const vkt_model *m, int32_t v)
{
    int32_t r = model_root(m, v);
    if (r < 0)
        return (vkt_view){NULL, 0};
    const mval *x = &m->val[r];
    vkt_buffer *b = NULL;
    switch (x->space) {
    case MS_ARENA: b = m->arena; break;
    case MS_PARAMS: b = m->params; break;
    case MS_GRADS: b = m->grads; break;
    case MS_INPUTS: b = m->inputs; break;
    case MS_CTRL: b = m->ctrl; break;
    default: return (vkt_view){NULL, 0};
    }
    /* offsets are in 4-byte units (ALIGN_ELEMS-aligned): exact in any smaller type's */
    return (vkt_view){b, x->offset * 4 / vkt_dtype_size(x->dtype)};
}

/* Shapes of every node at the model's batch: inputs take it as their first dimension,
 * and every op's shape rule runs again. */
static vkt_status infer_shapes(vkt_model *m)
{
    for (uint32_t i = 0; i < m->n; i++) {
        const vkt_tensor *t = m->g->nodes[i];
        m->batch_major[i] = (uint8_t)graph_batch_major(t, m->batch_major);
        if (t->n_in == 0) {
            m->shape[i] = t->shape;
            if (t->op != GOP_PARAM && m->batch_override)
                m->shape[i].dims[0] = m->batch;
        } else {
            const vkt_shape *in[GRAPH_MAX_INPUTS];
            for (uint32_t k = 0; k < t->n_in; k++)
                in[k] = &m->shape[t->in[k]->id];
            char msg[VKT_ERRMSG_SIZE];
            vkt_status st = graph_infer_shape(t, in, &m->shape[i], msg, sizeof msg);
            if (st != VKT_OK)
                return model_fail(m, st, "at batch %u: %s", m->batch, msg);
        }
        m->count[i] = graph_count(&m->shape[i]);
        if (m->count[i] > UINT32_MAX)
            return model_fail(m, VKT_ERROR_LIMIT, "tensor '%s' has %llu elements; at most "
                              "2^32 - 1 are supported", t->name,
                              (unsigned long long)m->count[i]);
    }
    return VKT_OK;
}

/* The batch the graph's inputs were built with (the first input's first dimension). */
static uint32_t built_batch(const vkt_graph *g)
{
    for (uint32_t i = 0; i < g->count; i++)
        if (g->nodes[i]->op == GOP_INPUT || g->nodes[i]->op == GOP_LABELS)
            return g->nodes[i]->shape.dims[0];
    return 1;
}

static int mapped_directly(const vkt_buffer *b)
{
    return b->mapped && !b->ctx->force_staging;
}

static vkt_status make_buffer(vkt_model *m, uint64_t elems, gpu_memory_use use,
                              vkt_buffer **out)
{
    vkt_status st = gpu_buffer_create(m->ctx, (elems ? elems : ALIGN_ELEMS) * 4, use, out);
    return st == VKT_OK ? VKT_OK : model_ctx_fail(m, st);
}

static vkt_status zero_buffer(vkt_model *m, vkt_buffer *b)
{
    void *z = calloc(1, b->size);
    if (!z)
        return model_fail(m, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    vkt_status st = vkt_buffer_write(b, 0, z, b->size);
    free(z);
    return st == VKT_OK ? VKT_OK : model_ctx_fail(m, st);
}

static vkt_status init_params(vkt_model *m)
{
    vkt_status st = zero_buffer(m, m->params); /* the gaps between parameters stay 0 */
    for (uint32_t i = 0; i < m->n && st == VKT_OK; i++) {
        const vkt_tensor *t = m->g->nodes[i];
        if (t->op != GOP_PARAM)
            continue;
        float *host = malloc(m->count[i] * sizeof *host);
        if (!host)
            return model_fail(m, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
        graph_init_param(t, m->g->seed, host);
        st = vkt_buffer_write(m->params, m->val[m->node[i].val].offset * 4, host,
                              m->count[i] * 4);
        free(host);
        if (st != VKT_OK)
            st = model_ctx_fail(m, st);
    }
    return st;
}

/* Check mode: every arena root value gets its own place in the snapshot buffer. */
static vkt_status make_snapshots(vkt_model *m)
{
    m->snap_off = malloc((m->n_val ? m->n_val : 1) * sizeof *m->snap_off);
    if (!m->snap_off)
        return model_fail(m, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    uint64_t total = 0;
    for (uint32_t v = 0; v < m->n_val; v++) {
        const mval *r = &m->val[v];
        m->snap_off[v] = total;
        if (r->alias < 0 && r->space == MS_ARENA)
            total += (r->count + ALIGN_ELEMS - 1) / ALIGN_ELEMS * ALIGN_ELEMS;
    }
    return make_buffer(m, total, GPU_USE_DEVICE, &m->snap);
}

/* The readback buffer (model.h) and each kept value's and input gradient's place in it. */
static vkt_status make_readback(vkt_model *m)
{
    m->rb_val = malloc((m->n ? m->n : 1) * sizeof *m->rb_val);
    m->rb_grad = malloc((m->n ? m->n : 1) * sizeof *m->rb_grad);
    if (!m->rb_val || !m->rb_grad)
        return model_fail(m, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    uint64_t total = 0;
    for (uint32_t i = 0; i < m->n; i++) {
        const mnode *nd = &m->node[i];
        int32_t v = nd->active && nd->val >= 0 && m->t[i]->n_in ? model_root(m, nd->val) : -1;
        int32_t g = m->grad_input && m->grad_input[i] && nd->grad >= 0 ? model_root(m, nd->grad)
                                                                       : -1;
        m->rb_val[i] = m->rb_grad[i] = UINT64_MAX;
        if (v >= 0 && m->val[v].kept && m->val[v].space == MS_ARENA) {
            m->rb_val[i] = total;
            total += (m->val[v].count + ALIGN_ELEMS - 1) / ALIGN_ELEMS * ALIGN_ELEMS;
        }
        if (g >= 0 && m->val[g].space == MS_ARENA) {
            m->rb_grad[i] = total;
            total += (m->val[g].count + ALIGN_ELEMS - 1) / ALIGN_ELEMS * ALIGN_ELEMS;
        }
    }
    return total ? make_buffer(m, total, GPU_USE_HOST, &m->readback) : VKT_OK;
}

static vkt_status make_buffers(vkt_model *m)
{
    vkt_status st = VKT_OK;
    if (m->param_owner) {
        m->params = m->param_owner->params;
    } else {
        st = make_buffer(m, m->param_elems, GPU_USE_DEVICE, &m->params);
        if (st == VKT_OK)
            st = init_params(m);
    }
    if (st == VKT_OK && m->grad_owner) {
        m->grads = m->grad_owner->grads; /* a slot model (GRAPH_MODEL_SHARE_GRADS) */
    } else if (st == VKT_OK && m->training) {
        st = make_buffer(m, m->param_elems, GPU_USE_DEVICE, &m->grads);
        if (st == VKT_OK) /* gradients of parameters the loss does not reach stay 0 */
            st = zero_buffer(m, m->grads);
    }
    /* The activations and inputs where the host can reach them directly if the device
     * offers that (gpu.h: GPU_USE_SHARED); else kept values, input gradients and the loss
     * come back through the readback buffer and the control block, and inputs go up
     * through a staging buffer, each copied by the run's own submission. */
    if (st == VKT_OK)
        st = make_buffer(m, m->arena_elems, GPU_USE_SHARED, &m->arena);
    if (st == VKT_OK && m->check)
        st = make_snapshots(m);
    if (st == VKT_OK && !mapped_directly(m->arena))
        st = make_readback(m);
    if (st == VKT_OK)
        st = make_buffer(m, m->input_elems, GPU_USE_SHARED, &m->inputs);
    if (st == VKT_OK && !mapped_directly(m->inputs)) {
        m->inputs_staged = 1;
        st = make_buffer(m, m->input_elems, GPU_USE_HOST, &m->staging);
    }
    if (st == VKT_OK)
        st = make_buffer(m, CTRL_ELEMS, GPU_USE_HOST, &m->ctrl);
    if (st == VKT_OK) {
        float one = 1.0f;
        memset(m->ctrl->mapped, 0, CTRL_ELEMS * 4);
        memcpy((char *)m->ctrl->mapped + CTRL_ONE * 4, &one, 4);
        m->loss_staged = !mapped_directly(m->arena);
    }
    if (st == VKT_OK && (st = vkt_stream_create(m->ctx, NULL, &m->train)) == VKT_OK)
        st = vkt_stream_create(m->ctx, NULL, &m->eval);
    if (st != VKT_OK && !m->errmsg[0])
        st = model_ctx_fail(m, st);
    return st;
}

static vkt_status check_args(vkt_context *ctx, vkt_graph *g, vkt_tensor *loss,
                             const vkt_model_options *o)
{
    static const char fn[] = "vkt_model_create";
    if (!ctx || !g)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "%s: context or graph is NULL", fn);
    if (g->status != VKT_OK)
        return err_fail(NULL, g->status, "%s: the graph has an error: %s", fn, g->errmsg);
    if (g->count == 0)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "%s: the graph is empty", fn);
    if (loss && loss->graph != g)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "%s: the loss belongs to another "
                        "graph", fn);
    if (loss && graph_count(&loss->shape) != 1)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "%s: the loss '%s' is not a scalar "
                        "(shape has %llu elements)", fn, loss->name,
                        (unsigned long long)graph_count(&loss->shape));
    if (o && o->share_params && (o->share_params->g != g || o->share_params->ctx != ctx))
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "%s: share_params is a model of "
                        "another graph or context", fn);
    return VKT_OK;
}

static int env_check(void)
{
    const char *e = getenv("VKT_CHECK");
    return e && e[0] && strcmp(e, "0") != 0;
}

int graph_check_asked(int option) { return option || env_check(); }

vkt_status vkt_model_create(vkt_context *ctx, vkt_graph *g, vkt_tensor *loss,
                            const vkt_model_options *options, vkt_model **out)
{
    return graph_model_create(ctx, g, loss, options, NULL, 0, 0, out);
}

/* A slot model (GRAPH_MODEL_SHARE_GRADS): share_params is a training model of the same
 * flags, and this one trains. */
static vkt_status check_slot(vkt_tensor *loss, const vkt_model_options *o, uint32_t flags)
{
    if (!(flags & GRAPH_MODEL_SHARE_GRADS))
        return VKT_OK;
    const vkt_model *sh = o ? o->share_params : NULL;
    if (!sh || !sh->training || !loss || o->forward_only ||
        (flags & GRAPH_MODEL_ACCUMULATE) != (sh->accumulate ? GRAPH_MODEL_ACCUMULATE : 0u))
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "graph_model_create: sharing "
                        "gradients needs share_params, a training model of the same flags, "
                        "and a training model");
    return VKT_OK;
}

/* grad_inputs must be vkt_input nodes of g, and the model must train. */
static vkt_status check_grad_inputs(vkt_graph *g, vkt_tensor *loss, const vkt_model_options *o,
                                    const vkt_tensor *const *in, uint32_t n)
{
    static const char fn[] = "graph_model_create";
    if (n && (!in || !loss || (o && o->forward_only)))
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "%s: input gradients need a "
                        "training model and a list of inputs", fn);
    for (uint32_t k = 0; k < n; k++)
        if (!in[k] || in[k]->graph != g || in[k]->op != GOP_INPUT)
            return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "%s: grad_inputs[%u] is not an "
                            "fp32 input of this graph", fn, k);
    return VKT_OK;
}

vkt_status graph_model_create(vkt_context *ctx, vkt_graph *g, vkt_tensor *loss,
                              const vkt_model_options *options,
                              const vkt_tensor *const *grad_inputs, uint32_t n_grad_inputs,
                              uint32_t flags, vkt_model **out)
{
    if (!out)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "vkt_model_create: out is NULL");
    *out = NULL;
    vkt_status st = check_args(ctx, g, loss, options);
    if (st == VKT_OK)
        st = check_grad_inputs(g, loss, options, grad_inputs, n_grad_inputs);
    if (st == VKT_OK)
        st = check_slot(loss, options, flags);
    if (st != VKT_OK)
        return st;
    vkt_model_options o;
    memset(&o, 0, sizeof o);
    if (options)
        o = *options;
    vkt_model *m = calloc(1, sizeof *m);
    if (!m)
        return err_fail(NULL, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    m->ctx = ctx;
    m->g = g;
    m->n = g->count;
    m->batch = o.batch ? o.batch : built_batch(g);
    m->batch_override = o.batch != 0;
    m->row_offset = o.row_offset;
    m->loss = loss;
    m->training = loss && !o.forward_only;
    m->check = o.check || env_check();
    m->no_reuse = o.no_memory_reuse;
    m->no_fusion = o.no_fusion;
    m->accumulate = (flags & GRAPH_MODEL_ACCUMULATE) != 0;
    /* check mode compares every op with its fp32 reference: it runs unautocast */
    m->precision = m->check ? VKT_DTYPE_FP32 : o.precision;
    m->param_owner = o.share_params ? (o.share_params->param_owner ? o.share_params->param_owner
                                                                   : o.share_params)
                                    : NULL;
    if (flags & GRAPH_MODEL_SHARE_GRADS)
        m->grad_owner = o.share_params->grad_owner ? o.share_params->grad_owner
                                                   : o.share_params;
    m->corrupt_node = -1;
    m->debug_drop_access = -1;
    m->shape = calloc(m->n, sizeof *m->shape);
    m->count = calloc(m->n, sizeof *m->count);
    m->node = calloc(m->n, sizeof *m->node);
    m->t = calloc(m->n ? m->n : 1, sizeof *m->t);
    m->fused = calloc(m->n ? m->n : 1, sizeof *m->fused);
    m->cast = calloc(m->n ? m->n : 1, sizeof *m->cast);
    m->batch_major = calloc(m->n, sizeof *m->batch_major);
    if (n_grad_inputs && (m->grad_input = calloc(m->n, 1)) != NULL)
        for (uint32_t k = 0; k < n_grad_inputs; k++)
            m->grad_input[grad_inputs[k]->id] = 1;
    if (!m->shape || !m->count || !m->node || !m->batch_major || !m->t || !m->fused || !m->cast ||
        (n_grad_inputs && !m->grad_input))
        st = model_fail(m, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    if (st == VKT_OK)
        st = infer_shapes(m);
    if (st == VKT_OK)
        st = model_analyze(m);
    if (st == VKT_OK)
        st = model_plan(m);
    if (st == VKT_OK)
        st = make_buffers(m);
    if (st != VKT_OK) {
        err_fail(NULL, st, "vkt_model_create: %s", m->errmsg);
        vkt_model_destroy(m);
        return st;
    }
    *out = m;
    return VKT_OK;
}

void vkt_model_destroy(vkt_model *m)
{
    if (!m)
        return;
    graph_model_settle(m); /* a run in flight (no_wait) ends before its buffers go */
    vkt_stream_destroy(m->train);
    vkt_stream_destroy(m->eval);
    vkt_stream_destroy(m->train_fwd);
    vkt_stream_destroy(m->half[0]);
    vkt_stream_destroy(m->half[1]);
    vkt_stream_destroy(m->hooks_stream);
    vkt_stream_destroy(m->zero);
    free(m->check_prior);
    if (!m->param_owner)
        vkt_buffer_destroy(m->params);
    if (!m->grad_owner)
        vkt_buffer_destroy(m->grads);
    vkt_buffer_destroy(m->arena);
    vkt_buffer_destroy(m->snap);
    free(m->snap_off);
    vkt_buffer_destroy(m->readback);
    free(m->rb_val);
    free(m->rb_grad);
    free(m->dev_fed);
    vkt_buffer_destroy(m->inputs);
    vkt_buffer_destroy(m->staging);
    vkt_buffer_destroy(m->ctrl);
    free(m->shape);
    free(m->count);
    free(m->batch_major);
    free(m->node);
    free(m->t);
    free(m->fused);
    free(m->cast);
    free(m->grad_input);
    free(m->val);
    free(m->order);
    free(m->steps);
    free(m);
}

const char *vkt_model_errmsg(const vkt_model *m) { return m ? m->errmsg : "model is NULL"; }

uint32_t vkt_model_batch(const vkt_model *m) { return m ? m->batch : 0; }

uint64_t model_row_units(const vkt_model *m, uint32_t node, uint64_t units)
{
    return graph_row_shift(m->batch_major[node], 1, m->batch, units);
}

vkt_status vkt_model_shape(const vkt_model *m, const vkt_tensor *t, vkt_shape *out)
{
    if (out)
        *out = (vkt_shape){0, {0}};
    if (!m || !t || !out || t->graph != m->g || t->id >= m->n)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT,
                        "vkt_model_shape: not a tensor of this model");
    *out = m->shape[t->id];
    return VKT_OK;
}

void graph_model_set_loss_scale(vkt_model *m, float s)
{
    if (m && m->ctrl)
        memcpy((char *)m->ctrl->mapped + CTRL_ONE * 4, &s, 4);
}
