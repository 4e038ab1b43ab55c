/*
 * stage.h - model parallelism in the graph layer: a graph whose ops are placed on stages
 * (vkt_graph_set_stage) cut into one sub-graph per stage, each compiled into its own
 * model on its own context (engine/parallel/pipeline.c runs them).
 *
 * Placement rules (checked by graph_split_stages, each violation a message):
 *  - every op the loss depends on sits on a stage < n_stages; every stage holds at least
 *    one op, and the loss sits on the last one;
 *  - values flow to higher stages only: an op on stage s reads ops of stages <= s;
 *  - leaves live where they are read: an input or labels tensor is fed to every stage
 *    that reads it; a parameter belongs to the one stage whose ops read it (a parameter
 *    read on two stages, e.g. tied weights, is refused);
 *  - a value crossing stages is batch-major with the batch first ([B, ...]), so a
 *    micro-batch of it is a block of rows;
 *  - no op whose training forward differs from its evaluation forward (dropout, batch
 *    normalization, attention dropout) yet: a sending stage computes its values with an
 *    evaluation forward and again, with the backward, once the gradient comes back.
 *
 * Stage s's sub-graph holds copies of its ops (same names, parameters with the same
 * initial values), a vkt_input for every value it receives (its gradient is what it
 * sends back), and, unless it is the last stage, the surrogate loss
 *     L_s = sum_j sum(out_j * grad_j)
 * over the values out_j it sends, with grad_j a vkt_input fed the gradient that comes
 * back: dL_s/dout_j = grad_j exactly (a product by the broadcast 1 of the sum), so the
 * backward from L_s gives the stage's parameters the gradients the whole graph's
 * backward would.
 */
#ifndef VKT_GRAPH_STAGE_H
#define VKT_GRAPH_STAGE_H

#include "graph/graph.h"

#define GRAPH_MAX_STAGES VKT_MAX_STAGES

typedef struct graph_stage {
    vkt_graph *g;          /* the stage's sub-graph (owned) */
    vkt_tensor *loss;      /* the loss (last stage) or the surrogate L_s */
    vkt_tensor **map;      /* full graph id -> its copy in g (NULL: not on this stage) */
    uint32_t ops;          /* ops of the full graph placed here */
    uint32_t *recv;        /* full graph ids of the values received (inputs of g) */
    uint32_t n_recv;
    uint32_t *send;        /* full graph ids of the values sent to later stages (kept) */
    vkt_tensor **send_grad; /* per sent value: the input of g fed its gradient */
    uint32_t n_send;
    uint32_t *feed;        /* full graph ids of the graph's inputs and labels read here */
    uint32_t n_feed;
    uint32_t *params;      /* full graph ids of the parameters (and states) placed here */
    uint32_t n_params;
} graph_stage;

typedef struct graph_split {
    const vkt_graph *g;
    uint32_t n_stages;
    graph_stage *stage;
    uint32_t *node_stage;  /* per full graph node: its stage (UINT32_MAX: not needed by
                              the loss; inputs and labels: the first stage reading it) */
    uint32_t batch;        /* the batch the graph was built with */
} graph_split;

/* Cuts g into n_stages sub-graphs by the nodes' stages. On failure returns the status
 * with a message in msg (naming the op or tensor) and leaves *out empty. */
vkt_status graph_split_stages(const vkt_graph *g, const vkt_tensor *loss, uint32_t n_stages,
                              graph_split *out, char *msg, size_t msg_size);
void graph_split_free(graph_split *s);
/* Why op t cannot go into a pipeline of several stages yet (NULL: it can). */
const char *graph_stage_unsupported(const vkt_tensor *t);

#endif
