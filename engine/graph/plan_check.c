/* plan_check.c - the memory plan checked against the recording. While a step records,
 * the stream reports every command's accesses (gpu_stream_access); each byte range a
 * command reads or writes in the activation arena must lie inside a value the plan lists
 * for that step (model_step_access), with a write only where the plan says the step
 * writes. Otherwise the plan could have given that memory to another value alive at the
 * same time, and recording fails with VKT_ERROR_INTERNAL naming the op, the range and
 * the access. It runs on every recording (a few comparisons per dispatch, once per
 * model), so every test and every run checks the plan with memory reuse on. */
#include "graph/model.h"

#include <stdio.h>

/* Whether declared value k of the step holds bytes [begin, end) of the arena, with the
 * write flag allowing the access. Values take their aligned size in the plan. */
static int holds(const vkt_model *m, const plan_watch *w, uint32_t k, uint64_t begin,
                 uint64_t end, int write)
{
    const mval *r = &m->val[model_root(m, w->vals[k])];
    if (r->space != MS_ARENA || (write && !w->writes[k]))
        return 0;
    uint64_t lo = r->offset * 4, hi = (r->offset + (r->count + ALIGN_ELEMS - 1) / ALIGN_ELEMS *
                                                       ALIGN_ELEMS) * 4;
    return begin >= lo && end <= hi;
}

static void observe(void *user, const gpu_range *ranges, const int *writes, uint32_t n)
{
    plan_watch *w = user;
    vkt_model *m = w->m;
    if (w->st != VKT_OK || !m->arena)
        return;
    for (uint32_t i = 0; i < n; i++) {
        if (ranges[i].buffer != m->arena->buffer)
            continue; /* parameters, inputs, the control block: fixed, never shared */
        int ok = 0;
        for (uint32_t k = 0; k < w->n && !ok; k++)
            ok = holds(m, w, k, ranges[i].begin, ranges[i].end, writes[i]);
        if (ok)
            continue;
        const mstep *s = &m->steps[w->step];
        const vkt_tensor *t = m->t[s->node];
        w->st = model_fail(m, VKT_ERROR_INTERNAL,
                           "internal error: the memory plan does not cover the %s of op '%s' "
                           "(%s): it %s arena bytes [%llu, %llu), which the plan gives the "
                           "step no %s of", s->backward ? "backward" : "forward", t->name,
                           graph_op_name(t), writes[i] ? "writes" : "reads",
                           (unsigned long long)ranges[i].begin,
                           (unsigned long long)ranges[i].end, writes[i] ? "write" : "access");
        return;
    }
}

void plan_watch_begin(plan_watch *w, vkt_model *m, vkt_stream *s, uint32_t step)
{
    w->m = m;
    w->step = step;
    w->st = VKT_OK;
    int overflow = 0;
    w->n = model_step_access(m, &m->steps[step], w->vals, w->writes, w->phases, PLAN_WATCH_CAP,
                             &overflow);
    if (m->debug_drop_access == (int32_t)m->steps[step].node && w->n > 0)
        w->n--; /* test hook: the plan forgets the step's last access */
    s->observe = observe;
    s->observe_user = w;
}

vkt_status plan_watch_end(plan_watch *w, vkt_stream *s)
{
    s->observe = NULL;
    s->observe_user = NULL;
    return w->st;
}
