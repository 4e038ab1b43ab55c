/*
 * mnist_cnn - the job `vkt train --model cnn` runs (the shipped digits; batch 64, SGD with
 * momentum 0.9, learning rate 0.1 along a cosine, 12 epochs), written out with the public
 * API: a small convolutional network
 *
 *   [B,784] -> reshape [B,1,28,28] -> conv 3x3 (1->16, pad 1) relu maxpool 2
 *           -> conv 3x3 (16->32, pad 1) relu maxpool 2 -> [B,32*7*7] -> linear 10
 *
 * trained with vkt_trainer_fit (batches from a seeded loader inside the trainer) and a
 * progress callback that evaluates on the test split after every epoch.
 *
 * Usage: mnist_cnn [DATA_DIR [EPOCHS]]  (default: $VKT_DATA_DIR, else data/mnist; 12)
 *
 * Ends with "result: test_accuracy=0.9xxx test_loss=0.xxxx"; on the shipped digits the
 * accuracy after 12 epochs is at least 0.97 (about 45 s on lavapipe, 2 cores). Exits 0
 * on success, 1 with the status and message on failure.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <vkt.h>

#define BATCH 64
#define SEED 1

typedef struct run {
    vkt_trainer *trainer;
    const vkt_dataset *test;
    vkt_tensor *images, *logits;
    uint64_t steps_per_epoch;
    vkt_eval_result eval;
} run;

/* After every step; evaluates at the end of each epoch. Nonzero stops training. */
static int progress(void *user, uint64_t step, uint64_t total, float loss)
{
    run *r = user;
    (void)total;
    if (step % r->steps_per_epoch != 0)
        return 0;
    vkt_status st = vkt_trainer_evaluate(r->trainer, r->test, r->images, r->logits, &r->eval);
    if (st != VKT_OK) {
        fprintf(stderr, "mnist_cnn: evaluation: %s\n", vkt_trainer_errmsg(r->trainer));
        return 1;
    }
    printf("epoch %llu  loss=%.4f  test_accuracy=%.4f  test_loss=%.4f\n",
           (unsigned long long)(step / r->steps_per_epoch), loss, r->eval.accuracy,
           r->eval.loss);
    fflush(stdout);
    return 0;
}

/* A conv weight [out, in, 3, 3] (He initialization) and its bias [out] (zeros). */
static vkt_tensor *conv3x3(vkt_graph *g, vkt_tensor *x, uint32_t in, uint32_t out,
                           const char *name)
{
    char wname[32], bname[32];
    snprintf(wname, sizeof wname, "%s.w", name);
    snprintf(bname, sizeof bname, "%s.b", name);
    vkt_tensor *w = vkt_param(g, wname, &(vkt_shape){4, {out, in, 3, 3}},
                              &(vkt_init){.kind = VKT_INIT_HE});
    vkt_tensor *b = vkt_param(g, bname, &(vkt_shape){1, {out}}, NULL);
    vkt_conv2d_options same = {.pad_h = 1, .pad_w = 1}; /* keeps 28x28 and 14x14 */
    return vkt_conv2d(g, x, w, b, &same);
}

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : getenv("VKT_DATA_DIR");
    uint64_t epochs = argc > 2 ? strtoull(argv[2], NULL, 10) : 12;
    if (!dir)
        dir = "data/mnist";
    vkt_dataset *train = NULL, *test = NULL;
    vkt_graph *graph = NULL;
    vkt_instance *instance = NULL;
    run r = {0};
    vkt_status st = vkt_dataset_load_mnist(dir, &train, &test);
    const char *what = "loading the data";
    if (st == VKT_OK && vkt_dataset_features(train) != 28 * 28) {
        fprintf(stderr, "mnist_cnn: 28x28 images expected, %s has %u features\n", dir,
                vkt_dataset_features(train));
        goto done;
    }
    if (st == VKT_OK) {
        what = "building the model";
        vkt_graph_options go = {.seed = SEED};
        st = vkt_graph_create(&go, &graph);
    }
    if (st == VKT_OK) {
        r.images = vkt_input(graph, "images", &(vkt_shape){2, {BATCH, 784}});
        vkt_tensor *labels = vkt_input_labels(graph, "labels", BATCH);
        /* 0 in a reshape target: inferred (the batch, whatever the model's batch is). */
        vkt_tensor *h = vkt_reshape(graph, r.images, &(vkt_shape){4, {0, 1, 28, 28}});
        h = vkt_max_pool2d(graph, vkt_relu(graph, conv3x3(graph, h, 1, 16, "conv1")), 2, 2, 0);
        h = vkt_max_pool2d(graph, vkt_relu(graph, conv3x3(graph, h, 16, 32, "conv2")), 2, 2, 0);
        h = vkt_reshape(graph, h, &(vkt_shape){2, {0, 32 * 7 * 7}});
        vkt_tensor *w = vkt_param(graph, "fc.w", &(vkt_shape){2, {32 * 7 * 7, 10}},
                                  &(vkt_init){.kind = VKT_INIT_GLOROT});
        vkt_tensor *b = vkt_param(graph, "fc.b", &(vkt_shape){1, {10}}, NULL);
        r.logits = vkt_linear(graph, h, w, b);
        vkt_tensor *loss = vkt_softmax_cross_entropy(graph, r.logits, labels);
        st = vkt_graph_status(graph);
        if (st == VKT_OK) {
            what = "creating the trainer";
            r.steps_per_epoch = vkt_dataset_count(train) / BATCH;
            if (r.steps_per_epoch == 0) {
                fprintf(stderr, "mnist_cnn: %s has %u training samples, fewer than a batch "
                        "of %d\n", dir, vkt_dataset_count(train), BATCH);
                goto done;
            }
            vkt_trainer_options o = {
                .batch = BATCH,
                .optimizer = {.kind = VKT_OPTIMIZER_SGD, .lr = 0.1f, .momentum = 0.9f,
                              .schedule = VKT_SCHEDULE_WARMUP_COSINE,
                              .total_steps = epochs * r.steps_per_epoch}};
            st = vkt_instance_create(NULL, &instance);
            if (st == VKT_OK)
                st = vkt_trainer_create(instance, graph, loss, &o, &r.trainer);
        }
        if (st == VKT_OK) {
            what = "training";
            r.test = test;
            st = vkt_trainer_fit(r.trainer, train, r.images, labels, epochs * r.steps_per_epoch,
                                 SEED, progress, &r);
        }
    }
    if (st != VKT_OK)
        fprintf(stderr, "mnist_cnn: %s: %s: %s\n", what, vkt_status_name(st),
                r.trainer ? vkt_trainer_errmsg(r.trainer)
                : graph && vkt_graph_status(graph) ? vkt_graph_errmsg(graph)
                                                   : vkt_last_error());
    else
        printf("result: test_accuracy=%.4f test_loss=%.4f\n", r.eval.accuracy, r.eval.loss);
done:
    vkt_trainer_destroy(r.trainer);
    vkt_instance_destroy(instance);
    vkt_graph_destroy(graph);
    vkt_dataset_destroy(train);
    vkt_dataset_destroy(test);
    return st == VKT_OK && r.eval.count ? 0 : 1;
}
