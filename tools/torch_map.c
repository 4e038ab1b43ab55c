/* torch_map.c - vkt train's built-in name maps from PyTorch's names (torch_map.h). One
 * table per model of (vkt name, PyTorch name, transposed) rows; "%u" in a row is the layer
 * or block index. */
#include "torch_map.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

typedef struct map_row {
    const char *vkt, *torch;
    int transpose;
} map_row;

/* --model cnn: nn.Sequential(Conv2d(1,16,3,padding=1), ReLU, MaxPool2d(2), Conv2d(16,32,
 * 3,padding=1), ReLU, MaxPool2d(2), Flatten, Linear(1568,10)). Conv2d weights are [out,
 * in, kh, kw] in both; Flatten of NCHW is the engine's reshape. */
static const map_row cnn_rows[] = {
    {"conv1.w", "0.weight", 0}, {"conv1.b", "0.bias", 0}, {"conv2.w", "3.weight", 0},
    {"conv2.b", "3.bias", 0},   {"fc.w", "7.weight", 1},  {"fc.b", "7.bias", 0},
};

/* --model charlm, per block %u. */
static const map_row block_rows[] = {
    {"h%u.ln1.gamma", "transformer.h.%u.ln_1.weight", 0},
    {"h%u.ln1.beta", "transformer.h.%u.ln_1.bias", 0},
    {"h%u.qkv.w", "transformer.h.%u.attn.c_attn.weight", 1},
    {"h%u.qkv.b", "transformer.h.%u.attn.c_attn.bias", 0},
    {"h%u.proj.w", "transformer.h.%u.attn.c_proj.weight", 1},
    {"h%u.proj.b", "transformer.h.%u.attn.c_proj.bias", 0},
    {"h%u.ln2.gamma", "transformer.h.%u.ln_2.weight", 0},
    {"h%u.ln2.beta", "transformer.h.%u.ln_2.bias", 0},
    {"h%u.fc.w", "transformer.h.%u.mlp.c_fc.weight", 1},
    {"h%u.fc.b", "transformer.h.%u.mlp.c_fc.bias", 0},
    {"h%u.fc2.w", "transformer.h.%u.mlp.c_proj.weight", 1},
    {"h%u.fc2.b", "transformer.h.%u.mlp.c_proj.bias", 0},
};

static const map_row lm_rows[] = {
    {"tok_emb", "transformer.wte.weight", 0}, {"pos_emb", "transformer.wpe.weight", 0},
    {"ln_f.gamma", "transformer.ln_f.weight", 0}, {"ln_f.beta", "transformer.ln_f.bias", 0},
    {"head.w", "lm_head.weight", 1},          {"head.b", "lm_head.bias", 0},
};

typedef struct out {
    char *buf;
    size_t size, n;
    int full;
} out;

static void line(out *o, const map_row *r, uint32_t index)
{
    char v[96], t[128];
    snprintf(v, sizeof v, r->vkt, index);
    snprintf(t, sizeof t, r->torch, index);
    int k = snprintf(o->buf + o->n, o->size - o->n, "%s %s%s\n", v, t,
                     r->transpose ? " transpose" : "");
    if (k < 0 || (size_t)k >= o->size - o->n)
        o->full = 1;
    else
        o->n += (size_t)k;
}

/* A norm's beta row, absent with RMSNorm. */
static int is_beta(const map_row *r) { return strstr(r->vkt, ".beta") != NULL; }

int cli_torch_map(const cli_torch_model *m, char *buf, size_t size)
{
    out o = {buf, size, 0, size == 0};
    if (size)
        buf[0] = '\0';
    if (!strcmp(m->model, "mlp")) {
        uint32_t stride = m->dropout ? 3 : 2;
        for (uint32_t k = 0; k <= m->n_widths && !o.full; k++) {
            map_row w = {"w%u", NULL, 1}, b = {"b%u", NULL, 0};
            char tw[32], tb[32], vw[16], vb[16];
            snprintf(vw, sizeof vw, "w%u", k + 1);
            snprintf(vb, sizeof vb, "b%u", k + 1);
            snprintf(tw, sizeof tw, "%u.weight", k * stride);
            snprintf(tb, sizeof tb, "%u.bias", k * stride);
            w.vkt = vw, w.torch = tw, b.vkt = vb, b.torch = tb;
            line(&o, &w, 0);
            line(&o, &b, 0);
        }
    } else if (!strcmp(m->model, "cnn")) {
        for (size_t i = 0; i < sizeof cnn_rows / sizeof cnn_rows[0]; i++)
            line(&o, &cnn_rows[i], 0);
    } else if (!strcmp(m->model, "charlm")) {
        for (size_t i = 0; i < sizeof lm_rows / sizeof lm_rows[0]; i++)
            if (!(m->rms_norm && is_beta(&lm_rows[i])))
                line(&o, &lm_rows[i], 0);
        for (uint32_t l = 0; l < m->layers && !o.full; l++)
            for (size_t i = 0; i < sizeof block_rows / sizeof block_rows[0]; i++)
                if (!(m->rms_norm && is_beta(&block_rows[i])))
                    line(&o, &block_rows[i], l);
    } else {
        return 0;
    }
    return !o.full;
}
