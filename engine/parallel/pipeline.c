/* pipeline.c - the public pipeline (vkt_pipeline_*): the pipeline engine (pipe_engine.h)
 * with one copy, driven step by step by the caller (docs/model_parallel.md). A trainer
 * with stages drives the same engine with D copies (exec_pipe.c). */
#include <stdlib.h>
#include <string.h>

#include "parallel/pipe_engine.h"

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
                       .precision = options->precision, .recompute = options->recompute,
                       .fn = fn};
    return pipe_create(inst, g, loss, &po, out);
}

const char *vkt_pipeline_errmsg(const vkt_pipeline *p) { return p ? p->errmsg : "pipeline is NULL"; }
uint32_t vkt_pipeline_stages(const vkt_pipeline *p) { return p ? p->P : 0; }
double vkt_pipeline_step_seconds(const vkt_pipeline *p) { return p ? p->step_seconds : 0; }

vkt_status vkt_pipeline_step(vkt_pipeline *p, const vkt_feed *feeds, uint32_t n, float *out_loss)
{
    if (!p)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "vkt_pipeline_step: pipeline is NULL");
    double loss = 0;
    vkt_status st = pipe_step(p, feeds, n, p->steps, &loss);
    if (st != VKT_OK) {
        char msg[VKT_ERRMSG_SIZE];
        memcpy(msg, p->errmsg, sizeof msg);
        return pipe_fail(p, st, "vkt_pipeline_step: %.900s", msg);
    }
    p->steps++;
    if (out_loss)
        *out_loss = (float)loss;
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
        pipe_fail(p, st, "vkt_pipeline_read: %.900s", msg);
    }
    return st;
}
