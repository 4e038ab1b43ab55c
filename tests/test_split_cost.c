/* The automatic split's cost model (engine/graph/split_auto.c, docs/model_parallel.md)
 * with stages that keep their activations or recompute their forward:
 *  - graph_split_choose on set costs (measured times vary; these do not): n equal ops of
 *    forward 1 and backward 2 cut where the stages balance, at the middle when stages keep
 *    their activations (forward once), earlier when every stage but the last runs its
 *    forward again (4 per op there, 3 on the last): 2 stages of 14 ops cut at 7 (keep)
 *    and at 6 (recompute), 3 stages of 20 ops at 6 and 12 only when recomputing;
 *  - vkt_graph_split refuses an unknown recompute value, and accepts all three. */
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "graph/stage.h"

enum { MAXN = 20 };

/* n ops of cost 3 (forward 1 + backward 2), every cut allowed and sending one value */
static int cuts_of(uint32_t n, uint32_t P, int recompute, uint32_t *cut)
{
    double cost[MAXN], redo[MAXN], cross[MAXN + 1];
    uint8_t ok[MAXN + 1];
    for (uint32_t k = 0; k < n; k++) {
        cost[k] = 3;
        redo[k] = 1;
    }
    for (uint32_t j = 0; j <= n; j++) {
        ok[j] = j > 0 && j < n;
        cross[j] = 1;
    }
    graph_split_costs c = {.n = n, .cost = cost, .redo = recompute ? redo : NULL,
                           .cut_ok = ok, .cross = cross};
    return graph_split_choose(&c, P, 0.05, cut);
}

static void test_choose(void)
{
    uint32_t keep[2], redo[2];
    int a = cuts_of(14, 2, 0, keep), b = cuts_of(14, 2, 1, redo);
    /* keep: 7 | 7 ops cost 21 | 21 (6 | 8: 24 > 1.05 x 21); recompute: 6 | 8 ops cost
     * 24 | 24 (7 | 7: 28 | 21) */
    TH_CHECK(a && b && keep[0] == 7 && redo[0] == 6, "2 stages of 14 ops: keep cuts at %u "
             "(7), recompute at %u (6)", keep[0], redo[0]);
    a = cuts_of(20, 3, 0, keep);
    b = cuts_of(20, 3, 1, redo);
    /* keep: every stage at most 7 ops (21; 8 is 24 > 22.05); recompute: 6, 6, 8 ops
     * (24 each) is the only split within 25.2 */
    int keep_ok = a && keep[0] <= 7 && keep[1] - keep[0] <= 7 && 20 - keep[1] <= 7;
    TH_CHECK(keep_ok && b && redo[0] == 6 && redo[1] == 12 &&
             (keep[0] != redo[0] || keep[1] != redo[1]), "3 stages of 20 ops: keep cuts at "
             "%u, %u (<= 7 ops each), recompute at %u, %u (6, 12)", keep[0], keep[1],
             redo[0], redo[1]);
}

static void test_option(void)
{
    vkt_graph_options go = {.seed = 1};
    vkt_graph *g = NULL;
    vkt_graph_create(&go, &g);
    vkt_shape xs = {2, {4, 6}}, ws = {2, {6, 6}};
    vkt_tensor *x = vkt_input(g, "x", &xs), *y = vkt_input_labels(g, "y", 4);
    vkt_tensor *h = vkt_relu(g, vkt_matmul(g, x, vkt_param(g, "w1", &ws, NULL)));
    vkt_tensor *loss = vkt_softmax_cross_entropy(g, vkt_matmul(g, h, vkt_param(g, "w2", &ws,
                                                                              NULL)), y);
    vkt_split_options so = {.stages = 2, .cost = VKT_SPLIT_COST_PARAMS,
                            .recompute = (vkt_recompute)9};
    vkt_status st = vkt_graph_split(g, loss, &so, NULL);
    TH_CHECK(st == VKT_ERROR_INVALID_ARGUMENT && strstr(vkt_last_error(), "recompute"),
             "an unknown recompute is refused: %s", vkt_last_error());
    vkt_recompute all[] = {VKT_RECOMPUTE_AUTO, VKT_RECOMPUTE_ALWAYS, VKT_RECOMPUTE_NEVER};
    for (int i = 0; i < 3; i++) {
        so.recompute = all[i];
        st = vkt_graph_split(g, loss, &so, NULL);
        TH_CHECK(st == VKT_OK, "recompute %d accepted: %s", (int)all[i], vkt_last_error());
    }
    vkt_graph_destroy(g);
}

int main(void)
{
    th_init_host("test_split_cost");
    test_choose();
    test_option();
    return th_finish();
}
