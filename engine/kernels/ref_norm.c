/* ref_norm.c - double-precision CPU references of the normalization (layer, RMS, batch)
 * and embedding kernels (norm.h), from the definitions. The backward ones differentiate through the
 * mean and the variance by the chain rule, step by step, rather than using the closed
 * forms the shaders evaluate, so a test comparing the two checks the algebra as well. */
#include "kernels/norm.h"

#include <math.h>

/* Statistics of a set of m elements x[idx(k)], idx(k) = (k / inner) * outer_stride +
 * offset + k % inner: for a layernorm row inner = m (contiguous), for a batchnorm channel
 * inner = hw, outer_stride = c * hw. */
typedef struct set_idx {
    uint64_t m, inner, outer_stride, offset;
} set_idx;

static uint64_t at(const set_idx *s, uint64_t k)
{
    return (k / s->inner) * s->outer_stride + s->offset + k % s->inner;
}

static void moments(const double *x, const set_idx *s, double *mean, double *var)
{
    double sum = 0;
    for (uint64_t k = 0; k < s->m; k++)
        sum += x[at(s, k)];
    double mu = sum / (double)s->m, q = 0;
    for (uint64_t k = 0; k < s->m; k++)
        q += (x[at(s, k)] - mu) * (x[at(s, k)] - mu);
    *mean = mu;
    *var = q / (double)s->m;
}

/* y = (x - mean) / sqrt(var + eps) * g + b over one set. */
static void normalize(const double *x, const set_idx *s, double mean, double var, double eps,
                      const double *g, const double *b, int per_element_params, double *y)
{
    double inv = 1.0 / sqrt(var + eps);
    for (uint64_t k = 0; k < s->m; k++) {
        uint64_t i = at(s, k), pi = per_element_params ? k : 0;
        y[i] = (x[i] - mean) * inv * g[pi] + b[pi];
    }
}

/* The backward of one set by the chain rule, with dxhat = dy * g:
 *   dvar  = sum dxhat * (x - mean) * -1/2 (var + eps)^(-3/2)
 *   dmean = sum -dxhat / sqrt(var + eps) + dvar * sum -2 (x - mean) / m
 *   dx    = dxhat / sqrt(var + eps) + dvar * 2 (x - mean) / m + dmean / m
 * dgamma and dbeta accumulate into dg[pi], db[pi] (pi = k, or 0 for one parameter per
 * set). */
static void backward_set(const double *x, const double *g, const double *dy, const set_idx *s,
                         double eps, int per_element_params, double *dx, double *dg,
                         double *db)
{
    double mean, var;
    moments(x, s, &mean, &var);
    double m = (double)s->m, inv = 1.0 / sqrt(var + eps);
    double dvar = 0, sum_dev = 0, dmean = 0;
    for (uint64_t k = 0; k < s->m; k++) {
        uint64_t i = at(s, k), pi = per_element_params ? k : 0;
        double dxhat = dy[i] * g[pi];
        dvar += dxhat * (x[i] - mean) * -0.5 * pow(var + eps, -1.5);
        sum_dev += -2.0 * (x[i] - mean);
        dmean += -dxhat * inv;
    }
    dmean += dvar * sum_dev / m;
    for (uint64_t k = 0; k < s->m; k++) {
        uint64_t i = at(s, k), pi = per_element_params ? k : 0;
        double xhat = (x[i] - mean) * inv;
        if (dx)
            dx[i] += dy[i] * g[pi] * inv + dvar * 2.0 * (x[i] - mean) / m + dmean / m;
        if (dg)
            dg[pi] += dy[i] * xhat;
        if (db)
            db[pi] += dy[i];
    }
}

void kn_ref_layernorm(const double *x, const double *gamma, const double *beta, double *y,
                      uint32_t rows, uint32_t cols, double eps)
{
    for (uint32_t r = 0; r < rows; r++) {
        set_idx s = {cols, cols, cols, (uint64_t)r * cols};
        double mean, var;
        moments(x, &s, &mean, &var);
        normalize(x, &s, mean, var, eps, gamma, beta, 1, y);
    }
}

void kn_ref_layernorm_backward(const double *x, const double *gamma, const double *dy,
                               double *dx, double *dgamma, double *dbeta, uint32_t rows,
                               uint32_t cols, double eps)
{
    for (uint32_t r = 0; r < rows; r++) {
        set_idx s = {cols, cols, cols, (uint64_t)r * cols};
        backward_set(x, gamma, dy, &s, eps, 1, dx, dgamma, dbeta);
    }
}

/* ---- RMS normalization ---------------------------------------------------------------- */

/* Mean of the squares of row r. */
static double mean_square(const double *x, uint32_t r, uint32_t cols)
{
    double q = 0;
    for (uint32_t c = 0; c < cols; c++)
        q += x[(uint64_t)r * cols + c] * x[(uint64_t)r * cols + c];
    return q / cols;
}

void kn_ref_rmsnorm(const double *x, const double *gamma, double *y, double *rstd,
                    uint32_t rows, uint32_t cols, double eps)
{
    for (uint32_t r = 0; r < rows; r++) {
        double inv = 1.0 / sqrt(mean_square(x, r, cols) + eps);
        for (uint32_t c = 0; c < cols; c++) {
            uint64_t i = (uint64_t)r * cols + c;
            y[i] = x[i] * inv * gamma[c];
        }
        if (rstd)
            rstd[r] = inv;
    }
}

/* Per row, with ms = mean of x^2 and s = (ms + eps)^(-1/2), y_j = x_j s gamma_j:
 *   ds  = sum_j dy_j gamma_j x_j
 *   dms = ds * -1/2 (ms + eps)^(-3/2)
 *   dx_j = dy_j gamma_j s + dms * 2 x_j / cols
 * and dgamma_j += dy_j x_j s. */
void kn_ref_rmsnorm_backward(const double *x, const double *gamma, const double *dy,
                             double *dx, double *dgamma, uint32_t rows, uint32_t cols,
                             double eps)
{
    for (uint32_t r = 0; r < rows; r++) {
        double ms = mean_square(x, r, cols), inv = 1.0 / sqrt(ms + eps), ds = 0;
        for (uint32_t c = 0; c < cols; c++) {
            uint64_t i = (uint64_t)r * cols + c;
            ds += dy[i] * gamma[c] * x[i];
        }
        double dms = ds * -0.5 * pow(ms + eps, -1.5);
        for (uint32_t c = 0; c < cols; c++) {
            uint64_t i = (uint64_t)r * cols + c;
            if (dx)
                dx[i] += dy[i] * gamma[c] * inv + dms * 2.0 * x[i] / cols;
            if (dgamma)
                dgamma[c] += dy[i] * x[i] * inv;
        }
    }
}

void kn_ref_batchnorm(const double *x, const double *gamma, const double *beta, double *y,
                      double *running_mean, double *running_var, uint32_t n, uint32_t c,
                      uint32_t hw, double eps, double momentum, int training)
{
    for (uint32_t ch = 0; ch < c; ch++) {
        set_idx s = {(uint64_t)n * hw, hw, (uint64_t)c * hw, (uint64_t)ch * hw};
        double mean, var;
        if (training) {
            moments(x, &s, &mean, &var);
            double unbiased = s.m > 1 ? var * (double)s.m / (double)(s.m - 1) : var;
            if (training == KN_BN_TRAIN) { /* KN_BN_TRAIN_KEEP leaves them */
                running_mean[ch] = (1.0 - momentum) * running_mean[ch] + momentum * mean;
                running_var[ch] = (1.0 - momentum) * running_var[ch] + momentum * unbiased;
            }
        } else {
            mean = running_mean[ch];
            var = running_var[ch];
        }
        normalize(x, &s, mean, var, eps, gamma + ch, beta + ch, 0, y);
    }
}

void kn_ref_batchnorm_backward(const double *x, const double *gamma, const double *dy,
                               double *dx, double *dgamma, double *dbeta, uint32_t n,
                               uint32_t c, uint32_t hw, double eps)
{
    for (uint32_t ch = 0; ch < c; ch++) {
        set_idx s = {(uint64_t)n * hw, hw, (uint64_t)c * hw, (uint64_t)ch * hw};
        backward_set(x, gamma + ch, dy, &s, eps, 0, dx, dgamma ? dgamma + ch : NULL,
                     dbeta ? dbeta + ch : NULL);
    }
}

/* The row of an id: the nearest valid one, like the shader (ids are never out of range
 * in use). */
static uint32_t row_of(double id, uint32_t vocab)
{
    if (!(id > 0)) /* also NaN */
        return 0;
    return id >= vocab - 1 ? vocab - 1 : (uint32_t)id;
}

void kn_ref_embedding(const double *ids, const double *table, double *y, uint32_t n,
                      uint32_t vocab, uint32_t dim)
{
    for (uint32_t i = 0; i < n; i++) {
        uint32_t v = row_of(ids[i], vocab);
        for (uint32_t d = 0; d < dim; d++)
            y[(uint64_t)i * dim + d] = table[(uint64_t)v * dim + d];
    }
}

void kn_ref_embedding_backward(const double *ids, const double *dy, double *dtable, uint32_t n,
                               uint32_t vocab, uint32_t dim)
{
    for (uint32_t i = 0; i < n; i++) {
        if (!(ids[i] >= 0 && ids[i] < vocab)) /* out of range: adds nothing */
            continue;
        uint32_t v = (uint32_t)ids[i];
        for (uint32_t d = 0; d < dim; d++)
            dtable[(uint64_t)v * dim + d] += dy[(uint64_t)i * dim + d];
    }
}
