/* model_io.c - moving data between the host and a model: inputs before a step, the
 * loss, tensors, parameters and gradients (one tensor, or the whole flat buffers). */
#include "graph/model.h"

#include <string.h>

/* A tensor of this model's graph, known when the model was compiled. */
static vkt_status tensor_ok(vkt_model *m, const char *fn, const vkt_tensor *t, uint64_t count,
                            const void *data)
{
    if (!t || !data)
        return model_fail(m, VKT_ERROR_INVALID_ARGUMENT, "%s: tensor or data is NULL", fn);
    if (t->graph != m->g || t->id >= m->n)
        return model_fail(m, VKT_ERROR_INVALID_ARGUMENT,
                          "%s: '%s' is not a tensor of this model's graph (or was added after "
                          "the model was made)", fn, t->name);
    if (count != m->count[t->id])
        return model_fail(m, VKT_ERROR_SHAPE,
                          "%s: '%s' has %llu elements at batch %u; %llu given", fn, t->name,
                          (unsigned long long)m->count[t->id], m->batch,
                          (unsigned long long)count);
    return VKT_OK;
}

/* Classes of the loss reading `labels` (0 if none): its input 0's last dimension. */
static uint32_t classes_of(const vkt_model *m, const vkt_tensor *labels)
{
    for (uint32_t i = 0; i < m->n; i++) {
        const vkt_tensor *t = m->g->nodes[i];
        if ((GRAPH_DEF(t)->flags & OPF_LABELS_IN1) && t->in[1] == labels) {
            const vkt_shape *z = &m->shape[t->in[0]->id];
            return z->dims[z->ndim - 1];
        }
    }
    return 0;
}

/* Rows of the smallest embedding table that `ids` indexes (0 if it feeds none). */
static uint32_t vocab_of(const vkt_model *m, const vkt_tensor *ids)
{
    uint32_t vocab = 0;
    for (uint32_t i = 0; i < m->n; i++) {
        const vkt_tensor *t = m->g->nodes[i];
        if (!(GRAPH_DEF(t)->flags & OPF_IDS_IN0) || t->in[0] != ids || !m->node[i].active)
            continue;
        uint32_t rows = m->shape[t->in[1]->id].dims[0];
        if (vocab == 0 || rows < vocab)
            vocab = rows;
    }
    return vocab;
}

/* Token ids must be exact integers in [0, vocab): the kernel cannot report a bad one. */
static vkt_status check_ids(vkt_model *m, const vkt_tensor *t, const float *ids, uint64_t count)
{
    uint32_t vocab = vocab_of(m, t);
    for (uint64_t i = 0; vocab && i < count; i++)
        if (!(ids[i] >= 0 && ids[i] < (float)vocab && ids[i] == (float)(uint32_t)ids[i]))
            return model_fail(m, VKT_ERROR_INVALID_ARGUMENT,
                              "vkt_model_set_input: token id %g at position %llu of '%s' is "
                              "not an integer in [0, %u) (the embedding's vocabulary)",
                              (double)ids[i], (unsigned long long)i, t->name, vocab);
    return VKT_OK;
}

/* vkt_model_set_input's checks (fn names the caller in messages). */
static vkt_status input_ok(vkt_model *m, const char *fn, const vkt_tensor *t, const void *data,
                           uint64_t count)
{
    if (!m)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "%s: model is NULL", fn);
    vkt_status st = tensor_ok(m, fn, t, count, data);
    if (st != VKT_OK)
        return st;
    if (t->op != GOP_INPUT && t->op != GOP_LABELS)
        return model_fail(m, VKT_ERROR_INVALID_ARGUMENT, "%s: '%s' is not an input", fn,
                          t->name);
    if (t->op == GOP_LABELS) {
        const int32_t *l = data;
        uint32_t classes = classes_of(m, t);
        for (uint64_t i = 0; i < count; i++)
            if (l[i] < 0 || (classes && (uint32_t)l[i] >= classes))
                return model_fail(m, VKT_ERROR_INVALID_ARGUMENT,
                                  "%s: label %d at position %llu of '%s' is outside [0, %u)",
                                  fn, l[i], (unsigned long long)i, t->name, classes);
    } else if ((st = check_ids(m, t, data, count)) != VKT_OK) {
        return st;
    }
    return VKT_OK;
}

vkt_status graph_model_check_input(vkt_model *m, const vkt_tensor *t, const void *data,
                                   uint64_t count)
{
    return input_ok(m, "vkt_model_set_input", t, data, count);
}

vkt_status vkt_model_set_input(vkt_model *m, const vkt_tensor *t, const void *data,
                               uint64_t count)
{
    vkt_status st = input_ok(m, "vkt_model_set_input", t, data, count);
    if (st == VKT_OK)
        st = graph_model_settle(m); /* its memory may be in use */
    if (st != VKT_OK)
        return st;
    uint64_t offset = m->val[m->node[t->id].val].offset * 4;
    if (m->inputs_staged && !(m->dev_fed && m->dev_fed[t->id])) { /* dev_fed: no staged copy */
        memcpy((char *)m->staging->mapped + offset, data, count * 4);
        return VKT_OK;
    }
    st = vkt_buffer_write(m->inputs, offset, data, count * 4);
    return st == VKT_OK ? VKT_OK : model_ctx_fail(m, st);
}

vkt_status vkt_model_loss(vkt_model *m, float *out)
{
    if (!m || !out)
        return err_fail(m ? m->errmsg : NULL, VKT_ERROR_INVALID_ARGUMENT,
                        "vkt_model_loss: NULL argument");
    if (!m->loss)
        return model_fail(m, VKT_ERROR_STATE, "vkt_model_loss: the model has no loss");
    vkt_status st = graph_model_settle(m);
    if (st != VKT_OK)
        return st;
    if (m->loss_staged) {
        memcpy(out, (const char *)m->ctrl->mapped + CTRL_LOSS * 4, 4);
        return VKT_OK;
    }
    return vkt_model_read(m, m->loss, out, 1);
}

/* Whether t's value lives to the end of a run (an input, or a computed value kept). */
static vkt_status readable(vkt_model *m, const char *fn, const vkt_tensor *t)
{
    const mnode *nd = &m->node[t->id];
    if (t->n_in == 0)
        return VKT_OK;
    if (!nd->active)
        return model_fail(m, VKT_ERROR_STATE, "%s: '%s' is not computed by this model "
                          "(not needed by the loss or a kept tensor)", fn, t->name);
    if (nd->val < 0)
        return model_fail(m, VKT_ERROR_STATE, "%s: '%s' is fused into '%s' and never "
                          "stored; mark it with vkt_keep to read it", fn, t->name,
                          m->g->nodes[nd->fused_into]->name);
    if (!m->no_reuse && !m->val[model_root(m, nd->val)].kept)
        return model_fail(m, VKT_ERROR_STATE, "%s: the memory of '%s' is reused during "
                          "the step; mark it with vkt_keep to read it", fn, t->name);
    return VKT_OK;
}

vkt_status vkt_model_read(vkt_model *m, const vkt_tensor *t, float *out, uint64_t count)
{
    static const char fn[] = "vkt_model_read";
    if (!m)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "%s: model is NULL", fn);
    vkt_status st = tensor_ok(m, fn, t, count, out);
    if (st != VKT_OK)
        return st;
    if ((st = graph_model_settle(m)) != VKT_OK)
        return st;
    if ((st = readable(m, fn, t)) != VKT_OK)
        return st;
    const mnode *nd = &m->node[t->id];
    vkt_view v = model_view(m, nd->val);
    if (m->inputs_staged && v.buffer == m->inputs && !(m->dev_fed && m->dev_fed[t->id])) {
        /* the latest data is in staging */
        memcpy(out, (const float *)m->staging->mapped + v.offset, count * 4);
        return VKT_OK;
    }
    if (m->readback && m->rb_val[t->id] != UINT64_MAX) { /* copied by the run itself */
        memcpy(out, (const float *)m->readback->mapped + m->rb_val[t->id], count * 4);
        return VKT_OK;
    }
    st = vkt_buffer_read(v.buffer, v.offset * 4, out, count * 4);
    return st == VKT_OK ? VKT_OK : model_ctx_fail(m, st);
}

static vkt_status param_ok(vkt_model *m, const char *fn, const vkt_tensor *t, uint64_t count,
                           const void *data)
{
    if (!m)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "%s: model is NULL", fn);
    vkt_status st = tensor_ok(m, fn, t, count, data);
    if (st == VKT_OK && t->op != GOP_PARAM)
        st = model_fail(m, VKT_ERROR_INVALID_ARGUMENT, "%s: '%s' is not a parameter", fn,
                        t->name);
    return st;
}

vkt_status vkt_model_write(vkt_model *m, const vkt_tensor *t, const float *data, uint64_t count)
{
    vkt_status st = param_ok(m, "vkt_model_write", t, count, data);
    if (st != VKT_OK)
        return st;
    if ((st = graph_model_settle(m)) != VKT_OK)
        return st;
    st = vkt_buffer_write(m->params, m->val[m->node[t->id].val].offset * 4, data, count * 4);
    return st == VKT_OK ? VKT_OK : model_ctx_fail(m, st);
}

vkt_status vkt_model_read_grad(vkt_model *m, const vkt_tensor *t, float *out, uint64_t count)
{
    vkt_status st = param_ok(m, "vkt_model_read_grad", t, count, out);
    if (st != VKT_OK)
        return st;
    if ((st = graph_model_settle(m)) != VKT_OK)
        return st;
    if (!m->grads)
        return model_fail(m, VKT_ERROR_STATE, "vkt_model_read_grad: forward-only model");
    st = vkt_buffer_read(m->grads, m->val[m->node[t->id].val].offset * 4, out, count * 4);
    return st == VKT_OK ? VKT_OK : model_ctx_fail(m, st);
}

uint64_t vkt_model_param_count(const vkt_model *m) { return m ? m->param_elems : 0; }

vkt_status vkt_model_param_offset(const vkt_model *m, const vkt_tensor *t, uint64_t *out)
{
    if (out)
        *out = 0;
    if (!m || !t || !out || t->graph != m->g || t->id >= m->n || t->op != GOP_PARAM)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT,
                        "vkt_model_param_offset: not a parameter of this model");
    *out = m->val[m->node[t->id].val].offset;
    return VKT_OK;
}

/* Whole-buffer transfers of the flat parameters or gradients. */
static vkt_status flat_io(vkt_model *m, const char *fn, int grads, void *data, uint64_t count,
                          int write)
{
    if (!m || !data)
        return err_fail(m ? m->errmsg : NULL, VKT_ERROR_INVALID_ARGUMENT, "%s: NULL argument",
                        fn);
    if (count != m->param_elems)
        return model_fail(m, VKT_ERROR_SHAPE, "%s: the flat buffer has %llu elements; %llu "
                          "given", fn, (unsigned long long)m->param_elems,
                          (unsigned long long)count);
    vkt_buffer *b = grads ? m->grads : m->params;
    if (!b)
        return model_fail(m, VKT_ERROR_STATE, "%s: forward-only model", fn);
    vkt_status settled = graph_model_settle(m);
    if (settled != VKT_OK)
        return settled;
    vkt_status st = write ? vkt_buffer_write(b, 0, data, count * 4)
                          : vkt_buffer_read(b, 0, data, count * 4);
    return st == VKT_OK ? VKT_OK : model_ctx_fail(m, st);
}

vkt_status vkt_model_read_params(vkt_model *m, float *out, uint64_t count)
{
    return flat_io(m, "vkt_model_read_params", 0, out, count, 0);
}

vkt_status vkt_model_write_params(vkt_model *m, const float *data, uint64_t count)
{
    return flat_io(m, "vkt_model_write_params", 0, (void *)data, count, 1);
}

vkt_status vkt_model_read_grads(vkt_model *m, float *out, uint64_t count)
{
    return flat_io(m, "vkt_model_read_grads", 1, out, count, 0);
}

vkt_status vkt_model_write_grads(vkt_model *m, const float *data, uint64_t count)
{
    return flat_io(m, "vkt_model_write_grads", 1, (void *)data, count, 1);
}

vkt_status graph_model_read_input_grad(vkt_model *m, const vkt_tensor *t, float *out,
                                       uint64_t count)
{
    static const char fn[] = "graph_model_read_input_grad";
    if (!m || !t || !out || t->graph != m->g || t->id >= m->n)
        return err_fail(m ? m->errmsg : NULL, VKT_ERROR_INVALID_ARGUMENT,
                        "%s: not a tensor of this model", fn);
    const mnode *nd = &m->node[t->id];
    if (!m->grad_input || !m->grad_input[t->id] || nd->grad < 0)
        return model_fail(m, VKT_ERROR_STATE, "%s: '%s' is not an input whose gradient this "
                          "model computes", fn, t->name);
    if (count != m->count[t->id])
        return model_fail(m, VKT_ERROR_SHAPE, "%s: '%s' has %llu elements, not %llu", fn,
                          t->name, (unsigned long long)m->count[t->id],
                          (unsigned long long)count);
    vkt_status settled = graph_model_settle(m);
    if (settled != VKT_OK)
        return settled;
    if (m->readback && m->rb_grad[t->id] != UINT64_MAX) { /* copied by the run itself */
        memcpy(out, (const float *)m->readback->mapped + m->rb_grad[t->id], count * 4);
        return VKT_OK;
    }
    vkt_view v = model_view(m, nd->grad);
    vkt_status st = vkt_buffer_read(v.buffer, v.offset * 4, out, count * 4);
    return st == VKT_OK ? VKT_OK : model_ctx_fail(m, st);
}

/* ---- views for device copies (graph_model_value_view and the two after it) ---- */

static vkt_status view_of(vkt_model *m, const char *fn, const vkt_tensor *t, int32_t v,
                          vkt_view *out)
{
    if (m->val[model_root(m, v)].dtype != VKT_DTYPE_FP32)
        return model_fail(m, VKT_ERROR_STATE, "%s: '%s' is not stored in fp32", fn, t->name);
    *out = model_view(m, v);
    return VKT_OK;
}

static vkt_status tensor_here(vkt_model *m, const char *fn, const vkt_tensor *t, vkt_view *out)
{
    if (!m || !t || !out || t->graph != m->g || t->id >= m->n)
        return err_fail(m ? m->errmsg : NULL, VKT_ERROR_INVALID_ARGUMENT,
                        "%s: not a tensor of this model", fn);
    return VKT_OK;
}

vkt_status graph_model_value_view(vkt_model *m, const vkt_tensor *t, vkt_view *out)
{
    static const char fn[] = "graph_model_value_view";
    vkt_status st = tensor_here(m, fn, t, out);
    if (st == VKT_OK)
        st = readable(m, fn, t);
    return st == VKT_OK ? view_of(m, fn, t, m->node[t->id].val, out) : st;
}

vkt_status graph_model_input_grad_view(vkt_model *m, const vkt_tensor *t, vkt_view *out)
{
    static const char fn[] = "graph_model_input_grad_view";
    vkt_status st = tensor_here(m, fn, t, out);
    if (st != VKT_OK)
        return st;
    if (!m->grad_input || !m->grad_input[t->id] || m->node[t->id].grad < 0)
        return model_fail(m, VKT_ERROR_STATE, "%s: '%s' is not an input whose gradient this "
                          "model computes", fn, t->name);
    return view_of(m, fn, t, m->node[t->id].grad, out);
}

vkt_status graph_model_input_view(vkt_model *m, const vkt_tensor *t, vkt_view *out)
{
    static const char fn[] = "graph_model_input_view";
    vkt_status st = tensor_here(m, fn, t, out);
    if (st != VKT_OK)
        return st;
    if ((t->op != GOP_INPUT && t->op != GOP_LABELS) || m->node[t->id].val < 0)
        return model_fail(m, VKT_ERROR_STATE, "%s: '%s' is not an input of this model", fn,
                          t->name);
    const mval *v = &m->val[m->node[t->id].val];
    if (v->dtype != VKT_DTYPE_FP32)
        return model_fail(m, VKT_ERROR_STATE, "%s: '%s' is not stored in fp32", fn, t->name);
    int staged = m->inputs_staged && !(m->dev_fed && m->dev_fed[t->id]);
    out->buffer = staged ? m->staging : m->inputs;
    out->offset = v->offset; /* 4-byte units: as vkt_model_set_input writes it */
    return VKT_OK;
}
