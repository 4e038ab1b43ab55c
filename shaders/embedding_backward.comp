/*
 * Embedding backward: dtable [vocab, dim] = sum over positions i with ids[i] == v of
 * dy[i] (+ beta * dtable; beta 0 does not read dtable, and rows no id names get 0), over
 * the positions [first, first + count) of this dispatch (the dispatch code splits long
 * batches into consecutive dispatches, the later ones with beta 1).
 *
 * Deterministic without atomics: thread (v, j) owns 4 * A columns of row v (A <= 16 vec4
 * accumulators in registers), scans the ids in increasing position and adds the matching
 * rows of dy, so every sum has one fixed order however often an id repeats. The cost is a
 * scan of the ids per thread, vocab * ceil(dim / (4 A)) * n compares in all (a larger A
 * means fewer threads scanning; IDS4 compares four ids per iteration), plus n * dim
 * additions. ids outside [0, vocab) match no row. VEC4: dy and dtable read as vec4s (dim
 * a multiple of 4, both 16-byte aligned). IDS4: the ids binding starts 16-byte aligned.
 */
#version 450
#extension GL_GOOGLE_include_directive : require
#include "push_norm.h"
#include "spec.h"

layout(local_size_x_id = SPEC_WG) in;
layout(constant_id = SPEC_EMBEDDING_BACKWARD_A) const uint A = 1;
layout(constant_id = SPEC_EMBEDDING_BACKWARD_VEC4) const bool VEC4 = false;
layout(constant_id = SPEC_EMBEDDING_BACKWARD_IDS4) const bool IDS4 = false;

layout(push_constant) uniform Push { push_embedding p; };
layout(std430, set = 0, binding = 0) readonly buffer I { float ids[]; };
layout(std430, set = 0, binding = 0) readonly buffer I4 { vec4 ids4[]; };
layout(std430, set = 0, binding = 1) readonly buffer DY { float dy[]; };
layout(std430, set = 0, binding = 1) readonly buffer DY4 { vec4 dy4[]; };
layout(std430, set = 0, binding = 2) buffer DT { float dt[]; };
layout(std430, set = 0, binding = 2) buffer DT4 { vec4 dt4[]; };

/* Quad q (columns 4q .. 4q + 3, those below dim) of row `row` of dy. No loops: the
 * dispatch code counts loop iterations against the device's budget. */
vec4 load_dy(uint row, uint q)
{
    if (VEC4)
        return dy4[p.y_off / 4 + row * (p.dim / 4) + q];
    uint d = 4 * q, k = p.y_off + row * p.dim + d;
    vec4 v = vec4(dy[k], 0.0, 0.0, 0.0);
    if (d + 1 < p.dim)
        v.y = dy[k + 1];
    if (d + 2 < p.dim)
        v.z = dy[k + 2];
    if (d + 3 < p.dim)
        v.w = dy[k + 3];
    return v;
}

/* dtable[row, 4q + c] = v[c] (+ beta * old) for the columns below dim. */
void store_dt(uint row, uint q, vec4 v)
{
    if (VEC4) {
        uint k = p.t_off / 4 + row * (p.dim / 4) + q;
        dt4[k] = p.beta != 0.0 ? v + p.beta * dt4[k] : v;
        return;
    }
    uint d = 4 * q, k = p.t_off + row * p.dim + d;
    for (uint c = 0; c < 4; c++) /* after the positions loop: not in the budget's way */
        if (d + c < p.dim)
            dt[k + c] = p.beta != 0.0 ? v[c] + p.beta * dt[k + c] : v[c];
}

/* Elements 4q .. 4q + 3 of the ids binding (quads of a 16-byte aligned binding); -1,
 * which matches no row, past the end of the ids (that part may lie outside the binding). */
vec4 ids_quad(uint q)
{
    uint end = p.ids_off + p.n, e = 4 * q;
    if (e + 4 <= end)
        return ids4[q];
    vec4 w = vec4(-1.0);
    w.x = ids[e]; /* e < end: the quad holds a position of this dispatch */
    if (e + 1 < end)
        w.y = ids[e + 1];
    if (e + 2 < end)
        w.z = ids[e + 2];
    return w;
}

/* Moves position i to the first position >= i (and < end) whose id is fv; false if none.
 * IDS4: four ids per iteration (a quad, of which the positions before i are ignored). */
bool next_match(float fv, uint end, inout uint i)
{
    if (!IDS4) {
        while (i < end && ids[p.ids_off + i] != fv)
            i++;
        return i < end;
    }
    while (i < end) {
        uint e = p.ids_off + i, r = e & 3u;
        bvec4 m = equal(ids_quad(e >> 2), vec4(fv));
        uint hit = 4; /* the first match at or after component r */
        if (m.w)
            hit = 3;
        if (m.z && r <= 2)
            hit = 2;
        if (m.y && r <= 1)
            hit = 1;
        if (m.x && r == 0)
            hit = 0;
        i = i - r + hit; /* the match, or the next quad's first position */
        if (hit < 4)
            return i < end;
    }
    return false;
}

/* The accumulators (A <= 16 of them, one per quad q0 + a of the thread's columns), all
 * code unrolled: constant indices keep acc in registers, and no loop counts against the
 * loop budget. ADD adds quad q0 + a of dy's row i. */
#define ZERO(a) acc[a] = vec4(0.0);
#define ADD(a)                                                                          \
    if (A > a && q0 + a < quads)                                                        \
        acc[a] += load_dy(i, q0 + a);
#define STORE(a)                                                                        \
    if (A > a && q0 + a < quads)                                                        \
        store_dt(v, q0 + a, acc[a]);

void main()
{
    uint quads = (p.dim + 3) / 4;
    uint blocks = (quads + A - 1) / A; /* column blocks per row */
    uint total = p.vocab * blocks;
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint t = gl_GlobalInvocationID.x; t < total; t += stride) {
        uint v = t / blocks, q0 = (t - v * blocks) * A;
        float fv = float(v);
        vec4 acc[16];
        ZERO(0) ZERO(1) ZERO(2) ZERO(3) ZERO(4) ZERO(5) ZERO(6) ZERO(7)
        ZERO(8) ZERO(9) ZERO(10) ZERO(11) ZERO(12) ZERO(13) ZERO(14) ZERO(15)
        /* A cheap loop finds the next match, then the rows are added: a SIMD device
         * (lavapipe) runs a branch's body whenever any lane takes it, so an add under an
         * `if` in the scan would cost every lane every position. */
        uint i = p.first, end = p.first + p.count;
        for (;;) {
            if (!next_match(fv, end, i))
                break;
            ADD(0) ADD(1) ADD(2) ADD(3) ADD(4) ADD(5) ADD(6) ADD(7)
            ADD(8) ADD(9) ADD(10) ADD(11) ADD(12) ADD(13) ADD(14) ADD(15)
            i++;
        }
        STORE(0) STORE(1) STORE(2) STORE(3) STORE(4) STORE(5) STORE(6) STORE(7)
        STORE(8) STORE(9) STORE(10) STORE(11) STORE(12) STORE(13) STORE(14) STORE(15)
    }
}
