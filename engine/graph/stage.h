/*
 * stage.h - model parallelism in the graph layer: a graph whose ops are placed on stages
 * (vkt_graph_set_stage) cut into one sub-graph per stage, each compiled into its own
 * model on its own context (engine/parallel/pipe_engine.c and pipe_sched.c run them).
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
 *  - every op may go on any stage, dropout and batch normalization included. A sending
 *    stage computes its values with a training forward and again, with the backward,
 *    once the gradient comes back: dropout and attention dropout read their step and
 *    row base from the control block, so both runs draw the same masks (those of one
 *    model over the whole batch), and batch norm's running averages move in the second
 *    run only (runtime.h: graph_model_forward_train).
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
#include "graph/runtime.h" /* graph_stage, graph_split, graph_split_stages */

/* The automatic split's cost model (split_auto.c), reachable by tests: n ops in build
 * order, each with cost[k] (forward + backward) and redo[k] (its forward again, charged on
 * every stage but the last; NULL: stages keep their activations and run it once),
 * cut_ok[j] and cross[j] (bytes) per cut j (ops [0, j) before ops [j, n)). */
typedef struct graph_split_costs {
    uint32_t n;
    const double *cost, *redo;
    const uint8_t *cut_ok;
    const double *cross;
} graph_split_costs;

/* The P - 1 cuts into cut[]: smallest largest stage cost, then the fewest crossing bytes
 * among splits within (1 + tol) of it. Returns 0 when no split exists (or no memory). */
int graph_split_choose(const graph_split_costs *c, uint32_t P, double tol, uint32_t *cut);

#endif
