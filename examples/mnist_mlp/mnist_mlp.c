/*
 * mnist_mlp - the job `vkt train` runs by default (the shipped digits, a 784-256-128-10
 * MLP, batch 128), written out with the public API. Its optimizer settings are its own:
 * 10 epochs at a peak learning rate of 0.2, without dropout or weight decay, reach about
 * 0.96 in a few seconds on lavapipe.
 *
 * Shows: loading an MNIST-style folder (vkt_dataset_load_mnist), the multilayer
 * perceptron (vkt_linear layers with relu, He initialisation, Glorot for the output), softmax cross-entropy on integer labels, shuffled batches from a
 * vkt_loader fed to a vkt_trainer (SGD with momentum and a cosine learning-rate
 * schedule), and evaluation on the test split after every epoch (vkt_trainer_evaluate).
 *
 * Usage: mnist_mlp [DATA_DIR]   (default: $VKT_DATA_DIR, else data/mnist, the digits
 * shipped with vktrain: 8,000 for training and 2,000 for testing)
 *
 * It prints one line per epoch and ends with
 *
 *   result: test_accuracy=0.9xxx test_loss=0.xxxx
 *
 * where the accuracy is at least 0.95 on the shipped digits. Exits 0 on success, 1 with
 * the status name and message on any failure.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <vkt.h>

#define BATCH 128
#define EPOCHS 10
#define SEED 1

/* Runs a vktrain call; on failure prints the status and the message (`msg` is evaluated
 * after the call, so it sees the failure) and jumps to the cleanup. */
#define TRY(call, msg)                                                                  \
    do {                                                                                \
        vkt_status st_ = (call);                                                        \
        if (st_ != VKT_OK) {                                                            \
            fprintf(stderr, "mnist_mlp: %s: %s: %s\n", #call, vkt_status_name(st_),      \
                    (msg));                                                             \
            goto done;                                                                  \
        }                                                                               \
    } while (0)

static double seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* One fully connected layer x[B,in] -> [B,out]: weights [in,out], bias [out] (zeros). */
static vkt_tensor *dense(vkt_graph *g, vkt_tensor *x, uint32_t in, uint32_t out,
                         vkt_init_kind init, const char *name)
{
    char wname[32], bname[32];
    snprintf(wname, sizeof wname, "%s.w", name);
    snprintf(bname, sizeof bname, "%s.b", name);
    vkt_tensor *w = vkt_param(g, wname, &(vkt_shape){2, {in, out}}, &(vkt_init){.kind = init});
    vkt_tensor *b = vkt_param(g, bname, &(vkt_shape){1, {out}}, NULL);
    return vkt_linear(g, x, w, b);
}

int main(int argc, char **argv)
{
    int rc = 1;
    const char *dir = argc > 1 ? argv[1] : getenv("VKT_DATA_DIR");
    if (!dir)
        dir = "data/mnist";
    vkt_dataset *train = NULL, *test = NULL;
    vkt_loader *loader = NULL;
    vkt_graph *graph = NULL;
    vkt_instance *instance = NULL;
    vkt_trainer *trainer = NULL;
    float *x_batch = NULL;
    int32_t *y_batch = NULL;

    TRY(vkt_dataset_load_mnist(dir, &train, &test), vkt_last_error());
    uint32_t features = vkt_dataset_features(train); /* 784 */
    uint32_t classes = vkt_dataset_classes(train);   /* 10 */
    printf("data: %u training and %u test samples from %s\n", vkt_dataset_count(train),
           vkt_dataset_count(test), dir);

    /* The model: two relu layers, then class scores (logits), then the loss. The relu
     * of each layer is fused into its product when the model is compiled. */
    vkt_graph_options graph_options = {.seed = SEED};
    TRY(vkt_graph_create(&graph_options, &graph), vkt_last_error());
    vkt_tensor *images = vkt_input(graph, "images", &(vkt_shape){2, {BATCH, features}});
    vkt_tensor *labels = vkt_input_labels(graph, "labels", BATCH);
    vkt_tensor *h = vkt_relu(graph, dense(graph, images, features, 256, VKT_INIT_HE, "fc1"));
    h = vkt_relu(graph, dense(graph, h, 256, 128, VKT_INIT_HE, "fc2"));
    vkt_tensor *logits = dense(graph, h, 128, classes, VKT_INIT_GLOROT, "fc3");
    vkt_tensor *loss = vkt_softmax_cross_entropy(graph, logits, labels);
    TRY(vkt_graph_status(graph), vkt_graph_errmsg(graph));

    /* Batches in a new random order every epoch; the last partial batch is dropped. */
    vkt_loader_options loader_options = {.batch = BATCH, .seed = SEED};
    TRY(vkt_loader_create(train, &loader_options, &loader), vkt_last_error());
    uint32_t steps_per_epoch = vkt_loader_batches_per_epoch(loader);

    /* SGD with momentum; the learning rate decays from 0.2 to 0 along a cosine over the
     * whole run (no warmup). */
    TRY(vkt_instance_create(NULL, &instance), vkt_last_error());
    vkt_trainer_options options = {
        .batch = BATCH,
        .optimizer = {.kind = VKT_OPTIMIZER_SGD, .lr = 0.2f, .momentum = 0.9f,
                      .schedule = VKT_SCHEDULE_WARMUP_COSINE,
                      .total_steps = (uint64_t)EPOCHS * steps_per_epoch},
    };
    TRY(vkt_trainer_create(instance, graph, loss, &options, &trainer), vkt_last_error());
    x_batch = malloc((size_t)BATCH * features * sizeof *x_batch);
    y_batch = malloc((size_t)BATCH * sizeof *y_batch);
    if (!x_batch || !y_batch) {
        fprintf(stderr, "mnist_mlp: out of host memory\n");
        goto done;
    }

    vkt_eval_result eval = {0};
    double start = seconds();
    for (int epoch = 1; epoch <= EPOCHS; epoch++) {
        double loss_sum = 0.0;
        for (uint32_t i = 0; i < steps_per_epoch; i++) {
            uint32_t rows;
            TRY(vkt_loader_next(loader, x_batch, y_batch, &rows), vkt_last_error());
            vkt_feed feeds[] = {{images, x_batch}, {labels, y_batch}};
            float batch_loss;
            TRY(vkt_trainer_step(trainer, feeds, 2, &batch_loss), vkt_trainer_errmsg(trainer));
            loss_sum += batch_loss;
        }
        TRY(vkt_trainer_evaluate(trainer, test, images, logits, &eval),
            vkt_trainer_errmsg(trainer));
        printf("epoch %2d  train_loss=%.4f  test_accuracy=%.4f  test_loss=%.4f  "
               "seconds=%.1f\n", epoch, loss_sum / steps_per_epoch, eval.accuracy, eval.loss,
               seconds() - start);
    }
    printf("result: test_accuracy=%.4f test_loss=%.4f\n", eval.accuracy, eval.loss);
    rc = 0;

done:
    free(x_batch);
    free(y_batch);
    vkt_trainer_destroy(trainer);
    vkt_instance_destroy(instance);
    vkt_graph_destroy(graph);
    vkt_loader_destroy(loader);
    vkt_dataset_destroy(train);
    vkt_dataset_destroy(test);
    return rc;
}
