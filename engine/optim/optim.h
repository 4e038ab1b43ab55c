/*
 * optim.h - internals of the optimizers (engine/optim): the optimizer object, option
 * checking, the per-step hyperparameters, and the CPU reference the tests compare the
 * device against.
 *
 * Memory: the parameters and gradients are the caller's (one flat view each, n elements);
 * the optimizer owns
 *   state  device floats: SGD's velocity at [0, n) (momentum > 0), or Adam's first
 *          moment m at [0, n) and second moment v at [v_offset, v_offset + n), v_offset
 *          = n rounded up to 4 so both share a phase for vec4 access. At least one.
 *   hyper  one struct optim_step_hyper in host-visible memory, rewritten before each
 *          submission (vkt_optimizer_set_step), read by the update kernel.
 *   parts  the per-workgroup sums of squares of the gradient (clipping), n_parts floats.
 */
#ifndef VKT_OPTIM_H
#define VKT_OPTIM_H

#include "vkt.h"
#include "push.h"

struct vkt_optimizer {
    vkt_context *ctx;
    vkt_optimizer_options o;  /* defaults applied */
    uint64_t n;               /* parameters */
    uint32_t n_moments;       /* 0 (plain SGD), 1 (SGD with momentum), 2 (Adam, AdamW) */
    vkt_buffer *state;        /* moments, see above */
    uint64_t v_offset;        /* elements: where v starts in `state` */
    vkt_buffer *hyper;        /* struct optim_step_hyper, host-visible */
    struct optim_step_hyper *hyper_map;
    vkt_buffer *parts;        /* [max(1, n_parts)] */
    uint64_t chunk;           /* elements per dispatch (bindings below maxStorageBufferRange) */
    uint32_t wg;              /* workgroup size, a power of 2 */
    uint32_t norm_groups;     /* workgroups per chunk of the norm pass, at most */
    uint32_t update_groups;   /* workgroups per chunk of the update, at most */
    uint32_t n_parts;         /* partial sums over all chunks */
    uint64_t step;            /* the step whose hyperparameters `hyper` holds */
    int recorded_without_clip;
    int guard;                /* optim_guard_nonfinite: norm pass always, skip if not finite */
    const float *parts_map;   /* guard: parts is host-visible, mapped here */
};

/* Loss scaling and skipping non-finite steps (the trainer's apply.c): from the next
 * recording on, every update runs the norm pass and is skipped on the device (parameters
 * and moments unchanged) when the gradient's sum of squares is not finite; the partials
 * move to host-visible memory so optim_skipped can tell. Before recording only. */
vkt_status optim_guard_nonfinite(vkt_optimizer *opt);
/* After a guarded update has run: whether the device skipped it (the partials summed in
 * the kernel's order, in fp32, are not finite). 0 when not guarded. */
int optim_skipped(const vkt_optimizer *opt);

/* Checks `in` (NULL = all defaults) and writes it with the defaults applied to `out`.
 * `fn` names the public call in the message. */
vkt_status optim_resolve(char *errmsg, const char *fn, const vkt_optimizer_options *in,
                         vkt_optimizer_options *out /* OUT */);

/* The hyperparameters of update number `step` (0 = the first) under resolved options. */
void optim_hyper(const vkt_optimizer_options *o, uint64_t step,
                 struct optim_step_hyper *out /* OUT */);

/* The learning rate of `step` under resolved options (the schedule, in double). */
double optim_schedule(const vkt_optimizer_options *o, uint64_t step);

/* Number of moment arrays the optimizer keeps for resolved options. */
uint32_t optim_moments(const vkt_optimizer_options *o);

/* The state blob (vkt_optimizer_read_state): a header of optim_state_header_size() bytes,
 * then the moment arrays, n floats each. optim_state_set_count rewrites the header's
 * parameter count: a pipeline's stages keep one optimizer each over their own parameters,
 * and a checkpoint holds one blob over the whole model's (engine/parallel/layout.c
 * gathers the stages' moments into it and scatters them back). */
uint64_t optim_state_header_size(void);
void optim_state_set_count(void *blob, uint64_t n);

/* The CPU reference of one update, update number `step` (0 = the first), same formulas
 * as shaders/optim_update.comp. Arithmetic in double (the norm, every moment and
 * parameter update), storage in float like the device's buffers. `o` is resolved
 * (optim_resolve). m: SGD's velocity or Adam's first moment, NULL for plain SGD; v:
 * Adam's second moment, NULL for SGD. Clipping and grad_scale as on the device. */
void optim_ref_step(const vkt_optimizer_options *o, uint64_t step, float *params,
                        const float *grads, float *m, float *v, uint64_t n);

#endif
