/* options.c - optimizer options (checks and defaults), learning-rate schedules, and the
 * per-step hyperparameters the update kernel reads. Host code, in double. */
#include "optim/optim.h"

#include "gpu/gpu.h"

#include <math.h>

const char *vkt_optimizer_kind_name(vkt_optimizer_kind kind)
{
    switch (kind) {
    case VKT_OPTIMIZER_SGD: return "sgd";
    case VKT_OPTIMIZER_ADAM: return "adam";
    case VKT_OPTIMIZER_ADAMW: return "adamw";
    default: return "unknown";
    }
}

const char *vkt_schedule_kind_name(vkt_schedule_kind kind)
{
    switch (kind) {
    case VKT_SCHEDULE_CONSTANT: return "constant";
    case VKT_SCHEDULE_STEP: return "step";
    case VKT_SCHEDULE_WARMUP_COSINE: return "warmup_cosine";
    default: return "unknown";
    }
}

/* A finite value >= 0 (NaN fails every comparison). */
static int nonneg(float x) { return x >= 0.0f && x <= 3.4e38f; }

static vkt_status bad(char *errmsg, const char *fn, const char *what, double value,
                      const char *rule)
{
    return err_fail(errmsg, VKT_ERROR_INVALID_ARGUMENT, "%s: %s is %g; %s", fn, what, value,
                    rule);
}

static vkt_status check_sgd(char *errmsg, const char *fn, const vkt_optimizer_options *o)
{
    if (!(o->momentum >= 0.0f && o->momentum < 1.0f))
        return bad(errmsg, fn, "momentum", o->momentum, "it must lie in [0, 1)");
    if (o->nesterov && o->momentum == 0.0f)
        return err_fail(errmsg, VKT_ERROR_INVALID_ARGUMENT,
                        "%s: nesterov needs momentum > 0", fn);
    if (o->beta1 != 0.0f || o->beta2 != 0.0f || o->eps != 0.0f)
        return err_fail(errmsg, VKT_ERROR_INVALID_ARGUMENT,
                        "%s: beta1, beta2 and eps apply to Adam and AdamW, not to SGD "
                        "(leave them 0)", fn);
    return VKT_OK;
}

static vkt_status check_adam(char *errmsg, const char *fn, vkt_optimizer_options *o)
{
    if (o->momentum != 0.0f || o->nesterov)
        return err_fail(errmsg, VKT_ERROR_INVALID_ARGUMENT,
                        "%s: momentum and nesterov apply to SGD; %s uses beta1 (leave them 0)",
                        fn, vkt_optimizer_kind_name(o->kind));
    if (o->beta1 == 0.0f)
        o->beta1 = 0.9f;
    if (o->beta2 == 0.0f)
        o->beta2 = 0.999f;
    if (o->eps == 0.0f)
        o->eps = 1e-8f;
    if (!(o->beta1 > 0.0f && o->beta1 < 1.0f))
        return bad(errmsg, fn, "beta1", o->beta1, "it must lie in (0, 1)");
    if (!(o->beta2 > 0.0f && o->beta2 < 1.0f))
        return bad(errmsg, fn, "beta2", o->beta2, "it must lie in (0, 1)");
    if (!(nonneg(o->eps) && o->eps > 0.0f))
        return bad(errmsg, fn, "eps", o->eps, "it must be > 0");
    return VKT_OK;
}

static vkt_status check_schedule(char *errmsg, const char *fn, vkt_optimizer_options *o)
{
    switch (o->schedule) {
    case VKT_SCHEDULE_CONSTANT:
        return VKT_OK;
    case VKT_SCHEDULE_STEP:
        if (o->step_size == 0)
            return err_fail(errmsg, VKT_ERROR_INVALID_ARGUMENT,
                            "%s: the step schedule needs step_size > 0", fn);
        if (o->gamma == 0.0f)
            o->gamma = 0.1f;
        if (!(nonneg(o->gamma) && o->gamma > 0.0f))
            return bad(errmsg, fn, "gamma", o->gamma, "it must be > 0");
        return VKT_OK;
    case VKT_SCHEDULE_WARMUP_COSINE:
        if (o->total_steps == 0)
            return err_fail(errmsg, VKT_ERROR_INVALID_ARGUMENT,
                            "%s: the warmup-cosine schedule needs total_steps > 0", fn);
        if (o->warmup_steps > o->total_steps)
            return err_fail(errmsg, VKT_ERROR_INVALID_ARGUMENT,
                            "%s: warmup_steps (%llu) exceeds total_steps (%llu)", fn,
                            (unsigned long long)o->warmup_steps,
                            (unsigned long long)o->total_steps);
        if (!nonneg(o->min_lr) || o->min_lr > o->lr)
            return err_fail(errmsg, VKT_ERROR_INVALID_ARGUMENT,
                            "%s: min_lr is %g; it must lie in [0, lr = %g]", fn, o->min_lr,
                            o->lr);
        return VKT_OK;
    default:
        return err_fail(errmsg, VKT_ERROR_INVALID_ARGUMENT, "%s: unknown schedule %d", fn,
                        (int)o->schedule);
    }
}

vkt_status optim_resolve(char *errmsg, const char *fn, const vkt_optimizer_options *in,
                         vkt_optimizer_options *out)
{
    vkt_optimizer_options o = {0};
    if (in)
        o = *in;
    if ((unsigned)o.kind > VKT_OPTIMIZER_ADAMW)
        return err_fail(errmsg, VKT_ERROR_INVALID_ARGUMENT, "%s: unknown optimizer kind %d",
                        fn, (int)o.kind);
    if (!nonneg(o.lr))
        return bad(errmsg, fn, "lr", o.lr, "it must be >= 0 (0 takes the default)");
    if (o.lr == 0.0f)
        o.lr = o.kind == VKT_OPTIMIZER_SGD ? 0.01f : 0.001f;
    if (!nonneg(o.weight_decay))
        return bad(errmsg, fn, "weight_decay", o.weight_decay, "it must be >= 0");
    if (!nonneg(o.clip_norm))
        return bad(errmsg, fn, "clip_norm", o.clip_norm, "it must be >= 0 (0 = no clipping)");
    if (!nonneg(o.grad_scale))
        return bad(errmsg, fn, "grad_scale", o.grad_scale, "it must be >= 0 (0 = 1)");
    if (o.grad_scale == 0.0f)
        o.grad_scale = 1.0f;
    vkt_status st = o.kind == VKT_OPTIMIZER_SGD ? check_sgd(errmsg, fn, &o)
                                                : check_adam(errmsg, fn, &o);
    if (st == VKT_OK)
        st = check_schedule(errmsg, fn, &o);
    if (st == VKT_OK)
        *out = o;
    return st;
}

double optim_schedule(const vkt_optimizer_options *o, uint64_t step)
{
    double lr = o->lr;
    switch (o->schedule) {
    case VKT_SCHEDULE_STEP:
        return lr * pow((double)o->gamma, (double)(step / o->step_size));
    case VKT_SCHEDULE_WARMUP_COSINE: {
        if (step < o->warmup_steps) /* linear: lr/W at step 0 up to lr at step W-1 */
            return lr * (double)(step + 1) / (double)o->warmup_steps;
        if (step >= o->total_steps)
            return o->min_lr;
        double r = (double)(step - o->warmup_steps) /
                   (double)(o->total_steps - o->warmup_steps); /* 0 at the warmup's end */
        return o->min_lr + 0.5 * (1.0 + cos(3.14159265358979323846 * r)) * (lr - o->min_lr);
    }
    default:
        return lr;
    }
}

float vkt_schedule_lr(const vkt_optimizer_options *options, uint64_t step)
{
    vkt_optimizer_options o;
    if (optim_resolve(NULL, "vkt_schedule_lr", options, &o) != VKT_OK)
        return NAN;
    return (float)optim_schedule(&o, step);
}

uint32_t optim_moments(const vkt_optimizer_options *o)
{
    if (o->kind != VKT_OPTIMIZER_SGD)
        return 2;
    return o->momentum > 0.0f ? 1 : 0;
}

void optim_hyper(const vkt_optimizer_options *o, uint64_t step, struct optim_step_hyper *h)
{
    double lr = optim_schedule(o, step);
    double t = (double)step + 1.0;
    double bc1 = 1.0 - pow((double)o->beta1, t), bc2 = 1.0 - pow((double)o->beta2, t);
    int adam = o->kind != VKT_OPTIMIZER_SGD;
    *h = (struct optim_step_hyper){
        .lr = (float)lr,
        .momentum = o->momentum,
        .beta1 = o->beta1,
        .beta2 = o->beta2,
        .eps = o->eps,
        .weight_decay = o->weight_decay,
        .step_size = adam ? (float)(lr / bc1) : 0.0f,
        .rsqrt_bc2 = adam ? (float)(1.0 / sqrt(bc2)) : 0.0f,
        .clip_norm = o->clip_norm,
        .grad_scale = o->grad_scale,
        .nesterov = o->nesterov ? 1u : 0u,
        .t = (uint32_t)(step + 1),
    };
}
