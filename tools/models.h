/* Model builders of the vkt command: each builds a graph through vkt.h and names the
 * tensors the training loop needs. */
#ifndef VKT_TOOLS_MODELS_H
#define VKT_TOOLS_MODELS_H

#include "vkt.h"

typedef struct cli_model {
    vkt_graph *graph;
    vkt_tensor *input;   /* [B, features] */
    vkt_tensor *labels;  /* [B] */
    vkt_tensor *logits;  /* [B, classes] */
    vkt_tensor *loss;    /* scalar */
} cli_model;

/* features -> widths[0] -> ... -> widths[n-1] -> classes, relu between (then dropout
 * with probability `dropout` when > 0), He init. */
vkt_status cli_build_mlp(cli_model *m, uint32_t batch, uint32_t features, uint32_t classes,
                         const uint32_t *widths, uint32_t n_widths, float dropout,
                         uint64_t seed);

#endif
