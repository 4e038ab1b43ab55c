/*
 * common.glsl - definitions shared by the elementwise, reduction and softmax shaders.
 * The activations are activation.h, compiled as C too (the CPU references, in double).
 */
#ifndef VKT_COMMON_GLSL
#define VKT_COMMON_GLSL

/* Op codes, equal to the enums of vkt.h (checked by the dispatch code). The unary ops'
 * (VKT_UNARY_*) come from activation.h's list, included below. */
#define VKT_BINARY_ADD 0u
#define VKT_BINARY_SUB 1u
#define VKT_BINARY_MUL 2u
#define VKT_BINARY_DIV 3u

#define VKT_REDUCE_SUM 0u
#define VKT_REDUCE_MEAN 1u
#define VKT_REDUCE_MAX 2u
#define VKT_REDUCE_ARGMAX 3u

/* The single elements around a vec4 body (see push.h): threads 0..head-1 take the
 * head, threads 4..4+tail-1 the tail. `one(i)` processes element i. */
#define VKT_VEC4_EDGES(p, t, one)                                                   \
    do {                                                                            \
        uint tail_ = p.n - p.head - 4u * p.nvec;                                    \
        if (t < p.head)                                                             \
            one(t);                                                                 \
        else if (t >= 4u && t - 4u < tail_)                                         \
            one(p.head + 4u * p.nvec + (t - 4u));                                   \
    } while (false)

/* Mixed-radix digits of v over dims d (outermost first); the outermost digit is not
 * wrapped. */
uvec4 vkt_digits(uint v, uvec4 d)
{
    uvec4 c;
    uint r = v / d.w;
    c.w = v - r * d.w;
    c.z = r % d.z;
    r /= d.z;
    c.y = r % d.y;
    c.x = r / d.y;
    return c;
}

/* c + s over dims d, both given as digits (each below its radix but the outermost):
 * one compare and subtract per digit instead of divisions. */
uvec4 vkt_digits_add(uvec4 c, uvec4 s, uvec4 d)
{
    c.w += s.w;
    if (c.w >= d.w) { c.w -= d.w; c.z++; }
    c.z += s.z;
    if (c.z >= d.z) { c.z -= d.z; c.y++; }
    c.y += s.y;
    if (c.y >= d.y) { c.y -= d.y; c.x++; }
    c.x += s.x;
    return c;
}

/* tanh with small relative error near 0 and no overflow for large |x|; NaN stays NaN. */
float vkt_tanh(float x)
{
    float ax = abs(x);
    if (ax > 15.0)
        ax = 15.0; /* tanh(15) rounds to 1 in fp32 */
    float r;
    if (ax < 0.125) {
        float x2 = ax * ax; /* Taylor series: x - x^3/3 + 2x^5/15 - 17x^7/315 */
        r = ax * (1.0 + x2 * (-1.0 / 3.0 + x2 * (2.0 / 15.0 + x2 * (-17.0 / 315.0))));
    } else {
        float t = exp(-2.0 * ax);
        r = (1.0 - t) / (1.0 + t);
    }
    return x < 0.0 ? -r : r;
}

/* The unary ops: their codes, functions and derivatives, shared with the C references. */
#include "activation.h"

#endif
