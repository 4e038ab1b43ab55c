/* Model builders of the vkt command: each builds a graph through vkt.h and names the
 * tensors the training loop needs. */
#ifndef VKT_TOOLS_MODELS_H
#define VKT_TOOLS_MODELS_H

#include "vkt.h"

typedef struct cli_model {
    vkt_graph *graph;
    vkt_tensor *input;   /* [B, features]; character model: token ids [B, T] */
    vkt_tensor *labels;  /* [B]; character model: next-token targets [B, T] */
    vkt_tensor *logits;  /* [B, classes]; character model: [B, T, vocab] */
    vkt_tensor *loss;    /* scalar */
} cli_model;

/* features -> widths[0] -> ... -> widths[n-1] -> classes, relu between (then dropout
 * with probability `dropout` when > 0), He init. */
vkt_status cli_build_mlp(cli_model *m, uint32_t batch, uint32_t features, uint32_t classes,
                         const uint32_t *widths, uint32_t n_widths, float dropout,
                         uint64_t seed);

/* The side of square images of `features` pixels (>= 4), or 0 if they are not. */
uint32_t cli_image_side(uint32_t features);
/* The small CNN on side x side images given as rows of features = side^2 pixels
 * (cli_image_side must accept them):
 * conv(1->16, 3x3, pad 1) relu maxpool(2), conv(16->32, 3x3, pad 1) relu maxpool(2),
 * linear to classes. */
vkt_status cli_build_cnn(cli_model *m, uint32_t batch, uint32_t features, uint32_t classes,
                         uint64_t seed);

/* A decoder-only transformer on characters (GPT-style, pre-norm): token and position
 * embeddings of `width`, `layers` blocks of causal self-attention (`heads` heads) and a
 * 4x gelu MLP, each with a residual connection, a final layer norm and a linear head to
 * the vocabulary. Dropout p after the embeddings, in attention and after each block's
 * branches. */
typedef struct cli_lm_shape {
    uint32_t vocab, context, width, layers, heads;
    float dropout;
    int rms_norm; /* RMSNorm (gamma only) instead of layer normalization */
    int silu;     /* SiLU instead of GELU in the MLPs */
} cli_lm_shape;
vkt_status cli_build_charlm(cli_model *m, uint32_t batch, const cli_lm_shape *s, uint64_t seed);

#endif
