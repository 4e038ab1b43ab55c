/*
 * polynomial_fit - fit the quadratic y = 5 x^2 + 3 as a linear model over features.
 *
 * Shows: feature engineering on the host (each sample x becomes the row [x^2, x, 1]),
 * a graph with no bias (vkt_linear with b = NULL: pred = features w, w [3, 1]), the
 * Adam optimizer at learning rate 0.1 through a vkt_trainer, and fresh samples every
 * step: 1,000 steps of 100 samples, x uniform in [-2, 2), from a fixed seed.
 *
 * It prints the loss every 200 steps, then
 *
 *   result: weights=[5.0000, 0.0000, 3.0000] (true [5, 0, 3])
 *
 * (the coefficients of x^2, x and 1), each within 0.1 of the true value. Exits 0 on
 * success, 1 with the status name and message on any failure.
 */
#include <stdint.h>
#include <stdio.h>

#include <vkt.h>

#define BATCH 100
#define STEPS 1000

/* Runs a vktrain call; on failure prints the status and the message (`msg` is evaluated
 * after the call, so it sees the failure) and jumps to the cleanup. */
#define TRY(call, msg)                                                                  \
    do {                                                                                \
        vkt_status st_ = (call);                                                        \
        if (st_ != VKT_OK) {                                                            \
            fprintf(stderr, "polynomial_fit: %s: %s: %s\n", #call, vkt_status_name(st_), \
                    (msg));                                                             \
            goto done;                                                                  \
        }                                                                               \
    } while (0)

/* A small seeded generator (xorshift64*), so the samples are the same on every libc. */
static uint64_t rng_state = 7;

static float uniform(void) /* [0, 1) */
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (float)((rng_state * 2685821657736338717ull) >> 40) / 16777216.0f;
}

int main(void)
{
    int rc = 1;
    vkt_instance *instance = NULL;
    vkt_graph *graph = NULL;
    vkt_trainer *trainer = NULL;

    /* pred[B,1] = features[B,3] w[3,1]; loss = mean((pred - y)^2) */
    TRY(vkt_graph_create(NULL, &graph), vkt_last_error());
    vkt_tensor *features = vkt_input(graph, "features", &(vkt_shape){2, {BATCH, 3}});
    vkt_tensor *y = vkt_input(graph, "y", &(vkt_shape){2, {BATCH, 1}});
    vkt_tensor *w = vkt_param(graph, "w", &(vkt_shape){2, {3, 1}}, NULL); /* zeros */
    vkt_tensor *loss = vkt_mse(graph, vkt_linear(graph, features, w, NULL), y);
    TRY(vkt_graph_status(graph), vkt_graph_errmsg(graph));

    TRY(vkt_instance_create(NULL, &instance), vkt_last_error());
    vkt_trainer_options options = {
        .batch = BATCH,
        .optimizer = {.kind = VKT_OPTIMIZER_ADAM, .lr = 0.1f},
    };
    TRY(vkt_trainer_create(instance, graph, loss, &options, &trainer), vkt_last_error());

    for (int step = 0; step < STEPS; step++) {
        float xf[BATCH][3], ys[BATCH];
        for (int i = 0; i < BATCH; i++) {
            float x = 4.0f * uniform() - 2.0f;
            xf[i][0] = x * x;
            xf[i][1] = x;
            xf[i][2] = 1.0f;
            ys[i] = 5.0f * x * x + 3.0f;
        }
        vkt_feed feeds[] = {{features, xf}, {y, ys}};
        float batch_loss;
        TRY(vkt_trainer_step(trainer, feeds, 2, &batch_loss), vkt_trainer_errmsg(trainer));
        if (step == 0 || (step + 1) % 200 == 0)
            printf("step %4d  loss %.6g\n", step + 1, batch_loss);
    }

    float wf[3];
    TRY(vkt_trainer_read(trainer, w, wf, 3), vkt_trainer_errmsg(trainer));
    printf("result: weights=[%.4f, %.4f, %.4f] (true [5, 0, 3])\n", wf[0], wf[1], wf[2]);
    rc = 0;

done:
    vkt_trainer_destroy(trainer);
    vkt_graph_destroy(graph);
    vkt_instance_destroy(instance);
    return rc;
}
