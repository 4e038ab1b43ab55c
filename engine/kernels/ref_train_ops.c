/* ref_train_ops.c - fp32-interface CPU references of the training kernels (train_ops.h),
 * accumulating in double; the kernel tests compare the device against these. */
#include "kernels/train_ops.h"
#include "activation.h"
#include "dropout_hash.h"
#include "dtype.h"
#include "kernels/ref.h"

#include <math.h>
#include <string.h>

static float out_with(float v, float beta, float old)
{
    return beta != 0.0f ? (float)((double)v + (double)beta * old) : v;
}

void kt_ref_bias_act(vkt_unary_op op, float alpha, float *pre, const float *bias, float *y,
                     uint32_t rows, uint32_t cols)
{
    for (uint64_t i = 0; i < (uint64_t)rows * cols; i++) {
        float v = bias ? pre[i] + bias[i % cols] : pre[i];
        float f = kref_unary_f(op, alpha, v);
        if (y) {
            pre[i] = v;
            y[i] = f;
        } else {
            pre[i] = f;
        }
    }
}

/* v rounded to the 16-bit type (dtype.h, as the shaders round), and such bits widened. */
static uint16_t round16(vkt_dtype type, float v)
{
    uint32_t bits;
    memcpy(&bits, &v, 4);
    return (uint16_t)(type == VKT_DTYPE_BF16 ? dtype_f32_to_bf16(bits) : dtype_f32_to_f16(bits));
}

static float widen16(vkt_dtype type, uint16_t h)
{
    return type == VKT_DTYPE_BF16 ? dtype_bf16_value(h) : dtype_f16_value(h);
}

void kt_ref_bias_act_keep16(vkt_unary_op op, float alpha, vkt_dtype type, float *y,
                            const float *bias, uint16_t *pre16, uint32_t rows, uint32_t cols)
{
    for (uint64_t i = 0; i < (uint64_t)rows * cols; i++) {
        float v = bias ? y[i] + bias[i % cols] : y[i];
        pre16[i] = round16(type, v);
        y[i] = kref_unary_f(op, alpha, widen16(type, pre16[i]));
    }
}

void kt_ref_act_rebuild16(vkt_unary_op op, float alpha, vkt_dtype type, const uint16_t *pre16,
                          uint16_t *y16, uint32_t rows, uint32_t cols)
{
    for (uint64_t i = 0; i < (uint64_t)rows * cols; i++)
        y16[i] = round16(type, kref_unary_f(op, alpha, widen16(type, pre16[i])));
}

void kt_ref_bias_act_backward(vkt_unary_op op, float alpha, int from_y, const float *v,
                              const float *dy, float *dz, float beta, float *db, float beta_b,
                              uint32_t rows, uint32_t cols)
{
    for (uint32_t c = 0; c < cols; c++) {
        double s = 0;
        for (uint32_t r = 0; r < rows; r++) {
            uint64_t i = (uint64_t)r * cols + c;
            double d = from_y ? act_df_from_y(op, alpha, v[i]) : kref_unary_df(op, alpha, v[i]);
            float g = (float)(dy[i] * d);
            s += g;
            if (dz)
                dz[i] = out_with(g, beta, dz[i]);
        }
        if (db)
            db[c] = out_with((float)s, beta_b, db[c]);
    }
}

void kt_ref_sce(const float *z, const int32_t *labels, float *loss, int mode, float *p,
                uint32_t rows, uint32_t cols)
{
    double total = 0;
    for (uint32_t r = 0; r < rows; r++) {
        const float *zr = z + (uint64_t)r * cols;
        double m = zr[0], s = 0;
        for (uint32_t c = 1; c < cols; c++)
            m = zr[c] > m ? zr[c] : m;
        for (uint32_t c = 0; c < cols; c++)
            s += exp(zr[c] - m);
        int32_t l = labels[r] < 0 ? 0 : labels[r] >= (int32_t)cols ? (int32_t)cols - 1 : labels[r];
        total += m + log(s) - zr[l];
        for (uint32_t c = 0; mode && c < cols; c++) {
            double q = exp(zr[c] - m) / s;
            p[(uint64_t)r * cols + c] =
                (float)(mode == 2 ? (q - (c == (uint32_t)l ? 1.0 : 0.0)) / rows : q);
        }
    }
    loss[0] = (float)(total / rows);
}

void kt_ref_sce_backward(const float *p, const int32_t *labels, const float *dl, float *dz,
                         float beta, uint32_t rows, uint32_t cols)
{
    double g = (double)dl[0] / rows;
    for (uint32_t r = 0; r < rows; r++) {
        int32_t l = labels[r] < 0 ? 0 : labels[r] >= (int32_t)cols ? (int32_t)cols - 1 : labels[r];
        for (uint32_t c = 0; c < cols; c++) {
            uint64_t i = (uint64_t)r * cols + c;
            dz[i] = out_with((float)((p[i] - (c == (uint32_t)l ? 1.0 : 0.0)) * g), beta, dz[i]);
        }
    }
}

void kt_ref_mse(const float *a, const float *b, float *loss, uint64_t n)
{
    double s = 0;
    for (uint64_t i = 0; i < n; i++)
        s += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
    loss[0] = (float)(s / (double)n);
}

void kt_ref_mse_backward(const float *a, const float *b, const float *dl, float *d, float sign,
                         float beta, uint64_t n)
{
    double g = sign * 2.0 / (double)n * dl[0];
    for (uint64_t i = 0; i < n; i++)
        d[i] = out_with((float)(((double)a[i] - b[i]) * g), beta, d[i]);
}

void kt_ref_slice(const float *x, uint32_t src_row, uint32_t src_base, float *y,
                  uint32_t dst_row, uint32_t dst_base, uint32_t rows, uint32_t len,
                  float alpha, float beta)
{
    for (uint64_t r = 0; r < rows; r++)
        for (uint64_t c = 0; c < len; c++) {
            float *o = &y[r * dst_row + dst_base + c];
            *o = out_with((float)((double)alpha * x[r * src_row + src_base + c]), beta, *o);
        }
}

void kt_ref_broadcast(const float *x, float *y, uint32_t outer, uint32_t axis, uint32_t inner,
                      float alpha, float beta)
{
    for (uint64_t o = 0; o < outer; o++)
        for (uint64_t a = 0; a < axis; a++)
            for (uint64_t i = 0; i < inner; i++) {
                float *out = &y[(o * axis + a) * inner + i];
                *out = out_with((float)((double)alpha * x[o * inner + i]), beta, *out);
            }
}

void kt_ref_transpose(const float *x, float *y, uint32_t rows, uint32_t cols, float alpha,
                      float beta)
{
    for (uint64_t i = 0; i < rows; i++)
        for (uint64_t j = 0; j < cols; j++) {
            float *o = &y[j * rows + i];
            *o = out_with((float)((double)alpha * x[i * cols + j]), beta, *o);
        }
}

void kt_ref_dropout(const float *x, uint64_t step, float *y, uint64_t n, float p, uint64_t seed,
                    uint64_t i_off, float beta)
{
    uint32_t key = dropout_key64(seed, step), thr = dropout_threshold(p);
    float scale = (float)(1.0 / (1.0 - (double)p));
    for (uint64_t i = 0; i < n; i++) {
        float f = dropout_kept(key, (uint32_t)(i_off + i), thr) ? scale : 0.0f;
        y[i] = out_with(x[i] * f, beta, y[i]);
    }
}
