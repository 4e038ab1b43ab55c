#include "models.h"

#include <stdio.h>

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
