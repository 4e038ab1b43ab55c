/*
 * Embedding lookup: ids [n] hold token ids as floats (exact integers), table [vocab, dim],
 * y [n, dim] = table[ids[i]]. Grid-stride over the elements of y (vec4s when VEC4: dim a
 * multiple of 4, table and y 16-byte aligned). An id outside [0, vocab) (the graph layer
 * never passes one) reads the nearest valid row: no access leaves the table.
 */
#version 450
#extension GL_GOOGLE_include_directive : require
#include "push_norm.h"
#include "spec.h"

layout(local_size_x_id = SPEC_WG) in;
layout(constant_id = SPEC_EMBEDDING_VEC4) const bool VEC4 = false;

layout(push_constant) uniform Push { push_embedding p; };
layout(std430, set = 0, binding = 0) readonly buffer I { float ids[]; };
layout(std430, set = 0, binding = 1) readonly buffer T { float table[]; };
layout(std430, set = 0, binding = 1) readonly buffer T4 { vec4 table4[]; };
layout(std430, set = 0, binding = 2) writeonly buffer Y { float y[]; };
layout(std430, set = 0, binding = 2) writeonly buffer Y4 { vec4 y4[]; };

void main()
{
    uint units = VEC4 ? p.dim / 4 : p.dim; /* per row */
    uint total = p.n * units;
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    int last = int(p.vocab) - 1;
    for (uint e = gl_GlobalInvocationID.x; e < total; e += stride) {
        uint i = e / units, j = e - i * units;
        /* clamp twice: the float clamp of a NaN is undefined, the int one is not */
        uint id = uint(clamp(int(clamp(ids[p.ids_off + i], 0.0, float(last))), 0, last));
        if (VEC4)
            y4[p.y_off / 4 + e] = table4[p.t_off / 4 + id * units + j];
        else
            y[p.y_off + e] = table[p.t_off + id * units + j];
    }
}
