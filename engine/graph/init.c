/* init.c - parameter initializers (host side, seeded, deterministic). Dropout's hash is
 * shaders/dropout_hash.h. */
#include "core/rand.h"
#include "graph/graph.h"

#include <math.h>

/* Uniform in [0, 1) with 53 bits. */
static double uniform01(uint64_t *s)
{
    return (double)(core_splitmix64(s) >> 11) * (1.0 / 9007199254740992.0);
}

/* Standard normal by Box-Muller (one value per call: simple and deterministic). */
static double normal01(uint64_t *s)
{
    double u1 = uniform01(s), u2 = uniform01(s);
    if (u1 < 1e-300)
        u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

uint64_t graph_init_seed(const vkt_tensor *p, uint64_t graph_seed)
{
    return p->init.seed ? p->init.seed
                        : graph_seed ^ (0xD1B54A32D192ED03ull * (uint64_t)(p->id + 1));
}

void graph_init_param(const vkt_tensor *p, uint64_t graph_seed, float *out)
{
    uint64_t n = graph_count(&p->shape);
    const vkt_init *in = &p->init;
    uint64_t state = graph_init_seed(p, graph_seed);
    double fan_in = 1, fan_out = 1;
    if (p->shape.ndim == 1) {
        fan_in = fan_out = p->shape.dims[0];
    } else if (p->shape.ndim == 4) { /* a conv weight [out, in / groups, kh, kw] */
        double field = (double)p->shape.dims[2] * p->shape.dims[3];
        fan_in = p->shape.dims[1] * field;
        fan_out = p->shape.dims[0] * field;
    } else if (p->shape.ndim >= 2) {
        fan_out = p->shape.dims[p->shape.ndim - 1];
        fan_in = (double)n / fan_out;
    }
    for (uint64_t i = 0; i < n; i++) {
        double v;
        switch (in->kind) {
        case VKT_INIT_CONSTANT: v = in->a; break;
        case VKT_INIT_UNIFORM: v = in->a + ((double)in->b - in->a) * uniform01(&state); break;
        case VKT_INIT_NORMAL: v = in->a + (double)in->b * normal01(&state); break;
        case VKT_INIT_GLOROT: {
            double lim = sqrt(6.0 / (fan_in + fan_out));
            v = lim * (2.0 * uniform01(&state) - 1.0);
            break;
        }
        case VKT_INIT_HE: v = sqrt(2.0 / fan_in) * normal01(&state); break;
        default: v = 0; break; /* zeros */
        }
        out[i] = (float)v;
    }
}
