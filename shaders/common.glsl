/*
 * common.glsl - definitions shared by the elementwise, reduction and softmax shaders.
 * The scalar functions here are the ones engine/kernels/ref_*.c follow (in double).
 */
#ifndef VKT_COMMON_GLSL
#define VKT_COMMON_GLSL

/* Op codes, equal to the enums of vkt.h (checked by the dispatch code). */
#define VKT_UNARY_SCALE 0u
#define VKT_UNARY_RELU 1u
#define VKT_UNARY_LEAKY_RELU 2u
#define VKT_UNARY_GELU 3u
#define VKT_UNARY_TANH 4u
#define VKT_UNARY_SIGMOID 5u
#define VKT_UNARY_EXP 6u
#define VKT_UNARY_LOG 7u

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

#define VKT_GELU_K 0.7978845608028654 /* sqrt(2/pi) */
#define VKT_GELU_C 0.044715

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

/* sigmoid(x) = 1 / (1 + e^-x); exp(-x) overflowing to inf gives the right 0. */
float vkt_sigmoid(float x) { return 1.0 / (1.0 + exp(-x)); }

/* sigmoid'(x) = e / (1 + e)^2 with e = e^-|x|: no cancellation in 1 - sigmoid. */
float vkt_sigmoid_grad(float x)
{
    float e = exp(-abs(x));
    float d = 1.0 + e;
    return e / (d * d);
}

/* GELU, tanh approximation: 0.5 x (1 + tanh(u)) = x * sigmoid(2u), u = k (x + c x^3). */
float vkt_gelu(float x)
{
    float u = float(VKT_GELU_K) * (x + float(VKT_GELU_C) * x * x * x);
    return x * vkt_sigmoid(2.0 * u);
}

float vkt_gelu_grad(float x)
{
    float x2 = x * x;
    float u = float(VKT_GELU_K) * (x + float(VKT_GELU_C) * x2 * x);
    float du = float(VKT_GELU_K) * (1.0 + 3.0 * float(VKT_GELU_C) * x2);
    return vkt_sigmoid(2.0 * u) + 2.0 * x * du * vkt_sigmoid_grad(2.0 * u);
}

float vkt_unary_f(uint op, float alpha, float x)
{
    switch (op) {
    case VKT_UNARY_SCALE: return alpha * x;
    case VKT_UNARY_RELU: return x < 0.0 ? 0.0 : x;
    case VKT_UNARY_LEAKY_RELU: return x > 0.0 ? x : alpha * x;
    case VKT_UNARY_GELU: return vkt_gelu(x);
    case VKT_UNARY_TANH: return vkt_tanh(x);
    case VKT_UNARY_SIGMOID: return vkt_sigmoid(x);
    case VKT_UNARY_EXP: return exp(x);
    default: return log(x); /* VKT_UNARY_LOG */
    }
}

float vkt_unary_df(uint op, float alpha, float x)
{
    switch (op) {
    case VKT_UNARY_SCALE: return alpha;
    case VKT_UNARY_RELU: return x > 0.0 ? 1.0 : 0.0;
    case VKT_UNARY_LEAKY_RELU: return x > 0.0 ? 1.0 : alpha;
    case VKT_UNARY_GELU: return vkt_gelu_grad(x);
    case VKT_UNARY_TANH: {
        float e = exp(-2.0 * abs(x)); /* 1 - tanh^2 = 4e / (1 + e)^2, e = e^-2|x| */
        float d = 1.0 + e;
        return 4.0 * e / (d * d);
    }
    case VKT_UNARY_SIGMOID: return vkt_sigmoid_grad(x);
    case VKT_UNARY_EXP: return exp(x);
    default: return 1.0 / x; /* VKT_UNARY_LOG */
    }
}

#endif
