/* torch_map.h - the built-in name maps of `vkt train --init-map torch` (docs/import.md):
 * PyTorch's parameter names for each of vkt train's models, written as the PyTorch modules
 * in tests/import/make_fixtures.py write them, to the names tools/models.c gives. */
#ifndef VKT_TOOLS_TORCH_MAP_H
#define VKT_TOOLS_TORCH_MAP_H

#include <stddef.h>
#include <stdint.h>

/* What the map depends on. */
typedef struct cli_torch_model {
    const char *model;   /* "mlp", "cnn", "charlm" */
    uint32_t n_widths;   /* mlp: hidden layers */
    int dropout;         /* mlp: a Dropout after each hidden ReLU (shifts the indices) */
    uint32_t layers;     /* charlm: blocks */
    int rms_norm;        /* charlm: norms without a bias */
} cli_torch_model;

/* The map's text into buf (vkt_import_options.map). Returns 0 if it does not fit or the
 * model is unknown.
 *   mlp:    nn.Sequential(Linear, ReLU, [Dropout,] ..., Linear): w<k> <- <i>.weight
 *           (transposed), b<k> <- <i>.bias, i = 2(k-1), or 3(k-1) with dropout
 *   cnn:    nn.Sequential(Conv2d, ReLU, MaxPool2d, Conv2d, ReLU, MaxPool2d, Flatten,
 *           Linear): conv1 <- 0, conv2 <- 3, fc <- 7 (its weight transposed)
 *   charlm: nanoGPT's names: tok_emb <- transformer.wte.weight, pos_emb <- transformer.wpe.
 *           weight, h<l>.ln1 <- transformer.h.<l>.ln_1, qkv <- attn.c_attn, proj <- attn.
 *           c_proj, ln2 <- ln_2, fc <- mlp.c_fc, fc2 <- mlp.c_proj, ln_f <- transformer.
 *           ln_f, head <- lm_head (Linear weights transposed; gamma <- weight, beta <- bias) */
int cli_torch_map(const cli_torch_model *m, char *buf, size_t size);

#endif
