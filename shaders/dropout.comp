/*
 * Dropout with a counter-based hash (dropout_hash.h, shared with C): element i is kept
 * when dropout_kept(key, idx0 + i, threshold) (threshold = p * 2^32), idx0 + i the
 * element's index in the whole batch (modulo 2^32, idx0 = i_off + row0 * row_units),
 * key = a hash chain of the step and the node's seed. The step and row0 are read from
 * the control block (ctrl.h), so replays see each step's and each micro-batch's values;
 * kept elements are scaled by 1/(1-p). y = x * factor (+ beta * y). The backward is the
 * same map applied to dy.
 */
#version 450
#extension GL_GOOGLE_include_directive : require
#include "ctrl.h"
#include "dropout_hash.h"
#include "push.h"
#include "spec.h"

layout(local_size_x_id = SPEC_WG) in;

layout(push_constant) uniform Push { push_dropout p; };
layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 1) readonly buffer C { uint ctrl[]; };
layout(std430, set = 0, binding = 2) buffer Y { float y[]; };

void main()
{
    uint step_lo = ctrl[p.c_off], step_hi = ctrl[p.c_off + 1];
    uint key = dropout_key(step_lo, step_hi, p.seed_lo, p.seed_hi);
    uint idx0 = p.i_off + ctrl[p.c_off + (CTRL_ROW0 - CTRL_STEP)] * p.row_units;
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint i = gl_GlobalInvocationID.x; i < p.n; i += stride) {
        float f = dropout_kept(key, idx0 + i, p.threshold) ? p.scale : 0.0;
        float v = x[p.x_off + i] * f;
        y[p.y_off + i] = p.beta != 0.0 ? v + p.beta * y[p.y_off + i] : v;
    }
}
