/* profile.c - vkt_model_profile: every step of a model recorded into a stream with
 * timestamps, the dispatch range of each step noted, and the device times summed per
 * step over several runs. */
#include "graph/model.h"

#include <stdlib.h>
#include <stdio.h>
#include <string.h>

/* Records node steps [0, n) into s; first[k] is the dispatch index step k starts at. */
static vkt_status record_steps(vkt_model *m, vkt_stream *s, uint32_t n, uint32_t *first)
{
    vkt_status st = VKT_OK;
    if (m->inputs_staged)
        st = model_record_staged_inputs(m, s);
    for (uint32_t k = 0; k < n && st == VKT_OK; k++) {
        vkt_stream_stats ss;
        vkt_stream_stats_get(s, &ss);
        first[k] = ss.dispatches;
        const mstep *step = &m->steps[k];
        st = step->backward ? model_record_backward(m, s, step->node)
                            : model_record_forward(m, s, step->node, m->training);
    }
    vkt_stream_stats ss;
    vkt_stream_stats_get(s, &ss);
    first[n] = ss.dispatches;
    return st;
}

vkt_status vkt_model_profile(vkt_model *m, uint32_t runs, vkt_op_timing *out, uint32_t capacity,
                             uint32_t *out_count)
{
    if (!m || !out || !out_count || runs == 0)
        return err_fail(m ? m->errmsg : NULL, VKT_ERROR_INVALID_ARGUMENT,
                        "vkt_model_profile: NULL argument or zero runs");
    uint32_t n = m->training ? m->n_steps : m->n_fwd_steps;
    *out_count = n;
    if (capacity < n)
        return model_fail(m, VKT_ERROR_INVALID_ARGUMENT,
                          "vkt_model_profile: %u steps, room for %u", n, capacity);
    m->errmsg[0] = 0;
    vkt_stream_options so = {.timestamps = 1};
    vkt_stream *s = NULL;
    uint32_t *first = malloc((n + 1) * sizeof *first);
    vkt_timing *t = NULL;
    /* States (batch norm's running averages) that the replayed training forwards update:
     * saved here and put back afterwards, so profiling leaves the model as it was. */
    uint64_t n_states = m->param_elems - m->train_elems;
    float *states = n_states ? malloc(n_states * sizeof *states) : NULL;
    vkt_status st = first && (states || !n_states) ? vkt_stream_create(m->ctx, &so, &s)
                                                   : VKT_ERROR_OUT_OF_MEMORY;
    if (st == VKT_OK && n_states)
        st = vkt_buffer_read(m->params, m->train_elems * 4, states, n_states * 4);
    if (st == VKT_OK)
        st = record_steps(m, s, n, first);
    if (st == VKT_OK && !(t = malloc((first[n] + 1) * sizeof *t)))
        st = VKT_ERROR_OUT_OF_MEMORY;
    for (uint32_t k = 0; k < n; k++) {
        const vkt_tensor *node = m->t[m->steps[k].node]; /* fused: "linear+relu" */
        out[k] = (vkt_op_timing){.backward = m->steps[k].backward,
                                 .dispatches = st == VKT_OK ? first[k + 1] - first[k] : 0};
        snprintf(out[k].op, sizeof out[k].op, "%s", graph_op_name(node));
        snprintf(out[k].name, sizeof out[k].name, "%s", node->name);
    }
    model_write_ctrl(m);
    for (uint32_t r = 0; r < runs && st == VKT_OK; r++) {
        uint32_t got = 0;
        st = vkt_stream_run(s);
        if (st == VKT_OK)
            st = vkt_stream_timings(s, t, first[n] + 1, &got);
        for (uint32_t k = 0; st == VKT_OK && k < n && (r > 0 || runs == 1); k++)
            for (uint32_t d = first[k]; d < first[k + 1] && d < got; d++)
                out[k].microseconds += t[d].microseconds / (runs == 1 ? 1 : runs - 1);
    }
    if (n_states && states && st != VKT_ERROR_OUT_OF_MEMORY) {
        vkt_status put = vkt_buffer_write(m->params, m->train_elems * 4, states, n_states * 4);
        st = st == VKT_OK ? put : st;
    }
    if (st == VKT_ERROR_OUT_OF_MEMORY && !m->errmsg[0])
        model_fail(m, st, "out of host memory");
    else if (st != VKT_OK && !m->errmsg[0]) /* a kernel's message, kept by the context */
        model_ctx_fail(m, st);
    vkt_stream_destroy(s);
    free(first);
    free(t);
    free(states);
    return st;
}
