/*
 * scaler_mlp.h - what the loss-scaler tests share (test_autocast.c, test_scaler_parallel.c,
 * test_scaler_checkpoint.c): their small MLP and the check that a NaN step is skipped.
 *
 * The MLP: x [16, 12] -> linear 20 + relu (placed on stage 0) -> linear 5 (stage 1) ->
 * softmax cross-entropy; the placement is used only where a trainer asks for 2 stages.
 * Its data: 16 rows of 5 separable classes (th_rand_uniform noise, so th_init's seed makes
 * every rank's batch alike), and the same rows with one NaN (Xnan).
 */
#ifndef VKT_TEST_SCALER_MLP_H
#define VKT_TEST_SCALER_MLP_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

typedef struct scaler_mlp {
    vkt_graph *g;
    vkt_tensor *x, *y, *z, *loss, *w1, *w2;
    float X[16 * 12], Xnan[16 * 12];
    int32_t Y[16];
} scaler_mlp;

static inline void scaler_mlp_make(scaler_mlp *n)
{
    vkt_graph_options go = {.seed = 11};
    vkt_graph_create(&go, &n->g);
    vkt_shape xs = {2, {16, 12}}, w1s = {2, {12, 20}}, b1s = {1, {20}}, w2s = {2, {20, 5}};
    vkt_init he = {VKT_INIT_GLOROT, 0, 0, 0};
    n->x = vkt_input(n->g, "x", &xs);
    n->y = vkt_input_labels(n->g, "y", 16);
    n->w1 = vkt_param(n->g, "w1", &w1s, &he);
    n->w2 = vkt_param(n->g, "w2", &w2s, &he);
    vkt_graph_set_stage(n->g, 0);
    vkt_tensor *h = vkt_relu(n->g, vkt_linear(n->g, n->x, n->w1,
                                              vkt_param(n->g, "b1", &b1s, NULL)));
    vkt_graph_set_stage(n->g, 1);
    n->z = vkt_linear(n->g, h, n->w2, NULL);
    n->loss = vkt_softmax_cross_entropy(n->g, n->z, n->y);
    for (int i = 0; i < 16; i++) {
        n->Y[i] = i % 5;
        for (int j = 0; j < 12; j++)
            n->X[i * 12 + j] = (j % 5 == n->Y[i] ? 1.0f : 0.0f) + th_rand_uniform(-0.3f, 0.3f);
    }
    memcpy(n->Xnan, n->X, sizeof n->X);
    n->Xnan[7] = NAN;
}

/* t (fp32, nonfinite_skips >= 1, never skipped before): a clean step, then a step fed the
 * NaN is skipped (count 1, scale 1, every parameter bit for bit unchanged), and the next
 * clean step applies. `what` names the trainer in the checks. */
static inline void scaler_mlp_nan_step(vkt_trainer *t, const scaler_mlp *n, const char *what)
{
    vkt_feed f[2] = {{n->x, n->X}, {n->y, n->Y}}, fnan[2] = {{n->x, n->Xnan}, {n->y, n->Y}};
    uint64_t count = vkt_trainer_param_count(t), skipped = 0;
    float *before = th_alloc_floats(count), *after = th_alloc_floats(count), scale = 0;
    TH_OK(NULL, vkt_trainer_step(t, f, 2, NULL));
    TH_OK(NULL, vkt_trainer_read_params(t, before, count));
    TH_OK(NULL, vkt_trainer_step(t, fnan, 2, NULL));
    TH_OK(NULL, vkt_trainer_read_params(t, after, count));
    TH_OK(NULL, vkt_trainer_skipped(t, &skipped, &scale));
    TH_CHECK(skipped == 1 && scale == 1.0f && !memcmp(before, after, count * sizeof *after),
             "%s fp32: the NaN step skipped (%llu), parameters unchanged, scale 1 (%g)", what,
             (unsigned long long)skipped, (double)scale);
    TH_OK(NULL, vkt_trainer_step(t, f, 2, NULL));
    TH_OK(NULL, vkt_trainer_read_params(t, after, count));
    TH_CHECK(memcmp(before, after, count * sizeof *after) != 0, "%s: and the next one applies",
             what);
    free(before);
    free(after);
}

#endif
