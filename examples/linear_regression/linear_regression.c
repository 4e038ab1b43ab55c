/*
 * linear_regression - the smallest complete vktrain program: fit y = w*x + b.
 *
 * Shows: making a data set on the host, building a graph (an input, a target, two
 * parameters, vkt_linear and vkt_mse), training it with a vkt_trainer (plain SGD, one
 * batch per step fed from host memory) and reading the learned parameters back.
 *
 * The data: 1,000 points, x uniform in [-1, 1), y = 2.5 x - 1 plus Gaussian noise of
 * standard deviation 0.1, from a fixed seed. It trains for 300 steps and prints the loss
 * every 50 (it falls from about 3 to about 0.01, the noise's variance), then
 *
 *   result: w=2.50xx b=-1.00xx (true w=2.5 b=-1)
 *
 * with w and b within 0.05 of the true values. Exits 0 on success, 1 with the status
 * name and message on any failure.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include <vkt.h>

#define TRUE_W 2.5f
#define TRUE_B -1.0f
#define NOISE 0.1f
#define POINTS 1000
#define BATCH 100
#define STEPS 300

/* Runs a vktrain call; on failure prints the status and the message (`msg` is evaluated
 * after the call, so it sees the failure) and jumps to the cleanup. */
#define TRY(call, msg)                                                                  \
    do {                                                                                \
        vkt_status st_ = (call);                                                        \
        if (st_ != VKT_OK) {                                                            \
            fprintf(stderr, "linear_regression: %s: %s: %s\n", #call,                   \
                    vkt_status_name(st_), (msg));                                       \
            goto done;                                                                  \
        }                                                                               \
    } while (0)

/* A small seeded generator (xorshift64*), so the data are the same on every libc. */
static uint64_t rng_state = 42;

static float uniform(void) /* [0, 1) */
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (float)((rng_state * 2685821657736338717ull) >> 40) / 16777216.0f;
}

static float gaussian(void) /* Box-Muller */
{
    float u = 1.0f - uniform(), v = uniform();
    return sqrtf(-2.0f * logf(u)) * cosf(6.2831853f * v);
}

int main(void)
{
    int rc = 1;
    vkt_instance *instance = NULL;
    vkt_graph *graph = NULL;
    vkt_trainer *trainer = NULL;

    /* The data set: xs[POINTS, 1] and ys[POINTS, 1]. */
    static float xs[POINTS], ys[POINTS];
    for (int i = 0; i < POINTS; i++) {
        xs[i] = 2.0f * uniform() - 1.0f;
        ys[i] = TRUE_W * xs[i] + TRUE_B + NOISE * gaussian();
    }

    /* The model: pred = x w + b, loss = mean((pred - y)^2). */
    TRY(vkt_graph_create(NULL, &graph), vkt_last_error());
    vkt_tensor *x = vkt_input(graph, "x", &(vkt_shape){2, {BATCH, 1}});
    vkt_tensor *y = vkt_input(graph, "y", &(vkt_shape){2, {BATCH, 1}});
    vkt_tensor *w = vkt_param(graph, "w", &(vkt_shape){2, {1, 1}}, NULL); /* zeros */
    vkt_tensor *b = vkt_param(graph, "b", &(vkt_shape){1, {1}}, NULL);
    vkt_tensor *loss = vkt_mse(graph, vkt_linear(graph, x, w, b), y);
    TRY(vkt_graph_status(graph), vkt_graph_errmsg(graph)); /* the first building error */

    /* The trainer: the device (VKT_DEVICES, else device 0) and the optimizer. */
    TRY(vkt_instance_create(NULL, &instance), vkt_last_error());
    vkt_trainer_options options = {
        .batch = BATCH,
        .optimizer = {.kind = VKT_OPTIMIZER_SGD, .lr = 0.1f},
    };
    TRY(vkt_trainer_create(instance, graph, loss, &options, &trainer), vkt_last_error());

    /* Training: the data set in order, one batch of BATCH rows per step. */
    for (int step = 0; step < STEPS; step++) {
        int first = step * BATCH % POINTS;
        vkt_feed feeds[] = {{x, xs + first}, {y, ys + first}};
        float batch_loss;
        TRY(vkt_trainer_step(trainer, feeds, 2, &batch_loss), vkt_trainer_errmsg(trainer));
        if (step == 0 || (step + 1) % 50 == 0)
            printf("step %3d  loss %.5f\n", step + 1, batch_loss);
    }

    float w_fit, b_fit;
    TRY(vkt_trainer_read(trainer, w, &w_fit, 1), vkt_trainer_errmsg(trainer));
    TRY(vkt_trainer_read(trainer, b, &b_fit, 1), vkt_trainer_errmsg(trainer));
    printf("result: w=%.4f b=%.4f (true w=%g b=%g)\n", w_fit, b_fit, TRUE_W, TRUE_B);
    rc = 0;

done:
    vkt_trainer_destroy(trainer); /* before the graph and the instance it uses */
    vkt_graph_destroy(graph);
    vkt_instance_destroy(instance);
    return rc;
}
