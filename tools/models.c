#include "models.h"

#include <math.h>
#include <stdio.h>

#include "platform/platform.h"

vkt_status cli_build_mlp(cli_model *m, uint32_t batch, uint32_t features, uint32_t classes,
                         const uint32_t *widths, uint32_t n_widths, float dropout,
                         uint64_t seed)
{
    vkt_graph_options go = {.seed = seed};
    vkt_status st = vkt_graph_create(&go, &m->graph);
    if (st != VKT_OK)
        return st;
    vkt_graph *g = m->graph;
    vkt_shape in = {2, {batch, features}};
    m->input = vkt_input(g, "x", &in);
    m->labels = vkt_input_labels(g, "labels", batch);
    vkt_tensor *h = m->input;
    uint32_t fan_in = features;
    for (uint32_t i = 0; i <= n_widths; i++) {
        uint32_t out = i < n_widths ? widths[i] : classes;
        char wn[32], bn[32];
        snprintf(wn, sizeof wn, "w%u", i + 1);
        snprintf(bn, sizeof bn, "b%u", i + 1);
        vkt_shape ws = {2, {fan_in, out}}, bs = {1, {out}};
        vkt_init he = {.kind = i < n_widths ? VKT_INIT_HE : VKT_INIT_GLOROT};
        vkt_tensor *w = vkt_param(g, wn, &ws, &he);
        vkt_tensor *b = vkt_param(g, bn, &bs, NULL);
        h = vkt_linear(g, h, w, b);
        if (i < n_widths)
            h = vkt_relu(g, h);
        if (i < n_widths && dropout > 0)
            h = vkt_dropout(g, h, dropout);
        fan_in = out;
    }
    m->logits = vkt_set_name(g, h, "logits");
    m->loss = vkt_softmax_cross_entropy(g, m->logits, m->labels);
    return vkt_graph_status(g);
}

static vkt_tensor *param(vkt_graph *g, const char *name, uint32_t ndim, uint32_t d0, uint32_t d1,
                         uint32_t d2, uint32_t d3, vkt_init init)
{
    vkt_shape s = {ndim, {d0, d1, d2, d3}};
    return vkt_param(g, name, &s, &init);
}

uint32_t cli_image_side(uint32_t features)
{
    uint32_t side = 1;
    while ((side + 1) * (side + 1) <= features)
        side++;
    return side * side == features && side >= 4 ? side : 0;
}

vkt_status cli_build_cnn(cli_model *m, uint32_t batch, uint32_t features, uint32_t classes,
                         uint64_t seed)
{
    uint32_t side = cli_image_side(features);
    vkt_graph_options go = {.seed = seed};
    vkt_status st = vkt_graph_create(&go, &m->graph);
    if (st != VKT_OK)
        return st;
    vkt_graph *g = m->graph;
    vkt_shape in = {2, {batch, features}}, img = {4, {0, 1, side, side}};
    m->input = vkt_input(g, "x", &in);
    m->labels = vkt_input_labels(g, "labels", batch);
    vkt_init he = {.kind = VKT_INIT_HE}, zero = {.kind = VKT_INIT_ZEROS};
    vkt_conv2d_options same = {.pad_h = 1, .pad_w = 1};
    vkt_tensor *h = vkt_reshape(g, m->input, &img);
    h = vkt_conv2d(g, h, param(g, "conv1.w", 4, 16, 1, 3, 3, he),
                   param(g, "conv1.b", 1, 16, 0, 0, 0, zero), &same);
    h = vkt_max_pool2d(g, vkt_relu(g, h), 2, 2, 0);
    h = vkt_conv2d(g, h, param(g, "conv2.w", 4, 32, 16, 3, 3, he),
                   param(g, "conv2.b", 1, 32, 0, 0, 0, zero), &same);
    h = vkt_max_pool2d(g, vkt_relu(g, h), 2, 2, 0);
    uint32_t flat = 32 * (side / 4) * (side / 4);
    vkt_shape fs = {2, {0, flat}};
    h = vkt_linear(g, vkt_reshape(g, h, &fs),
                   param(g, "fc.w", 2, flat, classes, 0, 0, (vkt_init){.kind = VKT_INIT_GLOROT}),
                   param(g, "fc.b", 1, classes, 0, 0, 0, zero));
    m->logits = vkt_set_name(g, h, "logits");
    m->loss = vkt_softmax_cross_entropy(g, m->logits, m->labels);
    return vkt_graph_status(g);
}

/* x [B,T,C] -> layer norm with its own gamma (ones) and beta (zeros), or RMSNorm with its
 * own gamma. */
static vkt_tensor *norm(vkt_graph *g, vkt_tensor *x, uint32_t c, const char *name, int rms)
{
    char gn[48], bn[48];
    snprintf(gn, sizeof gn, "%s.gamma", name);
    snprintf(bn, sizeof bn, "%s.beta", name);
    if (rms)
        return vkt_rms_norm(g, x,
                            param(g, gn, 1, c, 0, 0, 0, (vkt_init){VKT_INIT_CONSTANT, 1, 0, 0}), 0);
    return vkt_layer_norm(g, x, param(g, gn, 1, c, 0, 0, 0, (vkt_init){VKT_INIT_CONSTANT, 1, 0, 0}),
                          param(g, bn, 1, c, 0, 0, 0, (vkt_init){.kind = VKT_INIT_ZEROS}), 0);
}

/* x [B,T,in] -> [B,T,out]; weights normal(0, std), bias zeros. */
static vkt_tensor *dense(vkt_graph *g, vkt_tensor *x, uint32_t in, uint32_t out, float std,
                         const char *name)
{
    char wn[48], bn[48];
    snprintf(wn, sizeof wn, "%s.w", name);
    snprintf(bn, sizeof bn, "%s.b", name);
    return vkt_linear(g, x, param(g, wn, 2, in, out, 0, 0, (vkt_init){VKT_INIT_NORMAL, 0, std, 0}),
                      param(g, bn, 1, out, 0, 0, 0, (vkt_init){.kind = VKT_INIT_ZEROS}));
}

static vkt_tensor *drop(vkt_graph *g, vkt_tensor *x, float p)
{
    return p > 0 ? vkt_dropout(g, x, p) : x;
}

/* Bytes a training run of the transformer needs at least: parameters four times (values,
 * gradients, Adam's two moments) and the activations each block saves for its backward
 * (per token: about 16 widths and the attention's probabilities), in double so absurd
 * sizes do not wrap. */
static double charlm_bytes(uint32_t batch, const cli_lm_shape *s)
{
    double c = s->width, t = s->context, tokens = (double)batch * t;
    double block_params = 12.0 * c * c + 13.0 * c;
    double params = (double)s->layers * block_params + (double)s->vocab * c * 2 + t * c + 2 * c;
    double acts = (double)s->layers * tokens * (16.0 * c + (double)s->heads * t);
    return 4.0 * (4.0 * params + acts);
}

/* This machine's memory (lavapipe's device memory is host memory; a GPU's is smaller). */
static double host_bytes(void)
{
    return (double)plat_physical_memory();
}

vkt_status cli_build_charlm(cli_model *m, uint32_t batch, const cli_lm_shape *s, uint64_t seed)
{
    /* Refused before building: a graph of 10^5 blocks takes minutes to compile and could
     * never be allocated. */
    double need = charlm_bytes(batch, s), have = host_bytes();
    if (have > 0 && need > have) {
        fprintf(stderr, "vkt: --layers %u (--width %u, --context %u, --batch %u): the model "
                "needs about %.1f GB for parameters, gradients, optimizer state and "
                "activations, more than this machine's %.1f GB of memory\n", s->layers,
                s->width, s->context, batch, need / 1e9, have / 1e9);
        m->graph = NULL;
        return VKT_ERROR_LIMIT;
    }
    vkt_graph_options go = {.seed = seed};
    vkt_status st = vkt_graph_create(&go, &m->graph);
    if (st != VKT_OK)
        return st;
    vkt_graph *g = m->graph;
    uint32_t c = s->width, t = s->context;
    vkt_shape is = {2, {batch, t}};
    m->input = vkt_input(g, "ids", &is);
    m->labels = vkt_input_labels_shape(g, "targets", &is);
    const float std = 0.02f, proj_std = 0.02f / sqrtf(2.0f * (float)s->layers);
    vkt_tensor *tok = param(g, "tok_emb", 2, s->vocab, c, 0, 0, (vkt_init){VKT_INIT_NORMAL, 0, std, 0});
    vkt_tensor *pos = param(g, "pos_emb", 2, t, c, 0, 0, (vkt_init){VKT_INIT_NORMAL, 0, std, 0});
    vkt_tensor *x = drop(g, vkt_add(g, vkt_embedding(g, m->input, tok), pos), s->dropout);
    for (uint32_t l = 0; l < s->layers; l++) {
        char name[32];
        snprintf(name, sizeof name, "h%u.ln1", l);
        vkt_tensor *h = norm(g, x, c, name, s->rms_norm);
        snprintf(name, sizeof name, "h%u.qkv", l);
        h = vkt_causal_attention(g, dense(g, h, c, 3 * c, std, name), s->heads, s->dropout);
        snprintf(name, sizeof name, "h%u.proj", l);
        x = vkt_add(g, x, drop(g, dense(g, h, c, c, proj_std, name), s->dropout));
        snprintf(name, sizeof name, "h%u.ln2", l);
        h = norm(g, x, c, name, s->rms_norm);
        snprintf(name, sizeof name, "h%u.fc", l);
        h = dense(g, h, c, 4 * c, std, name);
        h = s->silu ? vkt_silu(g, h) : vkt_gelu(g, h);
        snprintf(name, sizeof name, "h%u.fc2", l);
        x = vkt_add(g, x, drop(g, dense(g, h, 4 * c, c, proj_std, name), s->dropout));
    }
    x = norm(g, x, c, "ln_f", s->rms_norm);
    m->logits = vkt_set_name(g, dense(g, x, c, s->vocab, std, "head"), "logits");
    m->loss = vkt_softmax_cross_entropy(g, m->logits, m->labels);
    return vkt_graph_status(g);
}
