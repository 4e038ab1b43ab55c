/* ref_optim.c - CPU reference of the optimizer update (shaders/optim_update.comp and
 * shaders/optim_norm.comp). Every quantity is computed in double from the stored floats,
 * and stored back as float like the device's buffers, so the reference is the more exact
 * side; the learning rate and bias corrections come from the same schedule. */
#include "optim/optim.h"

#include <math.h>

/* grad_scale times the clipping factor min(1, clip_norm / (|grad_scale * g| + 1e-6)). */
static double grad_multiplier(const vkt_optimizer_options *o, const float *grads, uint64_t n)
{
    double gs = o->grad_scale;
    if (o->clip_norm <= 0.0f)
        return gs;
    double sum = 0.0;
    for (uint64_t i = 0; i < n; i++)
        sum += (double)grads[i] * (double)grads[i];
    double norm = gs * sqrt(sum);
    double c = (double)o->clip_norm / (norm + 1e-6);
    return gs * (c < 1.0 ? c : 1.0);
}

void optim_ref_step(const vkt_optimizer_options *o, uint64_t step, float *params,
                        const float *grads, float *m, float *v, uint64_t n)
{
    double gm = grad_multiplier(o, grads, n);
    double lr = optim_schedule(o, step), wd = o->weight_decay;
    double t = (double)step + 1.0;
    double b1 = o->beta1, b2 = o->beta2;
    double bc1 = 1.0 - pow(b1, t), bc2 = 1.0 - pow(b2, t);
    for (uint64_t i = 0; i < n; i++) {
        double w = params[i];
        double g = grads[i] * gm;
        if (o->kind == VKT_OPTIMIZER_SGD) {
            g += wd * w;
            if (m) {
                double mu = o->momentum;
                double buf = mu * m[i] + g;
                m[i] = (float)buf;
                g = o->nesterov ? g + mu * buf : buf;
            }
            w -= lr * g;
        } else {
            if (o->kind == VKT_OPTIMIZER_ADAMW)
                w *= 1.0 - lr * wd;
            else
                g += wd * w;
            double mi = b1 * m[i] + (1.0 - b1) * g;
            double vi = b2 * v[i] + (1.0 - b2) * g * g;
            m[i] = (float)mi;
            v[i] = (float)vi;
            w -= lr / bc1 * mi / (sqrt(vi) / sqrt(bc2) + (double)o->eps);
        }
        params[i] = (float)w;
    }
}
