/* ref_attention.c - double-precision references of the causal attention kernels
 * (attention.h), written from the definitions: full score rows, a max-subtracted
 * softmax, then the sums; no online softmax and no workspace as in the shader. */
#include <math.h>
#include <stdlib.h>

#include "kernels/attention.h"
#include "dropout_hash.h"

/* Element c of q (which 0), k (1) or v (2) of head h at position i of sequence bb. */
static double at(const double *qkv, uint32_t t, uint32_t heads, uint32_t d, uint32_t bb,
                 uint32_t i, uint32_t which, uint32_t h, uint32_t c)
{
    uint64_t hd = (uint64_t)heads * d;
    return qkv[((uint64_t)bb * t + i) * 3 * hd + which * hd + (uint64_t)h * d + c];
}

/* p[0..i] = softmax_j(q_i . k_j / sqrt(d)) over j <= i. */
static void softmax_row(const double *qkv, uint32_t t, uint32_t heads, uint32_t d, uint32_t bb,
                        uint32_t h, uint32_t i, double *p)
{
    double mx = -INFINITY, sum = 0.0;
    for (uint32_t j = 0; j <= i; j++) {
        double s = 0.0;
        for (uint32_t c = 0; c < d; c++)
            s += at(qkv, t, heads, d, bb, i, 0, h, c) * at(qkv, t, heads, d, bb, j, 1, h, c);
        p[j] = s / sqrt((double)d);
        mx = fmax(mx, p[j]);
    }
    for (uint32_t j = 0; j <= i; j++) {
        p[j] = exp(p[j] - mx);
        sum += p[j];
    }
    for (uint32_t j = 0; j <= i; j++)
        p[j] /= sum;
}

void ka_ref_attention_lse(const double *qkv, double *lse, uint32_t b, uint32_t t,
                          uint32_t heads, uint32_t d)
{
    for (uint32_t bb = 0; bb < b; bb++)
        for (uint32_t h = 0; h < heads; h++)
            for (uint32_t i = 0; i < t; i++) {
                double mx = -INFINITY, sum = 0.0;
                for (int pass = 0; pass < 2; pass++)
                    for (uint32_t j = 0; j <= i; j++) {
                        double s = 0.0;
                        for (uint32_t c = 0; c < d; c++)
                            s += at(qkv, t, heads, d, bb, i, 0, h, c) *
                                 at(qkv, t, heads, d, bb, j, 1, h, c);
                        s /= sqrt((double)d);
                        if (pass == 0)
                            mx = fmax(mx, s);
                        else
                            sum += exp(s - mx);
                    }
                lse[((uint64_t)bb * heads + h) * t + i] = mx + log(sum);
            }
}

/* The dropout factor of attention element (bb, h, i, j): 0 or 1 / (1 - p_drop). */
static double drop_factor(uint32_t key, uint32_t threshold, float p_drop, uint32_t t,
                          uint32_t heads, uint64_t bb, uint32_t h, uint32_t i, uint32_t j)
{
    if (p_drop == 0.0f)
        return 1.0;
    uint64_t idx = ((bb * heads + h) * t + i) * t + j; /* hashed: its low 32 bits */
    return dropout_kept(key, (uint32_t)idx, threshold) ? 1.0 / (1.0 - (double)p_drop) : 0.0;
}

void ka_ref_attention_probs(const double *qkv, double *probs, uint32_t b, uint32_t t,
                            uint32_t heads, uint32_t d)
{
    for (uint32_t bb = 0; bb < b; bb++)
        for (uint32_t h = 0; h < heads; h++)
            for (uint32_t i = 0; i < t; i++) {
                double *row = probs + (((uint64_t)bb * heads + h) * t + i) * t;
                softmax_row(qkv, t, heads, d, bb, h, i, row);
                for (uint32_t j = i + 1; j < t; j++)
                    row[j] = 0.0;
            }
}

void ka_ref_attention(const double *qkv, double *y, uint32_t b, uint32_t t, uint32_t heads,
                      uint32_t d, float p_drop, uint64_t seed, uint64_t b0, uint64_t step)
{
    uint32_t key = dropout_key64(seed, step), thr = dropout_threshold(p_drop);
    double *p = malloc((size_t)t * sizeof *p);
    if (!p)
        return;
    uint64_t hd = (uint64_t)heads * d;
    for (uint32_t bb = 0; bb < b; bb++)
        for (uint32_t h = 0; h < heads; h++)
            for (uint32_t i = 0; i < t; i++) {
                softmax_row(qkv, t, heads, d, bb, h, i, p);
                double *yi = y + ((uint64_t)bb * t + i) * hd + (uint64_t)h * d;
                for (uint32_t c = 0; c < d; c++) {
                    double s = 0.0;
                    for (uint32_t j = 0; j <= i; j++)
                        s += p[j] * drop_factor(key, thr, p_drop, t, heads, b0 + bb, h, i, j) *
                             at(qkv, t, heads, d, bb, j, 2, h, c);
                    yi[c] = s;
                }
            }
    free(p);
}

void ka_ref_attention_backward(const double *qkv, const double *dy, double *dqkv, uint32_t b,
                               uint32_t t, uint32_t heads, uint32_t d, float p_drop,
                               uint64_t seed, uint64_t b0, uint64_t step)
{
    uint32_t key = dropout_key64(seed, step), thr = dropout_threshold(p_drop);
    double *p = malloc((size_t)t * sizeof *p), *dp = malloc((size_t)t * sizeof *dp);
    if (!p || !dp) {
        free(p);
        free(dp);
        return;
    }
    uint64_t hd = (uint64_t)heads * d;
    double rs = 1.0 / sqrt((double)d);
    for (uint32_t bb = 0; bb < b; bb++)
        for (uint32_t h = 0; h < heads; h++)
            for (uint32_t i = 0; i < t; i++) {
                softmax_row(qkv, t, heads, d, bb, h, i, p);
                const double *dyi = dy + ((uint64_t)bb * t + i) * hd + (uint64_t)h * d;
                /* dP_ij = (dy_i . v_j) * drop factor; D_i = sum_j p_ij dP_ij */
                double dsum = 0.0;
                for (uint32_t j = 0; j <= i; j++) {
                    double f = drop_factor(key, thr, p_drop, t, heads, b0 + bb, h, i, j), s = 0.0;
                    for (uint32_t c = 0; c < d; c++)
                        s += dyi[c] * at(qkv, t, heads, d, bb, j, 2, h, c);
                    dp[j] = s * f;
                    dsum += p[j] * dp[j];
                    /* dV_j += drop(p_ij) dy_i */
                    double *dv = dqkv + ((uint64_t)bb * t + j) * 3 * hd + 2 * hd + (uint64_t)h * d;
                    for (uint32_t c = 0; c < d; c++)
                        dv[c] += p[j] * f * dyi[c];
                }
                /* dS_ij = p_ij (dP_ij - D_i); dQ_i += dS_ij k_j / sqrt(d),
                 * dK_j += dS_ij q_i / sqrt(d) */
                double *dq = dqkv + ((uint64_t)bb * t + i) * 3 * hd + (uint64_t)h * d;
                for (uint32_t j = 0; j <= i; j++) {
                    double ds = p[j] * (dp[j] - dsum) * rs;
                    double *dk = dqkv + ((uint64_t)bb * t + j) * 3 * hd + hd + (uint64_t)h * d;
                    for (uint32_t c = 0; c < d; c++) {
                        dq[c] += ds * at(qkv, t, heads, d, bb, j, 1, h, c);
                        dk[c] += ds * at(qkv, t, heads, d, bb, i, 0, h, c);
                    }
                }
            }
    free(p);
    free(dp);
}
