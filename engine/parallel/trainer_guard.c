/* trainer_guard.c - the divergence guard (docs/checkpoint.md, "Divergence"). A training
 * step that blows the weights up still has a finite loss (the loss is computed before
 * the update), so the loss check of the step sees it a step late, and a finite blow-up
 * (weights of 1e5 to 1e24) never. What a checkpoint is about to hold is therefore
 * checked before it is written, and what a restored one holds before it is used:
 *   - every parameter, state and optimizer moment is finite;
 *   - the trained parameters' RMS is at most `growth` times the reference, their RMS at
 *     the start of the run (trainer creation, vkt_trainer_write_params, or the run a
 *     restored checkpoint came from: its NORM section).
 * The RMS is one pass over bytes the save reads back anyway. Healthy runs of the shipped
 * models, every optimizer, up to 10 times the default learning rate, grew 1.0 to 3.6
 * times; the blow-ups measured grew 17 to 1e7 times by their first save (tables in
 * docs/checkpoint.md). */
#include "trainer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "optim/optim.h"

#define GUARD_GROWTH 10.0 /* the default limit: RMS at most 10 x the reference */
#define GUARD_FLOOR 0.05  /* a reference below this (a model initialised at or near zero)
                             counts as this: growth from nothing is not a blow-up */

static double limit_of(const vkt_trainer *t)
{
    float g = t->opt.divergence_growth;
    return g < 0 ? INFINITY : g > 0 ? (double)g : GUARD_GROWTH;
}

/* Sum of squares and the largest magnitude of v[0, n) (finite values). */
static void sum_squares(const float *v, uint64_t n, double *sq, float *max, uint64_t *at)
{
    double s = 0;
    float m = 0;
    for (uint64_t i = 0; i < n; i++) {
        float a = fabsf(v[i]);
        s += (double)a * a;
        if (a > m) {
            m = a;
            *at = i;
        }
    }
    *sq = s;
    *max = m;
}

static double rms_of(const float *v, uint64_t n)
{
    double sq;
    float max;
    uint64_t at = 0;
    sum_squares(v, n, &sq, &max, &at);
    return n ? sqrt(sq / (double)n) : 0.0;
}

vkt_status trainer_guard_start(vkt_trainer *t)
{
    float *flat = malloc((t->param_count ? t->param_count : 1) * sizeof *flat);
    if (!flat)
        return trainer_fail(t, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    vkt_status st = trainer_read_flat(t, flat);
    if (st == VKT_OK)
        trainer_guard_reset(t, flat);
    free(flat);
    return st;
}

void trainer_guard_reset(vkt_trainer *t, const float *flat)
{
    double rms = rms_of(flat, t->grad_count);
    if (isfinite(rms)) { /* non-finite values are refused at the save anyway */
        t->guard_rms = rms;
        t->guard_step = t->steps;
    }
    t->guard_tripped = 0;
}

/* The name of the parameter holding flat element `off` (graph order), or "?". */
static const char *param_at(const vkt_trainer *t, uint64_t off)
{
    for (uint32_t id = 0; id < trainer_flat_nodes(t); id++) {
        graph_node_info p;
        uint64_t at = 0;
        graph_node_info_at(t->graph, id, &p);
        if (p.param && trainer_param_offset(t, graph_node_at(t->graph, id), &at) == VKT_OK &&
            off >= at && off - at < p.count)
            return p.name;
    }
    return "?";
}

/* The sum of squares of n floats at `bytes` (host order, any alignment), in double: not
 * finite exactly when one of them is not (finite floats cannot overflow it). */
static double sum_squares_bytes(const unsigned char *bytes, uint64_t n)
{
    double s = 0;
    for (uint64_t i = 0; i < n; i++) {
        float v;
        memcpy(&v, bytes + 4 * i, 4);
        s += (double)v * v;
    }
    return s;
}

/* The first non-finite float of n at `bytes` (host order, any alignment), or n. */
static uint64_t first_nonfinite(const unsigned char *bytes, uint64_t n, float *value)
{
    for (uint64_t i = 0; i < n; i++) {
        float v;
        memcpy(&v, bytes + 4 * i, 4);
        if (!isfinite(v)) {
            *value = v;
            return i;
        }
    }
    return n;
}

vkt_status trainer_guard_check(const vkt_trainer *t, const float *flat, const void *opt,
                               uint64_t opt_bytes, double ref_rms, uint64_t ref_step,
                               char *why, size_t why_size)
{
    /* one pass over each array; the element is looked for only when one is not finite */
    double sq;
    float max, bad = 0;
    uint64_t at = 0, i, states = t->param_count - t->grad_count;
    sum_squares(flat, t->grad_count, &sq, &max, &at);
    if (!isfinite(sq) ||
        (i = first_nonfinite((const unsigned char *)(flat + t->grad_count), states, &bad)) <
            states) {
        i = first_nonfinite((const unsigned char *)flat, t->param_count, &bad);
        snprintf(why, why_size, "%s '%s' holds %g", i < t->grad_count ? "parameter" : "state",
                 param_at(t, i), (double)bad);
        return VKT_ERROR_DIVERGED;
    }
    uint64_t hdr = optim_state_header_size();
    if (opt && opt_bytes > hdr && t->grad_count) {
        const unsigned char *m = (const unsigned char *)opt + hdr;
        uint64_t n = (opt_bytes - hdr) / 4; /* moment arrays of grad_count floats each */
        if (!isfinite(sum_squares_bytes(m, n))) {
            i = first_nonfinite(m, n, &bad);
            snprintf(why, why_size, "the optimizer's state of parameter '%s' holds %g",
                     param_at(t, i % t->grad_count), (double)bad);
            return VKT_ERROR_DIVERGED;
        }
    }
    double rms = t->grad_count ? sqrt(sq / (double)t->grad_count) : 0.0;
    double ref = ref_rms > GUARD_FLOOR ? ref_rms : GUARD_FLOOR, limit = limit_of(t);
    if (!(rms > limit * ref)) /* also with no limit (INFINITY) */
        return VKT_OK;
    snprintf(why, why_size, "the parameters' RMS is %.3g, %.3g times its %.3g at step %llu "
             "(the limit is %gx; the largest value is %.3g, in '%s')", rms, rms / ref, ref,
             (unsigned long long)ref_step, limit, (double)max, param_at(t, at));
    return VKT_ERROR_DIVERGED;
}
