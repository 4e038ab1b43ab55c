/*
 * One optimizer update of one chunk of the flat parameter buffer. The per-step values
 * (learning rate after the schedule, Adam's bias corrections, ...) come from the
 * host-visible block H that the host rewrites before each submission, so a recorded
 * stream replays with new hyperparameters. engine/optim/ref_optim.c is the reference
 * (same formulas, in double).
 *
 *   g  = grad * grad_scale * clip          clip = min(1, clip_norm / (|g| + 1e-6))
 *   SGD:   g += wd * w;  buf = mu * buf + g;  g = nesterov ? g + mu * buf : buf;
 *          w -= lr * g
 *   Adam:  g += wd * w  (AdamW instead: w -= lr * wd * w)
 *          m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
 *          w -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
 *
 * With GUARD (optim_guard_nonfinite: loss scaling, skipping non-finite steps) the norm
 * pass ran too, and when the sum of squares of the gradient is not finite (a NaN or an
 * infinity in it, or squares past fp32's range) no invocation writes anything: the update
 * is skipped, parameters and moments unchanged. The host sums the same partials in the
 * same order to learn it (optim_skipped).
 *
 * Grid-stride loop over vec4s when all four views share a phase mod 4 (p.nvec > 0),
 * else over single elements.
 */
#version 450
#extension GL_GOOGLE_include_directive : require
#include "push.h"
#include "spec.h"

#define KIND_SGD 0u
#define KIND_ADAM 1u
#define KIND_ADAMW 2u

layout(local_size_x_id = SPEC_WG) in;
layout(constant_id = SPEC_OPTIM_UPDATE_KIND) const uint KIND = 0;         /* vkt_optimizer_kind */
layout(constant_id = SPEC_OPTIM_UPDATE_MOMENTUM) const bool MOMENTUM = false;
layout(constant_id = SPEC_OPTIM_UPDATE_CLIP) const bool CLIP = false;
layout(constant_id = SPEC_OPTIM_UPDATE_GUARD) const bool GUARD = false;

const bool HAS_M = KIND != KIND_SGD || MOMENTUM;
const bool HAS_V = KIND != KIND_SGD;

layout(push_constant) uniform Push { push_optim p; };
layout(std430, set = 0, binding = 0) buffer P { float params[]; };
layout(std430, set = 0, binding = 0) buffer P4 { vec4 params4[]; };
layout(std430, set = 0, binding = 1) readonly buffer G { float grads[]; };
layout(std430, set = 0, binding = 1) readonly buffer G4 { vec4 grads4[]; };
layout(std430, set = 0, binding = 2) buffer M { float m[]; };
layout(std430, set = 0, binding = 2) buffer M4 { vec4 m4[]; };
layout(std430, set = 0, binding = 3) buffer V { float v[]; };
layout(std430, set = 0, binding = 3) buffer V4 { vec4 v4[]; };
layout(std430, set = 0, binding = 4) readonly buffer H { optim_step_hyper h; };
layout(std430, set = 0, binding = 5) readonly buffer Parts { float parts[]; };

/* This step's values, read once: the compiler cannot hoist loads from a buffer that
 * the stores of the loop might alias. */
float gm, lr, wd, mu, b1, b2, step_size, rsqrt_bc2, eps;
bool nesterov, skip = false;

/* grad_scale, times the clipping factor when clipping. Every invocation adds the
 * partials in the same order, so all agree on the norm bit for bit (and need no
 * barrier: the partials are few). */
float grad_multiplier()
{
    float gs = h.grad_scale;
    if (!CLIP && !GUARD)
        return gs;
    float sum = 0.0;
    for (uint i = 0; i < p.n_parts; i++)
        sum += parts[i];
    skip = GUARD && (isnan(sum) || isinf(sum));
    if (!CLIP || h.clip_norm <= 0.0) /* clipping may be switched off after recording */
        return gs;
    float norm = gs * sqrt(sum);
    return gs * min(1.0, h.clip_norm / (norm + 1e-6));
}

/* The update of one element (T = float) or of four (T = vec4, componentwise): one
 * body, so both paths round alike. */
#define VKT_OPTIM_UPDATE(T)                                                           \
    void update(inout T w, T g, inout T mm, inout T vv)                               \
    {                                                                                 \
        g *= gm;                                                                      \
        if (KIND == KIND_SGD) {                                                       \
            g += wd * w;                                                              \
            if (MOMENTUM) {                                                           \
                mm = mu * mm + g;                                                     \
                g = nesterov ? g + mu * mm : mm;                                      \
            }                                                                         \
            w -= lr * g;                                                              \
        } else {                                                                      \
            if (KIND == KIND_ADAMW)                                                   \
                w -= lr * wd * w;                                                     \
            else                                                                      \
                g += wd * w;                                                          \
            mm = b1 * mm + (1.0 - b1) * g;                                            \
            vv = b2 * vv + (1.0 - b2) * (g * g);                                      \
            w -= step_size * mm / (sqrt(vv) * rsqrt_bc2 + eps);                       \
        }                                                                             \
    }
VKT_OPTIM_UPDATE(float)
VKT_OPTIM_UPDATE(vec4)

void one(uint i)
{
    float w = params[p.p_off + i], mm = 0.0, vv = 0.0;
    if (HAS_M)
        mm = m[p.m_off + i];
    if (HAS_V)
        vv = v[p.v_off + i];
    update(w, grads[p.g_off + i], mm, vv);
    params[p.p_off + i] = w;
    if (HAS_M)
        m[p.m_off + i] = mm;
    if (HAS_V)
        v[p.v_off + i] = vv;
}

void main()
{
    gm = grad_multiplier();
    if (skip)
        return;
    lr = h.lr;
    wd = h.weight_decay;
    mu = h.momentum;
    nesterov = h.nesterov != 0u;
    b1 = h.beta1;
    b2 = h.beta2;
    step_size = h.step_size;
    rsqrt_bc2 = h.rsqrt_bc2;
    eps = h.eps;
    uint t = gl_GlobalInvocationID.x;
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (p.nvec == 0u) {
        for (uint i = t; i < p.n; i += stride)
            one(i);
        return;
    }
    uint pb = (p.p_off + p.head) / 4u, gb = (p.g_off + p.head) / 4u;
    uint mb = (p.m_off + p.head) / 4u, vb = (p.v_off + p.head) / 4u;
    for (uint j = t; j < p.nvec; j += stride) {
        vec4 w = params4[pb + j], mm = vec4(0.0), vv = vec4(0.0);
        if (HAS_M)
            mm = m4[mb + j];
        if (HAS_V)
            vv = v4[vb + j];
        update(w, grads4[gb + j], mm, vv);
        params4[pb + j] = w;
        if (HAS_M)
            m4[mb + j] = mm;
        if (HAS_V)
            v4[vb + j] = vv;
    }
    /* The < 4 elements before the vec4s and the < 4 after them. */
    uint tail = p.n - p.head - 4u * p.nvec;
    if (t < p.head)
        one(t);
    else if (t >= 4u && t - 4u < tail)
        one(p.head + 4u * p.nvec + (t - 4u));
}
