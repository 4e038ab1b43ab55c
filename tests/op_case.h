/*
 * op_case.h - checking an op through a graph (tests/test_graph_ops.c, test_layers.c): a
 * case builds y from random parameters (and fixed inputs), takes loss = sum(y * r) with r
 * random, then (a) compares the double reference's backward with central differences of
 * its forward, (b) runs one device step and compares y and every parameter's gradient
 * with the reference, fused and unfused, and (c) runs the step in VKT_CHECK mode, which
 * must find nothing.
 */
#ifndef VKT_TEST_OP_CASE_H
#define VKT_TEST_OP_CASE_H

#include "graph/graph.h"
#include "harness.h"

#define OC_MAX_INPUTS 4

typedef struct op_case {
    const char *name;
    vkt_graph *g;
    vkt_tensor *params[8];
    uint32_t n_params;
    vkt_tensor *y, *r, *labels, *loss;
    int32_t labels_data[64];
    vkt_tensor *inputs[OC_MAX_INPUTS]; /* fixed fp32 inputs and their data (owned) */
    float *input_data[OC_MAX_INPUTS];
    uint32_t n_inputs;
    float rtol, atol; /* device vs reference tolerances (begin: 1e-4, 1e-5) */
} op_case;

/* The context device steps run on. */
void oc_set_context(vkt_context *ctx);
op_case begin(const char *name);
/* A parameter of nd dimensions, uniform in [-1, 1). */
vkt_tensor *P(op_case *c, uint32_t nd, uint32_t d0, uint32_t d1, uint32_t d2);
/* The same with 4 dimensions. */
vkt_tensor *P4(op_case *c, uint32_t d0, uint32_t d1, uint32_t d2, uint32_t d3);
/* Random integer labels [batch] in [0, classes). */
vkt_tensor *labels(op_case *c, uint32_t batch, uint32_t classes);
/* Labels of a shape (count <= 64) in [0, classes). */
vkt_tensor *labels_shape(op_case *c, const vkt_shape *s, uint32_t classes);
/* A fixed input with a copy of `data` (graph_count(s) floats). */
vkt_tensor *oc_input(op_case *c, const char *name, const vkt_shape *s, const float *data);
void finish(op_case *c, vkt_tensor *y);
/* Instead of finish: the case's output is a scalar loss op used as the model's loss itself
 * (no r), as training uses it: a loss the rewrite fuses with its input's gradient. */
void finish_loss(op_case *c, vkt_tensor *loss);
void run_case(op_case *c);

#endif
